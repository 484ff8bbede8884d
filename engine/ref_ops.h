/* ref_ops.h — the reference twin's per-op functions, exported so that every kernel's
 * differential check (oracles/selftest.c, tests/cuda/) compares against the very code the twin runs
 * — one twin per op, never a copy. Definitions in engine/ref.c. */
#ifndef GATE_REF_OPS_H
#define GATE_REF_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y (n) = RMSNorm(x) * w; mean of squares in double, scale in float, as ggml. y may be x. */
void ref_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

/* One head vector x (hd): per-head RMSNorm with w (skipped when skip_norm: the fault), then
 * NEOX RoPE with the position's tables cs, sn (hd/2 each). */
void ref_norm_rope(float *x, const float *w, const float *cs, const float *sn, int hd, float eps,
                   int skip_norm);

/* Causal attention of one query head q (hd) over keys/values 0..pos: key p of this kv head is
 * kc + p * kv_stride (hd floats), value likewise in vc; scale 1/sqrt(hd); scores is scratch
 * (pos + 1); out (hd). */
void ref_attn_head(const float *q, const float *kc, const float *vc, size_t kv_stride, int pos,
                   int hd, float *scores, float *out);

/* Causal attention of n tokens at positions pos0 .. pos0+n-1, every query head, as the twin's
 * forward computes it: ref_attn_head() per (token, head), query head h reading kv head
 * h / (nh / nkv) (GQA). q (n, nh*hd); kc, vc (at least pos0 + n rows of nkv*hd); drop_diag 1:
 * each token's keys stop before its own position (the fault; at position 0 a zero row);
 * scores is scratch (pos0 + n); out (n, nh*hd). The kernels' differential checks build their
 * expected attention with it (oracles/selftest.c, tests/cuda/test_kernels.c). */
void ref_attn_tokens(const float *q, const float *kc, const float *vc, int n, int pos0, int nh,
                     int nkv, int hd, int drop_diag, float *scores, float *out);

/* RoPE tables for positions 0..n_ctx-1: cs, sn (n_ctx, hd/2), p * base^(-2i/hd) in double. */
void ref_rope_tables(float *cs, float *sn, int n_ctx, int hd, float base);

/* Greedy pick over x (n >= 1): the index of the largest value, the LOWEST index on ties (as the
 * conformance greedy files and the device argmax, k_argmax, do). The one argmax of gate. */
int32_t ref_argmax(const float *x, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
