/* route.c — see route.h: the out-of-line entry point of the one routing definition. */
#include "route.h"

struct route_result route_select(const float *logits, float *probs, int n_expert, int k, int norm_w,
                                 const struct fault_set *faults, int layer, int pos, int32_t *ids,
                                 float *w)
{
    return route_select_inline(logits, probs, n_expert, k, norm_w, faults, layer, pos, ids, w);
}
