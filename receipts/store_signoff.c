/* store_signoff.c — the receipt store's signed statements about itself (see store.h,
 * store_internal.h): head records ("key K's chain ended at receipt H, N long", checked by
 * store_audit) and release sign-offs, each canonicalized, signed under its own DSSE type and
 * inserted into its append-only table in one transaction.
 * Start reading: store_write_head(), then store_add_signoff().
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "receipts/receipt.h"
#include "receipts/store.h"
#include "receipts/store_internal.h"

/* The recomputed hash of the last local receipt (genesis when none) into hex. */
static int local_head(struct store *s, char hex[65], struct gate_err *err)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db,
                                "SELECT payload, signature FROM receipts WHERE origin = 'local' "
                                "ORDER BY id DESC LIMIT 1",
                                -1, &st, NULL);
    if (rc != SQLITE_OK) {
        rc = store_db_fail(s, rc, "reading the chain head", err);
        goto cleanup;
    }
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        memcpy(hex, RECEIPT_GENESIS_HASH, 65);
        rc = 0;
    } else if (rc == SQLITE_ROW) {
        const void *sig = sqlite3_column_blob(st, 1);
        if (sqlite3_column_bytes(st, 1) != 64 || !sig) {
            rc = err_set(err, ERR_RUNTIME,
                         "receipt store '%s': the last receipt's signature "
                         "is not 64 bytes",
                         s->path);
            goto cleanup;
        }
        receipt_hash((const char *)sqlite3_column_text(st, 0), (size_t)sqlite3_column_bytes(st, 0),
                     sig, hex);
        rc = 0;
    } else {
        rc = store_db_fail(s, rc, "reading the chain head", err);
    }
cleanup:
    sqlite3_finalize(st);
    return rc;
}

static void utc_now(char out[32])
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Canonicalize payload, sign it under the DSSE type, and insert it into table ("heads" or
 * "signoffs": append-only tables of signed payloads) inside the caller's transaction. what names
 * the record in error messages ("a head record", "the sign-off"). */
static int insert_signed(struct store *s, const char *table, const char *type,
                         const json_t *payload, const struct key_pair *k, const char *what,
                         struct gate_err *err)
{
    char hash[65], sql[160];
    unsigned char sig[64];
    char *bytes = NULL;
    size_t len = 0;
    sqlite3_stmt *st = NULL;
    int rc;
    if ((rc = receipt_canonical(payload, &bytes, &len, err)))
        goto cleanup;
    if ((rc = receipt_sign_type(type, bytes, len, k, sig))) {
        rc = err_set(err, ERR_ENV, "out of memory signing %s", what);
        goto cleanup;
    }
    receipt_hash(bytes, len, sig, hash);
    snprintf(sql, sizeof sql,
             "INSERT INTO %s (payload, signature, key_id, hash, created_at) "
             "VALUES (?, ?, ?, ?, strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', 'now'))",
             table);
    if ((rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL)) != SQLITE_OK) {
        char step[96];
        snprintf(step, sizeof step, "preparing the insert of %s", what);
        rc = store_db_fail(s, rc, step, err);
        goto cleanup;
    }
    sqlite3_bind_text(st, 1, bytes, (int)len, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, sig, 64, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, k->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, hash, -1, SQLITE_STATIC);
    if ((rc = sqlite3_step(st)) != SQLITE_DONE) {
        char step[96];
        snprintf(step, sizeof step, "inserting %s", what);
        rc = store_db_fail(s, rc, step, err);
        goto cleanup;
    }
    rc = 0;
cleanup:
    sqlite3_finalize(st);
    free(bytes);
    return rc;
}

int store_write_head(struct store *s, const struct key_pair *k, char head_hash[65], int64_t *count,
                     struct gate_err *err)
{
    struct walk w = {.s = s};
    char head[65], nonce[33], now[32];
    int64_t n = 0;
    json_t *payload = NULL;
    int rc = 0;
    if ((rc = store_exec(s, "BEGIN IMMEDIATE", "starting the head record transaction", err)))
        goto cleanup;
    if ((rc = store_walk_core(&w, 0, NULL, NULL, NULL, err)))
        goto cleanup;
    memcpy(head, RECEIPT_GENESIS_HASH, 65);
    for (size_t i = w.ix.n; i-- > 0;) {
        const struct link *l = &w.ix.v[i];
        if (strcmp(l->key, k->id) != 0)
            continue;
        if (l->depth < 0) {
            rc = err_set(err, ERR_RUNTIME,
                         "receipt store '%s': the chain of key %.24s... ends at receipt %lld, "
                         "which does not chain back to its first receipt (run gate receipt "
                         "verify); no head record written",
                         s->path, k->id, (long long)l->id);
            goto cleanup;
        }
        memcpy(head, l->hash, 65);
        n = l->depth;
        break;
    }
    receipt_nonce(nonce);
    utc_now(now);
    payload = json_pack("{s:I, s:s, s:s, s:s, s:s}", "count", (json_int_t)n, "head", head, "key_id",
                        k->id, "nonce", nonce, "written_at", now);
    if (!payload) {
        rc = err_set(err, ERR_ENV, "out of memory building a head record");
        goto cleanup;
    }
    if ((rc = insert_signed(s, "heads", HEAD_PAYLOAD_TYPE, payload, k, "a head record", err)))
        goto cleanup;
    if ((rc = store_exec(s, "COMMIT", "committing the head record", err)))
        goto cleanup;
    if (head_hash)
        memcpy(head_hash, head, 65);
    if (count)
        *count = n;
cleanup:
    if (rc && s && s->db)
        store_rollback(s);
    store_index_free(&w.ix);
    json_decref(payload);
    return rc;
}

/* ---- sign-offs ------------------------------------------------------------------------------ */

int store_add_signoff(struct store *s, json_t *payload, const struct key_pair *k,
                      struct gate_err *err)
{
    char head[65];
    int64_t count = 0;
    int rc = 0;
    if (!json_is_object(payload)) {
        rc = err_set(err, ERR_INPUT, "a sign-off payload must be a JSON object");
        goto cleanup;
    }
    if ((rc = store_exec(s, "BEGIN IMMEDIATE", "starting the sign-off transaction", err)))
        goto cleanup;
    if ((rc = local_head(s, head, err)) ||
        (rc = store_query_int(s, "SELECT count(*) FROM receipts", 0, &count, err)))
        goto cleanup;
    if ((rc = store_set_string(payload, "key_id", k->id, err)) ||
        (rc = store_set_string(payload, "chain_head", head, err)))
        goto cleanup;
    if (json_object_set_new(payload, "receipts", json_integer(count)) != 0) {
        rc = err_set(err, ERR_ENV, "out of memory setting sign-off \"receipts\"");
        goto cleanup;
    }
    if ((rc = insert_signed(s, "signoffs", SIGNOFF_PAYLOAD_TYPE, payload, k, "the sign-off", err)))
        goto cleanup;
    rc = store_exec(s, "COMMIT", "committing the sign-off", err);
cleanup:
    if (rc && s && s->db)
        store_rollback(s);
    return rc;
}
