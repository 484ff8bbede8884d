/* test_pool.c — the thread pool (engine/pool.c): every item of a loop runs exactly once, on a
 * thread index inside the pool, for any item count and thread count; and a thread that stalls
 * inside its chunk does not hold back the rest of the loop (the others take the remaining
 * chunks), which is what keeps decode going when the OS parks one of the threads.
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

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

enum { STALL_ITEMS = 4096 };

struct stall_job {
    atomic_int done_by_others; /* items finished by threads other than 1 */
    atomic_int stalled_items;  /* items of the chunk thread 1 stalled in */
    atomic_int stalled;        /* thread 1 has stalled once */
    atomic_int gave_up;        /* thread 1 waited its limit without the rest being done */
    atomic_int caller_waited;  /* the caller's first chunk has waited for thread 1 */
};

/* Thread 1's first chunk stalls until every other item is done (a parked thread); with a fixed
 * share per thread the rest could never be done by the others. */
static void stall_items(void *ctx, int64_t begin, int64_t end, int thread)
{
    struct stall_job *j = ctx;
    const int n = (int)(end - begin);
    if (thread == 1 && !atomic_exchange(&j->stalled, 1)) {
        atomic_store(&j->stalled_items, n);
        /* generous: the others need microseconds; only a fixed split waits it out */
        for (int ms = 0; ms < 20000; ms++) {
            if (atomic_load(&j->done_by_others) == STALL_ITEMS - n)
                return;
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        }
        atomic_store(&j->gave_up, 1);
        return;
    }
    if (thread == 0 && !atomic_exchange(&j->caller_waited, 1))
        /* the caller's first chunk lets thread 1 take one (else the caller could finish the
         * whole loop before thread 1 wakes, and nothing would be tested) */
        for (int ms = 0; ms < 20000 && !atomic_load(&j->stalled); ms++)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
    if (thread != 1)
        atomic_fetch_add(&j->done_by_others, n);
}

Test(pool, a_stalled_thread_leaves_the_rest_of_the_loop_to_the_others, .timeout = 120)
{
    struct pool *p = NULL;
    struct gate_err err = {0};
    cr_assert_eq(pool_create(&p, 2, &err), 0, "%s", err.msg);
    int stalled_runs = 0;
    for (int rep = 0; rep < 3; rep++) {
        struct stall_job j = {0};
        pool_run(p, STALL_ITEMS, stall_items, &j);
        cr_assert(!atomic_load(&j.gave_up),
                  "thread 1 stalled in a chunk of %d items and the other thread did not take "
                  "the remaining %d (a fixed share per thread)",
                  atomic_load(&j.stalled_items), STALL_ITEMS - atomic_load(&j.stalled_items));
        if (atomic_load(&j.stalled)) {
            stalled_runs++;
            cr_assert_lt(atomic_load(&j.stalled_items), STALL_ITEMS / 2,
                         "a chunk is half the loop or more: nothing left to take over");
        }
    }
    cr_assert_eq(stalled_runs, 3, "thread 1 took no chunk in %d of 3 loops", 3 - stalled_runs);
    pool_free(p);
}
