/* backend.h — the one interface every engine backend implements (ref, cuda, later cpu).
 *
 * A backend holds a model on its device with a KV cache. forward() evaluates a run of tokens
 * at positions pos0 .. pos0+n-1, where pos0 must equal the number of positions already in the
 * cache, and returns the logits of every position. The harness never knows which backend it
 * holds; it asks each what actually ran (struct backend_info), because a backend that was asked
 * for cuda and ran on the CPU has failed (DESIGN.md: no silent fallback).
 * Like calm's `transformer.forward = forward_cuda`: the backend is a table of function pointers.
 * Start reading: struct backend_ops.
 */
#ifndef GATE_BACKEND_H
#define GATE_BACKEND_H

#include <stdint.h>

#include "err.h"
#include "faults/fault.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct backend_config {
    int n_threads;   /* CPU worker threads (0 = number of cores) */
    int n_ctx;       /* KV cache positions (0 = min(model context, 4096)) */
    int n_batch;     /* most tokens per forward pass (0 = 512); longer runs are chunked */
    const struct fault_set *faults; /* borrowed for the backend's lifetime; NULL = none */
};

/* What actually ran, measured by the backend while running (settled question 7). */
struct backend_info {
    char backend[16];   /* "ref", "cuda", ... */
    char device[128];   /* "cpu: <model name>" or the GPU's name */
    uint64_t forwards;  /* forward() calls */
    uint64_t tokens;    /* tokens evaluated */
    uint64_t kernel_launches; /* device kernel launches (0 on CPU backends) */
    uint64_t device_bytes;    /* bytes moved host <-> device */
};

/* Per-layer observations for localization; all arrays caller-owned, sized for n_tok tokens of
 * the next forward call. A NULL array is not recorded. */
struct backend_taps {
    float *hidden;       /* (n_layer, n_tok, n_embd): residual stream after each layer */
    int32_t *experts;    /* (n_layer, n_tok, k): chosen experts, slot order (MoE) */
    float *expert_w;     /* (n_layer, n_tok, k): their weights (MoE) */
    float *router_kth;   /* (n_layer, n_tok): router logit of the k-th expert (MoE) */
    float *router_k1th;  /* (n_layer, n_tok): router logit of the (k+1)-th expert (MoE) */
};

struct backend;

struct backend_ops {
    const char *name;
    /* Bind the model (borrowed; must outlive the backend) and allocate everything forward()
     * needs: no allocation happens inside forward. */
    int (*open)(struct backend **out, const struct model *m, const struct backend_config *cfg,
                struct gate_err *err);
    /* tokens (n), logits out (n, n_vocab). pos0 must equal the cache length. */
    int (*forward)(struct backend *b, const int32_t *tokens, int n, int pos0, float *logits,
                   struct gate_err *err);
    /* Keep only the first n_pos cache positions (0 = reset). */
    int (*truncate)(struct backend *b, int n_pos, struct gate_err *err);
    /* Record taps during the next forward calls (NULL = stop). Borrowed until replaced. */
    void (*set_taps)(struct backend *b, const struct backend_taps *taps);
    void (*info)(const struct backend *b, struct backend_info *out);
    void (*close)(struct backend *b);
};

struct backend {
    const struct backend_ops *ops;
    const struct model *model;
    int n_ctx;   /* cache capacity in positions */
    int n_past;  /* positions in the cache */
};

/* The backends this build has; NULL when the name is unknown or not compiled in. */
const struct backend_ops *backend_find(const char *name);

/* An observer called by backend_close() just before a backend is closed (its counters are final
 * then), so the harness can record what ran for every gate (oracles/mode.c's ran recorder). One
 * process-wide slot; NULL clears it. Not thread-safe: set it between gates, not during one. */
typedef void (*backend_close_fn)(void *ctx, const struct backend *b);
void backend_set_close_observer(backend_close_fn fn, void *ctx);

/* Convenience wrappers over ops (NULL-safe close). */
int backend_open(struct backend **out, const char *name, const struct model *m,
                 const struct backend_config *cfg, struct gate_err *err);
void backend_close(struct backend *b);

extern const struct backend_ops backend_ref_ops;

#ifdef __cplusplus
}
#endif
#endif
