/* model.c — binds a GGUF file to struct model (see model.h for the invariants).
 *
 * Hyperparameters come from metadata only; every tensor's shape is compared with what they
 * imply, and a mismatch names the tensor, the expected and the actual shape. This is where
 * the "head_dim = hidden / heads" failure of DESIGN.md is made impossible.
 */
#include "model.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pin.h"
#include "quant.h"

const char *model_arch_name(enum model_arch a)
{
    return a == MODEL_ARCH_QWEN3MOE ? "qwen3moe" : "qwen3";
}

int model_has_qk_norm(const struct model *m)
{
    return m->hp.has_qk_norm;
}

/* Read {arch}.suffix as UINT32; absent -> *out = def (or an error when required). */
static int get_u32(const struct gguf_file *f, const char *arch, const char *suffix, int required,
                   uint32_t def, uint32_t *out, struct gate_err *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) {
        if (required)
            return err_set(err, ERR_INPUT, "%s: required key '%s' is missing", f->path, key);
        *out = def;
        return 0;
    }
    if (kv->type == GGUF_TYPE_ARRAY)
        return err_set(err, ERR_INPUT,
                       "%s: key '%s' is a per-layer array; gate supports only"
                       " one value for all layers",
                       f->path, key);
    return gguf_get_u32(f, key, out, err);
}

static int get_f32(const struct gguf_file *f, const char *arch, const char *suffix, int required,
                   float def, float *out, struct gate_err *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!gguf_find_kv(f, key)) {
        if (required)
            return err_set(err, ERR_INPUT, "%s: required key '%s' is missing", f->path, key);
        *out = def;
        return 0;
    }
    return gguf_get_f32(f, key, out, err);
}

static int load_hparams(const struct gguf_file *f, struct model_hparams *hp, struct gate_err *err)
{
    int rc = 0;
    char *arch = NULL;
    if ((rc = gguf_get_str(f, "general.architecture", &arch, err)))
        return rc;
    if (!strcmp(arch, "qwen3"))
        hp->arch = MODEL_ARCH_QWEN3;
    else if (!strcmp(arch, "qwen3moe"))
        hp->arch = MODEL_ARCH_QWEN3MOE;
    else {
        rc = err_set(err, ERR_INPUT,
                     "%s: architecture '%s' is not supported (supported: qwen3,"
                     " qwen3moe)",
                     f->path, arch);
        goto out;
    }
    hp->has_qk_norm = 1; /* both Qwen3 architectures normalize Q and K per head */
    uint32_t key_len, val_len, n_rot;
    if ((rc = get_u32(f, arch, "context_length", 1, 0, &hp->n_ctx_train, err)) ||
        (rc = get_u32(f, arch, "embedding_length", 1, 0, &hp->n_embd, err)) ||
        (rc = get_u32(f, arch, "block_count", 1, 0, &hp->n_layer, err)) ||
        (rc = get_u32(f, arch, "attention.head_count", 1, 0, &hp->n_head, err)) ||
        (rc = get_u32(f, arch, "attention.head_count_kv", 0, hp->n_head, &hp->n_head_kv, err)) ||
        (rc = get_f32(f, arch, "attention.layer_norm_rms_epsilon", 1, 0, &hp->eps, err)) ||
        (rc = get_f32(f, arch, "rope.freq_base", 0, 10000.0f, &hp->rope_base, err)))
        goto out;
    if (hp->n_embd == 0 || hp->n_layer == 0 || hp->n_head == 0 || hp->n_head_kv == 0) {
        rc = err_set(err, ERR_INPUT,
                     "%s: embedding_length, block_count, head_count and"
                     " head_count_kv must be > 0 (got %" PRIu32 ", %" PRIu32 ", %" PRIu32
                     ", %" PRIu32 ")",
                     f->path, hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv);
        goto out;
    }
    if (hp->n_head % hp->n_head_kv != 0) {
        rc = err_set(err, ERR_INPUT,
                     "%s: head_count %" PRIu32 " is not a multiple of"
                     " head_count_kv %" PRIu32,
                     f->path, hp->n_head, hp->n_head_kv);
        goto out;
    }
    /* head_dim defaults to n_embd / n_head only when the file says nothing (FACTS.md §2) */
    uint32_t def_hd = hp->n_embd / hp->n_head;
    if ((rc = get_u32(f, arch, "attention.key_length", 0, def_hd, &key_len, err)) ||
        (rc = get_u32(f, arch, "attention.value_length", 0, key_len, &val_len, err)) ||
        (rc = get_u32(f, arch, "rope.dimension_count", 0, key_len, &n_rot, err)))
        goto out;
    if (key_len == 0 || key_len % 2 != 0 || val_len != key_len || n_rot != key_len) {
        rc = err_set(err, ERR_INPUT,
                     "%s: key_length %" PRIu32 ", value_length %" PRIu32
                     " and rope.dimension_count %" PRIu32 " must be equal, even and > 0 for"
                     " %s",
                     f->path, key_len, val_len, n_rot, arch);
        goto out;
    }
    hp->head_dim = key_len;
    if (!(hp->eps > 0.0f && hp->eps < 1.0f) || !(hp->rope_base > 1.0f)) {
        rc = err_set(err, ERR_INPUT,
                     "%s: layer_norm_rms_epsilon %g or rope.freq_base %g out of"
                     " range",
                     f->path, (double)hp->eps, (double)hp->rope_base);
        goto out;
    }
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (gguf_find_kv(f, key)) {
        char *st = NULL;
        float factor = 0;
        if ((rc = gguf_get_str(f, key, &st, err)))
            goto out;
        rc = get_f32(f, arch, "rope.scaling.factor", 0, 0.0f, &factor, err);
        int plain = !rc && (!strcmp(st, "none") ||
                            (!strcmp(st, "linear") && (factor == 0.0f || factor == 1.0f)));
        if (!rc && !plain)
            rc = err_set(err, ERR_INPUT,
                         "%s: RoPE scaling '%s' (factor %g) is not supported"
                         " by gate's reference twin",
                         f->path, st, (double)factor);
        free(st);
        if (rc)
            goto out;
    }
    if (hp->arch == MODEL_ARCH_QWEN3) {
        if ((rc = get_u32(f, arch, "feed_forward_length", 1, 0, &hp->n_ff, err)))
            goto out;
        if (hp->n_ff == 0) {
            rc = err_set(err, ERR_INPUT, "%s: feed_forward_length is 0", f->path);
            goto out;
        }
    } else {
        uint32_t n_ff = 0;
        if ((rc = get_u32(f, arch, "expert_count", 1, 0, &hp->n_expert, err)) ||
            (rc = get_u32(f, arch, "expert_used_count", 1, 0, &hp->n_expert_used, err)) ||
            (rc = get_u32(f, arch, "feed_forward_length", 0, 0, &n_ff, err)))
            goto out;
        if (hp->n_expert == 0 || hp->n_expert > 512 || hp->n_expert_used == 0 ||
            hp->n_expert_used > hp->n_expert) {
            rc = err_set(err, ERR_INPUT,
                         "%s: expert_count %" PRIu32 " / expert_used_count %" PRIu32
                         " invalid (need 0 < used <= count <= 512)",
                         f->path, hp->n_expert, hp->n_expert_used);
            goto out;
        }
        if ((rc = get_u32(f, arch, "expert_feed_forward_length", 0, n_ff / hp->n_expert_used,
                          &hp->n_ff_exp, err)))
            goto out;
        if (hp->n_ff_exp == 0) {
            rc = err_set(err, ERR_INPUT,
                         "%s: expert_feed_forward_length is missing and"
                         " feed_forward_length gives no fallback",
                         f->path);
            goto out;
        }
    }
out:
    free(arch);
    return rc;
}

static void fmt_shape(char *buf, size_t n, const int64_t *ne, int nd)
{
    int k = snprintf(buf, n, "[");
    for (int i = 0; i < nd && k < (int)n; i++)
        k += snprintf(buf + k, n - (size_t)k, i ? ", %" PRId64 : "%" PRId64, ne[i]);
    if (k < (int)n)
        snprintf(buf + k, n - (size_t)k, "]");
}

/* Bind tensor `name` with GGUF shape want[0..nd-1]; `what` explains the shape in words. */
static int bind(const struct gguf_file *f, const char *name, int nd, const int64_t *want,
                const char *what, int optional, struct model_weight *w, struct gate_err *err)
{
    const struct gguf_tensor *t = gguf_find_tensor(f, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (optional)
            return 0;
        char ws[96];
        fmt_shape(ws, sizeof ws, want, nd);
        return err_set(err, ERR_INPUT, "%s: tensor '%s' is missing (expected shape %s = %s)",
                       f->path, name, ws, what);
    }
    int ok = (int)t->n_dims == nd;
    for (int i = 0; i < nd && ok; i++)
        ok = t->ne[i] == want[i];
    if (!ok) {
        char ws[96], gs[96];
        fmt_shape(ws, sizeof ws, want, nd);
        fmt_shape(gs, sizeof gs, t->ne, (int)t->n_dims);
        return err_set(err, ERR_INPUT, "%s: tensor '%s' has shape %s, expected %s = %s", f->path,
                       name, gs, ws, what);
    }
    if (!quant_supported(t->type))
        return err_set(err, ERR_INPUT,
                       "%s: tensor '%s' has type %s, which gate cannot"
                       " dequantize (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,"
                       " Q4_K, Q5_K, Q6_K)",
                       f->path, name, quant_name(t->type));
    w->name = t->name;
    w->type = t->type;
    w->cols = t->ne[0];
    w->rows = t->ne[1] * t->ne[2] * t->ne[3];
    w->row_bytes = quant_row_bytes(t->type, t->ne[0]);
    w->data = t->data;
    return 0;
}

static int bind_layer(const struct gguf_file *f, const struct model_hparams *hp, uint32_t il,
                      struct model_layer *l, struct gate_err *err)
{
    const int64_t E = hp->n_embd, hd = hp->head_dim;
    const int64_t qd = (int64_t)hp->n_head * hd, kvd = (int64_t)hp->n_head_kv * hd;
    char n[GGUF_MAX_NAME + 16];
    int rc = 0;
#define BIND(field, suffix, nd, what, ...)                                                         \
    do {                                                                                           \
        const int64_t want_[] = {__VA_ARGS__};                                                     \
        snprintf(n, sizeof n, "blk.%" PRIu32 ".%s", il, suffix);                                   \
        if ((rc = bind(f, n, nd, want_, what, 0, &l->field, err)))                                 \
            return rc;                                                                             \
    } while (0)
    BIND(attn_norm, "attn_norm.weight", 1, "[n_embd]", E);
    BIND(wq, "attn_q.weight", 2, "[n_embd, n_head*head_dim]", E, qd);
    BIND(wk, "attn_k.weight", 2, "[n_embd, n_head_kv*head_dim]", E, kvd);
    BIND(wv, "attn_v.weight", 2, "[n_embd, n_head_kv*head_dim]", E, kvd);
    BIND(wo, "attn_output.weight", 2, "[n_head*head_dim, n_embd]", qd, E);
    if (hp->has_qk_norm) {
        BIND(q_norm, "attn_q_norm.weight", 1, "[head_dim]", hd);
        BIND(k_norm, "attn_k_norm.weight", 1, "[head_dim]", hd);
    }
    BIND(ffn_norm, "ffn_norm.weight", 1, "[n_embd]", E);
    if (hp->arch == MODEL_ARCH_QWEN3) {
        const int64_t F = hp->n_ff;
        BIND(ffn_gate, "ffn_gate.weight", 2, "[n_embd, n_ff]", E, F);
        BIND(ffn_up, "ffn_up.weight", 2, "[n_embd, n_ff]", E, F);
        BIND(ffn_down, "ffn_down.weight", 2, "[n_ff, n_embd]", F, E);
    } else {
        const int64_t X = hp->n_expert, Fe = hp->n_ff_exp;
        BIND(gate_inp, "ffn_gate_inp.weight", 2, "[n_embd, n_expert]", E, X);
        BIND(gate_exps, "ffn_gate_exps.weight", 3, "[n_embd, n_ff_exp, n_expert]", E, Fe, X);
        BIND(up_exps, "ffn_up_exps.weight", 3, "[n_embd, n_ff_exp, n_expert]", E, Fe, X);
        BIND(down_exps, "ffn_down_exps.weight", 3, "[n_ff_exp, n_embd, n_expert]", Fe, E, X);
    }
#undef BIND
    return 0;
}

int model_from_gguf(struct model **out, struct gguf_file *f, struct gate_err *err)
{
    int rc = 0;
    *out = NULL;
    struct model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(f);
        return err_set(err, ERR_ENV, "out of memory for the model");
    }
    m->gguf = f;
    struct model_hparams *hp = &m->hp;
    if ((rc = load_hparams(f, hp, err)))
        goto fail;
    const struct gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if (!emb || emb->n_dims != 2) {
        rc = err_set(err, ERR_INPUT, "%s: tensor 'token_embd.weight' is %s", f->path,
                     emb ? "not 2-D (expected [n_embd, n_vocab])" : "missing");
        goto fail;
    }
    hp->n_vocab = (uint32_t)emb->ne[1];
    const struct gguf_kv *toks = gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (toks && toks->type == GGUF_TYPE_ARRAY && toks->n != hp->n_vocab) {
        rc = err_set(err, ERR_INPUT,
                     "%s: tokenizer.ggml.tokens has %" PRIu64 " entries but"
                     " token_embd.weight has %" PRIu32 " rows",
                     f->path, toks->n, hp->n_vocab);
        goto fail;
    }
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    const int64_t ev[] = {E, V}, e1[] = {E};
    if ((rc = bind(f, "token_embd.weight", 2, ev, "[n_embd, n_vocab]", 0, &m->tok_embd, err)) ||
        (rc = bind(f, "output_norm.weight", 1, e1, "[n_embd]", 0, &m->output_norm, err)) ||
        (rc = bind(f, "output.weight", 2, ev, "[n_embd, n_vocab]", 1, &m->output, err)))
        goto fail;
    if (!m->output.data) {
        m->tied = 1;
        m->output = m->tok_embd;
    }
    m->layers = calloc(hp->n_layer, sizeof *m->layers);
    if (!m->layers) {
        rc = err_set(err, ERR_ENV, "out of memory for the model's layer table");
        goto fail;
    }
    for (uint32_t il = 0; il < hp->n_layer; il++)
        if ((rc = bind_layer(f, hp, il, &m->layers[il], err)))
            goto fail;
    *out = m;
    return 0;
fail:
    model_free(m);
    return rc;
}

int model_load(struct model **out, const char *path, struct gate_err *err)
{
    struct gguf_file *f = NULL;
    *out = NULL;
    int rc = gguf_open(&f, path, 0, err);
    if (rc)
        return rc;
    return model_from_gguf(out, f, err);
}

int model_load_pinned(struct model **out, struct pinned *p, struct gate_err *err)
{
    struct gguf_file *f = NULL;
    void *data;
    size_t size;
    *out = NULL;
    const char *name = p->name ? p->name : "pinned model";
    if (pin_take(p, &data, &size) != 0)
        return err_set(err, ERR_ENV, "'%s': the pinned bytes were already taken", name);
    int rc = gguf_open_owned(&f, data, size, name, 0, err);
    if (rc)
        return rc;
    if (!(rc = model_from_gguf(out, f, err)))
        snprintf((*out)->sha256, sizeof(*out)->sha256, "%s", p->sha256);
    return rc;
}

int model_load_fd(struct model **out, int fd, const char *name, struct gate_err *err)
{
    struct gguf_file *f = NULL;
    *out = NULL;
    int rc = gguf_open_fd(&f, fd, name, 0, err);
    if (rc)
        return rc;
    return model_from_gguf(out, f, err);
}

void model_free(struct model *m)
{
    if (!m)
        return;
    free(m->layers);
    gguf_close(m->gguf);
    free(m);
}

struct model_weight model_expert(const struct model_weight *w, uint32_t n_expert, uint32_t e)
{
    struct model_weight s = *w;
    s.rows = w->rows / n_expert;
    s.data = w->data + (size_t)e * (size_t)s.rows * w->row_bytes;
    return s;
}
