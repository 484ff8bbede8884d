/* route.h — MoE routing, defined once: softmax over the router logits, top-k on the
 * probabilities, renormalization of the selected weights. Every backend's host side calls
 * route_select(); the CUDA kernel mirrors it and is diffed against it.
 * Facts: ../shared/FACTS.md §6. Start reading: route_select().
 */
#ifndef GATE_ROUTE_H
#define GATE_ROUTE_H

#include <stdint.h>

#include "faults/fault.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The clamp llama.cpp applies to the sum of the selected weights before dividing. */
#define ROUTE_MIN_WEIGHT_SUM 6.103515625e-5f

struct route_result {
    float gap;       /* router logit of the k-th minus the (k+1)-th expert (0 when k == X) */
    float kth_logit; /* router logit of the k-th expert */
    float k1th_logit; /* router logit of the (k+1)-th expert (= kth_logit when k == X) */
    int n_faults;    /* routing faults applied at this (layer, pos) */
};

/* Route one token.
 * logits (n_expert): router outputs; probs (n_expert): scratch, receives the softmax.
 * ids (k), w (k): selected experts, slot 0 = highest probability (ties: lower id first), and
 * their weights, renormalized to sum 1 when norm_w (sum clamped at ROUTE_MIN_WEIGHT_SUM).
 * Faults in `faults` covering (layer, pos) are then applied — the one place they act.
 * faults may be NULL. */
struct route_result route_select(const float *logits, float *probs, int n_expert, int k,
                                 int norm_w, const struct fault_set *faults, int layer, int pos,
                                 int32_t *ids, float *w);

#ifdef __cplusplus
}
#endif
#endif
