/* store.c — the SQLite receipt store (see store.h; schema and design in docs/receipts.md).
 *
 * Concurrency: WAL mode, a busy timeout (10 s, GATE_DB_BUSY_MS overrides), and every write in
 * one BEGIN IMMEDIATE transaction, so two `gate run` processes appending to one file serialize
 * on the write lock instead of failing, and the chain read-then-insert cannot interleave.
 * Verification never trusts a column: hashes are recomputed from payload bytes and signature,
 * the chain is followed through the recomputed hashes, and the columns are compared to the
 * signed payload. Start reading: store_open(), then store_append(), then verify_row().
 */
#include "receipts/store.h"

#include <errno.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "receipts/receipt.h"

#define STORE_BUSY_MS 10000
#define STORE_APP_ID 0x67617465 /* "gate" in PRAGMA application_id */

struct store {
    sqlite3 *db;
    char path[1024];
    int busy_ms;
};

/* Forward migrations: MIGRATIONS[v - 1] takes the schema from version v - 1 to v. Never edit a
 * released entry; append a new one and bump STORE_SCHEMA_VERSION. */
static const char *const MIGRATIONS[STORE_SCHEMA_VERSION] = {
    /* 1: receipts (append-only, chained), signoffs (append-only) */
    "CREATE TABLE receipts ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  origin TEXT NOT NULL CHECK (origin IN ('local', 'import')),"
    "  cell TEXT NOT NULL,"
    "  verdict TEXT NOT NULL,"
    "  payload TEXT NOT NULL,"
    "  signature BLOB NOT NULL CHECK (length(signature) = 64),"
    "  key_id TEXT NOT NULL,"
    "  hash TEXT NOT NULL UNIQUE,"
    "  prev_hash TEXT NOT NULL,"
    "  created_at TEXT NOT NULL);"
    "CREATE INDEX receipts_cell ON receipts(cell);"
    "CREATE INDEX receipts_prev ON receipts(prev_hash);"
    "CREATE TRIGGER receipts_no_update BEFORE UPDATE ON receipts BEGIN"
    "  SELECT RAISE(ABORT, 'receipts are append-only: UPDATE refused'); END;"
    "CREATE TRIGGER receipts_no_delete BEFORE DELETE ON receipts BEGIN"
    "  SELECT RAISE(ABORT, 'receipts are append-only: DELETE refused'); END;"
    "CREATE TABLE signoffs ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  payload TEXT NOT NULL,"
    "  signature BLOB NOT NULL CHECK (length(signature) = 64),"
    "  key_id TEXT NOT NULL,"
    "  hash TEXT NOT NULL UNIQUE,"
    "  created_at TEXT NOT NULL);"
    "CREATE TRIGGER signoffs_no_update BEFORE UPDATE ON signoffs BEGIN"
    "  SELECT RAISE(ABORT, 'signoffs are append-only: UPDATE refused'); END;"
    "CREATE TRIGGER signoffs_no_delete BEFORE DELETE ON signoffs BEGIN"
    "  SELECT RAISE(ABORT, 'signoffs are append-only: DELETE refused'); END;",
};

/* Map an SQLite failure to a status and a sentence naming the store and the step. */
static int db_fail(const struct store *s, int rc, const char *what, struct gate_err *err)
{
    int prim = rc & 0xff;
    const char *msg = s && s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc);
    const char *path = s ? s->path : "?";
    switch (prim) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return err_set(err, ERR_ENV,
                       "receipt store '%s' is locked by another process (waited "
                       "%d ms) while %s",
                       path, s ? s->busy_ms : 0, what);
    case SQLITE_FULL:
        return err_set(err, ERR_ENV, "receipt store '%s': disk full while %s", path, what);
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
        return err_set(err, ERR_INPUT, "'%s' is not a usable receipt store (%s) while %s", path,
                       msg, what);
    case SQLITE_CONSTRAINT:
        return err_set(err, ERR_RUNTIME, "receipt store '%s' refused %s: %s", path, what, msg);
    default:
        return err_set(err, ERR_ENV, "receipt store '%s': %s while %s", path, msg, what);
    }
}

static int exec(struct store *s, const char *sql, const char *what, struct gate_err *err)
{
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : db_fail(s, rc, what, err);
}

static void rollback(struct store *s)
{
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* A single integer from sql (no parameters); *out = dflt when no row or NULL. */
static int query_int(struct store *s, const char *sql, int64_t dflt, int64_t *out,
                     struct gate_err *err)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) {
        rc = db_fail(s, rc, "reading the schema", err);
        goto cleanup;
    }
    *out = dflt;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) != SQLITE_NULL)
            *out = sqlite3_column_int64(st, 0);
        rc = 0;
    } else if (rc == SQLITE_DONE) {
        rc = 0;
    } else {
        rc = db_fail(s, rc, "reading the schema", err);
    }
cleanup:
    sqlite3_finalize(st);
    return rc;
}

static int migrate(struct store *s, struct gate_err *err)
{
    int64_t version = 0, has_table = 0, others = 0;
    char sql[128];
    int rc = 0;
    /* the common case, an up-to-date store, needs no write lock */
    if ((rc = query_int(s,
                        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = "
                        "'schema_version'",
                        0, &has_table, err)))
        return rc;
    if (has_table &&
        (rc = query_int(s, "SELECT max(version) FROM schema_version", 0, &version, err)) == 0 &&
        version == STORE_SCHEMA_VERSION)
        return 0;
    if (rc)
        return rc;
    if ((rc = exec(s, "BEGIN IMMEDIATE", "starting the schema migration", err)))
        goto cleanup;
    if ((rc = query_int(s,
                        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = "
                        "'schema_version'",
                        0, &has_table, err)))
        goto cleanup;
    if (!has_table) {
        if ((rc = query_int(s, "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'",
                            0, &others, err)))
            goto cleanup;
        if (others) {
            rc = err_set(err, ERR_INPUT,
                         "'%s' is an SQLite database but not a gate receipt store (no "
                         "schema_version table)",
                         s->path);
            goto cleanup;
        }
        if ((rc = exec(s,
                       "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at "
                       "TEXT NOT NULL)",
                       "creating the schema_version table", err)))
            goto cleanup;
        snprintf(sql, sizeof sql, "PRAGMA application_id = %d", STORE_APP_ID);
        if ((rc = exec(s, sql, "setting the application id", err)))
            goto cleanup;
    }
    if ((rc = query_int(s, "SELECT max(version) FROM schema_version", 0, &version, err)))
        goto cleanup;
    if (version > STORE_SCHEMA_VERSION) {
        rc = err_set(err, ERR_INPUT,
                     "receipt store '%s' has schema version %lld; this gate knows up to %d "
                     "(written by a newer gate)",
                     s->path, (long long)version, STORE_SCHEMA_VERSION);
        goto cleanup;
    }
    for (int64_t v = version + 1; v <= STORE_SCHEMA_VERSION; v++) {
        if ((rc = exec(s, MIGRATIONS[v - 1], "migrating the schema", err)))
            goto cleanup;
        snprintf(sql, sizeof sql,
                 "INSERT INTO schema_version VALUES (%lld, strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', "
                 "'now'))",
                 (long long)v);
        if ((rc = exec(s, sql, "recording the schema version", err)))
            goto cleanup;
    }
    rc = exec(s, "COMMIT", "committing the schema migration", err);
cleanup:
    if (rc)
        rollback(s);
    return rc;
}

int store_open(struct store **out, const char *path, struct gate_err *err)
{
    struct store *s = NULL;
    sqlite3_stmt *st = NULL;
    int rc = 0;
    *out = NULL;
    if (sodium_init() < 0) {
        rc = err_set(err, ERR_ENV, "libsodium failed to initialize");
        goto cleanup;
    }
    s = calloc(1, sizeof *s);
    if (!s) {
        rc = err_set(err, ERR_ENV, "out of memory opening '%s'", path);
        goto cleanup;
    }
    snprintf(s->path, sizeof s->path, "%s", path);
    s->busy_ms = STORE_BUSY_MS;
    const char *env = getenv("GATE_DB_BUSY_MS");
    if (env && *env)
        s->busy_ms = atoi(env) > 0 ? atoi(env) : 0;
    rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) {
        rc = err_set(err, ERR_ENV, "cannot open receipt store '%s': %s", path,
                     s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        goto cleanup;
    }
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, s->busy_ms);
    /* journal_mode=WAL is persistent in the file; setting it needs a brief exclusive lock that
     * the busy handler does not always wait for, so retry within the busy budget. */
    for (int waited = 0;;) {
        rc = sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            const char *mode = (const char *)sqlite3_column_text(st, 0);
            if (!mode || strcmp(mode, "wal") != 0) {
                rc = err_set(err, ERR_ENV, "receipt store '%s' cannot use WAL (journal mode %s)",
                             path, mode ? mode : "?");
                goto cleanup;
            }
            break;
        }
        sqlite3_finalize(st);
        st = NULL;
        if ((rc & 0xff) != SQLITE_BUSY || waited >= s->busy_ms) {
            rc = db_fail(s, rc, "switching to WAL", err);
            goto cleanup;
        }
        usleep(10000);
        waited += 10;
    }
    sqlite3_finalize(st);
    st = NULL;
    if ((rc = exec(s, "PRAGMA synchronous = FULL", "setting synchronous", err)))
        goto cleanup;
    if ((rc = migrate(s, err)))
        goto cleanup;
    *out = s;
    s = NULL;
cleanup:
    sqlite3_finalize(st);
    store_close(s);
    return rc;
}

void store_close(struct store *s)
{
    if (!s)
        return;
    sqlite3_close(s->db);
    free(s);
}

/* The recomputed hash of the last local receipt (genesis when none) into hex. */
static int local_head(struct store *s, char hex[65], struct gate_err *err)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db,
                                "SELECT payload, signature FROM receipts WHERE origin = 'local' "
                                "ORDER BY id DESC LIMIT 1",
                                -1, &st, NULL);
    if (rc != SQLITE_OK) {
        rc = db_fail(s, rc, "reading the chain head", err);
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
        rc = db_fail(s, rc, "reading the chain head", err);
    }
cleanup:
    sqlite3_finalize(st);
    return rc;
}

/* Insert one receipt row (origin 'local' or 'import'); *id receives its row id. */
static int insert_receipt(struct store *s, const char *origin, const char *cell,
                          const char *verdict, const char *payload, size_t len,
                          const unsigned char sig[64], const char *key_id, const char *hash,
                          const char *prev_hash, int64_t *id, struct gate_err *err)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(
        s->db,
        "INSERT INTO receipts (origin, cell, verdict, payload, signature, key_id, hash, "
        "prev_hash, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, "
        "strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))",
        -1, &st, NULL);
    if (rc != SQLITE_OK) {
        rc = db_fail(s, rc, "preparing the receipt insert", err);
        goto cleanup;
    }
    sqlite3_bind_text(st, 1, origin, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, cell, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, verdict, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, payload, (int)len, SQLITE_STATIC);
    sqlite3_bind_blob(st, 5, sig, 64, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, key_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 7, hash, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 8, prev_hash, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        rc = db_fail(s, rc, "inserting a receipt", err);
        goto cleanup;
    }
    if (id)
        *id = sqlite3_last_insert_rowid(s->db);
    rc = 0;
cleanup:
    sqlite3_finalize(st);
    return rc;
}

static int set_string(json_t *obj, const char *key, const char *value, struct gate_err *err)
{
    if (json_object_set_new(obj, key, json_string(value)) != 0)
        return err_set(err, ERR_ENV, "out of memory setting payload \"%s\"", key);
    return 0;
}

int store_append(struct store *s, json_t *payload, const struct key_pair *k, int64_t *id,
                 struct gate_err *err)
{
    char cell[256], head[65], hash[65], nonce[33];
    unsigned char sig[64];
    char *bytes = NULL;
    size_t len = 0;
    int rc = 0;
    if (!json_is_object(payload)) {
        rc = err_set(err, ERR_INPUT, "a receipt payload must be a JSON object");
        goto cleanup;
    }
    if ((rc = receipt_cell_name(payload, cell, sizeof cell, err)))
        goto cleanup;
    const char *verdict = json_string_value(json_object_get(payload, "verdict"));
    if (!verdict || !*verdict || strlen(verdict) >= sizeof((struct store_row *)0)->verdict) {
        rc = err_set(err, ERR_INPUT,
                     "receipt payload for %s has no \"verdict\" string (1-15 "
                     "bytes)",
                     cell);
        goto cleanup;
    }
    if (!json_object_get(payload, "schema_version") &&
        json_object_set_new(payload, "schema_version", json_integer(RECEIPT_SCHEMA_VERSION))) {
        rc = err_set(err, ERR_ENV, "out of memory setting payload \"schema_version\"");
        goto cleanup;
    }
    if (!json_object_get(payload, "nonce")) {
        receipt_nonce(nonce);
        if ((rc = set_string(payload, "nonce", nonce, err)))
            goto cleanup;
    }
    if ((rc = exec(s, "BEGIN IMMEDIATE", "starting the receipt transaction", err)))
        goto cleanup;
    if ((rc = local_head(s, head, err)))
        goto cleanup;
    if ((rc = set_string(payload, "prev_hash", head, err)) ||
        (rc = set_string(payload, "key_id", k->id, err)))
        goto cleanup;
    if ((rc = receipt_canonical(payload, &bytes, &len, err)))
        goto cleanup;
    if ((rc = receipt_sign(bytes, len, k, sig))) {
        rc = err_set(err, ERR_ENV, "out of memory signing the receipt for %s", cell);
        goto cleanup;
    }
    receipt_hash(bytes, len, sig, hash);
    verdict = json_string_value(json_object_get(payload, "verdict"));
    if ((rc = insert_receipt(s, "local", cell, verdict, bytes, len, sig, k->id, hash, head, id,
                             err)))
        goto cleanup;
    rc = exec(s, "COMMIT", "committing the receipt", err);
cleanup:
    if (rc && s && s->db)
        rollback(s);
    free(bytes);
    return rc;
}

/* ---- verification --------------------------------------------------------------------------- */

struct walk {
    struct store *s;
    char local_prev[65]; /* recomputed hash of the previous local row, or genesis */
    sqlite3_stmt *find;  /* SELECT 1 FROM receipts WHERE hash = ? AND id <> ? */
    sqlite3_stmt *fork;  /* SELECT min(id) FROM receipts WHERE prev_hash = ? AND id < ? AND
                            origin = 'import' */
};

static void problem(struct store_row *r, const char *what)
{
    if (!r->problem[0])
        r->problem = what;
}

static void copy_col(sqlite3_stmt *st, int col, char *out, size_t n)
{
    const char *t = (const char *)sqlite3_column_text(st, col);
    snprintf(out, n, "%s", t ? t : "");
}

/* Fill row from the current result row of st and verify it. */
static int verify_row(struct walk *w, sqlite3_stmt *st, struct store_row *r, struct gate_err *err)
{
    json_t *p = NULL;
    char computed[65], cell[256];
    unsigned char pk[32];
    int rc = 0;
    memset(r, 0, sizeof *r);
    r->problem = "";
    r->id = sqlite3_column_int64(st, 0);
    const char *origin = (const char *)sqlite3_column_text(st, 1);
    r->imported = origin && !strcmp(origin, "import");
    copy_col(st, 2, r->cell, sizeof r->cell);
    copy_col(st, 3, r->verdict, sizeof r->verdict);
    r->payload = (char *)sqlite3_column_text(st, 4);
    r->len = (size_t)sqlite3_column_bytes(st, 4);
    if (!r->payload)
        r->payload = "";
    const void *sig = sqlite3_column_blob(st, 5);
    int sig_len = sqlite3_column_bytes(st, 5);
    if (sig && sig_len == 64)
        memcpy(r->sig, sig, 64);
    copy_col(st, 6, r->key_id, sizeof r->key_id);
    copy_col(st, 7, r->hash, sizeof r->hash);
    copy_col(st, 8, r->prev_hash, sizeof r->prev_hash);
    copy_col(st, 9, r->created_at, sizeof r->created_at);
    receipt_hash(r->payload, r->len, r->sig, computed);

    /* signature: canonical payload, signed under the key its own key_id names */
    struct gate_err perr = {0};
    const char *pkey = NULL, *pprev = NULL;
    if (receipt_parse(r->payload, r->len, &p, &perr) != 0) {
        problem(r, "payload is not canonical JSON");
    } else {
        pkey = json_string_value(json_object_get(p, "key_id"));
        pprev = json_string_value(json_object_get(p, "prev_hash"));
        if (!pkey || key_parse_public(pkey, pk, NULL) != 0)
            problem(r, "payload has no valid key_id");
        else if (sig_len != 64 || receipt_verify(r->payload, r->len, pk, r->sig) != 0)
            problem(r, "signature does not verify under the payload's key_id");
        else
            r->sig_ok = 1;
    }

    /* chain: recomputed hash, and the payload's prev_hash links */
    int link_ok = 0;
    if (pprev) {
        if (!r->imported) {
            link_ok = !strcmp(pprev, w->local_prev);
            if (!link_ok)
                problem(r, "chain broken: prev_hash is not the previous local receipt's hash "
                           "(a receipt was removed or altered)");
        } else if (!strcmp(pprev, RECEIPT_GENESIS_HASH)) {
            link_ok = 1;
        } else {
            sqlite3_reset(w->find);
            sqlite3_bind_text(w->find, 1, pprev, -1, SQLITE_STATIC);
            sqlite3_bind_int64(w->find, 2, r->id);
            rc = sqlite3_step(w->find);
            if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
                rc = db_fail(w->s, rc, "following the chain", err);
                goto cleanup;
            }
            link_ok = rc == SQLITE_ROW;
            if (!link_ok)
                problem(r, "chain broken: the imported receipt's predecessor is not in the store");
            sqlite3_reset(w->fork);
            sqlite3_bind_text(w->fork, 1, pprev, -1, SQLITE_STATIC);
            sqlite3_bind_int64(w->fork, 2, r->id);
            rc = sqlite3_step(w->fork);
            if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
                rc = db_fail(w->s, rc, "following the chain", err);
                goto cleanup;
            }
            if (rc == SQLITE_ROW && sqlite3_column_type(w->fork, 0) != SQLITE_NULL) {
                link_ok = 0;
                problem(r, "chain forked: an earlier imported receipt extends the same "
                           "predecessor (history was rewritten)");
            }
            rc = 0;
        }
    } else {
        problem(r, "payload has no prev_hash");
    }
    int hash_ok = !strcmp(computed, r->hash);
    if (!hash_ok)
        problem(r, "hash column does not recompute from payload and signature");
    r->chain_ok = link_ok && hash_ok;
    if (!r->imported)
        memcpy(w->local_prev, computed, 65);

    /* columns against the payload */
    if (p) {
        const char *pv = json_string_value(json_object_get(p, "verdict"));
        r->columns_ok = receipt_cell_name(p, cell, sizeof cell, NULL) == 0 &&
                        !strcmp(cell, r->cell) && pv && !strcmp(pv, r->verdict) && pkey &&
                        !strcmp(pkey, r->key_id) && pprev && !strcmp(pprev, r->prev_hash);
    }
    if (!r->columns_ok)
        problem(r, "columns (cell, verdict, key_id, prev_hash) disagree with the payload");
cleanup:
    json_decref(p);
    return rc;
}

static const char ROW_COLUMNS[] = "SELECT id, origin, cell, verdict, payload, signature, key_id, "
                                  "hash, prev_hash, created_at FROM receipts";

static int walk_rows(struct store *s, int64_t only, store_row_fn fn, void *ctx,
                     struct gate_err *err)
{
    struct walk w = {.s = s};
    sqlite3_stmt *st = NULL;
    struct store_row row;
    char sql[256];
    int rc = 0, found = 0;
    memcpy(w.local_prev, RECEIPT_GENESIS_HASH, 65);
    if ((rc = exec(s, "BEGIN", "starting a read", err)))
        goto cleanup;
    snprintf(sql, sizeof sql, "%s ORDER BY id", ROW_COLUMNS);
    if ((rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL)) != SQLITE_OK ||
        (rc = sqlite3_prepare_v2(s->db, "SELECT 1 FROM receipts WHERE hash = ? AND id <> ?", -1,
                                 &w.find, NULL)) != SQLITE_OK ||
        (rc = sqlite3_prepare_v2(s->db,
                                 "SELECT min(id) FROM receipts WHERE prev_hash = ? AND id < ? "
                                 "AND origin = 'import'",
                                 -1, &w.fork, NULL)) != SQLITE_OK) {
        rc = db_fail(s, rc, "reading receipts", err);
        goto cleanup;
    }
    /* The chain needs every earlier local row, so even a single-row lookup walks from the start;
     * only the callback is filtered. */
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if ((rc = verify_row(&w, st, &row, err)))
            goto cleanup;
        if (only > 0 && row.id != only)
            continue;
        found = 1;
        if ((rc = fn(ctx, &row)))
            goto cleanup;
        if (only > 0) {
            rc = SQLITE_DONE;
            break;
        }
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        rc = db_fail(s, rc, "reading receipts", err);
        goto cleanup;
    }
    rc = 0;
    if (only > 0 && !found)
        rc = err_set(err, ERR_INPUT, "receipt store '%s' has no receipt %lld", s->path,
                     (long long)only);
cleanup:
    sqlite3_finalize(st);
    sqlite3_finalize(w.find);
    sqlite3_finalize(w.fork);
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
    return rc;
}

int store_foreach(struct store *s, store_row_fn fn, void *ctx, struct gate_err *err)
{
    return walk_rows(s, 0, fn, ctx, err);
}

int store_get(struct store *s, int64_t id, store_row_fn fn, void *ctx, struct gate_err *err)
{
    if (id <= 0)
        return err_set(err, ERR_INPUT, "receipt id %lld is not a positive integer", (long long)id);
    return walk_rows(s, id, fn, ctx, err);
}

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

static int export_row(void *vctx, const struct store_row *r)
{
    struct export_ctx *x = vctx;
    char *pb = b64(r->payload, r->len), *sb = b64(r->sig, 64), *line = NULL;
    json_t *env = NULL;
    if (!pb || !sb)
        goto fail;
    env = json_pack("{s:s, s:s, s:[{s:s, s:s}]}", "payloadType", RECEIPT_PAYLOAD_TYPE, "payload",
                    pb, "signatures", "keyid", r->key_id, "sig", sb);
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

int store_export(struct store *s, const char *path, struct gate_err *err)
{
    char tmp[1100];
    struct export_ctx x = {0};
    int rc = 0;
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return err_set(err, ERR_INPUT, "export path '%.100s...' is too long", path);
    x.f = fopen(tmp, "w");
    if (!x.f) {
        rc = err_set(err, ERR_ENV, "cannot create '%s': %s", tmp, strerror(errno));
        goto cleanup;
    }
    rc = store_foreach(s, export_row, &x, err);
    if (rc && !x.failed)
        goto cleanup;
    if (x.failed || fflush(x.f) != 0 || fsync(fileno(x.f)) != 0) {
        rc = err_set(err, ERR_ENV, "cannot write '%s': %s", tmp,
                     errno ? strerror(errno) : "out of memory");
        goto cleanup;
    }
    int c = fclose(x.f);
    x.f = NULL;
    if (c != 0 || rename(tmp, path) != 0) {
        rc = err_set(err, ERR_ENV, "cannot write '%s': %s", path, strerror(errno));
        goto cleanup;
    }
cleanup:
    if (x.f)
        fclose(x.f);
    if (rc)
        unlink(tmp);
    return rc;
}

struct incoming {
    char *payload;
    size_t len;
    unsigned char sig[64];
    char key_id[80];
    char hash[65];
    char prev_hash[65];
    char cell[256];
    char verdict[16];
    int line;
};

static int cmp_hash(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Parse and verify one export line into in. ERR_INPUT malformed, ERR_RUNTIME forged. */
static int parse_line(const char *path, int lineno, const char *text, struct incoming *in,
                      struct gate_err *err)
{
    json_error_t jerr;
    json_t *env = NULL, *p = NULL;
    struct gate_err perr = {0};
    unsigned char pk[32];
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
    if (strcmp(type, RECEIPT_PAYLOAD_TYPE) != 0) {
        rc = err_set(err, ERR_INPUT, "%s:%d: payloadType '%.100s' is not a gate receipt", path,
                     lineno, type);
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
    if (receipt_parse(in->payload, in->len, &p, &perr) != 0) {
        rc = err_set(err, ERR_RUNTIME, "%s:%d: receipt refused: %s", path, lineno, perr.msg);
        goto cleanup;
    }
    if (receipt_cell_name(p, in->cell, sizeof in->cell, NULL) != 0)
        snprintf(in->cell, sizeof in->cell, "?");
    const char *pkey = json_string_value(json_object_get(p, "key_id"));
    const char *pprev = json_string_value(json_object_get(p, "prev_hash"));
    const char *verdict = json_string_value(json_object_get(p, "verdict"));
    receipt_hash(in->payload, in->len, in->sig, in->hash);
    if (!pkey || key_parse_public(pkey, pk, NULL) != 0 || strcmp(pkey, keyid) != 0 ||
        receipt_verify(in->payload, in->len, pk, in->sig) != 0) {
        rc = err_set(err, ERR_RUNTIME,
                     "%s:%d: forged or corrupt receipt (cell %s, hash %.16s...): the signature "
                     "does not verify under the key the payload names",
                     path, lineno, in->cell, in->hash);
        goto cleanup;
    }
    if (!strcmp(in->cell, "?") || !verdict || !*verdict || strlen(verdict) >= sizeof in->verdict ||
        !pprev || strlen(pprev) != 64) {
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

/* 1 when a receipt with this hash is stored, 0 when not, negative on error. */
static int stored(struct store *s, sqlite3_stmt *st, const char *hash, struct gate_err *err)
{
    sqlite3_reset(st);
    sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    return db_fail(s, rc, "looking up a receipt", err);
}

int store_import(struct store *s, const char *path, int *n_imported, struct gate_err *err)
{
    FILE *f = NULL;
    char *line = NULL;
    size_t cap = 0;
    struct incoming *in = NULL;
    const char **sorted = NULL;
    sqlite3_stmt *has = NULL;
    int n = 0, n_cap = 0, lineno = 0, added = 0, rc = 0;
    if (n_imported)
        *n_imported = 0;
    f = fopen(path, "r");
    if (!f) {
        rc = err_set(err, ERR_INPUT, "cannot open '%s': %s", path, strerror(errno));
        goto cleanup;
    }
    /* pass 1: every envelope parses and every signature verifies, or nothing is imported */
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == strlen(line))
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
    }
    if (ferror(f)) {
        rc = err_set(err, ERR_ENV, "cannot read '%s': %s", path, strerror(errno));
        goto cleanup;
    }
    sorted = malloc((size_t)(n ? n : 1) * sizeof *sorted);
    if (!sorted) {
        rc = err_set(err, ERR_ENV, "out of memory importing '%s'", path);
        goto cleanup;
    }
    for (int i = 0; i < n; i++)
        sorted[i] = in[i].hash;
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_hash);

    /* pass 2: one transaction; every predecessor resolves, else the whole file is refused */
    if ((rc = exec(s, "BEGIN IMMEDIATE", "starting the import", err)))
        goto cleanup;
    if ((rc = sqlite3_prepare_v2(s->db, "SELECT 1 FROM receipts WHERE hash = ?", -1, &has, NULL)) !=
        SQLITE_OK) {
        rc = db_fail(s, rc, "preparing the import", err);
        goto cleanup;
    }
    for (int i = 0; i < n; i++) {
        struct incoming *r = &in[i];
        int have = stored(s, has, r->hash, err);
        if (have < 0) {
            rc = have;
            goto cleanup;
        }
        if (have)
            continue;
        if (strcmp(r->prev_hash, RECEIPT_GENESIS_HASH) != 0) {
            const char *key = r->prev_hash;
            int linked = bsearch(&key, sorted, (size_t)n, sizeof *sorted, cmp_hash) != NULL;
            if (!linked && (linked = stored(s, has, key, err)) < 0) {
                rc = linked;
                goto cleanup;
            }
            if (!linked) {
                rc = err_set(err, ERR_RUNTIME,
                             "%s:%d: receipt for %s (hash %.16s...) extends %.16s..., which is "
                             "neither in the file nor in the store: a receipt was removed from "
                             "the export; nothing imported",
                             path, r->line, r->cell, r->hash, r->prev_hash);
                goto cleanup;
            }
        }
        if ((rc = insert_receipt(s, "import", r->cell, r->verdict, r->payload, r->len, r->sig,
                                 r->key_id, r->hash, r->prev_hash, NULL, err)))
            goto cleanup;
        added++;
    }
    if ((rc = exec(s, "COMMIT", "committing the import", err)))
        goto cleanup;
    if (n_imported)
        *n_imported = added;
cleanup:
    sqlite3_finalize(has);
    if (rc)
        rollback(s);
    for (int i = 0; i < n; i++)
        free(in[i].payload);
    free(in);
    free(sorted);
    free(line);
    if (f)
        fclose(f);
    return rc;
}

/* ---- sign-offs ------------------------------------------------------------------------------ */

int store_add_signoff(struct store *s, json_t *payload, const struct key_pair *k,
                      struct gate_err *err)
{
    char head[65], hash[65];
    unsigned char sig[64];
    char *bytes = NULL;
    size_t len = 0;
    int64_t count = 0;
    sqlite3_stmt *st = NULL;
    int rc = 0;
    if (!json_is_object(payload)) {
        rc = err_set(err, ERR_INPUT, "a sign-off payload must be a JSON object");
        goto cleanup;
    }
    if ((rc = exec(s, "BEGIN IMMEDIATE", "starting the sign-off transaction", err)))
        goto cleanup;
    if ((rc = local_head(s, head, err)) ||
        (rc = query_int(s, "SELECT count(*) FROM receipts", 0, &count, err)))
        goto cleanup;
    if ((rc = set_string(payload, "key_id", k->id, err)) ||
        (rc = set_string(payload, "chain_head", head, err)))
        goto cleanup;
    if (json_object_set_new(payload, "receipts", json_integer(count)) != 0) {
        rc = err_set(err, ERR_ENV, "out of memory setting sign-off \"receipts\"");
        goto cleanup;
    }
    if ((rc = receipt_canonical(payload, &bytes, &len, err)))
        goto cleanup;
    if ((rc = receipt_sign_type(SIGNOFF_PAYLOAD_TYPE, bytes, len, k, sig))) {
        rc = err_set(err, ERR_ENV, "out of memory signing the sign-off");
        goto cleanup;
    }
    receipt_hash(bytes, len, sig, hash);
    rc = sqlite3_prepare_v2(s->db,
                            "INSERT INTO signoffs (payload, signature, key_id, hash, created_at) "
                            "VALUES (?, ?, ?, ?, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))",
                            -1, &st, NULL);
    if (rc != SQLITE_OK) {
        rc = db_fail(s, rc, "preparing the sign-off insert", err);
        goto cleanup;
    }
    sqlite3_bind_text(st, 1, bytes, (int)len, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, sig, 64, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, k->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, hash, -1, SQLITE_STATIC);
    if ((rc = sqlite3_step(st)) != SQLITE_DONE) {
        rc = db_fail(s, rc, "inserting the sign-off", err);
        goto cleanup;
    }
    rc = exec(s, "COMMIT", "committing the sign-off", err);
cleanup:
    sqlite3_finalize(st);
    if (rc && s && s->db)
        rollback(s);
    free(bytes);
    return rc;
}
