/* cellkey.c — a cell's identity written, read, named and compared once (cellkey.h). */
#include "receipts/cellkey.h"

#include <stdio.h>
#include <string.h>

static const char *const ISAS[] = {"portable", "avx2", "avx512"};

const char *kv_type_name(enum kv_type kv)
{
    return kv == KV_F16 ? "f16" : "f32";
}

int kv_type_parse(const char *text, enum kv_type *out)
{
    if (!text || (strcmp(text, "f32") && strcmp(text, "f16")))
        return -1;
    *out = strcmp(text, "f16") ? KV_F32 : KV_F16;
    return 0;
}

int cell_isa_known(const char *text)
{
    for (size_t i = 0; text && i < sizeof ISAS / sizeof *ISAS; i++)
        if (!strcmp(text, ISAS[i]))
            return 1;
    return 0;
}

int cell_prefill_known(const char *text)
{
    return text && (!strcmp(text, "f16") || !strcmp(text, "bf16"));
}

int cell_variant_same(const struct cell_variant *a, const struct cell_variant *b)
{
    return a->kv == b->kv && !strcmp(a->isa, b->isa) && !strcmp(a->prefill, b->prefill);
}

int cell_key_same(const struct cell_key *a, const struct cell_key *b)
{
    return !strcmp(a->model, b->model) && !strcmp(a->host, b->host) && !strcmp(a->mode, b->mode) &&
           cell_variant_same(&a->v, &b->v);
}

const char *cell_variant_suffix(const struct cell_variant *v, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s%s%s%s", v->kv == KV_F16 ? "+kv=f16" : "", v->isa[0] ? "+isa=" : "",
             v->isa, v->prefill[0] ? "+prefill=" : "", v->prefill);
    return buf;
}

int cell_key_name(const struct cell_key *k, char *out, size_t n, struct gate_err *err)
{
    char suffix[48];
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
    const json_t *kv = json_object_get(cell, "kv");
    if (kv && kv_type_parse(json_string_value(kv), &out->v.kv))
        return err_set(err, ERR_INPUT,
                       "payload \"cell\" of %s/%s/%s: \"kv\" must be \"f32\" or"
                       " \"f16\"",
                       out->model, out->host, out->mode);
    const json_t *isa = json_object_get(cell, "isa");
    if (isa && !cell_isa_known(json_string_value(isa)))
        return err_set(err, ERR_INPUT,
                       "payload \"cell\" of %s/%s/%s: \"isa\" must be \"portable\", \"avx2\" or"
                       " \"avx512\"",
                       out->model, out->host, out->mode);
    if (isa)
        snprintf(out->v.isa, sizeof out->v.isa, "%s", json_string_value(isa));
    const json_t *pf = json_object_get(cell, "prefill");
    if (pf && !cell_prefill_known(json_string_value(pf)))
        return err_set(err, ERR_INPUT,
                       "payload \"cell\" of %s/%s/%s: \"prefill\" must be \"f16\" or \"bf16\""
                       " (absent: f32)",
                       out->model, out->host, out->mode);
    if (pf)
        snprintf(out->v.prefill, sizeof out->v.prefill, "%s", json_string_value(pf));
    return 0;
}

json_t *cell_key_json(const struct cell_key *k)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "model", k->model, "host", k->host, "mode",
                          k->mode, "kv", kv_type_name(k->v.kv));
    if (o && k->v.isa[0])
        json_object_set_new(o, "isa", json_string(k->v.isa));
    if (o && k->v.prefill[0])
        json_object_set_new(o, "prefill", json_string(k->v.prefill));
    return o;
}

void cell_variant_settings(const struct cell_variant *v, json_t *settings)
{
    if (v->kv == KV_F16)
        json_object_set_new(settings, "kv", json_string("f16"));
    if (v->isa[0])
        json_object_set_new(settings, "isa", json_string(v->isa));
    if (v->prefill[0])
        json_object_set_new(settings, "prefill", json_string(v->prefill));
}
