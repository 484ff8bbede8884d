/* parity.c — the parity oracle (see parity.h): per-position math, verdict, localization, and
 * the sessions that run judge and subject.
 *
 * Invariants: every number is computed in double from float logits; a NaN or Inf anywhere
 * classifies its position NONFINITE before any comparison is made, so no NaN reaches a `<` that
 * would quietly evaluate false; the judge never sees a fault (its backend is opened without a
 * fault set). Start reading: judge_pos(), then parity_judge().
 */
#include "oracles/parity.h"
#include "base/detmath.h"
#include "engine/quant.h"
#include "engine/ref_ops.h"
#include "oracles/distribution.h"
#include "oracles/prose.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (c->span < 0 || (c->span > 0 && c->span < c->positions))
        return err_set(err, ERR_INPUT,
                       "parity span %d: it must be 0 or at least positions (%d): the judged"
                       " positions are sampled from it",
                       c->span, c->positions);
    if (!(c->max_rel_l2 >= 0.0))
        return err_set(err, ERR_INPUT, "parity max_rel_l2 %g must be >= 0", c->max_rel_l2);
    if (!(c->max_forced >= 0.0))
        return err_set(err, ERR_INPUT, "parity max_forced %g must be >= 0", c->max_forced);
    if (!(c->max_mean_rel_l2 >= 0.0))
        return err_set(err, ERR_INPUT, "parity max_mean_rel_l2 %g must be >= 0",
                       c->max_mean_rel_l2);
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
        p->cosine = p->kld = p->max_abs_diff = p->ref_gap = p->rel_l2 = NAN;
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
    /* relative L2 of the centred logits: softmax ignores a common shift, so the means go; what
     * stays sees a uniform scale (t = s r gives |s - 1|), which the cosine cannot */
    double mr = 0, mt = 0;
    for (int i = 0; i < V; i++)
        mr += r[i], mt += t[i];
    mr /= V, mt /= V;
    double dd = 0, rr = 0;
    for (int i = 0; i < V; i++) {
        const double a = (double)r[i] - mr, d = ((double)t[i] - mt) - a;
        dd += d * d;
        rr += a * a;
    }
    p->rel_l2 = rr > 0 ? sqrt(dd / rr) : dd > 0 ? INFINITY : 0.0;
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

/* ---- the rule (parity.h: written once) ------------------------------------------------------ */

static void route_none(struct parity_route_replay *r)
{
    memset(r, 0, sizeof *r);
    r->refused_layer = r->refused_pos = -1;
    r->refused_deficit = r->refused_subject_gap = NAN;
}

static int pos_nonfinite(const struct parity_pos *p)
{
    return p->ref_top < 0 || p->test_top < 0 || !isfinite(p->cosine) || !isfinite(p->kld) ||
           isnan(p->rel_l2);
}

void parity_summarize(const struct parity_pos *pos, int n, const struct parity_config *cfg,
                      struct parity_summary *s)
{
    memset(s, 0, sizeof *s);
    route_none(&s->route);
    s->n_pos = n;
    s->first_bad = s->argmin_cosine = s->argmax_kld = s->argmax_rel_l2 = -1;
    s->min_cosine = INFINITY;
    double sum_kld = 0, sum_rel_l2 = 0;
    int n_judged = 0, poisoned = 0;
    for (int i = 0; i < n; i++) {
        const struct parity_pos *p = &pos[i];
        if (pos_nonfinite(p)) {
            s->n_nonfinite++;
            poisoned = 1;
            if (s->first_bad < 0)
                s->first_bad = p->position;
            continue;
        }
        n_judged++;
        if (n_judged == 1 || p->cosine < s->min_cosine)
            s->min_cosine = p->cosine, s->argmin_cosine = p->position;
        if (n_judged == 1 || p->kld > s->max_kld)
            s->max_kld = p->kld, s->argmax_kld = p->position;
        if (n_judged == 1 || p->rel_l2 > s->max_rel_l2)
            s->max_rel_l2 = p->rel_l2, s->argmax_rel_l2 = p->position;
        sum_kld += p->kld;
        sum_rel_l2 += p->rel_l2;
        if (p->ref_top == p->test_top) {
            s->n_match++;
        } else if (isfinite(p->ref_gap) && p->ref_gap < cfg->near_tie) {
            s->n_tie_flip++;
        } else {
            s->n_wrong++;
            if (s->first_bad < 0)
                s->first_bad = p->position;
        }
    }
    s->mean_kld = n_judged ? sum_kld / n_judged : NAN;
    s->mean_rel_l2 = n_judged ? sum_rel_l2 / n_judged : NAN;
    if (!n_judged)
        s->min_cosine = s->max_kld = s->max_rel_l2 = NAN;
    if (poisoned) /* a non-finite position poisons every statistic */
        s->min_cosine = s->mean_kld = s->max_kld = s->max_rel_l2 = s->mean_rel_l2 = NAN;
}

int parity_verdict(const struct parity_config *cfg, const struct parity_summary *s, json_t *checks,
                   char *why, size_t n)
{
    json_t *own = checks ? NULL : json_array(); /* gate_check_* need an array */
    json_t *c = checks ? checks : own;
    char first[320] = ""; /* the longest sentence (a refused route pair) whole */
    const size_t fn = sizeof first;
    if (!gate_check_num(c, "positions", s->n_pos, ">=", cfg->positions))
        gate_say_first(first, fn,
                       "%d positions judged, fewer than the %d asked for (too few positions)",
                       s->n_pos, cfg->positions);
    if (!gate_check_num(c, "nonfinite_positions", s->n_nonfinite, "<=", 0))
        gate_say_first(first, fn, "non-finite logits at position %d (%d positions)", s->first_bad,
                       s->n_nonfinite);
    /* an expert set that differs beyond the router near tie: the subject routed where the
     * judge's router clearly would not (route_tie 0: any differing set) */
    const struct parity_route_replay *rr = &s->route;
    if (!gate_check_num(c, "route_refused", rr->n_refused, "<=", 0)) {
        /* the first refused pair's judge deficit is measured only where the subject's own
         * router saw a near tie (its set was offered to the judge); elsewhere the message says
         * why there is none */
        char deficit[128];
        if (isnan(rr->refused_deficit))
            snprintf(deficit, sizeof deficit,
                     "no judge deficit: the subject's own gap is no near tie, so its set was not"
                     " offered to the judge");
        else
            snprintf(deficit, sizeof deficit, "judge deficit %.3g", rr->refused_deficit);
        gate_say_first(first, fn,
                       "%d (layer, position) pairs route to another expert set than the judge"
                       " beyond the router near tie %g, first layer %d position %d (%s, subject"
                       " gap %.3g)",
                       rr->n_refused, cfg->route_tie, rr->refused_layer, rr->refused_pos, deficit,
                       rr->refused_subject_gap);
    }
    if (!gate_check_num(c, "wrong_positions", s->n_wrong, "<=", 0))
        gate_say_first(
            first, fn,
            "%d WRONG argmax positions, first at position %d (judge's gap >= near tie %g)",
            s->n_wrong, s->first_bad, cfg->near_tie);
    if (!gate_check_num(c, "min_cosine", s->min_cosine, ">=", cfg->min_cosine))
        gate_say_first(first, fn, "min cosine %.6g at position %d < %g", s->min_cosine,
                       s->argmin_cosine, cfg->min_cosine);
    if (!gate_check_num(c, "max_kld", s->max_kld, "<=", cfg->max_kld))
        gate_say_first(first, fn, "max KL %.4g at position %d > %g", s->max_kld, s->argmax_kld,
                       cfg->max_kld);
    if (!gate_check_num(c, "mean_kld", s->mean_kld, "<=", cfg->max_mean_kld))
        gate_say_first(first, fn, "mean KL %.4g > %g", s->mean_kld, cfg->max_mean_kld);
    if (!isinf(cfg->max_rel_l2) &&
        !gate_check_num(c, "max_rel_l2", s->max_rel_l2, "<=", cfg->max_rel_l2))
        gate_say_first(first, fn,
                       "max rel-L2 %.4g at position %d > %g (a scale error cosine cannot see)",
                       s->max_rel_l2, s->argmax_rel_l2, cfg->max_rel_l2);
    if (!isinf(cfg->max_mean_rel_l2) &&
        !gate_check_num(c, "mean_rel_l2", s->mean_rel_l2, "<=", cfg->max_mean_rel_l2))
        gate_say_first(first, fn, "mean rel-L2 %.4g > %g (a small error at every position)",
                       s->mean_rel_l2, cfg->max_mean_rel_l2);
    if (s->kv_round.measured &&
        !gate_check_num(c, "kv_f16_rounding", s->kv_round.ratio, "<=", PARITY_KV_ROUND_MAX))
        gate_say_first(
            first, fn,
            "the F16 KV cache is %.3g times as far from a judge rounding its cache to nearest F16"
            " as that judge is from the F32 one (median of %d positions, at most %g): the cache"
            " does not round as it claims",
            s->kv_round.ratio, s->kv_round.n, PARITY_KV_ROUND_MAX);
    const struct parity_forced *fo = &s->forced;
    const int fj = fo->measured && cfg->max_forced != INFINITY; /* only +Inf turns it off */
    if (fj && !gate_check_num(c, "forced_layers", fo->worst, "<=", cfg->max_forced))
        gate_say_first(first, fn,
                       "layer %d of the subject, run on its own input, is %.3g off what the layer"
                       " adds (forced layers, at most %g): an error in that layer, not noise"
                       " carried from the layers before",
                       fo->worst_layer, fo->worst, cfg->max_forced);
    const double row_max = cfg->max_forced * PARITY_FORCED_ROW_SHARE;
    if (fj && !gate_check_num(c, "forced_row", fo->row, "<=", row_max)) {
        char at[40] = "";
        if (fo->row_pos >= 0)
            snprintf(at, sizeof at, " at position %d", fo->row_pos);
        gate_say_first(first, fn,
                       "layer %d of the subject%s, run on its own input, is %.3g off what the"
                       " layer adds there (one row, at most %g = %g x max_forced): an error at"
                       " that position, diluted in the layer's sum over the positions",
                       fo->row_layer, at, fo->row, row_max, PARITY_FORCED_ROW_SHARE);
    }
    const double head_max = cfg->max_forced * PARITY_FORCED_HEAD_SHARE;
    if (fj && !gate_check_num(c, "forced_head", fo->head, "<=", head_max))
        gate_say_first(first, fn,
                       "the output head on the subject's own last hidden state is %.3g off the"
                       " twin's (forced head, at most %g = %g x max_forced)",
                       fo->head, head_max, PARITY_FORCED_HEAD_SHARE);
    json_decref(own);
    const int pass = first[0] == '\0';
    if (why && n) {
        char tail[400];
        snprintf(tail, sizeof tail,
                 "%d positions: min cosine %.6g, mean KL %.3g, max KL %.3g, max rel-L2 %.3g"
                 " (mean %.3g);"
                 " %d/%d argmax match, %d tie flip%s, %d wrong, %d non-finite",
                 s->n_pos, s->min_cosine, s->mean_kld, s->max_kld, s->max_rel_l2, s->mean_rel_l2,
                 s->n_match, s->n_pos, s->n_tie_flip, s->n_tie_flip == 1 ? "" : "s", s->n_wrong,
                 s->n_nonfinite);
        if (rr->replayed) {
            const size_t l = strlen(tail);
            snprintf(tail + l, sizeof tail - l,
                     "; judged against the judge replayed with the subject's expert set at %d"
                     " router near tie%s (%d position%s)",
                     rr->n_forced, rr->n_forced == 1 ? "" : "s", rr->n_forced_pos,
                     rr->n_forced_pos == 1 ? "" : "s");
        }
        if (pass)
            snprintf(why, n, "PASS: %s", tail);
        else
            snprintf(why, n, "FAIL: %s; %s", first, tail);
    }
    return pass;
}

int parity_rejected(const struct parity_config *cfg, const struct parity_summary *s)
{
    return !parity_verdict(cfg, s, NULL, NULL, 0);
}

/* ---- the rule on recorded numbers ------------------------------------------------------------ */

int parity_settings_read(const json_t *settings, struct parity_config *cfg, char *why, size_t n)
{
    static const struct {
        const char *key;
        size_t off;
    } K[] = {
        {"min_cosine", offsetof(struct parity_config, min_cosine)},
        {"max_mean_kld", offsetof(struct parity_config, max_mean_kld)},
        {"max_kld", offsetof(struct parity_config, max_kld)},
        {"near_tie", offsetof(struct parity_config, near_tie)},
    };
    memset(cfg, 0, sizeof *cfg);
    double v;
    if (gate_metric_num(settings, "positions", &v)) {
        gate_say_first(why, n, "setting 'positions' is missing or not a number");
        return -1;
    }
    cfg->positions = (int)v;
    for (size_t i = 0; i < sizeof K / sizeof K[0]; i++)
        if (gate_metric_num(settings, K[i].key, (double *)((char *)cfg + K[i].off))) {
            gate_say_first(why, n, "setting '%s' is missing or not a number", K[i].key);
            return -1;
        }
    /* absent: no route ties (the strictest); no rel-L2 bound (a receipt from before the key) */
    if (gate_metric_num(settings, "route_tie", &cfg->route_tie))
        cfg->route_tie = 0;
    if (gate_metric_num(settings, "max_rel_l2", &cfg->max_rel_l2))
        cfg->max_rel_l2 = INFINITY;
    if (gate_metric_num(settings, "max_mean_rel_l2", &cfg->max_mean_rel_l2))
        cfg->max_mean_rel_l2 = INFINITY;
    /* absent: the default bound (never "not judged": only an explicit Inf turns it off) */
    if (gate_metric_num(settings, "max_forced", &cfg->max_forced))
        cfg->max_forced = PARITY_FORCED_MAX;
    return 0;
}

/* A count from a receipt: a whole number in [0, 1e9] (not "Inf", not 0.5, not 1e10 cast to int) */
static int count_ok(double v)
{
    return v >= 0 && v <= 1e9 && v == floor(v);
}

/* A recorded route_replay object into *r (absent: nothing replayed, nothing refused); -1 when
 * it is there but malformed. */
static int route_replay_read(const json_t *o, struct parity_route_replay *r)
{
    route_none(r);
    if (!o)
        return 0;
    double v[4];
    static const char *const K[] = {"forced", "forced_positions", "refused", "replayed"};
    for (int i = 0; i < 4; i++)
        if (gate_metric_num(o, K[i], &v[i]) || !count_ok(v[i]))
            return -1;
    r->n_forced = (int)v[0], r->n_forced_pos = (int)v[1], r->n_refused = (int)v[2];
    r->replayed = v[3] != 0;
    gate_metric_num(o, "max_deficit", &r->max_deficit);
    gate_metric_num(o, "max_subject_gap", &r->max_subject_gap);
    const json_t *f = json_object_get(o, "first_refused");
    if (f) {
        double l = -1, p = -1;
        gate_metric_num(f, "layer", &l);
        gate_metric_num(f, "position", &p);
        r->refused_layer = (int)l, r->refused_pos = (int)p;
        gate_metric_num(f, "deficit", &r->refused_deficit);
        gate_metric_num(f, "subject_gap", &r->refused_subject_gap);
    }
    return 0;
}

/* A recorded kv_f16_rounding object into *k (absent: not measured); -1 when malformed: a
 * "ratio" that is not a finite number >= 0, or "positions" that is not a count >= 1. */
static int kv_round_read(const json_t *o, struct parity_kv_round *k)
{
    memset(k, 0, sizeof *k);
    if (!o || !json_object_get(o, "ratio"))
        return o && !json_is_object(o) ? -1 : 0;
    double n = 0;
    if (gate_metric_num(o, "ratio", &k->ratio) || !(k->ratio >= 0) || isinf(k->ratio) ||
        gate_metric_num(o, "positions", &n) || !count_ok(n) || n < 1)
        return -1;
    k->n = (int)n;
    k->measured = 1;
    gate_metric_num(o, "p90", &k->p90);
    return 0;
}

/* A recorded forced_layers object into *f (absent or "measured": false: not measured); -1 when
 * malformed: a measured record whose worst, row or head is not a number >= 0 (NaN, recorded for a
 * non-finite subject, is kept: it FAILs), or whose layer or position count is not >= 1. */
static int forced_read(const json_t *o, struct parity_forced *f)
{
    memset(f, 0, sizeof *f);
    if (!o)
        return 0;
    if (!json_is_object(o))
        return -1;
    if (!json_object_get(o, "worst"))
        return json_is_false(json_object_get(o, "measured")) ? 0 : -1;
    double nl = 0, np = 0, wl = -1, rl = -1, rp = -1;
    if (gate_metric_num(o, "worst", &f->worst) || f->worst < 0 ||
        gate_metric_num(o, "row", &f->row) || f->row < 0 || gate_metric_num(o, "head", &f->head) ||
        f->head < 0 || gate_metric_num(o, "layers", &nl) || !count_ok(nl) || nl < 1 ||
        gate_metric_num(o, "positions", &np) || !count_ok(np) || np < 1)
        return -1;
    /* the worst row is at least its layer's figure (a maximum over a mean of squares): a
     * record claiming less was not measured so */
    if (f->row < f->worst * (1 - 1e-9))
        return -1;
    gate_metric_num(o, "worst_layer", &wl);
    gate_metric_num(o, "row_layer", &rl);
    gate_metric_num(o, "row_position", &rp);
    f->measured = 1;
    f->n_layer = (int)nl;
    f->n_pos = (int)np;
    f->worst_layer = count_ok(wl) ? (int)wl : -1;
    f->row_layer = count_ok(rl) ? (int)rl : -1;
    f->row_pos = count_ok(rp) ? (int)rp : -1;
    return 0;
}

int parity_metrics_summary(const json_t *metrics, const struct parity_config *cfg,
                           struct parity_summary *s)
{
    memset(s, 0, sizeof *s);
    const json_t *pp = json_object_get(metrics, "per_position");
    const json_t *cos = json_object_get(pp, "cosine"), *kld = json_object_get(pp, "kld");
    const json_t *gap = json_object_get(pp, "ref_gap"), *rt = json_object_get(pp, "ref_top");
    const json_t *tt = json_object_get(pp, "test_top"), *rl = json_object_get(pp, "rel_l2");
    const json_t *at = json_object_get(pp, "position"); /* absent: row i is position i */
    const size_t np = json_array_size(cos);
    if (at && json_array_size(at) != np)
        return -1;
    if (!json_is_array(cos) || json_array_size(kld) != np || json_array_size(gap) != np ||
        json_array_size(rt) != np || json_array_size(tt) != np || (rl && json_array_size(rl) != np))
        return -1;
    if (!rl && (!isinf(cfg->max_rel_l2) || !isinf(cfg->max_mean_rel_l2)))
        return -1; /* the bound is judged but the numbers were not recorded */
    struct parity_pos *pos = calloc(np ? np : 1, sizeof *pos);
    if (!pos)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < np && !rc; i++) {
        struct parity_pos *p = &pos[i];
        p->ref_gap = NAN;
        p->rel_l2 = 0;
        p->position = at ? (int)json_integer_value(json_array_get(at, i)) : (int)i;
        if (gate_json_num(json_array_get(cos, i), &p->cosine) ||
            gate_json_num(json_array_get(kld, i), &p->kld) ||
            (rl && gate_json_num(json_array_get(rl, i), &p->rel_l2))) {
            rc = -1;
            break;
        }
        gate_json_num(json_array_get(gap, i), &p->ref_gap);
        const json_t *a = json_array_get(rt, i), *b = json_array_get(tt, i);
        p->ref_top = json_is_integer(a) ? (int)json_integer_value(a) : -1;
        p->test_top = json_is_integer(b) ? (int)json_integer_value(b) : -1;
    }
    if (!rc)
        parity_summarize(pos, (int)np, cfg, s);
    free(pos);
    if (!rc)
        rc = route_replay_read(json_object_get(metrics, "route_replay"), &s->route);
    if (!rc)
        rc = kv_round_read(json_object_get(metrics, "kv_f16_rounding"), &s->kv_round);
    if (!rc)
        rc = forced_read(json_object_get(metrics, "forced_layers"), &s->forced);
    /* positions judged against a replay without the replay's account: not "nothing refused" */
    if (!rc && json_object_get(pp, "route_deficit") && !json_object_get(metrics, "route_replay"))
        rc = -1;
    return rc;
}

int parity_metrics_rejected(const json_t *settings, const json_t *metrics, char *why, size_t n)
{
    struct parity_config cfg;
    struct parity_summary s;
    if (parity_settings_read(settings, &cfg, why, n))
        return -1;
    if (json_object_get(metrics, "per_position")) {
        if (parity_metrics_summary(metrics, &cfg, &s)) {
            gate_say_first(why, n, "parity metrics lack per_position arrays of one length");
            return -1;
        }
        return parity_rejected(&cfg, &s);
    }
    /* a sweep point: the summary numbers only (judged at the positions it recorded) */
    memset(&s, 0, sizeof s);
    double v[5];
    static const char *const keys[] = {"min_cosine", "mean_kld", "max_kld", "wrong_positions",
                                       "nonfinite_positions"};
    for (int i = 0; i < 5; i++)
        if (gate_metric_num(metrics, keys[i], &v[i])) {
            gate_say_first(why, n, "parity numbers lack '%s'", keys[i]);
            return -1;
        }
    s.min_cosine = v[0], s.mean_kld = v[1], s.max_kld = v[2];
    s.n_wrong = (int)v[3], s.n_nonfinite = (int)v[4];
    s.max_rel_l2 = s.mean_rel_l2 = 0;
    if (!isinf(cfg.max_rel_l2) && gate_metric_num(metrics, "max_rel_l2", &s.max_rel_l2)) {
        gate_say_first(why, n, "parity numbers lack 'max_rel_l2'");
        return -1;
    }
    if (!isinf(cfg.max_mean_rel_l2) && gate_metric_num(metrics, "mean_rel_l2", &s.mean_rel_l2)) {
        gate_say_first(why, n, "parity numbers lack 'mean_rel_l2'");
        return -1;
    }
    s.n_pos = cfg.positions; /* a sweep point judges its session's positions */
    route_none(&s.route);
    if (json_object_get(metrics, "route_refused") &&
        (gate_metric_num(metrics, "route_refused", &v[0]) || !count_ok(v[0]))) {
        gate_say_first(why, n, "parity numbers' 'route_refused' is not a count");
        return -1;
    }
    s.route.n_refused = json_object_get(metrics, "route_refused") ? (int)v[0] : 0;
    /* the forced layers, when the point measured them (a probe of a subject with taps) */
    if (json_object_get(metrics, "forced_worst") || json_object_get(metrics, "forced_row") ||
        json_object_get(metrics, "forced_head")) {
        if (gate_metric_num(metrics, "forced_worst", &s.forced.worst) ||
            gate_metric_num(metrics, "forced_row", &s.forced.row) ||
            gate_metric_num(metrics, "forced_head", &s.forced.head) || s.forced.worst < 0 ||
            s.forced.row < 0 || s.forced.head < 0) {
            gate_say_first(why, n,
                           "parity numbers' forced_worst / forced_row / forced_head are not"
                           " numbers >= 0");
            return -1;
        }
        s.forced.measured = 1;
        s.forced.row_layer = s.forced.row_pos = -1;
    }
    if (!(v[3] == 0 && v[4] == 0) && s.n_wrong == 0 && s.n_nonfinite == 0)
        s.n_nonfinite = 1; /* NaN counts: never a silent pass */
    return parity_rejected(&cfg, &s);
}

enum gate_verdict parity_gate_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                                    char *why, size_t n)
{
    struct parity_config cfg;
    struct parity_summary s;
    if (parity_settings_read(settings, &cfg, why, n)) {
        gate_check_bool(checks, "settings complete", 0);
        return GATE_FAIL;
    }
    if (parity_metrics_summary(metrics, &cfg, &s)) {
        gate_check_bool(checks, "per-position metrics recorded", 0);
        gate_say_first(
            why, n,
            "parity metrics lack per_position cosine/kld/ref_gap/ref_top/test_top%s arrays of"
            " one length, or a recorded route_replay, kv_f16_rounding or forced_layers is"
            " malformed",
            isinf(cfg.max_rel_l2) && isinf(cfg.max_mean_rel_l2) ? "" : "/rel_l2");
        return GATE_FAIL;
    }
    /* an F16-KV cell records whether its cache's rounding was judged (and why not) */
    const char *kv = json_string_value(json_object_get(settings, "kv"));
    if (kv && !strcmp(kv, "f16") &&
        !gate_check_bool(checks, "kv_f16_rounding recorded",
                         json_is_object(json_object_get(metrics, "kv_f16_rounding")))) {
        gate_say_first(why, n,
                       "an F16-KV cell's parity metrics do not say whether its cache's rounding was"
                       " judged (kv_f16_rounding)");
        return GATE_FAIL;
    }
    /* a subject whose layers the twin predicts (backend_noise.rounding: gate's own backends)
     * records its forced layers, measured at every judged position (a sampled span's too: its
     * run keeps every position's hidden state). The backend is what ran (metrics.ran, which the
     * cell's common checks hold to the cell's mode), else the recorded mode */
    const char *rb = json_string_value(json_object_get(json_object_get(metrics, "ran"), "backend"));
    const char *md = json_string_value(json_object_get(metrics, "mode"));
    char be[16] = "";
    if (rb || md)
        snprintf(be, sizeof be, "%.*s", (int)strcspn(rb ? rb : md, "."), rb ? rb : md);
    const struct backend_noise *bz = be[0] ? backend_noise_of(be) : NULL;
    if (bz && bz->rounding) {
        const json_t *fl = json_object_get(metrics, "forced_layers");
        double np = s.n_pos, fp = 0;
        gate_metric_num(metrics, "n_pos", &np);
        if (!gate_check_bool(checks, "forced_layers recorded", json_is_object(fl))) {
            gate_say_first(why, n,
                           "the parity metrics of a %s subject do not say whether its layers were"
                           " judged on its own inputs (forced_layers)",
                           be);
            return GATE_FAIL;
        }
        if (!gate_check_bool(checks, "forced_layers measured",
                             s.forced.measured && !gate_metric_num(fl, "positions", &fp) &&
                                 fp == np)) {
            gate_say_first(why, n,
                           "the forced layers of the %s subject were not measured at its %.0f"
                           " judged positions (forced_layers)",
                           be, np);
            return GATE_FAIL;
        }
    }
    char line[512] = "";
    const int pass = parity_verdict(&cfg, &s, checks, line, sizeof line);
    /* the gate's reason is the rule's line without its verdict word (the row carries it) */
    gate_say_first(why, n, "%s", line + (pass ? 6 : 6));
    return pass ? GATE_PASS : GATE_FAIL;
}

/* ---- in memory ------------------------------------------------------------------------------- */

/* Judge with the route-tie replay's account (NULL: none): the one path every in-memory verdict
 * takes. */
static int judge_routes(const float *ref, const float *test, int n_pos, int n_vocab,
                        const struct parity_config *cfg, const struct parity_route_replay *route,
                        const struct parity_kv_round *kv, const struct parity_forced *forced,
                        const int *positions, struct parity_result *out)
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
    if (route)
        out->route = *route;
    else
        route_none(&out->route);
    struct parity_config c = *cfg;
    c.positions = PARITY_MIN_POSITIONS; /* the judged length is the rule's to check */
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
        snprintf(out->reason, sizeof out->reason, "FAIL: out of memory for %d positions", n_pos);
        rc = ERR_ENV;
        goto done;
    }
    for (int p = 0; p < n_pos; p++) {
        const float *r = ref + (size_t)p * (size_t)n_vocab, *t = test + (size_t)p * (size_t)n_vocab;
        struct parity_pos *pp = &out->pos[p];
        judge_pos(r, t, n_vocab, cfg->near_tie, pp);
        pp->position = positions ? positions[p] : p;
        if (pp->cls == PARITY_NONFINITE && out->n_nonfinite++ == 0) {
            out->first_nonfinite_pos = p;
            out->nonfinite_in_ref = !all_finite(r, n_vocab);
        }
    }
    stat_of(&out->cosine, out->pos, n_pos, offsetof(struct parity_pos, cosine), scratch);
    stat_of(&out->kld, out->pos, n_pos, offsetof(struct parity_pos, kld), scratch);
    stat_of(&out->rel_l2, out->pos, n_pos, offsetof(struct parity_pos, rel_l2), scratch);
    stat_of(&out->max_abs_diff, out->pos, n_pos, offsetof(struct parity_pos, max_abs_diff),
            scratch);
    stat_of(&out->top5, out->pos, n_pos, (size_t)-1, scratch);
    out->worst_pos = out->kld.argmax;

    struct parity_summary s;
    parity_summarize(out->pos, n_pos, cfg, &s);
    s.route = out->route;
    if (kv) {
        out->kv_f16 = 1;
        out->kv_round = *kv;
        s.kv_round = *kv;
    }
    if (forced) {
        out->forced = *forced;
        s.forced = *forced;
    }
    out->n_match = s.n_match;
    out->n_tie_flip = s.n_tie_flip;
    out->n_wrong = s.n_wrong;
    /* the first position breaking a per-position rule (localization starts there) */
    for (int p = 0; p < n_pos && out->first_fail_pos < 0; p++) {
        const struct parity_pos *x = &out->pos[p];
        if (pos_nonfinite(x) || (x->ref_top != x->test_top && !(x->ref_gap < cfg->near_tie)) ||
            !(x->cosine >= cfg->min_cosine) || !(x->kld <= cfg->max_kld) ||
            !(x->rel_l2 <= cfg->max_rel_l2))
            out->first_fail_pos = p;
    }
    out->pass = parity_verdict(cfg, &s, NULL, out->reason, sizeof out->reason);
    if (!out->pass && out->n_nonfinite) /* say which side was non-finite */
        snprintf(out->reason, sizeof out->reason,
                 "FAIL: non-finite logits in the %s at position %d (%d positions)",
                 out->nonfinite_in_ref ? "judge (ref)" : "mode under test",
                 out->pos[out->first_nonfinite_pos].position, out->n_nonfinite);
done:
    free(scratch);
    return rc;
}

int parity_judge(const float *ref, const float *test, int n_pos, int n_vocab,
                 const struct parity_config *cfg, struct parity_result *out)
{
    return judge_routes(ref, test, n_pos, n_vocab, cfg, NULL, NULL, NULL, NULL, out);
}

void parity_result_free(struct parity_result *r)
{
    if (!r)
        return;
    free(r->pos);
    free(r->layers);
    free(r->route_deficit);
    r->pos = NULL;
    r->layers = NULL;
    r->route_deficit = NULL;
}

double parity_severity(const struct parity_result *r)
{
    if (!r->pos || r->n_nonfinite || r->n_wrong || r->route.n_refused)
        return INFINITY;
    const double allowed = 1.0 - r->cfg.min_cosine > 1e-12 ? 1.0 - r->cfg.min_cosine : 1e-12;
    double s = (1.0 - r->cosine.min) / allowed;
    double a = r->kld.mean / (r->cfg.max_mean_kld > 0 ? r->cfg.max_mean_kld : 1e-300);
    double b = r->kld.max / (r->cfg.max_kld > 0 ? r->cfg.max_kld : 1e-300);
    double c = isinf(r->cfg.max_rel_l2)
                   ? 0
                   : r->rel_l2.max / (r->cfg.max_rel_l2 > 0 ? r->cfg.max_rel_l2 : 1e-300);
    if (a > s)
        s = a;
    if (b > s)
        s = b;
    if (c > s)
        s = c;
    const double d =
        isinf(r->cfg.max_mean_rel_l2)
            ? 0
            : r->rel_l2.mean / (r->cfg.max_mean_rel_l2 > 0 ? r->cfg.max_mean_rel_l2 : 1e-300);
    if (d > s)
        s = d;
    return s < 0 ? 0 : s;
}

/* ---- tolerances from noise ------------------------------------------------------------------ */

const struct parity_noise *parity_noise_of(const char *backend)
{
    return backend_noise_of(backend); /* the backend's row says (engine/backend.c) */
}

/* The thresholds of cfg against noise z, one row per metric: name, threshold, noise, factor. */
struct loose_row {
    const char *name;
    double thr, noise, factor;
};

static int loose_rows(const struct parity_config *cfg, const struct parity_noise *z,
                      struct loose_row *out)
{
    const struct loose_row rows[] = {
        {"min_cosine", 1.0 - cfg->min_cosine, z->one_minus_cos, PARITY_LOOSE_FACTOR_LOGIT},
        {"max_mean_kld", cfg->max_mean_kld, z->mean_kld, PARITY_LOOSE_FACTOR_LOGIT},
        {"max_kld", cfg->max_kld, z->max_kld, PARITY_LOOSE_FACTOR_LOGIT},
        {"max_rel_l2", cfg->max_rel_l2, z->max_rel_l2, PARITY_LOOSE_FACTOR_REL_L2},
        {"max_mean_rel_l2", cfg->max_mean_rel_l2, z->mean_rel_l2, PARITY_LOOSE_FACTOR_REL_L2},
    };
    memcpy(out, rows, sizeof rows);
    return (int)(sizeof rows / sizeof rows[0]);
}

int parity_check_loose(const struct parity_config *cfg, const char *backend, char *why, size_t n)
{
    /* the forced layers' bound is one layer's noise, the same for every backend it judges */
    if (!(cfg->max_forced <= PARITY_FORCED_LOOSE_MAX)) {
        if (why && n)
            snprintf(why, n,
                     "parity.max_forced %g is looser than %g (%g x the default, set from one"
                     " layer's measured noise); state why in parity.loose_reason, or tighten it",
                     cfg->max_forced, PARITY_FORCED_LOOSE_MAX,
                     PARITY_FORCED_LOOSE_MAX / PARITY_FORCED_MAX);
        return -1;
    }
    const struct parity_noise *z = parity_noise_of(backend);
    if (!z || !z->measured || z->exact)
        return 0;
    struct loose_row r[8];
    const int k = loose_rows(cfg, z, r);
    for (int i = 0; i < k; i++)
        if (!(r[i].thr <= r[i].factor * r[i].noise)) { /* an unjudged (Inf) bound is loose too */
            if (why && n)
                snprintf(why, n,
                         "parity.%s %g is looser than %g x the %s backend's measured noise (%g:"
                         " limit %s %g); state why in parity.loose_reason, or tighten it",
                         r[i].name, i == 0 ? cfg->min_cosine : r[i].thr, r[i].factor, backend,
                         r[i].noise, i == 0 ? ">=" : "<=",
                         i == 0 ? 1.0 - r[i].factor * r[i].noise : r[i].factor * r[i].noise);
            return -1;
        }
    return 0;
}

json_t *parity_noise_json(const struct parity_config *cfg, const char *backend)
{
    const struct parity_noise *z = parity_noise_of(backend);
    if (!z)
        return NULL;
    json_t *o = json_object(), *nz = json_object(), *mg = json_object();
    json_object_set_new(o, "backend", json_string(z->backend));
    json_object_set_new(o, "measured", json_boolean(z->measured));
    json_object_set_new(o, "source", json_string(z->source));
    struct loose_row r[8];
    const int k = loose_rows(cfg, z, r);
    for (int i = 0; i < k; i++) {
        json_object_set_new(nz, r[i].name, parity_json_number(r[i].noise));
        /* exact or unmeasured noise: no margin to state */
        json_object_set_new(mg, r[i].name,
                            z->measured && !z->exact && r[i].noise > 0
                                ? parity_json_number(r[i].thr / r[i].noise)
                                : json_null());
    }
    json_object_set_new(o, "noise", nz);
    json_object_set_new(o, "margin", mg);
    return o;
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
    json_object_set_new(c, "route_tie", parity_json_number(r->cfg.route_tie));
    json_object_set_new(c, "max_rel_l2", parity_json_number(r->cfg.max_rel_l2));
    json_object_set_new(c, "max_mean_rel_l2", parity_json_number(r->cfg.max_mean_rel_l2));
    json_object_set_new(c, "max_forced", parity_json_number(r->cfg.max_forced));
    json_object_set_new(c, "span", json_integer(r->cfg.span));
    json_object_set_new(o, "config", c);
    json_object_set_new(o, "verdict", json_string(r->pass ? "PASS" : "FAIL"));
    json_object_set_new(o, "reason", json_string(r->reason));
    json_object_set_new(o, "mode", json_string(r->mode));
    {
        /* the backend's documented noise and each threshold's margin over it */
        char be[32];
        snprintf(be, sizeof be, "%.*s", (int)strcspn(r->mode, "."), r->mode);
        json_t *nz = parity_noise_json(&r->cfg, be);
        if (nz)
            json_object_set_new(o, "noise", nz);
    }
    json_object_set_new(o, "chat_fallback", json_boolean(r->chat_fallback));
    if (r->chat_conversation) /* the chat path's own conversation: drawn for this run, or fixed */
        json_object_set_new(o, "chat_conversation",
                            json_string(r->chat_conversation > 0 ? "fresh" : "fixed"));
    /* how much of a generated sequence was prose, and how many judged positions (parity_tokens) */
    json_object_set_new(
        o, "prose", json_pack("{s:i, s:i}", "tokens", r->prose_tokens, "judged", r->prose_judged));
    json_t *fa = json_array();
    for (int i = 0; i < r->n_faults; i++)
        json_array_append_new(fa, json_string(r->faults[i]));
    json_object_set_new(o, "faults", fa);
    json_object_set_new(o, "n_pos", json_integer(r->n_pos));
    json_object_set_new(o, "sequence_length", json_integer(r->seq_len ? r->seq_len : r->n_pos));
    if (r->n_chunks) { /* the prefill path's batched calls, in order */
        json_t *ch = json_array();
        for (int i = 0; i < r->n_chunks; i++)
            json_array_append_new(ch, json_integer(r->chunks[i]));
        json_object_set_new(o, "prefill_chunks", ch);
    }
    json_object_set_new(o, "n_vocab", json_integer(r->n_vocab));
    json_object_set_new(o, "cosine", stat_json(&r->cosine));
    json_object_set_new(o, "kld", stat_json(&r->kld));
    json_object_set_new(o, "rel_l2", stat_json(&r->rel_l2));
    if (r->is_moe_taps) {
        const struct parity_route_replay *rr = &r->route;
        json_t *x = json_object();
        json_object_set_new(x, "replayed", json_integer(rr->replayed));
        json_object_set_new(x, "forced", json_integer(rr->n_forced));
        json_object_set_new(x, "forced_positions", json_integer(rr->n_forced_pos));
        json_object_set_new(x, "max_deficit", parity_json_number(rr->max_deficit));
        json_object_set_new(x, "max_subject_gap", parity_json_number(rr->max_subject_gap));
        json_object_set_new(x, "refused", json_integer(rr->n_refused));
        if (rr->n_refused)
            json_object_set_new(x, "first_refused",
                                json_pack("{s:i, s:i, s:o, s:o}", "layer", rr->refused_layer,
                                          "position", rr->refused_pos, "deficit",
                                          parity_json_number(rr->refused_deficit), "subject_gap",
                                          parity_json_number(rr->refused_subject_gap)));
        json_object_set_new(o, "route_replay", x);
    }
    if (r->kv_f16) { /* an F16-KV subject: its cache's rounding, judged or why not */
        const struct parity_kv_round *k = &r->kv_round;
        json_object_set_new(o, "kv_f16_rounding",
                            k->measured ? json_pack("{s:o, s:o, s:i, s:o}", "ratio",
                                                    parity_json_number(k->ratio), "p90",
                                                    parity_json_number(k->p90), "positions", k->n,
                                                    "max", parity_json_number(PARITY_KV_ROUND_MAX))
                                        : json_pack("{s:b, s:s}", "measured", 0, "why", k->why));
    }
    { /* the forced layers: judged, or why not (every parity record says which) */
        const struct parity_forced *f = &r->forced;
        json_object_set_new(
            o, "forced_layers",
            f->measured
                ? json_pack(
                      "{s:b, s:o, s:i, s:o, s:i, s:i, s:o, s:i, s:i, s:i, s:s, s:o, s:o,"
                      " s:o}",
                      "measured", 1, "worst", parity_json_number(f->worst), "worst_layer",
                      f->worst_layer, "row", parity_json_number(f->row), "row_layer", f->row_layer,
                      "row_position", f->row_pos, "head", parity_json_number(f->head), "layers",
                      f->n_layer, "positions", f->n_pos, "head_positions", f->n_head_rows,
                      "rounding", f->rounding, "max", parity_json_number(r->cfg.max_forced),
                      "row_max", parity_json_number(r->cfg.max_forced * PARITY_FORCED_ROW_SHARE),
                      "head_max", parity_json_number(r->cfg.max_forced * PARITY_FORCED_HEAD_SHARE))
                : json_pack("{s:b, s:s}", "measured", 0, "why",
                            f->why[0] ? f->why : "not measured: logits only"));
    }
    if (r->dist.n) /* the judge's own distributions: can the KL bounds see anything? */
        json_object_set_new(o, "distribution", distribution_json(&r->dist, r->cfg.max_kld));
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
    json_t *rl = json_array(), *at = json_array();
    json_t *cos = json_array(), *kld = json_array(), *mad = json_array(), *t5 = json_array(),
           *cls = json_array(), *gap = json_array(), *rt = json_array(), *tt = json_array();
    for (int i = 0; r->pos && i < r->n_pos; i++) {
        json_array_append_new(rt, json_integer(r->pos[i].ref_top));
        json_array_append_new(tt, json_integer(r->pos[i].test_top));
        json_array_append_new(cos, parity_json_number(r->pos[i].cosine));
        json_array_append_new(kld, parity_json_number(r->pos[i].kld));
        json_array_append_new(rl, parity_json_number(r->pos[i].rel_l2));
        json_array_append_new(at, json_integer(r->pos[i].position));
        json_array_append_new(mad, parity_json_number(r->pos[i].max_abs_diff));
        json_array_append_new(t5, json_integer(r->pos[i].top5));
        json_array_append_new(cls, json_string(parity_class_name(r->pos[i].cls)));
        json_array_append_new(gap, parity_json_number(r->pos[i].ref_gap));
    }
    json_object_set_new(pp, "cosine", cos);
    json_object_set_new(pp, "kld", kld);
    json_object_set_new(pp, "rel_l2", rl);
    json_object_set_new(pp, "position", at);
    json_object_set_new(pp, "max_abs_diff", mad);
    json_object_set_new(pp, "top5_overlap", t5);
    json_object_set_new(pp, "class", cls);
    json_object_set_new(pp, "ref_gap", gap);
    json_object_set_new(pp, "ref_top", rt);
    if (r->route_deficit) {
        /* null where the replay forced nothing at the position */
        json_t *rd = json_array();
        for (int i = 0; r->pos && i < r->n_pos; i++)
            json_array_append_new(rd, isnan(r->route_deficit[i])
                                          ? json_null()
                                          : parity_json_number(r->route_deficit[i]));
        json_object_set_new(pp, "route_deficit", rd);
    }
    json_object_set_new(pp, "test_top", tt);
    json_object_set_new(o, "per_position", pp);
    if (r->localized) {
        json_t *loc = json_object(), *ls = json_array();
        json_object_set_new(loc, "first_bad_layer", json_integer(r->first_bad_layer));
        json_object_set_new(
            loc, "at_position",
            json_integer(
                r->pos[r->first_fail_pos >= 0 ? r->first_fail_pos : r->worst_pos].position));
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
    if (r->seq_len > r->n_pos)
        fprintf(f, " (sampled from %d, last %d)", r->seq_len,
                r->pos ? r->pos[r->n_pos - 1].position : -1);
    for (int i = 0; i < r->n_chunks; i++)
        fprintf(f, "%s%d", i ? "+" : "  prefill chunks ", r->chunks[i]);
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
        {"cosine", &r->cosine, ""},       {"kld (nats)", &r->kld, ""},
        {"rel-L2", &r->rel_l2, ""},       {"max |dlogit|", &r->max_abs_diff, "-"},
        {"top-5 overlap", &r->top5, "-"},
    };
    char t0[48], t1[48], t2[48];
    snprintf(t0, sizeof t0, "min >= %g", r->cfg.min_cosine);
    snprintf(t1, sizeof t1, "mean <= %g, max <= %g", r->cfg.max_mean_kld, r->cfg.max_kld);
    snprintf(t2, sizeof t2, "mean <= %g, max <= %g", r->cfg.max_mean_rel_l2, r->cfg.max_rel_l2);
    for (int i = 0; i < 5; i++)
        fprintf(f, "  %-14s %12.6g %12.6g %12.6g %12.6g %12.6g   %s\n", rows[i].name,
                rows[i].s->min, rows[i].s->mean, rows[i].s->p1, rows[i].s->p99, rows[i].s->max,
                i == 0   ? t0
                : i == 1 ? t1
                : i == 2 ? t2
                         : rows[i].thr);
    fprintf(f, "  argmax: %d MATCH, %d TIE_FLIP (near tie < %g), %d WRONG, %d NONFINITE\n",
            r->n_match, r->n_tie_flip, r->cfg.near_tie, r->n_wrong, r->n_nonfinite);
    if (r->forced.measured)
        fprintf(f,
                "  forced layers: worst %.3g at layer %d (at most %g), worst row %.3g at layer %d"
                " position %d (at most %g), head %.3g (at most %g);"
                " the twin on the subject's own inputs%s%s\n",
                r->forced.worst, r->forced.worst_layer, r->cfg.max_forced, r->forced.row,
                r->forced.row_layer, r->forced.row_pos, r->cfg.max_forced * PARITY_FORCED_ROW_SHARE,
                r->forced.head, r->cfg.max_forced * PARITY_FORCED_HEAD_SHARE,
                r->forced.rounding[0] ? ", rounding " : "", r->forced.rounding);
    else if (r->forced.why[0])
        fprintf(f, "  forced layers: %s\n", r->forced.why);
    {
        /* each threshold's margin over the backend's documented noise */
        char be[32];
        snprintf(be, sizeof be, "%.*s", (int)strcspn(r->mode, "."), r->mode);
        const struct parity_noise *z = parity_noise_of(be);
        if (z && z->measured && !z->exact) {
            struct loose_row rows[8];
            const int k = loose_rows(&r->cfg, z, rows);
            fprintf(f, "  thresholds over the %s backend's measured noise:", be);
            for (int i = 0; i < k; i++)
                fprintf(f, " %s %.3gx", rows[i].name, rows[i].thr / rows[i].noise);
            fprintf(f, "\n");
        } else if (z) {
            fprintf(f, "  noise of the %s backend: %s\n", be, z->source);
        }
    }
    if (r->route.replayed || r->route.n_refused)
        fprintf(f,
                "  routes: judge replayed with the subject's expert set at %d router near tie%s"
                " (%d position%s, max deficit %.3g < route_tie %g); %d refused%s\n",
                r->route.n_forced, r->route.n_forced == 1 ? "" : "s", r->route.n_forced_pos,
                r->route.n_forced_pos == 1 ? "" : "s", r->route.max_deficit, r->cfg.route_tie,
                r->route.n_refused, r->route.n_refused ? " (see the verdict)" : "");
    if (r->worst_pos >= 0) {
        const struct parity_pos *w = &r->pos[r->worst_pos];
        fprintf(f,
                "  worst position %d: cosine %.6f, KLD %.4g, max |dlogit| %.4g, top-5 %d/5,"
                " argmax ref %d test %d (%s)\n",
                w->position, w->cosine, w->kld, w->max_abs_diff, w->top5, w->ref_top, w->test_top,
                parity_class_name(w->cls));
    }
    if (r->localized) {
        int at = r->pos[r->first_fail_pos >= 0 ? r->first_fail_pos : r->worst_pos].position;
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
    free((void *)t->force_experts);
    free(t->force_deficit);
    memset(t, 0, sizeof *t);
}

/* Taps for a run of n tokens keeping `rows` rows (struct mode_keep): the hidden state of the
 * kept rows (n_layer, rows, E), the routing of every position (n_layer, n, ...). */
static int taps_alloc(struct backend_taps *t, const struct model_hparams *hp, int n, int rows,
                      struct gate_err *err)
{
    memset(t, 0, sizeof *t);
    const size_t ln = (size_t)hp->n_layer * (size_t)n;
    int ok = (t->hidden = calloc((size_t)hp->n_layer * (size_t)rows * hp->n_embd, sizeof(float))) !=
             NULL;
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
    int chat_conversation; /* the chat path's own conversation: 1 fresh, -1 fixed, 0 none */
    uint8_t *is_prose;     /* generated sequences: which tokens are prose (parity_tokens) */
    int n_prose;
    struct backend *judge, *subject;
    int *judged, n_judged; /* the positions judged (increasing), n_judged of n */
    /* the rows every run keeps (issue 26 §2): the judged positions when they are a sample of a
     * longer sequence (kept = &keep), else every position (kept NULL, judged[i] = i). Logits are
     * (n_judged, V), row i position judged[i]; hidden-state taps (n_layer, n_judged, E); the
     * routing taps cover every position */
    struct mode_keep keep;
    const struct mode_keep *kept;
    float *judge_logits, *subj_logits, *clean_logits; /* (n_judged, V) */
    int chunks[MODE_MAX_CHUNKS], n_chunks;            /* prefill: the batched part's chunks */
    int with_taps;
    int subj_taps_ok; /* with_taps and the subject records taps (an exec engine does not) */
    struct backend_taps judge_taps, subj_taps, clean_taps;
    int have_clean;
    /* the route-tie replay (allocated on first use): the judge run again with the subject's
     * near-tie expert sets forced; jt/jsel: the judge's taps and rows the last run was judged
     * against (the session's own, or the replay's) */
    struct backend_taps replay_taps;
    float *replay_logits; /* (n_judged, V) */
    const struct backend_taps *jt;
    int n_threads;
    struct dist_summary dist; /* the judge's distributions at the judged positions */
    /* the forced layers (struct parity_forced; allocated on first use) */
    int forced_off;
    struct backend *forced_twin; /* opened with kv-one-layer: one layer's cache, layer-major */
    float *forced_out;  /* (n_layer, n_judged, E) the twin's layers on the subject's inputs */
    float *subj_hidden; /* a sampled span: (n_layer, n, E) the subject's hidden states at every
                         * position (keep_all), each layer's input for the forced twin */
    struct mode_keep keep_all;
    float *forced_logits; /* (forced rows, V) the twin's head on the subject's last layer */
    float *forced_def;    /* (n_layer, n) route_force scratch (MoE) */
};

void parity_session_set_forced(struct parity_session *s, int on)
{
    s->forced_off = !on;
}

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
    free(s->is_prose);
    free(s->judge_logits);
    free(s->subj_logits);
    free(s->clean_logits);
    free(s->judged);
    taps_free(&s->judge_taps);
    taps_free(&s->subj_taps);
    taps_free(&s->clean_taps);
    taps_free(&s->replay_taps);
    free(s->replay_logits);
    backend_close(s->forced_twin);
    free(s->forced_out);
    free(s->subj_hidden);
    free(s->forced_logits);
    free(s->forced_def);
    free(s);
}

int parity_tokens(const struct parity_config *c, const struct model *m, int n, int32_t *out,
                  int *n_prose, uint8_t *is_prose, struct gate_err *err)
{
    if (c->token_seed)
        return prose_mixed_for_model(m, c->token_seed, n, out, n_prose, is_prose, err);
    mode_tokens(PARITY_TOKEN_SEED, m->hp.n_vocab, n, out); /* the conformance sequence */
    if (n_prose)
        *n_prose = 0;
    if (is_prose)
        memset(is_prose, 0, (size_t)n);
    return 0;
}

int parity_chat_tokens(const struct parity_config *c, const struct model *m, int32_t **ids, int *n,
                       int **turn_ends, int *n_turns, int *fallback, struct gate_err *err)
{
    if (!c->token_seed)
        return mode_chat_for_model(m, ids, n, turn_ends, n_turns, fallback, err);
    /* longer messages until the conversation holds the positions parity needs (a tokenizer with
     * long tokens; a fallback's 168 ids always do) */
    for (int scale = 1;; scale *= 2) {
        struct chat_msg msgs[PROSE_CHAT_MSGS];
        char *store = NULL;
        int rc = prose_chat(c->token_seed, scale, msgs, &store, err);
        if (!rc)
            rc = mode_chat_msgs_for_model(m, msgs, PROSE_CHAT_MSGS, c->token_seed, ids, n,
                                          turn_ends, n_turns, fallback, err);
        free(store);
        if (rc || *n >= PARITY_MIN_POSITIONS || scale >= 16)
            return rc;
        free(*ids);
        free(*turn_ends);
        *ids = NULL;
        *turn_ends = NULL;
    }
}

/* The sequence of a session: supplied tokens, generated ids, or the chat conversation. */
static int build_sequence(struct parity_session *s, const int32_t *tokens, int n,
                          struct gate_err *err)
{
    const uint32_t V = s->m->hp.n_vocab;
    if (!tokens && s->mode.path == MODE_CHAT) {
        int rc = parity_chat_tokens(&s->cfg, s->m, &s->tokens, &s->n, &s->turn_ends, &s->n_turns,
                                    &s->chat_fallback, err);
        if (rc)
            return rc;
        s->chat_conversation = s->cfg.token_seed ? 1 : -1;
        if (s->n < PARITY_MIN_POSITIONS)
            return err_set(err, ERR_INPUT,
                           "the chat conversation has %d tokens, fewer than the"
                           " %d positions parity needs",
                           s->n, PARITY_MIN_POSITIONS);
        return 0;
    }
    if (!tokens)
        n = s->cfg.span > s->cfg.positions ? s->cfg.span : s->cfg.positions;
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
        if (!(s->is_prose = malloc((size_t)n)))
            return err_set(err, ERR_ENV, "out of memory for %d tokens", n);
        int rc = parity_tokens(&s->cfg, s->m, n, s->tokens, &s->n_prose, s->is_prose, err);
        if (rc)
            return rc;
    }
    if (s->mode.path == MODE_CHAT) { /* supplied tokens: six equal turns */
        s->n_turns = 6;
        s->turn_ends = malloc(6 * sizeof *s->turn_ends);
        if (!s->turn_ends)
            return err_set(err, ERR_ENV, "parity: out of memory for the chat turns");
        for (int i = 0; i < 6; i++)
            s->turn_ends[i] = (int)((int64_t)n * (i + 1) / 6);
    }
    return 0;
}

/* Which positions are judged: all of a supplied or chat sequence; of a generated one longer
 * than `positions` (span), one position per equal stratum of [0, n), the last stratum's pick
 * the last position — spread over the whole context, different per seed. Also the prefill
 * chunks. */
static int choose_positions(struct parity_session *s, int supplied, struct gate_err *err)
{
    const int n = s->n;
    const int sample = !supplied && s->mode.path != MODE_CHAT && n > s->cfg.positions;
    s->n_judged = sample ? s->cfg.positions : n;
    if (!(s->judged = malloc((size_t)s->n_judged * sizeof *s->judged)))
        return err_set(err, ERR_ENV, "out of memory for %d positions", s->n_judged);
    uint64_t st = s->cfg.seed ^ 0xB0B0B0B0ULL;
    for (int i = 0; i < s->n_judged; i++) {
        const int lo = (int)((int64_t)n * i / s->n_judged);
        const int hi = (int)((int64_t)n * (i + 1) / s->n_judged);
        s->judged[i] = sample ? lo + (int)(det_splitmix64(&st) % (uint64_t)(hi - lo)) : i;
    }
    if (sample) {
        s->judged[s->n_judged - 1] = n - 1;
        s->keep = (struct mode_keep){.pos = s->judged, .n = s->n_judged};
        s->kept = &s->keep;
    }
    if (s->mode.path == MODE_PREFILL)
        s->n_chunks =
            mode_prefill_split(s->cfg.seed, n / 2 > 0 ? n / 2 : 1, s->chunks, MODE_MAX_CHUNKS);
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
        return err_set(err, ERR_ENV, "parity: out of memory for the session");
    s->m = m;
    s->mode = *mode;
    s->cfg = *cfg;
    s->with_taps = with_taps;
    s->n_threads = n_threads;
    const size_t V = m->hp.n_vocab;
    if ((rc = build_sequence(s, tokens, n, err)) || (rc = choose_positions(s, tokens != NULL, err)))
        goto fail;
    /* the judged rows only: a 32k-position span holds 96 rows of logits, not 32,768 */
    s->judge_logits = malloc((size_t)s->n_judged * V * sizeof(float));
    s->subj_logits = malloc((size_t)s->n_judged * V * sizeof(float));
    if (!s->judge_logits || !s->subj_logits) {
        rc = err_set(err, ERR_ENV, "out of memory for logits (%d x %zu)", s->n_judged, V);
        goto fail;
    }
    if (with_taps && ((rc = taps_alloc(&s->judge_taps, &m->hp, s->n, s->n_judged, err)) ||
                      (rc = taps_alloc(&s->subj_taps, &m->hp, s->n, s->n_judged, err))))
        goto fail;
    /* the judge: ref, no faults, the whole sequence (with kept rows: in calls of
     * MODE_JUDGE_CHUNK tokens, the chunks its one call would make with that batch) */
    const int batch = s->kept && s->n > MODE_JUDGE_CHUNK ? MODE_JUDGE_CHUNK : s->n;
    if ((rc = mode_open_judge_batch(&s->judge, m, s->n, batch, n_threads, "", err)) ||
        (rc = mode_judge_kept(s->judge, s->tokens, s->n, s->kept, s->judge_logits,
                              with_taps ? &s->judge_taps : NULL, err)))
        goto fail;
    if ((rc = distribution_positions(s->judge_logits, s->n_judged, (int)V, NULL, &s->dist, err)))
        goto fail;
    /* the subject's batch: its path's longest call (decode: one token), not the sequence */
    const int call = mode_longest_call(mode->path, s->n, s->turn_ends, s->n_turns,
                                       s->n_chunks ? s->chunks : NULL, s->n_chunks);
    if ((rc = mode_open_batch(&s->subject, mode, m, s->n, call, n_threads, NULL, err)))
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

int parity_replay_alloc(struct backend_taps *t, const struct model_hparams *hp, int n,
                        struct gate_err *err)
{
    const size_t ln = (size_t)hp->n_layer * (size_t)n, k = hp->n_expert_used;
    if (!t->experts)
        t->experts = calloc(ln * k, sizeof(int32_t));
    if (!t->force_experts)
        t->force_experts = calloc(ln * k, sizeof(int32_t));
    if (!t->force_deficit)
        t->force_deficit = calloc(ln, sizeof(float));
    if (!t->experts || !t->force_experts || !t->force_deficit)
        return err_set(err, ERR_ENV, "out of memory for the route-tie replay (%u layers x %d)",
                       hp->n_layer, n);
    return 0;
}

void parity_replay_free(struct backend_taps *t)
{
    taps_free(t);
}

int parity_routes_alloc(struct backend_taps *t, const struct model_hparams *hp, int n,
                        struct gate_err *err)
{
    const size_t ln = (size_t)hp->n_layer * (size_t)n;
    memset(t, 0, sizeof *t);
    t->experts = malloc(ln * hp->n_expert_used * sizeof(int32_t));
    t->router_kth = malloc(ln * sizeof(float));
    t->router_k1th = malloc(ln * sizeof(float));
    if (!t->experts || !t->router_kth || !t->router_k1th) {
        taps_free(t);
        return err_set(err, ERR_ENV, "out of memory for the subject's routes (%u layers x %d)",
                       hp->n_layer, n);
    }
    return 0;
}

/* parity_replay_run keeping the rows of keep (struct mode_keep; NULL every row): logits
 * (keep->n, V), replay's hidden state the same rows; the routes and deficits cover every
 * position. */
static int replay_run(struct backend *judge, const struct model *m, const int32_t *tokens, int n,
                      const struct mode_keep *keep, const struct backend_taps *subj, double tol,
                      struct backend_taps *replay, float *logits, struct parity_route_replay *rr,
                      double *pos_deficit, int *pos_refused, struct gate_err *err)
{
    const struct model_hparams *hp = &m->hp;
    const int L = (int)hp->n_layer, k = (int)hp->n_expert_used;
    const size_t ln = (size_t)L * (size_t)n;
    const struct backend_taps *S = subj, *R = replay;
    route_none(rr);
    /* force the subject's set wherever its own router saw a near tie; the judge takes it only
     * where its deficit is below tol too (route_force) */
    int32_t *force = (int32_t *)replay->force_experts;
    for (size_t i = 0; i < ln; i++) {
        const double sg = (double)S->router_kth[i] - S->router_k1th[i];
        if (sg < tol)
            memcpy(force + i * (size_t)k, S->experts + i * (size_t)k, (size_t)k * sizeof *force);
        else
            force[i * (size_t)k] = -1;
    }
    replay->force_tol = (float)tol;
    int rc = mode_judge_kept(judge, tokens, n, keep, logits, replay, err);
    if (rc)
        return rc;
    for (int p = 0; p < n; p++) {
        if (pos_deficit)
            pos_deficit[p] = NAN;
        if (pos_refused)
            pos_refused[p] = 0;
        int forced_here = 0;
        for (int l = 0; l < L; l++) {
            const size_t i = (size_t)l * (size_t)n + (size_t)p;
            const double d = R->force_deficit[i];
            const double sg = (double)S->router_kth[i] - S->router_k1th[i];
            if (!same_set(R->experts + i * (size_t)k, S->experts + i * (size_t)k, k)) {
                if (pos_refused)
                    pos_refused[p]++;
                if (rr->n_refused++ == 0) {
                    rr->refused_layer = l, rr->refused_pos = p;
                    rr->refused_deficit = d;
                    rr->refused_subject_gap = sg;
                }
            } else if (!isnan(d)) { /* forced: the judge took the subject's set */
                rr->n_forced++;
                forced_here = 1;
                if (d > rr->max_deficit)
                    rr->max_deficit = d;
                if (sg > rr->max_subject_gap)
                    rr->max_subject_gap = sg;
                if (pos_deficit && (isnan(pos_deficit[p]) || d > pos_deficit[p]))
                    pos_deficit[p] = d;
            }
        }
        rr->n_forced_pos += forced_here;
    }
    rr->replayed = rr->n_forced > 0;
    return 0;
}

int parity_replay_run(struct backend *judge, const struct model *m, const int32_t *tokens, int n,
                      const struct backend_taps *subj, double tol, struct backend_taps *replay,
                      float *logits, struct parity_route_replay *rr, double *pos_deficit,
                      int *pos_refused, struct gate_err *err)
{
    return replay_run(judge, m, tokens, n, NULL, subj, tol, replay, logits, rr, pos_deficit,
                      pos_refused, err);
}

/* The route-tie replay (parity.h, struct parity_route_replay) after a subject run with taps:
 * fills *rr and, when the judge was replayed, s->jt, judge_logits' replacement *jsel (the
 * judged rows) and the per-judged-position deficits *deficit (malloc'd; NULL when nothing was
 * forced). */
static int route_replay(struct parity_session *s, double tol, struct parity_route_replay *rr,
                        const float **jsel, double **deficit, struct gate_err *err)
{
    const struct model_hparams *hp = &s->m->hp;
    const int L = (int)hp->n_layer, n = s->n, k = (int)hp->n_expert_used;
    const size_t V = hp->n_vocab;
    const struct backend_taps *J = &s->judge_taps, *S = &s->subj_taps;
    route_none(rr);
    *deficit = NULL;
    /* the first differing pair in causal order (position, then layer): the replay is the same
     * run up to it, so when it is no near tie on the judge's own run it is refused there too */
    int first_l = -1, first_p = -1, any_candidate = 0, n_diff = 0;
    for (int p = 0; p < n; p++)
        for (int l = 0; l < L; l++) {
            const size_t i = (size_t)l * (size_t)n + (size_t)p;
            if (same_set(J->experts + i * (size_t)k, S->experts + i * (size_t)k, k))
                continue;
            n_diff++;
            const double jg = (double)J->router_kth[i] - J->router_k1th[i];
            const double sg = (double)S->router_kth[i] - S->router_k1th[i];
            const int candidate = jg < tol && sg < tol;
            if (first_p < 0) {
                first_l = l, first_p = p;
                rr->refused_deficit = jg; /* a lower bound of the deficit */
                rr->refused_subject_gap = sg;
                if (!candidate)
                    break;
            }
            any_candidate |= candidate;
        }
    if (!n_diff)
        return 0;
    if (!any_candidate) {
        rr->n_refused = n_diff;
        rr->refused_layer = first_l, rr->refused_pos = first_p;
        return 0;
    }
    int rc;
    struct backend_taps *R = &s->replay_taps;
    /* with hidden (the judged rows): localization reads it */
    if (!R->hidden && (rc = taps_alloc(R, hp, n, s->n_judged, err)))
        return rc;
    if ((rc = parity_replay_alloc(R, hp, n, err)))
        return rc;
    if (!s->replay_logits)
        s->replay_logits = malloc((size_t)s->n_judged * V * sizeof(float));
    double *pos_def = malloc((size_t)n * sizeof *pos_def);
    if (!s->replay_logits || !pos_def) {
        free(pos_def);
        return err_set(err, ERR_ENV, "out of memory for the route-tie replay");
    }
    if ((rc = replay_run(s->judge, s->m, s->tokens, n, s->kept, S, tol, R, s->replay_logits, rr,
                         pos_def, NULL, err)) ||
        !rr->replayed) {
        free(pos_def);
        return rc;
    }
    s->jt = R;
    *jsel = s->replay_logits;
    for (int i = 0; i < s->n_judged; i++) /* in place: judged[i] >= i */
        pos_def[i] = pos_def[s->judged[i]];
    *deficit = pos_def;
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
        return err_set(err, ERR_ENV, "parity: out of memory for the localization layers");
    r->n_layer = L;
    r->is_moe = hp->n_expert > 0;
    const int row = r->first_fail_pos >= 0 ? r->first_fail_pos
                    : r->worst_pos >= 0    ? r->worst_pos
                                           : 0;
    const int at = r->pos[row].position;
    const struct backend_taps *J = s->jt ? s->jt : &s->judge_taps, *S = &s->subj_taps;
    const int R = s->n_judged; /* the hidden states kept: the judged rows */
    for (int l = 0; l < L; l++) {
        struct parity_layer *x = &r->layers[l];
        x->first_diff_pos = -1;
        x->hidden_cosine_min = INFINITY;
        for (int row = 0; row < R; row++) {
            const size_t i = (size_t)l * (size_t)R + (size_t)row;
            const int p = s->judged[row];
            double c = cos_f(J->hidden + i * E, S->hidden + i * E, E);
            if (p == at)
                x->hidden_cosine = c;
            if (!isnan(x->hidden_cosine_min) && !(c >= x->hidden_cosine_min)) {
                /* NaN counts as the worst, and stays */
                x->hidden_cosine_min = c;
                x->hidden_cosine_min_pos = p;
            }
        }
        for (int p = 0; r->is_moe && p < n; p++) {
            const size_t i = (size_t)l * (size_t)n + (size_t)p;
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

/* The type of a matmul weight that is float (F32, F16, BF16); 0 for an absent tensor. */
static int weight_quantized(const struct model_weight *w)
{
    return w->data && w->type != QUANT_F32 && w->type != QUANT_F16 && w->type != QUANT_BF16;
}

/* The first quantized matmul weight of m (its name), or NULL when every one is float. */
static const char *first_quantized(const struct model *m)
{
    if (weight_quantized(&m->output))
        return m->output.name;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        const struct model_weight *w[] = {&L->wq,        &L->wk,      &L->wv,       &L->wo,
                                          &L->ffn_gate,  &L->ffn_up,  &L->ffn_down, &L->gate_inp,
                                          &L->gate_exps, &L->up_exps, &L->down_exps};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
            if (weight_quantized(w[i]))
                return w[i]->name;
    }
    return NULL;
}

/* The F16 KV cache's rounding (struct parity_kv_round): the judge run again with its cache
 * rounded to nearest F16 (engine/ref.c's kv-f16), and per position of the sequence the
 * subject's distance to it over that judge's distance to the F32 judge; the median and p90. A
 * model with quantized matmul weights is not decidable (k->why). */
static int kv_round_measure(struct parity_session *s, struct parity_kv_round *k,
                            struct gate_err *err)
{
    memset(k, 0, sizeof *k);
    const char *q = first_quantized(s->m);
    if (q) {
        snprintf(k->why, sizeof k->why,
                 "not decidable: %.40s is quantized, and the subject's activation quantization"
                 " noise exceeds the F16 rounding's effect",
                 q);
        return 0;
    }
    const size_t V = s->m->hp.n_vocab;
    const int R = s->n_judged; /* the judged rows: every position, or the span's sample */
    float *j16 = malloc((size_t)R * V * sizeof *j16);
    double *ratio = malloc((size_t)R * sizeof *ratio);
    struct backend *judge = NULL;
    int rc = 0;
    if (!j16 || !ratio)
        rc = err_set(err, ERR_ENV, "out of memory for the rounded judge's logits (%d x %zu)", R, V);
    if (!rc && !(rc = mode_open_judge_batch(&judge, s->m, s->n, s->judge->n_batch, s->n_threads,
                                            "kv-f16", err)))
        rc = mode_judge_kept(judge, s->tokens, s->n, s->kept, j16, NULL, err);
    backend_close(judge);
    int n = 0;
    for (int p = 0; !rc && p < R; p++) {
        const float *a = s->subj_logits + (size_t)p * V, *b = j16 + (size_t)p * V,
                    *c = s->judge_logits + (size_t)p * V;
        double e = 0, d = 0;
        for (size_t i = 0; i < V; i++) {
            e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
            d += ((double)b[i] - c[i]) * ((double)b[i] - c[i]);
        }
        if (d > 0 && isfinite(d) && isfinite(e))
            ratio[n++] = sqrt(e / d);
        else if (!isfinite(e))
            ratio[n++] = INFINITY; /* a non-finite subject is never close */
    }
    if (!rc && n > 0) {
        qsort(ratio, (size_t)n, sizeof *ratio, cmp_double);
        k->measured = 1;
        k->n = n;
        k->ratio = ratio[n / 2];
        k->p90 = ratio[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1];
    } else if (!rc) {
        snprintf(k->why, sizeof k->why, "not decidable: the F16 rounding moved no position");
    }
    free(j16);
    free(ratio);
    return rc;
}

/* Whether the session's next subject run can be judged layer by layer: the subject records its
 * hidden states and the forced twin models its roundings. */
static int forced_possible(const struct parity_session *s)
{
    const struct backend_noise *z = backend_noise_of(s->mode.backend);
    return !s->forced_off && s->subj_taps_ok && z && z->rounding;
}

/* The forced layers of the subject's last run (struct parity_forced, docs/gates.md): the twin
 * with the subject's claimed roundings run layer by layer on the subject's own hidden states,
 * each layer judged at the judged positions. Every position's hidden state is the input: the
 * session's taps when every position is judged, else subj_hidden (a sampled span's run keeps
 * them through keep_all). */
static int forced_measure(struct parity_session *s, struct parity_forced *f, struct gate_err *err)
{
    memset(f, 0, sizeof *f);
    const struct model_hparams *hp = &s->m->hp;
    const struct backend_noise *z = backend_noise_of(s->mode.backend);
    if (!s->subj_taps_ok) {
        snprintf(f->why, sizeof f->why, "not measured: the %s subject records no hidden states",
                 s->mode.backend);
        return 0;
    }
    if (!z || !z->rounding) {
        snprintf(f->why, sizeof f->why,
                 "not measured: the %s backend's roundings are not modelled (never calibrated"
                 " against the forced twin)",
                 s->mode.backend);
        return 0;
    }
    if (s->kept && !s->subj_hidden)
        return err_set(err, ERR_RUNTIME,
                       "parity: the forced layers of a sampled span need every position's hidden"
                       " state, and the run kept none");
    /* the subject's claimed roundings: the backend's own, its F16 cache, its batched
     * projections' precision */
    snprintf(f->rounding, sizeof f->rounding, "%s%s%s%s", z->rounding,
             s->mode.kv_f16 ? (z->rounding[0] ? ",kv-f16" : "kv-f16") : "",
             s->mode.prefill[0] && (z->rounding[0] || s->mode.kv_f16) ? "," : "",
             !strcmp(s->mode.prefill, "f16")    ? "gemm-f16"
             : !strcmp(s->mode.prefill, "bf16") ? "gemm-bf16"
                                                : "");
    const size_t L = hp->n_layer, E = hp->n_embd, V = hp->n_vocab, n = (size_t)s->n;
    const size_t J = (size_t)s->n_judged;
    const float *hidden = s->kept ? s->subj_hidden : s->subj_taps.hidden; /* (L, n, E) */
    const int rows_n =
        s->n_judged < PARITY_FORCED_HEAD_ROWS ? s->n_judged : PARITY_FORCED_HEAD_ROWS;
    int rows[PARITY_FORCED_HEAD_ROWS];
    for (int i = 0; i < rows_n; i++) /* evenly over the judged rows, the last one included */
        rows[i] = s->judged[rows_n > 1 ? (int)((int64_t)i * (s->n_judged - 1) / (rows_n - 1))
                                       : s->n_judged - 1];
    int rc = 0;
    if (!s->forced_twin) { /* all four or none: a failure leaves nothing half-built */
        const int batch = s->n > MODE_JUDGE_CHUNK ? MODE_JUDGE_CHUNK : s->n;
        struct backend *twin = NULL;
        char emu[sizeof f->rounding + 16]; /* layer-major: one layer's cache is enough */
        snprintf(emu, sizeof emu, "%s%skv-one-layer", f->rounding, f->rounding[0] ? "," : "");
        if ((rc = mode_open_judge_batch(&twin, s->m, s->n, batch, s->n_threads, emu, err)))
            return rc;
        float *o = malloc(L * J * E * sizeof(float));
        float *lg = malloc((size_t)PARITY_FORCED_HEAD_ROWS * V * sizeof(float));
        float *df = malloc(L * n * sizeof(float));
        if (!o || !lg || !df) {
            backend_close(twin);
            free(o);
            free(lg);
            free(df);
            return err_set(err, ERR_ENV,
                           "out of memory for the forced layers (%zu layers x %zu positions)", L,
                           n);
        }
        s->forced_twin = twin;
        s->forced_out = o;
        s->forced_logits = lg;
        s->forced_def = df;
    }
    if ((rc = backend_truncate(s->forced_twin, 0, err)) ||
        (rc = ref_forward_forced(s->forced_twin, s->tokens, s->n, hidden,
                                 hp->n_expert > 0 ? s->subj_taps.experts : NULL,
                                 (float)s->cfg.route_tie, s->forced_def, s->kept ? s->judged : NULL,
                                 s->n_judged, s->forced_out, rows, rows_n, s->forced_logits, err)))
        return rc;
    float *emb = malloc(E * sizeof(float));
    double *ej = malloc(J * sizeof(double)); /* one layer's squared error per judged row */
    if (!emb || !ej) {
        free(emb);
        free(ej);
        return err_set(err, ERR_ENV, "out of memory for one embedding row");
    }
    f->measured = 1;
    f->n_layer = (int)L;
    f->n_pos = s->n_judged;
    f->n_head_rows = rows_n;
    f->worst_layer = -1;
    f->row_layer = f->row_pos = -1;
    for (size_t l = 0; l < L; l++) {
        double e = 0, d = 0;
        for (size_t j = 0; j < J; j++) {
            const double e0 = e;
            const size_t p = (size_t)s->judged[j];
            const float *in = emb; /* layer 0's input: the token's embedding */
            if (l > 0)
                in = hidden + ((l - 1) * n + p) * E;
            else
                quant_dequant_row(s->m->tok_embd.type, model_row(&s->m->tok_embd, s->tokens[p]),
                                  emb, (int64_t)E);
            const float *so = hidden + (l * n + p) * E, *to = s->forced_out + (l * J + j) * E;
            for (size_t i = 0; i < E; i++) {
                e += ((double)so[i] - to[i]) * ((double)so[i] - to[i]);
                d += ((double)so[i] - in[i]) * ((double)so[i] - in[i]);
            }
            ej[j] = e - e0;
        }
        /* each row against the layer's RMS row contribution (PARITY_FORCED_ROW_SHARE); a
         * non-finite layer is NaN at its first non-finite row (-1: only the yardstick is) */
        for (size_t j = 0; j < J; j++) {
            const int bad = !isfinite(e) || !isfinite(d);
            if (bad && isfinite(ej[j]) && j + 1 < J)
                continue;
            const double r = bad         ? NAN
                             : d > 0     ? sqrt(ej[j] / (d / (double)J))
                             : ej[j] > 0 ? INFINITY
                                         : 0.0;
            if (f->row_layer < 0 || !(r <= f->row)) { /* NaN counts as the worst */
                f->row = r;
                f->row_layer = (int)l;
                f->row_pos = bad && isfinite(ej[j]) ? -1 : s->judged[j];
            }
            if (isnan(r))
                break;
        }
        /* a non-finite subject (NaN or Inf anywhere in the sums) is never close: NaN, which
         * every bound rejects */
        const double v = !isfinite(e) || !isfinite(d) ? NAN
                         : d > 0                      ? sqrt(e / d)
                         : e > 0                      ? INFINITY
                                                      : 0.0;
        if (f->worst_layer < 0 || !(v <= f->worst)) { /* NaN counts as the worst */
            f->worst = v;
            f->worst_layer = (int)l;
        }
        if (isnan(v))
            break;
    }
    free(emb);
    free(ej);
    double e = 0, d = 0;
    for (int i = 0; i < rows_n; i++) {
        int r = 0; /* the judged row holding position rows[i] */
        while (s->judged[r] != rows[i])
            r++;
        const float *a = s->subj_logits + (size_t)r * V, *b = s->forced_logits + (size_t)i * V;
        for (size_t k = 0; k < V; k++) {
            e += ((double)a[k] - b[k]) * ((double)a[k] - b[k]);
            d += (double)b[k] * b[k];
        }
    }
    f->head = !isfinite(e) || !isfinite(d) ? NAN : d > 0 ? sqrt(e / d) : e > 0 ? INFINITY : 0.0;
    return 0;
}

int parity_session_agreement(struct parity_session *s, const struct fault_set *faults,
                             const struct parity_config *cfg, struct parity_result *out, int *moved,
                             struct gate_err *err)
{
    const size_t V = s->m->hp.n_vocab;
    memset(out, 0, sizeof *out);
    float *sel = malloc((size_t)s->n_judged * V * sizeof *sel); /* the judged rows */
    int rc = 0;
    if (!sel)
        rc = err_set(err, ERR_ENV, "out of memory for the judge's faulted logits (%d x %zu)",
                     s->n_judged, V);
    if (!rc) {
        backend_set_faults(s->judge, faults); /* copied; cleared again below */
        rc = mode_judge_kept(s->judge, s->tokens, s->n, s->kept, sel, NULL, err);
        backend_set_faults(s->judge, NULL);
    }
    if (!rc && moved) { /* over the judged rows (every position unless a span is sampled) */
        *moved = 0;
        for (int i = 0; i < s->n_judged; i++)
            *moved +=
                memcmp(sel + (size_t)i * V, s->judge_logits + (size_t)i * V, V * sizeof *sel) != 0;
    }
    if (!rc) {
        struct parity_config c = cfg ? *cfg : s->cfg;
        struct parity_forced fo = {0};
        snprintf(fo.why, sizeof fo.why,
                 "not measured: the fault went into the judge, not into the subject");
        if ((rc = judge_routes(sel, s->subj_logits, s->n_judged, (int)V, &c, NULL, NULL, &fo,
                               s->judged, out)))
            err_set(err, rc, "%s", out->reason);
        out->seq_len = s->n;
        mode_format(&s->mode, out->mode, sizeof out->mode);
    }
    free(sel);
    return rc;
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
    /* a sampled span judged layer by layer keeps every position's hidden state too */
    const struct mode_keep *keep = s->kept;
    if (s->kept && forced_possible(s)) {
        const size_t all = (size_t)hp->n_layer * (size_t)s->n * hp->n_embd;
        if (!s->subj_hidden && !(s->subj_hidden = malloc(all * sizeof(float))))
            return err_set(err, ERR_ENV,
                           "out of memory for the forced layers' inputs (%u layers x %d"
                           " positions)",
                           hp->n_layer, s->n);
        s->keep_all = *s->kept;
        s->keep_all.hidden_all = s->subj_hidden;
        keep = &s->keep_all;
    }
    backend_set_faults(s->subject, faults); /* copied; cleared again below */
    rc = mode_run_kept(s->subject, s->mode.path, s->tokens, s->n, s->turn_ends, s->n_turns,
                       s->n_chunks ? s->chunks : NULL, s->n_chunks, keep, s->subj_logits,
                       s->with_taps ? &s->subj_taps : NULL, err);
    backend_set_faults(s->subject, NULL);
    if (rc)
        return rc;
    struct parity_config c = *cfg;
    struct parity_route_replay rr;
    route_none(&rr);
    double *deficit = NULL;
    const float *jsel = s->judge_logits;
    s->jt = &s->judge_taps;
    const int moe_taps = s->subj_taps_ok && hp->n_expert > 0;
    if (moe_taps && (rc = route_replay(s, c.route_tie, &rr, &jsel, &deficit, err)))
        return rc;
    /* an F16-KV subject without faults: its cache's rounding, judged where decidable */
    struct parity_kv_round kr;
    const int kv_judged = s->mode.kv_f16 && !(faults && faults->n);
    if (kv_judged && (rc = kv_round_measure(s, &kr, err))) {
        free(deficit);
        return rc;
    }
    /* each layer of the subject judged on its own input */
    struct parity_forced fo = {0};
    if (!s->forced_off && (rc = forced_measure(s, &fo, err))) {
        free(deficit);
        return rc;
    }
    if (s->forced_off)
        snprintf(fo.why, sizeof fo.why, "not measured: a fault sweep (judged by the logits)");
    rc = judge_routes(jsel, s->subj_logits, s->n_judged, (int)hp->n_vocab, &c, &rr,
                      kv_judged ? &kr : NULL, &fo, s->judged, out);
    out->is_moe_taps = moe_taps;
    out->seq_len = s->n;
    out->n_chunks = s->n_chunks;
    memcpy(out->chunks, s->chunks, sizeof out->chunks);
    out->route_deficit = deficit; /* owned by out from here */
    out->dist = s->dist;
    if (rc) {
        err_set(err, rc, "%s", out->reason);
        return rc;
    }
    mode_format(&s->mode, out->mode, sizeof out->mode);
    out->chat_fallback = s->chat_fallback;
    out->chat_conversation = s->chat_conversation;
    out->prose_tokens = s->n_prose;
    out->prose_judged = 0;
    for (int i = 0; s->is_prose && i < s->n_judged; i++)
        out->prose_judged += s->is_prose[s->judged[i]];
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
        if (!(s->clean_logits = malloc((size_t)s->n_judged * V * sizeof(float))))
            return err_set(err, ERR_ENV, "out of memory for the clean logits (%d x %zu)",
                           s->n_judged, V);
        if ((rc = taps_alloc(&s->clean_taps, hp, s->n, s->n_judged, err)))
            return rc;
        backend_set_faults(s->subject, NULL);
        rc = mode_run_kept(s->subject, s->mode.path, s->tokens, s->n, s->turn_ends, s->n_turns,
                           s->n_chunks ? s->chunks : NULL, s->n_chunks, s->kept, s->clean_logits,
                           &s->clean_taps, err);
        if (rc)
            return rc;
        s->have_clean = 1;
    }
    /* one pass over the logits (the judged rows): how many positions moved, and the first */
    int first_moved = -1;
    for (int i = 0; i < s->n_judged; i++)
        if (memcmp(s->clean_logits + (size_t)i * V, s->subj_logits + (size_t)i * V,
                   V * sizeof(float))) {
            w->n_logit_diff++;
            if (first_moved < 0)
                first_moved = s->judged[i];
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
    const size_t R = (size_t)s->n_judged; /* hidden states: the judged rows */
    for (int l = 0; l < L; l++)
        for (int p = 0, row = 0; p < n; p++) {
            const size_t i = (size_t)l * (size_t)n + (size_t)p;
            int rd = routing && taps_differ_route(&s->clean_taps, &s->subj_taps, i, k);
            const int kept = row < s->n_judged && s->judged[row] == p;
            const size_t h = ((size_t)l * R + (size_t)row) * E;
            int hd = kept && memcmp(s->clean_taps.hidden + h, s->subj_taps.hidden + h,
                                    E * sizeof(float)) != 0;
            row += kept;
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
