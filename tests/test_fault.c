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
