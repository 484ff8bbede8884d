/* key.h — Ed25519 host keys: generate, load, parse public keys, key ids.
 *
 * A host signs its receipts with one private key kept outside the repository (mode 0600, under
 * ~/.config/gate/keys/ or a path given with --key). A key is named by its id
 * "ed25519:<64 lowercase hex of the public key>"; ladders trust ids, never file names.
 * The private key file is a small text file (format in docs/receipts.md): host, public key id,
 * and the 32-byte seed in hex; loading re-derives the key pair from the seed and refuses a file
 * whose stored public key disagrees, or that group/other may read or write.
 * Start reading: key_generate(), key_load().
 */
#ifndef GATE_KEY_H
#define GATE_KEY_H

#include <stddef.h>

#include "base/err.h"

#define KEY_ID_PREFIX "ed25519:"
#define KEY_ID_LEN 72 /* strlen("ed25519:") + 64 */

struct key_pair {
    unsigned char pk[32]; /* Ed25519 public key */
    unsigned char sk[64]; /* libsodium secret key (seed || pk); wipe with key_wipe() */
    char host[64];        /* the ladder host id this key signs for ("" when unknown) */
    char id[80];          /* "ed25519:<64 hex of pk>" */
};

/* Generate a fresh key pair for host (a ladder host id: [A-Za-z0-9._-], 1..63 chars) and write
 * its private key file to path with mode 0600. Creates missing parent folders (mode 0700).
 * Refuses (ERR_INPUT) to overwrite any existing file. out receives the key pair (may be NULL).
 * Errors: ERR_INPUT bad host / file exists; ERR_ENV cannot create or write the file. */
int key_generate(const char *path, const char *host, struct key_pair *out, struct gate_err *err);

/* Load a private key file written by key_generate(). Refuses (ERR_INPUT) a file that group or
 * other may access (the message names the mode and the chmod that fixes it), anything but a
 * regular file (a FIFO fails at once, it does not hang), a file over 4096 bytes, a malformed
 * file, and a file whose stored public key does not match its seed. */
int key_load(const char *path, struct key_pair *out, struct gate_err *err);

/* Parse "ed25519:HEX" (64 hex digits, either case; surrounding whitespace allowed) into pk.
 * Errors: ERR_INPUT naming the text. */
int key_parse_public(const char *text, unsigned char pk[32], struct gate_err *err);

/* The key id "ed25519:<64 lowercase hex>" of pk, NUL-terminated, into out. */
void key_id_of(const unsigned char pk[32], char out[80]);

/* Write "ed25519:HEX\n" to path (a .pub file for a ladder's `file:NAME.pub`), mode 0644,
 * replacing an existing public key file atomically: a temporary file created with O_EXCL under
 * an unpredictable name in the same folder (mkostemp), fsync'd, renamed over path; removed on
 * any failure. Errors: ERR_INPUT path too long; ERR_ENV cannot create, write or rename. */
int key_write_public(const char *path, const struct key_pair *k, struct gate_err *err);

/* The default private key path for host: $GATE_KEY_DIR, else $XDG_CONFIG_HOME/gate/keys, else
 * $HOME/.config/gate/keys, joined with "<host>.key". Errors: ERR_ENV when no HOME is set,
 * ERR_INPUT when the path does not fit. */
int key_default_path(const char *host, char *out, size_t n, struct gate_err *err);

/* Erase the secret key bytes of k (k may be NULL). */
void key_wipe(struct key_pair *k);

#endif
