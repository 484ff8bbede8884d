/* test_dotq.c — the fused decode dot products (dotq_fast) give exactly the bits of the
 * reference definition (dequantize the row, then the sixteen-lane dot), on random blocks of
 * every type and on every row of the conformance models' quantized tensors. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dotq.h"
#include "engine/gguf.h"
#include "engine/quant.h"
#include "tests/support/check.h"

static uint64_t state = 42;

static uint64_t next(void)
{
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float frand(void)
{
    return (float)((double)(next() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

Test(dotq, fused_equals_reference_bit_for_bit_on_random_rows)
{
    const int types[] = {QUANT_Q4_K, QUANT_Q6_K, QUANT_Q8_0, QUANT_Q5_K,
                         QUANT_F16,  QUANT_BF16, QUANT_F32,  QUANT_Q4_0};
    const int64_t n = 3 * 256;
    uint8_t *row = malloc(quant_row_bytes(QUANT_F32, n));
    float *x = malloc(n * sizeof *x), *scratch = malloc(n * sizeof *scratch);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (int trial = 0; trial < 400; trial++) {
            size_t nb = quant_row_bytes(types[t], n);
            for (size_t i = 0; i < nb; i++)
                row[i] = (uint8_t)next();
            /* keep scales finite and varied (random bits would be mostly huge or NaN) */
            if (types[t] == QUANT_Q4_K || types[t] == QUANT_Q5_K)
                for (int b = 0; b < 3; b++) {
                    uint16_t *d = (uint16_t *)(row + b * quant_type_size(types[t]));
                    d[0] = quant_f32_to_fp16(frand() * 0.05f);
                    d[1] = quant_f32_to_fp16(frand() * 0.05f);
                }
            if (types[t] == QUANT_Q6_K)
                for (int b = 0; b < 3; b++) {
                    struct block_q6_K *q = (struct block_q6_K *)row + b;
                    q->d = quant_f32_to_fp16(frand() * 0.01f);
                }
            if (types[t] == QUANT_Q8_0 || types[t] == QUANT_Q4_0)
                for (int b = 0; b < n / 32; b++) {
                    uint16_t *d = (uint16_t *)(row + b * quant_type_size(types[t]));
                    d[0] = quant_f32_to_fp16(frand() * 0.02f);
                }
            if (types[t] == QUANT_F32)
                for (int64_t i = 0; i < n; i++)
                    ((float *)row)[i] = frand();
            for (int64_t i = 0; i < n; i++)
                x[i] = frand() * (trial % 7 == 0 ? 1e4f : 1.0f);
            float want = dotq_ref(types[t], row, x, n, scratch);
            float got = dotq_fast(types[t], row, x, n, scratch);
            cr_assert(memcmp(&want, &got, sizeof want) == 0,
                      "%s trial %d: fused %.9g, reference %.9g", quant_name(types[t]), trial, got,
                      want);
        }
    }
    free(row);
    free(x);
    free(scratch);
}

Test(dotq, fused_equals_reference_on_every_conformance_row)
{
    const char *cases[] = {"qwen3moe-tiny-q4_k_m", "qwen3moe-tiny-q8_0", "qwen3-dense-tiny-q4_k_m"};
    for (size_t c = 0; c < 3; c++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/conformance/%s/model.gguf", check_shared_dir(), cases[c]);
        struct gate_err err = {0};
        struct gguf_file *f = NULL;
        cr_assert_eq(gguf_open(&f, path, 0, &err), 0, "%s", err.msg);
        int64_t checked = 0;
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const struct gguf_tensor *t = &f->tensors[i];
            if (t->n_dims < 2 || !quant_supported(t->type))
                continue;
            const int64_t n = t->ne[0], rows = t->ne[1] * t->ne[2];
            const size_t rb = quant_row_bytes(t->type, n);
            float *x = malloc(n * sizeof *x), *scratch = malloc(n * sizeof *scratch);
            for (int64_t k = 0; k < n; k++)
                x[k] = frand();
            for (int64_t r = 0; r < rows; r++) {
                const uint8_t *row = (const uint8_t *)t->data + r * rb;
                float want = dotq_ref(t->type, row, x, n, scratch);
                float got = dotq_fast(t->type, row, x, n, scratch);
                cr_assert(memcmp(&want, &got, sizeof want) == 0,
                          "%s %s row %lld: fused %.9g, reference %.9g", cases[c], t->name,
                          (long long)r, got, want);
                checked++;
            }
            free(x);
            free(scratch);
        }
        cr_expect_gt(checked, 1000, "%s: only %lld rows", cases[c], (long long)checked);
        gguf_close(f);
    }
}

/* The sanitizer build runs dotq_f32 outside ASan's instrumentation (base/sanitize.h) and checks
 * its ranges whole instead: a read one float past the end of a heap block must still stop the
 * process with an ASan report (exit code 1). Only the sanitizer build can show it, so only that
 * build has the test (ci/test.sh runs it there); the normal build has nothing to skip. */
#if defined(__SANITIZE_ADDRESS__)
Test(dotq, an_overrun_of_the_uninstrumented_dot_is_still_an_asan_error, .exit_code = 1)
{
    float *a = calloc(15, sizeof *a), *b = calloc(16, sizeof *b);
    cr_assert(a && b);
    volatile float r = dotq_f32(a, b, 16); /* a holds 15 */
    (void)r;
    free(a);
    free(b);
}
#endif
