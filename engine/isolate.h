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
 *   - its own PID namespace whose init is gate's code (isolate_spawn): when the engine ends, is
 *     killed, or gate dies, the kernel kills everything the engine started (a double-forked,
 *     setsid'd grandchild that ignores SIGTERM included); where no namespace can be made, its own
 *     process group and gate a child subreaper (PR_SET_CHILD_SUBREAPER): orphans reparent to gate
 *     and isolate_sweep() kills and reaps them when the cell ends. gate is not dumpable
 *     (PR_SET_DUMPABLE 0) in both.
 * The ruleset is built in gate (isolate_prepare); the child only calls async-signal-safe code
 * between fork and execve (isolate_spawn).
 * Start reading: isolate_landlock_abi(), then isolate_prepare() and isolate_spawn().
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

/* What the engine's child is given: its ends of the protocol pipes (stdin, stdout, stderr), the
 * report pipe's write end, the Landlock ruleset (-1: none), and what it executes. */
struct isolate_child {
    int in_fd, out_fd, err_fd, report_fd, ruleset_fd;
    const char *path;
    char *const *argv, *const *envp;
};

/* Start the engine; returns the pid gate holds (> 0), or -1 with errno when no child could be
 * made. how (n bytes) says how its descendants are contained:
 *   - "pid namespace": the pid is gate's own init of a new PID namespace (CLONE_NEWPID; inside an
 *     unprivileged user namespace with identity uid/gid maps when gate lacks CAP_SYS_ADMIN). The
 *     init dies with gate (PR_SET_PDEATHSIG), forks the engine, reaps every orphan in the
 *     namespace, and when the engine ends writes its wait status (an int) to status_fd and exits:
 *     the kernel then kills everything left in the namespace, whatever session, group or signal
 *     mask it chose. Killing the pid (SIGKILL) or gate dying has the same effect.
 *   - "subreaper sweep (...)" when no namespace can be made (or GATE_TEST_PIDNS=none): a plain
 *     fork, the engine is the pid; orphans reparent to gate and isolate_sweep() kills them
 *     (nothing survives a cell gate ends, but what an engine started survives a gate that is
 *     killed itself; docs/exec.md, "Threat model").
 * The engine itself, in both: its own process group (the init's group in a namespace), default
 * signals and an empty mask, fds in/out/err onto 0/1/2, every other descriptor closed at execve
 * (the report pipe's too: EOF there means execve succeeded), PR_SET_PDEATHSIG SIGKILL, no
 * capabilities, no new privileges, the Landlock domain, then execve(path, argv, envp). A failing
 * step writes {step, errno} (two ints) to report_fd and exits 127. Only async-signal-safe code
 * runs between the fork and execve. GATE_TEST_PIDNS=userns skips the plain CLONE_NEWPID attempt
 * (tests of the user namespace path) and GATE_TEST_PIDNS=none makes no namespace (tests of the
 * fallback); like GATE_TEST_NO_LANDLOCK they can only remove containment, never grant anything. */
pid_t isolate_spawn(const struct isolate_child *c, int status_fd, char *how, size_t n);

/* The step names of isolate_spawn's report ("setting up its descriptors", ...). */
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

/* Reap, without waiting, every child of gate that has exited and is not a registered engine
 * child (the orphans an engine left that exited: under the subreaper fallback they would pile up
 * as gate's zombies while the cell runs; in a PID namespace its init reaps them). Stops at a
 * registered child's exit, which is end_child's to collect. Returns how many were reaped. */
int isolate_reap_orphans(void);

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
