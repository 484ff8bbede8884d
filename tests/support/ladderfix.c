/* ladderfix.c — the release fixture of ladderfix.h: keys, a stand-in build, the shared release
 * ladder, fabricated receipts signed through the store, the release judged as the stand-in
 * build, raw SQLite access for tampering, a shell helper, the goldens cache, and the folders
 * the test processes of one runner build once and share (ladderfix_once).
 * Start reading: ladderfix_add().
 */
#include "tests/support/ladderfix.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/gatedef.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "oracles/golden.h"
#include "receipts/store.h"
#include "tests/support/check.h"
#include "tests/support/conformance.h"

void ladderfix_init(struct ladderfix *fx, const char *tag)
{
    char dir[600];
    check_make_dir(dir, sizeof dir, tag);
    ladderfix_init_in(fx, dir);
}

void ladderfix_init_in(struct ladderfix *fx, const char *dir)
{
    memset(fx, 0, sizeof *fx);
    cr_assert(strlen(dir) < sizeof fx->dir, "scratch folder name too long: %s", dir);
    snprintf(fx->dir, sizeof fx->dir, "%s", dir);
    struct gate_err err = {0};
    cr_assert_eq(key_generate(ladderfix_path(fx, "a.key"), "a", &fx->key_a, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(key_generate(ladderfix_path(fx, "b.key"), "b", &fx->key_b, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(key_write_public(ladderfix_path(fx, "a.pub"), &fx->key_a, &err), 0, "%s", err.msg);
    cr_assert_eq(key_write_public(ladderfix_path(fx, "b.pub"), &fx->key_b, &err), 0, "%s", err.msg);
    snprintf(fx->self.version, sizeof fx->self.version, "1.0.0");
    snprintf(fx->self.git_commit, sizeof fx->self.git_commit,
             "c0ffee0000000000000000000000000000000001");
    snprintf(fx->self.binary_sha256, sizeof fx->self.binary_sha256, "%064d", 0);
    snprintf(fx->self.source_sha256, sizeof fx->self.source_sha256, "%064d", 7);
    snprintf(fx->self.build_flags, sizeof fx->self.build_flags, "test stand-in");
}

const char *ladderfix_path(const struct ladderfix *fx, const char *name)
{
    return check_path(fx->dir, name);
}

/* The anchors entry of ladderfix_add_anchor: the last entry of a ladder file. */
static void write_anchor(FILE *f)
{
    fprintf(f,
            "anchors:\n  conf:\n    arch: qwen3moe\n    reference: test\n"
            "    model: {path: m.gguf, sha256: %064d}\n    tokens: {path: t.txt, sha256: %064d}\n"
            "    logits: {path: l.f32, sha256: %064d}\n"
            "    thresholds: {max_nmse: 1.0e-8, min_cosine: 0.999999, near_tie: 1.0e-3}\n",
            1, 2, 3);
}

/* A ladder file opened for writing at path, its first lines written: release rel 1.0.0, model moe
 * (the tiny MoE conformance model, pinned), host a (device none, trusting file:a.pub). */
static FILE *open_ladder(const char *path)
{
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write '%s'", path);
    fprintf(f,
            "release: {name: rel, version: 1.0.0}\n"
            "models:\n  moe: {path: %s/conformance/qwen3moe-tiny-q4_k_m/model.gguf,"
            " sha256: " LADDERFIX_MOE_SHA ", arch: qwen3moe}\n"
            "hosts:\n  a: {device: none, trust: ['file:a.pub']}\n",
            check_shared_dir());
    return f;
}

const char *ladderfix_ladder(const struct ladderfix *fx, const char *name,
                             const char *exclude_reason, int anchor)
{
    const char *path = ladderfix_path(fx, name);
    FILE *f = open_ladder(path);
    fprintf(f, "  b: {device: none, trust: ['file:b.pub']}\n"
               "modes: [ref.decode, ref.chat]\n"
               "cells:\n  - {models: [moe], hosts: [a], modes: [ref.decode, ref.chat]");
    if (exclude_reason)
        fprintf(f, ", exclude: [{mode: ref.chat, reason: \"%s\"}]", exclude_reason);
    fprintf(f, "}\n"
               "  - {model: moe, host: b, mode: ref.decode}\n"
               "gates:\n  defaults:\n    golden: {goldens: g.json, sha256: " LADDERFIX_GOLDENS_SHA
               "}\n");
    if (anchor)
        write_anchor(f);
    else
        fprintf(f, "unanchored: {qwen3moe: 'release fixture: recorded numbers only'}\n");
    cr_assert_eq(fclose(f), 0, "cannot write '%s'", path);
    return path;
}

const char *ladderfix_one_cell(const struct ladderfix *fx, const char *name, const char *top,
                               const char *mode, const char *cell_extra, const char *defaults)
{
    char golden[160] = "";
    if (!defaults || !strstr(defaults, "    golden:")) {
        char sha[65];
        ladderfix_record_goldens(conformance_path("qwen3moe-tiny-q4_k_m", "model.gguf"),
                                 ladderfix_path(fx, "moe-goldens.json"), 16, sha);
        snprintf(golden, sizeof golden, "    golden: {goldens: moe-goldens.json, sha256: %s}\n",
                 sha);
    }
    const char *path = ladderfix_path(fx, name);
    FILE *f = open_ladder(path);
    fprintf(f,
            "%s"
            "modes: [%s]\n"
            "cells:\n  - {model: moe, host: a, mode: %s%s}\n"
            "gates:\n  defaults:\n    parity: {positions: 64}\n%s%s"
            "unanchored: {qwen3moe: 'a one-cell test ladder'}\n",
            top ? top : "", mode, mode, cell_extra ? cell_extra : "", golden,
            defaults ? defaults : "");
    cr_assert_eq(fclose(f), 0, "cannot write '%s'", path);
    return path;
}

/* Copy the file src to dst (replaced); 0, or -1 when src cannot be read or dst written. */
static int copy_file(const char *src, const char *dst)
{
    size_t n = 0;
    uint8_t *bytes = check_slurp(src, &n);
    if (!bytes)
        return -1;
    FILE *f = fopen(dst, "wb");
    int rc = f && fwrite(bytes, 1, n, f) == n ? 0 : -1;
    if (f && fclose(f))
        rc = -1;
    free(bytes);
    return rc;
}

/* Where ladderfix_record_goldens keeps what it recorded (the runner's shared folder, else this
 * process's scratch folder): cache (n bytes) gets the file for the model digest msha and n_gen. */
static void goldens_cache(char *cache, size_t n, const char *msha, int n_gen)
{
    const char *shared = getenv("GATE_LADDERFIX_SHARED");
    char dir[900];
    snprintf(dir, sizeof dir, "%s/goldens-cache", shared && *shared ? shared : check_tmp_dir());
    if (mkdir(dir, 0700) && errno != EEXIST)
        cr_assert_fail("cannot make the goldens cache '%s': %s", dir, strerror(errno));
    snprintf(cache, n, "%s/%s-%d.json", dir, msha, n_gen);
}

void ladderfix_record_goldens(const char *model_path, const char *out_path, int n_gen, char sha[65])
{
    struct gate_err err = {0};
    struct stat sb;
    char msha[65], cache[1100] = "";
    /* a new goldens file for model bytes recorded before is the same file: copy it (the twin's
     * greedy continuations are deterministic; the recording costs seconds under ASan) */
    if (stat(out_path, &sb) != 0 && identity_file_sha256(model_path, msha, NULL) == 0)
        goldens_cache(cache, sizeof cache, msha, n_gen);
    if (!cache[0] || copy_file(cache, out_path) != 0) {
        struct model *m = NULL;
        cr_assert_eq(model_load(&m, model_path, &err), 0, "%s", err.msg);
        const int rc = golden_record(out_path, m, n_gen, 1, &err);
        model_free(m);
        if (rc && !strstr(err.msg, "already")) /* an entry for the model is kept */
            cr_assert_fail("recording goldens into '%s': %s", out_path, err.msg);
        if (cache[0]) { /* whole or not at all: another process may read it now */
            char tmp[1200];
            snprintf(tmp, sizeof tmp, "%s.%d", cache, (int)getpid());
            if (copy_file(out_path, tmp) || rename(tmp, cache))
                unlink(tmp);
        }
    }
    cr_assert_eq(identity_file_sha256(out_path, sha, &err), 0, "%s", err.msg);
}

void ladderfix_alter_goldens(const char *path, char sha[65])
{
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    cr_assert(doc, "goldens '%s': %s", path, je.text);
    const char *digest;
    json_t *entry;
    json_object_foreach(json_object_get(doc, "models"), digest, entry)
    {
        json_t *ids = json_object_get(json_array_get(json_object_get(entry, "cases"), 0), "ids");
        cr_assert(json_is_integer(json_array_get(ids, 0)), "goldens '%s': no ids for %s", path,
                  digest);
        json_array_set_new(ids, 0, json_integer(json_integer_value(json_array_get(ids, 0)) + 1));
    }
    cr_assert_eq(json_dump_file(doc, path, JSON_INDENT(2) | JSON_SORT_KEYS), 0, "cannot write '%s'",
                 path);
    json_decref(doc);
    struct gate_err err = {0};
    cr_assert_eq(identity_file_sha256(path, sha, &err), 0, "%s", err.msg);
}

void ladderfix_add_anchor(const char *path)
{
    size_t n = 0;
    char *old = (char *)check_slurp(path, &n);
    cr_assert(old, "cannot read '%s'", path);
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write '%s'", path);
    for (char *line = old; *line;) {
        char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
        if (strncmp(line, "unanchored:", 11))
            fwrite(line, 1, len, f);
        line += len;
    }
    write_anchor(f);
    cr_assert_eq(fclose(f), 0, "cannot write '%s'", path);
    free(old);
}

void ladderfix_drop_anchor(const char *path, const char *reason)
{
    size_t n = 0;
    char *old = (char *)check_slurp(path, &n);
    cr_assert(old, "cannot read '%s'", path);
    char *at = !strncmp(old, "anchors:", 8) ? old : strstr(old, "\nanchors:");
    cr_assert(at, "'%s' has no anchors entry to drop", path);
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write '%s'", path);
    fwrite(old, 1, (size_t)(at - old) + (at == old ? 0 : 1), f);
    fprintf(f, "unanchored: {qwen3moe: '%s'}\n", reason);
    cr_assert_eq(fclose(f), 0, "cannot write '%s'", path);
    free(old);
}

/* What the subject of cell c reported in one gate's metrics.ran (see ladderfix_fake). */
static void set_ran(json_t *ran, const struct ladder_cell *c, struct ladderfix_fake fk)
{
    cr_assert(ran, "release_metrics.json: a gate without metrics.ran");
    json_object_set_new(ran, "backend", json_stringn(c->mode, strcspn(c->mode, ".")));
    const char *kv = fk.ran_kv ? fk.ran_kv : c->v.at[CELL_KV] == KV_F16 ? "f16" : NULL;
    if (kv)
        json_object_set_new(ran, "kv", json_string(kv));
}

int64_t ladderfix_add(const struct ladderfix *fx, const char *ladder_path, const char *db,
                      const struct key_pair *k, int ci, struct ladderfix_fake fk)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_assert_eq(ladder_load(&l, ladder_path, &err), 0, "%s", err.msg);
    cr_assert(ci >= 0 && ci < l->n_cells, "cell %d of %d", ci, l->n_cells);
    const struct ladder_cell *c = &l->cells[ci];
    struct identity id = fx->self;
    if (fk.commit)
        snprintf(id.git_commit, sizeof id.git_commit, "%s", fk.commit);
    id.git_dirty = fk.dirty;
    if (fk.binary_sha256)
        snprintf(id.binary_sha256, sizeof id.binary_sha256, "%s", fk.binary_sha256);
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/release_metrics.json", GATE_SOURCE_DIR);
    json_error_t je;
    json_t *metrics = json_load_file(path, 0, &je), *gates = json_object();
    cr_assert(metrics, "%s: %s", path, je.text);
    static const char *const names[] = {"capability", "parity", "golden", "throughput", "falsify"};
    int all_pass = 1;
    for (int g = 0; !fk.no_gates && g < 5; g++) {
        struct ladder_gates lg = c->g;
        if (fk.min_cosine != 0)
            lg.min_cosine = fk.min_cosine;
        json_t *m = json_deep_copy(json_object_get(metrics, names[g]));
        set_ran(json_object_get(m, "ran"), c, fk);
        if (g == 1 && c->v.at[CELL_KV] == KV_F16) /* an F16-KV run records its cache's rounding */
            json_object_set_new(m, "kv_f16_rounding",
                                json_pack("{s:b, s:s}", "measured", 0, "why",
                                          "not decidable: the recorded metrics' model"));
        if (fk.fail && g == 1) {
            json_t *pp = json_object_get(m, "per_position");
            json_array_set_new(json_object_get(pp, "cosine"), 5, json_real(0.42));
            json_array_set_new(json_object_get(pp, "class"), 7, json_string("TIE_FLIP"));
            json_object_set_new(m, "n_tie_flip", json_integer(1));
            json_object_set_new(
                m, "localization",
                json_pack(
                    "{s:i, s:i, s:[{s:i, s:f, s:f, s:i, s:i, s:i, s:i, s:i, s:f},"
                    " {s:i, s:f, s:f, s:i, s:i, s:i, s:i, s:i, s:f}]}",
                    "first_bad_layer", 1, "at_position", 5, "layers", "layer", 0, "hidden_cosine",
                    1.0, "hidden_cosine_min", 1.0, "hidden_cosine_min_position", 0,
                    "same_expert_set", 96, "different_expert_set", 0, "different_near_tie", 0,
                    "first_different_position", -1, "ref_router_gap_min", 0.01, "layer", 1,
                    "hidden_cosine", 0.93, "hidden_cosine_min", 0.42, "hidden_cosine_min_position",
                    5, "same_expert_set", 90, "different_expert_set", 6, "different_near_tie", 0,
                    "first_different_position", 5, "ref_router_gap_min", 0.02));
        }
        if (fk.golden_diff && g == 2) {
            json_t *c0 = json_array_get(json_object_get(m, "cases"), 0);
            json_t *got = json_object_get(c0, "got");
            cr_assert(json_array_size(got) > 3, "release_metrics.json: no golden case to alter");
            json_array_set_new(got, 3,
                               json_integer(json_integer_value(json_array_get(got, 3)) + 1));
            json_object_set_new(c0, "first_diff", json_integer(3));
        }
        json_t *row = gatedef_row(names[g], c->mode, ladder_gate_settings(&lg, names[g]), m, NULL);
        if (fk.claim_pass)
            json_object_set_new(row, "verdict", json_string("PASS"));
        all_pass &= !strcmp(json_string_value(json_object_get(row, "verdict")), "PASS");
        json_object_set_new(gates, names[g], row);
    }
    json_decref(metrics);
    json_t *p = json_pack(
        "{s:{s:s, s:s, s:s, s:s}, s:{s:s, s:s, s:s}, s:{s:{s:s, s:s}, s:o}, s:{s:s, s:s},"
        " s:o, s:s}",
        "ladder", "name", fk.release_name ? fk.release_name : l->name, "version",
        fk.release_version ? fk.release_version : l->version, "sha256", l->sha256, "trust_sha256",
        fk.trust_sha256 ? fk.trust_sha256 : l->trust_sha256, "cell", "model",
        l->models[c->model].id, "host", l->hosts[c->host].id, "mode", c->mode, "subject", "model",
        "id", l->models[c->model].id, "sha256", fk.sha ? fk.sha : l->models[c->model].sha256,
        "engine", identity_json(&id), "environment", "host", l->hosts[c->host].id, "hostname",
        fk.env_host ? fk.env_host : l->hosts[c->host].id, "gates", gates, "verdict",
        (all_pass && !fk.no_gates) || fk.claim_pass ? "PASS" : "FAIL");
    cr_assert(p, "cannot build the receipt payload");
    if (fk.no_dirty_field)
        cr_assert_eq(
            json_object_del(json_object_get(json_object_get(p, "subject"), "engine"), "git_dirty"),
            0, "identity_json wrote no git_dirty to remove");
    const char *cell_kv = fk.cell_kv ? fk.cell_kv : c->v.at[CELL_KV] == KV_F16 ? "f16" : NULL;
    if (cell_kv)
        json_object_set_new(json_object_get(p, "cell"), "kv", json_string(cell_kv));
    struct store *st = NULL;
    cr_assert_eq(store_open(&st, db, &err), 0, "%s", err.msg);
    int64_t rid = 0;
    cr_assert_eq(store_append(st, p, k, &rid, &err), 0, "%s", err.msg);
    store_close(st);
    json_decref(p);
    ladder_free(l);
    return rid;
}

void ladderfix_evaluate(const struct ladderfix *fx, const char *ladder_path, const char *db,
                        struct ladder **lp, struct release_result *r)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    struct store *st = NULL;
    struct release_options o = {.ladder = ladder_path, .db = db};
    cr_assert_eq(ladder_load(&l, ladder_path, &err), 0, "%s", err.msg);
    cr_assert_eq(store_open_readonly(&st, db, &err), 0, "%s", err.msg);
    cr_assert_eq(release_evaluate(l, st, &fx->self, &o, r, &err), 0, "%s", err.msg);
    store_close(st);
    if (lp)
        *lp = l;
    else
        ladder_free(l);
}

struct sqlite3 *ladderfix_open_raw(const char *db)
{
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK, "cannot open '%s'", db);
    sqlite3_stmt *q = NULL;
    cr_assert_eq(
        sqlite3_prepare_v2(h, "SELECT name FROM sqlite_master WHERE type='trigger'", -1, &q, NULL),
        SQLITE_OK);
    char drops[16][160];
    int nd = 0;
    while (sqlite3_step(q) == SQLITE_ROW && nd < 16)
        snprintf(drops[nd++], sizeof drops[0], "DROP TRIGGER \"%s\"", sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    for (int i = 0; i < nd; i++) {
        char *msg = NULL;
        cr_assert_eq(sqlite3_exec(h, drops[i], NULL, NULL, &msg), SQLITE_OK, "%s", msg ? msg : "?");
    }
    return h;
}

int ladderfix_sh(const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    cr_assert(n >= 0 && (size_t)n < sizeof cmd, "command line too long");
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- what the test processes of one runner share ------------------------------------------- */

#define SHARED_ENV "GATE_LADDERFIX_SHARED"

void ladderfix_share_begin(void)
{
    /* the runner: no Criterion assertion here, a failure leaves each process on its own */
    static char dir[600];
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/gate-shared-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr,
                "ladderfix: cannot make a shared folder '%s' (%s): each test builds its own"
                " fixture\n",
                dir, strerror(errno));
        return;
    }
    setenv(SHARED_ENV, dir, 1);
}

void ladderfix_share_end(void)
{
    const char *dir = getenv(SHARED_ENV);
    if (!dir || !*dir)
        return;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "ladderfix: could not remove %s\n", dir);
    unsetenv(SHARED_ENV);
}

const char *ladderfix_once(const char *name, void (*build)(const char *dir, void *ctx), void *ctx,
                           char out[1024])
{
    const char *shared = getenv(SHARED_ENV);
    const char *root = shared && *shared ? shared : check_tmp_dir();
    char lock[1100], done[1100];
    cr_assert(snprintf(out, 1024, "%s/%s", root, name) < 1024, "fixture path too long");
    snprintf(lock, sizeof lock, "%s/.lock-%s", root, name);
    snprintf(done, sizeof done, "%s/.done", out);
    /* one lock per fixture: a build may use another fixture */
    const int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    cr_assert_geq(fd, 0, "cannot open the fixture lock '%s': %s", lock, strerror(errno));
    int rc;
    while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR)
        ;
    cr_assert_eq(rc, 0, "cannot lock '%s': %s", lock, strerror(errno));
    if (access(done, F_OK) != 0) {
        /* never built, or a build that failed: start over from an empty folder */
        cr_assert_eq(ladderfix_sh("rm -rf '%s'", out), 0, "cannot clear '%s'", out);
        cr_assert_eq(mkdir(out, 0700), 0, "cannot make '%s': %s", out, strerror(errno));
        build(out, ctx);
        FILE *f = fopen(done, "w");
        cr_assert(f && fclose(f) == 0, "cannot mark '%s' built", out);
    }
    flock(fd, LOCK_UN);
    close(fd);
    return out;
}
