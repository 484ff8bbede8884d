/* quant.h — ggml tensor types and their block layouts, compiled by both the C compiler and nvcc.
 *
 * Invariants: every block struct has exactly the byte size of ggml's (static asserts below);
 * elements are numbered along ne[0]; fp16 scales are stored as raw uint16_t bits.
 * Layouts and dequantization formulas: ../shared/FACTS.md §4. The dequantizers in quant.c are
 * the reference (`_ref`) definitions every kernel is compared against.
 * Start reading: quant_dequant_row().
 */
#ifndef GATE_QUANT_H
#define GATE_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#define QUANT_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define QUANT_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* Hot loops are compiled twice on x86-64 (AVX2 and baseline) and picked at run time. The source
 * fixes every operation and its order, and contraction into FMA is off, so both clones produce
 * bit-identical results; only the speed differs. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) &&     \
    !defined(__SANITIZE_ADDRESS__)
#define QUANT_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define QUANT_VECTOR_CLONES
#endif

/* ggml type ids (ggml.h); values are the on-disk ids. */
enum quant_type {
    QUANT_F32 = 0,
    QUANT_F16 = 1,
    QUANT_Q4_0 = 2,
    QUANT_Q4_1 = 3,
    QUANT_Q5_0 = 6,
    QUANT_Q5_1 = 7,
    QUANT_Q8_0 = 8,
    QUANT_Q8_1 = 9,
    QUANT_Q2_K = 10,
    QUANT_Q3_K = 11,
    QUANT_Q4_K = 12,
    QUANT_Q5_K = 13,
    QUANT_Q6_K = 14,
    QUANT_Q8_K = 15,
    QUANT_I8 = 24,
    QUANT_I16 = 25,
    QUANT_I32 = 26,
    QUANT_I64 = 27,
    QUANT_F64 = 28,
    QUANT_BF16 = 30,
    QUANT_TYPE_LIMIT = 40, /* ids at or above this are unknown */
};

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

struct block_q4_0 {
    uint16_t d;            /* fp16 scale */
    uint8_t qs[QK4_0 / 2]; /* element j low nibble, j+16 high nibble */
};
struct block_q4_1 {
    uint16_t d, m;
    uint8_t qs[QK4_1 / 2];
};
struct block_q5_0 {
    uint16_t d;
    uint8_t qh[4]; /* fifth bits, element j is bit j */
    uint8_t qs[QK5_0 / 2];
};
struct block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
};
struct block_q8_0 {
    uint16_t d;
    int8_t qs[QK8_0];
};
struct block_q4_K {
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE]; /* 8 x (6-bit scale, 6-bit min) */
    uint8_t qs[QK_K / 2];
};
struct block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d; /* last */
};
struct block_q8_K {
    float d; /* fp32 */
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};

QUANT_STATIC_ASSERT(sizeof(struct block_q4_0) == 18, "block_q4_0 size");
QUANT_STATIC_ASSERT(sizeof(struct block_q4_1) == 20, "block_q4_1 size");
QUANT_STATIC_ASSERT(sizeof(struct block_q5_0) == 22, "block_q5_0 size");
QUANT_STATIC_ASSERT(sizeof(struct block_q5_1) == 24, "block_q5_1 size");
QUANT_STATIC_ASSERT(sizeof(struct block_q8_0) == 34, "block_q8_0 size");
QUANT_STATIC_ASSERT(sizeof(struct block_q4_K) == 144, "block_q4_K size");
QUANT_STATIC_ASSERT(sizeof(struct block_q5_K) == 176, "block_q5_K size");
QUANT_STATIC_ASSERT(sizeof(struct block_q6_K) == 210, "block_q6_K size");
QUANT_STATIC_ASSERT(sizeof(struct block_q8_K) == 292, "block_q8_K size");

/* Name of a type id ("Q4_K"), or "unknown" — never NULL. */
const char *quant_name(int type);

/* Parse a name ("q4_k" or "Q4_K", case-insensitive) to a type id; -1 when unknown. */
int quant_from_name(const char *name);

/* Elements per block (1 for plain types) and bytes per block; 0 for an unknown id. */
int64_t quant_block_size(int type);
int64_t quant_type_size(int type);

/* 1 when gate can dequantize the type (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
 * Q5_K, Q6_K), else 0. */
int quant_supported(int type);

/* Bytes of one row of n elements; n must be a multiple of the block size. */
size_t quant_row_bytes(int type, int64_t n);

/* Dequantize n elements (a multiple of the block size) of a supported type.
 * src: n/block blocks; dst (n) floats. Exact: every value is d·q (− m) evaluated in float as
 * ggml's dequantize_row_* does. Aborts on an unsupported type (callers check at load). */
void quant_dequant_row(int type, const void *src, float *dst, int64_t n);

/* The same n elements as the CUDA kernels dequantize them: quant_dequant_row() with the affine
 * types' d·q + m (Q4_1, Q5_1) and d1·q − m1 (Q4_K, Q5_K) contracted into one fmaf, as nvcc does
 * (k_elem32, kernels/k_common.cuh). For the emulating twin only (GATE_REF_EMULATE=fma). */
void quant_dequant_row_fused(int type, const void *src, float *dst, int64_t n);

/* fp16 / bf16 <-> float. The to-float directions are exact. */
float quant_fp16_to_f32(uint16_t h); /* = quant_fp16_to_f32_inline */
uint16_t quant_f32_to_fp16(float f); /* round to nearest even, like ggml */
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f); /* round to nearest even; NaN stays a quiet NaN */

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block's 12 scale bytes. */
void quant_get_scale_min_k4(int j, const uint8_t *scales, uint8_t *sc, uint8_t *m);

#ifndef __CUDACC__
/* Inline forms of the two for hot loops (same results; the out-of-line functions call these). */
static inline float quant_fp16_to_f32_inline(uint16_t h)
{
    /* exact and branch-free: rebias the exponent in the bit pattern; subnormals are
     * (2^-14 + m 2^-24) - 2^-14 in float, which is exact; Inf/NaN keep their payload */
    const uint32_t shifted_exp = 0x7c00u << 13;
    uint32_t o = ((uint32_t)h & 0x7fffu) << 13;
    const uint32_t exp = shifted_exp & o;
    o += (uint32_t)(127 - 15) << 23;
    o += -(uint32_t)(exp == shifted_exp) & ((uint32_t)(128 - 16) << 23); /* Inf / NaN */
    uint32_t magic = 113u << 23, sub_in = o + (1u << 23), sub, r;
    float a, b;
    memcpy(&a, &sub_in, 4);
    memcpy(&b, &magic, 4);
    a -= b;
    memcpy(&sub, &a, 4);
    const uint32_t is_sub = -(uint32_t)(exp == 0); /* zero or subnormal: all ones */
    r = ((sub & is_sub) | (o & ~is_sub)) | ((uint32_t)(h & 0x8000) << 16);
    float f;
    memcpy(&f, &r, 4);
    return f;
}

static inline void quant_scale_min_k4_inline(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}
#endif

/* The inverse: store sc and m (each 0..63) for sub-block j. The 12 bytes must start zeroed and
 * sub-blocks 0..3 must be stored before 4..7 (their high bits share bytes). */
void quant_put_scale_min_k4(int j, uint8_t sc, uint8_t m, uint8_t *scales);

/* ---- quantizers (float -> block) ------------------------------------------------------------
 * Supported targets: F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K (quant_can_quantize()).
 * Deterministic: only IEEE +, -, *, / and comparisons in float (the project builds with
 * -ffp-contract=off), so the bytes are the same on every machine; each block depends only on its
 * own 32 or 256 inputs, so splitting rows across threads cannot change a byte.
 * The K-quant quantizers search each sub-block's scale (and min) on a grid, refit it by least
 * squares, then re-search the 6/8-bit integer scales around their rounded values after the
 * super-block scales are fixed (quant.c explains the steps). */

/* Search effort; quant_quantize_row() uses QUANT_OPTS_DEFAULT. */
struct quant_opts {
    int steps;  /* grid points per sub-block scale search (>= 1) */
    int radius; /* integer scale / min re-search radius after fixing d, dmin (>= 0) */
};
#define QUANT_OPTS_DEFAULT ((struct quant_opts){.steps = 20, .radius = 1})

/* 1 when quant_quantize_row() can produce the type, else 0. */
int quant_can_quantize(int type);

/* Quantize n floats (n a multiple of the block size; finite values) into n/block blocks at dst.
 * Returns 0, or -1 when the type cannot be produced (nothing written). */
int quant_quantize_row(int type, const float *src, void *dst, int64_t n);

/* The same with an explicit search effort (used to measure how close the default gets to an
 * exhaustive search). */
int quant_quantize_row_opts(int type, const float *src, void *dst, int64_t n,
                            struct quant_opts opts);

#ifdef __cplusplus
}
#endif
#endif
