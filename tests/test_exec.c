/* test_exec.c — the exec backend (engine/exec.c) against the reference engine
 * (tests/exec_engine.c, gate-exec over the twin): parity PASS with noise below the thresholds and
 * FAIL with a planted defect; every failure mode of an engine (crash, hang, malformed or oversize
 * frame, wrong payload size, wrong digest, early exit, a handshake that contradicts the ladder,
 * a reply field that misstates the request, a reply before the request was read) becomes a clean
 * ERR_RUNTIME naming the cause, with the child reaped (no zombie); the ladder's engines: section
 * and its refusals at check time; one end-to-end `gate run` per outcome (one engine child per cell,
 * the handshake in the receipt, a crash as FAILED rows). Everything runs on the tiny MoE
 * conformance model at 64 positions. The end-to-end runs use the cheapest throughput and falsify
 * settings where those gates are not the subject (CHEAP_GATES), and the goldens of every one-cell
 * ladder are recorded once per runner (ladderfix). Under ASan (GATE_ASAN, the sanitizer build's
 * run) the two tests that run the default fault set through the engine run its first and last
 * faults and one sweep sample instead of two, and say so on stderr
 * ("ASan: ..."); the normal build runs all of them.
 */
#include <criterion/criterion.h>
#include <criterion/hooks.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/exec.h"
#include "engine/model.h"
#include "harness/gatedef.h"
#include "harness/identity.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "oracles/falsify.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include "oracles/prose.h"
#include "receipts/store.h"
#include "tests/support/check.h"
#include "tests/support/conformance.h"
#include "tests/support/ladderfix.h"
#include "tests/support/session.h"

#define MOE_SHA LADDERFIX_MOE_SHA

/* The goldens every one-cell ladder records (ladderfix_one_cell) are recorded once for the whole
 * runner (ladderfix_record_goldens' cache in the shared folder). */
LADDERFIX_SHARE_BEGIN_HOOK
LADDERFIX_SHARE_END_HOOK

/* The cheapest throughput and falsify gates of a ladder (three tiny runs; one fault, no sweep,
 * one layer of power probes), for the end-to-end tests that are not about them (each gate still
 * runs, through the engine). */
#define CHEAP_THROUGHPUT                                                                           \
    "    throughput: {runs: 3, warmup: 0, prompt_tokens: 8, decode_tokens: 2}\n"
#define CHEAP_FALSIFY "    falsify: {faults: [skip_qk_norm], sweep_samples: 0, power_layers: 1}\n"
#define CHEAP_GATES CHEAP_THROUGHPUT CHEAP_FALSIFY

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
    struct backend_session *s;
    struct mode mode;
};

static void fixture_open(struct fixture *f, const char *mode, double timeout_s, unsigned supports,
                         const char *const *extra)
{
    struct gate_err err = {0};
    memset(f, 0, sizeof *f);
    f->m = check_load_case("qwen3moe-tiny-q4_k_m");
    engine_init(&f->e, timeout_s, supports, extra);
    cr_assert_eq(test_session_new(&f->s, &f->e, moe_path(), MOE_SHA, &err), 0, "%s", err.msg);
    cr_assert_eq(mode_parse(mode, &f->mode, &err), 0, "%s", err.msg);
    f->mode.session = f->s;
}

static void fixture_close(struct fixture *f)
{
    backend_session_close(f->s);
    model_free(f->m);
    expect_no_zombie();
}

static void parity_cfg(struct parity_config *c)
{
    gatedef_parity_config(NULL, c);
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
    cr_expect_eq(test_session_spawns(f.s), 1);
    struct exec_hello h;
    cr_assert_eq(test_session_hello(f.s, &h), 0);
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

#define ALL_KINDS ((1u << FAULT_KIND_COUNT) - 1)
#define ROUTING_KINDS                                                                              \
    ((1u << FAULT_WRONG_EXPERT) | (1u << FAULT_DROPPED_EXPERT) | (1u << FAULT_UNIFORM_WEIGHTS) |   \
     (1u << FAULT_SKIP_QK_NORM))

/* settings.engine as the ladder records an engine that takes the kinds outside proxy_kinds
 * (new reference): supports without faults when it takes none, with faults and no list when it
 * takes every kind, else with its `faults` list */
static json_t *engine_settings(unsigned proxy_kinds)
{
    const unsigned takes = ALL_KINDS & ~proxy_kinds;
    json_t *e = json_pack("{s:s, s:[s, s*]}", "name", "twin", "supports", "decode",
                          takes ? "faults" : NULL);
    if (takes && takes != ALL_KINDS) {
        json_t *fk = json_array();
        for (int k = 0; k < FAULT_KIND_COUNT; k++)
            if (takes & (1u << k))
                json_array_append_new(fk, json_string(fault_kind_name((enum fault_kind)k)));
        json_object_set_new(e, "faults", fk);
    }
    return e;
}

/* falsify_judge over fr's metrics with the settings of an exec cell (settings.engine set, as the
 * ladder records it: an engine that takes every kind outside cfg->proxy_kinds), as gate run,
 * receipt verify and release check judge it */
static enum gate_verdict judge_as_exec(const struct fault_set *faults,
                                       const struct falsify_config *cfg,
                                       const struct falsify_result *fr, char *why, size_t n)
{
    struct falsify_config c = *cfg;
    json_t *engine = engine_settings(cfg->proxy_kinds);
    c.engine = engine;
    json_t *settings = falsify_settings_json(faults, &c), *checks = json_array();
    cr_assert(settings && !json_object_get(settings, "proxy_kinds"));
    why[0] = '\0';
    const enum gate_verdict v = falsify_judge(settings, fr->metrics, checks, why, n);
    json_decref(engine);
    json_decref(settings);
    json_decref(checks);
    return v;
}

/* The default fault set of the MoE model; under ASan (GATE_ASAN) its first and last faults only,
 * said on stderr (the normal build runs every one). */
static void default_faults(struct fault_set *faults, const char *test)
{
    fault_default_set(1, faults);
    if (check_asan() && faults->n > 2) {
        fprintf(stderr, "ASan: exec::%s: 2 of %d default faults (the first and the last)\n", test,
                faults->n);
        faults->f[1] = faults->f[faults->n - 1];
        faults->n = 2;
    }
}

/* The sweep samples per kind of the default-set tests: 2, under ASan 1 (said on stderr). */
static int sweep_samples(const char *test)
{
    if (!check_asan())
        return 2;
    fprintf(stderr, "ASan: exec::%s: 1 of 2 sweep samples per kind\n", test);
    return 1;
}

Test(exec, falsify_on_an_engine_with_faults_rejects_every_fault)
{
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, 0, NULL);
    struct falsify_config cfg;
    gatedef_falsify_config(NULL, &cfg);
    parity_cfg(&cfg.parity);
    /* the sampled sweep in the same run (one set of power probes), one layer of probes: the
     * faults are what this checks */
    cfg.sweep_samples = sweep_samples("falsify_on_an_engine_with_faults_rejects_every_fault");
    cfg.power_layers = 1;
    struct fault_set faults;
    default_faults(&faults, "falsify_on_an_engine_with_faults_rejects_every_fault");
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
        /* and its faulted run matches the judge's run with the same fault */
        cr_expect(fr.f[i].has_agreement && fr.f[i].agreement.pass,
                  "fault %s: the honest engine's faulted run does not match the judge's: %s",
                  fr.f[i].name, fr.f[i].agreement.reason);
    }
    char why[400];
    cr_expect_eq(judge_as_exec(&faults, &cfg, &fr, why, sizeof why), GATE_PASS, "%s", why);
    /* the sampled sweep: every injection the honest engine applied fired (it matches the
     * judge's run with it), in every kind */
    cr_assert_eq(fr.n_kinds, faults.n);
    for (int k = 0; k < fr.n_kinds; k++) {
        cr_expect_eq(fr.k[k].n, cfg.sweep_samples, "%s: sweep samples", fr.k[k].name);
        cr_expect_eq(fr.k[k].noops, 0, "%s: %d of %d honest injections counted as no-ops",
                     fr.k[k].name, fr.k[k].noops, fr.k[k].n);
    }
    falsify_result_free(&fr);
    fixture_close(&f);
}

/* mutation pass (parity_session_witness): without taps the witness is the engine's logits
 * moving, counted over every judged row, the last one included: a fault at the last position
 * alone fired there, and nowhere else */
Test(exec, a_tapless_witness_sees_a_fault_at_the_last_position_alone)
{
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, 0, NULL);
    struct parity_config cfg;
    parity_cfg(&cfg);
    struct gate_err err = {0};
    struct parity_session *s = NULL;
    cr_assert_eq(parity_session_open(&s, f.m, &f.mode, NULL, 0, &cfg, 1, 1, &err), 0, "%s",
                 err.msg);
    struct fault_set fs = {0};
    struct fault_spec fault;
    cr_assert_eq(fault_parse("scale:tensor=output,factor=1.01,positions=63-63", &fault, &err), 0,
                 "%s", err.msg);
    fault_set_add(&fs, &fault, &err);
    struct parity_result r;
    cr_assert_eq(parity_session_run(s, &fs, &cfg, 0, &r, &err), 0, "%s", err.msg);
    parity_result_free(&r);
    struct parity_witness w;
    cr_assert_eq(parity_session_witness(s, FAULT_SCALE, &w, &err), 0, "%s", err.msg);
    cr_expect(w.tapless);
    cr_expect(w.fired, "a fault at the last position did not fire");
    cr_expect_eq(w.n_logit_diff, 1);
    cr_expect_eq(w.pos, 63);
    parity_session_close(s);
    fixture_close(&f);
}

/* Issue 23 §3: an engine that acknowledges set_faults, never applies them, and jitters its
 * logits while a fault is "on" moves its logits (the only tap-less evidence before) and so
 * passed falsify; its faulted runs do not match the judge's runs with the same faults, so every
 * fault is "did not fire" and the gate FAILs, in the run and in the judge over the metrics. */
Test(exec, an_engine_that_fakes_its_faults_fails_falsify)
{
    struct fixture f;
    const char *extra[] = {"--fake-faults", NULL};
    fixture_open(&f, "exec.twin.decode", 30, 0, extra);
    struct falsify_config cfg;
    gatedef_falsify_config(NULL, &cfg);
    parity_cfg(&cfg.parity);
    /* the sampled sweep in the same run (one set of power probes), one layer of probes: the
     * faults are what this checks */
    cfg.sweep_samples = sweep_samples("an_engine_that_fakes_its_faults_fails_falsify");
    cfg.power_layers = 1;
    struct fault_set faults;
    default_faults(&faults, "an_engine_that_fakes_its_faults_fails_falsify");
    struct falsify_result fr;
    struct gate_err err = {0};
    cr_assert_eq(falsify_run(f.m, &f.mode, &faults, NULL, 0, &cfg, 1, &fr, &err), 0, "%s", err.msg);
    cr_assert_eq(fr.n, faults.n);
    for (int i = 0; i < fr.n; i++) {
        cr_expect(fr.f[i].witness.fired && fr.f[i].rejected,
                  "fault %s: the jitter moves the logits and parity rejects them", fr.f[i].name);
        cr_expect(fr.f[i].has_agreement && !fr.f[i].agreement.pass && !fr.f[i].fired,
                  "fault %s: a faked fault counted as fired", fr.f[i].name);
    }
    char why[400];
    cr_expect_eq(judge_as_exec(&faults, &cfg, &fr, why, sizeof why), GATE_FAIL,
                 "falsify passed an engine that fakes its faults");
    cr_expect(strstr(why, "did not apply it"), "%s", why);
    /* a record without the agreement (an edited receipt) is no evidence either; judged without
     * the sweep (its faked samples FAIL on their own). The faked power probes FAIL too, but
     * after the faults: the reason must be the fault record's missing agreement */
    json_t *fa = json_object_get(fr.metrics, "faults");
    for (size_t i = 0; i < json_array_size(fa); i++)
        json_object_del(json_array_get(fa, i), "agreement");
    struct falsify_config no_sweep = cfg;
    no_sweep.sweep_samples = 0;
    cr_expect_eq(judge_as_exec(&faults, &no_sweep, &fr, why, sizeof why), GATE_FAIL,
                 "a fault record without its agreement counted as evidence");
    cr_expect(strstr(why, "(not recorded): the engine did not apply it"), "%s", why);
    /* the sampled sweep likewise: each tap-less injection moved the logits, none matched the
     * judge's run with it, so none counts as fired, in any kind */
    cr_assert_eq(fr.n_kinds, faults.n);
    for (int k = 0; k < fr.n_kinds; k++) {
        cr_expect_eq(fr.k[k].n, cfg.sweep_samples, "%s: sweep samples", fr.k[k].name);
        cr_expect_eq(fr.k[k].noops, fr.k[k].n, "%s: %d of %d faked injections counted as fired",
                     fr.k[k].name, fr.k[k].n - fr.k[k].noops, fr.k[k].n);
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
    cr_expect_eq(test_session_pid(f.s), 0, "the child is still running after a failure");
    backend_close(b);
    free(lg);
    snprintf(msg, n, "%.400s", err.msg);
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

/* Every number and string of a reply is checked against what gate asked before it is believed:
 * an engine that lies in one field (exec_engine --lie FIELD) is refused naming it, and the child
 * is ended. */
Test(exec, a_reply_that_misstates_one_field_is_refused_naming_it)
{
    static const struct {
        const char *field, *says;
    } LIES[] = {
        {"hello.protocol", "(hello): the engine speaks gate-exec 2, gate speaks 1"},
        {"hello.device", "(hello): reply field \"device\" must be a non-empty string"},
        {"load.sha256", "(load): the engine loaded a file with SHA-256 \""},
        {"load.n_vocab", "(load): the engine reports n_vocab 511 but the model has 512"},
        {"load.n_ctx", "(load): the engine loaded a context of"},
        {"forward.n_tokens",
         "(forward n_past=0 n_tokens=1): reply field \"n_tokens\" must be an integer in 1..1"},
        {"forward.n_vocab",
         "(forward n_past=0 n_tokens=1): reply field \"n_vocab\" must be an integer in 512..512"},
    };
    for (size_t i = 0; i < sizeof LIES / sizeof LIES[0]; i++) {
        const char *const a[] = {"--lie", LIES[i].field, NULL};
        char msg[1024];
        cr_expect_eq(run_failing(a, 30, msg, sizeof msg), ERR_RUNTIME, "%s: %s", LIES[i].field,
                     msg);
        cr_expect(strstr(msg, LIES[i].says), "%s: %s", LIES[i].field, msg);
    }
}

/* An engine that answers a forward before it has read the tokens computed nothing gate asked:
 * exec_engine --reply-unread shrinks its stdin pipe to one page and answers at once, so 8 KiB
 * of tokens cannot all be written; the reply is refused, whole and well-formed as it is. */
Test(exec, a_reply_before_the_whole_request_was_read_is_refused)
{
    static const char *const a[] = {"--reply-unread", NULL};
    struct fixture f;
    fixture_open(&f, "exec.twin.prefill", 5, 0, a);
    enum { N = 2048 };
    const size_t V = f.m->hp.n_vocab;
    int32_t *tok = malloc(N * sizeof *tok);
    float *lg = malloc((size_t)N * V * sizeof *lg);
    cr_assert(tok && lg);
    mode_tokens(5, (uint32_t)V, N, tok);
    struct backend_config cfg = {.n_threads = 1, .n_ctx = N, .n_batch = N, .session = f.s};
    struct backend *b = NULL;
    struct gate_err err = {0};
    cr_assert_eq(backend_open(&b, "exec", f.m, &cfg, &err), 0, "%s", err.msg);
    cr_expect_eq(backend_forward(b, tok, N, 0, lg, &err), ERR_RUNTIME);
    cr_expect(strstr(err.msg, "(forward n_past=0 n_tokens=2048): the engine replied before reading"
                              " the whole request"),
              "%s", err.msg);
    cr_expect_eq(test_session_pid(f.s), 0, "the child is still running after a failure");
    backend_close(b);
    free(tok);
    free(lg);
    fixture_close(&f);
}

/* A reply frame in memory: 4-byte H, header text, 8-byte B, payload (plen bytes of 0x5a). */
static size_t frame_put(unsigned char *buf, const char *header, uint64_t plen)
{
    const size_t h = strlen(header);
    for (int i = 0; i < 4; i++)
        buf[i] = (unsigned char)(h >> (8 * i));
    memcpy(buf + 4, header, h);
    for (int i = 0; i < 8; i++)
        buf[4 + h + i] = (unsigned char)(plen >> (8 * i));
    memset(buf + 12 + h, 0x5a, plen);
    return 12 + h + plen;
}

/* exec_reply_decode() of len bytes copied to an exact-size buffer (an ASan build sees a read
 * past the frame); 0 or the error, with *used set. */
static int decode(const unsigned char *frame, size_t len, uint64_t dst_len, size_t *used, char *msg,
                  size_t n)
{
    unsigned char *copy = malloc(len ? len : 1);
    cr_assert(copy);
    memcpy(copy, frame, len);
    json_t *hdr = NULL;
    const void *payload = NULL;
    struct gate_err err = {0};
    int rc = exec_reply_decode(copy, len, dst_len, &hdr, &payload, used, &err);
    snprintf(msg, n, "%.400s", err.msg);
    if (!rc) {
        cr_expect(json_is_true(json_object_get(hdr, "ok")));
        cr_expect_eq((const unsigned char *)payload + dst_len, copy + *used);
    } else {
        cr_expect_null(hdr);
        cr_expect_null(payload);
    }
    json_decref(hdr);
    free(copy);
    return rc;
}

Test(exec, a_reply_frame_decodes_from_memory_with_the_checks_of_the_pipe)
{
    unsigned char buf[256];
    char msg[512];
    size_t used = 0;
    /* two frames back to back: a forward reply of 8 bytes, then {"ok":true} */
    size_t a = frame_put(buf, "{\"ok\":true,\"n_tokens\":1}", 8);
    size_t b = frame_put(buf + a, "{\"ok\":true}", 0);
    cr_assert_eq(decode(buf, a + b, 8, &used, msg, sizeof msg), 0, "%s", msg);
    cr_expect_eq(used, a);
    cr_assert_eq(decode(buf + a, b, 0, &used, msg, sizeof msg), 0, "%s", msg);
    cr_expect_eq(used, b);
    /* every proper prefix of a frame is cut short, never read past */
    for (size_t k = 0; k < a; k++) {
        cr_expect_eq(decode(buf, k, 8, &used, msg, sizeof msg), ERR_RUNTIME, "prefix %zu", k);
        cr_expect(strstr(msg, "reply cut short"), "prefix %zu: %s", k, msg);
    }
    /* the pipe's own refusals, in its words */
    cr_expect_eq(decode(buf, a, 4, &used, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "reply payload is 8 bytes, expected exactly 4"), "%s", msg);
    size_t n = frame_put(buf, "{\"ok\":false,\"error\":\"no\\nway\"}", 0);
    cr_expect_eq(decode(buf, n, 0, &used, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "the engine answered an error: \"no\\nway\""), "%s", msg);
    n = frame_put(buf, "[true]", 0);
    cr_expect_eq(decode(buf, n, 0, &used, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "reply header is not one JSON object (not an object): \"[true]\""), "%s",
              msg);
    n = frame_put(buf, "{\"ok\":1}", 0);
    cr_expect_eq(decode(buf, n, 0, &used, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "reply header has no boolean \"ok\""), "%s", msg);
    const unsigned char zero[16] = {0}, big[16] = {0x01, 0x00, 0x01, 0x00};
    cr_expect_eq(decode(zero, sizeof zero, 0, &used, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "reply header length 0 is outside 1..65536"), "%s", msg);
    cr_expect_eq(decode(big, sizeof big, 0, &used, msg, sizeof msg), ERR_RUNTIME);
    cr_expect(strstr(msg, "reply header length 65537 is outside 1..65536"), "%s", msg);
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

/* The session is the backend's own, reached through the backend API (issue 24 §5): the built-in
 * backends keep none (NULL, which every open takes), an unknown name is an input error, an
 * external engine's session needs an engine, and a backend handed another backend's session
 * refuses it instead of misreading it. */
Test(exec, the_session_belongs_to_its_backend)
{
    struct gate_err err = {0};
    struct backend_session *s = (struct backend_session *)&err; /* must be overwritten */
    const struct backend_session_config none = {.model_path = moe_path(), .model_sha256 = MOE_SHA};
    cr_expect_eq(backend_session_open(&s, backend_judge_name(), &none, &err), 0, "%s", err.msg);
    cr_expect_null(s, "the judge keeps no per-cell state");
    cr_expect_eq(backend_session_open(&s, "vulkan", &none, &err), ERR_INPUT);
    cr_expect_null(s);
    err_clear(&err);
    cr_expect_eq(backend_session_open(&s, BACKEND_EXTERNAL, &none, &err), ERR_INPUT,
                 "an external engine's session without an engine");
    cr_expect_null(s);
    err_clear(&err);
    struct backend_session_info si;
    backend_session_info(NULL, &si);
    cr_expect_eq(si.spawns + si.pid + si.have_hello, 0);
    backend_session_close(NULL);

    struct model *m = check_load_case("qwen3moe-tiny-q4_k_m");
    struct exec_engine e;
    memset(&e, 0, sizeof e);
    snprintf(e.name, sizeof e.name, "none");
    e.argv[e.argc++] = (char *)"/nonexistent/engine";
    e.timeout_s = 5;
    cr_assert_eq(test_session_new(&s, &e, moe_path(), MOE_SHA, &err), 0, "%s", err.msg);
    struct backend_config cfg = {.n_ctx = 64, .n_batch = 64, .session = s};
    struct backend *b = NULL;
    cr_expect_eq(backend_open(&b, backend_judge_name(), m, &cfg, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "another backend's session"), "%s", err.msg);
    cr_expect_null(b);
    cr_expect_eq(test_session_spawns(s), 0, "nothing was started");
    backend_session_close(s);
    model_free(m);
}

Test(exec, an_engine_that_cannot_be_started_is_an_error)
{
    struct model *m = check_load_case("qwen3moe-tiny-q4_k_m");
    struct exec_engine e;
    memset(&e, 0, sizeof e);
    snprintf(e.name, sizeof e.name, "none");
    e.argv[e.argc++] = (char *)"/nonexistent/engine";
    e.timeout_s = 5;
    struct backend_session *s = NULL;
    struct gate_err err = {0};
    cr_assert_eq(test_session_new(&s, &e, moe_path(), MOE_SHA, &err), 0, "%s", err.msg);
    struct backend_config cfg = {.n_ctx = 64, .n_batch = 64, .session = s};
    struct backend *b = NULL;
    cr_expect_eq(backend_open(&b, "exec", m, &cfg, &err), ERR_RUNTIME);
    cr_expect(strstr(err.msg, "cannot start '/nonexistent/engine'"), "%s", err.msg);
    backend_session_close(s);
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

/* One child, one cache: a second backend on a session already in use is refused (its forwards
 * would move the first one's cache under it); once the first is closed the session serves again,
 * with the same child. */
Test(exec, a_session_serves_one_open_backend_at_a_time)
{
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, 0, NULL);
    struct backend *a = NULL, *b = NULL;
    struct gate_err err = {0};
    cr_assert_eq(mode_open(&a, &f.mode, f.m, 64, 1, NULL, &err), 0, "%s", err.msg);
    cr_expect_eq(mode_open(&b, &f.mode, f.m, 64, 1, NULL, &err), ERR_RUNTIME);
    cr_expect_null(b);
    cr_expect(strstr(err.msg, "exec engine 'twin' is already in use by another open backend"), "%s",
              err.msg);
    backend_close(a);
    err_clear(&err);
    cr_expect_eq(mode_open(&b, &f.mode, f.m, 64, 1, NULL, &err), 0, "%s", err.msg);
    backend_close(b);
    cr_expect_eq(test_session_spawns(f.s), 1);
    fixture_close(&f);
}

/* The build_id pin is compared whole: a pin that is only the start of what the engine reports
 * ("tests/exec_engine.c") names another build, refused at the handshake, and no later open of the
 * cell starts the engine again; the whole id runs. */
Test(exec, a_build_id_pin_matches_only_the_whole_reported_build_id)
{
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, 0, NULL);
    snprintf(f.e.build_id, sizeof f.e.build_id, "tests/exec_engine");
    struct backend *b = NULL;
    struct gate_err err = {0};
    cr_expect_eq(mode_open(&b, &f.mode, f.m, 64, 1, NULL, &err), ERR_RUNTIME);
    cr_expect_null(b);
    cr_expect(strstr(err.msg, "build_id \"tests/exec_engine.c\" but the ladder pins"
                              " \"tests/exec_engine\""),
              "%s", err.msg);
    err_clear(&err);
    cr_expect_eq(mode_open(&b, &f.mode, f.m, 64, 1, NULL, &err), ERR_RUNTIME);
    cr_expect(strstr(err.msg, "it is not the engine build this ladder gates"), "%s", err.msg);
    cr_expect_eq(test_session_spawns(f.s), 1, "the engine was started again");
    fixture_close(&f);
    fixture_open(&f, "exec.twin.decode", 30, 0, NULL);
    snprintf(f.e.build_id, sizeof f.e.build_id, "tests/exec_engine.c");
    err_clear(&err);
    cr_expect_eq(mode_open(&b, &f.mode, f.m, 64, 1, NULL, &err), 0, "%s", err.msg);
    backend_close(b);
    fixture_close(&f);
}

/* A fault kind outside the ladder's `faults:` list never goes into the engine, even one its hello
 * lists: the engine is only trusted with the kinds the ladder declares (the others are falsified
 * by proxy). */
Test(exec, a_fault_kind_the_ladder_does_not_declare_is_never_sent_to_the_engine)
{
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, 0, NULL);
    f.e.faults = 1u << FAULT_SKIP_QK_NORM;
    struct backend *b = NULL;
    struct gate_err err = {0};
    cr_assert_eq(mode_open(&b, &f.mode, f.m, 64, 1, NULL, &err), 0, "%s", err.msg);
    struct fault_set fs = {0};
    struct fault_spec spec;
    cr_assert_eq(fault_parse("wrong_expert", &spec, &err), 0, "%s", err.msg);
    fault_set_add(&fs, &spec, &err);
    backend_set_faults(b, &fs);
    const int32_t tok = 1;
    float *lg = malloc(f.m->hp.n_vocab * sizeof *lg);
    cr_assert(lg);
    cr_expect_eq(backend_forward(b, &tok, 1, 0, lg, &err), ERR_RUNTIME);
    cr_expect(strstr(err.msg, "the ladder does not declare that the engine injects wrong_expert"),
              "%s", err.msg);
    /* the declared kind goes in */
    fs.n = 0;
    cr_assert_eq(fault_parse("skip_qk_norm", &spec, &err), 0, "%s", err.msg);
    fault_set_add(&fs, &spec, &err);
    backend_set_faults(b, &fs);
    err_clear(&err);
    cr_expect_eq(backend_forward(b, &tok, 1, 0, lg, &err), 0, "%s", err.msg);
    free(lg);
    backend_close(b);
    fixture_close(&f);
}

/* A gate that needs a longer cache than the child loaded gets a fresh child loaded that long
 * (the first child loads min(n_ctx_train, 4096) positions: 4096 here); a shorter gate after it
 * is served by the longer child. */
Test(exec, a_gate_that_needs_a_longer_cache_gets_a_fresh_child_loaded_longer)
{
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, 0, NULL);
    struct backend *b = NULL;
    struct gate_err err = {0};
    cr_assert_eq(mode_open(&b, &f.mode, f.m, 64, 1, NULL, &err), 0, "%s", err.msg);
    backend_close(b);
    cr_assert_eq(mode_open(&b, &f.mode, f.m, 5000, 1, NULL, &err), 0, "%s", err.msg);
    cr_expect_eq(b->n_ctx, 5000);
    backend_close(b);
    cr_expect_eq(test_session_spawns(f.s), 2,
                 "the child loaded with 4096 positions served a gate of 5000");
    cr_assert_eq(mode_open(&b, &f.mode, f.m, 64, 1, NULL, &err), 0, "%s", err.msg);
    backend_close(b);
    cr_expect_eq(test_session_spawns(f.s), 2);
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
    /* falsify (the default set) on an engine that cannot inject faults is no longer refused:
     * it runs by proxy (issue 23 §3; exec::falsify_by_proxy_...) */
    make_dir();
    struct ladder *l = NULL;
    struct gate_err err = {0};
    cr_expect_eq(ladder_load(&l,
                             write_ladder(ENGINE("{argv: [x], supports: [decode]}"),
                                          "exec.twin.decode", NULL),
                             &err),
                 0, "%s", err.msg);
    /* and every report says so (release check's note, JSON falsified_by_proxy, the HTML note) */
    cr_expect(l && ladder_falsify_by_proxy(&l->cells[0].g));
    ladder_free(l);
    l = NULL;
    cr_expect_eq(ladder_load(&l,
                             write_ladder(ENGINE("{argv: [x], supports: [decode, faults]}"),
                                          "exec.twin.decode", NULL),
                             &err),
                 0, "%s", err.msg);
    cr_expect(l && !ladder_falsify_by_proxy(&l->cells[0].g), "an engine that takes faults");
    ladder_free(l);
}

/* Issue 23 §3: an engine without faults (llama.cpp) is falsified by proxy: each fault goes into
 * the judge, and the engine's clean run judged against the faulted judge must be rejected. The
 * receipt says proxy (never the engine's own injection), and the judge holds a run to the mode
 * its settings' engine implies. */
Test(exec, falsify_by_proxy_on_an_engine_without_faults)
{
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, 0, NULL);
    struct falsify_config cfg;
    gatedef_falsify_config(NULL, &cfg);
    parity_cfg(&cfg.parity);
    cfg.sweep_samples = 2;
    cfg.power_layers = 1;
    cfg.proxy_kinds = ALL_KINDS;
    struct fault_set faults;
    fault_default_set(1, &faults);
    struct falsify_result fr;
    struct gate_err err = {0};
    cr_assert_eq(falsify_run(f.m, &f.mode, &faults, NULL, 0, &cfg, 1, &fr, &err), 0, "%s", err.msg);
    cr_expect_eq(fr.verdict, GATE_PASS, "%s", fr.reason);
    cr_expect(strstr(fr.reason, "PASS (by proxy:"), "gate run's line says proxy: %s", fr.reason);
    for (int i = 0; i < fr.n; i++)
        cr_expect(fr.f[i].proxy && fr.f[i].fired && fr.f[i].rejected, "fault %s by proxy: %s",
                  fr.f[i].name, fr.f[i].metric);
    cr_expect(json_is_true(
        json_object_get(json_array_get(json_object_get(fr.metrics, "faults"), 0), "proxy")));
    cr_expect(fr.n_probes > 0 && fr.probes[0].proxy);
    char why[400];
    cr_expect_eq(judge_as_exec(&faults, &cfg, &fr, why, sizeof why), GATE_PASS, "%s", why);
    /* the same metrics for an engine that takes faults: proxy is not its own injection */
    cfg.proxy_kinds = 0;
    cr_expect_eq(judge_as_exec(&faults, &cfg, &fr, why, sizeof why), GATE_FAIL);
    cr_expect(strstr(why, "injected by proxy (into the judge), but the cell's engine takes"), "%s",
              why);
    cfg.proxy_kinds = ALL_KINDS;
    /* a proxy fault that does not move the judge tested nothing */
    json_t *f0 = json_array_get(json_object_get(fr.metrics, "faults"), 0);
    json_object_set_new(json_object_get(f0, "witness"), "logit_diffs", json_integer(0));
    cr_expect_eq(judge_as_exec(&faults, &cfg, &fr, why, sizeof why), GATE_FAIL);
    cr_expect(strstr(why, "did not fire in the judge"), "%s", why);
    falsify_result_free(&fr);
    fixture_close(&f);
}

/* The judge over a copy of fr's metrics in which `edit` changed one item; its verdict and why */
static enum gate_verdict judge_edited(const struct fault_set *faults,
                                      const struct falsify_config *cfg,
                                      const struct falsify_result *fr, const char *array,
                                      size_t index, int proxy, char *why, size_t n)
{
    struct falsify_result copy = *fr;
    copy.metrics = json_deep_copy(fr->metrics);
    json_t *items =
        !strcmp(array, "faults") ? json_object_get(copy.metrics, "faults")
        : !strcmp(array, "probes")
            ? json_object_get(json_object_get(copy.metrics, "power"), "probes")
            : json_object_get(
                  json_array_get(json_object_get(json_object_get(copy.metrics, "sweep"), "kinds"),
                                 0),
                  "points");
    json_t *it = json_array_get(items, index);
    cr_assert(it, "no %s[%zu] in the metrics", array, index);
    if (proxy)
        json_object_set_new(it, "proxy", json_true());
    else
        json_object_del(it, "proxy");
    const enum gate_verdict v = judge_as_exec(faults, cfg, &copy, why, n);
    json_decref(copy.metrics);
    return v;
}

/* Issue 23 §3, per kind: an engine that takes the routing faults and skip_qk_norm but not scale
 * (the power probe's kind). Before, proxy was all or nothing: its falsify run errored at the
 * first probe ("the engine cannot inject scale"), or, by proxy, sent even the faults it takes
 * into the judge. Now each kind goes where the engine's ladder entry says: the four listed faults
 * and their sweep samples into the engine (tap-less, matching the judge's faulted runs), every
 * power probe into the judge; the gate PASSes, and the judge FAILs a receipt whose item says
 * otherwise (one proxy flag flipped) or whose settings' engine takes other kinds. */
Test(exec, falsify_partly_by_proxy_on_an_engine_that_takes_routing_faults_but_not_scale)
{
    static const char *const a[] = {
        "--faults", "wrong_expert,dropped_expert,uniform_weights,skip_qk_norm", NULL};
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, 0, a);
    f.e.faults = ROUTING_KINDS; /* the ladder's `faults:` list (the session borrows f.e) */
    struct falsify_config cfg;
    gatedef_falsify_config(NULL, &cfg);
    parity_cfg(&cfg.parity);
    cfg.sweep_samples = 1;
    cfg.power_layers = 1;
    cfg.proxy_kinds = ALL_KINDS & ~ROUTING_KINDS;
    json_t *engine = engine_settings(cfg.proxy_kinds);
    cfg.engine = engine; /* the run's own verdict judges as the release check does */
    struct fault_set faults;
    fault_default_set(1, &faults);
    struct falsify_result fr;
    struct gate_err err = {0};
    cr_assert_eq(falsify_run(f.m, &f.mode, &faults, NULL, 0, &cfg, 1, &fr, &err), 0, "%s", err.msg);
    cr_expect_eq(fr.verdict, GATE_PASS, "%s", fr.reason);
    cr_expect(strstr(fr.reason, "PASS (scale by proxy, into the judge: the engine does not take"
                                " that kind; the other kinds into the engine)"),
              "gate run's line names the proxied kind: %s", fr.reason);
    cr_expect_eq(fr.proxy_kinds, 1u << FAULT_SCALE);
    cr_assert_eq(fr.n, 4);
    for (int i = 0; i < fr.n; i++) /* injected into the engine, and it applied them */
        cr_expect(!fr.f[i].proxy && fr.f[i].witness.tapless && fr.f[i].has_agreement &&
                      fr.f[i].agreement.pass && fr.f[i].fired && fr.f[i].rejected,
                  "fault %s: not the engine's own injection, or not applied: %s", fr.f[i].name,
                  fr.f[i].metric);
    cr_assert_eq(fr.n_kinds, 4);
    for (int k = 0; k < fr.n_kinds; k++)
        for (int j = 0; j < fr.k[k].n; j++)
            cr_expect(!fr.k[k].s[j].proxy && fr.k[k].s[j].tapless, "%s sample %d went by proxy",
                      fr.k[k].name, j);
    cr_assert(fr.n_probes > 0);
    for (int i = 0; i < fr.n_probes; i++)
        cr_expect(fr.probes[i].proxy && fr.probes[i].logit_diffs > 0, "probe %s not by proxy",
                  fr.probes[i].name);
    char why[400];
    cr_expect_eq(judge_as_exec(&faults, &cfg, &fr, why, sizeof why), GATE_PASS, "%s", why);
    /* a tampered receipt: one item's proxy flag flipped */
    cr_expect_eq(judge_edited(&faults, &cfg, &fr, "faults", 1, 1, why, sizeof why), GATE_FAIL,
                 "a fault the engine takes, claimed by proxy, passed");
    cr_expect(strstr(why, "fault dropped_expert was injected by proxy (into the judge), but the"
                          " cell's engine takes dropped_expert"),
              "%s", why);
    cr_expect_eq(judge_edited(&faults, &cfg, &fr, "points", 0, 1, why, sizeof why), GATE_FAIL,
                 "a sweep sample the engine takes, claimed by proxy, passed");
    cr_expect(strstr(why, "but the cell's engine takes wrong_expert"), "%s", why);
    cr_expect_eq(judge_edited(&faults, &cfg, &fr, "probes", 0, 0, why, sizeof why), GATE_FAIL,
                 "a probe the engine cannot take, claimed as its own injection, passed");
    cr_expect(strstr(why, "was injected into the engine, but the cell's engine does not take"
                          " scale"),
              "%s", why);
    /* the same metrics under settings whose engine takes every kind, or none: FAIL */
    cfg.proxy_kinds = 0;
    cr_expect_eq(judge_as_exec(&faults, &cfg, &fr, why, sizeof why), GATE_FAIL);
    cr_expect(strstr(why, "but the cell's engine takes scale"), "%s", why);
    cfg.proxy_kinds = ALL_KINDS;
    cr_expect_eq(judge_as_exec(&faults, &cfg, &fr, why, sizeof why), GATE_FAIL);
    cr_expect(strstr(why, "but the cell's engine does not take wrong_expert"), "%s", why);
    falsify_result_free(&fr);
    json_decref(engine);
    fixture_close(&f);
}

/* The ladder's `faults:` on an engine: the kinds it injects itself. The falsify gate proxies the
 * others (the listed faults' kinds and scale, the power probe), the settings record the list,
 * and what cannot hold is refused at check time. */
Test(exec, the_ladder_s_engine_faults_list_decides_the_kinds_that_go_by_proxy)
{
    expect_refused(ENGINE("{argv: [x], supports: [decode], faults: [wrong_expert]}"),
                   "exec.twin.decode", NULL, "but its supports do not list faults");
    expect_refused(ENGINE("{argv: [x], supports: [decode, faults], faults: [wrong_way]}"),
                   "exec.twin.decode", NULL, "faults entry 'wrong_way' is not a fault kind");
    expect_refused(ENGINE("{argv: [x], supports: [decode, faults], faults: []}"),
                   "exec.twin.decode", NULL, "faults");
    expect_refused(ENGINE("{argv: [x], supports: [decode, faults], faults: [scale, scale]}"),
                   "exec.twin.decode", NULL, "faults lists 'scale' twice");
    make_dir();
    struct ladder *l = NULL;
    struct gate_err err = {0};
    cr_assert_eq(ladder_load(&l,
                             write_ladder(ENGINE("{argv: [x], supports: [decode, faults], faults:"
                                                 " [wrong_expert, skip_qk_norm, kv_corrupt]}"),
                                          "exec.twin.decode",
                                          "    falsify: [wrong_expert, dropped_expert]\n"),
                             &err),
                 0, "%s", err.msg);
    const struct ladder_gates *g = &l->cells[0].g;
    /* used: wrong_expert, dropped_expert, scale; taken: wrong_expert */
    cr_expect_eq(ladder_falsify_proxy_kinds(g), (1u << FAULT_DROPPED_EXPERT) | (1u << FAULT_SCALE));
    char kinds[160];
    cr_expect_eq(ladder_falsify_proxy_text(g, kinds, sizeof kinds), 2, "partial");
    cr_expect_str_eq(kinds, "dropped_expert, scale");
    json_t *s = ladder_gate_settings(g, "falsify");
    json_t *fk = json_object_get(json_object_get(s, "engine"), "faults");
    cr_expect_eq(json_array_size(fk), 3, "the settings record the engine's kinds");
    cr_expect_str_eq(json_string_value(json_array_get(fk, 2)), "kv_corrupt");
    json_decref(s);
    ladder_free(l);
    /* no list: every kind (it must take them all); no faults: none (all by proxy) */
    l = NULL;
    cr_assert_eq(ladder_load(&l,
                             write_ladder(ENGINE("{argv: [x], supports: [decode]}"),
                                          "exec.twin.decode", "    falsify: [skip_qk_norm]\n"),
                             &err),
                 0, "%s", err.msg);
    cr_expect_eq(ladder_falsify_proxy_text(&l->cells[0].g, kinds, sizeof kinds), 1);
    cr_expect_str_eq(kinds, "skip_qk_norm, scale");
    ladder_free(l);
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

/* gate run over one exec cell; input_seed as gate run --input-seed (0: drawn fresh) */
static struct run_result run_mode(const char *engines, const char *mode, const char *gates,
                                  uint64_t input_seed)
{
    make_dir();
    struct gate_err err = {0};
    const char *p = write_ladder(engines, mode, gates);
    struct run_options o = {.ladder = p,
                            .host = "a",
                            .db = path_in("r.db"),
                            .key = path_in("a.key"),
                            .threads = 1,
                            .input_seed = input_seed};
    struct run_result res;
    cr_assert_eq(run_ladder(&o, NULL, NULL, &res, &err), 0, "%s", err.msg);
    cr_assert_eq(res.n, 1);
    expect_no_zombie();
    return res;
}

static struct run_result run_seeded(const char *engines, const char *gates, uint64_t input_seed)
{
    return run_mode(engines, "exec.twin.decode", gates, input_seed);
}

/* The tests' fixed input seed: a verdict a test asserts must not depend on a draw (one falsify
 * sweep sample per kind, a few judged positions); what a fresh draw does is tested on its own
 * (an_engine_that_knows_its_test_inputs_fails_parity_on_fresh_ones) */
#define TEST_INPUT_SEED 0x5eedull

static struct run_result run_one(const char *engines, const char *gates)
{
    return run_seeded(engines, gates, TEST_INPUT_SEED);
}

static const char *gate_field(const struct run_result *r, const char *gate, const char *field)
{
    return json_string_value(json_object_get(json_object_get(r->cells[0].gates_json, gate), field));
}

/* metrics.inputs.<field> of a gate's row */
static const char *inputs_field(const struct run_result *r, const char *gate, const char *field)
{
    const json_t *g = json_object_get(r->cells[0].gates_json, gate);
    return json_string_value(
        json_object_get(json_object_get(json_object_get(g, "metrics"), "inputs"), field));
}

/* An engine that knows its test inputs — a defeat device, right only while the sequence is the
 * one it was built to pass — passes parity whenever the inputs are predictable, as they were
 * while every run judged the fixed sequence mode_tokens(PARITY_TOKEN_SEED = 202 = 0xca) (the
 * attack, reproduced with that seed given); a run that draws its own inputs (the default) fails
 * it. Both runs record the seed they judged and whether it was drawn. */
Test(exec, an_engine_that_knows_its_test_inputs_fails_parity_on_fresh_ones)
{
    char engines[512];
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s, --known-inputs, ca], timeout_s: 30, supports: [decode, faults]}"),
             engine_path());
    struct run_result r = run_seeded(engines, CHEAP_GATES, 0xca);
    cr_expect_str_eq(gate_field(&r, "parity", "verdict"), "PASS",
                     "on the inputs it knows the engine is right: %s",
                     gate_field(&r, "parity", "reason"));
    cr_expect_str_eq(inputs_field(&r, "parity", "seed"), "00000000000000ca");
    cr_expect_str_eq(inputs_field(&r, "parity", "chosen"), "given");
    cr_expect_str_eq(inputs_field(&r, "falsify", "seed"), "00000000000000ca");
    run_result_free(&r);
    r = run_seeded(engines, CHEAP_GATES, 0);
    cr_expect_str_eq(gate_field(&r, "parity", "verdict"), "FAIL",
                     "an engine right only on known inputs passed parity on fresh ones");
    cr_expect_str_eq(inputs_field(&r, "parity", "chosen"), "fresh");
    cr_expect(inputs_field(&r, "parity", "seed") &&
                  strcmp(inputs_field(&r, "parity", "seed"), "00000000000000ca"),
              "the drawn seed is the known one");
    cr_expect_eq(r.n_pass, 0, "the cell passed");
    run_result_free(&r);
}

/* An engine that tells test inputs from text — right wherever its last 12 tokens are not plain
 * text, 1 % off where they are — passed parity while every sequence was uniform random ids (at
 * 3a17c2b: the whole cell PASS, receipt signed); the run's sequence now has prose in the model's
 * own tokenizer (parity_tokens), and parity fails it there. The receipt says how much of the
 * sequence, and of the judged positions, was prose. */
Test(exec, an_engine_right_only_on_random_ids_fails_parity_on_the_prose_in_its_inputs)
{
    char engines[512];
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s, --only-random-ids], timeout_s: 30, supports: [decode, faults]}"),
             engine_path());
    struct run_result r = run_seeded(engines, CHEAP_GATES, TEST_INPUT_SEED);
    cr_expect_str_eq(gate_field(&r, "parity", "verdict"), "FAIL",
                     "an engine 1 %% off on text passed parity: %s",
                     gate_field(&r, "parity", "reason"));
    const json_t *prose = json_object_get(
        json_object_get(json_object_get(r.cells[0].gates_json, "parity"), "metrics"), "prose");
    cr_expect_gt(json_integer_value(json_object_get(prose, "tokens")), 0, "no prose");
    cr_expect_gt(json_integer_value(json_object_get(prose, "judged")), 0,
                 "no judged position was prose");
    cr_expect_eq(r.n_pass, 0, "the cell passed");
    run_result_free(&r);
}

/* An engine that knows gate's chat conversation — right on it and wherever the context holds no
 * <|im_start|>, 1 % off in every other chat — passed every gate while chat cells judged the one
 * fixed conversation (at 60ff51e: parity max KL 0 on the chat cell; the decode cell's inputs
 * never held a chat token). A run's chat is now a fresh conversation of prose in the model's
 * template (parity_chat_tokens), so parity fails it there, on every seed tried; and a decode
 * cell's inputs hold chat requests too (prose_mixed_tokens), so a ladder without chat cells
 * catches it as well, on a run whose sequence holds one. */
Test(exec, an_engine_that_knows_the_chat_conversation_fails_parity_on_a_fresh_one)
{
    char engines[512];
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s, --known-chat], timeout_s: 60, supports: [decode, chat, faults]}"),
             engine_path());
    /* three seeds in the normal build; one under ASan (each chat run was 12 s of its 43 s) */
    const uint64_t n_seeds = check_asan() ? 1 : 3;
    for (uint64_t seed = 1; seed <= n_seeds; seed++) {
        struct run_result r = run_mode(engines, "exec.twin.chat", CHEAP_GATES, seed * 0x5eed);
        cr_expect_str_eq(gate_field(&r, "parity", "verdict"), "FAIL",
                         "seed %llu: an engine 1 %% off in every chat but gate's own passed"
                         " parity: %s",
                         (unsigned long long)seed, gate_field(&r, "parity", "reason"));
        cr_expect_eq(r.n_pass, 0, "the chat cell passed");
        const json_t *mx =
            json_object_get(json_object_get(r.cells[0].gates_json, "parity"), "metrics");
        cr_expect_str_eq(json_string_value(json_object_get(mx, "chat_conversation")), "fresh");
        run_result_free(&r);
    }
    /* the first seed whose 64 decode positions hold a chat request (3 in 4 do) */
    struct model *m = NULL;
    struct gate_err err = {0};
    cr_assert_eq(model_load(&m, moe_path(), &err), 0, "%s", err.msg);
    struct tok *t = prose_model_tok(m);
    cr_assert(t);
    const int32_t im_start = tok_find(t, "<|im_start|>");
    uint64_t seed = 0;
    for (uint64_t s = 1; s <= 16 && !seed; s++) {
        int32_t ids[64];
        struct parity_config c = {.token_seed = s * 0x5eed};
        cr_assert_eq(parity_tokens(&c, m, 64, ids, NULL, NULL, &err), 0, "%s", err.msg);
        for (int i = 0; i < 64; i++)
            seed = ids[i] == im_start ? c.token_seed : seed;
    }
    tok_free(t);
    model_free(m);
    cr_assert(seed, "no seed of 16 put a chat request into 64 positions");
    struct run_result d = run_seeded(engines, CHEAP_GATES, seed);
    cr_expect_str_eq(gate_field(&d, "parity", "verdict"), "FAIL",
                     "a decode cell whose inputs hold a chat request passed an engine 1 %% off"
                     " there: %s",
                     gate_field(&d, "parity", "reason"));
    run_result_free(&d);
}

/* The consistency gate of a run judges the run's own inputs, half prose (until 2026-12-03 one
 * fixed sequence of ids, the same on every run): recorded with the seed in its metrics */
Test(exec, the_consistency_gate_runs_on_the_run_s_inputs)
{
    char engines[512];
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s], timeout_s: 30, supports: [decode, faults]}"), engine_path());
    struct run_result r =
        run_one(engines, CHEAP_GATES "    consistency: {positions: 32, repeats: 1}\n");
    cr_expect_str_eq(gate_field(&r, "consistency", "verdict"), "PASS", "%s",
                     gate_field(&r, "consistency", "reason"));
    cr_expect_str_eq(inputs_field(&r, "consistency", "seed"), "0000000000005eed");
    const json_t *mx =
        json_object_get(json_object_get(r.cells[0].gates_json, "consistency"), "metrics");
    cr_expect_gt(json_integer_value(json_object_get(mx, "prose_tokens")), 0, "no prose");
    run_result_free(&r);
}

/* A batched-path bug that only the consistency gate sees: NaN in the first logit of every
 * batched forward, right one token at a time (parity's decode path never batches). An exec
 * engine declares no bitwise invariance, so it is held to max_abs, and a NaN difference must not
 * drop out of that maximum. */
Test(exec, a_nan_only_in_batched_forwards_fails_consistency)
{
    char engines[512];
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s, --nan-batched], timeout_s: 30, supports: [decode, faults]}"),
             engine_path());
    struct run_result r =
        run_one(engines, CHEAP_GATES "    consistency: {positions: 32, repeats: 1}\n");
    cr_expect_str_eq(gate_field(&r, "parity", "verdict"), "PASS", "decode is right: %s",
                     gate_field(&r, "parity", "reason"));
    cr_expect_str_eq(gate_field(&r, "consistency", "verdict"), "FAIL",
                     "a NaN in every batched forward passed consistency: %s",
                     gate_field(&r, "consistency", "reason"));
    cr_expect_eq(r.n_pass, 0, "the cell passed");
    run_result_free(&r);
}

/* One run serves two stories: the handshake (one child for every gate, recorded in the receipt)
 * and an engine that reports a GPU (capability PASSes on its word, recorded as ran.device). */
Test(exec, gate_run_starts_the_engine_once_per_cell_and_records_its_handshake)
{
    char engines[512];
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s, --noise, '1e-5', --device, 'NVIDIA H200 (says the engine)'],"
                    " timeout_s: 30, supports: [decode, faults]}"),
             engine_path());
    struct run_result r =
        run_one(engines, CHEAP_THROUGHPUT "    falsify: {faults: [uniform_weights],"
                                          " sweep_samples: 1, power_layers: 1}\n");
    cr_expect_str_eq(gate_field(&r, "capability", "verdict"), "PASS",
                     "an engine that reports a GPU passes capability: %s",
                     gate_field(&r, "capability", "reason"));
    cr_expect_str_eq(gate_field(&r, "parity", "verdict"), "PASS", "%s",
                     gate_field(&r, "parity", "reason"));
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
    /* no taps: no routes are read from the zeroed tap arrays (the route-tie replay would force
     * the judge to them) */
    cr_expect_null(json_object_get(
                       json_object_get(json_object_get(r.cells[0].gates_json, "parity"), "metrics"),
                       "route_replay"),
                   "an engine without taps got a route-tie replay");
    cr_expect(strstr(json_string_value(json_object_get(ran, "engine")), "exec_engine 1.0"));
    cr_expect(strstr(json_string_value(json_object_get(ran, "device")), "NVIDIA H200"),
              "the engine's device is recorded as its word: %s",
              json_string_value(json_object_get(ran, "device")));
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

/* Per-kind proxy through gate run and every report: the engine takes wrong_expert and
 * skip_qk_norm and not scale; the falsify row PASSes with those faults injected into the engine
 * and every power probe into the judge; release check (text, JSON) and the HTML page name the
 * kind that went by proxy. A ladder that declares a kind the engine's hello lacks is refused. */
Test(exec, gate_run_falsifies_partly_by_proxy_and_every_report_names_the_proxied_kinds)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    char engines[1024];
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s, --faults, 'wrong_expert,skip_qk_norm'], timeout_s: 30,"
                    " supports: [decode, faults], faults: [wrong_expert, skip_qk_norm]}"),
             engine_path());
    struct run_result r = run_one(engines, "    throughput: {runs: 3, warmup: 0, prompt_tokens: 8,"
                                           " decode_tokens: 2}\n"
                                           "    falsify: {faults: [wrong_expert, skip_qk_norm],"
                                           " sweep_samples: 1, power_layers: 1}\n");
    cr_expect_str_eq(gate_field(&r, "falsify", "verdict"), "PASS", "%s",
                     gate_field(&r, "falsify", "reason"));
    const json_t *fg = json_object_get(r.cells[0].gates_json, "falsify");
    const json_t *fm = json_object_get(fg, "metrics");
    for (size_t i = 0; i < 2; i++) {
        const json_t *f = json_array_get(json_object_get(fm, "faults"), i);
        cr_expect(f && !json_object_get(f, "proxy") &&
                      json_is_true(json_object_get(json_object_get(f, "witness"), "tapless")),
                  "fault %zu was not injected into the engine", i);
    }
    const json_t *probes = json_object_get(json_object_get(fm, "power"), "probes");
    cr_expect(json_array_size(probes) > 0);
    for (size_t i = 0; i < json_array_size(probes); i++)
        cr_expect(json_is_true(json_object_get(json_array_get(probes, i), "proxy")),
                  "probe %zu was not by proxy", i);
    cr_expect_eq(json_array_size(json_object_get(
                     json_object_get(json_object_get(fg, "settings"), "engine"), "faults")),
                 2);
    /* the gate run's falsify line names the proxied kind */
    int seen = 0;
    for (int i = 0; i < r.cells[0].n_gates; i++)
        if (!strcmp(r.cells[0].gates[i].name, "falsify"))
            seen = !!strstr(r.cells[0].gates[i].summary, "scale by proxy, into the judge");
    cr_expect(seen, "the gate run's falsify line does not say scale went by proxy");
    run_result_free(&r);
    /* the reports */
    char out[1024];
    snprintf(out, sizeof out, "%s", path_in("release.txt"));
    ladderfix_sh("%s release check %s --db %s > %s 2>&1", bin, path_in("l.yaml"), path_in("r.db"),
                 out);
    size_t n = 0;
    char *text = (char *)check_slurp(out, &n);
    cr_assert(text);
    cr_expect(strstr(text, "note: cell moe/a/exec.twin.decode is falsified partly by proxy: engine"
                           " twin does not take scale,"),
              "%s", text);
    free(text);
    ladderfix_sh("%s release check %s --db %s --json > %s 2>&1", bin, path_in("l.yaml"),
                 path_in("r.db"), out);
    text = (char *)check_slurp(out, &n);
    cr_assert(text);
    json_t *doc = json_loads(strchr(text, '{') ? strchr(text, '{') : text, 0, NULL);
    const json_t *px = json_array_get(json_object_get(doc, "falsified_by_proxy"), 0);
    cr_expect(px && json_is_true(json_object_get(px, "partial")), "%s", text);
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(px, "kinds"), 0)), "scale");
    cr_expect_eq(json_array_size(json_object_get(px, "kinds")), 1);
    json_decref(doc);
    free(text);
    ladderfix_sh("%s report %s --db %s -o %s > /dev/null 2>&1", bin, path_in("l.yaml"),
                 path_in("r.db"), path_in("r.html"));
    text = (char *)check_slurp(path_in("r.html"), &n);
    cr_assert(text, "gate report wrote no page");
    cr_expect(strstr(text, " is falsified partly by proxy: engine twin does not take scale,"),
              "no partial-proxy note in the HTML page");
    free(text);
    /* a ladder that declares a kind the engine's hello does not list: refused at the handshake */
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s, --faults, skip_qk_norm], timeout_s: 30, supports: [decode,"
                    " faults], faults: [wrong_expert, skip_qk_norm]}"),
             engine_path());
    r = run_one(engines, NULL);
    const char *why = gate_field(&r, "capability", "error");
    why = why ? why : gate_field(&r, "capability", "reason");
    cr_expect(why && strstr(why, "the ladder declares that the engine injects wrong_expert, but its"
                                 " hello does not list it"),
              "%s", why ? why : "(no reason)");
    run_result_free(&r);
}

Test(exec, gate_run_turns_a_crashing_engine_into_failed_rows)
{
    char engines[512];
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s, --crash-at-forward, '1'], timeout_s: 30, supports: [decode]}"),
             engine_path());
    struct run_result r = run_one(engines, CHEAP_GATES);
    cr_expect_str_eq(r.cells[0].verdict, "FAIL");
    cr_expect_gt(r.cells[0].receipt_id, 0, "a failed cell still gets its receipt");
    const char *why = gate_field(&r, "parity", "reason");
    cr_expect(why && strstr(why, "crashing at forward 1 as asked"), "%s", why ? why : "(none)");
    cr_expect(why && strstr(why, "died of signal 11"), "%s", why ? why : "(none)");
    cr_expect_str_eq(gate_field(&r, "parity", "verdict"), "FAIL");
    cr_expect_str_eq(gate_field(&r, "capability", "verdict"), "FAIL");
    run_result_free(&r);
}

/* ---- the engine is an adversary (docs/exec.md, "Threat model") ---------------------------- */

/* The handshake's device text of an engine started with extra arguments: where the attack
 * modes of the reference engine report what they got. The child is started by a mode_open. */
static void attack_report(struct fixture *f, char *out, size_t n)
{
    struct backend *b = NULL;
    struct gate_err err = {0};
    cr_assert_eq(mode_open(&b, &f->mode, f->m, 64, 1, NULL, &err), 0, "%s", err.msg);
    struct exec_hello h;
    cr_assert_eq(test_session_hello(f->s, &h), 0);
    snprintf(out, n, "%s", h.device);
    backend_close(b);
}

Test(exec, the_engine_cannot_read_the_key_the_store_gate_s_environment_or_its_descriptors)
{
    make_dir();
    const char *key = path_in("a.key");
    char db[1024];
    snprintf(db, sizeof db, "%s", path_in("r.db"));
    FILE *w = fopen(db, "w");
    cr_assert(w);
    fputs("SQLite format 3", w);
    fclose(w);
    /* a secret in gate's environment, and a descriptor on the key that is not close-on-exec */
    setenv("GATE_TEST_SECRET", "hunter2", 1);
    const int leak = open(key, O_RDONLY);
    cr_assert_geq(leak, 3);
    const char *const a[] = {"--steal", key, "--steal", db, "--steal-parent", NULL};
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, 0, a);
    char got[256];
    attack_report(&f, got, sizeof got);
    close(leak);
    unsetenv("GATE_TEST_SECRET");
    cr_expect(strstr(got, "s0=denied"), "the engine read the signing key: %s", got);
    cr_expect(strstr(got, "s1=denied"), "the engine read the receipt store: %s", got);
    cr_expect(strstr(got, "penv=denied"), "the engine read gate's /proc environ: %s", got);
    cr_expect(strstr(got, "env=clean"), "the engine inherited gate's environment: %s", got);
    cr_expect(strstr(got, "fd=none"), "the engine inherited a descriptor on the key: %s", got);
    cr_expect_null(strstr(got, "STOLEN"), "%s", got);
    fixture_close(&f);
}

Test(exec, gate_run_s_key_path_on_its_command_line_does_not_give_the_key_away)
{
    /* the attack as it was done: the engine reads /proc/<gate>/cmdline, finds --key and --db,
     * and copies them */
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    make_dir();
    char engines[512];
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s, --steal-parent], timeout_s: 30, supports: [decode]}"),
             engine_path());
    const char *lad = write_ladder(engines, "exec.twin.decode", CHEAP_GATES);
    char db[1024];
    snprintf(db, sizeof db, "%s", path_in("r.db"));
    /* stdin closed, as under some CI runners: gate's first descriptors are 0..2 */
    const int st = ladderfix_sh("cd %s && %s run %s --host a --db %s --key %s >/dev/null 2>&1 <&-",
                                fx.dir, bin, lad, db, path_in("a.key"));
    cr_expect_eq(st, 0, "gate run: exit %d (the engine computes like the twin: every gate passes)",
                 st);
    sqlite3 *h = NULL;
    sqlite3_stmt *q = NULL;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(h,
                                    "select json_extract(payload,'$.subject.exec_engine.device'),"
                                    " json_extract(payload,'$.subject.exec_engine.isolation'),"
                                    " json_extract(payload,'$.subject.exec_engine.containment')"
                                    " from receipts",
                                    -1, &q, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
    const char *dev = (const char *)sqlite3_column_text(q, 0);
    const char *iso = (const char *)sqlite3_column_text(q, 1);
    cr_expect(
        dev && strstr(dev, "key=denied") && strstr(dev, "db=denied") && strstr(dev, "kdir=denied"),
        "the engine found the key on gate's command line and read it: %s", dev ? dev : "(none)");
    cr_expect(dev && !strstr(dev, "STOLEN"), "%s", dev ? dev : "(none)");
    cr_expect(iso && !strncmp(iso, "landlock ABI ", 13), "isolation recorded: %s",
              iso ? iso : "(none)");
    const char *cont = (const char *)sqlite3_column_text(q, 2);
    cr_expect(cont && !strncmp(cont, "pid namespace", 13), "containment recorded: %s",
              cont ? cont : "(none)");
    sqlite3_finalize(q);
    sqlite3_close(h);
}

Test(exec, a_double_forked_grandchild_does_not_outlive_the_cell)
{
    static const char *const a[] = {"--grandchild", NULL};
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, 0, a);
    char got[256];
    attack_report(&f, got, sizeof got);
    const char *gc = strstr(got, "gc=");
    cr_assert(gc, "no grandchild reported: %s", got);
    const pid_t pid = (pid_t)atoi(gc + 3);
    cr_assert_gt(pid, 1, "%s", got);
    cr_expect_eq(kill(pid, 0), 0, "the grandchild %d should be alive while the cell runs", pid);
    backend_session_close(f.s); /* the cell ends */
    f.s = NULL;
    errno = 0;
    const int alive = kill(pid, 0) == 0;
    cr_expect(!alive && errno == ESRCH, "the engine's grandchild %d outlived the cell", (int)pid);
    if (alive)
        kill(pid, SIGKILL); /* do not leave it behind when the test fails */
    fixture_close(&f);
}

/* The live (not zombie) processes named name, from /proc. */
static int count_named(const char *name)
{
    DIR *d = opendir("/proc");
    cr_assert(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        const size_t r = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[r] = '\0';
        const char *open_paren = strchr(buf, '('), *close_paren = strrchr(buf, ')');
        if (!open_paren || !close_paren || close_paren[1] != ' ')
            continue;
        const char state = close_paren[2];
        if ((size_t)(close_paren - open_paren - 1) == strlen(name) &&
            !strncmp(open_paren + 1, name, strlen(name)) && state != 'Z' && state != 'X')
            n++;
    }
    closedir(d);
    return n;
}

/* A process name no other test uses: "lo" and this test's pid. */
static const char *leftover_name(void)
{
    static char name[16];
    snprintf(name, sizeof name, "lo%d", (int)getpid());
    return name;
}

/* The attack extended (issue 23 §1): an intermediate child and its grandchild, each in a new
 * session (out of the engine's process group) and deaf to SIGTERM/SIGHUP/SIGINT, and a runner
 * chain that forks a successor and exits, generation after generation (a sweep that kills only
 * what it sees when it looks is always one generation late). When the cell ends, none runs.
 * pidns: GATE_TEST_PIDNS for isolate_spawn (NULL: the default, a PID namespace). */
static void leftovers_end_with_the_cell(const char *pidns, const char *want_containment)
{
    if (pidns)
        setenv("GATE_TEST_PIDNS", pidns, 1);
    const char *name = leftover_name();
    const char *const a[] = {"--leftovers", name, NULL};
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, 0, a);
    char got[256];
    attack_report(&f, got, sizeof got);
    cr_assert(strstr(got, "lo=3"), "the leftovers did not all start: %s", got);
    /* the sleepers (a /proc scan can miss the runner: its pid moves on under the scan) */
    cr_assert_geq(count_named(name), 2, "the leftovers should run while the cell runs");
    struct exec_identity id;
    test_session_identity(f.s, &id);
    cr_expect(!strncmp(id.containment, want_containment, strlen(want_containment)),
              "containment: %s", id.containment);
    backend_session_close(f.s); /* the cell ends */
    f.s = NULL;
    cr_expect_eq(count_named(name), 0, "processes the engine started outlived the cell (%s)",
                 id.containment);
    /* and a runner that survived would show within its last generations (it ends sleeping) */
    struct timespec t = {0, 300 * 1000 * 1000};
    nanosleep(&t, NULL);
    cr_expect_eq(count_named(name), 0, "processes the engine started outlived the cell (%s)",
                 id.containment);
    fixture_close(&f);
}

Test(exec, nothing_an_engine_starts_outlives_the_cell)
{
    leftovers_end_with_the_cell(NULL, "pid namespace");
}

Test(exec, nothing_an_engine_starts_outlives_the_cell_in_a_user_namespace)
{
    leftovers_end_with_the_cell("userns", "pid namespace (in a user namespace)");
}

Test(exec, without_a_pid_namespace_the_subreaper_sweep_ends_the_leftovers_with_the_cell)
{
    leftovers_end_with_the_cell("none", "subreaper sweep");
}

/* The same leftovers when gate itself dies (SIGKILL: no cleanup of its own runs): a stand-in gate
 * process opens the session and says hello, then is killed; the engine lingers after its stdin
 * closes. Nothing the engine started may outlive gate (PR_SET_PDEATHSIG reaches only the child
 * gate forked, not what that child forked). */
/* Zombies whose parent is parent, from /proc. */
static int count_zombies_of(pid_t parent)
{
    DIR *d = opendir("/proc");
    cr_assert(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        const size_t r = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[r] = '\0';
        const char *p = strrchr(buf, ')');
        char state;
        int ppid;
        if (p && sscanf(p + 1, " %c %d", &state, &ppid) == 2 && state == 'Z' && ppid == parent)
            n++;
    }
    closedir(d);
    return n;
}

/* An engine that leaves 300 orphans that exit at once: they must not pile up as gate's zombies
 * while the cell runs (a fork loop could fill the pid table of the signing host). In a PID
 * namespace its init reaps them; under the subreaper fallback gate reaps them before each
 * exchange. */
static void orphans_are_reaped(const char *pidns)
{
    if (pidns)
        setenv("GATE_TEST_PIDNS", pidns, 1);
    static const char *const a[] = {"--orphans", "300", NULL};
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, 0, a);
    char got[256];
    attack_report(&f, got, sizeof got); /* hello (the orphans), then load: an exchange */
    cr_assert(strstr(got, "or=300"), "the orphans did not all run: %s", got);
    cr_expect_eq(count_zombies_of(getpid()), 0, "the engine's orphans are zombies of gate");
    /* nor of the process gate holds (in a namespace its init, which reaps as they come: wait
     * for it on a busy machine, ending as soon as none is left) */
    const pid_t held = (pid_t)test_session_pid(f.s);
    cr_assert_neq(held, 0, "the cell's engine should still run");
    int left = count_zombies_of(held);
    for (int i = 0; left && i < 200; i++) {
        struct timespec t = {0, 20 * 1000 * 1000};
        nanosleep(&t, NULL);
        left = count_zombies_of(held);
    }
    cr_expect_eq(left, 0, "%d of the engine's orphans are zombies of pid %d", left, (int)held);
    fixture_close(&f);
}

Test(exec, an_engine_s_exited_orphans_do_not_pile_up_as_zombies_of_gate)
{
    orphans_are_reaped(NULL);
}

Test(exec, an_engine_s_exited_orphans_do_not_pile_up_as_zombies_of_gate_without_a_pid_namespace)
{
    orphans_are_reaped("none");
}

static void leftovers_die_with_gate(const char *pidns)
{
    if (pidns)
        setenv("GATE_TEST_PIDNS", pidns, 1);
    const char *name = leftover_name();
    /* the engine itself stays too when gate is gone (its stdin closed) */
    const char *const a[] = {"--leftovers", name, "--linger", NULL};
    int p[2];
    cr_assert_eq(pipe(p), 0);
    struct model *m = check_load_case("qwen3moe-tiny-q4_k_m");
    const pid_t g = fork();
    cr_assert_geq(g, 0);
    if (g == 0) { /* the stand-in gate: plain calls only, no Criterion here */
        struct exec_engine e;
        struct backend_session *s = NULL;
        struct mode md;
        struct backend *b = NULL;
        struct exec_hello h;
        struct gate_err err = {0};
        close(p[0]);
        engine_init(&e, 30, 0, a);
        if (test_session_new(&s, &e, moe_path(), MOE_SHA, &err) ||
            mode_parse("exec.twin.decode", &md, &err))
            _exit(1);
        md.session = s;
        if (mode_open(&b, &md, m, 64, 1, NULL, &err) || test_session_hello(s, &h) ||
            !strstr(h.device, "lo=3"))
            _exit(2);
        struct exec_identity id;
        test_session_identity(s, &id);
        char msg[200];
        const int len = snprintf(msg, sizeof msg, "up%s", id.containment);
        if (write(p[1], msg, (size_t)len) != len)
            _exit(3);
        for (;;)
            pause();
    }
    close(p[1]);
    char up[200] = "";
    const ssize_t r = read(p[0], up, sizeof up - 1);
    close(p[0]);
    int st = 0;
    if (r < 2 || strncmp(up, "up", 2)) {
        waitpid(g, &st, 0);
        cr_assert_fail("the stand-in gate did not start the engine (wait status 0x%x)", st);
    }
    cr_assert_geq(count_named(name), 2, "the leftovers should run while gate runs");
    kill(g, SIGKILL);
    cr_assert_eq(waitpid(g, &st, 0), g);
    /* the kernel ends them when gate dies; give it time on a busy machine (no wall-clock
     * assertion: the wait ends as soon as none is left) */
    int left = count_named(name);
    for (int i = 0; left && i < 400; i++) {
        struct timespec t = {0, 50 * 1000 * 1000};
        nanosleep(&t, NULL);
        left = count_named(name);
    }
    cr_expect_eq(left, 0, "%d processes the engine started outlived gate (containment: %s)", left,
                 up + 2);
    model_free(m);
}

Test(exec, nothing_an_engine_starts_outlives_a_killed_gate)
{
    leftovers_die_with_gate(NULL);
}

Test(exec, nothing_an_engine_starts_outlives_a_killed_gate_in_a_user_namespace)
{
    leftovers_die_with_gate("userns");
}

Test(exec, a_slow_engine_cannot_stretch_a_cell_past_its_time_budget)
{
    /* every forward takes 0.3 s, well within the per-request timeout; 64 of them would take
     * 19 s, the cell's budget is 2 s */
    static const char *const a[] = {"--slow-forward", "300", NULL};
    struct fixture f;
    fixture_open(&f, "exec.twin.decode", 30, 0, a);
    f.e.cell_timeout_s = 2;
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
    backend_close(b);
    cr_expect_eq(rc, ERR_RUNTIME);
    cr_expect(strstr(err.msg, "used up the cell's time budget (cell_timeout_s 2"), "%s", err.msg);
    cr_expect_eq(test_session_pid(f.s), 0, "the child is still running");
    /* the next gate of the cell starts nothing: the budget is spent */
    struct gate_err err2 = {0};
    cr_expect_neq(mode_open(&b, &f.mode, f.m, 64, 1, NULL, &err2), 0);
    cr_expect(strstr(err2.msg, "time budget"), "%s", err2.msg);
    cr_expect_eq(test_session_spawns(f.s), 1, "a new child was started after the budget ran out");
    free(lg);
    fixture_close(&f);
}

Test(exec, a_host_without_isolation_refuses_exec_cells_unless_the_ladder_says_none_with_a_reason)
{
    expect_refused(ENGINE("{argv: [x], supports: [decode], isolation: none}"), "exec.twin.decode",
                   "    falsify: [skip_qk_norm]\n", "isolation: none needs a reason");
    expect_refused(ENGINE("{argv: [x], supports: [decode], isolation: landlock, reason: why}"),
                   "exec.twin.decode", "    falsify: [skip_qk_norm]\n",
                   "reason is only for isolation: none");
    expect_refused(ENGINE("{argv: [x], supports: [decode], isolation: chroot}"), "exec.twin.decode",
                   "    falsify: [skip_qk_norm]\n", "isolation must be landlock");
    setenv("GATE_TEST_NO_LANDLOCK", "1", 1);
    char engines[512];
    snprintf(engines, sizeof engines, ENGINE("{argv: [%s], timeout_s: 30, supports: [decode]}"),
             engine_path());
    struct run_result r = run_one(engines, CHEAP_GATES);
    const char *why = gate_field(&r, "capability", "reason");
    cr_expect_str_eq(gate_field(&r, "capability", "verdict"), "FAIL");
    cr_expect(why && strstr(why, "this host cannot isolate the engine (GATE_TEST_NO_LANDLOCK=1") &&
                  strstr(why, "`isolation: none` with a `reason`"),
              "%s", why ? why : "(none)");
    run_result_free(&r);
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s], timeout_s: 30, supports: [decode], isolation: none,"
                    " reason: 'CI runner without Landlock'}"),
             engine_path());
    r = run_one(engines, CHEAP_GATES);
    unsetenv("GATE_TEST_NO_LANDLOCK");
    cr_expect_str_eq(gate_field(&r, "capability", "verdict"), "PASS", "%s",
                     gate_field(&r, "capability", "reason"));
    /* the reason is in every gate's settings (every report shows them) and in the subject */
    const json_t *eng = json_object_get(
        json_object_get(json_object_get(r.cells[0].gates_json, "parity"), "settings"), "engine");
    cr_expect_str_eq(json_string_value(json_object_get(eng, "isolation")), "none");
    cr_expect_str_eq(json_string_value(json_object_get(eng, "reason")),
                     "CI runner without Landlock");
    run_result_free(&r);
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_open_v2(path_in("r.db"), &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "select json_extract(payload,'$.subject.exec_engine.isolation')"
                                    " from receipts",
                                    -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 0), "none: CI runner without Landlock");
    sqlite3_finalize(st);
    sqlite3_close(db);
    /* and the release check says so, in text and JSON */
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    char out[1024];
    snprintf(out, sizeof out, "%s", path_in("release.txt"));
    ladderfix_sh("%s release check %s --db %s > %s 2>&1", bin, path_in("l.yaml"), path_in("r.db"),
                 out);
    size_t n = 0;
    char *text = (char *)check_slurp(out, &n);
    cr_assert(text);
    cr_expect(strstr(text, "note: engine twin runs without isolation (isolation: none): CI runner"
                           " without Landlock"),
              "%s", text);
    free(text);
    ladderfix_sh("%s release check %s --db %s --json > %s 2>&1", bin, path_in("l.yaml"),
                 path_in("r.db"), out);
    text = (char *)check_slurp(out, &n);
    cr_assert(text);
    cr_expect(strstr(text, "\"unisolated_engines\":[{\"engine\":\"twin\",\"reason\":\"CI runner"
                           " without Landlock\"}]") ||
                  strstr(text, "\"reason\": \"CI runner without Landlock\""),
              "%s", text);
    free(text);
}

/* ---- pinning the engine (docs/exec.md, "Pinning the engine") ------------------------------- */

/* Copy the reference engine to fx.dir/name, plus `extra` appended bytes (another build: the ELF
 * still runs, its digest differs); its SHA-256 into sha. Returns the path. */
static const char *engine_copy(const char *name, const char *extra, char sha[65])
{
    size_t n = 0;
    uint8_t *bytes = check_slurp(engine_path(), &n);
    cr_assert(bytes);
    const char *p = path_in(name);
    FILE *w = fopen(p, "wb");
    cr_assert(w, "cannot write %s", p);
    cr_assert_eq(fwrite(bytes, 1, n, w), n);
    fputs(extra, w);
    fclose(w);
    free(bytes);
    cr_assert_eq(chmod(p, 0755), 0);
    struct gate_err err = {0};
    cr_assert_eq(identity_file_sha256(p, sha, &err), 0, "%s", err.msg);
    return p;
}

/* The release row of the one cell of the ladder at lad, judged from r.db as this build. */
static void release_row(const char *lad, struct release_row *out)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    struct store *st = NULL;
    struct identity id;
    struct release_result r;
    struct release_options o = {.ladder = lad, .db = path_in("r.db")};
    cr_assert_eq(identity_get(&id, &err), 0, "%s", err.msg);
    cr_assert_eq(ladder_load(&l, lad, &err), 0, "%s", err.msg);
    cr_assert_eq(store_open_readonly(&st, path_in("r.db"), &err), 0, "%s", err.msg);
    cr_assert_eq(release_evaluate(l, st, &id, &o, &r, &err), 0, "%s", err.msg);
    cr_assert_eq(r.n_cells, 1);
    *out = r.cells[0];
    release_result_free(&r);
    store_close(st);
    ladder_free(l);
}

Test(exec, the_ladder_pins_the_engine_binary_and_build_and_another_build_s_receipts_are_stale)
{
    make_dir();
    char sha_a[65], sha_b[65], a[1024], b[1024], engines[4096];
    snprintf(a, sizeof a, "%s", engine_copy("engine-a", "", sha_a));
    snprintf(b, sizeof b, "%s", engine_copy("engine-b", "another build", sha_b));
    cr_assert_str_neq(sha_a, sha_b);
    static const char *const gates = CHEAP_GATES;
    /* a pin that does not match: an input error at the engine's line before anything runs
     * (issue 24: it signed a FAIL receipt naming both digests before), no store written */
    snprintf(engines, sizeof engines, ENGINE("{argv: [%s], supports: [decode], sha256: %s}"), a,
             sha_b);
    {
        struct gate_err err = {0};
        struct run_options o = {.ladder = write_ladder(engines, "exec.twin.decode", gates),
                                .host = "a",
                                .db = path_in("pin.db"),
                                .key = path_in("a.key"),
                                .threads = 1};
        struct run_result pr;
        cr_expect_eq(run_ladder(&o, NULL, NULL, &pr, &err), ERR_INPUT);
        cr_expect(strstr(err.msg, "l.yaml:7:3: exec engine 'twin': the engine binary") &&
                      strstr(err.msg, sha_a) && strstr(err.msg, sha_b) &&
                      strstr(err.msg, "no receipt written"),
                  "%s", err.msg);
        cr_expect_eq(pr.n, 0);
        run_result_free(&pr);
        struct stat sb;
        cr_expect_neq(stat(path_in("pin.db"), &sb), 0, "a refused run creates no store");
        /* an engine binary that is not there: the same, at ladder check's own call */
        snprintf(engines, sizeof engines,
                 ENGINE("{argv: [%s.gone], supports: [decode], sha256: %s}"), a, sha_a);
        struct ladder *l = NULL;
        err_clear(&err);
        cr_assert_eq(ladder_load(&l, write_ladder(engines, "exec.twin.decode", gates), &err), 0,
                     "%s", err.msg);
        cr_expect_eq(ladder_check_files(l, &err), ERR_INPUT);
        cr_expect(strstr(err.msg, "l.yaml:7:3: exec engine 'twin': cannot start '") &&
                      strstr(err.msg, "engine-a.gone"),
                  "%s", err.msg);
        ladder_free(l);
    }
    struct run_result r;
    const char *why;
    /* a build_id that does not match the engine's hello */
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s], supports: [decode], sha256: %s, build_id: 'v2.0-abc'}"), a,
             sha_a);
    r = run_one(engines, gates);
    why = gate_field(&r, "capability", "reason");
    cr_expect_str_eq(gate_field(&r, "capability", "verdict"), "FAIL");
    cr_expect(why && strstr(why, "build_id \"tests/exec_engine.c\" but the ladder pins"
                                 " \"v2.0-abc\""),
              "%s", why ? why : "(none)");
    run_result_free(&r);
    /* build A, pinned: it runs, and the receipt records what ran */
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s], supports: [decode], sha256: %s,"
                    " build_id: tests/exec_engine.c}"),
             a, sha_a);
    r = run_one(engines, gates);
    cr_expect_str_eq(gate_field(&r, "parity", "verdict"), "PASS", "%s",
                     gate_field(&r, "parity", "reason"));
    run_result_free(&r);
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_open_v2(path_in("r.db"), &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "select json_extract(payload,'$.subject.exec_engine.sha256'),"
                                    " json_extract(payload,'$.subject.exec_engine.path'),"
                                    " json_extract(payload,'$.subject.exec_engine.build_id')"
                                    " from receipts",
                                    -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 0), sha_a);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 1), a);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 2), "tests/exec_engine.c");
    sqlite3_finalize(st);
    sqlite3_close(db);
    /* the ladder as it was: the receipt is judged (whatever else this build says of it) */
    struct release_row row;
    const char *lad = path_in("l.yaml");
    release_row(lad, &row);
    cr_expect_null(strstr(row.reason, "another build of engine"), "%s", row.reason);
    /* the ladder now pins build B: A's receipt does not count, and the reason names A -> B */
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s], supports: [decode], sha256: %s,"
                    " build_id: tests/exec_engine.c}"),
             b, sha_b);
    lad = write_ladder(engines, "exec.twin.decode", gates);
    release_row(lad, &row);
    cr_expect_eq(row.state, RELEASE_STALE, "%s: %s", release_state_name(row.state), row.reason);
    cr_expect(strstr(row.reason, "another build of engine 'twin'") && strstr(row.reason, sha_a) &&
                  strstr(row.reason, sha_b),
              "%s", row.reason);
    /* and a new build_id pin likewise */
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s], supports: [decode], sha256: %s, build_id: 'v2'}"), a, sha_a);
    lad = write_ladder(engines, "exec.twin.decode", gates);
    release_row(lad, &row);
    cr_expect_eq(row.state, RELEASE_STALE, "%s: %s", release_state_name(row.state), row.reason);
    cr_expect(strstr(row.reason, "build_id tests/exec_engine.c -> v2"), "%s", row.reason);
}

/* Write text to fx.dir/name (a file an engine pin names); its SHA-256 into sha. Returns the path
 * (one of ladderfix_path's buffers). */
static const char *pinned_file(const char *name, const char *text, char sha[65])
{
    const char *p = path_in(name);
    FILE *w = fopen(p, "w");
    cr_assert(w, "cannot write %s", p);
    fputs(text, w);
    fclose(w);
    struct gate_err err = {0};
    cr_assert_eq(identity_file_sha256(p, sha, &err), 0, "%s", err.msg);
    return p;
}

/* Every pinned engine file is compared, the last one too: an engine pinned with two files runs
 * and its receipt records both digests; the ladder then re-pins the second file (new weights,
 * say) and the receipt made with the old second file is STALE, naming file 2, old -> new. */
Test(exec, a_receipt_made_with_another_last_pinned_engine_file_is_stale)
{
    make_dir();
    char sha_a[65], sha_1[65], sha_2[65], sha_2b[65], a[1024], f1[1024], f2[1024];
    char engines[4096];
    snprintf(a, sizeof a, "%s", engine_copy("engine-a", "", sha_a));
    snprintf(f1, sizeof f1, "%s", pinned_file("f1.bin", "first file\n", sha_1));
    snprintf(f2, sizeof f2, "%s", pinned_file("f2.bin", "second file\n", sha_2));
    static const char *const gates = CHEAP_GATES;
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s], supports: [decode], sha256: %s,"
                    " files: [{path: %s, sha256: %s}, {path: %s, sha256: %s}]}"),
             a, sha_a, f1, sha_1, f2, sha_2);
    struct run_result r = run_one(engines, gates);
    cr_expect_str_eq(gate_field(&r, "parity", "verdict"), "PASS", "%s",
                     gate_field(&r, "parity", "reason"));
    run_result_free(&r);
    /* the ladder as it was: no pin disagrees */
    struct release_row row;
    release_row(path_in("l.yaml"), &row);
    cr_expect_null(strstr(row.reason, "with file"), "%s", row.reason);
    /* the second (last) file re-pinned */
    snprintf(f2, sizeof f2, "%s", pinned_file("f2.bin", "second file, another version\n", sha_2b));
    cr_assert_str_neq(sha_2, sha_2b);
    snprintf(engines, sizeof engines,
             ENGINE("{argv: [%s], supports: [decode], sha256: %s,"
                    " files: [{path: %s, sha256: %s}, {path: %s, sha256: %s}]}"),
             a, sha_a, f1, sha_1, f2, sha_2b);
    release_row(write_ladder(engines, "exec.twin.decode", gates), &row);
    cr_expect_eq(row.state, RELEASE_STALE, "%s: %s", release_state_name(row.state), row.reason);
    cr_expect(strstr(row.reason, "ran engine 'twin' with file 2 sha256") &&
                  strstr(row.reason, sha_2) && strstr(row.reason, sha_2b),
              "%s", row.reason);
}

/* Every pinned engine file is checked at every start, the last one too: once a pinned file
 * changes, the start is refused naming it and nothing runs. */
Test(exec, a_pinned_engine_file_that_changed_refuses_the_start)
{
    make_dir();
    char sha_1[65], sha_2[65], sha_x[65], f1[1024], f2[1024], exe[4096], exe_sha[65];
    snprintf(f1, sizeof f1, "%s", pinned_file("f1.bin", "first file\n", sha_1));
    snprintf(f2, sizeof f2, "%s", pinned_file("f2.bin", "second file\n", sha_2));
    struct exec_engine e;
    engine_init(&e, 30, 0, NULL);
    e.files[0].path = f1;
    snprintf(e.files[0].sha256, sizeof e.files[0].sha256, "%s", sha_1);
    e.files[1].path = f2;
    snprintf(e.files[1].sha256, sizeof e.files[1].sha256, "%s", sha_2);
    e.n_files = 2;
    struct gate_err err = {0};
    cr_expect_eq(exec_engine_check_pins(&e, exe, sizeof exe, exe_sha, &err), 0, "%s", err.msg);
    /* the second (last) file changes after it was pinned */
    pinned_file("f2.bin", "second file, changed\n", sha_x);
    cr_expect_eq(exec_engine_check_pins(&e, exe, sizeof exe, exe_sha, &err), ERR_RUNTIME);
    cr_expect(strstr(err.msg, "exec engine 'twin': pinned file: '") && strstr(err.msg, "f2.bin") &&
                  strstr(err.msg, "does not match its pin") && strstr(err.msg, sha_x),
              "%s", err.msg);
    /* and a session on it starts nothing */
    struct model *m = check_load_case("qwen3moe-tiny-q4_k_m");
    struct backend_session *s = NULL;
    err_clear(&err);
    cr_assert_eq(test_session_new(&s, &e, moe_path(), MOE_SHA, &err), 0, "%s", err.msg);
    struct backend_config cfg = {.n_ctx = 64, .n_batch = 64, .session = s};
    struct backend *b = NULL;
    cr_expect_eq(backend_open(&b, "exec", m, &cfg, &err), ERR_RUNTIME);
    cr_expect(strstr(err.msg, "pinned file:"), "%s", err.msg);
    cr_expect_eq(test_session_spawns(s), 0, "the engine was started");
    backend_session_close(s);
    model_free(m);
    expect_no_zombie();
}
