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

#ifdef __cplusplus
extern "C" {
#endif

double det_exp(double x);                          /* e^x; +inf above ~709.78, 0 far below */
float det_expf(float x);                           /* (float)det_exp(x) */
double det_log(double x);                          /* natural log, x > 0 */
void det_sincos(double x, double *s, double *c);   /* |x| < 1e6 */
float det_silu(float z);                           /* z / (1 + e^-z) in float */

#ifdef __cplusplus
}
#endif
#endif
