/* test_pin.c — pinned files are opened once: the digest is checked through the descriptor that
 * every later reader uses, so renaming another file over the path after the check changes
 * nothing that gate loads (issue 11, "files the ladder did not pin"); FIFOs, folders and files
 * over the bound are refused without hanging. Issue 23 §5: the hashed bytes are the bytes used (a
 * model overwritten in place after hashing still runs as pinned), pseudo files (a link to
 * /proc/self/environ) are refused before a byte is read, and a goldens FIFO cannot hang
 * `gate golden record` or `gate run`.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/model.h"
#include "engine/pin.h"
#include "engine/synth.h"
#include "oracles/golden.h"
#include "tests/support/check.h"
#include "tests/support/ladderfix.h"

static char dir[600];

static void setup(void)
{
    check_make_dir(dir, sizeof dir, "pin-");
}

TestSuite(pin, .init = setup);

static const char *in_dir(const char *name)
{
    return check_path(dir, name);
}

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

static void sha_hex(const void *p, size_t n, char hex[65])
{
    unsigned char d[32];
    crypto_hash_sha256(d, p, n);
    sodium_bin2hex(hex, 65, d, 32);
}

/* A synthetic model file (Q4_K_M, seed 1) at path; its digest into hex. */
static void write_model(const char *preset, const char *path, char hex[65])
{
    struct synth_options o;
    memset(&o, 0, sizeof o);
    o.spec = *synth_preset_find(preset);
    o.quant = SYNTH_Q4_K_M;
    o.seed = 1;
    uint8_t *buf = NULL;
    size_t size = 0;
    struct gate_err err = {0};
    cr_assert_eq(synth_write_mem(&o, &buf, &size, &err), 0, "%s", err.msg);
    write_file(path, buf, size);
    sha_hex(buf, size, hex);
    free(buf);
}

Test(pin, a_file_renamed_over_the_path_after_the_check_is_not_what_loads)
{
    char moe[65], dense[65];
    const char *path = in_dir("model.gguf");
    write_model("tiny-moe", path, moe);
    write_model("tiny-dense", in_dir("other.gguf"), dense);
    struct pinned p;
    struct gate_err err = {0};
    cr_assert_eq(pin_open(path, moe, &p, &err), 0, "%s", err.msg);
    cr_expect_str_eq(p.sha256, moe);
    cr_expect_eq(lseek(p.fd, 0, SEEK_CUR), 0, "the descriptor is left at offset 0");
    /* the attack: a different model renamed over the pinned path between check and load */
    cr_assert_eq(rename(in_dir("other.gguf"), path), 0);
    struct model *m = NULL;
    cr_assert_eq(model_load_fd(&m, p.fd, p.name, &err), 0, "%s", err.msg);
    cr_expect_eq(m->hp.arch, MODEL_ARCH_QWEN3MOE,
                 "the pinned (MoE) bytes load, not the renamed file");
    model_free(m);
    /* by path, the other file is what is there now: loading by path would have run it */
    cr_assert_eq(model_load(&m, path, &err), 0, "%s", err.msg);
    cr_expect_eq(m->hp.arch, MODEL_ARCH_QWEN3);
    model_free(m);
    /* and the descriptor still reads the pinned bytes in full */
    uint8_t *buf = NULL;
    size_t n = 0;
    cr_assert_eq(pin_read_all(&p, (size_t)1 << 30, &buf, &n, &err), 0, "%s", err.msg);
    char again[65];
    sha_hex(buf, n, again);
    cr_expect_str_eq(again, moe);
    free(buf);
    pin_close(&p);
    pin_close(&p); /* closing twice is harmless */
    cr_expect_eq(p.fd, -1);
}

Test(pin, a_digest_mismatch_names_file_pin_and_actual)
{
    const char *path = in_dir("g.json");
    write_file(path, "{}", 2);
    char actual[65];
    sha_hex("{}", 2, actual);
    const char *want = "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560";
    struct pinned p;
    struct gate_err err = {0};
    cr_assert_eq(pin_open(path, want, &p, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, path) && strstr(err.msg, want) && strstr(err.msg, actual),
              "message names file, pin and digest: %s", err.msg);
    cr_expect_eq(p.fd, -1);
    pin_close(&p);
}

Test(pin, no_pin_just_hashes)
{
    const char *path = in_dir("a.txt");
    write_file(path, "abc", 3);
    struct pinned p;
    struct gate_err err = {0};
    cr_assert_eq(pin_open(path, NULL, &p, &err), 0, "%s", err.msg);
    cr_expect_str_eq(p.sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    cr_expect_eq(p.size, 3);
    uint8_t *buf = NULL;
    size_t n = 0;
    cr_expect_eq(pin_read_all(&p, 2, &buf, &n, &err), ERR_INPUT, "over the read bound");
    err_clear(&err);
    cr_assert_eq(pin_read_all(&p, 3, &buf, &n, &err), 0, "%s", err.msg);
    cr_expect_eq(n, 3);
    cr_expect_str_eq((char *)buf, "abc");
    free(buf);
    pin_close(&p);
}

Test(pin, refuses_fifo_folder_and_oversized_files_without_hanging)
{
    struct pinned p;
    struct gate_err err = {0};
    const char *fifo = in_dir("fifo");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_expect_eq(pin_open(fifo, NULL, &p, &err), ERR_INPUT, "a FIFO (no writer) must not hang");
    cr_expect(strstr(err.msg, "not a regular file"), "%s", err.msg);
    err_clear(&err);
    cr_expect_eq(pin_open(dir, NULL, &p, &err), ERR_INPUT);
    err_clear(&err);
    const char *big = in_dir("big");
    write_file(big, "0123456789", 10);
    cr_expect_eq(pin_open_bounded(big, NULL, 9, &p, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "more than the 9 allowed"), "%s", err.msg);
    err_clear(&err);
    cr_expect_eq(pin_open(in_dir("missing"), NULL, &p, &err), ERR_INPUT);
    cr_expect_eq(p.fd, -1);
}

/* Issue 23 §5: the file overwritten IN PLACE (same inode) after pin_open hashed it. A mapping of
 * the file (even MAP_PRIVATE) shows the writer's bytes in pages it had not touched, so the
 * model would run other weights under the pinned digest; the private copy does not change. */
Test(pin, a_model_overwritten_in_place_after_hashing_is_not_what_runs)
{
    char dense[65];
    const char *path = in_dir("model.gguf");
    write_model("tiny-dense", path, dense);
    struct pinned p;
    struct gate_err err = {0};
    cr_assert_eq(pin_open(path, dense, &p, &err), 0, "%s", err.msg);
    /* the attack: rewrite the pinned file's bytes in place (no rename, same inode) */
    uint8_t *zeros = calloc(1, (size_t)p.size);
    cr_assert(zeros);
    int fd = open(path, O_WRONLY);
    cr_assert(fd >= 0);
    cr_assert_eq(pwrite(fd, zeros, (size_t)p.size, 0), (ssize_t)p.size);
    close(fd);
    free(zeros);
    char now[65];
    sha_hex(p.data, (size_t)p.size, now);
    cr_expect_str_eq(now, dense, "the pinned copy changed with the file");
    struct model *m = NULL;
    cr_assert_eq(model_load_pinned(&m, &p, &err), 0,
                 "the bytes written over the file were loaded: %s", err.msg);
    cr_expect_eq(m->hp.arch, MODEL_ARCH_QWEN3, "the pinned bytes run");
    model_free(m);
    pin_close(&p);
}

/* A link to /proc/self/environ named as a ladder file: a9e2031's golden_load read it by path
 * and quoted the environment in its error. Pseudo files are refused before a byte is read. */
Test(pin, a_link_to_proc_environ_is_refused_and_never_quoted)
{
    setenv("GATE_PIN_CANARY", "canary-5a7e", 1);
    const char *link = in_dir("goldens.json");
    cr_assert_eq(symlink("/proc/self/environ", link), 0);
    struct pinned p;
    struct gate_err err = {0};
    cr_expect_eq(pin_open(link, NULL, &p, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "proc pseudo filesystem"), "%s", err.msg);
    err_clear(&err);
    struct golden_set gs;
    int rc = golden_load(link, NULL, &gs, &err);
    cr_expect_neq(rc, 0, "the environment loaded as goldens");
    cr_expect_null(strstr(err.msg, "canary-5a7e"), "the error quotes the environment: %s", err.msg);
    cr_expect(strstr(err.msg, "not a regular file"), "%s", err.msg);
    if (!rc)
        golden_set_free(&gs);
}

/* A goldens path that is a FIFO hung `gate golden record` and `gate run` forever on a9e2031.
 * Each runs under timeout(1) (120 s, far above the seconds a refusal takes), so the old code
 * FAILS here (exit 124) rather than hanging the suite. */
Test(pin, a_goldens_fifo_cannot_hang_golden_record_or_run, .timeout = 600)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    struct ladderfix fx;
    ladderfix_init(&fx, "pinfifo");
    const char *fifo = ladderfix_path(&fx, "goldens.json");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    char defaults[1024];
    snprintf(defaults, sizeof defaults, "    golden: {goldens: %s, sha256: %064d}\n", fifo, 1);
    const char *ladder = ladderfix_one_cell(&fx, "l.yaml", NULL, "ref.decode", NULL, defaults);
    char ladder_c[1024];
    snprintf(ladder_c, sizeof ladder_c, "%s", ladder);
    const char *log = ladderfix_path(&fx, "record.log");
    int code = ladderfix_sh("cd '%s' && timeout 120 '%s' golden record '%s' >'%s' 2>&1", fx.dir,
                            bin, ladder_c, log);
    char *out = check_slurp_text(log);
    cr_expect_neq(code, 124, "gate golden record hung on a FIFO");
    cr_expect_eq(code, 2, "gate golden record exited %d: %s", code, out ? out : "");
    cr_expect(out && strstr(out, "not a regular file (a FIFO)"), "%s", out ? out : "");
    free(out);
    log = ladderfix_path(&fx, "run.log");
    code = ladderfix_sh("cd '%s' && timeout 120 '%s' run '%s' --host a --key '%s' --db '%s'"
                        " >'%s' 2>&1",
                        fx.dir, bin, ladder_c, ladderfix_path(&fx, "a.key"),
                        ladderfix_path(&fx, "r.db"), log);
    out = check_slurp_text(log);
    cr_expect_neq(code, 124, "gate run hung on a FIFO");
    cr_expect(out && strstr(out, "not a regular file (a FIFO)"), "%s", out ? out : "");
    free(out);
}
