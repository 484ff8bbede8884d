/* test_cpu.c — the `cpu` engine (engine/cpu.c, engine/cpu_dot*.c) as a subject of the gate.
 *
 * Every conformance case through cpu.decode / cpu.prefill / cpu.chat PASSES parity against the
 * judge with the default thresholds AND with thresholds at 3x its own measured noise (CPU_NOISE),
 * and a batched forward stays within 3x its measured NMSE of the float64 evaluation; the
 * activation quantizer keeps 12 bits and rounds to nearest, and the kernels equal the exact
 * product of what they quantized to float rounding; the AVX2 kernels equal the portable ones bit
 * for bit on random blocks of every type, and the whole forward is bit-identical under every
 * instruction set the host runs (GATE_REQUIRE_ISA turns a missing one into a failure); logits do
 * not depend on the thread count or on n_batch; falsification rejects every fault on the tiny
 * MoE; what ran is reported as cpu.
 * Under ASan (check_asan(): the sanitizer build, ~5-10x slower, proves memory safety; the normal
 * build proves the numbers) printed subsets ("ASan: N of M"): the noise sweep runs the Q4_K_M
 * cases' chat path (batched turns and decoded tokens: every K-quant kernel, routing, both
 * attention paths), the thread-count checks 3 threads only (against 1, or the MoE decode against
 * the 2-thread batch), the F16 cache's invariance 3 of its 9 thread and chunk settings;
 * everything else runs whole.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "engine/backend.h"
#include "engine/cpu_dot.h"
#include "engine/cpu_gemm.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "engine/synth.h"
#include "harness/gatedef.h"
#include "oracles/falsify.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include "tests/support/check.h"
#include "tests/support/conformance.h"
#include "tests/support/skip.h"

static struct mode mode_of(const char *text)
{
    struct mode m;
    struct gate_err err = {0};
    cr_assert_eq(mode_parse(text, &m, &err), 0, "%s", err.msg);
    return m;
}

/* ---- accuracy against the measured noise (issue 28) ---------------------------------------------
 *
 * The release defaults (min cosine 0.999, max KL 1e-2) sit 250-870x above what a correct cpu
 * engine does on these cases: an 11-bit activation quantizer or a truncating rounding passes
 * them. So each case is ALSO held to its own measured noise: the worst value of each parity
 * metric over cpu.decode, cpu.prefill and cpu.chat against the judge, and the NMSE of a batched
 * forward of tokens.txt against the float64 evaluation (logits_exact.f32), times a stated factor.
 *
 * Measured 2026-12-02 at cb2af35, 2 threads (the engine's numbers do not depend on the thread
 * count, the batching or the instruction set: tested below and by the consistency gate). The
 * factor: NOISE_FACTOR on the measures that grow with the square of the error (1 - cosine, KL,
 * NMSE), its square root on the linear ones (rel-L2) — one factor on the error's energy. 3 keeps
 * room for a legitimate reordering of sums (which moves these numbers by a few percent) and
 * stays below the 4x that one bit less of activation precision costs. A change to the engine's
 * numerics that moves them further is measured again, and this table changes with it. */
#define NOISE_FACTOR 3.0

struct cpu_noise {
    const char *name;
    double one_minus_cos, mean_kld, max_kld, max_rel_l2, mean_rel_l2; /* vs the judge */
    double nmse_exact; /* a batched forward of tokens.txt vs logits_exact.f32 */
};

static const struct cpu_noise CPU_NOISE[] = {
    /* case                      1-cos    mean KL  max KL   rel-L2 max, mean  NMSE vs exact */
    {"qwen3-dense-tiny-f32", 1.3e-13, 6.3e-13, 2.9e-12, 5.1e-7, 3.8e-7, 9.2e-14},
    {"qwen3-dense-tiny-q8_0", 4.4e-7, 2.1e-6, 6.6e-6, 9.4e-4, 7.5e-4, 5.5e-7},
    {"qwen3-dense-tiny-q4_k_m", 1.2e-6, 4.2e-6, 1.9e-5, 1.6e-3, 1.1e-3, 1.2e-6},
    {"qwen3moe-tiny-f32", 2.5e-13, 5.9e-13, 2.5e-12, 7.1e-7, 3.7e-7, 9.6e-14},
    {"qwen3moe-tiny-q8_0", 5.4e-7, 2.0e-6, 6.6e-6, 1.1e-3, 6.9e-4, 4.8e-7},
    {"qwen3moe-tiny-q4_k_m", 1.1e-6, 3.7e-6, 2.2e-5, 1.5e-3, 9.8e-4, 9.7e-7},
};

static const struct cpu_noise *noise_of(const char *name)
{
    for (size_t i = 0; i < sizeof CPU_NOISE / sizeof CPU_NOISE[0]; i++)
        if (!strcmp(CPU_NOISE[i].name, name))
            return &CPU_NOISE[i];
    cr_expect_fail("conformance case %s has no measured cpu noise in CPU_NOISE: measure it", name);
    return NULL;
}

/* The parity thresholds of case n: its measured noise times the factor. */
static struct parity_config noise_config(const struct cpu_noise *n)
{
    struct parity_config c;
    gatedef_parity_config(NULL, &c);
    const double lin = sqrt(NOISE_FACTOR);
    c.min_cosine = 1.0 - NOISE_FACTOR * n->one_minus_cos;
    c.max_mean_kld = NOISE_FACTOR * n->mean_kld;
    c.max_kld = NOISE_FACTOR * n->max_kld;
    c.max_rel_l2 = lin * n->max_rel_l2;
    c.max_mean_rel_l2 = lin * n->mean_rel_l2;
    return c;
}

Test(cpu, every_conformance_case_stays_within_its_measured_noise_on_every_path, .timeout = 1200)
{
    static char cases[CONFORMANCE_MAX_CASES][CONFORMANCE_NAME_MAX];
    const int n = conformance_cases(cases, CONFORMANCE_MAX_CASES);
    cr_assert_geq(n, 6, "expected the six conformance cases, found %d", n);
    const char *modes[] = {"cpu.decode", "cpu.prefill", "cpu.chat"};
    struct parity_config def;
    gatedef_parity_config(NULL, &def);
    /* sanitizer builds run ~10x slower: there the Q4_K_M cases (dense and MoE: every K-quant
     * kernel, routing) on the chat path (batched turns and decoded tokens) show memory safety;
     * the normal build judges all six on every path */
    const int asan = check_asan();
    if (asan)
        fprintf(stderr, "cpu: ASan: 2 of %d (case, path) items: the Q4_K_M cases' cpu.chat\n",
                3 * n);
    for (int c = 0; c < n; c++) {
        if (asan && !strstr(cases[c], "q4_k_m"))
            continue;
        const struct cpu_noise *noise = noise_of(cases[c]);
        struct model *m = check_load_case(cases[c]);
        double w[5] = {0, 0, 0, 0, 0}; /* this run's worst: 1-cos, mean KL, max KL, rel-L2 x2 */
        for (int i = asan ? 2 : 0; i < 3; i++) {
            struct mode mode = mode_of(modes[i]);
            struct parity_result r;
            struct gate_err err = {0};
            cr_assert_eq(parity_run(m, &mode, NULL, NULL, 0, &def, 2, &r, &err), 0, "%s %s: %s",
                         cases[c], modes[i], err.msg);
            printf("cpu parity %-24s %-12s 1-cos %.3e  max KL %.3e  mean KL %.3e  max rel-L2 "
                   "%.3e  mean rel-L2 %.3e  tie flips %d  wrong %d\n",
                   cases[c], modes[i], 1.0 - r.cosine.min, r.kld.max, r.kld.mean, r.rel_l2.max,
                   r.rel_l2.mean, r.n_tie_flip, r.n_wrong);
            /* the release defaults, as every cpu cell of a ladder uses them */
            cr_expect(r.pass, "%s %s: %s", cases[c], modes[i], r.reason);
            cr_expect_eq(r.n_wrong, 0, "%s %s", cases[c], modes[i]);
            /* the same positions against this case's measured noise */
            if (noise) {
                const struct parity_config tight = noise_config(noise);
                struct parity_summary s;
                parity_summarize(r.pos, r.n_pos, &tight, &s);
                s.route = r.route;
                char why[600];
                cr_expect(parity_verdict(&tight, &s, NULL, why, sizeof why),
                          "%s %s against %g x its measured noise: %s", cases[c], modes[i],
                          NOISE_FACTOR, why);
            }
            const double v[5] = {1.0 - r.cosine.min, r.kld.mean, r.kld.max, r.rel_l2.max,
                                 r.rel_l2.mean};
            for (int k = 0; k < 5; k++)
                w[k] = v[k] > w[k] ? v[k] : w[k];
            parity_result_free(&r);
        }
        /* the line to paste into CPU_NOISE after a deliberate change of the numerics */
        printf("cpu noise {\"%s\", %.2g, %.2g, %.2g, %.2g, %.2g, ...}\n", cases[c], w[0], w[1],
               w[2], w[3], w[4]);
        model_free(m);
    }
}

/* The cpu engine against the exact float64 evaluation where the case has one: a batched
 * forward of tokens.txt (decode and chunked prefill give the same bits: tested below), NMSE
 * over every logit within the factor of the measured NMSE. */
Test(cpu, logits_stay_within_the_measured_noise_of_the_exact_float64_evaluation, .timeout = 1200)
{
    static char cases[CONFORMANCE_MAX_CASES][CONFORMANCE_NAME_MAX];
    const int n = conformance_cases(cases, CONFORMANCE_MAX_CASES);
    cr_assert_geq(n, 6, "expected the six conformance cases, found %d", n);
    for (int c = 0; c < n; c++) {
        size_t bytes = 0;
        float *exact = (float *)check_slurp(conformance_path(cases[c], "logits_exact.f32"), &bytes);
        if (!exact) {
            printf("cpu exact: %s has no logits_exact.f32: nothing to compare\n", cases[c]);
            continue;
        }
        const struct cpu_noise *noise = noise_of(cases[c]);
        struct model *m = check_load_case(cases[c]);
        int n_tok = 0;
        int32_t *tokens = check_read_ids(conformance_path(cases[c], "tokens.txt"), &n_tok);
        cr_assert(tokens && n_tok > 0, "%s: tokens.txt", cases[c]);
        const size_t V = m->hp.n_vocab;
        cr_assert_eq(bytes, (size_t)n_tok * V * sizeof(float), "%s: logits_exact.f32 size",
                     cases[c]);
        struct backend_config cfg = {.n_threads = 2, .n_ctx = n_tok, .n_batch = n_tok};
        struct backend *b = NULL;
        struct gate_err err = {0};
        cr_assert_eq(backend_open(&b, "cpu", m, &cfg, &err), 0, "%s", err.msg);
        float *got = malloc((size_t)n_tok * V * sizeof(float));
        cr_assert(got);
        cr_assert_eq(backend_forward(b, tokens, n_tok, 0, got, &err), 0, "%s", err.msg);
        backend_close(b);
        const struct compare_stats st =
            check_cmp(got, exact, (int64_t)n_tok * (int64_t)V, INFINITY, 0.0);
        printf("cpu exact %-24s NMSE %.3e  max |diff| %.3e  (measured %.3g, limit %.3g)\n",
               cases[c], st.nmse, st.max_abs, noise ? noise->nmse_exact : NAN,
               noise ? NOISE_FACTOR * noise->nmse_exact : NAN);
        cr_expect_eq(st.n_nonfinite, 0, "%s", cases[c]);
        if (noise)
            cr_expect_leq(st.nmse, NOISE_FACTOR * noise->nmse_exact,
                          "%s: NMSE %.4g vs the float64 evaluation > %g x the measured %.4g",
                          cases[c], st.nmse, NOISE_FACTOR, noise->nmse_exact);
        free(got);
        free(tokens);
        free(exact);
        model_free(m);
    }
}

/* ---- the kernels ------------------------------------------------------------------------------
 */

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static uint64_t next_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static float uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(next_u64() >> 11) / 9007199254740992.0);
}

/* A weight row of n elements of `type`: random bytes everywhere (every code value), then each
 * block's fp16 scales replaced by finite ones (random bytes would make NaN and Inf). */
static void random_row(int type, uint8_t *row, int64_t n)
{
    const size_t bytes = quant_row_bytes(type, n);
    for (size_t i = 0; i < bytes; i++)
        row[i] = (uint8_t)next_u64();
    const int64_t bs = quant_block_size(type), ts = quant_type_size(type);
    for (int64_t b = 0; b < n / bs; b++) {
        uint8_t *blk = row + b * ts;
        uint16_t h[2] = {quant_f32_to_fp16(uniform(-0.05f, 0.05f)),
                         quant_f32_to_fp16(uniform(0.0f, 0.02f))};
        switch (type) {
        case QUANT_F32: {
            const float f = uniform(-1.0f, 1.0f);
            memcpy(blk, &f, 4);
            break;
        }
        case QUANT_F16:
            memcpy(blk, h, 2);
            break;
        case QUANT_BF16: {
            const uint16_t v = quant_f32_to_bf16(uniform(-1.0f, 1.0f));
            memcpy(blk, &v, 2);
            break;
        }
        case QUANT_Q4_1:
        case QUANT_Q5_1:
        case QUANT_Q4_K:
        case QUANT_Q5_K: /* d, then m / dmin */
            memcpy(blk, h, 4);
            break;
        case QUANT_Q6_K: /* d is last */
            memcpy(blk + ts - 2, h, 2);
            break;
        default: /* Q4_0, Q5_0, Q8_0: d first */
            memcpy(blk, h, 2);
            break;
        }
    }
}

/* The test's own inputs are finite: the first device host (gcc 13.3, AVX-512 FP16) reported NaN
 * from both kernels and from the float64 product of the F32 rows, which only a NaN input makes;
 * this names the value, its index and its bits, so the next run says which input it was. */
static void expect_finite_inputs(const char *what, int type, const uint8_t *row, int64_t n,
                                 const float *x, int64_t n_x)
{
    float *w = malloc((size_t)n * sizeof(float));
    cr_assert(w);
    quant_dequant_row(type, row, w, n);
    for (int64_t i = 0; i < n_x; i++) { /* x: n_x / n tokens of the row's n weights */
        const float wi = w[i % n];
        uint32_t wb, xb;
        memcpy(&wb, &wi, 4);
        memcpy(&xb, &x[i], 4);
        cr_assert(isfinite(wi) && isfinite(x[i]),
                  "%s %s: input %lld is not finite: weight %g (bits %08x), activation %g (bits"
                  " %08x)",
                  what, quant_name(type), (long long)i, (double)wi, wb, (double)x[i], xb);
    }
    free(w);
}

static const int KERNEL_TYPES[] = {QUANT_F32,  QUANT_F16,  QUANT_BF16, QUANT_Q4_0,
                                   QUANT_Q4_1, QUANT_Q5_0, QUANT_Q5_1, QUANT_Q8_0,
                                   QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K};
#define N_KERNEL_TYPES (int)(sizeof KERNEL_TYPES / sizeof KERNEL_TYPES[0])

Test(cpu, avx2_kernels_equal_the_portable_ones_bit_for_bit)
{
    /* and the AVX-512 ones where the CPU has AVX-512 BW/VL/VNNI (said on stdout either way) */
    printf("cpu kernels: avx2 %s, avx512 %s\n", cpu_dot_have_avx2() ? "tested" : "absent",
           cpu_dot_have_avx512() ? "tested" : "absent (not tested on this machine)");
    if (!cpu_dot_have_avx2())
        check_skip_no_isa(
            "avx2", "this CPU or build has no AVX2+FMA+F16C: only the portable kernels exist");
    /* five K-quant blocks; forty-one 32-blocks (the four-block loops have a tail); float rows
     * 1312 = 164 x 8 */
    const int64_t n_max = 1024 + 256 + 32;
    uint8_t *row = malloc(quant_row_bytes(QUANT_F32, n_max));
    float *x = malloc((size_t)CPU_DOT_MAX_TOK * (size_t)n_max * sizeof(float));
    uint8_t *act = malloc((size_t)CPU_DOT_MAX_TOK * cpu_act_row_bytes(QUANT_F32, n_max));
    for (int ti = 0; ti < N_KERNEL_TYPES; ti++) {
        const int type = KERNEL_TYPES[ti];
        const int64_t n = quant_block_size(type) == QK_K ? 1024 + 256 : n_max;
        const size_t as = cpu_act_row_bytes(type, n);
        for (int trial = 0; trial < 20; trial++) {
            random_row(type, row, n);
            for (int t = 0; t < CPU_DOT_MAX_TOK; t++) {
                /* mixed magnitudes, one outlier per token: the activation scale is stressed */
                const float mag = trial % 2 ? 100.0f : 0.01f;
                for (int64_t i = 0; i < n; i++)
                    x[(size_t)t * n + i] = uniform(-mag, mag);
                x[(size_t)t * n + (int64_t)(next_u64() % (uint64_t)n)] = 40.0f * mag;
                cpu_act_quantize(type, x + (size_t)t * n, act + (size_t)t * as, n);
            }
            expect_finite_inputs("avx2 vs portable", type, row, n, x, CPU_DOT_MAX_TOK * n);
            for (int nt = 1; nt <= CPU_DOT_MAX_TOK; nt++) {
                float a[CPU_DOT_MAX_TOK], p[CPU_DOT_MAX_TOK];
                cpu_dot_avx2_rows(type, row, act, as, nt, n, a, 1);
                cpu_dot_portable_rows(type, row, act, as, nt, n, p, 1);
                cr_assert(!memcmp(a, p, (size_t)nt * sizeof(float)),
                          "%s, %d tokens, trial %d: avx2 %.9g != portable %.9g", quant_name(type),
                          nt, trial, (double)a[0], (double)p[0]);
                if (cpu_dot_have_avx512()) {
                    float z[CPU_DOT_MAX_TOK];
                    cpu_dot_avx512_rows(type, row, act, as, nt, n, z, 1);
                    cr_assert(!memcmp(z, p, (size_t)nt * sizeof(float)),
                              "%s, %d tokens, trial %d: avx512 %.9g != portable %.9g",
                              quant_name(type), nt, trial, (double)z[0], (double)p[0]);
                }
                /* a token's result does not depend on the tokens it is tiled with */
                float one;
                cpu_dot_rows(type, row, act + (size_t)(nt - 1) * as, as, 1, n, &one, 1);
                cr_assert(!memcmp(&one, &a[nt - 1], sizeof one), "%s: tiling changed a result",
                          quant_name(type));
            }
        }
    }
    free(row);
    free(x);
    free(act);
}

Test(cpu, attention_heads_are_bit_identical_in_every_build)
{
    if (!cpu_dot_have_avx2())
        check_skip_no_isa(
            "avx2", "this CPU or build has no AVX2+FMA+F16C: only the portable kernels exist");
    /* head dims: the AVX2 kernel's 64-dim register blocks (128), 64 + 8 (72), 8-dim ones only
     * (8, 24), one it leaves to the portable loop (12); key counts 1 .. 77 by 19: every count
     * mod 4 (its scores four keys at a time) */
    const int hds[] = {128, 72, 24, 8, 12}, n_keys = 77, stride = 2 * 128;
    float *q = malloc(128 * sizeof(float)),
          *kv = malloc(2 * (size_t)n_keys * stride * sizeof(float));
    float s[77], p[128], a[128], z[128];
    for (int i = 0; i < 128; i++)
        q[i] = uniform(-3.0f, 3.0f);
    for (int i = 0; i < 2 * n_keys * stride; i++)
        kv[i] = uniform(-2.0f, 2.0f);
    const float *kc = kv + 128, *vc = kv + (size_t)n_keys * stride; /* second head's slots */
    for (int h = 0; h < 5; h++) {
        const int hd = hds[h];
        const size_t bytes = (size_t)hd * sizeof(float);
        for (int n = 1; n <= n_keys; n += 19) {
            cpu_dot_portable_attn(q, kc, vc, stride, n, hd, 0.0883883f, s, p);
            cpu_dot_avx2_attn(q, kc, vc, stride, n, hd, 0.0883883f, s, a);
            cr_assert(!memcmp(p, a, bytes), "hd %d, %d keys: avx2 attention differs from portable",
                      hd, n);
            if (cpu_dot_have_avx512()) {
                cpu_dot_avx512_attn(q, kc, vc, stride, n, hd, 0.0883883f, s, z);
                cr_assert(!memcmp(p, z, bytes), "hd %d, %d keys: avx512 attention differs", hd, n);
            }
        }
    }
    free(q);
    free(kv);
}

/* The activations as the kernels see them: xq[i] = d * q[i] of the quantized row (n). */
static void act_values(int type, const void *act, int64_t n, float *xq)
{
    if (cpu_act_kind(type) == CPU_ACT_F32) {
        memcpy(xq, act, (size_t)n * sizeof(float));
    } else if (cpu_act_kind(type) == CPU_ACT_Q16_32) {
        const struct cpu_q16_32 *y = act;
        for (int64_t i = 0; i < n; i++)
            xq[i] = y[i / 32].d * (float)y[i / 32].qs[i % 32];
    } else {
        const struct cpu_q16_K *y = act;
        for (int64_t i = 0; i < n; i++)
            xq[i] = y[i / QK_K].d * (float)y[i / QK_K].qs[i % QK_K];
    }
}

/* The kernels against exact arithmetic, in the two steps a single worst-case bound on the
 * product cannot tell apart (that bound sat ~30x above the typical error: a coarser or
 * truncating quantizer passed it):
 * 1. the quantizer: each block's step d is its largest |x| / 2047 — 12 bits, the engine's
 *    documented precision, stated here rather than read from CPU_ACT_QMAX — and every value lies
 *    within half a step of d q (round to nearest; truncation errs by up to a whole step); the
 *    block sums are the sums of the codes;
 * 2. the product: the kernel equals the float64 dot of the weights with those quantized values to
 *    the float rounding of its block sums: |got - exact| <= KERNEL_ROUND_FACTOR x the worst
 *    relative error measured over these trials (sum |w xq| as the scale). */
#define ACT_QMAX_12BIT 2047.0f
/* measured 2026-12-02 at cb2af35 (portable and AVX2 builds, every type, 10 trials of 512): the
 * largest |got - exact| / sum |w xq| was 1.82e-8; the factor 4 is stated */
#define KERNEL_ROUND_REL 1.9e-8
#define KERNEL_ROUND_FACTOR 4.0

Test(cpu, kernels_quantize_to_12_bits_and_equal_the_exact_product_of_what_they_quantized)
{
    const int64_t n = 512;
    uint8_t *row = malloc(quant_row_bytes(QUANT_F32, n));
    float *w = malloc((size_t)n * sizeof(float)), *x = malloc((size_t)n * sizeof(float));
    float *xq = malloc((size_t)n * sizeof(float));
    uint8_t *act = malloc(cpu_act_row_bytes(QUANT_F32, n));
    double worst_rel = 0.0, worst_step = 0.0;
    for (int ti = 0; ti < N_KERNEL_TYPES; ti++) {
        const int type = KERNEL_TYPES[ti];
        const int kind = cpu_act_kind(type);
        const int64_t bs = kind == CPU_ACT_Q16_K ? QK_K : 32;
        for (int trial = 0; trial < 10; trial++) {
            random_row(type, row, n);
            quant_dequant_row(type, row, w, n);
            for (int64_t i = 0; i < n; i++)
                x[i] = uniform(-2.0f, 2.0f);
            expect_finite_inputs("12-bit kernels", type, row, n, x, n);
            cpu_act_quantize(type, x, act, n);
            act_values(type, act, n, xq);
            /* 1. the quantizer */
            for (int64_t b = 0; kind != CPU_ACT_F32 && b < n / bs; b++) {
                float amax = 0.0f;
                for (int64_t i = b * bs; i < (b + 1) * bs; i++)
                    amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
                const float d = kind == CPU_ACT_Q16_K ? ((const struct cpu_q16_K *)act)[b].d
                                                      : ((const struct cpu_q16_32 *)act)[b].d;
                cr_assert_float_eq(d, amax / ACT_QMAX_12BIT, 1e-6 * amax,
                                   "%s block %lld: step %.9g, not max|x| / 2047 = %.9g",
                                   quant_name(type), (long long)b, (double)d,
                                   (double)(amax / ACT_QMAX_12BIT));
                for (int64_t i = b * bs; i < (b + 1) * bs; i++) {
                    const double e = fabs((double)x[i] - (double)xq[i]) / d;
                    worst_step = e > worst_step ? e : worst_step;
                    cr_assert_leq(e, 0.5 + 1e-3, "%s: x[%lld] %.9g is %.4f steps from its code",
                                  quant_name(type), (long long)i, (double)x[i], e);
                }
                if (kind == CPU_ACT_Q16_32) {
                    const struct cpu_q16_32 *y = (const struct cpu_q16_32 *)act + b;
                    int32_t sum = 0;
                    for (int i = 0; i < 32; i++)
                        sum += y->qs[i];
                    cr_assert_eq(y->s, y->d * (float)sum, "%s block %lld: s", quant_name(type),
                                 (long long)b);
                } else {
                    const struct cpu_q16_K *y = (const struct cpu_q16_K *)act + b;
                    for (int j = 0; j < QK_K / 32; j++) {
                        int32_t sum = 0;
                        for (int i = 0; i < 32; i++)
                            sum += y->qs[32 * j + i];
                        cr_assert_eq(y->sums[j], sum, "%s block %lld: sums[%d]", quant_name(type),
                                     (long long)b, j);
                    }
                }
            }
            /* 2. the product of what was quantized */
            double exact = 0.0, mag = 0.0;
            for (int64_t i = 0; i < n; i++) {
                exact += (double)w[i] * xq[i];
                mag += fabs((double)w[i] * xq[i]);
            }
            float got[2];
            cpu_dot_portable_rows(type, row, act, 0, 1, n, &got[0], 1);
            cpu_dot_rows(type, row, act, 0, 1, n, &got[1], 1);
            for (int k = 0; k < 2; k++) {
                const double rel = fabs(got[k] - exact) / (mag > 0 ? mag : 1.0);
                worst_rel = rel > worst_rel ? rel : worst_rel;
                cr_assert_leq(rel, KERNEL_ROUND_FACTOR * KERNEL_ROUND_REL,
                              "%s (%s build): %.9g vs the exact product %.9g of the quantized"
                              " activations: %.3g of sum |w xq|, > %g x the measured %g",
                              quant_name(type), k ? "selected" : "portable", (double)got[k], exact,
                              rel, KERNEL_ROUND_FACTOR, KERNEL_ROUND_REL);
            }
        }
    }
    printf("cpu kernels vs exact: worst quantization error %.4f steps, worst product error %.3g of"
           " sum |w xq| (measured %g)\n",
           worst_step, worst_rel, KERNEL_ROUND_REL);
    free(row);
    free(w);
    free(x);
    free(xq);
    free(act);
}

/* ---- the engine -------------------------------------------------------------------------------
 */

/* logits of `tokens` (n) through a cpu backend: the first `batched` in one forward, then one by
 * one. malloc'd (n, n_vocab). */
static float *run_cpu(const struct model *m, int threads, int n_batch, const int32_t *tokens, int n,
                      int batched)
{
    struct backend_config cfg = {.n_threads = threads, .n_ctx = 128, .n_batch = n_batch};
    struct backend *b = NULL;
    struct gate_err err = {0};
    cr_assert_eq(backend_open(&b, "cpu", m, &cfg, &err), 0, "%s", err.msg);
    const size_t V = m->hp.n_vocab;
    float *logits = malloc((size_t)n * V * sizeof(float));
    cr_assert_eq(backend_forward(b, tokens, batched, 0, logits, &err), 0, "%s", err.msg);
    for (int t = batched; t < n; t++)
        cr_assert_eq(backend_forward(b, tokens + t, 1, t, logits + (size_t)t * V, &err), 0, "%s",
                     err.msg);
    backend_close(b);
    return logits;
}

Test(cpu, logits_are_bit_identical_for_any_thread_count_and_batch)
{
    const char *cases[] = {"qwen3moe-tiny-q4_k_m", "qwen3-dense-tiny-q4_k_m",
                           "qwen3-dense-tiny-f32"};
    int32_t tokens[48];
    mode_tokens(PARITY_TOKEN_SEED, 512, 48, tokens);
    for (int c = 0; c < 3; c++) {
        struct model *m = check_load_case(cases[c]);
        const size_t bytes = (size_t)48 * m->hp.n_vocab * sizeof(float);
        float *one = run_cpu(m, 1, 0, tokens, 48, 40);
        const int asan = check_asan(); /* sanitizer builds: 1 against 3 threads */
        if (asan)
            fprintf(stderr, "cpu: ASan: 1 of 2 other thread counts (3) on %s\n", cases[c]);
        for (int threads = asan ? 3 : 2; threads <= 3; threads++) {
            float *other = run_cpu(m, threads, 0, tokens, 48, 40);
            cr_expect(!memcmp(one, other, bytes), "%s: %d threads differ from 1 thread", cases[c],
                      threads);
            free(other);
        }
        /* chunks of 7 tokens (the wrapper's n_batch) change no number either */
        float *chunked = run_cpu(m, 2, 7, tokens, 48, 40);
        cr_expect(!memcmp(one, chunked, bytes), "%s: n_batch 7 differs", cases[c]);
        free(chunked);
        free(one);
        model_free(m);
    }
}

/* issue 28: the whole forward under every instruction set this host runs, bit for bit — the
 * AVX2 tile and the portable path run on an AVX-512 host too. An instruction set the host lacks
 * is not run (said on stdout); where $GATE_REQUIRE_ISA names it (ci/test.sh: what /proc/cpuinfo
 * lists), that FAILS: a build or dispatcher that misses a set the CPU has cannot pass CI. Also
 * asserted: the cpu backend reports the set it ran, and selecting one does not outlive the run. */
Test(cpu, the_forward_is_bit_identical_under_every_isa_the_host_runs)
{
    static const char *const isas[] = {"portable", "avx2", "avx512"};
    const char *before = backend_isa("cpu");
    char best[16];
    snprintf(best, sizeof best, "%s", before);
    struct model *m = check_load_case("qwen3moe-tiny-q4_k_m"); /* Q4_K, Q5_K, Q6_K, Q8_0 */
    enum { N = 48 };
    int32_t tokens[N];
    mode_tokens(PARITY_TOKEN_SEED, (int)m->hp.n_vocab, N, tokens);
    const size_t bytes = (size_t)N * m->hp.n_vocab * sizeof(float);
    float *first = NULL;
    int ran = 0;
    for (int i = 0; i < 3; i++) {
        struct gate_err err = {0};
        if (backend_set_isa("cpu", isas[i], &err)) {
            printf("cpu isa %s: not on this host or build (not tested): %s\n", isas[i], err.msg);
            cr_expect(!check_isa_required(isas[i]),
                      "GATE_REQUIRE_ISA names %s but the cpu backend cannot run it: %s", isas[i],
                      err.msg);
            continue;
        }
        /* a batch of 40 (the prompt GEMM where the set has it), then 8 decoded tokens */
        float *got = run_cpu(m, 2, 0, tokens, N, 40);
        struct backend_config cfg = {.n_threads = 1, .n_ctx = 8};
        struct backend *b = NULL;
        cr_assert_eq(backend_open(&b, "cpu", m, &cfg, &err), 0, "%s", err.msg);
        cr_expect_str_eq(b->isa, isas[i], "the backend reports another set than the one selected");
        backend_close(b);
        printf("cpu isa %s: forward run\n", isas[i]);
        ran++;
        if (!first) {
            first = got;
            continue;
        }
        cr_expect(!memcmp(first, got, bytes), "isa %s: the logits differ from the portable ones",
                  isas[i]);
        free(got);
    }
    struct gate_err err = {0};
    cr_assert_eq(backend_set_isa("cpu", NULL, &err), 0, "%s", err.msg);
    cr_expect_str_eq(backend_isa("cpu"), best, "the best set was not restored");
    cr_expect_geq(ran, 1, "not even the portable path ran");
    free(first);
    model_free(m);
}

Test(cpu, falsification_rejects_every_fault_on_the_tiny_moe, .timeout = 1200)
{
    struct model *m = check_load_case("qwen3moe-tiny-q4_k_m");
    struct fault_set fs;
    falsify_default_faults(m, &fs);
    cr_assert_eq(fs.n, 4);
    struct falsify_config cfg;
    gatedef_falsify_config(NULL, &cfg);
    cfg.power_layers = 1; /* the probe at the last layer: this test is about the faults */
    if (check_asan()) {   /* sanitizer builds: one sweep sample per kind */
        fprintf(stderr, "cpu: ASan: 1 of %d sweep samples per kind\n", cfg.sweep_samples);
        cfg.sweep_samples = 1;
    }
    struct mode mode = mode_of("cpu.decode");
    int32_t ids[64];
    mode_tokens(PARITY_TOKEN_SEED, 512, 64, ids);
    struct falsify_result r;
    struct gate_err err = {0};
    cr_assert_eq(falsify_run(m, &mode, &fs, ids, 64, &cfg, 2, &r, &err), 0, "%s", err.msg);
    cr_expect(r.clean.pass, "clean cpu.decode: %s", r.clean.reason);
    for (int i = 0; i < r.n; i++) {
        cr_expect(r.f[i].fired, "%s did not fire on cpu", r.f[i].name);
        cr_expect(r.f[i].rejected, "%s escaped on cpu: %s", r.f[i].name, r.f[i].metric);
    }
    cr_expect_eq(r.verdict, GATE_PASS, "%s", r.reason);
    falsify_result_free(&r);
    model_free(m);
}

Test(cpu, reports_what_ran_and_describes_the_host)
{
    struct model *m = check_load_case("qwen3-dense-tiny-q8_0");
    int32_t tokens[4] = {1, 2, 3, 4};
    struct backend_config cfg = {.n_threads = 2, .n_ctx = 16};
    struct backend *b = NULL;
    struct gate_err err = {0};
    cr_assert_eq(backend_open(&b, "cpu", m, &cfg, &err), 0, "%s", err.msg);
    float *logits = malloc(4 * (size_t)m->hp.n_vocab * sizeof(float));
    cr_assert_eq(backend_forward(b, tokens, 4, 0, logits, &err), 0, "%s", err.msg);
    struct backend_info info;
    backend_info(b, &info);
    cr_expect_str_eq(info.backend, "cpu");
    cr_expect(!strncmp(info.device, "cpu", 3), "device '%s'", info.device);
    cr_expect_eq(info.kernel_launches, 0);
    cr_expect_eq(info.tokens, 4);
    struct backend_device dev;
    cr_expect_eq(backend_describe("cpu", &dev, &err), 0, "%s", err.msg);
    cr_expect_gt(dev.total_bytes, 0);
    /* the wrapper's contract holds for cpu too: a wrong position is refused, nothing runs */
    cr_expect_eq(backend_forward(b, tokens, 1, 0, logits, &err), ERR_INPUT);
    backend_close(b);
    free(logits);
    model_free(m);
}

Test(cpu, taps_record_the_same_layers_and_routes_as_the_twin)
{
    struct model *m = check_load_case("qwen3moe-tiny-q4_k_m");
    const int n = 40, L = (int)m->hp.n_layer, E = (int)m->hp.n_embd;
    const int k = (int)m->hp.n_expert_used;
    int32_t tokens[40];
    mode_tokens(PARITY_TOKEN_SEED, 512, n, tokens);
    float *hidden[2], *logits = malloc((size_t)n * m->hp.n_vocab * sizeof(float));
    int32_t *experts[2];
    float *kth[2];
    const char *names[2] = {"ref.decode", "cpu.prefill"};
    for (int s = 0; s < 2; s++) {
        hidden[s] = calloc((size_t)L * n * E, sizeof(float));
        experts[s] = calloc((size_t)L * n * k, sizeof(int32_t));
        kth[s] = calloc((size_t)L * n, sizeof(float));
        struct backend_taps taps = {
            .hidden = hidden[s], .experts = experts[s], .router_kth = kth[s]};
        struct mode mode = mode_of(names[s]);
        struct backend *b = NULL;
        struct gate_err err = {0};
        cr_assert_eq(mode_open(&b, &mode, m, 64, 2, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(mode_run_taps(b, mode.path, tokens, n, NULL, 0, logits, &taps, &err), 0, "%s",
                     err.msg);
        backend_close(b);
    }
    cr_expect(!memcmp(experts[0], experts[1], (size_t)L * n * k * sizeof(int32_t)),
              "cpu routed differently from the twin on the tiny MoE");
    for (int64_t i = 0; i < (int64_t)L * n; i++)
        cr_expect_leq(fabsf(kth[0][i] - kth[1][i]), 1e-2f, "router k-th logit at %lld",
                      (long long)i);
    check_floats("cpu hidden taps vs ref", hidden[1], hidden[0], (int64_t)L * n * E, 1e-2, 1e-2,
                 1e-6);
    for (int s = 0; s < 2; s++) {
        free(hidden[s]);
        free(experts[s]);
        free(kth[s]);
    }
    free(logits);
    model_free(m);
}

/* ---- the prompt path: last-position logits, the GEMM, the F16 KV cache (issue 17) ---------- */

Test(cpu, forward_last_equals_the_last_row_of_the_full_forward)
{
    /* dense and MoE, K-quant and float: the batch of 40 takes the GEMM where the CPU has it, the
     * chunks of 7 (n_batch 7) the row kernels; ref gets the wrapper's fallback */
    const char *cases[] = {"qwen3moe-tiny-q4_k_m", "qwen3-dense-tiny-q8_0", "qwen3-dense-tiny-f32"};
    const char *backends[] = {"cpu", "ref"};
    int32_t tokens[40];
    mode_tokens(PARITY_TOKEN_SEED, 512, 40, tokens);
    for (int c = 0; c < 3; c++) {
        struct model *m = check_load_case(cases[c]);
        const size_t V = m->hp.n_vocab;
        float *all = malloc(40 * V * sizeof(float)), *last = malloc(V * sizeof(float));
        for (int bi = 0; bi < 2; bi++)
            for (int n_batch = 40; n_batch >= 7; n_batch -= 33) {
                struct backend_config cfg = {.n_threads = 2, .n_ctx = 64, .n_batch = n_batch};
                struct backend *b = NULL;
                struct gate_err err = {0};
                cr_assert_eq(backend_open(&b, backends[bi], m, &cfg, &err), 0, "%s", err.msg);
                cr_assert_eq(backend_forward(b, tokens, 40, 0, all, &err), 0, "%s", err.msg);
                cr_assert_eq(backend_truncate(b, 0, &err), 0, "%s", err.msg);
                memset(last, 0xff, V * sizeof(float));
                cr_assert_eq(backend_forward_last(b, tokens, 40, 0, last, &err), 0, "%s", err.msg);
                cr_expect(!memcmp(last, all + 39 * V, V * sizeof(float)),
                          "%s %s n_batch %d: last-only logits differ from row 39", cases[c],
                          backends[bi], n_batch);
                /* the cache holds all 40 positions: the next token decodes as after forward() */
                struct backend_info info;
                backend_info(b, &info);
                cr_expect_eq(b->n_past, 40, "%s %s", cases[c], backends[bi]);
                cr_expect_eq(info.forwards, 2);
                cr_expect_eq(info.tokens, 80);
                float *next = malloc(V * sizeof(float)), *again = malloc(V * sizeof(float));
                cr_assert_eq(backend_forward(b, tokens, 1, 40, next, &err), 0, "%s", err.msg);
                cr_assert_eq(backend_truncate(b, 0, &err), 0, "%s", err.msg);
                cr_assert_eq(backend_forward(b, tokens, 40, 0, all, &err), 0, "%s", err.msg);
                cr_assert_eq(backend_forward(b, tokens, 1, 40, again, &err), 0, "%s", err.msg);
                cr_expect(!memcmp(next, again, V * sizeof(float)),
                          "%s %s: the cache after forward_last differs", cases[c], backends[bi]);
                /* the contract's checks hold: wrong position, nothing evaluated */
                cr_expect_eq(backend_forward_last(b, tokens, 1, 3, last, &err), ERR_INPUT);
                free(next);
                free(again);
                backend_close(b);
            }
        free(all);
        free(last);
        model_free(m);
    }
}

Test(cpu, gemm_equals_the_row_kernels_bit_for_bit)
{
    const int types[] = {QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K, QUANT_Q8_0};
    /* each build this machine runs: the AVX-512 kernels, and the AVX2 ones (which an AVX-512
     * CPU never dispatches to, but a CPU without AVX-512 does) */
    typedef void (*gemm_fn)(int, const uint8_t *, size_t, int64_t, int64_t, const void *, int,
                            int64_t, float *, size_t);
    gemm_fn builds[2];
    const char *build_names[2];
    int n_builds = 0;
    if (cpu_dot_have_avx512())
        builds[n_builds] = cpu_gemm_avx512_rows, build_names[n_builds++] = "avx512";
    if (cpu_dot_have_avx2())
        builds[n_builds] = cpu_gemm_avx2_rows, build_names[n_builds++] = "avx2";
    printf("cpu prompt GEMM: %s%s%s\n", n_builds ? "tested: " : "absent (no AVX2 on this machine)",
           n_builds ? build_names[0] : "", n_builds > 1 ? ", avx2" : "");
    if (!n_builds)
        check_skip_no_isa("avx2",
                          "this CPU or build has no AVX2+FMA+F16C: the prompt GEMM is not used");
    if (cpu_dot_isa() >= CPU_ISA_AVX2) /* unless GATE_CPU_ISA caps the engine below it */
        cr_expect(cpu_gemm_supported(QUANT_Q4_K),
                  "the GEMM exists here but the engine does not use it");
    /* 37 rows (a short last tile of 4); 70 tokens (a second 64-token chunk, a part-full group of
     * 16); K-quants 3 blocks, Q8_0 41 blocks (partials by block index mod 4 with a tail) */
    const int n_rows = 37, n_tok = 70;
    for (int ti = 0; ti < 4; ti++) {
        const int type = types[ti];
        const int64_t n = type == QUANT_Q8_0 ? 32 * 41 : 3 * QK_K;
        const size_t rb = quant_row_bytes(type, n), as = cpu_act_row_bytes(type, n);
        uint8_t *w = malloc((size_t)n_rows * rb), *act = malloc((size_t)n_tok * as);
        float *x = malloc((size_t)n * sizeof(float));
        float *gemm = malloc((size_t)n_tok * n_rows * sizeof(float));
        float *rows = malloc((size_t)n_tok * n_rows * sizeof(float));
        void *packed = aligned_alloc(64, (cpu_gemm_pack_bytes(type, n_tok, n) + 63) / 64 * 64);
        for (int trial = 0; trial < 4; trial++) {
            for (int r = 0; r < n_rows; r++)
                random_row(type, w + (size_t)r * rb, n);
            for (int t = 0; t < n_tok; t++) {
                const float mag = (t + trial) % 2 ? 100.0f : 0.01f;
                for (int64_t i = 0; i < n; i++)
                    x[i] = uniform(-mag, mag);
                x[(int64_t)(next_u64() % (uint64_t)n)] = 40.0f * mag; /* outlier */
                if (t == 5)
                    memset(x, 0, (size_t)n * sizeof(float)); /* a zero row: scale 0 */
                cpu_act_quantize(type, x, act + (size_t)t * as, n);
            }
            for (int t = 0; t < n_tok; t++)
                for (int r = 0; r < n_rows; r++)
                    cpu_dot_portable_rows(type, w + (size_t)r * rb, act + (size_t)t * as, as, 1, n,
                                          rows + (size_t)t * n_rows + r, 1);
            for (int bi = 0; bi < n_builds; bi++)
                for (int sub = n_tok; sub >= 1; sub = sub > 16 ? 16 : sub - 15) {
                    memset(gemm, 0xff, (size_t)n_tok * n_rows * sizeof(float));
                    cpu_gemm_pack(type, act, as, sub, n, packed);
                    /* split at row 9: two ranges, as two threads would take them */
                    builds[bi](type, w, rb, 0, 9, packed, sub, n, gemm, (size_t)n_rows);
                    builds[bi](type, w, rb, 9, n_rows, packed, sub, n, gemm, (size_t)n_rows);
                    for (int i = 0; i < sub * n_rows; i++)
                        cr_assert(!memcmp(&gemm[i], &rows[i], sizeof(float)),
                                  "%s %s, %d tokens, trial %d: token %d row %d: gemm %.9g != rows "
                                  "%.9g",
                                  build_names[bi], quant_name(type), sub, trial, i / n_rows,
                                  i % n_rows, (double)gemm[i], (double)rows[i]);
                }
        }
        free(w);
        free(act);
        free(x);
        free(gemm);
        free(rows);
        free(packed);
    }
}

Test(cpu, kv_f16_runs_and_stays_within_parity)
{
    /* one conformance case per architecture, 64 positions on the prefill path (the batched half
     * through the GEMM, the rest decoded), judged by the default parity settings */
    const char *cases[] = {"qwen3-dense-tiny-q4_k_m", "qwen3moe-tiny-q4_k_m"};
    const int n = PARITY_MIN_POSITIONS;
    struct parity_config pc;
    gatedef_parity_config(NULL, &pc);
    pc.positions = n; /* the rule counts the positions judged against those asked for */
    for (int c = 0; c < 2; c++) {
        struct model *m = check_load_case(cases[c]);
        const size_t V = m->hp.n_vocab;
        int32_t *tokens = malloc((size_t)n * sizeof *tokens);
        mode_tokens(PARITY_TOKEN_SEED, m->hp.n_vocab, n, tokens);
        float *ref = malloc((size_t)n * V * sizeof(float));
        float *f16 = malloc((size_t)n * V * sizeof(float));
        float *f32 = malloc((size_t)n * V * sizeof(float));
        struct gate_err err = {0};
        struct backend *j = NULL;
        cr_assert_eq(mode_open_judge(&j, m, n, 2, &err), 0, "%s", err.msg);
        cr_assert_eq(mode_judge(j, tokens, n, ref, NULL, &err), 0, "%s", err.msg);
        backend_close(j);
        for (int kv = 0; kv < 2; kv++) {
            struct backend_config cfg = {.n_threads = 2, .n_ctx = n, .n_batch = n, .kv_f16 = kv};
            struct backend *b = NULL;
            cr_assert_eq(backend_open(&b, "cpu", m, &cfg, &err), 0, "%s", err.msg);
            cr_expect_eq(b->kv_f16, kv);
            cr_assert_eq(mode_run(b, MODE_PREFILL, tokens, n, NULL, 0, kv ? f16 : f32, &err), 0,
                         "%s", err.msg);
            backend_close(b);
        }
        /* the option takes effect: F16 rounding of K and V changes the logits */
        cr_expect(memcmp(f16, f32, (size_t)n * V * sizeof(float)),
                  "%s: kv_f16 gave the F32 cache's logits", cases[c]);
        struct parity_result r16, r32;
        cr_assert_eq(parity_judge(ref, f16, n, (int)V, &pc, &r16), 0);
        cr_assert_eq(parity_judge(ref, f32, n, (int)V, &pc, &r32), 0);
        printf("cpu kv f16 %-24s cpu.prefill: min cosine %.9f max KL %.3e mean KL %.3e wrong %d;"
               " kv f32: min cosine %.9f max KL %.3e\n",
               cases[c], r16.cosine.min, r16.kld.max, r16.kld.mean, r16.n_wrong, r32.cosine.min,
               r32.kld.max);
        cr_expect(r16.pass, "%s kv f16: %s", cases[c], r16.reason);
        cr_expect_eq(r16.n_wrong, 0, "%s", cases[c]);
        parity_result_free(&r16);
        parity_result_free(&r32);
        free(tokens);
        free(ref);
        free(f16);
        free(f32);
        model_free(m);
    }
    /* a backend without an F16 cache refuses the option: no silent F32 */
    struct model *m = check_load_case("qwen3-dense-tiny-q4_k_m");
    struct backend_config cfg = {.n_threads = 1, .n_ctx = 64, .kv_f16 = 1};
    struct backend *b = NULL;
    struct gate_err err = {0};
    cr_expect_eq(backend_open(&b, "ref", m, &cfg, &err), ERR_INPUT);
    cr_expect_null(b);
    cr_expect(strstr(err.msg, "F16"), "%s", err.msg);
    model_free(m);
}

Test(cpu, batched_attention_equals_the_per_head_kernel_bit_for_bit)
{
    if (!cpu_gemm_attn_supported(128))
        check_skip_no_isa("avx2", "this CPU or build has no AVX2+FMA+F16C: prompt attention runs"
                                  " per head");
    /* each build this machine runs (an AVX-512 CPU never dispatches to the AVX2 one) */
    typedef void (*attn_fn)(const float *, size_t, int, int, const float *, const float *, size_t,
                            int, float, float *, float *, size_t);
    attn_fn builds[2];
    const char *names[2];
    int n_builds = 0;
    if (cpu_dot_have_avx512())
        builds[n_builds] = cpu_gemm_avx512_attn, names[n_builds++] = "avx512";
    builds[n_builds] = cpu_gemm_avx2_attn, names[n_builds++] = "avx2";
    /* hd 48: a short last group of registers; pos0 0 / 5 / 37 with 1, 6, 7, 16 queries (odd and
     * even key counts, part-full blocks of 16 and of the AVX2 build's four queries) */
    const int hds[] = {16, 48, 128}, pos0s[] = {0, 5, 37}, nqs[] = {1, 6, 7, 16};
    const int max_keys = 37 + 16, kvs = 3 * 128 + 8; /* cache rows wider than one head */
    float *kc = malloc((size_t)max_keys * kvs * sizeof(float));
    float *vc = malloc((size_t)max_keys * kvs * sizeof(float));
    float *q = malloc((size_t)16 * 2 * 128 * sizeof(float));
    float *out = malloc((size_t)16 * 128 * sizeof(float)), want[128];
    float *s = aligned_alloc(64, (size_t)16 * max_keys * sizeof(float));
    for (int i = 0; i < max_keys * kvs; i++) {
        kc[i] = uniform(-2.0f, 2.0f);
        vc[i] = uniform(-1.0f, 1.0f);
    }
    for (int i = 0; i < 16 * 2 * 128; i++)
        q[i] = uniform(-2.0f, 2.0f);
    for (int bi = 0; bi < n_builds; bi++)
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++)
                for (int c = 0; c < 4; c++) {
                    const int hd = hds[a], pos0 = pos0s[b], nq = nqs[c];
                    const float scale = 1.0f / sqrtf((float)hd);
                    /* queries 2 x 128 apart (the q rows of a batch), outputs hd apart */
                    builds[bi](q, 256, nq, pos0, kc, vc, (size_t)kvs, hd, scale, s, out,
                               (size_t)hd);
                    for (int i = 0; i < nq; i++) {
                        float *sc = malloc((size_t)max_keys * sizeof(float));
                        cpu_attn_head(q + (size_t)i * 256, kc, vc, (size_t)kvs, pos0 + i + 1, hd,
                                      scale, sc, want);
                        free(sc);
                        cr_assert(!memcmp(out + (size_t)i * hd, want, (size_t)hd * sizeof(float)),
                                  "%s, hd %d, pos0 %d, %d queries: query %d differs (%.9g vs %.9g)",
                                  names[bi], hd, pos0, nq, i, (double)out[(size_t)i * hd],
                                  (double)want[0]);
                    }
                }
    free(kc);
    free(vc);
    free(q);
    free(out);
    free(s);
}

/* the command's output of `gate bench ARGS` (GATE_BIN) with its exit status; malloc'd text */
static char *bench_output(const char *args, int *status)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s bench %s/conformance/qwen3-dense-tiny-q4_k_m/model.gguf %s 2>&1",
             bin, check_shared_dir(), args);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "cannot run %s", cmd);
    size_t cap = 1 << 16, n = 0;
    char *out = calloc(cap, 1);
    size_t got;
    while (n + 1 < cap && (got = fread(out + n, 1, cap - 1 - n, p)) > 0)
        n += got;
    const int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

Test(cpu, bench_prompt_batch_is_last_position_only_and_takes_kv_f16)
{
    int st;
    char *out = bench_output(
        "--backend cpu --prompt-batch --prompt-tokens 64 --kv f16 --runs 3 --warmup 0", &st);
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "last position's logits only, like llama-bench's pp"), "%s", out);
    cr_expect(strstr(out, "kv f16") && strstr(out, "KV cache F16"), "%s", out);
    free(out);
    /* no silent F32: the twin has no F16 cache, and a bad value is a usage error */
    out = bench_output("--backend ref --prompt-batch --prompt-tokens 64 --kv f16 --runs 3", &st);
    cr_expect_eq(st, 2, "%s", out);
    cr_expect(strstr(out, "no F16 KV cache"), "%s", out);
    free(out);
    out = bench_output("--backend cpu --kv f8", &st);
    cr_expect_eq(st, 2, "%s", out);
    cr_expect(strstr(out, "--kv takes f32 or f16"), "%s", out);
    free(out);
}

/* A MoE shaped so that the batched and one-token expert paths take their split paths: expert FFN
 * 768 (the one-token gate/up region's items are 256-row chunks, three per expert; issue 17's
 * 30B-A3B shape has 768 too), 8 experts, top-2, 2 layers; in memory (*buf: the file's bytes,
 * freed by the caller after model_free). */
static struct model *moe_f768(uint8_t **buf)
{
    struct synth_options o;
    memset(&o, 0, sizeof o);
    o.spec = *synth_preset_find("tiny-moe");
    o.spec.n_layer = 2;
    o.spec.n_ff_exp = 768;
    o.quant = SYNTH_Q4_K_M;
    o.seed = 3;
    return check_synth_model(&o, "moe-f768", buf);
}

/* Decode (one token per forward: moe_decode's chunked gate/up region, SwiGLU and quantization
 * on the threads) and a batched forward (experts with fewer than CPU_GEMM_MIN_TOK tokens grouped
 * in two regions, the others alone) give every position the same logits, bit for bit, for 1, 2
 * and 3 threads. */
Test(cpu, moe_decode_and_grouped_batch_equal_bit_for_bit)
{
    uint8_t *buf = NULL;
    struct model *m = moe_f768(&buf);
    enum { N = 48 };
    int32_t tokens[N];
    mode_tokens(PARITY_TOKEN_SEED, (int)m->hp.n_vocab, N, tokens);
    const size_t bytes = (size_t)N * m->hp.n_vocab * sizeof(float);
    float *batched = run_cpu(m, 2, 0, tokens, N, N);
    const int asan = check_asan(); /* sanitizer builds: 3 threads (uneven splits) */
    if (asan)
        fprintf(stderr, "cpu: ASan: 1 of 3 thread counts (3) for the MoE decode against the"
                        " 2-thread batch\n");
    for (int threads = asan ? 3 : 1; threads <= 3; threads++) {
        float *decoded = run_cpu(m, threads, 0, tokens, N, 1);
        cr_expect(!memcmp(batched, decoded, bytes),
                  "%d threads: one token per forward differs from the batched forward", threads);
        free(decoded);
        if (asan) /* sanitizer builds: the 2-thread batch above is the one compared */
            continue;
        float *other = run_cpu(m, threads, 0, tokens, N, N);
        cr_expect(!memcmp(batched, other, bytes), "%d threads: the batched forward differs",
                  threads);
        free(other);
    }
    free(batched);
    model_free(m);
    free(buf);
}

/* issue 28: the F16 KV cache holds the engine's own invariances too — the same bits at 1, 2 and
 * 3 threads and whatever the batching (one token per call, chunks of 7, one batch) — so a race or
 * a chunk-boundary slip in the F16 store/load path cannot hide behind the F16 rounding's noise */
Test(cpu, kv_f16_is_identical_across_threads_and_batching)
{
    const char *cases[] = {"qwen3-dense-tiny-q4_k_m", "qwen3moe-tiny-q4_k_m"};
    const int n = 48;
    for (int c = 0; c < 2; c++) {
        struct model *m = check_load_case(cases[c]);
        const size_t V = m->hp.n_vocab;
        int32_t *tokens = malloc((size_t)n * sizeof *tokens);
        mode_tokens(PARITY_TOKEN_SEED, m->hp.n_vocab, n, tokens);
        float *first = malloc((size_t)n * V * sizeof(float));
        float *other = malloc((size_t)n * V * sizeof(float));
        cr_assert(tokens && first && other);
        static const int threads[] = {1, 2, 3};
        static const int chunks[] = {1, 7, 48};
        /* sanitizer builds: the diagonal (1 thread one token per call, 2 threads chunks of 7,
         * 3 threads one batch) */
        const int asan = check_asan();
        if (asan)
            fprintf(stderr, "cpu: ASan: 3 of 9 thread and chunk settings (%s kv f16)\n", cases[c]);
        int k = 0;
        for (int t = 0; t < 3; t++)
            for (int ch = 0; ch < 3; ch++) {
                if (asan && ch != t)
                    continue;
                struct backend_config cfg = {
                    .n_threads = threads[t], .n_ctx = n, .n_batch = n, .kv_f16 = 1};
                struct backend *b = NULL;
                struct gate_err err = {0};
                cr_assert_eq(backend_open(&b, "cpu", m, &cfg, &err), 0, "%s", err.msg);
                float *out = k == 0 ? first : other;
                for (int pos = 0; pos < n; pos += chunks[ch]) {
                    const int len = pos + chunks[ch] <= n ? chunks[ch] : n - pos;
                    cr_assert_eq(
                        backend_forward(b, tokens + pos, len, pos, out + (size_t)pos * V, &err), 0,
                        "%s", err.msg);
                }
                backend_close(b);
                if (k++)
                    cr_expect_eq(memcmp(first, other, (size_t)n * V * sizeof(float)), 0,
                                 "%s kv f16: %d threads, chunks of %d differ from 1 thread, one"
                                 " token per call",
                                 cases[c], threads[t], chunks[ch]);
            }
        free(tokens);
        free(first);
        free(other);
        model_free(m);
    }
}
