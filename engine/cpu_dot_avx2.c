/* cpu_dot_avx2.c — the AVX2 build of the cpu engine's dot kernels, compiled with -mavx2 -mfma
 * -mf16c on this file only (CMakeLists.txt, x86-64, GATE_CPU_AVX2); the rest of gate, the
 * reference twin above all, never gets those flags. cpu_dot.c calls it only when the CPU has
 * AVX2, FMA and F16C.
 *
 * Every kernel of cpu_dot_impl.h is compiled here again (the compiler vectorizes its integer
 * loops), and the three hot ones — Q4_K/Q5_K, Q6_K, Q8_0 — are written with intrinsics: per
 * weight block, the values are unpacked once into int16 and pre-multiplied by their sub-block
 * scales, then each token's int16 activations meet them in vpmaddwd, 8 int32 lanes added in
 * int64 at the end (bounds: CPU_ACT_QMAX in cpu_dot.h). Those are the same exact integers the
 * portable kernels form, and the float expression per block is the same, so the results are
 * bit-identical to the portable build (tests/test_cpu.c). Elsewhere a stub that is never called.
 */
#include "cpu_dot.h"

#include <stdlib.h>

#if defined(GATE_CPU_AVX2) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* the exact sum of the 8 int32 lanes */
static inline int64_t hsum64(__m256i v)
{
    const __m256i a = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(v)),
                                       _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v, 1)));
    const __m128i b = _mm_add_epi64(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    return _mm_cvtsi128_si64(b) + _mm_extract_epi64(b, 1);
}

/* 16 int16 weight vectors (256 values, pre-scaled) against one token's int16 activations */
static inline int64_t dot256(const __m256i *W, const int16_t *a)
{
    __m256i acc = _mm256_setzero_si256();
    for (int g = 0; g < 16; g++)
        acc = _mm256_add_epi32(
            acc, _mm256_madd_epi16(W[g], _mm256_loadu_si256((const __m256i *)(a + 16 * g))));
    return hsum64(acc);
}

/* sign-extend 32 int8 into two int16 vectors, each multiplied by its scale */
static inline void widen_scaled(__m256i v, int16_t s_lo, int16_t s_hi, __m256i *out)
{
    out[0] = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)),
                                _mm256_set1_epi16(s_lo));
    out[1] = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1)),
                                _mm256_set1_epi16(s_hi));
}

static void avx2_q6_K(const void *w, const uint8_t *act, size_t as, int nt, int64_t nb, float *acc)
{
    const struct block_q6_K *x = w;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3);
    const __m256i m32 = _mm256_set1_epi8(32);
    __m256i W[16];
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_fp16_to_f32_inline(x[i].d);
        const int8_t *sc = x[i].scales;
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4);
            const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4);
            const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4);
            const __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4);
            const __m256i q0 = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(ql0, m4), h0), m32);
            const __m256i q1 = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(ql1, m4), h1), m32);
            const __m256i q2 = _mm256_sub_epi8(
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), h2), m32);
            const __m256i q3 = _mm256_sub_epi8(
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), h3), m32);
            const int g = 8 * h; /* groups of 16: q_k covers groups g + 2k, g + 2k + 1 */
            widen_scaled(q0, sc[g + 0], sc[g + 1], W + g + 0);
            widen_scaled(q1, sc[g + 2], sc[g + 3], W + g + 2);
            widen_scaled(q2, sc[g + 4], sc[g + 5], W + g + 4);
            widen_scaled(q3, sc[g + 6], sc[g + 7], W + g + 6);
        }
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_K *y = (const struct cpu_q16_K *)(act + (size_t)t * as) + i;
            const int64_t isum = dot256(W, y->qs);
            acc[t] += (d * y->d) * (float)isum;
        }
    }
}

static void avx2_q45_K(const void *w, int five, const uint8_t *act, size_t as, int nt, int64_t nb,
                       float *acc)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256i W[16];
    int32_t mn[8];
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *scales, *qs, *qhp = NULL;
        float d, dmin;
        if (five) {
            const struct block_q5_K *x = (const struct block_q5_K *)w + i;
            scales = x->scales;
            qs = x->qs;
            qhp = x->qh;
            d = quant_fp16_to_f32_inline(x->d);
            dmin = quant_fp16_to_f32_inline(x->dmin);
        } else {
            const struct block_q4_K *x = (const struct block_q4_K *)w + i;
            scales = x->scales;
            qs = x->qs;
            d = quant_fp16_to_f32_inline(x->d);
            dmin = quant_fp16_to_f32_inline(x->dmin);
        }
        int16_t sc[8];
        for (int j = 0; j < 8; j++) {
            uint8_t s, m;
            quant_scale_min_k4_inline(j, scales, &s, &m);
            sc[j] = s;
            mn[j] = m;
        }
        const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)qhp) : _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (five) {
                /* bit 2c / 2c+1 of qh[l] adds 16: shift it to bit 4 of each byte */
                const __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one);
                const __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
            }
            widen_scaled(lo, sc[2 * c], sc[2 * c], W + 4 * c);
            widen_scaled(hi, sc[2 * c + 1], sc[2 * c + 1], W + 4 * c + 2);
        }
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_K *y = (const struct cpu_q16_K *)(act + (size_t)t * as) + i;
            const int64_t isum = dot256(W, y->qs);
            int64_t imin = 0;
            for (int j = 0; j < 8; j++)
                imin += (int64_t)(mn[j] * y->sums[j]);
            acc[t] += (d * y->d) * (float)isum - (dmin * y->d) * (float)imin;
        }
    }
}

static void avx2_q8_0(const void *w, const uint8_t *act, size_t as, int nt, int64_t nb, float *acc)
{
    const struct block_q8_0 *x = w;
    for (int64_t i = 0; i < nb; i++) {
        const float dw = quant_fp16_to_f32_inline(x[i].d);
        const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].qs));
        const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(x[i].qs + 16)));
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_32 *y = (const struct cpu_q16_32 *)(act + (size_t)t * as) + i;
            const __m256i s = _mm256_add_epi32(
                _mm256_madd_epi16(w0, _mm256_loadu_si256((const __m256i *)y->qs)),
                _mm256_madd_epi16(w1, _mm256_loadu_si256((const __m256i *)(y->qs + 16))));
            acc[t] += (dw * y->d) * (float)(int32_t)hsum64(s);
        }
    }
}

#define CPU_DOT_Q8_0 avx2_q8_0
#define CPU_DOT_Q45_K avx2_q45_K
#define CPU_DOT_Q6_K avx2_q6_K
#define CPU_DOT_NAME(x) cpu_dot_avx2_##x
#include "cpu_dot_impl.h"
#undef CPU_DOT_NAME
#else
void cpu_dot_avx2_rows(int type, const void *w, const void *act, size_t act_stride, int n_tok,
                       int64_t n, float *out, size_t out_stride)
{
    (void)type, (void)w, (void)act, (void)act_stride, (void)n_tok, (void)n, (void)out;
    (void)out_stride;
    abort(); /* broken invariant: cpu_dot_have_avx2() is 0 in this build */
}
#endif
