/* ladderfix.h — a release fixture for tests that need signed receipts in a store without running
 * the engine: a scratch folder with two host keys (a, b) and their .pub files, a stand-in clean
 * build identity, receipts fabricated from the recorded metrics of a real PASS receipt
 * (tests/data/release_metrics.json) and judged through the gate table as `gate run` records them,
 * raw SQLite access that bypasses the append-only triggers (to tamper), and a shell helper for
 * CLI tests. The release-check tests (tests/test_release.c, tests/test_report.c) build the same
 * shapes inline; new tests use this.
 * Start reading: ladderfix_init(), then ladderfix_add().
 */
#ifndef GATE_TEST_LADDERFIX_H
#define GATE_TEST_LADDERFIX_H

#include <stdint.h>

#include "harness/identity.h"
#include "receipts/key.h"

struct sqlite3;

struct ladderfix {
    char dir[600];         /* the scratch folder (under check_tmp_dir()) */
    struct key_pair key_a; /* host "a": a.key, a.pub */
    struct key_pair key_b; /* host "b": b.key, b.pub */
    struct identity self;  /* a stand-in clean build: version 1.0.0, commit c0ffee...01 */
};

/* A fresh scratch folder named after tag, keys a and b with their .pub files, self. Asserts. */
void ladderfix_init(struct ladderfix *fx, const char *tag);

/* fx->dir/name; eight rotating buffers (each valid until eight more calls). */
const char *ladderfix_path(const struct ladderfix *fx, const char *name);

/* What to fake in one receipt. Zeroed: a PASS receipt of fx->self for the ladder's pin. */
struct ladderfix_fake {
    int fail;             /* 1: parity numbers that fail (position 5 at cosine 0.42), with the
                           * localization a failed run records (first bad layer 1, routing
                           * agreement 90 of 96 there) and position 7 an argmax TIE_FLIP */
    int golden_diff;      /* 1: the first golden case's 4th token differs (first_diff 3) */
    const char *commit;   /* NULL: self's commit */
    const char *env_host; /* NULL: the cell's host id; else environment.hostname (any text) */
};

/* Append one receipt for cell ci of the ladder at ladder_path to db (created if missing), signed
 * by k: every gate of release_metrics.json judged with the ladder's settings for the cell, the
 * model digest the ladder pins. Returns the receipt id. Asserts. */
int64_t ladderfix_add(const struct ladderfix *fx, const char *ladder_path, const char *db,
                      const struct key_pair *k, int ci, struct ladderfix_fake fk);

/* Open db with SQLite directly and drop the append-only triggers, so a test can alter rows as an
 * attacker with file access would. Close with sqlite3_close. Asserts. */
struct sqlite3 *ladderfix_open_raw(const char *db);

/* system() of a printf-style command line; its exit status (-1 when it did not exit). */
int ladderfix_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
