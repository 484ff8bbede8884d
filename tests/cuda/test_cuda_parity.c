/* test_cuda_parity.c — on a GPU host, cuda.decode and cuda.prefill of the tiny dense and MoE
 * models judged against the reference twin by the parity oracle (64 positions). Skips visibly,
 * with the reason, without a device — and fails instead under GATE_REQUIRE_GPU=1 (support/skip.h).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "harness/gatedef.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include "oracles/selftest.h"
#include "tests/support/check.h"
#include "tests/support/skip.h"

/* attn, graph: "" (the defaults) or the cuda settings (backend_config.knob[KNOB_ATTN] /
 * [KNOB_GRAPH]) */
static void judge_with(const char *preset, const char *mode_name, const char *attn,
                       const char *graph)
{
    struct gate_err err = {0};
    char dev[160];
    if (selftest_device(dev, sizeof dev, &err))
        check_skip_no_device("%s", err.msg);
    uint8_t *buf = NULL;
    struct model *m = check_tiny_model(preset, &buf);
    struct mode mode;
    cr_assert_eq(mode_parse(mode_name, &mode, &err), 0);
    snprintf(mode.knob[KNOB_ATTN], sizeof mode.knob[KNOB_ATTN], "%s", attn);
    snprintf(mode.knob[KNOB_GRAPH], sizeof mode.knob[KNOB_GRAPH], "%s", graph);
    struct parity_config cfg;
    gatedef_parity_config(NULL, &cfg);
    cfg.positions = 64;
    struct parity_result pr;
    memset(&pr, 0, sizeof pr);
    cr_assert_eq(parity_run(m, &mode, NULL, NULL, 0, &cfg, 0, &pr, &err), 0, "%s", err.msg);
    cr_expect(pr.pass, "%s (attn '%s', graph '%s') on %s: %s", mode_name, attn, graph, preset,
              pr.reason);
    parity_result_free(&pr);
    model_free(m);
    free(buf);
}

static void judge(const char *preset, const char *mode_name)
{
    judge_with(preset, mode_name, "", "");
}

Test(cuda_parity, decode_of_tiny_moe_passes_parity)
{
    judge("tiny-moe", "cuda.decode");
}
Test(cuda_parity, prefill_of_tiny_moe_passes_parity)
{
    judge("tiny-moe", "cuda.prefill");
}
Test(cuda_parity, decode_of_tiny_dense_passes_parity)
{
    judge("tiny-dense", "cuda.decode");
}
Test(cuda_parity, prefill_of_tiny_dense_passes_parity)
{
    judge("tiny-dense", "cuda.prefill");
}

/* The decode step captured as a CUDA graph (graph: on) is the eager step bit for bit, with each
 * attention: a prompt chunk, then one-token decode steps (the graph's case) past a split of 128
 * keys, the logits of every step compared by memcmp; base.knob[KNOB_GRAPH] stays "on" (no
 * fallback). */
static void decode(struct model *m, const char *attn, const char *graph, int n_prompt, int n_dec,
                   float *out, char *ran_graph, size_t ran_n)
{
    struct gate_err err = {0};
    struct backend *b = NULL;
    struct backend_config cfg = {.n_ctx = 256};
    cfg.knob[KNOB_ATTN] = attn;
    cfg.knob[KNOB_GRAPH] = graph;
    cr_assert_eq(backend_open(&b, "cuda", m, &cfg, &err), 0, "attn %s graph %s: %s", attn, graph,
                 err.msg);
    const int V = (int)m->hp.n_vocab;
    int32_t tok[64];
    for (int i = 0; i < n_prompt; i++)
        tok[i] = (int32_t)((i * 7919 + 13) % V);
    cr_assert_eq(backend_forward_last(b, tok, n_prompt, 0, out, &err), 0, "%s", err.msg);
    for (int s = 0; s < n_dec; s++) {
        int32_t t = (int32_t)((s * 104729 + 5) % V);
        cr_assert_eq(backend_forward(b, &t, 1, n_prompt + s, out + (size_t)(s + 1) * V, &err), 0,
                     "attn %s graph %s step %d: %s", attn, graph, s, err.msg);
    }
    snprintf(ran_graph, ran_n, "%s", b->knob[KNOB_GRAPH]);
    backend_close(b);
}

static void graph_is_eager(const char *preset)
{
    struct gate_err err = {0};
    char dev[160];
    if (selftest_device(dev, sizeof dev, &err))
        check_skip_no_device("%s", err.msg);
    uint8_t *buf = NULL;
    struct model *m = check_tiny_model(preset, &buf);
    enum { P = 60, D = 80 }; /* keys up to 140: two splits */
    const size_t n = (size_t)(D + 1) * m->hp.n_vocab;
    float *eager = malloc(n * 4), *graphed = malloc(n * 4);
    char ran[48];
    cr_assert(eager && graphed);
    for (int a = 0; a < 2; a++) {
        const char *attn = a ? "split" : "v1";
        decode(m, attn, "off", P, D, eager, ran, sizeof ran);
        cr_expect_str_eq(ran, "off");
        decode(m, attn, "on", P, D, graphed, ran, sizeof ran);
        cr_expect_str_eq(ran, "on", "attn %s: the graph fell back: %s", attn, ran);
        cr_expect(!memcmp(eager, graphed, n * 4), "%s attn %s: graphed decode differs from eager",
                  preset, attn);
    }
    free(eager), free(graphed);
    model_free(m);
    free(buf);
}

Test(cuda_parity, decode_graph_is_bit_identical_to_eager_on_tiny_moe)
{
    graph_is_eager("tiny-moe");
}
Test(cuda_parity, decode_graph_is_bit_identical_to_eager_on_tiny_dense)
{
    graph_is_eager("tiny-dense");
}

/* Split attention and the decode graph judged as the default is: parity against the twin. */
Test(cuda_parity, decode_of_tiny_moe_with_split_attention_and_graph_passes_parity)
{
    judge_with("tiny-moe", "cuda.decode", "split", "on");
}
Test(cuda_parity, decode_of_tiny_dense_with_split_attention_passes_parity)
{
    judge_with("tiny-dense", "cuda.decode", "split", "off");
}
