/* test_cmd_engine.c — the engine commands through the gate binary ($GATE_BIN): eval writes the
 * twin's logits, generate reproduces the exact greedy continuation, model inspect describes the
 * file, bench prints its figures, and every bad input is exit 2 with a message naming it. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "oracles/mode.h"
#include "tests/support/check.h"
#include "tests/support/conformance.h"
#include "tests/support/ggufedit.h"

static const char *bin(void)
{
    const char *b = getenv("GATE_BIN");
    cr_assert(b && *b, "GATE_BIN is not set (ctest sets it)");
    return b;
}

/* Run a shell command; returns the exit status and the combined output (malloc'd) in *out. */
static int run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(char **out, const char *fmt, ...)
{
    char cmd[4096], log[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    static int k;
    snprintf(log, sizeof log, "%s/cmd%d.log", check_tmp_dir(), k++);
    char full[6000];
    snprintf(full, sizeof full, "%s >%s 2>&1", cmd, log);
    int st = system(full);
    size_t n = 0;
    *out = (char *)check_slurp(log, &n);
    if (*out) {
        char *z = realloc(*out, n + 1);
        if (z)
            z[n] = '\0';
        *out = z;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(cmd_engine, eval_writes_logits_matching_the_exact_reference)
{
    char *out, logits[1024];
    snprintf(logits, sizeof logits, "%s/eval.f32", check_tmp_dir());
    int rc = run(&out, "%s eval %s --tokens %s --logits %s --threads 2", bin(),
                 conformance_path("qwen3moe-tiny-q8_0", "model.gguf"),
                 conformance_path("qwen3moe-tiny-q8_0", "tokens.txt"), logits);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "96 positions x 512 logits"), "%s", out);
    free(out);
    size_t na = 0, nb = 0;
    float *a = (float *)check_slurp(logits, &na);
    float *b =
        (float *)check_slurp(conformance_path("qwen3moe-tiny-q8_0", "logits_exact.f32"), &nb);
    cr_assert(a && b && na == nb && na == 96 * 512 * 4, "sizes %zu %zu", na, nb);
    check_floats("gate eval vs logits_exact.f32", a, b, 96 * 512, 1e-3, 1e-3, 1e-8);
    free(a);
    free(b);
}

Test(cmd_engine, eval_output_errors_name_the_users_file_not_a_temp)
{
    /* issue 16: a missing output folder is reported with the file the user asked for (the old
     * writer named its predictable "OUT.tmp.<pid>", which is also gone: mkostemp now) */
    char *out;
    int rc = run(&out, "%s eval %s --tokens %s --logits %s/no/such/dir/x.f32", bin(),
                 conformance_path("qwen3-dense-tiny-f32", "model.gguf"),
                 conformance_path("qwen3-dense-tiny-f32", "tokens.txt"), check_tmp_dir());
    cr_expect_eq(rc, 3, "%s", out);
    cr_expect(strstr(out, "no/such/dir/x.f32'") && !strstr(out, "XXXXXX") && !strstr(out, ".tmp."),
              "%s", out);
    free(out);
}

Test(cmd_engine, a_backend_not_in_this_build_is_exit_3_in_bench_parity_and_falsify)
{
    /* issue 16: the same situation gets the same code everywhere (settled question 6) */
    char *out;
    const char *m = conformance_path("qwen3-dense-tiny-f32", "model.gguf");
#ifndef GATE_HAVE_CUDA
    cr_expect_eq(run(&out, "%s bench %s --backend cuda", bin(), m), 3, "%s", out);
    free(out);
    cr_expect_eq(run(&out, "%s parity %s --mode cuda.decode", bin(), m), 3, "%s", out);
    free(out);
    cr_expect_eq(run(&out, "%s falsify %s --mode cuda.decode --fault skip_qk_norm", bin(), m), 3,
                 "%s", out);
    free(out);
#endif
    /* an unknown backend is a usage error everywhere */
    cr_expect_eq(run(&out, "%s bench %s --backend nope", bin(), m), 2, "%s", out);
    free(out);
    cr_expect_eq(run(&out, "%s parity %s --mode nope.decode", bin(), m), 2, "%s", out);
    free(out);
}

Test(cmd_engine, parity_replays_a_routing_near_tie_instead_of_excusing_it)
{
    /* the tiny MoE demo model has a router gap of 2e-5 at position 68, layer 3: the cpu engine
     * picks the other expert there. Issue 22 §6: the judge is replayed with the engine's choice
     * there and every position is then held to the thresholds (before, position 68 was skipped
     * as a ROUTE_TIE, min cosine 0.989 against the unreplayed judge); with route_tie 0 the
     * changed expert set itself FAILs */
    char *out, path[1024];
    snprintf(path, sizeof path, "%s/tiny-moe.gguf", check_tmp_dir());
    cr_assert_eq(
        run(&out, "%s model synth --preset tiny-moe --quant Q4_K_M --seed 1 -o %s", bin(), path), 0,
        "%s", out);
    free(out);
    int rc = run(&out, "%s parity %s --mode cpu.decode", bin(), path);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "replayed with the subject's expert set at 1 router near tie"), "%s",
              out);
    cr_expect(strstr(out, "min cosine 0.99999"), "position 68 is judged, and matches: %s", out);
    free(out);
    rc = run(&out, "%s parity %s --mode cpu.decode --route-tie 0", bin(), path);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "beyond the router near tie 0, first layer 3 position 68"), "%s", out);
    free(out);
}

Test(cmd_engine, a_route_near_tie_upstream_no_longer_cascades_into_wrong_positions)
{
    /* a demo throughput run's sequence (seed 3a042f2830df81f2, 80 ids): the cpu engine takes
     * the other expert at layer 0, position 17, where the judge's router gap is 8.6e-5; through
     * the KV cache every later position drifts (old rule: 2 ROUTE_TIEs excused, then 7 WRONG
     * argmaxes from position 43, min cosine 0.925: a correct engine FAILed). With the judge
     * replayed on the engine's choice every one of the 80 positions matches */
    char *out, path[1024], toks[1024];
    snprintf(path, sizeof path, "%s/tiny-moe.gguf", check_tmp_dir());
    snprintf(toks, sizeof toks, "%s/cascade.txt", check_tmp_dir());
    cr_assert_eq(
        run(&out, "%s model synth --preset tiny-moe --quant Q4_K_M --seed 1 -o %s", bin(), path), 0,
        "%s", out);
    free(out);
    int32_t t[80];
    mode_tokens(0x3a042f2830df81f2ULL, 512, 80, t);
    FILE *f = fopen(toks, "w");
    cr_assert(f);
    for (int i = 0; i < 80; i++)
        fprintf(f, "%d%s", (int)t[i], i + 1 < 80 ? " " : "\n");
    fclose(f);
    int rc = run(&out, "%s parity %s --mode cpu.decode --tokens %s", bin(), path, toks);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "80/80 argmax match"), "%s", out);
    cr_expect(strstr(out, "replayed with the subject's expert set at 1 router near tie"), "%s",
              out);
    free(out);
}

Test(cmd_engine, a_one_percent_scale_in_the_last_layer_fails_parity)
{
    /* issue 22 §2/§3: blk.3.ffn_down x 1.01 on tiny-dense's cpu engine moves every position's
     * rel-L2 from the noise's ~0.0017 to ~0.0032, its maximum 0.0049 stays under max_rel_l2
     * 0.005 (it PASSed before the mean bound); the mean rel-L2 bound 0.0025 rejects it, and the
     * clean engine passes */
    char *out, path[1024];
    snprintf(path, sizeof path, "%s/tiny-dense.gguf", check_tmp_dir());
    cr_assert_eq(
        run(&out, "%s model synth --preset tiny-dense --quant Q4_K_M --seed 1 -o %s", bin(), path),
        0, "%s", out);
    free(out);
    int rc = run(&out, "%s parity %s --mode cpu.decode", bin(), path);
    cr_expect_eq(rc, 0, "%s", out);
    /* each threshold's margin over the backend's documented noise (issue 22 §2) */
    cr_expect(strstr(out, "thresholds over the cpu backend's measured noise: min_cosine 192x"),
              "%s", out);
    cr_expect(strstr(out, "max_rel_l2 1.25x max_mean_rel_l2 1.39x"), "%s", out);
    free(out);
    char js[1100];
    snprintf(js, sizeof js, "%s/p.json", check_tmp_dir());
    rc = run(&out, "%s parity %s --mode cpu.decode --json %s", bin(), path, js);
    free(out);
    json_error_t je;
    json_t *pj = json_load_file(js, 0, &je);
    cr_assert(pj, "%s", je.text);
    const json_t *nz = json_object_get(pj, "noise");
    cr_expect_str_eq(json_string_value(json_object_get(nz, "backend")), "cpu");
    cr_expect_float_eq(
        json_real_value(json_object_get(json_object_get(nz, "margin"), "max_rel_l2")), 1.25, 1e-9);
    json_decref(pj);
    rc = run(&out, "%s parity %s --mode cpu.decode --fault scale:tensor=blk.3.ffn_down,factor=1.01",
             bin(), path);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "FAIL: mean rel-L2"), "%s", out);
    free(out);
}

/* Count the lines of out that hold needle. */
static int count_lines(const char *out, const char *needle)
{
    int n = 0;
    for (const char *l = out; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        char line[2048];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), l);
        n += strstr(line, needle) != NULL;
        l = e ? e + 1 : NULL;
    }
    return n;
}

Test(cmd_engine, parity_tokens_file_judges_its_positions_with_one_verdict)
{
    /* issue 24: a 71-token file printed PASS and then "FAIL (too few positions)" against a
     * ladder default of 96 it was never told; now its 71 positions are the ones judged, once */
    char toks[1024], *out;
    int n = 0;
    int32_t *ids = check_read_ids(conformance_path("qwen3-dense-tiny-q4_k_m", "tokens.txt"), &n);
    cr_assert_geq(n, 71);
    const char *m = conformance_path("qwen3-dense-tiny-q4_k_m", "model.gguf");
    for (int len = 71; len >= 40; len -= 31) {
        snprintf(toks, sizeof toks, "%s/tokens-%d.txt", check_tmp_dir(), len);
        FILE *f = fopen(toks, "w");
        cr_assert_not_null(f);
        for (int i = 0; i < len; i++)
            fprintf(f, "%d\n", ids[i]);
        fclose(f);
        int rc = run(&out, "%s parity %s --mode cpu.decode --tokens %s", bin(), m, toks);
        if (len == 71) {
            cr_expect_eq(rc, 0, "%s", out);
            cr_expect(strstr(out, "71 positions"), "%s", out);
            cr_expect_eq(count_lines(out, "PASS") + count_lines(out, "FAIL"), 1, "one verdict: %s",
                         out);
        } else {
            cr_expect_eq(rc, 2, "fewer than 64 positions is an input error: %s", out);
            cr_expect(strstr(out, "at least 64"), "%s", out);
        }
        free(out);
    }
    free(ids);
}

Test(cmd_engine, generate_reproduces_the_exact_greedy_continuation)
{
    char prompt[1024], *out;
    snprintf(prompt, sizeof prompt, "%s/prompt.txt", check_tmp_dir());
    int n = 0;
    int32_t *ids = check_read_ids(conformance_path("qwen3-dense-tiny-q4_k_m", "tokens.txt"), &n);
    FILE *f = fopen(prompt, "w");
    for (int i = 0; i < 16; i++)
        fprintf(f, "%d\n", ids[i]);
    fclose(f);
    free(ids);
    int rc = run(&out, "%s generate %s --tokens %s --n 32 --ids", bin(),
                 conformance_path("qwen3-dense-tiny-q4_k_m", "model.gguf"), prompt);
    cr_assert_eq(rc, 0, "%s", out);
    int ne = 0;
    int32_t *want =
        check_read_ids(conformance_path("qwen3-dense-tiny-q4_k_m", "greedy_exact.txt"), &ne);
    char *p = out;
    for (int i = 0; i < ne; i++) {
        long v = strtol(p, &p, 10);
        cr_expect_eq(v, want[i], "generated id %d is %ld, greedy_exact.txt says %d", i, v, want[i]);
    }
    free(want);
    free(out);
    /* text mode through the tokenizer and the chat template runs and stops cleanly */
    rc = run(&out, "%s generate %s --prompt 'Hello there' --chat --n 4", bin(),
             conformance_path("qwen3-dense-tiny-q4_k_m", "model.gguf"));
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
}

Test(cmd_engine, model_inspect_describes_the_file)
{
    char *out;
    int rc = run(&out, "%s model inspect %s", bin(),
                 conformance_path("qwen3moe-tiny-q4_k_m", "model.gguf"));
    cr_assert_eq(rc, 0, "%s", out);
    const char *want[] = {
        "sha256:      9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560",
        "arch:        qwen3moe",
        "blk.1.ffn_down_exps.weight",
        "Q6_K",
        "head_dim 128",
        "experts 8 top-2",
        "supported:   yes"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(strstr(out, want[i]), "inspect output lacks \"%s\":\n%s", want[i], out);
    free(out);
}

Test(cmd_engine, bench_prints_prefill_and_decode_with_load_apart)
{
    char *out;
    int rc = run(&out,
                 "%s bench %s --threads 1 --prompt-tokens 8 --decode-tokens 4 --runs 3"
                 " --warmup 0",
                 bin(), conformance_path("qwen3-dense-tiny-f32", "model.gguf"));
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "load ") && strstr(out, "(not counted)"), "%s", out);
    cr_expect(strstr(out, "prefill ") && strstr(out, "median of 3"), "%s", out);
    cr_expect(strstr(out, "decode ") && strstr(out, "tokens/s"), "%s", out);
    free(out);
}

struct bad {
    const char *args;
    const char *want;
};

Test(cmd_engine, bad_inputs_are_exit_2_naming_the_problem)
{
    char toks[1024], bad_tok[1024], bad_id[1024];
    snprintf(toks, sizeof toks, "%s/t.txt", check_tmp_dir());
    snprintf(bad_tok, sizeof bad_tok, "%s/bad.txt", check_tmp_dir());
    snprintf(bad_id, sizeof bad_id, "%s/big.txt", check_tmp_dir());
    FILE *f = fopen(toks, "w");
    fputs("1 2 3\n", f);
    fclose(f);
    f = fopen(bad_tok, "w");
    fputs("1 2\nthree\n", f);
    fclose(f);
    f = fopen(bad_id, "w");
    fputs("1 600\n", f);
    fclose(f);
    const char *model = conformance_path("qwen3-dense-tiny-f32", "model.gguf");
    char cases[8][2048];
    const char *wants[8];
    int n = 0;
    snprintf(cases[n], sizeof cases[n], "eval /nonexistent.gguf --tokens %s --logits /tmp/x", toks);
    wants[n++] = "cannot open '/nonexistent.gguf'";
    snprintf(cases[n], sizeof cases[n], "eval %s --tokens %s --logits %s/o.f32", model, bad_tok,
             check_tmp_dir());
    wants[n++] = "bad.txt:2: 'three' is not a token id";
    snprintf(cases[n], sizeof cases[n], "eval %s --tokens %s --logits %s/o.f32", model, bad_id,
             check_tmp_dir());
    wants[n++] = "token id 600 at position 1 is out of range";
    snprintf(cases[n], sizeof cases[n], "generate %s --tokens %s --n 0", model, toks);
    wants[n++] = "--n '0' is not an integer in [1,";
    snprintf(cases[n], sizeof cases[n], "eval %s --logits x", model);
    wants[n++] = "usage: gate eval";
    snprintf(cases[n], sizeof cases[n], "model inspect %s", bad_tok);
    wants[n++] = "bad.txt: bad magic at byte 0 (expected 'GGUF'";
    snprintf(cases[n], sizeof cases[n], "frobnicate");
    wants[n++] = "unknown command 'frobnicate'";
    for (int i = 0; i < n; i++) {
        char *out;
        int rc = run(&out, "%s %s", bin(), cases[i]);
        cr_expect_eq(rc, 2, "gate %s: exit %d, expected 2:\n%s", cases[i], rc, out);
        cr_expect(out && strstr(out, wants[i]), "gate %s: output lacks \"%s\":\n%s", cases[i],
                  wants[i], out);
        free(out);
    }
}

Test(cmd_engine, every_command_answers_help)
{
    const char *cmds[] = {"model",  "eval",   "generate", "bench", "run",     "ladder",
                          "golden", "parity", "falsify",  "key",   "receipt", "release"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char *out;
        int rc = run(&out, "%s %s --help", bin(), cmds[i]);
        cr_expect_eq(rc, 0, "gate %s --help: exit %d\n%s", cmds[i], rc, out);
        cr_expect(out && strstr(out, "usage"), "gate %s --help prints no usage:\n%s", cmds[i], out);
        free(out);
    }
}

/* issue 16: a synthetic model's text means nothing by design, and gate says so (on stderr, so
 * the ids or text on stdout stay clean) */
Test(cmd_engine, generate_on_a_synthetic_model_says_the_weights_are_random)
{
    char model[1024], *out;
    snprintf(model, sizeof model, "%s/synthetic.gguf", check_tmp_dir());
    cr_assert_eq(run(&out, "%s model synth --preset tiny-dense --quant Q8_0 -o %s", bin(), model),
                 0, "%s", out);
    free(out);
    int rc = run(&out, "%s generate %s --prompt 'Hello' --n 2 2>&1 >/dev/null", bin(), model);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(out && strstr(out, "synthetic model") && strstr(out, "weights are random") &&
                  strstr(out, "meaningless by design"),
              "stderr: %s", out ? out : "");
    free(out);
    /* a real (non-synthetic) model carries no such note */
    rc = run(&out, "%s generate %s --prompt 'Hello' --n 2 2>&1 >/dev/null", bin(),
             conformance_path("qwen3-dense-tiny-q4_k_m", "model.gguf"));
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(out && !strstr(out, "synthetic"), "stderr: %s", out ? out : "");
    free(out);
}

/* issue 16: bench warns when prompt + decode tokens reach past the model's context, and says
 * what it is measuring (plain lines when stderr is not a terminal: this test's log). */
Test(cmd_engine, bench_warns_past_the_context_and_reports_progress)
{
    char small[1024], *out;
    snprintf(small, sizeof small, "%s/ctx16.gguf", check_tmp_dir());
    struct gguf_edit e = {.set_u32_key = "qwen3.context_length", .set_u32 = 16, .type = -1};
    gguf_edit_copy(conformance_path("qwen3-dense-tiny-f32", "model.gguf"), small, &e);
    int rc = run(&out, "%s bench %s --prompt-tokens 16 --decode-tokens 4 --runs 1 --warmup 0",
                 bin(), small);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "warning: 16 prompt + 4 decode tokens = 20 positions exceed the "
                          "model's context of 16"),
              "%s", out);
    cr_expect(strstr(out, "bench: ref.prefill, 0 warm-up + 1 timed run of 16 prompt + 4 decode "
                          "tokens: measuring\n"),
              "%s", out);
    cr_expect(strstr(out, "tokens: done in "), "%s", out);
    cr_expect(strstr(out, "tokens: 1 of 1 runs, elapsed "), "a line per finished run: %s", out);
    cr_expect(!strstr(out, "\033["), "no terminal codes when stderr is not a terminal: %s", out);
    free(out);
    /* within the context: no warning */
    rc = run(&out, "%s bench %s --prompt-tokens 8 --decode-tokens 8 --runs 1 --warmup 0", bin(),
             small);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(!strstr(out, "warning"), "%s", out);
    free(out);
}

/* gate bench's kernel-generation flags come from the backend rows (BACKEND_KNOBS, issue 24): a
 * value the mode's backend does not offer is an input error naming what it and the others offer,
 * before any model is read; the usage lists every value some backend offers. */
Test(cmd_engine, bench_kernel_generation_flags_are_checked_against_the_backend_rows)
{
    char *out;
    const char *m = conformance_path("qwen3-dense-tiny-q4_k_m", "model.gguf");
    int rc = run(&out, "%s bench %s --backend cpu --graph on", bin(), m);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "--graph on, but backend 'cpu' has no graph generations to select"
                          " (cuda: off,on)"),
              "%s", out);
    free(out);
    rc = run(&out, "%s bench %s --mode cuda.decode --attn v2", bin(), m);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "--attn v2, but backend 'cuda' offers only v1,split"), "%s", out);
    free(out);
    rc = run(&out, "%s bench --help", bin());
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "[--gemv v1|v2] [--route v1|v2]") &&
                  strstr(out, "[--attn v1|split] [--graph off|on]") &&
                  strstr(out, "receipts record it in metrics.ran.graph"),
              "%s", out);
    free(out);
}
