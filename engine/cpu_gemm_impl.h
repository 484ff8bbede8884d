/* cpu_gemm_impl.h — the prompt GEMM's driver, one text for each ISA build (cpu_gemm_avx512.c,
 * cpu_gemm_avx2.c): a tile function per weight type, and the loop of 64-token chunks x tiles of
 * CPU_GEMM_ROWS rows with its stores. Included once per build, after the build has defined
 *   R                                             (CPU_GEMM_ROWS)
 *   tile_k(kind, TV, rows, pk, nb, acc)           K-quant tile: kind 0 Q4_K, 1 Q5_K, 2 Q6_K
 *   tile_q8(TV, rows, pk, nb, acc)                Q8_0 tile
 *   store_4x16(acc, v, out, os)                   a full tile's 4 rows x 16 tokens of group v
 * and CPU_GEMM_ROWS_NAME, the name of the function this defines (cpu_gemm.h's *_rows contract).
 * acc is float[R][CPU_GEMM_TOKVEC][16]: acc[r][v][l] = row r, token 16 v + l of the chunk.
 */
#ifndef CPU_GEMM_ROWS_NAME
#error "define CPU_GEMM_ROWS_NAME (and the tile functions) before including cpu_gemm_impl.h"
#endif

/* one tile of each kind and group count, so every loop of tile_k / tile_q8 has constant bounds */
#define TILE_CASES(CALL)                                                                           \
    switch (tv) {                                                                                  \
    case 1:                                                                                        \
        CALL(1);                                                                                   \
        break;                                                                                     \
    case 2:                                                                                        \
        CALL(2);                                                                                   \
        break;                                                                                     \
    case 3:                                                                                        \
        CALL(3);                                                                                   \
        break;                                                                                     \
    default:                                                                                       \
        CALL(4);                                                                                   \
        break;                                                                                     \
    }

static void tile_q4k(int tv, const uint8_t *const *rows, const void *pk, int64_t nb,
                     float acc[R][CPU_GEMM_TOKVEC][16])
{
#define Q4K(n) tile_k(0, n, rows, pk, nb, acc)
    TILE_CASES(Q4K)
#undef Q4K
}

static void tile_q5k(int tv, const uint8_t *const *rows, const void *pk, int64_t nb,
                     float acc[R][CPU_GEMM_TOKVEC][16])
{
#define Q5K(n) tile_k(1, n, rows, pk, nb, acc)
    TILE_CASES(Q5K)
#undef Q5K
}

static void tile_q6k(int tv, const uint8_t *const *rows, const void *pk, int64_t nb,
                     float acc[R][CPU_GEMM_TOKVEC][16])
{
#define Q6K(n) tile_k(2, n, rows, pk, nb, acc)
    TILE_CASES(Q6K)
#undef Q6K
}

static void tile_q80(int tv, const uint8_t *const *rows, const void *pk, int64_t nb,
                     float acc[R][CPU_GEMM_TOKVEC][16])
{
#define Q80(n) tile_q8(n, rows, pk, nb, acc)
    TILE_CASES(Q80)
#undef Q80
}

void CPU_GEMM_ROWS_NAME(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                        const void *packed, int n_tok, int64_t n, float *out, size_t os)
{
    void (*tile)(int, const uint8_t *const *, const void *, int64_t, float[R][CPU_GEMM_TOKVEC][16]);
    size_t group_bytes; /* packed bytes of one group of 16 tokens */
    int64_t nb;
    switch (type) {
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K:
        tile = type == QUANT_Q4_K ? tile_q4k : type == QUANT_Q5_K ? tile_q5k : tile_q6k;
        nb = n / QK_K;
        group_bytes = (size_t)nb * sizeof(struct gemm_pack_k);
        break;
    case QUANT_Q8_0:
        tile = tile_q80;
        nb = n / 32;
        group_bytes = (size_t)nb * sizeof(struct gemm_pack_32);
        break;
    default:
        abort(); /* broken invariant: the caller asked cpu_gemm_supported() */
    }
    const int groups = (n_tok + CPU_GEMM_LANES - 1) / CPU_GEMM_LANES;
    _Alignas(64) float acc[R][CPU_GEMM_TOKVEC][16];
    /* 64 tokens at a time (their packed activations stay in L2) against every row of the range */
    for (int g0 = 0; g0 < groups; g0 += CPU_GEMM_TOKVEC) {
        const int tv = groups - g0 < CPU_GEMM_TOKVEC ? groups - g0 : CPU_GEMM_TOKVEC;
        const void *pk = (const uint8_t *)packed + (size_t)g0 * group_bytes;
        for (int64_t r = r0; r < r1; r += R) {
            const uint8_t *rows[R];
            for (int q = 0; q < R; q++) /* a short last tile repeats its last row */
                rows[q] = w + (size_t)(r + q < r1 ? r + q : r1 - 1) * row_bytes;
            tile(tv, rows, pk, nb, acc);
            for (int v = 0; v < tv; v++) {
                const int t0 = (g0 + v) * CPU_GEMM_LANES;
                if (r + R <= r1 && t0 + CPU_GEMM_LANES <= n_tok)
                    store_4x16(acc, v, out + (size_t)t0 * os + (size_t)r, os);
                else
                    for (int q = 0; q < R && r + q < r1; q++)
                        for (int l = 0; l < CPU_GEMM_LANES && t0 + l < n_tok; l++)
                            out[(size_t)(t0 + l) * os + (size_t)(r + q)] = acc[q][v][l];
            }
        }
    }
}

#undef TILE_CASES
#undef CPU_GEMM_ROWS_NAME
