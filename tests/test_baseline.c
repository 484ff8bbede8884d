/* test_baseline.c — the throughput gate's baseline lookup (harness/baseline.c, issue 27 §2) over
 * signed receipts fabricated by tests/support/ladderfix: `previous` finds the newest PASS receipt
 * of the cell from the newest release version below the ladder's, signed by this host's key;
 * nothing earlier is "none" (no comparison); another host name, thread count or model digest is
 * refused by name; gate bench --compare's lookup by receipt id refuses another mode.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "harness/baseline.h"
#include "harness/ladder.h"
#include "receipts/store.h"
#include "tests/support/ladderfix.h"

/* The one-cell ladder (release rel 1.0.0) with `baseline: previous`. */
static struct ladder *load(struct ladderfix *fx)
{
    const char *p = ladderfix_one_cell(fx, "l.yaml", NULL, "ref.decode", NULL,
                                       "    throughput: {baseline: previous}\n");
    struct ladder *l = NULL;
    struct gate_err err = {0};
    cr_assert_eq(ladder_load(&l, p, &err), 0, "%s", err.msg);
    cr_assert_str_eq(l->cells[0].g.baseline, "previous");
    return l;
}

static void find(const struct ladderfix *fx, const struct ladder *l, const char *key_id,
                 int threads, struct baseline *b)
{
    struct store *st = NULL;
    struct gate_err err = {0};
    cr_assert_eq(store_open(&st, ladderfix_path(fx, "r.db"), &err), 0, "%s", err.msg);
    json_t *env = json_pack("{s:s, s:i}", "hostname", "a", "threads", threads);
    cr_assert_eq(baseline_find(st, l, 0, key_id, env, b, &err), 0, "%s", err.msg);
    json_decref(env);
    store_close(st);
}

Test(baseline, previous_is_the_newest_earlier_release_of_this_host)
{
    struct ladderfix fx;
    ladderfix_init(&fx, "baseline");
    struct ladder *l = load(&fx);
    const char *lp = ladderfix_path(&fx, "l.yaml"), *db = ladderfix_path(&fx, "r.db");
    struct baseline b;
    /* a PASS of this very version is no baseline: none */
    ladderfix_add(&fx, lp, db, &fx.key_a, 0, (struct ladderfix_fake){.claim_pass = 1});
    find(&fx, l, fx.key_a.id, 0, &b);
    cr_expect(!b.found && b.none[0] && !b.refused[0], "%s", b.refused);
    cr_expect(strstr(b.none, "below 1.0.0"), "%s", b.none);
    /* 0.8.0 and 0.9.0 (and a later 0.8.0): the newest earlier version wins */
    ladderfix_add(&fx, lp, db, &fx.key_a, 0,
                  (struct ladderfix_fake){.claim_pass = 1, .release_version = "0.9.0"});
    ladderfix_add(&fx, lp, db, &fx.key_a, 0,
                  (struct ladderfix_fake){.claim_pass = 1, .release_version = "0.8.0"});
    /* another key's receipt of a later version: not this host's */
    ladderfix_add(&fx, lp, db, &fx.key_b, 0,
                  (struct ladderfix_fake){.claim_pass = 1, .release_version = "0.9.5"});
    /* a FAIL receipt: never a baseline */
    ladderfix_add(&fx, lp, db, &fx.key_a, 0,
                  (struct ladderfix_fake){.no_gates = 1, .release_version = "0.9.9"});
    find(&fx, l, fx.key_a.id, 0, &b);
    cr_expect(b.found, "%s%s", b.none, b.refused);
    cr_expect_str_eq(b.version, "0.9.0");
    cr_expect_eq(b.n, 6); /* the recorded runs of tests/data/release_metrics.json */
    cr_expect_gt(b.decode[0], 0);
    json_t *j = baseline_json(&b);
    cr_expect_eq(json_array_size(json_object_get(j, "decode_tps")), 6);
    cr_expect_str_eq(json_string_value(json_object_get(j, "receipt")), b.receipt);
    json_decref(j);
    /* another thread count: refused by name */
    find(&fx, l, fx.key_a.id, 2, &b);
    cr_expect(!b.found && strstr(b.refused, "ran with 0 threads, this run with 2"), "%s",
              b.refused);
    ladder_free(l);
}

Test(baseline, another_host_name_or_model_digest_is_refused)
{
    struct ladderfix fx;
    ladderfix_init(&fx, "baseline2");
    struct ladder *l = load(&fx);
    const char *lp = ladderfix_path(&fx, "l.yaml"), *db = ladderfix_path(&fx, "r.db");
    struct baseline b;
    ladderfix_add(&fx, lp, db, &fx.key_a, 0,
                  (struct ladderfix_fake){
                      .claim_pass = 1, .release_version = "0.9.0", .env_host = "elsewhere"});
    find(&fx, l, fx.key_a.id, 0, &b);
    cr_expect(!b.found && strstr(b.refused, "ran on host 'elsewhere', this run on 'a'"), "%s",
              b.refused);
    ladderfix_add(&fx, lp, db, &fx.key_a, 0,
                  (struct ladderfix_fake){.claim_pass = 1,
                                          .release_version = "0.9.1",
                                          .sha = "00112233445566778899aabbccddeeff00112233445566778"
                                                 "899aabbccddeeff"});
    find(&fx, l, fx.key_a.id, 0, &b);
    cr_expect(!b.found && strstr(b.refused, "model digest 0011223344556677"), "%s", b.refused);
    /* by id, as gate bench --compare asks: another mode is refused */
    struct store *st = NULL;
    struct gate_err err = {0};
    cr_assert_eq(store_open(&st, db, &err), 0, "%s", err.msg);
    json_t *env = json_pack("{s:s, s:i}", "hostname", "elsewhere", "threads", 0);
    struct cell_variant f32 = {{0}}, avx2 = {{0}};
    cr_assert_eq(cell_setting_parse(CELL_ISA, "avx2", 1, &avx2.at[CELL_ISA]), 0);
    cr_assert_eq(baseline_from_receipt(st, 1, "ref.chat", LADDERFIX_MOE_SHA, env, &f32, &b, &err),
                 0, "%s", err.msg);
    cr_expect(!b.found && strstr(b.refused, "not of */ref.chat"), "%s", b.refused);
    cr_assert_eq(baseline_from_receipt(st, 1, "ref.decode", LADDERFIX_MOE_SHA, env, &f32, &b, &err),
                 0, "%s", err.msg);
    cr_expect(b.found && b.n == 6, "%s", b.refused);
    /* another instruction set is another cell: not comparable, by name */
    cr_assert_eq(
        baseline_from_receipt(st, 1, "ref.decode", LADDERFIX_MOE_SHA, env, &avx2, &b, &err), 0,
        "%s", err.msg);
    cr_expect(!b.found && strstr(b.refused, "isa avx2") && strstr(b.refused, "not comparable"),
              "%s", b.refused);
    cr_expect_neq(
        baseline_from_receipt(st, 99, "ref.decode", LADDERFIX_MOE_SHA, env, &f32, &b, &err), 0);
    json_decref(env);
    store_close(st);
    ladder_free(l);
}
