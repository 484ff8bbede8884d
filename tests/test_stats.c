/* test_stats.c — next-token distribution figures (oracles/distribution.c), the degeneracy
 * criterion, and `gate model stats` on a known model.
 *
 * The figures against closed forms (uniform, two tokens); the criterion on a constructed
 * degenerate case (one token ahead by 40 nats: entropy ~1e-15, what the first real-shape presets
 * gave) and a healthy one (Gaussian logits of std 3 over 512 tokens, the tiny presets' regime);
 * distribution_of_model() on the shared conformance model against the same figures computed from
 * its independent exact-evaluation logits; the CLI's per-position lines and summary.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/detmath.h"
#include "engine/model.h"
#include "harness/gatedef.h"
#include "oracles/distribution.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include "tests/support/check.h"
#include "tests/support/conformance.h"
#include "tests/support/ladderfix.h"

/* Deterministic N(0, sigma) logits: n rows of V (Box-Muller over splitmix64). */
static float *gaussian_logits(int n, int V, double sigma, uint64_t seed)
{
    float *z = malloc((size_t)n * V * sizeof *z);
    cr_assert(z);
    uint64_t st = seed;
    for (size_t i = 0; i < (size_t)n * V; i++) {
        const double u = ((double)(det_splitmix64(&st) >> 11) + 0.5) * 0x1p-53;
        const double v = ((double)(det_splitmix64(&st) >> 11) + 0.5) * 0x1p-53;
        z[i] = (float)(sigma * sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
    }
    return z;
}

Test(distribution, uniform_and_two_token_closed_forms)
{
    float z[512];
    for (int i = 0; i < 512; i++)
        z[i] = 0.75f;
    struct dist_pos p;
    distribution_pos(z, 512, &p);
    cr_expect_float_eq(p.entropy, log(512.0), 1e-12, "uniform entropy %.15g", p.entropy);
    cr_expect_float_eq(p.top1, 1.0 / 512, 1e-15);
    cr_expect_float_eq(p.varentropy, 0, 1e-12);
    cr_expect_float_eq(p.probe_kl, 0, 1e-12, "a temperature does not move a uniform p");
    /* two tokens, logits (d, 0): p = sigmoid(d); the probe's q = sigmoid(d / 1.25) */
    const double d = 1.5;
    float two[2] = {(float)d, 0};
    distribution_pos(two, 2, &p);
    const double a = 1 / (1 + exp(-d)), b = 1 - a;
    const double qa = 1 / (1 + exp(-d / DIST_PROBE_TEMP)), qb = 1 - qa;
    cr_expect_float_eq(p.top1, a, 1e-12);
    cr_expect_float_eq(p.entropy, -a * log(a) - b * log(b), 1e-12);
    cr_expect_float_eq(p.varentropy, a * b * d * d, 1e-12);
    cr_expect_float_eq(p.probe_kl, a * log(a / qa) + b * log(b / qb), 1e-12, "probe KL %.15g",
                       p.probe_kl);
    /* a non-finite logit: NAN figures, counted, left out of the summary */
    float bad[4] = {1, NAN, 0, 2};
    struct dist_summary s;
    struct gate_err err = {0};
    cr_assert_eq(distribution_positions(bad, 1, 4, NULL, &s, &err), 0);
    cr_expect_eq(s.n, 0);
    cr_expect_eq(s.n_nonfinite, 1);
    char why[400];
    cr_expect_eq(distribution_degenerate(&s, 1e-2, why, sizeof why), 0, "nothing measured");
}

/* The degenerate presets' case: the input token's logit ~40 above a Gaussian bulk of std 3. */
Test(distribution, one_hot_is_degenerate_and_gaussian_is_not)
{
    const int n = 32, V = 512;
    float *deg = gaussian_logits(n, V, 3.0, 7);
    for (int p = 0; p < n; p++)
        deg[(size_t)p * V + (p * 37) % V] = 55.0f;
    struct dist_summary s;
    struct gate_err err = {0};
    char why[400];
    cr_assert_eq(distribution_positions(deg, n, V, NULL, &s, &err), 0, "%s", err.msg);
    fprintf(stderr, "degenerate case: entropy median %.3g, top-1 median %.6f, probe KL %.3g\n",
            s.entropy_median, s.top1_median, s.probe_kl_median);
    cr_expect_eq(s.n, n);
    cr_expect_lt(s.entropy_median, 1e-8);
    cr_expect_gt(s.top1_median, 0.999999);
    cr_expect(distribution_degenerate(&s, 1e-2, why, sizeof why), "a one-hot model passes");
    cr_expect(strstr(why, "max_kld 0.01") && strstr(why, "median entropy"), "why: %s", why);
    cr_expect(distribution_degenerate(&s, 1e-9, why, sizeof why),
              "degenerate even at max_kld 1e-9 (probe KL %.3g)", s.probe_kl_median);
    json_t *j = distribution_json(&s, 1e-2);
    cr_expect(json_is_true(json_object_get(j, "degenerate")));
    cr_expect_eq(json_integer_value(json_object_get(j, "positions")), n);
    json_decref(j);

    float *ok = gaussian_logits(n, V, 3.0, 11);
    cr_assert_eq(distribution_positions(ok, n, V, NULL, &s, &err), 0, "%s", err.msg);
    fprintf(stderr,
            "healthy case: entropy median %.3g (%.3g..%.3g), top-1 median %.3f,"
            " probe KL %.3g\n",
            s.entropy_median, s.entropy_min, s.entropy_max, s.top1_median, s.probe_kl_median);
    cr_expect(s.entropy_median > 1 && s.entropy_median < 5, "entropy %.3g", s.entropy_median);
    cr_expect_eq(distribution_degenerate(&s, 1e-2, why, sizeof why), 0, "healthy flagged: %s", why);
    cr_expect_str_empty(why);
    /* the criterion is the probe KL against max_kld: just below it, degenerate */
    cr_expect(distribution_degenerate(&s, s.probe_kl_median * 1.01, why, sizeof why));
    cr_expect_eq(distribution_degenerate(&s, s.probe_kl_median * 0.99, why, sizeof why), 0);
    j = distribution_json(&s, 1e-2);
    cr_expect(json_is_false(json_object_get(j, "degenerate")));
    json_decref(j);
    free(deg);
    free(ok);
}

static float *read_f32(const char *path, size_t want)
{
    size_t size = 0;
    uint8_t *b = check_slurp(path, &size);
    cr_assert_eq(size, want * sizeof(float), "%s: %zu bytes", path, size);
    return (float *)b;
}

/* The twin's figures on a shared conformance model equal those of the exact float64
 * evaluation's logits (an independent computation; the same tokens: the cases' token_seed,
 * 96 positions). */
Test(distribution, conformance_model_figures_match_the_exact_logits)
{
    const char *cases[] = {"qwen3-dense-tiny-f32", "qwen3moe-tiny-f32"};
    const uint64_t seeds[] = {101, 202}; /* meta.json token_seed */
    for (int c = 0; c < 2; c++) {
        struct dist_summary twin, exact;
        struct gate_err err = {0};
        cr_assert_eq(distribution_of_model(conformance_path(cases[c], "model.gguf"), seeds[c], 96,
                                           2, &twin, &err),
                     0, "%s", err.msg);
        float *z = read_f32(conformance_path(cases[c], "logits_exact.f32"), 96 * 512);
        cr_assert_eq(distribution_positions(z, 96, 512, NULL, &exact, &err), 0, "%s", err.msg);
        fprintf(stderr, "%s: entropy %.4f (%.4f..%.4f) top-1 %.4f (%.4f..%.4f) probe KL %.4f\n",
                cases[c], twin.entropy_median, twin.entropy_min, twin.entropy_max, twin.top1_median,
                twin.top1_min, twin.top1_max, twin.probe_kl_median);
        cr_expect_eq(twin.n, 96);
        cr_expect_float_eq(twin.entropy_median, exact.entropy_median, 1e-4);
        cr_expect_float_eq(twin.entropy_min, exact.entropy_min, 1e-4);
        cr_expect_float_eq(twin.top1_median, exact.top1_median, 1e-4);
        cr_expect_float_eq(twin.top1_max, exact.top1_max, 1e-4);
        cr_expect_float_eq(twin.probe_kl_median, exact.probe_kl_median, 1e-4);
        char why[400];
        cr_expect_eq(distribution_degenerate(&twin, 1e-2, why, sizeof why), 0, "%s: %s", cases[c],
                     why);
        free(z);
    }
}

Test(distribution, model_stats_prints_per_position_figures_and_a_summary)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    char cmd[4096], out[1024];
    snprintf(out, sizeof out, "%s/stats.out", check_tmp_dir());
    snprintf(cmd, sizeof cmd, "'%s' model stats '%s' --tokens 20 --seed 101 --threads 2 >'%s'", bin,
             conformance_path("qwen3-dense-tiny-f32", "model.gguf"), out);
    int rc = system(cmd);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "gate model stats failed");
    char *text = check_slurp_text(out);
    /* the stated sequence: tokens.txt of the case begins with these ids (its token_seed 101) */
    int n = 0;
    int32_t *ids = check_read_ids(conformance_path("qwen3-dense-tiny-f32", "tokens.txt"), &n);
    char want[64];
    snprintf(want, sizeof want, "(seed 101: %d %d", (int)ids[0], (int)ids[1]);
    cr_expect(strstr(text, want), "no '%s' in:\n%s", want, text);
    snprintf(want, sizeof want, "    19: %6d -> ", (int)ids[19]);
    cr_expect(strstr(text, want), "no per-position line '%s'", want);
    cr_expect(strstr(text, "entropy (nats) min ") && strstr(text, "(20 positions)"), "%s", text);
    cr_expect(strstr(text, "healthy for max_kld 0.01"), "%s", text);
    free(ids);
    free(text);
    snprintf(cmd, sizeof cmd, "'%s' model stats '%s' --tokens 20 --max-kld 5 >'%s'", bin,
             conformance_path("qwen3-dense-tiny-f32", "model.gguf"), out);
    rc = system(cmd);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
    text = check_slurp_text(out);
    cr_expect(strstr(text, "DEGENERATE for max_kld 5:"), "an absurd max_kld: %s", text);
    free(text);
    snprintf(cmd, sizeof cmd, "'%s' model stats '%s' --max-kld -1 2>/dev/null >/dev/null", bin,
             conformance_path("qwen3-dense-tiny-f32", "model.gguf"));
    rc = system(cmd);
    cr_expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "a negative max_kld is refused");
}

/* `gate ladder check` on a ladder of the tiny MoE conformance model: the figures line always;
 * the warning (stderr, exit 0) only when the cell's max_kld is above what a 25 % temperature
 * error makes there (~0.08). */
Test(distribution, ladder_check_warns_about_a_degenerate_model_without_failing)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    struct ladderfix fx;
    ladderfix_init(&fx, "stats-ladder");
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "l%d.yaml", i);
        const char *l = ladderfix_one_cell(&fx, name, NULL, "ref.decode", NULL, NULL);
        if (i) /* the fixture's parity defaults are {positions: 64}: add a loose max_kld */
            cr_assert_eq(ladderfix_sh("sed -i 's/parity: {positions: 64}/parity: {positions: 64,"
                                      " max_kld: 0.5}/' '%s' && grep -q 'max_kld: 0.5' '%s'",
                                      l, l),
                         0);
        char out[700], err[700];
        snprintf(out, sizeof out, "%s", ladderfix_path(&fx, "check.out"));
        snprintf(err, sizeof err, "%s", ladderfix_path(&fx, "check.err"));
        const int rc = ladderfix_sh("'%s' ladder check '%s' >'%s' 2>'%s'", bin, l, out, err);
        char *o = check_slurp_text(out), *e = check_slurp_text(err);
        cr_expect_eq(rc, 0, "ladder check exit %d: %s", rc, e);
        cr_expect(strstr(o, "distribution moe: entropy median"), "no figures line:\n%s", o);
        const char *w = strstr(e, "warning: model 'moe' has degenerate next-token distributions"
                                  " for its cells' max_kld 0.5: at the median of 16 positions");
        if (i)
            cr_expect(w && strstr(e, "median entropy"), "no warning at max_kld 0.5:\n%s", e);
        else
            cr_expect(!strstr(e, "degenerate"), "a healthy model warned about:\n%s", e);
        free(o);
        free(e);
    }
}

/* The parity run records the judge's distributions (metrics.distribution) and the receipt's
 * judge ignores the record: the verdict read back from the JSON is the run's. */
Test(distribution, parity_records_the_judges_distributions)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    struct parity_config c;
    gatedef_parity_config(NULL, &c);
    c.positions = 64;
    struct mode mode;
    struct gate_err err = {0};
    cr_assert_eq(mode_parse("ref.decode", &mode, &err), 0);
    struct parity_result r;
    cr_assert_eq(parity_run(m, &mode, NULL, NULL, 0, &c, 2, &r, &err), 0, "%s", err.msg);
    cr_expect(r.pass, "%s", r.reason);
    cr_expect_eq(r.dist.n, r.n_pos);
    json_t *j = parity_result_json(&r);
    const json_t *d = json_object_get(j, "distribution");
    cr_assert(json_is_object(d), "no metrics.distribution");
    cr_expect(json_is_false(json_object_get(d, "degenerate")));
    cr_expect_eq(json_integer_value(json_object_get(d, "positions")), 64);
    const double med = json_real_value(json_object_get(json_object_get(d, "entropy"), "median"));
    cr_expect(med > 1 && med < 5, "median entropy %g", med);
    cr_expect_float_eq(json_real_value(json_object_get(d, "max_kld")), c.max_kld, 1e-15);
    char why[320] = "";
    json_t *checks = json_array();
    cr_expect_eq(parity_gate_judge(json_object_get(j, "config"), j, checks, why, sizeof why),
                 GATE_PASS, "%s", why);
    json_decref(checks);
    json_decref(j);
    parity_result_free(&r);
    model_free(m);
}
