/* test_pool.c — the thread pool (engine/pool.c): every item of a loop runs exactly once, on a
 * thread index inside the pool, for any item count and thread count, loop after loop on the same
 * pool (decode runs a hundred-odd loops per token on one pool); a thread index is never in use on
 * two threads at once while the loop is cut into grains.
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "engine/pool.h"

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

Test(pool, every_item_runs_exactly_once_for_any_size_and_thread_count)
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

Test(pool, a_thread_index_is_never_in_use_twice_at_once_and_items_run_once)
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
