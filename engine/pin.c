/* pin.c — pinned files opened once (see pin.h). The digest is computed with pread() so the
 * descriptor's offset never moves: a caller that hands out->fd to mmap or read sees offset 0.
 */
#include "engine/pin.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* SHA-256 of the first size bytes of fd, by pread; ERR_INPUT when the file is shorter. */
static int hash_fd(int fd, uint64_t size, const char *name, char hex[65], struct gate_err *err)
{
    crypto_hash_sha256_state st;
    unsigned char buf[1 << 16], d[32];
    uint64_t off = 0;
    crypto_hash_sha256_init(&st);
    while (off < size) {
        size_t want = size - off < sizeof buf ? (size_t)(size - off) : sizeof buf;
        ssize_t n = pread(fd, buf, want, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return err_set(err, ERR_ENV, "cannot read '%s': %s", name, strerror(errno));
        if (n == 0)
            return err_set(err, ERR_INPUT, "'%s' shrank while it was read (%llu of %llu bytes)",
                           name, (unsigned long long)off, (unsigned long long)size);
        crypto_hash_sha256_update(&st, buf, (unsigned long long)n);
        off += (uint64_t)n;
    }
    crypto_hash_sha256_final(&st, d);
    sodium_bin2hex(hex, 65, d, 32);
    return 0;
}

static int hex64(const char *s)
{
    return s && strlen(s) == 64 && strspn(s, "0123456789abcdefABCDEF") == 64;
}

int pin_open_bounded(const char *path, const char *want_sha256, uint64_t max_size,
                     struct pinned *out, struct gate_err *err)
{
    struct stat st;
    int rc = 0;
    memset(out, 0, sizeof *out);
    out->fd = -1;
    if (want_sha256 && !hex64(want_sha256))
        return err_set(err, ERR_INPUT, "the pin for '%s' is not 64 hex digits", path);
    if (sodium_init() < 0)
        return err_set(err, ERR_ENV, "libsodium failed to initialize");
    out->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (out->fd < 0) {
        rc = err_set(err,
                     errno == ENOENT || errno == EISDIR || errno == ENOTDIR ? ERR_INPUT : ERR_ENV,
                     "cannot open '%s': %s", path, strerror(errno));
        goto cleanup;
    }
    if (fstat(out->fd, &st) != 0) {
        rc = err_set(err, ERR_ENV, "cannot stat '%s': %s", path, strerror(errno));
        goto cleanup;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = err_set(err, ERR_INPUT, "'%s' is not a regular file", path);
        goto cleanup;
    }
    if ((uint64_t)st.st_size > max_size) {
        rc = err_set(err, ERR_INPUT, "'%s' is %llu bytes, more than the %llu allowed", path,
                     (unsigned long long)st.st_size, (unsigned long long)max_size);
        goto cleanup;
    }
    /* a regular file: blocking reads from here on */
    int fl = fcntl(out->fd, F_GETFL);
    if (fl < 0 || fcntl(out->fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        rc = err_set(err, ERR_ENV, "cannot set flags on '%s': %s", path, strerror(errno));
        goto cleanup;
    }
    out->size = (uint64_t)st.st_size;
    if ((rc = hash_fd(out->fd, out->size, path, out->sha256, err)))
        goto cleanup;
    if (want_sha256 && strncasecmp(out->sha256, want_sha256, 64) != 0) {
        rc = err_set(err, ERR_INPUT,
                     "'%s' does not match its pin: pinned sha256 %.64s, the file"
                     " has %s",
                     path, want_sha256, out->sha256);
        goto cleanup;
    }
    if (!(out->name = strdup(path))) {
        rc = err_set(err, ERR_ENV, "out of memory");
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
    uint8_t *b = NULL;
    uint64_t off = 0;
    int rc = 0;
    *buf = NULL;
    *len = 0;
    if (p->fd < 0)
        return err_set(err, ERR_ENV, "'%s' is not open", name);
    if (p->size > (uint64_t)max)
        return err_set(err, ERR_INPUT, "'%s' is %llu bytes, more than the %zu allowed", name,
                       (unsigned long long)p->size, max);
    if (!(b = malloc((size_t)p->size + 1))) {
        rc = err_set(err, ERR_ENV, "out of memory reading '%s'", name);
        goto cleanup;
    }
    while (off < p->size) {
        ssize_t n = pread(p->fd, b + off, (size_t)(p->size - off), (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = err_set(err, ERR_ENV, "cannot read '%s': %s", name, strerror(errno));
            goto cleanup;
        }
        if (n == 0) {
            rc = err_set(err, ERR_INPUT, "'%s' changed after it was hashed (now shorter)", name);
            goto cleanup;
        }
        off += (uint64_t)n;
    }
    b[p->size] = '\0';
    unsigned char d[32];
    char hex[65];
    crypto_hash_sha256(d, b, p->size);
    sodium_bin2hex(hex, sizeof hex, d, 32);
    if (strcmp(hex, p->sha256) != 0) {
        rc = err_set(err, ERR_INPUT, "'%s' changed after it was hashed (sha256 %s, was %s)", name,
                     hex, p->sha256);
        goto cleanup;
    }
    *buf = b;
    *len = (size_t)p->size;
    b = NULL;
cleanup:
    free(b);
    return rc;
}

void pin_close(struct pinned *p)
{
    if (!p)
        return;
    if (p->fd >= 0)
        close(p->fd);
    p->fd = -1;
    free(p->name);
    p->name = NULL;
}
