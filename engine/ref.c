/* ref.c — the reference twin: the specification every other backend is judged by.
 *
 * FP32 activations, weights dequantized exactly one row at a time into a scratch buffer
 * (quant_dequant_row), dot products in float with sixteen fixed lanes reduced in a fixed order
 * (dotq.h; decode uses its fused form, which gives the same bits),
 * norms and softmax sums in double, exp/sin/cos from detmath (machine-independent). Rows of
 * every matrix product are split over a thread pool; no result depends on the thread count.
 * Nothing is allocated inside forward(): every buffer is sized at open. The contract (checks,
 * chunking by n_batch, counters, taps and faults bookkeeping) is backend.c's: ref_forward()
 * evaluates one checked chunk.
 *
 * The forward pass (FACTS.md §5–6), for each layer:
 *   h = RMSNorm(x) * attn_norm
 *   q, k, v = Wq h, Wk h, Wv h
 *   q, k per head: RMSNorm * q_norm / k_norm, then RoPE (NEOX halves)
 *   append k, v to the cache; attention per query head over kv head (head / (nh / nkv)),
 *   scale 1/sqrt(head_dim), causal
 *   x += Wo attn
 *   h = RMSNorm(x) * ffn_norm
 *   dense: x += Wdown (silu(Wgate h) * Wup h)
 *   MoE:   route (route.c), x += sum over slots w_s * expert_s(h)
 * then logits = Wout (RMSNorm(x) * output_norm).
 * Faults act where the twin computes the thing they name (faults/fault.h): routing faults in
 * route_select, skip_qk_norm in the Q/K norm, and the numeric faults of issue 22 §3 (a scale
 * fault multiplies the named product's output rows, kv_corrupt the K and V entries as stored,
 * rope_shift recomputes a position's angles with the shifted base, drop_diag leaves a query's own
 * key out) — the judge under the same fault, for exec engines' fault parity and falsify by proxy.
 * Emulation of the CUDA path's roundings (test-facing, off by default; docs/kernels.md
 * "Numerics"): GATE_REF_EMULATE, read at open, a comma-separated list of
 *   kv-f16     K (after norm + RoPE) and V rounded to FP16 as they enter the cache
 *   gemm-f16   the batched projections of a chunk of >= REF_EMU_GEMM_MIN tokens (Q, K, V, O, the
 *              dense FFN, the LM head; not the router nor the experts, which the CUDA backend runs
 *              through its FP32 GEMV) take weights and activations rounded to FP16, FP32 sums
 *   gemm-bf16  the same with BF16
 *   cuda-f16   cuda-f32,kv-f16,gemm-f16 (the FP16 configuration of the CUDA backend)
 *   fma        the device's contractions and orders: every matrix product and attention score
 *              as a 32-lane fmaf dot with the warp butterfly (dot32_fma), weights dequantized
 *              with d*q - m fused (quant_dequant_row_fused, also the embedding), attention
 *              output accumulated with fmaf, RoPE fused as nvcc fuses it
 *   expf       CUDA's expf (dev_expf) in softmax and SiLU instead of det_expf
 *   softmax-f32 the softmax sum in float in the attention block's order, 1/sum in float
 *   norm-order the RMSNorm sums of squares (double) in the device's block order
 *   cuda-f32   fma,expf,softmax-f32,norm-order (the gated FP32 configuration of the CUDA backend)
 *   ex2-2ulp   envelope, not a prediction: expf with MUFU.EX2's stand-in moved by up to 2 ulp
 *   gemm-seq   envelope, not a prediction: fma, with the cuBLAS projections (chunks >= 8) summed
 *              by one sequential fmaf chain instead of the GEMV's lanes
 *   act-q12    the `cpu` engine's activation rounding (engine/cpu_dot.h, written again here from
 *              its definition, not shared): before every product with a quantized weight, each
 *              block of the input row (32 values for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, 256 for
 *              Q4_K/Q5_K/Q6_K) becomes d * q, d = max|x| / 2047, q = nearest-even(x * (1/d))
 *   none / ""  nothing
 * Every item reads the kernels' SASS (docs/kernels.md "Numerics" lists each difference, its bound
 * and what the emulation cannot reproduce: MUFU.EX2's own error, cuBLAS's summation order).
 * A twin opened with it is a prediction of the CUDA backend, never a judge: the tests open the
 * judge without it (tests/test_emulation.c).
 * Start reading: ref_forward_chunk().
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "base/detmath.h"
#include "dotq.h"
#include "pool.h"
#include "quant.h"
#include "ref_ops.h"
#include "route.h"

struct ref {
    struct backend base; /* first: a struct ref * is a struct backend * */
    const struct model *m;
    struct pool *pool;
    char device[128]; /* "cpu: <model name>" */
    int64_t max_cols; /* longest weight row: rowbuf stride */
    /* norm weights, dequantized once: (n_layer, E) / (n_layer, hd) / (E) */
    float *attn_norm, *ffn_norm, *q_norm, *k_norm, *out_norm;
    /* activations, n_batch rows each */
    float *x;                   /* (B, E) residual stream */
    float *xb;                  /* (B, E) normalized input of the current block */
    float *xo;                  /* (B, E) block output before the residual add */
    float *q;                   /* (B, nh*hd) */
    float *k;                   /* (B, nkv*hd) */
    float *v;                   /* (B, nkv*hd) */
    float *att;                 /* (B, nh*hd) */
    float *ffa;                 /* (B*k, F or Fe) gate activations */
    float *ffb;                 /* (B*k, F or Fe) up activations */
    float *router;              /* (B, X) */
    float *probs;               /* (B, X) */
    int32_t *sel;               /* (B, k) selected experts */
    float *selw;                /* (B, k) their weights */
    int32_t *rows;              /* (B*k) flat (t*k + slot) index of each gathered row */
    float *gx;                  /* (B*k, E) gathered expert inputs */
    float *gy;                  /* (B*k, E) expert outputs */
    float *moe_y;               /* (B, k, E) expert output per token and slot */
    float *scores;              /* (n_threads, n_ctx) */
    float *rowbuf;              /* (n_threads, max_cols) */
    float *kc, *vc;             /* (kv_layers, n_ctx, kvd) caches: K after norm + RoPE, V as is */
    float *rope_cos, *rope_sin; /* (n_ctx, hd/2) */
    float *rope_f;              /* (hd) rope_shift's angles of one position */
    int emu_kv;                 /* GATE_REF_EMULATE: 1 = FP16 KV cache */
    int emu_gemm;               /* GATE_REF_EMULATE: 1 = FP16, 2 = BF16 projection inputs */
    int emu_fma;                /* GATE_REF_EMULATE: the device's dots, dequantization, RoPE */
    int emu_expf;               /* GATE_REF_EMULATE: the device's expf in softmax and SiLU */
    int emu_softmax;            /* GATE_REF_EMULATE: softmax sum in float, the device's order */
    int emu_norm;               /* GATE_REF_EMULATE: RMSNorm sums in the device's order */
    int emu_ex2;                /* GATE_REF_EMULATE envelope: ex2 moved by up to 2 ulp */
    int emu_gemm_seq;           /* GATE_REF_EMULATE envelope: cuBLAS products in one FMA chain */
    int emu_act;                /* GATE_REF_EMULATE: the cpu engine's 12-bit block activations */
    float *emu_x;               /* (B, max_cols) rounded activations (emu_gemm only) */
    float *emu_a;               /* (B*k, max_cols) block-rounded activations (emu_act only) */
    /* the layers the cache holds: n_layer, or 1 for a layer-major twin (the "kv-one-layer" item:
     * ref_forward_forced only) */
    int kv_layers;
};

/* Chunks this long take the CUDA backend's cuBLAS projections (GEMM_MIN_TOKENS there). */
#define REF_EMU_GEMM_MIN 8

/* ---- numerics ----------------------------------------------------------------------------- */

/* y = RMSNorm(x) * w over n elements (mean of squares in double, as ggml does). */
void ref_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)x[i] * x[i];
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = (x[i] * scale) * w[i];
}

/* ---- emulated roundings (GATE_REF_EMULATE) ------------------------------------------------- */

/* f rounded to the nearest FP16 value (ties to even), as __float2half_rn; overflow gives Inf. */
static float round_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = x & 0x80000000u, ax = x ^ sign;
    if (ax >= 0x7f800000u) /* Inf, NaN */
        return f;
    if (ax < 0x38800000u) /* below 2^-14: FP16 subnormals, a quantum of 2^-24 */
        return rintf(f * 16777216.0f) / 16777216.0f;
    uint32_t r = ax + 0x0fffu + ((ax >> 13) & 1u); /* 10 mantissa bits, ties to even */
    r &= ~0x1fffu;
    if (r >= 0x47800000u) /* 65520 and above round to Inf */
        r = 0x7f800000u;
    r |= sign;
    float out;
    memcpy(&out, &r, 4);
    return out;
}

/* f rounded to the nearest BF16 value (ties to even), as __float2bfloat16_rn. */
static float round_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN */
        return f;
    x = (x + 0x7fffu + ((x >> 16) & 1u)) & 0xffff0000u;
    float out;
    memcpy(&out, &x, 4);
    return out;
}

static void round_n(float *x, int64_t n, int how)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = how == 2 ? round_bf16(x[i]) : round_f16(x[i]);
}

/* The CUDA kernels' dot product (k_gemv.cu gemv_kernel, k_attn.cu scores): lane l of a warp
 * accumulates elements l, l + 32, ... in increasing order with one fmaf each (FFMA), then the
 * butterfly __shfl_xor 16, 8, 4, 2, 1 adds lane l to lane l + o; lane 0's value is the result. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__)
/* fmaf is exact by definition, so the FMA clone (one instruction) and the baseline (libm's
 * software fmaf) give the same bits; only the speed differs */
#define EMU_FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define EMU_FMA_CLONES
#endif
EMU_FMA_CLONES
static float dot32_fma(const float *restrict a, const float *restrict b, int64_t n)
{
    float lane[32] = {0};
    const int64_t full = n & ~(int64_t)31;
    for (int64_t g = 0; g < full; g += 32)
        for (int l = 0; l < 32; l++)
            lane[l] = fmaf(a[g + l], b[g + l], lane[l]);
    for (int64_t i = full; i < n; i++)
        lane[i - full] = fmaf(a[i], b[i], lane[i - full]);
    for (int o = 16; o > 0; o >>= 1)
        for (int l = 0; l < o; l++)
            lane[l] += lane[l + o];
    return lane[0];
}

/* The envelope of cuBLAS's unknown order (gemm-seq): one fmaf chain over the row in order, the
 * other end of the orders an SGEMM may use (the GEMV's 32 lanes being one). */
EMU_FMA_CLONES
static float dot_seq_fma(const float *restrict a, const float *restrict b, int64_t n)
{
    float acc = 0.0f;
    for (int64_t i = 0; i < n; i++)
        acc = fmaf(a[i], b[i], acc);
    return acc;
}

/* CUDA's expf(x) as nvcc 13 compiles it for sm_90 (read from the SASS of k_attn.cu and
 * k_gemv.cu): t = sat(fma(x, log2(e)/252, 0.5)); J = floor(252 t) - 126 (FFMA.RM into the
 * integer range of 1.5 * 2^23); r = fma(x, LOG2E_HI, -J), r = fma(x, LOG2E_LO, r); the result is
 * 2^J * ex2(r), and in SiLU the 1 + expf(-z) is one FFMA(2^J, ex2(r), 1). MUFU.EX2 (ex2.approx)
 * is the hardware's own approximation, which no CPU reproduces: the correctly rounded 2^r stands
 * in for it (det_exp, machine-independent), so its few-ulp error is the part of the device's
 * expf this does not emulate (docs/kernels.md "Numerics"). plus_one: the fused 1 + e. */
static float dev_expf(float x, int plus_one, int ulp2)
{
    const float C = 0x1.77313ap-8f; /* log2(e) / 252, 0x3bbb989d */
    float t = fmaf(x, C, 0.5f);
    t = t != t ? 0.0f : t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t; /* .SAT: NaN gives 0 */
    const int n = (int)floor((double)t * 252.0);               /* exact: 24 + 8 bits */
    const float J = (float)(n - 126);
    float r = fmaf(x, 1.4426950216293334961f, -J);
    r = fmaf(x, 1.925963033500011079e-08f, r);
    float e2 = (float)det_exp((double)r * 0.69314718055994530942);
    if (ulp2) { /* ex2-2ulp: e2 (in [0.5, 2]) moved by -2..+2 ulp, a hash of r choosing */
        uint32_t b;
        memcpy(&b, &r, 4);
        b = (b ^ (b >> 15)) * 0x2c1b3c6dU;
        b ^= b >> 12;
        uint32_t eb;
        memcpy(&eb, &e2, 4);
        eb += (uint32_t)((int32_t)(b % 5u) - 2);
        memcpy(&e2, &eb, 4);
    }
    uint32_t bits = (uint32_t)(n + 1) << 23; /* 2^J, J in -126..126 */
    float scale;
    memcpy(&scale, &bits, 4);
    return plus_one ? fmaf(scale, e2, 1.0f) : scale * e2;
}

/* The device's SiLU (k_gemv.cu k_silu): z / (1 + expf(-z)) with the 1 + e fused. */
static float dev_silu(float z, int ulp2)
{
    return z / dev_expf(-z, 1, ulp2);
}

/* The device's sum of squares of a block reduction (k_norm_rope.cu block_sum_d): thread i of
 * `threads` adds x[i], x[i + threads], ... in double, each warp's butterfly adds its lanes, then
 * the warps' sums are added in order. Same double terms as the twin, another order. */
static double dev_sum_sq(const float *x, int64_t n, int threads)
{
    double t[256] = {0};
    for (int64_t i = 0; i < n; i++)
        t[i % threads] += (double)x[i] * x[i];
    double s = 0.0;
    for (int w = 0; w < threads / 32; w++) {
        double *v = t + 32 * w;
        for (int o = 16; o > 0; o >>= 1)
            for (int l = 0; l < o; l++)
                v[l] += v[l + o];
        s += v[0];
    }
    return s;
}

/* ref_rmsnorm() with the sum of squares of the device's block of `threads` (norm-order). */
static void dev_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps, int threads)
{
    const float mean = (float)(dev_sum_sq(x, n, threads) / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = (x[i] * scale) * w[i];
}

/* GATE_REF_EMULATE (see the header) into r->emu_*; ERR_INPUT naming an unknown item. */
static int emulation_parse(struct ref *r, const char *text, struct gate_err *err)
{
    char buf[256];
    if (text && strlen(text) >= sizeof buf) /* never drop items silently by truncation */
        return err_set(err, ERR_INPUT,
                       "ref: GATE_REF_EMULATE is too long (%zu characters, at most %zu)",
                       strlen(text), sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", text ? text : "");
    for (char *save = NULL, *it = strtok_r(buf, ", ", &save); it;
         it = strtok_r(NULL, ", ", &save)) {
        if (!strcmp(it, "kv-f16"))
            r->emu_kv = 1;
        else if (!strcmp(it, "gemm-f16"))
            r->emu_gemm = 1;
        else if (!strcmp(it, "gemm-bf16"))
            r->emu_gemm = 2;
        else if (!strcmp(it, "cuda-f16"))
            r->emu_kv = r->emu_gemm = r->emu_fma = r->emu_expf = r->emu_softmax = r->emu_norm = 1;
        else if (!strcmp(it, "fma"))
            r->emu_fma = 1;
        else if (!strcmp(it, "expf"))
            r->emu_expf = 1;
        else if (!strcmp(it, "softmax-f32"))
            r->emu_softmax = 1;
        else if (!strcmp(it, "norm-order"))
            r->emu_norm = 1;
        else if (!strcmp(it, "ex2-2ulp"))
            r->emu_expf = r->emu_ex2 = 1;
        else if (!strcmp(it, "gemm-seq"))
            r->emu_fma = r->emu_gemm_seq = 1;
        else if (!strcmp(it, "cuda-f32"))
            r->emu_fma = r->emu_expf = r->emu_softmax = r->emu_norm = 1;
        else if (!strcmp(it, "act-q12"))
            r->emu_act = 1;
        else if (!strcmp(it, "kv-one-layer")) /* not a rounding: the cache's layout */
            r->kv_layers = 1;
        else if (strcmp(it, "none"))
            return err_set(err, ERR_INPUT,
                           "ref: GATE_REF_EMULATE item '%.40s' is unknown (known: kv-f16,"
                           " gemm-f16, gemm-bf16, cuda-f16, fma, expf, softmax-f32, norm-order,"
                           " cuda-f32, ex2-2ulp, gemm-seq, act-q12, kv-one-layer, none)",
                           it);
    }
    return 0;
}

/* ---- matrix products ---------------------------------------------------------------------- */

struct matmul_job {
    struct ref *r;
    const struct model_weight *w;
    const float *x; /* (n, cols) */
    float *y;       /* (n, rows) */
    int n;
    int round_w; /* emulation: round each dequantized weight row (1 FP16, 2 BF16) */
    int seq;     /* emulation envelope (gemm-seq): one sequential fmaf chain per dot */
};

static void matmul_rows(void *ctx, int64_t begin, int64_t end, int thread)
{
    struct matmul_job *j = ctx;
    const struct model_weight *w = j->w;
    float *row = j->r->rowbuf + (size_t)thread * (size_t)j->r->max_cols;
    for (int64_t o = begin; o < end; o++) {
        if (j->r->emu_fma) { /* the device's dequantization and dot, every chunk length */
            quant_dequant_row_fused(w->type, model_row(w, o), row, w->cols);
            if (j->round_w)
                round_n(row, w->cols, j->round_w);
            for (int t = 0; t < j->n; t++)
                j->y[(size_t)t * (size_t)w->rows + (size_t)o] = (j->seq ? dot_seq_fma : dot32_fma)(
                    row, j->x + (size_t)t * (size_t)w->cols, w->cols);
            continue;
        }
        if (j->n == 1) { /* decode: the fused form of the same sum (dotq.h) */
            j->y[o] = dotq_fast(w->type, model_row(w, o), j->x, w->cols, row);
            continue;
        }
        /* several tokens: dequantize the row once, then one dot product per token */
        const float *wr = row;
        if (w->type == QUANT_F32 && !j->round_w)
            wr = model_row(w, o);
        else
            quant_dequant_row(w->type, model_row(w, o), row, w->cols);
        if (j->round_w)
            round_n(row, w->cols, j->round_w);
        for (int t = 0; t < j->n; t++)
            j->y[(size_t)t * (size_t)w->rows + (size_t)o] =
                dotq_f32(wr, j->x + (size_t)t * (size_t)w->cols, w->cols);
    }
}

/* The block of activations the cpu engine quantizes before a product with a weight of `type`
 * (engine/cpu_dot.h cpu_act_kind): 32, 256, or 0 for float weights (and types it does not run). */
static int act_block(int type)
{
    switch (type) {
    case QUANT_Q4_0:
    case QUANT_Q4_1:
    case QUANT_Q5_0:
    case QUANT_Q5_1:
    case QUANT_Q8_0:
        return 32;
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K:
        return QK_K;
    default:
        return 0;
    }
}

/* act-q12: x (n rows of cols) as the cpu engine's 12-bit blocks give it back, into r->emu_a; x
 * itself when w is float or the emulation is off. Per block: d = max|x| / 2047,
 * q = nearest-even(x * (1 / d)) clamped to +-2047 (1/d as a float, as the engine multiplies),
 * the value d * q. */
static const float *act_rounded(struct ref *r, const struct model_weight *w, const float *x, int n)
{
    const int blk = r->emu_act ? act_block(w->type) : 0;
    if (!blk)
        return x;
    const int64_t total = (int64_t)n * w->cols;
    for (int64_t b = 0; b < total; b += blk) {
        float amax = 0.0f;
        for (int i = 0; i < blk; i++)
            amax = fabsf(x[b + i]) > amax ? fabsf(x[b + i]) : amax;
        const float d = amax / 2047.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        for (int i = 0; i < blk; i++) {
            float q = nearbyintf(x[b + i] * id);
            q = q > 2047.0f ? 2047.0f : q < -2047.0f ? -2047.0f : q;
            r->emu_a[b + i] = d * q;
        }
    }
    return r->emu_a;
}

/* y (n, w.rows) = x (n, w.cols) times W transposed: y[t][o] = dot(W row o, x[t]). */
static void matmul(struct ref *r, const struct model_weight *w, const float *x, int n, float *y)
{
    struct matmul_job j = {r, w, act_rounded(r, w, x, n), y, n, 0, 0};
    pool_run(r->pool, w->rows, matmul_rows, &j);
}

/* A projection the CUDA backend runs through cuBLAS on a long chunk (Q, K, V, O, the dense FFN,
 * the LM head): matmul(), with the emulated rounding of weights and activations when asked. */
static void matmul_proj(struct ref *r, const struct model_weight *w, const float *x, int n,
                        float *y)
{
    if (n < REF_EMU_GEMM_MIN || (!r->emu_gemm && !r->emu_gemm_seq)) {
        matmul(r, w, x, n, y);
        return;
    }
    const float *xin = act_rounded(r, w, x, n);
    if (r->emu_gemm) {
        memcpy(r->emu_x, xin, (size_t)n * (size_t)w->cols * sizeof(float));
        round_n(r->emu_x, (int64_t)n * w->cols, r->emu_gemm);
        xin = r->emu_x;
    }
    struct matmul_job j = {r, w, xin, y, n, r->emu_gemm, r->emu_gemm_seq};
    pool_run(r->pool, w->rows, matmul_rows, &j);
}

/* ---- attention ---------------------------------------------------------------------------- */

struct attn_job {
    struct ref *r;
    int layer;
    int n;    /* tokens in this chunk */
    int pos0; /* position of token 0 */
};

void ref_attn_head(const float *q, const float *kc, const float *vc, size_t kv_stride, int pos,
                   int hd, float *s, float *out)
{
#ifdef GATE_TEST_BROKEN_TWIN
    /* tests/test_broken_twin.c only (never built into gate): the deliberately wrong twin of
     * issue 10's story, attention scaled by 1/head_dim; the anchor gate must catch it */
    const float scale = 1.0f / (float)hd;
#else
    const float scale = 1.0f / sqrtf((float)hd);
#endif
    float max = -INFINITY;
    for (int p = 0; p <= pos; p++) { /* causal: keys 0..pos */
        s[p] = dotq_f32(q, kc + (size_t)p * kv_stride, hd) * scale;
        if (s[p] > max)
            max = s[p];
    }
    double sum = 0.0;
    for (int p = 0; p <= pos; p++) {
        s[p] = det_expf(s[p] - max);
        sum += s[p];
    }
    const float inv = (float)(1.0 / sum);
    for (int d = 0; d < hd; d++)
        out[d] = 0.0f;
    for (int p = 0; p <= pos; p++) /* out += (s[p] * inv) * v[p] */
        dotq_axpy(out, s[p] * inv, vc + (size_t)p * kv_stride, hd);
}

void ref_attn_tokens(const float *q, const float *kc, const float *vc, int n, int pos0, int nh,
                     int nkv, int hd, int drop_diag, float *scores, float *out)
{
    const size_t kvd = (size_t)nkv * (size_t)hd, qd = (size_t)nh * (size_t)hd;
    const int group = nh / nkv;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++) {
            const int last = pos0 + t - (drop_diag ? 1 : 0);
            const size_t kv = (size_t)(h / group) * (size_t)hd;
            float *o = out + (size_t)t * qd + (size_t)h * (size_t)hd;
            if (last < 0)
                memset(o, 0, (size_t)hd * sizeof(float));
            else
                ref_attn_head(q + (size_t)t * qd + (size_t)h * (size_t)hd, kc + kv, vc + kv, kvd,
                              last, hd, scores, o);
        }
}

/* ref_attn_head() as the device computes it (k_attn.cu attn_kernel, ATTN_THREADS 128), each
 * difference only when its emulation is on: fma, the scores by dot32_fma and the output
 * accumulated with fmaf(p, v, acc); expf, dev_expf; softmax, the sum in float (thread i of 128
 * adds keys i, i + 128, ..., a butterfly per warp, the 4 warps in order) and 1 / sum in float. */
EMU_FMA_CLONES
static void attn_head_dev(const struct ref *r, const float *q, const float *kc, const float *vc,
                          size_t kv_stride, int pos, int hd, float *s, float *out)
{
    const float scale = 1.0f / sqrtf((float)hd);
    float max = -INFINITY;
    for (int p = 0; p <= pos; p++) {
        const float *k = kc + (size_t)p * kv_stride;
        s[p] = (r->emu_fma ? dot32_fma(q, k, hd) : dotq_f32(q, k, hd)) * scale;
        if (s[p] > max)
            max = s[p];
    }
    for (int p = 0; p <= pos; p++)
        s[p] = r->emu_expf ? dev_expf(s[p] - max, 0, r->emu_ex2) : det_expf(s[p] - max);
    float inv;
    if (r->emu_softmax) {
        float part[128] = {0};
        for (int p = 0; p <= pos; p++)
            part[p % 128] += s[p];
        float sum = 0.0f;
        for (int w = 0; w < 4; w++) {
            float *v = part + 32 * w;
            for (int o = 16; o > 0; o >>= 1)
                for (int l = 0; l < o; l++)
                    v[l] += v[l + o];
            sum = w == 0 ? v[0] : sum + v[0];
        }
        inv = 1.0f / sum;
    } else {
        double sum = 0.0;
        for (int p = 0; p <= pos; p++)
            sum += s[p];
        inv = (float)(1.0 / sum);
    }
    for (int d = 0; d < hd; d++)
        out[d] = 0.0f;
    for (int p = 0; p <= pos; p++) {
        const float pw = s[p] * inv;
        const float *v = vc + (size_t)p * kv_stride;
        for (int d = 0; d < hd; d++)
            out[d] = r->emu_fma ? fmaf(pw, v[d], out[d]) : out[d] + pw * v[d];
    }
}

/* The scale fault on n output rows of `cols` floats: row r is the token at pos0 + r, or with
 * `rows` token rows[r] / k (gathered expert rows). */
static void fault_scale(const struct ref *r, int tensor, int il, int pos0, float *y, int n,
                        int64_t cols, const int32_t *rows, int k)
{
    const struct fault_set *fs = &r->base.faults;
    for (int i = 0; fs->n && i < n; i++) {
        const float f = fault_scale_factor_inline(fs, tensor, il, pos0 + (rows ? rows[i] / k : i));
        if (f != 1.0f)
            for (int64_t x = 0; x < cols; x++)
                y[(size_t)i * (size_t)cols + (size_t)x] *= f;
    }
}

/* Where layer il's cache starts in kc / vc (floats): a layer-major twin reuses one layer's. */
static size_t kv_base(const struct ref *r, int il)
{
    const struct model_hparams *hp = &r->m->hp;
    return (size_t)(r->kv_layers == 1 ? 0 : il) * (size_t)r->base.n_ctx * (size_t)hp->n_head_kv *
           (size_t)hp->head_dim;
}

static void attn_heads(void *ctx, int64_t begin, int64_t end, int thread)
{
    struct attn_job *j = ctx;
    struct ref *r = j->r;
    const struct model_hparams *hp = &r->m->hp;
    const int hd = (int)hp->head_dim, nh = (int)hp->n_head, nkv = (int)hp->n_head_kv;
    const int kvd = nkv * hd, group = nh / nkv;
    const float *kc = r->kc + kv_base(r, j->layer);
    const float *vc = r->vc + kv_base(r, j->layer);
    float *s = r->scores + (size_t)thread * (size_t)r->base.n_ctx;
    for (int64_t item = begin; item < end; item++) {
        const int t = (int)(item / nh), h = (int)(item % nh), g = h / group;
        const int pos = j->pos0 + t;
        /* drop_diag: keys 0..pos-1 (at position 0 nothing: a zero output) */
        const int last = fault_drops_diag_inline(&r->base.faults, j->layer, pos) ? pos - 1 : pos;
        float *out = r->att + (size_t)t * (size_t)(nh * hd) + (size_t)h * (size_t)hd;
        if (last < 0)
            memset(out, 0, (size_t)hd * sizeof(float));
        else if (r->emu_fma || r->emu_expf || r->emu_softmax)
            attn_head_dev(r, r->q + (size_t)t * (size_t)(nh * hd) + (size_t)h * (size_t)hd,
                          kc + (size_t)g * (size_t)hd, vc + (size_t)g * (size_t)hd, (size_t)kvd,
                          last, hd, s, out);
        else
            ref_attn_head(r->q + (size_t)t * (size_t)(nh * hd) + (size_t)h * (size_t)hd,
                          kc + (size_t)g * (size_t)hd, vc + (size_t)g * (size_t)hd, (size_t)kvd,
                          last, hd, s, out);
    }
}

/* Per-head Q/K RMSNorm, then RoPE (NEOX: rotate (x[i], x[i + hd/2])), for one head vector. */
void ref_norm_rope(float *x, const float *w, const float *cs, const float *sn, int hd, float eps,
                   int skip_norm)
{
    if (!skip_norm)
        ref_rmsnorm(x, x, w, hd, eps);
    const int half = hd / 2;
    for (int i = 0; i < half; i++) {
        const float a = x[i], b = x[i + half];
        x[i] = a * cs[i] - b * sn[i];
        x[i + half] = a * sn[i] + b * cs[i];
    }
}

/* ref_norm_rope() as the device computes it (k_norm_rope.cu qk_norm_rope_kv_kernel, 64 threads
 * for hd < 128, else 128): norm-order, the sum of squares in the block's order; fma, the rotation
 * contracted as nvcc does (FFMA a, c, -(b s) and FFMA b, c, (a s)). */
static void norm_rope_dev(const struct ref *r, float *x, const float *w, const float *cs,
                          const float *sn, int hd, float eps, int skip_norm)
{
    if (!skip_norm) {
        if (r->emu_norm)
            dev_rmsnorm(x, x, w, hd, eps, hd >= 128 ? 128 : 64);
        else
            ref_rmsnorm(x, x, w, hd, eps);
    }
    const int half = hd / 2;
    for (int i = 0; i < half; i++) {
        const float a = x[i], b = x[i + half];
        if (r->emu_fma) {
            x[i] = fmaf(a, cs[i], -(b * sn[i]));
            x[i + half] = fmaf(b, cs[i], a * sn[i]);
        } else {
            x[i] = a * cs[i] - b * sn[i];
            x[i + half] = a * sn[i] + b * cs[i];
        }
    }
}

static void norm_rope_twin(const struct ref *r, float *x, const float *w, const float *cs,
                           const float *sn, int hd, float eps, int skip_norm)
{
    (void)r;
    ref_norm_rope(x, w, cs, sn, hd, eps, skip_norm);
}

/* RMSNorm of the residual stream: the twin's, or with norm-order the device's (rmsnorm_kernel,
 * 256 threads). */
static void norm_row(const struct ref *r, float *y, const float *x, const float *w, int64_t n)
{
    if (r->emu_norm)
        dev_rmsnorm(y, x, w, n, r->m->hp.eps, 256);
    else
        ref_rmsnorm(y, x, w, n, r->m->hp.eps);
}

/* One position's RoPE angles with base `base` (rope_shift), as ref_rope_tables() computes them. */
static void rope_row(float *cs, float *sn, int pos, int hd, double base)
{
    const double lnb = det_log(base);
    for (int i = 0; i < hd / 2; i++) {
        double s, c;
        det_sincos((double)pos * det_exp(-2.0 * (double)i / (double)hd * lnb), &s, &c);
        cs[i] = (float)c;
        sn[i] = (float)s;
    }
}

/* Position pos's RoPE angles in layer il: the table's, or rope_shift's (into r->rope_f). */
static void rope_at(struct ref *r, int il, int pos, const float **cs, const float **sn)
{
    const struct model_hparams *hp = &r->m->hp;
    const int hd = (int)hp->head_dim, half = hd / 2;
    *cs = r->rope_cos + (size_t)pos * (size_t)half;
    *sn = r->rope_sin + (size_t)pos * (size_t)half;
    const float rf = fault_rope_factor_inline(&r->base.faults, il, pos);
    if (rf != 1.0f) { /* rope_shift: this position's angles with the shifted base */
        rope_row(r->rope_f, r->rope_f + half, pos, hd, (double)hp->rope_base * (double)rf);
        *cs = r->rope_f;
        *sn = r->rope_f + half;
    }
}

/* The per-head norm and RoPE the twin uses (the device's order when emulated). */
static void (*norm_rope_of(const struct ref *r))(const struct ref *, float *, const float *,
                                                 const float *, const float *, int, float, int)
{
    return r->emu_fma || r->emu_norm ? norm_rope_dev : norm_rope_twin;
}

/* Per-head norm (weights w, one head's) and RoPE of n rows of nheads heads at x, the rows at
 * positions pos0.. of layer il (skip_qk_norm and rope_shift as the faults say). */
static void norm_rope_rows(struct ref *r, int il, int n, int pos0, float *x, int nheads,
                           const float *w)
{
    const struct model_hparams *hp = &r->m->hp;
    const int hd = (int)hp->head_dim;
    for (int t = 0; t < n; t++) {
        const int pos = pos0 + t;
        const float *cs, *sn;
        rope_at(r, il, pos, &cs, &sn);
        const int skip = fault_skips_qk_norm_inline(&r->base.faults, il, pos);
        for (int h = 0; h < nheads; h++)
            norm_rope_of(r)(r, x + ((size_t)t * (size_t)nheads + (size_t)h) * (size_t)hd, w, cs, sn,
                            hd, hp->eps, skip);
    }
}

/* Keys and values of n tokens at positions pos0.. in layer il from r->xb (the normed inputs):
 * projected, K normed and rotated, stored in the cache (as the cache rounds them). */
static void attn_kv(struct ref *r, int il, int n, int pos0)
{
    const struct model_hparams *hp = &r->m->hp;
    const struct model_layer *L = &r->m->layers[il];
    const int hd = (int)hp->head_dim, nkv = (int)hp->n_head_kv, kvd = nkv * hd;
    matmul_proj(r, &L->wk, r->xb, n, r->k);
    matmul_proj(r, &L->wv, r->xb, n, r->v);
    fault_scale(r, FAULT_T_ATTN_K, il, pos0, r->k, n, kvd, NULL, 1);
    fault_scale(r, FAULT_T_ATTN_V, il, pos0, r->v, n, kvd, NULL, 1);
    norm_rope_rows(r, il, n, pos0, r->k, nkv, r->k_norm + (size_t)il * (size_t)hd);
    for (int t = 0; t < n; t++) {
        const int pos = pos0 + t;
        const size_t at = kv_base(r, il) + (size_t)pos * (size_t)kvd;
        const float kf = fault_kv_factor_inline(&r->base.faults, il, pos);
        for (int i = 0; kf != 1.0f && i < kvd; i++) { /* kv_corrupt: the entries as stored */
            r->k[(size_t)t * (size_t)kvd + (size_t)i] *= kf;
            r->v[(size_t)t * (size_t)kvd + (size_t)i] *= kf;
        }
        memcpy(r->kc + at, r->k + (size_t)t * (size_t)kvd, (size_t)kvd * sizeof(float));
        memcpy(r->vc + at, r->v + (size_t)t * (size_t)kvd, (size_t)kvd * sizeof(float));
        if (r->emu_kv) {
            round_n(r->kc + at, kvd, 1);
            round_n(r->vc + at, kvd, 1);
        }
    }
}

static void attention(struct ref *r, int il, int n, int pos0)
{
    const struct model_hparams *hp = &r->m->hp;
    const struct model_layer *L = &r->m->layers[il];
    const int hd = (int)hp->head_dim, nh = (int)hp->n_head;
    const int64_t E = hp->n_embd;
    for (int t = 0; t < n; t++)
        norm_row(r, r->xb + t * E, r->x + t * E, r->attn_norm + il * E, E);
    matmul_proj(r, &L->wq, r->xb, n, r->q);
    fault_scale(r, FAULT_T_ATTN_Q, il, pos0, r->q, n, (int64_t)nh * hd, NULL, 1);
    attn_kv(r, il, n, pos0);
    norm_rope_rows(r, il, n, pos0, r->q, nh, r->q_norm + (size_t)il * (size_t)hd);
    struct attn_job j = {r, il, n, pos0};
    pool_run(r->pool, (int64_t)n * nh, attn_heads, &j);
    matmul_proj(r, &L->wo, r->att, n, r->xo);
    fault_scale(r, FAULT_T_ATTN_OUTPUT, il, pos0, r->xo, n, E, NULL, 1);
    for (int64_t i = 0; i < n * E; i++)
        r->x[i] += r->xo[i];
}

/* ---- feed-forward ------------------------------------------------------------------------- */

/* out (n, E) = Wdown (silu(Wgate x) * Wup x) for x (n, E). proj: the dense FFN, whose products
 * are projections (matmul_proj); the experts are not. */
/* Where a SwiGLU block's products sit for the scale fault: layer, first position, the gathered
 * rows' flat slot indices (NULL: row t is token t), and the tensors of gate, up and down. */
struct fscope {
    int il, pos0;
    const int32_t *rows;
    int k;
    int g, u, d;
};

static void swiglu(struct ref *r, const struct model_weight *gate, const struct model_weight *up,
                   const struct model_weight *down, const float *x, int n, float *out, int proj,
                   const struct fscope *fs)
{
    void (*mm)(struct ref *, const struct model_weight *, const float *, int, float *) =
        proj ? matmul_proj : matmul;
    mm(r, gate, x, n, r->ffa);
    mm(r, up, x, n, r->ffb);
    fault_scale(r, fs->g, fs->il, fs->pos0, r->ffa, n, gate->rows, fs->rows, fs->k);
    fault_scale(r, fs->u, fs->il, fs->pos0, r->ffb, n, up->rows, fs->rows, fs->k);
    const int64_t f = gate->rows;
    for (int64_t i = 0; i < n * f; i++)
        r->ffa[i] =
            (r->emu_expf ? dev_silu(r->ffa[i], r->emu_ex2) : det_silu(r->ffa[i])) * r->ffb[i];
    mm(r, down, r->ffa, n, out);
    fault_scale(r, fs->d, fs->il, fs->pos0, out, n, down->rows, fs->rows, fs->k);
}

static void moe(struct ref *r, int il, int n, int pos0)
{
    const struct model_hparams *hp = &r->m->hp;
    const struct model_layer *L = &r->m->layers[il];
    const int64_t E = hp->n_embd;
    const int X = (int)hp->n_expert, k = (int)hp->n_expert_used;
    const struct backend_taps *tp = r->base.taps;
    matmul(r, &L->gate_inp, r->xb, n, r->router);
    fault_scale(r, FAULT_T_FFN_GATE_INP, il, pos0, r->router, n, X, NULL, 1);
    for (int t = 0; t < n; t++) {
        struct route_result rr = route_select(r->router + (size_t)t * X, r->probs + (size_t)t * X,
                                              X, k, 1, &r->base.faults, il, pos0 + t,
                                              r->sel + (size_t)t * k, r->selw + (size_t)t * k);
        if (tp) {
            size_t ti = (size_t)il * (size_t)r->base.tap_n + (size_t)(r->base.tap_off + t);
            if (tp->force_experts && tp->force_deficit) {
                const int32_t *f = tp->force_experts + ti * k;
                tp->force_deficit[ti] =
                    f[0] < 0 ? NAN
                             : route_force(r->router + (size_t)t * X, r->probs + (size_t)t * X, X,
                                           k, 1, f, tp->force_tol, r->sel + (size_t)t * k,
                                           r->selw + (size_t)t * k);
            }
            if (tp->experts)
                memcpy(tp->experts + ti * k, r->sel + (size_t)t * k, (size_t)k * sizeof(int32_t));
            if (tp->expert_w)
                memcpy(tp->expert_w + ti * k, r->selw + (size_t)t * k, (size_t)k * sizeof(float));
            if (tp->router_kth)
                tp->router_kth[ti] = rr.kth_logit;
            if (tp->router_k1th)
                tp->router_k1th[ti] = rr.k1th_logit;
        }
    }
    /* each expert runs once over the tokens that chose it, in token order */
    for (int e = 0; e < X; e++) {
        int c = 0;
        for (int i = 0; i < n * k; i++)
            if (r->sel[i] == e) {
                r->rows[c] = i;
                memcpy(r->gx + (size_t)c * E, r->xb + (size_t)(i / k) * E, E * sizeof(float));
                c++;
            }
        if (c == 0)
            continue;
        struct model_weight g = model_expert(&L->gate_exps, X, e);
        struct model_weight u = model_expert(&L->up_exps, X, e);
        struct model_weight d = model_expert(&L->down_exps, X, e);
        const struct fscope fs = {
            il, pos0, r->rows, k, FAULT_T_FFN_GATE_EXPS, FAULT_T_FFN_UP_EXPS, FAULT_T_NONE};
        swiglu(r, &g, &u, &d, r->gx, c, r->gy, 0, &fs);
        for (int i = 0; i < c; i++)
            memcpy(r->moe_y + (size_t)r->rows[i] * E, r->gy + (size_t)i * E, E * sizeof(float));
    }
    for (int t = 0; t < n; t++) {
        float *o = r->xo + (size_t)t * E;
        /* the scale fault on ffn_down_exps: each routed expert's output */
        const float f =
            fault_scale_factor_inline(&r->base.faults, FAULT_T_FFN_DOWN_EXPS, il, pos0 + t);
        for (int64_t i = 0; i < E; i++) {
            float acc = 0.0f;
            for (int s = 0; s < k; s++) /* slot order, slot 0 = highest probability */
                acc += r->selw[(size_t)t * k + s] * (f != 1.0f
                                                         ? r->moe_y[((size_t)t * k + s) * E + i] * f
                                                         : r->moe_y[((size_t)t * k + s) * E + i]);
            o[i] = acc;
        }
    }
}

static void ffn(struct ref *r, int il, int n, int pos0)
{
    const struct model_hparams *hp = &r->m->hp;
    const struct model_layer *L = &r->m->layers[il];
    const int64_t E = hp->n_embd;
    for (int t = 0; t < n; t++)
        norm_row(r, r->xb + t * E, r->x + t * E, r->ffn_norm + il * E, E);
    const struct fscope fs = {
        il, pos0, NULL, 1, FAULT_T_FFN_GATE, FAULT_T_FFN_UP, FAULT_T_FFN_DOWN};
    if (hp->n_expert == 0) /* dense */
        swiglu(r, &L->ffn_gate, &L->ffn_up, &L->ffn_down, r->xb, n, r->xo, 1, &fs);
    else
        moe(r, il, n, pos0);
    for (int64_t i = 0; i < n * E; i++)
        r->x[i] += r->xo[i];
}

/* ---- the forward pass --------------------------------------------------------------------- */

static void tap_hidden(struct ref *r, int il, int n)
{
    const struct backend_taps *tp = r->base.taps;
    if (!tp || !tp->hidden)
        return;
    const size_t E = r->m->hp.n_embd;
    memcpy(tp->hidden + ((size_t)il * (size_t)r->base.tap_n + (size_t)r->base.tap_off) * E, r->x,
           (size_t)n * E * sizeof(float));
}

/* Evaluate n <= n_batch tokens at positions pos0.. (the cache holds 0..pos0-1). */
static void ref_forward_chunk(struct ref *r, const int32_t *tokens, int n, int pos0, float *logits)
{
    const struct model *m = r->m;
    const struct model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    for (int t = 0; t < n; t++) /* with fma, as the device's embed_kernel dequantizes */
        (r->emu_fma ? quant_dequant_row_fused : quant_dequant_row)(
            m->tok_embd.type, model_row(&m->tok_embd, tokens[t]), r->x + t * E, E);
    for (int il = 0; il < (int)hp->n_layer; il++) {
        attention(r, il, n, pos0);
        ffn(r, il, n, pos0);
        tap_hidden(r, il, n);
    }
    for (int t = 0; t < n; t++)
        norm_row(r, r->xb + t * E, r->x + t * E, r->out_norm, E);
    matmul_proj(r, &m->output, r->xb, n, logits);
    fault_scale(r, FAULT_T_OUTPUT, -1, pos0, logits, n, hp->n_vocab, NULL, 1);
}

/* Layer il's input at positions pos0..pos0+cn-1 into r->x: the token embeddings (layer 0), else
 * the subject's hidden state after layer il - 1 (hidden: (n_layer, n, E)). */
static void forced_input(struct ref *r, const int32_t *tokens, int n, const float *hidden, int il,
                         int pos0, int cn)
{
    const struct model *m = r->m;
    const size_t E = m->hp.n_embd;
    for (int t = 0; t < cn; t++) {
        float *x = r->x + (size_t)t * E;
        if (il == 0)
            (r->emu_fma ? quant_dequant_row_fused : quant_dequant_row)(
                m->tok_embd.type, model_row(&m->tok_embd, tokens[pos0 + t]), x, (int64_t)E);
        else
            memcpy(x, hidden + ((size_t)(il - 1) * (size_t)n + (size_t)(pos0 + t)) * E,
                   E * sizeof(float));
    }
}

/* The twin's layers under teacher forcing (ref_ops.h). */
int ref_forward_forced(struct backend *b, const int32_t *tokens, int n, const float *hidden,
                       const int32_t *force_experts, float force_tol, float *force_deficit,
                       const int *eval, int n_eval, float *out, const int *rows, int n_rows,
                       float *logits, struct gate_err *err)
{
    struct ref *r = (struct ref *)b;
    if (!b || b->ops != &backend_ref_ops)
        return err_set(err, ERR_INPUT, "teacher forcing needs the reference twin");
    const struct model *m = r->m;
    const struct model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    const size_t L = hp->n_layer;
    if (n < 1 || n > b->n_ctx || b->n_past != 0)
        return err_set(err, ERR_INPUT,
                       "teacher forcing: %d positions on a twin of %d positions with %d cached", n,
                       b->n_ctx, b->n_past);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= (int32_t)hp->n_vocab)
            return err_set(err, ERR_INPUT, "teacher forcing: token %d is %d (vocabulary %u)", i,
                           tokens[i], (unsigned)hp->n_vocab);
    for (int i = 0; eval && i < n_eval; i++)
        if (eval[i] < 0 || eval[i] >= n || (i && eval[i] <= eval[i - 1]))
            return err_set(err, ERR_INPUT,
                           "teacher forcing: evaluated row %d is position %d: positions must"
                           " increase within 0..%d",
                           i, eval[i], n - 1);
    if (eval && n_eval < 1)
        return err_set(err, ERR_INPUT, "teacher forcing: no position to evaluate");
    if (eval && (r->emu_gemm || r->emu_gemm_seq)) /* its rounding depends on the call's length */
        return err_set(err, ERR_INPUT,
                       "teacher forcing at sampled positions evaluates them one token at a"
                       " time: not with the batched projections' emulated rounding (gemm-*)");
    const int B = b->n_batch;
    /* the subject's expert sets, forced where they are a near tie of the twin's own */
    const struct backend_taps route = {
        .force_experts = force_experts, .force_tol = force_tol, .force_deficit = force_deficit};
    const struct backend_taps *saved = r->base.taps;
    r->base.taps = force_experts && force_deficit && hp->n_expert > 0 ? &route : NULL;
    r->base.tap_n = n;
    for (size_t il = 0; il < L; il++) {
        /* every position: the whole layer in chunks; with eval, only keys and values (every
         * later evaluated position attends to them) */
        for (int pos0 = 0; pos0 < n; pos0 += B) {
            const int cn = n - pos0 < B ? n - pos0 : B;
            r->base.tap_off = pos0;
            forced_input(r, tokens, n, hidden, (int)il, pos0, cn);
            if (eval) {
                for (int t = 0; t < cn; t++)
                    norm_row(r, r->xb + (size_t)t * (size_t)E, r->x + (size_t)t * (size_t)E,
                             r->attn_norm + il * (size_t)E, E);
                attn_kv(r, (int)il, cn, pos0);
                continue;
            }
            attention(r, (int)il, cn, pos0);
            ffn(r, (int)il, cn, pos0);
            memcpy(out + (il * (size_t)n + (size_t)pos0) * (size_t)E, r->x,
                   (size_t)cn * (size_t)E * sizeof(float));
        }
        /* with eval: the layer at each evaluated position, one at a time, on the cache above
         * (its own key and value computed again, the same numbers) */
        for (int i = 0; eval && i < n_eval; i++) {
            r->base.tap_off = eval[i];
            forced_input(r, tokens, n, hidden, (int)il, eval[i], 1);
            attention(r, (int)il, 1, eval[i]);
            ffn(r, (int)il, 1, eval[i]);
            memcpy(out + (il * (size_t)n_eval + (size_t)i) * (size_t)E, r->x,
                   (size_t)E * sizeof(float));
        }
    }
    r->base.taps = saved;
    r->base.tap_n = r->base.tap_off = 0;
    b->n_past = n;
    for (int i0 = 0; i0 < n_rows; i0 += B) { /* the head on the subject's last hidden state */
        const int cn = n_rows - i0 < B ? n_rows - i0 : B;
        for (int t = 0; t < cn; t++) {
            const int p = rows[i0 + t];
            if (p < 0 || p >= n)
                return err_set(err, ERR_INPUT, "teacher forcing: row %d is outside 0..%d", p,
                               n - 1);
            norm_row(r, r->xb + (size_t)t * (size_t)E,
                     hidden + ((L - 1) * (size_t)n + (size_t)p) * (size_t)E, r->out_norm, E);
        }
        matmul_proj(r, &m->output, r->xb, cn, logits + (size_t)i0 * hp->n_vocab);
    }
    return 0;
}

/* ops->forward: one chunk, already checked by backend_forward() (backend.h). */
static int ref_forward(struct backend *b, const int32_t *tokens, int n, int pos0, float *logits,
                       struct gate_err *err)
{
    struct ref *r = (struct ref *)b;
    if (r->kv_layers == 1 && r->m->hp.n_layer > 1) /* the layers would share one cache */
        return err_set(err, ERR_INPUT,
                       "ref: a twin opened with kv-one-layer holds one layer's cache: it runs"
                       " teacher forcing only (ref_forward_forced), not a forward pass");
    ref_forward_chunk(r, tokens, n, pos0, logits);
    return 0;
}

static void ref_info(const struct backend *b, struct backend_info *out)
{
    snprintf(out->backend, sizeof out->backend, "ref");
    snprintf(out->device, sizeof out->device, "%s", ((const struct ref *)b)->device);
}

static void ref_close(struct backend *b)
{
    struct ref *r = (struct ref *)b;
    if (!r)
        return;
    pool_free(r->pool);
    float *bufs[] = {r->attn_norm, r->ffn_norm, r->q_norm, r->k_norm, r->out_norm, r->x,
                     r->xb,        r->xo,       r->q,      r->k,      r->v,        r->att,
                     r->ffa,       r->ffb,      r->router, r->probs,  r->selw,     r->gx,
                     r->gy,        r->moe_y,    r->scores, r->rowbuf, r->kc,       r->vc,
                     r->rope_cos,  r->rope_sin, r->emu_x,  r->rope_f, r->emu_a};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(r->sel);
    free(r->rows);
    free(r);
}

/* The CPU's model name from /proc/cpuinfo into buf ("" when unknown). */
static void cpu_model(char *buf, size_t n)
{
    buf[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c += 2;
                c[strcspn(c, "\n")] = '\0';
                snprintf(buf, n, "%s", c);
            }
            break;
        }
    fclose(f);
}

/* "cpu: <model name>", or "cpu" (the capability gate reads the "cpu" prefix). */
static void cpu_name(char *buf, size_t n)
{
    char model[sizeof((struct backend_info *)0)->device - 5]; /* fits after "cpu: " */
    cpu_model(model, sizeof model);
    if (model[0])
        snprintf(buf, n, "cpu: %s", model);
    else
        snprintf(buf, n, "cpu");
}

/* ops->describe: the host CPU and its memory. */
static int ref_describe(struct backend_device *out, struct gate_err *err)
{
    (void)err;
    memset(out, 0, sizeof *out);
    cpu_model(out->name, sizeof out->name);
    if (!out->name[0])
        snprintf(out->name, sizeof out->name, "cpu");
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)
        out->total_bytes = (uint64_t)pages * (uint64_t)page;
    return 0;
}

void ref_rope_tables(float *cs, float *sn, int n_ctx, int hd, float base)
{
    /* angles p * base^(-2i/hd), evaluated in double, rounded once to float */
    const double lnb = det_log((double)base);
    for (int i = 0; i < hd / 2; i++) {
        const double inv_freq = det_exp(-2.0 * (double)i / (double)hd * lnb);
        for (int p = 0; p < n_ctx; p++) {
            double s, c;
            det_sincos((double)p * inv_freq, &s, &c);
            cs[(size_t)p * (size_t)(hd / 2) + (size_t)i] = (float)c;
            sn[(size_t)p * (size_t)(hd / 2) + (size_t)i] = (float)s;
        }
    }
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static int alloc_buf(void **p, size_t count, size_t size, const char *what, struct gate_err *err)
{
    *p = calloc(count ? count : 1, size);
    if (!*p)
        return err_set(err, ERR_ENV, "ref: out of memory for %s (%zu elements)", what, count);
    return 0;
}

static int ref_open(struct backend **out, const struct model *m, const struct backend_config *cfg,
                    struct gate_err *err)
{
    *out = NULL;
    const struct model_hparams *hp = &m->hp;
    struct ref *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(err, ERR_ENV,
                       "ref: out of memory for the backend's state (struct ref, %zu bytes)",
                       sizeof *r);
    int rc = 0;
    r->base.ops = &backend_ref_ops;
    r->base.model = m;
    r->m = m;
    int n_ctx =
        cfg && cfg->n_ctx > 0 ? cfg->n_ctx : (hp->n_ctx_train < 4096 ? (int)hp->n_ctx_train : 4096);
    r->base.n_ctx = n_ctx;
    r->base.n_batch = cfg && cfg->n_batch > 0 ? cfg->n_batch : 512;
    if ((rc = emulation_parse(r, cfg && cfg->emulate ? cfg->emulate : getenv("GATE_REF_EMULATE"),
                              err)))
        goto fail;
    if ((rc = pool_create(&r->pool, cfg ? cfg->n_threads : 0, err)))
        goto fail;
    const int nt = pool_threads(r->pool);
    const size_t B = (size_t)r->base.n_batch, E = hp->n_embd, hd = hp->head_dim, L = hp->n_layer;
    const size_t qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    const int moe = hp->n_expert > 0;
    const size_t X = hp->n_expert, K = moe ? hp->n_expert_used : 1;
    const size_t F = moe ? hp->n_ff_exp : hp->n_ff;
    r->max_cols = max64(max64((int64_t)E, (int64_t)qd), (int64_t)F);
#define ALLOC(field, count)                                                                        \
    if ((rc = alloc_buf((void **)&r->field, (count), sizeof *r->field, #field, err)))              \
    goto fail
    ALLOC(attn_norm, L * E);
    ALLOC(ffn_norm, L * E);
    ALLOC(q_norm, L * hd);
    ALLOC(k_norm, L * hd);
    ALLOC(out_norm, E);
    ALLOC(x, B * E);
    ALLOC(xb, B * E);
    ALLOC(xo, B * E);
    ALLOC(q, B * qd);
    ALLOC(k, B * kvd);
    ALLOC(v, B * kvd);
    ALLOC(att, B * qd);
    ALLOC(ffa, B * K * F);
    ALLOC(ffb, B * K * F);
    if (moe) {
        ALLOC(router, B * X);
        ALLOC(probs, B * X);
        ALLOC(sel, B * K);
        ALLOC(selw, B * K);
        ALLOC(rows, B * K);
        ALLOC(gx, B * K * E);
        ALLOC(gy, B * K * E);
        ALLOC(moe_y, B * K * E);
    }
    ALLOC(scores, (size_t)nt * (size_t)n_ctx);
    ALLOC(rowbuf, (size_t)nt * (size_t)r->max_cols);
    if (!r->kv_layers)
        r->kv_layers = (int)L;
    ALLOC(kc, (size_t)r->kv_layers * (size_t)n_ctx * kvd);
    ALLOC(vc, (size_t)r->kv_layers * (size_t)n_ctx * kvd);
    ALLOC(rope_cos, (size_t)n_ctx * (hd / 2));
    ALLOC(rope_sin, (size_t)n_ctx * (hd / 2));
    ALLOC(rope_f, hd);
    if (r->emu_gemm)
        ALLOC(emu_x, B * (size_t)r->max_cols);
    if (r->emu_act)
        ALLOC(emu_a, B * K * (size_t)r->max_cols);
#undef ALLOC
    for (size_t il = 0; il < L; il++) {
        const struct model_layer *ly = &m->layers[il];
        quant_dequant_row(ly->attn_norm.type, ly->attn_norm.data, r->attn_norm + il * E,
                          (int64_t)E);
        quant_dequant_row(ly->ffn_norm.type, ly->ffn_norm.data, r->ffn_norm + il * E, (int64_t)E);
        quant_dequant_row(ly->q_norm.type, ly->q_norm.data, r->q_norm + il * hd, (int64_t)hd);
        quant_dequant_row(ly->k_norm.type, ly->k_norm.data, r->k_norm + il * hd, (int64_t)hd);
    }
    quant_dequant_row(m->output_norm.type, m->output_norm.data, r->out_norm, (int64_t)E);
    ref_rope_tables(r->rope_cos, r->rope_sin, n_ctx, (int)hd, hp->rope_base);
    cpu_name(r->device, sizeof r->device);
    *out = &r->base;
    return 0;
fail:
    ref_close(&r->base);
    return rc;
}

const struct backend_ops backend_ref_ops = {
    .name = "ref",
    .describe = ref_describe,
    .open = ref_open,
    .forward = ref_forward,
    .truncate = NULL, /* the cache is plain memory: backend_truncate's n_past is enough */
    .info = ref_info,
    .close = ref_close,
};

int32_t ref_argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return (int32_t)best;
}
