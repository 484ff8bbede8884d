/* store_internal.h — what the files of the receipt store share and nothing outside them sees:
 * the open handle (struct store), the chain index of verified receipts (struct chain_index),
 * the verification walk that builds it (struct walk), and the helpers more than one of the
 * files calls. The store is split by responsibility: store.c (open, schema, migrations,
 * append), store_verify.c (chain index, verification, audit), store_signoff.c (head records,
 * sign-offs), store_exchange.c (export, import). receipts/store.h is the API; include this
 * header only from those files.
 * Start reading: receipts/store.h, then store.c.
 */
#ifndef GATE_STORE_INTERNAL_H
#define GATE_STORE_INTERNAL_H

#include <jansson.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "receipts/store.h"

struct store {
    sqlite3 *db;
    char path[1024];
    int busy_ms;
    int readonly; /* opened by store_open_readonly() */
};

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

/* A verification pass over the receipts (store_walk_core): the index it builds and the
 * scratch text of the current row's chain problem. */
struct walk {
    struct store *s;
    struct chain_index ix; /* every receipt whose signature verifies, in id order */
    char why[320];         /* the row's chain problem, when it has one */
};

/* ---- store.c ---- */

/* Map an SQLite failure rc while `what` (a step, "inserting a receipt") to a status and a
 * sentence naming the store and the step; returns the status. */
int store_db_fail(const struct store *s, int rc, const char *what, struct gate_err *err);

/* sqlite3_exec of sql (no rows wanted); 0 or store_db_fail's status naming `what`. */
int store_exec(struct store *s, const char *sql, const char *what, struct gate_err *err);

/* Roll back the open transaction, if there is one. */
void store_rollback(struct store *s);

/* A single integer from sql (no parameters); *out = dflt when no row or NULL. */
int store_query_int(struct store *s, const char *sql, int64_t dflt, int64_t *out,
                    struct gate_err *err);

/* Insert one receipt row (origin 'local' or 'import') inside the caller's transaction; the
 * payload bytes (len of them) and strings are copied by SQLite; *id (may be NULL) receives the
 * row id. */
int store_insert_receipt(struct store *s, const char *origin, const char *cell, const char *verdict,
                         const char *payload, size_t len, const unsigned char sig[64],
                         const char *key_id, const char *hash, const char *prev_hash, int64_t *id,
                         struct gate_err *err);

/* obj[key] = value (a copy); 0, or ERR_ENV when memory ran out. */
int store_set_string(json_t *obj, const char *key, const char *value, struct gate_err *err);

/* ---- store_verify.c ---- */

/* Free the index's memory and zero it (a zeroed index is empty and may be freed again). */
void store_index_free(struct chain_index *ix);

/* Index of the link with recomputed hash, or -1. */
int32_t store_find_hash(const struct chain_index *ix, const char *hash);

/* Append a link (strings copied). Returns 0 or ERR_ENV (out of memory, or more links than an
 * int32 counts). */
int store_index_add(struct chain_index *ix, const char *hash, const char *prev, const char *key,
                    int64_t id, int64_t depth, struct gate_err *err);

/* Does a receipt signed by key whose signed prev_hash is prev link into ix? 0 when it does
 * (*depth receives its chain length, -1 when its predecessor's chain is broken); else 1 with the
 * problem in why (n bytes). The one chain rule for local rows, imported rows and import lines. */
int store_link_check(const struct chain_index *ix, const char *key, const char *prev,
                     int64_t *depth, char *why, size_t n);

/* Walk every receipt in id order inside the caller's transaction, verifying each and building
 * w->ix; hand rows to fn (all, or only the one with id `only`). Returns 0, fn's non-zero value
 * (the walk then stops), or an error status. *found (may be NULL) counts the rows handed over. */
int store_walk_core(struct walk *w, int64_t only, store_row_fn fn, void *ctx, int *found,
                    struct gate_err *err);

/* 1 when s is 64 lowercase hex digits. */
int store_is_hex64(const char *s);

/* Verify a head record's bytes: canonical payload, signature under its own key_id with
 * HEAD_PAYLOAD_TYPE, and its fields. Fills key, head, *count; 0, or 1 with the problem in why. */
int store_head_parse(const char *payload, size_t len, const unsigned char sig[64], char key[80],
                     char head[65], int64_t *count, char *why, size_t n);

/* Does "key's chain ended at head, count receipts long" hold in ix? 0, or 1 with the problem. */
int store_head_match(const struct chain_index *ix, const char *key, const char *head, int64_t count,
                     char *why, size_t n);

#endif
