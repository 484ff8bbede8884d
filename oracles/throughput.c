/* throughput.c — see throughput.h. Timing uses CLOCK_MONOTONIC around forward calls only; the
 * verdict is throughput_judge()'s over the samples recorded in the metrics.
 * Start reading: throughput_gate().
 */
#include "oracles/throughput.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "oracles/parity.h"

void throughput_config_default(struct throughput_config *c)
{
    memset(c, 0, sizeof *c);
    c->runs = 3;
    c->warmup = 1;
    c->prompt_tokens = 512;
    c->decode_tokens = 128;
    c->max_cv = THROUGHPUT_MAX_CV;
}

json_t *throughput_settings_json(const struct throughput_config *c)
{
    return json_pack("{s:i, s:i, s:i, s:i, s:f, s:f, s:f}", "runs", c->runs, "warmup", c->warmup,
                     "prompt_tokens", c->prompt_tokens, "decode_tokens", c->decode_tokens,
                     "min_prefill_tps", c->min_prefill_tps, "min_decode_tps", c->min_decode_tps,
                     "max_cv", c->max_cv);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
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

static void say(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (why && n)
        vsnprintf(why, n, fmt, ap);
    va_end(ap);
}

/* Statistics of metrics[phase].samples_tps; -1 when absent or not all finite and positive. */
static int phase_stats(const json_t *metrics, const char *phase, struct throughput_stats *s)
{
    const json_t *a = json_object_get(json_object_get(metrics, phase), "samples_tps");
    double x[THROUGHPUT_MAX_RUNS];
    if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > THROUGHPUT_MAX_RUNS)
        return -1;
    for (size_t i = 0; i < json_array_size(a); i++)
        if (gate_json_num(json_array_get(a, i), &x[i]))
            return -1;
    return throughput_stats(x, (int)json_array_size(a), s) ? -1 : 0;
}

enum gate_verdict throughput_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                                   char *why, size_t n)
{
    static const char *const keys[] = {
        "runs", "prompt_tokens", "decode_tokens", "min_prefill_tps", "min_decode_tps", "max_cv"};
    double v[6];
    for (int i = 0; i < 6; i++)
        if (gate_metric_num(settings, keys[i], &v[i])) {
            gate_check_bool(checks, "settings complete", 0);
            say(why, n, "throughput settings lack '%s'", keys[i]);
            return GATE_FAIL;
        }
    const double runs = v[0], min_pre = v[3], min_dec = v[4], max_cv = v[5];
    struct throughput_stats pre, dec;
    if (phase_stats(metrics, "prefill", &pre) || phase_stats(metrics, "decode", &dec)) {
        gate_check_bool(checks, "samples recorded", 0);
        say(why, n, "throughput metrics lack finite positive prefill/decode samples_tps");
        return GATE_FAIL;
    }
    double pt = NAN, dt = NAN;
    gate_metric_num(metrics, "prompt_tokens", &pt);
    gate_metric_num(metrics, "decode_tokens", &dt);
    int fails = 0;
    char first[320] = "";
    if (!gate_check_num(checks, "prefill_runs", pre.n, "==", runs) |
            !gate_check_num(checks, "decode_runs", dec.n, "==", runs) &&
        !fails++)
        snprintf(first, sizeof first, "%d / %d timed runs recorded, settings ask for %g", pre.n,
                 dec.n, runs);
    if (!gate_check_num(checks, "timed_runs", dec.n, ">=", THROUGHPUT_MIN_RUNS) && !fails++)
        snprintf(first, sizeof first, "%d timed runs: a median needs at least %d", dec.n,
                 THROUGHPUT_MIN_RUNS);
    if (!gate_check_num(checks, "prompt_tokens", pt, "==", v[1]) |
            !gate_check_num(checks, "decode_tokens", dt, "==", v[2]) &&
        !fails++)
        snprintf(first, sizeof first,
                 "measured %g prompt / %g decode tokens, settings ask for"
                 " %g / %g",
                 pt, dt, v[1], v[2]);
    if (fails) {
        say(why, n, "%s", first);
        return GATE_FAIL;
    }
    /* a noisy host cannot be judged either way: ERROR, not FAIL (a FAIL would make the build
     * FLAKY forever) */
    int ok_pre = gate_check_num(checks, "prefill_cv", pre.cv, "<=", max_cv);
    int ok_dec = gate_check_num(checks, "decode_cv", dec.cv, "<=", max_cv);
    if (!ok_pre || !ok_dec) {
        const struct throughput_stats *s = !ok_pre ? &pre : &dec;
        say(why, n, "host too noisy to judge (CV %.3f > bound %g, %s)", s->cv, max_cv,
            !ok_pre ? "prefill" : "decode");
        return GATE_ERROR;
    }
    if (!gate_check_num(checks, "prefill_tps_median", pre.median, ">=", min_pre) && !fails++)
        snprintf(first, sizeof first,
                 "prefill %.1f tokens/s (median of %d) is below the floor"
                 " %g",
                 pre.median, pre.n, min_pre);
    if (!gate_check_num(checks, "decode_tps_median", dec.median, ">=", min_dec) && !fails++)
        snprintf(first, sizeof first, "decode %.1f tokens/s (median of %d) is below the floor %g",
                 dec.median, dec.n, min_dec);
    say(why, n, "%s", fails ? first : "");
    return fails ? GATE_FAIL : GATE_PASS;
}

/* ---- the run -------------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int throughput_gate(const struct model *m, const struct mode *mode,
                    const struct throughput_config *cfg, struct throughput_result *out,
                    struct gate_err *err)
{
    struct backend *b = NULL;
    int32_t *tokens = NULL;
    float *logits = NULL;
    json_t *settings = NULL;
    double pre[THROUGHPUT_MAX_RUNS], dec[THROUGHPUT_MAX_RUNS];
    const int P = cfg->prompt_tokens, D = cfg->decode_tokens;
    int turn_ends[THROUGHPUT_CHAT_TURNS];
    int rc = 0;
    memset(out, 0, sizeof *out);
    out->verdict = GATE_FAIL;
    mode_format(mode, out->mode, sizeof out->mode);
    if (cfg->runs < 1 || cfg->runs > THROUGHPUT_MAX_RUNS || cfg->warmup < 0 || P < 1 || D < 1)
        return err_set(err, ERR_INPUT,
                       "throughput: runs %d (1-%d), warmup %d, prompt %d and"
                       " decode %d tokens (>= 1) are required",
                       cfg->runs, THROUGHPUT_MAX_RUNS, cfg->warmup, P, D);
    if (mode->path == MODE_CHAT && P < THROUGHPUT_CHAT_TURNS)
        return err_set(err, ERR_INPUT,
                       "throughput: the chat path needs prompt_tokens >= %d"
                       " (six turns), got %d",
                       THROUGHPUT_CHAT_TURNS, P);
    for (int i = 0; i < THROUGHPUT_CHAT_TURNS; i++)
        turn_ends[i] = (int)((long)P * (i + 1) / THROUGHPUT_CHAT_TURNS);
    switch (mode->path) {
    case MODE_DECODE:
        snprintf(out->prompt_path, sizeof out->prompt_path,
                 "decode: %d prompt tokens one"
                 " forward each",
                 P);
        break;
    case MODE_PREFILL:
        snprintf(out->prompt_path, sizeof out->prompt_path,
                 "prefill: %d tokens in one batched"
                 " forward, %d one forward each",
                 P / 2, P - P / 2);
        break;
    default:
        snprintf(out->prompt_path, sizeof out->prompt_path,
                 "chat: %d tokens in 6 turns (user"
                 " turns batched, replies one forward per token) on one cache",
                 P);
    }
    out->prompt_tokens = P;
    out->decode_tokens = D;
    out->warmup = cfg->warmup;
    const double t0 = now_s();
    /* F16 KV: the cell's `kv: f16` (mode->kv_f16) or gate bench --kv f16 (cfg->kv_f16); the
     * backend refuses it unless it has one */
    struct mode kvm = *mode;
    kvm.kv_f16 = mode->kv_f16 || cfg->kv_f16;
    rc = mode_open(&b, &kvm, m, P + D, cfg->n_threads, NULL, err);
    if (rc)
        goto done;
    out->load_s = now_s() - t0;
    const size_t V = m->hp.n_vocab;
    tokens = malloc((size_t)(P + D) * sizeof *tokens);
    logits = malloc((size_t)P * V * sizeof *logits);
    if (!tokens || !logits) {
        rc = err_set(err, ERR_ENV, "out of memory for %d tokens of logits", P);
        goto done;
    }
    mode_tokens(3, (uint32_t)V, P + D, tokens);
    for (int r = 0; r < cfg->warmup + cfg->runs; r++) {
        double a = now_s();
        /* the mode's own path from an empty cache (mode_run truncates first) */
        if ((rc =
                 mode_run(b, mode->path, tokens, P, turn_ends, THROUGHPUT_CHAT_TURNS, logits, err)))
            goto done;
        double mid = now_s();
        for (int t = 0; t < D; t++)
            if ((rc = backend_forward(b, tokens + P + t, 1, P + t, logits, err)))
                goto done;
        double end = now_s();
        if (r >= cfg->warmup) {
            pre[r - cfg->warmup] = P / (mid - a > 1e-9 ? mid - a : 1e-9);
            dec[r - cfg->warmup] = D / (end - mid > 1e-9 ? end - mid : 1e-9);
        }
        if (cfg->progress)
            cfg->progress(cfg->progress_ctx, r + 1, cfg->warmup + cfg->runs);
    }
    struct backend_info info;
    backend_info(b, &info);
    snprintf(out->backend, sizeof out->backend, "%s", info.backend);
    snprintf(out->device, sizeof out->device, "%s", info.device);
    throughput_stats(pre, cfg->runs, &out->prefill);
    throughput_stats(dec, cfg->runs, &out->decode);
    out->prefill.noisy = out->prefill.cv > cfg->max_cv;
    out->decode.noisy = out->decode.cv > cfg->max_cv;
    char why[320] = "";
    out->metrics = throughput_result_json(out);
    out->checks = json_array();
    settings = throughput_settings_json(cfg);
    if (!out->metrics || !out->checks || !settings) {
        rc = err_set(err, ERR_ENV, "out of memory");
        goto done;
    }
    out->verdict = throughput_judge(settings, out->metrics, out->checks, why, sizeof why);
    out->pass = out->verdict == GATE_PASS;
    if (out->pass)
        snprintf(out->reason, sizeof out->reason,
                 "PASS: prefill %.1f tokens/s (floor %g), decode"
                 " %.1f tokens/s (floor %g)",
                 out->prefill.median, cfg->min_prefill_tps, out->decode.median,
                 cfg->min_decode_tps);
    else
        snprintf(out->reason, sizeof out->reason, "%s: %.300s", gate_verdict_name(out->verdict),
                 why);
done:
    json_decref(settings);
    free(tokens);
    free(logits);
    backend_close(b);
    return rc;
}

static json_t *stats_json(const struct throughput_stats *s)
{
    json_t *o = json_object(), *a = json_array();
    json_object_set_new(o, "median_tps", parity_json_number(s->median));
    json_object_set_new(o, "min_tps", parity_json_number(s->min));
    json_object_set_new(o, "max_tps", parity_json_number(s->max));
    json_object_set_new(o, "mean_tps", parity_json_number(s->mean));
    json_object_set_new(o, "spread_tps", parity_json_number(s->spread));
    json_object_set_new(o, "cv", parity_json_number(s->cv));
    for (int i = 0; i < s->n; i++)
        json_array_append_new(a, parity_json_number(s->samples[i]));
    json_object_set_new(o, "samples_tps", a);
    return o;
}

json_t *throughput_result_json(const struct throughput_result *r)
{
    json_t *o = json_object();
    json_object_set_new(o, "mode", json_string(r->mode));
    json_object_set_new(o, "backend", json_string(r->backend));
    json_object_set_new(o, "device", json_string(r->device));
    json_object_set_new(o, "prompt_path", json_string(r->prompt_path));
    json_object_set_new(o, "prompt_tokens", json_integer(r->prompt_tokens));
    json_object_set_new(o, "decode_tokens", json_integer(r->decode_tokens));
    json_object_set_new(o, "warmup", json_integer(r->warmup));
    json_object_set_new(o, "load_s", parity_json_number(r->load_s));
    json_object_set_new(o, "prefill", stats_json(&r->prefill));
    json_object_set_new(o, "decode", stats_json(&r->decode));
    return o;
}

void throughput_print(FILE *f, const struct throughput_result *r)
{
    fprintf(f, "throughput %s on %s (%s): load (backend open) %.3f s (not counted)\n", r->mode,
            r->backend, r->device, r->load_s);
    fprintf(f, "  prompt path: %s; then %d decode steps\n", r->prompt_path, r->decode_tokens);
    const struct throughput_stats *s[2] = {&r->prefill, &r->decode};
    for (int i = 0; i < 2; i++)
        fprintf(f,
                "  %-8s %10.2f tokens/s median of %d (min %.2f, max %.2f, spread %.2f, CV"
                " %.1f%%%s)\n",
                i ? "decode" : "prefill", s[i]->median, s[i]->n, s[i]->min, s[i]->max, s[i]->spread,
                100 * s[i]->cv, s[i]->noisy ? ", NOISY" : "");
    fprintf(f, "  %s\n", r->reason);
}
