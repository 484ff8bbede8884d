/* pool.h — a fixed pool of worker threads for data-parallel loops.
 *
 * pool_run() splits [0, n) into one contiguous chunk per thread (the caller runs chunk 0) and
 * returns when all are done. Work items must be independent, so results never depend on the
 * thread count (the reference twin's outputs are bit-identical for any --threads).
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
