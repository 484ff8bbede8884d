/* isolate.c — the external engine's sandbox: Landlock rules, the child's side of fork/execve,
 * gate as subreaper, and the sweep of what an engine left behind (engine/isolate.h).
 *
 * Landlock is spoken through syscall() with the kernel's stable ABI values written out here
 * (LL_*), so a build against older kernel headers still offers every ABI the running kernel has.
 * Invariants: the child runs only async-signal-safe code between fork() and execve() (gate may
 * hold locks in other threads); a ruleset is built in gate and only entered by the child; gate's
 * registered engine children are never swept, every other child of gate is an orphan an engine
 * left (gate starts no other child processes).
 * Start reading: isolate_prepare(), isolate_spawn() (ns_init, engine_exec), isolate_sweep().
 */
#include "engine/isolate.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- Landlock's ABI (include/uapi/linux/landlock.h; stable values) ----------------------------
 */

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif
#ifndef SYS_landlock_add_rule
#define SYS_landlock_add_rule 445
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#define CLOSE_RANGE_CLOEXEC_BIT (1u << 2)
/* SECBIT_NOROOT | SECBIT_NO_SETUID_FIXUP | SECBIT_NO_CAP_AMBIENT_RAISE, each with its lock
 * (linux/securebits.h): execve as uid 0 grants no capabilities */
#define SECBITS_LOCKED_NOROOT                                                                      \
    ((1u << 0) | (1u << 1) | (1u << 2) | (1u << 3) | (1u << 6) | (1u << 7))

#define LL_CREATE_RULESET_VERSION (1u << 0)
#define LL_RULE_PATH_BENEATH 1
#define LL_FS_EXECUTE (1ull << 0)
#define LL_FS_WRITE_FILE (1ull << 1)
#define LL_FS_READ_FILE (1ull << 2)
#define LL_FS_READ_DIR (1ull << 3)
#define LL_FS_TRUNCATE (1ull << 14)        /* ABI 3 */
#define LL_FS_IOCTL_DEV (1ull << 15)       /* ABI 5 */
#define LL_NET_BIND_TCP (1ull << 0)        /* ABI 4 */
#define LL_NET_CONNECT_TCP (1ull << 1)     /* ABI 4 */
#define LL_SCOPE_ABSTRACT_UNIX (1ull << 0) /* ABI 6 */
#define LL_SCOPE_SIGNAL (1ull << 1)        /* ABI 6 */

struct ll_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

struct ll_path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

/* Every filesystem right the ABI knows: bits 0..12 (ABI 1), REFER 13 (2), TRUNCATE 14 (3),
 * IOCTL_DEV 15 (5). */
static uint64_t fs_rights(int abi)
{
    uint64_t r = (1ull << 13) - 1;
    if (abi >= 2)
        r |= 1ull << 13;
    if (abi >= 3)
        r |= LL_FS_TRUNCATE;
    if (abi >= 5)
        r |= LL_FS_IOCTL_DEV;
    return r;
}

/* The rights that may be granted on a file (not a folder). */
#define LL_FILE_RIGHTS                                                                             \
    (LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV)

int isolate_landlock_abi(char *why, size_t n)
{
    const char *t = getenv("GATE_TEST_NO_LANDLOCK");
    if (t && !strcmp(t, "1")) {
        snprintf(why, n, "GATE_TEST_NO_LANDLOCK=1 simulates a kernel without Landlock (testing)");
        return 0;
    }
    long v = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
    if (v >= 1) {
        snprintf(why, n, "Landlock ABI %ld", v);
        return (int)v;
    }
    snprintf(why, n, "Landlock is not available on this kernel (%s)",
             errno == ENOSYS       ? "ENOSYS: not built in"
             : errno == EOPNOTSUPP ? "EOPNOTSUPP: built in but not enabled at boot"
                                   : strerror(errno));
    return 0;
}

/* Allow `rights` beneath path (a folder) or on it (a file: only file rights). Missing: skipped
 * when optional, else ERR_INPUT. */
static int add_path(int rfd, int abi, const char *path, uint64_t rights, int optional,
                    struct gate_err *err)
{
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) {
        if (optional)
            return 0;
        return err_set(err, ERR_INPUT, "cannot give the engine '%s': %s", path, strerror(errno));
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st)) {
        rc = err_set(err, ERR_ENV, "cannot stat '%s': %s", path, strerror(errno));
        goto out;
    }
    rights &= fs_rights(abi);
    if (!S_ISDIR(st.st_mode))
        rights &= LL_FILE_RIGHTS;
    struct ll_path_beneath_attr pb = {.allowed_access = rights, .parent_fd = fd};
    if (rights && syscall(SYS_landlock_add_rule, rfd, LL_RULE_PATH_BENEATH, &pb, 0))
        rc = err_set(err, ERR_ENV, "Landlock refused a rule for '%s': %s", path, strerror(errno));
out:
    close(fd);
    return rc;
}

int isolate_prepare(const struct isolate_spec *sp, int abi, int *fd, struct gate_err *err)
{
    *fd = -1;
    const uint64_t RX = LL_FS_READ_FILE | LL_FS_READ_DIR | LL_FS_EXECUTE;
    const uint64_t RO = LL_FS_READ_FILE | LL_FS_READ_DIR;
    const uint64_t RW = RO | LL_FS_WRITE_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV;
    static const char *const SYS_RX[] = {"/usr",    "/lib", "/lib64", "/lib32",
                                         "/libx32", "/bin", "/sbin",  NULL};
    static const char *const SYS_RO[] = {"/etc/ld.so.cache",
                                         "/etc/ld.so.conf",
                                         "/etc/ld.so.conf.d",
                                         "/etc/ld.so.preload",
                                         "/proc",
                                         "/sys/devices/system/cpu",
                                         "/sys/devices/system/node",
                                         "/dev/zero",
                                         "/dev/urandom",
                                         "/dev/random",
                                         NULL};
    struct ll_ruleset_attr ra = {.handled_access_fs = fs_rights(abi)};
    size_t size = sizeof ra.handled_access_fs;
    if (abi >= 4) {
        ra.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP; /* no rule: no TCP */
        size = 2 * sizeof(uint64_t);
    }
    if (abi >= 6) {
        ra.scoped = LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL;
        size = sizeof ra;
    }
    long r = syscall(SYS_landlock_create_ruleset, &ra, size, 0);
    if (r < 0)
        return err_set(err, ERR_ENV, "cannot create a Landlock ruleset (ABI %d): %s", abi,
                       strerror(errno));
    const int rfd = (int)r;
    fcntl(rfd, F_SETFD, FD_CLOEXEC);
    int rc = 0;
    for (int i = 0; !rc && SYS_RX[i]; i++)
        rc = add_path(rfd, abi, SYS_RX[i], RX, 1, err);
    for (int i = 0; !rc && SYS_RO[i]; i++)
        rc = add_path(rfd, abi, SYS_RO[i], RO, 1, err);
    if (!rc)
        rc = add_path(rfd, abi, "/dev/null", RO | LL_FS_WRITE_FILE, 1, err);
    if (!rc && sp->exe)
        rc = add_path(rfd, abi, sp->exe, LL_FS_READ_FILE | LL_FS_EXECUTE, 0, err);
    for (int i = 0; !rc && sp->read && sp->read[i]; i++)
        rc = add_path(rfd, abi, sp->read[i], RO, 0, err);
    for (int i = 0; !rc && sp->rw && sp->rw[i]; i++)
        rc = add_path(rfd, abi, sp->rw[i], RW, 0, err);
    if (!rc && sp->scratch)
        rc = add_path(rfd, abi, sp->scratch, fs_rights(abi), 0, err);
    if (rc) {
        close(rfd);
        return rc;
    }
    *fd = rfd;
    return 0;
}

/* ---- the child, between fork() and execve(): async-signal-safe only -------------------------- */

enum {
    STEP_FDS = 1,
    STEP_SIGNALS,
    STEP_PDEATH,
    STEP_CAPS,
    STEP_NO_NEW_PRIVS,
    STEP_LANDLOCK,
    STEP_EXEC,
    STEP_USERNS,
    STEP_FORK,
};

const char *isolate_step_name(int step)
{
    switch (step) {
    case STEP_FDS:
        return "setting up its descriptors";
    case STEP_SIGNALS:
        return "resetting its signals";
    case STEP_PDEATH:
        return "arming PR_SET_PDEATHSIG";
    case STEP_CAPS:
        return "dropping its capabilities";
    case STEP_NO_NEW_PRIVS:
        return "PR_SET_NO_NEW_PRIVS";
    case STEP_LANDLOCK:
        return "entering its Landlock domain";
    case STEP_EXEC:
        return "execve";
    case STEP_USERNS:
        return "mapping its user namespace";
    case STEP_FORK:
        return "forking the engine inside its PID namespace";
    default:
        return "an unknown step";
    }
}

static void __attribute__((noreturn)) child_fail(int report_fd, int step)
{
    int msg[2] = {step, errno};
    ssize_t w = write(report_fd, msg, sizeof msg);
    (void)w;
    _exit(127);
}

/* Every signal to its default action, none blocked (gate's handlers, e.g. the atomic writer's
 * temp-file cleanup, must never run in a child). */
static int reset_signals(void)
{
    sigset_t none;
    sigemptyset(&none);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < 65; s++)
        if (s != SIGKILL && s != SIGSTOP)
            sigaction(s, &dfl, NULL);
    return sigprocmask(SIG_SETMASK, &none, NULL);
}

/* The engine's side: own_group 1 makes it a process group of its own (plain fork); 0 keeps it
 * in its PID namespace init's group (gate signals that group). */
static void __attribute__((noreturn)) engine_exec(const struct isolate_child *c, int own_group)
{
    int in_fd = c->in_fd, out_fd = c->out_fd, err_fd = c->err_fd, report_fd = c->report_fd;
    int ruleset_fd = c->ruleset_fd;
    const char *path = c->path;
    char *const *argv = c->argv, *const *envp = c->envp;
    /* its own process group: gate ends the engine's group, not just the engine */
    if (own_group)
        setpgid(0, 0);
    /* move every descriptor we keep above 2 first, so the dup2s below cannot clobber one */
    int keep[5] = {in_fd, out_fd, err_fd, report_fd, ruleset_fd};
    for (int i = 0; i < 5; i++)
        if (keep[i] >= 0 && keep[i] <= 2) {
            int d = fcntl(keep[i], F_DUPFD_CLOEXEC, 3);
            if (d < 0)
                child_fail(report_fd, STEP_FDS);
            keep[i] = d;
        }
    report_fd = keep[3];
    ruleset_fd = keep[4];
    if (dup2(keep[0], 0) < 0 || dup2(keep[1], 1) < 0 || dup2(keep[2], 2) < 0)
        child_fail(report_fd, STEP_FDS);
    /* every other descriptor closes at execve (the report and ruleset fds are needed until
     * then); close_range's CLOEXEC flag needs Linux 5.11, else one fcntl per descriptor */
    if (syscall(SYS_close_range, 3, ~0u, CLOSE_RANGE_CLOEXEC_BIT))
        for (int fd = 3; fd < 65536; fd++)
            fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (reset_signals())
        child_fail(report_fd, STEP_SIGNALS);
    /* gate dies -> the engine dies */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0))
        child_fail(report_fd, STEP_PDEATH);
    /* no capabilities, ever (gate may run as root: uid 0 keeps its uid but not its powers, so
     * CAP_SYS_PTRACE / CAP_DAC_OVERRIDE cannot reach past gate's non-dumpable /proc files or
     * Landlock's ptrace scoping); the bounding set and securebits need CAP_SETPCAP, which only a
     * privileged gate has to lose */
    for (int c = 0; c < 64; c++)
        prctl(PR_CAPBSET_DROP, c, 0, 0, 0);
    prctl(PR_SET_SECUREBITS, SECBITS_LOCKED_NOROOT, 0, 0, 0);
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct {
        uint32_t version;
        int pid;
    } hdr = {0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0};
    uint32_t none_caps[6] = {0, 0, 0, 0, 0, 0}; /* effective, permitted, inheritable x 2 */
    if (syscall(SYS_capset, &hdr, none_caps))
        child_fail(report_fd, STEP_CAPS);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
        child_fail(report_fd, STEP_NO_NEW_PRIVS);
    if (ruleset_fd >= 0) {
        if (syscall(SYS_landlock_restrict_self, ruleset_fd, 0))
            child_fail(report_fd, STEP_LANDLOCK);
        close(ruleset_fd);
    }
    execve(path, argv, envp);
    child_fail(report_fd, STEP_EXEC);
}

/* ---- the engine's PID namespace --------------------------------------------------------------
 */

/* fork() as the system call: glibc's fork() runs atfork handlers and takes locks another thread
 * of gate may have held when the namespace's init was cloned. flags: extra clone flags. */
static pid_t raw_clone(unsigned long flags)
{
    return (pid_t)syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, NULL);
}

/* Write text to a /proc file (async-signal-safe); 0 ok. */
static int put_file(const char *path, const char *text, size_t len)
{
    const int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    const ssize_t w = write(fd, text, len);
    close(fd);
    return w == (ssize_t)len ? 0 : -1;
}

/* "ID ID 1\n" into out (at least 40 bytes) without stdio; its length. */
static size_t id_map_line(unsigned id, char *out)
{
    char digits[12];
    int n = 0;
    do
        digits[n++] = (char)('0' + id % 10);
    while ((id /= 10) && n < 11);
    size_t at = 0;
    for (int rep = 0; rep < 2; rep++) {
        for (int i = n - 1; i >= 0; i--)
            out[at++] = digits[i];
        out[at++] = ' ';
    }
    out[at++] = '1';
    out[at++] = '\n';
    return at;
}

/* In a new user namespace: the engine keeps its own uid and gid (one-line identity maps), so
 * files it makes in its scratch folder belong to gate's user. */
static int map_ids(uid_t uid, gid_t gid)
{
    char line[40];
    size_t n = id_map_line((unsigned)uid, line);
    if (put_file("/proc/self/uid_map", line, n))
        return -1;
    if (put_file("/proc/self/setgroups", "deny", 4))
        return -1;
    n = id_map_line((unsigned)gid, line);
    return put_file("/proc/self/gid_map", line, n);
}

/* PID 1 of the engine's namespace: gate's own code (never execs), in gate's process group for
 * the engine (gate signals the group), dies with gate (PR_SET_PDEATHSIG), forks the engine as
 * PID 2, reaps every orphan in the namespace while it runs (an engine cannot fill the pid table
 * with zombies) and, when the engine ends, writes its wait status (an int) to status_fd and
 * exits: the kernel then kills every process left in the namespace. Async-signal-safe only. */
static void __attribute__((noreturn))
ns_init(const struct isolate_child *c, int status_fd, int userns, uid_t uid, gid_t gid)
{
    setpgid(0, 0);
    if (reset_signals())
        child_fail(c->report_fd, STEP_SIGNALS);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0))
        child_fail(c->report_fd, STEP_PDEATH);
    if (userns && map_ids(uid, gid))
        child_fail(c->report_fd, STEP_USERNS);
    const pid_t engine = raw_clone(0);
    if (engine < 0)
        child_fail(c->report_fd, STEP_FORK);
    if (engine == 0) {
        close(status_fd);
        engine_exec(c, 0);
    }
    /* nothing of gate's stays open here but the status pipe (this process never execs, so
     * close-on-exec does not apply): not the protocol pipes, the report pipe, gate's files */
    if (status_fd > 0 && syscall(SYS_close_range, 0, (unsigned)status_fd - 1, 0))
        for (int fd = 0; fd < status_fd; fd++)
            close(fd);
    if (syscall(SYS_close_range, (unsigned)status_fd + 1, ~0u, 0))
        for (int fd = status_fd + 1; fd < 65536; fd++)
            close(fd);
    int ws = 0, st = 0;
    for (;;) {
        const pid_t w = waitpid(-1, &st, 0);
        if (w == engine) {
            ws = st;
            break;
        }
        if (w < 0 && errno != EINTR)
            break;
    }
    ssize_t wr = write(status_fd, &ws, sizeof ws);
    (void)wr;
    _exit(0);
}

pid_t isolate_spawn(const struct isolate_child *c, int status_fd, char *how, size_t n)
{
    const char *t = getenv("GATE_TEST_PIDNS");
    const int no_ns = t && !strcmp(t, "none"), user_only = t && !strcmp(t, "userns");
    int why = 0;
    if (!no_ns) {
        const uid_t uid = geteuid();
        const gid_t gid = getegid();
        int userns = 0;
        pid_t pid = user_only ? (errno = EPERM, -1) : raw_clone(CLONE_NEWPID);
        if (pid < 0 && (errno == EPERM || errno == EINVAL)) {
            userns = 1; /* no CAP_SYS_ADMIN: an unprivileged user namespace holds the PID one */
            pid = raw_clone(CLONE_NEWPID | CLONE_NEWUSER);
        }
        if (pid == 0)
            ns_init(c, status_fd, userns, uid, gid);
        if (pid > 0) {
            snprintf(how, n, "pid namespace%s", userns ? " (in a user namespace)" : "");
            return pid;
        }
        why = errno;
    }
    const pid_t pid = fork();
    if (pid == 0) {
        close(status_fd);
        engine_exec(c, 1);
    }
    if (pid > 0)
        snprintf(how, n, "subreaper sweep (no pid namespace: %s)",
                 no_ns ? "GATE_TEST_PIDNS=none" : strerror(why));
    return pid;
}

/* ---- gate's side: subreaper, registry, sweep ---------------------------------------------------
 */

void isolate_guard_self(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    /* an engine cannot ptrace gate or read its /proc/<pid>/{mem,environ,fd} */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    /* orphans of an engine reparent to gate, which kills and reaps them (isolate_sweep) */
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
}

#define LIVE_MAX 64
static pid_t live[LIVE_MAX];

void isolate_register(pid_t pid)
{
    for (int i = 0; i < LIVE_MAX; i++)
        if (!live[i]) {
            live[i] = pid;
            return;
        }
}

void isolate_unregister(pid_t pid)
{
    for (int i = 0; i < LIVE_MAX; i++)
        if (live[i] == pid)
            live[i] = 0;
}

static int registered(pid_t pid)
{
    for (int i = 0; i < LIVE_MAX; i++)
        if (live[i] == pid)
            return 1;
    return 0;
}

/* The parent pid of process pid from /proc/pid/stat ("pid (comm) S ppid ..."), -1 if gone. */
static pid_t parent_of(const char *pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* comm may hold spaces and ')' */
    int ppid = -1;
    char state;
    if (!p || sscanf(p + 1, " %c %d", &state, &ppid) != 2)
        return -1;
    return (pid_t)ppid;
}

int isolate_sweep(void)
{
    const pid_t self = getpid();
    int killed = 0;
    for (int round = 0; round < 1000; round++) {
        DIR *d = opendir("/proc");
        if (!d)
            break;
        int found = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] < '1' || de->d_name[0] > '9')
                continue;
            const pid_t pid = (pid_t)atoi(de->d_name);
            if (pid == self || registered(pid) || parent_of(de->d_name) != self)
                continue;
            kill(pid, SIGKILL);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
            found++;
        }
        closedir(d);
        killed += found;
        if (!found)
            break; /* the last generation is gone: their children were reparented before */
    }
    return killed;
}

int isolate_reap_orphans(void)
{
    int n = 0;
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid <= 0 ||
            registered(si.si_pid))
            break;
        if (waitpid(si.si_pid, NULL, WNOHANG) != si.si_pid)
            break;
        n++;
    }
    return n;
}

/* ---- paths --------------------------------------------------------------------------------- */

int isolate_resolve(const char *prog, const char *path_env, char *out, size_t n)
{
    if (strchr(prog, '/')) {
        snprintf(out, n, "%s", prog);
        return 0;
    }
    const char *p = path_env ? path_env : ISOLATE_DEFAULT_PATH;
    while (*p) {
        const char *c = strchr(p, ':');
        const size_t len = c ? (size_t)(c - p) : strlen(p);
        char cand[4096];
        if (len > 0 &&
            (size_t)snprintf(cand, sizeof cand, "%.*s/%s", (int)len, p, prog) < sizeof cand) {
            struct stat st;
            if (!stat(cand, &st) && S_ISREG(st.st_mode) && !access(cand, X_OK)) {
                snprintf(out, n, "%s", cand);
                return 0;
            }
        }
        p += len + (c ? 1 : 0);
    }
    errno = ENOENT;
    return -1;
}

int isolate_scratch_new(char *out, size_t n, struct gate_err *err)
{
    const char *t = getenv("TMPDIR");
    snprintf(out, n, "%s/gate-engine-XXXXXX", t && *t == '/' ? t : "/tmp");
    if (!mkdtemp(out))
        return err_set(err, ERR_ENV, "cannot make the engine's scratch folder '%s': %s", out,
                       strerror(errno));
    return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

void isolate_scratch_free(const char *dir)
{
    if (dir && dir[0])
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
