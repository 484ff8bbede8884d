/* test_ref.c — the reference twin against an independent engine (../shared/conformance).
 *
 * Every case folder found there is checked (cases not seen while writing this count too):
 * NMSE <= 1e-8 against the exact float64 evaluation, identical argmax wherever the exact
 * top-1/top-2 margin is >= 1e-3, greedy_exact.txt reproduced by KV-cache decode, and per-position
 * cosine against llama.cpp's logits no lower than meta.json's measured exact-vs-llama.cpp
 * minimum. Then the twin's own properties: thread-count invariance, decode == batched,
 * taps, faults, and input errors.
 */
#include "engine/ref_ops.h"
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/detmath.h"
#include "engine/backend.h"
#include "engine/model.h"
#include "tests/support/check.h"
#include "tests/support/conformance.h"

static float *read_f32(const char *path, size_t want)
{
    size_t n = 0;
    float *p = (float *)check_slurp(path, &n);
    cr_assert(p, "cannot read %s", path);
    cr_assert_eq(n, want * sizeof(float), "%s: %zu bytes, expected %zu", path, n,
                 want * sizeof(float));
    return p;
}

static struct backend *open_ref(struct model **m, const char *path, int threads, int n_batch)
{
    struct gate_err err = {0};
    cr_assert_eq(model_load(m, path, &err), 0, "%s", err.msg);
    struct backend *b = NULL;
    struct backend_config cfg = {.n_threads = threads, .n_ctx = 256, .n_batch = n_batch};
    cr_assert_eq(backend_open(&b, "ref", *m, &cfg, &err), 0, "%s", err.msg);
    return b;
}

static double top2_margin(const float *x, int n)
{
    int a = ref_argmax(x, n);
    float second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != a && x[i] > second)
            second = x[i];
    return (double)x[a] - second;
}

static double cosine(const float *a, const float *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / sqrt(aa * bb);
}

static void check_case(const char *c)
{
    struct gate_err err = {0};
    json_error_t jerr;
    json_t *meta = json_load_file(conformance_path(c, "meta.json"), 0, &jerr);
    cr_assert(meta, "%s: meta.json: %s", c, jerr.text);
    int n_tok = 0;
    int32_t *tokens = check_read_ids(conformance_path(c, "tokens.txt"), &n_tok);
    cr_assert(tokens && n_tok > 16, "%s: tokens.txt", c);
    struct model *m = NULL;
    struct backend *b = open_ref(&m, conformance_path(c, "model.gguf"), 2, 0);
    const int V = (int)m->hp.n_vocab;
    float *logits = malloc((size_t)n_tok * V * sizeof(float));
    cr_assert_eq(backend_forward(b, tokens, n_tok, 0, logits, &err), 0, "%s: %s", c, err.msg);

    float *exact = read_f32(conformance_path(c, "logits_exact.f32"), (size_t)n_tok * V);
    char what[512];
    snprintf(what, sizeof what, "%s: ref vs logits_exact.f32", c);
    check_floats(what, logits, exact, (int64_t)n_tok * V, 1e-3, 1e-3, 1e-8);
    int checked = 0;
    for (int p = 0; p < n_tok; p++) {
        if (top2_margin(exact + (size_t)p * V, V) < 1e-3)
            continue;
        checked++;
        cr_expect_eq(ref_argmax(logits + (size_t)p * V, V), ref_argmax(exact + (size_t)p * V, V),
                     "%s: argmax differs at position %d", c, p);
    }
    cr_expect_gt(checked, n_tok / 2, "%s: too few positions with a clear margin", c);

    float *llama = read_f32(conformance_path(c, "logits.f32"), (size_t)n_tok * V);
    json_t *cm = json_object_get(
        json_object_get(json_object_get(meta, "numpy_reference"), "exact_dequant_f64"), "cos_min");
    cr_assert(json_is_number(cm), "%s: meta.json lacks numpy_reference.exact_dequant_f64.cos_min",
              c);
    /* the twin sits within float rounding of the exact evaluation: allow only that */
    const double floor_cos = json_number_value(cm) - 1e-6;
    for (int p = 0; p < n_tok; p++) {
        double cs = cosine(logits + (size_t)p * V, llama + (size_t)p * V, V);
        cr_expect_geq(cs, floor_cos, "%s: cosine vs llama.cpp %.7f at position %d < %.7f", c, cs, p,
                      floor_cos);
    }

    /* greedy: the first 16 ids as the prompt, then 32 steps through the KV cache */
    int n_exp = 0;
    int32_t *want = check_read_ids(conformance_path(c, "greedy_exact.txt"), &n_exp);
    cr_assert(want && n_exp > 0, "%s: greedy_exact.txt", c);
    const int n_prompt = 16;
    cr_assert_eq(backend_truncate(b, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(backend_forward(b, tokens, n_prompt, 0, logits, &err), 0, "%s", err.msg);
    int32_t next = ref_argmax(logits + (size_t)(n_prompt - 1) * V, V);
    int32_t got[256];
    for (int i = 0; i < n_exp && i < 256; i++) {
        got[i] = next;
        cr_assert_eq(backend_forward(b, &next, 1, n_prompt + i, logits, &err), 0, "%s", err.msg);
        next = ref_argmax(logits, V);
    }
    for (int i = 0; i < n_exp; i++)
        cr_expect_eq(got[i], want[i], "%s: greedy id %d is %d, greedy_exact.txt says %d", c, i,
                     got[i], want[i]);
    /* F32 files: llama.cpp's own greedy run must be reproduced too (README: margin 0.0045) */
    const char *quant = json_string_value(json_object_get(meta, "quant"));
    if (quant && !strcmp(quant, "F32")) {
        int n_l = 0;
        int32_t *gl = check_read_ids(conformance_path(c, "greedy.txt"), &n_l);
        cr_assert(gl && n_l == n_exp);
        for (int i = 0; i < n_l; i++)
            cr_expect_eq(got[i], gl[i], "%s: greedy id %d differs from llama.cpp", c, i);
        free(gl);
    }
    free(want);
    free(llama);
    free(exact);
    free(logits);
    free(tokens);
    backend_close(b);
    model_free(m);
    json_decref(meta);
}

Test(ref, matches_every_conformance_case, .timeout = 1200)
{
    char names[CONFORMANCE_MAX_CASES][CONFORMANCE_NAME_MAX];
    int n = conformance_cases(names, CONFORMANCE_MAX_CASES);
    cr_assert_geq(n, 6, "expected the conformance cases under %s", check_shared_dir());
    for (int i = 0; i < n; i++)
        check_case(names[i]);
}

static float *eval_all(const char *c, int threads, int n_batch, int one_by_one)
{
    struct gate_err err = {0};
    int n_tok = 0;
    int32_t *tokens = check_read_ids(conformance_path(c, "tokens.txt"), &n_tok);
    struct model *m = NULL;
    struct backend *b = open_ref(&m, conformance_path(c, "model.gguf"), threads, n_batch);
    const size_t V = m->hp.n_vocab;
    float *logits = malloc((size_t)n_tok * V * sizeof(float));
    if (one_by_one)
        for (int p = 0; p < n_tok; p++)
            cr_assert_eq(backend_forward(b, tokens + p, 1, p, logits + p * V, &err), 0, "%s",
                         err.msg);
    else
        cr_assert_eq(backend_forward(b, tokens, n_tok, 0, logits, &err), 0, "%s", err.msg);
    backend_close(b);
    model_free(m);
    free(tokens);
    return logits;
}

Test(ref, results_are_bit_identical_for_any_thread_count)
{
    const char *cases[] = {"qwen3moe-tiny-q4_k_m", "qwen3-dense-tiny-q4_k_m"};
    for (int c = 0; c < 2; c++) {
        float *one = eval_all(cases[c], 1, 0, 0);
        const int threads[] = {2, 3, 7};
        for (int t = 0; t < 3; t++) {
            float *other = eval_all(cases[c], threads[t], 0, 0);
            cr_expect_eq(memcmp(one, other, 96 * 512 * sizeof(float)), 0,
                         "%s: logits with %d threads differ from 1 thread", cases[c], threads[t]);
            free(other);
        }
        free(one);
    }
}

Test(ref, decode_and_chunked_batches_equal_the_whole_batch)
{
    float *whole = eval_all("qwen3moe-tiny-q4_k_m", 2, 0, 0);
    float *decode = eval_all("qwen3moe-tiny-q4_k_m", 2, 0, 1);
    float *chunks = eval_all("qwen3moe-tiny-q4_k_m", 2, 7, 0);
    /* the same sums in the same order, whatever the batching: bit-identical (decode goes through
     * the fused dot products of dotq.h, batches through dequantize-then-dot) */
    check_floats("token-by-token decode vs whole batch", decode, whole, 96 * 512, 0, 0, 0);
    check_floats("batches of 7 vs whole batch", chunks, whole, 96 * 512, 0, 0, 0);
    cr_expect_eq(memcmp(decode, whole, 96 * 512 * sizeof(float)), 0, "decode is not bit-identical");
    cr_expect_eq(memcmp(chunks, whole, 96 * 512 * sizeof(float)), 0,
                 "chunks are not bit-identical");
    free(whole);
    free(decode);
    free(chunks);
}

Test(ref, taps_record_hidden_states_and_routing)
{
    struct gate_err err = {0};
    struct model *m = NULL;
    struct backend *b = open_ref(&m, conformance_path("qwen3moe-tiny-f32", "model.gguf"), 2, 0);
    const int n = 8, L = (int)m->hp.n_layer, E = (int)m->hp.n_embd, k = (int)m->hp.n_expert_used;
    int32_t tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float *logits = malloc((size_t)n * m->hp.n_vocab * sizeof(float));
    struct backend_taps taps = {
        .hidden = calloc((size_t)L * n * E, sizeof(float)),
        .experts = calloc((size_t)L * n * k, sizeof(int32_t)),
        .expert_w = calloc((size_t)L * n * k, sizeof(float)),
        .router_kth = calloc((size_t)L * n, sizeof(float)),
        .router_k1th = calloc((size_t)L * n, sizeof(float)),
    };
    backend_set_taps(b, &taps);
    cr_assert_eq(backend_forward(b, tokens, n, 0, logits, &err), 0, "%s", err.msg);
    for (int l = 0; l < L; l++)
        for (int t = 0; t < n; t++) {
            float sum = 0;
            for (int s = 0; s < k; s++) {
                int32_t e = taps.experts[((size_t)l * n + t) * k + s];
                cr_expect(e >= 0 && e < (int)m->hp.n_expert, "expert id %d out of range", e);
                sum += taps.expert_w[((size_t)l * n + t) * k + s];
            }
            cr_expect_float_eq(sum, 1.0f, 1e-5f, "layer %d token %d weights sum to %g", l, t, sum);
            cr_expect_geq(taps.router_kth[l * n + t], taps.router_k1th[l * n + t]);
            double rms = 0;
            for (int i = 0; i < E; i++)
                rms += (double)taps.hidden[((size_t)l * n + t) * E + i] *
                       taps.hidden[((size_t)l * n + t) * E + i];
            cr_expect(rms > 0 && isfinite(rms), "hidden tap of layer %d token %d is empty", l, t);
        }
    backend_set_taps(b, NULL);
    free(taps.hidden);
    free(taps.experts);
    free(taps.expert_w);
    free(taps.router_kth);
    free(taps.router_k1th);
    free(logits);
    backend_close(b);
    model_free(m);
}

static float *eval_with_fault(const char *c, const char *fault)
{
    struct gate_err err = {0};
    struct fault_set fs = {0};
    struct fault_spec f;
    if (fault) {
        cr_assert_eq(fault_parse(fault, &f, &err), 0, "%s", err.msg);
        fault_set_add(&fs, &f, &err);
    }
    int n_tok = 0;
    int32_t *tokens = check_read_ids(conformance_path(c, "tokens.txt"), &n_tok);
    struct model *m = NULL;
    cr_assert_eq(model_load(&m, conformance_path(c, "model.gguf"), &err), 0, "%s", err.msg);
    struct backend *b = NULL;
    struct backend_config cfg = {.n_threads = 2, .n_ctx = 128, .faults = &fs};
    cr_assert_eq(backend_open(&b, "ref", m, &cfg, &err), 0, "%s", err.msg);
    float *logits = malloc((size_t)n_tok * m->hp.n_vocab * sizeof(float));
    cr_assert_eq(backend_forward(b, tokens, n_tok, 0, logits, &err), 0, "%s", err.msg);
    backend_close(b);
    model_free(m);
    free(tokens);
    return logits;
}

Test(ref, every_fault_moves_the_logits_and_no_fault_moves_nothing)
{
    float *clean = eval_with_fault("qwen3moe-tiny-f32", NULL);
    const char *faults[] = {"wrong_expert", "dropped_expert", "uniform_weights", "skip_qk_norm",
                            "wrong_expert:rank=1,layers=1"};
    for (int i = 0; i < 5; i++) {
        float *f = eval_with_fault("qwen3moe-tiny-f32", faults[i]);
        struct compare_stats s = check_cmp(f, clean, 96 * 512, 0, 0);
        cr_expect_gt(s.nmse, 1e-4, "fault %s moved the logits by only NMSE %g", faults[i], s.nmse);
        free(f);
    }
    float *again = eval_with_fault("qwen3moe-tiny-f32", "skip_qk_norm:positions=1000-2000");
    cr_expect_eq(memcmp(again, clean, 96 * 512 * sizeof(float)), 0,
                 "a fault scoped outside the run must change nothing");
    free(again);
    free(clean);
}

Test(ref, rejects_bad_tokens_positions_and_overflow)
{
    struct gate_err err = {0};
    struct model *m = NULL;
    struct backend *b = NULL;
    cr_assert_eq(model_load(&m, conformance_path("qwen3-dense-tiny-f32", "model.gguf"), &err), 0);
    struct backend_config cfg = {.n_threads = 1, .n_ctx = 4};
    cr_assert_eq(backend_open(&b, "ref", m, &cfg, &err), 0, "%s", err.msg);
    float logits[8 * 512];
    int32_t bad[2] = {5, 512};
    cr_expect_eq(backend_forward(b, bad, 2, 0, logits, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "token id 512 at position 1 is out of range"), "%s", err.msg);
    err_clear(&err);
    int32_t ok[5] = {1, 2, 3, 4, 5};
    cr_expect_eq(backend_forward(b, ok, 1, 3, logits, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "forward at position 3 but the cache holds 0"), "%s", err.msg);
    err_clear(&err);
    cr_expect_eq(backend_forward(b, ok, 5, 0, logits, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "exceed the context of 4"), "%s", err.msg);
    err_clear(&err);
    cr_expect_eq(backend_forward(b, ok, 3, 0, logits, &err), 0, "%s", err.msg);
    cr_expect_eq(backend_truncate(b, 4, &err), ERR_INPUT);
    err_clear(&err);
    cr_expect_eq(backend_truncate(b, 1, &err), 0);
    cr_expect_eq(b->n_past, 1);
    backend_close(b);
    cr_expect_eq(backend_open(&b, "vulkan", m, &cfg, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "backend 'vulkan' is not available"), "%s", err.msg);
    model_free(m);
}

/* Teacher forcing at a sample of positions (a long span's forced layers, oracles/parity.c): the
 * twin opened with one layer's cache, computing only keys and values at the positions it does
 * not evaluate, gives each evaluated position's layer outputs and head bit for bit as the
 * every-position run on a full cache does. */
static void forced_sample_equals_every_position(const char *name, const char *rounding,
                                                int force_routes)
{
    struct gate_err err = {0};
    struct model *m = check_load_case(name);
    const struct model_hparams *hp = &m->hp;
    const int n = 100, L = (int)hp->n_layer, E = (int)hp->n_embd, V = (int)hp->n_vocab;
    int32_t tokens[100];
    for (int i = 0; i < n; i++)
        tokens[i] = (int32_t)((i * 7919 + 13) % V);
    /* any input will do: the subject's claimed hidden states, deterministic noise */
    float *hidden = malloc((size_t)L * n * E * sizeof(float));
    uint64_t st = 42;
    for (size_t i = 0; i < (size_t)L * n * E; i++)
        hidden[i] = (float)((double)(det_splitmix64(&st) >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    const int eval[] = {0, 5, 37, 38, 63, 64, 99}, ne = 7, rows[] = {5, 99};
    /* MoE: expert sets forced at every (layer, position) (a tolerance nothing exceeds), as the
     * subject's claimed routes are: the evaluated positions must take theirs too */
    int32_t *fe = NULL;
    float *fd1 = NULL, *fd2 = NULL;
    const int X = (int)hp->n_expert, k = (int)hp->n_expert_used;
    if (force_routes) {
        cr_assert(X >= 2 * k, "%s: %d experts, top %d", name, X, k);
        fe = malloc((size_t)L * n * k * sizeof *fe);
        fd1 = malloc((size_t)L * n * sizeof *fd1);
        fd2 = malloc((size_t)L * n * sizeof *fd2);
        for (int l = 0; l < L; l++)
            for (int p = 0; p < n; p++)
                for (int j = 0; j < k; j++)
                    fe[((size_t)l * n + p) * k + j] = (p + 2 * j + l) % X;
    }
    char emu[64];
    snprintf(emu, sizeof emu, "%s%skv-one-layer", rounding, rounding[0] ? "," : "");
    struct backend_config cf = {.n_threads = 2, .n_ctx = n, .n_batch = 32, .emulate = rounding};
    struct backend_config cs = {.n_threads = 2, .n_ctx = n, .n_batch = 32, .emulate = emu};
    struct backend *full = NULL, *sub = NULL;
    cr_assert_eq(backend_open(&full, "ref", m, &cf, &err), 0, "%s", err.msg);
    cr_assert_eq(backend_open(&sub, "ref", m, &cs, &err), 0, "%s", err.msg);
    float *of = malloc((size_t)L * n * E * sizeof(float));
    float *os = malloc((size_t)L * ne * E * sizeof(float));
    float *lf = malloc(2 * (size_t)V * sizeof(float)), *ls = malloc(2 * (size_t)V * sizeof(float));
    cr_assert_eq(
        ref_forward_forced(full, tokens, n, hidden, fe, 1e30f, fd1, NULL, 0, of, rows, 2, lf, &err),
        0, "%s", err.msg);
    cr_assert_eq(
        ref_forward_forced(sub, tokens, n, hidden, fe, 1e30f, fd2, eval, ne, os, rows, 2, ls, &err),
        0, "%s", err.msg);
    for (int l = 0; l < L; l++)
        for (int i = 0; i < ne; i++)
            cr_expect_eq(memcmp(of + ((size_t)l * n + eval[i]) * E, os + ((size_t)l * ne + i) * E,
                                (size_t)E * sizeof(float)),
                         0, "%s %s: layer %d position %d differs", name, rounding, l, eval[i]);
    cr_expect_eq(memcmp(lf, ls, 2 * (size_t)V * sizeof(float)), 0, "%s: head differs", name);
    /* the one-layer twin is for teacher forcing only; positions must increase */
    float *lg = malloc((size_t)V * sizeof(float));
    cr_expect_eq(backend_truncate(sub, 0, &err), 0, "%s", err.msg);
    cr_expect_eq(backend_forward(sub, tokens, 1, 0, lg, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "kv-one-layer"), "%s", err.msg);
    const int bad[] = {5, 5};
    err = (struct gate_err){0};
    cr_expect_eq(
        ref_forward_forced(sub, tokens, n, hidden, NULL, 0, NULL, bad, 2, os, rows, 2, ls, &err),
        ERR_INPUT);
    free(lg);
    free(fe);
    free(fd1);
    free(fd2);
    free(of);
    free(os);
    free(lf);
    free(ls);
    free(hidden);
    backend_close(full);
    backend_close(sub);
    model_free(m);
}

Test(ref, forced_layers_at_sampled_positions_equal_the_every_position_run)
{
    forced_sample_equals_every_position("qwen3-dense-tiny-q4_k_m", "", 0);
    forced_sample_equals_every_position("qwen3-dense-tiny-q4_k_m", "act-q12", 0);
    forced_sample_equals_every_position("qwen3moe-tiny-q4_k_m", "act-q12,kv-f16", 0);
    forced_sample_equals_every_position("qwen3moe-tiny-q4_k_m", "act-q12", 1);
    /* the batched projections' emulated rounding depends on the call's length, and sampled
     * positions are evaluated one at a time: refused, not silently different */
    struct gate_err err = {0};
    struct model *m = check_load_case("qwen3-dense-tiny-q4_k_m");
    struct backend *b = NULL;
    struct backend_config cf = {.n_threads = 1, .n_ctx = 16, .emulate = "gemm-f16,kv-one-layer"};
    cr_assert_eq(backend_open(&b, "ref", m, &cf, &err), 0, "%s", err.msg);
    int32_t t[16] = {0};
    const int ev[] = {3}, row[] = {3};
    float *h = calloc((size_t)m->hp.n_layer * 16 * m->hp.n_embd, sizeof(float));
    float *o = calloc((size_t)m->hp.n_layer * m->hp.n_embd, sizeof(float));
    float *lg = calloc(m->hp.n_vocab, sizeof(float));
    cr_expect_eq(ref_forward_forced(b, t, 16, h, NULL, 0, NULL, ev, 1, o, row, 1, lg, &err),
                 ERR_INPUT);
    cr_expect(strstr(err.msg, "gemm"), "%s", err.msg);
    free(h);
    free(o);
    free(lg);
    backend_close(b);
    model_free(m);
}
