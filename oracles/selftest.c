/* selftest.c — see selftest.h. Each family builds deterministic inputs, runs the device kernel
 * through its launcher in the accelerator backend's kernel tests (engine/kernel_tests.h, found
 * by capability: backend_kernel_tests()) and the CPU twin on the same inputs, and hands both to
 * the caller's comparison.
 *
 * Twins: every one is the reference engine's own function — quant_dequant_row() (weights,
 * embeddings), dotq_f32() (dot products), route_select() (routing), and engine/ref_ops.h's
 * ref_rmsnorm(), ref_norm_rope(), ref_attn_head() (through ref_attn_tokens()), ref_rope_tables():
 * one twin per op, never a copy. Start reading: TOL, then check_gemv().
 */
#include "oracles/selftest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/detmath.h"
#include "engine/backend.h"
#include "engine/dotq.h"
#include "engine/kernel_tests.h"
#include "engine/quant.h"
#include "engine/ref_ops.h"
#include "engine/route.h"
#include "faults/fault.h"

static const char *const FAMILIES[] = {
    "gemv",           "gemv_experts", "gemv_swiglu",     "gemv_v2",         "gemv_v2_experts",
    "gemv_v2_swiglu", "gemm",         "embed",           "argmax",          "rmsnorm",
    "qk_norm_rope",   "attention",    "attention_split", "attention_graph", "route",
    "route_v2",       "moe_sum"};

const char *const *selftest_families(int *n)
{
    *n = (int)(sizeof FAMILIES / sizeof FAMILIES[0]);
    return FAMILIES;
}

/* ---- the tolerance table (one row per family) ------------------------------------------------
 * Why each: FP32 kernels differ from the twin only in summation order and FMA contraction
 * (NMSE ~1e-14); the cuBLAS path rounds weights and activations to 16 bits (FP16: 2^-11
 * relative per element; BF16: 2^-8); cache rounding is applied to the twin's inputs too, so the
 * attention tolerance stays that of FP32 arithmetic; routing is exact (ids, logits) up to one
 * float rounding of the weights. */
struct tol {
    const char *family, *twin;
    double max_nmse, atol, rtol;
};
static const struct tol TOL[] = {
    {"gemv", "ref.c matmul (quant_dequant_row + dot)", 1e-10, 1e-4, 1e-4},
    {"gemv_experts", "ref.c matmul on model_expert slabs", 1e-10, 1e-4, 1e-4},
    {"gemv_swiglu", "ref.c swiglu (gate, up, silu * up)", 1e-10, 1e-4, 1e-4},
    /* GEMV v2: the same contract as v1 (FP32 sums, another order; docs/kernels.md "GEMV v2") */
    {"gemv_v2", "ref.c matmul (quant_dequant_row + dot)", 1e-10, 1e-4, 1e-4},
    {"gemv_v2_experts", "ref.c matmul on model_expert slabs", 1e-10, 1e-4, 1e-4},
    {"gemv_v2_swiglu", "ref.c swiglu (gate, up, silu * up)", 1e-10, 1e-4, 1e-4},
    {"gemm", "ref.c matmul (FP16 tiles + cuBLAS)", 1e-5, 5e-2, 1e-2},
    {"gemm_bf16", "ref.c matmul (BF16 tiles + cuBLAS)", 1e-3, 2e-1, 5e-2},
    {"embed", "quant_dequant_row of the token row", 1e-12, 1e-6, 1e-6},
    {"argmax", "first maximum", 0.0, 0.0, 0.0},
    {"rmsnorm", "ref.c rmsnorm", 1e-12, 1e-5, 1e-5},
    {"qk_norm_rope", "ref.c norm_rope + cache append", 1e-12, 1e-5, 1e-5},
    {"qk_norm_rope_f16", "ref.c norm_rope, cache rounded to FP16", 1e-7, 4e-3, 1e-3},
    {"attention", "ref.c attn_heads", 1e-10, 1e-5, 1e-4},
    /* split-KV: the same contract as v1 (FP32, another order; docs/kernels.md "Split-KV") */
    {"attention_split", "ref.c attn_heads", 1e-10, 1e-5, 1e-4},
    /* the decode graph's launches (position in device memory, sized for n_ctx): bit for bit */
    {"attention_graph", "the same kernel launched eagerly (bit for bit)", 0.0, 0.0, 0.0},
    {"route", "route_select + fault_apply_route", 1e-12, 1e-6, 1e-6},
    /* routing v2 (one warp per token): the same contract, ids and logits exact */
    {"route_v2", "route_select + fault_apply_route", 1e-12, 1e-6, 1e-6},
    {"moe_sum", "ref.c moe weighted sum + residual", 1e-12, 1e-5, 1e-5},
};

__attribute__((noinline)) static void case_init(struct selftest_case *c, const char *row,
                                                const char *what)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < sizeof TOL / sizeof TOL[0]; i++)
        if (!strcmp(TOL[i].family, row)) {
            c->twin = TOL[i].twin;
            c->max_nmse = TOL[i].max_nmse;
            c->atol = TOL[i].atol;
            c->rtol = TOL[i].rtol;
        }
    c->family = row;
    c->what = what;
}

struct run {
    const struct backend_kernel_tests *kt; /* the accelerator backend's kernels */
    selftest_cmp_fn cmp;
    void *ctx;
    int n_cases, n_failed;
    struct gate_err *err;
};

static void compare(struct run *r, const struct selftest_case *c, const float *got,
                    const float *want, int64_t n)
{
    r->n_cases++;
    if (r->cmp(r->ctx, c, got, want, n))
        r->n_failed++;
}

static void compare_ids(struct run *r, struct selftest_case *c, const int32_t *got,
                        const int32_t *want, int64_t n)
{
    float *a = malloc((size_t)n * sizeof(float) + 1), *b = malloc((size_t)n * sizeof(float) + 1);
    if (a && b) {
        for (int64_t i = 0; i < n; i++)
            a[i] = (float)got[i], b[i] = (float)want[i];
        const double at = c->atol, rt = c->rtol, nm = c->max_nmse;
        c->atol = 0.0, c->rtol = 0.0, c->max_nmse = 0.0; /* ids are exact */
        compare(r, c, a, b, n);
        c->atol = at, c->rtol = rt, c->max_nmse = nm;
    }
    free(a);
    free(b);
}

/* ---- deterministic inputs ---------------------------------------------------------------------
 */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [-scale, scale) */
static void fill(float *x, int64_t n, uint64_t seed, float scale)
{
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++)
        x[i] = scale * (float)((double)(rng_next(&s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* rows x cols floats quantized to `type` (malloc'd); *deq receives the exact dequantization
 * (malloc'd, rows x cols), which is what the twin multiplies with. */
static void *make_weight(int type, int64_t rows, int64_t cols, uint64_t seed, float **deq)
{
    const size_t rb = quant_row_bytes(type, cols);
    float *src = malloc((size_t)(rows * cols) * sizeof(float));
    uint8_t *q = malloc((size_t)rows * rb);
    *deq = malloc((size_t)(rows * cols) * sizeof(float));
    if (!src || !q || !*deq) {
        free(src), free(q), free(*deq);
        *deq = NULL;
        return NULL;
    }
    fill(src, rows * cols, seed, 1.0f);
    for (int64_t r = 0; r < rows; r++) {
        quant_quantize_row(type, src + r * cols, q + (size_t)r * rb, cols);
        quant_dequant_row(type, q + (size_t)r * rb, *deq + r * cols, cols);
    }
    free(src);
    return q;
}

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        if ((rc = (expr)))                                                                         \
            goto done;                                                                             \
    } while (0)
#define NEED(p, what)                                                                              \
    do {                                                                                           \
        if (!(p)) {                                                                                \
            rc = err_set(r->err, ERR_ENV, "selftest: out of host memory for %s", what);            \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* ---- GEMV (plain, experts, fused SwiGLU) and the cuBLAS GEMM ------------------------------- */

static const int GEMV_TYPES[] = {QUANT_F32,  QUANT_F16,  QUANT_BF16, QUANT_Q8_0,
                                 QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K};

/* Shape 3 is long enough that a v2 lane takes several rounds of items (Q8_0 130 items, Q4_K 136,
 * Q6_K 68) with a partial last round. */
static int64_t cols_for(int type, int which)
{
    static const int64_t plain[] = {100, 96, 1000, 1000}, q8[] = {32, 96, 1280, 2080},
                         kq[] = {256, 768, 1280, 4352};
    if (quant_block_size(type) == 1)
        return plain[which];
    return quant_block_size(type) == 32 ? q8[which] : kq[which];
}

/* gemv: the generation under test (1: family "gemv", 2: "gemv_v2", which runs v1 for the types
 * without a v2 kernel, so every type is checked through both selections). */
static int check_gemv(struct run *r, int gemv)
{
    int rc = 0;
    static const int64_t ROWS[] = {1, 37, 300, 19};
    static const int NVEC[] = {1, 1, 3, 2};
    for (size_t ti = 0; ti < sizeof GEMV_TYPES / sizeof GEMV_TYPES[0]; ti++)
        for (int s = 0; s < 4; s++)
            for (int acc = 0; acc < (s >= 2 ? 2 : 1); acc++) {
                const int type = GEMV_TYPES[ti], nv = NVEC[s];
                const int64_t rows = ROWS[s], cols = cols_for(type, s);
                float *deq = NULL, *x = NULL, *got = NULL, *want = NULL;
                void *w = make_weight(type, rows, cols, 11 + ti * 7 + (uint64_t)s, &deq);
                x = malloc((size_t)(nv * cols) * sizeof(float));
                got = malloc((size_t)(nv * rows) * sizeof(float));
                want = malloc((size_t)(nv * rows) * sizeof(float));
                if (!w || !x || !got || !want) {
                    rc = err_set(r->err, ERR_ENV,
                                 "selftest: out of host memory for the GEMV weights and vectors");
                } else {
                    fill(x, nv * cols, 99 + (uint64_t)s, 1.0f);
                    fill(got, nv * rows, 5, 1.0f); /* the accumulate case adds to this */
                    memcpy(want, got, (size_t)(nv * rows) * sizeof(float));
                    for (int v = 0; v < nv; v++)
                        for (int64_t o = 0; o < rows; o++) {
                            const float d = dotq_f32(deq + o * cols, x + v * cols, cols);
                            want[v * rows + o] = acc ? want[v * rows + o] + d : d;
                        }
                    rc = r->kt->gemv(gemv, type, w, rows, cols, 1, NULL, 1, x, nv, nv, acc, got,
                                     r->err);
                    if (!rc) {
                        struct selftest_case c;
                        case_init(&c, gemv == 2 ? "gemv_v2" : "gemv", "y");
                        snprintf(c.shape, sizeof c.shape, "%s rows %lld cols %lld vec %d%s",
                                 quant_name(type), (long long)rows, (long long)cols, nv,
                                 acc ? " +=" : "");
                        compare(r, &c, got, want, nv * rows);
                    }
                }
                free(w), free(deq), free(x), free(got), free(want);
                if (rc)
                    return rc;
            }
    return 0;
}

/* Expert slabs addressed by ids read on the device: gate/up style (x_div = k, the token's input
 * shared by its k slots) and down style (x_div = 1, one input per slot); the fused SwiGLU. */
static int check_experts(struct run *r, int swiglu, int gemv)
{
    int rc = 0;
    static const int TYPES[] = {QUANT_Q4_K, QUANT_Q6_K, QUANT_Q8_0, QUANT_F16};
    const int X = 8, k = 2, n_tok = 3, nv = n_tok * k;
    const int64_t rows = 64;
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++)
        for (int style = 0; style < (swiglu ? 1 : 2); style++) {
            const int type = TYPES[ti];
            const int64_t cols = quant_block_size(type) == 1 ? 320 : 768;
            const int x_div = style == 0 ? k : 1, n_x = style == 0 ? n_tok : nv;
            int32_t ids[6];
            for (int v = 0; v < nv; v++)
                ids[v] = (int32_t)((v * 5 + 3) % X); /* 3, 0, 5, 2, 7, 4 */
            float *dg = NULL, *du = NULL, *x = NULL, *got = NULL, *want = NULL;
            void *wg = make_weight(type, X * rows, cols, 31 + ti, &dg);
            void *wu = swiglu ? make_weight(type, X * rows, cols, 47 + ti, &du) : NULL;
            x = malloc((size_t)(n_x * cols) * sizeof(float));
            got = calloc((size_t)(nv * rows), sizeof(float));
            want = calloc((size_t)(nv * rows), sizeof(float));
            if (!wg || (swiglu && !wu) || !x || !got || !want) {
                rc = err_set(r->err, ERR_ENV,
                             "selftest: out of host memory for the expert slabs and vectors");
            } else {
                fill(x, n_x * cols, 123 + ti, 1.0f);
                for (int v = 0; v < nv; v++)
                    for (int64_t o = 0; o < rows; o++) {
                        const float *xv = x + (v / x_div) * cols;
                        const int64_t wr = (int64_t)ids[v] * rows + o;
                        const float g = dotq_f32(dg + wr * cols, xv, cols);
                        want[v * rows + o] =
                            swiglu ? det_silu(g) * dotq_f32(du + wr * cols, xv, cols) : g;
                    }
                rc = swiglu ? r->kt->gemv_swiglu(gemv, type, wg, wu, rows, cols, X, ids, x_div, x,
                                                 n_x, nv, got, r->err)
                            : r->kt->gemv(gemv, type, wg, rows, cols, X, ids, x_div, x, n_x, nv, 0,
                                          got, r->err);
                if (!rc) {
                    struct selftest_case c;
                    case_init(&c,
                              gemv == 2 ? (swiglu ? "gemv_v2_swiglu" : "gemv_v2_experts")
                                        : (swiglu ? "gemv_swiglu" : "gemv_experts"),
                              "y");
                    snprintf(c.shape, sizeof c.shape,
                             "%s %d experts rows %lld cols %lld tok %d"
                             " top%d %s",
                             quant_name(type), X, (long long)rows, (long long)cols, n_tok, k,
                             style == 0 ? "shared input" : "input per slot");
                    compare(r, &c, got, want, nv * rows);
                }
            }
            free(wg), free(wu), free(dg), free(du), free(x), free(got), free(want);
            if (rc)
                return rc;
        }
    return 0;
}

static int check_gemm(struct run *r)
{
    int rc = 0;
    static const int TYPES[] = {QUANT_F16,  QUANT_BF16, QUANT_Q8_0,
                                QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K};
    static const int NTOK[] = {1, 8, 300};
    const int64_t rows = 300;
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++)
        for (int s = 0; s < 3; s++)
            for (int bf = 0; bf < ((TYPES[ti] == QUANT_Q4_K && s == 2) ? 2 : 1); bf++) {
                const int type = TYPES[ti], n = NTOK[s];
                const int64_t cols = quant_block_size(type) == 1 ? 544 : 512;
                float *deq = NULL, *x = NULL, *got = NULL, *want = NULL;
                void *w = make_weight(type, rows, cols, 77 + ti, &deq);
                x = malloc((size_t)(n * cols) * sizeof(float));
                got = calloc((size_t)(n * rows), sizeof(float));
                want = calloc((size_t)(n * rows), sizeof(float));
                if (!w || !x || !got || !want) {
                    rc = err_set(
                        r->err, ERR_ENV,
                        "selftest: out of host memory for the GEMM weights and activations");
                } else {
                    fill(x, n * cols, 7 + (uint64_t)s, 1.0f);
                    for (int t = 0; t < n; t++)
                        for (int64_t o = 0; o < rows; o++)
                            want[t * rows + o] = dotq_f32(deq + o * cols, x + t * cols, cols);
                    rc = r->kt->gemm(type, w, rows, cols, x, n, bf, 0, got, r->err);
                    if (!rc) {
                        struct selftest_case c;
                        case_init(&c, bf ? "gemm_bf16" : "gemm", "y");
                        snprintf(c.shape, sizeof c.shape, "%s rows %lld cols %lld tokens %d %s",
                                 quant_name(type), (long long)rows, (long long)cols, n,
                                 bf ? "BF16" : "FP16");
                        compare(r, &c, got, want, n * rows);
                    }
                }
                free(w), free(deq), free(x), free(got), free(want);
                if (rc)
                    return rc;
            }
    return 0;
}

static int check_embed(struct run *r)
{
    int rc = 0;
    static const int TYPES[] = {QUANT_F32, QUANT_F16, QUANT_Q8_0, QUANT_Q4_K, QUANT_Q6_K};
    const int32_t tokens[] = {0, 49, 7, 7};
    const int n = 4;
    const int64_t V = 50;
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
        const int type = TYPES[ti];
        const int64_t E = quant_block_size(type) == 1 ? 100 : 512;
        float *deq = NULL, *got = NULL, *want = NULL;
        void *w = make_weight(type, V, E, 3 + ti, &deq);
        got = calloc((size_t)(n * E), sizeof(float));
        want = calloc((size_t)(n * E), sizeof(float));
        if (!w || !got || !want) {
            rc = err_set(r->err, ERR_ENV,
                         "selftest: out of host memory for the embedding table and rows");
        } else {
            for (int t = 0; t < n; t++)
                memcpy(want + t * E, deq + tokens[t] * E, (size_t)E * sizeof(float));
            rc = r->kt->embed(type, w, V, E, tokens, n, got, r->err);
            if (!rc) {
                struct selftest_case c;
                case_init(&c, "embed", "x");
                snprintf(c.shape, sizeof c.shape, "%s vocab %lld E %lld tokens 0 49 7 7",
                         quant_name(type), (long long)V, (long long)E);
                compare(r, &c, got, want, n * E);
            }
        }
        free(w), free(deq), free(got), free(want);
        if (rc)
            return rc;
    }
    return 0;
}

static int check_argmax(struct run *r)
{
    int rc = 0;
    const int n = 3, V = 1000;
    float *l = malloc((size_t)n * V * sizeof(float));
    int32_t got[3], want[3];
    NEED(l, "the argmax logits");
    fill(l, (int64_t)n * V, 17, 1.0f);
    l[0 * V + 17] = 5.0f, l[0 * V + 500] = 5.0f; /* tie: the lower index wins */
    l[1 * V + 999] = 7.0f;                       /* the last element */
    l[2 * V + 0] = 3.0f;                         /* the first element */
    for (int t = 0; t < n; t++) {
        int b = 0;
        for (int i = 1; i < V; i++)
            if (l[t * V + i] > l[t * V + b])
                b = i;
        want[t] = b;
    }
    TRY(r->kt->argmax(l, n, V, got, r->err));
    {
        struct selftest_case c;
        case_init(&c, "argmax", "index");
        snprintf(c.shape, sizeof c.shape, "vocab %d tokens %d (a tie, last, first)", V, n);
        compare_ids(r, &c, got, want, n);
    }
done:
    free(l);
    return rc;
}

/* ---- norms, RoPE, attention ------------------------------------------------------------------ */

/* ref.c rmsnorm(), line for line */
static int check_rmsnorm(struct run *r)
{
    int rc = 0;
    static const int ES[] = {256, 1000, 2048};
    static const int NS[] = {1, 5, 1};
    for (int s = 0; s < 3; s++) {
        const int E = ES[s], n = NS[s];
        float *x = malloc((size_t)n * E * 4), *w = malloc((size_t)E * 4);
        float *got = malloc((size_t)n * E * 4), *want = malloc((size_t)n * E * 4);
        if (!x || !w || !got || !want) {
            rc = err_set(r->err, ERR_ENV, "selftest: out of host memory for the RMSNorm rows");
        } else {
            fill(x, (int64_t)n * E, 40 + (uint64_t)s, 3.0f);
            fill(w, E, 41 + (uint64_t)s, 1.0f);
            for (int t = 0; t < n; t++)
                ref_rmsnorm(want + (size_t)t * E, x + (size_t)t * E, w, E, 1e-6f);
            rc = r->kt->rmsnorm(x, w, n, E, 1e-6f, got, r->err);
            if (!rc) {
                struct selftest_case c;
                case_init(&c, "rmsnorm", "y");
                snprintf(c.shape, sizeof c.shape, "E %d tokens %d", E, n);
                compare(r, &c, got, want, (int64_t)n * E);
            }
        }
        free(x), free(w), free(got), free(want);
        if (rc)
            return rc;
    }
    return 0;
}

static float round16(float v)
{
    return quant_fp16_to_f32(quant_f32_to_fp16(v));
}

struct attn_shape {
    int hd, nh, nkv, n, pos0;
};
static const struct attn_shape ATTN_SHAPES[] = {
    {64, 4, 4, 1, 0},    {128, 4, 4, 1, 37},  {128, 8, 2, 1, 299}, {128, 16, 2, 1, 100},
    {64, 16, 2, 300, 0}, {128, 8, 2, 300, 0}, {128, 4, 1, 5, 20},
};
#define ATTN_CTX 512

static int check_qk_norm_rope(struct run *r)
{
    int rc = 0;
    const int n_ctx = ATTN_CTX, layer = 2;
    for (size_t si = 0; si < sizeof ATTN_SHAPES / sizeof ATTN_SHAPES[0]; si++)
        for (int f32 = 0; f32 < 2; f32++) {
            const struct attn_shape *s = &ATTN_SHAPES[si];
            const int hd = s->hd, nh = s->nh, nkv = s->nkv, n = s->n, kvd = nkv * hd;
            const size_t cache = (size_t)n_ctx * kvd;
            /* a skip_qk_norm fault on two positions of this layer in every other shape */
            struct fault_set fs = {0};
            const int faulted = si % 2 == 1;
            if (faulted) {
                fs.n = 1;
                fs.f[0] = (struct fault_spec){.kind = FAULT_SKIP_QK_NORM,
                                              .layer_lo = layer,
                                              .layer_hi = layer,
                                              .pos_lo = s->pos0,
                                              .pos_hi = s->pos0 + 1};
            }
            float *q = malloc((size_t)n * nh * hd * 4), *k = malloc((size_t)n * kvd * 4);
            float *v = malloc((size_t)n * kvd * 4), *qn = malloc((size_t)hd * 4);
            float *kn = malloc((size_t)hd * 4);
            float *cs = malloc((size_t)n_ctx * (hd / 2) * 4);
            float *sn = malloc((size_t)n_ctx * (hd / 2) * 4);
            float *qw = malloc((size_t)n * nh * hd * 4), *kcw = calloc(cache, 4);
            float *vcw = calloc(cache, 4), *kcg = calloc(cache, 4), *vcg = calloc(cache, 4);
            if (!q || !k || !v || !qn || !kn || !cs || !sn || !qw || !kcw || !vcw || !kcg || !vcg) {
                rc = err_set(r->err, ERR_ENV,
                             "selftest: out of host memory for the Q/K/V rows and caches");
            } else {
                fill(q, (int64_t)n * nh * hd, 61 + si, 2.0f);
                fill(k, (int64_t)n * kvd, 62 + si, 2.0f);
                fill(v, (int64_t)n * kvd, 63 + si, 2.0f);
                fill(qn, hd, 64, 1.5f);
                fill(kn, hd, 65, 1.5f);
                ref_rope_tables(cs, sn, n_ctx, hd, 1e6f);
                memcpy(qw, q, (size_t)n * nh * hd * 4);
                for (int t = 0; t < n; t++) {
                    const int pos = s->pos0 + t, half = hd / 2;
                    const int skip = fault_skips_qk_norm(&fs, layer, pos);
                    for (int h = 0; h < nh; h++)
                        ref_norm_rope(qw + ((size_t)t * nh + h) * hd, qn, cs + pos * half,
                                      sn + pos * half, hd, 1e-6f, skip);
                    float kt[1024];
                    memcpy(kt, k + (size_t)t * kvd, (size_t)kvd * 4);
                    for (int h = 0; h < nkv; h++)
                        ref_norm_rope(kt + (size_t)h * hd, kn, cs + pos * half, sn + pos * half, hd,
                                      1e-6f, skip);
                    for (int i = 0; i < kvd; i++) {
                        kcw[(size_t)pos * kvd + i] = f32 ? kt[i] : round16(kt[i]);
                        vcw[(size_t)pos * kvd + i] =
                            f32 ? v[(size_t)t * kvd + i] : round16(v[(size_t)t * kvd + i]);
                    }
                }
                rc = r->kt->qk_norm_rope(q, k, v, n, s->pos0, layer, nh, nkv, hd, qn, kn, 1e-6f, cs,
                                         sn, n_ctx, f32, &fs, kcg, vcg, r->err);
                if (!rc) {
                    struct selftest_case c;
                    const char *row = f32 ? "qk_norm_rope" : "qk_norm_rope_f16";
                    char shape[160];
                    snprintf(shape, sizeof shape, "hd %d heads %d/%d tokens %d at %d, KV %s%s", hd,
                             nh, nkv, n, s->pos0, f32 ? "FP32" : "FP16",
                             faulted ? ", skip_qk_norm at 2 positions" : "");
                    case_init(&c, "qk_norm_rope", "q");
                    snprintf(c.shape, sizeof c.shape, "%s", shape);
                    compare(r, &c, q, qw, (int64_t)n * nh * hd);
                    case_init(&c, row, "k cache");
                    c.family = "qk_norm_rope";
                    snprintf(c.shape, sizeof c.shape, "%s", shape);
                    compare(r, &c, kcg, kcw, (int64_t)cache);
                    case_init(&c, row, "v cache");
                    c.family = "qk_norm_rope";
                    snprintf(c.shape, sizeof c.shape, "%s", shape);
                    compare(r, &c, vcg, vcw, (int64_t)cache);
                }
            }
            free(q), free(k), free(v), free(qn), free(kn), free(cs), free(sn), free(qw);
            free(kcw), free(vcw), free(kcg), free(vcg);
            if (rc)
                return rc;
        }
    return 0;
}

static int check_attention(struct run *r)
{
    int rc = 0;
    const int n_ctx = ATTN_CTX;
    for (size_t si = 0; si < sizeof ATTN_SHAPES / sizeof ATTN_SHAPES[0]; si++)
        for (int f32 = 0; f32 < 2; f32++) {
            const struct attn_shape *sh = &ATTN_SHAPES[si];
            const int hd = sh->hd, nh = sh->nh, nkv = sh->nkv, n = sh->n, kvd = nkv * hd;
            const size_t cache = (size_t)n_ctx * kvd, qn = (size_t)n * nh * hd;
            float *q = malloc(qn * 4), *kc = malloc(cache * 4), *vc = malloc(cache * 4);
            float *got = malloc(qn * 4), *want = malloc(qn * 4), *s = malloc(n_ctx * 4);
            if (!q || !kc || !vc || !got || !want || !s) {
                rc = err_set(r->err, ERR_ENV,
                             "selftest: out of host memory for the attention rows and caches");
            } else {
                fill(q, (int64_t)qn, 81 + si, 1.0f);
                fill(kc, (int64_t)cache, 82 + si, 1.0f);
                fill(vc, (int64_t)cache, 83 + si, 1.0f);
                if (!f32) /* the twin reads what the FP16 cache holds */
                    for (size_t i = 0; i < cache; i++)
                        kc[i] = round16(kc[i]), vc[i] = round16(vc[i]);
                ref_attn_tokens(q, kc, vc, n, sh->pos0, nh, nkv, hd, 0, s, want);
                rc = r->kt->attention(q, kc, vc, f32, n, sh->pos0, nh, nkv, hd, n_ctx, got, r->err);
                if (!rc) {
                    struct selftest_case c;
                    case_init(&c, "attention", "out");
                    snprintf(c.shape, sizeof c.shape,
                             "hd %d heads %d/%d (GQA %d) tokens %d at"
                             " %d, KV %s",
                             hd, nh, nkv, nh / nkv, n, sh->pos0, f32 ? "FP32" : "FP16");
                    compare(r, &c, got, want, (int64_t)qn);
                }
            }
            free(q), free(kc), free(vc), free(got), free(want), free(s);
            if (rc)
                return rc;
        }
    return 0;
}

/* Split-KV attention (attn split) against the twin: decode-sized chunks (the split runs for up to
 * 8 tokens), keys inside one 128-key split, at its edge and over several; the 8B and 30B-A3B
 * GQA groups, a group of 16, no GQA, hd 64; drop_diag on every other shape (position 0: zeros). */
static int check_attention_split(struct run *r)
{
    static const struct attn_shape SH[] = {{128, 32, 8, 1, 300}, {128, 32, 4, 1, 511},
                                           {128, 16, 1, 2, 127}, {64, 4, 4, 1, 0},
                                           {128, 8, 2, 5, 20},   {128, 4, 4, 8, 250}};
    const int n_ctx = ATTN_CTX, layer = 1;
    int rc = 0;
    for (size_t si = 0; si < sizeof SH / sizeof SH[0]; si++)
        for (int f32 = 0; f32 < 2; f32++) {
            const int hd = SH[si].hd, nh = SH[si].nh, nkv = SH[si].nkv, n = SH[si].n;
            const int pos0 = SH[si].pos0, kvd = nkv * hd, drop = si % 2 == 1;
            const size_t cache = (size_t)n_ctx * kvd, qn = (size_t)n * nh * hd;
            struct fault_set fs = {0};
            if (drop) {
                fs.n = 1;
                fs.f[0] = (struct fault_spec){.kind = FAULT_DROP_DIAG,
                                              .layer_lo = layer,
                                              .layer_hi = layer,
                                              .pos_lo = 0,
                                              .pos_hi = 1 << 30};
            }
            float *q = malloc(qn * 4), *kc = malloc(cache * 4), *vc = malloc(cache * 4);
            float *got = malloc(qn * 4), *want = malloc(qn * 4), *sc = malloc(n_ctx * 4);
            if (!q || !kc || !vc || !got || !want || !sc) {
                rc = err_set(r->err, ERR_ENV, "selftest: no host memory for attention_split");
            } else {
                fill(q, (int64_t)qn, 181 + si, 1.0f);
                fill(kc, (int64_t)cache, 182 + si, 1.0f);
                fill(vc, (int64_t)cache, 183 + si, 1.0f);
                if (!f32)
                    for (size_t i = 0; i < cache; i++)
                        kc[i] = round16(kc[i]), vc[i] = round16(vc[i]);
                ref_attn_tokens(q, kc, vc, n, pos0, nh, nkv, hd, drop, sc, want);
                rc = r->kt->attention_at(2, 0, q, kc, vc, f32, n, pos0, nh, nkv, hd, n_ctx, layer,
                                         &fs, got, r->err);
                if (!rc) {
                    struct selftest_case c;
                    case_init(&c, "attention_split", "out");
                    snprintf(c.shape, sizeof c.shape,
                             "hd %d heads %d/%d (GQA %d) tokens %d at %d, KV %s%s", hd, nh, nkv,
                             nh / nkv, n, pos0, f32 ? "FP32" : "FP16", drop ? ", drop_diag" : "");
                    compare(r, &c, got, want, (int64_t)qn);
                }
            }
            free(q), free(kc), free(vc), free(got), free(want), free(sc);
            if (rc)
                return rc;
        }
    return 0;
}

/* The decode graph's kernels (docs/kernels.md "The decode step as one CUDA graph"): v1 and split
 * attention and the RoPE/KV append launched as the graph launches them (position in device
 * memory, attention sized for n_ctx keys, captured while the position held another value,
 * replayed there and then at the asked position) against the same launch made eagerly: bit for
 * bit. */
static int check_attention_graph(struct run *r)
{
    static const struct attn_shape SH[] = {
        {128, 32, 4, 1, 300}, {128, 32, 8, 1, 0}, {64, 4, 4, 1, 129}, {128, 8, 2, 5, 20}};
    const int n_ctx = ATTN_CTX, layer = 1;
    int rc = 0;
    for (size_t si = 0; si < sizeof SH / sizeof SH[0] && !rc; si++) {
        const int hd = SH[si].hd, nh = SH[si].nh, nkv = SH[si].nkv, n = SH[si].n;
        const int pos0 = SH[si].pos0, kvd = nkv * hd, half = hd / 2;
        const size_t cache = (size_t)n_ctx * kvd, qn = (size_t)n * nh * hd;
        const size_t kn = (size_t)n * kvd, tab = (size_t)n_ctx * half;
        float *q = malloc(qn * 4), *kc = malloc(cache * 4), *vc = malloc(cache * 4);
        float *a = malloc(qn * 4), *b = malloc(qn * 4), *k = malloc(kn * 4), *v = malloc(kn * 4);
        float *kc2 = malloc(cache * 4), *vc2 = malloc(cache * 4), *qa = malloc(qn * 4);
        float *qb = malloc(qn * 4), *cs = malloc(tab * 4), *sn = malloc(tab * 4);
        float *wn = malloc((size_t)hd * 4);
        if (!q || !kc || !vc || !a || !b || !k || !v || !kc2 || !vc2 || !qa || !qb || !cs || !sn ||
            !wn) {
            rc = err_set(r->err, ERR_ENV, "selftest: no host memory for attention_graph");
        } else {
            fill(q, (int64_t)qn, 281 + si, 1.0f);
            fill(kc, (int64_t)cache, 282 + si, 1.0f);
            fill(vc, (int64_t)cache, 283 + si, 1.0f);
            fill(k, (int64_t)kn, 284 + si, 1.0f);
            fill(v, (int64_t)kn, 285 + si, 1.0f);
            fill(wn, hd, 286 + si, 1.0f);
            ref_rope_tables(cs, sn, n_ctx, hd, 1e6f);
            char shape[128];
            snprintf(shape, sizeof shape, "hd %d heads %d/%d tokens %d at %d", hd, nh, nkv, n,
                     pos0);
            for (int attn = 1; attn <= 2 && !rc; attn++)
                for (int f32 = 0; f32 < 2 && !rc; f32++) {
                    rc = r->kt->attention_at(attn, 0, q, kc, vc, f32, n, pos0, nh, nkv, hd, n_ctx,
                                             layer, NULL, a, r->err);
                    if (!rc)
                        rc = r->kt->attention_at(attn, 1, q, kc, vc, f32, n, pos0, nh, nkv, hd,
                                                 n_ctx, layer, NULL, b, r->err);
                    if (!rc) {
                        struct selftest_case c;
                        case_init(&c, "attention_graph", attn == 2 ? "split out" : "v1 out");
                        snprintf(c.shape, sizeof c.shape, "%s, KV %s", shape,
                                 f32 ? "FP32" : "FP16");
                        compare(r, &c, b, a, (int64_t)qn);
                    }
                }
            for (int f32 = 0; f32 < 2 && !rc; f32++) {
                memcpy(qa, q, qn * 4), memcpy(qb, q, qn * 4);
                rc = r->kt->qk_norm_rope_at(0, qa, k, v, n, pos0, layer, nh, nkv, hd, wn, wn, 1e-6f,
                                            cs, sn, n_ctx, f32, NULL, kc, vc, r->err);
                if (!rc)
                    rc = r->kt->qk_norm_rope_at(1, qb, k, v, n, pos0, layer, nh, nkv, hd, wn, wn,
                                                1e-6f, cs, sn, n_ctx, f32, NULL, kc2, vc2, r->err);
                if (!rc) {
                    struct selftest_case c;
                    case_init(&c, "attention_graph", "RoPE q");
                    snprintf(c.shape, sizeof c.shape, "%s, KV %s", shape, f32 ? "FP32" : "FP16");
                    compare(r, &c, qb, qa, (int64_t)qn);
                    case_init(&c, "attention_graph", "K cache");
                    snprintf(c.shape, sizeof c.shape, "%s, KV %s", shape, f32 ? "FP32" : "FP16");
                    compare(r, &c, kc2, kc, (int64_t)cache);
                    case_init(&c, "attention_graph", "V cache");
                    snprintf(c.shape, sizeof c.shape, "%s, KV %s", shape, f32 ? "FP32" : "FP16");
                    compare(r, &c, vc2, vc, (int64_t)cache);
                }
            }
        }
        free(q), free(kc), free(vc), free(a), free(b), free(k), free(v), free(kc2), free(vc2);
        free(qa), free(qb), free(cs), free(sn), free(wn);
    }
    return rc;
}

/* ---- routing and the weighted sum -------------------------------------------------------------
 */

/* route: the generation under test (1: family "route", 2: "route_v2"). */
static int check_route(struct run *r, int route)
{
    const char *fam = route == 2 ? "route_v2" : "route";
    int rc = 0;
    /* 40: experts not a multiple of the warp; 33 of 33: k = X (no (k+1)-th) */
    static const int XK[][2] = {{8, 1}, {8, 2}, {16, 2}, {128, 8}, {40, 8}, {33, 33}};
    const int n = 6, layer = 1, pos0 = 10;
    for (size_t si = 0; si < sizeof XK / sizeof XK[0]; si++)
        for (int fk = -1; fk < 3; fk++) {
            const int X = XK[si][0], k = XK[si][1];
            struct fault_set fs = {0};
            if (fk >= 0) { /* each routing fault on positions 11-13, rank 1 (or 0 when k = 1) */
                fs.n = 1;
                fs.f[0] = (struct fault_spec){.kind = (enum fault_kind)fk,
                                              .rank = k > 1 ? 1 : 0,
                                              .layer_hi = 1000,
                                              .pos_lo = pos0 + 1,
                                              .pos_hi = pos0 + 3};
            }
            float *l = malloc((size_t)n * X * 4), *probs = malloc((size_t)X * 4);
            int32_t *ig = malloc((size_t)n * k * 4), *iw = malloc((size_t)n * k * 4);
            float *wg = malloc((size_t)n * k * 4), *ww = malloc((size_t)n * k * 4);
            float kg[6], k1g[6], kw[6], k1w[6];
            if (!l || !probs || !ig || !iw || !wg || !ww) {
                rc = err_set(r->err, ERR_ENV,
                             "selftest: out of host memory for the router logits and choices");
            } else {
                fill(l, (int64_t)n * X, 91 + si, 3.0f);
                /* ties: tokens 0-2 on a coarse grid (many equal logits), token 3 all equal */
                for (int i = 0; i < 3 * X; i++)
                    l[i] = roundf(l[i]);
                for (int i = 0; i < X; i++)
                    l[3 * X + i] = 0.5f;
                for (int t = 0; t < n; t++) {
                    struct route_result rr =
                        route_select(l + (size_t)t * X, probs, X, k, 1, &fs, layer, pos0 + t,
                                     iw + (size_t)t * k, ww + (size_t)t * k);
                    kw[t] = rr.kth_logit, k1w[t] = rr.k1th_logit;
                }
                rc = r->kt->route(route, l, n, X, k, layer, pos0, &fs, ig, wg, kg, k1g, r->err);
                if (!rc) {
                    struct selftest_case c;
                    char shape[160];
                    snprintf(shape, sizeof shape, "%d experts top%d, 6 tokens (ties)%s%s", X, k,
                             fk >= 0 ? ", fault " : "", fk >= 0 ? fault_kind_name(fk) : "");
                    case_init(&c, fam, "ids");
                    snprintf(c.shape, sizeof c.shape, "%s", shape);
                    compare_ids(r, &c, ig, iw, (int64_t)n * k);
                    case_init(&c, fam, "weights");
                    snprintf(c.shape, sizeof c.shape, "%s", shape);
                    compare(r, &c, wg, ww, (int64_t)n * k);
                    case_init(&c, fam, "k-th / (k+1)-th logit");
                    snprintf(c.shape, sizeof c.shape, "%s", shape);
                    float a[12], b[12];
                    for (int t = 0; t < n; t++)
                        a[t] = kg[t], a[n + t] = k1g[t], b[t] = kw[t], b[n + t] = k1w[t];
                    compare(r, &c, a, b, 2 * n);
                }
            }
            free(l), free(probs), free(ig), free(iw), free(wg), free(ww);
            if (rc)
                return rc;
        }
    return 0;
}

static int check_moe_sum(struct run *r)
{
    int rc = 0;
    static const int KS[] = {1, 2, 8};
    const int n = 3, E = 1000;
    for (int s = 0; s < 3; s++) {
        const int k = KS[s];
        float *x = malloc((size_t)n * E * 4), *w = malloc((size_t)n * k * 4);
        float *y = malloc((size_t)n * k * E * 4), *want = malloc((size_t)n * E * 4);
        if (!x || !w || !y || !want) {
            rc = err_set(r->err, ERR_ENV,
                         "selftest: out of host memory for the expert outputs and residual");
        } else {
            fill(x, (int64_t)n * E, 51, 2.0f);
            fill(w, (int64_t)n * k, 52, 1.0f);
            fill(y, (int64_t)n * k * E, 53, 2.0f);
            for (int t = 0; t < n; t++)
                for (int i = 0; i < E; i++) {
                    float acc = 0.0f;
                    for (int j = 0; j < k; j++)
                        acc += w[t * k + j] * y[((size_t)t * k + j) * E + i];
                    want[(size_t)t * E + i] = x[(size_t)t * E + i] + acc;
                }
            rc = r->kt->moe_sum(x, w, y, n, k, E, r->err);
            if (!rc) {
                struct selftest_case c;
                case_init(&c, "moe_sum", "x");
                snprintf(c.shape, sizeof c.shape, "top%d E %d tokens %d", k, E, n);
                compare(r, &c, x, want, (int64_t)n * E);
            }
        }
        free(x), free(w), free(y), free(want);
        if (rc)
            return rc;
    }
    return 0;
}

int selftest_device(char *name, size_t n, struct gate_err *err)
{
    if (n)
        name[0] = '\0';
    const struct backend_kernel_tests *kt = backend_kernel_tests(NULL, err);
    return kt ? kt->device(name, n, err) : ERR_ENV;
}

int selftest_kernels(const char *family, selftest_cmp_fn cmp, void *ctx, int *n_cases,
                     int *n_failed, struct gate_err *err)
{
    struct run r = {backend_kernel_tests(NULL, err), cmp, ctx, 0, 0, err};
    char name[160];
    int rc = r.kt ? r.kt->device(name, sizeof name, err) : ERR_ENV;
    int known = family == NULL;
#define FAMILY(fname, call)                                                                        \
    if (!rc && (!family || !strcmp(family, fname))) {                                              \
        known = 1;                                                                                 \
        rc = call;                                                                                 \
    }
    FAMILY("gemv", check_gemv(&r, 1));
    FAMILY("gemv_experts", check_experts(&r, 0, 1));
    FAMILY("gemv_swiglu", check_experts(&r, 1, 1));
    FAMILY("gemv_v2", check_gemv(&r, 2));
    FAMILY("gemv_v2_experts", check_experts(&r, 0, 2));
    FAMILY("gemv_v2_swiglu", check_experts(&r, 1, 2));
    FAMILY("gemm", check_gemm(&r));
    FAMILY("embed", check_embed(&r));
    FAMILY("argmax", check_argmax(&r));
    FAMILY("rmsnorm", check_rmsnorm(&r));
    FAMILY("qk_norm_rope", check_qk_norm_rope(&r));
    FAMILY("attention", check_attention(&r));
    FAMILY("attention_split", check_attention_split(&r));
    FAMILY("attention_graph", check_attention_graph(&r));
    FAMILY("route", check_route(&r, 1));
    FAMILY("route_v2", check_route(&r, 2));
    FAMILY("moe_sum", check_moe_sum(&r));
#undef FAMILY
    if (!rc && !known)
        rc = err_set(err, ERR_INPUT, "selftest: unknown kernel family '%s'", family);
    if (n_cases)
        *n_cases = r.n_cases;
    if (n_failed)
        *n_failed = r.n_failed;
    return rc;
}
