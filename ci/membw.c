/* membw.c — the machine's streaming-read bandwidth, the ceiling of a decode step (issue 17).
 *
 * A decode step of a weight-bound engine reads every weight it touches once, so tokens/s can
 * never exceed (bytes/s the memory delivers) / (weight bytes read per token). This probe measures
 * the numerator: T threads each sum their own contiguous part of one buffer much larger than the
 * last-level cache, R times; each pass reads every byte once. It prints the median and the best
 * pass in GB/s (1e9 bytes/s) as one line per thread count, and `best_gbps=` for scripts.
 *
 * Not part of the gate build: ci/bench-cpu.sh compiles it with `cc -O2 -march=native -pthread`
 * (vectorized 32-byte loads on an AVX2 host). Usage: membw [MiB] [runs] [threads...]
 * (defaults 1024 MiB, 7 runs, threads 1 and 2). Start reading: main().
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct part {
    pthread_t tid;
    const uint64_t *p; /* this thread's words (borrowed from the buffer) */
    size_t n;          /* how many */
    pthread_barrier_t *start;
    uint64_t sum; /* kept so the compiler cannot drop the reads */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Eight independent accumulators: the loads, not one add chain, set the pace. */
static void *read_part(void *arg)
{
    struct part *pt = arg;
    uint64_t a[8] = {0};
    pthread_barrier_wait(pt->start);
    for (size_t i = 0; i + 8 <= pt->n; i += 8)
        for (int j = 0; j < 8; j++)
            a[j] += pt->p[i + j];
    pt->sum = a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7];
    return NULL;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* One pass of `threads` readers over buf (n words); returns bytes/s, or -1 when a thread cannot
 * be started. */
static double one_pass(const uint64_t *buf, size_t n, int threads, uint64_t *sink)
{
    struct part pts[64];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    size_t per = n / (size_t)threads / 8 * 8;
    for (int t = 0; t < threads; t++) {
        pts[t] = (struct part){.p = buf + per * t, .n = per, .start = &start};
        if (pthread_create(&pts[t].tid, NULL, read_part, &pts[t])) {
            fprintf(stderr, "membw: cannot start reader thread %d\n", t);
            exit(1);
        }
    }
    double t0 = now_s();
    pthread_barrier_wait(&start);
    for (int t = 0; t < threads; t++) {
        pthread_join(pts[t].tid, NULL);
        *sink += pts[t].sum;
    }
    double dt = now_s() - t0;
    pthread_barrier_destroy(&start);
    return (double)(per * (size_t)threads * sizeof *buf) / dt;
}

int main(int argc, char **argv)
{
    long mib = argc > 1 ? atol(argv[1]) : 1024;
    int runs = argc > 2 ? atoi(argv[2]) : 7;
    if (mib < 64 || runs < 1 || runs > 100) {
        fprintf(stderr, "usage: membw [MiB >= 64] [runs 1..100] [threads...]\n");
        return 2;
    }
    size_t n = (size_t)mib * 1024 * 1024 / sizeof(uint64_t);
    uint64_t *buf = malloc(n * sizeof *buf);
    if (!buf) {
        fprintf(stderr, "membw: cannot allocate %ld MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < n; i++) /* touch every page: no first-touch faults in the timing */
        buf[i] = i * 0x9e3779b97f4a7c15ull;
    int def[] = {1, 2}, *th = def, nth = 2;
    int given[62];
    if (argc > 3) {
        nth = 0;
        for (int i = 3; i < argc && nth < 62; i++) {
            given[nth] = atoi(argv[i]);
            if (given[nth] < 1 || given[nth] > 64) {
                fprintf(stderr, "membw: threads must be 1..64, not '%s'\n", argv[i]);
                return 2;
            }
            nth++;
        }
        th = given;
    }
    uint64_t sink = 0;
    for (int k = 0; k < nth; k++) {
        double gbps[100];
        one_pass(buf, n, th[k], &sink); /* warm-up */
        for (int r = 0; r < runs; r++)
            gbps[r] = one_pass(buf, n, th[k], &sink) / 1e9;
        qsort(gbps, (size_t)runs, sizeof *gbps, cmp_double);
        printf("membw: %ld MiB, %d thread%s: median %.2f GB/s, best %.2f, worst %.2f (%d runs)"
               " best_gbps=%.2f\n",
               mib, th[k], th[k] == 1 ? "" : "s", gbps[runs / 2], gbps[runs - 1], gbps[0], runs,
               gbps[runs - 1]);
    }
    free(buf);
    fprintf(stderr, "membw: checksum %016llx\n", (unsigned long long)sink);
    return 0;
}
