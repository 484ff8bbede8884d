/* gates.c — the check helpers every judge uses, the judges of the capability and parity gates,
 * and the checks common to every gate (its error, what ran). See gates.h.
 *
 * A judge reads only the settings and metrics objects as a receipt records them, so the run and
 * the release check reach the same verdict from the same bytes. Numbers in metrics may be the
 * strings "NaN"/"Inf"/"-Inf" (receipts cannot hold non-finite JSON numbers); every comparison
 * with a non-finite number fails.
 * Start reading: gate_judge_common(), then parity_gate_judge().
 */
#include "oracles/gates.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const VERDICTS[] = {"PASS", "FAIL", "ERROR"};

const char *gate_verdict_name(enum gate_verdict v)
{
    return (v >= GATE_PASS && v <= GATE_ERROR) ? VERDICTS[v] : "?";
}

int gate_verdict_parse(const char *s)
{
    for (int i = 0; s && i < 3; i++)
        if (!strcmp(s, VERDICTS[i]))
            return i;
    return -1;
}

static json_t *number(double x)
{
    if (isnan(x))
        return json_string("NaN");
    if (isinf(x))
        return json_string(x > 0 ? "Inf" : "-Inf");
    return json_real(x);
}

int gate_check_num(json_t *checks, const char *metric, double value, const char *op,
                   double threshold)
{
    int pass = 0;
    if (isfinite(value) && isfinite(threshold)) {
        if (!strcmp(op, ">="))
            pass = value >= threshold;
        else if (!strcmp(op, "<="))
            pass = value <= threshold;
        else if (!strcmp(op, ">"))
            pass = value > threshold;
        else if (!strcmp(op, "<"))
            pass = value < threshold;
        else if (!strcmp(op, "=="))
            pass = value == threshold;
    }
    json_array_append_new(checks, json_pack("{s:s, s:o, s:s, s:o, s:b}", "metric", metric, "value",
                                            number(value), "op", op, "threshold", number(threshold),
                                            "pass", pass));
    return pass;
}

int gate_check_bool(json_t *checks, const char *metric, int value)
{
    json_array_append_new(checks,
                          json_pack("{s:s, s:b, s:s, s:b, s:b}", "metric", metric, "value",
                                    value != 0, "op", "==", "threshold", 1, "pass", value != 0));
    return value != 0;
}

int gate_check_str(json_t *checks, const char *metric, const char *value, const char *want)
{
    int pass = value && want && !strcmp(value, want);
    json_array_append_new(checks, json_pack("{s:s, s:s, s:s, s:s, s:b}", "metric", metric, "value",
                                            value ? value : "", "op", "==", "threshold",
                                            want ? want : "", "pass", pass));
    return pass;
}

int gate_json_num(const json_t *v, double *out)
{
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return 0;
    }
    const char *s = json_string_value(v);
    if (!s)
        return -1;
    if (!strcmp(s, "NaN"))
        *out = NAN;
    else if (!strcmp(s, "Inf"))
        *out = INFINITY;
    else if (!strcmp(s, "-Inf"))
        *out = -INFINITY;
    else
        return -1;
    return 0;
}

int gate_metric_num(const json_t *obj, const char *key, double *out)
{
    return gate_json_num(json_object_get(obj, key), out);
}

static int why_set(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Keep the first reason only (the first failing check explains the verdict best). */
static int why_set(char *why, size_t n, const char *fmt, ...)
{
    if (!why || !n || why[0])
        return 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return 0;
}

/* ---- what ran -------------------------------------------------------------------------------- */

enum gate_verdict gate_judge_ran(const char *mode, const json_t *metrics, json_t *checks, char *why,
                                 size_t n)
{
    const json_t *ran = json_object_get(metrics, "ran");
    char backend[16] = "";
    const char *dot = mode ? strchr(mode, '.') : NULL;
    if (dot && (size_t)(dot - mode) < sizeof backend)
        snprintf(backend, sizeof backend, "%.*s", (int)(dot - mode), mode);
    const char *ran_backend = json_string_value(json_object_get(ran, "backend"));
    const char *device = json_string_value(json_object_get(ran, "device"));
    double tokens = 0, launches = 0;
    if (!json_is_object(ran) || !ran_backend || !device ||
        gate_metric_num(ran, "tokens", &tokens) ||
        gate_metric_num(ran, "kernel_launches", &launches)) {
        gate_check_bool(checks, "ran recorded", 0);
        why_set(why, n, "the gate did not record what ran (metrics.ran)");
        return GATE_FAIL;
    }
    int ok = gate_check_str(checks, "ran.backend", ran_backend, backend);
    ok &= gate_check_num(checks, "ran.tokens", tokens, ">", 0);
    const int is_cuda = !strcmp(backend, "cuda"), cpu_device = !strncmp(device, "cpu", 3);
    if (is_cuda) {
        ok &= gate_check_num(checks, "ran.kernel_launches", launches, ">", 0);
        ok &= gate_check_bool(checks, "ran.device is a GPU", !cpu_device);
    } else if (!strcmp(backend, "exec")) {
        /* an engine gate did not build names its own device (docs/exec.md: gate cannot measure
         * it, the receipt records its word); gate counts no launches of its own */
        ok &= gate_check_num(checks, "ran.kernel_launches", launches, "<=", 0);
        ok &= gate_check_bool(checks, "ran.device named by the engine", device[0] != '\0');
    } else {
        ok &= gate_check_num(checks, "ran.kernel_launches", launches, "<=", 0);
        ok &= gate_check_bool(checks, "ran.device is the CPU", cpu_device);
    }
    if (!ok)
        why_set(why, n,
                "asked for %s but backend '%s' ran on '%s' (%.0f tokens, %.0f kernel"
                " launches)",
                mode ? mode : "?", ran_backend, device, tokens, launches);
    return ok ? GATE_PASS : GATE_FAIL;
}

/* ---- capability ------------------------------------------------------------------------------ */

enum gate_verdict capability_gate_judge(const json_t *settings, const json_t *metrics,
                                        json_t *checks, char *why, size_t n)
{
    (void)settings;
    double forwards = 0;
    const json_t *ran = json_object_get(metrics, "ran");
    if (gate_metric_num(ran, "forwards", &forwards)) {
        gate_check_bool(checks, "ran.forwards recorded", 0);
        why_set(why, n, "capability metrics lack ran.forwards");
        return GATE_FAIL;
    }
    if (!gate_check_num(checks, "ran.forwards", forwards, ">", 0)) {
        why_set(why, n, "the mode evaluated nothing (0 forward calls)");
        return GATE_FAIL;
    }
    return GATE_PASS;
}

/* ---- parity ---------------------------------------------------------------------------------- */

/* Settings number or a FAIL naming it. */
static int setting(const json_t *settings, const char *key, double *out, json_t *checks, char *why,
                   size_t n)
{
    if (gate_metric_num(settings, key, out) == 0)
        return 0;
    gate_check_bool(checks, key, 0);
    why_set(why, n, "setting '%s' is missing or not a number", key);
    return -1;
}

int parity_metrics_summary(const json_t *metrics, double near_tie, double route_tie,
                           struct parity_summary *s)
{
    memset(s, 0, sizeof *s);
    const json_t *pp = json_object_get(metrics, "per_position");
    const json_t *cos = json_object_get(pp, "cosine"), *kld = json_object_get(pp, "kld");
    const json_t *gap = json_object_get(pp, "ref_gap"), *rt = json_object_get(pp, "ref_top");
    const json_t *tt = json_object_get(pp, "test_top");
    const json_t *rgap = json_object_get(pp, "route_gap"); /* MoE only; null = routes agree */
    size_t np = json_array_size(cos);
    if (!json_is_array(cos) || json_array_size(kld) != np || json_array_size(gap) != np ||
        json_array_size(rt) != np || json_array_size(tt) != np ||
        (rgap && json_array_size(rgap) != np))
        return -1;
    s->n_pos = (int)np;
    s->min_cosine = INFINITY;
    s->first_bad = -1;
    double sum_kld = 0;
    int n_judged = 0;
    for (size_t i = 0; i < np; i++) {
        const json_t *c = json_array_get(cos, i), *k = json_array_get(kld, i);
        const json_t *g = json_array_get(gap, i);
        double vc, vk, vg = NAN;
        if (gate_json_num(c, &vc) || gate_json_num(k, &vk))
            return -1;
        gate_json_num(g, &vg);
        json_int_t r = json_integer_value(json_array_get(rt, i));
        json_int_t t = json_integer_value(json_array_get(tt, i));
        if (!isfinite(vc) || !isfinite(vk) || r < 0 || t < 0) {
            s->n_nonfinite++;
            if (s->first_bad < 0)
                s->first_bad = (int)i;
            s->min_cosine = NAN; /* a non-finite position poisons the minimum */
            s->max_kld = NAN;
            s->mean_kld = NAN;
            continue;
        }
        /* a position whose expert set differs where the judge's own router gap is below
         * route_tie is a ROUTE_TIE: counted and shown, not judged by the logit thresholds (as a
         * TIE_FLIP is for argmax); a changed route at a clear gap is judged like any position */
        double vr;
        const json_t *r_i = rgap ? json_array_get(rgap, i) : NULL;
        if (r_i && !json_is_null(r_i) && gate_json_num(r_i, &vr) == 0 && vr >= 0 &&
            vr < route_tie) {
            s->n_route_tie++;
            continue;
        }
        n_judged++;
        if (!isnan(s->min_cosine) && vc < s->min_cosine)
            s->min_cosine = vc;
        if (!isnan(s->max_kld) && vk > s->max_kld)
            s->max_kld = vk;
        sum_kld += vk;
        if (r != t) {
            if (isfinite(vg) && vg < near_tie) {
                s->n_tie_flip++;
            } else {
                s->n_wrong++;
                if (s->first_bad < 0)
                    s->first_bad = (int)i;
            }
        }
    }
    if (!isnan(s->mean_kld))
        s->mean_kld = n_judged ? sum_kld / (double)n_judged : NAN;
    if (!np)
        s->min_cosine = s->max_kld = NAN;
    return 0;
}

enum gate_verdict parity_gate_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                                    char *why, size_t n)
{
    double positions, min_cos, max_mean_kld, max_kld, near_tie, route_tie = 0;
    gate_metric_num(settings, "route_tie", &route_tie); /* absent: no route ties (strictest) */
    if (setting(settings, "positions", &positions, checks, why, n) ||
        setting(settings, "min_cosine", &min_cos, checks, why, n) ||
        setting(settings, "max_mean_kld", &max_mean_kld, checks, why, n) ||
        setting(settings, "max_kld", &max_kld, checks, why, n) ||
        setting(settings, "near_tie", &near_tie, checks, why, n))
        return GATE_FAIL;
    struct parity_summary s;
    if (parity_metrics_summary(metrics, near_tie, route_tie, &s)) {
        gate_check_bool(checks, "per-position metrics recorded", 0);
        why_set(why, n,
                "parity metrics lack per_position cosine/kld/ref_gap/ref_top/test_top"
                " arrays of one length");
        return GATE_FAIL;
    }
    int ok = gate_check_num(checks, "positions", s.n_pos, ">=", positions);
    ok &= gate_check_num(checks, "nonfinite_positions", s.n_nonfinite, "<=", 0);
    ok &= gate_check_num(checks, "min_cosine", s.min_cosine, ">=", min_cos);
    ok &= gate_check_num(checks, "mean_kld", s.mean_kld, "<=", max_mean_kld);
    ok &= gate_check_num(checks, "max_kld", s.max_kld, "<=", max_kld);
    ok &= gate_check_num(checks, "wrong_positions", s.n_wrong, "<=", 0);
    /* route ties are rare by nature (a router gap below route_tie); an engine that routes
     * differently at many of them is routing differently, not breaking ties */
    ok &= gate_check_num(checks, "route_tie_positions", s.n_route_tie,
                         "<=", floor(s.n_pos / PARITY_MAX_ROUTE_TIE_SHARE));
    if (!ok)
        why_set(why, n,
                "%d positions: min cosine %.6g (>= %g), mean KL %.3g (<= %g), max KL %.3g"
                " (<= %g), %d wrong, %d non-finite, %d route ties%s",
                s.n_pos, s.min_cosine, min_cos, s.mean_kld, max_mean_kld, s.max_kld, max_kld,
                s.n_wrong, s.n_nonfinite, s.n_route_tie,
                s.n_pos < positions ? " (too few positions)" : "");
    if (ok && s.n_route_tie)
        /* a PASS that excused positions says so on its one line */
        why_set(why, n,
                "%d positions: min cosine %.6g, max KL %.3g over %d judged; %d tie flip%s, %d"
                " route tie%s (the judge's router gap < %g there: expert sets may differ)",
                s.n_pos, s.min_cosine, s.max_kld, s.n_pos - s.n_route_tie, s.n_tie_flip,
                s.n_tie_flip == 1 ? "" : "s", s.n_route_tie, s.n_route_tie == 1 ? "" : "s",
                route_tie);
    return ok ? GATE_PASS : GATE_FAIL;
}

/* ---- every gate ------------------------------------------------------------------------------ */

/* The KV cache the cell asked for is the one the subjects reported at open (metrics.ran.kv,
 * oracles/mode.c): an F16 cell (settings "kv": "f16", docs/ladder.md) whose backend ran F32 — a
 * harness that dropped the setting — FAILs, and so does an F32 cell (no "kv" in its settings)
 * whose subject ran F16. A run that recorded no ran.kv (receipts from before the key) is judged
 * only when its settings ask for a KV type. */
static enum gate_verdict judge_kv(const json_t *settings, const json_t *metrics, json_t *checks,
                                  char *why, size_t n)
{
    const char *want = json_string_value(json_object_get(settings, "kv"));
    const char *got = json_string_value(json_object_get(json_object_get(metrics, "ran"), "kv"));
    if (!want && !got)
        return GATE_PASS;
    if (!want)
        want = "f32";
    if (gate_check_str(checks, "ran.kv", got, want))
        return GATE_PASS;
    why_set(why, n, "the cell asks for a %s KV cache but the subject ran with %s", want,
            got ? got : "no KV cache recorded");
    return GATE_FAIL;
}

enum gate_verdict gate_judge_common(gate_judge_fn judge, int check_ran, const char *mode,
                                    const json_t *settings, const json_t *metrics, json_t *checks,
                                    char *why, size_t n)
{
    if (why && n)
        why[0] = '\0';
    const char *error = json_string_value(json_object_get(metrics, "error"));
    if (error) {
        gate_check_bool(checks, "ran without error", 0);
        why_set(why, n, "%s", error);
        return GATE_FAIL;
    }
    if (!json_is_object(settings) || !json_is_object(metrics)) {
        gate_check_bool(checks, "settings and metrics recorded", 0);
        why_set(why, n, "settings or metrics are not objects");
        return GATE_FAIL;
    }
    enum gate_verdict ran = check_ran ? gate_judge_ran(mode, metrics, checks, why, n) : GATE_PASS;
    if (check_ran && ran == GATE_PASS)
        ran = judge_kv(settings, metrics, checks, why, n);
    enum gate_verdict v = judge(settings, metrics, checks, why, n);
    if (json_array_size(checks) == 0) {
        why_set(why, n, "the gate made no check");
        return GATE_FAIL;
    }
    if (ran == GATE_FAIL || v == GATE_FAIL)
        return GATE_FAIL;
    return v;
}
