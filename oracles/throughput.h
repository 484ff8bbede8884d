/* throughput.h — the throughput oracle: tokens/s of the mode's OWN path, as the median of N timed
 * runs after warm-up, with min, max, spread and coefficient of variation; opening the backend is
 * timed separately and never counted (DESIGN.md: a gate once counted model build time as
 * generation time). The model is passed in already loaded and digest-checked: the oracle never
 * opens a file (issue 11: one open descriptor per pinned file).
 *
 * One timed run, from an empty cache: the prompt (prompt_tokens ids, mode_tokens seed 3) along
 * the mode's path with mode_run() — decode: one forward per token; prefill: the first half in one
 * batched forward, the rest one per token; chat: six equal turns, user turns batched, replies
 * decoded — then decode_tokens fixed ids one forward each. The "prefill" figure is the prompt
 * phase's rate on that path (metrics "prompt_path" says which), "decode" the decode loop's.
 *
 * The verdict is throughput_judge()'s over the recorded samples: a CV above max_cv in either
 * phase is GATE_ERROR ("host too noisy to judge"), never a FAIL; a median below a declared floor
 * is a FAIL. Start reading: throughput_gate(), then throughput_judge().
 */
#ifndef GATE_THROUGHPUT_H
#define GATE_THROUGHPUT_H

#include <jansson.h>
#include <stdio.h>

#include "base/err.h"
#include "engine/model.h"
#include "oracles/gates.h"
#include "oracles/mode.h"

#ifdef __cplusplus
extern "C" {
#endif

#define THROUGHPUT_MAX_RUNS 64
#define THROUGHPUT_MIN_RUNS 3   /* DESIGN.md: the median of >= 3 timed runs */
#define THROUGHPUT_MAX_CV 0.5   /* default max_cv (the gate table's, harness/gatedef.c) */
#define THROUGHPUT_CHAT_TURNS 6 /* the chat path's prompt: six equal segments */

struct throughput_config {
    int runs;                               /* timed runs (>= 3 for a gate; default 3) */
    int warmup;                             /* untimed runs first (default 1) */
    int prompt_tokens;                      /* prompt length along the mode's path (default 512) */
    int decode_tokens;                      /* decode steps after the prompt (default 128) */
    int n_threads;                          /* not a setting: how this host runs */
    int kv_f16;                             /* not a setting: gate bench --kv f16 (default 0) */
    double min_prefill_tps, min_decode_tps; /* floors; 0 = none declared */
    double max_cv; /* above this CV in either phase the host is too noisy (default 0.5) */
    /* not settings: called after each warm-up and timed run with (done, warmup + runs), from the
     * measuring thread, outside the timed intervals (NULL = none) */
    void (*progress)(void *ctx, int done, int total);
    void *progress_ctx;
};

void throughput_config_default(struct throughput_config *c);

/* The settings object of c, keys as throughput_judge reads them (new reference). */
json_t *throughput_settings_json(const struct throughput_config *c);

struct throughput_stats {
    int n;
    double median, min, max, mean, spread, cv; /* spread = max - min; cv = sample stddev/mean */
    int noisy;                                 /* cv > the run's max_cv */
    double samples[THROUGHPUT_MAX_RUNS];
};

/* Pure: statistics of x (n >= 1, n <= THROUGHPUT_MAX_RUNS); ERR_INPUT otherwise or when a
 * sample is not finite and positive. */
int throughput_stats(const double *x, int n, struct throughput_stats *out);

struct throughput_result {
    char mode[32];
    char backend[16], device[128];
    char prompt_path[128];                    /* what the prompt phase measured */
    int prompt_tokens, decode_tokens, warmup; /* as measured */
    double load_s;                            /* backend open, never counted */
    struct throughput_stats prefill, decode;  /* tokens per second */
    enum gate_verdict verdict;                /* throughput_judge(settings, metrics) */
    int pass;                                 /* verdict == GATE_PASS */
    char reason[320];
    json_t *metrics; /* owned: what the judge reads */
    json_t *checks;  /* owned */
};

void throughput_result_free(struct throughput_result *r);

/* The throughput gate's verdict from settings {runs, warmup, prompt_tokens, decode_tokens,
 * min_prefill_tps, min_decode_tps, max_cv} and metrics as throughput_gate() records them; pure
 * (gate_judge_fn). Median and CV are recomputed from metrics "prefill"/"decode" "samples_tps"
 * (their count must equal runs, >= 3); a CV above max_cv is GATE_ERROR, a median below a
 * positive floor FAIL. */
enum gate_verdict throughput_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                                   char *why, size_t n);

/* Open the mode's backend on m (loaded by the caller, which checked its digest), run
 * cfg->warmup + cfg->runs times as the header block says, build out->metrics and take the
 * verdict from throughput_judge(throughput_settings_json(cfg), out->metrics). Returns 0 when
 * measured, else a negative status (ERR_INPUT for bad settings). Free with
 * throughput_result_free(). */
int throughput_gate(const struct model *m, const struct mode *mode,
                    const struct throughput_config *cfg, struct throughput_result *out,
                    struct gate_err *err);

/* The metrics object of r's numbers, as a receipt records them and the judge reads them (new
 * reference; throughput_gate() stores it in r->metrics). */
json_t *throughput_result_json(const struct throughput_result *r);
void throughput_print(FILE *f, const struct throughput_result *r);

#ifdef __cplusplus
}
#endif
#endif
