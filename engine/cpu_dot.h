/* cpu_dot.h — the cpu engine's dot-product kernels: quantized activations, integer dot products.
 *
 * Not the twin's numerics (engine/dotq.h is the specification's): activations are quantized per
 * block before each product against a quantized weight, as production CPU engines do —
 * struct cpu_q16_32 (32 values + float scale) for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 weights,
 * struct cpu_q16_K (256 values + float scale + sums of 32) for Q4_K/Q5_K/Q6_K — and each weight
 * block meets its activation block in exact int32 arithmetic (bounds: CPU_ACT_QMAX); the float part
 * (one scale product per block, summed over blocks in index order) is scalar. Why 12-bit
 * activations and not ggml's 8-bit Q8_0 / Q8_K: measured on the conformance cases, 8-bit
 * activations move the tiny MoE's router logits by ~0.05, which flips a top-2 choice at layer 0
 * (router gap 0.0505) and fails the default parity (min cosine 0.983 on qwen3moe-tiny-q8_0); 12-bit
 * activations leave only the weights' own rounding, which the judge shares. On AVX2 the cost is
 * small: int16 x int16 pairs go through vpmaddwd, which is where ggml's int8 path (vpmaddubsw, then
 * vpmaddwd) ends anyway. Stored as int16. F32/F16/BF16 weights take float activations through an
 * eight-lane fused multiply-add dot (lane i % 8, lanes reduced
 * ((0+1)+(2+3))+((4+5)+(6+7))).
 *
 * Three builds of the same kernels (cpu_dot_impl.h): portable C (cpu_dot.c), AVX2+FMA+F16C
 * (cpu_dot_avx2.c) and AVX-512 BW/VL/VNNI (cpu_dot_avx512.c), flags on those files only;
 * cpu_dot_rows() picks the widest the CPU runs (__builtin_cpu_supports). Integer sums are exact and
 * the float steps are the same operations in the same order (fmaf is one rounding either way), so
 * every build gives the same bits. Each output element depends only on its weight row and its
 * activation row: results are independent of how rows or tokens are split over threads or tiles.
 * Start reading: cpu_dot_rows().
 */
#ifndef GATE_CPU_DOT_H
#define GATE_CPU_DOT_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest |q| of an activation value (12 bits). It keeps every integer a kernel forms inside
 * int32, whole weight blocks included: Q6_K 256 x |(q - 32) sc| <= 4096 x 2047 < 2^31, Q5_K
 * 256 x 31 x 63 x 2047, Q8_0 32 x 128 x 2047; the AVX2 kernels pre-multiply the weights by their
 * sub-block scales in int16 (|q sc| <= 4096) and add int32 lanes, so both builds form the same
 * exact integers in any order. */
#define CPU_ACT_QMAX 2047

/* Activation block for the 32-element weight formats: x[i] ~ d * qs[i]; s = d * sum(qs). */
struct cpu_q16_32 {
    float d;
    float s;
    int16_t qs[32];
};
QUANT_STATIC_ASSERT(sizeof(struct cpu_q16_32) == 72, "cpu_q16_32 size");

/* Activation block for the K-quants: x[i] ~ d * qs[i]; sums[j] = sum of qs[32j .. 32j+31]. */
struct cpu_q16_K {
    float d;
    int32_t sums[QK_K / 32];
    int16_t qs[QK_K];
};
QUANT_STATIC_ASSERT(sizeof(struct cpu_q16_K) == 548, "cpu_q16_K size");

/* What a weight type wants as activations. */
enum cpu_act {
    CPU_ACT_F32 = 0,    /* float rows (F32, F16, BF16 weights) */
    CPU_ACT_Q16_32 = 1, /* struct cpu_q16_32 blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) */
    CPU_ACT_Q16_K = 2,  /* struct cpu_q16_K blocks (Q4_K, Q5_K, Q6_K) */
};

/* The activation kind of weight type `type`; -1 when the cpu engine has no kernel for it. */
int cpu_act_kind(int type);

/* Bytes of one activation row of n elements (n a multiple of the weight's block size). */
size_t cpu_act_row_bytes(int type, int64_t n);

/* Quantize one row x (n) into the activation layout weight type `type` wants, at dst
 * (cpu_act_row_bytes bytes; for CPU_ACT_F32 a plain copy). Deterministic, per block. */
void cpu_act_quantize(int type, const float *x, void *dst, int64_t n);

/* The most tokens one cpu_dot_rows call takes. */
#define CPU_DOT_MAX_TOK 8

/* out[t * out_stride] = dot(weight row w (n elements of type), activation row t) for t in
 * [0, n_tok), 1 <= n_tok <= CPU_DOT_MAX_TOK; activation row t starts at act + t * act_stride
 * bytes (layout from cpu_act_quantize). The weight block is unpacked once and reused for every
 * token. The selected build (AVX2 or portable). */
void cpu_dot_rows(int type, const void *w, const void *act, size_t act_stride, int n_tok, int64_t n,
                  float *out, size_t out_stride);

/* cpu_dot_rows over n_rows consecutive weight rows (w + r * row_bytes), result of row r and token
 * t at out[t * out_stride + r]: one dispatch for the whole tile, the same numbers. With one token
 * the AVX-512 build takes Q4_K / Q6_K rows four at a time (the decode kernels; same bits). */
void cpu_dot_tile(int type, const uint8_t *w, size_t row_bytes, int n_rows, const void *act,
                  size_t act_stride, int n_tok, int64_t n, float *out, size_t out_stride);
void cpu_dot_portable_tile(int type, const uint8_t *w, size_t row_bytes, int n_rows,
                           const void *act, size_t act_stride, int n_tok, int64_t n, float *out,
                           size_t out_stride);
void cpu_dot_avx2_tile(int type, const uint8_t *w, size_t row_bytes, int n_rows, const void *act,
                       size_t act_stride, int n_tok, int64_t n, float *out, size_t out_stride);
void cpu_dot_avx512_tile(int type, const uint8_t *w, size_t row_bytes, int n_rows, const void *act,
                         size_t act_stride, int n_tok, int64_t n, float *out, size_t out_stride);

/* The two builds, for the test that they agree; cpu_dot_avx2_rows is NULL-safe to ask for:
 * cpu_dot_have_avx2() says whether this machine and build can run it. */
void cpu_dot_portable_rows(int type, const void *w, const void *act, size_t act_stride, int n_tok,
                           int64_t n, float *out, size_t out_stride);
void cpu_dot_avx2_rows(int type, const void *w, const void *act, size_t act_stride, int n_tok,
                       int64_t n, float *out, size_t out_stride);
int cpu_dot_have_avx2(void);
/* The AVX-512 (BW, VL, VNNI) build (cpu_dot_avx512.c), picked first when the CPU has it. */
void cpu_dot_avx512_rows(int type, const void *w, const void *act, size_t act_stride, int n_tok,
                         int64_t n, float *out, size_t out_stride);
int cpu_dot_have_avx512(void);

/* The instruction set the cpu engine's kernels run (every build gives the same bits; the
 * self-consistency gate holds it to that): CPU_ISA_PORTABLE, _AVX2, _AVX512. The best this
 * machine and build can run, capped by cpu_dot_set_isa() or, until it is called, by the
 * environment variable GATE_CPU_ISA (portable, avx2 or avx512). Process-wide: set it between
 * runs, never during one. */
enum { CPU_ISA_PORTABLE = 0, CPU_ISA_AVX2 = 1, CPU_ISA_AVX512 = 2 };
int cpu_dot_isa(void);
const char *cpu_dot_isa_name(int level);
/* Cap the instruction set ("portable", "avx2", "avx512"; NULL or "" = no cap); -1 when the name
 * is unknown or this machine / build cannot run it (nothing changes then). */
int cpu_dot_set_isa(const char *name);
/* 0 when GATE_CPU_ISA names an instruction set this machine cannot run or no set at all. */
int cpu_dot_isa_env_ok(void);

/* Eight-lane FMA dot of two float vectors: the F32 kernel's order. */
float cpu_dot_f32(const float *a, const float *b, int64_t n);

/* Causal attention of one query head q (hd) over keys 0 .. n_keys-1: key p at kc + p * stride,
 * value p at vc + p * stride (hd floats each); scores s (n_keys) are scratch; out (hd) =
 * softmax(q . k * scale) weighted sum of the values (expf from libm, the weighted sum with
 * fmaf, so every build gives the same bits). */
void cpu_attn_head(const float *q, const float *kc, const float *vc, size_t stride, int n_keys,
                   int hd, float scale, float *s, float *out);
void cpu_dot_portable_attn(const float *q, const float *kc, const float *vc, size_t stride,
                           int n_keys, int hd, float scale, float *s, float *out);
void cpu_dot_avx2_attn(const float *q, const float *kc, const float *vc, size_t stride, int n_keys,
                       int hd, float scale, float *s, float *out);
void cpu_dot_avx512_attn(const float *q, const float *kc, const float *vc, size_t stride,
                         int n_keys, int hd, float scale, float *s, float *out);

#ifdef __cplusplus
}
#endif
#endif
