/* fault.c — see fault.h: the fault kind table and everything derived from it. */
#include "faults/fault.h"

#include <limits.h>
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
};

const struct fault_kind_def *fault_kind_def(enum fault_kind k)
{
    return ((int)k >= 0 && k < FAULT_KIND_COUNT) ? &FAULT_KINDS[k] : NULL;
}

const char *fault_kind_name(enum fault_kind k)
{
    const struct fault_kind_def *d = fault_kind_def(k);
    return d ? d->name : "unknown";
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

static int parse_range(const char *v, int *lo, int *hi)
{
    char *end;
    long a = strtol(v, &end, 10);
    if (end == v || a < 0 || a > INT_MAX)
        return -1;
    long b = a;
    if (*end == '-') {
        const char *s = end + 1;
        b = strtol(s, &end, 10);
        if (end == s || b < a || b > INT_MAX)
            return -1;
    }
    if (*end)
        return -1;
    *lo = (int)a;
    *hi = (int)b;
    return 0;
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
    for (char *tok = opts ? strtok(opts, ",") : NULL; tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return err_set(err, ERR_INPUT, "fault '%s': option '%s' is not key=value", text, tok);
        *eq++ = '\0';
        int lo, hi;
        if (!strcmp(tok, "rank") && FAULT_KINDS[kind].takes_rank) {
            if (parse_range(eq, &lo, &hi) || lo != hi)
                return err_set(err, ERR_INPUT, "fault '%s': rank '%s' is not a number >= 0", text,
                               eq);
            out->rank = lo;
        } else if (!strcmp(tok, "layers")) {
            if (parse_range(eq, &out->layer_lo, &out->layer_hi))
                return err_set(err, ERR_INPUT, "fault '%s': layers '%s' is not N or A-B", text, eq);
        } else if (!strcmp(tok, "positions")) {
            if (parse_range(eq, &out->pos_lo, &out->pos_hi))
                return err_set(err, ERR_INPUT, "fault '%s': positions '%s' is not N or A-B", text,
                               eq);
        } else {
            return err_set(err, ERR_INPUT, "fault '%s': unknown option '%s' for %s", text, tok,
                           FAULT_KINDS[kind].name);
        }
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
    at = put_range(buf, n, at, "layers", f->layer_lo, f->layer_hi, &first);
    put_range(buf, n, at, "positions", f->pos_lo, f->pos_hi, &first);
}
