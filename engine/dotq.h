/* dotq.h — the reference twin's dot product of one quantized weight row with one activation
 * vector, and its fast fused form.
 *
 * dotq_ref() is the definition: dequantize the row exactly (quant_dequant_row), then sum
 * w[i] * x[i] in float into sixteen lanes (lane i % 16, in increasing i), then add the lanes
 * pairwise (0+8, 1+9, ..., then 0+4, ..., 0+2, 0+1). dotq_fast() computes the same products in
 * the same lanes in the same order without writing the row out (AVX2 where the CPU has it), so
 * its result is bit-identical; tests/test_dotq.c checks that on every supported type.
 * Start reading: dotq_ref().
 */
#ifndef GATE_DOTQ_H
#define GATE_DOTQ_H

#include <stdint.h>

#define DOTQ_LANES 16

/* Sixteen-lane float dot product of two float vectors (n elements). */
float dotq_f32(const float *a, const float *b, int64_t n);

/* out[i] += w * v[i] for i < n, one float multiply and one add per element (the twin's attention
 * weighing a value row into its output). */
void dotq_axpy(float *out, float w, const float *v, int64_t n);

/* Reference: row (n elements of type `type`) dequantized into scratch (n floats), then
 * dotq_f32(scratch, x, n). */
float dotq_ref(int type, const void *row, const float *x, int64_t n, float *scratch);

/* The same number, faster: a fused kernel for Q4_K, Q5_K, Q6_K and Q8_0 rows (F32 goes straight to
 * dotq_f32); other types fall back to dotq_ref (scratch must then hold n floats). */
float dotq_fast(int type, const void *row, const float *x, int64_t n, float *scratch);

#endif
