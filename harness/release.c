/* release.c — `gate release check LADDER --db DB [--sign KEY]`: the only road to a release.
 *
 * For every required cell of the ladder, only the signed payloads are believed (settled
 * question 2): a row whose signature, chain link or columns do not verify makes its cell
 * TAMPERED; a receipt signed by a key the ladder does not trust for the cell's host is
 * UNTRUSTED; among receipts for this exact build (clean git commit + version) and the pinned
 * model digest, with the ladder's current gate settings and verdicts that re-derive from their
 * own numbers: all PASS -> PASS, PASS and FAIL -> FLAKY (a rerun never erases a failure), only
 * FAIL -> FAIL; none -> MISSING, or STALE when receipts exist for other builds, digests or
 * settings. Exit 0 only when every cell is PASS.
 * Start reading: release_check().
 */
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cli.h"
#include "harness/identity.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "receipts/key.h"
#include "receipts/receipt.h"
#include "receipts/store.h"

enum cell_state {
    ST_PASS,
    ST_FAIL,
    ST_FLAKY,
    ST_MISSING,
    ST_STALE,
    ST_UNTRUSTED,
    ST_TAMPERED,
};

static const char *const STATE[] = {"PASS", "FAIL", "FLAKY", "MISSING", "STALE", "UNTRUSTED",
                                    "TAMPERED"};

struct cell_acc {
    int n_pass, n_fail, n_other, n_untrusted, n_tampered;
    int64_t pass_ids[64];
    int n_pass_ids;
    char why[512]; /* the first reason that mattered */
};

struct check_ctx {
    const struct ladder *l;
    const struct identity *id;
    struct cell_acc *acc; /* one per ladder cell */
    int n_rows;
};

/* Keep the first reason that mattered: "receipt ID <text>". */
static void note(struct cell_acc *a, int64_t rid, const char *text)
{
    if (!a->why[0])
        snprintf(a->why, sizeof a->why, "receipt %" PRId64 " %.440s", rid, text);
}

static int find_cell(const struct ladder *l, const char *model, const char *host, const char *mode)
{
    for (int i = 0; i < l->n_cells; i++) {
        const struct ladder_cell *c = &l->cells[i];
        if (!strcmp(l->models[c->model].id, model) && !strcmp(l->hosts[c->host].id, host) &&
            !strcmp(c->mode, mode))
            return i;
    }
    return -1;
}

static int same_settings(const struct ladder_cell *c, json_t *gates, const char **which)
{
    const char *name;
    json_t *g;
    json_object_foreach(gates, name, g)
    {
        json_t *want = ladder_gate_settings(&c->g, name);
        int eq = json_equal(want, json_object_get(g, "settings"));
        json_decref(want);
        if (!eq) {
            *which = name;
            return 0;
        }
    }
    static const char *const required[] = {"capability", "parity", "golden", "throughput",
                                           "falsify"};
    for (int i = 0; i < 5; i++)
        if (!json_object_get(gates, required[i])) {
            *which = required[i];
            return 0;
        }
    return 1;
}

static int on_row(void *ctx, const struct store_row *row)
{
    struct check_ctx *x = ctx;
    const struct ladder *l = x->l;
    x->n_rows++;
    json_t *p = NULL;
    struct gate_err err = {0};
    int parsed = receipt_parse(row->payload, row->len, &p, &err) == 0;
    json_t *cell = parsed ? json_object_get(p, "cell") : NULL;
    const char *model = json_string_value(json_object_get(cell, "model"));
    const char *host = json_string_value(json_object_get(cell, "host"));
    const char *mode = json_string_value(json_object_get(cell, "mode"));
    int ci = (model && host && mode) ? find_cell(l, model, host, mode) : -1;
    if (ci < 0 && !(row->sig_ok && row->chain_ok && row->columns_ok)) {
        /* cannot attribute by payload: fall back on the column, for the verdict only */
        char m[256], h[256], o[256];
        if (sscanf(row->cell, "%255[^/]/%255[^/]/%255s", m, h, o) == 3)
            ci = find_cell(l, m, h, o);
    }
    if (ci < 0)
        goto out;
    struct cell_acc *a = &x->acc[ci];
    if (!(row->sig_ok && row->chain_ok && row->columns_ok)) {
        a->n_tampered++;
        note(a, row->id, row->problem && *row->problem ? row->problem : "does not verify");
        goto out;
    }
    const struct ladder_cell *c = &l->cells[ci];
    const struct ladder_host *hh = &l->hosts[c->host];
    unsigned char pk[32];
    const char *key_id = json_string_value(json_object_get(p, "key_id"));
    int trusted = 0;
    if (key_id && key_parse_public(key_id, pk, NULL) == 0)
        for (int t = 0; t < hh->n_trust; t++)
            trusted |= !memcmp(hh->trust[t], pk, 32);
    json_t *eng = json_object_get(json_object_get(p, "subject"), "engine");
    const char *commit = json_string_value(json_object_get(eng, "git_commit"));
    const char *version = json_string_value(json_object_get(eng, "version"));
    int dirty = json_is_true(json_object_get(eng, "git_dirty"));
    const char *sha = json_string_value(
        json_object_get(json_object_get(json_object_get(p, "subject"), "model"), "sha256"));
    int this_build = commit && version && !strcmp(commit, x->id->git_commit) &&
                     !strcmp(version, x->id->version) && !dirty && !x->id->git_dirty;
    int this_model = sha && !strcmp(sha, l->models[c->model].sha256);
    if (!this_build || !this_model) {
        a->n_other++;
        char why[200];
        if (!this_build)
            snprintf(why, sizeof why, "is for build %.48s%s %.16s, not this one",
                     commit ? commit : "?", dirty ? " (dirty tree)" : "", version ? version : "?");
        else
            snprintf(why, sizeof why, "is for model digest %.64s, not the ladder's pin",
                     sha ? sha : "?");
        note(a, row->id, why);
        goto out;
    }
    if (!trusted) {
        a->n_untrusted++;
        char why[200];
        snprintf(why, sizeof why, "is signed by %.80s, which the ladder does not trust for host"
                 " %.40s", key_id ? key_id : "?", hh->id);
        note(a, row->id, why);
        goto out;
    }
    err_clear(&err);
    if (receipt_rederive(p, &err) != 0) {
        a->n_tampered++;
        char why[460];
        snprintf(why, sizeof why, "has a verdict that does not follow from its numbers: %.380s",
                 err.msg);
        note(a, row->id, why);
        goto out;
    }
    const char *which = NULL;
    if (!same_settings(c, json_object_get(p, "gates"), &which)) {
        a->n_other++;
        char why[200];
        snprintf(why, sizeof why, "ran gate '%.40s' with settings other than the ladder's", which);
        note(a, row->id, why);
        goto out;
    }
    const char *v = json_string_value(json_object_get(p, "verdict"));
    if (v && !strcmp(v, "PASS")) {
        a->n_pass++;
        if (a->n_pass_ids < 64)
            a->pass_ids[a->n_pass_ids++] = row->id;
    } else {
        a->n_fail++;
        note(a, row->id, "FAILED");
    }
out:
    json_decref(p);
    return 0;
}

static enum cell_state decide(const struct cell_acc *a)
{
    if (a->n_tampered)
        return ST_TAMPERED;
    if (a->n_pass && a->n_fail)
        return ST_FLAKY;
    if (a->n_fail)
        return ST_FAIL;
    if (a->n_pass)
        return ST_PASS;
    if (a->n_untrusted)
        return ST_UNTRUSTED;
    if (a->n_other)
        return ST_STALE;
    return ST_MISSING;
}

int release_check(const char *ladder, const char *db, const char *sign_key)
{
    return release_check_to(stdout, ladder, db, sign_key, NULL);
}

int release_check_to(FILE *out, const char *ladder, const char *db, const char *sign_key,
                     const struct identity *self)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    struct store *st = NULL;
    struct identity id;
    struct cell_acc *acc = NULL;
    enum cell_state *state = NULL;
    int rc, exit_code = 0;
    if ((rc = ladder_load(&l, ladder, &err))) {
        exit_code = cli_fail(err_exit_code(rc), "%s", err.msg);
        goto out;
    }
    if (self)
        id = *self;
    else if ((rc = identity_get(&id, &err))) {
        exit_code = cli_fail(err_exit_code(rc), "%s", err.msg);
        goto out;
    }
    if ((rc = store_open(&st, db, &err))) {
        exit_code = cli_fail(err_exit_code(rc), "%s", err.msg);
        goto out;
    }
    acc = calloc((size_t)l->n_cells + 1, sizeof *acc);
    state = calloc((size_t)l->n_cells + 1, sizeof *state);
    if (!acc || !state) {
        exit_code = cli_fail(3, "out of memory");
        goto out;
    }
    struct check_ctx x = {l, &id, acc, 0};
    if ((rc = store_foreach(st, on_row, &x, &err))) {
        exit_code = cli_fail(err_exit_code(rc), "%s", err.msg);
        goto out;
    }
    int n_ok = 0;
    for (int i = 0; i < l->n_cells; i++) {
        state[i] = decide(&acc[i]);
        n_ok += state[i] == ST_PASS;
    }
    fprintf(out, "release %s %s — ladder %s (sha256 %.12s), build %.12s%s, %d receipts in %s\n\n",
           l->name, l->version, ladder, l->sha256, id.git_commit, id.git_dirty ? " (dirty)" : "",
           x.n_rows, db);
    /* matrix: models x (host, mode) columns in order of first appearance */
    char cols[64][96];
    int n_cols = 0;
    for (int i = 0; i < l->n_cells && n_cols < 64; i++) {
        char c[96];
        snprintf(c, sizeof c, "%s/%s", l->hosts[l->cells[i].host].id, l->cells[i].mode);
        int seen = 0;
        for (int k = 0; k < n_cols; k++)
            seen |= !strcmp(cols[k], c);
        if (!seen)
            snprintf(cols[n_cols++], sizeof cols[0], "%s", c);
    }
    fprintf(out, "%-20s", "model");
    for (int k = 0; k < n_cols; k++)
        fprintf(out, " %-22s", cols[k]);
    fprintf(out, "\n");
    for (int mi = 0; mi < l->n_models; mi++) {
        fprintf(out, "%-20s", l->models[mi].id);
        for (int k = 0; k < n_cols; k++) {
            const char *s = "-";
            for (int i = 0; i < l->n_cells; i++) {
                char c[96];
                snprintf(c, sizeof c, "%s/%s", l->hosts[l->cells[i].host].id, l->cells[i].mode);
                if (l->cells[i].model == mi && !strcmp(c, cols[k]))
                    s = STATE[state[i]];
            }
            fprintf(out, " %-22s", s);
        }
        fprintf(out, "\n");
    }
    fprintf(out, "\n");
    if (id.git_dirty)
        fprintf(out, "note: this gate binary was built from a tree with uncommitted changes; no receipt"
               " can count for it. Commit, rebuild, rerun.\n");
    if (n_ok == l->n_cells) {
        fprintf(out, "RELEASE OK: all %d required cells PASS for this build\n", l->n_cells);
    } else {
        fprintf(out, "RELEASE BLOCKED: %d of %d required cells are not PASS\n", l->n_cells - n_ok,
               l->n_cells);
        for (int i = 0; i < l->n_cells; i++) {
            if (state[i] == ST_PASS)
                continue;
            char name[256];
            ladder_cell_name(l, i, name, sizeof name);
            fprintf(out, "  %-40s %-9s %s\n", name, STATE[state[i]],
                   state[i] == ST_MISSING ? "no receipt for this build and model digest"
                                          : acc[i].why);
        }
        exit_code = 1;
    }
    if (sign_key && exit_code == 0) {
        struct key_pair k;
        memset(&k, 0, sizeof k);
        if ((rc = key_load(sign_key, &k, &err))) {
            exit_code = cli_fail(err_exit_code(rc), "%s", err.msg);
            goto out;
        }
        json_t *cells = json_array();
        for (int i = 0; i < l->n_cells; i++) {
            char name[256];
            json_t *ids = json_array();
            for (int j = 0; j < acc[i].n_pass_ids; j++)
                json_array_append_new(ids, json_integer(acc[i].pass_ids[j]));
            json_array_append_new(cells, json_pack("{s:s, s:o}", "cell",
                                                   ladder_cell_name(l, i, name, sizeof name),
                                                   "receipts", ids));
        }
        char now[32];
        identity_utc_now(now);
        json_t *payload = json_pack("{s:{s:s, s:s, s:s}, s:o, s:o, s:s, s:s}", "ladder", "name",
                                    l->name, "version", l->version, "sha256", l->sha256,
                                    "engine", identity_json(&id), "cells", cells, "verdict",
                                    "PASS", "signed_at", now);
        char signer[80];
        snprintf(signer, sizeof signer, "%s", k.id);
        rc = store_add_signoff(st, payload, &k, &err);
        json_decref(payload);
        key_wipe(&k);
        if (rc) {
            exit_code = cli_fail(err_exit_code(rc), "%s", err.msg);
            goto out;
        }
        fprintf(out, "sign-off written to %s, signed by %s\n", db, signer);
    } else if (sign_key) {
        fprintf(out, "not signed: the release is blocked\n");
    }
out:
    free(acc);
    free(state);
    store_close(st);
    ladder_free(l);
    return exit_code;
}
