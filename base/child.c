/* child.c — see child.h. The pipes are made close-on-exec, so a second child never inherits the
 * first's; gate's ends turn non-blocking once the child runs; every wait is poll() with a bound.
 * Start reading: child_start(), then child_end().
 */
#include "base/child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHILD_START_GRACE_S 2.0 /* a child that failed before its exec: SIGKILL after this */

/* the default starter's steps, as its report names them (child_start's *step) */
enum { DEFAULT_STEP_FDS = 1, DEFAULT_STEP_EXEC = 2 };

double child_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

void child_init(struct child *c)
{
    memset(c, 0, sizeof *c);
    c->in_fd = c->out_fd = c->err_fd = c->status_fd = -1;
}

/* ---- the default starter ----------------------------------------------------------------------
 */

static void __attribute__((noreturn)) report_fail(int report_fd, int step)
{
    int msg[2] = {step, errno};
    ssize_t w = write(report_fd, msg, sizeof msg);
    (void)w;
    _exit(127);
}

/* fork; the child: its own process group, SIGPIPE back to its default, the ends onto 0/1/2
 * (moved above 2 first so no dup2 clobbers another), execve. Async-signal-safe after the fork. */
static pid_t default_start(const struct child_spec *sp, const struct child_ends *e)
{
    const pid_t pid = fork();
    if (pid != 0)
        return pid;
    setpgid(0, 0);
    struct sigaction dfl; /* gate ignores SIGPIPE; an ignored signal stays ignored across exec */
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, NULL);
    int keep[4] = {e->in_fd, e->out_fd, e->err_fd, e->report_fd};
    for (int i = 0; i < 4; i++)
        if (keep[i] >= 0 && keep[i] <= 2) {
            const int d = fcntl(keep[i], F_DUPFD_CLOEXEC, 3);
            if (d < 0)
                report_fail(keep[3], DEFAULT_STEP_FDS);
            keep[i] = d;
        }
    if (dup2(keep[0], 0) < 0 || dup2(keep[1], 1) < 0 || dup2(keep[2], 2) < 0)
        report_fail(keep[3], DEFAULT_STEP_FDS);
    if (sp->envp)
        execve(sp->path, sp->argv, sp->envp);
    else
        execv(sp->path, sp->argv);
    report_fail(keep[3], DEFAULT_STEP_EXEC);
}

/* ---- starting ---------------------------------------------------------------------------------
 */

static void set_nonblock(int fd)
{
    if (fd >= 0)
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int child_start(struct child *c, const struct child_spec *sp, int *step, int *step_errno)
{
    static int sigpipe_ignored;
    int in[2] = {-1, -1}, out[2] = {-1, -1}, er[2] = {-1, -1}, rep[2] = {-1, -1};
    int stp[2] = {-1, -1}, rc = 0, saved = 0;
    if (step)
        *step = 0;
    if (step_errno)
        *step_errno = 0;
    if (!sigpipe_ignored) {
        /* a write to a child that died is EPIPE here, never the end of gate */
        signal(SIGPIPE, SIG_IGN);
        sigpipe_ignored = 1;
    }
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(er, O_CLOEXEC) ||
        pipe2(rep, O_CLOEXEC) || (sp->want_status && pipe2(stp, O_CLOEXEC | O_NONBLOCK))) {
        saved = errno;
        rc = -1;
        goto done;
    }
    const struct child_ends ends = {in[0], out[1], er[1], rep[1], stp[1]};
    const pid_t pid = sp->start ? sp->start(sp->ctx, &ends) : default_start(sp, &ends);
    if (pid < 0) {
        saved = errno;
        rc = -1;
        goto done;
    }
    setpgid(pid, pid); /* also here: no window in which its group does not exist yet */
    c->pid = pid;
    c->spawns++;
    c->tail_len = 0;
    close_fd(&in[0]);
    close_fd(&out[1]);
    close_fd(&er[1]);
    close_fd(&rep[1]);
    close_fd(&stp[1]);
    /* its report: EOF when the exec happened (the pipe is close-on-exec) */
    int msg[2] = {0, 0};
    ssize_t r;
    while ((r = read(rep[0], msg, sizeof msg)) < 0 && errno == EINTR)
        ;
    c->in_fd = in[1];
    c->out_fd = out[0];
    c->err_fd = er[0];
    c->status_fd = stp[0];
    in[1] = out[0] = er[0] = stp[0] = -1;
    if (r == (ssize_t)sizeof msg) {
        char status[160];
        child_end(c, CHILD_START_GRACE_S, status, sizeof status);
        if (step)
            *step = msg[0];
        if (step_errno)
            *step_errno = msg[1];
        rc = 1;
        goto done;
    }
    set_nonblock(c->in_fd);
    set_nonblock(c->out_fd);
    set_nonblock(c->err_fd);
done:
    for (int i = 0; i < 2; i++) {
        close_fd(&in[i]);
        close_fd(&out[i]);
        close_fd(&er[i]);
        close_fd(&rep[i]);
        close_fd(&stp[i]);
    }
    if (rc < 0)
        errno = saved;
    return rc;
}

/* ---- talking ----------------------------------------------------------------------------------
 */

/* Append n bytes to the tail, keeping the last CHILD_TAIL. */
static void tail_add(struct child *c, const char *buf, size_t n)
{
    if (n >= sizeof c->tail) {
        memcpy(c->tail, buf + n - sizeof c->tail, sizeof c->tail);
        c->tail_len = sizeof c->tail;
        return;
    }
    if (c->tail_len + n > sizeof c->tail) {
        const size_t drop = c->tail_len + n - sizeof c->tail;
        memmove(c->tail, c->tail + drop, c->tail_len - drop);
        c->tail_len -= drop;
    }
    memcpy(c->tail + c->tail_len, buf, n);
    c->tail_len += n;
}

void child_drain_stderr(struct child *c)
{
    char buf[4096];
    while (c->err_fd >= 0) {
        ssize_t r = read(c->err_fd, buf, sizeof buf);
        if (r > 0) {
            tail_add(c, buf, (size_t)r);
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            close_fd(&c->err_fd);
        break;
    }
}

size_t child_tail(const struct child *c, size_t n, const char **p)
{
    const size_t keep = c->tail_len < n ? c->tail_len : n;
    *p = c->tail + c->tail_len - keep;
    return keep;
}

int child_poll(struct child *c, int want_write, int timeout_ms, int *readable, int *writable)
{
    struct pollfd pf[3] = {{.fd = c->out_fd, .events = POLLIN},
                           {.fd = c->err_fd, .events = POLLIN},
                           {.fd = want_write ? c->in_fd : -1, .events = POLLOUT}};
    if (readable)
        *readable = 0;
    if (writable)
        *writable = 0;
    const int pr = poll(pf, 3, timeout_ms);
    if (pr < 0)
        return -1;
    if (pf[1].revents)
        child_drain_stderr(c);
    if (readable)
        *readable = pf[0].revents != 0;
    if (writable)
        *writable = pf[2].revents != 0;
    return pf[0].revents || pf[2].revents;
}

long child_read(struct child *c, void *buf, size_t n)
{
    const ssize_t r = read(c->out_fd, buf, n);
    if (r > 0)
        return (long)r;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (r == 0)
        errno = 0;
    return -1;
}

long child_write(struct child *c, const void *buf, size_t n)
{
    const ssize_t w = write(c->in_fd, buf, n);
    if (w >= 0)
        return (long)w;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
}

long child_read_until(struct child *c, void *buf, size_t n, double deadline_s)
{
    for (;;) {
        const double left = deadline_s - child_now();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        int readable = 0;
        const int pr =
            child_poll(c, 0, left > 0.1 ? 100 : (int)(left * 1000.0) + 1, &readable, NULL);
        if (pr < 0 && errno != EINTR)
            return -1;
        if (!readable)
            continue;
        const long r = child_read(c, buf, n);
        if (r > 0)
            return r;
        if (r < 0)
            return errno ? -1 : 0;
    }
}

/* ---- ending -----------------------------------------------------------------------------------
 */

int child_exited(const struct child *c)
{
    if (!c->pid)
        return 0;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    while (waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == EINTR)
        ;
    return si.si_pid == c->pid;
}

void child_close_stdin(struct child *c)
{
    close_fd(&c->in_fd);
}

void child_status_text(pid_t pid, int ws, int signalled, char *out, size_t n)
{
    if (WIFEXITED(ws))
        snprintf(out, n, "the child (pid %d) exited with status %d", (int)pid, WEXITSTATUS(ws));
    else if (WIFSIGNALED(ws) && signalled && signalled == WTERMSIG(ws))
        snprintf(out, n, "the child (pid %d) was stopped by gate with %s", (int)pid,
                 signalled == SIGKILL ? "SIGKILL" : "SIGTERM");
    else if (WIFSIGNALED(ws))
        snprintf(out, n, "the child (pid %d) died of signal %d (%s)", (int)pid, WTERMSIG(ws),
                 strsignal(WTERMSIG(ws)));
    else
        snprintf(out, n, "the child (pid %d) ended (wait status 0x%x)", (int)pid, ws);
}

void child_end(struct child *c, double grace_s, char *status, size_t n)
{
    int ws = 0, signalled = 0;
    child_close_stdin(c);
    if (!c->pid) {
        snprintf(status, n, "no child was running");
        return;
    }
    const pid_t pid = c->pid;
    if (!child_exited(c)) {
        kill(-pid, SIGTERM);
        kill(pid, SIGTERM);
        signalled = SIGTERM;
        const double until = child_now() + grace_s;
        while (!child_exited(c) && child_now() < until) {
            child_drain_stderr(c);
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    if (!child_exited(c)) {
        signalled = SIGKILL;
        kill(pid, SIGKILL);
    }
    kill(-pid, SIGKILL); /* whatever else is in its group */
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    if (c->status_fd >= 0) { /* through an intermediary: how the child itself ended, if it did */
        int es = 0;
        if (read(c->status_fd, &es, sizeof es) == (ssize_t)sizeof es)
            ws = es;
        close_fd(&c->status_fd);
    }
    if (c->reaped)
        c->reaped(c->reaped_ctx, pid);
    child_drain_stderr(c);
    child_status_text(pid, ws, signalled, status, n);
    c->pid = 0;
    close_fd(&c->out_fd);
    close_fd(&c->err_fd);
}
