/* cpu_gemm.h — the cpu engine's batched product for the prompt (prefill): a cache-blocked GEMM of
 * quantized weight rows x quantized activation rows, bit-identical to cpu_dot_rows().
 *
 * Why a second kernel: cpu_dot_rows() forms each (row, token) dot product with a horizontal sum
 * of a vector register per weight block and token — fine for one token (decode), but in a batch
 * those reductions cost more than the multiply-adds. Here the lanes of a register are sixteen
 * TOKENS: the activations of a batch are packed once per product (cpu_gemm_pack: per 16 tokens
 * and weight block, each int16 pair (a[2k], a[2k+1]) of the sixteen tokens side by side), each
 * weight block is unpacked once per tile into int16 (pre-multiplied by its sub-block scales, as
 * in cpu_dot_avx512.c) in a small L1-resident buffer, and vpdpwssd multiplies a broadcast weight
 * pair into sixteen tokens' int32 sums at once — no horizontal sum at all. A tile is 4 weight
 * rows x 64 tokens (16 int32 accumulators in registers); rows are split over threads by the
 * caller (pool_run over row ranges).
 *
 * Exactness: per weight block and token the int32 sums are the same exact integers as the
 * portable kernel's (bounds: CPU_ACT_QMAX; the K-quant min term is formed as
 * (256 m) * (s >> 8) + m * (s & 255), exact), and the float steps are the same operations in the
 * same order ((d * yd) * isum - (dmin * yd) * imin added block by block; Q8_0 into four partial
 * sums by block index mod 4), one IEEE operation per lane as the scalar code does one. So the
 * results equal cpu_dot_rows()'s bit for bit (tests/test_cpu.c), whatever the tiling or threads.
 *
 * Types: Q4_K, Q5_K, Q6_K, Q8_0 on CPUs with AVX-512 BW/VL/VNNI (cpu_gemm_avx512.c) or with AVX2,
 * FMA and F16C (cpu_gemm_avx2.c: vpmaddwd into eight tokens' lanes, then vpaddd; a tile of 4 rows
 * x 16 tokens in registers, each unpacked weight block used for 64 tokens), each file with its
 * flags only; everything else keeps cpu_dot_tile(). Start reading: cpu_gemm_rows().
 */
#ifndef GATE_CPU_GEMM_H
#define GATE_CPU_GEMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CPU_GEMM_LANES 16  /* tokens per register */
#define CPU_GEMM_ROWS 4    /* weight rows per tile */
#define CPU_GEMM_TOKVEC 4  /* registers of tokens per tile: 64 tokens */
#define CPU_GEMM_MIN_TOK 8 /* below this many tokens cpu_dot_tile() is faster */

/* The packed activations of 16 tokens for one weight block (layout: cpu_gemm.c). */
struct gemm_pack_k {                 /* K-quants: 256 columns */
    int32_t qs[128][CPU_GEMM_LANES]; /* int16 pair k of each token */
    int32_t mn[8][CPU_GEMM_LANES];   /* (s >> 8, s & 255) of sub-block sum s = sums[j] */
    float d[CPU_GEMM_LANES];         /* block scale */
};
struct gemm_pack_32 { /* Q8_0: 32 columns */
    int32_t qs[16][CPU_GEMM_LANES];
    float d[CPU_GEMM_LANES];
};

/* 1 when cpu_gemm_rows() takes weight type `type` on this machine and build. */
int cpu_gemm_supported(int type);

/* Bytes cpu_gemm_pack() writes for n_tok tokens of n columns (n a multiple of the type's block
 * size); 0 for a type cpu_gemm_supported() rejects. */
size_t cpu_gemm_pack_bytes(int type, int n_tok, int64_t n);

/* Pack n_tok activation rows (the layout cpu_act_quantize() wrote for weight type `type`; row t
 * at act + t * act_stride bytes, n columns) into the GEMM's token-interleaved layout at packed
 * (cpu_gemm_pack_bytes bytes, 64-byte aligned). Tokens past n_tok up to the next multiple of 16
 * are zero. Pure, deterministic. */
void cpu_gemm_pack(int type, const uint8_t *act, size_t act_stride, int n_tok, int64_t n,
                   void *packed);

/* cpu_gemm_pack() of group g only (tokens 16 g .. 16 g + 15): groups are independent, so
 * threads may pack different groups at once. */
void cpu_gemm_pack_group(int type, const uint8_t *act, size_t act_stride, int n_tok, int64_t n,
                         void *packed, int g);

/* Weight rows [r0, r1) of a matrix of `type` (row r at w + r * row_bytes, n columns) against the
 * n_tok packed tokens: out[t * out_stride + r] = cpu_dot_rows(row r, token t), bit for bit.
 * Tiles of CPU_GEMM_ROWS rows x 64 tokens; no allocation (a few KB of stack). Requires
 * cpu_gemm_supported(type). */
void cpu_gemm_rows(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                   const void *packed, int n_tok, int64_t n, float *out, size_t out_stride);

/* ---- attention over the prompt ---------------------------------------------------------------
 * Causal attention of up to 16 consecutive query tokens of one head at once, the tokens in the
 * lanes of a register: each key is read once for the 16 queries, and each score keeps
 * cpu_dot_f32()'s order (eight FMA partial sums by d mod 8, reduced ((0+1)+(2+3))+((4+5)+(6+7)),
 * then times scale); softmax with libm expf in key order, values weighted with FMA in key order —
 * so every token's output equals cpu_attn_head()'s bit for bit (tests/test_cpu.c). */

/* 1 when cpu_gemm_attn() takes head dimension hd on this machine (AVX-512, or AVX2 with FMA and
 * F16C: cpu_gemm_avx2_attn, four queries per block, each key and value row read once per block;
 * hd % 16 == 0, hd <= CPU_GEMM_ATTN_MAX_HD). */
#define CPU_GEMM_ATTN_MAX_HD 256
#define CPU_GEMM_ATTN_MIN_TOK 4 /* fewer query tokens: cpu_attn_head() per token */
int cpu_gemm_attn_supported(int hd);

/* Query token i < n_q (1 <= n_q <= 16) at q + i * q_stride (hd floats) sits at position pos0 + i
 * and attends keys 0 .. pos0 + i: key p at kc + p * kv_stride, value p at vc + p * kv_stride.
 * Output of token i at out + i * out_stride (hd floats). s: scratch of 16 * (pos0 + n_q) floats,
 * 64-byte aligned. Requires cpu_gemm_attn_supported(hd). */
void cpu_gemm_attn(const float *q, size_t q_stride, int n_q, int pos0, const float *kc,
                   const float *vc, size_t kv_stride, int hd, float scale, float *s, float *out,
                   size_t out_stride);
void cpu_gemm_avx512_attn(const float *q, size_t q_stride, int n_q, int pos0, const float *kc,
                          const float *vc, size_t kv_stride, int hd, float scale, float *s,
                          float *out, size_t out_stride);
void cpu_gemm_avx2_attn(const float *q, size_t q_stride, int n_q, int pos0, const float *kc,
                        const float *vc, size_t kv_stride, int hd, float scale, float *s,
                        float *out, size_t out_stride);

/* The AVX-512 build (cpu_gemm_avx512.c); cpu_gemm_rows() calls it. */
void cpu_gemm_avx512_rows(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                          const void *packed, int n_tok, int64_t n, float *out, size_t out_stride);
/* The AVX2 build (cpu_gemm_avx2.c); cpu_gemm_rows() calls it below AVX-512 (the test calls both
 * where the CPU has AVX-512: cpu_dot_have_avx2() says whether this one runs). */
void cpu_gemm_avx2_rows(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                        const void *packed, int n_tok, int64_t n, float *out, size_t out_stride);

#ifdef __cplusplus
}
#endif
#endif
