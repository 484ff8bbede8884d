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

#include "cli/cli.h"
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
            fprintf(stderr, "gate run: ladder %s (%s %s), host %s, build %.12s%s\n",
                    safe(ev->ladder_path), safe(ev->ladder_name), safe(ev->ladder_version),
                    safe(ev->host), ev->git_commit, ev->git_dirty ? " (dirty)" : "");
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
    case RUN_EV_CELL_STARTED:
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
    fprintf(out, "\n%-40s %s\n", "cell", "verdict  capability parity golden throughput falsify");
    static const char *const gn[] = {"capability", "parity", "golden", "throughput", "falsify"};
    for (int i = 0; i < res->n; i++) {
        const struct run_cell_result *c = &res->cells[i];
        fprintf(out, "%-40s %-8s", safe(c->name), safe(c->verdict));
        for (int k = 0; k < 5; k++) {
            const char *v = "-";
            for (int g = 0; g < c->n_gates; g++)
                if (!strcmp(c->gates[g].name, gn[k]))
                    v = c->gates[g].verdict;
            fprintf(out, " %-*s", (int)strlen(gn[k]), v);
        }
        fprintf(out, "\n");
    }
    fprintf(out, "%d of %d passed (cells and anchor cases)\n", res->n_pass, res->n);
}

/* ---- gate release check ---------------------------------------------------------------------- */

/* The matrix: models x (host/mode) columns in order of first appearance, cells and excluded;
 * then one row per anchor case. */
static void print_matrix(FILE *out, const struct ladder *l, const struct release_result *r)
{
    char cols[64][96];
    int n_cols = 0;
    for (int i = 0; i < l->n_cells + l->n_excluded && n_cols < 64; i++) {
        int host = i < l->n_cells ? l->cells[i].host : l->excluded[i - l->n_cells].host;
        const char *mode = i < l->n_cells ? l->cells[i].mode : l->excluded[i - l->n_cells].mode;
        char c[96];
        snprintf(c, sizeof c, "%s/%s", l->hosts[host].id, mode);
        int seen = 0;
        for (int k = 0; k < n_cols; k++)
            seen |= !strcmp(cols[k], c);
        if (!seen)
            snprintf(cols[n_cols++], sizeof cols[0], "%s", c);
    }
    fprintf(out, "%-20s", "model");
    for (int k = 0; k < n_cols; k++)
        fprintf(out, " %-22s", safe(cols[k]));
    fprintf(out, "\n");
    for (int mi = 0; mi < l->n_models; mi++) {
        fprintf(out, "%-20s", safe(l->models[mi].id));
        for (int k = 0; k < n_cols; k++) {
            const char *s = "-";
            for (int i = 0; i < l->n_cells + l->n_excluded; i++) {
                int ex = i >= l->n_cells;
                int model = ex ? l->excluded[i - l->n_cells].model : l->cells[i].model;
                int host = ex ? l->excluded[i - l->n_cells].host : l->cells[i].host;
                const char *mode = ex ? l->excluded[i - l->n_cells].mode : l->cells[i].mode;
                char c[96];
                snprintf(c, sizeof c, "%s/%s", l->hosts[host].id, mode);
                if (model == mi && !strcmp(c, cols[k]))
                    s = release_state_name(ex ? r->excluded[i - l->n_cells].state
                                              : r->cells[i].state);
            }
            fprintf(out, " %-22s", s);
        }
        fprintf(out, "\n");
    }
    for (int i = 0; i < r->n_anchors; i++)
        fprintf(out, "%-20s %-22s (judge on trial: %s, %s)\n", "anchor",
                release_state_name(r->anchors[i].state), safe(l->anchors[i].id),
                safe(l->anchors[i].arch));
    fprintf(out, "\n");
}

void report_release(FILE *out, const struct ladder *l, const char *ladder_path, const char *db,
                    const struct identity *id, const struct release_result *r)
{
    fprintf(out, "release %s %s — ladder %s (sha256 %.12s), build %.12s%s, %d receipt%s in %s\n",
            safe(l->name), safe(l->version), safe(ladder_path), l->sha256, id->git_commit,
            id->git_dirty ? " (dirty)" : "", r->n_receipts, r->n_receipts == 1 ? "" : "s",
            safe(db));
    fprintf(out, "%d required cell%s, %d excluded, %d anchor case%s\n\n", r->n_cells,
            r->n_cells == 1 ? "" : "s", r->n_excluded, r->n_anchors, r->n_anchors == 1 ? "" : "s");
    print_matrix(out, l, r);
    for (int i = 0; i < l->n_unanchored; i++)
        fprintf(out, "note: judge not anchored for %s: %s\n", safe(l->unanchored[i].arch),
                safe(l->unanchored[i].reason));
    for (int i = 0; i < r->n_excluded; i++)
        fprintf(out, "excluded: %-36s %s\n", safe(r->excluded[i].name),
                safe(l->excluded[i].reason));
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
        return;
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
}
