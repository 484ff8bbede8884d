/* budget.h — what a cell will cost before it runs: the memory its largest gate allocates (the
 * KV caches first) against the memory this host has, and an estimate of its wall time.
 *
 * Why: a long-context cell (issue 26 §2: 4k, 16k, 32k positions on a 151,936-token vocabulary)
 * allocates tens of GB; without the arithmetic up front it dies in malloc or in the kernel's OOM
 * killer hours into a nightly run. gate run computes the budget before the cell's first gate
 * and refuses the cell with the figures (every gate a FAILED row naming them) when it does not
 * fit; the parity row records the arithmetic (metrics.memory). The same shape and settings give
 * the time estimate `gate run` prints when the cell starts.
 *
 * The arithmetic is the parity session's (oracles/parity.c: parity_session_open), the gate that
 * holds the most at once: judge and subject each opened with n_ctx = the sequence length S
 * (oracles/mode.c; the subject's batch S, a sampled span's judge MODE_JUDGE_CHUNK), their KV
 * caches, their per-batch activations, both sides' logits and hidden-state taps at the judged
 * rows only (issue 26 §2: J x n_vocab floats each, not S x n_vocab) with each call's scratch,
 * and the MoE routing taps at every position. Model weights are not counted: they stay in the
 * file's mapping (page cache the kernel can evict). docs/nightly.md, "Memory".
 * Start reading: budget_memory(), then budget_check().
 */
#ifndef GATE_BUDGET_H
#define GATE_BUDGET_H

#include <jansson.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/model.h"
#include "oracles/mode.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The parity session's footprint for one cell, bytes. */
struct budget_memory {
    int positions;             /* S: the sequence length both sides run */
    int judged;                /* positions judged (the rows gathered) */
    int kv_bytes_per_elem;     /* the subject's KV element: 4 (F32) or 2 (F16) */
    int judge_batch;           /* the judge's batch: S, or MODE_JUDGE_CHUNK for a sampled span */
    int subject_call;          /* the subject's longest forward call (decode 1, prefill S/2) */
    uint64_t kv_bytes;         /* judge + subject KV caches (the subject's at its KV type) */
    uint64_t kv_subject_bytes; /* the subject's part of kv_bytes (0 for an external engine) */
    uint64_t logits_bytes;     /* both sides' judged rows x n_vocab floats, + calls' scratch */
    uint64_t taps_bytes;       /* both sides' hidden taps (judged rows), MoE routes (S), scratch */
    uint64_t activation_bytes; /* the backends' per-batch buffers, scores, RoPE */
    uint64_t forced_bytes;     /* the forced layers' twin (its F32 cache, buffers, layer outputs,
                                * head rows): every position judged and a subject of gate's own;
                                * else 0 (not measured) */
    uint64_t other_bytes;      /* logits + taps + activations + forced */
    uint64_t total_bytes;      /* kv + other */
};

/* Where the available figure came from. */
struct budget_available {
    uint64_t bytes;
    char source[96]; /* "GATE_MEMORY_LIMIT", "/proc/meminfo MemAvailable" */
};

/* The parity session's bytes for model hp, sequence length S (>= 1), `judged` judged positions
 * (fewer than S: a sampled span, only those rows kept), the subject's path (its longest forward
 * call), the subject's KV element size kv_elem (4 or 2), whether the subject runs in this
 * process (in_process 0: an external engine, whose own memory gate cannot see: only the judge
 * counts) and whether its layers are forced (forced: a backend whose roundings the twin models,
 * backend_noise.rounding; budget_forced()). Pure. The formula, term by term, in budget.c and
 * docs/nightly.md. */
void budget_memory(const struct model_hparams *hp, int S, int judged, enum mode_path path,
                   int kv_elem, int in_process, int forced, struct budget_memory *out);

/* Whether parity measures the forced layers of backend `name` (oracles/parity.c
 * forced_possible): one of gate's own whose roundings the twin models. */
int budget_forced(const char *name);

/* KV cache bytes of one backend: n_layer x 2 (K and V) x n_head_kv x head_dim x positions x
 * elem. Pure. */
uint64_t budget_kv_bytes(const struct model_hparams *hp, int positions, int elem);

/* The memory this host offers a cell: $GATE_MEMORY_LIMIT when set (bytes, or with a K, M, G
 * suffix: powers of 1024), else MemAvailable from /proc/meminfo. ERR_INPUT for a limit that is
 * not a positive size; ERR_ENV when neither can be read. */
int budget_available(struct budget_available *out, struct gate_err *err);

/* ERR_ENV naming every figure when m->total_bytes exceeds a->bytes: "needs X MiB (KV ...,
 * logits ..., taps ..., activations ...) for S positions, more than the Y MiB available
 * (source)". 0 when it fits. */
int budget_check(const struct budget_memory *m, const struct budget_available *a,
                 struct gate_err *err);

/* metrics.memory: {positions, judged, judge_batch, subject_call, kv_bytes, kv_subject_bytes,
 * kv_elem_bytes, logits_bytes, taps_bytes, activation_bytes, other_bytes, total_bytes,
 * available_bytes, available_source, fits}. New reference. */
json_t *budget_memory_json(const struct budget_memory *m, const struct budget_available *a);

/* A cell's work in token-forwards and floating-point operations, per gate, and the seconds they
 * take at BUDGET_GFLOPS_PER_THREAD x threads. An estimate: counts follow each gate's settings
 * (docs/nightly.md, "Time estimate"), not a replay of the oracles. */
struct budget_time_in {
    int parity_S, parity_judged;           /* parity: sequence length and judged positions */
    int parity_forced;                     /* 1: the subject's layers judged (forced twin) */
    int golden_prompts, golden_tokens;     /* golden: prompts x (prompt ~ 16 + tokens), twice */
    int tp_runs, tp_prompt, tp_decode;     /* throughput: (warmup + runs) x (prompt + decode) */
    int falsify_faults, falsify_samples;   /* falsify: faults x (1 + samples) runs ... */
    int falsify_probes, falsify_positions; /* ... + power probes, of `positions` tokens, twice */
    int consistency_positions;             /* 0 = not run; else ~12 runs of that many tokens */
    int threads;                           /* >= 1 */
};

struct budget_time {
    double tokens; /* token-forwards over every gate */
    double gflop;  /* their floating-point work: weights + attention at each position */
    double seconds;
    int threads; /* the threads the seconds assume */
};

/* The measured rate the estimate divides by: the reference twin's decode on the 0.6B shape,
 * ~11 tokens/s x 1.19 GFLOP/token on one thread of the 2-core VM (docs/bench.md) ~ 13; 10 keeps
 * the judge's batched attention and a shared machine in view. */
#define BUDGET_GFLOPS_PER_THREAD 10.0

/* GFLOP of one forward of a token at position pos (weights: 2 x the parameters a token touches,
 * the experts it routes to only; attention: 4 x heads x head_dim x (pos + 1) per layer). Pure. */
double budget_token_gflop(const struct model_hparams *hp, int pos);

void budget_time(const struct model_hparams *hp, const struct budget_time_in *in,
                 struct budget_time *out);

struct ladder_gates;
/* Both figures for a cell with resolved settings g (harness/ladder.h) on model hp: its parity
 * sequence max(span, positions) (the chat path: positions, its conversation is shorter), judged
 * positions, the subject's path, its KV type (kv_f16), whether the subject runs in this process
 * (in_process), whether its layers are forced (budget_forced) and the run's threads (0 = online
 * CPUs). Pure but for the CPU count. */
void budget_cell(const struct ladder_gates *g, const struct model_hparams *hp, enum mode_path path,
                 int kv_f16, int in_process, int forced, int threads, struct budget_memory *mem,
                 struct budget_time *time);

#ifdef __cplusplus
}
#endif

#endif
