/* identity.h — what a receipt says was tested and where: this build's identity (version, git
 * commit of a clean tree, binary SHA-256, build flags) and this machine's environment.
 * Settled question 1: a receipt matches a build when commit (clean) and version are equal; the
 * configuration (compiler, the exact compile and link commands: build_config_sha256) is recorded,
 * and the binary digest is compared only between receipts of the same host and configuration
 * (harness/release.c).
 */
#ifndef GATE_IDENTITY_H
#define GATE_IDENTITY_H

#include <jansson.h>

#include "base/err.h"

struct identity {
    char version[32];
    char git_commit[48];
    int git_dirty;          /* 1: what was compiled is not the commit's tree: never counts */
    int dirty_count;        /* how many reasons ci/buildinfo.cmake found (0 when clean) */
    char dirty_reason[256]; /* the first one, e.g. "untracked file engine/x.h.orig in a source
                             * folder"; "" when clean */
    char source_sha256[65]; /* SHA-256 of the sorted `git ls-tree -r HEAD` lines of the source
                             * files (ci/buildinfo.cmake): equal on every host at one commit */
    char binary_sha256[65]; /* of /proc/self/exe */
    char build_flags[256];
    char compiler[512];           /* "GNU 12.2.0 /usr/bin/cc (real path) sha256:..." */
    char build_config_sha256[65]; /* the compiler identity and the exact compile and link
                                   * commands of the gate binary (ci/buildinfo.cmake): equal
                                   * digests on one host mean the same configuration */
    char hostname[256];           /* this machine (not in identity_json: receipts record it in
                                   * environment.hostname); "" in stand-in identities */
};

/* This build's identity (from gate_buildinfo.h, generated at every build) and the digest of the
 * running binary. Errors: ERR_INPUT / ERR_ENV when /proc/self/exe cannot be read. */
int identity_get(struct identity *out, struct gate_err *err);

/* {"version", "git_commit", "git_dirty", "dirty_reason", "source_sha256", "binary_sha256",
 * "build_flags", "compiler", "build_config_sha256"} (new reference). */
json_t *identity_json(const struct identity *id);

/* {"hostname", "cpu", "threads"} for this machine (new reference). */
json_t *identity_environment(int threads);

/* SHA-256 of a file, lower-case hex. */
int identity_file_sha256(const char *path, char hex[65], struct gate_err *err);

/* Current UTC time as "YYYY-MM-DDTHH:MM:SSZ". */
void identity_utc_now(char out[32]);

#endif
