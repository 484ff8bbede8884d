/* fault.c — see fault.h: the fault kind table and everything derived from it. */
#include "faults/fault.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Indexed by enum fault_kind. */
static const struct fault_kind_def FAULT_KINDS[FAULT_KIND_COUNT] = {
    [FAULT_WRONG_EXPERT] = {"wrong_expert", 1, 1, 1, 0,
                            "the expert at rank r replaced by the best unselected one"},
    [FAULT_DROPPED_EXPERT] = {"dropped_expert", 1, 1, 1, 0,
                              "the expert at rank r removed, the rest renormalized"},
    [FAULT_UNIFORM_WEIGHTS] = {"uniform_weights", 1, 0, 1, 0, "every selected expert weighted 1/k"},
    [FAULT_SKIP_QK_NORM] = {"skip_qk_norm", 0, 0, 1, 1, "the per-head Q/K RMSNorm is not applied"},
    /* the numeric faults act inside the engine under test (issue 22 §3); not in the default
     * lists: the falsify gate's power probes inject scale on every matmul tensor by itself */
    [FAULT_SCALE] = {"scale", 0, 0, 0, 0,
                     "one weight tensor's product times factor (tensor=blk.N.NAME or NAME)", 1, 1,
                     1.01f, 0.0f},
    [FAULT_KV_CORRUPT] = {"kv_corrupt", 0, 0, 0, 0,
                          "K and V entries stored at positions in scope times factor (0: lost)", 0,
                          1, 0.5f, 0.0f},
    [FAULT_ROPE_SHIFT] = {"rope_shift", 0, 0, 0, 0,
                          "RoPE base times factor for Q and K at positions in scope", 0, 1, 0.5f,
                          1e-6f},
    [FAULT_DROP_DIAG] = {"drop_diag", 0, 0, 0, 0,
                         "a query in scope does not attend to its own key (the diagonal)", 0, 0,
                         0.0f, 0.0f},
};

/* Indexed by enum fault_tensor: the GGUF name after blk.N. (output: the whole name), and
 * whether the tensor is in a dense (0) / MoE (1) model. */
static const struct {
    const char *name;
    int dense, moe;
} TENSORS[FAULT_T_COUNT] = {
    [FAULT_T_NONE] = {"", 0, 0},
    [FAULT_T_ATTN_Q] = {"attn_q", 1, 1},
    [FAULT_T_ATTN_K] = {"attn_k", 1, 1},
    [FAULT_T_ATTN_V] = {"attn_v", 1, 1},
    [FAULT_T_ATTN_OUTPUT] = {"attn_output", 1, 1},
    [FAULT_T_FFN_GATE] = {"ffn_gate", 1, 0},
    [FAULT_T_FFN_UP] = {"ffn_up", 1, 0},
    [FAULT_T_FFN_DOWN] = {"ffn_down", 1, 0},
    [FAULT_T_FFN_GATE_INP] = {"ffn_gate_inp", 0, 1},
    [FAULT_T_FFN_GATE_EXPS] = {"ffn_gate_exps", 0, 1},
    [FAULT_T_FFN_UP_EXPS] = {"ffn_up_exps", 0, 1},
    [FAULT_T_FFN_DOWN_EXPS] = {"ffn_down_exps", 0, 1},
    [FAULT_T_OUTPUT] = {"output", 1, 1},
};

const char *fault_tensor_name(int t)
{
    return t > 0 && t < FAULT_T_COUNT ? TENSORS[t].name : "?";
}

int fault_tensor_in_model(int t, int is_moe)
{
    return t > 0 && t < FAULT_T_COUNT && (is_moe ? TENSORS[t].moe : TENSORS[t].dense);
}

int fault_matmul_tensors(int is_moe, int *out)
{
    int n = 0;
    for (int t = 1; t < FAULT_T_COUNT; t++)
        if (fault_tensor_in_model(t, is_moe))
            out[n++] = t;
    return n;
}

int fault_power_tensors(int is_moe, int *out)
{
    int n = 0;
    for (int t = 1; t < FAULT_T_COUNT; t++)
        if (fault_tensor_in_model(t, is_moe) && t != FAULT_T_ATTN_Q && t != FAULT_T_ATTN_K &&
            t != FAULT_T_FFN_GATE_INP)
            out[n++] = t;
    return n;
}

static void tensors_list(char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int t = 1; t < FAULT_T_COUNT && at < n; t++) {
        int w = snprintf(buf + at, n - at, "%s%s", t > 1 ? ", " : "", TENSORS[t].name);
        at += w > 0 ? (size_t)w : 0;
    }
}

/* "blk.N.NAME" or "NAME" -> tensor and *layer (-1 when no blk. prefix); -1 when unknown. */
static int parse_tensor(const char *v, int *layer)
{
    *layer = -1;
    if (!strncmp(v, "blk.", 4)) {
        char *end;
        errno = 0;
        long l = strtol(v + 4, &end, 10);
        if (v[4] < '0' || v[4] > '9' || errno == ERANGE || *end != '.' || l > INT_MAX)
            return -1; /* digits only: no sign, space or base prefix */
        *layer = (int)l;
        v = end + 1;
    }
    for (int t = 1; t < FAULT_T_COUNT; t++)
        if (!strcmp(v, TENSORS[t].name))
            return (t == FAULT_T_OUTPUT && *layer >= 0) ? -1 : t;
    return -1;
}

const struct fault_kind_def *fault_kind_def(enum fault_kind k)
{
    return ((int)k >= 0 && k < FAULT_KIND_COUNT) ? &FAULT_KINDS[k] : NULL;
}

const char *fault_kind_name(enum fault_kind k)
{
    const struct fault_kind_def *d = fault_kind_def(k);
    return d ? d->name : "unknown";
}

int fault_kind_find(const char *name)
{
    for (int i = 0; name && i < FAULT_KIND_COUNT; i++)
        if (!strcmp(name, FAULT_KINDS[i].name))
            return i;
    return -1;
}

char *fault_kinds_text(unsigned mask, char *buf, size_t n)
{
    size_t at = 0;
    if (n)
        buf[0] = '\0';
    for (int i = 0; i < FAULT_KIND_COUNT && at < n; i++)
        if (mask & (1u << i)) {
            const int w = snprintf(buf + at, n - at, "%s%s", at ? ", " : "", FAULT_KINDS[i].name);
            at = w > 0 ? at + (size_t)w : at;
        }
    return buf;
}

int fault_is_routing(enum fault_kind k)
{
    const struct fault_kind_def *d = fault_kind_def(k);
    return d && d->routing;
}

void fault_default_set(int moe, struct fault_set *out)
{
    memset(out, 0, sizeof *out);
    for (int k = 0; k < FAULT_KIND_COUNT && out->n < FAULT_MAX; k++)
        if (moe ? FAULT_KINDS[k].default_moe : FAULT_KINDS[k].default_dense)
            out->f[out->n++] = (struct fault_spec){
                .kind = (enum fault_kind)k, .layer_hi = INT_MAX, .pos_hi = INT_MAX};
}

/* "wrong_expert, dropped_expert, ...": every kind, for error text. */
static void kinds_list(char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int k = 0; k < FAULT_KIND_COUNT && at < n; k++) {
        int w = snprintf(buf + at, n - at, "%s%s", k ? ", " : "", FAULT_KINDS[k].name);
        at += w > 0 ? (size_t)w : 0;
    }
}

/* "A", "A-B" or "A-" (A on) of whole decimal numbers, digits only (no sign, space or base
 * prefix). Returns 0, or why it is not one: RANGE_SYNTAX, RANGE_BIG (a number past INT_MAX),
 * RANGE_ORDER (B < A). */
enum { RANGE_SYNTAX = -1, RANGE_BIG = -2, RANGE_ORDER = -3 };

static int parse_num(const char *v, const char **end, long *out)
{
    if (*v < '0' || *v > '9')
        return RANGE_SYNTAX;
    char *e;
    errno = 0;
    const long x = strtol(v, &e, 10);
    *end = e;
    if (errno == ERANGE || x > INT_MAX)
        return RANGE_BIG;
    *out = x;
    return 0;
}

static int parse_range(const char *v, int *lo, int *hi)
{
    const char *end;
    long a, b;
    int rc = parse_num(v, &end, &a);
    if (rc)
        return rc;
    b = a;
    if (*end == '-' && end[1] == '\0') { /* "A-": from A on */
        b = INT_MAX;
        end++;
    } else if (*end == '-') {
        if ((rc = parse_num(end + 1, &end, &b)))
            return rc;
        if (b < a)
            return RANGE_ORDER;
    }
    if (*end)
        return RANGE_SYNTAX;
    *lo = (int)a;
    *hi = (int)b;
    return 0;
}

/* The reason parse_range gave, for a message about key's value v. */
static const char *range_why(int rc)
{
    return rc == RANGE_BIG     ? "a number is larger than 2147483647"
           : rc == RANGE_ORDER ? "the range ends before it starts"
                               : "whole numbers N, A-B or A- expected";
}

int fault_parse(const char *text, struct fault_spec *out, struct gate_err *err)
{
    char buf[256];
    if (strlen(text) >= sizeof buf)
        return err_set(err, ERR_INPUT, "fault '%.40s...' is too long", text);
    strcpy(buf, text);
    memset(out, 0, sizeof *out);
    out->layer_hi = INT_MAX;
    out->pos_hi = INT_MAX;
    char *opts = strchr(buf, ':');
    if (opts)
        *opts++ = '\0';
    int kind = -1;
    for (int i = 0; i < FAULT_KIND_COUNT; i++)
        if (!strcmp(buf, FAULT_KINDS[i].name))
            kind = i;
    if (kind < 0) {
        char known[160];
        kinds_list(known, sizeof known);
        return err_set(err, ERR_INPUT, "unknown fault '%s' (known: %s)", buf, known);
    }
    out->kind = (enum fault_kind)kind;
    const struct fault_kind_def *d = &FAULT_KINDS[kind];
    out->factor = d->takes_factor ? d->factor : 0.0f;
    int tensor_layer = -1, layers_given = 0;
    unsigned seen = 0;
    for (char *tok = opts ? strtok(opts, ",") : NULL; tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return err_set(err, ERR_INPUT, "fault '%s': option '%s' is not key=value", text, tok);
        *eq++ = '\0';
        /* each option once: a second value would silently win */
        static const char *const KEYS[] = {"rank", "layers", "tensor", "factor", "positions"};
        for (int i = 0; i < 5; i++)
            if (!strcmp(tok, KEYS[i]) && (seen & (1u << i)))
                return err_set(err, ERR_INPUT, "fault '%s': option '%s' is given twice", text, tok);
            else if (!strcmp(tok, KEYS[i]))
                seen |= 1u << i;
        int lo, hi;
        if (!strcmp(tok, "rank") && FAULT_KINDS[kind].takes_rank) {
            const int rc = parse_range(eq, &lo, &hi);
            if (rc || lo != hi)
                return err_set(err, ERR_INPUT, "fault '%s': rank '%s' is not a number >= 0 (%s)",
                               text, eq,
                               rc == RANGE_BIG ? range_why(rc)
                               : rc            ? "one whole number expected"
                                               : "one rank, not a range");
            out->rank = lo;
        } else if (!strcmp(tok, "layers")) {
            const int rc = parse_range(eq, &out->layer_lo, &out->layer_hi);
            if (rc)
                return err_set(err, ERR_INPUT, "fault '%s': layers '%s' is not N or A-B (%s)", text,
                               eq, range_why(rc));
            layers_given = 1;
        } else if (!strcmp(tok, "tensor") && d->takes_tensor) {
            if ((out->tensor = parse_tensor(eq, &tensor_layer)) < 0) {
                char known[256];
                tensors_list(known, sizeof known);
                return err_set(err, ERR_INPUT,
                               "fault '%s': unknown tensor '%s' (known: blk.N.NAME or NAME with"
                               " NAME one of %s; output has no blk.N.)",
                               text, eq, known);
            }
        } else if (!strcmp(tok, "factor") && d->takes_factor) {
            char *end;
            const double x = strtod(eq, &end);
            if (end == eq || *end || !isfinite(x) || x < d->factor_min || x > 1e6 || x == 1.0)
                return err_set(err, ERR_INPUT,
                               "fault '%s': factor '%s' is not a finite number in [%g, 1e6]"
                               " other than 1 (factor 1 changes nothing)",
                               text, eq, (double)d->factor_min);
            out->factor = (float)x;
        } else if (!strcmp(tok, "positions")) {
            const int rc = parse_range(eq, &out->pos_lo, &out->pos_hi);
            if (rc)
                return err_set(err, ERR_INPUT, "fault '%s': positions '%s' is not N or A-B (%s)",
                               text, eq, range_why(rc));
        } else {
            return err_set(err, ERR_INPUT, "fault '%s': unknown option '%s' for %s", text, tok,
                           FAULT_KINDS[kind].name);
        }
    }
    if (d->takes_tensor && out->tensor == FAULT_T_NONE)
        return err_set(err, ERR_INPUT,
                       "fault '%s': %s needs tensor=NAME (e.g. tensor=blk.3.ffn_down, or"
                       " tensor=ffn_down for every layer in scope)",
                       text, d->name);
    if (tensor_layer >= 0) {
        if (layers_given)
            return err_set(err, ERR_INPUT,
                           "fault '%s': tensor blk.%d.… names its layer; drop layers=", text,
                           tensor_layer);
        out->layer_lo = out->layer_hi = tensor_layer;
    }
    return 0;
}

int fault_set_add(struct fault_set *s, const struct fault_spec *f, struct gate_err *err)
{
    if (s->n >= FAULT_MAX)
        return err_set(err, ERR_INPUT, "too many faults (at most %d)", FAULT_MAX);
    s->f[s->n++] = *f;
    return 0;
}

int fault_applies(const struct fault_spec *f, int layer, int pos)
{
    return fault_applies_inline(f, layer, pos);
}

int fault_skips_qk_norm(const struct fault_set *s, int layer, int pos)
{
    return fault_skips_qk_norm_inline(s, layer, pos);
}

int fault_apply_route(const struct fault_set *s, int layer, int pos, const float *probs,
                      int n_expert, int k, int32_t *ids, float *w)
{
    return fault_apply_route_inline(s, layer, pos, probs, n_expert, k, ids, w);
}

int fault_validate(const struct fault_set *s, int n_layer, int is_moe, int n_expert_used,
                   struct gate_err *err)
{
    for (int i = 0; s && i < s->n; i++) {
        const struct fault_spec *f = &s->f[i];
        char name[128];
        fault_format(f, name, sizeof name);
        if (fault_is_routing(f->kind) && !is_moe)
            return err_set(err, ERR_INPUT,
                           "fault '%s' cannot fire: it needs an MoE model and "
                           "this model is dense (no router)",
                           name);
        if (f->layer_lo >= n_layer || (f->layer_hi != INT_MAX && f->layer_hi >= n_layer))
            return err_set(err, ERR_INPUT,
                           "fault '%s': layer scope %d-%d does not exist (the "
                           "model has %d layers, 0-%d)",
                           name, f->layer_lo, f->layer_hi, n_layer, n_layer - 1);
        if (f->kind == FAULT_SCALE && !fault_tensor_in_model(f->tensor, is_moe))
            return err_set(err, ERR_INPUT,
                           "fault '%s': tensor %s does not exist in this %s model (%s)", name,
                           fault_tensor_name(f->tensor), is_moe ? "MoE" : "dense",
                           is_moe ? "its FFN is ffn_*_exps with a router, ffn_gate_inp"
                                  : "no router, no experts");
        const struct fault_kind_def *d = fault_kind_def(f->kind);
        if (d && d->takes_rank && f->rank >= n_expert_used)
            return err_set(err, ERR_INPUT,
                           "fault '%s': rank %d does not exist (the model "
                           "selects %d experts, ranks 0-%d)",
                           name, f->rank, n_expert_used, n_expert_used - 1);
    }
    return 0;
}

static int put_range(char *buf, size_t n, int at, const char *key, int lo, int hi, int *first)
{
    if (at < 0 || (size_t)at >= n || (lo == 0 && hi == INT_MAX))
        return at;
    const char *sep = *first ? ":" : ",";
    *first = 0;
    if (lo == hi)
        return at + snprintf(buf + at, n - (size_t)at, "%s%s=%d", sep, key, lo);
    if (hi == INT_MAX)
        return at + snprintf(buf + at, n - (size_t)at, "%s%s=%d-", sep, key, lo);
    return at + snprintf(buf + at, n - (size_t)at, "%s%s=%d-%d", sep, key, lo, hi);
}

void fault_format(const struct fault_spec *f, char *buf, size_t n)
{
    int first = 1;
    int at = snprintf(buf, n, "%s", fault_kind_name(f->kind));
    if (f->rank && at >= 0 && (size_t)at < n) {
        at += snprintf(buf + at, n - (size_t)at, ":rank=%d", f->rank);
        first = 0;
    }
    if (f->kind == FAULT_SCALE && at >= 0 && (size_t)at < n) {
        at += snprintf(buf + at, n - (size_t)at, "%stensor=%s", first ? ":" : ",",
                       fault_tensor_name(f->tensor));
        first = 0;
    }
    at = put_range(buf, n, at, "layers", f->layer_lo, f->layer_hi, &first);
    at = put_range(buf, n, at, "positions", f->pos_lo, f->pos_hi, &first);
    const struct fault_kind_def *d = fault_kind_def(f->kind);
    if (d && d->takes_factor && f->factor != d->factor && at >= 0 && (size_t)at < n)
        snprintf(buf + at, n - (size_t)at, "%sfactor=%.9g", first ? ":" : ",", (double)f->factor);
}
