/* test_exec.c — the exec backend (engine/exec.c) against the reference engine
 * (tests/exec_engine.c, gate-exec over the twin): parity PASS with noise below the thresholds and
 * FAIL with a planted defect; every failure mode of an engine (crash, hang, malformed or oversize
 * frame, wrong payload size, wrong digest, early exit, a handshake that contradicts the ladder)
 * becomes a clean ERR_RUNTIME naming the cause, with the child reaped (no zombie); the ladder's
 * engines: section and its refusals at check time; one end-to-end `gate run` per outcome (one
 * engine child per cell, the handshake in the receipt, a crash as FAILED rows).
 * Everything runs on the tiny MoE conformance model at 64 positions.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/exec.h"
#include "engine/model.h"
#include "harness/gatedef.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "oracles/falsify.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include "tests/support/check.h"
#include "tests/support/conformance.h"
#include "tests/support/ladderfix.h"

#define MOE_SHA LADDERFIX_MOE_SHA

/* The reference engine: $GATE_EXEC_ENGINE, else exec_engine next to this test binary. */
static const char *engine_path(void)
{
    static char path[PATH_MAX];
    const char *env = getenv("GATE_EXEC_ENGINE");
    if (env && *env)
        return env;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    cr_assert(n > 0);
    self[n] = '\0';
    snprintf(path, sizeof path, "%s/exec_engine", dirname(self));
    cr_assert_eq(access(path, X_OK), 0, "the reference engine '%s' is not built", path);
    return path;
}

static const char *moe_path(void)
{
    return conformance_path("qwen3moe-tiny-q4_k_m", "model.gguf");
}

/* An engine declaration: the reference engine with the NULL-terminated extra arguments. */
static void engine_init(struct exec_engine *e, double timeout_s, unsigned supports,
                        const char *const *extra)
{
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "twin");
    e->argv[e->argc++] = (char *)engine_path();
    for (int i = 0; extra && extra[i]; i++)
        e->argv[e->argc++] = (char *)extra[i];
    e->timeout_s = timeout_s;
    e->supports = supports ? supports : 15;
}

/* No child of this test process is left unreaped. */
static void expect_no_zombie(void)
{
    errno = 0;
    const pid_t r = waitpid(-1, NULL, WNOHANG);
    cr_expect(r == -1 && errno == ECHILD, "a child is left behind (waitpid: %d, errno %d)", (int)r,
              errno);
}

struct fixture {
    struct model *m;
    struct exec_engine e;
    struct exec_session *s;
    struct mode mode;
};

static void fixture_open(struct fixture *f, const char *mode, double timeout_s, unsigned supports,
                         const char *const *extra)
{
    struct gate_err err = {0};
    memset(f, 0, sizeof *f);
    f->m = check_load_case("qwen3moe-tiny-q4_k_m");
    engine_init(&f->e, timeout_s, supports, extra);
    cr_assert_eq(exec_session_new(&f->s, &f->e, moe_path(), MOE_SHA, &err), 0, "%s", err.msg);
    cr_assert_eq(mode_parse(mode, &f->mode, &err), 0, "%s", err.msg);
    f->mode.exec = f->s;
}

static void fixture_close(struct fixture *f)
{
    exec_session_free(f->s);
    model_free(f->m);
    expect_no_zombie();
}

static void parity_cfg(struct parity_config *c)
{
    parity_config_default(c);
    c->positions = 64;
}

/* ---- the protocol over the twin ---------------------------------------------------------------
 */

Test(exec, parity_passes_with_noise_below_the_thresholds_and_one_child_serves_every_open)
{
    static const char *const noise[] = {"--noise", "1e-5", NULL};
    struct fixture f;
    fixture_open(&f, "exec.twin.prefill", 30, 0, noise);
    struct parity_config cfg;
    parity_cfg(&cfg);
    struct parity_result pr;
    struct gate_err err = {0};
    cr_assert_eq(parity_run(f.m, &f.mode, NULL, NULL, 0, &cfg, 1, &pr, &err), 0, "%s", err.msg);
    cr_expect(pr.pass, "%s", pr.reason);
    cr_expect(pr.kld.max > 0, "the noise reached the logits (max KLD %g)", pr.kld.max);
    parity_result_free(&pr);
    /* a second gate on the same session reuses the child: one hello, one load */
    cr_assert_eq(parity_run(f.m, &f.mode, NULL, NULL, 0, &cfg, 1, &pr, &err), 0, "%s", err.msg);
    cr_expect(pr.pass, "%s", pr.reason);
    parity_result_free(&pr);
    cr_expect_eq(exec_session_spawns(f.s), 1);
    struct exec_hello h;
    cr_assert_eq(exec_session_hello(f.s, &h), 0);
    cr_expect_str_eq(h.engine, "exec_engine");
    cr_expect_str_eq(h.device, "cpu: gate's reference twin");
    cr_expect_eq(h.faults, (1u << FAULT_KIND_COUNT) - 1);
    fixture_close(&f);
}

Test(exec, parity_fails_with_the_planted_defect)
{
    static const char *const defect[] = {"--defect", "scale", NULL};
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, 0, defect);
    struct parity_config cfg;
    parity_cfg(&cfg);
    struct parity_result pr;
    struct gate_err err = {0};
    cr_assert_eq(parity_run(f.m, &f.mode, NULL, NULL, 0, &cfg, 1, &pr, &err), 0, "%s", err.msg);
    cr_expect_not(pr.pass, "logits scaled by 1.5 passed parity: %s", pr.reason);
    parity_result_free(&pr);
    fixture_close(&f);
}

Test(exec, chunked_forwards_give_the_same_logits_as_one_call)
{
    /* max_tokens 5: the wrapper cuts a 64-token prefill into 13 requests; no number changes */
    static const char *const small[] = {"--max-tokens", "5", NULL};
    struct fixture f;
    fixture_open(&f, "exec.twin.prefill", 30, 0, small);
    struct backend *b = NULL, *r = NULL;
    struct gate_err err = {0};
    const int n = 64;
    const size_t V = f.m->hp.n_vocab;
    int32_t tok[64];
    mode_tokens(7, (uint32_t)V, n, tok);
    float *a = malloc((size_t)n * V * sizeof *a), *want = malloc((size_t)n * V * sizeof *want);
    cr_assert(a && want);
    cr_assert_eq(mode_open(&b, &f.mode, f.m, n, 1, NULL, &err), 0, "%s", err.msg);
    cr_expect_eq(b->n_batch, 5);
    cr_expect_not(backend_records_taps(b));
    cr_assert_eq(backend_forward(b, tok, n, 0, a, &err), 0, "%s", err.msg);
    struct backend_info info;
    backend_info(b, &info);
    cr_expect_str_eq(info.backend, "exec");
    cr_expect(strstr(info.engine, "exec_engine 1.0"), "%s", info.engine);
    backend_close(b);
    struct backend_config cfg = {.n_threads = 1, .n_ctx = n, .n_batch = n};
    cr_assert_eq(backend_open(&r, "ref", f.m, &cfg, &err), 0, "%s", err.msg);
    cr_assert_eq(backend_forward(r, tok, n, 0, want, &err), 0, "%s", err.msg);
    backend_close(r);
    cr_expect_eq(memcmp(a, want, (size_t)n * V * sizeof *a), 0, "exec logits differ from the twin");
    free(a);
    free(want);
    fixture_close(&f);
}

Test(exec, falsify_on_an_engine_with_faults_rejects_every_fault)
{
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, 0, NULL);
    struct falsify_config cfg;
    falsify_config_default(&cfg);
    parity_cfg(&cfg.parity);
    cfg.sweep_samples = 0;
    struct fault_set faults;
    fault_default_set(1, &faults);
    struct falsify_result fr;
    struct gate_err err = {0};
    cr_assert_eq(falsify_run(f.m, &f.mode, &faults, NULL, 0, &cfg, 1, &fr, &err), 0, "%s", err.msg);
    cr_assert_eq(fr.n, faults.n);
    for (int i = 0; i < fr.n; i++) {
        cr_expect(fr.f[i].rejected, "fault %s escaped parity through the engine: %s", fr.f[i].name,
                  fr.f[i].metric);
        /* no taps over the protocol: the witness is the engine's logits moving */
        cr_expect(fr.f[i].fired && fr.f[i].witness.tapless && fr.f[i].witness.n_logit_diff > 0,
                  "fault %s: no tap-less witness (fired %d, logit diffs %d)", fr.f[i].name,
                  fr.f[i].fired, fr.f[i].witness.n_logit_diff);
        cr_expect_eq(fr.f[i].witness.n_route_diff, 0, "zero taps read as routing");
    }
    falsify_result_free(&fr);
    fixture_close(&f);
}

/* ---- failure modes: a clean error, the child reaped ---------------------------------------- */

/* Open the mode and run 64 decode tokens; the first failure's status and message. */
static int run_failing(const char *const *extra, double timeout_s, char *msg, size_t n)
{
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", timeout_s, 0, extra);
    struct backend *b = NULL;
    struct gate_err err = {0};
    const size_t V = f.m->hp.n_vocab;
    int32_t tok[64];
    mode_tokens(3, (uint32_t)V, 64, tok);
    float *lg = malloc(64 * V * sizeof *lg);
    cr_assert(lg);
    int rc = mode_open(&b, &f.mode, f.m, 64, 1, NULL, &err);
    if (!rc)
        rc = mode_run(b, MODE_DECODE, tok, 64, NULL, 0, lg, &err);
    cr_expect_eq(exec_session_pid(f.s), 0, "the child is still running after a failure");
    backend_close(b);
    free(lg);
    snprintf(msg, n, "%s", err.msg);
    fixture_close(&f);
    return rc;
}

Test(exec, a_crash_mid_forward_is_an_error_with_the_signal_and_the_stderr_tail)
{
    static const char *const a[] = {"--crash-at-forward", "3", NULL};
    char msg[1024];
    cr_expect_eq(run_failing(a, 30, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "exec engine 'twin' (forward n_past=2 n_tokens=1)"), "%s", msg);
    cr_expect(strstr(msg, "signal 11") || strstr(msg, "exited with status"), "%s", msg);
    cr_expect(strstr(msg, "crashing at forward 3 as asked"), "%s", msg);
}

Test(exec, a_hang_is_a_timeout_and_the_child_is_killed)
{
    static const char *const a[] = {"--hang-at-forward", "2", NULL};
    char msg[1024];
    cr_expect_eq(run_failing(a, 2, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "within the timeout of 2 s"), "%s", msg);
    cr_expect(strstr(msg, "stopped by gate with SIGTERM"), "%s", msg);
    cr_expect(strstr(msg, "hanging at forward 2 as asked"), "%s", msg);
}

Test(exec, an_error_reply_is_an_error_quoting_the_engine_s_text)
{
    static const char *const a[] = {"--error-at-forward", "2", NULL};
    char msg[1024];
    cr_expect_eq(run_failing(a, 30, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "(forward n_past=1 n_tokens=1): the engine answered an error: \"planted"
                          " error: this engine refuses forward requests now\""),
              "%s", msg);
}

Test(exec, a_malformed_reply_header_is_refused)
{
    static const char *const a[] = {"--bad-frame", NULL};
    char msg[1024];
    cr_expect_eq(run_failing(a, 30, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "reply header is not one JSON object"), "%s", msg);
    cr_expect(strstr(msg, "this is not json"), "%s", msg);
}

Test(exec, an_oversize_reply_header_is_refused_before_it_is_read)
{
    static const char *const a[] = {"--oversize-frame", NULL};
    char msg[1024];
    cr_expect_eq(run_failing(a, 30, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "reply header length 1048576 is outside 1..65536"), "%s", msg);
}

Test(exec, a_payload_of_the_wrong_size_is_refused)
{
    static const char *const a[] = {"--wrong-size", NULL};
    char msg[1024];
    cr_expect_eq(run_failing(a, 30, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "reply payload is 2044 bytes, expected exactly 2048"), "%s", msg);
}

Test(exec, bytes_after_a_reply_are_refused)
{
    static const char *const a[] = {"--extra-bytes", NULL};
    char msg[1024];
    cr_expect_eq(run_failing(a, 30, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "(truncate n_past=0): the engine wrote more than one reply"), "%s", msg);
}

Test(exec, a_digest_other_than_the_pinned_one_is_refused)
{
    static const char *const a[] = {"--wrong-digest", NULL};
    char msg[1024];
    cr_expect_eq(run_failing(a, 30, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "(load)"), "%s", msg);
    cr_expect(strstr(msg, "but the ladder pins " MOE_SHA), "%s", msg);
}

Test(exec, an_engine_that_exits_after_hello_is_an_error_with_its_exit_status)
{
    static const char *const a[] = {"--exit-early", NULL};
    char msg[1024];
    cr_expect_eq(run_failing(a, 30, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "(load)"), "%s", msg);
    cr_expect(strstr(msg, "exited with status 3"), "%s", msg);
    cr_expect(strstr(msg, "exiting early as asked"), "%s", msg);
}

Test(exec, an_engine_that_cannot_be_started_is_an_error)
{
    struct model *m = check_load_case("qwen3moe-tiny-q4_k_m");
    struct exec_engine e;
    memset(&e, 0, sizeof e);
    snprintf(e.name, sizeof e.name, "none");
    e.argv[e.argc++] = (char *)"/nonexistent/engine";
    e.timeout_s = 5;
    struct exec_session *s = NULL;
    struct gate_err err = {0};
    cr_assert_eq(exec_session_new(&s, &e, moe_path(), MOE_SHA, &err), 0, "%s", err.msg);
    struct backend_config cfg = {.n_ctx = 64, .n_batch = 64, .exec = s};
    struct backend *b = NULL;
    cr_expect_eq(backend_open(&b, "exec", m, &cfg, &err), ERR_RUNTIME);
    cr_expect(strstr(err.msg, "cannot start '/nonexistent/engine'"), "%s", err.msg);
    exec_session_free(s);
    model_free(m);
    expect_no_zombie();
}

Test(exec, a_handshake_that_contradicts_the_ladder_is_refused)
{
    /* the ladder says faults, the engine's hello lists none */
    static const char *const a[] = {"--no-faults", NULL};
    char msg[1024];
    cr_expect_eq(run_failing(a, 30, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "declares that the engine injects faults, but its hello lists none"),
              "%s", msg);
    /* without faults declared it runs, but a fault it did not list is never sent */
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, EXEC_SUPPORTS_DECODE, a);
    struct parity_config cfg;
    parity_cfg(&cfg);
    struct fault_set fs;
    fault_default_set(1, &fs);
    struct parity_result pr;
    struct gate_err err = {0};
    cr_expect_eq(parity_run(f.m, &f.mode, &fs, NULL, 0, &cfg, 1, &pr, &err), ERR_RUNTIME);
    cr_expect(strstr(err.msg, "the engine cannot inject wrong_expert"), "%s", err.msg);
    parity_result_free(&pr);
    fixture_close(&f);
}

/* ---- the ladder ---------------------------------------------------------------------------- */

/* The ladder tests' scratch folder with host a's key and a.pub (the ladder trusts file:a.pub). */
static struct ladderfix fx;

static const char *path_in(const char *name)
{
    return ladderfix_path(&fx, name);
}

static void make_dir(void)
{
    ladderfix_init(&fx, "exec");
}

/* Write a one-cell ladder on the tiny MoE model: engine entry text, mode, extra gates text. */
static const char *write_ladder(const char *engines, const char *mode, const char *gates)
{
    return ladderfix_one_cell(&fx, "l.yaml", engines, mode, NULL, gates);
}

static void expect_refused(const char *engines, const char *mode, const char *gates,
                           const char *want)
{
    make_dir();
    struct ladder *l = NULL;
    struct gate_err err = {0};
    cr_expect_eq(ladder_load(&l, write_ladder(engines, mode, gates), &err), ERR_INPUT,
                 "accepted: %s", engines);
    cr_expect(strstr(err.msg, want), "'%s' not in: %s", want, err.msg);
    cr_expect(strstr(err.msg, "l.yaml:"), "no file:line:col: %s", err.msg);
    ladder_free(l);
}

#define ENGINE(body) "engines:\n  twin: " body "\n"

Test(exec, the_ladder_refuses_what_cannot_run_at_check_time)
{
    expect_refused(ENGINE("{argv: [x], supports: [decode], shell: 'sh -c'}"), "exec.twin.decode",
                   NULL, "unknown key 'shell' in engine 'twin'");
    expect_refused(ENGINE("{supports: [decode]}"), "exec.twin.decode", NULL,
                   "missing required key 'argv'");
    expect_refused(ENGINE("{argv: [x], supports: [decode, generate]}"), "exec.twin.decode", NULL,
                   "supports entry 'generate'");
    expect_refused(ENGINE("{argv: [x], supports: [decode]}"), "exec.other.decode", NULL,
                   "names engine 'other', which the ladder's engines: section does not declare");
    expect_refused(ENGINE("{argv: [x], supports: [decode]}"), "exec.twin.chat", NULL,
                   "does not list chat in its supports");
    expect_refused("engines:\n  'a.b': {argv: [x], supports: [decode]}\n", "ref.decode", NULL,
                   "engine name 'a.b'");
    /* falsify (the default set) on an engine that cannot inject faults */
    expect_refused(ENGINE("{argv: [x], supports: [decode]}"), "exec.twin.decode", NULL,
                   "engine 'twin' does not list faults in its supports");
}

Test(exec, the_ladder_records_the_engine_in_every_gate_s_settings)
{
    make_dir();
    struct ladder *l = NULL;
    struct gate_err err = {0};
    const char *p = write_ladder(ENGINE("{argv: [bin/engine, --noise, '1e-5'], timeout_s: 7,"
                                        " supports: [decode, faults]}"),
                                 "exec.twin.decode", NULL);
    cr_assert_eq(ladder_load(&l, p, &err), 0, "%s", err.msg);
    cr_assert_eq(l->n_engines, 1);
    const struct ladder_engine *le = &l->engines[0];
    cr_expect_str_eq(le->e.argv[0], path_in("bin/engine"), "argv[0] resolves from the ladder");
    cr_expect_eq(le->e.timeout_s, 7);
    cr_expect_eq(l->cells[0].g.engine, le);
    json_t *s = ladder_gate_settings(&l->cells[0].g, "parity");
    json_t *e = json_object_get(s, "engine");
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(e, "argv"), 0)), "bin/engine",
                     "the settings hold the ladder's words, not this host's path");
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(e, "argv"), 2)), "1e-5");
    json_decref(s);
    ladder_free(l);
}

/* ---- end to end ---------------------------------------------------------------------------- */

static struct run_result run_one(const char *engines, const char *gates)
{
    make_dir();
    struct gate_err err = {0};
    const char *p = write_ladder(engines, "exec.twin.decode", gates);
    struct run_options o = {
        .ladder = p, .host = "a", .db = path_in("r.db"), .key = path_in("a.key"), .threads = 1};
    struct run_result res;
    cr_assert_eq(run_ladder(&o, NULL, NULL, &res, &err), 0, "%s", err.msg);
    cr_assert_eq(res.n, 1);
    expect_no_zombie();
    return res;
}

static const char *gate_field(const struct run_result *r, const char *gate, const char *field)
{
    return json_string_value(json_object_get(json_object_get(r->cells[0].gates_json, gate), field));
}

Test(exec, gate_run_starts_the_engine_once_per_cell_and_records_its_handshake)
{
    char engines[512];
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s, --noise, '1e-5'], timeout_s: 30, supports: [decode, faults]}"),
             engine_path());
    struct run_result r = run_one(engines, "    throughput: {runs: 3, warmup: 0, prompt_tokens: 8,"
                                           " decode_tokens: 2, max_cv: 100}\n"
                                           "    falsify: {faults: [uniform_weights],"
                                           " sweep_samples: 1}\n");
    cr_expect_str_eq(gate_field(&r, "capability", "verdict"), "PASS");
    cr_expect_str_eq(gate_field(&r, "parity", "verdict"), "PASS");
    cr_expect_str_eq(gate_field(&r, "throughput", "verdict"), "PASS");
    /* falsify through an engine without taps: witnessed by its logits, rejected by parity */
    cr_expect_str_eq(gate_field(&r, "falsify", "verdict"), "PASS", "%s",
                     gate_field(&r, "falsify", "reason"));
    {
        /* the same recorded numbers re-judged as if the cell were a gate-built engine (no
         * settings.engine): a tap-less witness does not count there */
        const json_t *fg = json_object_get(r.cells[0].gates_json, "falsify");
        json_t *st = json_deep_copy(json_object_get(fg, "settings"));
        json_object_del(st, "engine");
        json_t *checks = NULL;
        char why[512] = "";
        cr_expect_eq(gatedef_judge("falsify", "ref.decode", st, json_object_get(fg, "metrics"),
                                   &checks, why, sizeof why),
                     GATE_FAIL, "a tap-less witness passed on a cell without an exec engine");
        cr_expect(strstr(why, "tap-less"), "%s", why);
        json_decref(checks);
        json_decref(st);
    }
    json_t *ran = json_object_get(
        json_object_get(json_object_get(r.cells[0].gates_json, "parity"), "metrics"), "ran");
    cr_expect_str_eq(json_string_value(json_object_get(ran, "backend")), "exec");
    /* no taps: no router gaps are read from the zeroed tap arrays (they would excuse positions
     * as ROUTE_TIE) */
    cr_expect_null(
        json_object_get(
            json_object_get(
                json_object_get(json_object_get(r.cells[0].gates_json, "parity"), "metrics"),
                "per_position"),
            "route_gap"),
        "an engine without taps got router gaps");
    cr_expect(strstr(json_string_value(json_object_get(ran, "engine")), "exec_engine 1.0"));
    run_result_free(&r);
    /* the receipt's subject names the engine that ran, and one child served all five gates */
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_open_v2(path_in("r.db"), &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "select json_extract(payload,'$.subject.exec_engine.spawns'),"
                                    " json_extract(payload,'$.subject.exec_engine.engine')"
                                    " from receipts",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_expect_eq(sqlite3_column_int(st, 0), 1);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 1), "exec_engine");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

Test(exec, an_engine_that_reports_a_gpu_passes_capability_and_the_device_is_recorded)
{
    char engines[512];
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s, --device, 'NVIDIA H200 (says the engine)'], timeout_s: 30,"
                    " supports: [decode]}"),
             engine_path());
    struct run_result r = run_one(engines, "    falsify: []\n");
    cr_expect_str_eq(gate_field(&r, "capability", "verdict"), "PASS", "%s",
                     gate_field(&r, "capability", "reason"));
    cr_expect_str_eq(gate_field(&r, "parity", "verdict"), "PASS", "%s",
                     gate_field(&r, "parity", "reason"));
    json_t *ran = json_object_get(
        json_object_get(json_object_get(r.cells[0].gates_json, "parity"), "metrics"), "ran");
    cr_expect(strstr(json_string_value(json_object_get(ran, "device")), "NVIDIA H200"));
    run_result_free(&r);
}

Test(exec, gate_run_turns_a_crashing_engine_into_failed_rows)
{
    char engines[512];
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s, --crash-at-forward, '1'], timeout_s: 30, supports: [decode]}"),
             engine_path());
    struct run_result r = run_one(engines, "    falsify: []\n");
    cr_expect_str_eq(r.cells[0].verdict, "FAIL");
    cr_expect_gt(r.cells[0].receipt_id, 0, "a failed cell still gets its receipt");
    const char *why = gate_field(&r, "parity", "reason");
    cr_expect(why && strstr(why, "crashing at forward 1 as asked"), "%s", why ? why : "(none)");
    cr_expect(why && strstr(why, "died of signal 11"), "%s", why ? why : "(none)");
    cr_expect_str_eq(gate_field(&r, "parity", "verdict"), "FAIL");
    cr_expect_str_eq(gate_field(&r, "capability", "verdict"), "FAIL");
    run_result_free(&r);
}
