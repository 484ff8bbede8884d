/* cmd_synth.c — `gate model synth` (see cmd_synth.h and docs/synth.md).
 *
 * Every argument is checked (synth_validate) and the free space compared with the exact file
 * size before a byte is written; the write itself is atomic (engine/gguf_write.c), so a failure
 * at any point leaves nothing under the output name. Progress goes to stderr: a bar on a
 * terminal, a plain line per 10% otherwise.
 */
#include "cli/cmd_synth.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/model.h"
#include "engine/synth.h"

static const char USAGE[] =
    "usage: gate model synth [--preset NAME | --arch qwen3|qwen3moe --hidden N --layers N\n"
    "                        --heads N [--kv-heads N] [--head-dim N] (--ffn N | --experts N\n"
    "                        --experts-used K --expert-ffn N) [--vocab N] [--ctx N]\n"
    "                        [--rope-base F] [--eps F] [--tied|--untied]]\n"
    "                        --quant F32|F16|BF16|Q8_0|Q4_K_M|Q5_K_M|Q6_K [--seed N]\n"
    "                        [--fast-blocks] [--threads N] [--tokenizer FILE] -o FILE.gguf\n"
    "       gate model synth --list\n"
    "  Writes a deterministic synthetic model: the same arguments give the same bytes on any\n"
    "  machine and thread count. Shape flags after --preset override the preset. Defaults for\n"
    "  custom shapes: --kv-heads = --heads, --head-dim = hidden/heads, --vocab 512, --ctx 4096,\n"
    "  --rope-base 1e6, --eps 1e-6, untied, --seed 0. A vocabulary of 259..2543 is synthetic\n"
    "  byte-level; 151669 or more is the Qwen3 vocabulary padded (--tokenizer, default\n"
    "  ../shared/tokenizers/qwen3/tokenizer.json.gz).\n"
    "  --fast-blocks  random but valid quantized blocks instead of quantized Gaussian weights:\n"
    "                 for throughput runs on huge shapes (the metadata says so).\n";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct progress {
    int tty;
    int last_decile;
    double t0;
};

static void show(void *arg, uint64_t done, uint64_t total, int i, int n, const char *tensor)
{
    struct progress *p = arg;
    const double frac = total ? (double)done / (double)total : 1.0;
    const double dt = now_s() - p->t0, mb_s = dt > 0 ? (double)done / 1e6 / dt : 0;
    if (p->tty) {
        char bar[31];
        int fill = (int)(frac * 30);
        for (int k = 0; k < 30; k++)
            bar[k] = k < fill ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\r[%s] %5.1f%% %8.1f / %.1f MB %6.0f MB/s %4d/%d %-28.28s", bar,
                100 * frac, (double)done / 1e6, (double)total / 1e6, mb_s, i + 1, n, tensor);
        if (i + 1 == n)
            fputc('\n', stderr);
    } else {
        int decile = (int)(frac * 10);
        if (decile > p->last_decile || i + 1 == n) {
            p->last_decile = decile;
            fprintf(stderr, "synth: %3.0f%% %.1f / %.1f MB, %.0f MB/s, tensor %d/%d %s\n",
                    100 * frac, (double)done / 1e6, (double)total / 1e6, mb_s, i + 1, n, tensor);
        }
    }
}

/* Two tables that fit 100 columns: the shapes, then the exact file sizes with one row per quant
 * and one column per preset (issue 16: the old one-row-per-preset table was 195 wide). */
static int list_presets(void)
{
    int n;
    const struct synth_spec *ps = synth_presets(&n);
    struct gate_err err = {0};
    int64_t vocab_qwen = -1;
    printf("%-14s %-9s %s\n", "preset", "arch", "shape");
    for (int i = 0; i < n; i++) {
        const struct synth_spec *s = &ps[i];
        char shape[160];
        int k =
            snprintf(shape, sizeof shape,
                     "E%" PRIu32 " L%" PRIu32 " H%" PRIu32 "/%" PRIu32 " hd%" PRIu32 " V%" PRIu32,
                     s->n_embd, s->n_layer, s->n_head, s->n_head_kv, s->head_dim, s->n_vocab);
        if (s->arch == MODEL_ARCH_QWEN3)
            snprintf(shape + k, sizeof shape - (size_t)k, " ffn%" PRIu32 "%s", s->n_ff,
                     s->tied ? " tied" : "");
        else
            snprintf(shape + k, sizeof shape - (size_t)k,
                     " X%" PRIu32 " top%" PRIu32 " effn%" PRIu32 "%s", s->n_expert,
                     s->n_expert_used, s->n_ff_exp, s->tied ? " tied" : "");
        printf("%-14s %-9s %s\n", s->name, model_arch_name(s->arch), shape);
    }
    printf("\nfile size in bytes (exact)\n");
    for (int g = 0; g < n; g += 6) { /* six presets per block: 91 columns */
        printf("%-7s", "quant");
        for (int i = g; i < n && i < g + 6; i++)
            printf(" %13s", ps[i].name);
        printf("\n");
        for (int q = 0; q < SYNTH_QUANT_COUNT; q++) {
            printf("%-7s", synth_quant_name(q));
            for (int i = g; i < n && i < g + 6; i++) {
                struct synth_options o = {.spec = ps[i], .quant = q};
                /* the real vocabulary's metadata is read once; a synthetic one is cheap and
                 * differs with its size (tiny-wide's 2543 tokens against tiny-dense's 512) */
                int64_t vocab_small = -1;
                int64_t *vb = ps[i].n_vocab > 4096 ? &vocab_qwen : &vocab_small;
                uint64_t bytes = 0;
                int rc = synth_file_bytes(&o, *vb, &bytes, vb, &err);
                if (rc == ERR_INPUT) { /* a shape the quant cannot take (tiny-odd and K-quants) */
                    printf(" %13s", "-");
                    continue;
                }
                if (rc)
                    return cli_fail(err_exit_code(rc), "%s", err.msg);
                printf(" %13" PRIu64, bytes);
            }
            printf("\n");
        }
    }
    return 0;
}

static int u32_opt(const char *opt, const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || x < lo || x > hi)
        return cli_fail(2, "model synth: %s '%s' is not an integer in [%" PRIu32 ", %" PRIu32 "]",
                        opt, v, lo, hi);
    *out = (uint32_t)x;
    return 0;
}

static int f32_opt(const char *opt, const char *v, float *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end)
        return cli_fail(2, "model synth: %s '%s' is not a number", opt, v);
    *out = (float)x;
    return 0;
}

/* Refuse before writing when the folder of path has less free space than the file needs. */
static int check_space(const struct synth_options *o, const char *path, uint64_t *need)
{
    struct gate_err err = {0};
    int rc = synth_file_bytes(o, -1, need, NULL, &err);
    if (rc)
        return cli_fail(err_exit_code(rc), "%s", err.msg);
    char *copy = strdup(path);
    if (!copy)
        return cli_fail(3, "synth: out of memory for the output path");
    struct statvfs st;
    const char *dir = dirname(copy);
    if (statvfs(dir, &st) != 0) {
        rc = cli_fail(3, "cannot write '%s': %s: %s", path, dir, strerror(errno));
    } else if ((uint64_t)st.f_bavail * st.f_frsize < *need) {
        rc = cli_fail(
            3, "not enough space for '%s': it needs %" PRIu64 " bytes, %s has %" PRIu64 " free",
            path, *need, dir, (uint64_t)st.f_bavail * st.f_frsize);
    }
    free(copy);
    return rc;
}

int cmd_model_synth(int argc, char **argv)
{
    struct synth_options o = {.quant = -1};
    struct synth_spec *s = &o.spec;
    const char *preset = NULL, *arch = NULL, *out = NULL, *quant = NULL, *v;
    int list = 0, shape_flags = 0, tied = -1, n_threads = 0;
    uint32_t vals[12] = {0};
    int have[12] = {0};
    float rope = 0, eps = 0;
    int have_rope = 0, have_eps = 0;
    static const char *const NUM_OPTS[12] = {
        "--vocab",    "--ctx", "--hidden",  "--layers",       "--heads",      "--kv-heads",
        "--head-dim", "--ffn", "--experts", "--experts-used", "--expert-ffn", "--seed"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int num = -1;
        for (int k = 0; k < 12; k++)
            if (!strcmp(a, NUM_OPTS[k]))
                num = k;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (num >= 0) {
            if (cli_value(argc, argv, &i, &v) ||
                u32_opt(a, v, num == 11 ? 0 : 1, num == 11 ? UINT32_MAX : 100000000u, &vals[num]))
                return 2;
            have[num] = 1;
            shape_flags += num != 11;
        } else if (!strcmp(a, "--list")) {
            list = 1;
        } else if (!strcmp(a, "--preset")) {
            if (cli_value(argc, argv, &i, &preset))
                return 2;
        } else if (!strcmp(a, "--arch")) {
            if (cli_value(argc, argv, &i, &arch))
                return 2;
        } else if (!strcmp(a, "--quant")) {
            if (cli_value(argc, argv, &i, &quant))
                return 2;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (cli_value(argc, argv, &i, &out))
                return 2;
        } else if (!strcmp(a, "--tokenizer")) {
            if (cli_value(argc, argv, &i, &o.tokenizer))
                return 2;
        } else if (!strcmp(a, "--rope-base")) {
            if (cli_value(argc, argv, &i, &v) || f32_opt(a, v, &rope))
                return 2;
            have_rope = 1;
            shape_flags++;
        } else if (!strcmp(a, "--eps")) {
            if (cli_value(argc, argv, &i, &v) || f32_opt(a, v, &eps))
                return 2;
            have_eps = 1;
            shape_flags++;
        } else if (!strcmp(a, "--tied") || !strcmp(a, "--untied")) {
            tied = !strcmp(a, "--tied");
            shape_flags++;
        } else if (!strcmp(a, "--fast-blocks")) {
            o.fast_blocks = 1;
        } else if (!strcmp(a, "--threads")) {
            if (cli_value(argc, argv, &i, &v) || cli_int("model synth", a, v, 1, 1024, &n_threads))
                return 2;
        } else {
            fputs(USAGE, stderr);
            return cli_fail(2, "model synth: unexpected argument '%s'", a);
        }
    }
    if (list)
        return list_presets();

    /* the shape: a preset, then overrides; or custom from the flags */
    if (preset) {
        const struct synth_spec *p = synth_preset_find(preset);
        if (!p) {
            int n;
            const struct synth_spec *ps = synth_presets(&n);
            char names[256] = "";
            for (int k = 0; k < n; k++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "",
                         ps[k].name);
            return cli_fail(2, "model synth: unknown preset '%s' (presets: %s)", preset, names);
        }
        *s = *p;
        if (shape_flags)
            s->name = "custom";
    } else {
        if (!arch)
            return cli_fail(2, "model synth: give --preset NAME or --arch qwen3|qwen3moe with"
                               " the shape flags (--list shows the presets)");
        s->name = "custom";
        s->n_vocab = 512;
        s->n_ctx = 4096;
        s->rope_base = 1e6f;
        s->eps = 1e-6f;
        const char *need[] = {"--hidden", "--layers", "--heads"};
        const int idx[] = {2, 3, 4};
        for (int k = 0; k < 3; k++)
            if (!have[idx[k]])
                return cli_fail(2, "model synth: custom shape needs %s", need[k]);
    }
    if (arch) {
        int a = !strcmp(arch, "qwen3")      ? MODEL_ARCH_QWEN3
                : !strcmp(arch, "qwen3moe") ? MODEL_ARCH_QWEN3MOE
                                            : -1;
        if (a < 0)
            return cli_fail(2, "model synth: --arch '%s' is not qwen3 or qwen3moe", arch);
        if (preset && (int)s->arch != a)
            return cli_fail(2, "model synth: --arch %s contradicts preset '%s' (%s)", arch, preset,
                            model_arch_name(s->arch));
        s->arch = (enum model_arch)a;
    }
    uint32_t *fields[11] = {&s->n_vocab,  &s->n_ctx,         &s->n_embd,   &s->n_layer,
                            &s->n_head,   &s->n_head_kv,     &s->head_dim, &s->n_ff,
                            &s->n_expert, &s->n_expert_used, &s->n_ff_exp};
    for (int k = 0; k < 11; k++)
        if (have[k])
            *fields[k] = vals[k];
    if (!preset) {
        if (!have[5])
            s->n_head_kv = s->n_head;
        if (!have[6])
            s->head_dim = s->n_head ? s->n_embd / s->n_head : 0;
        if (s->arch == MODEL_ARCH_QWEN3MOE && !have[7])
            s->n_ff = s->n_ff_exp * (s->n_expert_used ? s->n_expert_used : 1);
    }
    if (have_rope)
        s->rope_base = rope;
    if (have_eps)
        s->eps = eps;
    if (tied >= 0)
        s->tied = tied;
    o.seed = vals[11];
    o.n_threads = n_threads;
    if (!quant)
        return cli_fail(2, "model synth: --quant is required (F32, F16, BF16, Q8_0, Q4_K_M,"
                           " Q5_K_M, Q6_K)");
    if ((o.quant = synth_quant_from_name(quant)) < 0)
        return cli_fail(2,
                        "model synth: unknown --quant '%s' (F32, F16, BF16, Q8_0, Q4_K_M,"
                        " Q5_K_M, Q6_K)",
                        quant);
    if (!out)
        return cli_fail(2, "model synth: -o FILE.gguf is required");
    struct gate_err err = {0};
    int rc = synth_validate(&o, &err);
    if (rc)
        return cli_fail(err_exit_code(rc), "model synth: %s", err.msg);
    uint64_t need = 0;
    if ((rc = check_space(&o, out, &need)))
        return rc;

    struct progress p = {.tty = isatty(2), .last_decile = -1, .t0 = now_s()};
    fprintf(stderr, "synth: writing %s (%s, %s%s, seed %" PRIu32 ", %" PRIu64 " bytes)\n", out,
            s->name, synth_quant_name(o.quant), o.fast_blocks ? ", fast blocks" : "", o.seed, need);
    rc = synth_write(&o, out, show, &p, &err);
    if (rc) {
        if (p.tty)
            fputc('\n', stderr);
        return cli_fail(err_exit_code(rc), "model synth: %s", err.msg);
    }
    double dt = now_s() - p.t0;
    fprintf(stderr, "synth: wrote %s: %" PRIu64 " bytes in %.1f s (%.0f MB/s)\n", out, need, dt,
            dt > 0 ? (double)need / 1e6 / dt : 0);
    return 0;
}
