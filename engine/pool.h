/* pool.h — a fixed pool of worker threads for data-parallel loops.
 *
 * pool_run() cuts [0, n) into contiguous grains — one per item for n <= 256, else four per
 * thread — which the threads, the caller included, claim in turn from one counter; it returns
 * when all are done. fn may run several times on one thread, on one grain each time, and never
 * on two threads at once with the same `thread`, so per-thread scratch indexed by `thread`
 * stays private. Work items must be independent, so results never depend on the thread count
 * or on which thread ran which grain (the reference twin's outputs are bit-identical for any
 * --threads).
 */
#ifndef GATE_POOL_H
#define GATE_POOL_H

#include <stdint.h>

#include "base/err.h"

struct pool;

/* fn processes items [begin, end) on worker `thread` (0 .. n_threads-1). */
typedef void (*pool_fn)(void *ctx, int64_t begin, int64_t end, int thread);

/* n_threads <= 0 means the number of online CPUs. */
int pool_create(struct pool **out, int n_threads, struct gate_err *err);
void pool_free(struct pool *p);
int pool_threads(const struct pool *p);
void pool_run(struct pool *p, int64_t n, pool_fn fn, void *ctx);

#endif
