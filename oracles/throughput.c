/* throughput.c — see throughput.h. Timing uses CLOCK_MONOTONIC around forward calls only. */
#include "oracles/throughput.h"

#include <math.h>
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
    out->median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    out->mean = sum / n;
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (x[i] - out->mean) * (x[i] - out->mean);
    out->cv = n > 1 ? sqrt(ss / (n - 1)) / out->mean : 0.0;
    out->noisy = out->cv > THROUGHPUT_NOISY_CV;
    return 0;
}

void throughput_judge(struct throughput_result *r, const struct throughput_config *cfg)
{
    char noisy[96] = "";
    if (r->prefill.noisy || r->decode.noisy)
        snprintf(noisy, sizeof noisy, " (NOISY: CV prefill %.1f%%, decode %.1f%% > 10%%)",
                 100 * r->prefill.cv, 100 * r->decode.cv);
    r->pass = 0;
    if (cfg->min_prefill_tps > 0 && r->prefill.median < cfg->min_prefill_tps)
        snprintf(r->reason, sizeof r->reason, "FAIL: prefill %.1f tokens/s (median of %d) is"
                 " below the floor %.1f%s", r->prefill.median, r->prefill.n,
                 cfg->min_prefill_tps, noisy);
    else if (cfg->min_decode_tps > 0 && r->decode.median < cfg->min_decode_tps)
        snprintf(r->reason, sizeof r->reason, "FAIL: decode %.1f tokens/s (median of %d) is"
                 " below the floor %.1f%s", r->decode.median, r->decode.n, cfg->min_decode_tps,
                 noisy);
    else {
        r->pass = 1;
        snprintf(r->reason, sizeof r->reason, "PASS: prefill %.1f tokens/s (floor %.1f), decode"
                 " %.1f tokens/s (floor %.1f)%s", r->prefill.median, cfg->min_prefill_tps,
                 r->decode.median, cfg->min_decode_tps, noisy);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int throughput_run(const char *model_path, const struct mode *mode,
                   const struct throughput_config *cfg, struct throughput_result *out,
                   struct gate_err *err)
{
    struct model *m = NULL;
    struct backend *b = NULL;
    int32_t *tokens = NULL;
    float *logits = NULL;
    double pre[THROUGHPUT_MAX_RUNS], dec[THROUGHPUT_MAX_RUNS];
    const int P = cfg->prompt_tokens, D = cfg->decode_tokens;
    int rc = 0;
    memset(out, 0, sizeof *out);
    mode_format(mode, out->mode, sizeof out->mode);
    if (cfg->runs < 1 || cfg->runs > THROUGHPUT_MAX_RUNS || cfg->warmup < 0 || P < 1 || D < 1)
        return err_set(err, ERR_INPUT, "throughput: runs %d (1-%d), warmup %d, prompt %d and"
                       " decode %d tokens (>= 1) are required", cfg->runs, THROUGHPUT_MAX_RUNS,
                       cfg->warmup, P, D);
    const double t0 = now_s();
    if ((rc = model_load(&m, model_path, err)) ||
        (rc = mode_open(&b, mode, m, P + D, cfg->n_threads, NULL, err)))
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
        if ((rc = b->ops->truncate(b, 0, err)))
            goto done;
        double a = now_s();
        if ((rc = b->ops->forward(b, tokens, P, 0, logits, err)))
            goto done;
        double mid = now_s();
        for (int t = 0; t < D; t++)
            if ((rc = b->ops->forward(b, tokens + P + t, 1, P + t, logits, err)))
                goto done;
        double end = now_s();
        if (r >= cfg->warmup) {
            pre[r - cfg->warmup] = P / (mid - a > 1e-9 ? mid - a : 1e-9);
            dec[r - cfg->warmup] = D / (end - mid > 1e-9 ? end - mid : 1e-9);
        }
    }
    struct backend_info info;
    b->ops->info(b, &info);
    snprintf(out->backend, sizeof out->backend, "%s", info.backend);
    snprintf(out->device, sizeof out->device, "%s", info.device);
    throughput_stats(pre, cfg->runs, &out->prefill);
    throughput_stats(dec, cfg->runs, &out->decode);
    throughput_judge(out, cfg);
done:
    free(tokens);
    free(logits);
    backend_close(b);
    model_free(m);
    return rc;
}

static json_t *stats_json(const struct throughput_stats *s)
{
    json_t *o = json_object(), *a = json_array();
    json_object_set_new(o, "median_tps", parity_json_number(s->median));
    json_object_set_new(o, "min_tps", parity_json_number(s->min));
    json_object_set_new(o, "max_tps", parity_json_number(s->max));
    json_object_set_new(o, "mean_tps", parity_json_number(s->mean));
    json_object_set_new(o, "cv", parity_json_number(s->cv));
    json_object_set_new(o, "noisy", json_boolean(s->noisy));
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
    json_object_set_new(o, "load_s", parity_json_number(r->load_s));
    json_object_set_new(o, "prefill", stats_json(&r->prefill));
    json_object_set_new(o, "decode", stats_json(&r->decode));
    json_object_set_new(o, "verdict", json_string(r->pass ? "PASS" : "FAIL"));
    json_object_set_new(o, "reason", json_string(r->reason));
    return o;
}

void throughput_print(FILE *f, const struct throughput_result *r)
{
    fprintf(f, "throughput %s on %s (%s): load %.3f s (not counted)\n", r->mode, r->backend,
            r->device, r->load_s);
    const struct throughput_stats *s[2] = {&r->prefill, &r->decode};
    for (int i = 0; i < 2; i++)
        fprintf(f, "  %-8s median %10.1f tokens/s of %d (min %.1f, max %.1f, CV %.1f%%%s)\n",
                i ? "decode" : "prefill", s[i]->median, s[i]->n, s[i]->min, s[i]->max,
                100 * s[i]->cv, s[i]->noisy ? ", NOISY" : "");
    fprintf(f, "  %s\n", r->reason);
}
