/* tokenizer.h — byte-level BPE (GGUF tokenizer.ggml.model "gpt2", pre-tokenizer "qwen2"), the
 * tokenizer of the Qwen2/Qwen3 families, loaded from GGUF metadata alone.
 *
 * Encoding, in Hugging Face tokenizers' order: (1) added tokens (token_type CONTROL and
 * USER_DEFINED) are cut out of the raw text atomically, leftmost-longest; (2) each remaining
 * segment has invalid UTF-8 replaced by U+FFFD (one per maximal ill-formed subpart, as
 * Python's bytes.decode("utf-8", "replace")), then is NFC-normalized; (3) the Qwen2 split regex
 * cuts it into words; (4) each word's bytes are mapped through GPT-2's bytes_to_unicode and
 * merged by BPE rank. Decoding maps ids back to exact bytes. docs/tokenizer.md has the details
 * and the known deviations of other engines. Start reading: tok_load(), then tok_encode().
 *
 * Invariants after tok_load(): every merge's left, right and concatenation are tokens; every
 * single-byte symbol has a token; the tokenizer owns copies of everything it needs (the
 * gguf_file may be closed) and is immutable, so one tok may serve many threads.
 */
#ifndef GATE_TOKENIZER_H
#define GATE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values of tokenizer.ggml.token_type (llama.cpp's llama_token_type). */
enum tok_type {
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

struct tok;

/* Build a tokenizer from f's tokenizer.* metadata (no tensor data is read, so a
 * GGUF_OPEN_METADATA_ONLY open of a vocabulary-only file is enough). Requires
 * tokenizer.ggml.model = "gpt2", tokenizer.ggml.pre = "qwen2", tokenizer.ggml.tokens and
 * tokenizer.ggml.merges; token_type (INT32 array, one per token) and bos/eos/padding ids (UINT32)
 * are optional. On success *out is owned by the caller (tok_free); f may be closed afterwards.
 * Errors: ERR_INPUT naming the key and the bad value or index; ERR_ENV when out of memory. */
int tok_load(struct tok **out, const struct gguf_file *f, struct gate_err *err);

/* Free t; NULL is fine. */
void tok_free(struct tok *t);

/* Encode text[0..len) (any bytes, need not be NUL-terminated or valid UTF-8) into token ids.
 * parse_special = 1: control and user-defined tokens written in the text become their ids.
 * parse_special = 0: control tokens are encoded as plain text; user-defined tokens are still
 * matched (as llama.cpp and HF's encode_special_tokens do). No BOS/EOS is added.
 * *ids is malloc'd (caller frees; non-NULL even when *n_ids = 0). Errors: ERR_ENV (memory),
 * ERR_INPUT (a regex failure, naming the byte offset). */
int tok_encode(const struct tok *t, const char *text, size_t len, int parse_special, int32_t **ids,
               int *n_ids, struct gate_err *err);

/* Decode ids[0..n) into the exact bytes they stand for (special and user-defined tokens give
 * their text, unused padding tokens give nothing; the result may be invalid UTF-8 when the ids
 * split a character). *out is malloc'd and NUL-terminated, *out_len excludes the NUL. An id
 * outside [0, n_vocab) is ERR_INPUT naming the id and its position. */
int tok_decode(const struct tok *t, const int32_t *ids, int n, char **out, size_t *out_len,
               struct gate_err *err);

/* Number of tokens (the length of tokenizer.ggml.tokens, padding included). */
int tok_n_vocab(const struct tok *t);

/* Special ids from the metadata; -1 when the file has none. */
int32_t tok_eos(const struct tok *t);
int32_t tok_bos(const struct tok *t);

/* The id of the token whose stored text is exactly the NUL-terminated piece (stored text is
 * the byte-level form for normal tokens, e.g. "Ġthe", and the plain text for special ones,
 * e.g. "<|im_end|>"); -1 if none. */
int32_t tok_find(const struct tok *t, const char *piece);

/* The GGUF token type of id (normal, control, ...). */
int tok_token_type(const struct tok *t, int32_t id);

/* The one token-id parser (`gate detokenize`, `--tokens` files, anchor cases, the tests): ids
 * are decimal integers in text[0..len) separated by whitespace or commas; '[' and ']' are
 * skipped, so a JSON array works too. Every id must lie in [0, n_vocab), or in [0, INT32_MAX]
 * when n_vocab is 0 (no bound: the vocabulary is checked later, e.g. by tok_decode). Zero ids
 * is not an error here (*n = 0, *ids non-NULL): callers that need ids say so in their own words.
 * `what` names the source in messages (a file name, "--ids"). *ids is malloc'd (caller frees).
 * Errors: ERR_INPUT "WHAT:LINE: 'WORD' is not a token id (id N: REASON)" with the word escaped
 * and cut at 40 bytes; ERR_ENV when out of memory. On error *ids is NULL and *n is 0. */
int tok_parse_ids(const char *text, size_t len, const char *what, uint32_t n_vocab, int32_t **ids,
                  int *n, struct gate_err *err);

#ifdef __cplusplus
}
#endif
#endif
