/* golden.c — greedy goldens: record from the reference twin (never over an existing entry
 * unless forced), load and validate refusing other digests, replay on the mode under test, and
 * the one judge that turns the replay's metrics into a verdict (see golden.h).
 * Invariant: the verdict of a run is golden_judge()'s over the metrics the run records.
 * Start reading: golden_gate(), then golden_judge().
 */
#include "oracles/golden.h"
#include "base/atomic.h"
#include "engine/pin.h"
#include "engine/ref_ops.h"
#include "oracles/parity.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/tokenizer.h"
#include "oracles/parity.h"

#define GOLDEN_MAX_FILE (64u << 20)

/* Engines whose continuations are independent of gate's twin (recorded_by.engine). */
static const char *const INDEPENDENT[] = {"llama.cpp", "exact-f64", "transformers"};

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
    json_decref(g->recorded_by);
    g->recorded_by = NULL;
    g->c = NULL;
    g->n = 0;
}

const char *golden_source_of(const json_t *by)
{
    const char *engine = json_string_value(json_object_get(by, "engine"));
    if (!json_is_object(by) || !engine)
        return NULL;
    if (!strcmp(engine, "gate")) {
        static const char *const need[] = {"backend", "git_commit", "date"};
        for (int i = 0; i < 3; i++)
            if (!json_string_value(json_object_get(by, need[i])) ||
                !json_string_length(json_object_get(by, need[i])))
                return NULL;
        return json_is_boolean(json_object_get(by, "git_dirty")) ? "regression" : NULL;
    }
    for (size_t i = 0; i < sizeof INDEPENDENT / sizeof *INDEPENDENT; i++)
        if (!strcmp(engine, INDEPENDENT[i]))
            return json_string_length(json_object_get(by, "version")) ? "independent" : NULL;
    return NULL;
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
        return err_set(err, ERR_ENV, "goldens: out of memory for the case table");
    g->c = c;
    c = &g->c[g->n];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->prompt = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!c->prompt)
        return err_set(err, ERR_ENV, "goldens: out of memory for a case's prompt");
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

int golden_generate(struct backend *b, enum mode_path path, const int32_t *prompt, int n_prompt,
                    int n_gen, int32_t eos, int32_t *out, int *n_out, struct gate_err *err)
{
    const int V = (int)b->model->hp.n_vocab;
    float *logits = NULL;
    int rc;
    *n_out = 0;
    if (n_prompt < 1 || n_gen < 1)
        return err_set(err, ERR_INPUT,
                       "greedy decode needs a prompt and n_gen >= 1 (got %d,"
                       " %d)",
                       n_prompt, n_gen);
    if ((rc = backend_truncate(b, 0, err)))
        return rc;
    logits = malloc((size_t)n_prompt * (size_t)V * sizeof *logits);
    if (!logits)
        return err_set(err, ERR_ENV, "golden: out of memory for the prompt's logits");
    if (path == MODE_DECODE) {
        for (int t = 0; !rc && t < n_prompt; t++)
            rc = backend_forward(b, prompt + t, 1, t, logits + (size_t)t * V, err);
    } else {
        rc = backend_forward(b, prompt, n_prompt, 0, logits, err);
    }
    const float *last = logits + (size_t)(n_prompt - 1) * V;
    for (int i = 0; !rc && i < n_gen; i++) {
        int32_t id = ref_argmax(last, V);
        out[(*n_out)++] = id;
        if (id == eos || i == n_gen - 1)
            break;
        rc = backend_forward(b, &id, 1, n_prompt + i, logits, err);
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
        return err_set(err, ERR_ENV, "goldens: out of memory for a list of ids");
    for (size_t i = 0; i < m; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
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

/* The JSON object at path (a new, empty one when no file exists). */
static json_t *load_root(const char *path, struct gate_err *err)
{
    json_error_t je;
    if (access(path, F_OK) != 0 && errno == ENOENT)
        return json_object();
    /* opened once, never blocking, regular files only (engine/pin.h): a FIFO cannot hang the
     * recorder */
    struct pinned p = {.fd = -1};
    uint8_t *buf = NULL;
    size_t n = 0;
    struct gate_err e = {0};
    if (pin_open_bounded(path, NULL, (uint64_t)GOLDEN_MAX_FILE - 1, &p, &e) ||
        pin_read_all(&p, GOLDEN_MAX_FILE, &buf, &n, &e)) {
        pin_close(&p);
        err_set(err, e.code ? e.code : ERR_INPUT, "goldens: %s", e.msg);
        return NULL;
    }
    pin_close(&p);
    json_t *root = json_loadb((const char *)buf, n, 0, &je);
    free(buf);
    if (!root || !json_is_object(root)) {
        err_set(err, ERR_INPUT, "goldens '%s' is not a JSON object: %s", path,
                root ? "wrong type" : je.text);
        json_decref(root);
        return NULL;
    }
    return root;
}

/* Write root to path atomically (base/atomic.h: a temp file in path's folder, fsync, rename over
 * path; removed on failure or SIGINT/SIGTERM). Mode 0644: a goldens file is shared and committed.
 */
static int write_atomic(const char *path, const json_t *root, struct gate_err *err)
{
    struct atomic_file a = {0};
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    int rc = 0;
    if (!text) {
        rc = err_set(err, ERR_ENV, "cannot write goldens '%s': out of memory for its JSON text",
                     path);
        goto cleanup;
    }
    if ((rc = atomic_open(&a, path, 0644, err)))
        goto cleanup;
    if ((rc = atomic_write(&a, text, strlen(text), err)))
        goto cleanup;
    rc = atomic_commit(&a, err);
cleanup:
    atomic_abort(&a);
    free(text);
    return rc;
}

int golden_entry_of(const char *path, const char *sha256, char *who, size_t n, int *n_gen,
                    struct gate_err *err)
{
    who[0] = '\0';
    *n_gen = -1;
    json_t *root = load_root(path, err);
    if (!root)
        return err->code ? err->code : ERR_INPUT;
    const json_t *old = json_object_get(json_object_get(root, "models"), sha256);
    if (old) {
        const char *e =
            json_string_value(json_object_get(json_object_get(old, "recorded_by"), "engine"));
        snprintf(who, n, "%s", e && e[0] ? e : "an unknown source");
        const json_t *g = json_object_get(old, "n_gen");
        if (json_is_integer(g) && json_integer_value(g) > 0 && json_integer_value(g) <= INT_MAX)
            *n_gen = (int)json_integer_value(g);
    }
    json_decref(root);
    return 0;
}

json_t *golden_recorded_by_gate(const char *git_commit, int git_dirty)
{
    char now[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return json_pack("{s:s, s:s, s:s, s:b, s:s}", "engine", "gate", "backend", backend_judge_name(),
                     "git_commit", git_commit ? git_commit : "unknown", "git_dirty",
                     git_commit ? git_dirty : 1, "date", now);
}
int golden_record_force(const char *path, const struct model *m, int n_gen, int n_threads,
                        int force, const json_t *recorded_by, struct gate_err *err)
{
    struct golden_set g = {0};
    struct backend *b = NULL;
    struct tok *t = model_tok(m);
    json_t *root = NULL, *cases = json_array(), *by = NULL;
    char sha[65];
    int rc = 0;
    if (n_gen < 1)
        n_gen = GOLDEN_N_GEN;
    golden_model_sha256(m, sha);
    if (!(root = load_root(path, err))) {
        rc = ERR_INPUT;
        goto done;
    }
    json_t *models = json_object_get(root, "models");
    json_t *old = json_is_object(models) ? json_object_get(models, sha) : NULL;
    if (old && !force) {
        const char *who =
            json_string_value(json_object_get(json_object_get(old, "recorded_by"), "engine"));
        rc = err_set(err, ERR_INPUT,
                     "goldens '%s' already hold an entry for model %s (recorded"
                     " by %s); refusing to overwrite it (use --force to replace it)",
                     path, sha, who ? who : "an unknown source");
        goto done;
    }
    by = recorded_by ? json_deep_copy(recorded_by) : golden_recorded_by_gate(NULL, 1);
    if (!by) {
        rc = err_set(err, ERR_ENV, "out of memory recording goldens into '%s'", path);
        goto done;
    }
    if ((rc = golden_default_prompts(m, &g, err)))
        goto done;
    int longest = 0;
    for (int i = 0; i < g.n; i++)
        longest = g.c[i].n_prompt > longest ? g.c[i].n_prompt : longest;
    if ((rc = mode_open_judge(&b, m, longest + n_gen, n_threads, err)))
        goto done;
    const int32_t eos = t ? tok_eos(t) : -1;
    for (int i = 0; i < g.n; i++) {
        struct golden_case *c = &g.c[i];
        c->ids = malloc((size_t)n_gen * sizeof *c->ids);
        if (!c->ids) {
            rc = err_set(err, ERR_ENV, "golden record: out of memory for the generated ids");
            goto done;
        }
        if ((rc = golden_generate(b, MODE_PREFILL, c->prompt, c->n_prompt, n_gen, eos, c->ids,
                                  &c->n_ids, err)))
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
    json_object_set_new(root, "schema", json_integer(GOLDEN_SCHEMA));
    if (!json_is_object(models)) {
        models = json_object();
        json_object_set_new(root, "models", models);
    }
    json_t *entry = json_object();
    json_object_set(entry, "recorded_by", by);
    json_object_set_new(entry, "n_gen", json_integer(n_gen));
    json_object_set_new(entry, "eos", json_integer(eos));
    json_object_set(entry, "cases", cases);
    json_object_set_new(models, sha, entry);
    rc = write_atomic(path, root, err);
done:
    json_decref(root);
    json_decref(cases);
    json_decref(by);
    backend_close(b);
    tok_free(t);
    golden_set_free(&g);
    return rc;
}

int golden_record(const char *path, const struct model *m, int n_gen, int n_threads,
                  struct gate_err *err)
{
    return golden_record_force(path, m, n_gen, n_threads, 0, NULL, err);
}

/* Validate case x (index i) of entry and append it to out; ERR_INPUT naming file and case. */
static int load_case(const json_t *x, size_t i, const char *name, struct golden_set *out,
                     struct gate_err *err)
{
    int32_t *p = NULL;
    int np = 0, rc;
    const char *cname = json_string_value(json_object_get(x, "name"));
    char label[96];
    snprintf(label, sizeof label, "case %zu ('%.60s')", i, cname ? cname : "?");
    if (!cname || !cname[0] || strlen(cname) >= sizeof out->c[0].name)
        return err_set(err, ERR_INPUT, "goldens '%s': %s needs a name of 1-63 bytes", name, label);
    if ((rc = ids_of(json_object_get(x, "prompt"), &p, &np, "prompt", err)))
        goto done;
    if (np < 1) {
        rc = err_set(err, ERR_INPUT, "goldens '%s': %s has an empty prompt", name, label);
        goto done;
    }
    if ((rc = add_case(out, cname, p, np, err)))
        goto done;
    struct golden_case *c = &out->c[out->n - 1];
    if ((rc = ids_of(json_object_get(x, "ids"), &c->ids, &c->n_ids, "ids", err)))
        goto done;
    const int ends_eos = c->n_ids > 0 && out->eos >= 0 && c->ids[c->n_ids - 1] == out->eos;
    if (c->n_ids < 1)
        rc = err_set(err, ERR_INPUT,
                     "goldens '%s': %s has no expected ids: it would pass"
                     " vacuously",
                     name, label);
    else if (c->n_ids > out->n_gen)
        rc = err_set(err, ERR_INPUT, "goldens '%s': %s has %d ids but n_gen is %d", name, label,
                     c->n_ids, out->n_gen);
    else if (c->n_ids < out->n_gen && !ends_eos)
        rc = err_set(err, ERR_INPUT,
                     "goldens '%s': %s has %d ids, fewer than n_gen %d, and does"
                     " not end with the recorded EOS (%d)",
                     name, label, c->n_ids, out->n_gen, (int)out->eos);
    for (int k = 0; !rc && out->eos >= 0 && k < c->n_ids - 1; k++)
        if (c->ids[k] == out->eos)
            rc = err_set(err, ERR_INPUT,
                         "goldens '%s': %s has the EOS id %d at index %d, before"
                         " its end (the recorder stops at EOS)",
                         name, label, (int)out->eos, k);
    const char *et = json_string_value(json_object_get(x, "expect_text"));
    if (!rc && et && !(c->expect_text = strdup(et)))
        rc = err_set(err, ERR_ENV, "goldens: out of memory for a case's expect_text");
done:
    free(p);
    return rc;
}

int golden_load_buf(const char *bytes, size_t n, const char *name, const char *sha256,
                    struct golden_set *out, struct gate_err *err)
{
    json_error_t je;
    int rc = 0;
    memset(out, 0, sizeof *out);
    out->eos = -1;
    /* entries are keyed by a whole digest: a longer key would be cut to fit out->sha256 and the
     * set would name a model it was not loaded for (found by fuzz/fuzz_golden.c) */
    if (!sha256 || strlen(sha256) != 64 || strspn(sha256, "0123456789abcdef") != 64)
        return err_set(err, ERR_INPUT,
                       "goldens '%s': the model digest '%.80s' is not 64 lower-case hex digits",
                       name, sha256 ? sha256 : "(none)");
    json_t *root = json_loadb(bytes, n, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return err_set(err, ERR_INPUT, "cannot read goldens '%s': %s (line %d)", name, je.text,
                       je.line);
    unsigned char d[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(d, (const unsigned char *)bytes, n);
    for (size_t i = 0; i < sizeof d; i++)
        sprintf(out->file_sha256 + 2 * i, "%02x", d[i]);
    json_t *models = json_object_get(root, "models");
    json_t *schema = json_object_get(root, "schema");
    if (!json_is_integer(schema) || json_integer_value(schema) != GOLDEN_SCHEMA ||
        !json_is_object(models)) {
        rc = err_set(err, ERR_INPUT,
                     "goldens '%s': not a schema %d goldens file (re-record it"
                     " with gate golden record)",
                     name, GOLDEN_SCHEMA);
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
        rc = err_set(err, ERR_INPUT,
                     "goldens '%s' hold no entry for model %s%s%s; refusing to"
                     " reuse goldens of another model (record them with gate golden record)",
                     name, sha256, at ? ": recorded for " : "", others);
        goto done;
    }
    snprintf(out->sha256, sizeof out->sha256, "%s", sha256);
    json_t *by = json_object_get(entry, "recorded_by");
    const char *source = golden_source_of(by);
    if (!source) {
        char *txt = by ? json_dumps(by, JSON_COMPACT) : NULL;
        rc = err_set(err, ERR_INPUT,
                     "goldens '%s': model %.16s... has an unknown or incomplete"
                     " recorded_by %.120s (want {\"engine\": \"gate\", backend, git_commit,"
                     " git_dirty, date} or an independent engine with a version)",
                     name, sha256, txt ? txt : "(missing)");
        free(txt);
        goto done;
    }
    out->independent = !strcmp(source, "independent");
    out->recorded_by = json_deep_copy(by);
    json_t *ng = json_object_get(entry, "n_gen"), *eos = json_object_get(entry, "eos");
    json_t *cases = json_object_get(entry, "cases");
    if (!json_is_integer(ng) || json_integer_value(ng) < 1 || json_integer_value(ng) > 1 << 20) {
        rc = err_set(err, ERR_INPUT, "goldens '%s': model %.16s... needs an integer n_gen >= 1",
                     name, sha256);
        goto done;
    }
    out->n_gen = (int)json_integer_value(ng);
    if (eos && (!json_is_integer(eos) || json_integer_value(eos) < -1 ||
                json_integer_value(eos) > INT32_MAX)) {
        rc = err_set(err, ERR_INPUT, "goldens '%s': model %.16s...: eos is not a token id or -1",
                     name, sha256);
        goto done;
    }
    out->eos = eos ? (int32_t)json_integer_value(eos) : -1;
    if (!json_is_array(cases) || json_array_size(cases) == 0) {
        rc = err_set(err, ERR_INPUT, "goldens '%s': model %.16s... has no cases", name, sha256);
        goto done;
    }
    for (size_t i = 0; !rc && i < json_array_size(cases); i++)
        rc = load_case(json_array_get(cases, i), i, name, out, err);
done:
    json_decref(root);
    if (rc)
        golden_set_free(out);
    return rc;
}

int golden_load(const char *path, const char *sha256, struct golden_set *out, struct gate_err *err)
{
    memset(out, 0, sizeof *out);
    /* opened once, never blocking, regular files only (engine/pin.h): a FIFO or a link to
     * /proc/self/environ named as goldens is refused before a byte is read */
    struct pinned p = {.fd = -1};
    uint8_t *buf = NULL;
    size_t n = 0;
    struct gate_err e = {0};
    int rc = pin_open_bounded(path, NULL, (uint64_t)GOLDEN_MAX_FILE - 1, &p, &e);
    if (!rc)
        rc = pin_read_all(&p, GOLDEN_MAX_FILE, &buf, &n, &e);
    if (rc)
        rc = err_set(err, rc, "goldens: %s", e.msg);
    else
        rc = golden_load_buf((const char *)buf, n, path, sha256, out, err);
    free(buf);
    pin_close(&p);
    return rc;
}

/* ---- replay --------------------------------------------------------------------------------- */

static const char *const CLASS_NAMES[] = {"MATCH", "TIE_FLIP", "WRONG", "ROUTE_TIE"};

const char *golden_class_name(enum golden_class c)
{
    return c >= GOLDEN_MATCH && c <= GOLDEN_ROUTE_TIE ? CLASS_NAMES[c] : "?";
}

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
    json_decref(r->metrics);
    json_decref(r->checks);
    r->metrics = r->checks = NULL;
    r->c = NULL;
    r->n = 0;
}

/* Ids of a metrics array into out (cap entries); -1 when not an array of ids or too long. */
static int ids_in(const json_t *a, int32_t *out, int cap)
{
    if (!json_is_array(a) || json_array_size(a) > (size_t)cap)
        return -1;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return -1;
        out[i] = (int32_t)json_integer_value(v);
    }
    return (int)json_array_size(a);
}

/* The class of one recorded case, from its expected and produced ids, its recorded judge margin
 * and the settings: the one definition the judge and the run's printout share. *k receives the
 * recomputed first difference (-1 when equal); why says what made it WRONG or a TIE_FLIP. */
static enum golden_class classify(const json_t *c, int tokens, double near_tie, int32_t eos, int *k,
                                  char *why, size_t n)
{
    const char *name = json_string_value(json_object_get(c, "name"));
    name = name ? name : "?";
    *k = -1;
    if (tokens < 1 || tokens > 1 << 20) {
        gate_say(why, n, "settings.tokens %d is not a token count", tokens);
        return GOLDEN_WRONG;
    }
    int32_t *e = malloc((size_t)tokens * sizeof *e), *g = malloc((size_t)tokens * sizeof *g);
    enum golden_class cls = GOLDEN_WRONG;
    int ne = e ? ids_in(json_object_get(c, "expected"), e, tokens) : -1;
    int ng = g ? ids_in(json_object_get(c, "got"), g, tokens) : -1;
    if (ne < 0 || ng < 0) {
        gate_say(why, n, "case '%s': expected/got are not id lists of at most %d ids", name,
                 tokens);
        goto done;
    }
    if (ne < 1 || (ne < tokens && !(eos >= 0 && e[ne - 1] == eos))) {
        gate_say(why, n, "case '%s': %d expected ids for %d tokens (short, not ending at EOS)",
                 name, ne, tokens);
        goto done;
    }
    *k = golden_first_diff(e, ne, g, ng);
    if (*k < 0) {
        const char *want = json_string_value(json_object_get(c, "expect_text"));
        const char *got = json_string_value(json_object_get(c, "got_text"));
        if (want && (!got || strcmp(want, got)))
            gate_say(why, n, "case '%s' has the expected ids but not the expected text", name);
        else
            cls = GOLDEN_MATCH;
        goto done;
    }
    if (*k >= ne || *k >= ng) {
        gate_say(why, n, "case '%s': %d ids produced where %d were expected", name, ng, ne);
        goto done;
    }
    const json_t *j = json_object_get(c, "judge");
    double margin, gap_e, gap_g;
    if (gate_metric_num(j, "margin", &margin) || gate_metric_num(j, "gap_expected", &gap_e) ||
        gate_metric_num(j, "gap_got", &gap_g)) {
        gate_say(why, n,
                 "case '%s' differs at generated index %d (expected id %d, got %d) and no"
                 " judge margin was recorded there",
                 name, *k, (int)e[*k], (int)g[*k]);
        goto done;
    }
    /* the route-tie replay (recorded at the divergence for an MoE subject with taps): a refused
     * route is WRONG; a replayed judge that picks the subject's token is a ROUTE_TIE */
    const json_t *rp = json_object_get(j, "replay");
    double forced = 0, refused = 0, rgap = NAN;
    if (rp && (gate_metric_num(rp, "forced", &forced) || gate_metric_num(rp, "refused", &refused) ||
               !(forced >= 0 && forced == floor(forced)) ||
               !(refused >= 0 && refused == floor(refused)))) {
        gate_say(why, n, "case '%s': its route-tie replay record is malformed", name);
        goto done;
    }
    if (rp && refused > 0) {
        gate_say(
            why, n,
            "case '%s' differs at generated index %d (expected id %d, got %d) after the subject"
            " routed beyond the router near tie (%g refused pairs): WRONG",
            name, *k, (int)e[*k], (int)g[*k], refused);
        goto done;
    }
    if (rp && forced > 0 && !gate_metric_num(rp, "gap_got", &rgap) && rgap < near_tie) {
        cls = GOLDEN_ROUTE_TIE;
        gate_say(
            why, n,
            "case '%s': route near tie at index %d (expected id %d, got %d): the judge replayed"
            " on the subject's expert choices (%g forced) picks the subject's token (gap %.4g <"
            " near_tie %g)",
            name, *k, (int)e[*k], (int)g[*k], forced, rgap, near_tie);
        goto done;
    }
    if (margin < near_tie && gap_e < near_tie && gap_g < near_tie) {
        cls = GOLDEN_TIE_FLIP;
        gate_say(why, n,
                 "case '%s': tie flip at index %d (expected id %d, got %d; judge margin %.4g <"
                 " near_tie %g)",
                 name, *k, (int)e[*k], (int)g[*k], margin, near_tie);
    } else {
        gate_say(why, n,
                 "case '%s' differs at generated index %d (expected id %d, got %d) where the"
                 " judge's margin is %.4g (near_tie %g): WRONG",
                 name, *k, (int)e[*k], (int)g[*k], margin, near_tie);
    }
done:
    free(e);
    free(g);
    return cls;
}

enum gate_verdict golden_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                               char *why, size_t n)
{
    char first[320] = "", one[320];
    double tokens_d, near_tie, n_gen, eos_d;
    const char *gsha = json_string_value(json_object_get(settings, "goldens_sha256"));
    int fails = 0;
    if (gate_metric_num(settings, "tokens", &tokens_d) ||
        gate_metric_num(settings, "near_tie", &near_tie) || !gsha) {
        gate_say(why, n, "golden settings need tokens, near_tie and goldens_sha256");
        gate_check_bool(checks, "settings complete", 0);
        return GATE_FAIL;
    }
    const json_t *cases = json_object_get(metrics, "cases");
    if (gate_metric_num(metrics, "n_gen", &n_gen) || gate_metric_num(metrics, "eos", &eos_d) ||
        !json_is_array(cases)) {
        gate_say(why, n, "golden metrics lack n_gen, eos or cases");
        gate_check_bool(checks, "metrics complete", 0);
        return GATE_FAIL;
    }
    const char *source = golden_source_of(json_object_get(metrics, "recorded_by"));
    const char *rec_sha = json_string_value(json_object_get(metrics, "goldens_sha256"));
    const char *rec_source = json_string_value(json_object_get(metrics, "source"));
    if (!gate_check_str(checks, "goldens_sha256", rec_sha ? rec_sha : "", gsha) && !fails++)
        snprintf(first, sizeof first, "the goldens read (%.16s...) are not the pinned %.16s...",
                 rec_sha ? rec_sha : "none", gsha);
    if (!gate_check_num(checks, "n_gen", n_gen, "==", tokens_d) && !fails++)
        snprintf(first, sizeof first, "goldens hold %g tokens per case, settings ask for %g", n_gen,
                 tokens_d);
    if (!gate_check_str(checks, "source", rec_source ? rec_source : "",
                        source ? source : "(unknown recorded_by)") &&
        !fails++)
        snprintf(first, sizeof first, "recorded_by is unknown or does not match source '%s'",
                 rec_source ? rec_source : "");
    if (!gate_check_num(checks, "cases", (double)json_array_size(cases), ">=", 1) && !fails++)
        snprintf(first, sizeof first, "no golden cases: a vacuous run proves nothing");
    const int tokens = tokens_d >= 1 && tokens_d <= 1 << 20 ? (int)tokens_d : 0;
    const int32_t eos = eos_d >= 0 && eos_d <= INT32_MAX ? (int32_t)eos_d : -1;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        char metric[128];
        int k;
        enum golden_class cls = classify(c, tokens, near_tie, eos, &k, one, sizeof one);
        snprintf(metric, sizeof metric, "case %.60s", name ? name : "?");
        gate_check_bool(checks, metric, cls != GOLDEN_WRONG);
        if (cls == GOLDEN_TIE_FLIP) {
            double margin = NAN;
            gate_metric_num(json_object_get(c, "judge"), "margin", &margin);
            snprintf(metric, sizeof metric, "case %.60s tie flip at %d: judge margin", name, k);
            gate_check_num(checks, metric, margin, "<", near_tie);
        }
        if (cls == GOLDEN_WRONG && !fails++)
            snprintf(first, sizeof first, "%s", one);
    }
    if (!fails) {
        gate_say(why, n, "%s", "");
        return GATE_PASS;
    }
    gate_say(why, n, "%s", first);
    return GATE_FAIL;
}

/* The judge's top-1 / top-2 over logits x (V): lowest id on ties, as greedy decode picks. */
static void top2(const float *x, int V, int32_t *t1, int32_t *t2)
{
    int a = 0, b = -1;
    for (int i = 1; i < V; i++) {
        if (x[i] > x[a]) {
            b = a;
            a = i;
        } else if (b < 0 || x[i] > x[b]) {
            b = i;
        }
    }
    *t1 = a;
    *t2 = b < 0 ? a : b;
}

/* The judge's margins at index k of case c: one batched ref forward over prompt + expected[0..k),
 * read at its last position. */
static int judge_margin(struct backend *j, const struct golden_case *c, int k, const int32_t *got,
                        struct golden_case_result *x, struct gate_err *err)
{
    const int V = (int)j->model->hp.n_vocab, n = c->n_prompt + k;
    int32_t *seq = malloc((size_t)n * sizeof *seq);
    float *logits = malloc((size_t)n * (size_t)V * sizeof *logits);
    int rc = 0;
    if (!seq || !logits) {
        rc = err_set(err, ERR_ENV, "out of memory for the golden judge (%d tokens)", n);
        goto done;
    }
    memcpy(seq, c->prompt, (size_t)c->n_prompt * sizeof *seq);
    memcpy(seq + c->n_prompt, c->ids, (size_t)k * sizeof *seq);
    if ((rc = mode_judge(j, seq, n, logits, NULL, err)))
        goto done;
    const float *last = logits + (size_t)(n - 1) * V;
    top2(last, V, &x->top1, &x->top2);
    x->margin = (double)last[x->top1] - (double)last[x->top2];
    x->gap_expected = (double)last[x->top1] - (double)last[c->ids[k]];
    x->gap_got = got[k] >= 0 && got[k] < V ? (double)last[x->top1] - (double)last[got[k]] : NAN;
    x->have_margin = 1;
done:
    free(seq);
    free(logits);
    return rc;
}

/* The route-tie replay at index k of case c (MoE subject b with taps): the subject's routes over
 * prompt + ids[0..k) (one token at a time, as greedy decoding feeds them), then the judge j forced
 * to its near-tie choices (parity_replay_run); the replayed judge's view of the produced id. */
static int golden_replay(struct backend *b, struct backend *j, const struct model *m,
                         const struct golden_case *c, int k, struct golden_case_result *x,
                         struct gate_err *err)
{
    const struct model_hparams *hp = &m->hp;
    const int V = (int)hp->n_vocab, n = c->n_prompt + k;
    int32_t *seq = malloc((size_t)n * sizeof *seq);
    float *logits = malloc((size_t)n * (size_t)V * sizeof *logits);
    struct backend_taps st = {0}, rt = {0};
    int rc = 0;
    if (!seq || !logits) {
        rc = err_set(err, ERR_ENV, "out of memory for the golden route-tie replay (%d tokens)", n);
        goto done;
    }
    if ((rc = parity_routes_alloc(&st, hp, n, err)))
        goto done;
    memcpy(seq, c->prompt, (size_t)c->n_prompt * sizeof *seq);
    memcpy(seq + c->n_prompt, c->ids, (size_t)k * sizeof *seq);
    struct parity_route_replay rr;
    if ((rc = mode_run_split(b, MODE_DECODE, seq, n, NULL, 0, NULL, 0, logits, &st, err)) ||
        (rc = parity_replay_alloc(&rt, hp, n, err)) ||
        (rc = parity_replay_run(j, m, seq, n, &st, PARITY_ROUTE_TIE, &rt, logits, &rr, NULL, NULL,
                                err)))
        goto done;
    x->replayed = 1;
    x->replay_forced = rr.n_forced;
    x->replay_refused = rr.n_refused;
    const float *last = logits + (size_t)(n - 1) * V;
    int32_t t2;
    top2(last, V, &x->replay_top1, &t2);
    const int32_t got = x->got[k];
    x->replay_gap_got =
        got >= 0 && got < V ? (double)last[x->replay_top1] - (double)last[got] : NAN;
done:
    free(seq);
    free(logits);
    parity_replay_free(&st);
    parity_replay_free(&rt);
    return rc;
}

static json_t *case_json(const struct golden_case *c, const struct golden_case_result *x)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(x->name));
    json_object_set_new(o, "prompt_tokens", json_integer(c->n_prompt));
    json_object_set_new(o, "expected", ids_json(x->expected, x->n_expected));
    json_object_set_new(o, "got", ids_json(x->got, x->n_got));
    json_object_set_new(o, "first_diff", json_integer(x->first_diff)); /* informational */
    if (x->have_margin)
        json_object_set_new(o, "judge",
                            json_pack("{s:i, s:i, s:o, s:o, s:o}", "top1", (int)x->top1, "top2",
                                      (int)x->top2, "margin", parity_json_number(x->margin),
                                      "gap_expected", parity_json_number(x->gap_expected),
                                      "gap_got", parity_json_number(x->gap_got)));
    if (x->replayed && json_object_get(o, "judge"))
        json_object_set_new(json_object_get(o, "judge"), "replay",
                            json_pack("{s:i, s:i, s:i, s:o, s:f}", "forced", x->replay_forced,
                                      "refused", x->replay_refused, "top1", (int)x->replay_top1,
                                      "gap_got", parity_json_number(x->replay_gap_got), "route_tie",
                                      PARITY_ROUTE_TIE));
    if (c->expect_text)
        json_object_set_new(o, "expect_text", json_string(c->expect_text));
    if (x->expected_text)
        json_object_set_new(o, "expected_text", json_string(x->expected_text));
    if (x->got_text)
        json_object_set_new(o, "got_text", json_string(x->got_text));
    return o;
}

int golden_gate(const struct model *m, const struct mode *mode, const struct golden_set *g,
                const json_t *settings, int n_threads, struct golden_result *out,
                struct gate_err *err)
{
    struct backend *b = NULL, *j = NULL;
    struct tok *t = NULL;
    char sha[65];
    int rc = 0, longest = 0, n_gen = 0;
    memset(out, 0, sizeof *out);
    out->verdict = GATE_FAIL;
    mode_format(mode, out->mode, sizeof out->mode);
    golden_model_sha256(m, sha);
    if (strcmp(sha, g->sha256))
        return err_set(err, ERR_INPUT,
                       "goldens were recorded for model %s, not %s: refusing"
                       " to reuse them",
                       g->sha256, sha);
    if (g->n < 1 || !g->recorded_by)
        return err_set(err, ERR_INPUT,
                       "no validated golden cases to run (load them with"
                       " golden_load)");
    for (int i = 0; i < g->n; i++) {
        longest = g->c[i].n_prompt > longest ? g->c[i].n_prompt : longest;
        n_gen = g->c[i].n_ids > n_gen ? g->c[i].n_ids : n_gen;
    }
    t = model_tok(m);
    out->c = calloc((size_t)g->n, sizeof *out->c);
    json_t *cases = json_array();
    out->metrics = json_pack("{s:s, s:s, s:O, s:s, s:i, s:i, s:o}", "mode", out->mode, "source",
                             g->independent ? "independent" : "regression", "recorded_by",
                             g->recorded_by, "goldens_sha256", g->file_sha256, "n_gen", g->n_gen,
                             "eos", (int)g->eos, "cases", cases);
    out->checks = json_array();
    if (!out->c || !out->metrics || !out->checks) {
        rc = err_set(err, ERR_ENV, "golden: out of memory for the gate's metrics");
        goto done;
    }
    if ((rc = mode_open(&b, mode, m, longest + n_gen + 1, n_threads, NULL, err)))
        goto done;
    for (int i = 0; i < g->n; i++) {
        const struct golden_case *c = &g->c[i];
        struct golden_case_result *x = &out->c[i];
        out->n = i + 1;
        snprintf(x->name, sizeof x->name, "%s", c->name);
        x->expected = malloc((size_t)c->n_ids * sizeof *x->expected);
        x->got = malloc((size_t)c->n_ids * sizeof *x->got);
        if (!x->expected || !x->got) {
            rc = err_set(err, ERR_ENV, "golden: out of memory for a case's ids");
            goto done;
        }
        memcpy(x->expected, c->ids, (size_t)c->n_ids * sizeof *c->ids);
        x->n_expected = c->n_ids;
        if ((rc = golden_generate(b, mode->path, c->prompt, c->n_prompt, c->n_ids, g->eos, x->got,
                                  &x->n_got, err)))
            goto done;
        x->first_diff = golden_first_diff(x->expected, x->n_expected, x->got, x->n_got);
        if (x->first_diff >= 0 && x->first_diff < x->n_expected && x->first_diff < x->n_got) {
            if (!j && (rc = mode_open_judge(&j, m, longest + n_gen, n_threads, err)))
                goto done;
            if ((rc = judge_margin(j, c, x->first_diff, x->got, x, err)))
                goto done;
            if (m->hp.n_expert > 0 && backend_records_taps(b) &&
                (rc = golden_replay(b, j, m, c, x->first_diff, x, err)))
                goto done;
        }
        x->expected_text = text_of(t, x->expected, x->n_expected);
        x->got_text = text_of(t, x->got, x->n_got);
        json_array_append_new(cases, case_json(c, x));
    }
    /* the verdict is the judge's, over exactly the metrics recorded */
    char why[320] = "";
    out->verdict = golden_judge(settings, out->metrics, out->checks, why, sizeof why);
    out->pass = out->verdict == GATE_PASS;
    double near_tie = NAN, tokens = 0;
    gate_metric_num(settings, "near_tie", &near_tie);
    gate_metric_num(settings, "tokens", &tokens);
    for (int i = 0; i < out->n; i++) {
        struct golden_case_result *x = &out->c[i];
        int k;
        x->cls =
            classify(json_array_get(cases, (size_t)i), (int)tokens, near_tie, g->eos, &k, NULL, 0);
        x->pass = x->cls != GOLDEN_WRONG;
        out->n_tie_flip += x->cls == GOLDEN_TIE_FLIP;
        out->n_route_tie += x->cls == GOLDEN_ROUTE_TIE;
    }
    if (out->pass)
        snprintf(out->reason, sizeof out->reason,
                 "PASS: %d %s golden continuations reproduced"
                 " (%d tie flips, %d route near ties replayed)",
                 g->n, g->independent ? "independent" : "regression", out->n_tie_flip,
                 out->n_route_tie);
    else
        snprintf(out->reason, sizeof out->reason, "FAIL: %.300s", why);
done:
    backend_close(b);
    backend_close(j);
    tok_free(t);
    return rc;
}

json_t *golden_result_json(const struct golden_result *r)
{
    return r->metrics ? json_deep_copy(r->metrics) : json_object();
}
