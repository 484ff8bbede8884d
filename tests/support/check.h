/* check.h — helpers every test file uses: the one float comparison (a Criterion wrapper of
 * oracles/compare.h: first bad index, max absolute and relative error, NMSE), paths to
 * ../shared and to a scratch folder, file slurping, and the one reader of GATE_ASAN.
 */
#ifndef GATE_TEST_CHECK_H
#define GATE_TEST_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "oracles/compare.h"

/* Compare a (actual) against b (expected), n floats: oracles/compare.h's compare_floats, the
 * comparison `gate selftest` judges kernels by. */
struct compare_stats check_cmp(const float *a, const float *b, int64_t n, double atol, double rtol);

/* Assert (Criterion) that a matches b: no non-finite values, NMSE <= max_nmse and every element
 * within atol + rtol|b|; the failure message reports the first bad index and all statistics. */
void check_floats(const char *what, const float *a, const float *b, int64_t n, double atol,
                  double rtol, double max_nmse);

/* ../shared as seen from the project root ($GATE_SHARED overrides). Static string. */
const char *check_shared_dir(void);

/* 1 under the ASan build's test run (env GATE_ASAN set and neither "" nor "0"), where tests run a
 * printed, deterministic subset of a sweep (the normal build runs all of it). Every test that
 * asks reads GATE_ASAN through this. */
int check_asan(void);

/* A fresh scratch folder under $TMPDIR for this process (created on first call). */
const char *check_tmp_dir(void);

/* A fresh folder under check_tmp_dir() named tag and six random characters (mkdtemp, mode 0700):
 * its path into dir (n bytes). Asserts. */
void check_make_dir(char *dir, size_t n, const char *tag);

/* dir/name in one of eight rotating static buffers (each valid until eight more calls, from any
 * caller). */
const char *check_path(const char *dir, const char *name);

/* Read a whole file; returns malloc'd bytes (*size of them, plus a NUL after the last, so text
 * may be searched with strstr) and sets *size, or NULL. */
uint8_t *check_slurp(const char *path, size_t *size);

/* Read a whole text file as a NUL-terminated string (malloc'd; "" when it cannot be read), for
 * strstr() on a command's output. */
char *check_slurp_text(const char *path);

struct model;

/* Load ../shared/conformance/<name>/model.gguf (asserting success); free with model_free(). */
struct model *check_load_case(const char *name);

/* The synthetic model o describes, written to memory (*buf, freed by the caller after
 * model_free()), opened under the name `name` and bound (asserting each step). */
struct synth_options;
struct model *check_synth_model(const struct synth_options *o, const char *name, uint8_t **buf);

/* check_synth_model() of a preset at Q4_K_M, seed 1. */
struct model *check_tiny_model(const char *preset, uint8_t **buf);

/* The token ids of a text file through the one parser (tok_parse_ids, no vocabulary bound);
 * malloc'd array and count, or NULL when the file cannot be read; a malformed file fails the
 * test with the parser's message. */
int32_t *check_read_ids(const char *path, int *n);

#endif
