/* report_matrix.h — the release matrix, laid once for every output of a release (issue 24 §4):
 * the text of `gate release check`, its --json and --junit, and the HTML page of `gate report`
 * all draw from one struct report_matrix built from the struct release_result that
 * release_evaluate() returned and the ladder it judged.
 *
 * What it holds: one entry per release row in the order every output lists them (required
 * cells, then excluded cells, then anchor cases, each in ladder order), with the row's cell key
 * (receipts/cellkey.h: model, host, mode and the identity settings) and, for excluded cells, the
 * ladder's reason; and the grid the text and HTML draw: columns are the distinct host × mode ×
 * identity-settings keys in order of first appearance (an F16-KV or isa cell is a column of its
 * own), rows are the ladder's models, and each grid entry is the release row there (or none).
 * Invariants: every pointer is borrowed from the ladder and the release result, valid while
 * both are; nothing here prints, escapes or judges (a row's state and reason are the release
 * check's).
 * Start reading: struct report_matrix, report_matrix_build().
 */
#ifndef GATE_REPORT_MATRIX_H
#define GATE_REPORT_MATRIX_H

#include "base/err.h"
#include "receipts/cellkey.h"

struct ladder;
struct ladder_anchor;
struct release_result;
struct release_row;

/* One release row as the outputs show it. */
struct report_matrix_row {
    const struct release_row *row;      /* the release check's row: state, receipts, reason */
    struct cell_key key;                /* cells and excluded cells: the cell's identity; anchor
                                         * cases: all strings NULL */
    int model, host;                    /* ladder indices; -1 for an anchor case */
    int column;                         /* the grid column; -1 for an anchor case */
    const char *excluded_reason;        /* excluded cells: the ladder's reason; else NULL */
    const struct ladder_anchor *anchor; /* anchor cases: the ladder's entry; else NULL */
};

/* A grid column: the host, mode and identity settings its cells share. */
struct report_matrix_column {
    struct cell_key key; /* key.model is the first row's model (not part of the column) */
    char name[96];       /* "host/mode" plus the identity suffix (ladder_column_name) */
};

struct report_matrix {
    struct report_matrix_row *rows; /* cells, excluded cells, anchor cases (owned) */
    int n_rows;
    int n_cell_rows;                   /* the cells and excluded cells: rows[0 .. n_cell_rows) */
    struct report_matrix_column *cols; /* (owned) */
    int n_cols;
    int n_models;
    int *grid; /* n_models × n_cols: the index into rows of the row at (model, column), -1 for
                * none (owned; report_matrix_at reads it) */
};

/* Lay the matrix of release r of ladder l into *m (zeroed here). Returns 0, or ERR_ENV naming
 * what could not be allocated (m is then empty; report_matrix_free is still safe). */
int report_matrix_build(struct report_matrix *m, const struct ladder *l,
                        const struct release_result *r, struct gate_err *err);

/* The row at (model mi, column c), or NULL when the ladder has no cell there. */
const struct report_matrix_row *report_matrix_at(const struct report_matrix *m, int mi, int c);

/* Free what m owns; m may be zeroed. */
void report_matrix_free(struct report_matrix *m);

#endif
