/* consistency.h — the self-consistency (metamorphic) gate (issue 22 §4): invariances an engine
 * declares in its backend row (engine/backend.c BACKENDS[]: bitwise, threads, isas), checked on
 * the engine alone, no judge needed.
 *
 * One sequence (positions tokens: the run's fresh half-prose inputs, oracles/prose.h), run as
 * variants of the same computation: decode (one token per forward: the reference run), prefill (one
 * batch), chunks of 7 and 45 (not multiples of the 16-token GEMM tile, so partial tiles and tails
 * run), resume (the whole sequence, the cache truncated to a third, the rest again: a chat turn's
 * KV reuse), last-rows (chunks of 7 through backend_forward_last, greedy decoding's call: each
 * chunk's last row), the whole batch at 1, 2 and 3 threads each `repeats` times (a race shows as
 * two runs that differ), and the batch under each instruction set the backend declares that this
 * machine runs. Every variant's logits are compared with the reference run's: identical bit for bit
 * where the backend declares `bitwise`, else within max_abs (the largest absolute logit
 * difference). Thread variants run only where the backend declares `threads`; an instruction set
 * this machine cannot run is recorded as not run (visible, not a pass of that set). Start reading:
 * consistency_run(), consistency_judge().
 */
#ifndef GATE_CONSISTENCY_H
#define GATE_CONSISTENCY_H

#include <jansson.h>

#include "base/err.h"
#include "engine/model.h"
#include "oracles/gates.h"
#include "oracles/mode.h"

#ifdef __cplusplus
extern "C" {
#endif

struct consistency_config {
    int positions;       /* sequence length */
    int repeats;         /* runs per thread count */
    double max_abs;      /* bound for a backend that does not declare bitwise */
    uint64_t token_seed; /* the sequence: prose_mixed_tokens(token_seed), half prose (gate run: the
                          * run's input seed, fresh each run); 0 = mode_tokens(CONSISTENCY_SEED) */
};

/* Defaults and bounds of the settings fields: the gate table's rows (harness/gatedef.c), the
 * one filler gatedef_consistency_config(NULL, &c) (issue 24 §2: a default and a bound are written
 * once). Every rule of these settings is a single field's bound, so there is no config check
 * here: a value out of its row's range is refused where it is read (ladder load, a flag). */

/* Run every variant of mode's backend on m (mode's KV cache type and engine; n_threads for the
 * reference and the non-thread variants) and write *metrics (new reference): the backend's
 * declared invariances, and per variant its name, max_abs difference from the reference, the
 * first differing position (-1 none), and whether it ran. 0 when every variant ran or was
 * recorded as not runnable here; a negative status (a backend error) otherwise. */
int consistency_run(const struct model *m, const struct mode *mode,
                    const struct consistency_config *cfg, int n_threads, json_t **metrics,
                    struct gate_err *err);

/* The gate's verdict from settings {positions, repeats, max_abs} and the recorded metrics; pure
 * (gate_judge_fn): every variant that ran agrees with the reference (0 where bitwise is declared,
 * else <= max_abs), the reference and prefill, chunk and resume variants ran, thread variants
 * ran where declared. */
enum gate_verdict consistency_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                                    char *why, size_t n);

#ifdef __cplusplus
}
#endif
#endif
