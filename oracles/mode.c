/* mode.c — the execution paths under test (decode, prefill, chat) and the judge's batched run.
 *
 * Taps: a backend records taps per forward call, laid out for that call's tokens. To give the
 * oracles one picture of the whole sequence, mode_run_kept() points the backend at scratch
 * arrays sized for the longest call and moves each call's rows to their positions (struct rows);
 * with a struct mode_keep, only the kept positions' logits and hidden states (issue 26 §2).
 * Start reading: mode_run_kept().
 */
#include "oracles/mode.h"

#include "base/detmath.h"
#include "oracles/judgecache.h"

#include <jansson.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"

/* The paths; the backends are engine/backend.c's one list (backend_name()). */
static const char *PATHS[] = {"decode", "prefill", "chat"};
#define N_PATHS (int)(sizeof PATHS / sizeof PATHS[0])

/* "a, b, c" from names(i) for i < n, for error text. */
static void join(char *buf, size_t n, const char *(*names)(int), int count)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < count && at < n; i++) {
        int w = snprintf(buf + at, n - at, "%s%s", i ? ", " : "", names(i));
        at += w > 0 ? (size_t)w : 0;
    }
}

static const char *path_at(int i)
{
    return PATHS[i];
}

/* "exec.<engine>.<path>": an engine gate did not build (docs/exec.md). 1 when text has the
 * exec prefix (parsed or refused into err), 0 when it is not an exec mode. */
static int parse_exec(const char *text, struct mode *out, int *rc, struct gate_err *err)
{
    if (!text || strncmp(text, "exec.", 5))
        return 0;
    const char *name = text + 5, *dot = strchr(name, '.');
    const size_t len = dot ? (size_t)(dot - name) : 0;
    int pi = -1;
    for (int i = 0; dot && i < N_PATHS; i++)
        if (!strcmp(dot + 1, PATHS[i]))
            pi = i;
    int ok = len >= 1 && len < sizeof out->engine && pi >= 0;
    for (size_t i = 0; ok && i < len; i++)
        ok = isalnum((unsigned char)name[i]) || name[i] == '-' || name[i] == '_';
    if (!ok) {
        *rc = err_set(err, ERR_INPUT,
                      "unknown mode '%s' (an exec mode is exec.ENGINE.PATH with ENGINE 1-%d"
                      " letters, digits, '-' or '_' and PATH one of decode, prefill, chat)",
                      text, (int)sizeof out->engine - 1);
        return 1;
    }
    snprintf(out->backend, sizeof out->backend, "%s", BACKEND_EXTERNAL);
    memcpy(out->engine, name, len);
    out->engine[len] = '\0';
    out->path = (enum mode_path)pi;
    *rc = 0;
    return 1;
}

int mode_parse(const char *text, struct mode *out, struct gate_err *err)
{
    memset(out, 0, sizeof *out);
    int erc = 0;
    if (parse_exec(text, out, &erc, err))
        return erc;
    const char *dot = text ? strchr(text, '.') : NULL;
    int bi = -1, pi = -1;
    for (int i = 0; dot && i < backend_count(); i++)
        if (strlen(backend_name(i)) == (size_t)(dot - text) &&
            !strncmp(text, backend_name(i), (size_t)(dot - text)))
            bi = i;
    for (int i = 0; dot && i < N_PATHS; i++)
        if (!strcmp(dot + 1, PATHS[i]))
            pi = i;
    if (bi < 0 || pi < 0) {
        char backends[96], paths[96];
        join(backends, sizeof backends, backend_name, backend_count());
        join(paths, sizeof paths, path_at, N_PATHS);
        return err_set(err, ERR_INPUT,
                       "unknown mode '%s' (modes are BACKEND.PATH with BACKEND"
                       " one of %s and PATH one of %s)",
                       text ? text : "(null)", backends, paths);
    }
    snprintf(out->backend, sizeof out->backend, "%s", backend_name(bi));
    out->path = (enum mode_path)pi;
    return 0;
}

int mode_count(void)
{
    return backend_count() * N_PATHS;
}

int mode_index(const struct mode *m)
{
    const int bi = backend_index(m->backend);
    if (bi < 0 || (int)m->path < 0 || (int)m->path >= N_PATHS)
        return -1;
    return bi * N_PATHS + (int)m->path;
}

int mode_at(int i, struct mode *out)
{
    memset(out, 0, sizeof *out);
    if (i < 0 || i >= mode_count())
        return -1;
    snprintf(out->backend, sizeof out->backend, "%s", backend_name(i / N_PATHS));
    out->path = (enum mode_path)(i % N_PATHS);
    return 0;
}

int mode_known(const char *text)
{
    struct mode m;
    return mode_parse(text, &m, NULL) == 0;
}

const char *mode_path_name(enum mode_path p)
{
    return (p >= 0 && (int)p < N_PATHS) ? PATHS[p] : "unknown";
}

void mode_format(const struct mode *m, char *buf, size_t n)
{
    char t[64]; /* "exec.<engine>.prefill" fits; cut to n below */
    if (m->engine[0])
        snprintf(t, sizeof t, "exec.%.24s.%s", m->engine, mode_path_name(m->path));
    else
        snprintf(t, sizeof t, "%.16s.%s", m->backend, mode_path_name(m->path));
    const size_t len = strlen(t) < n ? strlen(t) : n - 1;
    memcpy(buf, t, len);
    buf[len] = '\0';
}

int mode_open(struct backend **out, const struct mode *mode, const struct model *m, int n_ctx,
              int n_threads, const struct fault_set *faults, struct gate_err *err)
{
    return mode_open_batch(out, mode, m, n_ctx, n_ctx, n_threads, faults, err);
}

int mode_open_batch(struct backend **out, const struct mode *mode, const struct model *m, int n_ctx,
                    int n_batch, int n_threads, const struct fault_set *faults,
                    struct gate_err *err)
{
    *out = NULL;
    char name[32];
    mode_format(mode, name, sizeof name);
    if (!backend_find(mode->backend))
        return err_set(err, ERR_ENV,
                       "mode %s cannot run on this host: backend '%s' is not in"
                       " this build",
                       name, mode->backend);
    /* the faults are copied into the backend (backend_set_faults); change them later with
     * backend_set_faults(), never by rewriting *faults */
    if (n_batch < 1 || n_batch > n_ctx)
        return err_set(err, ERR_INPUT, "mode %s: a batch of %d tokens is outside 1..%d", name,
                       n_batch, n_ctx);
    struct backend_config cfg = {.n_threads = n_threads,
                                 .n_ctx = n_ctx,
                                 .n_batch = n_batch,
                                 .faults = faults,
                                 .kv_f16 = mode->kv_f16,
                                 .prefill = mode->prefill,
                                 .session = mode->session};
    for (int k = 0; k < KNOB_COUNT; k++)
        cfg.knob[k] = mode->knob[k];
    if (mode->engine[0] && !mode->session)
        return err_set(err, ERR_INPUT,
                       "mode %s names engine '%s' but no engine session reached it (the"
                       " ladder's engines: entry starts one per cell)",
                       name, mode->engine);
    return backend_open(out, mode->backend, m, &cfg, err);
}

static void judges_add(const struct backend *b);

int mode_open_judge(struct backend **out, const struct model *m, int n_ctx, int n_threads,
                    struct gate_err *err)
{
    return mode_open_judge_rounded(out, m, n_ctx, n_threads, "", err);
}

int mode_open_judge_rounded(struct backend **out, const struct model *m, int n_ctx, int n_threads,
                            const char *emulate, struct gate_err *err)
{
    return mode_open_judge_batch(out, m, n_ctx, n_ctx, n_threads, emulate, err);
}

int mode_open_judge_batch(struct backend **out, const struct model *m, int n_ctx, int n_batch,
                          int n_threads, const char *emulate, struct gate_err *err)
{
    *out = NULL;
    if (n_batch < 1 || n_batch > n_ctx)
        return err_set(err, ERR_INPUT, "the judge's batch of %d tokens is outside 1..%d", n_batch,
                       n_ctx);
    /* emulate "" for the judge: GATE_REF_EMULATE in the environment never changes it */
    struct backend_config cfg = {.n_threads = n_threads,
                                 .n_ctx = n_ctx,
                                 .n_batch = n_batch,
                                 .faults = NULL,
                                 .emulate = emulate ? emulate : ""};
    int rc = backend_open(out, backend_judge_name(), m, &cfg, err);
    if (!rc)
        judges_add(*out);
    return rc;
}

/* ---- what ran ---------------------------------------------------------------------------- */

/* The judges currently open (so the recorder can leave them out); a small fixed table: a gate
 * holds at most a few judges at once. */
#define MAX_JUDGES 16
static const struct backend *open_judges[MAX_JUDGES];
static struct mode_ran *recorder;

static void judges_add(const struct backend *b)
{
    for (int i = 0; i < MAX_JUDGES; i++)
        if (!open_judges[i]) {
            open_judges[i] = b;
            return;
        }
}

static void on_close(void *ctx, const struct backend *b)
{
    (void)ctx;
    for (int i = 0; i < MAX_JUDGES; i++)
        if (open_judges[i] == b) {
            open_judges[i] = NULL;
            return;
        }
    if (!recorder)
        return;
    struct backend_info info;
    memset(&info, 0, sizeof info);
    backend_info(b, &info);
    struct mode_ran *r = recorder;
    char item[24];
    snprintf(item, sizeof item, ",%s,", info.backend);
    char list[80];
    snprintf(list, sizeof list, ",%s,", r->backends);
    if (!strstr(list, item) && strlen(r->backends) + strlen(info.backend) + 2 < sizeof r->backends)
        snprintf(r->backends + strlen(r->backends), sizeof r->backends - strlen(r->backends),
                 "%s%s", r->backends[0] ? "," : "", info.backend);
    if (!r->n_subjects)
        snprintf(r->device, sizeof r->device, "%s", info.device);
    if (!r->engine[0] && info.engine[0])
        snprintf(r->engine, sizeof r->engine, "%s", info.engine);
    /* the KV cache: the backend's own word, set by its open; an external engine's (exec) is its
     * own business, which gate cannot see, so none is recorded for it */
    const char *kv = b->kv_f16 ? "f16" : "f32";
    const int external = backend_is_external(info.backend);
    if (!external && !r->kv[0])
        snprintf(r->kv, sizeof r->kv, "%s", kv);
    else if (!external && strcmp(r->kv, kv))
        snprintf(r->kv, sizeof r->kv, "mixed");
    const char *pf = b->prefill[0] ? b->prefill : "f32";
    if (!external && !r->prefill[0])
        snprintf(r->prefill, sizeof r->prefill, "%s", pf);
    else if (!external && strcmp(r->prefill, pf))
        snprintf(r->prefill, sizeof r->prefill, "mixed");
    for (int k = 0; k < KNOB_COUNT; k++) {
        if (b->knob[k][0] && !r->knob[k][0])
            snprintf(r->knob[k], sizeof r->knob[k], "%s", b->knob[k]);
        else if (b->knob[k][0] && strcmp(r->knob[k], b->knob[k]))
            snprintf(r->knob[k], sizeof r->knob[k], "mixed");
    }
    if (!r->isa[0] && b->isa[0])
        snprintf(r->isa, sizeof r->isa, "%s", b->isa);
    r->n_subjects++;
    r->forwards += info.forwards;
    r->tokens += info.tokens;
    r->kernel_launches += info.kernel_launches;
    r->device_bytes += info.device_bytes;
}

void mode_ran_begin(struct mode_ran *r)
{
    memset(r, 0, sizeof *r);
    recorder = r;
    backend_set_close_observer(on_close, NULL);
}

void mode_ran_end(void)
{
    recorder = NULL;
}

json_t *mode_ran_json(const struct mode_ran *r)
{
    json_t *o =
        json_pack("{s:s, s:s, s:i, s:I, s:I, s:I, s:I}", "backend", r->backends, "device",
                  r->device, "subjects", r->n_subjects, "forwards", (json_int_t)r->forwards,
                  "tokens", (json_int_t)r->tokens, "kernel_launches",
                  (json_int_t)r->kernel_launches, "device_bytes", (json_int_t)r->device_bytes);
    /* an external engine's handshake (exec): what ran, as the engine named itself */
    if (o && r->engine[0])
        json_object_set_new(o, "engine", json_string(r->engine));
    if (o && r->kv[0]) /* the KV cache the subjects reported; gates.c holds it to settings.kv */
        json_object_set_new(o, "kv", json_string(r->kv));
    if (o && r->prefill[0]) /* the projections' precision; gates.c holds it to settings.prefill */
        json_object_set_new(o, "prefill", json_string(r->prefill));
    /* the kernel generations (recorded, not judged: each holds one results contract) */
    for (int k = 0; o && k < KNOB_COUNT; k++)
        if (r->knob[k][0])
            json_object_set_new(o, BACKEND_KNOBS[k].key, json_string(r->knob[k]));
    if (o && r->isa[0]) /* the instruction set it ran; gates.c holds it to settings.isa */
        json_object_set_new(o, "isa", json_string(r->isa));
    return o;
}

/* ---- running a path -------------------------------------------------------------------------- */

/* Where a run's rows go: every forward call's logits and taps, moved to their rows of the
 * caller's arrays (struct mode_keep: the kept rows only, or every row). */
struct rows {
    const struct mode_keep *keep; /* NULL: every position, logits written in place */
    float *logits;                /* (keep ? keep->n : n, V) */
    float *scratch;               /* keep: (max_call, V), one call's logits before the keep */
    size_t V;
    int have_taps;
    struct backend_taps call;        /* scratch, (n_layer, max_call, ...) for the current call */
    const struct backend_taps *full; /* hidden (n_layer, n_rows, E); routing (n_layer, n, ...) */
    int n_layer, n, n_rows, k;
    size_t E;
};

static void rows_free(struct rows *r)
{
    free(r->scratch);
    free(r->call.hidden);
    free(r->call.experts);
    free(r->call.expert_w);
    free(r->call.router_kth);
    free(r->call.router_k1th);
    free((void *)r->call.force_experts);
    free(r->call.force_deficit);
    memset(r, 0, sizeof *r);
}

/* Scratch for calls of at most max_call tokens: the logits when rows are kept, the taps when
 * asked for. */
static int rows_init(struct rows *r, struct backend *b, int n, int max_call,
                     const struct mode_keep *keep, float *logits, const struct backend_taps *full,
                     struct gate_err *err)
{
    const struct model_hparams *hp = &b->model->hp;
    memset(r, 0, sizeof *r);
    r->keep = keep;
    r->logits = logits;
    r->V = hp->n_vocab;
    r->full = full;
    r->n_layer = (int)hp->n_layer;
    r->n = n;
    r->n_rows = keep ? keep->n : n;
    r->k = hp->n_expert > 0 ? (int)hp->n_expert_used : 1;
    r->E = hp->n_embd;
    if (keep && keep->hidden_all && !(full && full->hidden)) /* it would stay unwritten */
        return err_set(err, ERR_INPUT,
                       "every position's hidden state asked for, but the run records no hidden"
                       " states");
    for (int i = 0; keep && i < keep->n; i++)
        if (keep->pos[i] < 0 || keep->pos[i] >= n || (i && keep->pos[i] <= keep->pos[i - 1]))
            return err_set(err, ERR_INPUT,
                           "kept row %d is position %d: kept positions must increase within"
                           " 0..%d",
                           i, keep->pos[i], n - 1);
    const size_t ln = (size_t)r->n_layer * (size_t)max_call;
    int ok = 1;
    if (keep)
        ok &= (r->scratch = malloc((size_t)max_call * r->V * sizeof(float))) != NULL;
    if (full) {
        r->have_taps = 1;
        if (full->hidden)
            ok &= (r->call.hidden = calloc(ln * r->E, sizeof(float))) != NULL;
        if (full->experts)
            ok &= (r->call.experts = calloc(ln * (size_t)r->k, sizeof(int32_t))) != NULL;
        if (full->expert_w)
            ok &= (r->call.expert_w = calloc(ln * (size_t)r->k, sizeof(float))) != NULL;
        if (full->router_kth)
            ok &= (r->call.router_kth = calloc(ln, sizeof(float))) != NULL;
        if (full->router_k1th)
            ok &= (r->call.router_k1th = calloc(ln, sizeof(float))) != NULL;
        if (full->force_experts)
            ok &= (r->call.force_experts = calloc(ln * (size_t)r->k, sizeof(int32_t))) != NULL;
        if (full->force_deficit)
            ok &= (r->call.force_deficit = calloc(ln, sizeof(float))) != NULL;
        r->call.force_tol = full->force_tol;
    }
    if (!ok) {
        rows_free(r);
        return err_set(err, ERR_ENV,
                       "out of memory for one call's logits and taps (%d tokens, %d layers)",
                       max_call, (int)hp->n_layer);
    }
    return 0;
}

/* The first kept row at or after position p (keep->n when none). */
static int first_row(const struct mode_keep *keep, int p)
{
    int lo = 0, hi = keep->n;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (keep->pos[mid] < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Before a call of c tokens at p0: its rows of the replay's forced routes. */
static void rows_force_in(struct rows *r, int p0, int c)
{
    const size_t k = (size_t)r->k;
    for (int l = 0; r->call.force_experts && l < r->n_layer; l++)
        memcpy((int32_t *)r->call.force_experts + (size_t)l * (size_t)c * k,
               r->full->force_experts + ((size_t)l * (size_t)r->n + (size_t)p0) * k,
               (size_t)c * k * sizeof(int32_t));
}

/* Move the rows of the call just made (c tokens at p0) to their places: the kept rows of the
 * logits and the hidden state, every row of the routing taps. */
static void rows_call(struct rows *r, int p0, int c)
{
    const size_t V = r->V, k = (size_t)r->k;
    const int i0 = r->keep ? first_row(r->keep, p0) : p0;
    int i1 = i0; /* kept rows [i0, i1) lie in this call */
    while (r->keep ? i1 < r->keep->n && r->keep->pos[i1] < p0 + c : i1 < p0 + c)
        i1++;
    for (int i = i0; r->keep && i < i1; i++)
        memcpy(r->logits + (size_t)i * V, r->scratch + (size_t)(r->keep->pos[i] - p0) * V,
               V * sizeof(float));
    if (!r->have_taps)
        return;
    const struct backend_taps *f = r->full, *t = &r->call;
    for (int l = 0; l < r->n_layer; l++) {
        const size_t src = (size_t)l * (size_t)c, dst = (size_t)l * (size_t)r->n + (size_t)p0;
        for (int i = i0; f->hidden && i < i1; i++) {
            const int at = r->keep ? r->keep->pos[i] - p0 : i - p0;
            memcpy(f->hidden + ((size_t)l * (size_t)r->n_rows + (size_t)i) * r->E,
                   t->hidden + (src + (size_t)at) * r->E, r->E * sizeof(float));
        }
        if (f->hidden && r->keep && r->keep->hidden_all)
            memcpy(r->keep->hidden_all + dst * r->E, t->hidden + src * r->E,
                   (size_t)c * r->E * sizeof(float));
        if (f->experts)
            memcpy(f->experts + dst * k, t->experts + src * k, (size_t)c * k * 4);
        if (f->expert_w)
            memcpy(f->expert_w + dst * k, t->expert_w + src * k, (size_t)c * k * 4);
        if (f->router_kth)
            memcpy(f->router_kth + dst, t->router_kth + src, (size_t)c * 4);
        if (f->router_k1th)
            memcpy(f->router_k1th + dst, t->router_k1th + src, (size_t)c * 4);
        if (f->force_deficit)
            memcpy(f->force_deficit + dst, t->force_deficit + src, (size_t)c * 4);
    }
}

/* One forward call of c tokens at p0, its rows moved by r. */
static int step(struct backend *b, struct rows *r, const int32_t *tokens, int p0, int c,
                struct gate_err *err)
{
    float *out = r->keep ? r->scratch : r->logits + (size_t)p0 * r->V;
    if (r->have_taps)
        rows_force_in(r, p0, c);
    int rc = backend_forward(b, tokens + p0, c, p0, out, err);
    if (!rc)
        rows_call(r, p0, c);
    return rc;
}

static int decode_range(struct backend *b, struct rows *r, const int32_t *tokens, int lo, int hi,
                        struct gate_err *err)
{
    for (int t = lo; t < hi; t++) {
        int rc = step(b, r, tokens, t, 1, err);
        if (rc)
            return rc;
    }
    return 0;
}

static int check_turns(const int *turn_ends, int n_turns, int n, struct gate_err *err)
{
    if (!turn_ends || n_turns < 1)
        return err_set(err, ERR_INPUT, "chat path needs turn boundaries (got none)");
    for (int i = 0; i < n_turns; i++)
        if (turn_ends[i] <= (i ? turn_ends[i - 1] : 0) || turn_ends[i] > n)
            return err_set(err, ERR_INPUT,
                           "chat turn %d ends at %d: boundaries must increase"
                           " strictly within 1..%d",
                           i, turn_ends[i], n);
    if (turn_ends[n_turns - 1] != n)
        return err_set(err, ERR_INPUT, "chat turns end at %d but the sequence has %d tokens",
                       turn_ends[n_turns - 1], n);
    return 0;
}

int mode_prefill_split(uint64_t seed, int n_prefill, int *chunks, int max_chunks)
{
    uint64_t s = seed ^ 0x5EED5EEDULL;
    int k = 0;
    for (int left = n_prefill; left > 0 && k < max_chunks; k++) {
        const uint64_t r = det_splitmix64(&s);
        int len;
        switch (k % 4) {
        case 0:
            len = 1 + (int)(r % 8);
            break;
        case 1:
            len = 17 + (int)(r % 30);
            break;
        case 2:
            len = 16 * (1 + (int)(r % 4)) + 1 + (int)((r >> 8) % 15);
            break;
        default:
            len = 32 + (int)(r % 64);
        }
        if (len > left || k == max_chunks - 1)
            len = left;
        chunks[k] = len;
        left -= len;
    }
    return k;
}

int mode_run_taps(struct backend *b, enum mode_path path, const int32_t *tokens, int n,
                  const int *turn_ends, int n_turns, float *logits, const struct backend_taps *taps,
                  struct gate_err *err)
{
    return mode_run_split(b, path, tokens, n, turn_ends, n_turns, NULL, 0, logits, taps, err);
}

int mode_run_split(struct backend *b, enum mode_path path, const int32_t *tokens, int n,
                   const int *turn_ends, int n_turns, const int *chunks, int n_chunks,
                   float *logits, const struct backend_taps *taps, struct gate_err *err)
{
    return mode_run_kept(b, path, tokens, n, turn_ends, n_turns, chunks, n_chunks, NULL, logits,
                         taps, err);
}

int mode_longest_call(enum mode_path path, int n, const int *turn_ends, int n_turns,
                      const int *chunks, int n_chunks)
{
    int longest = 1;
    for (int i = 0; path == MODE_PREFILL && chunks && i < n_chunks; i++)
        if (chunks[i] > longest)
            longest = chunks[i];
    if (path == MODE_PREFILL && !chunks)
        longest = n / 2 > 0 ? n / 2 : 1;
    for (int i = 0; path == MODE_CHAT && i < n_turns; i += 2)
        if (turn_ends[i] - (i ? turn_ends[i - 1] : 0) > longest)
            longest = turn_ends[i] - (i ? turn_ends[i - 1] : 0);
    return longest;
}

int mode_run_kept(struct backend *b, enum mode_path path, const int32_t *tokens, int n,
                  const int *turn_ends, int n_turns, const int *chunks, int n_chunks,
                  const struct mode_keep *keep, float *logits, const struct backend_taps *taps,
                  struct gate_err *err)
{
    int rc;
    if (n < 1)
        return err_set(err, ERR_INPUT, "a mode run needs at least one token (got %d)", n);
    if (path == MODE_CHAT && (rc = check_turns(turn_ends, n_turns, n, err)))
        return rc;
    int batched = 0;
    for (int i = 0; chunks && i < n_chunks; i++) {
        if (chunks[i] < 1)
            return err_set(err, ERR_INPUT, "prefill chunk %d has length %d: lengths are >= 1", i,
                           chunks[i]);
        batched += chunks[i];
    }
    if (chunks && path == MODE_PREFILL && (n_chunks < 1 || batched > n))
        return err_set(err, ERR_INPUT,
                       "prefill chunks cover %d tokens in %d chunks: they must cover 1..%d",
                       batched, n_chunks, n);
    /* the longest forward call the path makes: the scratch's rows */
    const int longest = mode_longest_call(path, n, turn_ends, n_turns, chunks, n_chunks);
    if ((rc = backend_truncate(b, 0, err)))
        return rc;
    struct rows r;
    if ((rc = rows_init(&r, b, n, longest, keep, logits, taps, err)))
        return rc;
    if (taps)
        backend_set_taps(b, &r.call);
    switch (path) {
    case MODE_DECODE:
        rc = decode_range(b, &r, tokens, 0, n, err);
        break;
    case MODE_PREFILL: {
        int half = n / 2 > 0 ? n / 2 : 1;
        if (chunks) {
            half = 0;
            for (int i = 0; i < n_chunks && !rc; half += chunks[i], i++)
                rc = step(b, &r, tokens, half, chunks[i], err);
        } else {
            rc = step(b, &r, tokens, 0, half, err);
        }
        if (!rc)
            rc = decode_range(b, &r, tokens, half, n, err);
        break;
    }
    case MODE_CHAT:
        for (int i = 0, lo = 0; i < n_turns && !rc; lo = turn_ends[i], i++)
            rc = (i % 2 == 0) ? step(b, &r, tokens, lo, turn_ends[i] - lo, err)
                              : decode_range(b, &r, tokens, lo, turn_ends[i], err);
        break;
    default:
        rc = err_set(err, ERR_INPUT, "unknown mode path %d", (int)path);
    }
    if (taps)
        backend_set_taps(b, NULL);
    rows_free(&r);
    return rc;
}

int mode_run(struct backend *b, enum mode_path path, const int32_t *tokens, int n,
             const int *turn_ends, int n_turns, float *logits, struct gate_err *err)
{
    return mode_run_taps(b, path, tokens, n, turn_ends, n_turns, logits, NULL, err);
}

int mode_forward_kept(struct backend *b, const int32_t *tokens, int n, const struct mode_keep *keep,
                      float *logits, const struct backend_taps *taps, struct gate_err *err)
{
    int rc;
    if (n < 1)
        return err_set(err, ERR_INPUT, "the judge needs at least one token (got %d)", n);
    if ((rc = backend_truncate(b, 0, err)))
        return rc;
    if (!keep) { /* one call: the backend records taps laid out for exactly these n tokens */
        backend_set_taps(b, taps);
        rc = backend_forward(b, tokens, n, 0, logits, err);
        backend_set_taps(b, NULL);
        return rc;
    }
    /* calls of n_batch tokens: the chunks backend_forward would make of one call */
    const int chunk = b->n_batch < n ? b->n_batch : n;
    struct rows r;
    if ((rc = rows_init(&r, b, n, chunk, keep, logits, taps, err)))
        return rc;
    if (taps)
        backend_set_taps(b, &r.call);
    for (int done = 0; !rc && done < n; done += chunk)
        rc = step(b, &r, tokens, done, n - done < chunk ? n - done : chunk, err);
    if (taps)
        backend_set_taps(b, NULL);
    rows_free(&r);
    return rc;
}

int mode_judge(struct backend *b, const int32_t *tokens, int n, float *logits,
               const struct backend_taps *taps, struct gate_err *err)
{
    return mode_judge_kept(b, tokens, n, NULL, logits, taps, err);
}

int mode_judge_kept(struct backend *b, const int32_t *tokens, int n, const struct mode_keep *keep,
                    float *logits, const struct backend_taps *taps, struct gate_err *err)
{
    if (n < 1)
        return err_set(err, ERR_INPUT, "the judge needs at least one token (got %d)", n);
    /* a plain run's result may come from the judge cache instead (oracles/judgecache.h:
     * verified, keyed by this binary, the model's bytes, every input and the kept rows) */
    return judgecache_judge(b, tokens, n, keep, logits, taps, err);
}

/* ---- sequences --------------------------------------------------------------------------------
 */

void mode_tokens(uint64_t seed, uint32_t n_vocab, int n, int32_t *out)
{
    uint64_t s = seed;
    for (int i = 0; i < n; i++)
        out[i] = (int32_t)(det_splitmix64(&s) % (n_vocab ? n_vocab : 1));
}

/* The conversation: short, plain ASCII, three questions that build on each other. */
static const struct chat_msg CHAT[] = {
    {"user", "Name the three primary colours of paint, and say why painters call them primary."},
    {"assistant", "Red, yellow and blue: no mixture of other paints gives them."},
    {"user", "Which of the three is called the warmest, and which the coolest?"},
    {"assistant", "Red is the warmest and blue the coolest."},
    {"user", "Answer with the warmest one in capitals, nothing else."},
    {"assistant", "RED"},
};
#define CHAT_N (int)(sizeof CHAT / sizeof CHAT[0])

int mode_chat_render(const struct tok *t, const struct chat_msg *msgs, int n_msgs, int32_t **ids,
                     int *n, int **turn_ends, int *n_turns, struct gate_err *err)
{
    char *text = NULL;
    int32_t *v = NULL;
    int *ends = NULL, nv = 0, rc;
    *ids = NULL;
    *turn_ends = NULL;
    *n = *n_turns = 0;
    const int32_t im_start = tok_find(t, "<|im_start|>");
    if (im_start < 0)
        return err_set(err, ERR_INPUT,
                       "the tokenizer has no <|im_start|> token: it cannot"
                       " render a ChatML conversation");
    if ((rc = chat_format(msgs, n_msgs, 0, 0, &text, err)))
        goto done;
    if ((rc = tok_encode(t, text, strlen(text), 1, &v, &nv, err)))
        goto done;
    ends = calloc(n_msgs, sizeof *ends);
    if (!ends) {
        rc = err_set(err, ERR_ENV, "chat: out of memory for the turn ends");
        goto done;
    }
    int seg = -1;
    for (int i = 0; i < nv; i++)
        if (v[i] == im_start) {
            if (seg >= n_msgs - 1 || (seg < 0 && i != 0))
                break;
            if (seg >= 0)
                ends[seg] = i;
            seg++;
        }
    if (seg != n_msgs - 1 || v[0] != im_start) {
        rc = err_set(err, ERR_INPUT,
                     "the chat rendering did not cut into %d turns at"
                     " <|im_start|> (found %d)",
                     n_msgs, seg + 1);
        goto done;
    }
    ends[n_msgs - 1] = nv;
    *ids = v;
    *n = nv;
    *turn_ends = ends;
    *n_turns = n_msgs;
    v = NULL;
    ends = NULL;
done:
    free(text);
    free(v);
    free(ends);
    return rc;
}

int mode_chat_tokens(const struct tok *t, int32_t **ids, int *n, int **turn_ends, int *n_turns,
                     struct gate_err *err)
{
    return mode_chat_render(t, CHAT, CHAT_N, ids, n, turn_ends, n_turns, err);
}

static int chat_fallback_seeded(uint64_t seed, uint32_t n_vocab, int32_t **ids, int *n,
                                int **turn_ends, int *n_turns, struct gate_err *err)
{
    static const int LENS[CHAT_N] = {40, 24, 36, 20, 32, 16};
    int total = 0;
    for (int i = 0; i < CHAT_N; i++)
        total += LENS[i];
    *ids = malloc((size_t)total * sizeof **ids);
    *turn_ends = malloc(CHAT_N * sizeof **turn_ends);
    if (!*ids || !*turn_ends) {
        free(*ids);
        free(*turn_ends);
        *ids = NULL;
        *turn_ends = NULL;
        return err_set(err, ERR_ENV, "chat: out of memory for the fallback conversation");
    }
    mode_tokens(seed, n_vocab, total, *ids);
    for (int i = 0, at = 0; i < CHAT_N; i++)
        (*turn_ends)[i] = (at += LENS[i]);
    *n = total;
    *n_turns = CHAT_N;
    return 0;
}

int mode_chat_fallback(uint32_t n_vocab, int32_t **ids, int *n, int **turn_ends, int *n_turns,
                       struct gate_err *err)
{
    return chat_fallback_seeded(MODE_CHAT_SEED, n_vocab, ids, n, turn_ends, n_turns, err);
}

int mode_chat_msgs_for_model(const struct model *m, const struct chat_msg *msgs, int n_msgs,
                             uint64_t fallback_seed, int32_t **ids, int *n, int **turn_ends,
                             int *n_turns, int *fallback, struct gate_err *err)
{
    struct tok *t = NULL;
    struct gate_err quiet = {0};
    *fallback = 0;
    if (m->gguf && !tok_load(&t, m->gguf, &quiet)) {
        int rc = mode_chat_render(t, msgs, n_msgs, ids, n, turn_ends, n_turns, &quiet);
        tok_free(t);
        if (!rc) {
            for (int i = 0; i < *n; i++)
                if ((*ids)[i] < 0 || (uint32_t)(*ids)[i] >= m->hp.n_vocab) {
                    free(*ids);
                    free(*turn_ends);
                    goto fallback; /* tokenizer larger than the embedding table */
                }
            return 0;
        }
    }
fallback:
    *fallback = 1;
    return chat_fallback_seeded(fallback_seed, m->hp.n_vocab, ids, n, turn_ends, n_turns, err);
}

int mode_chat_for_model(const struct model *m, int32_t **ids, int *n, int **turn_ends, int *n_turns,
                        int *fallback, struct gate_err *err)
{
    return mode_chat_msgs_for_model(m, CHAT, CHAT_N, MODE_CHAT_SEED, ids, n, turn_ends, n_turns,
                                    fallback, err);
}
