/* selftest.h — the CUDA kernels' differential checks, defined once: every kernel family over its
 * edge shapes, against its CPU twin, with its tolerance from one table (selftest.c: TOL).
 * `gate selftest` prints them as a table on a GPU host; tests/cuda/ wraps the same families in
 * Criterion tests. Without the CUDA backend in the build, or without a device, selftest_kernels
 * returns ERR_ENV with the reason (the caller skips visibly).
 * Outputs are judged by oracles/compare.h (compare_floats, compare_pass), the comparison the
 * tests use too. Start reading: selftest_kernels().
 */
#ifndef GATE_SELFTEST_H
#define GATE_SELFTEST_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct selftest_case {
    const char *family;          /* "gemv", "attention", ... */
    const char *twin;            /* the CPU twin it is compared with */
    char shape[160];             /* the edge shape, e.g. "Q4_K rows 37 cols 768 vec 1" */
    const char *what;            /* which output ("y", "ids", "kcache", ...) */
    double max_nmse, atol, rtol; /* the family's tolerance */
};

/* Called once per compared output: got (device) vs want (twin), n floats (integer outputs are
 * converted exactly). Return nonzero to record the case as failed (the return value is only
 * counted). The arrays are valid during the call only. */
typedef int (*selftest_cmp_fn)(void *ctx, const struct selftest_case *c, const float *got,
                               const float *want, int64_t n);

/* The families, in run order; *n receives the count. Static storage. */
const char *const *selftest_families(int *n);

/* Run the checks of one family (NULL = all) through cmp. *n_cases / *n_failed (may be NULL)
 * count the comparisons and cmp's nonzero returns. Returns 0 when every case could be run
 * (whatever cmp said), ERR_ENV when there is no CUDA backend or device (err says which), ERR_INPUT
 * for an unknown family, or the status of a failed CUDA call (err names it). */
int selftest_kernels(const char *family, selftest_cmp_fn cmp, void *ctx, int *n_cases,
                     int *n_failed, struct gate_err *err);

/* 0 and the device name when the CUDA backend is built in and a device is usable; else ERR_ENV
 * with the reason ("this build has no CUDA backend", "no CUDA device: ..."). */
int selftest_device(char *name, size_t n, struct gate_err *err);

/* `gate selftest` (cli/cmd_selftest.c); argv[0] is "selftest". Exit codes as cli.h. */
int cmd_selftest(int argc, char **argv);

#endif
