/* cli.h — the `gate` subcommands and the helpers they share. Each cmd_* takes argv after the
 * binary name (argv[0] is the subcommand) and returns a process exit code (DESIGN.md settled
 * question 6: 0 pass, 1 judged or runtime failure, 2 usage/input error, 3 environment error).
 */
#ifndef GATE_CLI_H
#define GATE_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

int cmd_model(int argc, char **argv);       /* model inspect | synth | stats */
int cmd_model_stats(int argc, char **argv); /* model stats */
int cmd_eval(int argc, char **argv);        /* eval */
int cmd_generate(int argc, char **argv);    /* generate */
int cmd_bench(int argc, char **argv);       /* bench */
int cmd_ladder(int argc, char **argv);      /* ladder check */
int cmd_run(int argc, char **argv);         /* run */
int cmd_release(int argc, char **argv);     /* release check */
int cmd_golden(int argc, char **argv);      /* golden record */
int cmd_report(int argc, char **argv);      /* report (HTML; cli/cmd_report.c) */

/* Print "gate: <msg>" to stderr; returns code. */
int cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The value of option argv[*i] (advances *i); prints a usage error and returns -1 if absent. */
int cli_value(int argc, char **argv, int *i, const char **out);

/* Parse an integer option value in [lo, hi]; prints a usage error and returns -1 if bad. */
int cli_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out);

/* Read the token ids of the text file at path through tok_parse_ids (no vocabulary bound: the
 * backend checks the range); *ids malloc'd. An empty file is ERR_INPUT "PATH: no token ids". */
int cli_read_ids(const char *path, int32_t **ids, int *n, struct gate_err *err);

/* Copy s into buf (n bytes, n >= 1) for a terminal: C0 controls, DEL, the C1 controls
 * (U+0080..U+009F) and every byte that does not start valid UTF-8 are written as "\xNN" (each
 * byte of a C1 code point escaped), a backslash as "\\"; valid UTF-8 text is copied. Truncated
 * to fit (never inside an escape), always NUL-terminated. s may be NULL ("(null)"). Returns
 * buf. Use it for every string that comes from a receipt, a ladder or an import file. */
const char *cli_safe(const char *s, char *buf, size_t n);

struct ladder_model;

/* Make sure a ladder model's file exists: a `synth:` model missing from its cache path
 * (.gate-cache/ID-PRESET-QUANT-SEED.gguf next to the ladder) is written there now with the
 * ladder's preset, quant and seed (deterministic: the bytes the ladder pins), showing progress on
 * stderr (a bar on a terminal, one line otherwise); a `path:` model is only checked to exist.
 * threads 0 = online CPUs. ERR_INPUT for an unknown preset or quant or a missing path: file,
 * ERR_ENV when the file cannot be written. Used by `gate golden record` (gate run has the same
 * step in run.c's ensure_model()). */
int cli_ensure_model(const struct ladder_model *lm, int threads, struct gate_err *err);

/* The whole `gate release check` as the command runs it (cli/cmd_run.c), printing to out and
 * judging receipts against self as this build's identity (NULL: the running binary's; tests pass
 * a stand-in clean build). Returns the process exit code. The core is release_evaluate(). */
struct release_options;
struct identity;
int release_check_opts(FILE *out, const struct release_options *o, const struct identity *self);
int release_check_to(FILE *out, const char *ladder, const char *db, const char *sign_key,
                     const struct identity *self);

#endif
