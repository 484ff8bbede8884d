/* test_key.c — key files as an attacker with write access to their folder sees them (issue 11,
 * "output and limits"): the .pub writer's temporary file cannot be hijacked by a planted symlink,
 * and key_load() refuses a FIFO (without hanging) and an oversized file; and the key file's
 * life (suite `key`, moved from test_receipt.c): generated with mode 0600 and loaded back, never
 * overwritten, refused when others can read it, a bad host or a corrupt file refused, public
 * ids parsed, the public file written.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "receipts/key.h"
#include "tests/support/check.h"
#include "tests/support/ladderfix.h"
#include "tests/support/receiptfix.h"

static char dir[600];

static void setup(void)
{
    check_make_dir(dir, sizeof dir, "key-");
}

TestSuite(key_files, .init = setup, .timeout = 1200);

static const char *in_dir(const char *name)
{
    return check_path(dir, name);
}

static char *slurp_text(const char *path)
{
    size_t n = 0;
    uint8_t *b = check_slurp(path, &n);
    cr_assert(b, "cannot read %s", path);
    char *s = malloc(n + 1);
    memcpy(s, b, n);
    s[n] = '\0';
    free(b);
    return s;
}

Test(key_files, pub_writer_does_not_follow_a_planted_temp_symlink)
{
    struct key_pair k;
    struct gate_err err = {0};
    cr_assert_eq(key_generate(in_dir("h.key"), "h", &k, &err), 0, "%s", err.msg);
    const char *victim = in_dir("victim.txt");
    FILE *f = fopen(victim, "w");
    fputs("precious\n", f);
    fclose(f);
    /* the old writer used "<path>.tmp.<pid>": plant that name as a symlink to the victim */
    const char *pub = in_dir("demo.pub");
    char planted[900];
    snprintf(planted, sizeof planted, "%s.tmp.%ld", pub, (long)getpid());
    cr_assert_eq(symlink(victim, planted), 0);
    cr_assert_eq(key_write_public(pub, &k, &err), 0, "%s", err.msg);
    char *v = slurp_text(victim);
    cr_expect_str_eq(v, "precious\n", "the write went through the planted symlink");
    free(v);
    struct stat st;
    cr_assert_eq(lstat(pub, &st), 0);
    cr_expect(S_ISREG(st.st_mode), "demo.pub is a regular file, not the planted symlink");
    cr_expect_eq(st.st_mode & 0777, 0644);
    char *text = slurp_text(pub);
    char want[100];
    snprintf(want, sizeof want, "%s\n", k.id);
    cr_expect_str_eq(text, want);
    free(text);
    /* no temporary file is left next to it (the planted link is the attacker's own) */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | grep -c 'demo.pub.tmp') -eq 1", dir);
    cr_expect_eq(system(cmd), 0, "a temporary file was left in %s", dir);
    key_wipe(&k);
}

Test(key_files, pub_writer_failure_leaves_nothing)
{
    struct key_pair k;
    struct gate_err err = {0};
    cr_assert_eq(key_generate(in_dir("h.key"), "h", &k, &err), 0, "%s", err.msg);
    cr_assert_eq(mkdir(in_dir("taken.pub"), 0700), 0); /* rename over a folder fails */
    cr_expect_eq(key_write_public(in_dir("taken.pub"), &k, &err), ERR_ENV);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s' | grep 'tmp')\"", dir);
    cr_expect_eq(system(cmd), 0, "a temporary file was left in %s", dir);
    key_wipe(&k);
}

Test(key_files, load_refuses_a_fifo_without_hanging)
{
    struct key_pair k;
    struct gate_err err = {0};
    const char *fifo = in_dir("fifo.key");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_expect_eq(key_load(fifo, &k, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "not a regular file"), "%s", err.msg);
}

Test(key_files, load_refuses_an_oversized_file)
{
    struct key_pair k;
    struct gate_err err = {0};
    const char *path = in_dir("big.key");
    cr_assert_eq(key_generate(path, "h", &k, &err), 0, "%s", err.msg);
    FILE *f = fopen(path, "a");
    cr_assert(f);
    for (int i = 0; i < 1 << 14; i++)
        fputs("# padding padding padding padding padding padding padding padding\n", f);
    fclose(f);
    cr_expect_eq(key_load(path, &k, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "more than the 4096"), "%s", err.msg);
}

/* ---- the key-mode hint (issue 16: no hint suggests a command that refuses) ----------------- */

/* Run the gate binary with args (a shell fragment), output into *out (malloc'd); exit status. */
static int gate(char **out, const char *args)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    char cmd[4000];
    const char *log = in_dir("gate.out");
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>&1", bin, args, log);
    int st = system(cmd);
    *out = check_slurp_text(log);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The text after `after` in s up to the first of `stop` (a command the hint suggests). */
static char *hint(const char *s, const char *after, char stop)
{
    const char *p = strstr(s, after);
    cr_assert(p, "no '%s' in: %s", after, s);
    p += strlen(after);
    const char *e = strchr(p, stop);
    cr_assert(e, "unterminated hint in: %s", s);
    return strndup(p, (size_t)(e - p));
}

Test(key_files, the_key_hints_of_gate_run_suggest_commands_that_work)
{
    char args[3000], *out, ladder[800], loose[800], missing[800], db[800];
    snprintf(ladder, sizeof ladder, "%s", in_dir("k.yaml"));
    snprintf(loose, sizeof loose, "%s", in_dir("loose.key"));
    snprintf(missing, sizeof missing, "%s", in_dir("new.key"));
    snprintf(db, sizeof db, "%s", in_dir("r.db"));
    snprintf(args, sizeof args, "cp '%s/conformance/qwen3moe-tiny-q4_k_m/model.gguf' '%s'",
             check_shared_dir(), in_dir("m.gguf"));
    cr_assert_eq(system(args), 0);
    /* a ladder gate run accepts up to the key: the model and its goldens recorded and pinned */
    char gsha[65];
    ladderfix_record_goldens(in_dir("m.gguf"), in_dir("g.json"), 16, gsha);
    FILE *f = fopen(ladder, "w");
    cr_assert(f);
    fprintf(f,
            "release: {name: r, version: '1'}\n"
            "models:\n  m: {path: m.gguf, sha256: "
            "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3moe}\n"
            "hosts:\n  local: {device: none, trust: [ed25519:"
            "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29]}\n"
            "modes: [ref.decode]\n"
            "cells: [{models: [m], hosts: [local], modes: [ref.decode]}]\n"
            "gates: {defaults: {parity: {positions: 64}, golden: {goldens: g.json, sha256: %s}}}\n"
            "unanchored: {qwen3: \"t\", qwen3moe: \"t\"}\n",
            gsha);
    fclose(f);
    /* a key readable by group/other: the hint is chmod, never `gate key gen` (which refuses to
     * overwrite the existing file) */
    struct key_pair k;
    struct gate_err err = {0};
    cr_assert_eq(key_generate(loose, "local", &k, &err), 0, "%s", err.msg);
    key_wipe(&k);
    cr_assert_eq(chmod(loose, 0644), 0);
    snprintf(args, sizeof args, "run '%s' --host local --key '%s' --db '%s'", ladder, loose, db);
    cr_expect_eq(gate(&out, args), 2, "%s", out);
    cr_expect(!strstr(out, "key gen"), "the hint suggests `gate key gen`, which refuses: %s", out);
    char *fix = hint(out, "run chmod", '\n');
    free(out);
    snprintf(args, sizeof args, "cd '%s' && chmod%s", dir, fix);
    cr_expect_eq(system(args), 0, "the suggested 'chmod%s' failed", fix);
    free(fix);
    cr_expect_eq(key_load(loose, &k, &err), 0, "after the suggested command: %s", err.msg);
    key_wipe(&k);
    /* a missing key: `gate key gen` is the hint, and it works */
    snprintf(args, sizeof args, "run '%s' --host local --key '%s' --db '%s'", ladder, missing, db);
    cr_expect_eq(gate(&out, args), 2, "%s", out);
    char *gen = hint(out, "make one with: gate ", ')');
    free(out);
    cr_expect_eq(gate(&out, gen), 0, "the suggested 'gate %s' failed: %s", gen, out);
    free(out);
    free(gen);
    err_clear(&err);
    cr_expect_eq(key_load(missing, &k, &err), 0, "%s", err.msg);
    key_wipe(&k);
}

/* ---- keys ----------------------------------------------------------------------------------- */

Test(key, generate_writes_mode_0600_and_loads_back)
{
    char path[512];
    struct key_pair k, l;
    struct gate_err err = {0};
    struct stat st;
    receiptfix_path(path, sizeof path, "deep/er/h200.key");
    cr_assert_eq(key_generate(path, "h200", &k, &err), 0, "%s", err.msg);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
    cr_assert_eq(strncmp(k.id, "ed25519:", 8), 0);
    cr_assert_eq(strlen(k.id), KEY_ID_LEN);
    cr_assert_eq(key_load(path, &l, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(k.pk, l.pk, 32), 0);
    cr_assert_eq(memcmp(k.sk, l.sk, 64), 0);
    cr_assert_str_eq(l.host, "h200");
    cr_assert_str_eq(l.id, k.id);
}

Test(key, refuses_to_overwrite)
{
    char path[512];
    struct key_pair k;
    struct gate_err err = {0};
    receiptfix_path(path, sizeof path, "once.key");
    cr_assert_eq(key_generate(path, "h", &k, &err), 0, "%s", err.msg);
    size_t n1 = 0, n2 = 0;
    uint8_t *before = check_slurp(path, &n1);
    cr_assert_eq(key_generate(path, "h", &k, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "already exists"), "%s", err.msg);
    uint8_t *after = check_slurp(path, &n2);
    cr_assert(n1 == n2 && !memcmp(before, after, n1), "the existing key was changed");
    free(before);
    free(after);
}

Test(key, refuses_a_key_readable_by_others)
{
    char path[512];
    struct key_pair k;
    struct gate_err err = {0};
    receiptfix_path(path, sizeof path, "open.key");
    cr_assert_eq(key_generate(path, "h", &k, &err), 0, "%s", err.msg);
    cr_assert_eq(chmod(path, 0644), 0);
    cr_assert_eq(key_load(path, &k, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "0644") && strstr(err.msg, "chmod 600"), "%s", err.msg);
}

Test(key, refuses_a_bad_host_and_a_corrupt_file)
{
    char path[512];
    struct key_pair k;
    struct gate_err err = {0};
    receiptfix_path(path, sizeof path, "bad.key");
    cr_assert_eq(key_generate(path, "no spaces", &k, &err), ERR_INPUT);
    cr_assert_eq(access(path, F_OK), -1, "a refused key left a file");
    err_clear(&err);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert(fd >= 0);
    const char *text = "host: h\npublic: ed25519:"
                       "0000000000000000000000000000000000000000000000000000000000000000\n"
                       "seed: 0101010101010101010101010101010101010101010101010101010101010101\n";
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    cr_assert_eq(key_load(path, &k, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "does not match"), "%s", err.msg);
}

Test(key, parses_public_ids)
{
    struct key_pair k = receiptfix_key("pub.key", "h");
    unsigned char pk[32];
    char upper[100];
    struct gate_err err = {0};
    cr_assert_eq(key_parse_public(k.id, pk, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(pk, k.pk, 32), 0);
    snprintf(upper, sizeof upper, "  %s\n", k.id);
    for (char *p = upper + 10; *p; p++)
        if (*p >= 'a' && *p <= 'f')
            *p = (char)(*p - 'a' + 'A');
    cr_assert_eq(key_parse_public(upper, pk, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(pk, k.pk, 32), 0);
    cr_assert_eq(key_parse_public("ed25519:abcd", pk, &err), ERR_INPUT);
    cr_assert_eq(key_parse_public("rsa:00", pk, NULL), ERR_INPUT);
    char id[80];
    key_id_of(k.pk, id);
    cr_assert_str_eq(id, k.id);
}

Test(key, writes_the_public_file)
{
    struct key_pair k = receiptfix_key("w.key", "h");
    char path[512];
    struct gate_err err = {0};
    receiptfix_path(path, sizeof path, "w.pub");
    cr_assert_eq(key_write_public(path, &k, &err), 0, "%s", err.msg);
    size_t n = 0;
    char *text = (char *)check_slurp(path, &n);
    cr_assert_not_null(text);
    cr_assert_eq(n, KEY_ID_LEN + 1);
    cr_assert_eq(memcmp(text, k.id, KEY_ID_LEN), 0);
    free(text);
}

Test(key, refuses_a_key_readable_by_its_group)
{
    char path[512];
    struct key_pair k;
    struct gate_err err = {0};
    receiptfix_path(path, sizeof path, "group.key");
    cr_assert_eq(key_generate(path, "h", &k, &err), 0, "%s", err.msg);
    cr_assert_eq(chmod(path, 0640), 0);
    cr_assert_eq(key_load(path, &k, &err), ERR_INPUT, "a group-readable key was loaded");
    cr_assert(strstr(err.msg, "0640"), "%s", err.msg);
}

/* A key file holding text, mode 0600, at name; returns key_load's status. */
static int load_text(const char *name, const char *text, struct gate_err *err)
{
    char path[512];
    struct key_pair k;
    receiptfix_path(path, sizeof path, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert(fd >= 0, "cannot create %s", path);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return key_load(path, &k, err);
}

Test(key, refuses_a_seed_that_is_short_or_has_trailing_characters)
{
    struct gate_err err = {0};
    cr_expect_eq(load_text("short.key", "host: h\nseed: 01010101010101010101010101010101\n", &err),
                 ERR_INPUT, "a 16-byte seed was loaded");
    cr_expect(strstr(err.msg, "no valid 'seed:' line"), "%s", err.msg);
    err_clear(&err);
    cr_expect_eq(
        load_text("junk.key",
                  "host: h\n"
                  "seed: 0101010101010101010101010101010101010101010101010101010101010101zz\n",
                  &err),
        ERR_INPUT, "a seed with trailing characters was loaded");
    cr_expect(strstr(err.msg, "no valid 'seed:' line"), "%s", err.msg);
    err_clear(&err);
    cr_expect_eq(
        load_text("good.key",
                  "host: h\n"
                  "seed: 0101010101010101010101010101010101010101010101010101010101010101\n",
                  &err),
        0, "%s", err.msg);
}

Test(key, refuses_a_public_id_with_another_prefix)
{
    struct key_pair k = receiptfix_key("prefix.key", "h");
    unsigned char pk[32];
    char other[100];
    snprintf(other, sizeof other, "%s", k.id);
    memcpy(other, "ed25518:", 8); /* the same length, another algorithm's name */
    cr_expect_eq(key_parse_public(other, pk, NULL), ERR_INPUT, "'%s' was parsed", other);
    memcpy(other, "ED25519:", 8);
    cr_expect_eq(key_parse_public(other, pk, NULL), ERR_INPUT, "'%s' was parsed", other);
}
