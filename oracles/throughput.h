/* throughput.h — the throughput oracle: prefill and decode tokens/s as the median of N timed
 * runs after warm-up, with min, max and coefficient of variation; model load (file mapping,
 * binding, backend open) is timed separately and never counted (DESIGN.md: a gate once counted
 * model build time as generation time). A CV above 10% marks the figure noisy (reported, not
 * a failure); the verdict compares the medians with the floors the ladder declares.
 * Start reading: throughput_run().
 */
#ifndef GATE_THROUGHPUT_H
#define GATE_THROUGHPUT_H

#include <jansson.h>
#include <stdio.h>

#include "engine/err.h"
#include "oracles/mode.h"

#ifdef __cplusplus
extern "C" {
#endif

#define THROUGHPUT_MAX_RUNS 64
#define THROUGHPUT_NOISY_CV 0.10

struct throughput_config {
    int runs;            /* timed runs (>= 3 for a gate; default 3) */
    int warmup;          /* untimed runs first (default 1) */
    int prompt_tokens;   /* prefill length (default 512) */
    int decode_tokens;   /* decode steps after the prefill (default 128) */
    int n_threads;
    double min_prefill_tps, min_decode_tps; /* floors; 0 = none declared */
};

void throughput_config_default(struct throughput_config *c);

struct throughput_stats {
    int n;
    double median, min, max, mean, cv; /* cv = sample stddev / mean */
    int noisy;                         /* cv > THROUGHPUT_NOISY_CV */
    double samples[THROUGHPUT_MAX_RUNS];
};

/* Pure: statistics of x (n >= 1, n <= THROUGHPUT_MAX_RUNS); ERR_INPUT otherwise or when a
 * sample is not finite and positive. */
int throughput_stats(const double *x, int n, struct throughput_stats *out);

struct throughput_result {
    char mode[32];
    char backend[16], device[128];
    double load_s;                         /* model load + backend open, never counted */
    struct throughput_stats prefill, decode; /* tokens per second */
    int pass;
    char reason[320];
};

/* Pure: set r->pass and r->reason from the medians and cfg's floors (noisy is reported in
 * the reason, not judged). */
void throughput_judge(struct throughput_result *r, const struct throughput_config *cfg);

/* Load model_path, open the mode's backend, run cfg->warmup + cfg->runs times: prefill
 * prompt_tokens (mode_tokens, seed 3) in one forward, then decode_tokens one at a time (fixed
 * ids: no sampling in the timed loop). Judged with throughput_judge(). */
int throughput_run(const char *model_path, const struct mode *mode,
                   const struct throughput_config *cfg, struct throughput_result *out,
                   struct gate_err *err);

json_t *throughput_result_json(const struct throughput_result *r);
void throughput_print(FILE *f, const struct throughput_result *r);

#ifdef __cplusplus
}
#endif
#endif
