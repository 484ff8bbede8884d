/* cpu_gemm_avx2.c — the prompt GEMM's kernels (cpu_gemm.h) for CPUs with AVX2 but not AVX-512,
 * compiled with -mavx2 -mfma -mf16c on this file only (CMakeLists.txt); cpu_gemm_supported()
 * admits them only on a CPU that has those.
 *
 * The packed activations are cpu_gemm_pack()'s, the same as the AVX-512 kernels read: per weight
 * block, 16 tokens' int16 pairs side by side, here as two registers of eight tokens. A tile is
 * CPU_GEMM_ROWS weight rows x up to CPU_GEMM_TOKVEC groups of 16 tokens. Per weight block the
 * tile's rows are unpacked once into struct wblk (int16 values pre-multiplied by their sub-block
 * scales, as int32 pairs: cpu_avx2_blocks.h, the dot kernels' unpacking), then for each group and
 * each pair k the group's two activation registers meet a broadcast weight pair in vpmaddwd,
 * added into 8 int32 accumulators (4 rows x 16 tokens) — no horizontal sum, and each unpacked
 * block serves up to 64 tokens. The block's float step then runs lane-wise, eight tokens at a
 * time, with the same operations in the same order as the portable kernel's scalar one, so every
 * result equals cpu_dot_rows()'s bit for bit (tests/test_cpu.c). Start reading:
 * cpu_gemm_avx2_rows().
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_dot.h"
#include "cpu_gemm.h"
#include "quant.h"

#if defined(GATE_CPU_AVX2) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "cpu_avx2_blocks.h"

#define R CPU_GEMM_ROWS
#define TOKVEC CPU_GEMM_TOKVEC
#define INLINE static inline __attribute__((always_inline))

/* One weight row's block, unpacked: int16 values x sub-block scale as int32 pairs (128 for the
 * K-quants, 16 for Q8_0), the min pairs (256 m_j, m_j) of Q4_K / Q5_K, and the fp16 scales. */
struct wblk {
    _Alignas(32) int32_t q[128];
    int32_t mn[8];
    float d, dmin;
};

/* kind 0 Q4_K, 1 Q5_K, 2 Q6_K, 3 Q8_0: block i of row into *o */
INLINE void unpack(const int kind, const uint8_t *row, int64_t i, struct wblk *o)
{
    __m256i W[16];
    if (kind == 3) {
        const struct block_q8_0 *x = (const struct block_q8_0 *)row + i;
        o->d = FP16(x->d);
        _mm256_store_si256((__m256i *)o->q,
                           _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->qs)));
        _mm256_store_si256((__m256i *)(o->q + 8),
                           _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(x->qs + 16))));
        return;
    }
    if (kind == 2) {
        avx2_q6_K_unpack(row, i, W, &o->d);
        o->dmin = 0.0f;
    } else {
        __m256i mins;
        avx2_q45_K_unpack(row, kind, i, W, &mins, &o->d, &o->dmin);
        /* min m_j as the int16 pair (256 m_j, m_j): against the packed (s >> 8, s & 255) the
         * pair sum is m_j s exactly */
        _mm256_storeu_si256((__m256i *)o->mn, _mm256_or_si256(_mm256_slli_epi32(mins, 8),
                                                              _mm256_slli_epi32(mins, 16)));
    }
    for (int g = 0; g < 16; g++)
        _mm256_store_si256((__m256i *)(o->q + 8 * g), W[g]);
}

/* s[r][h] (eight tokens 8 h ..) += the int32 sums of the tile's rows (wb) against one packed
 * group's pairs qs[0 .. np) */
INLINE void block_sums(const int np, const int32_t (*qs)[CPU_GEMM_LANES], const struct wblk *wb,
                       __m256i s[R][2])
{
    for (int r = 0; r < R; r++)
        s[r][0] = s[r][1] = _mm256_setzero_si256();
    for (int k = 0; k < np; k++) {
        const __m256i a0 = _mm256_load_si256((const __m256i *)qs[k]);
        const __m256i a1 = _mm256_load_si256((const __m256i *)(qs[k] + 8));
        for (int r = 0; r < R; r++) {
            const __m256i w = _mm256_set1_epi32(wb[r].q[k]);
            s[r][0] = madd_acc(s[r][0], a0, w);
            s[r][1] = madd_acc(s[r][1], a1, w);
        }
    }
}

/* The K-quant tile (kind 0 Q4_K, 1 Q5_K, 2 Q6_K): rows[R] against TV groups starting at packed
 * group pk (nb blocks per group); acc[r][v] (16 lanes) = the portable kernel's acc of row r,
 * the tokens of group v. */
INLINE void tile_k(const int kind, const int TV, const uint8_t *const *rows,
                   const struct gemm_pack_k *pk, int64_t nb, float acc[R][TOKVEC][16])
{
    for (int r = 0; r < R; r++)
        for (int v = 0; v < TV; v++)
            for (int h = 0; h < 2; h++)
                _mm256_store_ps(acc[r][v] + 8 * h, _mm256_setzero_ps());
    /* double-buffered: block i + 1 is unpacked before block i's sums, so its stores have reached
     * L1 before the broadcasts read them */
    struct wblk wbuf[2][R];
    for (int r = 0; r < R; r++)
        unpack(kind, rows[r], 0, &wbuf[0][r]);
    for (int64_t i = 0; i < nb; i++) {
        const struct wblk *wb = wbuf[i & 1];
        if (i + 1 < nb)
            for (int r = 0; r < R; r++)
                unpack(kind, rows[r], i + 1, &wbuf[(i + 1) & 1][r]);
        for (int v = 0; v < TV; v++) {
            const struct gemm_pack_k *b = pk + (size_t)v * (size_t)nb + (size_t)i;
            __m256i s[R][2];
            block_sums(128, b->qs, wb, s);
            /* the block's float step per lane: acc += (d yd) isum - (dmin yd) imin */
            for (int h = 0; h < 2; h++) {
                const __m256 yd = _mm256_load_ps(b->d + 8 * h);
                for (int r = 0; r < R; r++) {
                    __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(wb[r].d), yd),
                                             _mm256_cvtepi32_ps(s[r][h]));
                    if (kind != 2) {
                        __m256i im = _mm256_setzero_si256();
                        for (int j = 0; j < 8; j++)
                            im = _mm256_add_epi32(
                                im, _mm256_madd_epi16(
                                        _mm256_load_si256((const __m256i *)(b->mn[j] + 8 * h)),
                                        _mm256_set1_epi32(wb[r].mn[j])));
                        t = _mm256_sub_ps(
                            t, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(wb[r].dmin), yd),
                                             _mm256_cvtepi32_ps(im)));
                    }
                    float *a = acc[r][v] + 8 * h;
                    _mm256_store_ps(a, _mm256_add_ps(_mm256_load_ps(a), t));
                }
            }
        }
    }
}

/* The Q8_0 tile: block i adds into partial i % 4; acc = 0 + ((p0 + p1) + (p2 + p3)). */
INLINE void tile_q8(const int TV, const uint8_t *const *rows, const struct gemm_pack_32 *pk,
                    int64_t nb, float acc[R][TOKVEC][16])
{
    _Alignas(32) float p[4][R][TOKVEC][16];
    memset(p, 0, sizeof p);
    struct wblk wbuf[2][R]; /* double-buffered as in tile_k */
    for (int r = 0; r < R; r++)
        unpack(3, rows[r], 0, &wbuf[0][r]);
    for (int64_t i = 0; i < nb; i++) {
        const struct wblk *wb = wbuf[i & 1];
        if (i + 1 < nb)
            for (int r = 0; r < R; r++)
                unpack(3, rows[r], i + 1, &wbuf[(i + 1) & 1][r]);
        for (int v = 0; v < TV; v++) {
            const struct gemm_pack_32 *b = pk + (size_t)v * (size_t)nb + (size_t)i;
            __m256i s[R][2];
            block_sums(16, b->qs, wb, s);
            for (int h = 0; h < 2; h++) {
                const __m256 yd = _mm256_load_ps(b->d + 8 * h);
                for (int r = 0; r < R; r++) {
                    const __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(wb[r].d), yd),
                                                   _mm256_cvtepi32_ps(s[r][h]));
                    float *a = p[i & 3][r][v] + 8 * h;
                    _mm256_store_ps(a, _mm256_add_ps(_mm256_load_ps(a), t));
                }
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < TV; v++)
            for (int h = 0; h < 2; h++) {
                const int o = 8 * h;
                const __m256 s01 =
                    _mm256_add_ps(_mm256_load_ps(p[0][r][v] + o), _mm256_load_ps(p[1][r][v] + o));
                const __m256 s23 =
                    _mm256_add_ps(_mm256_load_ps(p[2][r][v] + o), _mm256_load_ps(p[3][r][v] + o));
                _mm256_store_ps(acc[r][v] + o,
                                _mm256_add_ps(_mm256_setzero_ps(), _mm256_add_ps(s01, s23)));
            }
}

/* acc[0..3][v] (4 rows x 16 tokens) transposed: token l's four rows stored together at
 * out + l * os (one store per token instead of four) */
static inline void store_4x16(float acc[R][TOKVEC][16], int v, float *out, size_t os)
{
    for (int h = 0; h < 2; h++) {
        const int o = 8 * h;
        const __m256 a0 = _mm256_load_ps(acc[0][v] + o), a1 = _mm256_load_ps(acc[1][v] + o);
        const __m256 a2 = _mm256_load_ps(acc[2][v] + o), a3 = _mm256_load_ps(acc[3][v] + o);
        const __m256 t0 = _mm256_unpacklo_ps(a0, a1), t1 = _mm256_unpackhi_ps(a0, a1);
        const __m256 t2 = _mm256_unpacklo_ps(a2, a3), t3 = _mm256_unpackhi_ps(a2, a3);
        /* u[k], 128-bit half j: token o + 4 j + k, rows 0..3 */
        const __m256 u[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xee),
                             _mm256_shuffle_ps(t1, t3, 0x44), _mm256_shuffle_ps(t1, t3, 0xee)};
        for (int k = 0; k < 4; k++) {
            _mm_storeu_ps(out + (size_t)(o + k) * os, _mm256_castps256_ps128(u[k]));
            _mm_storeu_ps(out + (size_t)(o + 4 + k) * os, _mm256_extractf128_ps(u[k], 1));
        }
    }
}

#define CPU_GEMM_ROWS_NAME cpu_gemm_avx2_rows
#include "cpu_gemm_impl.h"

/* ---- attention over the prompt --------------------------------------------------------------
 * cpu_gemm_attn() for up to 16 consecutive queries of one head, in blocks of four queries: each
 * key and value row is read once per four queries instead of once per query. A score keeps
 * cpu_dot_f32()'s eight lanes (partial d % 8, one FMA chain per (query, key) pair) and its
 * reduction ((0+1)+(2+3))+((4+5)+(6+7)), done for four pairs at once with two horizontal adds;
 * softmax with libm expf in key order; each output fmaf(pw, v[d], out[d]) in key order over the
 * query's own keys — so every output equals cpu_attn_head()'s bit for bit (tests/test_cpu.c). */

/* scores of four queries (rows q4[0..3]) against keys k0 and k1: lanes i0 .. i0 + 3 of the key
 * rows s0 and s1 (16 floats each) */
INLINE void scores_4x2(const float *const *q4, const float *k0, const float *k1, int hd,
                       float scale, float *s0, float *s1)
{
    __m256 A[4], B[4];
    for (int i = 0; i < 4; i++)
        A[i] = B[i] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
        const __m256 kv0 = _mm256_loadu_ps(k0 + d), kv1 = _mm256_loadu_ps(k1 + d);
        for (int i = 0; i < 4; i++) {
            const __m256 qv = _mm256_loadu_ps(q4[i] + d);
            A[i] = _mm256_fmadd_ps(qv, kv0, A[i]);
            B[i] = _mm256_fmadd_ps(qv, kv1, B[i]);
        }
    }
    _mm_storeu_ps(s0, avx2_scores_reduce4(A[0], A[1], A[2], A[3], scale));
    _mm_storeu_ps(s1, avx2_scores_reduce4(B[0], B[1], B[2], B[3], scale));
}

/* out of four queries (pw: their weights, lanes of the key rows of s; o4: their output rows), dims
 * d0 .. d0 + 15: keys 0 .. last4[0] for all four, then key p for query i while p <= last4[i] */
INLINE void weigh_4x16(const float *s, int i0, const int *last4, const float *v, size_t kvs,
                       float *const *o4)
{
    __m256 acc[4][2];
    for (int i = 0; i < 4; i++)
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    int p = 0;
    for (; p <= last4[0]; p++, v += kvs) {
        const __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8);
        for (int i = 0; i < 4; i++) {
            const __m256 pw = _mm256_set1_ps(s[16 * p + i0 + i]);
            acc[i][0] = _mm256_fmadd_ps(pw, v0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(pw, v1, acc[i][1]);
        }
    }
    for (; p <= last4[3]; p++, v += kvs) {
        const __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8);
        for (int i = 1; i < 4; i++)
            if (p <= last4[i]) {
                const __m256 pw = _mm256_set1_ps(s[16 * p + i0 + i]);
                acc[i][0] = _mm256_fmadd_ps(pw, v0, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(pw, v1, acc[i][1]);
            }
    }
    for (int i = 0; i < 4; i++)
        if (o4[i]) {
            _mm256_storeu_ps(o4[i], acc[i][0]);
            _mm256_storeu_ps(o4[i] + 8, acc[i][1]);
        }
}

void cpu_gemm_avx2_attn(const float *q, size_t q_stride, int n_q, int pos0, const float *kc,
                        const float *vc, size_t kvs, int hd, float scale, float *s, float *out,
                        size_t out_stride)
{
    _Alignas(32) float junk[16];
    for (int i0 = 0; i0 < n_q; i0 += 4) {
        const float *q4[4]; /* a short last block repeats its last query (its lanes unused) */
        for (int i = 0; i < 4; i++)
            q4[i] = q + (size_t)(i0 + i < n_q ? i0 + i : n_q - 1) * q_stride;
        const int keys = pos0 + (i0 + 4 < n_q ? i0 + 4 : n_q); /* the block's last query's */
        int p = 0;
        for (; p + 2 <= keys; p += 2)
            scores_4x2(q4, kc + (size_t)p * kvs, kc + (size_t)(p + 1) * kvs, hd, scale,
                       s + 16 * p + i0, s + 16 * (p + 1) + i0);
        if (p < keys) /* the odd last key: its pair's second half is the same key, discarded */
            scores_4x2(q4, kc + (size_t)p * kvs, kc + (size_t)p * kvs, hd, scale, s + 16 * p + i0,
                       junk);
    }
    /* softmax per query over its own keys, in key order; then each weight e / sum as
     * cpu_attn_head forms it (s[p] * inv), in place */
    for (int i = 0; i < n_q; i++) {
        const int last = pos0 + i;
        float max = -INFINITY;
        for (int k = 0; k <= last; k++)
            max = s[16 * k + i] > max ? s[16 * k + i] : max;
        float sum = 0.0f;
        for (int k = 0; k <= last; k++) {
            const float e = expf(s[16 * k + i] - max);
            s[16 * k + i] = e;
            sum += e;
        }
        const float inv = 1.0f / sum;
        for (int k = 0; k <= last; k++)
            s[16 * k + i] = s[16 * k + i] * inv;
    }
    for (int i0 = 0; i0 < n_q; i0 += 4) {
        int last4[4];
        float *o4[4];
        for (int i = 0; i < 4; i++) {
            const int live = i0 + i < n_q;
            last4[i] = pos0 + (live ? i0 + i : n_q - 1);
            o4[i] = live ? out + (size_t)(i0 + i) * out_stride : NULL;
        }
        for (int d0 = 0; d0 < hd; d0 += 16) {
            float *od[4];
            for (int i = 0; i < 4; i++)
                od[i] = o4[i] ? o4[i] + d0 : NULL;
            weigh_4x16(s, i0, last4, vc + d0, kvs, od);
        }
    }
}
#else
void cpu_gemm_avx2_rows(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                        const void *packed, int n_tok, int64_t n, float *out, size_t os)
{
    (void)type, (void)w, (void)row_bytes, (void)r0, (void)r1, (void)packed, (void)n_tok;
    (void)n, (void)out, (void)os;
    abort(); /* broken invariant: cpu_gemm_supported() is 0 in this build */
}

void cpu_gemm_avx2_attn(const float *q, size_t q_stride, int n_q, int pos0, const float *kc,
                        const float *vc, size_t kvs, int hd, float scale, float *s, float *out,
                        size_t out_stride)
{
    (void)q, (void)q_stride, (void)n_q, (void)pos0, (void)kc, (void)vc, (void)kvs, (void)hd;
    (void)scale, (void)s, (void)out, (void)out_stride;
    abort(); /* broken invariant: cpu_gemm_attn_supported() is 0 in this build */
}
#endif
