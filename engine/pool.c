/* pool.c — see pool.h. Workers spin on a generation counter, and the caller on the pending
 * count, for up to POOL_SPIN_NS before sleeping on a condition variable, since decode issues
 * hundreds of short loops per token. A loop's grains are claimed from an atomic counter, so a
 * thread that finishes early (a vCPU the host ran longer, an expert with fewer tokens) takes
 * the next grain instead of waiting for the slowest one: with one fixed chunk per thread,
 * 2 threads, 30B-A3B-shape decode measured 40.1 tokens/s against 48.8 with four grains per
 * thread, and the prompt batch's expert loops (about 128 uneven items) gained most from one
 * grain per item (pp64 medians 150 with four per thread, 164 per item; docs/bench.md). */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

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
    atomic_int pending;
    int stop;
    /* current job */
    int64_t n_items;
    int64_t n_grains;         /* [0, n_items) cut into this many grains */
    atomic_int_fast64_t next; /* the next grain to claim */
    pool_fn fn;
    void *ctx;
};

/* claim grains until none is left, running fn on each as thread `thread` */
static void run_grains(struct pool *p, int thread)
{
    for (;;) {
        const int64_t g = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (g >= p->n_grains)
            return;
        const int64_t b = p->n_items * g / p->n_grains, e = p->n_items * (g + 1) / p->n_grains;
        if (b < e)
            p->fn(p->ctx, b, e, thread);
    }
}

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

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* one step of a spin-wait begun at t0: every 1024th spin yields the core (to anyone else
 * runnable on it) and checks the clock; 0 once POOL_SPIN_NS has passed */
static int keep_spinning(int64_t t0, int spins)
{
    if (spins % 1024)
        return 1;
    sched_yield();
    return now_ns() - t0 <= POOL_SPIN_NS;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        const int64_t t0 = now_ns();
        for (int spins = 1; atomic_load_explicit(&p->gen, memory_order_acquire) == seen &&
                            keep_spinning(t0, spins);
             spins++)
            ;
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->gen) == seen && !p->stop)
            pthread_cond_wait(&p->wake, &p->mu);
        pthread_mutex_unlock(&p->mu);
        if (p->stop)
            return NULL;
        seen = atomic_load(&p->gen);
        run_grains(p, w->index);
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
    p->n_items = n;
    p->n_grains = n <= POOL_FINE_MAX ? n : (int64_t)p->n * POOL_GRAINS;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_grains(p, 0);
    const int64_t t0 = now_ns();
    for (int spins = 1;
         atomic_load_explicit(&p->pending, memory_order_acquire) > 0 && keep_spinning(t0, spins);
         spins++)
        ;
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->pending) > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
