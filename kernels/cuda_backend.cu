/* cuda_backend.cu — the CUDA backend: a device-resident Qwen3 / Qwen3-MoE model behind
 * engine/backend.h (backend "cuda", modes cuda.decode / cuda.prefill / cuda.chat).
 *
 * Invariants:
 * - every weight is uploaded once at open, in its GGUF block format (no dequantized copies;
 *   norms, which are vectors, are the exception: FP32 like the twin's); expert e of a 3-D expert
 *   tensor is read in place at base + e * stride;
 * - the KV cache lives on the device, FP32 (a cell's `kv: f16`, backend_config.kv_f16, selects
 *   FP16; reported in base.kv_f16);
 * - prefill projections: FP32 tiles + SGEMM (a cell's `prefill: f16|bf16`, backend_config.prefill:
 *   16-bit tiles; reported in base.prefill, so receipts record what ran); the FP16
 *   configuration fails parity on the tiny MoE chat cell (min cosine 0.989, predicted by
 *   GATE_REF_EMULATE in tests/test_emulation.c) and has its own tolerance (docs/kernels.md);
 * - decode GEMV: v1 or v2 (backend_config.knob[KNOB_GEMV], reported in base.knob; k_gemv.cu);
 * - MoE routing: v1 or v2 (backend_config.knob[KNOB_ROUTE], reported in base.knob; k_moe.cu);
 * - attention: v1 or split (backend_config.knob[KNOB_ATTN], reported in base.knob; k_attn.cu):
 * split-KV for chunks of up to K_ATTN_SPLIT_TOKENS tokens (decode), v1 for longer ones;
 * - decode launches: eager or one CUDA graph (backend_config.knob[KNOB_GRAPH] "on", reported in
 * base.knob): a one-token step without taps or faults is captured once (the position read from
 * device memory, attention sized for n_ctx keys) and replayed at every position; eager otherwise,
 * and for good, with the reason in base.knob[KNOB_GRAPH], when capture or replay fails. The kernels
 * and their arguments are the eager step's, so the results are bit-identical (decode_graph);
 * - memory is planned before anything is allocated: weights + KV + workspace against
 *   cudaMemGetInfo, refusing with the numbers;
 * - inside a forward call nothing synchronizes with the host until the logits are copied back
 *   (taps, only when asked, copy per layer); the MoE expert ids never leave the device;
 * - every CUDA / cuBLAS call is checked into a status naming the call, file:line and the error;
 *   there is no CPU fallback: a failure is a failed forward, reported as such;
 * - faults are the backend's own copy (base.faults, set by backend_set_faults), passed to the
 *   kernels by value at every chunk and applied on the device through the same inline
 *   functions as the twin (fault_skips_qk_norm_inline, route_select_inline; the numeric faults
 *   of issue 22 §3 through fault_kv_factor_inline / fault_rope_factor_inline /
 *   fault_drops_diag_inline in their kernels, and scale through k_fault_scale on the named
 *   product's output, the fused SwiGLU GEMV left for the unfused pair under a gate/up scale);
 * - info.kernel_launches counts every kernel and cuBLAS call, info.device_bytes every byte
 *   moved between host and device (weights at open, tokens, logits, taps); the argument
 *   checks, chunking, n_past and the forwards / tokens counters are engine/backend.c's.
 * CPU twin of the whole step: engine/ref.c ref_forward_chunk(); of each kernel: k_ops.cuh.
 * Prefill: a chunk of >= GEMM_MIN_TOKENS tokens runs its dense projections through cuBLAS
 * (k_prefill.cu); shorter chunks (decode) use the GEMV kernels.
 * Start reading: forward_chunk().
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/ref_ops.h"
#include "kernels/k_ops.cuh"

#define GEMM_MIN_TOKENS 8          /* chunks this long use the cuBLAS projections */
#define MAX_BATCH 512              /* tokens per device chunk; backend_forward chunks longer runs */
#define TILE_ELEMS (16u << 20)     /* dequantized weight tile: 16 Mi elements (32 MiB) */
#define BLAS_RESERVE (96ull << 20) /* cuBLAS handle + its workspace, and the context's slack */
#define ALIGN 256

#define STR2(x) #x
#define STR(x) STR2(x)
#ifdef __CUDA_ARCH_LIST__
#define ARCH_LIST STR(__CUDA_ARCH_LIST__)
#else
#define ARCH_LIST "?"
#endif

struct dlayer {
    struct k_weight wq, wk, wv, wo;
    struct k_weight ffn_gate, ffn_up, ffn_down;              /* qwen3 */
    struct k_weight gate_inp, gate_exps, up_exps, down_exps; /* qwen3moe */
    int fused; /* gate and up share type and shape: one SwiGLU GEMV */
};

struct cuda_be {
    struct backend base; /* first: a struct cuda_be * is a struct backend * */
    const struct model *m;
    struct backend_info info; /* backend, device, launches, bytes (backend.c adds the rest) */
    struct k_stream ks;
    struct k_gemm_ws gws;
    int kv_f32;
    int64_t E, qd, kvd, F, X, K, V;
    uint8_t *wmem, *kvmem, *work; /* the three device allocations */
    struct dlayer *L;             /* n_layer, host array of device views */
    struct k_weight tok_embd, output;
    float *attn_norm, *ffn_norm, *q_norm, *k_norm, *out_norm; /* (L,E) (L,E) (L,hd) (L,hd) (E) */
    float *rope_cos, *rope_sin;                               /* (n_ctx, hd/2) */
    size_t kv_layer_bytes;                                    /* one layer of K (or V) */
    int32_t *tokens, *sel;
    int *dpos;       /* the decode graph's position (one int on the device) */
    float *att_part; /* the split attention's partials (attn split only) */
    int graph;       /* 1: the decode step runs as r->gexec (backend_config.knob[KNOB_GRAPH]) */
    cudaGraphExec_t gexec;  /* the captured decode step (NULL until the first graphed step) */
    uint64_t graph_kernels; /* kernels in gexec, counted into ks.launches at every replay */
    float *x, *xb, *q, *k, *v, *att, *ffa, *ffb, *router, *selw, *kth, *k1th, *moe_y, *logits;
};

/* ---- memory plan ----------------------------------------------------------------------------- */

static size_t align_up(size_t n)
{
    return (n + ALIGN - 1) / ALIGN * ALIGN;
}

static double gib(uint64_t b)
{
    return (double)b / (double)(1ull << 30);
}

/* Carve n bytes from a bump allocator over one allocation (base NULL: only count). */
static void *carve(uint8_t *base, size_t *at, size_t n)
{
    void *p = base ? base + *at : NULL;
    *at += align_up(n ? n : 1);
    return p;
}

static const struct model_weight *layer_weights(const struct model *m, int il, int *count,
                                                const struct model_weight **out)
{
    const struct model_layer *ly = &m->layers[il];
    int n = 0;
    out[n++] = &ly->wq;
    out[n++] = &ly->wk;
    out[n++] = &ly->wv;
    out[n++] = &ly->wo;
    if (m->hp.n_expert == 0) { /* dense */
        out[n++] = &ly->ffn_gate;
        out[n++] = &ly->ffn_up;
        out[n++] = &ly->ffn_down;
    } else {
        out[n++] = &ly->gate_inp;
        out[n++] = &ly->gate_exps;
        out[n++] = &ly->up_exps;
        out[n++] = &ly->down_exps;
    }
    *count = n;
    return out[0];
}

static size_t weight_bytes(const struct model_weight *w)
{
    return (size_t)w->rows * w->row_bytes;
}

/* Workspace layout, shared by the plan (base NULL) and the allocation. */
static size_t layout_work(struct cuda_be *r, uint8_t *base, int n_ctx)
{
    const struct model_hparams *hp = &r->m->hp;
    const size_t B = (size_t)r->base.n_batch, E = (size_t)r->E, hd = hp->head_dim;
    const size_t L = hp->n_layer, K = (size_t)r->K, F = (size_t)r->F;
    size_t at = 0;
    r->attn_norm = (float *)carve(base, &at, L * E * 4);
    r->ffn_norm = (float *)carve(base, &at, L * E * 4);
    r->q_norm = (float *)carve(base, &at, L * hd * 4);
    r->k_norm = (float *)carve(base, &at, L * hd * 4);
    r->out_norm = (float *)carve(base, &at, E * 4);
    r->rope_cos = (float *)carve(base, &at, (size_t)n_ctx * (hd / 2) * 4);
    r->rope_sin = (float *)carve(base, &at, (size_t)n_ctx * (hd / 2) * 4);
    r->tokens = (int32_t *)carve(base, &at, B * 4);
    r->dpos = (int *)carve(base, &at, sizeof(int));
    if (r->ks.attn == 2) /* the split's partials: chunks of up to K_ATTN_SPLIT_TOKENS tokens */
        r->att_part = (float *)carve(
            base, &at,
            k_attention_split_floats(B < K_ATTN_SPLIT_TOKENS ? (int)B : K_ATTN_SPLIT_TOKENS,
                                     (int)hp->n_head, n_ctx, (int)hd) *
                sizeof(float));
    r->x = (float *)carve(base, &at, B * E * 4);
    r->xb = (float *)carve(base, &at, B * E * 4);
    r->q = (float *)carve(base, &at, B * (size_t)r->qd * 4);
    r->att = (float *)carve(base, &at, B * (size_t)r->qd * 4);
    r->k = (float *)carve(base, &at, B * (size_t)r->kvd * 4);
    r->v = (float *)carve(base, &at, B * (size_t)r->kvd * 4);
    r->ffa = (float *)carve(base, &at, B * K * F * 4);
    r->ffb = (float *)carve(base, &at, B * K * F * 4);
    r->logits = (float *)carve(base, &at, B * (size_t)r->V * 4);
    if (hp->n_expert > 0) {
        r->router = (float *)carve(base, &at, B * (size_t)r->X * 4);
        r->sel = (int32_t *)carve(base, &at, B * K * 4);
        r->selw = (float *)carve(base, &at, B * K * 4);
        r->kth = (float *)carve(base, &at, B * 4);
        r->k1th = (float *)carve(base, &at, B * 4);
        r->moe_y = (float *)carve(base, &at, B * K * E * 4);
    }
    if (B >= GEMM_MIN_TOKENS) {
        const size_t max_cols =
            (size_t)(r->qd > r->F ? (r->qd > r->E ? r->qd : r->E) : (r->F > r->E ? r->F : r->E));
        r->gws.tile_elems = TILE_ELEMS > max_cols ? TILE_ELEMS : max_cols;
        r->gws.x16_elems = r->gws.f32 ? 0 : B * max_cols;
        r->gws.tile = carve(base, &at, r->gws.tile_elems * (r->gws.f32 ? 4 : 2));
        r->gws.x16 = carve(base, &at, r->gws.x16_elems * 2);
    }
    return at;
}

/* ---- open ------------------------------------------------------------------------------------ */

static int env_is(const char *name, const char *value)
{
    const char *v = getenv(name);
    return v && !strcmp(v, value);
}

/* The numerics of this open, from the configuration the cell's identity made (issue 25 §2:
 * what ran is what is recorded): cfg->kv_f16 (a cell's `kv: f16`) and cfg->prefill (a cell's
 * `prefill: f16|bf16`; NULL or "" = FP32), reported back in base.kv_f16 and base.prefill. The
 * environment variables that once chose them silently (GATE_CUDA_KV, GATE_CUDA_PREFILL) are
 * refused by name, so an old script cannot run FP16 under an FP32 cell's receipts. */
static int numerics_from_config(struct cuda_be *r, const struct backend_config *cfg,
                                struct gate_err *err)
{
    static const char *const gone[] = {"GATE_CUDA_KV", "GATE_CUDA_PREFILL"};
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(gone[i]);
        if (v && *v)
            return err_set(err, ERR_INPUT,
                           "cuda: %s=%.20s is no longer read: the KV cache and the prefill"
                           " precision are the cell's `kv:` and `prefill:` settings (recorded in"
                           " its receipts); unset it",
                           gone[i], v);
    }
    const char *pf = cfg && cfg->prefill && *cfg->prefill ? cfg->prefill : "f32";
    if (strcmp(pf, "f32") && strcmp(pf, "f16") && strcmp(pf, "bf16"))
        return err_set(err, ERR_INPUT, "cuda: prefill precision '%.20s' is not f32, f16 or bf16",
                       pf);
    r->kv_f32 = !(cfg && cfg->kv_f16);
    r->base.kv_f16 = !r->kv_f32;
    r->gws.f32 = !strcmp(pf, "f32");
    r->gws.bf16 = !strcmp(pf, "bf16");
    snprintf(r->base.prefill, sizeof r->base.prefill, "%s", pf);
    /* the decode GEMV (issue 25 §3): v1 (the default) or v2, reported in base.knob[KNOB_GEMV] so
     * that metrics.ran.gemv says which ran; one results contract, so not a cell setting */
    const char *g =
        cfg && cfg->knob[KNOB_GEMV] && *cfg->knob[KNOB_GEMV] ? cfg->knob[KNOB_GEMV] : "v1";
    if (strcmp(g, "v1") && strcmp(g, "v2"))
        return err_set(err, ERR_INPUT, "cuda: GEMV generation '%.20s' is not v1 or v2", g);
    r->ks.gemv = !strcmp(g, "v2") ? 2 : 1;
    snprintf(r->base.knob[KNOB_GEMV], sizeof r->base.knob[KNOB_GEMV], "%s", g);
    /* the MoE routing (issue 25 §3): v1 (the default, one thread per token) or v2 (one warp per
     * token), reported in base.knob[KNOB_ROUTE]; both bit-identical to route_select */
    const char *rt =
        cfg && cfg->knob[KNOB_ROUTE] && *cfg->knob[KNOB_ROUTE] ? cfg->knob[KNOB_ROUTE] : "v1";
    if (strcmp(rt, "v1") && strcmp(rt, "v2"))
        return err_set(err, ERR_INPUT, "cuda: routing generation '%.20s' is not v1 or v2", rt);
    r->ks.route = !strcmp(rt, "v2") ? 2 : 1;
    snprintf(r->base.knob[KNOB_ROUTE], sizeof r->base.knob[KNOB_ROUTE], "%s", rt);
    /* the attention (issue 25 §3): v1 (the default) or split (split-KV for decode chunks),
     * reported in base.knob[KNOB_ATTN]; one results contract, so not a cell setting */
    const char *at =
        cfg && cfg->knob[KNOB_ATTN] && *cfg->knob[KNOB_ATTN] ? cfg->knob[KNOB_ATTN] : "v1";
    if (strcmp(at, "v1") && strcmp(at, "split"))
        return err_set(err, ERR_INPUT, "cuda: attention generation '%.20s' is not v1 or split", at);
    const struct model_hparams *hp = &r->m->hp;
    if (!strcmp(at, "split") &&
        !k_attention_split_shape((int)hp->n_head, (int)hp->n_head_kv, (int)hp->head_dim))
        return err_set(err, ERR_INPUT,
                       "cuda: split attention takes head dimensions up to 256 in multiples of 4;"
                       " this model's is %u (heads %u/%u): use attn v1",
                       hp->head_dim, hp->n_head, hp->n_head_kv);
    r->ks.attn = !strcmp(at, "split") ? 2 : 1;
    snprintf(r->base.knob[KNOB_ATTN], sizeof r->base.knob[KNOB_ATTN], "%s", at);
    /* the decode step as one CUDA graph (issue 25 §3): off (the default) or on, reported in
     * base.knob[KNOB_GRAPH] (which says "eager: why" if it falls back); bit-identical either way */
    const char *gr =
        cfg && cfg->knob[KNOB_GRAPH] && *cfg->knob[KNOB_GRAPH] ? cfg->knob[KNOB_GRAPH] : "off";
    if (strcmp(gr, "off") && strcmp(gr, "on"))
        return err_set(err, ERR_INPUT, "cuda: graph '%.20s' is not off or on", gr);
    r->graph = !strcmp(gr, "on");
    snprintf(r->base.knob[KNOB_GRAPH], sizeof r->base.knob[KNOB_GRAPH], "%s", gr);
    return 0;
}

static int pick_device(char *name, size_t n, struct gate_err *err)
{
    int count = 0, drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return err_set(err, ERR_ENV,
                       "cuda: no usable CUDA device: cudaGetDeviceCount returned"
                       " %s (%s); driver supports CUDA %d.%d, this build's runtime is %d.%d",
                       e == cudaSuccess ? "0 devices" : cudaGetErrorName(e),
                       e == cudaSuccess ? "no device" : cudaGetErrorString(e), drv / 1000,
                       drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    if (drv && drv < rt)
        return err_set(err, ERR_ENV,
                       "cuda: the driver is too old: it supports CUDA %d.%d, this"
                       " build needs %d.%d",
                       drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    int dev = 0;
    const char *want = getenv("GATE_CUDA_DEVICE");
    if (want && *want) {
        dev = atoi(want);
        if (dev < 0 || dev >= count)
            return err_set(err, ERR_ENV,
                           "cuda: GATE_CUDA_DEVICE=%s but the host has %d CUDA"
                           " device(s)",
                           want, count);
    }
    K_CUDA(cudaSetDevice(dev));
    cudaDeviceProp p;
    K_CUDA(cudaGetDeviceProperties(&p, dev));
    if (k_check_image(NULL))
        return err_set(err, ERR_ENV,
                       "cuda: this build has no kernels for %.100s (sm_%d%d); it was"
                       " built for CUDA architectures %s",
                       p.name, p.major, p.minor, ARCH_LIST);
    snprintf(name, n, "%.100s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
             gib(p.totalGlobalMem));
    return 0;
}

/* ops->describe: device 0 (or GATE_CUDA_DEVICE) as the host check and the receipt see it. */
static int cuda_describe(struct backend_device *out, struct gate_err *err)
{
    memset(out, 0, sizeof *out);
    int count = 0;
    cudaDriverGetVersion(&out->driver);
    cudaRuntimeGetVersion(&out->runtime);
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return err_set(err, ERR_ENV, "no CUDA device: cudaGetDeviceCount returned %s (%s)",
                       e == cudaSuccess ? "0 devices" : cudaGetErrorName(e),
                       e == cudaSuccess ? "no device" : cudaGetErrorString(e));
    const char *want = getenv("GATE_CUDA_DEVICE");
    const int dev = want && *want ? atoi(want) : 0;
    if (dev < 0 || dev >= count)
        return err_set(err, ERR_ENV, "GATE_CUDA_DEVICE=%s but the host has %d CUDA device(s)", want,
                       count);
    cudaDeviceProp p;
    K_CUDA(cudaGetDeviceProperties(&p, dev));
    snprintf(out->name, sizeof out->name, "%.255s", p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->total_bytes = (uint64_t)p.totalGlobalMem;
    return 0;
}

static struct k_weight view(const struct model_weight *w, uint8_t *dev, uint32_t n_expert)
{
    struct k_weight k;
    k.data = dev;
    k.type = w->type;
    k.cols = w->cols;
    k.row_bytes = w->row_bytes;
    k.rows = n_expert ? w->rows / n_expert : w->rows;
    k.expert_stride = n_expert ? (size_t)k.rows * w->row_bytes : 0;
    return k;
}

static int upload(struct cuda_be *r, uint8_t *dst, const void *src, size_t n, struct gate_err *err)
{
    K_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
    r->info.device_bytes += n;
    return 0;
}

static int check_weight(const struct model_weight *w, struct gate_err *err)
{
    if (!k_type_supported(w->type))
        return err_set(err, ERR_INPUT,
                       "cuda: tensor '%s' has type %s, which has no CUDA kernel"
                       " (supported: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K)",
                       w->name, quant_name(w->type));
    return 0;
}

/* Upload every weight (in block format) into r->wmem; size it first when r->wmem is NULL. */
static int place_weights(struct cuda_be *r, size_t *total, struct gate_err *err)
{
    const struct model *m = r->m;
    const uint32_t X = m->hp.n_expert; /* 0 on a dense model */
    size_t at = 0;
    int rc;
    uint8_t *p = (uint8_t *)carve(r->wmem, &at, weight_bytes(&m->tok_embd));
    if ((rc = check_weight(&m->tok_embd, err)))
        return rc;
    if (r->wmem && (rc = upload(r, p, m->tok_embd.data, weight_bytes(&m->tok_embd), err)))
        return rc;
    r->tok_embd = view(&m->tok_embd, p, 0);
    if (m->output.data == m->tok_embd.data) { /* tied: one copy */
        r->output = r->tok_embd;
    } else {
        if ((rc = check_weight(&m->output, err)))
            return rc;
        p = (uint8_t *)carve(r->wmem, &at, weight_bytes(&m->output));
        if (r->wmem && (rc = upload(r, p, m->output.data, weight_bytes(&m->output), err)))
            return rc;
        r->output = view(&m->output, p, 0);
    }
    for (int il = 0; il < (int)m->hp.n_layer; il++) {
        const struct model_weight *ws[8];
        int n;
        layer_weights(m, il, &n, ws);
        struct k_weight views[8];
        for (int i = 0; i < n; i++) {
            if ((rc = check_weight(ws[i], err)))
                return rc;
            p = (uint8_t *)carve(r->wmem, &at, weight_bytes(ws[i]));
            if (r->wmem && (rc = upload(r, p, ws[i]->data, weight_bytes(ws[i]), err)))
                return rc;
            /* the three expert tensors are the 3-D ones (indices 5..7 of a MoE layer) */
            views[i] = view(ws[i], p, (X && i >= 5) ? X : 0);
        }
        struct dlayer *d = &r->L[il];
        d->wq = views[0], d->wk = views[1], d->wv = views[2], d->wo = views[3];
        const struct k_weight *g, *u;
        if (X) {
            d->gate_inp = views[4], d->gate_exps = views[5], d->up_exps = views[6];
            d->down_exps = views[7];
            g = &d->gate_exps, u = &d->up_exps;
        } else {
            d->ffn_gate = views[4], d->ffn_up = views[5], d->ffn_down = views[6];
            g = &d->ffn_gate, u = &d->ffn_up;
        }
        d->fused = g->type == u->type && g->rows == u->rows && g->cols == u->cols;
    }
    *total = at;
    return 0;
}

/* Norm vectors (dequantized exactly, as the twin does) and the RoPE tables (built by the twin's
 * own ref_rope_tables(), so host and device rotate by the same floats). */
static int upload_tables(struct cuda_be *r, int n_ctx, struct gate_err *err)
{
    const struct model *m = r->m;
    const struct model_hparams *hp = &m->hp;
    const size_t E = hp->n_embd, hd = hp->head_dim, L = hp->n_layer, half = hd / 2;
    size_t big = (size_t)n_ctx * half;
    if (big < L * E)
        big = L * E;
    float *h = (float *)malloc(big * sizeof(float));
    float *h2 = (float *)malloc((size_t)n_ctx * half * sizeof(float));
    int rc = 0;
    if (!h || !h2) {
        rc = err_set(err, ERR_ENV, "cuda: out of host memory for the norm and RoPE tables");
        goto done;
    }
#define UP(dst, count)                                                                             \
    if ((rc = upload(r, (uint8_t *)(dst), h, (count) * sizeof(float), err)))                       \
    goto done
    for (size_t il = 0; il < L; il++)
        quant_dequant_row(m->layers[il].attn_norm.type, m->layers[il].attn_norm.data, h + il * E,
                          (int64_t)E);
    UP(r->attn_norm, L * E);
    for (size_t il = 0; il < L; il++)
        quant_dequant_row(m->layers[il].ffn_norm.type, m->layers[il].ffn_norm.data, h + il * E,
                          (int64_t)E);
    UP(r->ffn_norm, L * E);
    for (size_t il = 0; il < L; il++)
        quant_dequant_row(m->layers[il].q_norm.type, m->layers[il].q_norm.data, h + il * hd,
                          (int64_t)hd);
    UP(r->q_norm, L * hd);
    for (size_t il = 0; il < L; il++)
        quant_dequant_row(m->layers[il].k_norm.type, m->layers[il].k_norm.data, h + il * hd,
                          (int64_t)hd);
    UP(r->k_norm, L * hd);
    quant_dequant_row(m->output_norm.type, m->output_norm.data, h, (int64_t)E);
    UP(r->out_norm, E);
    ref_rope_tables(h, h2, n_ctx, (int)hd, hp->rope_base); /* the twin's own tables */
    UP(r->rope_cos, (size_t)n_ctx * half);
    if ((rc = upload(r, (uint8_t *)r->rope_sin, h2, (size_t)n_ctx * half * sizeof(float), err)))
        goto done;
#undef UP
done:
    free(h);
    free(h2);
    return rc;
}

static void cuda_close(struct backend *b);
extern "C" const struct backend_ops backend_cuda_ops;

/* In cuda_open a failed call must release what was allocated: record it and go to fail. */
#define OPEN_CUDA(call)                                                                            \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            rc = k_fail_cuda(err, #call, __FILE__, __LINE__, e_);                                  \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)
#define OPEN_BLAS(call)                                                                            \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            rc = k_fail_blas(err, #call, __FILE__, __LINE__, s_);                                  \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

static int cuda_open(struct backend **out, const struct model *m, const struct backend_config *cfg,
                     struct gate_err *err)
{
    *out = NULL;
    const struct model_hparams *hp = &m->hp;
    struct cuda_be *r = (struct cuda_be *)calloc(1, sizeof *r);
    if (!r)
        return err_set(err, ERR_ENV, "cuda: out of host memory");
    int rc = 0;
    size_t wbytes = 0, kvbytes = 0, workbytes = 0;
    size_t free_b = 0, total_b = 0;
    r->base.ops = &backend_cuda_ops;
    r->base.model = m;
    r->m = m;
    const int n_ctx =
        cfg && cfg->n_ctx > 0 ? cfg->n_ctx : (hp->n_ctx_train < 4096 ? (int)hp->n_ctx_train : 4096);
    r->base.n_ctx = n_ctx;
    r->base.n_batch = cfg && cfg->n_batch > 0 ? cfg->n_batch : MAX_BATCH;
    if (r->base.n_batch > MAX_BATCH)
        r->base.n_batch = MAX_BATCH;
    r->ks.debug = env_is("GATE_CUDA_DEBUG", "1");
    /* numerics: FP32 KV and FP32 prefill unless the FP16 configuration is asked for */
    if ((rc = numerics_from_config(r, cfg, err)))
        goto fail;
    r->E = hp->n_embd;
    r->qd = (int64_t)hp->n_head * hp->head_dim;
    r->kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    r->X = hp->n_expert; /* 0 on a dense model */
    r->K = hp->n_expert > 0 ? hp->n_expert_used : 1;
    r->F = hp->n_expert > 0 ? hp->n_ff_exp : hp->n_ff;
    r->V = hp->n_vocab;
    snprintf(r->info.backend, sizeof r->info.backend, "cuda");
    r->L = (struct dlayer *)calloc(hp->n_layer, sizeof *r->L);
    if (!r->L) {
        rc = err_set(err, ERR_ENV, "cuda: out of host memory");
        goto fail;
    }
    if ((rc = pick_device(r->info.device, sizeof r->info.device, err)))
        goto fail;
    /* the plan: sizes only, nothing allocated yet */
    if ((rc = place_weights(r, &wbytes, err)))
        goto fail;
    r->kv_layer_bytes = align_up((size_t)n_ctx * (size_t)r->kvd * (r->kv_f32 ? 4 : 2));
    kvbytes = 2 * (size_t)hp->n_layer * r->kv_layer_bytes;
    workbytes = layout_work(r, NULL, n_ctx);
    if ((rc = k_attention_prepare(n_ctx, (int)hp->head_dim, err)))
        goto fail;
    OPEN_CUDA(cudaMemGetInfo(&free_b, &total_b));
    {
        /* local memory: the driver reserves the largest kernel frame for every resident thread;
         * the context's stack limit is reserved already (outside free_b), the excess is not */
        size_t frame = 0, stack = 0;
        int dev = 0, sms = 0, tpsm = 0;
        if ((rc = k_local_bytes_max(&frame, err)))
            goto fail;
        OPEN_CUDA(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
        OPEN_CUDA(cudaGetDevice(&dev));
        OPEN_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        OPEN_CUDA(cudaDeviceGetAttribute(&tpsm, cudaDevAttrMaxThreadsPerMultiProcessor, dev));
        const uint64_t local = frame > stack ? (uint64_t)(frame - stack) * sms * tpsm : 0;
        const uint64_t need = (uint64_t)wbytes + kvbytes + workbytes + BLAS_RESERVE + local;
        if (need > free_b) {
            rc = err_set(err, ERR_ENV,
                         "cuda: needs %.1f GiB: weights %.1f, KV %.1f for %d"
                         " positions (%s), workspace %.1f (%d-token batch), cuBLAS reserve %.1f,"
                         " kernel local memory %.2f (%zu-byte frames); device %s has %.1f GiB free",
                         gib(need), gib(wbytes), gib(kvbytes), n_ctx, r->kv_f32 ? "FP32" : "FP16",
                         gib(workbytes), r->base.n_batch, gib(BLAS_RESERVE), gib(local), frame,
                         r->info.device, gib(free_b));
            goto fail;
        }
    }
    OPEN_CUDA(cudaMalloc((void **)&r->wmem, wbytes));
    OPEN_CUDA(cudaMalloc((void **)&r->kvmem, kvbytes));
    OPEN_CUDA(cudaMalloc((void **)&r->work, workbytes));
    if ((rc = place_weights(r, &wbytes, err)))
        goto fail;
    layout_work(r, r->work, n_ctx);
    if ((rc = upload_tables(r, n_ctx, err)))
        goto fail;
    OPEN_CUDA(cudaStreamCreateWithFlags(&r->ks.s, cudaStreamNonBlocking));
    OPEN_BLAS(cublasCreate(&r->gws.blas));
    OPEN_BLAS(cublasSetStream(r->gws.blas, r->ks.s));
    /* the uploads went through the legacy stream (pageable cudaMemcpy may return before its DMA
     * lands) and the forward launches on a non-blocking stream that does not wait for it */
    OPEN_CUDA(cudaDeviceSynchronize());
    *out = &r->base;
    return 0;
fail:
    if (!rc)
        rc = ERR_RUNTIME;
    cuda_close(&r->base);
    return rc;
}

/* ---- forward --------------------------------------------------------------------------------- */

/* y (n, w.rows; stride ys) (+)= x (n, w.cols; stride xs) W^T: GEMM for long chunks, GEMV else. */
static int proj(struct cuda_be *r, const struct k_weight *w, const float *x, int64_t xs, int n,
                float *y, int64_t ys, int accumulate, struct gate_err *err)
{
    if (n >= GEMM_MIN_TOKENS && r->gws.tile)
        return k_gemm(&r->ks, &r->gws, w, -1, x, xs, n, y, ys, accumulate, err);
    return k_gemv(&r->ks, w, x, xs, 1, y, ys, n, NULL, accumulate, err);
}

static int copy_back(struct cuda_be *r, void *dst, const void *src, size_t bytes,
                     struct gate_err *err)
{
    K_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, r->ks.s));
    r->info.device_bytes += bytes;
    return 0;
}

static int taps_after_layer(struct cuda_be *r, int il, int n, struct gate_err *err)
{
    const struct backend_taps *tp = r->base.taps;
    if (!tp)
        return 0;
    const size_t ti = (size_t)il * (size_t)r->base.tap_n + (size_t)r->base.tap_off;
    const size_t E = (size_t)r->E, K = (size_t)r->K;
    int rc = 0;
    if (tp->hidden && (rc = copy_back(r, tp->hidden + ti * E, r->x, (size_t)n * E * 4, err)))
        return rc;
    if (!r->X)
        return 0;
    if (tp->experts && (rc = copy_back(r, tp->experts + ti * K, r->sel, (size_t)n * K * 4, err)))
        return rc;
    if (tp->expert_w && (rc = copy_back(r, tp->expert_w + ti * K, r->selw, (size_t)n * K * 4, err)))
        return rc;
    if (tp->router_kth && (rc = copy_back(r, tp->router_kth + ti, r->kth, (size_t)n * 4, err)))
        return rc;
    if (tp->router_k1th && (rc = copy_back(r, tp->router_k1th + ti, r->k1th, (size_t)n * 4, err)))
        return rc;
    return 0;
}

/* 1 when a scale fault names tensor t (enum fault_tensor): the products it names take their
 * faulted form (an extra k_fault_scale; unfused SwiGLU) only then. */
static int scaled(const struct cuda_be *r, int t)
{
    for (int i = 0; i < r->base.faults.n; i++)
        if (r->base.faults.f[i].kind == FAULT_SCALE && r->base.faults.f[i].tensor == t)
            return 1;
    return 0;
}

/* A product that adds into the residual x (attn_output, ffn_down): straight in, or, under a
 * scale fault on tensor t, into xb (free then), scaled, then added. */
static int proj_add(struct cuda_be *r, const struct k_weight *w, const float *x, int64_t xs, int n,
                    int t, int il, int pos0, struct gate_err *err)
{
    const int64_t E = r->E;
    if (!scaled(r, t))
        return proj(r, w, x, xs, n, r->x, E, 1, err);
    int rc = proj(r, w, x, xs, n, r->xb, E, 0, err);
    return rc ? rc
              : k_fault_scale(&r->ks, r->xb, r->x, 1, n, E, 1, t, il, pos0, &r->base.faults, err);
}

/* The scale fault on an out-of-place product's rows (per: rows per token), when one names t. */
static int scale_rows(struct cuda_be *r, float *y, int rows, int64_t cols, int per, int t, int il,
                      int pos0, struct gate_err *err)
{
    if (!scaled(r, t))
        return 0;
    return k_fault_scale(&r->ks, y, y, 0, rows, cols, per, t, il, pos0, &r->base.faults, err);
}

static int ffn_dense(struct cuda_be *r, const struct dlayer *d, int il, int n, int pos0,
                     struct gate_err *err)
{
    struct k_stream *ks = &r->ks;
    const int64_t E = r->E, F = r->F;
    const int gu = scaled(r, FAULT_T_FFN_GATE) || scaled(r, FAULT_T_FFN_UP);
    int rc;
    if (n >= GEMM_MIN_TOKENS && r->gws.tile) {
        if ((rc = proj(r, &d->ffn_gate, r->xb, E, n, r->ffa, F, 0, err)) ||
            (rc = proj(r, &d->ffn_up, r->xb, E, n, r->ffb, F, 0, err)) ||
            (rc = scale_rows(r, r->ffa, n, F, 1, FAULT_T_FFN_GATE, il, pos0, err)) ||
            (rc = scale_rows(r, r->ffb, n, F, 1, FAULT_T_FFN_UP, il, pos0, err)) ||
            (rc = k_swiglu_ew(ks, r->ffa, r->ffb, (int64_t)n * F, err)))
            return rc;
    } else if (d->fused && !gu) {
        if ((rc =
                 k_gemv_swiglu(ks, &d->ffn_gate, &d->ffn_up, r->xb, E, 1, r->ffa, F, n, NULL, err)))
            return rc;
    } else if ((rc = k_gemv(ks, &d->ffn_gate, r->xb, E, 1, r->ffa, F, n, NULL, 0, err)) ||
               (rc = k_gemv(ks, &d->ffn_up, r->xb, E, 1, r->ffb, F, n, NULL, 0, err)) ||
               (rc = scale_rows(r, r->ffa, n, F, 1, FAULT_T_FFN_GATE, il, pos0, err)) ||
               (rc = scale_rows(r, r->ffb, n, F, 1, FAULT_T_FFN_UP, il, pos0, err)) ||
               (rc = k_swiglu_ew(ks, r->ffa, r->ffb, (int64_t)n * F, err))) {
        return rc;
    }
    return proj_add(r, &d->ffn_down, r->ffa, F, n, FAULT_T_FFN_DOWN, il, pos0, err);
}

static int ffn_moe(struct cuda_be *r, const struct dlayer *d, int il, int n, int pos0,
                   struct gate_err *err)
{
    struct k_stream *ks = &r->ks;
    const int64_t E = r->E, F = r->F;
    const int X = (int)r->X, K = (int)r->K, nk = n * K;
    int rc;
    /* router in FP32 through the GEMV (exact dequantization, like the twin) */
    if ((rc = k_gemv(ks, &d->gate_inp, r->xb, E, 1, r->router, X, n, NULL, 0, err)) ||
        (rc = scale_rows(r, r->router, n, X, 1, FAULT_T_FFN_GATE_INP, il, pos0, err)) ||
        (rc = k_route(ks, r->router, n, X, K, il, pos0, &r->base.faults, r->sel, r->selw, r->kth,
                      r->k1th, err)))
        return rc;
    const int gu = scaled(r, FAULT_T_FFN_GATE_EXPS) || scaled(r, FAULT_T_FFN_UP_EXPS);
    /* each (token, slot) pair runs its expert, whose id the GEMV reads from r->sel */
    if (d->fused && !gu) {
        if ((rc = k_gemv_swiglu(ks, &d->gate_exps, &d->up_exps, r->xb, E, K, r->ffa, F, nk, r->sel,
                                err)))
            return rc;
    } else if ((rc = k_gemv(ks, &d->gate_exps, r->xb, E, K, r->ffa, F, nk, r->sel, 0, err)) ||
               (rc = k_gemv(ks, &d->up_exps, r->xb, E, K, r->ffb, F, nk, r->sel, 0, err)) ||
               (rc = scale_rows(r, r->ffa, nk, F, K, FAULT_T_FFN_GATE_EXPS, il, pos0, err)) ||
               (rc = scale_rows(r, r->ffb, nk, F, K, FAULT_T_FFN_UP_EXPS, il, pos0, err)) ||
               (rc = k_swiglu_ew(ks, r->ffa, r->ffb, (int64_t)nk * F, err))) {
        return rc;
    }
    if ((rc = k_gemv(ks, &d->down_exps, r->ffa, F, 1, r->moe_y, E, nk, r->sel, 0, err)) ||
        (rc = scale_rows(r, r->moe_y, nk, E, K, FAULT_T_FFN_DOWN_EXPS, il, pos0, err)))
        return rc;
    return k_moe_sum(ks, r->x, r->selw, r->moe_y, n, K, (int)E, err);
}

/* The device work of n tokens at positions pos0.. from r->tokens to r->logits (n, V): every
 * kernel of the step, nothing copied but the taps. dpos NULL: the position is pos0 (eager);
 * else it is read from *dpos and the attention is sized for max_keys = n_ctx keys (the decode
 * graph, captured once and replayed at every position: the same kernels, the same arguments
 * but where the position comes from). */
static int forward_body(struct cuda_be *r, int n, int pos0, const int *dpos, int max_keys,
                        struct gate_err *err)
{
    const struct model_hparams *hp = &r->m->hp;
    struct k_stream *ks = &r->ks;
    const int64_t E = r->E, qd = r->qd, kvd = r->kvd;
    const int nh = (int)hp->n_head, nkv = (int)hp->n_head_kv, hd = (int)hp->head_dim;
    int rc;
    if ((rc = k_embed(ks, &r->tok_embd, r->tokens, n, r->x, err)))
        return rc;
    for (int il = 0; il < (int)hp->n_layer; il++) {
        const struct dlayer *d = &r->L[il];
        uint8_t *kc = r->kvmem + (size_t)il * r->kv_layer_bytes;
        uint8_t *vc = r->kvmem + ((size_t)hp->n_layer + (size_t)il) * r->kv_layer_bytes;
        if ((rc = k_rmsnorm(ks, r->x, r->attn_norm + il * E, r->xb, n, (int)E, hp->eps, err)) ||
            (rc = proj(r, &d->wq, r->xb, E, n, r->q, qd, 0, err)) ||
            (rc = proj(r, &d->wk, r->xb, E, n, r->k, kvd, 0, err)) ||
            (rc = proj(r, &d->wv, r->xb, E, n, r->v, kvd, 0, err)) ||
            (rc = scale_rows(r, r->q, n, qd, 1, FAULT_T_ATTN_Q, il, pos0, err)) ||
            (rc = scale_rows(r, r->k, n, kvd, 1, FAULT_T_ATTN_K, il, pos0, err)) ||
            (rc = scale_rows(r, r->v, n, kvd, 1, FAULT_T_ATTN_V, il, pos0, err)) ||
            (rc = k_qk_norm_rope_kv_at(ks, r->q, r->k, r->v, n, pos0, dpos, il, nh, nkv, hd,
                                       r->q_norm + (size_t)il * hd, r->k_norm + (size_t)il * hd,
                                       hp->eps, r->rope_cos, r->rope_sin, kc, vc, r->kv_f32,
                                       &r->base.faults, hp->rope_base, err)) ||
            (rc = k_attention_at(ks, r->q, kc, vc, r->kv_f32, r->att, n, pos0, dpos, max_keys, nh,
                                 nkv, hd, il, &r->base.faults, r->att_part, err)) ||
            (rc = proj_add(r, &d->wo, r->att, qd, n, FAULT_T_ATTN_OUTPUT, il, pos0, err)) ||
            (rc = k_rmsnorm(ks, r->x, r->ffn_norm + il * E, r->xb, n, (int)E, hp->eps, err)))
            return rc;
        rc = r->X == 0 ? ffn_dense(r, d, il, n, pos0, err) : ffn_moe(r, d, il, n, pos0, err);
        if (rc || (rc = taps_after_layer(r, il, n, err)))
            return rc;
    }
    if ((rc = k_rmsnorm(ks, r->x, r->out_norm, r->xb, n, (int)E, hp->eps, err)) ||
        (rc = proj(r, &r->output, r->xb, E, n, r->logits, r->V, 0, err)))
        return rc;
    return scale_rows(r, r->logits, n, r->V, 1, FAULT_T_OUTPUT, -1, pos0, err);
}

/* Give up the decode graph for this open: eager launches from now on, base.knob[KNOB_GRAPH] saying
 * why. */
static void graph_off(struct cuda_be *r, const char *why)
{
    r->graph = 0;
    snprintf(r->base.knob[KNOB_GRAPH], sizeof r->base.knob[KNOB_GRAPH], "eager: %.38s", why);
}

/* The decode step from the graph: captured at the first step that may use it (one token, no
 * taps, no faults, GATE_CUDA_DEBUG unset), replayed after. 1: it ran (the logits are in
 * r->logits); 0: run the step eagerly (a step the graph does not cover, or the graph failed and
 * graph_off recorded why; a capture or replay failure is never the forward's failure: the eager
 * step then computes the same bits). The position goes to r->dpos before the replay; the token
 * is in r->tokens already. */
static int decode_graph(struct cuda_be *r, int n, int pos0)
{
    if (!r->graph || n != 1 || r->base.taps || r->base.faults.n)
        return 0;
    if (r->ks.debug) {
        graph_off(r, "GATE_CUDA_DEBUG=1 syncs every launch");
        return 0;
    }
    cudaStream_t s = r->ks.s;
    cudaError_t e;
    if (!r->gexec) {
        struct gate_err cerr;
        err_clear(&cerr);
        const uint64_t before = r->ks.launches;
        cudaGraph_t g = NULL;
        if ((e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)) != cudaSuccess) {
            graph_off(r, cudaGetErrorName(e));
            return 0;
        }
        const int rc = forward_body(r, 1, pos0, r->dpos, r->base.n_ctx, &cerr);
        e = cudaStreamEndCapture(s, &g);
        r->graph_kernels = r->ks.launches - before;
        r->ks.launches = before; /* captured, not launched */
        if (rc || e != cudaSuccess || !g) {
            if (g)
                cudaGraphDestroy(g);
            cudaGetLastError(); /* the capture's error is not the eager step's */
            graph_off(r, rc ? cerr.msg : cudaGetErrorName(e));
            return 0;
        }
        e = cudaGraphInstantiate(&r->gexec, g, 0);
        cudaGraphDestroy(g);
        if (e != cudaSuccess) {
            r->gexec = NULL;
            cudaGetLastError();
            graph_off(r, cudaGetErrorName(e));
            return 0;
        }
    }
    if ((e = cudaMemcpyAsync(r->dpos, &pos0, sizeof pos0, cudaMemcpyHostToDevice, s)) !=
            cudaSuccess ||
        (e = cudaGraphLaunch(r->gexec, s)) != cudaSuccess) {
        cudaGetLastError();
        graph_off(r, cudaGetErrorName(e));
        return 0;
    }
    r->info.device_bytes += sizeof pos0;
    r->ks.launches += r->graph_kernels;
    return 1;
}

/* n <= n_batch tokens at positions pos0.. (the cache holds 0..pos0-1); logits (n, V) to host,
 * or with last_only only the last position's row (V): the same device computation, one row
 * copied back (forward_last: a 512-token chunk no longer moves 512 rows over PCIe). */
static int forward_chunk(struct cuda_be *r, const int32_t *tokens, int n, int pos0, float *logits,
                         int last_only, struct gate_err *err)
{
    struct k_stream *ks = &r->ks;
    int rc;
    K_CUDA(cudaMemcpyAsync(r->tokens, tokens, (size_t)n * 4, cudaMemcpyHostToDevice, ks->s));
    r->info.device_bytes += (uint64_t)n * 4;
    if (!decode_graph(r, n, pos0) && (rc = forward_body(r, n, pos0, NULL, pos0 + n, err)))
        return rc;
    if ((rc = last_only ? copy_back(r, logits, r->logits + (size_t)(n - 1) * (size_t)r->V,
                                    (size_t)r->V * 4, err)
                        : copy_back(r, logits, r->logits, (size_t)n * (size_t)r->V * 4, err)))
        return rc;
    K_CUDA(cudaStreamSynchronize(ks->s));
    return 0;
}

/* ops->forward: one chunk, already checked by backend_forward() (backend.h). */
static int cuda_forward(struct backend *b, const int32_t *tokens, int n, int pos0, float *logits,
                        struct gate_err *err)
{
    struct cuda_be *r = (struct cuda_be *)b;
    const int rc = forward_chunk(r, tokens, n, pos0, logits, 0, err);
    r->info.kernel_launches = r->ks.launches;
    if (rc)
        cudaStreamSynchronize(r->ks.s); /* leave nothing in flight on failure */
    return rc;
}

/* ops->forward_last: the chunk's last row only (backend.h; bit-identical to forward()'s row: the
 * device computes every row the same way, only the copy differs). */
static int cuda_forward_last(struct backend *b, const int32_t *tokens, int n, int pos0,
                             float *logits, struct gate_err *err)
{
    struct cuda_be *r = (struct cuda_be *)b;
    const int rc = forward_chunk(r, tokens, n, pos0, logits, 1, err);
    r->info.kernel_launches = r->ks.launches;
    if (rc)
        cudaStreamSynchronize(r->ks.s);
    return rc;
}

static void cuda_info(const struct backend *b, struct backend_info *out)
{
    *out = ((const struct cuda_be *)b)->info;
}

static void cuda_close(struct backend *b)
{
    struct cuda_be *r = (struct cuda_be *)b;
    if (!r)
        return;
    if (r->ks.s)
        cudaStreamSynchronize(r->ks.s);
    if (r->gexec)
        cudaGraphExecDestroy(r->gexec);
    if (r->gws.blas)
        cublasDestroy(r->gws.blas);
    if (r->ks.s)
        cudaStreamDestroy(r->ks.s);
    cudaFree(r->wmem);
    cudaFree(r->kvmem);
    cudaFree(r->work);
    free(r->L);
    free(r);
}

extern "C" const struct backend_ops backend_cuda_ops = {
    "cuda",
    cuda_describe,
    cuda_open,
    cuda_forward,
    NULL /* truncate: n_past is enough */,
    cuda_info,
    cuda_close,
    0 /* no_taps: it records them */,
    cuda_forward_last,
    NULL /* session_open: no per-cell state */,
    NULL /* session_close */,
    NULL /* session_info */,
};
