/* main.c — the `gate` binary: dispatches to the subcommands (harness/cli.h and the cmd_*.h
 * headers). Every subcommand takes --help and returns the exit codes of DESIGN.md settled
 * question 6. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base/faultsim.h"
#include "cli/cli.h"
#include "cli/cmd_oracle.h"
#include "cli/cmd_receipt.h"
#include "cli/cmd_tokenize.h"
#include "oracles/selftest.h"

struct command {
    const char *name;
    int (*run)(int argc, char **argv);
};

/* Dispatch table; the usage below lists every subcommand on its own line. */
static const struct command COMMANDS[] = {
    {"model", cmd_model},           {"eval", cmd_eval},
    {"generate", cmd_generate},     {"tokenize", cmd_tokenize},
    {"detokenize", cmd_detokenize}, {"bench", cmd_bench},
    {"ladder", cmd_ladder},         {"run", cmd_run},
    {"release", cmd_release},       {"golden", cmd_golden},
    {"parity", cmd_parity},         {"falsify", cmd_falsify},
    {"selftest", cmd_selftest},     {"key", cmd_key},
    {"receipt", cmd_receipt},       {"report", cmd_report},
};

/* Every command and subcommand, one line each, within 100 columns (tested: test_cli). */
static const char USAGE[] =
    "usage: gate COMMAND [ARGS]   (gate COMMAND [SUBCOMMAND] --help for details)\n"
    "\n"
    "models and the engine:\n"
    "  model inspect MODEL.gguf             architecture, hyperparameters, tensors, support\n"
    "  model synth --preset NAME -o F.gguf  write a deterministic synthetic model (--list)\n"
    "  model stats MODEL.gguf               residual-stream and logit statistics per layer\n"
    "  eval MODEL.gguf --tokens F --logits OUT.f32   logits of every position\n"
    "  generate MODEL.gguf (--prompt T | --tokens F) greedy decode\n"
    "  tokenize MODEL.gguf (--text T | --text-file F) ids and pieces\n"
    "  detokenize MODEL.gguf (--ids \"1 2\" | --ids-file F) bytes\n"
    "  bench MODEL.gguf [--backend ref]     prefill / decode tokens per second\n"
    "  selftest [--kernels-only] [--model M.gguf]   CUDA kernels vs twins, cuda.* vs ref\n"
    "oracles, one model at a time:\n"
    "  parity MODEL.gguf --mode MODE        judge a mode against the reference twin\n"
    "  falsify MODEL.gguf --mode MODE --fault KIND   prove the oracle bites (--sweep)\n"
    "ladders and releases:\n"
    "  ladder check LADDER.yaml             validate a ladder, print its cells and positions\n"
    "  golden record LADDER.yaml            record goldens from the reference twin\n"
    "  run LADDER.yaml --host ID            run this host's cells, one signed receipt each\n"
    "  release check LADDER.yaml            sign off only if every required cell PASSes\n"
    "  report LADDER.yaml -o report.html    the release as one static HTML page\n"
    "keys and receipts:\n"
    "  key gen --host ID [-o FILE]          make a host signing key\n"
    "  key pub FILE                         print the public key of a private key file\n"
    "  receipt list [--db DB]               list stored receipts\n"
    "  receipt show ID [--json] [--full]    a receipt: summary first, then details\n"
    "  receipt verify [--db DB] [--all]     signatures, chain, re-judged verdicts\n"
    "  receipt export --out FILE            one signed envelope per line\n"
    "  receipt import FILE                  verify and store another host's receipts\n"
    "  version                              print gate's version\n"
    "\n"
    "exit codes: 0 pass, 1 judged failure or blocked release, 2 usage or input error,\n"
    "3 environment error (no GPU where one is required, disk full).\n";

static void usage(FILE *out)
{
    fputs(USAGE, out);
}

int main(int argc, char **argv)
{
    /* A full disk or a file-size limit must become an error status (EFBIG / ENOSPC from write),
     * reported with a FAILED row or exit 3 — never a process killed by SIGXFSZ. */
    signal(SIGXFSZ, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    faultsim_json_guard();
    if (faultsim_init()) /* GATE_FAULTSIM test hook (base/faultsim.h); off when unset */
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
