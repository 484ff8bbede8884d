/* k_prefill.cu — the batched projections of prefill: weight tiles dequantized to FP32 (the
 * default: the gated modes), or FP16 / BF16 (a cell's `prefill: f16|bf16`, a separately named
 * configuration with its own measured tolerance, docs/kernels.md), and cuBLAS GEMMs with FP32
 * accumulation.
 *
 * CPU twin: engine/ref.c matmul() — y[t][o] = dot(W row o, x[t]). FP32 tiles differ from the twin
 * only in summation order. 16-bit tiles: the weights are rounded to 16 bits after exact
 * dequantization and the activations are rounded to 16 bits once per product (the per-kernel
 * tolerance in oracles/selftest.c bounds the effect; GATE_REF_EMULATE=gemm-f16 predicts it on the
 * CPU).
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

__device__ __forceinline__ void tile_store(float *p, float v, int)
{
    *p = v;
}

__device__ __forceinline__ void tile_store(uint16_t *p, float v, int bf16)
{
    *p = to16(v, bf16);
}

/* Rows r0 .. r0 + gridDim.x - 1 of w (expert base already applied) -> tile (rows, cols) of O
 * (float: exact; uint16_t: FP16 or BF16 bits). */
template <int T, typename O>
__global__ void dequant_tile_kernel(const uint8_t *base, size_t row_bytes, int64_t r0, int64_t cols,
                                    O *tile, int bf16)
{
    const int64_t r = blockIdx.x;
    const uint8_t *row = base + (size_t)(r0 + r) * row_bytes;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t ng = (cols + 31) / 32;
    for (int64_t g = warp; g < ng; g += blockDim.x / 32) {
        const int64_t i = g * 32 + lane;
        if (i < cols)
            tile_store(&tile[r * cols + i], k_elem32<T>(row, g, lane), bf16);
    }
}

struct tile_launch {
    struct k_stream *ks;
    const uint8_t *base;
    size_t row_bytes;
    int64_t r0, nr, cols;
    void *tile;
    int f32, bf16;
    template <int T> void operator()() const
    {
        if (f32)
            dequant_tile_kernel<T, float>
                <<<(unsigned)nr, 256, 0, ks->s>>>(base, row_bytes, r0, cols, (float *)tile, 0);
        else
            dequant_tile_kernel<T, uint16_t><<<(unsigned)nr, 256, 0, ks->s>>>(
                base, row_bytes, r0, cols, (uint16_t *)tile, bf16);
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
    if (!ws->f32 && (size_t)n * (size_t)cols > ws->x16_elems)
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
    const int bf16 = ws->bf16, f32 = ws->f32;
    const void *xb = x; /* the GEMM's B operand and its leading dimension */
    int64_t ldb = x_stride;
    if (!f32) { /* 16-bit: the activations rounded once per product */
        uint16_t *x16 = (uint16_t *)ws->x16;
        to16_kernel<<<dim3((unsigned)((cols + 255) / 256), (unsigned)n), 256, 0, ks->s>>>(
            x, x_stride, cols, x16, bf16);
        K_LAUNCHED(ks, "to16_kernel");
        xb = x16;
        ldb = cols;
    }
    const uint8_t *base = w->data + (expert > 0 ? (size_t)expert * w->expert_stride : 0);
    /* FP32: a plain SGEMM (the default math mode never uses TF32 tensor cores) */
    const cudaDataType dt = f32 ? CUDA_R_32F : bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    K_BLAS(cublasSetStream(ws->blas, ks->s));
    for (int64_t r0 = 0; r0 < w->rows; r0 += tile_rows) {
        const int64_t nr = w->rows - r0 < tile_rows ? w->rows - r0 : tile_rows;
        struct tile_launch l = {ks, base, w->row_bytes, r0, nr, cols, ws->tile, f32, bf16};
        if (k_dispatch_type(w->type, l))
            return err_set(err, ERR_INPUT, "cuda: no dequantization kernel for weight type %s",
                           quant_name(w->type));
        K_LAUNCHED(ks, "dequant_tile_kernel");
        /* column-major view: C (nr x n, ldc y_stride) = tile^T (nr x cols) * x (cols x n) */
        K_BLAS(cublasGemmEx(ws->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, n, (int)cols, &alpha,
                            ws->tile, dt, (int)cols, xb, dt, (int)ldb, &beta, y + r0, CUDA_R_32F,
                            (int)y_stride, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        K_BLAS_LAUNCHED(ks, "cublasGemmEx");
    }
    return 0;
}
