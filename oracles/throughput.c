/* throughput.c — see throughput.h. Timing uses CLOCK_MONOTONIC around forward calls only;
 * starvation is read from /proc/<pid>/task/<tid>/schedstat (CPU ns, run-queue wait ns); the
 * verdict is throughput_judge()'s over the samples recorded in the metrics.
 * Start reading: throughput_decide(), then throughput_gate().
 */
#include "oracles/throughput.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/detmath.h"
#include "oracles/parity.h"
#include "oracles/prose.h"

json_t *throughput_settings_json(const struct throughput_config *c)
{
    return json_pack("{s:i, s:i, s:i, s:i, s:f, s:f, s:i, s:f, s:f, s:i, s:{s:f, s:f, s:f}, s:s,"
                     " s:f}",
                     "runs", c->runs, "warmup", c->warmup, "prompt_tokens", c->prompt_tokens,
                     "decode_tokens", c->decode_tokens, "min_prefill_tps", c->min_prefill_tps,
                     "min_decode_tps", c->min_decode_tps, "max_runs", c->max_runs, "max_seconds",
                     c->max_seconds, "max_wait", c->max_wait, "check_positions", c->check_positions,
                     "parity", "min_cosine", c->check_min_cosine, "near_tie", c->check_near_tie,
                     "route_tie", c->check_route_tie, "baseline", c->baseline ? c->baseline : "",
                     "max_regression", c->max_regression);
}

/* ---- statistics ----------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int throughput_median_rank(int n, double conf, double *coverage)
{
    /* P(B <= i) summed in log space: exact enough for n <= a few thousand */
    const double tail = (1 - conf) / 2;
    double cdf = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        cdf += exp(lgamma(n + 1.0) - lgamma(i + 1.0) - lgamma(n - i + 1.0) - n * log(2.0));
        if (cdf > tail)
            break;
        k = i + 1;
    }
    if (coverage) {
        double below = 0; /* P(B <= k - 1) */
        for (int i = 0; i < k; i++)
            below += exp(lgamma(n + 1.0) - lgamma(i + 1.0) - lgamma(n - i + 1.0) - n * log(2.0));
        *coverage = k ? 1 - 2 * below : 0;
    }
    return k;
}

int throughput_stats(const double *x, int n, struct throughput_stats *out)
{
    memset(out, 0, sizeof *out);
    if (n < 1 || n > THROUGHPUT_MAX_RUNS)
        return ERR_INPUT;
    double sorted[THROUGHPUT_MAX_RUNS], sum = 0;
    for (int i = 0; i < n; i++) {
        if (!(x[i] > 0) || !isfinite(x[i]))
            return ERR_INPUT;
        out->samples[i] = sorted[i] = x[i];
        sum += x[i];
    }
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
    out->n = n;
    out->min = sorted[0];
    out->max = sorted[n - 1];
    out->spread = out->max - out->min;
    out->median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    out->mean = sum / n;
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (x[i] - out->mean) * (x[i] - out->mean);
    out->cv = n > 1 ? sqrt(ss / (n - 1)) / out->mean : 0.0;
    const int k = throughput_median_rank(n, THROUGHPUT_CONFIDENCE, &out->coverage);
    out->lo = k ? sorted[k - 1] : 0;
    out->hi = k ? sorted[n - k] : INFINITY;
    return 0;
}

int throughput_ratio(const double *x, int n, const double *base, int m,
                     struct throughput_ratio *out)
{
    out->ratio = NAN;
    out->lo = 0;
    out->hi = INFINITY;
    struct throughput_stats a, b;
    if (n < 1 || m < 1 || throughput_stats(x, n, &a) || throughput_stats(base, m, &b))
        return ERR_INPUT;
    out->ratio = a.median / b.median;
    const long N = (long)n * m;
    const long k = (long)floor(N / 2.0 - 1.96 * sqrt(N * (n + m + 1) / 12.0));
    if (k < 1)
        return 0;
    double *d = malloc((size_t)N * sizeof *d);
    if (!d)
        return ERR_ENV;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++)
            d[(long)i * m + j] = log(x[i]) - log(base[j]);
    qsort(d, (size_t)N, sizeof *d, cmp_double);
    out->lo = exp(d[k - 1]);
    out->hi = exp(d[N - k]);
    free(d);
    return 0;
}

/* ---- the decision --------------------------------------------------------------------------- */

int throughput_starved(const struct throughput_sample *s, double max_wait)
{
    if (isfinite(s->cpu_s) && isfinite(s->wait_s))
        return s->cpu_s + s->wait_s > 0 && s->wait_s / (s->cpu_s + s->wait_s) > max_wait;
    if (isfinite(s->cpu_s) && s->wall_s > 0)
        return s->cpu_s / s->wall_s < 1 - max_wait;
    return 0;
}

static const char *const PHASE[2] = {"prefill", "decode"};

int throughput_decide(const struct throughput_sample *s, int n, const struct throughput_rule *rule,
                      struct throughput_decision *d)
{
    memset(d, 0, sizeof *d);
    d->verdict = GATE_FAIL;
    if (n < 1 || n > THROUGHPUT_MAX_RUNS)
        return ERR_INPUT;
    double x[2][THROUGHPUT_MAX_RUNS], g[2][THROUGHPUT_MAX_RUNS], ub[2][THROUGHPUT_MAX_RUNS];
    int ng = 0;
    for (int i = 0; i < n; i++) {
        x[0][i] = s[i].prefill_tps;
        x[1][i] = s[i].decode_tps;
        for (int p = 0; p < 2; p++) { /* the starvation bound (throughput.h: rule.tokens) */
            const double t = rule->tokens[p] > 0 && x[p][i] > 0 ? rule->tokens[p] / x[p][i] : NAN;
            const double left = t - s[i].wait_s;
            /* waiting not measured: no bound (INFINITY never fails a floor) */
            ub[p][i] = !(s[i].wait_s >= 0) || isnan(t) ? INFINITY
                       : left > 1e-9                   ? rule->tokens[p] / left
                                                       : INFINITY;
        }
        d->timed_s += s[i].wall_s;
        if (throughput_starved(&s[i], rule->max_wait)) {
            d->n_starved++;
        } else {
            g[0][ng] = s[i].prefill_tps;
            g[1][ng++] = s[i].decode_tps;
        }
    }
    d->n = n;
    int pass = 0, fail = -1, undecided = -1, starved = 0;
    for (int p = 0; p < 2; p++) {
        struct throughput_phase *ph = &d->phase[p];
        ph->floor = rule->floor[p];
        if (throughput_stats(x[p], n, &ph->all))
            return ERR_INPUT;
        if (ng)
            throughput_stats(g[p], ng, &ph->granted);
        if (!(ph->floor > 0) || ph->all.lo >= ph->floor)
            ph->state = 1;
        else if (ng && ph->granted.hi < ph->floor)
            ph->state = -1;
        if (rule->tokens[p] > 0 && !throughput_stats(ub[p], n, &ph->bound) && !ph->state &&
            ph->floor > 0 && ph->bound.hi < ph->floor) {
            ph->state = -1; /* slow even with every wait given back: not the host */
            ph->bound_fail = 1;
        }
        /* every run says below, but the runs that had their CPU are too few to say it with
         * confidence: the host, not the engine, is what was measured */
        ph->starved = !ph->state && ph->all.hi < ph->floor;
        if (rule->base[p]) { /* the same rule against the baseline, relative */
            const double bar = 1 - rule->max_regression;
            if (throughput_ratio(x[p], n, rule->base[p], rule->base_n, &ph->vs_all))
                return ERR_INPUT;
            if (ng)
                throughput_ratio(g[p], ng, rule->base[p], rule->base_n, &ph->vs_granted);
            ph->vs_state = ph->vs_all.lo >= bar ? 1 : ng && ph->vs_granted.hi < bar ? -1 : 0;
            ph->vs_starved = !ph->vs_state && ph->vs_all.hi < bar;
            if (ph->state == 1 && ph->vs_state != 1) /* a floor met does not excuse a regression */
                ph->state = ph->vs_state;
            else if (ph->state == 0 && ph->vs_state == -1)
                ph->state = -1;
            ph->starved |= ph->vs_starved;
        }
        pass += ph->state == 1;
        if (ph->state == -1 && fail < 0)
            fail = p;
        if (!ph->state && undecided < 0)
            undecided = p;
        starved |= ph->starved;
    }
    /* fewer than `runs` runs always measure more, whatever they say: the judge FAILs a record of
     * fewer (until 2026-12-03 a clear regression stopped the loop at 3 runs of 6, and the
     * receipt's FAIL said "3 timed runs recorded", not "regressed") */
    if (n < rule->runs) {
        d->more = 1;
        gate_say(d->reason, sizeof d->reason, "undecided after %d runs / %.1f s", n, d->timed_s);
        return 0;
    }
    if (fail >= 0 && d->phase[fail].vs_state == -1 &&
        !(d->phase[fail].floor > 0 && d->phase[fail].granted.n &&
          d->phase[fail].granted.hi < d->phase[fail].floor)) {
        const struct throughput_phase *ph = &d->phase[fail];
        d->verdict = GATE_FAIL;
        gate_say(d->reason, sizeof d->reason,
                 "%s regressed: %.3f x the baseline's median (%.3f-%.3f, 95%% interval of %d runs"
                 " with the CPU granted) is below 1 - max_regression = %.3f",
                 PHASE[fail], ph->vs_granted.ratio, ph->vs_granted.lo, ph->vs_granted.hi,
                 ph->granted.n, 1 - rule->max_regression);
        return 0;
    }
    if (fail >= 0 && d->phase[fail].bound_fail) {
        const struct throughput_phase *ph = &d->phase[fail];
        d->verdict = GATE_FAIL;
        gate_say(
            d->reason, sizeof d->reason,
            "%s is below the floor %g even with every second its threads waited for a CPU given"
            " back: at most %.1f tokens/s (%.1f-%.1f, %.0f%% interval of %d runs; %d starved)",
            PHASE[fail], ph->floor, ph->bound.median, ph->bound.lo, ph->bound.hi,
            100 * ph->bound.coverage, ph->bound.n, d->n_starved);
        return 0;
    }
    if (fail >= 0) {
        const struct throughput_phase *ph = &d->phase[fail];
        d->verdict = GATE_FAIL;
        gate_say(d->reason, sizeof d->reason,
                 "%s %.1f tokens/s (median; %.1f-%.1f, %.0f%% interval of %d runs with the CPU"
                 " granted) is below the floor %g",
                 PHASE[fail], ph->granted.median, ph->granted.lo, ph->granted.hi,
                 100 * ph->granted.coverage, ph->granted.n, ph->floor);
        return 0;
    }
    if (pass == 2 && n >= rule->runs) {
        d->verdict = GATE_PASS;
        gate_say(d->reason, sizeof d->reason,
                 "prefill %.1f tokens/s (%.1f-%.1f), decode %.1f tokens/s (%.1f-%.1f) after %d runs"
                 " (floors %g / %g)",
                 d->phase[0].all.median, d->phase[0].all.lo, d->phase[0].all.hi,
                 d->phase[1].all.median, d->phase[1].all.lo, d->phase[1].all.hi, n, rule->floor[0],
                 rule->floor[1]);
        if (rule->base[0]) {
            const size_t at = strlen(d->reason);
            snprintf(d->reason + at, sizeof d->reason - at,
                     "; vs baseline: prefill %.3fx (%.3f-%.3f), decode %.3fx (%.3f-%.3f)",
                     d->phase[0].vs_all.ratio, d->phase[0].vs_all.lo, d->phase[0].vs_all.hi,
                     d->phase[1].vs_all.ratio, d->phase[1].vs_all.lo, d->phase[1].vs_all.hi);
        }
        return 0;
    }
    if (n < rule->runs || (n < rule->max_runs && d->timed_s < rule->max_seconds)) {
        d->more = 1;
        gate_say(d->reason, sizeof d->reason, "undecided after %d runs / %.1f s", n, d->timed_s);
        return 0;
    }
    const struct throughput_phase *ph = &d->phase[undecided];
    d->verdict = GATE_ERROR;
    if (!(ph->floor > 0 && ph->all.lo < ph->floor) && rule->base[undecided]) {
        gate_say(d->reason, sizeof d->reason,
                 "%s: %s %.3f x the baseline (%.3f-%.3f) vs 1 - max_regression = %.3f after %d"
                 " runs / %.1f s (%d host-starved)",
                 starved ? "host starved" : "inconclusive", PHASE[undecided], ph->vs_all.ratio,
                 ph->vs_all.lo, ph->vs_all.hi, 1 - rule->max_regression, n, d->timed_s,
                 d->n_starved);
        return 0;
    }
    if (starved)
        gate_say(d->reason, sizeof d->reason,
                 "host starved: %d of %d runs waited for a CPU more than %.0f%% of the time they"
                 " asked for; %s %.1f-%.1f tok/s vs floor %g after %d runs / %.1f s is no evidence"
                 " about the engine",
                 d->n_starved, n, 100 * rule->max_wait, PHASE[undecided], ph->all.lo, ph->all.hi,
                 ph->floor, n, d->timed_s);
    else
        gate_say(d->reason, sizeof d->reason,
                 "inconclusive: %.1f-%.1f tok/s vs floor %g (%s) after %d runs / %.1f s",
                 ph->all.lo, ph->all.hi, ph->floor, PHASE[undecided], n, d->timed_s);
    return 0;
}

void throughput_result_free(struct throughput_result *r)
{
    if (!r)
        return;
    json_decref(r->metrics);
    json_decref(r->checks);
    r->metrics = r->checks = NULL;
}

/* ---- the judge ------------------------------------------------------------------------------ */

/* metrics "runs" into s (n of them); -1 when absent, too many, or a rate is not a number. */
static int runs_of(const json_t *metrics, struct throughput_sample *s, uint64_t *seeds, int *n)
{
    const json_t *a = json_object_get(metrics, "runs");
    if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > THROUGHPUT_MAX_RUNS)
        return -1;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *r = json_array_get(a, i);
        const char *seed = json_string_value(json_object_get(r, "seed"));
        char *end = NULL;
        if (gate_metric_num(r, "prefill_tps", &s[i].prefill_tps) ||
            gate_metric_num(r, "decode_tps", &s[i].decode_tps) ||
            gate_metric_num(r, "wall_s", &s[i].wall_s) || !seed || strlen(seed) != 16)
            return -1;
        seeds[i] = strtoull(seed, &end, 16);
        if (*end)
            return -1;
        if (gate_metric_num(r, "cpu_s", &s[i].cpu_s))
            s[i].cpu_s = NAN;
        if (gate_metric_num(r, "wait_s", &s[i].wait_s))
            s[i].wait_s = NAN;
    }
    *n = (int)json_array_size(a);
    return 0;
}

/* The spot-check rule, parity's at one position (the one place it is written: the judge and the
 * printout both call it): 1 good, 0 bad, 2 a ROUTE_TIE. A check of a subject with taps that
 * missed was judged again against the route-tie replay (the numbers are the replay's, refused
 * its refused routes up to the position: any is bad). A tap-less subject's routes are unknown:
 * a miss where the judge's router gap upstream is below route_tie is a ROUTE_TIE, not held to
 * the logit thresholds, counted and capped by the caller. */
static int spot_rule(double cos, double am, double jam, double gap, double route_gap,
                     double refused, double min_cos, double near_tie, double route_tie)
{
    if (refused > 0)
        return 0;
    if (cos >= min_cos && (am == jam || gap < near_tie))
        return 1;
    return isfinite(cos) && route_gap >= 0 && route_gap < route_tie ? 2 : 0;
}

/* One spot check's numbers; -1 when malformed ("judge_route_gap" is optional: dense models, tap
 * subjects and receipts from before it have none, and then no position is a ROUTE_TIE;
 * "route_refused" is the replay's, absent when none ran). */
static int spot_nums(const json_t *c, double *run, double *pos, double *cos, double *am,
                     double *jam, double *gap, double *route_gap, double *refused)
{
    *route_gap = NAN;
    *refused = 0;
    if (gate_metric_num(c, "run", run) || gate_metric_num(c, "pos", pos) ||
        gate_metric_num(c, "cosine", cos) || gate_metric_num(c, "argmax", am) ||
        gate_metric_num(c, "judge_argmax", jam) || gate_metric_num(c, "judge_gap", gap))
        return -1;
    if (json_object_get(c, "judge_route_gap") &&
        !json_is_null(json_object_get(c, "judge_route_gap")) &&
        gate_metric_num(c, "judge_route_gap", route_gap))
        return -1;
    if (json_object_get(c, "route_refused") &&
        (gate_metric_num(c, "route_refused", refused) || !(*refused >= 0)))
        return -1;
    return 0;
}

/* The spot checks: 0 when every run has check_positions good ones (ROUTE_TIEs within the cap);
 * else a FAIL reason in why. */
static int spot_ok(const json_t *metrics, int n_runs, int per_run, int n_pos, double min_cos,
                   double near_tie, double route_tie, json_t *checks, char *why, size_t n)
{
    const json_t *a = json_object_get(metrics, "spot");
    int count[THROUGHPUT_MAX_RUNS] = {0}, bad = 0, ties = 0;
    char first[300] = "";
    if (!json_is_array(a) && per_run > 0) {
        gate_check_bool(checks, "timed runs checked against the judge", 0);
        gate_say(why, n, "throughput metrics lack the spot checks of the timed runs (\"spot\")");
        return -1;
    }
    size_t i;
    const json_t *c;
    json_array_foreach(a, i, c)
    {
        double run, pos, cos, am, jam, gap, rgap, refused;
        if (spot_nums(c, &run, &pos, &cos, &am, &jam, &gap, &rgap, &refused) ||
            !(run >= 0 && run < n_runs && run == floor(run)) || !(pos >= 0 && pos < n_pos)) {
            gate_check_bool(checks, "spot check well formed", 0);
            gate_say(why, n, "throughput spot check %zu is malformed", i);
            return -1;
        }
        count[(int)run]++;
        const int r = spot_rule(cos, am, jam, gap, rgap, refused, min_cos, near_tie, route_tie);
        ties += r == 2;
        if (!r && !bad++)
            snprintf(first, sizeof first,
                     "run %d position %g: cosine %.6f (min %g), argmax %g vs the judge's %g"
                     " (judge's top-2 gap %.3g)%s",
                     (int)run, pos, cos, min_cos, am, jam, gap,
                     refused > 0 ? "; the subject routed beyond the router near tie upstream" : "");
    }
    const double max_ties = floor((double)json_array_size(a) / THROUGHPUT_MAX_ROUTE_TIE_SHARE);
    if (!gate_check_num(checks, "spot_route_ties", ties, "<=", max_ties) && !bad++)
        snprintf(first, sizeof first,
                 "%d route ties (the judge's router gap < %g), more than 1 in %g checks", ties,
                 route_tie, THROUGHPUT_MAX_ROUTE_TIE_SHARE);
    int short_run = -1;
    for (int r = 0; r < n_runs && short_run < 0; r++)
        if (count[r] != per_run)
            short_run = r;
    gate_check_num(checks, "spot_checks_bad", bad, "==", 0);
    if (!gate_check_bool(checks, "every timed run checked", short_run < 0)) {
        gate_say(why, n, "timed run %d has %d spot checks, the settings ask for %d", short_run,
                 count[short_run], per_run);
        return -1;
    }
    if (bad) {
        gate_say(why, n,
                 "timed work is not the judged work: %d of %zu spot checks disagree with the"
                 " judge; first: %s",
                 bad, json_array_size(a), first);
        return -1;
    }
    return 0;
}

enum gate_verdict throughput_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                                   char *why, size_t n)
{
    static const char *const keys[] = {
        "runs",     "prompt_tokens", "decode_tokens", "min_prefill_tps", "min_decode_tps",
        "max_runs", "max_seconds",   "max_wait",      "check_positions"};
    enum { NK = sizeof keys / sizeof keys[0] };
    double v[NK], min_cos, near_tie, route_tie;
    const json_t *par = json_object_get(settings, "parity");
    for (int i = 0; i < NK; i++)
        if (gate_metric_num(settings, keys[i], &v[i])) {
            gate_check_bool(checks, "settings complete", 0);
            gate_say(why, n, "throughput settings lack '%s'", keys[i]);
            return GATE_FAIL;
        }
    if (gate_metric_num(par, "min_cosine", &min_cos) ||
        gate_metric_num(par, "near_tie", &near_tie)) {
        gate_check_bool(checks, "settings complete", 0);
        gate_say(why, n, "throughput settings lack parity.min_cosine / parity.near_tie");
        return GATE_FAIL;
    }
    if (gate_metric_num(par, "route_tie", &route_tie)) /* receipts from before the rule */
        route_tie = 0;
    struct throughput_rule rule = {.floor = {v[3], v[4]},
                                   .runs = (int)v[0],
                                   .max_runs = (int)v[5],
                                   .max_seconds = v[6],
                                   .max_wait = v[7],
                                   .tokens = {(int)v[1], (int)v[2]}};
    const char *bl = json_string_value(json_object_get(settings, "baseline"));
    double base[2][THROUGHPUT_MAX_RUNS];
    const char *refused = NULL;
    if (!bl || gate_metric_num(settings, "max_regression", &rule.max_regression)) {
        gate_check_bool(checks, "settings complete", 0);
        gate_say(why, n, "throughput settings lack 'baseline' / 'max_regression'");
        return GATE_FAIL;
    }
    if (bl[0]) {
        const json_t *b = json_object_get(metrics, "baseline");
        const json_t *bp = json_object_get(b, "prefill_tps"),
                     *bd = json_object_get(b, "decode_tps");
        const char *rec = json_string_value(json_object_get(b, "receipt"));
        refused = json_string_value(json_object_get(b, "refused"));
        const int none = json_is_string(json_object_get(b, "none"));
        if (refused) {
            gate_check_bool(checks, "baseline comparable", 0);
        } else if (none && !strcmp(bl, "previous")) {
            gate_check_bool(checks, "baseline: none earlier (first release of the cell)", 1);
        } else {
            int ok = rec && (!strcmp(bl, "previous") || !strcmp(rec, bl)) &&
                     json_array_size(bp) >= 1 && json_array_size(bp) <= THROUGHPUT_MAX_RUNS &&
                     json_array_size(bp) == json_array_size(bd);
            for (size_t i = 0; ok && i < json_array_size(bp); i++)
                ok = !gate_json_num(json_array_get(bp, i), &base[0][i]) &&
                     !gate_json_num(json_array_get(bd, i), &base[1][i]);
            if (!gate_check_bool(checks, "baseline recorded", ok)) {
                gate_say(why, n,
                         "throughput settings name baseline '%s' but the metrics record no"
                         " comparable baseline rates",
                         bl);
                return GATE_FAIL;
            }
            rule.base[0] = base[0];
            rule.base[1] = base[1];
            rule.base_n = (int)json_array_size(bp);
        }
    }
    struct throughput_sample *sp = malloc(THROUGHPUT_MAX_RUNS * sizeof *sp);
    uint64_t *sd = malloc(THROUGHPUT_MAX_RUNS * sizeof *sd);
    int nr = 0;
    enum gate_verdict verdict = GATE_FAIL;
    if (!sp || !sd) {
        gate_check_bool(checks, "memory", 0);
        gate_say(why, n, "out of memory for the timed samples");
        goto out;
    }
    if (!gate_check_bool(checks, "runs recorded", runs_of(metrics, sp, sd, &nr) == 0)) {
        gate_say(why, n,
                 "throughput metrics lack timed runs (\"runs\": seed, prefill_tps,"
                 " decode_tps, wall_s)");
        goto out;
    }
    double pt = NAN, dt = NAN;
    gate_metric_num(metrics, "prompt_tokens", &pt);
    gate_metric_num(metrics, "decode_tokens", &dt);
    if (!gate_check_num(checks, "prompt_tokens", pt, "==", v[1]) |
        !gate_check_num(checks, "decode_tokens", dt, "==", v[2])) {
        gate_say(why, n, "measured %g prompt / %g decode tokens, settings ask for %g / %g", pt, dt,
                 v[1], v[2]);
        goto out;
    }
    if (!gate_check_num(checks, "timed_runs", nr, ">=", fmax(v[0], THROUGHPUT_MIN_RUNS)) |
        !gate_check_num(checks, "timed_runs_budget", nr, "<=", v[5])) {
        gate_say(why, n,
                 "%d timed runs recorded, a gate needs %g to %g (runs, at least %d, to max_runs)",
                 nr, fmax(v[0], THROUGHPUT_MIN_RUNS), v[5], THROUGHPUT_MIN_RUNS);
        goto out;
    }
    int dup = -1;
    for (int i = 0; i < nr && dup < 0; i++)
        for (int j = 0; j < i; j++)
            if (sd[i] == sd[j])
                dup = i;
    if (!gate_check_bool(checks, "fresh sequence per run", dup < 0)) {
        gate_say(why, n, "timed run %d repeats an earlier run's token sequence (seed %llu)", dup,
                 (unsigned long long)sd[dup]);
        goto out;
    }
    if (spot_ok(metrics, nr, (int)v[8], (int)(v[1] + v[2]), min_cos, near_tie, route_tie, checks,
                why, n))
        goto out;
    struct throughput_decision d;
    if (!gate_check_bool(checks, "rates finite and positive",
                         throughput_decide(sp, nr, &rule, &d) == 0)) {
        gate_say(why, n, "a recorded rate is not finite and positive");
        goto out;
    }
    gate_check_num(checks, "prefill_tps_ci_lo", d.phase[0].all.lo, ">=", rule.floor[0]);
    gate_check_num(checks, "decode_tps_ci_lo", d.phase[1].all.lo, ">=", rule.floor[1]);
    gate_check_num(checks, "starved_runs", d.n_starved, "<=", nr);
    if (d.more) {
        gate_check_bool(checks, "decided or budget spent", 0);
        gate_say(why, n,
                 "the measurement stopped after %d runs / %.1f s, undecided and with budget"
                 " left (%g runs / %g s)",
                 nr, d.timed_s, v[5], v[6]);
        goto out;
    }
    verdict = d.verdict;
    gate_say(why, n, "%s", verdict == GATE_PASS ? "" : d.reason);
    if (verdict == GATE_PASS && refused) { /* named, but not comparable: no evidence either way */
        verdict = GATE_ERROR;
        gate_say(why, n, "cannot compare with the baseline: %s", refused);
    }
out:
    free(sp);
    free(sd);
    return verdict;
}

/* ---- measuring ------------------------------------------------------------------------------ */

static double real_clock(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sum of schedstat (CPU ns, wait ns) over /proc/<pid>/task/<every tid>; -1 when unreadable. */
static int sched_sum(int pid, double *cpu, double *wait)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    struct dirent *e;
    int any = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[320];
        snprintf(p, sizeof p, "/proc/%d/task/%.200s/schedstat", pid, e->d_name);
        FILE *f = fopen(p, "r");
        unsigned long long c = 0, w = 0;
        if (f && fscanf(f, "%llu %llu", &c, &w) == 2) {
            *cpu += (double)c * 1e-9;
            *wait += (double)w * 1e-9;
            any = 1;
        }
        if (f)
            fclose(f);
    }
    closedir(d);
    return any ? 0 : -1;
}

static int real_usage(void *ctx, int child_pid, double *cpu_s, double *wait_s)
{
    (void)ctx;
    double c = 0, w = 0;
    if (sched_sum((int)getpid(), &c, &w) == 0 &&
        (child_pid <= 0 || sched_sum(child_pid, &c, &w) == 0)) {
        *cpu_s = c;
        *wait_s = w;
        return 0;
    }
    /* no schedstat: the CPU this process received, waiting unknown (an exec child's CPU is not
     * visible this way either: not measured) */
    struct rusage ru;
    if (child_pid > 0 || getrusage(RUSAGE_SELF, &ru))
        return -1;
    *cpu_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
             ru.ru_stime.tv_usec * 1e-6;
    *wait_s = NAN;
    return 0;
}

/* What the host was doing: 1-minute load average, and the CPU steal and busy ticks of /proc/stat
 * (all CPUs) so far; fields NAN when unreadable. */
struct host_snap {
    double load1, steal, total;
};

static void host_snap(struct host_snap *h)
{
    h->load1 = h->steal = h->total = NAN;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &h->load1) != 1)
            h->load1 = NAN;
        fclose(f);
    }
    f = fopen("/proc/stat", "r");
    if (f) {
        unsigned long long v[8] = {0};
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]) == 8) {
            h->steal = (double)v[7];
            h->total = 0;
            for (int i = 0; i < 8; i++)
                h->total += (double)v[i];
        }
        fclose(f);
    }
}

static json_t *host_json(const struct host_snap *a, const struct host_snap *b)
{
    char gov[64] = "unreadable";
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "r");
    if (f) {
        if (fgets(gov, sizeof gov, f))
            gov[strcspn(gov, "\n")] = '\0';
        else
            snprintf(gov, sizeof gov, "unreadable");
        fclose(f);
    }
    const double dt = b->total - a->total;
    return json_pack("{s:o, s:o, s:o, s:s, s:i}", "loadavg_1m_start", parity_json_number(a->load1),
                     "loadavg_1m_end", parity_json_number(b->load1), "steal_fraction",
                     parity_json_number(dt > 0 ? (b->steal - a->steal) / dt : NAN), "governor", gov,
                     "cpus_online", (int)sysconf(_SC_NPROCESSORS_ONLN));
}

/* Cosine, argmax and the judge's top-2 gap of one position. */
static json_t *spot_json(int run, int pos, const float *test, const float *ref, size_t V)
{
    double dot = 0, nt = 0, nr = 0;
    size_t am = 0, jam = 0;
    for (size_t i = 0; i < V; i++) {
        dot += (double)test[i] * ref[i];
        nt += (double)test[i] * test[i];
        nr += (double)ref[i] * ref[i];
        if (!(test[i] <= test[am])) /* a NaN wins, and fails the cosine anyway */
            am = i;
        if (ref[i] > ref[jam])
            jam = i;
    }
    double second = -INFINITY;
    for (size_t i = 0; i < V; i++)
        if (i != jam && ref[i] > second)
            second = ref[i];
    const double cos = nt > 0 && nr > 0 ? dot / sqrt(nt * nr) : NAN;
    return json_pack("{s:i, s:i, s:o, s:I, s:I, s:o}", "run", run, "pos", pos, "cosine",
                     parity_json_number(cos), "argmax", (json_int_t)am, "judge_argmax",
                     (json_int_t)jam, "judge_gap", parity_json_number(ref[jam] - second));
}

/* The route-tie replay for one timed run's spot checks (docs/gates.md, "Routing near ties"):
 * the subject runs the sequence again, untimed, on the same path with taps; the judge runs it
 * forced to the subject's near-tie expert choices (parity_replay_run); every check of the run
 * (mine: its JSON rows, check c[k] at pos[c[k]], the subject's logits at keep + c[k] * V) is
 * judged again against the replayed judge and records the replay's numbers. */
struct spot_replay {
    struct backend_taps subj, judge; /* the subject's routes; the replay's force arrays */
    float *logits;                   /* (P + D, V) */
    double *deficit;                 /* (P + D) */
    int *refused;                    /* (P + D) */
};

static void spot_replay_free(struct spot_replay *x)
{
    parity_replay_free(&x->subj);
    parity_replay_free(&x->judge);
    free(x->logits);
    free(x->deficit);
    free(x->refused);
    memset(x, 0, sizeof *x);
}

static int spot_replay_run(struct spot_replay *x, struct backend *b, const struct mode *mode,
                           struct backend *jb, const struct model *m, const int32_t *tokens, int P,
                           int D, const int *turn_ends, double tol, double min_cos, int run,
                           json_t *mine, const int *cs, const int *pos, const float *keep,
                           struct gate_err *err)
{
    const struct model_hparams *hp = &m->hp;
    const size_t V = hp->n_vocab, N = (size_t)(P + D);
    int rc;
    if (!x->logits) {
        x->logits = malloc(N * V * sizeof(float));
        x->deficit = malloc(N * sizeof(double));
        x->refused = malloc(N * sizeof(int));
        if (!x->logits || !x->deficit || !x->refused)
            return err_set(err, ERR_ENV, "out of memory for the spot checks' route-tie replay");
        if ((rc = parity_routes_alloc(&x->subj, hp, (int)N, err)) ||
            (rc = parity_replay_alloc(&x->judge, hp, (int)N, err)))
            return rc;
    }
    /* the timed run's calls: the path over the prompt, then one forward per decode token (the
     * prefill path's batched half as one chunk; the chat path's last turn is a reply, extended
     * over the decode tokens) */
    int ends[THROUGHPUT_CHAT_TURNS], half = P / 2 > 0 ? P / 2 : 1;
    memcpy(ends, turn_ends, sizeof ends);
    ends[THROUGHPUT_CHAT_TURNS - 1] = (int)N;
    if ((rc = mode_run_split(b, mode->path, tokens, (int)N, ends, THROUGHPUT_CHAT_TURNS,
                             mode->path == MODE_PREFILL ? &half : NULL, 1, x->logits, &x->subj,
                             err)))
        return rc;
    /* the re-run must be the timed run: its logits at the checked positions agree with the
     * timed ones (else the routes it recorded are not the timed run's: every check is bad) */
    int rerun_differs = 0;
    for (size_t k = 0; k < json_array_size(mine); k++) {
        const int c = cs[k], p = pos[c];
        json_t *a = spot_json(run, p, keep + (size_t)c * V, x->logits + (size_t)p * V, V);
        double cs_ = NAN, am = -1, jam = -2;
        gate_metric_num(a, "cosine", &cs_);
        gate_metric_num(a, "argmax", &am);
        gate_metric_num(a, "judge_argmax", &jam);
        rerun_differs |= !(cs_ >= min_cos) || am != jam;
        json_decref(a);
    }
    struct parity_route_replay rr;
    if ((rc = parity_replay_run(jb, m, tokens, (int)N, &x->subj, tol, &x->judge, x->logits, &rr,
                                x->deficit, x->refused, err)))
        return rc;
    for (size_t k = 0; k < json_array_size(mine); k++) {
        const int c = cs[k], p = pos[c];
        int forced = 0, refused = 0;
        for (int q = 0; q <= p; q++)
            forced += !isnan(x->deficit[q]), refused += x->refused[q];
        json_t *j = spot_json(run, p, keep + (size_t)c * V, x->logits + (size_t)p * V, V);
        if (!j)
            return err_set(err, ERR_ENV, "throughput: out of memory for a spot check's record");
        json_object_set_new(j, "replayed_positions", json_integer(forced));
        /* a re-run that is not the timed run counts as a refused route: no replay stands */
        json_object_set_new(j, "route_refused", json_integer(refused + rerun_differs));
        if (rerun_differs)
            json_object_set_new(j, "rerun_differs", json_true());
        json_array_set_new(mine, k, j);
    }
    return 0;
}

static int cmp_int(const void *a, const void *b)
{
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

int throughput_config_check(const struct throughput_config *cfg, enum mode_path path,
                            struct gate_err *err)
{
    /* each field's own range is its row's in the gate table (harness/gatedef.c), refused where
     * the value is read; here: the rules between fields and the capacities of this file's arrays
     * (which the rows' bounds are written with) */
    const int P = cfg->prompt_tokens;
    if (cfg->runs < 1 || cfg->max_runs < cfg->runs || cfg->max_runs > THROUGHPUT_MAX_RUNS ||
        cfg->check_positions > THROUGHPUT_MAX_CHECKS)
        return err_set(err, ERR_INPUT,
                       "throughput: runs %d (>= 1) and max_runs %d (runs to %d), check_positions %d"
                       " (at most %d)",
                       cfg->runs, cfg->max_runs, THROUGHPUT_MAX_RUNS, cfg->check_positions,
                       THROUGHPUT_MAX_CHECKS);
    if (path == MODE_CHAT && P < THROUGHPUT_CHAT_TURNS)
        return err_set(err, ERR_INPUT,
                       "throughput: the chat path needs prompt_tokens >= %d (six turns), got %d",
                       THROUGHPUT_CHAT_TURNS, P);
    return 0;
}

int throughput_gate(const struct model *m, const struct mode *mode,
                    const struct throughput_config *cfg, struct throughput_result *out,
                    struct gate_err *err)
{
    struct backend *b = NULL, *jb = NULL;
    int32_t *tokens = NULL;
    struct tok *tk = NULL;
    int *slot = NULL;
    float *logits = NULL, *keep = NULL, *jl = NULL;
    struct backend_taps jt = {0}; /* MoE: the judge's router taps (see the spot checks) */
    struct spot_replay sr = {0};  /* MoE subjects with taps: the spot checks' route-tie replay */
    json_t *settings = NULL, *runs = NULL, *spot = NULL, *base_json = NULL;
    struct throughput_sample *s = NULL;
    struct throughput_rule rule;
    memset(&rule, 0, sizeof rule);
    const int P = cfg->prompt_tokens, D = cfg->decode_tokens, C = cfg->check_positions;
    int turn_ends[THROUGHPUT_CHAT_TURNS];
    int rc = 0, n = 0;
    double (*clk)(void *) = cfg->clock ? cfg->clock : real_clock;
    int (*use)(void *, int, double *, double *) = cfg->usage ? cfg->usage : real_usage;
    memset(out, 0, sizeof *out);
    out->verdict = GATE_FAIL;
    mode_format(mode, out->mode, sizeof out->mode);
    if ((rc = throughput_config_check(cfg, mode->path, err)))
        return rc;
    for (int i = 0; i < THROUGHPUT_CHAT_TURNS; i++)
        turn_ends[i] = (int)((long)P * (i + 1) / THROUGHPUT_CHAT_TURNS);
    switch (mode->path) {
    case MODE_DECODE:
        snprintf(out->prompt_path, sizeof out->prompt_path,
                 "decode: %d prompt tokens one forward each", P);
        break;
    case MODE_PREFILL:
        snprintf(out->prompt_path, sizeof out->prompt_path,
                 "prefill: %d tokens in one batched forward, %d one forward each", P / 2,
                 P - P / 2);
        break;
    default:
        snprintf(out->prompt_path, sizeof out->prompt_path,
                 "chat: %d tokens in 6 turns (user turns batched, replies one forward per token)"
                 " on one cache",
                 P);
    }
    out->prompt_tokens = P;
    out->decode_tokens = D;
    out->warmup = cfg->warmup;
    uint64_t seed = cfg->seed;
    if (!seed && getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
        return err_set(err, ERR_ENV, "throughput: no random seed for the token sequences");
    const double t0 = clk(cfg->hook_ctx);
    /* F16 KV: the cell's `kv: f16` (mode->kv_f16) or gate bench --kv f16 (cfg->kv_f16); the
     * backend refuses it unless it has one */
    struct mode kvm = *mode;
    kvm.kv_f16 = mode->kv_f16 || cfg->kv_f16;
    if ((rc = mode_open(&b, &kvm, m, P + D, cfg->n_threads, NULL, err)))
        goto done;
    out->load_s = clk(cfg->hook_ctx) - t0;
    if (C && (rc = mode_open_judge(&jb, m, P + D, cfg->n_threads, err)))
        goto done;
    const size_t V = m->hp.n_vocab;
    /* MoE: the judge's router taps over one spot check's forward (at most P + D tokens), for the
     * ROUTE_TIE rule of the spot checks */
    const int L = (int)m->hp.n_layer;
    if (C && m->hp.n_expert > 0) {
        jt.router_kth = malloc((size_t)L * (size_t)(P + D) * sizeof *jt.router_kth);
        jt.router_k1th = malloc((size_t)L * (size_t)(P + D) * sizeof *jt.router_k1th);
        if (!jt.router_kth || !jt.router_k1th) {
            rc = err_set(err, ERR_ENV, "out of memory for the judge's router taps");
            goto done;
        }
        backend_set_taps(jb, &jt);
    }
    const int replay = C && m->hp.n_expert > 0 && backend_records_taps(b);
    tokens = malloc((size_t)(P + D) * sizeof *tokens);
    tk = prose_model_tok(m); /* the runs' sequences look like parity's: half prose */
    logits = malloc((size_t)P * V * sizeof *logits);
    keep = malloc(((size_t)C + 1) * V * sizeof *keep);
    jl = malloc(V * sizeof *jl);
    slot = malloc((size_t)D * sizeof *slot);
    s = calloc((size_t)cfg->max_runs, sizeof *s);
    runs = json_array();
    spot = json_array();
    if (!tokens || !logits || !keep || !jl || !slot || !s || !runs || !spot) {
        rc = err_set(err, ERR_ENV, "out of memory for %d tokens of logits", P);
        goto done;
    }
    struct backend_session_info si;
    backend_session_info(mode->session, &si);
    const int child = si.pid; /* an external engine's child: its CPU time is the subject's */
    struct host_snap h0, h1;
    host_snap(&h0);
    rule = (struct throughput_rule){.floor = {cfg->min_prefill_tps, cfg->min_decode_tps},
                                    .runs = cfg->runs,
                                    .max_runs = cfg->max_runs,
                                    .max_seconds = cfg->max_seconds,
                                    .max_wait = cfg->max_wait,
                                    .max_regression = cfg->max_regression,
                                    .tokens = {P, D}};
    if (cfg->baseline && cfg->baseline[0]) {
        base_json = cfg->base_json ? json_deep_copy(cfg->base_json)
                                   : json_pack("{s:s}", "refused", "no baseline was looked up");
        const json_t *bp = json_object_get(base_json, "prefill_tps"),
                     *bd = json_object_get(base_json, "decode_tps");
        const size_t bn = json_array_size(bp);
        if (bn >= 1 && bn <= THROUGHPUT_MAX_RUNS && bn == json_array_size(bd)) {
            double *bb = calloc(2 * bn, sizeof *bb);
            int ok = bb != NULL;
            for (size_t i = 0; ok && i < bn; i++)
                ok = !gate_json_num(json_array_get(bp, i), &bb[i]) &&
                     !gate_json_num(json_array_get(bd, i), &bb[bn + i]);
            if (ok) {
                rule.base[0] = bb;
                rule.base[1] = bb + bn;
                rule.base_n = (int)bn;
            } else {
                free(bb);
            }
        }
    }
    for (int r = 0;; r++) {
        const int timed = r >= cfg->warmup, run = r - cfg->warmup;
        uint64_t st = seed ^ (0x9E3779B97F4A7C15ULL * (uint64_t)(r + 1));
        const uint64_t run_seed = det_splitmix64(&st);
        if ((rc = prose_mixed_tokens(tk, run_seed, (uint32_t)V, P + D, tokens, NULL, NULL, err)))
            goto done;
        /* the checked positions: even checks in the prompt, odd in the decode phase; unknown
         * to the engine until it has answered them */
        int pos[THROUGHPUT_MAX_CHECKS], alias[THROUGHPUT_MAX_CHECKS];
        for (int t = 0; t < D; t++)
            slot[t] = -1;
        for (int c = 0; timed && c < C; c++) {
            const uint64_t u = det_splitmix64(&st);
            pos[c] = c % 2 == 0 ? (int)(u % (uint64_t)P) : P + (int)(u % (uint64_t)D);
            alias[c] = c;
            if (c % 2 && slot[pos[c] - P] >= 0)
                alias[c] = slot[pos[c] - P]; /* the same step twice: one slot */
            else if (c % 2)
                slot[pos[c] - P] = c;
        }
        double c0 = NAN, w0 = NAN, c1 = NAN, w1 = NAN;
        if (use(cfg->hook_ctx, child, &c0, &w0))
            c0 = w0 = NAN;
        const double a = clk(cfg->hook_ctx);
        /* the mode's own path from an empty cache (mode_run truncates first) */
        if ((rc =
                 mode_run(b, mode->path, tokens, P, turn_ends, THROUGHPUT_CHAT_TURNS, logits, err)))
            goto done;
        const double mid = clk(cfg->hook_ctx);
        for (int t = 0; t < D; t++) {
            /* not into logits: the prompt's rows are checked after the run */
            float *dst = keep + (size_t)(slot[t] >= 0 ? slot[t] : C) * V;
            if ((rc = backend_forward(b, tokens + P + t, 1, P + t, dst, err)))
                goto done;
        }
        const double end = clk(cfg->hook_ctx);
        if (use(cfg->hook_ctx, child, &c1, &w1))
            c1 = w1 = NAN;
        if (timed) {
            struct throughput_sample *x = &s[run];
            x->prefill_tps = P / (mid - a > 1e-9 ? mid - a : 1e-9);
            x->decode_tps = D / (end - mid > 1e-9 ? end - mid : 1e-9);
            x->wall_s = end - a;
            x->cpu_s = c1 - c0;
            x->wait_s = w1 - w0;
            if (!(x->cpu_s >= 0))
                x->cpu_s = NAN;
            if (!(x->wait_s >= 0))
                x->wait_s = NAN;
            char hex[17];
            snprintf(hex, sizeof hex, "%016llx", (unsigned long long)run_seed);
            json_array_append_new(runs, json_pack("{s:s, s:o, s:o, s:o, s:o, s:o}", "seed", hex,
                                                  "prefill_tps", parity_json_number(x->prefill_tps),
                                                  "decode_tps", parity_json_number(x->decode_tps),
                                                  "wall_s", parity_json_number(x->wall_s), "cpu_s",
                                                  parity_json_number(x->cpu_s), "wait_s",
                                                  parity_json_number(x->wait_s)));
            /* the spot checks: prompt positions from the prompt's logits, decode positions from
             * their slots; the judge over the same tokens, one forward_last per position */
            for (int c = 0; c < C; c++)
                if (c % 2 == 0)
                    memcpy(keep + (size_t)c * V, logits + (size_t)pos[c] * V, V * sizeof *logits);
                else if (alias[c] != c)
                    memcpy(keep + (size_t)c * V, keep + (size_t)alias[c] * V, V * sizeof *keep);
            int order[THROUGHPUT_MAX_CHECKS];
            for (int c = 0; c < C; c++)
                order[c] = pos[c] * THROUGHPUT_MAX_CHECKS + c;
            qsort(order, (size_t)C, sizeof *order, cmp_int);
            int n_past = 0, cs[THROUGHPUT_MAX_CHECKS], miss = 0;
            json_t *mine = json_array();
            if (!mine) {
                rc = err_set(err, ERR_ENV, "throughput: out of memory for the spot checks' record");
                goto done;
            }
            /* MoE, tap-less subject: the judge's least router gap over every layer and every
             * position up to n_past - 1: a near tie anywhere upstream may send the subject to
             * the other expert there, and every later position reads that position's keys and
             * values */
            double route_gap = NAN;
            if (C && (rc = backend_truncate(jb, 0, err))) {
                json_decref(mine);
                goto done;
            }
            for (int k = 0; k < C; k++) {
                const int c = order[k] % THROUGHPUT_MAX_CHECKS, p = pos[c];
                if (p + 1 > n_past) {
                    const int cnt = p + 1 - n_past;
                    if ((rc = backend_forward_last(jb, tokens + n_past, cnt, n_past, jl, err))) {
                        json_decref(mine);
                        goto done;
                    }
                    n_past = p + 1;
                    for (size_t i = 0; jt.router_kth && i < (size_t)L * (size_t)cnt; i++) {
                        const double g = (double)jt.router_kth[i] - jt.router_k1th[i];
                        route_gap = isnan(route_gap) || g < route_gap ? g : route_gap;
                    }
                }
                json_t *j = spot_json(run, p, keep + (size_t)c * V, jl, V);
                if (j && !isnan(route_gap) && !replay)
                    json_object_set_new(j, "judge_route_gap", parity_json_number(route_gap));
                double r_, p_, cos, am, jam, gap, rg, ref;
                miss |= !j || spot_nums(j, &r_, &p_, &cos, &am, &jam, &gap, &rg, &ref) ||
                        spot_rule(cos, am, jam, gap, NAN, ref, cfg->check_min_cosine,
                                  cfg->check_near_tie, cfg->check_route_tie) != 1;
                cs[k] = c;
                out->n_checks++;
                json_array_append_new(mine, j);
            }
            if (replay && miss) {
                rc = spot_replay_run(&sr, b, mode, jb, m, tokens, P, D, turn_ends,
                                     cfg->check_route_tie, cfg->check_min_cosine, run, mine, cs,
                                     pos, keep, err);
                backend_set_taps(jb, &jt); /* mode_judge cleared them */
                out->n_check_replays++;
            }
            json_array_extend(spot, mine);
            json_decref(mine);
            if (rc)
                goto done;
            n = run + 1;
        }
        const int stop =
            timed &&
            ((throughput_decide(s, n, &rule, &out->decision) == 0 && !out->decision.more) ||
             n >= cfg->max_runs); /* rates not finite: the judge says so */
        if (cfg->progress)        /* the runs planned so far: one more while undecided */
            cfg->progress(cfg->progress_ctx, r + 1,
                          cfg->warmup + (n < cfg->runs ? cfg->runs
                                         : stop        ? n
                                                       : n + 1));
        if (stop)
            break;
    }
    host_snap(&h1);
    struct backend_info info;
    backend_info(b, &info);
    snprintf(out->backend, sizeof out->backend, "%s", info.backend);
    snprintf(out->device, sizeof out->device, "%s", info.device);
    {
        double pre[THROUGHPUT_MAX_RUNS], dec[THROUGHPUT_MAX_RUNS];
        for (int i = 0; i < n; i++)
            pre[i] = s[i].prefill_tps, dec[i] = s[i].decode_tps;
        throughput_stats(pre, n, &out->prefill);
        throughput_stats(dec, n, &out->decode);
    }
    out->metrics = throughput_result_json(out);
    out->checks = json_array();
    settings = throughput_settings_json(cfg);
    if (!out->metrics || !out->checks || !settings) {
        rc = err_set(err, ERR_ENV, "throughput: out of memory for the gate's metrics");
        goto done;
    }
    json_object_set(out->metrics, "runs", runs);
    if (base_json) {
        json_object_set(out->metrics, "baseline", base_json);
        if (rule.base_n) {
            json_t *vs = json_object();
            for (int p = 0; p < 2; p++) {
                const struct throughput_ratio *q = &out->decision.phase[p].vs_all;
                json_object_set_new(
                    vs, PHASE[p],
                    json_pack("{s:o, s:o, s:o}", "ratio", parity_json_number(q->ratio), "lo",
                              parity_json_number(q->lo), "hi", parity_json_number(q->hi)));
            }
            json_object_set_new(out->metrics, "vs_baseline", vs);
        }
    }
    json_object_set(out->metrics, "spot", spot);
    json_object_set_new(out->metrics, "host", host_json(&h0, &h1));
    json_object_set_new(out->metrics, "starved_runs", json_integer(out->decision.n_starved));
    json_object_set_new(out->metrics, "timed_s", parity_json_number(out->decision.timed_s));
    json_object_set_new(
        out->metrics, "starvation",
        json_string(isfinite(s[0].wait_s)  ? (child ? "measured: run-queue wait of gate's and the"
                                                      " engine child's threads (schedstat)"
                                                    : "measured: run-queue wait of the engine's"
                                                      " threads (schedstat)")
                    : isfinite(s[0].cpu_s) ? "CPU time only (getrusage): waiting not measured"
                                           : "not measured"));
    char why[400] = "";
    out->verdict = throughput_judge(settings, out->metrics, out->checks, why, sizeof why);
    out->pass = out->verdict == GATE_PASS;
    for (size_t i = 0; i < json_array_size(spot); i++) {
        const json_t *c = json_array_get(spot, i);
        double run, pos, cos = NAN, am = 0, jam = 0, gap = 0, rgap, refused;
        spot_nums(c, &run, &pos, &cos, &am, &jam, &gap, &rgap, &refused);
        const int r = spot_rule(cos, am, jam, gap, rgap, refused, cfg->check_min_cosine,
                                cfg->check_near_tie, cfg->check_route_tie);
        out->n_check_bad += r == 0;
        out->n_check_route_tie += r == 2;
    }
    if (out->pass)
        snprintf(out->reason, sizeof out->reason, "PASS: %s", out->decision.reason);
    else
        snprintf(out->reason, sizeof out->reason, "%s: %.400s", gate_verdict_name(out->verdict),
                 why);
done:
    tok_free(tk);
    free((double *)rule.base[0]);
    json_decref(base_json);
    json_decref(settings);
    json_decref(runs);
    json_decref(spot);
    free(tokens);
    free(logits);
    free(keep);
    free(jl);
    free(jt.router_kth);
    free(jt.router_k1th);
    spot_replay_free(&sr);
    free(slot);
    free(s);
    backend_close(jb);
    backend_close(b);
    return rc;
}

static json_t *stats_json(const struct throughput_stats *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "median_tps", parity_json_number(s->median));
    json_object_set_new(o, "ci_lo_tps", parity_json_number(s->lo));
    json_object_set_new(o, "ci_hi_tps", parity_json_number(s->hi));
    json_object_set_new(o, "ci_coverage", parity_json_number(s->coverage));
    json_object_set_new(o, "min_tps", parity_json_number(s->min));
    json_object_set_new(o, "max_tps", parity_json_number(s->max));
    json_object_set_new(o, "spread_tps", parity_json_number(s->spread));
    json_object_set_new(o, "cv", parity_json_number(s->cv));
    return o;
}

json_t *throughput_result_json(const struct throughput_result *r)
{
    if (r->metrics)
        return json_deep_copy(r->metrics);
    json_t *o = json_object();
    json_object_set_new(o, "mode", json_string(r->mode));
    json_object_set_new(o, "backend", json_string(r->backend));
    json_object_set_new(o, "device", json_string(r->device));
    json_object_set_new(o, "prompt_path", json_string(r->prompt_path));
    json_object_set_new(o, "prompt_tokens", json_integer(r->prompt_tokens));
    json_object_set_new(o, "decode_tokens", json_integer(r->decode_tokens));
    json_object_set_new(o, "warmup", json_integer(r->warmup));
    json_object_set_new(o, "confidence", json_real(THROUGHPUT_CONFIDENCE));
    json_object_set_new(o, "load_s", parity_json_number(r->load_s));
    json_object_set_new(o, "prefill", stats_json(&r->prefill));
    json_object_set_new(o, "decode", stats_json(&r->decode));
    return o;
}

void throughput_print(FILE *f, const struct throughput_result *r)
{
    fprintf(f, "throughput %s on %s (%s): load (backend open) %.3f s (not counted)\n", r->mode,
            r->backend, r->device, r->load_s);
    fprintf(f, "  prompt path: %s; then %d decode steps; %d warm-up run%s discarded\n",
            r->prompt_path, r->decode_tokens, r->warmup, r->warmup == 1 ? "" : "s");
    const struct throughput_stats *s[2] = {&r->prefill, &r->decode};
    for (int i = 0; i < 2; i++) {
        fprintf(f, "  %-8s %10.2f tokens/s median of %d, ", i ? "decode" : "prefill", s[i]->median,
                s[i]->n);
        if (s[i]->coverage > 0)
            fprintf(f, "%.2f-%.2f (%.1f%% interval of the median)", s[i]->lo, s[i]->hi,
                    100 * s[i]->coverage);
        else
            fprintf(f, "no %.0f%% interval from %d runs (6 needed)", 100 * THROUGHPUT_CONFIDENCE,
                    s[i]->n);
        fprintf(f, "; min %.2f, max %.2f, CV %.1f%%\n", s[i]->min, s[i]->max, 100 * s[i]->cv);
    }
    const json_t *vs = json_object_get(r->metrics, "vs_baseline");
    const json_t *bl = json_object_get(r->metrics, "baseline");
    if (vs)
        for (int i = 0; i < 2; i++) {
            const json_t *q = json_object_get(vs, i ? "decode" : "prefill");
            double x = NAN, lo = NAN, hi = NAN;
            gate_metric_num(q, "ratio", &x);
            gate_metric_num(q, "lo", &lo);
            gate_metric_num(q, "hi", &hi);
            fprintf(f, "  %-8s %.3f x baseline %.16s... (%s): %.3f-%.3f (95%% interval)\n",
                    i ? "decode" : "prefill", x, json_string_value(json_object_get(bl, "receipt")),
                    json_string_value(json_object_get(bl, "version")), lo, hi);
        }
    else if (json_object_get(bl, "refused"))
        fprintf(f, "  baseline refused: %s\n", json_string_value(json_object_get(bl, "refused")));
    fprintf(f,
            "  %d host-starved run%s; %d of %d spot checks against the judge disagree (%d run%s"
            " judged against the route-tie replay; %d route tie%s excused)\n",
            r->decision.n_starved, r->decision.n_starved == 1 ? "" : "s", r->n_check_bad,
            r->n_checks, r->n_check_replays, r->n_check_replays == 1 ? "" : "s",
            r->n_check_route_tie, r->n_check_route_tie == 1 ? "" : "s");
    fprintf(f, "  %s\n", r->reason);
}
