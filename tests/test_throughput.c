/* test_throughput.c — the throughput oracle: statistics on hand-made samples (median, CV,
 * noisy flag), the verdict against floors (a floor above what ran FAILS), and a real run on
 * the tiny model with load time kept apart.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

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
    cr_expect(fabs(s.cv - 0.5) < 1e-12); /* stddev 100 / mean 200 */
    cr_expect(s.noisy);
    double y[] = {100, 101, 99, 100};
    cr_assert_eq(throughput_stats(y, 4, &s), 0);
    cr_expect_eq(s.median, 100);
    cr_expect_not(s.noisy);
    double bad[] = {100, NAN};
    cr_expect_eq(throughput_stats(bad, 2, &s), ERR_INPUT);
    double zero[] = {0};
    cr_expect_eq(throughput_stats(zero, 1, &s), ERR_INPUT);
    cr_expect_eq(throughput_stats(y, 0, &s), ERR_INPUT);
}

Test(throughput, verdict_against_floors)
{
    struct throughput_result r = {0};
    struct throughput_config c;
    throughput_config_default(&c);
    double p[] = {1000, 1010, 990}, d[] = {50, 51, 49};
    throughput_stats(p, 3, &r.prefill);
    throughput_stats(d, 3, &r.decode);
    c.min_prefill_tps = 900;
    c.min_decode_tps = 60;
    throughput_judge(&r, &c);
    cr_expect_not(r.pass);
    cr_expect(strstr(r.reason, "decode 50.0"), "%s", r.reason);
    c.min_decode_tps = 40;
    throughput_judge(&r, &c);
    cr_expect(r.pass, "%s", r.reason);
    c.min_prefill_tps = 2000;
    throughput_judge(&r, &c);
    cr_expect_not(r.pass);
    cr_expect(strstr(r.reason, "prefill"), "%s", r.reason);
}

Test(throughput, runs_on_the_tiny_model)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/conformance/qwen3moe-tiny-f32/model.gguf", check_shared_dir());
    struct throughput_config c;
    throughput_config_default(&c);
    c.prompt_tokens = 32;
    c.decode_tokens = 8;
    c.n_threads = 2;
    struct mode mode = {.backend = "ref", .path = MODE_DECODE};
    struct throughput_result r;
    struct gate_err err = {0};
    cr_assert_eq(throughput_run(path, &mode, &c, &r, &err), 0, "%s", err.msg);
    cr_expect(r.pass, "%s", r.reason);
    cr_expect_eq(r.prefill.n, 3);
    cr_expect_gt(r.prefill.median, 0);
    cr_expect_gt(r.decode.median, 0);
    cr_expect_gt(r.load_s, 0);
    cr_expect_str_eq(r.backend, "ref");
    /* a floor no CPU reaches: FAIL */
    c.min_decode_tps = 1e12;
    throughput_judge(&r, &c);
    cr_expect_not(r.pass);
    json_t *j = throughput_result_json(&r);
    cr_expect_eq(json_array_size(json_object_get(json_object_get(j, "decode"), "samples_tps")), 3);
    json_decref(j);
    c.runs = 0;
    cr_expect_eq(throughput_run(path, &mode, &c, &r, &err), ERR_INPUT);
}
