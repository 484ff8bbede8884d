/* test_synth.c — `gate model synth` and engine/synth.c.
 *
 * Round trip of every quant mix for tiny-dense and tiny-moe through the GGUF reader (metadata,
 * shapes, the llama-quantize type policy, dequantized values against the generator's F32 values
 * within each format's error); the synthesized models load and run on the reference twin with
 * finite, context-dependent logits and a router whose choices vary; F32 vs Q8_0 vs Q4_K_M agree
 * to measured cosine bounds; byte-identical output across runs and thread counts (SHA-256,
 * plus one pinned digest so a machine-dependent change shows); fast-blocks mode; bad arguments
 * rejected before anything is written; unwritable paths and a full disk leave no file.
 * Under GATE_ASAN the tiny presets are cut to one layer to keep the run short. In both builds
 * the round trips write two layers (the layer rule still mixes types across them), the
 * determinism test one layer (the 4-layer tiny-dense file is pinned), and the vocabulary test a
 * 64-wide model.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <criterion/redirect.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cmd_synth.h"
#include "engine/backend.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "engine/synth.h"
#include "engine/tokenizer.h"
#include "tests/support/check.h"

/* docs/synth.md: `gate model synth --preset tiny-dense --quant Q4_K_M --seed 1` */
#define PINNED_TINY_DENSE_Q4_K_M_SHA256                                                            \
    "91d5b06bdb37e3f7c42f37d761857b150130488e18619bd7a06e08cc4bb923d0"

static struct synth_options opts(const char *preset, int quant, uint32_t seed)
{
    struct synth_options o = {
        .spec = *synth_preset_find(preset), .quant = quant, .seed = seed, .n_threads = 2};
    if (check_asan())
        o.spec.n_layer = 1;
    return o;
}

struct mem_model {
    uint8_t *buf;
    size_t size;
    struct gguf_file *f;
};

static struct mem_model write_open(const struct synth_options *o)
{
    struct mem_model m = {0};
    struct gate_err err = {0};
    cr_assert_eq(synth_write_mem(o, &m.buf, &m.size, &err), 0, "%s", err.msg);
    cr_assert_eq(gguf_open_mem(&m.f, m.buf, m.size, "synth", 0, &err), 0, "%s", err.msg);
    return m;
}

static void mem_free(struct mem_model *m)
{
    gguf_close(m->f);
    free(m->buf);
}

static uint32_t u32_of(const struct gguf_file *f, const char *key)
{
    uint32_t v = 0;
    struct gate_err err = {0};
    cr_assert_eq(gguf_get_u32(f, key, &v, &err), 0, "%s", err.msg);
    return v;
}

static float f32_of(const struct gguf_file *f, const char *key)
{
    float v = 0;
    struct gate_err err = {0};
    cr_assert_eq(gguf_get_f32(f, key, &v, &err), 0, "%s", err.msg);
    return v;
}

static void expect_str(const struct gguf_file *f, const char *key, const char *want)
{
    char *v = NULL;
    struct gate_err err = {0};
    cr_assert_eq(gguf_get_str(f, key, &v, &err), 0, "%s", err.msg);
    cr_expect_str_eq(v, want, "%s", key);
    free(v);
}

/* Largest relative RMSE (vs the tensor's RMS) each storage type may show. */
static double type_bound(int type)
{
    switch (type) {
    case QUANT_F32:
        return 0;
    case QUANT_F16:
        return 5e-4;
    case QUANT_BF16:
        return 4e-3;
    case QUANT_Q8_0:
        return 8e-3;
    case QUANT_Q6_K:
        return 0.025;
    case QUANT_Q5_K:
        return 0.05;
    default:
        return 0.10;
    }
}

/* ---- round trip ----------------------------------------------------------------------------- */

/* The generator's F32 values of every tensor of one preset and seed, kept across the quant mixes
 * of a round trip: the values depend on the tensor's recipe (key, mean, sigma, count), never on
 * its storage type, and generating them is most of a round trip's cost. */
struct want_cache {
    int n;
    struct synth_tensor *t; /* the recipes the values were made from */
    float **v;
};

static const float *cached_values(struct want_cache *c, const struct synth_tensor *t, int i, int n)
{
    if (!c->v) {
        c->n = n;
        c->t = calloc((size_t)n, sizeof *c->t);
        c->v = calloc((size_t)n, sizeof *c->v);
        cr_assert(c->t && c->v);
    }
    cr_assert_eq(c->n, n, "the plan's tensor count changed between quant mixes");
    const struct synth_tensor *k = &c->t[i];
    if (!c->v[i] || strcmp(k->name, t->name) || k->key != t->key || k->mean != t->mean ||
        k->sigma != t->sigma || k->n_elements != t->n_elements) {
        free(c->v[i]);
        c->v[i] = malloc((size_t)t->n_elements * sizeof *c->v[i]);
        cr_assert(c->v[i]);
        synth_values(t, 0, t->n_elements, c->v[i]);
        c->t[i] = *t;
    }
    return c->v[i];
}

static void want_cache_free(struct want_cache *c)
{
    for (int i = 0; c->v && i < c->n; i++)
        free(c->v[i]);
    free(c->v);
    free(c->t);
}

static void check_file(const struct synth_options *o, const struct mem_model *m,
                       struct want_cache *cache)
{
    const struct gguf_file *f = m->f;
    const struct synth_spec *s = &o->spec;
    const char *arch = model_arch_name(s->arch);
    char key[128];
    struct gate_err err = {0};
    expect_str(f, "general.architecture", arch);
#define K(x) (snprintf(key, sizeof key, "%s.%s", arch, x), key)
    cr_expect_eq(u32_of(f, K("embedding_length")), s->n_embd);
    cr_expect_eq(u32_of(f, K("block_count")), s->n_layer);
    cr_expect_eq(u32_of(f, K("attention.head_count")), s->n_head);
    cr_expect_eq(u32_of(f, K("attention.head_count_kv")), s->n_head_kv);
    cr_expect_eq(u32_of(f, K("attention.key_length")), s->head_dim);
    cr_expect_eq(u32_of(f, K("attention.value_length")), s->head_dim);
    cr_expect_eq(u32_of(f, K("context_length")), s->n_ctx);
    cr_expect_eq(f32_of(f, K("rope.freq_base")), s->rope_base);
    cr_expect_eq(f32_of(f, K("attention.layer_norm_rms_epsilon")), s->eps);
    if (s->arch == MODEL_ARCH_QWEN3MOE) {
        cr_expect_eq(u32_of(f, K("expert_count")), s->n_expert);
        cr_expect_eq(u32_of(f, K("expert_used_count")), s->n_expert_used);
        cr_expect_eq(u32_of(f, K("expert_feed_forward_length")), s->n_ff_exp);
    } else {
        cr_expect_eq(u32_of(f, K("feed_forward_length")), s->n_ff);
    }
#undef K
    cr_expect_eq(u32_of(f, "general.file_type"), synth_file_type(o->quant));
    cr_expect_eq(u32_of(f, "general.quantization_version"), 2);
    cr_expect_eq(u32_of(f, "gate.synth.seed"), o->seed);
    int b = 0;
    cr_assert_eq(gguf_get_bool(f, "gate.synthetic", &b, &err), 0, "%s", err.msg);
    cr_expect_eq(b, 1);
    expect_str(f, "gate.synth.quant", synth_quant_name(o->quant));
    expect_str(f, "tokenizer.ggml.model", "gpt2");
    const struct gguf_kv *toks = NULL;
    cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &toks, &err), 0);
    cr_expect_eq(toks->n, s->n_vocab);

    struct synth_tensor *t = NULL;
    int n = 0;
    cr_assert_eq(synth_plan(o, &t, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(f->n_tensors, (uint64_t)n);
    float *got = NULL;
    for (int i = 0; i < n; i++) {
        const struct gguf_tensor *g = &f->tensors[i];
        cr_assert_str_eq(g->name, t[i].name);
        cr_assert_eq(g->type, t[i].type, "%s: type %s, plan %s", g->name, quant_name(g->type),
                     quant_name(t[i].type));
        cr_assert_eq(g->n_dims, t[i].n_dims, "%s", g->name);
        for (int d = 0; d < 4; d++)
            cr_assert_eq(g->ne[d], t[i].ne[d], "%s ne[%d]", g->name, d);
        const int64_t ne = t[i].n_elements;
        got = realloc(got, (size_t)ne * sizeof *got);
        cr_assert(got);
        const float *want = cached_values(cache, &t[i], i, n);
        quant_dequant_row(g->type, g->data, got, ne);
        double se = 0, ss = 0;
        for (int64_t k = 0; k < ne; k++) {
            cr_assert(isfinite(got[k]), "%s: non-finite at %lld", g->name, (long long)k);
            se += ((double)got[k] - want[k]) * ((double)got[k] - want[k]);
            ss += (double)want[k] * want[k];
        }
        const double rel = sqrt(se / ss);
        cr_expect(rel <= type_bound(g->type), "%s (%s): relative RMSE %.3g > %.3g", g->name,
                  quant_name(g->type), rel, type_bound(g->type));
    }
    /* the exact size the --list column and the space check use */
    uint64_t bytes = 0;
    cr_assert_eq(synth_file_bytes(o, -1, &bytes, NULL, &err), 0, "%s", err.msg);
    cr_expect_eq(bytes, (uint64_t)m->size, "synth_file_bytes %llu, written %zu",
                 (unsigned long long)bytes, m->size);
    free(got);
    free(t);
}

/* Two layers (one under ASan): the K mixes' layer rule then gives layer 1 the bigger type
 * (i >= 7n/8) and layer 0 the base type, so a file still mixes types across layers as the
 * 4-layer one does; the writer, reader and every format's values are the same code. */
static void roundtrip_all(const char *preset)
{
    struct want_cache cache = {0};
    for (int q = 0; q < SYNTH_QUANT_COUNT; q++) {
        struct synth_options o = opts(preset, q, 3);
        if (o.spec.n_layer > 2)
            o.spec.n_layer = 2;
        struct mem_model m = write_open(&o);
        check_file(&o, &m, &cache);
        mem_free(&m);
    }
    want_cache_free(&cache);
}

Test(synth, tiny_dense_every_quant_round_trips)
{
    roundtrip_all("tiny-dense");
}

Test(synth, tiny_moe_every_quant_round_trips)
{
    roundtrip_all("tiny-moe");
}

/* ---- quant policy --------------------------------------------------------------------------- */

static int type_of(const struct synth_tensor *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name))
            return t[i].type;
    cr_assert_fail("no tensor %s", name);
    return -1;
}

Test(synth, q4_k_m_policy_matches_llama_quantize)
{
    struct gate_err err = {0};
    struct synth_tensor *t = NULL;
    int n = 0;
    /* qwen3-0.6b: 28 layers, tied: token_embd takes the output's Q6_K */
    struct synth_options o = {.spec = *synth_preset_find("qwen3-0.6b"), .quant = SYNTH_Q4_K_M};
    cr_assert_eq(synth_plan(&o, &t, &n, &err), 0, "%s", err.msg);
    cr_expect_eq(type_of(t, n, "token_embd.weight"), QUANT_Q6_K);
    const int more[] = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27};
    for (int l = 0; l < 28; l++) {
        int m = 0;
        for (size_t k = 0; k < sizeof more / sizeof more[0]; k++)
            m |= more[k] == l;
        char nm[64];
        snprintf(nm, sizeof nm, "blk.%d.attn_v.weight", l);
        cr_expect_eq(type_of(t, n, nm), m ? QUANT_Q6_K : QUANT_Q4_K, "%s", nm);
        snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight", l);
        cr_expect_eq(type_of(t, n, nm), m ? QUANT_Q6_K : QUANT_Q4_K, "%s", nm);
        snprintf(nm, sizeof nm, "blk.%d.attn_q_norm.weight", l);
        cr_expect_eq(type_of(t, n, nm), QUANT_F32, "%s", nm);
    }
    free(t);
    /* tiny-moe: 8 experts -> attn_k, attn_v Q8_0, attn_output Q5_K; router F32; 4 layers ->
     * use_more_bits holds for layer 2 ((2 - 0) % 3 == 2) and 3 (>= 7·4/8) */
    o = (struct synth_options){.spec = *synth_preset_find("tiny-moe"), .quant = SYNTH_Q4_K_M};
    cr_assert_eq(synth_plan(&o, &t, &n, &err), 0, "%s", err.msg);
    cr_expect_eq(type_of(t, n, "output.weight"), QUANT_Q6_K);
    cr_expect_eq(type_of(t, n, "token_embd.weight"), QUANT_Q4_K);
    cr_expect_eq(type_of(t, n, "blk.0.attn_k.weight"), QUANT_Q8_0);
    cr_expect_eq(type_of(t, n, "blk.0.attn_v.weight"), QUANT_Q8_0);
    cr_expect_eq(type_of(t, n, "blk.0.attn_output.weight"), QUANT_Q5_K);
    cr_expect_eq(type_of(t, n, "blk.0.ffn_gate_inp.weight"), QUANT_F32);
    cr_expect_eq(type_of(t, n, "blk.0.ffn_down_exps.weight"), QUANT_Q4_K);
    cr_expect_eq(type_of(t, n, "blk.2.ffn_down_exps.weight"), QUANT_Q6_K); /* (2-0)%3 == 2 */
    cr_expect_eq(type_of(t, n, "blk.3.ffn_down_exps.weight"), QUANT_Q6_K);
    free(t);
    /* Q8_0: output Q8_0; Q6_K: output Q6_K, 30B (128 experts): attn_k stays the base type */
    o = (struct synth_options){.spec = *synth_preset_find("qwen3-30b-a3b"), .quant = SYNTH_Q6_K};
    cr_assert_eq(synth_plan(&o, &t, &n, &err), 0, "%s", err.msg);
    cr_expect_eq(type_of(t, n, "output.weight"), QUANT_Q6_K);
    cr_expect_eq(type_of(t, n, "blk.0.attn_k.weight"), QUANT_Q6_K);
    free(t);
    o = (struct synth_options){.spec = *synth_preset_find("qwen3-8b"), .quant = SYNTH_Q8_0};
    cr_assert_eq(synth_plan(&o, &t, &n, &err), 0, "%s", err.msg);
    cr_expect_eq(type_of(t, n, "output.weight"), QUANT_Q8_0);
    cr_expect_eq(type_of(t, n, "blk.35.ffn_down.weight"), QUANT_Q8_0);
    free(t);
}

/* ---- the forward ---------------------------------------------------------------------------- */

#define N_POS 48

static void prompt(int32_t *ids, int n, uint32_t V)
{
    uint64_t st = 77;
    for (int i = 0; i < n; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((st >> 33) % (V - 3));
    }
    ids[N_POS / 2] = ids[1]; /* a repeated token: its logits must differ by context */
}

/* Run the ref twin on N_POS positions; logits (N_POS, V) malloc'd. experts may be NULL. */
static float *run_ref(struct mem_model *mm, int32_t *experts, uint32_t *V_out)
{
    struct gate_err err = {0};
    struct gguf_file *f = NULL;
    cr_assert_eq(gguf_open_mem(&f, mm->buf, mm->size, "synth", 0, &err), 0, "%s", err.msg);
    struct model *m = NULL;
    cr_assert_eq(model_from_gguf(&m, f, &err), 0, "%s", err.msg);
    struct backend *b = NULL;
    struct backend_config cfg = {.n_threads = 2, .n_ctx = N_POS, .n_batch = N_POS};
    cr_assert_eq(backend_open(&b, "ref", m, &cfg, &err), 0, "%s", err.msg);
    const uint32_t V = m->hp.n_vocab;
    struct backend_taps taps = {.experts = experts};
    if (experts)
        backend_set_taps(b, &taps);
    int32_t ids[N_POS];
    prompt(ids, N_POS, V);
    float *logits = malloc((size_t)N_POS * V * sizeof *logits);
    cr_assert(logits);
    cr_assert_eq(backend_forward(b, ids, N_POS, 0, logits, &err), 0, "%s", err.msg);
    backend_close(b);
    model_free(m);
    *V_out = V;
    return logits;
}

static double cosine(const float *a, const float *b, uint32_t n)
{
    double d = 0, x = 0, y = 0;
    for (uint32_t i = 0; i < n; i++) {
        d += (double)a[i] * b[i];
        x += (double)a[i] * a[i];
        y += (double)b[i] * b[i];
    }
    return d / sqrt(x * y);
}

static void healthy_logits(const float *lg, uint32_t V)
{
    int distinct = 0;
    int *seen = calloc(V, sizeof *seen);
    for (int p = 0; p < N_POS; p++) {
        uint32_t am = 0;
        for (uint32_t v = 0; v < V; v++) {
            cr_assert(isfinite(lg[(size_t)p * V + v]), "non-finite logit at position %d", p);
            if (lg[(size_t)p * V + v] > lg[(size_t)p * V + am])
                am = v;
        }
        distinct += !seen[am]++;
    }
    free(seen);
    cr_expect_geq(distinct, N_POS / 3, "argmax takes only %d values over %d positions", distinct,
                  N_POS);
    /* the same token at positions 1 and N_POS/2 must see different contexts */
    const double c = cosine(lg + V, lg + (size_t)(N_POS / 2) * V, V);
    cr_expect_lt(c, 0.98, "logits of a repeated token barely change with context (cos %.4f)", c);
}

Test(synth, tiny_models_run_with_context_dependent_logits)
{
    const char *presets[] = {"tiny-dense", "tiny-moe"};
    for (int i = 0; i < 2; i++) {
        struct synth_options o = opts(presets[i], SYNTH_Q4_K_M, 1);
        struct mem_model m = write_open(&o);
        uint32_t V;
        const int k = (int)o.spec.n_expert_used;
        const int L = (int)o.spec.n_layer;
        int32_t *ex = o.spec.arch == MODEL_ARCH_QWEN3MOE ? calloc((size_t)L * N_POS * k, 4) : NULL;
        float *lg = run_ref(&m, ex, &V);
        healthy_logits(lg, V);
        if (ex) { /* every expert used in every layer; top-k sets change along the sequence */
            for (int l = 0; l < L; l++) {
                int used[512] = {0}, n_used = 0, changes = 0;
                for (int p = 0; p < N_POS; p++)
                    for (int j = 0; j < k; j++)
                        n_used += !used[ex[((size_t)l * N_POS + p) * k + j]]++;
                for (int p = 1; p < N_POS; p++)
                    changes += memcmp(ex + ((size_t)l * N_POS + p) * k,
                                      ex + ((size_t)l * N_POS + p - 1) * k, (size_t)k * 4) != 0;
                cr_expect_eq(n_used, (int)o.spec.n_expert, "layer %d uses %d experts", l, n_used);
                cr_expect_geq(changes, N_POS / 2, "layer %d: top-k changed %d times", l, changes);
            }
        }
        free(ex);
        free(lg);
        mem_free(&m);
    }
}

/* Measured (docs/synth.md), seed 1, 48 positions, 4 layers: per-position cosine vs F32
 * min / mean: dense Q8_0 0.99943 / 0.99971, Q4_K_M 0.917 / 0.961; MoE Q8_0 0.888 / 0.990,
 * Q4_K_M 0.831 / 0.950 (the MoE minima are positions where a near-tie routes to another expert;
 * llama.cpp's own conformance models show the same: 0.98 dense, 0.87 MoE at 2 layers). The
 * bounds leave a margin; the 1-layer ASan variant agrees more closely. */
Test(synth, quantized_logits_agree_with_f32)
{
    const struct {
        const char *preset;
        int quant;
        double min_cos, mean_cos;
    } cases[] = {
        {"tiny-dense", SYNTH_Q8_0, 0.999, 0.9995},
        {"tiny-dense", SYNTH_Q4_K_M, 0.88, 0.95},
        {"tiny-moe", SYNTH_Q8_0, 0.85, 0.985},
        {"tiny-moe", SYNTH_Q4_K_M, 0.78, 0.93},
    };
    float *a = NULL; /* the F32 logits of the preset before (cases are grouped by preset) */
    for (int c = 0; c < 4; c++) {
        uint32_t V;
        if (c == 0 || strcmp(cases[c].preset, cases[c - 1].preset)) {
            struct synth_options of = opts(cases[c].preset, SYNTH_F32, 1);
            struct mem_model mf = write_open(&of);
            free(a);
            a = run_ref(&mf, NULL, &V);
            mem_free(&mf);
        }
        struct synth_options oq = opts(cases[c].preset, cases[c].quant, 1);
        struct mem_model mq = write_open(&oq);
        float *b = run_ref(&mq, NULL, &V);
        double mn = 1, mean = 0;
        for (int p = 0; p < N_POS; p++) {
            double cs = cosine(a + (size_t)p * V, b + (size_t)p * V, V);
            mn = cs < mn ? cs : mn;
            mean += cs / N_POS;
        }
        cr_log_info("cosine F32 vs %s, %s: min %.6f mean %.6f", synth_quant_name(cases[c].quant),
                    cases[c].preset, mn, mean);
        cr_expect_geq(mn, cases[c].min_cos, "%s %s: min cosine %.6f < %.4f", cases[c].preset,
                      synth_quant_name(cases[c].quant), mn, cases[c].min_cos);
        cr_expect_geq(mean, cases[c].mean_cos, "%s %s: mean cosine %.6f < %.4f", cases[c].preset,
                      synth_quant_name(cases[c].quant), mean, cases[c].mean_cos);
        free(b);
        mem_free(&mq);
    }
    free(a);
}

/* ---- determinism ---------------------------------------------------------------------------- */

static void sha_hex(const uint8_t *p, size_t n, char out[65])
{
    unsigned char d[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(d, p, n);
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

/* One layer of each preset (every tensor kind and quant type of the mix, split into rows by the
 * threads as the whole model's are; the 4-layer file is pinned byte for byte below). */
static struct synth_options one_layer(const char *preset, int quant, uint32_t seed)
{
    struct synth_options o = opts(preset, quant, seed);
    o.spec.n_layer = 1;
    return o;
}

Test(synth, byte_identical_across_runs_and_thread_counts)
{
    char first[65] = "", h[65];
    const char *presets[] = {"tiny-moe", "tiny-dense"};
    for (int p = 0; p < 2; p++) {
        first[0] = 0;
        for (int threads = 1; threads <= 3; threads += 2) { /* 1 vs 3: uneven row splits */
            struct synth_options o = one_layer(presets[p], SYNTH_Q4_K_M, 42);
            o.n_threads = threads;
            uint8_t *buf = NULL;
            size_t size = 0;
            struct gate_err err = {0};
            cr_assert_eq(synth_write_mem(&o, &buf, &size, &err), 0, "%s", err.msg);
            sha_hex(buf, size, h);
            free(buf);
            if (!first[0])
                memcpy(first, h, 65);
            cr_expect_str_eq(h, first, "%s with %d threads", presets[p], threads);
        }
        if (p == 0)
            continue;
        /* and through a file (the atomic writer) */
        char path[1024];
        snprintf(path, sizeof path, "%s/det-%d.gguf", check_tmp_dir(), p);
        struct synth_options o = one_layer(presets[p], SYNTH_Q4_K_M, 42);
        struct gate_err err = {0};
        cr_assert_eq(synth_write(&o, path, NULL, NULL, &err), 0, "%s", err.msg);
        size_t size = 0;
        uint8_t *buf = check_slurp(path, &size);
        cr_assert(buf);
        sha_hex(buf, size, h);
        free(buf);
        unlink(path);
        cr_expect_str_eq(h, first, "%s written to a file", presets[p]);
    }
    /* a different seed changes the bytes */
    struct synth_options o = one_layer("tiny-dense", SYNTH_Q4_K_M, 43);
    uint8_t *buf = NULL;
    size_t size = 0;
    struct gate_err err = {0};
    cr_assert_eq(synth_write_mem(&o, &buf, &size, &err), 0, "%s", err.msg);
    sha_hex(buf, size, h);
    free(buf);
    cr_expect_str_neq(h, first);
}

/* The digest of one file, recorded when this test was written: any change to the generator,
 * the quantizers, the policy or the metadata moves it (intended changes update it and the
 * ladders that pin synthetic digests); a machine-dependent result would move it on one host. */
Test(synth, pinned_digest_of_tiny_dense_q4_k_m_seed_1)
{
    struct synth_options o = {
        .spec = *synth_preset_find("tiny-dense"), .quant = SYNTH_Q4_K_M, .seed = 1, .n_threads = 2};
    uint8_t *buf = NULL;
    size_t size = 0;
    struct gate_err err = {0};
    cr_assert_eq(synth_write_mem(&o, &buf, &size, &err), 0, "%s", err.msg);
    char h[65];
    sha_hex(buf, size, h);
    free(buf);
    cr_expect_str_eq(h, PINNED_TINY_DENSE_Q4_K_M_SHA256);
}

/* ---- fast blocks ---------------------------------------------------------------------------- */

Test(synth, fast_blocks_are_valid_deterministic_and_labelled)
{
    struct synth_options o = opts("tiny-moe", SYNTH_Q4_K_M, 5);
    o.fast_blocks = 1;
    struct mem_model m = write_open(&o);
    int fb = 0;
    struct gate_err err = {0};
    cr_assert_eq(gguf_get_bool(m.f, "gate.synth.fast_blocks", &fb, &err), 0, "%s", err.msg);
    cr_expect_eq(fb, 1);
    /* the weights have the planned RMS */
    struct synth_tensor *t = NULL;
    int n = 0;
    cr_assert_eq(synth_plan(&o, &t, &n, &err), 0);
    for (int i = 0; i < n; i++) {
        if (t[i].n_dims < 2)
            continue;
        const struct gguf_tensor *g = &m.f->tensors[i];
        float *y = malloc((size_t)t[i].n_elements * sizeof *y);
        quant_dequant_row(g->type, g->data, y, t[i].n_elements);
        double ss = 0;
        for (int64_t k = 0; k < t[i].n_elements; k++) {
            cr_assert(isfinite(y[k]));
            ss += (double)y[k] * y[k];
        }
        const double rms = sqrt(ss / (double)t[i].n_elements);
        cr_expect(rms > 0.8 * t[i].sigma && rms < 1.25 * t[i].sigma,
                  "%s (%s): RMS %.4g, planned %.4g", g->name, quant_name(g->type), rms, t[i].sigma);
        free(y);
    }
    free(t);
    uint32_t V;
    float *lg = run_ref(&m, NULL, &V);
    for (size_t k = 0; k < (size_t)N_POS * V; k++)
        cr_assert(isfinite(lg[k]));
    free(lg);
    char h1[65], h2[65];
    sha_hex(m.buf, m.size, h1);
    mem_free(&m);
    o.n_threads = 1;
    m = write_open(&o);
    sha_hex(m.buf, m.size, h2);
    mem_free(&m);
    cr_expect_str_eq(h1, h2, "fast blocks differ between 2 and 1 threads");
}

/* ---- the real Qwen3 vocabulary -------------------------------------------------------------- */

/* Not in the sanitizer build: its 151936 x 64 embedding is too slow under ASan, and the normal
 * build runs it (a test the build cannot run is not compiled there, rather than skipped). The
 * width is tiny-dense's cut to 64: the test is about the vocabulary, and every one of its
 * 151,936 rows costs generated values. */
#if !defined(__SANITIZE_ADDRESS__)
Test(synth, qwen3_vocabulary_loads_in_the_tokenizer)
{
    struct synth_options o = {.quant = SYNTH_Q8_0, .seed = 1, .n_threads = 2};
    o.spec = *synth_preset_find("tiny-dense");
    o.spec.name = "custom";
    o.spec.n_vocab = 151936;
    o.spec.n_embd = 64;
    o.spec.n_layer = 1;
    o.spec.tied = 1;
    char tk[1024];
    snprintf(tk, sizeof tk, "%s/tokenizers/qwen3/tokenizer.json.gz", check_shared_dir());
    o.tokenizer = tk;
    struct mem_model m = write_open(&o);
    struct tok *t = NULL;
    struct gate_err err = {0};
    cr_assert_eq(tok_load(&t, m.f, &err), 0, "%s", err.msg);
    cr_expect_eq(tok_n_vocab(t), 151936);
    cr_expect_eq(tok_eos(t), 151645);
    cr_expect_eq(tok_find(t, "<|im_start|>"), 151644);
    tok_free(t);
    mem_free(&m);
}
#endif

/* ---- bad arguments -------------------------------------------------------------------------- */

static void expect_invalid(struct synth_options o, const char *needle)
{
    struct gate_err err = {0};
    cr_assert_eq(synth_validate(&o, &err), ERR_INPUT, "accepted; expected '%s'", needle);
    cr_expect(strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
}

Test(synth, rejects_bad_shapes_with_clear_messages)
{
    struct synth_options base = {.spec = *synth_preset_find("tiny-moe"), .quant = SYNTH_Q4_K_M};
    struct synth_options o = base;
    o.spec.n_head_kv = 3;
    expect_invalid(o, "--heads 4 is not a multiple of --kv-heads 3");
    o = base;
    o.spec.n_embd = 320;
    expect_invalid(o, "--hidden = 320 is not a multiple of 256");
    o = base;
    o.spec.n_expert_used = 9;
    expect_invalid(o, "--experts-used 9 must be in 1..--experts (8)");
    o = base;
    o.spec.n_vocab = 100000;
    expect_invalid(o, "--vocab 100000");
    o = base;
    o.spec.head_dim = 127;
    expect_invalid(o, "--head-dim 127 must be even");
    o = base;
    o.spec.n_ff_exp = 384;
    expect_invalid(o, "--expert-ffn = 384 is not a multiple of 256");
    o = base;
    o.spec.n_embd = 320; /* fine for Q8_0 (32) and F16 */
    o.quant = SYNTH_Q8_0;
    o.spec.n_ff_exp = 320;
    o.spec.n_head = 5;
    o.spec.n_head_kv = 5;
    o.spec.head_dim = 64;
    struct gate_err err = {0};
    cr_expect_eq(synth_validate(&o, &err), 0, "%s", err.msg);
    o.spec.eps = 0;
    expect_invalid(o, "--eps");
}

static int run_cli(const char **args, int n)
{
    char *argv[32];
    for (int i = 0; i < n; i++)
        argv[i] = (char *)args[i];
    argv[n] = NULL;
    return cmd_model_synth(n, argv);
}

static void cli_case(const char **args, int n, int want_rc, const char *path)
{
    int rc = run_cli(args, n);
    cr_expect_eq(rc, want_rc, "%s %s ...: exit %d, expected %d", args[1], n > 2 ? args[2] : "", rc,
                 want_rc);
    struct stat st;
    cr_expect_neq(stat(path, &st), 0, "'%s' exists after a failed synth", path);
}

static char *stderr_text(void)
{
    static char buf[16384];
    fflush(stderr);
    FILE *f = cr_get_redirected_stderr();
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    return buf;
}

Test(synth, cli_rejects_bad_arguments_before_writing, .init = cr_redirect_stderr)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/bad.gguf", check_tmp_dir());
    const char *a1[] = {"synth", "--preset", "tiny-nope", "--quant", "Q4_K_M", "-o", path};
    cli_case(a1, (int)(sizeof a1 / sizeof a1[0]), 2, path);
    const char *a2[] = {"synth", "--arch",  "qwen3", "--hidden",   "512", "--layers",
                        "2",     "--heads", "6",     "--kv-heads", "4",   "--ffn",
                        "512",   "--quant", "F16",   "-o",         path};
    cli_case(a2, (int)(sizeof a2 / sizeof a2[0]), 2, path);
    const char *a3[] = {"synth",    "--arch",  "qwen3",   "--hidden", "320",
                        "--layers", "2",       "--heads", "5",        "--ffn",
                        "512",      "--quant", "Q4_K_M",  "-o",       path};
    cli_case(a3, (int)(sizeof a3 / sizeof a3[0]), 2, path);
    const char *a4[] = {"synth", "--preset", "tiny-moe", "--experts-used", "9", "--quant",
                        "Q8_0",  "-o",       path};
    cli_case(a4, (int)(sizeof a4 / sizeof a4[0]), 2, path);
    const char *a5[] = {"synth", "--preset", "tiny-dense", "--quant", "Q3_K", "-o", path};
    cli_case(a5, (int)(sizeof a5 / sizeof a5[0]), 2, path);
    const char *a6[] = {"synth", "--preset", "tiny-dense", "--quant", "F16"};
    cli_case(a6, (int)(sizeof a6 / sizeof a6[0]), 2, path);
    const char *a7[] = {"synth",   "--preset", "tiny-dense", "--arch", "qwen3moe",
                        "--quant", "F16",      "-o",         path};
    cli_case(a7, (int)(sizeof a7 / sizeof a7[0]), 2, path);
    const char *a8[] = {"synth",   "--preset", "tiny-dense", "--seed", "-1",
                        "--quant", "F16",      "-o",         path};
    cli_case(a8, (int)(sizeof a8 / sizeof a8[0]), 2, path);
    const char *text = stderr_text();
    const char *needles[] = {
        "unknown preset 'tiny-nope' (presets: tiny-dense, tiny-moe, tiny-odd, qwen3-0.6b",
        "--heads 6 is not a multiple of --kv-heads 4",
        "--hidden = 320 is not a multiple of 256, the block size of Q4_K (Q4_K_M mix)",
        "--experts-used 9 must be in 1..--experts (8)",
        "unknown --quant 'Q3_K'",
        "-o FILE.gguf is required",
        "--arch qwen3moe contradicts preset 'tiny-dense' (qwen3)",
        "--seed '-1' is not an integer",
    };
    for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++)
        cr_expect(strstr(text, needles[i]), "stderr lacks '%s':\n%s", needles[i], text);
}

Test(synth, cli_writes_a_loadable_file, .init = cr_redirect_stderr)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/cli.gguf", check_tmp_dir());
    const char *args[] = {"synth",    "--arch",     "qwen3",   "--hidden", "256",
                          "--layers", "1",          "--heads", "2",        "--kv-heads",
                          "1",        "--head-dim", "128",     "--ffn",    "256",
                          "--vocab",  "300",        "--quant", "Q5_K_M",   "--seed",
                          "9",        "--threads",  "2",       "-o",       path};
    cr_assert_eq(run_cli(args, (int)(sizeof args / sizeof args[0])), 0, "%s", stderr_text());
    struct model *m = NULL;
    struct gate_err err = {0};
    cr_assert_eq(model_load(&m, path, &err), 0, "%s", err.msg);
    cr_expect_eq(m->hp.n_vocab, 300);
    cr_expect_eq(m->hp.head_dim, 128);
    cr_expect_eq(m->hp.n_head_kv, 1);
    model_free(m);
    unlink(path);
    cr_expect(strstr(stderr_text(), "synth: wrote"));
}

/* ---- I/O failures --------------------------------------------------------------------------- */

static int count_leftovers(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    cr_assert(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += !strncmp(e->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

Test(synth, unwritable_path_fails_cleanly)
{
    struct synth_options o = opts("tiny-dense", SYNTH_F16, 1);
    struct gate_err err = {0};
    int rc = synth_write(&o, "/nonexistent-gate-dir/x.gguf", NULL, NULL, &err);
    cr_expect_eq(rc, ERR_ENV);
    cr_expect(strstr(err.msg, "/nonexistent-gate-dir/x.gguf"), "%s", err.msg);
}

/* A full disk, simulated with RLIMIT_FSIZE in a child process: the write fails with EFBIG
 * part-way through, and neither the final name nor a temporary file remains. */
Test(synth, full_disk_leaves_no_file)
{
    const char *dir = check_tmp_dir();
    char path[1024];
    snprintf(path, sizeof path, "%s/full.gguf", dir);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {.rlim_cur = 1 << 20, .rlim_max = 1 << 20};
        setrlimit(RLIMIT_FSIZE, &rl);
        struct synth_options o = opts("tiny-dense", SYNTH_F32, 1);
        struct gate_err err = {0};
        int rc = synth_write(&o, path, NULL, NULL, &err);
        _exit(rc == ERR_ENV && strstr(err.msg, "cannot write") ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the write did not fail with ERR_ENV 'cannot write'");
    cr_expect_eq(count_leftovers(dir, "full.gguf"), 0, "a file named full.gguf* remains");
}
