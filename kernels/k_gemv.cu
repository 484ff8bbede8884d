/* k_gemv.cu — quantized GEMV over weights in their GGUF block format, FP32 activations and
 * accumulation; the embedding lookup; the argmax of the logits. Also the small shared helpers
 * of k_common.cuh (error records, fault copies, supported types).
 *
 * CPU twins: gemv / gemv_swiglu ↔ engine/ref.c matmul() and swiglu() (quant_dequant_row of each
 * weight row, then a float dot product); embed ↔ quant_dequant_row() of the token's row;
 * argmax ↔ the first maximum of the logits.
 *
 * Layout of the GEMV: one warp per (output row, vector); lane l multiplies element 32g + l of
 * every 32-element group g of the row (k_elem32 dequantizes it in registers), so every weight
 * byte is read once per vector and the activations are read coalesced. Expert weights are
 * addressed in place: row r of expert ids[v] is at data + ids[v] * expert_stride + r * row_bytes
 * (the expert id is read from device memory — no host round trip between router and experts).
 * Start reading: gemv_kernel.
 */
#include <stdio.h>
#include <string.h>

#include "kernels/k_ops.cuh"

#define GEMV_WARPS 4 /* rows per block */

enum { GEMV_STORE = 0, GEMV_ADD = 1, GEMV_SWIGLU = 2 };

__device__ __forceinline__ float k_silu(float z)
{
    return z / (1.0f + expf(-z));
}

template <int T, int MODE>
__global__ void gemv_kernel(struct k_weight w, struct k_weight w2, const float *__restrict__ x,
                            int64_t x_stride, int x_div, float *__restrict__ y, int64_t y_stride,
                            const int32_t *__restrict__ ids)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t r = (int64_t)blockIdx.x * GEMV_WARPS + warp;
    const int v = blockIdx.y;
    if (r >= w.rows)
        return;
    const size_t e = ids ? (size_t)ids[v] : 0;
    const uint8_t *row = w.data + e * w.expert_stride + (size_t)r * w.row_bytes;
    const uint8_t *row2 =
        MODE == GEMV_SWIGLU ? w2.data + e * w2.expert_stride + (size_t)r * w2.row_bytes : row;
    const float *xv = x + (int64_t)(v / x_div) * x_stride;
    const int64_t ng = (w.cols + 31) / 32;
    float acc = 0.0f, acc2 = 0.0f;
#pragma unroll 4
    for (int64_t g = 0; g < ng; g++) {
        const int64_t i = g * 32 + lane;
        if (i < w.cols) {
            const float xi = xv[i];
            acc += k_elem32<T>(row, g, lane) * xi;
            if (MODE == GEMV_SWIGLU)
                acc2 += k_elem32<T>(row2, g, lane) * xi;
        }
    }
    acc = k_warp_sum(acc);
    if (MODE == GEMV_SWIGLU)
        acc2 = k_warp_sum(acc2);
    if (lane == 0) {
        float *out = y + (int64_t)v * y_stride + r;
        if (MODE == GEMV_STORE)
            *out = acc;
        else if (MODE == GEMV_ADD)
            *out = *out + acc;
        else
            *out = k_silu(acc) * acc2;
    }
}

struct gemv_launch {
    struct k_stream *ks;
    const struct k_weight *w, *w2;
    const float *x;
    int64_t x_stride;
    int x_div;
    float *y;
    int64_t y_stride;
    int n_vec;
    const int32_t *ids;
    int mode;
    template <int T> void operator()() const
    {
        dim3 grid((unsigned)((w->rows + GEMV_WARPS - 1) / GEMV_WARPS), (unsigned)n_vec);
        const struct k_weight &b = w2 ? *w2 : *w;
        if (mode == GEMV_STORE)
            gemv_kernel<T, GEMV_STORE>
                <<<grid, 32 * GEMV_WARPS, 0, ks->s>>>(*w, b, x, x_stride, x_div, y, y_stride, ids);
        else if (mode == GEMV_ADD)
            gemv_kernel<T, GEMV_ADD>
                <<<grid, 32 * GEMV_WARPS, 0, ks->s>>>(*w, b, x, x_stride, x_div, y, y_stride, ids);
        else
            gemv_kernel<T, GEMV_SWIGLU>
                <<<grid, 32 * GEMV_WARPS, 0, ks->s>>>(*w, b, x, x_stride, x_div, y, y_stride, ids);
    }
};

static int bad_type(struct gate_err *err, const struct k_weight *w)
{
    return err_set(err, ERR_INPUT, "cuda: no GEMV kernel for weight type %s (%d)",
                   quant_name(w->type), w->type);
}

int k_gemv(struct k_stream *ks, const struct k_weight *w, const float *x, int64_t x_stride,
           int x_div, float *y, int64_t y_stride, int n_vec, const int32_t *ids, int accumulate,
           struct gate_err *err)
{
    if (n_vec <= 0 || w->rows <= 0)
        return 0;
    struct gemv_launch l = {ks,
                            w,
                            NULL,
                            x,
                            x_stride,
                            x_div < 1 ? 1 : x_div,
                            y,
                            y_stride,
                            n_vec,
                            ids,
                            accumulate ? GEMV_ADD : GEMV_STORE};
    if (k_dispatch_type(w->type, l))
        return bad_type(err, w);
    K_LAUNCHED(ks, "gemv_kernel");
    return 0;
}

int k_gemv_swiglu(struct k_stream *ks, const struct k_weight *gate, const struct k_weight *up,
                  const float *x, int64_t x_stride, int x_div, float *y, int64_t y_stride,
                  int n_vec, const int32_t *ids, struct gate_err *err)
{
    if (n_vec <= 0)
        return 0;
    if (gate->type == up->type && gate->rows == up->rows && gate->cols == up->cols) {
        struct gemv_launch l = {ks, gate,     up,    x,   x_stride,   x_div < 1 ? 1 : x_div,
                                y,  y_stride, n_vec, ids, GEMV_SWIGLU};
        if (k_dispatch_type(gate->type, l))
            return bad_type(err, gate);
        K_LAUNCHED(ks, "gemv_kernel<swiglu>");
        return 0;
    }
    /* the backend checks this at load and runs two GEMVs + k_swiglu_ew instead */
    return err_set(err, ERR_INPUT,
                   "cuda: the fused SwiGLU GEMV needs gate and up of one type"
                   " and shape (gate %s, up %s)",
                   quant_name(gate->type), quant_name(up->type));
}

__global__ void swiglu_ew_kernel(float *a, const float *b, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        a[i] = k_silu(a[i]) * b[i];
}

int k_swiglu_ew(struct k_stream *ks, float *a, const float *b, int64_t n, struct gate_err *err)
{
    if (n <= 0)
        return 0;
    swiglu_ew_kernel<<<(unsigned)((n + 255) / 256), 256, 0, ks->s>>>(a, b, n);
    K_LAUNCHED(ks, "swiglu_ew_kernel");
    return 0;
}

/* One block per token; warp w handles groups w, w + 8, ... of the row. */
template <int T>
__global__ void embed_kernel(struct k_weight table, const int32_t *tokens, float *x)
{
    const int t = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint8_t *row = table.data + (size_t)tokens[t] * table.row_bytes;
    const int64_t ng = (table.cols + 31) / 32;
    for (int64_t g = warp; g < ng; g += blockDim.x / 32) {
        const int64_t i = g * 32 + lane;
        if (i < table.cols)
            x[(int64_t)t * table.cols + i] = k_elem32<T>(row, g, lane);
    }
}

struct embed_launch {
    struct k_stream *ks;
    const struct k_weight *w;
    const int32_t *tokens;
    int n;
    float *x;
    template <int T> void operator()() const
    {
        embed_kernel<T><<<n, 256, 0, ks->s>>>(*w, tokens, x);
    }
};

int k_embed(struct k_stream *ks, const struct k_weight *table, const int32_t *tokens, int n,
            float *x, struct gate_err *err)
{
    if (n <= 0)
        return 0;
    struct embed_launch l = {ks, table, tokens, n, x};
    if (k_dispatch_type(table->type, l))
        return bad_type(err, table);
    K_LAUNCHED(ks, "embed_kernel");
    return 0;
}

__global__ void argmax_kernel(const float *logits, int n_vocab, int32_t *out)
{
    __shared__ float sv[32];
    __shared__ int si[32];
    const float *l = logits + (int64_t)blockIdx.x * n_vocab;
    float best = -INFINITY;
    int bi = n_vocab; /* NaN-safe: an all-NaN row gives index 0 below */
    for (int i = threadIdx.x; i < n_vocab; i += blockDim.x)
        if (l[i] > best || (bi == n_vocab && !(l[i] <= best)))
            best = l[i], bi = i;
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > best || (ov == best && oi < bi))
            best = ov, bi = oi;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0)
        sv[warp] = best, si[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x / 32); w++)
            if (sv[w] > best || (sv[w] == best && si[w] < bi))
                best = sv[w], bi = si[w];
        out[blockIdx.x] = bi >= n_vocab ? 0 : bi;
    }
}

int k_argmax(struct k_stream *ks, const float *logits, int n, int n_vocab, int32_t *out,
             struct gate_err *err)
{
    if (n <= 0)
        return 0;
    argmax_kernel<<<n, 1024, 0, ks->s>>>(logits, n_vocab, out);
    K_LAUNCHED(ks, "argmax_kernel");
    return 0;
}

/* ---- shared helpers (k_common.cuh) ---------------------------------------------------------- */

int k_check_image(struct gate_err *err)
{
    cudaFuncAttributes a;
    K_CUDA(cudaFuncGetAttributes(&a, argmax_kernel));
    return 0;
}

struct nop_launch {
    template <int T> void operator()() const
    {
    }
};

int k_type_supported(int type)
{
    struct nop_launch f;
    return k_dispatch_type(type, f) == 0;
}

int k_fail_cuda(struct gate_err *err, const char *call, const char *file, int line, cudaError_t e)
{
    const int code = (e == cudaErrorMemoryAllocation || e == cudaErrorNoDevice ||
                      e == cudaErrorInsufficientDriver || e == cudaErrorNoKernelImageForDevice)
                         ? ERR_ENV
                         : ERR_RUNTIME;
    const char *base = strrchr(file, '/');
    return err_set(err, code, "cuda: %s failed at %s:%d: %s (%s)", call, base ? base + 1 : file,
                   line, cudaGetErrorString(e), cudaGetErrorName(e));
}

int k_fail_blas(struct gate_err *err, const char *call, const char *file, int line,
                cublasStatus_t s)
{
    const char *base = strrchr(file, '/');
    return err_set(err, s == CUBLAS_STATUS_ALLOC_FAILED ? ERR_ENV : ERR_RUNTIME,
                   "cuda: %s failed at %s:%d: %s (%s)", call, base ? base + 1 : file, line,
                   cublasGetStatusString(s), cublasGetStatusName(s));
}
