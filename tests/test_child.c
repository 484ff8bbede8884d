/* test_child.c — base/child.h directly: a child started with the default starter echoes what it
 * is sent; a read waits no longer than its deadline; ending a child kills its whole process
 * group, even members that ignore SIGTERM; how a child ended is said in words (exit status,
 * gate's signal, its own signal) with the tail of its stderr; a start that fails before the exec
 * is reported with its step and errno, and nothing is left running. The exec backend's own use
 * (PID namespace, subreaper, isolation) is tests/test_exec.c's.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/child.h"

/* Start argv[0] (an absolute path) with the default starter; asserts it started. */
static void start(struct child *c, char *const *argv)
{
    child_init(c);
    const struct child_spec sp = {.path = argv[0], .argv = argv};
    int step = -1, e = -1;
    cr_assert_eq(child_start(c, &sp, &step, &e), 0, "%s did not start: step %d, %s", argv[0], step,
                 strerror(e));
    cr_assert_gt(c->pid, 0);
}

/* Read stdout until EOF or n-1 bytes, under a generous deadline. */
static size_t read_all(struct child *c, char *buf, size_t n)
{
    size_t got = 0;
    const double deadline = child_now() + 30.0;
    while (got + 1 < n) {
        const long r = child_read_until(c, buf + got, n - 1 - got, deadline);
        cr_assert_geq(r, 0, "reading the child: %s", strerror(errno));
        if (r == 0)
            break;
        got += (size_t)r;
    }
    buf[got] = '\0';
    return got;
}

/* 1 once pid is gone or a zombie nobody of ours holds (waits up to 10 s: no tight timeout). */
static int gone(pid_t pid)
{
    for (int i = 0; i < 1000; i++) {
        char path[64], st[512];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f)
            return 1;
        const size_t n = fread(st, 1, sizeof st - 1, f);
        fclose(f);
        st[n] = '\0';
        const char *p = strrchr(st, ')');
        if (p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'))
            return 1;
        usleep(10 * 1000);
    }
    return 0;
}

Test(child, echoes_what_it_is_sent_then_exits_at_eof)
{
    struct child c;
    char *const argv[] = {"/bin/cat", NULL};
    start(&c, argv);
    const char msg[] = "hello, child\n";
    size_t off = 0;
    while (off < sizeof msg - 1) {
        int w = 0;
        cr_assert_geq(child_poll(&c, 1, 1000, NULL, &w), 0);
        const long n = child_write(&c, msg + off, sizeof msg - 1 - off);
        cr_assert_geq(n, 0, "%s", strerror(errno));
        off += (size_t)n;
    }
    char buf[64];
    size_t got = 0;
    while (got < sizeof msg - 1) {
        const long r = child_read_until(&c, buf + got, sizeof buf - got, child_now() + 30.0);
        cr_assert_gt(r, 0, "the echo did not come back: %s", strerror(errno));
        got += (size_t)r;
    }
    cr_expect_eq(got, sizeof msg - 1);
    cr_expect_eq(memcmp(buf, msg, got), 0, "got '%.*s'", (int)got, buf);
    child_close_stdin(&c);
    cr_expect_eq(read_all(&c, buf, sizeof buf), 0, "cat wrote more after its stdin closed");
    /* its stdout's EOF comes just before its exit: wait for that (child_end would stop a child
     * still running) */
    for (int i = 0; i < 3000 && !child_exited(&c); i++)
        usleep(10 * 1000);
    char status[160];
    child_end(&c, 5.0, status, sizeof status);
    cr_expect(strstr(status, "exited with status 0"), "%s", status);
    cr_expect_eq(c.pid, 0);
    cr_expect_eq(c.in_fd, -1);
    cr_expect_eq(c.out_fd, -1);
    cr_expect_eq(c.err_fd, -1);
    cr_expect_eq(c.spawns, 1);
}

Test(child, a_read_waits_no_longer_than_its_deadline)
{
    struct child c;
    char *const argv[] = {"/bin/sleep", "300", NULL};
    start(&c, argv);
    char buf[8];
    errno = 0;
    cr_expect_eq(child_read_until(&c, buf, sizeof buf, child_now() + 0.2), -1);
    cr_expect_eq(errno, ETIMEDOUT, "%s", strerror(errno));
    const pid_t pid = c.pid;
    char status[160];
    child_end(&c, 5.0, status, sizeof status);
    cr_expect(strstr(status, "was stopped by gate with SIGTERM"), "%s", status);
    cr_expect(gone(pid), "the child %d is still running", (int)pid);
}

/* The child's group: a background member that ignores SIGTERM (as the shell does) and outlives
 * the shell's own death unless the group is killed. */
Test(child, ending_kills_the_whole_process_group)
{
    struct child c;
    char *const argv[] = {"/bin/sh", "-c", "trap '' TERM; sleep 300 & echo $!; wait", NULL};
    start(&c, argv);
    char buf[32];
    size_t got = 0;
    while (!memchr(buf, '\n', got) && got + 1 < sizeof buf) {
        const long r = child_read_until(&c, buf + got, sizeof buf - 1 - got, child_now() + 30.0);
        cr_assert_gt(r, 0, "no pid from the shell: %s", strerror(errno));
        got += (size_t)r;
    }
    buf[got] = '\0';
    const pid_t member = (pid_t)atoi(buf);
    cr_assert_gt(member, 0, "'%s'", buf);
    cr_assert_eq(getpgid(member), c.pid, "the member is not in the child's group");
    char status[160];
    child_end(&c, 0.2, status, sizeof status);
    cr_expect(strstr(status, "was stopped by gate with SIGKILL"), "%s", status);
    cr_expect(gone(member), "the group member %d outlived the child", (int)member);
}

Test(child, how_it_ended_is_said_in_words_with_its_stderr)
{
    struct child c;
    char *const argv[] = {"/bin/sh", "-c", "echo 'something broke' >&2; exit 3", NULL};
    start(&c, argv);
    char buf[16];
    cr_expect_eq(read_all(&c, buf, sizeof buf), 0);
    for (int i = 0; i < 3000 && !child_exited(&c); i++)
        usleep(10 * 1000);
    char status[160];
    child_end(&c, 5.0, status, sizeof status);
    char want[80];
    snprintf(want, sizeof want, "exited with status 3");
    cr_expect(strstr(status, want), "%s", status);
    const char *t;
    const size_t n = child_tail(&c, 200, &t);
    cr_expect(n > 0 && memmem(t, n, "something broke", 15), "tail '%.*s'", (int)n, t);

    char *const seg[] = {"/bin/sh", "-c", "kill -SEGV $$", NULL};
    start(&c, seg);
    cr_expect_eq(read_all(&c, buf, sizeof buf), 0);
    for (int i = 0; i < 3000 && !child_exited(&c); i++)
        usleep(10 * 1000);
    child_end(&c, 5.0, status, sizeof status);
    snprintf(want, sizeof want, "died of signal %d (%s)", SIGSEGV, strsignal(SIGSEGV));
    cr_expect(strstr(status, want), "%s", status);

    /* the words alone, for every kind of wait status */
    char text[160];
    child_status_text(42, 7 << 8, 0, text, sizeof text);
    cr_expect_str_eq(text, "the child (pid 42) exited with status 7");
    child_status_text(42, SIGKILL, SIGKILL, text, sizeof text);
    cr_expect_str_eq(text, "the child (pid 42) was stopped by gate with SIGKILL");
    child_status_text(42, SIGKILL, SIGTERM, text, sizeof text);
    cr_expect(strstr(text, "died of signal 9"), "gate sent SIGTERM, it died of SIGKILL: %s", text);
    child_end(&c, 1.0, text, sizeof text);
    cr_expect_str_eq(text, "no child was running");
}

Test(child, a_failed_exec_is_reported_with_its_step_and_leaves_nothing)
{
    struct child c;
    child_init(&c);
    char *const argv[] = {"/nonexistent/engine", NULL};
    const struct child_spec sp = {.path = argv[0], .argv = argv};
    int step = 0, e = 0;
    cr_expect_eq(child_start(&c, &sp, &step, &e), 1);
    cr_expect_eq(step, 2, "the default starter's exec step");
    cr_expect_eq(e, ENOENT, "%s", strerror(e));
    cr_expect_eq(c.pid, 0, "the failed child was not reaped");
    cr_expect_eq(c.out_fd, -1);
    cr_expect_eq(waitpid(-1, NULL, WNOHANG), -1, "a child is left unreaped");
}

/* A starter with an intermediary (as a PID namespace's init is): the status pipe carries the
 * real child's wait status, which child_end reports instead of the intermediary's. */
static pid_t via_intermediary(void *ctx, const struct child_ends *e)
{
    (void)ctx;
    const pid_t pid = fork();
    if (pid != 0)
        return pid;
    const pid_t inner = fork();
    if (inner == 0) {
        close(e->status_fd);
        dup2(e->in_fd, 0), dup2(e->out_fd, 1), dup2(e->err_fd, 2);
        execl("/bin/sh", "sh", "-c", "exit 5", (char *)NULL);
        _exit(127);
    }
    close(e->report_fd); /* nothing to report: EOF */
    int ws = 0;
    while (waitpid(inner, &ws, 0) < 0 && errno == EINTR)
        ;
    if (write(e->status_fd, &ws, sizeof ws) != (ssize_t)sizeof ws)
        _exit(1);
    _exit(0);
}

Test(child, an_intermediary_reports_the_real_childs_status)
{
    struct child c;
    child_init(&c);
    const struct child_spec sp = {.start = via_intermediary, .want_status = 1};
    cr_assert_eq(child_start(&c, &sp, NULL, NULL), 0, "%s", strerror(errno));
    char buf[8], status[160];
    cr_expect_eq(read_all(&c, buf, sizeof buf), 0);
    for (int i = 0; i < 3000 && !child_exited(&c); i++)
        usleep(10 * 1000);
    child_end(&c, 5.0, status, sizeof status);
    cr_expect(strstr(status, "exited with status 5"), "%s", status);
}
