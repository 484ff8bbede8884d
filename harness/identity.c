/* identity.c — see identity.h. The commit comes from gate_buildinfo.h, regenerated at every
 * build by ci/buildinfo.cmake. */
#include "harness/identity.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/pin.h"
#include "engine/pool.h"
#include "gate_buildinfo.h"

int identity_file_sha256(const char *path, char hex[65], struct gate_err *err)
{
    /* opened once, never blocking, regular files only (engine/pin.h) */
    int fd;
    uint64_t size;
    int rc = pin_open_regular(path, &fd, &size, err);
    if (rc)
        return rc;
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    unsigned char buf[1 << 16];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0)
            crypto_hash_sha256_update(&st, buf, (unsigned long long)n);
    close(fd);
    if (n < 0)
        return err_set(err, ERR_ENV, "cannot read '%s': %s", path, strerror(errno));
    unsigned char d[32];
    crypto_hash_sha256_final(&st, d);
    sodium_bin2hex(hex, 65, d, 32);
    return 0;
}

int identity_get(struct identity *out, struct gate_err *err)
{
    memset(out, 0, sizeof *out);
    snprintf(out->version, sizeof out->version, "%s", GATE_VERSION);
    snprintf(out->git_commit, sizeof out->git_commit, "%s", GATE_GIT_COMMIT);
    out->git_dirty = GATE_GIT_DIRTY;
    out->dirty_count = GATE_DIRTY_COUNT;
    snprintf(out->dirty_reason, sizeof out->dirty_reason, "%s", GATE_DIRTY_REASON);
    snprintf(out->source_sha256, sizeof out->source_sha256, "%s", GATE_SOURCE_SHA256);
    snprintf(out->build_flags, sizeof out->build_flags, "%s", GATE_BUILD_FLAGS);
    snprintf(out->compiler, sizeof out->compiler, "%s", GATE_COMPILER);
    snprintf(out->build_config_sha256, sizeof out->build_config_sha256, "%s",
             GATE_BUILD_CONFIG_SHA256);
    if (gethostname(out->hostname, sizeof out->hostname - 1) != 0)
        out->hostname[0] = '\0';
    return identity_file_sha256("/proc/self/exe", out->binary_sha256, err);
}

json_t *identity_json(const struct identity *id)
{
    return json_pack("{s:s, s:s, s:b, s:s, s:s, s:s, s:s, s:s, s:s}", "version", id->version,
                     "git_commit", id->git_commit, "git_dirty", id->git_dirty, "dirty_reason",
                     id->dirty_reason, "source_sha256", id->source_sha256, "binary_sha256",
                     id->binary_sha256, "build_flags", id->build_flags, "compiler", id->compiler,
                     "build_config_sha256", id->build_config_sha256);
}

json_t *identity_environment(int threads)
{
    char host[256] = "unknown", cpu[256] = "unknown";
    gethostname(host, sizeof host - 1);
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c += 2;
                c[strcspn(c, "\n")] = '\0';
                snprintf(cpu, sizeof cpu, "%s", c);
            }
            break;
        }
    if (f)
        fclose(f);
    if (threads <= 0)
        threads = pool_default_threads();     /* what the engines' pools take */
    static const char *const cpu_key = "cpu"; /* the host's CPU model: not a backend name */
    return json_pack("{s:s, s:s, s:i}", "hostname", host, cpu_key, cpu, "threads", threads);
}

void identity_utc_now(char out[32])
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}
