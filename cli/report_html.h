/* report_html.h — `gate report`: the release as one self-contained static HTML page that people
 * look at in a sign-off meeting (issue 13). It is drawn from the same struct release_result the
 * release check prints (harness/run.h) plus the signed payloads of the receipts that decide each
 * row, read from the store; nothing is believed because of a column.
 *
 * Invariants: the page fetches nothing (no external script, font, style or image: inline CSS,
 * inline SVG, no JavaScript at all; expandable parts are <details>); every string that comes from
 * a receipt, a ladder or the store is HTML-escaped after cli_safe() (controls and invalid UTF-8
 * as "\xNN"), so the page holds no markup that a receipt wrote; the file is written through
 * base/atomic.h (a reader sees the old file or the whole new one). docs/reports.md
 * ("HTML report") documents the layout, the classes and the ids.
 * Start reading: report_html_check(), then report_html_write().
 */
#ifndef GATE_REPORT_HTML_H
#define GATE_REPORT_HTML_H

#include <stdio.h>

#include "base/err.h"

struct identity;
struct ladder;
struct release_result;
struct store;

/* Write the HTML report of release r (judged by release_evaluate() from st for the build id) of
 * ladder l to path (mode 0644, atomically). ladder_path and db are shown as given. st is read
 * (store_get) for the receipt that decides each row: the blocking receipt, else the newest PASS
 * receipt, else (MISSING, EXCLUDED, TAMPERED) the newest receipt the store holds for the row;
 * a receipt that does not verify is still drawn, marked so. Token ids of golden cases are
 * decoded to pieces with the tokenizer of the ladder model's file when it exists (the ids are
 * shown either way). progress (may be NULL): a line per 16 rows drawn, for ladders of more than
 * 16 rows. Returns 0; ERR_ENV naming path when it cannot be written (nothing is left behind),
 * or out of memory. */
int report_html_write(const char *path, const struct ladder *l, const char *ladder_path,
                      const char *db, struct store *st, const struct identity *id,
                      const struct release_result *r, FILE *progress, struct gate_err *err);

/* The whole `gate report`: load and check the ladder, take the build identity (self, or the
 * running binary's when NULL; tests pass a stand-in clean build), open the store read-only,
 * evaluate the release as `gate release check` does (expect_head, may be NULL: a chain head
 * that must still be in the store, as `release check --expect-head`), write the page to
 * out_path. The page shows a red banner for a dirty build and for a store that cannot be
 * believed, and lists every reason the release is blocked (report_release_blockers). *ok (may be
 * NULL) receives r.ok: 1 only when the release is OK. Returns 0 when the page was written,
 * whatever the release; ERR_INPUT (ladder, missing store) or ERR_ENV (unreadable store, page not
 * writable) with err naming the subject. */
int report_html_check(const char *ladder_path, const char *db, const char *expect_head,
                      const char *out_path, const struct identity *self, FILE *progress, int *ok,
                      struct gate_err *err);

#endif
