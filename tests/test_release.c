/* test_release.c — the release check, one test per state (each asserting, through
 * release_evaluate(), the row's state, the receipt that blocks it and key words of its reason),
 * a fleet (two hosts, two keys, two databases, export -> import -> check -> release_sign), one
 * test of the printed report and exit codes (release_check_opts, the command layer), gate run
 * in process (run_ladder's result rows and progress events), and `gate run` end to end through
 * the CLI.
 *
 * Receipts for the state tests are built by tests/support/ladderfix.h from the documented
 * payload schema and signed through the store, and the check judges them against a stand-in
 * clean build identity (release_evaluate's `self`, fx.self here), so the tests do not depend on
 * whether this checkout is dirty.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/report.h"
#include "harness/identity.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "receipts/key.h"
#include "receipts/store.h"
#include "tests/support/check.h"
#include "tests/support/conformance.h"
#include "tests/support/ladderfix.h"

#define MOE_SHA LADDERFIX_MOE_SHA

static struct ladderfix fx;
static struct key_pair key_x; /* a second key of host "a" that the ladder never saw */

static const char *path_in(const char *name)
{
    return ladderfix_path(&fx, name);
}

/* ladderfix's release ladder: one MoE model, hosts a and b (each trusting its own key), cells
 * moe/a/ref.decode (0), moe/a/ref.chat (1), moe/b/ref.decode (2), qwen3moe unanchored. */
static void setup(void)
{
    /* each test runs in its own process: a fresh folder each */
    ladderfix_init(&fx, "rel");
    struct gate_err err = {0};
    cr_assert_eq(key_generate(path_in("x.key"), "a", &key_x, &err), 0, "%s", err.msg);
    ladderfix_ladder(&fx, "ladder.yaml", NULL, 0);
}

TestSuite(release, .init = setup);

/* Append one receipt for ladder cell ci to db, signed by k (ladderfix_add). Verdicts are the gate
 * table's over the recorded numbers, as gate run records them, unless fk.claim_pass forges them. */
static void add(const char *db, const struct key_pair *k, int ci, struct ladderfix_fake fk)
{
    ladderfix_add(&fx, path_in("ladder.yaml"), db, k, ci, fk);
}

/* Evaluate the release of the test ladder from db as the build fx.self (new result in r). */
static void evaluate(const char *db, struct release_result *r)
{
    ladderfix_evaluate(&fx, path_in("ladder.yaml"), db, NULL, r);
}

/* The row named name (a cell, an excluded cell or an anchor id), or NULL. */
static const struct release_row *row_of(const struct release_result *r, const char *name)
{
    for (int i = 0; i < r->n_cells; i++)
        if (!strcmp(r->cells[i].name, name))
            return &r->cells[i];
    for (int i = 0; i < r->n_excluded; i++)
        if (!strcmp(r->excluded[i].name, name))
            return &r->excluded[i];
    for (int i = 0; i < r->n_anchors; i++)
        if (!strcmp(r->anchors[i].name, name))
            return &r->anchors[i];
    return NULL;
}

/* Evaluate db and expect row `name` in `state`, blocked by receipt `blocking` (0: none), its
 * reason holding `words` (NULL: anything); the release is never OK. */
static void expect_row(const char *db, const char *name, enum release_state state, int64_t blocking,
                       const char *words)
{
    struct release_result r;
    evaluate(db, &r);
    const struct release_row *w = row_of(&r, name);
    cr_assert(w, "no row %s", name);
    cr_expect_eq(w->state, state, "%s is %s, expected %s (%s)", name, release_state_name(w->state),
                 release_state_name(state), w->reason);
    cr_expect_eq(w->blocking_id, blocking, "%s is blocked by receipt %lld, expected %lld (%s)",
                 name, (long long)w->blocking_id, (long long)blocking, w->reason);
    if (words)
        cr_expect(strstr(w->reason, words), "%s: reason lacks \"%s\": %s", name, words, w->reason);
    cr_expect_eq(r.ok, 0, "a release with %s %s must not be OK", name, release_state_name(state));
    release_result_free(&r);
}

static void all_pass(const char *db)
{
    add(db, &fx.key_a, 0, (struct ladderfix_fake){0});
    add(db, &fx.key_a, 1, (struct ladderfix_fake){0});
    add(db, &fx.key_b, 2, (struct ladderfix_fake){0});
}

Test(release, all_cells_pass_and_the_release_is_ok)
{
    all_pass(path_in("r.db"));
    struct release_result r;
    evaluate(path_in("r.db"), &r);
    cr_expect_eq(r.ok, 1);
    cr_expect_eq(r.n_cells, 3);
    cr_expect_eq(r.n_bad_cells + r.n_bad_anchors, 0);
    cr_expect_eq(r.n_receipts, 3);
    cr_expect_str_empty(r.store_problem);
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(r.cells[i].state, RELEASE_PASS, "%s: %s", r.cells[i].name, r.cells[i].reason);
        cr_expect_eq(r.cells[i].blocking_id, 0);
        cr_expect_eq(r.cells[i].n_pass_ids, 1);
        cr_expect_eq(r.cells[i].pass_ids[0], i + 1, "cell %d counts receipt %lld", i,
                     (long long)r.cells[i].pass_ids[0]);
    }
    cr_expect_str_eq(r.cells[1].name, "moe/a/ref.chat");
    release_result_free(&r);
}

Test(release, a_missing_cell_blocks)
{
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){0});
    add(path_in("r.db"), &fx.key_b, 2, (struct ladderfix_fake){0});
    expect_row(path_in("r.db"), "moe/a/ref.chat", RELEASE_MISSING, 0, "no receipt for this build");
    expect_row(path_in("r.db"), "moe/a/ref.decode", RELEASE_PASS, 0, NULL);
}

Test(release, a_receipt_from_an_older_build_is_stale)
{
    all_pass(path_in("r.db"));
    add(path_in("r2.db"), &fx.key_a, 0, (struct ladderfix_fake){.commit = "0123456789"});
    add(path_in("r2.db"), &fx.key_a, 1, (struct ladderfix_fake){0});
    add(path_in("r2.db"), &fx.key_b, 2, (struct ladderfix_fake){0});
    expect_row(path_in("r2.db"), "moe/a/ref.decode", RELEASE_STALE, 1, "is for build 0123456789");
}

/* Issue 23 §4: binary_sha256 was recorded and never compared. A receipt that claims this host,
 * this build and this configuration but another binary blocks its row, even beside a PASS
 * receipt of this binary; the same digest on another host (which compiles its own binary) or
 * under another configuration is not compared. */
Test(release, a_receipt_of_another_binary_claiming_this_build_blocks)
{
    snprintf(fx.self.hostname, sizeof fx.self.hostname, "builder-1");
    snprintf(fx.self.build_config_sha256, sizeof fx.self.build_config_sha256, "%064d", 5);
    const char *other = "be00000000000000000000000000000000000000000000000000000000000000";
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){.env_host = "builder-1"});
    add(path_in("r.db"), &fx.key_a, 0,
        (struct ladderfix_fake){.env_host = "builder-1", .binary_sha256 = other});
    add(path_in("r.db"), &fx.key_a, 1, (struct ladderfix_fake){.env_host = "builder-1"});
    add(path_in("r.db"), &fx.key_b, 2,
        (struct ladderfix_fake){.env_host = "builder-2", .binary_sha256 = other});
    expect_row(path_in("r.db"), "moe/a/ref.decode", RELEASE_STALE, 2, "identity mismatch");
    expect_row(path_in("r.db"), "moe/a/ref.chat", RELEASE_PASS, 0, NULL);
    expect_row(path_in("r.db"), "moe/b/ref.decode", RELEASE_PASS, 0, NULL);
}

Test(release, a_dirty_tree_receipt_never_counts)
{
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){.dirty = 1});
    add(path_in("r.db"), &fx.key_a, 1, (struct ladderfix_fake){0});
    add(path_in("r.db"), &fx.key_b, 2, (struct ladderfix_fake){0});
    expect_row(path_in("r.db"), "moe/a/ref.decode", RELEASE_STALE, 1, "built from a dirty tree");
}

/* A receipt whose build identity never says whether its tree was clean (no
 * subject.engine.git_dirty at all: a hand-written or trimmed payload) is not taken for a clean
 * build; only an explicit false counts. */
Test(release, a_receipt_without_a_git_dirty_field_counts_as_dirty)
{
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){.no_dirty_field = 1});
    add(path_in("r.db"), &fx.key_a, 1, (struct ladderfix_fake){0});
    add(path_in("r.db"), &fx.key_b, 2, (struct ladderfix_fake){0});
    expect_row(path_in("r.db"), "moe/a/ref.decode", RELEASE_STALE, 1, "built from a dirty tree");
    expect_row(path_in("r.db"), "moe/a/ref.chat", RELEASE_PASS, 0, NULL);
}

Test(release, another_model_digest_is_stale)
{
    add(path_in("r.db"), &fx.key_a, 0,
        (struct ladderfix_fake){
            .sha = "ab00000000000000000000000000000000000000000000000000000000000000"});
    add(path_in("r.db"), &fx.key_a, 1, (struct ladderfix_fake){0});
    add(path_in("r.db"), &fx.key_b, 2, (struct ladderfix_fake){0});
    expect_row(path_in("r.db"), "moe/a/ref.decode", RELEASE_STALE, 1, "is for model digest ab");
}

Test(release, a_payload_edited_in_the_database_is_tampered)
{
    all_pass(path_in("r.db"));
    /* bypass the append-only triggers, then flip a FAIL into the payload */
    sqlite3 *db = ladderfix_open_raw(path_in("r.db"));
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(db,
                              "UPDATE receipts SET payload = replace(payload, '\"verdict\":"
                              "\"PASS\"', '\"verdict\":\"PASS\" ') WHERE id = 2",
                              NULL, NULL, &msg),
                 SQLITE_OK, "%s", msg);
    cr_assert_eq(sqlite3_changes(db), 1);
    sqlite3_close(db);
    /* every row is TAMPERED, each naming the altered receipt */
    expect_row(path_in("r.db"), "moe/a/ref.chat", RELEASE_TAMPERED, 2, "receipt 2");
    expect_row(path_in("r.db"), "moe/a/ref.decode", RELEASE_TAMPERED, 2, "receipt 2");
}

/* Delete a FAIL behind a head record: every cell passes, cell 0 then FAILS on the same build,
 * key a writes a head record (its chain ends at the FAIL), and the attacker, with file access,
 * deletes the FAIL row and reruns the cell to a fresh PASS. The chain alone looks whole again
 * (the new PASS extends the receipt before the FAIL); only the head record shows a receipt was
 * removed, and that blocks every row. */
Test(release, a_fail_deleted_behind_a_head_record_is_tampered)
{
    all_pass(path_in("r.db"));
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){.fail = 1});
    struct store *st = NULL;
    struct gate_err err = {0};
    int64_t count = 0;
    cr_assert_eq(store_open(&st, path_in("r.db"), &err), 0, "%s", err.msg);
    cr_assert_eq(store_write_head(st, &fx.key_a, NULL, &count, &err), 0, "%s", err.msg);
    store_close(st);
    cr_assert_eq(count, 3, "key a's chain: receipts 1, 2 and the FAIL 4");
    sqlite3 *db = ladderfix_open_raw(path_in("r.db"));
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(db, "DELETE FROM receipts WHERE id = 4", NULL, NULL, &msg), SQLITE_OK,
                 "%s", msg);
    cr_assert_eq(sqlite3_changes(db), 1);
    sqlite3_close(db);
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){0});
    struct release_result r;
    evaluate(path_in("r.db"), &r);
    cr_expect(strstr(r.store_problem, "receipts were removed"), "store problem: %s",
              r.store_problem);
    for (int i = 0; i < r.n_cells; i++) {
        cr_expect_eq(r.cells[i].state, RELEASE_TAMPERED, "%s is %s, expected TAMPERED (%s)",
                     r.cells[i].name, release_state_name(r.cells[i].state), r.cells[i].reason);
        cr_expect(strstr(r.cells[i].reason, "receipts were removed"), "%s: %s", r.cells[i].name,
                  r.cells[i].reason);
    }
    cr_expect_eq(r.ok, 0, "a release whose FAIL was deleted behind a head record must not be OK");
    release_result_free(&r);
}

/* A forged sign-off: properly signed by a key, but naming a receipt this store never held (as if
 * copied in from elsewhere or made up). Every receipt of the store still verifies; the broken
 * sign-off alone makes every row TAMPERED. */
Test(release, a_sign_off_naming_a_receipt_not_in_the_store_is_tampered)
{
    all_pass(path_in("r.db"));
    struct store *st = NULL;
    struct gate_err err = {0};
    cr_assert_eq(store_open(&st, path_in("r.db"), &err), 0, "%s", err.msg);
    json_t *p = json_pack("{s:[{s:s, s:[i], s:[s]}], s:[], s:s}", "cells", "cell",
                          "moe/a/ref.decode", "receipts", 1, "receipt_sha256",
                          "ab00000000000000000000000000000000000000000000000000000000000000",
                          "anchors", "verdict", "PASS");
    cr_assert_eq(store_add_signoff(st, p, &fx.key_a, &err), 0, "%s", err.msg);
    json_decref(p);
    store_close(st);
    struct release_result r;
    evaluate(path_in("r.db"), &r);
    cr_expect(strstr(r.store_problem, "a sign-off of this store cannot be believed"),
              "store problem: %s", r.store_problem);
    for (int i = 0; i < r.n_cells; i++) {
        cr_expect_eq(r.cells[i].state, RELEASE_TAMPERED, "%s is %s, expected TAMPERED (%s)",
                     r.cells[i].name, release_state_name(r.cells[i].state), r.cells[i].reason);
        cr_expect(strstr(r.cells[i].reason, "sign-off"), "%s: %s", r.cells[i].name,
                  r.cells[i].reason);
    }
    cr_expect_eq(r.ok, 0, "a release with a forged sign-off in its store must not be OK");
    release_result_free(&r);
}

Test(release, a_receipt_signed_by_an_untrusted_key_is_untrusted)
{
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){0});
    /* a key of host "a" the ladder never saw */
    add(path_in("r.db"), &key_x, 1, (struct ladderfix_fake){0});
    /* host a's key signing for host b */
    add(path_in("r.db"), &fx.key_a, 2, (struct ladderfix_fake){0});
    expect_row(path_in("r.db"), "moe/a/ref.chat", RELEASE_UNTRUSTED, 2,
               "which the ladder does not trust for host a");
    expect_row(path_in("r.db"), "moe/b/ref.decode", RELEASE_UNTRUSTED, 3,
               "which the ladder does not trust for host b");
}

Test(release, a_fail_blocks)
{
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){.fail = 1});
    add(path_in("r.db"), &fx.key_a, 1, (struct ladderfix_fake){0});
    add(path_in("r.db"), &fx.key_b, 2, (struct ladderfix_fake){0});
    expect_row(path_in("r.db"), "moe/a/ref.decode", RELEASE_FAIL, 1, "receipt 1 FAILED parity");
}

Test(release, pass_then_fail_on_the_same_build_is_flaky)
{
    all_pass(path_in("r.db"));
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){.fail = 1});
    /* a rerun never erases the failure */
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){0});
    expect_row(path_in("r.db"), "moe/a/ref.decode", RELEASE_FLAKY, 4, "a rerun never erases");
    struct release_result r;
    evaluate(path_in("r.db"), &r);
    cr_expect_eq(r.cells[0].n_pass, 2);
    cr_expect_eq(r.cells[0].n_fail, 1);
    release_result_free(&r);
}

Test(release, an_empty_gate_list_claiming_pass_blocks)
{
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){.no_gates = 1});
    add(path_in("r.db"), &fx.key_a, 1, (struct ladderfix_fake){0});
    add(path_in("r.db"), &fx.key_b, 2, (struct ladderfix_fake){0});
    expect_row(path_in("r.db"), "moe/a/ref.decode", RELEASE_STALE, 1, "has no 'capability' gate");
}

Test(release, a_run_with_looser_settings_cannot_pass_a_strict_ladder)
{
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){.min_cosine = 0.5});
    add(path_in("r.db"), &fx.key_a, 1, (struct ladderfix_fake){0});
    add(path_in("r.db"), &fx.key_b, 2, (struct ladderfix_fake){0});
    expect_row(path_in("r.db"), "moe/a/ref.decode", RELEASE_STALE, 1,
               "ran with parity.min_cosine 0.5 -> 0.999");
}

Test(release, a_fail_rewritten_to_garbage_and_hidden_behind_imports_blocks_everything)
{
    /* issue 11: rewrite a FAIL row's payload and cell to garbage, mark later rows 'import';
     * today's check skipped the unattributable row and linked imports by the stored hash */
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){.fail = 1});
    all_pass(path_in("r.db"));
    sqlite3 *db = ladderfix_open_raw(path_in("r.db"));
    cr_assert_eq(sqlite3_exec(db,
                              "UPDATE receipts SET payload = '{\"x\":1}', cell = 'garbage',"
                              " verdict = 'PASS' WHERE id = 1; UPDATE receipts SET origin ="
                              " 'import' WHERE id > 1",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(db);
    expect_row(path_in("r.db"), "moe/b/ref.decode", RELEASE_TAMPERED, 1,
               "receipt 1 of the store fails verification");
    struct release_result r;
    evaluate(path_in("r.db"), &r);
    cr_expect_eq(r.store_problem_id, 1);
    cr_expect(strstr(r.store_problem, "no receipt of this store can be believed"), "%s",
              r.store_problem);
    cr_expect_eq(r.n_bad_cells, 3);
    release_result_free(&r);
}

Test(release, a_trusted_key_signing_pass_over_failing_numbers_is_judged_fail)
{
    /* issue 10 §4: stored checks and verdicts are not believed; the numbers are re-judged */
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){.fail = 1, .claim_pass = 1});
    add(path_in("r.db"), &fx.key_a, 1, (struct ladderfix_fake){0});
    add(path_in("r.db"), &fx.key_b, 2, (struct ladderfix_fake){0});
    expect_row(path_in("r.db"), "moe/a/ref.decode", RELEASE_FAIL, 1, "receipt 1 FAILED parity");
    struct release_result r;
    evaluate(path_in("r.db"), &r);
    cr_expect(strstr(r.cells[0].disagree, "records PASS for gate parity but its numbers say FAIL"),
              "%s", r.cells[0].disagree);
    release_result_free(&r);
}

Test(release, a_bumped_release_version_makes_old_receipts_stale)
{
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){.release_version = "0.9.0"});
    add(path_in("r.db"), &fx.key_a, 1, (struct ladderfix_fake){0});
    add(path_in("r.db"), &fx.key_b, 2, (struct ladderfix_fake){0});
    expect_row(path_in("r.db"), "moe/a/ref.decode", RELEASE_STALE, 1,
               "is for release rel 0.9.0, not rel 1.0.0");
}

/* Receipts of another release that happens to share this one's version (release "other"
 * 1.0.0, made from the same build and model) do not count for release rel 1.0.0: the release
 * name is compared, not only the version. */
Test(release, a_receipt_of_another_release_with_the_same_version_is_stale)
{
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){.release_name = "other"});
    add(path_in("r.db"), &fx.key_a, 1, (struct ladderfix_fake){0});
    add(path_in("r.db"), &fx.key_b, 2, (struct ladderfix_fake){0});
    expect_row(path_in("r.db"), "moe/a/ref.decode", RELEASE_STALE, 1,
               "is for release other 1.0.0, not rel 1.0.0");
}

Test(release, receipts_made_under_other_trusted_keys_are_stale)
{
    /* issue 11: the trust files' keys are bound into what a receipt is for */
    add(path_in("r.db"), &fx.key_a, 0,
        (struct ladderfix_fake){
            .trust_sha256 = "1111111111111111111111111111111111111111111111111111111111111111"});
    add(path_in("r.db"), &fx.key_a, 1, (struct ladderfix_fake){0});
    add(path_in("r.db"), &fx.key_b, 2, (struct ladderfix_fake){0});
    expect_row(path_in("r.db"), "moe/a/ref.decode", RELEASE_STALE, 1,
               "when the ladder trusted other keys");
}

/* Append an anchor case "conf" for qwen3moe to the test ladder (and drop its unanchored line). */
static void add_anchor(void)
{
    ladderfix_add_anchor(path_in("ladder.yaml"));
}

Test(release, a_missing_anchor_blocks_and_says_the_judge_is_not_shown_right)
{
    add_anchor();
    all_pass(path_in("r.db"));
    expect_row(path_in("r.db"), "conf", RELEASE_MISSING, 0,
               "the judge itself is not shown to be right for qwen3moe");
    struct release_result r;
    evaluate(path_in("r.db"), &r);
    cr_expect_eq(r.n_anchors, 1);
    cr_expect_eq(r.anchors[0].kind, RELEASE_ROW_ANCHOR);
    cr_expect_eq(r.n_bad_anchors, 1);
    cr_expect_eq(r.n_bad_cells, 0, "the cells themselves pass");
    release_result_free(&r);
}

/* Exclude moe/a/ref.chat from the test ladder's first cell entry. */
static void exclude_chat(void)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "sed -i 's|modes: \\[ref.decode, ref.chat\\]}|modes: [ref.decode, ref.chat], exclude:"
             " [{mode: ref.chat, reason: \"flaky path, fixed next release\"}]}|' '%s'",
             path_in("ladder.yaml"));
    cr_assert_eq(system(cmd), 0);
}

Test(release, an_exclusion_cannot_hide_a_failure)
{
    /* issue 10 §3: excluding a cell after it FAILED for this build does not make it vanish */
    /* moe/a/ref.chat FAILS */
    add(path_in("r.db"), &fx.key_a, 1, (struct ladderfix_fake){.fail = 1});
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){0});
    add(path_in("r.db"), &fx.key_b, 2, (struct ladderfix_fake){0});
    exclude_chat();
    struct release_result r;
    evaluate(path_in("r.db"), &r);
    cr_expect_eq(r.n_cells, 2);
    cr_expect_eq(r.n_excluded, 1);
    const struct release_row *w = row_of(&r, "moe/a/ref.chat");
    cr_assert(w);
    cr_expect_eq(w->kind, RELEASE_ROW_EXCLUDED);
    cr_expect_eq(w->state, RELEASE_FAIL, "%s", release_state_name(w->state));
    cr_expect_eq(w->blocking_id, 1);
    cr_expect(strstr(w->reason, "receipt 1 FAILED"), "%s", w->reason);
    cr_expect_eq(r.n_bad_cells, 1);
    cr_expect_eq(r.ok, 0);
    release_result_free(&r);
    /* without the failure the excluded cell is EXCLUDED and the release passes (cells are now
     * moe/a/ref.decode and moe/b/ref.decode) */
    char db2[1024];
    snprintf(db2, sizeof db2, "%s", path_in("r2.db"));
    add(db2, &fx.key_a, 0, (struct ladderfix_fake){0});
    add(db2, &fx.key_b, 1, (struct ladderfix_fake){0});
    evaluate(db2, &r);
    w = row_of(&r, "moe/a/ref.chat");
    cr_assert(w);
    cr_expect_eq(w->state, RELEASE_EXCLUDED, "%s", release_state_name(w->state));
    cr_expect_eq(r.ok, 1);
    release_result_free(&r);
}

/* An exclusion cannot hide a flaky cell either: moe/a/ref.chat PASSED once and FAILED once on
 * this build, then the ladder excludes it. The excluded row is FLAKY, not EXCLUDED, and it
 * blocks the release like a FAIL does. */
Test(release, an_exclusion_cannot_hide_a_flaky_cell)
{
    add(path_in("r.db"), &fx.key_a, 1, (struct ladderfix_fake){0});
    add(path_in("r.db"), &fx.key_a, 1, (struct ladderfix_fake){.fail = 1});
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){0});
    add(path_in("r.db"), &fx.key_b, 2, (struct ladderfix_fake){0});
    exclude_chat();
    struct release_result r;
    evaluate(path_in("r.db"), &r);
    cr_expect_eq(r.n_excluded, 1);
    const struct release_row *w = row_of(&r, "moe/a/ref.chat");
    cr_assert(w, "no row moe/a/ref.chat");
    cr_expect_eq(w->kind, RELEASE_ROW_EXCLUDED);
    cr_expect_eq(w->state, RELEASE_FLAKY, "moe/a/ref.chat is %s, expected FLAKY (%s)",
                 release_state_name(w->state), w->reason);
    cr_expect_eq(r.n_bad_cells, 1, "the flaky excluded cell is the one bad cell");
    cr_expect_eq(r.ok, 0, "a release with a flaky excluded cell must not be OK");
    release_result_free(&r);
}

/* Run the command layer's release check (what `gate release check` does, with fx.self as the
 * build); return its exit code and leave its output in out (malloc'd). */
static int check_release(const char *db, const char *sign_key, char **out)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    struct release_options o = {.ladder = path_in("ladder.yaml"), .db = db, .sign_key = sign_key};
    int rc = release_check_opts(f, &o, &fx.self);
    fclose(f);
    *out = buf;
    return rc;
}

/* The one test of what `gate release check` prints and exits with: the matrix (cells,
 * EXCLUDED, the anchor row), the blocking rows each naming its receipt, receipt-borne text
 * escaped, the exit codes 1 / 0 / 2 and the sign-off lines. */
Test(release, release_check_prints_the_matrix_blocking_rows_and_exit_codes)
{
    add_anchor();
    exclude_chat(); /* cells: moe/a/ref.decode, moe/b/ref.decode; excluded: moe/a/ref.chat */
    /* moe/a/ref.decode FAILs, moe/b/ref.decode only has a receipt from another build whose
     * commit carries a terminal escape */
    add(path_in("r.db"), &fx.key_a, 0, (struct ladderfix_fake){.fail = 1});
    add(path_in("r.db"), &fx.key_b, 1, (struct ladderfix_fake){.commit = "bad\x1b]0;pwned\x07"});
    char *out = NULL;
    int rc = check_release(path_in("r.db"), NULL, &out);
    cr_expect_eq(rc, 1, "%s", out);
    static const char *const want[] = {
        "2 required cells, 1 excluded, 1 anchor case\n",
        "model                a/ref.decode           b/ref.decode           a/ref.chat",
        "moe                  FAIL                   STALE                  EXCLUDED",
        "anchor               MISSING                (judge on trial: conf, qwen3moe)",
        "excluded: moe/a/ref.chat",
        "RELEASE BLOCKED: 2 of 2 required cells and 1 of 1 anchor case are not PASS",
        "  anchor conf                              MISSING   no receipt for this build",
        "  moe/a/ref.decode                         FAIL      receipt 1 FAILED parity",
        "  moe/b/ref.decode                         STALE     receipt 2 is for build"
        " bad\\x1b]0;pwned\\x07",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(strstr(out, want[i]), "output lacks \"%s\":\n%s", want[i], out);
    cr_expect_null(strchr(out, '\x1b'), "a raw escape reached the terminal:\n%s", out);
    free(out);
    /* --sign on a blocked release: exit 1, nothing signed */
    rc = check_release(path_in("r.db"), path_in("a.key"), &out);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "not signed: the release is blocked"), "%s", out);
    free(out);
    /* a release where everything passes: exit 0, RELEASE OK, and --sign writes the sign-off */
    char db2[1024];
    snprintf(db2, sizeof db2, "%s", path_in("ok.db"));
    add(db2, &fx.key_a, 0, (struct ladderfix_fake){0});
    add(db2, &fx.key_b, 1, (struct ladderfix_fake){0});
    /* an anchor receipt cannot be made here: the ladder un-anchors qwen3moe again instead */
    ladderfix_drop_anchor(path_in("ladder.yaml"), "report test");
    rc = check_release(db2, NULL, &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "RELEASE OK: all 2 required cells and 0 anchor cases PASS"), "%s", out);
    cr_expect(strstr(out, "note: judge not anchored for qwen3moe: report test"), "%s", out);
    free(out);
    rc = check_release(db2, path_in("a.key"), &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "sign-off written to"), "%s", out);
    free(out);
    /* a sign-off with a key that cannot be read: exit 2 before any verdict is printed */
    rc = check_release(db2, path_in("missing.key"), &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect_null(strstr(out, "RELEASE OK"), "%s", out);
    free(out);
}

Test(release, a_fleet_exports_imports_and_signs_off)
{
    struct gate_err err = {0};
    add(path_in("host-a.db"), &fx.key_a, 0, (struct ladderfix_fake){0});
    add(path_in("host-a.db"), &fx.key_a, 1, (struct ladderfix_fake){0});
    add(path_in("host-b.db"), &fx.key_b, 2, (struct ladderfix_fake){0});
    struct store *a = NULL, *b = NULL, *all = NULL;
    cr_assert_eq(store_open(&a, path_in("host-a.db"), &err), 0, "%s", err.msg);
    cr_assert_eq(store_open(&b, path_in("host-b.db"), &err), 0, "%s", err.msg);
    cr_assert_eq(store_export(a, path_in("a.jsonl"), &err), 0, "%s", err.msg);
    cr_assert_eq(store_export(b, path_in("b.jsonl"), &err), 0, "%s", err.msg);
    store_close(a);
    store_close(b);
    /* host a alone is not a release */
    expect_row(path_in("host-a.db"), "moe/b/ref.decode", RELEASE_MISSING, 0, "no receipt");
    cr_assert_eq(store_open(&all, path_in("fleet.db"), &err), 0, "%s", err.msg);
    int n = 0;
    cr_assert_eq(store_import(all, path_in("a.jsonl"), &n, &err), 0, "%s", err.msg);
    cr_expect_eq(n, 2);
    cr_assert_eq(store_import(all, path_in("b.jsonl"), &n, &err), 0, "%s", err.msg);
    cr_expect_eq(n, 1);
    store_close(all);
    struct release_result r;
    evaluate(path_in("fleet.db"), &r);
    cr_expect_eq(r.ok, 1, "%s: %s", r.cells[0].name, r.cells[0].reason);
    cr_expect_eq(r.n_receipts, 3);
    /* sign-off: names each cell's PASS receipts in the fleet store, then a head record */
    struct ladder *l = NULL;
    struct store *st = NULL;
    cr_assert_eq(ladder_load(&l, path_in("ladder.yaml"), &err), 0, "%s", err.msg);
    cr_assert_eq(store_open(&st, path_in("fleet.db"), &err), 0, "%s", err.msg);
    char head[65] = "";
    int64_t count = 0;
    cr_expect_eq(release_sign(l, st, &fx.self, &r, &fx.key_a, head, &count, &err), 0, "%s",
                 err.msg);
    cr_expect_eq(strlen(head), 64);
    cr_expect_gt(count, 0);
    /* the sign-off binds each PASS receipt by its hash, not only by this database's row id
     * (an aggregated store holds no local receipt, so its chain head says nothing) */
    {
        sqlite3 *db = NULL;
        sqlite3_stmt *q = NULL;
        cr_assert_eq(sqlite3_open(path_in("fleet.db"), &db), SQLITE_OK);
        cr_assert_eq(sqlite3_prepare_v2(db, "SELECT payload FROM signoffs", -1, &q, NULL),
                     SQLITE_OK);
        cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
        json_t *so = json_loads((const char *)sqlite3_column_text(q, 0), 0, NULL);
        cr_assert(so);
        int n_hashes = 0;
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(so, "cells"), i, c)
        {
            json_t *ids = json_object_get(c, "receipts"),
                   *hs = json_object_get(c, "receipt_sha256");
            cr_expect_eq(json_array_size(hs), json_array_size(ids), "cell %zu", i);
            for (size_t j = 0; j < json_array_size(hs); j++) {
                sqlite3_stmt *h = NULL;
                cr_assert_eq(
                    sqlite3_prepare_v2(db, "SELECT hash FROM receipts WHERE id = ?", -1, &h, NULL),
                    SQLITE_OK);
                sqlite3_bind_int64(h, 1, json_integer_value(json_array_get(ids, j)));
                cr_assert_eq(sqlite3_step(h), SQLITE_ROW);
                cr_expect_str_eq(json_string_value(json_array_get(hs, j)),
                                 (const char *)sqlite3_column_text(h, 0));
                sqlite3_finalize(h);
                n_hashes++;
            }
        }
        cr_expect_eq(n_hashes, 3, "every PASS receipt of the fleet is named by hash");
        json_decref(so);
        sqlite3_finalize(q);
        sqlite3_close(db);
    }
    /* a blocked release is never signed */
    struct release_result blocked = r;
    blocked.ok = 0;
    err_clear(&err);
    cr_expect_eq(release_sign(l, st, &fx.self, &blocked, &fx.key_a, head, &count, &err),
                 ERR_RUNTIME);
    cr_expect(strstr(err.msg, "blocked"), "%s", err.msg);
    store_close(st);
    ladder_free(l);
    release_result_free(&r);
}

Test(release, an_import_file_with_one_forged_receipt_is_refused_whole)
{
    struct gate_err err = {0};
    all_pass(path_in("src.db"));
    struct store *s = NULL;
    cr_assert_eq(store_open(&s, path_in("src.db"), &err), 0, "%s", err.msg);
    cr_assert_eq(store_export(s, path_in("x.jsonl"), &err), 0, "%s", err.msg);
    store_close(s);
    /* forge: change a byte of the second line's base64 payload */
    size_t n = 0;
    char *txt = (char *)check_slurp(path_in("x.jsonl"), &n);
    cr_assert(txt);
    char *line2 = strchr(txt, '\n') + 1;
    char *p = strstr(line2, "\"payload\":\"") + 11 + 40;
    *p = *p == 'A' ? 'B' : 'A';
    FILE *f = fopen(path_in("forged.jsonl"), "wb");
    fwrite(txt, 1, n, f);
    fclose(f);
    free(txt);
    struct store *dst = NULL;
    cr_assert_eq(store_open(&dst, path_in("dst.db"), &err), 0, "%s", err.msg);
    int k = 0;
    cr_expect_neq(store_import(dst, path_in("forged.jsonl"), &k, &err), 0);
    cr_expect(strstr(err.msg, "forged.jsonl:2: receipt refused"), "%s", err.msg);
    store_close(dst);
    expect_row(path_in("dst.db"), "moe/a/ref.decode", RELEASE_MISSING, 0, "no receipt");
    struct release_result r;
    evaluate(path_in("dst.db"), &r);
    cr_expect_eq(r.n_bad_cells, 3);
    cr_expect_eq(r.n_receipts, 0);
    release_result_free(&r);
}

/* ---- gate run in process: result rows and progress events ---------------------------------- */

struct events {
    char log[64][96]; /* "KIND cell gate verdict" per event */
    int n;
    int n_finished_with_seconds;
    int64_t receipt_id;
    char head[65];
};

static void on_event(void *ctx, const struct run_event *ev)
{
    struct events *e = ctx;
    static const char *const K[] = {"STARTED", "SYNTH", "CELL", "GATE", "DONE", "RECEIPT", "HEAD"};
    if (ev->kind == RUN_EV_SYNTH || e->n == 64)
        return;
    snprintf(e->log[e->n++], sizeof e->log[0], "%s %s %s %s", K[ev->kind],
             ev->cell ? ev->cell : "-", ev->gate ? ev->gate : "-", ev->verdict ? ev->verdict : "-");
    e->n_finished_with_seconds += ev->kind == RUN_EV_GATE_FINISHED && ev->seconds > 0;
    if (ev->kind == RUN_EV_RECEIPT)
        e->receipt_id = ev->receipt_id;
    if (ev->kind == RUN_EV_HEAD && ev->head)
        snprintf(e->head, sizeof e->head, "%s", ev->head);
}

Test(release, run_ladder_returns_rows_and_reports_progress_through_the_callback)
{
    char gsha[65];
    ladderfix_record_goldens(conformance_path("qwen3moe-tiny-q4_k_m", "model.gguf"),
                             path_in("one-goldens.json"), 16, gsha);
    ladderfix_alter_goldens(path_in("one-goldens.json"), gsha);
    FILE *f = fopen(path_in("one.yaml"), "w");
    fprintf(f,
            "release: {name: rel, version: 1.0.0}\n"
            "models:\n  moe: {path: %s/conformance/qwen3moe-tiny-q4_k_m/model.gguf,"
            " sha256: " MOE_SHA ", arch: qwen3moe}\n"
            "hosts:\n  a: {device: none, trust: ['file:a.pub']}\n"
            "modes: [ref.decode]\n"
            "cells:\n  - {model: moe, host: a, mode: ref.decode}\n"
            "gates:\n  defaults:\n    parity: {positions: 64}\n"
            "    falsify: {faults: [skip_qk_norm], sweep_samples: 0, power_layers: 1}\n"
            "    golden: {goldens: one-goldens.json, sha256: %s}\n"
            "    throughput: {runs: 3, warmup: 0, prompt_tokens: 8, decode_tokens: 2"
            "}\n"
            "unanchored: {qwen3moe: 'runner test'}\n",
            check_shared_dir(), gsha);
    fclose(f);
    struct run_options o = {.ladder = path_in("one.yaml"),
                            .host = "a",
                            .db = path_in("one.db"),
                            .key = path_in("a.key"),
                            .threads = 2,
                            .input_seed = 0x5eed}; /* verdicts asserted: not a draw's */
    struct run_result res;
    struct events ev;
    memset(&ev, 0, sizeof ev);
    struct gate_err err = {0};
    /* goldens that expect another first token than the twin produces: the golden gate is a
     * FAILED row (a judged failure, not an input error), every other gate runs and passes */
    cr_assert_eq(run_ladder(&o, on_event, &ev, &res, &err), 0, "%s", err.msg);
    cr_assert_eq(res.n, 1);
    const struct run_cell_result *c = &res.cells[0];
    cr_expect_str_eq(c->name, "moe/a/ref.decode");
    cr_expect_str_eq(c->verdict, "FAIL");
    cr_expect_eq(c->pass, 0);
    cr_expect_eq(res.n_pass, 0);
    cr_expect_eq(c->receipt_id, 1);
    cr_expect_str_empty(c->store_error);
    cr_expect(c->gates_json && json_object_get(c->gates_json, "parity"));
    cr_assert_eq(c->n_gates, 5);
    static const char *const names[] = {"capability", "parity", "golden", "throughput", "falsify"};
    for (int g = 0; g < 5; g++) {
        cr_expect_str_eq(c->gates[g].name, names[g]);
        cr_expect_str_eq(c->gates[g].verdict, g == 2 ? "FAIL" : "PASS", "%s: %s", c->gates[g].name,
                         c->gates[g].summary);
    }
    cr_expect(strstr(c->gates[2].summary, "differs at generated index 0") &&
                  strstr(c->gates[2].summary, "WRONG"),
              "the summary of a failed"
              " gate is its reason: %s",
              c->gates[2].summary);
    cr_expect(strstr(c->gates[1].summary, "64 pos"),
              "the summary of a passed gate is its"
              " numbers: %s",
              c->gates[1].summary);
    cr_expect_eq(res.head_written, 1);
    cr_expect_eq(strlen(res.head), 64);
    cr_expect_str_eq(res.key_id, fx.key_a.id);
    /* the events, in order: started, the cell, each gate begun and finished, the receipt, the
     * head */
    static const char *const want[] = {
        "STARTED - - -",
        "CELL moe/a/ref.decode - -",
        "GATE moe/a/ref.decode capability -",
        "DONE moe/a/ref.decode capability PASS",
        "GATE moe/a/ref.decode parity -",
        "DONE moe/a/ref.decode parity PASS",
        "GATE moe/a/ref.decode golden -",
        "DONE moe/a/ref.decode golden FAIL",
        "GATE moe/a/ref.decode throughput -",
        "DONE moe/a/ref.decode throughput PASS",
        "GATE moe/a/ref.decode falsify -",
        "DONE moe/a/ref.decode falsify PASS",
        "RECEIPT moe/a/ref.decode - FAIL",
        "HEAD - - -",
    };
    cr_assert_eq(ev.n, 14, "%d events", ev.n);
    for (int i = 0; i < 14; i++)
        cr_expect_str_eq(ev.log[i], want[i], "event %d", i);
    cr_expect_eq(ev.n_finished_with_seconds, 5, "every gate that ran reports its duration");
    cr_expect_eq(ev.receipt_id, 1);
    cr_expect_str_eq(ev.head, res.head);
    run_result_free(&res);
    /* nothing ran: a status and a sentence, no rows */
    o.only = "nothing/*";
    err_clear(&err);
    cr_expect_eq(run_ladder(&o, NULL, NULL, &res, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "run: no cell of host 'a' matches nothing/*"), "%s", err.msg);
    cr_expect_eq(res.n, 0);
    run_result_free(&res);
}

/* metrics.<path...> of gate g of cell ci of a run (NULL when absent) */
static const json_t *gate_metric(const struct run_result *r, int ci, const char *g, const char *a,
                                 const char *b)
{
    const json_t *m =
        json_object_get(json_object_get(json_object_get(r->cells[ci].gates_json, g), "metrics"), a);
    return b ? json_object_get(m, b) : m;
}

/* Every cell meets its own inputs, new on every run: parity's prefill split comes from the
 * cell's name mixed with the run's input seed (two prefill cells of one model differ; one cell
 * differs between two seeds), and falsify's clean run judges exactly what parity judged (the
 * same split, the same half-prose sequence: the run's, not a fixed one). */
Test(release, each_cell_s_prefill_split_and_falsify_s_sequence_come_from_the_cell_and_the_run)
{
    char gsha[65];
    ladderfix_record_goldens(conformance_path("qwen3moe-tiny-q4_k_m", "model.gguf"),
                             path_in("two-goldens.json"), 16, gsha);
    FILE *f = fopen(path_in("two.yaml"), "w");
    fprintf(f,
            "release: {name: rel, version: 1.0.0}\n"
            "models:\n  moe: {path: %s/conformance/qwen3moe-tiny-q4_k_m/model.gguf,"
            " sha256: " MOE_SHA ", arch: qwen3moe}\n"
            "hosts:\n  a: {device: none, trust: ['file:a.pub']}\n"
            "modes: [ref.prefill, cpu.prefill]\n"
            "cells:\n  - {model: moe, host: a, mode: ref.prefill}\n"
            "  - {model: moe, host: a, mode: cpu.prefill}\n"
            "gates:\n  defaults:\n    parity: {positions: %d}\n"
            "    falsify: {faults: [skip_qk_norm], sweep_samples: 0, power_layers: 1}\n"
            "    golden: {goldens: two-goldens.json, sha256: %s}\n"
            "    throughput: {runs: 3, warmup: 0, prompt_tokens: 8, decode_tokens: 2}\n"
            "unanchored: {qwen3moe: 'runner test'}\n",
            check_shared_dir(), check_asan() ? 96 : 256, gsha); /* 24 s of the ASan run at 256 */
    fclose(f);
    const uint64_t seeds[2] = {0x5eed, 0x5eee};
    json_t *split[2][2];
    for (int s = 0; s < 2; s++) {
        struct run_options o = {.ladder = path_in("two.yaml"),
                                .host = "a",
                                .db = path_in("two.db"),
                                .key = path_in("a.key"),
                                .threads = 1,
                                .input_seed = seeds[s]};
        struct run_result res;
        struct gate_err err = {0};
        cr_assert_eq(run_ladder(&o, NULL, NULL, &res, &err), 0, "%s", err.msg);
        cr_assert_eq(res.n, 2);
        for (int c = 0; c < 2; c++) {
            const json_t *chunks = gate_metric(&res, c, "parity", "prefill_chunks", NULL);
            cr_assert(json_array_size(chunks) > 0, "%s: no prefill split recorded",
                      res.cells[c].name);
            split[s][c] = json_deep_copy(chunks);
            const json_t *fc = gate_metric(&res, c, "falsify", "clean", "prefill_chunks");
            cr_expect(json_equal(fc, chunks), "%s: falsify's clean run split the prompt otherwise",
                      res.cells[c].name);
            const json_int_t prose = json_integer_value(
                json_object_get(gate_metric(&res, c, "parity", "prose", NULL), "tokens"));
            const json_t *fprose =
                json_object_get(gate_metric(&res, c, "falsify", "clean", "prose"), "tokens");
            cr_expect_gt(prose, 0, "%s: parity judged no prose", res.cells[c].name);
            cr_expect_eq(json_integer_value(fprose), prose,
                         "%s: falsify's clean run judged another sequence than parity's",
                         res.cells[c].name);
        }
        run_result_free(&res);
    }
    cr_expect(!json_equal(split[0][0], split[0][1]), "two cells, one prefill split");
    cr_expect(!json_equal(split[0][0], split[1][0]), "two input seeds, one prefill split");
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < 2; c++)
            json_decref(split[s][c]);
}

/* Copy the file src to dst with the first `from` replaced by `to`. Asserts that it occurs. */
static void copy_replacing(const char *src, const char *dst, const char *from, const char *to)
{
    char *text = check_slurp_text(src);
    cr_assert(text);
    char *at = strstr(text, from);
    cr_assert(at, "'%s' not in %s", from, src);
    FILE *f = fopen(dst, "w");
    cr_assert(f);
    fprintf(f, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    cr_assert_eq(fclose(f), 0);
    free(text);
}

/* The cheap gates of the one-cell ladders below (each gate still runs) */
#define ONE_CELL_CHEAP                                                                             \
    "    falsify: {faults: [skip_qk_norm], sweep_samples: 0, power_layers: 1}\n"                   \
    "    throughput: {runs: 3, warmup: 0, prompt_tokens: 8, decode_tokens: 2"

/* A cell whose gate could not decide is not a passed cell: its row, the run's count of passed
 * cells and so gate run's exit status say so (throughput inconclusive: three runs give no
 * interval, and max_runs is spent) */
Test(release, a_cell_whose_gate_is_an_error_is_not_counted_as_passed)
{
    const char *lp = ladderfix_one_cell(&fx, "err.yaml", NULL, "ref.decode", NULL,
                                        ONE_CELL_CHEAP ", max_runs: 3, min_decode_tps: 1}\n");
    struct run_options o = {.ladder = lp,
                            .host = "a",
                            .db = path_in("err.db"),
                            .key = path_in("a.key"),
                            .threads = 1,
                            .input_seed = 0x5eed};
    struct run_result res;
    struct gate_err err = {0};
    cr_assert_eq(run_ladder(&o, NULL, NULL, &res, &err), 0, "%s", err.msg);
    cr_assert_eq(res.n, 1);
    cr_expect_str_eq(res.cells[0].verdict, "ERROR");
    cr_expect_eq(res.cells[0].pass, 0, "an ERROR cell counted as passed");
    cr_expect_eq(res.n_pass, 0);
    run_result_free(&res);
}

/* A host may trust several keys: the run's key is trusted when it is any of them, the first
 * included (refused up front otherwise, before any cell runs) */
Test(release, a_run_key_is_trusted_wherever_it_stands_in_the_host_s_trust_list)
{
    const char *one = ladderfix_one_cell(&fx, "t1.yaml", NULL, "ref.decode", NULL, NULL);
    char lp[1024];
    snprintf(lp, sizeof lp, "%s", path_in("t2.yaml"));
    copy_replacing(one, lp, "trust: ['file:a.pub']", "trust: ['file:a.pub', 'file:b.pub']");
    struct run_options o = {.ladder = lp,
                            .host = "a",
                            .db = path_in("t.db"),
                            .key = path_in("a.key"),
                            .only = "nothing/*",
                            .input_seed = 0x5eed};
    struct run_result res;
    struct gate_err err = {0};
    cr_expect_eq(run_ladder(&o, NULL, NULL, &res, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "no cell of host 'a' matches nothing/*"),
              "the trusted key was refused: %s", err.msg);
    run_result_free(&res);
}

/* A cell whose receipt could not be stored is not a passed cell, whatever its gates said: no
 * receipt will ever count for it (the store refuses every insert here, as a full disk would) */
Test(release, a_cell_whose_receipt_was_not_stored_is_not_counted_as_passed)
{
    const char *lp =
        ladderfix_one_cell(&fx, "st.yaml", NULL, "ref.decode", NULL, ONE_CELL_CHEAP "}\n");
    struct store *st = NULL;
    struct gate_err err = {0};
    cr_assert_eq(store_open(&st, path_in("full.db"), &err), 0, "%s", err.msg);
    store_close(st);
    sqlite3 *raw = ladderfix_open_raw(path_in("full.db"));
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(raw,
                              "CREATE TRIGGER full BEFORE INSERT ON receipts"
                              " BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END",
                              NULL, NULL, &msg),
                 SQLITE_OK, "%s", msg ? msg : "");
    sqlite3_close(raw);
    struct run_options o = {.ladder = lp,
                            .host = "a",
                            .db = path_in("full.db"),
                            .key = path_in("a.key"),
                            .threads = 1,
                            .input_seed = 0x5eed};
    struct run_result res;
    cr_expect_eq(run_ladder(&o, NULL, NULL, &res, &err), ERR_ENV);
    cr_assert_eq(res.n, 1);
    cr_expect_str_eq(res.cells[0].verdict, "PASS", "the gates passed: %s",
                     res.cells[0].store_error);
    cr_expect_str_neq(res.cells[0].store_error, "");
    cr_expect_eq(res.cells[0].pass, 0, "a cell without a receipt counted as passed");
    cr_expect_eq(res.n_pass, 0);
    run_result_free(&res);
}

/* The receipt hash of row id in db. */
static int hash_of_row(void *ctx, const struct store_row *row)
{
    snprintf(ctx, 65, "%s", row->hash);
    return 0;
}

/* `baseline: previous` in gate run (issue 27 §2): the first release of a cell has no earlier
 * receipt (recorded as none; throughput judged on its floors), the next release compares with
 * it: the receipt of the earlier run, found under this run's host and thread count, is recorded
 * with this build's ratio to it. */
Test(release, gate_run_compares_throughput_with_the_previous_release_s_receipt)
{
    const char *l10 = ladderfix_one_cell(&fx, "b10.yaml", NULL, "ref.decode", NULL,
                                         ONE_CELL_CHEAP ", baseline: previous}\n");
    char lp[2][1024];
    snprintf(lp[1], sizeof lp[1], "%s", l10);
    snprintf(lp[0], sizeof lp[0], "%s", path_in("b09.yaml"));
    copy_replacing(lp[1], lp[0], "version: 1.0.0", "version: 0.9.0");
    int64_t first = 0;
    for (int v = 0; v < 2; v++) {
        struct run_options o = {.ladder = lp[v],
                                .host = "a",
                                .db = path_in("b.db"),
                                .key = path_in("a.key"),
                                .threads = 1,
                                .input_seed = 0x5eed};
        struct run_result res;
        struct gate_err err = {0};
        cr_assert_eq(run_ladder(&o, NULL, NULL, &res, &err), 0, "%s", err.msg);
        cr_assert_eq(res.n, 1);
        const json_t *t = json_object_get(res.cells[0].gates_json, "throughput");
        const json_t *b = json_object_get(json_object_get(t, "metrics"), "baseline");
        if (!v) {
            cr_expect_str_eq(res.cells[0].verdict, "PASS", "the first release must pass: %s",
                             json_string_value(json_object_get(t, "reason")));
            cr_expect(json_is_string(json_object_get(b, "none")), "no earlier receipt: %s",
                      json_string_value(json_object_get(b, "refused")));
            first = res.cells[0].receipt_id;
        } else {
            char want[65] = "";
            struct store *st = NULL;
            cr_assert_eq(store_open(&st, path_in("b.db"), &err), 0, "%s", err.msg);
            cr_assert_eq(store_get(st, first, hash_of_row, want, &err), 0, "%s", err.msg);
            store_close(st);
            cr_expect_str_eq(json_string_value(json_object_get(b, "receipt")), want, "%s",
                             json_string_value(json_object_get(b, "refused")));
            cr_expect_str_eq(json_string_value(json_object_get(b, "version")), "0.9.0");
            cr_expect(json_object_get(json_object_get(t, "metrics"), "vs_baseline"),
                      "no ratio to the baseline recorded");
        }
        run_result_free(&res);
    }
}

Test(release, the_ticker_estimate_comes_from_earlier_cells_of_the_same_gate)
{
    struct report_run r;
    memset(&r, 0, sizeof r);
    cr_expect_lt(report_run_estimate(&r, "moe", "parity"), 0, "nothing ran yet: no estimate");
    struct run_event ev = {.kind = RUN_EV_GATE_FINISHED,
                           .cell = "moe/a/ref.decode",
                           .model = "moe",
                           .gate = "parity",
                           .verdict = "PASS",
                           .summary = "",
                           .seconds = 4.0};
    r.json = 1; /* nothing printed */
    report_run_progress(&r, &ev);
    ev.seconds = 6.0;
    report_run_progress(&r, &ev);
    ev.model = "dense";
    ev.seconds = 1.0;
    report_run_progress(&r, &ev);
    cr_expect_float_eq(report_run_estimate(&r, "moe", "parity"), 5.0, 1e-12);
    cr_expect_float_eq(report_run_estimate(&r, "dense", "parity"), 1.0, 1e-12);
    /* a model not seen yet: the mean over every earlier cell */
    cr_expect_float_eq(report_run_estimate(&r, "other", "parity"), 11.0 / 3.0, 1e-12);
    cr_expect_lt(report_run_estimate(&r, "moe", "golden"), 0);
    report_run_end(&r);
}

/* ---- gate run through the CLI ---------------------------------------------------------------- */

/* The subject is cpu.decode (the fast engine: the judge's forwards are the runs' cost) with one
 * fault, no sweep and one layer of power probes: the test is about the command, its exit codes and
 * the store; the first run is two processes into one database at once. */
Test(release, gate_run_end_to_end_writes_verifiable_receipts, .timeout = 1200)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin, "GATE_BIN is not set");
    FILE *f = fopen(path_in("run.yaml"), "w");
    fprintf(f,
            "release: {name: rel, version: '%s'}\n"
            "models:\n  moe: {path: %s/conformance/qwen3moe-tiny-q4_k_m/model.gguf,"
            " sha256: " MOE_SHA ", arch: qwen3moe}\n"
            "  wrong: {path: %s/conformance/qwen3-dense-tiny-q8_0/model.gguf,"
            " sha256: " MOE_SHA ", arch: qwen3}\n"
            "hosts:\n  a: {device: none, trust: ['file:a.pub']}\n"
            "  gpu: {device: {name: NVIDIA H200}, trust: ['file:a.pub']}\n"
            "modes: [cpu.decode, cuda.decode]\n"
            "cells:\n  - {model: moe, host: a, mode: cpu.decode}\n"
            "  - {model: wrong, host: a, mode: cpu.decode}\n"
            "  - {model: moe, host: gpu, mode: cuda.decode}\n"
            "gates:\n  defaults:\n    parity: {positions: 64}\n"
            "    falsify: {faults: [skip_qk_norm], sweep_samples: 0, power_layers: 1}\n"
            "    throughput: {runs: 3, warmup: 0, prompt_tokens: 16,"
            " decode_tokens: 4}\n    golden: {goldens: goldens.json, tokens: 8}\n"
            "  overrides:\n    - {match: {model: wrong}, falsify: [skip_qk_norm]}\n"
            "unanchored: {qwen3: 'end-to-end runner test', qwen3moe: 'end-to-end runner test'}\n",
            GATE_VERSION, check_shared_dir(), check_shared_dir());
    fclose(f);
    char log[1024];
    snprintf(log, sizeof log, "%s", path_in("run.log"));
    /* no key: a usage error naming the fix */
    cr_expect_eq(ladderfix_sh("%s run %s --host a --db %s --key %s >%s 2>&1", bin,
                              path_in("run.yaml"), path_in("run.db"), path_in("none.key"), log),
                 2);
    size_t n;
    char *txt;
    /* goldens: recorded for moe, refused for "wrong" (its file is not the pinned one) */
    cr_expect_eq(ladderfix_sh("%s golden record %s >%s 2>&1", bin, path_in("run.yaml"), log), 2);
    txt = (char *)check_slurp(log, &n);
    cr_expect(txt && strstr(txt, "not recording goldens for another file"), "%s", txt ? txt : "");
    free(txt);
    /* the goldens are evidence: the ladder must pin the file it now is */
    char gsha[65];
    cr_assert_eq(identity_file_sha256(path_in("goldens.json"), gsha, NULL), 0);
    f = fopen(path_in("run.yaml"), "a");
    fprintf(f, "# pinned after recording\n");
    fclose(f);
    {
        size_t yn;
        char *y = (char *)check_slurp(path_in("run.yaml"), &yn);
        char *at = strstr(y, "golden: {goldens: goldens.json,");
        cr_assert(at);
        f = fopen(path_in("run.yaml"), "w");
        fprintf(f, "%.*sgolden: {goldens: goldens.json, sha256: %s,%s", (int)(at - y), y, gsha,
                at + strlen("golden: {goldens: goldens.json,"));
        fclose(f);
        free(y);
    }
    /* a host that declares a GPU, on a build or machine without one: environment error. The
     * device is hidden with CUDA_VISIBLE_DEVICES="" (the CUDA runtime's own switch), so this holds
     * on a CUDA build on an H200 as on a CPU-only build */
    cr_expect_eq(
        ladderfix_sh("CUDA_VISIBLE_DEVICES= %s run %s --host gpu --db %s --key %s >%s 2>&1", bin,
                     path_in("run.yaml"), path_in("run.db"), path_in("a.key"), log),
        3);
    txt = (char *)check_slurp(log, &n);
    cr_expect(txt && strstr(txt, "declares GPU 'NVIDIA H200' but none is usable"), "%s",
              txt ? txt : "");
    free(txt);
    /* host a, model moe, two gate run processes writing the same database at once: both
     * succeed (busy timeout), and in each every gate passes */
    char yaml[1024], db[1024], key[1024];
    snprintf(yaml, sizeof yaml, "%s", path_in("run.yaml"));
    snprintf(db, sizeof db, "%s", path_in("run.db"));
    snprintf(key, sizeof key, "%s", path_in("a.key"));
    cr_assert_eq(
        ladderfix_sh("(%s run %s --host a --db %s --key %s --only 'moe/*' >%s.1 2>&1 & "
                     "%s run %s --host a --db %s --key %s --only 'moe/*' >%s.2 2>&1; r2=$?; "
                     "wait $!; r1=$?; test $r1 = 0 && test $r2 = 0)",
                     bin, yaml, db, key, log, bin, yaml, db, key, log),
        0, "concurrent runs into one database: see %s.1 and %s.2", log, log);
    static const char *const gates[] = {"capability  PASS", "parity      PASS", "golden      PASS",
                                        "throughput  PASS", "falsify     PASS"};
    int receipts = 0; /* which of receipts 1 and 2 the two runs name */
    for (int r = 1; r <= 2; r++) {
        char lr[1100];
        snprintf(lr, sizeof lr, "%s.%d", log, r);
        txt = (char *)check_slurp(lr, &n);
        for (int i = 0; i < 5; i++)
            cr_expect(txt && strstr(txt, gates[i]), "no \"%s\" in run %d:\n%s", gates[i], r,
                      txt ? txt : "");
        receipts |= (txt && strstr(txt, "=> PASS (receipt 1)") ? 1 : 0) |
                    (txt && strstr(txt, "=> PASS (receipt 2)") ? 2 : 0);
        free(txt);
    }
    cr_expect_eq(receipts, 3, "the two runs did not write receipts 1 and 2 (see %s.1 and %s.2)",
                 log, log);
    /* a model whose bytes are not the pinned ones: every gate a FAILED row naming why */
    cr_expect_eq(ladderfix_sh("%s run %s --host a --db %s --key %s --only 'wrong/*' >%s 2>&1", bin,
                              path_in("run.yaml"), path_in("run.db"), path_in("a.key"), log),
                 1);
    txt = (char *)check_slurp(log, &n);
    cr_expect(txt && strstr(txt, "but the ladder pins"), "%s", txt ? txt : "");
    free(txt);
    /* a full disk (here: a file-size limit) is exit 3 with a message, never a crash, and the
     * database keeps every receipt written before */
    char big[1024];
    snprintf(big, sizeof big, "%s", path_in("full.db"));
    cr_expect_eq(
        ladderfix_sh("cp %s %s && (ulimit -f 64; %s run %s --host a --db %s --key %s --only 'moe/*'"
                     " >%s 2>&1)",
                     db, big, bin, yaml, big, key, log),
        3, "a run that cannot write its receipt must exit 3; see %s", log);
    txt = (char *)check_slurp(log, &n);
    cr_expect(txt && strstr(txt, "cannot store the receipt"), "%s", txt ? txt : "");
    free(txt);
    cr_expect_eq(ladderfix_sh("%s receipt verify --db %s >%s 2>&1", bin, big, log), 0,
                 "the database must survive the failed write intact; see %s", log);
    /* every receipt verifies, signature, chain and re-derived verdicts */
    cr_expect_eq(ladderfix_sh("%s receipt verify --db %s >%s 2>&1", bin, path_in("run.db"), log),
                 0);
    /* a FAIL (and the missing gpu cell) never releases */
    cr_expect_eq(ladderfix_sh("%s release check %s --db %s >%s 2>&1", bin, path_in("run.yaml"),
                              path_in("run.db"), log),
                 1);
    txt = (char *)check_slurp(log, &n);
    cr_expect(txt && strstr(txt, "moe/gpu/cuda.decode") && strstr(txt, "MISSING"), "%s",
              txt ? txt : "");
    free(txt);
}
