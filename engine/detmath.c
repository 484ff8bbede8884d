/* detmath.c — see detmath.h. Range reduction with constants split so that the products with
 * the reduction integer are exact, then Taylor polynomials evaluated by Horner's rule. */
#include "detmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ln 2 split: LN2_HI has its low 32 bits zero so k * LN2_HI is exact for |k| < 2^20. */
static const double LN2_HI = 6.93147180369123816490e-01;
static const double LN2_LO = 1.90821492927058770002e-10;
static const double INV_LN2 = 1.44269504088896338700e+00;

static double pow2i(int k)
{
    /* 2^k for -1022 <= k <= 1023, built from bits */
    uint64_t bits = (uint64_t)(k + 1023) << 52;
    double d;
    memcpy(&d, &bits, 8);
    return d;
}

double det_exp(double x)
{
    if (x != x)
        return x;
    if (x > 709.78)
        return INFINITY;
    if (x < -745.2)
        return 0.0;
    double kd = x * INV_LN2;
    int k = (int)(kd < 0 ? kd - 0.5 : kd + 0.5);
    double r = (x - k * LN2_HI) - k * LN2_LO; /* |r| <= ~0.347 */
    /* Taylor to r^14: truncation below 5e-18 relative */
    double p = 1.0 / 87178291200.0;
    static const double inv_fact[] = {
        1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
        1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,      1.0 / 720.0,
        1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,         1.0 / 2.0,
        1.0,                1.0};
    for (int i = 0; i < 14; i++)
        p = p * r + inv_fact[i];
    if (k < -1021) /* subnormal result: scale in two steps */
        return p * pow2i(k + 600) * pow2i(-600);
    if (k > 1023)
        return p * pow2i(k - 1) * 2.0;
    return p * pow2i(k);
}

float det_expf(float x)
{
    return (float)det_exp((double)x);
}

double det_log(double x)
{
    if (!(x > 0))
        return x == 0 ? -INFINITY : NAN;
    if (isinf(x))
        return x;
    int e;
    double m = frexp(x, &e); /* exact: x = m * 2^e, m in [0.5, 1) */
    /* log(m) by Newton on exp(y) = m, from the series of 2 atanh((m-1)/(m+1)) */
    double s = (m - 1.0) / (m + 1.0), s2 = s * s, y = 0.0, term = s;
    for (int i = 1; i < 60; i += 2) {
        y += term / i;
        term *= s2;
    }
    y *= 2.0;
    for (int it = 0; it < 2; it++)
        y = y - 1.0 + m * det_exp(-y);
    return y + e * LN2_HI + e * LN2_LO;
}

void det_sincos(double x, double *s, double *c)
{
    /* pi/2 in three parts; P1 and P2 have trailing zero bits so k * P1, k * P2 are exact */
    static const double P1 = 1.57079632673412561417e+00;
    static const double P2 = 6.07710050630396597660e-11;
    static const double P3 = 2.02226624879595063154e-21;
    static const double INV_PIO2 = 6.36619772367581382433e-01;
    double kd = x * INV_PIO2;
    int64_t k = (int64_t)(kd < 0 ? kd - 0.5 : kd + 0.5);
    double r = ((x - (double)k * P1) - (double)k * P2) - (double)k * P3; /* |r| <= pi/4 */
    double r2 = r * r;
    /* sin r = r (1 - r^2/3! + ...), cos r = 1 - r^2/2! + ...; to r^19 / r^20 */
    double ps = 0.0, pc = 0.0;
    for (int n = 9; n >= 1; n--) {
        ps = (1.0 - ps) * r2 / ((2.0 * n) * (2.0 * n + 1.0));
        pc = (1.0 - pc) * r2 / ((2.0 * n - 1.0) * (2.0 * n));
    }
    double sr = r * (1.0 - ps), cr = 1.0 - pc;
    switch ((int)(k & 3)) {
    case 0:
        *s = sr, *c = cr;
        break;
    case 1:
        *s = cr, *c = -sr;
        break;
    case 2:
        *s = -sr, *c = -cr;
        break;
    default:
        *s = -cr, *c = sr;
        break;
    }
}

float det_silu(float z)
{
    return z / (1.0f + det_expf(-z));
}
