/* fault.h — fault specs and their single point of application.
 *
 * A fault is compiled into every build and is off unless a run asks for it (DESIGN.md settled
 * question 4). Routing faults act in exactly one place, fault_apply_route(), called by
 * route_select() — every backend's host-side routing and the device kernel mirror it.
 * skip_qk_norm is queried by the attention code through fault_skips_qk_norm().
 * Start reading: struct fault_spec.
 */
#ifndef GATE_FAULT_H
#define GATE_FAULT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/err.h"

#ifdef __cplusplus
extern "C" {
#endif

enum fault_kind {
    FAULT_WRONG_EXPERT = 0,   /* the expert at rank r replaced by the best unselected one */
    FAULT_DROPPED_EXPERT = 1, /* the expert at rank r removed, the rest renormalized */
    FAULT_UNIFORM_WEIGHTS = 2, /* every selected expert weighted 1/k */
    FAULT_SKIP_QK_NORM = 3,   /* the per-head Q/K RMSNorm is not applied */
    FAULT_KIND_COUNT = 4,
};

#define FAULT_MAX 16

struct fault_spec {
    enum fault_kind kind;
    int rank;                 /* wrong/dropped: which selected slot (0 = top); default 0 */
    int layer_lo, layer_hi;   /* inclusive layer range; default all (0, INT32_MAX) */
    int pos_lo, pos_hi;       /* inclusive position range; default all */
};

struct fault_set {
    int n;
    struct fault_spec f[FAULT_MAX];
};

const char *fault_kind_name(enum fault_kind k);

/* 1 when the fault needs an MoE model (the routing faults). */
int fault_is_routing(enum fault_kind k);

/* Parse "KIND[:key=value,...]" with keys rank, layers=A-B (or A), positions=A-B (or A), e.g.
 * "wrong_expert:rank=1,layers=0-3". Unknown kinds or keys are ERR_INPUT naming them. */
int fault_parse(const char *text, struct fault_spec *out, struct gate_err *err);

/* Append a spec; ERR_INPUT when the set is full. */
int fault_set_add(struct fault_set *s, const struct fault_spec *f, struct gate_err *err);

/* Does fault f apply at (layer, pos)? */
int fault_applies(const struct fault_spec *f, int layer, int pos);

/* 1 when a skip_qk_norm fault in s covers (layer, pos). s may be NULL. */
int fault_skips_qk_norm(const struct fault_set *s, int layer, int pos);

/* The single point where routing faults act. Given the router's probabilities over all
 * n_expert experts and the clean selection (ids/w, k slots, slot 0 = highest probability,
 * weights already renormalized), rewrite ids/w for every routing fault in s covering
 * (layer, pos). Returns the number of faults applied. s may be NULL. */
int fault_apply_route(const struct fault_set *s, int layer, int pos, const float *probs,
                      int n_expert, int k, int32_t *ids, float *w);

/* Check every spec in s against a model before a run: a routing fault on a dense model
 * (is_moe 0) cannot fire, a layer scope that names a layer >= n_layer does not exist, and a rank
 * >= n_expert_used selects no slot; each is ERR_INPUT naming the fault. The default scopes
 * ("all layers", "all positions") are always valid. s may be NULL (nothing to check). */
int fault_validate(const struct fault_set *s, int n_layer, int is_moe, int n_expert_used,
                   struct gate_err *err);

/* The spec as fault_parse() reads it, e.g. "wrong_expert:rank=1,layers=0-3,positions=5"
 * (default options omitted). Always NUL-terminates buf (n > 0). */
void fault_format(const struct fault_spec *f, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
