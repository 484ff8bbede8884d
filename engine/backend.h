/* backend.h — the one interface every engine backend implements (ref, cuda, later cpu).
 *
 * A backend holds a model on its device with a KV cache. backend_forward() evaluates a run of
 * tokens at positions pos0 .. pos0+n-1, where pos0 must equal the number of positions already in
 * the cache, and returns the logits of every position. The wrappers in backend.c own the
 * contract (checks, chunking by n_batch, counters, taps, faults); ops->forward evaluates one
 * checked chunk (docs/backends.md: how to add a backend). The harness never knows which backend it
 * holds; it asks each what actually ran (struct backend_info), because a backend that was asked
 * for cuda and ran on the CPU has failed (DESIGN.md: no silent fallback).
 * Like calm's `transformer.forward = forward_cuda`: the backend is a table of function pointers.
 * Start reading: struct backend_ops, then backend_forward().
 */
#ifndef GATE_BACKEND_H
#define GATE_BACKEND_H

#include <stdint.h>

#include "base/err.h"
#include "exec.h"
#include "faults/fault.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct backend_session; /* a cell's state a backend keeps across its opens (below) */
struct backend_session_config;
struct backend_session_info;

/* The kernel generations a backend may select among (issue 24: one truth per rule). Each is
 * asked for through backend_config.knob[K] (NULL or "" = the backend's default), offered by the
 * backend's row of the list (backend_offers_knob: the same in every build), refused at open by a
 * backend that does not run the value asked for (no silent fallback), reported by the backend as
 * what ran (base.knob[K]) and recorded in the receipts' metrics.ran.<key> ("mixed" when a gate's
 * subjects differed). None is part of a cell's identity: every value of one holds the same results
 * contract against the twin (docs/kernels.md). A new one is its id here, its row in
 * BACKEND_KNOBS[] and its values in the rows of the backends that offer it (engine/backend.c),
 * and its effect in those backends; gate bench's flag, the open-time refusal, the recording and
 * the receipt loop over the table. */
enum backend_knob { KNOB_GEMV, KNOB_ROUTE, KNOB_ATTN, KNOB_GRAPH, KNOB_COUNT };
#define BACKEND_KNOB_LEN 48 /* what ran: "v2", "split", or "eager: <why a graph fell back>" */
struct backend_knob_def {
    const char *key;  /* "gemv": gate bench --gemv, metrics.ran.gemv */
    const char *what; /* for messages: "GEMV" ("backend cpu has no GEMV generations to select") */
    const char *doc;  /* one line for gate bench --help */
};
extern const struct backend_knob_def BACKEND_KNOBS[KNOB_COUNT];

struct backend_config {
    int n_threads; /* CPU worker threads (0 = number of cores) */
    int n_ctx;     /* KV cache positions (0 = min(model context, 4096)) */
    int n_batch;   /* most tokens per ops->forward (0 = the backend's default); longer runs
                    * are chunked by backend_forward() */
    const struct fault_set *faults; /* copied at open (backend_set_faults); NULL = none */
    int kv_f16; /* 1 = KV cache stored as F16 (backends that offer it set base.kv_f16 at open;
                 * backend_open refuses the others: no silent fallback); 0 = F32 */
    struct backend_session *session; /* the cell's session of this backend
                                      * (backend_session_open; borrowed, shared by the backends
                                      * of one cell); NULL for a backend without one */
    const char *prefill;          /* the batched projections' precision: NULL or "" = f32; "f16" or
                                   * "bf16" (backends whose row offers it; backend_open refuses the others:
                                   * no silent fallback) */
    const char *knob[KNOB_COUNT]; /* the kernel generations asked for (enum backend_knob): NULL
                                   * or "" = the backend's default; a value its row does not offer
                                   * is refused at open (backend_offers_knob) */
    const char *emulate; /* ref only: the roundings it emulates (GATE_REF_EMULATE's list, e.g.
                          * "kv-f16"); NULL = the environment's; "" = none (every judge) */
};

/* What actually ran, measured by the backend while running (settled question 7). */
struct backend_info {
    char backend[16];         /* "ref", "cuda", ... */
    char device[128];         /* "cpu: <model name>" or the GPU's name */
    uint64_t forwards;        /* backend_forward() calls that succeeded (kept by the wrapper) */
    uint64_t tokens;          /* tokens they evaluated (kept by the wrapper) */
    uint64_t kernel_launches; /* device kernel launches (0 on CPU backends) */
    uint64_t device_bytes;    /* bytes moved host <-> device */
    char engine[256];         /* an external engine's "name version (build_id)" from its
                               * handshake (exec); "" for the backends built into gate */
};

/* The device a backend runs on (or would run on), for the host check and the receipt's
 * environment. CPU backends describe the CPU: compute capability and versions 0. */
struct backend_device {
    char name[256];         /* "NVIDIA H200", or the CPU's model name */
    uint64_t total_bytes;   /* device memory (host memory for a CPU backend) */
    int cc_major, cc_minor; /* compute capability (0.0 on a CPU) */
    int driver, runtime;    /* CUDA versions, e.g. 13000 (0 on a CPU) */
};

/* Per-layer observations for localization; all arrays caller-owned, sized for n_tok tokens of
 * the next backend_forward call. A NULL array is not recorded. */
struct backend_taps {
    float *hidden;      /* (n_layer, n_tok, n_embd): residual stream after each layer */
    int32_t *experts;   /* (n_layer, n_tok, k): chosen experts, slot order (MoE) */
    float *expert_w;    /* (n_layer, n_tok, k): their weights (MoE) */
    float *router_kth;  /* (n_layer, n_tok): router logit of the k-th expert (MoE) */
    float *router_k1th; /* (n_layer, n_tok): router logit of the (k+1)-th expert (MoE) */
    /* The route-tie replay's input (issue 22 §6; oracles/parity.c), honoured by the reference
     * twin only: route each (layer, token) to the set force_experts names instead of the own
     * top-k where that set is a near tie (route_force(): deficit < force_tol). Slot 0 < 0 leaves
     * a (layer, token) alone. NULL = no replay. experts / expert_w then record what ran. */
    const int32_t *force_experts; /* (n_layer, n_tok, k) */
    float force_tol;
    float *force_deficit; /* out (n_layer, n_tok): route_force's deficit where force_experts named
                           * another set than the own top-k (forced when < force_tol); NAN
                           * where it named the same set or nothing */
};

struct backend;

/* What a backend implements (docs/backends.md). The wrappers below own the contract: argument
 * checks, chunking, counters, n_past, taps and faults; a backend only computes. */
struct backend_ops {
    const char *name;
    /* Describe the device this backend would use, without a model (static; may be called
     * before any open). ERR_ENV with the reason when there is none. */
    int (*describe)(struct backend_device *out, struct gate_err *err);
    /* Bind the model (borrowed; must outlive the backend), set base.ops, base.model, base.n_ctx
     * and base.n_batch (>= 1), and allocate everything forward() needs: no allocation happens
     * inside forward. */
    int (*open)(struct backend **out, const struct model *m, const struct backend_config *cfg,
                struct gate_err *err);
    /* Evaluate ONE chunk, already checked by backend_forward(): 1 <= n <= base.n_batch,
     * pos0 == base.n_past, pos0 + n <= base.n_ctx, every token in [0, n_vocab). tokens (n),
     * logits out (n, n_vocab). Faults: base.faults at (layer, pos). Taps: base.taps, when set,
     * receive this chunk's rows at token offset base.tap_off of a call of base.tap_n tokens.
     * Must not touch n_past or the forwards / tokens counters. */
    int (*forward)(struct backend *b, const int32_t *tokens, int n, int pos0, float *logits,
                   struct gate_err *err);
    /* Optional (NULL = nothing to do): the cache is about to keep only n_pos positions
     * (0 <= n_pos <= n_past, checked). */
    int (*truncate)(struct backend *b, int n_pos, struct gate_err *err);
    /* backend, device, kernel_launches, device_bytes (the wrapper adds forwards, tokens). */
    void (*info)(const struct backend *b, struct backend_info *out);
    void (*close)(struct backend *b);
    /* 1 when the backend cannot record taps (exec: an external engine shows only logits); the
     * arrays of backend_set_taps() are then left as they were (backend_records_taps()) */
    int no_taps;
    /* Optional (NULL = backend_forward_last computes every position's logits and keeps the
     * last): forward() for ONE checked chunk that writes only the chunk's LAST position's
     * logits, logits (n_vocab), bit-identical to that row of forward()'s; every position still
     * goes through the layers, the cache, taps and faults. */
    int (*forward_last)(struct backend *b, const int32_t *tokens, int n, int pos0, float *logits,
                        struct gate_err *err);
    /* Optional (NULL = no per-cell state: backend_session_open gives NULL): open the cell's
     * session (its struct starts with struct backend_session), close it, describe it. The
     * backend's open finds it in backend_config.session. */
    int (*session_open)(struct backend_session **out, const struct backend_session_config *cfg,
                        struct gate_err *err);
    void (*session_close)(struct backend_session *s);
    void (*session_info)(const struct backend_session *s, struct backend_session_info *out);
};

/* The part of every backend the wrappers own; a backend's own struct starts with it. */
struct backend {
    const struct backend_ops *ops;
    const struct model *model;
    int n_ctx;                       /* cache capacity in positions (set by open) */
    int n_batch;                     /* most tokens per ops->forward (set by open) */
    int n_past;                      /* positions in the cache (kept by the wrappers) */
    struct fault_set faults;         /* active faults, a copy (backend_set_faults) */
    const struct backend_taps *taps; /* borrowed (backend_set_taps); NULL = none */
    int tap_n, tap_off;        /* tokens of the current backend_forward call; this chunk's offset */
    uint64_t forwards, tokens; /* counters kept by backend_forward */
    int kv_f16;                /* set by open: the KV cache is F16 (backend_config.kv_f16) */
    char isa[16];    /* set by open: the instruction set its kernels run ("" = none selectable) */
    char prefill[8]; /* set by open: its batched projections' precision ("" = f32; "f16", "bf16") */
    char knob[KNOB_COUNT][BACKEND_KNOB_LEN]; /* set by open: each kernel generation it runs
                                              * ("v1", "split", "on"; "" = none to select); a
                                              * backend that asked for a graph and fell back to
                                              * eager launches says why ("eager: ...") */
    char emulate[48]; /* set by backend_open: the roundings asked of a ref open
                       * (backend_config.emulate, else GATE_REF_EMULATE as read then; "?" when
                       * too long to record): part of a cached judge result's key */
};

/* ---- a cell's session ------------------------------------------------------------------------ */

/* What a backend keeps across the opens of one cell (issue 24 §5): an external engine's child
 * (engine/exec.c), started at the cell's first open, reused by every gate of the cell, ended at
 * backend_session_close(). Opened and closed through these calls only; a backend without
 * per-cell state gives NULL, which every call here and backend_config.session take. */
struct backend_session {
    const struct backend_ops *ops; /* the backend it belongs to (set by backend_session_open) */
};

struct backend_session_config {
    const struct exec_engine *engine; /* an external backend's engine as the ladder declares it
                                       * (engine/exec.h; borrowed: must outlive the session);
                                       * NULL for the others */
    const char *model_path;           /* the model file the cell gates */
    const char *model_sha256;         /* its pinned digest (64 lower-case hex) */
};

/* What a session measured, for the receipt: zeros (have_hello 0) for a NULL session. */
struct backend_session_info {
    int spawns;                    /* children started (an external engine: 1 per healthy cell) */
    int pid;                       /* the live child, 0 when none */
    int have_hello;                /* a handshake completed: hello is what it named */
    struct exec_hello hello;       /* the last child's handshake */
    struct exec_identity identity; /* binary, digest, isolation, containment, time */
};

/* Open backend `name`'s session for one cell: *out NULL and 0 for a backend that keeps none, or
 * one of the list not in this build (its backend_open says so). ERR_INPUT for an unknown name or
 * a config the backend refuses (an external one: no engine,
 * a bad digest, a model path that does not resolve). Starts nothing: an external engine's child
 * is started by the first backend_open() whose backend_config.session is this one. */
int backend_session_open(struct backend_session **out, const char *name,
                         const struct backend_session_config *cfg, struct gate_err *err);

/* End the session (an external engine: `bye`, the child, its group and its orphans killed and
 * reaped). NULL-safe. Every backend opened on it must be closed first. */
void backend_session_close(struct backend_session *s);

/* What s measured so far (NULL-safe). */
void backend_session_info(const struct backend_session *s, struct backend_session_info *out);

/* ---- the list of backends ------------------------------------------------------------------ */

/* Every backend any build knows, compiled in or not, in a fixed order ("cuda", "cpu", "ref"):
 * the one list modes, the ladder and capability read. */
int backend_count(void);
const char *backend_name(int i);     /* NULL when i is out of range */
int backend_index(const char *name); /* -1 when unknown */
/* 1 when the backend runs on an accelerator (its runs must count kernel launches). */
int backend_is_device(const char *name);

/* What a backend is, so nothing above engine/ names one (issue 24 §5): the judge (the reference
 * twin every gate compares with), the accelerator backend a GPU host's check describes, and the
 * external engines (exec: an engine gate did not build, one child per cell; its mode syntax is
 * BACKEND_EXTERNAL "." ENGINE "." PATH). */
#define BACKEND_EXTERNAL "exec"
const char *backend_judge_name(void);       /* the judge's backend */
const char *backend_accelerator_name(void); /* the first accelerator of the list (in any build) */
int backend_is_external(const char *name);  /* 1 for BACKEND_EXTERNAL */

/* The kernel tests (engine/kernel_tests.h) of the first backend of the list whose row offers
 * them in this build: an accelerator's kernels over host arrays, for the differential checks
 * (oracles/selftest.c), asked by capability, never by name. *backend (may be NULL) receives its
 * name. NULL and ERR_ENV with the reason when no row of this build offers them ("this build has
 * no CUDA backend ..."); whether a device is present is the table's device(). */
struct backend_kernel_tests;
const struct backend_kernel_tests *backend_kernel_tests(const char **backend, struct gate_err *err);

/* A backend's measured noise against the judge (docs/gates.md, "Tolerances from noise"): the
 * worst value of each parity metric over the runs of a correct build, the data the oracles'
 * margins and ladder check's loose-threshold refusal read. exact: bit-identical by construction
 * (the judge); measured 0: not measured (source says why). */
struct backend_noise {
    const char *backend;
    int measured, exact;
    double one_minus_cos, mean_kld, max_kld, max_rel_l2, mean_rel_l2;
    const char *source;
    /* The roundings the backend claims to make beyond FP32 (engine/ref.c's GATE_REF_EMULATE
     * items): what the twin emulates when it predicts one layer of this backend from the
     * backend's own input (parity's forced layers, docs/gates.md). "" none; NULL: no layer is
     * predicted (an external engine records no hidden states; cuda's roundings are not
     * calibrated on a device yet). */
    const char *rounding;
};
/* The row of `name` (every backend of the list, and BACKEND_EXTERNAL); NULL for an unknown one. */
const struct backend_noise *backend_noise_of(const char *name);
/* 1 when the backend offers an F16 KV cache (its open honours backend_config.kv_f16; the others
 * refuse it at open): the ladder's `kv: f16` check. Known for every backend of the list, compiled
 * in or not; 0 for an unknown name and for "exec". */
int backend_offers_kv_f16(const char *name);

/* 1 when the backend's open honours backend_config.prefill = p ("f16", "bf16"): its row's
 * prefills, the same in every build (a ladder's `prefill:` is judged the same everywhere). */
int backend_offers_prefill(const char *name, const char *p);

/* 1 when the backend's open honours backend_config.knob[k] = value: one of its row's values for
 * that knob (cuda: gemv v1,v2; route v1,v2; attn v1,split; graph off,on), the same in every
 * build; 0 for "" / NULL, an unknown backend, and every value of a backend with none. */
int backend_offers_knob(const char *name, enum backend_knob k, const char *value);

/* The comma-separated values backend `name`'s row offers for knob k, its default first ("" none,
 * or an unknown backend). */
const char *backend_knob_values(const char *name, enum backend_knob k);

/* The invariances backend `name` declares in its row of the list (an unknown name, "exec"
 * included, declares none: all 0, isas ""): what the consistency gate holds it to. */
struct backend_invariants {
    int bitwise;      /* decode, prefill, any chunking and a resumed cache: the same bits */
    int threads;      /* logits independent of the thread count */
    const char *isas; /* selectable instruction sets, comma-separated ("" none) */
};
void backend_invariants(const char *name, struct backend_invariants *out);

/* Select the instruction set backend `name`'s next runs use (one of its declared isas; NULL or
 * "" = the best the machine runs). Process-wide: between runs only. ERR_ENV when the machine
 * cannot run it, ERR_INPUT for a backend without selectable sets. */
int backend_set_isa(const char *name, const char *isa, struct gate_err *err);
/* The instruction set backend `name` runs now ("" for one without selectable sets). */
const char *backend_isa(const char *name);

/* The backends this build has; NULL when the name is unknown or not compiled in. "exec" (engines
 * gate did not build, engine/exec.h) is found too, though it is not in the list above. */
const struct backend_ops *backend_find(const char *name);

/* Describe the device backend `name` would use, before any model is opened. ERR_ENV "backend
 * cuda is not in this build" for a known backend not compiled in, ERR_INPUT for an unknown
 * name, ERR_ENV with the backend's reason when it has no usable device. */
int backend_describe(const char *name, struct backend_device *out, struct gate_err *err);

/* 1 when a ladder's declared device name matches the device's reported name: the declared name
 * occurs in the reported one as whole words, case-insensitively, so a family name matches every
 * member ("H200" and "NVIDIA H200" match "NVIDIA H200 NVL"; "H20" does not match "NVIDIA H200",
 * "H200" does not match "NVIDIA GH200"). Words are runs of letters and digits. An empty or NULL
 * declared name matches nothing. Pure; docs/ladder.md "hosts". */
int backend_device_name_matches(const char *declared, const char *reported);

/* ---- the contract ----------------------------------------------------------------------- */

/* Open backend `name` on model m (borrowed; must outlive the backend); cfg may be NULL. The
 * faults of cfg are copied. */
int backend_open(struct backend **out, const char *name, const struct model *m,
                 const struct backend_config *cfg, struct gate_err *err);

/* Evaluate tokens (n >= 1) at positions pos0 .. pos0+n-1 and write logits (n, n_vocab).
 * ERR_INPUT naming the backend when pos0 != n_past, pos0 + n > n_ctx or a token id is outside
 * [0, n_vocab); nothing is evaluated then. Runs longer than n_batch are evaluated in chunks
 * (chunking changes no number). On success n_past grows by n and the counters by one forward
 * and n tokens. */
int backend_forward(struct backend *b, const int32_t *tokens, int n, int pos0, float *logits,
                    struct gate_err *err);

/* backend_forward() that writes only the LAST position's logits, logits (n_vocab): the same
 * checks, chunking, counters, n_past, taps and faults, every position through the layers and the
 * cache; the row is bit-identical to row n-1 of backend_forward()'s. Like llama.cpp's prompt
 * evaluation (llama-bench's pp): the output product runs for one position instead of n. Backends
 * without ops->forward_last get the fallback: each chunk computed in full into a buffer
 * malloc'd for the call (ERR_ENV when that fails), its last row kept. */
int backend_forward_last(struct backend *b, const int32_t *tokens, int n, int pos0, float *logits,
                         struct gate_err *err);

/* Keep only the first n_pos cache positions (0 = reset); ERR_INPUT unless 0 <= n_pos <=
 * n_past. */
int backend_truncate(struct backend *b, int n_pos, struct gate_err *err);

/* 1 when b records taps (every backend built into gate); 0 for one that cannot (exec): an
 * oracle must not read tap arrays it handed such a backend (they are left untouched). */
int backend_records_taps(const struct backend *b);

/* Record taps during the next forward calls (NULL = stop). Borrowed until replaced. */
void backend_set_taps(struct backend *b, const struct backend_taps *taps);

/* Replace the active faults with a copy of *faults (NULL = none): later changes to *faults do
 * not reach the backend. At most FAULT_MAX specs are kept. */
void backend_set_faults(struct backend *b, const struct fault_set *faults);

/* What ran so far: the backend's own report plus the wrapper's counters. */
void backend_info(const struct backend *b, struct backend_info *out);

/* The device an open backend runs on (its backend's describe). */
int backend_device(const struct backend *b, struct backend_device *out, struct gate_err *err);

/* An observer called by backend_close() just before a backend is closed (its counters are final
 * then), so the harness can record what ran for every gate (oracles/mode.c's ran recorder). One
 * process-wide slot; NULL clears it. Not thread-safe: set it between gates, not during one. */
typedef void (*backend_close_fn)(void *ctx, const struct backend *b);
void backend_set_close_observer(backend_close_fn fn, void *ctx);

/* Close b (NULL-safe), telling the close observer first. */
void backend_close(struct backend *b);

extern const struct backend_ops backend_ref_ops;

#ifdef __cplusplus
}
#endif
#endif
