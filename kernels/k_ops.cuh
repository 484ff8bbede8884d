/* k_ops.cuh — the launchers of every kernel family, as the CUDA backend (cuda_backend.cu) and
 * the differential-test launchers (k_test.cu) call them. C++ only.
 *
 * Conventions: all pointers are device pointers unless named *_host; activations are FP32,
 * row-major (token-major); every launcher enqueues on ks->s without synchronizing, counts its
 * launches in ks->launches and returns 0 or a negative status with err filled (k_common.cuh).
 * Each launcher's CPU twin is named next to it; the differential checks in harness/selftest.c
 * compare the two over edge shapes.
 */
#ifndef GATE_K_OPS_CUH
#define GATE_K_OPS_CUH

#include "kernels/k_common.cuh"

/* 0 when the kernels of this build can run on the current device (cudaFuncGetAttributes on one
 * of them), else the CUDA status (cudaErrorNoKernelImageForDevice, ...) with err filled. */
int k_check_image(struct gate_err *err);

/* ---- k_gemv.cu ----------------------------------------------------------------------------- */

/* y[v] (rows) = W_e x[v / x_div] for v < n_vec, e = ids[v] (ids NULL: the 2-D weight).
 * accumulate: y[v][r] += dot instead of =. FP32 accumulation.
 * Twin: ref.c matmul() (quant_dequant_row + dot). */
int k_gemv(struct k_stream *ks, const struct k_weight *w, const float *x, int64_t x_stride,
           int x_div, float *y, int64_t y_stride, int n_vec, const int32_t *ids, int accumulate,
           struct gate_err *err);

/* 1 when the GEMV v2 kernel handles the type (Q4_K, Q6_K, Q8_0): with ks->gemv == 2, k_gemv and
 * k_gemv_swiglu run v2 for these types (x 16-byte aligned with a stride that keeps it so, else
 * ERR_INPUT) and v1 for the others. Both hold the same contract and twin. */
int k_gemv_v2_type(int type);

/* y[v] (gate.rows) = silu(G_e x) * (U_e x), x = x[v / x_div]; gate and up of one type or two.
 * Twin: ref.c swiglu() up to the down projection. */
int k_gemv_swiglu(struct k_stream *ks, const struct k_weight *gate, const struct k_weight *up,
                  const float *x, int64_t x_stride, int x_div, float *y, int64_t y_stride,
                  int n_vec, const int32_t *ids, struct gate_err *err);

/* a[i] = silu(a[i]) * b[i], n elements. Twin: the loop in ref.c swiglu(). */
int k_swiglu_ew(struct k_stream *ks, float *a, const float *b, int64_t n, struct gate_err *err);

/* x (n, E) = rows tokens[t] of the embedding table. Twin: quant_dequant_row of the row. */
int k_embed(struct k_stream *ks, const struct k_weight *table, const int32_t *tokens, int n,
            float *x, struct gate_err *err);

/* out[t] = argmax of logits[t] (n_vocab), lowest index on ties. */
int k_argmax(struct k_stream *ks, const float *logits, int n, int n_vocab, int32_t *out,
             struct gate_err *err);

/* ---- k_norm_rope.cu ------------------------------------------------------------------------ */

/* y (n, E) = RMSNorm(x) * w, sum of squares in double. Twin: ref.c rmsnorm(). */
int k_rmsnorm(struct k_stream *ks, const float *x, const float *w, float *y, int n, int E,
              float eps, struct gate_err *err);

/* For each token t (position pos0 + t): every Q head and K head RMSNorm'd with qn / kn (unless
 * a skip_qk_norm fault of `faults` (NULL = none; passed by value) covers (layer, pos)), then NEOX
 * RoPE from the tables cs / sn (n_ctx, hd/2); Q rewritten in place, K and V appended to the caches
 * kc / vc (n_ctx, nkv*hd) of this layer, as FP32 (kv_f32) or FP16. Twin: ref.c norm_rope() + the
 * cache copy in attention(). */
/* The numeric faults act here too (faults/fault.h): kv_corrupt scales K and V as they are stored,
 * rope_shift recomputes the position's angles with base rope_base x factor on the device
 * (rope_base 0: no base known, and a rope_shift fault is then ERR_INPUT). */
int k_qk_norm_rope_kv(struct k_stream *ks, float *q, const float *k, const float *v, int n,
                      int pos0, int layer, int nh, int nkv, int hd, const float *qn,
                      const float *kn, float eps, const float *cs, const float *sn, void *kc,
                      void *vc, int kv_f32, const struct fault_set *faults, float rope_base,
                      struct gate_err *err);

/* k_qk_norm_rope_kv with the first token's position read from device memory (dpos, one int;
 * NULL: pos0, and then exactly k_qk_norm_rope_kv): what a CUDA graph replayed at every position
 * launches (cuda_backend.cu). The kernel computes pos = *dpos + t instead of pos0 + t; nothing
 * else differs. */
int k_qk_norm_rope_kv_at(struct k_stream *ks, float *q, const float *k, const float *v, int n,
                         int pos0, const int *dpos, int layer, int nh, int nkv, int hd,
                         const float *qn, const float *kn, float eps, const float *cs,
                         const float *sn, void *kc, void *vc, int kv_f32,
                         const struct fault_set *faults, float rope_base, struct gate_err *err);

/* ---- k_attn.cu ----------------------------------------------------------------------------- */

/* Allow attention over n_ctx keys (dynamic shared memory for the scores); ERR_ENV naming the
 * limit when the device cannot hold them. Call once per device before k_attention. */
int k_attention_prepare(int n_ctx, int hd, struct gate_err *err);

/* out (n, nh*hd): causal GQA attention of the n queries q (n, nh*hd) at positions pos0 + t over
 * the cache keys 0..pos0+t, query head h reading kv head h / (nh / nkv), scale 1/sqrt(hd).
 * Twin: ref.c attn_heads(). */
int k_attention(struct k_stream *ks, const float *q, const void *kc, const void *vc, int kv_f32,
                float *out, int n, int pos0, int nh, int nkv, int hd, struct gate_err *err);

/* k_attention() of layer `layer` under faults (NULL = none): a drop_diag fault covering (layer,
 * pos) leaves the query's own key out (keys 0..pos-1; at position 0 a zero output). Twin: ref.c
 * attn_heads(). */
int k_attention_faulted(struct k_stream *ks, const float *q, const void *kc, const void *vc,
                        int kv_f32, float *out, int n, int pos0, int nh, int nkv, int hd, int layer,
                        const struct fault_set *faults, struct gate_err *err);

/* The attention of the forward (cuda_backend.cu), by ks->attn: 2 = split-KV for chunks of up to
 * K_ATTN_SPLIT_TOKENS tokens (attn_split_kernel + attn_combine_kernel; part: a workspace of
 * k_attention_split_floats(n, nh, max_keys, hd) floats; the shape must pass
 * k_attention_split_shape, else ERR_INPUT), anything else = v1 (attn_kernel; part unused).
 * max_keys: the most keys any token of the call may attend to — the launch (v1's shared memory, the
 * split's grid) is sized by it, never by the current length; eagerly pos0 + n, under a graph the
 * context size. dpos: the first token's position in device memory (NULL: pos0). The split's
 * partition is fixed (SPLIT_KEYS keys per split), so its result does not depend on max_keys; nor
 * does v1's. Twin: ref.c attn_heads(); the split's order and its bound: docs/kernels.md "Split-KV
 * attention". */
#define K_ATTN_SPLIT_TOKENS 8 /* the split runs for chunks of up to this many tokens; v1 above */
int k_attention_at(struct k_stream *ks, const float *q, const void *kc, const void *vc, int kv_f32,
                   float *out, int n, int pos0, const int *dpos, int max_keys, int nh, int nkv,
                   int hd, int layer, const struct fault_set *faults, float *part,
                   struct gate_err *err);

/* 1 when the split kernel takes the shape: nh a multiple of nkv, hd <= 256 and a multiple of 4. */
int k_attention_split_shape(int nh, int nkv, int hd);

/* The splits a launch for max_keys keys has (ceil(max_keys / SPLIT_KEYS), at least 1), and the
 * floats of its partials workspace for n tokens: n * nh * splits * (hd + 2). */
int k_attention_split_splits(int max_keys);
size_t k_attention_split_floats(int n, int nh, int max_keys, int hd);

/* ---- the scale fault ------------------------------------------------------------------------ */

/* dst (n, cols) = f * src, or with accumulate dst += f * src, where f is the scale fault's
 * factor of tensor `tensor` (enum fault_tensor) at (layer, pos0 + r / per) for row r (per: rows
 * per token, k for a MoE layer's (token, slot) rows). src may be dst (accumulate 0). Twin: the
 * fault_scale() of ref.c. */
int k_fault_scale(struct k_stream *ks, const float *src, float *dst, int accumulate, int n,
                  int64_t cols, int per, int tensor, int layer, int pos0,
                  const struct fault_set *faults, struct gate_err *err);

/* ---- k_moe.cu ------------------------------------------------------------------------------ */

/* The largest per-thread local memory (stack frame) any kernel of the forward needs, from
 * cudaFuncGetAttributes (the routing kernel reads its fault set in place, __grid_constant__, so
 * this is normally 0). The driver reserves it for every resident thread of the device; the
 * backend's memory plan counts what exceeds the context's stack limit. */
int k_local_bytes_max(size_t *out, struct gate_err *err);

/* Route n tokens (positions pos0 + t) from router logits (n, X): softmax, top-k (lowest id on
 * ties), renormalize, then the routing faults of `faults` (NULL = none) at (layer, pos) — the
 * device mirror of route_select() + fault_apply_route(). ids, w (n, k); kth, k1th (n) the router
 * logits of the k-th and (k+1)-th expert (for taps). Twin: route_select(). */
int k_route(struct k_stream *ks, const float *logits, int n, int X, int k, int layer, int pos0,
            const struct fault_set *faults, int32_t *ids, float *w, float *kth, float *k1th,
            struct gate_err *err);

/* x (n, E) += sum over slots s (in slot order) of w[t*k + s] * y[t*k + s] (E).
 * Twin: the weighted sum at the end of ref.c moe() + the residual add of ffn(). */
int k_moe_sum(struct k_stream *ks, float *x, const float *w, const float *y, int n, int k, int E,
              struct gate_err *err);

/* ---- k_prefill.cu -------------------------------------------------------------------------- */

struct k_gemm_ws {
    cublasHandle_t blas;
    void *tile; /* tile_elems elements (FP32: 4 bytes, else 2): dequantized weight rows */
    size_t tile_elems;
    void *x16; /* x16_elems 16-bit elements: the activations converted (16-bit tiles only) */
    size_t x16_elems;
    int f32;  /* 1: FP32 tiles, activations used in place (the default of the gated modes) */
    int bf16; /* with f32 0 — 1: BF16 tiles and activations, 0: FP16 */
};

/* y (n, rows; stride y_stride) = x (n, cols; stride x_stride) W_e^T through cuBLAS: W's rows
 * dequantized tile by tile into ws->tile (FP32, or FP16/BF16 with the activations converted
 * once), GEMMs with FP32 accumulation (CUBLAS_COMPUTE_32F). expert < 0: the 2-D weight.
 * accumulate: y +=. Twin: ref.c matmul() (16-bit tiles: the rounding of weights and activations
 * is the documented difference, emulated by GATE_REF_EMULATE=gemm-f16). */
int k_gemm(struct k_stream *ks, const struct k_gemm_ws *ws, const struct k_weight *w, int expert,
           const float *x, int64_t x_stride, int n, float *y, int64_t y_stride, int accumulate,
           struct gate_err *err);

#endif
