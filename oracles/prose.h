/* prose.h — fresh English-like text for the parity inputs.
 *
 * Parity judged uniform random token ids only, which look nothing like text: an engine that can
 * tell the two apart (a defeat device) could be right on random ids and wrong on what users send
 * (docs/exec.md, "Telling test inputs from use"). prose_text() writes sentences that a word-bigram
 * chain over a small built-in corpus walks from a seed — never the corpus's own sentences in
 * order, so an engine cannot recognize them by memorizing gate's source; prose_tokens() encodes
 * them with the model's own tokenizer. Pure functions of (seed, tokenizer, length). Start
 * reading: prose_tokens().
 */
#ifndef GATE_PROSE_H
#define GATE_PROSE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/chat.h"
#include "engine/model.h"
#include "engine/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* At least `words` words of fresh prose from seed into a malloc'd, NUL-terminated *out: whole
 * sentences, capitalized, spaces between words, a paragraph break now and then. ERR_ENV on out
 * of memory. */
int prose_text(uint64_t seed, int words, char **out, struct gate_err *err);

/* Exactly n ids: the first n tokens of t's encoding of prose_text(seed, ...), without special
 * tokens. Every id is below n_vocab, else ERR_INPUT (a tokenizer larger than the model's
 * embedding table: the caller falls back to random ids). */
int prose_tokens(const struct tok *t, uint64_t seed, uint32_t n_vocab, int n, int32_t *out,
                 struct gate_err *err);

/* n ids of fresh test input from seed: alternating segments of 16..48 tokens (lengths and
 * contents drawn from the seed) of text and of uniform random ids (mode_tokens(seed)'s ids at
 * those positions), text first — an engine reading the sequence token by token has met no random
 * id when the first text is judged. The text segments take turns being plain prose
 * (prose_tokens) and a chat request (a prose_chat conversation in t's ChatML, special tokens
 * parsed, <|im_start|> first; plain prose where t has no <|im_start|>), the first one's kind drawn
 * from the seed. A segment t cannot encode within
 * n_vocab stays random ids; t NULL (no tokenizer): random ids only. Every prefix is the same
 * whatever n; *n_prose (may be NULL) counts the prose tokens, is_prose (may be NULL, n bytes) marks
 * them. ERR_ENV on out of memory. */
int prose_mixed_tokens(const struct tok *t, uint64_t seed, uint32_t n_vocab, int n, int32_t *out,
                       int *n_prose, uint8_t *is_prose, struct gate_err *err);

/* A fresh conversation from seed: PROSE_CHAT_MSGS messages, user and assistant in turn, each a
 * cut of prose_text() from its own seed — users 8..20 words, assistants 3..14, times `scale`
 * (>= 1: the caller's way to a longer one) — ending in '.' or, for a user, sometimes '?'.
 * msgs[i].content points into *store (one malloc'd block: free it). ERR_ENV on out of memory. */
#define PROSE_CHAT_MSGS 6
int prose_chat(uint64_t seed, int scale, struct chat_msg msgs[PROSE_CHAT_MSGS], char **store,
               struct gate_err *err);

/* The model's tokenizer, or NULL where it has none gate can load (free with tok_free). */
struct tok *prose_model_tok(const struct model *m);

/* prose_mixed_tokens() with m's own tokenizer. */
int prose_mixed_for_model(const struct model *m, uint64_t seed, int n, int32_t *out, int *n_prose,
                          uint8_t *is_prose, struct gate_err *err);

#ifdef __cplusplus
}
#endif

#endif
