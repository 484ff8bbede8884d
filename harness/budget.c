/* budget.c — a cell's memory arithmetic and time estimate before it runs (budget.h says why).
 *
 * Invariants: every figure is a pure function of the model's hyperparameters and the cell's
 * settings (the tests compute the same numbers by hand); the available figure is read once per
 * call, from $GATE_MEMORY_LIMIT or /proc/meminfo, never guessed. The memory terms mirror the
 * buffers parity_session_open() and the backends' open allocate (engine/ref.c's ALLOC list, the
 * cpu backend's plan) and the rows oracles/mode.c keeps (struct mode_keep): when one of those
 * grows, this file must follow (docs/nightly.md).
 * Start reading: budget_memory().
 */
#include "harness/budget.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "harness/ladder.h"
#include "oracles/parity.h"

uint64_t budget_kv_bytes(const struct model_hparams *hp, int positions, int elem)
{
    return (uint64_t)hp->n_layer * 2u * (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim *
           (uint64_t)(positions > 0 ? positions : 0) * (uint64_t)elem;
}

/* One in-process backend opened with n_ctx = S and a batch of B tokens (oracles/parity.c: the
 * subject B = its path's longest call, mode_longest_call(); the judge of a sampled span
 * B = MODE_JUDGE_CHUNK): its per-batch buffers (B
 * rows), attention scores and RoPE tables (S), in floats (engine/ref.c's ALLOC list; the cpu
 * backend's plan has the same terms and, with an F16 cache, one layer of K and V as floats). */
static uint64_t backend_activation_floats(const struct model_hparams *hp, uint64_t S, uint64_t B,
                                          int kv_f16)
{
    const uint64_t E = hp->n_embd, hd = hp->head_dim;
    const uint64_t qd = (uint64_t)hp->n_head * hd, kvd = (uint64_t)hp->n_head_kv * hd;
    const int moe = hp->n_expert > 0;
    const uint64_t X = hp->n_expert, K = moe ? hp->n_expert_used : 1;
    const uint64_t F = moe ? hp->n_ff_exp : hp->n_ff;
    uint64_t f = B * (3 * E + 2 * qd + 2 * kvd) /* x, xb, xo; q, att; k, v */
                 + 2 * B * K * F;               /* ffa, ffb */
    if (moe)
        f += 2 * B * X        /* router, probs */
             + 3 * B * K      /* sel, selw, rows */
             + 3 * B * K * E; /* gx, gy, moe_y */
    f += 17 * 16 * S;         /* scores and batched scores for up to 16 threads */
    f += S * hd;              /* rope_cos, rope_sin: (S, hd/2) each */
    if (kv_f16)
        f += 2 * S * kvd; /* one layer of the F16 cache as floats (K and V) */
    return f;
}

int budget_forced(const char *name)
{
    const struct backend_noise *z =
        name && !backend_is_external(name) ? backend_noise_of(name) : NULL;
    return z && z->rounding;
}

void budget_memory(const struct model_hparams *hp, int S, int judged, enum mode_path path,
                   int kv_elem, int in_process, int forced, struct budget_memory *out)
{
    memset(out, 0, sizeof *out);
    const uint64_t s = (uint64_t)(S > 0 ? S : 0), V = hp->n_vocab;
    const uint64_t L = hp->n_layer, E = hp->n_embd;
    const uint64_t K = hp->n_expert > 0 ? hp->n_expert_used : 0;
    const uint64_t J = (uint64_t)(judged > 0 ? judged : 0);
    const int sampled = judged > 0 && judged < S; /* a span: only the judged rows are kept */
    out->positions = S;
    out->judged = judged;
    out->kv_bytes_per_elem = kv_elem;
    /* the judge of a sampled span runs in calls of MODE_JUDGE_CHUNK tokens; else one call */
    out->judge_batch = sampled && S > MODE_JUDGE_CHUNK ? MODE_JUDGE_CHUNK : S;
    /* the subject's longest forward call: decode one token, prefill the first half (the
     * session's uneven chunks are shorter), chat a user turn (at most the sequence) */
    out->subject_call = path == MODE_DECODE    ? 1
                        : path == MODE_PREFILL ? (S / 2 > 0 ? S / 2 : 1)
                                               : S;
    const uint64_t jb = (uint64_t)out->judge_batch, sc = (uint64_t)out->subject_call;
    /* the judge (the twin) keeps an F32 cache; the subject its cell's type */
    const uint64_t kv_judge = budget_kv_bytes(hp, S, 4);
    out->kv_subject_bytes = in_process ? budget_kv_bytes(hp, S, kv_elem) : 0;
    out->kv_bytes = kv_judge + out->kv_subject_bytes;
    /* judge_logits, subj_logits: the judged rows (J = S when every position is judged); a
     * sampled run moves each call's rows through a scratch first: the judge's chunk and the
     * subject's longest call */
    out->logits_bytes = 4 * V * (2 * J + (sampled ? jb + sc : 0));
    /* taps on both sides (parity_run asks for them): hidden (L, J, E); MoE: experts and weights
     * (L, S, k), router k-th and (k+1)-th (L, S) at every position; each call's taps through a
     * scratch of its length (the subject's; the judge's when sampled) */
    const uint64_t moe = K ? 2 * K + 2 : 0;
    out->taps_bytes = 4 * L * (2 * J * E + 2 * s * moe + (sc + (sampled ? jb : 0)) * (E + moe));
    out->activation_bytes = 4 * backend_activation_floats(hp, s, jb, 0);
    if (in_process) /* the subject is opened with a batch of its longest call (parity.c) */
        out->activation_bytes += 4 * backend_activation_floats(hp, s, sc, kv_elem == 2);
    /* the forced layers (oracles/parity.c forced_measure), when the subject is one of gate's
     * own whose roundings the twin models (forced): a second twin over the sequence, layer-major in
     * calls of at most MODE_JUDGE_CHUNK, with ONE layer's F32 cache (kv-one-layer); the layers'
     * outputs at the judged positions (L, J, E), the route scratch (L, S), PARITY_FORCED_HEAD_ROWS
     * rows of logits, and for a sampled span the subject's hidden state at every position (L, S, E:
     * each layer's input) */
    if (in_process && forced) {
        const uint64_t fb = s > MODE_JUDGE_CHUNK ? MODE_JUDGE_CHUNK : s;
        out->forced_bytes = budget_kv_bytes(hp, S, 4) / (L ? L : 1) +
                            4 * (backend_activation_floats(hp, s, fb, 0) + L * J * E + L * s +
                                 PARITY_FORCED_HEAD_ROWS * V + (sampled ? L * s * E : 0));
    }
    out->other_bytes =
        out->logits_bytes + out->taps_bytes + out->activation_bytes + out->forced_bytes;
    out->total_bytes = out->kv_bytes + out->other_bytes;
}

/* "123", "64M", "2G", "512K" (powers of 1024) -> bytes; -1 when not a positive size. */
static int64_t parse_size(const char *s)
{
    errno = 0;
    char *end = NULL;
    const unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-' || v == 0)
        return -1;
    uint64_t mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1ull << 10, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1ull << 20, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1ull << 30, end++;
    if (*end || v > (uint64_t)INT64_MAX / mul)
        return -1;
    return (int64_t)(v * mul);
}

int budget_available(struct budget_available *out, struct gate_err *err)
{
    memset(out, 0, sizeof *out);
    const char *lim = getenv("GATE_MEMORY_LIMIT");
    if (lim && *lim) {
        const int64_t b = parse_size(lim);
        if (b < 0)
            return err_set(err, ERR_INPUT,
                           "GATE_MEMORY_LIMIT='%s' is not a size (bytes, or a number with K, M"
                           " or G)",
                           lim);
        out->bytes = (uint64_t)b;
        snprintf(out->source, sizeof out->source, "GATE_MEMORY_LIMIT=%s", lim);
        return 0;
    }
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return err_set(err, ERR_ENV,
                       "cannot read /proc/meminfo for the memory available to a cell: %s (set"
                       " GATE_MEMORY_LIMIT)",
                       strerror(errno));
    char line[256];
    unsigned long long kb = 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
    fclose(f);
    if (!found)
        return err_set(err, ERR_ENV,
                       "/proc/meminfo has no MemAvailable line: set GATE_MEMORY_LIMIT to the"
                       " memory a cell may use");
    out->bytes = (uint64_t)kb * 1024u;
    snprintf(out->source, sizeof out->source, "/proc/meminfo MemAvailable");
    return 0;
}

static double mib(uint64_t b)
{
    return (double)b / 1048576.0;
}

int budget_check(const struct budget_memory *m, const struct budget_available *a,
                 struct gate_err *err)
{
    if (m->total_bytes <= a->bytes)
        return 0;
    return err_set(err, ERR_ENV,
                   "memory refused before the cell ran: %d positions need %.0f MiB (KV caches"
                   " %.0f MiB at %d bytes per subject element, logits %.0f MiB, taps %.0f MiB,"
                   " activations %.0f MiB, forced layers %.0f MiB), more than the %.0f MiB"
                   " available (%s)",
                   m->positions, mib(m->total_bytes), mib(m->kv_bytes), m->kv_bytes_per_elem,
                   mib(m->logits_bytes), mib(m->taps_bytes), mib(m->activation_bytes),
                   mib(m->forced_bytes), mib(a->bytes), a->source);
}

json_t *budget_memory_json(const struct budget_memory *m, const struct budget_available *a)
{
    return json_pack(
        "{s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:b}",
        "positions", m->positions, "judged", m->judged, "judge_batch", m->judge_batch,
        "subject_call", m->subject_call, "kv_elem_bytes", m->kv_bytes_per_elem, "kv_bytes",
        (json_int_t)m->kv_bytes, "kv_subject_bytes", (json_int_t)m->kv_subject_bytes,
        "logits_bytes", (json_int_t)m->logits_bytes, "taps_bytes", (json_int_t)m->taps_bytes,
        "activation_bytes", (json_int_t)m->activation_bytes, "forced_bytes",
        (json_int_t)m->forced_bytes, "other_bytes", (json_int_t)m->other_bytes, "total_bytes",
        (json_int_t)m->total_bytes, "available_bytes", (json_int_t)a->bytes, "available_source",
        a->source, "fits", m->total_bytes <= a->bytes);
}

/* ---- time ---------------------------------------------------------------------------------- */

/* Weight GFLOP per token: 2 x the parameters one token multiplies by. */
static double weight_gflop(const struct model_hparams *hp)
{
    const double E = hp->n_embd, hd = hp->head_dim;
    const double qd = (double)hp->n_head * hd, kvd = (double)hp->n_head_kv * hd;
    double per_layer = E * qd + 2 * E * kvd + qd * E;
    if (hp->n_expert > 0)
        per_layer += E * hp->n_expert + (double)hp->n_expert_used * 3 * E * hp->n_ff_exp;
    else
        per_layer += 3 * E * hp->n_ff;
    return 2.0 * (per_layer * hp->n_layer + (double)hp->n_vocab * E) * 1e-9;
}

/* Attention GFLOP per token per position of context (QK and AV, 2 flops each). */
static double attn_gflop_per_pos(const struct model_hparams *hp)
{
    return 4.0 * hp->n_head * (double)hp->head_dim * hp->n_layer * 1e-9;
}

/* K and V projections' GFLOP per token (a sampled span's forced twin computes only these at the
 * positions it does not judge). */
static double kv_gflop(const struct model_hparams *hp)
{
    return 4.0 * hp->n_embd * (double)hp->n_head_kv * hp->head_dim * hp->n_layer * 1e-9;
}

double budget_token_gflop(const struct model_hparams *hp, int pos)
{
    return weight_gflop(hp) + attn_gflop_per_pos(hp) * (double)(pos + 1);
}

/* GFLOP of a sequence of n tokens from position 0: n x weights + attention over 1..n. */
static double seq_gflop(const struct model_hparams *hp, double n)
{
    if (n <= 0)
        return 0;
    return n * weight_gflop(hp) + attn_gflop_per_pos(hp) * n * (n + 1) / 2;
}

void budget_time(const struct model_hparams *hp, const struct budget_time_in *in,
                 struct budget_time *out)
{
    memset(out, 0, sizeof *out);
    struct {
        double runs, len;
    } w[5] = {
        {2, in->parity_S}, /* judge + subject */
        {2.0 * in->golden_prompts, 16.0 + in->golden_tokens},
        {in->tp_runs, (double)in->tp_prompt + in->tp_decode},
        {2.0 * ((double)in->falsify_faults * (1 + in->falsify_samples) + in->falsify_probes),
         in->falsify_positions},
        {in->consistency_positions > 0 ? 12 : 0, in->consistency_positions},
    };
    for (int i = 0; i < 5; i++) {
        out->tokens += w[i].runs * w[i].len;
        out->gflop += w[i].runs * seq_gflop(hp, w[i].len);
    }
    if (in->parity_forced) { /* the forced twin: every position, or a sample of a span */
        const double S = in->parity_S, J = in->parity_judged;
        out->tokens += J;
        out->gflop +=
            J >= S ? seq_gflop(hp, S)
                   : S * kv_gflop(hp) + J * (weight_gflop(hp) + attn_gflop_per_pos(hp) * S / 2);
    }
    out->threads = in->threads > 0 ? in->threads : 1;
    out->seconds = out->gflop / (BUDGET_GFLOPS_PER_THREAD * out->threads);
}

void budget_cell(const struct ladder_gates *g, const struct model_hparams *hp, enum mode_path path,
                 int kv_f16, int in_process, int forced, int threads, struct budget_memory *mem,
                 struct budget_time *time)
{
    const int chat = path == MODE_CHAT;
    const int S = !chat && g->span > g->positions ? g->span : g->positions;
    const int judged = !chat && g->span > g->positions ? g->positions : S;
    budget_memory(hp, S, judged, path, kv_f16 ? 2 : 4, in_process, forced, mem);
    if (threads <= 0) {
        const long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    const struct budget_time_in in = {
        .parity_S = S,
        .parity_judged = judged,
        .parity_forced = in_process && forced,
        .golden_prompts = 4, /* the default prompts (oracles/golden.c); the file may hold more */
        .golden_tokens = g->golden_tokens,
        .tp_runs = g->warmup + g->runs,
        .tp_prompt = g->prompt_tokens,
        .tp_decode = g->decode_tokens,
        .falsify_faults = g->falsify.n,
        .falsify_samples = g->sweep_samples,
        .falsify_probes = 5 * g->power_layers + 1, /* 5 matmul kinds x layers + the output */
        .falsify_positions = g->positions,
        .consistency_positions = g->consistency ? g->cons_positions : 0,
        .threads = threads,
    };
    budget_time(hp, &in, time);
}
