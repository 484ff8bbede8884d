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

/* Check a release; sign_key may be NULL. Returns the exit code (0 only when all PASS). */
int release_check(const char *ladder, const char *db, const char *sign_key);

/* The same, printing to out, judging receipts against `self` as this build's identity (NULL:
 * the running binary's). Tests use self to stand for a clean build; the CLI never does. */
struct identity;
int release_check_to(FILE *out, const char *ladder, const char *db, const char *sign_key,
                     const struct identity *self);

#endif
