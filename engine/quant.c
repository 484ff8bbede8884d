/* quant.c — type table, fp16/bf16 conversion and the reference dequantizers.
 *
 * Each dequantizer evaluates exactly the float expressions of ggml's dequantize_row_* (same
 * operand order, no fused multiply-add: the project builds with -ffp-contract=off), so its
 * output is bit-identical to libggml's. Layouts: ../shared/FACTS.md §4 and quant.h.
 * quant_dequant_row_fused() is the exception on purpose: the CUDA kernels' dequantization, with
 * explicit fmaf, for the twin's emulation of the device (GATE_REF_EMULATE=fma) only.
 * The quantizers (float -> block) follow the dequantizers; their contract is in quant.h.
 */
#include "quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct type_info {
    const char *name;
    int64_t block;
    int64_t size;
    int supported;
};

static const struct type_info TYPES[QUANT_TYPE_LIMIT] = {
    [QUANT_F32] = {"F32", 1, 4, 1},
    [QUANT_F16] = {"F16", 1, 2, 1},
    [QUANT_Q4_0] = {"Q4_0", QK4_0, sizeof(struct block_q4_0), 1},
    [QUANT_Q4_1] = {"Q4_1", QK4_1, sizeof(struct block_q4_1), 1},
    [QUANT_Q5_0] = {"Q5_0", QK5_0, sizeof(struct block_q5_0), 1},
    [QUANT_Q5_1] = {"Q5_1", QK5_1, sizeof(struct block_q5_1), 1},
    [QUANT_Q8_0] = {"Q8_0", QK8_0, sizeof(struct block_q8_0), 1},
    [QUANT_Q8_1] = {"Q8_1", 32, 36, 0},
    [QUANT_Q2_K] = {"Q2_K", QK_K, 84, 0},
    [QUANT_Q3_K] = {"Q3_K", QK_K, 110, 0},
    [QUANT_Q4_K] = {"Q4_K", QK_K, sizeof(struct block_q4_K), 1},
    [QUANT_Q5_K] = {"Q5_K", QK_K, sizeof(struct block_q5_K), 1},
    [QUANT_Q6_K] = {"Q6_K", QK_K, sizeof(struct block_q6_K), 1},
    [QUANT_Q8_K] = {"Q8_K", QK_K, sizeof(struct block_q8_K), 0},
    [16] = {"IQ2_XXS", QK_K, 66, 0},
    [17] = {"IQ2_XS", QK_K, 74, 0},
    [18] = {"IQ3_XXS", QK_K, 98, 0},
    [19] = {"IQ1_S", QK_K, 50, 0},
    [20] = {"IQ4_NL", 32, 18, 0},
    [21] = {"IQ3_S", QK_K, 110, 0},
    [22] = {"IQ2_S", QK_K, 82, 0},
    [23] = {"IQ4_XS", QK_K, 136, 0},
    [QUANT_I8] = {"I8", 1, 1, 0},
    [QUANT_I16] = {"I16", 1, 2, 0},
    [QUANT_I32] = {"I32", 1, 4, 0},
    [QUANT_I64] = {"I64", 1, 8, 0},
    [QUANT_F64] = {"F64", 1, 8, 0},
    [29] = {"IQ1_M", QK_K, 56, 0},
    [QUANT_BF16] = {"BF16", 1, 2, 1},
    [34] = {"TQ1_0", QK_K, 54, 0},
    [35] = {"TQ2_0", QK_K, 66, 0},
    [39] = {"MXFP4", 32, 17, 0},
};

static const struct type_info *info(int type)
{
    if (type < 0 || type >= QUANT_TYPE_LIMIT || !TYPES[type].name)
        return NULL;
    return &TYPES[type];
}

const char *quant_name(int type)
{
    const struct type_info *t = info(type);
    return t ? t->name : "unknown";
}

int quant_from_name(const char *name)
{
    for (int i = 0; i < QUANT_TYPE_LIMIT; i++)
        if (TYPES[i].name && strcasecmp(TYPES[i].name, name) == 0)
            return i;
    return -1;
}

int64_t quant_block_size(int type)
{
    const struct type_info *t = info(type);
    return t ? t->block : 0;
}

int64_t quant_type_size(int type)
{
    const struct type_info *t = info(type);
    return t ? t->size : 0;
}

int quant_supported(int type)
{
    const struct type_info *t = info(type);
    return t ? t->supported : 0;
}

size_t quant_row_bytes(int type, int64_t n)
{
    const struct type_info *t = info(type);
    if (!t)
        return 0;
    return (size_t)(n / t->block) * (size_t)t->size;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float quant_fp16_to_f32(uint16_t h)
{
    return quant_fp16_to_f32_inline(h);
}

uint16_t quant_f32_to_fp16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) /* NaN: keep it quiet */
        return sign | 0x7e00;
    if (x >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return sign | 0x7c00;
    if (x < 0x38800000u) {   /* below 2^-14: a half subnormal or zero */
        if (x < 0x33000000u) /* at most 2^-25: rounds to zero */
            return sign;
        uint32_t e = x >> 23;
        uint32_t m = (x & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* value in units of 2^-24 is m >> shift */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return sign | (uint16_t)q;
    }
    x += 0x0fffu + ((x >> 13) & 1); /* round to nearest even on the dropped 13 bits */
    return sign | (uint16_t)((x >> 13) - (112u << 10));
}

float quant_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t quant_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 64);
    return (uint16_t)((x + (0x7fffu + ((x >> 16) & 1))) >> 16);
}

void quant_get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    quant_scale_min_k4_inline(j, q, sc, m);
}

void quant_put_scale_min_k4(int j, uint8_t sc, uint8_t m, uint8_t *q)
{
    if (j < 4) {
        q[j] |= (uint8_t)(sc & 63);
        q[j + 4] |= (uint8_t)(m & 63);
    } else {
        q[j + 4] = (uint8_t)((sc & 0x0f) | ((m & 0x0f) << 4));
        q[j - 4] |= (uint8_t)((sc >> 4) << 6);
        q[j] |= (uint8_t)((m >> 4) << 6);
    }
}

QUANT_VECTOR_CLONES
static void dequant_q4_0(const struct block_q4_0 *restrict x, float *restrict y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_fp16_to_f32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int x0 = (x[i].qs[j] & 0x0f) - 8;
            const int x1 = (x[i].qs[j] >> 4) - 8;
            y[i * QK4_0 + j] = x0 * d;
            y[i * QK4_0 + j + QK4_0 / 2] = x1 * d;
        }
    }
}

QUANT_VECTOR_CLONES
static void dequant_q4_1(const struct block_q4_1 *restrict x, float *restrict y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_fp16_to_f32(x[i].d);
        const float m = quant_fp16_to_f32(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const int x0 = x[i].qs[j] & 0x0f;
            const int x1 = x[i].qs[j] >> 4;
            y[i * QK4_1 + j] = x0 * d + m;
            y[i * QK4_1 + j + QK4_1 / 2] = x1 * d + m;
        }
    }
}

QUANT_VECTOR_CLONES
static void dequant_q5_0(const struct block_q5_0 *restrict x, float *restrict y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_fp16_to_f32(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const uint8_t xh0 = (uint8_t)(((qh >> j) << 4) & 0x10);
            const uint8_t xh1 = (uint8_t)((qh >> (j + 12)) & 0x10);
            const int x0 = ((x[i].qs[j] & 0x0f) | xh0) - 16;
            const int x1 = ((x[i].qs[j] >> 4) | xh1) - 16;
            y[i * QK5_0 + j] = x0 * d;
            y[i * QK5_0 + j + QK5_0 / 2] = x1 * d;
        }
    }
}

QUANT_VECTOR_CLONES
static void dequant_q5_1(const struct block_q5_1 *restrict x, float *restrict y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_fp16_to_f32(x[i].d);
        const float m = quant_fp16_to_f32(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const uint8_t xh0 = (uint8_t)(((qh >> j) << 4) & 0x10);
            const uint8_t xh1 = (uint8_t)((qh >> (j + 12)) & 0x10);
            const int x0 = (x[i].qs[j] & 0x0f) | xh0;
            const int x1 = (x[i].qs[j] >> 4) | xh1;
            y[i * QK5_1 + j] = x0 * d + m;
            y[i * QK5_1 + j + QK5_1 / 2] = x1 * d + m;
        }
    }
}

QUANT_VECTOR_CLONES
static void dequant_f16(const uint16_t *restrict x, float *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = quant_fp16_to_f32_inline(x[i]);
}

QUANT_VECTOR_CLONES
static void dequant_q8_0(const struct block_q8_0 *restrict x, float *restrict y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_fp16_to_f32(x[i].d);
        for (int j = 0; j < QK8_0; j++)
            y[i * QK8_0 + j] = x[i].qs[j] * d;
    }
}

QUANT_VECTOR_CLONES
static void dequant_q4_K(const struct block_q4_K *restrict x, float *restrict y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *q = x[i].qs;
        const float d = quant_fp16_to_f32(x[i].d);
        const float min = quant_fp16_to_f32(x[i].dmin);
        for (int c = 0; c < 4; c++) { /* four 64-element chunks: sub-blocks 2c and 2c+1 */
            uint8_t sc, m;
            quant_scale_min_k4_inline(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            quant_scale_min_k4_inline(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (q[l] >> 4) - m2;
            q += 32;
        }
    }
}

QUANT_VECTOR_CLONES
static void dequant_q5_K(const struct block_q5_K *restrict x, float *restrict y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ql = x[i].qs;
        const uint8_t *qh = x[i].qh;
        const float d = quant_fp16_to_f32(x[i].d);
        const float min = quant_fp16_to_f32(x[i].dmin);
        uint8_t u1 = 1, u2 = 2;
        for (int c = 0; c < 4; c++) {
            uint8_t sc, m;
            quant_scale_min_k4_inline(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            quant_scale_min_k4_inline(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * ((ql[l] & 0x0f) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

QUANT_VECTOR_CLONES
static void dequant_q6_K(const struct block_q6_K *restrict x, float *restrict y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_fp16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql;
        const uint8_t *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int h = 0; h < 2; h++) { /* two halves of 128 */
            /* first the 6-bit values as bytes (vectorizes over 32 lanes): element l + 32j of
             * the half takes the low or high nibble of ql[l + 32 (j & 1)] and bits 2j, 2j+1 of
             * qh[l] */
            int8_t q[128]; /* q - 32, in [-32, 31] */
            for (int l = 0; l < 32; l++) {
                q[l] = (int8_t)(((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32);
                q[l + 32] = (int8_t)(((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32);
                q[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                q[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
            /* then (d * scale) * (q - 32), one signed scale per 16 elements, as ggml computes */
            float scale[128]; /* d * scales[e / 16], spelled out per element */
            for (int g = 0; g < 8; g++) {
                const float s = d * sc[g];
                for (int l = 0; l < 16; l++)
                    scale[16 * g + l] = s;
            }
            for (int e = 0; e < 128; e++)
                y[e] = scale[e] * q[e];
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

void quant_dequant_row(int type, const void *src, float *dst, int64_t n)
{
    const int64_t nb = n / quant_block_size(type);
    switch (type) {
    case QUANT_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case QUANT_F16:
        dequant_f16(src, dst, n);
        return;
    case QUANT_BF16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = quant_bf16_to_f32(s[i]);
        return;
    }
    case QUANT_Q4_0:
        dequant_q4_0(src, dst, nb);
        return;
    case QUANT_Q4_1:
        dequant_q4_1(src, dst, nb);
        return;
    case QUANT_Q5_0:
        dequant_q5_0(src, dst, nb);
        return;
    case QUANT_Q5_1:
        dequant_q5_1(src, dst, nb);
        return;
    case QUANT_Q8_0:
        dequant_q8_0(src, dst, nb);
        return;
    case QUANT_Q4_K:
        dequant_q4_K(src, dst, nb);
        return;
    case QUANT_Q5_K:
        dequant_q5_K(src, dst, nb);
        return;
    case QUANT_Q6_K:
        dequant_q6_K(src, dst, nb);
        return;
    default:
        abort(); /* broken invariant: the loader admits only supported types */
    }
}

/* ---- the device's dequantization (GATE_REF_EMULATE=fma) ---------------------------------------
 *
 * The same elements as quant_dequant_row() with the affine ones, d·q + m and d1·q − m1, contracted
 * into one fmaf as nvcc compiles k_elem32 (kernels/k_common.cuh; read from the sm_90a SASS: FFMA
 * R, d1, q, −m1 for Q4_K / Q5_K, FFMA R, q, d, m for Q4_1 / Q5_1). The other types have one
 * product per element and nothing to contract: quant_dequant_row(). Test-facing: only the
 * emulating twin (engine/ref.c) calls it. */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__)
/* fmaf is exact: the FMA clone and the baseline (libm's fmaf) give the same bits */
#define FUSED_CLONES __attribute__((target_clones("fma", "default")))
#else
#define FUSED_CLONES
#endif

FUSED_CLONES
static void fused_q4_1(const struct block_q4_1 *x, float *y, int64_t nb, int five)
{
    const struct block_q5_1 *x5 = (const struct block_q5_1 *)x;
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_fp16_to_f32(five ? x5[i].d : x[i].d);
        const float m = quant_fp16_to_f32(five ? x5[i].m : x[i].m);
        const uint8_t *qs = five ? x5[i].qs : x[i].qs;
        uint32_t qh = 0;
        if (five)
            memcpy(&qh, x5[i].qh, 4);
        for (int j = 0; j < 16; j++) {
            const int x0 = (qs[j] & 0x0f) | (int)(((qh >> j) << 4) & 0x10);
            const int x1 = (qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
            y[i * 32 + j] = fmaf((float)x0, d, m);
            y[i * 32 + j + 16] = fmaf((float)x1, d, m);
        }
    }
}

FUSED_CLONES
static void fused_q4_K(const uint8_t *src, float *y, int64_t nb, int five)
{
    for (int64_t i = 0; i < nb; i++) {
        const struct block_q4_K *b4 = (const struct block_q4_K *)src + i;
        const struct block_q5_K *b5 = (const struct block_q5_K *)src + i;
        const uint8_t *scales = five ? b5->scales : b4->scales, *q = five ? b5->qs : b4->qs;
        const float d = quant_fp16_to_f32(five ? b5->d : b4->d);
        const float min = quant_fp16_to_f32(five ? b5->dmin : b4->dmin);
        for (int j = 0; j < 8; j++) { /* sub-block j: 32 elements of chunk j / 2 */
            uint8_t sc, m;
            quant_scale_min_k4_inline(j, scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            for (int l = 0; l < 32; l++) {
                const uint8_t byte = q[32 * (j >> 1) + l];
                int v = (j & 1) ? (byte >> 4) : (byte & 0x0f);
                if (five && ((b5->qh[l] >> j) & 1))
                    v += 16;
                *y++ = fmaf(d1, (float)v, -m1);
            }
        }
    }
}

void quant_dequant_row_fused(int type, const void *src, float *dst, int64_t n)
{
    const int64_t nb = n / quant_block_size(type);
    switch (type) {
    case QUANT_Q4_1:
    case QUANT_Q5_1:
        fused_q4_1(src, dst, nb, type == QUANT_Q5_1);
        return;
    case QUANT_Q4_K:
    case QUANT_Q5_K:
        fused_q4_K(src, dst, nb, type == QUANT_Q5_K);
        return;
    default:
        quant_dequant_row(type, src, dst, n);
    }
}

/* ---- quantizers ------------------------------------------------------------------------------
 *
 * Written from the block formulas (FACTS.md §4), not from ggml's code. Objective: plain squared
 * error of the dequantized value (the RMSE the docs report), no importance weights.
 *
 * Q4_K / Q5_K (value = d·sc·q − dmin·m, q in 0..nmax, sc and m 6-bit): per 32-element
 * sub-block, search the step over `steps` grid points around (max − min)/nmax, refit step and
 * offset by least squares for each candidate's integer codes (offset clamped so the sub-block
 * minimum −b stays <= 0, as the format requires b >= 0), keep the smallest error. Then fix
 * d = max step / 63 and dmin = max offset / 63 (rounded to fp16 first, since the stored values
 * are what dequantization uses) and re-search each sub-block's integer (sc, m) within ±radius
 * of the rounded values, re-rounding every code, on the exact float expressions of the
 * dequantizer. Q6_K (value = d·sc·(q − 32), sc signed 8-bit per 16): the same with a symmetric
 * step whose largest-magnitude element maps to −32 (the longer side), and d chosen so the
 * largest sub-block scale maps to −128. Q8_0: d = max|x|/127 rounded to fp16, then codes
 * rounded against the stored d.
 */

/* Round to nearest, ties to even, with the 1.5·2^23 trick: one IEEE addition, exact and the
 * same everywhere (and much faster than a libm call). Inputs are clamped to |x| <= 2^22. */
static inline int nearest(float x)
{
    x = x > 4194303.0f ? 4194303.0f : x < -4194303.0f ? -4194303.0f : x;
    const float y = x + 12582912.0f;
    int32_t i;
    memcpy(&i, &y, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Fit x (n) ≈ a·q + c with q in 0..nmax and c <= 0; returns a >= 0 and b = −c >= 0. */
static void fit_affine(const float *x, int n, int nmax, int steps, float *a_out, float *b_out)
{
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    if (lo > 0)
        lo = 0;
    if (!(hi > lo)) { /* every value equals lo <= 0: exactly −b */
        *a_out = 0;
        *b_out = -lo;
        return;
    }
    float sx = 0, sxx = 0;
    for (int i = 0; i < n; i++) {
        sx += x[i];
        sxx += x[i] * x[i];
    }
    const float fmax = (float)nmax;
    float best_a = (hi - lo) / (float)nmax, best_c = lo, best_e = INFINITY;
    for (int is = -1; is <= steps; is++) {
        /* is = -1: the plain min/max step; then the grid nmax-1 .. nmax+1 */
        float t = is < 0 ? (float)nmax : (float)nmax - 1.0f + 2.0f * (float)is / (float)steps;
        float iscale = t / (hi - lo);
        float sq = 0, sqq = 0, sxq = 0;
        for (int i = 0; i < n; i++) {
            /* clamp, then round with the 1.5·2^23 trick kept in float (exact, ties to even) */
            float v = iscale * (x[i] - lo);
            v = v < 0.0f ? 0.0f : v > fmax ? fmax : v;
            const float q = (v + 12582912.0f) - 12582912.0f;
            sq += q;
            sqq += q * q;
            sxq += x[i] * q;
        }
        float D = (float)n * sqq - sq * sq;
        if (!(D > 0))
            continue;
        float a = ((float)n * sxq - sq * sx) / D;
        float c = (sx - a * sq) / (float)n;
        if (c > 0) {
            c = 0;
            a = sxq / sqq;
        }
        if (!(a > 0))
            continue;
        /* Σ(a·q + c − x)² from the sums: only ranks candidates, the final error is exact */
        float e = a * a * sqq + 2.0f * a * c * sq + (float)n * c * c - 2.0f * a * sxq -
                  2.0f * c * sx + sxx;
        if (e < best_e) {
            best_e = e;
            best_a = a;
            best_c = c;
        }
    }
    *a_out = best_a;
    *b_out = -best_c;
}

/* Error of one K-quant sub-block at integer scale s and min m; fills q (n codes). */
static float affine_err(const float *x, int n, int nmax, float d, float dmin, int s, int m,
                        uint8_t *q)
{
    const float d1 = d * (float)s, m1 = dmin * (float)m;
    const float inv = d1 > 0 ? 1.0f / d1 : 0.0f;
    float e = 0;
    for (int i = 0; i < n; i++) {
        int v = d1 > 0 ? clampi(nearest((x[i] + m1) * inv), 0, nmax) : 0;
        q[i] = (uint8_t)v;
        float r = d1 * (float)v - m1 - x[i];
        e += r * r;
    }
    return e;
}

/* One Q4_K (nmax 15) or Q5_K (nmax 31) super-block: d, dmin, packed scales and codes q (256). */
static void quantize_kx(const float *x, int nmax, struct quant_opts o, uint16_t *d_out,
                        uint16_t *dmin_out, uint8_t *scales, uint8_t *q)
{
    float a[8], b[8], max_a = 0, max_b = 0;
    for (int j = 0; j < 8; j++) {
        fit_affine(x + 32 * j, 32, nmax, o.steps, &a[j], &b[j]);
        max_a = a[j] > max_a ? a[j] : max_a;
        max_b = b[j] > max_b ? b[j] : max_b;
    }
    *d_out = quant_f32_to_fp16(max_a / 63.0f);
    *dmin_out = quant_f32_to_fp16(max_b / 63.0f);
    const float d = quant_fp16_to_f32(*d_out), dmin = quant_fp16_to_f32(*dmin_out);
    memset(scales, 0, K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        int s0 = d > 0 ? clampi(nearest(a[j] / d), 0, 63) : 0;
        int m0 = dmin > 0 ? clampi(nearest(b[j] / dmin), 0, 63) : 0;
        int bs = s0, bm = m0;
        uint8_t tmp[32];
        float best = affine_err(x + 32 * j, 32, nmax, d, dmin, s0, m0, q + 32 * j);
        for (int ds = -o.radius; ds <= o.radius; ds++)
            for (int dm = -o.radius; dm <= o.radius; dm++) {
                int s = s0 + ds, m = m0 + dm;
                if ((ds == 0 && dm == 0) || s < 0 || s > 63 || m < 0 || m > 63)
                    continue;
                float e = affine_err(x + 32 * j, 32, nmax, d, dmin, s, m, tmp);
                if (e < best) {
                    best = e;
                    bs = s;
                    bm = m;
                    memcpy(q + 32 * j, tmp, 32);
                }
            }
        quant_put_scale_min_k4(j, (uint8_t)bs, (uint8_t)bm, scales);
    }
}

static void quantize_q4_K(const float *x, struct block_q4_K *y, int64_t nb, struct quant_opts o)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        uint8_t q[QK_K];
        quantize_kx(x, 15, o, &y[i].d, &y[i].dmin, y[i].scales, q);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
}

static void quantize_q5_K(const float *x, struct block_q5_K *y, int64_t nb, struct quant_opts o)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        uint8_t q[QK_K];
        quantize_kx(x, 31, o, &y[i].d, &y[i].dmin, y[i].scales, q);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
                y[i].qs[32 * c + l] = (uint8_t)((lo & 0x0f) | ((hi & 0x0f) << 4));
                y[i].qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
    }
}

/* Fit x (n) ≈ s·q with q in −32..31; returns s (signed). */
static float fit_sym6(const float *x, int n, int steps)
{
    float amax = 0, vmax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            vmax = x[i];
        }
    if (amax == 0)
        return 0;
    float best_s = vmax / -32.0f, best_e = INFINITY;
    for (int is = 0; is <= steps; is++) {
        float iscale = -(31.0f + 2.0f * (float)is / (float)steps) / vmax;
        float sqq = 0, sxq = 0;
        int qv[16];
        for (int i = 0; i < n; i++) {
            int q = clampi(nearest(iscale * x[i]), -32, 31);
            qv[i] = q;
            sqq += (float)(q * q);
            sxq += x[i] * (float)q;
        }
        if (!(sqq > 0))
            continue;
        float s = sxq / sqq, e = 0;
        for (int i = 0; i < n; i++) {
            float r = s * (float)qv[i] - x[i];
            e += r * r;
        }
        if (e < best_e) {
            best_e = e;
            best_s = s;
        }
    }
    return best_s;
}

static float sym6_err(const float *x, float d, int sc, int8_t *q)
{
    const float d1 = d * (float)sc;
    const float inv = d1 != 0 ? 1.0f / d1 : 0.0f;
    float e = 0;
    for (int i = 0; i < 16; i++) {
        int v = d1 != 0 ? clampi(nearest(x[i] * inv), -32, 31) : 0;
        q[i] = (int8_t)v;
        float r = d1 * (float)v - x[i];
        e += r * r;
    }
    return e;
}

static void quantize_q6_K(const float *x, struct block_q6_K *y, int64_t nb, struct quant_opts o)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float s[16], smax = 0;
        for (int j = 0; j < 16; j++) {
            s[j] = fit_sym6(x + 16 * j, 16, o.steps);
            if (fabsf(s[j]) > fabsf(smax))
                smax = s[j];
        }
        y[i].d = quant_f32_to_fp16(smax / -128.0f);
        const float d = quant_fp16_to_f32(y[i].d);
        int8_t q[QK_K];
        for (int j = 0; j < 16; j++) {
            int s0 = d != 0 ? clampi(nearest(s[j] / d), -128, 127) : 0, bs = s0;
            int8_t tmp[16];
            float best = sym6_err(x + 16 * j, d, s0, q + 16 * j);
            for (int ds = -o.radius; ds <= o.radius; ds++) {
                int sc = s0 + ds;
                if (ds == 0 || sc < -128 || sc > 127)
                    continue;
                float e = sym6_err(x + 16 * j, d, sc, tmp);
                if (e < best) {
                    best = e;
                    bs = sc;
                    memcpy(q + 16 * j, tmp, 16);
                }
            }
            y[i].scales[j] = (int8_t)bs;
        }
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int u0 = q[128 * h + l] + 32, u1 = q[128 * h + l + 32] + 32;
                const int u2 = q[128 * h + l + 64] + 32, u3 = q[128 * h + l + 96] + 32;
                y[i].ql[64 * h + l] = (uint8_t)((u0 & 0x0f) | ((u2 & 0x0f) << 4));
                y[i].ql[64 * h + l + 32] = (uint8_t)((u1 & 0x0f) | ((u3 & 0x0f) << 4));
                y[i].qh[32 * h + l] =
                    (uint8_t)((u0 >> 4) | ((u1 >> 4) << 2) | ((u2 >> 4) << 4) | ((u3 >> 4) << 6));
            }
    }
}

static void quantize_q8_0(const float *x, struct block_q8_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK8_0) {
        float amax = 0;
        for (int j = 0; j < QK8_0; j++)
            amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        y[i].d = quant_f32_to_fp16(amax / 127.0f);
        const float d = quant_fp16_to_f32(y[i].d);
        const float inv = d > 0 ? 1.0f / d : 0.0f;
        for (int j = 0; j < QK8_0; j++)
            y[i].qs[j] = (int8_t)clampi(nearest(x[j] * inv), -127, 127);
    }
}

int quant_can_quantize(int type)
{
    switch (type) {
    case QUANT_F32:
    case QUANT_F16:
    case QUANT_BF16:
    case QUANT_Q8_0:
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K:
        return 1;
    default:
        return 0;
    }
}

int quant_quantize_row_opts(int type, const float *src, void *dst, int64_t n, struct quant_opts o)
{
    if (!quant_can_quantize(type))
        return -1;
    if (o.steps < 1)
        o.steps = 1;
    if (o.radius < 0)
        o.radius = 0;
    const int64_t nb = n / quant_block_size(type);
    switch (type) {
    case QUANT_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case QUANT_F16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = quant_f32_to_fp16(src[i]);
        break;
    }
    case QUANT_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = quant_f32_to_bf16(src[i]);
        break;
    }
    case QUANT_Q8_0:
        quantize_q8_0(src, dst, nb);
        break;
    case QUANT_Q4_K:
        quantize_q4_K(src, dst, nb, o);
        break;
    case QUANT_Q5_K:
        quantize_q5_K(src, dst, nb, o);
        break;
    case QUANT_Q6_K:
        quantize_q6_K(src, dst, nb, o);
        break;
    }
    return 0;
}

int quant_quantize_row(int type, const float *src, void *dst, int64_t n)
{
    return quant_quantize_row_opts(type, src, dst, n, QUANT_OPTS_DEFAULT);
}
