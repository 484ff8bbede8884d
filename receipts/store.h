/* store.h — the SQLite receipt store: append-only, hash-chained, signed receipts and sign-offs.
 *
 * Invariants: every row of `receipts` holds the exact canonical payload bytes that were signed
 * and its 64-byte signature; the other columns (cell, verdict, key_id, hash, prev_hash,
 * created_at) are conveniences for listing and are re-checked against the payload, never
 * trusted. Rows are never updated or deleted (triggers refuse both). Local receipts (origin
 * 'local') form one chain in id order: each payload's "prev_hash" is the hash of the previous
 * local receipt (RECEIPT_GENESIS_HASH for the first). Imported receipts (origin 'import') keep
 * their original payload and signature; their "prev_hash" must name a receipt present in the
 * store (or genesis). docs/receipts.md describes the schema, migrations and import design.
 * Start reading: store_open(), store_append(), store_foreach().
 */
#ifndef GATE_STORE_H
#define GATE_STORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/err.h"
#include "receipts/key.h"

/* The store schema version store_open() migrates to. */
#define STORE_SCHEMA_VERSION 1

struct store; /* opaque: one SQLite connection */

/* Open (creating if missing) the store at path, in WAL mode with a 10 s busy timeout, and apply
 * forward migrations up to STORE_SCHEMA_VERSION in one transaction. Refuses (ERR_INPUT) a file
 * that is not a gate store or was written by a newer schema. Errors: ERR_ENV when the file
 * cannot be opened/created or stays locked past the timeout. *out is NULL on failure. */
int store_open(struct store **out, const char *path, struct gate_err *err);

/* Close; s may be NULL. */
void store_close(struct store *s);

/* Append one receipt signed by k, in one BEGIN IMMEDIATE transaction: read the last local
 * receipt's hash, set payload "prev_hash" and "key_id" (overwriting), add "schema_version"
 * (RECEIPT_SCHEMA_VERSION) and a random "nonce" when absent, canonicalize, sign, insert.
 * payload must hold "cell": {"model","host","mode"} (non-empty strings) and "verdict" (a string
 * of at most 15 bytes); it is modified in place (the caller keeps its reference). *id (may be
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
    int chain_ok;        /* column hash recomputes and the payload's prev_hash links correctly */
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

/* Write every receipt (local and imported, id order) to path as JSON lines, one DSSE envelope
 * per line (docs/receipts.md), via a temporary file renamed into place. Errors: ERR_ENV. */
int store_export(struct store *s, const char *path, struct gate_err *err);

/* Import an export file. First parses and verifies EVERY envelope (payloadType, canonical
 * payload, signature under the payload's key_id, prev_hash resolving to genesis, an earlier
 * line or a stored receipt) and refuses the whole file (ERR_RUNTIME for a bad signature or a
 * broken link, ERR_INPUT for a malformed line) naming the first bad line and its cell; then
 * inserts, in one transaction, those not already stored (same hash). *n_imported (may be NULL)
 * receives the count of new rows. */
int store_import(struct store *s, const char *path, int *n_imported, struct gate_err *err);

/* Append a release sign-off signed by k (DSSE payloadType SIGNOFF_PAYLOAD_TYPE, so it can never
 * pass for a receipt): sets payload "key_id", "chain_head" (hash of the last local receipt, or
 * genesis) and "receipts" (number of receipts in the store), canonicalizes, signs, inserts in
 * one transaction. Errors as store_append(). */
int store_add_signoff(struct store *s, json_t *payload, const struct key_pair *k,
                      struct gate_err *err);

#endif
