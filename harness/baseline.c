/* baseline.c — see baseline.h. One read transaction over the store (store_foreach); the newest
 * matching receipt wins. Start reading: baseline_find().
 */
#include "harness/baseline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *str_at(const json_t *o, const char *a, const char *b)
{
    return json_string_value(json_object_get(json_object_get(o, a), b));
}

/* Fill out from receipt payload p (its receipt hash already in out->receipt): refused by name
 * when it is not comparable with a run of model/mode on hostname with threads, the identity
 * settings want (KV type, instruction set) and the model digest sha, else its timed rates;
 * out->found says which. */
static void compare_with(const json_t *p, const char *model_id, const char *cell_mode,
                         const char *hostname, int want_threads, const struct cell_variant *want,
                         const char *want_sha, struct baseline *out)
{
    const char *host = str_at(p, "environment", "hostname");
    const int threads =
        (int)json_integer_value(json_object_get(json_object_get(p, "environment"), "threads"));
    const char *sha = json_string_value(
        json_object_get(json_object_get(json_object_get(p, "subject"), "model"), "sha256"));
    struct cell_key key;
    struct gate_err kerr = {0};
    const int key_ok = !cell_key_of_payload(p, &key, &kerr);
    char got_s[CELL_SUFFIX_MAX], want_s[CELL_SUFFIX_MAX], got_w[CELL_DESCRIBE_MAX] = "",
                                                          want_w[CELL_DESCRIBE_MAX];
    cell_variant_suffix(want, want_s, sizeof want_s);
    cell_variant_describe(want, want_w, sizeof want_w);
    if (key_ok) {
        cell_variant_suffix(&key.v, got_s, sizeof got_s);
        cell_variant_describe(&key.v, got_w, sizeof got_w);
    }
    const char *model = str_at(p, "cell", "model"), *mode = str_at(p, "cell", "mode");
    if (!mode || strcmp(mode, cell_mode) || (model_id && (!model || strcmp(model, model_id))))
        snprintf(out->refused, sizeof out->refused,
                 "baseline receipt %.16s... is of cell %s/%s, not of %s/%s", out->receipt,
                 model ? model : "?", mode ? mode : "?", model_id ? model_id : "*", cell_mode);
    else if (!host || !hostname || strcmp(host, hostname))
        snprintf(out->refused, sizeof out->refused,
                 "baseline receipt %.16s... ran on host '%s', this run on '%s': not comparable",
                 out->receipt, host ? host : "?", hostname ? hostname : "?");
    else if (threads != want_threads)
        snprintf(out->refused, sizeof out->refused,
                 "baseline receipt %.16s... ran with %d threads, this run with %d: not"
                 " comparable",
                 out->receipt, threads, want_threads);
    else if (!key_ok)
        snprintf(out->refused, sizeof out->refused, "baseline receipt %.16s...: %.200s",
                 out->receipt, kerr.msg);
    else if (!cell_variant_same(&key.v, want))
        snprintf(out->refused, sizeof out->refused,
                 "baseline receipt %.16s... ran with settings '%s' (%s), this run with"
                 " '%s' (%s): not comparable",
                 out->receipt, got_s, got_w, want_s, want_w);
    else if (!sha || strcmp(sha, want_sha))
        snprintf(out->refused, sizeof out->refused,
                 "baseline receipt %.16s... ran model digest %.16s..., this run %.16s...: not"
                 " comparable",
                 out->receipt, sha ? sha : "?", want_sha);
    if (!out->refused[0]) {
        const json_t *runs = json_object_get(
            json_object_get(json_object_get(json_object_get(p, "gates"), "throughput"), "metrics"),
            "runs");
        size_t i;
        const json_t *r;
        json_array_foreach(runs, i, r)
        {
            if (i >= THROUGHPUT_MAX_RUNS || gate_metric_num(r, "prefill_tps", &out->prefill[i]) ||
                gate_metric_num(r, "decode_tps", &out->decode[i])) {
                out->n = 0;
                break;
            }
            out->n = (int)i + 1;
        }
        if (out->n < 1)
            snprintf(out->refused, sizeof out->refused,
                     "baseline receipt %.16s... records no throughput runs this gate can read",
                     out->receipt);
    }
    out->found = !out->refused[0];
}

struct find {
    const struct ladder *l;
    const struct ladder_cell *c;
    const char *key_id, *hostname;
    int threads;
    int pinned;
    struct baseline *out;
    char best_version[64]; /* previous: the newest version below the ladder's seen so far */
    int64_t best_id;
    json_t *best; /* the chosen payload (owned) */
};

/* -1, 0, 1 as version a compares with b: dot-separated numbers, then the rest as text. */
static int version_cmp(const char *a, const char *b)
{
    for (;;) {
        char *ea, *eb;
        unsigned long x = strtoul(a, &ea, 10), y = strtoul(b, &eb, 10);
        if (ea == a || eb == b)
            return strcmp(a, b) < 0 ? -1 : strcmp(a, b) > 0;
        if (x != y)
            return x < y ? -1 : 1;
        if (*ea != '.' || *eb != '.')
            return strcmp(ea, eb) < 0 ? -1 : strcmp(ea, eb) > 0;
        a = ea + 1;
        b = eb + 1;
    }
}

static int visit(void *ctx, const struct store_row *row)
{
    struct find *f = ctx;
    if (!row->sig_ok || !row->chain_ok || !row->columns_ok)
        return 0;
    if (f->pinned) {
        if (strcmp(row->hash, f->c->g.baseline))
            return 0;
    } else if (strcmp(row->verdict, "PASS") || strcmp(row->key_id, f->key_id)) {
        return 0;
    }
    json_t *p = json_loadb(row->payload, row->len, 0, NULL);
    if (!p)
        return 0;
    struct cell_key key;
    struct gate_err kerr = {0};
    const int key_ok = !cell_key_of_payload(p, &key, &kerr);
    const char *version = str_at(p, "ladder", "version");
    const int same_cell =
        !strcmp(str_at(p, "cell", "model") ? str_at(p, "cell", "model") : "",
                f->l->models[f->c->model].id) &&
        !strcmp(str_at(p, "cell", "host") ? str_at(p, "cell", "host") : "",
                f->l->hosts[f->c->host].id) &&
        !strcmp(str_at(p, "cell", "mode") ? str_at(p, "cell", "mode") : "", f->c->mode) &&
        !strcmp(str_at(p, "ladder", "name") ? str_at(p, "ladder", "name") : "", f->l->name);
    if (!f->pinned && (!same_cell || !version || !key_ok || !cell_variant_same(&key.v, &f->c->v) ||
                       version_cmp(version, f->l->version) >= 0 ||
                       (f->best && version_cmp(version, f->best_version) < 0))) {
        json_decref(p);
        return 0;
    }
    json_decref(f->best); /* newer version, or the same version and a later id */
    f->best = p;
    f->best_id = row->id;
    snprintf(f->best_version, sizeof f->best_version, "%s", version ? version : "");
    snprintf(f->out->receipt, sizeof f->out->receipt, "%s", row->hash);
    return f->pinned; /* a hash names one receipt */
}

int baseline_find(struct store *st, const struct ladder *l, int ci, const char *key_id,
                  const json_t *environment, struct baseline *out, struct gate_err *err)
{
    memset(out, 0, sizeof *out);
    const struct ladder_cell *c = &l->cells[ci];
    struct find f = {.l = l,
                     .c = c,
                     .key_id = key_id,
                     .hostname = json_string_value(json_object_get(environment, "hostname")),
                     .threads = (int)json_integer_value(json_object_get(environment, "threads")),
                     .pinned = strcmp(c->g.baseline, "previous") != 0,
                     .out = out};
    int rc = store_foreach(st, visit, &f, err);
    if (rc < 0)
        return rc;
    if (!f.best) {
        if (f.pinned)
            snprintf(out->refused, sizeof out->refused,
                     "the pinned baseline receipt %.16s... is not in the store (or does not"
                     " verify)",
                     c->g.baseline);
        else
            snprintf(out->none, sizeof out->none,
                     "no PASS receipt of this cell signed by this host's key from a release"
                     " version below %s",
                     l->version);
        return 0;
    }
    snprintf(out->version, sizeof out->version, "%s", f.best_version);
    compare_with(f.best, l->models[c->model].id, c->mode, f.hostname, f.threads, &c->v,
                 l->models[c->model].sha256, out);
    json_decref(f.best);
    return 0;
}

json_t *baseline_json(const struct baseline *b)
{
    if (b->refused[0])
        return json_pack("{s:s, s:s}", "refused", b->refused, "receipt", b->receipt);
    if (!b->found)
        return json_pack("{s:s}", "none", b->none);
    json_t *pre = json_array(), *dec = json_array();
    for (int i = 0; i < b->n; i++) {
        json_array_append_new(pre, json_real(b->prefill[i]));
        json_array_append_new(dec, json_real(b->decode[i]));
    }
    return json_pack("{s:s, s:s, s:o, s:o}", "receipt", b->receipt, "version", b->version,
                     "prefill_tps", pre, "decode_tps", dec);
}

struct one {
    struct baseline *out;
    json_t *p;
};

static int take_one(void *ctx, const struct store_row *row)
{
    struct one *o = ctx;
    if (!row->sig_ok || !row->chain_ok || !row->columns_ok) {
        snprintf(o->out->refused, sizeof o->out->refused, "receipt %lld does not verify: %s",
                 (long long)row->id, row->problem);
        return 0;
    }
    snprintf(o->out->receipt, sizeof o->out->receipt, "%s", row->hash);
    o->p = json_loadb(row->payload, row->len, 0, NULL);
    return 0;
}

int baseline_from_receipt(struct store *st, int64_t id, const char *mode, const char *model_sha,
                          const json_t *environment, const struct cell_variant *v,
                          struct baseline *out, struct gate_err *err)
{
    memset(out, 0, sizeof *out);
    struct one o = {.out = out};
    int rc = store_get(st, id, take_one, &o, err);
    if (rc < 0)
        return rc;
    if (o.p) {
        snprintf(out->version, sizeof out->version, "%s",
                 str_at(o.p, "ladder", "version") ? str_at(o.p, "ladder", "version") : "");
        compare_with(o.p, NULL, mode, json_string_value(json_object_get(environment, "hostname")),
                     (int)json_integer_value(json_object_get(environment, "threads")), v, model_sha,
                     out);
    } else if (!out->refused[0]) {
        snprintf(out->refused, sizeof out->refused, "receipt %lld is not JSON", (long long)id);
    }
    json_decref(o.p);
    return 0;
}
