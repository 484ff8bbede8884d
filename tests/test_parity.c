/* test_parity.c — the parity oracle: its math on hand-made logit arrays (identical, permuted,
 * near tie, NaN/Inf), its JSON, and parity_run() on the conformance models (the judge equals
 * the exact logits; a fault is rejected and localized; bad inputs are errors).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracles/gates.h"
#include "oracles/parity.h"
#include "support/check.h"

#define NP 64
#define NV 16

static float *make_logits(void)
{
    float *x = malloc(NP * NV * sizeof *x);
    for (int p = 0; p < NP; p++)
        for (int v = 0; v < NV; v++) /* a clear, position-dependent argmax */
            x[p * NV + v] = (float)(sin(0.37 * p + 1.3 * v) * 3.0 + (v == p % NV ? 4.0 : 0.0));
    return x;
}

static struct parity_config cfg_default(void)
{
    struct parity_config c;
    parity_config_default(&c);
    c.positions = NP; /* the rule holds the judged count to the positions asked for */
    return c;
}

Test(parity, identical_logits_pass)
{
    float *a = make_logits();
    struct parity_config c = cfg_default();
    struct parity_result r;
    cr_assert_eq(parity_judge(a, a, NP, NV, &c, &r), 0);
    cr_expect(r.pass, "%s", r.reason);
    cr_expect_eq(r.n_match, NP);
    cr_expect_eq(r.cosine.min, 1.0);
    cr_expect_eq(r.kld.max, 0.0);
    cr_expect_eq(r.first_fail_pos, -1);
    cr_expect_eq(parity_severity(&r), 0.0);
    parity_result_free(&r);
    free(a);
}

Test(parity, permuted_position_is_wrong)
{
    float *a = make_logits(), *b = make_logits();
    memcpy(b + 20 * NV, a + 21 * NV, NV * sizeof *b); /* position 20 sees position 21's row */
    struct parity_config c = cfg_default();
    struct parity_result r;
    cr_assert_eq(parity_judge(a, b, NP, NV, &c, &r), 0);
    cr_expect_not(r.pass);
    cr_expect_eq(r.n_wrong, 1);
    cr_expect_eq(r.pos[20].cls, PARITY_WRONG);
    cr_expect_eq(r.first_fail_pos, 20);
    cr_expect_eq(r.cosine.argmin, 20);
    cr_expect(strstr(r.reason, "position 20"), "%s", r.reason);
    cr_expect(isinf(parity_severity(&r)));
    parity_result_free(&r);
    free(a);
    free(b);
}

Test(parity, flipped_near_tie_is_tie_flip_not_wrong)
{
    float *a = make_logits(), *b = make_logits();
    /* position 7: ref top-1 and top-2 0.01 apart; the test swaps them */
    float *ra = a + 7 * NV, *rb = b + 7 * NV;
    for (int v = 0; v < NV; v++)
        ra[v] = rb[v] = (float)v * 0.1f;
    ra[3] = 5.00f, ra[9] = 4.99f;
    rb[3] = 4.99f, rb[9] = 5.00f;
    struct parity_config c = cfg_default();
    struct parity_result r;
    cr_assert_eq(parity_judge(a, b, NP, NV, &c, &r), 0);
    cr_expect_eq(r.pos[7].cls, PARITY_TIE_FLIP);
    cr_expect_eq(r.n_tie_flip, 1);
    cr_expect_eq(r.n_wrong, 0);
    cr_expect(r.pass, "%s", r.reason); /* reported, and within every threshold */
    cr_expect(strstr(r.reason, "1 tie flip"), "%s", r.reason);
    parity_result_free(&r);
    /* a tiny ref top-1/top-2 gap does not excuse picking the ref's third choice */
    rb[3] = 4.0f, rb[9] = 4.0f, rb[1] = 5.0f;
    cr_assert_eq(parity_judge(a, b, NP, NV, &c, &r), 0);
    cr_expect_eq(r.pos[7].cls, PARITY_WRONG);
    cr_expect_not(r.pass);
    parity_result_free(&r);
    free(a);
    free(b);
}

Test(parity, nan_or_inf_fails_naming_the_position)
{
    float *a = make_logits(), *b = make_logits();
    struct parity_config c = cfg_default();
    struct parity_result r;
    b[37 * NV + 5] = NAN;
    cr_assert_eq(parity_judge(a, b, NP, NV, &c, &r), 0);
    cr_expect_not(r.pass);
    cr_expect_eq(r.n_nonfinite, 1);
    cr_expect_eq(r.first_nonfinite_pos, 37);
    cr_expect_eq(r.first_fail_pos, 37);
    cr_expect_eq(r.pos[37].cls, PARITY_NONFINITE);
    cr_expect(strstr(r.reason, "position 37"), "%s", r.reason);
    cr_expect(isinf(parity_severity(&r)));
    /* JSON cannot hold NaN: it is recorded as a string */
    json_t *j = parity_result_json(&r);
    json_t *cos = json_object_get(json_object_get(j, "per_position"), "cosine");
    cr_expect_str_eq(json_string_value(json_array_get(cos, 37)), "NaN");
    char *s = json_dumps(j, JSON_COMPACT);
    cr_expect_not_null(s);
    free(s);
    json_decref(j);
    parity_result_free(&r);

    b[37 * NV + 5] = a[37 * NV + 5];
    a[63 * NV + 0] = INFINITY; /* the judge itself broken: still a FAIL, named as the judge */
    cr_assert_eq(parity_judge(a, b, NP, NV, &c, &r), 0);
    cr_expect_not(r.pass);
    cr_expect_eq(r.first_nonfinite_pos, 63);
    cr_expect(r.nonfinite_in_ref);
    cr_expect(strstr(r.reason, "judge"), "%s", r.reason);
    parity_result_free(&r);

    /* every position NaN: never a PASS because every comparison was false */
    for (int i = 0; i < NP * NV; i++)
        b[i] = NAN;
    a[63 * NV + 0] = 1.0f;
    cr_assert_eq(parity_judge(a, b, NP, NV, &c, &r), 0);
    cr_expect_not(r.pass);
    cr_expect_eq(r.n_nonfinite, NP);
    cr_expect_eq(r.first_nonfinite_pos, 0);
    parity_result_free(&r);
    free(a);
    free(b);
}

Test(parity, small_drift_beyond_mean_kld_fails)
{
    float *a = make_logits(), *b = make_logits();
    for (int p = 0; p < NP; p++) /* shrink every row a little: same argmax, higher entropy */
        for (int v = 0; v < NV; v++)
            b[p * NV + v] = a[p * NV + v] * 0.9f;
    struct parity_config c = cfg_default();
    struct parity_result r;
    cr_assert_eq(parity_judge(a, b, NP, NV, &c, &r), 0);
    cr_expect_eq(r.n_match, NP);
    cr_expect_eq(r.cosine.min >= 0.99999, 1); /* scaling keeps the direction */
    cr_expect_not(r.pass, "%s", r.reason);    /* ... but the KL divergence sees it */
    cr_expect(strstr(r.reason, "KL"), "%s", r.reason);
    cr_expect_gt(parity_severity(&r), 1.0);
    parity_result_free(&r);
    free(a);
    free(b);
}

Test(parity, a_one_percent_uniform_scale_fails_though_cosine_cannot_see_it)
{
    /* issue 22 §2: t = 1.01 r keeps every cosine at 1 and moves KL by ~1e-4; the relative L2
     * error of the centred logits is exactly 0.01 there */
    float *a = make_logits(), *b = make_logits();
    for (int p = 10; p < 20; p++)
        for (int v = 0; v < NV; v++)
            b[p * NV + v] = a[p * NV + v] * 1.01f;
    struct parity_config c = cfg_default();
    struct parity_result r;
    cr_assert_eq(parity_judge(a, b, NP, NV, &c, &r), 0);
    cr_expect_geq(r.cosine.min, 0.999999, "cosine is blind to a scale: %g", r.cosine.min);
    cr_expect_leq(r.kld.max, c.max_kld, "KL does not reach its bound: %g", r.kld.max);
    cr_expect_not(r.pass, "a 1%% scale error passed: %s", r.reason);
    cr_expect(strstr(r.reason, "rel-L2") && strstr(r.reason, "position 1"), "%s", r.reason);
    cr_expect_eq(r.first_fail_pos, 10);
    cr_expect_gt(parity_severity(&r), 1.0);
    /* the recorded numbers reach the same verdict (one rule) */
    json_t *m = parity_result_json(&r), *checks = json_array();
    json_t *s =
        json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "positions", NP, "min_cosine",
                  c.min_cosine, "max_mean_kld", c.max_mean_kld, "max_kld", c.max_kld, "near_tie",
                  c.near_tie, "route_tie", c.route_tie, "max_rel_l2", c.max_rel_l2);
    char why[512] = "";
    cr_expect_eq(parity_gate_judge(s, m, checks, why, sizeof why), GATE_FAIL, "%s", why);
    cr_expect_eq(parity_metrics_rejected(s, m, NULL, 0), 1);
    json_decref(checks);
    json_decref(m);
    json_decref(s);
    parity_result_free(&r);
    free(a);
    free(b);
}

Test(parity, one_rule_for_memory_receipt_and_falsify)
{
    /* the same numbers, judged in memory (parity_judge), from the receipt's metrics
     * (parity_gate_judge) and by falsify's predicate (parity_metrics_rejected): one verdict */
    const double scales[] = {1.0, 1.002, 1.01, 0.9};
    for (int k = 0; k < 4; k++) {
        float *a = make_logits(), *b = make_logits();
        for (int v = 0; v < NV; v++)
            b[33 * NV + v] = a[33 * NV + v] * (float)scales[k];
        struct parity_config c = cfg_default();
        struct parity_result r;
        cr_assert_eq(parity_judge(a, b, NP, NV, &c, &r), 0);
        json_t *m = parity_result_json(&r), *checks = json_array();
        json_t *s =
            json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "positions", NP, "min_cosine",
                      c.min_cosine, "max_mean_kld", c.max_mean_kld, "max_kld", c.max_kld,
                      "near_tie", c.near_tie, "route_tie", c.route_tie, "max_rel_l2", c.max_rel_l2);
        char why[512] = "";
        enum gate_verdict v = parity_gate_judge(s, m, checks, why, sizeof why);
        cr_expect_eq(v == GATE_PASS, r.pass, "scale %g: memory %s, receipt %s", scales[k], r.reason,
                     why);
        cr_expect_eq(parity_metrics_rejected(s, m, NULL, 0), !r.pass, "scale %g", scales[k]);
        cr_expect_eq(r.pass, scales[k] < 1.005 && scales[k] > 0.995, "scale %g: %s", scales[k],
                     r.reason);
        json_decref(checks);
        json_decref(m);
        json_decref(s);
        parity_result_free(&r);
        free(a);
        free(b);
    }
}

Test(parity, too_few_positions_and_bad_config_are_input_errors)
{
    float *a = make_logits();
    struct parity_config c = cfg_default();
    struct parity_result r;
    cr_expect_eq(parity_judge(a, a, 63, NV, &c, &r), ERR_INPUT);
    cr_expect_not(r.pass);
    cr_expect(strstr(r.reason, "64"), "%s", r.reason);
    parity_result_free(&r);
    struct gate_err err = {0};
    c.positions = 32;
    cr_expect_eq(parity_config_check(&c, &err), ERR_INPUT);
    c = cfg_default();
    c.min_cosine = NAN;
    cr_expect_eq(parity_judge(a, a, NP, NV, &c, &r), ERR_INPUT);
    cr_expect_not(r.pass);
    parity_result_free(&r);
    free(a);
}

/* ---- on the conformance models ------------------------------------------------------------- */

Test(parity, generated_tokens_are_the_conformance_prompt)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/conformance/qwen3moe-tiny-f32/tokens.txt", check_shared_dir());
    int n = 0;
    int32_t *want = check_read_ids(path, &n);
    cr_assert_not_null(want);
    int32_t got[96];
    mode_tokens(PARITY_TOKEN_SEED, 512, 96, got);
    cr_assert_eq(n, 96);
    for (int i = 0; i < n; i++)
        cr_expect_eq(got[i], want[i], "position %d", i);
    free(want);
}

Test(parity, judge_matches_exact_logits_and_decode_passes)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    struct parity_session *s = NULL;
    struct parity_config c = cfg_default();
    c.positions = 96;
    struct mode mode;
    struct gate_err err = {0};
    cr_assert_eq(mode_parse("ref.decode", &mode, &err), 0);
    struct parity_result r;
    cr_assert_eq(parity_run(m, &mode, NULL, NULL, 0, &c, 2, &r, &err), 0, "%s", err.msg);
    cr_expect(r.pass, "%s", r.reason);
    cr_expect_eq(r.n_pos, 96);
    cr_expect_geq(r.cosine.min, 0.99999);
    parity_result_free(&r);
    (void)s;
    model_free(m);
}

Test(parity, fault_is_rejected_and_localized)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    struct parity_config c = cfg_default();
    struct mode mode;
    struct gate_err err = {0};
    struct fault_set fs = {0};
    struct fault_spec f;
    cr_assert_eq(mode_parse("ref.decode", &mode, &err), 0);
    cr_assert_eq(fault_parse("wrong_expert:layers=1,positions=10-95", &f, &err), 0);
    fault_set_add(&fs, &f, &err);
    struct parity_result r;
    cr_assert_eq(parity_run(m, &mode, &fs, NULL, 0, &c, 2, &r, &err), 0, "%s", err.msg);
    cr_expect_not(r.pass);
    cr_expect_geq(r.first_fail_pos, 10);
    cr_expect(r.localized);
    cr_expect_eq(r.first_bad_layer, 1, "first bad layer %d", r.first_bad_layer);
    cr_expect_eq(r.layers[0].n_diff, 0); /* layer 0 routes as the judge does */
    cr_expect_gt(r.layers[1].n_diff, 0);
    cr_expect_eq(r.layers[1].first_diff_pos, 10);
    cr_expect_geq(r.layers[0].hidden_cosine_min, 0.99999);
    cr_expect_eq(r.n_faults, 1);
    json_t *j = parity_result_json(&r);
    cr_expect_not_null(json_object_get(j, "localization"));
    json_decref(j);
    parity_result_free(&r);
    model_free(m);
}

Test(parity, span_spreads_the_judged_positions_over_the_context_and_reaches_late_faults)
{
    /* issue 22 §5: `positions: 64, span: 200` judges 64 positions spread over 200, the last
     * included; a fault that acts only from position 150 on is judged there (with 96 generated
     * positions it could not even be placed) */
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    struct parity_config c = cfg_default();
    c.span = 200;
    c.seed = 7;
    struct mode mode;
    struct gate_err err = {0};
    cr_assert_eq(mode_parse("ref.decode", &mode, &err), 0);
    struct parity_result r;
    cr_assert_eq(parity_run(m, &mode, NULL, NULL, 0, &c, 2, &r, &err), 0, "%s", err.msg);
    cr_expect(r.pass, "%s", r.reason);
    cr_expect_eq(r.n_pos, 64);
    cr_expect_eq(r.seq_len, 200);
    cr_expect_eq(r.pos[63].position, 199, "the last position is judged");
    cr_expect_gt(r.pos[31].position, 60, "spread, not the first 64: %d", r.pos[31].position);
    for (int i = 1; i < 64; i++)
        cr_expect_gt(r.pos[i].position, r.pos[i - 1].position);
    json_t *j = parity_result_json(&r);
    cr_expect_eq(json_integer_value(json_object_get(j, "sequence_length")), 200);
    cr_expect_eq(json_integer_value(json_array_get(
                     json_object_get(json_object_get(j, "per_position"), "position"), 63)),
                 199);
    json_decref(j);
    parity_result_free(&r);
    struct fault_set fs = {0};
    struct fault_spec f;
    cr_assert_eq(fault_parse("wrong_expert:layers=1,positions=150-199", &f, &err), 0);
    fault_set_add(&fs, &f, &err);
    cr_assert_eq(parity_run(m, &mode, &fs, NULL, 0, &c, 2, &r, &err), 0, "%s", err.msg);
    cr_expect_not(r.pass, "a fault from position 150 on escaped: %s", r.reason);
    parity_result_free(&r);
    /* span shorter than positions is an input error */
    c.span = 60; /* positions is 64 */
    cr_expect_eq(parity_config_check(&c, &err), ERR_INPUT);
    model_free(m);
}

Test(parity, prefill_runs_in_uneven_chunks_that_vary_by_seed)
{
    struct model *m = check_load_case("qwen3-dense-tiny-q8_0");
    struct parity_config c = cfg_default();
    c.positions = 96;
    struct mode mode;
    struct gate_err err = {0};
    cr_assert_eq(mode_parse("cpu.prefill", &mode, &err), 0);
    struct parity_result r, r2;
    c.seed = 1;
    cr_assert_eq(parity_run(m, &mode, NULL, NULL, 0, &c, 2, &r, &err), 0, "%s", err.msg);
    c.seed = 2;
    cr_assert_eq(parity_run(m, &mode, NULL, NULL, 0, &c, 2, &r2, &err), 0, "%s", err.msg);
    cr_expect(r.pass && r2.pass, "%s / %s", r.reason, r2.reason);
    cr_assert_geq(r.n_chunks, 2, "the batched half in more than one call");
    int sum = 0, odd = 0, differ = r.n_chunks != r2.n_chunks;
    for (int i = 0; i < r.n_chunks; i++) {
        sum += r.chunks[i];
        odd += r.chunks[i] % 16 != 0;
        differ |= i < r2.n_chunks && r.chunks[i] != r2.chunks[i];
    }
    cr_expect_eq(sum, 48);
    cr_expect_gt(odd, 0, "a chunk that is not a whole number of 16-token tiles");
    cr_expect(differ, "two seeds, two splits");
    json_t *j = parity_result_json(&r);
    cr_expect_eq(json_array_size(json_object_get(j, "prefill_chunks")), (size_t)r.n_chunks);
    json_decref(j);
    parity_result_free(&r);
    parity_result_free(&r2);
    model_free(m);
}

Test(parity, input_errors)
{
    struct model *moe = check_load_case("qwen3moe-tiny-f32");
    struct model *dense = check_load_case("qwen3-dense-tiny-f32");
    struct parity_config c = cfg_default();
    struct mode mode;
    struct gate_err err = {0};
    struct parity_result r;
    cr_assert_eq(mode_parse("ref.decode", &mode, &err), 0);
    c.positions = 63;
    cr_expect_eq(parity_run(moe, &mode, NULL, NULL, 0, &c, 2, &r, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "64"), "%s", err.msg);
    c = cfg_default();
    struct fault_set fs = {0};
    struct fault_spec f;
    cr_assert_eq(fault_parse("wrong_expert", &f, &err), 0);
    fault_set_add(&fs, &f, &err);
    err_clear(&err);
    cr_expect_eq(parity_run(dense, &mode, &fs, NULL, 0, &c, 2, &r, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "dense"), "%s", err.msg);
    int32_t bad[64] = {0};
    bad[5] = 100000;
    err_clear(&err);
    cr_expect_eq(parity_run(moe, &mode, NULL, bad, 64, &c, 2, &r, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "position 5"), "%s", err.msg);
    struct mode cuda;
    cr_assert_eq(mode_parse("cuda.decode", &cuda, &err), 0);
    err_clear(&err);
    if (!backend_find("cuda")) {
        cr_expect_eq(parity_run(moe, &cuda, NULL, NULL, 0, &c, 2, &r, &err), ERR_ENV);
        cr_expect(strstr(err.msg, "cannot run on this host"), "%s", err.msg);
    }
    model_free(moe);
    model_free(dense);
}
