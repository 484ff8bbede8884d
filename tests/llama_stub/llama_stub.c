/* llama_stub.c — a stand-in for libllama (the functions of tests/llama_stub/llama.h and ggml.h)
 * so that adapters/llama_cpp.c can be built and tested without llama.cpp: the test-only shared
 * library libllama-stub.so, linked into gate-llama-stub (CMakeLists.txt). Its name starts with
 * "libllama" so the adapter's build id hashes it like the real library.
 *
 * It behaves like llama.cpp where the adapter depends on it, cheaply and predictably: a causal
 * "model" whose logits are a hash of the cached prefix (tests/llama_stub/llama_stub.h), a cache
 * for sequence 0 that a decode must continue exactly (llama.cpp's "inconsistent positions" is -1
 * here too), logits only for the batch entries that asked for them, a context that holds what it
 * says it holds. It checks what the adapter hands it (positions, sequence ids, batch size,
 * token ids) and refuses a bad batch the way llama.cpp does, with an error through the log
 * callback. Failures are injected through $GATE_STUB_FAIL (llama_stub.h).
 * Invariant: nothing here writes to stdout unless asked to (GATE_STUB_FAIL=stdout).
 * Start reading: llama_decode().
 */
#include "llama_stub.h"
#include "llama.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct llama_vocab {
    int32_t n_tokens;
};

struct llama_model {
    struct llama_vocab vocab;
};

struct llama_memory_i {
    int32_t n;      /* positions cached for sequence 0 */
    int32_t *token; /* n_ctx ids */
    uint32_t *hash; /* n_ctx running hashes: hash[p] covers tokens 0..p */
};

struct llama_context {
    const struct llama_model *model;
    uint32_t n_ctx, n_batch, n_ubatch;
    struct llama_memory_i mem;
    float *logits;  /* n_batch x n_vocab: the last decode's rows */
    int8_t *have;   /* n_batch: row i was asked for */
    int32_t n_rows; /* rows of the last decode */
};

/* ---- the environment ---------------------------------------------------------------------- */

static struct {
    int read;
    long n_vocab; /* 0: not set */
    long n_ctx;   /* 0: not set */
    const char *sysinfo;
    int fail_load, fail_context, fail_seq_rm, stray_stdout;
    long fail_decode; /* the Nth decode fails (0: none) */
    long no_logits;   /* llama_get_logits_ith(I) is NULL (-1: none) */
    long decodes;     /* decode calls so far */
} g = {.no_logits = -1};

static ggml_log_callback g_log;
static void *g_log_user;

static void say(enum ggml_log_level level, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (g_log)
        g_log(level, text, g_log_user);
    else
        fputs(text, stderr);
}

static long env_long(const char *name, long lo, long hi)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) {
        fprintf(stderr, "llama-stub: %s='%s' is not an integer in %ld..%ld\n", name, v, lo, hi);
        abort(); /* a broken test setup, not a path under test */
    }
    return x;
}

static void read_env(void)
{
    if (g.read)
        return;
    g.read = 1;
    g.n_vocab = env_long("GATE_STUB_N_VOCAB", 1, 1 << 20);
    g.n_ctx = env_long("GATE_STUB_N_CTX", 1, 1 << 20);
    g.sysinfo = getenv("GATE_STUB_SYSINFO");
    const char *f = getenv("GATE_STUB_FAIL");
    char list[256];
    snprintf(list, sizeof list, "%s", f ? f : "");
    for (char *save = NULL, *w = strtok_r(list, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        if (!strcmp(w, "load"))
            g.fail_load = 1;
        else if (!strcmp(w, "context"))
            g.fail_context = 1;
        else if (!strcmp(w, "seq_rm"))
            g.fail_seq_rm = 1;
        else if (!strcmp(w, "stdout"))
            g.stray_stdout = 1;
        else if (!strncmp(w, "decode@", 7))
            g.fail_decode = strtol(w + 7, NULL, 10);
        else if (!strncmp(w, "logits@", 7))
            g.no_logits = strtol(w + 7, NULL, 10);
        else {
            fprintf(stderr, "llama-stub: unknown GATE_STUB_FAIL item '%s'\n", w);
            abort();
        }
    }
}

static void stray(const char *where)
{
    if (!g.stray_stdout)
        return;
    printf("llama-stub: stray text on stdout at %s\n", where);
    fflush(stdout);
}

/* ---- ggml ----------------------------------------------------------------------------------- */

const char *ggml_version(void)
{
    return LLAMA_STUB_GGML_VERSION;
}
const char *ggml_commit(void)
{
    return LLAMA_STUB_GGML_COMMIT;
}

const char *ggml_type_name(enum ggml_type type)
{
    return type == GGML_TYPE_F32 ? "f32" : type == GGML_TYPE_F16 ? "f16" : "?";
}

/* ---- llama: process ------------------------------------------------------------------------- */

const char *llama_version(void)
{
    return LLAMA_STUB_VERSION;
}

void llama_backend_init(void)
{
    read_env();
}

void llama_backend_free(void)
{
}

void llama_log_set(ggml_log_callback cb, void *user)
{
    g_log = cb;
    g_log_user = user;
}

const char *llama_print_system_info(void)
{
    read_env();
    return g.sysinfo ? g.sysinfo : LLAMA_STUB_SYSINFO;
}

const char *llama_flash_attn_type_name(enum llama_flash_attn_type t)
{
    return t == LLAMA_FLASH_ATTN_TYPE_AUTO       ? "auto"
           : t == LLAMA_FLASH_ATTN_TYPE_ENABLED  ? "enabled"
           : t == LLAMA_FLASH_ATTN_TYPE_DISABLED ? "disabled"
                                                 : "unknown";
}

/* llama.cpp's defaults for the fields the stand-in has */
struct llama_model_params llama_model_default_params(void)
{
    return (struct llama_model_params){.devices = NULL, .n_gpu_layers = 999, .use_extra_bufts = 1};
}

struct llama_context_params llama_context_default_params(void)
{
    return (struct llama_context_params){.n_ctx = 512,
                                         .n_batch = 2048,
                                         .n_ubatch = 512,
                                         .n_seq_max = 1,
                                         .n_threads = 4,
                                         .n_threads_batch = 4,
                                         .flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO,
                                         .type_k = GGML_TYPE_F16,
                                         .type_v = GGML_TYPE_F16,
                                         .embeddings = false,
                                         .offload_kqv = true,
                                         .no_perf = true,
                                         .op_offload = true};
}

/* ---- model and context ---------------------------------------------------------------------- */

struct llama_model *llama_model_load_from_file_ptr(FILE *file, struct llama_model_params p)
{
    read_env();
    int n_dev = 0;
    while (p.devices && p.devices[n_dev])
        n_dev++;
    fprintf(stderr, "llama-stub: model n_gpu_layers=%d devices=%s use_extra_bufts=%d\n",
            (int)p.n_gpu_layers,
            !p.devices ? "all"
            : n_dev    ? "some"
                       : "none",
            (int)p.use_extra_bufts);
    say(GGML_LOG_LEVEL_INFO, "llama-stub: info: loading\n");
    say(GGML_LOG_LEVEL_DEBUG, "llama-stub: debug: loading\n");
    say(GGML_LOG_LEVEL_WARN, "llama-stub: warn: this is a stub");
    say(GGML_LOG_LEVEL_CONT, " (continued)\n");
    stray("load");
    char magic[4] = {0};
    if (!file || fread(magic, 1, 4, file) != 4 || memcmp(magic, "GGUF", 4) != 0) {
        say(GGML_LOG_LEVEL_ERROR, "llama-stub: error: the file does not start with GGUF\n");
        return NULL;
    }
    if (g.fail_load) {
        say(GGML_LOG_LEVEL_ERROR, "llama-stub: error: load fails as GATE_STUB_FAIL asks\n");
        return NULL;
    }
    if (!g.n_vocab) {
        say(GGML_LOG_LEVEL_ERROR, "llama-stub: error: GATE_STUB_N_VOCAB is not set\n");
        return NULL;
    }
    struct llama_model *m = calloc(1, sizeof *m);
    if (m)
        m->vocab.n_tokens = (int32_t)g.n_vocab;
    return m;
}

void llama_model_free(struct llama_model *m)
{
    free(m);
}

const struct llama_vocab *llama_model_get_vocab(const struct llama_model *m)
{
    return &m->vocab;
}

int32_t llama_vocab_n_tokens(const struct llama_vocab *v)
{
    return v->n_tokens;
}

struct llama_context *llama_init_from_model(struct llama_model *m, struct llama_context_params p)
{
    fprintf(stderr,
            "llama-stub: context n_ctx=%u n_batch=%u n_ubatch=%u n_seq_max=%u threads=%d/%d "
            "type_k=%s type_v=%s flash_attn=%s embeddings=%d offload_kqv=%d op_offload=%d\n",
            p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max, (int)p.n_threads, (int)p.n_threads_batch,
            ggml_type_name(p.type_k), ggml_type_name(p.type_v),
            llama_flash_attn_type_name(p.flash_attn_type), (int)p.embeddings, (int)p.offload_kqv,
            (int)p.op_offload);
    if (g.fail_context) {
        say(GGML_LOG_LEVEL_ERROR, "llama-stub: error: no context, as GATE_STUB_FAIL asks\n");
        return NULL;
    }
    if (!m || p.n_ctx == 0 || p.n_batch == 0 || p.n_ubatch == 0)
        return NULL;
    struct llama_context *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->model = m;
    c->n_ctx = g.n_ctx ? (uint32_t)g.n_ctx : p.n_ctx;
    c->n_batch = p.n_batch < c->n_ctx ? p.n_batch : c->n_ctx; /* llama.cpp clamps it too */
    c->n_ubatch = p.n_ubatch < c->n_batch ? p.n_ubatch : c->n_batch;
    c->mem.token = calloc(c->n_ctx, sizeof *c->mem.token);
    c->mem.hash = calloc(c->n_ctx, sizeof *c->mem.hash);
    c->logits = calloc((size_t)c->n_batch * (size_t)m->vocab.n_tokens, sizeof *c->logits);
    c->have = calloc(c->n_batch, 1);
    if (!c->mem.token || !c->mem.hash || !c->logits || !c->have) {
        llama_free(c);
        return NULL;
    }
    return c;
}

void llama_free(struct llama_context *c)
{
    if (!c)
        return;
    free(c->mem.token);
    free(c->mem.hash);
    free(c->logits);
    free(c->have);
    free(c);
}

uint32_t llama_n_ctx(const struct llama_context *c)
{
    return c->n_ctx;
}
uint32_t llama_n_batch(const struct llama_context *c)
{
    return c->n_batch;
}
uint32_t llama_n_ubatch(const struct llama_context *c)
{
    return c->n_ubatch;
}

llama_memory_t llama_get_memory(const struct llama_context *c)
{
    return (llama_memory_t)&c->mem;
}

/* Remove positions [p0, p1) (p1 < 0: to the end) of sequence seq (< 0: any). */
bool llama_memory_seq_rm(llama_memory_t mem, llama_seq_id seq, llama_pos p0, llama_pos p1)
{
    if (seq > 0)
        return true; /* nothing is cached for other sequences */
    if (p0 < 0)
        p0 = 0;
    if (p1 >= 0 && p1 < mem->n)
        return false; /* a hole in the middle: llama.cpp refuses a partial removal like this */
    if (p0 >= mem->n)
        return true;
    if (p0 > 0 && g.fail_seq_rm)
        return false;
    mem->n = p0;
    return true;
}

/* ---- batches and decoding ------------------------------------------------------------------- */

struct llama_batch llama_batch_init(int32_t n, int32_t embd, int32_t n_seq_max)
{
    struct llama_batch b = {0};
    if (n < 1 || embd != 0 || n_seq_max < 1)
        return b; /* the adapter feeds token ids only */
    b.token = calloc((size_t)n, sizeof *b.token);
    b.pos = calloc((size_t)n, sizeof *b.pos);
    b.n_seq_id = calloc((size_t)n, sizeof *b.n_seq_id);
    b.seq_id = calloc((size_t)n + 1, sizeof *b.seq_id);
    b.logits = calloc((size_t)n, sizeof *b.logits);
    for (int32_t i = 0; b.seq_id && i < n; i++)
        b.seq_id[i] = calloc((size_t)n_seq_max, sizeof *b.seq_id[i]);
    return b;
}

void llama_batch_free(struct llama_batch b)
{
    for (int32_t i = 0; b.seq_id && b.seq_id[i]; i++)
        free(b.seq_id[i]);
    free(b.token);
    free(b.pos);
    free(b.n_seq_id);
    free(b.seq_id);
    free(b.logits);
}

/* Evaluate the batch: each token must continue sequence 0 at the next position. 0; -1 for a
 * batch llama.cpp would call invalid (the cache unchanged); 1 when the context is full; 2 when
 * GATE_STUB_FAIL says decode@N (the tokens stay in the cache, as processed ubatches do). */
int32_t llama_decode(struct llama_context *c, struct llama_batch b)
{
    struct llama_memory_i *m = &c->mem;
    const int32_t V = c->model->vocab.n_tokens;
    g.decodes++;
    stray("decode");
    c->n_rows = 0;
    if (b.n_tokens < 1 || (uint32_t)b.n_tokens > c->n_batch) {
        say(GGML_LOG_LEVEL_ERROR, "llama-stub: error: n_tokens %d outside 1..%u\n", b.n_tokens,
            c->n_batch);
        return -1;
    }
    if ((uint32_t)(m->n + b.n_tokens) > c->n_ctx) {
        say(GGML_LOG_LEVEL_ERROR, "llama-stub: error: no KV slot for %d tokens at %d of %u\n",
            b.n_tokens, m->n, c->n_ctx);
        return 1;
    }
    for (int32_t i = 0; i < b.n_tokens; i++) {
        if (b.n_seq_id[i] != 1 || b.seq_id[i][0] != 0 || b.pos[i] != m->n + i || b.token[i] < 0 ||
            b.token[i] >= V) {
            say(GGML_LOG_LEVEL_ERROR,
                "llama-stub: error: batch entry %d: token %d pos %d (the cache holds %d) "
                "n_seq_id %d seq %d\n",
                i, b.token[i], b.pos[i], m->n, b.n_seq_id[i], b.seq_id[i][0]);
            return -1;
        }
    }
    for (int32_t i = 0; i < b.n_tokens; i++) {
        const int32_t p = m->n;
        m->hash[p] = llama_stub_step(p ? m->hash[p - 1] : LLAMA_STUB_H0, b.token[i], p);
        m->token[p] = b.token[i];
        m->n++;
        c->have[i] = b.logits[i] != 0;
        for (int32_t v = 0; c->have[i] && v < V; v++)
            c->logits[(size_t)i * (size_t)V + (size_t)v] = llama_stub_logit(m->hash[p], v);
    }
    if (g.fail_decode && g.decodes == g.fail_decode) {
        say(GGML_LOG_LEVEL_ERROR, "llama-stub: error: decode %ld aborted as GATE_STUB_FAIL asks\n",
            g.decodes);
        return 2;
    }
    c->n_rows = b.n_tokens;
    return 0;
}

float *llama_get_logits_ith(struct llama_context *c, int32_t i)
{
    if (i < 0 || i >= c->n_rows || !c->have[i] || i == g.no_logits) {
        say(GGML_LOG_LEVEL_ERROR, "llama-stub: error: no logits for batch entry %d\n", i);
        return NULL;
    }
    return c->logits + (size_t)i * (size_t)c->model->vocab.n_tokens;
}
