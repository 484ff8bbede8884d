/* test_quantize.c — the float -> block quantizers of engine/quant.c.
 *
 * Quality: RMSE of quantize -> dequantize on Gaussian rows and on synthetic weights, against a
 * naive min/max quantizer (which the default must beat by a stated margin) and against the same
 * quantizer at exhaustive effort (the best this format reaches with this method; the default
 * must be within 10% of it). The numbers printed here are the table in docs/synth.md.
 * Validity: edge blocks (zeros, constants, all-positive sub-blocks, huge and tiny magnitudes),
 * F16/BF16 exactness, determinism.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant.h"
#include "engine/synth.h"
#include "tests/support/check.h"

/* ---- naive min/max quantizers (the baseline) ------------------------------------------------ */

static int rnd(float x)
{
    return (int)lrintf(x);
}

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Q4_K / Q5_K: each sub-block's step (max - min)/nmax and min, then 6-bit scales. */
static void naive_kx(const float *x, int nmax, uint16_t *dh, uint16_t *mh, uint8_t *scales,
                     uint8_t *q)
{
    float a[8], b[8], ma = 0, mb = 0;
    for (int j = 0; j < 8; j++) {
        float lo = x[32 * j], hi = lo;
        for (int i = 0; i < 32; i++) {
            lo = fminf(lo, x[32 * j + i]);
            hi = fmaxf(hi, x[32 * j + i]);
        }
        lo = fminf(lo, 0);
        a[j] = (hi - lo) / (float)nmax;
        b[j] = -lo;
        ma = fmaxf(ma, a[j]);
        mb = fmaxf(mb, b[j]);
    }
    *dh = quant_f32_to_fp16(ma / 63);
    *mh = quant_f32_to_fp16(mb / 63);
    const float d = quant_fp16_to_f32(*dh), dm = quant_fp16_to_f32(*mh);
    memset(scales, 0, 12);
    for (int j = 0; j < 8; j++) {
        int sc = d > 0 ? clampi(rnd(a[j] / d), 0, 63) : 0;
        int m = dm > 0 ? clampi(rnd(b[j] / dm), 0, 63) : 0;
        quant_put_scale_min_k4(j, (uint8_t)sc, (uint8_t)m, scales);
        for (int i = 0; i < 32; i++)
            q[32 * j + i] =
                (uint8_t)(sc ? clampi(rnd((x[32 * j + i] + dm * m) / (d * sc)), 0, nmax) : 0);
    }
}

static void naive_row(int type, const float *x, void *dst, int64_t n)
{
    if (type == QUANT_Q8_0) { /* the textbook Q8_0 is already max/127: the same as ours */
        quant_quantize_row(type, x, dst, n);
        return;
    }
    for (int64_t blk = 0; blk < n / QK_K; blk++, x += QK_K) {
        uint8_t q[QK_K];
        if (type == QUANT_Q4_K) {
            struct block_q4_K *y = (struct block_q4_K *)dst + blk;
            naive_kx(x, 15, &y->d, &y->dmin, y->scales, q);
            for (int c = 0; c < 4; c++)
                for (int l = 0; l < 32; l++)
                    y->qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
        } else if (type == QUANT_Q5_K) {
            struct block_q5_K *y = (struct block_q5_K *)dst + blk;
            naive_kx(x, 31, &y->d, &y->dmin, y->scales, q);
            memset(y->qh, 0, 32);
            for (int c = 0; c < 4; c++)
                for (int l = 0; l < 32; l++) {
                    int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
                    y->qs[32 * c + l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
                    y->qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
                }
        } else { /* Q6_K: symmetric max|x|/31 per 16, scales max/127 */
            struct block_q6_K *y = (struct block_q6_K *)dst + blk;
            float s[16], ms = 0;
            for (int j = 0; j < 16; j++) {
                float am = 0;
                for (int i = 0; i < 16; i++)
                    am = fmaxf(am, fabsf(x[16 * j + i]));
                s[j] = am / 31;
                ms = fmaxf(ms, s[j]);
            }
            y->d = quant_f32_to_fp16(ms / 127);
            const float d = quant_fp16_to_f32(y->d);
            int8_t qq[QK_K];
            for (int j = 0; j < 16; j++) {
                int sc = d > 0 ? clampi(rnd(s[j] / d), 0, 127) : 0;
                y->scales[j] = (int8_t)sc;
                for (int i = 0; i < 16; i++)
                    qq[16 * j + i] =
                        (int8_t)(sc ? clampi(rnd(x[16 * j + i] / (d * sc)), -32, 31) : 0);
            }
            memset(y->qh, 0, 64);
            for (int h = 0; h < 2; h++)
                for (int l = 0; l < 32; l++) {
                    int u0 = qq[128 * h + l] + 32, u1 = qq[128 * h + l + 32] + 32;
                    int u2 = qq[128 * h + l + 64] + 32, u3 = qq[128 * h + l + 96] + 32;
                    y->ql[64 * h + l] = (uint8_t)((u0 & 15) | ((u2 & 15) << 4));
                    y->ql[64 * h + l + 32] = (uint8_t)((u1 & 15) | ((u3 & 15) << 4));
                    y->qh[32 * h + l] = (uint8_t)((u0 >> 4) | ((u1 >> 4) << 2) | ((u2 >> 4) << 4) |
                                                  ((u3 >> 4) << 6));
                }
        }
    }
}

/* ---- measuring ------------------------------------------------------------------------------ */

enum method { M_DEFAULT, M_NAIVE, M_EXHAUSTIVE };

/* RMSE of quantize -> dequantize over n values, relative to the RMS of x. */
static double rel_rmse(int type, const float *x, int64_t n, enum method m)
{
    void *q = malloc(quant_row_bytes(type, n));
    float *y = malloc((size_t)n * sizeof *y);
    cr_assert(q && y);
    if (m == M_NAIVE)
        naive_row(type, x, q, n);
    else
        cr_assert_eq(quant_quantize_row_opts(type, x, q, n,
                                             m == M_DEFAULT ? QUANT_OPTS_DEFAULT
                                                            : (struct quant_opts){400, 3}),
                     0);
    quant_dequant_row(type, q, y, n);
    double se = 0, ss = 0;
    for (int64_t i = 0; i < n; i++) {
        se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        ss += (double)x[i] * x[i];
    }
    free(q);
    free(y);
    return sqrt(se / ss);
}

static float *gaussian_rows(int64_t n)
{
    float *x = malloc((size_t)n * sizeof *x);
    cr_assert(x);
    synth_gaussian(synth_tensor_key(7, "rmse-test"), 0, n, x);
    return x;
}

/* Synthetic weights: attn_q of layer 0 of tiny-dense (seed 1), the generator's F32 values. */
static float *synthetic_weights(int64_t n)
{
    struct synth_options o = {
        .spec = *synth_preset_find("tiny-dense"), .quant = SYNTH_F32, .seed = 1};
    struct synth_tensor *t = NULL;
    int nt = 0;
    struct gate_err err = {0};
    cr_assert_eq(synth_plan(&o, &t, &nt, &err), 0, "%s", err.msg);
    const struct synth_tensor *q = NULL;
    for (int i = 0; i < nt; i++)
        if (!strcmp(t[i].name, "blk.0.attn_q.weight"))
            q = &t[i];
    cr_assert(q && q->n_elements >= n);
    float *x = malloc((size_t)n * sizeof *x);
    synth_values(q, 0, n, x);
    free(t);
    return x;
}

struct expect {
    int type;
    double min_gain;    /* default must be at least this much below naive (fraction) */
    double max_vs_best; /* default / exhaustive at most this */
};

static const struct expect EXPECT[] = {
    {QUANT_Q4_K, 0.08, 1.10},
    {QUANT_Q5_K, 0.08, 1.10},
    {QUANT_Q6_K, 0.10, 1.10},
    {QUANT_Q8_0, 0.0, 1.10},
};

static void rmse_table(const char *what, const float *x, int64_t n)
{
    for (size_t i = 0; i < sizeof EXPECT / sizeof EXPECT[0]; i++) {
        const struct expect *e = &EXPECT[i];
        double ours = rel_rmse(e->type, x, n, M_DEFAULT);
        double naive = rel_rmse(e->type, x, n, M_NAIVE);
        double best = rel_rmse(e->type, x, n, M_EXHAUSTIVE);
        cr_log_info("RMSE/RMS %-10s %-5s default %.5f  naive %.5f (%.1f%% lower)  exhaustive %.5f"
                    " (default %+.1f%%)",
                    what, quant_name(e->type), ours, naive, 100 * (1 - ours / naive), best,
                    100 * (ours / best - 1));
        cr_expect(ours <= naive * (1 - e->min_gain) + 1e-12,
                  "%s %s: default RMSE %.5f is not %.0f%% below naive %.5f", what,
                  quant_name(e->type), ours, 100 * e->min_gain, naive);
        cr_expect(ours <= best * e->max_vs_best,
                  "%s %s: default RMSE %.5f is more than %.0f%%"
                  " above the exhaustive search's %.5f",
                  what, quant_name(e->type), ours, 100 * (e->max_vs_best - 1), best);
    }
}

Test(quantize, beats_naive_and_near_exhaustive_on_gaussian_rows)
{
    const int64_t n = check_asan() ? 48 * QK_K : 256 * QK_K;
    float *x = gaussian_rows(n);
    rmse_table("gaussian", x, n);
    free(x);
}

Test(quantize, beats_naive_and_near_exhaustive_on_synthetic_weights)
{
    const int64_t n = check_asan() ? 48 * QK_K : 256 * QK_K;
    float *x = synthetic_weights(n);
    rmse_table("synthetic", x, n);
    free(x);
}

Test(quantize, absolute_rmse_on_unit_gaussian_is_what_the_docs_state)
{
    /* docs/synth.md quotes these; a regression in the quantizer moves them */
    const int64_t n = check_asan() ? 48 * QK_K : 256 * QK_K;
    float *x = gaussian_rows(n);
    const struct {
        int type;
        double max;
    } lim[] = {{QUANT_Q4_K, 0.098},  {QUANT_Q5_K, 0.049}, {QUANT_Q6_K, 0.026},
               {QUANT_Q8_0, 0.0068}, {QUANT_F16, 3e-4},   {QUANT_BF16, 2.4e-3}};
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++) {
        double r = rel_rmse(lim[i].type, x, n, M_DEFAULT);
        cr_log_info("RMSE/RMS gaussian %-5s %.6f", quant_name(lim[i].type), r);
        cr_expect(r <= lim[i].max, "%s: %.6f > %.6f", quant_name(lim[i].type), r, lim[i].max);
    }
    free(x);
}

/* ---- validity ---------------------------------------------------------------------------------
 */

static void roundtrip(int type, const float *x, int64_t n, float *y)
{
    uint8_t buf[8 * 1024];
    cr_assert(quant_row_bytes(type, n) <= sizeof buf);
    cr_assert_eq(quant_quantize_row(type, x, buf, n), 0);
    quant_dequant_row(type, buf, y, n);
}

static const int KTYPES[] = {QUANT_Q8_0, QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K};

Test(quantize, zero_and_constant_blocks)
{
    float x[QK_K], y[QK_K];
    for (size_t t = 0; t < sizeof KTYPES / sizeof KTYPES[0]; t++) {
        memset(x, 0, sizeof x);
        roundtrip(KTYPES[t], x, QK_K, y);
        for (int i = 0; i < QK_K; i++)
            cr_assert_eq(y[i], 0.0f, "%s: zeros -> %g at %d", quant_name(KTYPES[t]), y[i], i);
        for (int i = 0; i < QK_K; i++)
            x[i] = -0.75f;
        roundtrip(KTYPES[t], x, QK_K, y);
        for (int i = 0; i < QK_K; i++)
            cr_assert_float_eq(y[i], -0.75f, 2e-3, "%s: constant -0.75 -> %g at %d",
                               quant_name(KTYPES[t]), y[i], i);
    }
}

Test(quantize, all_positive_and_mixed_magnitude_sub_blocks)
{
    /* all-positive sub-blocks (the K-quant min must clamp to 0), then sub-blocks whose
     * magnitudes differ by 1000x (tests the 6-bit scale quantization) */
    float x[QK_K], y[QK_K];
    for (int i = 0; i < QK_K; i++)
        x[i] = 1.0f + (float)(i % 7) * 0.25f;
    for (size_t t = 0; t < sizeof KTYPES / sizeof KTYPES[0]; t++) {
        roundtrip(KTYPES[t], x, QK_K, y);
        check_floats(quant_name(KTYPES[t]), y, x, QK_K, 0.12, 0.0, 1e-3);
    }
    for (int i = 0; i < QK_K; i++)
        x[i] = ((i / 32) % 2 ? 1000.0f : 1.0f) * (float)((i * 37) % 17 - 8) / 8.0f;
    for (size_t t = 0; t < sizeof KTYPES / sizeof KTYPES[0]; t++) {
        roundtrip(KTYPES[t], x, QK_K, y);
        check_floats(quant_name(KTYPES[t]), y, x, QK_K, 1000.0 / 8, 0.0, 1e-2);
    }
}

Test(quantize, huge_and_tiny_magnitudes_stay_finite)
{
    const float scale[] = {1e4f, 1e-4f, 3e-7f};
    float x[QK_K], y[QK_K];
    synth_gaussian(99, 0, QK_K, x);
    for (size_t s = 0; s < 3; s++)
        for (size_t t = 0; t < sizeof KTYPES / sizeof KTYPES[0]; t++) {
            float xs[QK_K];
            for (int i = 0; i < QK_K; i++)
                xs[i] = x[i] * scale[s];
            roundtrip(KTYPES[t], xs, QK_K, y);
            double se = 0, ss = 0;
            for (int i = 0; i < QK_K; i++) {
                cr_assert(isfinite(y[i]), "%s at scale %g: non-finite at %d", quant_name(KTYPES[t]),
                          (double)scale[s], i);
                se += ((double)y[i] - xs[i]) * ((double)y[i] - xs[i]);
                ss += (double)xs[i] * xs[i];
            }
            /* at 3e-7 the block scale is below the smallest fp16 subnormal (6e-8): the format
             * can only store zeros, which must come out as zeros, not garbage */
            cr_expect(sqrt(se / ss) < (s == 2 ? 1.0 + 1e-9 : 0.12), "%s at scale %g: rel RMSE %g",
                      quant_name(KTYPES[t]), (double)scale[s], sqrt(se / ss));
        }
}

Test(quantize, f16_bf16_f32_round_trips)
{
    float x[64], y[64];
    for (int i = 0; i < 64; i++)
        x[i] = quant_fp16_to_f32((uint16_t)(i * 977 % 0x7c00)) * (i % 2 ? -1.0f : 1.0f);
    roundtrip(QUANT_F16, x, 64, y);
    cr_assert_arr_eq(x, y, sizeof x, "fp16-representable values must survive F16 exactly");
    for (int i = 0; i < 64; i++)
        x[i] = quant_bf16_to_f32((uint16_t)(0x3f80 + i * 3)) * (i % 2 ? -1.0f : 1.0f);
    roundtrip(QUANT_BF16, x, 64, y);
    cr_assert_arr_eq(x, y, sizeof x, "bf16-representable values must survive BF16 exactly");
    synth_gaussian(5, 0, 64, x);
    roundtrip(QUANT_F32, x, 64, y);
    cr_assert_arr_eq(x, y, sizeof x);
}

Test(quantize, deterministic_and_independent_per_block)
{
    /* quantizing a row in one call or block by block gives the same bytes */
    const int64_t n = 4 * QK_K;
    float x[4 * QK_K];
    synth_gaussian(11, 0, n, x);
    for (size_t t = 0; t < sizeof KTYPES / sizeof KTYPES[0]; t++) {
        const int type = KTYPES[t];
        uint8_t a[8 * QK_K], b[8 * QK_K];
        cr_assert_eq(quant_quantize_row(type, x, a, n), 0);
        const int64_t bs = quant_block_size(type) == QK_K ? QK_K : 32;
        for (int64_t i = 0; i < n; i += bs)
            quant_quantize_row(type, x + i, b + quant_row_bytes(type, i), bs);
        cr_assert_arr_eq(a, b, quant_row_bytes(type, n), "%s", quant_name(type));
    }
}

Test(quantize, refuses_types_it_cannot_produce)
{
    float x[32] = {0};
    uint8_t buf[64];
    cr_assert_eq(quant_can_quantize(QUANT_Q4_0), 0);
    cr_assert_eq(quant_quantize_row(QUANT_Q4_0, x, buf, 32), -1);
    cr_assert_eq(quant_quantize_row(QUANT_Q8_K, x, buf, 32), -1);
    for (size_t t = 0; t < sizeof KTYPES / sizeof KTYPES[0]; t++)
        cr_assert_eq(quant_can_quantize(KTYPES[t]), 1);
}

Test(quantize, scale_min_packing_inverts_the_reader)
{
    for (int trial = 0; trial < 64; trial++) {
        uint8_t scales[12] = {0}, sc[8], m[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = (uint8_t)((trial * 7 + j * 13) % 64);
            m[j] = (uint8_t)((trial * 11 + j * 5) % 64);
            quant_put_scale_min_k4(j, sc[j], m[j], scales);
        }
        for (int j = 0; j < 8; j++) {
            uint8_t a, b;
            quant_get_scale_min_k4(j, scales, &a, &b);
            cr_assert(a == sc[j] && b == m[j], "sub-block %d: (%d,%d) read back as (%d,%d)", j,
                      sc[j], m[j], a, b);
        }
    }
}
