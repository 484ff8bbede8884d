/* err.h — the caller-owned error record every fallible function fills.
 *
 * Invariant: the first error wins. A function that fails calls err_set() once with a human
 * sentence naming what failed and where (file, byte offset, tensor or key name); callers up the
 * stack may add context only when the record is still empty. Status codes are negative.
 * Start reading: err_set().
 */
#ifndef GATE_ERR_H
#define GATE_ERR_H

#ifdef __cplusplus
extern "C" {
#endif

enum err_code {
    ERR_OK = 0,
    ERR_INPUT = -1,   /* bad file, bad argument, malformed data: exit 2 */
    ERR_RUNTIME = -2, /* a judged or runtime failure: exit 1 */
    ERR_ENV = -3,     /* environment: no device, disk full, out of memory: exit 3 */
};

struct gate_err {
    int code;       /* 0 while empty, else an enum err_code */
    char msg[1024]; /* NUL-terminated sentence */
};

/* Record an error unless one is already recorded. Returns code, so callers can write
 * `return err_set(err, ERR_INPUT, "...")`. err may be NULL (the error is then dropped). */
int err_set(struct gate_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clear the record. */
void err_clear(struct gate_err *err);

/* Map a status to the process exit code of DESIGN.md settled question 6. */
int err_exit_code(int code);

#ifdef __cplusplus
}
#endif
#endif
