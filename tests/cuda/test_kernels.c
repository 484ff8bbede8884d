/* test_kernels.c — every CUDA kernel family against its CPU twin over its edge shapes
 * (oracles/selftest.c defines the shapes, twins and tolerances once; `gate selftest` prints the
 * same checks as a table). Each test skips visibly, with the reason, when the host has no CUDA
 * device, and fails instead under GATE_REQUIRE_GPU=1 (tests/support/skip.h).
 */
#include <criterion/criterion.h>
#include <stdio.h>

#include "oracles/selftest.h"
#include "tests/support/check.h"
#include "tests/support/skip.h"

static int assert_close(void *ctx, const struct selftest_case *c, const float *got,
                        const float *want, int64_t n)
{
    (void)ctx;
    char what[320];
    snprintf(what, sizeof what, "%s [%s] %s vs %s", c->family, c->shape, c->what, c->twin);
    check_floats(what, got, want, n, c->atol, c->rtol, c->max_nmse);
    return 0;
}

static void run_family(const char *family)
{
    struct gate_err err = {0};
    char dev[160];
    if (selftest_device(dev, sizeof dev, &err))
        check_skip_no_device("%s", err.msg);
    int n_cases = 0, n_failed = 0;
    int rc = selftest_kernels(family, assert_close, NULL, &n_cases, &n_failed, &err);
    cr_assert_eq(rc, 0, "%s on %s: %s", family, dev, err.msg);
    cr_assert_gt(n_cases, 0, "%s: no cases ran", family);
}

Test(cuda_kernels, gemv_matches_matmul_twin)
{
    run_family("gemv");
}
Test(cuda_kernels, expert_gemv_reads_ids_on_device)
{
    run_family("gemv_experts");
}
Test(cuda_kernels, fused_swiglu_gemv_matches_swiglu_twin)
{
    run_family("gemv_swiglu");
}
Test(cuda_kernels, cublas_prefill_gemm_matches_matmul_twin)
{
    run_family("gemm");
}
Test(cuda_kernels, embedding_matches_dequant_row)
{
    run_family("embed");
}
Test(cuda_kernels, argmax_takes_lowest_index_on_ties)
{
    run_family("argmax");
}
Test(cuda_kernels, rmsnorm_matches_twin)
{
    run_family("rmsnorm");
}
Test(cuda_kernels, qk_norm_rope_kv_matches_twin_and_skip_fault)
{
    run_family("qk_norm_rope");
}
Test(cuda_kernels, attention_matches_twin_over_gqa_and_head_dims)
{
    run_family("attention");
}
Test(cuda_kernels, routing_matches_route_select_with_ties_and_faults)
{
    run_family("route");
}
Test(cuda_kernels, moe_weighted_sum_in_slot_order)
{
    run_family("moe_sum");
}

Test(cuda_kernels, unknown_family_is_an_input_error)
{
    struct gate_err err = {0};
    char dev[160];
    if (selftest_device(dev, sizeof dev, &err))
        check_skip_no_device("%s", err.msg);
    cr_assert_eq(selftest_kernels("no_such_kernel", assert_close, NULL, NULL, NULL, &err),
                 ERR_INPUT);
}
