/* test_detmath.c — base/detmath.c on its own: each function against libm over its range (the
 * header's "error far below a float ULP"), the edges (NaN, overflow, underflow into subnormals,
 * log of 0, negatives and infinity), det_expf and det_silu bit for bit against the float rounding
 * of an accurate e^x, splitmix64 against its published sequence, and the bits of every function
 * over fixed inputs against a digest recorded once: the header's claim that results are the same
 * on every IEEE-754 machine (and in every build: the ASan build compiles detmath at -O1, the
 * normal one at -O3; the CI host and a GPU host are different CPUs).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/detmath.h"

/* |a - b| in units of the last place of b (double). */
static double ulps(double a, double b)
{
    if (a == b)
        return 0.0;
    return fabs(a - b) / (nextafter(fabs(b), INFINITY) - fabs(b));
}

Test(detmath, exp_is_within_one_ulp_of_libm_over_its_range)
{
    double worst = 0.0, at = 0.0;
    for (int i = 0; i <= 100000; i++) {
        const double x = -708.0 + (709.7 + 708.0) * i / 100000.0;
        const double u = ulps(det_exp(x), exp(x));
        if (u > worst)
            worst = u, at = x;
    }
    cr_expect_leq(worst, 1.0, "det_exp is %g ulps from exp at %.17g", worst, at);
    cr_expect_eq(det_exp(0.0), 1.0);
    cr_expect(isnan(det_exp(NAN)));
    cr_expect(isinf(det_exp(709.79)) && det_exp(709.79) > 0);
    cr_expect_eq(det_exp(-745.3), 0.0);
    /* the subnormal results come from the two-step scaling at the low end */
    for (double x = -745.0; x < -708.0; x += 0.37)
        cr_expect_leq(ulps(det_exp(x), exp(x)), 1.0, "x %.17g: %g vs %g", x, det_exp(x), exp(x));
    cr_expect_leq(ulps(det_exp(709.78), exp(709.78)), 1.0);
}

Test(detmath, expf_is_the_float_rounding_of_an_accurate_e_to_the_x)
{
    int n = 0;
    for (uint32_t bits = 0; bits < 0x80000000u; bits += 2053) {
        for (int sign = 0; sign < 2; sign++) {
            const uint32_t b = bits | (uint32_t)sign << 31;
            float x;
            memcpy(&x, &b, 4);
            if (!(fabsf(x) <= 88.0f))
                continue;
            const float want = (float)exp((double)x);
            cr_assert_eq(det_expf(x), want, "det_expf(%a) = %a, the rounding of e^x is %a", x,
                         det_expf(x), want);
            cr_assert_eq(det_expf_inline(x), det_expf(x));
            n++;
        }
    }
    cr_expect_gt(n, 500000, "only %d floats checked", n);
}

Test(detmath, log_matches_libm_and_is_the_inverse_of_exp)
{
    double worst = 0.0, at = 0.0;
    for (int i = 0; i <= 100000; i++) {
        const double x = pow(10.0, -300.0 + 600.0 * i / 100000.0);
        const double err = fabs(det_log(x) - log(x)) / fmax(1.0, fabs(log(x)));
        if (err > worst)
            worst = err, at = x;
    }
    /* absolute near 1 (where log is near 0), relative elsewhere: at most 2 ulps of 1 */
    cr_expect_leq(worst, 4.5e-16, "det_log is off by %g at %.17g", worst, at);
    for (double y = -700.0; y < 700.0; y += 3.7)
        cr_expect_leq(fabs(det_log(det_exp(y)) - y), 4.5e-16 * fmax(1.0, fabs(y)), "y %g", y);
    cr_expect(isinf(det_log(0.0)) && det_log(0.0) < 0);
    cr_expect(isnan(det_log(-1.0)));
    cr_expect(isnan(det_log(NAN)));
    cr_expect(isinf(det_log(INFINITY)) && det_log(INFINITY) > 0);
    cr_expect_leq(fabs(det_log(M_E) - 1.0), 2.3e-16);
    /* the RoPE base the twin takes the log of (engine/ref.c) */
    cr_expect_leq(ulps(det_log(1e6), log(1e6)), 1.0);
}

Test(detmath, sincos_matches_libm_below_one_million)
{
    double ws = 0.0, wc = 0.0, wn = 0.0;
    for (int i = 0; i <= 100000; i++) {
        const double x = -1e6 + 2e6 * i / 100000.0 + 0.123;
        double s, c;
        det_sincos(x, &s, &c);
        ws = fmax(ws, fabs(s - sin(x)));
        wc = fmax(wc, fabs(c - cos(x)));
        wn = fmax(wn, fabs(s * s + c * c - 1.0));
    }
    /* near multiples of pi/2, where the reduction loses most */
    for (int k = -2000; k <= 2000; k++) {
        const double x = k * (M_PI / 2);
        double s, c;
        det_sincos(x, &s, &c);
        ws = fmax(ws, fabs(s - sin(x)));
        wc = fmax(wc, fabs(c - cos(x)));
    }
    cr_expect_leq(ws, 4.5e-16, "sin off by %g", ws);
    cr_expect_leq(wc, 4.5e-16, "cos off by %g", wc);
    cr_expect_leq(wn, 1e-15, "sin^2 + cos^2 off by %g", wn);
    double s, c;
    det_sincos(0.0, &s, &c);
    cr_expect(s == 0.0 && c == 1.0, "sincos(0) = %g, %g", s, c);
}

Test(detmath, silu_is_z_over_one_plus_the_rounded_e_to_minus_z)
{
    for (int i = 0; i <= 200000; i++) {
        const float z = -60.0f + 120.0f * (float)i / 200000.0f;
        const float want = z / (1.0f + (float)exp(-(double)z));
        cr_assert_eq(det_silu(z), want, "det_silu(%a) = %a, want %a", z, det_silu(z), want);
    }
}

Test(detmath, splitmix64_is_the_published_sequence)
{
    /* Steele, Lea and Flood's SplitMix64 (Java's SplittableRandom), seed 0 */
    uint64_t st = 0;
    cr_expect_eq(det_splitmix64(&st), 0xe220a8397b1dcdafULL);
    cr_expect_eq(det_splitmix64(&st), 0x6e789e6aa1b965f4ULL);
    cr_expect_eq(det_splitmix64(&st), 0x06c45d188009454fULL);
    cr_expect_eq(st, 3 * 0x9E3779B97F4A7C15ULL);
}

/* FNV-1a 64 over the bytes of a value. */
static void mix(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        *h ^= b[i];
        *h *= 0x100000001b3ULL;
    }
}

Test(detmath, every_result_is_bit_identical_to_the_recorded_digest)
{
    uint64_t h = 0xcbf29ce484222325ULL, st = 42;
    for (int i = 0; i < 20000; i++) {
        const double u = (double)(det_splitmix64(&st) >> 11) * 0x1.0p-53; /* [0, 1) */
        /* inputs from IEEE basic operations and ldexp only (exact): no libm in the digest */
        const double xe = -740.0 + 1450.0 * u;
        const double xl = ldexp(1.0 + u, (int)(det_splitmix64(&st) % 2001) - 1000);
        const double xs = -1e6 + 2e6 * u;
        const float xf = (float)(-88.0 + 176.0 * u), xz = (float)(-40.0 + 80.0 * u);
        const double e = det_exp(xe), l = det_log(xl);
        const float ef = det_expf(xf), z = det_silu(xz);
        double s, c;
        det_sincos(xs, &s, &c);
        mix(&h, &e, 8);
        mix(&h, &l, 8);
        mix(&h, &s, 8);
        mix(&h, &c, 8);
        mix(&h, &ef, 4);
        mix(&h, &z, 4);
    }
    /* recorded at this commit on x86-64 (gcc, -O3 and the ASan build's -O1, -ffp-contract=off);
     * a change here changes the reference twin's numbers, so every golden with them */
    cr_expect_eq(h, 0x2fa5f89c514b6a9dULL, "detmath's bits changed: digest 0x%016llx",
                 (unsigned long long)h);
}
