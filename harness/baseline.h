/* baseline.h — the throughput gate's baseline (issue 27 §2): the receipt a cell's timed rates are
 * compared with, found in the receipts store. `baseline: previous` is the newest PASS receipt of
 * the same cell (model, host, mode, kv) signed by this host's key under the same ladder name, from
 * the newest release version below the ladder's own; `baseline: HASH` pins one receipt by its
 * hash. Only receipts whose signature, chain and columns verify are read. A baseline must be
 * comparable: another hostname, thread count, KV type or model digest refuses the comparison by
 * name (the gate then records the refusal and judges ERROR, never a silent skip).
 * Start reading: baseline_find().
 */
#ifndef GATE_BASELINE_H
#define GATE_BASELINE_H

#include "base/err.h"
#include "harness/ladder.h"
#include "oracles/throughput.h"
#include "receipts/store.h"

struct baseline {
    int found;        /* 1: receipt, version and rates below are set */
    char receipt[65]; /* its hash */
    char version[64]; /* its ladder release version */
    int n;            /* timed runs */
    double prefill[THROUGHPUT_MAX_RUNS], decode[THROUGHPUT_MAX_RUNS];
    char refused[1024]; /* not "" when a baseline exists but may not be compared (why) */
    char none[200];     /* not "" when `previous` finds nothing to compare with (why) */
};

/* Look up cell ci's baseline as its throughput setting (`g.baseline`) names it, for a run on
 * this host (key_id: the signing key's id; hostname and threads as identity_environment records
 * them). out->found, out->refused or out->none says what came of it. Returns 0, or the store's
 * error status. */
int baseline_find(struct store *st, const struct ladder *l, int ci, const char *key_id,
                  const json_t *environment, struct baseline *out, struct gate_err *err);

/* gate bench --compare: receipt id of st as the baseline of a run of mode on this host
 * (environment as identity_environment records it) on a model with digest model_sha under the
 * identity settings v (KV type, instruction set); refused by name when it does not verify or is not
 * comparable. Returns 0, or the store's error status (ERR_INPUT: no such receipt). */
int baseline_from_receipt(struct store *st, int64_t id, const char *mode, const char *model_sha,
                          const json_t *environment, const struct cell_variant *v,
                          struct baseline *out, struct gate_err *err);

/* The metrics object a receipt records for b ({"receipt", "version", "prefill_tps",
 * "decode_tps"}, or {"refused"} / {"none"}); new reference. */
json_t *baseline_json(const struct baseline *b);

#endif
