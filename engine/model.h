/* model.h — a Qwen3 / Qwen3-MoE model bound to its GGUF file: hyperparameters from metadata
 * only, every tensor bound by name with its shape checked.
 *
 * Invariants after model_load() succeeds: the architecture is qwen3 or qwen3moe; head_dim is
 * attention.key_length (never n_embd / n_head); every required tensor exists with exactly the
 * shape the hyperparameters imply and a type gate can dequantize; expert e of a 3-D expert
 * tensor is the e-th slab (base + e * stride, no repacking). Weights stay in the mapping.
 * Facts: ../shared/FACTS.md §2–3, §6. Start reading: struct model, then model_load().
 */
#ifndef GATE_MODEL_H
#define GATE_MODEL_H

#include <stdint.h>

#include "base/err.h"
#include "gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

enum model_arch {
    MODEL_ARCH_QWEN3 = 0,
    MODEL_ARCH_QWEN3MOE = 1,
};

struct model_hparams {
    enum model_arch arch;
    uint32_t n_vocab;     /* token_embd rows */
    uint32_t n_ctx_train; /* context_length */
    uint32_t n_embd;      /* E: hidden size */
    uint32_t n_layer;
    uint32_t n_head;        /* nh */
    uint32_t n_head_kv;     /* nkv; nh % nkv == 0 */
    uint32_t head_dim;      /* hd: attention.key_length (= value_length) */
    uint32_t n_ff;          /* dense FFN width (qwen3) */
    uint32_t n_expert;      /* X (qwen3moe) */
    uint32_t n_expert_used; /* k (qwen3moe) */
    uint32_t n_ff_exp;      /* Fe: expert FFN width (qwen3moe) */
    float eps;              /* RMSNorm epsilon */
    float rope_base;        /* RoPE frequency base */
    int has_qk_norm;        /* per-head Q/K RMSNorm (attn_q_norm / attn_k_norm): set by the
                               architecture's binding; ask model_has_qk_norm() */
};

/* One weight as stored: `rows` rows of `cols` elements (cols = ne[0], contiguous), each row
 * row_bytes long. 3-D expert tensors have rows = ne[1] * ne[2]; model_expert() slices one. */
struct model_weight {
    const char *name; /* borrowed from the gguf file */
    int type;         /* enum quant_type */
    int64_t cols;
    int64_t rows;
    size_t row_bytes;
    const uint8_t *data;
};

struct model_layer {
    struct model_weight attn_norm; /* (E) */
    struct model_weight wq;        /* (nh*hd rows, E cols) */
    struct model_weight wk;        /* (nkv*hd, E) */
    struct model_weight wv;        /* (nkv*hd, E) */
    struct model_weight wo;        /* (E, nh*hd) */
    struct model_weight q_norm;    /* (hd) shared by all query heads */
    struct model_weight k_norm;    /* (hd) shared by all kv heads */
    struct model_weight ffn_norm;  /* (E) */
    /* qwen3 */
    struct model_weight ffn_gate; /* (F, E) */
    struct model_weight ffn_up;   /* (F, E) */
    struct model_weight ffn_down; /* (E, F) */
    /* qwen3moe */
    struct model_weight gate_inp;  /* router (X, E) */
    struct model_weight gate_exps; /* X slabs of (Fe, E) */
    struct model_weight up_exps;   /* X slabs of (Fe, E) */
    struct model_weight down_exps; /* X slabs of (E, Fe) */
};

struct model {
    struct gguf_file *gguf; /* owned */
    struct model_hparams hp;
    struct model_weight tok_embd;    /* (V, E): row t = embedding of token t */
    struct model_weight output_norm; /* (E) */
    struct model_weight output;      /* (V, E): output.weight, or tok_embd when tied */
    int tied;                        /* 1 when output.weight is absent */
    struct model_layer *layers;      /* n_layer, owned */
    char sha256[65]; /* the file's SHA-256 when loaded through a pin (model_load_pinned), else "":
                      * what the judge cache (oracles/judgecache.h) keys a model by */
};

/* Open path, validate it as a qwen3 / qwen3moe model and bind every tensor.
 * Errors name the file and the key or tensor, with expected and actual shapes. */
int model_load(struct model **out, const char *path, struct gate_err *err);

/* Same from an open descriptor (a regular file; see gguf_open_fd()): the model maps the bytes
 * of the file fd refers to, never re-opening name, which is for messages only. fd stays the
 * caller's: the model holds its own mapping, so fd may be closed right after. */
int model_load_fd(struct model **out, int fd, const char *name, struct gate_err *err);

/* Same from a pinned file (engine/pin.h): the model takes over the pinned private copy
 * (pin_take), so the bytes it runs are exactly the bytes pin_open() hashed, whatever is written
 * to the file afterwards. p keeps its descriptor and name (pin_close() it as usual). */
struct pinned;
int model_load_pinned(struct model **out, struct pinned *p, struct gate_err *err);

/* Bind an already opened file; takes ownership of f (closed on failure too). */
int model_from_gguf(struct model **out, struct gguf_file *f, struct gate_err *err);

void model_free(struct model *m);

/* The e-th expert slab of a 3-D expert weight, as a 2-D weight (no copy). */
struct model_weight model_expert(const struct model_weight *w, uint32_t n_expert, uint32_t e);

/* Pointer to row r of w. */
static inline const void *model_row(const struct model_weight *w, int64_t r)
{
    return w->data + (size_t)r * w->row_bytes;
}

const char *model_arch_name(enum model_arch a);

/* Capabilities: code asks these, never the architecture's name, so a third architecture is its
 * binding in model.c plus its forward. MoE is hp.n_expert > 0. model_has_qk_norm: 1 when every
 * layer's q_norm / k_norm (head_dim) is bound and the forward applies it (qwen3, qwen3moe);
 * the skip_qk_norm fault applies only then. */
int model_has_qk_norm(const struct model *m);

#ifdef __cplusplus
}
#endif
#endif
