/* golden.h — the golden oracle: greedy decode on the mode under test must reproduce recorded
 * token ids exactly (ids are the primary check; an optional expected text is checked too).
 *
 * Goldens live in one JSON file the ladder references, keyed by the model's SHA-256:
 *   {"schema": 1, "models": {"<sha256>": {"recorded_by": "ref", "n_gen": 32,
 *     "cases": [{"name": "...", "prompt": [ids], "ids": [ids], "text": "...",
 *                "expect_text": "..." (optional, checked when present)}]}}}
 * Goldens recorded for another digest are refused, never reused. golden_record() writes them
 * from the reference twin (prompt in one batched forward, then greedy decode; argmax with the
 * lowest id on ties; generation stops after n_gen ids or at the tokenizer's EOS, included).
 * Start reading: golden_run().
 */
#ifndef GATE_GOLDEN_H
#define GATE_GOLDEN_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/backend.h"
#include "engine/err.h"
#include "engine/model.h"
#include "oracles/mode.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GOLDEN_SCHEMA 1
#define GOLDEN_N_GEN 32

struct golden_case {
    char name[64];
    int32_t *prompt; /* owned */
    int n_prompt;
    int32_t *ids;    /* owned; expected continuation (NULL before recording) */
    int n_ids;
    char *text;        /* owned, informational: the decoded continuation (may be NULL) */
    char *expect_text; /* owned, optional: when set, the decoded continuation must equal it */
};

struct golden_set {
    char sha256[65];
    int n_gen;
    int n;
    struct golden_case *c; /* owned */
};

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
 * keeping the entries of other model digests already there; written atomically. */
int golden_record(const char *path, const struct model *m, int n_gen, int n_threads,
                  struct gate_err *err);

/* Load the goldens recorded for sha256 from path. A file with goldens only for other digests
 * is ERR_INPUT naming them: goldens are never reused across models. */
int golden_load(const char *path, const char *sha256, struct golden_set *out,
                struct gate_err *err);

struct golden_case_result {
    char name[64];
    int pass;
    int first_diff;          /* -1 when equal */
    int32_t *expected, *got; /* owned copies */
    int n_expected, n_got;
    char *expected_text, *got_text; /* decoded (NULL without a tokenizer) */
};

struct golden_result {
    char mode[32];
    int pass;
    char reason[320];
    int n;
    struct golden_case_result *c; /* owned */
};

/* Run every case of g on the mode (greedy, as recorded) and compare. g->sha256 must equal m's
 * digest (ERR_INPUT otherwise). Returns 0 with out->pass set, or a negative status. */
int golden_run(const struct model *m, const struct mode *mode, const struct golden_set *g,
               int n_threads, struct golden_result *out, struct gate_err *err);

void golden_result_free(struct golden_result *r);
json_t *golden_result_json(const struct golden_result *r);
void golden_print(FILE *f, const struct golden_result *r);

#ifdef __cplusplus
}
#endif
#endif
