/* cpu.c — the `cpu` engine: a fast CPU backend judged by the gate, not by bit-equality.
 *
 * Same model binding (model.h) and forward definition as the reference twin (engine/ref.c:
 * RMSNorm, Q/K/V, per-head Q/K RMSNorm, NEOX RoPE, causal GQA attention, SwiGLU or routed
 * experts, tied or untied output), and none of its numerics: activations are quantized per
 * block before every quantized product and meet the weights in integer dot products
 * (cpu_dot.h), float weights go through FMA lanes, norms and softmax sum in float, exp / sin /
 * cos come from libm. Routing is route_select() (the one definition, where routing faults act);
 * skip_qk_norm is read through fault_skips_qk_norm_inline(), as in every backend.
 *
 * Matrix products: the activations of the whole chunk are quantized once; threads split the
 * weight rows (pool_run: one contiguous range each); inside a range, tiles of CPU_ROW_TILE
 * rows x CPU_DOT_MAX_TOK tokens unpack each weight block once for all the tile's tokens. Decode
 * is the same with one token (each weight row read once per token; the AVX-512 kernels take four
 * rows at a time), with Q/K/V, gate/up and a MoE layer's routed experts each in one parallel
 * region (matmul_decode3, moe_decode). Attention threads over (token,
 * head) pairs, causal over the cache. Every output element is computed by one thread in one
 * fixed order, so logits do not depend on the thread count (tests/test_cpu.c). A batch of
 * CPU_GEMM_MIN_TOK tokens or more takes the prompt GEMM instead where the CPU has it
 * (cpu_gemm.h: tokens in the lanes of a register, no horizontal sums; the same bits), threads over
 * tiles of 4 rows; a MoE batch's experts with fewer than CPU_MOE_GEMM_MIN_TOK tokens run together
 * in two regions (moe_batch). Everything is allocated at open (sizes planned first and refused with
 * the numbers); forward allocates nothing. KV cache F32, or F16 with backend_config.kv_f16 (each
 * position's K and V rounded to F16 when stored; attention reads the layer's cache converted back,
 * exactly). forward_last computes the output product for the last position only.
 * Numeric faults (faults/fault.h, issue 22 §3) act here, in this engine's own code: a scale fault
 * multiplies the named product's output rows (fault_scale), kv_corrupt the K and V entries as they
 * are stored, rope_shift recomputes a position's RoPE angles with the shifted base, drop_diag
 * takes the per-(token, head) attention (never the batched blocks) with the query's own key left
 * out. With no fault active none of them changes a bit.
 * Start reading: cpu_forward_chunk(), then matmul().
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cpu_dot.h"
#include "cpu_gemm.h"
#include "pool.h"
#include "quant.h"
#include "route.h"

extern const struct backend_ops backend_cpu_ops; /* defined at the end of this file */

#define CPU_ROW_TILE 64 /* weight rows per tile of a batched product */

struct cpu {
    struct backend base; /* first: a struct cpu * is a struct backend * */
    const struct model *m;
    struct pool *pool;
    char device[128]; /* "cpu: <model name>" */
    /* norm weights as floats: (n_layer, E) / (n_layer, hd) / (E) */
    float *attn_norm, *ffn_norm, *q_norm, *k_norm, *out_norm;
    float *x;          /* (B, E) residual stream */
    float *xb;         /* (B, E) normalized input of the current block */
    float *xo;         /* (B, E) block output before the residual add */
    float *q;          /* (B, nh*hd) */
    float *k, *v;      /* (B, nkv*hd) */
    float *att;        /* (B, nh*hd) */
    float *ffa;        /* (B*k, F or Fe) gate activations, then silu(gate) * up */
    float *ffb;        /* (B*k, F or Fe) up activations */
    float *router;     /* (B, X) */
    float *probs;      /* (B, X) */
    int32_t *sel;      /* (B, k) */
    float *selw;       /* (B, k) */
    int32_t *rows;     /* (B*k) slot t k + s of each row of gx / gy, grouped by expert */
    int32_t *inv;      /* (B*k) the row of gy holding slot t k + s's output; -1: no expert */
    int32_t *estart;   /* (X + 1) expert e's rows of gx / gy: estart[e] .. estart[e + 1] - 1 */
    int32_t *elist;    /* (X) the experts a batch runs together (moe_batch) */
    float *gx, *gy;    /* (B*k, E) gathered expert inputs / outputs */
    float *moe_y;      /* (B, k, E) */
    float *scores;     /* (n_threads, n_ctx) */
    float *ascores;    /* the allocation of ascores_al (16 floats more) */
    float *ascores_al; /* (n_threads, 16 * n_ctx), 64-byte aligned: cpu_gemm_attn's scores */
    uint8_t *qact;     /* quantized activations of one product: (B*k) rows */
    size_t qact_bytes;
    void *gpack;    /* the allocation of gpack_al (64 bytes more) */
    void *gpack_al; /* the prompt GEMM's packed activations, 64-byte aligned; NULL without it */
    int kv16;       /* the KV cache is F16 (kc16, vc16, kl, vl; kc, vc unused) */
    float *kc, *vc; /* (n_layer, n_ctx, nkv*hd): K after norm + RoPE, V (F32 cache) */
    uint16_t *kc16, *vc16;      /* the same in F16 (backend_config.kv_f16; kc, vc NULL then) */
    float *kl, *vl;             /* (n_ctx, nkv*hd): one layer of the F16 cache as floats */
    float *rope_cos, *rope_sin; /* (n_ctx, hd/2) */
    float *rope_f;              /* (n_threads, hd): rope_shift's angles of one position */
    int attn_blocks; /* ascores was sized for cpu_gemm_attn at open (the ISA may drop later) */
};

/* ---- small ops ------------------------------------------------------------------------------ */

/* y (n) = x / rms(x) * w; the sum of squares through the FMA lanes, in float. y may be x. */
static void rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps)
{
    const float ss = cpu_dot_f32(x, x, n);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * scale * w[i];
}

static float silu(float x)
{
    return x / (1.0f + expf(-x));
}

/* The scale fault (faults/fault.h) on n output rows of `cols` floats: row r belongs to the token
 * at position pos0 + r, or with `rows` to token rows[r] / k (a batch's gathered expert rows). */
static void fault_scale(const struct cpu *c, int tensor, int il, int pos0, float *y, int n,
                        int64_t cols, const int32_t *rows, int k)
{
    const struct fault_set *fs = &c->base.faults;
    for (int r = 0; fs->n && r < n; r++) {
        const float f = fault_scale_factor_inline(fs, tensor, il, pos0 + (rows ? rows[r] / k : r));
        if (f != 1.0f)
            for (int64_t i = 0; i < cols; i++)
                y[(size_t)r * (size_t)cols + (size_t)i] *= f;
    }
}

/* Where a SwiGLU block's products sit for the scale fault: its layer, first position, the
 * gathered rows' slots (NULL: row t is token t), and the tensors of gate, up and down. */
struct fscope {
    int il, pos0;
    const int32_t *rows;
    int k;
    int g, u, d;
};

/* ---- matrix products ------------------------------------------------------------------------ */

struct quant_job {
    const struct model_weight *w;
    const float *x;
    uint8_t *dst;
    size_t stride;
};

static void quant_rows(void *ctx, int64_t begin, int64_t end, int thread)
{
    (void)thread;
    struct quant_job *j = ctx;
    for (int64_t t = begin; t < end; t++)
        cpu_act_quantize(j->w->type, j->x + (size_t)t * (size_t)j->w->cols,
                         j->dst + (size_t)t * j->stride, j->w->cols);
}

struct matmul_job {
    const struct model_weight *w;
    const uint8_t *act; /* (n) activation rows of `stride` bytes */
    size_t stride;
    float *y; /* (n, rows) */
    int n;
};

static void matmul_rows(void *ctx, int64_t begin, int64_t end, int thread)
{
    (void)thread;
    const struct matmul_job *j = ctx;
    const struct model_weight *w = j->w;
    for (int64_t o0 = begin; o0 < end; o0 += CPU_ROW_TILE) {
        const int64_t o1 = o0 + CPU_ROW_TILE < end ? o0 + CPU_ROW_TILE : end;
        for (int t0 = 0; t0 < j->n; t0 += CPU_DOT_MAX_TOK) {
            const int nt = j->n - t0 < CPU_DOT_MAX_TOK ? j->n - t0 : CPU_DOT_MAX_TOK;
            cpu_dot_tile(w->type, model_row(w, o0), w->row_bytes, (int)(o1 - o0),
                         j->act + (size_t)t0 * j->stride, j->stride, nt, w->cols,
                         j->y + (size_t)t0 * (size_t)w->rows + (size_t)o0, (size_t)w->rows);
        }
    }
}

struct gemm_job {
    const struct model_weight *w;
    void *packed;
    float *y; /* (n, rows) */
    int n;
    struct quant_job q; /* the activations: quantized, then packed, by groups of 16 tokens */
};

/* groups [begin, end) of 16 tokens: quantized, then packed for the GEMM */
static void gemm_prepare(void *ctx, int64_t begin, int64_t end, int thread)
{
    struct gemm_job *j = ctx;
    const int64_t t1 = end * CPU_GEMM_LANES < j->n ? end * CPU_GEMM_LANES : j->n;
    quant_rows(&j->q, begin * CPU_GEMM_LANES, t1, thread);
    for (int64_t g = begin; g < end; g++)
        cpu_gemm_pack_group(j->w->type, j->q.dst, j->q.stride, j->n, j->w->cols, j->packed, (int)g);
}

/* tiles [begin, end) of CPU_GEMM_ROWS weight rows against every packed token */
static void gemm_tiles(void *ctx, int64_t begin, int64_t end, int thread)
{
    (void)thread;
    const struct gemm_job *j = ctx;
    const struct model_weight *w = j->w;
    const int64_t r1 = end * CPU_GEMM_ROWS < w->rows ? end * CPU_GEMM_ROWS : w->rows;
    cpu_gemm_rows(w->type, model_row(w, 0), w->row_bytes, begin * CPU_GEMM_ROWS, r1, j->packed,
                  j->n, w->cols, j->y, (size_t)w->rows);
}

/* y (n, w.rows) = x (n, w.cols) times W transposed. The activations are quantized once for the
 * whole chunk (float weights read x as is); a batch of CPU_GEMM_MIN_TOK tokens or more goes
 * through the prompt GEMM where the type has one (cpu_gemm.h: the same bits), threads over tiles
 * of rows. */
static int matmul_decode3(struct cpu *c, const float *x, const struct model_weight *w0, float *y0,
                          const struct model_weight *w1, float *y1, const struct model_weight *w2,
                          float *y2);

static void matmul(struct cpu *c, const struct model_weight *w, const float *x, int n, float *y)
{
    if (n == 1 && !matmul_decode3(c, x, w, y, NULL, NULL, NULL, NULL))
        return; /* one token: the decode region (long tiles, one activation split each) */
    struct matmul_job j = {w, (const uint8_t *)x, (size_t)w->cols * sizeof(float), y, n};
    if (cpu_act_kind(w->type) != CPU_ACT_F32) {
        struct quant_job q = {w, x, c->qact, cpu_act_row_bytes(w->type, w->cols)};
        if (c->gpack_al && n >= CPU_GEMM_MIN_TOK && cpu_gemm_supported(w->type)) {
            struct gemm_job g = {w, c->gpack_al, y, n, q};
            pool_run(c->pool, (n + CPU_GEMM_LANES - 1) / CPU_GEMM_LANES, gemm_prepare, &g);
            pool_run(c->pool, (w->rows + CPU_GEMM_ROWS - 1) / CPU_GEMM_ROWS, gemm_tiles, &g);
            return;
        }
        if (n == 1)
            quant_rows(&q, 0, 1, 0);
        else
            pool_run(c->pool, n, quant_rows, &q);
        j.act = c->qact;
        j.stride = q.stride;
    }
    pool_run(c->pool, w->rows, matmul_rows, &j);
}

/* ---- decode: several one-token products in one parallel region ------------------------------ */

#define CPU_MULTI_MAX 24    /* products one region takes: a MoE layer's gate and up for 8 experts */
#define CPU_DECODE_TILE 512 /* rows per cpu_dot_tile call with one token (one activation split) */

/* Products of one token each, rows concatenated: region row first[p] + r is row r of w[p]. One
 * pool_run wakes the workers once for all of them (Q, K and V; gate and up; a MoE layer's routed
 * experts), the threads claiming contiguous grains of the concatenated rows. Every output is
 * still one cpu_dot_tile() row with the same activation row: the same bits as matmul(). */
struct multi_job {
    int n;
    const struct model_weight *w[CPU_MULTI_MAX];
    const uint8_t *act[CPU_MULTI_MAX]; /* product p's input row: quantized, or floats */
    float *y[CPU_MULTI_MAX];           /* product p's output (w[p]->rows) */
    int64_t first[CPU_MULTI_MAX + 1];
};

static void multi_add(struct multi_job *j, const struct model_weight *w, const uint8_t *act,
                      float *y)
{
    j->w[j->n] = w;
    j->act[j->n] = act;
    j->y[j->n] = y;
    j->first[j->n + 1] = j->first[j->n] + w->rows;
    j->n++;
}

/* rows [b, e) of w against one token's activation row act into y[b .. e): tiles of
 * CPU_DECODE_TILE rows, one activation split each */
static void decode_rows(const struct model_weight *w, const uint8_t *act, int64_t b, int64_t e,
                        float *y)
{
    for (int64_t o0 = b; o0 < e; o0 += CPU_DECODE_TILE) {
        const int64_t o1 = o0 + CPU_DECODE_TILE < e ? o0 + CPU_DECODE_TILE : e;
        cpu_dot_tile(w->type, model_row(w, o0), w->row_bytes, (int)(o1 - o0), act, 0, 1, w->cols,
                     y + o0, (size_t)w->rows);
    }
}

static void multi_rows(void *ctx, int64_t begin, int64_t end, int thread)
{
    (void)thread;
    const struct multi_job *j = ctx;
    for (int p = 0; p < j->n; p++) {
        const int64_t b = (begin > j->first[p] ? begin : j->first[p]) - j->first[p];
        const int64_t e = (end < j->first[p + 1] ? end : j->first[p + 1]) - j->first[p];
        decode_rows(j->w[p], j->act[p], b, e, j->y[p]);
    }
}

/* The input row x for weight w at byte offset *off of the activation buffer (floats: x itself),
 * *off advanced; reuses `prev` (the row quantized for weight `pw`) when the layout is the same.
 * NULL when the buffer is full (the caller takes the product-at-a-time path). */
static const uint8_t *multi_act(struct cpu *c, const struct model_weight *w, const float *x,
                                size_t *off, const struct model_weight *pw, const uint8_t *prev)
{
    const int kind = cpu_act_kind(w->type);
    if (kind == CPU_ACT_F32)
        return (const uint8_t *)x;
    if (pw && prev && cpu_act_kind(pw->type) == kind && pw->cols == w->cols)
        return prev;
    const size_t bytes = cpu_act_row_bytes(w->type, w->cols);
    if (*off + bytes > c->qact_bytes)
        return NULL;
    uint8_t *dst = c->qact + *off;
    cpu_act_quantize(w->type, x, dst, w->cols);
    *off += bytes;
    return dst;
}

/* y_p = W_p x for one token x and up to three weights in one region (NULL weights skipped).
 * Returns 0 when done, -1 when the caller must run them one by one. */
static int matmul_decode3(struct cpu *c, const float *x, const struct model_weight *w0, float *y0,
                          const struct model_weight *w1, float *y1, const struct model_weight *w2,
                          float *y2)
{
    struct multi_job j = {0};
    size_t off = 0;
    const struct model_weight *ws[3] = {w0, w1, w2}, *pw = NULL;
    float *ys[3] = {y0, y1, y2};
    const uint8_t *prev = NULL;
    for (int p = 0; p < 3; p++) {
        if (!ws[p])
            continue;
        const uint8_t *a = multi_act(c, ws[p], x, &off, pw, prev);
        if (!a)
            return -1;
        multi_add(&j, ws[p], a, ys[p]);
        pw = ws[p];
        prev = a;
    }
    pool_run(c->pool, j.first[j.n], multi_rows, &j);
    return 0;
}

#define CPU_MOE_CHUNK 256 /* expert rows per item of the gate/up region (when it divides F) */

/* A MoE layer's routed experts for one token. Region one: items of (expert, CPU_MOE_CHUNK rows),
 * each computing those rows of gate and up, silu(gate) * up, and that part of the down product's
 * input quantized — whole activation blocks, since the chunk is a multiple of 256 (or all of F),
 * so the bits are those of quantizing the row at once. Region two: every routed expert's down
 * rows. No serial step between the two (the SwiGLU and the quantization run on both threads). */
struct moe_job {
    struct cpu *c;
    int n;                  /* routed experts (slots with a valid expert) */
    int64_t F, chunk;       /* rows of gate / up; rows per item (F or CPU_MOE_CHUNK, dividing F) */
    const uint8_t *ag, *au; /* the token's input as the gate / up weights want it */
    int slot[CPU_MULTI_MAX / 2];
    struct model_weight gw[CPU_MULTI_MAX / 2], uw[CPU_MULTI_MAX / 2], dw[CPU_MULTI_MAX / 2];
    uint8_t *ad[CPU_MULTI_MAX / 2]; /* the down input, quantized; NULL for float weights */
    float fg, fu; /* the scale fault's factors of gate_exps / up_exps for this token (1: none) */
};

/* items [begin, end) of region one: expert it / (F / chunk), rows (it % (F / chunk)) * chunk on */
static void moe_up_items(void *ctx, int64_t begin, int64_t end, int thread)
{
    (void)thread;
    const struct moe_job *j = ctx;
    const int64_t per = j->F / j->chunk;
    for (int64_t it = begin; it < end; it++) {
        const int v = (int)(it / per);
        const int64_t r0 = it % per * j->chunk, r1 = r0 + j->chunk;
        float *h = j->c->ffa + (size_t)j->slot[v] * (size_t)j->F;
        float *u = j->c->ffb + (size_t)j->slot[v] * (size_t)j->F;
        decode_rows(&j->gw[v], j->ag, r0, r1, h);
        decode_rows(&j->uw[v], j->au, r0, r1, u);
        for (int64_t i = r0; j->fg != 1.0f && i < r1; i++)
            h[i] *= j->fg;
        for (int64_t i = r0; j->fu != 1.0f && i < r1; i++)
            u[i] *= j->fu;
        for (int64_t i = r0; i < r1; i++)
            h[i] = silu(h[i]) * u[i];
        if (j->ad[v])
            cpu_act_quantize(j->dw[v].type, h + r0, j->ad[v] + cpu_act_row_bytes(j->dw[v].type, r0),
                             j->chunk);
    }
}

/* The routed experts of one token in two parallel regions (struct moe_job); slot s's output at
 * moe_y + s E (zeros for a slot without an expert). Returns -1, having done nothing, when the
 * activation buffer cannot hold the inputs (the caller then runs the experts one by one). */
static int moe_decode(struct cpu *c, const struct model_layer *L, int X, int k, int il, int pos)
{
    const int64_t E = c->m->hp.n_embd;
    const struct model_weight g0 = model_expert(&L->gate_exps, X, 0);
    const struct model_weight u0 = model_expert(&L->up_exps, X, 0);
    const struct model_weight d0 = model_expert(&L->down_exps, X, 0);
    struct moe_job j = {.c = c, .F = g0.rows};
    j.fg = fault_scale_factor_inline(&c->base.faults, FAULT_T_FFN_GATE_EXPS, il, pos);
    j.fu = fault_scale_factor_inline(&c->base.faults, FAULT_T_FFN_UP_EXPS, il, pos);
    j.chunk = j.F % CPU_MOE_CHUNK == 0 ? CPU_MOE_CHUNK : j.F;
    const size_t dbytes =
        cpu_act_kind(d0.type) == CPU_ACT_F32 ? 0 : cpu_act_row_bytes(d0.type, j.F);
    if (2 * k > CPU_MULTI_MAX ||
        2 * cpu_act_row_bytes(g0.type, E) + (size_t)k * dbytes > c->qact_bytes)
        return -1;
    size_t off = 0;
    j.ag = multi_act(c, &g0, c->xb, &off, NULL, NULL);
    j.au = multi_act(c, &u0, c->xb, &off, &g0, j.ag);
    struct multi_job d = {0};
    for (int s = 0; s < k; s++) {
        float *y = c->moe_y + (size_t)s * (size_t)E;
        const int e = c->sel[s];
        if (e < 0 || e >= X) {
            memset(y, 0, (size_t)E * sizeof(float));
            continue;
        }
        const int v = j.n++;
        j.slot[v] = s;
        j.gw[v] = model_expert(&L->gate_exps, X, e);
        j.uw[v] = model_expert(&L->up_exps, X, e);
        j.dw[v] = model_expert(&L->down_exps, X, e);
        j.ad[v] = dbytes ? c->qact + off : NULL;
        off += dbytes;
        const float *h = c->ffa + (size_t)s * (size_t)j.F;
        multi_add(&d, &j.dw[v], j.ad[v] ? j.ad[v] : (const uint8_t *)h, y);
    }
    if (j.n) {
        pool_run(c->pool, j.n * (j.F / j.chunk), moe_up_items, &j);
        pool_run(c->pool, d.first[d.n], multi_rows, &d);
    }
    return 0;
}

/* ---- attention ------------------------------------------------------------------------------ */

struct attn_job {
    struct cpu *c;
    int layer, n, pos0;
    const float *kc, *vc; /* this layer's keys and values, (n_ctx, nkv*hd) */
};

static void attn_heads(void *ctx, int64_t begin, int64_t end, int thread)
{
    const struct attn_job *j = ctx;
    struct cpu *c = j->c;
    const struct model_hparams *hp = &c->m->hp;
    const int hd = (int)hp->head_dim, nh = (int)hp->n_head, nkv = (int)hp->n_head_kv;
    const int kvd = nkv * hd, group = nh / nkv;
    float *s = c->scores + (size_t)thread * (size_t)c->base.n_ctx;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t item = begin; item < end; item++) {
        const int t = (int)(item / nh), h = (int)(item % nh), g = h / group;
        const int pos = j->pos0 + t; /* causal: keys 0..pos */
        const float *q = c->q + (size_t)t * (size_t)(nh * hd) + (size_t)h * (size_t)hd;
        const float *kc = j->kc + (size_t)g * (size_t)hd;
        const float *vc = j->vc + (size_t)g * (size_t)hd;
        float *out = c->att + (size_t)t * (size_t)(nh * hd) + (size_t)h * (size_t)hd;
        const int n_keys = fault_drops_diag_inline(&c->base.faults, j->layer, pos) ? pos : pos + 1;
        if (n_keys > 0)
            cpu_attn_head(q, kc, vc, (size_t)kvd, n_keys, hd, scale, s, out);
        else /* drop_diag at position 0: nothing to attend to */
            memset(out, 0, (size_t)hd * sizeof(float));
    }
}

/* (head, block of 16 tokens) items, head-major so that the threads' contiguous ranges get equal
 * shares of the long (late) blocks: cpu_gemm_attn, bit-identical to attn_heads() */
static void attn_blocks(void *ctx, int64_t begin, int64_t end, int thread)
{
    const struct attn_job *j = ctx;
    struct cpu *c = j->c;
    const struct model_hparams *hp = &c->m->hp;
    const int hd = (int)hp->head_dim, nh = (int)hp->n_head, nkv = (int)hp->n_head_kv;
    const int kvd = nkv * hd, group = nh / nkv, nblk = (j->n + 15) / 16;
    float *s = c->ascores_al + (size_t)thread * 16 * (size_t)c->base.n_ctx;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t item = begin; item < end; item++) {
        const int h = (int)(item / nblk), t0 = 16 * (int)(item % nblk), g = h / group;
        const int nq = j->n - t0 < 16 ? j->n - t0 : 16;
        const size_t off = (size_t)t0 * (size_t)(nh * hd) + (size_t)h * (size_t)hd;
        cpu_gemm_attn(c->q + off, (size_t)(nh * hd), nq, j->pos0 + t0,
                      j->kc + (size_t)g * (size_t)hd, j->vc + (size_t)g * (size_t)hd, (size_t)kvd,
                      hd, scale, s, c->att + off, (size_t)(nh * hd));
    }
}

/* Per-head RMSNorm (unless skipped: the fault, or a model without Q/K norms), then NEOX RoPE. */
static void norm_rope(float *x, const float *w, const float *cs, const float *sn, int hd, float eps,
                      int norm)
{
    if (norm)
        rmsnorm(x, x, w, hd, eps);
    const int half = hd / 2;
    for (int i = 0; i < half; i++) {
        const float a = x[i], b = x[i + half];
        x[i] = a * cs[i] - b * sn[i];
        x[i + half] = a * sn[i] + b * cs[i];
    }
}

/* F16 KV cache (backend_config.kv_f16): K and V of one position rounded to F16 (nearest even) at
 * cache offset `at`, from row offset `src` of c->k / c->v. */
static void kv_store_f16(struct cpu *c, size_t at, size_t src, size_t kvd)
{
    for (size_t i = 0; i < kvd; i++) {
        c->kc16[at + i] = quant_f32_to_fp16(c->k[src + i]);
        c->vc16[at + i] = quant_f32_to_fp16(c->v[src + i]);
    }
}

struct kv_load_job {
    struct cpu *c;
    size_t lay, kvd;
};

/* positions [begin, end) of one layer's F16 cache into c->kl / c->vl as floats */
static void kv_load_rows(void *ctx, int64_t begin, int64_t end, int thread)
{
    (void)thread;
    const struct kv_load_job *j = ctx;
    const size_t off = (size_t)begin * j->kvd, cnt = (size_t)(end - begin) * j->kvd;
    quant_dequant_row(QUANT_F16, j->c->kc16 + j->lay + off, j->c->kl + off, (int64_t)cnt);
    quant_dequant_row(QUANT_F16, j->c->vc16 + j->lay + off, j->c->vl + off, (int64_t)cnt);
}

/* fn over tokens [0, n): on the pool for a batch, inline for one token (decode wakes no one) */
static void per_token(struct cpu *c, int n, pool_fn fn, void *ctx)
{
    if (n > 1)
        pool_run(c->pool, n, fn, ctx);
    else
        fn(ctx, 0, n, 0);
}

/* One position's RoPE angles with base `base` (rope_shift): as rope_tables() computes them (below).
 */
static void rope_row(float *cs, float *sn, int pos, int hd, double base)
{
    for (int i = 0; i < hd / 2; i++) {
        const double a = (double)pos * pow(base, -2.0 * (double)i / (double)hd);
        cs[i] = (float)cos(a);
        sn[i] = (float)sin(a);
    }
}

struct qk_job {
    struct cpu *c;
    int il, pos0;
};

/* tokens [begin, end): per-head Q/K norm and RoPE, then K and V into the cache */
static void qk_rope_store(void *ctx, int64_t begin, int64_t end, int thread)
{
    const struct qk_job *j = ctx;
    struct cpu *c = j->c;
    const struct model_hparams *hp = &c->m->hp;
    const int il = j->il;
    const int hd = (int)hp->head_dim, nh = (int)hp->n_head, nkv = (int)hp->n_head_kv;
    const int kvd = nkv * hd, half = hd / 2;
    const int has_norm = model_has_qk_norm(c->m);
    for (int t = (int)begin; t < (int)end; t++) {
        const int pos = j->pos0 + t;
        const float *cs = c->rope_cos + (size_t)pos * (size_t)half;
        const float *sn = c->rope_sin + (size_t)pos * (size_t)half;
        const float rf = fault_rope_factor_inline(&c->base.faults, il, pos);
        if (rf != 1.0f) { /* rope_shift: this position's angles with the shifted base */
            float *fc = c->rope_f + (size_t)thread * (size_t)hd;
            rope_row(fc, fc + half, pos, hd, (double)c->m->hp.rope_base * (double)rf);
            cs = fc;
            sn = fc + half;
        }
        const int norm = has_norm && !fault_skips_qk_norm_inline(&c->base.faults, il, pos);
        for (int h = 0; h < nh; h++)
            norm_rope(c->q + (size_t)t * (size_t)(nh * hd) + (size_t)h * (size_t)hd,
                      c->q_norm + (size_t)il * (size_t)hd, cs, sn, hd, hp->eps, norm);
        for (int h = 0; h < nkv; h++)
            norm_rope(c->k + (size_t)t * (size_t)kvd + (size_t)h * (size_t)hd,
                      c->k_norm + (size_t)il * (size_t)hd, cs, sn, hd, hp->eps, norm);
        const size_t at = ((size_t)il * (size_t)c->base.n_ctx + (size_t)pos) * (size_t)kvd;
        const float kf = fault_kv_factor_inline(&c->base.faults, il, pos);
        for (int i = 0; kf != 1.0f && i < kvd; i++) { /* kv_corrupt: the entries as stored */
            c->k[(size_t)t * (size_t)kvd + (size_t)i] *= kf;
            c->v[(size_t)t * (size_t)kvd + (size_t)i] *= kf;
        }
        if (c->kv16)
            kv_store_f16(c, at, (size_t)t * (size_t)kvd, (size_t)kvd);
        else {
            memcpy(c->kc + at, c->k + (size_t)t * (size_t)kvd, (size_t)kvd * sizeof(float));
            memcpy(c->vc + at, c->v + (size_t)t * (size_t)kvd, (size_t)kvd * sizeof(float));
        }
    }
}

static void attention(struct cpu *c, int il, int n, int pos0)
{
    const struct model_hparams *hp = &c->m->hp;
    const struct model_layer *L = &c->m->layers[il];
    const int hd = (int)hp->head_dim, nh = (int)hp->n_head, nkv = (int)hp->n_head_kv;
    const int kvd = nkv * hd;
    const int64_t E = hp->n_embd;
    for (int t = 0; t < n; t++)
        rmsnorm(c->xb + t * E, c->x + t * E, c->attn_norm + il * E, E, hp->eps);
    if (n > 1 || matmul_decode3(c, c->xb, &L->wq, c->q, &L->wk, c->k, &L->wv, c->v)) {
        matmul(c, &L->wq, c->xb, n, c->q);
        matmul(c, &L->wk, c->xb, n, c->k);
        matmul(c, &L->wv, c->xb, n, c->v);
    }
    fault_scale(c, FAULT_T_ATTN_Q, il, pos0, c->q, n, (int64_t)nh * hd, NULL, 1);
    fault_scale(c, FAULT_T_ATTN_K, il, pos0, c->k, n, kvd, NULL, 1);
    fault_scale(c, FAULT_T_ATTN_V, il, pos0, c->v, n, kvd, NULL, 1);
    struct qk_job qj = {c, il, pos0};
    per_token(c, n, qk_rope_store, &qj);
    const size_t lay = (size_t)il * (size_t)c->base.n_ctx * (size_t)kvd;
    struct attn_job j = {
        c, il, n, pos0, c->kv16 ? c->kl : c->kc + lay, c->kv16 ? c->vl : c->vc + lay};
    if (c->kv16) { /* the layer's cache so far as floats (exact), once for all heads */
        struct kv_load_job kj = {c, lay, (size_t)kvd};
        pool_run(c->pool, pos0 + n, kv_load_rows, &kj);
    }
    /* drop_diag changes one query's keys: the per-(token, head) path, never the blocks */
    if (n >= CPU_GEMM_ATTN_MIN_TOK && c->attn_blocks && cpu_gemm_attn_supported(hd) &&
        !fault_has_kind_inline(&c->base.faults, FAULT_DROP_DIAG))
        pool_run(c->pool, (int64_t)nh * ((n + 15) / 16), attn_blocks, &j);
    else
        pool_run(c->pool, (int64_t)n * nh, attn_heads, &j);
    matmul(c, &L->wo, c->att, n, c->xo);
    fault_scale(c, FAULT_T_ATTN_OUTPUT, il, pos0, c->xo, n, E, NULL, 1);
    for (int64_t i = 0; i < n * E; i++)
        c->x[i] += c->xo[i];
}

/* ---- feed-forward --------------------------------------------------------------------------- */

/* out (n, E) = Wdown (silu(Wgate x) * Wup x) for x (n, E). */
struct glu_job {
    struct cpu *c;
    int64_t f;
};

/* tokens [begin, end): ffa = silu(ffa) * ffb, rows of f */
static void glu_rows(void *ctx, int64_t begin, int64_t end, int thread)
{
    (void)thread;
    const struct glu_job *j = ctx;
    float *a = j->c->ffa, *b = j->c->ffb;
    for (int64_t i = begin * j->f; i < end * j->f; i++)
        a[i] = silu(a[i]) * b[i];
}

static void swiglu(struct cpu *c, const struct model_weight *gate, const struct model_weight *up,
                   const struct model_weight *down, const float *x, int n, float *out,
                   const struct fscope *fs)
{
    if (n > 1 || matmul_decode3(c, x, gate, c->ffa, up, c->ffb, NULL, NULL)) {
        matmul(c, gate, x, n, c->ffa);
        matmul(c, up, x, n, c->ffb);
    }
    fault_scale(c, fs->g, fs->il, fs->pos0, c->ffa, n, gate->rows, fs->rows, fs->k);
    fault_scale(c, fs->u, fs->il, fs->pos0, c->ffb, n, up->rows, fs->rows, fs->k);
    struct glu_job gj = {c, gate->rows};
    per_token(c, n, glu_rows, &gj);
    matmul(c, down, c->ffa, n, out);
    fault_scale(c, fs->d, fs->il, fs->pos0, out, n, down->rows, fs->rows, fs->k);
}

/* ---- a batch's routed experts -------------------------------------------------------------- */

/* An expert takes the prompt GEMM alone from this many tokens of a batch: below it the grouped row
 * kernels win (a GEMM register holds 16 tokens; measured on the 30B-A3B shape, pp64 149 -> 157
 * tokens/s with 16 instead of CPU_GEMM_MIN_TOK's 8; with the few-token four-row kernels of
 * cpu_dot_avx512.c, 24 against 16: pp64 167-175 against 162-170, pp512 207-215 against 204-211,
 * side by side) */
#define CPU_MOE_GEMM_MIN_TOK 24

/* The experts of a batch with fewer than CPU_MOE_GEMM_MIN_TOK tokens each (all of them where the
 * prompt GEMM is missing) run together, c->elist[0 .. n): region one, an item per expert: its
 * rows of gx quantized, gate and up over its tokens (cpu_dot_tile, the row kernels), silu(gate) *
 * up and the down input quantized; region two, every listed expert's down rows concatenated.
 * A 64-token prompt gives each of 128 experts about 4 tokens: one set of parallel regions per
 * expert cost more than its products. Per output element the same kernels on the same
 * activation rows as swiglu(): the same bits. Row gi of gx / gy / ffa / ffb is gathered row gi;
 * its quantized inputs at qact + gi rowb: gate's, then up's (when its layout differs), then
 * down's. */
struct moe_group_job {
    struct cpu *c;
    const struct model_layer *L;
    int X, n;
    int64_t E, F;
    const uint8_t *gact, *uact, *dact; /* row gi of each product's input at base + gi * stride */
    size_t gstride, ustride, dstride;
    int qg, qu, qd;  /* whether gate's / up's / down's input is quantized here */
    int il, pos0, k; /* the scale fault's scope of the gathered rows (rows[r] / k: the token) */
};

/* rows [r0, r1) of w against cnt activation rows (act, stride bytes apart) into y (row t at
 * y + t * ys): tiles of CPU_ROW_TILE rows x CPU_DOT_MAX_TOK tokens, as matmul_rows() */
static void group_rows(const struct model_weight *w, const uint8_t *act, size_t stride, int cnt,
                       int64_t r0, int64_t r1, float *y, size_t ys)
{
    for (int64_t o0 = r0; o0 < r1; o0 += CPU_ROW_TILE) {
        const int64_t o1 = o0 + CPU_ROW_TILE < r1 ? o0 + CPU_ROW_TILE : r1;
        for (int t0 = 0; t0 < cnt; t0 += CPU_DOT_MAX_TOK) {
            const int nt = cnt - t0 < CPU_DOT_MAX_TOK ? cnt - t0 : CPU_DOT_MAX_TOK;
            cpu_dot_tile(w->type, model_row(w, o0), w->row_bytes, (int)(o1 - o0),
                         act + (size_t)t0 * stride, stride, nt, w->cols, y + (size_t)t0 * ys + o0,
                         ys);
        }
    }
}

/* region one: listed experts [begin, end) */
static void group_up(void *ctx, int64_t begin, int64_t end, int thread)
{
    (void)thread;
    const struct moe_group_job *j = ctx;
    struct cpu *c = j->c;
    const int64_t E = j->E, F = j->F;
    for (int64_t v = begin; v < end; v++) {
        const int e = c->elist[v], g0 = c->estart[e], cnt = c->estart[e + 1] - g0;
        const struct model_weight g = model_expert(&j->L->gate_exps, (uint32_t)j->X, (uint32_t)e);
        const struct model_weight u = model_expert(&j->L->up_exps, (uint32_t)j->X, (uint32_t)e);
        const struct model_weight d = model_expert(&j->L->down_exps, (uint32_t)j->X, (uint32_t)e);
        for (int t = g0; t < g0 + cnt; t++) {
            const float *x = c->gx + (size_t)t * (size_t)E;
            if (j->qg)
                cpu_act_quantize(g.type, x, (uint8_t *)j->gact + (size_t)t * j->gstride, E);
            if (j->qu)
                cpu_act_quantize(u.type, x, (uint8_t *)j->uact + (size_t)t * j->ustride, E);
        }
        float *a = c->ffa + (size_t)g0 * (size_t)F, *b = c->ffb + (size_t)g0 * (size_t)F;
        group_rows(&g, j->gact + (size_t)g0 * j->gstride, j->gstride, cnt, 0, F, a, (size_t)F);
        group_rows(&u, j->uact + (size_t)g0 * j->ustride, j->ustride, cnt, 0, F, b, (size_t)F);
        fault_scale(c, FAULT_T_FFN_GATE_EXPS, j->il, j->pos0, a, cnt, F, c->rows + g0, j->k);
        fault_scale(c, FAULT_T_FFN_UP_EXPS, j->il, j->pos0, b, cnt, F, c->rows + g0, j->k);
        for (int64_t i = 0; i < (int64_t)cnt * F; i++)
            a[i] = silu(a[i]) * b[i];
        for (int t = 0; j->qd && t < cnt; t++)
            cpu_act_quantize(d.type, a + (size_t)t * (size_t)F,
                             (uint8_t *)j->dact + (size_t)(g0 + t) * j->dstride, F);
    }
}

/* region two: rows [begin, end) of the listed experts' down products, concatenated (E each) */
static void group_down(void *ctx, int64_t begin, int64_t end, int thread)
{
    (void)thread;
    const struct moe_group_job *j = ctx;
    struct cpu *c = j->c;
    for (int64_t it = begin; it < end;) {
        const int64_t v = it / j->E, r0 = it % j->E;
        const int64_t r1 = j->E - r0 < end - it ? j->E : r0 + (end - it);
        const int e = c->elist[v], g0 = c->estart[e], cnt = c->estart[e + 1] - g0;
        const struct model_weight d = model_expert(&j->L->down_exps, (uint32_t)j->X, (uint32_t)e);
        group_rows(&d, j->dact + (size_t)g0 * j->dstride, j->dstride, cnt, r0, r1,
                   c->gy + (size_t)g0 * (size_t)j->E, (size_t)j->E);
        it += r1 - r0;
    }
}

struct gather_job {
    struct cpu *c;
    int k;
    int64_t E;
};

/* rows [begin, end) of gx: the input of the token whose slot the row holds */
static void gather_rows(void *ctx, int64_t begin, int64_t end, int thread)
{
    (void)thread;
    const struct gather_job *j = ctx;
    for (int64_t r = begin; r < end; r++)
        memcpy(j->c->gx + (size_t)r * (size_t)j->E,
               j->c->xb + (size_t)(j->c->rows[r] / j->k) * (size_t)j->E,
               (size_t)j->E * sizeof(float));
}

/* The routed experts of n tokens: slots grouped by expert (in slot order within an expert) into
 * gx; an expert with CPU_MOE_GEMM_MIN_TOK tokens or more runs alone through swiglu() (the prompt
 * GEMM), the others together (struct moe_group_job); expert outputs in gy, c->inv says where. */
static void moe_batch(struct cpu *c, const struct model_layer *L, int X, int k, int n, int il,
                      int pos0)
{
    const int64_t E = c->m->hp.n_embd;
    memset(c->estart, 0, (size_t)(X + 1) * sizeof(int32_t));
    for (int i = 0; i < n * k; i++)
        if (c->sel[i] >= 0 && c->sel[i] < X)
            c->estart[c->sel[i] + 1]++;
    for (int e = 0; e < X; e++)
        c->estart[e + 1] += c->estart[e];
    for (int i = 0; i < n * k; i++) { /* rows of expert e in slot order, from estart[e] on */
        const int e = c->sel[i];
        c->inv[i] = -1;
        if (e >= 0 && e < X) {
            c->inv[i] = c->estart[e]++;
            c->rows[c->inv[i]] = i;
        }
    }
    for (int e = X; e > 0; e--) /* undo the advance: estart[e] is the first row again */
        c->estart[e] = c->estart[e - 1];
    c->estart[0] = 0;
    struct gather_job gj = {c, k, E};
    pool_run(c->pool, c->estart[X], gather_rows, &gj);
    /* the grouped experts' inputs in qact: refused (every expert alone) when they do not fit */
    const struct model_weight g0 = model_expert(&L->gate_exps, X, 0);
    const struct model_weight u0 = model_expert(&L->up_exps, X, 0);
    const struct model_weight d0 = model_expert(&L->down_exps, X, 0);
    const int64_t F = g0.rows;
    struct moe_group_job j = {
        .c = c, .L = L, .X = X, .E = E, .F = F, .il = il, .pos0 = pos0, .k = k};
    j.qg = cpu_act_kind(g0.type) != CPU_ACT_F32;
    j.qu = cpu_act_kind(u0.type) != CPU_ACT_F32 && cpu_act_kind(u0.type) != cpu_act_kind(g0.type);
    j.qd = cpu_act_kind(d0.type) != CPU_ACT_F32;
    const size_t bg = j.qg ? cpu_act_row_bytes(g0.type, E) : 0;
    const size_t bu = j.qu ? cpu_act_row_bytes(u0.type, E) : 0;
    const size_t rowb = bg + bu + (j.qd ? cpu_act_row_bytes(d0.type, F) : 0);
    const int grouped = (size_t)c->estart[X] * rowb <= c->qact_bytes;
    const size_t xstride = (size_t)E * sizeof(float);
    j.gact = j.qg ? c->qact : (const uint8_t *)c->gx;
    j.gstride = j.qg ? rowb : xstride;
    if (j.qu) { /* up wants another layout: its own */
        j.uact = c->qact + bg;
        j.ustride = rowb;
    } else if (cpu_act_kind(u0.type) == CPU_ACT_F32) {
        j.uact = (const uint8_t *)c->gx;
        j.ustride = xstride;
    } else { /* the same layout as gate's: the same rows */
        j.uact = j.gact;
        j.ustride = j.gstride;
    }
    j.dact = j.qd ? c->qact + bg + bu : (const uint8_t *)c->ffa;
    j.dstride = j.qd ? rowb : (size_t)F * sizeof(float);
    const int gemm = c->gpack_al && cpu_gemm_supported(g0.type);
    for (int e = 0; e < X; e++) {
        const int r0 = c->estart[e], cnt = c->estart[e + 1] - r0;
        if (cnt > 0 && grouped && !(gemm && cnt >= CPU_MOE_GEMM_MIN_TOK))
            c->elist[j.n++] = e;
    }
    if (j.n) {
        pool_run(c->pool, j.n, group_up, &j);
        pool_run(c->pool, (int64_t)j.n * E, group_down, &j);
    }
    /* the rest alone (after the grouped ones: swiglu reuses ffa, ffb and qact from the start) */
    for (int e = 0; e < X; e++) {
        const int r0 = c->estart[e], cnt = c->estart[e + 1] - r0;
        if (cnt == 0 || (grouped && !(gemm && cnt >= CPU_MOE_GEMM_MIN_TOK)))
            continue;
        struct model_weight g = model_expert(&L->gate_exps, X, e);
        struct model_weight u = model_expert(&L->up_exps, X, e);
        struct model_weight d = model_expert(&L->down_exps, X, e);
        const struct fscope fs = {
            il, pos0, c->rows + r0, k, FAULT_T_FFN_GATE_EXPS, FAULT_T_FFN_UP_EXPS, FAULT_T_NONE};
        swiglu(c, &g, &u, &d, c->gx + (size_t)r0 * (size_t)E, cnt, c->gy + (size_t)r0 * (size_t)E,
               &fs);
    }
}

struct moe_sum_job {
    struct cpu *c;
    int k, fused; /* fused: one token's outputs in moe_y by slot (moe_decode); else gy by inv */
    int il, pos0; /* the scale fault on ffn_down_exps acts here, on each expert's output */
};

/* tokens [begin, end): xo = the experts' outputs weighted, in slot order (no expert: + w 0) */
static void moe_sum(void *ctx, int64_t begin, int64_t end, int thread)
{
    (void)thread;
    const struct moe_sum_job *j = ctx;
    struct cpu *c = j->c;
    const int64_t E = c->m->hp.n_embd;
    const int k = j->k;
    for (int64_t t = begin; t < end; t++) {
        float *o = c->xo + (size_t)t * (size_t)E;
        const float f = fault_scale_factor_inline(&c->base.faults, FAULT_T_FFN_DOWN_EXPS, j->il,
                                                  j->pos0 + (int)t);
        memset(o, 0, (size_t)E * sizeof(float));
        for (int s = 0; s < k; s++) {
            const size_t i = (size_t)t * (size_t)k + (size_t)s;
            const float w = c->selw[i];
            const float *y = j->fused         ? c->moe_y + i * (size_t)E
                             : c->inv[i] >= 0 ? c->gy + (size_t)c->inv[i] * (size_t)E
                                              : NULL;
            if (y && f != 1.0f)
                for (int64_t x = 0; x < E; x++)
                    o[x] += w * (y[x] * f);
            else if (y)
                for (int64_t x = 0; x < E; x++)
                    o[x] += w * y[x];
            else
                for (int64_t x = 0; x < E; x++)
                    o[x] += w * 0.0f;
        }
    }
}

static void moe(struct cpu *c, int il, int n, int pos0)
{
    const struct model_hparams *hp = &c->m->hp;
    const struct model_layer *L = &c->m->layers[il];
    const int X = (int)hp->n_expert, k = (int)hp->n_expert_used;
    const struct backend_taps *tp = c->base.taps;
    matmul(c, &L->gate_inp, c->xb, n, c->router);
    fault_scale(c, FAULT_T_FFN_GATE_INP, il, pos0, c->router, n, X, NULL, 1);
    for (int t = 0; t < n; t++) {
        struct route_result rr = route_select(c->router + (size_t)t * X, c->probs + (size_t)t * X,
                                              X, k, 1, &c->base.faults, il, pos0 + t,
                                              c->sel + (size_t)t * k, c->selw + (size_t)t * k);
        if (!tp)
            continue;
        const size_t ti = (size_t)il * (size_t)c->base.tap_n + (size_t)(c->base.tap_off + t);
        if (tp->experts)
            memcpy(tp->experts + ti * k, c->sel + (size_t)t * k, (size_t)k * sizeof(int32_t));
        if (tp->expert_w)
            memcpy(tp->expert_w + ti * k, c->selw + (size_t)t * k, (size_t)k * sizeof(float));
        if (tp->router_kth)
            tp->router_kth[ti] = rr.kth_logit;
        if (tp->router_k1th)
            tp->router_k1th[ti] = rr.k1th_logit;
    }
    /* only the routed experts run, each once over the tokens that chose it (one token: all of
     * them in two parallel regions, moe_decode; a batch: moe_batch) */
    const int fused = n == 1 && moe_decode(c, L, X, k, il, pos0) == 0;
    if (!fused)
        moe_batch(c, L, X, k, n, il, pos0);
    struct moe_sum_job sj = {c, k, fused, il, pos0};
    per_token(c, n, moe_sum, &sj);
}

static void ffn(struct cpu *c, int il, int n, int pos0)
{
    const struct model_hparams *hp = &c->m->hp;
    const struct model_layer *L = &c->m->layers[il];
    const int64_t E = hp->n_embd;
    for (int t = 0; t < n; t++)
        rmsnorm(c->xb + t * E, c->x + t * E, c->ffn_norm + il * E, E, hp->eps);
    const struct fscope fs = {
        il, pos0, NULL, 1, FAULT_T_FFN_GATE, FAULT_T_FFN_UP, FAULT_T_FFN_DOWN};
    if (hp->n_expert == 0)
        swiglu(c, &L->ffn_gate, &L->ffn_up, &L->ffn_down, c->xb, n, c->xo, &fs);
    else
        moe(c, il, n, pos0);
    for (int64_t i = 0; i < n * E; i++)
        c->x[i] += c->xo[i];
}

/* ---- the forward pass ----------------------------------------------------------------------- */

static void tap_hidden(struct cpu *c, int il, int n)
{
    const struct backend_taps *tp = c->base.taps;
    if (!tp || !tp->hidden)
        return;
    const size_t E = c->m->hp.n_embd;
    memcpy(tp->hidden + ((size_t)il * (size_t)c->base.tap_n + (size_t)c->base.tap_off) * E, c->x,
           (size_t)n * E * sizeof(float));
}

/* logits: (n, n_vocab), or with `last` only the last position's (n_vocab) — the output product
 * then runs for one row; each row's numbers do not depend on the others, so they are the same. */
static void cpu_forward_chunk(struct cpu *c, const int32_t *tokens, int n, int pos0, float *logits,
                              int last)
{
    const struct model *m = c->m;
    const struct model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    for (int t = 0; t < n; t++)
        quant_dequant_row(m->tok_embd.type, model_row(&m->tok_embd, tokens[t]), c->x + t * E, E);
    for (int il = 0; il < (int)hp->n_layer; il++) {
        attention(c, il, n, pos0);
#ifdef GATE_TEST_CPU_DEFECT_LAYER
        /* test-only compiled variant (tests/test_cpu_defect.c; never in gate): this layer's FFN
         * is dropped, so parity's localization must name this layer */
        if (il != GATE_TEST_CPU_DEFECT_LAYER)
#endif
            ffn(c, il, n, pos0);
        tap_hidden(c, il, n);
    }
    const int t0 = last ? n - 1 : 0;
    for (int t = t0; t < n; t++)
        rmsnorm(c->xb + t * E, c->x + t * E, c->out_norm, E, hp->eps);
    matmul(c, &m->output, c->xb + t0 * E, n - t0, logits);
    fault_scale(c, FAULT_T_OUTPUT, -1, pos0 + t0, logits, n - t0, hp->n_vocab, NULL, 1);
}

/* ops->forward: one chunk, already checked by backend_forward() (backend.h). */
static int cpu_forward(struct backend *b, const int32_t *tokens, int n, int pos0, float *logits,
                       struct gate_err *err)
{
    (void)err;
    cpu_forward_chunk((struct cpu *)b, tokens, n, pos0, logits, 0);
    return 0;
}

/* ops->forward_last: the chunk's last position's logits only (backend_forward_last). */
static int cpu_forward_last(struct backend *b, const int32_t *tokens, int n, int pos0,
                            float *logits, struct gate_err *err)
{
    (void)err;
    cpu_forward_chunk((struct cpu *)b, tokens, n, pos0, logits, 1);
    return 0;
}

static void cpu_info(const struct backend *b, struct backend_info *out)
{
    snprintf(out->backend, sizeof out->backend, "cpu");
    snprintf(out->device, sizeof out->device, "%s", ((const struct cpu *)b)->device);
    out->kernel_launches = 0;
    out->device_bytes = 0;
}

static void cpu_close(struct backend *b)
{
    struct cpu *c = (struct cpu *)b;
    if (!c)
        return;
    pool_free(c->pool);
    void *bufs[] = {c->attn_norm, c->ffn_norm, c->q_norm,   c->k_norm,   c->out_norm, c->x,
                    c->xb,        c->xo,       c->q,        c->k,        c->v,        c->att,
                    c->ffa,       c->ffb,      c->router,   c->probs,    c->sel,      c->selw,
                    c->rows,      c->gx,       c->gy,       c->moe_y,    c->scores,   c->qact,
                    c->kc,        c->vc,       c->rope_cos, c->rope_sin, c->kc16,     c->vc16,
                    c->kl,        c->vl,       c->gpack,    c->ascores,  c->inv,      c->estart,
                    c->elist,     c->rope_f};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(c);
}

/* ---- the device ----------------------------------------------------------------------------- */

/* The CPU's model name from /proc/cpuinfo into buf ("" when unknown). */
static void cpu_model_name(char *buf, size_t n)
{
    buf[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                p += 2;
                p[strcspn(p, "\n")] = '\0';
                snprintf(buf, n, "%s", p);
            }
            break;
        }
    fclose(f);
}

static uint64_t host_memory(void)
{
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

/* ops->describe: the host CPU and its memory. */
static int cpu_describe(struct backend_device *out, struct gate_err *err)
{
    (void)err;
    memset(out, 0, sizeof *out);
    cpu_model_name(out->name, sizeof out->name);
    if (!out->name[0])
        snprintf(out->name, sizeof out->name, "cpu");
    out->total_bytes = host_memory();
    return 0;
}

/* ---- open ----------------------------------------------------------------------------------- */

static void rope_tables(float *cs, float *sn, int n_ctx, int hd, float base)
{
    for (int i = 0; i < hd / 2; i++) {
        const double inv_freq = pow((double)base, -2.0 * (double)i / (double)hd);
        for (int p = 0; p < n_ctx; p++) {
            const double a = (double)p * inv_freq;
            cs[(size_t)p * (size_t)(hd / 2) + (size_t)i] = (float)cos(a);
            sn[(size_t)p * (size_t)(hd / 2) + (size_t)i] = (float)sin(a);
        }
    }
}

/* ERR_INPUT naming the tensor when the cpu engine has no kernel for w's type. */
static int check_weight(const struct model_weight *w, struct gate_err *err)
{
    if (!w->data || cpu_act_kind(w->type) >= 0)
        return 0;
    return err_set(err, ERR_INPUT,
                   "cpu: tensor '%s' has type %s, which the cpu engine has no kernel for",
                   w->name ? w->name : "?", quant_name(w->type));
}

static int check_types(const struct model *m, struct gate_err *err)
{
    int rc = check_weight(&m->output, err);
    for (uint32_t il = 0; !rc && il < m->hp.n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        const struct model_weight *ws[] = {&L->wq,        &L->wk,      &L->wv,       &L->wo,
                                           &L->ffn_gate,  &L->ffn_up,  &L->ffn_down, &L->gate_inp,
                                           &L->gate_exps, &L->up_exps, &L->down_exps};
        for (size_t i = 0; !rc && i < sizeof ws / sizeof ws[0]; i++)
            rc = check_weight(ws[i], err);
    }
    return rc;
}

struct plan_item {
    void **field;
    size_t count, size;
    const char *what;
};

static int cpu_open(struct backend **out, const struct model *m, const struct backend_config *cfg,
                    struct gate_err *err)
{
    *out = NULL;
    const struct model_hparams *hp = &m->hp;
    if (!cpu_dot_isa_env_ok())
        return err_set(err, ERR_ENV,
                       "cpu: GATE_CPU_ISA='%s' is not an instruction set this machine and build"
                       " run (portable, avx2, avx512; this one: up to %s)",
                       getenv("GATE_CPU_ISA"),
                       cpu_dot_isa_name(cpu_dot_have_avx512() ? 2
                                        : cpu_dot_have_avx2() ? 1
                                                              : 0));
    int rc = check_types(m, err);
    if (rc)
        return rc;
    struct cpu *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(err, ERR_ENV, "cpu: out of memory for the backend");
    c->base.ops = &backend_cpu_ops;
    c->base.model = m;
    c->m = m;
    const int n_ctx =
        cfg && cfg->n_ctx > 0 ? cfg->n_ctx : (hp->n_ctx_train < 4096 ? (int)hp->n_ctx_train : 4096);
    c->base.n_ctx = n_ctx;
    c->base.n_batch = cfg && cfg->n_batch > 0 ? cfg->n_batch : 512;
    if ((rc = pool_create(&c->pool, cfg ? cfg->n_threads : 0, err)))
        goto fail;
    const size_t nt = (size_t)pool_threads(c->pool);
    const size_t B = (size_t)c->base.n_batch, E = hp->n_embd, hd = hp->head_dim, L = hp->n_layer;
    const size_t qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    const int moe = hp->n_expert > 0;
    const size_t X = hp->n_expert, K = moe ? hp->n_expert_used : 1;
    const size_t F = moe ? hp->n_ff_exp : hp->n_ff;
    size_t max_cols = E > qd ? E : qd;
    max_cols = max_cols > F ? max_cols : F;
    /* bytes per quantized activation row: the larger of the two block layouts, rounded up */
    const size_t act_row = (max_cols / 32 + 1) * sizeof(struct cpu_q16_32) +
                           (max_cols / QK_K + 1) * sizeof(struct cpu_q16_K);
    const size_t R = moe ? B * K : B; /* rows of the largest product's input */
    /* the prompt GEMM's packed activations: the larger of its two layouts, columns rounded up */
    size_t gpack = 0;
    if (cpu_gemm_supported(QUANT_Q4_K)) {
        const size_t gk =
            cpu_gemm_pack_bytes(QUANT_Q4_K, (int)R, (int64_t)(max_cols / QK_K + 1) * QK_K);
        const size_t g8 =
            cpu_gemm_pack_bytes(QUANT_Q8_0, (int)R, (int64_t)(max_cols / 32 + 1) * 32);
        gpack = gk > g8 ? gk : g8;
    }
    const int f16 = cfg && cfg->kv_f16;
    const size_t kv_cells = L * (size_t)n_ctx * kvd;
    const struct plan_item plan[] = {
        {(void **)&c->attn_norm, L * E, sizeof(float), "attn_norm"},
        {(void **)&c->ffn_norm, L * E, sizeof(float), "ffn_norm"},
        {(void **)&c->q_norm, L * hd, sizeof(float), "q_norm"},
        {(void **)&c->k_norm, L * hd, sizeof(float), "k_norm"},
        {(void **)&c->out_norm, E, sizeof(float), "output_norm"},
        {(void **)&c->x, B * E, sizeof(float), "x"},
        {(void **)&c->xb, B * E, sizeof(float), "xb"},
        {(void **)&c->xo, B * E, sizeof(float), "xo"},
        {(void **)&c->q, B * qd, sizeof(float), "q"},
        {(void **)&c->k, B * kvd, sizeof(float), "k"},
        {(void **)&c->v, B * kvd, sizeof(float), "v"},
        {(void **)&c->att, B * qd, sizeof(float), "att"},
        {(void **)&c->ffa, R * F, sizeof(float), "ffa"},
        {(void **)&c->ffb, R * F, sizeof(float), "ffb"},
        {(void **)&c->router, moe ? B * X : 0, sizeof(float), "router"},
        {(void **)&c->probs, moe ? B * X : 0, sizeof(float), "probs"},
        {(void **)&c->sel, moe ? B * K : 0, sizeof(int32_t), "sel"},
        {(void **)&c->selw, moe ? B * K : 0, sizeof(float), "selw"},
        {(void **)&c->rows, moe ? B * K : 0, sizeof(int32_t), "rows"},
        {(void **)&c->inv, moe ? B * K : 0, sizeof(int32_t), "inv"},
        {(void **)&c->estart, moe ? X + 1 : 0, sizeof(int32_t), "estart"},
        {(void **)&c->elist, moe ? X : 0, sizeof(int32_t), "elist"},
        {(void **)&c->gx, moe ? B * K * E : 0, sizeof(float), "gx"},
        {(void **)&c->gy, moe ? B * K * E : 0, sizeof(float), "gy"},
        {(void **)&c->moe_y, moe ? B * K * E : 0, sizeof(float), "moe_y"},
        {(void **)&c->scores, nt * (size_t)n_ctx, sizeof(float), "scores"},
        {(void **)&c->ascores, cpu_gemm_attn_supported((int)hd) ? nt * 16 * (size_t)n_ctx + 16 : 0,
         sizeof(float), "batched attention scores"},
        {(void **)&c->qact, R * act_row, 1, "quantized activations"},
        {(void **)&c->gpack, gpack ? gpack + 64 : 0, 1, "packed activations"},
        {(void **)&c->kc, f16 ? 0 : kv_cells, sizeof(float), "K cache"},
        {(void **)&c->vc, f16 ? 0 : kv_cells, sizeof(float), "V cache"},
        {(void **)&c->kc16, f16 ? kv_cells : 0, sizeof(uint16_t), "K cache (F16)"},
        {(void **)&c->vc16, f16 ? kv_cells : 0, sizeof(uint16_t), "V cache (F16)"},
        {(void **)&c->kl, f16 ? (size_t)n_ctx * kvd : 0, sizeof(float), "one layer of K"},
        {(void **)&c->vl, f16 ? (size_t)n_ctx * kvd : 0, sizeof(float), "one layer of V"},
        {(void **)&c->rope_cos, (size_t)n_ctx * (hd / 2), sizeof(float), "rope_cos"},
        {(void **)&c->rope_sin, (size_t)n_ctx * (hd / 2), sizeof(float), "rope_sin"},
        {(void **)&c->rope_f, nt * hd, sizeof(float), "rope_shift angles"},
    };
    const size_t n_plan = sizeof plan / sizeof plan[0];
    /* memory arithmetic before allocation: refuse with the numbers, never crash on OOM */
    double total = 0.0;
    for (size_t i = 0; i < n_plan; i++)
        total += (double)plan[i].count * (double)plan[i].size;
    const uint64_t host = host_memory();
    if (host && total > (double)host) {
        rc = err_set(err, ERR_ENV,
                     "cpu: buffers for n_ctx %d, n_batch %d need %.0f MiB, more than the host's "
                     "%" PRIu64 " MiB",
                     n_ctx, c->base.n_batch, total / 1048576.0, host >> 20);
        goto fail;
    }
    for (size_t i = 0; i < n_plan; i++) {
        const size_t count = plan[i].count ? plan[i].count : 1;
        *plan[i].field = calloc(count, plan[i].size);
        if (!*plan[i].field) {
            rc = err_set(err, ERR_ENV, "cpu: out of memory for %s (%zu elements of %zu bytes)",
                         plan[i].what, count, plan[i].size);
            goto fail;
        }
    }
    c->qact_bytes = R * act_row;
    if (gpack) /* 64-byte aligned: the GEMM loads whole cache lines */
        c->gpack_al = (void *)(((uintptr_t)c->gpack + 63) & ~(uintptr_t)63);
    c->kv16 = f16;
    c->ascores_al = (float *)(((uintptr_t)c->ascores + 63) & ~(uintptr_t)63);
    c->attn_blocks = cpu_gemm_attn_supported((int)hd);
    c->base.kv_f16 = f16;
    for (size_t il = 0; il < L; il++) {
        const struct model_layer *ly = &m->layers[il];
        quant_dequant_row(ly->attn_norm.type, ly->attn_norm.data, c->attn_norm + il * E,
                          (int64_t)E);
        quant_dequant_row(ly->ffn_norm.type, ly->ffn_norm.data, c->ffn_norm + il * E, (int64_t)E);
        if (model_has_qk_norm(m)) {
            quant_dequant_row(ly->q_norm.type, ly->q_norm.data, c->q_norm + il * hd, (int64_t)hd);
            quant_dequant_row(ly->k_norm.type, ly->k_norm.data, c->k_norm + il * hd, (int64_t)hd);
        }
    }
    quant_dequant_row(m->output_norm.type, m->output_norm.data, c->out_norm, (int64_t)E);
    rope_tables(c->rope_cos, c->rope_sin, n_ctx, (int)hd, hp->rope_base);
    char name[sizeof c->device - 32];
    cpu_model_name(name, sizeof name);
    /* the instruction set the kernels run is part of what ran (receipts' ran.device) */
    snprintf(c->base.isa, sizeof c->base.isa, "%s", cpu_dot_isa_name(cpu_dot_isa()));
    if (name[0])
        snprintf(c->device, sizeof c->device, "cpu: %s [isa %s]", name, c->base.isa);
    else
        snprintf(c->device, sizeof c->device, "cpu [isa %s]", c->base.isa);
    *out = &c->base;
    return 0;
fail:
    cpu_close(&c->base);
    return rc;
}

const struct backend_ops backend_cpu_ops = {
    .name = "cpu",
    .describe = cpu_describe,
    .open = cpu_open,
    .forward = cpu_forward,
    .truncate = NULL, /* the cache is plain memory: later positions are overwritten */
    .info = cpu_info,
    .close = cpu_close,
    .forward_last = cpu_forward_last,
};
