/* cmd_stats.c — `gate model stats MODEL.gguf`: is this model healthy enough to gate with?
 *
 * Runs the reference twin over a deterministic token sequence with taps on and reports what the
 * synthetic-model work promises (docs/synth.md): the residual stream's RMS after every layer
 * (bounded, no layer dominating), the logits' RMS and how much they change with context, and for
 * MoE models how the router spreads its choices (usage per expert, how often the top-k set
 * changes between adjacent tokens, the smallest gap between the k-th and (k+1)-th router logit).
 * A model whose every token routes to the same experts cannot test routing faults.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/backend.h"
#include "engine/model.h"
#include "oracles/mode.h"

static const char USAGE[] =
    "usage: gate model stats MODEL.gguf [--tokens N] [--threads N]\n"
    "  The reference twin over N deterministic token ids (default 32) with taps: hidden-state RMS\n"
    "  after each layer, logits RMS, distinct argmax, cosine of adjacent positions' logits, and "
    "for\n"
    "  MoE the expert usage, top-k changes between adjacent tokens and the smallest router gap.\n";

int cmd_model_stats(int argc, char **argv)
{
    const char *path = NULL, *v;
    int n = 32, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--tokens")) {
            if (cli_value(argc, argv, &i, &v) || cli_int("stats", "--tokens", v, 2, 4096, &n))
                return 2;
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
        mode_tokens(1, (uint32_t)V, n, tokens);
        backend_set_taps(b, &taps);
        rc = backend_forward(b, tokens, n, 0, logits, &err);
        backend_set_taps(b, NULL);
    }
    if (!rc) {
        printf("model %s: %s, %d layers, %d positions of deterministic token ids\n", path,
               model_arch_name(hp->arch), L, n);
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
