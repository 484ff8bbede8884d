/* golden.h — the golden oracle: greedy decode on the mode under test must reproduce recorded
 * token ids exactly (ids are the primary check; an optional expected text is checked too), except
 * where the judge itself sits on a near tie.
 *
 * Goldens live in one JSON file the ladder pins by SHA-256, keyed by the model's SHA-256:
 *   {"schema": 2, "models": {"<sha256>": {
 *     "recorded_by": {"engine": "gate", "backend": "ref", "git_commit": "...", "git_dirty": false,
 *                     "date": "2025-01-01T00:00:00Z"}       (a regression golden), or
 *                    {"engine": "llama.cpp" | "exact-f64" | "transformers", "version": "..."}
 *                                                            (an independent continuation),
 *     "n_gen": 32, "eos": 2 (-1: none; recording stopped at it),
 *     "cases": [{"name": "...", "prompt": [ids], "ids": [ids], "text": "...",
 *                "expect_text": "..." (optional, checked when present)}]}}}
 * Loading validates every case (golden_load_buf): empty prompt or ids, more ids than n_gen,
 * fewer unless the last is the recorded EOS, an EOS before the end, an unknown or incomplete
 * recorded_by — each is ERR_INPUT naming the case; a vacuous PASS is impossible. Goldens for
 * another digest are refused, never reused.
 *
 * Goldens recorded by gate itself (engine "gate") are REGRESSION goldens: they prove the subject
 * still does what gate's own twin did when recorded, not that either is right; every metrics
 * object says "source": "regression" or "independent". golden_record() refuses to overwrite an
 * entry unless forced.
 *
 * The verdict (golden_judge) is recomputed from the expected and produced ids: at the first
 * difference k the gate records the judge's (ref twin, one batched forward over prompt +
 * expected[0..k)) top-1 and top-2 ids and logit margin; a divergence where the judge's own
 * margin is below near_tie, and both the expected and the produced id lie within near_tie of the
 * judge's top, is a TIE_FLIP (counted, shown, the case stops there); anything else is WRONG.
 * Start reading: golden_gate(), then golden_judge().
 */
#ifndef GATE_GOLDEN_H
#define GATE_GOLDEN_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "engine/backend.h"
#include "engine/model.h"
#include "oracles/gates.h"
#include "oracles/mode.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GOLDEN_SCHEMA 2
#define GOLDEN_N_GEN 32

struct golden_case {
    char name[64];
    int32_t *prompt; /* owned */
    int n_prompt;
    int32_t *ids; /* owned; expected continuation (NULL before recording) */
    int n_ids;
    char *text;        /* owned, informational: the decoded continuation (may be NULL) */
    char *expect_text; /* owned, optional: when set, the decoded continuation must equal it */
};

struct golden_set {
    char sha256[65];      /* the model's digest the entry is keyed by */
    char file_sha256[65]; /* SHA-256 of the goldens file's bytes as loaded */
    int n_gen;
    int32_t eos;         /* recorded EOS id, -1 when recording did not stop at one */
    int independent;     /* 1: recorded_by names an engine other than gate */
    json_t *recorded_by; /* owned: the entry's recorded_by object */
    int n;
    struct golden_case *c; /* owned */
};

/* "regression" or "independent" for a recorded_by object; NULL when it is not a known, complete
 * form (engine "gate" needs backend, git_commit, git_dirty, date; an independent engine needs
 * version). */
const char *golden_source_of(const json_t *recorded_by);

void golden_set_free(struct golden_set *g);

/* Hex SHA-256 of the model file's bytes. */
void golden_model_sha256(const struct model *m, char out[65]);

/* The fixed prompts: text prompts (a sentence, code, a ChatML turn) through the model's
 * tokenizer when it has one whose ids fit the model; else three prompts of 16 splitmix64 ids
 * (seeds 11, 12, 13). Fills out->c[].prompt and names; ids stay NULL. */
int golden_default_prompts(const struct model *m, struct golden_set *out, struct gate_err *err);

/* Greedy decode on b from an empty cache: the prompt (n_prompt) fed along path (decode: one
 * token at a time; prefill, chat: one batched forward), then up to n_gen ids, each fed back
 * one at a time. eos >= 0 stops after emitting it. out (n_gen) receives the ids; *n_out how
 * many. b's context must hold n_prompt + n_gen. */
int golden_generate(struct backend *b, enum mode_path path, const int32_t *prompt, int n_prompt,
                    int n_gen, int32_t eos, int32_t *out, int *n_out, struct gate_err *err);

/* First index where the two id lists differ (a shorter list differs at its end); -1 equal. */
int golden_first_diff(const int32_t *a, int na, const int32_t *b, int nb);

/* Record goldens for m (default prompts, n_gen ids each, from the reference twin) into path,
 * keeping the entries of other model digests already there; written atomically (base/atomic.h).
 * recorded_by (copied; the caller knows the build: see golden_recorded_by_gate(); NULL = an
 * unknown, dirty gate build) says who recorded them. An entry already recorded for m's digest is
 * ERR_INPUT naming the digest and the file unless force is set (never overwritten silently). */
int golden_record_force(const char *path, const struct model *m, int n_gen, int n_threads,
                        int force, const json_t *recorded_by, struct gate_err *err);
/* Whether the goldens at path already hold an entry for the model digest sha256: *who (n bytes)
 * receives its recorded_by engine ("" when none; "an unknown source" when it names none) and
 * *n_gen its token count per prompt (-1 when the entry is not an object or has no integer
 * n_gen). A missing file holds none; an unreadable or malformed one is ERR_INPUT / ERR_ENV. */
int golden_entry_of(const char *path, const char *sha256, char *who, size_t n, int *n_gen,
                    struct gate_err *err);
/* {"engine": "gate", "backend": "ref", git_commit, git_dirty, date (now, UTC)} (new ref);
 * git_commit NULL = "unknown" and dirty. */
json_t *golden_recorded_by_gate(const char *git_commit, int git_dirty);
/* golden_record_force() with force 0 and recorded_by NULL (tests). */
int golden_record(const char *path, const struct model *m, int n_gen, int n_threads,
                  struct gate_err *err);

/* Load and validate the goldens recorded for the model digest sha256 from bytes (n; the file's
 * contents, e.g. read from a descriptor pinned by digest; name is used in messages only).
 * out->file_sha256 is the SHA-256 of bytes. Validation errors are ERR_INPUT naming the file
 * and the case (see the header block). Free out with golden_set_free(). */
int golden_load_buf(const char *bytes, size_t n, const char *name, const char *sha256,
                    struct golden_set *out, struct gate_err *err);
/* golden_load_buf() of the file at path (read whole, bounded at 64 MiB). */
int golden_load(const char *path, const char *sha256, struct golden_set *out, struct gate_err *err);

enum golden_class {
    GOLDEN_MATCH = 0,     /* ids (and expect_text when recorded) equal */
    GOLDEN_TIE_FLIP = 1,  /* diverged where the judge's own top-2 margin < near_tie: not a FAIL */
    GOLDEN_WRONG = 2,     /* diverged with a clear margin, or text / length differs */
    GOLDEN_ROUTE_TIE = 3, /* diverged where the judge replayed on the subject's near-tie expert
                           * choices (the route-tie replay, oracles/parity.h) picks the
                           * subject's token within near_tie: not a FAIL */
};

const char *golden_class_name(enum golden_class c);

struct golden_case_result {
    char name[64];
    int pass; /* cls != GOLDEN_WRONG */
    enum golden_class cls;
    int first_diff;               /* -1 when equal */
    int have_margin;              /* the judge ran at first_diff (top1/top2/margin valid) */
    int32_t top1, top2;           /* the judge's two best ids at first_diff */
    double margin;                /* judge logit(top1) - logit(top2) */
    double gap_expected, gap_got; /* judge logit(top1) - logit(expected / produced id) */
    /* the route-tie replay at first_diff (MoE subjects with taps): the judge forced to the
     * subject's near-tie expert choices over prompt + ids[0..first_diff) */
    int replayed, replay_forced, replay_refused;
    int32_t replay_top1;
    double replay_gap_got;   /* replayed judge logit(top1) - logit(produced id) */
    int32_t *expected, *got; /* owned copies */
    int n_expected, n_got;
    char *expected_text, *got_text; /* decoded (NULL without a tokenizer) */
};

struct golden_result {
    char mode[32];
    int pass;                  /* verdict == GATE_PASS */
    enum gate_verdict verdict; /* golden_judge(settings, metrics) */
    char reason[320];
    int n_tie_flip;
    int n_route_tie; /* cases judged ROUTE_TIE (the route-tie replay) */
    int n;
    struct golden_case_result *c; /* owned */
    json_t *metrics;              /* owned: what golden_judge reads, as a receipt records it */
    json_t *checks;               /* owned: the judge's checks */
};

/* The gate: run every case of g on the mode (greedy, as recorded), compute the judge's margin
 * where a case diverges, build out->metrics and take the verdict from golden_judge(settings,
 * out->metrics). settings: {"tokens", "near_tie", "goldens_sha256"} (the ladder's). g->sha256
 * must equal m's digest and g->eos the model tokenizer's EOS (ERR_INPUT otherwise). Returns 0
 * with out->verdict set, or a negative status. Free out with golden_result_free(). */
int golden_gate(const struct model *m, const struct mode *mode, const struct golden_set *g,
                const json_t *settings, int n_threads, struct golden_result *out,
                struct gate_err *err);

/* The golden gate's verdict from settings {tokens, near_tie, goldens_sha256} and metrics as
 * golden_gate() records them; pure (gate_judge_fn). Recomputes each case's first difference
 * from "expected" and "got", its class from the recorded judge margin and settings.near_tie,
 * and the source label from "recorded_by"; believes no stored verdict or first_diff. */
enum gate_verdict golden_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                               char *why, size_t n);

void golden_result_free(struct golden_result *r);
/* A deep copy of r->metrics (what a receipt records; the verdict comes from golden_judge). */
json_t *golden_result_json(const struct golden_result *r);

#ifdef __cplusplus
}
#endif
#endif
