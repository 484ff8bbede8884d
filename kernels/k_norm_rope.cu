/* k_norm_rope.cu — RMSNorm of the residual stream, and the fused per-head Q/K RMSNorm + NEOX
 * RoPE + KV-cache append.
 *
 * CPU twins: rmsnorm_kernel ↔ engine/ref.c rmsnorm() (sum of squares in double, mean rounded to
 * float, scale = 1/sqrtf(mean + eps), y = (x * scale) * w); qk_norm_rope_kv_kernel ↔ ref.c
 * norm_rope() for every Q and K head, then the memcpy of K and V into the cache in
 * ref.c attention(). The RoPE tables are the twin's own (cuda_backend.cu builds them with the
 * same detmath code and uploads them), so the rotation differs from the twin only by rounding.
 * The skip_qk_norm fault is evaluated on the device by fault_skips_qk_norm_inline() — the
 * twin's own function — over the backend's fault set, passed by value.
 * Start reading: qk_norm_rope_kv_kernel.
 */
#include "kernels/k_ops.cuh"

#define NORM_THREADS 256

/* Sum of v over the block (blockDim.x a multiple of 32, at most 1024), in double. */
__device__ double block_sum_d(double v)
{
    __shared__ double part[32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    v = k_warp_sum_d(v);
    __syncthreads(); /* part[] may still be read by a previous call */
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    double s = 0.0;
    for (int w = 0; w < (int)(blockDim.x / 32); w++)
        s += part[w];
    return s;
}

__global__ void rmsnorm_kernel(const float *x, const float *w, float *y, int E, float eps)
{
    const float *xr = x + (int64_t)blockIdx.x * E;
    float *yr = y + (int64_t)blockIdx.x * E;
    double sum = 0.0;
    for (int i = threadIdx.x; i < E; i += blockDim.x)
        sum += (double)xr[i] * xr[i];
    sum = block_sum_d(sum);
    const float mean = (float)(sum / (double)E);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int i = threadIdx.x; i < E; i += blockDim.x)
        yr[i] = (xr[i] * scale) * w[i];
}

int k_rmsnorm(struct k_stream *ks, const float *x, const float *w, float *y, int n, int E,
              float eps, struct gate_err *err)
{
    if (n <= 0)
        return 0;
    rmsnorm_kernel<<<n, NORM_THREADS, 0, ks->s>>>(x, w, y, E, eps);
    K_LAUNCHED(ks, "rmsnorm_kernel");
    return 0;
}

__device__ __forceinline__ void kv_store(float *p, float v)
{
    *p = v;
}
__device__ __forceinline__ void kv_store(__half *p, float v)
{
    *p = __float2half_rn(v);
}

/* grid (n, nh + 2 nkv): block y < nh is Q head y, then the nkv K heads, then the nkv V heads.
 * Dynamic shared memory: hd floats. */
template <typename KV>
__global__ void
qk_norm_rope_kv_kernel(float *q, const float *k, const float *v, int pos0, const int *dpos,
                       int layer, int nh, int nkv, int hd, const float *qn, const float *kn,
                       float eps, const float *cs, const float *sn, KV *kc, KV *vc,
                       const __grid_constant__ struct fault_set faults, float rope_base)
{
    extern __shared__ float buf[];
    /* the position: the argument, or under a graph the device copy (the same int either way) */
    const int t = blockIdx.x, hh = blockIdx.y, pos = (dpos ? *dpos : pos0) + t, kvd = nkv * hd,
              half = hd / 2;
    const float kf = fault_kv_factor_inline(&faults, layer, pos); /* kv_corrupt (1: none) */
    if (hh >= nh + nkv) {                                         /* V head: append as is */
        const int h = hh - nh - nkv;
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            const float x = v[(int64_t)t * kvd + h * hd + d];
            kv_store(&vc[(int64_t)pos * kvd + h * hd + d], kf != 1.0f ? x * kf : x);
        }
        return;
    }
    const int is_q = hh < nh;
    const int h = is_q ? hh : hh - nh;
    const float *src = is_q ? q + (int64_t)t * nh * hd + h * hd : k + (int64_t)t * kvd + h * hd;
    const float *w = is_q ? qn : kn;
    for (int d = threadIdx.x; d < hd; d += blockDim.x)
        buf[d] = src[d];
    __syncthreads();
    if (!fault_skips_qk_norm_inline(&faults, layer, pos)) { /* block-uniform branch */
        double sum = 0.0;
        for (int d = threadIdx.x; d < hd; d += blockDim.x)
            sum += (double)buf[d] * buf[d];
        sum = block_sum_d(sum);
        const float mean = (float)(sum / (double)hd);
        const float scale = 1.0f / sqrtf(mean + eps);
        __syncthreads();
        for (int d = threadIdx.x; d < hd; d += blockDim.x)
            buf[d] = (buf[d] * scale) * w[d];
        __syncthreads();
    }
    const float *c = cs + (int64_t)pos * half, *s = sn + (int64_t)pos * half;
    const float rf = fault_rope_factor_inline(&faults, layer, pos); /* rope_shift (1: none) */
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float a = buf[i], b = buf[i + half];
        float ci = c[i], si = s[i];
        if (rf != 1.0f) { /* this position's angle with the shifted base, in double */
            const double ang = (double)pos * pow((double)rope_base * (double)rf, -2.0 * i / hd);
            ci = (float)cos(ang);
            si = (float)sin(ang);
        }
        float r0 = a * ci - b * si, r1 = a * si + b * ci;
        if (!is_q && kf != 1.0f) {
            r0 *= kf;
            r1 *= kf;
        }
        if (is_q) {
            float *dst = q + (int64_t)t * nh * hd + h * hd;
            dst[i] = r0;
            dst[i + half] = r1;
        } else {
            KV *dst = kc + (int64_t)pos * kvd + h * hd;
            kv_store(&dst[i], r0);
            kv_store(&dst[i + half], r1);
        }
    }
}

int k_qk_norm_rope_kv(struct k_stream *ks, float *q, const float *k, const float *v, int n,
                      int pos0, int layer, int nh, int nkv, int hd, const float *qn,
                      const float *kn, float eps, const float *cs, const float *sn, void *kc,
                      void *vc, int kv_f32, const struct fault_set *faults, float rope_base,
                      struct gate_err *err)
{
    return k_qk_norm_rope_kv_at(ks, q, k, v, n, pos0, NULL, layer, nh, nkv, hd, qn, kn, eps, cs, sn,
                                kc, vc, kv_f32, faults, rope_base, err);
}

int k_qk_norm_rope_kv_at(struct k_stream *ks, float *q, const float *k, const float *v, int n,
                         int pos0, const int *dpos, int layer, int nh, int nkv, int hd,
                         const float *qn, const float *kn, float eps, const float *cs,
                         const float *sn, void *kc, void *vc, int kv_f32,
                         const struct fault_set *faults, float rope_base, struct gate_err *err)
{
    if (n <= 0)
        return 0;
    if (!(rope_base > 0.0f) && fault_has_kind_inline(faults, FAULT_ROPE_SHIFT))
        return err_set(err, ERR_INPUT, "cuda: a rope_shift fault needs the model's RoPE base");
    dim3 grid((unsigned)n, (unsigned)(nh + 2 * nkv));
    const int threads = hd >= 128 ? 128 : 64;
    const size_t smem = (size_t)hd * sizeof(float);
    if (kv_f32)
        qk_norm_rope_kv_kernel<float><<<grid, threads, smem, ks->s>>>(
            q, k, v, pos0, dpos, layer, nh, nkv, hd, qn, kn, eps, cs, sn, (float *)kc, (float *)vc,
            k_fault_value(faults), rope_base);
    else
        qk_norm_rope_kv_kernel<__half><<<grid, threads, smem, ks->s>>>(
            q, k, v, pos0, dpos, layer, nh, nkv, hd, qn, kn, eps, cs, sn, (__half *)kc,
            (__half *)vc, k_fault_value(faults), rope_base);
    K_LAUNCHED(ks, "qk_norm_rope_kv_kernel");
    return 0;
}

/* ---- the scale fault (faults/fault.h), on any product's output ------------------------------ */

__global__ void fault_scale_kernel(const float *src, float *dst, int accumulate, int64_t total,
                                   int64_t cols, int per, int tensor, int layer, int pos0,
                                   const __grid_constant__ struct fault_set faults)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    const int row = (int)(i / cols);
    const float f = fault_scale_factor_inline(&faults, tensor, layer, pos0 + row / per);
    dst[i] = accumulate ? dst[i] + f * src[i] : f * src[i];
}

int k_fault_scale(struct k_stream *ks, const float *src, float *dst, int accumulate, int n,
                  int64_t cols, int per, int tensor, int layer, int pos0,
                  const struct fault_set *faults, struct gate_err *err)
{
    const int64_t total = (int64_t)n * cols;
    if (total <= 0)
        return 0;
    fault_scale_kernel<<<(unsigned)((total + 255) / 256), 256, 0, ks->s>>>(
        src, dst, accumulate, total, cols, per > 0 ? per : 1, tensor, layer, pos0,
        k_fault_value(faults));
    K_LAUNCHED(ks, "fault_scale_kernel");
    return 0;
}
