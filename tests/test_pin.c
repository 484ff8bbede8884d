/* test_pin.c — pinned files are opened once: the digest is checked through the descriptor that
 * every later reader uses, so renaming another file over the path after the check changes
 * nothing that gate loads (issue 11, "files the ladder did not pin"); FIFOs, folders and files
 * over the bound are refused without hanging.
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
#include "tests/support/check.h"

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
