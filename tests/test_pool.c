/* test_pool.c — the thread pool (engine/pool.c): every item of a loop runs exactly once, on a
 * thread index inside the pool, for any item count and thread count, loop after loop on the same
 * pool (decode runs a hundred-odd loops per token on one pool); a thread index is never in use on
 * two threads at once while the loop is cut into grains; the workers really take grains, also
 * after sleeping past the spin; the caller finishes a loop alone when no worker comes (a busy
 * machine's parked threads, issue 27); the default thread count follows the affinity mask and
 * the cgroup CPU quota.
 *
 * Nothing here times anything: a wait for another thread is bounded by a generous deadline
 * (WAIT_S) and a miss is reported as the failure it stands for, never as a hang; a test with
 * threads also carries Criterion's timeout, for a pool_run that never returns (a lost wake-up).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/pool.h"

#define WAIT_S 30 /* seconds; a loaded 2-core machine schedules a runnable thread far sooner */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* let others run for a moment (a tenth of a millisecond) while polling */
static void pause_briefly(void)
{
    struct timespec t = {0, 100000};
    nanosleep(&t, NULL);
}

struct count_job {
    atomic_int *hits;
    int n_threads;
    atomic_int bad_thread;
};

static void count_items(void *ctx, int64_t begin, int64_t end, int thread)
{
    struct count_job *j = ctx;
    if (thread < 0 || thread >= j->n_threads)
        atomic_store(&j->bad_thread, 1);
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&j->hits[i], 1);
}

Test(pool, every_item_runs_exactly_once_for_any_size_and_thread_count, .timeout = 4 * WAIT_S)
{
    const int64_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 31, 63, 64, 65, 1000, 4097};
    atomic_int *hits = malloc(4097 * sizeof *hits);
    cr_assert(hits);
    for (int threads = 1; threads <= 4; threads++) {
        struct pool *p = NULL;
        struct gate_err err = {0};
        cr_assert_eq(pool_create(&p, threads, &err), 0, "%s", err.msg);
        cr_assert_eq(pool_threads(p), threads);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int rep = 0; rep < 3; rep++) { /* the same pool, loop after loop */
                const int64_t n = sizes[si];
                for (int64_t i = 0; i < n; i++)
                    atomic_init(&hits[i], 0);
                struct count_job j = {hits, threads, 0};
                pool_run(p, n, count_items, &j);
                cr_assert(!atomic_load(&j.bad_thread),
                          "%d threads, %lld items: thread index "
                          "out of range",
                          threads, (long long)n);
                for (int64_t i = 0; i < n; i++)
                    cr_assert_eq(atomic_load(&hits[i]), 1,
                                 "%d threads, %lld items: item %lld ran %d times", threads,
                                 (long long)n, (long long)i, atomic_load(&hits[i]));
            }
        pool_free(p);
    }
    free(hits);
}

/* Grains (pool.h): fn may run several times on one thread, but never on two threads at once
 * with the same `thread` — per-thread scratch indexed by it (the engines' score and row
 * buffers) stays private. Each call marks its index busy and checks nobody else holds it. */
struct busy_job {
    atomic_int busy[8];
    atomic_int clash, calls;
    atomic_int *hits;
};

static void hold_index(void *ctx, int64_t begin, int64_t end, int thread)
{
    struct busy_job *j = ctx;
    if (atomic_exchange(&j->busy[thread], 1))
        atomic_store(&j->clash, 1);
    atomic_fetch_add(&j->calls, 1);
    for (int64_t i = begin; i < end; i++) {
        atomic_fetch_add(&j->hits[i], 1);
        for (volatile int k = 0; k < 200; k++) /* long enough for the threads to overlap */
            ;
    }
    atomic_store(&j->busy[thread], 0);
}

Test(pool, a_thread_index_is_never_in_use_twice_at_once_and_items_run_once, .timeout = 4 * WAIT_S)
{
    const int64_t sizes[] = {255, 256, 257, 1000, 4097};
    atomic_int *hits = malloc(4097 * sizeof *hits);
    cr_assert(hits);
    for (int threads = 2; threads <= 4; threads++) {
        struct pool *p = NULL;
        struct gate_err err = {0};
        cr_assert_eq(pool_create(&p, threads, &err), 0, "%s", err.msg);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            const int64_t n = sizes[si];
            struct busy_job j = {.hits = hits};
            for (int t = 0; t < 8; t++)
                atomic_init(&j.busy[t], 0);
            atomic_init(&j.clash, 0);
            atomic_init(&j.calls, 0);
            for (int64_t i = 0; i < n; i++)
                atomic_init(&hits[i], 0);
            pool_run(p, n, hold_index, &j);
            cr_assert(!atomic_load(&j.clash),
                      "%d threads, %lld items: a thread index ran twice at once", threads,
                      (long long)n);
            /* more calls than threads: the items are cut into grains */
            cr_assert_gt(atomic_load(&j.calls), threads, "%d threads, %lld items: %d calls",
                         threads, (long long)n, atomic_load(&j.calls));
            for (int64_t i = 0; i < n; i++)
                cr_assert_eq(atomic_load(&hits[i]), 1,
                             "%d threads, %lld items: item %lld ran %d times", threads,
                             (long long)n, (long long)i, atomic_load(&hits[i]));
        }
        pool_free(p);
    }
    free(hits);
}

/* A loop of exactly `threads` one-item grains in which each grain, once claimed, waits until
 * every grain has been claimed. A thread inside a grain cannot claim another, so the loop only
 * completes properly if every thread of the pool took one grain: the caller cannot do it alone.
 * A grain that waits past the deadline gives up (and the loop records it), so a pool whose
 * workers never come fails the test instead of hanging it. */
struct meet_job {
    int n;                            /* grains = threads */
    atomic_int claimed;               /* grains started */
    atomic_int ran[POOL_MAX_THREADS]; /* grains run per thread index (a 16-CPU host overran 8) */
    atomic_int gave_up;               /* a grain stopped waiting at the deadline */
    struct pool *pool;                /* for wait_caller_sleep */
    int wait_caller_sleep;            /* the workers' grains also wait for the caller to sleep */
    int64_t caller_sleeps;            /* pool_counts before the loop */
};

static void meet(void *ctx, int64_t begin, int64_t end, int thread)
{
    struct meet_job *j = ctx;
    (void)begin;
    (void)end;
    atomic_fetch_add(&j->ran[thread], 1);
    atomic_fetch_add(&j->claimed, 1);
    const double t0 = now_s();
    while (atomic_load(&j->claimed) < j->n && !atomic_load(&j->gave_up))
        if (now_s() - t0 > WAIT_S)
            atomic_store(&j->gave_up, 1);
        else
            sched_yield();
    /* A worker's grain holds on until the caller, done with its own grain, has gone to sleep
     * waiting for this one: the caller's sleep and its wake-up by the last grain both run. */
    if (j->wait_caller_sleep && thread != 0)
        for (;;) {
            struct pool_counts c;
            pool_counts(j->pool, &c);
            if (c.caller_sleeps > j->caller_sleeps || atomic_load(&j->gave_up))
                break;
            if (now_s() - t0 > WAIT_S)
                atomic_store(&j->gave_up, 1);
            pause_briefly();
        }
}

/* run one meet loop on p and check that every thread index took exactly one grain */
static void run_meet(struct pool *p, int threads, int wait_caller_sleep, const char *what)
{
    struct meet_job j = {.n = threads, .pool = p, .wait_caller_sleep = wait_caller_sleep};
    struct pool_counts c;
    pool_counts(p, &c);
    j.caller_sleeps = c.caller_sleeps;
    pool_run(p, threads, meet, &j);
    for (int t = 0; t < threads; t++)
        cr_assert_eq(atomic_load(&j.ran[t]), 1,
                     "%s, %d threads: thread %d took %d grains of %d (%s)", what, threads, t,
                     atomic_load(&j.ran[t]), threads,
                     atomic_load(&j.gave_up) ? "a grain waited "
                                               "30 s for the others: the "
                                               "workers do not take grains"
                                             : "grains ran twice?");
    cr_assert(!atomic_load(&j.gave_up), "%s, %d threads: a grain waited %d s", what, threads,
              WAIT_S);
}

Test(pool, every_worker_takes_grains_loop_after_loop, .timeout = 4 * WAIT_S)
{
    for (int threads = 2; threads <= 4; threads++) {
        struct pool *p = NULL;
        struct gate_err err = {0};
        cr_assert_eq(pool_create(&p, threads, &err), 0, "%s", err.msg);
        for (int loop = 0; loop < 50; loop++)
            run_meet(p, threads, 0, "spinning workers");
        pool_free(p);
    }
}

/* With no spin, a worker that found nothing to do sleeps on the condition variable; the next
 * loop must wake it. The test waits until a worker has counted itself asleep before each loop,
 * so every loop starts with a sleeping worker; the meet loop then also holds the workers'
 * grains until the caller has gone to sleep waiting for them, so the caller's wake-up runs. */
Test(pool, sleeping_workers_and_caller_are_woken_after_the_spin, .timeout = 4 * WAIT_S)
{
    for (int threads = 2; threads <= 3; threads++) {
        struct pool *p = NULL;
        struct gate_err err = {0};
        cr_assert_eq(pool_create(&p, threads, &err), 0, "%s", err.msg);
        pool_set_spin_ns(p, 0);
        for (int loop = 0; loop < 10; loop++) {
            struct pool_counts before, c;
            pool_counts(p, &before);
            run_meet(p, threads, 1, "after the spin");
            pool_counts(p, &c);
            cr_assert_gt(c.caller_sleeps, before.caller_sleeps,
                         "%d threads, loop %d: the caller never slept", threads, loop);
            const double t0 = now_s(); /* the workers go back to sleep after the loop */
            do {
                pool_counts(p, &c);
                if (c.worker_sleeps >= before.worker_sleeps + threads - 1)
                    break;
                pause_briefly();
            } while (now_s() - t0 < WAIT_S);
            cr_assert_geq(c.worker_sleeps, before.worker_sleeps + threads - 1,
                          "%d threads, loop %d: %lld worker sleeps in %d s, expected %d more "
                          "than %lld",
                          threads, loop, (long long)c.worker_sleeps, WAIT_S, threads - 1,
                          (long long)before.worker_sleeps);
        }
        pool_free(p);
    }
}

/* The workers are held back (as a busy machine's scheduler may park them): the caller must
 * finish every loop alone, each item once, on thread 0. The loops run on a helper thread, and
 * the test waits for them with a deadline, so a pool that waits for its workers fails here. */
struct alone_run {
    struct pool *p;
    int64_t n;
    atomic_int *hits;
    atomic_int not_caller; /* an item ran on a thread other than 0 */
    atomic_int finished;
};

static void hit_on_caller(void *ctx, int64_t begin, int64_t end, int thread)
{
    struct alone_run *r = ctx;
    if (thread != 0)
        atomic_store(&r->not_caller, 1);
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&r->hits[i], 1);
}

static void *run_loops(void *arg)
{
    struct alone_run *r = arg;
    for (int loop = 0; loop < 100; loop++)
        pool_run(r->p, r->n, hit_on_caller, r);
    atomic_store(&r->finished, 1);
    return NULL;
}

Test(pool, the_caller_finishes_loops_alone_while_workers_are_held, .timeout = 4 * WAIT_S)
{
    const int64_t sizes[] = {2, 7, 256, 1000};
    atomic_int *hits = malloc(1000 * sizeof *hits);
    cr_assert(hits);
    for (int threads = 2; threads <= 4; threads += 2) {
        struct pool *p = NULL;
        struct gate_err err = {0};
        cr_assert_eq(pool_create(&p, threads, &err), 0, "%s", err.msg);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            struct alone_run r = {.p = p, .n = sizes[si], .hits = hits};
            for (int64_t i = 0; i < r.n; i++)
                atomic_init(&hits[i], 0);
            pool_hold_workers(p, 1);
            pthread_t t;
            cr_assert_eq(pthread_create(&t, NULL, run_loops, &r), 0);
            const double t0 = now_s();
            while (!atomic_load(&r.finished) && now_s() - t0 < WAIT_S)
                pause_briefly();
            const int finished = atomic_load(&r.finished);
            pool_hold_workers(p, 0); /* lets a pool that waits for them finish, to report */
            pthread_join(t, NULL);
            cr_assert(finished,
                      "%d threads, %lld items: 100 loops did not finish in %d s with the workers "
                      "held: the caller waits for workers that have not started",
                      threads, (long long)r.n, WAIT_S);
            cr_assert(!atomic_load(&r.not_caller),
                      "%d threads, %lld items: a held worker ran a grain", threads, (long long)r.n);
            for (int64_t i = 0; i < r.n; i++)
                cr_assert_eq(atomic_load(&hits[i]), 100,
                             "%d threads, %lld items: item %lld ran %d times in 100 loops", threads,
                             (long long)r.n, (long long)i, atomic_load(&hits[i]));
        }
        /* released, the workers take grains again */
        for (int loop = 0; loop < 5; loop++)
            run_meet(p, threads, 0, "after the hold");
        pool_free(p);
    }
    free(hits);
}

/* n_threads <= 0: the CPUs this process may run on. Narrowing this thread's affinity mask to one
 * CPU must give a one-thread pool (the online CPU count, the old default, would not). */
Test(pool, the_default_thread_count_follows_the_affinity_mask, .timeout = 4 * WAIT_S)
{
    cpu_set_t all;
    cr_assert_eq(sched_getaffinity(0, sizeof all, &all), 0);
    const int n = pool_default_threads();
    cr_assert(n >= 1 && n <= CPU_COUNT(&all), "default %d threads, affinity mask of %d CPUs", n,
              CPU_COUNT(&all));
    struct pool *p = NULL;
    struct gate_err err = {0};
    cr_assert_eq(pool_create(&p, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(pool_threads(p), n);
    if (n > 1)
        run_meet(p, n, 0, "pool_create(0)");
    pool_free(p);

    int first = 0;
    while (!CPU_ISSET(first, &all))
        first++;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
    cr_assert_eq(pool_default_threads(), 1);
    cr_assert_eq(pool_create(&p, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(pool_threads(p), 1);
    pool_free(p);
    cr_assert_eq(sched_setaffinity(0, sizeof all, &all), 0);
    cr_assert_eq(pool_default_threads(), n);
}

Test(pool, refuses_more_threads_than_it_takes)
{
    struct pool *p = NULL;
    struct gate_err err = {0};
    cr_assert_lt(pool_create(&p, POOL_MAX_THREADS + 1, &err), 0);
    cr_assert_null(p);
    cr_assert(strstr(err.msg, "threads"), "%s", err.msg);
}

Test(pool, cgroup_quota_texts)
{
    /* cgroup v2 cpu.max */
    cr_assert_eq(pool_cgroup_quota("max 100000\n", NULL, NULL), 0);
    cr_assert_eq(pool_cgroup_quota("max\n", NULL, NULL), 0);
    cr_assert_eq(pool_cgroup_quota("100000 100000\n", NULL, NULL), 1);
    cr_assert_eq(pool_cgroup_quota("150000 100000\n", NULL, NULL), 2, "1.5 CPUs round up");
    cr_assert_eq(pool_cgroup_quota("200000 100000", NULL, NULL), 2);
    cr_assert_eq(pool_cgroup_quota("50000 100000\n", NULL, NULL), 1);
    cr_assert_eq(pool_cgroup_quota("400000 50000\n", NULL, NULL), 8);
    cr_assert_eq(pool_cgroup_quota("300000\n", NULL, NULL), 3, "the default period 100000");
    cr_assert_eq(pool_cgroup_quota("", NULL, NULL), 0);
    cr_assert_eq(pool_cgroup_quota("junk\n", NULL, NULL), 0);
    cr_assert_eq(pool_cgroup_quota("150000 junk\n", NULL, NULL), 0);
    cr_assert_eq(pool_cgroup_quota("150000 0\n", NULL, NULL), 0);
    cr_assert_eq(pool_cgroup_quota("-1 100000\n", NULL, NULL), 0);
    cr_assert_eq(pool_cgroup_quota("99999999999999999 1\n", NULL, NULL), POOL_MAX_THREADS);
    /* cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us */
    cr_assert_eq(pool_cgroup_quota(NULL, "-1\n", "100000\n"), 0);
    cr_assert_eq(pool_cgroup_quota(NULL, "250000\n", "100000\n"), 3);
    cr_assert_eq(pool_cgroup_quota(NULL, "100000\n", "100000\n"), 1);
    cr_assert_eq(pool_cgroup_quota(NULL, "250000\n", NULL), 3, "the default period 100000");
    cr_assert_eq(pool_cgroup_quota(NULL, "250000\n", "junk"), 0);
    cr_assert_eq(pool_cgroup_quota(NULL, NULL, "100000\n"), 0);
    /* both: the tighter */
    cr_assert_eq(pool_cgroup_quota("400000 100000", "250000", "100000"), 3);
    cr_assert_eq(pool_cgroup_quota("max 100000", "250000", "100000"), 3);
    cr_assert_eq(pool_cgroup_quota(NULL, NULL, NULL), 0);
}

static void write_file(const char *dir, const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    for (char *s = path + strlen(dir) + 1; (s = strchr(s, '/')); s++) {
        *s = '\0';
        mkdir(path, 0700);
        *s = '/';
    }
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* /proc/self/cgroup names the process's cgroup; the quota that binds is the tightest on the
 * way up to the root, in whichever hierarchy (v2, v1's cpu controller) holds it. */
Test(pool, cgroup_limit_is_the_tightest_quota_up_the_hierarchy)
{
    char root[] = "/tmp/gate-test-pool-XXXXXX";
    cr_assert(mkdtemp(root));
    write_file(root, "cpu.max", "max 100000\n");
    write_file(root, "a/cpu.max", "300000 100000\n");
    write_file(root, "a/b/cpu.max", "max 100000\n");
    write_file(root, "a/b/c/cpu.max", "max 100000\n");
    write_file(root, "cpu,cpuacct/x/cpu.cfs_quota_us", "150000\n");
    write_file(root, "cpu,cpuacct/x/cpu.cfs_period_us", "100000\n");
    write_file(root, "cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    write_file(root, "cpu/y/cpu.cfs_quota_us", "500000\n");
    write_file(root, "cpu/y/cpu.cfs_period_us", "100000\n");
    write_file(root, "unified/u/cpu.max", "100000 100000\n");

    cr_assert_eq(pool_cgroup_limit(root, "0::/a/b/c\n"), 3, "a parent's quota binds");
    cr_assert_eq(pool_cgroup_limit(root, "0::/a/b/c"), 3, "no final newline");
    cr_assert_eq(pool_cgroup_limit(root, "0::/a/b/c/\n"), 3, "a trailing slash");
    cr_assert_eq(pool_cgroup_limit(root, "0::/\n"), 0, "the root has no quota");
    cr_assert_eq(pool_cgroup_limit(root, "0::/not/there\n"), 0, "missing folders: the root's");
    cr_assert_eq(pool_cgroup_limit(root, "3:cpu,cpuacct:/x\n0::/a/b\n"), 2, "v1 is tighter");
    cr_assert_eq(pool_cgroup_limit(root, "2:cpuacct,cpu:/y\n"), 5, "v1 under root/cpu");
    cr_assert_eq(pool_cgroup_limit(root, "4:cpuset:/y\n1:cpuacct:/y\n"), 0,
                 "cpuset and cpuacct are not the cpu controller");
    cr_assert_eq(pool_cgroup_limit(root, "0::/u\n"), 1, "v2 under root/unified (hybrid)");
    cr_assert_eq(pool_cgroup_limit(root, "garbage\n::\n0:/a\n\n"), 0);
    cr_assert_eq(pool_cgroup_limit(root, ""), 0);
    cr_assert_eq(pool_cgroup_limit(root, NULL), 0);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    cr_assert_eq(system(cmd), 0);
}
