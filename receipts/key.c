/* key.c — Ed25519 host keys (see key.h). The private key file is text:
 *
 *     # gate private key: keep secret, mode 0600, never commit
 *     host: h200
 *     public: ed25519:<64 hex>
 *     seed: <64 hex>
 *
 * The seed is the whole secret; the public line lets `gate key pub` and a reader check which key
 * a file holds, and key_load() refuses a file whose public line disagrees with its seed.
 */
#include "receipts/key.h"

#include "base/atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEY_FILE_MAX 4096

static int host_valid(const char *host)
{
    size_t n = host ? strlen(host) : 0;
    if (n == 0 || n >= sizeof((struct key_pair *)0)->host)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = host[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Create every missing folder above path (mode 0700), like `mkdir -p "$(dirname path)"`. */
static int make_parents(const char *path, struct gate_err *err)
{
    char buf[4096];
    if (strlen(path) >= sizeof buf)
        return err_set(err, ERR_INPUT, "key path '%.100s...' is too long", path);
    strcpy(buf, path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST) {
            int e = errno;
            *p = '/';
            return err_set(err, ERR_ENV, "cannot create folder '%.*s': %s", (int)(p - buf), buf,
                           strerror(e));
        }
        *p = '/';
    }
    return 0;
}

void key_id_of(const unsigned char pk[32], char out[80])
{
    memcpy(out, KEY_ID_PREFIX, sizeof KEY_ID_PREFIX - 1);
    sodium_bin2hex(out + sizeof KEY_ID_PREFIX - 1, 65, pk, 32);
}

void key_wipe(struct key_pair *k)
{
    if (k)
        sodium_memzero(k->sk, sizeof k->sk);
}

int key_parse_public(const char *text, unsigned char pk[32], struct gate_err *err)
{
    const char *p = text ? text : "";
    while (*p == ' ' || *p == '\t')
        p++;
    size_t n = strlen(p);
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\n' || p[n - 1] == '\r'))
        n--;
    size_t plen = sizeof KEY_ID_PREFIX - 1;
    size_t bin_len = 0;
    const char *end = NULL;
    if (n != KEY_ID_LEN || strncmp(p, KEY_ID_PREFIX, plen) != 0 ||
        sodium_hex2bin(pk, 32, p + plen, 64, NULL, &bin_len, &end) != 0 || bin_len != 32 ||
        end != p + n)
        return err_set(err, ERR_INPUT,
                       "'%.100s' is not a public key (expected ed25519: and 64 hex digits)",
                       text ? text : "");
    return 0;
}

int key_default_path(const char *host, char *out, size_t n, struct gate_err *err)
{
    const char *dir = getenv("GATE_KEY_DIR");
    const char *xdg = getenv("XDG_CONFIG_HOME");
    const char *home = getenv("HOME");
    int len;
    if (dir && *dir)
        len = snprintf(out, n, "%s/%s.key", dir, host);
    else if (xdg && *xdg)
        len = snprintf(out, n, "%s/gate/keys/%s.key", xdg, host);
    else if (home && *home)
        len = snprintf(out, n, "%s/.config/gate/keys/%s.key", home, host);
    else
        return err_set(err, ERR_ENV, "no HOME set: give the key path with -o/--key");
    if (len < 0 || (size_t)len >= n)
        return err_set(err, ERR_INPUT, "the default key path for host '%s' is too long", host);
    return 0;
}

int key_generate(const char *path, const char *host, struct key_pair *out, struct gate_err *err)
{
    struct key_pair k;
    unsigned char seed[32];
    char seed_hex[65];
    char text[512];
    int rc = 0, fd = -1, created = 0;
    memset(&k, 0, sizeof k);
    if (!host_valid(host)) {
        rc = err_set(err, ERR_INPUT,
                     "host id '%.80s' is not valid (1-63 characters of A-Z a-z 0-9 . _ -)",
                     host ? host : "");
        goto cleanup;
    }
    if (sodium_init() < 0) {
        rc = err_set(err, ERR_ENV, "libsodium failed to initialize");
        goto cleanup;
    }
    if ((rc = make_parents(path, err)))
        goto cleanup;
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST)
            rc = err_set(err, ERR_INPUT, "key file '%s' already exists; refusing to overwrite it",
                         path);
        else
            rc = err_set(err, ERR_ENV, "cannot create key file '%s': %s", path, strerror(errno));
        goto cleanup;
    }
    created = 1;
    if (fchmod(fd, 0600) != 0) {
        rc = err_set(err, ERR_ENV, "cannot set mode 0600 on '%s': %s", path, strerror(errno));
        goto cleanup;
    }
    randombytes_buf(seed, sizeof seed);
    crypto_sign_seed_keypair(k.pk, k.sk, seed);
    snprintf(k.host, sizeof k.host, "%s", host);
    key_id_of(k.pk, k.id);
    sodium_bin2hex(seed_hex, sizeof seed_hex, seed, sizeof seed);
    int len = snprintf(text, sizeof text,
                       "# gate private key: keep secret, mode 0600, never commit\n"
                       "host: %s\npublic: %s\nseed: %s\n",
                       k.host, k.id, seed_hex);
    ssize_t w = write(fd, text, (size_t)len);
    if (w != len || fsync(fd) != 0) {
        rc = err_set(err, ERR_ENV, "cannot write key file '%s': %s", path,
                     w < 0 || w == len ? strerror(errno) : "short write");
        goto cleanup;
    }
    if (close(fd) != 0) {
        fd = -1;
        rc = err_set(err, ERR_ENV, "cannot write key file '%s': %s", path, strerror(errno));
        goto cleanup;
    }
    fd = -1;
    if (out)
        *out = k;
cleanup:
    if (fd >= 0)
        close(fd);
    if (rc && created)
        unlink(path);
    sodium_memzero(seed, sizeof seed);
    sodium_memzero(seed_hex, sizeof seed_hex);
    sodium_memzero(text, sizeof text);
    key_wipe(&k);
    return rc;
}

/* The value of "name: value" on one line of text, trimmed, into out; 0 if found. */
static int field(const char *text, const char *name, char *out, size_t n)
{
    size_t nl = strlen(name);
    const char *line = text;
    for (; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, name, nl) != 0 || line[nl] != ':')
            continue;
        const char *v = line + nl + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t len = strcspn(v, "\r\n");
        while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t'))
            len--;
        if (len >= n)
            return -1;
        memcpy(out, v, len);
        out[len] = '\0';
        return 0;
    }
    return -1;
}

int key_load(const char *path, struct key_pair *out, struct gate_err *err)
{
    struct key_pair k;
    struct stat st;
    char text[KEY_FILE_MAX + 1];
    char seed_hex[80], pub[100];
    unsigned char seed[32], stored_pk[32];
    size_t bin_len = 0;
    const char *end = NULL;
    int rc = 0, fd = -1;
    memset(&k, 0, sizeof k);
    if (sodium_init() < 0) {
        rc = err_set(err, ERR_ENV, "libsodium failed to initialize");
        goto cleanup;
    }
    /* O_NONBLOCK: a FIFO put in the key's place fails the checks below instead of hanging */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        rc = err_set(err, errno == ENOENT ? ERR_INPUT : ERR_ENV, "cannot open key file '%s': %s",
                     path, strerror(errno));
        goto cleanup;
    }
    if (fstat(fd, &st) != 0) {
        rc = err_set(err, ERR_ENV, "cannot stat key file '%s': %s", path, strerror(errno));
        goto cleanup;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = err_set(err, ERR_INPUT, "key file '%s' is not a regular file", path);
        goto cleanup;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        rc = err_set(err, ERR_INPUT,
                     "key file '%s' is accessible by group/other (mode %04o); a private key must "
                     "be mode 0600: run chmod 600 '%s'",
                     path, (unsigned)(st.st_mode & 07777), path);
        goto cleanup;
    }
    if (st.st_size > KEY_FILE_MAX) {
        rc = err_set(err, ERR_INPUT,
                     "key file '%s' is %lld bytes, more than the %d a key file"
                     " holds",
                     path, (long long)st.st_size, KEY_FILE_MAX);
        goto cleanup;
    }
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, text + n, sizeof text - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = err_set(err, ERR_ENV, "cannot read key file '%s': %s", path, strerror(errno));
            goto cleanup;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n == sizeof text - 1) {
            char extra;
            if (read(fd, &extra, 1) > 0) { /* grew past the bound after fstat */
                rc = err_set(err, ERR_INPUT, "key file '%s' is more than %d bytes", path,
                             KEY_FILE_MAX);
                goto cleanup;
            }
            break;
        }
    }
    text[n] = '\0';
    if (field(text, "seed", seed_hex, sizeof seed_hex) != 0 ||
        sodium_hex2bin(seed, sizeof seed, seed_hex, strlen(seed_hex), NULL, &bin_len, &end) != 0 ||
        bin_len != 32 || *end != '\0') {
        rc = err_set(err, ERR_INPUT, "key file '%s' has no valid 'seed:' line (64 hex digits)",
                     path);
        goto cleanup;
    }
    crypto_sign_seed_keypair(k.pk, k.sk, seed);
    key_id_of(k.pk, k.id);
    if (field(text, "public", pub, sizeof pub) == 0) {
        if (key_parse_public(pub, stored_pk, err) != 0) {
            err_clear(err);
            rc = err_set(err, ERR_INPUT, "key file '%s': 'public:' is not ed25519:HEX", path);
            goto cleanup;
        }
        if (memcmp(stored_pk, k.pk, 32) != 0) {
            rc = err_set(err, ERR_INPUT,
                         "key file '%s' is corrupt: its 'public:' line does not match its seed",
                         path);
            goto cleanup;
        }
    }
    if (field(text, "host", k.host, sizeof k.host) != 0)
        k.host[0] = '\0';
    if (out)
        *out = k;
cleanup:
    if (fd >= 0)
        close(fd);
    sodium_memzero(text, sizeof text);
    sodium_memzero(seed_hex, sizeof seed_hex);
    sodium_memzero(seed, sizeof seed);
    key_wipe(&k);
    return rc;
}

int key_write_public(const char *path, const struct key_pair *k, struct gate_err *err)
{
    /* base/atomic.h: O_EXCL under an unpredictable name in the same folder, so a symlink planted
     * there cannot redirect the write; fsync'd, renamed over path, removed on any failure */
    struct atomic_file a = {0};
    char line[96];
    int rc = make_parents(path, err);
    if (rc)
        goto cleanup;
    if ((rc = atomic_open(&a, path, 0644, err)))
        goto cleanup;
    int len = snprintf(line, sizeof line, "%s\n", k->id);
    if ((rc = atomic_write(&a, line, (size_t)len, err)))
        goto cleanup;
    rc = atomic_commit(&a, err);
cleanup:
    atomic_abort(&a);
    return rc;
}
