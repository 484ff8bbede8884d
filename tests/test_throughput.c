/* test_throughput.c — the throughput oracle: statistics on hand-made samples (median, spread,
 * CV), the judge over recorded samples (a floor above what ran FAILS, a CV above max_cv is an
 * ERROR "host too noisy to judge", a forged median is ignored), and real runs on the tiny model
 * along each mode's own path, counted by the backend's forwards.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "oracles/mode.h"
#include "oracles/throughput.h"
#include "support/check.h"

Test(throughput, stats_on_hand_made_samples)
{
    struct throughput_stats s;
    double x[] = {100, 300, 200};
    cr_assert_eq(throughput_stats(x, 3, &s), 0);
    cr_expect_eq(s.median, 200);
    cr_expect_eq(s.min, 100);
    cr_expect_eq(s.max, 300);
    cr_expect_eq(s.spread, 200);
    cr_expect(fabs(s.cv - 0.5) < 1e-12); /* stddev 100 / mean 200 */
    double y[] = {100, 101, 99, 100};
    cr_assert_eq(throughput_stats(y, 4, &s), 0);
    cr_expect_eq(s.median, 100);
    double bad[] = {100, NAN};
    cr_expect_eq(throughput_stats(bad, 2, &s), ERR_INPUT);
    double zero[] = {0};
    cr_expect_eq(throughput_stats(zero, 1, &s), ERR_INPUT);
    cr_expect_eq(throughput_stats(y, 0, &s), ERR_INPUT);
}

/* Metrics of three runs with the given samples, 64 prompt / 16 decode tokens. */
static json_t *metrics_of(const double p[3], const double d[3])
{
    return json_pack("{s:s, s:i, s:i, s:{s:f, s:[fff]}, s:{s:f, s:[fff]}}", "mode", "ref.decode",
                     "prompt_tokens", 64, "decode_tokens", 16, "prefill", "median_tps", p[1],
                     "samples_tps", p[0], p[1], p[2], "decode", "median_tps", d[1], "samples_tps",
                     d[0], d[1], d[2]);
}

static json_t *settings_of(double min_pre, double min_dec, double max_cv)
{
    struct throughput_config c;
    throughput_config_default(&c);
    c.prompt_tokens = 64;
    c.decode_tokens = 16;
    c.min_prefill_tps = min_pre;
    c.min_decode_tps = min_dec;
    c.max_cv = max_cv;
    return throughput_settings_json(&c);
}

static enum gate_verdict judge(json_t *s, json_t *m, char *why, size_t n)
{
    json_t *checks = json_array();
    enum gate_verdict v = throughput_judge(s, m, checks, why, n);
    cr_expect_gt(json_array_size(checks), 0);
    json_decref(checks);
    json_decref(s);
    return v;
}

Test(throughput, judge_against_floors_from_recorded_samples)
{
    const double p[] = {1000, 1010, 990}, d[] = {50, 51, 49};
    json_t *m = metrics_of(p, d);
    char why[320];
    cr_expect_eq(judge(settings_of(900, 60, 0.1), m, why, sizeof why), GATE_FAIL);
    cr_expect(strstr(why, "decode 50.0"), "%s", why);
    cr_expect_eq(judge(settings_of(900, 40, 0.1), m, why, sizeof why), GATE_PASS, "%s", why);
    cr_expect_eq(judge(settings_of(2000, 40, 0.1), m, why, sizeof why), GATE_FAIL);
    cr_expect(strstr(why, "prefill"), "%s", why);
    /* a forged median is not believed: the samples say 50 */
    json_object_set_new(json_object_get(m, "decode"), "median_tps", json_real(1e9));
    cr_expect_eq(judge(settings_of(900, 60, 0.1), m, why, sizeof why), GATE_FAIL);
    /* fewer samples than the settings' runs: FAIL */
    json_array_remove(json_object_get(json_object_get(m, "decode"), "samples_tps"), 0);
    cr_expect_eq(judge(settings_of(0, 0, 0.1), m, why, sizeof why), GATE_FAIL);
    json_decref(m);
}

Test(throughput, noisy_host_is_an_error_not_a_fail)
{
    /* decode CV 0.5: below a floor too, but a noisy host cannot be judged either way */
    const double p[] = {1000, 1010, 990}, d[] = {100, 300, 200};
    json_t *m = metrics_of(p, d);
    char why[320];
    cr_expect_eq(judge(settings_of(0, 1e6, 0.1), m, why, sizeof why), GATE_ERROR);
    cr_expect(strstr(why, "host too noisy to judge (CV 0.500 > bound 0.1"), "%s", why);
    /* under a looser bound the same numbers are judged: FAIL on the floor, PASS without it */
    cr_expect_eq(judge(settings_of(0, 1e6, 0.6), m, why, sizeof why), GATE_FAIL);
    cr_expect_eq(judge(settings_of(0, 10, 0.6), m, why, sizeof why), GATE_PASS, "%s", why);
    json_decref(m);
}

Test(throughput, measures_each_mode_along_its_own_path)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    struct throughput_config c;
    throughput_config_default(&c);
    c.prompt_tokens = 12;
    c.decode_tokens = 4;
    c.warmup = 0;
    c.n_threads = 2;
    c.max_cv = 100; /* no timing assert: the point is what ran */
    /* forwards per run: decode 12 + 4; prefill 1 + 6 + 4; chat six turns of 2 (user turns one
     * call each, replies one call per token: 3 + 6) + 4 */
    const char *modes[] = {"ref.decode", "ref.prefill", "ref.chat"};
    const uint64_t want[] = {16, 11, 13};
    for (int i = 0; i < 3; i++) {
        struct mode mode;
        struct gate_err err = {0};
        struct throughput_result r;
        struct mode_ran ran;
        cr_assert_eq(mode_parse(modes[i], &mode, &err), 0);
        mode_ran_begin(&ran);
        cr_assert_eq(throughput_gate(m, &mode, &c, &r, &err), 0, "%s", err.msg);
        mode_ran_end();
        cr_expect_eq(ran.forwards, 3 * want[i], "%s: %" PRIu64 " forwards", modes[i], ran.forwards);
        cr_expect(strstr(r.prompt_path, mode_path_name(mode.path)), "%s", r.prompt_path);
        cr_expect_eq(r.verdict, GATE_PASS, "%s", r.reason);
        cr_expect_eq(r.prefill.n, 3);
        cr_expect_gt(r.decode.median, 0);
        cr_expect_str_eq(r.backend, "ref");
        json_t *s = throughput_settings_json(&c), *checks = json_array();
        char why[320];
        cr_expect_eq(throughput_judge(s, r.metrics, checks, why, sizeof why), r.verdict);
        cr_expect_eq(
            json_array_size(json_object_get(json_object_get(r.metrics, "decode"), "samples_tps")),
            3);
        json_decref(s);
        json_decref(checks);
        throughput_result_free(&r);
    }
    struct mode dec = {.backend = "ref", .path = MODE_DECODE};
    struct throughput_result r;
    struct gate_err err = {0};
    c.runs = 0;
    cr_expect_eq(throughput_gate(m, &dec, &c, &r, &err), ERR_INPUT);
    model_free(m);
}
