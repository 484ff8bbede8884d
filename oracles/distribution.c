/* distribution.c — next-token distribution figures and the degeneracy criterion (see
 * distribution.h for the contract, docs/synth.md for the derivation and the measurements).
 *
 * One position costs three passes over the vocabulary in double: the maximum; the two partition
 * sums (T = 1 and T = DIST_PROBE_TEMP); the moments of z - max under p. The probe's KL is the
 * closed form KL(p || q_b) = (1 - b) E_p[z] - lse(z) + lse(b z) with b = 1 / T (exact, not the
 * second-order estimate), clamped at 0 against rounding.
 */
#include "oracles/distribution.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/model.h"
#include "oracles/mode.h"
#include "oracles/parity.h"

void distribution_pos(const float *z, int V, struct dist_pos *out)
{
    out->entropy = out->top1 = out->varentropy = out->probe_kl = NAN;
    double mx = -INFINITY;
    for (int i = 0; i < V; i++) {
        if (!isfinite(z[i]))
            return;
        if (z[i] > mx)
            mx = z[i];
    }
    if (V < 1)
        return;
    const double b = 1.0 / DIST_PROBE_TEMP;
    double s = 0, sb = 0;
    for (int i = 0; i < V; i++) {
        const double d = (double)z[i] - mx;
        s += exp(d);
        sb += exp(b * d);
    }
    const double ls = log(s), lsb = log(sb); /* lse(z) - mx, lse(b z) - b mx */
    double m1 = 0, m2 = 0;                   /* E_p[z - mx], E_p[(z - mx)^2] */
    for (int i = 0; i < V; i++) {
        const double d = (double)z[i] - mx, p = exp(d - ls);
        m1 += p * d;
        m2 += p * d * d;
    }
    out->top1 = exp(-ls);
    out->entropy = fmax(0.0, ls - m1);
    out->varentropy = fmax(0.0, m2 - m1 * m1);
    out->probe_kl = fmax(0.0, (1.0 - b) * m1 - ls + lsb);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v (n >= 1, sorted in place): the middle value, or the mean of the two middle ones. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int distribution_positions(const float *logits, int n_pos, int V, struct dist_pos *out,
                           struct dist_summary *s, struct gate_err *err)
{
    memset(s, 0, sizeof *s);
    if (n_pos < 1)
        return 0;
    double *col = malloc((size_t)n_pos * 4 * sizeof *col);
    struct dist_pos *own = out ? NULL : malloc((size_t)n_pos * sizeof *own);
    if (!col || (!out && !own)) {
        free(col);
        free(own);
        return err_set(err, ERR_ENV, "distribution: out of memory for the figures of %d positions",
                       n_pos);
    }
    struct dist_pos *pos = out ? out : own;
    int n = 0;
    for (int p = 0; p < n_pos; p++) {
        distribution_pos(logits + (size_t)p * (size_t)V, V, &pos[p]);
        if (isnan(pos[p].entropy)) {
            s->n_nonfinite++;
            continue;
        }
        col[n] = pos[p].entropy;
        col[n_pos + n] = pos[p].top1;
        col[2 * n_pos + n] = pos[p].varentropy;
        col[3 * n_pos + n] = pos[p].probe_kl;
        n++;
    }
    s->n = n;
    if (n) {
        s->entropy_median = median(col, n);
        s->entropy_min = col[0], s->entropy_max = col[n - 1];
        s->top1_median = median(col + n_pos, n);
        s->top1_min = col[n_pos], s->top1_max = col[n_pos + n - 1];
        s->varentropy_median = median(col + 2 * n_pos, n);
        s->probe_kl_median = median(col + 3 * n_pos, n);
    }
    free(col);
    free(own);
    return 0;
}

int distribution_degenerate(const struct dist_summary *s, double max_kld, char *why, size_t n)
{
    if (why && n)
        why[0] = '\0';
    if (!s->n || !(s->probe_kl_median < max_kld))
        return 0;
    if (why && n)
        snprintf(why, n,
                 "at the median of %d positions a %.0f %% logit temperature error moves KL by"
                 " %.2g < max_kld %g: the KL bounds cannot see a bug that keeps the argmax"
                 " (median entropy %.3g nats, median top-1 %.3f)",
                 s->n, (DIST_PROBE_TEMP - 1) * 100, s->probe_kl_median, max_kld, s->entropy_median,
                 s->top1_median);
    return 1;
}

static json_t *triple(double lo, double med, double hi)
{
    return json_pack("{s:o, s:o, s:o}", "min", parity_json_number(lo), "median",
                     parity_json_number(med), "max", parity_json_number(hi));
}

json_t *distribution_json(const struct dist_summary *s, double max_kld)
{
    char why[400];
    const int deg = distribution_degenerate(s, max_kld, why, sizeof why);
    json_t *o = json_object();
    json_object_set_new(o, "positions", json_integer(s->n));
    json_object_set_new(o, "entropy", triple(s->entropy_min, s->entropy_median, s->entropy_max));
    json_object_set_new(o, "top1", triple(s->top1_min, s->top1_median, s->top1_max));
    json_object_set_new(o, "varentropy_median", parity_json_number(s->varentropy_median));
    json_object_set_new(o, "probe",
                        json_pack("{s:o, s:o}", "temperature", parity_json_number(DIST_PROBE_TEMP),
                                  "kl_median", parity_json_number(s->probe_kl_median)));
    json_object_set_new(o, "max_kld", parity_json_number(max_kld));
    json_object_set_new(o, "degenerate", json_boolean(deg));
    json_object_set_new(o, "reason",
                        json_string(deg        ? why
                                    : s->n > 0 ? "the KL bounds see a 25 % temperature error at"
                                                 " the median position"
                                               : "not measured"));
    if (s->n_nonfinite)
        json_object_set_new(o, "nonfinite_positions", json_integer(s->n_nonfinite));
    return o;
}

int distribution_of_model(const char *path, uint64_t seed, int n, int threads,
                          struct dist_summary *s, struct gate_err *err)
{
    struct model *m = NULL;
    struct backend *b = NULL;
    int32_t *tokens = NULL;
    float *logits = NULL;
    memset(s, 0, sizeof *s);
    int rc = model_load(&m, path, err);
    struct backend_config cfg = {.n_threads = threads, .n_ctx = n, .n_batch = n};
    if (!rc)
        rc = backend_open(&b, backend_judge_name(), m, &cfg, err);
    if (!rc) {
        const int V = (int)m->hp.n_vocab;
        tokens = malloc((size_t)n * sizeof *tokens);
        logits = malloc((size_t)n * (size_t)V * sizeof *logits);
        if (!tokens || !logits)
            rc = err_set(err, ERR_ENV, "distribution: out of memory for %d positions of %s", n,
                         path);
        if (!rc) {
            mode_tokens(seed, (uint32_t)V, n, tokens);
            rc = backend_forward(b, tokens, n, 0, logits, err);
        }
        if (!rc)
            rc = distribution_positions(logits, n, V, NULL, s, err);
    }
    free(tokens);
    free(logits);
    backend_close(b);
    model_free(m);
    return rc;
}
