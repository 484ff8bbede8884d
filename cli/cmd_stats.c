/* cmd_stats.c — `gate model stats MODEL.gguf`: is this model healthy enough to gate with?
 *
 * Runs the reference twin over a deterministic token sequence with taps on and reports what the
 * synthetic-model work promises (docs/synth.md): the residual stream's RMS after every layer
 * (bounded, no layer dominating), the logits' RMS and how much they change with context, and for
 * MoE models how the router spreads its choices (usage per expert, how often the top-k set
 * changes between adjacent tokens, the smallest gap between the k-th and (k+1)-th router logit).
 * A model whose every token routes to the same experts cannot test routing faults.
 * And the next-token distribution per position (entropy, top-1 probability, the KL a 25 %
 * temperature error makes) with its min/median/max and the degeneracy verdict of
 * oracles/distribution.h for a max_kld: a near-one-hot model makes every KL bound vacuous.
 * stats_ladder_distributions() is the same verdict for `gate ladder check` (cmd_stats.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cmd_stats.h"

#include "cli/cli.h"
#include "engine/backend.h"
#include "engine/model.h"
#include "oracles/distribution.h"
#include "oracles/mode.h"
#include "oracles/parity.h"

static const char USAGE[] =
    "usage: gate model stats MODEL.gguf [--tokens N] [--seed S] [--max-kld X] [--threads N]\n"
    "  The reference twin over N deterministic token ids (default 32; the splitmix64 stream of\n"
    "  seed S, default 1, modulo the vocabulary: gate's mode_tokens) with taps: hidden-state RMS\n"
    "  after each layer, logits RMS, distinct argmax, cosine of adjacent positions' logits, for\n"
    "  MoE the expert usage, top-k changes between adjacent tokens and the smallest router gap;\n"
    "  then per position the next-token entropy (nats), top-1 probability and the KL a 25 %\n"
    "  logit temperature error makes, their min/median/max, and whether the distributions are\n"
    "  degenerate for parity's max_kld X (default 1e-2; docs/synth.md).\n";

/* Per position and summarized: the next-token distributions of logits (n, V). */
static int print_distributions(const float *logits, const int32_t *tokens, int n, int V,
                               double max_kld, struct gate_err *err)
{
    struct dist_pos *pos = malloc((size_t)n * sizeof *pos);
    struct dist_summary s;
    if (!pos)
        return err_set(err, ERR_ENV, "stats: out of memory for %d positions' figures", n);
    int rc = distribution_positions(logits, n, V, pos, &s, err);
    if (!rc) {
        printf("next-token distribution per position (pos: input id -> top-1 id, top-1 p,"
               " entropy nats, KL of a 25 %% temperature error):\n");
        for (int p = 0; p < n; p++) {
            const float *z = logits + (size_t)p * V;
            int best = 0;
            for (int i = 1; i < V; i++)
                if (z[i] > z[best])
                    best = i;
            printf("  %4d: %6d -> %6d  p %.4f  H %.4g  probe KL %.3g\n", p, (int)tokens[p], best,
                   pos[p].top1, pos[p].entropy, pos[p].probe_kl);
        }
        printf("entropy (nats) min %.4g median %.4g max %.4g; top-1 probability min %.4f median"
               " %.4f max %.4f; median varentropy %.4g, median probe KL %.4g (%d positions)\n",
               s.entropy_min, s.entropy_median, s.entropy_max, s.top1_min, s.top1_median,
               s.top1_max, s.varentropy_median, s.probe_kl_median, s.n);
        char why[400];
        if (distribution_degenerate(&s, max_kld, why, sizeof why))
            printf("DEGENERATE for max_kld %g: %s\n", max_kld, why);
        else
            printf("healthy for max_kld %g: a 25 %% temperature error moves KL by %.3g at the"
                   " median position (>= %g)\n",
                   max_kld, s.probe_kl_median, max_kld);
    }
    free(pos);
    return rc;
}

int cmd_model_stats(int argc, char **argv)
{
    const char *path = NULL, *v;
    int n = 32, threads = 0;
    long long seed = 1;
    double max_kld = 1e-2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--tokens")) {
            if (cli_value(argc, argv, &i, &v) || cli_int("stats", "--tokens", v, 2, 4096, &n))
                return 2;
        } else if (!strcmp(argv[i], "--seed")) {
            char *end = NULL;
            if (cli_value(argc, argv, &i, &v))
                return 2;
            seed = strtoll(v, &end, 10);
            if (!*v || *end || seed < 0)
                return cli_fail(2, "stats: --seed '%s' is not a non-negative integer", v);
        } else if (!strcmp(argv[i], "--max-kld")) {
            char *end = NULL;
            if (cli_value(argc, argv, &i, &v))
                return 2;
            max_kld = strtod(v, &end);
            if (!*v || *end || !(max_kld > 0) || isinf(max_kld))
                return cli_fail(2, "stats: --max-kld '%s' is not a positive number", v);
        } else if (!strcmp(argv[i], "--threads")) {
            if (cli_value(argc, argv, &i, &v) ||
                cli_int("stats", "--threads", v, 1, 1024, &threads))
                return 2;
        } else if (argv[i][0] == '-' || path) {
            fputs(USAGE, stderr);
            return cli_fail(2, "stats: unexpected argument '%s'", argv[i]);
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        fputs(USAGE, stderr);
        return 2;
    }
    struct gate_err err = {0};
    struct model *m = NULL;
    struct backend *b = NULL;
    int rc = model_load(&m, path, &err);
    struct backend_config cfg = {.n_threads = threads, .n_ctx = n, .n_batch = n};
    if (!rc)
        rc = backend_open(&b, backend_judge_name(), m, &cfg, &err);
    if (rc) {
        model_free(m);
        return cli_fail(err_exit_code(rc), "%s", err.msg);
    }
    const struct model_hparams *hp = &m->hp;
    const int L = (int)hp->n_layer, E = (int)hp->n_embd, V = (int)hp->n_vocab;
    const int moe = hp->n_expert > 0, k = moe ? (int)hp->n_expert_used : 0;
    const int X = moe ? (int)hp->n_expert : 0;
    int32_t *tokens = malloc((size_t)n * sizeof *tokens);
    float *logits = malloc((size_t)n * V * sizeof(float));
    struct backend_taps taps = {0};
    taps.hidden = malloc((size_t)L * n * E * sizeof(float));
    if (moe) {
        taps.experts = malloc((size_t)L * n * k * sizeof(int32_t));
        taps.router_kth = malloc((size_t)L * n * sizeof(float));
        taps.router_k1th = malloc((size_t)L * n * sizeof(float));
    }
    if (!tokens || !logits || !taps.hidden ||
        (moe && (!taps.experts || !taps.router_kth || !taps.router_k1th)))
        rc = err_set(&err, ERR_ENV, "out of memory for %d positions", n);
    if (!rc) {
        mode_tokens((uint64_t)seed, (uint32_t)V, n, tokens);
        backend_set_taps(b, &taps);
        rc = backend_forward(b, tokens, n, 0, logits, &err);
        backend_set_taps(b, NULL);
    }
    if (!rc) {
        printf("model %s: %s, %d layers, %d positions of deterministic token ids (seed %lld:"
               " %d",
               path, model_arch_name(hp->arch), L, n, seed, (int)tokens[0]);
        for (int p = 1; p < n && p < 8; p++)
            printf(" %d", (int)tokens[p]);
        printf("%s)\n", n > 8 ? " ..." : "");
        printf("hidden RMS after layer:");
        for (int l = 0; l < L; l++) {
            double ss = 0;
            for (size_t i = 0; i < (size_t)n * E; i++) {
                const double h = taps.hidden[(size_t)l * n * E + i];
                ss += h * h;
            }
            printf(" %.3f", sqrt(ss / ((double)n * E)));
        }
        double ss = 0, cos_sum = 0;
        int distinct = 0;
        int *seen = calloc((size_t)V, sizeof *seen);
        for (int p = 0; p < n; p++) {
            const float *lp = logits + (size_t)p * V;
            int best = 0;
            for (int i = 0; i < V; i++) {
                ss += (double)lp[i] * lp[i];
                if (lp[i] > lp[best])
                    best = i;
            }
            if (seen && !seen[best]++)
                distinct++;
            if (p > 0) {
                const float *lq = lp - V;
                double ab = 0, aa = 0, bb = 0;
                for (int i = 0; i < V; i++) {
                    ab += (double)lp[i] * lq[i];
                    aa += (double)lp[i] * lp[i];
                    bb += (double)lq[i] * lq[i];
                }
                cos_sum += ab / sqrt(aa * bb);
            }
        }
        free(seen);
        printf("\nlogits RMS %.3f, distinct argmax %d/%d, mean cos(logits p, p+1) %.3f\n",
               sqrt(ss / ((double)n * V)), distinct, n, cos_sum / (n - 1));
        if (moe) {
            long *use = calloc((size_t)X, sizeof *use);
            int changes = 0, pairs = 0, below = 0;
            float min_gap = INFINITY;
            for (int l = 0; l < L; l++)
                for (int p = 0; p < n; p++) {
                    const int32_t *e = taps.experts + ((size_t)l * n + p) * k;
                    for (int s = 0; s < k; s++)
                        if (use && e[s] >= 0 && e[s] < X)
                            use[e[s]]++;
                    const float gap = taps.router_kth[l * n + p] - taps.router_k1th[l * n + p];
                    if (gap < min_gap)
                        min_gap = gap;
                    below += gap < 1e-2f;
                    if (p == 0)
                        continue;
                    pairs++;
                    int same = 1; /* same set, whatever the slot order */
                    for (int s = 0; s < k && same; s++) {
                        int found = 0;
                        for (int r = 0; r < k; r++)
                            found |= e[s] == e[r - k];
                        same = found;
                    }
                    changes += !same;
                }
            long lo = -1, hi = 0, unused = 0;
            for (int x = 0; use && x < X; x++) {
                if (lo < 0 || use[x] < lo)
                    lo = use[x];
                if (use[x] > hi)
                    hi = use[x];
                unused += use[x] == 0;
            }
            printf(
                "experts: %d of %d per token; usage over %d choices: min %ld, max %ld, mean %.1f,"
                " unused %ld\n",
                k, X, L * n * k, lo, hi, (double)L * n * k / X, unused);
            if (X <= 16 && use) {
                printf("usage per expert:");
                for (int x = 0; x < X; x++)
                    printf(" %ld", use[x]);
                printf("\n");
            }
            printf("top-k set changes between adjacent tokens: %d/%d; smallest k/(k+1) router gap"
                   " %.4f (%d of %d below 1e-2)\n",
                   changes, pairs, (double)min_gap, below, L * n);
            free(use);
        }
        rc = print_distributions(logits, tokens, n, V, max_kld, &err);
    }
    free(tokens);
    free(logits);
    free(taps.hidden);
    free(taps.experts);
    free(taps.router_kth);
    free(taps.router_k1th);
    backend_close(b);
    model_free(m);
    return rc ? cli_fail(err_exit_code(rc), "%s", err.msg) : 0;
}

/* ---- `gate ladder check`: the same verdict for the ladder's models ------------------------- */

void stats_ladder_distributions(const struct ladder *l, int threads)
{
    for (int i = 0; i < l->n_models; i++) {
        const struct ladder_model *m = &l->models[i];
        struct dist_summary s;
        struct gate_err err = {0};
        if (!m->path || access(m->path, R_OK)) {
            printf("distribution %s: not measured (%s is not written yet; gate run records it in"
                   " every parity receipt)\n",
                   m->id, m->path ? m->path : "no file");
            continue;
        }
        if (distribution_of_model(m->path, PARITY_TOKEN_SEED, STATS_LADDER_POSITIONS, threads, &s,
                                  &err)) {
            fprintf(stderr,
                    "warning: model '%s': its next-token distributions were not measured:"
                    " %s\n",
                    m->id, err.msg);
            continue;
        }
        printf("distribution %s: entropy median %.3g nats (%.3g..%.3g), top-1 median %.3f"
               " (%.3f..%.3f), 25 %% temperature probe KL median %.3g over %d positions\n",
               m->id, s.entropy_median, s.entropy_min, s.entropy_max, s.top1_median, s.top1_min,
               s.top1_max, s.probe_kl_median, s.n);
        /* one warning per distinct max_kld among the model's cells */
        for (int c = 0; c < l->n_cells; c++) {
            const struct ladder_cell *cell = &l->cells[c];
            int seen = 0;
            for (int d = 0; d < c && !seen; d++)
                seen = l->cells[d].model == i && l->cells[d].g.max_kld == cell->g.max_kld;
            char why[400];
            if (cell->model != i || seen ||
                !distribution_degenerate(&s, cell->g.max_kld, why, sizeof why))
                continue;
            fprintf(stderr,
                    "warning: model '%s' has degenerate next-token distributions for its cells'"
                    " max_kld %g: %s\n",
                    m->id, cell->g.max_kld, why);
        }
    }
}
