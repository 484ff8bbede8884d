/* test_route.c — the routing definition (engine/route.c): route_force(), the route-tie replay's
 * forcing (issue 22 §6): which expert sets count as a near tie, and what a forced route computes.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "engine/route.h"

/* 6 experts, k 2: logits 3.0, 2.0, 1.999, 1.0, 0.5, -1 (experts 0..5) */
static const float LOGITS[6] = {3.0f, 2.0f, 1.999f, 1.0f, 0.5f, -1.0f};

static void own(int32_t ids[2], float w[2], float probs[6])
{
    route_select(LOGITS, probs, 6, 2, 1, NULL, 0, 0, ids, w);
    cr_assert_eq(ids[0], 0);
    cr_assert_eq(ids[1], 1);
}

Test(route, the_own_set_in_any_order_changes_nothing)
{
    int32_t ids[2], before[2];
    float w[2], probs[6], wb[2];
    own(ids, w, probs);
    memcpy(before, ids, sizeof ids);
    memcpy(wb, w, sizeof w);
    const int32_t f[2] = {1, 0};
    cr_expect(isnan(route_force(LOGITS, probs, 6, 2, 1, f, 0.02f, ids, w)));
    cr_expect(!memcmp(ids, before, sizeof ids) && !memcmp(w, wb, sizeof w));
}

Test(route, swapping_the_kth_for_the_next_costs_the_gap_and_is_forced_below_tol)
{
    int32_t ids[2];
    float w[2], probs[6];
    own(ids, w, probs);
    const int32_t f[2] = {2, 0}; /* expert 2 instead of 1: a near tie of 1e-3 */
    const float d = route_force(LOGITS, probs, 6, 2, 1, f, 0.02f, ids, w);
    cr_expect_float_eq(d, 2.0f - 1.999f, 1e-6f);
    /* route_select's slot order (highest probability first) and weights over the forced set */
    cr_expect_eq(ids[0], 0);
    cr_expect_eq(ids[1], 2);
    const double s = probs[0] + probs[2];
    cr_expect_float_eq(w[0], probs[0] / s, 1e-6);
    cr_expect_float_eq(w[1], probs[2] / s, 1e-6);
}

Test(route, a_set_that_is_no_near_tie_is_left_alone)
{
    int32_t ids[2];
    float w[2], probs[6];
    own(ids, w, probs);
    float w0[2] = {w[0], w[1]};
    /* dropping the top expert for the third: costs the top's whole margin (3.0 - 1.999) */
    const int32_t f[2] = {1, 2};
    const float d = route_force(LOGITS, probs, 6, 2, 1, f, 0.02f, ids, w);
    cr_expect_float_eq(d, 3.0f - 1.999f, 1e-6f);
    cr_expect(ids[0] == 0 && ids[1] == 1 && w[0] == w0[0] && w[1] == w0[1]);
    /* the near tie itself, at a tolerance below it: not forced either */
    const int32_t g[2] = {0, 2};
    cr_expect(route_force(LOGITS, probs, 6, 2, 1, g, 1e-4f, ids, w) >= 1e-4f);
    cr_expect(ids[1] == 1);
}

Test(route, a_malformed_set_is_never_forced)
{
    int32_t ids[2];
    float w[2], probs[6];
    own(ids, w, probs);
    const int32_t bad[3][2] = {{0, 6}, {-1, 0}, {2, 2}};
    for (int i = 0; i < 3; i++) {
        cr_expect(isinf(route_force(LOGITS, probs, 6, 2, 1, bad[i], 1.0f, ids, w)), "%d", i);
        cr_expect(ids[0] == 0 && ids[1] == 1, "%d", i);
    }
}
