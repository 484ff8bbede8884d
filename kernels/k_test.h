/* k_test.h — C-callable launchers of every CUDA kernel over host arrays, for the differential
 * checks (oracles/selftest.c, which reaches them through the backend row's kernel tests,
 * k_test_table below and engine/kernel_tests.h; run by `gate selftest` and by tests/cuda/).
 * Compiled by both the C compiler and nvcc; implemented in kernels/k_test.cu, present only when
 * GATE_HAVE_CUDA.
 *
 * Each launcher uploads its inputs, runs the same launcher the backend runs (k_ops.cuh) on a
 * private stream, synchronizes and copies the result back. All arrays are host memory, row-major,
 * caller-owned. Returns 0, or a negative status with err naming the failed CUDA call.
 * Start reading: k_test_device().
 */
#ifndef GATE_K_TEST_H
#define GATE_K_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/kernel_tests.h"
#include "faults/fault.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA backend's row's kernel tests (engine/kernel_tests.h): the launchers below that run on
 * the device, one entry each, as oracles/selftest.c reaches them (backend_kernel_tests()). A new
 * launcher the selftest runs gets its entry there and here (k_test.cu, the end). */
extern const struct backend_kernel_tests k_test_table;

/* 0 and the device's name ("NVIDIA H200 (sm_90, 139.8 GiB)") when a CUDA device this build can
 * run on is present; ERR_ENV with the reason (cudaGetDeviceCount's error, driver too old, no
 * kernel image for the device) otherwise. */
int k_test_device(char *name, size_t n, struct gate_err *err);

/* y (n_vec, rows) (+)= W_e x[v / x_div]: w holds n_expert slabs of (rows, cols) in `type`
 * (n_expert 1 and ids NULL for a 2-D weight); x (n_x, cols); ids (n_vec) or NULL. gemv: the
 * generation (1 = v1, 2 = v2, which runs v1 for the types without a v2 kernel). */
int k_test_gemv(int gemv, int type, const void *w, int64_t rows, int64_t cols, int n_expert,
                const int32_t *ids, int x_div, const float *x, int n_x, int n_vec, int accumulate,
                float *y, struct gate_err *err);

/* The GEMV v2 kernel's arithmetic for one row, run on the HOST (no device needed): the same
 * item functions as gemv2_kernel (k_gemv.cu), lanes and warp reduction emulated in the
 * kernel's order. row: cols elements of Q4_K, Q6_K or Q8_0 (the 16 bytes around every 16-byte
 * chunk it touches must be readable: the unaligned path reads whole aligned chunks); x 16-byte
 * aligned. ERR_INPUT for another type, a partial block or a misaligned x. */
int k_test_gemv2_host(int type, const void *row, const float *x, int64_t cols, float *out,
                      struct gate_err *err);

/* y (n_vec, rows) = silu(G_e x) * (U_e x): the fused SwiGLU GEMV. */
int k_test_gemv_swiglu(int gemv, int type, const void *gate, const void *up, int64_t rows,
                       int64_t cols, int n_expert, const int32_t *ids, int x_div, const float *x,
                       int n_x, int n_vec, float *y, struct gate_err *err);

/* y (n, rows) (+)= x (n, cols) W^T through the cuBLAS prefill path: bf16 0 FP16 tiles, 1 BF16,
 * 2 FP32 (the gated modes' default; oracles/selftest.c may check it as its own family). */
int k_test_gemm(int type, const void *w, int64_t rows, int64_t cols, const float *x, int n,
                int bf16, int accumulate, float *y, struct gate_err *err);

/* y (n, E) = RMSNorm(x) * w. */
int k_test_rmsnorm(const float *x, const float *w, int n, int E, float eps, float *y,
                   struct gate_err *err);

/* q (n, nh*hd) rewritten in place; kc, vc (n_ctx, nkv*hd) receive K and V at positions
 * pos0 .. pos0+n-1 (other rows zero), widened to float from the cache type. cs, sn (n_ctx, hd/2).
 * faults may be NULL. */
int k_test_qk_norm_rope(float *q, const float *k, const float *v, int n, int pos0, int layer,
                        int nh, int nkv, int hd, const float *qn, const float *kn, float eps,
                        const float *cs, const float *sn, int n_ctx, int kv_f32,
                        const struct fault_set *faults, float *kc, float *vc, struct gate_err *err);

/* out (n, nh*hd): attention of q (n, nh*hd) at positions pos0.. over kc, vc (n_ctx, nkv*hd),
 * uploaded as FP32 (kv_f32) or rounded to FP16. */
int k_test_attention(const float *q, const float *kc, const float *vc, int kv_f32, int n, int pos0,
                     int nh, int nkv, int hd, int n_ctx, float *out, struct gate_err *err);

/* k_test_attention with the backend's choices (k_attention_at, k_ops.cuh): attn 1 = v1, 2 = split;
 * faults (NULL = none) at layer; graph 0: eager, the position an argument and the launch sized
 * for pos0 + n keys; graph 1: the launches captured once into a CUDA graph with the position read
 * from device memory and the launch sized for n_ctx keys (what the backend's decode graph holds),
 * replayed first at another position and then at pos0. Eager and graphed must be bit-identical
 * (gate selftest family attention_graph). */
int k_test_attention_at(int attn, int graph, const float *q, const float *kc, const float *vc,
                        int kv_f32, int n, int pos0, int nh, int nkv, int hd, int n_ctx, int layer,
                        const struct fault_set *faults, float *out, struct gate_err *err);

/* The split-KV attention's arithmetic (attn_split_kernel + attn_combine_kernel, k_attn.cu) run on
 * the HOST (no device needed): the same step functions, the lanes, warps and blocks in turn, for
 * a launch sized for max_keys keys (>= pos0 + n). kc, vc (n_ctx, nkv*hd) as floats (what an FP16
 * cache holds, widened: the kernel widens the same way). The one difference from the device:
 * the host's expf (the device's is within 2 ulp of it). faults (NULL = none) at layer: drop_diag
 * is honoured. ERR_INPUT for a shape the split does not take. */
int k_test_attention_split_host(const float *q, const float *kc, const float *vc, int n, int pos0,
                                int nh, int nkv, int hd, int max_keys, int layer,
                                const struct fault_set *faults, float *out, struct gate_err *err);

/* k_test_qk_norm_rope with graph 1: the launch captured once into a CUDA graph with the position
 * read from device memory, replayed at pos0 (graph 0: exactly k_test_qk_norm_rope). */
int k_test_qk_norm_rope_at(int graph, float *q, const float *k, const float *v, int n, int pos0,
                           int layer, int nh, int nkv, int hd, const float *qn, const float *kn,
                           float eps, const float *cs, const float *sn, int n_ctx, int kv_f32,
                           const struct fault_set *faults, float *kc, float *vc,
                           struct gate_err *err);

/* Route n tokens: logits (n, X) -> ids, w (n, k); kth, k1th (n). faults may be NULL. route: the
 * generation (1 = v1 route_kernel, 2 = v2 route2_kernel, one warp per token). */
int k_test_route(int route, const float *logits, int n, int X, int k, int layer, int pos0,
                 const struct fault_set *faults, int32_t *ids, float *w, float *kth, float *k1th,
                 struct gate_err *err);

/* The routing v2 kernel's steps (route2_kernel, k_moe.cu) run on the HOST (no device needed):
 * the same r2_* functions, the 32 lanes run in turn and the warp argmax emulated as the kernel's
 * butterfly. Same contract as k_test_route; ERR_INPUT unless 1 <= k <= X <= 1024. */
int k_test_route2_host(const float *logits, int n, int X, int k, int layer, int pos0,
                       const struct fault_set *faults, int32_t *ids, float *w, float *kth,
                       float *k1th, struct gate_err *err);

/* x (n, E) += Σ_s w[t*k+s] y[t*k+s] (E). */
int k_test_moe_sum(float *x, const float *w, const float *y, int n, int k, int E,
                   struct gate_err *err);

/* x (n, E) = rows tokens[t] of table (V rows of E elements in `type`). */
int k_test_embed(int type, const void *table, int64_t V, int64_t E, const int32_t *tokens, int n,
                 float *x, struct gate_err *err);

/* out[t] = argmax of logits[t] (V), lowest index on ties. */
int k_test_argmax(const float *logits, int n, int V, int32_t *out, struct gate_err *err);

#ifdef __cplusplus
}
#endif
#endif
