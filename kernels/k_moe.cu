/* k_moe.cu — MoE routing on the device and the weighted sum of the experts' outputs.
 *
 * CPU twins: route_kernel runs route_select_inline() (engine/route.h) and through it
 * fault_apply_route_inline() (faults/fault.h) — not a mirror of the host code but the same
 * definition compiled for the device, with det_expf; built with --fmad=false so the routes and
 * weights are bit-identical to the host's. moe_sum_kernel ↔ the slot-order weighted sum at the end
 * of ref.c moe() plus the residual add of ffn().
 *
 * The selected ids stay on the device: the expert GEMVs (k_gemv with ids) read them there, so
 * the step needs no host synchronization between router and experts.
 * Start reading: route_kernel.
 */
#include "engine/route.h"
#include "kernels/k_ops.cuh"

/* One block of one warp per token; lane 0 routes serially through route_select_inline() — the
 * reference's own routing function, compiled for the device (this file is built with
 * --fmad=false, so every operation rounds as on the host and the routes are identical).
 * Dynamic shared memory: X floats. */
__global__ void route_kernel(const float *logits, int X, int k, int layer, int pos0,
                             const __grid_constant__ struct fault_set fs, int32_t *ids_out,
                             float *w_out, float *kth, float *k1th)
{
    extern __shared__ float probs[];
    if (threadIdx.x != 0)
        return;
    const int t = blockIdx.x;
    const struct route_result rr =
        route_select_inline(logits + (int64_t)t * X, probs, X, k, 1 /* norm_w: qwen3moe */, &fs,
                            layer, pos0 + t, ids_out + (int64_t)t * k, w_out + (int64_t)t * k);
    kth[t] = rr.kth_logit;
    k1th[t] = rr.k1th_logit;
}

__global__ void moe_sum_kernel(float *x, const float *w, const float *y, int k, int E);

int k_local_bytes_max(size_t *out, struct gate_err *err)
{
    cudaFuncAttributes a;
    K_CUDA(cudaFuncGetAttributes(&a, route_kernel));
    size_t most = a.localSizeBytes;
    K_CUDA(cudaFuncGetAttributes(&a, moe_sum_kernel));
    *out = a.localSizeBytes > most ? a.localSizeBytes : most;
    return 0;
}

int k_route(struct k_stream *ks, const float *logits, int n, int X, int k, int layer, int pos0,
            const struct fault_set *faults, int32_t *ids, float *w, float *kth, float *k1th,
            struct gate_err *err)
{
    if (n <= 0)
        return 0;
    if (k < 1 || k > X)
        return err_set(err, ERR_INPUT, "cuda: routing needs 1 <= k <= experts (k %d, %d experts)",
                       k, X);
    route_kernel<<<n, 32, (size_t)X * sizeof(float), ks->s>>>(
        logits, X, k, layer, pos0, k_fault_value(faults), ids, w, kth, k1th);
    K_LAUNCHED(ks, "route_kernel");
    return 0;
}

__global__ void moe_sum_kernel(float *x, const float *w, const float *y, int k, int E)
{
    const int t = blockIdx.y;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= E)
        return;
    float acc = 0.0f;
    for (int s = 0; s < k; s++) /* slot order, slot 0 = highest probability */
        acc += w[(int64_t)t * k + s] * y[((int64_t)t * k + s) * E + i];
    x[(int64_t)t * E + i] += acc;
}

int k_moe_sum(struct k_stream *ks, float *x, const float *w, const float *y, int n, int k, int E,
              struct gate_err *err)
{
    if (n <= 0)
        return 0;
    dim3 grid((unsigned)((E + 255) / 256), (unsigned)n);
    moe_sum_kernel<<<grid, 256, 0, ks->s>>>(x, w, y, k, E);
    K_LAUNCHED(ks, "moe_sum_kernel");
    return 0;
}
