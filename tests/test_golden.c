/* test_golden.c — greedy goldens: the conformance greedy continuation is reproduced, goldens
 * recorded from the ref twin replay on every ref path, a changed id fails naming the index and
 * both continuations, and goldens of another model digest are refused.
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
    cr_expect_str_eq(g.c[2].name, "chat");
    const char *modes[] = {"ref.decode", "ref.chat"};
    for (int i = 0; i < 2; i++) {
        struct mode mode;
        struct golden_result r;
        cr_assert_eq(mode_parse(modes[i], &mode, &err), 0);
        cr_assert_eq(golden_run(m, &mode, &g, 2, &r, &err), 0, "%s", err.msg);
        cr_expect(r.pass, "%s: %s", modes[i], r.reason);
        cr_expect_not_null(r.c[0].got_text); /* the tiny model has a byte-level tokenizer */
        golden_result_free(&r);
    }
    /* one id changed: FAIL at that index, both continuations reported */
    g.c[1].ids[5] = (g.c[1].ids[5] + 1) % 512;
    struct mode dec = {.backend = "ref", .path = MODE_DECODE};
    struct golden_result r;
    cr_assert_eq(golden_run(m, &dec, &g, 2, &r, &err), 0, "%s", err.msg);
    cr_expect_not(r.pass);
    cr_expect_eq(r.c[1].first_diff, 5);
    cr_expect(strstr(r.reason, "index 5"), "%s", r.reason);
    json_t *j = golden_result_json(&r);
    cr_expect_eq(json_array_size(json_object_get(json_array_get(json_object_get(j, "cases"), 1),
                                                 "got")), (size_t)r.c[1].n_got);
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
    cr_expect_eq(golden_run(d, &dec, &g, 2, &r, &err), ERR_INPUT);
    golden_result_free(&r);
    /* recording the second model keeps the first */
    cr_assert_eq(golden_record(path, d, 4, 2, &err), 0, "%s", err.msg);
    golden_set_free(&g);
    cr_expect_eq(golden_load(path, sha, &g, &err), 0, "%s", err.msg);
    cr_expect_eq(golden_load(path, dsha, &gd, &err), 0, "%s", err.msg);
    golden_set_free(&g);
    golden_set_free(&gd);
    model_free(m);
    model_free(d);
}
