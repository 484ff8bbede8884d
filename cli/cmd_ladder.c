/* cmd_ladder.c — `gate ladder check LADDER`: validate a ladder and print its expanded cells;
 * `gate ladder settings`: the gate table's settings as docs/ladder.md's table (Markdown).
 *
 * Each cell's parity line shows the positions it is really judged at: `parity.positions` for
 * the decode and prefill paths, the chat conversation's length for chat cells (computed from
 * the model when its file exists, else stated as known at run time).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cmd_stats.h"
#include "engine/model.h"
#include "harness/gatedef.h"
#include "harness/ladder.h"
#include "oracles/mode.h"

static const char USAGE[] =
    "usage: gate ladder check LADDER.yaml | gate ladder settings\n"
    "  Validates the ladder strictly (unknown keys, wrong types, duplicates, undefined ids,\n"
    "  parity below 64 positions, faults that cannot apply, trust files outside the ladder's\n"
    "  folder, sizes over the bounds) and prints every required cell with its gate settings\n"
    "  (parity at the positions the cell is judged at: chat cells judge the whole chat\n"
    "  conversation, whose length comes from the model when its file exists),\n"
    "  then every excluded cell with its reason, and the counts (\"5 required, 1 excluded\").\n"
    "  Exit 0 when valid, 2 with file:line:column when not.\n"
    "  settings: every gate setting of the gate table with its default, bounds and meaning, as\n"
    "  the Markdown table of docs/ladder.md.\n";

/* Excluded cells are never invisible (issue 10 §3): each with its reason and line. */
static void print_excluded(const struct ladder *l)
{
    if (l->n_excluded == 0)
        return;
    printf("excluded cells (not required; shown in the release matrix as EXCLUDED):\n");
    for (int i = 0; i < l->n_excluded; i++) {
        char name[256];
        printf("  %-40s EXCLUDED (line %d): %s\n", ladder_excluded_name(l, i, name, sizeof name),
               l->excluded[i].line, l->excluded[i].reason);
    }
}

/* The positions a chat cell of lm is judged at: the length of the chat conversation for that
 * model (mode_chat_for_model), or -1 when it cannot be known now (a synth model not written to
 * the cache yet, a file that does not load). */
static int chat_positions(const struct ladder_model *lm)
{
    struct model *m = NULL;
    struct gate_err err = {0};
    int32_t *ids = NULL;
    int *turn_ends = NULL;
    int n = -1, n_turns = 0, fallback = 0;
    if (!lm->path || access(lm->path, R_OK) != 0 || model_load(&m, lm->path, &err))
        goto cleanup;
    if (mode_chat_for_model(m, &ids, &n, &turn_ends, &n_turns, &fallback, &err))
        n = -1;
cleanup:
    free(ids);
    free(turn_ends);
    model_free(m);
    return n;
}

/* "parity N pos" as the cell is judged; chat[] caches chat_positions per model (-2 = not yet). */
static void judged_positions(const struct ladder *l, const struct ladder_cell *c, int *chat,
                             char *out, size_t n)
{
    struct mode md;
    if (mode_parse(c->mode, &md, NULL) || md.path != MODE_CHAT) {
        if (c->g.span > c->g.positions) /* sampled over the span, the last position included */
            snprintf(out, n, "parity %d pos of %d", c->g.positions, c->g.span);
        else
            snprintf(out, n, "parity %d pos", c->g.positions);
        return;
    }
    if (chat[c->model] == -2)
        chat[c->model] = chat_positions(&l->models[c->model]);
    /* a run judges every position of its own fresh conversation (parity_chat_tokens); the fixed
     * one, judged with no run seed, says how long such a conversation is */
    if (chat[c->model] > 0)
        snprintf(out, n, "parity every pos of a fresh chat (the fixed one: %d)", chat[c->model]);
    else
        snprintf(out, n, "parity every pos of a fresh chat (its length known at run time)");
}

static const char *plural(int n)
{
    return n == 1 ? "" : "s";
}

int cmd_ladder(int argc, char **argv)
{
    int help = 0;
    for (int i = 1; i < argc; i++)
        help |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
    if (help) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "settings")) {
        gatedef_settings_markdown(stdout);
        return 0;
    }
    if (argc != 3 || strcmp(argv[1], "check")) {
        fputs(USAGE, stderr);
        return 2;
    }
    struct gate_err err = {0};
    struct ladder *l = NULL;
    int rc = ladder_load(&l, argv[2], &err);
    if (!rc && ((rc = ladder_check_runnable(l, &err)) || (rc = ladder_check_files(l, &err))))
        ladder_free(l);
    if (rc)
        return cli_fail(err_exit_code(rc), "%s", err.msg);
    printf("ladder %s: release %s %s, sha256 %s\n", argv[2], l->name, l->version, l->sha256);
    printf("trusted keys sha256 %s\n", l->trust_sha256);
    printf("%d model%s, %d host%s: %d required, %d excluded\n", l->n_models, plural(l->n_models),
           l->n_hosts, plural(l->n_hosts), l->n_cells, l->n_excluded);
    int *chat = malloc((size_t)(l->n_models ? l->n_models : 1) * sizeof *chat);
    if (!chat) {
        ladder_free(l);
        return cli_fail(3, "ladder check: out of memory for the model table");
    }
    for (int i = 0; i < l->n_models; i++)
        chat[i] = -2;
    printf("required cells:\n");
    for (int i = 0; i < l->n_cells; i++) {
        const struct ladder_cell *c = &l->cells[i];
        char name[256], faults[256] = "", pos[96], kinds[160], proxy[200] = "";
        for (int k = 0; k < c->g.falsify.n; k++)
            snprintf(faults + strlen(faults), sizeof faults - strlen(faults), "%s%s", k ? "," : "",
                     fault_kind_name(c->g.falsify.f[k].kind));
        judged_positions(l, c, chat, pos, sizeof pos);
        const int px = ladder_falsify_proxy_text(&c->g, kinds, sizeof kinds);
        if (px) /* partial: the kinds that go into the judge; the rest into the engine */
            snprintf(proxy, sizeof proxy, " (by proxy%s%s)", px == 1 ? "" : ": ",
                     px == 1 ? "" : kinds);
        printf("  %-40s %s cos>=%g kld<=%g/%g tie %g | golden %d tok | throughput"
               " %d runs >= %g/%g tok/s | falsify %s%s%s\n",
               ladder_cell_name(l, i, name, sizeof name), pos, c->g.min_cosine, c->g.max_mean_kld,
               c->g.max_kld, c->g.near_tie, c->g.golden_tokens, c->g.runs, c->g.min_prefill_tps,
               c->g.min_decode_tps, faults[0] ? faults : "(none)", proxy,
               c->g.consistency ? " | consistency" : "");
        if (c->g.loose_reason[0])
            printf("  %-40s parity looser than the noise allows: %s\n", "", c->g.loose_reason);
    }
    free(chat);
    print_excluded(l);
    stats_ladder_distributions(l, 0); /* degenerate next-token distributions: a warning */
    /* what no cell of an engine can catch: hard-coded hyperparameters, later positions, counts
     * past the small models' */
    int (*const coverage[])(const struct ladder *, char *, size_t) = {
        ladder_hparams_uniform, ladder_span_short, ladder_counts_small};
    for (size_t k = 0; k < sizeof coverage / sizeof coverage[0]; k++) {
        char why[4096];
        if (coverage[k](l, why, sizeof why))
            for (char *line = strtok(why, "\n"); line; line = strtok(NULL, "\n"))
                fprintf(stderr, "warning: %s\n", line);
    }
    ladder_free(l);
    return 0;
}
