/* store.c — the SQLite receipt store (see store.h; schema and design in docs/receipts.md):
 * opening, the schema and its migrations, appending a receipt. The rest of the store lives next
 * to it, sharing receipts/store_internal.h: store_verify.c (the chain index, verification, the
 * audit), store_signoff.c (signed head records and sign-offs), store_exchange.c (export and
 * import).
 *
 * Concurrency: WAL mode, a busy timeout (10 s, GATE_DB_BUSY_MS overrides), and every write in
 * one BEGIN IMMEDIATE transaction, so two `gate run` processes appending to one file serialize
 * on the write lock instead of failing, and the chain read-then-insert cannot interleave.
 * Verification never trusts a column: hashes are recomputed from payload bytes and signature,
 * each key's chain is followed through an in-memory index of recomputed hashes (struct
 * chain_index) built in id order, and the columns are compared to the signed payload. Import
 * builds the same index over the stored rows and extends it line by line, so an import accepts
 * exactly what verification will accept afterwards.
 * Start reading: store_open(), then store_append(), then verify_row() (store_verify.c), then
 * store_audit().
 */
#include "receipts/store.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "receipts/receipt.h"
#include "receipts/store_internal.h"

#define STORE_BUSY_MS 10000
#define STORE_APP_ID 0x67617465 /* "gate" in PRAGMA application_id */

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
    /* 2: signed head records (append-only); per-key chain lookups */
    "CREATE TABLE heads ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  payload TEXT NOT NULL,"
    "  signature BLOB NOT NULL CHECK (length(signature) = 64),"
    "  key_id TEXT NOT NULL,"
    "  hash TEXT NOT NULL UNIQUE,"
    "  created_at TEXT NOT NULL);"
    "CREATE TRIGGER heads_no_update BEFORE UPDATE ON heads BEGIN"
    "  SELECT RAISE(ABORT, 'head records are append-only: UPDATE refused'); END;"
    "CREATE TRIGGER heads_no_delete BEFORE DELETE ON heads BEGIN"
    "  SELECT RAISE(ABORT, 'head records are append-only: DELETE refused'); END;"
    "CREATE INDEX receipts_key ON receipts(key_id, id);",
};

/* Map an SQLite failure to a status and a sentence naming the store and the step. */
int store_db_fail(const struct store *s, int rc, const char *what, struct gate_err *err)
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

int store_exec(struct store *s, const char *sql, const char *what, struct gate_err *err)
{
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : store_db_fail(s, rc, what, err);
}

void store_rollback(struct store *s)
{
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* A single integer from sql (no parameters); *out = dflt when no row or NULL. */
int store_query_int(struct store *s, const char *sql, int64_t dflt, int64_t *out,
                    struct gate_err *err)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) {
        rc = store_db_fail(s, rc, "reading the schema", err);
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
        rc = store_db_fail(s, rc, "reading the schema", err);
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
    if ((rc = store_query_int(s,
                              "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = "
                              "'schema_version'",
                              0, &has_table, err)))
        return rc;
    if (has_table &&
        (rc = store_query_int(s, "SELECT max(version) FROM schema_version", 0, &version, err)) ==
            0 &&
        version == STORE_SCHEMA_VERSION)
        return 0;
    if (rc)
        return rc;
    if ((rc = store_exec(s, "BEGIN IMMEDIATE", "starting the schema migration", err)))
        goto cleanup;
    if ((rc = store_query_int(s,
                              "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = "
                              "'schema_version'",
                              0, &has_table, err)))
        goto cleanup;
    if (!has_table) {
        if ((rc = store_query_int(
                 s, "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'", 0, &others,
                 err)))
            goto cleanup;
        if (others) {
            rc = err_set(err, ERR_INPUT,
                         "'%s' is an SQLite database but not a gate receipt store (no "
                         "schema_version table)",
                         s->path);
            goto cleanup;
        }
        if ((rc = store_exec(s,
                             "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at "
                             "TEXT NOT NULL)",
                             "creating the schema_version table", err)))
            goto cleanup;
        snprintf(sql, sizeof sql, "PRAGMA application_id = %d", STORE_APP_ID);
        if ((rc = store_exec(s, sql, "setting the application id", err)))
            goto cleanup;
    }
    if ((rc = store_query_int(s, "SELECT max(version) FROM schema_version", 0, &version, err)))
        goto cleanup;
    if (version > STORE_SCHEMA_VERSION) {
        rc = err_set(err, ERR_INPUT,
                     "receipt store '%s' has schema version %lld; this gate knows up to %d "
                     "(written by a newer gate)",
                     s->path, (long long)version, STORE_SCHEMA_VERSION);
        goto cleanup;
    }
    for (int64_t v = version + 1; v <= STORE_SCHEMA_VERSION; v++) {
        if ((rc = store_exec(s, MIGRATIONS[v - 1], "migrating the schema", err)))
            goto cleanup;
        snprintf(sql, sizeof sql,
                 "INSERT INTO schema_version VALUES (%lld, strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', "
                 "'now'))",
                 (long long)v);
        if ((rc = store_exec(s, sql, "recording the schema version", err)))
            goto cleanup;
    }
    rc = store_exec(s, "COMMIT", "committing the schema migration", err);
cleanup:
    if (rc)
        store_rollback(s);
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
            rc = store_db_fail(s, rc, "switching to WAL", err);
            goto cleanup;
        }
        usleep(10000);
        waited += 10;
    }
    sqlite3_finalize(st);
    st = NULL;
    if ((rc = store_exec(s, "PRAGMA synchronous = FULL", "setting synchronous", err)))
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

/* "file:" URI of path with everything but unreserved characters and '/' percent-encoded, plus
 * the query; 0, or -1 when it does not fit. */
static int uri_of(const char *path, const char *query, char *out, size_t n)
{
    static const char HEX[] = "0123456789ABCDEF";
    size_t k = 0;
    int w = snprintf(out, n, "file:");
    if (w < 0 || (size_t)w >= n)
        return -1;
    k = (size_t)w;
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || strchr("-._~/", *p);
        if (k + 4 >= n)
            return -1;
        if (plain) {
            out[k++] = (char)*p;
        } else {
            out[k++] = '%';
            out[k++] = HEX[*p >> 4];
            out[k++] = HEX[*p & 15];
        }
    }
    w = snprintf(out + k, n - k, "?%s", query);
    return w < 0 || (size_t)w >= n - k ? -1 : 0;
}

/* The schema check of a read-only open: exactly STORE_SCHEMA_VERSION, nothing migrated. */
static int check_schema_readonly(struct store *s, struct gate_err *err)
{
    int64_t has_table = 0, version = 0;
    int rc = store_query_int(s,
                             "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = "
                             "'schema_version'",
                             0, &has_table, err);
    if (rc)
        return rc;
    if (!has_table)
        return err_set(err, ERR_INPUT, "'%s' is not a gate receipt store (no schema_version table)",
                       s->path);
    if ((rc = store_query_int(s, "SELECT max(version) FROM schema_version", 0, &version, err)))
        return rc;
    if (version > STORE_SCHEMA_VERSION)
        return err_set(err, ERR_INPUT,
                       "receipt store '%s' has schema version %lld; this gate knows up to %d "
                       "(written by a newer gate)",
                       s->path, (long long)version, STORE_SCHEMA_VERSION);
    if (version < STORE_SCHEMA_VERSION)
        return err_set(err, ERR_INPUT,
                       "receipt store '%s' has schema version %lld; this gate reads version %d "
                       "and does not migrate a store it opens read-only: run a writing command "
                       "on it first (gate run, or gate receipt import)",
                       s->path, (long long)version, STORE_SCHEMA_VERSION);
    return 0;
}

/* 1 when the folder holding path is writable by this process (effective ids). */
static int folder_writable(const char *path)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    return faccessat(AT_FDCWD, dir, W_OK, AT_EACCESS) == 0;
}

/* Open s->path read-only through a URI with query; run the schema check (the first read, which
 * is when SQLite opens the WAL index). */
static int open_ro_uri(struct store *s, const char *query, struct gate_err *err)
{
    char uri[3200];
    if (uri_of(s->path, query, uri, sizeof uri) != 0)
        return err_set(err, ERR_INPUT, "receipt store path '%.100s...' is too long", s->path);
    int rc = sqlite3_open_v2(uri, &s->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
    if (rc != SQLITE_OK)
        return err_set(err, ERR_ENV, "cannot open receipt store '%s' read-only: %s", s->path,
                       s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, s->busy_ms);
    return check_schema_readonly(s, err);
}

int store_open_readonly(struct store **out, const char *path, struct gate_err *err)
{
    struct store *s = NULL;
    struct stat st, wal;
    char wal_path[1100];
    int rc = 0;
    *out = NULL;
    if (sodium_init() < 0) {
        rc = err_set(err, ERR_ENV, "libsodium failed to initialize");
        goto cleanup;
    }
    if (stat(path, &st) != 0) {
        rc = errno == ENOENT || errno == ENOTDIR
                 ? err_set(err, ERR_INPUT, "no receipt store at '%s' (give one with --db)", path)
                 : err_set(err, ERR_ENV, "cannot open receipt store '%s': %s", path,
                           strerror(errno));
        goto cleanup;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = err_set(err, ERR_INPUT, "'%s' is not a receipt store (not a regular file)", path);
        goto cleanup;
    }
    s = calloc(1, sizeof *s);
    if (!s) {
        rc = err_set(err, ERR_ENV, "out of memory opening '%s'", path);
        goto cleanup;
    }
    snprintf(s->path, sizeof s->path, "%s", path);
    s->readonly = 1;
    s->busy_ms = STORE_BUSY_MS;
    const char *env = getenv("GATE_DB_BUSY_MS");
    if (env && *env)
        s->busy_ms = atoi(env) > 0 ? atoi(env) : 0;
    struct gate_err first = {0};
    if ((rc = open_ro_uri(s, "mode=ro", &first)) == 0)
        goto done;
    /* A WAL store whose index (-shm) does not exist cannot be read through the normal read-only
     * path when the folder is not writable: SQLite would have to create the -shm. Then, and
     * only when no WAL file holds frames that the main file lacks, open it immutable: no writer
     * can start a transaction without creating -wal and -shm in that folder, and none is
     * connected (a connected WAL writer keeps the -shm). */
    snprintf(wal_path, sizeof wal_path, "%s-wal", path);
    int wal_frames = stat(wal_path, &wal) == 0 && wal.st_size > 0;
    if (folder_writable(path) || wal_frames || rc == ERR_INPUT) {
        err_set(err, first.code, "%s%s", first.msg,
                wal_frames && !folder_writable(path)
                    ? " (its WAL file holds frames and the folder is not writable: ask its "
                      "owner to run a writing command, which checkpoints it)"
                    : "");
        goto cleanup;
    }
    sqlite3_close(s->db);
    s->db = NULL;
    if ((rc = open_ro_uri(s, "mode=ro&immutable=1", err)))
        goto cleanup;
done:
    *out = s;
    s = NULL;
cleanup:
    store_close(s);
    return rc;
}

/* Insert one receipt row (origin 'local' or 'import'); *id receives its row id. */
int store_insert_receipt(struct store *s, const char *origin, const char *cell, const char *verdict,
                         const char *payload, size_t len, const unsigned char sig[64],
                         const char *key_id, const char *hash, const char *prev_hash, int64_t *id,
                         struct gate_err *err)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(
        s->db,
        "INSERT INTO receipts (origin, cell, verdict, payload, signature, key_id, hash, "
        "prev_hash, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, "
        "strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))",
        -1, &st, NULL);
    if (rc != SQLITE_OK) {
        rc = store_db_fail(s, rc, "preparing the receipt insert", err);
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
        rc = store_db_fail(s, rc, "inserting a receipt", err);
        goto cleanup;
    }
    if (id)
        *id = sqlite3_last_insert_rowid(s->db);
    rc = 0;
cleanup:
    sqlite3_finalize(st);
    return rc;
}

int store_set_string(json_t *obj, const char *key, const char *value, struct gate_err *err)
{
    if (json_object_set_new(obj, key, json_string(value)) != 0)
        return err_set(err, ERR_ENV, "out of memory setting payload \"%s\"", key);
    return 0;
}

/* The recomputed hash of the newest receipt signed by k (genesis when none) into hex: the
 * key_id column only narrows the search; a row counts when its payload names k and its
 * signature verifies under k, as verification will judge it. */
static int key_head(struct store *s, const struct key_pair *k, char hex[65], struct gate_err *err)
{
    sqlite3_stmt *st = NULL;
    json_t *p = NULL;
    int rc = sqlite3_prepare_v2(s->db,
                                "SELECT payload, signature FROM receipts WHERE key_id = ? ORDER "
                                "BY id DESC",
                                -1, &st, NULL);
    if (rc != SQLITE_OK) {
        rc = store_db_fail(s, rc, "reading the chain head", err);
        goto cleanup;
    }
    sqlite3_bind_text(st, 1, k->id, -1, SQLITE_STATIC);
    memcpy(hex, RECEIPT_GENESIS_HASH, 65);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *payload = (const char *)sqlite3_column_text(st, 0);
        size_t len = (size_t)sqlite3_column_bytes(st, 0);
        const unsigned char *sig = sqlite3_column_blob(st, 1);
        /* a row of this key that cannot be checked (damaged, or memory ran out) is never
         * skipped: extending an older receipt instead would fork the key's own chain */
        if (!payload || !sig || sqlite3_column_bytes(st, 1) != 64 ||
            receipt_parse(payload, len, &p, NULL) != 0 ||
            !json_string_value(json_object_get(p, "key_id")) ||
            strcmp(json_string_value(json_object_get(p, "key_id")), k->id) != 0 ||
            receipt_verify(payload, len, k->pk, sig) != 0) {
            rc = err_set(err, ERR_RUNTIME,
                         "receipt store '%s': the newest receipt signed by %s"
                         " cannot be verified (damaged, or out of memory); not extending its"
                         " chain",
                         s->path, k->id);
            goto cleanup;
        }
        receipt_hash(payload, len, sig, hex);
        break;
    }
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE
             ? 0
             : store_db_fail(s, rc, "reading the chain head", err);
cleanup:
    json_decref(p);
    sqlite3_finalize(st);
    return rc;
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
        if ((rc = store_set_string(payload, "nonce", nonce, err)))
            goto cleanup;
    }
    if ((rc = store_exec(s, "BEGIN IMMEDIATE", "starting the receipt transaction", err)))
        goto cleanup;
    if ((rc = key_head(s, k, head, err)))
        goto cleanup;
    if ((rc = store_set_string(payload, "prev_hash", head, err)) ||
        (rc = store_set_string(payload, "key_id", k->id, err)))
        goto cleanup;
    if ((rc = receipt_canonical(payload, &bytes, &len, err)))
        goto cleanup;
    if (len > STORE_MAX_PAYLOAD) {
        rc = err_set(err, ERR_INPUT,
                     "receipt payload for %s is %zu bytes; a receipt holds at most %d (its "
                     "export line must stay under %d bytes)",
                     cell, len, STORE_MAX_PAYLOAD, STORE_MAX_LINE);
        goto cleanup;
    }
    if ((rc = receipt_sign(bytes, len, k, sig))) {
        rc = err_set(err, ERR_ENV, "out of memory signing the receipt for %s", cell);
        goto cleanup;
    }
    receipt_hash(bytes, len, sig, hash);
    verdict = json_string_value(json_object_get(payload, "verdict"));
    if ((rc = store_insert_receipt(s, "local", cell, verdict, bytes, len, sig, k->id, hash, head,
                                   id, err)))
        goto cleanup;
    rc = store_exec(s, "COMMIT", "committing the receipt", err);
cleanup:
    if (rc && s && s->db)
        store_rollback(s);
    free(bytes);
    return rc;
}
