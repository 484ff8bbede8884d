/* store.h — the SQLite receipt store: append-only, hash-chained, signed receipts, signed head
 * records and sign-offs.
 *
 * Invariants: every row of `receipts` holds the exact canonical payload bytes that were signed
 * and its 64-byte signature; the other columns (cell, verdict, key_id, hash, prev_hash,
 * created_at) are conveniences for listing and are re-checked against the payload, never
 * trusted. Rows are never updated or deleted (triggers refuse both). Chains are per signing key:
 * a receipt's "prev_hash" is the hash, recomputed from payload and signature, of the previous
 * receipt in the store signed by the same key (RECEIPT_GENESIS_HASH for a key's first), for
 * local appends, verification and import alike; a receipt can never extend another key's
 * receipt, and no two receipts of one key extend the same predecessor. Head records (table
 * `heads`, schema 2) are signed statements "key K's chain ended at receipt H, N receipts long";
 * store_audit() checks each against the receipts, so deleting receipts behind a head is seen.
 * docs/receipts.md describes the schema, migrations, export format and threat model.
 * Start reading: store_open(), store_append(), store_foreach(), store_audit().
 */
#ifndef GATE_STORE_H
#define GATE_STORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "receipts/key.h"

/* The store schema version store_open() migrates to. */
#define STORE_SCHEMA_VERSION 2

/* DSSE payloadType of a head record: its own domain, so it can never pass for a receipt. */
#define HEAD_PAYLOAD_TYPE "application/vnd.gate.head.v1+json"

/* The longest line store_import() reads (an export line is one DSSE envelope), and the largest
 * canonical receipt payload store_append() accepts (its base64 envelope stays under the line
 * bound). */
#define STORE_MAX_LINE (1 << 20)
#define STORE_MAX_PAYLOAD (512 * 1024)

struct store; /* opaque: one SQLite connection */

/* Open (creating if missing) the store at path, in WAL mode with a 10 s busy timeout, and apply
 * forward migrations up to STORE_SCHEMA_VERSION in one transaction. Refuses (ERR_INPUT) a file
 * that is not a gate store or was written by a newer schema. Errors: ERR_ENV when the file
 * cannot be opened/created or stays locked past the timeout. *out is NULL on failure. */
int store_open(struct store **out, const char *path, struct gate_err *err);

/* Open an existing store for reading only (SQLITE_OPEN_READONLY): never creates the file, never
 * switches the journal mode, never migrates. Works on a file and folder without write
 * permission: when SQLite cannot open the WAL index (no -shm and the folder is not writable) and
 * no WAL file with frames exists, the file is opened with immutable=1 (docs/receipts.md says why
 * that is safe). Errors: ERR_INPUT for a missing file ("no receipt store at 'x'"), a file that is
 * not a gate store, or a schema version other than STORE_SCHEMA_VERSION (older: run a writing
 * command first; newer: a newer gate wrote it); ERR_ENV when it cannot be read. Every write on
 * the returned store fails. *out is NULL on failure. */
int store_open_readonly(struct store **out, const char *path, struct gate_err *err);

/* Close; s may be NULL. */
void store_close(struct store *s);

/* Append one receipt signed by k, in one BEGIN IMMEDIATE transaction: read the hash (recomputed)
 * of the newest receipt signed by k (genesis when none), set payload "prev_hash" and "key_id"
 * (overwriting), add "schema_version"
 * (RECEIPT_SCHEMA_VERSION) and a random "nonce" when absent, canonicalize, sign, insert.
 * payload must hold "cell": {"model","host","mode"} (non-empty strings) and "verdict" (a string
 * of at most 15 bytes), and its canonical form may not exceed STORE_MAX_PAYLOAD bytes; it is
 * modified in place (the caller keeps its reference). *id (may be
 * NULL) receives the new row id. Errors: ERR_INPUT bad payload; ERR_ENV disk full, locked past
 * the busy timeout, I/O. */
int store_append(struct store *s, json_t *payload, const struct key_pair *k, int64_t *id,
                 struct gate_err *err);

/* One row as store_foreach() hands it over. Every pointer is borrowed and valid only during the
 * callback. Trust decisions must read the payload (parse it with receipt_parse()), and only when
 * sig_ok && chain_ok && columns_ok. */
struct store_row {
    int64_t id;
    char *payload; /* the stored payload bytes, NUL-terminated */
    size_t len;
    unsigned char sig[64];
    char key_id[80];     /* column; equals the payload's "key_id" whenever columns_ok */
    char hash[65];       /* column */
    char prev_hash[65];  /* column */
    char cell[256];      /* column: "model/host/mode" */
    char verdict[16];    /* column */
    char created_at[32]; /* column: UTC "YYYY-MM-DDTHH:MM:SSZ" when the row was inserted */
    int imported;        /* origin 'import' (kept from another store) rather than 'local' */
    int sig_ok;          /* payload is canonical JSON and sig verifies under its "key_id" */
    int chain_ok;        /* column hash recomputes and the payload's prev_hash links to the
                            previous receipt of the same key (recomputed hashes only) */
    int columns_ok;      /* cell, verdict, key_id, prev_hash columns agree with the payload */
    const char *problem; /* first problem in words ("" when all three are ok) */
};

/* Called per row; return non-zero to stop (store_foreach then returns that value). */
typedef int (*store_row_fn)(void *ctx, const struct store_row *row);

/* Hand every receipt to fn in id order, with sig_ok, chain_ok and columns_ok computed, from one
 * read transaction (a consistent snapshot; fn must not call other store functions on s).
 * Returns 0, fn's non-zero value, or an error status (ERR_ENV: I/O, lock). */
int store_foreach(struct store *s, store_row_fn fn, void *ctx, struct gate_err *err);

/* The same for one receipt id (ERR_INPUT when there is no such receipt). */
int store_get(struct store *s, int64_t id, store_row_fn fn, void *ctx, struct gate_err *err);

/* Write every receipt (local and imported, id order), then every head record (id order), to path
 * as JSON lines, one DSSE envelope per line (docs/receipts.md). The file is written through
 * base/atomic.h (an O_EXCL temporary in path's folder, fsync, rename; removed on failure or on
 * SIGINT/SIGTERM). Errors: ERR_ENV. */
int store_export(struct store *s, const char *path, struct gate_err *err);

/* Import an export file, all or nothing. First parses and verifies EVERY line (receipt or head
 * envelope, canonical payload, signature under the payload's key_id; lines longer than
 * STORE_MAX_LINE are refused without being read whole); then, in one transaction, each receipt
 * not already stored must link into its key's chain (genesis for a key's first, else the hash
 * of the key's newest receipt, stored or on an earlier line; never another key's receipt, never
 * a fork) and each head record must name a receipt of its key with a chain of exactly its
 * count. A receipt counts as already stored only when a stored row holds the byte-identical
 * payload and signature and verifies; a stored row with the same hash but other or unverifiable
 * bytes is a conflict. Errors, naming the file and line (and a conflicting row id): ERR_INPUT
 * unreadable file or malformed line (exit 2); ERR_RUNTIME bad signature, broken or foreign
 * link, fork, conflict, bad head (exit 1); ERR_ENV I/O, lock, disk (exit 3). Nothing is
 * imported on any error. *n_imported (may be NULL) receives the count of new receipt rows. */
int store_import(struct store *s, const char *path, int *n_imported, struct gate_err *err);

/* How far store_import_progress() has come, for a progress display (the caller decides what to
 * print and how often). */
struct store_import_status {
    int storing;        /* 0: pass 1, reading and verifying lines; 1: pass 2, the transaction */
    int64_t lines;      /* envelopes (receipts and head records) verified so far */
    int64_t bytes;      /* bytes of the file read so far (newlines included) */
    int64_t n_receipts; /* receipt envelopes verified so far; in pass 2 all of the file's */
    int64_t receipts;   /* pass 2: receipts checked against the store so far (of n_receipts) */
    int64_t added;      /* pass 2: of those, new rows inserted (nothing is committed yet) */
};

/* Called from the importing thread; it cannot stop the import. st is borrowed for the call. */
typedef void (*store_import_fn)(void *ctx, const struct store_import_status *st);

/* store_import() that calls fn (may be NULL) after every verified line in pass 1, and before
 * and after the receipts of pass 2 one by one (receipts = 0 .. n_receipts). Same result,
 * errors and all-or-nothing rule as store_import(). */
int store_import_progress(struct store *s, const char *path, store_import_fn fn, void *ctx,
                          int *n_imported, struct gate_err *err);

/* Append a release sign-off signed by k (DSSE payloadType SIGNOFF_PAYLOAD_TYPE, so it can never
 * pass for a receipt): sets payload "key_id", "chain_head" (hash of the last local receipt, or
 * genesis) and "receipts" (number of receipts in the store), canonicalizes, signs, inserts in
 * one transaction. Errors as store_append(). */
int store_add_signoff(struct store *s, json_t *payload, const struct key_pair *k,
                      struct gate_err *err);

/* Write a head record signed by k: in one BEGIN IMMEDIATE transaction, find the newest receipt
 * signed by k (after verifying the whole store), its recomputed hash and the length of its
 * chain, and append a DSSE-signed (HEAD_PAYLOAD_TYPE) payload {"count", "head", "key_id",
 * "nonce", "written_at"} to `heads`. head_hash (65 bytes) and *count (each may be NULL) receive
 * what was recorded (genesis and 0 when k signed no receipt). Errors: ERR_RUNTIME when k's
 * newest receipt does not chain back to genesis (the store is tampered; nothing written);
 * ERR_ENV as store_append(). */
int store_write_head(struct store *s, const struct key_pair *k, char head_hash[65], int64_t *count,
                     struct gate_err *err);

/* The result of store_audit(): the whole store, every row and every head record. */
struct store_audit {
    int n_rows;                   /* receipts in the store */
    int n_bad;                    /* receipts failing sig_ok, chain_ok or columns_ok */
    int64_t first_bad_id;         /* the lowest such receipt id, 0 when none */
    char first_problem[256];      /* "receipt ID: <problem>", "" when none */
    int n_heads;                  /* head records in the store */
    int n_head_problems;          /* head records that do not verify or do not match the chain */
    int64_t first_bad_head_id;    /* the lowest such head record id, 0 when none */
    char head_problem[256];       /* "head record ID (key ...): <problem>", "" when none */
    char head_key[80];            /* key_id of the newest valid head record, "" when none */
    char head_hash[65];           /* the receipt hash it names, "" when none */
    int64_t head_count;           /* the chain length it states, 0 when none */
    int n_signoffs;               /* sign-off records in the store */
    int n_signoff_problems;       /* sign-offs that do not verify or name receipts not here */
    int64_t first_bad_signoff_id; /* the lowest such sign-off id, 0 when none */
    char signoff_problem[256];    /* "sign-off ID (key ...): <problem>", "" when none */
    /* key trust of the sign-offs (store_audit_trusted; all 0 / "" from store_audit) */
    int signoff_trust_checked;       /* 1: a trust predicate was given */
    int n_signoff_untrusted;         /* sign-offs that verify but whose key it does not trust */
    int64_t first_untrusted_signoff; /* the lowest such sign-off id, 0 when none */
    char signoff_untrusted[128];     /* "sign-off ID (key ed25519:HEX)", "" when none */
};

/* Whether key_id ("ed25519:HEX", from a verified signed record) is trusted: nonzero yes. */
typedef int (*store_trust_fn)(void *ctx, const char *key_id);

/* Verify the whole store from one read transaction: every receipt as store_foreach() does
 * (whatever its cell names), then every head record: its signature verifies under its key_id
 * (HEAD_PAYLOAD_TYPE), and the receipt it names exists, is signed by that key and has exactly
 * `count` receipts in its chain (a receipt deleted behind a head is a head problem), then every
 * sign-off (issue 23 §5): canonical payload, signature under its key_id (SIGNOFF_PAYLOAD_TYPE),
 * key_id and hash columns equal to the signed record, its chain_head genesis or a verified
 * receipt of this store, and every receipt it names (cells[].receipt_sha256,
 * anchors[].receipt_sha256) a verified receipt of this store: a forged, garbage or copied
 * sign-off is a problem. Whether the signing key is trusted needs a trust source the audit
 * does not have: store_audit_trusted() takes one. A store is sound only when n_bad,
 * n_head_problems and n_signoff_problems are 0; the release check blocks otherwise.
 * Returns 0 (whatever was found), or ERR_ENV (I/O, lock, memory). */
int store_audit(struct store *s, struct store_audit *out, struct gate_err *err);

/* store_audit(), and also the key trust of every sign-off (issue 23 §5): a sign-off that has no
 * problem but whose key_id trusted(ctx, key_id) does not trust is counted in
 * n_signoff_untrusted (the first in first_untrusted_signoff / signoff_untrusted) and
 * signoff_trust_checked is 1. The trust source is the caller's (`gate receipt verify --ladder
 * / --trust`, through the release check's own predicate); trusted NULL is store_audit(). */
int store_audit_trusted(struct store *s, store_trust_fn trusted, void *ctx, struct store_audit *out,
                        struct gate_err *err);

/* An external anchor: 0 when the store holds a receipt whose recomputed hash is hash (64 hex,
 * e.g. a head printed in a CI log) and whose signature verifies; ERR_RUNTIME naming the hash
 * when it does not (receipts up to that head were deleted, or the head is from another store);
 * ERR_INPUT when hash is not 64 hex digits; ERR_ENV I/O. */
int store_expect_head(struct store *s, const char *hash, struct gate_err *err);

#endif
