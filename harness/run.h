/* run.h — the cell runner (`gate run`) and the release check (`gate release check`). */
#ifndef GATE_RUN_H
#define GATE_RUN_H

#include <stdio.h>

struct run_options {
    const char *ladder;
    const char *host;  /* --host or $GATE_HOST */
    const char *db;    /* default receipts.db */
    const char *key;   /* default ~/.config/gate/keys/<host>.key */
    const char *only;  /* fnmatch pattern over "model/host/mode"; NULL = all */
    int threads;       /* 0 = all cores */
    int json;          /* machine-readable results on stdout */
};

/* Run every cell of the host; one signed receipt per cell. Returns the exit code. */
int run_ladder(const struct run_options *o);

struct release_options {
    const char *ladder;
    const char *db;          /* the receipt store; opened read-only unless sign_key is set */
    const char *sign_key;    /* write a signed sign-off (and a head record) when all PASS */
    const char *expect_head; /* a chain head hash (from a CI log): the store must still hold it */
};

/* Check a release as release_options say, printing to out, judging receipts against `self` as
 * this build's identity (NULL: the running binary's). Returns the exit code (0 only when every
 * required cell and anchor case is PASS). */
struct identity;
int release_check_opts(FILE *out, const struct release_options *o, const struct identity *self);

/* Check a release; sign_key may be NULL. Returns the exit code (0 only when all PASS). */
int release_check(const char *ladder, const char *db, const char *sign_key);

/* The same, printing to out, judging receipts against `self` as this build's identity (NULL:
 * the running binary's). Tests use self to stand for a clean build; the CLI never does. */
struct identity;
int release_check_to(FILE *out, const char *ladder, const char *db, const char *sign_key,
                     const struct identity *self);

/* ---- anchors (harness/run_anchor.c; issue 10 §1) ----------------------------------------------
 * An anchor receipt is a receipt like a cell's, for the cell {model: <anchor id>, host: <host
 * id>, mode: RUN_ANCHOR_MODE}, with one gate, "anchor" (oracles/anchor.h). */
#define RUN_ANCHOR_MODE "anchor"
struct ladder;

/* The anchor gate's settings for anchor ai of l, as a receipt records them and as the release
 * check must compare them (anchor_settings_json() of the ladder's entry; new reference). */
struct json_t *run_anchor_settings(const struct ladder *l, int anchor_index);

/* Run anchor anchor_index of l on host host_index (the reference twin on the CPU, n_threads
 * workers; 0 = all cores) and return the full receipt payload, ready for store_append():
 * schema_version, ladder {name, version, sha256, path}, cell {model: anchor id, host, mode:
 * "anchor"}, subject {model {id, sha256, path, arch, reference}, engine identity_json(id)},
 * environment, gates {"anchor": {verdict, settings, metrics, checks[, error]}}, faults_active [],
 * verdict, started_at, finished_at. The verdict is anchor_judge()'s; a file that cannot be read
 * or does not match its pin is a FAIL row with "error". *pass is 1 only for PASS. Never NULL
 * except out of memory. */
struct json_t *run_anchor_payload(const struct ladder *l, int anchor_index, int host_index,
                                  int n_threads, const struct identity *id, int *pass);

#endif
