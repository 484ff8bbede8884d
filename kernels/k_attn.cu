/* k_attn.cu — causal GQA attention of n query tokens over the device KV cache.
 *
 * CPU twin: engine/ref.c attn_heads(): scores q·k * 1/sqrt(hd) for keys 0..pos, softmax
 * (max subtracted, exp, sum, multiply by 1/sum), output = Σ p_i v_i; query head h reads kv head
 * h / (nh / nkv). The cache holds K after norm + RoPE and V as is, in FP32 or FP16 (FP16 is the
 * default: the rounding of K and V is the documented difference, docs/kernels.md).
 *
 * One block per (token, query head); the scores of all keys live in dynamic shared memory
 * (n_ctx floats, k_attention_prepare checks the device can hold them). Warps take keys in turn
 * and their lanes split the head dimension, so cache rows are read coalesced.
 * TODO (docs/kernels.md): split-KV (flash-decoding) for long contexts, where one block per head
 * leaves most SMs idle at batch 1.
 * Start reading: attn_kernel.
 */
#include "kernels/k_ops.cuh"

#define ATTN_THREADS 128

__device__ __forceinline__ float kv_load(const float *p)
{
    return *p;
}
__device__ __forceinline__ float kv_load(const __half *p)
{
    return __half2float(*p);
}

__device__ float block_reduce_f(float v, int is_max)
{
    __shared__ float part[32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    v = is_max ? k_warp_max(v) : k_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    float r = part[0];
    for (int w = 1; w < (int)(blockDim.x / 32); w++)
        r = is_max ? fmaxf(r, part[w]) : r + part[w];
    return r;
}

template <typename KV>
__global__ void attn_kernel(const float *q, const KV *kc, const KV *vc, float *out, int pos0,
                            int nh, int nkv, int hd, float scale, int layer,
                            const __grid_constant__ struct fault_set faults)
{
    extern __shared__ float sm[];
    float *qs = sm;     /* hd */
    float *s = sm + hd; /* pos + 1 scores */
    const int t = blockIdx.x, h = blockIdx.y;
    /* drop_diag: the query's own key left out (block-uniform); at position 0 nothing is left */
    const int pos = pos0 + t - fault_drops_diag_inline(&faults, layer, pos0 + t);
    if (pos < 0) {
        for (int d = threadIdx.x; d < hd; d += blockDim.x)
            out[(int64_t)t * nh * hd + h * hd + d] = 0.0f;
        return;
    }
    const int g = h / (nh / nkv), kvd = nkv * hd;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    const float *qv = q + (int64_t)t * nh * hd + h * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x)
        qs[d] = qv[d];
    __syncthreads();
    float mx = -INFINITY;
    for (int p = warp; p <= pos; p += nw) {
        const KV *kr = kc + (int64_t)p * kvd + g * hd;
        float acc = 0.0f;
        for (int d = lane; d < hd; d += 32)
            acc += qs[d] * kv_load(&kr[d]);
        acc = k_warp_sum(acc) * scale;
        if (lane == 0)
            s[p] = acc;
        mx = fmaxf(mx, acc);
    }
    mx = block_reduce_f(mx, 1);
    float sum = 0.0f;
    for (int p = threadIdx.x; p <= pos; p += blockDim.x) {
        const float e = expf(s[p] - mx);
        s[p] = e;
        sum += e;
    }
    sum = block_reduce_f(sum, 0); /* its barriers also publish s[] */
    const float inv = 1.0f / sum;
    float *o = out + (int64_t)t * nh * hd + h * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int p = 0; p <= pos; p++)
            acc += (s[p] * inv) * kv_load(&vc[(int64_t)p * kvd + g * hd + d]);
        o[d] = acc;
    }
}

static size_t attn_smem(int n_keys, int hd)
{
    return (size_t)(hd + n_keys) * sizeof(float);
}

int k_attention_prepare(int n_ctx, int hd, struct gate_err *err)
{
    int dev = 0, optin = 0;
    K_CUDA(cudaGetDevice(&dev));
    K_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    const size_t need = attn_smem(n_ctx, hd);
    if (need > (size_t)optin)
        return err_set(err, ERR_ENV,
                       "cuda: attention over %d positions needs %zu bytes of"
                       " shared memory per block; the device allows %d (split-KV attention is"
                       " not implemented yet: use a smaller context)",
                       n_ctx, need, optin);
    K_CUDA(cudaFuncSetAttribute(attn_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)need));
    K_CUDA(cudaFuncSetAttribute(attn_kernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)need));
    return 0;
}

int k_attention(struct k_stream *ks, const float *q, const void *kc, const void *vc, int kv_f32,
                float *out, int n, int pos0, int nh, int nkv, int hd, struct gate_err *err)
{
    return k_attention_faulted(ks, q, kc, vc, kv_f32, out, n, pos0, nh, nkv, hd, 0, NULL, err);
}

int k_attention_faulted(struct k_stream *ks, const float *q, const void *kc, const void *vc,
                        int kv_f32, float *out, int n, int pos0, int nh, int nkv, int hd, int layer,
                        const struct fault_set *faults, struct gate_err *err)
{
    if (n <= 0)
        return 0;
    dim3 grid((unsigned)n, (unsigned)nh);
    const size_t smem = attn_smem(pos0 + n, hd);
    const float scale = 1.0f / sqrtf((float)hd);
    if (kv_f32)
        attn_kernel<float><<<grid, ATTN_THREADS, smem, ks->s>>>(
            q, (const float *)kc, (const float *)vc, out, pos0, nh, nkv, hd, scale, layer,
            k_fault_value(faults));
    else
        attn_kernel<__half><<<grid, ATTN_THREADS, smem, ks->s>>>(
            q, (const __half *)kc, (const __half *)vc, out, pos0, nh, nkv, hd, scale, layer,
            k_fault_value(faults));
    K_LAUNCHED(ks, "attn_kernel");
    return 0;
}
