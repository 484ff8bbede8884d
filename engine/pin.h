/* pin.h — a file the ladder pins by SHA-256, opened once and read only through that descriptor.
 *
 * Issue 11, "files the ladder did not pin": checking a digest by path and then re-opening the
 * path lets anyone who can rename a file over it between the two opens run other bytes than the
 * ones that were hashed. pin_open() opens the file once, requires a regular file within a size
 * bound, hashes it through that descriptor and compares the digest with the pin; every later
 * reader (model_load_fd(), gguf_open_fd(), pin_read_all()) uses out->fd, never the path.
 * Invariant after pin_open() succeeds: out->fd is open read-only on the file that was hashed, its
 * offset is 0, and out->sha256 is the digest of its out->size bytes.
 * Start reading: pin_open().
 */
#ifndef GATE_PIN_H
#define GATE_PIN_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* pin_open()'s size bound: large enough for any model file gate gates. */
#define PIN_MAX_SIZE ((uint64_t)1 << 40)

struct pinned {
    int fd;          /* read-only, close-on-exec, offset 0 after pin_open(); -1 when closed */
    uint64_t size;   /* bytes hashed */
    char sha256[65]; /* lower-case hex of those bytes */
    char *name;      /* the path as given, for messages (owned) */
};

/* Open path once (O_RDONLY | O_CLOEXEC | O_NONBLOCK: a FIFO cannot hang it), require a regular
 * file of at most PIN_MAX_SIZE bytes, hash it through the descriptor, and when want_sha256 is
 * not NULL require that digest (64 hex digits, either case). On success *out owns the
 * descriptor; release it with pin_close(). On failure *out holds fd -1 and nothing to free.
 * Errors: ERR_INPUT cannot open (missing) / not a regular file / too large / digest differs
 * (the message names the file, the pin and the actual digest); ERR_ENV cannot read. */
int pin_open(const char *path, const char *want_sha256, struct pinned *out, struct gate_err *err);

/* pin_open() with an explicit size bound in bytes (e.g. 4096 for a key file). */
int pin_open_bounded(const char *path, const char *want_sha256, uint64_t max_size,
                     struct pinned *out, struct gate_err *err);

/* Read the whole pinned file from its descriptor (pread from offset 0; the offset stays 0) into
 * a malloc'd buffer of p->size bytes plus a NUL (so text can be parsed in place); *buf is the
 * caller's to free. Refuses a file larger than max bytes, and one whose bytes changed since they
 * were hashed (size or digest). Errors: ERR_INPUT too large / changed; ERR_ENV read error or out
 * of memory. */
int pin_read_all(const struct pinned *p, size_t max, uint8_t **buf, size_t *len,
                 struct gate_err *err);

/* Close the descriptor and free the name; p may be NULL or already closed. */
void pin_close(struct pinned *p);

#endif
