/* cpu_gemm.c — the prompt GEMM's activation packing and its run-time dispatch (cpu_gemm.h); the
 * kernels are in cpu_gemm_avx512.c and cpu_gemm_avx2.c.
 *
 * Packed layout, per group of 16 tokens (tv) and weight block (i), at index tv * nb + i:
 *   K-quants (256 columns): struct gemm_pack_k — qs[k][lane] = token (16 tv + lane)'s int16
 *     pair (a[2k], a[2k+1]) as one int32 (k < 128); mn[j][lane] = the pair (s >> 8, s & 255) of
 *     that token's sub-block sum s = sums[j]; d[lane] = its block scale;
 *   Q8_0 (32 columns): struct gemm_pack_32 — qs[k][lane] for k < 16, d[lane].
 * Missing tokens (past n_tok) are zero. The AVX-512 kernels read a group as one register of 16
 * lanes, the AVX2 ones (cpu_gemm_avx2.c) as two of eight. Start reading: cpu_gemm_pack().
 */
#include "cpu_gemm.h"

#include <string.h>

#include "base/sanitize.h"
#include "cpu_dot.h"
#include "quant.h"

int cpu_gemm_supported(int type)
{
    if (type != QUANT_Q4_K && type != QUANT_Q5_K && type != QUANT_Q6_K && type != QUANT_Q8_0)
        return 0;
    return cpu_dot_isa() >= CPU_ISA_AVX2;
}

size_t cpu_gemm_pack_bytes(int type, int n_tok, int64_t n)
{
    const size_t groups = (size_t)(n_tok + CPU_GEMM_LANES - 1) / CPU_GEMM_LANES;
    switch (type) {
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K:
        return groups * (size_t)(n / QK_K) * sizeof(struct gemm_pack_k);
    case QUANT_Q8_0:
        return groups * (size_t)(n / 32) * sizeof(struct gemm_pack_32);
    default:
        return 0;
    }
}

/* int16 pair (lo, hi) as the int32 vpdpwssd reads: lo in the low half */
static int32_t pair(int16_t lo, int16_t hi)
{
    return (int32_t)((uint32_t)(uint16_t)lo | ((uint32_t)(uint16_t)hi << 16));
}

void cpu_gemm_pack_group(int type, const uint8_t *act, size_t as, int n_tok, int64_t n,
                         void *packed, int g)
{
    const int t0 = g * CPU_GEMM_LANES;
    const int t1 = n_tok - t0 < CPU_GEMM_LANES ? n_tok : t0 + CPU_GEMM_LANES;
    const size_t group = cpu_gemm_pack_bytes(type, 1, n); /* one group of 16 */
    memset((uint8_t *)packed + (size_t)g * group, 0, group);
    if (type == QUANT_Q8_0) {
        const int64_t nb = n / 32;
        struct gemm_pack_32 *p = (struct gemm_pack_32 *)packed + (size_t)g * (size_t)nb;
        for (int t = t0; t < t1; t++) {
            const struct cpu_q16_32 *y = (const struct cpu_q16_32 *)(act + (size_t)t * as);
            const int l = t - t0;
            for (int64_t i = 0; i < nb; i++) {
                for (int k = 0; k < 16; k++)
                    p[i].qs[k][l] = pair(y[i].qs[2 * k], y[i].qs[2 * k + 1]);
                p[i].d[l] = y[i].d;
            }
        }
        return;
    }
    const int64_t nb = n / QK_K;
    struct gemm_pack_k *p = (struct gemm_pack_k *)packed + (size_t)g * (size_t)nb;
    for (int t = t0; t < t1; t++) {
        const struct cpu_q16_K *y = (const struct cpu_q16_K *)(act + (size_t)t * as);
        const int l = t - t0;
        for (int64_t i = 0; i < nb; i++) {
            for (int k = 0; k < QK_K / 2; k++)
                p[i].qs[k][l] = pair(y[i].qs[2 * k], y[i].qs[2 * k + 1]);
            for (int j = 0; j < QK_K / 32; j++) {
                /* |s| <= 32 x CPU_ACT_QMAX < 2^16: s >> 8 in [-256, 255], s & 255 in [0, 255] */
                const int32_t s = y[i].sums[j];
                p[i].mn[j][l] = pair((int16_t)(s >> 8), (int16_t)(s & 255));
            }
            p[i].d[l] = y[i].d;
        }
    }
}

void cpu_gemm_pack(int type, const uint8_t *act, size_t as, int n_tok, int64_t n, void *packed)
{
    for (int g = 0; g < (n_tok + CPU_GEMM_LANES - 1) / CPU_GEMM_LANES; g++)
        cpu_gemm_pack_group(type, act, as, n_tok, n, packed, g);
}

void cpu_gemm_rows(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                   const void *packed, int n_tok, int64_t n, float *out, size_t out_stride)
{
    /* the SIMD files run outside the sanitizer build's instrumentation: their ranges are checked
     * whole first (cpu_dot.c, check_tile) — rows [r0, r1), the packed tokens, each token's outputs
     */
    if (r1 > r0 && n_tok > 0) {
        gate_check_range(w + (size_t)r0 * row_bytes,
                         (size_t)(r1 - r0 - 1) * row_bytes + quant_row_bytes(type, n));
        gate_check_range(packed, cpu_gemm_pack_bytes(type, n_tok, n));
        for (int t = 0; t < n_tok; t++)
            gate_check_range(out + (size_t)t * out_stride + (size_t)r0,
                             (size_t)(r1 - r0) * sizeof *out);
    }
    if (cpu_dot_isa() >= CPU_ISA_AVX512)
        cpu_gemm_avx512_rows(type, w, row_bytes, r0, r1, packed, n_tok, n, out, out_stride);
    else
        cpu_gemm_avx2_rows(type, w, row_bytes, r0, r1, packed, n_tok, n, out, out_stride);
}

int cpu_gemm_attn_supported(int hd)
{
    return hd > 0 && hd % 16 == 0 && hd <= CPU_GEMM_ATTN_MAX_HD && cpu_dot_isa() >= CPU_ISA_AVX2;
}

void cpu_gemm_attn(const float *q, size_t q_stride, int n_q, int pos0, const float *kc,
                   const float *vc, size_t kv_stride, int hd, float scale, float *s, float *out,
                   size_t out_stride)
{
    if (n_q > 0) { /* each query and output row, keys and values 0 .. pos0 + n_q - 1, the scores */
        const size_t kv = ((size_t)(pos0 + n_q - 1) * kv_stride + (size_t)hd) * sizeof(float);
        for (int i = 0; i < n_q; i++) {
            gate_check_range(q + (size_t)i * q_stride, (size_t)hd * sizeof *q);
            gate_check_range(out + (size_t)i * out_stride, (size_t)hd * sizeof *out);
        }
        gate_check_range(kc, kv);
        gate_check_range(vc, kv);
        gate_check_range(s, (size_t)CPU_GEMM_LANES * (size_t)(pos0 + n_q) * sizeof *s);
    }
    if (cpu_dot_isa() >= CPU_ISA_AVX512)
        cpu_gemm_avx512_attn(q, q_stride, n_q, pos0, kc, vc, kv_stride, hd, scale, s, out,
                             out_stride);
    else
        cpu_gemm_avx2_attn(q, q_stride, n_q, pos0, kc, vc, kv_stride, hd, scale, s, out,
                           out_stride);
}
