/* test_route.c — the routing definition (engine/route.c): route_force(), the route-tie replay's
 * forcing (issue 22 §6): which expert sets count as a near tie, and what a forced route computes;
 * and route_select on the CPU against a hand-computed case (softmax, top-k with ties to the lower
 * id, renormalization and its clamp, the gap between the k-th and (k+1)-th logits).
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

/* ---- route_select on the CPU (the one definition every backend's host side calls) ---------- */

/* 5 experts, logits 1, 3, 2, 3, 0.5: experts 1 and 3 tie for the top. By hand, with
 * a = e^-1, b = e^-2, c = e^-2.5 and S = 2 + a + b + c: probs b/S, 1/S, a/S, 1/S, c/S; top 3 =
 * experts 1, 3 (the tie: lower id first), 2; renormalized weights 1/(2+a), 1/(2+a), a/(2+a);
 * the k-th logit 2, the (k+1)-th 1 (expert 0), gap 1. */
static const float TIE[5] = {1.0f, 3.0f, 2.0f, 3.0f, 0.5f};

Test(route, select_matches_the_hand_computed_top_k_with_a_tie_and_renormalizes)
{
    const double a = exp(-1.0), b = exp(-2.0), c = exp(-2.5), S = 2.0 + a + b + c;
    const double want_p[5] = {b / S, 1 / S, a / S, 1 / S, c / S};
    int32_t ids[3];
    float w[3], probs[5];
    struct route_result r = route_select(TIE, probs, 5, 3, 1, NULL, 0, 0, ids, w);
    for (int e = 0; e < 5; e++)
        cr_expect_float_eq(probs[e], (float)want_p[e], 1e-6, "prob %d: %g vs %g", e, probs[e],
                           want_p[e]);
    cr_expect(ids[0] == 1 && ids[1] == 3 && ids[2] == 2, "ids %d %d %d (want 1 3 2)", ids[0],
              ids[1], ids[2]);
    cr_expect_float_eq(w[0], (float)(1 / (2 + a)), 1e-6, "w0 %g", w[0]);
    cr_expect_float_eq(w[1], (float)(1 / (2 + a)), 1e-6, "w1 %g", w[1]);
    cr_expect_float_eq(w[2], (float)(a / (2 + a)), 1e-6, "w2 %g", w[2]);
    cr_expect_float_eq(w[0] + w[1] + w[2], 1.0f, 1e-6);
    cr_expect_eq(r.kth_logit, 2.0f);
    cr_expect_eq(r.k1th_logit, 1.0f);
    cr_expect_eq(r.gap, 1.0f);
    cr_expect_eq(r.n_faults, 0);
    /* without renormalization the weights are the probabilities themselves */
    route_select(TIE, probs, 5, 3, 0, NULL, 0, 0, ids, w);
    cr_expect(w[0] == probs[1] && w[1] == probs[3] && w[2] == probs[2]);
    /* the out-of-line wrapper is the inline definition the CUDA kernel runs, bit for bit */
    int32_t ids2[3];
    float w2[3], probs2[5];
    route_select_inline(TIE, probs2, 5, 3, 0, NULL, 0, 0, ids2, w2);
    cr_expect(!memcmp(ids, ids2, sizeof ids) && !memcmp(w, w2, sizeof w) &&
              !memcmp(probs, probs2, sizeof probs));
}

Test(route, select_breaks_every_tie_by_the_lower_id_and_k_equal_to_n_has_no_gap)
{
    const float flat[4] = {0.25f, 0.25f, 0.25f, 0.25f};
    int32_t ids[5];
    float w[5], probs[5];
    struct route_result r = route_select(flat, probs, 4, 2, 1, NULL, 0, 0, ids, w);
    cr_expect(ids[0] == 0 && ids[1] == 1, "ids %d %d", ids[0], ids[1]);
    cr_expect(w[0] == 0.5f && w[1] == 0.5f, "w %g %g", w[0], w[1]);
    cr_expect_eq(r.gap, 0.0f, "a tie at the k-th place has gap 0");
    /* k == n_expert: every expert, highest first, ties by id; no (k+1)-th expert */
    r = route_select(TIE, probs, 5, 5, 1, NULL, 0, 0, ids, w);
    const int32_t order[5] = {1, 3, 2, 0, 4};
    cr_expect(!memcmp(ids, order, sizeof order), "%d %d %d %d %d", ids[0], ids[1], ids[2], ids[3],
              ids[4]);
    cr_expect_eq(r.kth_logit, 0.5f);
    cr_expect_eq(r.k1th_logit, r.kth_logit);
    cr_expect_eq(r.gap, 0.0f);
}

Test(route, renormalization_clamps_a_tiny_weight_sum)
{
    float w[2] = {1e-5f, 2e-5f};
    route_renorm_inline(w, 2);
    cr_expect_float_eq(w[0], 1e-5f / ROUTE_MIN_WEIGHT_SUM, 1e-7, "w0 %g", w[0]);
    cr_expect_float_eq(w[1], 2e-5f / ROUTE_MIN_WEIGHT_SUM, 1e-7, "w1 %g", w[1]);
    float v[2] = {0.2f, 0.6f};
    route_renorm_inline(v, 2);
    cr_expect_float_eq(v[0], 0.25f, 1e-7);
    cr_expect_float_eq(v[1], 0.75f, 1e-7);
}

/* A forced set in route_select's slot order: equal probabilities put the lower id first, as
 * route_select does (experts 1 and 3 tie in TIE; mutation pass, 2026-12-03). */
Test(route, a_forced_set_takes_the_lower_id_first_on_a_tie)
{
    int32_t ids[3];
    float w[3], probs[5];
    route_select(TIE, probs, 5, 3, 1, NULL, 0, 0, ids, w);
    cr_assert(ids[0] == 1 && ids[1] == 3 && ids[2] == 2);
    const int32_t f[3] = {3, 1, 0}; /* expert 0 for 2: deficit 2 - 1 */
    const float d = route_force(TIE, probs, 5, 3, 1, f, 2.0f, ids, w);
    cr_expect_float_eq(d, 1.0f, 1e-6, "deficit %g", (double)d);
    cr_expect(ids[0] == 1 && ids[1] == 3 && ids[2] == 0, "ids %d %d %d (want 1 3 0)", ids[0],
              ids[1], ids[2]);
}

/* The tolerance is strict: a set whose deficit equals it is not forced (route.h: deficit <
 * tol; mutation pass, 2026-12-03). */
Test(route, a_deficit_equal_to_the_tolerance_is_not_forced)
{
    int32_t ids[2];
    float w[2], probs[6];
    own(ids, w, probs);
    const int32_t f[2] = {0, 2};
    const float tol = 2.0f - 1.999f; /* exactly the deficit */
    const float d = route_force(LOGITS, probs, 6, 2, 1, f, tol, ids, w);
    cr_expect_eq(d, tol, "deficit %g", (double)d);
    cr_expect(ids[0] == 0 && ids[1] == 1, "ids %d %d: forced at deficit == tol", ids[0], ids[1]);
}

/* The softmax's maximum is taken over every expert, the last included: a last expert far above
 * the others still gets probability ~1, never an overflow (mutation pass, 2026-12-03). */
Test(route, a_dominant_last_expert_gets_all_the_weight)
{
    const float lg[4] = {0.0f, 1.0f, 0.5f, 200.0f};
    int32_t ids[2];
    float w[2], probs[4];
    route_select(lg, probs, 4, 2, 1, NULL, 0, 0, ids, w);
    for (int e = 0; e < 4; e++)
        cr_expect(isfinite(probs[e]), "prob %d %g", e, (double)probs[e]);
    cr_expect_float_eq(probs[3], 1.0f, 1e-6, "prob 3 %g", (double)probs[3]);
    cr_expect_eq(ids[0], 3, "ids %d %d", ids[0], ids[1]);
    cr_expect(isfinite(w[0]) && isfinite(w[1]) && fabsf(w[0] + w[1] - 1.0f) < 1e-6f, "w %g %g",
              (double)w[0], (double)w[1]);
}
