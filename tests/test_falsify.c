/* test_falsify.c — the falsify gate on the tiny MoE conformance model with the ref backend:
 * every fault at all layers is rejected with a witness; single-layer single-position faults
 * are rejected or reported by the sweep; faults that cannot fire or name missing layers are
 * errors; a deliberately loose threshold lets faults escape and the gate then FAILS.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracles/falsify.h"
#include "support/check.h"


static struct fault_set faults_of(const char *const *specs, int n)
{
    struct fault_set fs = {0};
    struct gate_err err = {0};
    for (int i = 0; i < n; i++) {
        struct fault_spec f;
        cr_assert_eq(fault_parse(specs[i], &f, &err), 0, "%s", err.msg);
        cr_assert_eq(fault_set_add(&fs, &f, &err), 0);
    }
    return fs;
}

/* 64 positions (the minimum) keep each run short; the conformance prompt's first 64 ids */
static const int32_t *seq64(void)
{
    static int32_t ids[64];
    mode_tokens(PARITY_TOKEN_SEED, 512, 64, ids);
    return ids;
}

static struct mode ref_mode(const char *text)
{
    struct mode m;
    struct gate_err err = {0};
    cr_assert_eq(mode_parse(text, &m, &err), 0);
    return m;
}

Test(falsify, every_fault_at_all_layers_is_rejected)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    struct fault_set fs;
    falsify_default_faults(m, &fs);
    cr_assert_eq(fs.n, 4);
    struct falsify_config cfg;
    falsify_config_default(&cfg);
    struct mode mode = ref_mode("ref.decode");
    struct falsify_result r;
    struct gate_err err = {0};
    cr_assert_eq(falsify_run(m, &mode, &fs, seq64(), 64, &cfg, 2, &r, &err), 0, "%s", err.msg);
    cr_expect(r.pass, "%s", r.reason);
    cr_expect(r.clean.pass, "%s", r.clean.reason);
    cr_assert_eq(r.n, 4);
    for (int i = 0; i < r.n; i++) {
        cr_expect(r.f[i].fired, "%s did not fire", r.f[i].name);
        cr_expect(r.f[i].rejected, "%s escaped: %s", r.f[i].name, r.f[i].metric);
        cr_expect(strstr(r.f[i].metric, "FAIL: "), "%s: %s", r.f[i].name, r.f[i].metric);
        cr_expect_lt(r.f[i].parity.cosine.min, 0.999);
        cr_expect(r.f[i].parity.localized);
        if (fault_is_routing(r.f[i].spec.kind))
            cr_expect_gt(r.f[i].witness.n_route_diff, 0);
        else /* position 0 attends to itself alone: the Q/K norm changes nothing there */
            cr_expect_eq(r.f[i].witness.pos, 1);
    }
    json_t *j = falsify_result_json(&r);
    cr_expect_eq(json_array_size(json_object_get(j, "faults")), 4);
    cr_expect_str_eq(json_string_value(json_object_get(j, "verdict")), "PASS");
    json_decref(j);
    falsify_result_free(&r);
    model_free(m);
}

Test(falsify, rejected_on_the_chat_path_too)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    const char *specs[] = {"skip_qk_norm:layers=1"};
    struct fault_set fs = faults_of(specs, 1);
    struct falsify_config cfg;
    falsify_config_default(&cfg);
    struct mode mode = ref_mode("ref.chat");
    struct falsify_result r;
    struct gate_err err = {0};
    /* supplied tokens on the chat path: six equal turns (the full conversation is exercised in
     * test_mode.c; here the point is the fault on a multi-turn cache) */
    cr_assert_eq(falsify_run(m, &mode, &fs, seq64(), 64, &cfg, 2, &r, &err), 0, "%s", err.msg);
    cr_expect(r.pass, "%s", r.reason);
    falsify_result_free(&r);
    model_free(m);
}

Test(falsify, single_layer_single_position_rejected_or_reported)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    struct falsify_config cfg;
    falsify_config_default(&cfg);
    cfg.n_clean = 2;
    struct mode mode = ref_mode("ref.decode");
    struct gate_err err = {0};
    /* one fault, one layer, one position: rejected */
    const char *one[] = {"wrong_expert:layers=1,positions=10"};
    struct fault_set fs = faults_of(one, 1);
    struct falsify_result r;
    cr_assert_eq(falsify_run(m, &mode, &fs, seq64(), 64, &cfg, 2, &r, &err), 0, "%s", err.msg);
    cr_expect(r.pass, "%s", r.reason);
    cr_expect_eq(r.f[0].witness.layer, 1);
    cr_expect_eq(r.f[0].witness.pos, 10);
    cr_expect_eq(r.f[0].witness.n_route_diff, 1);
    cr_expect_eq(r.f[0].parity.first_fail_pos, 10);
    falsify_result_free(&r);
    /* the sweep over a window: every injection is accounted for, every escape is listed */
    const char *kinds[] = {"wrong_expert:positions=5-6", "dropped_expert:positions=5-6",
                           "uniform_weights:positions=5-6", "skip_qk_norm:positions=5-6"};
    struct fault_set ks = faults_of(kinds, 4);
    const int asan = getenv("GATE_ASAN") != NULL; /* sanitizer builds run ~10x slower */
    for (int i = 0; asan && i < 4; i++)
        ks.f[i].pos_hi = 5;
    cfg.n_clean = asan ? 1 : 2;
    struct sweep_result s;
    cr_assert_eq(falsify_sweep(m, &mode, &ks, seq64(), 64, &cfg, 2, &s, &err), 0, "%s", err.msg);
    cr_expect_eq(s.n_clean, asan ? 1 : 2);
    cr_expect_eq(s.noise_severity, 0.0); /* ref.decode reproduces the judge bit for bit */
    cr_expect(isinf(s.separation));
    for (int i = 0; i < 4; i++) {
        const struct sweep_kind *k = &s.k[i];
        cr_expect_eq(k->n_injected, 2 * (asan ? 1 : 2), "%s", k->name);
        cr_expect_eq(k->n_detected + k->n_escaped + k->n_not_fired, k->n_injected);
        cr_expect_eq(k->n_escapes_listed, k->n_escaped);
        cr_expect_eq(k->n_not_fired, 0, "%s", k->name);
        if (k->spec.kind != FAULT_UNIFORM_WEIGHTS)
            cr_expect_eq(k->n_detected, k->n_injected, "%s: %d escaped", k->name, k->n_escaped);
        if (k->n_escaped)
            cr_expect(s.threshold_above_weakest);
    }
    cr_expect_eq(s.pass, !s.threshold_above_weakest);
    json_t *j = sweep_result_json(&s);
    cr_expect_eq(json_array_size(json_object_get(j, "kinds")), 4);
    json_t *sev = json_object_get(json_object_get(j, "noise_ceiling"), "severity");
    cr_expect(json_is_real(sev) && json_real_value(sev) == 0.0);
    cr_expect_str_eq(json_string_value(json_object_get(j, "separation")), "Inf");
    json_decref(j);
    model_free(m);
}

Test(falsify, routing_fault_on_dense_model_is_an_error)
{
    struct model *m = check_load_case("qwen3-dense-tiny-f32");
    const char *specs[] = {"wrong_expert"};
    struct fault_set fs = faults_of(specs, 1);
    struct falsify_config cfg;
    falsify_config_default(&cfg);
    struct mode mode = ref_mode("ref.decode");
    struct falsify_result r;
    struct gate_err err = {0};
    cr_expect_eq(falsify_run(m, &mode, &fs, seq64(), 64, &cfg, 2, &r, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "cannot fire"), "%s", err.msg);
    cr_expect_not(r.pass);
    falsify_result_free(&r);
    /* what does apply to a dense model: skip_qk_norm, rejected */
    falsify_default_faults(m, &fs);
    cr_assert_eq(fs.n, 1);
    cr_expect_eq(fs.f[0].kind, FAULT_SKIP_QK_NORM);
    err_clear(&err);
    cr_assert_eq(falsify_run(m, &mode, &fs, seq64(), 64, &cfg, 2, &r, &err), 0, "%s", err.msg);
    cr_expect(r.pass, "%s", r.reason);
    falsify_result_free(&r);
    model_free(m);
}

Test(falsify, missing_scope_or_empty_list_is_a_validation_error)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    struct falsify_config cfg;
    falsify_config_default(&cfg);
    struct mode mode = ref_mode("ref.decode");
    struct falsify_result r;
    struct gate_err err = {0};
    const char *l5[] = {"dropped_expert:layers=5"};
    struct fault_set fs = faults_of(l5, 1);
    cr_expect_eq(falsify_run(m, &mode, &fs, seq64(), 64, &cfg, 2, &r, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "does not exist"), "%s", err.msg);
    falsify_result_free(&r);
    const char *l1_3[] = {"skip_qk_norm:layers=1-3"};
    fs = faults_of(l1_3, 1);
    err_clear(&err);
    cr_expect_eq(falsify_run(m, &mode, &fs, seq64(), 64, &cfg, 2, &r, &err), ERR_INPUT);
    falsify_result_free(&r);
    const char *rank[] = {"wrong_expert:rank=2"};
    fs = faults_of(rank, 1);
    err_clear(&err);
    cr_expect_eq(falsify_run(m, &mode, &fs, seq64(), 64, &cfg, 2, &r, &err), ERR_INPUT);
    falsify_result_free(&r);
    const char *pos[] = {"uniform_weights:positions=64-99"};
    fs = faults_of(pos, 1);
    err_clear(&err);
    cr_expect_eq(falsify_run(m, &mode, &fs, seq64(), 64, &cfg, 2, &r, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "position scope"), "%s", err.msg);
    falsify_result_free(&r);
    struct fault_set none = {0};
    err_clear(&err);
    cr_expect_eq(falsify_run(m, &mode, &none, seq64(), 64, &cfg, 2, &r, &err), ERR_INPUT);
    falsify_result_free(&r);
    model_free(m);
}

Test(falsify, loose_threshold_lets_faults_escape_and_the_gate_fails)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    const char *two[] = {"dropped_expert", "skip_qk_norm"};
    struct fault_set fs = faults_of(two, 2);
    struct falsify_config cfg;
    falsify_config_default(&cfg);
    cfg.parity.min_cosine = 0.0;
    cfg.parity.max_kld = 1e9;
    cfg.parity.max_mean_kld = 1e9;
    cfg.parity.near_tie = 1e9; /* every argmax flip excused as a "near tie" */
    struct mode mode = ref_mode("ref.decode");
    struct falsify_result r;
    struct gate_err err = {0};
    cr_assert_eq(falsify_run(m, &mode, &fs, seq64(), 64, &cfg, 2, &r, &err), 0, "%s", err.msg);
    cr_expect_not(r.pass, "a blind oracle passed: %s", r.reason);
    cr_expect(strstr(r.reason, "escaped"), "%s", r.reason);
    for (int i = 0; i < r.n; i++) {
        cr_expect(r.f[i].fired);
        cr_expect_not(r.f[i].rejected, "%s", r.f[i].name);
        cr_expect_not(r.f[i].pass);
    }
    falsify_result_free(&r);
    /* the sweep says so loudly */
    cfg.n_clean = 1;
    const char *kinds[] = {"dropped_expert:layers=1,positions=20"};
    struct fault_set ks = faults_of(kinds, 1);
    struct sweep_result s;
    cr_assert_eq(falsify_sweep(m, &mode, &ks, seq64(), 64, &cfg, 2, &s, &err), 0, "%s", err.msg);
    cr_expect_eq(s.k[0].n_escaped, 1);
    cr_expect(s.threshold_above_weakest);
    cr_expect_not(s.pass);
    cr_expect(strstr(s.warning, "ABOVE THE WEAKEST FAULT"), "%s", s.warning);
    model_free(m);
}

Test(falsify, witness_says_no_when_nothing_was_injected)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    struct parity_config c;
    parity_config_default(&c);
    struct mode mode = ref_mode("ref.prefill");
    struct parity_session *s = NULL;
    struct gate_err err = {0};
    cr_assert_eq(parity_session_open(&s, m, &mode, NULL, 0, &c, 2, 1, &err), 0, "%s", err.msg);
    struct parity_result r;
    struct parity_witness w;
    cr_assert_eq(parity_session_run(s, NULL, NULL, 1, &r, &err), 0, "%s", err.msg);
    cr_expect(r.pass);
    parity_result_free(&r);
    cr_assert_eq(parity_session_witness(s, FAULT_WRONG_EXPERT, &w, &err), 0, "%s", err.msg);
    cr_expect_not(w.fired);
    cr_expect_eq(w.n_route_diff, 0);
    cr_expect_eq(w.n_hidden_diff, 0);
    /* a fault in the second half (decoded on the prefill path) fires and is seen there */
    const char *late[] = {"uniform_weights:layers=0,positions=80-90"};
    struct fault_set fs = faults_of(late, 1);
    cr_assert_eq(parity_session_run(s, &fs, NULL, 1, &r, &err), 0, "%s", err.msg);
    cr_assert_eq(parity_session_witness(s, FAULT_UNIFORM_WEIGHTS, &w, &err), 0, "%s", err.msg);
    cr_expect(w.fired);
    cr_expect_eq(w.layer, 0);
    cr_expect_eq(w.pos, 80);
    parity_result_free(&r);
    parity_session_close(s);
    model_free(m);
}
