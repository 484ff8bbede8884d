/* cpu_dot.c — the cpu engine's activation quantizers, the portable build of its dot kernels
 * (cpu_dot_impl.h) and the run-time choice between it and the AVX2 / AVX-512 builds
 * (cpu_dot_avx2.c, cpu_dot_avx512.c).
 *
 * Invariant: every build gives the same bits for every type (tests/test_cpu.c checks it on
 * random blocks), so the choice changes speed only. Start reading: cpu_dot_rows().
 */
#include "cpu_dot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include "base/sanitize.h"

#define CPU_DOT_NAME(x) cpu_dot_portable_##x
#include "cpu_dot_impl.h"
#undef CPU_DOT_NAME

int cpu_act_kind(int type)
{
    switch (type) {
    case QUANT_F32:
    case QUANT_F16:
    case QUANT_BF16:
        return CPU_ACT_F32;
    case QUANT_Q4_0:
    case QUANT_Q4_1:
    case QUANT_Q5_0:
    case QUANT_Q5_1:
    case QUANT_Q8_0:
        return CPU_ACT_Q16_32;
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K:
        return CPU_ACT_Q16_K;
    default:
        return -1;
    }
}

size_t cpu_act_row_bytes(int type, int64_t n)
{
    switch (cpu_act_kind(type)) {
    case CPU_ACT_F32:
        return (size_t)n * sizeof(float);
    case CPU_ACT_Q16_32:
        return (size_t)(n / 32) * sizeof(struct cpu_q16_32);
    case CPU_ACT_Q16_K:
        return (size_t)(n / QK_K) * sizeof(struct cpu_q16_K);
    default:
        return 0;
    }
}

/* the largest |x[i]| over n values (exact operations: the clones agree bit for bit) */
QUANT_VECTOR_CLONES
static float absmax(const float *x, int n)
{
    float a = 0.0f;
    for (int i = 0; i < n; i++) {
        const float v = fabsf(x[i]);
        a = v > a ? v : a;
    }
    return a;
}

/* q = round-to-nearest-even(x / d) in [-QMAX, QMAX]; returns the sum of the q */
QUANT_VECTOR_CLONES
static int32_t quantize_block(const float *x, int16_t *q, int n, float id)
{
    int32_t sum = 0;
    for (int i = 0; i < n; i++) {
        float v = nearbyintf(x[i] * id);
        v = v > (float)CPU_ACT_QMAX    ? (float)CPU_ACT_QMAX
            : v < -(float)CPU_ACT_QMAX ? -(float)CPU_ACT_QMAX
                                       : v;
        q[i] = (int16_t)v;
        sum += q[i];
    }
    return sum;
}

void cpu_act_quantize(int type, const float *x, void *dst, int64_t n)
{
    switch (cpu_act_kind(type)) {
    case CPU_ACT_F32:
        memcpy(dst, x, (size_t)n * sizeof(float));
        return;
    case CPU_ACT_Q16_32: {
        struct cpu_q16_32 *y = dst;
        for (int64_t i = 0; i < n / 32; i++) {
            const float d = absmax(x + 32 * i, 32) / (float)CPU_ACT_QMAX;
            const float id = d > 0.0f ? 1.0f / d : 0.0f;
            const int32_t s = quantize_block(x + 32 * i, y[i].qs, 32, id);
            y[i].d = d;
            y[i].s = d * (float)s;
        }
        return;
    }
    case CPU_ACT_Q16_K: {
        struct cpu_q16_K *y = dst;
        for (int64_t i = 0; i < n / QK_K; i++) {
            const float d = absmax(x + QK_K * i, QK_K) / (float)CPU_ACT_QMAX;
            const float id = d > 0.0f ? 1.0f / d : 0.0f;
            for (int j = 0; j < QK_K / 32; j++)
                y[i].sums[j] = quantize_block(x + QK_K * i + 32 * j, y[i].qs + 32 * j, 32, id);
            y[i].d = d;
        }
        return;
    }
    default:
        abort(); /* broken invariant: cpu_open admits only types cpu_act_kind() knows */
    }
}

int cpu_dot_have_avx2(void)
{
#if defined(__x86_64__) && defined(__GNUC__) && defined(GATE_CPU_AVX2)
    /* F16C through CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know
     * "f16c", and the fuzz build (fuzz/README.md) compiles this file with clang */
    /* asked once: CPUID traps to the hypervisor on a VM, and this is asked per product */
    static int have = -1;
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        h = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
            __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return h;
#else
    return 0;
#endif
}

int cpu_dot_have_avx512(void)
{
#if defined(__x86_64__) && defined(__GNUC__) && defined(GATE_CPU_AVX2)
    return cpu_dot_have_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

/* The instruction set the dispatchers below use: the best this machine and build run, capped by
 * cpu_dot_set_isa() or, before any call to it, by GATE_CPU_ISA (read once). */
static _Atomic int isa_cap = -2; /* -2: GATE_CPU_ISA not read yet; -1: no cap */

static const char *const ISA_NAMES[] = {"portable", "avx2", "avx512"};

static int isa_hw(void)
{
    return cpu_dot_have_avx512() ? CPU_ISA_AVX512 : cpu_dot_have_avx2() ? CPU_ISA_AVX2 : 0;
}

static int isa_parse(const char *name)
{
    for (int i = 0; name && i < 3; i++)
        if (!strcmp(name, ISA_NAMES[i]))
            return i;
    return -1;
}

int cpu_dot_isa(void)
{
    int cap = isa_cap;
    if (cap == -2) {
        const char *e = getenv("GATE_CPU_ISA");
        const int v = e && *e ? isa_parse(e) : -1;
        /* an unknown name caps nothing here; cpu_open refuses it with the reason */
        cap = v;
        isa_cap = cap;
    }
    const int hw = isa_hw();
    return cap >= 0 && cap < hw ? cap : hw;
}

const char *cpu_dot_isa_name(int level)
{
    return level >= 0 && level < 3 ? ISA_NAMES[level] : "?";
}

int cpu_dot_set_isa(const char *name)
{
    if (!name || !*name) {
        isa_cap = -1;
        return 0;
    }
    const int v = isa_parse(name);
    if (v < 0 || v > isa_hw())
        return -1;
    isa_cap = v;
    return 0;
}

int cpu_dot_isa_env_ok(void)
{
    const char *e = getenv("GATE_CPU_ISA");
    const int v = e && *e ? isa_parse(e) : 0;
    return v >= 0 && v <= isa_hw();
}

/* The sanitizer build compiles the SIMD files (cpu_dot_avx2.c, cpu_dot_avx512.c, cpu_gemm_*.c)
 * outside the instrumentation, at -O3 (CMakeLists.txt: instrumented they made the sanitizer suite
 * about a third slower, and at -O3 their compile four times longer), so every range a kernel
 * reads or writes is checked whole here, in the dispatchers, before it runs (base/sanitize.h;
 * nothing in the other builds). A tile's: n_rows weight rows, each token's activation row and its
 * n_rows outputs. */
static void check_tile(int type, const void *w, size_t row_bytes, int n_rows, const void *act,
                       size_t act_stride, int n_tok, int64_t n, const float *out, size_t out_stride)
{
    if (n_rows <= 0 || n_tok <= 0)
        return;
    gate_check_range(w, (size_t)(n_rows - 1) * row_bytes + quant_row_bytes(type, n));
    for (int t = 0; t < n_tok; t++) {
        gate_check_range((const uint8_t *)act + (size_t)t * act_stride, cpu_act_row_bytes(type, n));
        gate_check_range(out + (size_t)t * out_stride, (size_t)n_rows * sizeof *out);
    }
}

void cpu_dot_rows(int type, const void *w, const void *act, size_t act_stride, int n_tok, int64_t n,
                  float *out, size_t out_stride)
{
    check_tile(type, w, 0, 1, act, act_stride, n_tok, n, out, out_stride);
    if (cpu_dot_isa() >= CPU_ISA_AVX512)
        cpu_dot_avx512_rows(type, w, act, act_stride, n_tok, n, out, out_stride);
    else if (cpu_dot_isa() >= CPU_ISA_AVX2)
        cpu_dot_avx2_rows(type, w, act, act_stride, n_tok, n, out, out_stride);
    else
        cpu_dot_portable_rows(type, w, act, act_stride, n_tok, n, out, out_stride);
}

void cpu_dot_tile(int type, const uint8_t *w, size_t row_bytes, int n_rows, const void *act,
                  size_t act_stride, int n_tok, int64_t n, float *out, size_t out_stride)
{
    check_tile(type, w, row_bytes, n_rows, act, act_stride, n_tok, n, out, out_stride);
    if (cpu_dot_isa() >= CPU_ISA_AVX512)
        cpu_dot_avx512_tile(type, w, row_bytes, n_rows, act, act_stride, n_tok, n, out, out_stride);
    else if (cpu_dot_isa() >= CPU_ISA_AVX2)
        cpu_dot_avx2_tile(type, w, row_bytes, n_rows, act, act_stride, n_tok, n, out, out_stride);
    else
        cpu_dot_portable_tile(type, w, row_bytes, n_rows, act, act_stride, n_tok, n, out,
                              out_stride);
}

void cpu_attn_head(const float *q, const float *kc, const float *vc, size_t stride, int n_keys,
                   int hd, float scale, float *s, float *out)
{
    if (n_keys > 0) { /* the query, n_keys key and value rows, the scores, the output */
        const size_t rows = ((size_t)(n_keys - 1) * stride + (size_t)hd) * sizeof(float);
        gate_check_range(q, (size_t)hd * sizeof *q);
        gate_check_range(kc, rows);
        gate_check_range(vc, rows);
        gate_check_range(s, (size_t)n_keys * sizeof *s);
        gate_check_range(out, (size_t)hd * sizeof *out);
    }
    if (cpu_dot_isa() >= CPU_ISA_AVX512)
        cpu_dot_avx512_attn(q, kc, vc, stride, n_keys, hd, scale, s, out);
    else if (cpu_dot_isa() >= CPU_ISA_AVX2)
        cpu_dot_avx2_attn(q, kc, vc, stride, n_keys, hd, scale, s, out);
    else
        cpu_dot_portable_attn(q, kc, vc, stride, n_keys, hd, scale, s, out);
}

#if defined(GATE_CPU_AVX2) /* defined by cpu_dot_impl.h in the x86 builds */
float cpu_dot_avx2_f32(const float *a, const float *b, int64_t n);
float cpu_dot_avx512_f32(const float *a, const float *b, int64_t n);
#endif

float cpu_dot_f32(const float *a, const float *b, int64_t n)
{
    gate_check_floats(a, n);
    gate_check_floats(b, n);
#if defined(GATE_CPU_AVX2)
    if (cpu_dot_isa() >= CPU_ISA_AVX512)
        return cpu_dot_avx512_f32(a, b, n);
    if (cpu_dot_isa() >= CPU_ISA_AVX2)
        return cpu_dot_avx2_f32(a, b, n);
#endif
    return cpu_dot_portable_f32(a, b, n);
}
