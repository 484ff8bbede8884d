/* falsify.h — the proof that the parity oracle bites: inject each fault into the mode under
 * test (never the judge), expect parity to REJECT, and prove the fault fired.
 *
 * falsify_run(): per fault, run the mode with it, judge with parity, witness that it fired
 * (taps differ from a clean run), record the metric that rejected it. Then a sampled sweep:
 * per fault kind, sweep_samples (layer, position) pairs chosen deterministically, each fault at
 * that one layer and position; detected / escaped / no-op (the injection changed nothing: it
 * did not fire, or uniform_weights met weights already uniform within FALSIFY_NOOP_UNIFORM).
 * The verdict is falsify_judge()'s over the recorded metrics: the clean run passes parity, every
 * fault fired (witness count > 0) and is rejected by the parity numbers under the settings'
 * thresholds, and every kind's sweep detection rate (no-ops excluded) is >= min_detection.
 * Thresholds looser than the strength floor (FALSIFY_FLOOR_*) are refused up front: a falsify
 * run with min_cosine 0 proves nothing.
 * falsify_sweep(): the oracle's power: each fault kind at one layer × one position at a time,
 * detection rate, weakest detected fault, escapes, the clean noise ceiling over N runs, and the
 * separation between them, with loud warnings when a threshold sits in the noise or above the
 * weakest fault. docs/gates.md has the figures for the tiny MoE model.
 * Start reading: falsify_run().
 */
#ifndef GATE_FALSIFY_H
#define GATE_FALSIFY_H

#include <jansson.h>
#include <stdio.h>

#include "base/err.h"
#include "engine/model.h"
#include "faults/fault.h"
#include "oracles/gates.h"
#include "oracles/mode.h"
#include "oracles/parity.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The strength floor: the loosest parity thresholds a falsify run accepts. At the floor every
 * all-layer fault measured on the tiny models is still rejected with a wide margin (worst: a
 * uniform_weights min cosine 0.851 and max KL 1.34; docs/gates.md), and the floor sits an order
 * of magnitude above the measured noise of quantized engines (cosine 0.99989). Looser settings
 * would let a fault "pass" falsification by construction. near_tie above 0.25 nats would excuse
 * argmax flips that faults produce (they flip gaps >= 0.3). */
#define FALSIFY_FLOOR_MIN_COSINE 0.99
#define FALSIFY_FLOOR_MAX_KLD 0.5
#define FALSIFY_FLOOR_MAX_MEAN_KLD 0.05
#define FALSIFY_FLOOR_NEAR_TIE 0.25
/* route_tie above 0.05 would let the route-tie replay follow a subject's expert choice where the
 * judge's router is clear, and a wrong_expert fault there would hide in the replay. The cpu
 * engine's router noise reaches ~1e-2 (docs/gates.md); the default is 2e-2. */
#define FALSIFY_FLOOR_ROUTE_TIE 0.05
/* The least sweep detection floor a falsify run accepts: a floor of 0 cannot fail, so the sweep
 * would prove nothing (the gate table's min_detection bound and default, 0.5, say the same). */
#define FALSIFY_MIN_DETECTION_FLOOR 0.01
/* A uniform_weights injection on weights already within this of 1/k changed nothing. */
#define FALSIFY_NOOP_UNIFORM 1e-3

/* The power probe's bounds (issue 22 §3): the scale factor, and layers per tensor. */
#define FALSIFY_POWER_FACTOR 1.01
#define FALSIFY_POWER_FACTOR_MAX 1.05 /* a probe above 5 % proves little about 1 % errors */
#define FALSIFY_POWER_LAYERS 2
#define FALSIFY_CLEAN_RUNS 5   /* the sweep's clean runs for the noise ceiling (n_clean) */
#define FALSIFY_MAX_PROBES 128 /* 5 tensors x 16 layers + output fit */

struct falsify_config {
    struct parity_config parity; /* the thresholds under test (a cell's parity settings) */
    int n_clean;                 /* sweep: clean runs for the noise ceiling (FALSIFY_CLEAN_RUNS) */
    int sweep_samples;           /* gate: sampled (layer, position) injections per kind */
    double min_detection;        /* gate: least sampled detection rate per kind */
    /* gate: the power probe. Each matmul tensor a uniform scale reaches the logits through
     * (fault_power_tensors) is scaled by power_factor at power_layers layers (the last one and
     * others drawn from a fixed stream), and the output matrix once; parity must reject every
     * probe at the cell's thresholds, or the gate FAILs: "thresholds too loose to see a 1 %
     * error" */
    double power_factor; /* (1, FALSIFY_POWER_FACTOR_MAX] */
    int power_layers;    /* >= 1 */
    /* falsify by proxy (issue 23 §3), per fault kind: bit 1 << enum fault_kind for each kind
     * the subject cannot take (an exec engine whose `supports` lacks faults: every kind; one
     * whose ladder entry lists `faults: [...]`: the others). Each listed fault, sweep sample and
     * power probe (kind scale) of such a kind goes into the judge instead, and the subject's
     * clean run judged against the faulted judge must be rejected; every other kind is injected
     * into the subject. 0: no proxy */
    unsigned proxy_kinds;
    /* the cell's settings.engine (borrowed; NULL for gate's own engines): the run's own verdict
     * judges with it, as the release check judges the receipt (falsify_settings_json) */
    const json_t *engine;
};

/* The fault kinds a falsify run with `faults` injects (bit 1 << enum fault_kind each): the
 * listed faults' kinds (the sweep's too) and scale (the power probe). */
unsigned falsify_kinds_used(const struct fault_set *faults);

/* Defaults and bounds of the settings fields: the gate table's rows (harness/gatedef.c), the
 * one filler gatedef_falsify_config(NULL, &c) (issue 24 §2: a default is written once). */
/* ERR_INPUT naming the setting and its floor when p is looser than the strength floor (or
 * invalid: parity_config_check). The ladder check calls this too. */
int falsify_check_floor(const struct parity_config *p, struct gate_err *err);

/* The fault list's rules for a model of that shape, the ones falsify_run() checks first: at
 * least one fault; skip_qk_norm only where the model has per-head Q/K norms; fault_validate()
 * (routing faults on MoE only, layer scopes inside n_layer, ranks below n_expert_used, scale
 * tensors the model has); with n_pos > 0, every position scope starting inside the n_pos judged
 * positions. `gate ladder check` calls it with what it knows: at load the architecture alone
 * (n_layer and n_expert_used INT_MAX), then the model file's or synth preset's shape. 0 or
 * ERR_INPUT naming the fault. */
int falsify_check_faults(const struct fault_set *faults, int n_layer, int is_moe, int n_expert_used,
                         int has_qk_norm, int n_pos, struct gate_err *err);

/* The settings rules falsify_run() checks before it runs anything, known without a model, beyond
 * each field's own range (the gate table's rows, harness/gatedef.c: sweep_samples,
 * min_detection from FALSIFY_MIN_DETECTION_FLOOR to 1, power_factor up to
 * FALSIFY_POWER_FACTOR_MAX, power_layers): falsify_check_floor() on cfg->parity. 0 or ERR_INPUT
 * naming the value. The gate table's falsify row calls it at ladder load. */
int falsify_config_check(const struct falsify_config *cfg, struct gate_err *err);

/* The settings object falsify_judge reads, from faults and cfg (keys as the ladder records
 * them: faults, parity, sweep_samples, min_detection, power_factor, power_layers; a copy of
 * cfg->engine as "engine", else cfg->proxy_kinds as "proxy_kinds" (kind names) when not 0; new
 * reference). */
json_t *falsify_settings_json(const struct fault_set *faults, const struct falsify_config *cfg);

/* The falsify gate's verdict from settings and metrics as falsify_run() records them; pure
 * (gate_judge_fn). Recomputes each fault's "rejected" from its recorded parity numbers and the
 * settings' thresholds, "fired" from its witness counts, each kind's sweep rate from its points;
 * settings looser than the floor FAIL. Each fault, sweep point and power probe must be recorded
 * by proxy exactly when the settings' engine does not take its kind (settings.engine: its
 * supports and `faults` list; without an engine, settings.proxy_kinds). */
enum gate_verdict falsify_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                                char *why, size_t n);

struct falsify_fault {
    char name[96]; /* fault_format() of the spec */
    struct fault_spec spec;
    int fired; /* the witness saw it act */
    struct parity_witness witness;
    int rejected;                /* parity said FAIL */
    double severity;             /* parity_severity() of the faulted run */
    char metric[320];            /* what rejected it, where: parity's reason */
    int pass;                    /* fired && rejected */
    struct parity_result parity; /* owned */
    /* a tap-less subject (exec): its faulted run against the judge's run with the same fault
     * (parity_session_agreement); fired needs it to PASS. has_agreement 0 otherwise. */
    int has_agreement;
    struct parity_result agreement; /* owned */
    int proxy; /* falsify by proxy: parity is the clean subject against the faulted judge */
};

/* One sampled single-layer x single-position injection of the gate's sweep. */
struct falsify_sample {
    int layer, pos;
    int route_diffs, hidden_diffs; /* the witness's counts */
    int logit_diffs, tapless;      /* positions whose logits moved; the subject has no taps */
    double uniform_dev; /* uniform_weights: max |w - 1/k| of the clean weights there; else 0 */
    double min_cosine, mean_kld, max_kld;
    double max_rel_l2, mean_rel_l2; /* parity's rel-L2 bounds read them */
    int n_wrong, n_nonfinite;
    int n_route_refused; /* parity's refused routes (the route-tie replay) */
    int proxy;           /* injected into the judge (falsify by proxy); logit_diffs: its moves */
    /* tap-less: the same numbers for the faulted run against the judge's run with the same
     * injection (parity_session_agreement); fired needs parity to accept that pair */
    struct falsify_numbers {
        double min_cosine, mean_kld, max_kld, max_rel_l2, mean_rel_l2;
        int n_wrong, n_nonfinite;
        int n_route_refused; /* 0: no taps, no replay */
        int forced;          /* 1: forced_worst / forced_row / forced_head measured (parity's forced
                              * layers) */
        double forced_worst, forced_row, forced_head;
    } agreement;
};

struct falsify_kind {
    struct fault_spec spec; /* the first listed fault of the kind: its rank and scope */
    char name[96];
    int n_pairs;              /* (layer, position) pairs in its scope */
    int n;                    /* samples taken: min(sweep_samples, n_pairs) */
    struct falsify_sample *s; /* n, owned */
    int detected, escapes, noops;
    double rate; /* detected / (n - noops); NaN when that is 0 */
};

/* One power probe: scale:tensor=blk.LAYER.TENSOR (or output),factor=power_factor over the whole
 * sequence. */
struct falsify_probe {
    int tensor, layer; /* enum fault_tensor; layer -1 for output */
    char name[96];     /* fault_format() of the spec */
    int hidden_diffs, logit_diffs, tapless;
    int proxy; /* into the judge: num is the clean subject against the faulted judge */
    struct falsify_numbers num;       /* the faulted run against the judge */
    struct falsify_numbers agreement; /* tap-less: against the judge's run with the same fault */
};

struct falsify_result {
    char mode[32];
    int pass;                  /* verdict == GATE_PASS */
    enum gate_verdict verdict; /* falsify_judge(settings, metrics) */
    char reason[512];
    struct parity_result clean; /* the mode without faults, owned */
    int n;
    struct falsify_fault f[FAULT_MAX];
    int n_kinds;
    struct falsify_kind k[FAULT_KIND_COUNT];
    int is_moe, n_layer;  /* the model, for the power probe's coverage */
    unsigned proxy_kinds; /* the kinds that went into the judge (falsify_config.proxy_kinds of
                             falsify_kinds_used()) */
    unsigned kinds_used;  /* falsify_kinds_used() of the run's faults */
    double power_factor;
    int n_probes;
    struct falsify_probe probes[FALSIFY_MAX_PROBES];
    json_t *metrics; /* owned: what the judge read */
    json_t *checks;  /* owned */
};

/* Judge mode on m with each fault of `faults` in turn (tokens as parity_run takes them), then
 * the sampled sweep (cfg->sweep_samples per kind). An empty fault list, a routing fault on a
 * dense model, a layer or position scope that does not exist, thresholds looser than the floor:
 * ERR_INPUT, never a pass. Returns 0 when every fault was judged (out->verdict says how), else a
 * negative status. Free out with falsify_result_free(). */
int falsify_run(const struct model *m, const struct mode *mode, const struct fault_set *faults,
                const int32_t *tokens, int n, const struct falsify_config *cfg, int n_threads,
                struct falsify_result *out, struct gate_err *err);

void falsify_result_free(struct falsify_result *r);
/* The metrics object (what a receipt records and falsify_judge reads; new reference). */
json_t *falsify_result_json(const struct falsify_result *r);
void falsify_print(FILE *f, const struct falsify_result *r);

/* ---- the sweep ------------------------------------------------------------------------------ */

#define FALSIFY_SWEEP_MAX_ESCAPES 32

struct falsify_sweep_point {
    int layer, pos;
    double severity; /* parity_severity (Inf when an argmax went WRONG) */
    double min_cosine, max_kld;
    int n_wrong;
};

struct falsify_sweep_kind {
    char name[96]; /* the base spec: kind and rank; layer/position scopes bound the sweep */
    struct fault_spec spec;
    int n_injected, n_not_fired, n_detected, n_escaped;
    double detection_rate; /* n_detected / (n_injected - n_not_fired) */
    int have_weakest;
    struct falsify_sweep_point weakest; /* the detected injection with the smallest severity */
    int n_escapes_listed;
    struct falsify_sweep_point escapes[FALSIFY_SWEEP_MAX_ESCAPES];
};

struct falsify_sweep_result {
    char mode[32];
    struct parity_config cfg;
    int n_pos, n_layer;
    int pos_lo, pos_hi; /* swept positions */
    int n_clean;
    double noise_severity; /* the noisiest clean run */
    double noise_min_cosine, noise_max_kld, noise_mean_kld;
    int noise_wrong;
    int n_kinds;
    struct falsify_sweep_kind k[FAULT_MAX];
    double weakest_severity;     /* over all kinds; Inf when nothing was detected */
    double separation;           /* weakest_severity / noise_severity (Inf when the noise is 0) */
    int threshold_in_noise;      /* a clean run failed, or its severity is within 2x of 1 */
    int threshold_above_weakest; /* some fault escaped: the threshold sits above it */
    int pass;                    /* no escapes, clean runs pass, no threshold warning */
    char warning[512];
};

/* Progress of falsify_sweep: `done` of `total` parity runs finished (total = n_clean + the sum
 * over kinds of layers x positions in scope; it is known before the first run, which reports
 * done = 0). Called from the sweeping thread; the core prints nothing itself. */
typedef void (*falsify_progress_fn)(void *ctx, int done, int total);

/* For each spec in kinds (kind, rank; its layer/position scopes, when given, bound the sweep;
 * the defaults mean every layer and every position), inject it at one layer × one position at
 * a time, judge each run, and run the clean mode cfg->n_clean times for the noise ceiling.
 * Cost: n_clean + layers x positions x kinds parity runs of the mode (each a full sequence).
 * progress (may be NULL) is called with ctx before the first run and after each one. */
int falsify_sweep(const struct model *m, const struct mode *mode, const struct fault_set *kinds,
                  const int32_t *tokens, int n, const struct falsify_config *cfg, int n_threads,
                  falsify_progress_fn progress, void *ctx, struct falsify_sweep_result *out,
                  struct gate_err *err);

json_t *falsify_sweep_json(const struct falsify_sweep_result *r);
void falsify_sweep_print(FILE *f, const struct falsify_sweep_result *r);

/* The faults that apply to a model (DESIGN.md settled question 4): the three routing faults
 * and skip_qk_norm on MoE, skip_qk_norm alone on dense; skip_qk_norm only where
 * model_has_qk_norm(m). */
void falsify_default_faults(const struct model *m, struct fault_set *out);

#ifdef __cplusplus
}
#endif
#endif
