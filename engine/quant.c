/* quant.c — type table, fp16/bf16 conversion and the reference dequantizers.
 *
 * Each dequantizer evaluates exactly the float expressions of ggml's dequantize_row_* (same
 * operand order, no fused multiply-add: the project builds with -ffp-contract=off), so its
 * output is bit-identical to libggml's. Layouts: ../shared/FACTS.md §4 and quant.h.
 * Quantizers (float -> block) are added by the synthetic-model work next to these.
 */
#include "quant.h"

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
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) /* inf / NaN */
        return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
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
    if (x < 0x38800000u) { /* below 2^-14: a half subnormal or zero */
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
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void dequant_q4_0(const struct block_q4_0 *x, float *y, int64_t nb)
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

static void dequant_q4_1(const struct block_q4_1 *x, float *y, int64_t nb)
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

static void dequant_q5_0(const struct block_q5_0 *x, float *y, int64_t nb)
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

static void dequant_q5_1(const struct block_q5_1 *x, float *y, int64_t nb)
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

static void dequant_q8_0(const struct block_q8_0 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_fp16_to_f32(x[i].d);
        for (int j = 0; j < QK8_0; j++)
            y[i * QK8_0 + j] = x[i].qs[j] * d;
    }
}

static void dequant_q4_K(const struct block_q4_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *q = x[i].qs;
        const float d = quant_fp16_to_f32(x[i].d);
        const float min = quant_fp16_to_f32(x[i].dmin);
        for (int c = 0; c < 4; c++) { /* four 64-element chunks: sub-blocks 2c and 2c+1 */
            uint8_t sc, m;
            quant_get_scale_min_k4(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            quant_get_scale_min_k4(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (q[l] >> 4) - m2;
            q += 32;
        }
    }
}

static void dequant_q5_K(const struct block_q5_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ql = x[i].qs;
        const uint8_t *qh = x[i].qh;
        const float d = quant_fp16_to_f32(x[i].d);
        const float min = quant_fp16_to_f32(x[i].dmin);
        uint8_t u1 = 1, u2 = 2;
        for (int c = 0; c < 4; c++) {
            uint8_t sc, m;
            quant_get_scale_min_k4(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            quant_get_scale_min_k4(2 * c + 1, x[i].scales, &sc, &m);
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

static void dequant_q6_K(const struct block_q6_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_fp16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql;
        const uint8_t *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int h = 0; h < 2; h++) { /* two halves of 128 */
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = (int8_t)((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = (int8_t)((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = (int8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
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
    case QUANT_F16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = quant_fp16_to_f32(s[i]);
        return;
    }
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
