/* pool.h — a fixed pool of worker threads for data-parallel loops.
 *
 * pool_run() cuts [0, n) into contiguous grains — one per item for n <= 256, else four per
 * thread — which the threads, the caller included, claim in turn; it returns when every grain
 * has run. A loop is done when its work is done, not when every worker has checked in: the
 * caller claims grains too and waits only for grains another thread has claimed and not yet
 * finished, so a worker the scheduler has parked costs nothing unless it holds a grain, and one
 * that wakes after the loop finds nothing left (a busy shared machine: issue 27).
 *
 * fn may run several times on one thread, on one grain each time, and never on two threads at
 * once with the same `thread`, so per-thread scratch indexed by `thread` stays private. Work
 * items must be independent, so results never depend on the thread count or on which thread
 * ran which grain (the reference twin's outputs are bit-identical for any --threads).
 *
 * One caller at a time: pool_run is not reentrant and not for concurrent callers.
 */
#ifndef GATE_POOL_H
#define GATE_POOL_H

#include <stdint.h>

#include "base/err.h"

struct pool;

/* fn processes items [begin, end) on worker `thread` (0 .. n_threads-1). */
typedef void (*pool_fn)(void *ctx, int64_t begin, int64_t end, int thread);

/* The most threads one pool takes (pool_create refuses more). */
#define POOL_MAX_THREADS 1024

/* n_threads <= 0 means pool_default_threads(). */
int pool_create(struct pool **out, int n_threads, struct gate_err *err);
void pool_free(struct pool *p);
int pool_threads(const struct pool *p);
void pool_run(struct pool *p, int64_t n, pool_fn fn, void *ctx);

/* The CPUs this process may run on: the count of its sched_getaffinity mask, capped by its
 * cgroup's CPU quota (pool_cgroup_limit on /sys/fs/cgroup), at least 1, at most
 * POOL_MAX_THREADS. */
int pool_default_threads(void);

/* The CPU quota of one cgroup directory's files, as whole CPUs rounded up (a quota of 1.5 CPUs
 * gives 2: the threads can still share it), or 0 for no limit. cpu_max is the text of cgroup
 * v2's cpu.max ("max 100000" or "150000 100000"); cfs_quota and cfs_period are cgroup v1's
 * cpu.cfs_quota_us (-1 for none) and cpu.cfs_period_us. Any may be NULL (file absent); text
 * that does not parse counts as no limit. */
int pool_cgroup_quota(const char *cpu_max, const char *cfs_quota, const char *cfs_period);

/* The tightest CPU quota on the way from this process's cgroup to the root of the hierarchy,
 * or 0 for none. root is where the cgroup file systems are mounted ("/sys/fs/cgroup"); self is
 * the text of /proc/self/cgroup. Looks at cgroup v2 (line "0::PATH", under root and
 * root/unified) and v1 (the controller list naming "cpu", under root/cpu, root/cpu,cpuacct and
 * root/cpuacct,cpu), at PATH and each of its parents. */
int pool_cgroup_limit(const char *root, const char *self);

/* For tests and tuning — none of these changes what pool_run computes. */

/* How long a waiting thread spins (yielding the core at every clock check) before it sleeps on
 * a condition variable; the default is 2 ms (see pool.c). Set it before pool_run, not during. */
void pool_set_spin_ns(struct pool *p, int64_t ns);

/* hold != 0 keeps the workers from claiming grains (they wait as if the scheduler had parked
 * them; the caller then runs whole loops alone); 0 lets them go again. */
void pool_hold_workers(struct pool *p, int hold);

/* How often threads have gone to sleep on the condition variables since pool_create. */
struct pool_counts {
    int64_t worker_sleeps; /* a worker found no grain within the spin and slept */
    int64_t caller_sleeps; /* pool_run's caller waited past the spin for claimed grains */
};
void pool_counts(const struct pool *p, struct pool_counts *out);

#endif
