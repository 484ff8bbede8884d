/* ladderfix.c — the release fixture of ladderfix.h: keys, a stand-in build, fabricated receipts
 * signed through the store, raw SQLite access for tampering, a shell helper.
 * Start reading: ladderfix_add().
 */
#include "tests/support/ladderfix.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "harness/gatedef.h"
#include "harness/ladder.h"
#include "receipts/store.h"
#include "tests/support/check.h"

void ladderfix_init(struct ladderfix *fx, const char *tag)
{
    memset(fx, 0, sizeof *fx);
    snprintf(fx->dir, sizeof fx->dir, "%s/%sXXXXXX", check_tmp_dir(), tag);
    cr_assert(mkdtemp(fx->dir), "cannot make a scratch folder under %s", check_tmp_dir());
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
    static char buf[8][1024];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", fx->dir, name);
    return buf[k];
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
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/release_metrics.json", GATE_SOURCE_DIR);
    json_error_t je;
    json_t *metrics = json_load_file(path, 0, &je), *gates = json_object();
    cr_assert(metrics, "%s: %s", path, je.text);
    static const char *const names[] = {"capability", "parity", "golden", "throughput", "falsify"};
    int all_pass = 1;
    for (int g = 0; g < 5; g++) {
        json_t *m = json_deep_copy(json_object_get(metrics, names[g]));
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
        json_t *row =
            gatedef_row(names[g], c->mode, ladder_gate_settings(&c->g, names[g]), m, NULL);
        all_pass &= !strcmp(json_string_value(json_object_get(row, "verdict")), "PASS");
        json_object_set_new(gates, names[g], row);
    }
    json_decref(metrics);
    json_t *p = json_pack(
        "{s:{s:s, s:s, s:s, s:s}, s:{s:s, s:s, s:s}, s:{s:{s:s, s:s}, s:o}, s:{s:s, s:s},"
        " s:o, s:s}",
        "ladder", "name", l->name, "version", l->version, "sha256", l->sha256, "trust_sha256",
        l->trust_sha256, "cell", "model", l->models[c->model].id, "host", l->hosts[c->host].id,
        "mode", c->mode, "subject", "model", "id", l->models[c->model].id, "sha256",
        l->models[c->model].sha256, "engine", identity_json(&id), "environment", "host",
        l->hosts[c->host].id, "hostname", fk.env_host ? fk.env_host : l->hosts[c->host].id, "gates",
        gates, "verdict", all_pass ? "PASS" : "FAIL");
    cr_assert(p, "cannot build the receipt payload");
    struct store *st = NULL;
    cr_assert_eq(store_open(&st, db, &err), 0, "%s", err.msg);
    int64_t rid = 0;
    cr_assert_eq(store_append(st, p, k, &rid, &err), 0, "%s", err.msg);
    store_close(st);
    json_decref(p);
    ladder_free(l);
    return rid;
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
