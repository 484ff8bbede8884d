/* test_longctx.c — long context (issue 26 §2): the memory arithmetic of harness/budget.c on
 * shapes computed by hand, the 0.6B real shape's 32k rung fitting a 22 GiB limit (F32 and F16 KV)
 * now that parity keeps only the judged rows, a cell that does not fit refused up front with its
 * figures (a FAILED row and metrics.memory in the receipt, never a crash), a sequence past the
 * model's context length refused at ladder check, and parity over 4,096 positions of a tiny model
 * with the judged positions spread over the whole span, F32 and F16 KV caches, the F32 run's
 * numbers bit for bit those of a run that keeps every row.
 * Under ASan (check_asan(): the sanitizer build, ~5-10x slower, proves memory safety; the normal
 * build proves the numbers) the runs span 1,024 positions (four of the judge's 256-row chunks,
 * 64 judged, one per stratum of 16) instead of 4,096, printed as "ASan: span 1024 of 4096"; the
 * memory arithmetic runs no forward and is the same in both builds.
 * Start reading: the arithmetic tests, then the refusal, then the run.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "harness/budget.h"
#include "harness/gatedef.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include "tests/support/check.h"
#include "tests/support/ladderfix.h"

static struct ladderfix fx;

/* The hyperparameters of a synth preset (the published shapes). */
static struct model_hparams preset_hp(const char *name)
{
    const struct synth_spec *s = synth_preset_find(name);
    cr_assert(s, "no preset %s", name);
    struct model_hparams hp = {.arch = s->arch,
                               .n_vocab = s->n_vocab,
                               .n_ctx_train = s->n_ctx,
                               .n_embd = s->n_embd,
                               .n_layer = s->n_layer,
                               .n_head = s->n_head,
                               .n_head_kv = s->n_head_kv,
                               .head_dim = s->head_dim,
                               .n_ff = s->n_ff,
                               .n_expert = s->n_expert,
                               .n_expert_used = s->n_expert_used,
                               .n_ff_exp = s->n_ff_exp};
    return hp;
}

Test(longctx, kv_bytes_of_the_real_shapes_by_hand)
{
    /* Qwen3-0.6B: 28 layers x 2 x 8 KV heads x 128 x positions x bytes */
    const struct model_hparams q06 = preset_hp("qwen3-0.6b");
    cr_expect_eq(budget_kv_bytes(&q06, 4096, 4), 939524096ull); /* 896 MiB */
    cr_expect_eq(budget_kv_bytes(&q06, 4096, 2), 469762048ull);
    cr_expect_eq(budget_kv_bytes(&q06, 32768, 4), 7516192768ull); /* 7 GiB */
    /* Qwen3-30B-A3B: 48 layers x 2 x 4 KV heads x 128 */
    const struct model_hparams a3b = preset_hp("qwen3-30b-a3b");
    cr_expect_eq(budget_kv_bytes(&a3b, 32768, 4), 6442450944ull);
    cr_expect_eq(budget_kv_bytes(&a3b, 16384, 2), 1610612736ull);
}

/* A dense shape small enough to add up by hand: V 512, 4 layers, E 256, 4 heads / 2 KV heads of
 * 64, FFN 512 (the byte and time arithmetic tests below share it). */
static struct model_hparams small_dense(void)
{
    return (struct model_hparams){.arch = MODEL_ARCH_QWEN3,
                                  .n_vocab = 512,
                                  .n_embd = 256,
                                  .n_layer = 4,
                                  .n_head = 4,
                                  .n_head_kv = 2,
                                  .head_dim = 64,
                                  .n_ff = 512};
}

Test(longctx, the_parity_session_bytes_term_by_term)
{
    /* a dense shape small enough to add up by hand: V 512, 4 layers, E 256, 4 heads / 2 KV heads
     * of 64, FFN 512; S 4096, 64 judged (a sampled span: only those rows are kept), an F16
     * subject on the decode path in this process */
    const struct model_hparams hp = small_dense();
    struct budget_memory m;
    budget_memory(&hp, 4096, 64, MODE_DECODE, 2, 1, 1, &m);
    cr_expect_eq(m.judge_batch, MODE_JUDGE_CHUNK);
    cr_expect_eq(m.subject_call, 1);
    /* KV: judge 4*2*2*64*4096*4 = 16,777,216 (F32) + subject half of it (F16) */
    cr_expect_eq(m.kv_bytes, 16777216ull + 8388608ull);
    cr_expect_eq(m.kv_subject_bytes, 8388608ull);
    /* logits: 4 bytes x 512 x (2 x 64 judged rows + the judge's 256-row chunk + the subject's
     * one-token call) */
    cr_expect_eq(m.logits_bytes, 4ull * 512 * (128 + 256 + 1));
    /* taps: 4 bytes x 4 layers x (2 sides x 64 rows x 256 + (1 + 256) call rows x 256) */
    cr_expect_eq(m.taps_bytes, 16ull * (2 * 64 * 256 + 257 * 256));
    /* activations, floats: the judge's batch of 256: 256 x (3*256 + 2*256 + 2*128) = 393,216,
     * FFN 2*256*512 = 262,144; its scores 17*16*4096 = 1,114,112 and RoPE 4096*64 = 262,144
     * (n_ctx): 2,031,616. The subject's batch of its one-token call (oracles/parity.c opens it
     * with mode_longest_call): 1,536 + 1,024 + 1,114,112 + 262,144 = 1,378,816 (a batch of
     * 4096 was 11,862,016), and one layer of its F16 cache as floats, 2*4096*128 = 1,048,576 */
    cr_expect_eq(m.activation_bytes, 4ull * (2031616ull + 1378816ull + 1048576ull));
    /* the forced layers of a sampled span: the twin's ONE layer of F32 cache, 2*2*64*4096*4 =
     * 4,194,304 bytes; its buffers at a batch of 256 (2,031,616 floats, as the judge's); the
     * layer outputs at the 64 judged rows 4*64*256 = 65,536, route scratch 4*4096 = 16,384, 128
     * head rows of 512 = 65,536, and the subject's hidden state at every position 4*4096*256 =
     * 4,194,304 floats (each layer's input) */
    cr_expect_eq(m.forced_bytes,
                 4194304ull + 4ull * (2031616ull + 65536 + 16384 + 65536 + 4194304ull));
    cr_expect_eq(m.other_bytes,
                 m.logits_bytes + m.taps_bytes + m.activation_bytes + m.forced_bytes);
    cr_expect_eq(m.total_bytes, m.kv_bytes + m.other_bytes);
    /* an external engine's memory is its own: only the judge's cache and buffers count */
    struct budget_memory ext;
    budget_memory(&hp, 4096, 64, MODE_DECODE, 2, 0, 0, &ext);
    cr_expect_eq(ext.kv_bytes, 16777216ull);
    cr_expect_eq(ext.activation_bytes, 4ull * 2031616ull);
    /* every position judged (no span): both sides' rows written in place, the judge in one call
     * of S; the prefill subject's longest call is the first half */
    struct budget_memory all;
    budget_memory(&hp, 96, 96, MODE_PREFILL, 4, 1, 1, &all);
    cr_expect_eq(all.judge_batch, 96);
    cr_expect_eq(all.subject_call, 48);
    cr_expect_eq(all.logits_bytes, 4ull * 512 * 192);
    cr_expect_eq(all.taps_bytes, 16ull * (2 * 96 * 256 + 48 * 256));
    /* the forced layers' twin: one layer of F32 cache 2*2*64*96*4 = 98,304; buffers for a batch
     * of 96 (96 x 1,536 + FFN 2*96*512 + scores 17*16*96 + RoPE 96*64 = 278,016 floats); layer
     * outputs 4*96*256, route scratch 4*96 and 128 head rows of 512 logits, in floats (the
     * hidden states are the session's taps: every position is judged) */
    cr_expect_eq(all.forced_bytes, 98304ull + 4ull * (278016 + 4 * 96 * 256 + 4 * 96 + 128 * 512));
    cr_expect_eq(all.other_bytes,
                 all.logits_bytes + all.taps_bytes + all.activation_bytes + all.forced_bytes);
    cr_expect_eq(ext.forced_bytes, 0, "an external engine reports no hidden states");
    /* an in-process subject whose roundings the twin does not model (cuda until a device run
     * calibrates it) has no forced layers measured: none counted either */
    struct budget_memory dev;
    budget_memory(&hp, 4096, 64, MODE_DECODE, 2, 1, budget_forced("cuda"), &dev);
    cr_expect_eq(dev.forced_bytes, 0);
    cr_expect_eq(dev.total_bytes, m.total_bytes - m.forced_bytes);
    cr_expect(budget_forced("cpu") && budget_forced("ref"));
    cr_expect_not(budget_forced("cuda") || budget_forced("exec") || budget_forced("nosuch"));
}

/* The 0.6B real shape (hidden 1024, 28 layers, 8 KV heads x 128, vocabulary 151,936) at 32,768
 * positions, 96 judged, on the decode path, against a 22 GiB limit read from GATE_MEMORY_LIMIT
 * as gate run reads it. */
static int q06_32k_fits(int kv_elem, struct budget_memory *m, struct gate_err *err)
{
    const struct model_hparams q06 = preset_hp("qwen3-0.6b");
    cr_assert_eq(q06.n_vocab, 151936u);
    cr_assert_eq(q06.n_embd, 1024u);
    budget_memory(&q06, 32768, 96, MODE_DECODE, kv_elem, 1, 1, m);
    struct budget_available a;
    setenv("GATE_MEMORY_LIMIT", "22G", 1);
    const int rc = budget_available(&a, err);
    unsetenv("GATE_MEMORY_LIMIT");
    cr_assert_eq(rc, 0, "%s", err->msg);
    cr_assert_eq(a.bytes, 22ull << 30);
    fprintf(stderr,
            "0.6B 32k %s: %.2f GiB (KV %.2f, logits %.3f, taps %.3f, activations %.2f, forced"
            " %.2f) of 22\n",
            kv_elem == 2 ? "F16" : "F32", m->total_bytes / 1073741824.0, m->kv_bytes / 1073741824.0,
            m->logits_bytes / 1073741824.0, m->taps_bytes / 1073741824.0,
            m->activation_bytes / 1073741824.0, m->forced_bytes / 1073741824.0);
    return budget_check(m, &a, err);
}

Test(longctx, a_32k_rung_of_the_real_shape_fits_22_gib_with_f32_and_f16_kv)
{
    /* only the judged rows' logits: 4 x 151,936 x (2 x 96 + 256 + 1) bytes, 260 MiB, where both
     * sides' whole logits were 4 x 151,936 x (65,536 + 192), about 37 GiB */
    for (int kv_elem = 4; kv_elem >= 2; kv_elem -= 2) {
        struct budget_memory m;
        struct gate_err err = {0};
        cr_expect_eq(q06_32k_fits(kv_elem, &m, &err), 0, "kv %d bytes: %s", kv_elem, err.msg);
        cr_expect_eq(m.logits_bytes, 4ull * 151936ull * (192 + 256 + 1));
        cr_expect_eq(m.kv_bytes, 7516192768ull + 7516192768ull / 4 * (uint64_t)kv_elem);
        cr_expect_lt(m.total_bytes, 22ull << 30);
    }
}

Test(longctx, a_cell_that_truly_does_not_fit_is_still_refused_with_its_figures)
{
    /* the 4B shape at 32,768 positions with F32 caches: 18 GiB of KV, and 11.3 GiB more for its
     * forced layers (the subject's hidden state at every position: 36 x 32,768 x 2,560 floats):
     * 30.2 GiB, refused on a 22 GiB host with the figures, accepted on a 32 GiB one; on a 16 GiB
     * one the KV alone does not fit, whatever parity keeps */
    const struct model_hparams q4b = preset_hp("qwen3-4b");
    struct budget_memory m;
    budget_memory(&q4b, 32768, 96, MODE_DECODE, 4, 1, 1, &m);
    cr_expect_eq(m.kv_bytes, 2 * budget_kv_bytes(&q4b, 32768, 4));
    cr_expect_eq(m.logits_bytes, 4ull * 151936ull * (192 + 256 + 1));
    fprintf(stderr, "4B 32k F32: %.2f GiB (activations %.3f)\n", m.total_bytes / 1073741824.0,
            m.activation_bytes / 1073741824.0);
    struct budget_available fits = {.bytes = 32ull << 30};
    struct gate_err err = {0};
    cr_expect_eq(budget_check(&m, &fits, &err), 0, "%s", err.msg);
    cr_expect_gt(m.forced_bytes, 11ull << 30);
    struct budget_available host = {.bytes = 22ull << 30};
    snprintf(host.source, sizeof host.source, "test");
    cr_expect_eq(budget_check(&m, &host, &err), ERR_ENV);
    cr_expect(strstr(err.msg, "forced layers 1") && strstr(err.msg, "22528 MiB available"), "%s",
              err.msg);
    err = (struct gate_err){0};
    struct budget_available a = {.bytes = 16ull << 30};
    snprintf(a.source, sizeof a.source, "test");
    cr_expect_eq(budget_check(&m, &a, &err), ERR_ENV);
    cr_expect(strstr(err.msg, "32768 positions") && strstr(err.msg, "16384 MiB available (test)") &&
                  strstr(err.msg, "KV caches 18432 MiB"),
              "%s", err.msg);
    json_t *j = budget_memory_json(&m, &a);
    cr_expect(json_is_false(json_object_get(j, "fits")));
    cr_expect_eq(json_integer_value(json_object_get(j, "kv_bytes")), (json_int_t)m.kv_bytes);
    cr_expect_eq(json_integer_value(json_object_get(j, "judge_batch")), MODE_JUDGE_CHUNK);
    cr_expect_eq(json_integer_value(json_object_get(j, "subject_call")), 1);
    json_decref(j);
}

Test(longctx, the_time_estimate_counts_weights_and_attention)
{
    const struct model_hparams hp = small_dense();
    /* weights: 2 x (4 x (256*256 + 2*256*128 + 256*256 + 3*256*512) + 512*256) = 4,980,736;
     * attention at position 0: 4 x 4 x 64 x 4 = 4,096 */
    cr_expect_float_eq(budget_token_gflop(&hp, 0), (4980736.0 + 4096.0) * 1e-9, 1e-15);
    cr_expect_float_eq(budget_token_gflop(&hp, 99), (4980736.0 + 409600.0) * 1e-9, 1e-15);
    /* parity alone over 100 tokens, judge and subject: 2 x (100 x weights + 4096 x 5050) */
    struct budget_time_in in = {.parity_S = 100, .threads = 2};
    struct budget_time t;
    budget_time(&hp, &in, &t);
    cr_expect_float_eq(t.tokens, 200.0, 1e-9);
    cr_expect_float_eq(t.gflop, 2 * (100 * 4980736.0 + 4096.0 * 5050) * 1e-9, 1e-12);
    cr_expect_float_eq(t.seconds, t.gflop / (BUDGET_GFLOPS_PER_THREAD * 2), 1e-15);
    /* the forced layers, every position judged: one more pass of the twin over the sequence */
    struct budget_time tf;
    in.parity_forced = 1;
    in.parity_judged = 100;
    budget_time(&hp, &in, &tf);
    cr_expect_float_eq(tf.tokens, 300.0, 1e-9);
    cr_expect_float_eq(tf.gflop, 1.5 * t.gflop, 1e-12);
    /* a sampled span, 4096 positions with 64 judged: K and V at every position (4 x 256 x 128
     * x 4 layers = 524,288 flops per token) and the 64 judged positions' layers, each attending
     * to half the span on average */
    struct budget_time_in sp = {.parity_S = 4096, .parity_judged = 64, .threads = 2};
    budget_time(&hp, &sp, &t);
    sp.parity_forced = 1;
    budget_time(&hp, &sp, &tf);
    cr_expect_float_eq(tf.gflop - t.gflop,
                       (4096 * 524288.0 + 64 * (4980736.0 + 4096.0 * 2048)) * 1e-9, 1e-12);
}

Test(longctx, the_available_memory_is_the_configured_limit_or_memavailable)
{
    struct budget_available a;
    struct gate_err err = {0};
    setenv("GATE_MEMORY_LIMIT", "64M", 1);
    cr_expect_eq(budget_available(&a, &err), 0, "%s", err.msg);
    cr_expect_eq(a.bytes, 64ull << 20);
    setenv("GATE_MEMORY_LIMIT", "12x", 1);
    cr_expect_eq(budget_available(&a, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "GATE_MEMORY_LIMIT='12x'"), "%s", err.msg);
    unsetenv("GATE_MEMORY_LIMIT");
    err_clear(&err);
    cr_expect_eq(budget_available(&a, &err), 0, "%s", err.msg);
    cr_expect_gt(a.bytes, 0);
    cr_expect(strstr(a.source, "MemAvailable"), "%s", a.source);
}

/* ---- the refusal, end to end ------------------------------------------------------------- */

Test(longctx, a_cell_that_does_not_fit_is_refused_before_it_runs_with_its_figures, .timeout = 1200)
{
    ladderfix_init(&fx, "longctx");
    const char *p = ladderfix_one_cell(&fx, "l.yaml", NULL, "ref.decode", NULL, NULL);
    struct run_options o = {.ladder = p,
                            .host = "a",
                            .db = ladderfix_path(&fx, "r.db"),
                            .key = ladderfix_path(&fx, "a.key"),
                            .threads = 1};
    struct run_result res;
    struct gate_err err = {0};
    setenv("GATE_MEMORY_LIMIT", "1M", 1);
    const int rc = run_ladder(&o, NULL, NULL, &res, &err);
    unsetenv("GATE_MEMORY_LIMIT");
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_assert_eq(res.n, 1);
    const struct run_cell_result *c = &res.cells[0];
    cr_expect_str_eq(c->verdict, "FAIL");
    cr_expect_gt(c->receipt_id, 0, "a refused cell still gets its signed receipt");
    /* every gate is a FAILED row naming the figures: nothing ran */
    cr_assert_gt(c->n_gates, 0);
    for (int g = 0; g < c->n_gates; g++) {
        cr_expect_str_eq(c->gates[g].verdict, "FAIL", "gate %s", c->gates[g].name);
        cr_expect(strstr(c->gates[g].summary, "memory refused before the cell ran: 64 positions") &&
                      strstr(c->gates[g].summary, "1 MiB available (GATE_MEMORY_LIMIT=1M)"),
                  "gate %s: %s", c->gates[g].name, c->gates[g].summary);
    }
    /* the receipt holds the arithmetic */
    json_t *mem = json_object_get(
        json_object_get(json_object_get(c->gates_json, "parity"), "metrics"), "memory");
    cr_assert(json_is_object(mem), "parity's metrics.memory is missing");
    cr_expect(json_is_false(json_object_get(mem, "fits")));
    cr_expect_eq(json_integer_value(json_object_get(mem, "available_bytes")), 1 << 20);
    cr_expect_eq(json_integer_value(json_object_get(mem, "positions")), 64);
    cr_expect_gt(json_integer_value(json_object_get(mem, "kv_bytes")), 0);
    cr_expect_eq(json_integer_value(json_object_get(mem, "total_bytes")),
                 json_integer_value(json_object_get(mem, "kv_bytes")) +
                     json_integer_value(json_object_get(mem, "other_bytes")));
    run_result_free(&res);
}

Test(longctx, a_sequence_past_the_context_length_is_an_input_error_at_ladder_check)
{
    ladderfix_init(&fx, "longctx-ctx");
    /* tiny-dense's context_length is 4096 (engine/synth.c): a 4096 span fits, 8192 does not */
    for (int span = 4096; span <= 8192; span *= 2) {
        const char *p = ladderfix_path(&fx, "ctx.yaml");
        FILE *f = fopen(p, "w");
        cr_assert(f);
        fprintf(f,
                "release: {name: rel, version: 1.0.0}\n"
                "models:\n  d: {synth: {preset: tiny-dense, quant: Q4_K_M, seed: 1},"
                " sha256: 91d5b06bdb37e3f7c42f37d761857b150130488e18619bd7a06e08cc4bb923d0,"
                " arch: qwen3}\n"
                "hosts:\n  a: {device: none, trust: ['file:a.pub']}\n"
                "modes: [cpu.decode]\n"
                "cells:\n  - {model: d, host: a, mode: cpu.decode}\n"
                "gates:\n  defaults:\n    parity: {positions: 64, span: %d}\n"
                "    golden: {goldens: g.json, sha256: %064d}\n"
                "unanchored: {qwen3: 'test'}\n",
                span, 0);
        fclose(f);
        struct ladder *l = NULL;
        struct gate_err err = {0};
        cr_assert_eq(ladder_load(&l, p, &err), 0, "%s", err.msg);
        const int rc = ladder_check_files(l, &err);
        if (span == 4096) { /* refused for its missing goldens, not for its length */
            cr_expect(!strstr(err.msg, "context length"), "%s", err.msg);
        } else {
            cr_expect_eq(rc, ERR_INPUT);
            cr_expect(strstr(err.msg, "runs 8192 positions but model 'd' has context length 4096"),
                      "%s", err.msg);
        }
        ladder_free(l);
    }
}

/* ---- a long context on a tiny model ------------------------------------------------------ */

/* The smallest shape that still has every part (GQA, Q/K norms, RoPE from the file, the FFN, an
 * untied output): one layer, hidden 64, 2 query heads and 1 KV head of 32, FFN 128, 512 tokens,
 * Q8_0, context_length 4096. Judge and subject each run 4,096 positions in a few CPU seconds
 * (the tiny-dense preset's 4 layers of 4 heads take ~100 s for the same span). */
static struct model *long_model(uint8_t **buf)
{
    struct synth_options o;
    memset(&o, 0, sizeof o);
    o.spec = (struct synth_spec){.name = "custom",
                                 .arch = MODEL_ARCH_QWEN3,
                                 .n_vocab = 512,
                                 .n_ctx = 4096,
                                 .n_embd = 64,
                                 .n_layer = 1,
                                 .n_head = 2,
                                 .n_head_kv = 1,
                                 .head_dim = 32,
                                 .n_ff = 128,
                                 .rope_base = 1e6f,
                                 .eps = 1e-6f,
                                 .tied = 0};
    o.quant = SYNTH_Q8_0;
    o.seed = 26;
    return check_synth_model(&o, "long", buf);
}

/* The span of the long runs: the model's whole context (4,096), or 1,024 under ASan (said on
 * stderr). */
static int long_span(void)
{
    if (!check_asan())
        return 4096;
    fprintf(stderr, "longctx: ASan: span 1024 of 4096 positions (the normal build runs 4096)\n");
    return 1024;
}

/* parity over the span (the model's whole context, 4,096 positions), 64 judged, on the cpu
 * engine's decode with the given KV cache into *pr (free with parity_result_free): PASS, and one
 * judged position per stratum of span / 64, the first in [0, span / 64), the last position
 * span - 1. */
static void run_long(const struct model *m, int kv_f16, int span, struct parity_result *pr)
{
    cr_assert_eq(m->hp.n_ctx_train, 4096u);
    struct mode mode;
    struct gate_err err = {0};
    cr_assert_eq(mode_parse("cpu.decode", &mode, &err), 0, "%s", err.msg);
    mode.kv_f16 = kv_f16;
    struct parity_config cfg;
    gatedef_parity_config(NULL, &cfg);
    cfg.positions = 64;
    cfg.span = span;
    cfg.seed = 26;
    memset(pr, 0, sizeof *pr);
    cr_assert_eq(parity_run(m, &mode, NULL, NULL, 0, &cfg, 2, pr, &err), 0, "%s", err.msg);
    cr_expect(pr->pass, "kv %s: %s", kv_f16 ? "f16" : "f32", pr->reason);
    cr_expect_eq(pr->seq_len, span);
    cr_assert_eq(pr->n_pos, 64);
    const int stratum = span / 64;
    for (int i = 0; i < 64; i++)
        cr_expect(pr->pos[i].position >= i * stratum && pr->pos[i].position < (i + 1) * stratum,
                  "judged position %d is %d, outside its stratum", i, pr->pos[i].position);
    cr_expect_eq(pr->pos[63].position, span - 1, "the last position is judged");
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < pr->n_pos; i++) {
        const struct parity_pos *q = &pr->pos[i];
        const double d[6] = {q->cosine,       q->rel_l2,  q->kld,
                             q->max_abs_diff, q->ref_gap, (double)q->position};
        const int e[4] = {q->top5, q->ref_top, q->test_top, (int)q->cls};
        const unsigned char *b = (const unsigned char *)d;
        for (size_t j = 0; j < sizeof d; j++)
            h = (h ^ b[j]) * 1099511628211ull;
        b = (const unsigned char *)e;
        for (size_t j = 0; j < sizeof e; j++)
            h = (h ^ b[j]) * 1099511628211ull;
    }
    fprintf(stderr, "longctx %d kv %s: min cos %.17g, max KL %.17g, digest %016llx\n", span,
            kv_f16 ? "f16" : "f32", pr->cosine.min, pr->kld.max, (unsigned long long)h);
}

Test(longctx, parity_over_4096_positions_judges_the_whole_span_f16, .timeout = 1200)
{
    uint8_t *buf = NULL;
    struct model *m = long_model(&buf);
    struct parity_result pr;
    run_long(m, 1, long_span(), &pr);
    parity_result_free(&pr);
    model_free(m);
    free(buf);
}

/* The F32 run over the span (run_long's assertions), and issue 26 §2: a sampled span keeps only
 * its judged rows (the judge in calls of MODE_JUDGE_CHUNK, each call's rows through a scratch).
 * Every number of a judged position must be bit for bit what the same position gets when every
 * position is kept and judged (the same tokens supplied: the judge in one call, both sides'
 * whole logits). */
Test(longctx, parity_over_4096_positions_f32_keeps_the_whole_runs_rows_bit_for_bit, .timeout = 1200)
{
    uint8_t *buf = NULL;
    struct model *m = long_model(&buf);
    const int span = long_span();
    struct mode mode;
    struct gate_err err = {0};
    cr_assert_eq(mode_parse("cpu.decode", &mode, &err), 0, "%s", err.msg);
    struct parity_config cfg;
    gatedef_parity_config(NULL, &cfg);
    cfg.positions = 64;
    cfg.seed = 26;
    struct parity_result kept, all;
    run_long(m, 0, span, &kept);
    memset(&all, 0, sizeof all);
    int32_t *ids = malloc((size_t)span * sizeof *ids);
    cr_assert(ids);
    mode_tokens(PARITY_TOKEN_SEED, m->hp.n_vocab, span, ids); /* the span's sequence */
    cfg.span = 0;
    cr_assert_eq(parity_run(m, &mode, NULL, ids, span, &cfg, 2, &all, &err), 0, "%s", err.msg);
    cr_assert_eq(kept.n_pos, 64);
    cr_assert_eq(all.n_pos, span);
    for (int i = 0; i < kept.n_pos; i++) {
        const struct parity_pos *a = &kept.pos[i], *b = &all.pos[kept.pos[i].position];
        cr_assert_eq(b->position, a->position);
        cr_expect(!memcmp(&a->cosine, &b->cosine, sizeof a->cosine) &&
                      !memcmp(&a->rel_l2, &b->rel_l2, sizeof a->rel_l2) &&
                      !memcmp(&a->kld, &b->kld, sizeof a->kld) &&
                      !memcmp(&a->max_abs_diff, &b->max_abs_diff, sizeof a->max_abs_diff) &&
                      !memcmp(&a->ref_gap, &b->ref_gap, sizeof a->ref_gap) && a->top5 == b->top5 &&
                      a->ref_top == b->ref_top && a->test_top == b->test_top && a->cls == b->cls,
                  "position %d: kept cos %.17g KL %.17g, whole run cos %.17g KL %.17g", a->position,
                  a->cosine, a->kld, b->cosine, b->kld);
    }
    parity_result_free(&kept);
    parity_result_free(&all);
    free(ids);
    model_free(m);
    free(buf);
}

/* The memory a cell is held to is that of its whole span (the sequence parity runs, `positions`
 * of it judged), not of the judged positions alone; the chat path has no span. A run that judges
 * every position runs its judge in one call (its batch is the sequence). A cell fits when its
 * total is at most what is available, to the byte. */
Test(longctx, a_cell_s_memory_is_its_whole_span_s_and_fits_to_the_byte)
{
    const struct model_hparams hp = small_dense();
    struct ladder_gates g;
    memset(&g, 0, sizeof g);
    g.positions = 64;
    g.span = 4096;
    struct budget_memory m, c;
    struct budget_time t;
    budget_cell(&g, &hp, MODE_DECODE, 0, 1, 1, 1, &m, &t);
    cr_expect_eq(m.positions, 4096, "the span's positions: %d", m.positions);
    cr_expect_eq(m.judged, 64);
    cr_expect_eq(m.kv_bytes, 2 * budget_kv_bytes(&hp, 4096, 4));
    budget_cell(&g, &hp, MODE_CHAT, 0, 1, 1, 1, &c, &t);
    cr_expect_eq(c.positions, 64, "chat: the positions, no span");
    /* every position judged: one judge call over the whole sequence */
    struct budget_memory all;
    budget_memory(&hp, 4096, 4096, MODE_DECODE, 4, 1, 1, &all);
    cr_expect_eq(all.judge_batch, 4096);
    struct gate_err err = {0};
    struct budget_available exact = {.bytes = m.total_bytes};
    cr_expect_eq(budget_check(&m, &exact, &err), 0, "%s", err.msg);
    struct budget_available short_one = {.bytes = m.total_bytes - 1};
    cr_expect_eq(budget_check(&m, &short_one, &err), ERR_ENV);
}
