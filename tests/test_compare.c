/* test_compare.c — oracles/compare.c, the one float comparison of `gate selftest` and the tests:
 * NaN / Inf on either side is a failure at its index (never a comparison that silently
 * evaluates false), first bad index, max absolute / relative error, NMSE, the verdict.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "oracles/compare.h"

Test(compare, equal_arrays_pass_with_zero_error)
{
    const float a[] = {1.0f, -2.0f, 0.5f};
    const struct compare_stats s = compare_floats(a, a, 3, 0.0, 0.0);
    cr_expect_eq(s.first_bad, -1);
    cr_expect_eq(s.n_nonfinite, 0);
    cr_expect(s.nmse == 0.0 && s.max_abs == 0.0 && s.max_rel == 0.0);
    cr_expect(compare_pass(&s, 0.0));
}

Test(compare, reports_first_bad_index_errors_and_nmse)
{
    const float want[] = {1.0f, 2.0f, 4.0f, 0.0f};
    const float got[] = {1.0f, 2.5f, 4.0f, 0.25f};
    const struct compare_stats s = compare_floats(got, want, 4, 0.1, 0.0);
    cr_expect_eq(s.first_bad, 1);
    cr_expect_float_eq(s.max_abs, 0.5, 1e-12);
    cr_expect_float_eq(s.max_rel, 0.25 / 1e-30, 1e-3 / 1e-30); /* want 0: relative to 1e-30 */
    cr_expect_float_eq(s.nmse, (0.25 + 0.0625) / 21.0, 1e-12);
    cr_expect(!compare_pass(&s, 1.0), "an element out of tolerance fails whatever the NMSE");
    char buf[320];
    compare_describe(&s, got, want, 1.0, buf, sizeof buf);
    cr_expect(strstr(buf, "first bad index 1 (got 2.5, want 2)"), "%s", buf);
    cr_expect(strstr(buf, "NMSE 0.0149 (limit 1)"), "%s", buf);
}

/* The selftest's old comparison looked at the device side only: a NaN in the twin's output gave
 * first bad index -1 and an NMSE of NaN (a pass test that happened to evaluate false). */
Test(compare, a_nonfinite_value_on_either_side_fails_at_its_index)
{
    const float fine[] = {1.0f, 2.0f, 3.0f};
    const float nan_at_1[] = {1.0f, NAN, 3.0f};
    const float inf_at_2[] = {1.0f, 2.0f, INFINITY};
    struct compare_stats s = compare_floats(fine, nan_at_1, 3, 1e9, 1e9);
    cr_expect_eq(s.first_bad, 1, "NaN expected: first bad %lld", (long long)s.first_bad);
    cr_expect_eq(s.n_nonfinite, 1);
    cr_expect(isfinite(s.nmse) && s.nmse == 0.0, "NaN must not reach the sums: %g", s.nmse);
    cr_expect(!compare_pass(&s, 1e9));
    s = compare_floats(inf_at_2, fine, 3, 1e9, 1e9);
    cr_expect_eq(s.first_bad, 2);
    cr_expect_eq(s.n_nonfinite, 1);
    cr_expect(!compare_pass(&s, 1e9));
    s = compare_floats(nan_at_1, nan_at_1, 3, 0.0, 0.0);
    cr_expect(!compare_pass(&s, 0.0), "NaN equals nothing, not even NaN");
}

Test(compare, nmse_limit_decides_when_every_element_is_within_tolerance)
{
    const float want[] = {1.0f, 1.0f};
    const float got[] = {1.1f, 1.0f};
    const struct compare_stats s = compare_floats(got, want, 2, 0.2, 0.0);
    cr_expect_eq(s.first_bad, -1);
    cr_expect(compare_pass(&s, 1e-2));
    cr_expect(!compare_pass(&s, 1e-3));
}

/* A running worst in which a NaN stays: a finite value after it does not replace it (the plain
 * `if (!(x <= m)) m = x` does), whichever side the NaN came in on */
Test(compare, a_nan_in_a_running_worst_stays_whatever_follows)
{
    double mx = 0.0, mn = 1.0;
    const double xs[] = {0.5, NAN, 0.25, 2.0, -1.0};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        mx = compare_worst_max(mx, xs[i]);
        mn = compare_worst_min(mn, xs[i]);
        if (i >= 1) {
            cr_expect(isnan(mx), "max after %zu values: %g", i + 1, mx);
            cr_expect(isnan(mn), "min after %zu values: %g", i + 1, mn);
        }
    }
    cr_expect_eq(compare_worst_max(0.5, 2.0), 2.0);
    cr_expect_eq(compare_worst_max(2.0, 0.5), 2.0);
    cr_expect_eq(compare_worst_min(0.5, 2.0), 0.5);
    cr_expect_eq(compare_worst_min(2.0, 0.5), 0.5);
    cr_expect(isnan(compare_worst_max(NAN, 1.0)) && isnan(compare_worst_min(1.0, NAN)));
    cr_expect(isinf(compare_worst_max(0.0, INFINITY)));
}
