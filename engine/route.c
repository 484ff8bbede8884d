/* route.c — see route.h: the out-of-line entry point of the one routing definition. */
#include "route.h"

#include <math.h>

struct route_result route_select(const float *logits, float *probs, int n_expert, int k, int norm_w,
                                 const struct fault_set *faults, int layer, int pos, int32_t *ids,
                                 float *w)
{
    return route_select_inline(logits, probs, n_expert, k, norm_w, faults, layer, pos, ids, w);
}

float route_force(const float *logits, const float *probs, int n_expert, int k, int norm_w,
                  const int32_t *force, float tol, int32_t *ids, float *w)
{
    int same = 1;
    for (int i = 0; i < k; i++) {
        if (force[i] < 0 || force[i] >= n_expert)
            return INFINITY;
        int in_ids = 0;
        for (int j = 0; j < k; j++) {
            if (j < i && force[j] == force[i])
                return INFINITY; /* a repeated id */
            in_ids |= ids[j] == force[i];
        }
        same &= in_ids;
    }
    if (same)
        return NAN;
    float worst_in = INFINITY, best_out = -INFINITY;
    for (int e = 0; e < n_expert; e++) {
        int in = 0;
        for (int i = 0; i < k; i++)
            in |= force[i] == e;
        if (in && logits[e] < worst_in)
            worst_in = logits[e];
        if (!in && logits[e] > best_out)
            best_out = logits[e];
    }
    const float deficit = best_out - worst_in; /* -Inf when k == n_expert: never differs */
    if (!(deficit < tol))
        return deficit;
    /* route_select's order and weights over the forced set */
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < k; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++)
                taken |= ids[q] == force[i];
            if (!taken && (best < 0 || probs[force[i]] > probs[best] ||
                           (probs[force[i]] == probs[best] && force[i] < best)))
                best = force[i];
        }
        ids[j] = best;
        w[j] = probs[best];
    }
    if (norm_w)
        route_renorm_inline(w, k);
    return deficit;
}
