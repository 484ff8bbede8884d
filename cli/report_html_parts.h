/* report_html_parts.h — the parts `gate report`'s page is drawn from (cli/report_html.c draws the
 * page; report_html.h has the command's contract). Inside cli/ only: nothing else includes this.
 *
 *   report_html_base.c    the page's skeleton: <head> and its inline CSS, escaping (html_put),
 *                         numbers (html_num), JSON values, state badges, row ids
 *   report_html_matrix.c  the release matrix table and the model x host/mode grid, from the one
 *                         matrix every output of a release draws (cli/report_matrix.h)
 *   report_html_gates.c   one receipt gate re-judged through the gate table, its checks and its
 *                         drawer (DRAWERS[], indexed by enum gate_id)
 *   report_html_plots.c   the SVG plots: parity per position, throughput over releases
 *
 * Invariants (the page's, report_html.h): no JavaScript, nothing fetched; every receipt-,
 * ladder- or store-borne string goes through html_put() (cli_safe, then HTML entities); numbers
 * go through html_num() (non-finite as "NaN" / "Inf", as receipts record them). Every function
 * here writes to f and cannot fail (a write error surfaces at the page's commit).
 * Start reading: html_gate_draw() in report_html_gates.c.
 */
#ifndef GATE_REPORT_HTML_PARTS_H
#define GATE_REPORT_HTML_PARTS_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "harness/run.h"

struct ladder;
struct report_matrix;
struct store;
struct tok;

/* ---- report_html_base.c: the skeleton -------------------------------------------------------- */

/* Text that is already safe for a terminal (valid UTF-8, no controls: cli_safe() or
 * cmd_tokenize_escape() output) as HTML: & < > " ' as entities. */
void html_put_entities(FILE *f, const char *buf);

/* s as HTML text or a quoted attribute value: cli_safe() first (controls, DEL, C1 and invalid
 * UTF-8 become "\xNN"), then & < > " ' as entities. s may be NULL ("(null)"). */
void html_put(FILE *f, const char *s);

/* A number as receipts show it: %.6g, or NaN / Inf / -Inf. */
void html_num(FILE *f, double v);

/* A JSON value of a metric (number, "NaN"/"Inf" string) as a double; NAN when absent. */
double html_jnum(const json_t *v);

/* html_jnum of o's member key. */
double html_onum(const json_t *o, const char *key);

/* o's member key as a string, NULL when absent or not a string (borrowed from o). */
const char *html_ostr(const json_t *o, const char *key);

/* Any JSON value: numbers through html_num, strings escaped, booleans as words, null or absent
 * as "—"; arrays and objects compact, escaped. */
void html_json(FILE *f, const json_t *v);

/* The page from "<!DOCTYPE html>" to "<body>": the title names l's release, the style is
 * inline, a Content-Security-Policy forbids anything fetched. */
void html_head(FILE *f, const struct ladder *l);

/* A state badge: <td> (cell 1) or <span>, linked to "#href" when href is not NULL. */
void html_badge(FILE *f, const char *state, const char *href, int cell);

/* The id of row kind k, index i: "cell-3", "excl-0", "anchor-1" (the matrix links to it). */
const char *html_row_anchor(enum release_row_kind k, int i, char *buf, size_t n);

/* ---- report_html_matrix.c -------------------------------------------------------------------- */

/* "release matrix": the table (one row per required cell, excluded cell and anchor case: model,
 * host, mode and identity settings, state linked to the row's section, deciding receipt,
 * reason) and the grid of the same states (models down, host/mode/settings across). */
void html_matrix_draw(FILE *f, const struct ladder *l, const struct report_matrix *m);

/* ---- report_html_gates.c --------------------------------------------------------------------- */

/* One gate of a receipt (name as the receipt spells it, g its object), judged again through the
 * gate table from its recorded settings and metrics (mode: the receipt cell's): a <details> with
 * the re-derived verdict and reason, the recorded verdict when it differs, the error, the
 * checks, and the gate's own drawer. t (may be NULL: ids only) and model_path decode golden
 * tokens. A name no gate has is shown, not judged. */
void html_gate_draw(FILE *f, const char *name, const char *mode, const json_t *g,
                    const struct tok *t, const char *model_path);

/* ---- report_html_plots.c --------------------------------------------------------------------- */

/* The parity plot of a parity gate's metrics m and settings: cosine per position (linear) above,
 * KL per position (log10) below, the thresholds dashed, TIE_FLIP / WRONG / NONFINITE positions
 * and route-tie replays marked; a line saying there is none when no per-position numbers were
 * recorded. */
void html_parity_plot(FILE *f, const json_t *m, const json_t *settings);

/* The decode and prefill medians of cell over the release versions in st (per version its
 * newest verified PASS receipt), a small SVG line each; nothing when fewer than two versions
 * have one or st cannot be read. Reads the store once. */
void html_trend_draw(FILE *f, struct store *st, const char *cell);

#endif
