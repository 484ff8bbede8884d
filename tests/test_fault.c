/* test_fault.c — the fault-kind table (faults/fault.h): every kind parses from its row, the
 * default sets of settled question 4, scope validation against the model, the host and
 * host-and-device forms of skip_qk_norm agreeing (moved from test_ref.c, issue 24 §6), and
 * fault_parse's refusals, each naming what is wrong.
 */
#include <criterion/criterion.h>
#include <limits.h>
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
