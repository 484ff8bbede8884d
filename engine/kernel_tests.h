/* kernel_tests.h — the "kernel tests" capability an accelerator backend's row offers (issue 24
 * §5): its kernels' launchers over host arrays, as a table of function pointers, so the
 * differential checks (oracles/selftest.c, `gate selftest`) reach the kernels through the backend
 * list (backend_kernel_tests() in backend.h) and never include a backend's own headers.
 *
 * The CUDA backend's table is kernels/k_test.cu's `k_test_table`, its entries the launchers of
 * kernels/k_test.h (same signatures, same contracts: read k_test.h for each one); a build without
 * that backend has no table. Each launcher uploads its inputs, runs the launcher the backend runs
 * on a private stream, synchronizes and copies the result back. All arrays are host memory,
 * row-major, caller-owned. Each returns 0, or a negative status with err naming the failed call.
 * Adding a kernel test: a launcher in the backend (k_test.h / k_test.cu), its entry here and in
 * the backend's table, and a family in oracles/selftest.c (docs/kernels.md).
 * Start reading: struct backend_kernel_tests.
 */
#ifndef GATE_KERNEL_TESTS_H
#define GATE_KERNEL_TESTS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "faults/fault.h"

#ifdef __cplusplus
extern "C" {
#endif

struct backend_kernel_tests {
    /* 0 and the device's name when a device the build can run on is present; ERR_ENV with the
     * reason otherwise (k_test_device) */
    int (*device)(char *name, size_t n, struct gate_err *err);
    /* the GEMV (plain, expert slabs) of generation gemv (1 = v1, 2 = v2) (k_test_gemv) */
    int (*gemv)(int gemv, int type, const void *w, int64_t rows, int64_t cols, int n_expert,
                const int32_t *ids, int x_div, const float *x, int n_x, int n_vec, int accumulate,
                float *y, struct gate_err *err);
    /* the fused SwiGLU GEMV (k_test_gemv_swiglu) */
    int (*gemv_swiglu)(int gemv, int type, const void *gate, const void *up, int64_t rows,
                       int64_t cols, int n_expert, const int32_t *ids, int x_div, const float *x,
                       int n_x, int n_vec, float *y, struct gate_err *err);
    /* the batched projections (bf16 0 FP16 tiles, 1 BF16, 2 FP32) (k_test_gemm) */
    int (*gemm)(int type, const void *w, int64_t rows, int64_t cols, const float *x, int n,
                int bf16, int accumulate, float *y, struct gate_err *err);
    /* RMSNorm (k_test_rmsnorm) */
    int (*rmsnorm)(const float *x, const float *w, int n, int E, float eps, float *y,
                   struct gate_err *err);
    /* Q/K norm, RoPE and the cache append (k_test_qk_norm_rope) */
    int (*qk_norm_rope)(float *q, const float *k, const float *v, int n, int pos0, int layer,
                        int nh, int nkv, int hd, const float *qn, const float *kn, float eps,
                        const float *cs, const float *sn, int n_ctx, int kv_f32,
                        const struct fault_set *faults, float *kc, float *vc, struct gate_err *err);
    /* attention over the cache (k_test_attention) */
    int (*attention)(const float *q, const float *kc, const float *vc, int kv_f32, int n, int pos0,
                     int nh, int nkv, int hd, int n_ctx, float *out, struct gate_err *err);
    /* attention with the backend's choices: attn 1 = v1, 2 = split; graph 0 eager, 1 captured
     * into a CUDA graph and replayed (k_test_attention_at) */
    int (*attention_at)(int attn, int graph, const float *q, const float *kc, const float *vc,
                        int kv_f32, int n, int pos0, int nh, int nkv, int hd, int n_ctx, int layer,
                        const struct fault_set *faults, float *out, struct gate_err *err);
    /* the Q/K norm, RoPE and cache append, eager (graph 0) or graphed (graph 1)
     * (k_test_qk_norm_rope_at) */
    int (*qk_norm_rope_at)(int graph, float *q, const float *k, const float *v, int n, int pos0,
                           int layer, int nh, int nkv, int hd, const float *qn, const float *kn,
                           float eps, const float *cs, const float *sn, int n_ctx, int kv_f32,
                           const struct fault_set *faults, float *kc, float *vc,
                           struct gate_err *err);
    /* MoE routing of generation route (1 = v1, 2 = v2) (k_test_route) */
    int (*route)(int route, const float *logits, int n, int X, int k, int layer, int pos0,
                 const struct fault_set *faults, int32_t *ids, float *w, float *kth, float *k1th,
                 struct gate_err *err);
    /* the experts' weighted sum into the residual (k_test_moe_sum) */
    int (*moe_sum)(float *x, const float *w, const float *y, int n, int k, int E,
                   struct gate_err *err);
    /* the embedding lookup (k_test_embed) */
    int (*embed)(int type, const void *table, int64_t V, int64_t E, const int32_t *tokens, int n,
                 float *x, struct gate_err *err);
    /* the greedy argmax, lowest index on ties (k_test_argmax) */
    int (*argmax)(const float *logits, int n, int V, int32_t *out, struct gate_err *err);
};

#ifdef __cplusplus
}
#endif
#endif
