/* store.c — the SQLite receipt store (see store.h; schema and design in docs/receipts.md).
 *
 * Concurrency: WAL mode, a busy timeout (10 s, GATE_DB_BUSY_MS overrides), and every write in
 * one BEGIN IMMEDIATE transaction, so two `gate run` processes appending to one file serialize
 * on the write lock instead of failing, and the chain read-then-insert cannot interleave.
 * Verification never trusts a column: hashes are recomputed from payload bytes and signature,
 * each key's chain is followed through an in-memory index of recomputed hashes (struct
 * chain_index) built in id order, and the columns are compared to the signed payload. Import
 * builds the same index over the stored rows and extends it line by line, so an import accepts
 * exactly what verification will accept afterwards.
 * Start reading: store_open(), then store_append(), then verify_row(), then store_audit().
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
#include <time.h>
#include <unistd.h>

#include "base/atomic.h"
#include "receipts/receipt.h"

#define STORE_BUSY_MS 10000
#define STORE_APP_ID 0x67617465 /* "gate" in PRAGMA application_id */

struct store {
    sqlite3 *db;
    char path[1024];
    int busy_ms;
    int readonly; /* opened by store_open_readonly() */
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
    int rc = query_int(s,
                       "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = "
                       "'schema_version'",
                       0, &has_table, err);
    if (rc)
        return rc;
    if (!has_table)
        return err_set(err, ERR_INPUT, "'%s' is not a gate receipt store (no schema_version table)",
                       s->path);
    if ((rc = query_int(s, "SELECT max(version) FROM schema_version", 0, &version, err)))
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

/* ---- the chain index ------------------------------------------------------------------------ */

/* One receipt whose signature verifies, as the chain sees it. */
struct link {
    char hash[65]; /* recomputed from payload and signature */
    char prev[65]; /* the signed prev_hash */
    char key[80];  /* the signed key_id */
    int64_t id;    /* row id; 0 for an import line not stored yet */
    int64_t depth; /* receipts in the chain ending here (1 for a key's first); -1 when broken */
};

/* Links in id order with two open-addressing tables of indices (-1 empty): by recomputed hash,
 * and by (key, prev) — "which receipt of this key already extends prev". */
struct chain_index {
    struct link *v;
    size_t n, cap;
    int32_t *by_hash, *by_link;
    size_t tcap; /* power of two, > 2n */
};

static uint64_t fnv(const char *s, uint64_t h)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

#define FNV0 0xcbf29ce484222325ull

static void index_free(struct chain_index *ix)
{
    free(ix->v);
    free(ix->by_hash);
    free(ix->by_link);
    memset(ix, 0, sizeof *ix);
}

static void table_put(int32_t *t, size_t tcap, uint64_t h, int32_t i)
{
    size_t slot = (size_t)h & (tcap - 1);
    while (t[slot] >= 0)
        slot = (slot + 1) & (tcap - 1);
    t[slot] = i;
}

static uint64_t link_hash(const char *key, const char *prev)
{
    return fnv(prev, fnv(key, FNV0) * 31);
}

/* Index of the link with recomputed hash, or -1. */
static int32_t find_hash(const struct chain_index *ix, const char *hash)
{
    if (!ix->tcap)
        return -1;
    for (size_t slot = (size_t)fnv(hash, FNV0) & (ix->tcap - 1); ix->by_hash[slot] >= 0;
         slot = (slot + 1) & (ix->tcap - 1))
        if (!strcmp(ix->v[ix->by_hash[slot]].hash, hash))
            return ix->by_hash[slot];
    return -1;
}

/* Index of the first link of key that extends prev, or -1. */
static int32_t find_link(const struct chain_index *ix, const char *key, const char *prev)
{
    if (!ix->tcap)
        return -1;
    for (size_t slot = (size_t)link_hash(key, prev) & (ix->tcap - 1); ix->by_link[slot] >= 0;
         slot = (slot + 1) & (ix->tcap - 1)) {
        const struct link *l = &ix->v[ix->by_link[slot]];
        if (!strcmp(l->key, key) && !strcmp(l->prev, prev))
            return ix->by_link[slot];
    }
    return -1;
}

/* Append a link. Returns 0 or ERR_ENV (out of memory, or more links than an int32 counts). */
static int index_add(struct chain_index *ix, const char *hash, const char *prev, const char *key,
                     int64_t id, int64_t depth, struct gate_err *err)
{
    if (ix->n >= 0x3fffffff)
        return err_set(err, ERR_ENV, "too many receipts to verify in one pass");
    if (ix->n == ix->cap) {
        size_t cap = ix->cap ? 2 * ix->cap : 256;
        struct link *v = realloc(ix->v, cap * sizeof *v);
        if (!v)
            return err_set(err, ERR_ENV, "out of memory verifying the receipt chain");
        ix->v = v;
        ix->cap = cap;
    }
    if (2 * (ix->n + 1) >= ix->tcap) {
        size_t tcap = ix->tcap ? 2 * ix->tcap : 512;
        int32_t *bh = malloc(tcap * sizeof *bh), *bl = malloc(tcap * sizeof *bl);
        if (!bh || !bl) {
            free(bh);
            free(bl);
            return err_set(err, ERR_ENV, "out of memory verifying the receipt chain");
        }
        memset(bh, 0xff, tcap * sizeof *bh);
        memset(bl, 0xff, tcap * sizeof *bl);
        for (size_t i = 0; i < ix->n; i++) {
            table_put(bh, tcap, fnv(ix->v[i].hash, FNV0), (int32_t)i);
            table_put(bl, tcap, link_hash(ix->v[i].key, ix->v[i].prev), (int32_t)i);
        }
        free(ix->by_hash);
        free(ix->by_link);
        ix->by_hash = bh;
        ix->by_link = bl;
        ix->tcap = tcap;
    }
    struct link *l = &ix->v[ix->n];
    snprintf(l->hash, sizeof l->hash, "%s", hash);
    snprintf(l->prev, sizeof l->prev, "%s", prev);
    snprintf(l->key, sizeof l->key, "%s", key);
    l->id = id;
    l->depth = depth;
    table_put(ix->by_hash, ix->tcap, fnv(l->hash, FNV0), (int32_t)ix->n);
    table_put(ix->by_link, ix->tcap, link_hash(l->key, l->prev), (int32_t)ix->n);
    ix->n++;
    return 0;
}

/* Name a link for a message: "receipt 12" or "line 3's receipt" style is the caller's; this
 * gives "receipt 12" or "a receipt earlier in the file". */
static const char *link_name(const struct link *l, char *buf, size_t n)
{
    if (l->id > 0)
        snprintf(buf, n, "receipt %lld", (long long)l->id);
    else
        snprintf(buf, n, "a receipt earlier in the file");
    return buf;
}

/* Does a receipt signed by key whose signed prev_hash is prev link into ix? 0 when it does
 * (*depth receives its chain length, -1 when its predecessor's chain is broken); else 1 with the
 * problem in why. The one rule for local rows, imported rows and import lines: prev is genesis
 * or the recomputed hash of an earlier receipt signed by the same key, and no earlier receipt
 * of that key extends the same prev. (Equivalent to "prev is the previous receipt of the same
 * key in id order": a forkless tree whose edges all point backwards is one path in id order.) */
static int link_check(const struct chain_index *ix, const char *key, const char *prev,
                      int64_t *depth, char *why, size_t n)
{
    char name[64];
    int32_t fork = find_link(ix, key, prev);
    *depth = -1;
    if (!strcmp(prev, RECEIPT_GENESIS_HASH)) {
        if (fork >= 0) {
            snprintf(why, n,
                     "chain forked: %s, signed by the same key, already starts that key's chain "
                     "(its history was rewritten)",
                     link_name(&ix->v[fork], name, sizeof name));
            return 1;
        }
        *depth = 1;
        return 0;
    }
    int32_t j = find_hash(ix, prev);
    if (j < 0) {
        snprintf(why, n,
                 "chain broken: prev_hash %.16s... names no verified receipt before it (a "
                 "receipt was removed or altered)",
                 prev);
        return 1;
    }
    if (strcmp(ix->v[j].key, key) != 0) {
        snprintf(why, n,
                 "chain broken: prev_hash names %s, which another key signed (a chain only "
                 "extends receipts of its own key)",
                 link_name(&ix->v[j], name, sizeof name));
        return 1;
    }
    if (fork >= 0) {
        snprintf(why, n,
                 "chain forked: %s, signed by the same key, already extends the same "
                 "predecessor (history was rewritten)",
                 link_name(&ix->v[fork], name, sizeof name));
        return 1;
    }
    *depth = ix->v[j].depth > 0 ? ix->v[j].depth + 1 : -1;
    return 0;
}

static int set_string(json_t *obj, const char *key, const char *value, struct gate_err *err)
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
        rc = db_fail(s, rc, "reading the chain head", err);
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
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : db_fail(s, rc, "reading the chain head", err);
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
        if ((rc = set_string(payload, "nonce", nonce, err)))
            goto cleanup;
    }
    if ((rc = exec(s, "BEGIN IMMEDIATE", "starting the receipt transaction", err)))
        goto cleanup;
    if ((rc = key_head(s, k, head, err)))
        goto cleanup;
    if ((rc = set_string(payload, "prev_hash", head, err)) ||
        (rc = set_string(payload, "key_id", k->id, err)))
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
    struct chain_index ix; /* every receipt whose signature verifies, in id order */
    char why[320];         /* the row's chain problem, when it has one */
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

/* Fill row from the current result row of st, verify it against the rows before it, and add it
 * to the chain index when its signature verifies. */
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

    /* chain: the signed prev_hash links to an earlier receipt of the same key, found by its
     * recomputed hash; the same rule for local and imported rows */
    int link_ok = 0;
    int64_t depth = -1;
    if (pprev && strlen(pprev) == 64) {
        link_ok = link_check(&w->ix, pkey ? pkey : "", pprev, &depth, w->why, sizeof w->why) == 0;
        if (!link_ok)
            problem(r, w->why);
    } else if (p) {
        problem(r, "payload has no prev_hash");
    }
    int hash_ok = !strcmp(computed, r->hash);
    if (!hash_ok)
        problem(r, "hash column does not recompute from payload and signature");
    r->chain_ok = link_ok && hash_ok;
    if (r->sig_ok && pprev && strlen(pprev) == 64 &&
        (rc = index_add(&w->ix, computed, pprev, pkey, r->id, link_ok ? depth : -1, err)))
        goto cleanup;

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

/* Walk every receipt in id order inside the caller's transaction, verifying each and building
 * w->ix; hand rows to fn (all, or only the one with id `only`). Returns 0, fn's non-zero value
 * (the walk then stops), or an error status. *found counts the rows handed over. */
static int walk_core(struct walk *w, int64_t only, store_row_fn fn, void *ctx, int *found,
                     struct gate_err *err)
{
    sqlite3_stmt *st = NULL;
    struct store_row row;
    char sql[256];
    int rc = 0;
    snprintf(sql, sizeof sql, "%s ORDER BY id", ROW_COLUMNS);
    if ((rc = sqlite3_prepare_v2(w->s->db, sql, -1, &st, NULL)) != SQLITE_OK) {
        rc = db_fail(w->s, rc, "reading receipts", err);
        goto cleanup;
    }
    /* The chain needs every earlier row, so even a single-row lookup walks from the start;
     * only the callback is filtered. */
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if ((rc = verify_row(w, st, &row, err)))
            goto cleanup;
        if (only > 0 && row.id != only)
            continue;
        if (found)
            (*found)++;
        if (fn && (rc = fn(ctx, &row)))
            goto cleanup;
        if (only > 0) {
            rc = SQLITE_DONE;
            break;
        }
    }
    if (rc != SQLITE_DONE) {
        rc = db_fail(w->s, rc, "reading receipts", err);
        goto cleanup;
    }
    rc = 0;
cleanup:
    sqlite3_finalize(st);
    return rc;
}

static int walk_rows(struct store *s, int64_t only, store_row_fn fn, void *ctx,
                     struct gate_err *err)
{
    struct walk w = {.s = s};
    int rc = 0, found = 0;
    if ((rc = exec(s, "BEGIN", "starting a read", err)))
        goto cleanup;
    if ((rc = walk_core(&w, only, fn, ctx, &found, err)))
        goto cleanup;
    if (only > 0 && !found)
        rc = err_set(err, ERR_INPUT, "receipt store '%s' has no receipt %lld", s->path,
                     (long long)only);
cleanup:
    index_free(&w.ix);
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

/* ---- head records and the audit ------------------------------------------------------------- */

static int is_hex64(const char *s)
{
    if (!s || strlen(s) != 64)
        return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return 0;
    return 1;
}

/* Verify a head record's bytes: canonical payload, signature under its own key_id with
 * HEAD_PAYLOAD_TYPE, and its fields. Fills key, head, *count; 0, or 1 with the problem. */
static int head_parse(const char *payload, size_t len, const unsigned char sig[64], char key[80],
                      char head[65], int64_t *count, char *why, size_t n)
{
    json_t *p = NULL;
    unsigned char pk[32];
    int bad = 1;
    key[0] = head[0] = '\0';
    *count = 0;
    if (receipt_parse(payload, len, &p, NULL) != 0) {
        snprintf(why, n, "payload is not canonical JSON");
        goto cleanup;
    }
    const char *pkey = json_string_value(json_object_get(p, "key_id"));
    const char *phead = json_string_value(json_object_get(p, "head"));
    json_t *pcount = json_object_get(p, "count");
    if (!pkey || key_parse_public(pkey, pk, NULL) != 0) {
        snprintf(why, n, "payload has no valid key_id");
        goto cleanup;
    }
    snprintf(key, 80, "%s", pkey);
    if (receipt_verify_type(HEAD_PAYLOAD_TYPE, payload, len, pk, sig) != 0) {
        snprintf(why, n, "signature does not verify under the payload's key_id");
        goto cleanup;
    }
    if (!is_hex64(phead) || !json_is_integer(pcount) || json_integer_value(pcount) < 0) {
        snprintf(why, n, "payload lacks \"head\" (64 hex) or \"count\" (integer >= 0)");
        goto cleanup;
    }
    snprintf(head, 65, "%s", phead);
    *count = json_integer_value(pcount);
    bad = 0;
cleanup:
    json_decref(p);
    return bad;
}

/* Does "key's chain ended at head, count receipts long" hold in ix? 0, or 1 with the problem. */
static int head_match(const struct chain_index *ix, const char *key, const char *head,
                      int64_t count, char *why, size_t n)
{
    char name[64];
    if (!strcmp(head, RECEIPT_GENESIS_HASH)) {
        if (count == 0)
            return 0;
        snprintf(why, n, "names genesis with a count of %lld", (long long)count);
        return 1;
    }
    int32_t j = find_hash(ix, head);
    if (j < 0) {
        snprintf(why, n,
                 "names receipt %.16s... (chain of %lld), which is not in the store: receipts "
                 "were deleted after this head was written",
                 head, (long long)count);
        return 1;
    }
    const struct link *l = &ix->v[j];
    if (strcmp(l->key, key) != 0) {
        snprintf(why, n, "names %s, which another key signed", link_name(l, name, sizeof name));
        return 1;
    }
    if (l->depth != count) {
        if (l->depth < 0)
            snprintf(why, n, "names %s, whose chain is broken", link_name(l, name, sizeof name));
        else
            snprintf(why, n,
                     "names %s with a chain of %lld receipts, but the store holds %lld behind "
                     "it: receipts were removed",
                     link_name(l, name, sizeof name), (long long)count, (long long)l->depth);
        return 1;
    }
    return 0;
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
        rc = db_fail(s, rc, step, err);
        goto cleanup;
    }
    sqlite3_bind_text(st, 1, bytes, (int)len, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, sig, 64, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, k->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, hash, -1, SQLITE_STATIC);
    if ((rc = sqlite3_step(st)) != SQLITE_DONE) {
        char step[96];
        snprintf(step, sizeof step, "inserting %s", what);
        rc = db_fail(s, rc, step, err);
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
    if ((rc = exec(s, "BEGIN IMMEDIATE", "starting the head record transaction", err)))
        goto cleanup;
    if ((rc = walk_core(&w, 0, NULL, NULL, NULL, err)))
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
    if ((rc = exec(s, "COMMIT", "committing the head record", err)))
        goto cleanup;
    if (head_hash)
        memcpy(head_hash, head, 65);
    if (count)
        *count = n;
cleanup:
    if (rc && s && s->db)
        rollback(s);
    index_free(&w.ix);
    json_decref(payload);
    return rc;
}

static int audit_row(void *ctx, const struct store_row *r)
{
    struct store_audit *a = ctx;
    a->n_rows++;
    if (r->sig_ok && r->chain_ok && r->columns_ok)
        return 0;
    if (!a->n_bad++) {
        a->first_bad_id = r->id;
        snprintf(a->first_problem, sizeof a->first_problem, "receipt %lld: %s", (long long)r->id,
                 r->problem);
    }
    return 0;
}

int store_audit(struct store *s, struct store_audit *out, struct gate_err *err)
{
    struct walk w = {.s = s};
    sqlite3_stmt *st = NULL;
    char why[256], key[80], head[65], computed[65];
    int64_t count = 0;
    int rc = 0;
    memset(out, 0, sizeof *out);
    if ((rc = exec(s, "BEGIN", "starting a read", err)))
        goto cleanup;
    if ((rc = walk_core(&w, 0, audit_row, out, NULL, err)))
        goto cleanup;
    rc = sqlite3_prepare_v2(
        s->db, "SELECT id, payload, signature, key_id, hash FROM heads ORDER BY id", -1, &st, NULL);
    if (rc != SQLITE_OK) {
        rc = db_fail(s, rc, "reading head records", err);
        goto cleanup;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0);
        const char *payload = (const char *)sqlite3_column_text(st, 1);
        size_t len = (size_t)sqlite3_column_bytes(st, 1);
        unsigned char sig[64] = {0};
        const void *sb = sqlite3_column_blob(st, 2);
        if (sb && sqlite3_column_bytes(st, 2) == 64)
            memcpy(sig, sb, 64);
        const char *key_col = (const char *)sqlite3_column_text(st, 3);
        const char *hash_col = (const char *)sqlite3_column_text(st, 4);
        out->n_heads++;
        receipt_hash(payload ? payload : "", len, sig, computed);
        int bad = head_parse(payload ? payload : "", len, sig, key, head, &count, why, sizeof why);
        if (!bad && (!key_col || strcmp(key_col, key) != 0 || !hash_col ||
                     strcmp(hash_col, computed) != 0)) {
            snprintf(why, sizeof why, "key_id or hash column disagrees with the signed record");
            bad = 1;
        }
        if (!bad)
            bad = head_match(&w.ix, key, head, count, why, sizeof why);
        if (bad) {
            if (!out->n_head_problems++) {
                out->first_bad_head_id = id;
                snprintf(out->head_problem, sizeof out->head_problem,
                         "head record %lld (key %.24s...): %.180s", (long long)id,
                         key[0] ? key : "?", why);
            }
            continue;
        }
        memcpy(out->head_key, key, sizeof out->head_key);
        memcpy(out->head_hash, head, 65);
        out->head_count = count;
    }
    if (rc != SQLITE_DONE) {
        rc = db_fail(s, rc, "reading head records", err);
        goto cleanup;
    }
    rc = 0;
cleanup:
    sqlite3_finalize(st);
    index_free(&w.ix);
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
    return rc;
}

int store_expect_head(struct store *s, const char *hash, struct gate_err *err)
{
    struct walk w = {.s = s};
    int rc = 0;
    if (!is_hex64(hash))
        return err_set(err, ERR_INPUT, "expected head '%.80s' is not 64 lowercase hex digits",
                       hash ? hash : "");
    if ((rc = exec(s, "BEGIN", "starting a read", err)))
        goto cleanup;
    if ((rc = walk_core(&w, 0, NULL, NULL, NULL, err)))
        goto cleanup;
    if (find_hash(&w.ix, hash) < 0)
        rc = err_set(err, ERR_RUNTIME,
                     "receipt store '%s' holds no verified receipt with hash %s: the receipts up "
                     "to that head were deleted, or the head is from another store",
                     s->path, hash);
cleanup:
    index_free(&w.ix);
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
    return rc;
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
        rc = db_fail(s, rc, "reading head records", err);
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
    rc = rc == SQLITE_DONE ? 0 : db_fail(s, rc, "reading head records", err);
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
    if ((rc = exec(s, "BEGIN", "starting a read", err)))
        goto cleanup;
    rc = walk_core(&w, 0, export_row, &x, NULL, err);
    if (!rc)
        rc = export_heads(s, &x, err);
    if (rc && !x.failed)
        goto cleanup;
    errno = 0;
    if (x.failed) {
        rc = err_set(err, ERR_ENV, "cannot write '%s': %s", path,
                     errno ? strerror(errno) : "out of memory");
        goto cleanup;
    }
    rc = atomic_commit(&a, err);
cleanup:
    index_free(&w.ix);
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
        if (head_parse(in->payload, in->len, in->sig, in->key_id, in->head, &in->count, why,
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
        !is_hex64(pprev)) {
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
        return db_fail(s, rc, "looking up a stored receipt", err);
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
    if ((rc = exec(s, "BEGIN IMMEDIATE", "starting the import", err)))
        goto cleanup;
    if ((rc = walk_core(&w, 0, note_bad, &bad, NULL, err))) {
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
        rc = db_fail(s, rc, "preparing the import", err);
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
        int32_t j = find_hash(&w.ix, r->hash);
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
        if (link_check(&w.ix, r->key_id, r->prev_hash, &depth, w.why, sizeof w.why) != 0) {
            rc = err_set(err, ERR_RUNTIME,
                         "%s:%d: receipt for %s (hash %.16s...) refused: %s; nothing imported",
                         path, r->line, r->cell, r->hash, w.why);
            goto cleanup;
        }
        if ((rc = index_add(&w.ix, r->hash, r->prev_hash, r->key_id, 0, depth, err)))
            goto cleanup;
        if ((rc = insert_receipt(s, "import", r->cell, r->verdict, r->payload, r->len, r->sig,
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
        if (head_match(&w.ix, r->key_id, r->head, r->count, w.why, sizeof w.why) != 0) {
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
            rc = db_fail(s, rc, "inserting a head record", err);
            goto cleanup;
        }
        rc = 0;
    }
    if ((rc = exec(s, "COMMIT", "committing the import", err)))
        goto cleanup;
    if (n_imported)
        *n_imported = added;
cleanup:
    sqlite3_finalize(has);
    sqlite3_finalize(has_head);
    sqlite3_finalize(ins_head);
    if (rc)
        rollback(s);
    index_free(&w.ix);
    free(bad.v);
    for (int i = 0; i < n; i++)
        free(in[i].payload);
    free(in);
    free(line);
    if (f)
        fclose(f);
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
    if ((rc = insert_signed(s, "signoffs", SIGNOFF_PAYLOAD_TYPE, payload, k, "the sign-off", err)))
        goto cleanup;
    rc = exec(s, "COMMIT", "committing the sign-off", err);
cleanup:
    if (rc && s && s->db)
        rollback(s);
    return rc;
}
