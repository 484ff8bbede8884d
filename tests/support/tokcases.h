/* tokcases.h — the tokenizer expectations written by tests/data/gen_tokenizer_expected.py
 * (Hugging Face tokenizers), shared by test_tokenizer.c and test_cmd_tokenize.c. */
#ifndef GATE_TEST_TOKCASES_H
#define GATE_TEST_TOKCASES_H

#include <jansson.h>
#include <stddef.h>

#define TOKCASES_PATH GATE_SOURCE_DIR "/tests/data/tokenizer_expected.json"

/* The "cases" array (new reference; at least 40 entries, asserted). */
json_t *tokcases_load(void);

/* Bytes of a hex string; malloc'd and NUL-terminated (never NULL), *n set. */
char *tokcases_unhex(const char *hex, size_t *n);

#endif
