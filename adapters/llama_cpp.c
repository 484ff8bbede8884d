/* llama_cpp.c — gate-llama: llama.cpp behind gate's `exec` backend (gate-exec protocol 1).
 *
 * A child process that gate starts with an argv list (docs/exec.md): requests arrive on stdin,
 * replies leave on stdout, everything else is log on stderr. It links libllama and does only
 * what the protocol asks: load a GGUF file on the CPU, evaluate the tokens of each `forward` in
 * ONE llama_decode call with logits requested at every position, drop cache positions on
 * `truncate`. gate does the rest (tokens, the judge, the oracles, the receipts).
 *
 * Invariants:
 *   - Nothing but reply frames is ever written to the protocol stream: at start the process
 *     keeps a private duplicate of stdout for frames and points descriptor 1 at stderr, so a
 *     stray printf inside llama.cpp or ggml cannot corrupt a frame.
 *   - Every read is bounded before it happens: header length 1..65536, payload length at most
 *     max_tokens * 4 bytes (only `forward` carries one). A frame that breaks a bound is answered
 *     with an error reply and the process exits 1 — never a crash, never an unbounded buffer.
 *   - The digest `load` answers is the SHA-256 of the bytes of the open file llama.cpp then
 *     reads (llama_model_load_from_file_ptr on the same FILE): a rename between hashing and
 *     loading cannot swap the file.
 *   - n_cur (the positions in llama.cpp's cache for sequence 0) is what the protocol calls
 *     n_past; a forward must start there.
 *   - llama.cpp cannot inject gate's routing faults: hello lists none; set_faults with a
 *     non-empty list is refused (an empty list — "no faults" — is trivially satisfied).
 *
 * Start reading: main(), then serve() and the op handlers above it.
 * Build: docs/exec.md, "The llama.cpp adapter" (CMake target gate-llama, -DGATE_LLAMA_DIR=...).
 */
#include "base/err.h"
#include "base/frame.h"

#include <ggml.h>
#include <jansson.h>
#include <llama.h>
#include <sodium.h>

#include <errno.h>
#include <limits.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gate-llama writes float32 logits as they lie in memory: little-endian hosts only"
#endif

#define PROTOCOL 1
#define MAX_FIELD 127 /* gate keeps at most 127 bytes of hello's strings */
#define MAX_CTX (1 << 20)
#define MAX_TOKENS_LIMIT 65536

/* Command-line settings (argv is part of the ladder cell's settings hash). */
struct options {
    int threads;       /* --threads N (default 2) */
    int max_tokens;    /* --max-tokens N: most tokens per forward, = n_batch = n_ubatch */
    enum ggml_type kv; /* --kv-type f16|f32 (default f16, llama.cpp's default) */
    int flash_attn;    /* --flash-attn auto|on|off: enum llama_flash_attn_type */
    int verbose;       /* --verbose: pass llama.cpp's INFO/DEBUG log to stderr */
    int no_repack;     /* --no-repack: keep weights in their file layout (use_extra_bufts off) */
};

/* The session: what is loaded and where the cache stands. */
struct session {
    struct options opt;
    int out_fd;                /* the protocol stream (a duplicate of the original stdout) */
    struct llama_model *model; /* NULL until load */
    struct llama_context *ctx; /* NULL until load */
    FILE *model_file;          /* kept open while model lives (llama.cpp borrows it) */
    struct llama_batch batch;  /* max_tokens entries, allocated at load */
    int have_batch;
    int32_t n_vocab;
    int32_t n_ctx;   /* llama_n_ctx: what the context really holds */
    int32_t n_batch; /* most tokens per forward after load: min(max_tokens, n_ctx) */
    int32_t n_cur;   /* positions in the cache (sequence 0) */
    int32_t *tokens; /* max_tokens ids: the forward payload */
    char build_id[80];
    char device[MAX_FIELD + 1];
    char version[MAX_FIELD + 1];
};

/* ---- log ---------------------------------------------------------------------------------- */

static int g_verbose;
static enum ggml_log_level g_last_level = GGML_LOG_LEVEL_INFO;

/* llama.cpp/ggml log: warnings and errors to stderr (gate quotes the stderr tail in its error
 * messages, so the tail should hold what matters); everything with --verbose. */
static void log_cb(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level != GGML_LOG_LEVEL_CONT)
        g_last_level = level;
    if (g_verbose || g_last_level == GGML_LOG_LEVEL_WARN || g_last_level == GGML_LOG_LEVEL_ERROR)
        fputs(text, stderr);
}

/* ---- frames (base/frame.h: the codec gate and its reference engine use) ------------------ */

/* Write one frame's head: the JSON object reply (compact, ASCII), then a payload length of B
 * bytes. The B payload bytes follow through frame_write by the caller (forward streams its
 * logits row by row). Takes ownership of reply. */
static int send_head(struct session *s, json_t *reply, uint64_t payload_bytes, struct gate_err *err)
{
    int rc = 0;
    unsigned char *head = NULL;
    size_t len = 0;
    char why[200];
    if (!reply) {
        rc = err_set(err, ERR_ENV, "gate-llama: out of memory building a reply");
        goto done;
    }
    if (frame_encode(reply, JSON_ENSURE_ASCII, payload_bytes, &head, &len, why, sizeof why)) {
        rc = err_set(err, ERR_RUNTIME, "gate-llama: a reply cannot be sent: %s", why);
        goto done;
    }
    if (frame_write(s->out_fd, head, len))
        rc = err_set(err, ERR_ENV, "gate-llama: cannot write a reply to stdout: %s",
                     strerror(errno));
done:
    free(head);
    json_decref(reply);
    return rc;
}

static int send_ok(struct session *s, json_t *reply, struct gate_err *err)
{
    if (reply)
        json_object_set_new(reply, "ok", json_true());
    return send_head(s, reply, 0, err);
}

/* An error reply quoting msg (one line: control characters become spaces, at most 1 KiB). */
static int send_error(struct session *s, const char *msg, struct gate_err *err)
{
    char line[1024];
    size_t n = strlen(msg);
    if (n >= sizeof line)
        n = sizeof line - 1;
    memcpy(line, msg, n);
    line[n] = '\0';
    for (char *p = line; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
    fprintf(stderr, "gate-llama: %s\n", line);
    return send_head(s, json_pack("{s:b, s:s}", "ok", 0, "error", line), 0, err);
}

/* ---- identity: version, build id, device -------------------------------------------------- */

/* SHA-256 of a whole open stream from its current position, as 64 lowercase hex + NUL. */
static int sha256_stream(FILE *f, char hex[65], struct gate_err *err, const char *what)
{
    int rc = 0;
    crypto_hash_sha256_state st;
    unsigned char digest[crypto_hash_sha256_BYTES];
    size_t cap = 1 << 20;
    unsigned char *buf = malloc(cap);
    if (!buf) {
        rc = err_set(err, ERR_ENV, "out of memory hashing '%s'", what);
        goto done;
    }
    crypto_hash_sha256_init(&st);
    size_t n;
    while ((n = fread(buf, 1, cap, f)) > 0)
        crypto_hash_sha256_update(&st, buf, n);
    if (ferror(f)) {
        rc = err_set(err, ERR_INPUT, "cannot read '%s': %s", what, strerror(errno));
        goto done;
    }
    crypto_hash_sha256_final(&st, digest);
    sodium_bin2hex(hex, 65, digest, sizeof digest);
done:
    free(buf);
    return rc;
}

/* One loaded object that makes up the engine: this program and the llama/ggml libraries. */
struct code_object {
    char name[256]; /* basename */
    char path[PATH_MAX];
};

struct code_list {
    struct code_object obj[32];
    int n;
};

static int collect_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct code_list *list = data;
    const char *path = info->dlpi_name;
    if (!path || !*path || list->n >= 32)
        return 0;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strncmp(base, "libllama", 8) != 0 && strncmp(base, "libggml", 7) != 0)
        return 0;
    struct code_object *o = &list->obj[list->n++];
    snprintf(o->name, sizeof o->name, "%s", base);
    snprintf(o->path, sizeof o->path, "%s", path);
    return 0;
}

static int cmp_object(const void *a, const void *b)
{
    return strcmp(((const struct code_object *)a)->name, ((const struct code_object *)b)->name);
}

/* build_id: "sha256:" + SHA-256 over the sorted lines "<basename> <sha256 of its bytes>\n" of
 * the code that runs — this program (/proc/self/exe) and every loaded libllama* / libggml*
 * (after llama_backend_init, so dynamically loaded ggml backends count too). llama.cpp trees
 * built outside git report commit "unknown", so the bytes are the identity that always holds.
 * Each object's digest is logged on stderr. */
static int make_build_id(struct session *s, struct gate_err *err)
{
    int rc = 0;
    struct code_list list = {.n = 0};
    snprintf(list.obj[0].name, sizeof list.obj[0].name, "gate-llama");
    snprintf(list.obj[0].path, sizeof list.obj[0].path, "/proc/self/exe");
    list.n = 1;
    dl_iterate_phdr(collect_object, &list);
    qsort(list.obj, (size_t)list.n, sizeof list.obj[0], cmp_object);
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    for (int i = 0; i < list.n; i++) {
        char hex[65];
        FILE *f = fopen(list.obj[i].path, "rb");
        if (!f) {
            rc = err_set(err, ERR_ENV, "cannot open '%s' to hash the engine's code: %s",
                         list.obj[i].path, strerror(errno));
            goto done;
        }
        rc = sha256_stream(f, hex, err, list.obj[i].path);
        fclose(f);
        if (rc)
            goto done;
        char line[400];
        int len = snprintf(line, sizeof line, "%s %s\n", list.obj[i].name, hex);
        crypto_hash_sha256_update(&st, (const unsigned char *)line, (size_t)len);
        fprintf(stderr, "gate-llama: code %s sha256 %s (%s)\n", list.obj[i].name, hex,
                list.obj[i].path);
    }
    unsigned char digest[crypto_hash_sha256_BYTES];
    char hex[65];
    crypto_hash_sha256_final(&st, digest);
    sodium_bin2hex(hex, sizeof hex, digest, sizeof digest);
    snprintf(s->build_id, sizeof s->build_id, "sha256:%s", hex);
done:
    return rc;
}

/* device: "cpu (<flags>)" from llama_print_system_info ("CPU : SSE3 = 1 | AVX = 1 | ..."):
 * the names of the features that are on, cut at a whole name to fit 127 bytes. */
static void make_device(struct session *s)
{
    const char *info = llama_print_system_info();
    char *out = s->device;
    size_t cap = sizeof s->device;
    size_t len = (size_t)snprintf(out, cap, "cpu (");
    const char *p = info ? strstr(info, "CPU :") : NULL;
    p = p ? p + 5 : NULL;
    while (p && *p) {
        const char *bar = strchr(p, '|');
        size_t seg = bar ? (size_t)(bar - p) : strlen(p);
        char item[64];
        char name[64];
        int on = 0;
        if (seg < sizeof item) {
            memcpy(item, p, seg);
            item[seg] = '\0';
            if (sscanf(item, " %63[A-Za-z0-9_] = %d", name, &on) == 2 && on) {
                size_t need = strlen(name) + 1 + 1; /* name, separator, room for ')' */
                if (len + need < cap) {
                    len += (size_t)snprintf(out + len, cap - len, "%s%s",
                                            out[len - 1] == '(' ? "" : " ", name);
                }
            }
        }
        p = bar ? bar + 1 : NULL;
    }
    if (out[len - 1] == '(')
        snprintf(out, cap, "cpu");
    else
        snprintf(out + len, cap - len, ")");
    snprintf(s->version, sizeof s->version, "%s (ggml %s, commit %s)", llama_version(),
             ggml_version(), ggml_commit());
}

/* ---- ops ---------------------------------------------------------------------------------- */

/* A JSON integer field within [lo, hi]. */
static int get_int(json_t *req, const char *key, long long lo, long long hi, long long *out,
                   char *msg, size_t cap)
{
    json_t *v = json_object_get(req, key);
    if (!v || !json_is_integer(v)) {
        snprintf(msg, cap, "the request has no integer \"%s\"", key);
        return -1;
    }
    long long x = (long long)json_integer_value(v);
    if (x < lo || x > hi) {
        snprintf(msg, cap, "\"%s\" is %lld, outside %lld..%lld", key, x, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static void unload(struct session *s)
{
    if (s->have_batch)
        llama_batch_free(s->batch);
    s->have_batch = 0;
    if (s->ctx)
        llama_free(s->ctx);
    s->ctx = NULL;
    if (s->model)
        llama_model_free(s->model);
    s->model = NULL;
    if (s->model_file)
        fclose(s->model_file);
    s->model_file = NULL;
    s->n_cur = 0;
}

static int op_hello(struct session *s, json_t *req, struct gate_err *err)
{
    long long proto = 0;
    char msg[256];
    if (get_int(req, "protocol", 0, INT_MAX, &proto, msg, sizeof msg))
        return send_error(s, msg, err);
    json_t *reply = json_pack("{s:i, s:s, s:s, s:s, s:s, s:[], s:i}", "protocol", PROTOCOL,
                              "engine", "llama.cpp", "version", s->version, "build_id", s->build_id,
                              "device", s->device, "faults", "max_tokens", s->opt.max_tokens);
    if (proto != PROTOCOL) {
        /* answer with our number: gate refuses the engine with both versions named */
        fprintf(stderr, "gate-llama: hello asks for protocol %lld; this engine speaks 1\n", proto);
        if (reply)
            json_object_set_new(reply, "ok", json_false());
        if (reply)
            json_object_set_new(reply, "error",
                                json_string("gate-llama speaks gate-exec protocol 1 only"));
        return send_head(s, reply, 0, err);
    }
    return send_ok(s, reply, err);
}

static int op_load(struct session *s, json_t *req, struct gate_err *err)
{
    char msg[PATH_MAX + 1200];
    long long n_ctx = 0;
    json_t *jpath = json_object_get(req, "path");
    if (!jpath || !json_is_string(jpath) || json_string_length(jpath) == 0 ||
        json_string_length(jpath) >= PATH_MAX ||
        strlen(json_string_value(jpath)) != json_string_length(jpath))
        return send_error(s, "load: \"path\" must be a non-empty string without NUL", err);
    char small[256];
    if (get_int(req, "n_ctx", 1, MAX_CTX, &n_ctx, small, sizeof small)) {
        char full[300];
        snprintf(full, sizeof full, "load: %s", small);
        return send_error(s, full, err);
    }
    const char *path = json_string_value(jpath);
    unload(s);

    char hex[65];
    struct gate_err herr = {0};
    s->model_file = fopen(path, "rb");
    if (!s->model_file) {
        snprintf(msg, sizeof msg, "load: cannot open '%s': %s", path, strerror(errno));
        return send_error(s, msg, err);
    }
    if (sha256_stream(s->model_file, hex, &herr, path) || fseek(s->model_file, 0, SEEK_SET)) {
        snprintf(msg, sizeof msg, "load: %s", herr.code ? herr.msg : "cannot rewind the model");
        unload(s);
        return send_error(s, msg, err);
    }

    struct llama_model_params mp = llama_model_default_params();
    static ggml_backend_dev_t no_devices[1] = {NULL}; /* no GPU device: everything on the CPU */
    mp.devices = no_devices;
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = !s->opt.no_repack;
    s->model = llama_model_load_from_file_ptr(s->model_file, mp);
    if (!s->model) {
        snprintf(msg, sizeof msg,
                 "load: llama.cpp could not load '%s' (its log on stderr says why)", path);
        unload(s);
        return send_error(s, msg, err);
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(s->model);
    s->n_vocab = llama_vocab_n_tokens(vocab);

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    int32_t nb = s->opt.max_tokens < n_ctx ? s->opt.max_tokens : (int32_t)n_ctx;
    cp.n_batch = (uint32_t)nb;
    cp.n_ubatch = (uint32_t)nb; /* one ubatch: all positions of a forward in one graph */
    cp.n_seq_max = 1;
    cp.n_threads = s->opt.threads;
    cp.n_threads_batch = s->opt.threads;
    cp.type_k = s->opt.kv;
    cp.type_v = s->opt.kv;
    cp.flash_attn_type = (enum llama_flash_attn_type)s->opt.flash_attn;
    cp.embeddings = false;
    cp.offload_kqv = false;
    cp.op_offload = false;
    cp.no_perf = true;
    s->ctx = llama_init_from_model(s->model, cp);
    if (!s->ctx) {
        snprintf(msg, sizeof msg,
                 "load: llama.cpp could not create a context of %lld positions for '%s'", n_ctx,
                 path);
        unload(s);
        return send_error(s, msg, err);
    }
    s->n_ctx = (int32_t)llama_n_ctx(s->ctx);
    s->n_batch = (int32_t)llama_n_batch(s->ctx);
    if ((int32_t)llama_n_ubatch(s->ctx) < s->n_batch)
        s->n_batch = (int32_t)llama_n_ubatch(s->ctx);
    if (s->n_batch > s->opt.max_tokens)
        s->n_batch = s->opt.max_tokens;
    s->batch = llama_batch_init(s->opt.max_tokens, 0, 1);
    s->have_batch = 1;
    s->n_cur = 0;
    fprintf(stderr,
            "gate-llama: loaded '%s' sha256 %s: n_vocab %d, n_ctx %d, n_batch %d, threads %d, "
            "kv %s, flash_attn %s, repack %s\n",
            path, hex, s->n_vocab, s->n_ctx, s->n_batch, s->opt.threads, ggml_type_name(s->opt.kv),
            llama_flash_attn_type_name((enum llama_flash_attn_type)s->opt.flash_attn),
            s->opt.no_repack ? "off" : "on");
    return send_ok(s,
                   json_pack("{s:s, s:i, s:i}", "sha256", hex, "n_vocab", (int)s->n_vocab, "n_ctx",
                             (int)s->n_ctx),
                   err);
}

static int op_forward(struct session *s, json_t *req, uint64_t payload, struct gate_err *err)
{
    char msg[512];
    char full[600];
    long long n_past = 0, n_tok = 0;
    if (!s->ctx)
        return send_error(s, "forward: no model is loaded (send load first)", err);
    if (get_int(req, "n_past", 0, INT_MAX, &n_past, msg, sizeof msg) ||
        get_int(req, "n_tokens", 1, s->n_batch, &n_tok, msg, sizeof msg)) {
        snprintf(full, sizeof full, "forward: %s", msg);
        return send_error(s, full, err);
    }
    if (payload != (uint64_t)n_tok * 4) {
        snprintf(msg, sizeof msg, "forward: a payload of %llu bytes for %lld tokens (want %lld)",
                 (unsigned long long)payload, n_tok, n_tok * 4);
        return send_error(s, msg, err);
    }
    if (n_past != s->n_cur) {
        snprintf(msg, sizeof msg, "forward: n_past %lld but the cache holds %d positions", n_past,
                 s->n_cur);
        return send_error(s, msg, err);
    }
    if (n_past + n_tok > s->n_ctx) {
        snprintf(msg, sizeof msg, "forward: positions %lld..%lld exceed n_ctx %d", n_past,
                 n_past + n_tok - 1, s->n_ctx);
        return send_error(s, msg, err);
    }
    for (int i = 0; i < n_tok; i++) {
        if (s->tokens[i] < 0 || s->tokens[i] >= s->n_vocab) {
            snprintf(msg, sizeof msg, "forward: token %d (id %d) is outside 0..%d", i, s->tokens[i],
                     s->n_vocab - 1);
            return send_error(s, msg, err);
        }
        s->batch.token[i] = s->tokens[i];
        s->batch.pos[i] = (llama_pos)(n_past + i);
        s->batch.n_seq_id[i] = 1;
        s->batch.seq_id[i][0] = 0;
        s->batch.logits[i] = 1; /* logits at every position: parity judges each one */
    }
    s->batch.n_tokens = (int32_t)n_tok;
    int32_t drc = llama_decode(s->ctx, s->batch);
    if (drc != 0) {
        /* a fatal error or abort may leave processed ubatches in the cache: drop them so the
         * count stays true (the session ends anyway: gate kills an engine after an error) */
        llama_memory_seq_rm(llama_get_memory(s->ctx), 0, (llama_pos)s->n_cur, -1);
        snprintf(msg, sizeof msg, "forward: llama_decode of %lld tokens at n_past %lld returned %d",
                 n_tok, n_past, drc);
        return send_error(s, msg, err);
    }
    s->n_cur = (int32_t)(n_past + n_tok);
    /* every row must exist before the header promises them */
    for (int i = 0; i < n_tok; i++) {
        if (!llama_get_logits_ith(s->ctx, i)) {
            snprintf(msg, sizeof msg, "forward: llama.cpp has no logits for position %lld",
                     n_past + i);
            return send_error(s, msg, err);
        }
    }
    size_t row = (size_t)s->n_vocab * sizeof(float);
    int rc = send_head(
        s,
        json_pack("{s:b, s:i, s:i}", "ok", 1, "n_tokens", (int)n_tok, "n_vocab", (int)s->n_vocab),
        (uint64_t)n_tok * row, err);
    for (int i = 0; rc == 0 && i < n_tok; i++) {
        if (frame_write(s->out_fd, llama_get_logits_ith(s->ctx, i), row))
            rc = err_set(err, ERR_ENV, "gate-llama: cannot write logits to stdout: %s",
                         strerror(errno));
    }
    return rc;
}

static int op_truncate(struct session *s, json_t *req, struct gate_err *err)
{
    char msg[512];
    char full[600];
    long long n_past = 0;
    if (!s->ctx)
        return send_error(s, "truncate: no model is loaded (send load first)", err);
    if (get_int(req, "n_past", 0, s->n_cur, &n_past, msg, sizeof msg)) {
        snprintf(full, sizeof full, "truncate: %s (the cache holds %d)", msg, s->n_cur);
        return send_error(s, full, err);
    }
    if (n_past < s->n_cur &&
        !llama_memory_seq_rm(llama_get_memory(s->ctx), 0, (llama_pos)n_past, -1)) {
        snprintf(msg, sizeof msg, "truncate: llama.cpp cannot drop positions %lld..%d", n_past,
                 s->n_cur - 1);
        return send_error(s, msg, err);
    }
    s->n_cur = (int32_t)n_past;
    return send_ok(s, json_object(), err);
}

static int op_set_faults(struct session *s, json_t *req, struct gate_err *err)
{
    json_t *faults = json_object_get(req, "faults");
    if (faults && json_is_array(faults) && json_array_size(faults) == 0)
        return send_ok(s, json_object(), err);
    return send_error(s, "set_faults: llama.cpp cannot inject gate's faults (hello lists none)",
                      err);
}

/* ---- the loop ----------------------------------------------------------------------------- */

/* Serve requests until bye (returns 0), the end of stdin, or a frame that breaks a bound. */
static int serve(struct session *s, struct gate_err *err)
{
    int rc = 0;
    json_t *req = NULL;
    const uint64_t max_payload = (uint64_t)s->opt.max_tokens * 4;
    struct frame_in f;
    frame_in_request(&f, s->tokens, max_payload);
    for (;;) {
        char why[400];
        frame_in_free(&f);
        frame_in_request(&f, s->tokens, max_payload);
        const int st = frame_read(0, &f, why, sizeof why);
        if (st == FRAME_EOF) {
            rc = err_set(err, ERR_INPUT, "gate-llama: stdin ended without bye");
            goto done;
        }
        if (st == FRAME_CUT) {
            rc = err_set(err, ERR_INPUT, "gate-llama: a request frame is cut short: %s", why);
            goto done;
        }
        if (st == FRAME_BAD) { /* a bound: answered, and nothing more is read */
            send_error(s, why, err);
            rc = err_set(err, ERR_INPUT, "gate-llama: %s", why);
            goto done;
        }
        const uint64_t b = f.b;

        /* the frame is whole: from here on a bad request gets an error reply */
        const char *name = NULL;
        if (frame_in_request_parse(&f, &req, &name, why, sizeof why) != FRAME_WHOLE) {
            rc = send_error(s, why, err);
        } else if (b && strcmp(name, "forward") != 0) {
            rc = send_error(s, "only forward carries a payload", err);
        } else if (!strcmp(name, "hello")) {
            rc = op_hello(s, req, err);
        } else if (!strcmp(name, "load")) {
            rc = op_load(s, req, err);
        } else if (!strcmp(name, "forward")) {
            rc = op_forward(s, req, b, err);
        } else if (!strcmp(name, "truncate")) {
            rc = op_truncate(s, req, err);
        } else if (!strcmp(name, "set_faults")) {
            rc = op_set_faults(s, req, err);
        } else if (!strcmp(name, "bye")) {
            rc = send_ok(s, json_object(), err);
            goto done;
        } else {
            char msg[200];
            snprintf(msg, sizeof msg, "unknown op \"%.64s\"", name);
            rc = send_error(s, msg, err);
        }
        json_decref(req);
        req = NULL;
        if (rc)
            goto done;
    }
done:
    json_decref(req);
    frame_in_free(&f);
    return rc;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: gate-llama [--threads N] [--max-tokens N] [--kv-type f16|f32]\n"
            "                  [--flash-attn auto|on|off] [--no-repack] [--verbose]\n"
            "Speaks gate-exec protocol 1 on stdin/stdout (docs/exec.md); run it from a ladder's\n"
            "engines: section, not by hand.\n");
}

static int parse_options(int argc, char **argv, struct options *o, struct gate_err *err)
{
    o->threads = 2;
    o->max_tokens = 512;
    o->kv = GGML_TYPE_F16;
    o->flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;
    o->verbose = 0;
    o->no_repack = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--verbose")) {
            o->verbose = 1;
            continue;
        }
        if (!strcmp(a, "--no-repack")) {
            o->no_repack = 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return err_set(err, ERR_INPUT, "help");
        if (!v)
            return err_set(err, ERR_INPUT, "gate-llama: option '%s' needs a value", a);
        i++;
        if (!strcmp(a, "--threads") || !strcmp(a, "--max-tokens")) {
            errno = 0;
            long x = strtol(v, &end, 10);
            long hi = !strcmp(a, "--threads") ? 1024 : MAX_TOKENS_LIMIT;
            if (errno || end == v || *end || x < 1 || x > hi)
                return err_set(err, ERR_INPUT, "gate-llama: %s '%s' is not an integer in 1..%ld", a,
                               v, hi);
            if (!strcmp(a, "--threads"))
                o->threads = (int)x;
            else
                o->max_tokens = (int)x;
        } else if (!strcmp(a, "--kv-type")) {
            if (!strcmp(v, "f16"))
                o->kv = GGML_TYPE_F16;
            else if (!strcmp(v, "f32"))
                o->kv = GGML_TYPE_F32;
            else
                return err_set(err, ERR_INPUT, "gate-llama: --kv-type '%s' is not f16 or f32", v);
        } else if (!strcmp(a, "--flash-attn")) {
            if (!strcmp(v, "auto"))
                o->flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;
            else if (!strcmp(v, "on"))
                o->flash_attn = LLAMA_FLASH_ATTN_TYPE_ENABLED;
            else if (!strcmp(v, "off"))
                o->flash_attn = LLAMA_FLASH_ATTN_TYPE_DISABLED;
            else
                return err_set(err, ERR_INPUT,
                               "gate-llama: --flash-attn '%s' is not auto, on or off", v);
        } else {
            return err_set(err, ERR_INPUT, "gate-llama: unknown option '%s'", a);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rc = 0;
    struct gate_err err = {0};
    struct session s = {.out_fd = -1};

    if (parse_options(argc, argv, &s.opt, &err)) {
        if (strcmp(err.msg, "help") != 0)
            fprintf(stderr, "%s\n", err.msg);
        usage();
        return 2;
    }
    g_verbose = s.opt.verbose;
    signal(SIGPIPE, SIG_IGN); /* a vanished gate is a write error, not a silent death */

    /* the protocol stream is a private descriptor; fd 1 becomes stderr for any stray output */
    s.out_fd = dup(1);
    if (s.out_fd < 0 || dup2(2, 1) < 0) {
        fprintf(stderr, "gate-llama: cannot set up the protocol stream: %s\n", strerror(errno));
        return 3;
    }
    if (sodium_init() < 0) {
        fprintf(stderr, "gate-llama: libsodium failed to initialize\n");
        return 3;
    }
    s.tokens = malloc((size_t)s.opt.max_tokens * sizeof *s.tokens);
    if (!s.tokens) {
        rc = err_set(&err, ERR_ENV, "gate-llama: out of memory for %d token ids", s.opt.max_tokens);
        goto done;
    }
    llama_log_set(log_cb, NULL);
    llama_backend_init();
    if ((rc = make_build_id(&s, &err)))
        goto done;
    make_device(&s);
    fprintf(stderr, "gate-llama: llama.cpp %s, build %s, device %s\n", s.version, s.build_id,
            s.device);
    rc = serve(&s, &err);
done:
    unload(&s);
    free(s.tokens);
    llama_backend_free();
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    return rc ? err_exit_code(rc) : 0;
}
