/* cmd_oracle.c — `gate parity` and `gate falsify`: parse options, load the model, call the
 * oracle, print its table, optionally write its JSON, map the verdict to an exit code.
 * The commands are thin; the numbers and verdicts come from oracles/parity.c and falsify.c.
 */
#include "cli/cmd_oracle.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "harness/gatedef.h"
#include "oracles/falsify.h"
#include "oracles/gates.h"
#include "oracles/parity.h"

static const char PARITY_USAGE[] =
    "usage: gate parity MODEL.gguf --mode MODE [--positions N [--span S]] [--tokens FILE]\n"
    "                   [--threads N]\n"
    "                   [--fault SPEC]... [--min-cosine X] [--max-mean-kld X] [--max-kld X]\n"
    "                   [--near-tie X] [--route-tie X] [--max-rel-l2 X]\n"
    "                   [--max-mean-rel-l2 X] [--max-forced X] [--json FILE]\n"
    "  Runs MODE (BACKEND.PATH: cuda|cpu|ref . decode|prefill|chat) on the token sequence\n"
    "  (FILE: every position it gives is judged, at least 64; or N >= 64 deterministic ids;\n"
    "  chat: the fixed three-turn conversation) and judges it against the reference twin's\n"
    "  batched forward (--span S: a sequence of S ids, N positions spread over it judged, the\n"
    "  last included). A --fault goes into the mode only. One verdict: the\n"
    "  parity rule a ladder run, the receipt and the release check apply (oracles/parity.h).\n"
    "  Exit 0 PASS, 1 FAIL, 2 input error, 3 mode cannot run on this host.\n";

/* %d and %g: the falsify row's defaults of sweep_samples and min_detection (falsify_usage) */
static const char FALSIFY_USAGE[] =
    "usage: gate falsify MODEL.gguf --mode MODE --fault KIND[,KIND...] [--layers L]\n"
    "                    [--positions P] [--sweep] [--clean-runs N] [--length N]\n"
    "                    [--tokens FILE] [--threads N] [--min-cosine X] [--max-mean-kld X]\n"
    "                    [--max-kld X] [--near-tie X] [--route-tie X] [--max-rel-l2 X]\n"
    "                    [--max-mean-rel-l2 X] [--max-forced X] [--sweep-samples N]\n"
    "                    [--min-detection X] [--power-factor X] [--power-layers N]\n"
    "                    [--json FILE]\n"
    "  Injects each fault (wrong_expert, dropped_expert, uniform_weights, skip_qk_norm, or\n"
    "  'all' for those that apply to the model; options as KIND:rank=R,layers=A-B,positions=A-B)\n"
    "  into MODE and expects parity to reject it, with a witness that it fired. --layers and\n"
    "  --positions scope every fault that names no scope of its own. --sweep injects each kind\n"
    "  at one layer x one position at a time and measures the clean noise ceiling. Without\n"
    "  --sweep, N (default %d) sampled single-layer x single-position injections per kind must be\n"
    "  detected at a rate >= X (default %g; no-ops excluded). Thresholds looser than the\n"
    "  strength floor (min cosine 0.99, max KLD 0.5, mean KLD 0.05, near tie 0.25) are refused.\n"
    "  Every setting flag is the gate table's row of the ladder key (docs/ladder.md): the same\n"
    "  default and bounds; --length N is parity's positions.\n"
    "  Exit 0 when every fault fired and was rejected (sweep: none escaped and the thresholds\n"
    "  sit clear of the noise), 1 otherwise, 2 input error, 3 mode cannot run on this host.\n";

static void falsify_usage(FILE *f)
{
    fprintf(f, FALSIFY_USAGE, (int)gatedef_default("falsify", "sweep_samples"),
            gatedef_default("falsify", "min_detection"));
}

struct common {
    const char *model, *mode_text, *tokens_path, *json_path;
    struct parity_config cfg;
    int threads;
    int length_set;
};

/* Options both commands take; returns 1 when argv[*i] was one, 0 when not, -1 on error. The
 * parity settings parse through the gate table's rows (gatedef_flag), but for the keys in skip. */
static int common_opt(const char *cmd, const char *const *skip, int argc, char **argv, int *i,
                      struct common *c)
{
    const char *v;
    const char *a = argv[*i];
    if (!strcmp(a, "--mode"))
        return cli_value(argc, argv, i, &c->mode_text) ? -1 : 1;
    if (!strcmp(a, "--tokens"))
        return cli_value(argc, argv, i, &c->tokens_path) ? -1 : 1;
    if (!strcmp(a, "--json"))
        return cli_value(argc, argv, i, &c->json_path) ? -1 : 1;
    if (!strcmp(a, "--threads"))
        return (cli_value(argc, argv, i, &v) || cli_int(cmd, a, v, 1, 1024, &c->threads)) ? -1 : 1;
    return gatedef_flag(GATE_ID_PARITY, cmd, skip, argc, argv, i, &c->cfg);
    return 0;
}

/* Split "wrong_expert:rank=1,layers=0-1,dropped_expert" into specs: a comma piece holding '='
 * continues the options of the spec before it. "all" stands for the faults that apply. */
static int add_faults(const char *text, const struct model *m, struct fault_set *fs,
                      struct gate_err *err)
{
    char buf[512], spec[512] = "";
    if (strlen(text) >= sizeof buf)
        return err_set(err, ERR_INPUT, "--fault '%.40s...' is too long", text);
    strcpy(buf, text);
    int rc = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save);; tok = strtok_r(NULL, ",", &save)) {
        if (tok && strchr(tok, '=') && spec[0]) {
            if (strlen(spec) + strlen(tok) + 2 >= sizeof spec)
                return err_set(err, ERR_INPUT, "--fault '%.40s...' is too long", text);
            strcat(spec, ",");
            strcat(spec, tok);
            continue;
        }
        if (spec[0]) {
            if (!strcmp(spec, "all")) {
                struct fault_set all;
                falsify_default_faults(m, &all);
                for (int i = 0; !rc && i < all.n; i++)
                    rc = fault_set_add(fs, &all.f[i], err);
            } else {
                struct fault_spec f;
                if (!(rc = fault_parse(spec, &f, err)))
                    rc = fault_set_add(fs, &f, err);
            }
            if (rc)
                return rc;
        }
        if (!tok)
            break;
        snprintf(spec, sizeof spec, "%s", tok);
    }
    return 0;
}

static int write_json(const char *path, json_t *j, struct gate_err *err)
{
    int rc = 0;
    if (path && json_dump_file(j, path, JSON_INDENT(2) | JSON_SORT_KEYS))
        rc = err_set(err, ERR_ENV, "cannot write '%s'", path);
    json_decref(j);
    return rc;
}

/* The mode, the token file, the model and the --fault options, as parity and falsify take them.
 * With --tokens FILE the file's positions are the ones judged: the rule asks for at least
 * PARITY_MIN_POSITIONS of them (an input error otherwise), and c->cfg.positions becomes their
 * count. */
static int load_inputs(struct common *c, const char *const *faults, int n_faults, struct model **m,
                       struct mode *mode, int32_t **ids, int *n, struct fault_set *fs,
                       struct gate_err *err)
{
    int rc = mode_parse(c->mode_text, mode, err);
    if (!rc)
        rc = parity_config_check(&c->cfg, err);
    if (!rc && c->tokens_path)
        rc = cli_read_ids(c->tokens_path, ids, n, err);
    if (!rc)
        rc = model_load(m, c->model, err);
    if (!rc && c->tokens_path) {
        if (*n < PARITY_MIN_POSITIONS)
            rc = err_set(err, ERR_INPUT, "'%s' gives %d positions; parity judges at least %d",
                         c->tokens_path, *n, PARITY_MIN_POSITIONS);
        c->cfg.positions = *n;
    }
    for (int i = 0; !rc && i < n_faults; i++)
        rc = add_faults(faults[i], *m, fs, err);
    return rc;
}

int cmd_parity(int argc, char **argv)
{
    struct common c = {0};
    gatedef_parity_config(NULL, &c.cfg);
    const char *faults[FAULT_MAX];
    int n_faults = 0, positions_set = 0;
    const char *v;
    for (int i = 1; i < argc; i++) {
        positions_set |= !strcmp(argv[i], "--positions");
        int r = common_opt("parity", NULL, argc, argv, &i, &c);
        if (r < 0)
            return 2;
        if (r)
            continue;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(PARITY_USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--fault")) {
            if (cli_value(argc, argv, &i, &v))
                return 2;
            if (n_faults == FAULT_MAX)
                return cli_fail(2, "parity: at most %d --fault options", FAULT_MAX);
            faults[n_faults++] = v;
        } else if (argv[i][0] == '-' || c.model) {
            fputs(PARITY_USAGE, stderr);
            return cli_fail(2, "parity: unexpected argument '%s'", argv[i]);
        } else {
            c.model = argv[i];
        }
    }
    if (!c.model || !c.mode_text) {
        fputs(PARITY_USAGE, stderr);
        return cli_fail(2, "parity: MODEL.gguf and --mode are required");
    }
    if (c.tokens_path && positions_set)
        return cli_fail(2, "parity: --tokens FILE judges every position the file gives; drop"
                           " --positions");
    struct gate_err err = {0};
    struct model *m = NULL;
    struct mode mode;
    int32_t *ids = NULL;
    int n = 0, code;
    struct fault_set fs = {0};
    struct parity_result r = {0};
    int rc = load_inputs(&c, faults, n_faults, &m, &mode, &ids, &n, &fs, &err);
    if (!rc)
        rc = parity_run(m, &mode, fs.n ? &fs : NULL, ids, n, &c.cfg, c.threads, &r, &err);
    if (rc) {
        code = cli_fail(err_exit_code(rc), "parity: %s", err.msg);
        goto done;
    }
    parity_print(stdout, &r); /* ends with the one verdict line */
    code = r.pass ? 0 : 1;
    if (write_json(c.json_path, parity_result_json(&r), &err))
        code = cli_fail(3, "parity: %s", err.msg);
done:
    parity_result_free(&r);
    free(ids);
    model_free(m);
    return code;
}

/* Apply --layers / --positions to every fault that kept the default scope. */
static int apply_scope(struct fault_set *fs, const char *layers, const char *positions,
                       struct gate_err *err)
{
    char spec[128];
    for (int i = 0; i < fs->n; i++) {
        struct fault_spec *f = &fs->f[i], g;
        if (layers && f->layer_lo == 0 && f->layer_hi == INT_MAX) {
            snprintf(spec, sizeof spec, "%s:layers=%s", fault_kind_name(f->kind), layers);
            if (fault_parse(spec, &g, err))
                return ERR_INPUT;
            f->layer_lo = g.layer_lo;
            f->layer_hi = g.layer_hi;
        }
        if (positions && f->pos_lo == 0 && f->pos_hi == INT_MAX) {
            snprintf(spec, sizeof spec, "%s:positions=%s", fault_kind_name(f->kind), positions);
            if (fault_parse(spec, &g, err))
                return ERR_INPUT;
            f->pos_lo = g.pos_lo;
            f->pos_hi = g.pos_hi;
        }
    }
    return 0;
}

/* ---- sweep progress (issue 16: a sweep on a real model ran 15 silent minutes) ------------- */

struct sweep_progress {
    int tty;
    int last_decile;
    double t0;
};

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fmt_duration(char *buf, size_t n, double s)
{
    const long t = s < 0 || !isfinite(s) ? 0 : (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* falsify_progress_fn for `gate falsify --sweep`, on stderr: on a terminal one redrawn line
 * (done/total, percent, elapsed, estimate left); otherwise a plain line at the start and at
 * every tenth of the runs, so a log shows progress without a line per run. */
static void sweep_progress(void *ctx, int done, int total)
{
    struct sweep_progress *p = ctx;
    const double el = mono_s() - p->t0, frac = total > 0 ? (double)done / total : 1.0;
    char elapsed[32], left[32] = "?";
    fmt_duration(elapsed, sizeof elapsed, el);
    if (done > 0)
        fmt_duration(left, sizeof left, el / done * (total - done));
    if (p->tty) {
        fprintf(stderr, "\r  sweep: %d/%d parity runs (%5.1f%%), %s elapsed, about %s left  ", done,
                total, 100.0 * frac, elapsed, left);
        if (done == total)
            fputc('\n', stderr);
        return;
    }
    const int decile = (int)(frac * 10);
    if (done == 0 || decile > p->last_decile) {
        p->last_decile = decile;
        fprintf(stderr,
                "gate falsify: sweep %d/%d parity runs (%.0f%%), %s elapsed, about %s"
                " left\n",
                done, total, 100.0 * frac, elapsed, left);
    }
}

int cmd_falsify(int argc, char **argv)
{
    struct common c = {0};
    struct falsify_config fc;
    gatedef_falsify_config(NULL, &fc); /* the gate table's defaults, as in a ladder */
    c.cfg = fc.parity;
    /* --positions scopes the faults here; the parity sequence's length is --length */
    static const char *const not_flags[] = {"positions", "span", NULL};
    const struct gate_setting *len = gatedef_setting(GATE_ID_PARITY, "positions");
    const char *faults[FAULT_MAX], *layers = NULL, *positions = NULL, *v;
    int n_faults = 0, sweep = 0;
    for (int i = 1; i < argc; i++) {
        int r = common_opt("falsify", not_flags, argc, argv, &i, &c);
        if (!r)
            r = gatedef_flag(GATE_ID_FALSIFY, "falsify", NULL, argc, argv, &i, &fc);
        if (r < 0)
            return 2;
        if (r)
            continue;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            falsify_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--fault")) {
            if (cli_value(argc, argv, &i, &v))
                return 2;
            if (n_faults == FAULT_MAX)
                return cli_fail(2, "falsify: at most %d --fault options", FAULT_MAX);
            faults[n_faults++] = v;
        } else if (!strcmp(argv[i], "--layers")) {
            if (cli_value(argc, argv, &i, &layers))
                return 2;
        } else if (!strcmp(argv[i], "--positions")) {
            if (cli_value(argc, argv, &i, &positions))
                return 2;
        } else if (!strcmp(argv[i], "--length")) {
            if (cli_value(argc, argv, &i, &v) ||
                cli_int("falsify", "--length", v, (int)len->lo, (int)len->hi, &c.cfg.positions))
                return 2;
        } else if (!strcmp(argv[i], "--clean-runs")) {
            if (cli_value(argc, argv, &i, &v) ||
                cli_int("falsify", "--clean-runs", v, 1, 1000, &fc.n_clean))
                return 2;
        } else if (!strcmp(argv[i], "--sweep")) {
            sweep = 1;
        } else if (argv[i][0] == '-' || c.model) {
            falsify_usage(stderr);
            return cli_fail(2, "falsify: unexpected argument '%s'", argv[i]);
        } else {
            c.model = argv[i];
        }
    }
    if (!c.model || !c.mode_text || !n_faults) {
        falsify_usage(stderr);
        return cli_fail(2, "falsify: MODEL.gguf, --mode and --fault are required");
    }
    struct gate_err err = {0};
    struct model *m = NULL;
    struct mode mode;
    int32_t *ids = NULL;
    int n = 0, code;
    struct fault_set fs = {0};
    struct falsify_result fr = {0};
    struct falsify_sweep_result sr;
    int rc = load_inputs(&c, faults, n_faults, &m, &mode, &ids, &n, &fs, &err);
    if (!rc)
        rc = apply_scope(&fs, layers, positions, &err);
    fc.parity = c.cfg;
    struct sweep_progress sp = {isatty(2), 0, mono_s()};
    if (!rc && sweep)
        rc = falsify_sweep(m, &mode, &fs, ids, n, &fc, c.threads, sweep_progress, &sp, &sr, &err);
    else if (!rc)
        rc = falsify_run(m, &mode, &fs, ids, n, &fc, c.threads, &fr, &err);
    if (rc) {
        code = cli_fail(err_exit_code(rc), "falsify: %s", err.msg);
        goto done;
    }
    if (sweep) {
        falsify_sweep_print(stdout, &sr);
        if (sr.warning[0])
            fprintf(stderr, "gate falsify: %s\n", sr.warning);
        code = sr.pass ? 0 : 1;
    } else {
        falsify_print(stdout, &fr);
        code = fr.pass ? 0 : 1;
    }
    if (write_json(c.json_path, sweep ? falsify_sweep_json(&sr) : falsify_result_json(&fr), &err))
        code = cli_fail(3, "falsify: %s", err.msg);
done:
    falsify_result_free(&fr);
    free(ids);
    model_free(m);
    return code;
}
