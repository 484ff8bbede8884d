/* pin.h — a file the ladder pins by SHA-256, opened once and read only through that descriptor.
 *
 * Issue 11, "files the ladder did not pin": checking a digest by path and then re-opening the
 * path lets anyone who can rename a file over it between the two opens run other bytes than the
 * ones that were hashed. pin_open() opens the file once (never blocking: a FIFO cannot hang it),
 * requires a regular file on a real filesystem (not a FIFO, device, directory or a /proc, /sys,
 * ... pseudo file, whatever symbolic link leads there) within a size bound, reads it ONCE into
 * private anonymous memory and hashes that copy (issue 23 §5): every later reader
 * (model_load_pinned(), pin_read_all(), pin_take()) gets exactly the hashed bytes, and an
 * in-place overwrite of the file after hashing changes nothing gate judges. Memory: the whole
 * file is resident once in anonymous memory (a model is held in RAM anyway to be run; the page
 * cache's copy from the read is reclaimable); a file mapping, even MAP_PRIVATE, would not do, as
 * pages not yet touched show another writer's changes.
 * Invariant after pin_open() succeeds: out->data holds out->size bytes (read-only; NULL when
 * empty) whose digest is out->sha256; out->fd is still open read-only on the file (offset 0).
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
    uint8_t *data;   /* the hashed bytes: a private read-only anonymous mapping of size bytes
                      * (NULL when size is 0 or after pin_take()) */
    uint64_t size;   /* bytes hashed */
    char sha256[65]; /* lower-case hex of those bytes */
    char *name;      /* the path as given, for messages (owned) */
};

/* Open path once with pin_open_regular(), require at most PIN_MAX_SIZE bytes, read them into
 * private memory and hash that copy, and when want_sha256 is not NULL require that digest (64 hex
 * digits, either case). On success *out owns the descriptor and the copy; release them with
 * pin_close(). On failure *out holds fd -1 and nothing to free. Errors: ERR_INPUT cannot open
 * (missing) / not a regular file / too large / digest differs (the message names the file, the
 * pin and the actual digest); ERR_ENV cannot read, out of memory. */
int pin_open(const char *path, const char *want_sha256, struct pinned *out, struct gate_err *err);

/* pin_open() with an explicit size bound in bytes (e.g. 4096 for a key file). */
int pin_open_bounded(const char *path, const char *want_sha256, uint64_t max_size,
                     struct pinned *out, struct gate_err *err);

/* The open-once check every file a ladder names goes through: open path with O_RDONLY |
 * O_CLOEXEC | O_NONBLOCK | O_NOCTTY (a FIFO cannot block the open), fstat it, refuse anything but
 * a regular file and a file on a pseudo filesystem (proc, sysfs, debugfs, tracefs, securityfs,
 * cgroup, bpf: their "files" are not content, and /proc/self/environ is a secret), then clear
 * O_NONBLOCK. *fd (the caller's to close) and *size on success; *fd -1 on failure. Errors:
 * ERR_INPUT missing / not a regular file (the message names the path and what it is); ERR_ENV. */
int pin_open_regular(const char *path, int *fd, uint64_t *size, struct gate_err *err);

/* A malloc'd copy of the pinned bytes (p->data: the hashed bytes) plus a NUL (so text can be
 * parsed in place); *buf is the caller's to free. Refuses a file larger than max bytes. Errors:
 * ERR_INPUT too large; ERR_ENV out of memory or not open. */
int pin_read_all(const struct pinned *p, size_t max, uint8_t **buf, size_t *len,
                 struct gate_err *err);

/* Hand the hashed bytes over: *data (an anonymous mapping of *size bytes, munmap() it, or give
 * it to gguf_open_owned()) and p->data becomes NULL. -1 when p holds none (never opened or
 * already taken) and the file is not empty. */
int pin_take(struct pinned *p, void **data, size_t *size);

/* Close the descriptor, unmap the copy and free the name; p may be NULL or already closed. */
void pin_close(struct pinned *p);

#endif
