/* throughput.h — the throughput oracle: tokens/s of the mode's OWN path, judged as a statistical
 * statement (DESIGN.md settled question 13): a distribution-free confidence interval of the
 * median against the ladder's floors, more timed runs while the interval does not decide, and an
 * ERROR (never a FAIL) when the host starved the engine of CPU. Opening the backend is timed
 * separately and never counted (a gate once counted model build time as generation time). The
 * model is passed in already loaded and digest-checked: the oracle never opens a file.
 *
 * One timed run, from an empty cache, on a FRESH token sequence (prose_mixed_tokens of a per-run
 * seed, half prose like parity's inputs, so an engine cannot tell a timed run by its look;
 * issue 23 §2: an engine that replays cached replies must not be timed on work it has seen): the
 * prompt (prompt_tokens ids) along the mode's path with mode_run() — decode: one forward per
 * token; prefill: the first half in one batched forward, the rest one per token; chat: six equal
 * turns, user turns batched, replies decoded — then decode_tokens ids one forward each. The
 * "prefill" figure is the prompt phase's rate on that path (metrics "prompt_path" says which),
 * "decode" the decode loop's. After each timed run (outside the timed intervals) the subject's
 * logits at check_positions sampled positions (prompt and decode phases alternately) are
 * compared with the judge's (the twin's forward over the same tokens): cosine and argmax with
 * the cell's parity thresholds; a mismatch is FAIL "timed work is not the judged work".
 *
 * Around each timed run the CPU the engine's threads received and the time they spent runnable
 * but waiting for a CPU (Linux schedstat run_delay, summed over gate's threads and an exec
 * engine's child) are recorded: a run whose wait exceeds max_wait of its CPU demand is "host
 * starved" and is no evidence that the engine is slow (it may still be evidence that it is fast).
 *
 * The verdict is throughput_judge()'s over the recorded runs, through throughput_decide(), a
 * pure function of the samples that the measuring loop also uses to decide when to stop.
 * Start reading: throughput_decide(), then throughput_gate().
 */
#ifndef GATE_THROUGHPUT_H
#define GATE_THROUGHPUT_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "engine/model.h"
#include "oracles/gates.h"
#include "oracles/mode.h"

#ifdef __cplusplus
extern "C" {
#endif

#define THROUGHPUT_MAX_RUNS 200 /* the most timed runs one measurement records */
/* spot checks of a tap-less (exec) subject excused as ROUTE_TIE: at most 1 in this many (both
 * checks of a run sit downstream of the same upstream near tie, so one tie excuses two) */
#define THROUGHPUT_MAX_ROUTE_TIE_SHARE 4.0
#define THROUGHPUT_MIN_RUNS 3      /* DESIGN.md: the median of >= 3 timed runs */
#define THROUGHPUT_CONFIDENCE 0.95 /* two-sided level of the median's interval (docs/gates.md) */
#define THROUGHPUT_CHAT_TURNS 6    /* the chat path's prompt: six equal segments */
#define THROUGHPUT_MAX_CHECKS 8    /* spot-checked positions per timed run, at most */

struct throughput_config {
    int runs;           /* timed runs before the first decision (>= 3) */
    int warmup;         /* untimed runs first, on their own fresh sequences */
    int prompt_tokens;  /* prompt length along the mode's path */
    int decode_tokens;  /* decode steps after the prompt */
    int max_runs;       /* budget: timed runs at most (>= runs) */
    double max_seconds; /* budget: timed seconds (sum of the runs' wall time) */
    double max_wait;    /* a run is host-starved above this wait / (cpu + wait) */
    double min_prefill_tps, min_decode_tps;  /* floors; 0 = none declared */
    int check_positions;                     /* positions per timed run checked against the judge (0
                                              * only for gate bench --no-check: the gate table's bound is >= 1) */
    double check_min_cosine, check_near_tie; /* the cell's parity min_cosine and near_tie */
    double check_route_tie; /* the cell's parity route_tie (MoE): the tolerance of the spot
                             * checks' route-tie replay (a subject with taps); for a tap-less
                             * subject, a check that misses where the judge's least router gap
                             * upstream is below it is a ROUTE_TIE (at most 1 in
                             * THROUGHPUT_MAX_ROUTE_TIE_SHARE) */
    const char *baseline;   /* "" / NULL none, "previous" or a receipt hash (recorded as set) */
    double max_regression;  /* with a baseline: the largest slowdown allowed */
    /* not settings: what the harness found for `baseline` (harness/baseline.h), recorded as
     * metrics "baseline" (borrowed; copied): {"receipt", "version", "prefill_tps", "decode_tps"}
     * (compared), {"none": why} (`previous` found nothing: no comparison) or {"refused": why}
     * (ERROR). NULL with a baseline set: recorded as refused. */
    const json_t *base_json;
    int n_threads; /* not a setting: how this host runs */
    int kv_f16;    /* not a setting: gate bench --kv f16 (default 0) */
    uint64_t seed; /* not a setting: 0 = a random nonce per measurement (the engine cannot
                    * know the sequences in advance); tests fix it */
    /* not settings: called after each warm-up and timed run with (done, runs planned so far:
     * warmup + runs, then one more while undecided), from the measuring thread, outside the
     * timed intervals (NULL = none) */
    void (*progress)(void *ctx, int done, int total);
    void *progress_ctx;
    /* test hooks (NULL = the real ones). clock: monotonic seconds, called in this order: before
     * the backend opens, after it opened, then per run (warm-up and timed) at its start, at the
     * prompt/decode boundary and at its end. usage: the CPU seconds received and the seconds
     * spent waiting for a CPU so far, by this process's threads plus child_pid's (0 = none);
     * called at each run's start and end; returns 0, or -1 when not measurable (NAN recorded);
     * *wait_s may be NAN alone (CPU measured, waiting not). */
    double (*clock)(void *ctx);
    int (*usage)(void *ctx, int child_pid, double *cpu_s, double *wait_s);
    void *hook_ctx;
};

/* Defaults and bounds of the settings fields: the gate table's rows (harness/gatedef.c), the
 * one filler gatedef_throughput_config(NULL, &c) (issue 24 §2: a default is written once). */
/* The settings object of c, keys as throughput_judge reads them (new reference): the gate
 * table's throughput row plus "parity": {"min_cosine", "near_tie"} for the spot checks. */
json_t *throughput_settings_json(const struct throughput_config *c);

struct throughput_stats {
    int n;
    double median, min, max, mean, spread, cv; /* spread = max - min; cv = sample stddev/mean */
    double lo, hi;   /* the median's distribution-free interval (0 / INFINITY: too few runs) */
    double coverage; /* its exact coverage (>= THROUGHPUT_CONFIDENCE; 0 when unbounded) */
    double samples[THROUGHPUT_MAX_RUNS];
};

/* Pure: statistics of x (n >= 1, n <= THROUGHPUT_MAX_RUNS); ERR_INPUT otherwise or when a
 * sample is not finite and positive. */
int throughput_stats(const double *x, int n, struct throughput_stats *out);

/* Pure: the 1-based rank k of the order-statistic interval [x(k), x(n+1-k)] for the median of
 * n samples at two-sided level conf: the largest k with P(Binomial(n, 1/2) <= k - 1) <=
 * (1 - conf) / 2; 0 when no k qualifies (n too small: the interval is unbounded). *coverage
 * (may be NULL) gets 1 - 2 P(B <= k - 1). */
int throughput_median_rank(int n, double conf, double *coverage);

/* One timed run as recorded. */
struct throughput_sample {
    double prefill_tps, decode_tps;
    double wall_s; /* the timed run's wall time, prompt + decode */
    double cpu_s;  /* CPU time the engine's threads received in it (NAN: not measured) */
    double wait_s; /* time they were runnable but waited for a CPU (NAN: not measured) */
};

/* 1 when s is host-starved under max_wait: wait / (cpu + wait) > max_wait; when waiting is not
 * measured but CPU is, cpu / wall < 1 - max_wait (less than one busy thread's worth; errs toward
 * starved); 0 when neither is measured. */
int throughput_starved(const struct throughput_sample *s, double max_wait);

/* This build's rates against a baseline's (issue 27 §2): ratio = median(x) / median(base), and
 * the 95 % distribution-free interval of the ratio from the Mann-Whitney (Hodges-Lehmann) shift
 * interval of log rates: the pairwise differences log x_i - log base_j sorted, [d(k), d(nm+1-k)]
 * with k = floor(nm/2 - 1.96 sqrt(nm(n+m+1)/12)) (normal approximation of U's null
 * distribution), exponentiated; unbounded (0, INFINITY) when k < 1. */
struct throughput_ratio {
    double ratio, lo, hi;
};

/* Pure: the ratio above; ERR_INPUT unless 1 <= n, m <= THROUGHPUT_MAX_RUNS and every rate is
 * finite and positive; ERR_ENV out of memory. */
int throughput_ratio(const double *x, int n, const double *base, int m,
                     struct throughput_ratio *out);

struct throughput_rule {
    double floor[2]; /* prefill, decode; 0 = none */
    int runs, max_runs;
    double max_seconds, max_wait;
    /* a baseline (NULL = none): its timed rates per phase (base_n each) and the largest
     * slowdown allowed (0.05: the ratio must not be confidently below 0.95) */
    const double *base[2];
    int base_n;
    double max_regression;
    /* prompt and decode tokens of each run (0 = unknown): the starvation bound. A run's rate
     * with every second its threads waited for a CPU given back, tokens / (phase time - wait),
     * is an upper bound of what the engine does with the CPU granted; when even that bound's
     * interval lies below the floor, starvation cannot explain the slowness: FAIL */
    int tokens[2];
};

struct throughput_phase {
    double floor;
    struct throughput_stats all;     /* every timed run */
    struct throughput_stats granted; /* the runs that were not starved (n may be 0) */
    struct throughput_stats bound;   /* the starvation bound's rates (rule.tokens; n 0: none) */
    int bound_fail;                  /* FAIL by the bound: slow even with the waits given back */
    int state;                       /* +1 lower bound >= floor, -1 granted upper < floor, 0 */
    int starved;                     /* undecided, and every run says below: starvation */
    /* against the baseline (rule.base): every run's ratio, the granted runs' ratio, and the
     * state as above against 1 - max_regression (0 when there is no baseline) */
    struct throughput_ratio vs_all, vs_granted;
    int vs_state, vs_starved;
};

struct throughput_decision {
    enum gate_verdict verdict; /* meaningful when !more */
    int more;                  /* undecided with budget left: take another timed run */
    int n, n_starved;
    double timed_s;
    struct throughput_phase phase[2]; /* prefill, decode */
    char reason[400];
};

/* Pure: the decision over n timed runs (n >= 1, all rates finite and positive, else ERR_INPUT).
 * For each phase with a floor: PASS when the interval of every run's median has its lower bound
 * at or above the floor (starved runs only make a rate lower); FAIL when the interval of the
 * not-starved runs has its upper bound below it; otherwise undecided. Any FAIL is FAIL, all PASS
 * is PASS; undecided with n < rule->runs, or n < max_runs and timed_s < max_seconds, is more;
 * undecided with the budget spent is ERROR "host starved: ..." when the runs say below the floor
 * but too few had their CPU, else ERROR "inconclusive: LO–HI tok/s vs floor F after N runs / S s".
 * With fewer than rule->runs runs the decision is always more. With a baseline each phase is also
 * compared the same way: PASS needs every run's ratio interval at or above 1 - max_regression,
 * FAIL "regressed" is the granted runs' interval below it, else more, then ERROR. */
int throughput_decide(const struct throughput_sample *s, int n, const struct throughput_rule *rule,
                      struct throughput_decision *d);

struct throughput_result {
    char mode[32];
    char backend[16], device[128];
    char prompt_path[128];                    /* what the prompt phase measured */
    int prompt_tokens, decode_tokens, warmup; /* as measured */
    double load_s;                            /* backend open, never counted */
    struct throughput_stats prefill, decode;  /* tokens per second, every timed run */
    struct throughput_decision decision;
    int n_checks, n_check_bad; /* spot checks made / failed */
    int n_check_route_tie;     /* spot checks excused as ROUTE_TIEs (counted in n_checks) */
    int n_check_replays;       /* timed runs whose checks were judged against the route-tie
                                * replay (an MoE subject with taps missed one) */
    enum gate_verdict verdict; /* throughput_judge(settings, metrics) */
    int pass;                  /* verdict == GATE_PASS */
    char reason[420];
    json_t *metrics; /* owned: what the judge reads */
    json_t *checks;  /* owned */
};

void throughput_result_free(struct throughput_result *r);

/* The throughput gate's verdict from settings as throughput_settings_json() writes them and
 * metrics as throughput_gate() records them; pure (gate_judge_fn). Everything is recomputed from
 * metrics "runs" (per run: seed, prefill_tps, decode_tps, wall_s, cpu_s, wait_s) and "spot" (per
 * check: run, pos, cosine, argmax, judge_argmax, judge_gap): token counts as set; run seeds all
 * different; every run checked at check_positions positions, each with cosine >= min_cosine and
 * the same argmax unless the judge's top-2 gap is below near_tie (else FAIL "timed work is not
 * the judged work"); then throughput_decide(), where "more" on a finished record is FAIL (the
 * measurement stopped before deciding and before its budget was spent). */
enum gate_verdict throughput_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                                   char *why, size_t n);

/* Open the mode's backend on m (loaded by the caller, which checked its digest) and the judge,
 * run as the header block says until throughput_decide() stops, build out->metrics and take the
 * verdict from throughput_judge(throughput_settings_json(cfg), out->metrics). Returns 0 when
 * measured, else a negative status (ERR_INPUT for bad settings). Free with
 * throughput_result_free(). */
int throughput_gate(const struct model *m, const struct mode *mode,
                    const struct throughput_config *cfg, struct throughput_result *out,
                    struct gate_err *err);

/* The settings rules throughput_gate() checks before it runs anything, known without a model,
 * beyond each field's own range (the gate table's rows, harness/gatedef.c, whose bounds use the
 * capacities below): runs <= max_runs, the capacities runs >= 1, max_runs <=
 * THROUGHPUT_MAX_RUNS and check_positions <= THROUGHPUT_MAX_CHECKS, and on the chat path
 * prompt_tokens >= THROUGHPUT_CHAT_TURNS. 0 or ERR_INPUT naming the values. The gate table's
 * throughput row calls it at ladder load, so a ladder never signs a FAIL for them. */
int throughput_config_check(const struct throughput_config *cfg, enum mode_path path,
                            struct gate_err *err);

/* The metrics object of r (new reference; throughput_gate() stores it in r->metrics). */
json_t *throughput_result_json(const struct throughput_result *r);
void throughput_print(FILE *f, const struct throughput_result *r);

#ifdef __cplusplus
}
#endif
#endif
