/* synth.c — synthetic model writer (see synth.h for the contract).
 *
 * Three parts: the presets and validation; the plan (tensor list, llama-quantize type policy,
 * generator scales chosen so the forward stays healthy); the generator and the streaming write.
 *
 * Generator: for tensor key K and element i, the pair p = i/2 draws uniform numbers
 * u = mix(K ^ mix(p) + j·φ) (j = 0, 1, ... until the polar method accepts) and yields two
 * Gaussians; element 2p takes the first, 2p+1 the second. mix() is the splitmix64 finalizer.
 * Logarithm and square root are evaluated with IEEE +, -, *, / and sqrt (correctly rounded),
 * never libm's log, so values are identical on every machine.
 *
 * Scales (why the forward stays healthy): every sublayer starts with an RMSNorm, so only the
 * direction of the residual stream matters. The embedding has RMS e; each of the 2L sublayers
 * adds roughly e/sqrt(L) of fresh (context-dependent) signal, so the residual RMS grows from e to
 * about e·sqrt(3) at the last layer whatever L is, and logits keep changing with context.
 * Q/K/V, gate and up projections map unit-RMS inputs to unit-RMS outputs (sigma 1/sqrt(fan-in));
 * the q/k norm weights (~1.5) give attention scores of std ~2, so attention is neither uniform
 * nor one-hot; the router's logits have std ~2 so top-k differs per token and per layer; the
 * output projection gives logits of std ~3. docs/synth.md has the measured per-layer RMS.
 */
#include "synth.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/detmath.h"
#include "pool.h"
#include "quant.h"
#include "vocab.h"

/* ---- presets -------------------------------------------------------------------------------- */

#define QWEN3_VOCAB 151936u /* the real models' padded vocabulary */

static const struct synth_spec PRESETS[] = {
    {.name = "tiny-dense",
     .arch = MODEL_ARCH_QWEN3,
     .n_vocab = 512,
     .n_ctx = 4096,
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 128,
     .n_ff = 512,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .tied = 0},
    {.name = "tiny-moe",
     .arch = MODEL_ARCH_QWEN3MOE,
     .n_vocab = 512,
     .n_ctx = 4096,
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 128,
     .n_ff = 512,
     .n_expert = 8,
     .n_expert_used = 2,
     .n_ff_exp = 256,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .tied = 0},
    /* rows that are not a multiple of 128 values: the kernels' four-block groups leave tails of
     * three blocks (E 352 = 11 Q8_0 blocks, FFN 480 = 15); Q8_0, F16, BF16, F32 only (K-quants
     * need multiples of 256) */
    {.name = "tiny-odd",
     .arch = MODEL_ARCH_QWEN3,
     .n_vocab = 512,
     .n_ctx = 4096,
     .n_embd = 352,
     .n_layer = 2,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_ff = 480,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .tied = 0},
    {.name = "qwen3-0.6b",
     .arch = MODEL_ARCH_QWEN3,
     .n_vocab = QWEN3_VOCAB,
     .n_ctx = 40960,
     .n_embd = 1024,
     .n_layer = 28,
     .n_head = 16,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_ff = 3072,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .tied = 1},
    {.name = "qwen3-4b",
     .arch = MODEL_ARCH_QWEN3,
     .n_vocab = QWEN3_VOCAB,
     .n_ctx = 40960,
     .n_embd = 2560,
     .n_layer = 36,
     .n_head = 32,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_ff = 9728,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .tied = 1},
    {.name = "qwen3-8b",
     .arch = MODEL_ARCH_QWEN3,
     .n_vocab = QWEN3_VOCAB,
     .n_ctx = 40960,
     .n_embd = 4096,
     .n_layer = 36,
     .n_head = 32,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_ff = 12288,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .tied = 0},
    {.name = "qwen3-30b-a3b",
     .arch = MODEL_ARCH_QWEN3MOE,
     .n_vocab = QWEN3_VOCAB,
     .n_ctx = 40960,
     .n_embd = 2048,
     .n_layer = 48,
     .n_head = 32,
     .n_head_kv = 4,
     .head_dim = 128,
     .n_ff = 6144,
     .n_expert = 128,
     .n_expert_used = 8,
     .n_ff_exp = 768,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .tied = 0},
    /* tiny shapes past every tile of the cpu engine's kernels, each by a remainder: one-token
     * products cut into 512-row tiles per thread grain (gate + up 2 x 2304 rows: 576 per grain
     * at 2 threads, 1152 at one), 64-row and 4-row tiles with tails (vocabulary 2543, the
     * largest synthetic one), GQA 8:1 with head_dim 64 (q dim 512, KV dim 64); the MoE one has
     * 16 experts top-4 of 768 rows (three 256-row chunks per expert) */
    {.name = "tiny-wide",
     .arch = MODEL_ARCH_QWEN3,
     .n_vocab = 2543,
     .n_ctx = 4096,
     .n_embd = 256,
     .n_layer = 2,
     .n_head = 8,
     .n_head_kv = 1,
     .head_dim = 64,
     .n_ff = 2304,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .tied = 0},
    {.name = "tiny-moe-wide",
     .arch = MODEL_ARCH_QWEN3MOE,
     .n_vocab = 2543,
     .n_ctx = 4096,
     .n_embd = 256,
     .n_layer = 2,
     .n_head = 8,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_ff = 3072,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 768,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .tied = 0},
    /* qwen3-30b-a3b's counts at a tiny width (hidden 256, 2 layers, expert ffn 256): the
     * 151,936-token vocabulary (token ids past 16 bits, the real tokenizer), its 32 query and 4
     * KV heads of 128 (q dim 4096, 16x the hidden size), 128 experts top-8 (expert ids past 64;
     * a token's eight experts fill the cpu engine's one-token MoE region, CPU_MULTI_MAX; a CUDA
     * routing lane owns four experts) */
    {.name = "tiny-a3b",
     .arch = MODEL_ARCH_QWEN3MOE,
     .n_vocab = QWEN3_VOCAB,
     .n_ctx = 4096,
     .n_embd = 256,
     .n_layer = 2,
     .n_head = 32,
     .n_head_kv = 4,
     .head_dim = 128,
     .n_ff = 512,
     .n_expert = 128,
     .n_expert_used = 8,
     .n_ff_exp = 256,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .tied = 0},
};

const struct synth_spec *synth_presets(int *n)
{
    *n = (int)(sizeof PRESETS / sizeof PRESETS[0]);
    return PRESETS;
}

const struct synth_spec *synth_preset_find(const char *name)
{
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++)
        if (!strcmp(PRESETS[i].name, name))
            return &PRESETS[i];
    return NULL;
}

static const struct {
    const char *name;
    uint32_t ftype;
    int base; /* base ggml type of the 2-D weights */
} QUANTS[SYNTH_QUANT_COUNT] = {
    [SYNTH_F32] = {"F32", 0, QUANT_F32},         [SYNTH_F16] = {"F16", 1, QUANT_F16},
    [SYNTH_BF16] = {"BF16", 32, QUANT_BF16},     [SYNTH_Q8_0] = {"Q8_0", 7, QUANT_Q8_0},
    [SYNTH_Q4_K_M] = {"Q4_K_M", 15, QUANT_Q4_K}, [SYNTH_Q5_K_M] = {"Q5_K_M", 17, QUANT_Q5_K},
    [SYNTH_Q6_K] = {"Q6_K", 18, QUANT_Q6_K},
};

int synth_quant_from_name(const char *name)
{
    for (int i = 0; i < SYNTH_QUANT_COUNT; i++)
        if (!strcasecmp(QUANTS[i].name, name))
            return i;
    return -1;
}

const char *synth_quant_name(int q)
{
    return q >= 0 && q < SYNTH_QUANT_COUNT ? QUANTS[q].name : "?";
}

uint32_t synth_file_type(int q)
{
    return q >= 0 && q < SYNTH_QUANT_COUNT ? QUANTS[q].ftype : 0;
}

const char *synth_default_tokenizer(void)
{
    static char path[4096];
    const char *shared = getenv("GATE_SHARED");
    if (shared && *shared)
        snprintf(path, sizeof path, "%s/tokenizers/qwen3/tokenizer.json.gz", shared);
    else
        snprintf(path, sizeof path, "%s/../shared/tokenizers/qwen3/tokenizer.json.gz",
                 GATE_SOURCE_DIR);
    return path;
}

/* Byte-level synthetic vocabularies that vocab_add_byte_level() can build, and the smallest
 * padded size of the real Qwen3 vocabulary (151643 BPE tokens + 26 added). */
#define BYTE_VOCAB_MIN 259u
#define BYTE_VOCAB_MAX 2543u
#define QWEN3_VOCAB_IDS 151669u

int synth_validate(const struct synth_options *o, struct gate_err *err)
{
    const struct synth_spec *s = &o->spec;
    if (o->quant < 0 || o->quant >= SYNTH_QUANT_COUNT)
        return err_set(err, ERR_INPUT, "--quant: unknown quant mix %d", o->quant);
    if (s->arch != MODEL_ARCH_QWEN3 && s->arch != MODEL_ARCH_QWEN3MOE)
        return err_set(err, ERR_INPUT, "--arch: must be qwen3 or qwen3moe");
    if (!s->n_vocab || !s->n_ctx || !s->n_embd || !s->n_layer || !s->n_head || !s->n_head_kv ||
        !s->head_dim)
        return err_set(err, ERR_INPUT,
                       "--vocab, --ctx, --hidden, --layers, --heads, --kv-heads"
                       " and --head-dim must all be > 0 (got %" PRIu32 ", %" PRIu32 ", %" PRIu32
                       ", %" PRIu32 ", %" PRIu32 ", %" PRIu32 ", %" PRIu32 ")",
                       s->n_vocab, s->n_ctx, s->n_embd, s->n_layer, s->n_head, s->n_head_kv,
                       s->head_dim);
    if (s->n_embd > 65536 || s->n_layer > 1024 || s->n_head > 1024 || s->head_dim > 1024 ||
        s->n_ff > (1u << 20) || s->n_ff_exp > (1u << 20))
        return err_set(err, ERR_INPUT,
                       "a dimension is implausibly large (hidden %" PRIu32 ", layers %" PRIu32
                       ", heads %" PRIu32 ", head_dim %" PRIu32 ", ffn %" PRIu32
                       ", expert ffn %" PRIu32 ")",
                       s->n_embd, s->n_layer, s->n_head, s->head_dim, s->n_ff, s->n_ff_exp);
    if (s->n_head % s->n_head_kv)
        return err_set(err, ERR_INPUT,
                       "--heads %" PRIu32 " is not a multiple of --kv-heads %" PRIu32
                       " (query heads share kv heads in equal groups)",
                       s->n_head, s->n_head_kv);
    if (s->head_dim % 2)
        return err_set(err, ERR_INPUT, "--head-dim %" PRIu32 " must be even (RoPE rotates pairs)",
                       s->head_dim);
    if (!(s->eps > 0.0f && s->eps < 1.0f))
        return err_set(err, ERR_INPUT, "--eps %g must be in (0, 1)", (double)s->eps);
    if (!(s->rope_base > 1.0f) || isinf(s->rope_base))
        return err_set(err, ERR_INPUT, "--rope-base %g must be > 1", (double)s->rope_base);
    if (!(s->n_vocab >= BYTE_VOCAB_MIN && s->n_vocab <= BYTE_VOCAB_MAX) &&
        !(s->n_vocab >= QWEN3_VOCAB_IDS && s->n_vocab <= 1000000))
        return err_set(err, ERR_INPUT,
                       "--vocab %" PRIu32 ": gate provides a synthetic"
                       " byte-level vocabulary of %u..%u tokens, or the Qwen3 vocabulary (%u ids)"
                       " padded to any size >= %u (the real models use %u)",
                       s->n_vocab, BYTE_VOCAB_MIN, BYTE_VOCAB_MAX, QWEN3_VOCAB_IDS, QWEN3_VOCAB_IDS,
                       QWEN3_VOCAB);
    if (s->arch == MODEL_ARCH_QWEN3) {
        if (!s->n_ff)
            return err_set(err, ERR_INPUT, "--ffn must be > 0 for qwen3");
        if (s->n_expert || s->n_expert_used || s->n_ff_exp)
            return err_set(err, ERR_INPUT,
                           "--experts, --experts-used and --expert-ffn apply to"
                           " qwen3moe only");
    } else {
        if (!s->n_expert || s->n_expert > 512)
            return err_set(err, ERR_INPUT, "--experts %" PRIu32 " must be in 1..512", s->n_expert);
        if (!s->n_expert_used || s->n_expert_used > s->n_expert)
            return err_set(err, ERR_INPUT,
                           "--experts-used %" PRIu32 " must be in 1..--experts"
                           " (%" PRIu32 ")",
                           s->n_expert_used, s->n_expert);
        if (!s->n_ff_exp)
            return err_set(err, ERR_INPUT, "--expert-ffn must be > 0 for qwen3moe");
    }
    /* Every quantized tensor's rows run along one of these lengths (FACTS.md §3). */
    const int64_t blk = quant_block_size(QUANTS[o->quant].base);
    const struct {
        const char *what;
        uint64_t v;
    } rows[] = {
        {"--hidden", s->n_embd},
        {"--heads x --head-dim", (uint64_t)s->n_head * s->head_dim},
        {s->arch == MODEL_ARCH_QWEN3 ? "--ffn" : "--expert-ffn",
         s->arch == MODEL_ARCH_QWEN3 ? s->n_ff : s->n_ff_exp},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].v % (uint64_t)blk)
            return err_set(err, ERR_INPUT,
                           "%s = %" PRIu64 " is not a multiple of %" PRId64
                           ", the block size of %s (%s mix): rows of a quantized tensor are"
                           " whole blocks",
                           rows[i].what, rows[i].v, blk, quant_name(QUANTS[o->quant].base),
                           QUANTS[o->quant].name);
    return 0;
}

/* ---- plan ----------------------------------------------------------------------------------- */

enum kind {
    K_EMBD,
    K_OUTPUT,
    K_NORM,
    K_QK_NORM,
    K_ATTN_Q,
    K_ATTN_K,
    K_ATTN_V,
    K_ATTN_OUT,
    K_FFN_GATE_UP,
    K_FFN_DOWN,
    K_ROUTER,
    K_EXP_GATE_UP,
    K_EXP_DOWN,
};

/* The std of the logits for a generic hidden state (the output matrix's gain). With V
 * independent Gaussian logits of std g the softmax's entropy is about ln V - g^2/2 while g is
 * below sqrt(2 ln V), and spreads over a few tokens above it (docs/synth.md, "Next-token
 * distributions", has the simulation). The synthetic byte-level vocabularies (<= 2543 tokens;
 * the tiny presets, whose digests are pinned) keep g = 3: at V 512 median entropy 3.2 nats,
 * top-1 0.06-0.94. The real vocabulary takes g = 6: at V 151936 median entropy 2.4 nats, top-1
 * 0.12-0.99 (g = 3 there gives 7.6 nats and top-1 0.05: a flat, unlike any language model). */
static double logit_gain(uint32_t n_vocab)
{
    return n_vocab <= BYTE_VOCAB_MAX ? 3.0 : 6.0;
}

/* llama-quantize's use_more_bits (FACTS.md §8). */
static int more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The type policy: what llama-quantize (src/llama-quant.cpp, llama_tensor_get_type) picks for a
 * Qwen3 tensor under this mix; for F32/F16/BF16, what convert_hf_to_gguf.py writes. */
static int pick_type(const struct synth_options *o, enum kind k, int layer)
{
    const struct synth_spec *s = &o->spec;
    const int q = o->quant, base = QUANTS[q].base;
    if (k == K_NORM || k == K_QK_NORM || k == K_ROUTER) /* 1-D, and the router stays F32 */
        return QUANT_F32;
    if (q == SYNTH_F32 || q == SYNTH_F16 || q == SYNTH_BF16)
        return base;
    const int km = q == SYNTH_Q4_K_M || q == SYNTH_Q5_K_M;
    const int n = (int)s->n_layer;
    const int eight = s->arch == MODEL_ARCH_QWEN3MOE && s->n_expert == 8;
    switch (k) {
    case K_OUTPUT:
        return base == QUANT_Q8_0 ? QUANT_Q8_0 : QUANT_Q6_K;
    case K_EMBD: /* tied: quantized as the output matrix */
        return s->tied ? (base == QUANT_Q8_0 ? QUANT_Q8_0 : QUANT_Q6_K) : base;
    case K_ATTN_V:
        if (eight)
            return QUANT_Q8_0;
        return km && more_bits(layer, n) ? QUANT_Q6_K : base;
    case K_ATTN_K:
        return eight ? QUANT_Q8_0 : base;
    case K_ATTN_OUT:
        return eight && q == SYNTH_Q4_K_M ? QUANT_Q5_K : base;
    case K_FFN_DOWN:
    case K_EXP_DOWN:
        return km && more_bits(layer, n) ? QUANT_Q6_K : base;
    default:
        return base;
    }
}

static uint64_t mix(uint64_t z)
{
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ull;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define PHI 0x9e3779b97f4a7c15ull

uint64_t synth_tensor_key(uint32_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the name */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return mix(mix((uint64_t)seed + PHI) ^ h);
}

struct plan_ctx {
    const struct synth_options *o;
    struct synth_tensor *t;
    int n;
};

static void plan_add(struct plan_ctx *c, const char *name, enum kind k, int layer, uint32_t n_dims,
                     int64_t ne0, int64_t ne1, int64_t ne2, double mean, double sigma)
{
    struct synth_tensor *t = &c->t[c->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = pick_type(c->o, k, layer);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = n_dims > 1 ? ne1 : 1;
    t->ne[2] = n_dims > 2 ? ne2 : 1;
    t->ne[3] = 1;
    t->n_elements = t->ne[0] * t->ne[1] * t->ne[2];
    t->nbytes = quant_row_bytes(t->type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2]);
    t->mean = mean;
    t->sigma = sigma;
    t->key = synth_tensor_key(c->o->seed, t->name);
}

int synth_plan(const struct synth_options *o, struct synth_tensor **out, int *n,
               struct gate_err *err)
{
    int rc = synth_validate(o, err);
    if (rc)
        return rc;
    const struct synth_spec *s = &o->spec;
    const int per_layer = s->arch == MODEL_ARCH_QWEN3 ? 11 : 12;
    struct plan_ctx c = {.o = o,
                         .t = calloc((size_t)(3 + per_layer * (int)s->n_layer), sizeof *c.t)};
    if (!c.t)
        return err_set(err, ERR_ENV, "out of memory for the tensor plan");
    const double E = s->n_embd, L = s->n_layer, QD = (double)s->n_head * s->head_dim;
    const double KD = (double)s->n_head_kv * s->head_dim;
    const double out_gain = logit_gain(s->n_vocab), router_gain = 2.0, qk_norm = 1.5;
    const double spread = 0.1;
    /* The embedding RMS: 1 untied; tied, small enough that the same matrix as the output gives
     * logits of std ~out_gain. Only ratios matter after the RMSNorms. */
    const double e = s->tied ? out_gain / sqrt(E) : 1.0;
    /* RMS each sublayer adds to the residual: e/sqrt(L), so 2L sublayers add ~e*sqrt(2). Tied,
     * sqrt(E/2) times that: the sublayers add ~e*sqrt(E) in all, so the input token's own
     * embedding is ~1/sqrt(E) of the last hidden state and its own logit sits about one logit
     * std above the rest, not sqrt(E) stds (the degenerate "repeat the input" model). */
    const double res = (s->tied ? sqrt(E / 2) : 1.0) * e / sqrt(L);
    const double silu_rms = 0.6; /* RMS of silu(g)·u for g, u ~ N(0, 1) */
    const double attn_rms = 0.5; /* RMS of an attention-weighted mean of v */
    plan_add(&c, "token_embd.weight", K_EMBD, -1, 2, s->n_embd, s->n_vocab, 1, 0, e);
    plan_add(&c, "output_norm.weight", K_NORM, -1, 1, s->n_embd, 1, 1, 1.0, spread);
    if (!s->tied)
        plan_add(&c, "output.weight", K_OUTPUT, -1, 2, s->n_embd, s->n_vocab, 1, 0,
                 out_gain / sqrt(E));
    for (uint32_t il = 0; il < s->n_layer; il++) {
        char nm[GGUF_MAX_NAME];
        const int l = (int)il;
#define BLK(suffix) (snprintf(nm, sizeof nm, "blk.%" PRIu32 ".%s", il, suffix), nm)
        plan_add(&c, BLK("attn_norm.weight"), K_NORM, l, 1, s->n_embd, 1, 1, 1.0, spread);
        plan_add(&c, BLK("attn_q.weight"), K_ATTN_Q, l, 2, s->n_embd, (int64_t)QD, 1, 0,
                 1 / sqrt(E));
        plan_add(&c, BLK("attn_k.weight"), K_ATTN_K, l, 2, s->n_embd, (int64_t)KD, 1, 0,
                 1 / sqrt(E));
        plan_add(&c, BLK("attn_v.weight"), K_ATTN_V, l, 2, s->n_embd, (int64_t)KD, 1, 0,
                 1 / sqrt(E));
        plan_add(&c, BLK("attn_output.weight"), K_ATTN_OUT, l, 2, (int64_t)QD, s->n_embd, 1, 0,
                 res / (attn_rms * sqrt(QD)));
        plan_add(&c, BLK("attn_q_norm.weight"), K_QK_NORM, l, 1, s->head_dim, 1, 1, qk_norm,
                 spread);
        plan_add(&c, BLK("attn_k_norm.weight"), K_QK_NORM, l, 1, s->head_dim, 1, 1, qk_norm,
                 spread);
        plan_add(&c, BLK("ffn_norm.weight"), K_NORM, l, 1, s->n_embd, 1, 1, 1.0, spread);
        if (s->arch == MODEL_ARCH_QWEN3) {
            plan_add(&c, BLK("ffn_gate.weight"), K_FFN_GATE_UP, l, 2, s->n_embd, s->n_ff, 1, 0,
                     1 / sqrt(E));
            plan_add(&c, BLK("ffn_up.weight"), K_FFN_GATE_UP, l, 2, s->n_embd, s->n_ff, 1, 0,
                     1 / sqrt(E));
            plan_add(&c, BLK("ffn_down.weight"), K_FFN_DOWN, l, 2, s->n_ff, s->n_embd, 1, 0,
                     res / (silu_rms * sqrt((double)s->n_ff)));
        } else {
            /* the top-k mixture of independent experts has a smaller RMS than one expert */
            const double mix_rms = sqrt(1.0 / s->n_expert_used) * 0.5 + 0.5;
            plan_add(&c, BLK("ffn_gate_inp.weight"), K_ROUTER, l, 2, s->n_embd, s->n_expert, 1, 0,
                     router_gain / sqrt(E));
            plan_add(&c, BLK("ffn_gate_exps.weight"), K_EXP_GATE_UP, l, 3, s->n_embd, s->n_ff_exp,
                     s->n_expert, 0, 1 / sqrt(E));
            plan_add(&c, BLK("ffn_up_exps.weight"), K_EXP_GATE_UP, l, 3, s->n_embd, s->n_ff_exp,
                     s->n_expert, 0, 1 / sqrt(E));
            plan_add(&c, BLK("ffn_down_exps.weight"), K_EXP_DOWN, l, 3, s->n_ff_exp, s->n_embd,
                     s->n_expert, 0, res / (mix_rms * silu_rms * sqrt((double)s->n_ff_exp)));
        }
#undef BLK
    }
    *out = c.t;
    *n = c.n;
    return 0;
}

/* ---- generator ------------------------------------------------------------------------------ */

static double unit(uint64_t h) /* [0, 1) with 53 bits */
{
    return (double)(h >> 11) * 0x1p-53;
}

/* The Gaussian pair p of key: polar (Marsaglia) method, up to 32 tries (failure odds 1e-21). */
static void gauss_pair(uint64_t key, int64_t p, double *z0, double *z1)
{
    const uint64_t base = key ^ mix((uint64_t)p);
    for (uint64_t j = 0; j < 32; j++) {
        const double u = 2.0 * unit(mix(base + (2 * j + 1) * PHI)) - 1.0;
        const double v = 2.0 * unit(mix(base + (2 * j + 2) * PHI)) - 1.0;
        const double s = u * u + v * v;
        if (s > 0.0 && s < 1.0) {
            const double f = sqrt(-2.0 * det_log(s) / s);
            *z0 = u * f;
            *z1 = v * f;
            return;
        }
    }
    *z0 = *z1 = 0.0;
}

void synth_gaussian(uint64_t key, int64_t begin, int64_t n, float *out)
{
    int64_t i = begin, end = begin + n;
    while (i < end) {
        double z[2];
        gauss_pair(key, i >> 1, &z[0], &z[1]);
        for (int k = (int)(i & 1); k < 2 && i < end; k++, i++)
            out[i - begin] = (float)z[k];
    }
}

void synth_values(const struct synth_tensor *t, int64_t begin, int64_t n, float *out)
{
    int64_t i = begin, end = begin + n;
    while (i < end) {
        double z[2];
        gauss_pair(t->key, i >> 1, &z[0], &z[1]);
        for (int k = (int)(i & 1); k < 2 && i < end; k++, i++)
            out[i - begin] = (float)(t->mean + t->sigma * z[k]);
    }
}

/* ---- fast blocks ---------------------------------------------------------------------------
 * Random but valid blocks with the tensor's RMS: codes uniform, sub-block scales uniform in
 * 32..63 (Q6_K: signed 8-bit scales in 32..63), super-block scale d set from sigma and the
 * RMS of code × scale; Q4_K/Q5_K mins equal their scales with dmin = d × mid-code so the
 * values are centred. Float types: uniform values with std sigma. Block b uses words
 * mix(key ^ mix(b) + j·φ). */

static uint64_t word(uint64_t base, uint64_t j)
{
    return mix(base + (j + 1) * PHI);
}

static void fast_block(const struct synth_tensor *t, int64_t b, uint8_t *dst)
{
    const uint64_t base = t->key ^ mix((uint64_t)b ^ 0x5bd1e995ull);
    const double sigma = t->sigma;
    uint64_t w;
    switch (t->type) {
    case QUANT_Q8_0: {
        struct block_q8_0 *y = (struct block_q8_0 *)dst;
        y->d = quant_f32_to_fp16((float)(sigma / 73.9)) /* RMS of uniform int8 */;
        for (int j = 0; j < 4; j++) {
            w = word(base, (uint64_t)j);
            memcpy(y->qs + 8 * j, &w, 8);
        }
        return;
    }
    case QUANT_Q4_K:
    case QUANT_Q5_K: {
        const int five = t->type == QUANT_Q5_K;
        uint8_t *scales =
            five ? ((struct block_q5_K *)dst)->scales : ((struct block_q4_K *)dst)->scales;
        uint8_t *qs = five ? ((struct block_q5_K *)dst)->qs : ((struct block_q4_K *)dst)->qs;
        const double d = sigma / (five ? 446.8 : 223.1);
        const uint16_t hd = quant_f32_to_fp16((float)d);
        const uint16_t hm = quant_f32_to_fp16((float)(d * (five ? 15.5 : 7.5)));
        if (five) {
            ((struct block_q5_K *)dst)->d = hd;
            ((struct block_q5_K *)dst)->dmin = hm;
        } else {
            ((struct block_q4_K *)dst)->d = hd;
            ((struct block_q4_K *)dst)->dmin = hm;
        }
        memset(scales, 0, K_SCALE_SIZE);
        w = word(base, 0);
        for (int j = 0; j < 8; j++) {
            const uint8_t sc = (uint8_t)(32 + ((w >> (5 * j)) & 31));
            quant_put_scale_min_k4(j, sc, sc, scales);
        }
        for (int j = 0; j < 16; j++) {
            w = word(base, (uint64_t)(1 + j));
            memcpy(qs + 8 * j, &w, 8);
        }
        if (five)
            for (int j = 0; j < 4; j++) {
                w = word(base, (uint64_t)(17 + j));
                memcpy(((struct block_q5_K *)dst)->qh + 8 * j, &w, 8);
            }
        return;
    }
    case QUANT_Q6_K: {
        struct block_q6_K *y = (struct block_q6_K *)dst;
        for (int j = 0; j < 16; j++) {
            w = word(base, (uint64_t)j);
            memcpy(y->ql + 8 * j, &w, 8);
        }
        for (int j = 0; j < 8; j++) {
            w = word(base, (uint64_t)(16 + j));
            memcpy(y->qh + 8 * j, &w, 8);
        }
        w = word(base, 24);
        for (int j = 0; j < 16; j++)
            y->scales[j] = (int8_t)(32 + ((w >> (4 * j)) & 15) * 2 + (int)((w >> (j + 48)) & 1));
        y->d = quant_f32_to_fp16((float)(sigma / 894.3)) /* RMS(sc)·RMS(q−32) */;
        return;
    }
    default: { /* F32 / F16 / BF16: one block = one element */
        const float v =
            (float)(t->mean + sigma * 1.7320508075688772 * (2.0 * unit(word(base, 0)) - 1.0));
        if (t->type == QUANT_F32)
            memcpy(dst, &v, 4);
        else {
            const uint16_t h = t->type == QUANT_F16 ? quant_f32_to_fp16(v) : quant_f32_to_bf16(v);
            memcpy(dst, &h, 2);
        }
        return;
    }
    }
}

/* ---- writing -------------------------------------------------------------------------------- */

static int add_vocab(struct gguf_writer *w, const struct synth_options *o, struct gate_err *err)
{
    const uint32_t V = o->spec.n_vocab;
    if (V <= BYTE_VOCAB_MAX)
        return vocab_add_byte_level(w, V, err);
    return vocab_import_hf(w, o->tokenizer ? o->tokenizer : synth_default_tokenizer(), V, err);
}

/* The reproducing command line, recorded in the file. */
static void describe(const struct synth_options *o, char *buf, size_t n)
{
    const struct synth_spec *s = &o->spec;
    int k = snprintf(buf, n,
                     "--arch %s --vocab %" PRIu32 " --ctx %" PRIu32 " --hidden %" PRIu32
                     " --layers %" PRIu32 " --heads %" PRIu32 " --kv-heads %" PRIu32
                     " --head-dim %" PRIu32 " --ffn %" PRIu32,
                     model_arch_name(s->arch), s->n_vocab, s->n_ctx, s->n_embd, s->n_layer,
                     s->n_head, s->n_head_kv, s->head_dim, s->n_ff);
    if (s->arch == MODEL_ARCH_QWEN3MOE && k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k,
                      " --experts %" PRIu32 " --experts-used %" PRIu32 " --expert-ffn %" PRIu32,
                      s->n_expert, s->n_expert_used, s->n_ff_exp);
    if (k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k,
                 " --rope-base %.9g --eps %.9g%s --quant %s --seed %" PRIu32 "%s",
                 (double)s->rope_base, (double)s->eps, s->tied ? " --tied" : "",
                 QUANTS[o->quant].name, o->seed, o->fast_blocks ? " --fast-blocks" : "");
}

/* Everything but the tokenizer keys, in llama.cpp's key names and exact types (FACTS.md §2). */
static int add_metadata(struct gguf_writer *w, const struct synth_options *o)
{
    const struct synth_spec *s = &o->spec;
    const char *a = model_arch_name(s->arch);
    char key[128], name[128], args[1024];
    int rc = 0;
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    snprintf(name, sizeof name, "gate-synth-%s", s->name);
    describe(o, args, sizeof args);
    rc |= gguf_writer_add_str(w, "general.architecture", a);
    rc |= gguf_writer_add_str(w, "general.name", name);
    rc |= gguf_writer_add_u32(w, KEY("context_length"), s->n_ctx);
    rc |= gguf_writer_add_u32(w, KEY("embedding_length"), s->n_embd);
    rc |= gguf_writer_add_u32(w, KEY("block_count"), s->n_layer);
    rc |= gguf_writer_add_u32(w, KEY("feed_forward_length"), s->n_ff);
    rc |= gguf_writer_add_u32(w, KEY("attention.head_count"), s->n_head);
    rc |= gguf_writer_add_u32(w, KEY("attention.head_count_kv"), s->n_head_kv);
    rc |= gguf_writer_add_u32(w, KEY("attention.key_length"), s->head_dim);
    rc |= gguf_writer_add_u32(w, KEY("attention.value_length"), s->head_dim);
    rc |= gguf_writer_add_f32(w, KEY("rope.freq_base"), s->rope_base);
    rc |= gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), s->eps);
    if (s->arch == MODEL_ARCH_QWEN3MOE) {
        rc |= gguf_writer_add_u32(w, KEY("expert_count"), s->n_expert);
        rc |= gguf_writer_add_u32(w, KEY("expert_used_count"), s->n_expert_used);
        rc |= gguf_writer_add_u32(w, KEY("expert_feed_forward_length"), s->n_ff_exp);
    }
#undef KEY
    rc |= gguf_writer_add_u32(w, "general.quantization_version", 2);
    rc |= gguf_writer_add_u32(w, "general.file_type", QUANTS[o->quant].ftype);
    rc |= gguf_writer_add_bool(w, "gate.synthetic", 1);
    rc |= gguf_writer_add_str(w, "gate.synth.generator",
                              "gate-synth/1: splitmix64 counter RNG keyed by (seed, tensor name,"
                              " element), polar Gaussian, IEEE-only math");
    rc |= gguf_writer_add_str(w, "gate.synth.preset", s->name);
    rc |= gguf_writer_add_u32(w, "gate.synth.seed", o->seed);
    rc |= gguf_writer_add_str(w, "gate.synth.quant", QUANTS[o->quant].name);
    rc |= gguf_writer_add_bool(w, "gate.synth.fast_blocks", o->fast_blocks);
    rc |= gguf_writer_add_str(w, "gate.synth.weights",
                              o->fast_blocks ? "random valid blocks (throughput only)"
                                             : "Gaussian, quantized by gate");
    rc |= gguf_writer_add_str(w, "gate.synth.args", args);
    return rc ? ERR_ENV : 0;
}

struct fill_ctx {
    const struct synth_options *o;
    struct synth_tensor *t;
    int n;
    struct pool *pool;
    float *scratch; /* n_threads rows of max_row floats */
    int64_t max_row;
    uint64_t done, total;
    synth_progress_fn progress;
    void *progress_ctx;
    /* current job */
    const struct synth_tensor *cur;
    uint8_t *buf;
};

static void fill_rows(void *arg, int64_t begin, int64_t end, int thread)
{
    struct fill_ctx *c = arg;
    const struct synth_tensor *t = c->cur;
    const size_t row_bytes = quant_row_bytes(t->type, t->ne[0]);
    float *x = c->scratch + (size_t)thread * (size_t)c->max_row;
    for (int64_t r = begin; r < end; r++) {
        synth_values(t, r * t->ne[0], t->ne[0], x);
        quant_quantize_row(t->type, x, c->buf + (size_t)r * row_bytes, t->ne[0]);
    }
}

static void fill_fast(void *arg, int64_t begin, int64_t end, int thread)
{
    struct fill_ctx *c = arg;
    const struct synth_tensor *t = c->cur;
    const size_t bs = (size_t)quant_type_size(t->type);
    (void)thread;
    for (int64_t b = begin; b < end; b++)
        fast_block(t, b, c->buf + (size_t)b * bs);
}

static int fill(void *arg, int index, void *buf, size_t nbytes, struct gate_err *err)
{
    struct fill_ctx *c = arg;
    const struct synth_tensor *t = &c->t[index];
    if (nbytes != t->nbytes)
        return err_set(err, ERR_RUNTIME,
                       "tensor '%s': writer asked for %zu bytes, plan has %" PRIu64, t->name,
                       nbytes, t->nbytes);
    c->cur = t;
    c->buf = buf;
    /* norms and the router are tiny and shape the forward: always the real generator */
    const int fast = c->o->fast_blocks && t->n_dims > 1 && !strstr(t->name, "ffn_gate_inp");
    if (fast)
        pool_run(c->pool, t->n_elements / quant_block_size(t->type), fill_fast, c);
    else
        pool_run(c->pool, t->ne[1] * t->ne[2], fill_rows, c);
    c->done += t->nbytes;
    if (c->progress)
        c->progress(c->progress_ctx, c->done, c->total, index, c->n, t->name);
    return 0;
}

/* Build the writer: metadata (vocab when with_vocab), tensor infos, fill callback. */
static int build(const struct synth_options *o, int with_vocab, struct gguf_writer **wout,
                 struct fill_ctx *c, struct gate_err *err)
{
    int rc = synth_plan(o, &c->t, &c->n, err);
    struct gguf_writer *w = NULL;
    if (rc)
        goto out;
    if (!(w = gguf_writer_new())) {
        rc = err_set(err, ERR_ENV, "synth: out of memory for the GGUF writer");
        goto out;
    }
    if ((rc = add_metadata(w, o))) {
        rc = err_set(err, ERR_ENV, "out of memory building metadata");
        goto out;
    }
    if (with_vocab && (rc = add_vocab(w, o, err)))
        goto out;
    c->o = o;
    c->total = 0;
    c->max_row = 0;
    for (int i = 0; i < c->n; i++) {
        const struct synth_tensor *t = &c->t[i];
        if ((rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, NULL))) {
            rc = err_set(err, ERR_INPUT, "tensor '%s' cannot be added (type %s, ne[0] %" PRId64 ")",
                         t->name, quant_name(t->type), t->ne[0]);
            goto out;
        }
        c->total += t->nbytes;
        c->max_row = t->ne[0] > c->max_row ? t->ne[0] : c->max_row;
    }
    gguf_writer_set_fill(w, fill, c);
out:
    if (rc) {
        gguf_writer_free(w);
        w = NULL;
    }
    *wout = w;
    return rc;
}

static void ctx_free(struct fill_ctx *c)
{
    pool_free(c->pool);
    free(c->scratch);
    free(c->t);
}

static int prepare(const struct synth_options *o, struct gguf_writer **w, struct fill_ctx *c,
                   struct gate_err *err)
{
    int rc = build(o, 1, w, c, err);
    if (!rc)
        rc = pool_create(&c->pool, o->n_threads, err);
    if (!rc &&
        !(c->scratch = malloc((size_t)pool_threads(c->pool) * (size_t)c->max_row * sizeof(float))))
        rc = err_set(err, ERR_ENV, "out of memory for row buffers");
    return rc;
}

int synth_write(const struct synth_options *o, const char *path, synth_progress_fn progress,
                void *progress_ctx, struct gate_err *err)
{
    struct fill_ctx c = {.progress = progress, .progress_ctx = progress_ctx};
    struct gguf_writer *w = NULL;
    int rc = prepare(o, &w, &c, err);
    if (!rc)
        rc = gguf_writer_write_file(w, path, err);
    gguf_writer_free(w);
    ctx_free(&c);
    return rc;
}

int synth_write_mem(const struct synth_options *o, uint8_t **buf, size_t *size,
                    struct gate_err *err)
{
    struct fill_ctx c = {0};
    struct gguf_writer *w = NULL;
    int rc = prepare(o, &w, &c, err);
    if (!rc)
        rc = gguf_writer_write_mem(w, buf, size, err);
    gguf_writer_free(w);
    ctx_free(&c);
    return rc;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

/* Bytes of w's header and metadata without the padding to the alignment: written with
 * alignment 1, minus the general.alignment record that setting it adds (key 17 + 8, type 4,
 * value 4). */
static int unpadded_head(struct gguf_writer *w, uint64_t *out, struct gate_err *err)
{
    uint8_t *mem = NULL;
    size_t size = 0;
    if (gguf_writer_set_alignment(w, 1))
        return err_set(err, ERR_ENV, "synth: out of memory for the GGUF header");
    int rc = gguf_writer_write_mem(w, &mem, &size, err);
    free(mem);
    *out = (uint64_t)size - 33;
    return rc;
}

int synth_file_bytes(const struct synth_options *o, int64_t vocab_bytes, uint64_t *bytes,
                     int64_t *vocab_out, struct gate_err *err)
{
    struct synth_tensor *t = NULL;
    struct gguf_writer *w = NULL;
    int n = 0;
    uint64_t head = 0;
    int rc = synth_plan(o, &t, &n, err);
    if (rc)
        goto out;
    if (vocab_bytes < 0) {
        if (!(w = gguf_writer_new())) {
            rc = err_set(err, ERR_ENV, "synth: out of memory for the GGUF writer");
            goto out;
        }
        if ((rc = add_vocab(w, o, err)) || (rc = unpadded_head(w, &head, err)))
            goto out;
        vocab_bytes = (int64_t)head - 24; /* minus magic, version and the two counts */
        gguf_writer_free(w);
    }
    if (!(w = gguf_writer_new()) || add_metadata(w, o)) {
        rc = err_set(err, ERR_ENV, "synth: out of memory for the GGUF writer");
        goto out;
    }
    if ((rc = unpadded_head(w, &head, err)))
        goto out;
    head += (uint64_t)vocab_bytes;
    uint64_t data = 0;
    for (int i = 0; i < n; i++) {
        head += 8 + strlen(t[i].name) + 4 + 8 * (uint64_t)t[i].n_dims + 4 + 8;
        data =
            i + 1 < n ? align_up(data + t[i].nbytes, GGUF_DEFAULT_ALIGNMENT) : data + t[i].nbytes;
    }
    *bytes = align_up(head, GGUF_DEFAULT_ALIGNMENT) + data;
    if (vocab_out)
        *vocab_out = vocab_bytes;
out:
    gguf_writer_free(w);
    free(t);
    return rc;
}
