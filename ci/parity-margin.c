/* parity-margin.c — a correct build's margin on fresh inputs (docs/gates.md, "Results,
 * 2026-12-03 (late night)"): for N fresh input seeds, parity_run() with the demo's thresholds
 * for the cpu cells (ladders/demo.yaml: min cosine 0.999, KL 1e-3 / 1e-2, the default rel-L2 and
 * forced-layer bounds) over a SPAN-token sequence, 96 positions judged; prints each metric's share
 * of its threshold (1 = FAIL) and the worst over the seeds. Not built by CMake; after a build:
 *   cc -O2 -I. -o parity-margin ci/parity-margin.c build/libgate_core.a build/libgate_base.a \
 *      -ljansson -lm -lpthread -lz -lpcre2-8 -lutf8proc -lsqlite3 -lsodium -lyaml
 *      (a CUDA build: link with g++ and add -L/usr/local/cuda/lib64 -lcublas -lcudart)
 *   ./parity-margin MODEL.gguf cpu.decode 1200 SEED0 N [THREADS] */
#include "engine/model.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "fp MODEL MODE SPAN SEED0 N [threads]\n");
        return 2;
    }
    struct gate_err err = {0};
    struct model *m;
    if (model_load(&m, argv[1], &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    struct mode md;
    if (mode_parse(argv[2], &md, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    int span = atoi(argv[3]);
    unsigned long s0 = strtoul(argv[4], 0, 0);
    int n = atoi(argv[5]);
    int th = argc > 6 ? atoi(argv[6]) : 2;
    double worst[4] = {0};
    int fails = 0;
    for (int i = 0; i < n; i++) {
        struct parity_config c = {.positions = 96,
                                  .min_cosine = 0.999,
                                  .max_mean_kld = 1e-3,
                                  .max_kld = 1e-2,
                                  .near_tie = 0.05,
                                  .route_tie = PARITY_ROUTE_TIE,
                                  .max_rel_l2 = PARITY_MAX_REL_L2,
                                  .max_forced = PARITY_FORCED_MAX,
                                  .max_mean_rel_l2 = PARITY_MAX_MEAN_REL_L2,
                                  .span = span,
                                  .seed = s0 + i,
                                  .token_seed = (s0 + i) * 0x9E3779B97F4A7C15ull};
        struct parity_result r = {0};
        int rc = parity_run(m, &md, NULL, NULL, 0, &c, th, &r, &err);
        if (rc) {
            fprintf(stderr, "rc %d %s\n", rc, err.msg);
            return 2;
        }
        double a = r.rel_l2.max / c.max_rel_l2, b = r.rel_l2.mean / c.max_mean_rel_l2;
        double f = r.forced.measured ? r.forced.worst / c.max_forced : NAN;
        double sv = parity_severity(&r);
        if (a > worst[0])
            worst[0] = a;
        if (b > worst[1])
            worst[1] = b;
        if (f > worst[2])
            worst[2] = f;
        if (sv > worst[3])
            worst[3] = sv;
        fails += !r.pass;
        printf("seed %lu: %s maxrel %.3f meanrel %.3f forced %.3f sev %.3f%s%s\n", s0 + i,
               r.pass ? "PASS" : "FAIL", a, b, f, sv, r.pass ? "" : " ", r.pass ? "" : r.reason);
        fflush(stdout);
        parity_result_free(&r);
    }
    printf("WORST over %d: maxrel %.3f meanrel %.3f forced %.3f sev %.3f; %d FAIL\n", n, worst[0],
           worst[1], worst[2], worst[3], fails);
    return 0;
}
