/* k_prefill.cu — the batched projections of prefill: weight tiles dequantized to FP16 (or BF16)
 * and cuBLAS GEMMs with FP32 accumulation.
 *
 * CPU twin: engine/ref.c matmul() — y[t][o] = dot(W row o, x[t]). Differences by design: the
 * weights are rounded to 16 bits after exact dequantization and the activations are rounded to
 * 16 bits once per product (the per-kernel tolerance in harness/selftest.c bounds the effect).
 * The quantized weights stay the only resident copy: a tile of at most ws->tile_elems elements
 * is dequantized, consumed by one GEMM, and overwritten by the next tile (stream order makes this
 * safe without synchronization).
 * TODO (docs/kernels.md): MoE prefill through grouped GEMMs per expert (cublasGemmGroupedBatchedEx)
 * — the backend currently runs the experts of a prefill chunk through the GEMV with ids.
 * Start reading: k_gemm().
 */
#include "kernels/k_ops.cuh"

__device__ __forceinline__ uint16_t to16(float v, int bf16)
{
    return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
                : __half_as_ushort(__float2half_rn(v));
}

/* Rows r0 .. r0 + gridDim.x - 1 of w (expert base already applied) -> tile (rows, cols). */
template <int T>
__global__ void dequant_tile_kernel(const uint8_t *base, size_t row_bytes, int64_t r0, int64_t cols,
                                    uint16_t *tile, int bf16)
{
    const int64_t r = blockIdx.x;
    const uint8_t *row = base + (size_t)(r0 + r) * row_bytes;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t ng = (cols + 31) / 32;
    for (int64_t g = warp; g < ng; g += blockDim.x / 32) {
        const int64_t i = g * 32 + lane;
        if (i < cols)
            tile[r * cols + i] = to16(k_elem32<T>(row, g, lane), bf16);
    }
}

struct tile_launch {
    struct k_stream *ks;
    const uint8_t *base;
    size_t row_bytes;
    int64_t r0, nr, cols;
    uint16_t *tile;
    int bf16;
    template <int T> void operator()() const
    {
        dequant_tile_kernel<T>
            <<<(unsigned)nr, 256, 0, ks->s>>>(base, row_bytes, r0, cols, tile, bf16);
    }
};

__global__ void to16_kernel(const float *x, int64_t x_stride, int64_t cols, uint16_t *out, int bf16)
{
    const int64_t t = blockIdx.y;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < cols)
        out[t * cols + i] = to16(x[t * x_stride + i], bf16);
}

int k_gemm(struct k_stream *ks, const struct k_gemm_ws *ws, const struct k_weight *w, int expert,
           const float *x, int64_t x_stride, int n, float *y, int64_t y_stride, int accumulate,
           struct gate_err *err)
{
    if (n <= 0 || w->rows <= 0)
        return 0;
    const int64_t cols = w->cols;
    if ((size_t)n * (size_t)cols > ws->x16_elems)
        return err_set(err, ERR_RUNTIME,
                       "cuda: prefill of %d tokens x %lld columns exceeds the"
                       " activation workspace (%zu elements)",
                       n, (long long)cols, ws->x16_elems);
    int64_t tile_rows = (int64_t)(ws->tile_elems / (size_t)cols);
    if (tile_rows < 1)
        return err_set(err, ERR_RUNTIME,
                       "cuda: a weight row of %lld columns exceeds the tile"
                       " workspace (%zu elements)",
                       (long long)cols, ws->tile_elems);
    const int bf16 = ws->bf16;
    uint16_t *x16 = (uint16_t *)ws->x16;
    to16_kernel<<<dim3((unsigned)((cols + 255) / 256), (unsigned)n), 256, 0, ks->s>>>(
        x, x_stride, cols, x16, bf16);
    K_LAUNCHED(ks, "to16_kernel");
    const uint8_t *base = w->data + (expert > 0 ? (size_t)expert * w->expert_stride : 0);
    const cudaDataType dt = bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    K_BLAS(cublasSetStream(ws->blas, ks->s));
    for (int64_t r0 = 0; r0 < w->rows; r0 += tile_rows) {
        const int64_t nr = w->rows - r0 < tile_rows ? w->rows - r0 : tile_rows;
        struct tile_launch l = {ks, base, w->row_bytes, r0, nr, cols, (uint16_t *)ws->tile, bf16};
        if (k_dispatch_type(w->type, l))
            return err_set(err, ERR_INPUT, "cuda: no dequantization kernel for weight type %s",
                           quant_name(w->type));
        K_LAUNCHED(ks, "dequant_tile_kernel");
        /* column-major view: C (nr x n, ldc y_stride) = tile^T (nr x cols) * x16 (cols x n) */
        K_BLAS(cublasGemmEx(ws->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, n, (int)cols, &alpha,
                            ws->tile, dt, (int)cols, x16, dt, (int)cols, &beta, y + r0, CUDA_R_32F,
                            (int)y_stride, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        K_BLAS_LAUNCHED(ks, "cublasGemmEx");
    }
    return 0;
}
