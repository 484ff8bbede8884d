/* compare.c — see compare.h. Sums run in double; every element is looked at once, in order. */
#include "oracles/compare.h"

#include <math.h>
#include <stdio.h>

struct compare_stats compare_floats(const float *got, const float *want, int64_t n, double atol,
                                    double rtol)
{
    struct compare_stats s = {0.0, 0.0, 0.0, -1, 0};
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double g = got[i], w = want[i];
        if (!isfinite(g) || !isfinite(w)) {
            s.n_nonfinite++;
            if (s.first_bad < 0)
                s.first_bad = i;
            continue;
        }
        const double d = fabs(g - w);
        num += d * d;
        den += w * w;
        if (d > s.max_abs)
            s.max_abs = d;
        const double r = d / fmax(fabs(w), 1e-30);
        if (r > s.max_rel)
            s.max_rel = r;
        if (d > atol + rtol * fabs(w) && s.first_bad < 0)
            s.first_bad = i;
    }
    s.nmse = den > 0.0 ? num / den : num;
    return s;
}

int compare_pass(const struct compare_stats *s, double max_nmse)
{
    return s->n_nonfinite == 0 && s->first_bad < 0 && s->nmse <= max_nmse;
}

const char *compare_describe(const struct compare_stats *s, const float *got, const float *want,
                             double max_nmse, char *buf, size_t size)
{
    int o = 0;
    if (s->first_bad >= 0)
        o = snprintf(buf, size, "first bad index %lld (got %.9g, want %.9g), ",
                     (long long)s->first_bad, (double)got[s->first_bad],
                     (double)want[s->first_bad]);
    else
        o = snprintf(buf, size, "no element out of tolerance, ");
    if (o >= 0 && (size_t)o < size)
        snprintf(buf + o, size - (size_t)o,
                 "max abs err %.3g, max rel err %.3g, NMSE %.3g (limit %.3g), %lld non-finite",
                 s->max_abs, s->max_rel, s->nmse, max_nmse, (long long)s->n_nonfinite);
    return buf;
}
