/* mode.h — the execution paths under test, and the judge they are compared with.
 *
 * A mode is "<backend>.<path>" from one fixed list every build knows (DESIGN.md settled
 * question 3): backends cuda, cpu, ref × paths decode, prefill, chat. A build that lacks a
 * backend still parses its modes; opening one is ERR_ENV ("cannot run on this host").
 *   decode:  every token through the KV cache, one forward call per token (teacher-forced);
 *   prefill: the first half of the sequence batched (in one forward, or in the uneven chunks
 *            mode_prefill_split() derives from a seed), the rest decoded;
 *   chat:    a fixed three-turn ChatML conversation fed turn by turn on one KV cache: each user
 *            turn in one batched forward, each assistant reply decoded token by token.
 * The judge is the reference twin's batched forward over the whole sequence (one call of n
 * tokens on a ref backend without faults): no path above is that call, so ref.* modes are real
 * subjects. Start reading: mode_run().
 */
#ifndef GATE_MODE_H
#define GATE_MODE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/backend.h"
#include "engine/chat.h"
#include "engine/exec.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "faults/fault.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mode_path {
    MODE_DECODE = 0,
    MODE_PREFILL = 1,
    MODE_CHAT = 2,
};

struct mode {
    char backend[16]; /* "cuda", "cpu" or "ref" (or "exec") */
    enum mode_path path;
    /* exec modes only ("exec.<engine>.<path>", docs/exec.md): the ladder's engine name; "" for
     * every other mode */
    char engine[EXEC_NAME_MAX];
    /* the cell's session of the backend (backend_session_open, engine/backend.h; borrowed) that
     * mode_open() hands the backend: an external engine's child, kept across the cell's gates.
     * The harness sets it after mode_parse(); NULL for a backend that keeps none. */
    struct backend_session *session;
    /* 1: mode_open() asks the backend for an F16 KV cache (backend_config.kv_f16; a ladder cell's
     * `kv: f16`); a backend without one refuses at open, never runs F32 instead. The harness
     * sets it after mode_parse() (0 = F32); the judge (mode_open_judge) is always F32. */
    int kv_f16;
    /* "" (F32) or "f16" / "bf16": the precision mode_open() asks the backend's batched
     * projections for (backend_config.prefill; a ladder cell's `prefill:`); a backend that does
     * not run it refuses at open. Set by the harness after mode_parse(). */
    char prefill[8];
    /* the kernel generations mode_open() asks for (backend_config.knob, enum backend_knob; gate
     * bench --gemv / --route / --attn / --graph): "" = the backend's default. Recorded in
     * metrics.ran.<key>, not identity settings: every value holds one results contract. */
    char knob[KNOB_COUNT][8];
};

/* Parse "ref.decode" etc. Anything outside the fixed list is ERR_INPUT naming the list. The
 * list is every backend of engine/backend.c's one list (compiled in or not) x every path.
 * Also "exec.<engine>.<path>" (an engine gate did not build, docs/exec.md): the engine name is
 * 1..EXEC_NAME_MAX-1 letters, digits, '-' or '_'; whether the ladder declares it is the
 * ladder's check, and out->session stays NULL until the harness sets it. Exec modes are not in the
 * fixed list (mode_count, mode_at, mode_index -1). */
int mode_parse(const char *text, struct mode *out, struct gate_err *err);

/* The fixed list, as the ladder reads it: mode_count() modes, mode_at(i) the i-th (0 ok, -1
 * out of range), mode_index(m) its index (-1 unknown), mode_known(text) 1 when text parses. */
int mode_count(void);
int mode_at(int i, struct mode *out);
int mode_index(const struct mode *m);
int mode_known(const char *text);

/* "decode", "prefill", "chat". */
const char *mode_path_name(enum mode_path p);

/* "ref.decode" into buf (always NUL-terminated, n > 0). */
void mode_format(const struct mode *m, char *buf, size_t n);

/* Open the mode's backend on model m with a KV cache of n_ctx positions, a batch of up to
 * n_ctx tokens, and a copy of the fault set `faults` (NULL = none; change it later with
 * backend_set_faults()). A backend not compiled into this build is ERR_ENV: "cannot run on
 * this host". */
int mode_open(struct backend **out, const struct mode *mode, const struct model *m, int n_ctx,
              int n_threads, const struct fault_set *faults, struct gate_err *err);

/* mode_open with a batch of n_batch tokens (1..n_ctx): the per-batch buffers of n_batch rows.
 * Parity opens its subject with the longest call of its path (mode_longest_call()), so no call of
 * the path is cut into chunks the ladder did not ask for (a backend may still cap its batch
 * lower, as with any mode_open), and a 32k-position decode session holds one row of activations,
 * not 32,768 (issue 26 §2). */
int mode_open_batch(struct backend **out, const struct mode *mode, const struct model *m, int n_ctx,
                    int n_batch, int n_threads, const struct fault_set *faults,
                    struct gate_err *err);

/* The longest forward call mode_run_kept() makes on this path over n tokens: decode 1; prefill
 * its longest chunk (chunks NULL: n / 2, at least 1); chat its longest user turn (turn_ends as
 * mode_run_kept takes them), at least 1. Inputs mode_run_kept would refuse give what it would
 * have asked for before refusing; callers open with it, then run (which checks). */
int mode_longest_call(enum mode_path path, int n, const int *turn_ends, int n_turns,
                      const int *chunks, int n_chunks);

/* The judge opened with a batch of n_batch tokens (1..n_ctx): a longer call is evaluated in
 * chunks of n_batch (chunking changes no number), so its per-batch buffers are n_batch rows, not
 * n_ctx. What a long-context parity session opens (MODE_JUDGE_CHUNK; issue 26 §2). */
#define MODE_JUDGE_CHUNK 256
int mode_open_judge_batch(struct backend **out, const struct model *m, int n_ctx, int n_batch,
                          int n_threads, const char *emulate, struct gate_err *err);

/* Open the judge: a ref backend without faults, n_ctx positions, batch n_ctx. Every judge must be
 * opened here, never with mode_open(): the ran recorder below counts only subjects. */
int mode_open_judge(struct backend **out, const struct model *m, int n_ctx, int n_threads,
                    struct gate_err *err);
/* The judge with the roundings `emulate` names (engine/ref.c's GATE_REF_EMULATE items, e.g.
 * "kv-f16"): what a subject that claims those roundings should match more closely than the
 * plain judge. mode_open_judge is this with "" (none, whatever the environment says). */
int mode_open_judge_rounded(struct backend **out, const struct model *m, int n_ctx, int n_threads,
                            const char *emulate, struct gate_err *err);

/* What ran for one gate (DESIGN.md settled question 7, issue 10 §4): between mode_ran_begin()
 * and mode_ran_end(), every subject backend opened with mode_open() is read (struct
 * backend_info) when it is closed, and summed here: the backend names seen, the first device,
 * forwards, tokens, kernel launches, device bytes. Judges (mode_open_judge) are not counted. One
 * recorder at a time per process. */
struct mode_ran {
    char backends[64]; /* the distinct backend names seen, comma-separated ("" = none ran) */
    char device[128];  /* device of the first subject closed */
    char engine[256];  /* an external engine's "name version (build_id)", first seen ("" none) */
    char kv[8];        /* the subjects' KV cache as each backend reported it at open (base.kv_f16):
                        * "f32", "f16", "mixed" when they differed, "" when none closed or only
                        * external engines (exec: gate cannot see their cache) */
    char prefill[8];   /* the subjects' batched projections' precision (base.prefill, "" = f32):
                        * "f32", "f16", "bf16", "mixed"; "" as kv */
    char knob[KNOB_COUNT][BACKEND_KNOB_LEN]; /* the subjects' kernel generations (base.knob):
                                              * "v2", "split", "on", "eager: why", "mixed" when
                                              * they differed, "" when no subject has any to
                                              * select (CPU backends) */
    char isa[16];   /* the instruction set of the first subject that declares one (base.isa):
                     * the gate's own run; the consistency gate's other sets come after it */
    int n_subjects; /* subject backends closed */
    uint64_t forwards, tokens, kernel_launches, device_bytes;
};
void mode_ran_begin(struct mode_ran *r);
void mode_ran_end(void);
/* r as the JSON object receipts record under each gate's metrics "ran" (new reference). */
struct json_t;
struct json_t *mode_ran_json(const struct mode_ran *r);

/* Run tokens (n) through b along `path`, from an empty cache, writing logits (n, n_vocab).
 * chat needs the segment boundaries: turn_ends (n_turns) are exclusive end indices, strictly
 * increasing, the last equal to n; segment 0, 2, 4, ... (user turns) are fed batched,
 * segments 1, 3, 5, ... (assistant replies) decoded. decode/prefill ignore them. */
int mode_run(struct backend *b, enum mode_path path, const int32_t *tokens, int n,
             const int *turn_ends, int n_turns, float *logits, struct gate_err *err);

/* Uneven prefill chunks (issue 22 §5): split n_prefill tokens into chunk lengths derived from
 * seed (splitmix64): lengths cycle through four kinds — 1..8 tokens, 17..46, 16k + r (k 1..4,
 * r 1..15) and 32..95 — each cut to what is left, so a batched kernel meets single tokens,
 * odd sizes and partial 16-token tiles at positions that differ per seed. Writes at most
 * max_chunks lengths (the last takes the rest) and returns how many (0 when n_prefill < 1). */
#define MODE_MAX_CHUNKS 64
int mode_prefill_split(uint64_t seed, int n_prefill, int *chunks, int max_chunks);

/* mode_run_taps with the prefill path's batched part given as chunks (n_chunks lengths fed one
 * call each from position 0; their sum must be in 1..n); the rest is decoded. chunks NULL: the
 * first half in one call (mode_run_taps). Other paths ignore chunks. */
int mode_run_split(struct backend *b, enum mode_path path, const int32_t *tokens, int n,
                   const int *turn_ends, int n_turns, const int *chunks, int n_chunks,
                   float *logits, const struct backend_taps *taps, struct gate_err *err);

/* mode_run that also records taps over the whole sequence: taps' arrays are laid out
 * (n_layer, n, ...) for all n tokens (any may be NULL), whatever the forward calls were. */
int mode_run_taps(struct backend *b, enum mode_path path, const int32_t *tokens, int n,
                  const int *turn_ends, int n_turns, float *logits, const struct backend_taps *taps,
                  struct gate_err *err);

/* Which rows a run keeps (issue 26 §2: a long context judged at sampled positions must not hold
 * n_tok x n_vocab logits). pos: n increasing positions of the sequence. The run's logits are then
 * (n, n_vocab), row i for position pos[i], and its hidden-state taps (n_layer, n, n_embd), the
 * same rows; the routing taps (experts, weights, router k-th / (k+1)-th, the replay's force
 * arrays) stay whole-sequence, (n_layer, n_tok, ...): a route at any position reaches the later
 * ones, and the route-tie replay forces routes wherever they tie. Every position still runs
 * through the layers and the cache. The rows kept are bit-identical to the same rows of a whole
 * run (tests/test_longctx.c). A NULL keep is every position: the plain contract above. */
struct mode_keep {
    const int *pos;
    int n;
    /* NULL, or (n_layer, sequence, n_embd): every position's hidden state besides the kept rows
     * (parity's forced layers on a sampled span need each layer's input at every position) */
    float *hidden_all;
};

/* mode_run_split keeping only the rows of keep (NULL = every row): logits (keep->n, n_vocab),
 * taps laid out as struct mode_keep says. Each forward call's rows go through a scratch of that
 * call's length (decode: one row), never the whole sequence's. */
int mode_run_kept(struct backend *b, enum mode_path path, const int32_t *tokens, int n,
                  const int *turn_ends, int n_turns, const int *chunks, int n_chunks,
                  const struct mode_keep *keep, float *logits, const struct backend_taps *taps,
                  struct gate_err *err);

/* The judge keeping only the rows of keep (NULL: mode_judge): tokens (n) from an empty cache in
 * calls of at most b's n_batch tokens (what backend_forward's chunking does inside one call: the
 * same numbers), each call's rows through a scratch of n_batch rows; through the judge cache
 * (its key holds the kept positions). */
int mode_judge_kept(struct backend *b, const int32_t *tokens, int n, const struct mode_keep *keep,
                    float *logits, const struct backend_taps *taps, struct gate_err *err);

/* mode_judge_kept without the judge cache: the run itself (oracles/judgecache.c computes a miss
 * with it). */
int mode_forward_kept(struct backend *b, const int32_t *tokens, int n, const struct mode_keep *keep,
                      float *logits, const struct backend_taps *taps, struct gate_err *err);

/* The judge: tokens (n) in ONE forward call from an empty cache on b (a ref backend without
 * faults), logits (n, n_vocab), taps as in mode_run_taps (NULL = none). n_batch of b must be
 * >= n (mode_open sizes it so). */
int mode_judge(struct backend *b, const int32_t *tokens, int n, float *logits,
               const struct backend_taps *taps, struct gate_err *err);

/* The fixed chat conversation (three user turns, three assistant replies), rendered with
 * chat_format() (Qwen3 template, no generation prompt) and encoded with tok_encode() (special
 * tokens parsed), cut into six segments at each <|im_start|>. *ids (n) and *turn_ends
 * (n_turns = 6) are malloc'd (caller frees). ERR_INPUT when t lacks <|im_start|> or the
 * rendering does not cut into six segments. */
int mode_chat_tokens(const struct tok *t, int32_t **ids, int *n, int **turn_ends, int *n_turns,
                     struct gate_err *err);

/* Any conversation of n_msgs messages, rendered, encoded and cut as mode_chat_tokens() does the
 * fixed one (n_turns = n_msgs). */
int mode_chat_render(const struct tok *t, const struct chat_msg *msgs, int n_msgs, int32_t **ids,
                     int *n, int **turn_ends, int *n_turns, struct gate_err *err);

/* The fallback for a model without usable text tokens (no tokenizer metadata, or no
 * <|im_start|>): six segments of fixed lengths 40, 24, 36, 20, 32, 16 (168 ids) of splitmix64
 * ids (seed MODE_CHAT_SEED) modulo n_vocab. Same ownership as mode_chat_tokens(). */
#define MODE_CHAT_SEED 0xC4A7ULL
int mode_chat_fallback(uint32_t n_vocab, int32_t **ids, int *n, int **turn_ends, int *n_turns,
                       struct gate_err *err);

/* The conversation for model m: its tokenizer when it has one that renders ChatML, else the
 * fallback; *fallback says which (1 = fallback). */
int mode_chat_for_model(const struct model *m, int32_t **ids, int *n, int **turn_ends, int *n_turns,
                        int *fallback, struct gate_err *err);

/* The same for the six messages msgs (a fresh conversation: parity_chat_tokens()); the fallback's
 * ids come from fallback_seed instead of MODE_CHAT_SEED. */
int mode_chat_msgs_for_model(const struct model *m, const struct chat_msg *msgs, int n_msgs,
                             uint64_t fallback_seed, int32_t **ids, int *n, int **turn_ends,
                             int *n_turns, int *fallback, struct gate_err *err);

/* Deterministic token ids: out[i] = splitmix64 stream from seed, modulo n_vocab. With seed 202
 * and n_vocab 512 this is the conformance cases' tokens.txt. */
void mode_tokens(uint64_t seed, uint32_t n_vocab, int n, int32_t *out);

#ifdef __cplusplus
}
#endif
#endif
