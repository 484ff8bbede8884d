/* cellkey.c — a cell's identity written, read, named and compared once (cellkey.h): the table of
 * identity settings, and every loop over it. Start reading: CELL_SETTINGS. */
#include "receipts/cellkey.h"

#include <stdio.h>
#include <string.h>

#include "engine/backend.h"

/* The backends whose row passes offers(name, arg, value), comma-separated, into list ("none"). */
static void offered_by(int (*offers)(const char *, int, const char *), int arg, const char *value,
                       char *list, size_t n)
{
    list[0] = '\0';
    for (int i = 0; i < backend_count(); i++)
        if (offers(backend_name(i), arg, value))
            snprintf(list + strlen(list), n - strlen(list), "%s%s", list[0] ? ", " : "",
                     backend_name(i));
    if (!list[0])
        snprintf(list, n, "none");
}

static int offers_kv(const char *backend, int unused, const char *value)
{
    (void)unused;
    (void)value; /* one non-default value: f16 */
    return backend_offers_kv_f16(backend);
}

static int kv_refuses(enum cell_setting_id s, const char *backend, const char *value, char *why,
                      size_t n)
{
    char list[96];
    if (offers_kv(backend, s, value))
        return 0;
    offered_by(offers_kv, s, value, list, sizeof list);
    snprintf(why, n,
             "offers no F16 KV cache (only %s do); an F16 cell is refused, never run as F32", list);
    return 1;
}

static int isa_refuses(enum cell_setting_id unused, const char *backend, const char *value,
                       char *why, size_t n)
{
    (void)unused;
    struct backend_invariants inv;
    backend_invariants(backend, &inv);
    for (const char *s = inv.isas; s && *s;) {
        const size_t len = strcspn(s, ",");
        if (len == strlen(value) && !strncmp(s, value, len))
            return 0;
        s += len + (s[len] == ',');
    }
    snprintf(why, n, "%s%s; an isa cell is refused, never run on another instruction set",
             inv.isas && *inv.isas ? "selects only among " : "has no selectable instruction set",
             inv.isas && *inv.isas ? inv.isas : "");
    return 1;
}

static int offers_prefill(const char *backend, int unused, const char *value)
{
    (void)unused;
    return backend_offers_prefill(backend, value);
}

static int prefill_refuses(enum cell_setting_id s, const char *backend, const char *value,
                           char *why, size_t n)
{
    char list[96];
    if (offers_prefill(backend, s, value))
        return 0;
    offered_by(offers_prefill, s, value, list, sizeof list);
    snprintf(why, n,
             "runs its batched projections in F32 only (%s offer %s); a 16-bit cell is refused,"
             " never run as F32",
             list, value);
    return 1;
}

/* A kernel generation (engine/backend.h, enum backend_knob; setting CELL_KNOB_FIRST + k is knob
 * k): offered when the backend's row lists the value for that knob (cuda: gemv v1,v2; route
 * v1,v2; attn v1,split; graph off,on). */
static int offers_knob(const char *backend, int k, const char *value)
{
    return backend_offers_knob(backend, (enum backend_knob)k, value);
}

static int knob_refuses(enum cell_setting_id s, const char *backend, const char *value, char *why,
                        size_t n)
{
    const int k = (int)s - CELL_KNOB_FIRST;
    if (offers_knob(backend, k, value))
        return 0;
    char list[96];
    offered_by(offers_knob, k, value, list, sizeof list);
    const char *has = backend_knob_values(backend, (enum backend_knob)k);
    snprintf(why, n, "%s (%s %s %s); a %s %s cell is refused, never run on another generation",
             has && *has ? "offers other generations only" : "has no kernel generations", list,
             strchr(list, ',') ? "offer" : "offers", value, BACKEND_KNOBS[k].key, value);
    if (has && *has)
        snprintf(why + strlen(why), n - strlen(why), " (it offers %s)", has);
    return 1;
}

/* The kernel-generation rows repeat the cuda row's knob values of engine/backend.c (its default
 * first); tests/test_cellkey.c checks that every backend's knob values are exactly these. */
const struct cell_setting CELL_SETTINGS[CELL_SETTING_COUNT] = {
    [CELL_KV] = {"kv", "f32", {"f16", NULL}, 1, "the KV cache type", "KV cache", kv_refuses},
    [CELL_ISA] = {"isa",
                  NULL,
                  {"portable", "avx2", "avx512", NULL},
                  0,
                  "the instruction set the subject runs",
                  "instruction set",
                  isa_refuses},
    [CELL_PREFILL] = {"prefill",
                      "f32",
                      {"f16", "bf16", NULL},
                      0,
                      "the batched projections' precision",
                      "batched projections' precision",
                      prefill_refuses},
    [CELL_GEMV] =
        {"gemv", "v1", {"v2", NULL}, 0, "the decode GEMV generation", "GEMV", knob_refuses},
    [CELL_ROUTE] =
        {"route", "v1", {"v2", NULL}, 0, "the MoE routing generation", "routing", knob_refuses},
    [CELL_ATTN] =
        {"attn", "v1", {"split", NULL}, 0, "the attention generation", "attention", knob_refuses},
    [CELL_GRAPH] = {"graph",
                    "off",
                    {"on", NULL},
                    0,
                    "the decode step as one device graph",
                    "decode graph",
                    knob_refuses},
};

static int n_values(const struct cell_setting *r)
{
    int i = 0;
    while (i < CELL_SETTING_MAX_VALUES && r->values[i])
        i++;
    return i + 1;
}

const char *cell_setting_name(enum cell_setting_id s, int i)
{
    const struct cell_setting *r = &CELL_SETTINGS[s];
    if (i == 0)
        return r->dflt ? r->dflt : "";
    return i > 0 && i < n_values(r) ? r->values[i - 1] : "";
}

const char *cell_variant_value(const struct cell_variant *v, enum cell_setting_id s)
{
    return v->at[s] ? cell_setting_name(s, v->at[s]) : "";
}

int cell_setting_parse(enum cell_setting_id s, const char *text, int ladder, unsigned char *i)
{
    const struct cell_setting *r = &CELL_SETTINGS[s];
    if (!text)
        return -1;
    if (r->dflt && (ladder || r->cell_has_default) && !strcmp(text, r->dflt)) {
        *i = 0;
        return 0;
    }
    for (int k = 1; k < n_values(r); k++)
        if (!strcmp(text, r->values[k - 1])) {
            *i = (unsigned char)k;
            return 0;
        }
    return -1;
}

const char *cell_setting_choices(enum cell_setting_id s, int ladder, int quoted, char *buf,
                                 size_t n)
{
    const struct cell_setting *r = &CELL_SETTINGS[s];
    const char *names[CELL_SETTING_MAX_VALUES + 1];
    int k = 0;
    if (r->dflt && (ladder || r->cell_has_default))
        names[k++] = r->dflt;
    for (int i = 1; i < n_values(r); i++)
        names[k++] = r->values[i - 1];
    buf[0] = '\0';
    for (int i = 0; i < k; i++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%s%s%s",
                 i == 0       ? ""
                 : i == k - 1 ? " or "
                              : ", ",
                 quoted ? "\"" : "", names[i], quoted ? "\"" : "");
    return buf;
}

unsigned cell_variant_count(void)
{
    unsigned c = 1;
    for (int s = 0; s < CELL_SETTING_COUNT; s++)
        c *= (unsigned)n_values(&CELL_SETTINGS[s]);
    return c;
}

unsigned cell_variant_index(const struct cell_variant *v)
{
    unsigned x = 0;
    for (int s = 0; s < CELL_SETTING_COUNT; s++)
        x = x * (unsigned)n_values(&CELL_SETTINGS[s]) + v->at[s];
    return x;
}

int cell_variant_same(const struct cell_variant *a, const struct cell_variant *b)
{
    return !memcmp(a->at, b->at, sizeof a->at);
}

int cell_key_same(const struct cell_key *a, const struct cell_key *b)
{
    return !strcmp(a->model, b->model) && !strcmp(a->host, b->host) && !strcmp(a->mode, b->mode) &&
           cell_variant_same(&a->v, &b->v);
}

const char *cell_variant_suffix(const struct cell_variant *v, char *buf, size_t n)
{
    if (n)
        buf[0] = '\0';
    for (int s = 0; s < CELL_SETTING_COUNT && n; s++)
        if (v->at[s])
            snprintf(buf + strlen(buf), n - strlen(buf), "+%s=%s", CELL_SETTINGS[s].key,
                     cell_variant_value(v, (enum cell_setting_id)s));
    return buf;
}

const char *cell_variant_describe(const struct cell_variant *v, char *buf, size_t n)
{
    if (n)
        buf[0] = '\0';
    for (int s = 0; s < CELL_SETTING_COUNT && n; s++)
        if (v->at[s] || CELL_SETTINGS[s].cell_has_default)
            snprintf(buf + strlen(buf), n - strlen(buf), "%s%s %s", buf[0] ? ", " : "",
                     CELL_SETTINGS[s].key, cell_setting_name((enum cell_setting_id)s, v->at[s]));
    return buf;
}

int cell_key_name(const struct cell_key *k, char *out, size_t n, struct gate_err *err)
{
    char suffix[CELL_SUFFIX_MAX];
    cell_variant_suffix(&k->v, suffix, sizeof suffix);
    int w = snprintf(out, n, "%s/%s/%s%s", k->model, k->host, k->mode, suffix);
    if (w < 0 || (size_t)w >= n)
        return err_set(err, ERR_INPUT, "cell name '%s/%s/%s%s' is too long (at most %zu bytes)",
                       k->model, k->host, k->mode, suffix, n ? n - 1 : 0);
    return 0;
}

int cell_key_of_payload(const json_t *payload, struct cell_key *out, struct gate_err *err)
{
    const json_t *cell = json_object_get(payload, "cell");
    memset(out, 0, sizeof *out);
    out->model = json_string_value(json_object_get(cell, "model"));
    out->host = json_string_value(json_object_get(cell, "host"));
    out->mode = json_string_value(json_object_get(cell, "mode"));
    if (!json_is_object(cell) || !out->model || !out->host || !out->mode || !*out->model ||
        !*out->host || !*out->mode)
        return err_set(err, ERR_INPUT,
                       "payload \"cell\" must be an object with non-empty strings \"model\", "
                       "\"host\" and \"mode\"");
    for (int s = 0; s < CELL_SETTING_COUNT; s++) {
        const struct cell_setting *r = &CELL_SETTINGS[s];
        const json_t *x = json_object_get(cell, r->key);
        char choices[96];
        if (x &&
            cell_setting_parse((enum cell_setting_id)s, json_string_value(x), 0, &out->v.at[s]))
            return err_set(
                err, ERR_INPUT, "payload \"cell\" of %s/%s/%s: \"%s\" must be %s%s%s%s", out->model,
                out->host, out->mode, r->key,
                cell_setting_choices((enum cell_setting_id)s, 0, 1, choices, sizeof choices),
                r->dflt && !r->cell_has_default ? " (absent: " : "",
                r->dflt && !r->cell_has_default ? r->dflt : "",
                r->dflt && !r->cell_has_default ? ")" : "");
    }
    return 0;
}

void cell_variant_put(const struct cell_variant *v, json_t *o)
{
    for (int s = 0; s < CELL_SETTING_COUNT; s++)
        if (v->at[s] || CELL_SETTINGS[s].cell_has_default)
            json_object_set_new(o, CELL_SETTINGS[s].key,
                                json_string(cell_setting_name((enum cell_setting_id)s, v->at[s])));
}

json_t *cell_key_json(const struct cell_key *k)
{
    json_t *o = json_pack("{s:s, s:s, s:s}", "model", k->model, "host", k->host, "mode", k->mode);
    if (o)
        cell_variant_put(&k->v, o);
    return o;
}

void cell_variant_settings(const struct cell_variant *v, json_t *settings)
{
    for (int s = 0; s < CELL_SETTING_COUNT; s++)
        if (v->at[s])
            json_object_set_new(settings, CELL_SETTINGS[s].key,
                                json_string(cell_variant_value(v, (enum cell_setting_id)s)));
}
