/* main.c — the `gate` binary: dispatches to the subcommands declared in cli.h. */
#include <stdio.h>
#include <string.h>

#include "harness/cli.h"

struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
};

static const struct command COMMANDS[] = {
    {"model", cmd_model, "model inspect MODEL.gguf   architecture, hyperparameters, tensors"},
    {"eval", cmd_eval, "eval MODEL.gguf --tokens FILE --logits OUT.f32   logits of all positions"},
    {"generate", cmd_generate, "generate MODEL.gguf (--prompt TEXT | --tokens FILE)   greedy decode"},
    {"ladder", cmd_ladder, "ladder check LADDER.yaml   validate a ladder, print its required cells"},
    {"bench", cmd_bench, "bench MODEL.gguf [--backend ref]   prefill / decode tokens per second"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: gate COMMAND [ARGS]   (gate COMMAND --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(out, "  %s\n", COMMANDS[i].help);
    fprintf(out, "  version\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("gate %s\n", GATE_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name))
            return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "gate: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
