/* gates.h — one definition of each gate's verdict (issue 10, item 4).
 *
 * Every gate is one row of a table (oracles/gates.c): its name, its settings schema (keys,
 * defaults, bounds — the ladder parses and the receipt records exactly these keys) and the one
 * function that turns settings + metrics into checks and a verdict. The oracle run, `gate run`,
 * `gate receipt show/verify` and `gate release check` all call that function; the release check
 * calls it with the LADDER's settings and the receipt's recorded metrics, and believes nothing a
 * payload says about its own checks or verdict (it only reports a disagreement).
 *
 * Verdicts: PASS; FAIL (the subject is wrong, or the gate could not run the subject — an error
 * from the engine is a FAIL row with its message); ERROR (the gate could not judge for a reason
 * that says nothing about the subject, e.g. a host too noisy to time: the cell is not PASS, but
 * an ERROR never makes a build FLAKY). A receipt's overall verdict is FAIL if any gate FAILs,
 * else ERROR if any gate is ERROR, else PASS (and PASS needs at least one gate).
 * Start reading: struct gate_def, gate_judge().
 */
#ifndef GATE_GATES_H
#define GATE_GATES_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

enum gate_verdict {
    GATE_PASS = 0,
    GATE_FAIL = 1,
    GATE_ERROR = 2,
};

/* "PASS", "FAIL", "ERROR". */
const char *gate_verdict_name(enum gate_verdict v);
/* The verdict named s, or -1 for anything else (NULL included). */
int gate_verdict_parse(const char *s);

/* A judge: reads settings (the gate's settings object, keys as in its schema) and metrics (the
 * gate's metrics object as recorded in a receipt), appends one check object per judged quantity
 * to checks (a JSON array, see gate_check_num) and returns the verdict. why (n bytes) receives a
 * one-line reason for a FAIL / ERROR ("" on PASS). A judge never trusts anything but settings
 * and metrics; missing or malformed metrics are a FAIL naming the key. Pure: no I/O. */
typedef enum gate_verdict (*gate_judge_fn)(const json_t *settings, const json_t *metrics,
                                           json_t *checks, char *why, size_t n);

/* Append {"metric", "value", "op", "threshold", "pass"} to checks; returns pass (0/1). A
 * non-finite value or threshold fails every comparison (settled question 8). op is one of
 * ">=", "<=", ">", "<", "==". */
int gate_check_num(json_t *checks, const char *metric, double value, const char *op,
                   double threshold);
/* The same for a boolean that must hold (value == true). */
int gate_check_bool(json_t *checks, const char *metric, int value);
/* The same for a string that must equal want. */
int gate_check_str(json_t *checks, const char *metric, const char *value, const char *want);

/* A gate's one-line reason into why (n bytes; either may be NULL/0: nothing written):
 * gate_say() writes it, gate_say_first() only while why is still empty (the first failing check
 * explains the verdict best). The one pair every oracle's judge uses (issue 24 §7). */
void gate_say(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void gate_say_first(char *why, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A number from metrics: a JSON number, or the strings "NaN", "Inf", "-Inf" (how receipts record
 * non-finite values). Returns 0 and sets *out, or -1 when absent or not a number. */
int gate_metric_num(const json_t *obj, const char *key, double *out);
/* The same for a JSON value itself. */
int gate_json_num(const json_t *v, double *out);

/* The checks every gate of a cell gets, then its own judge: metrics "error" (a gate that could
 * not run the subject) is a FAIL with that error; with check_ran, metrics "ran" (what actually
 * ran, oracles/mode.h's struct mode_ran) must match mode ("ref.decode"): the same backend, tokens
 * evaluated, and for cuda modes kernel launches on a GPU device, for CPU modes none on the CPU;
 * and when settings record "kv" ("f32"/"f16", the cell's KV cache), metrics.ran.kv must equal it.
 * Then judge(settings, metrics). FAIL wins over ERROR wins over PASS; no check at all is FAIL. */
enum gate_verdict gate_judge_common(gate_judge_fn judge, int check_ran, const char *mode,
                                    const json_t *settings, const json_t *metrics, json_t *checks,
                                    char *why, size_t n);
enum gate_verdict gate_judge_ran(const char *mode, const json_t *metrics, json_t *checks, char *why,
                                 size_t n);

/* The capability gate: the checks on metrics "ran" (gate_judge_common) plus forwards > 0. */
enum gate_verdict capability_gate_judge(const json_t *settings, const json_t *metrics,
                                        json_t *checks, char *why, size_t n);

/* The parity gate's judge lives next to its oracle: oracles/parity.h (parity_gate_judge). */

#ifdef __cplusplus
}
#endif
#endif
