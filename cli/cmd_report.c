/* cmd_report.c — `gate report LADDER --db DB -o report.html`: argument parsing and exit codes
 * for the HTML release report (issue 13). The page is cli/report_html.c's; the judgement is
 * release_evaluate()'s, the same one `gate release check` prints, so the page, the text report
 * and the exit code cannot disagree.
 * Start reading: cmd_report().
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/report_html.h"

static const char REPORT_USAGE[] =
    "usage: gate report LADDER.yaml [--db receipts.db] [--expect-head HASH] [-o report.html]\n"
    "  Writes the release as one self-contained HTML page (no script, nothing fetched):\n"
    "  a red banner when the store is TAMPERED, the release matrix (model x host x mode, a colour\n"
    "  per state, excluded cells with their reason, anchor cases), the build and ladder\n"
    "  identity, and per cell the deciding receipt's gates with their numbers and thresholds:\n"
    "  parity plotted per position (cosine, KL, thresholds, tie flips) with its localization,\n"
    "  golden tokens side by side, throughput runs and spread, falsify witnesses and detection\n"
    "  rates. The store is verified and judged as `gate release check` does (read-only).\n"
    "  -o, --out  the page (default report.html), written atomically\n"
    "  --expect-head HASH  a chain head (from a CI log) that must still be in the store, as\n"
    "             `gate release check --expect-head`: when it is not, the store is TAMPERED\n"
    "  Exit 0 when the page was written and the release is OK, 1 when it was written and the\n"
    "  release is blocked, 2 for usage or input errors (ladder, missing store), 3 for\n"
    "  environment errors (unreadable store, page not writable).\n";

int cmd_report(int argc, char **argv)
{
    const char *ladder = NULL, *db = "receipts.db", *out = "report.html", *head = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(REPORT_USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--db")) {
            if (cli_value(argc, argv, &i, &db))
                return 2;
        } else if (!strcmp(argv[i], "--expect-head")) {
            if (cli_value(argc, argv, &i, &head))
                return 2;
        } else if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--out")) {
            if (cli_value(argc, argv, &i, &out))
                return 2;
        } else if (argv[i][0] == '-' || ladder) {
            fputs(REPORT_USAGE, stderr);
            return cli_fail(2, "report: unexpected argument '%s'", argv[i]);
        } else {
            ladder = argv[i];
        }
    }
    if (!ladder) {
        fputs(REPORT_USAGE, stderr);
        return 2;
    }
    struct gate_err err = {0};
    int ok = 0;
    int rc = report_html_check(ladder, db, head, out, NULL, stderr, &ok, &err);
    if (rc)
        return cli_fail(err_exit_code(rc), "%s", err.msg);
    char safe_out[1024];
    printf("report written to %s: RELEASE %s\n", cli_safe(out, safe_out, sizeof safe_out),
           ok ? "OK" : "BLOCKED");
    return ok ? 0 : 1;
}
