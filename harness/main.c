/* main.c — the `gate` binary: dispatches to the subcommands (harness/cli.h and the cmd_*.h
 * headers). Every subcommand takes --help and returns the exit codes of DESIGN.md settled
 * question 6. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "harness/cli.h"
#include "harness/cmd_oracle.h"
#include "harness/cmd_receipt.h"
#include "harness/selftest.h"
#include "harness/cmd_tokenize.h"
#include "receipts/faultsim.h"

struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
};

static const struct command COMMANDS[] = {
    {"model", cmd_model, "model (inspect MODEL.gguf | synth ...)   inspect or synthesize a model"},
    {"eval", cmd_eval, "eval MODEL.gguf --tokens FILE --logits OUT.f32   logits of all positions"},
    {"generate", cmd_generate, "generate MODEL.gguf (--prompt TEXT | --tokens FILE)   greedy decode"},
    {"tokenize", cmd_tokenize, "tokenize MODEL.gguf (--text T | --text-file F)   ids and pieces"},
    {"detokenize", cmd_detokenize, "detokenize MODEL.gguf (--ids \"1 2\" | --ids-file F)   bytes"},
    {"bench", cmd_bench, "bench MODEL.gguf [--backend ref]   prefill / decode tokens per second"},
    {"ladder", cmd_ladder, "ladder check LADDER.yaml   validate a ladder, print its required cells"},
    {"run", cmd_run, "run LADDER.yaml --host ID   run this host's cells, one signed receipt each"},
    {"release", cmd_release, "release check LADDER.yaml   sign off only if every cell PASSes"},
    {"golden", cmd_golden, "golden record LADDER.yaml   record goldens from the reference twin"},
    {"parity", cmd_parity, "parity MODEL.gguf --mode MODE   judge a mode against the reference"},
    {"falsify", cmd_falsify, "falsify MODEL.gguf --mode MODE --fault KIND   prove the oracle bites"},
    {"selftest", cmd_selftest, "selftest [--kernels-only] [--model M.gguf]   CUDA kernels vs twins, cuda.* vs ref"},
    {"key", cmd_key, "key gen --host ID [-o FILE]   make a host signing key"},
    {"receipt", cmd_receipt, "receipt (list | show ID | verify | export | import)   audit receipts"},
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
    /* A full disk or a file-size limit must become an error status (EFBIG / ENOSPC from write),
     * reported with a FAILED row or exit 3 — never a process killed by SIGXFSZ. */
    signal(SIGXFSZ, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    faultsim_json_guard();
    if (faultsim_init()) /* GATE_FAULTSIM test hook (receipts/faultsim.h); off when unset */
        return 2;
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
