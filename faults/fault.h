/* fault.h — fault specs and their single point of application.
 *
 * A fault is compiled into every build and is off unless a run asks for it (DESIGN.md settled
 * question 4). Routing faults act in exactly one place, fault_apply_route(), called by
 * route_select() — every backend's host-side routing and the device kernel mirror it.
 * skip_qk_norm is queried by the attention code through fault_skips_qk_norm_inline() (host and
 * device). The kinds are one table (struct fault_kind_def); a struct fault_set is plain data
 * passed to kernels by value.
 * Start reading: struct fault_spec.
 */
#ifndef GATE_FAULT_H
#define GATE_FAULT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

enum fault_kind {
    FAULT_WRONG_EXPERT = 0,    /* the expert at rank r replaced by the best unselected one */
    FAULT_DROPPED_EXPERT = 1,  /* the expert at rank r removed, the rest renormalized */
    FAULT_UNIFORM_WEIGHTS = 2, /* every selected expert weighted 1/k */
    FAULT_SKIP_QK_NORM = 3,    /* the per-head Q/K RMSNorm is not applied */
    FAULT_KIND_COUNT = 4,
};

#define FAULT_MAX 16

struct fault_spec {
    enum fault_kind kind;
    int rank;               /* wrong/dropped: which selected slot (0 = top); default 0 */
    int layer_lo, layer_hi; /* inclusive layer range; default all (0, INT32_MAX) */
    int pos_lo, pos_hi;     /* inclusive position range; default all */
};

struct fault_set {
    int n;
    struct fault_spec f[FAULT_MAX];
};

/* One row per fault kind (faults/fault.c FAULT_KINDS): parsing, error text, the ladder's
 * architecture check and the falsify defaults are all derived from it. Adding a kind is one
 * enum value, one row, and its action (fault_apply_route_inline or a query like
 * fault_skips_qk_norm_inline at the point it acts). */
struct fault_kind_def {
    const char *name;    /* as written in ladders and --fault: "wrong_expert" */
    int routing;         /* acts in route_select: needs an MoE model */
    int takes_rank;      /* accepts rank=N (which selected slot) */
    int default_moe;     /* in the default falsify set of an MoE cell */
    int default_dense;   /* in the default falsify set of a dense cell */
    const char *summary; /* one line for help and docs */
};

/* The row of kind k; NULL when k is out of range. */
const struct fault_kind_def *fault_kind_def(enum fault_kind k);

/* The kind's name, "unknown" when out of range. */
const char *fault_kind_name(enum fault_kind k);

/* 1 when the fault needs an MoE model (the routing faults). */
int fault_is_routing(enum fault_kind k);

/* The default falsify set (settled question 4): every kind whose row is in the default set for
 * an MoE (moe 1) or dense (moe 0) model, in table order, unscoped. */
void fault_default_set(int moe, struct fault_set *out);

/* Parse "KIND[:key=value,...]" with keys rank, layers=A-B (or A), positions=A-B (or A), e.g.
 * "wrong_expert:rank=1,layers=0-3". Unknown kinds or keys are ERR_INPUT naming them. */
int fault_parse(const char *text, struct fault_spec *out, struct gate_err *err);

/* Append a spec; ERR_INPUT when the set is full. */
int fault_set_add(struct fault_set *s, const struct fault_spec *f, struct gate_err *err);

/* Does fault f apply at (layer, pos)? */
int fault_applies(const struct fault_spec *f, int layer, int pos);

GATE_HD static inline int fault_applies_inline(const struct fault_spec *f, int layer, int pos)
{
    return layer >= f->layer_lo && layer <= f->layer_hi && pos >= f->pos_lo && pos <= f->pos_hi;
}

/* fault_apply_route() (below), inline for both compilers: the CUDA routing kernel applies the
 * routing faults through this very function. */
GATE_HD static inline int fault_apply_route_inline(const struct fault_set *s, int layer, int pos,
                                                   const float *probs, int n_expert, int k,
                                                   int32_t *ids, float *w)
{
    int applied = 0;
    for (int i = 0; s && i < s->n; i++) {
        const struct fault_spec *f = &s->f[i];
        if ((f->kind != FAULT_WRONG_EXPERT && f->kind != FAULT_DROPPED_EXPERT &&
             f->kind != FAULT_UNIFORM_WEIGHTS) ||
            !fault_applies_inline(f, layer, pos))
            continue;
        const int r = f->rank < k ? f->rank : k - 1;
        if (f->kind == FAULT_WRONG_EXPERT) {
            /* the best-scoring expert not currently selected (lowest id wins a tie) */
            int best = -1;
            for (int e = 0; e < n_expert; e++) {
                int taken = 0;
                for (int j = 0; j < k; j++)
                    taken |= ids[j] == e;
                if (!taken && (best < 0 || probs[e] > probs[best]))
                    best = e;
            }
            if (best < 0)
                continue; /* every expert is selected: nothing to swap in */
            ids[r] = best;
        } else if (f->kind == FAULT_DROPPED_EXPERT) {
            if (k < 2)
                w[r] = 0.0f;
            else {
                float sum = 0.0f;
                for (int j = 0; j < k; j++)
                    if (j != r)
                        sum += w[j];
                for (int j = 0; j < k; j++)
                    w[j] = (j == r || sum <= 0.0f) ? 0.0f : w[j] / sum;
            }
        } else {
            for (int j = 0; j < k; j++)
                w[j] = 1.0f / (float)k;
        }
        applied++;
    }
    return applied;
}

/* 1 when a skip_qk_norm fault in s covers (layer, pos). s may be NULL. */
int fault_skips_qk_norm(const struct fault_set *s, int layer, int pos);

/* fault_skips_qk_norm(), inline for both compilers: the twin's attention and the CUDA Q/K norm
 * kernel both ask this very function. */
GATE_HD static inline int fault_skips_qk_norm_inline(const struct fault_set *s, int layer, int pos)
{
    for (int i = 0; s && i < s->n; i++)
        if (s->f[i].kind == FAULT_SKIP_QK_NORM && fault_applies_inline(&s->f[i], layer, pos))
            return 1;
    return 0;
}

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
