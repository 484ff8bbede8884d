/* k_common.cuh — what every kernel file shares (C++/CUDA only; never included by C).
 *
 * - struct k_stream: the stream a backend launches on and the launch counter the capability gate
 *   reads (settled question 7). Every launcher increments it once per kernel it launches.
 * - Checked calls: K_CUDA(call) / K_BLAS(call) / K_LAUNCHED(ks) turn a failure into a status and
 *   a gate_err naming the call, file:line and the CUDA error string. Launchers return int
 *   (0 ok, negative enum err_code) and never abort or fall back to the CPU (DESIGN.md).
 * - struct k_weight: one weight as it lies on the device, in its GGUF block format. A 3-D
 *   expert tensor is one k_weight with expert_stride set: expert e starts at data + e*stride.
 * - Faults: kernels take the backend's struct fault_set by value and ask the same GATE_HD
 *   inline functions as the twin (faults/fault.h), so there is no device-side copy to drift.
 * - Element dequantization (k_elem<TYPE>): element i of a quantized row, exactly the formula of
 *   engine/quant.c's dequant_* (the CPU twins), evaluated in float.
 * Start reading: k_elem32().
 */
#ifndef GATE_K_COMMON_CUH
#define GATE_K_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "engine/quant.h"
#include "faults/fault.h"

struct k_stream {
    cudaStream_t s;
    uint64_t launches; /* kernels (and cuBLAS calls) launched on s */
    int debug;         /* synchronize and check after every launch (selftest, GATE_CUDA_DEBUG=1) */
    int gemv;          /* the GEMV generation k_gemv runs: 2 = v2 for the types that have it
                        * (k_gemv_v2_type), anything else = v1 (k_gemv.cu) */
    int route;         /* the routing generation k_route runs: 2 = v2 (route2_kernel, one warp
                        * per token, up to 1024 experts), anything else = v1 (k_moe.cu) */
    int attn;          /* the attention k_attention_at runs: 2 = split (attn_split_kernel +
                        * attn_combine_kernel, split-KV), anything else = v1 (k_attn.cu) */
};

struct k_weight {
    const uint8_t *data; /* device pointer, block format as in the GGUF file */
    int type;            /* enum quant_type */
    int64_t rows, cols;  /* of one expert for 3-D tensors */
    size_t row_bytes;
    size_t expert_stride; /* bytes between experts (0 for 2-D weights) */
};

/* Record a CUDA / cuBLAS failure in err (first error wins); returns the status. */
int k_fail_cuda(struct gate_err *err, const char *call, const char *file, int line, cudaError_t e);
int k_fail_blas(struct gate_err *err, const char *call, const char *file, int line,
                cublasStatus_t s);

#define K_CUDA(call)                                                                               \
    do {                                                                                           \
        cudaError_t k_e_ = (call);                                                                 \
        if (k_e_ != cudaSuccess)                                                                   \
            return k_fail_cuda(err, #call, __FILE__, __LINE__, k_e_);                              \
    } while (0)

#define K_BLAS(call)                                                                               \
    do {                                                                                           \
        cublasStatus_t k_s_ = (call);                                                              \
        if (k_s_ != CUBLAS_STATUS_SUCCESS)                                                         \
            return k_fail_blas(err, #call, __FILE__, __LINE__, k_s_);                              \
    } while (0)

/* After a <<<>>> launch: count it and check the launch. cudaGetLastError alone reports only
 * launch errors (and any earlier asynchronous fault, which it would blame on this launch): with
 * ks->debug set (gate selftest's launchers, GATE_CUDA_DEBUG=1 in the backend) it also
 * synchronizes the stream, so a fault during this kernel is reported with this kernel's name. */
#define K_LAUNCHED(ks, name)                                                                       \
    do {                                                                                           \
        (ks)->launches++;                                                                          \
        cudaError_t k_e_ = cudaGetLastError();                                                     \
        if (k_e_ != cudaSuccess)                                                                   \
            return k_fail_cuda(err, "launch of " name, __FILE__, __LINE__, k_e_);                  \
        if ((ks)->debug && (k_e_ = cudaStreamSynchronize((ks)->s)) != cudaSuccess)                 \
            return k_fail_cuda(err, "execution of " name " (synchronized after launch)", __FILE__, \
                               __LINE__, k_e_);                                                    \
    } while (0)

/* After a cuBLAS call on ks: count it and, with ks->debug, synchronize and check it the same way.
 */
#define K_BLAS_LAUNCHED(ks, name)                                                                  \
    do {                                                                                           \
        (ks)->launches++;                                                                          \
        cudaError_t k_e_;                                                                          \
        if ((ks)->debug && (k_e_ = cudaStreamSynchronize((ks)->s)) != cudaSuccess)                 \
            return k_fail_cuda(err, "execution of " name " (synchronized after launch)", __FILE__, \
                               __LINE__, k_e_);                                                    \
    } while (0)

/* ---- device helpers ------------------------------------------------------------------------ */

__device__ __forceinline__ float k_h2f(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ float k_bf2f(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

__device__ __forceinline__ float k_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double k_warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float k_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* 6-bit scale and min of sub-block j of a Q4_K / Q5_K block (quant_get_scale_min_k4). */
__device__ __forceinline__ void k_scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Element 32*g + lane of a row of type T (g counts 32-element groups from the row start), the
 * exact float expression of quant.c's dequant_<T>. Plain types (F32/F16/BF16) read element
 * 32*g + lane and the caller masks the tail; block types need cols % 32 == 0 (checked at
 * load: every block size divides 32 or is 256). */
template <int T> __device__ __forceinline__ float k_elem32(const uint8_t *row, int64_t g, int lane)
{
    if constexpr (T == QUANT_F32) {
        return ((const float *)row)[g * 32 + lane];
    } else if constexpr (T == QUANT_F16) {
        return k_h2f(((const uint16_t *)row)[g * 32 + lane]);
    } else if constexpr (T == QUANT_BF16) {
        return k_bf2f(((const uint16_t *)row)[g * 32 + lane]);
    } else if constexpr (T == QUANT_Q8_0) {
        const struct block_q8_0 *b = (const struct block_q8_0 *)row + g;
        return b->qs[lane] * k_h2f(b->d);
    } else if constexpr (T == QUANT_Q4_0) {
        const struct block_q4_0 *b = (const struct block_q4_0 *)row + g;
        const int q = lane < 16 ? (b->qs[lane] & 0x0f) : (b->qs[lane - 16] >> 4);
        return (q - 8) * k_h2f(b->d);
    } else if constexpr (T == QUANT_Q4_1) {
        const struct block_q4_1 *b = (const struct block_q4_1 *)row + g;
        const int q = lane < 16 ? (b->qs[lane] & 0x0f) : (b->qs[lane - 16] >> 4);
        return q * k_h2f(b->d) + k_h2f(b->m);
    } else if constexpr (T == QUANT_Q5_0 || T == QUANT_Q5_1) {
        const uint8_t *qs, *qhp;
        float d, m = 0.0f;
        if constexpr (T == QUANT_Q5_0) {
            const struct block_q5_0 *b = (const struct block_q5_0 *)row + g;
            qs = b->qs, qhp = b->qh, d = k_h2f(b->d);
        } else {
            const struct block_q5_1 *b = (const struct block_q5_1 *)row + g;
            qs = b->qs, qhp = b->qh, d = k_h2f(b->d), m = k_h2f(b->m);
        }
        const uint32_t qh = (uint32_t)qhp[0] | ((uint32_t)qhp[1] << 8) | ((uint32_t)qhp[2] << 16) |
                            ((uint32_t)qhp[3] << 24);
        const int lo = lane < 16 ? (qs[lane] & 0x0f) : (qs[lane - 16] >> 4);
        const int q = lo | (int)(((qh >> lane) & 1u) << 4);
        if constexpr (T == QUANT_Q5_0)
            return (q - 16) * d;
        else
            return q * d + m;
    } else if constexpr (T == QUANT_Q4_K || T == QUANT_Q5_K) {
        const int64_t blk = g >> 3;
        const int j = (int)(g & 7); /* sub-block */
        const int c = j >> 1;       /* 64-element chunk */
        const uint8_t *scales, *qs;
        float d, dmin;
        int hi = 0;
        if constexpr (T == QUANT_Q4_K) {
            const struct block_q4_K *b = (const struct block_q4_K *)row + blk;
            scales = b->scales, qs = b->qs, d = k_h2f(b->d), dmin = k_h2f(b->dmin);
        } else {
            const struct block_q5_K *b = (const struct block_q5_K *)row + blk;
            scales = b->scales, qs = b->qs, d = k_h2f(b->d), dmin = k_h2f(b->dmin);
            hi = (b->qh[lane] >> j) & 1 ? 16 : 0;
        }
        int sc, m;
        k_scale_min_k4(j, scales, &sc, &m);
        const uint8_t byte = qs[32 * c + lane];
        const int q = (j & 1) ? (byte >> 4) : (byte & 0x0f);
        const float d1 = d * sc, m1 = dmin * m;
        return d1 * (q + hi) - m1;
    } else if constexpr (T == QUANT_Q6_K) {
        const struct block_q6_K *b = (const struct block_q6_K *)row + (g >> 3);
        const int j = (int)(g & 7), h = j >> 2, quarter = j & 3;
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        const int lo = quarter == 0   ? (ql[lane] & 0x0f)
                       : quarter == 1 ? (ql[lane + 32] & 0x0f)
                       : quarter == 2 ? (ql[lane] >> 4)
                                      : (ql[lane + 32] >> 4);
        const int q = lo | (((qh[lane] >> (2 * quarter)) & 3) << 4);
        const float s = k_h2f(b->d) * b->scales[8 * h + 2 * quarter + (lane >> 4)];
        return s * (q - 32);
    } else {
        static_assert(T == QUANT_F32, "k_elem32: unsupported type");
        return 0.0f;
    }
}

/* The by-value fault set a kernel takes: *s, or the empty set when s is NULL. */
static inline struct fault_set k_fault_value(const struct fault_set *s)
{
    struct fault_set v;
    memset(&v, 0, sizeof v);
    if (s)
        v = *s;
    return v;
}

/* 1 when the GEMV / dequantization kernels handle the type. */
int k_type_supported(int type);

/* Call F.template operator()<TYPE>() for a runtime type id; returns -1 (nothing called) when
 * the type has no kernel. */
template <class F> int k_dispatch_type(int type, F &&f)
{
    switch (type) {
    case QUANT_F32:
        f.template operator()<QUANT_F32>();
        return 0;
    case QUANT_F16:
        f.template operator()<QUANT_F16>();
        return 0;
    case QUANT_BF16:
        f.template operator()<QUANT_BF16>();
        return 0;
    case QUANT_Q8_0:
        f.template operator()<QUANT_Q8_0>();
        return 0;
    case QUANT_Q4_0:
        f.template operator()<QUANT_Q4_0>();
        return 0;
    case QUANT_Q4_1:
        f.template operator()<QUANT_Q4_1>();
        return 0;
    case QUANT_Q5_0:
        f.template operator()<QUANT_Q5_0>();
        return 0;
    case QUANT_Q5_1:
        f.template operator()<QUANT_Q5_1>();
        return 0;
    case QUANT_Q4_K:
        f.template operator()<QUANT_Q4_K>();
        return 0;
    case QUANT_Q5_K:
        f.template operator()<QUANT_Q5_K>();
        return 0;
    case QUANT_Q6_K:
        f.template operator()<QUANT_Q6_K>();
        return 0;
    default:
        return -1;
    }
}

#endif
