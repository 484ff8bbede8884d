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

struct backend;
struct gate_err;

/* The twin's layers under teacher forcing: each layer evaluated on the subject's own input. On a
 * fresh ref backend b (n_past 0, n_ctx >= n), for positions 0..n-1 of tokens: layer 0 takes the
 * token embeddings, layer l > 0 takes hidden (n_layer, n, n_embd) row l - 1 (the subject's
 * residual after layer l - 1, every position: its keys and values fill the cache of layer l);
 * out receives each layer's output at the evaluated positions: eval NULL, every position
 * (out (n_layer, n, n_embd)); else the n_eval increasing positions eval (out (n_layer, n_eval,
 * n_embd)), where only keys and values are computed at the others — a sampled span's cost is
 * its K and V projections plus the evaluated positions. Layer-major: a twin opened with the
 * "kv-one-layer" item holds one layer's cache (n_ctx rows), not n_layer. logits (n_rows, n_vocab)
 * receives the head (output norm, output matrix) on the subject's last layer at positions
 * rows[0..n_rows-1]. The difference out[l] - hidden[l] is then what layer l of the subject added
 * wrongly, without the noise of the layers before it (oracles/parity.c "forced layers"). MoE:
 * force_experts (n_layer, n, k), the subject's expert sets, replace the twin's own where they are
 * within force_tol of it (route_force, as the route-tie replay), force_deficit (n_layer, n)
 * scratch; NULL: the twin's own routes. Leaves the cache filled (n_past n: truncate before another
 * use); ERR_INPUT for another backend, a used one, bad tokens or rows. */
int ref_forward_forced(struct backend *b, const int32_t *tokens, int n, const float *hidden,
                       const int32_t *force_experts, float force_tol, float *force_deficit,
                       const int *eval, int n_eval, float *out, const int *rows, int n_rows,
                       float *logits, struct gate_err *err);

#ifdef __cplusplus
}
#endif
#endif
