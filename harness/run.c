/* run.c — `gate run LADDER --host ID`: every cell of this host through every gate, one signed
 * receipt per cell.
 *
 * Invariants: every gate yields a row (an error is a FAILED row with its message, never a
 * missing one); a cell whose gate list is empty is FAILED; a receipt is written for every cell
 * run, failed or not; the backend that actually ran is what the capability gate judges.
 * Each gate is {verdict, error?, settings, metrics, checks[]} (docs/receipts.md); a gate's
 * verdict is derived from its checks here exactly as receipt_rederive() re-derives it.
 * Nothing here prints: progress goes to the caller's callback (struct run_event), results come
 * back in struct run_result, failures as ERR_* statuses; cli/report.c draws them.
 * Start reading: run_ladder(), then run_cell().
 */
#include "harness/run.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/detmath.h"
#include "base/faultsim.h"
#include "engine/backend.h"
#include "engine/exec.h"
#include "engine/model.h"
#include "engine/pin.h"
#include "engine/synth.h"
#include "harness/baseline.h"
#include "harness/budget.h"
#include "harness/gatedef.h"
#include "harness/identity.h"
#include "harness/ladder.h"
#include "oracles/capability.h"
#include "oracles/consistency.h"
#include "oracles/falsify.h"
#include "oracles/golden.h"
#include "oracles/judgecache.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include "oracles/throughput.h"
#include "receipts/key.h"
#include "receipts/receipt.h"
#include "receipts/store.h"

/* Seconds since t0 on the monotonic clock. */
static double since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void emit(run_progress_fn progress, void *ctx, const struct run_event *ev)
{
    if (progress)
        progress(ctx, ev);
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
    struct mode_ran ran; /* what ran during the current gate */
    run_progress_fn progress;
    void *pctx;
    struct run_cell_result *res; /* the gate rows go here */
    struct store *st;            /* the receipts store (the throughput baseline is read from it) */
    const char *key_id;          /* the signing key's id */
    int gate_started;            /* GATE_STARTED was reported for the current gate at t0 */
    struct timespec t0;
    json_t *memory; /* the parity session's memory arithmetic (harness/budget.h); owned */
};

/* Tell the caller a gate begins. */
static void gate_begin(struct cell_ctx *x, const char *model, const char *gate, int is_anchor)
{
    struct run_event ev = {.kind = RUN_EV_GATE_STARTED,
                           .cell = x->name,
                           .model = model,
                           .gate = gate,
                           .is_anchor = is_anchor};
    clock_gettime(CLOCK_MONOTONIC, &x->t0);
    x->gate_started = 1;
    emit(x->progress, x->pctx, &ev);
}

/* Record gate row g as the cell's next result row and tell the caller: the one-line summary is
 * key (the gate's numbers) on PASS, its reason otherwise. */
static void gate_end(struct cell_ctx *x, const char *model, const char *gate, const json_t *g,
                     const char *key, int is_anchor)
{
    const char *v = json_string_value(json_object_get(g, "verdict"));
    const char *why = json_string_value(json_object_get(g, "reason"));
    /* the judge's own line wins (a FAIL's reason, or a PASS that excused positions) */
    const char *summary = why ? why : (key ? key : "");
    struct run_event ev = {.kind = RUN_EV_GATE_FINISHED,
                           .cell = x->name,
                           .model = model,
                           .gate = gate,
                           .verdict = v ? v : "?",
                           .summary = summary,
                           .seconds = x->gate_started ? since(&x->t0) : 0,
                           .is_anchor = is_anchor};
    x->gate_started = 0;
    if (x->res && x->res->n_gates < (int)(sizeof x->res->gates / sizeof x->res->gates[0])) {
        struct run_gate *rg = &x->res->gates[x->res->n_gates++];
        snprintf(rg->name, sizeof rg->name, "%s", gate);
        snprintf(rg->verdict, sizeof rg->verdict, "%s", v ? v : "?");
        snprintf(rg->summary, sizeof rg->summary, "%s", summary);
    }
    emit(x->progress, x->pctx, &ev);
}

/* The cell's parity seed (sampled positions, prefill chunks): FNV-1a of its name mixed with the
 * run's input seed, so every cell meets its own positions and splits, new on every run (the same
 * for a given --input-seed). */
static uint64_t cell_seed(const struct cell_ctx *x)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)x->name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ULL;
    uint64_t s = x->o->input_seed;
    return h ^ det_splitmix64(&s);
}

/* What a gate's metrics record of the inputs (struct run_options): the seed, 16 hex digits, and
 * whether this run drew it ("fresh") or was given it ("given": a reproduction). */
static json_t *inputs_json(const struct cell_ctx *x)
{
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)x->o->input_seed);
    return json_pack("{s:s, s:s}", "seed", hex, "chosen",
                     x->o->input_seed_fresh ? "fresh" : "given");
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
    if (x->memory && !strcmp(gate, "parity")) /* the arithmetic its refusal or run went by */
        json_object_set(metrics, "memory", x->memory);
    if (!strcmp(gate, "parity") || !strcmp(gate, "falsify") ||
        !strcmp(gate, "consistency")) /* their generated sequences */
        json_object_set_new(metrics, "inputs", inputs_json(x));
    json_t *g = gatedef_row(gate, x->c->mode, ladder_gate_settings(&x->c->g, gate), metrics, error);
    gate_end(x, x->l->models[x->c->model].id, gate, g, key, 0);
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

static json_t *gate_parity(struct cell_ctx *x)
{
    struct gate_err err = {0};
    struct parity_config cfg;
    gatedef_parity_config(&x->c->g, &cfg);
    cfg.seed = cell_seed(x);
    cfg.token_seed = x->o->input_seed;
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
    memset(&set, 0, sizeof set);
    memset(&gr, 0, sizeof gr);
    json_t *g = NULL, *settings = ladder_gate_settings(&x->c->g, "golden");
    mode_ran_begin(&x->ran);
    /* the goldens as `ladder check` read them (ladder_check_files refused this run before any
     * receipt if they were unusable then): declared, pinned, this model's entry */
    if (ladder_cell_goldens_load(x->l, (int)(x->c - x->l->cells), x->model_sha, &set, &err)) {
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
    golden_result_free(&gr);
    golden_set_free(&set);
    return g;
}

static json_t *gate_throughput(struct cell_ctx *x)
{
    struct gate_err err = {0};
    const struct ladder_gates *lg = &x->c->g;
    struct throughput_config cfg;
    gatedef_throughput_config(lg, &cfg); /* as the gate table's row checked it at load */
    cfg.n_threads = x->o->threads;
    mode_ran_begin(&x->ran);
    json_t *base = NULL;
    if (lg->baseline[0]) { /* issue 27 §2: this host's earlier receipt of the cell, or a pin */
        struct baseline b;
        json_t *env = identity_environment(x->o->threads);
        int ci = (int)(x->c - x->l->cells);
        if (!x->st || baseline_find(x->st, x->l, ci, x->key_id, env, &b, &err)) {
            json_decref(env);
            return finish(x, "throughput", NULL, err.msg[0] ? err.msg : "no receipts store", NULL);
        }
        json_decref(env);
        base = baseline_json(&b);
        cfg.base_json = base;
    }
    struct throughput_result tr;
    memset(&tr, 0, sizeof tr);
    /* the model already loaded from the pinned descriptor: never re-opened by path */
    const int trc = throughput_gate(x->m, &x->mode, &cfg, &tr, &err);
    json_decref(base);
    if (trc) {
        throughput_result_free(&tr);
        return finish(x, "throughput", NULL, err.msg, NULL);
    }
    char key[800];
    snprintf(key, sizeof key, "%s; %d runs (%d host-starved), %d spot checks: %s", tr.prompt_path,
             tr.decision.n, tr.decision.n_starved, tr.n_checks, tr.decision.reason);
    json_t *metrics = throughput_result_json(&tr);
    throughput_result_free(&tr);
    return finish(x, "throughput", metrics, NULL, key);
}

static json_t *gate_falsify(struct cell_ctx *x)
{
    struct gate_err err = {0};
    struct falsify_config cfg;
    /* as the gate table's row checked it at load; proxy_kinds: the kinds the engine cannot
     * take, falsified by proxy. The run's own verdict (its line below) judges with the cell's
     * engine, as the release check does */
    gatedef_falsify_config(&x->c->g, &cfg);
    cfg.parity.seed = cell_seed(x);
    cfg.parity.token_seed = x->o->input_seed;
    json_t *settings = ladder_gate_settings(&x->c->g, "falsify");
    cfg.engine = json_object_get(settings, "engine");
    struct falsify_result fr;
    memset(&fr, 0, sizeof fr);
    mode_ran_begin(&x->ran);
    const int frc =
        falsify_run(x->m, &x->mode, &x->c->g.falsify, NULL, 0, &cfg, x->o->threads, &fr, &err);
    json_decref(settings);
    if (frc) {
        falsify_result_free(&fr);
        return finish(x, "falsify", NULL, err.msg, NULL);
    }
    char key[640];
    snprintf(key, sizeof key, "%d fault%s: %s", fr.n, fr.n == 1 ? "" : "s", fr.reason);
    json_t *metrics = falsify_result_json(&fr);
    falsify_result_free(&fr);
    return finish(x, "falsify", metrics, NULL, key);
}

static json_t *gate_consistency(struct cell_ctx *x)
{
    struct gate_err err = {0};
    struct consistency_config cfg;
    gatedef_consistency_config(&x->c->g, &cfg);
    cfg.token_seed = x->o->input_seed;
    json_t *metrics = NULL;
    mode_ran_begin(&x->ran);
    if (consistency_run(x->m, &x->mode, &cfg, x->o->threads, &metrics, &err))
        return finish(x, "consistency", NULL, err.msg, NULL);
    return finish(x, "consistency", metrics, NULL, NULL);
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
    if (x->c->g.consistency) {
        mode_ran_begin(&x->ran);
        json_object_set_new(obj, "consistency", finish(x, "consistency", NULL, why, NULL));
    }
    return obj;
}

static void synth_progress(void *ctx, uint64_t done, uint64_t total, int i, int n,
                           const char *tensor)
{
    const struct cell_ctx *x = ctx;
    (void)tensor;
    struct run_event ev = {.kind = RUN_EV_SYNTH,
                           .cell = x->name,
                           .model = x->l->models[x->c->model].id,
                           .done = done,
                           .total = total,
                           .tensor = i,
                           .n_tensors = n};
    emit(x->progress, x->pctx, &ev);
}

/* Make sure the model file exists (synthesizing it if the ladder says so). */
static int ensure_model(struct cell_ctx *x, struct gate_err *err)
{
    const struct ladder_model *lm = &x->l->models[x->c->model];
    int written = 0;
    int rc = ladder_model_ensure(lm, x->o->threads, synth_progress, x, &written, err);
    if (written) {
        struct run_event ev = {
            .kind = RUN_EV_SYNTH, .cell = x->name, .model = lm->id, .finished = 1};
        emit(x->progress, x->pctx, &ev);
    }
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
    if (backend_describe(backend_accelerator_name(), &d, &why) == 0) {
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", d.cc_major, d.cc_minor);
        return json_pack("{s:s, s:s, s:f, s:i, s:i}", "name", d.name, "compute_capability", cc,
                         "memory_gib", (double)d.total_bytes / (double)(1ull << 30), "driver",
                         d.driver, "runtime", d.runtime);
    }
    return json_pack("{s:s}", "error", why.msg);
}

/* The run of each gate on a cell, by its row (NULL: not run on cells: the anchor runs per anchor
 * case, harness/run_anchor.c). */
static json_t *(*const RUNS[])(struct cell_ctx *) = {
    [GATE_ID_CAPABILITY] = gate_capability,
    [GATE_ID_PARITY] = gate_parity,
    [GATE_ID_GOLDEN] = gate_golden,
    [GATE_ID_THROUGHPUT] = gate_throughput,
    [GATE_ID_FALSIFY] = gate_falsify,
    [GATE_ID_CONSISTENCY] = gate_consistency,
    [GATE_ID_ANCHOR] = NULL,
};
_Static_assert(sizeof RUNS / sizeof RUNS[0] == GATE_COUNT, "RUNS: one entry per gate");

/* Run cell ci of l through every gate and return its receipt payload (never NULL except out of
 * memory); res receives the gate rows, *pass whether the verdict is PASS. */
static json_t *run_cell(const struct ladder *l, int ci, const struct run_options *o,
                        const struct identity *id, run_progress_fn progress, void *pctx,
                        struct run_cell_result *res, int *pass, struct store *st,
                        const char *key_id)
{
    struct cell_ctx x;
    memset(&x, 0, sizeof x);
    x.st = st;
    x.key_id = key_id;
    x.l = l;
    x.c = &l->cells[ci];
    x.o = o;
    x.progress = progress;
    x.pctx = pctx;
    x.res = res;
    ladder_cell_name(l, ci, x.name, sizeof x.name);
    struct run_event ev = {
        .kind = RUN_EV_CELL_STARTED, .cell = x.name, .model = l->models[x.c->model].id};
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
            rc = err_set(&err, ERR_INPUT,
                         "model '%s' has SHA-256 %s but the ladder pins %s: the"
                         " file is not the one this ladder gates",
                         lm->id, x.model_sha, lm->sha256);
    }
    if (!rc)
        rc = model_load_pinned(&m, &pf, &err);
    pin_close(&pf);
    if (!rc && strcmp(model_arch_name(m->hp.arch), lm->arch))
        rc = err_set(&err, ERR_INPUT, "model '%s' is %s but the ladder says %s", lm->id,
                     model_arch_name(m->hp.arch), lm->arch);
    if (!rc)
        rc = mode_parse(x.c->mode, &x.mode, &err);
    /* every gate's subject opens with the cell's KV cache and precision */
    x.mode.kv_f16 = x.c->v.at[CELL_KV] == KV_F16;
    snprintf(x.mode.prefill, sizeof x.mode.prefill, "%s",
             cell_variant_value(&x.c->v, CELL_PREFILL));
    /* ... and kernel generations (the backend's defaults unless the cell names others) */
    for (int k = 0; k < KNOB_COUNT; k++)
        snprintf(x.mode.knob[k], sizeof x.mode.knob[k], "%s",
                 cell_variant_value(&x.c->v, (enum cell_setting_id)(CELL_KNOB_FIRST + k)));
    /* ... and runs the cell's instruction set: held for the whole cell, the host's default
     * restored after it (the consistency gate's other sets return to it too) */
    char isa_before[16];
    snprintf(isa_before, sizeof isa_before, "%s", backend_isa(x.mode.backend));
    if (!rc && x.c->v.at[CELL_ISA])
        rc = backend_set_isa(x.mode.backend, cell_variant_value(&x.c->v, CELL_ISA), &err);
    /* its budget (harness/budget.h): memory that does not fit is refused before any gate
     * allocates it, with the figures; the estimate goes to the caller with CELL_STARTED */
    if (!rc) {
        struct budget_memory bm;
        struct budget_time bt;
        struct budget_available ba;
        budget_cell(&x.c->g, &m->hp, x.mode.path, x.mode.kv_f16,
                    !backend_is_external(x.mode.backend), budget_forced(x.mode.backend), o->threads,
                    &bm, &bt);
        ev.estimate_s = bt.seconds, ev.estimate_gflop = bt.gflop, ev.estimate_tokens = bt.tokens;
        ev.estimate_threads = bt.threads;
        ev.memory_bytes = bm.total_bytes;
        if (!(rc = budget_available(&ba, &err))) {
            ev.memory_available = ba.bytes;
            x.memory = budget_memory_json(&bm, &ba);
            rc = budget_check(&bm, &ba, &err);
        }
    }
    emit(progress, pctx, &ev);
    /* the cell's session of its backend (an external engine: one child for the whole cell,
     * started at the first gate's open; NULL for a backend that keeps none) */
    struct backend_session *session = NULL;
    if (!rc) {
        const int ei = x.mode.engine[0] ? ladder_find_engine(l, x.mode.engine) : -1;
        const struct backend_session_config sc = {.engine = ei >= 0 ? &l->engines[ei].e : NULL,
                                                  .model_path = lm->path,
                                                  .model_sha256 = lm->sha256};
        rc = x.mode.engine[0] && ei < 0
                 ? err_set(&err, ERR_INPUT, "mode %s names an undeclared engine", x.c->mode)
                 : backend_session_open(&session, x.mode.backend, &sc, &err);
        x.mode.session = session;
    }
    if (rc) {
        gates = all_failed(&x, err.msg);
    } else {
        x.m = m;
        gates = json_object();
        /* every gate of the table that runs on a cell, in the table's order: the ones every
         * cell runs (cell_gate), and consistency only where the ladder names it */
        for (int gi = 0; gi < GATE_COUNT; gi++) {
            const struct gate_def *d = &GATE_DEFS[gi];
            if (!RUNS[gi] || (!d->cell_gate && !(gi == GATE_ID_CONSISTENCY && x.c->g.consistency)))
                continue;
            gate_begin(&x, lm->id, d->name, 0);
            json_object_set_new(gates, d->name, RUNS[gi](&x));
        }
    }
    struct backend_session_info si;
    backend_session_info(session, &si);
    const struct exec_hello hello = si.hello;
    const int have_hello = si.have_hello, spawns = si.spawns;
    const struct exec_identity eid = si.identity;
    backend_session_close(session); /* bye; the child, its group and its orphans are reaped */
    if (x.c->v.at[CELL_ISA]) {
        struct gate_err ie = {0};
        backend_set_isa(x.mode.backend, isa_before, &ie); /* a name it ran before: cannot fail */
    }
    model_free(m);
    json_decref(x.memory);
    /* the verdict: from the gates' verdicts, as the release check derives it */
    enum gate_verdict overall = gatedef_overall(gates);
    *pass = overall == GATE_PASS;
    identity_utc_now(finished);
    json_t *model_subject =
        json_pack("{s:s, s:s}", "id", lm->id, "sha256", x.model_sha[0] ? x.model_sha : "unknown");
    if (lm->synth) {
        json_t *sy = json_pack("{s:s, s:s, s:I}", "preset", lm->preset, "quant", lm->quant, "seed",
                               (json_int_t)lm->seed);
        if (lm->eps > 0)
            json_object_set_new(sy, "eps", json_real((double)lm->eps));
        if (lm->rope_base > 0)
            json_object_set_new(sy, "rope_base", json_real((double)lm->rope_base));
        json_object_set_new(model_subject, "synth", sy);
    } else
        json_object_set_new(model_subject, "path", json_string(lm->path));
    json_t *exec_subject = NULL;
    if (x.mode.engine[0]) /* exec: the engine that ran, as its handshake named it */
        exec_subject =
            (have_hello ? json_pack("{s:s, s:s, s:s, s:s, s:s, s:i}", "name", x.mode.engine,
                                    "engine", hello.engine, "version", hello.version, "build_id",
                                    hello.build_id, "device", hello.device, "spawns", spawns)
                        : json_pack("{s:s, s:s, s:i}", "name", x.mode.engine, "error",
                                    "no handshake completed", "spawns", spawns));
    if (exec_subject) { /* what was measured about it (docs/exec.md, "Pinning the engine") */
        const struct ladder_engine *le = x.c->g.engine;
        json_t *files = json_array();
        for (int i = 0; le && i < le->e.n_files; i++)
            json_array_append_new(files, json_string(le->e.files[i].sha256));
        json_object_set_new(exec_subject, "path", json_string(eid.path));
        json_object_set_new(exec_subject, "sha256", json_string(eid.sha256));
        json_object_set_new(exec_subject, "files", files);
        json_object_set_new(exec_subject, "isolation", json_string(eid.isolation));
        json_object_set_new(exec_subject, "containment", json_string(eid.containment));
        json_object_set_new(exec_subject, "engine_s", json_real(eid.engine_s));
    }
    json_t *env = identity_environment(o->threads);
    json_object_set_new(env, "host", json_string(l->hosts[x.c->host].id));
    json_object_set_new(env, "gpu", gpu_environment(&l->hosts[x.c->host]));
    json_t *payload = json_pack(
        "{s:i, s:{s:s, s:s, s:s, s:s, s:s}, s:{s:s, s:s, s:s}, s:{s:o, s:o}, s:o, s:o, s:[], s:s,"
        " s:s, s:s}",
        "schema_version", RECEIPT_SCHEMA_VERSION, "ladder", "name", l->name, "version", l->version,
        "sha256", l->sha256, "path", l->path, "trust_sha256", l->trust_sha256, "cell", "model",
        lm->id, "host", l->hosts[x.c->host].id, "mode", x.c->mode, "subject", "model",
        model_subject, "engine", identity_json(id), "environment", env, "gates", gates,
        "faults_active", "verdict", gate_verdict_name(overall), "started_at", started,
        "finished_at", finished);
    if (exec_subject)
        json_object_set_new(json_object_get(payload, "subject"), "exec_engine", exec_subject);
    /* the identity settings are part of the cell (docs/receipts.md): the release check matches
     * them */
    const struct cell_key key = ladder_cell_key(l, (int)(x.c - l->cells));
    json_object_set_new(payload, "cell", cell_key_json(&key));
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
    if (backend_describe(backend_accelerator_name(), &d, &why))
        return err_set(
            err, ERR_ENV, "host '%s' declares GPU '%s' but none is usable: %s%s", h->id,
            h->device_name, why.msg,
            backend_find(backend_accelerator_name()) ? "" : ": a skipped GPU check is a failure");
    const double total_gib = (double)d.total_bytes / (double)(1ull << 30);
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", d.cc_major, d.cc_minor);
    if (!backend_device_name_matches(h->device_name, d.name)) /* a family: whole words */
        return err_set(err, ERR_ENV,
                       "host '%s' declares GPU '%s' but the device is '%s' (the declared name"
                       " must occur in it as whole words)",
                       h->id, h->device_name, d.name);
    if (h->compute_capability[0] && strcmp(cc, h->compute_capability))
        return err_set(err, ERR_ENV, "host '%s' declares compute capability %s but '%s' is %s",
                       h->id, h->compute_capability, d.name, cc);
    if (total_gib < h->min_memory_gib)
        return err_set(err, ERR_ENV, "host '%s' declares at least %.1f GiB but '%s' has %.1f GiB",
                       h->id, h->min_memory_gib, d.name, total_gib);
    return 0;
}

/* Every `isa:` cell of host hi must be one this machine and build run (an AVX-512 cell on an
 * AVX2 machine): refused before any receipt, as a host without its declared GPU is — a cell
 * is never run on another instruction set, and an environment that cannot run it is not a
 * signed FAIL of the engine. */
static int host_runs_isas(const struct ladder *l, int hi, struct gate_err *err)
{
    for (int i = 0; i < l->n_cells; i++) {
        const struct ladder_cell *c = &l->cells[i];
        struct mode m;
        if (c->host != hi || !c->v.at[CELL_ISA] || mode_parse(c->mode, &m, NULL))
            continue;
        char before[16], name[256];
        struct gate_err why = {0};
        snprintf(before, sizeof before, "%s", backend_isa(m.backend));
        if (backend_set_isa(m.backend, cell_variant_value(&c->v, CELL_ISA), &why))
            return err_set(err, ERR_ENV, "host '%s' cannot run cell %s: %s", l->hosts[hi].id,
                           ladder_cell_name(l, i, name, sizeof name), why.msg);
        backend_set_isa(m.backend, before, &why);
    }
    return 0;
}

/* Store payload (signed by key) for result row r and tell the caller; takes nothing. Returns 0
 * or the store's status (r->store_error says why). */
static int store_result(struct store *st, json_t *payload, const struct key_pair *key,
                        struct run_cell_result *r, int *pass, run_progress_fn progress, void *pctx)
{
    struct gate_err err = {0};
    int64_t rid = 0;
    int rc = 0;
    const char *verdict = json_string_value(json_object_get(payload, "verdict"));
    snprintf(r->verdict, sizeof r->verdict, "%s", verdict ? verdict : "?");
    r->gates_json = json_incref(json_object_get(payload, "gates"));
    if (faultsim_json_failures() > 0)
        rc = err_set(&err, ERR_ENV,
                     "out of memory while building the receipt: it may be"
                     " missing numbers and is not signed");
    if (!rc)
        rc = store_append(st, payload, key, &rid, &err);
    if (rc) {
        snprintf(r->store_error, sizeof r->store_error, "%s", err.msg);
        *pass = 0;
    } else {
        r->receipt_id = rid;
    }
    r->pass = *pass;
    struct run_event ev = {.kind = RUN_EV_RECEIPT,
                           .cell = r->name,
                           .verdict = r->verdict,
                           .is_anchor = r->is_anchor,
                           .receipt_id = r->receipt_id,
                           .error = rc ? r->store_error : NULL};
    emit(progress, pctx, &ev);
    return rc;
}

int run_ladder(const struct run_options *given, run_progress_fn progress, void *pctx,
               struct run_result *out, struct gate_err *err)
{
    /* the options this run goes by: the caller's, with the input seed drawn when none is given */
    struct run_options opts = *given;
    const struct run_options *o = &opts;
    opts.input_seed_fresh = !given->input_seed;
    while (!opts.input_seed)
        if (getrandom(&opts.input_seed, sizeof opts.input_seed, 0) !=
            (ssize_t)sizeof opts.input_seed) {
            memset(out, 0, sizeof *out);
            return err_set(err, ERR_ENV, "run: no randomness for the input seed (getrandom)");
        }
    struct ladder *l = NULL;
    struct store *st = NULL;
    struct key_pair key;
    struct identity id;
    struct gate_err why = {0};
    int rc = 0, store_rc = 0;
    memset(&key, 0, sizeof key);
    memset(out, 0, sizeof *out);
    if ((rc = ladder_load(&l, o->ladder, err)) || (rc = ladder_check_runnable(l, err)) ||
        (rc = ladder_check_files(l, err)))
        goto out;
    const char *host = o->host ? o->host : getenv("GATE_HOST");
    if (!host || !*host) {
        rc = err_set(err, ERR_INPUT, "run: which host is this? pass --host ID or set GATE_HOST");
        goto out;
    }
    int hi = ladder_find_host(l, host);
    if (hi < 0) {
        rc = err_set(err, ERR_INPUT, "run: host '%s' is not defined in %s", host, o->ladder);
        goto out;
    }
    if ((rc = host_matches(&l->hosts[hi], &why)) || (rc = host_runs_isas(l, hi, &why))) {
        rc = err_set(err, rc, "run: %s", why.msg);
        goto out;
    }
    char keypath[1024];
    if (o->key)
        snprintf(keypath, sizeof keypath, "%s", o->key);
    else if ((rc = key_default_path(host, keypath, sizeof keypath, err)))
        goto out;
    if (key_load(keypath, &key, &why)) {
        /* suggest `gate key gen` only where it works: it refuses to overwrite an existing file
         * (a key with a loose mode gets key_load's own chmod hint instead) */
        if (access(keypath, F_OK) == 0)
            rc = err_set(err, ERR_INPUT, "run: %s", why.msg);
        else
            rc = err_set(err, ERR_INPUT, "run: %s (make one with: gate key gen --host %s -o %s)",
                         why.msg, host, keypath);
        goto out;
    }
    int trusted = 0;
    for (int t = 0; t < l->hosts[hi].n_trust; t++)
        trusted |= !memcmp(l->hosts[hi].trust[t], key.pk, 32);
    if (!trusted) {
        /* refuse before running anything: receipts nobody will believe are wasted work */
        rc = err_set(err, ERR_INPUT,
                     "run: key %s (%s) is not trusted for host '%s' by %s; add"
                     " its public key to the host's trust list or use a trusted --key",
                     key.id, keypath, host, o->ladder);
        goto out;
    }
    if ((rc = identity_get(&id, err)))
        goto out;
    if ((rc = store_open(&st, o->db ? o->db : "receipts.db", err)))
        goto out;
    {
        /* the judge cache next to the ladder's model cache; a cache that cannot open costs
         * only time, never a verdict */
        const char *jc = getenv("GATE_JUDGE_CACHE");
        char dir[1200];
        struct gate_err je = {0};
        const char *mc = getenv("GATE_MODEL_CACHE"); /* the model cache's folder, if moved */
        if (mc && *mc)
            snprintf(dir, sizeof dir, "%s", mc);
        else
            snprintf(dir, sizeof dir, "%s/.gate-cache", l->dir);
        mkdir(dir, 0755);
        snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/judge");
        out->judge_cache_on =
            !(jc && !strcmp(jc, "off")) && judgecache_open(dir, id.binary_sha256, &je) == 0;
    }
    struct run_event started = {.kind = RUN_EV_STARTED,
                                .ladder_path = o->ladder,
                                .ladder_name = l->name,
                                .ladder_version = l->version,
                                .host = host,
                                .git_commit = id.git_commit,
                                .git_dirty = id.git_dirty,
                                .input_seed = o->input_seed,
                                .input_seed_fresh = o->input_seed_fresh};
    emit(progress, pctx, &started);
    /* one result row per cell of the host that --only selects, then one per anchor case */
    int n_sel = 0;
    for (int i = 0; i < l->n_cells; i++) {
        char name[256];
        ladder_cell_name(l, i, name, sizeof name);
        n_sel += l->cells[i].host == hi && !(o->only && fnmatch(o->only, name, 0) != 0);
    }
    out->cells =
        calloc((size_t)(n_sel + (n_sel || !o->only ? l->n_anchors : 0)) + 1, sizeof *out->cells);
    if (!out->cells) {
        rc = err_set(err, ERR_ENV, "out of memory running %s", o->ladder);
        goto out;
    }
    for (int i = 0; i < l->n_cells; i++) {
        struct run_cell_result *r = &out->cells[out->n];
        ladder_cell_name(l, i, r->name, sizeof r->name);
        if (l->cells[i].host != hi || (o->only && fnmatch(o->only, r->name, 0) != 0))
            continue;
        int pass = 0;
        json_t *payload = run_cell(l, i, o, &id, progress, pctx, r, &pass, st, key.id);
        int src = store_result(st, payload, &key, r, &pass, progress, pctx);
        if (src && !store_rc)
            store_rc = err_set(err, ERR_ENV, "cannot store the receipt of %s: %s", r->name,
                               r->store_error);
        out->n++;
        out->n_pass += pass;
        json_decref(payload);
    }
    /* the judge on trial: every anchor case of the ladder, on this host, as its own receipt */
    for (int ai = 0; ai < l->n_anchors && !(o->only && out->n == 0); ai++) {
        struct run_cell_result *r = &out->cells[out->n];
        snprintf(r->name, sizeof r->name, "anchor/%s/%s", l->anchors[ai].id, host);
        r->is_anchor = 1;
        struct cell_ctx x;
        memset(&x, 0, sizeof x);
        snprintf(x.name, sizeof x.name, "%s", r->name);
        x.progress = progress;
        x.pctx = pctx;
        x.res = r;
        struct run_event ev = {.kind = RUN_EV_CELL_STARTED,
                               .cell = r->name,
                               .model = l->anchors[ai].id,
                               .is_anchor = 1};
        emit(progress, pctx, &ev);
        gate_begin(&x, l->anchors[ai].id, "anchor", 1);
        int pass = 0;
        json_t *payload = run_anchor_payload(l, ai, hi, o->threads, &id, &pass);
        gate_end(&x, l->anchors[ai].id, "anchor",
                 json_object_get(json_object_get(payload, "gates"), "anchor"),
                 l->anchors[ai].reference, 1);
        int src = store_result(st, payload, &key, r, &pass, progress, pctx);
        if (src && !store_rc)
            store_rc = err_set(err, ERR_ENV, "cannot store the receipt of %s: %s", r->name,
                               r->store_error);
        out->n++;
        out->n_pass += pass;
        json_decref(payload);
    }
    if (out->n == 0) {
        rc = err_set(err, ERR_INPUT, "run: no cell of host '%s'%s%s in %s", host,
                     o->only ? " matches " : "", o->only ? o->only : "", o->ladder);
        goto out;
    }
    /* a signed head record: a later check notices receipts deleted after this point */
    err_clear(&why);
    struct run_event hev = {.kind = RUN_EV_HEAD, .key_id = key.id};
    if (store_write_head(st, &key, out->head, &out->head_count, &why)) {
        hev.error = why.msg;
        if (!store_rc)
            store_rc = err_set(err, ERR_ENV, "cannot write the head record: %s", why.msg);
    } else {
        out->head_written = 1;
        snprintf(out->key_id, sizeof out->key_id, "%s", key.id);
        hev.head = out->head;
        hev.head_count = out->head_count;
    }
    emit(progress, pctx, &hev);
    rc = store_rc;
out:
    if (out->judge_cache_on)
        judgecache_stats(&out->judge_cache);
    judgecache_close();
    store_close(st);
    key_wipe(&key);
    ladder_free(l);
    return rc;
}

void run_result_free(struct run_result *out)
{
    if (!out)
        return;
    for (int i = 0; out->cells && i < out->n; i++)
        json_decref(out->cells[i].gates_json);
    free(out->cells);
    memset(out, 0, sizeof *out);
}
