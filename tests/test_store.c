/* test_store.c — the SQLite receipt store: append + verify, append-only triggers, tampering
 * with raw SQL detected, two processes appending at once, export -> import, forged and
 * truncated exports refused whole, schema version, sign-offs; issue 11: chains per key linked by
 * recomputed hashes, the store audit, import conflicts and forks, head records, read-only use,
 * the export's temporary file, bounded import lines.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "receipts/key.h"
#include "receipts/receipt.h"
#include "receipts/store.h"
#include "tests/support/check.h"

static void tmp_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", check_tmp_dir(), name);
}

static struct key_pair make_key(const char *name, const char *host)
{
    char path[512];
    struct key_pair k;
    struct gate_err err = {0};
    tmp_path(path, sizeof path, name);
    cr_assert_eq(key_generate(path, host, &k, &err), 0, "%s", err.msg);
    return k;
}

static struct store *open_db(const char *name)
{
    char path[512];
    struct store *s = NULL;
    struct gate_err err = {0};
    tmp_path(path, sizeof path, name);
    cr_assert_eq(store_open(&s, path, &err), 0, "%s", err.msg);
    return s;
}

static json_t *payload(const char *model, const char *verdict, int i)
{
    return json_pack("{s:{s:s, s:s, s:s}, s:s, s:i, s:{s:{s:s, s:[{s:s, s:f, s:s, s:f, s:b}]}}}",
                     "cell", "model", model, "host", "local", "mode", "ref.decode", "verdict",
                     verdict, "run", i, "gates", "parity", "verdict", verdict, "checks", "metric",
                     "min_cosine", "value", strcmp(verdict, "PASS") ? 0.5 : 0.9999, "op",
                     ">=", "threshold", 0.999, "pass", !strcmp(verdict, "PASS"));
}

static int64_t append(struct store *s, const struct key_pair *k, const char *model,
                      const char *verdict, int i)
{
    struct gate_err err = {0};
    int64_t id = 0;
    json_t *p = payload(model, verdict, i);
    cr_assert_eq(store_append(s, p, k, &id, &err), 0, "%s", err.msg);
    json_decref(p);
    return id;
}

struct tally {
    int rows, sig_ok, chain_ok, columns_ok, imported;
    int64_t first_bad;
    char problem[256];
};

static int count_row(void *ctx, const struct store_row *r)
{
    struct tally *t = ctx;
    t->rows++;
    t->sig_ok += r->sig_ok;
    t->chain_ok += r->chain_ok;
    t->columns_ok += r->columns_ok;
    t->imported += r->imported;
    if (!(r->sig_ok && r->chain_ok && r->columns_ok) && !t->first_bad) {
        t->first_bad = r->id;
        snprintf(t->problem, sizeof t->problem, "%s", r->problem);
    }
    return 0;
}

static struct tally tally_of(struct store *s)
{
    struct tally t = {0};
    struct gate_err err = {0};
    cr_assert_eq(store_foreach(s, count_row, &t, &err), 0, "%s", err.msg);
    return t;
}

static void raw_exec(const char *name, const char *sql, int expect_ok)
{
    char path[512];
    sqlite3 *db;
    char *msg = NULL;
    tmp_path(path, sizeof path, name);
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (expect_ok)
        cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, msg ? msg : "");
    else
        cr_assert_neq(rc, SQLITE_OK, "raw SQL was allowed: %s", sql);
    sqlite3_free(msg);
    sqlite3_close(db);
}

Test(store, append_then_every_row_verifies)
{
    struct key_pair k = make_key("a.key", "local");
    struct store *s = open_db("a.db");
    for (int i = 0; i < 5; i++)
        cr_assert_eq(append(s, &k, "tiny", i == 3 ? "FAIL" : "PASS", i), i + 1);
    struct tally t = tally_of(s);
    cr_assert_eq(t.rows, 5);
    cr_assert_eq(t.sig_ok, 5, "%s", t.problem);
    cr_assert_eq(t.chain_ok, 5, "%s", t.problem);
    cr_assert_eq(t.columns_ok, 5, "%s", t.problem);
    store_close(s);
}

struct first {
    char payload[4096];
    char hash[65], prev[65], cell[256], verdict[16], key_id[80];
};

static int grab(void *ctx, const struct store_row *r)
{
    struct first *f = ctx;
    snprintf(f->payload, sizeof f->payload, "%s", r->payload);
    memcpy(f->hash, r->hash, 65);
    memcpy(f->prev, r->prev_hash, 65);
    snprintf(f->cell, sizeof f->cell, "%s", r->cell);
    snprintf(f->verdict, sizeof f->verdict, "%s", r->verdict);
    snprintf(f->key_id, sizeof f->key_id, "%s", r->key_id);
    return 0;
}

Test(store, append_sets_chain_key_and_columns)
{
    struct key_pair k = make_key("c.key", "local");
    struct store *s = open_db("c.db");
    append(s, &k, "tiny", "PASS", 0);
    append(s, &k, "tiny", "FAIL", 1);
    struct first a, b;
    struct gate_err err = {0};
    cr_assert_eq(store_get(s, 1, grab, &a, &err), 0, "%s", err.msg);
    cr_assert_eq(store_get(s, 2, grab, &b, &err), 0, "%s", err.msg);
    cr_assert_str_eq(a.prev, RECEIPT_GENESIS_HASH);
    cr_assert_str_eq(b.prev, a.hash);
    cr_assert_str_eq(b.cell, "tiny/local/ref.decode");
    cr_assert_str_eq(b.verdict, "FAIL");
    cr_assert_str_eq(b.key_id, k.id);
    json_t *p = NULL;
    cr_assert_eq(receipt_parse(b.payload, strlen(b.payload), &p, &err), 0, "%s", err.msg);
    cr_assert_str_eq(json_string_value(json_object_get(p, "key_id")), k.id);
    cr_assert_str_eq(json_string_value(json_object_get(p, "prev_hash")), a.hash);
    cr_assert_eq(json_integer_value(json_object_get(p, "schema_version")), RECEIPT_SCHEMA_VERSION);
    cr_assert_eq(strlen(json_string_value(json_object_get(p, "nonce"))), 32);
    json_decref(p);
    cr_assert_eq(store_get(s, 3, grab, &a, &err), ERR_INPUT);
    store_close(s);
}

Test(store, refuses_a_payload_without_cell_or_verdict)
{
    struct key_pair k = make_key("r.key", "local");
    struct store *s = open_db("r.db");
    struct gate_err err = {0};
    json_t *p = json_pack("{s:s}", "verdict", "PASS");
    cr_assert_eq(store_append(s, p, &k, NULL, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "cell"), "%s", err.msg);
    json_decref(p);
    cr_assert_eq(tally_of(s).rows, 0);
    store_close(s);
}

Test(store, update_and_delete_are_refused)
{
    struct key_pair k = make_key("u.key", "local");
    struct store *s = open_db("u.db");
    append(s, &k, "tiny", "FAIL", 0);
    store_close(s);
    raw_exec("u.db", "UPDATE receipts SET verdict = 'PASS'", 0);
    raw_exec("u.db", "UPDATE receipts SET payload = replace(payload, 'FAIL', 'PASS')", 0);
    raw_exec("u.db", "DELETE FROM receipts", 0);
    s = open_db("u.db");
    struct tally t = tally_of(s);
    cr_assert_eq(t.rows, 1);
    cr_assert_eq(t.sig_ok + t.chain_ok + t.columns_ok, 3);
    store_close(s);
}

Test(store, editing_the_payload_behind_the_triggers_is_detected)
{
    struct key_pair k = make_key("t.key", "local");
    struct store *s = open_db("t.db");
    append(s, &k, "tiny", "PASS", 0);
    append(s, &k, "tiny", "FAIL", 1);
    append(s, &k, "tiny", "PASS", 2);
    store_close(s);
    raw_exec("t.db",
             "DROP TRIGGER receipts_no_update;"
             "UPDATE receipts SET payload = replace(payload, '\"FAIL\"', '\"PASS\"'),"
             " verdict = 'PASS' WHERE id = 2;",
             1);
    s = open_db("t.db");
    struct tally t = tally_of(s);
    cr_assert_eq(t.first_bad, 2);
    cr_assert_eq(t.sig_ok, 2, "the edited receipt still verifies");
    cr_assert(strstr(t.problem, "signature"), "%s", t.problem);
    store_close(s);
}

Test(store, deleting_a_receipt_by_recreating_the_table_breaks_the_chain)
{
    struct key_pair k = make_key("x.key", "local");
    struct store *s = open_db("x.db");
    for (int i = 0; i < 4; i++)
        append(s, &k, "tiny", i == 1 ? "FAIL" : "PASS", i);
    store_close(s);
    raw_exec("x.db",
             "CREATE TABLE r2 AS SELECT * FROM receipts WHERE id <> 2;"
             "DROP TABLE receipts; ALTER TABLE r2 RENAME TO receipts;",
             1);
    s = open_db("x.db");
    struct tally t = tally_of(s);
    cr_assert_eq(t.rows, 3);
    cr_assert_eq(t.sig_ok, 3);
    cr_assert_eq(t.chain_ok, 2);
    cr_assert_eq(t.first_bad, 3);
    cr_assert(strstr(t.problem, "chain"), "%s", t.problem);
    store_close(s);
}

Test(store, a_convenience_column_edit_is_detected)
{
    struct key_pair k = make_key("col.key", "local");
    struct store *s = open_db("col.db");
    append(s, &k, "tiny", "FAIL", 0);
    store_close(s);
    raw_exec("col.db", "DROP TRIGGER receipts_no_update; UPDATE receipts SET verdict = 'PASS';", 1);
    s = open_db("col.db");
    struct tally t = tally_of(s);
    cr_assert_eq(t.sig_ok, 1);
    cr_assert_eq(t.columns_ok, 0);
    cr_assert(strstr(t.problem, "columns"), "%s", t.problem);
    store_close(s);
}

Test(store, two_processes_append_concurrently)
{
    char path[512];
    tmp_path(path, sizeof path, "conc.db");
    struct key_pair k1 = make_key("p1.key", "local"), k2 = make_key("p2.key", "local");
    pid_t pids[2];
    for (int p = 0; p < 2; p++) {
        pids[p] = fork();
        cr_assert(pids[p] >= 0);
        if (pids[p] == 0) {
            struct store *s = NULL;
            struct gate_err err = {0};
            int bad = store_open(&s, path, &err) != 0;
            for (int i = 0; i < 20 && !bad; i++) {
                json_t *pl = payload(p ? "dense" : "moe", "PASS", i);
                bad = store_append(s, pl, p ? &k2 : &k1, NULL, &err) != 0;
                json_decref(pl);
            }
            if (bad)
                fprintf(stderr, "child %d: %s\n", p, err.msg);
            store_close(s);
            _exit(bad);
        }
    }
    for (int p = 0; p < 2; p++) {
        int status = 0;
        cr_assert_eq(waitpid(pids[p], &status, 0), pids[p]);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d failed", p);
    }
    struct store *s = open_db("conc.db");
    struct tally t = tally_of(s);
    cr_assert_eq(t.rows, 40);
    cr_assert_eq(t.sig_ok, 40, "%s", t.problem);
    cr_assert_eq(t.chain_ok, 40, "%s", t.problem);
    cr_assert_eq(t.columns_ok, 40, "%s", t.problem);
    store_close(s);
}

Test(store, export_then_import_into_a_fresh_store_verifies)
{
    struct key_pair ka = make_key("ea.key", "h200"), kb = make_key("eb.key", "local");
    struct store *a = open_db("ea.db"), *b = open_db("eb.db");
    char out[512];
    struct gate_err err = {0};
    int n = -1;
    for (int i = 0; i < 3; i++)
        append(a, &ka, "moe", "PASS", i);
    append(b, &kb, "dense", "PASS", 0);
    tmp_path(out, sizeof out, "ea.jsonl");
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    cr_assert_eq(store_import(b, out, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 3);
    /* the local chain continues across imports */
    append(b, &kb, "dense", "FAIL", 1);
    struct tally t = tally_of(b);
    cr_assert_eq(t.rows, 5);
    cr_assert_eq(t.imported, 3);
    cr_assert_eq(t.sig_ok + t.chain_ok + t.columns_ok, 15, "%s", t.problem);
    /* importing again adds nothing */
    cr_assert_eq(store_import(b, out, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 0);
    /* a re-export of b imports into a third store, keeping both origins intact */
    struct store *c = open_db("ec.db");
    tmp_path(out, sizeof out, "eb.jsonl");
    cr_assert_eq(store_export(b, out, &err), 0, "%s", err.msg);
    cr_assert_eq(store_import(c, out, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 5);
    t = tally_of(c);
    cr_assert_eq(t.sig_ok + t.chain_ok + t.columns_ok, 15, "%s", t.problem);
    store_close(a);
    store_close(b);
    store_close(c);
}

/* Rewrite line `which` (1-based) of path through edit(). */
static void edit_line(const char *path, int which, void (*edit)(char *line))
{
    size_t n = 0;
    char *text = (char *)check_slurp(path, &n);
    cr_assert_not_null(text);
    FILE *f = fopen(path, "w");
    int line = 1;
    char *save = NULL;
    text = realloc(text, n + 1);
    text[n] = '\0';
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save), line++) {
        if (line == which)
            edit(l);
        if (*l)
            fprintf(f, "%s\n", l);
    }
    fclose(f);
    free(text);
}

/* Re-encode the payload with its verdict flipped, keeping the original signature. */
static void forge(char *line)
{
    json_t *env = json_loads(line, 0, NULL);
    const char *pb = json_string_value(json_object_get(env, "payload"));
    unsigned char bin[8192];
    size_t len = 0;
    cr_assert_eq(sodium_base642bin(bin, sizeof bin, pb, strlen(pb), NULL, &len, NULL,
                                   sodium_base64_VARIANT_ORIGINAL),
                 0);
    char *pos = memmem(bin, len, "\"verdict\":\"FAIL\"", 16);
    cr_assert_not_null(pos);
    memcpy(pos, "\"verdict\":\"PASS\"", 16);
    char b64[12000];
    sodium_bin2base64(b64, sizeof b64, bin, len, sodium_base64_VARIANT_ORIGINAL);
    json_object_set_new(env, "payload", json_string(b64));
    char *s = json_dumps(env, JSON_COMPACT | JSON_SORT_KEYS);
    cr_assert(strlen(s) <= strlen(line) + 8);
    strcpy(line, s);
    free(s);
    json_decref(env);
}

static void drop(char *line)
{
    line[0] = '\0';
}

Test(store, an_export_with_one_forged_receipt_is_refused_whole)
{
    struct key_pair k = make_key("fa.key", "h200");
    struct store *a = open_db("fa.db"), *b = open_db("fb.db");
    char out[512];
    struct gate_err err = {0};
    int n = -1;
    append(a, &k, "moe", "PASS", 0);
    append(a, &k, "moe", "FAIL", 1);
    append(a, &k, "moe", "PASS", 2);
    tmp_path(out, sizeof out, "forged.jsonl");
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    edit_line(out, 2, forge);
    cr_assert_eq(store_import(b, out, &n, &err), ERR_RUNTIME);
    cr_assert(strstr(err.msg, "forged.jsonl:2") && strstr(err.msg, "moe/local/ref.decode"), "%s",
              err.msg);
    cr_assert_eq(n, 0);
    cr_assert_eq(tally_of(b).rows, 0, "part of a forged file was imported");
    store_close(a);
    store_close(b);
}

Test(store, an_export_with_a_removed_receipt_is_refused_whole)
{
    struct key_pair k = make_key("da.key", "h200");
    struct store *a = open_db("da.db"), *b = open_db("db.db");
    char out[512];
    struct gate_err err = {0};
    append(a, &k, "moe", "PASS", 0);
    append(a, &k, "moe", "FAIL", 1);
    append(a, &k, "moe", "PASS", 2);
    tmp_path(out, sizeof out, "dropped.jsonl");
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    edit_line(out, 2, drop);
    cr_assert_eq(store_import(b, out, NULL, &err), ERR_RUNTIME);
    cr_assert(strstr(err.msg, "removed"), "%s", err.msg);
    cr_assert_eq(tally_of(b).rows, 0);
    store_close(a);
    store_close(b);
}

Test(store, refuses_a_newer_schema_and_a_foreign_database)
{
    struct store *s = open_db("v.db");
    store_close(s);
    raw_exec("v.db", "INSERT INTO schema_version VALUES (99, 'future')", 1);
    char path[512];
    struct gate_err err = {0};
    tmp_path(path, sizeof path, "v.db");
    cr_assert_eq(store_open(&s, path, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "newer"), "%s", err.msg);
    cr_assert_null(s);
    raw_exec("foreign.db", "CREATE TABLE t (x)", 1);
    err_clear(&err);
    tmp_path(path, sizeof path, "foreign.db");
    cr_assert_eq(store_open(&s, path, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "not a gate receipt store"), "%s", err.msg);
}

Test(store, signoff_is_signed_under_its_own_domain)
{
    struct key_pair k = make_key("so.key", "local");
    struct store *s = open_db("so.db");
    struct gate_err err = {0};
    append(s, &k, "tiny", "PASS", 0);
    json_t *p = json_pack("{s:s, s:s}", "release", "engine 0.3.0", "verdict", "PASS");
    cr_assert_eq(store_add_signoff(s, p, &k, &err), 0, "%s", err.msg);
    cr_assert_eq(json_integer_value(json_object_get(p, "receipts")), 1);
    json_decref(p);
    store_close(s);

    char path[512];
    sqlite3 *db;
    sqlite3_stmt *st;
    tmp_path(path, sizeof path, "so.db");
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT payload, signature FROM signoffs", -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    const char *pl = (const char *)sqlite3_column_text(st, 0);
    size_t len = (size_t)sqlite3_column_bytes(st, 0);
    const unsigned char *sig = sqlite3_column_blob(st, 1);
    cr_assert_eq(receipt_verify_type(SIGNOFF_PAYLOAD_TYPE, pl, len, k.pk, sig), 0);
    cr_assert_neq(receipt_verify(pl, len, k.pk, sig), 0, "a sign-off verified as a receipt");
    sqlite3_finalize(st);
    sqlite3_close(db);
    raw_exec("so.db", "DELETE FROM signoffs", 0);
}

Test(store, an_imported_history_rewrite_is_a_fork)
{
    /* host A records a FAIL, exports, then deletes the FAIL behind the triggers and reruns:
     * the new PASS extends the same predecessor, which the importer already holds. The import
     * refuses the fork loudly (the importer keeps the FAIL), and a fork planted with SQL is
     * flagged by verification. */
    struct key_pair k = make_key("ka.key", "h200");
    struct store *a = open_db("ra.db"), *b = open_db("rb.db");
    char out[512];
    struct gate_err err = {0};
    int n = 0;
    append(a, &k, "moe", "PASS", 0);
    append(a, &k, "moe", "FAIL", 1);
    tmp_path(out, sizeof out, "ra1.jsonl");
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    cr_assert_eq(store_import(b, out, &n, &err), 0, "%s", err.msg);
    store_close(a);
    raw_exec("ra.db", "DROP TRIGGER receipts_no_delete; DELETE FROM receipts WHERE id = 2;", 1);
    a = open_db("ra.db");
    append(a, &k, "moe", "PASS", 2);
    cr_assert_eq(tally_of(a).chain_ok, 2, "the tip deletion is invisible locally");
    tmp_path(out, sizeof out, "ra2.jsonl");
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    cr_assert_eq(store_import(b, out, &n, &err), ERR_RUNTIME);
    cr_assert(strstr(err.msg, "ra2.jsonl:2") && strstr(err.msg, "fork") &&
                  strstr(err.msg, "receipt 2"),
              "%s", err.msg);
    struct tally t = tally_of(b);
    cr_assert_eq(t.rows, 2, "part of a forking file was imported");
    cr_assert_eq(t.first_bad, 0, "%s", t.problem);
    store_close(b);
    /* the same fork written into the importer with SQL is flagged, naming the first extension */
    char sql[1024], path[512];
    tmp_path(path, sizeof path, "ra.db");
    snprintf(sql, sizeof sql,
             "ATTACH '%s' AS a; INSERT INTO receipts (origin, cell, verdict, payload, signature,"
             " key_id, hash, prev_hash, created_at) SELECT 'import', cell, verdict, payload,"
             " signature, key_id, hash, prev_hash, created_at FROM a.receipts WHERE id = 3;",
             path);
    raw_exec("rb.db", sql, 1);
    b = open_db("rb.db");
    t = tally_of(b);
    cr_assert_eq(t.rows, 3);
    cr_assert_eq(t.first_bad, 3);
    cr_assert(strstr(t.problem, "fork") && strstr(t.problem, "receipt 2"), "%s", t.problem);
    store_close(a);
    store_close(b);
}

/* ---- issue 11: erasing and suppressing receipts ---------------------------------------------- */

static struct store_audit audit_of(struct store *s)
{
    struct store_audit a;
    struct gate_err err = {0};
    cr_assert_eq(store_audit(s, &a, &err), 0, "%s", err.msg);
    return a;
}

Test(store, an_imported_rows_predecessor_is_found_by_recomputed_hash_not_the_column)
{
    /* the attack: rewrite the FAIL row's payload and cell to garbage behind the triggers (its
     * hash column kept) and mark the next row 'import', whose predecessor used to be looked up
     * by the hash column: the FAIL vanished from every cell and the chain still read as whole */
    struct key_pair k = make_key("g.key", "local");
    struct store *s = open_db("g.db");
    append(s, &k, "tiny", "PASS", 0);
    append(s, &k, "tiny", "FAIL", 1);
    append(s, &k, "tiny", "PASS", 2);
    store_close(s);
    raw_exec("g.db",
             "DROP TRIGGER receipts_no_update;"
             "UPDATE receipts SET payload = 'garbage', cell = 'garbage' WHERE id = 2;"
             "UPDATE receipts SET origin = 'import' WHERE id = 3;",
             1);
    s = open_db("g.db");
    struct tally t = tally_of(s);
    cr_assert_eq(t.rows, 3);
    cr_assert_eq(t.chain_ok, 1, "an imported row linked through the stored hash column (%s)",
                 t.problem);
    /* the store-wide audit counts every bad row, whatever its cell names */
    struct store_audit a = audit_of(s);
    cr_assert_eq(a.n_rows, 3);
    cr_assert_eq(a.n_bad, 2);
    cr_assert_eq(a.first_bad_id, 2);
    cr_assert(strstr(a.first_problem, "receipt 2:"), "%s", a.first_problem);
    cr_assert_eq(a.n_head_problems, 0);
    store_close(s);
}

Test(store, a_hash_column_that_does_not_recompute_fails_and_is_counted)
{
    struct key_pair k = make_key("hc.key", "local");
    struct store *s = open_db("hc.db");
    append(s, &k, "tiny", "PASS", 0);
    append(s, &k, "tiny", "PASS", 1);
    store_close(s);
    raw_exec("hc.db",
             "DROP TRIGGER receipts_no_update; UPDATE receipts SET hash = "
             "'1111111111111111111111111111111111111111111111111111111111111111' WHERE id = 2;",
             1);
    s = open_db("hc.db");
    struct store_audit a = audit_of(s);
    cr_assert_eq(a.n_bad, 1);
    cr_assert_eq(a.first_bad_id, 2);
    cr_assert(strstr(a.first_problem, "hash column"), "%s", a.first_problem);
    store_close(s);
}

/* A row for a hand-made attacker INSERT: the columns of receipts, hash given. */
static void plant_row(const char *db, const char *hash)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "INSERT INTO receipts (origin, cell, verdict, payload, signature, key_id, hash, "
             "prev_hash, created_at) VALUES ('import', 'moe/h200/ref.decode', 'PASS', '{}', "
             "zeroblob(64), 'ed25519:00', '%s', '%s', '2020-01-01T00:00:00Z');",
             hash, RECEIPT_GENESIS_HASH);
    raw_exec(db, sql, 1);
}

Test(store, a_preinserted_row_with_a_real_receipts_hash_is_an_import_conflict)
{
    struct key_pair k = make_key("pi.key", "h200");
    struct store *a = open_db("pia.db"), *b = open_db("pib.db");
    char out[512];
    struct first fail;
    struct gate_err err = {0};
    int n = -1;
    append(a, &k, "moe", "PASS", 0);
    append(a, &k, "moe", "FAIL", 1);
    cr_assert_eq(store_get(a, 2, grab, &fail, &err), 0, "%s", err.msg);
    tmp_path(out, sizeof out, "pi.jsonl");
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    store_close(b);
    /* the attacker (DB write access, no key) pre-inserts a row carrying the FAIL's hash: the
     * triggers allow INSERT */
    plant_row("pib.db", fail.hash);
    b = open_db("pib.db");
    cr_assert_eq(store_import(b, out, &n, &err), ERR_RUNTIME,
                 "the FAIL was skipped as already stored (%d imported)", n);
    cr_assert(strstr(err.msg, "pi.jsonl:2") && strstr(err.msg, "stored receipt 1"), "%s", err.msg);
    cr_assert_eq(tally_of(b).rows, 1, "part of the file was imported");
    store_close(a);
    store_close(b);
}

Test(store, an_import_dedups_only_a_byte_identical_verified_receipt)
{
    struct key_pair k = make_key("bi.key", "h200");
    struct store *a = open_db("bia.db"), *b = open_db("bib.db");
    char out[512], sql[1024], path[512];
    struct gate_err err = {0};
    int n = -1;
    append(a, &k, "moe", "FAIL", 0);
    tmp_path(out, sizeof out, "bi.jsonl");
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    store_close(b);
    /* the same payload and signature copied in, but with a cell column that lies: the stored
     * row does not verify, so it cannot stand in for the receipt */
    tmp_path(path, sizeof path, "bia.db");
    snprintf(sql, sizeof sql,
             "ATTACH '%s' AS a; INSERT INTO receipts (origin, cell, verdict, payload, signature,"
             " key_id, hash, prev_hash, created_at) SELECT 'import', 'x/y/z', 'PASS', payload,"
             " signature, key_id, hash, prev_hash, created_at FROM a.receipts;",
             path);
    raw_exec("bib.db", sql, 1);
    b = open_db("bib.db");
    cr_assert_eq(store_import(b, out, &n, &err), ERR_RUNTIME);
    cr_assert(strstr(err.msg, "bi.jsonl:1") && strstr(err.msg, "stored receipt 1") &&
                  strstr(err.msg, "fails verification"),
              "%s", err.msg);
    store_close(a);
    store_close(b);
}

/* An export line: receipt payload p (prev_hash and key_id set by the caller) signed by k. */
static void write_envelope(FILE *f, const char *type, json_t *p, const struct key_pair *k)
{
    char *bytes = NULL;
    size_t len = 0;
    unsigned char sig[64];
    struct gate_err err = {0};
    cr_assert_eq(receipt_canonical(p, &bytes, &len, &err), 0, "%s", err.msg);
    cr_assert_eq(receipt_sign_type(type, bytes, len, k, sig), 0);
    char pb[16384], sb[128];
    sodium_bin2base64(pb, sizeof pb, (unsigned char *)bytes, len, sodium_base64_VARIANT_ORIGINAL);
    sodium_bin2base64(sb, sizeof sb, sig, 64, sodium_base64_VARIANT_ORIGINAL);
    json_t *env = json_pack("{s:s, s:s, s:[{s:s, s:s}]}", "payloadType", type, "payload", pb,
                            "signatures", "keyid", k->id, "sig", sb);
    char *line = json_dumps(env, JSON_COMPACT | JSON_SORT_KEYS);
    fprintf(f, "%s\n", line);
    free(line);
    json_decref(env);
    free(bytes);
}

Test(store, another_key_cannot_fork_a_chain_it_does_not_own)
{
    /* key X imports junk extending A's receipt before A's next export arrives: today the
     * legitimate chain then reads as forked (TAMPERED) forever */
    struct key_pair ka = make_key("fpa.key", "h200"), kx = make_key("fpx.key", "h200");
    struct store *a = open_db("fpa.db"), *c = open_db("fpc.db");
    char out[512], junk[512];
    struct first r1;
    struct gate_err err = {0};
    int n = -1;
    append(a, &ka, "moe", "PASS", 0);
    cr_assert_eq(store_get(a, 1, grab, &r1, &err), 0, "%s", err.msg);
    tmp_path(out, sizeof out, "fp1.jsonl");
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    cr_assert_eq(store_import(c, out, &n, &err), 0, "%s", err.msg);
    tmp_path(junk, sizeof junk, "junk.jsonl");
    FILE *f = fopen(junk, "w");
    json_t *p = payload("moe", "PASS", 99);
    json_object_set_new(p, "prev_hash", json_string(r1.hash));
    json_object_set_new(p, "key_id", json_string(kx.id));
    write_envelope(f, RECEIPT_PAYLOAD_TYPE, p, &kx);
    json_decref(p);
    fclose(f);
    cr_assert_eq(store_import(c, junk, &n, &err), ERR_RUNTIME, "the junk fork was imported");
    cr_assert(strstr(err.msg, "junk.jsonl:1") && strstr(err.msg, "another key"), "%s", err.msg);
    /* A's real next receipt imports and nothing fails verification */
    append(a, &ka, "moe", "FAIL", 1);
    tmp_path(out, sizeof out, "fp2.jsonl");
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    cr_assert_eq(store_import(c, out, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 1);
    struct store_audit au = audit_of(c);
    cr_assert_eq(au.n_rows, 2);
    cr_assert_eq(au.n_bad, 0, "%s", au.first_problem);
    store_close(a);
    store_close(c);
}

Test(store, chains_are_per_key_and_a_receipt_never_links_to_another_key)
{
    struct key_pair k1 = make_key("pk1.key", "local"), k2 = make_key("pk2.key", "local");
    struct store *s = open_db("pk.db");
    struct first a, b, c;
    struct gate_err err = {0};
    append(s, &k1, "tiny", "PASS", 0);
    append(s, &k2, "tiny", "PASS", 1);
    append(s, &k1, "tiny", "FAIL", 2);
    cr_assert_eq(store_get(s, 1, grab, &a, &err), 0, "%s", err.msg);
    cr_assert_eq(store_get(s, 2, grab, &b, &err), 0, "%s", err.msg);
    cr_assert_eq(store_get(s, 3, grab, &c, &err), 0, "%s", err.msg);
    cr_assert_str_eq(b.prev, RECEIPT_GENESIS_HASH, "key 2's first receipt starts its own chain");
    cr_assert_str_eq(c.prev, a.hash, "key 1's second receipt extends key 1's first");
    cr_assert_eq(audit_of(s).n_bad, 0);
    store_close(s);
}

Test(store, deleting_the_newest_receipt_behind_a_head_record_is_noticed)
{
    struct key_pair k = make_key("hd.key", "local");
    struct store *s = open_db("hd.db");
    struct gate_err err = {0};
    char head[65];
    int64_t count = -1;
    struct first fail;
    cr_assert_eq(store_write_head(s, &k, head, &count, &err), 0, "%s", err.msg);
    cr_assert_str_eq(head, RECEIPT_GENESIS_HASH);
    cr_assert_eq(count, 0);
    append(s, &k, "tiny", "PASS", 0);
    append(s, &k, "tiny", "FAIL", 1);
    cr_assert_eq(store_get(s, 2, grab, &fail, &err), 0, "%s", err.msg);
    cr_assert_eq(store_write_head(s, &k, head, &count, &err), 0, "%s", err.msg);
    cr_assert_str_eq(head, fail.hash);
    cr_assert_eq(count, 2);
    struct store_audit a = audit_of(s);
    cr_assert_eq(a.n_heads, 2);
    cr_assert_eq(a.n_head_problems, 0, "%s", a.head_problem);
    cr_assert_str_eq(a.head_hash, fail.hash);
    cr_assert_eq(a.head_count, 2);
    cr_assert_str_eq(a.head_key, k.id);
    cr_assert_eq(store_expect_head(s, fail.hash, &err), 0, "%s", err.msg);
    store_close(s);
    /* the attacker deletes the FAIL (the chain tip) and reruns: the chain alone looks whole */
    raw_exec("hd.db", "DROP TRIGGER receipts_no_delete; DELETE FROM receipts WHERE id = 2;", 1);
    s = open_db("hd.db");
    append(s, &k, "tiny", "PASS", 2);
    a = audit_of(s);
    cr_assert_eq(a.n_bad, 0, "%s", a.first_problem);
    cr_assert_eq(a.n_head_problems, 1);
    cr_assert(strstr(a.head_problem, "head record 2") && strstr(a.head_problem, "deleted"), "%s",
              a.head_problem);
    err_clear(&err);
    cr_assert_eq(store_expect_head(s, fail.hash, &err), ERR_RUNTIME);
    cr_assert(strstr(err.msg, fail.hash), "%s", err.msg);
    err_clear(&err);
    cr_assert_eq(store_expect_head(s, "xyz", &err), ERR_INPUT);
    store_close(s);
}

Test(store, head_records_are_signed_in_their_own_domain_and_travel_with_the_export)
{
    struct key_pair k = make_key("he.key", "h200");
    struct store *a = open_db("hea.db"), *b = open_db("heb.db");
    char out[512];
    struct gate_err err = {0};
    int n = -1;
    append(a, &k, "moe", "PASS", 0);
    append(a, &k, "moe", "FAIL", 1);
    cr_assert_eq(store_write_head(a, &k, NULL, NULL, &err), 0, "%s", err.msg);
    tmp_path(out, sizeof out, "he.jsonl");
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    size_t size = 0;
    char *text = (char *)check_slurp(out, &size);
    cr_assert(text && strstr(text, HEAD_PAYLOAD_TYPE), "no head line in the export");
    free(text);
    cr_assert_eq(store_import(b, out, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 2);
    struct store_audit au = audit_of(b);
    cr_assert_eq(au.n_heads, 1);
    cr_assert_eq(au.n_head_problems, 0, "%s", au.head_problem);
    cr_assert_eq(au.head_count, 2);
    cr_assert_eq(store_import(b, out, &n, &err), 0, "%s", err.msg); /* idempotent */
    cr_assert_eq(audit_of(b).n_heads, 1);
    store_close(b);

    /* a head record's signature never verifies as a receipt */
    char path[512];
    sqlite3 *db;
    sqlite3_stmt *st;
    tmp_path(path, sizeof path, "hea.db");
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT payload, signature FROM heads", -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    const char *pl = (const char *)sqlite3_column_text(st, 0);
    size_t len = (size_t)sqlite3_column_bytes(st, 0);
    const unsigned char *sig = sqlite3_column_blob(st, 1);
    cr_assert_eq(receipt_verify_type(HEAD_PAYLOAD_TYPE, pl, len, k.pk, sig), 0);
    cr_assert_neq(receipt_verify(pl, len, k.pk, sig), 0, "a head record verified as a receipt");
    sqlite3_finalize(st);
    sqlite3_close(db);
    raw_exec("hea.db", "DELETE FROM heads", 0);

    /* an export whose last receipt was cut but whose head line was kept is refused whole */
    edit_line(out, 2, drop);
    struct store *c = open_db("hec.db");
    cr_assert_eq(store_import(c, out, &n, &err), ERR_RUNTIME);
    cr_assert(strstr(err.msg, "head record") && strstr(err.msg, "deleted"), "%s", err.msg);
    cr_assert_eq(tally_of(c).rows, 0);
    store_close(a);
    store_close(c);
}

/* Export store a to name and append one head record line signed by k: "k's chain ended at
 * receipt head, count receipts long" (whether or not that is true). */
static void export_with_head(struct store *a, const char *name, const struct key_pair *k,
                             const char *head, int count, char out[512])
{
    struct gate_err err = {0};
    tmp_path(out, 512, name);
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    FILE *f = fopen(out, "a");
    cr_assert(f, "cannot append to %s", out);
    json_t *p = json_pack("{s:i, s:s, s:s, s:s, s:s}", "count", count, "head", head, "key_id",
                          k->id, "nonce", "00112233445566778899aabbccddeeff", "written_at",
                          "2026-01-01T00:00:00Z");
    write_envelope(f, HEAD_PAYLOAD_TYPE, p, k);
    json_decref(p);
    fclose(f);
}

/* A forged head record in an export: key 1 signs "my chain ended at receipt 2", but receipt 2 is
 * key 2's (its chain is 1 long, the count the forgery states). A head record only ever names a
 * receipt of its own key; the import is refused whole. */
Test(store, a_head_record_naming_another_keys_receipt_is_refused)
{
    struct key_pair k1 = make_key("hk1.key", "h200"), k2 = make_key("hk2.key", "h200");
    struct store *a = open_db("hka.db"), *b = open_db("hkb.db");
    struct first r2;
    char out[512];
    struct gate_err err = {0};
    int n = -1;
    append(a, &k1, "moe", "PASS", 0);
    append(a, &k2, "moe", "PASS", 1);
    cr_assert_eq(store_get(a, 2, grab, &r2, &err), 0, "%s", err.msg);
    export_with_head(a, "hk.jsonl", &k1, r2.hash, 1, out);
    cr_assert_eq(store_import(b, out, &n, &err), ERR_RUNTIME,
                 "a head record of key 1 naming key 2's receipt was imported");
    cr_assert(strstr(err.msg, "head record") && strstr(err.msg, "which another key signed"), "%s",
              err.msg);
    cr_assert_eq(tally_of(b).rows, 0, "part of a refused file was imported");
    store_close(a);
    store_close(b);
}

/* A head record whose count is not the chain behind the receipt it names: key k's head says its
 * chain ended at receipt 2 after 3 receipts, the store holds 2 (as if one were deleted before
 * the export, or the count forged). The import is refused whole. */
Test(store, a_head_record_with_the_wrong_count_is_refused)
{
    struct key_pair k = make_key("hc.key", "h200");
    struct store *a = open_db("hca.db"), *b = open_db("hcb.db");
    struct first r2;
    char out[512];
    struct gate_err err = {0};
    int n = -1;
    append(a, &k, "moe", "PASS", 0);
    append(a, &k, "moe", "FAIL", 1);
    cr_assert_eq(store_get(a, 2, grab, &r2, &err), 0, "%s", err.msg);
    export_with_head(a, "hc.jsonl", &k, r2.hash, 3, out);
    cr_assert_eq(store_import(b, out, &n, &err), ERR_RUNTIME,
                 "a head record with a count of 3 over a chain of 2 was imported");
    cr_assert(strstr(err.msg, "chain of 3 receipts, but the store holds 2"), "%s", err.msg);
    cr_assert_eq(tally_of(b).rows, 0, "part of a refused file was imported");
    store_close(a);
    store_close(b);
}

/* Host A records one receipt, a FAIL, and exports; then deletes it behind the triggers and
 * reruns: the new PASS starts the key's chain at genesis a second time. The importer, which
 * holds the FAIL, refuses the second genesis as a fork (the chain's history was rewritten). */
Test(store, a_second_genesis_receipt_of_the_same_key_is_a_fork)
{
    struct key_pair k = make_key("ga.key", "h200");
    struct store *a = open_db("ga.db"), *b = open_db("gb.db");
    char out[512];
    struct gate_err err = {0};
    int n = 0;
    append(a, &k, "moe", "FAIL", 0);
    tmp_path(out, sizeof out, "ga1.jsonl");
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    cr_assert_eq(store_import(b, out, &n, &err), 0, "%s", err.msg);
    store_close(a);
    raw_exec("ga.db", "DROP TRIGGER receipts_no_delete; DELETE FROM receipts WHERE id = 1;", 1);
    a = open_db("ga.db");
    append(a, &k, "moe", "PASS", 1);
    tmp_path(out, sizeof out, "ga2.jsonl");
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    cr_assert_eq(store_import(b, out, &n, &err), ERR_RUNTIME,
                 "a second genesis receipt of the same key was imported");
    cr_assert(strstr(err.msg, "ga2.jsonl:1") && strstr(err.msg, "already starts that key's chain"),
              "%s", err.msg);
    struct tally t = tally_of(b);
    cr_assert_eq(t.rows, 1, "part of a forking file was imported");
    cr_assert_eq(t.first_bad, 0, "%s", t.problem);
    store_close(a);
    store_close(b);
}

/* A sign-off copied from a store that went on: store A signs off after its second receipt (its
 * chain_head is receipt 2) naming only receipt 1; store B, which imported A before receipt 2,
 * gets the sign-off row planted with SQL. Every receipt it names is in B, but its chain_head is
 * not a receipt of B: the audit counts a sign-off problem. */
Test(store, a_sign_off_whose_chain_head_is_not_in_the_store_is_a_problem)
{
    struct key_pair k = make_key("sc.key", "h200");
    struct store *a = open_db("sca.db"), *b = open_db("scb.db");
    struct first r1, r2;
    char out[512];
    struct gate_err err = {0};
    int n = 0;
    append(a, &k, "moe", "PASS", 0);
    cr_assert_eq(store_get(a, 1, grab, &r1, &err), 0, "%s", err.msg);
    tmp_path(out, sizeof out, "sc.jsonl");
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    cr_assert_eq(store_import(b, out, &n, &err), 0, "%s", err.msg);
    append(a, &k, "moe", "PASS", 1);
    cr_assert_eq(store_get(a, 2, grab, &r2, &err), 0, "%s", err.msg);
    json_t *p =
        json_pack("{s:[{s:s, s:[i], s:[s]}], s:[], s:s}", "cells", "cell", "moe/local/ref.decode",
                  "receipts", 1, "receipt_sha256", r1.hash, "anchors", "verdict", "PASS");
    cr_assert_eq(store_add_signoff(a, p, &k, &err), 0, "%s", err.msg);
    json_decref(p);
    struct store_audit au = audit_of(a);
    cr_assert_eq(au.n_signoffs, 1);
    cr_assert_eq(au.n_signoff_problems, 0, "in its own store: %s", au.signoff_problem);
    store_close(a);
    char sql[1024], path[512];
    tmp_path(path, sizeof path, "sca.db");
    snprintf(sql, sizeof sql,
             "ATTACH '%s' AS a; INSERT INTO signoffs (payload, signature, key_id, hash,"
             " created_at) SELECT payload, signature, key_id, hash, created_at FROM a.signoffs",
             path);
    raw_exec("scb.db", sql, 1);
    au = audit_of(b);
    cr_assert_eq(au.n_bad, 0, "%s", au.first_problem);
    cr_assert_eq(au.n_signoffs, 1);
    cr_assert_eq(au.n_signoff_problems, 1, "a sign-off whose chain_head B never held passed");
    char want[128];
    snprintf(want, sizeof want, "its chain_head %s is not a verified receipt", r2.hash);
    cr_assert(strstr(au.signoff_problem, want), "%s", au.signoff_problem);
    store_close(b);
}

/* ---- issue 11: read-only use, export temp file, bounded lines -------------------------------- */

/* Make this (test) process obey file permission bits even as root: drop the capabilities that
 * bypass them from the effective, permitted and inheritable sets. */
static void obey_permissions(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    cr_assert_eq(syscall(SYS_capget, &h, d), 0);
    unsigned drop = (1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH) | (1u << CAP_FOWNER);
    for (int i = 0; i < 1; i++) {
        d[i].effective &= ~drop;
        d[i].permitted &= ~drop;
        d[i].inheritable &= ~drop;
    }
    cr_assert_eq(syscall(SYS_capset, &h, d), 0, "capset: %s", strerror(errno));
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

Test(store, opens_read_only_on_a_file_and_folder_without_write_permission)
{
    char dir[512], path[512], probe[600];
    struct key_pair k = make_key("ro.key", "local");
    struct store *s = NULL;
    struct gate_err err = {0};
    tmp_path(dir, sizeof dir, "ro");
    cr_assert_eq(mkdir(dir, 0755), 0);
    tmp_path(path, sizeof path, "ro/r.db");
    cr_assert_eq(store_open(&s, path, &err), 0, "%s", err.msg);
    append(s, &k, "tiny", "PASS", 0);
    append(s, &k, "tiny", "FAIL", 1);
    cr_assert_eq(store_write_head(s, &k, NULL, NULL, &err), 0, "%s", err.msg);
    store_close(s); /* the last connection: SQLite removes -wal and -shm */
    cr_assert_eq(count_entries(dir), 1);
    cr_assert_eq(chmod(path, 0444), 0);
    cr_assert_eq(chmod(dir, 0555), 0);
    obey_permissions();
    snprintf(probe, sizeof probe, "%s/probe", dir);
    cr_assert_eq(open(probe, O_WRONLY | O_CREAT, 0600), -1, "the folder is still writable");

    cr_assert_eq(store_open_readonly(&s, path, &err), 0, "%s", err.msg);
    struct tally t = tally_of(s);
    cr_assert_eq(t.rows, 2);
    cr_assert_eq(t.sig_ok + t.chain_ok + t.columns_ok, 6, "%s", t.problem);
    struct store_audit a;
    cr_assert_eq(store_audit(s, &a, &err), 0, "%s", err.msg);
    cr_assert_eq(a.n_bad + a.n_head_problems, 0, "%s %s", a.first_problem, a.head_problem);
    cr_assert_eq(a.n_heads, 1);
    /* a write through a read-only store fails and changes nothing */
    json_t *p = payload("tiny", "PASS", 2);
    cr_assert_neq(store_append(s, p, &k, NULL, &err), 0);
    json_decref(p);
    store_close(s);
    cr_assert_eq(count_entries(dir), 1, "the read-only open created files");
    cr_assert_eq(chmod(dir, 0755), 0);
    cr_assert_eq(chmod(path, 0644), 0);
}

Test(store, a_read_only_open_never_creates_migrates_or_switches_journal_mode)
{
    char path[512];
    struct store *s = NULL;
    struct gate_err err = {0};
    tmp_path(path, sizeof path, "missing.db");
    cr_assert_eq(store_open_readonly(&s, path, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "no receipt store at"), "%s", err.msg);
    cr_assert_null(s);
    cr_assert_neq(access(path, F_OK), 0, "a missing store was created");

    /* a schema-1 store in rollback-journal mode: refused read-only, left as it was */
    s = open_db("old.db");
    store_close(s);
    raw_exec("old.db",
             "PRAGMA journal_mode = DELETE; DELETE FROM schema_version WHERE version = 2;"
             "DROP TABLE heads; DROP INDEX receipts_key;",
             1);
    tmp_path(path, sizeof path, "old.db");
    err_clear(&err);
    cr_assert_eq(store_open_readonly(&s, path, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "schema version 1") && strstr(err.msg, "writing command"), "%s",
              err.msg);
    size_t n = 0;
    unsigned char *bytes = check_slurp(path, &n);
    cr_assert(bytes && n > 19);
    cr_assert_eq(bytes[18], 1, "the journal mode was switched to WAL");
    free(bytes);
    /* a writing open migrates it; then it reads */
    s = open_db("old.db");
    store_close(s);
    err_clear(&err);
    cr_assert_eq(store_open_readonly(&s, path, &err), 0, "%s", err.msg);
    store_close(s);
}

Test(store, export_never_follows_a_symlink_planted_at_a_predictable_temp_name)
{
    struct key_pair k = make_key("sy.key", "local");
    struct store *s = open_db("sy.db");
    char out[512], planted[600], victim[512], dir[512];
    struct gate_err err = {0};
    append(s, &k, "tiny", "PASS", 0);
    tmp_path(dir, sizeof dir, "sy");
    cr_assert_eq(mkdir(dir, 0755), 0);
    tmp_path(out, sizeof out, "sy/out.jsonl");
    tmp_path(victim, sizeof victim, "victim.txt");
    FILE *f = fopen(victim, "w");
    fputs("precious\n", f);
    fclose(f);
    snprintf(planted, sizeof planted, "%s.tmp.%ld", out, (long)getpid());
    cr_assert_eq(symlink(victim, planted), 0);
    cr_assert_eq(store_export(s, out, &err), 0, "%s", err.msg);
    size_t n = 0;
    char *text = (char *)check_slurp(victim, &n);
    cr_assert(text && n == 9 && !memcmp(text, "precious\n", 9), "the export wrote through the "
                                                                "planted symlink");
    free(text);
    struct stat st;
    cr_assert_eq(lstat(out, &st), 0);
    cr_assert(S_ISREG(st.st_mode), "the export is not a regular file");
    cr_assert_eq(count_entries(dir), 2, "a temporary file was left behind");
    /* a failed export removes its temporary file: the target is a folder */
    char target[600];
    snprintf(target, sizeof target, "%s/folder", dir);
    cr_assert_eq(mkdir(target, 0755), 0);
    cr_assert_eq(store_export(s, target, &err), ERR_ENV);
    cr_assert_eq(count_entries(dir), 3, "a failed export left its temporary file");
    store_close(s);
}

Test(store, an_import_line_longer_than_the_bound_is_an_input_error)
{
    struct store *s = open_db("ll.db");
    char path[512];
    struct gate_err err = {0};
    tmp_path(path, sizeof path, "long.jsonl");
    FILE *f = fopen(path, "w");
    fputs("\n", f);
    for (int i = 0; i < STORE_MAX_LINE / 64 + 2; i++)
        fputs("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", f);
    fclose(f);
    cr_assert_eq(store_import(s, path, NULL, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "long.jsonl:2") && strstr(err.msg, "longer than"), "%s", err.msg);
    store_close(s);
}

/* ---- appending over a damaged tip; head records of one key; import conflicts ---------------- */

Test(store, append_refuses_to_extend_a_newest_receipt_whose_signature_fails)
{
    struct key_pair k = make_key("ta.key", "local");
    struct store *s = open_db("ta.db");
    struct gate_err err = {0};
    append(s, &k, "tiny", "PASS", 0);
    append(s, &k, "tiny", "FAIL", 1);
    store_close(s);
    raw_exec("ta.db",
             "DROP TRIGGER receipts_no_update;"
             "UPDATE receipts SET payload = replace(payload, '\"FAIL\"', '\"PASS\"'),"
             " verdict = 'PASS' WHERE id = 2;",
             1);
    s = open_db("ta.db");
    json_t *p = payload("tiny", "PASS", 2);
    cr_assert_eq(store_append(s, p, &k, NULL, &err), ERR_RUNTIME,
                 "a new receipt was chained onto an edited one");
    cr_assert(strstr(err.msg, "cannot be verified"), "%s", err.msg);
    cr_assert_eq(tally_of(s).rows, 2);
    json_decref(p);
    store_close(s);
}

/* A row whose key_id column and signature are k's but whose payload names k2: verification
 * judges it under k2 (bad), so k's next receipt must not extend it. */
Test(store, append_refuses_to_extend_a_newest_row_whose_payload_names_another_key)
{
    struct key_pair k = make_key("tn.key", "local"), k2 = make_key("tn2.key", "local");
    struct store *s = open_db("tn.db");
    struct gate_err err = {0};
    append(s, &k, "tiny", "PASS", 0);
    store_close(s);
    json_t *p = payload("tiny", "PASS", 1);
    json_object_set_new(p, "key_id", json_string(k2.id));
    json_object_set_new(p, "prev_hash", json_string(RECEIPT_GENESIS_HASH));
    char *bytes = NULL, hash[65], path[512];
    size_t len = 0;
    unsigned char sig[64];
    cr_assert_eq(receipt_canonical(p, &bytes, &len, &err), 0, "%s", err.msg);
    cr_assert_eq(receipt_sign(bytes, len, &k, sig), 0);
    receipt_hash(bytes, len, sig, hash);
    json_decref(p);
    sqlite3 *db;
    sqlite3_stmt *st;
    tmp_path(path, sizeof path, "tn.db");
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "INSERT INTO receipts (origin, cell, verdict, payload, "
                                    "signature, key_id, hash, prev_hash, created_at) VALUES "
                                    "('local', 'tiny/local/ref.decode', 'PASS', ?, ?, ?, ?, ?, "
                                    "'2026-01-01T00:00:00Z')",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_bind_text(st, 1, bytes, (int)len, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, sig, 64, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, k.id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, hash, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, RECEIPT_GENESIS_HASH, -1, SQLITE_STATIC);
    cr_assert_eq(sqlite3_step(st), SQLITE_DONE, "%s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(bytes);
    s = open_db("tn.db");
    p = payload("tiny", "PASS", 2);
    cr_assert_eq(store_append(s, p, &k, NULL, &err), ERR_RUNTIME,
                 "k's receipt was chained onto a row whose payload names another key");
    cr_assert(strstr(err.msg, "cannot be verified"), "%s", err.msg);
    json_decref(p);
    store_close(s);
}

Test(store, append_refuses_a_payload_over_the_export_line_bound)
{
    struct key_pair k = make_key("big.key", "local");
    struct store *s = open_db("big.db");
    struct gate_err err = {0};
    json_t *p = payload("tiny", "PASS", 0);
    char *big = malloc(STORE_MAX_PAYLOAD + 1);
    cr_assert(big);
    memset(big, 'x', STORE_MAX_PAYLOAD);
    big[STORE_MAX_PAYLOAD] = '\0';
    json_object_set_new(p, "notes", json_string(big));
    cr_assert_eq(store_append(s, p, &k, NULL, &err), ERR_INPUT,
                 "a receipt no export line can carry was stored");
    cr_assert(strstr(err.msg, "at most"), "%s", err.msg);
    cr_assert_eq(tally_of(s).rows, 0);
    json_decref(p);
    free(big);
    store_close(s);
}

Test(store, a_head_record_names_its_own_keys_newest_receipt_not_another_keys)
{
    struct key_pair k1 = make_key("ho1.key", "local"), k2 = make_key("ho2.key", "local");
    struct store *s = open_db("ho.db");
    struct gate_err err = {0};
    struct first tip;
    char head[65];
    int64_t count = -1;
    append(s, &k1, "tiny", "PASS", 0);
    append(s, &k1, "tiny", "FAIL", 1);
    append(s, &k2, "tiny", "PASS", 2); /* the newest row is key 2's */
    cr_assert_eq(store_get(s, 2, grab, &tip, &err), 0, "%s", err.msg);
    cr_assert_eq(store_write_head(s, &k1, head, &count, &err), 0, "%s", err.msg);
    cr_assert_str_eq(head, tip.hash, "key 1's head record names another receipt");
    cr_assert_eq(count, 2);
    struct store_audit a = audit_of(s);
    cr_assert_eq(a.n_head_problems, 0, "%s", a.head_problem);
    store_close(s);
}

Test(store, no_head_record_is_written_over_a_chain_that_does_not_reach_its_first_receipt)
{
    struct key_pair k = make_key("hb.key", "local");
    struct store *s = open_db("hb.db");
    struct gate_err err = {0};
    for (int i = 0; i < 3; i++)
        append(s, &k, "tiny", "PASS", i);
    store_close(s);
    raw_exec("hb.db",
             "CREATE TABLE r2 AS SELECT * FROM receipts WHERE id <> 1;"
             "DROP TABLE receipts; ALTER TABLE r2 RENAME TO receipts;",
             1);
    s = open_db("hb.db");
    cr_assert_eq(store_write_head(s, &k, NULL, NULL, &err), ERR_RUNTIME,
                 "a head record vouched for a chain cut at its start");
    cr_assert(strstr(err.msg, "does not chain back"), "%s", err.msg);
    cr_assert_eq(audit_of(s).n_heads, 0);
    store_close(s);
}

/* The attacker (DB write access, no key) pre-inserts a head row carrying the hash of a real head
 * record but other bytes: importing the real one must not be skipped as already stored. */
Test(store, a_preinserted_head_row_with_a_real_heads_hash_is_an_import_conflict)
{
    struct key_pair k = make_key("ph.key", "h200");
    struct store *a = open_db("pha.db"), *b = open_db("phb.db");
    char out[512], sql[512], hash[65] = "";
    struct gate_err err = {0};
    int n = -1;
    append(a, &k, "moe", "PASS", 0);
    cr_assert_eq(store_write_head(a, &k, NULL, NULL, &err), 0, "%s", err.msg);
    tmp_path(out, sizeof out, "ph.jsonl");
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    store_close(a);
    store_close(b);
    char path[512];
    sqlite3 *db;
    sqlite3_stmt *st;
    tmp_path(path, sizeof path, "pha.db");
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT hash FROM heads", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    snprintf(hash, sizeof hash, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    snprintf(sql, sizeof sql,
             "INSERT INTO heads (payload, signature, key_id, hash, created_at) VALUES ('{}', "
             "zeroblob(64), '%s', '%s', '2020-01-01T00:00:00Z');",
             k.id, hash);
    raw_exec("phb.db", sql, 1);
    b = open_db("phb.db");
    cr_assert_eq(store_import(b, out, &n, &err), ERR_RUNTIME,
                 "the real head record was skipped as already stored");
    cr_assert(strstr(err.msg, "head record") && strstr(err.msg, "other bytes"), "%s", err.msg);
    cr_assert_eq(tally_of(b).rows, 0, "part of a refused file was imported");
    store_close(b);
}

Test(store, an_import_refuses_a_receipt_stored_under_another_hash_column)
{
    struct key_pair k = make_key("hx.key", "h200");
    struct store *a = open_db("hxa.db"), *b = open_db("hxb.db");
    char out[512];
    struct gate_err err = {0};
    int n = -1;
    append(a, &k, "moe", "PASS", 0);
    append(a, &k, "moe", "FAIL", 1);
    tmp_path(out, sizeof out, "hx.jsonl");
    cr_assert_eq(store_export(a, out, &err), 0, "%s", err.msg);
    cr_assert_eq(store_import(b, out, &n, &err), 0, "%s", err.msg);
    store_close(b);
    raw_exec("hxb.db",
             "DROP TRIGGER receipts_no_update; UPDATE receipts SET hash = "
             "'1111111111111111111111111111111111111111111111111111111111111111' WHERE id = 2;",
             1);
    b = open_db("hxb.db");
    cr_assert_eq(store_import(b, out, &n, &err), ERR_RUNTIME,
                 "the import passed over a stored copy under a forged hash column (%d imported)",
                 n);
    cr_assert(strstr(err.msg, "under another hash column"), "%s", err.msg);
    store_close(a);
    store_close(b);
}

/* A receipt signed by its own key but naming no cell: verification could never place it, so the
 * import refuses it (import accepts exactly what verification accepts). */
Test(store, an_import_refuses_a_signed_receipt_that_names_no_cell)
{
    struct key_pair k = make_key("nc.key", "h200");
    struct store *b = open_db("nc.db");
    char out[512];
    struct gate_err err = {0};
    int n = -1;
    tmp_path(out, sizeof out, "nc.jsonl");
    FILE *f = fopen(out, "w");
    cr_assert(f);
    json_t *p = payload("moe", "PASS", 0);
    json_object_del(p, "cell");
    json_object_set_new(p, "key_id", json_string(k.id));
    json_object_set_new(p, "prev_hash", json_string(RECEIPT_GENESIS_HASH));
    write_envelope(f, RECEIPT_PAYLOAD_TYPE, p, &k);
    json_decref(p);
    fclose(f);
    cr_assert_eq(store_import(b, out, &n, &err), ERR_INPUT, "a receipt of no cell was imported");
    cr_assert(strstr(err.msg, "lacks cell"), "%s", err.msg);
    cr_assert_eq(tally_of(b).rows, 0);
    store_close(b);
}
