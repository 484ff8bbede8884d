/* report.h — how `gate run` and `gate release check` draw what the core returns: the live
 * progress of a run (per-gate lines, and on a terminal a ticker with the elapsed time and an
 * estimate), the run's table or JSON, the release matrix, the blocking rows and the sign-off
 * lines. The core (harness/run.h) returns data and statuses; this layer prints, and the commands
 * (cli/cmd_run.c) map statuses to exit codes. Every string that can come from a receipt or a
 * ladder goes through cli_safe() here, at print time.
 * The release's four outputs (the text here, JSON, JUnit, and the HTML page of report_html.h)
 * draw one matrix, laid by cli/report_matrix.h.
 * Start reading: report_run_progress(), then report_release().
 */
#ifndef GATE_REPORT_H
#define GATE_REPORT_H

#include <stdio.h>

#include "harness/run.h"

struct identity;
struct json_t;
struct ladder;

#define REPORT_MAX_TIMINGS 64

/* The progress printer's state: a callback context for run_ladder(). Zero it, set json and tty,
 * pass report_run_progress as the callback and &this as ctx, call report_run_end() after. */
struct report_run {
    int json;          /* machine-readable output: no per-gate lines, no header */
    int tty;           /* stderr is a terminal: draw the ticker and the synth bar */
    struct ticker *tk; /* the running ticker, NULL when none */
    /* seconds each (model, gate) took so far, for the ticker's estimate */
    struct {
        char model[64], gate[24];
        double sum;
        int n;
    } timing[REPORT_MAX_TIMINGS];
    int n_timing;
};

/* run_ladder's progress callback: writes to stderr (the per-gate lines, the receipt lines, the
 * head line, the dirty-build warning, the ticker on a terminal). ctx is a struct report_run. */
void report_run_progress(void *ctx, const struct run_event *ev);

/* Stop a ticker still running (after run_ladder returned); r may be NULL. */
void report_run_end(struct report_run *r);

/* The expected seconds of gate on a cell of model, from the gates that finished before: the
 * mean over earlier cells of the same model, else over every earlier cell; -1 when none ran. */
double report_run_estimate(const struct report_run *r, const char *model, const char *gate);

/* The run's results to out: the JSON array (json) or the table and "N of M passed". */
void report_run_results(FILE *out, const struct run_result *res, int json);

/* The release check's report to out: header (ladder_path, db as given), counts, the matrix
 * (cli/report_matrix.h: the one the JSON, JUnit and HTML outputs lay), unanchored and excluded
 * notes, warnings, and RELEASE OK or RELEASE BLOCKED with every blocking row naming its receipt.
 * Returns 0; ERR_ENV when the matrix cannot be laid (out of memory): the rest is still written,
 * with err's sentence where the matrix would be. */
int report_release(FILE *out, const struct ladder *l, const char *ladder_path, const char *db,
                   const struct identity *id, const struct release_result *r, struct gate_err *err);

/* ---- CI formats (issue 13): JUnit XML and the release as JSON ---------------------------------
 * JUnit: every string is XML-escaped after cli_safe() (controls and invalid UTF-8 as "\xNN",
 * so receipt-borne text can neither break the XML nor the terminal that shows it). The files are
 * written through base/atomic.h: a reader sees the old file or the whole new one. The mapping
 * and the JSON schema are in docs/reports.md. */

/* The result of `gate run` as JUnit XML at path (mode 0644): one <testsuite> per cell and per
 * anchor case (res order, named as in run_event.cell), one <testcase> per gate (name = the
 * gate, classname = the cell), <failure message="summary"> for FAIL, <error> for ERROR; plus a
 * "receipt" testcase (an <error> when the receipt was not stored), a "gates" failure when no
 * gate ran and a "verdict" failure when the cell is not PASS but no gate row says why.
 * run_error (may be NULL or "") is why the run stopped early: then one more testsuite "gate run"
 * holds a "run" testcase with that <error>, so a run that did not happen never reads as green.
 * res may be NULL (nothing ran). ERR_ENV naming path when it cannot be written. */
int report_run_junit(const char *path, const struct run_result *res, const char *run_error,
                     struct gate_err *err);

/* Every reason release r is blocked (issue 23 §5: each output carries all of them), in this
 * order: kind "store" (the store cannot be believed: a row fails verification, a head names a
 * removed receipt, --expect-head is not in the store; subject "store"), "build" (the checking
 * binary is not a clean build; subject "build"), "row" (a required cell or anchor not PASS, an
 * excluded cell that shows a failure; subject the row name, reason "STATE: reason", identity
 * mismatches included), and, only when r is not ok and none of those applies, "release"
 * (subject "release"). fn is called once per reason (strings valid during the call); returns
 * the number of reasons: 0 exactly when r->ok. */
typedef void (*report_blocker_fn)(void *ctx, const char *kind, const char *subject,
                                  const char *reason);
int report_release_blockers(const struct release_result *r, report_blocker_fn fn, void *ctx);

/* The release as JUnit XML at path (mode 0644): one testsuite "release", one testcase per
 * required cell (classname "cell"), excluded cell ("excluded": <skipped message="excluded:
 * REASON"/> while EXCLUDED, a failure when a failure shows through) and anchor case ("anchor");
 * a row not PASS is a <failure message="STATE (receipt N): REASON"> (<error> for ERROR); every
 * blocker that is not a row (report_release_blockers: store, build, release) is one more
 * testcase of classname "release" with a <failure>, so a blocked release never has
 * failures="0" errors="0". l and r may be NULL when the check could not run: then one testcase
 * "release check" with the <error> check_error; with r, a non-empty check_error (the sign-off
 * failed) is one more <error> testcase "release check". ERR_ENV naming path when it cannot be
 * written. */
int report_release_junit(const char *path, const struct ladder *l, const struct release_result *r,
                         const char *check_error, struct gate_err *err);

/* The release as one JSON document on out (schema "gate.release/1", docs/reports.md): ok,
 * release and ladder identity, the checking build (identity_json), the store, counts (per state
 * too), the store problem, the unanchored architectures, every row of the matrix
 * (cli/report_matrix.h: kind, name, model/host/mode and identity settings or arch, state,
 * blocking receipt id, reason, PASS receipt ids, receipts per kind, exclusion reason,
 * disagreement), "blocked_by" (every report_release_blockers() reason as {kind, subject,
 * reason}; [] exactly when ok) and signoff (NULL: not signed: "signoff": null). Strings that are
 * not valid UTF-8 are written through cli_safe(). Returns 0; ERR_ENV when the matrix cannot be
 * laid (out of memory): the document is then {"schema", "ok": false, "error"}. */
int report_release_json(FILE *out, const struct ladder *l, const char *ladder_path, const char *db,
                        const struct identity *id, const struct release_result *r,
                        const struct json_t *signoff, struct gate_err *err);

/* `gate release check` with the CI outputs (cli/cmd_run.c): release_check_opts(), plus json
 * (the report on out is report_release_json() instead of the text, errors also as
 * {"ok": false, "error": MSG}) and junit (NULL: none; else report_release_junit() at that path,
 * also when the check could not run). The exit code is release_check_opts()'s, except that a
 * JUnit file that cannot be written turns 0 into 3. */
int release_check_report(FILE *out, const struct release_options *o, const struct identity *self,
                         int json, const char *junit);

#endif
