/* cpu_gemm_avx512.c — the prompt GEMM's kernels (cpu_gemm.h), compiled with -mavx512f -mavx512bw
 * -mavx512vl -mavx512vnni -mfma -mf16c on this file only (CMakeLists.txt); cpu_gemm_supported()
 * admits them only on a CPU that has all of those.
 *
 * A tile is CPU_GEMM_ROWS weight rows x up to CPU_GEMM_TOKVEC registers of 16 tokens. Per weight
 * block: the tile's rows are unpacked into struct wblk (int16 values pre-multiplied by their
 * sub-block scales, as int32 pairs; the unpacking is cpu_dot_avx512.c's, written again here),
 * then for each pair k one register of packed activations per token group meets a broadcast
 * weight pair in vpdpwssd: 16 int32 accumulators, each sixteen (row, token) exact block sums.
 * The block's float step then runs lane-wise with the same operations in the same order as the
 * portable kernel's scalar one. Start reading: cpu_gemm_avx512_rows().
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_dot.h"
#include "cpu_gemm.h"
#include "quant.h"

#if defined(GATE_CPU_AVX2) && defined(__AVX512F__) && defined(__AVX512BW__) &&                     \
    defined(__AVX512VNNI__) && defined(__AVX512VL__)
#include <immintrin.h>

#define FP16(h) _cvtsh_ss(h) /* exact, the same value as quant_fp16_to_f32_inline */
#define R CPU_GEMM_ROWS
#define INLINE static inline __attribute__((always_inline))

/* acc += a . w pairwise (vpdpwssd). As an asm statement with the accumulator tied to its
 * register: GCC's allocation of the intrinsic in this loop moved every accumulator between two
 * registers on each step (and spilled one), about half the loop's instructions. */
INLINE __m512i dpw(__m512i acc, __m512i a, __m512i w)
{
    __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(w));
    return acc;
}

/* One weight row's block, unpacked: int16 values x sub-block scale as int32 pairs (128 for the
 * K-quants, 16 for Q8_0), the min pairs (256 m_j, m_j) of Q4_K / Q5_K, and the fp16 scales. */
struct wblk {
    _Alignas(64) int32_t q[128];
    int32_t mn[8];
    float d, dmin;
};

INLINE void unpack_q45(const uint8_t *row, int five, int64_t i, struct wblk *o)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    const uint8_t *scales, *qs, *qhp = NULL;
    if (five) {
        const struct block_q5_K *x = (const struct block_q5_K *)row + i;
        scales = x->scales, qs = x->qs, qhp = x->qh;
        o->d = FP16(x->d), o->dmin = FP16(x->dmin);
    } else {
        const struct block_q4_K *x = (const struct block_q4_K *)row + i;
        scales = x->scales, qs = x->qs;
        o->d = FP16(x->d), o->dmin = FP16(x->dmin);
    }
    /* the twelve scale bytes as three words: sub-block scales and mins, six bits each */
    uint32_t u[3], sc4[2], mn4[2];
    memcpy(u, scales, 12);
    sc4[0] = u[0] & 0x3f3f3f3fu;
    mn4[0] = u[1] & 0x3f3f3f3fu;
    sc4[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    mn4[1] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    uint8_t sc[8], mn[8];
    memcpy(sc, sc4, 8);
    memcpy(mn, mn4, 8);
    for (int j = 0; j < 8; j++)
        o->mn[j] = (int32_t)((uint32_t)(256u * mn[j]) | ((uint32_t)mn[j] << 16));
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
        _mm512_store_si512(
            (void *)(o->q + 32 * c),
            _mm512_mullo_epi16(_mm512_cvtepi8_epi16(lo), _mm512_set1_epi16((short)sc[2 * c])));
        _mm512_store_si512(
            (void *)(o->q + 32 * c + 16),
            _mm512_mullo_epi16(_mm512_cvtepi8_epi16(hi), _mm512_set1_epi16((short)sc[2 * c + 1])));
    }
}

INLINE void unpack_q6(const uint8_t *row, int64_t i, struct wblk *o)
{
    const struct block_q6_K *x = (const struct block_q6_K *)row + i;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3);
    const __m256i m32 = _mm256_set1_epi8(32);
    o->d = FP16(x->d);
    o->dmin = 0.0f;
    /* the 16 group scales as int16 in the low half of a register */
    const __m512i scv =
        _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales)));
    for (int h = 0; h < 2; h++) {
        const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
        const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
        const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4);
        const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4);
        const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4);
        const __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4);
        const __m256i qk[4] = {
            _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(ql0, m4), h0), m32),
            _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(ql1, m4), h1), m32),
            _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), h2),
                            m32),
            _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), h3),
                            m32),
        };
        /* 32 values k of half h cover groups 8h + 2k and 8h + 2k + 1 */
        for (int k = 0; k < 4; k++) {
            const __m512i idx = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_set1_epi16((short)(8 * h + 2 * k))),
                _mm256_set1_epi16((short)(8 * h + 2 * k + 1)), 1);
            _mm512_store_si512((void *)(o->q + 64 * h + 16 * k),
                               _mm512_mullo_epi16(_mm512_cvtepi8_epi16(qk[k]),
                                                  _mm512_permutexvar_epi16(idx, scv)));
        }
    }
}

INLINE void unpack_q8(const uint8_t *row, int64_t i, struct wblk *o)
{
    const struct block_q8_0 *x = (const struct block_q8_0 *)row + i;
    o->d = FP16(x->d);
    _mm512_store_si512((void *)o->q,
                       _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)x->qs)));
}

/* The K-quant tile: rows[R] against TV token registers starting at packed group pk (nb blocks
 * per group); acc[r][v] (16 lanes) = the portable kernel's acc of row r, tokens of group v.
 * kind 0 Q4_K, 1 Q5_K, 2 Q6_K. */
INLINE void tile_k(const int kind, const int TV, const uint8_t *const *rows,
                   const struct gemm_pack_k *pk, int64_t nb, float acc[R][CPU_GEMM_TOKVEC][16])
{
    /* the float sums stay in acc (L1) between blocks: 16 integer accumulators, 4 activation
     * registers and a broadcast weight fill the register file during the k loop */
    for (int r = 0; r < R; r++)
        for (int v = 0; v < TV; v++)
            _mm512_store_ps(acc[r][v], _mm512_setzero_ps());
    /* double-buffered: block i + 1 is unpacked before block i's k loop, so its stores have
     * reached L1 before the broadcasts read them */
    struct wblk wbuf[2][R];
    for (int r = 0; r < R; r++) {
        if (kind == 2)
            unpack_q6(rows[r], 0, &wbuf[0][r]);
        else
            unpack_q45(rows[r], kind, 0, &wbuf[0][r]);
    }
    for (int64_t i = 0; i < nb; i++) {
        const struct wblk *wb = wbuf[i & 1];
        if (i + 1 < nb)
            for (int r = 0; r < R; r++) {
                if (kind == 2)
                    unpack_q6(rows[r], i + 1, &wbuf[(i + 1) & 1][r]);
                else
                    unpack_q45(rows[r], kind, i + 1, &wbuf[(i + 1) & 1][r]);
            }
        const struct gemm_pack_k *b[CPU_GEMM_TOKVEC];
        for (int v = 0; v < TV; v++)
            b[v] = pk + (size_t)v * (size_t)nb + (size_t)i;
        __m512i s[R][CPU_GEMM_TOKVEC];
        for (int r = 0; r < R; r++)
            for (int v = 0; v < TV; v++)
                s[r][v] = _mm512_setzero_si512();
        for (int k = 0; k < 128; k++) {
            __m512i a[CPU_GEMM_TOKVEC];
            for (int v = 0; v < TV; v++)
                a[v] = _mm512_load_si512((const void *)b[v]->qs[k]);
            for (int r = 0; r < R; r++) {
                const __m512i w = _mm512_set1_epi32(wb[r].q[k]);
                for (int v = 0; v < TV; v++)
                    s[r][v] = dpw(s[r][v], a[v], w);
            }
        }
        /* the block's float step per lane: acc += (d yd) isum - (dmin yd) imin */
        for (int v = 0; v < TV; v++) {
            const __m512 yd = _mm512_load_ps(b[v]->d);
            for (int r = 0; r < R; r++) {
                __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(wb[r].d), yd),
                                         _mm512_cvtepi32_ps(s[r][v]));
                if (kind != 2) {
                    __m512i im = _mm512_setzero_si512();
                    for (int j = 0; j < 8; j++)
                        im = _mm512_dpwssd_epi32(im, _mm512_load_si512((const void *)b[v]->mn[j]),
                                                 _mm512_set1_epi32(wb[r].mn[j]));
                    t = _mm512_sub_ps(t,
                                      _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(wb[r].dmin), yd),
                                                    _mm512_cvtepi32_ps(im)));
                }
                _mm512_store_ps(acc[r][v], _mm512_add_ps(_mm512_load_ps(acc[r][v]), t));
            }
        }
    }
}

/* The Q8_0 tile: block i adds into partial i % 4; acc = 0 + ((p0 + p1) + (p2 + p3)). */
INLINE void tile_q8(const int TV, const uint8_t *const *rows, const struct gemm_pack_32 *pk,
                    int64_t nb, float acc[R][CPU_GEMM_TOKVEC][16])
{
    _Alignas(64) float p[4][R][CPU_GEMM_TOKVEC][16];
    for (int k = 0; k < 4; k++)
        for (int r = 0; r < R; r++)
            for (int v = 0; v < TV; v++)
                _mm512_store_ps(p[k][r][v], _mm512_setzero_ps());
    struct wblk wbuf[2][R]; /* double-buffered as in tile_k */
    for (int r = 0; r < R; r++)
        unpack_q8(rows[r], 0, &wbuf[0][r]);
    for (int64_t i = 0; i < nb; i++) {
        const struct wblk *wb = wbuf[i & 1];
        if (i + 1 < nb)
            for (int r = 0; r < R; r++)
                unpack_q8(rows[r], i + 1, &wbuf[(i + 1) & 1][r]);
        const struct gemm_pack_32 *b[CPU_GEMM_TOKVEC];
        for (int v = 0; v < TV; v++)
            b[v] = pk + (size_t)v * (size_t)nb + (size_t)i;
        __m512i s[R][CPU_GEMM_TOKVEC];
        for (int r = 0; r < R; r++)
            for (int v = 0; v < TV; v++)
                s[r][v] = _mm512_setzero_si512();
        for (int k = 0; k < 16; k++) {
            __m512i a[CPU_GEMM_TOKVEC];
            for (int v = 0; v < TV; v++)
                a[v] = _mm512_load_si512((const void *)b[v]->qs[k]);
            for (int r = 0; r < R; r++) {
                const __m512i w = _mm512_set1_epi32(wb[r].q[k]);
                for (int v = 0; v < TV; v++)
                    s[r][v] = dpw(s[r][v], a[v], w);
            }
        }
        float(*pi)[CPU_GEMM_TOKVEC][16] = p[i & 3];
        for (int v = 0; v < TV; v++) {
            const __m512 yd = _mm512_load_ps(b[v]->d);
            for (int r = 0; r < R; r++) {
                const __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(wb[r].d), yd),
                                               _mm512_cvtepi32_ps(s[r][v]));
                _mm512_store_ps(pi[r][v], _mm512_add_ps(_mm512_load_ps(pi[r][v]), t));
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < TV; v++) {
            const __m512 s01 =
                _mm512_add_ps(_mm512_load_ps(p[0][r][v]), _mm512_load_ps(p[1][r][v]));
            const __m512 s23 =
                _mm512_add_ps(_mm512_load_ps(p[2][r][v]), _mm512_load_ps(p[3][r][v]));
            _mm512_store_ps(acc[r][v], _mm512_add_ps(_mm512_setzero_ps(), _mm512_add_ps(s01, s23)));
        }
}

/* acc[0..3][v] (4 rows x 16 tokens) transposed into 16 stores of 4 floats: token l's four rows
 * at out + l * os (one store per token instead of four) */
static inline void store_4x16(float acc[R][CPU_GEMM_TOKVEC][16], int v, float *out, size_t os)
{
    const __m512 a0 = _mm512_load_ps(acc[0][v]), a1 = _mm512_load_ps(acc[1][v]);
    const __m512 a2 = _mm512_load_ps(acc[2][v]), a3 = _mm512_load_ps(acc[3][v]);
    const __m512 t0 = _mm512_unpacklo_ps(a0, a1), t1 = _mm512_unpackhi_ps(a0, a1);
    const __m512 t2 = _mm512_unpacklo_ps(a2, a3), t3 = _mm512_unpackhi_ps(a2, a3);
    /* u[k], 128-bit lane j: token 4j + k, rows 0..3 */
    const __m512 u[4] = {_mm512_shuffle_ps(t0, t2, 0x44), _mm512_shuffle_ps(t0, t2, 0xee),
                         _mm512_shuffle_ps(t1, t3, 0x44), _mm512_shuffle_ps(t1, t3, 0xee)};
    for (int k = 0; k < 4; k++) {
        _mm_storeu_ps(out + (size_t)k * os, _mm512_extractf32x4_ps(u[k], 0));
        _mm_storeu_ps(out + (size_t)(4 + k) * os, _mm512_extractf32x4_ps(u[k], 1));
        _mm_storeu_ps(out + (size_t)(8 + k) * os, _mm512_extractf32x4_ps(u[k], 2));
        _mm_storeu_ps(out + (size_t)(12 + k) * os, _mm512_extractf32x4_ps(u[k], 3));
    }
}

#define CPU_GEMM_ROWS_NAME cpu_gemm_avx512_rows
#include "cpu_gemm_impl.h"

/* ---- attention ------------------------------------------------------------------------------ */

/* scores of keys k0 and k1 for the 16 queries of qt (hd x 16, transposed): s0, s1 (16 lanes) =
 * cpu_dot_f32(query, key) * scale per lane, cpu_dot_f32's order (partial d % 8, fixed tree) */
static inline void scores2(const float (*qt)[16], const float *k0, const float *k1, int hd,
                           __m512 scale, float *s0, float *s1)
{
    __m512 A[8], B[8];
    for (int l = 0; l < 8; l++)
        A[l] = B[l] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 8)
        for (int l = 0; l < 8; l++) {
            const __m512 qv = _mm512_load_ps(qt[d + l]);
            A[l] = _mm512_fmadd_ps(qv, _mm512_set1_ps(k0[d + l]), A[l]);
            B[l] = _mm512_fmadd_ps(qv, _mm512_set1_ps(k1[d + l]), B[l]);
        }
    const __m512 a =
        _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(A[0], A[1]), _mm512_add_ps(A[2], A[3])),
                      _mm512_add_ps(_mm512_add_ps(A[4], A[5]), _mm512_add_ps(A[6], A[7])));
    const __m512 b =
        _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(B[0], B[1]), _mm512_add_ps(B[2], B[3])),
                      _mm512_add_ps(_mm512_add_ps(B[4], B[5]), _mm512_add_ps(B[6], B[7])));
    _mm512_store_ps(s0, _mm512_mul_ps(a, scale));
    _mm512_store_ps(s1, _mm512_mul_ps(b, scale));
}

/* The weighted values of all 16 queries, dims d0 .. d0 + 15 at a time, the queries in the lanes:
 * out_i[d] = sum over keys p <= pos0 + i of (s[16 p + i] * inv_i) v_p[d], one fmaf per key in key
 * order (lanes past a query's last key masked), as cpu_attn_head() forms it. Each value row is
 * read once per 16 queries (rows lie a cache-row stride apart, so reading them per query cost
 * more than the arithmetic). */
static void weigh16(const float *s, const float *inv, int n_q, int pos0, const float *vc,
                    size_t kvs, int hd, float *out, size_t out_stride)
{
    const int nk = pos0 + n_q;
    const __mmask16 live = (__mmask16)((1u << n_q) - 1u);
    const __m512 iv = _mm512_load_ps(inv);
    _Alignas(64) float tmp[16][16];
    for (int d0 = 0; d0 < hd; d0 += 16) {
        __m512 acc[16];
        for (int dd = 0; dd < 16; dd++)
            acc[dd] = _mm512_setzero_ps();
        const float *v = vc + d0;
        for (int p = 0; p < nk; p++, v += kvs) {
            const __mmask16 m = p <= pos0 ? live : (__mmask16)(live & ~((1u << (p - pos0)) - 1u));
            const __m512 pw = _mm512_mul_ps(_mm512_load_ps(s + 16 * p), iv);
            for (int dd = 0; dd < 16; dd++)
                acc[dd] = _mm512_mask3_fmadd_ps(pw, _mm512_set1_ps(v[dd]), acc[dd], m);
        }
        for (int dd = 0; dd < 16; dd++)
            _mm512_store_ps(tmp[dd], acc[dd]);
        for (int i = 0; i < n_q; i++)
            for (int dd = 0; dd < 16; dd++)
                out[(size_t)i * out_stride + (size_t)(d0 + dd)] = tmp[dd][i];
    }
}

void cpu_gemm_avx512_attn(const float *q, size_t q_stride, int n_q, int pos0, const float *kc,
                          const float *vc, size_t kvs, int hd, float scale, float *s, float *out,
                          size_t out_stride)
{
    _Alignas(64) float qt[CPU_GEMM_ATTN_MAX_HD][16];
    for (int d = 0; d < hd; d++)
        for (int l = 0; l < 16; l++)
            qt[d][l] = l < n_q ? q[(size_t)l * q_stride + (size_t)d] : 0.0f;
    const int nk = pos0 + n_q; /* keys of the last query */
    const __m512 sc = _mm512_set1_ps(scale);
    int p = 0;
    for (; p + 2 <= nk; p += 2)
        scores2((const float(*)[16])qt, kc + (size_t)p * kvs, kc + (size_t)(p + 1) * kvs, hd, sc,
                s + 16 * p, s + 16 * (p + 1));
    if (p < nk) { /* the odd last key: its pair's second half is the same key, discarded */
        _Alignas(64) float junk[16];
        scores2((const float(*)[16])qt, kc + (size_t)p * kvs, kc + (size_t)p * kvs, hd, sc,
                s + 16 * p, junk);
    }
    /* per query the max over its own keys (max_ps(s, m) is the scalar s > m ? s : m) */
    const __mmask16 live = (__mmask16)((1u << n_q) - 1u);
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int k = 0; k < nk; k++) {
        /* key k is seen by the queries i with pos0 + i >= k */
        const __mmask16 m = k <= pos0 ? live : (__mmask16)(live & ~((1u << (k - pos0)) - 1u));
        mx = _mm512_mask_max_ps(mx, m, _mm512_load_ps(s + 16 * k), mx);
    }
    _Alignas(64) float mxs[16], inv[16] = {0};
    _mm512_store_ps(mxs, mx);
    for (int l = 0; l < n_q; l++) {
        float sum = 0.0f;
        for (int k = 0; k <= pos0 + l; k++) {
            const float e = expf(s[16 * k + l] - mxs[l]);
            s[16 * k + l] = e;
            sum += e;
        }
        inv[l] = 1.0f / sum;
    }
    weigh16(s, inv, n_q, pos0, vc, kvs, hd, out, out_stride);
}
#else
void cpu_gemm_avx512_rows(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                          const void *packed, int n_tok, int64_t n, float *out, size_t os)
{
    (void)type, (void)w, (void)row_bytes, (void)r0, (void)r1, (void)packed, (void)n_tok;
    (void)n, (void)out, (void)os;
    abort(); /* broken invariant: cpu_gemm_supported() is 0 in this build */
}

void cpu_gemm_avx512_attn(const float *q, size_t q_stride, int n_q, int pos0, const float *kc,
                          const float *vc, size_t kvs, int hd, float scale, float *s, float *out,
                          size_t out_stride)
{
    (void)q, (void)q_stride, (void)n_q, (void)pos0, (void)kc, (void)vc, (void)kvs, (void)hd;
    (void)scale, (void)s, (void)out, (void)out_stride;
    abort(); /* broken invariant: cpu_gemm_attn_supported() is 0 in this build */
}
#endif
