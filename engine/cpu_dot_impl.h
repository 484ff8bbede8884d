/* cpu_dot_impl.h — the cpu engine's dot kernels, written once and compiled twice: by cpu_dot.c
 * (portable C) and cpu_dot_avx2.c (-mavx2 -mfma -mf16c). Not a header to include elsewhere.
 *
 * The includer defines CPU_DOT_NAME(x) (a suffix per build). Every kernel keeps the shape
 * contract of cpu_dot_rows() (cpu_dot.h): per weight block it unpacks the block once into int16
 * values and integer scales, then for each token forms the block's exact integer sums and adds one
 * float expression to that token's accumulator, blocks in index order. The loops are written so
 * the compiler vectorizes the integer sums (exact: any order gives the same int32), and every
 * float operation is spelled out in the source, so both builds round identically.
 * Start reading: CPU_DOT_NAME(rows).
 */
#ifndef CPU_DOT_NAME
#error "cpu_dot_impl.h is included by cpu_dot.c and cpu_dot_avx2.c only"
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* sum of w[i] * a[i] over 32 / 16 pairs (weights int16-widened, activations int16): exact in
 * int32 (|w| <= 128, |a| <= CPU_ACT_QMAX) */
static inline int32_t CPU_DOT_NAME(isum32)(const int16_t *restrict w, const int16_t *restrict a)
{
    int32_t s = 0;
    for (int l = 0; l < 32; l++)
        s += (int32_t)w[l] * (int32_t)a[l];
    return s;
}

static inline int32_t CPU_DOT_NAME(isum16)(const int16_t *restrict w, const int16_t *restrict a)
{
    int32_t s = 0;
    for (int l = 0; l < 16; l++)
        s += (int32_t)w[l] * (int32_t)a[l];
    return s;
}

#define ACT32(t, i) ((const struct cpu_q16_32 *)(act + (size_t)(t)*as) + (i))
#define ACTK(t, i) ((const struct cpu_q16_K *)(act + (size_t)(t)*as) + (i))

/* Q8_0: four partial sums (block i into i % 4), so the float additions of consecutive 32-blocks
 * do not form one dependent chain; every build keeps this order. */
static inline void CPU_DOT_NAME(q8_0)(const void *w, const uint8_t *act, size_t as, int nt,
                                      int64_t nb, float *acc)
{
    const struct block_q8_0 *x = w;
    int16_t q[32];
    float p[CPU_DOT_MAX_TOK][4] = {{0}}; /* block i adds into partial i % 4 */
    for (int64_t i = 0; i < nb; i++) {
        const float dw = quant_fp16_to_f32_inline(x[i].d);
        for (int l = 0; l < 32; l++)
            q[l] = x[i].qs[l];
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_32 *y = ACT32(t, i);
            p[t][i & 3] += (dw * y->d) * (float)CPU_DOT_NAME(isum32)(q, y->qs);
        }
    }
    for (int t = 0; t < nt; t++)
        acc[t] += (p[t][0] + p[t][1]) + (p[t][2] + p[t][3]);
}

static inline void CPU_DOT_NAME(q4_0)(const void *w, const uint8_t *act, size_t as, int nt,
                                      int64_t nb, float *acc)
{
    const struct block_q4_0 *x = w;
    int16_t q[32];
    for (int64_t i = 0; i < nb; i++) {
        const float dw = quant_fp16_to_f32_inline(x[i].d);
        for (int l = 0; l < 16; l++) {
            q[l] = (int16_t)((x[i].qs[l] & 0x0f) - 8);
            q[l + 16] = (int16_t)((x[i].qs[l] >> 4) - 8);
        }
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_32 *y = ACT32(t, i);
            acc[t] += (dw * y->d) * (float)CPU_DOT_NAME(isum32)(q, y->qs);
        }
    }
}

static inline void CPU_DOT_NAME(q4_1)(const void *w, const uint8_t *act, size_t as, int nt,
                                      int64_t nb, float *acc)
{
    const struct block_q4_1 *x = w;
    int16_t q[32];
    for (int64_t i = 0; i < nb; i++) {
        const float dw = quant_fp16_to_f32_inline(x[i].d);
        const float mw = quant_fp16_to_f32_inline(x[i].m);
        for (int l = 0; l < 16; l++) {
            q[l] = (int16_t)(x[i].qs[l] & 0x0f);
            q[l + 16] = (int16_t)(x[i].qs[l] >> 4);
        }
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_32 *y = ACT32(t, i);
            acc[t] += (dw * y->d) * (float)CPU_DOT_NAME(isum32)(q, y->qs) + mw * y->s;
        }
    }
}

static inline void CPU_DOT_NAME(q5_0)(const void *w, const uint8_t *act, size_t as, int nt,
                                      int64_t nb, float *acc)
{
    const struct block_q5_0 *x = w;
    int16_t q[32];
    for (int64_t i = 0; i < nb; i++) {
        const float dw = quant_fp16_to_f32_inline(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int l = 0; l < 16; l++) {
            const int h0 = (int)((qh >> l) << 4) & 0x10, h1 = (int)(qh >> (l + 12)) & 0x10;
            q[l] = (int16_t)(((x[i].qs[l] & 0x0f) | h0) - 16);
            q[l + 16] = (int16_t)(((x[i].qs[l] >> 4) | h1) - 16);
        }
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_32 *y = ACT32(t, i);
            acc[t] += (dw * y->d) * (float)CPU_DOT_NAME(isum32)(q, y->qs);
        }
    }
}

static inline void CPU_DOT_NAME(q5_1)(const void *w, const uint8_t *act, size_t as, int nt,
                                      int64_t nb, float *acc)
{
    const struct block_q5_1 *x = w;
    int16_t q[32];
    for (int64_t i = 0; i < nb; i++) {
        const float dw = quant_fp16_to_f32_inline(x[i].d);
        const float mw = quant_fp16_to_f32_inline(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int l = 0; l < 16; l++) {
            const int h0 = (int)((qh >> l) << 4) & 0x10, h1 = (int)(qh >> (l + 12)) & 0x10;
            q[l] = (int16_t)((x[i].qs[l] & 0x0f) | h0);
            q[l + 16] = (int16_t)((x[i].qs[l] >> 4) | h1);
        }
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_32 *y = ACT32(t, i);
            acc[t] += (dw * y->d) * (float)CPU_DOT_NAME(isum32)(q, y->qs) + mw * y->s;
        }
    }
}

/* Q4_K / Q5_K: value = d * sc_j * q - dmin * m_j on sub-block j (32 elements), so against a
 * Q16_K activation block: d*yd * sum_j sc_j (q . y)_j - dmin*yd * sum_j m_j (sum of y)_j. */
static inline void CPU_DOT_NAME(q45_K)(const void *w, int five, const uint8_t *act, size_t as,
                                       int nt, int64_t nb, float *acc)
{
    int16_t q[256];
    int32_t sc[8], mn[8];
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *scales, *qs, *qh = NULL;
        float d, dmin;
        if (five) {
            const struct block_q5_K *x = (const struct block_q5_K *)w + i;
            scales = x->scales;
            qs = x->qs;
            qh = x->qh;
            d = quant_fp16_to_f32_inline(x->d);
            dmin = quant_fp16_to_f32_inline(x->dmin);
        } else {
            const struct block_q4_K *x = (const struct block_q4_K *)w + i;
            scales = x->scales;
            qs = x->qs;
            d = quant_fp16_to_f32_inline(x->d);
            dmin = quant_fp16_to_f32_inline(x->dmin);
        }
        for (int j = 0; j < 8; j++) {
            uint8_t s, m;
            quant_scale_min_k4_inline(j, scales, &s, &m);
            sc[j] = s;
            mn[j] = m;
        }
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                q[64 * c + l] = (int16_t)(qs[32 * c + l] & 0x0f);
                q[64 * c + 32 + l] = (int16_t)(qs[32 * c + l] >> 4);
            }
        if (five)
            for (int c = 0; c < 4; c++)
                for (int l = 0; l < 32; l++) {
                    q[64 * c + l] = (int16_t)(q[64 * c + l] + (((qh[l] >> (2 * c)) & 1) << 4));
                    q[64 * c + 32 + l] =
                        (int16_t)(q[64 * c + 32 + l] + (((qh[l] >> (2 * c + 1)) & 1) << 4));
                }
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_K *y = ACTK(t, i);
            int32_t isum = 0, imin = 0;
            for (int j = 0; j < 8; j++) {
                isum += sc[j] * CPU_DOT_NAME(isum32)(q + 32 * j, y->qs + 32 * j);
                imin += mn[j] * y->sums[j];
            }
            acc[t] += (d * y->d) * (float)isum - (dmin * y->d) * (float)imin;
        }
    }
}

/* Q6_K: value = d * sc_g * (q - 32) on 16-element group g. */
static inline void CPU_DOT_NAME(q6_K)(const void *w, const uint8_t *act, size_t as, int nt,
                                      int64_t nb, float *acc)
{
    const struct block_q6_K *x = w;
    int16_t q[256];
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_fp16_to_f32_inline(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        for (int h = 0; h < 2; h++) {
            int16_t *o = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                o[l] = (int16_t)(((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32);
                o[l + 32] = (int16_t)(((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32);
                o[l + 64] = (int16_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                o[l + 96] = (int16_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
            ql += 64;
            qh += 32;
        }
        for (int t = 0; t < nt; t++) {
            const struct cpu_q16_K *y = ACTK(t, i);
            int32_t isum = 0;
            for (int g = 0; g < 16; g++)
                isum += x[i].scales[g] * CPU_DOT_NAME(isum16)(q + 16 * g, y->qs + 16 * g);
            acc[t] += (d * y->d) * (float)isum;
        }
    }
}

/* Float weights: eight lanes of fmaf (lane i % 8), the chunk of eight weights converted once and
 * used for every token; reduced ((0+1)+(2+3))+((4+5)+(6+7)). The AVX2 and AVX-512 builds keep the
 * eight lanes in one register (flt_chunks below) for the whole chunks, the tail as here. */
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define CPU_DOT_FLT_SIMD 1
#include <immintrin.h>
/* chunks of eight [0, n) (n a multiple of 8) into lanes[t]: one register per token, the weights
 * converted once per chunk (F16C and the BF16 shift are exact); _mm256_fmadd_ps rounds each lane
 * as fmaf does, so the lanes hold the portable loop's bits */
static inline void CPU_DOT_NAME(flt_chunks)(int type, const void *w, const uint8_t *act, size_t as,
                                            int nt, int64_t n, float lanes[][8])
{
    __m256 L[CPU_DOT_MAX_TOK];
    for (int t = 0; t < nt; t++)
        L[t] = _mm256_loadu_ps(lanes[t]);
    for (int64_t i = 0; i < n; i += 8) {
        __m256 wv;
        if (type == QUANT_F32)
            wv = _mm256_loadu_ps((const float *)w + i);
        else if (type == QUANT_F16)
            wv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
        else
            wv = _mm256_castsi256_ps(_mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i))),
                16));
        for (int t = 0; t < nt; t++)
            L[t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps((const float *)(act + (size_t)t * as) + i),
                                   L[t]);
    }
    for (int t = 0; t < nt; t++)
        _mm256_storeu_ps(lanes[t], L[t]);
}
#endif

static inline void CPU_DOT_NAME(flt)(int type, const void *w, const uint8_t *act, size_t as, int nt,
                                     int64_t n, float *out, size_t os)
{
    float lanes[CPU_DOT_MAX_TOK][8];
    memset(lanes, 0, sizeof lanes);
    float wc[8];
    int64_t i = 0;
#ifdef CPU_DOT_FLT_SIMD
    i = n - n % 8;
    CPU_DOT_NAME(flt_chunks)(type, w, act, as, nt, i, lanes);
#endif
    for (; i < n; i += 8) {
        const int m = n - i < 8 ? (int)(n - i) : 8;
        if (type == QUANT_F32) {
            memcpy(wc, (const float *)w + i, (size_t)m * sizeof(float));
        } else if (type == QUANT_F16) {
            for (int l = 0; l < m; l++)
                wc[l] = quant_fp16_to_f32_inline(((const uint16_t *)w)[i + l]);
        } else { /* BF16: the top half of a float's bits */
            for (int l = 0; l < m; l++) {
                const union {
                    uint32_t u;
                    float f;
                } v = {.u = (uint32_t)((const uint16_t *)w)[i + l] << 16};
                wc[l] = v.f;
            }
        }
        for (int t = 0; t < nt; t++) {
            const float *x = (const float *)(act + (size_t)t * as) + i;
            if (m == 8)
                for (int l = 0; l < 8; l++)
                    lanes[t][l] = fmaf(wc[l], x[l], lanes[t][l]);
            else
                for (int l = 0; l < m; l++)
                    lanes[t][l] = fmaf(wc[l], x[l], lanes[t][l]);
        }
    }
    for (int t = 0; t < nt; t++) {
        const float *L = lanes[t];
        out[(size_t)t * os] = ((L[0] + L[1]) + (L[2] + L[3])) + ((L[4] + L[5]) + (L[6] + L[7]));
    }
}

#ifndef CPU_DOT_Q8_0 /* a build may bring its own kernel with the same integer sums */
#define CPU_DOT_Q8_0 CPU_DOT_NAME(q8_0)
#endif
#ifndef CPU_DOT_Q45_K
#define CPU_DOT_Q45_K CPU_DOT_NAME(q45_K)
#endif
#ifndef CPU_DOT_Q6_K
#define CPU_DOT_Q6_K CPU_DOT_NAME(q6_K)
#endif

/* the F32 kernel's order for one pair of float vectors (decode's attention scores): flt() with
 * one token, a as the weight row */
float CPU_DOT_NAME(f32)(const float *a, const float *b, int64_t n)
{
    float out;
    CPU_DOT_NAME(flt)(QUANT_F32, a, (const uint8_t *)b, 0, 1, n, &out, 1);
    return out;
}

void CPU_DOT_NAME(rows)(int type, const void *w, const void *act_, size_t as, int nt, int64_t n,
                        float *out, size_t os)
{
    const uint8_t *act = act_;
    float acc[CPU_DOT_MAX_TOK] = {0};
    switch (type) {
    case QUANT_F32:
    case QUANT_F16:
    case QUANT_BF16:
        CPU_DOT_NAME(flt)(type, w, act, as, nt, n, out, os);
        return;
    case QUANT_Q8_0:
        CPU_DOT_Q8_0(w, act, as, nt, n / 32, acc);
        break;
    case QUANT_Q4_0:
        CPU_DOT_NAME(q4_0)(w, act, as, nt, n / 32, acc);
        break;
    case QUANT_Q4_1:
        CPU_DOT_NAME(q4_1)(w, act, as, nt, n / 32, acc);
        break;
    case QUANT_Q5_0:
        CPU_DOT_NAME(q5_0)(w, act, as, nt, n / 32, acc);
        break;
    case QUANT_Q5_1:
        CPU_DOT_NAME(q5_1)(w, act, as, nt, n / 32, acc);
        break;
    case QUANT_Q4_K:
        CPU_DOT_Q45_K(w, 0, act, as, nt, n / 256, acc);
        break;
    case QUANT_Q5_K:
        CPU_DOT_Q45_K(w, 1, act, as, nt, n / 256, acc);
        break;
    case QUANT_Q6_K:
        CPU_DOT_Q6_K(w, act, as, nt, n / 256, acc);
        break;
    default:
        abort(); /* broken invariant: cpu_open admits only types cpu_act_kind() knows */
    }
    for (int t = 0; t < nt; t++)
        out[(size_t)t * os] = acc[t];
}

/* One query head over keys 0..n_keys-1 (see cpu_attn_head in cpu_dot.h). */
void CPU_DOT_NAME(attn)(const float *q, const float *kc, const float *vc, size_t stride, int n_keys,
                        int hd, float scale, float *s, float *out)
{
#ifdef CPU_DOT_ATTN_FAST /* a build's own kernel for the shapes it takes: the same numbers */
    if (CPU_DOT_ATTN_FAST(q, kc, vc, stride, n_keys, hd, scale, s, out))
        return;
#endif
    float max = -INFINITY;
    for (int p = 0; p < n_keys; p++) {
        s[p] = CPU_DOT_NAME(f32)(q, kc + (size_t)p * stride, hd) * scale;
        max = s[p] > max ? s[p] : max;
    }
    float sum = 0.0f;
    for (int p = 0; p < n_keys; p++) {
        s[p] = expf(s[p] - max);
        sum += s[p];
    }
    const float inv = 1.0f / sum;
    for (int d = 0; d < hd; d++)
        out[d] = 0.0f;
    for (int p = 0; p < n_keys; p++) {
        const float pw = s[p] * inv;
        const float *v = vc + (size_t)p * stride;
        for (int d = 0; d < hd; d++)
            out[d] = fmaf(pw, v[d], out[d]);
    }
}

/* F32 weights, one token: four rows at a time (four independent FMA chains instead of one),
 * each row's eight lanes, order and reduction exactly flt()'s; returns the rows done */
static inline int CPU_DOT_NAME(f32_x4)(const uint8_t *w, size_t rb, int n_rows,
                                       const float *restrict x, int64_t n, float *out)
{
    int r = 0;
    for (; r + 4 <= n_rows; r += 4) {
        float L[4][8] = {{0}};
        for (int64_t i = 0; i < n; i += 8)
            for (int q = 0; q < 4; q++) {
                const float *wr = (const float *)(w + (size_t)(r + q) * rb) + i;
                for (int l = 0; l < 8; l++)
                    L[q][l] = fmaf(wr[l], x[i + l], L[q][l]);
            }
        for (int q = 0; q < 4; q++)
            out[r + q] = ((L[q][0] + L[q][1]) + (L[q][2] + L[q][3])) +
                         ((L[q][4] + L[q][5]) + (L[q][6] + L[q][7]));
    }
    return r;
}

/* n_rows consecutive weight rows (row_bytes apart) against the same tokens: out + r per row */
void CPU_DOT_NAME(tile)(int type, const uint8_t *w, size_t row_bytes, int n_rows, const void *act,
                        size_t as, int nt, int64_t n, float *out, size_t os)
{
    int r = 0;
#ifdef CPU_DOT_TILE_FAST /* a build's multi-row kernels: the first rows it takes, same numbers */
    r = CPU_DOT_TILE_FAST(type, w, row_bytes, n_rows, act, as, nt, n, out, os);
#endif
    if (r == 0 && type == QUANT_F32 && nt == 1 && n % 8 == 0)
        r = CPU_DOT_NAME(f32_x4)(w, row_bytes, n_rows, act, n, out);
    for (; r < n_rows; r++)
        CPU_DOT_NAME(rows)(type, w + (size_t)r * row_bytes, act, as, nt, n, out + r, os);
}

#undef ACT32
#undef ACTK
