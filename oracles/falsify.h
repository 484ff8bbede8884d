/* falsify.h — the proof that the parity oracle bites: inject each fault into the mode under
 * test (never the judge), expect parity to REJECT, and prove the fault fired.
 *
 * falsify_run(): per fault, run the mode with it, judge with parity, witness that it fired
 * (taps differ from a clean run), record the metric that rejected it. The gate passes only when
 * the clean run passes parity and every fault fired and was rejected; a fault that escaped
 * means the oracle is blind there, one that did not fire tested nothing — both FAIL.
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

#include "engine/err.h"
#include "engine/model.h"
#include "faults/fault.h"
#include "oracles/mode.h"
#include "oracles/parity.h"

#ifdef __cplusplus
extern "C" {
#endif

struct falsify_config {
    struct parity_config parity; /* the thresholds under test (a cell's parity settings) */
    int n_clean;                 /* sweep: clean runs for the noise ceiling (default 5) */
};

void falsify_config_default(struct falsify_config *c);

struct falsify_fault {
    char name[96];         /* fault_format() of the spec */
    struct fault_spec spec;
    int fired;             /* the witness saw it act */
    struct parity_witness witness;
    int rejected;          /* parity said FAIL */
    double severity;       /* parity_severity() of the faulted run */
    char metric[320];      /* what rejected it, where: parity's reason */
    int pass;              /* fired && rejected */
    struct parity_result parity; /* owned */
};

struct falsify_result {
    char mode[32];
    int pass;
    char reason[320];
    struct parity_result clean; /* the mode without faults, owned */
    int n;
    struct falsify_fault f[FAULT_MAX];
};

/* Judge mode on m with each fault of `faults` in turn (tokens as parity_run takes them). An
 * empty fault list, a routing fault on a dense model, a layer or position scope that does not
 * exist: ERR_INPUT, never a pass. Returns 0 when every fault was judged (out->pass says how),
 * else a negative status. Free out with falsify_result_free(). */
int falsify_run(const struct model *m, const struct mode *mode, const struct fault_set *faults,
                const int32_t *tokens, int n, const struct falsify_config *cfg, int n_threads,
                struct falsify_result *out, struct gate_err *err);

void falsify_result_free(struct falsify_result *r);
json_t *falsify_result_json(const struct falsify_result *r);
void falsify_print(FILE *f, const struct falsify_result *r);

/* ---- the sweep ------------------------------------------------------------------------------ */

#define SWEEP_MAX_ESCAPES 32

struct sweep_point {
    int layer, pos;
    double severity;       /* parity_severity (Inf when an argmax went WRONG) */
    double min_cosine, max_kld;
    int n_wrong;
};

struct sweep_kind {
    char name[96];         /* the base spec: kind and rank; layer/position scopes bound the sweep */
    struct fault_spec spec;
    int n_injected, n_not_fired, n_detected, n_escaped;
    double detection_rate; /* n_detected / (n_injected - n_not_fired) */
    int have_weakest;
    struct sweep_point weakest;  /* the detected injection with the smallest severity */
    int n_escapes_listed;
    struct sweep_point escapes[SWEEP_MAX_ESCAPES];
};

struct sweep_result {
    char mode[32];
    struct parity_config cfg;
    int n_pos, n_layer;
    int pos_lo, pos_hi; /* swept positions */
    int n_clean;
    double noise_severity;     /* the noisiest clean run */
    double noise_min_cosine, noise_max_kld, noise_mean_kld;
    int noise_wrong;
    int n_kinds;
    struct sweep_kind k[FAULT_MAX];
    double weakest_severity;   /* over all kinds; Inf when nothing was detected */
    double separation;         /* weakest_severity / noise_severity (Inf when the noise is 0) */
    int threshold_in_noise;    /* a clean run failed, or its severity is within 2x of 1 */
    int threshold_above_weakest; /* some fault escaped: the threshold sits above it */
    int pass;                  /* no escapes, clean runs pass, no threshold warning */
    char warning[512];
};

/* For each spec in kinds (kind, rank; its layer/position scopes, when given, bound the sweep;
 * the defaults mean every layer and every position), inject it at one layer × one position at
 * a time, judge each run, and run the clean mode cfg->n_clean times for the noise ceiling. */
int falsify_sweep(const struct model *m, const struct mode *mode, const struct fault_set *kinds,
                  const int32_t *tokens, int n, const struct falsify_config *cfg, int n_threads,
                  struct sweep_result *out, struct gate_err *err);

json_t *sweep_result_json(const struct sweep_result *r);
void sweep_print(FILE *f, const struct sweep_result *r);

/* The faults that apply to a model (DESIGN.md settled question 4): the three routing faults
 * and skip_qk_norm on MoE, skip_qk_norm alone on dense. */
void falsify_default_faults(const struct model *m, struct fault_set *out);

#ifdef __cplusplus
}
#endif
#endif
