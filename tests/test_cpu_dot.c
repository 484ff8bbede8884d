/* test_cpu_dot.c — the cpu engine's multi-row decode kernels (engine/cpu_dot_avx512.c: four
 * K-quant rows against one token, VNNI on bytes; engine/cpu_dot_avx2.c: rows against one token,
 * vpmaddubsw on bytes) equal the portable kernels bit for bit.
 *
 * cpu_dot_tile() takes groups of four rows through the fast path when one token meets a
 * Q4_K / Q6_K row, and through the few-token kernels with 2-8 tokens (a prompt batch's routed
 * experts); the rest (tails, other types) go row by row. Every tile size
 * from 1 to 13 rows is checked against cpu_dot_portable_tile() on random blocks (every code value,
 * every 6-bit / signed 8-bit sub-block scale) and on extreme activations (every value at
 * +-CPU_ACT_QMAX, where the byte split's hi part is -32 or 31), so a wrong lane, scale, offset or
 * wrap shows. The engine's one-token path (Q/K/V, gate/up and a MoE layer's routed experts each
 * in one parallel region) gives the batched forward's logits bit for bit. The other engine-level
 * checks (parity, thread-count independence) are in test_cpu.c.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/cpu_dot.h"
#include "engine/cpu_gemm.h"
#include "engine/dotq.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include "tests/support/check.h"

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;

static uint64_t next_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static float uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(next_u64() >> 11) / 9007199254740992.0);
}

/* rows of a K-quant (or Q8_0) type: random bytes, then every block's fp16 scales finite */
static void random_rows(int type, uint8_t *w, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        w[i] = (uint8_t)next_u64();
    const size_t ts = quant_type_size(type);
    for (size_t o = 0; o + ts <= bytes; o += ts) {
        const uint16_t h[2] = {quant_f32_to_fp16(uniform(-0.05f, 0.05f)),
                               quant_f32_to_fp16(uniform(0.0f, 0.02f))};
        if (type == QUANT_Q6_K)
            memcpy(w + o + ts - 2, h, 2); /* d is last */
        else if (type == QUANT_Q8_0)
            memcpy(w + o, h, 2);
        else
            memcpy(w + o, h, 4); /* d, dmin */
    }
}

/* kind 0: uniform; 1: every value +-1 (all activations at +-CPU_ACT_QMAX); 2: one outlier */
static void activations(float *x, int64_t n, int kind)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = kind == 1 ? (next_u64() & 1 ? 1.0f : -1.0f) : uniform(-3.0f, 3.0f);
    if (kind == 2)
        x[next_u64() % (uint64_t)n] = -500.0f;
}

Test(cpu_dot, multi_row_decode_kernels_equal_the_portable_ones_bit_for_bit)
{
    printf("cpu_dot: avx512 %s, avx2 %s\n",
           cpu_dot_have_avx512() ? "tested" : "absent (dispatch only)",
           cpu_dot_have_avx2() ? "tested" : "absent");
    const int types[] = {QUANT_Q4_K, QUANT_Q6_K, QUANT_Q5_K, QUANT_Q8_0};
    /* one K-block, five (a tail of the four-block loops), and more than the fast path's on-stack
     * split holds (128 blocks, the most it takes, and 129: those rows must take the row-by-row
     * kernels, same bits) */
    const int64_t sizes[] = {256, 1280, 128 * 256, 129 * 256};
    const int max_rows = 13;
    for (int ti = 0; ti < 4; ti++)
        for (int si = 0; si < 4; si++) {
            const int type = types[ti];
            const int64_t n = sizes[si];
            const size_t rb = quant_row_bytes(type, n);
            uint8_t *w = malloc(rb * max_rows);
            float *x = malloc((size_t)n * sizeof(float));
            void *act = malloc(cpu_act_row_bytes(type, n));
            cr_assert(w && x && act);
            for (int trial = 0; trial < (si >= 2 ? 2 : 12); trial++) {
                random_rows(type, w, rb * max_rows);
                activations(x, n, trial % 3);
                cpu_act_quantize(type, x, act, n);
                for (int rows = 1; rows <= max_rows; rows++) {
                    float p[13], d[13], z[13];
                    memset(d, 0xff, sizeof d);
                    memset(z, 0xff, sizeof z);
                    cpu_dot_portable_tile(type, w, rb, rows, act, 0, 1, n, p, 1);
                    cpu_dot_tile(type, w, rb, rows, act, 0, 1, n, d, 1);
                    cr_assert(!memcmp(p, d, (size_t)rows * sizeof(float)),
                              "%s n %lld, %d rows, trial %d: dispatched tile differs from the "
                              "portable one (row 0: %.9g vs %.9g)",
                              quant_name(type), (long long)n, rows, trial, (double)d[0],
                              (double)p[0]);
                    if (cpu_dot_have_avx512()) {
                        cpu_dot_avx512_tile(type, w, rb, rows, act, 0, 1, n, z, 1);
                        cr_assert(!memcmp(p, z, (size_t)rows * sizeof(float)),
                                  "%s n %lld, %d rows, trial %d: avx512 tile differs",
                                  quant_name(type), (long long)n, rows, trial);
                    }
                    if (cpu_dot_have_avx2()) { /* its byte path, on an AVX-512 host too */
                        memset(z, 0xff, sizeof z);
                        cpu_dot_avx2_tile(type, w, rb, rows, act, 0, 1, n, z, 1);
                        cr_assert(!memcmp(p, z, (size_t)rows * sizeof(float)),
                                  "%s n %lld, %d rows, trial %d: avx2 tile differs",
                                  quant_name(type), (long long)n, rows, trial);
                    }
                }
            }
            free(w);
            free(x);
            free(act);
        }
}

/* The few-token four-row kernel (a prompt batch's routed experts: 2-8 tokens against Q4_K rows,
 * engine/cpu_dot_avx512.c) equals the portable tile bit for bit: 1-8 tokens (activation rows
 * padded apart, outputs at a stride wider than the tile), every tile size 1-13 rows (four-row
 * groups and their remainders), one, five and 16 K-blocks (the most its on-stack split takes at
 * eight tokens) and 17 (more: the row kernels), random and extreme activations. */
Test(cpu_dot, few_token_tiles_equal_the_portable_ones_bit_for_bit)
{
    const int types[] = {QUANT_Q4_K, QUANT_Q6_K, QUANT_Q5_K};
    const int64_t sizes[] = {256, 1280, 16 * 256, 17 * 256};
    enum { ROWS = 13, OS = 16, TOK = 8 };
    for (int ti = 0; ti < 3; ti++)
        for (int si = 0; si < 4; si++) {
            const int type = types[ti];
            const int64_t n = sizes[si];
            const size_t rb = quant_row_bytes(type, n);
            const size_t as = cpu_act_row_bytes(type, n) + 64;
            uint8_t *w = malloc(rb * ROWS);
            float *x = malloc((size_t)n * sizeof(float));
            uint8_t *act = calloc(TOK, as);
            cr_assert(w && x && act);
            for (int trial = 0; trial < 3; trial++) {
                random_rows(type, w, rb * ROWS);
                for (int t = 0; t < TOK; t++) {
                    activations(x, n, (trial + t) % 3);
                    cpu_act_quantize(type, x, act + (size_t)t * as, n);
                }
                for (int nt = 1; nt <= TOK; nt++)
                    for (int rows = 1; rows <= ROWS; rows++) {
                        float p[TOK * OS], d[TOK * OS];
                        memset(p, 0xff, sizeof p);
                        memset(d, 0xff, sizeof d);
                        cpu_dot_portable_tile(type, w, rb, rows, act, as, nt, n, p, OS);
                        cpu_dot_tile(type, w, rb, rows, act, as, nt, n, d, OS);
                        cr_assert(!memcmp(p, d, sizeof p),
                                  "%s n %lld, %d tokens, %d rows, trial %d: the tile differs from "
                                  "the portable one",
                                  quant_name(type), (long long)n, nt, rows, trial);
                        if (cpu_dot_have_avx2()) { /* its two-row path, on AVX-512 hosts too */
                            memset(d, 0xff, sizeof d);
                            cpu_dot_avx2_tile(type, w, rb, rows, act, as, nt, n, d, OS);
                            cr_assert(!memcmp(p, d, sizeof p),
                                      "%s n %lld, %d tokens, %d rows, trial %d: the avx2 tile "
                                      "differs from the portable one",
                                      quant_name(type), (long long)n, nt, rows, trial);
                        }
                    }
            }
            free(w);
            free(x);
            free(act);
        }
}

Test(cpu_dot, decode_logits_equal_the_batched_forward_bit_for_bit)
{
    /* every conformance case's type mix, dense and MoE: one token at a time (the fused decode
     * regions) against chunks of two tokens (one product at a time, the row kernels: below the
     * prompt GEMM's and the batched attention's minimum batch), two threads */
    const char *cases[] = {"qwen3moe-tiny-q4_k_m", "qwen3-dense-tiny-q4_k_m", "qwen3moe-tiny-q8_0",
                           "qwen3-dense-tiny-f32"};
    enum { N = 24 };
    int32_t tokens[N];
    mode_tokens(PARITY_TOKEN_SEED, 512, N, tokens);
    for (int ci = 0; ci < 4; ci++) {
        struct model *m = check_load_case(cases[ci]);
        const size_t V = m->hp.n_vocab;
        float *batch = malloc((size_t)N * V * sizeof(float));
        float *step = malloc((size_t)N * V * sizeof(float));
        cr_assert(batch && step);
        struct backend_config cfg = {.n_threads = 2, .n_ctx = 64, .n_batch = 2};
        struct backend *b = NULL;
        struct gate_err err = {0};
        cr_assert_eq(backend_open(&b, "cpu", m, &cfg, &err), 0, "%s", err.msg);
        cr_assert_eq(backend_forward(b, tokens, N, 0, batch, &err), 0, "%s", err.msg);
        cr_assert_eq(backend_truncate(b, 0, &err), 0, "%s", err.msg);
        for (int t = 0; t < N; t++)
            cr_assert_eq(backend_forward(b, tokens + t, 1, t, step + (size_t)t * V, &err), 0, "%s",
                         err.msg);
        for (int t = 0; t < N; t++)
            cr_expect(!memcmp(batch + (size_t)t * V, step + (size_t)t * V, V * sizeof(float)),
                      "%s: position %d decoded one token at a time differs from chunks of two",
                      cases[ci], t);
        backend_close(b);
        free(batch);
        free(step);
        model_free(m);
    }
}

/* The one-token F32 tile (four rows at a time: the MoE router, an F32 model's products) and the
 * AVX-512 K-quant row kernels with several tokens (four tokens' sums reduced together) equal the
 * portable row-by-row kernel bit for bit: every tile size 1-13, 1-8 tokens. */
Test(cpu_dot, f32_tiles_and_multi_token_rows_equal_the_portable_rows_bit_for_bit)
{
    const int64_t sizes[] = {8, 256, 2056};
    enum { ROWS = 13, TOK = 8 };
    for (int si = 0; si < 3; si++) {
        const int64_t n = sizes[si];
        float *w = malloc((size_t)n * ROWS * sizeof(float)), *x = malloc((size_t)n * sizeof(float));
        cr_assert(w && x);
        for (int64_t i = 0; i < n * ROWS; i++)
            w[i] = uniform(-1.0f, 1.0f);
        activations(x, n, 0);
        for (int rows = 1; rows <= ROWS; rows++) {
            float p[ROWS], d[ROWS];
            for (int r = 0; r < rows; r++)
                cpu_dot_portable_rows(QUANT_F32, w + (size_t)r * (size_t)n, x, 0, 1, n, p + r, 1);
            cpu_dot_tile(QUANT_F32, (const uint8_t *)w, (size_t)n * sizeof(float), rows, x, 0, 1, n,
                         d, 1);
            cr_assert(!memcmp(p, d, (size_t)rows * sizeof(float)),
                      "F32 n %lld, %d rows: the tile differs from the row kernel", (long long)n,
                      rows);
        }
        free(w);
        free(x);
    }
    const int types[] = {QUANT_Q4_K, QUANT_Q6_K, QUANT_Q5_K};
    const int64_t n = 1280;
    for (int ti = 0; ti < 3; ti++) {
        const int type = types[ti];
        const size_t rb = quant_row_bytes(type, n), ab = cpu_act_row_bytes(type, n);
        uint8_t *w = malloc(rb), *act = malloc(ab * TOK);
        float *x = malloc((size_t)n * sizeof(float));
        cr_assert(w && act && x);
        for (int trial = 0; trial < 6; trial++) {
            random_rows(type, w, rb);
            for (int t = 0; t < TOK; t++) {
                activations(x, n, (trial + t) % 3);
                cpu_act_quantize(type, x, act + (size_t)t * ab, n);
            }
            for (int nt = 1; nt <= TOK; nt++) {
                float p[TOK], d[TOK];
                memset(d, 0xff, sizeof d);
                cpu_dot_portable_rows(type, w, act, ab, nt, n, p, 1);
                cpu_dot_rows(type, w, act, ab, nt, n, d, 1);
                cr_assert(!memcmp(p, d, (size_t)nt * sizeof(float)),
                          "%s, %d tokens, trial %d: the dispatched rows kernel differs",
                          quant_name(type), nt, trial);
            }
        }
        free(w);
        free(act);
        free(x);
    }
}

/* ---- the SIMD kernels' ranges, checked whole under the sanitizer ----------------------------
 * The sanitizer build compiles the SIMD files outside the instrumentation (CMakeLists.txt), and
 * their dispatchers check every range a kernel reads or writes whole first (cpu_dot.c
 * check_tile, cpu_gemm.c, dotq.c dotq_fast). Each call runs in a child: once with the bytes just
 * past every range poisoned (it must run: no check is wider than its range), then, per range,
 * with that range's last byte poisoned too (under ASan the child must die with ASan's report;
 * other builds poison nothing and it must run). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SANITIZED 1
#else
#define SANITIZED 0
#define ASAN_POISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#endif

enum { RB_A, RB_B, RB_C, RB_D, RB_E, RB_N };
#define RQ_N 512 /* columns of the quantized cases */
#define RA_HD 64 /* head dimension of the attention cases */
#define RA_KEYS 37
#define RG_TOK 20 /* tokens of the GEMM case */

struct range_case {
    const char *name, *buf[RB_N]; /* a name per range the call uses, NULL past the last */
    size_t need[RB_N];            /* bytes of each */
    void (*call)(uint8_t *b[RB_N]);
};

static void call_tile4x2(uint8_t *b[RB_N])
{
    cpu_dot_tile(QUANT_Q4_K, b[RB_A], quant_row_bytes(QUANT_Q4_K, RQ_N), 4, b[RB_B],
                 cpu_act_row_bytes(QUANT_Q4_K, RQ_N), 2, RQ_N, (float *)b[RB_C], 4);
}

static void call_tile5x1(uint8_t *b[RB_N])
{
    cpu_dot_tile(QUANT_Q6_K, b[RB_A], quant_row_bytes(QUANT_Q6_K, RQ_N), 5, b[RB_B], 0, 1, RQ_N,
                 (float *)b[RB_C], 5);
}

static void call_gemm(uint8_t *b[RB_N])
{
    cpu_gemm_rows(QUANT_Q4_K, b[RB_A], quant_row_bytes(QUANT_Q4_K, RQ_N), 0, 6, b[RB_B], RG_TOK,
                  RQ_N, (float *)b[RB_C], 6);
}

static void call_attn(uint8_t *b[RB_N])
{
    cpu_attn_head((float *)b[RB_A], (float *)b[RB_B], (float *)b[RB_C], RA_HD, RA_KEYS, RA_HD,
                  0.125f, (float *)b[RB_D], (float *)b[RB_E]);
}

static void call_gemm_attn(uint8_t *b[RB_N])
{
    cpu_gemm_attn((float *)b[RB_A], RA_HD, 5, RA_KEYS - 5, (float *)b[RB_B], (float *)b[RB_C],
                  RA_HD, RA_HD, 0.125f, (float *)b[RB_D], (float *)b[RB_E], RA_HD);
}

static void call_dotq(uint8_t *b[RB_N])
{
    float scratch[RQ_N];
    volatile float r = dotq_fast(QUANT_Q5_K, b[RB_A], (const float *)b[RB_B], RQ_N, scratch);
    (void)r;
}

/* Run c in a child with every range's bytes from need (or, for range `cut`, from need - 1)
 * poisoned; its exit status (0: the call returned), ASan's report in *report (1 when seen). */
static int run_poisoned(const struct range_case *c, int cut, int *report)
{
    char path[] = "/tmp/gate-range-XXXXXX";
    const int fd = mkstemp(path);
    cr_assert(fd >= 0);
    const pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        dup2(fd, 2);
        uint8_t *b[RB_N] = {0};
        for (int i = 0; i < RB_N && c->buf[i]; i++) {
            const size_t cap = (c->need[i] + 127) / 64 * 64; /* 64 bytes or more past need */
            b[i] = aligned_alloc(64, cap);
            if (!b[i])
                _exit(90);
            memset(b[i], 0, cap);
            const size_t from = c->need[i] - (i == cut ? 1 : 0);
            ASAN_POISON_MEMORY_REGION(b[i] + from, cap - from);
        }
        c->call(b);
        _exit(0);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    char text[4096] = {0};
    const ssize_t got = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    unlink(path);
    *report = got > 0 && strstr(text, "AddressSanitizer") != NULL;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

Test(cpu_dot, the_simd_kernels_ranges_are_checked_whole_under_the_sanitizer)
{
    const size_t f = sizeof(float), q4 = quant_row_bytes(QUANT_Q4_K, RQ_N);
    const size_t q6 = quant_row_bytes(QUANT_Q6_K, RQ_N);
    const size_t kv = (size_t)RA_KEYS * RA_HD * f;
    struct range_case cases[] = {
        {"cpu_dot_tile Q4_K 4 rows x 2 tokens",
         {"weights", "activations", "outputs"},
         {4 * q4, 2 * cpu_act_row_bytes(QUANT_Q4_K, RQ_N), 8 * f},
         call_tile4x2},
        {"cpu_dot_tile Q6_K 5 rows x 1 token",
         {"weights", "activations", "outputs"},
         {5 * q6, cpu_act_row_bytes(QUANT_Q6_K, RQ_N), 5 * f},
         call_tile5x1},
        {"cpu_attn_head",
         {"query", "keys", "values", "scores", "output"},
         {RA_HD * f, kv, kv, RA_KEYS * f, RA_HD * f},
         call_attn},
        {"dotq_fast Q5_K", {"row", "x"}, {quant_row_bytes(QUANT_Q5_K, RQ_N), RQ_N * f}, call_dotq},
        {"cpu_gemm_rows Q4_K 6 rows x 20 tokens",
         {"weights", "packed", "outputs"},
         {6 * q4, cpu_gemm_pack_bytes(QUANT_Q4_K, RG_TOK, RQ_N), RG_TOK * 6 * f},
         call_gemm},
        {"cpu_gemm_attn 5 queries",
         {"queries", "keys", "values", "scores", "outputs"},
         {5 * RA_HD * f, kv, kv, (size_t)CPU_GEMM_LANES * RA_KEYS * f, 5 * RA_HD * f},
         call_gemm_attn},
    };
    const int n_cases = (cpu_gemm_supported(QUANT_Q4_K) ? 5 : 4) +
                        (cpu_gemm_attn_supported(RA_HD) && cpu_gemm_supported(QUANT_Q4_K));
    int checked = 0;
    for (int ci = 0; ci < n_cases; ci++) {
        const struct range_case *c = &cases[ci];
        int report;
        int rc = run_poisoned(c, -1, &report);
        cr_assert_eq(rc, 0, "%s with every range whole: exit %d (a check wider than its range?)",
                     c->name, rc);
        for (int i = 0; i < RB_N && c->buf[i]; i++, checked++) {
            rc = run_poisoned(c, i, &report);
            if (SANITIZED)
                cr_assert(rc != 0 && report,
                          "%s with the %s' last byte poisoned: exit %d, report %d (unchecked)",
                          c->name, c->buf[i], rc, report);
            else
                cr_assert_eq(rc, 0, "%s, %s: exit %d", c->name, c->buf[i], rc);
        }
    }
    cr_log_info("%d ranges of %d calls%s", checked, n_cases,
                SANITIZED ? " each reported by ASan when one byte short" : "");
}
