/* fault.c — see fault.h. */
#include "faults/fault.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *NAMES[FAULT_KIND_COUNT] = {"wrong_expert", "dropped_expert",
                                              "uniform_weights", "skip_qk_norm"};

const char *fault_kind_name(enum fault_kind k)
{
    return (k >= 0 && k < FAULT_KIND_COUNT) ? NAMES[k] : "unknown";
}

int fault_is_routing(enum fault_kind k)
{
    return k == FAULT_WRONG_EXPERT || k == FAULT_DROPPED_EXPERT || k == FAULT_UNIFORM_WEIGHTS;
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
        if (!strcmp(buf, NAMES[i]))
            kind = i;
    if (kind < 0)
        return err_set(err, ERR_INPUT, "unknown fault '%s' (known: wrong_expert, dropped_expert,"
                       " uniform_weights, skip_qk_norm)", buf);
    out->kind = (enum fault_kind)kind;
    for (char *tok = opts ? strtok(opts, ",") : NULL; tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return err_set(err, ERR_INPUT, "fault '%s': option '%s' is not key=value", text,
                           tok);
        *eq++ = '\0';
        int lo, hi;
        if (!strcmp(tok, "rank") && (kind == FAULT_WRONG_EXPERT || kind == FAULT_DROPPED_EXPERT)) {
            if (parse_range(eq, &lo, &hi) || lo != hi)
                return err_set(err, ERR_INPUT, "fault '%s': rank '%s' is not a number >= 0",
                               text, eq);
            out->rank = lo;
        } else if (!strcmp(tok, "layers")) {
            if (parse_range(eq, &out->layer_lo, &out->layer_hi))
                return err_set(err, ERR_INPUT, "fault '%s': layers '%s' is not N or A-B", text,
                               eq);
        } else if (!strcmp(tok, "positions")) {
            if (parse_range(eq, &out->pos_lo, &out->pos_hi))
                return err_set(err, ERR_INPUT, "fault '%s': positions '%s' is not N or A-B",
                               text, eq);
        } else {
            return err_set(err, ERR_INPUT, "fault '%s': unknown option '%s' for %s", text, tok,
                           NAMES[kind]);
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
    for (int i = 0; s && i < s->n; i++)
        if (s->f[i].kind == FAULT_SKIP_QK_NORM && fault_applies(&s->f[i], layer, pos))
            return 1;
    return 0;
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
            return err_set(err, ERR_INPUT, "fault '%s' cannot fire: it needs an MoE model and "
                           "this model is dense (no router)", name);
        if (f->layer_lo >= n_layer || (f->layer_hi != INT_MAX && f->layer_hi >= n_layer))
            return err_set(err, ERR_INPUT, "fault '%s': layer scope %d-%d does not exist (the "
                           "model has %d layers, 0-%d)", name, f->layer_lo, f->layer_hi,
                           n_layer, n_layer - 1);
        if (fault_is_routing(f->kind) && f->kind != FAULT_UNIFORM_WEIGHTS &&
            f->rank >= n_expert_used)
            return err_set(err, ERR_INPUT, "fault '%s': rank %d does not exist (the model "
                           "selects %d experts, ranks 0-%d)", name, f->rank, n_expert_used,
                           n_expert_used - 1);
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
