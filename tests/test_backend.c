/* test_backend.c — the backend contract (engine/backend.h): the wrappers in engine/backend.c
 * check every forward and truncate before a backend sees it, chunk by n_batch and keep n_past
 * and the counters themselves; chunking changes no logit; fault sets are copied, not borrowed,
 * their count clamped to what they hold; the
 * device query and the one list of backends work before any model is loaded. Moved from
 * test_ref.c (issue 24 §6): the twin's own tests stay there.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/kernel_tests.h"
#include "engine/model.h"
#include "faults/fault.h"
#include "tests/support/conformance.h"

/* A backend that only records what reached ops->forward: the wrappers must hand it checked
 * chunks of at most n_batch tokens and keep n_past and the counters themselves. */
struct spy {
    struct backend base;
    int calls, n[16], pos0[16];
};

static int spy_forward(struct backend *b, const int32_t *tokens, int n, int pos0, float *logits,
                       struct gate_err *err)
{
    (void)tokens;
    (void)err;
    struct spy *s = (struct spy *)b;
    if (s->calls < 16) {
        s->n[s->calls] = n;
        s->pos0[s->calls] = pos0;
    }
    s->calls++;
    for (size_t i = 0; i < (size_t)n * b->model->hp.n_vocab; i++)
        logits[i] = (float)(pos0 + (int)(i / b->model->hp.n_vocab));
    return 0;
}

static void spy_info(const struct backend *b, struct backend_info *out)
{
    (void)b;
    snprintf(out->backend, sizeof out->backend, "spy");
    out->forwards = 999; /* the wrapper's counters win */
}

static const struct backend_ops SPY_OPS = {.name = "spy", .forward = spy_forward, .info = spy_info};

Test(backend, wrapper_checks_then_chunks_by_n_batch_and_counts)
{
    struct gate_err err = {0};
    struct model *m = NULL;
    cr_assert_eq(model_load(&m, conformance_path("qwen3-dense-tiny-f32", "model.gguf"), &err), 0);
    struct spy s = {.base = {.ops = &SPY_OPS, .model = m, .n_ctx = 16, .n_batch = 3}};
    struct backend *b = &s.base;
    float *logits = malloc((size_t)16 * m->hp.n_vocab * sizeof(float));
    int32_t ok[16] = {0}, bad[2] = {1, (int32_t)m->hp.n_vocab};
    /* refused before the backend sees anything */
    cr_expect_eq(backend_forward(b, ok, 2, 1, logits, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "spy: forward at position 1 but the cache holds 0"), "%s", err.msg);
    err_clear(&err);
    cr_expect_eq(backend_forward(b, bad, 2, 0, logits, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "token id 512 at position 1 is out of range"), "%s", err.msg);
    err_clear(&err);
    int32_t neg = -1;
    cr_expect_eq(backend_forward(b, &neg, 1, 0, logits, &err), ERR_INPUT);
    err_clear(&err);
    cr_expect_eq(backend_forward(b, ok, 17, 0, logits, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "exceed the context of 16"), "%s", err.msg);
    err_clear(&err);
    cr_expect_eq(backend_forward(b, ok, 0, 0, logits, &err), ERR_INPUT);
    err_clear(&err);
    cr_expect_eq(s.calls, 0, "a refused forward reached the backend %d times", s.calls);
    /* 7 tokens with n_batch 3: chunks 3, 3, 1 at positions 0, 3, 6, logits where they belong */
    cr_assert_eq(backend_forward(b, ok, 7, 0, logits, &err), 0, "%s", err.msg);
    cr_expect_eq(s.calls, 3);
    cr_expect(s.n[0] == 3 && s.n[1] == 3 && s.n[2] == 1, "chunks %d %d %d", s.n[0], s.n[1], s.n[2]);
    cr_expect(s.pos0[0] == 0 && s.pos0[1] == 3 && s.pos0[2] == 6);
    for (int p = 0; p < 7; p++)
        cr_expect_eq(logits[(size_t)p * m->hp.n_vocab], (float)p, "row %d", p);
    cr_expect_eq(b->n_past, 7);
    /* the context bound counts what is already cached */
    cr_expect_eq(backend_forward(b, ok, 10, 7, logits, &err), ERR_INPUT);
    err_clear(&err);
    cr_assert_eq(backend_forward(b, ok, 1, 7, logits, &err), 0, "%s", err.msg);
    struct backend_info info;
    backend_info(b, &info);
    cr_expect_str_eq(info.backend, "spy");
    cr_expect_eq(info.forwards, 2, "forwards %llu", (unsigned long long)info.forwards);
    cr_expect_eq(info.tokens, 8);
    /* truncate: checked, then n_past (a NULL ops->truncate is allowed) */
    cr_expect_eq(backend_truncate(b, 9, &err), ERR_INPUT);
    err_clear(&err);
    cr_expect_eq(backend_truncate(b, 2, &err), 0, "%s", err.msg);
    cr_expect_eq(b->n_past, 2);
    free(logits);
    model_free(m);
}

/* Logits and counters of one forward of n tokens through a ref backend with batch n_batch. */
static float *ref_run(struct model *m, const int32_t *tokens, int n, int n_batch,
                      struct backend_info *info)
{
    struct gate_err err = {0};
    struct backend *b = NULL;
    struct backend_config cfg = {.n_threads = 2, .n_ctx = n, .n_batch = n_batch};
    cr_assert_eq(backend_open(&b, "ref", m, &cfg, &err), 0, "%s", err.msg);
    float *logits = malloc((size_t)n * m->hp.n_vocab * sizeof(float));
    cr_assert_eq(backend_forward(b, tokens, n, 0, logits, &err), 0, "%s", err.msg);
    backend_info(b, info);
    backend_close(b);
    return logits;
}

Test(backend, chunking_across_n_batch_gives_identical_logits_and_counters)
{
    struct gate_err err = {0};
    struct model *m = NULL;
    cr_assert_eq(model_load(&m, conformance_path("qwen3moe-tiny-f32", "model.gguf"), &err), 0);
    enum { N = 24 };
    int32_t tokens[N];
    for (int i = 0; i < N; i++)
        tokens[i] = (int32_t)((i * 37 + 11) % (int)m->hp.n_vocab);
    struct backend_info whole, chunked;
    float *a = ref_run(m, tokens, N, N, &whole);
    float *b = ref_run(m, tokens, N, 5, &chunked); /* 5 + 5 + 5 + 5 + 4 */
    cr_expect_eq(memcmp(a, b, (size_t)N * m->hp.n_vocab * sizeof(float)), 0,
                 "chunking by n_batch changed the logits");
    cr_expect_eq(whole.forwards, 1);
    cr_expect_eq(chunked.forwards, 1, "a chunked call is still one forward");
    cr_expect_eq(whole.tokens, N);
    cr_expect_eq(chunked.tokens, N);
    free(a);
    free(b);
    model_free(m);
}

Test(backend, faults_are_copied_not_borrowed)
{
    struct gate_err err = {0};
    struct model *m = NULL;
    cr_assert_eq(model_load(&m, conformance_path("qwen3moe-tiny-f32", "model.gguf"), &err), 0);
    enum { N = 16 };
    const size_t bytes = (size_t)N * m->hp.n_vocab * sizeof(float);
    int32_t tokens[N];
    for (int i = 0; i < N; i++)
        tokens[i] = (int32_t)((i * 53 + 7) % (int)m->hp.n_vocab);
    float *clean = malloc(bytes), *faulted = malloc(bytes), *out = malloc(bytes);
    struct fault_set fs = {0};
    struct fault_spec f;
    cr_assert_eq(fault_parse("skip_qk_norm", &f, &err), 0, "%s", err.msg);
    fault_set_add(&fs, &f, &err);
    struct backend *b = NULL;
    struct backend_config cfg = {.n_threads = 2, .n_ctx = N, .n_batch = N};
    cr_assert_eq(backend_open(&b, "ref", m, &cfg, &err), 0, "%s", err.msg);
    cr_assert_eq(backend_forward(b, tokens, N, 0, clean, &err), 0, "%s", err.msg);
    backend_close(b);
    cfg.faults = &fs;
    cr_assert_eq(backend_open(&b, "ref", m, &cfg, &err), 0, "%s", err.msg);
    cr_assert_eq(backend_forward(b, tokens, N, 0, faulted, &err), 0, "%s", err.msg);
    cr_assert_neq(memcmp(clean, faulted, bytes), 0, "skip_qk_norm changed nothing");
    /* the caller's set changes after open: the backend keeps the copy it was given */
    fs.n = 0;
    cr_assert_eq(backend_truncate(b, 0, &err), 0);
    cr_assert_eq(backend_forward(b, tokens, N, 0, out, &err), 0, "%s", err.msg);
    cr_expect_eq(memcmp(out, faulted, bytes), 0,
                 "rewriting the caller's fault set reached the"
                 " backend: faults are borrowed, not copied");
    /* backend_set_faults replaces the copy; clearing it gives the clean logits back */
    backend_set_faults(b, NULL);
    cr_assert_eq(backend_truncate(b, 0, &err), 0);
    cr_assert_eq(backend_forward(b, tokens, N, 0, out, &err), 0, "%s", err.msg);
    cr_expect_eq(memcmp(out, clean, bytes), 0, "backend_set_faults(NULL) left a fault active");
    fs.n = 1;
    backend_set_faults(b, &fs);
    fs.n = 0;
    cr_assert_eq(backend_truncate(b, 0, &err), 0);
    cr_assert_eq(backend_forward(b, tokens, N, 0, out, &err), 0, "%s", err.msg);
    cr_expect_eq(memcmp(out, faulted, bytes), 0, "backend_set_faults kept a pointer, not a copy");
    backend_close(b);
    free(clean);
    free(faulted);
    free(out);
    model_free(m);
}

Test(backend, device_query_before_any_model)
{
    struct gate_err err = {0};
    struct backend_device d;
    cr_assert_eq(backend_describe("ref", &d, &err), 0, "%s", err.msg);
    cr_expect(d.name[0], "the ref backend names its CPU");
    cr_expect_gt(d.total_bytes, 0);
    cr_expect_eq(d.cc_major, 0);
    cr_expect_eq(backend_describe("vulkan", &d, &err), ERR_INPUT);
    err_clear(&err);
    if (!backend_find("cuda")) {
        cr_expect_eq(backend_describe("cuda", &d, &err), ERR_ENV);
        cr_expect(strstr(err.msg, "backend cuda is not in this build"), "%s", err.msg);
    }
    /* one list: every known backend has a name and an index, compiled in or not */
    cr_expect_eq(backend_count(), 3);
    for (int i = 0; i < backend_count(); i++)
        cr_expect_eq(backend_index(backend_name(i)), i);
    cr_expect(backend_is_device("cuda"));
    cr_expect(!backend_is_device("ref"));
    cr_expect(!backend_is_device("cpu"), "the cpu engine runs on the host");
}

/* The kernel tests are a capability of a backend's row (issue 24 §5): asked without a name, they
 * come from the accelerator of the list when this build has it, with every launcher present
 * (oracles/selftest.c calls each one), and are refused with the build's reason otherwise. */
Test(backend, kernel_tests_are_the_accelerators_row)
{
    struct gate_err err = {0};
    const char *name = "unset";
    const struct backend_kernel_tests *kt = backend_kernel_tests(&name, &err);
    if (!backend_find(backend_accelerator_name())) {
        cr_expect_null(kt, "a build without the accelerator offers its kernel tests");
        cr_expect_null(name);
        cr_expect_eq(err.code, ERR_ENV);
        cr_expect(strstr(err.msg, "this build has no CUDA backend"), "%s", err.msg);
        return;
    }
    cr_assert_not_null(kt, "%s", err.msg);
    cr_expect_eq(err.code, 0);
    cr_expect_str_eq(name, backend_accelerator_name());
    cr_expect(backend_is_device(name));
    /* every entry: the table is only function pointers, each one called by the selftest */
    void (*fns[sizeof *kt / sizeof(void (*)(void))])(void);
    memcpy(fns, kt, sizeof fns);
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        cr_expect_not_null(fns[i], "kernel test entry %zu is missing", i);
}

/* A cache length is never negative: backend_truncate refuses -1 before the backend sees it, and
 * the cache keeps what it held. */
Test(backend, truncate_to_a_negative_length_is_refused_and_the_cache_is_kept)
{
    struct gate_err err = {0};
    struct model *m = NULL;
    cr_assert_eq(model_load(&m, conformance_path("qwen3-dense-tiny-f32", "model.gguf"), &err), 0);
    struct spy s = {.base = {.ops = &SPY_OPS, .model = m, .n_ctx = 16, .n_batch = 16}};
    struct backend *b = &s.base;
    float *logits = malloc((size_t)4 * m->hp.n_vocab * sizeof(float));
    const int32_t ok[4] = {0};
    cr_assert_eq(backend_forward(b, ok, 4, 0, logits, &err), 0, "%s", err.msg);
    cr_expect_eq(backend_truncate(b, -1, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "spy: cannot truncate the cache to -1 positions (it holds 4)"), "%s",
              err.msg);
    cr_expect_eq(b->n_past, 4);
    free(logits);
    model_free(m);
}

/* A fault set's count is clamped to what it can hold (0..FAULT_MAX): a backend never reads
 * past the set's entries. */
Test(backend, a_fault_count_out_of_range_is_clamped_to_the_set)
{
    struct backend b = {0};
    struct fault_set fs = {0};
    fs.n = FAULT_MAX + 3;
    backend_set_faults(&b, &fs);
    cr_expect_eq(b.faults.n, FAULT_MAX);
    fs.n = -2;
    backend_set_faults(&b, &fs);
    cr_expect_eq(b.faults.n, 0);
}
