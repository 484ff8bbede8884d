/* capability.h — the capability gate: did the mode run where it was asked to run?
 *
 * Measured, not echoed (DESIGN.md settled question 7): the verdict reads what the backend
 * counted while it ran (struct backend_info: backend name, device, forwards, kernel launches),
 * never what the engine was asked. A cuda.* mode with zero kernel launches FAILS whatever the
 * backend calls itself; a mode whose backend reports another name FAILS (a silent fallback).
 * Start reading: capability_judge().
 */
#ifndef GATE_CAPABILITY_H
#define GATE_CAPABILITY_H

#include <jansson.h>

#include "base/err.h"
#include "engine/backend.h"
#include "engine/model.h"
#include "oracles/mode.h"

#ifdef __cplusplus
extern "C" {
#endif

struct capability_result {
    int pass; /* 1 PASS, 0 FAIL */
    char reason[320];
    char asked[32];           /* the mode, "cuda.decode" */
    struct backend_info info; /* what ran */
};

/* Pure: judge info (read from the backend after it ran) against the mode asked for. FAIL when
 * the backend name differs, nothing was evaluated (forwards or tokens 0), a cuda mode counted
 * zero kernel launches or reports a CPU device, or a CPU mode (ref, cpu) reports a non-CPU
 * device or kernel launches. */
void capability_judge(const struct mode *mode, const struct backend_info *info,
                      struct capability_result *out);

/* Open the mode's backend on m, run 16 tokens (mode_tokens, seed 1) along its path, read its
 * info and judge it. A backend not in this build is ERR_ENV ("cannot run on this host"); any
 * other failure to run is returned as a status with the message in err. */
int capability_run(const struct model *m, const struct mode *mode, int n_threads,
                   struct capability_result *out, struct gate_err *err);

/* Every number of r as JSON (new reference). */
json_t *capability_result_json(const struct capability_result *r);

#ifdef __cplusplus
}
#endif
#endif
