/* report_matrix.c — the release matrix laid once (report_matrix.h has the contract): each release
 * row with its cell key, and the model × column grid, for the text, JSON, JUnit and HTML outputs.
 * Invariants: rows in the outputs' order (cells, excluded cells, anchor cases); a column is a
 * distinct (host, mode, identity settings) key, compared with cell_variant_same, never by its
 * printed name; the ladder refuses a cell listed twice, so a grid entry holds at most one row.
 * Start reading: report_matrix_build().
 */
#include "cli/report_matrix.h"

#include <stdlib.h>
#include <string.h>

#include "harness/ladder.h"
#include "harness/run.h"

/* The column of key among the first n of cols, or -1. */
static int find_column(const struct report_matrix_column *cols, int n, const struct cell_key *key)
{
    for (int c = 0; c < n; c++)
        if (!strcmp(cols[c].key.host, key->host) && !strcmp(cols[c].key.mode, key->mode) &&
            cell_variant_same(&cols[c].key.v, &key->v))
            return c;
    return -1;
}

int report_matrix_build(struct report_matrix *m, const struct ladder *l,
                        const struct release_result *r, struct gate_err *err)
{
    memset(m, 0, sizeof *m);
    const int n_cell_rows = r->n_cells + r->n_excluded;
    const int n_rows = n_cell_rows + r->n_anchors;
    m->rows = calloc((size_t)n_rows + 1, sizeof *m->rows);
    m->cols = calloc((size_t)n_cell_rows + 1, sizeof *m->cols);
    m->grid = malloc(((size_t)l->n_models * (size_t)n_cell_rows + 1) * sizeof *m->grid);
    if (!m->rows || !m->cols || !m->grid) {
        report_matrix_free(m);
        return err_set(err, ERR_ENV,
                       "report: out of memory for the release matrix (%d rows, %d models)", n_rows,
                       l->n_models);
    }
    m->n_rows = n_rows;
    m->n_cell_rows = n_cell_rows;
    m->n_models = l->n_models;
    for (int i = 0; i < n_rows; i++) {
        struct report_matrix_row *w = &m->rows[i];
        if (i < r->n_cells) {
            const struct ladder_cell *c = &l->cells[i];
            w->row = &r->cells[i];
            w->key = ladder_cell_key(l, i);
            w->model = c->model;
            w->host = c->host;
        } else if (i < n_cell_rows) {
            const struct ladder_excluded *x = &l->excluded[i - r->n_cells];
            w->row = &r->excluded[i - r->n_cells];
            w->key = ladder_excluded_key(l, i - r->n_cells);
            w->model = x->model;
            w->host = x->host;
            w->excluded_reason = x->reason;
        } else {
            w->row = &r->anchors[i - n_cell_rows];
            w->model = w->host = w->column = -1;
            w->anchor = &l->anchors[i - n_cell_rows];
            continue;
        }
        w->column = find_column(m->cols, m->n_cols, &w->key);
        if (w->column < 0) {
            struct report_matrix_column *col = &m->cols[m->n_cols];
            col->key = w->key;
            ladder_column_name(&w->key, col->name, sizeof col->name);
            w->column = m->n_cols++;
        }
    }
    for (int k = 0; k < m->n_models * m->n_cols; k++)
        m->grid[k] = -1;
    for (int i = 0; i < n_cell_rows; i++)
        m->grid[m->rows[i].model * m->n_cols + m->rows[i].column] = i;
    return 0;
}

const struct report_matrix_row *report_matrix_at(const struct report_matrix *m, int mi, int c)
{
    if (mi < 0 || mi >= m->n_models || c < 0 || c >= m->n_cols)
        return NULL;
    const int i = m->grid[mi * m->n_cols + c];
    return i < 0 ? NULL : &m->rows[i];
}

void report_matrix_free(struct report_matrix *m)
{
    if (!m)
        return;
    free(m->rows);
    free(m->cols);
    free(m->grid);
    memset(m, 0, sizeof *m);
}
