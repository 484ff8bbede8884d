/* test_cmd_tokenize.c — `gate tokenize` / `gate detokenize` through the binary ($GATE_BIN).
 *
 * The model is a vocabulary-only GGUF (the real Qwen3 tokenizer.json imported with
 * vocab_import_hf, no tensors at all), written once into the runner's check_tmp_dir() before
 * the tests start (ReportHook PRE_ALL; the folder travels in $GATE_TOKCMD_DIR to the test
 * processes, which keep their files in subfolders of it; POST_ALL removes it all). Covered: the
 * HF-tokenizers table of tests/data/tokenizer_expected.json in the three output forms, special
 * tokens on and off, raw bytes (NUL, invalid UTF-8) from a file, exact bytes out of detokenize,
 * a round trip over 1,000 seeded random NFC-stable strings (every string through the helpers the
 * commands use, all of them through one tokenize invocation, a sample one by one through both
 * commands), a file whose tensor data is missing, and the error exits.
 * Every `gate tokenize` / `detokenize` process loads the 151,936-token vocabulary and its merges
 * (~0.08 s of CPU, several times that under ASan): the one-by-one samples are small (every case
 * and every string also goes through the commands in one batch invocation): the round trip
 * takes 8 strings one by one (ASan: 4), the single-input test every 24th table case (ASan:
 * every 40th).
 */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <utf8proc.h>

#include "cli/cmd_tokenize.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "engine/vocab.h"
#include "tests/support/check.h"
#include "tests/support/tokcases.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int asan(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return 1;
#else
    return check_asan();
#endif
}

/* ---- fixture files, written once by the runner ---------------------------------------------- */

static char g_dir[512];

static int write_fixtures(void)
{
    struct gate_err err = {0};
    char src[600], path[700];
    int rc = -1;
    snprintf(src, sizeof src, "%s/tokenizers/qwen3/tokenizer.json.gz", check_shared_dir());
    struct gguf_writer *w = gguf_writer_new();
    /* 1. the vocabulary and nothing else */
    if (!w || gguf_writer_add_str(w, "general.architecture", "qwen3") ||
        vocab_import_hf(w, src, 151936, &err))
        goto done;
    snprintf(path, sizeof path, "%s/vocab.gguf", g_dir);
    if (gguf_writer_write_file(w, path, &err))
        goto done;
    gguf_writer_free(w);
    /* 2. a GGUF with metadata but no tokenizer */
    w = gguf_writer_new();
    if (!w || gguf_writer_add_str(w, "general.architecture", "qwen3") ||
        gguf_writer_add_u32(w, "qwen3.block_count", 1))
        goto done;
    snprintf(path, sizeof path, "%s/notok.gguf", g_dir);
    if (gguf_writer_write_file(w, path, &err))
        goto done;
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "test_cmd_tokenize: cannot write the fixtures: %s\n", err.msg);
    gguf_writer_free(w);
    return rc;
}

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    snprintf(g_dir, sizeof g_dir, "%s", check_tmp_dir()); /* the runner's scratch folder */
    if (write_fixtures() == 0)
        setenv("GATE_TOKCMD_DIR", g_dir, 1);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    if (!g_dir[0])
        return;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_cmd_tokenize: could not remove %s\n", g_dir);
}

/* A path in the fixture folder (vocab.gguf, notok.gguf) — static buffer, one per call site. */
static const char *fixture(const char *name)
{
    static char buf[4][700];
    static int k;
    const char *d = getenv("GATE_TOKCMD_DIR");
    cr_assert(d, "the fixtures were not written (see the runner's stderr)");
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", d, name);
    return buf[k];
}

/* This test process's scratch folder: inside the fixture folder, so the runner's POST_ALL hook
 * removes it with everything else. */
static const char *scratch_dir(void)
{
    static char dir[560];
    if (!dir[0]) {
        const char *d = getenv("GATE_TOKCMD_DIR");
        cr_assert(d, "the fixtures were not written (see the runner's stderr)");
        snprintf(dir, sizeof dir, "%s/t-XXXXXX", d);
        cr_assert_not_null(mkdtemp(dir), "cannot create a scratch folder in %s", d);
    }
    return dir;
}

/* A path in this test process's scratch folder (static buffer, four in rotation). */
static const char *scratch(const char *name)
{
    static char buf[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", scratch_dir(), name);
    return buf[k];
}

static const char *gate_bin(void)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set");
    return bin;
}

/* Run `$GATE_BIN ARGS >out 2>errfile` through sh; returns the exit status (-1 on a signal). */
static int gate(const char *out, const char *errfile, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int gate(const char *out, const char *errfile, const char *fmt, ...)
{
    char *cmd = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&cmd, &len);
    cr_assert_not_null(m);
    fprintf(m, "'%s' ", gate_bin());
    va_list ap;
    va_start(ap, fmt);
    vfprintf(m, fmt, ap);
    va_end(ap);
    fprintf(m, " >'%s' 2>'%s'", out, errfile);
    fclose(m);
    int st = system(cmd);
    free(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A whole file as a NUL-terminated string (malloc'd); *n its length without the NUL. */
static char *slurp(const char *path, size_t *n)
{
    size_t size = 0;
    uint8_t *p = check_slurp(path, &size);
    cr_assert_not_null(p, "cannot read %s", path);
    char *s = malloc(size + 1);
    cr_assert_not_null(s);
    memcpy(s, p, size);
    s[size] = '\0';
    free(p);
    if (n)
        *n = size;
    return s;
}

static void spit(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s", path);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* The next line of *p (NUL-terminated copy in line[cap]); 0 at the end. */
static int next_line(const char **p, char *line, size_t cap)
{
    if (!**p)
        return 0;
    const char *e = strchr(*p, '\n');
    size_t l = e ? (size_t)(e - *p) : strlen(*p);
    cr_assert_lt(l, cap, "output line too long");
    memcpy(line, *p, l);
    line[l] = '\0';
    *p += l + (e ? 1 : 0);
    return 1;
}

static int parse_id_line(const char *line, int32_t *ids, int cap)
{
    int n = 0, used;
    long v;
    while (sscanf(line, "%ld%n", &v, &used) == 1) {
        cr_assert_lt(n, cap);
        ids[n++] = (int32_t)v;
        line += used;
    }
    return n;
}

/* ---- the vocabulary-only file --------------------------------------------------------------- */

Test(cmd_tokenize, works_on_a_vocabulary_only_gguf_with_no_tensors)
{
    struct gate_err err = {0};
    struct gguf_file *f = NULL;
    cr_assert_eq(gguf_open(&f, fixture("vocab.gguf"), 0, &err), 0, "%s", err.msg);
    cr_expect_eq(f->n_tensors, 0);
    gguf_close(f);
    cr_assert_eq(gate(scratch("out"), scratch("err"), "tokenize '%s' --text 'Hello world' --ids",
                      fixture("vocab.gguf")),
                 0);
    char *out = slurp(scratch("out"), NULL);
    cr_expect_str_eq(out, "9707 1879\n");
    free(out);
    cr_assert_eq(gate(scratch("out"), scratch("err"), "detokenize '%s' --ids '9707 1879'",
                      fixture("vocab.gguf")),
                 0);
    out = slurp(scratch("out"), NULL);
    cr_expect_str_eq(out, "Hello world");
    free(out);
}

/* Tensor data is never needed: a file whose tensor infos point past its end (the data blob
 * cut off) is refused by a full open but tokenizes fine. */
Test(cmd_tokenize, never_needs_tensor_data)
{
    struct gate_err err = {0};
    char src[600];
    snprintf(src, sizeof src, "%s/tokenizers/qwen3/tokenizer.json.gz", check_shared_dir());
    struct gguf_writer *w = gguf_writer_new();
    cr_assert_not_null(w);
    cr_assert_eq(vocab_import_hf(w, src, 151936, &err), 0, "%s", err.msg);
    static float data[4096];
    int64_t ne[2] = {64, 64};
    cr_assert_eq(gguf_writer_add_tensor(w, "token_embd.weight", 0 /* F32 */, 2, ne, data), 0);
    char path[700];
    snprintf(path, sizeof path, "%s", scratch("cut.gguf"));
    cr_assert_eq(gguf_writer_write_file(w, path, &err), 0, "%s", err.msg);
    gguf_writer_free(w);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(truncate(path, st.st_size - (off_t)sizeof data), 0);
    struct gguf_file *f = NULL;
    cr_expect_neq(gguf_open(&f, path, 0, &err), 0, "a full open should refuse the cut file");
    cr_expect(strstr(err.msg, "token_embd.weight"), "%s", err.msg);
    gguf_close(f);
    cr_assert_eq(
        gate(scratch("out"), scratch("err"), "tokenize '%s' --text 'Hello world' --ids", path), 0,
        "%s", slurp(scratch("err"), NULL));
    char *out = slurp(scratch("out"), NULL);
    cr_expect_str_eq(out, "9707 1879\n");
    free(out);
    cr_expect_eq(gate(scratch("out"), scratch("err"), "detokenize '%s' --ids '9707'", path), 0);
}

/* ---- the HF table through the command ------------------------------------------------------- */

struct table {
    json_t *cases;
    size_t n;
    char **files; /* one text file per case */
};

static struct table write_table(void)
{
    struct table tb = {tokcases_load(), 0, NULL};
    tb.n = json_array_size(tb.cases);
    tb.files = calloc(tb.n, sizeof *tb.files);
    cr_assert_not_null(tb.files);
    for (size_t i = 0; i < tb.n; i++) {
        size_t len;
        char *text = tokcases_unhex(
            json_string_value(json_object_get(json_array_get(tb.cases, i), "hex")), &len);
        char name[32];
        snprintf(name, sizeof name, "case%03zu.txt", i);
        tb.files[i] = strdup(scratch(name));
        spit(tb.files[i], text, len);
        free(text);
    }
    return tb;
}

static void free_table(struct table *tb)
{
    for (size_t i = 0; i < tb->n; i++)
        free(tb->files[i]);
    free(tb->files);
    json_decref(tb->cases);
}

/* Run tokenize on every case with parse_special == special, all in one invocation. */
static char *run_group(const struct table *tb, int special, const char *form, size_t *n_in)
{
    char *args = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&args, &len);
    cr_assert_not_null(m);
    *n_in = 0;
    for (size_t i = 0; i < tb->n; i++) {
        json_t *c = json_array_get(tb->cases, i);
        if (json_integer_value(json_object_get(c, "parse_special")) == special) {
            fprintf(m, " --text-file '%s'", tb->files[i]);
            (*n_in)++;
        }
    }
    fclose(m);
    int rc = gate(scratch("out"), scratch("err"), "tokenize '%s'%s %s%s", fixture("vocab.gguf"),
                  args, form, special ? "" : " --no-special");
    free(args);
    cr_assert_eq(rc, 0, "tokenize (%s) exited %d: %s", form, rc, slurp(scratch("err"), NULL));
    return slurp(scratch("out"), NULL);
}

static void expect_ids(const char *what, const char *name, const int32_t *got, size_t n_got,
                       json_t *want, int *ok)
{
    size_t nw = json_array_size(want), k = 0;
    while (k < nw && k < n_got && got[k] == (int32_t)json_integer_value(json_array_get(want, k)))
        k++;
    if (k == nw && k == n_got)
        return;
    *ok = 0;
    cr_expect_fail("%s %s: %zu ids, want %zu; first difference at index %zu", what, name, n_got, nw,
                   k);
}

Test(cmd_tokenize, ids_match_hf_tokenizers_on_the_expected_table, .timeout = 1200)
{
    struct table tb = write_table();
    static int32_t ids[20000];
    static char line[1 << 20];
    size_t n_ok = 0;
    double t0 = now_s();
    for (int special = 0; special <= 1; special++) {
        size_t n_in;
        char *out = run_group(&tb, special, "--ids", &n_in);
        const char *p = out;
        size_t seen = 0;
        for (size_t i = 0; i < tb.n; i++) {
            json_t *c = json_array_get(tb.cases, i);
            if (json_integer_value(json_object_get(c, "parse_special")) != special)
                continue;
            cr_assert(next_line(&p, line, sizeof line), "--ids: only %zu of %zu lines", seen, n_in);
            seen++;
            int n = parse_id_line(line, ids, 20000);
            int ok = 1;
            expect_ids("--ids", json_string_value(json_object_get(c, "name")), ids, (size_t)n,
                       json_object_get(c, "ids"), &ok);
            n_ok += ok;
        }
        cr_expect_eq(*p, '\0', "--ids: more lines than inputs");
        free(out);
    }
    fprintf(stderr, "cmd_tokenize --ids: %zu/%zu strings give HF's ids (%.2f s)\n", n_ok, tb.n,
            now_s() - t0);
    cr_expect_eq(n_ok, tb.n);
    free_table(&tb);
}

Test(cmd_tokenize, json_output_has_hf_ids_and_the_exact_piece_bytes, .timeout = 1200)
{
    struct table tb = write_table();
    static char line[1 << 22];
    size_t n_ok = 0;
    for (int special = 0; special <= 1; special++) {
        size_t n_in;
        char *out = run_group(&tb, special, "--json", &n_in);
        const char *p = out;
        for (size_t i = 0; i < tb.n; i++) {
            json_t *c = json_array_get(tb.cases, i);
            if (json_integer_value(json_object_get(c, "parse_special")) != special)
                continue;
            const char *name = json_string_value(json_object_get(c, "name"));
            cr_assert(next_line(&p, line, sizeof line), "--json: too few lines");
            json_error_t jerr;
            json_t *o = json_loads(line, 0, &jerr);
            cr_assert_not_null(o, "%s: not JSON: %s", name, jerr.text);
            cr_expect_str_eq(json_string_value(json_object_get(o, "source")), tb.files[i]);
            json_t *jids = json_object_get(o, "ids"), *toks = json_object_get(o, "tokens");
            size_t n = json_array_size(jids);
            cr_expect_eq(json_integer_value(json_object_get(o, "n_tokens")), (json_int_t)n);
            cr_assert_eq(json_array_size(toks), n, "%s", name);
            int32_t *ids = malloc((n + 1) * sizeof *ids);
            cr_assert_not_null(ids);
            /* the pieces' bytes, joined, are what HF's decoder gives for these ids */
            char *joined = NULL;
            size_t jlen = 0;
            FILE *m = open_memstream(&joined, &jlen);
            for (size_t k = 0; k < n; k++) {
                json_t *tk = json_array_get(toks, k);
                ids[k] = (int32_t)json_integer_value(json_array_get(jids, k));
                cr_expect_eq(json_integer_value(json_object_get(tk, "id")), ids[k]);
                cr_expect_eq(json_integer_value(json_object_get(tk, "index")), (json_int_t)k);
                cr_expect(json_is_string(json_object_get(tk, "piece")));
                cr_expect(json_is_string(json_object_get(tk, "type")));
                size_t bl;
                char *b = tokcases_unhex(json_string_value(json_object_get(tk, "hex")), &bl);
                fwrite(b, 1, bl, m);
                free(b);
            }
            fclose(m);
            int ok = 1;
            expect_ids("--json", name, ids, n, json_object_get(c, "ids"), &ok);
            json_t *dec = json_object_get(c, "decoded");
            if (jlen != json_string_length(dec) || memcmp(joined, json_string_value(dec), jlen)) {
                ok = 0;
                cr_expect_fail("%s: the pieces join to '%s', HF decodes to '%s'", name, joined,
                               json_string_value(dec));
            }
            n_ok += ok;
            free(joined);
            free(ids);
            json_decref(o);
        }
        free(out);
    }
    fprintf(stderr, "cmd_tokenize --json: %zu/%zu strings give HF's ids and decoding\n", n_ok,
            tb.n);
    cr_expect_eq(n_ok, tb.n);
    free_table(&tb);
}

Test(cmd_tokenize, default_rows_give_index_id_and_escaped_piece, .timeout = 1200)
{
    struct table tb = write_table();
    static char line[1 << 20];
    size_t n_ok = 0;
    for (int special = 0; special <= 1; special++) {
        size_t n_in;
        char *out = run_group(&tb, special, "", &n_in);
        const char *p = out;
        int have = next_line(&p, line, sizeof line);
        for (size_t i = 0; i < tb.n; i++) {
            json_t *c = json_array_get(tb.cases, i);
            if (json_integer_value(json_object_get(c, "parse_special")) != special)
                continue;
            const char *name = json_string_value(json_object_get(c, "name"));
            json_t *want = json_object_get(c, "ids");
            /* several inputs: a '# SOURCE: N bytes, N tokens' header per block */
            char head[800];
            snprintf(head, sizeof head, "# %s: ", tb.files[i]);
            cr_assert(have && !strncmp(line, head, strlen(head)), "%s: header '%s'", name,
                      have ? line : "(end)");
            int ok = 1;
            size_t k = 0;
            while ((have = next_line(&p, line, sizeof line)) && line[0] != '#') {
                int idx, id, used = 0;
                if (sscanf(line, "%d %d  \"%n", &idx, &id, &used) != 2 || used == 0 ||
                    idx != (int)k || k >= json_array_size(want) ||
                    id != json_integer_value(json_array_get(want, k)) ||
                    !strchr(line + used, '"')) {
                    ok = 0;
                    cr_expect_fail("%s: row %zu is '%s'", name, k, line);
                    break;
                }
                k++;
            }
            if (ok && k != json_array_size(want)) {
                ok = 0;
                cr_expect_fail("%s: %zu rows, want %zu", name, k, json_array_size(want));
            }
            while (!ok && have && line[0] != '#')
                have = next_line(&p, line, sizeof line);
            n_ok += ok;
        }
        free(out);
    }
    cr_expect_eq(n_ok, tb.n);
    free_table(&tb);
    /* one input: no header; escapes and the special-token type are shown */
    cr_assert_eq(gate(scratch("out"), scratch("err"), "tokenize '%s' --text '<|im_start|>a\\\"\n'",
                      fixture("vocab.gguf")),
                 0);
    char *out = slurp(scratch("out"), NULL);
    cr_expect(strstr(out, "151644  \"<|im_start|>\"  control\n") && out[0] != '#', "%s", out);
    cr_expect(strstr(out, "\\\\") && strstr(out, "\\\"") && strstr(out, "\\n\""), "%s", out);
    free(out);
}

Test(cmd_tokenize, single_inputs_agree_with_the_batch_and_exit_0)
{
    struct table tb = write_table();
    size_t step = asan() ? 40 : 24, n_run = 0;
    if (asan())
        fprintf(stderr,
                "ASan: cmd_tokenize::single_inputs_agree_with_the_batch_and_exit_0: %zu of %zu"
                " table cases one by one (every 40th; the normal build every 24th, %zu)\n",
                (tb.n + 39) / 40, tb.n, (tb.n + 23) / 24);
    for (size_t i = 0; i < tb.n; i += step) {
        json_t *c = json_array_get(tb.cases, i);
        int special = (int)json_integer_value(json_object_get(c, "parse_special"));
        int rc = gate(scratch("out"), scratch("err"), "tokenize '%s' --text-file '%s' --ids%s",
                      fixture("vocab.gguf"), tb.files[i], special ? "" : " --no-special");
        cr_expect_eq(rc, 0, "%s: exit %d", json_string_value(json_object_get(c, "name")), rc);
        char *out = slurp(scratch("out"), NULL);
        static int32_t ids[20000];
        int n = parse_id_line(out, ids, 20000), ok = 1;
        expect_ids("single --ids", json_string_value(json_object_get(c, "name")), ids, (size_t)n,
                   json_object_get(c, "ids"), &ok);
        cr_expect_eq(out[strlen(out) - 1], '\n');
        free(out);
        n_run++;
    }
    cr_expect_geq(n_run, 6);
    free_table(&tb);
}

/* ---- special tokens, raw bytes -------------------------------------------------------------- */

Test(cmd_tokenize, special_tokens_match_unless_no_special)
{
    const char *v = fixture("vocab.gguf");
    const char *text = "'<|im_start|>user\nhi <think><|im_end|>'";
    cr_assert_eq(gate(scratch("out"), scratch("err"), "tokenize '%s' --text %s --ids", v, text), 0);
    char *on = slurp(scratch("out"), NULL);
    cr_expect(!strncmp(on, "151644 ", 7) && strstr(on, " 151667 ") && strstr(on, " 151645\n"), "%s",
              on);
    cr_assert_eq(
        gate(scratch("out"), scratch("err"), "tokenize '%s' --text %s --ids --no-special", v, text),
        0);
    char *off = slurp(scratch("out"), NULL);
    /* control tokens become text; the user-defined <think> still matches (llama.cpp, HF's
     * encode_special_tokens) */
    cr_expect(!strstr(off, "151644") && !strstr(off, "151645") && strstr(off, " 151667 "), "%s",
              off);
    cr_expect_gt(strlen(off), strlen(on));
    free(on);
    free(off);
}

/* A file is raw bytes: NUL passes through; each maximal ill-formed UTF-8 subpart becomes one
 * U+FFFD (FF gives one, the truncated E2 82 one, the surrogate ED A0 80 three). */
Test(cmd_tokenize, file_bytes_nul_and_invalid_utf8)
{
    static const char in[] = "a\0b\xff"
                             "c\xe2\x82 d\xed\xa0\x80"
                             "e\n";
    static const char want[] = "a\0b\xef\xbf\xbd"
                               "c\xef\xbf\xbd d\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                               "e\n";
    const char *v = fixture("vocab.gguf");
    spit(scratch("raw.txt"), in, sizeof in - 1);
    cr_assert_eq(gate(scratch("ids.txt"), scratch("err"), "tokenize '%s' --text-file '%s' --ids", v,
                      scratch("raw.txt")),
                 0);
    cr_assert_eq(gate(scratch("out"), scratch("err"), "detokenize '%s' --ids-file '%s'", v,
                      scratch("ids.txt")),
                 0);
    size_t n;
    char *out = slurp(scratch("out"), &n);
    cr_expect(n == sizeof want - 1 && !memcmp(out, want, n), "got %zu bytes", n);
    free(out);
    /* the rows show the NUL as \x00 and the newline as \n */
    cr_assert_eq(gate(scratch("out"), scratch("err"), "tokenize '%s' --text-file '%s'", v,
                      scratch("raw.txt")),
                 0);
    out = slurp(scratch("out"), NULL);
    cr_expect(strstr(out, "\\x00") && strstr(out, "\\n\"") && strstr(out, "\xef\xbf\xbd"), "%s",
              out);
    free(out);
    /* standard input works the same */
    cr_assert_eq(gate(scratch("out2"), scratch("err"), "tokenize '%s' --text-file - --ids <'%s'", v,
                      scratch("raw.txt")),
                 0);
    char *a = slurp(scratch("ids.txt"), NULL), *b = slurp(scratch("out2"), NULL);
    cr_expect_str_eq(a, b);
    free(a);
    free(b);
}

Test(cmd_tokenize, escape_shows_every_byte_reversibly)
{
    static const char in[] = "A\"\\\t\r\n\x01\x7f\xc2\x85\xc2\xa0\xe4\xbd\xa0\xe4\xbd\xff\xf0\x9f"
                             "\x98\x80";
    char *e = cmd_tokenize_escape(in, sizeof in - 1);
    cr_assert_not_null(e);
    cr_expect_str_eq(e, "A\\\"\\\\\\t\\r\\n\\x01\\x7F\\xC2\\x85\xc2\xa0\xe4\xbd\xa0\\xE4\\xBD\\xFF"
                        "\xf0\x9f\x98\x80");
    free(e);
    e = cmd_tokenize_escape("", 0);
    cr_expect_str_eq(e, "");
    free(e);
}

Test(cmd_detokenize, gives_exact_bytes_even_for_a_split_character)
{
    const char *v = fixture("vocab.gguf");
    /* rare characters (U+20000, U+1D11E) split into tokens that are not complete UTF-8 */
    cr_assert_eq(gate(scratch("out"), scratch("err"),
                      "tokenize '%s' --text '\xf0\xa0\x80\x80\xf0\x9d\x84\x9e' --json", v),
                 0);
    char *out = slurp(scratch("out"), NULL);
    json_error_t jerr;
    json_t *o = json_loads(out, 0, &jerr);
    cr_assert_not_null(o, "%s", jerr.text);
    json_t *toks = json_object_get(o, "tokens");
    int found = 0;
    for (size_t k = 0; k < json_array_size(toks) && !found; k++) {
        json_t *tk = json_array_get(toks, k);
        const char *piece = json_string_value(json_object_get(tk, "piece"));
        if (!strstr(piece, "\\x"))
            continue;
        found = 1;
        size_t bl, n;
        char *bytes = tokcases_unhex(json_string_value(json_object_get(tk, "hex")), &bl);
        cr_assert_eq(gate(scratch("one"), scratch("err"), "detokenize '%s' --ids '%d'", v,
                          (int)json_integer_value(json_object_get(tk, "id"))),
                     0);
        char *got = slurp(scratch("one"), &n);
        cr_expect(n == bl && !memcmp(got, bytes, n), "partial bytes must come back as they are");
        free(got);
        free(bytes);
    }
    cr_expect(found, "expected a token with partial UTF-8 in %s", out);
    json_decref(o);
    free(out);
    /* a JSON array and commas are accepted; nothing is added after the bytes */
    cr_assert_eq(gate(scratch("out"), scratch("err"), "detokenize '%s' --ids '[9707, 1879]'", v),
                 0);
    out = slurp(scratch("out"), NULL);
    cr_expect_str_eq(out, "Hello world");
    free(out);
    /* no ids: no bytes */
    cr_assert_eq(gate(scratch("out"), scratch("err"), "detokenize '%s' --ids ''", v), 0);
    size_t n;
    out = slurp(scratch("out"), &n);
    cr_expect_eq(n, 0);
    free(out);
    /* the helpers the command uses */
    int32_t *ids = NULL;
    int n_ids = 0;
    struct gate_err err = {0};
    cr_assert_eq(tok_parse_ids(" 1,2\n\t3 ", 8, "t", 0, &ids, &n_ids, &err), 0, "%s", err.msg);
    cr_expect(n_ids == 3 && ids[0] == 1 && ids[1] == 2 && ids[2] == 3);
    free(ids);
    char *s = cmd_tokenize_format_ids((const int32_t[]){5, 0, 151645}, 3);
    cr_expect_str_eq(s, "5 0 151645\n");
    free(s);
    s = cmd_tokenize_format_ids(NULL, 0);
    cr_expect_str_eq(s, "\n");
    free(s);
}

/* ---- round trip over random NFC-stable strings ---------------------------------------------- */

static uint64_t g_rng;

static uint32_t rnd(uint32_t n)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng % n);
}

/* A random code point from a mixture of scripts, marks, whitespace and emoji (no surrogates). */
static int32_t random_cp(void)
{
    static const struct {
        int32_t lo, hi;
        int weight;
    } R[] = {
        {0x20, 0x7E, 30},       /* ASCII, punctuation included */
        {0x09, 0x0D, 4},        /* \t \n \v \f \r */
        {0xA0, 0x24F, 10},      /* Latin-1 and Latin Extended */
        {0x300, 0x36F, 6},      /* combining marks */
        {0x370, 0x4FF, 7},      /* Greek, Cyrillic */
        {0x590, 0x6FF, 5},      /* Hebrew, Arabic */
        {0x900, 0x97F, 4},      /* Devanagari */
        {0x1100, 0x11FF, 3},    /* Hangul jamo (compose under NFC) */
        {0xAC00, 0xD7A3, 4},    /* Hangul syllables */
        {0x3000, 0x30FF, 4},    /* CJK punctuation, kana */
        {0x4E00, 0x9FFF, 10},   /* CJK ideographs */
        {0x2000, 0x206F, 3},    /* general punctuation, odd spaces */
        {0x1F300, 0x1FAFF, 6},  /* emoji */
        {0x1F3FB, 0x1F3FF, 1},  /* skin tone modifiers */
        {0x80, 0xFFFF, 2},      /* anything in the BMP */
        {0x10000, 0x10FFFF, 1}, /* anything above */
    };
    int total = 0;
    for (size_t k = 0; k < sizeof R / sizeof R[0]; k++)
        total += R[k].weight;
    int w = (int)rnd((uint32_t)total);
    size_t k = 0;
    while (w >= R[k].weight)
        w -= R[k++].weight;
    int32_t cp;
    do
        cp = R[k].lo + (int32_t)rnd((uint32_t)(R[k].hi - R[k].lo + 1));
    while (cp >= 0xD800 && cp <= 0xDFFF);
    return cp;
}

/* NFC with the tokenizer's own flags; malloc'd. */
static char *nfc(const char *s, size_t n, size_t *out_len)
{
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &out,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    cr_assert_geq(r, 0, "utf8proc_map: %s", utf8proc_errmsg(r));
    *out_len = (size_t)r;
    return (char *)out;
}

/* A random NFC-stable string: random code points, NFC-normalized, checked to be a fixed point
 * of NFC. *changed says whether normalization altered the raw draw. malloc'd. */
static char *random_nfc_string(size_t *len, int *changed)
{
    char raw[4 * 48 + 1];
    size_t n = 0;
    int n_cp = 1 + (int)rnd(40);
    for (int i = 0; i < n_cp; i++)
        n += (size_t)utf8proc_encode_char(random_cp(), (utf8proc_uint8_t *)raw + n);
    size_t l1, l2;
    char *s = nfc(raw, n, &l1);
    char *again = nfc(s, l1, &l2);
    cr_assert(l1 == l2 && !memcmp(s, again, l1), "NFC is not a fixed point here");
    free(again);
    *changed = l1 != n || memcmp(s, raw, n) != 0;
    *len = l1;
    return s;
}

Test(cmd_tokenize, round_trip_of_1000_random_nfc_stable_strings, .timeout = 1200)
{
    enum { N = 1000 };
    const int n_single = asan() ? 4 : 8;
    if (asan())
        fprintf(stderr,
                "ASan: cmd_tokenize::round_trip_of_1000_random_nfc_stable_strings: 4 of 8 strings"
                " one by one through both commands (all %d through the library and one CLI call)\n",
                N);
    const char *v = fixture("vocab.gguf");
    struct gate_err err = {0};
    struct tok *t = NULL;
    double t0 = now_s();
    cr_assert_eq(cmd_tokenize_load(&t, v, &err), 0, "%s", err.msg);
    g_rng = 0x9E3779B97F4A7C15ull;
    char **strs = calloc(N, sizeof *strs), **lines = calloc(N, sizeof *lines);
    size_t *lens = calloc(N, sizeof *lens);
    cr_assert(strs && lines && lens);
    int n_changed = 0, n_rt = 0;
    /* 1. every string through the functions the commands use: encode, --ids text, parse,
     *    decode */
    for (int i = 0; i < N; i++) {
        int changed;
        strs[i] = random_nfc_string(&lens[i], &changed);
        n_changed += changed;
        int32_t *ids = NULL, *back = NULL;
        int n = 0, nb = 0;
        cr_assert_eq(tok_encode(t, strs[i], lens[i], 1, &ids, &n, &err), 0, "%s", err.msg);
        lines[i] = cmd_tokenize_format_ids(ids, n);
        cr_assert_not_null(lines[i]);
        cr_assert_eq(tok_parse_ids(lines[i], strlen(lines[i]), "line", 0, &back, &nb, &err), 0,
                     "%s", err.msg);
        cr_assert(nb == n && (n == 0 || !memcmp(back, ids, (size_t)n * sizeof *ids)));
        char *out = NULL;
        size_t out_len = 0;
        cr_assert_eq(tok_decode(t, back, nb, &out, &out_len, &err), 0, "%s", err.msg);
        if (out_len == lens[i] && !memcmp(out, strs[i], out_len))
            n_rt++;
        else
            cr_expect_fail("string %d (%s): decode(encode(s)) gives '%s'", i, strs[i], out);
        free(out);
        free(back);
        free(ids);
    }
    cr_expect_eq(n_rt, N);
    double t_lib = now_s() - t0;
    /* 2. all of them through one tokenize invocation: the same ids, line by line */
    char *args = NULL;
    size_t alen = 0;
    FILE *m = open_memstream(&args, &alen);
    cr_assert_not_null(m);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "r%04d", i);
        spit(scratch(name), strs[i], lens[i]);
        fprintf(m, " --text-file %s", name);
    }
    fclose(m);
    char *cmd = NULL;
    size_t clen = 0;
    m = open_memstream(&cmd, &clen);
    fprintf(m, "cd '%s' && '%s' tokenize '%s'%s --ids >ids.txt 2>err.txt", scratch_dir(),
            gate_bin(), v, args);
    fclose(m);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", slurp(scratch("err.txt"), NULL));
    free(cmd);
    free(args);
    char *all = slurp(scratch("ids.txt"), NULL);
    const char *p = all;
    static char line[1 << 16];
    int n_same = 0;
    for (int i = 0; i < N; i++) {
        cr_assert(next_line(&p, line, sizeof line), "only %d lines", i);
        size_t l = strlen(lines[i]) - 1; /* without its newline */
        if (strlen(line) == l && !memcmp(line, lines[i], l))
            n_same++;
        else
            cr_expect_fail("string %d: the command gives '%s', the library '%.*s'", i, line, (int)l,
                           lines[i]);
    }
    cr_expect_eq(n_same, N);
    /* 3. the 1,000 id lines through one detokenize invocation: the strings, joined */
    cr_assert_eq(gate(scratch("joined"), scratch("err"), "detokenize '%s' --ids-file '%s'", v,
                      scratch("ids.txt")),
                 0, "%s", slurp(scratch("err"), NULL));
    size_t jn;
    char *joined = slurp(scratch("joined"), &jn), *q = joined;
    for (int i = 0; i < N; i++) {
        cr_assert(q + lens[i] <= joined + jn && !memcmp(q, strs[i], lens[i]),
                  "detokenize of all lines differs inside string %d", i);
        q += lens[i];
    }
    cr_expect_eq((size_t)(q - joined), jn);
    free(joined);
    free(all);
    /* 4. a sample one by one: detokenize(tokenize(x)) == x through both commands */
    for (int s = 0; s < n_single; s++) {
        int i = s * (N / n_single);
        char name[32];
        snprintf(name, sizeof name, "r%04d", i);
        cr_assert_eq(gate(scratch("one.ids"), scratch("err"),
                          "tokenize '%s' --text-file '%s' --ids", v, scratch(name)),
                     0);
        cr_assert_eq(gate(scratch("one.out"), scratch("err"), "detokenize '%s' --ids-file '%s'", v,
                          scratch("one.ids")),
                     0);
        size_t n;
        char *out = slurp(scratch("one.out"), &n);
        cr_expect(n == lens[i] && !memcmp(out, strs[i], n), "string %d: '%s' came back as '%s'", i,
                  strs[i], out);
        free(out);
    }
    fprintf(stderr,
            "cmd_tokenize round trip: %d/%d random NFC-stable strings (%d normalized by NFC when "
            "drawn), library %.2f s, all through the CLI, %d one by one; %.2f s in all\n",
            n_rt, N, n_changed, t_lib, n_single, now_s() - t0);
    for (int i = 0; i < N; i++) {
        free(strs[i]);
        free(lines[i]);
    }
    free(strs);
    free(lines);
    free(lens);
    tok_free(t);
}

/* ---- errors --------------------------------------------------------------------------------- */

/* Run, expect the exit code, and that stderr contains `want` (and stdout nothing). */
static void expect_exit(int code, const char *want, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void expect_exit(int code, const char *want, const char *fmt, ...)
{
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int rc = gate(scratch("out"), scratch("err"), "%s", args);
    char *e = slurp(scratch("err"), NULL);
    cr_expect_eq(rc, code, "gate %s: exit %d, want %d (%s)", args, rc, code, e);
    if (want)
        cr_expect(strstr(e, want), "gate %s: stderr '%s' should name '%s'", args, e, want);
    free(e);
}

Test(cmd_tokenize, errors_exit_2_and_name_what_is_wrong)
{
    const char *v = fixture("vocab.gguf"), *notok = fixture("notok.gguf");
    expect_exit(0, NULL, "tokenize --help");
    expect_exit(0, NULL, "detokenize --help");
    expect_exit(2, "missing.gguf", "tokenize /nonexistent/missing.gguf --text hi");
    expect_exit(2, "missing.gguf", "detokenize /nonexistent/missing.gguf --ids 1");
    expect_exit(2, "no-such-text.txt", "tokenize '%s' --text-file /nonexistent/no-such-text.txt",
                v);
    expect_exit(2, "no-such-ids.txt", "detokenize '%s' --ids-file /nonexistent/no-such-ids.txt", v);
    expect_exit(2, "has no tokenizer", "tokenize '%s' --text hi", notok);
    expect_exit(2, "has no tokenizer", "detokenize '%s' --ids 1", notok);
    expect_exit(2, "151936", "detokenize '%s' --ids '9707 151936'", v);
    expect_exit(2, "-1", "detokenize '%s' --ids '-1'", v);
    expect_exit(2, "'12a'", "detokenize '%s' --ids '1 12a'", v);
    expect_exit(2, "'99999999999'", "detokenize '%s' --ids '99999999999'", v);
    expect_exit(2, "bad magic", "tokenize '%s' --text hi", TOKCASES_PATH);
    expect_exit(2, NULL, "tokenize '%s'", v);                        /* no text */
    expect_exit(2, NULL, "tokenize '%s' --text a --ids --json", v);  /* two forms */
    expect_exit(2, NULL, "tokenize '%s' --text", v);                 /* no value */
    expect_exit(2, NULL, "tokenize '%s' --text a --bogus", v);       /* unknown option */
    expect_exit(2, NULL, "detokenize '%s'", v);                      /* no ids */
    expect_exit(2, NULL, "detokenize '%s' --ids 1 --ids-file x", v); /* both */
    expect_exit(2, NULL, "tokenize --text a");                       /* no model */
}
