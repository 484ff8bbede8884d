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
 *
 * Decode (one token) has its own path through cpu_dot_tile(): four Q4_K / Q6_K rows at a time
 * against activations split once per tile into bytes, vpdpbusd on the packed weight bytes, the
 * four rows' integer sums reduced together and their float steps done in four lanes — the same
 * integers and the same float operations per row (tests/test_cpu_dot.c), about twice the blocks
 * per second of the int16 kernel, so two threads stream weights at memory speed. With 2-8 tokens
 * (a prompt batch's routed experts, about 4 tokens each at P = 64) the same scheme runs with
 * every row's weights unpacked once per block for all the tokens (q4_K_x4_few, q6_K_x4_few).
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
    const __m512i s[4] = {s0, s1, s2, s3};
    _mm_storeu_si128((__m128i *)out, hsum4(s)); /* the four reductions together */
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
        int t = 0;
        /* four tokens at a time: their min terms reduced together, the float steps in four
         * lanes (each lane the scalar expression below, rounded the same) */
        for (; t + 4 <= nt; t += 4) {
            const struct cpu_q16_K *y[4];
            __m256i ml[4];
            for (int q = 0; q < 4; q++) {
                y[q] = (const struct cpu_q16_K *)(act + (size_t)(t + q) * as) + i;
                ml[q] = _mm256_mullo_epi32(mins, _mm256_loadu_si256((const __m256i *)y[q]->sums));
            }
            const __m256i hm =
                _mm256_hadd_epi32(_mm256_hadd_epi32(ml[0], ml[1]), _mm256_hadd_epi32(ml[2], ml[3]));
            const __m128i imin =
                _mm_add_epi32(_mm256_castsi256_si128(hm), _mm256_extracti128_si256(hm, 1));
            const __m128 yd = _mm_setr_ps(y[0]->d, y[1]->d, y[2]->d, y[3]->d);
            const __m128 is = _mm_cvtepi32_ps(_mm_loadu_si128((const __m128i *)(isum + t)));
            const __m128 v =
                _mm_sub_ps(_mm_mul_ps(_mm_mul_ps(_mm_set1_ps(d), yd), is),
                           _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(dmin), yd), _mm_cvtepi32_ps(imin)));
            _mm_storeu_ps(acc + t, _mm_add_ps(_mm_loadu_ps(acc + t), v));
        }
        for (; t < nt; t++) {
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

/* avx512_q8_0 with one token: the four partials in a register rather than in p[t] (whose
 * load-add-store each group of four blocks chained the loop through memory); the same integers
 * and float operations */
static void avx512_q8_0_one(const struct block_q8_0 *x, const struct cpu_q16_32 *y, int64_t nb,
                            float *acc)
{
    __m128 p = _mm_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        /* each block in two halves of 16 values (ymm: the widening and the final hadds are
         * cheaper than a zmm's, 1.27 against 1.45 ns per block in L2) */
        __m256i s4[4];
        for (int k = 0; k < 4; k++) {
            const __m256i lo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i + k].qs));
            const __m256i hi =
                _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(x[i + k].qs + 16)));
            s4[k] = _mm256_dpwssd_epi32(
                _mm256_dpwssd_epi32(_mm256_setzero_si256(), lo,
                                    _mm256_loadu_si256((const __m256i *)y[i + k].qs)),
                hi, _mm256_loadu_si256((const __m256i *)(y[i + k].qs + 16)));
        }
        const __m256i h =
            _mm256_hadd_epi32(_mm256_hadd_epi32(s4[0], s4[1]), _mm256_hadd_epi32(s4[2], s4[3]));
        const __m128i isum =
            _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16(
            (short)x[i].d, (short)x[i + 1].d, (short)x[i + 2].d, (short)x[i + 3].d, 0, 0, 0, 0));
        const __m128 yd = _mm_setr_ps(y[i].d, y[i + 1].d, y[i + 2].d, y[i + 3].d);
        p = _mm_add_ps(p, _mm_mul_ps(_mm_mul_ps(dw, yd), _mm_cvtepi32_ps(isum)));
    }
    float q[4];
    _mm_storeu_ps(q, p);
    for (; i < nb; i++) {
        const __m512i s =
            _mm512_dpwssd_epi32(_mm512_setzero_si512(),
                                _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)x[i].qs)),
                                _mm512_loadu_si512((const void *)y[i].qs));
        q[i & 3] += (FP16(x[i].d) * y[i].d) * (float)_mm512_reduce_add_epi32(s);
    }
    *acc += (q[0] + q[1]) + (q[2] + q[3]);
}

static void avx512_q8_0(const void *w, const uint8_t *act, size_t as, int nt, int64_t nb,
                        float *acc)
{
    if (nt == 1) {
        avx512_q8_0_one(w, (const struct cpu_q16_32 *)act, nb, acc);
        return;
    }
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

/* ---- decode: four rows against one token, VNNI on bytes ---------------------------------------
 *
 * One token's activations are split once per tile into a = 64 hi + lo (hi = a >> 6 in [-32, 31],
 * lo = a & 63), both signed bytes, in the order the weight bytes hold their values; vpdpbusd then
 * multiplies the unsigned weight bytes (Q4_K nibbles, Q6_K 6-bit values) with hi and with lo, and
 * (64 P + Q) is the exact int32 sum of q a over each group of four values — no widening of the
 * weights to int16. Sub-block scales multiply those int32 lanes; Q6_K's offset of 32 is taken out
 * once per block through the activation's group sums. Integer sums are exact (intermediate lanes
 * may wrap mod 2^32, the block's total fits int32: CPU_ACT_QMAX), so each row's integers are the
 * portable kernel's, and the float expression per block is the portable one, in four lanes (one
 * row each; a vector multiply or add rounds each lane as the scalar one does). */

#define FAST_MAX_NB 128 /* K-blocks per row the on-stack split takes (n <= 32768; 73 KB) */

struct act_split {
    __m512i hi[4], lo[4]; /* 256 values as bytes, in the weight type's order */
    __m512i g32;          /* Q6_K: 32 x the sum of each group of 16 values, int32 */
};

/* split 32 int16 activations into hi / lo bytes (exact: |a| <= CPU_ACT_QMAX) */
static inline void split32(const int16_t *a, __m256i *hi, __m256i *lo)
{
    const __m512i v = _mm512_loadu_si512((const void *)a);
    *hi = _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 6));
    *lo = _mm512_cvtepi16_epi8(_mm512_and_si512(v, _mm512_set1_epi16(63)));
}

static inline __m512i join(__m256i a, __m256i b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

/* Q4_K byte order: register k of the 128 weight bytes (64 each) as low then high nibbles holds
 * values {0..31, 64..95}, {32..63, 96..127}, {128..159, 192..223}, {160..191, 224..255} */
static void split_q4_K(const struct cpu_q16_K *y, int64_t nb, struct act_split *s)
{
    static const int first[4][2] = {{0, 64}, {32, 96}, {128, 192}, {160, 224}};
    for (int64_t i = 0; i < nb; i++)
        for (int k = 0; k < 4; k++) {
            __m256i h0, l0, h1, l1;
            split32(y[i].qs + first[k][0], &h0, &l0);
            split32(y[i].qs + first[k][1], &h1, &l1);
            s[i].hi[k] = join(h0, h1);
            s[i].lo[k] = join(l0, l1);
        }
}

/* Q6_K byte order is the values' own (register k: values 64k .. 64k + 63) */
static void split_q6_K(const struct cpu_q16_K *y, int64_t nb, struct act_split *s)
{
    for (int64_t i = 0; i < nb; i++) {
        for (int k = 0; k < 4; k++) {
            __m256i h0, l0, h1, l1;
            split32(y[i].qs + 64 * k, &h0, &l0);
            split32(y[i].qs + 64 * k + 32, &h1, &l1);
            s[i].hi[k] = join(h0, h1);
            s[i].lo[k] = join(l0, l1);
        }
        int32_t g[16];
        for (int gi = 0; gi < 16; gi++) {
            int32_t sum = 0;
            for (int l = 0; l < 16; l++)
                sum += y[i].qs[16 * gi + l];
            g[gi] = 32 * sum;
        }
        s[i].g32 = _mm512_loadu_si512((const void *)g);
    }
}

/* sum over four lanes groups: (64 dpbusd(q, hi) + dpbusd(q, lo)), exact sum of q a per lane */
static inline __m512i qa(__m512i q, __m512i hi, __m512i lo)
{
    const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, hi);
    return _mm512_dpbusd_epi32(_mm512_slli_epi32(p, 6), q, lo);
}

#ifndef FAST_PREFETCH_GROUPS
#define FAST_PREFETCH_GROUPS 2 /* groups of four rows ahead that the kernels prefetch */
#endif

/* The four rows' blocks are read interleaved (block i of each row, then block i + 1), which the
 * hardware prefetcher does not follow: block i's iteration prefetches its share (4 x bs bytes) of
 * the group FAST_PREFETCH_GROUPS ahead, so the whole group is in flight by then. Prefetches past
 * the end of the weights do not fault. */
static inline void prefetch_share(const uint8_t *w, size_t rb, int64_t i, size_t bs)
{
    const uint8_t *p = w + (size_t)FAST_PREFETCH_GROUPS * 4 * rb + (size_t)i * 4 * bs;
    for (size_t o = 0; o < 4 * bs; o += 64)
        _mm_prefetch((const char *)(p + o), _MM_HINT_T0);
}

/* the same into L2 only (_MM_HINT_T1): the Q6_K kernel. Streaming Q6_K rows from memory on one
 * core, 15.7 ns per block with T0 against 8.9 with T1 (the 210-byte blocks; Q4_K's 144-byte
 * ones stream best with T0: 8.2 against 8.6 ns) */
static inline void prefetch_share_l2(const uint8_t *w, size_t rb, int64_t i, size_t bs)
{
    const uint8_t *p = w + (size_t)FAST_PREFETCH_GROUPS * 4 * rb + (size_t)i * 4 * bs;
    for (size_t o = 0; o < 4 * bs; o += 64)
        _mm_prefetch((const char *)(p + o), _MM_HINT_T1);
}

/* ---- the four-row kernels' shared pieces ------------------------------------------------------
 */

/* pick[k] puts each int32 lane of qa(q[k], ...) next to its sub-block's scale: for Q4_K, scale
 * byte j of the 8 (register k holds sub-blocks sb[k][0] in lanes 0-7 and sb[k][1] in 8-15); for
 * Q6_K, scale g of the 16 (register k holds groups 4k .. 4k + 3, four lanes each) */
static inline void q4_K_picks(__m512i pick[4])
{
    pick[0] = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    pick[1] = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
    pick[2] = _mm512_set_epi32(6, 6, 6, 6, 6, 6, 6, 6, 4, 4, 4, 4, 4, 4, 4, 4);
    pick[3] = _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 5, 5, 5, 5, 5, 5, 5, 5);
}

static inline void q6_K_picks(__m512i pick[4])
{
    for (int k = 0; k < 4; k++)
        pick[k] = _mm512_set_epi32(4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 2, 4 * k + 2,
                                   4 * k + 2, 4 * k + 2, 4 * k + 1, 4 * k + 1, 4 * k + 1, 4 * k + 1,
                                   4 * k, 4 * k, 4 * k, 4 * k);
}

/* block i of four Q4_K rows (rb bytes apart): their first 16 bytes (d, dmin, the 12 scale bytes)
 * loaded and transposed, so the four rows' scales and mins unpack together (the scalar
 * expressions of q45_K, lane by lane). d / dmin: the rows' in four lanes; sc[r] / mn[r]: row r's
 * eight scale / min bytes in the low quadword (the high one holds another row's: read lanes 0-7
 * only) */
struct q4_K_heads {
    __m128 d, dmin;
    __m128i sc[4], mn[4];
};

static inline void q4_K_heads(const uint8_t *w, size_t rb, int64_t i, struct q4_K_heads *h)
{
    __m128i hd[4];
    for (int r = 0; r < 4; r++)
        hd[r] =
            _mm_loadu_si128((const __m128i *)((const struct block_q4_K *)(w + (size_t)r * rb) + i));
    const __m128i t0 = _mm_unpacklo_epi32(hd[0], hd[1]), t1 = _mm_unpacklo_epi32(hd[2], hd[3]);
    const __m128i t2 = _mm_unpackhi_epi32(hd[0], hd[1]), t3 = _mm_unpackhi_epi32(hd[2], hd[3]);
    const __m128i dd = _mm_unpacklo_epi64(t0, t1); /* d | dmin << 16 of rows 0-3 */
    const __m128i u0 = _mm_unpackhi_epi64(t0, t1), u1 = _mm_unpacklo_epi64(t2, t3);
    const __m128i u2 = _mm_unpackhi_epi64(t2, t3);
    const __m128i c3f = _mm_set1_epi32(0x3f3f3f3f), c0f = _mm_set1_epi32(0x0f0f0f0f);
    const __m128i c03 = _mm_set1_epi32(0x03030303);
    const __m128i sc0 = _mm_and_si128(u0, c3f), mn0 = _mm_and_si128(u1, c3f);
    const __m128i sc1 = _mm_or_si128(_mm_and_si128(u2, c0f),
                                     _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(u0, 6), c03), 4));
    const __m128i mn1 = _mm_or_si128(_mm_and_si128(_mm_srli_epi32(u2, 4), c0f),
                                     _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(u1, 6), c03), 4));
    /* row r's eight scale (min) bytes: quadword r % 2 of sc01 / sc23 (mn01 / mn23) */
    const __m128i sc01 = _mm_unpacklo_epi32(sc0, sc1), sc23 = _mm_unpackhi_epi32(sc0, sc1);
    const __m128i mn01 = _mm_unpacklo_epi32(mn0, mn1), mn23 = _mm_unpackhi_epi32(mn0, mn1);
    h->sc[0] = sc01, h->sc[1] = _mm_unpackhi_epi64(sc01, sc01);
    h->sc[2] = sc23, h->sc[3] = _mm_unpackhi_epi64(sc23, sc23);
    h->mn[0] = mn01, h->mn[1] = _mm_unpackhi_epi64(mn01, mn01);
    h->mn[2] = mn23, h->mn[3] = _mm_unpackhi_epi64(mn23, mn23);
    h->d = _mm_cvtph_ps(_mm_shuffle_epi8(
        dd, _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1)));
    h->dmin = _mm_cvtph_ps(_mm_shuffle_epi8(
        dd, _mm_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1)));
}

/* a Q4_K block's nibbles as four byte registers, in split_q4_K's order */
static inline void q4_K_nibbles(const struct block_q4_K *x, __m512i q[4])
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i w0 = _mm512_loadu_si512((const void *)x->qs);
    const __m512i w1 = _mm512_loadu_si512((const void *)(x->qs + 64));
    q[0] = _mm512_and_si512(w0, m4), q[1] = _mm512_and_si512(_mm512_srli_epi16(w0, 4), m4);
    q[2] = _mm512_and_si512(w1, m4), q[3] = _mm512_and_si512(_mm512_srli_epi16(w1, 4), m4);
}

/* a Q6_K block's 6-bit values (0 .. 63, the offset of 32 not taken out) as four byte registers
 * in the values' own order (split_q6_K's): the two-bit high parts to bits 4-5, low-nibble
 * registers taking qh bits 0-1 (values 0-31) and 2-3 (32-63), high-nibble ones 4-5 and 6-7 */
static inline void q6_K_values(const struct block_q6_K *x, __m512i q[4])
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i shl_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr_hi = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    for (int h = 0; h < 2; h++) {
        const __m512i ql = _mm512_loadu_si512((const void *)(x->ql + 64 * h));
        const __m512i qh =
            _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qh + 32 * h)));
        q[2 * h] = _mm512_ternarylogic_epi32(_mm512_and_si512(ql, m4),
                                             _mm512_sllv_epi16(qh, shl_lo), m30, 0xf8);
        q[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                                 _mm512_srlv_epi16(qh, shr_hi), m30, 0xf8);
    }
}

/* v + the block's scaled sums against one split token: sum_k qa(q[k], a) * sk[k], int32 lanes
 * (sk[k]: the row's scales permuted by pick[k]) */
static inline __m512i qa_scaled(const __m512i q[4], const __m512i sk[4], const struct act_split *a,
                                __m512i v)
{
    for (int k = 0; k < 4; k++)
        v = _mm512_add_epi32(v, _mm512_mullo_epi32(qa(q[k], a->hi[k], a->lo[k]), sk[k]));
    return v;
}

/* Q6_K's offset of 32: -sum_g sc_g 32 A_g, the start of the block's lanes (scx: the 16 scales) */
static inline __m512i q6_K_offset(__m512i scx, const struct act_split *a)
{
    return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_mullo_epi32(scx, a->g32));
}

/* the four rows' min terms against one token's sub-block sums: lane r is sum_j mn[r][j] ysums[j]
 * (mn[r]: row r's eight mins as int32) */
static inline __m128i q4_K_imin(const __m256i mn[4], __m256i ysums)
{
    __m256i mprod[4];
    for (int r = 0; r < 4; r++)
        mprod[r] = _mm256_mullo_epi32(mn[r], ysums);
    const __m256i hm = _mm256_hadd_epi32(_mm256_hadd_epi32(mprod[0], mprod[1]),
                                         _mm256_hadd_epi32(mprod[2], mprod[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(hm), _mm256_extracti128_si256(hm, 1));
}

/* acc + the four rows' block value for one token (activation scale yd): the portable q45_K's
 * (d yd) isum - (dmin yd) imin, a lane per row */
static inline __m128 q4_K_step(__m128 acc, const struct q4_K_heads *h, float yd, __m128i isum,
                               __m128i imin)
{
    const __m128 y = _mm_set1_ps(yd);
    return _mm_add_ps(acc, _mm_sub_ps(_mm_mul_ps(_mm_mul_ps(h->d, y), _mm_cvtepi32_ps(isum)),
                                      _mm_mul_ps(_mm_mul_ps(h->dmin, y), _mm_cvtepi32_ps(imin))));
}

/* four rows of Q4_K (rb bytes apart) against one split token y / s: out[0..3] */
static void q4_K_x4(const uint8_t *w, size_t rb, const struct cpu_q16_K *y,
                    const struct act_split *s, int64_t nb, float *out)
{
    __m512i pick[4];
    q4_K_picks(pick);
    __m128 acc = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const struct act_split *a = s + i;
        prefetch_share(w, rb, i, sizeof(struct block_q4_K));
        struct q4_K_heads h;
        q4_K_heads(w, rb, i, &h);
        __m512i lanes[4];
        __m256i mn[4];
        for (int r = 0; r < 4; r++) {
            const struct block_q4_K *x = (const struct block_q4_K *)(w + (size_t)r * rb) + i;
            const __m512i scx = _mm512_cvtepu8_epi32(h.sc[r]);
            mn[r] = _mm256_cvtepu8_epi32(h.mn[r]);
            __m512i q[4], sk[4];
            q4_K_nibbles(x, q);
            for (int k = 0; k < 4; k++)
                sk[k] = _mm512_permutexvar_epi32(pick[k], scx);
            lanes[r] = qa_scaled(q, sk, a, _mm512_setzero_si512());
        }
        const __m128i imin = q4_K_imin(mn, _mm256_loadu_si256((const __m256i *)y[i].sums));
        acc = q4_K_step(acc, &h, y[i].d, hsum4(lanes), imin);
    }
    _mm_storeu_ps(out, acc);
}

/* four rows of Q6_K against one split token: out[0..3] */
static void q6_K_x4(const uint8_t *w, size_t rb, const struct cpu_q16_K *y,
                    const struct act_split *s, int64_t nb, float *out)
{
    __m512i pick[4];
    q6_K_picks(pick);
    __m128 acc = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const struct act_split *a = s + i;
        prefetch_share_l2(w, rb, i, sizeof(struct block_q6_K));
        __m512i lanes[4];
        uint16_t dh[4];
        for (int r = 0; r < 4; r++) {
            const struct block_q6_K *x = (const struct block_q6_K *)(w + (size_t)r * rb) + i;
            dh[r] = x->d;
            const __m512i scx = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)x->scales));
            __m512i q[4], sk[4];
            q6_K_values(x, q);
            for (int k = 0; k < 4; k++)
                sk[k] = _mm512_permutexvar_epi32(pick[k], scx);
            lanes[r] = qa_scaled(q, sk, a, q6_K_offset(scx, a));
        }
        const __m128i isum = hsum4(lanes);
        const __m128 d = _mm_cvtph_ps(
            _mm_setr_epi16((short)dh[0], (short)dh[1], (short)dh[2], (short)dh[3], 0, 0, 0, 0));
        acc =
            _mm_add_ps(acc, _mm_mul_ps(_mm_mul_ps(d, _mm_set1_ps(y[i].d)), _mm_cvtepi32_ps(isum)));
    }
    _mm_storeu_ps(out, acc);
}

#define FEW_MAX_TOK 8 /* tokens the few-token four-row kernel takes (CPU_DOT_MAX_TOK) */

/* one row's block i against nt split tokens (token t's split at s + t * nb): its integer sum
 * is[t] per token, four tokens reduced together; scx non-NULL: Q6_K, its offset taken out */
static inline void few_sums(const __m512i q[4], const __m512i sk[4], const __m512i *scx,
                            const struct act_split *s, int64_t nb, int64_t i, int nt, int32_t *is)
{
    int t = 0;
    for (; t + 4 <= nt; t += 4) {
        __m512i L[4];
        for (int u = 0; u < 4; u++) {
            const struct act_split *a = s + (size_t)(t + u) * (size_t)nb + i;
            L[u] = qa_scaled(q, sk, a, scx ? q6_K_offset(*scx, a) : _mm512_setzero_si512());
        }
        _mm_storeu_si128((__m128i *)&is[t], hsum4(L));
    }
    for (; t < nt; t++) {
        const struct act_split *a = s + (size_t)t * (size_t)nb + i;
        is[t] = _mm512_reduce_add_epi32(
            qa_scaled(q, sk, a, scx ? q6_K_offset(*scx, a) : _mm512_setzero_si512()));
    }
}

/* four rows of Q4_K against nt (2 .. FEW_MAX_TOK) split tokens: token t's activations at
 * act + t * as, its split at s + t * nb, its four outputs at out + t * os. Each row's weight bytes
 * unpacked once per block for every token; per token and row the integers and float steps of
 * q4_K_x4 (the portable kernel's). An expert of a prompt batch sees a few tokens: the int16
 * kernel's weight widening, per block, costs more than these per-token products. */
static void q4_K_x4_few(const uint8_t *w, size_t rb, const uint8_t *act, size_t as,
                        const struct act_split *s, int nt, int64_t nb, float *out, size_t os)
{
    __m512i pick[4];
    q4_K_picks(pick);
    __m128 acc[FEW_MAX_TOK];
    for (int t = 0; t < nt; t++)
        acc[t] = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        prefetch_share(w, rb, i, sizeof(struct block_q4_K));
        struct q4_K_heads h;
        q4_K_heads(w, rb, i, &h);
        int32_t is[4][FEW_MAX_TOK];
        __m256i mn[4];
        for (int r = 0; r < 4; r++) {
            const struct block_q4_K *x = (const struct block_q4_K *)(w + (size_t)r * rb) + i;
            const __m512i scx = _mm512_cvtepu8_epi32(h.sc[r]);
            mn[r] = _mm256_cvtepu8_epi32(h.mn[r]);
            __m512i q[4], sk[4];
            q4_K_nibbles(x, q);
            for (int k = 0; k < 4; k++)
                sk[k] = _mm512_permutexvar_epi32(pick[k], scx);
            few_sums(q, sk, NULL, s, nb, i, nt, is[r]);
        }
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_K *y = (const struct cpu_q16_K *)(act + (size_t)t * as) + i;
            const __m128i isum = _mm_setr_epi32(is[0][t], is[1][t], is[2][t], is[3][t]);
            acc[t] = q4_K_step(acc[t], &h, y->d, isum,
                               q4_K_imin(mn, _mm256_loadu_si256((const __m256i *)y->sums)));
        }
    }
    for (int t = 0; t < nt; t++)
        _mm_storeu_ps(out + (size_t)t * os, acc[t]);
}

/* four rows of Q6_K against nt (2 .. FEW_MAX_TOK) split tokens, laid out as q4_K_x4_few's; per
 * token and row the integers and float steps of q6_K_x4 */
static void q6_K_x4_few(const uint8_t *w, size_t rb, const uint8_t *act, size_t as,
                        const struct act_split *s, int nt, int64_t nb, float *out, size_t os)
{
    __m512i pick[4];
    q6_K_picks(pick);
    __m128 acc[FEW_MAX_TOK];
    for (int t = 0; t < nt; t++)
        acc[t] = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        prefetch_share_l2(w, rb, i, sizeof(struct block_q6_K));
        int32_t is[4][FEW_MAX_TOK];
        uint16_t dh[4];
        for (int r = 0; r < 4; r++) {
            const struct block_q6_K *x = (const struct block_q6_K *)(w + (size_t)r * rb) + i;
            dh[r] = x->d;
            const __m512i scx = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)x->scales));
            __m512i q[4], sk[4];
            q6_K_values(x, q);
            for (int k = 0; k < 4; k++)
                sk[k] = _mm512_permutexvar_epi32(pick[k], scx);
            few_sums(q, sk, &scx, s, nb, i, nt, is[r]);
        }
        const __m128 d = _mm_cvtph_ps(
            _mm_setr_epi16((short)dh[0], (short)dh[1], (short)dh[2], (short)dh[3], 0, 0, 0, 0));
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_K *y = (const struct cpu_q16_K *)(act + (size_t)t * as) + i;
            const __m128i isum = _mm_setr_epi32(is[0][t], is[1][t], is[2][t], is[3][t]);
            acc[t] = _mm_add_ps(
                acc[t], _mm_mul_ps(_mm_mul_ps(d, _mm_set1_ps(y->d)), _mm_cvtepi32_ps(isum)));
        }
    }
    for (int t = 0; t < nt; t++)
        _mm_storeu_ps(out + (size_t)t * os, acc[t]);
}

/* cpu_dot_tile's multi-token path: 2 .. FEW_MAX_TOK tokens against Q4_K / Q6_K rows, groups of four
 * rows, each token split once; returns the rows done (a multiple of four). Not inlined: its
 * splits (73 KB) stay off the one-token path's stack frame. */
static __attribute__((noinline)) int avx512_tile_few(int type, const uint8_t *w, size_t rb,
                                                     int n_rows, const void *act, size_t as, int nt,
                                                     int64_t n, float *out, size_t os)
{
    if (nt < 2 || nt > FEW_MAX_TOK || n_rows < 4 || n % QK_K || (n / QK_K) * nt > FAST_MAX_NB ||
        (type != QUANT_Q4_K && type != QUANT_Q6_K))
        return 0;
    const int64_t nb = n / QK_K;
    struct act_split s[FAST_MAX_NB];
    for (int t = 0; t < nt; t++) {
        const struct cpu_q16_K *y = (const void *)((const uint8_t *)act + (size_t)t * as);
        if (type == QUANT_Q4_K)
            split_q4_K(y, nb, s + (size_t)t * (size_t)nb);
        else
            split_q6_K(y, nb, s + (size_t)t * (size_t)nb);
    }
    int r = 0;
    for (; r + 4 <= n_rows; r += 4) {
        if (type == QUANT_Q4_K)
            q4_K_x4_few(w + (size_t)r * rb, rb, act, as, s, nt, nb, out + r, os);
        else
            q6_K_x4_few(w + (size_t)r * rb, rb, act, as, s, nt, nb, out + r, os);
    }
    return r;
}

/* cpu_dot_tile's multi-row path: one token, Q4_K / Q6_K, groups of four rows; returns the rows
 * done (a multiple of four; the caller does the rest one by one) */
static int avx512_tile_fast(int type, const uint8_t *w, size_t rb, int n_rows, const void *act,
                            size_t as, int nt, int64_t n, float *out, size_t os)
{
    if (nt > 1)
        return avx512_tile_few(type, w, rb, n_rows, act, as, nt, n, out, os);
    if (nt != 1 || n_rows < 4 || n % QK_K || n / QK_K > FAST_MAX_NB ||
        (type != QUANT_Q4_K && type != QUANT_Q6_K))
        return 0;
    const int64_t nb = n / QK_K;
    const struct cpu_q16_K *y = act;
    struct act_split s[FAST_MAX_NB];
    if (type == QUANT_Q4_K)
        split_q4_K(y, nb, s);
    else
        split_q6_K(y, nb, s);
    int r = 0;
    for (; r + 4 <= n_rows; r += 4) {
        if (type == QUANT_Q4_K)
            q4_K_x4(w + (size_t)r * rb, rb, y, s, nb, out + r);
        else
            q6_K_x4(w + (size_t)r * rb, rb, y, s, nb, out + r);
    }
    return r;
}

#define CPU_DOT_TILE_FAST(type, w, rb, n_rows, act, as, nt, n, out, os)                            \
    avx512_tile_fast(type, w, rb, n_rows, act, as, nt, n, out, os)
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
