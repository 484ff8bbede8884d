/* detmath.h — exp, log, sin and cos built from IEEE +, -, *, / only.
 *
 * Why: libm picks different code paths per CPU (FMA or not) through ifuncs, so expf() may
 * differ in the last bit between two machines. The reference twin's results must not depend on
 * the machine (DESIGN.md settled question 8: goldens recorded on one machine reproduce on
 * another), so the twin uses these instead. Each evaluates a polynomial in double with error
 * far below a float ULP; results are the same on every IEEE-754 machine built with
 * -ffp-contract=off.
 */
#ifndef GATE_DETMATH_H
#define GATE_DETMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* det_exp(), inline for both compilers: range reduction x = k ln2 + r with ln 2 split so that
 * k * LN2_HI is exact, then e^r by Horner to r^14 (truncation below 5e-18), scaled by 2^k built
 * from bits. nvcc must compile callers with --fmad=false so nothing is contracted. */
GATE_HD static inline double det_exp_inline(double x)
{
    const double LN2_HI = 6.93147180369123816490e-01, LN2_LO = 1.90821492927058770002e-10;
    const double INV_LN2 = 1.44269504088896338700e+00;
    if (x != x)
        return x;
    if (x > 709.78)
        return (double)INFINITY;
    if (x < -745.2)
        return 0.0;
    const double kd = x * INV_LN2;
    const int k = (int)(kd < 0 ? kd - 0.5 : kd + 0.5);
    const double r = (x - k * LN2_HI) - k * LN2_LO; /* |r| <= ~0.347 */
    double p = 1.0 / 87178291200.0;
    p = p * r + 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 1.0 / 2.0;
    p = p * r + 1.0;
    p = p * r + 1.0;
    /* 2^e for -1022 <= e <= 1023 from its bits; two steps at the ends of the range */
    const int e1 = k < -1021 ? k + 600 : k > 1023 ? k - 1 : k;
    const uint64_t b1 = (uint64_t)(e1 + 1023) << 52;
    double s1;
    memcpy(&s1, &b1, 8);
    if (k < -1021) {
        const uint64_t b2 = (uint64_t)(-600 + 1023) << 52;
        double s2;
        memcpy(&s2, &b2, 8);
        return p * s1 * s2;
    }
    if (k > 1023)
        return p * s1 * 2.0;
    return p * s1;
}

GATE_HD static inline float det_expf_inline(float x)
{
    return (float)det_exp_inline((double)x);
}

/* splitmix64: advance *state and return the next 64 well-mixed bits (the one seedable PRNG of
 * gate: token streams, sampled sweeps, tests). */
static inline uint64_t det_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

double det_exp(double x);                        /* e^x; +inf above ~709.78, 0 far below */
float det_expf(float x);                         /* (float)det_exp(x) */
double det_log(double x);                        /* natural log, x > 0 */
void det_sincos(double x, double *s, double *c); /* |x| < 1e6 */
float det_silu(float z);                         /* z / (1 + e^-z) in float */

#ifdef __cplusplus
}
#endif
#endif
