/* run.h — the cell runner (`gate run`) and the release check (`gate release check`) as a core
 * that returns data: statuses are ERR_* codes (base/err.h), results are structs, progress goes
 * through a callback. Nothing here prints, exits or knows about the CLI; the commands in
 * cli/cmd_run.c and cli/report.c draw the progress, the tables and the matrix and map statuses
 * to exit codes (STYLE.md "Core returns, the CLI prints").
 * Start reading: run_ladder(), then release_evaluate().
 */
#ifndef GATE_RUN_H
#define GATE_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "oracles/judgecache.h"

struct identity;
struct key_pair;
struct ladder;
struct store;

/* ---- gate run (harness/run.c) ---------------------------------------------------------------- */

struct run_options {
    const char *ladder;
    const char *host; /* --host or $GATE_HOST */
    const char *db;   /* default receipts.db */
    const char *key;  /* default ~/.config/gate/keys/<host>.key */
    const char *only; /* fnmatch pattern over the cell name, "model/host/mode" (plus "+kv=f16"
                       * for an F16-KV cell, ladder_cell_name); NULL = all */
    int threads;      /* 0 = all cores */
    int json;         /* machine-readable results on stdout (read by the command, not the core) */
    /* The inputs the engine is judged on: parity's and falsify's generated token sequences
     * (mode_tokens(input_seed)) and the positions each cell judges and the prefill chunks (the
     * cell's name mixed with it). 0 = a fresh seed from getrandom for this run, so an engine
     * cannot know its test inputs in advance and behave only on them (docs/exec.md, "Threat
     * model"); a given seed (gate run --input-seed) reproduces a run. Recorded in every receipt
     * (metrics.inputs of parity and falsify). Throughput's sequences are always fresh. */
    uint64_t input_seed;
    int input_seed_fresh; /* set by run_ladder on the copy it runs with: the seed was drawn */
};

enum run_event_kind {
    RUN_EV_STARTED,       /* ladder, host, build identity known; the store is open */
    RUN_EV_SYNTH,         /* a synth: model is being written: done/total bytes, tensor i of n */
    RUN_EV_CELL_STARTED,  /* a cell (or anchor case) begins */
    RUN_EV_GATE_STARTED,  /* a gate of the cell begins */
    RUN_EV_GATE_FINISHED, /* a gate's row is ready: verdict, one-line summary, seconds */
    RUN_EV_RECEIPT,       /* the cell's receipt was stored (receipt_id) or not (error) */
    RUN_EV_HEAD,          /* the signed head record was written (head, head_count) or not */
};

/* One progress report. Every pointer is borrowed for the duration of the callback only. */
struct run_event {
    enum run_event_kind kind;
    const char *cell;    /* "model/host/mode" or "anchor/<id>/<host>"; NULL for STARTED, HEAD */
    const char *model;   /* the ladder model id (the anchor id for an anchor case) */
    const char *gate;    /* GATE_*, GATE_FINISHED: the gate's name */
    const char *verdict; /* GATE_FINISHED, RECEIPT: "PASS", "FAIL", "ERROR" */
    const char *summary; /* GATE_FINISHED: the key numbers on PASS, the reason otherwise */
    double seconds;      /* GATE_FINISHED: how long the gate ran (monotonic clock); else 0 */
    int is_anchor;       /* CELL_STARTED, GATE_*, RECEIPT: an anchor case */
    int64_t receipt_id;  /* RECEIPT: the stored receipt's id; 0 when not stored */
    const char *error;   /* RECEIPT, HEAD: why it was not stored / written; NULL on success */
    /* STARTED */
    const char *ladder_path, *ladder_name, *ladder_version, *host, *git_commit;
    int git_dirty;
    uint64_t input_seed; /* the run's input seed (struct run_options), and whether it was drawn */
    int input_seed_fresh;
    /* SYNTH: progress of tensor `tensor` of n_tensors; finished: the write ended (ok or not) */
    uint64_t done, total;
    int tensor, n_tensors, finished;
    /* HEAD */
    const char *head, *key_id;
    int64_t head_count;
    /* CELL_STARTED of a cell whose model loaded (0 otherwise; harness/budget.h): the estimate
     * (token-forwards, GFLOP, seconds at BUDGET_GFLOPS_PER_THREAD x threads) and the memory its
     * parity session needs against what the host offers */
    double estimate_s, estimate_gflop, estimate_tokens;
    int estimate_threads;
    uint64_t memory_bytes, memory_available;
};

typedef void (*run_progress_fn)(void *ctx, const struct run_event *ev);

/* One gate of one run cell, in run order. */
struct run_gate {
    char name[24];
    char verdict[8];   /* "PASS", "FAIL", "ERROR" */
    char summary[512]; /* as in the GATE_FINISHED event */
};

/* One cell (or anchor case) that ran. */
struct run_cell_result {
    char name[256]; /* as in run_event.cell */
    int is_anchor;
    char verdict[8];        /* the receipt's overall verdict */
    int pass;               /* 1 only for PASS with the receipt stored */
    int64_t receipt_id;     /* 0: no receipt exists for this run (store_error says why) */
    char store_error[1024]; /* "" when stored */
    struct run_gate gates[8];
    int n_gates;
    struct json_t *gates_json; /* the receipt's "gates" object (owned; NULL out of memory) */
};

struct run_result {
    struct run_cell_result *cells; /* n, cells first then anchor cases, in run order (owned) */
    int n, n_pass;
    int head_written; /* the signed head record */
    char head[65];
    int64_t head_count;
    char key_id[80];
    /* the judge cache of this run (oracles/judgecache.h: .gate-cache/judge next to the ladder;
     * GATE_JUDGE_CACHE=off runs without it): hits, misses, the judging time it saved */
    int judge_cache_on;
    struct judgecache_stats judge_cache;
};

/* Run every cell of the host named by o (o->host, else $GATE_HOST) through every gate, then
 * every anchor case of the ladder (unless --only matched no cell), and store one signed receipt
 * each; then write the signed head record. progress (may be NULL) hears every step; ctx is
 * passed through. out (zeroed here; free with run_result_free) gets one row per cell run, also
 * when the status is not 0.
 * Returns 0 when every receipt and the head were stored (cells may still have FAILed: see
 * out->n_pass); ERR_INPUT for a ladder, host, key or --only problem (nothing ran; err says
 * which, prefixed "run: " where the command is the subject); ERR_ENV for an environment error
 * (a declared GPU missing or different, a store that cannot be opened, a receipt or the head
 * that could not be written — then out->n > 0 and the events already named it). */
int run_ladder(const struct run_options *o, run_progress_fn progress, void *ctx,
               struct run_result *out, struct gate_err *err);

/* Free what out owns; out may be NULL or zeroed. */
void run_result_free(struct run_result *out);

/* ---- gate release check (harness/release.c) ------------------------------------------------- */

struct release_options {
    const char *ladder;
    const char *db;          /* the receipt store; opened read-only unless sign_key is set */
    const char *sign_key;    /* write a signed sign-off (and a head record) when all PASS */
    const char *expect_head; /* a chain head hash (from a CI log): the store must still hold it */
};

/* The state of one row of the release, worst first is not implied; names by
 * release_state_name(): PASS FAIL FLAKY ERROR MISSING STALE UNTRUSTED TAMPERED EXCLUDED. */
enum release_state {
    RELEASE_PASS,
    RELEASE_FAIL,
    RELEASE_FLAKY,
    RELEASE_ERROR,
    RELEASE_MISSING,
    RELEASE_STALE,
    RELEASE_UNTRUSTED,
    RELEASE_TAMPERED,
    RELEASE_EXCLUDED,
};

enum release_row_kind { RELEASE_ROW_CELL, RELEASE_ROW_EXCLUDED, RELEASE_ROW_ANCHOR };

#define RELEASE_MAX_PASS_IDS 64

/* One row of the release: a required cell, an excluded cell or an anchor case. */
struct release_row {
    enum release_row_kind kind;
    int index;      /* into the ladder's cells[], excluded[] or anchors[] */
    char name[256]; /* "model/host/mode", or the anchor id */
    enum release_state state;
    int64_t blocking_id; /* the receipt that decides a non-PASS state (the first FAIL, ERROR,
                          * UNTRUSTED or STALE one; the bad row for TAMPERED); 0: none */
    char reason[700];    /* why the row is not PASS ("" for PASS and EXCLUDED); may quote
                          * receipt-borne strings unescaped: print it through cli_safe() */
    int64_t pass_ids[RELEASE_MAX_PASS_IDS]; /* the PASS receipts counted, in store order */
    int n_pass_ids;
    int n_pass, n_fail, n_error, n_stale, n_untrusted; /* receipts of each kind for the row */
    char disagree[512]; /* "" or the first receipt whose recorded verdict its numbers
                         * contradict (a warning; the re-judged verdict is what counts) */
};

struct release_result {
    struct release_row *cells, *excluded, *anchors; /* ladder order (owned) */
    int n_cells, n_excluded, n_anchors;
    int n_receipts;           /* receipts in the store */
    char store_problem[400];  /* "" or why no receipt of this store can be believed (every row
                               * is then TAMPERED with this reason) */
    int64_t store_problem_id; /* the receipt that fails verification, 0 when none or a head */
    int n_bad_cells;          /* required cells not PASS + excluded cells not EXCLUDED */
    int n_bad_anchors;        /* anchor cases not PASS */
    int dirty;                /* the checking binary is not a clean build: nothing can count */
    char dirty_reason[256];   /* why (identity.dirty_reason), "" when clean */
    int ok;                   /* 1 only when nothing blocks: the release may be signed */
};

/* The name of a state ("PASS", ...). */
const char *release_state_name(enum release_state s);

/* Judge the release of ladder l from the receipts of st (opened by the caller, read-only is
 * enough) for the build self: audit the whole store, sort every receipt to its row, re-judge
 * its gates through the gate table with the ladder's settings, decide each row's state (the
 * header of harness/release.c says how). o->expect_head, when set, must still be in st. out is
 * zeroed here and filled (free with release_result_free) whenever the status is 0.
 * Returns 0 when the check ran, whatever it decided (see out->ok); ERR_ENV out of memory or a
 * store that cannot be read; ERR_INPUT a malformed expect_head is reported as a store problem,
 * not an error. */
int release_evaluate(const struct ladder *l, struct store *st, const struct identity *self,
                     const struct release_options *o, struct release_result *out,
                     struct gate_err *err);

/* Free what r owns; r may be NULL or zeroed. */
void release_result_free(struct release_result *r);

/* Does ladder l trust key_id ("ed25519:HEX") for host index host (-1: for any of its hosts)?
 * The release check's own test (a receipt's key must be trusted for its cell's host); `gate
 * receipt verify --ladder` asks it with -1 for the key of every sign-off. 1 yes, 0 no (also for
 * a malformed key_id). */
int release_key_trusted(const struct ladder *l, int host, const char *key_id);

/* The sign-off: when r->ok, append to st (opened read-write) a sign-off signed by k naming every
 * cell's and anchor's PASS receipts, the excluded cells with their reasons and the unanchored
 * architectures, then a signed head record; head (65 bytes) and *count receive the chain head
 * it names. ERR_RUNTIME when the release is blocked (nothing written); ERR_ENV / ERR_INPUT from
 * the store. */
int release_sign(const struct ladder *l, struct store *st, const struct identity *self,
                 const struct release_result *r, const struct key_pair *k, char head[65],
                 int64_t *count, struct gate_err *err);

/* ---- anchors (harness/run_anchor.c; issue 10 §1) ----------------------------------------------
 * An anchor receipt is a receipt like a cell's, for the cell {model: <anchor id>, host: <host
 * id>, mode: RUN_ANCHOR_MODE}, with one gate, "anchor" (oracles/anchor.h). */
#define RUN_ANCHOR_MODE "anchor"
struct ladder;

/* The anchor gate's settings for anchor ai of l, as a receipt records them and as the release
 * check must compare them (anchor_settings_json() of the ladder's entry; new reference). */
struct json_t *run_anchor_settings(const struct ladder *l, int anchor_index);

/* Run anchor anchor_index of l on host host_index (the reference twin on the CPU, n_threads
 * workers; 0 = all cores) and return the full receipt payload, ready for store_append():
 * schema_version, ladder {name, version, sha256, path}, cell {model: anchor id, host, mode:
 * "anchor"}, subject {model {id, sha256, path, arch, reference}, engine identity_json(id)},
 * environment, gates {"anchor": {verdict, settings, metrics, checks[, error]}}, faults_active [],
 * verdict, started_at, finished_at. The verdict is anchor_judge()'s; a file that cannot be read
 * or does not match its pin is a FAIL row with "error". *pass is 1 only for PASS. Never NULL
 * except out of memory. */
struct json_t *run_anchor_payload(const struct ladder *l, int anchor_index, int host_index,
                                  int n_threads, const struct identity *id, int *pass);

/* Anchor anchor_index's files as run_anchor_payload() would read them (anchor_check(): pins,
 * the model's architecture, token and logits shapes), without running the judge. 0 or
 * ERR_INPUT / ERR_ENV "file:line:col: anchor 'ID': ..." at the anchor's entry.
 * ladder_check_files() calls it for every anchor. */
int run_anchor_check(const struct ladder *l, int anchor_index, struct gate_err *err);

#endif
