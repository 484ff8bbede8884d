/* test_model.c — model binding: hyperparameters from metadata only, every tensor's shape
 * checked, clear load errors naming the tensor or key (DESIGN.md: the head_dim failure). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "engine/model.h"
#include "engine/quant.h"
#include "tests/support/check.h"
#include "tests/support/ggufedit.h"

static char path_buf[1024];

static const char *case_model(const char *name)
{
    snprintf(path_buf, sizeof path_buf, "%s/conformance/%s/model.gguf", check_shared_dir(), name);
    return path_buf;
}

/* Load a copy of the dense or MoE f32 conformance model with edit e; return the status and
 * leave the message in err. */
static int load_edited(const char *base, const struct gguf_edit *e, const char *tag,
                       struct gate_err *err)
{
    char dst[1024];
    snprintf(dst, sizeof dst, "%s/%s.gguf", check_tmp_dir(), tag);
    gguf_edit_copy(case_model(base), dst, e);
    struct model *m = NULL;
    int rc = model_load(&m, dst, err);
    model_free(m);
    return rc;
}

#define EDIT(...) ((struct gguf_edit){.type = -1, __VA_ARGS__})

static void expect_error(const char *base, struct gguf_edit e, const char *tag, const char *want)
{
    struct gate_err err = {0};
    int rc = load_edited(base, &e, tag, &err);
    cr_assert_eq(rc, ERR_INPUT, "%s: expected a load error containing \"%s\", got rc %d (%s)", tag,
                 want, rc, err.msg);
    cr_assert(strstr(err.msg, want), "%s: message \"%s\" lacks \"%s\"", tag, err.msg, want);
}

Test(model, binds_dense_hyperparameters_from_metadata)
{
    struct gate_err err = {0};
    struct model *m = NULL;
    cr_assert_eq(model_load(&m, case_model("qwen3-dense-tiny-f32"), &err), 0, "%s", err.msg);
    const struct model_hparams *hp = &m->hp;
    cr_expect_eq(hp->arch, MODEL_ARCH_QWEN3);
    cr_expect_eq(hp->n_embd, 256);
    cr_expect_eq(hp->n_layer, 2);
    cr_expect_eq(hp->n_head, 4);
    cr_expect_eq(hp->n_head_kv, 2);
    cr_expect_eq(hp->head_dim, 128, "head_dim must be key_length (128), not 256/4");
    cr_expect_eq(hp->n_ff, 512);
    cr_expect_eq(hp->n_vocab, 512);
    cr_expect_float_eq(hp->rope_base, 1e6f, 1.0f);
    cr_expect_float_eq(hp->eps, 1e-6f, 1e-12f);
    cr_expect_eq(m->tied, 0);
    cr_expect_eq(m->layers[1].wq.rows, 512);
    cr_expect_eq(m->layers[1].wq.cols, 256);
    model_free(m);
}

Test(model, binds_moe_experts_as_slabs_without_repacking)
{
    struct gate_err err = {0};
    struct model *m = NULL;
    cr_assert_eq(model_load(&m, case_model("qwen3moe-tiny-q4_k_m"), &err), 0, "%s", err.msg);
    const struct model_hparams *hp = &m->hp;
    cr_expect_eq(hp->arch, MODEL_ARCH_QWEN3MOE);
    cr_expect_eq(hp->n_expert, 8);
    cr_expect_eq(hp->n_expert_used, 2);
    cr_expect_eq(hp->n_ff_exp, 256);
    const struct model_weight *g = &m->layers[0].gate_exps;
    struct model_weight e3 = model_expert(g, hp->n_expert, 3);
    cr_expect_eq(e3.rows, 256);
    cr_expect_eq(e3.data, g->data + 3 * 256 * g->row_bytes, "expert 3 is base + 3 * stride");
    cr_expect_eq(m->layers[0].gate_inp.type, QUANT_F32);
    model_free(m);
}

Test(model, loads_every_conformance_case)
{
    const char *cases[] = {"qwen3-dense-tiny-f32",    "qwen3-dense-tiny-q8_0",
                           "qwen3-dense-tiny-q4_k_m", "qwen3moe-tiny-f32",
                           "qwen3moe-tiny-q8_0",      "qwen3moe-tiny-q4_k_m"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct gate_err err = {0};
        struct model *m = NULL;
        cr_expect_eq(model_load(&m, case_model(cases[i]), &err), 0, "%s: %s", cases[i], err.msg);
        model_free(m);
    }
}

Test(model, head_dim_from_hidden_over_heads_is_a_shape_error)
{
    /* the field failure: key_length absent, so head_dim would be 256/4 = 64 != 128 */
    expect_error(
        "qwen3-dense-tiny-f32",
        EDIT(.drop_key = "qwen3.attention.key_length", .drop_key2 = "qwen3.attention.value_length"),
        "no_key_length",
        "tensor 'blk.0.attn_q.weight' has shape [256, 512], expected"
        " [256, 256]");
}

Test(model, rejects_unknown_architecture)
{
    expect_error("qwen3-dense-tiny-f32",
                 EDIT(.set_str_key = "general.architecture", .set_str = "llama"), "arch_llama",
                 "architecture 'llama' is not supported (supported: qwen3, qwen3moe)");
}

Test(model, rejects_missing_tensor_naming_it)
{
    expect_error("qwen3-dense-tiny-f32", EDIT(.drop_tensor = "blk.1.attn_k_norm.weight"),
                 "no_k_norm",
                 "tensor 'blk.1.attn_k_norm.weight' is missing (expected shape"
                 " [128] = [head_dim])");
}

Test(model, rejects_mis_shaped_tensor_with_both_shapes)
{
    expect_error("qwen3-dense-tiny-f32",
                 EDIT(.edit_tensor = "blk.0.ffn_down.weight", .n_dims = 2, .ne = {512, 128, 1, 1}),
                 "bad_down",
                 "tensor 'blk.0.ffn_down.weight' has shape [512, 128], expected"
                 " [512, 256] = [n_ff, n_embd]");
}

Test(model, rejects_mis_shaped_expert_tensor)
{
    expect_error(
        "qwen3moe-tiny-f32",
        EDIT(.edit_tensor = "blk.1.ffn_up_exps.weight", .n_dims = 3, .ne = {256, 256, 7, 1}),
        "bad_exps",
        "tensor 'blk.1.ffn_up_exps.weight' has shape [256, 256, 7], expected"
        " [256, 256, 8]");
}

Test(model, rejects_unsupported_tensor_type_naming_it)
{
    struct gguf_edit e = {.edit_tensor = "blk.0.attn_v.weight", .type = QUANT_Q2_K};
    expect_error("qwen3-dense-tiny-f32", e, "q2k",
                 "tensor 'blk.0.attn_v.weight' has type Q2_K, which gate cannot dequantize");
}

Test(model, rejects_missing_required_key)
{
    expect_error("qwen3-dense-tiny-f32", EDIT(.drop_key = "qwen3.attention.layer_norm_rms_epsilon"),
                 "no_eps", "required key 'qwen3.attention.layer_norm_rms_epsilon' is missing");
}

Test(model, rejects_wrongly_typed_key)
{
    expect_error("qwen3-dense-tiny-f32", EDIT(.set_f32_key = "qwen3.block_count", .set_f32 = 2),
                 "f32_blocks", "key 'qwen3.block_count' has type FLOAT32, expected UINT32");
}

Test(model, rejects_heads_not_multiple_of_kv_heads)
{
    expect_error("qwen3-dense-tiny-f32",
                 EDIT(.set_u32_key = "qwen3.attention.head_count_kv", .set_u32 = 3), "kv3",
                 "head_count 4 is not a multiple of head_count_kv 3");
}

Test(model, rejects_too_many_used_experts)
{
    expect_error("qwen3moe-tiny-f32",
                 EDIT(.set_u32_key = "qwen3moe.expert_used_count", .set_u32 = 9), "k9",
                 "expert_count 8 / expert_used_count 9 invalid");
}

Test(model, rejects_yarn_rope_scaling)
{
    expect_error("qwen3-dense-tiny-f32",
                 EDIT(.set_str_key = "qwen3.rope.scaling.type", .set_str = "yarn"), "yarn",
                 "RoPE scaling 'yarn'");
}

Test(model, rejects_vocab_size_mismatch)
{
    expect_error("qwen3-dense-tiny-f32",
                 EDIT(.edit_tensor = "token_embd.weight", .n_dims = 2, .ne = {256, 500, 1, 1}),
                 "vocab500",
                 "tokenizer.ggml.tokens has 512 entries but token_embd.weight has 500"
                 " rows");
}

Test(model, accepts_tied_output)
{
    struct gate_err err = {0};
    struct gguf_edit e = EDIT(.drop_tensor = "output.weight");
    cr_assert_eq(load_edited("qwen3-dense-tiny-f32", &e, "tied", &err), 0, "%s", err.msg);
    char dst[1024];
    snprintf(dst, sizeof dst, "%s/tied.gguf", check_tmp_dir());
    struct model *m = NULL;
    cr_assert_eq(model_load(&m, dst, &err), 0, "%s", err.msg);
    cr_expect_eq(m->tied, 1);
    cr_expect_eq(m->output.data, m->tok_embd.data);
    model_free(m);
}
