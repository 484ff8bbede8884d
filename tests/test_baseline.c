/* test_baseline.c — the throughput gate's baseline lookup (harness/baseline.c, issue 27 §2) over
 * signed receipts fabricated by tests/support/ladderfix: `previous` finds the newest PASS receipt
 * of the cell from the newest release version below the ladder's, signed by this host's key;
 * nothing earlier is "none" (no comparison); another host name, thread count or model digest is
 * refused by name; gate bench --compare's lookup by receipt id refuses another mode.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/baseline.h"
#include "harness/ladder.h"
#include "receipts/receipt.h"
#include "receipts/store.h"
#include "tests/support/check.h"
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

/* The receipt hash of row id in db. */
static int hash_of_row(void *ctx, const struct store_row *row)
{
    snprintf(ctx, 65, "%s", row->hash);
    return 0;
}

static void row_hash(const char *db, int64_t id, char hash[65])
{
    struct store *st = NULL;
    struct gate_err err = {0};
    hash[0] = '\0';
    cr_assert_eq(store_open(&st, db, &err), 0, "%s", err.msg);
    cr_assert_eq(store_get(st, id, hash_of_row, hash, &err), 0, "%s", err.msg);
    store_close(st);
    cr_assert_eq(strlen(hash), 64, "no receipt %lld", (long long)id);
}

/* Write a copy of the ladder at src to dst with its model `moe` named `moe2` (the same file). */
static void rename_model(const char *src, const char *dst)
{
    size_t n = 0;
    char *text = (char *)check_slurp(src, &n);
    cr_assert(text);
    FILE *f = fopen(dst, "w");
    cr_assert(f);
    static const char *const from[] = {"  moe: {", "models: [moe]", "model: moe,"};
    static const char *const to[] = {"  moe2: {", "models: [moe2]", "model: moe2,"};
    for (size_t i = 0; i < n;) {
        int k = 0;
        while (k < 3 && strncmp(text + i, from[k], strlen(from[k])))
            k++;
        if (k < 3) {
            fputs(to[k], f);
            i += strlen(from[k]);
        } else {
            fputc(text[i++], f);
        }
    }
    cr_assert_eq(fclose(f), 0);
    free(text);
}

/* `previous` is a receipt of this very cell of this very release ladder: the same model, mode,
 * cell host and settings (not only a comparable environment). Newer PASS receipts of this
 * host's key for another cell host (signed on this machine), another ladder's release line,
 * another KV type, another mode or another model are passed over; the newest of this cell,
 * 0.9.0, is the baseline. */
Test(baseline, previous_is_this_cell_of_this_ladder_never_another_one)
{
    struct ladderfix fx;
    ladderfix_init(&fx, "baseline3");
    const char *lp = ladderfix_ladder(&fx, "rel.yaml", NULL, 0);
    char lp2[1024];
    snprintf(lp2, sizeof lp2, "%s", ladderfix_path(&fx, "rel-moe2.yaml"));
    rename_model(lp, lp2);
    const char *db = ladderfix_path(&fx, "r.db");
    struct ladder *l = NULL;
    struct gate_err err = {0};
    cr_assert_eq(ladder_load(&l, lp, &err), 0, "%s", err.msg);
    snprintf(l->cells[0].g.baseline, sizeof l->cells[0].g.baseline, "previous");
    ladderfix_add(&fx, lp, db, &fx.key_a, 0,
                  (struct ladderfix_fake){.claim_pass = 1, .release_version = "0.9.0"});
    /* cell moe/b/ref.decode, signed by a's key on host name a */
    ladderfix_add(
        &fx, lp, db, &fx.key_a, 2,
        (struct ladderfix_fake){.claim_pass = 1, .release_version = "0.9.5", .env_host = "a"});
    ladderfix_add(&fx, lp, db, &fx.key_a, 0,
                  (struct ladderfix_fake){
                      .claim_pass = 1, .release_version = "0.9.6", .release_name = "other"});
    ladderfix_add(
        &fx, lp, db, &fx.key_a, 0,
        (struct ladderfix_fake){.claim_pass = 1, .release_version = "0.9.7", .cell_kv = "f16"});
    ladderfix_add(&fx, lp, db, &fx.key_a, 1,
                  (struct ladderfix_fake){.claim_pass = 1, .release_version = "0.9.8"});
    ladderfix_add(&fx, lp2, db, &fx.key_a, 0,
                  (struct ladderfix_fake){.claim_pass = 1, .release_version = "0.9.9"});
    struct baseline b;
    find(&fx, l, fx.key_a.id, 0, &b);
    cr_expect(b.found, "%s%s", b.none, b.refused);
    cr_expect_str_eq(b.version, "0.9.0");
    char want[65];
    row_hash(db, 1, want);
    cr_expect_str_eq(b.receipt, want);
    ladder_free(l);
}

/* Versions compare as numbers, part by part (0.10.0 is after 0.9.0), and of two PASS receipts
 * of the newest earlier version the later one is the baseline (a rerun of that release). */
Test(baseline, previous_is_the_later_receipt_of_the_numerically_newest_version)
{
    struct ladderfix fx;
    ladderfix_init(&fx, "baseline4");
    struct ladder *l = load(&fx);
    const char *lp = ladderfix_path(&fx, "l.yaml"), *db = ladderfix_path(&fx, "r.db");
    ladderfix_add(&fx, lp, db, &fx.key_a, 0,
                  (struct ladderfix_fake){.claim_pass = 1, .release_version = "0.10.0"});
    ladderfix_add(&fx, lp, db, &fx.key_a, 0,
                  (struct ladderfix_fake){.claim_pass = 1, .release_version = "0.10.0"});
    ladderfix_add(&fx, lp, db, &fx.key_a, 0,
                  (struct ladderfix_fake){.claim_pass = 1, .release_version = "0.9.0"});
    struct baseline b;
    find(&fx, l, fx.key_a.id, 0, &b);
    cr_expect(b.found, "%s%s", b.none, b.refused);
    cr_expect_str_eq(b.version, "0.10.0");
    char want[65];
    row_hash(db, 2, want);
    cr_expect_str_eq(b.receipt, want, "not the later receipt of 0.10.0");
    ladder_free(l);
}

/* A receipt whose signature does not verify is no baseline: an attacker with the store's file
 * who swaps in another signature (and recomputes the hash column, so the chain still links)
 * gets neither `previous` nor gate bench --compare to take it. */
Test(baseline, a_receipt_whose_signature_does_not_verify_is_never_a_baseline)
{
    struct ladderfix fx;
    ladderfix_init(&fx, "baseline5");
    struct ladder *l = load(&fx);
    const char *lp = ladderfix_path(&fx, "l.yaml");
    char db[1024];
    snprintf(db, sizeof db, "%s", ladderfix_path(&fx, "r.db"));
    ladderfix_add(&fx, lp, db, &fx.key_a, 0,
                  (struct ladderfix_fake){.claim_pass = 1, .release_version = "0.9.0"});
    ladderfix_add(&fx, lp, db, &fx.key_a, 0,
                  (struct ladderfix_fake){.claim_pass = 1, .release_version = "0.9.5"});
    sqlite3 *raw = ladderfix_open_raw(db);
    sqlite3_stmt *q = NULL;
    cr_assert_eq(sqlite3_prepare_v2(raw, "SELECT payload, signature FROM receipts WHERE id = 2", -1,
                                    &q, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
    char *payload = strdup((const char *)sqlite3_column_text(q, 0));
    const size_t len = (size_t)sqlite3_column_bytes(q, 0);
    unsigned char sig[64];
    cr_assert_eq(sqlite3_column_bytes(q, 1), 64);
    memcpy(sig, sqlite3_column_blob(q, 1), 64);
    sqlite3_finalize(q);
    sig[0] ^= 0x01;
    char hash[65];
    receipt_hash(payload, len, sig, hash);
    cr_assert_eq(sqlite3_prepare_v2(raw, "UPDATE receipts SET signature = ?, hash = ? WHERE id = 2",
                                    -1, &q, NULL),
                 SQLITE_OK);
    sqlite3_bind_blob(q, 1, sig, 64, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, hash, -1, SQLITE_STATIC);
    cr_assert_eq(sqlite3_step(q), SQLITE_DONE);
    sqlite3_finalize(q);
    sqlite3_close(raw);
    free(payload);
    struct baseline b;
    find(&fx, l, fx.key_a.id, 0, &b);
    cr_expect(b.found, "%s%s", b.none, b.refused);
    cr_expect_str_eq(b.version, "0.9.0", "the receipt that does not verify was taken");
    /* by id, as gate bench --compare asks */
    struct store *st = NULL;
    struct gate_err err = {0};
    cr_assert_eq(store_open(&st, db, &err), 0, "%s", err.msg);
    json_t *env = json_pack("{s:s, s:i}", "hostname", "a", "threads", 0);
    struct cell_variant f32 = {{0}};
    cr_assert_eq(baseline_from_receipt(st, 1, "ref.decode", LADDERFIX_MOE_SHA, env, &f32, &b, &err),
                 0, "%s", err.msg);
    cr_expect(b.found, "the intact receipt: %s", b.refused);
    cr_assert_eq(baseline_from_receipt(st, 2, "ref.decode", LADDERFIX_MOE_SHA, env, &f32, &b, &err),
                 0, "%s", err.msg);
    cr_expect(!b.found && strstr(b.refused, "does not verify"), "%s", b.refused);
    json_decref(env);
    store_close(st);
    ladder_free(l);
}
