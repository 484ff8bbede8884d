/* k_attn.cu — causal GQA attention of n query tokens over the device KV cache.
 *
 * CPU twin: engine/ref.c attn_heads(): scores q·k * 1/sqrt(hd) for keys 0..pos, softmax
 * (max subtracted, exp, sum, multiply by 1/sum), output = Σ p_i v_i; query head h reads kv head
 * h / (nh / nkv). The cache holds K after norm + RoPE and V as is, in FP32 or FP16 (FP16 is the
 * default: the rounding of K and V is the documented difference, docs/kernels.md).
 *
 * v1 (attn_kernel): one block per (token, query head); the scores of all keys live in dynamic
 * shared memory (n_ctx floats, k_attention_prepare checks the device can hold them). Warps take
 * keys in turn and their lanes split the head dimension, so cache rows are read coalesced.
 *
 * split (attn_split_kernel + attn_combine_kernel, issue 25 §3; backend_config.knob[KNOB_ATTN] =
 * "split"): flash-decoding. The keys are cut into splits of SPLIT_KEYS (the partition depends on
 * nothing else: not on the grid, the context size or the launch); one block per (split, KV head,
 * token) serves up to SPLIT_HEADS of that KV head's query heads (GQA: each K and V row is read once
 * for all of them, not once per query head), writing per head a partial (m = max score, l = sum of
 * exp(s - m), o = sum of exp(s - m) v) to a workspace; the combine, one block per (query head,
 * token), folds the splits in split order (M = max m, L = sum exp(m - M) l, O = sum exp(m - M) o,
 * out = O * (1/L)). Deterministic: every sum has one fixed order. The grid is sized by a key
 * capacity (max_keys), never by the current length: the position may be read from device memory
 * (dpos), splits past the keys exit, so one launch (a CUDA graph's) serves every position.
 * The arithmetic runs on the host too (k_test_attention_split_host): the same step functions,
 * lanes and warps in turn; the difference from the twin is bounded in docs/kernels.md.
 * Start reading: attn_kernel, then attn_split_kernel.
 */
#include "kernels/k_ops.cuh"

#define ATTN_THREADS 128

static int attn_v1(struct k_stream *ks, const float *q, const void *kc, const void *vc, int kv_f32,
                   float *out, int n, int pos0, const int *dpos, int max_keys, int nh, int nkv,
                   int hd, int layer, const struct fault_set *faults, struct gate_err *err);

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

/* The token's position as this launch sees it: the device copy when there is one (a graph
 * replayed at every position), else the argument; the drop_diag fault leaves the own key out.
 * Both kernels of the split and attn_kernel compute it the same way. */
__device__ __forceinline__ int attn_pos(const int *dpos, int pos0, int t, int layer,
                                        const struct fault_set *faults)
{
    const int base = dpos ? *dpos : pos0;
    return base + t - fault_drops_diag_inline(faults, layer, base + t);
}

template <typename KV>
__global__ void attn_kernel(const float *q, const KV *kc, const KV *vc, float *out, int pos0,
                            const int *dpos, int nh, int nkv, int hd, float scale, int layer,
                            const __grid_constant__ struct fault_set faults)
{
    extern __shared__ float sm[];
    float *qs = sm;     /* hd */
    float *s = sm + hd; /* pos + 1 scores */
    const int t = blockIdx.x, h = blockIdx.y;
    /* drop_diag: the query's own key left out (block-uniform); at position 0 nothing is left */
    const int pos = attn_pos(dpos, pos0, t, layer, &faults);
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

/* attn_kernel over n queries; the shared memory holds max_keys scores (pos0 + n eagerly, the
 * context size under a graph: the same computation, only the allocation differs). */
static int attn_v1(struct k_stream *ks, const float *q, const void *kc, const void *vc, int kv_f32,
                   float *out, int n, int pos0, const int *dpos, int max_keys, int nh, int nkv,
                   int hd, int layer, const struct fault_set *faults, struct gate_err *err)
{
    if (n <= 0)
        return 0;
    dim3 grid((unsigned)n, (unsigned)nh);
    const size_t smem = attn_smem(max_keys, hd);
    const float scale = 1.0f / sqrtf((float)hd);
    if (kv_f32)
        attn_kernel<float><<<grid, ATTN_THREADS, smem, ks->s>>>(
            q, (const float *)kc, (const float *)vc, out, pos0, dpos, nh, nkv, hd, scale, layer,
            k_fault_value(faults));
    else
        attn_kernel<__half><<<grid, ATTN_THREADS, smem, ks->s>>>(
            q, (const __half *)kc, (const __half *)vc, out, pos0, dpos, nh, nkv, hd, scale, layer,
            k_fault_value(faults));
    K_LAUNCHED(ks, "attn_kernel");
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
    return attn_v1(ks, q, kc, vc, kv_f32, out, n, pos0, NULL, pos0 + n, nh, nkv, hd, layer, faults,
                   err);
}

/* ---- split-KV attention (attn split) --------------------------------------------------------- */

#define SPLIT_KEYS 128    /* keys per split */
#define SPLIT_THREADS 128 /* 4 warps */
#define SPLIT_WARPS (SPLIT_THREADS / 32)
#define SPLIT_HEADS 8    /* query heads per block: a larger GQA group takes several blocks */
#define SPLIT_HD_MAX 256 /* head dimension: at most this, a multiple of 4 */
#define SPLIT_AHEAD 4    /* keys per warp whose loads are in flight together */

/* unroll pragmas for the device pass only (the host compiler runs the same step functions for
 * k_test_attention_split_host and does not know them) */
#ifdef __CUDA_ARCH__
#define AS_UNROLL _Pragma("unroll")
#define AS_UNROLL_8 _Pragma("unroll 8")
#else
#define AS_UNROLL
#define AS_UNROLL_8
#endif

/* 4 consecutive cache elements (16-byte aligned for FP32, 8 for FP16), as float. */
__host__ __device__ __forceinline__ float4 as_ld4(const float *p)
{
#ifdef __CUDA_ARCH__
    return *(const float4 *)p;
#else
    float4 v;
    memcpy(&v, p, sizeof v);
    return v;
#endif
}
__host__ __device__ __forceinline__ float4 as_ld4(const __half *p)
{
    uint2 u;
#ifdef __CUDA_ARCH__
    u = *(const uint2 *)p;
    return make_float4(k_h2f((uint16_t)(u.x & 0xFFFF)), k_h2f((uint16_t)(u.x >> 16)),
                       k_h2f((uint16_t)(u.y & 0xFFFF)), k_h2f((uint16_t)(u.y >> 16)));
#else
    memcpy(&u, p, sizeof u);
    return make_float4(
        quant_fp16_to_f32((uint16_t)(u.x & 0xFFFF)), quant_fp16_to_f32((uint16_t)(u.x >> 16)),
        quant_fp16_to_f32((uint16_t)(u.y & 0xFFFF)), quant_fp16_to_f32((uint16_t)(u.y >> 16)));
#endif
}
__host__ __device__ __forceinline__ float as_ld1(const float *p)
{
    return *p;
}
__host__ __device__ __forceinline__ float as_ld1(const __half *p)
{
#ifdef __CUDA_ARCH__
    return __half2float(*p);
#else
    uint16_t u;
    memcpy(&u, p, sizeof u);
    return quant_fp16_to_f32(u);
#endif
}

/* One lane's 16-byte chunks of a key row: elements 4c..4c+3 for c = lane, lane + 32 (the second
 * only when hd > 128; a chunk past hd is zero and never used). */
template <typename KV>
__host__ __device__ __forceinline__ void as_load_k(float4 *k, const KV *kr, int hd, int lane)
{
    const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    k[0] = 4 * lane < hd ? as_ld4(kr + 4 * lane) : z;
    k[1] = 4 * (lane + 32) < hd ? as_ld4(kr + 4 * (lane + 32)) : z;
}

/* One lane's share of the scores of one key from its chunks (as_load_k): each head's products
 * chained by fmaf in element order, chunk lane then lane + 32 (explicit fmaf: no contraction is
 * left to the compiler, so host and device do the same operations). qs: gn heads of hd floats. */
__host__ __device__ __forceinline__ void as_score_regs(float *acc, const float *qs, const float4 *k,
                                                       int hd, int gn, int lane)
{
    AS_UNROLL
    for (int j = 0; j < SPLIT_HEADS; j++)
        acc[j] = 0.0f;
    AS_UNROLL
    for (int r = 0; r < 2; r++) {
        const int c = lane + 32 * r;
        if (4 * c >= hd)
            break;
        AS_UNROLL
        for (int j = 0; j < SPLIT_HEADS; j++)
            if (j < gn) {
                const float *qj = qs + j * hd + 4 * c;
                acc[j] = fmaf(qj[0], k[r].x, acc[j]);
                acc[j] = fmaf(qj[1], k[r].y, acc[j]);
                acc[j] = fmaf(qj[2], k[r].z, acc[j]);
                acc[j] = fmaf(qj[3], k[r].w, acc[j]);
            }
    }
}

/* One thread's output element d of a split: o[j] = sum over the split's keys, in key order, of
 * e[j][i] * v_i[d] (fmaf chain). e: gn rows of SPLIT_KEYS weights. */
template <typename KV>
__host__ __device__ __forceinline__ void as_value(float *o, const float *e, const KV *vcol,
                                                  int64_t kvd, int kn, int gn)
{
    AS_UNROLL
    for (int j = 0; j < SPLIT_HEADS; j++)
        o[j] = 0.0f;
    AS_UNROLL_8
    for (int i = 0; i < kn; i++) {
        const float v = as_ld1(vcol + (int64_t)i * kvd);
        AS_UNROLL
        for (int j = 0; j < SPLIT_HEADS; j++)
            if (j < gn)
                o[j] = fmaf(e[j * SPLIT_KEYS + i], v, o[j]);
    }
}

/* The combine of one output element: splits 0..ns-1 in order. ml: (m, l) pairs; o: the
 * split's partial of this element at o[s * hd]. */
__host__ __device__ __forceinline__ float as_combine(const float *ml, const float *o, int ns,
                                                     int hd)
{
    float M = -INFINITY;
    for (int s = 0; s < ns; s++)
        M = fmaxf(M, ml[2 * s]);
    float L = 0.0f, O = 0.0f;
    for (int s = 0; s < ns; s++) {
        const float w = expf(ml[2 * s] - M);
        L = fmaf(w, ml[2 * s + 1], L);
        O = fmaf(w, o[(int64_t)s * hd], O);
    }
    return O * (1.0f / L);
}

/* grid (max_splits, nkv * ceil(G / SPLIT_HEADS), n), SPLIT_THREADS threads; G = nh / nkv.
 * part: n * nh * max_splits partials of hd floats (o), then as many (m, l) pairs. */
template <typename KV>
__global__ void __launch_bounds__(SPLIT_THREADS, 6)
    attn_split_kernel(const float *q, const KV *kc, const KV *vc, float *part, int pos0,
                      const int *dpos, int max_splits, int nh, int nkv, int hd, float scale,
                      int layer, const __grid_constant__ struct fault_set faults)
{
    __shared__ __align__(16) float qs[SPLIT_HEADS * SPLIT_HD_MAX];
    __shared__ float e[SPLIT_HEADS * SPLIT_KEYS];
    const int s = blockIdx.x, t = blockIdx.z;
    const int G = nh / nkv, nch = (G + SPLIT_HEADS - 1) / SPLIT_HEADS;
    const int g = blockIdx.y / nch, h0 = g * G + (blockIdx.y % nch) * SPLIT_HEADS;
    const int gn = min(SPLIT_HEADS, g * G + G - h0);
    const int n_keys = attn_pos(dpos, pos0, t, layer, &faults) + 1, k0 = s * SPLIT_KEYS;
    if (k0 >= n_keys) /* an idle split: the combine reads only the splits that hold keys */
        return;
    const int kn = min(SPLIT_KEYS, n_keys - k0), kvd = nkv * hd;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = threadIdx.x; i < gn * hd; i += SPLIT_THREADS)
        qs[i] = q[(int64_t)t * nh * hd + (int64_t)h0 * hd + i];
    __syncthreads();
    /* scores: warp w takes keys w, w + 4, ...; its lanes split the row (one 16-byte load each),
     * the loads of SPLIT_AHEAD keys issued before the first of them is reduced */
    for (int i0 = warp; i0 < kn; i0 += SPLIT_WARPS * SPLIT_AHEAD) {
        float4 kk[SPLIT_AHEAD][2];
        AS_UNROLL
        for (int u = 0; u < SPLIT_AHEAD; u++)
            if (i0 + SPLIT_WARPS * u < kn)
                as_load_k(kk[u], kc + (int64_t)(k0 + i0 + SPLIT_WARPS * u) * kvd + g * hd, hd,
                          lane);
        AS_UNROLL
        for (int u = 0; u < SPLIT_AHEAD; u++) {
            const int i = i0 + SPLIT_WARPS * u;
            if (i >= kn)
                break;
            float acc[SPLIT_HEADS];
            as_score_regs(acc, qs, kk[u], hd, gn, lane);
            AS_UNROLL
            for (int j = 0; j < SPLIT_HEADS; j++)
                if (j < gn) {
                    const float sc = k_warp_sum(acc[j]) * scale;
                    if (lane == 0)
                        e[j * SPLIT_KEYS + i] = sc;
                }
        }
    }
    __syncthreads();
    /* the split's softmax per head: warp w takes heads w, w + 4; lane l keys l, l + 32, ... */
    float *pml = part + (int64_t)gridDim.z * nh * max_splits * hd; /* after every o */
    for (int j = warp; j < gn; j += SPLIT_WARPS) {
        float m = -INFINITY;
        for (int i = lane; i < kn; i += 32)
            m = fmaxf(m, e[j * SPLIT_KEYS + i]);
        m = k_warp_max(m);
        float l = 0.0f;
        for (int i = lane; i < kn; i += 32) {
            const float x = expf(e[j * SPLIT_KEYS + i] - m);
            e[j * SPLIT_KEYS + i] = x;
            l = l + x;
        }
        l = k_warp_sum(l);
        if (lane == 0) {
            float *ml = pml + (((int64_t)t * nh + h0 + j) * max_splits + s) * 2;
            ml[0] = m;
            ml[1] = l;
        }
    }
    __syncthreads();
    /* values: thread d of the row, every head of the block from one read of v[d] */
    for (int d = threadIdx.x; d < hd; d += SPLIT_THREADS) {
        float o[SPLIT_HEADS];
        as_value(o, e, vc + (int64_t)k0 * kvd + g * hd + d, kvd, kn, gn);
        AS_UNROLL
        for (int j = 0; j < SPLIT_HEADS; j++)
            if (j < gn)
                part[(((int64_t)t * nh + h0 + j) * max_splits + s) * hd + d] = o[j];
    }
}

/* grid (nh, n), SPLIT_THREADS threads: out (n, nh*hd) from the partials of the splits that hold
 * keys. No keys (drop_diag at position 0): zeros, as attn_kernel. More keys than the splits
 * launched (a caller's capacity too small): NaN, never a silent partial answer. */
__global__ void __launch_bounds__(SPLIT_THREADS)
    attn_combine_kernel(const float *part, float *out, int pos0, const int *dpos, int max_splits,
                        int nh, int hd, int layer, const __grid_constant__ struct fault_set faults)
{
    const int h = blockIdx.x, t = blockIdx.y;
    const int n_keys = attn_pos(dpos, pos0, t, layer, &faults) + 1;
    const int ns = (n_keys + SPLIT_KEYS - 1) / SPLIT_KEYS;
    float *o = out + (int64_t)t * nh * hd + (int64_t)h * hd;
    const int64_t at = ((int64_t)t * nh + h) * max_splits;
    const float *ml = part + (int64_t)gridDim.y * nh * max_splits * hd + at * 2;
    for (int d = threadIdx.x; d < hd; d += SPLIT_THREADS)
        o[d] = n_keys <= 0       ? 0.0f
               : ns > max_splits ? __int_as_float(0x7fc00000)
                                 : as_combine(ml, part + at * hd + d, ns, hd);
}

int k_attention_split_shape(int nh, int nkv, int hd)
{
    return nkv > 0 && nh % nkv == 0 && hd > 0 && hd <= SPLIT_HD_MAX && hd % 4 == 0;
}

int k_attention_split_splits(int max_keys)
{
    return max_keys > 0 ? (max_keys + SPLIT_KEYS - 1) / SPLIT_KEYS : 1;
}

size_t k_attention_split_floats(int n, int nh, int max_keys, int hd)
{
    return (size_t)n * (size_t)nh * (size_t)k_attention_split_splits(max_keys) * (size_t)(hd + 2);
}

static int attn_split(struct k_stream *ks, const float *q, const void *kc, const void *vc,
                      int kv_f32, float *out, int n, int pos0, const int *dpos, int max_keys,
                      int nh, int nkv, int hd, int layer, const struct fault_set *faults,
                      float *part, struct gate_err *err)
{
    if (n <= 0)
        return 0;
    if (!k_attention_split_shape(nh, nkv, hd) || !part)
        return err_set(err, ERR_INPUT,
                       "cuda: split attention needs a head dimension of at most %d, a multiple"
                       " of 4, whole GQA groups and a workspace (hd %d, heads %d/%d%s)",
                       SPLIT_HD_MAX, hd, nh, nkv, part ? "" : ", no workspace");
    const int ms = k_attention_split_splits(max_keys), G = nh / nkv;
    const int nch = (G + SPLIT_HEADS - 1) / SPLIT_HEADS;
    const float scale = 1.0f / sqrtf((float)hd);
    const struct fault_set fv = k_fault_value(faults);
    dim3 grid((unsigned)ms, (unsigned)(nkv * nch), (unsigned)n);
    if (kv_f32)
        attn_split_kernel<float>
            <<<grid, SPLIT_THREADS, 0, ks->s>>>(q, (const float *)kc, (const float *)vc, part, pos0,
                                                dpos, ms, nh, nkv, hd, scale, layer, fv);
    else
        attn_split_kernel<__half>
            <<<grid, SPLIT_THREADS, 0, ks->s>>>(q, (const __half *)kc, (const __half *)vc, part,
                                                pos0, dpos, ms, nh, nkv, hd, scale, layer, fv);
    K_LAUNCHED(ks, "attn_split_kernel");
    attn_combine_kernel<<<dim3((unsigned)nh, (unsigned)n), SPLIT_THREADS, 0, ks->s>>>(
        part, out, pos0, dpos, ms, nh, hd, layer, fv);
    K_LAUNCHED(ks, "attn_combine_kernel");
    return 0;
}

int k_attention_at(struct k_stream *ks, const float *q, const void *kc, const void *vc, int kv_f32,
                   float *out, int n, int pos0, const int *dpos, int max_keys, int nh, int nkv,
                   int hd, int layer, const struct fault_set *faults, float *part,
                   struct gate_err *err)
{
    if (!dpos && max_keys < pos0 + n)
        return err_set(err, ERR_INPUT, "cuda: attention over %d keys with a capacity of %d",
                       pos0 + n, max_keys);
    if (ks->attn == 2 && n <= K_ATTN_SPLIT_TOKENS)
        return attn_split(ks, q, kc, vc, kv_f32, out, n, pos0, dpos, max_keys, nh, nkv, hd, layer,
                          faults, part, err);
    return attn_v1(ks, q, kc, vc, kv_f32, out, n, pos0, dpos, max_keys, nh, nkv, hd, layer, faults,
                   err);
}

/* ---- the split's arithmetic on the host ------------------------------------------------------ */

/* k_warp_sum as lane 0 sees it: v[l] += v[l ^ o] for o = 16, 8, 4, 2, 1, all lanes at once. */
static float host_warp_sum(float *v)
{
    float w[32];
    for (int o = 16; o > 0; o >>= 1) {
        for (int l = 0; l < 32; l++)
            w[l] = v[l] + v[l ^ o];
        memcpy(v, w, sizeof w);
    }
    return v[0];
}

extern "C" int k_test_attention_split_host(const float *q, const float *kc, const float *vc, int n,
                                           int pos0, int nh, int nkv, int hd, int max_keys,
                                           int layer, const struct fault_set *faults, float *out,
                                           struct gate_err *err)
{
    if (!k_attention_split_shape(nh, nkv, hd) || n <= 0 || pos0 < 0 || max_keys < pos0 + n)
        return err_set(err, ERR_INPUT,
                       "k_test_attention_split_host: no split kernel for hd %d heads %d/%d, %d"
                       " tokens at %d, capacity %d",
                       hd, nh, nkv, n, pos0, max_keys);
    const int ms = k_attention_split_splits(max_keys), G = nh / nkv, kvd = nkv * hd;
    const int nch = (G + SPLIT_HEADS - 1) / SPLIT_HEADS;
    const float scale = 1.0f / sqrtf((float)hd);
    const struct fault_set fv = k_fault_value(faults);
    const size_t n_part = k_attention_split_floats(n, nh, max_keys, hd);
    float *part = (float *)malloc(n_part * sizeof(float));
    float *qs = (float *)malloc(SPLIT_HEADS * SPLIT_HD_MAX * sizeof(float));
    float *e = (float *)malloc(SPLIT_HEADS * SPLIT_KEYS * sizeof(float));
    if (!part || !qs || !e) {
        free(part), free(qs), free(e);
        return err_set(err, ERR_ENV, "k_test_attention_split_host: no host memory for partials");
    }
    for (size_t i = 0; i < n_part; i++) /* what no split writes stays NaN: read, it shows */
        part[i] = NAN;
    float *pml = part + (size_t)n * nh * ms * hd;
    for (int t = 0; t < n; t++) {
        const int p = pos0 + t, n_keys = p - fault_drops_diag_inline(&fv, layer, p) + 1;
        for (int y = 0; y < nkv * nch; y++)
            for (int s = 0; s < ms; s++) { /* one block of attn_split_kernel, in its steps */
                const int g = y / nch, h0 = g * G + (y % nch) * SPLIT_HEADS;
                const int gn = SPLIT_HEADS < g * G + G - h0 ? SPLIT_HEADS : g * G + G - h0;
                const int k0 = s * SPLIT_KEYS;
                if (k0 >= n_keys)
                    continue;
                const int kn = SPLIT_KEYS < n_keys - k0 ? SPLIT_KEYS : n_keys - k0;
                memcpy(qs, q + (size_t)t * nh * hd + (size_t)h0 * hd, (size_t)gn * hd * 4);
                for (int i = 0; i < kn; i++) { /* scores: the 32 lanes of the key's warp */
                    float lanes[SPLIT_HEADS][32];
                    for (int lane = 0; lane < 32; lane++) {
                        float acc[SPLIT_HEADS];
                        float4 kk[2];
                        as_load_k(kk, kc + (size_t)(k0 + i) * kvd + (size_t)g * hd, hd, lane);
                        as_score_regs(acc, qs, kk, hd, gn, lane);
                        for (int j = 0; j < SPLIT_HEADS; j++)
                            lanes[j][lane] = acc[j];
                    }
                    for (int j = 0; j < gn; j++)
                        e[j * SPLIT_KEYS + i] = host_warp_sum(lanes[j]) * scale;
                }
                for (int j = 0; j < gn; j++) { /* the softmax of head j: 32 lanes */
                    float m = -INFINITY, ls[32];
                    for (int i = 0; i < kn; i++) /* a max: its order does not matter */
                        m = fmaxf(m, e[j * SPLIT_KEYS + i]);
                    for (int lane = 0; lane < 32; lane++) {
                        ls[lane] = 0.0f;
                        for (int i = lane; i < kn; i += 32) {
                            const float x = expf(e[j * SPLIT_KEYS + i] - m);
                            e[j * SPLIT_KEYS + i] = x;
                            ls[lane] = ls[lane] + x;
                        }
                    }
                    const float l = host_warp_sum(ls);
                    float *ml = pml + (((size_t)t * nh + h0 + j) * ms + s) * 2;
                    ml[0] = m;
                    ml[1] = l;
                }
                for (int d = 0; d < hd; d++) { /* values: thread d */
                    float o[SPLIT_HEADS];
                    as_value(o, e, vc + (size_t)k0 * kvd + (size_t)g * hd + d, kvd, kn, gn);
                    for (int j = 0; j < gn; j++)
                        part[(((size_t)t * nh + h0 + j) * ms + s) * hd + d] = o[j];
                }
            }
        for (int h = 0; h < nh; h++) { /* attn_combine_kernel's block (h, t) */
            const int ns = (n_keys + SPLIT_KEYS - 1) / SPLIT_KEYS;
            const size_t at = ((size_t)t * nh + h) * ms;
            float *o = out + (size_t)t * nh * hd + (size_t)h * hd;
            for (int d = 0; d < hd; d++)
                o[d] = n_keys <= 0 ? 0.0f : as_combine(pml + at * 2, part + at * hd + d, ns, hd);
        }
    }
    free(part), free(qs), free(e);
    return 0;
}
