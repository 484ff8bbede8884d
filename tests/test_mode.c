/* test_mode.c — the execution paths: parsing the fixed mode list, the judge against the exact
 * logits, ref.decode / ref.prefill / ref.chat against the judge on the conformance MoE model
 * (their noise ceiling), taps across forward calls, the chat conversation and its fallback,
 * and the capability gate (including the cuda mode that launched nothing).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"
#include "harness/gatedef.h"
#include "harness/ladder.h"
#include "oracles/capability.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include "support/check.h"

Test(mode, prefill_split_covers_the_tokens_unevenly)
{
    int ch[MODE_MAX_CHUNKS];
    for (uint64_t seed = 0; seed < 50; seed++)
        for (int n = 1; n < 700; n += 37) {
            int k = mode_prefill_split(seed, n, ch, MODE_MAX_CHUNKS), sum = 0;
            cr_assert(k >= 1 && k <= MODE_MAX_CHUNKS);
            for (int i = 0; i < k; i++) {
                cr_assert_geq(ch[i], 1);
                sum += ch[i];
            }
            cr_assert_eq(sum, n, "seed %llu n %d", (unsigned long long)seed, n);
            if (n >= 48)
                cr_expect_geq(k, 2);
        }
    cr_expect_eq(mode_prefill_split(1, 0, ch, MODE_MAX_CHUNKS), 0);
}

/* The batch parity opens its subject with (oracles/parity.c): the longest call each path makes,
 * so a decode session over a long span holds one row of activations and no call of a path is cut
 * into chunks the ladder did not ask for. */
Test(mode, the_longest_call_of_each_path)
{
    cr_expect_eq(mode_longest_call(MODE_DECODE, 32768, NULL, 0, NULL, 0), 1);
    cr_expect_eq(mode_longest_call(MODE_PREFILL, 96, NULL, 0, NULL, 0), 48);
    cr_expect_eq(mode_longest_call(MODE_PREFILL, 1, NULL, 0, NULL, 0), 1);
    const int chunks[] = {7, 45, 3};
    cr_expect_eq(mode_longest_call(MODE_PREFILL, 96, NULL, 0, chunks, 3), 45);
    /* chat: user turns are the even segments; the assistant's (odd) are decoded a token a time */
    const int turns[] = {10, 60, 90, 95, 120, 128};
    cr_expect_eq(mode_longest_call(MODE_CHAT, 128, turns, 6, NULL, 0), 30);
    const int long_user[] = {70, 71, 90, 95, 120, 128};
    cr_expect_eq(mode_longest_call(MODE_CHAT, 128, long_user, 6, NULL, 0), 70);
    /* a batch outside 1..n_ctx is refused at open, naming the mode */
    uint8_t *buf = NULL;
    struct model *m = check_tiny_model("tiny-dense", &buf);
    struct mode md;
    cr_assert_eq(mode_parse("ref.decode", &md, NULL), 0);
    struct backend *b = NULL;
    struct gate_err err = {0};
    cr_expect_eq(mode_open_batch(&b, &md, m, 64, 65, 1, NULL, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "ref.decode") && strstr(err.msg, "1..64"), "%s", err.msg);
    cr_expect_eq(mode_open_batch(&b, &md, m, 64, 0, 1, NULL, &err), ERR_INPUT);
    cr_assert_eq(mode_open_batch(&b, &md, m, 64, 1, 1, NULL, &err), 0, "%s", err.msg);
    cr_expect_eq(b->n_batch, 1);
    backend_close(b);
    model_free(m);
    free(buf);
}

Test(mode, parses_the_fixed_list_only)
{
    const char *backends[] = {"cuda", "cpu", "ref"}, *paths[] = {"decode", "prefill", "chat"};
    struct gate_err err = {0};
    struct mode m;
    for (int b = 0; b < 3; b++)
        for (int p = 0; p < 3; p++) {
            char text[32], back[32];
            snprintf(text, sizeof text, "%s.%s", backends[b], paths[p]);
            cr_expect_eq(mode_parse(text, &m, &err), 0, "%s: %s", text, err.msg);
            cr_expect_str_eq(m.backend, backends[b]);
            cr_expect_eq((int)m.path, p);
            mode_format(&m, back, sizeof back);
            cr_expect_str_eq(back, text);
        }
    const char *bad[] = {"ref",         "ref.",         ".decode",
                         "refx.decode", "ref.decodex",  "vulkan.decode",
                         "ref.batch",   "ref.decode.x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err_clear(&err);
        cr_expect_eq(mode_parse(bad[i], &m, &err), ERR_INPUT, "'%s' accepted", bad[i]);
        cr_expect(strstr(err.msg, "decode, prefill, chat"), "%s", err.msg);
    }
}

Test(mode, judge_matches_the_exact_logits)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    char path[4096];
    snprintf(path, sizeof path, "%s/conformance/qwen3moe-tiny-f32/logits_exact.f32",
             check_shared_dir());
    size_t size = 0;
    float *exact = (float *)check_slurp(path, &size);
    cr_assert_not_null(exact);
    cr_assert_eq(size, 96 * 512 * sizeof(float));
    int32_t tokens[96];
    mode_tokens(202, 512, 96, tokens);
    struct mode ref = {.backend = "ref", .path = MODE_PREFILL};
    struct backend *b = NULL;
    struct gate_err err = {0};
    cr_assert_eq(mode_open(&b, &ref, m, 96, 2, NULL, &err), 0, "%s", err.msg);
    float *logits = malloc(96 * 512 * sizeof *logits);
    cr_assert_eq(mode_judge(b, tokens, 96, logits, NULL, &err), 0, "%s", err.msg);
    check_floats("judge vs exact", logits, exact, 96 * 512, 1e-4, 1e-4, 1e-10);
    free(logits);
    free(exact);
    backend_close(b);
    model_free(m);
}

/* Each ref path against the judge: PASS, and the noise ceiling is printed for docs/gates.md. */
static void path_passes(const char *mode_text)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    struct parity_config c;
    gatedef_parity_config(NULL, &c);
    struct mode mode;
    struct gate_err err = {0};
    struct parity_result r;
    cr_assert_eq(mode_parse(mode_text, &mode, &err), 0);
    cr_assert_eq(parity_run(m, &mode, NULL, NULL, 0, &c, 2, &r, &err), 0, "%s", err.msg);
    cr_expect(r.pass, "%s: %s", mode_text, r.reason);
    cr_expect_eq(r.n_wrong, 0);
    cr_expect_eq(r.chat_fallback, 0);
    printf("noise ceiling %s (%d positions): min cosine %.9f, mean KLD %.3g, max KLD %.3g,"
           " max |dlogit| %.3g, severity %.3g\n",
           mode_text, r.n_pos, r.cosine.min, r.kld.mean, r.kld.max, r.max_abs_diff.max,
           parity_severity(&r));
    cr_expect_lt(parity_severity(&r), 0.01, "%s noise sits near the thresholds", mode_text);
    parity_result_free(&r);
    model_free(m);
}

Test(mode, ref_decode_passes_parity)
{
    path_passes("ref.decode");
}

Test(mode, ref_prefill_passes_parity)
{
    path_passes("ref.prefill");
}

Test(mode, ref_chat_passes_parity)
{
    path_passes("ref.chat");
}

Test(mode, taps_across_calls_equal_the_judges)
{
    /* decode makes 96 calls of one token; the scattered taps must equal one batched call's */
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    const struct model_hparams *hp = &m->hp;
    const int n = 64, L = (int)hp->n_layer, k = (int)hp->n_expert_used;
    const size_t E = hp->n_embd;
    int32_t tokens[64];
    mode_tokens(7, hp->n_vocab, n, tokens);
    struct backend_taps t[2] = {0};
    for (int i = 0; i < 2; i++) {
        t[i].hidden = calloc((size_t)L * n * E, sizeof(float));
        t[i].experts = calloc((size_t)L * n * k, sizeof(int32_t));
        t[i].expert_w = calloc((size_t)L * n * k, sizeof(float));
        t[i].router_kth = calloc((size_t)L * n, sizeof(float));
        t[i].router_k1th = calloc((size_t)L * n, sizeof(float));
    }
    struct mode dec = {.backend = "ref", .path = MODE_DECODE};
    struct backend *b = NULL;
    struct gate_err err = {0};
    float *logits = malloc((size_t)n * hp->n_vocab * sizeof *logits);
    cr_assert_eq(mode_open(&b, &dec, m, n, 2, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(mode_judge(b, tokens, n, logits, &t[0], &err), 0, "%s", err.msg);
    cr_assert_eq(mode_run_taps(b, MODE_DECODE, tokens, n, NULL, 0, logits, &t[1], &err), 0, "%s",
                 err.msg);
    check_floats("hidden taps", t[1].hidden, t[0].hidden, (int64_t)L * n * (int64_t)E, 1e-5, 1e-5,
                 1e-10);
    cr_expect_eq(memcmp(t[0].experts, t[1].experts, (size_t)L * n * k * sizeof(int32_t)), 0);
    check_floats("router k-th", t[1].router_kth, t[0].router_kth, (int64_t)L * n, 1e-5, 1e-5,
                 1e-10);
    /* a chat run without turn boundaries is an input error, not a crash */
    cr_expect_eq(mode_run(b, MODE_CHAT, tokens, n, NULL, 0, logits, &err), ERR_INPUT);
    int bad[2] = {10, 5};
    cr_expect_eq(mode_run(b, MODE_CHAT, tokens, n, bad, 2, logits, &err), ERR_INPUT);
    for (int i = 0; i < 2; i++) {
        free(t[i].hidden);
        free(t[i].experts);
        free(t[i].expert_w);
        free(t[i].router_kth);
        free(t[i].router_k1th);
    }
    free(logits);
    backend_close(b);
    model_free(m);
}

Test(mode, chat_conversation_from_the_tokenizer)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    struct tok *t = NULL;
    struct gate_err err = {0};
    cr_assert_eq(tok_load(&t, m->gguf, &err), 0, "%s", err.msg);
    int32_t *ids = NULL;
    int n = 0, *ends = NULL, nt = 0;
    cr_assert_eq(mode_chat_tokens(t, &ids, &n, &ends, &nt, &err), 0, "%s", err.msg);
    cr_expect_eq(nt, 6);
    cr_expect_geq(n, 64);
    cr_expect_eq(ends[5], n);
    const int32_t im_start = tok_find(t, "<|im_start|>");
    for (int i = 0, lo = 0; i < nt; lo = ends[i], i++) {
        cr_expect_eq(ids[lo], im_start, "turn %d starts with <|im_start|>", i);
        char *text = NULL;
        size_t len = 0;
        cr_assert_eq(tok_decode(t, ids + lo, ends[i] - lo, &text, &len, &err), 0);
        const char *role = i % 2 ? "<|im_start|>assistant\n" : "<|im_start|>user\n";
        cr_expect_eq(strncmp(text, role, strlen(role)), 0, "turn %d: %s", i, text);
        free(text);
    }
    int fb = -1;
    int32_t *ids2 = NULL;
    int n2 = 0, *ends2 = NULL, nt2 = 0;
    cr_assert_eq(mode_chat_for_model(m, &ids2, &n2, &ends2, &nt2, &fb, &err), 0);
    cr_expect_eq(fb, 0);
    cr_expect_eq(n2, n);
    cr_expect_eq(memcmp(ids, ids2, (size_t)n * sizeof *ids), 0);
    free(ids);
    free(ends);
    free(ids2);
    free(ends2);
    tok_free(t);
    model_free(m);
}

Test(mode, chat_fallback_is_deterministic)
{
    int32_t *a = NULL, *b = NULL;
    int na = 0, nb = 0, *ea = NULL, *eb = NULL, ta = 0, tb = 0;
    struct gate_err err = {0};
    cr_assert_eq(mode_chat_fallback(100, &a, &na, &ea, &ta, &err), 0);
    cr_assert_eq(mode_chat_fallback(100, &b, &nb, &eb, &tb, &err), 0);
    cr_expect_eq(na, 168);
    cr_expect_eq(ta, 6);
    cr_expect_eq(ea[0], 40);
    cr_expect_eq(ea[5], 168);
    cr_expect_eq(memcmp(a, b, (size_t)na * sizeof *a), 0);
    for (int i = 0; i < na; i++)
        cr_expect(a[i] >= 0 && a[i] < 100);
    free(a);
    free(b);
    free(ea);
    free(eb);
}

Test(mode, capability_reads_what_ran)
{
    struct model *m = check_load_case("qwen3moe-tiny-f32");
    struct gate_err err = {0};
    struct capability_result r;
    const char *modes[] = {"ref.decode", "ref.prefill", "ref.chat"};
    for (int i = 0; i < 3; i++) {
        struct mode mode;
        cr_assert_eq(mode_parse(modes[i], &mode, &err), 0);
        cr_assert_eq(capability_run(m, &mode, 2, &r, &err), 0, "%s", err.msg);
        cr_expect(r.pass, "%s", r.reason);
        cr_expect_str_eq(r.info.backend, "ref");
        cr_expect_gt(r.info.tokens, 0);
    }
    struct mode cuda;
    cr_assert_eq(mode_parse("cuda.decode", &cuda, &err), 0);
    if (!backend_find("cuda")) {
        err_clear(&err);
        cr_expect_eq(capability_run(m, &cuda, 2, &r, &err), ERR_ENV);
        cr_expect(strstr(err.msg, "cannot run on this host"), "%s", err.msg);
    }
    /* the judge alone: a cuda cell whose backend counted no launches, or fell back */
    struct backend_info info = {.backend = "cuda",
                                .device = "NVIDIA H200",
                                .forwards = 3,
                                .tokens = 96,
                                .kernel_launches = 0};
    capability_judge(&cuda, &info, &r);
    cr_expect_not(r.pass);
    cr_expect(strstr(r.reason, "zero CUDA kernel launches"), "%s", r.reason);
    info.kernel_launches = 1234;
    capability_judge(&cuda, &info, &r);
    cr_expect(r.pass, "%s", r.reason);
    struct backend_info fell = {.backend = "ref", .device = "cpu: x", .forwards = 1, .tokens = 4};
    capability_judge(&cuda, &fell, &r);
    cr_expect_not(r.pass);
    cr_expect(strstr(r.reason, "backend 'ref' ran"), "%s", r.reason);
    struct backend_info idle = {.backend = "ref", .device = "cpu: x"};
    struct mode refm = {.backend = "ref", .path = MODE_DECODE};
    capability_judge(&refm, &idle, &r);
    cr_expect_not(r.pass);
    json_t *j = capability_result_json(&r);
    cr_expect_str_eq(json_string_value(json_object_get(j, "verdict")), "FAIL");
    json_decref(j);
    model_free(m);
}

Test(mode, one_list_for_parse_ladder_and_index)
{
    /* the modes are engine/backend.c's backends x the paths: mode_at, mode_index, mode_parse
     * and the ladder's ladder_mode_known read the same list */
    cr_expect_eq(mode_count(), backend_count() * 3);
    for (int i = 0; i < mode_count(); i++) {
        struct mode m, back;
        char text[32];
        struct gate_err err = {0};
        cr_assert_eq(mode_at(i, &m), 0);
        mode_format(&m, text, sizeof text);
        cr_expect_eq(mode_parse(text, &back, &err), 0, "%s: %s", text, err.msg);
        cr_expect_eq(mode_index(&back), i, "%s", text);
        cr_expect(mode_known(text), "%s", text);
        cr_expect(ladder_mode_known(text), "the ladder does not know %s", text);
    }
    struct mode none;
    cr_expect_eq(mode_at(mode_count(), &none), -1);
    cr_expect_not(mode_known("vulkan.decode"));
    cr_expect_not(ladder_mode_known("ref.generate"));
    struct gate_err err = {0};
    cr_expect_eq(mode_parse("vulkan.decode", &none, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "BACKEND one of cuda, cpu, ref and PATH one of decode, prefill,"
                              " chat"),
              "%s", err.msg);
}

Test(mode, capability_asks_the_backend_list_which_backends_run_on_a_device)
{
    /* a device backend is judged on kernel launches, a CPU backend on having none */
    struct capability_result r;
    struct mode cpu = {.backend = "cpu", .path = MODE_DECODE};
    struct backend_info launched = {
        .backend = "cpu", .device = "cpu: x", .forwards = 1, .tokens = 4, .kernel_launches = 7};
    capability_judge(&cpu, &launched, &r);
    cr_expect_not(r.pass);
    cr_expect(strstr(r.reason, "CPU mode but counted 7 kernel launches"), "%s", r.reason);
}

/* The kernel generations (issue 25 §3; one table since issue 24: enum backend_knob,
 * BACKEND_KNOBS): each asked for through the mode (backend_config.knob), offered by the backend's
 * row (the same in every build: cuda's lists pinned here), refused at open by a backend that has
 * none to select, recorded in metrics.ran.<key> as each subject reported it at open (base.knob),
 * "mixed" when subjects differed (a graph that fell back to eager launches says why, and differs),
 * absent when none has generations (a CPU run's receipts do not change). */
Test(mode, kernel_generations_are_asked_at_open_and_recorded_as_ran)
{
    static const char *const key[KNOB_COUNT] = {"gemv", "route", "attn", "graph"};
    static const char *const cuda[KNOB_COUNT] = {"v1,v2", "v1,v2", "v1,split", "off,on"};
    static const char *const what[KNOB_COUNT] = {"GEMV", "routing", "attention", "graph"};
    uint8_t *buf = NULL;
    struct model *m = check_tiny_model("tiny-moe", &buf);
    struct gate_err err = {0};
    for (int k = 0; k < KNOB_COUNT; k++) {
        cr_expect_str_eq(BACKEND_KNOBS[k].key, key[k]);
        cr_expect_str_eq(backend_knob_values("cuda", k), cuda[k], "cuda's %s", key[k]);
        char first[8], second[8];
        sscanf(cuda[k], "%7[^,],%7s", first, second);
        cr_expect(backend_offers_knob("cuda", k, first) && backend_offers_knob("cuda", k, second));
        cr_expect_not(backend_offers_knob("cuda", k, "v3"), "%s", key[k]);
        cr_expect_not(backend_offers_knob("cuda", k, ""), "%s", key[k]);
        cr_expect_not(backend_offers_knob("cuda", k, NULL), "%s", key[k]);
        cr_expect_not(backend_offers_knob("cpu", k, first), "%s", key[k]);
        cr_expect_not(backend_offers_knob("ref", k, second), "%s", key[k]);
        cr_expect_not(backend_offers_knob("nope", k, second), "%s", key[k]);
        cr_expect_str_eq(backend_knob_values("cpu", k), "");

        /* refused at open by a backend with none to select, naming what was asked */
        struct mode md;
        struct backend *b = NULL;
        cr_assert_eq(mode_parse("cpu.decode", &md, &err), 0, "%s", err.msg);
        snprintf(md.knob[k], sizeof md.knob[k], "%s", second);
        cr_expect_eq(mode_open(&b, &md, m, 8, 1, NULL, &err), ERR_INPUT, "cpu opened as %s %s",
                     key[k], second);
        char want_msg[96];
        snprintf(want_msg, sizeof want_msg, "backend cpu has no %s generations to select (%s %s",
                 what[k], key[k], second);
        cr_expect(strstr(err.msg, want_msg), "%s", err.msg);
        cr_expect_null(b);
        md.knob[k][0] = '\0';

        /* what ran: each subject's base.knob as its open set it (set by hand here: no device) */
        const char *ran_as[][2] = {{"", ""},
                                   {second, ""},
                                   {first, second},
                                   {second, second},
                                   {"eager: cudaErrorX", second}};
        const char *want[] = {NULL, second, "mixed", second, "mixed"};
        for (size_t c = 0; c < sizeof want / sizeof want[0]; c++) {
            struct mode_ran ran;
            mode_ran_begin(&ran);
            for (int s = 0; s < 2; s++) {
                err_clear(&err);
                cr_assert_eq(mode_open(&b, &md, m, 8, 1, NULL, &err), 0, "%s", err.msg);
                for (int j = 0; j < KNOB_COUNT; j++)
                    cr_expect_str_eq(b->knob[j], "", "a CPU backend reports no %s", key[j]);
                snprintf(b->knob[k], sizeof b->knob[k], "%s", ran_as[c][s]);
                backend_close(b);
            }
            mode_ran_end();
            json_t *rj = mode_ran_json(&ran);
            for (int j = 0; j < KNOB_COUNT; j++) {
                const char *got = json_string_value(json_object_get(rj, key[j]));
                if (j == k && want[c])
                    cr_expect(got && !strcmp(got, want[c]), "case %zu: ran.%s %s, want %s", c,
                              key[j], got ? got : "(absent)", want[c]);
                else
                    cr_expect_null(got, "case %zu: ran.%s %s recorded", c, key[j], got);
            }
            json_decref(rj);
        }
    }
    model_free(m);
    free(buf);
}

Test(mode, capability_fails_a_run_that_evaluated_no_tokens)
{
    struct capability_result r;
    struct mode cpu = {.backend = "cpu", .path = MODE_DECODE};
    struct backend_info none = {.backend = "cpu", .device = "cpu: x", .forwards = 3, .tokens = 0};
    capability_judge(&cpu, &none, &r);
    cr_expect_not(r.pass, "three forward calls over zero tokens passed: %s", r.reason);
    cr_expect(strstr(r.reason, "evaluated nothing"), "%s", r.reason);
}

Test(mode, capability_fails_a_device_backend_that_reports_the_cpu)
{
    /* kernel launches counted, but the device it names is the CPU: a host fallback */
    struct capability_result r;
    struct mode cuda = {.backend = "cuda", .path = MODE_DECODE};
    struct backend_info info = {.backend = "cuda",
                                .device = "cpu: fallback",
                                .forwards = 3,
                                .tokens = 96,
                                .kernel_launches = 1234};
    capability_judge(&cuda, &info, &r);
    cr_expect_not(r.pass, "%s", r.reason);
    cr_expect(strstr(r.reason, "reports the CPU device"), "%s", r.reason);
}

Test(mode, capability_fails_an_exec_engine_that_names_no_device)
{
    struct capability_result r;
    struct mode ext = {.backend = BACKEND_EXTERNAL, .path = MODE_DECODE};
    struct backend_info info = {
        .backend = BACKEND_EXTERNAL, .device = "", .forwards = 3, .tokens = 96};
    capability_judge(&ext, &info, &r);
    cr_expect_not(r.pass, "%s", r.reason);
    cr_expect(strstr(r.reason, "named no device"), "%s", r.reason);
    snprintf(info.device, sizeof info.device, "NVIDIA H200");
    capability_judge(&ext, &info, &r);
    cr_expect(r.pass, "%s", r.reason);
}

/* mutation pass (mode_run_kept): each path makes the calls it names: decode one token a call;
 * prefill its batched half (or its chunks) in one call each, then one token a call; chat each
 * user turn in one call and the assistant's turns one token a call. A path that batches what it
 * should decode (or the reverse) exercises another code path than the cell's receipt names. */
Test(mode, each_path_makes_the_forward_calls_it_names)
{
    uint8_t *buf = NULL;
    struct model *m = check_tiny_model("tiny-dense", &buf);
    enum { N = 64 };
    int32_t ids[N];
    mode_tokens(5, m->hp.n_vocab, N, ids);
    float *logits = malloc((size_t)N * m->hp.n_vocab * sizeof *logits);
    cr_assert_not_null(logits);
    const int turns[] = {30, 31, 50, 52, 60, N}; /* user 30, 19, 8; assistant 1, 2, 4 */
    const int chunks[] = {7, 20, 5};
    struct {
        const char *mode;
        const int *chunks;
        int n_chunks, forwards;
    } cases[] = {
        {"ref.decode", NULL, 0, N},
        {"ref.prefill", NULL, 0, 1 + N / 2},
        {"ref.prefill", chunks, 3, 3 + (N - 32)},
        {"ref.chat", NULL, 0, 3 + 7},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct mode md;
        struct gate_err err = {0};
        cr_assert_eq(mode_parse(cases[c].mode, &md, &err), 0, "%s", err.msg);
        const int call =
            mode_longest_call(md.path, N, turns, 6, cases[c].chunks, cases[c].n_chunks);
        struct backend *b = NULL;
        cr_assert_eq(mode_open_batch(&b, &md, m, N, call, 1, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(mode_run_split(b, md.path, ids, N, turns, 6, cases[c].chunks,
                                    cases[c].n_chunks, logits, NULL, &err),
                     0, "%s", err.msg);
        struct backend_info info;
        backend_info(b, &info);
        cr_expect_eq(info.forwards, (uint64_t)cases[c].forwards, "%s (case %zu): %llu calls",
                     cases[c].mode, c, (unsigned long long)info.forwards);
        cr_expect_eq(info.tokens, (uint64_t)N, "%s (case %zu)", cases[c].mode, c);
        backend_close(b);
    }
    free(logits);
    model_free(m);
    free(buf);
}

/* mutation pass (mode_prefill_split): a prompt longer than MODE_MAX_CHUNKS chunks' worth is
 * still covered whole, its last chunk the rest: a long span's prefill half is batched, not
 * quietly left to one-token decode */
Test(mode, prefill_split_covers_a_long_prompt_within_the_chunk_limit)
{
    int ch[MODE_MAX_CHUNKS];
    for (uint64_t seed = 0; seed < 8; seed++) {
        const int n = 16384; /* a 32k span's batched half */
        const int k = mode_prefill_split(seed, n, ch, MODE_MAX_CHUNKS);
        int sum = 0;
        for (int i = 0; i < k; i++)
            sum += ch[i];
        cr_expect_eq(k, MODE_MAX_CHUNKS, "seed %llu", (unsigned long long)seed);
        cr_expect_eq(sum, n, "seed %llu: %d chunks cover %d of %d tokens", (unsigned long long)seed,
                     k, sum, n);
    }
}

/* mutation pass (mode_ran): what ran sums every subject, says "mixed" when the subjects' KV
 * cache or batched precision differ (the capability gate holds them to the cell's settings),
 * and leaves the judge out */
Test(mode, what_ran_sums_the_subjects_says_mixed_and_leaves_the_judge_out)
{
    uint8_t *buf = NULL;
    struct model *m = check_tiny_model("tiny-dense", &buf);
    enum { N = 8 };
    int32_t ids[N];
    mode_tokens(5, m->hp.n_vocab, N, ids);
    float *logits = malloc((size_t)N * m->hp.n_vocab * sizeof *logits);
    cr_assert_not_null(logits);
    struct gate_err err = {0};
    struct mode md;
    cr_assert_eq(mode_parse("cpu.decode", &md, &err), 0, "%s", err.msg);
    struct mode_ran ran;
    mode_ran_begin(&ran);
    struct backend *j = NULL, *b = NULL;
    cr_assert_eq(mode_open_judge(&j, m, N, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(backend_forward(j, ids, N, 0, logits, &err), 0, "%s", err.msg);
    backend_close(j);
    for (int s = 0; s < 2; s++) {
        cr_assert_eq(mode_open(&b, &md, m, N, 1, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(mode_run(b, MODE_DECODE, ids, N, NULL, 0, logits, &err), 0, "%s", err.msg);
        if (s == 1) { /* what the second subject's open reported (set by hand) */
            b->kv_f16 = 1;
            snprintf(b->prefill, sizeof b->prefill, "%s", "f16");
        }
        backend_close(b);
    }
    mode_ran_end();
    cr_expect_eq(ran.n_subjects, 2);
    cr_expect_eq(ran.forwards, (uint64_t)(2 * N));
    cr_expect_eq(ran.tokens, (uint64_t)(2 * N));
    cr_expect_str_eq(ran.kv, "mixed");
    cr_expect_str_eq(ran.prefill, "mixed");
    free(logits);
    model_free(m);
    free(buf);
}
