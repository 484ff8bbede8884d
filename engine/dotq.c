/* dotq.c — see dotq.h. The fused kernels are the reference computation reordered in space,
 * never in arithmetic: every weight is still d·q (− m) evaluated exactly as quant.c does, every
 * product still goes to lane (index % 16) in increasing index, and the lanes are reduced in the
 * same fixed order. IEEE multiplication and addition are per-lane identical in SSE/AVX2 and in
 * scalar code, and nothing is contracted into FMA. */
#include "dotq.h"

#include <string.h>

#include "base/sanitize.h"
#include "quant.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DOTQ_X86 1
#endif

GATE_UNINSTRUMENTED static float reduce(float *acc)
{
    for (int s = DOTQ_LANES / 2; s > 0; s /= 2)
        for (int j = 0; j < s; j++)
            acc[j] += acc[j + s];
    return acc[0];
}

/* the twin's hottest loop: outside the sanitizers' instrumentation, its two ranges checked
 * whole (base/sanitize.h) */
QUANT_VECTOR_CLONES GATE_UNINSTRUMENTED float dotq_f32(const float *a, const float *b, int64_t n)
{
    gate_check_floats(a, n);
    gate_check_floats(b, n);
    float acc[DOTQ_LANES] = {0};
    int64_t i = 0;
    for (; i + DOTQ_LANES <= n; i += DOTQ_LANES)
        for (int j = 0; j < DOTQ_LANES; j++)
            acc[j] += a[i + j] * b[i + j];
    for (int j = 0; i < n; i++, j++)
        acc[j] += a[i] * b[i];
    return reduce(acc);
}

/* the twin's attention's other hot loop: uninstrumented like dotq_f32, its ranges checked whole */
QUANT_VECTOR_CLONES GATE_UNINSTRUMENTED void dotq_axpy(float *out, float w, const float *v,
                                                       int64_t n)
{
    gate_check_floats(out, n);
    gate_check_floats(v, n);
    for (int64_t i = 0; i < n; i++)
        out[i] += w * v[i];
}

float dotq_ref(int type, const void *row, const float *x, int64_t n, float *scratch)
{
    if (type == QUANT_F32)
        return dotq_f32(row, x, n);
    quant_dequant_row(type, row, scratch, n);
    return dotq_f32(scratch, x, n);
}

#ifdef DOTQ_X86

/* The fused kernels are the twin's hottest loops after dotq_f32: outside the sanitizers'
 * instrumentation like it, dotq_fast() checking their two ranges whole first (base/sanitize.h) */
#define AVX2 __attribute__((target("avx2"))) GATE_UNINSTRUMENTED

/* acc{0,1} (lanes 0-7, 8-15) += w * x for sixteen weights given as int32 in i0, i1, each
 * mapped to float as scale * q - min (or scale * q when min is NULL). */
AVX2 static inline void lanes16(__m256 *acc0, __m256 *acc1, __m256i i0, __m256i i1, __m256 scale,
                                const __m256 *min, const float *x)
{
    __m256 w0 = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(i0));
    __m256 w1 = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(i1));
    if (min) {
        w0 = _mm256_sub_ps(w0, *min);
        w1 = _mm256_sub_ps(w1, *min);
    }
    *acc0 = _mm256_add_ps(*acc0, _mm256_mul_ps(w0, _mm256_loadu_ps(x)));
    *acc1 = _mm256_add_ps(*acc1, _mm256_mul_ps(w1, _mm256_loadu_ps(x + 8)));
}

/* Sixteen unsigned bytes -> two vectors of eight int32. */
AVX2 static inline void widen_u8(__m128i b, __m256i *i0, __m256i *i1)
{
    *i0 = _mm256_cvtepu8_epi32(b);
    *i1 = _mm256_cvtepu8_epi32(_mm_srli_si128(b, 8));
}

AVX2 static inline void widen_i8(__m128i b, __m256i *i0, __m256i *i1)
{
    *i0 = _mm256_cvtepi8_epi32(b);
    *i1 = _mm256_cvtepi8_epi32(_mm_srli_si128(b, 8));
}

AVX2 static float finish(__m256 acc0, __m256 acc1)
{
    float acc[DOTQ_LANES];
    _mm256_storeu_ps(acc, acc0);
    _mm256_storeu_ps(acc + 8, acc1);
    return reduce(acc);
}

/* Q4_K and Q5_K: weight = (d * sc) * q - (dmin * m), per sub-block of 32, q the nibble, for Q5_K
 * plus 16 times a fifth bit from qh: bit 2c of qh[l] for the low nibbles of 64-element chunk c,
 * bit 2c + 1 for the high ones (quant.c dequant_q4_K, dequant_q5_K). */
AVX2 static float dot_q45_K_avx2(const uint8_t *blocks, int five, const float *x, int64_t nb)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const __m128i low4 = _mm_set1_epi8(0x0f), one = _mm_set1_epi8(1);
    const size_t bs = five ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    for (int64_t i = 0; i < nb; i++, blocks += bs) {
        const struct block_q4_K *b4 = (const struct block_q4_K *)blocks;
        const struct block_q5_K *b5 = (const struct block_q5_K *)blocks;
        const uint16_t d16 = five ? b5->d : b4->d, dmin16 = five ? b5->dmin : b4->dmin;
        const float d = quant_fp16_to_f32_inline(d16), dmin = quant_fp16_to_f32_inline(dmin16);
        const uint8_t *scales = five ? b5->scales : b4->scales, *q = five ? b5->qs : b4->qs;
        for (int c = 0; c < 4; c++, q += 32, x += 64) {
            uint8_t sc, m;
            quant_scale_min_k4_inline(2 * c, scales, &sc, &m);
            const __m256 d1 = _mm256_set1_ps(d * sc), m1 = _mm256_set1_ps(dmin * m);
            quant_scale_min_k4_inline(2 * c + 1, scales, &sc, &m);
            const __m256 d2 = _mm256_set1_ps(d * sc), m2 = _mm256_set1_ps(dmin * m);
            for (int half = 0; half < 2; half++) { /* the low nibbles (d1), then the high (d2) */
                for (int h = 0; h < 2; h++) {      /* elements 16h..16h+15 of the 32 */
                    const __m128i raw = _mm_loadu_si128((const __m128i *)(q + 16 * h));
                    __m128i v = half ? _mm_and_si128(_mm_srli_epi16(raw, 4), low4)
                                     : _mm_and_si128(raw, low4);
                    if (five) {
                        const __m128i hi = _mm_loadu_si128((const __m128i *)(b5->qh + 16 * h));
                        const __m128i bit = _mm_cvtsi32_si128(2 * c + half);
                        v = _mm_or_si128(
                            v, _mm_slli_epi16(_mm_and_si128(_mm_srl_epi16(hi, bit), one), 4));
                    }
                    __m256i i0, i1;
                    widen_u8(v, &i0, &i1);
                    lanes16(&acc0, &acc1, i0, i1, half ? d2 : d1, half ? &m2 : &m1,
                            x + 32 * half + 16 * h);
                }
            }
        }
    }
    return finish(acc0, acc1);
}

/* Q6_K: weight = (d * scale[e / 16]) * (q - 32) (quant.c dequant_q6_K). */
AVX2 static float dot_q6_K_avx2(const struct block_q6_K *b, const float *x, int64_t nb)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++, b++) {
        const float d = quant_fp16_to_f32_inline(b->d);
        for (int h = 0; h < 2; h++, x += 128) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            const int8_t *sc = b->scales + 8 * h;
            int8_t q[128]; /* q - 32, in quant.c's element order */
            for (int l = 0; l < 32; l++) {
                q[l] = (int8_t)(((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32);
                q[l + 32] = (int8_t)(((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32);
                q[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                q[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
            for (int g = 0; g < 8; g++) {
                __m256i i0, i1;
                widen_i8(_mm_loadu_si128((const __m128i *)(q + 16 * g)), &i0, &i1);
                lanes16(&acc0, &acc1, i0, i1, _mm256_set1_ps(d * sc[g]), NULL, x + 16 * g);
            }
        }
    }
    return finish(acc0, acc1);
}

/* Q8_0: weight = q * d (quant.c dequant_q8_0). */
AVX2 static float dot_q8_0_avx2(const struct block_q8_0 *b, const float *x, int64_t nb)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++, b++, x += QK8_0) {
        const __m256 d = _mm256_set1_ps(quant_fp16_to_f32_inline(b->d));
        for (int h = 0; h < 2; h++) {
            __m256i i0, i1;
            widen_i8(_mm_loadu_si128((const __m128i *)(b->qs + 16 * h)), &i0, &i1);
            lanes16(&acc0, &acc1, i0, i1, d, NULL, x + 16 * h);
        }
    }
    return finish(acc0, acc1);
}

static int have_avx2(void)
{
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return cached;
}
#endif

float dotq_fast(int type, const void *row, const float *x, int64_t n, float *scratch)
{
#ifdef DOTQ_X86
    if (have_avx2()) {
        gate_check_range(row, quant_row_bytes(type, n));
        gate_check_floats(x, n);
        switch (type) {
        case QUANT_Q4_K:
        case QUANT_Q5_K:
            return dot_q45_K_avx2(row, type == QUANT_Q5_K, x, n / QK_K);
        case QUANT_Q6_K:
            return dot_q6_K_avx2(row, x, n / QK_K);
        case QUANT_Q8_0:
            return dot_q8_0_avx2(row, x, n / QK8_0);
        default:
            break;
        }
    }
#endif
    return dotq_ref(type, row, x, n, scratch);
}
