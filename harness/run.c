/* run.c — `gate run LADDER --host ID`: every cell of this host through every gate, one signed
 * receipt per cell.
 *
 * Invariants: every gate yields a row (an error is a FAILED row with its message, never a
 * missing one); a cell whose gate list is empty is FAILED; a receipt is written for every cell
 * run, failed or not; the backend that actually ran is what the capability gate judges.
 * Each gate is {verdict, error?, settings, metrics, checks[]} (docs/receipts.md); a gate's
 * verdict is derived from its checks here exactly as receipt_rederive() re-derives it.
 * Start reading: run_cell().
 */
#include "harness/run.h"

#include <fnmatch.h>
#include <pthread.h>
#include <time.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "cli/cli.h"
#include "harness/gatedef.h"
#include "harness/identity.h"
#include "harness/ladder.h"
#include "engine/pin.h"
#include "oracles/capability.h"
#include "oracles/falsify.h"
#include "oracles/golden.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include "oracles/throughput.h"
#include "receipts/faultsim.h"
#include "receipts/key.h"
#include "receipts/receipt.h"
#include "receipts/store.h"

/* ---- live progress ------------------------------------------------------------------------- */

/* On a terminal, a line that shows which gate of which cell is running and for how long,
 * redrawn every quarter second until the gate finishes (a parity run on a large model on a CPU
 * host takes minutes; silence would read as a hang). Off the terminal nothing is drawn. */
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER; /* one writer on stderr at a time */

struct ticker {
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, running;
    char what[320];
    struct timespec t0;
};

static double since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void *ticker_main(void *arg)
{
    struct ticker *tk = arg;
    static const char spin[] = "|/-\\";
    pthread_mutex_lock(&tk->mu);
    for (int i = 0; !tk->stop; i++) {
        pthread_mutex_lock(&out_mu);
        fprintf(stderr, "\r  %s %c %.1f s\033[K", tk->what, spin[i % 4], since(&tk->t0));
        pthread_mutex_unlock(&out_mu);
        struct timespec wake;
        clock_gettime(CLOCK_REALTIME, &wake);
        wake.tv_nsec += 250000000;
        if (wake.tv_nsec >= 1000000000) {
            wake.tv_sec++;
            wake.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&tk->cv, &tk->mu, &wake);
    }
    pthread_mutex_lock(&out_mu);
    fprintf(stderr, "\r\033[K");
    pthread_mutex_unlock(&out_mu);
    pthread_mutex_unlock(&tk->mu);
    return NULL;
}

static void ticker_start(struct ticker *tk, int tty, const char *cell, const char *gate)
{
    memset(tk, 0, sizeof *tk);
    if (!tty)
        return;
    snprintf(tk->what, sizeof tk->what, "%-36s %-11s running", cell, gate);
    clock_gettime(CLOCK_MONOTONIC, &tk->t0);
    pthread_mutex_init(&tk->mu, NULL);
    pthread_cond_init(&tk->cv, NULL);
    tk->running = pthread_create(&tk->tid, NULL, ticker_main, tk) == 0;
}

static void ticker_stop(struct ticker *tk)
{
    if (!tk->running)
        return;
    pthread_mutex_lock(&tk->mu);
    tk->stop = 1;
    pthread_cond_signal(&tk->cv);
    pthread_mutex_unlock(&tk->mu);
    pthread_join(tk->tid, NULL);
    pthread_mutex_destroy(&tk->mu);
    pthread_cond_destroy(&tk->cv);
}

/* ---- the cell ------------------------------------------------------------------------------ */

struct cell_ctx {
    const struct ladder *l;
    const struct ladder_cell *c;
    const struct run_options *o;
    char name[256];
    char model_sha[65];
    const struct model *m; /* NULL when the model could not be loaded */
    struct mode mode;
    int tty;
    struct mode_ran ran; /* what ran during the current gate */
};

static void say(const struct cell_ctx *x, const char *gate, const json_t *g, const char *key)
{
    if (x->o->json)
        return;
    const char *v = json_string_value(json_object_get(g, "verdict"));
    const char *why = json_string_value(json_object_get(g, "reason"));
    int pass = v && !strcmp(v, "PASS");
    pthread_mutex_lock(&out_mu);
    fprintf(stderr, "%s  %-36s %-11s %-6s %s\n", x->tty ? "\r\033[K" : "", x->name, gate,
            v ? v : "?", !pass && why ? why : (key ? key : ""));
    pthread_mutex_unlock(&out_mu);
}

/* The gate's row: metrics gain "ran" (what the recorder saw while the gate ran), and the verdict
 * comes from the gate table's judge (harness/gatedef.c), the same function the release check
 * calls. Takes ownership of metrics. */
static json_t *finish(struct cell_ctx *x, const char *gate, json_t *metrics, const char *error,
                      const char *key)
{
    mode_ran_end();
    if (!metrics)
        metrics = json_object();
    json_object_set_new(metrics, "ran", mode_ran_json(&x->ran));
    json_t *g = gatedef_row(gate, x->c->mode, ladder_gate_settings(&x->c->g, gate), metrics,
                            error);
    say(x, gate, g, key);
    return g;
}

static json_t *gate_capability(struct cell_ctx *x)
{
    struct gate_err err = {0};
    struct capability_result cr;
    memset(&cr, 0, sizeof cr);
    mode_ran_begin(&x->ran);
    if (capability_run(x->m, &x->mode, x->o->threads, &cr, &err))
        return finish(x, "capability", NULL, err.msg, NULL);
    char key[400];
    snprintf(key, sizeof key, "ran on %s (%s)", cr.info.backend, cr.info.device);
    return finish(x, "capability", capability_result_json(&cr), NULL, key);
}

static void parity_cfg(const struct ladder_gates *g, struct parity_config *p)
{
    parity_config_default(p);
    p->positions = g->positions;
    p->min_cosine = g->min_cosine;
    p->max_mean_kld = g->max_mean_kld;
    p->max_kld = g->max_kld;
    p->near_tie = g->near_tie;
}

static json_t *gate_parity(struct cell_ctx *x)
{
    struct gate_err err = {0};
    struct parity_config cfg;
    parity_cfg(&x->c->g, &cfg);
    struct parity_result pr;
    memset(&pr, 0, sizeof pr);
    mode_ran_begin(&x->ran);
    if (parity_run(x->m, &x->mode, NULL, NULL, 0, &cfg, x->o->threads, &pr, &err)) {
        parity_result_free(&pr);
        return finish(x, "parity", NULL, err.msg, NULL);
    }
    json_t *metrics = parity_result_json(&pr);
    char key[400];
    snprintf(key, sizeof key, "%d pos, min cos %.6f, max KLD %.2e, %d wrong, %d tie flips",
             pr.n_pos, pr.cosine.min, pr.kld.max, pr.n_wrong, pr.n_tie_flip);
    parity_result_free(&pr);
    return finish(x, "parity", metrics, NULL, key);
}

static json_t *gate_golden(struct cell_ctx *x)
{
    struct gate_err err = {0};
    struct golden_set set;
    struct golden_result gr;
    struct pinned pf = {.fd = -1};
    uint8_t *bytes = NULL;
    size_t len = 0;
    memset(&set, 0, sizeof set);
    memset(&gr, 0, sizeof gr);
    json_t *g = NULL, *settings = ladder_gate_settings(&x->c->g, "golden");
    mode_ran_begin(&x->ran);
    if (!x->c->g.goldens[0]) {
        g = finish(x, "golden", NULL, "the ladder declares no goldens file (gates.golden."
                   "goldens); record them with: gate golden record LADDER", NULL);
        goto out;
    }
    /* the goldens file is evidence: opened once, checked against its pin, read from that
     * descriptor */
    if (pin_open(x->c->g.goldens, x->c->g.goldens_sha256, &pf, &err) ||
        pin_read_all(&pf, (size_t)64 << 20, &bytes, &len, &err) ||
        golden_load_buf((const char *)bytes, len, x->c->g.goldens, x->model_sha, &set, &err)) {
        g = finish(x, "golden", NULL, err.msg, NULL);
        goto out;
    }
    if (golden_gate(x->m, &x->mode, &set, settings, x->o->threads, &gr, &err)) {
        g = finish(x, "golden", NULL, err.msg, NULL);
        goto out;
    }
    char key[400];
    snprintf(key, sizeof key, "%d prompts x %d tokens: %s", gr.n, set.n_gen, gr.reason);
    g = finish(x, "golden", golden_result_json(&gr), NULL, key);
out:
    json_decref(settings);
    free(bytes);
    pin_close(&pf);
    golden_result_free(&gr);
    golden_set_free(&set);
    return g;
}

static json_t *gate_throughput(struct cell_ctx *x)
{
    struct gate_err err = {0};
    const struct ladder_gates *lg = &x->c->g;
    struct throughput_config cfg;
    throughput_config_default(&cfg);
    cfg.runs = lg->runs;
    cfg.warmup = lg->warmup;
    cfg.prompt_tokens = lg->prompt_tokens;
    cfg.decode_tokens = lg->decode_tokens;
    cfg.n_threads = x->o->threads;
    cfg.min_prefill_tps = lg->min_prefill_tps;
    cfg.min_decode_tps = lg->min_decode_tps;
    cfg.max_cv = lg->max_cv;
    struct throughput_result tr;
    memset(&tr, 0, sizeof tr);
    mode_ran_begin(&x->ran);
    /* the model already loaded from the pinned descriptor: never re-opened by path */
    if (throughput_gate(x->m, &x->mode, &cfg, &tr, &err)) {
        throughput_result_free(&tr);
        return finish(x, "throughput", NULL, err.msg, NULL);
    }
    char key[400];
    snprintf(key, sizeof key, "%s %.1f tok/s, decode %.1f tok/s (floors %g / %g), CV %.2f / %.2f",
             tr.prompt_path, tr.prefill.median, tr.decode.median, cfg.min_prefill_tps,
             cfg.min_decode_tps, tr.prefill.cv, tr.decode.cv);
    json_t *metrics = throughput_result_json(&tr);
    throughput_result_free(&tr);
    return finish(x, "throughput", metrics, NULL, key);
}

static json_t *gate_falsify(struct cell_ctx *x)
{
    struct gate_err err = {0};
    struct falsify_config cfg;
    falsify_config_default(&cfg);
    parity_cfg(&x->c->g, &cfg.parity);
    cfg.sweep_samples = x->c->g.sweep_samples;
    cfg.min_detection = x->c->g.min_detection;
    struct falsify_result fr;
    memset(&fr, 0, sizeof fr);
    mode_ran_begin(&x->ran);
    if (falsify_run(x->m, &x->mode, &x->c->g.falsify, NULL, 0, &cfg, x->o->threads, &fr, &err)) {
        falsify_result_free(&fr);
        return finish(x, "falsify", NULL, err.msg, NULL);
    }
    char key[400];
    snprintf(key, sizeof key, "%d fault%s: %s", fr.n, fr.n == 1 ? "" : "s", fr.reason);
    json_t *metrics = falsify_result_json(&fr);
    falsify_result_free(&fr);
    return finish(x, "falsify", metrics, NULL, key);
}

/* A cell whose model or mode cannot even be prepared: every gate is a FAILED row saying why. */
static json_t *all_failed(struct cell_ctx *x, const char *why)
{
    json_t *obj = json_object();
    for (int i = 0; GATE_DEFS[i].name; i++) {
        if (!GATE_DEFS[i].cell_gate)
            continue;
        mode_ran_begin(&x->ran);
        json_object_set_new(obj, GATE_DEFS[i].name, finish(x, GATE_DEFS[i].name, NULL, why, NULL));
    }
    return obj;
}

static void synth_progress(void *ctx, uint64_t done, uint64_t total, int i, int n,
                           const char *tensor)
{
    const struct cell_ctx *x = ctx;
    (void)tensor;
    if (x->tty)
        fprintf(stderr, "\r  synthesizing %-24s [%-30.*s] %3d%%", x->l->models[x->c->model].id,
                (int)(total ? 30 * done / total : 30), "##############################",
                (int)(total ? 100 * done / total : 100));
    else if (i + 1 == n)
        fprintf(stderr, "  synthesized %s (%d tensors)\n", x->l->models[x->c->model].id, n);
}

/* Make sure the model file exists (synthesizing it if the ladder says so). */
static int ensure_model(struct cell_ctx *x, struct gate_err *err)
{
    const struct ladder_model *lm = &x->l->models[x->c->model];
    struct stat st;
    if (!lm->synth || stat(lm->path, &st) == 0)
        return 0;
    struct synth_options so;
    memset(&so, 0, sizeof so);
    const struct synth_spec *sp = synth_preset_find(lm->preset);
    if (!sp)
        return err_set(err, ERR_INPUT, "model '%s': unknown synth preset '%s'", lm->id,
                       lm->preset);
    so.spec = *sp;
    so.quant = synth_quant_from_name(lm->quant);
    if (so.quant < 0)
        return err_set(err, ERR_INPUT, "model '%s': unknown synth quant '%s'", lm->id, lm->quant);
    so.seed = (uint32_t)lm->seed;
    so.n_threads = x->o->threads;
    char dir[600];
    snprintf(dir, sizeof dir, "%s", lm->path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        mkdir(dir, 0755);
    }
    int rc = synth_write(&so, lm->path, synth_progress, x, err);
    if (x->tty)
        fprintf(stderr, "\n");
    return rc;
}

/* The receipt's environment.gpu: the device this host ran on ("none" on a CPU host). */
static json_t *gpu_environment(const struct ladder_host *h)
{
    if (!h->gpu)
        return json_string("none");
    /* the GPU backend's device query (engine/backend.h), whichever build this is */
    struct backend_device d;
    struct gate_err why = {0};
    if (backend_describe("cuda", &d, &why) == 0) {
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", d.cc_major, d.cc_minor);
        return json_pack("{s:s, s:s, s:f, s:i, s:i}", "name", d.name, "compute_capability", cc,
                         "memory_gib", (double)d.total_bytes / (double)(1ull << 30), "driver",
                         d.driver, "runtime", d.runtime);
    }
    return json_pack("{s:s}", "error", why.msg);
}

static json_t *run_cell(const struct ladder *l, int ci, const struct run_options *o,
                        const struct identity *id, int *pass)
{
    struct cell_ctx x;
    memset(&x, 0, sizeof x);
    x.l = l;
    x.c = &l->cells[ci];
    x.o = o;
    x.tty = isatty(2) && !o->json;
    ladder_cell_name(l, ci, x.name, sizeof x.name);
    const struct ladder_model *lm = &l->models[x.c->model];
    char started[32], finished[32];
    identity_utc_now(started);
    struct gate_err err = {0};
    struct model *m = NULL;
    json_t *gates = NULL;
    struct pinned pf = {.fd = -1};
    int rc = ensure_model(&x, &err);
    /* opened once, hashed through that descriptor, mapped from it: the bytes checked against
     * the pin are the bytes every gate runs */
    if (!rc)
        rc = pin_open_bounded(lm->path, NULL, UINT64_MAX, &pf, &err);
    if (!rc) {
        snprintf(x.model_sha, sizeof x.model_sha, "%s", pf.sha256);
        if (strcmp(x.model_sha, lm->sha256))
            rc = err_set(&err, ERR_INPUT, "model '%s' has SHA-256 %s but the ladder pins %s: the"
                         " file is not the one this ladder gates", lm->id, x.model_sha,
                         lm->sha256);
    }
    if (!rc)
        rc = model_load_fd(&m, pf.fd, lm->path, &err);
    pin_close(&pf);
    if (!rc && strcmp(model_arch_name(m->hp.arch), lm->arch))
        rc = err_set(&err, ERR_INPUT, "model '%s' is %s but the ladder says %s", lm->id,
                     model_arch_name(m->hp.arch), lm->arch);
    if (!rc)
        rc = mode_parse(x.c->mode, &x.mode, &err);
    if (rc) {
        gates = all_failed(&x, err.msg);
    } else {
        x.m = m;
        gates = json_object();
        json_t *(*const fns[])(struct cell_ctx *) = {gate_capability, gate_parity, gate_golden,
                                                     gate_throughput, gate_falsify};
        static const char *const names[] = {"capability", "parity", "golden", "throughput",
                                            "falsify"};
        for (int gi = 0; gi < 5; gi++) {
            struct ticker tk;
            ticker_start(&tk, x.tty, x.name, names[gi]);
            json_t *row = fns[gi](&x);
            ticker_stop(&tk);
            json_object_set_new(gates, names[gi], row);
        }
    }
    model_free(m);
    /* the verdict: from the gates' verdicts, as the release check derives it */
    enum gate_verdict overall = gatedef_overall(gates);
    *pass = overall == GATE_PASS;
    identity_utc_now(finished);
    json_t *model_subject = json_pack("{s:s, s:s}", "id", lm->id, "sha256",
                                      x.model_sha[0] ? x.model_sha : "unknown");
    if (lm->synth)
        json_object_set_new(model_subject, "synth",
                            json_pack("{s:s, s:s, s:I}", "preset", lm->preset, "quant", lm->quant,
                                      "seed", (json_int_t)lm->seed));
    else
        json_object_set_new(model_subject, "path", json_string(lm->path));
    json_t *env = identity_environment(o->threads);
    json_object_set_new(env, "host", json_string(l->hosts[x.c->host].id));
    json_object_set_new(env, "gpu", gpu_environment(&l->hosts[x.c->host]));
    json_t *payload = json_pack(
        "{s:i, s:{s:s, s:s, s:s, s:s, s:s}, s:{s:s, s:s, s:s}, s:{s:o, s:o}, s:o, s:o, s:[], s:s,"
        " s:s, s:s}",
        "schema_version", RECEIPT_SCHEMA_VERSION, "ladder", "name", l->name, "version",
        l->version, "sha256", l->sha256, "path", l->path, "trust_sha256", l->trust_sha256, "cell", "model", lm->id, "host",
        l->hosts[x.c->host].id, "mode", x.c->mode, "subject", "model", model_subject, "engine",
        identity_json(id), "environment", env, "gates", gates, "faults_active", "verdict",
        gate_verdict_name(overall), "started_at", started, "finished_at", finished);
    return payload;
}

/* ---- gate run ------------------------------------------------------------------------------ */

static int host_matches(const struct ladder_host *h, struct gate_err *err)
{
    if (!h->gpu)
        return 0;
    /* the GPU backend's device query; a build without it answers "backend cuda is not in this
     * build", and a skipped GPU check is a failure (settled question 6) */
    struct backend_device d;
    struct gate_err why = {0};
    if (backend_describe("cuda", &d, &why))
        return err_set(err, ERR_ENV, "host '%s' declares GPU '%s' but none is usable: %s%s",
                       h->id, h->device_name, why.msg,
                       backend_find("cuda") ? "" : ": a skipped GPU check is a failure");
    const double total_gib = (double)d.total_bytes / (double)(1ull << 30);
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", d.cc_major, d.cc_minor);
    if (strcmp(d.name, h->device_name))
        return err_set(err, ERR_ENV, "host '%s' declares GPU '%s' but the device is '%s'",
                       h->id, h->device_name, d.name);
    if (h->compute_capability[0] && strcmp(cc, h->compute_capability))
        return err_set(err, ERR_ENV, "host '%s' declares compute capability %s but '%s' is %s",
                       h->id, h->compute_capability, d.name, cc);
    if (total_gib < h->min_memory_gib)
        return err_set(err, ERR_ENV, "host '%s' declares at least %.1f GiB but '%s' has %.1f GiB",
                       h->id, h->min_memory_gib, d.name, total_gib);
    return 0;
}

int run_ladder(const struct run_options *o)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    struct store *st = NULL;
    struct key_pair key;
    struct identity id;
    int rc, exit_code = 0, n_run = 0, n_pass = 0;
    json_t *results = json_array();
    memset(&key, 0, sizeof key);
    if ((rc = ladder_load(&l, o->ladder, &err)) || (rc = ladder_check_runnable(l, &err)) ||
        (rc = ladder_check_files(l, &err))) {
        exit_code = cli_fail(err_exit_code(rc), "%s", err.msg);
        goto out;
    }
    const char *host = o->host ? o->host : getenv("GATE_HOST");
    if (!host || !*host) {
        exit_code = cli_fail(2, "run: which host is this? pass --host ID or set GATE_HOST");
        goto out;
    }
    int hi = ladder_find_host(l, host);
    if (hi < 0) {
        exit_code = cli_fail(2, "run: host '%s' is not defined in %s", host, o->ladder);
        goto out;
    }
    /* a goldens file without this model's entry would sign a FAIL: refuse before any receipt */
    if ((rc = ladder_check_golden_entries(l, hi, &err))) {
        exit_code = cli_fail(err_exit_code(rc), "run: %s", err.msg);
        goto out;
    }
    if ((rc = host_matches(&l->hosts[hi], &err))) {
        exit_code = cli_fail(err_exit_code(rc), "run: %s", err.msg);
        goto out;
    }
    char keypath[1024];
    if (o->key)
        snprintf(keypath, sizeof keypath, "%s", o->key);
    else if ((rc = key_default_path(host, keypath, sizeof keypath, &err))) {
        exit_code = cli_fail(err_exit_code(rc), "%s", err.msg);
        goto out;
    }
    if ((rc = key_load(keypath, &key, &err))) {
        exit_code = cli_fail(2, "run: %s (make one with: gate key gen --host %s -o %s)", err.msg,
                             host, keypath);
        goto out;
    }
    int trusted = 0;
    for (int t = 0; t < l->hosts[hi].n_trust; t++)
        trusted |= !memcmp(l->hosts[hi].trust[t], key.pk, 32);
    if (!trusted) {
        /* refuse before running anything: receipts nobody will believe are wasted work */
        exit_code = cli_fail(2, "run: key %s (%s) is not trusted for host '%s' by %s; add its"
                             " public key to the host's trust list or use a trusted --key",
                             key.id, keypath, host, o->ladder);
        goto out;
    }
    if ((rc = identity_get(&id, &err))) {
        exit_code = cli_fail(err_exit_code(rc), "%s", err.msg);
        goto out;
    }
    if (id.git_dirty)
        fprintf(stderr, "gate: WARNING: this binary was built from a tree with uncommitted"
                " changes; its receipts never count for a release\n");
    if ((rc = store_open(&st, o->db ? o->db : "receipts.db", &err))) {
        exit_code = cli_fail(err_exit_code(rc), "%s", err.msg);
        goto out;
    }
    if (!o->json)
        fprintf(stderr, "gate run: ladder %s (%s %s), host %s, build %.12s%s\n", o->ladder,
                l->name, l->version, host, id.git_commit, id.git_dirty ? " (dirty)" : "");
    for (int i = 0; i < l->n_cells; i++) {
        char name[256];
        ladder_cell_name(l, i, name, sizeof name);
        if (l->cells[i].host != hi || (o->only && fnmatch(o->only, name, 0) != 0))
            continue;
        int pass = 0;
        json_t *payload = run_cell(l, i, o, &id, &pass);
        int64_t rid = 0;
        err_clear(&err);
        const char *verdict = json_string_value(json_object_get(payload, "verdict"));
        if (faultsim_json_failures() > 0)
            err_set(&err, ERR_ENV, "out of memory while building the receipt: it may be"
                    " missing numbers and is not signed");
        int stored = !err.msg[0] && (rc = store_append(st, payload, &key, &rid, &err)) == 0;
        if (!stored) {
            fprintf(stderr, "gate: cannot store the receipt of %s: %s\n", name, err.msg);
            exit_code = 3;
            pass = 0;
        }
        n_run++;
        n_pass += pass;
        json_t *res = json_pack("{s:s, s:s, s:O}", "cell", name, "verdict", verdict, "gates",
                                json_object_get(payload, "gates"));
        json_object_set_new(res, "receipt", stored ? json_integer(rid) : json_null());
        json_array_append_new(results, res);
        if (!o->json) {
            if (stored)
                fprintf(stderr, "  %-36s => %s (receipt %" PRId64 ")\n", name, verdict, rid);
            else
                fprintf(stderr, "  %-36s => %s (NOT STORED: no receipt exists for this run)\n",
                        name, verdict);
        }
        json_decref(payload);
    }
    /* the judge on trial: every anchor case of the ladder, on this host, as its own receipt */
    for (int ai = 0; ai < l->n_anchors && !(o->only && n_run == 0); ai++) {
        char name[256];
        snprintf(name, sizeof name, "anchor/%s/%s", l->anchors[ai].id, host);
        int pass = 0;
        json_t *payload = run_anchor_payload(l, ai, hi, o->threads, &id, &pass);
        const char *verdict = json_string_value(json_object_get(payload, "verdict"));
        int64_t rid = 0;
        err_clear(&err);
        if (faultsim_json_failures() > 0)
            err_set(&err, ERR_ENV, "out of memory while building the receipt: it may be"
                    " missing numbers and is not signed");
        int stored = !err.msg[0] && store_append(st, payload, &key, &rid, &err) == 0;
        if (!stored) {
            fprintf(stderr, "gate: cannot store the receipt of %s: %s\n", name, err.msg);
            exit_code = 3;
            pass = 0;
        }
        n_run++;
        n_pass += pass;
        if (!o->json) {
            const char *why = json_string_value(json_object_get(
                json_object_get(json_object_get(payload, "gates"), "anchor"), "reason"));
            fprintf(stderr, "  %-36s %-11s %-6s %s\n", name, "anchor", verdict ? verdict : "?",
                    why && !pass ? why : (l->anchors[ai].reference));
            if (stored)
                fprintf(stderr, "  %-36s => %s (receipt %" PRId64 ")\n", name, verdict, rid);
        }
        json_t *res = json_pack("{s:s, s:s, s:O}", "cell", name, "verdict", verdict ? verdict : "?",
                                "gates", json_object_get(payload, "gates"));
        json_object_set_new(res, "receipt", stored ? json_integer(rid) : json_null());
        json_array_append_new(results, res);
        json_decref(payload);
    }
    /* a signed head record: a later check notices receipts deleted after this point */
    if (n_run > 0) {
        char head[65];
        int64_t count = 0;
        err_clear(&err);
        if ((rc = store_write_head(st, &key, head, &count, &err))) {
            fprintf(stderr, "gate: cannot write the head record: %s\n", err.msg);
            exit_code = 3;
        } else if (!o->json) {
            fprintf(stderr, "chain head %s (%" PRId64 " receipts by key %s); keep it: gate"
                    " release check --expect-head %s\n", head, count, key.id, head);
        }
    }
    if (n_run == 0) {
        exit_code = cli_fail(2, "run: no cell of host '%s'%s%s in %s", host,
                             o->only ? " matches " : "", o->only ? o->only : "", o->ladder);
        goto out;
    }
    if (o->json) {
        json_dumpf(results, stdout, JSON_INDENT(2));
        printf("\n");
    } else {
        printf("\n%-40s %s\n", "cell", "verdict  capability parity golden throughput falsify");
        for (size_t i = 0; i < json_array_size(results); i++) {
            json_t *r = json_array_get(results, i), *gs = json_object_get(r, "gates");
            printf("%-40s %-8s", json_string_value(json_object_get(r, "cell")),
                   json_string_value(json_object_get(r, "verdict")));
            static const char *const gn[] = {"capability", "parity", "golden", "throughput",
                                             "falsify"};
            for (int k = 0; k < 5; k++) {
                const char *v =
                    json_string_value(json_object_get(json_object_get(gs, gn[k]), "verdict"));
                printf(" %-*s", (int)strlen(gn[k]), v ? v : "-");
            }
            printf("\n");
        }
        printf("%d of %d passed (cells and anchor cases)\n", n_pass, n_run);
    }
    if (!exit_code)
        exit_code = n_pass == n_run ? 0 : 1;
out:
    json_decref(results);
    store_close(st);
    key_wipe(&key);
    ladder_free(l);
    return exit_code;
}
