/* test_llama_cpp.c — the llama.cpp adapter (adapters/llama_cpp.c) without llama.cpp: the same
 * source built against a stand-in libllama (tests/llama_stub/: llama.h, ggml.h and
 * libllama-stub.so, whose logits the tests predict and whose failures the environment injects)
 * as build/gate-llama-stub, driven through gate-exec two ways:
 *   - as gate drives it: an exec session (engine/exec.h), backend_forward / _forward_last /
 *     _truncate, and an end-to-end `gate run` of one exec cell, which FAILs parity (the stand-in's
 *     logits are not the model's) with the engine's identity in the receipt;
 *   - as an adversary of the adapter would: raw frames on its stdin — malformed, oversize,
 *     out-of-order, out-of-range — each answered with an error reply naming the fault, the
 *     adapter alive afterwards or exiting with a status, never a signal.
 * Every test runs in well under a second except the gate run (about two seconds).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/exec.h"
#include "engine/model.h"
#include "oracles/mode.h"
#include "tests/llama_stub/llama_stub.h"
#include "tests/support/check.h"
#include "tests/support/conformance.h"
#include "tests/support/ladderfix.h"
#include "tests/support/session.h"

#define MOE_SHA LADDERFIX_MOE_SHA
#define N_VOCAB 512 /* the tiny conformance models' vocabulary */

/* ---- paths and digests ---------------------------------------------------------------------- */

/* name next to this test binary (the build folder), asserted to exist */
static const char *built(const char *name)
{
    static char path[4][PATH_MAX];
    static int turn;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    cr_assert(n > 0);
    self[n] = '\0';
    char *p = path[turn++ % 4];
    snprintf(p, PATH_MAX, "%s/%s", dirname(self), name);
    cr_assert_eq(access(p, R_OK), 0, "'%s' is not built", p);
    return p;
}

static const char *adapter(void)
{
    return built("gate-llama-stub");
}
static const char *stub_lib(void)
{
    return built("libllama-stub.so");
}
static const char *moe_path(void)
{
    return conformance_path("qwen3moe-tiny-q4_k_m", "model.gguf");
}

static void sha256_file(const char *path, char hex[65])
{
    size_t n = 0;
    uint8_t *bytes = check_slurp(path, &n);
    cr_assert(bytes, "cannot read '%s'", path);
    unsigned char d[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(d, bytes, n);
    sodium_bin2hex(hex, 65, d, sizeof d);
    free(bytes);
}

/* The build id the adapter must report: SHA-256 over the sorted lines "<name> <sha256>\n" of its
 * own binary (named gate-llama) and every libllama* / libggml* it loaded: here the stand-in. */
static void expected_build_id(char out[72])
{
    char exe[65], lib[65], lines[300];
    sha256_file(adapter(), exe);
    sha256_file(stub_lib(), lib);
    int n = snprintf(lines, sizeof lines, "gate-llama %s\nlibllama-stub.so %s\n", exe, lib);
    unsigned char d[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(d, (const unsigned char *)lines, (unsigned long long)n);
    char hex[65];
    sodium_bin2hex(hex, sizeof hex, d, sizeof d);
    snprintf(out, 72, "sha256:%s", hex);
}

/* The stand-in's logits for tokens tok (n) fed after the cached prefix whose running hash is *h
 * at position pos0 (h = LLAMA_STUB_H0 for an empty cache); *h advances. out (n, N_VOCAB). */
static void predict(uint32_t *h, const int32_t *tok, int n, int pos0, float *out)
{
    for (int i = 0; i < n; i++) {
        *h = llama_stub_step(*h, tok[i], pos0 + i);
        for (int v = 0; v < N_VOCAB; v++)
            out[(size_t)i * N_VOCAB + (size_t)v] = llama_stub_logit(*h, v);
    }
}

/* The first index where a and b (n floats) differ bit for bit, -1 when none. */
static long first_diff(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0)
            return (long)i;
    return -1;
}

/* ---- the adapter as gate runs it ------------------------------------------------------------ */

/* The engine declaration of a ladder for gate-llama-stub: the stand-in's vocabulary and
 * failures in its environment (env: NULL-terminated "NAME=value"), the stand-in library readable
 * in the sandbox, extra arguments after argv[0]. */
struct engine_fix {
    struct exec_engine e;
    char lib[PATH_MAX];
    char env[4][160];
};

static void engine_fix_init(struct engine_fix *f, const char *const *args, const char *const *env)
{
    memset(f, 0, sizeof *f);
    snprintf(f->e.name, sizeof f->e.name, "llama");
    f->e.argv[f->e.argc++] = (char *)adapter();
    for (int i = 0; args && args[i]; i++)
        f->e.argv[f->e.argc++] = (char *)args[i];
    f->e.timeout_s = 30;
    f->e.supports = EXEC_SUPPORTS_DECODE | EXEC_SUPPORTS_PREFILL | EXEC_SUPPORTS_CHAT;
    snprintf(f->env[0], sizeof f->env[0], "GATE_STUB_N_VOCAB=%d", N_VOCAB);
    f->e.env[f->e.n_env++] = f->env[0];
    for (int i = 0; env && env[i] && i < 3; i++) {
        snprintf(f->env[i + 1], sizeof f->env[i + 1], "%s", env[i]);
        f->e.env[f->e.n_env++] = f->env[i + 1];
    }
    snprintf(f->lib, sizeof f->lib, "%s", stub_lib());
    f->e.allow[f->e.n_allow++] = f->lib;
}

struct session_fix {
    struct model *m;
    struct engine_fix ef;
    struct backend_session *s;
    struct mode mode;
    struct backend *b;
};

/* Open an exec backend on gate-llama-stub for the tiny MoE model (the model file the engine
 * loads: model_file, NULL for the real one). Returns backend_open's status; the message in err. */
static int session_open(struct session_fix *f, const char *const *args, const char *const *env,
                        const char *model_file, int n_ctx, struct gate_err *err)
{
    memset(f, 0, sizeof *f);
    f->m = check_load_case("qwen3moe-tiny-q4_k_m");
    engine_fix_init(&f->ef, args, env);
    cr_assert_eq(
        test_session_new(&f->s, &f->ef.e, model_file ? model_file : moe_path(), MOE_SHA, err), 0,
        "%s", err->msg);
    cr_assert_eq(mode_parse("exec.llama.prefill", &f->mode, err), 0, "%s", err->msg);
    f->mode.session = f->s;
    return mode_open(&f->b, &f->mode, f->m, n_ctx, 1, NULL, err);
}

static void session_close(struct session_fix *f)
{
    backend_close(f->b);
    backend_session_close(f->s);
    model_free(f->m);
    errno = 0;
    const pid_t r = waitpid(-1, NULL, WNOHANG);
    cr_expect(r == -1 && errno == ECHILD, "a child is left behind");
}

Test(llama_cpp, hello_names_llama_cpp_its_version_the_code_that_runs_and_the_device)
{
    static const char *const args[] = {"--max-tokens", "9", NULL};
    struct session_fix f;
    struct gate_err err = {0};
    cr_assert_eq(session_open(&f, args, NULL, NULL, 16, &err), 0, "%s", err.msg);
    struct exec_hello h;
    cr_assert_eq(test_session_hello(f.s, &h), 0);
    cr_expect_str_eq(h.engine, "llama.cpp");
    cr_expect_str_eq(h.version, LLAMA_STUB_VERSION " (ggml " LLAMA_STUB_GGML_VERSION
                                                   ", commit " LLAMA_STUB_GGML_COMMIT ")");
    char want[72];
    expected_build_id(want);
    cr_expect_str_eq(h.build_id, want, "the build id is not the digest of the code that runs");
    cr_expect_str_eq(h.device, "cpu (SSE3 SSSE3 AVX2 FMA)");
    cr_expect_eq(h.faults, 0u, "llama.cpp cannot inject gate's faults");
    cr_expect_eq(h.max_tokens, 9);
    struct backend_info info;
    backend_info(f.b, &info);
    cr_expect_str_eq(info.backend, "exec");
    cr_expect(strstr(info.engine, "llama.cpp " LLAMA_STUB_VERSION) && strstr(info.engine, want),
              "%s", info.engine);
    session_close(&f);
}

Test(llama_cpp, forward_and_forward_last_relay_the_logits_of_every_position)
{
    /* --max-tokens 5: gate cuts 23 tokens into 5 requests; then 9 one-token decodes */
    static const char *const args[] = {"--max-tokens", "5", NULL};
    struct session_fix f;
    struct gate_err err = {0};
    cr_assert_eq(session_open(&f, args, NULL, NULL, 64, &err), 0, "%s", err.msg);
    enum { N = 23, D = 9 };
    int32_t tok[N + D];
    mode_tokens(11, N_VOCAB, N + D, tok);
    float *got = malloc((size_t)(N + D) * N_VOCAB * sizeof *got);
    float *want = malloc((size_t)(N + D) * N_VOCAB * sizeof *want);
    cr_assert(got && want);
    uint32_t h = LLAMA_STUB_H0;
    predict(&h, tok, N + D, 0, want);
    cr_assert_eq(backend_forward(f.b, tok, N, 0, got, &err), 0, "%s", err.msg);
    for (int i = 0; i < D; i++)
        cr_assert_eq(
            backend_forward(f.b, tok + N + i, 1, N + i, got + (size_t)(N + i) * N_VOCAB, &err), 0,
            "%s", err.msg);
    long d = first_diff(got, want, (size_t)(N + D) * N_VOCAB);
    cr_expect_eq(d, -1, "logit %ld (position %ld, entry %ld) is %g, the stub computed %g", d,
                 d / N_VOCAB, d % N_VOCAB, d >= 0 ? got[d] : 0.0, d >= 0 ? want[d] : 0.0);
    /* forward_last after a reset: the row of the last position only */
    cr_assert_eq(backend_truncate(f.b, 0, &err), 0, "%s", err.msg);
    float last[N_VOCAB];
    cr_assert_eq(backend_forward_last(f.b, tok, 12, 0, last, &err), 0, "%s", err.msg);
    cr_expect_eq(first_diff(last, want + (size_t)11 * N_VOCAB, N_VOCAB), -1,
                 "forward_last is not position 11's row");
    free(got);
    free(want);
    session_close(&f);
}

Test(llama_cpp, truncate_drops_the_positions_after_it_and_the_next_forward_continues_there)
{
    struct session_fix f;
    struct gate_err err = {0};
    cr_assert_eq(session_open(&f, NULL, NULL, NULL, 32, &err), 0, "%s", err.msg);
    int32_t a[10], b[6];
    mode_tokens(1, N_VOCAB, 10, a);
    mode_tokens(2, N_VOCAB, 6, b);
    float got[10 * N_VOCAB], want[10 * N_VOCAB];
    cr_assert_eq(backend_forward(f.b, a, 10, 0, got, &err), 0, "%s", err.msg);
    cr_assert_eq(backend_truncate(f.b, 4, &err), 0, "%s", err.msg);
    cr_assert_eq(backend_forward(f.b, b, 6, 4, got, &err), 0, "%s", err.msg);
    /* the prefix a[0..3] then b: the logits of b's positions depend on both */
    uint32_t h = LLAMA_STUB_H0;
    predict(&h, a, 4, 0, want);
    predict(&h, b, 6, 4, want);
    cr_expect_eq(first_diff(got, want, 6 * N_VOCAB), -1, "the cache was not cut at 4");
    session_close(&f);
}

Test(llama_cpp, a_model_llama_cpp_cannot_load_is_an_error_quoting_its_log)
{
    /* a file that is not GGUF (its digest is checked only after a successful load) */
    char dir[PATH_MAX];
    check_make_dir(dir, sizeof dir, "llama");
    const char *bad = check_path(dir, "bad.gguf");
    FILE *w = fopen(bad, "wb");
    cr_assert(w);
    fputs("this is not a model\n", w);
    fclose(w);
    struct session_fix f;
    struct gate_err err = {0};
    cr_expect_eq(session_open(&f, NULL, NULL, bad, 16, &err), ERR_RUNTIME, "%s", err.msg);
    cr_expect(strstr(err.msg, "load: llama.cpp could not load '"), "%s", err.msg);
    cr_expect(strstr(err.msg, "bad.gguf' (its log on stderr says why)"), "%s", err.msg);
    cr_expect_eq(test_session_pid(f.s), 0, "the engine was not ended after the error");
    session_close(&f);

    /* the model loads, the context does not */
    static const char *const ctxfail[] = {"GATE_STUB_FAIL=context", NULL};
    memset(&err, 0, sizeof err);
    cr_expect_eq(session_open(&f, NULL, ctxfail, NULL, 16, &err), ERR_RUNTIME, "%s", err.msg);
    cr_expect(strstr(err.msg, "load: llama.cpp could not create a context of 4096 positions for"),
              "%s", err.msg);
    session_close(&f);
}

/* ---- the adapter's own end of the protocol: raw frames -------------------------------------- */

struct child {
    pid_t pid;
    int in, out;             /* its stdin (we write), its stdout (we read) */
    char err_path[PATH_MAX]; /* its stderr */
};

/* Start gate-llama-stub with args (NULL-terminated, after argv[0]) and only the environment env
 * (NULL-terminated "NAME=value") plus GATE_STUB_N_VOCAB. */
static void start(struct child *c, const char *const *args, const char *const *env)
{
    char dir[PATH_MAX - 16];
    check_make_dir(dir, sizeof dir, "llama");
    snprintf(c->err_path, sizeof c->err_path, "%s/stderr", dir);
    const char *argv[32] = {adapter()};
    int n = 1;
    for (int i = 0; args && args[i]; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    char vocab[64];
    snprintf(vocab, sizeof vocab, "GATE_STUB_N_VOCAB=%d", N_VOCAB);
    const char *envp[16] = {"PATH=/usr/bin:/bin", vocab};
    int ne = 2;
    for (int i = 0; env && env[i]; i++)
        envp[ne++] = env[i];
    envp[ne] = NULL;
    int to[2], from[2];
    cr_assert_eq(pipe2(to, O_CLOEXEC), 0);
    cr_assert_eq(pipe2(from, O_CLOEXEC), 0);
    int efd = open(c->err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    cr_assert(efd >= 0);
    c->pid = fork();
    cr_assert(c->pid >= 0);
    if (c->pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        dup2(efd, 2);
        execve(argv[0], (char *const *)argv, (char *const *)envp);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    close(efd);
    c->in = to[1];
    c->out = from[0];
    signal(SIGPIPE, SIG_IGN);
}

/* Close its stdin: the end of the request stream. */
static void close_in(struct child *c)
{
    if (c->in >= 0)
        close(c->in);
    c->in = -1;
}

/* Close its stdin and wait: the wait status. */
static int finish(struct child *c)
{
    close_in(c);
    int st = 0;
    cr_assert_eq(waitpid(c->pid, &st, 0), c->pid);
    close(c->out);
    return st;
}

static char *child_stderr(const struct child *c)
{
    return check_slurp_text(c->err_path);
}

static void put(struct child *c, const void *p, size_t n)
{
    cr_assert_eq(write(c->in, p, n), (ssize_t)n, "cannot write to the adapter: %s",
                 strerror(errno));
}

/* One frame: u32 LE H, header, u64 LE B (plen, which may differ from the bytes sent: n_send),
 * n_send payload bytes. */
static void send_frame_raw(struct child *c, uint32_t h, const char *header, size_t header_len,
                           uint64_t plen, const void *payload, size_t n_send)
{
    unsigned char b4[4], b8[8];
    for (int i = 0; i < 4; i++)
        b4[i] = (unsigned char)(h >> (8 * i));
    for (int i = 0; i < 8; i++)
        b8[i] = (unsigned char)(plen >> (8 * i));
    put(c, b4, 4);
    if (header_len)
        put(c, header, header_len);
    put(c, b8, 8);
    if (n_send)
        put(c, payload, n_send);
}

static void send_text(struct child *c, const char *header, const void *payload, size_t plen)
{
    size_t n = strlen(header);
    send_frame_raw(c, (uint32_t)n, header, n, plen, payload, plen);
}

/* Read exactly n bytes within 30 s (a hung adapter fails the test, it does not hang it). 0, or
 * -1 when the stream ended first. */
static int get(struct child *c, void *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        struct pollfd pf = {.fd = c->out, .events = POLLIN};
        cr_assert_gt(poll(&pf, 1, 30000), 0, "the adapter sent no reply within 30 s");
        ssize_t r = read(c->out, (char *)p + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* Read one reply frame: its header (caller decrefs), its payload (malloc'd into *payload when
 * payload is non-NULL, *plen bytes). NULL when the stream ended before a whole frame. */
static json_t *reply(struct child *c, float **payload, uint64_t *plen)
{
    unsigned char b4[4], b8[8];
    if (get(c, b4, 4))
        return NULL;
    uint32_t h =
        (uint32_t)b4[0] | (uint32_t)b4[1] << 8 | (uint32_t)b4[2] << 16 | (uint32_t)b4[3] << 24;
    cr_assert(h >= 1 && h <= 65536, "a reply header of %u bytes", h);
    char *text = malloc(h + 1);
    cr_assert(text);
    cr_assert_eq(get(c, text, h), 0, "a reply cut short in its header");
    text[h] = '\0';
    cr_assert_eq(get(c, b8, 8), 0, "a reply cut short before its payload length");
    uint64_t b = 0;
    for (int i = 0; i < 8; i++)
        b |= (uint64_t)b8[i] << (8 * i);
    cr_assert_leq(b, (uint64_t)1 << 26, "a reply payload of %llu bytes", (unsigned long long)b);
    void *data = malloc(b ? b : 1);
    cr_assert(data);
    cr_assert_eq(b ? get(c, data, b) : 0, 0, "a reply cut short in its payload");
    json_error_t je;
    json_t *j = json_loadb(text, h, 0, &je);
    cr_assert(j && json_is_object(j), "the reply header is not a JSON object: %s", text);
    cr_assert(json_is_boolean(json_object_get(j, "ok")), "the reply has no boolean ok: %s", text);
    free(text);
    if (plen)
        *plen = b;
    if (payload)
        *payload = data;
    else
        free(data);
    return j;
}

/* Send a header-only request and expect an error reply containing want (and no payload). */
static void expect_error(struct child *c, const char *header, const char *want)
{
    send_text(c, header, NULL, 0);
    uint64_t b = 1;
    json_t *j = reply(c, NULL, &b);
    cr_assert(j, "no reply to %s", header);
    const char *e = json_string_value(json_object_get(j, "error"));
    cr_expect(json_is_false(json_object_get(j, "ok")), "%s was accepted", header);
    cr_expect(e && strstr(e, want), "%s: the error is '%s', not '%s'", header, e ? e : "(none)",
              want);
    cr_expect_eq(b, 0, "an error reply with a payload");
    json_decref(j);
}

/* Send a header-only request and expect {"ok":true,...}; the reply (caller decrefs). */
static json_t *expect_ok(struct child *c, const char *header)
{
    send_text(c, header, NULL, 0);
    json_t *j = reply(c, NULL, NULL);
    cr_assert(j, "no reply to %s", header);
    cr_assert(json_is_true(json_object_get(j, "ok")), "%s: %s", header,
              json_string_value(json_object_get(j, "error")));
    return j;
}

static void hello_and_load(struct child *c, int n_ctx)
{
    json_decref(expect_ok(c, "{\"op\":\"hello\",\"protocol\":1}"));
    char req[PATH_MAX + 100];
    snprintf(req, sizeof req, "{\"op\":\"load\",\"path\":\"%s\",\"n_ctx\":%d}", moe_path(), n_ctx);
    json_decref(expect_ok(c, req));
}

/* forward tok (n) at n_past; returns the reply; the logits into out (n, N_VOCAB) when ok. */
static json_t *forward(struct child *c, const int32_t *tok, int n, int n_past, float *out)
{
    char req[128];
    snprintf(req, sizeof req, "{\"op\":\"forward\",\"n_past\":%d,\"n_tokens\":%d}", n_past, n);
    send_text(c, req, tok, (size_t)n * 4);
    float *lg = NULL;
    uint64_t b = 0;
    json_t *j = reply(c, &lg, &b);
    cr_assert(j, "no reply to %s", req);
    if (json_is_true(json_object_get(j, "ok"))) {
        cr_assert_eq(b, (uint64_t)n * N_VOCAB * 4, "an ok forward reply of %llu bytes",
                     (unsigned long long)b);
        cr_expect_eq(json_integer_value(json_object_get(j, "n_tokens")), n);
        cr_expect_eq(json_integer_value(json_object_get(j, "n_vocab")), N_VOCAB);
        if (out)
            memcpy(out, lg, b);
    }
    free(lg);
    return j;
}

static void expect_forward_ok(struct child *c, const int32_t *tok, int n, int n_past, uint32_t *h)
{
    float *got = malloc((size_t)n * N_VOCAB * sizeof *got);
    float *want = malloc((size_t)n * N_VOCAB * sizeof *want);
    cr_assert(got && want);
    json_t *j = forward(c, tok, n, n_past, got);
    cr_assert(json_is_true(json_object_get(j, "ok")), "forward at %d refused: %s", n_past,
              json_string_value(json_object_get(j, "error")));
    predict(h, tok, n, n_past, want);
    cr_expect_eq(first_diff(got, want, (size_t)n * N_VOCAB), -1,
                 "forward at %d: logits other than the stub's", n_past);
    json_decref(j);
    free(got);
    free(want);
}

static void expect_forward_error(struct child *c, const int32_t *tok, int n, int n_past,
                                 const char *want)
{
    json_t *j = forward(c, tok, n, n_past, NULL);
    const char *e = json_string_value(json_object_get(j, "error"));
    cr_expect(json_is_false(json_object_get(j, "ok")), "forward at %d accepted", n_past);
    cr_expect(e && strstr(e, want), "the error is '%s', not '%s'", e ? e : "(none)", want);
    json_decref(j);
}

static void expect_clean_exit(int st, int code, const char *what)
{
    cr_expect(WIFEXITED(st), "%s: the adapter died of signal %d", what,
              WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == code, "%s: exit status %d, expected %d", what,
              WIFEXITED(st) ? WEXITSTATUS(st) : -1, code);
}

Test(llama_cpp, load_answers_the_digest_of_the_file_read_the_vocabulary_and_the_context_held)
{
    static const char *const env[] = {"GATE_STUB_N_CTX=24", NULL};
    struct child c;
    start(&c, NULL, env);
    json_decref(expect_ok(&c, "{\"op\":\"hello\",\"protocol\":1}"));
    char req[PATH_MAX + 100];
    snprintf(req, sizeof req, "{\"op\":\"load\",\"path\":\"%s\",\"n_ctx\":32}", moe_path());
    json_t *j = expect_ok(&c, req);
    cr_expect_str_eq(json_string_value(json_object_get(j, "sha256")), MOE_SHA);
    cr_expect_eq(json_integer_value(json_object_get(j, "n_vocab")), N_VOCAB);
    cr_expect_eq(json_integer_value(json_object_get(j, "n_ctx")), 24,
                 "the reply says what was asked, not what the context holds");
    json_decref(j);
    /* the context's 24 positions bound the forwards */
    int32_t tok[24];
    mode_tokens(5, N_VOCAB, 24, tok);
    uint32_t h = LLAMA_STUB_H0;
    expect_forward_ok(&c, tok, 20, 0, &h);
    expect_forward_error(&c, tok, 5, 20, "forward: positions 20..24 exceed n_ctx 24");
    expect_forward_ok(&c, tok + 20, 4, 20, &h);
    /* bad loads, each answered; the next good one replaces the model */
    expect_error(&c, "{\"op\":\"load\",\"path\":\"/nonexistent/m.gguf\",\"n_ctx\":8}",
                 "load: cannot open '/nonexistent/m.gguf': No such file or directory");
    expect_error(&c, "{\"op\":\"load\",\"n_ctx\":8}", "load: \"path\" must be a non-empty string");
    expect_error(&c, "{\"op\":\"load\",\"path\":\"\",\"n_ctx\":8}",
                 "load: \"path\" must be a non-empty string");
    snprintf(req, sizeof req, "{\"op\":\"load\",\"path\":\"%s\",\"n_ctx\":0}", moe_path());
    expect_error(&c, req, "load: \"n_ctx\" is 0, outside 1..1048576");
    snprintf(req, sizeof req, "{\"op\":\"load\",\"path\":\"%s\",\"n_ctx\":1.5}", moe_path());
    expect_error(&c, req, "load: the request has no integer \"n_ctx\"");
    /* a file llama.cpp refuses: its own error reaches stderr, the reply says where to look */
    char dir[PATH_MAX];
    check_make_dir(dir, sizeof dir, "llama");
    const char *bad = check_path(dir, "bad.gguf");
    FILE *w = fopen(bad, "wb");
    cr_assert(w);
    fputs("GGUX", w);
    fclose(w);
    snprintf(req, sizeof req, "{\"op\":\"load\",\"path\":\"%s\",\"n_ctx\":8}", bad);
    expect_error(&c, req, "(its log on stderr says why)");
    /* after a failed load nothing is loaded */
    expect_forward_error(&c, tok, 1, 0, "forward: no model is loaded (send load first)");
    json_decref(expect_ok(&c, "{\"op\":\"bye\"}"));
    expect_clean_exit(finish(&c), 0, "bye");
    char *log = child_stderr(&c);
    cr_expect(strstr(log, "llama-stub: error: the file does not start with GGUF\n"), "%s", log);
    free(log);
}

Test(llama_cpp, hello_refuses_another_protocol_and_reports_the_cpu_features_that_are_on)
{
    /* a long feature list: the device text stops at a whole name within 127 bytes */
    char sys[1200] = "CPU : ";
    for (int i = 0; i < 40; i++)
        snprintf(sys + strlen(sys), sizeof sys - strlen(sys), "FEATURE_%02d = %d | ", i, i != 1);
    char env0[1300];
    snprintf(env0, sizeof env0, "GATE_STUB_SYSINFO=%s", sys);
    const char *const env[] = {env0, NULL};
    struct child c;
    start(&c, NULL, env);
    send_text(&c, "{\"op\":\"hello\",\"protocol\":2}", NULL, 0);
    json_t *j = reply(&c, NULL, NULL);
    cr_assert(j);
    cr_expect(json_is_false(json_object_get(j, "ok")));
    cr_expect_eq(json_integer_value(json_object_get(j, "protocol")), 1,
                 "the refusal does not name the protocol the adapter speaks");
    json_decref(j);
    expect_error(&c, "{\"op\":\"hello\"}", "the request has no integer \"protocol\"");
    j = expect_ok(&c, "{\"op\":\"hello\",\"protocol\":1}");
    const char *dev = json_string_value(json_object_get(j, "device"));
    cr_assert(dev);
    cr_expect_leq(strlen(dev), 127, "%s", dev);
    cr_expect(!strncmp(dev, "cpu (FEATURE_00 FEATURE_02 FEATURE_03 ", 38), "%s", dev);
    cr_expect(strlen(dev) > 100 && dev[strlen(dev) - 1] == ')' && dev[strlen(dev) - 2] >= '0' &&
                  dev[strlen(dev) - 2] <= '9',
              "not cut at a whole name: %s", dev);
    cr_expect_eq(json_integer_value(json_object_get(j, "max_tokens")), 512);
    cr_expect_eq(json_array_size(json_object_get(j, "faults")), 0);
    json_decref(j);
    json_decref(expect_ok(&c, "{\"op\":\"bye\"}"));
    expect_clean_exit(finish(&c), 0, "bye");

    /* no feature on: plain "cpu" */
    static const char *const none[] = {"GATE_STUB_SYSINFO=CPU : SSE3 = 0 | AVX = 0 | ", NULL};
    start(&c, NULL, none);
    j = expect_ok(&c, "{\"op\":\"hello\",\"protocol\":1}");
    cr_expect_str_eq(json_string_value(json_object_get(j, "device")), "cpu");
    json_decref(j);
    expect_clean_exit(finish(&c), 2, "stdin closed without bye");
}

Test(llama_cpp, set_faults_with_a_fault_is_refused_and_an_empty_list_accepted)
{
    struct child c;
    start(&c, NULL, NULL);
    hello_and_load(&c, 8);
    json_decref(expect_ok(&c, "{\"op\":\"set_faults\",\"faults\":[]}"));
    expect_error(&c,
                 "{\"op\":\"set_faults\",\"faults\":[{\"kind\":\"skip_qk_norm\",\"rank\":0,"
                 "\"layers\":[0,2147483647],\"positions\":[0,2147483647]}]}",
                 "set_faults: llama.cpp cannot inject gate's faults (hello lists none)");
    expect_error(&c, "{\"op\":\"set_faults\"}", "set_faults: llama.cpp cannot inject");
    expect_error(&c, "{\"op\":\"set_faults\",\"faults\":{}}",
                 "set_faults: llama.cpp cannot inject");
    /* still serving */
    int32_t t = 3;
    uint32_t h = LLAMA_STUB_H0;
    expect_forward_ok(&c, &t, 1, 0, &h);
    json_decref(expect_ok(&c, "{\"op\":\"bye\"}"));
    expect_clean_exit(finish(&c), 0, "bye");
}

Test(llama_cpp, a_malformed_request_gets_an_error_reply_and_the_adapter_keeps_serving)
{
    struct child c;
    start(&c, NULL, NULL);
    expect_error(&c, "this is not json", "the request header is not a JSON object:");
    expect_error(&c, "[1,2]", "the request header is not a JSON object: another JSON value");
    expect_error(&c, "{\"op\":\"hello\",\"protocol\":1} x", "the request header is not a JSON");
    expect_error(&c, "{\"op\":\"hello\",\"op\":\"hello\",\"protocol\":1}",
                 "the request header is not a JSON object: duplicate object key");
    expect_error(&c, "{\"protocol\":1}", "the request has no string \"op\"");
    expect_error(&c, "{\"op\":7}", "the request has no string \"op\"");
    expect_error(&c, "{\"op\":\"launch_missiles\"}", "unknown op \"launch_missiles\"");
    int32_t t[2] = {1, 2};
    send_text(&c, "{\"op\":\"hello\",\"protocol\":1}", t, sizeof t);
    json_t *j = reply(&c, NULL, NULL);
    cr_assert(j);
    cr_expect_str_eq(json_string_value(json_object_get(j, "error")),
                     "only forward carries a payload");
    json_decref(j);
    expect_forward_error(&c, t, 1, 0, "forward: no model is loaded (send load first)");
    expect_error(&c, "{\"op\":\"truncate\",\"n_past\":0}",
                 "truncate: no model is loaded (send load first)");
    /* after all that, the session works */
    hello_and_load(&c, 16);
    uint32_t h = LLAMA_STUB_H0;
    expect_forward_ok(&c, t, 2, 0, &h);
    json_decref(expect_ok(&c, "{\"op\":\"bye\"}"));
    expect_clean_exit(finish(&c), 0, "bye");
}

Test(llama_cpp, a_frame_that_breaks_a_bound_is_refused_before_it_is_read_and_the_adapter_exits)
{
    struct child c;
    /* header length 0 */
    start(&c, NULL, NULL);
    send_frame_raw(&c, 0, NULL, 0, 0, NULL, 0);
    json_t *j = reply(&c, NULL, NULL);
    cr_assert(j);
    cr_expect_str_eq(json_string_value(json_object_get(j, "error")),
                     "request header length 0 is outside 1..65536");
    json_decref(j);
    cr_expect_null(reply(&c, NULL, NULL), "the adapter went on after a broken frame");
    expect_clean_exit(finish(&c), 2, "header length 0");

    /* header length 4 GiB - 1: refused from the length alone (nothing more is sent) */
    start(&c, NULL, NULL);
    unsigned char big[4] = {0xff, 0xff, 0xff, 0xff};
    put(&c, big, 4);
    j = reply(&c, NULL, NULL);
    cr_assert(j);
    cr_expect_str_eq(json_string_value(json_object_get(j, "error")),
                     "request header length 4294967295 is outside 1..65536");
    json_decref(j);
    expect_clean_exit(finish(&c), 2, "oversize header");

    /* a payload longer than max_tokens ids (by one id; by 1 TiB): refused from B alone */
    static const char *const small[] = {"--max-tokens", "4", NULL};
    static const uint64_t over[] = {20, (uint64_t)1 << 40};
    static const char *const over_msg[] = {
        "request payload of 20 bytes is over the limit of 16",
        "request payload of 1099511627776 bytes is over the limit of 16"};
    for (int i = 0; i < 2; i++) {
        start(&c, small, NULL);
        const char *fw = "{\"op\":\"forward\",\"n_past\":0,\"n_tokens\":4}";
        int32_t five[5] = {1, 2, 3, 4, 5};
        send_frame_raw(&c, (uint32_t)strlen(fw), fw, strlen(fw), over[i], five,
                       over[i] == 20 ? 20 : 0);
        j = reply(&c, NULL, NULL);
        cr_assert(j, "no reply to a payload of %llu bytes", (unsigned long long)over[i]);
        cr_expect_str_eq(json_string_value(json_object_get(j, "error")), over_msg[i]);
        json_decref(j);
        expect_clean_exit(finish(&c), 2, over_msg[i]);
    }

    /* frames cut short: the adapter ends with a status, no reply, no crash */
    start(&c, NULL, NULL);
    put(&c, "\x10\x00", 2);
    close_in(&c);
    cr_expect_null(reply(&c, NULL, NULL));
    expect_clean_exit(finish(&c), 2, "a length cut short");
    start(&c, NULL, NULL);
    send_frame_raw(&c, 40, "{\"op\":", 6, 0, NULL, 0);
    close_in(&c);
    cr_expect_null(reply(&c, NULL, NULL));
    expect_clean_exit(finish(&c), 2, "a header cut short");
    start(&c, NULL, NULL);
    hello_and_load(&c, 8);
    const char *f1 = "{\"op\":\"forward\",\"n_past\":0,\"n_tokens\":2}";
    int32_t t = 1;
    send_frame_raw(&c, (uint32_t)strlen(f1), f1, strlen(f1), 8, &t, 4);
    close_in(&c);
    cr_expect_null(reply(&c, NULL, NULL));
    expect_clean_exit(finish(&c), 2, "a payload cut short");
    char *log = child_stderr(&c);
    cr_expect(
        strstr(log, "gate-llama: a request frame is cut short: the stream ended after 56 bytes"),
        "%s", log);
    free(log);
}

Test(llama_cpp, forward_checks_every_field_before_llama_cpp_sees_it_and_the_cache_stays_true)
{
    static const char *const args[] = {"--max-tokens", "6", NULL};
    struct child c;
    start(&c, args, NULL);
    hello_and_load(&c, 12);
    int32_t tok[13];
    mode_tokens(9, N_VOCAB, 13, tok);
    uint32_t h = LLAMA_STUB_H0;
    expect_forward_ok(&c, tok, 3, 0, &h);
    expect_forward_error(&c, tok + 3, 1, 2, "forward: n_past 2 but the cache holds 3 positions");
    expect_forward_error(&c, tok + 3, 1, 4, "forward: n_past 4 but the cache holds 3 positions");
    expect_error(&c, "{\"op\":\"forward\",\"n_past\":3,\"n_tokens\":7}",
                 "forward: \"n_tokens\" is 7, outside 1..6");
    int32_t bad[2] = {tok[3], N_VOCAB};
    expect_forward_error(&c, bad, 2, 3, "forward: token 1 (id 512) is outside 0..511");
    bad[1] = -1;
    expect_forward_error(&c, bad, 2, 3, "forward: token 1 (id -1) is outside 0..511");
    /* a payload that does not match n_tokens */
    const char *req = "{\"op\":\"forward\",\"n_past\":3,\"n_tokens\":2}";
    send_text(&c, req, tok + 3, 4);
    json_t *j = reply(&c, NULL, NULL);
    cr_expect_str_eq(json_string_value(json_object_get(j, "error")),
                     "forward: a payload of 4 bytes for 2 tokens (want 8)");
    json_decref(j);
    expect_error(&c, "{\"op\":\"forward\",\"n_tokens\":0}",
                 "forward: the request has no integer \"n_past\"");
    expect_error(&c, "{\"op\":\"forward\",\"n_past\":3,\"n_tokens\":0}",
                 "forward: \"n_tokens\" is 0, outside 1..6");
    /* none of those touched the cache */
    expect_forward_ok(&c, tok + 3, 6, 3, &h);
    expect_forward_error(&c, tok + 9, 4, 9, "forward: positions 9..12 exceed n_ctx 12");
    expect_forward_ok(&c, tok + 9, 3, 9, &h);
    /* a context smaller than --max-tokens: its size bounds a forward */
    char req4[PATH_MAX + 100];
    snprintf(req4, sizeof req4, "{\"op\":\"load\",\"path\":\"%s\",\"n_ctx\":4}", moe_path());
    json_decref(expect_ok(&c, req4));
    expect_forward_error(&c, tok, 5, 0, "forward: \"n_tokens\" is 5, outside 1..4");
    h = LLAMA_STUB_H0;
    expect_forward_ok(&c, tok, 4, 0, &h);
    json_decref(expect_ok(&c, "{\"op\":\"bye\"}"));
    expect_clean_exit(finish(&c), 0, "bye");
}

Test(llama_cpp, truncate_past_the_cache_or_refused_by_llama_cpp_is_an_error)
{
    static const char *const env[] = {"GATE_STUB_FAIL=seq_rm", NULL};
    struct child c;
    start(&c, NULL, env);
    hello_and_load(&c, 16);
    int32_t tok[8];
    mode_tokens(4, N_VOCAB, 8, tok);
    uint32_t h = LLAMA_STUB_H0;
    expect_forward_ok(&c, tok, 5, 0, &h);
    expect_error(&c, "{\"op\":\"truncate\",\"n_past\":6}",
                 "truncate: \"n_past\" is 6, outside 0..5 (the cache holds 5)");
    expect_error(&c, "{\"op\":\"truncate\",\"n_past\":-1}", "truncate: \"n_past\" is -1");
    expect_error(&c, "{\"op\":\"truncate\",\"n_past\":2}",
                 "truncate: llama.cpp cannot drop positions 2..4");
    /* the refused truncate left the count at 5; an equal one is a no-op; 0 always works */
    json_decref(expect_ok(&c, "{\"op\":\"truncate\",\"n_past\":5}"));
    expect_forward_ok(&c, tok + 5, 1, 5, &h);
    json_decref(expect_ok(&c, "{\"op\":\"truncate\",\"n_past\":0}"));
    h = LLAMA_STUB_H0;
    expect_forward_ok(&c, tok + 2, 3, 0, &h);
    json_decref(expect_ok(&c, "{\"op\":\"bye\"}"));
    expect_clean_exit(finish(&c), 0, "bye");
}

Test(llama_cpp, a_failed_decode_is_an_error_and_leaves_the_cache_as_it_was)
{
    static const char *const env[] = {"GATE_STUB_FAIL=decode@2", NULL};
    struct child c;
    start(&c, NULL, env);
    hello_and_load(&c, 16);
    int32_t tok[8];
    mode_tokens(6, N_VOCAB, 8, tok);
    uint32_t h = LLAMA_STUB_H0;
    expect_forward_ok(&c, tok, 3, 0, &h);
    expect_forward_error(&c, tok + 3, 2, 3,
                         "forward: llama_decode of 2 tokens at n_past 3 returned 2");
    /* llama.cpp kept the aborted tokens; the adapter dropped them: the same forward again works */
    expect_forward_ok(&c, tok + 3, 2, 3, &h);
    json_decref(expect_ok(&c, "{\"op\":\"bye\"}"));
    expect_clean_exit(finish(&c), 0, "bye");
}

Test(llama_cpp, missing_logits_are_an_error_reply_never_a_short_payload)
{
    static const char *const env[] = {"GATE_STUB_FAIL=logits@1", NULL};
    struct child c;
    start(&c, NULL, env);
    hello_and_load(&c, 16);
    int32_t tok[3] = {7, 8, 9};
    expect_forward_error(&c, tok, 3, 0, "forward: llama.cpp has no logits for position 1");
    json_decref(expect_ok(&c, "{\"op\":\"bye\"}"));
    expect_clean_exit(finish(&c), 0, "bye");
}

Test(llama_cpp, stray_library_output_never_reaches_the_protocol_stream)
{
    static const char *const env[] = {"GATE_STUB_FAIL=stdout", NULL};
    struct child c;
    start(&c, NULL, env);
    hello_and_load(&c, 8);
    int32_t tok[2] = {1, 2};
    uint32_t h = LLAMA_STUB_H0;
    expect_forward_ok(&c, tok, 2, 0, &h);
    json_decref(expect_ok(&c, "{\"op\":\"bye\"}"));
    expect_clean_exit(finish(&c), 0, "bye");
    char *log = child_stderr(&c);
    cr_expect(strstr(log, "llama-stub: stray text on stdout at load") &&
                  strstr(log, "llama-stub: stray text on stdout at decode"),
              "the stray text went nowhere visible: %s", log);
    free(log);
}

Test(llama_cpp, the_options_reach_llama_cpp_and_its_log_is_filtered_to_warnings)
{
    static const char *const args[] = {"--threads",   "3",   "--max-tokens", "7",
                                       "--kv-type",   "f32", "--flash-attn", "off",
                                       "--no-repack", NULL};
    struct child c;
    start(&c, args, NULL);
    hello_and_load(&c, 16);
    json_decref(expect_ok(&c, "{\"op\":\"bye\"}"));
    expect_clean_exit(finish(&c), 0, "bye");
    char *log = child_stderr(&c);
    cr_expect(strstr(log, "llama-stub: model n_gpu_layers=0 devices=none use_extra_bufts=0\n"),
              "%s", log);
    cr_expect(strstr(log, "llama-stub: context n_ctx=16 n_batch=7 n_ubatch=7 n_seq_max=1 "
                          "threads=3/3 type_k=f32 type_v=f32 flash_attn=disabled embeddings=0 "
                          "offload_kqv=0 op_offload=0\n"),
              "%s", log);
    cr_expect(strstr(log, "llama-stub: warn: this is a stub (continued)\n"), "%s", log);
    cr_expect_null(strstr(log, "llama-stub: info:"), "INFO passed without --verbose: %s", log);
    cr_expect_null(strstr(log, "llama-stub: debug:"), "DEBUG passed without --verbose: %s", log);
    free(log);

    /* the defaults; --verbose lets everything through */
    static const char *const verbose[] = {"--verbose", NULL};
    start(&c, verbose, NULL);
    hello_and_load(&c, 600);
    json_decref(expect_ok(&c, "{\"op\":\"bye\"}"));
    expect_clean_exit(finish(&c), 0, "bye");
    log = child_stderr(&c);
    cr_expect(strstr(log, "llama-stub: model n_gpu_layers=0 devices=none use_extra_bufts=1\n"),
              "%s", log);
    cr_expect(strstr(log, "llama-stub: context n_ctx=600 n_batch=512 n_ubatch=512 n_seq_max=1 "
                          "threads=2/2 type_k=f16 type_v=f16 flash_attn=auto "),
              "%s", log);
    cr_expect(strstr(log, "llama-stub: info: loading\n") && strstr(log, "llama-stub: debug:"), "%s",
              log);
    free(log);

    /* options it does not take: exit 2 with the reason, before any frame */
    static const char *const bad[][3] = {
        {"--kv-type", "q8_0", NULL},     {"--threads", "0", NULL},
        {"--max-tokens", "65537", NULL}, {"--flash-attn", "maybe", NULL},
        {"--frobnicate", "1", NULL},     {"--threads", NULL, NULL}};
    static const char *const why[] = {"--kv-type 'q8_0' is not f16 or f32",
                                      "--threads '0' is not an integer in 1..1024",
                                      "--max-tokens '65537' is not an integer in 1..65536",
                                      "--flash-attn 'maybe' is not auto, on or off",
                                      "unknown option '--frobnicate'",
                                      "option '--threads' needs a value"};
    for (int i = 0; i < 6; i++) {
        start(&c, bad[i], NULL);
        cr_expect_null(reply(&c, NULL, NULL));
        expect_clean_exit(finish(&c), 2, why[i]);
        log = child_stderr(&c);
        cr_expect(strstr(log, why[i]) && strstr(log, "usage: gate-llama"), "%s", log);
        free(log);
    }
}

/* ---- end to end ------------------------------------------------------------------------------ */

/* One exec cell whose engine is gate-llama-stub, through the gate binary: it runs to the end,
 * capability PASSes (llama.cpp on a CPU, as the handshake says), parity FAILs (the stand-in's
 * logits are a hash, not the model's), and the signed receipt records the engine that ran. */
Test(llama_cpp, gate_run_of_a_cell_on_the_adapter_records_its_identity_and_fails_parity)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    struct ladderfix fx;
    ladderfix_init(&fx, "llama");
    char engines[2 * PATH_MAX + 300];
    snprintf(engines, sizeof engines,
             "engines:\n  llama: {argv: [%s, --threads, '1'], timeout_s: 30,"
             " supports: [decode, prefill, chat], env: {GATE_STUB_N_VOCAB: '%d'},"
             " allow: [%s]}\n",
             adapter(), N_VOCAB, stub_lib());
    const char *lp = ladderfix_one_cell(&fx, "l.yaml", engines, "exec.llama.decode", NULL,
                                        "    falsify: [skip_qk_norm]\n"
                                        "    throughput: {runs: 3, warmup: 0, prompt_tokens: 8,"
                                        " decode_tokens: 2}\n");
    const char *out = ladderfix_path(&fx, "run.out");
    int st = ladderfix_sh("%s run %s --host a --db %s --key %s --threads 1 > %s 2>&1", bin, lp,
                          ladderfix_path(&fx, "r.db"), ladderfix_path(&fx, "a.key"), out);
    char *text = check_slurp_text(out);
    cr_expect_eq(st, 1, "gate run: exit %d, expected 1 (a cell FAILed): %s", st, text);
    free(text);

    char want_build[72], exe_sha[65];
    expected_build_id(want_build);
    sha256_file(adapter(), exe_sha);
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    cr_assert_eq(sqlite3_open_v2(ladderfix_path(&fx, "r.db"), &db, SQLITE_OPEN_READONLY, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "select json_extract(payload,'$.subject.exec_engine.engine'),"
                                    " json_extract(payload,'$.subject.exec_engine.version'),"
                                    " json_extract(payload,'$.subject.exec_engine.build_id'),"
                                    " json_extract(payload,'$.subject.exec_engine.device'),"
                                    " json_extract(payload,'$.subject.exec_engine.sha256'),"
                                    " json_extract(payload,'$.subject.exec_engine.spawns'),"
                                    " json_extract(payload,'$.verdict'),"
                                    " json_extract(payload,'$.gates.capability.verdict'),"
                                    " json_extract(payload,'$.gates.parity.verdict'),"
                                    " json_extract(payload,'$.gates.parity.metrics.ran.engine'),"
                                    " json_extract(payload,'$.gates.parity.reason')"
                                    " from receipts",
                                    -1, &q, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(q), SQLITE_ROW, "no receipt");
#define COL(i)                                                                                     \
    ((const char *)sqlite3_column_text(q, i) ? (const char *)sqlite3_column_text(q, i) : "")
    cr_expect_str_eq(COL(0), "llama.cpp");
    cr_expect_str_eq(COL(1), LLAMA_STUB_VERSION " (ggml " LLAMA_STUB_GGML_VERSION
                                                ", commit " LLAMA_STUB_GGML_COMMIT ")");
    cr_expect_str_eq(COL(2), want_build);
    cr_expect_str_eq(COL(3), "cpu (SSE3 SSSE3 AVX2 FMA)");
    cr_expect_str_eq(COL(4), exe_sha, "the binary gate hashed is not the adapter");
    cr_expect_eq(sqlite3_column_int(q, 5), 1, "one child for the cell");
    cr_expect_str_eq(COL(6), "FAIL");
    cr_expect_str_eq(COL(7), "PASS", "capability");
    cr_expect_str_eq(COL(8), "FAIL", "parity passed logits that are a hash: %s", COL(10));
    cr_expect(strstr(COL(9), "llama.cpp " LLAMA_STUB_VERSION), "%s", COL(9));
#undef COL
    cr_expect_eq(sqlite3_step(q), SQLITE_DONE, "more than one receipt");
    sqlite3_finalize(q);
    sqlite3_close(db);
}
