/* vocab.h — writes tokenizer metadata (the GGUF tokenizer.* keys of FACTS.md §2) onto a
 * gguf_writer: either the real Qwen3 vocabulary imported from a Hugging Face tokenizer.json.gz,
 * or a small synthetic byte-level BPE vocabulary for tiny test models.
 *
 * Both produce what engine/tokenizer.c loads: model "gpt2", pre "qwen2", tokens, token_type,
 * merges ("left right", rank = index), bos/eos/padding ids and add_bos_token = false.
 * Start reading: vocab_import_hf().
 */
#ifndef GATE_VOCAB_H
#define GATE_VOCAB_H

#include <stdint.h>

#include "base/err.h"
#include "gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Import a Hugging Face byte-level BPE tokenizer (tokenizer.json, gzip-compressed) the way
 * llama.cpp's convert_hf_to_gguf.py does for Qwen: tokens by id (model vocab + added tokens),
 * ids without a token become "[PAD{id}]" of type UNUSED up to pad_to (0: no padding; the real
 * Qwen3 models use 151936), added special tokens and added tokens that look special ("<|...|>")
 * are CONTROL, other added tokens USER_DEFINED, the rest NORMAL; bos = padding = the id of
 * "<|endoftext|>", eos = the id of "<|im_end|>". Adds the keys to w (nothing else).
 * Errors: ERR_ENV when the file cannot be read, ERR_INPUT for a malformed file (naming the path
 * and the field) or pad_to smaller than the vocabulary. */
int vocab_import_hf(struct gguf_writer *w, const char *tokenizer_json_gz_path, uint32_t pad_to,
                    struct gate_err *err);

/* Add a synthetic byte-level vocabulary of exactly n_vocab tokens (259 <= n_vocab <= 2543): the
 * 256 byte tokens in bytes_to_unicode order, then merges ("Ġ Ġ", "Ġ" + each byte with the
 * lowercase letters first in English frequency order, lowercase bigrams, "Ġx" + lowercase
 * letter, capital + lowercase letter) up to n_vocab - 3, then the control tokens
 * <|endoftext|> (bos, padding), <|im_start|>, <|im_end|> (eos). For n_vocab = 512 this is
 * exactly the vocabulary of the conformance models. Errors: ERR_INPUT for n_vocab out of range,
 * ERR_ENV when out of memory. */
int vocab_add_byte_level(struct gguf_writer *w, uint32_t n_vocab, struct gate_err *err);

#ifdef __cplusplus
}
#endif
#endif
