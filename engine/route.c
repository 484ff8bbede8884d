/* route.c — see route.h. Softmax accumulates in double and uses det_expf, so the routing of
 * the reference twin is identical on every machine. */
#include "route.h"

#include "detmath.h"

struct route_result route_select(const float *logits, float *probs, int n_expert, int k,
                                 int norm_w, const struct fault_set *faults, int layer, int pos,
                                 int32_t *ids, float *w)
{
    struct route_result res = {0};
    float max = logits[0];
    for (int e = 1; e < n_expert; e++)
        if (logits[e] > max)
            max = logits[e];
    double sum = 0.0;
    for (int e = 0; e < n_expert; e++) {
        probs[e] = det_expf(logits[e] - max);
        sum += probs[e];
    }
    const float inv = (float)(1.0 / sum);
    for (int e = 0; e < n_expert; e++)
        probs[e] *= inv;
    /* top-k by selection: k passes, each taking the highest remaining (lowest id on ties) */
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n_expert; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++)
                taken |= ids[i] == e;
            if (!taken && (best < 0 || probs[e] > probs[best]))
                best = e;
        }
        ids[j] = best;
        w[j] = probs[best];
    }
    res.kth_logit = logits[ids[k - 1]];
    res.k1th_logit = res.kth_logit;
    if (k < n_expert) {
        int next = -1;
        for (int e = 0; e < n_expert; e++) {
            int taken = 0;
            for (int i = 0; i < k; i++)
                taken |= ids[i] == e;
            if (!taken && (next < 0 || logits[e] > logits[next]))
                next = e;
        }
        res.k1th_logit = logits[next];
    }
    res.gap = res.kth_logit - res.k1th_logit;
    if (norm_w) {
        float s = 0.0f;
        for (int j = 0; j < k; j++)
            s += w[j];
        if (s < ROUTE_MIN_WEIGHT_SUM)
            s = ROUTE_MIN_WEIGHT_SUM;
        for (int j = 0; j < k; j++)
            w[j] /= s;
    }
    res.n_faults = fault_apply_route(faults, layer, pos, probs, n_expert, k, ids, w);
    return res;
}
