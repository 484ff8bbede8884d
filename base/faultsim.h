/* faultsim.h — a test hook compiled into every gate binary, off unless $GATE_FAULTSIM asks for
 * it: fail the Nth allocation, the Nth file write or the Nth SQL statement, once, so a test can
 * loop N over a whole command and check that the receipt store survives every failure point
 * (SQLite's test_malloc.c faultsimStep, applied to `gate run` and `gate release check`).
 *
 *   GATE_FAULTSIM=alloc:N    the Nth allocation by SQLite (sqlite3_config SQLITE_CONFIG_MALLOC)
 *                            or jansson (json_set_alloc_funcs) returns NULL
 *   GATE_FAULTSIM=write:N    the Nth xWrite / xSync / xTruncate through SQLite's default VFS
 *                            (wrapped and re-registered as default) returns SQLITE_IOERR_*;
 *                            any other writer that calls faultsim_step(FAULTSIM_WRITE) counts too
 *   GATE_FAULTSIM=sqlite:N   the Nth SQL statement run (SQLITE_TRACE_STMT, triggers included) is
 *                            interrupted (SQLITE_INTERRUPT) by a progress handler that
 *                            sqlite3_auto_extension installs on every connection
 *
 * Invariants: calls are counted only after faultsim_init() armed the hook, only for the armed
 * kind, and exactly one call fails (the Nth). Only the hooks of the armed kind are installed;
 * with the variable unset or empty nothing is installed and gate runs as it always does. At exit
 * one line on stderr says whether the fault fired ("faultsim: alloc #N failed (M calls)") or
 * not ("faultsim: alloc #N not reached (M calls)"), so a loop knows when N is past the end.
 * Start reading: faultsim_init(), then faultsim_step().
 */
#ifndef GATE_FAULTSIM_H
#define GATE_FAULTSIM_H

#include <stdio.h>

#include "base/err.h"

enum faultsim_kind {
    FAULTSIM_OFF = 0,
    FAULTSIM_ALLOC,  /* SQLite and jansson allocations */
    FAULTSIM_WRITE,  /* file writes, syncs, truncations */
    FAULTSIM_SQLITE, /* SQL statement runs */
};

/* Parse a spec "KIND:N" (KIND alloc | write | sqlite, N a decimal integer >= 1) into *kind and
 * *nth. An empty or NULL spec is FAULTSIM_OFF. Errors: ERR_INPUT quoting the spec. */
int faultsim_parse(const char *spec, enum faultsim_kind *kind, long long *nth,
                   struct gate_err *err);

/* Arm the hook: install the kind's hooks (must run before SQLite is first used in the process)
 * and register the exit report. At most once per process; FAULTSIM_OFF installs nothing.
 * Errors: ERR_INPUT a second arming; ERR_ENV SQLite refused a hook (already initialized). */
int faultsim_arm(enum faultsim_kind kind, long long nth, struct gate_err *err);

/* Read $GATE_FAULTSIM once and arm it; for main(), before anything else runs. Returns 0 when
 * the variable is unset, empty or armed; otherwise prints the reason on stderr and returns the
 * exit code 2 (a mistyped test hook must be loud, never a silently unfaulted run). */
int faultsim_init(void);

/* Count one call of kind; returns 1 when this call must fail (it is the Nth since arming), else
 * 0. Thread-safe. Calls of a kind other than the armed one return 0 and count nothing. */
int faultsim_step(enum faultsim_kind kind);

/* Write the report line ("faultsim: KIND #N failed|not reached (M calls)") to out; nothing
 * when the hook is not armed. faultsim_arm() registers this for stderr at exit. */
void faultsim_report(FILE *out);

/* Install the counting jansson allocator (main does it in every process), and the number of
 * jansson allocations that failed so far: a payload built while one failed may be missing keys
 * and must not be signed. */
void faultsim_json_guard(void);
long long faultsim_json_failures(void);

#endif
