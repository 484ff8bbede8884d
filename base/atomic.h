/* atomic.h — write a file so that readers see the old content or the whole new one, never a part.
 *
 * The one writer behind every file gate produces (GGUF models, public keys, receipt exports,
 * goldens, eval logits). atomic_open creates an unpredictable temp file next to the target
 * ("PATH.tmp.XXXXXX", mkostemp: O_CREAT | O_EXCL, O_CLOEXEC, mode 0600), so a symlink planted
 * in the folder is never followed and the final rename stays on one file system. atomic_commit
 * fsyncs, sets the mode, renames over the target and fsyncs the folder; atomic_abort removes the
 * temp file.
 *
 * Interrupted writes leave nothing: while a file is open, a SIGINT or SIGTERM handler (installed
 * on the first open, removed after the last commit or abort) unlinks every registered temp file
 * using only async-signal-safe calls, restores the previous disposition and re-raises, so the
 * process still ends as the signal says. A signal the process ignored (SIG_IGN) stays ignored.
 *
 * Errors name the user's path, never the temp name. Start reading: atomic_open().
 */
#ifndef GATE_ATOMIC_H
#define GATE_ATOMIC_H

#include <stdio.h>
#include <sys/types.h>

#include "base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* At most this many atomic files may be open at once in one process (each is a slot the signal
 * handler reads); the next open is an ERR_ENV. */
#define ATOMIC_MAX_OPEN 32

/* One file being written. A zeroed struct is "not open": atomic_abort on it does nothing. */
struct atomic_file {
    int fd;           /* the temp file, for writers that write themselves (e.g. write(2)) */
    FILE *f;          /* set by atomic_stream; owns fd from then on */
    const char *path; /* borrowed from the caller until atomic_commit/atomic_abort returns */
    mode_t mode;      /* the final file's permission bits, set exactly (umask not applied) */
    int slot;         /* signal-cleanup slot */
    int live;         /* 1 between a successful atomic_open and commit/abort */
};

/* Create a temp file next to path (same folder) and register it for removal on SIGINT/SIGTERM.
 * mode: the permission bits the committed file gets (fchmod at commit; the temp is 0600 until
 * then). path must stay valid until commit/abort. Errors: ERR_INPUT (path too long), ERR_ENV
 * (the folder is missing or not writable, too many open atomic files). On error a is not open. */
int atomic_open(struct atomic_file *a, const char *path, mode_t mode, struct gate_err *err);

/* Append n bytes of data (retries short writes and EINTR). Errors: ERR_ENV naming path (disk
 * full, I/O error). The file stays open: the caller still commits or aborts. */
int atomic_write(struct atomic_file *a, const void *data, size_t n, struct gate_err *err);

/* A stdio stream over the temp file, for writers that print. Owned by a: never fclose it;
 * commit flushes and closes it. Returns NULL with ERR_ENV set when fdopen fails. */
FILE *atomic_stream(struct atomic_file *a, struct gate_err *err);

/* Flush, fsync, set the mode, close, rename over path, fsync the folder (best effort: the file
 * is complete either way), unregister. On any failure the temp file is removed. Either way a is
 * no longer open afterwards. Errors: ERR_ENV naming path. */
int atomic_commit(struct atomic_file *a, struct gate_err *err);

/* Close and remove the temp file, unregister. Does nothing on a zeroed, committed or aborted a,
 * so it belongs in every cleanup label. */
void atomic_abort(struct atomic_file *a);

#ifdef __cplusplus
}
#endif
#endif
