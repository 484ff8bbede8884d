/* cpu_dot_avx512.c — the AVX-512 (BW, VL, VNNI) build of the cpu engine's dot kernels, compiled
 * with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mfma -mf16c on this file only
 * (CMakeLists.txt, x86-64, GATE_CPU_AVX2); cpu_dot.c calls it only when the CPU has all of them.
 *
 * Same scheme as cpu_dot_avx2.c: every kernel of cpu_dot_impl.h compiled again, and the hot ones
 * (Q4_K/Q5_K, Q6_K, Q8_0) with intrinsics — a weight block unpacked once into int16, pre-
 * multiplied by its sub-block scales (one 32-value sub-block per register), then vpdpwssd against
 * each token's int16 activations, the int32 lanes summed once per block and token. The integers
 * are the portable kernels' exact ones (bounds: CPU_ACT_QMAX) and the float expression per block
 * is the same, so results are bit-identical to the other builds (tests/test_cpu.c).
 */
#include "cpu_dot.h"

#include <stdlib.h>
#include <string.h>

#if defined(GATE_CPU_AVX2) && defined(__AVX512F__) && defined(__AVX512BW__) &&                     \
    defined(__AVX512VNNI__) && defined(__AVX512VL__)
#include <immintrin.h>

/* fp16 -> float with F16C: exact, the same value as quant_fp16_to_f32_inline */
#define FP16(h) _cvtsh_ss(h)

/* 8 pre-scaled weight registers (256 values) against one token's activations: int32 lanes.
 * Four accumulators, so the vpdpwssd chain is two deep rather than eight. */
static inline __m512i dot256(const __m512i *W, const int16_t *a)
{
    __m512i acc[4];
    for (int j = 0; j < 4; j++)
        acc[j] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), W[j],
                                     _mm512_loadu_si512((const void *)(a + 32 * j)));
    for (int j = 4; j < 8; j++)
        acc[j - 4] =
            _mm512_dpwssd_epi32(acc[j - 4], W[j], _mm512_loadu_si512((const void *)(a + 32 * j)));
    return _mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3]));
}

/* the same for four tokens (activation blocks at a0 + k * stride bytes) */
static inline void dot256x4(const __m512i *W, const uint8_t *a0, size_t stride, int32_t *out)
{
    const int16_t *a[4];
    for (int k = 0; k < 4; k++)
        a[k] = ((const struct cpu_q16_K *)(a0 + (size_t)k * stride))->qs;
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (int j = 0; j < 8; j++) {
        const __m512i w = W[j];
        s0 = _mm512_dpwssd_epi32(s0, w, _mm512_loadu_si512((const void *)(a[0] + 32 * j)));
        s1 = _mm512_dpwssd_epi32(s1, w, _mm512_loadu_si512((const void *)(a[1] + 32 * j)));
        s2 = _mm512_dpwssd_epi32(s2, w, _mm512_loadu_si512((const void *)(a[2] + 32 * j)));
        s3 = _mm512_dpwssd_epi32(s3, w, _mm512_loadu_si512((const void *)(a[3] + 32 * j)));
    }
    out[0] = _mm512_reduce_add_epi32(s0);
    out[1] = _mm512_reduce_add_epi32(s1);
    out[2] = _mm512_reduce_add_epi32(s2);
    out[3] = _mm512_reduce_add_epi32(s3);
}

/* the block's integer sum for every token: groups of four, then one by one */
static inline void dot256_tokens(const __m512i *W, const uint8_t *act, size_t as, int64_t i, int nt,
                                 int32_t *isum)
{
    const size_t off = (size_t)i * sizeof(struct cpu_q16_K);
    int t = 0;
    for (; t + 4 <= nt; t += 4)
        dot256x4(W, act + (size_t)t * as + off, as, isum + t);
    for (; t < nt; t++)
        isum[t] = _mm512_reduce_add_epi32(
            dot256(W, ((const struct cpu_q16_K *)(act + (size_t)t * as + off))->qs));
}

static void avx512_q6_K(const void *w, const uint8_t *act, size_t as, int nt, int64_t nb,
                        float *acc)
{
    const struct block_q6_K *x = w;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3);
    const __m256i m32 = _mm256_set1_epi8(32);
    __m512i W[8];
    int32_t isum[CPU_DOT_MAX_TOK];
    for (int64_t i = 0; i < nb; i++) {
        const float d = FP16(x[i].d);
        /* the 16 group scales as int16 in the low half of a register */
        const __m512i scv = _mm512_castsi256_si512(
            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales)));
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
            /* groups of 16: q_k of half h covers groups 8h + 2k and 8h + 2k + 1 */
            const __m256i qk[4] = {q0, q1, q2, q3};
            for (int k = 0; k < 4; k++) {
                const __m512i idx = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_set1_epi16((short)(8 * h + 2 * k))),
                    _mm256_set1_epi16((short)(8 * h + 2 * k + 1)), 1);
                W[4 * h + k] = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(qk[k]),
                                                  _mm512_permutexvar_epi16(idx, scv));
            }
        }
        dot256_tokens(W, act, as, i, nt, isum);
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_K *y = (const struct cpu_q16_K *)(act + (size_t)t * as) + i;
            acc[t] += (d * y->d) * (float)isum[t];
        }
    }
}

static void avx512_q45_K(const void *w, int five, const uint8_t *act, size_t as, int nt, int64_t nb,
                         float *acc)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m512i W[8];
    int32_t isum[CPU_DOT_MAX_TOK];
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *scales, *qs, *qhp = NULL;
        float d, dmin;
        if (five) {
            const struct block_q5_K *x = (const struct block_q5_K *)w + i;
            scales = x->scales;
            qs = x->qs;
            qhp = x->qh;
            d = FP16(x->d);
            dmin = FP16(x->dmin);
        } else {
            const struct block_q4_K *x = (const struct block_q4_K *)w + i;
            scales = x->scales;
            qs = x->qs;
            d = FP16(x->d);
            dmin = FP16(x->dmin);
        }
        /* the twelve scale bytes as three words (see cpu_dot_avx2.c) */
        uint32_t u[3], sc4[2], mn4[2];
        memcpy(u, scales, 12);
        sc4[0] = u[0] & 0x3f3f3f3fu;
        mn4[0] = u[1] & 0x3f3f3f3fu;
        sc4[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
        mn4[1] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
        uint8_t sc[8];
        memcpy(sc, sc4, 8);
        const __m256i mins = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)mn4));
        const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)qhp) : _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (five) {
                const __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one);
                const __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
            }
            W[2 * c] = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(lo), _mm512_set1_epi16(sc[2 * c]));
            W[2 * c + 1] =
                _mm512_mullo_epi16(_mm512_cvtepi8_epi16(hi), _mm512_set1_epi16(sc[2 * c + 1]));
        }
        dot256_tokens(W, act, as, i, nt, isum);
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_K *y = (const struct cpu_q16_K *)(act + (size_t)t * as) + i;
            const __m256i ml =
                _mm256_mullo_epi32(mins, _mm256_loadu_si256((const __m256i *)y->sums));
            __m128i s = _mm_add_epi32(_mm256_castsi256_si128(ml), _mm256_extracti128_si256(ml, 1));
            s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
            s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
            const int32_t imin = _mm_cvtsi128_si32(s);
            acc[t] += (d * y->d) * (float)isum[t] - (dmin * y->d) * (float)imin;
        }
    }
}

/* the four int32 lane sums of s[0..3] (16 lanes each), in order */
static inline __m128i hsum4(const __m512i *s)
{
    __m256i y[4];
    for (int k = 0; k < 4; k++)
        y[k] = _mm256_add_epi32(_mm512_castsi512_si256(s[k]), _mm512_extracti64x4_epi64(s[k], 1));
    const __m256i h =
        _mm256_hadd_epi32(_mm256_hadd_epi32(y[0], y[1]), _mm256_hadd_epi32(y[2], y[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

static void avx512_q8_0(const void *w, const uint8_t *act, size_t as, int nt, int64_t nb,
                        float *acc)
{
    const struct block_q8_0 *x = w;
    float p[CPU_DOT_MAX_TOK][4] = {{0}}; /* block i into partial i % 4, as the portable kernel */
    int64_t i = 0;
    /* four blocks at a time: their integer sums reduced together, the float steps per block as
     * the portable kernel's (a vector multiply or add rounds each lane as the scalar one does) */
    for (; i + 4 <= nb; i += 4) {
        __m512i wv[4];
        float dw[4];
        for (int k = 0; k < 4; k++) {
            dw[k] = FP16(x[i + k].d);
            wv[k] = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)x[i + k].qs));
        }
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_32 *y = (const struct cpu_q16_32 *)(act + (size_t)t * as) + i;
            __m512i s4[4];
            for (int k = 0; k < 4; k++)
                s4[k] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), wv[k],
                                            _mm512_loadu_si512((const void *)y[k].qs));
            const __m128 scale =
                _mm_mul_ps(_mm_loadu_ps(dw), _mm_setr_ps(y[0].d, y[1].d, y[2].d, y[3].d));
            /* lane k is block i + k, whose partial is k (i is a multiple of 4) */
            _mm_storeu_ps(p[t], _mm_add_ps(_mm_loadu_ps(p[t]),
                                           _mm_mul_ps(scale, _mm_cvtepi32_ps(hsum4(s4)))));
        }
    }
    for (; i < nb; i++) {
        const float dw = FP16(x[i].d);
        const __m512i w0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)x[i].qs));
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_32 *y = (const struct cpu_q16_32 *)(act + (size_t)t * as) + i;
            const __m512i s = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w0,
                                                  _mm512_loadu_si512((const void *)y->qs));
            p[t][i & 3] += (dw * y->d) * (float)_mm512_reduce_add_epi32(s);
        }
    }
    for (int t = 0; t < nt; t++)
        acc[t] += (p[t][0] + p[t][1]) + (p[t][2] + p[t][3]);
}

#define CPU_DOT_Q8_0 avx512_q8_0
#define CPU_DOT_Q45_K avx512_q45_K
#define CPU_DOT_Q6_K avx512_q6_K
#define CPU_DOT_NAME(x) cpu_dot_avx512_##x
#include "cpu_dot_impl.h"
#undef CPU_DOT_NAME
#else
void cpu_dot_avx512_rows(int type, const void *w, const void *act, size_t act_stride, int n_tok,
                         int64_t n, float *out, size_t out_stride)
{
    (void)type, (void)w, (void)act, (void)act_stride, (void)n_tok, (void)n, (void)out;
    (void)out_stride;
    abort(); /* broken invariant: cpu_dot_have_avx512() is 0 in this build */
}

void cpu_dot_avx512_tile(int type, const uint8_t *w, size_t row_bytes, int n_rows, const void *act,
                         size_t act_stride, int n_tok, int64_t n, float *out, size_t out_stride)
{
    (void)type, (void)w, (void)row_bytes, (void)n_rows, (void)act, (void)act_stride;
    (void)n_tok, (void)n, (void)out, (void)out_stride;
    abort(); /* broken invariant: cpu_dot_have_avx512() is 0 in this build */
}

void cpu_dot_avx512_attn(const float *q, const float *kc, const float *vc, size_t stride,
                         int n_keys, int hd, float scale, float *s, float *out)
{
    (void)q, (void)kc, (void)vc, (void)stride, (void)n_keys, (void)hd, (void)scale, (void)s;
    (void)out;
    abort(); /* broken invariant: cpu_dot_have_avx512() is 0 in this build */
}
#endif
