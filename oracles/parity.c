/* parity.c — the parity oracle (see parity.h): per-position math, verdict, localization, and
 * the sessions that run judge and subject.
 *
 * Invariants: every number is computed in double from float logits; a NaN or Inf anywhere
 * classifies its position NONFINITE before any comparison is made, so no NaN reaches a `<` that
 * would quietly evaluate false; the judge never sees a fault (its backend is opened without a
 * fault set). Start reading: judge_pos(), then parity_judge().
 */
#include "oracles/parity.h"
#include "engine/ref_ops.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void parity_config_default(struct parity_config *c)
{
    c->positions = 96;
    c->min_cosine = 0.999;
    c->max_mean_kld = 1e-3;
    c->max_kld = 1e-2;
    c->near_tie = 0.05;
    c->route_tie = PARITY_ROUTE_TIE;
}

int parity_config_check(const struct parity_config *c, struct gate_err *err)
{
    if (c->positions < PARITY_MIN_POSITIONS)
        return err_set(err, ERR_INPUT, "parity positions %d: at least %d are required",
                       c->positions, PARITY_MIN_POSITIONS);
    if (!(c->min_cosine >= -1.0 && c->min_cosine <= 1.0))
        return err_set(err, ERR_INPUT, "parity min_cosine %g is outside [-1, 1]", c->min_cosine);
    if (!(c->max_mean_kld >= 0.0))
        return err_set(err, ERR_INPUT, "parity max_mean_kld %g must be >= 0", c->max_mean_kld);
    if (!(c->max_kld >= 0.0))
        return err_set(err, ERR_INPUT, "parity max_kld %g must be >= 0", c->max_kld);
    if (!(c->near_tie >= 0.0) || isinf(c->near_tie))
        return err_set(err, ERR_INPUT, "parity near_tie %g must be finite and >= 0", c->near_tie);
    return 0;
}

const char *parity_class_name(enum parity_class c)
{
    static const char *N[] = {"MATCH", "TIE_FLIP", "WRONG", "NONFINITE"};
    return (c >= 0 && c <= PARITY_NONFINITE) ? N[c] : "?";
}

/* ---- one position --------------------------------------------------------------------------- */

static int all_finite(const float *x, int n)
{
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

/* Greedy choice: largest logit, lowest id on ties. */
static void top5(const float *x, int n, int out[5])
{
    for (int j = 0; j < 5; j++)
        out[j] = -1;
    for (int i = 0; i < n; i++) {
        int j = 5;
        while (j > 0 && (out[j - 1] < 0 || x[i] > x[out[j - 1]]))
            j--;
        if (j < 5) {
            for (int m = 4; m > j; m--)
                out[m] = out[m - 1];
            out[j] = i;
        }
    }
}

/* log Σ exp(x_i), in double. */
static double logsumexp(const float *x, int n)
{
    double mx = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > mx)
            mx = x[i];
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += exp((double)x[i] - mx);
    return mx + log(s);
}

static void judge_pos(const float *r, const float *t, int V, double near_tie, struct parity_pos *p)
{
    memset(p, 0, sizeof *p);
    if (!all_finite(r, V) || !all_finite(t, V)) {
        p->cls = PARITY_NONFINITE;
        p->cosine = p->kld = p->max_abs_diff = p->ref_gap = NAN;
        p->ref_top = p->test_top = -1;
        return;
    }
    double dot = 0, nr = 0, nt = 0, mad = 0;
    for (int i = 0; i < V; i++) {
        dot += (double)r[i] * t[i];
        nr += (double)r[i] * r[i];
        nt += (double)t[i] * t[i];
        double d = fabs((double)r[i] - t[i]);
        if (d > mad)
            mad = d;
    }
    /* two zero vectors are the same direction; one zero vector is orthogonal to anything */
    p->cosine = (nr == 0 && nt == 0) ? 1.0 : (nr == 0 || nt == 0) ? 0.0 : dot / sqrt(nr * nt);
    p->max_abs_diff = mad;
    const double lr = logsumexp(r, V), lt = logsumexp(t, V);
    double kl = 0.0;
    for (int i = 0; i < V; i++) {
        const double a = (double)r[i] - lr, b = (double)t[i] - lt;
        kl += exp(a) * (a - b);
    }
    p->kld = kl > 0.0 ? kl : 0.0; /* rounding can leave -1e-17 for identical inputs */
    int a5[5], b5[5];
    top5(r, V, a5);
    top5(t, V, b5);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++)
            p->top5 += a5[i] >= 0 && a5[i] == b5[j];
    p->ref_top = ref_argmax(r, V);
    p->test_top = ref_argmax(t, V);
    if (p->ref_top == p->test_top) {
        p->cls = PARITY_MATCH;
        p->ref_gap = (double)r[a5[0]] - r[a5[1]];
    } else {
        /* a flip counts as a near tie only when the ref itself scores the test's pick within
         * eps of its own top: a gap < eps between the ref's top-1 and top-2 is not enough */
        p->ref_gap = (double)r[p->ref_top] - r[p->test_top];
        p->cls = p->ref_gap < near_tie ? PARITY_TIE_FLIP : PARITY_WRONG;
    }
}

/* ---- the verdict ---------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void stat_of(struct parity_stat *s, const struct parity_pos *pos, int n, size_t off,
                    double *scratch)
{
    int m = 0;
    double sum = 0;
    memset(s, 0, sizeof *s);
    s->argmin = s->argmax = -1;
    for (int i = 0; i < n; i++) {
        if (pos[i].cls == PARITY_NONFINITE)
            continue;
        double v;
        if (off == (size_t)-1)
            v = pos[i].top5;
        else
            memcpy(&v, (const char *)&pos[i] + off, sizeof v);
        if (s->argmin < 0 || v < s->min)
            s->min = v, s->argmin = i;
        if (s->argmax < 0 || v > s->max)
            s->max = v, s->argmax = i;
        sum += v;
        scratch[m++] = v;
    }
    if (!m) {
        s->min = s->mean = s->max = s->p1 = s->p99 = NAN;
        return;
    }
    s->mean = sum / m;
    qsort(scratch, (size_t)m, sizeof *scratch, cmp_double);
    int lo = (int)ceil(0.01 * m) - 1, hi = (int)ceil(0.99 * m) - 1;
    s->p1 = scratch[lo < 0 ? 0 : lo];
    s->p99 = scratch[hi < 0 ? 0 : hi];
}

static int breaks_rule(const struct parity_pos *p, const struct parity_config *c)
{
    return p->cls == PARITY_NONFINITE || p->cls == PARITY_WRONG || p->cosine < c->min_cosine ||
           p->kld > c->max_kld;
}

int parity_judge(const float *ref, const float *test, int n_pos, int n_vocab,
                 const struct parity_config *cfg, struct parity_result *out)
{
    struct gate_err e = {0};
    double *scratch = NULL;
    int rc = 0;
    memset(out, 0, sizeof *out);
    out->cfg = *cfg;
    out->n_pos = n_pos;
    out->n_vocab = n_vocab;
    out->first_nonfinite_pos = out->worst_pos = out->first_fail_pos = -1;
    out->first_bad_layer = -1;
    struct parity_config c = *cfg;
    c.positions = PARITY_MIN_POSITIONS; /* the judged length is checked below */
    if ((rc = parity_config_check(&c, &e)) ||
        (n_pos < PARITY_MIN_POSITIONS &&
         (rc = err_set(&e, ERR_INPUT, "parity needs at least %d positions, got %d",
                       PARITY_MIN_POSITIONS, n_pos))) ||
        (n_vocab < 5 && (rc = err_set(&e, ERR_INPUT,
                                      "parity needs a vocabulary of at least 5"
                                      " (top-5), got %d",
                                      n_vocab)))) {
        snprintf(out->reason, sizeof out->reason, "FAIL: %.300s", e.msg);
        return rc;
    }
    out->pos = calloc((size_t)n_pos, sizeof *out->pos);
    scratch = malloc((size_t)n_pos * sizeof *scratch);
    if (!out->pos || !scratch) {
        snprintf(out->reason, sizeof out->reason, "FAIL: out of memory");
        rc = ERR_ENV;
        goto done;
    }
    for (int p = 0; p < n_pos; p++) {
        const float *r = ref + (size_t)p * (size_t)n_vocab, *t = test + (size_t)p * (size_t)n_vocab;
        struct parity_pos *pp = &out->pos[p];
        judge_pos(r, t, n_vocab, cfg->near_tie, pp);
        switch (pp->cls) {
        case PARITY_MATCH:
            out->n_match++;
            break;
        case PARITY_TIE_FLIP:
            out->n_tie_flip++;
            break;
        case PARITY_WRONG:
            out->n_wrong++;
            break;
        case PARITY_NONFINITE:
            if (out->n_nonfinite++ == 0) {
                out->first_nonfinite_pos = p;
                out->nonfinite_in_ref = !all_finite(r, n_vocab);
            }
            break;
        }
        if (out->first_fail_pos < 0 && breaks_rule(pp, cfg))
            out->first_fail_pos = p;
    }
    stat_of(&out->cosine, out->pos, n_pos, offsetof(struct parity_pos, cosine), scratch);
    stat_of(&out->kld, out->pos, n_pos, offsetof(struct parity_pos, kld), scratch);
    stat_of(&out->max_abs_diff, out->pos, n_pos, offsetof(struct parity_pos, max_abs_diff),
            scratch);
    stat_of(&out->top5, out->pos, n_pos, (size_t)-1, scratch);
    out->worst_pos = out->kld.argmax;

    char *why = out->reason;
    const size_t wn = sizeof out->reason;
    if (out->n_nonfinite) {
        snprintf(why, wn, "FAIL: non-finite logits in the %s at position %d (%d positions)",
                 out->nonfinite_in_ref ? "judge (ref)" : "mode under test",
                 out->first_nonfinite_pos, out->n_nonfinite);
    } else if (out->cosine.min < cfg->min_cosine) {
        snprintf(why, wn,
                 "FAIL: min cosine %.6f at position %d < %g; %d WRONG, %d TIE_FLIP;"
                 " max KLD %.3g at position %d",
                 out->cosine.min, out->cosine.argmin, cfg->min_cosine, out->n_wrong,
                 out->n_tie_flip, out->kld.max, out->kld.argmax);
    } else if (out->kld.max > cfg->max_kld) {
        snprintf(why, wn, "FAIL: max KLD %.4g at position %d > %g; %d WRONG, %d TIE_FLIP",
                 out->kld.max, out->kld.argmax, cfg->max_kld, out->n_wrong, out->n_tie_flip);
    } else if (out->kld.mean > cfg->max_mean_kld) {
        snprintf(why, wn, "FAIL: mean KLD %.4g > %g (worst position %d); %d WRONG", out->kld.mean,
                 cfg->max_mean_kld, out->kld.argmax, out->n_wrong);
    } else if (out->n_wrong) {
        snprintf(why, wn,
                 "FAIL: %d WRONG argmax positions, first at %d (ref gap %.4g >= near-tie"
                 " %g)",
                 out->n_wrong, out->first_fail_pos, out->pos[out->first_fail_pos].ref_gap,
                 cfg->near_tie);
    } else {
        out->pass = 1;
        snprintf(why, wn,
                 "PASS: min cosine %.6f, mean KLD %.3g, max KLD %.3g, %d/%d argmax"
                 " match, %d TIE_FLIP",
                 out->cosine.min, out->kld.mean, out->kld.max, out->n_match, n_pos,
                 out->n_tie_flip);
    }
done:
    free(scratch);
    return rc;
}

void parity_result_free(struct parity_result *r)
{
    if (!r)
        return;
    free(r->pos);
    free(r->layers);
    free(r->route_gap);
    r->pos = NULL;
    r->layers = NULL;
    r->route_gap = NULL;
}

double parity_severity(const struct parity_result *r)
{
    if (!r->pos || r->n_nonfinite || r->n_wrong)
        return INFINITY;
    const double allowed = 1.0 - r->cfg.min_cosine > 1e-12 ? 1.0 - r->cfg.min_cosine : 1e-12;
    double s = (1.0 - r->cosine.min) / allowed;
    double a = r->kld.mean / (r->cfg.max_mean_kld > 0 ? r->cfg.max_mean_kld : 1e-300);
    double b = r->kld.max / (r->cfg.max_kld > 0 ? r->cfg.max_kld : 1e-300);
    if (a > s)
        s = a;
    if (b > s)
        s = b;
    return s < 0 ? 0 : s;
}

/* ---- JSON and tables ------------------------------------------------------------------------ */

json_t *parity_json_number(double x)
{
    if (isnan(x))
        return json_string("NaN");
    if (isinf(x))
        return json_string(x > 0 ? "Inf" : "-Inf");
    return json_real(x);
}

static json_t *stat_json(const struct parity_stat *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "min", parity_json_number(s->min));
    json_object_set_new(o, "mean", parity_json_number(s->mean));
    json_object_set_new(o, "max", parity_json_number(s->max));
    json_object_set_new(o, "p1", parity_json_number(s->p1));
    json_object_set_new(o, "p99", parity_json_number(s->p99));
    json_object_set_new(o, "argmin", json_integer(s->argmin));
    json_object_set_new(o, "argmax", json_integer(s->argmax));
    return o;
}

json_t *parity_result_json(const struct parity_result *r)
{
    json_t *o = json_object();
    json_t *c = json_object();
    json_object_set_new(c, "positions", json_integer(r->cfg.positions));
    json_object_set_new(c, "min_cosine", parity_json_number(r->cfg.min_cosine));
    json_object_set_new(c, "max_mean_kld", parity_json_number(r->cfg.max_mean_kld));
    json_object_set_new(c, "max_kld", parity_json_number(r->cfg.max_kld));
    json_object_set_new(c, "near_tie", parity_json_number(r->cfg.near_tie));
    json_object_set_new(o, "config", c);
    json_object_set_new(o, "verdict", json_string(r->pass ? "PASS" : "FAIL"));
    json_object_set_new(o, "reason", json_string(r->reason));
    json_object_set_new(o, "mode", json_string(r->mode));
    json_object_set_new(o, "chat_fallback", json_boolean(r->chat_fallback));
    json_t *fa = json_array();
    for (int i = 0; i < r->n_faults; i++)
        json_array_append_new(fa, json_string(r->faults[i]));
    json_object_set_new(o, "faults", fa);
    json_object_set_new(o, "n_pos", json_integer(r->n_pos));
    json_object_set_new(o, "n_vocab", json_integer(r->n_vocab));
    json_object_set_new(o, "cosine", stat_json(&r->cosine));
    json_object_set_new(o, "kld", stat_json(&r->kld));
    json_object_set_new(o, "max_abs_diff", stat_json(&r->max_abs_diff));
    json_object_set_new(o, "top5_overlap", stat_json(&r->top5));
    json_object_set_new(o, "n_match", json_integer(r->n_match));
    json_object_set_new(o, "n_tie_flip", json_integer(r->n_tie_flip));
    json_object_set_new(o, "n_wrong", json_integer(r->n_wrong));
    json_object_set_new(o, "n_nonfinite", json_integer(r->n_nonfinite));
    json_object_set_new(o, "first_nonfinite_position", json_integer(r->first_nonfinite_pos));
    json_object_set_new(o, "nonfinite_in_judge", json_boolean(r->nonfinite_in_ref));
    json_object_set_new(o, "worst_position", json_integer(r->worst_pos));
    json_object_set_new(o, "first_failing_position", json_integer(r->first_fail_pos));
    json_object_set_new(o, "severity", parity_json_number(r->pos ? parity_severity(r) : NAN));
    json_t *pp = json_object();
    json_t *cos = json_array(), *kld = json_array(), *mad = json_array(), *t5 = json_array(),
           *cls = json_array(), *gap = json_array(), *rt = json_array(), *tt = json_array();
    for (int i = 0; r->pos && i < r->n_pos; i++) {
        json_array_append_new(rt, json_integer(r->pos[i].ref_top));
        json_array_append_new(tt, json_integer(r->pos[i].test_top));
        json_array_append_new(cos, parity_json_number(r->pos[i].cosine));
        json_array_append_new(kld, parity_json_number(r->pos[i].kld));
        json_array_append_new(mad, parity_json_number(r->pos[i].max_abs_diff));
        json_array_append_new(t5, json_integer(r->pos[i].top5));
        json_array_append_new(cls, json_string(parity_class_name(r->pos[i].cls)));
        json_array_append_new(gap, parity_json_number(r->pos[i].ref_gap));
    }
    json_object_set_new(pp, "cosine", cos);
    json_object_set_new(pp, "kld", kld);
    json_object_set_new(pp, "max_abs_diff", mad);
    json_object_set_new(pp, "top5_overlap", t5);
    json_object_set_new(pp, "class", cls);
    json_object_set_new(pp, "ref_gap", gap);
    json_object_set_new(pp, "ref_top", rt);
    if (r->route_gap) {
        /* null where judge and subject route alike at every layer */
        json_t *rg = json_array();
        for (int i = 0; r->pos && i < r->n_pos; i++)
            json_array_append_new(rg, isnan(r->route_gap[i]) ? json_null()
                                                             : parity_json_number(r->route_gap[i]));
        json_object_set_new(pp, "route_gap", rg);
    }
    json_object_set_new(pp, "test_top", tt);
    json_object_set_new(o, "per_position", pp);
    if (r->localized) {
        json_t *loc = json_object(), *ls = json_array();
        json_object_set_new(loc, "first_bad_layer", json_integer(r->first_bad_layer));
        json_object_set_new(
            loc, "at_position",
            json_integer(r->first_fail_pos >= 0 ? r->first_fail_pos : r->worst_pos));
        for (int l = 0; l < r->n_layer; l++) {
            const struct parity_layer *L = &r->layers[l];
            json_t *x = json_object();
            json_object_set_new(x, "layer", json_integer(l));
            json_object_set_new(x, "hidden_cosine", parity_json_number(L->hidden_cosine));
            json_object_set_new(x, "hidden_cosine_min", parity_json_number(L->hidden_cosine_min));
            json_object_set_new(x, "hidden_cosine_min_position",
                                json_integer(L->hidden_cosine_min_pos));
            if (r->is_moe) {
                json_object_set_new(x, "same_expert_set", json_integer(L->n_same));
                json_object_set_new(x, "different_expert_set", json_integer(L->n_diff));
                json_object_set_new(x, "different_near_tie", json_integer(L->n_diff_near_tie));
                json_object_set_new(x, "first_different_position", json_integer(L->first_diff_pos));
                json_object_set_new(x, "ref_router_gap_min", parity_json_number(L->min_gap));
                json_object_set_new(x, "ref_router_gap_max", parity_json_number(L->max_gap));
            }
            json_array_append_new(ls, x);
        }
        json_object_set_new(loc, "layers", ls);
        json_object_set_new(o, "localization", loc);
    }
    return o;
}

void parity_print(FILE *f, const struct parity_result *r)
{
    fprintf(f, "parity %s: %d positions x %d vocab", r->mode[0] ? r->mode : "", r->n_pos,
            r->n_vocab);
    for (int i = 0; i < r->n_faults; i++)
        fprintf(f, "%s%s", i ? ", " : "  faults: ", r->faults[i]);
    fprintf(f, "%s\n", r->chat_fallback ? "  (chat: fallback conversation)" : "");
    if (!r->pos) {
        fprintf(f, "  %s\n", r->reason);
        return;
    }
    fprintf(f, "  %-14s %12s %12s %12s %12s %12s   %s\n", "metric", "min", "mean", "p1", "p99",
            "max", "threshold");
    const struct {
        const char *name;
        const struct parity_stat *s;
        char thr[48];
    } rows[] = {
        {"cosine", &r->cosine, ""},
        {"kld (nats)", &r->kld, ""},
        {"max |dlogit|", &r->max_abs_diff, "-"},
        {"top-5 overlap", &r->top5, "-"},
    };
    char t0[48], t1[48];
    snprintf(t0, sizeof t0, "min >= %g", r->cfg.min_cosine);
    snprintf(t1, sizeof t1, "mean <= %g, max <= %g", r->cfg.max_mean_kld, r->cfg.max_kld);
    for (int i = 0; i < 4; i++)
        fprintf(f, "  %-14s %12.6g %12.6g %12.6g %12.6g %12.6g   %s\n", rows[i].name,
                rows[i].s->min, rows[i].s->mean, rows[i].s->p1, rows[i].s->p99, rows[i].s->max,
                i == 0   ? t0
                : i == 1 ? t1
                         : rows[i].thr);
    fprintf(f, "  argmax: %d MATCH, %d TIE_FLIP (near tie < %g), %d WRONG, %d NONFINITE\n",
            r->n_match, r->n_tie_flip, r->cfg.near_tie, r->n_wrong, r->n_nonfinite);
    if (r->worst_pos >= 0) {
        const struct parity_pos *w = &r->pos[r->worst_pos];
        fprintf(f,
                "  worst position %d: cosine %.6f, KLD %.4g, max |dlogit| %.4g, top-5 %d/5,"
                " argmax ref %d test %d (%s)\n",
                r->worst_pos, w->cosine, w->kld, w->max_abs_diff, w->top5, w->ref_top, w->test_top,
                parity_class_name(w->cls));
    }
    if (r->localized) {
        int at = r->first_fail_pos >= 0 ? r->first_fail_pos : r->worst_pos;
        fprintf(f, "  localization at position %d: first layer with hidden cosine < %g: ", at,
                r->cfg.min_cosine);
        if (r->first_bad_layer >= 0)
            fprintf(f, "%d\n", r->first_bad_layer);
        else
            fprintf(f, "none (the divergence is after the last layer)\n");
        fprintf(f, "  %-6s %14s %14s", "layer", "hidden cos@pos", "min (pos)");
        if (r->is_moe)
            fprintf(f, " %10s %10s %9s %12s %12s", "same-set", "diff-set", "near-tie", "min gap",
                    "max gap");
        fprintf(f, "\n");
        for (int l = 0; l < r->n_layer; l++) {
            const struct parity_layer *L = &r->layers[l];
            fprintf(f, "  %-6d %14.6f %9.6f (%d)", l, L->hidden_cosine, L->hidden_cosine_min,
                    L->hidden_cosine_min_pos);
            if (r->is_moe)
                fprintf(f, " %10d %10d %9d %12.4g %12.4g", L->n_same, L->n_diff, L->n_diff_near_tie,
                        L->min_gap, L->max_gap);
            fprintf(f, "\n");
        }
    }
    fprintf(f, "  %s\n", r->reason);
}

/* ---- sessions ------------------------------------------------------------------------------- */

static void taps_free(struct backend_taps *t)
{
    free(t->hidden);
    free(t->experts);
    free(t->expert_w);
    free(t->router_kth);
    free(t->router_k1th);
    memset(t, 0, sizeof *t);
}

static int taps_alloc(struct backend_taps *t, const struct model_hparams *hp, int n,
                      struct gate_err *err)
{
    memset(t, 0, sizeof *t);
    const size_t ln = (size_t)hp->n_layer * (size_t)n;
    int ok = (t->hidden = calloc(ln * hp->n_embd, sizeof(float))) != NULL;
    if (hp->n_expert > 0) {
        ok &= (t->experts = calloc(ln * hp->n_expert_used, sizeof(int32_t))) != NULL;
        ok &= (t->expert_w = calloc(ln * hp->n_expert_used, sizeof(float))) != NULL;
        ok &= (t->router_kth = calloc(ln, sizeof(float))) != NULL;
        ok &= (t->router_k1th = calloc(ln, sizeof(float))) != NULL;
    }
    if (!ok) {
        taps_free(t);
        return err_set(err, ERR_ENV, "out of memory for taps (%u layers x %d positions)",
                       hp->n_layer, n);
    }
    return 0;
}

struct parity_session {
    const struct model *m;
    struct mode mode;
    struct parity_config cfg;
    int32_t *tokens;
    int n;
    int *turn_ends, n_turns;
    int chat_fallback;
    struct backend *judge, *subject;
    float *judge_logits, *subj_logits, *clean_logits;
    int with_taps;
    int subj_taps_ok; /* with_taps and the subject records taps (an exec engine does not) */
    struct backend_taps judge_taps, subj_taps, clean_taps;
    int have_clean;
};

int parity_session_n(const struct parity_session *s)
{
    return s->n;
}

void parity_session_close(struct parity_session *s)
{
    if (!s)
        return;
    backend_close(s->judge);
    backend_close(s->subject);
    free(s->tokens);
    free(s->turn_ends);
    free(s->judge_logits);
    free(s->subj_logits);
    free(s->clean_logits);
    taps_free(&s->judge_taps);
    taps_free(&s->subj_taps);
    taps_free(&s->clean_taps);
    free(s);
}

/* The sequence of a session: supplied tokens, generated ids, or the chat conversation. */
static int build_sequence(struct parity_session *s, const int32_t *tokens, int n,
                          struct gate_err *err)
{
    const uint32_t V = s->m->hp.n_vocab;
    if (!tokens && s->mode.path == MODE_CHAT) {
        int rc = mode_chat_for_model(s->m, &s->tokens, &s->n, &s->turn_ends, &s->n_turns,
                                     &s->chat_fallback, err);
        if (rc)
            return rc;
        if (s->n < PARITY_MIN_POSITIONS)
            return err_set(err, ERR_INPUT,
                           "the chat conversation has %d tokens, fewer than the"
                           " %d positions parity needs",
                           s->n, PARITY_MIN_POSITIONS);
        return 0;
    }
    if (!tokens)
        n = s->cfg.positions;
    if (n < PARITY_MIN_POSITIONS)
        return err_set(err, ERR_INPUT, "parity needs at least %d positions, got %d",
                       PARITY_MIN_POSITIONS, n);
    s->tokens = malloc((size_t)n * sizeof *s->tokens);
    if (!s->tokens)
        return err_set(err, ERR_ENV, "out of memory for %d tokens", n);
    s->n = n;
    if (tokens) {
        for (int i = 0; i < n; i++)
            if (tokens[i] < 0 || (uint32_t)tokens[i] >= V)
                return err_set(err, ERR_INPUT,
                               "token id %d at position %d is out of range"
                               " (vocabulary has %u tokens)",
                               (int)tokens[i], i, V);
        memcpy(s->tokens, tokens, (size_t)n * sizeof *tokens);
    } else {
        mode_tokens(PARITY_TOKEN_SEED, V, n, s->tokens);
    }
    if (s->mode.path == MODE_CHAT) { /* supplied tokens: six equal turns */
        s->n_turns = 6;
        s->turn_ends = malloc(6 * sizeof *s->turn_ends);
        if (!s->turn_ends)
            return err_set(err, ERR_ENV, "out of memory");
        for (int i = 0; i < 6; i++)
            s->turn_ends[i] = (int)((int64_t)n * (i + 1) / 6);
    }
    return 0;
}

int parity_session_open(struct parity_session **out, const struct model *m, const struct mode *mode,
                        const int32_t *tokens, int n, const struct parity_config *cfg,
                        int n_threads, int with_taps, struct gate_err *err)
{
    *out = NULL;
    int rc;
    if ((rc = parity_config_check(cfg, err)))
        return rc;
    struct parity_session *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(err, ERR_ENV, "out of memory");
    s->m = m;
    s->mode = *mode;
    s->cfg = *cfg;
    s->with_taps = with_taps;
    const size_t V = m->hp.n_vocab;
    if ((rc = build_sequence(s, tokens, n, err)))
        goto fail;
    s->judge_logits = malloc((size_t)s->n * V * sizeof(float));
    s->subj_logits = malloc((size_t)s->n * V * sizeof(float));
    if (!s->judge_logits || !s->subj_logits) {
        rc = err_set(err, ERR_ENV, "out of memory for logits (%d x %zu)", s->n, V);
        goto fail;
    }
    if (with_taps && ((rc = taps_alloc(&s->judge_taps, &m->hp, s->n, err)) ||
                      (rc = taps_alloc(&s->subj_taps, &m->hp, s->n, err))))
        goto fail;
    /* the judge: ref, no faults, whole sequence in one call */
    if ((rc = mode_open_judge(&s->judge, m, s->n, n_threads, err)) ||
        (rc = mode_judge(s->judge, s->tokens, s->n, s->judge_logits,
                         with_taps ? &s->judge_taps : NULL, err)))
        goto fail;
    if ((rc = mode_open(&s->subject, mode, m, s->n, n_threads, NULL, err)))
        goto fail;
    /* a subject without taps (an external engine) leaves its tap arrays zero: routing gaps,
     * localization and the witness must not read them as its routing */
    s->subj_taps_ok = with_taps && backend_records_taps(s->subject);
    *out = s;
    return 0;
fail:
    parity_session_close(s);
    return rc;
}

static double cos_f(const float *a, const float *b, size_t n)
{
    double d = 0, na = 0, nb = 0;
    for (size_t i = 0; i < n; i++) {
        d += (double)a[i] * b[i];
        na += (double)a[i] * a[i];
        nb += (double)b[i] * b[i];
    }
    if (!isfinite(d) || !isfinite(na) || !isfinite(nb))
        return NAN;
    return (na == 0 && nb == 0) ? 1.0 : (na == 0 || nb == 0) ? 0.0 : d / sqrt(na * nb);
}

static int same_set(const int32_t *a, const int32_t *b, int k)
{
    for (int i = 0; i < k; i++) {
        int found = 0;
        for (int j = 0; j < k; j++)
            found |= a[i] == b[j];
        if (!found)
            return 0;
    }
    return 1;
}

/* r->route_gap from the last run's taps: per position, the judge's router gap at the first layer
 * whose expert set differs (NAN where all layers agree). */
static int route_gaps(struct parity_session *s, struct parity_result *r, struct gate_err *err)
{
    const struct model_hparams *hp = &s->m->hp;
    const int L = (int)hp->n_layer, n = s->n, k = (int)hp->n_expert_used;
    const struct backend_taps *J = &s->judge_taps, *S = &s->subj_taps;
    if (!(r->route_gap = malloc((size_t)n * sizeof *r->route_gap)))
        return err_set(err, ERR_ENV, "out of memory");
    for (int p = 0; p < n; p++) {
        r->route_gap[p] = NAN;
        for (int l = 0; l < L; l++) {
            const size_t i = (size_t)l * (size_t)n + (size_t)p;
            if (!same_set(J->experts + i * (size_t)k, S->experts + i * (size_t)k, k)) {
                r->route_gap[p] = (double)J->router_kth[i] - J->router_k1th[i];
                break;
            }
        }
    }
    return 0;
}

/* Fill r->layers from the judge's and the subject's taps of the last run. */
static int localize(struct parity_session *s, struct parity_result *r, struct gate_err *err)
{
    const struct model_hparams *hp = &s->m->hp;
    const int L = (int)hp->n_layer, n = s->n, k = (int)hp->n_expert_used;
    const size_t E = hp->n_embd;
    r->layers = calloc((size_t)L, sizeof *r->layers);
    if (!r->layers)
        return err_set(err, ERR_ENV, "out of memory");
    r->n_layer = L;
    r->is_moe = hp->n_expert > 0;
    const int at = r->first_fail_pos >= 0 ? r->first_fail_pos
                   : r->worst_pos >= 0    ? r->worst_pos
                                          : 0;
    const struct backend_taps *J = &s->judge_taps, *S = &s->subj_taps;
    for (int l = 0; l < L; l++) {
        struct parity_layer *x = &r->layers[l];
        x->first_diff_pos = -1;
        x->hidden_cosine_min = INFINITY;
        for (int p = 0; p < n; p++) {
            const size_t i = (size_t)l * (size_t)n + (size_t)p;
            double c = cos_f(J->hidden + i * E, S->hidden + i * E, E);
            if (p == at)
                x->hidden_cosine = c;
            if (!(c >= x->hidden_cosine_min)) { /* NaN counts as the worst */
                x->hidden_cosine_min = c;
                x->hidden_cosine_min_pos = p;
            }
            if (!r->is_moe)
                continue;
            if (same_set(J->experts + i * (size_t)k, S->experts + i * (size_t)k, k)) {
                x->n_same++;
                continue;
            }
            const double gap = (double)J->router_kth[i] - J->router_k1th[i];
            if (x->n_diff++ == 0) {
                x->first_diff_pos = p;
                x->min_gap = x->max_gap = gap;
            }
            if (gap < x->min_gap)
                x->min_gap = gap;
            if (gap > x->max_gap)
                x->max_gap = gap;
            x->n_diff_near_tie += gap < PARITY_ROUTE_TIE;
        }
        if (r->first_bad_layer < 0 && !(x->hidden_cosine >= r->cfg.min_cosine))
            r->first_bad_layer = l;
    }
    r->localized = 1;
    return 0;
}

int parity_session_run(struct parity_session *s, const struct fault_set *faults,
                       const struct parity_config *cfg, int localize_on_fail,
                       struct parity_result *out, struct gate_err *err)
{
    const struct model_hparams *hp = &s->m->hp;
    int rc;
    memset(out, 0, sizeof *out);
    if (!cfg)
        cfg = &s->cfg;
    if ((rc = fault_validate(faults, (int)hp->n_layer, hp->n_expert > 0, (int)hp->n_expert_used,
                             err)))
        return rc;
    for (int i = 0; faults && i < faults->n; i++)
        if (faults->f[i].pos_lo >= s->n) {
            char name[96];
            fault_format(&faults->f[i], name, sizeof name);
            return err_set(err, ERR_INPUT,
                           "fault '%s': position scope starts at %d but the"
                           " sequence has %d positions (0-%d)",
                           name, faults->f[i].pos_lo, s->n, s->n - 1);
        }
    backend_set_faults(s->subject, faults); /* copied; cleared again below */
    rc = mode_run_taps(s->subject, s->mode.path, s->tokens, s->n, s->turn_ends, s->n_turns,
                       s->subj_logits, s->with_taps ? &s->subj_taps : NULL, err);
    backend_set_faults(s->subject, NULL);
    if (rc)
        return rc;
    struct parity_config c = *cfg;
    if ((rc = parity_judge(s->judge_logits, s->subj_logits, s->n, (int)hp->n_vocab, &c, out))) {
        err_set(err, rc, "%s", out->reason);
        return rc;
    }
    if (s->subj_taps_ok && hp->n_expert > 0 && (rc = route_gaps(s, out, err)))
        return rc;
    mode_format(&s->mode, out->mode, sizeof out->mode);
    out->chat_fallback = s->chat_fallback;
    for (int i = 0; faults && i < faults->n && i < FAULT_MAX; i++)
        fault_format(&faults->f[i], out->faults[out->n_faults++], sizeof out->faults[0]);
    if (!out->pass && localize_on_fail && s->subj_taps_ok && (rc = localize(s, out, err)))
        return rc;
    return 0;
}

static int taps_differ_route(const struct backend_taps *a, const struct backend_taps *b, size_t i,
                             int k)
{
    for (int j = 0; j < k; j++)
        if (a->experts[i * (size_t)k + (size_t)j] != b->experts[i * (size_t)k + (size_t)j] ||
            memcmp(&a->expert_w[i * (size_t)k + (size_t)j], &b->expert_w[i * (size_t)k + (size_t)j],
                   sizeof(float)))
            return 1;
    return 0;
}

int parity_session_witness(struct parity_session *s, enum fault_kind kind, struct parity_witness *w,
                           struct gate_err *err)
{
    const struct model_hparams *hp = &s->m->hp;
    memset(w, 0, sizeof *w);
    w->layer = w->pos = -1;
    if (!s->with_taps)
        return err_set(err, ERR_INPUT, "the witness needs a session opened with taps");
    int rc;
    const size_t V = hp->n_vocab;
    if (!s->have_clean) {
        /* one clean run of the subject (with taps where it records them), kept aside; the
         * faulted run's logits and taps stay */
        if (!(s->clean_logits = malloc((size_t)s->n * V * sizeof(float))))
            return err_set(err, ERR_ENV, "out of memory for the clean logits (%d x %zu)", s->n, V);
        if ((rc = taps_alloc(&s->clean_taps, hp, s->n, err)))
            return rc;
        backend_set_faults(s->subject, NULL);
        rc = mode_run_taps(s->subject, s->mode.path, s->tokens, s->n, s->turn_ends, s->n_turns,
                           s->clean_logits, &s->clean_taps, err);
        if (rc)
            return rc;
        s->have_clean = 1;
    }
    /* one pass over the logits: how many positions moved, and the first one */
    int first_moved = -1;
    for (int p = 0; p < s->n; p++)
        if (memcmp(s->clean_logits + (size_t)p * V, s->subj_logits + (size_t)p * V,
                   V * sizeof(float))) {
            w->n_logit_diff++;
            if (first_moved < 0)
                first_moved = p;
        }
    if (!s->subj_taps_ok) {
        /* no taps: the only evidence a fault acted is that the logits moved */
        w->tapless = 1;
        if (first_moved >= 0) {
            w->fired = 1;
            w->pos = first_moved;
            snprintf(w->what, sizeof w->what, "%s", "logits (the engine reports no taps)");
        }
        return 0;
    }
    const int L = (int)hp->n_layer, n = s->n, k = (int)hp->n_expert_used;
    const size_t E = hp->n_embd;
    const int routing = fault_is_routing(kind) && hp->n_expert > 0;
    for (int l = 0; l < L; l++)
        for (int p = 0; p < n; p++) {
            const size_t i = (size_t)l * (size_t)n + (size_t)p;
            int rd = routing && taps_differ_route(&s->clean_taps, &s->subj_taps, i, k);
            int hd = memcmp(s->clean_taps.hidden + i * E, s->subj_taps.hidden + i * E,
                            E * sizeof(float)) != 0;
            w->n_route_diff += rd;
            w->n_hidden_diff += hd;
            if (!w->fired && (routing ? rd : hd)) {
                w->fired = 1;
                w->layer = l;
                w->pos = p;
                snprintf(w->what, sizeof w->what, "%s",
                         routing ? "chosen experts / weights" : "hidden state after the layer");
            }
        }
    return 0;
}

/* ---- one-shot ------------------------------------------------------------------------------- */

int parity_run(const struct model *m, const struct mode *mode, const struct fault_set *faults,
               const int32_t *tokens, int n, const struct parity_config *cfg, int n_threads,
               struct parity_result *out, struct gate_err *err)
{
    struct parity_session *s = NULL;
    memset(out, 0, sizeof *out);
    const struct model_hparams *hp = &m->hp;
    int rc =
        fault_validate(faults, (int)hp->n_layer, hp->n_expert > 0, (int)hp->n_expert_used, err);
    if (!rc)
        rc = parity_session_open(&s, m, mode, tokens, n, cfg, n_threads, 1, err);
    if (!rc)
        rc = parity_session_run(s, faults, cfg, 1, out, err);
    parity_session_close(s);
    return rc;
}
