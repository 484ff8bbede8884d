/* backend.c — the one list of backends, and the wrappers that own the backend contract.
 *
 * Invariants: every forward reaching ops->forward has been checked here (pos0 == n_past, the
 * context bound, every token id in range) and is at most n_batch tokens; n_past, the forwards /
 * tokens counters, the taps pointer and the active fault set live in struct backend and are
 * changed only here. A backend computes; it never re-checks, chunks or counts.
 * Start reading: backend_forward().
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend.h"
#include "cpu_dot.h"

#ifdef GATE_HAVE_CUDA
extern const struct backend_ops backend_cuda_ops;      /* kernels/cuda_backend.cu */
extern const struct backend_kernel_tests k_test_table; /* kernels/k_test.cu */
#define CUDA_OPS (&backend_cuda_ops)
#define CUDA_KERNEL_TESTS (&k_test_table)
#else
#define CUDA_OPS NULL
#define CUDA_KERNEL_TESTS NULL
#endif

extern const struct backend_ops backend_cpu_ops; /* engine/cpu.c */
/* engine/exec.c: engines gate did not build, one child process each (docs/exec.md). Not a row
 * of BACKENDS[]: its modes name a ladder's engine (exec.<engine>.<path>), so they are not part of
 * the fixed list every build knows; backend_find() still finds it. */
extern const struct backend_ops backend_exec_ops;

/* Every backend any build knows: a mode names one of these whether or not it is compiled in
 * (settled question 3). ops NULL = not in this build. */
static const struct backend_entry {
    const char *name;
    const struct backend_ops *ops;
    int device; /* runs on an accelerator: its runs count kernel launches */
    int kv_f16; /* its open honours backend_config.kv_f16 (sets base.kv_f16): every build knows
                 * it, compiled in or not, so a ladder's `kv: f16` cell is judged the same
                 * everywhere; tests/test_kv_ladder.c opens each compiled-in backend to hold it
                 * to its word */
    /* the invariances it declares, which the consistency gate (oracles/consistency.c) holds it
     * to: bitwise: decode, prefill, any chunking and a resumed cache give the same logits bit
     * for bit; threads: the logits do not depend on the thread count; isas: the instruction
     * sets it can be asked to run (backend_set_isa), all giving the same bits */
    int bitwise, threads;
    const char *isas;
    /* the 16-bit precisions its batched projections can run (backend_config.prefill; "" none:
     * F32 only): a cell's `prefill:`, recorded as what ran (base.prefill) */
    const char *prefills;
    /* its kernel generations (enum backend_knob; "" none to select), each comma-separated with
     * its default first: gemv, the decode GEMV; route, the MoE routing (every generation
     * bit-identical to route_select); attn, the attention (cuda: split = split-KV for decode);
     * graph, the decode step's launches (cuda: on = one CUDA graph replayed per step, recorded
     * with the reason when it fell back to eager launches; bit-identical either way) */
    const char *knobs[KNOB_COUNT];
    /* its kernels' launchers over host arrays (engine/kernel_tests.h), for the differential
     * checks of oracles/selftest.c; NULL: none, or not in this build */
    const struct backend_kernel_tests *kernel_tests;
    /* why a build has no kernel tests of this backend (NULL: it never offers them) */
    const char *no_kernel_tests;
} BACKENDS[] = {
    {"cuda",
     CUDA_OPS,
     1,
     1,
     0,
     0,
     "",
     "f16,bf16",
     {"v1,v2", "v1,v2", "v1,split", "off,on"},
     CUDA_KERNEL_TESTS,
     "this build has no CUDA backend (configured with GATE_CUDA=OFF or without nvcc)"},
    {"cpu", &backend_cpu_ops, 0, 1, 1, 1, "portable,avx2,avx512", "", {"", "", "", ""}, NULL, NULL},
    {"ref", &backend_ref_ops, 0, 0, 1, 1, "", "", {"", "", "", ""}, NULL, NULL},
};
#define N_BACKENDS (int)(sizeof BACKENDS / sizeof BACKENDS[0])

const struct backend_knob_def BACKEND_KNOBS[KNOB_COUNT] = {
    [KNOB_GEMV] = {"gemv", "GEMV", "the decode GEMV generation"},
    [KNOB_ROUTE] = {"route", "routing", "the MoE routing generation"},
    [KNOB_ATTN] = {"attn", "attention", "the attention generation"},
    [KNOB_GRAPH] = {"graph", "graph", "the decode step as one device graph"},
};

int backend_count(void)
{
    return N_BACKENDS;
}

const char *backend_name(int i)
{
    return i >= 0 && i < N_BACKENDS ? BACKENDS[i].name : NULL;
}

int backend_index(const char *name)
{
    for (int i = 0; name && i < N_BACKENDS; i++)
        if (!strcmp(name, BACKENDS[i].name))
            return i;
    return -1;
}

int backend_is_device(const char *name)
{
    const int i = backend_index(name);
    return i >= 0 && BACKENDS[i].device;
}

const char *backend_judge_name(void)
{
    return "ref";
}

const char *backend_accelerator_name(void)
{
    for (int i = 0; i < N_BACKENDS; i++)
        if (BACKENDS[i].device)
            return BACKENDS[i].name;
    return "";
}

int backend_is_external(const char *name)
{
    return name && !strcmp(name, BACKEND_EXTERNAL);
}

const struct backend_kernel_tests *backend_kernel_tests(const char **backend, struct gate_err *err)
{
    const char *why = NULL;
    for (int i = 0; i < N_BACKENDS; i++) {
        if (BACKENDS[i].kernel_tests) {
            if (backend)
                *backend = BACKENDS[i].name;
            return BACKENDS[i].kernel_tests;
        }
        if (!why)
            why = BACKENDS[i].no_kernel_tests;
    }
    if (backend)
        *backend = NULL;
    err_set(err, ERR_ENV, "%s", why ? why : "no backend of this build offers kernel tests");
    return NULL;
}

/* cpu: the worst of 51 runs of gate parity on 2026-12-02 (tiny-moe, tiny-dense, tiny-odd; cpu
 * decode and prefill on 8 sequences of 300 ids each, and the chat conversation) and, for max
 * rel-L2, 100 sequences of 300 ids of tiny-moe decode (docs/gates.md has the table). */
static const struct backend_noise NOISE[] = {
    {"ref", 1, 1, 0, 0, 0, 0, 0, "the judge against itself: bit-identical by construction", ""},
    {"cpu", 1, 0, 5.2e-6, 1.25e-5, 1.6e-4, 4.0e-3, 1.8e-3,
     "measured 2026-12-02: worst of 151 gate parity runs over tiny-moe, tiny-dense, tiny-odd"
     " (decode, prefill, chat; docs/gates.md)",
     "act-q12"}, /* 12-bit block activations before every quantized product (cpu_dot.h) */
    /* cuda: the first device run (2026-12-04, an NVIDIA H200, ci/gpu-check.sh; GEMV v1, attention
     * v1, graph off, FP32 prefill and KV), worst of the 12 cells of ladders/gpu.yaml: 1 - cos
     * 8.1e-13, mean KL 1.32e-11, max KL 6.42e-11, max rel-L2 1.27e-6, mean rel-L2 7.7e-7. Not
     * yet the row ladder check refuses by: it holds for the FP32 paths only, and a cuda cell
     * with an F16 KV cache, an F16 / BF16 prefill or the v2 kernels has other noise, which this
     * table (one row per backend) cannot tell apart. ladders/gpu.yaml sets its bounds from it. */
    {"cuda", 0, 0, NAN, NAN, NAN, NAN, NAN,
     "first device run 2026-12-04 (H200, FP32 v1 paths, tiny models): max rel-L2 1.27e-6, mean"
     " 7.7e-7, max KL 6.4e-11; not a refusal row yet: F16 KV / F16 prefill / v2 unmeasured",
     NULL}, /* its forced layers wait: its roundings are not calibrated against the forced twin */
    {BACKEND_EXTERNAL, 0, 0, NAN, NAN, NAN, NAN, NAN,
     "an external engine: its noise is its own; measure it (docs/exec.md)", NULL},
};

const struct backend_noise *backend_noise_of(const char *name)
{
    for (size_t i = 0; name && i < sizeof NOISE / sizeof NOISE[0]; i++)
        if (!strcmp(NOISE[i].backend, name))
            return &NOISE[i];
    return NULL;
}

int backend_offers_kv_f16(const char *name)
{
    const int i = backend_index(name);
    return i >= 0 && BACKENDS[i].kv_f16;
}

/* 1 when p is one of the comma-separated names of list */
static int in_list(const char *list, const char *p)
{
    for (const char *s = list; *s;) {
        const size_t len = strcspn(s, ",");
        if (len == strlen(p) && !strncmp(s, p, len))
            return 1;
        s += len + (s[len] == ',');
    }
    return 0;
}

int backend_offers_prefill(const char *name, const char *p)
{
    const int i = backend_index(name);
    if (i < 0 || !p || !*p)
        return 0;
    return in_list(BACKENDS[i].prefills, p);
}

int backend_offers_knob(const char *name, enum backend_knob k, const char *value)
{
    const int i = backend_index(name);
    if (i < 0 || (unsigned)k >= KNOB_COUNT || !value || !*value)
        return 0;
    return in_list(BACKENDS[i].knobs[k], value);
}

const char *backend_knob_values(const char *name, enum backend_knob k)
{
    const int i = backend_index(name);
    return i < 0 || (unsigned)k >= KNOB_COUNT ? "" : BACKENDS[i].knobs[k];
}

void backend_invariants(const char *name, struct backend_invariants *out)
{
    const int i = backend_index(name);
    memset(out, 0, sizeof *out);
    out->isas = "";
    if (i < 0)
        return;
    out->bitwise = BACKENDS[i].bitwise;
    out->threads = BACKENDS[i].threads;
    out->isas = BACKENDS[i].isas;
}

int backend_set_isa(const char *name, const char *isa, struct gate_err *err)
{
    if (!name || strcmp(name, "cpu"))
        return isa && *isa ? err_set(err, ERR_INPUT, "backend %s has no selectable instruction set",
                                     name ? name : "(null)")
                           : 0;
    if (cpu_dot_set_isa(isa))
        return err_set(err, ERR_ENV,
                       "cpu: instruction set '%s' is unknown or this machine / build cannot run it",
                       isa);
    return 0;
}

const char *backend_isa(const char *name)
{
    return name && !strcmp(name, "cpu") ? cpu_dot_isa_name(cpu_dot_isa()) : "";
}

const struct backend_ops *backend_find(const char *name)
{
    const int i = backend_index(name);
    if (i < 0 && name && !strcmp(name, backend_exec_ops.name))
        return &backend_exec_ops; /* external engines: modes exec.<engine>.<path>, not the list */
    return i >= 0 ? BACKENDS[i].ops : NULL;
}

/* "ref, cuda": the backends compiled into this build, for error text. */
static void compiled_list(char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_BACKENDS; i++)
        if (BACKENDS[i].ops && at < n) {
            int w = snprintf(buf + at, n - at, "%s%s", at ? ", " : "", BACKENDS[i].name);
            at += w > 0 ? (size_t)w : 0;
        }
}

int backend_describe(const char *name, struct backend_device *out, struct gate_err *err)
{
    memset(out, 0, sizeof *out);
    const int i = backend_index(name);
    if (i < 0)
        return err_set(err, ERR_INPUT, "unknown backend '%s'", name ? name : "(null)");
    if (!BACKENDS[i].ops)
        return err_set(err, ERR_ENV, "backend %s is not in this build", name);
    return BACKENDS[i].ops->describe(out, err);
}

static int name_char(char c)
{
    return isalnum((unsigned char)c);
}

int backend_device_name_matches(const char *declared, const char *reported)
{
    if (!declared || !reported || !*declared)
        return 0;
    const size_t n = strlen(declared), m = strlen(reported);
    for (size_t at = 0; at + n <= m; at++) {
        if (strncasecmp(reported + at, declared, n))
            continue;
        /* whole words: no letter or digit glued on either side of the match */
        const int left_ok = at == 0 || !name_char(reported[at - 1]) || !name_char(declared[0]);
        const int right_ok =
            at + n == m || !name_char(reported[at + n]) || !name_char(declared[n - 1]);
        if (left_ok && right_ok)
            return 1;
    }
    return 0;
}

/* Each kernel generation asked for (NULL or "" = the backend's default) against the one the open
 * reports (base.knob: "" = the backend has none to select): 0, or ERR_INPUT naming both. */
static int knobs_check(const char *name, const struct backend_config *cfg, const struct backend *b,
                       struct gate_err *err)
{
    for (int k = 0; cfg && k < KNOB_COUNT; k++) {
        const char *want = cfg->knob[k], *got = b->knob[k];
        if (!want || !*want || !strcmp(want, got))
            continue;
        if (got[0])
            return err_set(err, ERR_INPUT, "backend %s runs %s %s, not %.20s", name,
                           BACKEND_KNOBS[k].what, got, want);
        return err_set(err, ERR_INPUT,
                       "backend %s has no %s generations to select (%s %.20s asked for)", name,
                       BACKEND_KNOBS[k].what, BACKEND_KNOBS[k].key, want);
    }
    return 0;
}

int backend_session_open(struct backend_session **out, const char *name,
                         const struct backend_session_config *cfg, struct gate_err *err)
{
    *out = NULL;
    const struct backend_ops *ops = backend_find(name);
    if (backend_index(name) < 0 && !backend_is_external(name))
        return err_set(err, ERR_INPUT, "unknown backend '%s'", name ? name : "(null)");
    if (!ops || !ops->session_open)
        return 0; /* nothing kept across a cell's opens (or not in this build: its opens say so) */
    const struct backend_session_config none = {0};
    const int rc = ops->session_open(out, cfg ? cfg : &none, err);
    if (!rc && *out)
        (*out)->ops = ops;
    return rc;
}

void backend_session_close(struct backend_session *s)
{
    if (s && s->ops->session_close)
        s->ops->session_close(s);
}

void backend_session_info(const struct backend_session *s, struct backend_session_info *out)
{
    memset(out, 0, sizeof *out);
    if (s && s->ops->session_info)
        s->ops->session_info(s, out);
}

int backend_open(struct backend **out, const char *name, const struct model *m,
                 const struct backend_config *cfg, struct gate_err *err)
{
    *out = NULL;
    const struct backend_ops *ops = backend_find(name);
    if (!ops) {
        char known[64];
        compiled_list(known, sizeof known);
        return err_set(err, ERR_INPUT,
                       "backend '%s' is not available in this build (known:"
                       " %s)",
                       name, known);
    }
    if (cfg && cfg->session && cfg->session->ops != ops)
        return err_set(err, ERR_INPUT, "backend %s was handed another backend's session (%s's)",
                       name, cfg->session->ops->name);
    int rc = ops->open(out, m, cfg, err);
    if (rc)
        return rc;
    struct backend *b = *out;
    if (b->n_batch < 1 || b->n_ctx < 1) {
        rc = err_set(err, ERR_RUNTIME,
                     "backend %s opened with n_batch %d and n_ctx %d (both"
                     " must be >= 1)",
                     name, b->n_batch, b->n_ctx);
        ops->close(b);
        *out = NULL;
        return rc;
    }
    b->n_past = 0;
    b->taps = NULL;
    b->forwards = b->tokens = 0;
    if (cfg && cfg->kv_f16 && !b->kv_f16) {
        rc = err_set(err, ERR_INPUT, "backend %s has no F16 KV cache", name);
        ops->close(b);
        *out = NULL;
        return rc;
    }
    /* the precision asked for is the one the backend says it runs: never a silent F32 */
    const char *want_pf = cfg && cfg->prefill && *cfg->prefill ? cfg->prefill : "f32";
    if (strcmp(want_pf, b->prefill[0] ? b->prefill : "f32")) {
        rc = err_set(err, ERR_INPUT, "backend %s runs its batched projections in %s, not %s", name,
                     b->prefill[0] ? b->prefill : "f32", want_pf);
        ops->close(b);
        *out = NULL;
        return rc;
    }
    /* the kernel generations asked for are the ones the backend says it runs (nothing asked:
     * its default) */
    if ((rc = knobs_check(name, cfg, b, err))) {
        ops->close(b);
        *out = NULL;
        return rc;
    }
    backend_set_faults(b, cfg ? cfg->faults : NULL);
    /* what a ref open emulates, as its open read it (engine/ref.c): cfg first, else the
     * environment */
    const char *emu = cfg && cfg->emulate ? cfg->emulate : getenv("GATE_REF_EMULATE");
    if (strlen(emu ? emu : "") >= sizeof b->emulate)
        snprintf(b->emulate, sizeof b->emulate, "?");
    else
        snprintf(b->emulate, sizeof b->emulate, "%s", emu ? emu : "");
    return 0;
}

/* The contract's checks of one backend_forward / backend_forward_last call; nothing evaluated. */
static int forward_checks(const struct backend *b, const int32_t *tokens, int n, int pos0,
                          struct gate_err *err)
{
    const char *name = b->ops->name;
    const uint32_t V = b->model->hp.n_vocab;
    if (n <= 0)
        return err_set(err, ERR_INPUT, "%s: forward needs at least one token (got %d)", name, n);
    if (pos0 != b->n_past)
        return err_set(err, ERR_INPUT,
                       "%s: forward at position %d but the cache holds %d"
                       " positions",
                       name, pos0, b->n_past);
    if (n > b->n_ctx - pos0)
        return err_set(err, ERR_INPUT,
                       "%s: %d tokens at position %d exceed the context of %d"
                       " positions",
                       name, n, pos0, b->n_ctx);
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || (uint32_t)tokens[t] >= V)
            return err_set(err, ERR_INPUT,
                           "%s: token id %" PRId32 " at position %d is out of"
                           " range (vocabulary has %" PRIu32 " tokens)",
                           name, tokens[t], pos0 + t, V);
    return 0;
}

int backend_forward(struct backend *b, const int32_t *tokens, int n, int pos0, float *logits,
                    struct gate_err *err)
{
    const uint32_t V = b->model->hp.n_vocab;
    int rc = forward_checks(b, tokens, n, pos0, err);
    if (rc)
        return rc;
    b->tap_n = n;
    for (int done = 0; done < n; done += b->n_batch) {
        const int c = n - done < b->n_batch ? n - done : b->n_batch;
        b->tap_off = done;
        rc = b->ops->forward(b, tokens + done, c, pos0 + done, logits + (size_t)done * V, err);
        if (rc)
            return rc;
        b->n_past += c;
    }
    b->forwards++;
    b->tokens += (uint64_t)n;
    return 0;
}

int backend_forward_last(struct backend *b, const int32_t *tokens, int n, int pos0, float *logits,
                         struct gate_err *err)
{
    const size_t V = b->model->hp.n_vocab;
    float *full = NULL; /* the fallback's (chunk, n_vocab) rows */
    int rc = forward_checks(b, tokens, n, pos0, err);
    if (rc)
        return rc;
    if (!b->ops->forward_last) {
        const size_t rows = (size_t)(n < b->n_batch ? n : b->n_batch);
        full = malloc(rows * V * sizeof *full);
        if (!full)
            return err_set(err, ERR_ENV, "%s: out of memory for %zu x %zu logits of forward_last",
                           b->ops->name, rows, V);
    }
    b->tap_n = n;
    for (int done = 0; done < n; done += b->n_batch) {
        const int c = n - done < b->n_batch ? n - done : b->n_batch;
        b->tap_off = done;
        /* every chunk's last row lands in logits; the final chunk's stays */
        if (full) {
            rc = b->ops->forward(b, tokens + done, c, pos0 + done, full, err);
            if (!rc)
                memcpy(logits, full + (size_t)(c - 1) * V, V * sizeof *logits);
        } else {
            rc = b->ops->forward_last(b, tokens + done, c, pos0 + done, logits, err);
        }
        if (rc)
            goto done;
        b->n_past += c;
    }
    b->forwards++;
    b->tokens += (uint64_t)n;
done:
    free(full);
    return rc;
}

int backend_truncate(struct backend *b, int n_pos, struct gate_err *err)
{
    if (n_pos < 0 || n_pos > b->n_past)
        return err_set(err, ERR_INPUT,
                       "%s: cannot truncate the cache to %d positions (it holds"
                       " %d)",
                       b->ops->name, n_pos, b->n_past);
    int rc = b->ops->truncate ? b->ops->truncate(b, n_pos, err) : 0;
    if (!rc)
        b->n_past = n_pos; /* later positions are overwritten by the next forward */
    return rc;
}

int backend_records_taps(const struct backend *b)
{
    return !b->ops->no_taps;
}

void backend_set_taps(struct backend *b, const struct backend_taps *taps)
{
    b->taps = taps;
}

void backend_set_faults(struct backend *b, const struct fault_set *faults)
{
    memset(&b->faults, 0, sizeof b->faults);
    if (!faults)
        return;
    b->faults = *faults;
    if (b->faults.n < 0)
        b->faults.n = 0;
    if (b->faults.n > FAULT_MAX)
        b->faults.n = FAULT_MAX;
}

void backend_info(const struct backend *b, struct backend_info *out)
{
    memset(out, 0, sizeof *out);
    b->ops->info(b, out);
    out->forwards = b->forwards;
    out->tokens = b->tokens;
}

int backend_device(const struct backend *b, struct backend_device *out, struct gate_err *err)
{
    return b->ops->describe(out, err);
}

static backend_close_fn close_observer;
static void *close_observer_ctx;

void backend_set_close_observer(backend_close_fn fn, void *ctx)
{
    close_observer = fn;
    close_observer_ctx = ctx;
}

void backend_close(struct backend *b)
{
    if (!b)
        return;
    if (close_observer)
        close_observer(close_observer_ctx, b);
    b->ops->close(b);
}
