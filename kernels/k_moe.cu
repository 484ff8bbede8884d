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
 *
 * Two routing generations (k_stream.route; backend_config.knob[KNOB_ROUTE]): route_kernel (v1, the
 * default: lane 0 runs route_select_inline serially) and route2_kernel (v2, issue 25 §3: a
 * whole warp per token; bit-identical to route_select, the argument is at route2_kernel and in
 * docs/kernels.md "Routing v2"). The per-lane steps of v2 are __host__ __device__ (r2_*), so
 * k_test_route2_host runs the very same steps on the CPU with the lanes emulated.
 * Start reading: route_kernel, then route2_kernel.
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

/* ---- routing v2: one warp per token ------------------------------------------------------
 * Lane l owns experts l, l+32, l+64, ... (at most R2_MAX_PER_LANE of them: X <= 1024; a taken
 * set is one bit per owned expert). Every step either (a) is elementwise, the same float
 * operation as route_select_inline on the same operands (this file is built with
 * --fmad=false), or (b) is an argmax under the total order "greater value, then lower index"
 * (r2_better), whose result does not depend on the order of comparison — the same element the
 * twin's sequential scans find as long as no value is NaN (then `>` is a total preorder and a
 * scan keeping the first strictly greater element returns the lowest index of the maximum), or
 * (c) is order-dependent and stays sequential on lane 0 in the twin's order: the double sum of
 * the softmax, the renormalization and the faults (route_renorm_inline and
 * fault_apply_route_inline themselves). A NaN anywhere in logits[e] - max (a NaN logit, or
 * +Inf with +Inf as max) makes the scans order-dependent: then lane 0 runs route_select_inline
 * itself, as v1 does. */
#define R2_MAX_PER_LANE 32

/* 1 when (bv, bi) ranks before (av, ai): greater value, then lower index; ai < 0 = nothing. */
GATE_HD static inline int r2_better(float av, int ai, float bv, int bi)
{
    return bi >= 0 && (ai < 0 || bv > av || (bv == av && bi < ai));
}

/* The lane's best of its experts not in `taken` (bit m = expert lane + 32 m) by r2_better over
 * v; *bi = -1 when it has none. */
GATE_HD static inline void r2_lane_best(const float *v, int X, int lane, uint32_t taken, float *bv,
                                        int *bi)
{
    float b = 0.0f;
    int i = -1;
    for (int m = 0, e = lane; e < X; m++, e += 32)
        if (!((taken >> m) & 1u) && r2_better(b, i, v[e], e))
            b = v[e], i = e;
    *bv = b, *bi = i;
}

/* probs[e] = det_expf(logits[e] - max) for the lane's experts (route_select_inline's
 * operation); returns 1 when some logits[e] - max is NaN (the fallback's condition). */
GATE_HD static inline int r2_lane_exp(const float *logits, float max, int X, int lane, float *probs)
{
    int nan = 0;
    for (int e = lane; e < X; e += 32) {
        const float d = logits[e] - max;
        nan |= d != d;
        probs[e] = det_expf_inline(d);
    }
    return nan;
}

/* The softmax denominator in route_select_inline's order: e = 0, 1, ..., in double. */
GATE_HD static inline double r2_serial_sum(const float *probs, int X)
{
    double sum = 0.0;
    for (int e = 0; e < X; e++)
        sum += probs[e];
    return sum;
}

GATE_HD static inline void r2_lane_scale(float *probs, int X, int lane, float inv)
{
    for (int e = lane; e < X; e += 32)
        probs[e] *= inv;
}

/* The taken bit of expert e in its owner's set (e's owner is lane e % 32). */
GATE_HD static inline uint32_t r2_bit(int e)
{
    return 1u << (e >> 5);
}

/* Lane 0's end: the renormalization and the faults, route_select_inline's own calls. */
GATE_HD static inline void r2_finish(const float *probs, int X, int k, const struct fault_set *fs,
                                     int layer, int pos, int32_t *ids, float *w)
{
    route_renorm_inline(w, k); /* norm_w: qwen3moe */
    fault_apply_route_inline(fs, layer, pos, probs, X, k, ids, w);
}

__device__ static inline void r2_warp_best(float *bv, int *bi)
{
    for (int off = 16; off; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, *bv, off);
        const int oi = __shfl_xor_sync(0xffffffffu, *bi, off);
        if (r2_better(*bv, *bi, ov, oi))
            *bv = ov, *bi = oi;
    }
}

/* One block of one warp per token (X <= 32 * R2_MAX_PER_LANE, checked at launch). Dynamic
 * shared memory: X floats (the probabilities, read by lane 0's sum and faults). */
__global__ void route2_kernel(const float *logits, int X, int k, int layer, int pos0,
                              const __grid_constant__ struct fault_set fs, int32_t *ids_out,
                              float *w_out, float *kth, float *k1th)
{
    extern __shared__ float probs[];
    const int t = blockIdx.x, lane = threadIdx.x;
    const float *l = logits + (int64_t)t * X;
    int32_t *ids = ids_out + (int64_t)t * k;
    float *w = w_out + (int64_t)t * k;
    float bv;
    int bi;
    /* the max: the first maximal logit's value, as the twin's scan keeps it */
    r2_lane_best(l, X, lane, 0u, &bv, &bi);
    r2_warp_best(&bv, &bi);
    const float max = bv;
    const int nan = __any_sync(0xffffffffu, r2_lane_exp(l, max, X, lane, probs));
    __syncwarp();
    if (nan) { /* order-dependent scans: the twin itself, serially (v1) */
        if (lane == 0) {
            const struct route_result rr =
                route_select_inline(l, probs, X, k, 1, &fs, layer, pos0 + t, ids, w);
            kth[t] = rr.kth_logit;
            k1th[t] = rr.k1th_logit;
        }
        return;
    }
    float inv = 0.0f;
    if (lane == 0)
        inv = (float)(1.0 / r2_serial_sum(probs, X));
    inv = __shfl_sync(0xffffffffu, inv, 0);
    r2_lane_scale(probs, X, lane, inv);
    /* top-k on the probabilities: k warp argmaxes, each excluding the ones before */
    uint32_t taken = 0u;
    int last = -1;
    for (int j = 0; j < k; j++) {
        r2_lane_best(probs, X, lane, taken, &bv, &bi);
        r2_warp_best(&bv, &bi);
        if ((bi & 31) == lane)
            taken |= r2_bit(bi);
        if (lane == 0)
            ids[j] = bi, w[j] = bv;
        last = bi;
    }
    /* the (k+1)-th by logit among the rest (the k-th itself when k == X) */
    float k1 = l[last];
    if (k < X) {
        r2_lane_best(l, X, lane, taken, &bv, &bi);
        r2_warp_best(&bv, &bi);
        k1 = bv;
    }
    __syncwarp(); /* the scaled probabilities of every lane, for the faults */
    if (lane == 0) {
        kth[t] = l[last];
        k1th[t] = k1;
        r2_finish(probs, X, k, &fs, layer, pos0 + t, ids, w);
    }
}

/* The same steps on the host, lanes run one after another between the warp's exchanges; the
 * warp argmax emulated as the kernel's butterfly. */
static void r2_host_warp_best(float *bv, int *bi)
{
    for (int off = 16; off; off >>= 1) {
        float nv[32];
        int ni[32];
        for (int ln = 0; ln < 32; ln++) {
            nv[ln] = bv[ln], ni[ln] = bi[ln];
            if (r2_better(nv[ln], ni[ln], bv[ln ^ off], bi[ln ^ off]))
                nv[ln] = bv[ln ^ off], ni[ln] = bi[ln ^ off];
        }
        for (int ln = 0; ln < 32; ln++)
            bv[ln] = nv[ln], bi[ln] = ni[ln];
    }
}

extern "C" int k_test_route2_host(const float *logits, int n, int X, int k, int layer, int pos0,
                                  const struct fault_set *faults, int32_t *ids_out, float *w_out,
                                  float *kth, float *k1th, struct gate_err *err)
{
    if (k < 1 || k > X || X > 32 * R2_MAX_PER_LANE)
        return err_set(err, ERR_INPUT, "route v2 (host): needs 1 <= k <= experts <= %d (k %d, %d)",
                       32 * R2_MAX_PER_LANE, k, X);
    float *probs = (float *)malloc((size_t)X * sizeof(float));
    if (!probs)
        return err_set(err, ERR_ENV, "route v2 (host): out of memory for the probabilities");
    for (int t = 0; t < n; t++) {
        const float *l = logits + (int64_t)t * X;
        int32_t *ids = ids_out + (int64_t)t * k;
        float *w = w_out + (int64_t)t * k;
        float bv[32];
        int bi[32], nan = 0;
        for (int ln = 0; ln < 32; ln++)
            r2_lane_best(l, X, ln, 0u, &bv[ln], &bi[ln]);
        r2_host_warp_best(bv, bi);
        const float max = bv[0];
        for (int ln = 0; ln < 32; ln++)
            nan |= r2_lane_exp(l, max, X, ln, probs);
        if (nan) {
            const struct route_result rr =
                route_select_inline(l, probs, X, k, 1, faults, layer, pos0 + t, ids, w);
            kth[t] = rr.kth_logit, k1th[t] = rr.k1th_logit;
            continue;
        }
        const float inv = (float)(1.0 / r2_serial_sum(probs, X));
        for (int ln = 0; ln < 32; ln++)
            r2_lane_scale(probs, X, ln, inv);
        uint32_t taken[32] = {0};
        int last = -1;
        for (int j = 0; j < k; j++) {
            for (int ln = 0; ln < 32; ln++)
                r2_lane_best(probs, X, ln, taken[ln], &bv[ln], &bi[ln]);
            r2_host_warp_best(bv, bi);
            taken[bi[0] & 31] |= r2_bit(bi[0]);
            ids[j] = bi[0], w[j] = bv[0];
            last = bi[0];
        }
        float k1 = l[last];
        if (k < X) {
            for (int ln = 0; ln < 32; ln++)
                r2_lane_best(l, X, ln, taken[ln], &bv[ln], &bi[ln]);
            r2_host_warp_best(bv, bi);
            k1 = bv[0];
        }
        kth[t] = l[last], k1th[t] = k1;
        r2_finish(probs, X, k, faults, layer, pos0 + t, ids, w);
    }
    free(probs);
    return 0;
}

__global__ void moe_sum_kernel(float *x, const float *w, const float *y, int k, int E);

int k_local_bytes_max(size_t *out, struct gate_err *err)
{
    cudaFuncAttributes a;
    K_CUDA(cudaFuncGetAttributes(&a, route_kernel));
    size_t most = a.localSizeBytes;
    K_CUDA(cudaFuncGetAttributes(&a, moe_sum_kernel));
    most = a.localSizeBytes > most ? a.localSizeBytes : most;
    K_CUDA(cudaFuncGetAttributes(&a, route2_kernel));
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
    if (ks->route == 2 && X <= 32 * R2_MAX_PER_LANE) { /* v2; beyond 1024 experts v1 runs */
        route2_kernel<<<n, 32, (size_t)X * sizeof(float), ks->s>>>(
            logits, X, k, layer, pos0, k_fault_value(faults), ids, w, kth, k1th);
        K_LAUNCHED(ks, "route2_kernel");
        return 0;
    }
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
