/* pin.c — pinned files opened once (see pin.h). The bytes are read once, with pread() (the
 * descriptor's offset never moves), into private anonymous memory, and the digest is computed
 * over that copy: what is hashed is what every later reader gets (issue 23 §5).
 */
#include "engine/pin.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

/* Read the first size bytes of fd into buf by pread and hash them there; ERR_INPUT when the
 * file is shorter. */
static int copy_and_hash(int fd, uint64_t size, const char *name, uint8_t *buf, char hex[65],
                         struct gate_err *err)
{
    crypto_hash_sha256_state st;
    unsigned char d[32];
    uint64_t off = 0;
    crypto_hash_sha256_init(&st);
    while (off < size) {
        size_t want = size - off < ((size_t)1 << 30) ? (size_t)(size - off) : (size_t)1 << 30;
        ssize_t n = pread(fd, buf + off, want, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return err_set(err, ERR_ENV, "cannot read '%s': %s", name, strerror(errno));
        if (n == 0)
            return err_set(err, ERR_INPUT, "'%s' shrank while it was read (%llu of %llu bytes)",
                           name, (unsigned long long)off, (unsigned long long)size);
        crypto_hash_sha256_update(&st, buf + off, (unsigned long long)n);
        off += (uint64_t)n;
    }
    crypto_hash_sha256_final(&st, d);
    sodium_bin2hex(hex, 65, d, 32);
    return 0;
}

/* The name of a pseudo filesystem whose "files" are not content (proc, sysfs, ...), or NULL. */
static const char *pseudo_fs(int fd)
{
    struct statfs sf;
    if (fstatfs(fd, &sf) != 0)
        return NULL;
    switch ((unsigned long)sf.f_type) {
    case PROC_SUPER_MAGIC:
        return "proc";
    case SYSFS_MAGIC:
        return "sysfs";
    case DEBUGFS_MAGIC:
        return "debugfs";
    case TRACEFS_MAGIC:
        return "tracefs";
    case SECURITYFS_MAGIC:
        return "securityfs";
    case CGROUP_SUPER_MAGIC:
    case CGROUP2_SUPER_MAGIC:
        return "cgroup";
    case BPF_FS_MAGIC:
        return "bpf";
    default:
        return NULL;
    }
}

int pin_open_regular(const char *path, int *fd, uint64_t *size, struct gate_err *err)
{
    struct stat st;
    const char *pseudo;
    int rc = 0;
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (*fd < 0)
        return err_set(err,
                       errno == ENOENT || errno == EISDIR || errno == ENOTDIR || errno == ELOOP
                           ? ERR_INPUT
                           : ERR_ENV,
                       "cannot open '%s': %s", path, strerror(errno));
    if (fstat(*fd, &st) != 0) {
        rc = err_set(err, ERR_ENV, "cannot stat '%s': %s", path, strerror(errno));
        goto cleanup;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = err_set(err, ERR_INPUT, "'%s' is not a regular file (%s)", path,
                     S_ISFIFO(st.st_mode)   ? "a FIFO"
                     : S_ISDIR(st.st_mode)  ? "a directory"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a file");
        goto cleanup;
    }
    if ((pseudo = pseudo_fs(*fd))) {
        rc =
            err_set(err, ERR_INPUT,
                    "'%s' is not a regular file (it is on the %s pseudo filesystem)", path, pseudo);
        goto cleanup;
    }
    /* a regular file: blocking reads from here on */
    int fl = fcntl(*fd, F_GETFL);
    if (fl < 0 || fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        rc = err_set(err, ERR_ENV, "cannot set flags on '%s': %s", path, strerror(errno));
        goto cleanup;
    }
    *size = (uint64_t)st.st_size;
cleanup:
    if (rc) {
        close(*fd);
        *fd = -1;
    }
    return rc;
}

static int hex64(const char *s)
{
    return s && strlen(s) == 64 && strspn(s, "0123456789abcdefABCDEF") == 64;
}

int pin_open_bounded(const char *path, const char *want_sha256, uint64_t max_size,
                     struct pinned *out, struct gate_err *err)
{
    int rc = 0;
    memset(out, 0, sizeof *out);
    out->fd = -1;
    if (want_sha256 && !hex64(want_sha256))
        return err_set(err, ERR_INPUT, "the pin for '%s' is not 64 hex digits", path);
    if (sodium_init() < 0)
        return err_set(err, ERR_ENV, "libsodium failed to initialize");
    if ((rc = pin_open_regular(path, &out->fd, &out->size, err)))
        goto cleanup;
    if (out->size > max_size) {
        rc = err_set(err, ERR_INPUT, "'%s' is %llu bytes, more than the %llu allowed", path,
                     (unsigned long long)out->size, (unsigned long long)max_size);
        goto cleanup;
    }
    if (out->size > (uint64_t)SIZE_MAX) {
        rc = err_set(err, ERR_ENV, "'%s' is too large for this machine's address space", path);
        goto cleanup;
    }
    /* the private copy: anonymous memory, so no write to the file after this read can change
     * it (a MAP_PRIVATE mapping of the file would still show another writer's changes in the
     * pages it has not touched) */
    if (out->size) {
        void *m = mmap(NULL, (size_t)out->size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            rc = err_set(err, ERR_ENV, "cannot allocate %llu bytes for '%s': %s",
                         (unsigned long long)out->size, path, strerror(errno));
            goto cleanup;
        }
        out->data = m;
    }
    if ((rc = copy_and_hash(out->fd, out->size, path, out->data, out->sha256, err)))
        goto cleanup;
    if (out->data && mprotect(out->data, (size_t)out->size, PROT_READ) != 0) {
        rc = err_set(err, ERR_ENV, "cannot protect the copy of '%s': %s", path, strerror(errno));
        goto cleanup;
    }
    if (want_sha256 && strncasecmp(out->sha256, want_sha256, 64) != 0) {
        rc = err_set(err, ERR_INPUT,
                     "'%s' does not match its pin: pinned sha256 %.64s, the file"
                     " has %s",
                     path, want_sha256, out->sha256);
        goto cleanup;
    }
    if (!(out->name = strdup(path))) {
        rc = err_set(err, ERR_ENV, "out of memory for the pinned file's name");
        goto cleanup;
    }
cleanup:
    if (rc)
        pin_close(out);
    return rc;
}

int pin_open(const char *path, const char *want_sha256, struct pinned *out, struct gate_err *err)
{
    return pin_open_bounded(path, want_sha256, PIN_MAX_SIZE, out, err);
}

int pin_read_all(const struct pinned *p, size_t max, uint8_t **buf, size_t *len,
                 struct gate_err *err)
{
    const char *name = p->name ? p->name : "pinned file";
    *buf = NULL;
    *len = 0;
    if (p->fd < 0 || (p->size && !p->data))
        return err_set(err, ERR_ENV, "'%s' is not open", name);
    if (p->size > (uint64_t)max)
        return err_set(err, ERR_INPUT, "'%s' is %llu bytes, more than the %zu allowed", name,
                       (unsigned long long)p->size, max);
    uint8_t *b = malloc((size_t)p->size + 1);
    if (!b)
        return err_set(err, ERR_ENV, "out of memory reading '%s'", name);
    if (p->size)
        memcpy(b, p->data, (size_t)p->size);
    b[p->size] = '\0';
    *buf = b;
    *len = (size_t)p->size;
    return 0;
}

int pin_take(struct pinned *p, void **data, size_t *size)
{
    if (!p || (p->size && !p->data))
        return -1;
    *data = p->data;
    *size = (size_t)p->size;
    p->data = NULL;
    return 0;
}

void pin_close(struct pinned *p)
{
    if (!p)
        return;
    if (p->fd >= 0)
        close(p->fd);
    p->fd = -1;
    if (p->data)
        munmap(p->data, (size_t)p->size);
    p->data = NULL;
    free(p->name);
    p->name = NULL;
}
