/* test_anchor.c — the anchor gate (issue 10 §1): the judge itself against an engine that is not
 * gate.
 *
 * The oracle on every conformance case (the correct twin PASSes, within 1.5x its measured NMSE and
 * 3x its cosine), pins that do not match, the parity math on small hand-made logits (near ties,
 * clear flips, NaN), the NMSE and cosine on vectors whose values are known by hand, anchor_judge()
 * from settings + metrics alone and just past / just inside each of its bounds, the ladder's
 * `anchors` / `unanchored` sections (strict, file:line:col), the coverage rule (every gated
 * architecture anchored or excused with a reason), the signed anchor receipt (run_anchor_payload),
 * and the demo ladder's anchors pinning the shared files. The broken twin is
 * tests/test_broken_twin.c.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/gatedef.h"
#include "harness/identity.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "oracles/anchor.h"
#include "receipts/key.h"
#include "receipts/store.h"
#include "tests/support/check.h"
#include "tests/support/conformance.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static const char *sha_of(const char *path)
{
    static char buf[8][65];
    static int k;
    k = (k + 1) % 8;
    struct gate_err err = {0};
    cr_assert_eq(identity_file_sha256(path, buf[k], &err), 0, "%s", err.msg);
    return buf[k];
}

/* The exact-reference anchor of conformance case c (float64 logits, exact greedy after 16). */
struct spec_buf {
    struct anchor_spec s;
    char sha[4][65];
    char path[4][1400];
};

static void exact_spec(struct spec_buf *b, const char *c, const char *arch)
{
    static const char *const files[] = {"model.gguf", "tokens.txt", "logits_exact.f32",
                                        "greedy_exact.txt"};
    memset(b, 0, sizeof *b);
    for (int i = 0; i < 4; i++) {
        snprintf(b->path[i], sizeof b->path[i], "%s", conformance_path(c, files[i]));
        snprintf(b->sha[i], sizeof b->sha[i], "%s", sha_of(b->path[i]));
    }
    b->s.id = c;
    b->s.arch = arch;
    b->s.model = (struct anchor_file){b->path[0], b->sha[0]};
    b->s.tokens = (struct anchor_file){b->path[1], b->sha[1]};
    b->s.logits = (struct anchor_file){b->path[2], b->sha[2]};
    b->s.greedy = (struct anchor_file){b->path[3], b->sha[3]};
    b->s.greedy_after = 16;
    b->s.max_nmse = 1e-8;
    b->s.min_cosine = 0.999999;
    b->s.near_tie = 1e-3;
}

static double num(const json_t *o, const char *k)
{
    double v = NAN;
    cr_assert_eq(gate_metric_num(o, k, &v), 0, "metric '%s' missing", k);
    return v;
}

/* ---- the oracle on the conformance cases ----------------------------------------------------- */

/* The twin's measured noise against the float64 evaluation: the worst over the six conformance
 * cases, 2026-12-02 at cb2af35 (NMSE 6.8e-14 .. 7.0e-14, 1 - min cosine 5.2e-14 .. 9.5e-14: the
 * float32 rounding of the logits themselves). The anchors' own threshold (max_nmse 1e-8) is for a
 * judge on another machine and a larger model; this test holds the twin here to what it
 * measurably does. The twin's reductions run in a fixed order with machine-independent exp/sin
 * (detmath), so these figures are the same bits on every host, ISA and build type (checked
 * 2026-12-02: the RelWithDebInfo and the ASan Debug builds print identical values on an AVX2 host,
 * as the AVX-512 host did the day before); what separates the cases is only their content.
 * The factors are stated, not fitted to a host:
 * - the NMSE, a mean over every logit of every position, spreads 3 % across the cases: 1.5x its
 *   worst leaves 15x that spread, and fails a twin whose RMSNorm sums its squares in float rather
 *   than double (NMSE 1.21e-13 .. 1.34e-13, mutant twin-rmsnorm-float-sum), which 3x (and the
 *   old 1e-10) let through;
 * - 1 - min cosine, a worst position, spreads 1.8x across the cases: 3x.
 * An extra rounding of an intermediate to half precision moves both by orders of magnitude. */
#define TWIN_NMSE 7.1e-14
#define TWIN_ONE_MINUS_COS 9.6e-14
#define TWIN_NMSE_FACTOR 1.5
#define TWIN_COS_FACTOR 3.0

Test(anchor, the_correct_twin_passes_every_conformance_case, .timeout = 1200)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/conformance", check_shared_dir());
    DIR *d = opendir(dir);
    cr_assert(d, "cannot open %s", dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strstr(e->d_name, "tiny"))
            continue;
        const char *arch = !strncmp(e->d_name, "qwen3moe", 8) ? "qwen3moe" : "qwen3";
        struct spec_buf b;
        exact_spec(&b, e->d_name, arch);
        struct gate_err err = {0};
        json_t *m = NULL;
        cr_assert_eq(anchor_run(&b.s, 2, &m, &err), 0, "%s: %s", e->d_name, err.msg);
        json_t *settings = anchor_settings_json(&b.s), *checks = json_array();
        char why[512];
        enum gate_verdict v = anchor_judge(settings, m, checks, why, sizeof why);
        cr_expect_eq(v, GATE_PASS, "%s: %s", e->d_name, why);
        /* the measured noise times the stated factors (above) */
        cr_expect_leq(num(m, "nmse"), TWIN_NMSE_FACTOR * TWIN_NMSE,
                      "%s: NMSE %.3g > %g x the measured %.3g", e->d_name, num(m, "nmse"),
                      TWIN_NMSE_FACTOR, TWIN_NMSE);
        cr_expect_leq(1.0 - num(m, "min_cosine"), TWIN_COS_FACTOR * TWIN_ONE_MINUS_COS,
                      "%s: 1 - min cosine %.3g > %g x the measured %.3g", e->d_name,
                      1.0 - num(m, "min_cosine"), TWIN_COS_FACTOR, TWIN_ONE_MINUS_COS);
        cr_expect_eq(num(m, "n_wrong"), 0, "%s", e->d_name);
        cr_expect_eq(num(m, "greedy_matched"), num(m, "greedy_expected"), "%s", e->d_name);
        cr_expect_geq(num(m, "greedy_expected"), 32, "%s", e->d_name);
        cr_expect_str_eq(json_string_value(json_object_get(m, "backend")), "ref");
        printf("anchor %-24s NMSE %.3e, 1 - min cosine %.3e, %g/%g greedy ids\n", e->d_name,
               num(m, "nmse"), 1.0 - num(m, "min_cosine"), num(m, "greedy_matched"),
               num(m, "greedy_expected"));
        json_decref(settings);
        json_decref(checks);
        json_decref(m);
        n++;
    }
    closedir(d);
    cr_expect_geq(n, 6, "expected the six conformance cases under %s", dir);
}

Test(anchor, a_file_that_is_not_the_pinned_one_is_an_input_error)
{
    struct spec_buf b;
    exact_spec(&b, "qwen3-dense-tiny-q4_k_m", "qwen3");
    /* llama.cpp's logits in place of the exact ones, with the exact file's pin */
    snprintf(b.path[2], sizeof b.path[2], "%s",
             conformance_path("qwen3-dense-tiny-q4_k_m", "logits.f32"));
    struct gate_err err = {0};
    json_t *m = NULL;
    cr_expect_eq(anchor_run(&b.s, 1, &m, &err), ERR_INPUT);
    cr_expect_null(m);
    cr_expect(strstr(err.msg, "anchor 'qwen3-dense-tiny-q4_k_m'") && strstr(err.msg, "logits") &&
                  strstr(err.msg, b.sha[2]),
              "%s", err.msg);
    /* the architecture is checked against the model, not believed */
    exact_spec(&b, "qwen3-dense-tiny-q4_k_m", "qwen3moe");
    err_clear(&err);
    cr_expect_eq(anchor_run(&b.s, 1, &m, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "is qwen3 but the ladder says it anchors qwen3moe"), "%s", err.msg);
}

/* ---- the parity math on hand-made logits ---------------------------------------------------- */

#define NP 64
#define NV 8

static void fill(float *x)
{
    for (int p = 0; p < NP; p++)
        for (int i = 0; i < NV; i++)
            x[p * NV + i] = (float)((p * 7 + i * 3) % NV) - 3.0f; /* distinct, top gap 1 */
}

Test(anchor, logit_metrics_classify_near_ties_clear_flips_and_nan)
{
    static float ref[NP * NV], twin[NP * NV];
    fill(ref);
    fill(twin);
    struct gate_err err = {0};
    json_t *m = json_object();
    cr_assert_eq(anchor_logit_metrics(ref, twin, NP, NV, 1e-3, m, &err), 0, "%s", err.msg);
    cr_expect_eq(num(m, "nmse"), 0);
    cr_expect_eq(num(m, "n_match"), NP);
    json_decref(m);
    /* position 3: the reference's top two 0.0005 apart, the twin picks the second: a near tie */
    int top = 0, second = 0;
    for (int i = 0; i < NV; i++)
        if (ref[3 * NV + i] > ref[3 * NV + top])
            top = i;
    second = top == 0 ? 1 : 0;
    for (int i = 0; i < NV; i++)
        if (i != top && ref[3 * NV + i] > ref[3 * NV + second])
            second = i;
    ref[3 * NV + second] = ref[3 * NV + top] - 0.0005f;
    memcpy(twin, ref, sizeof ref);
    twin[3 * NV + second] = ref[3 * NV + top] + 0.0005f;
    /* position 9: a clear flip (reference margin 1) */
    int t9 = 0;
    for (int i = 0; i < NV; i++)
        if (ref[9 * NV + i] > ref[9 * NV + t9])
            t9 = i;
    twin[9 * NV + (t9 + 1) % NV] = ref[9 * NV + t9] + 2.0f;
    m = json_object();
    cr_assert_eq(anchor_logit_metrics(ref, twin, NP, NV, 1e-3, m, &err), 0, "%s", err.msg);
    cr_expect_eq(num(m, "n_tie_flip"), 1);
    cr_expect_eq(num(m, "n_wrong"), 1);
    cr_expect_eq(num(m, "first_wrong_pos"), 9);
    cr_expect_gt(num(m, "nmse"), 0);
    json_decref(m);
    /* a NaN in the twin: non-finite, recorded as strings, never a silent comparison */
    twin[20 * NV + 2] = NAN;
    m = json_object();
    cr_assert_eq(anchor_logit_metrics(ref, twin, NP, NV, 1e-3, m, &err), 0, "%s", err.msg);
    cr_expect_eq(num(m, "n_nonfinite"), 1);
    cr_expect_eq(num(m, "first_nonfinite_pos"), 20);
    cr_expect_str_eq(json_string_value(json_object_get(m, "nmse")), "NaN");
    json_decref(m);
    /* fewer positions than the parity math judges */
    m = json_object();
    cr_expect_eq(anchor_logit_metrics(ref, twin, 16, NV, 1e-3, m, &err), ERR_INPUT);
    json_decref(m);
}

/* The NMSE and the cosine on vectors whose values are known by hand: every row of fill() is a
 * permutation of -3 .. 4, so sum r^2 = 44 per row, 2816 over the 64 rows. */
Test(anchor, nmse_and_cosine_are_the_hand_computed_values_on_known_vectors)
{
    static float ref[NP * NV], twin[NP * NV];
    fill(ref);
    memcpy(twin, ref, sizeof twin);
    int zero = -1; /* position 5's logit 0: raised by 0.5 */
    for (int i = 0; i < NV; i++)
        if (ref[5 * NV + i] == 0.0f)
            zero = i;
    cr_assert_geq(zero, 0);
    twin[5 * NV + zero] = 0.5f;
    struct gate_err err = {0};
    json_t *m = json_object();
    cr_assert_eq(anchor_logit_metrics(ref, twin, NP, NV, 1e-3, m, &err), 0, "%s", err.msg);
    /* sum (t - r)^2 / sum r^2 = 0.25 / 2816 (against the reference's energy, not the twin's:
     * 0.25 / 2816.25 would be off by 9e-5) */
    cr_expect_float_eq(num(m, "nmse"), 0.25 / 2816.0, 1e-12 * 0.25 / 2816.0, "nmse %.12g",
                       num(m, "nmse"));
    /* t . r = 44, |t|^2 = 44.25: cos = sqrt(44 / 44.25) at position 5 */
    cr_expect_float_eq(num(m, "min_cosine"), sqrt(44.0 / 44.25), 1e-12, "min cosine %.12g",
                       num(m, "min_cosine"));
    cr_expect_eq(num(m, "min_cosine_pos"), 5);
    cr_expect_eq(num(m, "max_abs_diff"), 0.5);
    json_decref(m);
    /* twice the reference everywhere: NMSE exactly 1, every cosine exactly 1 (blind to a scale) */
    for (int i = 0; i < NP * NV; i++)
        twin[i] = 2.0f * ref[i];
    m = json_object();
    cr_assert_eq(anchor_logit_metrics(ref, twin, NP, NV, 1e-3, m, &err), 0, "%s", err.msg);
    cr_expect_eq(num(m, "nmse"), 1.0, "nmse %.12g", num(m, "nmse"));
    cr_expect_float_eq(num(m, "min_cosine"), 1.0, 1e-15);
    cr_expect_eq(num(m, "max_abs_diff"), 4.0);
    json_decref(m);
}

/* settings_ok() / metrics_ok(): below */
static json_t *settings_ok(void);
static json_t *metrics_ok(void);
static enum gate_verdict judge(json_t *s, json_t *m, char *why, size_t n);

/* The broken twin lands at NMSE 1e-2, six decades past max_nmse 1e-8: these cases land 2 % past
 * each of the anchor's bounds and 2 % inside it, by the logits they compare (anchor_logit_metrics)
 * and then the judge (anchor_judge, with the demo's thresholds: max_nmse 1e-8, min cosine
 * 0.999999). */
Test(anchor, the_judge_fails_just_past_each_bound_and_passes_just_inside_it)
{
    static const double past[] = {1.02, 0.98}; /* x the bound: FAIL, then PASS */
    static float ref[NP * NV], twin[NP * NV];
    char why[512];
    for (int k = 0; k < 2; k++) {
        /* max_nmse: every logit scaled by 1 + e, NMSE = e^2 (the cosine stays 1) */
        fill(ref);
        const double e = sqrt(past[k] * 1e-8);
        for (int i = 0; i < NP * NV; i++)
            twin[i] = (float)(ref[i] * (1.0 + e));
        struct gate_err err = {0};
        json_t *lm = json_object();
        cr_assert_eq(anchor_logit_metrics(ref, twin, NP, NV, 1e-3, lm, &err), 0, "%s", err.msg);
        cr_expect_float_eq(num(lm, "nmse"), past[k] * 1e-8, 5e-3 * 1e-8, "nmse %.6g",
                           num(lm, "nmse"));
        json_t *m = metrics_ok();
        json_object_set(m, "nmse", json_object_get(lm, "nmse"));
        json_object_set(m, "min_cosine", json_object_get(lm, "min_cosine"));
        json_decref(lm);
        cr_expect_eq(judge(settings_ok(), m, why, sizeof why), k ? GATE_PASS : GATE_FAIL,
                     "NMSE at %.2f x max_nmse: %s", past[k], why);
        if (!k)
            cr_expect(strstr(why, "nmse"), "%s", why);
        /* min_cosine: position 7 (its logits / 100, so its share of the NMSE stays ~1e-12)
         * turned away from the reference's row: u = r_b e_a - r_a e_b is orthogonal to r, and
         * cos = 1 / sqrt(1 + d^2 |u|^2 / |r|^2) */
        fill(ref);
        for (int i = 0; i < NV; i++)
            ref[7 * NV + i] /= 100.0f;
        memcpy(twin, ref, sizeof twin);
        const float *r = ref + 7 * NV;
        int a = 0, b = 1; /* its two smallest logits: the argmax stays */
        for (int i = 0; i < NV; i++)
            a = r[i] < r[a] ? i : a;
        b = a == 0 ? 1 : 0;
        for (int i = 0; i < NV; i++)
            b = i != a && r[i] < r[b] ? i : b;
        const double target = 1.0 - past[k] * (1.0 - 0.999999);
        double nr = 0;
        for (int i = 0; i < NV; i++)
            nr += (double)r[i] * r[i];
        const double d = sqrt((1.0 / (target * target) - 1.0) * nr /
                              ((double)r[a] * r[a] + (double)r[b] * r[b]));
        twin[7 * NV + a] = (float)(r[a] + d * r[b]);
        twin[7 * NV + b] = (float)(r[b] - d * r[a]);
        lm = json_object();
        cr_assert_eq(anchor_logit_metrics(ref, twin, NP, NV, 1e-3, lm, &err), 0, "%s", err.msg);
        cr_expect_float_eq(1.0 - num(lm, "min_cosine"), past[k] * 1e-6, 1e-3 * 1e-6, "1 - cos %.6g",
                           1.0 - num(lm, "min_cosine"));
        cr_expect_lt(num(lm, "nmse"), 1e-10, "the cosine case moved the NMSE: %g", num(lm, "nmse"));
        cr_expect_eq(num(lm, "n_wrong"), 0);
        m = metrics_ok();
        json_object_set(m, "nmse", json_object_get(lm, "nmse"));
        json_object_set(m, "min_cosine", json_object_get(lm, "min_cosine"));
        json_decref(lm);
        cr_expect_eq(judge(settings_ok(), m, why, sizeof why), k ? GATE_PASS : GATE_FAIL,
                     "cosine at %.2f x (1 - min_cosine): %s", past[k], why);
        if (!k)
            cr_expect(strstr(why, "cosine"), "%s", why);
    }
}

/* ---- the judge from settings + metrics ------------------------------------------------------ */

static json_t *settings_ok(void)
{
    return json_pack("{s:s, s:f, s:f, s:f, s:s, s:s, s:s, s:s, s:i}", "arch", "qwen3", "max_nmse",
                     1e-8, "min_cosine", 0.999999, "near_tie", 1e-3, "model_sha256", "aa",
                     "tokens_sha256", "bb", "logits_sha256", "cc", "greedy_sha256", "dd",
                     "greedy_after", 16);
}

static json_t *metrics_ok(void)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:f, s:f, s:i, s:i, s:i, s:i, s:i,"
                     " s:i}",
                     "backend", "ref", "arch", "qwen3", "model_sha256", "aa", "tokens_sha256", "bb",
                     "logits_sha256", "cc", "greedy_sha256", "dd", "n_pos", 96, "n_vocab", 512,
                     "nmse", 7e-14, "min_cosine", 0.9999999999, "n_nonfinite", 0, "n_wrong", 0,
                     "greedy_after", 16, "greedy_expected", 32, "greedy_matched", 32, "n_tie_flip",
                     0);
}

static enum gate_verdict judge(json_t *s, json_t *m, char *why, size_t n)
{
    json_t *checks = json_array();
    enum gate_verdict v = anchor_judge(s, m, checks, why, n);
    /* every judged quantity is a check, and a verdict follows from the checks */
    size_t i;
    json_t *c;
    int all = json_array_size(checks) > 0;
    json_array_foreach(checks, i, c) all &= json_is_true(json_object_get(c, "pass"));
    cr_expect_eq(all, v == GATE_PASS, "checks and verdict disagree (%s)", why);
    json_decref(checks);
    json_decref(s);
    json_decref(m);
    return v;
}

Test(anchor, the_judge_derives_the_verdict_from_settings_and_metrics)
{
    char why[512];
    cr_expect_eq(judge(settings_ok(), metrics_ok(), why, sizeof why), GATE_PASS, "%s", why);
    cr_expect_str_eq(why, "");

    json_t *m = metrics_ok();
    json_object_set_new(m, "nmse", json_real(0.12));
    cr_expect_eq(judge(settings_ok(), m, why, sizeof why), GATE_FAIL);
    cr_expect(strstr(why, "the judge itself is wrong") && strstr(why, "nmse 0.12"), "%s", why);

    m = metrics_ok();
    json_object_set_new(m, "nmse", json_string("NaN"));
    cr_expect_eq(judge(settings_ok(), m, why, sizeof why), GATE_FAIL, "NaN must never pass");

    m = metrics_ok();
    json_object_del(m, "min_cosine");
    cr_expect_eq(judge(settings_ok(), m, why, sizeof why), GATE_FAIL);
    cr_expect(strstr(why, "'min_cosine' is missing"), "%s", why);

    m = metrics_ok();
    json_object_set_new(m, "n_wrong", json_integer(1));
    cr_expect_eq(judge(settings_ok(), m, why, sizeof why), GATE_FAIL);

    m = metrics_ok(); /* compared with another logits file than the ladder pins */
    json_object_set_new(m, "logits_sha256", json_string("ee"));
    cr_expect_eq(judge(settings_ok(), m, why, sizeof why), GATE_FAIL);
    cr_expect(strstr(why, "logits_sha256"), "%s", why);

    m = metrics_ok(); /* the greedy continuation was declared but not decoded */
    json_object_del(m, "greedy_matched");
    cr_expect_eq(judge(settings_ok(), m, why, sizeof why), GATE_FAIL);

    m = metrics_ok();
    json_object_set_new(m, "greedy_matched", json_integer(31));
    cr_expect_eq(judge(settings_ok(), m, why, sizeof why), GATE_FAIL);
    cr_expect(strstr(why, "greedy"), "%s", why);

    m = metrics_ok(); /* the judge ran on something else than the reference twin */
    json_object_set_new(m, "backend", json_string("cuda"));
    cr_expect_eq(judge(settings_ok(), m, why, sizeof why), GATE_FAIL);

    m = metrics_ok();
    json_object_set_new(m, "n_pos", json_integer(16));
    cr_expect_eq(judge(settings_ok(), m, why, sizeof why), GATE_FAIL);

    json_t *s = settings_ok(); /* no greedy file declared: no greedy checks needed */
    json_object_set_new(s, "greedy_sha256", json_string(""));
    json_object_set_new(s, "greedy_after", json_integer(0));
    m = metrics_ok();
    json_object_del(m, "greedy_matched");
    cr_expect_eq(judge(s, m, why, sizeof why), GATE_PASS, "%s", why);

    s = settings_ok(); /* settings without thresholds cannot judge anything */
    json_object_del(s, "max_nmse");
    cr_expect_eq(judge(s, metrics_ok(), why, sizeof why), GATE_FAIL);

    /* the gate table's row judges the same way (what gate run and the release check call) */
    json_t *checks = NULL;
    m = metrics_ok();
    json_object_set_new(m, "nmse", json_real(0.12));
    s = settings_ok();
    cr_expect_eq(gatedef_judge("anchor", RUN_ANCHOR_MODE, s, m, &checks, why, sizeof why),
                 GATE_FAIL);
    cr_expect(strstr(why, "the judge itself is wrong"), "%s", why);
    json_decref(checks);
    json_decref(s);
    json_decref(m);
}

/* ---- the ladder section --------------------------------------------------------------------- */

static char tmp[700];

static const char *tpath(const char *name)
{
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    if (!tmp[0]) {
        snprintf(tmp, sizeof tmp, "%s/anchorXXXXXX", check_tmp_dir());
        cr_assert(mkdtemp(tmp));
    }
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmp, name);
    return buf[k];
}

#define DENSE "qwen3-dense-tiny-q4_k_m"
#define MOE_SHA "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560"

/* A ladder gating the MoE conformance model on one host, plus `tail` (anchors etc.). */
static const char *ladder_with(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *ladder_with(const char *fmt, ...)
{
    static int k;
    char name[64];
    snprintf(name, sizeof name, "l%d.yaml", k++);
    const char *p = tpath(name);
    static char path[1024];
    snprintf(path, sizeof path, "%s", p);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f,
            "release: {name: a, version: '1'}\n"
            "models:\n  moe: {path: %s, sha256: " MOE_SHA ", arch: qwen3moe}\n"
            "hosts:\n  h: {device: none, trust: ['ed25519:%064d']}\n"
            "modes: [ref.decode]\n"
            "cells:\n  - {model: moe, host: h, mode: ref.decode}\n",
            conformance_path("qwen3moe-tiny-q4_k_m", "model.gguf"), 0);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
    return path;
}

/* The anchors entry of conformance case c (exact references), indented for `anchors:`. */
static const char *anchor_yaml(const char *id, const char *c, const char *arch, const char *extra)
{
    static char buf[4][4096];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k],
             "  %s:\n    arch: %s\n    reference: \"float64 exact evaluation\"\n"
             "    model: {path: %s, sha256: %s}\n    tokens: {path: %s, sha256: %s}\n"
             "    logits: {path: %s, sha256: %s}\n"
             "    greedy: {path: %s, sha256: %s, after: 16}\n"
             "    thresholds: {max_nmse: 1.0e-8, min_cosine: 0.999999, near_tie: 1.0e-3}\n%s",
             id, arch, conformance_path(c, "model.gguf"), sha_of(conformance_path(c, "model.gguf")),
             conformance_path(c, "tokens.txt"), sha_of(conformance_path(c, "tokens.txt")),
             conformance_path(c, "logits_exact.f32"),
             sha_of(conformance_path(c, "logits_exact.f32")),
             conformance_path(c, "greedy_exact.txt"),
             sha_of(conformance_path(c, "greedy_exact.txt")), extra);
    return buf[k];
}

static void load_fails(const char *path, const char *needle)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    int rc = ladder_load(&l, path, &err);
    cr_expect_eq(rc, ERR_INPUT, "'%s' should be refused", needle);
    cr_expect(strstr(err.msg, needle), "error lacks \"%s\": %s", needle, err.msg);
    ladder_free(l);
}

Test(anchor, the_ladder_parses_anchors_strictly)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    const char *p = ladder_with("anchors:\n%s",
                                anchor_yaml("conf-moe", "qwen3moe-tiny-q4_k_m", "qwen3moe", ""));
    cr_assert_eq(ladder_load(&l, p, &err), 0, "%s", err.msg);
    cr_assert_eq(l->n_anchors, 1);
    const struct ladder_anchor *a = &l->anchors[0];
    cr_expect_str_eq(a->id, "conf-moe");
    cr_expect_str_eq(a->arch, "qwen3moe");
    cr_expect_str_eq(a->reference, "float64 exact evaluation");
    cr_expect_str_eq(a->logits.sha256,
                     sha_of(conformance_path("qwen3moe-tiny-q4_k_m", "logits_exact.f32")));
    cr_expect(a->greedy.path && a->greedy_after == 16);
    cr_expect_eq(a->max_nmse, 1e-8);
    cr_expect_eq(a->min_cosine, 0.999999);
    cr_expect_eq(a->near_tie, 1e-3);
    cr_expect_eq(ladder_find_anchor(l, "conf-moe"), 0);
    cr_expect_eq(ladder_check_anchored(l, &err), 0, "%s", err.msg);
    /* the recorded settings carry the thresholds and every pin */
    json_t *s = run_anchor_settings(l, 0);
    cr_expect_str_eq(json_string_value(json_object_get(s, "greedy_sha256")), a->greedy.sha256);
    cr_expect_eq(json_integer_value(json_object_get(s, "greedy_after")), 16);
    /* the thresholds the judge reads back from the receipt are the ladder's (a threshold left
     * at 0 there would judge every anchor receipt, at the run and at the release, without it) */
    cr_expect_eq(json_real_value(json_object_get(s, "max_nmse")), a->max_nmse);
    cr_expect_eq(json_real_value(json_object_get(s, "min_cosine")), a->min_cosine);
    cr_expect_eq(json_real_value(json_object_get(s, "near_tie")), a->near_tie);
    cr_expect_str_eq(json_string_value(json_object_get(s, "model_sha256")), a->model.sha256);
    cr_expect_str_eq(json_string_value(json_object_get(s, "tokens_sha256")), a->tokens.sha256);
    cr_expect_str_eq(json_string_value(json_object_get(s, "logits_sha256")), a->logits.sha256);
    json_decref(s);
    ladder_free(l);

    /* unknown keys, with file:line:col */
    load_fails(
        ladder_with("anchors:\n%s", anchor_yaml("x", DENSE, "qwen3", "    optional: true\n")),
        ":18:5: unknown key 'optional' in anchor 'x'");
    load_fails(ladder_with("anchors:\n  x:\n    arch: qwen3\n    reference: r\n"
                           "    model: {path: m, sha256: %064d, size: 1}\n",
                           0),
               "unknown key 'size' in anchor 'x' model");
    /* thresholds are stated, and not so loose that the anchor sees nothing */
    load_fails(ladder_with("anchors:\n  x:\n    arch: qwen3\n    reference: r\n"
                           "    model: {path: m, sha256: %064d}\n    tokens: {path: t, sha256:"
                           " %064d}\n    logits: {path: l, sha256: %064d}\n",
                           0, 0, 0),
               "anchor 'x' is missing required key 'thresholds'");
    load_fails(ladder_with("anchors:\n  x:\n    arch: qwen3\n    reference: r\n"
                           "    model: {path: m, sha256: %064d}\n    tokens: {path: t, sha256:"
                           " %064d}\n    logits: {path: l, sha256: %064d}\n"
                           "    thresholds: {max_nmse: 0.1, min_cosine: 0.99, near_tie: 0.001}\n",
                           0, 0, 0),
               "thresholds.max_nmse must be in [0, 0.001], found 0.1");
    load_fails(ladder_with("anchors:\n  x:\n    arch: qwen3\n    reference: r\n"
                           "    model: {path: m, sha256: ABC}\n"),
               "sha256 must be 64 lower-case hex digits");
    load_fails(ladder_with("anchors:\n  x:\n    arch: llama\n"), "arch 'llama' is not supported");
    load_fails(ladder_with("anchors:\n%s", anchor_yaml("moe", DENSE, "qwen3", "")),
               "anchor 'moe' has the id of a model");
    load_fails(ladder_with("anchors:\n  x:\n    arch: qwen3\n    reference: r\n"
                           "    model: {path: m, sha256: %064d}\n    tokens: {path: t, sha256:"
                           " %064d}\n    logits: {path: l, sha256: %064d}\n"
                           "    greedy: {path: g, sha256: %064d}\n",
                           0, 0, 0, 0),
               "anchor 'x' greedy is missing required key 'after'");
    load_fails(ladder_with("anchors: {}\n"), "anchors must not be empty");
    load_fails(ladder_with("unanchored: {qwen3moe: \"\"}\n"), "unanchored reason must not be"
                                                              " empty");
    load_fails(ladder_with("anchors:\n%sunanchored: {qwen3moe: because}\n",
                           anchor_yaml("conf-moe", "qwen3moe-tiny-q4_k_m", "qwen3moe", "")),
               "unanchored names qwen3moe, but anchor 'conf-moe'");
}

Test(anchor, a_gated_architecture_without_an_anchor_is_refused_unless_excused)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    /* an anchor for qwen3 only: the ladder gates qwen3moe */
    cr_assert_eq(
        ladder_load(&l, ladder_with("anchors:\n%s", anchor_yaml("d", DENSE, "qwen3", "")), &err), 0,
        "%s", err.msg);
    cr_expect_eq(ladder_check_anchored(l, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, ":3:3: the ladder gates qwen3moe (model 'moe') but no anchor"), "%s",
              err.msg);
    ladder_free(l);
    /* no anchors at all */
    err_clear(&err);
    cr_assert_eq(ladder_load(&l, ladder_with("%s", ""), &err), 0, "%s", err.msg);
    cr_expect_eq(ladder_check_anchored(l, &err), ERR_INPUT);
    ladder_free(l);
    /* excused with a reason: accepted, and the reason is there for every report */
    err_clear(&err);
    cr_assert_eq(ladder_load(&l,
                             ladder_with("unanchored: {qwen3moe: \"no independent MoE"
                                         " engine on this fleet\"}\n"),
                             &err),
                 0, "%s", err.msg);
    cr_expect_eq(ladder_check_anchored(l, &err), 0, "%s", err.msg);
    cr_expect_str_eq(ladder_unanchored_reason(l, "qwen3moe"),
                     "no independent MoE engine on this fleet");
    cr_expect_null(ladder_unanchored_reason(l, "qwen3"));
    ladder_free(l);
}

/* An anchor's thresholds have floors as well as its max_nmse: a cosine below 0.9 or a near tie
 * above 1 logit would let the anchor pass a judge that is wrong */
Test(anchor, thresholds_past_their_floors_are_refused)
{
    static const struct {
        const char *thresholds, *want;
    } C[] = {
        {"{max_nmse: 1.0e-8, min_cosine: 0.5, near_tie: 1.0e-3}",
         "thresholds.min_cosine must be in [0.9, 1], found 0.5"},
        {"{max_nmse: 1.0e-8, min_cosine: 0.999999, near_tie: 2}",
         "thresholds.near_tie must be in [0, 1], found 2"},
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++)
        load_fails(ladder_with("anchors:\n  x:\n    arch: qwen3\n    reference: r\n"
                               "    model: {path: m, sha256: %064d}\n    tokens: {path: t, sha256:"
                               " %064d}\n    logits: {path: l, sha256: %064d}\n"
                               "    thresholds: %s\n",
                               0, 0, 0, C[i].thresholds),
                   C[i].want);
}

/* ---- the signed receipt --------------------------------------------------------------------- */

Test(anchor, an_anchor_receipt_is_a_signed_payload_that_rederives, .timeout = 1200)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    const char *p = ladder_with(
        "anchors:\n%s%s", anchor_yaml("conf-moe", "qwen3moe-tiny-q4_k_m", "qwen3moe", ""),
        /* the same case, with llama.cpp's logits pinned where the exact ones belong: the pin
         * check fails, and the anchor is a FAIL row naming why */
        anchor_yaml("bad", DENSE, "qwen3", ""));
    cr_assert_eq(ladder_load(&l, p, &err), 0, "%s", err.msg);
    free(l->anchors[1].logits.path);
    l->anchors[1].logits.path = strdup(conformance_path(DENSE, "logits.f32"));
    struct identity id;
    memset(&id, 0, sizeof id);
    snprintf(id.version, sizeof id.version, "1");
    snprintf(id.git_commit, sizeof id.git_commit, "c0ffee");
    int pass = -1;
    json_t *good = run_anchor_payload(l, 0, 0, 2, &id, &pass);
    cr_assert(good);
    cr_expect_eq(pass, 1);
    cr_expect_str_eq(json_string_value(json_object_get(good, "verdict")), "PASS");
    json_t *cell = json_object_get(good, "cell");
    cr_expect_str_eq(json_string_value(json_object_get(cell, "model")), "conf-moe");
    cr_expect_str_eq(json_string_value(json_object_get(cell, "host")), "h");
    cr_expect_str_eq(json_string_value(json_object_get(cell, "mode")), "anchor");
    json_t *g = json_object_get(json_object_get(good, "gates"), "anchor");
    cr_expect_str_eq(json_string_value(json_object_get(g, "verdict")), "PASS");
    cr_expect_str_eq(json_string_value(json_object_get(
                         json_object_get(json_object_get(good, "subject"), "model"), "sha256")),
                     l->anchors[0].model.sha256);
    /* the release check's way: the ladder's settings + the recorded metrics, same verdict */
    json_t *checks = NULL;
    char why[512];
    json_t *ls = run_anchor_settings(l, 0);
    cr_expect(json_equal(ls, json_object_get(g, "settings")));
    cr_expect_eq(gatedef_judge("anchor", RUN_ANCHOR_MODE, ls, json_object_get(g, "metrics"),
                               &checks, why, sizeof why),
                 GATE_PASS, "%s", why);
    json_decref(checks);
    json_decref(ls);

    json_t *bad = run_anchor_payload(l, 1, 0, 2, &id, &pass);
    cr_expect_eq(pass, 0);
    cr_expect_str_eq(json_string_value(json_object_get(bad, "verdict")), "FAIL");
    g = json_object_get(json_object_get(bad, "gates"), "anchor");
    const char *e = json_string_value(json_object_get(json_object_get(g, "metrics"), "error"));
    cr_expect(e && strstr(e, "anchor 'bad': its logits file") &&
                  strstr(e, "does not match its pin"),
              "%s", e ? e : "(no error recorded)");

    /* both are stored and signed like any receipt */
    struct key_pair k;
    cr_assert_eq(key_generate(tpath("h.key"), "h", &k, &err), 0, "%s", err.msg);
    struct store *st = NULL;
    cr_assert_eq(store_open(&st, tpath("r.db"), &err), 0, "%s", err.msg);
    int64_t rid = 0;
    cr_expect_eq(store_append(st, good, &k, &rid, &err), 0, "%s", err.msg);
    cr_expect_eq(store_append(st, bad, &k, &rid, &err), 0, "%s", err.msg);
    store_close(st);
    json_decref(good);
    json_decref(bad);
    ladder_free(l);
}

/* ladder_load + ladder_check_files of the ladder at path: what `gate ladder check` and `gate run`
 * refuse before any receipt. */
static int check_files_of(const char *path, struct gate_err *err)
{
    struct ladder *l = NULL;
    int rc = ladder_load(&l, path, err);
    if (!rc)
        rc = ladder_check_files(l, err);
    ladder_free(l);
    return rc;
}

/* issue 24: an anchor file that is missing or not its pin signed a FAIL anchor receipt at
 * `gate run`; ladder check now reads the anchor's files through the anchor gate's own code
 * (anchor_check) and refuses at the anchor's line. */
Test(anchor, ladder_check_refuses_an_anchor_file_the_run_could_not_read, .timeout = 1200)
{
    struct gate_err err = {0};
    cr_expect_eq(
        check_files_of(ladder_with("anchors:\n%s",
                                   anchor_yaml("conf-moe", "qwen3moe-tiny-q4_k_m", "qwen3moe", "")),
                       &err),
        0, "%s", err.msg);
    /* the pinned exact logits replaced by llama.cpp's file: not its pin */
    char y[4096];
    snprintf(y, sizeof y, "%s", anchor_yaml("conf-moe", "qwen3moe-tiny-q4_k_m", "qwen3moe", ""));
    char *at = strstr(y, "logits_exact.f32");
    cr_assert(at);
    memmove(at + 6, at + 12, strlen(at + 12) + 1); /* "logits_exact.f32" -> "logits.f32" */
    err_clear(&err);
    cr_expect_eq(check_files_of(ladder_with("anchors:\n%s", y), &err), ERR_INPUT);
    cr_expect(strstr(err.msg, ".yaml:10:3: anchor 'conf-moe': its logits file: ") &&
                  strstr(err.msg, "does not match its pin") &&
                  strstr(err.msg, "no receipt written"),
              "%s", err.msg);
    /* a file that does not exist */
    snprintf(y, sizeof y, "%s", anchor_yaml("conf-moe", "qwen3moe-tiny-q4_k_m", "qwen3moe", ""));
    at = strstr(y, "tokens.txt");
    cr_assert(at);
    memcpy(at, "tokenz", 6);
    err_clear(&err);
    cr_expect_eq(check_files_of(ladder_with("anchors:\n%s", y), &err), ERR_INPUT);
    cr_expect(strstr(err.msg, ".yaml:10:3: anchor 'conf-moe': its tokens file: ") &&
                  strstr(err.msg, "tokenz.txt"),
              "%s", err.msg);
    /* an anchor whose model is of another architecture than it says */
    err_clear(&err);
    cr_expect_eq(
        check_files_of(ladder_with("anchors:\n%s", anchor_yaml("d", DENSE, "qwen3moe", "")), &err),
        ERR_INPUT);
    cr_expect(strstr(err.msg, "is qwen3 but the ladder says it anchors qwen3moe"), "%s", err.msg);
}

/* ---- the demo ladder ------------------------------------------------------------------------ */

Test(anchor, the_demo_ladder_anchors_both_architectures_with_the_shared_files)
{
    /* the demo ladder as ci/demo.sh uses it: next to a generated demo.pub, two folders below a
     * folder holding shared/ (its anchors say ../../shared/conformance/...) */
    char src[1024], path[1024], cmd[4096];
    snprintf(src, sizeof src, "%s/ladders/demo.yaml", GATE_SOURCE_DIR);
    snprintf(path, sizeof path, "%s", tpath("repo/ladders/demo.yaml"));
    snprintf(cmd, sizeof cmd, "mkdir -p %s/repo/ladders && ln -s %s %s/shared && cp %s %s", tmp,
             check_shared_dir(), tmp, src, path);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    struct gate_err err = {0};
    struct key_pair k;
    cr_assert_eq(key_generate(tpath("demo.key"), "local", &k, &err), 0, "%s", err.msg);
    cr_assert_eq(key_write_public(tpath("repo/ladders/demo.pub"), &k, &err), 0, "%s", err.msg);
    struct ladder *l = NULL;
    cr_assert_eq(ladder_load(&l, path, &err), 0, "%s", err.msg);
    cr_expect_eq(ladder_check_anchored(l, &err), 0, "%s", err.msg);
    int archs = 0;
    for (int i = 0; i < l->n_anchors; i++) {
        const struct ladder_anchor *a = &l->anchors[i];
        archs |= !strcmp(a->arch, "qwen3") ? 1 : !strcmp(a->arch, "qwen3moe") ? 2 : 0;
        cr_expect_leq(a->max_nmse, 1e-8, "%s", a->id);
        cr_expect(strstr(a->logits.path, "logits_exact.f32"), "%s: %s", a->id, a->logits.path);
        cr_expect(a->greedy.path && strstr(a->greedy.path, "greedy_exact.txt"), "%s", a->id);
        /* the pins are the shared files' digests */
        cr_expect_str_eq(a->model.sha256, sha_of(a->model.path), "%s", a->id);
        cr_expect_str_eq(a->tokens.sha256, sha_of(a->tokens.path), "%s", a->id);
        cr_expect_str_eq(a->logits.sha256, sha_of(a->logits.path), "%s", a->id);
        cr_expect_str_eq(a->greedy.sha256, sha_of(a->greedy.path), "%s", a->id);
    }
    cr_expect_eq(archs, 3, "the demo gates qwen3 and qwen3moe: both need an anchor");
    ladder_free(l);
}
