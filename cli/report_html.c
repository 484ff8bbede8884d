/* report_html.c — `gate report`: the release as one static HTML page (report_html.h has the
 * contracts, docs/reports.md "HTML report" the layout). This file draws the page and its row
 * sections; the parts it is drawn from are report_html_parts.h's (skeleton and escaping, the
 * matrix, the gates' drawers, the plots).
 *
 * The page, top to bottom: a red banner when the build is not clean or the store cannot be
 * believed (TAMPERED), the verdict line and every reason the release is blocked, the release
 * matrix and its grid (report_html_matrix.c, from cli/report_matrix.h's one matrix), the build
 * and ladder identity, then one section per row with the receipt that decides it (else the
 * newest the store holds for the row), each of its gates (report_html_gates.c) and, for a cell,
 * its throughput over releases.
 * Invariants: no JavaScript, nothing fetched; every receipt-, ladder- or store-borne string
 * goes through html_put(); the file is written atomically, and a receipt the store cannot read
 * (ERR_ENV) stops the page rather than leaving a row out.
 * Start reading: report_html_write(), then draw_row().
 */
#include "cli/report_html.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic.h"
#include "cli/cmd_tokenize.h"
#include "cli/report.h"
#include "cli/report_html_parts.h"
#include "cli/report_matrix.h"
#include "engine/tokenizer.h"
#include "harness/gatedef.h"
#include "harness/identity.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "receipts/cellkey.h"
#include "receipts/receipt.h"
#include "receipts/store.h"

/* Rows drawn between two progress lines. */
#define PROGRESS_EVERY 16

/* ---- which receipt each row shows ------------------------------------------------------------ */

/* The newest receipt id per matrix row, by the store's cell column (only to find evidence to
 * show for a row that no counted receipt decides: MISSING, EXCLUDED, TAMPERED). An anchor case's
 * receipts are filed under "ID/<model>/" RUN_ANCHOR_MODE. */
struct newest {
    const struct report_matrix *m;
    int64_t *ids; /* per row of m */
};

static int on_newest(void *ctx, const struct store_row *row)
{
    struct newest *x = ctx;
    for (int i = 0; i < x->m->n_rows; i++) {
        const char *name = x->m->rows[i].row->name;
        if (!x->m->rows[i].anchor) {
            if (!strcmp(row->cell, name))
                x->ids[i] = row->id;
            continue;
        }
        size_t n = strlen(name), m = strlen(row->cell);
        if (!strncmp(row->cell, name, n) && row->cell[n] == '/' &&
            m > n + strlen("/" RUN_ANCHOR_MODE) &&
            !strcmp(row->cell + m - strlen("/" RUN_ANCHOR_MODE), "/" RUN_ANCHOR_MODE))
            x->ids[i] = row->id;
    }
    return 0;
}

/* One receipt as read back by store_get(). */
struct loaded {
    json_t *payload; /* parsed; NULL when it does not parse */
    int verified;    /* signature, chain and columns all verify */
    char problem[256];
    char created_at[32];
    int imported;
};

static int on_get(void *ctx, const struct store_row *row)
{
    struct loaded *x = ctx;
    struct gate_err e = {0};
    x->verified = row->sig_ok && row->chain_ok && row->columns_ok;
    snprintf(x->problem, sizeof x->problem, "%s", row->problem ? row->problem : "");
    snprintf(x->created_at, sizeof x->created_at, "%s", row->created_at);
    x->imported = row->imported;
    if (receipt_parse(row->payload, row->len, &x->payload, &e) != 0)
        x->payload = NULL;
    return 0;
}

/* ---- rows ------------------------------------------------------------------------------------ */

struct page {
    FILE *f;
    const struct ladder *l;
    const struct release_result *r;
    struct store *st;
    struct report_matrix m; /* the release matrix, as every output of the release lays it */
    struct newest nw;
    struct tok **toks; /* per ladder model, loaded on first use */
    int *tok_tried;
};

static const struct tok *model_tok(struct page *pg, int mi)
{
    if (mi < 0 || mi >= pg->l->n_models)
        return NULL;
    if (!pg->tok_tried[mi]) {
        struct gate_err e = {0};
        pg->tok_tried[mi] = 1;
        if (pg->l->models[mi].path && access(pg->l->models[mi].path, R_OK) == 0 &&
            cmd_tokenize_load(&pg->toks[mi], pg->l->models[mi].path, &e))
            pg->toks[mi] = NULL;
    }
    return pg->toks[mi];
}

static void draw_receipt(struct page *pg, const struct loaded *x, int64_t id, int mi)
{
    FILE *f = pg->f;
    const json_t *p = x->payload;
    if (!x->verified || pg->r->store_problem[0]) {
        fprintf(f, "<p class=\"unverified\">UNVERIFIED: receipt %" PRId64 " ", id);
        if (!x->verified) {
            fputs("does not verify (", f);
            html_put(f, x->problem[0] ? x->problem : "signature, chain or columns");
            fputs(")", f);
        } else {
            fputs("is in a store that cannot be believed", f);
        }
        fputs("; shown only to help find the damage.</p>\n", f);
    }
    if (!p) {
        fputs("<p class=\"unverified\">its payload does not parse.</p>\n", f);
        return;
    }
    const json_t *eng = json_object_get(json_object_get(p, "subject"), "engine");
    const json_t *env = json_object_get(p, "environment");
    const json_t *cell = json_object_get(p, "cell");
    fprintf(f, "<table class=\"receipt\"><tr><th>receipt</th><td>%" PRId64 " (", id);
    html_put(f, x->created_at);
    fprintf(f, "%s), recorded verdict ", x->imported ? ", imported" : "");
    html_json(f, json_object_get(p, "verdict"));
    fputs("</td></tr>\n<tr><th>cell</th><td>", f);
    html_json(f, json_object_get(cell, "model"));
    fputs(" / ", f);
    html_json(f, json_object_get(cell, "host"));
    fputs(" / ", f);
    html_json(f, json_object_get(cell, "mode"));
    const char *cmode = json_string_value(json_object_get(cell, "mode"));
    /* the identity settings, one row of CELL_SETTINGS each (as gate receipt show): one the cell
     * object records at its default (kv) always, the others when set; an anchor case: none */
    for (int k = 0; (!cmode || strcmp(cmode, "anchor")) && k < CELL_SETTING_COUNT; k++) {
        const struct cell_setting *row = &CELL_SETTINGS[k];
        const json_t *v = json_object_get(cell, row->key);
        if (!v && !row->cell_has_default)
            continue;
        fprintf(f, "</td></tr>\n<tr><th>%s</th><td>", row->noun);
        if (v)
            html_json(f, v);
        else
            fprintf(f, "%s (not recorded: a receipt from before the %s key)", row->dflt, row->key);
    }
    fputs("</td></tr>\n<tr><th>signed by</th><td class=\"mono\">", f);
    html_json(f, json_object_get(p, "key_id"));
    fputs("</td></tr>\n<tr><th>build</th><td class=\"mono\">", f);
    html_json(f, json_object_get(eng, "version"));
    fputs(" ", f);
    html_json(f, json_object_get(eng, "git_commit"));
    if (json_is_true(json_object_get(eng, "git_dirty")))
        fputs(" <b>(dirty tree)</b>", f);
    fputs("</td></tr>\n<tr><th>model sha256</th><td class=\"mono\">", f);
    html_json(f,
              json_object_get(json_object_get(json_object_get(p, "subject"), "model"), "sha256"));
    fputs("</td></tr>\n<tr><th>environment</th><td>", f);
    html_json(f, json_object_get(env, "hostname"));
    fputs(", cpu ", f);
    html_json(f, json_object_get(env, "cpu")); /* the host's CPU model: not a backend name */
    fputs(", gpu ", f);
    html_json(f, json_object_get(env, "gpu"));
    fputs(", threads ", f);
    html_json(f, json_object_get(env, "threads"));
    fputs("</td></tr>\n<tr><th>ran</th><td>", f);
    html_json(f, json_object_get(p, "started_at"));
    fputs(" &ndash; ", f);
    html_json(f, json_object_get(p, "finished_at"));
    fputs("</td></tr>\n</table>\n", f);
    const json_t *gates = json_object_get(p, "gates");
    const char *mode = html_ostr(cell, "mode");
    const char *model_path = mi >= 0 ? pg->l->models[mi].path : NULL;
    const struct tok *t = NULL;
    if (json_object_get(gates, "golden"))
        t = model_tok(pg, mi);
    for (int k = 0; k < GATE_COUNT; k++) /* the gate table's order */
        if (json_is_object(json_object_get(gates, GATE_DEFS[k].name)))
            html_gate_draw(f, GATE_DEFS[k].name, mode, json_object_get(gates, GATE_DEFS[k].name), t,
                           model_path);
    const char *name;
    json_t *g;
    json_object_foreach((json_t *)gates, name, g)
    {
        if (!gatedef_find(name) && json_is_object(g)) /* a key no gate has: shown, not judged */
            html_gate_draw(f, name, mode, g, NULL, NULL);
    }
}

/* One row's section: name, state, reason, the receipts behind it, the receipt that decides it
 * (else newest, the newest the store holds for the row) and, for a cell, its throughput trend.
 * ERR_ENV when that receipt cannot be read from the store. */
static int draw_row(struct page *pg, const struct report_matrix_row *mw, int64_t newest,
                    struct gate_err *err)
{
    FILE *f = pg->f;
    const struct release_row *row = mw->row;
    char a[32];
    const char *state = release_state_name(row->state);
    fprintf(f, "<section class=\"row row-%s\" id=\"%s\">\n<h3>", state,
            html_row_anchor(row->kind, row->index, a, sizeof a));
    if (row->kind == RELEASE_ROW_ANCHOR)
        fputs("anchor ", f);
    html_put(f, row->name);
    fputs(" ", f);
    html_badge(f, state, NULL, 0);
    fputs("</h3>\n", f);
    if (mw->excluded_reason) {
        fputs("<p class=\"excluded-reason\">excluded: ", f);
        html_put(f, mw->excluded_reason);
        fputs("</p>\n", f);
    }
    if (mw->anchor) {
        const struct ladder_anchor *an = mw->anchor;
        fputs("<p>the judge on trial for ", f);
        html_put(f, an->arch);
        fputs(" against: ", f);
        html_put(f, an->reference);
        fputs("</p>\n", f);
    }
    if (row->reason[0]) {
        fputs("<p class=\"reason\"><b>why:</b> ", f);
        html_put(f, row->reason);
        fputs("</p>\n", f);
    }
    if (row->disagree[0]) {
        fputs("<p class=\"note\">warning: ", f);
        html_put(f, row->disagree);
        fputs("</p>\n", f);
    }
    fprintf(f,
            "<p class=\"muted\">receipts for this build: %d PASS, %d FAIL, %d ERROR; %d stale,"
            " %d untrusted",
            row->n_pass, row->n_fail, row->n_error, row->n_stale, row->n_untrusted);
    for (int k = 0; k < row->n_pass_ids; k++)
        fprintf(f, "%s%" PRId64, k ? ", " : "; PASS receipts ", row->pass_ids[k]);
    fputs("</p>\n", f);
    /* the receipt that decides the row, else the newest the store holds for it */
    int64_t id = 0;
    if (row->state != RELEASE_TAMPERED && row->blocking_id)
        id = row->blocking_id;
    else if (row->state != RELEASE_TAMPERED && row->n_pass_ids)
        id = row->pass_ids[row->n_pass_ids - 1];
    else
        id = newest;
    if (!id) {
        fputs("<p class=\"muted\">no receipt in the store for this row.</p>\n</section>\n", f);
        return 0;
    }
    if (row->state == RELEASE_TAMPERED || row->state == RELEASE_MISSING ||
        row->state == RELEASE_EXCLUDED)
        fprintf(f, "<p class=\"muted\">the newest receipt stored for this row (it does not count"
                   " for this release):</p>\n");
    struct loaded x;
    memset(&x, 0, sizeof x);
    struct gate_err e = {0};
    int rc = store_get(pg->st, id, on_get, &x, &e);
    if (rc == ERR_ENV) {
        rc = err_set(err, ERR_ENV, "report: cannot read receipt %" PRId64 ": %s", id, e.msg);
        goto out;
    }
    if (rc) {
        fprintf(f, "<p class=\"unverified\">receipt %" PRId64 " cannot be read: ", id);
        html_put(f, e.msg);
        fputs("</p>\n", f);
        rc = 0;
        goto out;
    }
    draw_receipt(pg, &x, id, mw->model);
    if (row->kind == RELEASE_ROW_CELL)
        html_trend_draw(f, pg->st, row->name);
out:
    json_decref(x.payload);
    fputs("</section>\n", f);
    return rc;
}

/* ---- header and identity --------------------------------------------------------------------- */

static void draw_identity(FILE *f, const struct ladder *l, const char *ladder_path, const char *db,
                          const struct identity *id, const struct release_result *r)
{
    char now[32];
    identity_utc_now(now);
    fputs("<h2>build and ladder</h2>\n<table class=\"ident\" id=\"identity\">\n", f);
    const char *rows[][2] = {
        {"release", NULL},
        {"ladder", ladder_path},
        {"ladder sha256", l->sha256},
        {"trust sha256", l->trust_sha256},
        {"build version", id->version},
        {"build commit", id->git_commit},
        {"source sha256", id->source_sha256},
        {"binary sha256", id->binary_sha256},
        {"build flags", id->build_flags},
        {"receipt store", db},
        {"generated (UTC)", now},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fputs("<tr><th>", f);
        html_put(f, rows[i][0]);
        fputs("</th><td class=\"mono\">", f);
        if (i == 0) {
            html_put(f, l->name);
            fputs(" ", f);
            html_put(f, l->version);
        } else {
            html_put(f, rows[i][1]);
        }
        if (i == 5 && id->git_dirty) {
            fputs(" <b>(dirty: ", f);
            html_put(f, id->dirty_reason[0] ? id->dirty_reason : "uncommitted changes");
            fputs(")</b>", f);
        }
        if (i == 9)
            fprintf(f, " (%d receipt%s)", r->n_receipts, r->n_receipts == 1 ? "" : "s");
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
    for (int i = 0; i < l->n_unanchored; i++) {
        fputs("<p class=\"note\">judge not anchored for ", f);
        html_put(f, l->unanchored[i].arch);
        fputs(": ", f);
        html_put(f, l->unanchored[i].reason);
        fputs("</p>\n", f);
    }
    for (int i = 0; i < l->n_cells; i++) /* docs/gates.md, "Tolerances from noise" */
        if (l->cells[i].g.loose_reason[0]) {
            char name[256];
            fputs("<p class=\"note loose\">cell ", f);
            html_put(f, ladder_cell_name(l, i, name, sizeof name));
            fputs(" may judge parity looser than the backend's noise allows"
                  " (parity.loose_reason): ",
                  f);
            html_put(f, l->cells[i].g.loose_reason);
            fputs("</p>\n", f);
        }
    for (int i = 0; i < l->n_cells; i++) { /* docs/exec.md, "Falsify by proxy" */
        char name[256], kinds[160];
        const int px = ladder_falsify_proxy_text(&l->cells[i].g, kinds, sizeof kinds);
        if (!px)
            continue;
        fputs("<p class=\"note proxy\">cell ", f);
        html_put(f, ladder_cell_name(l, i, name, sizeof name));
        fputs(px == 1 ? " is falsified by proxy: engine "
                      : " is falsified partly by proxy: engine ",
              f);
        html_put(f, l->cells[i].g.engine->e.name);
        if (px == 1)
            fputs(" takes no faults, so each fault went into the judge and the engine's clean run"
                  " had to be rejected against it</p>\n",
                  f);
        else {
            fputs(" does not take ", f);
            html_put(f, kinds);
            fputs(", so those faults went into the judge and the engine's clean run had to be"
                  " rejected against them; the other kinds were injected into the engine</p>\n",
                  f);
        }
    }
}

/* ---- the page -------------------------------------------------------------------------------- */

static void progress_line(FILE *progress, int tty, int done, int total)
{
    if (!progress || total <= PROGRESS_EVERY)
        return;
    if (tty)
        fprintf(progress, "\r  gate report: %d of %d rows drawn\033[K%s", done, total,
                done == total ? "\n" : "");
    else if (done % PROGRESS_EVERY == 0 || done == total)
        fprintf(progress, "gate report: %d of %d rows drawn\n", done, total);
}

/* report_release_blockers callback: one <li> per reason into the page ctx. */
static void blocker_li(void *ctx, const char *kind, const char *subject, const char *reason)
{
    FILE *f = ctx;
    fputs("<li class=\"blocker-", f);
    html_put(f, kind);
    fputs("\"><b>", f);
    html_put(f, subject);
    fputs("</b>: ", f);
    html_put(f, reason);
    fputs("</li>\n", f);
}

int report_html_write(const char *path, const struct ladder *l, const char *ladder_path,
                      const char *db, struct store *st, const struct identity *id,
                      const struct release_result *r, FILE *progress, struct gate_err *err)
{
    struct atomic_file af = {0};
    struct page pg;
    int rc = 0;
    memset(&pg, 0, sizeof pg);
    pg.l = l;
    pg.r = r;
    pg.st = st;
    if ((rc = report_matrix_build(&pg.m, l, r, err)))
        goto out;
    pg.nw.m = &pg.m;
    pg.nw.ids = calloc((size_t)pg.m.n_rows + 1, sizeof *pg.nw.ids);
    pg.toks = calloc((size_t)l->n_models + 1, sizeof *pg.toks);
    pg.tok_tried = calloc((size_t)l->n_models + 1, sizeof *pg.tok_tried);
    if (!pg.nw.ids || !pg.toks || !pg.tok_tried) {
        rc = err_set(err, ERR_ENV,
                     "report: out of memory for the newest receipt of %d rows and the tokenizers"
                     " of %d models, drawing '%s'",
                     pg.m.n_rows, l->n_models, path);
        goto out;
    }
    if ((rc = store_foreach(st, on_newest, &pg.nw, err)))
        goto out;
    if ((rc = atomic_open(&af, path, 0644, err)))
        goto out;
    FILE *f = pg.f = atomic_stream(&af, err);
    if (!f) {
        rc = ERR_ENV;
        goto out;
    }
    html_head(f, l);
    if (r->dirty) {
        fputs("<div class=\"banner banner-tampered\" id=\"dirty\">BUILD NOT CLEAN: ", f);
        html_put(f, r->dirty_reason);
        fputs(". No receipt can count for this gate binary: commit, rebuild, rerun.</div>\n", f);
    }
    if (r->store_problem[0]) {
        fputs("<div class=\"banner banner-tampered\" id=\"tampered\">STORE TAMPERED: ", f);
        html_put(f, r->store_problem);
        fputs(". Every row is TAMPERED; the receipts below are marked UNVERIFIED and shown only"
              " to help find the damage.</div>\n",
              f);
    }
    fputs("<h1>gate release report: ", f);
    html_put(f, l->name);
    fputs(" ", f);
    html_put(f, l->version);
    fputs("</h1>\n", f);
    if (r->ok)
        fprintf(f,
                "<div class=\"banner banner-ok\" id=\"verdict\">RELEASE OK: all %d required cells"
                " and %d anchor case%s PASS for this build</div>\n",
                r->n_cells, r->n_anchors, r->n_anchors == 1 ? "" : "s");
    else
        fprintf(f,
                "<div class=\"banner banner-blocked\" id=\"verdict\">RELEASE BLOCKED: %d of %d"
                " required cells and %d of %d anchor case%s are not PASS%s</div>\n",
                r->n_bad_cells, r->n_cells, r->n_bad_anchors, r->n_anchors,
                r->n_anchors == 1 ? "" : "s",
                r->dirty ? "; this binary is not a clean build, nothing can count" : "");
    if (!r->ok) {
        /* every reason, as JUnit and JSON carry them (issue 23 §5) */
        fputs("<ul class=\"banner banner-blocked\" id=\"blockers\">\n", f);
        report_release_blockers(r, blocker_li, f);
        fputs("</ul>\n", f);
    }
    html_matrix_draw(f, l, &pg.m);
    draw_identity(f, l, ladder_path, db, id, r);
    fputs("<h2>cells</h2>\n", f);
    const int total = pg.m.n_rows;
    const int tty = progress && isatty(fileno(progress));
    for (int i = 0; i < total && !rc; i++) {
        if (i == pg.m.n_cell_rows) /* the anchor cases follow the cells */
            fputs("<h2>anchor cases</h2>\n", f);
        rc = draw_row(&pg, &pg.m.rows[i], pg.nw.ids[i], err);
        progress_line(progress, tty, i + 1, total);
    }
    if (rc)
        goto out;
    fputs("<p class=\"muted\">drawn by gate report from the signed receipts; every number above"
          " is in the receipt named with it (gate receipt show ID).</p>\n</body>\n</html>\n",
          f);
    if (ferror(f)) {
        rc = err_set(err, ERR_ENV, "cannot write the HTML report '%s': write error", path);
        goto out;
    }
    rc = atomic_commit(&af, err);
out:
    atomic_abort(&af);
    for (int i = 0; pg.toks && i < l->n_models; i++)
        tok_free(pg.toks[i]);
    free(pg.toks);
    free(pg.tok_tried);
    free(pg.nw.ids);
    report_matrix_free(&pg.m);
    return rc;
}

int report_html_check(const char *ladder_path, const char *db, const char *expect_head,
                      const char *out_path, const struct identity *self, FILE *progress, int *ok,
                      struct gate_err *err)
{
    struct ladder *l = NULL;
    struct store *st = NULL;
    struct identity id;
    struct release_result r;
    struct release_options o = {.ladder = ladder_path, .db = db, .expect_head = expect_head};
    int rc;
    memset(&r, 0, sizeof r);
    if (ok)
        *ok = 0;
    if ((rc = ladder_load(&l, ladder_path, err)) || (rc = ladder_check_runnable(l, err)))
        goto out;
    if (self)
        id = *self;
    else if ((rc = identity_get(&id, err)))
        goto out;
    /* the same audit and judgement as `gate release check`: the page shows what it decides */
    if ((rc = store_open_readonly(&st, db, err)) ||
        (rc = release_evaluate(l, st, &id, &o, &r, err)))
        goto out;
    if ((rc = report_html_write(out_path, l, ladder_path, db, st, &id, &r, progress, err)))
        goto out;
    if (ok)
        *ok = r.ok;
out:
    release_result_free(&r);
    store_close(st);
    ladder_free(l);
    return rc;
}