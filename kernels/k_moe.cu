/* k_moe.cu — MoE routing on the device and the weighted sum of the experts' outputs.
 *
 * CPU twins: route_kernel ↔ engine/route.c route_select() followed by faults/fault.c
 * fault_apply_route() — the same steps in the same order (softmax with the max subtracted,
 * probabilities scaled by 1/sum; k selection passes taking the highest remaining probability,
 * lowest id on ties; the (k+1)-th expert by logit; renormalization with the sum clamped at
 * ROUTE_MIN_WEIGHT_SUM; then every routing fault covering (layer, pos)). The only difference is
 * expf vs det_expf, which can flip a selection only at an exact near tie (the parity gate's
 * routing report names such layers). moe_sum_kernel ↔ the slot-order weighted sum at the end of
 * ref.c moe() plus the residual add of ffn().
 *
 * The selected ids stay on the device: the expert GEMVs (k_gemv with ids) read them there, so
 * the step needs no host synchronization between router and experts.
 * Start reading: route_kernel.
 */
#include "engine/route.h"
#include "kernels/k_ops.cuh"

/* One block of one warp per token; lane 0 routes serially (X * k steps: tiny next to the GEMVs,
 * and serial code mirrors route.c line by line). Dynamic shared memory: X floats. */
__global__ void route_kernel(const float *logits, int X, int k, int layer, int pos0,
                             struct k_faults f, int32_t *ids_out, float *w_out, float *kth,
                             float *k1th)
{
    extern __shared__ float probs[];
    if (threadIdx.x != 0)
        return;
    const int t = blockIdx.x, pos = pos0 + t;
    const float *l = logits + (int64_t)t * X;
    int32_t *ids = ids_out + (int64_t)t * k;
    float *w = w_out + (int64_t)t * k;
    float max = l[0];
    for (int e = 1; e < X; e++)
        if (l[e] > max)
            max = l[e];
    double sum = 0.0;
    for (int e = 0; e < X; e++) {
        probs[e] = expf(l[e] - max);
        sum += probs[e];
    }
    const float inv = (float)(1.0 / sum);
    for (int e = 0; e < X; e++)
        probs[e] *= inv;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < X; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++)
                taken |= ids[i] == e;
            if (!taken && (best < 0 || probs[e] > probs[best]))
                best = e;
        }
        ids[j] = best;
        w[j] = probs[best];
    }
    float kl = l[ids[k - 1]], k1l = kl;
    if (k < X) {
        int next = -1;
        for (int e = 0; e < X; e++) {
            int taken = 0;
            for (int i = 0; i < k; i++)
                taken |= ids[i] == e;
            if (!taken && (next < 0 || l[e] > l[next]))
                next = e;
        }
        k1l = l[next];
    }
    kth[t] = kl;
    k1th[t] = k1l;
    float s = 0.0f; /* norm_w: always on for qwen3moe */
    for (int j = 0; j < k; j++)
        s += w[j];
    if (s < ROUTE_MIN_WEIGHT_SUM)
        s = ROUTE_MIN_WEIGHT_SUM;
    for (int j = 0; j < k; j++)
        w[j] /= s;
    /* fault_apply_route(), line by line */
    for (int i = 0; i < f.n; i++) {
        const int kind = f.kind[i];
        if (kind != FAULT_WRONG_EXPERT && kind != FAULT_DROPPED_EXPERT &&
            kind != FAULT_UNIFORM_WEIGHTS)
            continue;
        if (!k_fault_applies(f, i, layer, pos))
            continue;
        const int r = f.rank[i] < k ? f.rank[i] : k - 1;
        if (kind == FAULT_WRONG_EXPERT) {
            int best = -1;
            for (int e = 0; e < X; e++) {
                int taken = 0;
                for (int j = 0; j < k; j++)
                    taken |= ids[j] == e;
                if (!taken && (best < 0 || probs[e] > probs[best]))
                    best = e;
            }
            if (best < 0)
                continue;
            ids[r] = best;
        } else if (kind == FAULT_DROPPED_EXPERT) {
            if (k < 2)
                w[r] = 0.0f;
            else {
                float sm = 0.0f;
                for (int j = 0; j < k; j++)
                    if (j != r)
                        sm += w[j];
                for (int j = 0; j < k; j++)
                    w[j] = (j == r || sm <= 0.0f) ? 0.0f : w[j] / sm;
            }
        } else {
            for (int j = 0; j < k; j++)
                w[j] = 1.0f / (float)k;
        }
    }
}

int k_route(struct k_stream *ks, const float *logits, int n, int X, int k, int layer, int pos0,
            const struct k_faults *faults, int32_t *ids, float *w, float *kth, float *k1th,
            struct gate_err *err)
{
    if (n <= 0)
        return 0;
    if (k < 1 || k > X)
        return err_set(err, ERR_INPUT, "cuda: routing needs 1 <= k <= experts (k %d, %d experts)",
                       k, X);
    route_kernel<<<n, 32, (size_t)X * sizeof(float), ks->s>>>(logits, X, k, layer, pos0,
                                                               *faults, ids, w, kth, k1th);
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
