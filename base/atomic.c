/* atomic.c — see atomic.h.
 *
 * The signal side: a fixed table of slots, each a temp name in static storage and a state
 * (FREE, CLAIMED while the name is being set up or torn down, ARMED while the file may exist).
 * The handler reads only ARMED slots and calls only unlink, sigaction and raise, all
 * async-signal-safe; states are lock-free atomics, so no lock is ever taken inside the handler.
 * Installing and restoring the handler is serialized by a mutex and counted: the first open
 * installs it, the last commit/abort restores the previous dispositions.
 */
#include "base/atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { SLOT_FREE = 0, SLOT_CLAIMED = 1, SLOT_ARMED = 2 };

#define SLOT_PATH_MAX 4096

static char slot_name[ATOMIC_MAX_OPEN][SLOT_PATH_MAX];
static atomic_int slot_state[ATOMIC_MAX_OPEN];

static pthread_mutex_t handler_lock = PTHREAD_MUTEX_INITIALIZER;
static int handler_users;                   /* open atomic files; under handler_lock */
static int handler_on_int, handler_on_term; /* ours is installed for that signal */
static struct sigaction old_int, old_term;  /* what was there before ours */

static void on_signal(int sig)
{
    int saved = errno;
    for (int i = 0; i < ATOMIC_MAX_OPEN; i++)
        if (atomic_load(&slot_state[i]) == SLOT_ARMED)
            unlink(slot_name[i]);
    sigaction(sig, sig == SIGINT ? &old_int : &old_term, NULL);
    /* sig is blocked while this handler runs: the re-raised one is delivered on return, to the
     * previous disposition (the default ends the process by the same signal) */
    raise(sig);
    errno = saved;
}

/* Install ours for sig unless the process ignores sig (then a Ctrl-C must stay harmless and the
 * write must go on). Returns 1 when installed. */
static int install(int sig, struct sigaction *old)
{
    struct sigaction sa, cur;
    if (sigaction(sig, NULL, &cur) != 0 || cur.sa_handler == SIG_IGN)
        return 0;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    return sigaction(sig, &sa, old) == 0;
}

static void handler_retain(void)
{
    pthread_mutex_lock(&handler_lock);
    if (handler_users++ == 0) {
        handler_on_int = install(SIGINT, &old_int);
        handler_on_term = install(SIGTERM, &old_term);
    }
    pthread_mutex_unlock(&handler_lock);
}

static void handler_release(void)
{
    pthread_mutex_lock(&handler_lock);
    if (--handler_users == 0) {
        if (handler_on_int)
            sigaction(SIGINT, &old_int, NULL);
        if (handler_on_term)
            sigaction(SIGTERM, &old_term, NULL);
        handler_on_int = handler_on_term = 0;
    }
    pthread_mutex_unlock(&handler_lock);
}

/* Forget a's temp name: after this the handler no longer touches the slot. */
static void unregister(struct atomic_file *a)
{
    atomic_store(&slot_state[a->slot], SLOT_CLAIMED);
    slot_name[a->slot][0] = '\0';
    atomic_store(&slot_state[a->slot], SLOT_FREE);
    handler_release();
    a->live = 0;
}

int atomic_open(struct atomic_file *a, const char *path, mode_t mode, struct gate_err *err)
{
    memset(a, 0, sizeof *a);
    a->fd = -1;
    if (strlen(path) + sizeof ".tmp.XXXXXX" > SLOT_PATH_MAX)
        return err_set(err, ERR_INPUT, "cannot write '%.100s...': the path is too long", path);
    int slot = -1;
    for (int i = 0; i < ATOMIC_MAX_OPEN && slot < 0; i++) {
        int expect = SLOT_FREE;
        if (atomic_compare_exchange_strong(&slot_state[i], &expect, SLOT_CLAIMED))
            slot = i;
    }
    if (slot < 0)
        return err_set(err, ERR_ENV,
                       "cannot write '%s': more than %d files are being written "
                       "at once",
                       path, ATOMIC_MAX_OPEN);
    snprintf(slot_name[slot], SLOT_PATH_MAX, "%s.tmp.XXXXXX", path);
    handler_retain();
    /* Armed before the file exists, with both signals blocked in this thread until mkostemp has
     * returned: a signal to this thread is then handled with the final name in place, and one
     * taken by another thread meanwhile unlinks at worst a name that does not exist yet. */
    sigset_t block, prev;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &prev);
    atomic_store(&slot_state[slot], SLOT_ARMED);
    int fd = mkostemp(slot_name[slot], O_CLOEXEC); /* O_EXCL, unpredictable name, mode 0600 */
    int e = errno;
    if (fd < 0)
        atomic_store(&slot_state[slot], SLOT_CLAIMED);
    pthread_sigmask(SIG_SETMASK, &prev, NULL);
    a->slot = slot;
    if (fd < 0) {
        a->live = 1;
        unregister(a);
        return err_set(err, ERR_ENV, "cannot create a file next to '%s': %s", path, strerror(e));
    }
    a->fd = fd;
    a->path = path;
    a->mode = mode;
    a->live = 1;
    return 0;
}

int atomic_write(struct atomic_file *a, const void *data, size_t n, struct gate_err *err)
{
    const char *p = data;
    if (!a->live)
        return err_set(err, ERR_ENV, "cannot write '%s': the file is not open",
                       a->path ? a->path : "(none)");
    if (a->f) {
        if (n && fwrite(p, 1, n, a->f) != n)
            return err_set(err, ERR_ENV, "cannot write '%s': %s", a->path, strerror(errno));
        return 0;
    }
    while (n > 0) {
        ssize_t w = write(a->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return err_set(err, ERR_ENV, "cannot write '%s': %s", a->path,
                           w < 0 ? strerror(errno) : "no progress (short write)");
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

FILE *atomic_stream(struct atomic_file *a, struct gate_err *err)
{
    if (!a->live) {
        err_set(err, ERR_ENV, "cannot write '%s': the file is not open",
                a->path ? a->path : "(none)");
        return NULL;
    }
    if (!a->f && !(a->f = fdopen(a->fd, "w")))
        err_set(err, ERR_ENV, "cannot write '%s': %s", a->path, strerror(errno));
    return a->f;
}

/* fsync the folder holding path, so the rename into it survives a crash. */
static void sync_folder(const char *path)
{
    char dir[SLOT_PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    (void)fsync(fd);
    close(fd);
}

int atomic_commit(struct atomic_file *a, struct gate_err *err)
{
    int rc = 0, e = 0;
    if (!a->live)
        return err_set(err, ERR_ENV, "cannot write '%s': the file is not open",
                       a->path ? a->path : "(none)");
    errno = 0;
    if (a->f && fflush(a->f) != 0)
        e = errno ? errno : EIO;
    if (!e && fchmod(a->fd, a->mode) != 0)
        e = errno;
    if (!e && fsync(a->fd) != 0)
        e = errno;
    int c = a->f ? fclose(a->f) : close(a->fd);
    if (c != 0 && !e)
        e = errno;
    a->f = NULL;
    a->fd = -1;
    if (!e && rename(slot_name[a->slot], a->path) != 0)
        e = errno;
    if (e) {
        unlink(slot_name[a->slot]);
        rc = err_set(err, ERR_ENV, "cannot write '%s': %s", a->path, strerror(e));
    } else {
        sync_folder(a->path);
    }
    unregister(a);
    return rc;
}

void atomic_abort(struct atomic_file *a)
{
    if (!a || !a->live)
        return;
    if (a->f)
        fclose(a->f);
    else if (a->fd >= 0)
        close(a->fd);
    a->f = NULL;
    a->fd = -1;
    unlink(slot_name[a->slot]);
    unregister(a);
}
