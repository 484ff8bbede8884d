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
    "model",        "model inspect",  "model synth",    "model stats",
    "eval",         "generate",       "tokenize",       "detokenize",
    "bench",        "selftest",       "parity",         "falsify",
    "ladder",       "ladder check",   "golden",         "golden record",
    "run",          "release",        "release check",  "key",
    "key gen",      "key pub",        "receipt",        "receipt list",
    "receipt show", "receipt verify", "receipt export", "receipt import",
    "report",
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

Test(cli, sigint_during_model_synth_removes_the_temp_file, .timeout = 1200)
{
    interrupt_synth(SIGINT);
}

Test(cli, sigterm_during_model_synth_removes_the_temp_file, .timeout = 1200)
{
    interrupt_synth(SIGTERM);
}

/* ---- goldens for a new model (issue 16) ------------------------------------------------------ */

/* gate golden record on a fresh ladder whose synthetic model was never written: it synthesizes
 * the model into .gate-cache/ next to the ladder (as gate run does), records, and prints the
 * goldens' digest with the line to pin it; no receipt store is created. */
Test(cli, golden_record_synthesizes_the_model_and_prints_the_pin, .timeout = 1200)
{
    char dir[900], path[1000], cmd[3000];
    snprintf(dir, sizeof dir, "%s/newgold", check_tmp_dir());
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/l.yaml", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("release: {name: r, version: '1'}\n"
          "models:\n  d: {synth: {preset: tiny-dense, quant: Q4_K_M, seed: 1}, sha256: "
          "91d5b06bdb37e3f7c42f37d761857b150130488e18619bd7a06e08cc4bb923d0, arch: qwen3}\n"
          "hosts:\n  local: {device: none, trust: "
          "[ed25519:3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29]}\n"
          "modes: [ref.decode]\n"
          "cells: [{model: d, host: local, mode: ref.decode}]\n"
          "gates: {defaults: {golden: {goldens: g.json, tokens: 4}}}\n"
          "unanchored: {qwen3: test}\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' golden record l.yaml --threads 1 >out 2>err", dir,
             gate_bin());
    int rc = system(cmd);
    snprintf(path, sizeof path, "%s/out", dir);
    char *out = check_slurp_text(path);
    snprintf(path, sizeof path, "%s/err", dir);
    char *err = check_slurp_text(path);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "golden record exit %d:\n%s%s",
              WEXITSTATUS(rc), out ? out : "", err ? err : "");
    struct stat st;
    snprintf(path, sizeof path, "%s/.gate-cache/d-tiny-dense-Q4_K_M-1.gguf", dir);
    cr_expect_eq(stat(path, &st), 0, "the model was not synthesized into .gate-cache/");
    snprintf(path, sizeof path, "%s/g.json", dir);
    cr_expect_eq(stat(path, &st), 0, "no goldens written");
    const char *pin = out ? strstr(out, "gates.golden.sha256: ") : NULL;
    cr_expect(pin && strspn(pin + 21, "0123456789abcdef") == 64,
              "the digest and the line to pin it:\n%s", out ? out : "");
    snprintf(path, sizeof path, "%s/receipts.db", dir);
    cr_expect_neq(stat(path, &st), 0, "recording goldens writes no receipt");
    free(out);
    free(err);
    /* run again (a ladder that gained a model records only the new one): the recorded model is
     * kept, said so, and the file's bytes do not change */
    snprintf(path, sizeof path, "%s/g.json", dir);
    char *before = check_slurp_text(path);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' golden record l.yaml --threads 1 >out 2>err", dir,
             gate_bin());
    rc = system(cmd);
    snprintf(path, sizeof path, "%s/out", dir);
    out = check_slurp_text(path);
    cr_expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "golden record again: exit %d",
              WEXITSTATUS(rc));
    cr_expect(out && strstr(out, "g.json, recorded by gate: kept"), "%s", out ? out : "");
    snprintf(path, sizeof path, "%s/g.json", dir);
    char *after = check_slurp_text(path);
    cr_expect(before && after && !strcmp(before, after), "the goldens file changed");
    free(before);
    free(after);
    free(out);
    /* but an entry of another token count than the cells ask is not kept: refused, naming both */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && sed -i 's/tokens: 4/tokens: 5/' l.yaml && '%s' golden record l.yaml"
             " --threads 1 >out 2>err",
             dir, gate_bin());
    rc = system(cmd);
    snprintf(path, sizeof path, "%s/err", dir);
    err = check_slurp_text(path);
    cr_expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "exit %d", WEXITSTATUS(rc));
    cr_expect(err && strstr(err, "hold 4 tokens per prompt but its cells ask 5"), "%s",
              err ? err : "");
    free(err);
    /* a stale cached file (a preset that changed shape leaves one under the same name) is not
     * the pinned digest: it is rewritten, never used nor left to fail every run */
    snprintf(path, sizeof path, "%s/.gate-cache/d-tiny-dense-Q4_K_M-1.gguf", dir);
    cr_assert_eq(stat(path, &st), 0);
    const off_t size = st.st_size;
    f = fopen(path, "w");
    cr_assert(f);
    fputs("a stale model of another shape\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' golden record l.yaml --threads 1 --force >out 2>err",
             dir, gate_bin());
    rc = system(cmd);
    snprintf(path, sizeof path, "%s/err", dir);
    err = check_slurp_text(path);
    cr_expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "golden record over a stale cache: %s",
              err ? err : "");
    free(err);
    snprintf(path, sizeof path, "%s/.gate-cache/d-tiny-dense-Q4_K_M-1.gguf", dir);
    cr_expect(stat(path, &st) == 0 && st.st_size == size, "the stale file was not rewritten");
}

/* issue 16 wording: `gate model synth --list` fits 100 columns and still lists every preset */
Test(cli, synth_list_fits_100_columns)
{
    char *out = NULL;
    cr_assert_eq(gate("model synth --list", &out), 0);
    cr_assert(out);
    cr_expect(strstr(out, "qwen3-30b-a3b") && strstr(out, "tiny-dense") &&
                  strstr(out, "122134456256"),
              "%s", out);
    /* each synthetic vocabulary's own size: tiny-wide's 2543 tokens, not tiny-dense's 512 (the
     * Q5_K_M file written by synth is 3920608 + the metadata of 2031 more tokens) */
    char dir[900], cmd[4000];
    snprintf(dir, sizeof dir, "%s/listsize", check_tmp_dir());
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && '%s' model synth --preset tiny-wide --quant Q5_K_M -o '%s/w.gguf'"
             " 2>/dev/null && stat -c %%s '%s/w.gguf'",
             dir, gate_bin(), dir, dir);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    char size[64] = "";
    cr_expect(fgets(size, sizeof size, p) != NULL);
    pclose(p);
    size[strcspn(size, "\n")] = '\0';
    const char *q5 = strstr(out, "\nQ5_K_M ");
    q5 = q5 ? strstr(q5 + 1, "\nQ5_K_M ") : NULL; /* the second block: a3b, tiny-wide, ... */
    cr_expect(size[0] && q5 && strstr(q5, size) && strstr(q5, size) < strchr(q5 + 1, '\n'),
              "the listed Q5_K_M size of tiny-wide is not the written file's %s:\n%s", size, out);
    for (char *line = out; line && *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        cr_expect(len <= 100, "line over 100 columns: %.*s", (int)len, line);
        line = nl ? nl + 1 : NULL;
    }
    free(out);
}

/* gate run --input-seed takes 1 to 16 hex digits, not 0 (0 would mean "draw one"): anything else
 * is a usage error naming the value, before anything runs; a good seed gets past the parse (here
 * to the missing ladder). */
Test(cli, run_input_seed_is_hex_and_not_zero)
{
    static const char *const bad[] = {"0",    "0000", "12345678901234567", "xyz", "-1", "+5",
                                      "ca7g", "''"};
    char args[256], err[1200], *out = NULL;
    snprintf(err, sizeof err, "%s/cli.out.err", check_tmp_dir());
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "run no-such-ladder.yaml --host local --input-seed %s", bad[i]);
        cr_expect_eq(gate(args, &out), 2, "gate %s", args);
        free(out);
        char *e = check_slurp_text(err);
        cr_expect(e && strstr(e, "--input-seed must be 1 to 16 hex digits, not 0"), "gate %s: %s",
                  args, e ? e : "");
        free(e);
    }
    cr_expect_eq(gate("run no-such-ladder.yaml --host local --input-seed cA", &out), 2);
    free(out);
    char *e = check_slurp_text(err);
    cr_expect(e && !strstr(e, "--input-seed") && strstr(e, "no-such-ladder.yaml"),
              "a good seed is refused, or the ladder is not named: %s", e ? e : "");
    free(e);
}
