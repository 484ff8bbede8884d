/* cmd_tokenize.h — `gate tokenize` and `gate detokenize`: the tokenizer as a command, so an
 * engineer can check that two engines saw the same tokens. Both open the GGUF metadata-only
 * (GGUF_OPEN_METADATA_ONLY: tensor data is neither mapped into use nor validated), so a
 * vocabulary-only file with no tensors at all is enough. The tokenization itself is
 * engine/tokenizer.c (ids are parsed by tok_parse_ids there too); this file is input reading and
 * the three output forms.
 *
 * The helpers below are what the commands use; tests call them directly to push many strings
 * through the same code without starting a process per string. Start reading: cmd_tokenize().
 */
#ifndef GATE_CMD_TOKENIZE_H
#define GATE_CMD_TOKENIZE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/tokenizer.h"

/* argv[0] is "tokenize" / "detokenize". tokenize takes one or more --text / --text-file inputs
 * and tokenizes each separately, in order (one block, --ids line or --json line each), so many
 * strings cost one tokenizer load. Return the process exit code: 0 ok, 2 usage or input
 * error (missing file, no tokenizer in the GGUF, bad or out-of-range id), 3 environment error
 * (out of memory, unreadable input, stdout not writable). */
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);

/* Open path metadata-only and load its tokenizer; the GGUF is closed before returning. On
 * success *out is owned by the caller (tok_free). Errors: those of gguf_open (a missing file is
 * ERR_INPUT quoting the path), ERR_INPUT "'path' has no tokenizer" when tokenizer.ggml.model is
 * absent, and tok_load's. */
int cmd_tokenize_load(struct tok **out, const char *path, struct gate_err *err);

/* The display form of bytes p[0..n) (no quotes added): well-formed UTF-8 characters of
 * U+00A0 and above stay as they are; \ and " become \\ and \"; newline, tab and carriage return
 * become \n, \t, \r; every other byte below 0x20, 0x7F, the C1 controls and every byte that is
 * not part of a well-formed UTF-8 character become \xNN. The result is valid UTF-8 and
 * reversible. Returns a malloc'd NUL-terminated string, or NULL when out of memory. */
char *cmd_tokenize_escape(const char *p, size_t n);

/* The --ids output form of ids[0..n): decimal ids separated by one space, then a newline (just
 * "\n" for n = 0). malloc'd NUL-terminated, NULL when out of memory. */
char *cmd_tokenize_format_ids(const int32_t *ids, int n);

#endif
