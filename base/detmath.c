/* detmath.c — see detmath.h. Range reduction with constants split so that the products with
 * the reduction integer are exact, then Taylor polynomials evaluated by Horner's rule. */
#include "base/detmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ln 2 split: LN2_HI has its low 32 bits zero so k * LN2_HI is exact for |k| < 2^20. */
static const double LN2_HI = 6.93147180369123816490e-01;
static const double LN2_LO = 1.90821492927058770002e-10;

double det_exp(double x)
{
    return det_exp_inline(x);
}

float det_expf(float x)
{
    return det_expf_inline(x);
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
