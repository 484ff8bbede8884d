/* pool.c — see pool.h. Decode issues a hundred-odd short loops per token, so the costs that
 * matter are the wake-up and the wait, and what happens when the machine is busy:
 *
 * - Workers spin (with a pause) on a generation counter for a while before sleeping on a
 *   condition variable; pool_run only takes the mutex and broadcasts when some worker is actually
 *   asleep (a seq_cst handshake: the worker announces itself in `sleepers` before its last look
 *   at the counter, pool_run bumps the counter before looking at `sleepers`, so one of the two
 *   always sees the other).
 * - Items are handed out in chunks (a multiple of four items, about four per thread) from an
 *   atomic counter, so a thread the OS has descheduled delays the loop by at most the chunk it
 *   holds: the others take the rest. Which thread runs a chunk never changes a result (pool.h).
 */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SPIN_PAUSE() _mm_pause()
#else
#define SPIN_PAUSE() ((void)0)
#endif

#define POOL_SPIN_NS 50000L  /* how long a worker spins before sleeping */
#define POOL_WAIT_NS 200000L /* how long pool_run spins for the last chunks before sleeping */
#define POOL_CHUNKS 4        /* chunks per thread */

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000L + t.tv_nsec;
}

/* spin (pausing) while *v == old, for at most max_ns; returns whether it changed */
static int spin_while_u64(atomic_uint_fast64_t *v, uint64_t old, int64_t max_ns)
{
    const int64_t t0 = now_ns();
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(v, memory_order_acquire) != old)
                return 1;
            SPIN_PAUSE();
        }
        if (now_ns() - t0 > max_ns)
            return 0;
    }
}

/* spin (pausing) while *v > 0, for at most max_ns; returns whether it reached 0 */
static int spin_while_positive(atomic_int *v, int64_t max_ns)
{
    const int64_t t0 = now_ns();
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(v, memory_order_acquire) <= 0)
                return 1;
            SPIN_PAUSE();
        }
        if (now_ns() - t0 > max_ns)
            return 0;
    }
}

struct worker {
    struct pool *pool;
    int index;
    pthread_t tid;
};

struct pool {
    int n;
    struct worker *w;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    atomic_uint_fast64_t gen;
    atomic_int pending;  /* workers still inside the current job */
    atomic_int sleepers; /* workers asleep (or about to be) on `wake` */
    int stop;
    /* current job */
    int64_t n_items, grain, n_chunks;
    atomic_int_fast64_t next; /* the next chunk to hand out */
    pool_fn fn;
    void *ctx;
};

/* take chunks until none is left */
static void run_chunks(struct pool *p, int thread)
{
    for (;;) {
        const int64_t c = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (c >= p->n_chunks)
            return;
        const int64_t b = c * p->grain;
        const int64_t e = b + p->grain < p->n_items ? b + p->grain : p->n_items;
        p->fn(p->ctx, b, e, thread);
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        if (!spin_while_u64(&p->gen, seen, POOL_SPIN_NS)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !p->stop)
                pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (p->stop)
            return NULL;
        seen = atomic_load(&p->gen);
        run_chunks(p, w->index);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

int pool_create(struct pool **out, int n_threads, struct gate_err *err)
{
    *out = NULL;
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    struct pool *p = calloc(1, sizeof *p);
    if (!p)
        return err_set(err, ERR_ENV, "out of memory");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->w = calloc((size_t)n_threads, sizeof *p->w);
    if (!p->w) {
        pool_free(p);
        return err_set(err, ERR_ENV, "out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        p->w[i].pool = p;
        p->w[i].index = i;
        if (pthread_create(&p->w[i].tid, NULL, worker_main, &p->w[i]) != 0) {
            p->n = i; /* only join the ones that started */
            pool_free(p);
            return err_set(err, ERR_ENV, "cannot start worker thread %d of %d", i, n_threads);
        }
    }
    *out = p;
    return 0;
}

void pool_free(struct pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; p->w && i < p->n; i++)
        pthread_join(p->w[i].tid, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
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
    /* about POOL_CHUNKS chunks per thread, each a multiple of four items (the decode kernels
     * take weight rows four at a time) */
    const int64_t per = (n + (int64_t)p->n * POOL_CHUNKS - 1) / ((int64_t)p->n * POOL_CHUNKS);
    p->grain = (per + 3) / 4 * 4;
    p->n_chunks = (n + p->grain - 1) / p->grain;
    p->n_items = n;
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->next, 0);
    atomic_store(&p->pending, p->n - 1);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: before the look at sleepers (see the top) */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    run_chunks(p, 0);
    if (!spin_while_positive(&p->pending, POOL_WAIT_NS)) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) > 0)
            pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
