/* cmd_selftest.c — `gate selftest`: what an operator runs on a new GPU host before trusting it.
 *
 * 1. every CUDA kernel against its CPU twin over its edge shapes (oracles/selftest.c), one table
 *    row per compared output with NMSE, max |error| and the tolerance;
 * 2. end to end: cuda.decode, cuda.prefill and cuda.chat against the reference twin's judge
 *    through the parity oracle, the capability gate (kernel launches counted, a GPU device
 *    reported), and the falsify gate itself (falsify_run) on cuda.decode: the faults injected
 *    on the device (skip_qk_norm; on MoE models also wrong_expert, dropped_expert and
 *    uniform_weights) must each fire (witness) and be REJECTED, and the sampled sweep detect.
 * Models: --model FILE (repeatable), else tiny-dense and tiny-moe (Q4_K_M, seed 1) synthesized in
 * memory. Exit 0 all pass, 1 any failure, 2 usage, 3 no CUDA backend or device (the reason is
 * printed; on a GPU host that is a failure of the host, DESIGN.md settled question 6).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "harness/gatedef.h"
#include "oracles/capability.h"
#include "oracles/compare.h"
#include "oracles/falsify.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include "oracles/selftest.h"

static const char USAGE[] =
    "usage: gate selftest [--kernels-only] [--family NAME] [--model FILE.gguf]...\n"
    "                     [--positions N] [--threads N]\n"
    "  Checks this host's CUDA backend: every kernel against its CPU twin over edge shapes\n"
    "  (a table: NMSE, max |error|, tolerance), then cuda.decode / cuda.prefill / cuda.chat\n"
    "  against the reference twin (parity, capability) and device-injected faults (must be\n"
    "  rejected) on each model (default: tiny-dense and tiny-moe synthesized in memory).\n"
    "  Exit 0 all pass, 1 a failure, 2 usage, 3 no CUDA backend or device.\n";

struct table {
    int rows, failed;
};

static int print_row(void *ctx, const struct selftest_case *c, const float *got, const float *want,
                     int64_t n)
{
    struct table *t = ctx;
    const struct compare_stats s = compare_floats(got, want, n, c->atol, c->rtol);
    const int pass = compare_pass(&s, c->max_nmse);
    t->rows++;
    if (!pass)
        t->failed++;
    printf("%-13s %-58s %-10s %9.2e %9.2e %8.1e %8.1e  %s", c->family, c->shape, c->what, s.nmse,
           s.max_abs, c->max_nmse, c->atol, pass ? "PASS" : "FAIL");
    if (!pass) {
        char why[320];
        printf("  (%s)", compare_describe(&s, got, want, c->max_nmse, why, sizeof why));
    }
    printf("\n");
    return !pass;
}

struct owned_model {
    struct model *m;
    uint8_t *buf; /* in-memory synthesized file, or NULL */
    char name[256];
};

static int synth_model(struct owned_model *om, const char *preset, struct gate_err *err)
{
    struct synth_options o;
    memset(&o, 0, sizeof o);
    const struct synth_spec *s = synth_preset_find(preset);
    if (!s)
        return err_set(err, ERR_INPUT, "selftest: no synth preset '%s'", preset);
    o.spec = *s;
    o.quant = SYNTH_Q4_K_M;
    o.seed = 1;
    size_t size = 0;
    int rc = synth_write_mem(&o, &om->buf, &size, err);
    if (rc)
        return rc;
    struct gguf_file *f = NULL;
    snprintf(om->name, sizeof om->name, "%s Q4_K_M (synthesized)", preset);
    if ((rc = gguf_open_mem(&f, om->buf, size, om->name, 0, err)))
        return rc;
    return model_from_gguf(&om->m, f, err);
}

/* One end-to-end parity row (no faults); returns 1 when the row failed. */
static int e2e_row(const struct model *m, const char *mode_name, int positions, int threads)
{
    struct mode mode;
    struct gate_err err = {0};
    struct parity_config cfg;
    gatedef_parity_config(NULL, &cfg);
    cfg.positions = positions;
    mode_parse(mode_name, &mode, &err);
    struct parity_result pr;
    memset(&pr, 0, sizeof pr);
    int rc = parity_run(m, &mode, NULL, NULL, 0, &cfg, threads, &pr, &err);
    int failed;
    if (rc) {
        printf("  %-14s %-16s ERROR  %s\n", mode_name, "-", err.msg);
        failed = 1;
    } else {
        failed = !pr.pass;
        printf("  %-14s %-16s %-6s min cosine %.6f, mean KL %.2e, argmax %d/%d (%d near ties):"
               " %s\n",
               mode_name, "-", pr.pass ? "PASS" : "FAIL", pr.cosine.min, pr.kld.mean, pr.n_match,
               pr.n_pos, pr.n_tie_flip, pr.reason);
    }
    parity_result_free(&pr);
    return failed;
}

static int e2e_capability(const struct model *m, const char *mode_name, int threads)
{
    struct mode mode;
    struct gate_err err = {0};
    struct capability_result cr;
    memset(&cr, 0, sizeof cr);
    mode_parse(mode_name, &mode, &err);
    if (capability_run(m, &mode, threads, &cr, &err)) {
        printf("  %-14s %-16s ERROR  %s\n", mode_name, "capability", err.msg);
        return 1;
    }
    printf("  %-14s %-16s %-6s %s\n", mode_name, "capability", cr.pass ? "PASS" : "FAIL",
           cr.reason);
    return !cr.pass;
}

/* The faults that apply to m (falsify_default_faults: skip_qk_norm; on MoE also the three
 * routing faults), injected on the device through the falsify gate itself (falsify_run: each
 * fault must fire, per its witness, and be rejected; then the sampled sweep); one row per fault
 * and the gate's verdict. Returns the number of failed rows. */
static int e2e_falsify(const struct model *m, int positions, int threads)
{
    struct mode mode;
    struct gate_err err = {0};
    struct falsify_config cfg;
    gatedef_falsify_config(NULL, &cfg);
    cfg.parity.positions = positions;
    struct fault_set fs;
    falsify_default_faults(m, &fs);
    mode_parse("cuda.decode", &mode, &err);
    struct falsify_result fr;
    if (falsify_run(m, &mode, &fs, NULL, 0, &cfg, threads, &fr, &err)) {
        printf("  %-14s %-16s ERROR  %s\n", "cuda.decode", "falsify", err.msg);
        falsify_result_free(&fr);
        return 1;
    }
    int failed = 0;
    for (int i = 0; i < fr.n; i++) {
        const struct falsify_fault *f = &fr.f[i];
        failed += !f->pass;
        printf("  %-14s %-16s %-6s %s\n", "cuda.decode", fault_kind_name(f->spec.kind),
               f->pass     ? "REJECT"
               : !f->fired ? "NOFIRE"
                           : "ESCAPE",
               f->metric);
    }
    printf("  %-14s %-16s %-6s %s\n", "cuda.decode", "falsify", fr.pass ? "PASS" : "FAIL",
           fr.reason);
    if (!fr.pass && failed == 0) /* every fault rejected, yet the gate failed: the sweep */
        failed = 1;
    falsify_result_free(&fr);
    return failed;
}

static int e2e_model(const struct model *m, const char *name, int positions, int threads)
{
    static const char *MODES[] = {"cuda.decode", "cuda.prefill", "cuda.chat"};
    int failed = 0;
    const int moe = m->hp.n_expert > 0;
    printf("\nmodel %s (%s, %u layers, E %u, heads %u/%u, hd %u%s)\n", name,
           model_arch_name(m->hp.arch), m->hp.n_layer, m->hp.n_embd, m->hp.n_head, m->hp.n_head_kv,
           m->hp.head_dim, moe ? ", MoE" : "");
    for (size_t i = 0; i < sizeof MODES / sizeof MODES[0]; i++) {
        failed += e2e_capability(m, MODES[i], threads);
        failed += e2e_row(m, MODES[i], positions, threads);
    }
    failed += e2e_falsify(m, positions, threads);
    return failed;
}

int cmd_selftest(int argc, char **argv)
{
    int kernels_only = 0, positions = PARITY_MIN_POSITIONS, threads = 0, n_models = 0;
    const char *family = NULL;
    const char *models[16];
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--kernels-only")) {
            kernels_only = 1;
        } else if (!strcmp(argv[i], "--family")) {
            if (cli_value(argc, argv, &i, &family) < 0)
                return 2;
        } else if (!strcmp(argv[i], "--model")) {
            if (cli_value(argc, argv, &i, &v) < 0)
                return 2;
            if (n_models == 16)
                return cli_fail(2, "selftest: at most 16 --model options");
            models[n_models++] = v;
        } else if (!strcmp(argv[i], "--positions")) {
            if (cli_value(argc, argv, &i, &v) < 0 ||
                cli_int("selftest", "--positions", v, PARITY_MIN_POSITIONS, 4096, &positions) < 0)
                return 2;
        } else if (!strcmp(argv[i], "--threads")) {
            if (cli_value(argc, argv, &i, &v) < 0 ||
                cli_int("selftest", "--threads", v, 0, 1024, &threads) < 0)
                return 2;
        } else {
            fputs(USAGE, stderr);
            return cli_fail(2, "selftest: unknown argument '%s'", argv[i]);
        }
    }
    struct gate_err err = {0};
    char dev[160];
    if (selftest_device(dev, sizeof dev, &err)) {
        printf("gate selftest: SKIPPED — %s\n", err.msg);
        return 3;
    }
    printf("gate selftest on %s\n\n", dev);
    printf("%-13s %-58s %-10s %9s %9s %8s %8s  %s\n", "kernel", "shape", "output", "NMSE",
           "max|err|", "tol NMSE", "tol abs", "verdict");
    struct table t = {0, 0};
    int n_cases = 0, n_failed = 0;
    int rc = selftest_kernels(family, print_row, &t, &n_cases, &n_failed, &err);
    if (rc) {
        printf("gate selftest: kernel checks stopped: %s\n", err.msg);
        return rc == ERR_INPUT ? 2 : rc == ERR_ENV ? 3 : 1;
    }
    printf("\nkernels: %d comparisons, %d failed\n", n_cases, n_failed);
    int e2e_failed = 0;
    if (!kernels_only) {
        printf("\nend to end (parity judged against ref at %d positions; faults must be"
               " REJECTED)\n",
               positions);
        if (n_models == 0) {
            static const char *PRESETS[] = {"tiny-dense", "tiny-moe"};
            for (int i = 0; i < 2; i++) {
                struct owned_model om;
                memset(&om, 0, sizeof om);
                err_clear(&err);
                if (synth_model(&om, PRESETS[i], &err)) {
                    printf("  %s: cannot synthesize: %s\n", PRESETS[i], err.msg);
                    e2e_failed++;
                } else {
                    e2e_failed += e2e_model(om.m, om.name, positions, threads);
                }
                model_free(om.m);
                free(om.buf);
            }
        }
        for (int i = 0; i < n_models; i++) {
            struct model *m = NULL;
            err_clear(&err);
            if (model_load(&m, models[i], &err)) {
                printf("  %s: cannot load: %s\n", models[i], err.msg);
                e2e_failed++;
                continue;
            }
            e2e_failed += e2e_model(m, models[i], positions, threads);
            model_free(m);
        }
        printf("\nend to end: %d failed\n", e2e_failed);
    }
    const int ok = n_failed == 0 && e2e_failed == 0;
    printf("gate selftest: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
