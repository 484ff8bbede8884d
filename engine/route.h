/* route.h — MoE routing, defined once: softmax over the router logits, top-k on the
 * probabilities, renormalization of the selected weights. Every backend's host side calls
 * route_select(); the CUDA kernel mirrors it and is diffed against it.
 * Facts: ../shared/FACTS.md §6. Start reading: route_select().
 */
#ifndef GATE_ROUTE_H
#define GATE_ROUTE_H

#include <stdint.h>

#include "base/detmath.h"
#include "base/hd.h"
#include "faults/fault.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The clamp llama.cpp applies to the sum of the selected weights before dividing. */
#define ROUTE_MIN_WEIGHT_SUM 6.103515625e-5f

struct route_result {
    float gap;        /* router logit of the k-th minus the (k+1)-th expert (0 when k == X) */
    float kth_logit;  /* router logit of the k-th expert */
    float k1th_logit; /* router logit of the (k+1)-th expert (= kth_logit when k == X) */
    int n_faults;     /* routing faults applied at this (layer, pos) */
};

/* Route one token.
 * logits (n_expert): router outputs; probs (n_expert): scratch, receives the softmax.
 * ids (k), w (k): selected experts, slot 0 = highest probability (ties: lower id first), and
 * their weights, renormalized to sum 1 when norm_w (sum clamped at ROUTE_MIN_WEIGHT_SUM).
 * Faults in `faults` covering (layer, pos) are then applied — the one place they act.
 * faults may be NULL. */
struct route_result route_select(const float *logits, float *probs, int n_expert, int k, int norm_w,
                                 const struct fault_set *faults, int layer, int pos, int32_t *ids,
                                 float *w);

/* The route-tie replay (issue 22 §6, oracles/parity.c): route one token to the expert set
 * `force` (k ids) instead of its own top-k, when that set is a near tie under these logits.
 * The deficit is the best logit left out of force minus the worst logit in it: <= 0 when force
 * is a top-k, small when it differs from one only at a near tie, +Inf when force is not k
 * distinct ids in [0, n_expert). When force is the set ids already holds, nothing changes and
 * NAN is returned. Otherwise, when deficit < tol, ids and w become force in route_select's
 * slot order (highest probability first, lowest id on ties) with its weights (probs of those
 * experts, renormalized as route_select does when norm_w); else ids and w are left alone.
 * Returns the deficit. probs: route_select's softmax for this token. */
float route_force(const float *logits, const float *probs, int n_expert, int k, int norm_w,
                  const int32_t *force, float tol, int32_t *ids, float *w);

/* The selected weights renormalized to sum 1 (the sum clamped at ROUTE_MIN_WEIGHT_SUM), as
 * llama.cpp does: route_select's and route_force's one definition. */
GATE_HD static inline void route_renorm_inline(float *w, int k)
{
    float s = 0.0f;
    for (int j = 0; j < k; j++)
        s += w[j];
    if (s < ROUTE_MIN_WEIGHT_SUM)
        s = ROUTE_MIN_WEIGHT_SUM;
    for (int j = 0; j < k; j++)
        w[j] /= s;
}

/* route_select() itself, inline for both compilers: the CUDA routing kernel runs this very
 * function (built with --fmad=false), so host and device route identically. Softmax sums in
 * double with det_expf; top-k by k selection passes (highest probability, lowest id on ties). */
GATE_HD static inline struct route_result
route_select_inline(const float *logits, float *probs, int n_expert, int k, int norm_w,
                    const struct fault_set *faults, int layer, int pos, int32_t *ids, float *w)
{
    struct route_result res = {0.0f, 0.0f, 0.0f, 0};
    float max = logits[0];
    for (int e = 1; e < n_expert; e++)
        if (logits[e] > max)
            max = logits[e];
    double sum = 0.0;
    for (int e = 0; e < n_expert; e++) {
        probs[e] = det_expf_inline(logits[e] - max);
        sum += probs[e];
    }
    const float inv = (float)(1.0 / sum);
    for (int e = 0; e < n_expert; e++)
        probs[e] *= inv;
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
    if (norm_w)
        route_renorm_inline(w, k);
    res.n_faults = fault_apply_route_inline(faults, layer, pos, probs, n_expert, k, ids, w);
    return res;
}

#ifdef __cplusplus
}
#endif
#endif
