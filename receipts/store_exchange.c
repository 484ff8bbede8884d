/* store_exchange.c — moving receipts between stores (see store.h, store_internal.h): export
 * writes every receipt and head record as one DSSE envelope per line (atomically), import
 * verifies a whole file against the chain index of the stored rows, extended line by line,
 * before it inserts anything, so one forged line refuses the file.
 * Start reading: store_export(), then store_import_progress().
 */
#include <errno.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/atomic.h"
#include "receipts/receipt.h"
#include "receipts/store.h"
#include "receipts/store_internal.h"

/* ---- export / import ------------------------------------------------------------------------ */

/* base64 (standard alphabet, padded: DSSE's encoding) of n bytes, malloc'd. */
static char *b64(const void *bin, size_t n)
{
    size_t cap = sodium_base64_encoded_len(n, sodium_base64_VARIANT_ORIGINAL);
    char *out = malloc(cap);
    if (out)
        sodium_bin2base64(out, cap, bin, n, sodium_base64_VARIANT_ORIGINAL);
    return out;
}

struct export_ctx {
    FILE *f;
    int failed;
};

/* One DSSE envelope line. Returns 0, or 1 with x->failed set. */
static int export_line(struct export_ctx *x, const char *type, const char *payload, size_t len,
                       const unsigned char sig[64], const char *key_id)
{
    char *pb = b64(payload, len), *sb = b64(sig, 64), *line = NULL;
    json_t *env = NULL;
    if (!pb || !sb)
        goto fail;
    env = json_pack("{s:s, s:s, s:[{s:s, s:s}]}", "payloadType", type, "payload", pb, "signatures",
                    "keyid", key_id, "sig", sb);
    if (!env || !(line = json_dumps(env, JSON_COMPACT | JSON_SORT_KEYS)))
        goto fail;
    if (fprintf(x->f, "%s\n", line) < 0)
        goto fail;
    free(pb);
    free(sb);
    free(line);
    json_decref(env);
    return 0;
fail:
    x->failed = 1;
    free(pb);
    free(sb);
    free(line);
    json_decref(env);
    return 1;
}

static int export_row(void *vctx, const struct store_row *r)
{
    return export_line(vctx, RECEIPT_PAYLOAD_TYPE, r->payload, r->len, r->sig, r->key_id);
}

/* Every head record, id order, as envelope lines. */
static int export_heads(struct store *s, struct export_ctx *x, struct gate_err *err)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, "SELECT payload, signature, key_id FROM heads ORDER BY id",
                                -1, &st, NULL);
    if (rc != SQLITE_OK) {
        rc = store_db_fail(s, rc, "reading head records", err);
        goto cleanup;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        unsigned char sig[64] = {0};
        const void *sb = sqlite3_column_blob(st, 1);
        const char *payload = (const char *)sqlite3_column_text(st, 0);
        const char *key = (const char *)sqlite3_column_text(st, 2);
        if (sb && sqlite3_column_bytes(st, 1) == 64)
            memcpy(sig, sb, 64);
        if (export_line(x, HEAD_PAYLOAD_TYPE, payload ? payload : "",
                        (size_t)sqlite3_column_bytes(st, 0), sig, key ? key : "")) {
            rc = 1;
            goto cleanup;
        }
    }
    rc = rc == SQLITE_DONE ? 0 : store_db_fail(s, rc, "reading head records", err);
cleanup:
    sqlite3_finalize(st);
    return rc;
}

int store_export(struct store *s, const char *path, struct gate_err *err)
{
    struct atomic_file a = {0};
    struct export_ctx x = {0};
    struct walk w = {.s = s};
    int rc = 0;
    /* base/atomic.h: O_EXCL under a random name in the target folder, so the rename stays on one
     * file system and no planted symlink is ever followed; removed on failure or SIGINT/SIGTERM.
     * The export gets the mode an ordinary new file would (0666 less the umask). */
    mode_t mask = umask(0);
    umask(mask);
    if ((rc = atomic_open(&a, path, 0666 & ~mask, err)))
        goto cleanup;
    if (!(x.f = atomic_stream(&a, err))) {
        rc = ERR_ENV;
        goto cleanup;
    }
    /* receipts and head records from one read transaction: a consistent snapshot */
    if ((rc = store_exec(s, "BEGIN", "starting a read", err)))
        goto cleanup;
    rc = store_walk_core(&w, 0, export_row, &x, NULL, err);
    if (!rc)
        rc = export_heads(s, &x, err);
    if (rc && !x.failed)
        goto cleanup;
    errno = 0;
    if (x.failed) {
        rc = err_set(err, ERR_ENV, "cannot write '%s': %s", path,
                     errno ? strerror(errno) : "out of memory for the export");
        goto cleanup;
    }
    rc = atomic_commit(&a, err);
cleanup:
    store_index_free(&w.ix);
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
    atomic_abort(&a);
    return rc;
}

struct incoming {
    int is_head; /* a head record line rather than a receipt */
    char *payload;
    size_t len;
    unsigned char sig[64];
    char key_id[80];
    char hash[65];      /* recomputed */
    char prev_hash[65]; /* receipt: signed prev_hash */
    char cell[256];
    char verdict[16];
    char head[65]; /* head record: the receipt hash it names */
    int64_t count; /* head record: that chain's length */
    int line;
};

/* Parse and verify one export line into in. ERR_INPUT malformed, ERR_RUNTIME forged. */
static int parse_line(const char *path, int lineno, const char *text, struct incoming *in,
                      struct gate_err *err)
{
    json_error_t jerr;
    json_t *env = NULL, *p = NULL;
    struct gate_err perr = {0};
    unsigned char pk[32];
    char why[256];
    size_t n = 0;
    int rc = 0;
    memset(in, 0, sizeof *in);
    in->line = lineno;
    env = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    const char *type = json_string_value(json_object_get(env, "payloadType"));
    const char *pb = json_string_value(json_object_get(env, "payload"));
    json_t *sigs = json_object_get(env, "signatures");
    json_t *s0 = json_array_get(sigs, 0);
    const char *keyid = json_string_value(json_object_get(s0, "keyid"));
    const char *sb = json_string_value(json_object_get(s0, "sig"));
    if (!env || !type || !pb || json_array_size(sigs) != 1 || !keyid || !sb) {
        rc = err_set(err, ERR_INPUT,
                     "%s:%d: not a receipt envelope (expected payloadType, payload and one "
                     "signature with keyid and sig)",
                     path, lineno);
        goto cleanup;
    }
    in->is_head = !strcmp(type, HEAD_PAYLOAD_TYPE);
    if (!in->is_head && strcmp(type, RECEIPT_PAYLOAD_TYPE) != 0) {
        rc = err_set(err, ERR_INPUT,
                     "%s:%d: payloadType '%.100s' is neither a gate receipt nor a head record",
                     path, lineno, type);
        goto cleanup;
    }
    size_t cap = strlen(pb) / 4 * 3 + 4;
    in->payload = malloc(cap);
    if (!in->payload) {
        rc = err_set(err, ERR_ENV, "out of memory importing '%s'", path);
        goto cleanup;
    }
    if (sodium_base642bin((unsigned char *)in->payload, cap - 1, pb, strlen(pb), NULL, &in->len,
                          NULL, sodium_base64_VARIANT_ORIGINAL) != 0 ||
        sodium_base642bin(in->sig, sizeof in->sig, sb, strlen(sb), NULL, &n, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0 ||
        n != 64) {
        rc = err_set(err, ERR_INPUT, "%s:%d: payload or sig is not valid base64 (64-byte sig)",
                     path, lineno);
        goto cleanup;
    }
    in->payload[in->len] = '\0';
    receipt_hash(in->payload, in->len, in->sig, in->hash);
    if (in->is_head) {
        if (store_head_parse(in->payload, in->len, in->sig, in->key_id, in->head, &in->count, why,
                             sizeof why) != 0 ||
            strcmp(in->key_id, keyid) != 0) {
            rc = err_set(
                err, ERR_RUNTIME, "%s:%d: forged or corrupt head record (hash %.16s...): %s", path,
                lineno, in->hash,
                strcmp(in->key_id, keyid) ? "keyid differs from the payload's key_id" : why);
            goto cleanup;
        }
        goto cleanup;
    }
    if (receipt_parse(in->payload, in->len, &p, &perr) != 0) {
        rc = err_set(err, ERR_RUNTIME, "%s:%d: receipt refused: %s", path, lineno, perr.msg);
        goto cleanup;
    }
    if (receipt_cell_name(p, in->cell, sizeof in->cell, NULL) != 0)
        snprintf(in->cell, sizeof in->cell, "?");
    const char *pkey = json_string_value(json_object_get(p, "key_id"));
    const char *pprev = json_string_value(json_object_get(p, "prev_hash"));
    const char *verdict = json_string_value(json_object_get(p, "verdict"));
    if (!pkey || key_parse_public(pkey, pk, NULL) != 0 || strcmp(pkey, keyid) != 0 ||
        receipt_verify(in->payload, in->len, pk, in->sig) != 0) {
        rc = err_set(err, ERR_RUNTIME,
                     "%s:%d: forged or corrupt receipt (cell %s, hash %.16s...): the signature "
                     "does not verify under the key the payload names",
                     path, lineno, in->cell, in->hash);
        goto cleanup;
    }
    if (!strcmp(in->cell, "?") || !verdict || !*verdict || strlen(verdict) >= sizeof in->verdict ||
        !store_is_hex64(pprev)) {
        rc = err_set(err, ERR_INPUT, "%s:%d: signed receipt lacks cell, verdict or prev_hash", path,
                     lineno);
        goto cleanup;
    }
    snprintf(in->key_id, sizeof in->key_id, "%s", pkey);
    snprintf(in->prev_hash, sizeof in->prev_hash, "%s", pprev);
    snprintf(in->verdict, sizeof in->verdict, "%s", verdict);
cleanup:
    json_decref(env);
    json_decref(p);
    return rc;
}

/* Read one line of at most STORE_MAX_LINE bytes (newline excluded) into buf (STORE_MAX_LINE + 1
 * bytes), NUL-terminated, *len its length. 1 a line, 0 end of file, -1 too long (reading stops
 * there), -2 a NUL byte, -3 read error. */
static int read_line(FILE *f, char *buf, size_t *len)
{
    size_t n = 0;
    int c;
    while ((c = getc_unlocked(f)) != EOF && c != '\n') {
        if (c == '\0')
            return -2;
        if (n == STORE_MAX_LINE)
            return -1;
        buf[n++] = (char)c;
    }
    buf[n] = '\0';
    *len = n;
    if (c == EOF && ferror(f))
        return -3;
    return c == EOF && n == 0 ? 0 : 1;
}

/* Bad stored rows' ids (ascending, from the walk), so a dedup never trusts one. */
struct bad_ids {
    int64_t *v;
    size_t n, cap;
    int oom;
};

static int note_bad(void *ctx, const struct store_row *r)
{
    struct bad_ids *b = ctx;
    if (r->sig_ok && r->chain_ok && r->columns_ok)
        return 0;
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 16;
        int64_t *v = realloc(b->v, cap * sizeof *v);
        if (!v) {
            b->oom = 1;
            return 1;
        }
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = r->id;
    return 0;
}

static int is_bad(const struct bad_ids *b, int64_t id)
{
    size_t lo = 0, hi = b->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (b->v[mid] == id)
            return 1;
        if (b->v[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

/* The stored row of `table` whose hash column is hash: 1 with *id and whether its payload and
 * signature are byte-identical to in's, 0 when none, negative on error. */
static int stored_as(struct store *s, sqlite3_stmt *st, const struct incoming *in, int64_t *id,
                     int *same, struct gate_err *err)
{
    sqlite3_reset(st);
    sqlite3_bind_text(st, 1, in->hash, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return 0;
    if (rc != SQLITE_ROW)
        return store_db_fail(s, rc, "looking up a stored receipt", err);
    *id = sqlite3_column_int64(st, 0);
    const void *payload = sqlite3_column_blob(st, 1);
    const void *sig = sqlite3_column_blob(st, 2);
    *same = (size_t)sqlite3_column_bytes(st, 1) == in->len && sqlite3_column_bytes(st, 2) == 64 &&
            (in->len == 0 || (payload && !memcmp(payload, in->payload, in->len))) && sig &&
            !memcmp(sig, in->sig, 64);
    return 1;
}

int store_import(struct store *s, const char *path, int *n_imported, struct gate_err *err)
{
    return store_import_progress(s, path, NULL, NULL, n_imported, err);
}

int store_import_progress(struct store *s, const char *path, store_import_fn fn, void *ctx,
                          int *n_imported, struct gate_err *err)
{
    struct store_import_status st = {0};
    FILE *f = NULL;
    char *line = NULL;
    size_t len = 0;
    struct incoming *in = NULL;
    struct walk w = {.s = s};
    struct bad_ids bad = {0};
    sqlite3_stmt *has = NULL, *has_head = NULL, *ins_head = NULL;
    int n = 0, n_cap = 0, lineno = 0, added = 0, rc = 0, got;
    if (n_imported)
        *n_imported = 0;
    f = fopen(path, "r");
    if (!f) {
        rc = err_set(err, ERR_INPUT, "cannot open '%s': %s", path, strerror(errno));
        goto cleanup;
    }
    line = malloc(STORE_MAX_LINE + 1);
    if (!line) {
        rc = err_set(err, ERR_ENV, "out of memory importing '%s'", path);
        goto cleanup;
    }
    /* pass 1: every line parses and every signature verifies, or nothing is imported */
    while ((got = read_line(f, line, &len)) != 0) {
        lineno++;
        if (got == -1) {
            rc = err_set(err, ERR_INPUT,
                         "%s:%d: line is longer than %d bytes (an export line is one receipt "
                         "envelope); nothing imported",
                         path, lineno, STORE_MAX_LINE);
            goto cleanup;
        }
        if (got == -2) {
            rc = err_set(err, ERR_INPUT, "%s:%d: line holds a NUL byte; nothing imported", path,
                         lineno);
            goto cleanup;
        }
        if (got == -3) {
            rc = err_set(err, ERR_ENV, "cannot read '%s': %s", path, strerror(errno));
            goto cleanup;
        }
        st.bytes += (int64_t)len + 1;
        if (strspn(line, " \t\r") == len)
            continue;
        if (n == n_cap) {
            n_cap = n_cap ? 2 * n_cap : 64;
            struct incoming *p = realloc(in, (size_t)n_cap * sizeof *p);
            if (!p) {
                rc = err_set(err, ERR_ENV, "out of memory importing '%s'", path);
                goto cleanup;
            }
            in = p;
        }
        rc = parse_line(path, lineno, line, &in[n], err);
        n++;
        if (rc)
            goto cleanup;
        st.lines = n;
        st.n_receipts += !in[n - 1].is_head;
        if (fn)
            fn(ctx, &st);
    }
    st.storing = 1;

    /* pass 2: one transaction; the chain index of the stored rows, extended line by line */
    if ((rc = store_exec(s, "BEGIN IMMEDIATE", "starting the import", err)))
        goto cleanup;
    if ((rc = store_walk_core(&w, 0, note_bad, &bad, NULL, err))) {
        if (bad.oom)
            rc = err_set(err, ERR_ENV, "out of memory importing '%s'", path);
        goto cleanup;
    }
    if ((rc =
             sqlite3_prepare_v2(s->db, "SELECT id, payload, signature FROM receipts WHERE hash = ?",
                                -1, &has, NULL)) != SQLITE_OK ||
        (rc = sqlite3_prepare_v2(s->db, "SELECT id, payload, signature FROM heads WHERE hash = ?",
                                 -1, &has_head, NULL)) != SQLITE_OK ||
        (rc = sqlite3_prepare_v2(s->db,
                                 "INSERT INTO heads (payload, signature, key_id, hash, "
                                 "created_at) VALUES (?, ?, ?, ?, "
                                 "strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))",
                                 -1, &ins_head, NULL)) != SQLITE_OK) {
        rc = store_db_fail(s, rc, "preparing the import", err);
        goto cleanup;
    }
    for (int i = 0; i < n; i++) {
        struct incoming *r = &in[i];
        int64_t id = 0, depth = 0;
        int same = 0;
        if (r->is_head)
            continue;
        if (fn) { /* the receipts checked before this one */
            st.added = added;
            fn(ctx, &st);
        }
        st.receipts++;
        int have = stored_as(s, has, r, &id, &same, err);
        if (have < 0) {
            rc = have;
            goto cleanup;
        }
        if (have && !same) {
            rc = err_set(err, ERR_RUNTIME,
                         "%s:%d: receipt for %s (hash %.16s...) conflicts with stored receipt "
                         "%lld, which carries the same hash but other bytes; nothing imported",
                         path, r->line, r->cell, r->hash, (long long)id);
            goto cleanup;
        }
        if (have && is_bad(&bad, id)) {
            rc = err_set(err, ERR_RUNTIME,
                         "%s:%d: receipt for %s (hash %.16s...) conflicts with stored receipt "
                         "%lld, which holds the same bytes but fails verification (run gate "
                         "receipt verify); nothing imported",
                         path, r->line, r->cell, r->hash, (long long)id);
            goto cleanup;
        }
        if (have)
            continue; /* byte-identical and verified: already stored */
        int32_t j = store_find_hash(&w.ix, r->hash);
        if (j >= 0 && w.ix.v[j].id == 0)
            continue; /* the same receipt on an earlier line of this file */
        if (j >= 0) {
            rc = err_set(err, ERR_RUNTIME,
                         "%s:%d: receipt for %s (hash %.16s...) conflicts with stored receipt "
                         "%lld, which holds the same bytes under another hash column; nothing "
                         "imported",
                         path, r->line, r->cell, r->hash, (long long)w.ix.v[j].id);
            goto cleanup;
        }
        if (store_link_check(&w.ix, r->key_id, r->prev_hash, &depth, w.why, sizeof w.why) != 0) {
            rc = err_set(err, ERR_RUNTIME,
                         "%s:%d: receipt for %s (hash %.16s...) refused: %s; nothing imported",
                         path, r->line, r->cell, r->hash, w.why);
            goto cleanup;
        }
        if ((rc = store_index_add(&w.ix, r->hash, r->prev_hash, r->key_id, 0, depth, err)))
            goto cleanup;
        if ((rc = store_insert_receipt(s, "import", r->cell, r->verdict, r->payload, r->len, r->sig,
                                       r->key_id, r->hash, r->prev_hash, NULL, err)))
            goto cleanup;
        added++;
    }
    if (fn) {
        st.added = added;
        fn(ctx, &st);
    }
    for (int i = 0; i < n; i++) {
        struct incoming *r = &in[i];
        int64_t id = 0;
        int same = 0;
        if (!r->is_head)
            continue;
        int have = stored_as(s, has_head, r, &id, &same, err);
        if (have < 0) {
            rc = have;
            goto cleanup;
        }
        if (have && !same) {
            rc = err_set(err, ERR_RUNTIME,
                         "%s:%d: head record (hash %.16s...) conflicts with stored head record "
                         "%lld, which carries the same hash but other bytes; nothing imported",
                         path, r->line, r->hash, (long long)id);
            goto cleanup;
        }
        if (store_head_match(&w.ix, r->key_id, r->head, r->count, w.why, sizeof w.why) != 0) {
            rc = err_set(err, ERR_RUNTIME,
                         "%s:%d: head record of key %.24s... refused: it %s; nothing imported",
                         path, r->line, r->key_id, w.why);
            goto cleanup;
        }
        if (have)
            continue;
        sqlite3_reset(ins_head);
        sqlite3_bind_text(ins_head, 1, r->payload, (int)r->len, SQLITE_STATIC);
        sqlite3_bind_blob(ins_head, 2, r->sig, 64, SQLITE_STATIC);
        sqlite3_bind_text(ins_head, 3, r->key_id, -1, SQLITE_STATIC);
        sqlite3_bind_text(ins_head, 4, r->hash, -1, SQLITE_STATIC);
        if ((rc = sqlite3_step(ins_head)) != SQLITE_DONE) {
            rc = store_db_fail(s, rc, "inserting a head record", err);
            goto cleanup;
        }
        rc = 0;
    }
    if ((rc = store_exec(s, "COMMIT", "committing the import", err)))
        goto cleanup;
    if (n_imported)
        *n_imported = added;
cleanup:
    sqlite3_finalize(has);
    sqlite3_finalize(has_head);
    sqlite3_finalize(ins_head);
    if (rc)
        store_rollback(s);
    store_index_free(&w.ix);
    free(bad.v);
    for (int i = 0; i < n; i++)
        free(in[i].payload);
    free(in);
    free(line);
    if (f)
        fclose(f);
    return rc;
}
