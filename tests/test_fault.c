/* test_fault.c — the fault-kind table (faults/fault.h): every kind parses from its row, the
 * default sets of settled question 4, scope validation against the model, the host and
 * host-and-device forms of skip_qk_norm agreeing (moved from test_ref.c, issue 24 §6), and
 * fault_parse's refusals, each naming what is wrong.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "faults/fault.h"

Test(faults, kinds_come_from_one_table)
{
    struct gate_err err = {0};
    for (int k = 0; k < FAULT_KIND_COUNT; k++) {
        const struct fault_kind_def *d = fault_kind_def((enum fault_kind)k);
        cr_assert_not_null(d);
        struct fault_spec f;
        char text[64];
        /* a kind that names a tensor (scale) needs one; the others parse bare */
        snprintf(text, sizeof text, "%s%s", d->name, d->takes_tensor ? ":tensor=attn_q" : "");
        cr_expect_eq(fault_parse(text, &f, &err), 0, "%s: %s", text, err.msg);
        cr_expect_eq((int)f.kind, k);
        cr_expect_eq(fault_is_routing(f.kind), d->routing, "%s", d->name);
        snprintf(text, sizeof text, "%s:rank=1%s", d->name,
                 d->takes_tensor ? ",tensor=attn_q" : "");
        err_clear(&err);
        cr_expect_eq(fault_parse(text, &f, &err) == 0, d->takes_rank, "%s: %s", text, err.msg);
        err_clear(&err);
    }
    cr_expect_null(fault_kind_def(FAULT_KIND_COUNT));
    struct fault_spec f;
    cr_expect_eq(fault_parse("flipped_sign", &f, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "known: wrong_expert, dropped_expert, uniform_weights,"
                              " skip_qk_norm"),
              "%s", err.msg);
    /* settled question 4: MoE cells falsify all four, dense cells skip_qk_norm */
    struct fault_set moe, dense;
    fault_default_set(1, &moe);
    fault_default_set(0, &dense);
    cr_expect_eq(moe.n, 4);
    cr_expect_eq(dense.n, 1);
    cr_expect_eq(dense.f[0].kind, FAULT_SKIP_QK_NORM);
    cr_expect_eq(dense.f[0].layer_hi, INT_MAX);
    cr_expect_eq(dense.f[0].pos_hi, INT_MAX);
    /* rank scope validated from the table's takes_rank column */
    err_clear(&err);
    cr_expect_eq(fault_parse("dropped_expert:rank=3", &f, &err), 0);
    struct fault_set one = {.n = 1, .f = {f}};
    cr_expect_eq(fault_validate(&one, 2, 1, 2, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "rank 3 does not exist"), "%s", err.msg);
    /* skip_qk_norm: the host wrapper and the host-and-device inline agree */
    cr_expect_eq(fault_parse("skip_qk_norm:layers=1,positions=2-3", &f, &err), 0);
    one.f[0] = f;
    for (int l = 0; l < 3; l++)
        for (int p = 0; p < 5; p++)
            cr_expect_eq(fault_skips_qk_norm(&one, l, p), fault_skips_qk_norm_inline(&one, l, p));
    cr_expect(fault_skips_qk_norm_inline(&one, 1, 2));
    cr_expect_not(fault_skips_qk_norm_inline(&one, 0, 2));
    cr_expect_not(fault_skips_qk_norm_inline(NULL, 1, 2));
}

/* fault_parse's refusals: each an input error that quotes the spec and names what is wrong. */
Test(faults, parse_refuses_bad_kinds_scopes_and_numbers_naming_what)
{
    static const char *const BAD[][2] = {
        /* kinds */
        {"", "unknown fault ''"},
        {"flipped_sign", "unknown fault 'flipped_sign'"},
        {"WRONG_EXPERT", "unknown fault 'WRONG_EXPERT'"},
        /* options */
        {"wrong_expert:rank", "option 'rank' is not key=value"},
        {"wrong_expert:colour=red", "unknown option 'colour' for wrong_expert"},
        {"skip_qk_norm:rank=1", "unknown option 'rank' for skip_qk_norm"},
        {"wrong_expert:layers=1,layers=2", "option 'layers' is given twice"},
        {"wrong_expert:rank=0,rank=1", "option 'rank' is given twice"},
        /* scopes */
        {"wrong_expert:layers=3-1",
         "layers '3-1' is not N or A-B (the range ends before it starts)"},
        {"wrong_expert:positions=5-4", "(the range ends before it starts)"},
        {"wrong_expert:layers=-2", "layers '-2' is not N or A-B (whole numbers"},
        {"wrong_expert:layers=1-x", "layers '1-x' is not N or A-B"},
        {"wrong_expert:layers=1 ", "layers '1 ' is not N or A-B"},
        {"wrong_expert:layers=+1", "layers '+1' is not N or A-B"},
        {"wrong_expert:layers= 1", "layers ' 1' is not N or A-B"},
        {"wrong_expert:positions=abc", "positions 'abc' is not N or A-B"},
        {"wrong_expert:positions=0x10", "positions '0x10' is not N or A-B"},
        {"wrong_expert:rank=1-2", "rank '1-2' is not a number >= 0 (one rank, not a range)"},
        {"wrong_expert:rank=", "rank '' is not a number >= 0 (one whole number expected)"},
        {"wrong_expert:rank=-1", "rank '-1' is not a number >= 0"},
        {"wrong_expert:rank=+1", "rank '+1' is not a number >= 0"},
        /* out-of-range numbers */
        {"wrong_expert:layers=2147483648", "(a number is larger than 2147483647)"},
        {"wrong_expert:positions=0-2147483648", "positions '0-2147483648' is not N or A-B (a number"
                                                " is larger than 2147483647)"},
        {"wrong_expert:rank=99999999999999999999", "(a number is larger than 2147483647)"},
        {"scale:tensor=ffn_down,factor=1e7", "factor '1e7' is not a finite number in [0, 1e6]"},
        {"scale:tensor=ffn_down,factor=nan", "factor 'nan' is not a finite number"},
        {"scale:tensor=ffn_down,factor=-1", "factor '-1' is not a finite number"},
        {"scale:tensor=ffn_down,factor=1", "(factor 1 changes nothing)"},
        {"scale:tensor=ffn_down,factor=2x", "factor '2x' is not a finite number"},
        /* tensors */
        {"scale", "scale needs tensor=NAME"},
        {"scale:tensor=blk.3.nope", "unknown tensor 'blk.3.nope'"},
        {"scale:tensor=blk.+3.ffn_down", "unknown tensor 'blk.+3.ffn_down'"},
        {"scale:tensor=blk.-1.ffn_down", "unknown tensor 'blk.-1.ffn_down'"},
        {"scale:tensor=blk.99999999999.ffn_down", "unknown tensor 'blk.99999999999.ffn_down'"},
        {"scale:tensor=blk.3.output", "unknown tensor 'blk.3.output'"},
        {"scale:tensor=blk.3.ffn_down,layers=3", "tensor blk.3.… names its layer; drop layers="},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        struct gate_err err = {0};
        struct fault_spec f;
        cr_expect_eq(fault_parse(BAD[i][0], &f, &err), ERR_INPUT, "'%s' was accepted", BAD[i][0]);
        cr_expect(strstr(err.msg, BAD[i][1]), "'%s': %s", BAD[i][0], err.msg);
        if (BAD[i][0][0] && strncmp(err.msg, "unknown fault", 13))
            cr_expect(strstr(err.msg, BAD[i][0]), "the message does not quote the spec: %s",
                      err.msg);
    }
    /* too long: quoted in part, never overrun */
    char longer[400];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    struct gate_err err = {0};
    struct fault_spec f;
    cr_expect_eq(fault_parse(longer, &f, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "is too long"), "%s", err.msg);
}

Test(faults, an_unknown_kind_lists_every_kind_of_the_table)
{
    struct gate_err err = {0};
    struct fault_spec f;
    cr_assert_eq(fault_parse("no_such_fault", &f, &err), ERR_INPUT);
    for (int k = 0; k < FAULT_KIND_COUNT; k++)
        cr_expect(strstr(err.msg, fault_kind_def((enum fault_kind)k)->name), "%s missing: %s",
                  fault_kind_def((enum fault_kind)k)->name, err.msg);
}

Test(faults, accepted_scopes_parse_to_their_bounds_and_format_back)
{
    static const struct {
        const char *text;
        int layer_lo, layer_hi, pos_lo, pos_hi, rank;
    } OK[] = {
        {"wrong_expert", 0, INT_MAX, 0, INT_MAX, 0},
        {"wrong_expert:rank=1,layers=0-3,positions=5", 0, 3, 5, 5, 1},
        {"dropped_expert:positions=7-", 0, INT_MAX, 7, INT_MAX, 0},
        {"skip_qk_norm:layers=2147483647", INT_MAX, INT_MAX, 0, INT_MAX, 0},
        {"scale:tensor=blk.3.ffn_down,factor=1.01", 3, 3, 0, INT_MAX, 0},
    };
    for (size_t i = 0; i < sizeof OK / sizeof OK[0]; i++) {
        struct gate_err err = {0};
        struct fault_spec f, g;
        cr_assert_eq(fault_parse(OK[i].text, &f, &err), 0, "%s: %s", OK[i].text, err.msg);
        cr_expect(f.layer_lo == OK[i].layer_lo && f.layer_hi == OK[i].layer_hi &&
                      f.pos_lo == OK[i].pos_lo && f.pos_hi == OK[i].pos_hi && f.rank == OK[i].rank,
                  "%s: layers %d-%d positions %d-%d rank %d", OK[i].text, f.layer_lo, f.layer_hi,
                  f.pos_lo, f.pos_hi, f.rank);
        char back[128];
        fault_format(&f, back, sizeof back);
        cr_assert_eq(fault_parse(back, &g, &err), 0, "%s -> %s: %s", OK[i].text, back, err.msg);
        cr_expect(!memcmp(&f, &g, sizeof f), "%s -> %s parses to another spec", OK[i].text, back);
    }
}

/* A factor given is the factor the spec carries (a parser that kept the kind's default ran every
 * power probe at 1 % whatever the ladder asked, and kv_corrupt and rope_shift at their defaults;
 * mutation pass, 2026-12-03). */
Test(faults, a_given_factor_is_the_factor_the_spec_carries)
{
    static const struct {
        const char *text;
        float factor;
    } OK[] = {
        {"scale:tensor=ffn_down,factor=1.05", 1.05f},
        {"scale:tensor=output,factor=0.5", 0.5f},
        {"kv_corrupt:factor=0", 0.0f},
        {"kv_corrupt:factor=2", 2.0f},
        {"rope_shift:factor=0.9", 0.9f},
    };
    for (size_t i = 0; i < sizeof OK / sizeof OK[0]; i++) {
        struct gate_err err = {0};
        struct fault_spec f, g;
        cr_assert_eq(fault_parse(OK[i].text, &f, &err), 0, "%s: %s", OK[i].text, err.msg);
        cr_expect_eq(f.factor, OK[i].factor, "%s: factor %g", OK[i].text, (double)f.factor);
        char back[128];
        fault_format(&f, back, sizeof back);
        cr_assert_eq(fault_parse(back, &g, &err), 0, "%s -> %s: %s", OK[i].text, back, err.msg);
        cr_expect_eq(g.factor, OK[i].factor, "%s -> %s: factor %g", OK[i].text, back,
                     (double)g.factor);
    }
}

/* A layer scope that reaches the model's layer count names a layer that does not exist, from
 * either end (a scope of 0-4 or 4- on 4 layers accepted is a fault narrowed to what exists, or
 * one that never fires; mutation pass, 2026-12-03). */
Test(faults, a_layer_scope_reaching_the_layer_count_does_not_exist)
{
    static const char *const OK[] = {"wrong_expert:layers=3", "wrong_expert:layers=0-3",
                                     "wrong_expert:layers=2-", "scale:tensor=blk.3.attn_v"};
    static const char *const BAD[] = {"wrong_expert:layers=4", "wrong_expert:layers=0-4",
                                      "wrong_expert:layers=4-", "scale:tensor=blk.4.attn_v"};
    for (int i = 0; i < 4; i++) {
        struct gate_err err = {0};
        struct fault_set one = {.n = 1};
        cr_assert_eq(fault_parse(OK[i], &one.f[0], &err), 0, "%s: %s", OK[i], err.msg);
        cr_expect_eq(fault_validate(&one, 4, 1, 2, &err), 0, "%s on 4 layers: %s", OK[i], err.msg);
        cr_assert_eq(fault_parse(BAD[i], &one.f[0], &err), 0, "%s: %s", BAD[i], err.msg);
        cr_expect_eq(fault_validate(&one, 4, 1, 2, &err), ERR_INPUT, "%s on 4 layers accepted",
                     BAD[i]);
        cr_expect(strstr(err.msg, "does not exist"), "%s: %s", BAD[i], err.msg);
    }
}

/* The power probe's tensors (fault_power_tensors) are every matmul a uniform scale reaches the
 * logits through, of each model kind; the matmul tensors are every one a model has (an MoE
 * table row that lost ffn_down_exps left the experts' down projection unprobed, in the run and
 * its judge alike; mutation pass, 2026-12-03). */
Test(faults, the_power_tensors_are_every_matmul_a_uniform_scale_reaches_the_logits_through)
{
    static const int DENSE[] = {FAULT_T_ATTN_V, FAULT_T_ATTN_OUTPUT, FAULT_T_FFN_GATE,
                                FAULT_T_FFN_UP, FAULT_T_FFN_DOWN,    FAULT_T_OUTPUT};
    static const int MOE[] = {FAULT_T_ATTN_V,      FAULT_T_ATTN_OUTPUT,   FAULT_T_FFN_GATE_EXPS,
                              FAULT_T_FFN_UP_EXPS, FAULT_T_FFN_DOWN_EXPS, FAULT_T_OUTPUT};
    int t[FAULT_T_COUNT];
    cr_assert_eq(fault_power_tensors(0, t), 6);
    cr_expect(!memcmp(t, DENSE, sizeof DENSE), "dense power tensors");
    cr_assert_eq(fault_power_tensors(1, t), 6);
    cr_expect(!memcmp(t, MOE, sizeof MOE), "MoE power tensors");
    /* the matmuls: the power tensors plus attn_q, attn_k (and the router, MoE) */
    cr_expect_eq(fault_matmul_tensors(0, t), 8);
    cr_expect_eq(fault_matmul_tensors(1, t), 9);
    for (int i = 0; i < 6; i++) {
        cr_expect(fault_tensor_in_model(DENSE[i], 0), "%s", fault_tensor_name(DENSE[i]));
        cr_expect(fault_tensor_in_model(MOE[i], 1), "%s", fault_tensor_name(MOE[i]));
    }
}

/* 6 experts, k 3: the clean top 3 are experts 1, 3, 5 (0.30, 0.25, 0.20); the best unselected
 * are experts 2 and 4 (0.10 each: a tie, the lower id wins). */
static const float PROBS[6] = {0.05f, 0.30f, 0.10f, 0.25f, 0.10f, 0.20f};

static int route_with(const char *spec, int layer, int pos, int k, int32_t *ids, float *w)
{
    struct gate_err err = {0};
    struct fault_set one = {.n = 1};
    cr_assert_eq(fault_parse(spec, &one.f[0], &err), 0, "%s: %s", spec, err.msg);
    const int32_t clean[3] = {1, 3, 5};
    float s = 0;
    for (int j = 0; j < k; j++)
        s += PROBS[clean[j]];
    for (int j = 0; j < k; j++) {
        ids[j] = clean[j];
        w[j] = PROBS[clean[j]] / s;
    }
    return fault_apply_route(&one, layer, pos, PROBS, 6, k, ids, w);
}

/* The routing faults do what their rows say, at their rank and inside their scope only: a
 * rank ignored, a replacement that may be an expert already selected or the higher id of a tie,
 * or the rest of the weights left unrenormalized passed every other test (mutation pass,
 * 2026-12-03). */
Test(faults, routing_faults_act_at_their_rank_and_scope_as_their_rows_say)
{
    int32_t ids[3];
    float w[3];
    /* wrong_expert at rank 1: slot 1 takes the best unselected expert (2: the tie's lower id);
     * the weights stay */
    cr_expect_eq(route_with("wrong_expert:rank=1", 0, 0, 3, ids, w), 1);
    cr_expect(ids[0] == 1 && ids[1] == 2 && ids[2] == 5, "ids %d %d %d (want 1 2 5)", ids[0],
              ids[1], ids[2]);
    cr_expect_float_eq(w[1], 0.25f / 0.75f, 1e-6, "w1 %g", (double)w[1]);
    cr_expect_eq(route_with("wrong_expert:rank=2", 0, 0, 3, ids, w), 1);
    cr_expect(ids[0] == 1 && ids[1] == 3 && ids[2] == 2, "ids %d %d %d (want 1 3 2)", ids[0],
              ids[1], ids[2]);
    /* dropped_expert at rank 0: its weight 0, the rest renormalized to sum 1 */
    cr_expect_eq(route_with("dropped_expert", 0, 0, 3, ids, w), 1);
    cr_expect(ids[0] == 1 && ids[1] == 3 && ids[2] == 5);
    cr_expect_eq(w[0], 0.0f);
    cr_expect_float_eq(w[1], 0.25f / 0.45f, 1e-6, "w1 %g", (double)w[1]);
    cr_expect_float_eq(w[2], 0.20f / 0.45f, 1e-6, "w2 %g", (double)w[2]);
    cr_expect_eq(route_with("dropped_expert:rank=2", 0, 0, 3, ids, w), 1);
    cr_expect(w[2] == 0.0f && fabsf(w[0] + w[1] - 1.0f) < 1e-6f, "w %g %g %g", (double)w[0],
              (double)w[1], (double)w[2]);
    /* one expert a token: dropping it leaves weight 0 */
    cr_expect_eq(route_with("dropped_expert", 0, 0, 1, ids, w), 1);
    cr_expect_eq(w[0], 0.0f);
    /* uniform_weights: 1/k each */
    cr_expect_eq(route_with("uniform_weights", 0, 0, 3, ids, w), 1);
    for (int j = 0; j < 3; j++)
        cr_expect_float_eq(w[j], 1.0f / 3, 1e-7, "w%d %g", j, (double)w[j]);
    /* scope: layer 1, position 4 only */
    static const int AT[][3] = {{1, 4, 1}, {0, 4, 0}, {2, 4, 0}, {1, 3, 0}, {1, 5, 0}};
    for (int i = 0; i < 5; i++) {
        const int n =
            route_with("wrong_expert:layers=1,positions=4", AT[i][0], AT[i][1], 3, ids, w);
        cr_expect_eq(n, AT[i][2], "L%d @%d: %d applied", AT[i][0], AT[i][1], n);
        cr_expect_eq(ids[0] == 2, AT[i][2], "L%d @%d: ids %d %d %d", AT[i][0], AT[i][1], ids[0],
                     ids[1], ids[2]);
    }
}

/* The numeric faults' queries (what an engine asks where it computes the thing): each factor
 * inside its layer and position scope only, every covering fault's factor multiplied in, and the
 * output matrix's position scope kept though it has no layer (mutation pass, 2026-12-03). */
Test(faults, numeric_queries_answer_inside_their_scope_and_multiply)
{
    static const char *const SPECS[] = {
        "scale:tensor=ffn_down,layers=1,factor=1.5",
        "scale:tensor=ffn_down,layers=1-2,factor=2",
        "scale:tensor=output,positions=5-6,factor=1.25",
        "kv_corrupt:layers=1,positions=3-,factor=0.25",
        "rope_shift:layers=0,positions=2,factor=0.5",
        "drop_diag:layers=1,positions=7",
    };
    struct fault_set s = {0};
    struct gate_err err = {0};
    for (int i = 0; i < 6; i++) {
        struct fault_spec f;
        cr_assert_eq(fault_parse(SPECS[i], &f, &err), 0, "%s: %s", SPECS[i], err.msg);
        cr_assert_eq(fault_set_add(&s, &f, &err), 0);
    }
    cr_expect_eq(fault_scale_factor_inline(&s, FAULT_T_FFN_DOWN, 1, 9), 3.0f);
    cr_expect_eq(fault_scale_factor_inline(&s, FAULT_T_FFN_DOWN, 2, 9), 2.0f);
    cr_expect_eq(fault_scale_factor_inline(&s, FAULT_T_FFN_DOWN, 0, 9), 1.0f);
    cr_expect_eq(fault_scale_factor_inline(&s, FAULT_T_FFN_UP, 1, 9), 1.0f);
    for (int p = 3; p <= 8; p++) /* the output: its positions, whatever the layer asked */
        cr_expect_eq(fault_scale_factor_inline(&s, FAULT_T_OUTPUT, 99, p),
                     p == 5 || p == 6 ? 1.25f : 1.0f, "output @%d", p);
    cr_expect_eq(fault_kv_factor_inline(&s, 1, 3), 0.25f);
    cr_expect_eq(fault_kv_factor_inline(&s, 1, 1000), 0.25f);
    cr_expect_eq(fault_kv_factor_inline(&s, 0, 3), 1.0f);
    cr_expect_eq(fault_kv_factor_inline(&s, 1, 2), 1.0f);
    cr_expect_eq(fault_rope_factor_inline(&s, 0, 2), 0.5f);
    cr_expect_eq(fault_rope_factor_inline(&s, 1, 2), 1.0f);
    cr_expect_eq(fault_rope_factor_inline(&s, 0, 3), 1.0f);
    cr_expect(fault_drops_diag_inline(&s, 1, 7));
    cr_expect_not(fault_drops_diag_inline(&s, 0, 7));
    cr_expect_not(fault_drops_diag_inline(&s, 1, 6));
    cr_expect_eq(fault_scale_factor_inline(NULL, FAULT_T_FFN_DOWN, 1, 9), 1.0f);
    cr_expect_not(fault_drops_diag_inline(NULL, 1, 7));
}
