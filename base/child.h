/* child.h — a child process and its three pipes, like git's run-command: start it, talk to it
 * over non-blocking pipes under a deadline, keep the tail of its stderr, end it and say how it
 * ended.
 *
 * child_start() makes the pipes (close-on-exec in gate), hands the child's ends to a starter
 * (the default forks, puts the child in its own process group, moves the ends onto 0/1/2 and
 * execs; engine/exec.c's starter is isolate_spawn, the sandbox and PID namespace) and reads the
 * report pipe: EOF there means the exec happened, two ints {step, errno} mean a step failed, and
 * the child is then ended and reaped. child_end() closes stdin, sends SIGTERM to the child's
 * process group, SIGKILL after the grace period, kills whatever else is in the group while the
 * pid still holds it, always reaps, and writes how it ended ("exited with status 3", "was
 * stopped by gate with SIGKILL", "died of signal 11 (...)"). A child started through an
 * intermediary (a PID namespace's init) may report the real wait status on the status pipe.
 * Invariants: c->pid != 0 exactly while a child is alive or unreaped (its pid, and so its
 * process group, stay ours until waitpid); gate's ends are non-blocking once started; SIGPIPE is
 * ignored once a child has been started (a write to a dead child is EPIPE, not the end of gate).
 * The protocol spoken over the pipes is the caller's (engine/exec.c: gate-exec frames).
 * Start reading: child_start(), then child_end().
 */
#ifndef GATE_CHILD_H
#define GATE_CHILD_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHILD_TAIL 4096 /* bytes of the child's stderr kept for messages */

/* The child's ends of its pipes, as a starter receives them: in_fd, out_fd, err_fd become its
 * 0, 1, 2; report_fd is where a step that fails before the exec writes {step, errno} (two ints)
 * (close-on-exec: EOF means the exec happened); status_fd, when asked for (-1 otherwise), is
 * where an intermediary process writes the real wait status (an int) of the child it ran. */
struct child_ends {
    int in_fd, out_fd, err_fd, report_fd, status_fd;
};

/* Makes the process: its pid (> 0, the process gate holds and reaps), or -1 with errno. Only
 * async-signal-safe code may run in the new process before its exec. */
typedef pid_t (*child_starter_fn)(void *ctx, const struct child_ends *ends);

struct child_spec {
    /* the default starter's exec: execve(path, argv, envp) (envp NULL: gate's environment) */
    const char *path;
    char *const *argv, *const *envp;
    child_starter_fn start; /* NULL: the default (fork, own process group, execve) */
    void *ctx;              /* start's */
    int want_status;        /* 1: make the status pipe (ends.status_fd) */
};

struct child {
    pid_t pid;                 /* 0: no child */
    int in_fd, out_fd, err_fd; /* gate's ends (non-blocking); -1 when closed */
    int status_fd;             /* the status pipe's read end; -1: none */
    char tail[CHILD_TAIL];     /* the last bytes of the child's stderr */
    size_t tail_len;
    int spawns; /* children started by child_start through this struct */
    /* called by child_end right after the child is reaped, before the rest of its stderr is
     * read (engine/exec.c: unregister it and sweep its orphans); NULL: nothing */
    void (*reaped)(void *ctx, pid_t pid);
    void *reaped_ctx;
};

/* An empty child: no pid, every descriptor -1, no tail. */
void child_init(struct child *c);

/* Start sp's process (c must have no child). 0: started, c->pid set, the tail emptied. -1: no
 * process could be made (pipes or the starter failed), errno says why, nothing left open. 1: the
 * process reported a failing step before its exec: *step and *step_errno (may be NULL) receive
 * its report, and the process has been ended and reaped (c->pid 0). */
int child_start(struct child *c, const struct child_spec *sp, int *step, int *step_errno);

/* Wait at most timeout_ms (0: just look) for the child's stdout to be readable or, when
 * want_write, its stdin to take bytes; what stderr holds meanwhile goes to the tail. *readable /
 * *writable (may be NULL) receive what is ready (stdout's EOF and errors count as readable).
 * Returns 1 when something is ready, 0 at the timeout, -1 with errno (EINTR included). */
int child_poll(struct child *c, int want_write, int timeout_ms, int *readable, int *writable);

/* Read at most n bytes of the child's stdout without blocking: the count (> 0), 0 when nothing is
 * there now, -1 at EOF (errno 0) or on an error (errno). */
long child_read(struct child *c, void *buf, size_t n);

/* Write at most n bytes to the child's stdin without blocking: the count (0 when the pipe is
 * full now), -1 on an error (errno: EPIPE when the child closed its stdin). */
long child_write(struct child *c, const void *buf, size_t n);

/* Read at least one byte (at most n) of stdout by deadline_s (child_now() seconds): the count,
 * 0 at EOF, -1 at the deadline (errno ETIMEDOUT) or on an error (errno). */
long child_read_until(struct child *c, void *buf, size_t n, double deadline_s);

/* Append what stderr holds now to the tail (non-blocking); closes it at EOF. */
void child_drain_stderr(struct child *c);

/* The last up to n bytes of the tail: *p points into c->tail; returns the count. */
size_t child_tail(const struct child *c, size_t n, const char **p);

/* 1 when the child has exited (looked at without reaping it), 0 while it runs or when none. */
int child_exited(const struct child *c);

/* Close the child's stdin (it sees EOF). */
void child_close_stdin(struct child *c);

/* End the child: stdin closed; unless it has exited, SIGTERM to its process group and to it,
 * SIGKILL after grace_s; whatever else is in its group killed while its pid holds the group;
 * always reaped (c->reaped called), its stderr drained, every pipe closed. status (n bytes) says
 * how it ended, naming the pid: "the child (pid N) exited with status S", "... was stopped by gate
 * with SIGTERM|SIGKILL", "... died of signal S (NAME)", or "no child was running". */
void child_end(struct child *c, double grace_s, char *status, size_t n);

/* How a wait status ws ended, as child_end words it (signalled: the signal gate sent, 0 none). */
void child_status_text(pid_t pid, int ws, int signalled, char *out, size_t n);

/* Seconds of CLOCK_MONOTONIC: the clock of every deadline here. */
double child_now(void);

#ifdef __cplusplus
}
#endif
#endif
