/* store_verify.c — the receipt store's verification (see store.h, store_internal.h): the chain
 * index of verified receipts and the one linking rule (store_link_check), the walk that
 * verifies every row in id order (store_foreach, store_get), head records checked against the
 * chains, and the audit of the whole store (store_audit, store_expect_head). Import
 * (store_exchange.c) and head writing (store_signoff.c) build the same index through
 * store_walk_core, so they accept exactly what verification accepts.
 * Start reading: verify_row(), then store_link_check(), then store_audit().
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/receipt.h"
#include "receipts/store.h"
#include "receipts/store_internal.h"

/* ---- the chain index ------------------------------------------------------------------------ */

static uint64_t fnv(const char *s, uint64_t h)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

#define FNV0 0xcbf29ce484222325ull

void store_index_free(struct chain_index *ix)
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
int32_t store_find_hash(const struct chain_index *ix, const char *hash)
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
int store_index_add(struct chain_index *ix, const char *hash, const char *prev, const char *key,
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
int store_link_check(const struct chain_index *ix, const char *key, const char *prev,
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
    int32_t j = store_find_hash(ix, prev);
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

/* ---- verification --------------------------------------------------------------------------- */

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
        link_ok =
            store_link_check(&w->ix, pkey ? pkey : "", pprev, &depth, w->why, sizeof w->why) == 0;
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
        (rc = store_index_add(&w->ix, computed, pprev, pkey, r->id, link_ok ? depth : -1, err)))
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
int store_walk_core(struct walk *w, int64_t only, store_row_fn fn, void *ctx, int *found,
                    struct gate_err *err)
{
    sqlite3_stmt *st = NULL;
    struct store_row row;
    char sql[256];
    int rc = 0;
    snprintf(sql, sizeof sql, "%s ORDER BY id", ROW_COLUMNS);
    if ((rc = sqlite3_prepare_v2(w->s->db, sql, -1, &st, NULL)) != SQLITE_OK) {
        rc = store_db_fail(w->s, rc, "reading receipts", err);
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
        rc = store_db_fail(w->s, rc, "reading receipts", err);
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
    if ((rc = store_exec(s, "BEGIN", "starting a read", err)))
        goto cleanup;
    if ((rc = store_walk_core(&w, only, fn, ctx, &found, err)))
        goto cleanup;
    if (only > 0 && !found)
        rc = err_set(err, ERR_INPUT, "receipt store '%s' has no receipt %lld", s->path,
                     (long long)only);
cleanup:
    store_index_free(&w.ix);
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

int store_is_hex64(const char *s)
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
int store_head_parse(const char *payload, size_t len, const unsigned char sig[64], char key[80],
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
    if (!store_is_hex64(phead) || !json_is_integer(pcount) || json_integer_value(pcount) < 0) {
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
int store_head_match(const struct chain_index *ix, const char *key, const char *head, int64_t count,
                     char *why, size_t n)
{
    char name[64];
    if (!strcmp(head, RECEIPT_GENESIS_HASH)) {
        if (count == 0)
            return 0;
        snprintf(why, n, "names genesis with a count of %lld", (long long)count);
        return 1;
    }
    int32_t j = store_find_hash(ix, head);
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

/* Why sign-off payload (len bytes, signature sig, columns key_col and hash_col) cannot be
 * believed in the store indexed by ix, into why; 0 when it can. */
static int signoff_problem(const struct chain_index *ix, const char *payload, size_t len,
                           const unsigned char sig[64], const char *key_col, const char *hash_col,
                           char key[80], char *why, size_t n)
{
    json_t *p = NULL;
    unsigned char pk[32];
    char computed[65];
    int bad = 1;
    key[0] = '\0';
    if (receipt_parse(payload, len, &p, NULL) != 0) {
        snprintf(why, n, "payload is not canonical JSON");
        goto cleanup;
    }
    const char *pkey = json_string_value(json_object_get(p, "key_id"));
    if (!pkey || key_parse_public(pkey, pk, NULL) != 0) {
        snprintf(why, n, "payload has no valid key_id");
        goto cleanup;
    }
    snprintf(key, 80, "%s", pkey);
    if (receipt_verify_type(SIGNOFF_PAYLOAD_TYPE, payload, len, pk, sig) != 0) {
        snprintf(why, n, "signature does not verify under the payload's key_id");
        goto cleanup;
    }
    receipt_hash(payload, len, sig, computed);
    if (!key_col || strcmp(key_col, pkey) || !hash_col || strcmp(hash_col, computed)) {
        snprintf(why, n, "key_id or hash column disagrees with the signed record");
        goto cleanup;
    }
    const char *ch = json_string_value(json_object_get(p, "chain_head"));
    if (!store_is_hex64(ch) ||
        (strcmp(ch, RECEIPT_GENESIS_HASH) != 0 && store_find_hash(ix, ch) < 0)) {
        snprintf(why, n, "its chain_head %.64s is not a verified receipt of this store",
                 ch ? ch : "(none)");
        goto cleanup;
    }
    static const char *const lists[] = {"cells", "anchors"};
    for (int t = 0; t < 2; t++) {
        json_t *arr = json_object_get(p, lists[t]), *row;
        size_t i;
        if (!json_is_array(arr)) {
            snprintf(why, n, "payload has no \"%s\" list", lists[t]);
            goto cleanup;
        }
        json_array_foreach(arr, i, row)
        {
            json_t *hashes = json_object_get(row, "receipt_sha256"), *h;
            size_t j;
            if (!json_is_array(hashes) || !json_array_size(hashes)) {
                snprintf(why, n, "%s[%zu] names no receipt", lists[t], i);
                goto cleanup;
            }
            json_array_foreach(hashes, j, h)
            {
                const char *hs = json_string_value(h);
                if (!store_is_hex64(hs) || store_find_hash(ix, hs) < 0) {
                    snprintf(why, n,
                             "%s[%zu] names receipt %.64s, which is not a verified receipt of"
                             " this store",
                             lists[t], i, hs ? hs : "(not a hash)");
                    goto cleanup;
                }
            }
        }
    }
    bad = 0;
cleanup:
    json_decref(p);
    return bad;
}

/* Every sign-off of s against the index of its verified receipts (store_audit's last step); with
 * trusted, the key of every sign-off without a problem is asked too. */
static int audit_signoffs(struct store *s, const struct chain_index *ix, store_trust_fn trusted,
                          void *tctx, struct store_audit *out, struct gate_err *err)
{
    sqlite3_stmt *st = NULL;
    char why[200], key[80];
    int rc = sqlite3_prepare_v2(
        s->db, "SELECT id, payload, signature, key_id, hash FROM signoffs ORDER BY id", -1, &st,
        NULL);
    if (rc != SQLITE_OK) {
        rc = store_db_fail(s, rc, "reading sign-offs", err);
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
        out->n_signoffs++;
        if (!signoff_problem(ix, payload ? payload : "", len, sig,
                             (const char *)sqlite3_column_text(st, 3),
                             (const char *)sqlite3_column_text(st, 4), key, why, sizeof why)) {
            if (trusted && !trusted(tctx, key) && !out->n_signoff_untrusted++) {
                out->first_untrusted_signoff = id;
                snprintf(out->signoff_untrusted, sizeof out->signoff_untrusted,
                         "sign-off %lld (key %.80s)", (long long)id, key);
            }
            continue;
        }
        if (!out->n_signoff_problems++) {
            out->first_bad_signoff_id = id;
            snprintf(out->signoff_problem, sizeof out->signoff_problem,
                     "sign-off %lld (key %.24s...): %.200s", (long long)id, key[0] ? key : "?",
                     why);
        }
    }
    rc = rc == SQLITE_DONE ? 0 : store_db_fail(s, rc, "reading sign-offs", err);
cleanup:
    sqlite3_finalize(st);
    return rc;
}

int store_audit(struct store *s, struct store_audit *out, struct gate_err *err)
{
    return store_audit_trusted(s, NULL, NULL, out, err);
}

int store_audit_trusted(struct store *s, store_trust_fn trusted, void *tctx,
                        struct store_audit *out, struct gate_err *err)
{
    struct walk w = {.s = s};
    sqlite3_stmt *st = NULL;
    char why[256], key[80], head[65], computed[65];
    int64_t count = 0;
    int rc = 0;
    memset(out, 0, sizeof *out);
    if ((rc = store_exec(s, "BEGIN", "starting a read", err)))
        goto cleanup;
    if ((rc = store_walk_core(&w, 0, audit_row, out, NULL, err)))
        goto cleanup;
    rc = sqlite3_prepare_v2(
        s->db, "SELECT id, payload, signature, key_id, hash FROM heads ORDER BY id", -1, &st, NULL);
    if (rc != SQLITE_OK) {
        rc = store_db_fail(s, rc, "reading head records", err);
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
        int bad =
            store_head_parse(payload ? payload : "", len, sig, key, head, &count, why, sizeof why);
        if (!bad && (!key_col || strcmp(key_col, key) != 0 || !hash_col ||
                     strcmp(hash_col, computed) != 0)) {
            snprintf(why, sizeof why, "key_id or hash column disagrees with the signed record");
            bad = 1;
        }
        if (!bad)
            bad = store_head_match(&w.ix, key, head, count, why, sizeof why);
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
        rc = store_db_fail(s, rc, "reading head records", err);
        goto cleanup;
    }
    out->signoff_trust_checked = trusted != NULL;
    rc = audit_signoffs(s, &w.ix, trusted, tctx, out, err);
cleanup:
    sqlite3_finalize(st);
    store_index_free(&w.ix);
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
    return rc;
}

int store_expect_head(struct store *s, const char *hash, struct gate_err *err)
{
    struct walk w = {.s = s};
    int rc = 0;
    if (!store_is_hex64(hash))
        return err_set(err, ERR_INPUT, "expected head '%.80s' is not 64 lowercase hex digits",
                       hash ? hash : "");
    if ((rc = store_exec(s, "BEGIN", "starting a read", err)))
        goto cleanup;
    if ((rc = store_walk_core(&w, 0, NULL, NULL, NULL, err)))
        goto cleanup;
    if (store_find_hash(&w.ix, hash) < 0)
        rc = err_set(err, ERR_RUNTIME,
                     "receipt store '%s' holds no verified receipt with hash %s: the receipts up "
                     "to that head were deleted, or the head is from another store",
                     s->path, hash);
cleanup:
    store_index_free(&w.ix);
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
    return rc;
}
