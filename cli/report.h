/* report.h — how `gate run` and `gate release check` draw what the core returns: the live
 * progress of a run (per-gate lines, and on a terminal a ticker with the elapsed time and an
 * estimate), the run's table or JSON, the release matrix, the blocking rows and the sign-off
 * lines. The core (harness/run.h) returns data and statuses; this layer prints, and the commands
 * (cli/cmd_run.c) map statuses to exit codes. Every string that can come from a receipt or a
 * ladder goes through cli_safe() here, at print time.
 * Start reading: report_run_progress(), then report_release().
 */
#ifndef GATE_REPORT_H
#define GATE_REPORT_H

#include <stdio.h>

#include "harness/run.h"

struct identity;
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

/* The release check's report to out: header (ladder_path, db as given), counts, the matrix,
 * unanchored and excluded notes, warnings, and RELEASE OK or RELEASE BLOCKED with every blocking
 * row naming its receipt. */
void report_release(FILE *out, const struct ladder *l, const char *ladder_path, const char *db,
                    const struct identity *id, const struct release_result *r);

#endif
