/* test_kernels.c — every CUDA kernel family against its CPU twin over its edge shapes
 * (oracles/selftest.c defines the shapes, twins and tolerances once; `gate selftest` prints the
 * same checks as a table). Each test skips visibly, with the reason, when the host has no CUDA
 * device, and fails instead under GATE_REQUIRE_GPU=1 (tests/support/skip.h).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dotq.h"
#include "engine/quant.h"
#include "engine/ref_ops.h"
#include "engine/route.h"
#include "kernels/k_test.h"
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
Test(cuda_kernels, gemv_v2_matches_matmul_twin)
{
    run_family("gemv_v2");
}
Test(cuda_kernels, expert_gemv_v2_reads_ids_on_device)
{
    run_family("gemv_v2_experts");
}
Test(cuda_kernels, fused_swiglu_gemv_v2_matches_swiglu_twin)
{
    run_family("gemv_v2_swiglu");
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
Test(cuda_kernels, split_attention_matches_twin)
{
    run_family("attention_split");
}
Test(cuda_kernels, graphed_attention_and_rope_are_bit_identical_to_eager)
{
    run_family("attention_graph");
}
Test(cuda_kernels, routing_matches_route_select_with_ties_and_faults)
{
    run_family("route");
}
Test(cuda_kernels, routing_v2_matches_route_select_with_ties_and_faults)
{
    run_family("route_v2");
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

/* No device needed: the v2 GEMV's item functions (the same code the kernel runs) on the host,
 * against the twin, for every v2 type over short and long rows, each row placed 16-byte aligned
 * and 2 bytes past that (the realigning load path). The selftest tolerance of gemv_v2. */
Test(cuda_kernels, gemv_v2_arithmetic_on_the_host_matches_the_twin)
{
    static const int TYPES[] = {QUANT_Q4_K, QUANT_Q6_K, QUANT_Q8_0};
    static const int64_t COLS[][3] = {{256, 768, 4352}, {256, 768, 4352}, {32, 96, 2080}};
    enum { ROWS = 7 };
    uint64_t seed = 12345;
    for (int ti = 0; ti < 3; ti++)
        for (int ci = 0; ci < 3; ci++)
            for (int off = 0; off <= 2; off += 2) {
                const int type = TYPES[ti];
                const int64_t cols = COLS[ti][ci];
                const size_t rb = quant_row_bytes(type, cols);
                uint8_t *buf = aligned_alloc(16, (ROWS * rb + 64 + 15) / 16 * 16);
                float *x = aligned_alloc(16, (size_t)cols * sizeof(float));
                float *src = malloc((size_t)cols * sizeof(float));
                float *deq = malloc((size_t)cols * sizeof(float));
                float got[ROWS], want[ROWS];
                cr_assert(buf && x && src && deq);
                memset(buf, 0, ROWS * rb + 64);
                for (int64_t i = 0; i < cols; i++) {
                    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                    x[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
                }
                for (int r = 0; r < ROWS; r++) {
                    for (int64_t i = 0; i < cols; i++) {
                        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                        src[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
                    }
                    /* 16 bytes of padding first; row r at 16 + off + r * rb */
                    uint8_t *row = buf + 16 + off + (size_t)r * rb;
                    cr_assert_eq(quant_quantize_row(type, src, row, cols), 0);
                    quant_dequant_row(type, row, deq, cols);
                    want[r] = dotq_f32(deq, x, cols);
                    struct gate_err err = {0};
                    cr_assert_eq(k_test_gemv2_host(type, row, x, cols, &got[r], &err), 0, "%s",
                                 err.msg);
                }
                char what[96];
                snprintf(what, sizeof what, "v2 on the host, %s cols %lld offset %d",
                         quant_name(type), (long long)cols, off);
                check_floats(what, got, want, ROWS, 1e-4, 1e-4, 1e-10);
                free(buf), free(x), free(src), free(deq);
            }
}

/* No device needed: routing v2's steps (the r2_* functions route2_kernel runs) on the host, lanes
 * and warp argmax emulated, against route_select BIT FOR BIT (ids, weights, k-th and (k+1)-th
 * logits): expert counts below, at and above the warp (experts not a multiple of 32, up to
 * 1024), k from 1 to X, ties (coarse grid, all equal, +0 against -0), -Inf logits, the NaN /
 * +Inf fallback, and each routing fault. */
Test(cuda_kernels, routing_v2_steps_on_the_host_are_bit_identical_to_route_select)
{
    static const int XK[][2] = {{1, 1},   {8, 2},   {31, 4},  {32, 32},  {40, 8},  {128, 8},
                                {128, 1}, {256, 8}, {97, 96}, {1024, 8}, {1024, 1}};
    enum { N = 8 };
    uint64_t seed = 777;
    int n_checked = 0;
    for (size_t si = 0; si < sizeof XK / sizeof XK[0]; si++)
        for (int fk = -1; fk < 3; fk++) {
            const int X = XK[si][0], k = XK[si][1], layer = 2, pos0 = 5;
            struct fault_set fs = {0};
            if (fk >= 0) {
                fs.n = 1;
                fs.f[0] = (struct fault_spec){.kind = (enum fault_kind)fk,
                                              .rank = k > 1 ? 1 : 0,
                                              .layer_hi = 1000,
                                              .pos_lo = pos0 + 1,
                                              .pos_hi = pos0 + 5};
            }
            float *l = malloc((size_t)N * X * 4), *probs = malloc((size_t)X * 4);
            int32_t *ig = malloc((size_t)N * k * 4), *iw = malloc((size_t)N * k * 4);
            float *wg = malloc((size_t)N * k * 4), *ww = malloc((size_t)N * k * 4);
            float kg[N], k1g[N], kw[N], k1w[N];
            cr_assert(l && probs && ig && iw && wg && ww);
            for (int i = 0; i < N * X; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                l[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * 8.0 - 4.0);
            }
            for (int i = 0; i < X; i++) {
                l[i] = roundf(l[i]);                   /* token 0: coarse grid, many ties */
                l[X + i] = 0.25f;                      /* token 1: all equal */
                l[2 * X + i] = (i & 1) ? 0.0f : -0.0f; /* token 2: +0 and -0 only */
            }
            l[3 * X + X / 2] = -INFINITY; /* token 3: a -Inf logit */
            l[4 * X + (X - 1)] = NAN;     /* token 4: a NaN (fallback) */
            l[5 * X + X / 3] = INFINITY;  /* token 5: +Inf (fallback) */
            if (X > 1)
                l[6 * X + 1] = -100.0f; /* token 6: tiny probabilities in the sum */
            for (int t = 0; t < N; t++) {
                struct route_result rr =
                    route_select(l + (size_t)t * X, probs, X, k, 1, &fs, layer, pos0 + t,
                                 iw + (size_t)t * k, ww + (size_t)t * k);
                kw[t] = rr.kth_logit, k1w[t] = rr.k1th_logit;
            }
            struct gate_err err = {0};
            cr_assert_eq(k_test_route2_host(l, N, X, k, layer, pos0, &fs, ig, wg, kg, k1g, &err), 0,
                         "%s", err.msg);
            cr_assert_eq(memcmp(ig, iw, (size_t)N * k * 4), 0,
                         "ids differ: %d experts top %d fault %d", X, k, fk);
            cr_assert_eq(memcmp(wg, ww, (size_t)N * k * 4), 0,
                         "weights differ (bits): %d experts top %d fault %d", X, k, fk);
            cr_assert_eq(memcmp(kg, kw, sizeof kg), 0, "k-th logits differ: %d top %d", X, k);
            cr_assert_eq(memcmp(k1g, k1w, sizeof k1g), 0, "(k+1)-th logits differ: %d top %d", X,
                         k);
            n_checked += N;
            free(l), free(probs), free(ig), free(iw), free(wg), free(ww);
        }
    cr_assert_eq(n_checked, 11 * 4 * N);
    struct gate_err err = {0};
    float one = 0.0f, w1;
    int32_t id;
    cr_assert_eq(k_test_route2_host(&one, 1, 1, 2, 0, 0, NULL, &id, &w1, &one, &one, &err),
                 ERR_INPUT);
}

/* No device needed: the split-KV attention's arithmetic (the step functions attn_split_kernel and
 * attn_combine_kernel run, lanes, warps, blocks and splits in turn) on the host, against the
 * twin's ref_attn_head, with gate selftest's attention tolerance (NMSE 1e-10, 1e-5 + 1e-4|want|):
 * the Qwen3-8B group (32/8) and the 30B-A3B group (32/4) at hd 128, a group of 16 (two blocks per
 * KV head), no GQA, hd 64, key counts inside one split, at its edge (128, 129), over many
 * splits; several tokens; FP32 and FP16-rounded caches; drop_diag (at position 0 a zero output).
 * And bit for bit: the result does not depend on the capacity the launch was sized for (pos0 + n
 * eagerly, the context under a graph): the partition is fixed, idle splits exit. */
Test(cuda_kernels, split_attention_on_the_host_matches_the_twin)
{
    static const struct {
        int hd, nh, nkv, n, pos0;
    } SH[] = {{128, 32, 8, 1, 0},   {128, 32, 8, 1, 127},  {128, 32, 8, 1, 128},
              {128, 32, 4, 1, 700}, {128, 16, 1, 1, 300},  {64, 4, 4, 3, 129},
              {128, 8, 2, 5, 250},  {128, 32, 4, 2, 1021}, {256, 4, 2, 1, 200}};
    enum { CTX = 1100 };
    double worst_abs = 0.0, worst_nmse = 0.0;
    for (size_t si = 0; si < sizeof SH / sizeof SH[0]; si++)
        for (int f16 = 0; f16 < 2; f16++)
            for (int drop = 0; drop < 2; drop++) {
                const int hd = SH[si].hd, nh = SH[si].nh, nkv = SH[si].nkv, n = SH[si].n;
                const int pos0 = drop && si % 3 == 0 ? 0 : SH[si].pos0, kvd = nkv * hd, layer = 3;
                const size_t qn = (size_t)n * nh * hd, cache = (size_t)CTX * kvd;
                float *q = malloc(qn * 4), *kc = malloc(cache * 4), *vc = malloc(cache * 4);
                float *got = malloc(qn * 4), *big = malloc(qn * 4), *want = malloc(qn * 4);
                float *s = malloc(CTX * 4);
                cr_assert(q && kc && vc && got && big && want && s);
                uint64_t seed = 777 + si * 4 + (uint64_t)f16 * 2 + (uint64_t)drop;
                float *arr[3] = {q, kc, vc};
                const size_t len[3] = {qn, cache, cache};
                for (int a = 0; a < 3; a++)
                    for (size_t i = 0; i < len[a]; i++) {
                        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                        float x = (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
                        if (a == 0)
                            x *= 3.0f; /* sharper softmax: scores up to ~3 sqrt(hd) / sqrt(hd) */
                        arr[a][i] = f16 && a ? quant_fp16_to_f32(quant_f32_to_fp16(x)) : x;
                    }
                struct fault_set fs = {0};
                if (drop) { /* drop_diag on this layer at every position */
                    fs.n = 1;
                    fs.f[0] = (struct fault_spec){.kind = FAULT_DROP_DIAG,
                                                  .layer_lo = layer,
                                                  .layer_hi = layer,
                                                  .pos_lo = 0,
                                                  .pos_hi = 1 << 30};
                }
                ref_attn_tokens(q, kc, vc, n, pos0, nh, nkv, hd, drop, s, want);
                struct gate_err err = {0};
                cr_assert_eq(k_test_attention_split_host(q, kc, vc, n, pos0, nh, nkv, hd, pos0 + n,
                                                         layer, &fs, got, &err),
                             0, "%s", err.msg);
                cr_assert_eq(k_test_attention_split_host(q, kc, vc, n, pos0, nh, nkv, hd, CTX,
                                                         layer, &fs, big, &err),
                             0, "%s", err.msg);
                char what[160];
                snprintf(what, sizeof what,
                         "split on the host, hd %d heads %d/%d, %d tokens at %d, %s%s", hd, nh, nkv,
                         n, pos0, f16 ? "FP16 cache" : "FP32 cache", drop ? ", drop_diag" : "");
                cr_expect(!memcmp(got, big, qn * 4),
                          "%s: the launch for %d keys and the one for %d differ", what, pos0 + n,
                          CTX);
                check_floats(what, got, want, (int64_t)qn, 1e-5, 1e-4, 1e-10);
                const struct compare_stats st = check_cmp(got, want, (int64_t)qn, 1e-5, 1e-4);
                if (st.max_abs > worst_abs)
                    worst_abs = st.max_abs;
                if (st.nmse > worst_nmse)
                    worst_nmse = st.nmse;
                free(q), free(kc), free(vc), free(got), free(big), free(want), free(s);
            }
    fprintf(stderr,
            "split attention on the host vs ref_attn_head: max |diff| %.3g, max NMSE %.3g\n",
            worst_abs, worst_nmse);
}
