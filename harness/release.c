/* release.c — `gate release check LADDER --db DB [--sign KEY]`: the only road to a release.
 *
 * Only signed payloads are believed (settled question 2). First the whole store is audited: any
 * row that fails verification (signature, chain link recomputed from the signed bytes, columns)
 * makes EVERY cell TAMPERED, naming the row — a row nobody can attribute is still a row someone
 * altered. Then, per required cell and per anchor case, the receipts for it are sorted:
 *   - signed by a key the ladder does not trust for the receipt's host: UNTRUSTED;
 *   - claiming this host, build and configuration but made by another binary (binary_sha256):
 *     STALE "identity mismatch", and the row is blocked whatever its other receipts say;
 *   - for another build (git commit + version of a clean tree + source tree digest), another
 *     model digest, another release (name, version), other trusted keys, or gate settings other
 *     than the ladder's current ones: STALE, with the difference named;
 *   - else its gates are JUDGED AGAIN through the gate table (harness/gatedef.c) with the
 *     ladder's settings and the receipt's recorded metrics; the verdicts a payload records are
 *     only compared, and a disagreement is reported.
 * Per cell: all PASS -> PASS; PASS and FAIL -> FLAKY (a rerun never erases a failure); only FAIL
 * -> FAIL; only ERROR (a gate could not judge, e.g. a noisy host) -> ERROR; none -> MISSING, or
 * STALE/UNTRUSTED when receipts exist that do not count. Excluded cells are shown as EXCLUDED
 * with their reason, unless a FAIL receipt for this build exists for them (then they are FAIL).
 * Every anchor case needs a PASS receipt for this build, or the release is blocked because the
 * judge itself is not shown to be right. The release is OK only when every row is PASS (and
 * the checking binary is a clean build).
 * This file returns data (struct release_result, run.h) and prints nothing: the matrix, the
 * blocking rows and the exit code are the command's (cli/report.c). Reasons quote receipt-borne
 * strings as they are; the printer escapes them.
 * Start reading: release_evaluate(), then decide().
 */
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/gatedef.h"
#include "harness/identity.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "receipts/key.h"
#include "receipts/receipt.h"
#include "receipts/store.h"

static const char *const STATE[] = {"PASS",  "FAIL",      "FLAKY",    "ERROR",   "MISSING",
                                    "STALE", "UNTRUSTED", "TAMPERED", "EXCLUDED"};

const char *release_state_name(enum release_state s)
{
    return (unsigned)s < sizeof STATE / sizeof STATE[0] ? STATE[s] : "?";
}

/* What the store says about one row of the release (a cell, an excluded cell or an anchor). */
struct acc {
    int n_pass, n_fail, n_error, n_other, n_untrusted;
    int n_mismatch; /* receipts that claim this host, build and configuration, made by another
                     * binary (issue 23 §4): they block the row whatever else it has */
    int64_t pass_ids[64];
    int n_pass_ids;
    int64_t fail_id, error_id, other_id, untrusted_id, mismatch_id; /* the first of each kind */
    char fail_why[512], error_why[512], other_why[512], untrusted_why[512], mismatch_why[512];
    char disagree[512]; /* the first receipt whose recorded verdict its numbers contradict */
    enum release_state state;
    int64_t blocking_id; /* the receipt that decides state, 0 when none */
    char why[700];       /* the reason shown for the final state */
};

struct check_ctx {
    const struct ladder *l;
    const struct identity *id;
    struct acc *cells, *excluded, *anchors;
    int n_rows, n_bad;
    int64_t first_bad;
    char bad_problem[256];
};

static void keep(char *dst, size_t n, int64_t *dst_id, int64_t rid, const char *text)
{
    if (dst[0])
        return;
    *dst_id = rid;
    snprintf(dst, n, "%s", text);
}

/* The cell / excluded cell of l whose identity (receipts/cellkey.h) is k, or -1. */
static int find_cell(const struct ladder *l, const struct cell_key *k)
{
    for (int i = 0; i < l->n_cells; i++) {
        const struct cell_key c = ladder_cell_key(l, i);
        if (cell_key_same(&c, k))
            return i;
    }
    return -1;
}

static int find_excluded(const struct ladder *l, const struct cell_key *k)
{
    for (int i = 0; i < l->n_excluded; i++) {
        const struct cell_key e = ladder_excluded_key(l, i);
        if (cell_key_same(&e, k))
            return i;
    }
    return -1;
}

static int find_anchor(const struct ladder *l, const char *id)
{
    for (int i = 0; i < l->n_anchors; i++)
        if (!strcmp(l->anchors[i].id, id))
            return i;
    return -1;
}

/* The first key of `want` whose value differs in `got`, as "key got -> want" into out. */
static void first_diff(const json_t *got, const json_t *want, const char *gate, char *out, size_t n)
{
    const char *k;
    json_t *w;
    json_object_foreach((json_t *)want, k, w)
    {
        json_t *g = json_object_get(got, k);
        if (g && json_equal(g, w))
            continue;
        char *gs = g ? json_dumps(g, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        char *ws = json_dumps(w, JSON_ENCODE_ANY | JSON_COMPACT);
        snprintf(out, n, "%s.%s %.60s -> %.60s", gate, k, gs ? gs : "(absent)", ws ? ws : "?");
        free(gs);
        free(ws);
        return;
    }
    json_object_foreach((json_t *)got, k, w) if (!json_object_get(want, k))
    {
        snprintf(out, n, "%s.%s is recorded but the ladder has no such setting", gate, k);
        return;
    }
    snprintf(out, n, "%s settings differ", gate);
}

static int trusted_for(const struct ladder_host *h, const char *key_id)
{
    unsigned char pk[32];
    if (!key_id || key_parse_public(key_id, pk, NULL) != 0)
        return 0;
    for (int t = 0; t < h->n_trust; t++)
        if (!memcmp(h->trust[t], pk, 32))
            return 1;
    return 0;
}

int release_key_trusted(const struct ladder *l, int host, const char *key_id)
{
    for (int h = 0; h < l->n_hosts; h++)
        if ((host < 0 || h == host) && trusted_for(&l->hosts[h], key_id))
            return 1;
    return 0;
}

/* Why receipt p is not for this build, release, ladder trust set and model pin ("" when it is). */
static void not_this(const struct check_ctx *x, const json_t *p, const char *model_sha256,
                     char *why, size_t n)
{
    const struct ladder *l = x->l;
    const struct identity *id = x->id;
    json_t *eng = json_object_get(json_object_get(p, "subject"), "engine");
    json_t *lad = json_object_get(p, "ladder");
    const char *commit = json_string_value(json_object_get(eng, "git_commit"));
    const char *version = json_string_value(json_object_get(eng, "version"));
    const char *source = json_string_value(json_object_get(eng, "source_sha256"));
    int dirty = !json_is_false(json_object_get(eng, "git_dirty"));
    const char *sha = json_string_value(
        json_object_get(json_object_get(json_object_get(p, "subject"), "model"), "sha256"));
    const char *rname = json_string_value(json_object_get(lad, "name"));
    const char *rversion = json_string_value(json_object_get(lad, "version"));
    const char *trust = json_string_value(json_object_get(lad, "trust_sha256"));
    why[0] = '\0';
    if (!commit || !version || strcmp(commit, id->git_commit) || strcmp(version, id->version))
        snprintf(why, n, "is for build %.40s %.16s, not this one (%.40s %.16s)",
                 commit ? commit : "?", version ? version : "?", id->git_commit, id->version);
    else if (dirty)
        snprintf(why, n, "was made by a binary built from a dirty tree");
    else if (!source || strcmp(source, id->source_sha256))
        snprintf(why, n, "records source tree %.16s, not this build's %.16s",
                 source ? source : "(none)", id->source_sha256);
    else if (!sha || strcmp(sha, model_sha256))
        snprintf(why, n, "is for model digest %.64s, not the ladder's pin %.64s", sha ? sha : "?",
                 model_sha256);
    else if (!rname || !rversion || strcmp(rname, l->name) || strcmp(rversion, l->version))
        snprintf(why, n, "is for release %.40s %.20s, not %s %s", rname ? rname : "?",
                 rversion ? rversion : "?", l->name, l->version);
    else if (!trust || strcmp(trust, l->trust_sha256))
        snprintf(why, n,
                 "was made when the ladder trusted other keys (trust digest %.16s, now"
                 " %.16s)",
                 trust ? trust : "(none)", l->trust_sha256);
}

/* Why receipt p did not run the engine the ladder pins for its exec mode ("" when it did, or the
 * mode is not exec): the engine binary's SHA-256, the hello build_id and the pinned files, as
 * measured at run time (subject.exec_engine), against the ladder's pins, old -> new. */
static void engine_not_this(const struct ladder *l, const json_t *p, const char *mode, char *why,
                            size_t n)
{
    why[0] = '\0';
    char name[EXEC_NAME_MAX];
    const char *dot = mode && !strncmp(mode, "exec.", 5) ? strchr(mode + 5, '.') : NULL;
    if (!dot || (size_t)(dot - mode - 5) >= sizeof name)
        return;
    snprintf(name, sizeof name, "%.*s", (int)(dot - mode - 5), mode + 5);
    const int ei = ladder_find_engine(l, name);
    if (ei < 0)
        return;
    const struct exec_engine *e = &l->engines[ei].e;
    const json_t *x = json_object_get(json_object_get(p, "subject"), "exec_engine");
    const char *sha = json_string_value(json_object_get(x, "sha256"));
    const char *bid = json_string_value(json_object_get(x, "build_id"));
    const json_t *files = json_object_get(x, "files");
    if (e->sha256[0] && (!sha || strcmp(sha, e->sha256)))
        snprintf(why, n,
                 "ran another build of engine '%s': binary sha256 %.64s -> %s (the"
                 " ladder's pin)",
                 name, sha && *sha ? sha : "(not recorded)", e->sha256);
    else if (e->build_id[0] && (!bid || strcmp(bid, e->build_id)))
        snprintf(why, n,
                 "ran another build of engine '%s': build_id %.100s -> %.100s (the"
                 " ladder's pin)",
                 name, bid ? bid : "(not recorded)", e->build_id);
    else if (e->n_files != (int)json_array_size(files))
        snprintf(why, n, "ran engine '%s' with %d pinned files, the ladder pins %d", name,
                 (int)json_array_size(files), e->n_files);
    else
        for (int i = 0; i < e->n_files; i++) {
            const char *f = json_string_value(json_array_get(files, (size_t)i));
            if (!f || strcmp(f, e->files[i].sha256)) {
                snprintf(why, n, "ran engine '%s' with file %d sha256 %.64s, the ladder pins %s",
                         name, i + 1, f ? f : "?", e->files[i].sha256);
                break;
            }
        }
}

/* Settled question 1: the binary's digest is compared only where a receipt claims this host
 * (environment.hostname), this build (commit, version) and this configuration
 * (build_config_sha256); there it must be this binary's. "" when it is or does not apply. */
static void binary_mismatch(const struct identity *id, const json_t *p, char *why, size_t n)
{
    json_t *eng = json_object_get(json_object_get(p, "subject"), "engine");
    const char *host =
        json_string_value(json_object_get(json_object_get(p, "environment"), "hostname"));
    const char *commit = json_string_value(json_object_get(eng, "git_commit"));
    const char *version = json_string_value(json_object_get(eng, "version"));
    const char *config = json_string_value(json_object_get(eng, "build_config_sha256"));
    const char *bin = json_string_value(json_object_get(eng, "binary_sha256"));
    why[0] = '\0';
    if (!id->hostname[0] || !id->build_config_sha256[0] || !host || strcmp(host, id->hostname) ||
        !commit || strcmp(commit, id->git_commit) || !version || strcmp(version, id->version) ||
        !config || strcmp(config, id->build_config_sha256))
        return;
    if (!bin || strcmp(bin, id->binary_sha256))
        snprintf(why, n,
                 "identity mismatch: it claims this host (%.64s), build and configuration"
                 " (%.16s), but was made by binary %.16s, not this binary %.16s",
                 host, config, bin ? bin : "(none)", id->binary_sha256);
}

/* Re-judge the gates of p for one row: every gate named in want (gate -> ladder settings) must
 * be recorded with exactly those settings (else STALE), and is judged again from its metrics. */
static void judge_receipt(struct check_ctx *x, struct acc *a, int64_t rid, const json_t *p,
                          const char *mode, json_t *want)
{
    json_t *gates = json_object_get(p, "gates");
    const char *gname;
    json_t *ws;
    char why[512];
    json_object_foreach(want, gname, ws)
    {
        json_t *g = json_object_get(gates, gname);
        if (!json_is_object(g)) {
            snprintf(why, sizeof why, "receipt %" PRId64 " has no '%s' gate", rid, gname);
            a->n_other++;
            keep(a->other_why, sizeof a->other_why, &a->other_id, rid, why);
            return;
        }
        if (!json_equal(json_object_get(g, "settings"), ws)) {
            char d[300];
            first_diff(json_object_get(g, "settings"), ws, gname, d, sizeof d);
            snprintf(why, sizeof why, "receipt %" PRId64 " ran with %s", rid, d);
            a->n_other++;
            keep(a->other_why, sizeof a->other_why, &a->other_id, rid, why);
            return;
        }
    }
    (void)x;
    int any_fail = 0, any_error = 0;
    char first_fail[400] = "", first_error[400] = "";
    json_object_foreach(want, gname, ws)
    {
        json_t *g = json_object_get(gates, gname), *checks = NULL;
        char gwhy[360] = "";
        enum gate_verdict v = gatedef_judge(gname, mode, ws, json_object_get(g, "metrics"), &checks,
                                            gwhy, sizeof gwhy);
        json_decref(checks);
        int recorded = gate_verdict_parse(json_string_value(json_object_get(g, "verdict")));
        if (recorded != (int)v && !a->disagree[0])
            snprintf(a->disagree, sizeof a->disagree,
                     "receipt %" PRId64 " records %s for gate %s but its numbers say %s", rid,
                     recorded >= 0 ? gate_verdict_name(recorded) : "no verdict", gname,
                     gate_verdict_name(v));
        if (v == GATE_FAIL && !any_fail++)
            snprintf(first_fail, sizeof first_fail, "%s: %s", gname, gwhy);
        if (v == GATE_ERROR && !any_error++)
            snprintf(first_error, sizeof first_error, "%s: %s", gname, gwhy);
    }
    if (any_fail) {
        a->n_fail++;
        snprintf(why, sizeof why, "receipt %" PRId64 " FAILED %s", rid, first_fail);
        keep(a->fail_why, sizeof a->fail_why, &a->fail_id, rid, why);
    } else if (any_error) {
        a->n_error++;
        snprintf(why, sizeof why, "receipt %" PRId64 " could not judge %s", rid, first_error);
        keep(a->error_why, sizeof a->error_why, &a->error_id, rid, why);
    } else {
        a->n_pass++;
        if (a->n_pass_ids < 64)
            a->pass_ids[a->n_pass_ids++] = rid;
    }
}

/* The ladder's settings of every gate of cell ci, as receipts record them (new ref). */
static json_t *cell_settings(const struct ladder *l, const struct ladder_gates *g)
{
    (void)l;
    json_t *want = json_object();
    for (int i = 0; GATE_DEFS[i].name; i++)
        if (GATE_DEFS[i].cell_gate)
            json_object_set_new(want, GATE_DEFS[i].name,
                                ladder_gate_settings(g, GATE_DEFS[i].name));
    if (g->consistency) /* a gate the ladder names for the cell: its receipts must carry it */
        json_object_set_new(want, "consistency", ladder_gate_settings(g, "consistency"));
    return want;
}

static int on_row(void *ctx, const struct store_row *row)
{
    struct check_ctx *x = ctx;
    const struct ladder *l = x->l;
    x->n_rows++;
    if (!(row->sig_ok && row->chain_ok && row->columns_ok)) {
        /* any row that fails verification blocks every release check on this store */
        if (!x->n_bad++) {
            x->first_bad = row->id;
            snprintf(x->bad_problem, sizeof x->bad_problem, "%s",
                     row->problem && *row->problem ? row->problem : "does not verify");
        }
        return 0;
    }
    json_t *p = NULL;
    struct gate_err err = {0};
    if (receipt_parse(row->payload, row->len, &p, &err) != 0) {
        if (!x->n_bad++) {
            x->first_bad = row->id;
            snprintf(x->bad_problem, sizeof x->bad_problem, "payload does not parse");
        }
        return 0;
    }
    json_t *cell = json_object_get(p, "cell");
    const char *model = json_string_value(json_object_get(cell, "model"));
    const char *host = json_string_value(json_object_get(cell, "host"));
    const char *mode = json_string_value(json_object_get(cell, "mode"));
    const char *key_id = json_string_value(json_object_get(p, "key_id"));
    struct acc *a = NULL;
    const char *pin = NULL;
    json_t *want = NULL;
    int hi = host ? ladder_find_host(l, host) : -1;
    if (!model || hi < 0 || !mode)
        goto out;
    int ci, ai;
    struct cell_key key;
    struct gate_err kerr = {0};
    /* a cell whose identity settings no ladder can hold matches no cell */
    const int key_ok = !cell_key_of_payload(p, &key, &kerr);
    if (!strcmp(mode, "anchor") && (ai = find_anchor(l, model)) >= 0) {
        a = &x->anchors[ai];
        pin = l->anchors[ai].model.sha256;
        want = json_pack("{s:o}", "anchor", run_anchor_settings(l, ai));
    } else if (key_ok && (ci = find_cell(l, &key)) >= 0) {
        a = &x->cells[ci];
        pin = l->models[l->cells[ci].model].sha256;
        want = cell_settings(l, &l->cells[ci].g);
    } else if (key_ok && (ci = find_excluded(l, &key)) >= 0) {
        /* an exclusion cannot hide a failure: its receipts are judged like a cell's */
        a = &x->excluded[ci];
        pin = l->models[l->excluded[ci].model].sha256;
        struct ladder_gates g;
        int any = 0;
        for (int k = 0; k < l->n_cells && !any; k++)
            if (l->cells[k].model == l->excluded[ci].model) {
                g = l->cells[k].g;
                g.v = l->excluded[ci].v; /* the excluded cell's own identity settings */
                any = 1;
            }
        want = any ? cell_settings(l, &g) : json_object();
    } else {
        goto out;
    }
    char why[512];
    if (!trusted_for(&l->hosts[hi], key_id)) {
        a->n_untrusted++;
        snprintf(why, sizeof why,
                 "receipt %" PRId64 " is signed by %.80s, which the ladder does"
                 " not trust for host %s",
                 row->id, key_id ? key_id : "?", l->hosts[hi].id);
        keep(a->untrusted_why, sizeof a->untrusted_why, &a->untrusted_id, row->id, why);
        goto out;
    }
    char not [400];
    binary_mismatch(x->id, p, not, sizeof not );
    if (not [0]) {
        a->n_mismatch++;
        snprintf(why, sizeof why, "receipt %" PRId64 " %s", row->id, not );
        keep(a->mismatch_why, sizeof a->mismatch_why, &a->mismatch_id, row->id, why);
        goto out;
    }
    engine_not_this(l, p, mode, not, sizeof not );
    if (!not [0])
        not_this(x, p, pin, not, sizeof not );
    if (not [0]) {
        a->n_other++;
        snprintf(why, sizeof why, "receipt %" PRId64 " %s", row->id, not );
        keep(a->other_why, sizeof a->other_why, &a->other_id, row->id, why);
        goto out;
    }
    judge_receipt(x, a, row->id, p, mode, want);
out:
    json_decref(want);
    json_decref(p);
    return 0;
}

/* The row's state from what its receipts say, and the receipt that decides it. */
static void decide(struct acc *a, int excluded)
{
    if (a->n_mismatch) {
        a->state = RELEASE_STALE;
        a->blocking_id = a->mismatch_id;
        snprintf(a->why, sizeof a->why, "%s", a->mismatch_why);
    } else if (a->n_pass && a->n_fail) {
        a->state = RELEASE_FLAKY;
        a->blocking_id = a->fail_id;
        snprintf(a->why, sizeof a->why,
                 "%s (and %d PASS receipt%s: a rerun never erases a"
                 " failure)",
                 a->fail_why, a->n_pass, a->n_pass == 1 ? "" : "s");
    } else if (a->n_fail) {
        a->state = RELEASE_FAIL;
        a->blocking_id = a->fail_id;
        snprintf(a->why, sizeof a->why, "%s", a->fail_why);
    } else if (excluded) {
        a->state = RELEASE_EXCLUDED;
    } else if (a->n_pass) {
        a->state = RELEASE_PASS;
    } else if (a->n_error) {
        a->state = RELEASE_ERROR;
        a->blocking_id = a->error_id;
        snprintf(a->why, sizeof a->why, "%s (rerun on a quieter host)", a->error_why);
    } else if (a->n_untrusted) {
        a->state = RELEASE_UNTRUSTED;
        a->blocking_id = a->untrusted_id;
        snprintf(a->why, sizeof a->why, "%s", a->untrusted_why);
    } else if (a->n_other) {
        a->state = RELEASE_STALE;
        a->blocking_id = a->other_id;
        snprintf(a->why, sizeof a->why, "%s", a->other_why);
    } else {
        a->state = RELEASE_MISSING;
        snprintf(a->why, sizeof a->why, "no receipt for this build and model digest");
    }
}

/* The public row of an accumulator. */
static void to_row(const struct acc *a, enum release_row_kind kind, int index, const char *name,
                   struct release_row *r)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->index = index;
    snprintf(r->name, sizeof r->name, "%s", name);
    r->state = a->state;
    r->blocking_id = a->blocking_id;
    snprintf(r->reason, sizeof r->reason, "%s", a->why);
    memcpy(r->pass_ids, a->pass_ids, sizeof r->pass_ids);
    r->n_pass_ids = a->n_pass_ids;
    r->n_pass = a->n_pass;
    r->n_fail = a->n_fail;
    r->n_error = a->n_error;
    r->n_stale = a->n_other;
    r->n_untrusted = a->n_untrusted;
    snprintf(r->disagree, sizeof r->disagree, "%s", a->disagree);
}

int release_evaluate(const struct ladder *l, struct store *st, const struct identity *self,
                     const struct release_options *o, struct release_result *out,
                     struct gate_err *err)
{
    struct check_ctx x;
    int rc = 0;
    memset(&x, 0, sizeof x);
    memset(out, 0, sizeof *out);
    x.l = l;
    x.id = self;
    x.cells = calloc((size_t)l->n_cells + 1, sizeof *x.cells);
    x.excluded = calloc((size_t)l->n_excluded + 1, sizeof *x.excluded);
    x.anchors = calloc((size_t)l->n_anchors + 1, sizeof *x.anchors);
    out->cells = calloc((size_t)l->n_cells + 1, sizeof *out->cells);
    out->excluded = calloc((size_t)l->n_excluded + 1, sizeof *out->excluded);
    out->anchors = calloc((size_t)l->n_anchors + 1, sizeof *out->anchors);
    if (!x.cells || !x.excluded || !x.anchors || !out->cells || !out->excluded || !out->anchors) {
        rc = err_set(err, ERR_ENV, "out of memory checking release %s %s", l->name, l->version);
        goto out;
    }
    if ((rc = store_foreach(st, on_row, &x, err)))
        goto out;
    /* store-wide problems: rows that fail verification, head records that name missing rows */
    struct store_audit audit;
    memset(&audit, 0, sizeof audit);
    if ((rc = store_audit(st, &audit, err)))
        goto out;
    if (x.n_bad) {
        out->store_problem_id = x.first_bad;
        snprintf(out->store_problem, sizeof out->store_problem,
                 "receipt %" PRId64 " of the"
                 " store fails verification (%s); no receipt of this store can be believed",
                 x.first_bad, x.bad_problem);
    } else if (audit.n_bad) {
        out->store_problem_id = audit.first_bad_id;
        snprintf(out->store_problem, sizeof out->store_problem,
                 "receipt %" PRId64 " of the"
                 " store fails verification (%s); no receipt of this store can be believed",
                 audit.first_bad_id, audit.first_problem);
    } else if (audit.n_signoff_problems) {
        snprintf(out->store_problem, sizeof out->store_problem,
                 "%s; a sign-off of this store cannot be believed", audit.signoff_problem);
    } else if (audit.n_head_problems) {
        snprintf(out->store_problem, sizeof out->store_problem,
                 "%s; receipts were removed from"
                 " this store",
                 audit.head_problem);
    }
    if (!out->store_problem[0] && o && o->expect_head) {
        struct gate_err why = {0};
        if (store_expect_head(st, o->expect_head, &why))
            snprintf(out->store_problem, sizeof out->store_problem, "%.390s", why.msg);
    }
    for (int i = 0; i < l->n_anchors; i++) {
        decide(&x.anchors[i], 0);
        if (x.anchors[i].state != RELEASE_PASS) {
            size_t len = strlen(x.anchors[i].why);
            snprintf(x.anchors[i].why + len, sizeof x.anchors[i].why - len,
                     " — the judge itself is not shown to be right for %s", l->anchors[i].arch);
        }
    }
    for (int i = 0; i < l->n_cells; i++)
        decide(&x.cells[i], 0);
    for (int i = 0; i < l->n_excluded; i++)
        decide(&x.excluded[i], 1);
    if (out->store_problem[0]) {
        struct acc *all[] = {x.cells, x.excluded, x.anchors};
        int ns[] = {l->n_cells, l->n_excluded, l->n_anchors};
        for (int t = 0; t < 3; t++)
            for (int i = 0; i < ns[t]; i++) {
                all[t][i].state = RELEASE_TAMPERED;
                all[t][i].blocking_id = out->store_problem_id;
                snprintf(all[t][i].why, sizeof all[t][i].why, "%s", out->store_problem);
            }
    }
    char name[256];
    for (int i = 0; i < l->n_cells; i++) {
        to_row(&x.cells[i], RELEASE_ROW_CELL, i, ladder_cell_name(l, i, name, sizeof name),
               &out->cells[i]);
        out->n_bad_cells += x.cells[i].state != RELEASE_PASS;
    }
    for (int i = 0; i < l->n_excluded; i++) {
        to_row(&x.excluded[i], RELEASE_ROW_EXCLUDED, i,
               ladder_excluded_name(l, i, name, sizeof name), &out->excluded[i]);
        out->n_bad_cells += x.excluded[i].state != RELEASE_EXCLUDED;
    }
    for (int i = 0; i < l->n_anchors; i++) {
        to_row(&x.anchors[i], RELEASE_ROW_ANCHOR, i, l->anchors[i].id, &out->anchors[i]);
        out->n_bad_anchors += x.anchors[i].state != RELEASE_PASS;
    }
    out->n_cells = l->n_cells;
    out->n_excluded = l->n_excluded;
    out->n_anchors = l->n_anchors;
    out->n_receipts = x.n_rows;
    out->dirty = self->git_dirty != 0;
    if (out->dirty)
        snprintf(out->dirty_reason, sizeof out->dirty_reason, "%s",
                 self->dirty_reason[0] ? self->dirty_reason : "the tree is not its commit");
    out->ok = out->n_bad_cells + out->n_bad_anchors == 0 && !out->dirty;
out:
    free(x.cells);
    free(x.excluded);
    free(x.anchors);
    if (rc)
        release_result_free(out);
    return rc;
}

void release_result_free(struct release_result *r)
{
    if (!r)
        return;
    free(r->cells);
    free(r->excluded);
    free(r->anchors);
    memset(r, 0, sizeof *r);
}

/* store_get callback of pass_hashes: the row's hash when the row verifies in every respect. */
static int row_hash(void *ctx, const struct store_row *row)
{
    if (!row->sig_ok || !row->chain_ok || !row->columns_ok)
        return 1;
    memcpy(ctx, row->hash, 65);
    return 0;
}

/* A JSON array of the hashes (recomputed from the signed bytes: chain_ok) of receipts ids[0..n)
 * of st, so a sign-off binds the receipts themselves, not row ids that mean something only in
 * this database. NULL with err set when a receipt is gone or does not verify. */
static json_t *pass_hashes(struct store *st, const int64_t *ids, int n, struct gate_err *err)
{
    json_t *a = json_array();
    for (int j = 0; a && j < n; j++) {
        char hash[65] = "";
        int rc = store_get(st, ids[j], row_hash, hash, err);
        if (rc || !hash[0]) {
            /* kept when store_get recorded its own error (I/O, no such receipt) */
            err_set(err, ERR_RUNTIME,
                    "receipt %lld does not verify now: not signing a release on it",
                    (long long)ids[j]);
            json_decref(a);
            return NULL;
        }
        json_array_append_new(a, json_string(hash));
    }
    if (!a)
        err_set(err, ERR_ENV, "out of memory listing the sign-off's receipt hashes");
    return a;
}

int release_sign(const struct ladder *l, struct store *st, const struct identity *self,
                 const struct release_result *r, const struct key_pair *k, char head[65],
                 int64_t *count, struct gate_err *err)
{
    if (!r->ok)
        return err_set(err, ERR_RUNTIME, "release %s %s is blocked: not signing it", l->name,
                       l->version);
    json_t *cells = json_array(), *excl = json_array(), *anchors = json_array();
    json_t *unanch = json_array();
    for (int i = 0; i < r->n_cells; i++) {
        json_t *ids = json_array();
        for (int j = 0; j < r->cells[i].n_pass_ids; j++)
            json_array_append_new(ids, json_integer(r->cells[i].pass_ids[j]));
        json_t *hashes = pass_hashes(st, r->cells[i].pass_ids, r->cells[i].n_pass_ids, err);
        if (!hashes) {
            json_decref(ids);
            goto fail;
        }
        json_array_append_new(cells, json_pack("{s:s, s:o, s:o}", "cell", r->cells[i].name,
                                               "receipts", ids, "receipt_sha256", hashes));
    }
    for (int i = 0; i < r->n_excluded; i++)
        json_array_append_new(excl, json_pack("{s:s, s:s}", "cell", r->excluded[i].name, "reason",
                                              l->excluded[i].reason));
    for (int i = 0; i < r->n_anchors; i++) {
        json_t *ids = json_array();
        for (int j = 0; j < r->anchors[i].n_pass_ids; j++)
            json_array_append_new(ids, json_integer(r->anchors[i].pass_ids[j]));
        json_t *hashes = pass_hashes(st, r->anchors[i].pass_ids, r->anchors[i].n_pass_ids, err);
        if (!hashes) {
            json_decref(ids);
            goto fail;
        }
        json_array_append_new(anchors, json_pack("{s:s, s:s, s:o, s:o}", "anchor", l->anchors[i].id,
                                                 "arch", l->anchors[i].arch, "receipts", ids,
                                                 "receipt_sha256", hashes));
    }
    for (int i = 0; i < l->n_unanchored; i++)
        json_array_append_new(unanch, json_pack("{s:s, s:s}", "arch", l->unanchored[i].arch,
                                                "reason", l->unanchored[i].reason));
    char now[32];
    identity_utc_now(now);
    json_t *payload = json_pack(
        "{s:{s:s, s:s, s:s, s:s}, s:o, s:o, s:o, s:o, s:o, s:s, s:s}", "ladder", "name", l->name,
        "version", l->version, "sha256", l->sha256, "trust_sha256", l->trust_sha256, "engine",
        identity_json(self), "cells", cells, "excluded", excl, "anchors", anchors,
        "judge_not_anchored", unanch, "verdict", "PASS", "signed_at", now);
    int rc = store_add_signoff(st, payload, k, err);
    json_decref(payload);
    if (!rc)
        rc = store_write_head(st, k, head, count, err);
    return rc;
fail:
    json_decref(cells);
    json_decref(excl);
    json_decref(anchors);
    json_decref(unanch);
    return err && err->code ? err->code : ERR_ENV;
}
