/* ladder_files.c — the ladder's checks that read files (split from ladder.c, issue 24 §6): the
 * pinned files a ladder names — models, goldens and their entries, anchor cases, exec engines —
 * opened and checked at `gate ladder check` / before `gate run` exactly as the run reads them, and
 * a `synth:` model written into the cache. ladder.c parses; nothing here parses YAML.
 * Start reading: ladder_check_files().
 */
#include "harness/ladder.h"

#include "harness/gatedef.h"
#include "harness/identity.h"
#include "harness/run.h"
#include "oracles/consistency.h"
#include "oracles/falsify.h"
#include "oracles/throughput.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "engine/pin.h"
#include "engine/synth.h"
#include "oracles/golden.h"

/* ---- check-time file validation (issue 16) ------------------------------------------------- */

/* Line and column (1-based) of the first occurrence of needle in the ladder file, for messages
 * about values the parsed ladder keeps without a position (a goldens path); 0/0 when not found. */
static void text_pos(const struct ladder *l, const char *needle, int *line, int *col)
{
    *line = *col = 0;
    FILE *f = fopen(l->path, "r");
    if (!f || !needle[0]) {
        if (f)
            fclose(f);
        return;
    }
    char buf[4096];
    for (int ln = 1; fgets(buf, sizeof buf, f); ln++) {
        const char *at = strstr(buf, needle);
        if (at) {
            *line = ln;
            *col = (int)(at - buf) + 1;
            break;
        }
    }
    fclose(f);
}

/* What the ladder's checks read of a GGUF file's metadata (tensor data is not read): the
 * architecture; the shape the fault rules need, ARCH.block_count and ARCH.expert_used_count (0
 * when absent: a dense model); ARCH.context_length (0 when absent), the positions a cell may
 * run; the RMSNorm epsilon and RoPE base (0 when absent or not f32: the model loader judges
 * those, the ladder's checks only read them for a warning); the counts a warning compares with
 * the real models' (0 when absent): ARCH.expert_count and the vocabulary, token_embd.weight's
 * rows. */
struct file_meta {
    char arch[64];
    uint32_t n_layer, n_expert_used, n_ctx, n_expert;
    int64_t n_vocab;
    float eps, rope_base;
};

static int file_meta(const struct ladder_model *m, struct file_meta *fm, struct gate_err *err)
{
    struct gguf_file *g = NULL;
    char *s = NULL, key[96];
    memset(fm, 0, sizeof *fm);
    int rc = gguf_open(&g, m->path, GGUF_OPEN_METADATA_ONLY, err);
    if (!rc)
        rc = gguf_get_str(g, "general.architecture", &s, err);
    if (!rc) {
        snprintf(fm->arch, sizeof fm->arch, "%s", s);
        snprintf(key, sizeof key, "%s.block_count", s);
        rc = gguf_get_u32(g, key, &fm->n_layer, err);
    }
    if (!rc) {
        snprintf(key, sizeof key, "%s.expert_used_count", s);
        if (gguf_find_kv(g, key))
            rc = gguf_get_u32(g, key, &fm->n_expert_used, err);
    }
    if (!rc) {
        snprintf(key, sizeof key, "%s.context_length", s);
        if (gguf_find_kv(g, key))
            rc = gguf_get_u32(g, key, &fm->n_ctx, err);
    }
    if (!rc) {
        snprintf(key, sizeof key, "%s.expert_count", s);
        if (gguf_find_kv(g, key))
            rc = gguf_get_u32(g, key, &fm->n_expert, err);
    }
    const struct gguf_tensor *embd = rc ? NULL : gguf_find_tensor(g, "token_embd.weight");
    if (embd)
        fm->n_vocab = embd->ne[1];
    static const char *const f32_keys[] = {"attention.layer_norm_rms_epsilon", "rope.freq_base"};
    float *const f32_out[] = {&fm->eps, &fm->rope_base};
    for (int k = 0; !rc && k < 2; k++) { /* advisory: a key of another type reads as absent */
        snprintf(key, sizeof key, "%s.%s", s, f32_keys[k]);
        struct gate_err fe = {0};
        if (gguf_find_kv(g, key) && gguf_get_f32(g, key, f32_out[k], &fe))
            *f32_out[k] = 0;
    }
    free(s);
    gguf_close(g);
    return rc;
}

/* The longest sequence cell ci runs (parity's max(span, positions), the throughput run's prompt
 * plus decode, the consistency gate's positions) against the model's context length n_ctx
 * (0 = the file states none: not checked). ERR_INPUT at the cell naming both. */
static int check_context(const struct ladder *l, int ci, uint32_t n_ctx, struct gate_err *err)
{
    const struct ladder_cell *c = &l->cells[ci];
    const struct ladder_gates *g = &c->g;
    struct {
        const char *what;
        long long n;
    } need[] = {
        {"parity (max of span and positions)", g->span > g->positions ? g->span : g->positions},
        {"throughput (prompt_tokens + decode_tokens)",
         (long long)g->prompt_tokens + g->decode_tokens},
        {"consistency (positions)", g->consistency ? g->cons_positions : 0},
    };
    for (size_t k = 0; n_ctx && k < sizeof need / sizeof need[0]; k++) {
        if (need[k].n <= (long long)n_ctx)
            continue;
        char name[256];
        return err_set(err, ERR_INPUT,
                       "%s:%d:%d: cell %s: %s runs %lld positions but model '%s' has context"
                       " length %u (its context_length): shorten it or gate a model with a"
                       " longer context",
                       l->path, c->line, c->col, ladder_cell_name(l, ci, name, sizeof name),
                       need[k].what, need[k].n, l->models[c->model].id, n_ctx);
    }
    return 0;
}

int ladder_model_hparams(const struct ladder *l, int i, double *eps, double *rope_base,
                         struct gate_err *err)
{
    const struct ladder_model *m = &l->models[i];
    *eps = *rope_base = 0;
    if (m->synth) {
        const struct synth_spec *sp = synth_preset_find(m->preset);
        if (!sp)
            return err_set(err, ERR_INPUT, "model '%s': unknown synth preset '%s'", m->id,
                           m->preset);
        /* as the file will say: the f32 values */
        *eps = (double)(m->eps > 0 ? m->eps : sp->eps);
        *rope_base = (double)(m->rope_base > 0 ? m->rope_base : sp->rope_base);
        return 0;
    }
    struct file_meta fm;
    int rc = file_meta(m, &fm, err);
    if (!rc && !(fm.eps > 0 && fm.rope_base > 0))
        rc = err_set(err, ERR_INPUT, "model '%s': '%s' states no RMSNorm epsilon or RoPE base",
                     m->id, m->path);
    if (!rc)
        *eps = fm.eps, *rope_base = fm.rope_base;
    return rc;
}

/* The engine a mode runs: the mode without its path ("cpu", "cuda", "exec.NAME"). */
static size_t engine_len(const char *mode)
{
    const char *dot = strrchr(mode, '.');
    return dot ? (size_t)(dot - mode) : strlen(mode);
}

/* 1 when modes a and b run the same engine */
static int same_engine(const char *a, const char *b)
{
    const size_t len = engine_len(a);
    return engine_len(b) == len && !strncmp(a, b, len);
}

/* 1 when cell c0 is the first cell of its engine and that engine is not the judge (the twin
 * judges itself: its cells never count): the ladder's engines, each once */
static int engine_first_cell(const struct ladder *l, int c0)
{
    const char *mode = l->cells[c0].mode, *judge = backend_judge_name();
    if (engine_len(mode) == strlen(judge) && !strncmp(mode, judge, strlen(judge)))
        return 0;
    for (int d = 0; d < c0; d++)
        if (same_engine(l->cells[d].mode, mode))
            return 0;
    return 1;
}

/* What a coverage warning says of the engine whose first cell is c0 (mode, its engine the first
 * len characters): a sentence in buf (bn bytes) and 1, or 0 when it has nothing to say. */
typedef int (*engine_say)(const struct ladder *l, int c0, const char *mode, int len, char *buf,
                          size_t bn);

/* The coverage warnings' one loop: each engine once (engine_first_cell), its sentence from say,
 * the sentences in why (n bytes) separated by newlines. Returns how many. */
static int engine_warnings(const struct ladder *l, char *why, size_t n, engine_say say)
{
    int warned = 0;
    size_t used = 0;
    why[0] = '\0';
    for (int c0 = 0; c0 < l->n_cells; c0++) {
        const char *mode = l->cells[c0].mode;
        char line[2048];
        if (!engine_first_cell(l, c0) ||
            !say(l, c0, mode, (int)engine_len(mode), line, sizeof line))
            continue;
        if (used < n)
            used += (size_t)snprintf(why + used, n - used, "%s%s", warned ? "\n" : "", line);
        warned++;
    }
    return warned;
}

static int say_hparams_uniform(const struct ladder *l, int c0, const char *mode, int len, char *buf,
                               size_t bn)
{
    double eps0 = 0, rope0 = 0;
    int models = 0, eps_differ = 0, rope_differ = 0;
    for (int i = 0; i < l->n_models; i++) {
        int judged = 0; /* a cell of this engine on model i */
        for (int c = c0; c < l->n_cells && !judged; c++)
            judged = l->cells[c].model == i && same_engine(l->cells[c].mode, mode);
        double eps, rope;
        struct gate_err e = {0};
        if (!judged || ladder_model_hparams(l, i, &eps, &rope, &e))
            continue;
        if (!models++)
            eps0 = eps, rope0 = rope;
        eps_differ |= eps != eps0;
        rope_differ |= rope != rope0;
    }
    if (!models || (eps_differ && rope_differ))
        return 0;
    char what[160] = "";
    if (!eps_differ)
        snprintf(what, sizeof what, "RMSNorm epsilon %g", eps0);
    if (!rope_differ)
        snprintf(what + strlen(what), sizeof what - strlen(what), "%sRoPE base %g",
                 eps_differ ? "" : " and ", rope0);
    const int one = eps_differ || rope_differ;
    snprintf(buf, bn,
             "every model the %.*s engine is judged on has %s: an engine that hard-codes %s%s"
             " passes every gate here; add a model whose synth spec sets %s off %s"
             " (docs/ladder.md, \"Hyperparameters off the usual values\")",
             len, mode, what, one ? "it" : "them", eps_differ ? "" : " (or misapplies epsilon)",
             eps_differ    ? "rope_base"
             : rope_differ ? "eps"
                           : "eps and rope_base",
             one ? "it" : "them");
    return 1;
}

int ladder_hparams_uniform(const struct ladder *l, char *why, size_t n)
{
    return engine_warnings(l, why, n, say_hparams_uniform);
}

/* Model i's context length: its synth preset's, or its file's metadata; 0 when unknown. */
static uint32_t model_context(const struct ladder *l, int i)
{
    const struct ladder_model *m = &l->models[i];
    if (m->synth) {
        const struct synth_spec *sp = synth_preset_find(m->preset);
        return sp ? sp->n_ctx : 0;
    }
    struct file_meta fm;
    struct gate_err e = {0};
    return file_meta(m, &fm, &e) ? 0 : fm.n_ctx;
}

/* Model i's vocabulary, expert count and experts a token (0 for a dense model): its synth
 * preset's, or its file's; 0 when unknown. */
static void model_counts(const struct ladder *l, int i, int64_t *vocab, uint32_t *experts,
                         uint32_t *used)
{
    const struct ladder_model *m = &l->models[i];
    *vocab = 0, *experts = *used = 0;
    if (m->synth) {
        const struct synth_spec *sp = synth_preset_find(m->preset);
        if (sp)
            *vocab = sp->n_vocab, *experts = sp->n_expert, *used = sp->n_expert_used;
        return;
    }
    struct file_meta fm;
    struct gate_err e = {0};
    if (!file_meta(m, &fm, &e))
        *vocab = fm.n_vocab, *experts = fm.n_expert, *used = fm.n_expert_used;
}

static int say_counts_small(const struct ladder *l, int c0, const char *mode, int len, char *buf,
                            size_t bn)
{
    int64_t vocab = 0;                      /* the largest vocabulary the engine is judged on */
    uint32_t experts = 0, top = 0, moe = 0; /* the same over its MoE models */
    for (int c = c0; c < l->n_cells; c++) {
        if (!same_engine(l->cells[c].mode, mode))
            continue;
        int64_t v;
        uint32_t x, k;
        model_counts(l, l->cells[c].model, &v, &x, &k);
        vocab = v > vocab ? v : vocab;
        moe |= x > 0;
        experts = x > experts ? x : experts;
        top = k > top ? k : top;
    }
    char what[320] = "";
    if (vocab && vocab <= LADDER_VOCAB_REACH)
        snprintf(what, sizeof what,
                 "a vocabulary of at most %lld tokens (token ids that fit"
                 " in 16 bits)",
                 (long long)vocab);
    if (moe && (experts <= LADDER_EXPERTS_REACH || top < LADDER_TOPK_REACH))
        snprintf(what + strlen(what), sizeof what - strlen(what),
                 "%sat most %u experts, %u a token (the real MoE models: 128, top-8)",
                 what[0] ? ", and MoE models of " : "MoE models of ", experts, top);
    if (!what[0])
        return 0;
    snprintf(buf, bn,
             "every model the %.*s engine is judged on has %s: a bug sized for these counts"
             " (ids kept in 16 bits, a 64-bit expert mask, arrays for top-4) passes every gate"
             " here; add a model with the real counts, e.g. synth preset tiny-a3b"
             " (docs/ladder.md, \"The real models' counts\")",
             len, mode, what);
    return 1;
}

int ladder_counts_small(const struct ladder *l, char *why, size_t n)
{
    return engine_warnings(l, why, n, say_counts_small);
}

/* 1 when cells a and b run one path: one mode and the same cell settings (kv, isa, prefill, the
 * kernel generations), each of which runs code of its own */
static int same_path(const struct ladder_cell *a, const struct ladder_cell *b)
{
    return !strcmp(a->mode, b->mode) && cell_variant_same(&a->v, &b->v);
}

/* 1 when cell c is the first of its path */
static int path_first_cell(const struct ladder *l, int c)
{
    for (int d = 0; d < c; d++)
        if (same_path(&l->cells[d], &l->cells[c]))
            return 0;
    return 1;
}

static int say_span_short(const struct ladder *l, int c0, const char *mode, int len, char *buf,
                          size_t bn)
{
    /* per path of this engine: the longest sequence parity judges in its cells against the
     * longest context among their models. A span over the whole context on one path (say the
     * F32 decode) judges nothing of another's code there (the F16 cache's conversion, the
     * prompt's batched attention, an instruction set's kernels). */
    int n_short = 0;
    size_t used = 0;
    for (int c = c0; c < l->n_cells; c++) {
        const struct ladder_cell *cell = &l->cells[c];
        if (!same_engine(cell->mode, mode) || !path_first_cell(l, c))
            continue;
        long long longest = 0;
        uint32_t ctx = 0;
        for (int d = c; d < l->n_cells; d++) {
            const struct ladder_cell *o = &l->cells[d];
            if (!same_path(o, cell))
                continue;
            const long long seq = o->g.span > o->g.positions ? o->g.span : o->g.positions;
            if (seq > longest)
                longest = seq;
            const uint32_t mc = model_context(l, o->model);
            if (mc > ctx)
                ctx = mc;
        }
        if (longest > LADDER_SPAN_REACH || (long long)ctx <= longest)
            continue;
        char suffix[CELL_SUFFIX_MAX];
        cell_variant_suffix(&cell->v, suffix, sizeof suffix);
        if (used < bn && !n_short)
            used += (size_t)snprintf(buf + used, bn - used,
                                     "no cell judges the %.*s engine's %s%s past position %lld"
                                     " (its models' context: up to %u)",
                                     len, mode, cell->mode, suffix, longest - 1, ctx);
        else if (used < bn)
            used += (size_t)snprintf(buf + used, bn - used, "; nor %s%s past %lld (up to %u)",
                                     cell->mode, suffix, longest - 1, ctx);
        n_short++;
    }
    if (!n_short)
        return 0;
    if (used < bn)
        snprintf(buf + used, bn - used,
                 ": a bug at a later position on such a path (an engine's default context of %d,"
                 " a KV slot, a RoPE table, a score buffer) passes every gate here; give one cell"
                 " of each a parity span past %d (docs/ladder.md, \"Positions past 2048\")",
                 LADDER_SPAN_REACH, LADDER_SPAN_REACH);
    return 1;
}

int ladder_span_short(const struct ladder *l, char *why, size_t n)
{
    return engine_warnings(l, why, n, say_span_short);
}

int ladder_check_files(const struct ladder *l, struct gate_err *err)
{
    int rc = 0;
    /* each model's shape (from its synth preset or its file's metadata), for the fault rules */
    uint32_t *shape = calloc((size_t)(l->n_models ? l->n_models : 1) * 3, sizeof *shape);
    if (!shape)
        return err_set(err, ERR_ENV, "%s: out of memory for the models' shape table", l->path);
    for (int i = 0; !rc && i < l->n_models; i++) {
        const struct ladder_model *m = &l->models[i];
        if (m->synth) {
            const struct synth_spec *sp = synth_preset_find(m->preset);
            int np = 0;
            const struct synth_spec *all = synth_presets(&np);
            char names[256] = "";
            for (int k = 0; k < np; k++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "",
                         all[k].name);
            if (!sp)
                rc = err_set(err, ERR_INPUT,
                             "%s:%d:3: model '%s': unknown synth preset '%s'"
                             " (known: %s; gate model synth --list)",
                             l->path, m->line, m->id, m->preset, names);
            else if (synth_quant_from_name(m->quant) < 0)
                rc = err_set(err, ERR_INPUT,
                             "%s:%d:3: model '%s': unknown synth quant '%s'"
                             " (known: F32, F16, BF16, Q8_0, Q4_K_M, Q5_K_M, Q6_K)",
                             l->path, m->line, m->id, m->quant);
            else if (strcmp(m->arch, model_arch_name(sp->arch)))
                rc =
                    err_set(err, ERR_INPUT,
                            "%s:%d:3: model '%s': arch '%s' contradicts synth"
                            " preset '%s', which is %s",
                            l->path, m->line, m->id, m->arch, m->preset, model_arch_name(sp->arch));
            if (sp)
                shape[3 * i] = sp->n_layer, shape[3 * i + 1] = sp->n_expert_used,
                          shape[3 * i + 2] = sp->n_ctx;
            continue; /* written by gate run / gate golden record into .gate-cache/ */
        }
        struct stat st;
        if (stat(m->path, &st) != 0) {
            rc = err_set(err, ERR_INPUT, "%s:%d:3: model '%s': path '%s' cannot be read: %s",
                         l->path, m->line, m->id, m->path, strerror(errno));
            break;
        }
        struct file_meta fm;
        struct gate_err fe = {0};
        if (file_meta(m, &fm, &fe))
            rc =
                err_set(err, ERR_INPUT, "%s:%d:3: model '%s': %s", l->path, m->line, m->id, fe.msg);
        else if (strcmp(fm.arch, m->arch))
            rc = err_set(err, ERR_INPUT,
                         "%s:%d:3: model '%s': arch '%s' contradicts the file"
                         " '%s', whose general.architecture is '%s'",
                         l->path, m->line, m->id, m->arch, m->path, fm.arch);
        shape[3 * i] = fm.n_layer, shape[3 * i + 1] = fm.n_expert_used, shape[3 * i + 2] = fm.n_ctx;
    }
    /* the falsify gate's fault rules (falsify_check_faults, the run's own) with the model's
     * layers and experts: a scope or rank the model does not have is refused here, not signed */
    for (int i = 0; !rc && i < l->n_cells; i++) {
        const struct ladder_cell *c = &l->cells[i];
        const struct ladder_model *m = &l->models[c->model];
        const uint32_t nl = shape[3 * c->model], ne = shape[3 * c->model + 1];
        struct gate_err fe = {0};
        char name[256];
        if (nl && falsify_check_faults(&c->g.falsify, (int)nl, ne > 0, ne ? (int)ne : INT_MAX, 1,
                                       ladder_cell_fault_positions(c), &fe))
            rc = err_set(err, ERR_INPUT,
                         "%s:%d:%d: cell %s: model '%s' has %u layers and %u experts per token: %s;"
                         " override falsify for it",
                         l->path, c->line, c->col, ladder_cell_name(l, i, name, sizeof name), m->id,
                         nl, ne, fe.msg);
        /* a sequence longer than the file's context length (issue 26 §2): the backends would
         * run it with positions the model was never given (RoPE past its context) */
        if (!rc && (rc = check_context(l, i, shape[3 * c->model + 2], err)))
            break;
    }
    free(shape);
    for (int i = 0; !rc && i < l->n_cells; i++) {
        const struct ladder_gates *g = &l->cells[i].g;
        struct stat st;
        if (!g->goldens[0] || stat(g->goldens, &st) == 0)
            continue;
        const char *base = strrchr(g->goldens, '/') ? strrchr(g->goldens, '/') + 1 : g->goldens;
        int line, col;
        char name[256];
        text_pos(l, base, &line, &col);
        if (line)
            rc = err_set(err, ERR_INPUT,
                         "%s:%d:%d: cell %s: goldens file '%s' does not exist;"
                         " record it with gate golden record %s",
                         l->path, line, col, ladder_cell_name(l, i, name, sizeof name), g->goldens,
                         l->path);
        else
            rc = err_set(err, ERR_INPUT,
                         "%s: cell %s: goldens file '%s' does not exist; record"
                         " it with gate golden record %s",
                         l->path, ladder_cell_name(l, i, name, sizeof name), g->goldens, l->path);
    }
    if (!rc) /* the file as the golden gate reads it: its pin, the model's entry, the tokens */
        rc = ladder_check_golden_entries(l, -1, err);
    /* every engine a cell runs, pinned as each start checks it (a missing binary or one that is
     * not its pin signed a FAIL receipt for the cell before) */
    for (int i = 0; !rc && i < l->n_engines; i++) {
        int used = 0;
        for (int c = 0; c < l->n_cells && !used; c++)
            used = l->cells[c].g.engine == &l->engines[i];
        char exe[4096], sha[65];
        struct gate_err ee = {0};
        if (used && exec_engine_check_pins(&l->engines[i].e, exe, sizeof exe, sha, &ee))
            rc = err_set(err, ERR_INPUT, "%s:%d:3: %s (nothing was run, no receipt written)",
                         l->path, l->engines[i].line, ee.msg);
    }
    /* the anchor cases' files as the anchor gate reads them (a missing or changed file signed a
     * FAIL anchor receipt before) */
    for (int i = 0; !rc && i < l->n_anchors; i++)
        rc = run_anchor_check(l, i, err);
    return rc;
}

int ladder_cell_goldens_load(const struct ladder *l, int ci, const char *model_sha,
                             struct golden_set *set, struct gate_err *err)
{
    const struct ladder_gates *g = &l->cells[ci].g;
    struct pinned pf = {.fd = -1};
    uint8_t *bytes = NULL;
    size_t len = 0;
    memset(set, 0, sizeof *set);
    /* evidence: opened once, checked against its pin, read from that descriptor */
    struct gate_err le = {0};
    int rc = ladder_cell_goldens_check(l, ci, err);
    if (!rc && !(rc = pin_open(g->goldens, g->goldens_sha256, &pf, err)) &&
        !(rc = pin_read_all(&pf, (size_t)64 << 20, &bytes, &len, err)) &&
        (rc = golden_load_buf((const char *)bytes, len, g->goldens, model_sha, set, &le)))
        err_set(err, rc, "no usable goldens for model '%s' (sha256 %.12s...) in '%s': %s%s%s",
                l->models[l->cells[ci].model].id, model_sha, g->goldens, le.msg,
                strstr(le.msg, "gate golden record") ? ""
                                                     : "; record them with gate golden record ",
                strstr(le.msg, "gate golden record") ? "" : l->path);
    if (!rc && set->n_gen != g->golden_tokens) /* the judge's n_gen == tokens, known now */
        rc = err_set(err, ERR_INPUT,
                     "goldens '%s' hold %d tokens per case for this model but"
                     " gates.golden.tokens is %d: set tokens: %d, or record them again with"
                     " gate golden record --force %s",
                     g->goldens, set->n_gen, g->golden_tokens, set->n_gen, l->path);
    free(bytes);
    pin_close(&pf);
    if (rc)
        golden_set_free(set);
    return rc;
}

int ladder_check_golden_entries(const struct ladder *l, int host, struct gate_err *err)
{
    int rc = 0;
    for (int i = 0; !rc && i < l->n_cells; i++) {
        const struct ladder_cell *c = &l->cells[i];
        if ((host >= 0 && c->host != host) || !c->g.goldens[0])
            continue; /* none declared: ladder_check_runnable's rule, checked before */
        const struct ladder_model *m = &l->models[c->model];
        struct golden_set gs;
        struct gate_err ge = {0};
        int lr = ladder_cell_goldens_load(l, i, m->sha256, &gs, &ge);
        golden_set_free(&gs);
        if (lr) {
            char name[256];
            int line = 0, col = 0;
            const char *b =
                strrchr(c->g.goldens, '/') ? strrchr(c->g.goldens, '/') + 1 : c->g.goldens;
            if (b[0])
                text_pos(l, b, &line, &col);
            if (!line)
                line = c->line, col = c->col;
            rc = err_set(err, ERR_INPUT,
                         "%s:%d:%d: cell %s: %s (nothing was run, no receipt written)", l->path,
                         line ? line : 1, col ? col : 1, ladder_cell_name(l, i, name, sizeof name),
                         ge.msg);
        }
    }
    return rc;
}

int ladder_model_ensure(const struct ladder_model *lm, int threads, synth_progress_fn progress,
                        void *ctx, int *written, struct gate_err *err)
{
    struct stat st;
    if (written)
        *written = 0;
    if (!lm->synth)
        return 0;
    if (stat(lm->path, &st) == 0) {
        /* the cache is named by preset, quant and seed: a preset that changed shape since the
         * file was written leaves a stale copy under the same name. The file is deterministic,
         * so one that is not the pinned digest is rewritten (the run's own pin check still
         * decides whether the new one is right) */
        /* checked once per process and file state (a run ensures per cell and per goldens set:
         * a big synthetic model is not hashed again each time) */
        static struct {
            char path[512];
            dev_t dev;
            ino_t ino;
            off_t size;
            struct timespec mtime;
        } seen[64];
        static int n_seen;
        for (int i = 0; i < n_seen; i++)
            if (!strcmp(seen[i].path, lm->path) && seen[i].dev == st.st_dev &&
                seen[i].ino == st.st_ino && seen[i].size == st.st_size &&
                seen[i].mtime.tv_sec == st.st_mtim.tv_sec &&
                seen[i].mtime.tv_nsec == st.st_mtim.tv_nsec)
                return 0;
        struct pinned pf = {.fd = -1};
        struct gate_err pe = {0};
        const int prc = pin_open(lm->path, lm->sha256, &pf, &pe);
        pin_close(&pf);
        if (prc == ERR_ENV) /* could not read it: say so, never delete on a guess */
            return err_set(err, ERR_ENV, "model '%s': %s", lm->id, pe.msg);
        if (!prc) {
            if (n_seen < 64 && strlen(lm->path) < sizeof seen[0].path) {
                snprintf(seen[n_seen].path, sizeof seen[0].path, "%s", lm->path);
                seen[n_seen].dev = st.st_dev, seen[n_seen].ino = st.st_ino;
                seen[n_seen].size = st.st_size, seen[n_seen].mtime = st.st_mtim;
                n_seen++;
            }
            return 0;
        }
        if (unlink(lm->path) != 0)
            return err_set(err, ERR_ENV, "model '%s': cannot remove the stale cached file '%s': %s",
                           lm->id, lm->path, strerror(errno));
    }
    struct synth_options so;
    memset(&so, 0, sizeof so);
    const struct synth_spec *sp = synth_preset_find(lm->preset);
    if (!sp)
        return err_set(err, ERR_INPUT, "model '%s': unknown synth preset '%s'", lm->id, lm->preset);
    so.spec = *sp;
    if (lm->eps > 0 ||
        lm->rope_base > 0) /* as `gate model synth --preset P --eps E --rope-base B` */
        so.spec.name = "custom";
    if (lm->eps > 0)
        so.spec.eps = lm->eps;
    if (lm->rope_base > 0)
        so.spec.rope_base = lm->rope_base;
    so.quant = synth_quant_from_name(lm->quant);
    if (so.quant < 0)
        return err_set(err, ERR_INPUT, "model '%s': unknown synth quant '%s'", lm->id, lm->quant);
    so.seed = (uint32_t)lm->seed;
    so.n_threads = threads;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", lm->path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return err_set(err, ERR_ENV, "cannot create the model cache '%s': %s", dir,
                           strerror(errno));
    }
    if (written)
        *written = 1;
    return synth_write(&so, lm->path, progress, ctx, err);
}
