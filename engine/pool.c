/* pool.c — see pool.h. Start reading at pool_run.
 *
 * One 64-bit job word holds the current loop: its sequence number, its number of grains and the
 * next grain to claim. Every thread, the caller included, claims a grain by compare-and-swap on
 * that word, so a claim succeeds only for the loop the word still describes: a worker that read
 * the word of an old loop and slept cannot take a grain of a newer one. A thread reads the
 * loop's fn, ctx and item count only after its claim succeeded, and the caller rewrites them
 * only after every claimed grain has finished (the `done` count), so they are never stale.
 * The caller claims grains until none is left, then waits for `done` (each thread adds the
 * grains it ran once it finds none left to claim) to reach the grain count: it waits for work
 * that is running, never for a worker to arrive. Workers spin on the word, the caller on
 * `done`, for up to spin_ns (yielding the core at every clock check, and stopping at once when
 * a yield shows the core is wanted by others) before they sleep on a condition variable.
 *
 * Before this (issue 27) the caller waited until every worker had woken and checked in, grains
 * or none: with 4 busy loops on 2 cores, 2-thread decode of the twin ran at 7 tokens/s against
 * 800 on 1 thread, since a hundred-odd loops per token each waited for a parked worker.
 *
 * Grains: a loop's items are claimed in grains, so a thread that finishes early (a vCPU the
 * host ran longer, an expert with fewer tokens) takes the next grain instead of waiting for the
 * slowest one: with one fixed chunk per thread, 2 threads, 30B-A3B-shape decode measured 40.1
 * tokens/s against 48.8 with four grains per thread, and the prompt batch's expert loops (about
 * 128 uneven items) gained most from one grain per item (pp64 medians 150 with four per thread,
 * 164 per item; docs/bench.md). */
#include "pool.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long a thread spins on an atomic before it sleeps on a condition variable. Decode runs
 * a hundred-odd short loops per token with a little serial work between them; a worker that
 * slept after a few microseconds (the old 20000 spins) had to be woken through the kernel, and
 * on a VM a sleeping vCPU's wake-up cost more than the loop: one-token decode of the 0.6B Q8_0
 * file went from 37.0 to 46.8 tokens/s (2 threads, median of 10 interleaved rounds) with 2 ms.
 * The spinner yields at every clock check, so on an oversubscribed machine (two 2-thread
 * decodes on 2 cores) whoever else is runnable gets the core: 34-38 tokens/s each, against
 * 32-36 with the old short spin and 10-28 when it first yielded only after 0.1 ms. */
#ifndef POOL_SPIN_NS
#define POOL_SPIN_NS 2000000L
#endif
#ifndef POOL_GRAINS
#define POOL_GRAINS 4 /* grains per thread, for loops of more than POOL_FINE_MAX items */
#endif
#ifndef POOL_FINE_MAX
#define POOL_FINE_MAX 256 /* loops of at most this many items: one grain per item */
#endif

/* The job word: sequence (high 24 bits) | grain count (20 bits) | next grain (low 20 bits).
 * A claim adds 1 to the word; it never carries out of `next`, which stays <= the count. */
#define FIELD_BITS 20
#define FIELD_MASK ((UINT64_C(1) << FIELD_BITS) - 1)
#define SEQ_MASK ((UINT64_C(1) << (64 - 2 * FIELD_BITS)) - 1)
#define W_NEXT(w) ((w)&FIELD_MASK)
#define W_GRAINS(w) (((w) >> FIELD_BITS) & FIELD_MASK)
#define W_SEQ(w) ((w) >> (2 * FIELD_BITS))
_Static_assert((int64_t)POOL_MAX_THREADS *POOL_GRAINS <= (int64_t)FIELD_MASK,
               "the grain count must fit the job word");
_Static_assert(POOL_FINE_MAX <= FIELD_MASK, "the grain count must fit the job word");

struct worker {
    struct pool *pool;
    int index;
    pthread_t tid;
};

struct pool {
    int n;
    struct worker *w;
    pthread_mutex_t mu;
    pthread_cond_t wake;    /* workers sleep here: a new loop, a release of hold, or stop */
    pthread_cond_t done_cv; /* the caller sleeps here: the last claimed grain finished */
    atomic_int sleepers;    /* workers asleep on wake or about to be (under mu) */
    atomic_int caller_waiting;
    atomic_int hold, stop;
    atomic_int_fast64_t spin_ns;
    atomic_int_fast64_t worker_sleeps, caller_sleeps;
    /* the current loop: written by the caller before it publishes the job word, read by a
     * thread only after it claimed a grain of that loop */
    int64_t n_items;
    pool_fn fn;
    void *ctx;
    _Alignas(64) _Atomic uint64_t job;     /* claimed by workers and caller */
    _Alignas(64) atomic_int_fast64_t done; /* grains of the current loop finished */
};

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* A spin-wait. Every 1024th spin yields the core (to anyone else runnable on it) and checks the
 * clock; it ends once the spin time has passed, or at once when the yield took longer than
 * POOL_TAKEN_NS: someone else needed this core, so the machine is oversubscribed and a spinner
 * would only take turns from the threads it waits for (a parked worker holding a grain, the
 * caller with its serial work) — sleeping gives them the core. */
#ifndef POOL_TAKEN_NS
#define POOL_TAKEN_NS 200000L
#endif
struct spin {
    int64_t t0, last;
    int n;
};

static void spin_begin(struct spin *s)
{
    s->t0 = s->last = now_ns();
    s->n = 0;
}

static int keep_spinning(const struct pool *p, struct spin *s)
{
    if (++s->n % 1024)
        return 1;
    sched_yield();
    const int64_t t = now_ns(), gap = t - s->last;
    s->last = t;
    return gap <= POOL_TAKEN_NS &&
           t - s->t0 <= atomic_load_explicit(&p->spin_ns, memory_order_relaxed);
}

/* Claim the next grain of the loop the job word describes: 1 with *grain and *grains set, 0
 * when every grain is taken. Reading fn/ctx/n_items after a successful claim is safe: the
 * caller wrote them before it published the word (the acquire here pairs with that release
 * through the claims in between), and rewrites them only after this grain is counted done. */
static int claim(struct pool *p, uint64_t *grain, uint64_t *grains)
{
    uint64_t w = atomic_load_explicit(&p->job, memory_order_acquire);
    while (W_NEXT(w) < W_GRAINS(w))
        if (atomic_compare_exchange_weak_explicit(&p->job, &w, w + 1, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            *grain = W_NEXT(w);
            *grains = W_GRAINS(w);
            return 1;
        }
    return 0;
}

/* Run grains as thread `thread` until none is left to claim; then count them done, all at once
 * (one atomic add per thread and loop, not per grain). 1 when they were the loop's last. The
 * count cannot go to a newer loop: the caller starts one only after this count is in. */
static int run_grains(struct pool *p, int thread)
{
    uint64_t g, G = 0;
    int64_t ran = 0;
    while (claim(p, &g, &G)) {
        const int64_t n = p->n_items;
        const int64_t b = n * (int64_t)g / (int64_t)G, e = n * ((int64_t)g + 1) / (int64_t)G;
        if (b < e)
            p->fn(p->ctx, b, e, thread);
        ran++;
    }
    /* seq_cst: pairs with the caller's store of caller_waiting before it reads done */
    return ran && atomic_fetch_add(&p->done, ran) + ran == (int64_t)G;
}

static int has_work(struct pool *p)
{
    if (atomic_load_explicit(&p->hold, memory_order_relaxed))
        return 0;
    const uint64_t w = atomic_load_explicit(&p->job, memory_order_relaxed);
    return W_NEXT(w) < W_GRAINS(w);
}

/* Wait until a grain may be claimed (1) or the pool stops (0): spin, then sleep. */
static int wait_for_work(struct pool *p)
{
    struct spin sp;
    spin_begin(&sp);
    while (!has_work(p) && !atomic_load_explicit(&p->stop, memory_order_relaxed))
        if (!keep_spinning(p, &sp))
            break;
    pthread_mutex_lock(&p->mu);
    /* seq_cst: pairs with pool_run's store of the job word before it reads sleepers */
    atomic_fetch_add(&p->sleepers, 1);
    if (!has_work(p) && !atomic_load(&p->stop)) {
        atomic_fetch_add_explicit(&p->worker_sleeps, 1, memory_order_relaxed);
        do
            pthread_cond_wait(&p->wake, &p->mu);
        while (!has_work(p) && !atomic_load(&p->stop));
    }
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return !atomic_load(&p->stop);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct pool *p = w->pool;
    for (;;) {
        if (!atomic_load_explicit(&p->hold, memory_order_relaxed) && run_grains(p, w->index) &&
            atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
        if (!wait_for_work(p))
            return NULL;
    }
}

int pool_create(struct pool **out, int n_threads, struct gate_err *err)
{
    *out = NULL;
    if (n_threads <= 0)
        n_threads = pool_default_threads();
    if (n_threads > POOL_MAX_THREADS)
        return err_set(err, ERR_INPUT, "pool: %d threads is more than a pool takes (%d)", n_threads,
                       POOL_MAX_THREADS);
    struct pool *p = calloc(1, sizeof *p);
    if (!p)
        return err_set(err, ERR_ENV, "out of memory for the thread pool");
    p->n = 1; /* until the workers have started: pool_free joins w[1 .. n-1] */
    atomic_init(&p->spin_ns, POOL_SPIN_NS);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    p->w = calloc((size_t)n_threads, sizeof *p->w);
    if (!p->w) {
        pool_free(p);
        return err_set(err, ERR_ENV, "out of memory for %d pool workers", n_threads);
    }
    for (int i = 1; i < n_threads; i++) {
        p->w[i].pool = p;
        p->w[i].index = i;
        if (pthread_create(&p->w[i].tid, NULL, worker_main, &p->w[i]) != 0) {
            pool_free(p);
            return err_set(err, ERR_ENV, "cannot start worker thread %d of %d", i, n_threads);
        }
        p->n = i + 1;
    }
    *out = p;
    return 0;
}

void pool_free(struct pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; p->w && i < p->n; i++)
        pthread_join(p->w[i].tid, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done_cv);
    free(p->w);
    free(p);
}

int pool_threads(const struct pool *p)
{
    return p->n;
}

void pool_run(struct pool *p, int64_t n, pool_fn fn, void *ctx)
{
    if (p->n == 1 || n <= 1) {
        if (n > 0)
            fn(ctx, 0, n, 0);
        return;
    }
    int64_t G = n;
    if (n > POOL_FINE_MAX && G > (int64_t)p->n * POOL_GRAINS)
        G = (int64_t)p->n * POOL_GRAINS;
    p->n_items = n;
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    /* Only the caller publishes; the word now reads (old seq, old count, old count). */
    const uint64_t old = atomic_load_explicit(&p->job, memory_order_relaxed);
    const uint64_t seq = (W_SEQ(old) + 1) & SEQ_MASK;
    /* seq_cst: a worker that has not yet counted itself in `sleepers` sees the new word */
    atomic_store(&p->job, seq << (2 * FIELD_BITS) | (uint64_t)G << FIELD_BITS);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    run_grains(p, 0);
    /* every grain is claimed: wait only for those still running on other threads */
    struct spin sp;
    spin_begin(&sp);
    while (atomic_load_explicit(&p->done, memory_order_acquire) < G)
        if (!keep_spinning(p, &sp))
            break;
    if (atomic_load_explicit(&p->done, memory_order_acquire) < G) {
        pthread_mutex_lock(&p->mu);
        /* seq_cst: pairs with run_grains' add to done before it reads caller_waiting */
        atomic_store(&p->caller_waiting, 1);
        if (atomic_load(&p->done) < G) {
            atomic_fetch_add_explicit(&p->caller_sleeps, 1, memory_order_relaxed);
            do
                pthread_cond_wait(&p->done_cv, &p->mu);
            while (atomic_load(&p->done) < G);
        }
        atomic_store(&p->caller_waiting, 0);
        pthread_mutex_unlock(&p->mu);
    }
}

void pool_set_spin_ns(struct pool *p, int64_t ns)
{
    atomic_store(&p->spin_ns, ns < 0 ? 0 : ns);
}

void pool_hold_workers(struct pool *p, int hold)
{
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->hold, hold != 0);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
}

void pool_counts(const struct pool *p, struct pool_counts *out)
{
    out->worker_sleeps = atomic_load(&p->worker_sleeps);
    out->caller_sleeps = atomic_load(&p->caller_sleeps);
}

/* ---- how many threads by default ------------------------------------------------------------
 */

/* the whole of a small file as text in buf (NUL-terminated), or NULL when it cannot be read */
static const char *read_text(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    const size_t got = fread(buf, 1, size - 1, f);
    const int bad = ferror(f);
    fclose(f);
    if (bad)
        return NULL;
    buf[got] = '\0';
    return buf;
}

/* a decimal integer followed only by white space (end may be NULL: the rest is ignored) */
static int parse_ll(const char *s, long long *out, const char **end)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (!((*s >= '0' && *s <= '9') || *s == '-'))
        return 0;
    char *e;
    *out = strtoll(s, &e, 10);
    if (e == s)
        return 0;
    if (end) {
        *end = e;
        return 1;
    }
    while (*e == ' ' || *e == '\t' || *e == '\n')
        e++;
    return *e == '\0';
}

/* ceil(quota / period) as whole CPUs, 0 when either is not positive */
static int quota_cpus(long long quota, long long period)
{
    if (quota <= 0 || period <= 0)
        return 0;
    const long long c = quota / period + (quota % period != 0);
    return c > POOL_MAX_THREADS ? POOL_MAX_THREADS : (int)c;
}

static int tighter(int a, int b)
{
    return a <= 0 ? b : b <= 0 ? a : a < b ? a : b;
}

int pool_cgroup_quota(const char *cpu_max, const char *cfs_quota, const char *cfs_period)
{
    int limit = 0;
    long long q, per = 100000;
    const char *rest;
    if (cpu_max && parse_ll(cpu_max, &q, &rest)) { /* "max PERIOD" fails here: no limit */
        if (!parse_ll(rest, &per, NULL)) {
            while (*rest == ' ' || *rest == '\t' || *rest == '\n')
                rest++;
            per = *rest ? 0 : 100000; /* a quota alone: the kernel's default period */
        }
        limit = tighter(limit, quota_cpus(q, per));
    }
    per = 100000;
    if (cfs_quota && parse_ll(cfs_quota, &q, NULL) &&
        (!cfs_period || parse_ll(cfs_period, &per, NULL)))
        limit = tighter(limit, quota_cpus(q, per));
    return limit;
}

/* the tightest quota in dir/PATH and its parents, for one hierarchy's files */
static int walk_up(const char *dir, const char *path, int v2)
{
    char at[4096], file[4200], a[256], b[256];
    int limit = 0;
    if (snprintf(at, sizeof at, "%s", path) >= (int)sizeof at)
        return 0;
    for (;;) {
        size_t len = strlen(at);
        while (len && at[len - 1] == '/')
            at[--len] = '\0';
        if (v2) {
            snprintf(file, sizeof file, "%s%s/cpu.max", dir, at);
            limit = tighter(limit, pool_cgroup_quota(read_text(file, a, sizeof a), NULL, NULL));
        } else {
            snprintf(file, sizeof file, "%s%s/cpu.cfs_quota_us", dir, at);
            const char *q = read_text(file, a, sizeof a);
            snprintf(file, sizeof file, "%s%s/cpu.cfs_period_us", dir, at);
            limit = tighter(limit, pool_cgroup_quota(NULL, q, read_text(file, b, sizeof b)));
        }
        char *slash = strrchr(at, '/');
        if (!len || !slash)
            return limit;
        *slash = '\0';
    }
}

/* 1 when the comma-separated list names the controller "cpu" */
static int names_cpu(const char *list, size_t len)
{
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && list[j] != ',')
            j++;
        if (j - i == 3 && !memcmp(list + i, "cpu", 3))
            return 1;
        i = j + 1;
    }
    return 0;
}

int pool_cgroup_limit(const char *root, const char *self)
{
    int limit = 0;
    char dir[4096], path[4096];
    for (const char *line = self; line && *line;) {
        const char *eol = strchr(line, '\n');
        const size_t len = eol ? (size_t)(eol - line) : strlen(line);
        const char *c1 = memchr(line, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
        if (c2 && (size_t)(line + len - (c2 + 1)) < sizeof path) {
            const size_t plen = (size_t)(line + len - (c2 + 1));
            memcpy(path, c2 + 1, plen);
            path[plen] = '\0';
            if (c1 - line == 1 && line[0] == '0' && c2 == c1 + 1) { /* "0::PATH": cgroup v2 */
                static const char *const sub[] = {"", "/unified"};
                for (int i = 0; i < 2; i++) {
                    snprintf(dir, sizeof dir, "%s%s", root, sub[i]);
                    limit = tighter(limit, walk_up(dir, path, 1));
                }
            } else if (names_cpu(c1 + 1, (size_t)(c2 - c1 - 1))) { /* cgroup v1 */
                static const char *const sub[] = {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu"};
                for (int i = 0; i < 3; i++) {
                    snprintf(dir, sizeof dir, "%s%s", root, sub[i]);
                    limit = tighter(limit, walk_up(dir, path, 0));
                }
            }
        }
        line = eol ? eol + 1 : NULL;
    }
    return limit;
}

/* the number of CPUs in this thread's affinity mask, 0 when it cannot be read */
static int affinity_cpus(void)
{
    for (int ncpu = 1024; ncpu <= (1 << 20); ncpu *= 2) {
        cpu_set_t *set = CPU_ALLOC((size_t)ncpu);
        if (!set)
            return 0;
        const size_t size = CPU_ALLOC_SIZE((size_t)ncpu);
        CPU_ZERO_S(size, set);
        if (sched_getaffinity(0, size, set) == 0) {
            const int n = CPU_COUNT_S(size, set);
            CPU_FREE(set);
            return n;
        }
        CPU_FREE(set);
    }
    return 0;
}

int pool_default_threads(void)
{
    int n = affinity_cpus();
    if (n <= 0) {
        const long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 && c < INT_MAX ? (int)c : 1;
    }
    char self[8192];
    n = tighter(
        n, pool_cgroup_limit("/sys/fs/cgroup", read_text("/proc/self/cgroup", self, sizeof self)));
    return n < 1 ? 1 : n > POOL_MAX_THREADS ? POOL_MAX_THREADS : n;
}
