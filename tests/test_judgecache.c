/* test_judgecache.c — the judge's results cached content-addressed (oracles/judgecache.h, issue
 * 26 §3): a second plain judge run of the same inputs is read back bit for bit (logits and taps);
 * a corrupted entry is detected, recomputed and rewritten, never used; faulted runs, another
 * binary and a closed cache do not read it; a hit leaves the judge's KV cache empty; a run that
 * keeps only some rows (issue 26 §2) stores those rows under a key that holds their positions.
 * Start reading: judgecache.a_corrupted_entry_is_recomputed_never_used.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/model.h"
#include "engine/pin.h"
#include "faults/fault.h"
#include "oracles/judgecache.h"
#include "oracles/mode.h"
#include "tests/support/check.h"
#include "tests/support/conformance.h"

#define BIN_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define BIN_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define N 24

static struct model *load_pinned(void)
{
    struct pinned p = {.fd = -1};
    struct gate_err err = {0};
    struct model *m = NULL;
    cr_assert_eq(pin_open(conformance_path("qwen3moe-tiny-q8_0", "model.gguf"), NULL, &p, &err), 0,
                 "%s", err.msg);
    cr_assert_eq(model_load_pinned(&m, &p, &err), 0, "%s", err.msg);
    pin_close(&p);
    cr_assert_eq(strlen(m->sha256), 64, "a pinned model carries its digest");
    return m;
}

struct judged {
    float *logits, *hidden, *kth;
    int32_t *experts;
};

/* One judge run of N tokens with hidden, experts and router_kth taps. */
static void judge(const struct model *m, struct judged *out)
{
    const size_t V = m->hp.n_vocab, L = m->hp.n_layer, K = m->hp.n_expert_used;
    out->logits = malloc(N * V * sizeof(float));
    out->hidden = malloc(L * N * m->hp.n_embd * sizeof(float));
    out->kth = malloc(L * N * sizeof(float));
    out->experts = malloc(L * N * K * sizeof(int32_t));
    cr_assert(out->logits && out->hidden && out->kth && out->experts);
    int32_t ids[N];
    mode_tokens(7, (uint32_t)V, N, ids);
    struct backend_taps taps = {
        .hidden = out->hidden, .experts = out->experts, .router_kth = out->kth};
    struct backend *b = NULL;
    struct gate_err err = {0};
    cr_assert_eq(mode_open_judge(&b, m, N + 4, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(mode_judge(b, ids, N, out->logits, &taps, &err), 0, "%s", err.msg);
    backend_close(b);
}

static void same(const struct model *m, const struct judged *a, const struct judged *b)
{
    const size_t V = m->hp.n_vocab, L = m->hp.n_layer, K = m->hp.n_expert_used;
    cr_expect_eq(memcmp(a->logits, b->logits, N * V * sizeof(float)), 0, "logits differ");
    cr_expect_eq(memcmp(a->hidden, b->hidden, L * N * m->hp.n_embd * sizeof(float)), 0,
                 "hidden taps differ");
    cr_expect_eq(memcmp(a->kth, b->kth, L * N * sizeof(float)), 0, "router taps differ");
    cr_expect_eq(memcmp(a->experts, b->experts, L * N * K * sizeof(int32_t)), 0,
                 "expert taps differ");
}

static void drop(struct judged *j)
{
    free(j->logits);
    free(j->hidden);
    free(j->kth);
    free(j->experts);
}

/* The one entry file in dir (path into out); asserts there is exactly one. */
static void the_entry(const char *dir, char *out, size_t n)
{
    DIR *d = opendir(dir);
    cr_assert(d, "cannot list %s", dir);
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".judge") && !strstr(e->d_name, ".tmp")) {
            snprintf(out, n, "%s/%s", dir, e->d_name);
            found++;
        }
    closedir(d);
    cr_assert_eq(found, 1, "%d entries in %s", found, dir);
}

Test(judgecache, a_corrupted_entry_is_recomputed_never_used)
{
    struct model *m = load_pinned();
    char dir[600];
    check_make_dir(dir, sizeof dir, "jc");
    struct gate_err err = {0};
    cr_assert_eq(judgecache_open(dir, BIN_A, &err), 0, "%s", err.msg);
    struct judged a, b, c;
    judge(m, &a); /* computed and stored */
    judge(m, &b); /* read back */
    struct judgecache_stats st;
    judgecache_stats(&st);
    cr_expect_eq(st.misses, 1);
    cr_expect_eq(st.hits, 1, "the second run of the same inputs was not read back");
    cr_expect_eq(st.stored, 1);
    same(m, &a, &b);
    /* flip one byte of the payload (the last one: a logit) */
    char path[1200], sub[900];
    snprintf(sub, sizeof sub, "%s/%.16s", dir, BIN_A); /* this binary's folder */
    the_entry(sub, path, sizeof path);
    FILE *f = fopen(path, "r+b");
    cr_assert(f);
    cr_assert_eq(fseek(f, -1, SEEK_END), 0);
    const int ch = fgetc(f);
    cr_assert_eq(fseek(f, -1, SEEK_END), 0);
    fputc(ch ^ 0x40, f);
    cr_assert_eq(fclose(f), 0);
    judge(m, &c);
    judgecache_stats(&st);
    cr_expect_eq(st.corrupt, 1, "a corrupted entry was not detected");
    cr_expect_eq(st.hits, 1, "a corrupted entry was used");
    same(m, &a, &c);
    drop(&c);
    judge(m, &c); /* rewritten: read back again */
    judgecache_stats(&st);
    cr_expect_eq(st.hits, 2);
    same(m, &a, &c);
    drop(&b);
    drop(&c);
    /* another binary never reads this binary's entries */
    cr_assert_eq(judgecache_open(dir, BIN_B, &err), 0, "%s", err.msg);
    judge(m, &b);
    judgecache_stats(&st);
    cr_expect_eq(st.hits, 0, "another binary's entry was read");
    cr_expect_eq(st.misses, 1);
    same(m, &a, &b);
    drop(&b);
    judgecache_close();
    drop(&a);
    model_free(m);
}

Test(judgecache, faulted_runs_and_a_closed_cache_are_never_cached_and_a_hit_leaves_no_state)
{
    struct model *m = load_pinned();
    char dir[600];
    check_make_dir(dir, sizeof dir, "jc2");
    struct gate_err err = {0};
    cr_assert_eq(judgecache_open(dir, BIN_A, &err), 0, "%s", err.msg);
    const size_t V = m->hp.n_vocab;
    float *l1 = malloc(N * V * sizeof(float)), *l2 = malloc(N * V * sizeof(float));
    int32_t ids[N];
    mode_tokens(9, (uint32_t)V, N, ids);
    struct backend *b = NULL;
    cr_assert_eq(mode_open_judge(&b, m, N + 4, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(mode_judge(b, ids, N, l1, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(mode_judge(b, ids, N, l2, NULL, &err), 0, "%s", err.msg);
    struct judgecache_stats st;
    judgecache_stats(&st);
    cr_expect_eq(st.hits, 1);
    cr_expect_eq(memcmp(l1, l2, N * V * sizeof(float)), 0);
    /* after a hit the judge's cache is empty: continuing from position N is an error, not a
     * silent wrong state */
    float *one = malloc(V * sizeof(float));
    cr_expect_neq(backend_forward(b, ids, 1, N, one, &err), 0,
                  "a hit left the judge claiming N cached positions");
    err_clear(&err);
    /* other tokens of the same length are another key: computed, never the first run's entry */
    int32_t other[N];
    mode_tokens(10, (uint32_t)V, N, other);
    cr_assert_eq(mode_judge(b, other, N, l2, NULL, &err), 0, "%s", err.msg);
    judgecache_stats(&st);
    cr_expect_eq(st.hits, 1, "other tokens were read from the first run's entry");
    cr_expect_eq(st.misses, 2);
    cr_expect_neq(memcmp(l1, l2, N * V * sizeof(float)), 0);
    /* a faulted judge is never cached (and never read back) */
    struct fault_set fs = {0};
    struct fault_spec spec;
    cr_assert_eq(fault_parse("skip_qk_norm", &spec, &err), 0, "%s", err.msg);
    cr_assert_eq(fault_set_add(&fs, &spec, &err), 0, "%s", err.msg);
    backend_set_faults(b, &fs);
    cr_assert_eq(mode_judge(b, ids, N, l2, NULL, &err), 0, "%s", err.msg);
    backend_set_faults(b, NULL);
    judgecache_stats(&st);
    cr_expect_eq(st.uncacheable, 1);
    cr_expect_eq(st.hits, 1, "a faulted run was read from the cache");
    cr_expect_neq(memcmp(l1, l2, N * V * sizeof(float)), 0, "the fault did not act");
    /* closed: nothing is read or written */
    judgecache_close();
    cr_assert_eq(mode_judge(b, ids, N, l2, NULL, &err), 0, "%s", err.msg);
    judgecache_stats(&st);
    cr_expect_eq(st.hits + st.misses + st.stored, 0);
    cr_expect_eq(memcmp(l1, l2, N * V * sizeof(float)), 0);
    backend_close(b);
    free(one);
    free(l1);
    free(l2);
    model_free(m);
}

/* a rebuilt gate's entries are never hit again: opening keeps the three most recently used
 * binaries' folders and removes the rest */
Test(judgecache, old_binaries_folders_are_removed_at_open)
{
    char dir[600];
    check_make_dir(dir, sizeof dir, "jc3");
    static const char *const olds[] = {"1111111111111111", "2222222222222222", "3333333333333333",
                                       "4444444444444444"};
    for (int i = 0; i < 4; i++) {
        const char *p = check_path(dir, olds[i]);
        cr_assert_eq(mkdir(p, 0755), 0);
        FILE *f = fopen(check_path(p, "x.judge"), "w");
        cr_assert(f);
        fclose(f);
        const struct timespec t[2] = {{1000000 + i * 100, 0}, {1000000 + i * 100, 0}};
        cr_assert_eq(utimensat(AT_FDCWD, p, t, 0), 0);
    }
    struct gate_err err = {0};
    cr_assert_eq(judgecache_open(dir, BIN_A, &err), 0, "%s", err.msg);
    judgecache_close();
    struct stat st;
    cr_expect_neq(stat(check_path(dir, olds[0]), &st), 0, "the oldest binary's folder stayed");
    cr_expect_neq(stat(check_path(dir, olds[1]), &st), 0, "the second oldest stayed");
    cr_expect_eq(stat(check_path(dir, olds[2]), &st), 0, "a recent one was removed");
    cr_expect_eq(stat(check_path(dir, olds[3]), &st), 0, "a recent one was removed");
    cr_expect_eq(stat(check_path(dir, "aaaaaaaaaaaaaaaa"), &st), 0, "this binary's folder");
}

/* One judge run of N tokens keeping the rows of keep (NULL: every row) with hidden, experts and
 * router_kth taps, on a judge whose batch is 8 tokens: the kept run goes through its scratch in
 * calls of 8. Rows: keep->n (or N). */
static void judge_kept(const struct model *m, const struct mode_keep *keep, struct judged *out)
{
    const size_t V = m->hp.n_vocab, L = m->hp.n_layer, K = m->hp.n_expert_used;
    const size_t R = keep ? (size_t)keep->n : N;
    out->logits = malloc(R * V * sizeof(float));
    out->hidden = malloc(L * R * m->hp.n_embd * sizeof(float));
    out->kth = malloc(L * N * sizeof(float));
    out->experts = malloc(L * N * K * sizeof(int32_t));
    cr_assert(out->logits && out->hidden && out->kth && out->experts);
    int32_t ids[N];
    mode_tokens(7, (uint32_t)V, N, ids);
    struct backend_taps taps = {
        .hidden = out->hidden, .experts = out->experts, .router_kth = out->kth};
    struct backend *b = NULL;
    struct gate_err err = {0};
    cr_assert_eq(mode_open_judge_batch(&b, m, N + 4, 8, 1, "", &err), 0, "%s", err.msg);
    cr_assert_eq(mode_judge_kept(b, ids, N, keep, out->logits, &taps, &err), 0, "%s", err.msg);
    backend_close(b);
}

/* The rows of keep in `kept` are the same rows of the whole run `all`, bit for bit; the routing
 * taps cover every position either way. */
static void rows_of(const struct model *m, const struct mode_keep *keep, const struct judged *all,
                    const struct judged *kept, const char *what)
{
    const size_t V = m->hp.n_vocab, L = m->hp.n_layer, E = m->hp.n_embd, R = (size_t)keep->n;
    for (size_t i = 0; i < R; i++) {
        const size_t p = (size_t)keep->pos[i];
        cr_expect_eq(memcmp(kept->logits + i * V, all->logits + p * V, V * sizeof(float)), 0,
                     "%s: the logits of kept row %zu (position %zu) differ", what, i, p);
        for (size_t l = 0; l < L; l++)
            cr_expect_eq(memcmp(kept->hidden + (l * R + i) * E, all->hidden + (l * N + p) * E,
                                E * sizeof(float)),
                         0, "%s: the hidden state of layer %zu, position %zu differs", what, l, p);
    }
    cr_expect_eq(memcmp(kept->kth, all->kth, L * N * sizeof(float)), 0, "%s: router taps", what);
    cr_expect_eq(memcmp(kept->experts, all->experts, L * N * m->hp.n_expert_used * 4), 0,
                 "%s: expert taps", what);
}

/* issue 26 §2: a long context keeps only its judged rows; the cache's key holds them, so a run
 * keeping other rows (same count, same tokens) is another entry, never the first one's rows */
Test(judgecache, kept_rows_are_the_whole_runs_rows_and_the_key_holds_them)
{
    struct model *m = load_pinned();
    struct judged all, a1, a2, b1;
    judge_kept(m, NULL, &all); /* no cache open: the plain run, every row */
    static const int pa[] = {1, 5, 8, 23}, pb[] = {2, 5, 8, 23};
    const struct mode_keep ka = {.pos = pa, .n = 4}, kb = {.pos = pb, .n = 4};
    char dir[600];
    check_make_dir(dir, sizeof dir, "jc4");
    struct gate_err err = {0};
    cr_assert_eq(judgecache_open(dir, BIN_A, &err), 0, "%s", err.msg);
    judge_kept(m, &ka, &a1); /* computed and stored */
    judge_kept(m, &ka, &a2); /* read back */
    judge_kept(m, &kb, &b1); /* other rows: computed */
    struct judgecache_stats st;
    judgecache_stats(&st);
    judgecache_close();
    cr_expect_eq(st.hits, 1, "the same kept rows were not read back");
    cr_expect_eq(st.misses, 2, "other kept rows were read from the first entry");
    cr_expect_eq(st.stored, 2);
    rows_of(m, &ka, &all, &a1, "computed");
    rows_of(m, &ka, &all, &a2, "read back");
    rows_of(m, &kb, &all, &b1, "other rows");
    /* a kept position outside the sequence, or out of order, is refused */
    static const int bad[] = {3, 3};
    const struct mode_keep kbad = {.pos = bad, .n = 2};
    struct backend *b = NULL;
    int32_t ids[N];
    mode_tokens(7, m->hp.n_vocab, N, ids);
    float *lg = malloc(2 * m->hp.n_vocab * sizeof(float));
    cr_assert_eq(mode_open_judge_batch(&b, m, N + 4, 8, 1, "", &err), 0, "%s", err.msg);
    cr_expect_eq(mode_judge_kept(b, ids, N, &kbad, lg, NULL, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "kept positions must increase"), "%s", err.msg);
    backend_close(b);
    free(lg);
    drop(&all);
    drop(&a1);
    drop(&a2);
    drop(&b1);
    model_free(m);
}

/* One plain judge run (logits only) of ids on a judge of batch N emulating `emulate`. */
static void judge_plain(const struct model *m, const int32_t *ids, const char *emulate, float *out)
{
    struct backend *b = NULL;
    struct gate_err err = {0};
    cr_assert_eq(mode_open_judge_batch(&b, m, N + 4, N, 1, emulate, &err), 0, "%s", err.msg);
    cr_assert_eq(mode_judge(b, ids, N, out, NULL, &err), 0, "%s", err.msg);
    backend_close(b);
}

/* the key holds every token: a prompt that differs only in its last token is another entry */
Test(judgecache, tokens_that_differ_after_the_first_are_another_entry)
{
    struct model *m = load_pinned();
    const size_t V = m->hp.n_vocab;
    char dir[600];
    check_make_dir(dir, sizeof dir, "jc5");
    struct gate_err err = {0};
    cr_assert_eq(judgecache_open(dir, BIN_A, &err), 0, "%s", err.msg);
    int32_t ids[N], other[N];
    mode_tokens(7, (uint32_t)V, N, ids);
    memcpy(other, ids, sizeof ids);
    other[N - 1] = (ids[N - 1] + 1) % (int32_t)V;
    float *a = malloc(N * V * sizeof(float)), *b = malloc(N * V * sizeof(float));
    judge_plain(m, ids, "", a);
    judge_plain(m, other, "", b);
    struct judgecache_stats st;
    judgecache_stats(&st);
    judgecache_close();
    cr_expect_eq(st.hits, 0, "another prompt was read from the first prompt's entry");
    cr_expect_eq(st.misses, 2);
    cr_expect_neq(memcmp(a + (N - 1) * V, b + (N - 1) * V, V * sizeof(float)), 0,
                  "the last token's logits are the first prompt's");
    free(a);
    free(b);
    model_free(m);
}

/* the key holds the model's digest: another model file of the same shapes is another entry */
Test(judgecache, another_models_digest_is_another_entry)
{
    struct model *m = load_pinned();
    const size_t V = m->hp.n_vocab;
    char dir[600];
    check_make_dir(dir, sizeof dir, "jc6");
    struct gate_err err = {0};
    cr_assert_eq(judgecache_open(dir, BIN_A, &err), 0, "%s", err.msg);
    int32_t ids[N];
    mode_tokens(7, (uint32_t)V, N, ids);
    float *a = malloc(N * V * sizeof(float));
    judge_plain(m, ids, "", a);
    m->sha256[0] = m->sha256[0] == '0' ? '1' : '0'; /* as if another file were loaded */
    judge_plain(m, ids, "", a);
    struct judgecache_stats st;
    judgecache_stats(&st);
    judgecache_close();
    cr_expect_eq(st.hits, 0, "another model's run was read from this model's entry");
    cr_expect_eq(st.misses, 2);
    free(a);
    model_free(m);
}

/* the key holds the roundings the judge emulates; a list too long to record ("?") is never
 * cached, since no key could tell two such lists apart */
Test(judgecache, the_emulated_roundings_are_in_the_key_and_an_unrecorded_list_is_never_cached)
{
    struct model *m = load_pinned();
    const size_t V = m->hp.n_vocab;
    char dir[600];
    check_make_dir(dir, sizeof dir, "jc7");
    struct gate_err err = {0};
    cr_assert_eq(judgecache_open(dir, BIN_A, &err), 0, "%s", err.msg);
    int32_t ids[N];
    mode_tokens(7, (uint32_t)V, N, ids);
    float *plain = malloc(N * V * sizeof(float)), *kv = malloc(N * V * sizeof(float));
    judge_plain(m, ids, "", plain);
    judge_plain(m, ids, "kv-f16", kv);
    struct judgecache_stats st;
    judgecache_stats(&st);
    cr_expect_eq(st.hits, 0, "the kv-f16 judge was read from the plain judge's entry");
    cr_expect_eq(st.misses, 2);
    cr_expect_neq(memcmp(plain, kv, N * V * sizeof(float)), 0, "kv-f16 changed no logit");
    judgecache_close();
    cr_assert_eq(judgecache_open(dir, BIN_A, &err), 0, "%s", err.msg);
    const char *long1 = "kv-f16,gemm-f16,fma,expf,kv-f16,gemm-f16,fma,expf,kv-f16";
    const char *long2 = "gemm-f16,fma,expf,kv-f16,gemm-f16,fma,expf,kv-f16,gemm-f16";
    judge_plain(m, ids, long1, plain);
    judge_plain(m, ids, long2, kv);
    judgecache_stats(&st);
    judgecache_close();
    cr_expect_eq(st.uncacheable, 2, "a judge whose roundings were not recorded was cached");
    cr_expect_eq(st.stored + st.hits, 0);
    free(plain);
    free(kv);
    model_free(m);
}

/* a route-tie replay (force_experts) runs other experts than the plain run: never cached, never
 * read from the plain run's entry */
Test(judgecache, a_forced_route_run_is_never_read_from_the_plain_runs_entry)
{
    struct model *m = load_pinned();
    const size_t V = m->hp.n_vocab, L = m->hp.n_layer, K = m->hp.n_expert_used;
    char dir[600];
    check_make_dir(dir, sizeof dir, "jc8");
    struct gate_err err = {0};
    cr_assert_eq(judgecache_open(dir, BIN_A, &err), 0, "%s", err.msg);
    int32_t ids[N];
    mode_tokens(7, (uint32_t)V, N, ids);
    float *a = malloc(N * V * sizeof(float)), *b = malloc(N * V * sizeof(float));
    float *deficit = malloc(L * N * sizeof(float));
    int32_t *ex = malloc(L * N * K * sizeof(int32_t)),
            *forced = malloc(L * N * K * sizeof(int32_t));
    struct backend *be = NULL;
    cr_assert_eq(mode_open_judge(&be, m, N + 4, 1, &err), 0, "%s", err.msg);
    struct backend_taps plain = {.experts = ex};
    cr_assert_eq(mode_judge(be, ids, N, a, &plain, &err), 0, "%s", err.msg);
    for (size_t i = 0; i < L * N * K; i++) /* every set moved one expert on: still K distinct */
        forced[i] = (ex[i] + 1) % (int32_t)m->hp.n_expert;
    struct backend_taps force = {
        .experts = ex, .force_experts = forced, .force_tol = INFINITY, .force_deficit = deficit};
    cr_assert_eq(mode_judge(be, ids, N, b, &force, &err), 0, "%s", err.msg);
    backend_close(be);
    struct judgecache_stats st;
    judgecache_stats(&st);
    judgecache_close();
    cr_expect_eq(st.hits, 0, "the forced run was read from the plain run's entry");
    cr_expect_eq(st.uncacheable, 1);
    cr_expect_neq(memcmp(a, b, N * V * sizeof(float)), 0, "forcing other experts changed nothing");
    free(a);
    free(b);
    free(deficit);
    free(ex);
    free(forced);
    model_free(m);
}

/* the key holds every kept position, not only the first */
Test(judgecache, kept_rows_that_differ_after_the_first_are_another_entry)
{
    struct model *m = load_pinned();
    struct judged a, c;
    static const int pa[] = {1, 5, 8, 23}, pc[] = {1, 5, 8, 22};
    const struct mode_keep ka = {.pos = pa, .n = 4}, kc = {.pos = pc, .n = 4};
    char dir[600];
    check_make_dir(dir, sizeof dir, "jc9");
    struct gate_err err = {0};
    cr_assert_eq(judgecache_open(dir, BIN_A, &err), 0, "%s", err.msg);
    judge_kept(m, &ka, &a);
    judge_kept(m, &kc, &c);
    struct judgecache_stats st;
    judgecache_stats(&st);
    judgecache_close();
    cr_expect_eq(st.hits, 0, "rows 1,5,8,22 were read from the entry of rows 1,5,8,23");
    cr_expect_eq(st.misses, 2);
    drop(&a);
    drop(&c);
    model_free(m);
}

/* an entry file put in another key's place (copied, renamed) is refused by the key it carries */
Test(judgecache, an_entry_moved_under_another_key_is_refused)
{
    struct model *m = load_pinned();
    const size_t V = m->hp.n_vocab;
    char dir[600], sub[900], first[1200], second[1200];
    check_make_dir(dir, sizeof dir, "jc10");
    snprintf(sub, sizeof sub, "%s/%.16s", dir, BIN_A);
    struct gate_err err = {0};
    cr_assert_eq(judgecache_open(dir, BIN_A, &err), 0, "%s", err.msg);
    int32_t ids[N], other[N];
    mode_tokens(7, (uint32_t)V, N, ids);
    mode_tokens(8, (uint32_t)V, N, other);
    float *a = malloc(N * V * sizeof(float)), *b = malloc(N * V * sizeof(float));
    float *again = malloc(N * V * sizeof(float));
    judge_plain(m, ids, "", a);
    the_entry(sub, first, sizeof first);
    char moved[1300];
    snprintf(moved, sizeof moved, "%s/moved", sub); /* out of the way while `other` is stored */
    cr_assert_eq(rename(first, moved), 0);
    judge_plain(m, other, "", b);
    the_entry(sub, second, sizeof second);
    cr_assert_eq(rename(moved, second), 0); /* ids' entry now sits at other's path */
    judge_plain(m, other, "", again);
    struct judgecache_stats st;
    judgecache_stats(&st);
    judgecache_close();
    cr_expect_eq(st.corrupt, 1, "an entry under another key's name was not detected");
    cr_expect_eq(st.hits, 0, "an entry under another key's name was used");
    cr_expect_eq(memcmp(again, b, N * V * sizeof(float)), 0, "other's logits are ids' logits");
    free(a);
    free(b);
    free(again);
    model_free(m);
}

/* a model without a digest (not pinned) has nothing to key its entries by: never cached, so two
 * such models of the same shapes never share an entry */
Test(judgecache, a_model_without_a_digest_is_never_cached)
{
    struct model *m = load_pinned();
    const size_t V = m->hp.n_vocab;
    char dir[600];
    check_make_dir(dir, sizeof dir, "jc11");
    struct gate_err err = {0};
    cr_assert_eq(judgecache_open(dir, BIN_A, &err), 0, "%s", err.msg);
    int32_t ids[N];
    mode_tokens(7, (uint32_t)V, N, ids);
    float *a = malloc(N * V * sizeof(float));
    memset(m->sha256, 0, sizeof m->sha256);
    judge_plain(m, ids, "", a);
    judge_plain(m, ids, "", a);
    struct judgecache_stats st;
    judgecache_stats(&st);
    judgecache_close();
    cr_expect_eq(st.uncacheable, 2, "a run of a model without a digest was cached");
    cr_expect_eq(st.hits + st.stored, 0);
    free(a);
    model_free(m);
}

/* an attacker with write access to the cache folder (a shared ladder checkout) plants a symlink
 * where a fixed temp name ("ENTRY.PID.tmp") would be: writing the entry never follows it */
Test(judgecache, an_entry_write_never_follows_a_symlink_planted_at_a_predictable_temp_name)
{
    struct model *m = load_pinned();
    const size_t V = m->hp.n_vocab;
    char dir[600], sub[900], path[1200], tmp[1300], victim[700];
    check_make_dir(dir, sizeof dir, "jc12");
    snprintf(sub, sizeof sub, "%s/%.16s", dir, BIN_A);
    struct gate_err err = {0};
    cr_assert_eq(judgecache_open(dir, BIN_A, &err), 0, "%s", err.msg);
    int32_t ids[N];
    mode_tokens(7, (uint32_t)V, N, ids);
    float *a = malloc(N * V * sizeof(float));
    judge_plain(m, ids, "", a);
    the_entry(sub, path, sizeof path);
    cr_assert_eq(unlink(path), 0);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    FILE *f = fopen(victim, "w");
    cr_assert(f);
    fputs("precious\n", f);
    fclose(f);
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    cr_assert_eq(symlink(victim, tmp), 0);
    judge_plain(m, ids, "", a); /* a miss: the entry is written again */
    struct judgecache_stats st;
    judgecache_stats(&st);
    judgecache_close();
    cr_expect_eq(st.stored, 2);
    size_t n = 0;
    char *text = (char *)check_slurp(victim, &n);
    cr_expect(text && n == 9 && !memcmp(text, "precious\n", 9),
              "the entry was written through the planted symlink (%zu bytes)", n);
    free(text);
    struct stat ls;
    cr_expect_eq(lstat(path, &ls), 0);
    cr_expect(S_ISREG(ls.st_mode), "the entry is not a regular file");
    unlink(tmp);
    free(a);
    model_free(m);
}
