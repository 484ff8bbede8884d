/* cpu_dot_avx2.c — the AVX2 build of the cpu engine's dot kernels, compiled with -mavx2 -mfma
 * -mf16c on this file only (CMakeLists.txt, x86-64, GATE_CPU_AVX2); the rest of gate, the
 * reference twin above all, never gets those flags. cpu_dot.c calls it only when the CPU has
 * AVX2, FMA and F16C.
 *
 * Every kernel of cpu_dot_impl.h is compiled here again (the compiler vectorizes its integer
 * loops), and the three hot ones — Q4_K/Q5_K, Q6_K, Q8_0 — are written with intrinsics: per
 * weight block, the values are unpacked once into int16 and pre-multiplied by their sub-block
 * scales, then each token's int16 activations meet them in vpmaddwd, int32 lanes summed at the end
 * (bounds: CPU_ACT_QMAX in cpu_dot.h): the multi-token path, where the unpacking is shared. One
 * token against Q4_K / Q5_K / Q6_K / Q8_0 rows (decode) takes the byte path below instead
 * (avx2_tile_fast: the token split once into bytes, the weights never widened). Those are the same
 * exact integers the portable kernels form, and the float expression per block is the same, so the
 * results are bit-identical to the portable build (tests/test_cpu.c, tests/test_cpu_dot.c).
 * Elsewhere a stub that is never called.
 */
#include "cpu_dot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(GATE_CPU_AVX2) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "cpu_avx2_blocks.h"

/* the sum of the 8 int32 lanes of a, and of b (exact: CPU_ACT_QMAX bounds every partial sum) */
static inline void hsum2(__m256i a, __m256i b, int32_t *ra, int32_t *rb)
{
    const __m256i h = _mm256_hadd_epi32(a, b); /* a01 a23 b01 b23 | a45 a67 b45 b67 */
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    s = _mm_hadd_epi32(s, s); /* sum(a) sum(b) sum(a) sum(b) */
    *ra = _mm_cvtsi128_si32(s);
    *rb = _mm_extract_epi32(s, 1);
}

static inline int32_t hsum(__m256i a)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* the sums of the 8 int32 lanes of each of a, b, c, d, as four lanes (exact, as hsum) */
static inline __m128i hsum4(__m256i a, __m256i b, __m256i c, __m256i d)
{
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* inlined where called, so that a constant argument (row or token count) unrolls its loops */
#define INLINE static inline __attribute__((always_inline))

/* int32 lanes of k tokens (k = 1 .. 4, a constant where inlined; activation blocks at
 * a0 + j * stride bytes) against the 16 pre-scaled weight vectors of nr rows (nr = 1: W0; 2: W0
 * and W1), into out0[j] / out1[j]: each weight vector loaded once for the k tokens, each
 * activation vector once for the rows */
INLINE void dot256_rk(int nr, const __m256i *W0, const __m256i *W1, const uint8_t *a0,
                      size_t stride, int k, __m256i *out0, __m256i *out1)
{
    const int16_t *a[4];
    __m256i s0[4], s1[4];
    for (int j = 0; j < k; j++) {
        a[j] = ((const struct cpu_q16_K *)(a0 + (size_t)j * stride))->qs;
        s0[j] = s1[j] = _mm256_setzero_si256();
    }
    for (int g = 0; g < 16; g++) {
        const __m256i w0 = _mm256_load_si256(W0 + g);
        const __m256i w1 = nr == 2 ? _mm256_load_si256(W1 + g) : w0;
        for (int j = 0; j < k; j++) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)(a[j] + 16 * g));
            s0[j] = madd_acc(s0[j], x, w0);
            if (nr == 2)
                s1[j] = madd_acc(s1[j], x, w1);
        }
    }
    for (int j = 0; j < k; j++) {
        out0[j] = s0[j];
        if (nr == 2)
            out1[j] = s1[j];
    }
}

/* the lanes of every token of block i against nr rows' pre-scaled blocks (l0[t] / l1[t]): four
 * tokens at a time, then one by one (measured on a MoE prompt: the last one to three in one pass
 * no faster; their float steps four lanes at a time, zero lanes as padding, 6-10 % slower). A
 * lane's int32 sum does not depend on the order of its additions. */
INLINE void dot256_tokens(int nr, const __m256i *W0, const __m256i *W1, const uint8_t *act,
                          size_t as, int64_t i, int nt, __m256i *l0, __m256i *l1)
{
    const uint8_t *a = act + (size_t)i * sizeof(struct cpu_q16_K);
    int t = 0;
    for (; t + 4 <= nt; t += 4)
        dot256_rk(nr, W0, W1, a + (size_t)t * as, as, 4, l0 + t, l1 + t);
    for (; t < nt; t++)
        dot256_rk(nr, W0, W1, a + (size_t)t * as, as, 1, l0 + t, l1 + t);
}

/* acc[t] += Q6_K block i's float step (d yd) isum for each of nt tokens (lanes[t]), four tokens
 * together */
static inline void avx2_q6_K_steps(const __m256i *lanes, float d, const uint8_t *act, size_t as,
                                   int64_t i, int nt, float *acc)
{
    int t = 0;
    for (; t + 4 <= nt; t += 4) {
        float yd[4];
        for (int k = 0; k < 4; k++)
            yd[k] = ((const struct cpu_q16_K *)(act + (size_t)(t + k) * as) + i)->d;
        const __m128i isum = hsum4(lanes[t], lanes[t + 1], lanes[t + 2], lanes[t + 3]);
        const __m128 step =
            _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(d), _mm_loadu_ps(yd)), _mm_cvtepi32_ps(isum));
        _mm_storeu_ps(acc + t, _mm_add_ps(_mm_loadu_ps(acc + t), step));
    }
    for (; t < nt; t++) {
        const struct cpu_q16_K *y = (const struct cpu_q16_K *)(act + (size_t)t * as) + i;
        acc[t] += (d * y->d) * (float)hsum(lanes[t]);
    }
}

static void avx2_q6_K(const void *w, const uint8_t *act, size_t as, int nt, int64_t nb, float *acc)
{
    __m256i W[16], lanes[CPU_DOT_MAX_TOK];
    for (int64_t i = 0; i < nb; i++) {
        float d;
        avx2_q6_K_unpack(w, i, W, &d);
        dot256_tokens(1, W, W, act, as, i, nt, lanes, lanes);
        avx2_q6_K_steps(lanes, d, act, as, i, nt, acc);
    }
}

/* acc[t] += block i's float step for each of nt tokens (their integer lanes in lanes[t]): the
 * portable q45_K's (d yd) isum - (dmin yd) imin, four tokens' reductions and steps together (a
 * vector multiply, subtract or add rounds each lane as the scalar one does) */
static inline void avx2_q45_K_steps(const __m256i *lanes, __m256i mins, float d, float dmin,
                                    const uint8_t *act, size_t as, int64_t i, int nt, float *acc)
{
    int t = 0;
    for (; t + 4 <= nt; t += 4) {
        __m256i ml[4];
        float yd[4];
        for (int k = 0; k < 4; k++) {
            const struct cpu_q16_K *y = (const struct cpu_q16_K *)(act + (size_t)(t + k) * as) + i;
            ml[k] = _mm256_mullo_epi32(mins, _mm256_loadu_si256((const __m256i *)y->sums));
            yd[k] = y->d;
        }
        const __m128 y4 = _mm_loadu_ps(yd);
        const __m128i isum = hsum4(lanes[t], lanes[t + 1], lanes[t + 2], lanes[t + 3]);
        const __m128i imin = hsum4(ml[0], ml[1], ml[2], ml[3]);
        const __m128 step =
            _mm_sub_ps(_mm_mul_ps(_mm_mul_ps(_mm_set1_ps(d), y4), _mm_cvtepi32_ps(isum)),
                       _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(dmin), y4), _mm_cvtepi32_ps(imin)));
        _mm_storeu_ps(acc + t, _mm_add_ps(_mm_loadu_ps(acc + t), step));
    }
    for (; t < nt; t++) {
        const struct cpu_q16_K *y = (const struct cpu_q16_K *)(act + (size_t)t * as) + i;
        const __m256i ml = _mm256_mullo_epi32(mins, _mm256_loadu_si256((const __m256i *)y->sums));
        int32_t isum, imin;
        hsum2(lanes[t], ml, &isum, &imin);
        acc[t] += (d * y->d) * (float)isum - (dmin * y->d) * (float)imin;
    }
}

static void avx2_q45_K(const void *w, int five, const uint8_t *act, size_t as, int nt, int64_t nb,
                       float *acc)
{
    __m256i W[16], lanes[CPU_DOT_MAX_TOK];
    for (int64_t i = 0; i < nb; i++) {
        __m256i mins;
        float d, dmin;
        avx2_q45_K_unpack(w, five, i, W, &mins, &d, &dmin);
        dot256_tokens(1, W, W, act, as, i, nt, lanes, lanes);
        avx2_q45_K_steps(lanes, mins, d, dmin, act, as, i, nt, acc);
    }
}

/* two Q4_K / Q5_K / Q6_K rows against nt tokens: each row's integers and float steps are
 * avx2_q45_K's / avx2_q6_K's */
static void avx2_K_x2(int type, const void *w0, const void *w1, const uint8_t *act, size_t as,
                      int nt, int64_t nb, float *acc0, float *acc1)
{
    const int five = type == QUANT_Q5_K, six = type == QUANT_Q6_K;
    __m256i W0[16], W1[16], l0[CPU_DOT_MAX_TOK], l1[CPU_DOT_MAX_TOK];
    for (int64_t i = 0; i < nb; i++) {
        __m256i m0 = _mm256_setzero_si256(), m1 = m0;
        float d0, dmin0 = 0.0f, d1, dmin1 = 0.0f;
        if (six) {
            avx2_q6_K_unpack(w0, i, W0, &d0);
            avx2_q6_K_unpack(w1, i, W1, &d1);
        } else {
            avx2_q45_K_unpack(w0, five, i, W0, &m0, &d0, &dmin0);
            avx2_q45_K_unpack(w1, five, i, W1, &m1, &d1, &dmin1);
        }
        dot256_tokens(2, W0, W1, act, as, i, nt, l0, l1);
        if (six) {
            avx2_q6_K_steps(l0, d0, act, as, i, nt, acc0);
            avx2_q6_K_steps(l1, d1, act, as, i, nt, acc1);
        } else {
            avx2_q45_K_steps(l0, m0, d0, dmin0, act, as, i, nt, acc0);
            avx2_q45_K_steps(l1, m1, d1, dmin1, act, as, i, nt, acc1);
        }
    }
}

/* cpu_dot_tile's multi-token path for the K-quants: rows two at a time (avx2_K_x2); returns the
 * rows done (even; the caller's row kernels take the last odd row) */
static int avx2_tile_few(int type, const uint8_t *w, size_t rb, int n_rows, const void *act,
                         size_t as, int nt, int64_t n, float *out, size_t os)
{
    if (nt < 2 || nt > CPU_DOT_MAX_TOK || n % QK_K ||
        (type != QUANT_Q4_K && type != QUANT_Q5_K && type != QUANT_Q6_K))
        return 0;
    int r = 0;
    for (; r + 2 <= n_rows; r += 2) {
        float a0[CPU_DOT_MAX_TOK] = {0}, a1[CPU_DOT_MAX_TOK] = {0};
        avx2_K_x2(type, w + (size_t)r * rb, w + (size_t)(r + 1) * rb, act, as, nt, n / QK_K, a0,
                  a1);
        for (int t = 0; t < nt; t++) {
            out[(size_t)t * os + (size_t)r] = a0[t];
            out[(size_t)t * os + (size_t)r + 1] = a1[t];
        }
    }
    return r;
}

/* the sums of the 8 int32 lanes of each of v[0..7], as eight lanes (exact, as hsum) */
static inline __m256i hsum8(const __m256i *v)
{
    const __m256i u0 =
        _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i u1 =
        _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20),
                            _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* Q8_0 against nt tokens: the portable q8_0's partials (block i into partial i % 4, in block
 * order). Eight blocks at a time: their weights widened once, then per token their eight integer
 * sums reduced together and the float steps in two four-lane vectors (lane k is partial k:
 * blocks i + k, then i + 4 + k, as the scalar loop adds them); the last nb % 8 blocks one by one */
static void avx2_q8_0(const void *w, const uint8_t *act, size_t as, int nt, int64_t nb, float *acc)
{
    const struct block_q8_0 *x = w;
    float p[CPU_DOT_MAX_TOK][4] = {{0}};
    int64_t i = 0;
    if (nb >= 8) {
        __m128 p4[CPU_DOT_MAX_TOK];
        for (int t = 0; t < nt; t++)
            p4[t] = _mm_setzero_ps();
        for (; i + 8 <= nb; i += 8) {
            __m256i W[16];
            uint16_t dh[8];
            for (int k = 0; k < 8; k++) {
                W[2 * k] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i + k].qs));
                W[2 * k + 1] =
                    _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(x[i + k].qs + 16)));
                dh[k] = x[i + k].d;
            }
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dh));
            for (int t = 0; t < nt; t++) {
                const struct cpu_q16_32 *y = (const struct cpu_q16_32 *)(act + (size_t)t * as) + i;
                __m256i v[8];
                float yd[8];
                for (int k = 0; k < 8; k++) {
                    v[k] = _mm256_add_epi32(
                        _mm256_madd_epi16(W[2 * k], _mm256_loadu_si256((const __m256i *)y[k].qs)),
                        _mm256_madd_epi16(W[2 * k + 1],
                                          _mm256_loadu_si256((const __m256i *)(y[k].qs + 16))));
                    yd[k] = y[k].d;
                }
                const __m256 b = _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_loadu_ps(yd)),
                                               _mm256_cvtepi32_ps(hsum8(v)));
                p4[t] = _mm_add_ps(p4[t], _mm256_castps256_ps128(b));
                p4[t] = _mm_add_ps(p4[t], _mm256_extractf128_ps(b, 1));
            }
        }
        for (int t = 0; t < nt; t++)
            _mm_storeu_ps(p[t], p4[t]);
    }
    for (; i < nb; i++) {
        const float dw = FP16(x[i].d);
        const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].qs));
        const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(x[i].qs + 16)));
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_32 *y = (const struct cpu_q16_32 *)(act + (size_t)t * as) + i;
            const __m256i s = _mm256_add_epi32(
                _mm256_madd_epi16(w0, _mm256_loadu_si256((const __m256i *)y->qs)),
                _mm256_madd_epi16(w1, _mm256_loadu_si256((const __m256i *)(y->qs + 16))));
            p[t][i & 3] += (dw * y->d) * (float)hsum(s);
        }
    }
    for (int t = 0; t < nt; t++)
        acc[t] += (p[t][0] + p[t][1]) + (p[t][2] + p[t][3]);
}

/* ---- decode: rows against one token, bytes through vpmaddubsw --------------------------------
 *
 * One token's int16 activations are split once per tile into a = 64 hi + lo (hi = a >> 6 in
 * [-32, 31], lo = a & 63), both signed bytes in the values' own order, 32 to a register (one Q4_K
 * sub-block, two Q6_K groups). vpmaddubsw multiplies the unsigned weight values (Q4_K nibbles
 * 0..15, Q6_K 6-bit values 0..63 before their offset of 32) with hi and with lo: each int16 lane a
 * pair of products, at most 2 x 63 x 63 = 7938, no saturation. vpmaddwd then multiplies those lanes
 * by the sub-block's scale into int32 (the hi sums and the lo sums apart; 64 hi + lo at the end),
 * so no weight is widened to int16 and no product of weights and scales is formed per value. The
 * integers are exact (int32 lanes may wrap, the block's sum fits: CPU_ACT_QMAX), so each row's
 * integer sums are the portable kernel's, and its float steps per block are the portable ones:
 * the same bits. */

/* One token against a tile's rows reads each weight byte once: the row PF_ROWS ahead is
 * prefetched while a row is computed (rows are contiguous; a hint, never a fault, results
 * untouched). Measured on this AVX2 VM, 1 thread, interleaved A/B: decode +10 % on the 30B-A3B
 * shape, +6 % on the 0.6B Q4_K_M; 1, 2 and 4 rows ahead within the VM's noise of each other. */
#define PF_ROWS 2

/* prefetch row r + PF_ROWS of the n_rows rows at w (rb bytes each), when there is one */
static inline void prefetch_ahead(const uint8_t *w, size_t rb, int r, int n_rows)
{
    if (r + PF_ROWS < n_rows)
        for (size_t o = 0; o < rb; o += 64)
            _mm_prefetch((const char *)(w + (size_t)(r + PF_ROWS) * rb + o), _MM_HINT_T0);
}

#define AVX2_SPLIT_MAX_NB 128 /* K-blocks per row the on-stack split takes (n <= 32768; 64 KB) */

struct avx2_split {
    __m256i hi[8], lo[8]; /* values 32 j .. 32 j + 31 of the block as bytes */
};

/* the token's blocks as hi / lo bytes; g32 (Q6_K, non-NULL): 32 x the sum of each group of 16 */
static void avx2_split_K(const struct cpu_q16_K *y, int64_t nb, struct avx2_split *s, int32_t *g32)
{
    const __m256i m63 = _mm256_set1_epi16(63);
    for (int64_t i = 0; i < nb; i++) {
        for (int j = 0; j < 8; j++) {
            const __m256i a0 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * j));
            const __m256i a1 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * j + 16));
            /* packs works per 128-bit lane: 0-7 of a0, 0-7 of a1, 8-15 of a0, 8-15 of a1; the
             * permute puts the values back in order (they fit: no saturation) */
            const __m256i h =
                _mm256_packs_epi16(_mm256_srai_epi16(a0, 6), _mm256_srai_epi16(a1, 6));
            const __m256i l =
                _mm256_packs_epi16(_mm256_and_si256(a0, m63), _mm256_and_si256(a1, m63));
            s[i].hi[j] = _mm256_permute4x64_epi64(h, 0xd8);
            s[i].lo[j] = _mm256_permute4x64_epi64(l, 0xd8);
        }
        if (g32)
            for (int g = 0; g < 16; g++) {
                int32_t sum = 0;
                for (int l = 0; l < 16; l++)
                    sum += y[i].qs[16 * g + l];
                g32[16 * i + g] = 32 * sum;
            }
    }
}

/* hi / lo int32 lanes + the products of 32 weight bytes q (unsigned) with one split register pair,
 * each pair of products times its scale (sc: int16 lanes, the scale of each pair) */
static inline void avx2_qa(__m256i q, const __m256i *hi, const __m256i *lo, __m256i sc, __m256i *ah,
                           __m256i *al)
{
    *ah = _mm256_add_epi32(*ah, _mm256_madd_epi16(_mm256_maddubs_epi16(q, *hi), sc));
    *al = _mm256_add_epi32(*al, _mm256_madd_epi16(_mm256_maddubs_epi16(q, *lo), sc));
}

/* Q4_K / Q5_K block (its scales, qs, and qh for Q5_K, else NULL) against split block si
 * (activation sub-block sums `sums`): *lanes, whose lanes sum to the block's integer sum of q a
 * over every sub-block scaled, and *ml, whose lanes sum to its min term (the portable q45_K's
 * isum and imin). Q5_K's fifth bit (bit 2c / 2c + 1 of qh[l]) goes to bit 4 of each byte: values
 * up to 31, pairs of products at most 2 x 31 x 63, no saturation. */
static inline void avx2_q45_K_lanes(const uint8_t *scales, const uint8_t *qs, const uint8_t *qhp,
                                    const struct avx2_split *si, const int32_t *sums,
                                    __m256i *lanes, __m256i *ml)
{
    uint32_t sc4[2], mn4[2];
    avx2_k4_scales(scales, sc4, mn4);
    /* the eight scales as int16, each broadcast to a whole register by a byte shuffle */
    const __m256i sc16 =
        _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc4)));
    const __m256i qh = qhp ? _mm256_loadu_si256((const __m256i *)qhp) : _mm256_setzero_si256();
    __m256i ah = _mm256_setzero_si256(), al = ah;
    for (int c = 0; c < 4; c++) {
        __m256i lo, hi;
        avx2_k45_values(qs, qh, qhp != NULL, c, &lo, &hi);
        const __m256i s0 =
            _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * c))));
        const __m256i s1 =
            _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * c + 1))));
        avx2_qa(lo, &si->hi[2 * c], &si->lo[2 * c], s0, &ah, &al);
        avx2_qa(hi, &si->hi[2 * c + 1], &si->lo[2 * c + 1], s1, &ah, &al);
    }
    *lanes = _mm256_add_epi32(_mm256_slli_epi32(ah, 6), al);
    const __m256i mins = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)mn4));
    *ml = _mm256_mullo_epi32(mins, _mm256_loadu_si256((const __m256i *)sums));
}

/* Q6_K block x against split block si (g32: 32 x its 16 group sums): lanes summing to the
 * portable q6_K's isum — values 0..63 through the bytes, the offset of 32 taken out through the
 * group sums */
static inline __m256i avx2_q6_K_lanes(const struct block_q6_K *x, const struct avx2_split *si,
                                      const int32_t *g32)
{
    /* the 16 signed scales as int16; register j (values 32 j ..) takes groups 2 j and 2 j + 1:
     * scale 2 j in its low 128 bits, 2 j + 1 in its high */
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
    /* scales 0-7 (h = 0) and 8-15 (h = 1) in both 128-bit lanes: a byte shuffle then puts scale
     * 2k of the half in the low lane and 2k + 1 in the high one */
    const __m256i half[2] = {_mm256_permute4x64_epi64(sc16, 0x44),
                             _mm256_permute4x64_epi64(sc16, 0xee)};
    __m256i ah = _mm256_setzero_si256(), al = ah;
    for (int h = 0; h < 2; h++) {
        __m256i q[4];
        avx2_q6_K_values(x, h, q);
        for (int k = 0; k < 4; k++) {
            const int j = 4 * h + k; /* groups 2 j (low lane) and 2 j + 1 (high) */
            const __m256i sk = _mm256_shuffle_epi8(
                half[h], _mm256_set_m128i(_mm_set1_epi16((short)(0x0202 * (2 * k + 1) + 0x0100)),
                                          _mm_set1_epi16((short)(0x0202 * (2 * k) + 0x0100))));
            avx2_qa(q[k], &si->hi[j], &si->lo[j], sk, &ah, &al);
        }
    }
    /* - sum_g sc_g 32 A_g */
    const __m256i off = _mm256_add_epi32(
        _mm256_mullo_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(sc16)),
                           _mm256_loadu_si256((const __m256i *)g32)),
        _mm256_mullo_epi32(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(sc16, 1)),
                           _mm256_loadu_si256((const __m256i *)(g32 + 8))));
    return _mm256_sub_epi32(_mm256_add_epi32(_mm256_slli_epi32(ah, 6), al), off);
}

/* one Q4_K / Q5_K row against one split token y / s: the portable q45_K's integers and float
 * steps */
static float avx2_q45_K_one(const uint8_t *w, int five, const struct cpu_q16_K *y,
                            const struct avx2_split *s, int64_t nb)
{
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        __m256i lanes, ml;
        float d, dmin;
        if (five) {
            const struct block_q5_K *x = (const struct block_q5_K *)w + i;
            avx2_q45_K_lanes(x->scales, x->qs, x->qh, s + i, y[i].sums, &lanes, &ml);
            d = FP16(x->d), dmin = FP16(x->dmin);
        } else {
            const struct block_q4_K *x = (const struct block_q4_K *)w + i;
            avx2_q45_K_lanes(x->scales, x->qs, NULL, s + i, y[i].sums, &lanes, &ml);
            d = FP16(x->d), dmin = FP16(x->dmin);
        }
        int32_t isum, imin;
        hsum2(lanes, ml, &isum, &imin);
        acc += (d * y[i].d) * (float)isum - (dmin * y[i].d) * (float)imin;
    }
    return acc;
}

/* one Q6_K row against one split token: the portable q6_K's integers and float steps */
static float avx2_q6_K_one(const struct block_q6_K *x, const struct cpu_q16_K *y,
                           const struct avx2_split *s, const int32_t *g32, int64_t nb)
{
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++)
        acc += (FP16(x[i].d) * y[i].d) * (float)hsum(avx2_q6_K_lanes(x + i, s + i, g32 + 16 * i));
    return acc;
}

/* Q8_0 against one token: the token's 32-value blocks split as the K-quants' (64 hi + lo, bytes);
 * the signed weight bytes go into vpmaddubsw as their absolute values, their signs moved onto the
 * activation bytes (|w| <= 128, |hi| <= 32, lo <= 63: pairs of products at most 16,128, no
 * saturation), so the integers are the portable q8_0's exactly */
struct avx2_split32 {
    __m256i hi, lo;
};

static void avx2_split_32(const struct cpu_q16_32 *y, int64_t nb, struct avx2_split32 *s, float *yd)
{
    const __m256i m63 = _mm256_set1_epi16(63);
    for (int64_t i = 0; i < nb; i++) {
        const __m256i a0 = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256i a1 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 16));
        const __m256i h = _mm256_packs_epi16(_mm256_srai_epi16(a0, 6), _mm256_srai_epi16(a1, 6));
        const __m256i l = _mm256_packs_epi16(_mm256_and_si256(a0, m63), _mm256_and_si256(a1, m63));
        s[i].hi = _mm256_permute4x64_epi64(h, 0xd8);
        s[i].lo = _mm256_permute4x64_epi64(l, 0xd8);
        yd[i] = y[i].d;
    }
}

/* lanes summing to block x's integer sum against split block si */
static inline __m256i avx2_q8_0_lanes(const struct block_q8_0 *x, const struct avx2_split32 *si)
{
    const __m256i w = _mm256_loadu_si256((const __m256i *)x->qs);
    const __m256i aw = _mm256_abs_epi8(w);
    const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(si->hi, w));
    const __m256i q = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(si->lo, w));
    return _mm256_add_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(64)),
                            _mm256_madd_epi16(q, _mm256_set1_epi16(1)));
}

/* one Q8_0 row against one split token: the portable q8_0's partials (block i into partial
 * i % 4, in block order), eight blocks' integer sums reduced together and their float steps in
 * two four-lane vectors (lane k is partial k: blocks i + k, then i + 4 + k, as the scalar loop) */
static float avx2_q8_0_one(const struct block_q8_0 *x, const struct avx2_split32 *s,
                           const float *yd, int64_t nb)
{
    __m128 p4 = _mm_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        __m256i v[8];
        uint16_t dh[8];
        for (int k = 0; k < 8; k++) {
            v[k] = avx2_q8_0_lanes(x + i + k, s + i + k);
            dh[k] = x[i + k].d;
        }
        const __m256i isum = hsum8(v); /* lane k: block i + k's sum */
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dh));
        const __m256 b =
            _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_loadu_ps(yd + i)), _mm256_cvtepi32_ps(isum));
        p4 = _mm_add_ps(p4, _mm256_castps256_ps128(b));
        p4 = _mm_add_ps(p4, _mm256_extractf128_ps(b, 1));
    }
    float p[4];
    _mm_storeu_ps(p, p4);
    for (; i < nb; i++)
        p[i & 3] += (FP16(x[i].d) * yd[i]) * (float)hsum(avx2_q8_0_lanes(x + i, s + i));
    float acc = 0.0f;
    acc += (p[0] + p[1]) + (p[2] + p[3]);
    return acc;
}

#define AVX2_SPLIT32_MAX_NB                                                                        \
    (32 * AVX2_SPLIT_MAX_NB / 4) /* Q8_0 blocks per row, in the same bytes */

/* cpu_dot_tile's one-token path for Q4_K / Q5_K / Q6_K / Q8_0 rows: the token split once, then row
 * by row; returns the rows done (0: not taken, the caller's row kernels run). Not inlined: its
 * split stays off the other paths' stack frames. */
static __attribute__((noinline)) int avx2_tile_fast(int type, const uint8_t *w, size_t rb,
                                                    int n_rows, const void *act, size_t as, int nt,
                                                    int64_t n, float *out, size_t os)
{
    if (nt > 1)
        return avx2_tile_few(type, w, rb, n_rows, act, as, nt, n, out, os);
    if (nt != 1 || n_rows < 1)
        return 0;
    union {
        struct avx2_split k[AVX2_SPLIT_MAX_NB];
        struct avx2_split32 b[AVX2_SPLIT32_MAX_NB];
    } s;
    if (type == QUANT_Q8_0) {
        const int64_t nb = n / 32;
        if (n % 32 || nb > AVX2_SPLIT32_MAX_NB)
            return 0;
        float yd[AVX2_SPLIT32_MAX_NB];
        avx2_split_32(act, nb, s.b, yd);
        for (int r = 0; r < n_rows; r++) {
            prefetch_ahead(w, rb, r, n_rows);
            out[r] = avx2_q8_0_one((const struct block_q8_0 *)(w + (size_t)r * rb), s.b, yd, nb);
        }
        return n_rows;
    }
    if (n % QK_K || n / QK_K > AVX2_SPLIT_MAX_NB ||
        (type != QUANT_Q4_K && type != QUANT_Q5_K && type != QUANT_Q6_K))
        return 0;
    const int64_t nb = n / QK_K;
    const struct cpu_q16_K *y = act;
    int32_t g32[16 * AVX2_SPLIT_MAX_NB];
    avx2_split_K(y, nb, s.k, type == QUANT_Q6_K ? g32 : NULL);
    for (int r = 0; r < n_rows; r++) {
        const uint8_t *row = w + (size_t)r * rb;
        prefetch_ahead(w, rb, r, n_rows);
        out[r] = type == QUANT_Q6_K ? avx2_q6_K_one((const struct block_q6_K *)row, y, s.k, g32, nb)
                                    : avx2_q45_K_one(row, type == QUANT_Q5_K, y, s.k, nb);
    }
    return n_rows;
}

/* ---- attention: one query head (cpu_attn_head), hd a multiple of 8 ----------------------------
 * The portable kernel's numbers with more work in flight: a score is cpu_dot_f32's eight lanes
 * (one FMA chain per key, lane d % 8) reduced ((0+1)+(2+3))+((4+5)+(6+7)), and one key's chain is
 * four FMA latencies per step; four keys' chains run side by side and their reductions are done
 * together with two horizontal adds (each sum is the same two operands: addition commutes). The
 * weighted values keep 64 (or 8) output dimensions in registers over all keys instead of loading
 * and storing them per key; each output is still fmaf(pw, v[d], out[d]) in key order. */

/* the scores of keys p .. p + 3 (cpu_dot_f32(q, key) * scale each) into s[p .. p + 3] */
INLINE void avx2_scores4(const float *q, const float *k0, size_t stride, int hd, float scale,
                         float *s)
{
    __m256 A0 = _mm256_setzero_ps(), A1 = A0, A2 = A0, A3 = A0;
    const float *k1 = k0 + stride, *k2 = k1 + stride, *k3 = k2 + stride;
    for (int d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
        A0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + d), A0);
        A1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + d), A1);
        A2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + d), A2);
        A3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + d), A3);
    }
    _mm_storeu_ps(s, avx2_scores_reduce4(A0, A1, A2, A3, scale));
}

/* the score of one key, the same way */
INLINE float avx2_score1(const float *q, const float *k, int hd, float scale)
{
    __m256 A = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 8)
        A = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), A);
    float L[8];
    _mm256_storeu_ps(L, A);
    return (((L[0] + L[1]) + (L[2] + L[3])) + ((L[4] + L[5]) + (L[6] + L[7]))) * scale;
}

/* out[d0 .. d0 + 8 NV) = sum over keys p in key order of fmaf(s[p] * inv, v_p[d], .) */
INLINE void avx2_weigh(const float *s, float inv, const float *v, size_t stride, int n_keys, int NV,
                       float *out)
{
    __m256 acc[8];
    for (int j = 0; j < NV; j++)
        acc[j] = _mm256_setzero_ps();
    for (int p = 0; p < n_keys; p++, v += stride) {
        const __m256 pw = _mm256_set1_ps(s[p] * inv);
        for (int j = 0; j < NV; j++)
            acc[j] = _mm256_fmadd_ps(pw, _mm256_loadu_ps(v + 8 * j), acc[j]);
    }
    for (int j = 0; j < NV; j++)
        _mm256_storeu_ps(out + 8 * j, acc[j]);
}

/* cpu_attn_head for hd % 8 == 0 (returns 1), else 0: the portable kernel runs */
static int avx2_attn_fast(const float *q, const float *kc, const float *vc, size_t stride,
                          int n_keys, int hd, float scale, float *s, float *out)
{
    if (hd <= 0 || hd % 8)
        return 0;
    int p = 0;
    for (; p + 4 <= n_keys; p += 4)
        avx2_scores4(q, kc + (size_t)p * stride, stride, hd, scale, s + p);
    for (; p < n_keys; p++)
        s[p] = avx2_score1(q, kc + (size_t)p * stride, hd, scale);
    float max = -INFINITY;
    for (p = 0; p < n_keys; p++)
        max = s[p] > max ? s[p] : max;
    float sum = 0.0f;
    for (p = 0; p < n_keys; p++) {
        s[p] = expf(s[p] - max);
        sum += s[p];
    }
    const float inv = 1.0f / sum;
    int d = 0;
    for (; d + 64 <= hd; d += 64)
        avx2_weigh(s, inv, vc + d, stride, n_keys, 8, out + d);
    for (; d < hd; d += 8)
        avx2_weigh(s, inv, vc + d, stride, n_keys, 1, out + d);
    return 1;
}

#define CPU_DOT_ATTN_FAST avx2_attn_fast
#define CPU_DOT_TILE_FAST(type, w, rb, n_rows, act, as, nt, n, out, os)                            \
    avx2_tile_fast(type, w, rb, n_rows, act, as, nt, n, out, os)
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

void cpu_dot_avx2_tile(int type, const uint8_t *w, size_t row_bytes, int n_rows, const void *act,
                       size_t act_stride, int n_tok, int64_t n, float *out, size_t out_stride)
{
    (void)type, (void)w, (void)row_bytes, (void)n_rows, (void)act, (void)act_stride;
    (void)n_tok, (void)n, (void)out, (void)out_stride;
    abort(); /* broken invariant: cpu_dot_have_avx2() is 0 in this build */
}

void cpu_dot_avx2_attn(const float *q, const float *kc, const float *vc, size_t stride, int n_keys,
                       int hd, float scale, float *s, float *out)
{
    (void)q, (void)kc, (void)vc, (void)stride, (void)n_keys, (void)hd, (void)scale, (void)s;
    (void)out;
    abort(); /* broken invariant: cpu_dot_have_avx2() is 0 in this build */
}
#endif
