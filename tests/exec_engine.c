/* exec_engine.c — the reference engine of the exec backend's tests: gate-exec version 1
 * (docs/exec.md) over gate's own reference twin, with planted flaws.
 *
 * It reads request frames on stdin and answers on stdout, one at a time, with blocking I/O: the
 * simplest engine that can be right. The logits are the twin's (backend "ref", one thread), so a
 * clean run passes parity bit for bit; the options make it wrong on purpose:
 *   --noise SIGMA          add SIGMA * u, u in [-1, 1] from splitmix64(position, token), to every
 *                          logit (deterministic; independent of how the calls are cut)
 *   --defect scale         logits scaled by 1.5 (parity must FAIL)
 *   --crash-at-forward N   the Nth forward request dies by SIGSEGV
 *   --hang-at-forward N    the Nth forward request never answers
 *   --error-at-forward N   the Nth forward request gets an error reply ("ok": false)
 *   --bad-frame            the first forward reply's header is not JSON
 *   --oversize-frame       the first forward reply announces a 1 MiB header
 *   --wrong-size           forward replies carry one float too few
 *   --extra-bytes          truncate replies are followed by three stray bytes (one write)
 *   --wrong-digest         load answers a digest that is not the file's
 *   --exit-early           exits with status 3 right after answering hello
 *   --no-faults            lists no fault kinds in hello
 *   --max-tokens N         hello's max_tokens (default 4096)
 * Faults: every kind of gate's table, applied by the twin (set_faults -> backend_set_faults).
 * Start reading: main().
 */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/detmath.h"
#include "engine/backend.h"
#include "engine/model.h"
#include "faults/fault.h"

struct opts {
    double noise;
    int defect;
    int crash_at, hang_at, error_at;
    int bad_frame, oversize_frame, wrong_size, extra_bytes, wrong_digest, exit_early, no_faults;
    int max_tokens;
    const char *device; /* what hello says the engine runs on */
};

static void die(const char *why)
{
    fprintf(stderr, "exec_engine: %s\n", why);
    exit(2);
}

static int read_full(void *buf, size_t n)
{
    size_t at = 0;
    while (at < n) {
        ssize_t r = read(0, (char *)buf + at, n - at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        at += (size_t)r;
    }
    return 0;
}

static void write_full(const void *buf, size_t n)
{
    size_t at = 0;
    while (at < n) {
        ssize_t w = write(1, (const char *)buf + at, n - at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            exit(4); /* gate went away */
        at += (size_t)w;
    }
}

/* One frame: header text (its own length unless hlen says otherwise), payload. */
static void send_raw(const char *hdr, uint32_t hlen, const void *payload, uint64_t plen,
                     uint64_t announce)
{
    unsigned char pre[8];
    for (int i = 0; i < 4; i++)
        pre[i] = (unsigned char)(hlen >> (8 * i));
    write_full(pre, 4);
    write_full(hdr, strlen(hdr));
    for (int i = 0; i < 8; i++)
        pre[i] = (unsigned char)(announce >> (8 * i));
    write_full(pre, 8);
    if (plen)
        write_full(payload, plen);
}

/* Send reply j (decref'd here) with a payload. */
static void send_json(json_t *j, const void *payload, uint64_t plen)
{
    char *t = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!t)
        die("out of memory");
    send_raw(t, (uint32_t)strlen(t), payload, plen, plen);
    free(t);
}

static void send_error(const char *why)
{
    send_json(json_pack("{s:b, s:s}", "ok", 0, "error", why), NULL, 0);
}

static int file_sha256(const char *path, char hex[65])
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    crypto_hash_sha256_state st;
    unsigned char buf[1 << 16], d[32];
    size_t n;
    crypto_hash_sha256_init(&st);
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        crypto_hash_sha256_update(&st, buf, n);
    fclose(f);
    crypto_hash_sha256_final(&st, d);
    sodium_bin2hex(hex, 65, d, 32);
    return 0;
}

/* {"kind":str,"rank":int,"layers":[lo,hi],"positions":[lo,hi]} -> spec; 0 ok. */
static int parse_fault(const json_t *o, struct fault_spec *f)
{
    const char *kind = json_string_value(json_object_get(o, "kind"));
    const json_t *ly = json_object_get(o, "layers"), *ps = json_object_get(o, "positions");
    memset(f, 0, sizeof *f);
    int k = -1;
    for (int i = 0; kind && i < FAULT_KIND_COUNT; i++)
        if (!strcmp(kind, fault_kind_name((enum fault_kind)i)))
            k = i;
    if (k < 0 || json_array_size(ly) != 2 || json_array_size(ps) != 2)
        return -1;
    f->kind = (enum fault_kind)k;
    f->rank = (int)json_integer_value(json_object_get(o, "rank"));
    f->layer_lo = (int)json_integer_value(json_array_get(ly, 0));
    f->layer_hi = (int)json_integer_value(json_array_get(ly, 1));
    f->pos_lo = (int)json_integer_value(json_array_get(ps, 0));
    f->pos_hi = (int)json_integer_value(json_array_get(ps, 1));
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {.max_tokens = 4096, .device = "cpu: gate's reference twin"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--noise") && v)
            o.noise = atof(argv[++i]);
        else if (!strcmp(a, "--defect") && v && !strcmp(v, "scale"))
            o.defect = 1, i++;
        else if (!strcmp(a, "--crash-at-forward") && v)
            o.crash_at = atoi(argv[++i]);
        else if (!strcmp(a, "--hang-at-forward") && v)
            o.hang_at = atoi(argv[++i]);
        else if (!strcmp(a, "--error-at-forward") && v)
            o.error_at = atoi(argv[++i]);
        else if (!strcmp(a, "--device") && v)
            o.device = argv[++i];
        else if (!strcmp(a, "--max-tokens") && v)
            o.max_tokens = atoi(argv[++i]);
        else if (!strcmp(a, "--bad-frame"))
            o.bad_frame = 1;
        else if (!strcmp(a, "--oversize-frame"))
            o.oversize_frame = 1;
        else if (!strcmp(a, "--wrong-size"))
            o.wrong_size = 1;
        else if (!strcmp(a, "--extra-bytes"))
            o.extra_bytes = 1;
        else if (!strcmp(a, "--wrong-digest"))
            o.wrong_digest = 1;
        else if (!strcmp(a, "--exit-early"))
            o.exit_early = 1;
        else if (!strcmp(a, "--no-faults"))
            o.no_faults = 1;
        else {
            fprintf(stderr, "exec_engine: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (sodium_init() < 0)
        die("libsodium failed to initialize");
    struct model *m = NULL;
    struct backend *b = NULL;
    float *logits = NULL;
    int32_t *tokens = NULL;
    int forwards = 0, n_ctx = 0;
    for (;;) {
        unsigned char pre[8];
        if (read_full(pre, 4))
            break; /* gate closed our stdin */
        uint32_t H = (uint32_t)pre[0] | (uint32_t)pre[1] << 8 | (uint32_t)pre[2] << 16 |
                     (uint32_t)pre[3] << 24;
        if (H < 1 || H > 65536)
            die("request header length out of bounds");
        char *hdr = malloc(H);
        if (!hdr || read_full(hdr, H) || read_full(pre, 8))
            die("truncated request");
        uint64_t B = 0;
        for (int i = 7; i >= 0; i--)
            B = (B << 8) | pre[i];
        if (B > ((uint64_t)1 << 26))
            die("request payload too large");
        unsigned char *payload = B ? malloc(B) : NULL;
        if ((B && !payload) || (B && read_full(payload, B)))
            die("truncated request payload");
        json_t *req = json_loadb(hdr, H, 0, NULL);
        free(hdr);
        const char *op = json_string_value(json_object_get(req, "op"));
        if (!op) {
            send_error("request without op");
        } else if (!strcmp(op, "hello")) {
            json_t *kinds = json_array();
            for (int k = 0; !o.no_faults && k < FAULT_KIND_COUNT; k++)
                json_array_append_new(kinds, json_string(fault_kind_name((enum fault_kind)k)));
            send_json(json_pack("{s:b, s:i, s:s, s:s, s:s, s:s, s:o, s:i}", "ok", 1, "protocol", 1,
                                "engine", "exec_engine", "version", "1.0", "build_id",
                                "tests/exec_engine.c", "device", o.device, "faults", kinds,
                                "max_tokens", o.max_tokens),
                      NULL, 0);
            if (o.exit_early) {
                fprintf(stderr, "exec_engine: exiting early as asked\n");
                exit(3);
            }
        } else if (!strcmp(op, "load")) {
            const char *path = json_string_value(json_object_get(req, "path"));
            n_ctx = (int)json_integer_value(json_object_get(req, "n_ctx"));
            struct gate_err err = {0};
            char sha[65];
            struct backend_config cfg = {.n_threads = 1, .n_ctx = n_ctx, .n_batch = n_ctx};
            if (!path || n_ctx < 1 || file_sha256(path, sha) || model_load(&m, path, &err) ||
                backend_open(&b, "ref", m, &cfg, &err)) {
                send_error(err.msg[0] ? err.msg : "cannot load the model");
            } else {
                if (o.wrong_digest)
                    sha[0] = sha[0] == '0' ? '1' : '0';
                logits = malloc((size_t)n_ctx * m->hp.n_vocab * sizeof *logits);
                tokens = malloc((size_t)n_ctx * sizeof *tokens);
                if (!logits || !tokens)
                    die("out of memory");
                send_json(json_pack("{s:b, s:s, s:i, s:i}", "ok", 1, "sha256", sha, "n_vocab",
                                    (int)m->hp.n_vocab, "n_ctx", n_ctx),
                          NULL, 0);
            }
        } else if (!strcmp(op, "forward")) {
            const int n_past = (int)json_integer_value(json_object_get(req, "n_past"));
            const int n = (int)json_integer_value(json_object_get(req, "n_tokens"));
            struct gate_err err = {0};
            forwards++;
            if (forwards == o.crash_at) {
                fprintf(stderr, "exec_engine: crashing at forward %d as asked\n", forwards);
                fflush(stderr);
                signal(SIGSEGV, SIG_DFL); /* a real crash, even where a sanitizer catches SEGV */
                raise(SIGSEGV);
            }
            if (forwards == o.hang_at) {
                fprintf(stderr, "exec_engine: hanging at forward %d as asked\n", forwards);
                fflush(stderr);
                for (;;)
                    pause();
            }
            if (forwards == o.error_at) {
                fprintf(stderr, "exec_engine: refusing forward %d as asked\n", forwards);
                send_error("planted error: this engine refuses forward requests now");
            } else if (!b || n < 1 || n_past + n > n_ctx || B != (uint64_t)n * 4) {
                send_error("forward: bad request (no model, or sizes off)");
            } else if (memcpy(tokens, payload, B),
                       backend_forward(b, tokens, n, n_past, logits, &err)) {
                send_error(err.msg);
            } else {
                const size_t V = m->hp.n_vocab;
                for (int t = 0; t < n; t++)
                    for (size_t i = 0; i < V; i++) {
                        float *x = &logits[(size_t)t * V + i];
                        if (o.noise > 0) {
                            uint64_t st = ((uint64_t)(n_past + t) << 32) ^ (uint64_t)i;
                            const double u =
                                (double)(det_splitmix64(&st) >> 11) * 0x1.0p-53 * 2.0 - 1.0;
                            *x += (float)(o.noise * u);
                        }
                        if (o.defect)
                            *x *= 1.5f;
                    }
                const uint64_t bytes = (uint64_t)n * V * 4;
                if (o.bad_frame) {
                    o.bad_frame = 0;
                    const char *junk = "this is not json";
                    send_raw(junk, (uint32_t)strlen(junk), NULL, 0, 0);
                } else if (o.oversize_frame) {
                    o.oversize_frame = 0;
                    send_raw("{}", 1u << 20, NULL, 0, 0);
                } else {
                    char *t = json_dumps(
                        json_pack("{s:b, s:i, s:i}", "ok", 1, "n_tokens", n, "n_vocab", (int)V),
                        JSON_COMPACT);
                    const uint64_t send = o.wrong_size ? bytes - 4 : bytes;
                    send_raw(t, (uint32_t)strlen(t), logits, send, send);
                    free(t);
                }
            }
        } else if (!strcmp(op, "truncate")) {
            struct gate_err err = {0};
            const int n_past = (int)json_integer_value(json_object_get(req, "n_past"));
            if (!b || backend_truncate(b, n_past, &err)) {
                send_error(err.msg[0] ? err.msg : "truncate before load");
            } else if (o.extra_bytes) {
                /* the reply and the stray bytes in one write: they arrive together */
                const char *t = "{\"ok\":true}";
                unsigned char buf[64];
                const size_t h = strlen(t);
                memset(buf, 0, sizeof buf);
                buf[0] = (unsigned char)h;
                memcpy(buf + 4, t, h);
                memcpy(buf + 4 + h + 8, "xyz", 3);
                write_full(buf, 4 + h + 8 + 3);
            } else {
                send_json(json_pack("{s:b}", "ok", 1), NULL, 0);
            }
        } else if (!strcmp(op, "set_faults")) {
            struct fault_set fs = {0};
            const json_t *list = json_object_get(req, "faults"), *it;
            size_t i;
            int ok = b && json_is_array(list) && !o.no_faults;
            json_array_foreach(list, i, it)
            {
                if (ok && (fs.n == FAULT_MAX || parse_fault(it, &fs.f[fs.n++])))
                    ok = 0;
            }
            if (!ok) {
                send_error("set_faults: bad fault list");
            } else {
                backend_set_faults(b, &fs);
                send_json(json_pack("{s:b}", "ok", 1), NULL, 0);
            }
        } else if (!strcmp(op, "bye")) {
            send_json(json_pack("{s:b}", "ok", 1), NULL, 0);
            json_decref(req);
            free(payload);
            break;
        } else {
            send_error("unknown op");
        }
        json_decref(req);
        free(payload);
    }
    backend_close(b);
    model_free(m);
    free(logits);
    free(tokens);
    return 0;
}
