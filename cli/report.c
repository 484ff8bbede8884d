/* report.c — the drawing half of `gate run` and `gate release check` (report.h has the
 * contracts): the core returns results and reports progress through a callback; this file turns
 * them into lines. Invariants: only this layer writes the run's progress and the release's
 * matrix; strings that can come from a receipt or a ladder are escaped with cli_safe() as they
 * are printed; the ticker is the only other thread and writes under out_mu.
 * Start reading: report_run_progress(), then report_release().
 */
#include "cli/report.h"

#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/atomic.h"
#include "cli/cli.h"
#include "cli/report_matrix.h"
#include "harness/budget.h"
#include "harness/gatedef.h"
#include "harness/identity.h"
#include "harness/ladder.h"

/* Receipt- or ladder-borne text escaped for the terminal; eight rotating buffers, so one printf
 * may hold up to eight (each valid until eight more calls). Single-threaded callers only. */
static const char *safe(const char *s)
{
    static char bufs[8][4 * 1024];
    static int next;
    next = (next + 1) % 8;
    return cli_safe(s, bufs[next], sizeof bufs[next]);
}

/* ---- the live ticker ----------------------------------------------------------------------- */

/* On a terminal, a line that shows which gate of which cell is running, for how long, and how
 * long the same gate took before, redrawn every quarter second until the gate finishes (a parity
 * run on a large model on a CPU host takes minutes; silence would read as a hang). */
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER; /* one writer on stderr at a time */

struct ticker {
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    char what[320];
    double expected; /* seconds; < 0 when unknown */
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
        double t = since(&tk->t0);
        pthread_mutex_lock(&out_mu);
        if (tk->expected >= 0)
            fprintf(stderr, "\r  %s %c %.1f s of ~%.1f s\033[K", tk->what, spin[i % 4], t,
                    tk->expected);
        else
            fprintf(stderr, "\r  %s %c %.1f s\033[K", tk->what, spin[i % 4], t);
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

/* A running ticker, or NULL when one cannot be started (then nothing is drawn). */
static struct ticker *ticker_start(const char *cell, const char *gate, double expected)
{
    struct ticker *tk = calloc(1, sizeof *tk);
    if (!tk)
        return NULL;
    snprintf(tk->what, sizeof tk->what, "%-36s %-11s running", safe(cell), gate);
    tk->expected = expected;
    clock_gettime(CLOCK_MONOTONIC, &tk->t0);
    pthread_mutex_init(&tk->mu, NULL);
    pthread_cond_init(&tk->cv, NULL);
    if (pthread_create(&tk->tid, NULL, ticker_main, tk) != 0) {
        pthread_mutex_destroy(&tk->mu);
        pthread_cond_destroy(&tk->cv);
        free(tk);
        return NULL;
    }
    return tk;
}

static void ticker_stop(struct ticker *tk)
{
    if (!tk)
        return;
    pthread_mutex_lock(&tk->mu);
    tk->stop = 1;
    pthread_cond_signal(&tk->cv);
    pthread_mutex_unlock(&tk->mu);
    pthread_join(tk->tid, NULL);
    pthread_mutex_destroy(&tk->mu);
    pthread_cond_destroy(&tk->cv);
    free(tk);
}

/* ---- gate run: progress ---------------------------------------------------------------------- */

double report_run_estimate(const struct report_run *r, const char *model, const char *gate)
{
    double sum = 0, sum_model = 0;
    int n = 0, n_model = 0;
    for (int i = 0; i < r->n_timing; i++) {
        if (strcmp(r->timing[i].gate, gate))
            continue;
        sum += r->timing[i].sum;
        n += r->timing[i].n;
        if (model && !strcmp(r->timing[i].model, model)) {
            sum_model += r->timing[i].sum;
            n_model += r->timing[i].n;
        }
    }
    return n_model ? sum_model / n_model : n ? sum / n : -1;
}

static void record_timing(struct report_run *r, const char *model, const char *gate, double s)
{
    int i;
    model = model ? model : "";
    for (i = 0; i < r->n_timing; i++)
        if (!strcmp(r->timing[i].model, model) && !strcmp(r->timing[i].gate, gate))
            break;
    if (i == r->n_timing) {
        if (r->n_timing == REPORT_MAX_TIMINGS)
            return;
        r->n_timing++;
        snprintf(r->timing[i].model, sizeof r->timing[i].model, "%s", model);
        snprintf(r->timing[i].gate, sizeof r->timing[i].gate, "%s", gate);
        r->timing[i].sum = 0;
        r->timing[i].n = 0;
    }
    r->timing[i].sum += s;
    r->timing[i].n++;
}

void report_run_end(struct report_run *r)
{
    if (!r)
        return;
    ticker_stop(r->tk);
    r->tk = NULL;
}

void report_run_progress(void *ctx, const struct run_event *ev)
{
    struct report_run *r = ctx;
    switch (ev->kind) {
    case RUN_EV_STARTED:
        if (ev->git_dirty)
            fprintf(stderr, "gate: WARNING: this binary was built from a tree with uncommitted"
                            " changes; its receipts never count for a release\n");
        if (!r->json)
            fprintf(stderr,
                    "gate run: ladder %s (%s %s), host %s, build %.12s%s, inputs %016llx (%s)\n",
                    safe(ev->ladder_path), safe(ev->ladder_name), safe(ev->ladder_version),
                    safe(ev->host), ev->git_commit, ev->git_dirty ? " (dirty)" : "",
                    (unsigned long long)ev->input_seed,
                    ev->input_seed_fresh ? "fresh" : "given: --input-seed");
        break;
    case RUN_EV_SYNTH:
        if (r->tty && ev->finished)
            fprintf(stderr, "\n");
        else if (r->tty)
            fprintf(stderr, "\r  synthesizing %-24s [%-30.*s] %3d%%", safe(ev->model),
                    (int)(ev->total ? 30 * ev->done / ev->total : 30),
                    "##############################",
                    (int)(ev->total ? 100 * ev->done / ev->total : 100));
        else if (!ev->finished && ev->tensor + 1 == ev->n_tensors)
            fprintf(stderr, "  synthesized %s (%d tensors)\n", safe(ev->model), ev->n_tensors);
        break;
    case RUN_EV_CELL_STARTED: /* the estimate and memory of harness/budget.h, before it runs */
        if (!r->json && ev->estimate_tokens > 0)
            fprintf(stderr,
                    "  %s: estimated %.0f s (%.0f token-forwards, %.0f GFLOP at %.0f GFLOP/s x %d"
                    " threads); memory %.0f of %.0f MiB available\n",
                    safe(ev->cell), ev->estimate_s, ev->estimate_tokens, ev->estimate_gflop,
                    BUDGET_GFLOPS_PER_THREAD, ev->estimate_threads,
                    (double)ev->memory_bytes / 1048576.0, (double)ev->memory_available / 1048576.0);
        break;
    case RUN_EV_GATE_STARTED:
        ticker_stop(r->tk);
        r->tk = NULL;
        if (r->tty)
            r->tk = ticker_start(ev->cell, ev->gate, report_run_estimate(r, ev->model, ev->gate));
        break;
    case RUN_EV_GATE_FINISHED:
        ticker_stop(r->tk);
        r->tk = NULL;
        if (ev->seconds > 0)
            record_timing(r, ev->model, ev->gate, ev->seconds);
        if (r->json)
            break;
        pthread_mutex_lock(&out_mu);
        fprintf(stderr, "%s  %-36s %-11s %-6s %s\n", r->tty ? "\r\033[K" : "", safe(ev->cell),
                ev->gate, ev->verdict ? safe(ev->verdict) : "?",
                safe(ev->summary ? ev->summary : ""));
        pthread_mutex_unlock(&out_mu);
        break;
    case RUN_EV_RECEIPT:
        if (ev->error)
            fprintf(stderr, "gate: cannot store the receipt of %s: %s\n", safe(ev->cell),
                    safe(ev->error));
        if (r->json)
            break;
        if (!ev->error)
            fprintf(stderr, "  %-36s => %s (receipt %" PRId64 ")\n", safe(ev->cell),
                    safe(ev->verdict), ev->receipt_id);
        else
            fprintf(stderr, "  %-36s => %s (NOT STORED: no receipt exists for this run)\n",
                    safe(ev->cell), safe(ev->verdict));
        break;
    case RUN_EV_HEAD:
        if (ev->error)
            fprintf(stderr, "gate: cannot write the head record: %s\n", safe(ev->error));
        else if (!r->json)
            fprintf(stderr,
                    "chain head %s (%" PRId64 " receipts by key %s); keep it: gate"
                    " release check --expect-head %s\n",
                    ev->head, ev->head_count, ev->key_id, ev->head);
        break;
    }
}

/* ---- gate run: results ----------------------------------------------------------------------- */

void report_run_results(FILE *out, const struct run_result *res, int json)
{
    if (json) {
        json_t *arr = json_array();
        for (int i = 0; i < res->n; i++) {
            const struct run_cell_result *c = &res->cells[i];
            json_t *o = json_pack("{s:s, s:s}", "cell", c->name, "verdict", c->verdict);
            json_object_set(o, "gates", c->gates_json ? c->gates_json : json_null());
            json_object_set_new(o, "receipt",
                                c->receipt_id ? json_integer(c->receipt_id) : json_null());
            json_array_append_new(arr, o);
        }
        json_dumpf(arr, out, JSON_INDENT(2));
        fprintf(out, "\n");
        json_decref(arr);
        return;
    }
    /* one column per gate of the table that runs on cells (check_ran), in its order */
    fprintf(out, "\n%-40s %s", "cell", "verdict ");
    for (int k = 0; k < GATE_COUNT; k++)
        if (GATE_DEFS[k].check_ran)
            fprintf(out, " %s", GATE_DEFS[k].name);
    fprintf(out, "\n");
    for (int i = 0; i < res->n; i++) {
        const struct run_cell_result *c = &res->cells[i];
        fprintf(out, "%-40s %-8s", safe(c->name), safe(c->verdict));
        for (int k = 0; k < GATE_COUNT; k++) {
            if (!GATE_DEFS[k].check_ran)
                continue;
            const char *v = "-";
            for (int g = 0; g < c->n_gates; g++)
                if (!strcmp(c->gates[g].name, GATE_DEFS[k].name))
                    v = c->gates[g].verdict;
            fprintf(out, " %-*s", (int)strlen(GATE_DEFS[k].name), v);
        }
        fprintf(out, "\n");
    }
    fprintf(out, "%d of %d passed (cells and anchor cases)\n", res->n_pass, res->n);
    if (res->judge_cache_on) { /* oracles/judgecache.h */
        const struct judgecache_stats *j = &res->judge_cache;
        const int asked = j->hits + j->misses;
        fprintf(out,
                "judge cache: %d of %d plain judge runs read back (%.0f %%), %d computed (%.1f s),"
                " %d not cacheable (faults, replays); about %.1f s of judging saved; %d entries"
                " written, %d corrupt entries found and recomputed\n",
                j->hits, asked, asked ? 100.0 * j->hits / asked : 0.0, j->misses, j->spent_s,
                j->uncacheable, j->saved_s, j->stored, j->corrupt);
    }
}

/* ---- gate release check ---------------------------------------------------------------------- */

/* The grid of m (report_matrix.h): models down, one column per host x mode x identity settings,
 * "-" where the ladder has no cell; then one line per anchor case. */
static void print_matrix(FILE *out, const struct ladder *l, const struct report_matrix *m)
{
    fprintf(out, "%-20s", "model");
    for (int k = 0; k < m->n_cols; k++)
        fprintf(out, " %-22s", safe(m->cols[k].name));
    fprintf(out, "\n");
    for (int mi = 0; mi < m->n_models; mi++) {
        fprintf(out, "%-20s", safe(l->models[mi].id));
        for (int k = 0; k < m->n_cols; k++) {
            const struct report_matrix_row *w = report_matrix_at(m, mi, k);
            fprintf(out, " %-22s", w ? release_state_name(w->row->state) : "-");
        }
        fprintf(out, "\n");
    }
    for (int i = m->n_cell_rows; i < m->n_rows; i++)
        fprintf(out, "%-20s %-22s (judge on trial: %s, %s)\n", "anchor",
                release_state_name(m->rows[i].row->state), safe(m->rows[i].anchor->id),
                safe(m->rows[i].anchor->arch));
    fprintf(out, "\n");
}

int report_release(FILE *out, const struct ladder *l, const char *ladder_path, const char *db,
                   const struct identity *id, const struct release_result *r, struct gate_err *err)
{
    struct report_matrix m;
    const int rc = report_matrix_build(&m, l, r, err);
    fprintf(out, "release %s %s — ladder %s (sha256 %.12s), build %.12s%s, %d receipt%s in %s\n",
            safe(l->name), safe(l->version), safe(ladder_path), l->sha256, id->git_commit,
            id->git_dirty ? " (dirty)" : "", r->n_receipts, r->n_receipts == 1 ? "" : "s",
            safe(db));
    fprintf(out, "%d required cell%s, %d excluded, %d anchor case%s\n\n", r->n_cells,
            r->n_cells == 1 ? "" : "s", r->n_excluded, r->n_anchors, r->n_anchors == 1 ? "" : "s");
    if (rc)
        fprintf(out, "the release matrix is not drawn: %s\n\n", err->msg);
    else
        print_matrix(out, l, &m);
    for (int i = 0; i < l->n_unanchored; i++)
        fprintf(out, "note: judge not anchored for %s: %s\n", safe(l->unanchored[i].arch),
                safe(l->unanchored[i].reason));
    for (int i = 0; i < m.n_rows; i++)
        if (m.rows[i].excluded_reason)
            fprintf(out, "excluded: %-36s %s\n", safe(m.rows[i].row->name),
                    safe(m.rows[i].excluded_reason));
    for (int i = 0; i < l->n_engines; i++) /* docs/exec.md, "A host without isolation" */
        if (l->engines[i].e.isolation_none)
            fprintf(out, "note: engine %s runs without isolation (isolation: none): %s\n",
                    safe(l->engines[i].e.name), safe(l->engines[i].e.reason));
    for (int i = 0; i < l->n_cells; i++) /* docs/gates.md, "Tolerances from noise" */
        if (l->cells[i].g.loose_reason[0]) {
            char name[256];
            fprintf(out,
                    "note: cell %s may judge parity looser than the backend's noise allows"
                    " (parity.loose_reason): %s\n",
                    safe(ladder_cell_name(l, i, name, sizeof name)),
                    safe(l->cells[i].g.loose_reason));
        }
    for (int i = 0; i < l->n_cells; i++) { /* docs/exec.md, "Falsify by proxy" */
        char name[256], kinds[160];
        const int px = ladder_falsify_proxy_text(&l->cells[i].g, kinds, sizeof kinds);
        if (px == 1)
            fprintf(out,
                    "note: cell %s is falsified by proxy: engine %s takes no faults, so each"
                    " fault went into the judge and the engine's clean run had to be rejected"
                    " against it\n",
                    safe(ladder_cell_name(l, i, name, sizeof name)),
                    safe(l->cells[i].g.engine->e.name));
        else if (px == 2)
            fprintf(out,
                    "note: cell %s is falsified partly by proxy: engine %s does not take %s, so"
                    " those faults went into the judge and the engine's clean run had to be"
                    " rejected against them; the other kinds were injected into the engine\n",
                    safe(ladder_cell_name(l, i, name, sizeof name)),
                    safe(l->cells[i].g.engine->e.name), safe(kinds));
    }
    if (id->git_dirty)
        fprintf(out,
                "note: this gate binary was built from a tree that is not its commit (%s);"
                " no receipt can count for it. Commit, rebuild, rerun.\n",
                id->dirty_reason[0] ? safe(id->dirty_reason) : "uncommitted changes");
    for (int i = 0; i < r->n_cells; i++)
        if (r->cells[i].disagree[0])
            fprintf(out, "warning: %s\n", safe(r->cells[i].disagree));
    for (int i = 0; i < r->n_anchors; i++)
        if (r->anchors[i].disagree[0])
            fprintf(out, "warning: %s\n", safe(r->anchors[i].disagree));
    if (r->ok) {
        fprintf(out, "RELEASE OK: all %d required cells and %d anchor case%s PASS for this build\n",
                r->n_cells, r->n_anchors, r->n_anchors == 1 ? "" : "s");
        report_matrix_free(&m);
        return rc;
    }
    fprintf(out,
            "RELEASE BLOCKED: %d of %d required cells and %d of %d anchor case%s are not"
            " PASS%s\n",
            r->n_bad_cells, r->n_cells, r->n_bad_anchors, r->n_anchors,
            r->n_anchors == 1 ? "" : "s", r->dirty ? "; this binary is not a clean build" : "");
    for (int i = 0; i < r->n_anchors; i++)
        if (r->anchors[i].state != RELEASE_PASS)
            fprintf(out, "  anchor %-33s %-9s %s\n", safe(r->anchors[i].name),
                    release_state_name(r->anchors[i].state), safe(r->anchors[i].reason));
    for (int i = 0; i < r->n_cells; i++)
        if (r->cells[i].state != RELEASE_PASS)
            fprintf(out, "  %-40s %-9s %s\n", safe(r->cells[i].name),
                    release_state_name(r->cells[i].state), safe(r->cells[i].reason));
    for (int i = 0; i < r->n_excluded; i++)
        if (r->excluded[i].state != RELEASE_EXCLUDED)
            fprintf(out, "  %-40s %-9s %s (excluded, but an exclusion cannot hide a failure)\n",
                    safe(r->excluded[i].name), release_state_name(r->excluded[i].state),
                    safe(r->excluded[i].reason));
    report_matrix_free(&m);
    return rc;
}

/* ---- CI formats: JUnit XML and the release as JSON (issue 13) -------------------------------- */

/* s as XML text or attribute value: first cli_safe() (C0 controls, which XML 1.0 cannot carry
 * even as references, and invalid UTF-8 become "\xNN"), then the five markup characters as
 * entities and the non-characters U+FFFE / U+FFFF (also illegal in XML) as "\xNN". */
static void xml_put(FILE *out, const char *s)
{
    size_t n = 4 * strlen(s ? s : "(null)") + 1;
    char small[1024], *buf = n <= sizeof small ? small : malloc(n);
    if (!buf) {
        fprintf(out, "(out of memory for %zu bytes of escaped text)", n);
        return;
    }
    cli_safe(s, buf, n);
    for (const unsigned char *p = (const unsigned char *)buf; *p; p++) {
        if (p[0] == 0xef && p[1] == 0xbf && (p[2] == 0xbe || p[2] == 0xbf)) {
            fprintf(out, "\\xef\\xbf\\x%02x", p[2]);
            p += 2;
            continue;
        }
        switch (*p) {
        case '&':
            fputs("&amp;", out);
            break;
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        case '\'':
            fputs("&apos;", out);
            break;
        default:
            fputc(*p, out);
        }
    }
    if (buf != small)
        free(buf);
}

/* One <testcase>: kind 0 passed, 1 <failure>, 2 <error>, 3 <skipped>; message the reason. */
static void junit_case(FILE *out, const char *classname, const char *name, int kind,
                       const char *type, const char *message)
{
    static const char *const tag[] = {"", "failure", "error", "skipped"};
    fputs("    <testcase classname=\"", out);
    xml_put(out, classname);
    fputs("\" name=\"", out);
    xml_put(out, name);
    if (kind == 0) {
        fputs("\"/>\n", out);
        return;
    }
    fprintf(out, "\">\n      <%s message=\"", tag[kind]);
    xml_put(out, message);
    if (kind == 3) {
        fputs("\"/>\n    </testcase>\n", out);
        return;
    }
    fputs("\" type=\"", out);
    xml_put(out, type);
    fputs("\">", out);
    xml_put(out, message);
    fprintf(out, "</%s>\n    </testcase>\n", tag[kind]);
}

static void junit_suite_open(FILE *out, const char *name, int tests, int failures, int errors,
                             int skipped)
{
    fputs("  <testsuite name=\"", out);
    xml_put(out, name);
    fprintf(out, "\" tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\">\n", tests, failures,
            errors, skipped);
}

/* Write path atomically through fill(out, arg); the stream's errors surface at commit. */
static int junit_file(const char *path, void (*fill)(FILE *, const void *), const void *arg,
                      struct gate_err *err)
{
    struct atomic_file a = {0};
    int rc = atomic_open(&a, path, 0644, err);
    if (rc)
        goto out;
    FILE *f = atomic_stream(&a, err);
    if (!f) {
        rc = ERR_ENV;
        goto out;
    }
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
    fill(f, arg);
    if (ferror(f)) {
        rc = err_set(err, ERR_ENV, "cannot write the JUnit report '%s': write error", path);
        goto out;
    }
    rc = atomic_commit(&a, err);
out:
    atomic_abort(&a);
    return rc;
}

/* the JUnit kind of a verdict: 0 PASS, 2 ERROR, 1 anything else */
static int verdict_kind(const char *v)
{
    return !strcmp(v, "PASS") ? 0 : !strcmp(v, "ERROR") ? 2 : 1;
}

struct run_junit_arg {
    const struct run_result *res;
    const char *run_error;
};

/* The testcases of one run cell, counted (emit 0) or written (emit 1). */
static void run_cell_cases(FILE *out, const struct run_cell_result *c, int emit, int *tests,
                           int *failures, int *errors)
{
    int said = 0;
    for (int g = 0; g < c->n_gates; g++) {
        int k = verdict_kind(c->gates[g].verdict);
        said |= k != 0;
        if (emit)
            junit_case(out, c->name, c->gates[g].name, k, c->gates[g].verdict, c->gates[g].summary);
        (*tests)++;
        *failures += k == 1;
        *errors += k == 2;
    }
    if (c->n_gates == 0) {
        if (emit)
            junit_case(out, c->name, "gates", 1, "FAIL", "no gate ran: an empty gate list fails");
        (*tests)++;
        (*failures)++;
        said = 1;
    }
    if (!said && verdict_kind(c->verdict) != 0) {
        char msg[96];
        snprintf(msg, sizeof msg, "the cell's verdict is %s", c->verdict);
        if (emit)
            junit_case(out, c->name, "verdict", verdict_kind(c->verdict), c->verdict, msg);
        (*tests)++;
        *failures += verdict_kind(c->verdict) == 1;
        *errors += verdict_kind(c->verdict) == 2;
    }
    if (emit && c->receipt_id && !c->store_error[0]) {
        char name[64];
        snprintf(name, sizeof name, "receipt %" PRId64, c->receipt_id);
        junit_case(out, c->name, name, 0, "", "");
    } else if (emit) {
        char msg[1200];
        snprintf(msg, sizeof msg, "not stored: no receipt exists for this run: %s",
                 c->store_error[0] ? c->store_error : "no receipt id");
        junit_case(out, c->name, "receipt", 2, "ERROR", msg);
    }
    (*tests)++;
    *errors += !(c->receipt_id && !c->store_error[0]);
}

static void run_junit_fill(FILE *out, const void *argp)
{
    const struct run_junit_arg *a = argp;
    int n = a->res ? a->res->n : 0;
    int tests = 0, failures = 0, errors = 0;
    for (int i = 0; i < n; i++)
        run_cell_cases(out, &a->res->cells[i], 0, &tests, &failures, &errors);
    int stopped = (a->run_error && a->run_error[0]) || n == 0;
    fprintf(out, "<testsuites name=\"gate run\" tests=\"%d\" failures=\"%d\" errors=\"%d\">\n",
            tests + stopped, failures, errors + stopped);
    for (int i = 0; i < n; i++) {
        const struct run_cell_result *c = &a->res->cells[i];
        int t = 0, f = 0, e = 0;
        run_cell_cases(out, c, 0, &t, &f, &e);
        junit_suite_open(out, c->name, t, f, e, 0);
        fputs("    <properties>\n      <property name=\"verdict\" value=\"", out);
        xml_put(out, c->verdict);
        fprintf(out, "\"/>\n      <property name=\"kind\" value=\"%s\"/>\n",
                c->is_anchor ? "anchor" : "cell");
        if (c->receipt_id && !c->store_error[0])
            fprintf(out, "      <property name=\"receipt\" value=\"%" PRId64 "\"/>\n",
                    c->receipt_id);
        fputs("    </properties>\n", out);
        run_cell_cases(out, c, 1, &t, &f, &e);
        fputs("  </testsuite>\n", out);
    }
    if (stopped) {
        junit_suite_open(out, "gate run", 1, 0, 1, 0);
        junit_case(out, "gate run", "run", 2, "ERROR",
                   a->run_error && a->run_error[0] ? a->run_error : "no cell ran");
        fputs("  </testsuite>\n", out);
    }
    fputs("</testsuites>\n", out);
}

int report_run_junit(const char *path, const struct run_result *res, const char *run_error,
                     struct gate_err *err)
{
    struct run_junit_arg a = {res, run_error};
    return junit_file(path, run_junit_fill, &a, err);
}

int report_release_blockers(const struct release_result *r, report_blocker_fn fn, void *ctx)
{
    int n = 0;
    char msg[1200];
    if (r->store_problem[0]) {
        fn(ctx, "store", "store", r->store_problem);
        n++;
    }
    if (r->dirty) {
        snprintf(msg, sizeof msg,
                 "this gate binary is not a clean build (%s): no receipt can count for it",
                 r->dirty_reason[0] ? r->dirty_reason : "the tree is not its commit");
        fn(ctx, "build", "build", msg);
        n++;
    }
    const struct release_row *sets[3] = {r->cells, r->excluded, r->anchors};
    int ns[3] = {r->n_cells, r->n_excluded, r->n_anchors};
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < ns[s]; i++) {
            const struct release_row *w = &sets[s][i];
            if (w->state == (s == 1 ? RELEASE_EXCLUDED : RELEASE_PASS))
                continue;
            snprintf(msg, sizeof msg, "%s: %s", release_state_name(w->state), w->reason);
            fn(ctx, "row", w->name, msg);
            n++;
        }
    if (!r->ok && n == 0) {
        fn(ctx, "release", "release", "the release is blocked");
        n++;
    }
    return n;
}

struct release_junit_arg {
    const struct report_matrix *m; /* NULL when the check did not run */
    const struct ladder *l;
    const struct release_result *r;
    const char *check_error;
};

/* The JUnit kind of a release row: 0 PASS, 3 EXCLUDED, 2 ERROR, 1 any other state. */
static int row_kind(const struct release_row *w)
{
    return w->state == RELEASE_PASS       ? 0
           : w->state == RELEASE_EXCLUDED ? 3
           : w->state == RELEASE_ERROR    ? 2
                                          : 1;
}

static void release_row_case(FILE *out, const struct report_matrix_row *mw)
{
    static const char *const cls[] = {"cell", "excluded", "anchor"};
    const struct release_row *w = mw->row;
    char msg[1200];
    int k = row_kind(w);
    if (k == 3)
        snprintf(msg, sizeof msg, "excluded: %s", mw->excluded_reason);
    else if (w->blocking_id)
        snprintf(msg, sizeof msg, "%s (receipt %" PRId64 "): %s", release_state_name(w->state),
                 w->blocking_id, w->reason);
    else
        snprintf(msg, sizeof msg, "%s: %s", release_state_name(w->state), w->reason);
    junit_case(out, cls[w->kind], w->name, k, release_state_name(w->state), msg);
}

/* report_release_blockers callback for JUnit: counts the blockers that are not rows (out NULL)
 * or writes each as a failing testcase of classname "release". */
struct extra_cases {
    FILE *out;
    int n;
};

static void count_extra(void *ctx, const char *kind, const char *subject, const char *reason)
{
    struct extra_cases *ex = ctx;
    if (!strcmp(kind, "row"))
        return;
    if (!ex->out) {
        ex->n++;
        return;
    }
    static const char *const names[][2] = {
        {"store", "store verifies"}, {"build", "clean build"}, {"release", "release"}};
    const char *name = subject;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(kind, names[i][0]))
            name = names[i][1];
    junit_case(ex->out, "release", name, 1, !strcmp(kind, "store") ? "TAMPERED" : "BLOCKED",
               reason);
}

static void release_junit_fill(FILE *out, const void *argp)
{
    const struct release_junit_arg *a = argp;
    const struct release_result *r = a->r;
    const struct report_matrix *m = a->m;
    if (!m) {
        fputs("<testsuites name=\"gate release check\" tests=\"1\" failures=\"0\" errors=\"1\">\n",
              out);
        junit_suite_open(out, "release", 1, 0, 1, 0);
        junit_case(out, "release", "release check", 2, "ERROR",
                   a->check_error && a->check_error[0] ? a->check_error : "the check did not run");
        fputs("  </testsuite>\n</testsuites>\n", out);
        return;
    }
    int count[4] = {0};
    for (int i = 0; i < m->n_rows; i++)
        count[row_kind(m->rows[i].row)]++;
    int tests = m->n_rows;
    /* the blockers that are not rows: one failing testcase each */
    struct extra_cases ex = {NULL, 0};
    report_release_blockers(r, count_extra, &ex);
    const int sign_error = a->check_error && a->check_error[0];
    tests += ex.n + sign_error;
    count[1] += ex.n;
    count[2] += sign_error;
    fprintf(out,
            "<testsuites name=\"gate release check\" tests=\"%d\" failures=\"%d\" errors=\"%d\">\n",
            tests, count[1], count[2]);
    junit_suite_open(out, "release", tests, count[1], count[2], count[3]);
    fputs("    <properties>\n      <property name=\"release\" value=\"", out);
    xml_put(out, a->l->name);
    fputs(" ", out);
    xml_put(out, a->l->version);
    fprintf(out, "\"/>\n      <property name=\"ladder_sha256\" value=\"%s\"/>\n", a->l->sha256);
    fprintf(out, "      <property name=\"ok\" value=\"%s\"/>\n", r->ok ? "true" : "false");
    if (r->store_problem[0]) {
        fputs("      <property name=\"store_problem\" value=\"", out);
        xml_put(out, r->store_problem);
        fputs("\"/>\n", out);
    }
    fputs("    </properties>\n", out);
    ex.out = out;
    report_release_blockers(r, count_extra, &ex);
    if (sign_error)
        junit_case(out, "release", "release check", 2, "ERROR", a->check_error);
    for (int i = 0; i < m->n_rows; i++)
        release_row_case(out, &m->rows[i]);
    fputs("  </testsuite>\n</testsuites>\n", out);
}

int report_release_junit(const char *path, const struct ladder *l, const struct release_result *r,
                         const char *check_error, struct gate_err *err)
{
    struct report_matrix m;
    struct release_junit_arg a = {NULL, l, r, check_error};
    int rc = 0;
    memset(&m, 0, sizeof m);
    if (l && r) {
        if ((rc = report_matrix_build(&m, l, r, err)))
            return rc;
        a.m = &m;
    }
    rc = junit_file(path, release_junit_fill, &a, err);
    report_matrix_free(&m);
    return rc;
}

/* A JSON string of receipt- or ladder-borne text: as is when it is valid UTF-8 (jansson escapes
 * the controls), else through cli_safe(). */
static json_t *jstr(const char *s)
{
    json_t *j = json_string(s ? s : "");
    return j ? j : json_string(safe(s));
}

static json_t *row_json(const struct report_matrix_row *mw)
{
    static const char *const kind[] = {"cell", "excluded", "anchor"};
    const struct release_row *w = mw->row;
    json_t *o = json_object(), *ids = json_array();
    json_object_set_new(o, "kind", json_string(kind[w->kind]));
    json_object_set_new(o, "name", jstr(w->name));
    if (mw->anchor) {
        json_object_set_new(o, "arch", jstr(mw->anchor->arch));
    } else {
        json_object_set_new(o, "model", jstr(mw->key.model));
        json_object_set_new(o, "host", jstr(mw->key.host));
        json_object_set_new(o, "mode", jstr(mw->key.mode));
        cell_variant_put(&mw->key.v, o); /* its identity settings, as a receipt's cell says */
        if (mw->excluded_reason)
            json_object_set_new(o, "excluded_reason", jstr(mw->excluded_reason));
    }
    json_object_set_new(o, "state", json_string(release_state_name(w->state)));
    json_object_set_new(o, "blocking_receipt",
                        w->blocking_id ? json_integer(w->blocking_id) : json_null());
    json_object_set_new(o, "reason", jstr(w->reason));
    for (int i = 0; i < w->n_pass_ids; i++)
        json_array_append_new(ids, json_integer(w->pass_ids[i]));
    json_object_set_new(o, "pass_receipts", ids);
    json_object_set_new(o, "receipts",
                        json_pack("{s:i, s:i, s:i, s:i, s:i}", "pass", w->n_pass, "fail", w->n_fail,
                                  "error", w->n_error, "stale", w->n_stale, "untrusted",
                                  w->n_untrusted));
    json_object_set_new(o, "disagree", w->disagree[0] ? jstr(w->disagree) : json_null());
    return o;
}

/* report_release_blockers callback: one {kind, subject, reason} into the array ctx. */
static void blocker_json(void *ctx, const char *kind, const char *subject, const char *reason)
{
    json_array_append_new(ctx, json_pack("{s:s, s:o, s:o}", "kind", kind, "subject", jstr(subject),
                                         "reason", jstr(reason)));
}

int report_release_json(FILE *out, const struct ladder *l, const char *ladder_path, const char *db,
                        const struct identity *id, const struct release_result *r,
                        const struct json_t *signoff, struct gate_err *err)
{
    struct report_matrix m;
    int rc = report_matrix_build(&m, l, r, err);
    if (rc) { /* one document still, and never an "ok" that the reader could take for green */
        json_t *j = json_pack("{s:s, s:b, s:o}", "schema", "gate.release/1", "ok", 0, "error",
                              jstr(err->msg));
        json_dumpf(j, out, JSON_INDENT(2));
        fputc('\n', out);
        json_decref(j);
        return rc;
    }
    json_t *doc = json_object(), *rows = json_array(), *states = json_object();
    json_t *un = json_array();
    for (int s = 0; s <= RELEASE_EXCLUDED; s++)
        json_object_set_new(states, release_state_name((enum release_state)s), json_integer(0));
    for (int i = 0; i < m.n_rows; i++) {
        const char *name = release_state_name(m.rows[i].row->state);
        json_object_set_new(states, name,
                            json_integer(json_integer_value(json_object_get(states, name)) + 1));
        json_array_append_new(rows, row_json(&m.rows[i]));
    }
    for (int i = 0; i < l->n_unanchored; i++)
        json_array_append_new(un, json_pack("{s:o, s:o}", "arch", jstr(l->unanchored[i].arch),
                                            "reason", jstr(l->unanchored[i].reason)));
    json_t *unisolated = json_array();
    for (int i = 0; i < l->n_engines; i++)
        if (l->engines[i].e.isolation_none)
            json_array_append_new(unisolated,
                                  json_pack("{s:o, s:o}", "engine", jstr(l->engines[i].e.name),
                                            "reason", jstr(l->engines[i].e.reason)));
    json_object_set_new(doc, "unisolated_engines", unisolated);
    json_t *loose = json_array();
    for (int i = 0; i < l->n_cells; i++)
        if (l->cells[i].g.loose_reason[0]) {
            char name[256];
            json_array_append_new(loose, json_pack("{s:o, s:o}", "cell",
                                                   jstr(ladder_cell_name(l, i, name, sizeof name)),
                                                   "reason", jstr(l->cells[i].g.loose_reason)));
        }
    json_object_set_new(doc, "loose_thresholds", loose);
    json_t *proxied = json_array();
    for (int i = 0; i < l->n_cells; i++) {
        const unsigned pk = ladder_falsify_proxy_kinds(&l->cells[i].g);
        if (!pk)
            continue;
        char name[256], kinds[160];
        json_t *kl = json_array();
        for (int k = 0; k < FAULT_KIND_COUNT; k++)
            if (pk & (1u << k))
                json_array_append_new(kl, json_string(fault_kind_name((enum fault_kind)k)));
        /* kinds: what went into the judge; partial: the engine took the other kinds itself */
        json_array_append_new(
            proxied,
            json_pack("{s:o, s:o, s:o, s:b}", "cell",
                      jstr(ladder_cell_name(l, i, name, sizeof name)), "engine",
                      jstr(l->cells[i].g.engine->e.name), "kinds", kl, "partial",
                      ladder_falsify_proxy_text(&l->cells[i].g, kinds, sizeof kinds) == 2));
    }
    json_object_set_new(doc, "falsified_by_proxy", proxied);
    json_object_set_new(doc, "schema", json_string("gate.release/1"));
    json_object_set_new(doc, "ok", json_boolean(r->ok));
    json_object_set_new(
        doc, "release",
        json_pack("{s:o, s:o}", "name", jstr(l->name), "version", jstr(l->version)));
    json_object_set_new(doc, "ladder",
                        json_pack("{s:o, s:s, s:s}", "path", jstr(ladder_path), "sha256", l->sha256,
                                  "trust_sha256", l->trust_sha256));
    json_object_set_new(doc, "build", identity_json(id));
    json_object_set_new(doc, "dirty", json_boolean(r->dirty));
    json_object_set_new(doc, "store",
                        json_pack("{s:o, s:i}", "db", jstr(db), "receipts", r->n_receipts));
    json_object_set_new(
        doc, "store_problem",
        r->store_problem[0]
            ? json_pack("{s:o, s:o}", "reason", jstr(r->store_problem), "receipt",
                        r->store_problem_id ? json_integer(r->store_problem_id) : json_null())
            : json_null());
    json_object_set_new(doc, "counts",
                        json_pack("{s:i, s:i, s:i, s:i, s:i, s:o}", "required", r->n_cells,
                                  "excluded", r->n_excluded, "anchors", r->n_anchors, "bad_cells",
                                  r->n_bad_cells, "bad_anchors", r->n_bad_anchors, "states",
                                  states));
    json_object_set_new(doc, "unanchored", un);
    json_object_set_new(doc, "rows", rows);
    json_t *blocked = json_array();
    report_release_blockers(r, blocker_json, blocked);
    json_object_set_new(doc, "blocked_by", blocked);
    json_object_set_new(doc, "signoff", signoff ? json_deep_copy(signoff) : json_null());
    json_dumpf(doc, out, JSON_INDENT(2));
    fputc('\n', out);
    json_decref(doc);
    report_matrix_free(&m);
    return 0;
}
