/* cmd_ladder.c — `gate ladder check LADDER`: validate a ladder and print its expanded cells. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "harness/ladder.h"

static const char USAGE[] =
    "usage: gate ladder check LADDER.yaml\n"
    "  Validates the ladder strictly (unknown keys, wrong types, duplicates, undefined ids,\n"
    "  parity below 64 positions, faults that cannot apply, trust files outside the ladder's\n"
    "  folder, sizes over the bounds) and prints every required cell with its gate settings,\n"
    "  then every excluded cell with its reason, and the counts (\"5 required, 1 excluded\").\n"
    "  Exit 0 when valid, 2 with file:line:column when not.\n";

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

int cmd_ladder(int argc, char **argv)
{
    int help = 0;
    for (int i = 1; i < argc; i++)
        help |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
    if (help) {
        fputs(USAGE, stdout);
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
    printf("%d models, %d hosts: %d required, %d excluded\n", l->n_models, l->n_hosts,
           l->n_cells, l->n_excluded);
    printf("required cells:\n");
    for (int i = 0; i < l->n_cells; i++) {
        const struct ladder_cell *c = &l->cells[i];
        char name[256], faults[256] = "";
        for (int k = 0; k < c->g.falsify.n; k++)
            snprintf(faults + strlen(faults), sizeof faults - strlen(faults), "%s%s",
                     k ? "," : "", fault_kind_name(c->g.falsify.f[k].kind));
        printf("  %-40s parity %d pos cos>=%g kld<=%g/%g tie %g | golden %d tok | throughput"
               " %d runs >= %g/%g tok/s | falsify %s\n",
               ladder_cell_name(l, i, name, sizeof name), c->g.positions, c->g.min_cosine,
               c->g.max_mean_kld, c->g.max_kld, c->g.near_tie, c->g.golden_tokens, c->g.runs,
               c->g.min_prefill_tps, c->g.min_decode_tps, faults[0] ? faults : "(none)");
    }
    print_excluded(l);
    ladder_free(l);
    return 0;
}
