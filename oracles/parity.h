/* parity.h — the parity oracle: the mode under test against the reference twin's batched
 * forward, position by position, on the same teacher-forced token sequence.
 *
 * parity_judge() is a pure function over two logit arrays (docs/gates.md has the math):
 * per position cosine, KL(ref || test) of the softmaxes in double, top-5 overlap, max |Δlogit|,
 * and the argmax class MATCH / TIE_FLIP / WRONG. Non-finite logits on either side are a FAIL
 * naming the first such position — never a comparison that silently evaluates false.
 * parity_run() produces the two arrays (judge = clean ref, batched; subject = the mode, with
 * faults when asked) and, on FAIL, re-runs both with taps to localize the divergence.
 * A parity session keeps the judge's logits and both backends open so the falsification runs
 * (oracles/falsify.c) can re-run the subject many times without reloading anything.
 * Start reading: parity_judge(), then parity_run().
 */
#ifndef GATE_PARITY_H
#define GATE_PARITY_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "engine/backend.h"
#include "engine/model.h"
#include "faults/fault.h"
#include "oracles/distribution.h"
#include "oracles/gates.h"
#include "oracles/mode.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PARITY_MIN_POSITIONS 64 /* DESIGN.md: a parity run judges at least 64 positions */
#define PARITY_TOKEN_SEED 202   /* the conformance cases' seed: tokens.txt is reproduced */
#define PARITY_ROUTE_TIE                                                                           \
    2e-2 /* router near tie: the route-tie replay's tolerance (docs/gates.md) */
#define PARITY_MAX_REL_L2 5e-3 /* default max_rel_l2 (docs/gates.md, "tolerances from noise") */
#define PARITY_MAX_MEAN_REL_L2 2.5e-3 /* default max_mean_rel_l2 (docs/gates.md, same section) */
/* The F16 KV cache's rounding (docs/gates.md, "F16 KV rounding"): the median over positions of
 * |subject - judge with an F16-rounded cache| / |that judge - the F32 judge| must be at most
 * this. Measured: a cache rounding to nearest even 0.06-0.34 (conformance and synthetic F32/F16
 * models), one truncating toward zero 2.4-3.0. */
#define PARITY_KV_ROUND_MAX 1.0

/* That measurement, made for a subject with an F16 KV cache (mode.kv_f16) on a model whose
 * matmul weights are all float (F32/F16/BF16): there the cpu engine computes in float and its
 * own noise is ~0.3 % of the F16 rounding's effect, so the rounding itself can be judged. On
 * quantized weights the activations' quantization noise is 3-40x the effect: not decidable,
 * recorded as such (why). */
struct parity_kv_round {
    int measured; /* 1: ratio/p90 over n positions; 0: not decidable or not asked (why) */
    int n;
    double ratio, p90;
    char why[200];
};

/* Forced layers (docs/gates.md, "Forced layers"): each layer of the twin run on the subject's
 * own input at every position (ref_forward_forced, with the subject's claimed roundings,
 * backend_noise.rounding), so that the subject's error in one layer is not buried under the
 * noise the layers before it accumulate. Per layer l over the positions,
 *   err_l = ||subject_l - twin_l(subject_{l-1})|| / ||subject_l - subject_{l-1}||
 * (the layer's own output measured against what it added), and the head
 *   err_head = ||subject logits - twin head(subject_{L-1})|| / ||twin head||;
 * the worst layer must be at most this, its worst single row at most PARITY_FORCED_ROW_SHARE of
 * it, the head at most PARITY_FORCED_HEAD_SHARE of it. Measured on a correct cpu engine: worst
 * layer 1.2e-4 - 6.5e-4 (conformance Q4_K_M / Q8_0, dense and MoE, decode, prefill and chat;
 * Qwen3-0.6B shape 3.4e-4), head <= 8.1e-6; a 1 % scale of any one matmul: 5.8e-3 - 1.8e-2 at its
 * layer, 1e-2 at the head. err_l sums over the positions, so a fault at one position of many is
 * diluted there: the row bound judges those. */
#define PARITY_FORCED_MAX 2e-3
/* The head's bound as a share of max_forced: the head is one product on an exact input (no
 * chain of roundings after it), so its noise is far below a layer's. Measured, cpu engine: clean
 * head <= 8.1e-6 (25x under 2e-4); a 1 % output scale 1e-2; an activation quantizer that
 * truncates instead of rounding 8.2e-4 - 1.1e-3 at the head (its layers: 2.0e-3 - 3.1e-3). */
#define PARITY_FORCED_HEAD_SHARE 0.1
/* The worst single row's bound as a share of max_forced. A layer's error err_l sums over the
 * positions, so an error at a few of the judged positions is diluted by the clean others (a 1 %
 * scale of one matmul at one position of 96: about a tenth of its figure). Each row is also judged
 * on its own against the layer's typical row,
 *   row_{l,j} = ||subject_{l,j} - twin_{l,j}|| / sqrt(mean_j ||subject_{l,j} - subject_{l-1,j}||^2)
 * (the layer's RMS contribution as the yardstick: a row where the layer happens to add little is
 * not blown up), and the largest must be at most this share of max_forced. Measured on a correct
 * cpu engine: worst row 6.9e-4 - 9.6e-4 (the demo's tiny models over their 1,200-position spans,
 * Qwen3-0.6B shape at 96 positions; their layer figures 1.9e-4 - 4.3e-4), 1.14e-3 on the 0.6B
 * shape at 96 positions spread over 4,096 (layer 0, whose figure is 7.7e-4); a 1 % scale of one
 * matmul at every position 5.5e-3 - 1.5e-2 in its worst row, each row about its layer figure
 * (5.1e-3 - 8.8e-3). docs/gates.md, "Forced layers". */
#define PARITY_FORCED_ROW_SHARE 1.5
/* A max_forced above this (Inf, turning the check off, included) is refused by ladder check
 * unless parity.loose_reason says why (parity_check_loose). */
#define PARITY_FORCED_LOOSE_MAX (5 * PARITY_FORCED_MAX)
/* The head rows the forced measurement evaluates: at most this many of the judged positions,
 * evenly spaced, the last included (a 4,096-position session would otherwise hold a second
 * 4,096 x n_vocab array). */
#define PARITY_FORCED_HEAD_ROWS 128

struct parity_forced {
    int measured; /* 1: the numbers below; 0: not measured (why) */
    int n_layer, n_pos, n_head_rows;
    double worst;      /* the largest err_l (NaN: a non-finite subject) */
    int worst_layer;   /* its layer */
    double head;       /* err_head */
    double row;        /* the largest row_{l,j} (PARITY_FORCED_ROW_SHARE; NaN: non-finite) */
    int row_layer;     /* its layer */
    int row_pos;       /* its position (-1: unknown, a probe's record) */
    char rounding[48]; /* the roundings the twin emulated ("" none) */
    char why[200];
};

struct parity_config {
    int positions;          /* sequence length when parity_run generates tokens (>= 64) */
    double min_cosine;      /* every position's logit cosine must be >= this */
    double max_mean_kld;    /* mean KL(ref || test) over positions must be <= this (nats) */
    double max_kld;         /* every position's KL must be <= this (nats) */
    double near_tie;        /* logit gap (nats) below which an argmax flip is a TIE_FLIP */
    double route_tie;       /* MoE: the router near tie (logits). Where the subject's expert set
                             * differs from the judge's, both the subject's router gap (k-th minus
                             * (k+1)-th logit) and the judge's deficit for the subject's set
                             * (route_force) must be below it; the judge is then replayed with the
                             * subject's set there. Anywhere else a differing set is a FAIL.
                             * 0 = every differing set FAILs. */
    double max_rel_l2;      /* every position's relative L2 error of the centred logits,
                             * ||(t - mean t) - (r - mean r)|| / ||r - mean r||, must be <= this:
                             * the check a uniform scale cannot hide from (cosine is blind to it).
                             * INFINITY = not judged (a receipt recorded before the setting). */
    double max_forced;      /* the forced layers' bound (struct parity_forced): the worst layer's
                             * error must be <= this, its worst row's <= 1.5x, the head's <=
                             * 0.1x (PARITY_FORCED_ROW_SHARE, _HEAD_SHARE); Inf = not judged.
                             * Default PARITY_FORCED_MAX */
    double max_mean_rel_l2; /* the mean of that rel-L2 over the judged positions must be <= this:
                             * a small systematic error (a 1 % scale in a late layer) lifts every
                             * position a little, which the per-position maximum, set above the
                             * noise's tail, cannot see. INFINITY = not judged (older receipts) */
    int span;               /* generated sequences: the sequence is max(span, positions) tokens long
                             * and `positions` positions spread over it are judged, the last one
                             * included (0 = span positions: judge them all) */
    uint64_t seed;          /* which positions are sampled and how prefill is chunked
                             * (mode_prefill_split); the harness derives it from the cell's name
                             * and the run's input seed */
    uint64_t token_seed;    /* generated sequences: parity_tokens(); 0 = PARITY_TOKEN_SEED's.
                             * The harness gives each run a fresh one (gate run: the run's input
                             * seed), so an engine cannot know the sequence it is judged on */
};

/* The generated sequence a session of c judges (no supplied tokens, not the chat path): n ids.
 * With token_seed 0, the conformance sequence mode_tokens(PARITY_TOKEN_SEED); with a run's seed,
 * half fresh prose in the model's own tokenizer, half random ids (prose_mixed_for_model(),
 * oracles/prose.h; docs/gates.md, "The inputs are half prose"). Every prefix is the same whatever
 * n; *n_prose (may be NULL) counts the prose tokens, is_prose (may be NULL, n bytes) marks them.
 * Falsify's sweep rebuilds the sequence here. ERR_ENV on out of memory. */
int parity_tokens(const struct parity_config *c, const struct model *m, int n, int32_t *out,
                  int *n_prose, uint8_t *is_prose, struct gate_err *err);

/* The chat conversation a chat-path session of c judges: with token_seed 0 the fixed one
 * (mode_chat_for_model); with a run's seed a fresh three-turn conversation of prose
 * (prose_chat(), messages lengthened until it holds PARITY_MIN_POSITIONS tokens), rendered with
 * the model's chat template — an engine cannot know the conversation it is judged on
 * (docs/gates.md, "The inputs are half prose"). Ownership and *fallback as mode_chat_for_model().
 */
int parity_chat_tokens(const struct parity_config *c, const struct model *m, int32_t **ids, int *n,
                       int **turn_ends, int *n_turns, int *fallback, struct gate_err *err);

/* Defaults and bounds of the settings fields: the gate table's rows (harness/gatedef.c), the
 * one filler gatedef_parity_config(NULL, &c) (issue 24 §2: a default is written once). */
/* ERR_INPUT naming the field: positions < 64, a NaN threshold, min_cosine outside [-1, 1],
 * a negative KL bound or epsilon. */
int parity_config_check(const struct parity_config *c, struct gate_err *err);

enum parity_class {
    PARITY_MATCH = 0,     /* same argmax */
    PARITY_TIE_FLIP = 1,  /* different argmax, but the ref scores the test's pick within eps */
    PARITY_WRONG = 2,     /* different argmax, outside the near tie */
    PARITY_NONFINITE = 3, /* NaN or Inf in either side's logits at this position */
};

const char *parity_class_name(enum parity_class c);

struct parity_pos {
    int position;        /* the sequence position this row judges */
    double cosine;       /* cos(ref, test) of the logit vectors */
    double rel_l2;       /* ||(t - mean t) - (r - mean r)|| / ||r - mean r|| (0 when both are
                          * constant, +Inf when only the ref is) */
    double kld;          /* KL(softmax(ref) || softmax(test)), nats */
    double max_abs_diff; /* max_i |ref_i - test_i| */
    int top5;            /* |top5(ref) ∩ top5(test)|, 0..5 */
    int ref_top, test_top;
    double ref_gap; /* ref[ref_top] - ref[test_top], or ref's top-1/top-2 gap on a MATCH */
    enum parity_class cls;
};

/* The route-tie replay (issue 22 §6), MoE subjects that record taps. Where the subject's expert
 * set differs from the judge's at some (layer, position), the judge is run again with the
 * subject's set forced there (route_force) wherever that is a near tie: the subject's own router
 * gap and the judge's deficit both below route_tie. Every position is then judged against that
 * replay with the normal thresholds: no position is excused. A differing set that is not a near
 * tie is "refused" and FAILs parity (the subject routed where the judge's router clearly would
 * not). */
struct parity_route_replay {
    int replayed;           /* 1: the logits were judged against the replayed judge */
    int n_forced;           /* (layer, position) pairs where the judge took the subject's set */
    int n_forced_pos;       /* positions with at least one forced layer */
    double max_deficit;     /* the largest forced deficit (0 when none) */
    double max_subject_gap; /* the subject's largest router gap at a forced pair (0 when none) */
    int n_refused;          /* pairs whose set still differs: not a near tie */
    int refused_layer, refused_pos;              /* the first one in causal order (-1: none) */
    double refused_deficit, refused_subject_gap; /* there (NAN when unknown) */
};

/* Summary over positions; argmin/argmax are positions (the first on ties). p1/p99 are the
 * nearest-rank 1st and 99th percentiles. Non-finite positions are left out. */
struct parity_stat {
    double min, mean, max, p1, p99;
    int argmin, argmax;
};

/* Localization, per layer (filled by parity_run on FAIL when both sides give taps). */
struct parity_layer {
    double hidden_cosine;     /* residual stream after the layer, at the first failing position */
    double hidden_cosine_min; /* ... minimum over the judged positions (every position unless a
                               * span is sampled: only the judged rows' hidden states are kept) */
    int hidden_cosine_min_pos;
    /* MoE only (n_same + n_diff == n_pos): positions choosing the same expert set */
    int n_same, n_diff;
    int n_diff_near_tie; /* of n_diff: the ref's router gap k-th vs (k+1)-th < PARITY_ROUTE_TIE */
    int first_diff_pos;  /* -1 when none */
    double min_gap, max_gap; /* ref router gap over the differing positions (0 when none) */
};

struct parity_result {
    struct parity_config cfg;
    int n_pos, n_vocab;
    int pass;         /* 1 PASS, 0 FAIL */
    char reason[320]; /* one line: why it passed or which metric rejected it, where */
    struct parity_stat cosine, kld, max_abs_diff, top5;
    struct parity_stat rel_l2;
    int n_match, n_tie_flip, n_wrong, n_nonfinite;
    struct parity_route_replay route; /* MoE subjects with taps */
    int is_moe_taps;                  /* route is meaningful: an MoE subject that records taps */
    int kv_f16;                       /* the subject ran an F16 KV cache: kv_round is recorded */
    struct parity_kv_round kv_round;
    struct parity_forced forced; /* the forced layers, or why they were not measured */
    struct dist_summary dist;    /* the judge's next-token distributions (oracles/distribution.h);
                                  * n 0: not measured (parity_judge alone) */
    int first_nonfinite_pos;     /* -1 when all finite */
    int nonfinite_in_ref;        /* 1: the judge's own logits were non-finite there */
    int worst_pos;               /* position of the largest KL (-1 when none) */
    int first_fail_pos;          /* first position breaking a per-position rule (-1 when none) */
    struct parity_pos *pos;      /* n_pos, owned */
    /* MoE: per judged position, the largest deficit the replay forced there; NAN where nothing
     * was forced (NULL: no replay) */
    double *route_deficit; /* n_pos, owned */
    /* localization */
    int localized; /* 1 when layers[] is filled */
    int is_moe;
    int n_layer;
    int first_bad_layer;         /* first layer with hidden_cosine < min_cosine, -1 when none */
    struct parity_layer *layers; /* n_layer, owned */
    /* provenance, filled by parity_run */
    int seq_len;  /* tokens the subject and the judge ran (>= n_pos) */
    int n_chunks; /* prefill path: the batched part's chunk lengths */
    int chunks[MODE_MAX_CHUNKS];
    char mode[32];
    int chat_fallback;     /* chat mode used the fallback conversation */
    int chat_conversation; /* chat mode's own conversation: 1 fresh (parity_chat_tokens), -1 the
                            * fixed one (no run seed), 0 none (supplied tokens, other paths) */
    int prose_tokens;      /* tokens of the sequence that were prose (parity_tokens) */
    int prose_judged;      /* judged positions whose token was prose */
    int n_faults;
    char faults[FAULT_MAX][96];
};

/* Judge test against ref, both (n_pos, n_vocab) position-major. Fills *out (free with
 * parity_result_free) and returns 0 whatever the verdict; ERR_INPUT (reason set, pass 0) when
 * n_pos < 64, n_vocab < 5 or cfg is invalid; ERR_ENV when out of memory. */
int parity_judge(const float *ref, const float *test, int n_pos, int n_vocab,
                 const struct parity_config *cfg, struct parity_result *out);

/* ---- the rule: written once, used by every path ------------------------------------------------
 *
 * Every parity verdict — `gate parity`, `gate run`, falsify's "rejected", `receipt show/verify`,
 * `release check` — is parity_verdict() over a parity_summary, and every summary is
 * parity_summarize() over per-position numbers (in memory from parity_judge, or read back from a
 * receipt's metrics by parity_metrics_summary). Positions: at least cfg->positions; any
 * non-finite position FAILs; an argmax flip is a TIE_FLIP when the judge scores the subject's pick
 * within near_tie of its own, else WRONG (FAIL); min cosine >= min_cosine, mean KL <=
 * max_mean_kld, max KL <= max_kld, max rel-L2 <= max_rel_l2 at every position; no refused
 * route (struct parity_route_replay: an expert set that differs from the judge's beyond the
 * router near tie). No position is excused. */

struct parity_summary {
    int n_pos, n_nonfinite, n_wrong, n_tie_flip, n_match;
    struct parity_route_replay route; /* set by the caller after parity_summarize */
    struct parity_kv_round kv_round;  /* set by the caller; measured 0: not judged */
    struct parity_forced forced;      /* set by the caller; measured 0: not judged */
    int first_bad;                    /* first non-finite or WRONG position (-1 none) */
    double min_cosine, mean_kld, max_kld, max_rel_l2; /* over judged positions; NaN when a
                                                       * position is non-finite */
    double mean_rel_l2;
    int argmin_cosine, argmax_kld, argmax_rel_l2; /* positions (indices), -1 when none */
};

/* Summarize n per-position rows (only cosine, kld, rel_l2, ref_top, test_top and ref_gap are
 * read; ref_top/test_top < 0 or a non-finite cosine/KL/rel-L2 is non-finite). route: none. */
void parity_summarize(const struct parity_pos *pos, int n, const struct parity_config *cfg,
                      struct parity_summary *s);

/* THE parity rule. Returns 1 PASS, 0 FAIL. checks (a JSON array, may be NULL) receives one check
 * per rule (gate_check_num); why (n bytes, may be NULL) one line beginning "PASS: " or "FAIL: "
 * that names the first broken rule and its position. */
int parity_verdict(const struct parity_config *cfg, const struct parity_summary *s, json_t *checks,
                   char *why, size_t n);

/* 1 when the rule rejects s (a FAIL), 0 when it passes: parity_verdict without the words. The
 * predicate falsify's "was the fault rejected" asks. */
int parity_rejected(const struct parity_config *cfg, const struct parity_summary *s);

/* Thresholds from a recorded settings object (the gate table's parity keys; route_tie absent = 0,
 * max_rel_l2 absent = not judged). -1 and why set when a required key is missing. */
int parity_settings_read(const json_t *settings, struct parity_config *cfg, char *why, size_t n);

/* A summary from a recorded parity metrics object: its per_position arrays (cosine, kld, ref_gap,
 * ref_top, test_top; rel_l2 when recorded) and its route_replay (absent: nothing refused). -1
 * when they are missing or disagree in length, or route_replay is malformed. */
int parity_metrics_summary(const json_t *metrics, const struct parity_config *cfg,
                           struct parity_summary *s);

/* Falsify's predicate on recorded numbers: 1 rejected, 0 passes, -1 (and *why) when settings or
 * metrics are malformed. settings: the parity keys; metrics: a parity metrics object with
 * per_position arrays, or (a sweep point) the summary keys min_cosine, mean_kld, max_kld,
 * wrong_positions, nonfinite_positions, route_refused (absent: 0) and, when judged, max_rel_l2
 * and mean_rel_l2. */
int parity_metrics_rejected(const json_t *settings, const json_t *metrics, char *why, size_t n);

/* The parity gate's judge (the gate table's row): parity_settings_read + parity_metrics_summary +
 * parity_verdict. */
enum gate_verdict parity_gate_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                                    char *why, size_t n);

/* Judge the mode on model m. tokens (n): the sequence, or NULL for cfg->positions ids from
 * mode_tokens(PARITY_TOKEN_SEED) — or, for the chat path, the conversation of
 * parity_chat_tokens(); supplied tokens on the chat path are cut into six equal turns.
 * faults (may be NULL) go into the subject only, never the judge; they are validated against
 * the model first (fault_validate). Returns 0 when a verdict was reached (out->pass), else a
 * negative status (input error, backend missing on this host, ...). */
int parity_run(const struct model *m, const struct mode *mode, const struct fault_set *faults,
               const int32_t *tokens, int n, const struct parity_config *cfg, int n_threads,
               struct parity_result *out, struct gate_err *err);

void parity_result_free(struct parity_result *r);

/* A "severity" on one scale for every metric: the largest of (1 - min cosine) / (1 -
 * min_cosine), mean KL / max_mean_kld, max KL / max_kld; +Inf when a position was WRONG or
 * non-finite. A PASS has severity <= 1; the sweep compares clean noise and weak faults on it. */
double parity_severity(const struct parity_result *r);

/* Every number of r as JSON (new reference). Non-finite numbers become "NaN", "Inf", "-Inf". */
json_t *parity_result_json(const struct parity_result *r);

/* A number for a receipt: a JSON real, or the string "NaN" / "Inf" / "-Inf". */
json_t *parity_json_number(double x);

/* The table `gate parity` prints. */
void parity_print(FILE *f, const struct parity_result *r);

/* ---- tolerances from noise (issue 22 §2; docs/gates.md, "Tolerances from noise") ----------- */

/* A backend's documented noise against the judge: the worst value of each parity metric over
 * the measured runs of a correct build (source says which). measured 0: no device has measured
 * it yet (margins unknown, nothing refused); exact 1: the judge against itself (0 noise). */
#define parity_noise backend_noise /* the backend's row (engine/backend.h) */

/* How far above a backend's measured noise a threshold may sit before `ladder check` refuses it
 * without a stated reason (parity.loose_reason): cosine and KL catch gross errors, so they sit
 * far above the noise; the rel-L2 bounds are the fine ones (a 1 % scale: the power probe). */
#define PARITY_LOOSE_FACTOR_LOGIT 1000.0
#define PARITY_LOOSE_FACTOR_REL_L2 4.0

/* The noise row of backend `backend` (backend_noise_of); NULL for an unknown name. */
const struct parity_noise *parity_noise_of(const char *backend);

/* 0 when every threshold of cfg sits within its factor of the backend's measured noise (or the
 * backend's noise is not measured, or exact); else -1 and why names the first setting, its
 * value, the noise and the limit. */
int parity_check_loose(const struct parity_config *cfg, const char *backend, char *why, size_t n);

/* {backend, measured, source, noise: {...}, margin: {...}} for a receipt: each threshold over
 * the noise it must clear (margin = threshold / noise; for min_cosine (1 - min_cosine) / noise);
 * NULL for an unknown backend. */
json_t *parity_noise_json(const struct parity_config *cfg, const char *backend);

/* ---- sessions: one judge, one subject, many runs ------------------------------------------- */

struct parity_session;

/* Open a session: build the sequence as parity_run does, open the judge (ref, no faults) and
 * run it once with taps, open the subject without faults. with_taps 0 skips the
 * taps (no localization, no witness). When a span is sampled (a generated sequence longer than
 * `positions`), every run of the session keeps only the judged rows (struct mode_keep): logits
 * and hidden-state taps are positions x n_vocab / n_embd, not sequence-long (issue 26 §2), and
 * the witness and the fault agreement's `moved` look at those rows. */
int parity_session_open(struct parity_session **out, const struct model *m, const struct mode *mode,
                        const int32_t *tokens, int n, const struct parity_config *cfg,
                        int n_threads, int with_taps, struct gate_err *err);
void parity_session_close(struct parity_session *s);

/* The sequence length of the session. */
int parity_session_n(const struct parity_session *s);

/* Run the subject with faults (copied onto its backend with backend_set_faults for this run
 * only; NULL = clean), judge it (cfg, or the session's when NULL), localize on FAIL when
 * localize is set. */
int parity_session_run(struct parity_session *s, const struct fault_set *faults,
                       const struct parity_config *cfg, int localize, struct parity_result *out,
                       struct gate_err *err);

/* Whether parity_session_run measures the forced layers (struct parity_forced; on by default):
 * falsify turns it off for the fault sweeps, whose faults are gross and judged by the logits,
 * and keeps it for the clean run and the power probes. */
void parity_session_set_forced(struct parity_session *s, int on);

/* Witness that the faults of the last run fired: compares its taps with a clean subject run
 * (made once, on first use). Routing faults must change a chosen expert or weight; skip_qk_norm
 * the hidden state after an affected layer. *fired 0 when nothing differed; layer/pos say where
 * it first did (layer-major order); what names the tap. A subject that records no taps (an exec
 * engine: backend_records_taps() == 0) is witnessed by its logits instead: fired when any
 * position's logits differ from the clean run's (tapless set, layer -1). */
struct parity_witness {
    int fired;
    int layer, pos;
    char what[64];
    int n_route_diff;  /* (layer, position) pairs whose experts or weights differ */
    int n_hidden_diff; /* (layer, position) pairs whose hidden state differs */
    int n_logit_diff;  /* positions whose logits differ from the clean run's */
    int tapless;       /* the subject records no taps (an exec engine): fired means the logits
                          moved; layer -1 */
};
int parity_session_witness(struct parity_session *s, enum fault_kind kind, struct parity_witness *w,
                           struct gate_err *err);

/* The fault agreement (issue 23 §3): the judge run with the same faults over the session's
 * sequence, against the subject's last (faulted) run by the parity rule (cfg, or the session's
 * when NULL; no route-tie excuses: nothing to read them from). A subject that applied the fault
 * as specified matches the judge's faulted run as its clean run matches the clean judge; one that
 * ignored set_faults and moved its logits some other way does not. The witness of a tap-less
 * subject, whose logits moving is otherwise the only evidence. */
int parity_session_agreement(struct parity_session *s, const struct fault_set *faults,
                             const struct parity_config *cfg, struct parity_result *out, int *moved,
                             struct gate_err *err);
/* moved (may be NULL): the positions whose faulted judge logits differ from the clean judge's.
 * Falsify by proxy (issue 23 §3) reads the same run the other way: for a subject that cannot take
 * faults, the subject's clean run against the judge under a fault must be REJECTED, proof that at
 * these thresholds and this engine's noise the fault would have been seen. */

/* ---- the route-tie replay, for the other gates that judge an MoE subject with taps -------- */

/* Allocate what parity_replay_run needs in *t (zeroed first, or holding earlier such arrays):
 * experts and the force arrays for n tokens. Free with parity_replay_free. */
int parity_replay_alloc(struct backend_taps *t, const struct model_hparams *hp, int n,
                        struct gate_err *err);
void parity_replay_free(struct backend_taps *t);
/* Allocate in *t (zeroed) what parity_replay_run reads of the subject: experts, router_kth and
 * router_k1th for n tokens. Free with parity_replay_free. */
int parity_routes_alloc(struct backend_taps *t, const struct model_hparams *hp, int n,
                        struct gate_err *err);

/* Run the judge (a ref backend) over tokens (n) forced to the subject's expert sets where they
 * are router near ties (struct parity_route_replay's rule, tol = route_tie): subj holds the
 * subject's experts, router_kth and router_k1th over the same n tokens. logits (n, n_vocab)
 * receive the replayed judge's; *rr the account (replayed 0 when nothing was forced: logits are
 * then the plain judge's); pos_deficit (n, may be NULL) the largest forced deficit per position
 * (NAN where none); pos_refused (n, may be NULL) the refused pairs per position. */
int parity_replay_run(struct backend *judge, const struct model *m, const int32_t *tokens, int n,
                      const struct backend_taps *subj, double tol, struct backend_taps *replay,
                      float *logits, struct parity_route_replay *rr, double *pos_deficit,
                      int *pos_refused, struct gate_err *err);

#ifdef __cplusplus
}
#endif
#endif
