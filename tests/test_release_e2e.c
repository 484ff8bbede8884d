/* test_release_e2e.c — every state of the release matrix reached end to end (issue 28, "Tests
 * that judge what the test built"): the receipts come from real `gate run` processes (GATE_BIN)
 * and the state is read from `gate release check --json`, never from payloads a test built.
 *
 * The ladder (write_ladder): the tiny MoE conformance model, hosts a and b (each trusting its own
 * key), one mode exec.flaky.decode whose engine is a two-line shell script around the exec
 * backend's reference engine (tests/exec_engine.c): while the file defect.on exists in the
 * fixture folder it runs `exec_engine --defect scale` (every logit x1.5), else the clean engine
 * (bit-identical to the twin). That is an engine whose numbers depend on state the ladder does
 * not pin — a flaky subject — so one ladder, unchanged, gets a real FAIL and a real PASS of the
 * same cell. Cheapest settings: parity at 64 positions, 3 golden prompts x 8 tokens, 3 tiny
 * throughput runs, one fault without the sweep and one layer of power probes.
 *
 * The runs are shared: the first test that needs them builds one fixture folder for the whole
 * runner (ladderfix_once, under ReportHook(PRE_ALL)'s shared folder) with five `gate run`s, each
 * into its own store, their exit codes and logs kept: fail.db (the defective engine), flaky.db
 * (fail.db's copy, then the clean engine), pass.db (the clean engine), rogue.db (key c with a
 * ladder copy that trusts c) and error.db (the undecidable throughput floor). Each test copies
 * the store it judges (and the ladder's trust and goldens files) into its own folder, writes its
 * ladder there and runs `gate release check` on the copies.
 *
 * How each state is reached (every one from receipts `gate run` signed):
 *   PASS       the clean engine on host a (pass.db); with host b excluded the release is OK
 *   EXCLUDED   host b's cell excluded by the ladder, with a reason
 *   MISSING    host b's cell never run (pass.db)
 *   FAIL       the defective engine: parity and falsify FAIL (fail.db)
 *   FLAKY      the defective engine, then the clean one, same cell, same ladder (flaky.db)
 *   ERROR      a throughput floor the budget cannot decide (3 runs, max_runs 3: the median's
 *              interval is unbounded): throughput ERROR "inconclusive", every other gate PASS
 *              (error.db)
 *   STALE      the ladder's parity positions changed after the run (pass.db)
 *   UNTRUSTED  a run on host a signed by key c, made with a copy of the ladder that trusted c
 *              (rogue.db)
 *   TAMPERED   a FAIL receipt's payload rewritten to PASS in the SQLite file (fail.db's copy)
 *
 * Receipts of a build from a dirty tree never count (DESIGN.md settled question 1), so on a
 * dirty build every cell would be STALE and none of this could be checked: each test then SKIPS,
 * saying why, through check_skip_unless_required("GATE_REQUIRE_CLEAN_TREE", ...). ci/test.sh
 * sets GATE_REQUIRE_CLEAN_TREE=1 on a clean checkout (and always under CI), where the skip is a
 * failure. The build identity is the test binary's (identity_get: built from the same tree as
 * gate), and the release check's own "dirty" is asserted false.
 */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/identity.h"
#include "tests/support/check.h"
#include "tests/support/conformance.h"
#include "tests/support/ladderfix.h"
#include "tests/support/skip.h"

#define CELL_A "moe/a/exec.flaky.decode"
#define CELL_B "moe/b/exec.flaky.decode"

LADDERFIX_SHARE_BEGIN_HOOK
LADDERFIX_SHARE_END_HOOK

static const char *bin;
static char engine[1100]; /* exec_engine, next to this test binary */
static char fixdir[1024]; /* the shared runs (read-only) */
static char dir[600];     /* this test's folder */
static char goldens_sha[65];

/* name in this test's folder (check_path's rotating buffers) */
static const char *path_in(const char *name)
{
    return check_path(dir, name);
}

/* name in the shared fixture folder */
static const char *fix_in(const char *name)
{
    return check_path(fixdir, name);
}

/* Write the ladder d/name: cells moe/a and moe/b in mode exec.flaky.decode; host a trusts
 * file:trust_a; b's cell excluded when exclude_b; parity at positions; throughput_extra (NULL or
 * ", key: value" text) inside the throughput settings. The engine is the fixture's flaky.sh and
 * the goldens g.json next to the ladder (every ladder of a test names the same words, so its
 * settings are the runs'). Returns path, where the path is copied (check_path's buffers
 * rotate). */
static const char *write_ladder(char path[1024], const char *d, const char *name,
                                const char *trust_a, int exclude_b, int positions,
                                const char *throughput_extra)
{
    snprintf(path, 1024, "%s", check_path(d, name));
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write '%s'", path);
    fprintf(f,
            "release: {name: rel, version: 1.0.0}\n"
            "models:\n  moe: {path: %s/conformance/qwen3moe-tiny-q4_k_m/model.gguf,"
            " sha256: " LADDERFIX_MOE_SHA ", arch: qwen3moe}\n"
            "hosts:\n  a: {device: none, trust: ['file:%s']}\n"
            "  b: {device: none, trust: ['file:b.pub']}\n"
            "engines:\n  flaky: {argv: [/bin/sh, '%s'], timeout_s: 60,"
            " supports: [decode, faults], isolation: none,"
            " reason: 'the test engine reads a marker file'}\n"
            "modes: [exec.flaky.decode]\n"
            "cells:\n  - {model: moe, host: a, mode: exec.flaky.decode}\n",
            check_shared_dir(), trust_a, fix_in("flaky.sh"));
    if (exclude_b)
        fprintf(f, "  - {models: [moe], hosts: [b], modes: [exec.flaky.decode],"
                   " exclude: [{mode: exec.flaky.decode, reason: \"host b is retired\"}]}\n");
    else
        fprintf(f, "  - {model: moe, host: b, mode: exec.flaky.decode}\n");
    fprintf(f,
            "gates:\n  defaults:\n    parity: {positions: %d}\n"
            "    golden: {goldens: g.json, sha256: %s, tokens: 8}\n"
            "    throughput: {runs: 3, warmup: 0, prompt_tokens: 8, decode_tokens: 2%s}\n"
            "    falsify: {faults: [skip_qk_norm], sweep_samples: 0, power_layers: 1}\n"
            "unanchored: {qwen3moe: 'end-to-end release states'}\n",
            positions, goldens_sha, throughput_extra ? throughput_extra : "");
    cr_assert_eq(fclose(f), 0, "cannot write '%s'", path);
    return path;
}

/* In the fixture folder d: `gate run LADDER --host a --db DB --key KEY`, the subject defective
 * when defect; the exit status goes to DB.exit and the output to DB.log. */
static void fixture_run(const char *d, const char *lad, const char *db, const char *key, int defect)
{
    char marker[1024], lp[1024], dbp[1024], kp[1024];
    snprintf(marker, sizeof marker, "%s", check_path(d, "defect.on"));
    snprintf(lp, sizeof lp, "%s", check_path(d, lad));
    snprintf(dbp, sizeof dbp, "%s", check_path(d, db));
    snprintf(kp, sizeof kp, "%s", check_path(d, key));
    if (defect) {
        FILE *f = fopen(marker, "w");
        cr_assert(f);
        fclose(f);
    }
    const int code = ladderfix_sh("'%s' run '%s' --host a --db '%s' --key '%s' >'%s.log' 2>&1", bin,
                                  lp, dbp, kp, dbp);
    unlink(marker);
    FILE *f = fopen(check_path(d, "x"), "w"); /* written whole, then renamed */
    cr_assert(f);
    fprintf(f, "%d\n", code);
    cr_assert_eq(fclose(f), 0);
    char exitp[1100];
    snprintf(exitp, sizeof exitp, "%s.exit", dbp);
    cr_assert_eq(rename(check_path(d, "x"), exitp), 0);
}

/* ladderfix_once's build: keys a, b (ladderfix) and c (`gate key gen`), the goldens, the flaky
 * engine, the ladders, then the five runs. */
static void build_runs(const char *d, void *ctx)
{
    (void)ctx;
    struct ladderfix fx;
    ladderfix_init_in(&fx, d); /* d is fixdir: ladderfix_once wrote it first */
    ladderfix_record_goldens(conformance_path("qwen3moe-tiny-q4_k_m", "model.gguf"),
                             fix_in("g.json"), 8, goldens_sha);
    FILE *f = fopen(fix_in("flaky.sh"), "w");
    cr_assert(f);
    fprintf(f,
            "# an engine whose numbers depend on state the ladder does not pin\n"
            "if [ -e '%s' ]; then exec '%s' --defect scale; fi\n"
            "exec '%s'\n",
            fix_in("defect.on"), engine, engine);
    cr_assert_eq(fclose(f), 0);
    /* a rogue runner: its own key c for host a, and its own copy of the ladder trusting c */
    cr_assert_eq(ladderfix_sh("'%s' key gen --host a -o '%s' --pub '%s' >/dev/null 2>&1", bin,
                              fix_in("c.key"), fix_in("c.pub")),
                 0);
    char lp[1024];
    write_ladder(lp, d, "l.yaml", "a.pub", 0, 64, NULL);
    write_ladder(lp, d, "rogue.yaml", "c.pub", 0, 64, NULL);
    write_ladder(lp, d, "error.yaml", "a.pub", 0, 64, ", max_runs: 3, min_decode_tps: 1");
    fixture_run(d, "l.yaml", "fail.db", "a.key", 1);
    cr_assert_eq(ladderfix_sh("cp '%s' '%s'", fix_in("fail.db"), fix_in("flaky.db")), 0);
    fixture_run(d, "l.yaml", "flaky.db", "a.key", 0);
    fixture_run(d, "l.yaml", "pass.db", "a.key", 0);
    fixture_run(d, "rogue.yaml", "rogue.db", "c.key", 0);
    fixture_run(d, "error.yaml", "error.db", "a.key", 0);
}

/* The shared runs (built by the first test that gets here), this test's own folder with copies
 * of the trust and goldens files; skips (or fails under GATE_REQUIRE_CLEAN_TREE) when this
 * build is from a dirty tree. */
static void setup_dir(const char *tag)
{
    struct identity self;
    struct gate_err err = {0};
    cr_assert_eq(identity_get(&self, &err), 0, "%s", err.msg);
    if (self.git_dirty)
        check_skip_unless_required(
            "GATE_REQUIRE_CLEAN_TREE",
            "this build is from a dirty tree (%s): its receipts never count, so no release state "
            "can be reached end to end (commit, rebuild and rerun to check them)",
            self.dirty_reason[0] ? self.dirty_reason : "the tree is not its commit");
    bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    cr_assert(n > 0, "cannot read /proc/self/exe");
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    cr_assert(slash);
    *slash = '\0';
    snprintf(engine, sizeof engine, "%s/exec_engine", exe);
    cr_assert_eq(access(engine, X_OK), 0, "no exec_engine at '%s' (ninja builds it)", engine);
    ladderfix_once("release-e2e", build_runs, NULL, fixdir);
    struct gate_err e2 = {0};
    cr_assert_eq(identity_file_sha256(fix_in("g.json"), goldens_sha, &e2), 0, "%s", e2.msg);
    check_make_dir(dir, sizeof dir, tag);
    cr_assert_eq(ladderfix_sh("cp '%s' '%s' '%s' '%s' '%s'", fix_in("a.pub"), fix_in("b.pub"),
                              fix_in("c.pub"), fix_in("g.json"), dir),
                 0);
}

/* A copy of the fixture's store db (and its log) as this test's r.db; the run's exit status. */
static int take(const char *db)
{
    char src[1024];
    snprintf(src, sizeof src, "%s", fix_in(db));
    cr_assert_eq(ladderfix_sh("cp '%s' '%s' && cp '%s.log' '%s'", src, path_in("r.db"), src,
                              path_in("run.log")),
                 0, "the fixture run into %s left no store", db);
    char exitp[1100];
    snprintf(exitp, sizeof exitp, "%s.exit", src);
    char *t = check_slurp_text(exitp);
    cr_assert(t[0], "no exit status for the run into %s", db);
    const int st = atoi(t);
    free(t);
    return st;
}

/* The default ladder l.yaml in this test's folder: host a trusts a.pub, both cells required,
 * parity at 64 positions (the words of the fixture's l.yaml). */
static const char *ladder(char path[1024])
{
    return write_ladder(path, dir, "l.yaml", "a.pub", 0, 64, NULL);
}

/* `gate release check LADDER --db r.db --json`: *doc the parsed report (decref it); returns the
 * exit status. Asserts the report parses and that the checking build is not dirty. */
static int release(const char *ladder_path, json_t **doc)
{
    char lp[1024], db[1024], out[1024];
    snprintf(lp, sizeof lp, "%s", ladder_path);
    snprintf(db, sizeof db, "%s", path_in("r.db"));
    snprintf(out, sizeof out, "%s", path_in("release.json"));
    int code =
        ladderfix_sh("'%s' release check '%s' --db '%s' --json >'%s' 2>&1", bin, lp, db, out);
    json_error_t je;
    *doc = json_load_file(out, 0, &je);
    if (!*doc) {
        char *txt = check_slurp_text(out);
        cr_assert_fail("release check --json (exit %d) is not JSON (%s):\n%s", code, je.text, txt);
    }
    cr_assert(json_is_false(json_object_get(*doc, "dirty")),
              "the release check says its build is dirty, the test binary's identity does not");
    return code;
}
/* The row named name in the report (asserts it exists). */
static json_t *row(json_t *doc, const char *name)
{
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(doc, "rows"), i, r)
    {
        if (!strcmp(json_string_value(json_object_get(r, "name")), name))
            return r;
    }
    cr_assert_fail("no row %s in the release report", name);
    return NULL;
}

static const char *state(json_t *doc, const char *name)
{
    return json_string_value(json_object_get(row(doc, name), "state"));
}

static const char *reason(json_t *doc, const char *name)
{
    return json_string_value(json_object_get(row(doc, name), "reason"));
}

static char *run_log(void)
{
    return check_slurp_text(path_in("run.log"));
}

/* ---- the states ------------------------------------------------------------------------------ */

Test(release_e2e, a_passing_run_releases_and_an_excluded_cell_shows_excluded, .timeout = 600)
{
    setup_dir("e2e-pass");
    cr_assert_eq(take("pass.db"), 0, "%s", run_log());
    char lp[1024];
    write_ladder(lp, dir, "l.yaml", "a.pub", 1, 64, NULL);
    json_t *doc;
    cr_expect_eq(release(lp, &doc), 0, "the release of one PASS cell is not OK");
    cr_expect(json_is_true(json_object_get(doc, "ok")));
    cr_expect_str_eq(state(doc, CELL_A), "PASS");
    json_t *ids = json_object_get(row(doc, CELL_A), "pass_receipts");
    cr_expect_eq(json_array_size(ids), 1);
    cr_expect_eq(json_integer_value(json_array_get(ids, 0)), 1);
    json_t *ex = row(doc, CELL_B);
    cr_expect_str_eq(json_string_value(json_object_get(ex, "kind")), "excluded");
    cr_expect_str_eq(state(doc, CELL_B), "EXCLUDED");
    cr_expect_str_eq(json_string_value(json_object_get(ex, "excluded_reason")),
                     "host b is retired");
    json_decref(doc);
}

Test(release_e2e, a_cell_never_run_is_missing, .timeout = 600)
{
    setup_dir("e2e-missing");
    cr_assert_eq(take("pass.db"), 0, "%s", run_log());
    char lp[1024];
    json_t *doc;
    cr_expect_eq(release(ladder(lp), &doc), 1);
    cr_expect(json_is_false(json_object_get(doc, "ok")));
    cr_expect_str_eq(state(doc, CELL_A), "PASS");
    cr_expect_str_eq(state(doc, CELL_B), "MISSING");
    json_decref(doc);
}

Test(release_e2e, a_defective_subject_fails, .timeout = 600)
{
    setup_dir("e2e-fail");
    cr_expect_eq(take("fail.db"), 1, "a defective engine's run must exit 1:\n%s", run_log());
    char lp[1024];
    json_t *doc;
    cr_expect_eq(release(ladder(lp), &doc), 1);
    cr_expect_str_eq(state(doc, CELL_A), "FAIL", "%s", reason(doc, CELL_A));
    cr_expect(strstr(reason(doc, CELL_A), "FAILED parity"), "%s", reason(doc, CELL_A));
    cr_expect_eq(json_integer_value(json_object_get(row(doc, CELL_A), "blocking_receipt")), 1);
    json_decref(doc);
}

Test(release_e2e, a_fail_then_a_pass_of_the_same_cell_is_flaky, .timeout = 600)
{
    setup_dir("e2e-flaky");
    /* flaky.db: fail.db's defective run, then the clean rerun into the same store */
    cr_expect_eq(take("fail.db"), 1, "%s", run_log());
    cr_assert_eq(take("flaky.db"), 0, "the clean rerun must pass:\n%s", run_log());
    char lp[1024];
    json_t *doc;
    cr_expect_eq(release(ladder(lp), &doc), 1);
    cr_expect_str_eq(state(doc, CELL_A), "FLAKY", "%s", reason(doc, CELL_A));
    json_t *n = json_object_get(row(doc, CELL_A), "receipts");
    cr_expect_eq(json_integer_value(json_object_get(n, "pass")), 1);
    cr_expect_eq(json_integer_value(json_object_get(n, "fail")), 1);
    cr_expect_eq(json_integer_value(json_object_get(row(doc, CELL_A), "blocking_receipt")), 1);
    json_decref(doc);
}

Test(release_e2e, a_gate_that_cannot_decide_is_error, .timeout = 600)
{
    setup_dir("e2e-error");
    take("error.db");
    char *log = run_log();
    cr_expect(strstr(log, "=> ERROR (receipt 1)"), "%s", log);
    free(log);
    char lp[1024];
    write_ladder(lp, dir, "l.yaml", "a.pub", 0, 64, ", max_runs: 3, min_decode_tps: 1");
    json_t *doc;
    cr_expect_eq(release(lp, &doc), 1);
    cr_expect_str_eq(state(doc, CELL_A), "ERROR", "%s", reason(doc, CELL_A));
    /* "inconclusive" (the interval of 3 runs is unbounded); "host starved" would be the other
     * way a loaded host makes the same ERROR */
    cr_expect(strstr(reason(doc, CELL_A), "could not judge throughput: inconclusive") ||
                  strstr(reason(doc, CELL_A), "could not judge throughput: host starved"),
              "%s", reason(doc, CELL_A));
    json_decref(doc);
}

Test(release_e2e, a_receipt_for_other_settings_is_stale, .timeout = 600)
{
    setup_dir("e2e-stale");
    cr_assert_eq(take("pass.db"), 0, "%s", run_log());
    /* the ladder asks for more parity positions after the run */
    char lp[1024];
    write_ladder(lp, dir, "l.yaml", "a.pub", 0, 96, NULL);
    json_t *doc;
    cr_expect_eq(release(lp, &doc), 1);
    cr_expect_str_eq(state(doc, CELL_A), "STALE", "%s", reason(doc, CELL_A));
    cr_expect(strstr(reason(doc, CELL_A), "parity.positions 64 -> 96"), "%s", reason(doc, CELL_A));
    json_decref(doc);
}

Test(release_e2e, a_receipt_signed_by_an_untrusted_key_is_untrusted, .timeout = 600)
{
    setup_dir("e2e-untrusted");
    /* rogue.db: the rogue runner's run (key c, its ladder copy trusting c.pub) */
    cr_assert_eq(take("rogue.db"), 0, "%s", run_log());
    char lp[1024];
    json_t *doc;
    cr_expect_eq(release(ladder(lp), &doc), 1);
    cr_expect_str_eq(state(doc, CELL_A), "UNTRUSTED", "%s", reason(doc, CELL_A));
    cr_expect(strstr(reason(doc, CELL_A), "which the ladder does not trust for host a"), "%s",
              reason(doc, CELL_A));
    json_decref(doc);
}

Test(release_e2e, a_receipt_edited_in_the_store_is_tampered, .timeout = 600)
{
    setup_dir("e2e-tampered");
    cr_expect_eq(take("fail.db"), 1, "%s", run_log());
    /* an attacker with the file turns the FAIL receipt's verdicts into PASS */
    sqlite3 *db = ladderfix_open_raw(path_in("r.db"));
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(db,
                              "UPDATE receipts SET payload = replace(payload, '\"FAIL\"',"
                              " '\"PASS\"'), verdict = 'PASS' WHERE id = 1",
                              NULL, NULL, &msg),
                 SQLITE_OK, "%s", msg ? msg : "");
    cr_assert_eq(sqlite3_changes(db), 1);
    sqlite3_close(db);
    char lp[1024];
    json_t *doc;
    cr_expect_eq(release(ladder(lp), &doc), 1);
    /* every cell, the one never run included */
    cr_expect_str_eq(state(doc, CELL_A), "TAMPERED", "%s", reason(doc, CELL_A));
    cr_expect_str_eq(state(doc, CELL_B), "TAMPERED", "%s", reason(doc, CELL_B));
    cr_expect(json_is_object(json_object_get(doc, "store_problem")));
    json_decref(doc);
}
