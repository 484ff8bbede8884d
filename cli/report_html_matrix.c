/* report_html_matrix.c — the release matrix on `gate report`'s page (report_html_parts.h has the
 * contract): a table with one row per required cell, excluded cell and anchor case, then the
 * same states as a grid, models down, host/mode (and identity settings) across. Both are drawn
 * from the struct report_matrix that the text, JSON and JUnit outputs of the release draw too
 * (cli/report_matrix.h): rows, columns and grid entries are laid there, never here.
 * Invariants: every state links to its row's section (html_row_anchor); an empty grid entry is a
 * "—" of class st-NONE; ladder-borne text goes through html_put().
 * Start reading: html_matrix_draw().
 */
#include <inttypes.h>
#include <stdio.h>

#include "cli/report_html_parts.h"
#include "cli/report_matrix.h"
#include "harness/ladder.h"

/* One row of the matrix table. */
static void matrix_row(FILE *f, const struct report_matrix_row *mw)
{
    const struct release_row *row = mw->row;
    char a[32];
    static const char *const kind[] = {"row-cell", "row-excluded", "row-anchor"};
    fprintf(f, "<tr class=\"%s\">", kind[row->kind]);
    if (mw->anchor) {
        fputs("<td>anchor: ", f);
        html_put(f, mw->anchor->id);
        fputs("</td><td colspan=\"2\">judge on trial: ", f);
        html_put(f, mw->anchor->arch);
        fputs("</td>", f);
    } else {
        fputs("<td>", f);
        html_put(f, mw->key.model);
        fputs("</td><td>", f);
        html_put(f, mw->key.host);
        fputs("</td><td>", f);
        html_put(f, mw->key.mode);
        /* the identity settings are part of the cell: an F16 or isa cell is its own row */
        char suffix[CELL_SUFFIX_MAX];
        html_put(f, cell_variant_suffix(&mw->key.v, suffix, sizeof suffix));
        fputs("</td>", f);
    }
    html_badge(f, release_state_name(row->state),
               html_row_anchor(row->kind, row->index, a, sizeof a), 1);
    fputs("<td class=\"num\">", f);
    if (row->blocking_id)
        fprintf(f, "%" PRId64, row->blocking_id);
    else if (row->n_pass_ids)
        fprintf(f, "%" PRId64, row->pass_ids[row->n_pass_ids - 1]);
    else
        fputs("&mdash;", f);
    fputs("</td><td class=\"reason\">", f);
    if (mw->excluded_reason) {
        fputs("excluded: ", f);
        html_put(f, mw->excluded_reason);
        if (row->reason[0])
            fputs("; ", f);
    }
    html_put(f, row->reason);
    fputs("</td></tr>\n", f);
}

void html_matrix_draw(FILE *f, const struct ladder *l, const struct report_matrix *m)
{
    fputs("<h2>release matrix</h2>\n<table class=\"matrix\" id=\"matrix\">\n<tr><th>model</th>"
          "<th>host</th><th>mode</th><th>state</th><th>receipt</th><th>reason</th></tr>\n",
          f);
    for (int i = 0; i < m->n_rows; i++)
        matrix_row(f, &m->rows[i]);
    fputs("</table>\n", f);
    fputs("<table class=\"grid\" id=\"grid\">\n<tr><th>model \\ host/mode</th>", f);
    for (int c = 0; c < m->n_cols; c++) {
        const struct cell_key *key = &m->cols[c].key;
        char suffix[CELL_SUFFIX_MAX];
        fputs("<th>", f);
        html_put(f, key->host);
        fputs("<br>", f);
        html_put(f, key->mode);
        html_put(f, cell_variant_suffix(&key->v, suffix, sizeof suffix));
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    for (int mi = 0; mi < m->n_models; mi++) {
        fputs("<tr><th>", f);
        html_put(f, l->models[mi].id);
        fputs("</th>", f);
        for (int c = 0; c < m->n_cols; c++) {
            const struct report_matrix_row *w = report_matrix_at(m, mi, c);
            char a[32];
            if (!w)
                fputs("<td class=\"st st-NONE\">&mdash;</td>", f);
            else
                html_badge(f, release_state_name(w->row->state),
                           html_row_anchor(w->row->kind, w->row->index, a, sizeof a), 1);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}
