/* test_consistency.c — the self-consistency gate (oracles/consistency.c): the cpu engine and the
 * twin hold the invariances their backend rows declare (decode = prefill = chunks of 7 and 45 =
 * resumed cache, 1/2/3 threads repeated, every instruction set this machine runs); the judge
 * fails a bitwise backend on any differing bit, a missing variant, a missing thread variant; the
 * instruction set is selectable and named in what ran.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu_dot.h"
#include "harness/gatedef.h"
#include "oracles/consistency.h"
#include "support/check.h"

static json_t *run_on(const char *model_case, const char *mode_text, struct consistency_config *c)
{
    struct model *m = check_load_case(model_case);
    struct mode mode;
    struct gate_err err = {0};
    cr_assert_eq(mode_parse(mode_text, &mode, &err), 0, "%s", err.msg);
    json_t *metrics = NULL;
    cr_assert_eq(consistency_run(m, &mode, c, 2, &metrics, &err), 0, "%s", err.msg);
    model_free(m);
    return metrics;
}

static json_t *settings_of(const struct consistency_config *c)
{
    return json_pack("{s:i, s:i, s:f}", "positions", c->positions, "repeats", c->repeats, "max_abs",
                     c->max_abs);
}

static enum gate_verdict judge(const struct consistency_config *c, const json_t *metrics, char *why,
                               size_t n)
{
    json_t *s = settings_of(c), *checks = json_array();
    enum gate_verdict v = consistency_judge(s, metrics, checks, why, n);
    json_decref(s);
    json_decref(checks);
    return v;
}

static const json_t *find(const json_t *metrics, const char *name)
{
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(metrics, "variants"), i, x)
    {
        if (!strcmp(json_string_value(json_object_get(x, "name")), name))
            return x;
    }
    return NULL;
}

Test(consistency, cpu_engine_holds_its_declared_invariances)
{
    struct consistency_config c;
    gatedef_consistency_config(NULL, &c);
    c.positions = 48; /* three 16-token tiles: chunks of 7 and 45 leave partial ones */
    const char *cases[] = {"qwen3moe-tiny-q4_k_m", "qwen3-dense-tiny-q4_k_m"};
    for (int i = 0; i < 2; i++) {
        c.token_seed = i ? 0x5eed : 0; /* a run's half-prose inputs, or the fixed ids */
        json_t *mx = run_on(cases[i], "cpu.prefill", &c);
        const json_int_t prose = json_integer_value(json_object_get(mx, "prose_tokens"));
        cr_expect(i ? prose > 0 : prose == 0, "%s: %lld prose tokens", cases[i], (long long)prose);
        char why[320] = "";
        cr_expect_eq(judge(&c, mx, why, sizeof why), GATE_PASS, "%s: %s", cases[i], why);
        cr_expect(json_is_true(json_object_get(json_object_get(mx, "declared"), "bitwise")));
        static const char *const due[] = {"prefill",     "chunks=7",    "chunks=45",  "resume",
                                          "threads=1#1", "threads=2#2", "threads=3#1"};
        for (size_t k = 0; k < sizeof due / sizeof due[0]; k++) {
            const json_t *x = find(mx, due[k]);
            cr_assert_not_null(x, "%s: variant %s missing", cases[i], due[k]);
            cr_expect(json_is_true(json_object_get(x, "identical")), "%s: %s differs", cases[i],
                      due[k]);
        }
        /* every declared instruction set is recorded: run where this machine has it */
        static const char *const isas[] = {"isa=portable", "isa=avx2", "isa=avx512"};
        const int hw = cpu_dot_have_avx512() ? 2 : cpu_dot_have_avx2() ? 1 : 0;
        for (int k = 0; k < 3; k++) {
            const json_t *x = find(mx, isas[k]);
            cr_assert_not_null(x, "%s missing", isas[k]);
            cr_expect_eq(json_is_true(json_object_get(x, "ran")), k <= hw, "%s", isas[k]);
        }
        json_decref(mx);
    }
}

Test(consistency, the_twin_holds_bitwise_and_threads_and_declares_no_isa)
{
    struct consistency_config c;
    gatedef_consistency_config(NULL, &c);
    c.positions = 32;
    c.repeats = 1;
    json_t *mx = run_on("qwen3moe-tiny-f32", "ref.decode", &c);
    char why[320] = "";
    cr_expect_eq(judge(&c, mx, why, sizeof why), GATE_PASS, "%s", why);
    cr_expect_null(find(mx, "isa=avx2"));
    json_decref(mx);
}

Test(consistency, judge_fails_one_differing_bit_and_missing_variants)
{
    struct consistency_config c;
    gatedef_consistency_config(NULL, &c);
    c.positions = 48;
    c.repeats = 1;
    json_t *mx = run_on("qwen3-dense-tiny-q4_k_m", "cpu.decode", &c);
    char why[320] = "";
    cr_assert_eq(judge(&c, mx, why, sizeof why), GATE_PASS, "%s", why);
    /* a GEMM tail that drops the last token of a partial tile shows here as chunks=45 moving
     * from position 32 on: one bit is enough on a bitwise engine */
    json_t *x = (json_t *)find(mx, "chunks=45");
    json_object_set_new(x, "max_abs", json_real(1e-7));
    json_object_set_new(x, "first_diff", json_integer(32));
    json_object_set_new(x, "identical", json_false());
    cr_expect_eq(judge(&c, mx, why, sizeof why), GATE_FAIL);
    cr_expect(strstr(why, "chunks=45 differs from the reference"), "%s", why);
    /* a receipt cannot relax its backend's declaration: "not bitwise" on a cpu run FAILs */
    json_object_set_new(json_object_get(mx, "declared"), "bitwise", json_false());
    cr_expect_eq(judge(&c, mx, why, sizeof why), GATE_FAIL);
    cr_expect(strstr(why, "are not backend cpu's"), "%s", why);
    /* the same difference within max_abs passes a backend that does not declare bitwise (the
     * cuda row: neither bitwise nor thread-invariant) */
    json_object_set_new(mx, "backend", json_string("cuda"));
    json_object_set_new(json_object_get(mx, "declared"), "threads", json_false());
    cr_expect_eq(judge(&c, mx, why, sizeof why), GATE_PASS, "%s", why);
    json_object_set_new(mx, "backend", json_string("cpu"));
    json_object_set_new(json_object_get(mx, "declared"), "threads", json_true());
    json_object_set_new(json_object_get(mx, "declared"), "bitwise", json_true());
    json_object_set_new(x, "max_abs", json_real(0));
    json_object_set_new(x, "first_diff", json_integer(-1));
    /* a thread variant that did not run, or was dropped, fails a thread-invariant engine */
    json_t *vars = json_object_get(mx, "variants");
    for (size_t i = 0; i < json_array_size(vars); i++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(vars, i), "name")),
                    "threads=3#1")) {
            json_array_remove(vars, i);
            break;
        }
    cr_expect_eq(judge(&c, mx, why, sizeof why), GATE_FAIL);
    cr_expect(strstr(why, "threads=3#1 was due"), "%s", why);
    /* settings that ask for more positions than ran */
    c.positions = 64;
    cr_expect_eq(judge(&c, mx, why, sizeof why), GATE_FAIL);
    json_decref(mx);
}

Test(consistency, instruction_set_is_selectable_and_named_in_what_ran)
{
    struct gate_err err = {0};
    cr_expect_eq(backend_set_isa("cpu", "sse9", &err), ERR_ENV);
    cr_expect(strstr(err.msg, "'sse9'"), "%s", err.msg);
    err_clear(&err);
    cr_expect_eq(backend_set_isa("ref", "avx2", &err), ERR_INPUT);
    err_clear(&err);
    cr_assert_eq(backend_set_isa("cpu", "portable", &err), 0, "%s", err.msg);
    cr_expect_str_eq(backend_isa("cpu"), "portable");
    struct model *m = check_load_case("qwen3-dense-tiny-q4_k_m");
    struct backend *b = NULL;
    struct backend_config bc = {.n_threads = 1, .n_ctx = 16};
    cr_assert_eq(backend_open(&b, "cpu", m, &bc, &err), 0, "%s", err.msg);
    struct backend_info info;
    backend_info(b, &info);
    cr_expect(strstr(info.device, "[isa portable]"), "%s", info.device);
    backend_close(b);
    cr_assert_eq(backend_set_isa("cpu", NULL, &err), 0);
    cr_assert_eq(backend_open(&b, "cpu", m, &bc, &err), 0, "%s", err.msg);
    backend_info(b, &info);
    char want[32];
    snprintf(want, sizeof want, "[isa %s]",
             cpu_dot_have_avx512() ? "avx512"
             : cpu_dot_have_avx2() ? "avx2"
                                   : "portable");
    cr_expect(strstr(info.device, want), "%s", info.device);
    backend_close(b);
    model_free(m);
}

/* Recorded metrics of a clean run on backend (its declaration from the backend's row), every
 * due variant identical to the reference. */
static json_t *clean_metrics(const char *backend, int positions, int repeats)
{
    struct backend_invariants inv;
    backend_invariants(backend, &inv);
    json_t *vars = json_array();
    const char *fixed[] = {"prefill", "chunks=7", "chunks=45", "resume", "last-rows"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        json_array_append_new(vars, json_pack("{s:s, s:b, s:f, s:i, s:b}", "name", fixed[i], "ran",
                                              1, "max_abs", 0.0, "first_diff", -1, "identical", 1));
    for (int t = 1; inv.threads && t <= 3; t++)
        for (int r = 1; r <= repeats; r++) {
            char name[32];
            snprintf(name, sizeof name, "threads=%d#%d", t, r);
            json_array_append_new(vars,
                                  json_pack("{s:s, s:b, s:f, s:i, s:b}", "name", name, "ran", 1,
                                            "max_abs", 0.0, "first_diff", -1, "identical", 1));
        }
    return json_pack("{s:{s:b, s:b, s:s}, s:i, s:s, s:o, s:s}", "declared", "bitwise", inv.bitwise,
                     "threads", inv.threads, "isas", inv.isas, "positions", positions, "reference",
                     "decode", "variants", vars, "backend", backend);
}

static struct consistency_config config_of(int positions, int repeats, double max_abs)
{
    struct consistency_config c;
    gatedef_consistency_config(NULL, &c);
    c.positions = positions;
    c.repeats = repeats;
    c.max_abs = max_abs;
    return c;
}

/* +0.0 against -0.0 (or NaN against NaN) differs in its bits with a max |difference| of 0: a
 * bitwise backend fails on the first differing position alone */
Test(consistency, judge_fails_a_bitwise_backend_on_a_difference_max_abs_cannot_see)
{
    const struct consistency_config c = config_of(48, 1, 1e-3);
    json_t *mx = clean_metrics("cpu", 48, 1);
    char why[320] = "";
    cr_assert_eq(judge(&c, mx, why, sizeof why), GATE_PASS, "%s", why);
    json_t *x = (json_t *)find(mx, "chunks=7");
    json_object_set_new(x, "first_diff", json_integer(3));
    json_object_set_new(x, "identical", json_false());
    cr_expect_eq(judge(&c, mx, why, sizeof why), GATE_FAIL, "a differing bit passed");
    cr_expect(strstr(why, "chunks=7 differs from the reference"), "%s", why);
    json_decref(mx);
}

Test(consistency, judge_fails_positions_other_than_the_settings_ask)
{
    const struct consistency_config c = config_of(48, 1, 1e-3);
    char why[320] = "";
    json_t *fewer = clean_metrics("cpu", 24, 1), *more = clean_metrics("cpu", 64, 1);
    cr_expect_eq(judge(&c, fewer, why, sizeof why), GATE_FAIL, "24 positions passed for 48");
    cr_expect(strstr(why, "24 positions run, the settings say 48"), "%s", why);
    cr_expect_eq(judge(&c, more, why, sizeof why), GATE_FAIL, "64 positions passed for 48");
    json_decref(fewer);
    json_decref(more);
}

/* the invariances come from the backend row of the backend that ran; metrics that name none
 * cannot declare themselves out of the thread variants */
Test(consistency, judge_fails_metrics_that_name_no_backend)
{
    const struct consistency_config c = config_of(48, 1, 1e-3);
    json_t *mx = clean_metrics("cuda", 48, 1); /* declares neither bitwise nor threads */
    json_object_del(mx, "backend");
    char why[320] = "";
    cr_expect_eq(judge(&c, mx, why, sizeof why), GATE_FAIL, "metrics naming no backend passed");
    cr_expect(strstr(why, "(not recorded)"), "%s", why);
    json_decref(mx);
}

Test(consistency, judge_fails_a_due_variant_recorded_as_not_run)
{
    const struct consistency_config c = config_of(48, 1, 1e-3);
    json_t *mx = clean_metrics("cpu", 48, 1);
    json_t *x = (json_t *)find(mx, "resume");
    json_object_set_new(x, "ran", json_false());
    json_object_set_new(x, "why", json_string("not here"));
    char why[320] = "";
    cr_expect_eq(judge(&c, mx, why, sizeof why), GATE_FAIL, "a variant that did not run passed");
    cr_expect(strstr(why, "variant resume was due and did not run"), "%s", why);
    json_decref(mx);
}

/* a backend that declares no bitwise identity passes a difference of exactly max_abs and fails
 * one just past it */
Test(consistency, judge_holds_a_non_bitwise_backend_to_max_abs)
{
    const struct consistency_config c = config_of(48, 1, 1e-3);
    json_t *mx = clean_metrics("cuda", 48, 1);
    json_t *x = (json_t *)find(mx, "chunks=45");
    json_object_set_new(x, "first_diff", json_integer(32));
    json_object_set_new(x, "identical", json_false());
    json_object_set_new(x, "max_abs", json_real(1e-3));
    char why[320] = "";
    cr_expect_eq(judge(&c, mx, why, sizeof why), GATE_PASS, "%s", why);
    json_object_set_new(x, "max_abs", json_real(1.5e-3));
    cr_expect_eq(judge(&c, mx, why, sizeof why), GATE_FAIL, "1.5e-3 passed a bound of 1e-3");
    cr_expect(strstr(why, "chunks=45 differs from the reference"), "%s", why);
    json_decref(mx);
}
