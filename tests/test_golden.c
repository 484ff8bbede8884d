/* test_golden.c — greedy goldens: the conformance greedy continuation is reproduced, goldens
 * recorded from the ref twin replay on every ref path, a changed id fails naming the index and
 * both continuations, and goldens of another model digest are refused. Issue 10 §2: vacuous or
 * inconsistent goldens files are input errors, recording never overwrites silently and says who
 * recorded, regression goldens are labelled, and the judge classifies a divergence by the
 * judge's own margin (TIE_FLIP below near_tie, WRONG above), recomputed from the id lists.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracles/golden.h"
#include "support/check.h"

Test(golden, first_diff)
{
    int32_t a[] = {1, 2, 3, 4}, b[] = {1, 2, 9, 4};
    cr_expect_eq(golden_first_diff(a, 4, a, 4), -1);
    cr_expect_eq(golden_first_diff(a, 4, b, 4), 2);
    cr_expect_eq(golden_first_diff(a, 4, a, 3), 3);
    cr_expect_eq(golden_first_diff(a, 0, a, 0), -1);
    /* only the last token differs (a comparison that stopped one short survived: issue 28) */
    int32_t c[] = {1, 2, 3, 5};
    cr_expect_eq(golden_first_diff(a, 4, c, 4), 3);
    cr_expect_eq(golden_first_diff(c, 1, a, 1), -1);
    cr_expect_eq(golden_first_diff((int32_t[]){7}, 1, (int32_t[]){8}, 1), 0);
}

Test(golden, reproduces_the_conformance_greedy_ids)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    char path[4096];
    snprintf(path, sizeof path, "%s/conformance/qwen3moe-tiny-f32/greedy_exact.txt",
             check_shared_dir());
    int n_want = 0;
    int32_t *want = check_read_ids(path, &n_want);
    cr_assert_not_null(want);
    int32_t prompt[16], got[32];
    mode_tokens(202, 512, 16, prompt);
    const enum mode_path paths[] = {MODE_DECODE, MODE_PREFILL};
    for (int i = 0; i < 2; i++) {
        struct mode mode = {.backend = "ref", .path = paths[i]};
        struct backend *b = NULL;
        struct gate_err err = {0};
        int n = 0;
        cr_assert_eq(mode_open(&b, &mode, m, 48, 2, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(golden_generate(b, paths[i], prompt, 16, 32, -1, got, &n, &err), 0, "%s",
                     err.msg);
        cr_expect_eq(n, 32);
        cr_expect_eq(golden_first_diff(want, n_want, got, n), -1, "path %d differs at %d", i,
                     golden_first_diff(want, n_want, got, n));
        backend_close(b);
    }
    free(want);
    model_free(m);
}

Test(golden, record_replay_tamper_and_refuse)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    struct model *d = check_load_case("qwen3-dense-tiny-f32");
    char path[4096];
    snprintf(path, sizeof path, "%s/goldens.json", check_tmp_dir());
    struct gate_err err = {0};
    cr_assert_eq(golden_record(path, m, 8, 2, &err), 0, "%s", err.msg);
    char sha[65];
    golden_model_sha256(m, sha);
    cr_expect_str_eq(sha, "997927a07eb5a1467dccea15cbe52cc3b4bb64ced55972fa6ab34ec3ae6fb0ed");
    struct golden_set g;
    cr_assert_eq(golden_load(path, sha, &g, &err), 0, "%s", err.msg);
    cr_expect_eq(g.n, 3);
    cr_expect_not(g.independent);
    json_t *settings = json_pack("{s:i, s:f, s:s}", "tokens", 8, "near_tie", 0.05, "goldens_sha256",
                                 g.file_sha256);
    cr_expect_str_eq(g.c[2].name, "chat");
    const char *modes[] = {"ref.decode", "ref.chat"};
    for (int i = 0; i < 2; i++) {
        struct mode mode;
        struct golden_result r;
        cr_assert_eq(mode_parse(modes[i], &mode, &err), 0);
        cr_assert_eq(golden_gate(m, &mode, &g, settings, 2, &r, &err), 0, "%s", err.msg);
        cr_expect(r.pass, "%s: %s", modes[i], r.reason);
        cr_expect_eq(r.verdict, GATE_PASS);
        cr_expect_not_null(r.c[0].got_text); /* the tiny model has a byte-level tokenizer */
        cr_expect_str_eq(json_string_value(json_object_get(r.metrics, "source")), "regression");
        golden_result_free(&r);
    }
    /* one id changed: FAIL at that index, both continuations reported */
    g.c[1].ids[5] = (g.c[1].ids[5] + 1) % 512;
    struct mode dec = {.backend = "ref", .path = MODE_DECODE};
    struct golden_result r;
    cr_assert_eq(golden_gate(m, &dec, &g, settings, 2, &r, &err), 0, "%s", err.msg);
    cr_expect_not(r.pass);
    cr_expect_eq(r.c[1].first_diff, 5);
    cr_expect(strstr(r.reason, "index 5"), "%s", r.reason);
    json_t *j = golden_result_json(&r);
    cr_expect_eq(
        json_array_size(json_object_get(json_array_get(json_object_get(j, "cases"), 1), "got")),
        (size_t)r.c[1].n_got);
    json_decref(j);
    golden_result_free(&r);
    /* the dense model has no goldens in this file: refused, naming the digest it has */
    char dsha[65];
    golden_model_sha256(d, dsha);
    struct golden_set gd;
    err_clear(&err);
    cr_expect_eq(golden_load(path, dsha, &gd, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "refusing"), "%s", err.msg);
    cr_expect(strstr(err.msg, "997927a07eb5a146"), "%s", err.msg);
    /* and goldens of one model handed to another are refused too */
    err_clear(&err);
    cr_expect_eq(golden_gate(d, &dec, &g, settings, 2, &r, &err), ERR_INPUT);
    golden_result_free(&r);
    /* recording the second model keeps the first */
    err_clear(&err);
    cr_assert_eq(golden_record(path, d, 4, 2, &err), 0, "%s", err.msg);
    golden_set_free(&g);
    cr_expect_eq(golden_load(path, sha, &g, &err), 0, "%s", err.msg);
    cr_expect_eq(golden_load(path, dsha, &gd, &err), 0, "%s", err.msg);
    golden_set_free(&g);
    golden_set_free(&gd);
    json_decref(settings);
    model_free(m);
    model_free(d);
}

/* ---- issue 10 §2 ---------------------------------------------------------------------------- */

static const char *SHA = "997927a07eb5a1467dccea15cbe52cc3b4bb64ced55972fa6ab34ec3ae6fb0ed";

/* A goldens file for SHA with one entry: recorded_by (JSON text), n_gen, eos, cases (JSON). */
static char *goldens_text(const char *by, const char *n_gen, int eos, const char *cases)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"schema\": 2, \"models\": {\"%s\": {\"recorded_by\": %s,%s"
             " \"eos\": %d, \"cases\": %s}}}",
             SHA, by, n_gen, eos, cases);
    return buf;
}

static int load_text(const char *text, struct gate_err *err)
{
    struct golden_set g;
    err_clear(err);
    int rc = golden_load_buf(text, strlen(text), "t.json", SHA, &g, err);
    golden_set_free(&g);
    return rc;
}

static const char *GATE_BY = "{\"engine\": \"gate\", \"backend\": \"ref\", \"git_commit\":"
                             " \"abc\", \"git_dirty\": false, \"date\": \"2025-01-01T00:00:00Z\"}";

/* fuzz/fuzz_golden.c found it: an entry keyed by 65 characters, asked for by that key, loaded
 * as a set whose digest was the key cut to 64 characters */
Test(golden, load_refuses_a_model_digest_that_is_not_64_hex_digits)
{
    static const char *const BAD[] = {
        "997927a07eb5a1467dccea15cbe52cc3b4bb64ced55972fa6ab34ec3ae6fb0ed0", /* 65 */
        "997927a07eb5a1467dccea15cbe52cc3b4bb64ced55972fa6ab34ec3ae6fb0e",   /* 63 */
        "997927A07EB5A1467DCCEA15CBE52CC3B4BB64CED55972FA6AB34EC3AE6FB0ED",  /* upper case */
        "997927a07eb5a1467dccea15cbe52cc3b4bb64ced55972fa6ab34ec3ae6fb0e/",  /* not hex */
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "{\"schema\": 2, \"models\": {\"%s\": {\"recorded_by\": %s, \"n_gen\": 2,"
                 " \"cases\": [{\"name\": \"a\", \"prompt\": [1], \"ids\": [3, 4]}]}}}",
                 BAD[i], GATE_BY);
        struct golden_set g;
        struct gate_err err = {0};
        cr_expect_eq(golden_load_buf(text, strlen(text), "t.json", BAD[i], &g, &err), ERR_INPUT,
                     "digest %zu accepted", i);
        cr_expect(strstr(err.msg, "is not 64 lower-case hex digits"), "%s", err.msg);
        golden_set_free(&g);
    }
}

Test(golden, load_refuses_vacuous_or_inconsistent_cases)
{
    struct gate_err err = {0};
    const char *ok = "[{\"name\": \"a\", \"prompt\": [1, 2], \"ids\": [3, 4, 5, 6]}]";
    cr_expect_eq(load_text(goldens_text(GATE_BY, " \"n_gen\": 4,", -1, ok), &err), 0, "%s",
                 err.msg);
    /* short, but ends at the recorded EOS (the recorder stops there): fine */
    const char *eos_end = "[{\"name\": \"a\", \"prompt\": [1], \"ids\": [3, 9]}]";
    cr_expect_eq(load_text(goldens_text(GATE_BY, " \"n_gen\": 4,", 9, eos_end), &err), 0, "%s",
                 err.msg);
    struct {
        const char *by, *n_gen;
        int eos;
        const char *cases, *want;
    } bad[] = {
        {GATE_BY, " \"n_gen\": 4,", -1, "[{\"name\": \"empty\", \"prompt\": [1], \"ids\": []}]",
         "'empty'"},
        {GATE_BY, " \"n_gen\": 4,", -1, "[{\"name\": \"short\", \"prompt\": [1], \"ids\": [2]}]",
         "'short'"},
        {GATE_BY, " \"n_gen\": 2,", -1,
         "[{\"name\": \"long\", \"prompt\": [1], \"ids\": [2, 3, 4]}]", "'long'"},
        {GATE_BY, " \"n_gen\": 4,", 3,
         "[{\"name\": \"midEOS\", \"prompt\": [1], \"ids\": [3, 4, 5, 6]}]", "'midEOS'"},
        {GATE_BY, " \"n_gen\": 4,", -1, "[{\"name\": \"np\", \"prompt\": [], \"ids\": [1,2,3,4]}]",
         "'np'"},
        {GATE_BY, "", -1, ok, "n_gen"},
        {GATE_BY, " \"n_gen\": 4,", -1, "[]", "no cases"},
        {"\"ref\"", " \"n_gen\": 4,", -1, ok, "recorded_by"},
        {"{\"engine\": \"my-own-fork\", \"version\": \"1\"}", " \"n_gen\": 4,", -1, ok,
         "recorded_by"},
        {"{\"engine\": \"gate\", \"backend\": \"ref\"}", " \"n_gen\": 4,", -1, ok, "recorded_by"},
        {"{\"engine\": \"llama.cpp\"}", " \"n_gen\": 4,", -1, ok, "recorded_by"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *t = goldens_text(bad[i].by, bad[i].n_gen, bad[i].eos, bad[i].cases);
        cr_expect_eq(load_text(t, &err), ERR_INPUT, "case %zu loaded: %s", i, t);
        cr_expect(strstr(err.msg, bad[i].want), "case %zu: '%s' lacks '%s'", i, err.msg,
                  bad[i].want);
    }
    /* an independent source with a version is known, and labelled so */
    struct golden_set g;
    const char *t = goldens_text("{\"engine\": \"llama.cpp\", \"version\": \"b4600\"}",
                                 " \"n_gen\": 4,", -1, ok);
    cr_assert_eq(golden_load_buf(t, strlen(t), "t.json", SHA, &g, &err), 0, "%s", err.msg);
    cr_expect(g.independent);
    cr_expect_eq(strlen(g.file_sha256), 64);
    golden_set_free(&g);
}

Test(golden, record_refuses_to_overwrite_unless_forced_and_says_who)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    char path[4096];
    snprintf(path, sizeof path, "%s/goldens.json", check_tmp_dir());
    struct gate_err err = {0};
    cr_assert_eq(golden_record(path, m, 4, 2, &err), 0, "%s", err.msg);
    size_t n0 = 0, n1 = 0;
    uint8_t *before = check_slurp(path, &n0);
    cr_expect_eq(golden_record(path, m, 6, 2, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, SHA) && strstr(err.msg, path) && strstr(err.msg, "--force"), "%s",
              err.msg);
    uint8_t *after = check_slurp(path, &n1);
    cr_expect(n0 == n1 && !memcmp(before, after, n0), "the refused record changed the file");
    free(before);
    free(after);
    err_clear(&err);
    cr_assert_eq(golden_record_force(path, m, 6, 2, 1, NULL, &err), 0, "%s", err.msg);
    struct golden_set g;
    cr_assert_eq(golden_load(path, SHA, &g, &err), 0, "%s", err.msg);
    cr_expect_eq(g.n_gen, 6);
    const json_t *by = g.recorded_by;
    cr_expect_str_eq(json_string_value(json_object_get(by, "engine")), "gate");
    cr_expect_str_eq(json_string_value(json_object_get(by, "backend")), "ref");
    cr_expect(json_string_length(json_object_get(by, "git_commit")) > 0);
    cr_expect(json_is_boolean(json_object_get(by, "git_dirty")));
    cr_expect(json_string_length(json_object_get(by, "date")) == 20);
    cr_expect_str_eq(golden_source_of(by), "regression");
    golden_set_free(&g);
    model_free(m);
}

/* Metrics of one diverging case: expected 5 7 9 11, got 5 7 8 ..., judge margin at index 2. */
static json_t *flip_metrics(double margin, double gap_got)
{
    json_t *by = json_loads(GATE_BY, 0, NULL);
    return json_pack("{s:s, s:s, s:o, s:s, s:i, s:i, s:[{s:s, s:[iiii], s:[iiii], s:i,"
                     " s:{s:i, s:i, s:f, s:f, s:f}}]}",
                     "mode", "cuda.decode", "source", "regression", "recorded_by", by,
                     "goldens_sha256", SHA, "n_gen", 4, "eos", -1, "cases", "name", "a", "expected",
                     5, 7, 9, 11, "got", 5, 7, 8, 12, "first_diff", 2, "judge", "top1", 9, "top2",
                     8, "margin", margin, "gap_expected", 0.0, "gap_got", gap_got);
}

static json_t *golden_settings(double near_tie)
{
    return json_pack("{s:i, s:f, s:s}", "tokens", 4, "near_tie", near_tie, "goldens_sha256", SHA);
}

Test(golden, judge_tie_flip_below_near_tie_wrong_above)
{
    json_t *s = golden_settings(0.05), *checks = json_array();
    char why[320];
    /* FP16 rounding broke a 0.0015 tie: TIE_FLIP, not a FAIL */
    json_t *m = flip_metrics(0.0015, 0.0015);
    cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_PASS, "%s", why);
    json_decref(m);
    /* a clear margin: WRONG */
    m = flip_metrics(0.8, 0.8);
    cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_FAIL);
    cr_expect(strstr(why, "index 2") && strstr(why, "WRONG"), "%s", why);
    json_decref(m);
    /* a small top-1/top-2 margin does not excuse a pick far below the top */
    m = flip_metrics(0.0015, 3.0);
    cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_FAIL);
    json_decref(m);
    /* no judge margin recorded at a divergence: FAIL, never excused */
    m = flip_metrics(0.0015, 0.0015);
    json_object_del(json_array_get(json_object_get(m, "cases"), 0), "judge");
    cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_FAIL);
    json_decref(m);
    json_decref(s);
    json_decref(checks);
}

/* A small top-1/top-2 margin and a small gap to the produced token do not excuse an expected
 * token that sits far below the judge's top (gap_expected 3.0): WRONG, not a TIE_FLIP
 * (mutant GD01, the rule without "gap_expected < near_tie") */
Test(golden, a_tie_flip_needs_the_expected_token_near_the_top)
{
    json_t *s = golden_settings(0.05), *checks = json_array();
    char why[320];
    json_t *m = flip_metrics(0.0015, 0.0015);
    json_t *j = json_object_get(json_array_get(json_object_get(m, "cases"), 0), "judge");
    json_object_set_new(j, "gap_expected", json_real(3.0));
    cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_FAIL,
                 "an expected token 3.0 below the top is no tie: %s", why);
    cr_expect(strstr(why, "WRONG"), "%s", why);
    json_decref(m);
    json_decref(s);
    json_decref(checks);
}

/* A route-tie replay excuses a divergence only where the replayed judge's gap to the produced
 * token is inside the near tie: a replay with a large gap_got, or none recorded, leaves a clear
 * margin WRONG (mutant GD02, which took any forced replay as a ROUTE_TIE) */
Test(golden, a_route_tie_replay_needs_a_small_replayed_gap)
{
    json_t *s = golden_settings(0.05), *checks = json_array();
    char why[320];
    for (int k = 0; k < 2; k++) {
        json_t *m = flip_metrics(0.8, 0.8);
        json_t *j = json_object_get(json_array_get(json_object_get(m, "cases"), 0), "judge");
        json_t *rp = json_pack("{s:i, s:i}", "forced", 2, "refused", 0);
        if (!k)
            json_object_set_new(rp, "gap_got", json_real(0.8));
        json_object_set_new(j, "replay", rp);
        cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_FAIL, "replay %s: %s",
                     k ? "without gap_got" : "with gap_got 0.8", why);
        cr_expect(strstr(why, "WRONG"), "%s", why);
        json_decref(m);
    }
    json_decref(s);
    json_decref(checks);
}

/* Expected ids that stop short of the token count without ending at EOS are a broken golden,
 * even when the produced ids are truncated the same way and eos is known (mutant GD03, which
 * accepted any short expectation when eos >= 0) */
Test(golden, a_short_expectation_not_ending_at_eos_fails_even_if_matched)
{
    json_t *s = golden_settings(0.05), *checks = json_array();
    char why[320];
    json_t *m = flip_metrics(0.0015, 0.0015);
    json_t *c = json_array_get(json_object_get(m, "cases"), 0);
    json_object_set_new(m, "eos", json_integer(2));
    json_object_set_new(c, "expected", json_pack("[iii]", 5, 7, 9));
    json_object_set_new(c, "got", json_pack("[iii]", 5, 7, 9));
    json_object_del(c, "judge");
    cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_FAIL,
                 "3 of 4 ids, not ending at EOS 2: %s", why);
    cr_expect(strstr(why, "short, not ending at EOS"), "%s", why);
    /* the same three ids ending at EOS are a complete expectation */
    json_object_set_new(m, "eos", json_integer(9));
    cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_PASS, "%s", why);
    json_decref(m);
    json_decref(s);
    json_decref(checks);
}

/* A case with an expected text matches only where the produced text was recorded and equal: a
 * missing got_text is not a match (mutant GD04) */
Test(golden, an_expected_text_with_no_produced_text_fails)
{
    json_t *s = golden_settings(0.05), *checks = json_array();
    char why[320];
    json_t *m = flip_metrics(0.0015, 0.0015);
    json_t *c = json_array_get(json_object_get(m, "cases"), 0);
    json_object_set_new(c, "got", json_pack("[iiii]", 5, 7, 9, 11));
    json_object_set_new(c, "expect_text", json_string("Paris"));
    cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_FAIL,
                 "expect_text but no got_text: %s", why);
    cr_expect(strstr(why, "not the expected text"), "%s", why);
    json_object_set_new(c, "got_text", json_string("Paris"));
    cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_PASS, "%s", why);
    json_decref(m);
    json_decref(s);
    json_decref(checks);
}

Test(golden, judge_recomputes_from_ids_and_labels)
{
    json_t *s = golden_settings(0.05), *checks = json_array();
    char why[320];
    /* the metrics claim "first_diff": -1 and carry no judge: the ids differ, so FAIL */
    json_t *m = flip_metrics(0.0015, 0.0015);
    json_t *c = json_array_get(json_object_get(m, "cases"), 0);
    json_object_set_new(c, "first_diff", json_integer(-1));
    json_object_del(c, "judge");
    json_object_set_new(c, "verdict", json_string("PASS"));
    cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_FAIL);
    json_decref(m);
    /* equal ids pass; but a source label that recorded_by does not support fails */
    m = flip_metrics(0.0015, 0.0015);
    c = json_array_get(json_object_get(m, "cases"), 0);
    json_object_set_new(c, "got", json_pack("[iiii]", 5, 7, 9, 11));
    cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_PASS, "%s", why);
    json_object_set_new(m, "source", json_string("independent"));
    cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_FAIL);
    json_object_set_new(m, "source", json_string("regression"));
    /* other goldens than the pinned file, or a different token count: FAIL */
    json_object_set_new(m, "goldens_sha256", json_string("00"));
    cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_FAIL);
    json_object_set_new(m, "goldens_sha256", json_string(SHA));
    json_object_set_new(m, "n_gen", json_integer(8));
    cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_FAIL);
    json_object_set_new(m, "n_gen", json_integer(4));
    /* no cases at all: never a vacuous PASS */
    json_object_set_new(m, "cases", json_array());
    cr_expect_eq(golden_judge(s, m, checks, why, sizeof why), GATE_FAIL);
    json_decref(m);
    json_decref(s);
    json_decref(checks);
}

Test(golden, gate_records_the_judge_margin_where_a_case_diverges)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    char path[4096];
    snprintf(path, sizeof path, "%s/goldens.json", check_tmp_dir());
    struct gate_err err = {0};
    cr_assert_eq(golden_record(path, m, 8, 2, &err), 0, "%s", err.msg);
    struct golden_set g;
    cr_assert_eq(golden_load(path, SHA, &g, &err), 0, "%s", err.msg);
    /* plant a wrong expectation at index 3 of the first case: the subject (the twin) keeps its
     * own pick, and the judge's top-1 there is that pick */
    const int32_t real = g.c[0].ids[3];
    g.c[0].ids[3] = (real + 1) % 512;
    struct mode dec = {.backend = "ref", .path = MODE_DECODE};
    struct golden_result r;
    for (int pass = 0; pass < 2; pass++) {
        /* near_tie 0.05: a clear margin, WRONG; near_tie 1e9: everything is a "tie" */
        json_t *s = json_pack("{s:i, s:f, s:s}", "tokens", 8, "near_tie", pass ? 1e9 : 0.05,
                              "goldens_sha256", g.file_sha256);
        cr_assert_eq(golden_gate(m, &dec, &g, s, 2, &r, &err), 0, "%s", err.msg);
        cr_expect_eq(r.c[0].first_diff, 3);
        cr_expect(r.c[0].have_margin);
        cr_expect_eq(r.c[0].top1, real);
        cr_expect_eq(r.c[0].gap_got, 0.0);
        cr_expect_geq(r.c[0].margin, 0.0);
        json_t *j =
            json_object_get(json_array_get(json_object_get(r.metrics, "cases"), 0), "judge");
        cr_expect_eq(json_integer_value(json_object_get(j, "top1")), real);
        if (!pass) {
            cr_expect_gt(r.c[0].margin, 0.05, "the tiny model's pick is not a near tie");
            cr_expect_eq(r.verdict, GATE_FAIL, "%s", r.reason);
            cr_expect_eq(r.c[0].cls, GOLDEN_WRONG);
        } else {
            cr_expect_eq(r.verdict, GATE_PASS, "%s", r.reason);
            cr_expect_eq(r.c[0].cls, GOLDEN_TIE_FLIP);
            cr_expect_eq(r.n_tie_flip, 1);
        }
        /* the run's verdict is the judge's over the recorded metrics */
        json_t *checks = json_array();
        char why[320];
        cr_expect_eq(golden_judge(s, r.metrics, checks, why, sizeof why), r.verdict);
        json_decref(checks);
        json_decref(s);
        golden_result_free(&r);
    }
    golden_set_free(&g);
    model_free(m);
}

/* Issue 22 §6: the golden gate uses the route-tie replay. On the demo's tiny-moe, a correct cpu
 * engine's greedy continuation of some prompts leaves the twin's where a router near tie breaks
 * the other way, with a clear margin in the plain judge (19 of 299 random prompts: seed 150,
 * 38 ids, diverges at index 1 with the judge's gap to the engine's pick 1.6): WRONG before. The
 * judge replayed on the engine's near-tie expert choices picks the engine's token: ROUTE_TIE, a
 * PASS; the same divergence with the replay record showing a refused route is WRONG. */
Test(golden, a_divergence_at_a_router_near_tie_is_judged_against_the_replay)
{
    uint8_t *buf = NULL;
    struct model *m = check_tiny_model("tiny-moe", &buf);
    char path[4096];
    snprintf(path, sizeof path, "%s/goldens-rt.json", check_tmp_dir());
    struct gate_err err = {0};
    cr_assert_eq(golden_record(path, m, 16, 1, &err), 0, "%s", err.msg);
    char sha[65];
    golden_model_sha256(m, sha);
    struct golden_set g;
    cr_assert_eq(golden_load(path, sha, &g, &err), 0, "%s", err.msg);
    /* case 0 becomes the prompt, its expected ids the twin's greedy continuation */
    const int np = 38;
    struct golden_case *c = &g.c[0];
    free(c->prompt);
    c->prompt = malloc(np * sizeof *c->prompt);
    c->n_prompt = np;
    mode_tokens(150ull * 7919u, 512, np, c->prompt);
    free(c->expect_text);
    c->expect_text = NULL;
    struct backend *r = NULL;
    struct mode ref = {.backend = "ref", .path = MODE_DECODE};
    cr_assert_eq(mode_open(&r, &ref, m, np + 17, 1, NULL, &err), 0, "%s", err.msg);
    int n = 0;
    cr_assert_eq(golden_generate(r, MODE_DECODE, c->prompt, np, 16, g.eos, c->ids, &n, &err), 0);
    c->n_ids = n;
    backend_close(r);
    struct mode cpu = {.backend = "cpu", .path = MODE_DECODE};
    json_t *s = json_pack("{s:i, s:f, s:s}", "tokens", 16, "near_tie", 0.05, "goldens_sha256",
                          g.file_sha256);
    struct golden_result res;
    cr_assert_eq(golden_gate(m, &cpu, &g, s, 1, &res, &err), 0, "%s", err.msg);
    cr_expect_eq(res.c[0].first_diff, 1);
    cr_expect_gt(res.c[0].gap_got, 0.05, "a clear margin in the plain judge");
    cr_expect(res.c[0].replayed && res.c[0].replay_forced > 0 && res.c[0].replay_refused == 0);
    cr_expect_eq(res.c[0].cls, GOLDEN_ROUTE_TIE, "%s", res.reason);
    cr_expect_eq(res.verdict, GATE_PASS, "%s", res.reason);
    /* the judge over the recorded metrics agrees; a refused route in the record is WRONG */
    json_t *checks = json_array();
    char why[320];
    cr_expect_eq(golden_judge(s, res.metrics, checks, why, sizeof why), GATE_PASS, "%s", why);
    json_t *rp = json_object_get(
        json_object_get(json_array_get(json_object_get(res.metrics, "cases"), 0), "judge"),
        "replay");
    json_object_set_new(rp, "refused", json_integer(1));
    cr_expect_eq(golden_judge(s, res.metrics, checks, why, sizeof why), GATE_FAIL);
    cr_expect(strstr(why, "routed beyond the router near tie"), "%s", why);
    json_object_set_new(rp, "refused", json_real(0.5));
    cr_expect_eq(golden_judge(s, res.metrics, checks, why, sizeof why), GATE_FAIL);
    json_decref(checks);
    json_decref(s);
    golden_result_free(&res);
    golden_set_free(&g);
    model_free(m);
    free(buf);
}
