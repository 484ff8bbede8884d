/* compare.h — the one float comparison (STYLE.md rule 10): what `gate selftest` judges kernels
 * by and what the tests' check_floats() asserts with, so the two can never disagree on a number.
 *
 * Rules: a NaN or Inf on either side (the value under test or the expected one) is a failure at
 * its index, counted in n_nonfinite and never folded into the sums (a comparison with NaN would
 * silently evaluate false); the first bad index is the first element that is non-finite or
 * outside atol + rtol * |want|; NMSE = sum (got - want)^2 / sum want^2 over the finite pairs
 * (the plain sum of squares when every expected value is 0). Start reading: compare_floats().
 */
#ifndef GATE_COMPARE_H
#define GATE_COMPARE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A running maximum (minimum) in which a NaN is the worst value of all and stays: the plain
 * `if (!(x <= m)) m = x` keeps a NaN only until the next finite x replaces it (a NaN in one row
 * of a batched forward recorded a consistency max_abs of 0 that way, until 2026-12-03). */
static inline double compare_worst_max(double m, double x)
{
    return isnan(m) || isnan(x) ? NAN : x > m ? x : m;
}

static inline double compare_worst_min(double m, double x)
{
    return isnan(m) || isnan(x) ? NAN : x < m ? x : m;
}

struct compare_stats {
    double nmse;         /* sum (got-want)^2 / sum want^2 over finite pairs */
    double max_abs;      /* max |got - want| */
    double max_rel;      /* max |got - want| / max(|want|, 1e-30) */
    int64_t first_bad;   /* first index non-finite or outside atol + rtol|want|; -1 if none */
    int64_t n_nonfinite; /* indices where got or want is NaN / Inf */
};

/* Compare got[0..n) against want[0..n) (n may be 0) under atol + rtol * |want| per element. */
struct compare_stats compare_floats(const float *got, const float *want, int64_t n, double atol,
                                    double rtol);

/* The verdict: no non-finite value, no element outside its tolerance, NMSE <= max_nmse. */
int compare_pass(const struct compare_stats *s, double max_nmse);

/* One line for a report: "first bad index I (got G, want W), max abs err A, max rel err R,
 * NMSE N (limit L), K non-finite" (got/want omitted when nothing was out of tolerance), into
 * buf[0..size) (truncated, always NUL-terminated). Returns buf. */
const char *compare_describe(const struct compare_stats *s, const float *got, const float *want,
                             double max_nmse, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
