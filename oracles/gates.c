/* gates.c — the check helpers every judge uses, the judge of the capability gate,
 * and the checks common to every gate (its error, what ran). See gates.h.
 *
 * A judge reads only the settings and metrics objects as a receipt records them, so the run and
 * the release check reach the same verdict from the same bytes. Numbers in metrics may be the
 * strings "NaN"/"Inf"/"-Inf" (receipts cannot hold non-finite JSON numbers); every comparison
 * with a non-finite number fails.
 * Start reading: gate_judge_common().
 */
#include "oracles/gates.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/backend.h"
#include "receipts/cellkey.h"

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

void gate_say(char *why, size_t n, const char *fmt, ...)
{
    if (!why || !n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
}

void gate_say_first(char *why, size_t n, const char *fmt, ...)
{
    if (!why || !n || why[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
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
        gate_say_first(why, n, "the gate did not record what ran (metrics.ran)");
        return GATE_FAIL;
    }
    int ok = gate_check_str(checks, "ran.backend", ran_backend, backend);
    ok &= gate_check_num(checks, "ran.tokens", tokens, ">", 0);
    /* by what the backend's row says it is, never by its name (issue 24 §5) */
    const int on_device = backend_is_device(backend);
    const int cpu_device = !strncmp(device, "cpu", 3); /* a device string: not a backend name */
    if (on_device) {
        ok &= gate_check_num(checks, "ran.kernel_launches", launches, ">", 0);
        ok &= gate_check_bool(checks, "ran.device is a GPU", !cpu_device);
    } else if (backend_is_external(backend)) {
        /* an engine gate did not build names its own device (docs/exec.md: gate cannot measure
         * it, the receipt records its word); gate counts no launches of its own */
        ok &= gate_check_num(checks, "ran.kernel_launches", launches, "<=", 0);
        ok &= gate_check_bool(checks, "ran.device named by the engine", device[0] != '\0');
    } else {
        ok &= gate_check_num(checks, "ran.kernel_launches", launches, "<=", 0);
        ok &= gate_check_bool(checks, "ran.device is the CPU", cpu_device);
    }
    if (!ok)
        gate_say_first(why, n,
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
        gate_say_first(why, n, "capability metrics lack ran.forwards");
        return GATE_FAIL;
    }
    if (!gate_check_num(checks, "ran.forwards", forwards, ">", 0)) {
        gate_say_first(why, n, "the mode evaluated nothing (0 forward calls)");
        return GATE_FAIL;
    }
    return GATE_PASS;
}

/* ---- every gate ------------------------------------------------------------------------------ */

/* The identity settings a cell asks for (receipts/cellkey.h's rows: kv, isa, prefill, gemv, route,
 * attn, graph; docs/ladder.md) are the ones its subjects reported at open (metrics.ran.KEY,
 * oracles/mode.c): a harness that dropped a setting, or a subject that ran another configuration,
 * FAILs — in both directions for the settings whose default has a name (an F32 cell whose subject
 * ran F16 FAILs too). A run that recorded none (receipts from before the key, external engines) is
 * judged only when its settings ask. A setting whose default has no name (isa: absent = the host's
 * best) is judged only when asked. */
static enum gate_verdict judge_ran_settings(const json_t *settings, const json_t *metrics,
                                            json_t *checks, char *why, size_t n)
{
    const json_t *ran = json_object_get(metrics, "ran");
    for (int s = 0; s < CELL_SETTING_COUNT; s++) {
        const struct cell_setting *r = &CELL_SETTINGS[s];
        const json_t *asked = json_object_get(settings, r->key);
        const char *got = json_string_value(json_object_get(ran, r->key));
        if (!asked && (!r->dflt || !got))
            continue;
        const char *want = !asked                     ? r->dflt
                           : json_string_value(asked) ? json_string_value(asked)
                                                      : "(not a string)";
        char metric[32];
        snprintf(metric, sizeof metric, "ran.%s", r->key);
        if (!gate_check_str(checks, metric, got, want)) {
            gate_say_first(why, n, "the cell asks for %s %s but the subject ran %s", r->noun, want,
                           got ? got : "none recorded");
            return GATE_FAIL;
        }
    }
    return GATE_PASS;
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
        gate_say_first(why, n, "%s", error);
        return GATE_FAIL;
    }
    if (!json_is_object(settings) || !json_is_object(metrics)) {
        gate_check_bool(checks, "settings and metrics recorded", 0);
        gate_say_first(why, n, "settings or metrics are not objects");
        return GATE_FAIL;
    }
    enum gate_verdict ran = check_ran ? gate_judge_ran(mode, metrics, checks, why, n) : GATE_PASS;
    if (check_ran && ran == GATE_PASS)
        ran = judge_ran_settings(settings, metrics, checks, why, n);
    enum gate_verdict v = judge(settings, metrics, checks, why, n);
    if (json_array_size(checks) == 0) {
        gate_say_first(why, n, "the gate made no check");
        return GATE_FAIL;
    }
    if (ran == GATE_FAIL || v == GATE_FAIL)
        return GATE_FAIL;
    return v;
}
