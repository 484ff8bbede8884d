/* golden.c — greedy goldens: record from the reference twin, load refusing other digests,
 * replay on the mode under test (see golden.h). Start reading: golden_run().
 */
#include "oracles/golden.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/tokenizer.h"

void golden_set_free(struct golden_set *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n; i++) {
        free(g->c[i].prompt);
        free(g->c[i].ids);
        free(g->c[i].text);
        free(g->c[i].expect_text);
    }
    free(g->c);
    g->c = NULL;
    g->n = 0;
}

void golden_model_sha256(const struct model *m, char out[65])
{
    unsigned char d[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(d, m->gguf->map, m->gguf->size);
    for (size_t i = 0; i < sizeof d; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
    out[64] = '\0';
}

static int add_case(struct golden_set *g, const char *name, const int32_t *ids, int n,
                    struct gate_err *err)
{
    struct golden_case *c = realloc(g->c, (size_t)(g->n + 1) * sizeof *c);
    if (!c)
        return err_set(err, ERR_ENV, "out of memory");
    g->c = c;
    c = &g->c[g->n];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->prompt = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!c->prompt)
        return err_set(err, ERR_ENV, "out of memory");
    memcpy(c->prompt, ids, (size_t)n * sizeof *ids);
    c->n_prompt = n;
    g->n++;
    return 0;
}

static const char *PROMPTS[][2] = {
    {"sentence", "The quick brown fox jumps over the lazy dog. The dog"},
    {"code", "def add(a, b):\n    return"},
    {"chat", "<|im_start|>user\nName one primary colour.<|im_end|>\n<|im_start|>assistant\n"},
};

/* The model's tokenizer, when it loads and its ids fit the embedding table; else NULL. */
static struct tok *model_tok(const struct model *m)
{
    struct tok *t = NULL;
    struct gate_err quiet = {0};
    if (!m->gguf || tok_load(&t, m->gguf, &quiet))
        return NULL;
    if (tok_n_vocab(t) > (int)m->hp.n_vocab) {
        tok_free(t);
        return NULL;
    }
    return t;
}

int golden_default_prompts(const struct model *m, struct golden_set *out, struct gate_err *err)
{
    memset(out, 0, sizeof *out);
    golden_model_sha256(m, out->sha256);
    out->n_gen = GOLDEN_N_GEN;
    struct tok *t = model_tok(m);
    int rc = 0;
    for (int i = 0; !rc && i < 3; i++) {
        int32_t *ids = NULL, ids16[16];
        int n = 0;
        if (t && !tok_encode(t, PROMPTS[i][1], strlen(PROMPTS[i][1]), 1, &ids, &n, err)) {
            rc = add_case(out, PROMPTS[i][0], ids, n, err);
            free(ids);
        } else if (t) {
            rc = ERR_INPUT;
        } else {
            char name[32];
            snprintf(name, sizeof name, "ids-%d", i);
            mode_tokens(11 + (uint64_t)i, m->hp.n_vocab, 16, ids16);
            rc = add_case(out, name, ids16, 16, err);
        }
    }
    tok_free(t);
    if (rc)
        golden_set_free(out);
    return rc;
}

static int32_t argmax_id(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

int golden_generate(struct backend *b, enum mode_path path, const int32_t *prompt, int n_prompt,
                    int n_gen, int32_t eos, int32_t *out, int *n_out, struct gate_err *err)
{
    const int V = (int)b->model->hp.n_vocab;
    float *logits = NULL;
    int rc;
    *n_out = 0;
    if (n_prompt < 1 || n_gen < 1)
        return err_set(err, ERR_INPUT, "greedy decode needs a prompt and n_gen >= 1 (got %d,"
                       " %d)", n_prompt, n_gen);
    if ((rc = b->ops->truncate(b, 0, err)))
        return rc;
    logits = malloc((size_t)n_prompt * (size_t)V * sizeof *logits);
    if (!logits)
        return err_set(err, ERR_ENV, "out of memory");
    if (path == MODE_DECODE) {
        for (int t = 0; !rc && t < n_prompt; t++)
            rc = b->ops->forward(b, prompt + t, 1, t, logits + (size_t)t * V, err);
    } else {
        rc = b->ops->forward(b, prompt, n_prompt, 0, logits, err);
    }
    const float *last = logits + (size_t)(n_prompt - 1) * V;
    for (int i = 0; !rc && i < n_gen; i++) {
        int32_t id = argmax_id(last, V);
        out[(*n_out)++] = id;
        if (id == eos || i == n_gen - 1)
            break;
        rc = b->ops->forward(b, &id, 1, n_prompt + i, logits, err);
        last = logits;
    }
    free(logits);
    return rc;
}

int golden_first_diff(const int32_t *a, int na, const int32_t *b, int nb)
{
    int n = na < nb ? na : nb;
    for (int i = 0; i < n; i++)
        if (a[i] != b[i])
            return i;
    return na == nb ? -1 : n;
}

/* ---- file ----------------------------------------------------------------------------------- */

static json_t *ids_json(const int32_t *ids, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static int ids_of(json_t *a, int32_t **out, int *n, const char *what, struct gate_err *err)
{
    if (!json_is_array(a))
        return err_set(err, ERR_INPUT, "goldens: '%s' is not an array of ids", what);
    size_t m = json_array_size(a);
    *out = malloc((m ? m : 1) * sizeof **out);
    if (!*out)
        return err_set(err, ERR_ENV, "out of memory");
    for (size_t i = 0; i < m; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > INT32_MAX)
            return err_set(err, ERR_INPUT, "goldens: '%s'[%zu] is not a token id", what, i);
        (*out)[i] = (int32_t)json_integer_value(v);
    }
    *n = (int)m;
    return 0;
}

static char *text_of(const struct tok *t, const int32_t *ids, int n)
{
    char *s = NULL;
    size_t len = 0;
    struct gate_err quiet = {0};
    if (!t || tok_decode(t, ids, n, &s, &len, &quiet))
        return NULL;
    return s;
}

int golden_record(const char *path, const struct model *m, int n_gen, int n_threads,
                  struct gate_err *err)
{
    struct golden_set g = {0};
    struct backend *b = NULL;
    struct tok *t = model_tok(m);
    json_t *root = NULL, *cases = json_array();
    json_error_t je;
    char tmp[4200];
    int rc;
    if (n_gen < 1)
        n_gen = GOLDEN_N_GEN;
    if ((rc = golden_default_prompts(m, &g, err)))
        goto done;
    int longest = 0;
    for (int i = 0; i < g.n; i++)
        longest = g.c[i].n_prompt > longest ? g.c[i].n_prompt : longest;
    const struct mode ref = {.backend = "ref", .path = MODE_PREFILL};
    if ((rc = mode_open(&b, &ref, m, longest + n_gen, n_threads, NULL, err)))
        goto done;
    for (int i = 0; i < g.n; i++) {
        struct golden_case *c = &g.c[i];
        c->ids = malloc((size_t)n_gen * sizeof *c->ids);
        if (!c->ids) {
            rc = err_set(err, ERR_ENV, "out of memory");
            goto done;
        }
        if ((rc = golden_generate(b, MODE_PREFILL, c->prompt, c->n_prompt, n_gen,
                                  t ? tok_eos(t) : -1, c->ids, &c->n_ids, err)))
            goto done;
        json_t *x = json_object();
        json_object_set_new(x, "name", json_string(c->name));
        json_object_set_new(x, "prompt", ids_json(c->prompt, c->n_prompt));
        json_object_set_new(x, "ids", ids_json(c->ids, c->n_ids));
        char *text = text_of(t, c->ids, c->n_ids);
        if (text)
            json_object_set_new(x, "text", json_stringn(text, strlen(text)));
        free(text);
        json_array_append_new(cases, x);
    }
    root = access(path, F_OK) == 0 ? json_load_file(path, 0, &je) : json_object();
    if (!root || !json_is_object(root)) {
        rc = err_set(err, ERR_INPUT, "goldens '%s' is not a JSON object: %s", path,
                     root ? "wrong type" : je.text);
        goto done;
    }
    json_object_set_new(root, "schema", json_integer(GOLDEN_SCHEMA));
    json_t *models = json_object_get(root, "models");
    if (!json_is_object(models)) {
        models = json_object();
        json_object_set_new(root, "models", models);
    }
    json_t *entry = json_object();
    json_object_set_new(entry, "recorded_by", json_string("ref"));
    json_object_set_new(entry, "n_gen", json_integer(n_gen));
    json_object_set(entry, "cases", cases);
    json_object_set_new(models, g.sha256, entry);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (json_dump_file(root, tmp, JSON_INDENT(2) | JSON_SORT_KEYS) || rename(tmp, path)) {
        rc = err_set(err, ERR_ENV, "cannot write goldens '%s': %s", path, strerror(errno));
        unlink(tmp);
    }
done:
    json_decref(root);
    json_decref(cases);
    backend_close(b);
    tok_free(t);
    golden_set_free(&g);
    return rc;
}

int golden_load(const char *path, const char *sha256, struct golden_set *out,
                struct gate_err *err)
{
    json_error_t je;
    int rc = 0;
    memset(out, 0, sizeof *out);
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return err_set(err, ERR_INPUT, "cannot read goldens '%s': %s (line %d)", path, je.text,
                       je.line);
    json_t *models = json_object_get(root, "models");
    json_t *schema = json_object_get(root, "schema");
    if (!json_is_integer(schema) || json_integer_value(schema) != GOLDEN_SCHEMA ||
        !json_is_object(models)) {
        rc = err_set(err, ERR_INPUT, "goldens '%s': not a schema %d goldens file", path,
                     GOLDEN_SCHEMA);
        goto done;
    }
    json_t *entry = json_object_get(models, sha256);
    if (!entry) {
        char others[400] = "";
        const char *key;
        json_t *v;
        int at = 0;
        json_object_foreach(models, key, v)
        {
            if (at < (int)sizeof others - 80)
                at += snprintf(others + at, sizeof others - (size_t)at, "%s%.16s...",
                               at ? ", " : "", key);
        }
        rc = err_set(err, ERR_INPUT, "goldens '%s' hold no entry for model %s%s%s; refusing to"
                     " reuse goldens of another model (record them with gate golden record)",
                     path, sha256, at ? ": recorded for " : "", others);
        goto done;
    }
    snprintf(out->sha256, sizeof out->sha256, "%s", sha256);
    json_t *ng = json_object_get(entry, "n_gen"), *cases = json_object_get(entry, "cases");
    out->n_gen = json_is_integer(ng) ? (int)json_integer_value(ng) : GOLDEN_N_GEN;
    if (!json_is_array(cases) || json_array_size(cases) == 0) {
        rc = err_set(err, ERR_INPUT, "goldens '%s': model %.16s... has no cases", path, sha256);
        goto done;
    }
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *x = json_array_get(cases, i);
        int32_t *p = NULL;
        int np = 0;
        const char *name = json_string_value(json_object_get(x, "name"));
        if ((rc = ids_of(json_object_get(x, "prompt"), &p, &np, "prompt", err)) ||
            (rc = add_case(out, name ? name : "?", p, np, err))) {
            free(p);
            goto done;
        }
        free(p);
        struct golden_case *c = &out->c[out->n - 1];
        if ((rc = ids_of(json_object_get(x, "ids"), &c->ids, &c->n_ids, "ids", err)))
            goto done;
        const char *et = json_string_value(json_object_get(x, "expect_text"));
        if (et && !(c->expect_text = strdup(et))) {
            rc = err_set(err, ERR_ENV, "out of memory");
            goto done;
        }
    }
done:
    json_decref(root);
    if (rc)
        golden_set_free(out);
    return rc;
}

/* ---- replay --------------------------------------------------------------------------------- */

void golden_result_free(struct golden_result *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++) {
        free(r->c[i].expected);
        free(r->c[i].got);
        free(r->c[i].expected_text);
        free(r->c[i].got_text);
    }
    free(r->c);
    r->c = NULL;
    r->n = 0;
}

int golden_run(const struct model *m, const struct mode *mode, const struct golden_set *g,
               int n_threads, struct golden_result *out, struct gate_err *err)
{
    struct backend *b = NULL;
    struct tok *t = NULL;
    char sha[65];
    int rc = 0, longest = 0, n_gen = 0, failed = -1;
    memset(out, 0, sizeof *out);
    mode_format(mode, out->mode, sizeof out->mode);
    golden_model_sha256(m, sha);
    if (strcmp(sha, g->sha256))
        return err_set(err, ERR_INPUT, "goldens were recorded for model %s, not %s: refusing"
                       " to reuse them", g->sha256, sha);
    if (g->n < 1)
        return err_set(err, ERR_INPUT, "no golden cases to run");
    for (int i = 0; i < g->n; i++) {
        longest = g->c[i].n_prompt > longest ? g->c[i].n_prompt : longest;
        n_gen = g->c[i].n_ids > n_gen ? g->c[i].n_ids : n_gen;
    }
    t = model_tok(m);
    out->c = calloc((size_t)g->n, sizeof *out->c);
    if (!out->c) {
        rc = err_set(err, ERR_ENV, "out of memory");
        goto done;
    }
    if ((rc = mode_open(&b, mode, m, longest + n_gen + 1, n_threads, NULL, err)))
        goto done;
    for (int i = 0; i < g->n; i++) {
        const struct golden_case *c = &g->c[i];
        struct golden_case_result *x = &out->c[i];
        out->n = i + 1;
        snprintf(x->name, sizeof x->name, "%s", c->name);
        x->expected = malloc((size_t)(c->n_ids ? c->n_ids : 1) * sizeof *x->expected);
        x->got = malloc((size_t)(c->n_ids ? c->n_ids : 1) * sizeof *x->got);
        if (!x->expected || !x->got) {
            rc = err_set(err, ERR_ENV, "out of memory");
            goto done;
        }
        memcpy(x->expected, c->ids, (size_t)c->n_ids * sizeof *c->ids);
        x->n_expected = c->n_ids;
        if (c->n_ids &&
            (rc = golden_generate(b, mode->path, c->prompt, c->n_prompt, c->n_ids,
                                  t ? tok_eos(t) : -1, x->got, &x->n_got, err)))
            goto done;
        x->first_diff = golden_first_diff(x->expected, x->n_expected, x->got, x->n_got);
        x->expected_text = text_of(t, x->expected, x->n_expected);
        x->got_text = text_of(t, x->got, x->n_got);
        x->pass = x->first_diff < 0;
        if (x->pass && c->expect_text && (!x->got_text || strcmp(x->got_text, c->expect_text)))
            x->pass = 0;
        if (!x->pass && failed < 0)
            failed = i;
    }
    out->pass = failed < 0;
    if (out->pass)
        snprintf(out->reason, sizeof out->reason, "PASS: %d golden continuations reproduced"
                 " exactly", g->n);
    else if (out->c[failed].first_diff >= 0)
        snprintf(out->reason, sizeof out->reason, "FAIL: case '%s' differs at generated index"
                 " %d (expected id %d, got %d)", out->c[failed].name, out->c[failed].first_diff,
                 out->c[failed].first_diff < out->c[failed].n_expected
                     ? (int)out->c[failed].expected[out->c[failed].first_diff] : -1,
                 out->c[failed].first_diff < out->c[failed].n_got
                     ? (int)out->c[failed].got[out->c[failed].first_diff] : -1);
    else
        snprintf(out->reason, sizeof out->reason, "FAIL: case '%s' has the expected ids but not"
                 " the expected text", out->c[failed].name);
done:
    backend_close(b);
    tok_free(t);
    return rc;
}

json_t *golden_result_json(const struct golden_result *r)
{
    json_t *o = json_object(), *cs = json_array();
    json_object_set_new(o, "mode", json_string(r->mode));
    json_object_set_new(o, "verdict", json_string(r->pass ? "PASS" : "FAIL"));
    json_object_set_new(o, "reason", json_string(r->reason));
    for (int i = 0; i < r->n; i++) {
        const struct golden_case_result *x = &r->c[i];
        json_t *c = json_object();
        json_object_set_new(c, "name", json_string(x->name));
        json_object_set_new(c, "verdict", json_string(x->pass ? "PASS" : "FAIL"));
        json_object_set_new(c, "first_diff", json_integer(x->first_diff));
        json_object_set_new(c, "expected", ids_json(x->expected, x->n_expected));
        json_object_set_new(c, "got", ids_json(x->got, x->n_got));
        if (x->expected_text)
            json_object_set_new(c, "expected_text", json_string(x->expected_text));
        if (x->got_text)
            json_object_set_new(c, "got_text", json_string(x->got_text));
        json_array_append_new(cs, c);
    }
    json_object_set_new(o, "cases", cs);
    return o;
}

void golden_print(FILE *f, const struct golden_result *r)
{
    fprintf(f, "golden %s:\n", r->mode);
    for (int i = 0; i < r->n; i++) {
        const struct golden_case_result *x = &r->c[i];
        fprintf(f, "  %-12s %s", x->name, x->pass ? "ok" : "FAIL");
        if (x->first_diff >= 0) {
            fprintf(f, " at index %d\n    expected:", x->first_diff);
            for (int j = x->first_diff; j < x->n_expected; j++)
                fprintf(f, " %d", (int)x->expected[j]);
            fprintf(f, "\n    got:     ");
            for (int j = x->first_diff; j < x->n_got; j++)
                fprintf(f, " %d", (int)x->got[j]);
            if (x->expected_text && x->got_text)
                fprintf(f, "\n    expected text: %s\n    got text:      %s", x->expected_text,
                        x->got_text);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "  %s\n", r->reason);
}
