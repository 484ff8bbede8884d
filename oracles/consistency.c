/* consistency.c — the self-consistency gate (see consistency.h).
 *
 * Invariant: consistency_run() records every variant it was due to run (or why it could not
 * run here), and consistency_judge() derives the verdict from those records alone.
 * Start reading: consistency_run().
 */
#include "oracles/consistency.h"
#include "oracles/compare.h"
#include "oracles/prose.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"

/* Prefill chunk lengths that are not multiples of the 16-token tile (issue 22 §4). */
static const int CHUNKS[] = {7, 45};
/* Thread counts of the race / remainder variants. */
static const int THREADS[] = {1, 2, 3};

/* The seed of the consistency sequence (not parity's: another sequence reaches other code). */
#define CONSISTENCY_SEED 0xc0815157ull

/* One variant: the sequence in chunks of `chunk` tokens (n: one batch), then with resume the
 * cache truncated to n / 3 and the rest again in one batch; logits (n, V) into out. */
static int run_variant(const struct model *m, const struct mode *mode, int n_threads, int chunk,
                       int resume, const int32_t *ids, int n, float *out, struct gate_err *err)
{
    const size_t V = m->hp.n_vocab;
    struct backend *b = NULL;
    int rc = mode_open(&b, mode, m, n, n_threads, NULL, err);
    for (int p = 0; !rc && p < n; p += chunk)
        rc =
            backend_forward(b, ids + p, chunk < n - p ? chunk : n - p, p, out + (size_t)p * V, err);
    if (!rc && resume) {
        const int k = n / 3;
        rc = backend_truncate(b, k, err);
        if (!rc)
            rc = backend_forward(b, ids + k, n - k, k, out + (size_t)k * V, err);
    }
    backend_close(b);
    return rc;
}

/* The last-row variant: the sequence in chunks of `chunk`, each through backend_forward_last
 * (greedy decoding's call: only the chunk's last row of logits); out = ref with each chunk's last
 * row replaced by what forward_last gave, so it differs from ref exactly where those rows do. */
static int run_last_rows(const struct model *m, const struct mode *mode, int n_threads, int chunk,
                         const int32_t *ids, int n, const float *ref, float *out,
                         struct gate_err *err)
{
    const size_t V = m->hp.n_vocab;
    struct backend *b = NULL;
    memcpy(out, ref, (size_t)n * V * sizeof *out);
    int rc = mode_open(&b, mode, m, n, n_threads, NULL, err);
    for (int p = 0; !rc && p < n; p += chunk) {
        const int c = chunk < n - p ? chunk : n - p;
        rc = backend_forward_last(b, ids + p, c, p, out + (size_t)(p + c - 1) * V, err);
    }
    backend_close(b);
    return rc;
}

/* {name, ran: true, max_abs, first_diff, identical} of variant logits v against ref */
static json_t *compare(const char *name, const float *ref, const float *v, int n, size_t V)
{
    double mx = 0.0;
    int first = -1;
    for (int p = 0; p < n; p++) {
        const float *a = ref + (size_t)p * V, *b = v + (size_t)p * V;
        if (!memcmp(a, b, V * sizeof(float)))
            continue;
        if (first < 0)
            first = p;
        for (size_t i = 0; i < V; i++) {
            /* a NaN anywhere is the maximum (until 2026-12-03 the next finite difference
             * replaced it: a NaN in one row of a batched forward passed a non-bitwise backend) */
            mx = compare_worst_max(mx, fabs((double)a[i] - (double)b[i]));
        }
    }
    return json_pack("{s:s, s:b, s:o, s:i, s:b}", "name", name, "ran", 1, "max_abs",
                     isfinite(mx) ? json_real(mx) : json_string(isnan(mx) ? "NaN" : "Inf"),
                     "first_diff", first, "identical", first < 0);
}

int consistency_run(const struct model *m, const struct mode *mode,
                    const struct consistency_config *cfg, int n_threads, json_t **metrics,
                    struct gate_err *err)
{
    *metrics = NULL;
    const int n = cfg->positions;
    const size_t V = m->hp.n_vocab;
    struct backend_invariants inv;
    backend_invariants(mode->backend, &inv);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    float *ref = malloc((size_t)n * V * sizeof *ref), *v = malloc((size_t)n * V * sizeof *v);
    json_t *vars = json_array();
    char saved_isa[16], name[64];
    snprintf(saved_isa, sizeof saved_isa, "%s", backend_isa(mode->backend));
    int rc = 0, n_prose = 0;
    if (!ids || !ref || !v || !vars) {
        rc = err_set(err, ERR_ENV, "consistency: out of memory for %d positions", n);
        goto done;
    }
    if (cfg->token_seed)
        rc = prose_mixed_for_model(m, cfg->token_seed, n, ids, &n_prose, NULL, err);
    else
        mode_tokens(CONSISTENCY_SEED, (uint32_t)V, n, ids);
    if (rc)
        goto done;
    /* the reference: every token through the cache, one forward each */
    if ((rc = run_variant(m, mode, n_threads, 1, 0, ids, n, ref, err)))
        goto done;
    if ((rc = run_variant(m, mode, n_threads, n, 0, ids, n, v, err)))
        goto done;
    json_array_append_new(vars, compare("prefill", ref, v, n, V));
    for (size_t i = 0; i < sizeof CHUNKS / sizeof CHUNKS[0]; i++) {
        if ((rc = run_variant(m, mode, n_threads, CHUNKS[i], 0, ids, n, v, err)))
            goto done;
        snprintf(name, sizeof name, "chunks=%d", CHUNKS[i]);
        json_array_append_new(vars, compare(name, ref, v, n, V));
    }
    if ((rc = run_variant(m, mode, n_threads, n, 1, ids, n, v, err)))
        goto done;
    json_array_append_new(vars, compare("resume", ref, v, n, V));
    /* forward_last (greedy decoding's call) gives the batched call's last row */
    if ((rc = run_last_rows(m, mode, n_threads, CHUNKS[0], ids, n, ref, v, err)))
        goto done;
    json_array_append_new(vars, compare("last-rows", ref, v, n, V));
    for (size_t i = 0; inv.threads && i < sizeof THREADS / sizeof THREADS[0]; i++)
        for (int r = 0; r < cfg->repeats; r++) {
            if ((rc = run_variant(m, mode, THREADS[i], n, 0, ids, n, v, err)))
                goto done;
            snprintf(name, sizeof name, "threads=%d#%d", THREADS[i], r + 1);
            json_array_append_new(vars, compare(name, ref, v, n, V));
        }
    /* every declared instruction set this machine runs: the batch, then the reference ISA back */
    for (const char *s = inv.isas; s && *s;) {
        const size_t len = strcspn(s, ",");
        char isa[16];
        snprintf(isa, sizeof isa, "%.*s", (int)(len < sizeof isa ? len : sizeof isa - 1), s);
        s += len + (s[len] == ',');
        snprintf(name, sizeof name, "isa=%s", isa);
        struct gate_err ie = {0};
        if (backend_set_isa(mode->backend, isa, &ie)) {
            json_array_append_new(
                vars, json_pack("{s:s, s:b, s:s}", "name", name, "ran", 0, "why", ie.msg));
            continue;
        }
        rc = run_variant(m, mode, n_threads, n, 0, ids, n, v, err);
        backend_set_isa(mode->backend, saved_isa, &ie);
        if (rc)
            goto done;
        json_array_append_new(vars, compare(name, ref, v, n, V));
    }
    snprintf(name, sizeof name, "decode, %d threads%s%s", n_threads, saved_isa[0] ? ", isa " : "",
             saved_isa);
    *metrics = json_pack("{s:{s:b, s:b, s:s}, s:i, s:i, s:s, s:o, s:s}", "declared", "bitwise",
                         inv.bitwise, "threads", inv.threads, "isas", inv.isas, "positions", n,
                         "prose_tokens", n_prose, "reference", name, "variants", vars, "backend",
                         mode->backend);
    vars = NULL;
    if (!*metrics)
        rc = err_set(err, ERR_ENV, "consistency: out of memory for the metrics");
done:
    if (saved_isa[0]) {
        struct gate_err ie = {0};
        backend_set_isa(mode->backend, saved_isa, &ie);
    }
    json_decref(vars);
    free(ids);
    free(ref);
    free(v);
    return rc;
}

static const json_t *variant(const json_t *vars, const char *name)
{
    size_t i;
    const json_t *x;
    json_array_foreach((json_t *)vars, i, x)
    {
        const char *nm = json_string_value(json_object_get(x, "name"));
        if (nm && !strcmp(nm, name))
            return x;
    }
    return NULL;
}

enum gate_verdict consistency_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                                    char *why, size_t n)
{
    double positions, repeats, bound;
    const json_t *decl = json_object_get(metrics, "declared");
    const json_t *vars = json_object_get(metrics, "variants");
    char first[320] = "", metric[128];
    int fails = 0;
    if (gate_metric_num(settings, "positions", &positions) ||
        gate_metric_num(settings, "repeats", &repeats) ||
        gate_metric_num(settings, "max_abs", &bound) || !json_is_object(decl) ||
        !json_is_array(vars)) {
        gate_check_bool(checks, "settings and metrics complete", 0);
        snprintf(why, n,
                 "consistency needs settings positions, repeats, max_abs and recorded"
                 " variants");
        return GATE_FAIL;
    }
    /* the invariances come from the backend's own row (engine/backend.c), never from what the
     * receipt says it declared: a recorded declaration that differs is a FAIL */
    struct backend_invariants inv;
    const char *ran =
        json_string_value(json_object_get(json_object_get(metrics, "ran"), "backend"));
    if (!ran) /* judged outside a receipt (consistency_run's own verdict): the mode's backend */
        ran = json_string_value(json_object_get(metrics, "backend"));
    backend_invariants(ran ? ran : "", &inv);
    const int bitwise = inv.bitwise, threads = inv.threads;
    if (!gate_check_bool(checks, "declared invariances are the backend's",
                         ran && json_is_true(json_object_get(decl, "bitwise")) == bitwise &&
                             json_is_true(json_object_get(decl, "threads")) == threads) &&
        !fails++)
        snprintf(first, sizeof first,
                 "the recorded invariances (bitwise %d, threads %d) are not backend %s's"
                 " (bitwise %d, threads %d)",
                 json_is_true(json_object_get(decl, "bitwise")),
                 json_is_true(json_object_get(decl, "threads")), ran ? ran : "(not recorded)",
                 bitwise, threads);
    double rec_pos = NAN;
    gate_metric_num(metrics, "positions", &rec_pos);
    if (!gate_check_num(checks, "positions run", rec_pos, "==", positions) && !fails++)
        snprintf(first, sizeof first, "%g positions run, the settings say %g", rec_pos, positions);
    /* the variants every backend runs, and the thread variants where declared */
    char due[256][32];
    int n_due = 0;
    snprintf(due[n_due++], sizeof due[0], "prefill");
    for (size_t i = 0; i < sizeof CHUNKS / sizeof CHUNKS[0]; i++)
        snprintf(due[n_due++], sizeof due[0], "chunks=%d", CHUNKS[i]);
    snprintf(due[n_due++], sizeof due[0], "resume");
    snprintf(due[n_due++], sizeof due[0], "last-rows");
    for (size_t i = 0; threads && i < sizeof THREADS / sizeof THREADS[0]; i++)
        for (int r = 0; r < (int)repeats && n_due < 256; r++)
            snprintf(due[n_due++], sizeof due[0], "threads=%d#%d", THREADS[i], r + 1);
    for (int i = 0; i < n_due; i++) {
        const json_t *x = variant(vars, due[i]);
        snprintf(metric, sizeof metric, "%.31s ran", due[i]);
        if (!gate_check_bool(checks, metric, x && json_is_true(json_object_get(x, "ran"))) &&
            !fails++)
            snprintf(first, sizeof first, "variant %.31s was due and did not run", due[i]);
    }
    size_t i;
    const json_t *x;
    int n_ran = 0;
    json_array_foreach((json_t *)vars, i, x)
    {
        const char *nm = json_string_value(json_object_get(x, "name"));
        if (!json_is_true(json_object_get(x, "ran")))
            continue;
        n_ran++;
        double mx = NAN, fd = NAN;
        gate_metric_num(x, "max_abs", &mx);
        gate_metric_num(x, "first_diff", &fd);
        snprintf(metric, sizeof metric, "%.40s max |logit difference| from the reference",
                 nm ? nm : "?");
        const int ok = bitwise ? gate_check_num(checks, metric, mx, "==", 0) &&
                                     gate_check_num(checks, "first differing position", fd, "<", 0)
                               : gate_check_num(checks, metric, mx, "<=", bound);
        if (!ok && !fails++)
            snprintf(first, sizeof first,
                     "%s differs from the reference (%s) from position %g on, max |diff| %g:"
                     " the engine declares %s",
                     nm ? nm : "?",
                     json_string_value(json_object_get(metrics, "reference"))
                         ? json_string_value(json_object_get(metrics, "reference"))
                         : "decode",
                     fd, mx, bitwise ? "bit-identical logits" : "a bounded difference");
    }
    if (!gate_check_num(checks, "variants run", n_ran, ">=", n_due) && !fails++)
        snprintf(first, sizeof first, "%d variants ran, %d due", n_ran, n_due);
    snprintf(why, n, "%s", fails ? first : "");
    return fails ? GATE_FAIL : GATE_PASS;
}
