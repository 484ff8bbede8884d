/* cpu_avx2_blocks.h — the AVX2 unpacking of Q4_K / Q5_K / Q6_K weight blocks into int16 values
 * pre-multiplied by their sub-block scales, the multiply-add step on them (madd_acc) and the
 * attention scores' four-pair reduction, shared by the AVX2 dot kernels (cpu_dot_avx2.c) and the
 * AVX2 prompt GEMM (cpu_gemm_avx2.c). Include it only from a file compiled with -mavx2 -mfma
 * -mf16c (CMakeLists.txt), after <immintrin.h>. The values are the portable kernels'
 * (cpu_dot_impl.h) integers: a block's W[g] holds its values 16 g .. 16 g + 15 in order.
 */
#ifndef GATE_CPU_AVX2_BLOCKS_H
#define GATE_CPU_AVX2_BLOCKS_H

#include <stdint.h>
#include <string.h>

#include "quant.h"

/* fp16 -> float with F16C: exact, the same value as quant_fp16_to_f32_inline */
#define FP16(h) _cvtsh_ss(h)

/* sign-extend 32 int8 into two int16 vectors, each multiplied by its scale */
static inline void widen_scaled(__m256i v, int16_t s_lo, int16_t s_hi, __m256i *out)
{
    out[0] = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)),
                                _mm256_set1_epi16(s_lo));
    out[1] = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1)),
                                _mm256_set1_epi16(s_hi));
}

/* Half h (values 128 h ..) of Q6_K block x as bytes 0..63 (the offset of 32 not taken out): q[k]
 * holds values 128 h + 32 k + l, l < 32, the low four bits from ql and two from qh. Shared by the
 * int16 unpacking below and the byte path (cpu_dot_avx2.c). */
static inline void avx2_q6_K_values(const struct block_q6_K *x, int h, __m256i q[4])
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3);
    const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
    const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
    q[0] =
        _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
    q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
}

/* Q6_K block i of row w: its 256 values (offset of 32 taken out) pre-scaled by their group
 * scales into W[16] (int16), and its scale d */
static inline void avx2_q6_K_unpack(const void *w, int64_t i, __m256i *W, float *d)
{
    const struct block_q6_K *x = (const struct block_q6_K *)w + i;
    const __m256i m32 = _mm256_set1_epi8(32);
    *d = FP16(x->d);
    const int8_t *sc = x->scales;
    for (int h = 0; h < 2; h++) {
        __m256i v[4];
        avx2_q6_K_values(x, h, v);
        const __m256i q0 = _mm256_sub_epi8(v[0], m32), q1 = _mm256_sub_epi8(v[1], m32);
        const __m256i q2 = _mm256_sub_epi8(v[2], m32), q3 = _mm256_sub_epi8(v[3], m32);
        const int g = 8 * h; /* groups of 16: q_k covers groups g + 2k, g + 2k + 1 */
        widen_scaled(q0, sc[g + 0], sc[g + 1], W + g + 0);
        widen_scaled(q1, sc[g + 2], sc[g + 3], W + g + 2);
        widen_scaled(q2, sc[g + 4], sc[g + 5], W + g + 4);
        widen_scaled(q3, sc[g + 6], sc[g + 7], W + g + 6);
    }
}

/* a Q4_K / Q5_K block's twelve scale bytes as three words: sub-blocks 0-3 hold their 6-bit
 * scale / min in bytes 0-3 / 4-7; sub-blocks 4-7 take 4 bits from bytes 8-11 and 2 from the top
 * of 0-7. sc4 / mn4: the eight scales / mins as bytes */
static inline void avx2_k4_scales(const uint8_t *scales, uint32_t sc4[2], uint32_t mn4[2])
{
    uint32_t u[3];
    memcpy(u, scales, 12);
    sc4[0] = u[0] & 0x3f3f3f3fu;
    mn4[0] = u[1] & 0x3f3f3f3fu;
    sc4[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    mn4[1] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
}

/* the values of sub-blocks 2c (*lo) and 2c + 1 (*hi) of a Q4_K / Q5_K block as bytes: the
 * nibbles of qs[32c ..], and for Q5_K (qh: its 32 qh bytes loaded; five) bit 2c / 2c + 1 of qh[l]
 * as 16 */
static inline void avx2_k45_values(const uint8_t *qs, __m256i qh, int five, int c, __m256i *lo,
                                   __m256i *hi)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
    *lo = _mm256_and_si256(q, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if (five) {
        const __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one);
        const __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one);
        *lo = _mm256_or_si256(*lo, _mm256_slli_epi16(b0, 4));
        *hi = _mm256_or_si256(*hi, _mm256_slli_epi16(b1, 4));
    }
}

/* Q4_K / Q5_K block i of row w: its 256 values pre-scaled into W[16] (int16), its eight mins
 * (int32 lanes) and its two scales */
static inline void avx2_q45_K_unpack(const void *w, int five, int64_t i, __m256i *W, __m256i *mins,
                                     float *d, float *dmin)
{
    const uint8_t *scales, *qs, *qhp = NULL;
    if (five) {
        const struct block_q5_K *x = (const struct block_q5_K *)w + i;
        scales = x->scales;
        qs = x->qs;
        qhp = x->qh;
        *d = FP16(x->d);
        *dmin = FP16(x->dmin);
    } else {
        const struct block_q4_K *x = (const struct block_q4_K *)w + i;
        scales = x->scales;
        qs = x->qs;
        *d = FP16(x->d);
        *dmin = FP16(x->dmin);
    }
    uint32_t sc4[2], mn4[2];
    avx2_k4_scales(scales, sc4, mn4);
    uint8_t sc[8];
    memcpy(sc, sc4, 8);
    *mins = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)mn4));
    const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)qhp) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i lo, hi;
        avx2_k45_values(qs, qh, five, c, &lo, &hi);
        widen_scaled(lo, sc[2 * c], sc[2 * c], W + 4 * c);
        widen_scaled(hi, sc[2 * c + 1], sc[2 * c + 1], W + 4 * c + 2);
    }
}

/* acc += the pair sums of a and w (vpmaddwd, then vpaddd). As an asm statement with the
 * accumulator tied to its register: GCC's allocation of the two intrinsics in a loop of several
 * accumulators moved every accumulator between two registers on each step and kept one in memory,
 * whose store-to-load chain then set the loop's pace (measured: half the prompt GEMM's tile time
 * on one vpaddd; in the few-token kernels 19 % of a MoE prompt's profile on one). */
static inline __attribute__((always_inline)) __m256i madd_acc(__m256i acc, __m256i a, __m256i w)
{
    __m256i t;
    __asm__("vpmaddwd %3, %2, %1\n\tvpaddd %1, %0, %0" : "+x"(acc), "=&x"(t) : "x"(a), "x"(w));
    return acc;
}

/* Four attention scores from their FMA lanes (a0..a3: one (query, key) pair each, lane d % 8 of
 * cpu_dot_f32's chains), each reduced ((0+1)+(2+3))+((4+5)+(6+7)) and times scale, as
 * cpu_dot_f32(q, k) * scale: lanes (0+1), (2+3) of each pair, then their sum, per 128-bit half;
 * then the halves (each sum has the scalar tree's two operands: addition commutes). Shared by the
 * per-head (cpu_dot_avx2.c) and batched (cpu_gemm_avx2.c) attention. */
static inline __attribute__((always_inline)) __m128
avx2_scores_reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3, float scale)
{
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    const __m128 sum = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    return _mm_mul_ps(sum, _mm_set1_ps(scale));
}

#endif
