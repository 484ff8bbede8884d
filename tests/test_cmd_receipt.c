/* test_cmd_receipt.c — the `gate key` and `gate receipt` commands (cli/cmd_receipt.c) as a
 * user runs them, through the real binary ($GATE_BIN, set by ctest): key gen, receipt
 * list/show/verify/export/import with their exit codes, control characters from receipts
 * escaped (cli_safe), a locked store, head records and sign-offs judged by verify. Moved from
 * test_receipt.c (issue 24 §6).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "receipts/key.h"
#include "receipts/receipt.h"
#include "receipts/store.h"
#include "tests/support/check.h"
#include "tests/support/receiptfix.h"

/* Run $GATE_BIN with args (NULL-terminated), stdout+stderr into *out (static). Returns the exit
 * code. Fails the test when GATE_BIN is unset (ctest sets it) or the binary does not know the
 * command: an un-wired `gate receipt` is a failure, never a skip. */
static int gate(char **out, const char *const *args)
{
    static char buf[65536];
    const char *bin = getenv("GATE_BIN");
    if (!bin || !*bin)
        cr_assert_fail("GATE_BIN is not set (run through ctest, which sets it)");
    char log[512];
    receiptfix_path(log, sizeof log, "cli.log");
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        const char *argv[32] = {bin};
        int n = 1;
        for (; args[n - 1] && n < 31; n++)
            argv[n] = args[n - 1];
        argv[n] = NULL;
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    size_t n = 0;
    uint8_t *text = check_slurp(log, &n);
    n = n < sizeof buf - 1 ? n : sizeof buf - 1;
    memcpy(buf, text ? (char *)text : "", text ? n : 0);
    buf[text ? n : 0] = '\0';
    free(text);
    *out = buf;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2 && strstr(buf, "unknown command"))
        cr_assert_fail("%s does not know '%s' (not wired into cli/main.c):\n%s", bin, args[0], buf);
    cr_assert(WIFEXITED(status), "gate did not exit normally");
    return WEXITSTATUS(status);
}

#define GATE(out, ...) gate(out, (const char *const[]){__VA_ARGS__, NULL})

/* A store with three receipts (PASS, FAIL, PASS) for the CLI to read; returns its path. */
static const char *cli_db(const char *name, struct key_pair *k)
{
    static char path[512];
    struct store *s = NULL;
    struct gate_err err = {0};
    receiptfix_path(path, sizeof path, name);
    cr_assert_eq(store_open(&s, path, &err), 0, "%s", err.msg);
    for (int i = 0; i < 3; i++) {
        json_t *p = receiptfix_judged(i != 1, NULL);
        json_object_set_new(p, "cell",
                            json_pack("{s:s, s:s, s:s}", "model", i ? "tiny-moe" : "tiny-dense",
                                      "host", "local", "mode", "ref.decode"));
        json_object_set_new(p, "subject",
                            json_pack("{s:{s:s}}", "model", "sha256", "6c1e0000000000000000"));
        cr_assert_eq(store_append(s, p, k, NULL, &err), 0, "%s", err.msg);
        json_decref(p);
    }
    store_close(s);
    return path;
}

Test(cli, key_gen_prints_the_public_key_and_refuses_to_overwrite)
{
    char path[512], pub[512];
    char *out;
    receiptfix_path(path, sizeof path, "cli/h200.key");
    receiptfix_path(pub, sizeof pub, "cli/h200.pub");
    cr_assert_eq(GATE(&out, "key", "gen", "--host", "h200", "-o", path, "--pub", pub), 0, "%s",
                 out);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    size_t n = 0;
    char *text = (char *)check_slurp(pub, &n);
    cr_assert(text && n == KEY_ID_LEN + 1 && !strncmp(text, "ed25519:", 8));
    text[KEY_ID_LEN] = '\0';
    cr_assert(strstr(out, text), "the public key is not printed: %s", out);
    free(text);
    cr_assert_eq(GATE(&out, "key", "gen", "--host", "h200", "-o", path), 2);
    cr_assert(strstr(out, "already exists"), "%s", out);
    cr_assert_eq(chmod(path, 0644), 0);
    cr_assert_eq(GATE(&out, "key", "pub", path), 2);
    cr_assert(strstr(out, "chmod 600"), "%s", out);
    cr_assert_eq(GATE(&out, "key", "gen", "-o", path), 2);
}

Test(cli, receipt_list_show_verify)
{
    struct key_pair k = receiptfix_key("cli1.key", "local");
    const char *db = cli_db("cli1.db", &k);
    char *out;
    cr_assert_eq(GATE(&out, "receipt", "list", "--db", db), 0, "%s", out);
    cr_assert(strstr(out, "tiny-dense/local/ref.decode") && strstr(out, "tiny-moe"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "list", "--db", db, "--verdict", "FAIL"), 0, "%s", out);
    cr_assert(strstr(out, "FAIL") && !strstr(out, "PASS"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "list", "--db", db, "--cell", "tiny-dense/*"), 0);
    cr_assert(strstr(out, "tiny-dense") && !strstr(out, "tiny-moe"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "show", "2", "--db", db), 0, "%s", out);
    cr_assert(strstr(out, "model tiny-moe, host local, mode ref.decode"), "%s", out);
    cr_assert(strstr(out, "min_cosine") && strstr(out, ">= 0.999"), "%s", out);
    cr_assert(strstr(out, "signature    ok") && strstr(out, k.id), "%s", out);
    cr_assert(strstr(out, "6c1e0000000000000000"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "show", "9", "--db", db), 2, "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "verify", "--db", db, "--all"), 0, "%s", out);
    cr_assert(strstr(out, "3 ok, 0 failed"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "verify", "--db", "/nonexistent/x.db"), 2, "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "frobnicate"), 2, "%s", out);
}

/* issue 16: a summary first, numbers at a sensible precision, per-position arrays collapsed to
 * a distribution with the offending positions unless --full, --json the whole signed payload */
Test(cli, receipt_show_summarizes_first_and_collapses_per_position_arrays)
{
    struct key_pair k = receiptfix_key("cli5.key", "local");
    const char *db = cli_db("cli5.db", &k);
    char *out;
    cr_assert_eq(GATE(&out, "receipt", "show", "2", "--db", db), 0, "%s", out);
    cr_expect(!strncmp(out, "receipt 2: tiny-moe/local/ref.decode  FAIL\n", 43), "%s", out);
    const char *details = strstr(out, "\ndetails\n");
    const char *fail = strstr(out, "  FAIL parity: ");
    cr_expect(details && fail && fail < details, "the failing gate's reason comes first:\n%s", out);
    const char *row = strstr(out, "\n  parity      FAIL   ");
    cr_expect(row && row < details, "a summary row per gate:\n%s", out);
    cr_expect(strstr(out, "per_position.cosine") &&
                  strstr(out, "n=64 min=0.5 p1=0.9995 median=0.9995 p99=0.9995 max=0.9995"
                              " (min at 5,"),
              "per-position arrays as a distribution with where the extreme is:\n%s", out);
    cr_expect(!strstr(out, "0.050000000000000003") && strstr(out, "0.05"), "%s", out);
    cr_expect(!strstr(out, "0.99950000000000006"), "%s", out);
    cr_expect(!strstr(out, "[0.9995,"), "no whole arrays without --full:\n%s", out);
    cr_assert_eq(GATE(&out, "receipt", "show", "2", "--db", db, "--full"), 0, "%s", out);
    cr_expect(strstr(out, "[0.9995,0.9995,"), "--full prints every value:\n%s", out);
    cr_assert_eq(GATE(&out, "receipt", "show", "2", "--db", db, "--json"), 0, "%s", out);
    json_error_t je;
    json_t *p = json_loads(out, 0, &je);
    cr_assert(p, "--json prints JSON: %s\n%s", je.text, out);
    cr_expect_str_eq(json_string_value(json_object_get(p, "verdict")), "FAIL");
    cr_expect_eq(
        json_array_size(json_object_get(
            json_object_get(
                json_object_get(json_object_get(json_object_get(p, "gates"), "parity"), "metrics"),
                "per_position"),
            "cosine")),
        64);
    json_decref(p);
}

Test(cli, receipt_verify_names_a_tampered_receipt)
{
    struct key_pair k = receiptfix_key("cli2.key", "local");
    const char *db = cli_db("cli2.db", &k);
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h,
                              "DROP TRIGGER receipts_no_update; UPDATE receipts SET payload = "
                              "replace(payload, '\"FAIL\"', '\"PASS\"') WHERE id = 2",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(h);
    char *out;
    cr_assert_eq(GATE(&out, "receipt", "verify", "--db", db), 1, "%s", out);
    cr_assert(strstr(out, "receipt 2 (tiny-moe/local/ref.decode): FAILED: signature"), "%s", out);
    cr_assert(!strstr(out, "receipt 1 "), "%s", out);
    /* the chain follows recomputed hashes, so the next receipt's link breaks too */
    cr_assert(strstr(out, "receipt 3 (tiny-moe/local/ref.decode): FAILED: chain"), "%s", out);
}

Test(cli, receipt_verify_flags_a_verdict_its_numbers_do_not_support)
{
    struct key_pair k = receiptfix_key("cli5.key", "local");
    char path[512];
    struct store *s = NULL;
    struct gate_err err = {0};
    receiptfix_path(path, sizeof path, "cli5.db");
    cr_assert_eq(store_open(&s, path, &err), 0, "%s", err.msg);
    json_t *p = receiptfix_judged(0, "PASS"); /* signed, but a cosine of 0.5 is below 0.999 */
    json_object_set_new(
        p, "cell", json_pack("{s:s, s:s, s:s}", "model", "m", "host", "local", "mode", "ref.chat"));
    cr_assert_eq(store_append(s, p, &k, NULL, &err), 0, "%s", err.msg);
    json_decref(p);
    store_close(s);
    char *out;
    cr_assert_eq(GATE(&out, "receipt", "verify", "--db", path), 1, "%s", out);
    cr_assert(strstr(out, "receipt 1 (m/local/ref.chat): FAILED") &&
                  strstr(out, "its numbers say FAIL"),
              "%s", out);
}

Test(cli, receipt_export_import_and_a_forged_file)
{
    struct key_pair k = receiptfix_key("cli3.key", "local");
    const char *db = cli_db("cli3.db", &k);
    char file[512], fresh[512];
    char *out;
    receiptfix_path(file, sizeof file, "cli3.jsonl");
    receiptfix_path(fresh, sizeof fresh, "cli3-fresh.db");
    cr_assert_eq(GATE(&out, "receipt", "export", "--db", db, "--out", file), 0, "%s", out);
    cr_assert(strstr(out, "exported 3"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "import", file, "--db", fresh), 0, "%s", out);
    cr_assert(strstr(out, "imported 3"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "verify", "--db", fresh), 0, "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "export", "--db", db), 2, "%s", out);

    /* flip one character of line 3's base64 payload: its signature no longer verifies */
    size_t n = 0;
    char *text = (char *)check_slurp(file, &n);
    char *l3 = strchr(strchr(text, '\n') + 1, '\n') + 1;
    char *pl = strstr(l3, "\"payload\":\"") + 11;
    pl[4] = pl[4] == 'A' ? 'B' : 'A';
    FILE *f = fopen(file, "w");
    fwrite(text, 1, n, f);
    fclose(f);
    free(text);
    receiptfix_path(fresh, sizeof fresh, "cli3-forged.db");
    int code = GATE(&out, "receipt", "import", file, "--db", fresh);
    cr_assert(code == 1, "a forged receipt is a judged failure (docs/receipts.md): exit %d: %s",
              code, out);
    cr_assert(strstr(out, "cli3.jsonl:3"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "list", "--db", fresh), 0, "%s", out);
    cr_assert(!strstr(out, "ref.decode"), "a refused file left receipts: %s", out);
}

Test(cli, a_store_locked_past_the_timeout_is_an_environment_error)
{
    struct key_pair k = receiptfix_key("cli4.key", "local");
    const char *db = cli_db("cli4.db", &k);
    char file[512];
    char *out;
    receiptfix_path(file, sizeof file, "cli4.jsonl");
    cr_assert_eq(GATE(&out, "receipt", "export", "--db", db, "--out", file), 0, "%s", out);
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    setenv("GATE_DB_BUSY_MS", "200", 1);
    cr_assert_eq(GATE(&out, "receipt", "import", file, "--db", db), 3, "%s", out);
    cr_assert(strstr(out, "locked"), "%s", out);
    sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(h);
}

Test(cli, safe_escapes_control_characters_and_keeps_utf8)
{
    char buf[128];
    cr_assert_str_eq(cli_safe("h\x1b]0;pwned\x07", buf, sizeof buf), "h\\x1b]0;pwned\\x07");
    cr_assert_str_eq(cli_safe("a\x7f"
                              "b\xc2\x9b"
                              "c",
                              buf, sizeof buf),
                     "a\\x7fb\\xc2\\x9bc");
    cr_assert_str_eq(cli_safe("raw\x9b", buf, sizeof buf), "raw\\x9b");
    cr_assert_str_eq(cli_safe("caf\xc3\xa9 \xe2\x80\x94 ok\\", buf, sizeof buf),
                     "caf\xc3\xa9 \xe2\x80\x94 ok\\\\");
    cr_assert_str_eq(cli_safe("\x1b\x1b", buf, 6), "\\x1b", "truncated inside an escape");
    cr_assert_str_eq(cli_safe(NULL, buf, sizeof buf), "(null)");
}

Test(cli, an_imported_receipt_cannot_rewrite_the_terminal)
{
    struct key_pair k = receiptfix_key("esc.key", "h200");
    char src[512], file[512], db[512];
    struct store *s = NULL;
    struct gate_err err = {0};
    receiptfix_path(src, sizeof src, "esc-src.db");
    receiptfix_path(file, sizeof file, "esc.jsonl");
    receiptfix_path(db, sizeof db, "esc.db");
    cr_assert_eq(store_open(&s, src, &err), 0, "%s", err.msg);
    json_t *p = receiptfix_judged(1, NULL);
    json_object_set_new(p, "cell",
                        json_pack("{s:s, s:s, s:s}", "model", "m", "host", "h\x1b]0;pwned\x07",
                                  "mode", "ref.decode"));
    json_object_set_new(p, "environment", json_pack("{s:s}", "hostname", "box\x1b[2J"));
    cr_assert_eq(store_append(s, p, &k, NULL, &err), 0, "%s", err.msg);
    json_decref(p);
    cr_assert_eq(store_export(s, file, &err), 0, "%s", err.msg);
    store_close(s);
    char *out;
    cr_assert_eq(GATE(&out, "receipt", "import", file, "--db", db), 0, "%s", out);
    const char *const cmds[][6] = {{"receipt", "list", "--db", db, NULL},
                                   {"receipt", "show", "1", "--db", db, NULL},
                                   {"receipt", "verify", "--all", "--db", db, NULL}};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(gate(&out, cmds[i]), 0, "%s", out);
        cr_assert(!strchr(out, '\x1b') && !strchr(out, '\x07'),
                  "'gate %s %s' printed a raw control character", cmds[i][0], cmds[i][1]);
        cr_assert(strstr(out, "h\\x1b]0;pwned\\x07"), "%s", out);
        if (i == 1)
            cr_assert(strstr(out, "box\\x1b[2J"), "%s", out);
    }
}

Test(cli, import_exit_codes_follow_the_docs)
{
    struct key_pair k = receiptfix_key("ex.key", "local");
    const char *db = cli_db("ex.db", &k);
    char file[512], fresh[512];
    char *out;
    receiptfix_path(file, sizeof file, "ex.jsonl");
    receiptfix_path(fresh, sizeof fresh, "ex-fresh.db");
    FILE *f = fopen(file, "w");
    fputs("{\"not\": \"an envelope\"}\n", f);
    fclose(f);
    cr_assert_eq(GATE(&out, "receipt", "import", file, "--db", fresh), 2, "%s", out);
    cr_assert(strstr(out, "ex.jsonl:1"), "%s", out);
    receiptfix_path(file, sizeof file, "nonexistent.jsonl");
    cr_assert_eq(GATE(&out, "receipt", "import", file, "--db", fresh), 2, "%s", out);
    /* a conflict: the fresh store holds a row carrying receipt 1's hash with other bytes */
    receiptfix_path(file, sizeof file, "ex.jsonl");
    cr_assert_eq(GATE(&out, "receipt", "export", "--db", db, "--out", file), 0, "%s", out);
    sqlite3 *h;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT hash FROM receipts WHERE id = 1", -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO receipts (origin, cell, verdict, payload, signature, key_id, hash, "
             "prev_hash, created_at) VALUES ('import', 'x', 'PASS', '{}', zeroblob(64), 'k', "
             "'%s', '', '')",
             (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(h);
    receiptfix_path(fresh, sizeof fresh, "ex-conflict.db");
    struct store *s = NULL;
    struct gate_err err = {0};
    cr_assert_eq(store_open(&s, fresh, &err), 0, "%s", err.msg);
    store_close(s);
    cr_assert_eq(sqlite3_open(fresh, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    cr_assert_eq(GATE(&out, "receipt", "import", file, "--db", fresh), 1, "%s", out);
    cr_assert(strstr(out, "ex.jsonl:1") && strstr(out, "stored receipt 1"), "%s", out);
}

Test(cli, receipt_verify_names_a_receipt_deleted_behind_a_head_record)
{
    struct key_pair k = receiptfix_key("vh.key", "local");
    const char *db = cli_db("vh.db", &k);
    struct store *s = NULL;
    struct gate_err err = {0};
    cr_assert_eq(store_open(&s, db, &err), 0, "%s", err.msg);
    cr_assert_eq(store_write_head(s, &k, NULL, NULL, &err), 0, "%s", err.msg);
    store_close(s);
    char *out;
    cr_assert_eq(GATE(&out, "receipt", "verify", "--all", "--db", db), 0, "%s", out);
    cr_assert(strstr(out, "1 head records: 1 ok"), "%s", out);
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h,
                              "DROP TRIGGER receipts_no_delete; DELETE FROM receipts WHERE id = 3",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(h);
    cr_assert_eq(GATE(&out, "receipt", "verify", "--all", "--db", db), 1, "%s", out);
    cr_assert(strstr(out, "store TAMPERED: head record 1") && strstr(out, "deleted"), "%s", out);
}

/* store_get callback: the verified row's recomputed hash. */
static int hash_of(void *ctx, const struct store_row *row)
{
    memcpy(ctx, row->hash, 65);
    return 0;
}

/* A sign-off into the store at db signed by k naming receipt hash (as release_sign writes). */
static void add_signoff(const char *db, const struct key_pair *k, const char *hash)
{
    struct store *s = NULL;
    struct gate_err err = {0};
    cr_assert_eq(store_open(&s, db, &err), 0, "%s", err.msg);
    json_t *p =
        json_pack("{s:[{s:s, s:[i], s:[s]}], s:[], s:s}", "cells", "cell", "m/local/ref.decode",
                  "receipts", 1, "receipt_sha256", hash, "anchors", "verdict", "PASS");
    cr_assert_eq(store_add_signoff(s, p, k, &err), 0, "%s", err.msg);
    json_decref(p);
    store_close(s);
}

/* Issue 23 §5: `receipt verify --all` never looked at sign-offs, so a garbage, forged or copied
 * sign-off row passed. Each is now named and the exit code is 1. */
Test(cli, receipt_verify_checks_every_sign_off)
{
    struct key_pair ka = receiptfix_key("so-a.key", "local"),
                    kb = receiptfix_key("so-b.key", "other");
    char db_a[512], db_b[512], hash[65] = "";
    snprintf(db_a, sizeof db_a, "%s", cli_db("so-a.db", &ka));
    snprintf(db_b, sizeof db_b, "%s", cli_db("so-b.db", &kb));
    struct store *s = NULL;
    struct gate_err err = {0};
    cr_assert_eq(store_open(&s, db_a, &err), 0, "%s", err.msg);
    cr_assert_eq(store_get(s, 1, hash_of, hash, &err), 0, "%s", err.msg);
    store_close(s);
    add_signoff(db_a, &ka, hash);
    char *out;
    cr_expect_eq(GATE(&out, "receipt", "verify", "--all", "--db", db_a), 0, "%s", out);
    cr_expect(strstr(out, "1 sign-off: 1 ok, 0 failed verification"), "%s", out);
    /* copied: store A's sign-off row into store B, which holds none of the receipts it names */
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(db_b, &h), SQLITE_OK);
    char sql[1400];
    snprintf(sql, sizeof sql,
             "ATTACH '%s' AS a; INSERT INTO signoffs (payload, signature, key_id, hash,"
             " created_at) SELECT payload, signature, key_id, hash, created_at FROM a.signoffs",
             db_a);
    cr_assert_eq(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_close(h);
    cr_expect_eq(GATE(&out, "receipt", "verify", "--all", "--db", db_b), 1, "%s", out);
    cr_expect(strstr(out, "store TAMPERED: 1 sign-offs fail verification, the first sign-off 1"),
              "%s", out);
    cr_expect(strstr(out, "is not a verified receipt of this store"), "%s", out);
    /* forged: validly signed by a key, naming a receipt this store never held */
    add_signoff(db_a, &kb, "ab00000000000000000000000000000000000000000000000000000000000000");
    cr_expect_eq(GATE(&out, "receipt", "verify", "--db", db_a), 1, "%s", out);
    cr_expect(strstr(out, "sign-off 2 (key "), "%s", out);
    cr_expect(strstr(out, "names receipt ab00"), "%s", out);
    /* garbage: a row that is no signed record at all */
    char db_c[512];
    snprintf(db_c, sizeof db_c, "%s", cli_db("so-c.db", &ka));
    cr_assert_eq(sqlite3_open(db_c, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h,
                              "INSERT INTO signoffs (payload, signature, key_id, hash, created_at)"
                              " VALUES ('garbage', zeroblob(64), 'x', 'y', 'now')",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_close(h);
    cr_expect_eq(GATE(&out, "receipt", "verify", "--db", db_c), 1, "%s", out);
    cr_expect(strstr(out, "sign-off 1 (key ?...): payload is not canonical JSON"), "%s", out);
}

/* Issue 23 §5, key trust: a sign-off properly signed by a key nobody trusts, naming a real
 * receipt of the store, verified like any other (before this, `receipt verify` had no trust
 * source, and a sign-off by any well-formed key passed). With --ladder (the keys the ladder
 * trusts for any host, through the release check's release_key_trusted) or --trust it is
 * UNTRUSTED, exit 1; without either, verify says that key trust was not checked. */
Test(cli, receipt_verify_judges_each_sign_off_key_against_the_ladder_or_trust_keys)
{
    struct key_pair ka = receiptfix_key("st-a.key", "local"),
                    kx = receiptfix_key("st-x.key", "local");
    char db[512], lad[512], pub[512], hash[65] = "";
    struct gate_err err = {0};
    snprintf(db, sizeof db, "%s", cli_db("st.db", &ka));
    struct store *s = NULL;
    cr_assert_eq(store_open(&s, db, &err), 0, "%s", err.msg);
    cr_assert_eq(store_get(s, 1, hash_of, hash, &err), 0, "%s", err.msg);
    store_close(s);
    add_signoff(db, &ka, hash); /* sign-off 1: the host's own key */
    add_signoff(db, &kx, hash); /* sign-off 2: any key at all, signed properly */
    receiptfix_path(pub, sizeof pub, "st-a.pub");
    cr_assert_eq(key_write_public(pub, &ka, &err), 0, "%s", err.msg);
    receiptfix_path(lad, sizeof lad, "st.yaml");
    FILE *f = fopen(lad, "w");
    cr_assert(f);
    fprintf(f,
            "release: {name: rel, version: 1.0.0}\n"
            "models:\n  m: {path: %s/conformance/qwen3moe-tiny-q4_k_m/model.gguf, sha256: "
            "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3moe}\n"
            "hosts:\n  local: {device: none, trust: ['file:st-a.pub']}\n"
            "modes: [ref.decode]\ncells:\n  - {model: m, host: local, mode: ref.decode}\n"
            "unanchored: {qwen3moe: 'receipt verify test'}\n",
            check_shared_dir());
    fclose(f);
    char *out;
    /* no trust source: both verify, and the output says plainly that trust was not judged */
    cr_expect_eq(GATE(&out, "receipt", "verify", "--db", db), 0, "%s", out);
    cr_expect(strstr(out, "2 sign-offs: 2 ok, 0 failed verification"), "%s", out);
    cr_expect(strstr(out, "sign-off key trust NOT checked"), "%s", out);
    cr_expect_null(strstr(out, "UNTRUSTED"), "%s", out);
    /* the ladder trusts ka for host local: sign-off 2 (kx) is named, exit 1 */
    char want[256];
    snprintf(want, sizeof want,
             "store UNTRUSTED: 1 sign-off is signed by a key no trust source names, the first"
             " sign-off 2 (key %s)",
             kx.id);
    cr_expect_eq(GATE(&out, "receipt", "verify", "--db", db, "--ladder", lad), 1, "%s", out);
    cr_expect(strstr(out, want), "%s", out);
    cr_expect(strstr(out, "1 of 2 verified sign-offs by a trusted key"), "%s", out);
    cr_expect_null(strstr(out, "NOT checked"), "%s", out);
    /* a public key file given with --trust is the same source */
    cr_expect_eq(GATE(&out, "receipt", "verify", "--db", db, "--trust", pub), 1, "%s", out);
    cr_expect(strstr(out, want), "%s", out);
    /* both keys trusted (one by the ladder, one inline): exit 0 */
    cr_expect_eq(
        GATE(&out, "receipt", "verify", "--all", "--db", db, "--ladder", lad, "--trust", kx.id), 0,
        "%s", out);
    cr_expect(strstr(out, "2 of 2 verified sign-offs by a trusted key"), "%s", out);
    /* a --trust that holds no key is an input error naming it, never "trusted nothing" */
    cr_expect_eq(GATE(&out, "receipt", "verify", "--db", db, "--trust", lad), 2, "%s", out);
    cr_expect(strstr(out, "does not hold one public key"), "%s", out);
    cr_expect_eq(GATE(&out, "receipt", "verify", "--db", db, "--trust", "ed25519:12"), 2, "%s",
                 out);
}
