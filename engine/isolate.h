/* isolate.h — what an external engine's child process may touch, and making sure nothing it
 * started outlives it (docs/exec.md, "Threat model").
 *
 * The exec backend (engine/exec.c) starts an engine gate did not build on the host that holds
 * the signing key. Before the child's execve() it is cut off from everything gate holds:
 *   - a minimal environment (built by exec.c: fixed PATH/LANG/HOME/TMPDIR plus what the ladder
 *     declares), no descriptor but its three protocol pipes (close_range in the child);
 *   - a Linux Landlock domain (unprivileged): read + execute only on the system's library
 *     folders, the engine binary, the pinned model and files the ladder names; read-write only on
 *     a private scratch folder and the devices the ladder names; no TCP (ABI >= 4); no signals or
 *     abstract sockets outside the domain (ABI >= 6);
 *   - its own process group, and gate a child subreaper (PR_SET_CHILD_SUBREAPER) that is not
 *     dumpable (PR_SET_DUMPABLE 0): a double-forked grandchild reparents to gate and is killed and
 *     reaped by isolate_sweep() when the cell ends.
 * The ruleset is built in gate (isolate_prepare); the child only calls async-signal-safe code
 * between fork and execve (isolate_child_exec).
 * Start reading: isolate_landlock_abi(), then isolate_prepare() and isolate_child_exec().
 */
#ifndef GATE_ISOLATE_H
#define GATE_ISOLATE_H

#include <stddef.h>
#include <sys/types.h>

#include "base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The Landlock ABI this host offers: >= 1 when filesystem isolation works, 0 when it does not
 * (why: a sentence in why, n bytes). GATE_TEST_NO_LANDLOCK=1 in gate's environment makes it 0
 * (for tests of the refusal; it can only remove isolation, never grant anything). */
int isolate_landlock_abi(char *why, size_t n);

/* What the child may touch. Lists are NULL-terminated (NULL for none); paths absolute. */
struct isolate_spec {
    const char *exe;         /* the engine binary: read + execute */
    const char *const *read; /* read-only files or folders (model, pinned files, `allow:`) */
    const char *const *rw;   /* read-write files or folders (`devices:`) */
    const char *scratch;     /* the private scratch folder: everything */
};

/* Build a Landlock ruleset for sp (plus the fixed system set: /usr, /lib*, /bin, /sbin, the
 * loader's /etc/ld.so.* files, /proc read-only, /sys/devices/system/{cpu,node}, /dev/null,
 * /dev/zero, /dev/{u,}random) at ABI abi (>= 1). *fd receives the ruleset descriptor
 * (close-on-exec; the caller closes it after the child started). A path of sp that does not
 * exist is ERR_INPUT naming it; system paths that do not exist are skipped. */
int isolate_prepare(const struct isolate_spec *sp, int abi, int *fd, struct gate_err *err);

/* In the forked child, before anything else; never returns. Only async-signal-safe calls: a new
 * process group, default signals and an empty mask, fds in[0]/out[1]/er[1] onto 0/1/2, every
 * other descriptor closed except report_fd (close-on-exec), PR_SET_PDEATHSIG SIGKILL, no new
 * privileges, the Landlock domain (ruleset_fd >= 0), then execve(path, argv, envp). On a failure
 * it writes {step, errno} (two ints) to report_fd and _exit(127)s. */
void isolate_child_exec(int in_fd, int out_fd, int err_fd, int report_fd, int ruleset_fd,
                        const char *path, char *const argv[], char *const envp[])
    __attribute__((noreturn));

/* The step names of isolate_child_exec's report ("setting up its descriptors", ...). */
const char *isolate_step_name(int step);

/* Make gate a child subreaper and not dumpable (once per process; later calls do nothing). */
void isolate_guard_self(void);

/* A live engine child of gate (never swept) — register while it runs, unregister when reaped. */
void isolate_register(pid_t pid);
void isolate_unregister(pid_t pid);

/* Kill (SIGKILL) and reap every child of gate that is not a registered engine child: the
 * orphans an engine left (reparented to gate, its subreaper), generation after generation until
 * none is left (bounded rounds). Returns how many were killed. */
int isolate_sweep(void);

/* Resolve prog the way execvp would with the child's PATH (path_env, ':'-separated; NULL: the
 * fixed default): a name containing '/' is taken as given; otherwise the first executable
 * regular file PATH names. 0 and out (n bytes) on success; -1 (ENOENT) when none. */
int isolate_resolve(const char *prog, const char *path_env, char *out, size_t n);

/* The child's PATH when the ladder does not set one. */
#define ISOLATE_DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

/* Make a private scratch folder (mode 0700) under $TMPDIR or /tmp into out (n bytes); 0 ok. */
int isolate_scratch_new(char *out, size_t n, struct gate_err *err);

/* Remove the scratch folder and everything in it (symlinks are removed, never followed). */
void isolate_scratch_free(const char *dir);

#ifdef __cplusplus
}
#endif
#endif
