/* test_cli.c — the `gate` command line as a user meets it (issue 16): --help on every command
 * and subcommand exits 0 with a usage line (never opens a file called "--help"), the top-level
 * usage lists every subcommand within 100 columns, and interrupted writers leave no temp file.
 * Each test runs the real binary ($GATE_BIN, set by ctest) in its own temp folder. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/support/check.h"

static const char *gate_bin(void)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    return bin;
}

/* Run `gate ARGS` in the temp folder; stdout into *out (malloc'd); returns the exit status. */
static int gate(const char *args, char **out)
{
    char cmd[4096], path[1024];
    snprintf(path, sizeof path, "%s/cli.out", check_tmp_dir());
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >'%s' 2>'%s.err'", check_tmp_dir(), gate_bin(),
             args, path, path);
    int rc = system(cmd);
    *out = check_slurp_text(path);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

/* Every command and subcommand the usage promises. */
static const char *const COMMANDS[] = {
    "model",         "model inspect",  "model synth",    "model stats",    "eval",
    "generate",      "tokenize",       "detokenize",     "bench",          "selftest",
    "parity",        "falsify",        "ladder",         "ladder check",   "golden",
    "golden record", "run",            "release",        "release check",  "key",
    "key gen",       "key pub",        "receipt",        "receipt list",   "receipt show",
    "receipt verify", "receipt export", "receipt import",
};

Test(cli, help_works_on_every_command_and_subcommand)
{
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++) {
        static const char *const flags[] = {"--help", "-h"};
        for (int f = 0; f < 2; f++) {
            char args[256], *out = NULL;
            snprintf(args, sizeof args, "%s %s", COMMANDS[i], flags[f]);
            int rc = gate(args, &out);
            cr_expect_eq(rc, 0, "gate %s: exit %d", args, rc);
            cr_expect(out && strstr(out, "usage: gate "), "gate %s printed no usage line:\n%s",
                      args, out ? out : "");
            free(out);
        }
    }
}

Test(cli, top_level_usage_lists_every_subcommand_within_100_columns)
{
    char *out = NULL;
    cr_assert_eq(gate("--help", &out), 0);
    cr_assert(out);
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++) {
        if (!strchr(COMMANDS[i], ' ') && strcmp(COMMANDS[i], "eval") &&
            strcmp(COMMANDS[i], "generate") && strcmp(COMMANDS[i], "tokenize") &&
            strcmp(COMMANDS[i], "detokenize") && strcmp(COMMANDS[i], "bench") &&
            strcmp(COMMANDS[i], "selftest") && strcmp(COMMANDS[i], "parity") &&
            strcmp(COMMANDS[i], "falsify") && strcmp(COMMANDS[i], "run"))
            continue; /* a bare group name ("model", "key"): its subcommands are listed */
        char want[64];
        snprintf(want, sizeof want, "\n  %s ", COMMANDS[i]);
        cr_expect(strstr(out, want), "the usage does not list '%s':\n%s", COMMANDS[i], out);
    }
    for (char *line = out; line && *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        cr_expect(len <= 100, "usage line over 100 columns: %.*s", (int)len, line);
        line = nl ? nl + 1 : NULL;
    }
    free(out);
}

/* ---- interrupted writes leave nothing (issue 16) --------------------------------------------- */

/* 1 when folder dir holds a name starting with prefix. */
static int has_entry(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d)))
        found |= !strncmp(e->d_name, prefix, strlen(prefix));
    if (d)
        closedir(d);
    return found;
}

static void interrupt_synth(int sig)
{
    char dir[900];
    snprintf(dir, sizeof dir, "%s/sig%d", check_tmp_dir(), sig);
    cr_assert_eq(mkdir(dir, 0755), 0);
    char out[1000];
    snprintf(out, sizeof out, "%s/big.gguf", dir);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        /* a real-shape preset at F16: over a gigabyte to write, seconds to minutes of work */
        execl(gate_bin(), gate_bin(), "model", "synth", "--preset", "qwen3-0.6b", "--quant", "F16",
              "--threads", "1", "-o", out, (char *)NULL);
        _exit(127);
    }
    /* wait until the temp file exists (the write is under way); no deadline on a busy host
     * beyond Criterion's own timeout */
    struct timespec nap = {0, 20 * 1000 * 1000};
    while (!has_entry(dir, "big.gguf.tmp.")) {
        int st;
        cr_assert_eq(waitpid(pid, &st, WNOHANG), 0, "synth ended before it was interrupted");
        nanosleep(&nap, NULL);
    }
    cr_assert_eq(kill(pid, sig), 0);
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == sig,
              "gate must end by the signal it got (re-raised), status 0x%x", st);
    cr_expect(!has_entry(dir, "big.gguf.tmp."), "the temp file of the interrupted write remains");
    cr_expect(!has_entry(dir, "big.gguf"), "an interrupted write must leave no output file");
}

Test(cli, sigint_during_model_synth_removes_the_temp_file, .timeout = 300)
{
    interrupt_synth(SIGINT);
}

Test(cli, sigterm_during_model_synth_removes_the_temp_file, .timeout = 300)
{
    interrupt_synth(SIGTERM);
}
