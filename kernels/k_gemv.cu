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
#include "kernels/k_test.h"

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

/* ---- GEMV v2 (issue 25 §3): 16-byte loads, several rows per warp, several loads in flight ------
 *
 * For Q4_K, Q6_K and Q8_0 (the other types run v1 even when v2 is selected: docs/kernels.md).
 * A row is cut into items: 16 bytes of quants and the elements they hold (Q4_K: a super-block's
 * 8 items of 32 elements, each the low and high nibbles of 16 bytes, i.e. 16 elements of
 * sub-blocks 2c and 2c+1; Q6_K: 4 items of 64 elements, 16 positions x 4 quarters; Q8_0: 2 items
 * of 16 elements). Lane l of a warp takes items l, l + 32, ...; each item is applied to the
 * GEMV2_ROWS rows of the warp, so its activations are loaded once per row group, and a lane
 * issues the quant loads of U items x GEMV2_ROWS rows before it uses the first (U per type, in
 * g2_type: fewer for Q6_K, whose item already holds four 16-byte loads).
 * Scales are decoded once per item and sub-block, not per element; elements are converted with
 * the 2^23 trick (PRMT + FADD, exact for 0..255) instead of I2F.
 *
 * Order against the twin (dotq_f32: sixteen lanes in element order, then pairwise): each item
 * sums its products in element order, Q4_K factored as d1 * sum(q x) - m1 * sum(x) per
 * sub-block; a lane adds its items in item order, then the warp tree. Every sum is FP32; the
 * bound is in docs/kernels.md ("GEMV v2").
 */
#define GEMV2_WARPS 4 /* warps per block */
#define GEMV2_ROWS 2  /* rows per warp */

/* The intrinsics the item math needs, with host versions: the same functions run on the CPU in
 * k_test_gemv2_host (the layout checked without a device). */
__host__ __device__ __forceinline__ uint4 g2_ldg(const uint4 *p)
{
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    uint4 v;
    memcpy(&v, p, sizeof v);
    return v;
#endif
}

__host__ __device__ __forceinline__ uint32_t g2_fshr(uint32_t lo, uint32_t hi, unsigned sh)
{
#ifdef __CUDA_ARCH__
    return __funnelshift_r(lo, hi, sh);
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (sh & 31));
#endif
}

__host__ __device__ __forceinline__ uint32_t g2_perm(uint32_t x, uint32_t y, unsigned sel)
{
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, sel);
#else
    const uint64_t b = ((uint64_t)y << 32) | x;
    uint32_t r = 0;
    for (int n = 0; n < 4; n++)
        r |= (uint32_t)((b >> (8 * ((sel >> (4 * n)) & 7))) & 0xFF) << (8 * n);
    return r;
#endif
}

__host__ __device__ __forceinline__ float g2_u2f(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

__host__ __device__ __forceinline__ float g2_h2f(uint16_t h)
{
#ifdef __CUDA_ARCH__
    return k_h2f(h);
#else
    return quant_fp16_to_f32(h);
#endif
}

/* 16 bytes at p. A16: p is 16-byte aligned (one LDG.128). Otherwise p is 2-byte aligned (Q6_K's
 * 210-byte and Q8_0's 34-byte blocks): the two aligned 16-byte chunks that hold p..p+15 are
 * loaded (the second only when p is not aligned, so no byte outside the chunks of the tensor
 * is touched) and funnel-shifted into place. */
/* The host twin of the device's misaligned-address fault: set when the A16 path is handed an
 * address that is not 16-byte aligned (k_test_gemv2_host reports it). */
static thread_local int g2_host_misaligned;

template <bool A16> __host__ __device__ __forceinline__ uint4 g2_ld16(const uint8_t *p)
{
    if constexpr (A16) {
#ifndef __CUDA_ARCH__
        if ((uintptr_t)p % 16)
            g2_host_misaligned = 1;
#endif
        return g2_ldg((const uint4 *)p);
    } else {
        const uintptr_t a = (uintptr_t)p;
        const uint4 *b = (const uint4 *)(a & ~(uintptr_t)15);
        const unsigned s = (unsigned)(a & 15), q = s >> 2, sh = (s & 3) * 8;
        const uint4 u0 = g2_ldg(b), u1 = g2_ldg(b + (s ? 1 : 0));
        const uint32_t r0 = q == 0 ? u0.x : q == 1 ? u0.y : q == 2 ? u0.z : u0.w;
        const uint32_t r1 = q == 0 ? u0.y : q == 1 ? u0.z : q == 2 ? u0.w : u1.x;
        const uint32_t r2 = q == 0 ? u0.z : q == 1 ? u0.w : q == 2 ? u1.x : u1.y;
        const uint32_t r3 = q == 0 ? u0.w : q == 1 ? u1.x : q == 2 ? u1.y : u1.z;
        const uint32_t r4 = q == 0 ? u1.x : q == 1 ? u1.y : q == 2 ? u1.z : u1.w;
        return make_uint4(g2_fshr(r0, r1, sh), g2_fshr(r1, r2, sh), g2_fshr(r2, r3, sh),
                          g2_fshr(r3, r4, sh));
    }
}

/* Byte k (0..3) of w as a float 2^23 + byte; subtract the bias to get the value. */
__host__ __device__ __forceinline__ float g2_byte(uint32_t w, int k)
{
    return g2_u2f(g2_perm(w, 0x4B000000u, 0x7440u | (unsigned)k));
}

/* sum over the 16 bytes of v (each minus `bias`, bias = 2^23 + offset) times x[0..15]
 * (16-byte aligned), in element order. */
__host__ __device__ __forceinline__ float g2_dot16(uint4 v, float bias, const float *__restrict__ x)
{
    const float4 *x4 = (const float4 *)x;
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    float s = 0.0f;
#ifdef __CUDA_ARCH__ /* the host pass of nvcc does not know the pragma */
#pragma unroll
#endif
    for (int k = 0; k < 4; k++) {
        const float4 xv = x4[k];
        s = fmaf(g2_byte(w[k], 0) - bias, xv.x, s);
        s = fmaf(g2_byte(w[k], 1) - bias, xv.y, s);
        s = fmaf(g2_byte(w[k], 2) - bias, xv.z, s);
        s = fmaf(g2_byte(w[k], 3) - bias, xv.w, s);
    }
    return s;
}

__host__ __device__ __forceinline__ float g2_sum16(const float *__restrict__ x)
{
    const float4 *x4 = (const float4 *)x;
    float s = 0.0f;
#ifdef __CUDA_ARCH__ /* the host pass of nvcc does not know the pragma */
#pragma unroll
#endif
    for (int k = 0; k < 4; k++) {
        const float4 xv = x4[k];
        s += xv.x;
        s += xv.y;
        s += xv.z;
        s += xv.w;
    }
    return s;
}

__host__ __device__ __forceinline__ uint4 g2_and(uint4 v, uint32_t m)
{
    return make_uint4(v.x & m, v.y & m, v.z & m, v.w & m);
}

__host__ __device__ __forceinline__ uint4 g2_shr(uint4 v, int n)
{
    return make_uint4(v.x >> n, v.y >> n, v.z >> n, v.w >> n);
}

/* Per type: elements and bytes of a block, items per block, 16-byte loads per item and row, items
 * per lane whose loads are in flight together (U x GEMV2_ROWS x NW loads of 16 bytes). */
template <int T> struct g2_type;
/* A16: every 16-byte load of an item starts 16 bytes past the row's start times a whole number
 * (Q4_K's 144-byte blocks); Q6_K's 210-byte and Q8_0's 34-byte blocks (and Q8_0's loads at
 * 2 + 16 part) leave block starts unaligned even in an aligned row, so those always realign. */
template <> struct g2_type<QUANT_Q4_K> {
    enum { BE = 256, BB = 144, PARTS = 8, NW = 2, U = 2, A16 = 1 };
};
template <> struct g2_type<QUANT_Q6_K> {
    enum { BE = 256, BB = 210, PARTS = 4, NW = 4, U = 1, A16 = 0 };
};
template <> struct g2_type<QUANT_Q8_0> {
    enum { BE = 32, BB = 34, PARTS = 2, NW = 1, U = 2, A16 = 0 };
};

/* Whether a weight of type T whose data, rows and experts start at these offsets takes the
 * aligned-load path: the type's layout allows it and all three are multiples of 16. */
template <int T>
__host__ __device__ __forceinline__ bool g2_a16(uintptr_t data, int64_t row_bytes,
                                                int64_t expert_stride)
{
    return g2_type<T>::A16 &&
           ((uint64_t)data | (uint64_t)row_bytes | (uint64_t)expert_stride) % 16 == 0;
}

/* The raw bytes of one item of one row: NW 16-byte loads and the block's FP16 scale. */
template <int T> struct g2_raw {
    uint4 a[g2_type<T>::NW];
    uint32_t d;
};

template <int T, bool A16>
__host__ __device__ __forceinline__ void g2_load(g2_raw<T> &o, const uint8_t *blk, int part)
{
    if constexpr (T == QUANT_Q4_K) {
        /* header: d, dmin, scales[12] (the 8 lanes of a block read the same 16 bytes) */
        o.a[0] = g2_ld16<A16>(blk);
        o.a[1] = g2_ld16<A16>(blk + 16 + 32 * (part >> 1) + 16 * (part & 1));
        o.d = 0;
    } else if constexpr (T == QUANT_Q6_K) {
        const int h = part >> 1, t = part & 1;
        o.a[0] = g2_ld16<A16>(blk + 64 * h + 16 * t);       /* ql: quarters 0 (lo), 2 (hi) */
        o.a[1] = g2_ld16<A16>(blk + 64 * h + 32 + 16 * t);  /* ql: quarters 1 (lo), 3 (hi) */
        o.a[2] = g2_ld16<A16>(blk + 128 + 32 * h + 16 * t); /* qh: 2 bits per quarter */
        o.a[3] = g2_ld16<A16>(blk + 192);                   /* the 16 int8 scales */
        o.d = *(const uint16_t *)(blk + 208);
    } else {
        o.a[0] = g2_ld16<A16>(blk + 2 + 16 * part);
        o.d = *(const uint16_t *)blk;
    }
}

/* 6-bit scale and min of sub-block j (0..7) of a Q4_K header held in registers (y: scales 0-3,
 * z: 4-7, w: 8-11), k_scale_min_k4 without a byte array. */
__host__ __device__ __forceinline__ void g2_scale_min(uint4 hd, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = (int)(hd.y >> (8 * j)) & 63;
        *m = (int)(hd.z >> (8 * j)) & 63;
    } else {
        const int jj = 8 * (j - 4);
        const uint32_t hi = (hd.w >> jj) & 0xFF;
        *sc = (int)((hi & 0xF) | (((hd.y >> jj) >> 6 & 3) << 4));
        *m = (int)((hi >> 4) | (((hd.z >> jj) >> 6 & 3) << 4));
    }
}

/* x sums the item needs whatever the row (Q4_K: sum of x over each of its two 16-element runs);
 * computed once per item and shared by the warp's rows. */
struct g2_xs {
    float s0, s1;
};

template <int T>
__host__ __device__ __forceinline__ g2_xs g2_xsums(const float *__restrict__ xb, int part)
{
    g2_xs r = {0.0f, 0.0f};
    if constexpr (T == QUANT_Q4_K) {
        const int c = part >> 1, h = part & 1;
        r.s0 = g2_sum16(xb + 64 * c + 16 * h);
        r.s1 = g2_sum16(xb + 64 * c + 32 + 16 * h);
    }
    return r;
}

/* The item's contribution to one row: xb is the block's activations. */
template <int T>
__host__ __device__ __forceinline__ float g2_item(const g2_raw<T> &o, const float *__restrict__ xb,
                                                  int part, g2_xs xs)
{
    const float B0 = 8388608.0f; /* 2^23 */
    if constexpr (T == QUANT_Q4_K) {
        const int c = part >> 1, h = part & 1;
        const uint4 hd = o.a[0];
        const float d = g2_h2f((uint16_t)(hd.x & 0xFFFF)), dmin = g2_h2f((uint16_t)(hd.x >> 16));
        int sc0, m0, sc1, m1;
        g2_scale_min(hd, 2 * c, &sc0, &m0);
        g2_scale_min(hd, 2 * c + 1, &sc1, &m1);
        const float lo = g2_dot16(g2_and(o.a[1], 0x0F0F0F0Fu), B0, xb + 64 * c + 16 * h);
        const float hi =
            g2_dot16(g2_and(g2_shr(o.a[1], 4), 0x0F0F0F0Fu), B0, xb + 64 * c + 32 + 16 * h);
        return (d * sc0) * lo - (dmin * m0) * xs.s0 + ((d * sc1) * hi - (dmin * m1) * xs.s1);
    } else if constexpr (T == QUANT_Q6_K) {
        const int h = part >> 1, t = part & 1;
        const float d = g2_h2f((uint16_t)o.d);
        const uint4 qh = o.a[2];
        /* scales[8h + 2 quarter + t]: word 2h holds bytes 8h..8h+3, word 2h+1 8h+4..8h+7 */
        const uint32_t s01 = h ? o.a[3].z : o.a[3].x, s23 = h ? o.a[3].w : o.a[3].y;
        const int8_t sc0 = (int8_t)(s01 >> (8 * t)), sc1 = (int8_t)(s01 >> (8 * (2 + t)));
        const int8_t sc2 = (int8_t)(s23 >> (8 * t)), sc3 = (int8_t)(s23 >> (8 * (2 + t)));
        const float *xq = xb + 128 * h + 16 * t; /* + 32 quarter */
        const float B = B0 + 32.0f;
        const float q0 =
            g2_dot16(make_uint4((o.a[0].x & 0x0F0F0F0Fu) | ((qh.x & 0x03030303u) << 4),
                                (o.a[0].y & 0x0F0F0F0Fu) | ((qh.y & 0x03030303u) << 4),
                                (o.a[0].z & 0x0F0F0F0Fu) | ((qh.z & 0x03030303u) << 4),
                                (o.a[0].w & 0x0F0F0F0Fu) | ((qh.w & 0x03030303u) << 4)),
                     B, xq);
        const float q1 =
            g2_dot16(make_uint4((o.a[1].x & 0x0F0F0F0Fu) | ((qh.x & 0x0C0C0C0Cu) << 2),
                                (o.a[1].y & 0x0F0F0F0Fu) | ((qh.y & 0x0C0C0C0Cu) << 2),
                                (o.a[1].z & 0x0F0F0F0Fu) | ((qh.z & 0x0C0C0C0Cu) << 2),
                                (o.a[1].w & 0x0F0F0F0Fu) | ((qh.w & 0x0C0C0C0Cu) << 2)),
                     B, xq + 32);
        const float q2 =
            g2_dot16(make_uint4(((o.a[0].x >> 4) & 0x0F0F0F0Fu) | (qh.x & 0x30303030u),
                                ((o.a[0].y >> 4) & 0x0F0F0F0Fu) | (qh.y & 0x30303030u),
                                ((o.a[0].z >> 4) & 0x0F0F0F0Fu) | (qh.z & 0x30303030u),
                                ((o.a[0].w >> 4) & 0x0F0F0F0Fu) | (qh.w & 0x30303030u)),
                     B, xq + 64);
        const float q3 =
            g2_dot16(make_uint4(((o.a[1].x >> 4) & 0x0F0F0F0Fu) | ((qh.x >> 2) & 0x30303030u),
                                ((o.a[1].y >> 4) & 0x0F0F0F0Fu) | ((qh.y >> 2) & 0x30303030u),
                                ((o.a[1].z >> 4) & 0x0F0F0F0Fu) | ((qh.z >> 2) & 0x30303030u),
                                ((o.a[1].w >> 4) & 0x0F0F0F0Fu) | ((qh.w >> 2) & 0x30303030u)),
                     B, xq + 96);
        return (d * sc0) * q0 + (d * sc1) * q1 + ((d * sc2) * q2 + (d * sc3) * q3);
    } else {
        /* int8 as unsigned (q + 128): flip the sign bits, subtract 2^23 + 128 */
        const uint4 q = o.a[0];
        const uint32_t f = 0x80808080u;
        return g2_h2f((uint16_t)o.d) * g2_dot16(make_uint4(q.x ^ f, q.y ^ f, q.z ^ f, q.w ^ f),
                                                B0 + 128.0f, xb + 16 * part);
    }
}

template <int T, int MODE, bool A16>
__global__ void __launch_bounds__(32 * GEMV2_WARPS)
    gemv2_kernel(struct k_weight w, struct k_weight w2, const float *__restrict__ x,
                 int64_t x_stride, int x_div, float *__restrict__ y, int64_t y_stride,
                 const int32_t *__restrict__ ids)
{
    typedef g2_type<T> TT;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t r0 = ((int64_t)blockIdx.x * GEMV2_WARPS + warp) * GEMV2_ROWS;
    const int v = blockIdx.y;
    if (r0 >= w.rows)
        return;
    const size_t e = ids ? (size_t)ids[v] : 0;
    const uint8_t *base = w.data + e * w.expert_stride;
    const uint8_t *base2 = MODE == GEMV_SWIGLU ? w2.data + e * w2.expert_stride : base;
    const float *xv = x + (int64_t)(v / x_div) * x_stride;
    const int n_rows = (int)(w.rows - r0 < GEMV2_ROWS ? w.rows - r0 : GEMV2_ROWS);
    const int64_t items = w.cols / TT::BE * TT::PARTS;
    float acc[GEMV2_ROWS], acc2[GEMV2_ROWS];
#pragma unroll
    for (int rr = 0; rr < GEMV2_ROWS; rr++)
        acc[rr] = 0.0f, acc2[rr] = 0.0f;
    for (int64_t i0 = lane; i0 < items; i0 += 32 * TT::U) {
        g2_raw<T> raw[TT::U][GEMV2_ROWS], raw2[TT::U][GEMV2_ROWS];
        /* issue every load of the group first: TT::U x GEMV2_ROWS (x2 for SwiGLU) */
#pragma unroll
        for (int u = 0; u < TT::U; u++) {
            const int64_t it = i0 + 32 * u;
            const int64_t blk = it / TT::PARTS;
            const int part = (int)(it % TT::PARTS);
#pragma unroll
            for (int rr = 0; rr < GEMV2_ROWS; rr++)
                if (it < items && rr < n_rows) {
                    const size_t off = (size_t)(r0 + rr) * w.row_bytes + (size_t)blk * TT::BB;
                    g2_load<T, A16>(raw[u][rr], base + off, part);
                    if (MODE == GEMV_SWIGLU)
                        g2_load<T, A16>(raw2[u][rr], base2 + off, part);
                }
        }
#pragma unroll
        for (int u = 0; u < TT::U; u++) {
            const int64_t it = i0 + 32 * u;
            if (it >= items)
                break;
            const int64_t blk = it / TT::PARTS;
            const int part = (int)(it % TT::PARTS);
            const float *xb = xv + blk * TT::BE;
            const g2_xs xs = g2_xsums<T>(xb, part);
#pragma unroll
            for (int rr = 0; rr < GEMV2_ROWS; rr++)
                if (rr < n_rows) {
                    acc[rr] += g2_item<T>(raw[u][rr], xb, part, xs);
                    if (MODE == GEMV_SWIGLU)
                        acc2[rr] += g2_item<T>(raw2[u][rr], xb, part, xs);
                }
        }
    }
#pragma unroll
    for (int rr = 0; rr < GEMV2_ROWS; rr++) {
        const float a = k_warp_sum(acc[rr]);
        const float a2 = MODE == GEMV_SWIGLU ? k_warp_sum(acc2[rr]) : 0.0f;
        if (lane == rr && rr < n_rows) {
            float *out = y + (int64_t)v * y_stride + r0 + rr;
            if (MODE == GEMV_STORE)
                *out = a;
            else if (MODE == GEMV_ADD)
                *out = *out + a;
            else
                *out = k_silu(a) * a2;
        }
    }
}

template <int T, int MODE> static void gemv2_launch_mode(const struct gemv_launch &l, bool a16)
{
    const int per_block = GEMV2_WARPS * GEMV2_ROWS;
    dim3 grid((unsigned)((l.w->rows + per_block - 1) / per_block), (unsigned)l.n_vec);
    const struct k_weight &b = l.w2 ? *l.w2 : *l.w;
    if (a16)
        gemv2_kernel<T, MODE, true><<<grid, 32 * GEMV2_WARPS, 0, l.ks->s>>>(
            *l.w, b, l.x, l.x_stride, l.x_div, l.y, l.y_stride, l.ids);
    else
        gemv2_kernel<T, MODE, false><<<grid, 32 * GEMV2_WARPS, 0, l.ks->s>>>(
            *l.w, b, l.x, l.x_stride, l.x_div, l.y, l.y_stride, l.ids);
}

template <int T> static void gemv2_launch(const struct gemv_launch &l)
{
    /* 16-byte aligned quants: the type's every load, the data, every row and every expert */
    const bool a16 =
        g2_a16<T>((uintptr_t)l.w->data, l.w->row_bytes, l.w->expert_stride) &&
        (!l.w2 || g2_a16<T>((uintptr_t)l.w2->data, l.w2->row_bytes, l.w2->expert_stride));
    if (l.mode == GEMV_STORE)
        gemv2_launch_mode<T, GEMV_STORE>(l, a16);
    else if (l.mode == GEMV_ADD)
        gemv2_launch_mode<T, GEMV_ADD>(l, a16);
    else
        gemv2_launch_mode<T, GEMV_SWIGLU>(l, a16);
}

/* One row of the v2 kernel's arithmetic on the host, in the kernel's order: lane l sums items
 * l, l + 32, ... in order, then the xor-butterfly of k_warp_sum. */
template <int T> static float gemv2_row_host(const uint8_t *row, const float *x, int64_t cols)
{
    typedef g2_type<T> TT;
    const int64_t items = cols / TT::BE * TT::PARTS;
    const bool a16 = g2_a16<T>((uintptr_t)row, cols / TT::BE * TT::BB, 0);
    float lane[32];
    for (int l = 0; l < 32; l++) {
        float acc = 0.0f;
        for (int64_t it = l; it < items; it += 32) {
            const int64_t blk = it / TT::PARTS;
            const int part = (int)(it % TT::PARTS);
            g2_raw<T> raw;
            if (a16)
                g2_load<T, true>(raw, row + blk * TT::BB, part);
            else
                g2_load<T, false>(raw, row + blk * TT::BB, part);
            const float *xb = x + blk * TT::BE;
            acc += g2_item<T>(raw, xb, part, g2_xsums<T>(xb, part));
        }
        lane[l] = acc;
    }
    for (int o = 16; o > 0; o >>= 1) {
        float nv[32];
        for (int l = 0; l < 32; l++)
            nv[l] = lane[l] + lane[l ^ o];
        memcpy(lane, nv, sizeof lane);
    }
    return lane[0];
}

extern "C" int k_test_gemv2_host(int type, const void *row, const float *x, int64_t cols,
                                 float *out, struct gate_err *err)
{
    const int64_t be = type == QUANT_Q8_0 ? 32 : 256;
    if (!k_gemv_v2_type(type) || cols <= 0 || cols % be)
        return err_set(err, ERR_INPUT, "k_test_gemv2_host: no v2 kernel for %s with %lld columns",
                       quant_name(type), (long long)cols);
    if ((uintptr_t)x % 16)
        return err_set(err, ERR_INPUT, "k_test_gemv2_host: x is not 16-byte aligned");
    const uint8_t *r = (const uint8_t *)row;
    g2_host_misaligned = 0;
    *out = type == QUANT_Q4_K   ? gemv2_row_host<QUANT_Q4_K>(r, x, cols)
           : type == QUANT_Q6_K ? gemv2_row_host<QUANT_Q6_K>(r, x, cols)
                                : gemv2_row_host<QUANT_Q8_0>(r, x, cols);
    if (g2_host_misaligned)
        return err_set(err, ERR_RUNTIME,
                       "k_test_gemv2_host: %s row at %p: the aligned-load path read an address "
                       "that is not 16-byte aligned (on a device: cudaErrorMisalignedAddress)",
                       quant_name(type), row);
    return 0;
}

int k_gemv_v2_type(int type)
{
    return type == QUANT_Q4_K || type == QUANT_Q6_K || type == QUANT_Q8_0;
}

/* Run l with v2 when the stream selects it and the type has a v2 kernel; 1 when v2 ran, 0 when
 * the caller runs v1, negative with err when v2 cannot take these activations. */
static int try_v2(const struct gemv_launch &l, int type, struct gate_err *err)
{
    if (l.ks->gemv != 2 || !k_gemv_v2_type(type))
        return 0;
    /* x is read as float4 from block starts: x and its stride must keep 16-byte alignment */
    if ((uintptr_t)l.x % 16 != 0 || l.x_stride % 4 != 0)
        return err_set(err, ERR_INPUT,
                       "cuda: GEMV v2 needs 16-byte aligned activations (x %p, stride %lld)",
                       (const void *)l.x, (long long)l.x_stride);
    if (type == QUANT_Q4_K)
        gemv2_launch<QUANT_Q4_K>(l);
    else if (type == QUANT_Q6_K)
        gemv2_launch<QUANT_Q6_K>(l);
    else
        gemv2_launch<QUANT_Q8_0>(l);
    return 1;
}

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
    const int v2 = try_v2(l, w->type, err);
    if (v2 < 0)
        return v2;
    if (v2) {
        K_LAUNCHED(ks, "gemv2_kernel");
        return 0;
    }
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
        const int v2 = try_v2(l, gate->type, err);
        if (v2 < 0)
            return v2;
        if (v2) {
            K_LAUNCHED(ks, "gemv2_kernel<swiglu>");
            return 0;
        }
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
