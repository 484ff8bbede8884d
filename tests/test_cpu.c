/* test_cpu.c — the `cpu` engine (engine/cpu.c, engine/cpu_dot*.c) as a subject of the gate.
 *
 * Every conformance case through cpu.decode / cpu.prefill / cpu.chat PASSES parity against the
 * judge with the default thresholds (the measured noise ceiling is printed); the AVX2 kernels
 * equal the portable ones bit for bit on random blocks of every type, and both stay within the
 * activation rounding of the exact product; logits do not depend on the thread count or on
 * n_batch; falsification rejects every fault on the tiny MoE; what ran is reported as cpu.
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

Test(cpu, every_conformance_case_passes_parity_on_every_path, .timeout = 1200)
{
    static char cases[CONFORMANCE_MAX_CASES][CONFORMANCE_NAME_MAX];
    const int n = conformance_cases(cases, CONFORMANCE_MAX_CASES);
    cr_assert_geq(n, 6, "expected the six conformance cases, found %d", n);
    const char *modes[] = {"cpu.decode", "cpu.prefill", "cpu.chat"};
    struct parity_config cfg;
    parity_config_default(&cfg);
    double worst_cos = 1.0, worst_kld = 0.0;
    /* sanitizer builds run ~10x slower: there the Q4_K_M cases (dense and MoE: every K-quant
     * kernel, routing) show memory safety; the normal build judges all six */
    const int asan = getenv("GATE_ASAN") != NULL;
    for (int c = 0; c < n; c++) {
        if (asan && !strstr(cases[c], "q4_k_m"))
            continue;
        struct model *m = check_load_case(cases[c]);
        for (int i = 0; i < 3; i++) {
            struct mode mode = mode_of(modes[i]);
            struct parity_result r;
            struct gate_err err = {0};
            cr_assert_eq(parity_run(m, &mode, NULL, NULL, 0, &cfg, 2, &r, &err), 0, "%s %s: %s",
                         cases[c], modes[i], err.msg);
            /* the noise ceiling of cpu.* against the judge, per case and path */
            printf("cpu parity %-24s %-12s min cosine %.9f  max KL %.3e  mean KL %.3e  "
                   "tie flips %d  wrong %d\n",
                   cases[c], modes[i], r.cosine.min, r.kld.max, r.kld.mean, r.n_tie_flip,
                   r.n_wrong);
            cr_expect(r.pass, "%s %s: %s", cases[c], modes[i], r.reason);
            cr_expect_eq(r.n_wrong, 0, "%s %s", cases[c], modes[i]);
            worst_cos = r.cosine.min < worst_cos ? r.cosine.min : worst_cos;
            worst_kld = r.kld.max > worst_kld ? r.kld.max : worst_kld;
            parity_result_free(&r);
        }
        model_free(m);
    }
    printf("cpu parity ceiling over every case and path: min cosine %.9f, max KL %.3e\n", worst_cos,
           worst_kld);
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
    const int hd = 128, n_keys = 77, stride = 2 * 128;
    float *q = malloc(hd * sizeof(float)),
          *kv = malloc(2 * (size_t)n_keys * stride * sizeof(float));
    float s[77], p[128], a[128], z[128];
    for (int i = 0; i < hd; i++)
        q[i] = uniform(-3.0f, 3.0f);
    for (int i = 0; i < 2 * n_keys * stride; i++)
        kv[i] = uniform(-2.0f, 2.0f);
    const float *kc = kv + 128, *vc = kv + (size_t)n_keys * stride; /* second head's slots */
    for (int n = 1; n <= n_keys; n += 19) {
        cpu_dot_portable_attn(q, kc, vc, stride, n, hd, 0.0883883f, s, p);
        cpu_dot_avx2_attn(q, kc, vc, stride, n, hd, 0.0883883f, s, a);
        cr_assert(!memcmp(p, a, sizeof p), "%d keys: avx2 attention differs from portable", n);
        if (cpu_dot_have_avx512()) {
            cpu_dot_avx512_attn(q, kc, vc, stride, n, hd, 0.0883883f, s, z);
            cr_assert(!memcmp(p, z, sizeof p), "%d keys: avx512 attention differs", n);
        }
    }
    free(q);
    free(kv);
}

Test(cpu, kernels_are_within_the_activation_rounding_of_the_exact_product)
{
    const int64_t n = 512;
    uint8_t *row = malloc(quant_row_bytes(QUANT_F32, n));
    float *w = malloc((size_t)n * sizeof(float)), *x = malloc((size_t)n * sizeof(float));
    uint8_t *act = malloc(cpu_act_row_bytes(QUANT_F32, n));
    for (int ti = 0; ti < N_KERNEL_TYPES; ti++) {
        const int type = KERNEL_TYPES[ti];
        for (int trial = 0; trial < 10; trial++) {
            random_row(type, row, n);
            quant_dequant_row(type, row, w, n);
            for (int64_t i = 0; i < n; i++)
                x[i] = uniform(-2.0f, 2.0f);
            cpu_act_quantize(type, x, act, n);
            double exact = 0.0, mag = 0.0, wsum = 0.0;
            for (int64_t i = 0; i < n; i++) {
                exact += (double)w[i] * x[i];
                mag += fabs((double)w[i] * x[i]);
                wsum += fabs((double)w[i]);
            }
            /* each activation errs by at most half a step, max|x| / (2 CPU_ACT_QMAX) (|x| <= 2
             * here); float rounding of the block sums adds a relative 1e-5 at most */
            const double bound = wsum * 2.0 / (2.0 * CPU_ACT_QMAX) * 1.001 + 1e-5 * mag + 1e-6;
            float got[2];
            cpu_dot_portable_rows(type, row, act, 0, 1, n, &got[0], 1);
            cpu_dot_rows(type, row, act, 0, 1, n, &got[1], 1);
            for (int k = 0; k < 2; k++)
                cr_assert_leq(fabs(got[k] - exact), bound,
                              "%s: %.9g vs exact %.9g (sum |w x| %.6g)", quant_name(type),
                              (double)got[k], exact, mag);
        }
    }
    free(row);
    free(w);
    free(x);
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
        for (int threads = 2; threads <= 3; threads++) {
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

Test(cpu, falsification_rejects_every_fault_on_the_tiny_moe, .timeout = 1200)
{
    struct model *m = check_load_case("qwen3moe-tiny-q4_k_m");
    struct fault_set fs;
    falsify_default_faults(m, &fs);
    cr_assert_eq(fs.n, 4);
    struct falsify_config cfg;
    falsify_config_default(&cfg);
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
    printf("cpu prompt GEMM: %s\n",
           cpu_gemm_supported(QUANT_Q4_K) ? "tested" : "absent (no AVX-512 VNNI on this machine)");
    if (!cpu_gemm_supported(QUANT_Q4_K))
        check_skip_no_isa(
            "avx512", "this CPU or build has no AVX-512 BW/VL/VNNI: the prompt GEMM is not used");
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
            for (int sub = n_tok; sub >= 1; sub = sub > 16 ? 16 : sub - 15) {
                memset(gemm, 0xff, (size_t)n_tok * n_rows * sizeof(float));
                cpu_gemm_pack(type, act, as, sub, n, packed);
                /* split at row 9: two ranges, as two threads would take them */
                cpu_gemm_rows(type, w, rb, 0, 9, packed, sub, n, gemm, (size_t)n_rows);
                cpu_gemm_rows(type, w, rb, 9, n_rows, packed, sub, n, gemm, (size_t)n_rows);
                for (int i = 0; i < sub * n_rows; i++)
                    cr_assert(!memcmp(&gemm[i], &rows[i], sizeof(float)),
                              "%s, %d tokens, trial %d: token %d row %d: gemm %.9g != rows %.9g",
                              quant_name(type), sub, trial, i / n_rows, i % n_rows, (double)gemm[i],
                              (double)rows[i]);
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
    parity_config_default(&pc);
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
        check_skip_no_isa("avx512",
                          "this CPU or build has no AVX-512: prompt attention runs per head");
    /* hd 48: a short last group of registers; pos0 0 / 5 / 37 with 1, 7, 16 queries (odd and even
     * key counts, a part-full block) */
    const int hds[] = {16, 48, 128}, pos0s[] = {0, 5, 37}, nqs[] = {1, 7, 16};
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
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 3; c++) {
                const int hd = hds[a], pos0 = pos0s[b], nq = nqs[c];
                const float scale = 1.0f / sqrtf((float)hd);
                /* queries 2 x 128 apart (the q rows of a batch), outputs hd apart */
                cpu_gemm_attn(q, 256, nq, pos0, kc, vc, (size_t)kvs, hd, scale, s, out, (size_t)hd);
                for (int i = 0; i < nq; i++) {
                    float *sc = malloc((size_t)max_keys * sizeof(float));
                    cpu_attn_head(q + (size_t)i * 256, kc, vc, (size_t)kvs, pos0 + i + 1, hd, scale,
                                  sc, want);
                    free(sc);
                    cr_assert(!memcmp(out + (size_t)i * hd, want, (size_t)hd * sizeof(float)),
                              "hd %d, pos0 %d, %d queries: query %d differs (%.9g vs %.9g)", hd,
                              pos0, nq, i, (double)out[(size_t)i * hd], (double)want[0]);
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
    size_t size = 0;
    struct gate_err err = {0};
    cr_assert_eq(synth_write_mem(&o, buf, &size, &err), 0, "%s", err.msg);
    struct gguf_file *f = NULL;
    cr_assert_eq(gguf_open_mem(&f, *buf, size, "moe-f768", 0, &err), 0, "%s", err.msg);
    struct model *m = NULL;
    cr_assert_eq(model_from_gguf(&m, f, &err), 0, "%s", err.msg);
    return m;
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
    for (int threads = 1; threads <= 3; threads++) {
        float *decoded = run_cpu(m, threads, 0, tokens, N, 1);
        cr_expect(!memcmp(batched, decoded, bytes),
                  "%d threads: one token per forward differs from the batched forward", threads);
        free(decoded);
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
        int k = 0;
        for (int t = 0; t < 3; t++)
            for (int ch = 0; ch < 3; ch++) {
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
