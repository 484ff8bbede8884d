/* judgecache.c — the judge's results cached content-addressed (judgecache.h). */
#include "oracles/judgecache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic.h"
#include "engine/model.h"
#include "oracles/mode.h"

#define MAGIC "GJDG0001"

/* The taps judgecache can store, in payload order: which pointer, its element size and its
 * elements per (layer, token). */
enum { TAP_HIDDEN, TAP_EXPERTS, TAP_EXPERT_W, TAP_KTH, TAP_K1TH, N_TAPS };

static struct {
    int open;
    char dir[1024];
    char binary[65];
    size_t max_bytes;
    struct judgecache_stats st;
} C;

struct header {
    char magic[8];
    unsigned char key[32];
    unsigned char payload_sha[32];
    uint64_t payload_bytes;
    double compute_s;
};

/* Keep the JUDGECACHE_KEEP most recently used binaries' folders of dir (by modification time),
 * removing the others' entries: a rebuilt gate leaves its old entries behind, and nothing else
 * would ever remove them. */
#define JUDGECACHE_KEEP 3
static void evict_old_binaries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct old {
        char name[80];
        time_t mtime;
    } olds[64];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) {
        char p[1200];
        struct stat st;
        if (e->d_name[0] == '.' || strlen(e->d_name) != 16)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            snprintf(olds[n].name, sizeof olds[n].name, "%.*s", (int)sizeof olds[n].name - 1,
                     e->d_name); /* 16 characters (checked above) */
            olds[n++].mtime = st.st_mtime;
        }
    }
    closedir(d);
    while (n > JUDGECACHE_KEEP) {
        int oldest = 0;
        for (int i = 1; i < n; i++)
            if (olds[i].mtime < olds[oldest].mtime)
                oldest = i;
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", dir, olds[oldest].name);
        DIR *sub = opendir(p);
        while (sub && (e = readdir(sub))) {
            char f[1600];
            if (e->d_name[0] == '.')
                continue;
            snprintf(f, sizeof f, "%s/%s", p, e->d_name);
            unlink(f);
        }
        if (sub)
            closedir(sub);
        rmdir(p);
        olds[oldest] = olds[--n];
    }
}

int judgecache_open(const char *dir, const char *binary_sha256, struct gate_err *err)
{
    judgecache_close();
    if (!dir || !*dir || strlen(dir) >= sizeof C.dir || !binary_sha256 ||
        strlen(binary_sha256) != 64)
        return err_set(err, ERR_INPUT,
                       "judge cache: a folder and a 64-hex binary digest are"
                       " required");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return err_set(err, ERR_ENV, "judge cache: cannot make '%s': %s", dir, strerror(errno));
    if (sodium_init() < 0)
        return err_set(err, ERR_ENV, "judge cache: libsodium cannot initialize");
    /* one folder per binary (its digest's first 16 hex), the newest few kept */
    char sub[1200];
    snprintf(sub, sizeof sub, "%s/%.16s", dir, binary_sha256);
    if (mkdir(sub, 0755) != 0 && errno != EEXIST)
        return err_set(err, ERR_ENV, "judge cache: cannot make '%s': %s", sub, strerror(errno));
    utimensat(AT_FDCWD, sub, NULL, 0); /* used now: the eviction keeps it */
    evict_old_binaries(dir);
    if (strlen(sub) >= sizeof C.dir)
        return err_set(err, ERR_INPUT, "judge cache: the folder name '%s' is too long", sub);
    snprintf(C.dir, sizeof C.dir, "%.*s", (int)sizeof C.dir - 1, sub); /* fits (checked above) */
    snprintf(C.binary, sizeof C.binary, "%s", binary_sha256);
    const char *cap = getenv("GATE_JUDGE_CACHE_MAX_MB");
    const long mb = cap && *cap ? strtol(cap, NULL, 10) : 1024;
    C.max_bytes = (size_t)(mb > 0 ? mb : 0) << 20;
    C.open = 1;
    return 0;
}

void judgecache_close(void)
{
    memset(&C, 0, sizeof C);
}

void judgecache_stats(struct judgecache_stats *out)
{
    *out = C.st;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Pointers and byte sizes of the payload's parts for a run of n tokens: logits first, then
 * every tap asked for. 0, or -1 when the run cannot be cached (MoE taps on a dense model). */
struct parts {
    void *p[1 + N_TAPS];
    size_t bytes[1 + N_TAPS];
    unsigned mask;
};

static int parts_of(const struct model *m, int n, const struct mode_keep *keep, float *logits,
                    const struct backend_taps *t, struct parts *x)
{
    const struct model_hparams *hp = &m->hp;
    const size_t L = hp->n_layer, N = (size_t)n, K = hp->n_expert > 0 ? hp->n_expert_used : 0;
    const size_t R = keep ? (size_t)keep->n : N; /* the rows kept: logits and hidden states */
    memset(x, 0, sizeof *x);
    x->p[0] = logits;
    x->bytes[0] = R * hp->n_vocab * sizeof(float);
    if (!t)
        return 0;
    void *const ptr[N_TAPS] = {t->hidden, t->experts, t->expert_w, t->router_kth, t->router_k1th};
    const size_t each[N_TAPS] = {L * R * hp->n_embd * sizeof(float), L * N * K * sizeof(int32_t),
                                 L * N * K * sizeof(float), L * N * sizeof(float),
                                 L * N * sizeof(float)};
    for (int i = 0; i < N_TAPS; i++) {
        if (!ptr[i])
            continue;
        if (i != TAP_HIDDEN && K == 0)
            return -1;
        x->p[1 + i] = ptr[i];
        x->bytes[1 + i] = each[i];
        x->mask |= 1u << i;
    }
    return 0;
}

static void key_of(const struct backend *b, const int32_t *tokens, int n,
                   const struct mode_keep *keep, const struct parts *x, unsigned char key[32])
{
    const struct model_hparams *hp = &b->model->hp;
    crypto_hash_sha256_state h;
    crypto_hash_sha256_init(&h);
    const char tag[] = "gate judge cache v1";
    crypto_hash_sha256_update(&h, (const unsigned char *)tag, sizeof tag);
    crypto_hash_sha256_update(&h, (const unsigned char *)C.binary, 64);
    crypto_hash_sha256_update(&h, (const unsigned char *)b->model->sha256, 64);
    crypto_hash_sha256_update(&h, (const unsigned char *)b->ops->name, strlen(b->ops->name) + 1);
    crypto_hash_sha256_update(&h, (const unsigned char *)b->emulate, strlen(b->emulate) + 1);
    const uint64_t dims[6] = {(uint64_t)n, x->mask,     hp->n_layer,
                              hp->n_embd,  hp->n_vocab, hp->n_expert > 0 ? hp->n_expert_used : 0};
    crypto_hash_sha256_update(&h, (const unsigned char *)dims, sizeof dims);
    crypto_hash_sha256_update(&h, (const unsigned char *)tokens, (size_t)n * sizeof *tokens);
    if (keep) { /* the rows kept (issue 26 §2): another subset is another entry */
        const char kt[] = "kept rows";
        const uint64_t nk = (uint64_t)keep->n;
        crypto_hash_sha256_update(&h, (const unsigned char *)kt, sizeof kt);
        crypto_hash_sha256_update(&h, (const unsigned char *)&nk, sizeof nk);
        crypto_hash_sha256_update(&h, (const unsigned char *)keep->pos,
                                  (size_t)keep->n * sizeof *keep->pos);
    }
    crypto_hash_sha256_final(&h, key);
}

static void path_of(const unsigned char key[32], char *out, size_t n)
{
    char hex[65];
    sodium_bin2hex(hex, sizeof hex, key, 32);
    snprintf(out, n, "%s/%s.judge", C.dir, hex);
}

/* Read a verified entry into x's parts: 1 hit, 0 absent, -1 present but not valid. */
static int read_entry(const char *path, const unsigned char key[32], const struct parts *x,
                      double *compute_s)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    struct header h;
    size_t total = 0;
    for (int i = 0; i <= N_TAPS; i++)
        total += x->bytes[i];
    int ok = fread(&h, sizeof h, 1, f) == 1 && !memcmp(h.magic, MAGIC, 8) &&
             !memcmp(h.key, key, 32) && h.payload_bytes == total;
    crypto_hash_sha256_state s;
    crypto_hash_sha256_init(&s);
    for (int i = 0; ok && i <= N_TAPS; i++) {
        if (!x->bytes[i])
            continue;
        ok = fread(x->p[i], 1, x->bytes[i], f) == x->bytes[i];
        if (ok)
            crypto_hash_sha256_update(&s, x->p[i], x->bytes[i]);
    }
    unsigned char sha[32];
    crypto_hash_sha256_final(&s, sha);
    ok = ok && fgetc(f) == EOF && !memcmp(sha, h.payload_sha, 32);
    fclose(f);
    if (ok)
        *compute_s = h.compute_s;
    return ok ? 1 : -1;
}

/* Write x's parts as the entry for key; failures only cost the cache its entry. Through
 * base/atomic.h like every file gate writes: an unpredictable O_EXCL temp name next to the entry,
 * so a symlink planted in the cache folder is never followed (a fixed "PATH.PID.tmp" opened with
 * fopen would write through one), renamed into place whole, removed on failure. */
static void write_entry(const char *path, const unsigned char key[32], const struct parts *x,
                        double compute_s)
{
    struct header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, MAGIC, 8);
    memcpy(h.key, key, 32);
    h.compute_s = compute_s;
    crypto_hash_sha256_state s;
    crypto_hash_sha256_init(&s);
    for (int i = 0; i <= N_TAPS; i++) {
        h.payload_bytes += x->bytes[i];
        if (x->bytes[i])
            crypto_hash_sha256_update(&s, x->p[i], x->bytes[i]);
    }
    crypto_hash_sha256_final(&s, h.payload_sha);
    if (h.payload_bytes > C.max_bytes)
        return;
    struct atomic_file a = {0};
    struct gate_err err = {0};
    int ok = atomic_open(&a, path, 0644, &err) == 0 && atomic_write(&a, &h, sizeof h, &err) == 0;
    for (int i = 0; ok && i <= N_TAPS; i++)
        ok = !x->bytes[i] || atomic_write(&a, x->p[i], x->bytes[i], &err) == 0;
    if (ok && atomic_commit(&a, &err) == 0)
        C.st.stored++;
    atomic_abort(&a);
}

int judgecache_judge(struct backend *b, const int32_t *tokens, int n, const struct mode_keep *keep,
                     float *logits, const struct backend_taps *taps, struct gate_err *err)
{
    struct parts x;
    const int cacheable = C.open && n > 0 && b->model && b->model->sha256[0] &&
                          !strcmp(b->ops->name, backend_judge_name()) && b->faults.n == 0 &&
                          strcmp(b->emulate, "?") && !(taps && taps->force_experts) &&
                          !(keep && keep->hidden_all) && /* an entry holds the kept rows only */
                          parts_of(b->model, n, keep, logits, taps, &x) == 0;
    if (!cacheable) {
        if (C.open)
            C.st.uncacheable++;
        return mode_forward_kept(b, tokens, n, keep, logits, taps, err);
    }
    unsigned char key[32];
    char path[1200];
    key_of(b, tokens, n, keep, &x, key);
    path_of(key, path, sizeof path);
    double saved = 0;
    const int got = read_entry(path, key, &x, &saved);
    if (got == 1) {
        int rc = backend_truncate(b, 0, err); /* the judge's cache: empty, as judgecache.h says */
        if (rc)
            return rc;
        C.st.hits++;
        C.st.saved_s += saved;
        return 0;
    }
    if (got < 0)
        C.st.corrupt++; /* recomputed below and rewritten */
    C.st.misses++;
    const double t0 = now_s();
    int rc = mode_forward_kept(b, tokens, n, keep, logits, taps, err);
    const double dt = now_s() - t0;
    C.st.spent_s += dt;
    if (!rc)
        write_entry(path, key, &x, dt);
    return rc;
}
