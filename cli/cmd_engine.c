/* cmd_engine.c — the engine commands: `gate model inspect`, `gate eval`, `gate generate`,
 * `gate bench`. They are thin: load a model, open a backend, call forward(), print.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic.h"
#include "cli/cli.h"
#include "cli/cmd_synth.h"
#include "engine/backend.h"
#include "engine/chat.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/pool.h"
#include "engine/quant.h"
#include "engine/ref_ops.h"
#include "engine/tokenizer.h"
#include "harness/baseline.h"
#include "harness/gatedef.h"
#include "harness/identity.h"
#include "oracles/throughput.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Greedy choice: the largest logit, the lowest id on ties. */
static void hex(const unsigned char *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

/* ---- gate model inspect --------------------------------------------------------------------- */

static const char MODEL_USAGE[] =
    "usage: gate model inspect MODEL.gguf\n"
    "       gate model synth --help   (write a deterministic synthetic model)\n"
    "       gate model stats MODEL.gguf [--tokens N]   (is it healthy: hidden RMS, routing)\n"
    "  Prints the architecture, hyperparameters, tensor table (name, type, shape, bytes), the\n"
    "  quant mix, total bytes, and whether gate supports the model (and why not).\n";

static int inspect(const char *path)
{
    struct gate_err err = {0};
    struct gguf_file *f = NULL;
    int rc = gguf_open(&f, path, 0, &err);
    if (rc)
        return cli_fail(err_exit_code(rc), "%s", err.msg);
    unsigned char digest[crypto_hash_sha256_BYTES];
    char digest_hex[2 * sizeof digest + 1];
    crypto_hash_sha256(digest, f->map, f->size);
    hex(digest, sizeof digest, digest_hex);
    printf("file:        %s\n", path);
    printf("bytes:       %zu\n", f->size);
    printf("sha256:      %s\n", digest_hex);
    printf("gguf:        version %" PRIu32 ", alignment %" PRIu32 ", %" PRIu64
           " metadata keys, %" PRIu64 " tensors, data at byte %" PRIu64 "\n",
           f->version, f->alignment, f->n_kv, f->n_tensors, f->data_offset);
    const struct gguf_kv *a = gguf_find_kv(f, "general.architecture");
    printf("arch:        %.*s\n", a && a->type == GGUF_TYPE_STRING ? (int)a->strs[0].len : 1,
           a && a->type == GGUF_TYPE_STRING ? a->strs[0].ptr : "?");
    printf("metadata:\n");
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        printf("  %-48s ", kv->key);
        if (kv->type == GGUF_TYPE_STRING)
            printf("%.*s\n", (int)(kv->strs[0].len > 80 ? 80 : kv->strs[0].len), kv->strs[0].ptr);
        else if (kv->type == GGUF_TYPE_ARRAY)
            printf("[%s x %" PRIu64 "]\n", gguf_type_name(kv->arr_type), kv->n);
        else if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64)
            printf("%g\n", gguf_kv_float(kv, 0));
        else if (kv->type == GGUF_TYPE_BOOL)
            printf("%s\n", kv->data[0] ? "true" : "false");
        else if (kv->type == GGUF_TYPE_INT8 || kv->type == GGUF_TYPE_INT16 ||
                 kv->type == GGUF_TYPE_INT32 || kv->type == GGUF_TYPE_INT64)
            printf("%" PRId64 "\n", (int64_t)gguf_kv_uint(kv, 0));
        else
            printf("%" PRIu64 "\n", gguf_kv_uint(kv, 0));
    }
    uint64_t by_type[QUANT_TYPE_LIMIT] = {0}, n_by_type[QUANT_TYPE_LIMIT] = {0}, total = 0;
    printf("tensors:\n  %-36s %-6s %-28s %12s\n", "name", "type", "shape", "bytes");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        char shape[96];
        int k = snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t->n_dims; d++)
            k += snprintf(shape + k, sizeof shape - (size_t)k, d ? ", %" PRId64 : "%" PRId64,
                          t->ne[d]);
        snprintf(shape + k, sizeof shape - (size_t)k, "]");
        printf("  %-36s %-6s %-28s %12" PRIu64 "\n", t->name, quant_name(t->type), shape,
               t->nbytes);
        by_type[t->type] += t->nbytes;
        n_by_type[t->type]++;
        total += t->nbytes;
    }
    printf("quant mix:\n");
    for (int t = 0; t < QUANT_TYPE_LIMIT; t++)
        if (n_by_type[t])
            printf("  %-6s %4" PRIu64 " tensors %14" PRIu64 " bytes (%5.1f%%)\n", quant_name(t),
                   n_by_type[t], by_type[t],
                   total ? 100.0 * (double)by_type[t] / (double)total : 0);
    printf("total:       %" PRIu64 " tensor bytes\n", total);
    gguf_close(f);
    struct model *m = NULL;
    rc = model_load(&m, path, &err);
    if (rc) {
        printf("supported:   no: %s\n", err.msg);
        return 0;
    }
    const struct model_hparams *hp = &m->hp;
    printf("hparams:     vocab %" PRIu32 ", ctx %" PRIu32 ", embd %" PRIu32 ", layers %" PRIu32
           ", heads %" PRIu32 "/%" PRIu32 " kv, head_dim %" PRIu32 ", eps %g, rope base %g",
           hp->n_vocab, hp->n_ctx_train, hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv,
           hp->head_dim, (double)hp->eps, (double)hp->rope_base);
    if (hp->n_expert == 0) /* dense */
        printf(", ffn %" PRIu32, hp->n_ff);
    else
        printf(", experts %" PRIu32 " top-%" PRIu32 ", expert ffn %" PRIu32, hp->n_expert,
               hp->n_expert_used, hp->n_ff_exp);
    printf(", %s output\n", m->tied ? "tied" : "separate");
    printf("supported:   yes (%s, backends: ref)\n", model_arch_name(hp->arch));
    model_free(m);
    return 0;
}

int cmd_model(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(MODEL_USAGE, stdout);
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "synth"))
        return cmd_model_synth(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "stats"))
        return cmd_model_stats(argc - 1, argv + 1);
    if (argc >= 3 && !strcmp(argv[1], "inspect") &&
        (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
        fputs(MODEL_USAGE, stdout);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "inspect"))
        return inspect(argv[2]);
    fputs(MODEL_USAGE, stderr);
    return 2;
}

/* ---- shared: load + open ------------------------------------------------------------------- */

struct session {
    struct model *m;
    struct backend *b;
    double load_s;
};

static int session_open(struct session *s, const char *path, const char *backend, int threads,
                        int n_ctx, int n_batch, struct gate_err *err)
{
    memset(s, 0, sizeof *s);
    double t0 = now_s();
    int rc = model_load(&s->m, path, err);
    if (rc)
        return rc;
    struct backend_config cfg = {.n_threads = threads, .n_ctx = n_ctx, .n_batch = n_batch};
    rc = backend_open(&s->b, backend, s->m, &cfg, err);
    if (rc) {
        model_free(s->m);
        s->m = NULL;
        return rc;
    }
    s->load_s = now_s() - t0;
    return 0;
}

static void session_close(struct session *s)
{
    backend_close(s->b);
    model_free(s->m);
}

/* ---- gate eval ------------------------------------------------------------------------------ */

static const char EVAL_USAGE[] =
    "usage: gate eval MODEL.gguf --tokens FILE --logits OUT.f32 [--backend ref] [--threads N]\n"
    "  Evaluates every position of the token ids in FILE (whitespace separated) in one forward\n"
    "  pass and writes float32 little-endian logits [n_pos][n_vocab] to OUT.f32.\n";

/* Write data to path atomically (base/atomic.h: a temp file in path's folder, fsync, rename;
 * nothing is left behind on failure or SIGINT/SIGTERM). Errors name path, never the temp. */
static int write_all(const char *path, const void *data, size_t n, struct gate_err *err)
{
    struct atomic_file a = {0};
    int rc = atomic_open(&a, path, 0644, err);
    if (!rc)
        rc = atomic_write(&a, data, n, err);
    if (!rc)
        rc = atomic_commit(&a, err);
    atomic_abort(&a);
    return rc;
}

int cmd_eval(int argc, char **argv)
{
    const char *model = NULL, *tokens = NULL, *logits_path = NULL, *backend = backend_judge_name(),
               *v;
    int threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(EVAL_USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--tokens")) {
            if (cli_value(argc, argv, &i, &tokens))
                return 2;
        } else if (!strcmp(argv[i], "--logits")) {
            if (cli_value(argc, argv, &i, &logits_path))
                return 2;
        } else if (!strcmp(argv[i], "--backend")) {
            if (cli_value(argc, argv, &i, &backend))
                return 2;
        } else if (!strcmp(argv[i], "--threads")) {
            if (cli_value(argc, argv, &i, &v) || cli_int("eval", "--threads", v, 1, 1024, &threads))
                return 2;
        } else if (argv[i][0] == '-' || model) {
            fputs(EVAL_USAGE, stderr);
            return cli_fail(2, "eval: unexpected argument '%s'", argv[i]);
        } else {
            model = argv[i];
        }
    }
    if (!model || !tokens || !logits_path) {
        fputs(EVAL_USAGE, stderr);
        return 2;
    }
    struct gate_err err = {0};
    int32_t *ids = NULL;
    int n = 0;
    float *logits = NULL;
    struct session s = {0};
    int rc = cli_read_ids(tokens, &ids, &n, &err);
    if (!rc)
        rc = session_open(&s, model, backend, threads, n, n, &err);
    if (!rc) {
        const uint32_t V = s.m->hp.n_vocab;
        logits = malloc((size_t)n * V * sizeof(float));
        if (!logits)
            rc = err_set(&err, ERR_ENV, "out of memory for %d x %" PRIu32 " logits", n, V);
        double t0 = now_s();
        if (!rc)
            rc = backend_forward(s.b, ids, n, 0, logits, &err);
        double dt = now_s() - t0;
        if (!rc)
            rc = write_all(logits_path, logits, (size_t)n * V * sizeof(float), &err);
        if (!rc) {
            struct backend_info info;
            backend_info(s.b, &info);
            fprintf(stderr,
                    "eval: %d positions x %" PRIu32 " logits -> %s; backend %s (%s);"
                    " load %.2f s, forward %.3f s (%.1f tokens/s); last argmax %" PRId32 "\n",
                    n, V, logits_path, info.backend, info.device, s.load_s, dt, n / dt,
                    ref_argmax(logits + (size_t)(n - 1) * V, V));
        }
    }
    free(logits);
    free(ids);
    session_close(&s);
    return rc ? cli_fail(err_exit_code(rc), "%s", err.msg) : 0;
}

/* ---- gate generate -------------------------------------------------------------------------- */

static const char GENERATE_USAGE[] =
    "usage: gate generate MODEL.gguf (--prompt TEXT [--chat] | --tokens FILE) [--n N] [--ids]\n"
    "                     [--backend ref] [--threads N]\n"
    "  Greedy decode with the KV cache: the prompt in one forward pass, then one token per step.\n"
    "  --prompt TEXT  tokenized with the model's tokenizer (special tokens in TEXT are parsed)\n"
    "  --chat         wrap TEXT as one user turn of the Qwen3 chat template (non-thinking mode)\n"
    "  --tokens FILE  token ids, whitespace separated\n"
    "  --n N          most tokens to generate (default 32); text generation stops at EOS\n"
    "  --ids          print the generated token ids, one per line, instead of text\n";

/* Token ids of --prompt TEXT (with --chat: one user turn + the generation prompt). */
static int prompt_ids(const struct model *m, const char *text, int chat, struct tok **tk,
                      int32_t **ids, int *n, struct gate_err *err)
{
    int rc = tok_load(tk, m->gguf, err);
    char *formatted = NULL;
    if (!rc && chat) {
        struct chat_msg msg = {.role = "user", .content = text};
        rc = chat_format(&msg, 1, 1, 0, &formatted, err);
        text = formatted;
    }
    if (!rc)
        rc = tok_encode(*tk, text, strlen(text), 1, ids, n, err);
    if (!rc && *n == 0)
        rc = err_set(err, ERR_INPUT, "the prompt is empty after tokenization");
    free(formatted);
    return rc;
}

/* Greedy decode: prompt (n_prompt) then n_gen tokens one at a time; out receives the ids. */
int engine_greedy(struct backend *b, const int32_t *prompt, int n_prompt, int n_gen, int32_t *out,
                  struct gate_err *err)
{
    const uint32_t V = b->model->hp.n_vocab;
    float *logits = malloc((size_t)n_prompt * V * sizeof(float));
    if (!logits)
        return err_set(err, ERR_ENV, "out of memory for the prompt's logits");
    int rc = backend_truncate(b, 0, err);
    if (!rc)
        rc = backend_forward(b, prompt, n_prompt, 0, logits, err);
    int32_t next = rc ? 0 : ref_argmax(logits + (size_t)(n_prompt - 1) * V, V);
    for (int i = 0; !rc && i < n_gen; i++) {
        out[i] = next;
        if (i + 1 < n_gen) {
            rc = backend_forward(b, &next, 1, n_prompt + i, logits, err);
            next = ref_argmax(logits, V);
        }
    }
    free(logits);
    return rc;
}

int cmd_generate(int argc, char **argv)
{
    const char *model = NULL, *tokens = NULL, *prompt = NULL, *backend = backend_judge_name(), *v;
    int threads = 0, n_gen = 32, print_ids = 0, chat = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(GENERATE_USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--tokens")) {
            if (cli_value(argc, argv, &i, &tokens))
                return 2;
        } else if (!strcmp(argv[i], "--backend")) {
            if (cli_value(argc, argv, &i, &backend))
                return 2;
        } else if (!strcmp(argv[i], "--n")) {
            if (cli_value(argc, argv, &i, &v) || cli_int("generate", "--n", v, 1, 1 << 20, &n_gen))
                return 2;
        } else if (!strcmp(argv[i], "--threads")) {
            if (cli_value(argc, argv, &i, &v) ||
                cli_int("generate", "--threads", v, 1, 1024, &threads))
                return 2;
        } else if (!strcmp(argv[i], "--prompt")) {
            if (cli_value(argc, argv, &i, &prompt))
                return 2;
        } else if (!strcmp(argv[i], "--chat")) {
            chat = 1;
        } else if (!strcmp(argv[i], "--ids")) {
            print_ids = 1;
        } else if (argv[i][0] == '-' || model) {
            fputs(GENERATE_USAGE, stderr);
            return cli_fail(2, "generate: unexpected argument '%s'", argv[i]);
        } else {
            model = argv[i];
        }
    }
    if (!model || !tokens == !prompt || (chat && !prompt)) {
        fputs(GENERATE_USAGE, stderr);
        return 2;
    }
    struct gate_err err = {0};
    int32_t *ids = NULL, *out = NULL;
    int n = 0;
    struct session s = {0};
    struct tok *tk = NULL;
    int rc = 0;
    if (tokens) {
        rc = cli_read_ids(tokens, &ids, &n, &err);
        if (!rc)
            rc = session_open(&s, model, backend, threads, n + n_gen, 0, &err);
    } else {
        /* the context is sized after tokenization: load the model first with a small cache */
        rc = model_load(&s.m, model, &err);
        if (!rc)
            rc = prompt_ids(s.m, prompt, chat, &tk, &ids, &n, &err);
        model_free(s.m);
        s.m = NULL;
        if (!rc)
            rc = session_open(&s, model, backend, threads, n + n_gen, 0, &err);
    }
    if (!rc && !(out = malloc((size_t)n_gen * sizeof *out)))
        rc = err_set(&err, ERR_ENV, "out of memory for the generated ids");
    if (!rc && s.m && gguf_find_kv(s.m->gguf, "gate.synthetic")) {
        int synthetic = 0;
        gguf_get_bool(s.m->gguf, "gate.synthetic", &synthetic, NULL);
        if (synthetic) /* issue 16: the text of a random-weight model means nothing by design */
            fprintf(stderr,
                    "gate: note: %s is a synthetic model (gate.synthetic = true): its"
                    " weights are random, so the generated text is meaningless by design\n",
                    model);
    }
    if (!rc)
        rc = engine_greedy(s.b, ids, n, n_gen, out, &err);
    int n_out = n_gen;
    if (!rc && tk && !print_ids)
        for (int i = 0; i < n_gen; i++)
            if (out[i] == tok_eos(tk)) {
                n_out = i;
                break;
            }
    if (!rc && (print_ids || !tk)) {
        for (int i = 0; i < n_out; i++)
            printf(print_ids ? "%" PRId32 "\n" : "%" PRId32 " ", out[i]);
        if (!print_ids)
            printf("\n");
    } else if (!rc) {
        char *text = NULL;
        size_t len = 0;
        rc = tok_decode(tk, out, n_out, &text, &len, &err);
        if (!rc) {
            fwrite(text, 1, len, stdout);
            printf("\n");
        }
        free(text);
    }
    tok_free(tk);
    free(out);
    free(ids);
    session_close(&s);
    return rc ? cli_fail(err_exit_code(rc), "%s", err.msg) : 0;
}

/* ---- gate bench ----------------------------------------------------------------------------- */

/* The %d / %g are the throughput row's command defaults (bench_usage): prompt_tokens,
 * decode_tokens, runs, warmup, check_positions, max_runs, max_seconds, max_regression. */
static const char BENCH_USAGE[] =
    "usage: gate bench MODEL.gguf [--backend ref] [--mode MODE] [--threads N]\n"
    "                  [--prompt-tokens P] [--decode-tokens D] [--runs R] [--warmup W]\n"
    "                  [--prompt-batch] [--kv f32|f16] %s\n"
    "                  [--max-runs N] [--max-seconds S] [--max-wait X]\n"
    "                  [--min-prefill-tps F] [--min-decode-tps F] [--check-positions N]\n"
    "                  [--no-check]\n"
    "                  [--compare RECEIPT_ID [--db receipts.db] [--max-regression X]]\n"
    "  The throughput gate's measurement and estimator (oracles/throughput.c), printed: P\n"
    "  prompt tokens along MODE's own path (default BACKEND.prefill: half batched, half\n"
    "  decoded; .decode one token per call; .chat six turns), then D decode steps, each run on\n"
    "  a fresh token sequence; tokens/s as the median of R timed runs after W warm-up runs\n"
    "  (defaults %d, %d, %d, %d) with its 95%% distribution-free interval, min, max and CV, the\n"
    "  host-starved runs and the spot checks against the judge (%d positions per run; --no-check\n"
    "  skips them). With a floor, runs are added as the gate adds them (up to --max-runs,\n"
    "  default %d, and --max-seconds, default %g) and the gate's verdict is printed.\n"
    "  Every setting flag is the throughput gate's row of the ladder key (docs/ladder.md): its\n"
    "  default and bounds, but D's default (above) and R's and N's lower bound of 1 are bench's own (a\n"
    "  quick look; the gate's interval needs 3).\n"
    "  --compare ID    the gate's regression test against stored receipt ID (its throughput\n"
    "                  runs; it must verify and match this host, thread count, KV type, mode\n"
    "                  and model digest): the ratio of medians with its 95%% interval, FAIL\n"
    "                  (exit 1) when confidently below 1 - max_regression (default %g).\n"
    "  Backend open time is reported separately and never counted. Progress goes to stderr (a\n"
    "  live line with the elapsed time on a terminal, else one line before and one after); a\n"
    "  warning says when P + D exceed the model's context (context_length).\n"
    "  --prompt-batch  instead: the whole P-token prompt in ONE batched forward from an empty\n"
    "                  cache computing the last position's logits only (backend_forward_last),\n"
    "                  like llama-bench's pp test; R timed runs after W warm-ups\n"
    "                  (docs/bench.md).\n"
    "  --kv f16        the KV cache in F16 (backends that have one: cpu); default f32.\n";

/* Progress while the measurement runs (issue 16): throughput_gate() reports each finished run
 * (cfg.progress); on a terminal a line on stderr redrawn every half second shows runs done of
 * total, the elapsed time and an estimate of what is left; otherwise one line per run (a log
 * stays readable). done/total are shared with the ticker under mu. */
struct bench_ticker {
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, running, tty;
    int done, total; /* runs finished, runs planned (under mu) */
    double t0;
    char what[200];
};

/* "3 of 4 runs, elapsed 2.1 s, about 0.7 s left" into buf. */
static void bench_status(const struct bench_ticker *tk, int done, int total, char *buf, size_t n)
{
    double el = now_s() - tk->t0;
    if (done > 0 && done < total)
        snprintf(buf, n, "%d of %d runs, elapsed %.1f s, about %.1f s left", done, total, el,
                 el / done * (total - done));
    else
        snprintf(buf, n, "%d of %d runs, elapsed %.1f s", done, total, el);
}

/* throughput_config.progress: after each run. */
static void bench_on_run(void *ctx, int done, int total)
{
    struct bench_ticker *tk = ctx;
    if (tk->running) {
        pthread_mutex_lock(&tk->mu);
        tk->done = done;
        tk->total = total;
        pthread_mutex_unlock(&tk->mu);
    } else {
        char st[128];
        bench_status(tk, done, total, st, sizeof st);
        fprintf(stderr, "%s: %s\n", tk->what, st);
    }
}

static void *bench_ticker_main(void *arg)
{
    struct bench_ticker *tk = arg;
    pthread_mutex_lock(&tk->mu);
    while (!tk->stop) {
        char st[128];
        bench_status(tk, tk->done, tk->total, st, sizeof st);
        fprintf(stderr, "\r\033[K%s: %s", tk->what, st);
        fflush(stderr);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 500 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&tk->cv, &tk->mu, &until);
    }
    pthread_mutex_unlock(&tk->mu);
    return NULL;
}

static void bench_progress_start(struct bench_ticker *tk, const struct throughput_config *cfg,
                                 const char *mode)
{
    memset(tk, 0, sizeof *tk);
    tk->tty = isatty(STDERR_FILENO);
    tk->t0 = now_s();
    snprintf(tk->what, sizeof tk->what,
             "bench: %s, %d warm-up + %d timed run%s of %d prompt + %d"
             " decode tokens",
             mode, cfg->warmup, cfg->runs, cfg->runs == 1 ? "" : "s", cfg->prompt_tokens,
             cfg->decode_tokens);
    if (!tk->tty) {
        fprintf(stderr, "%s: measuring\n", tk->what);
        return;
    }
    pthread_mutex_init(&tk->mu, NULL);
    pthread_cond_init(&tk->cv, NULL);
    tk->running = pthread_create(&tk->tid, NULL, bench_ticker_main, tk) == 0;
    if (!tk->running) {
        pthread_cond_destroy(&tk->cv);
        pthread_mutex_destroy(&tk->mu);
    }
}

static void bench_progress_end(struct bench_ticker *tk)
{
    if (tk->running) {
        pthread_mutex_lock(&tk->mu);
        tk->stop = 1;
        pthread_cond_signal(&tk->cv);
        pthread_mutex_unlock(&tk->mu);
        pthread_join(tk->tid, NULL);
        pthread_cond_destroy(&tk->cv);
        pthread_mutex_destroy(&tk->mu);
        fprintf(stderr, "\r\033[K");
    }
    fprintf(stderr, "%s: done in %.1f s\n", tk->what, now_s() - tk->t0);
}

/* A warning on stderr when the run reaches past the model's trained context: the numbers are
 * still measured, but at positions the model was never meant to see, and a real deployment
 * could not run that length. */
static void bench_warn_context(const struct model *m, const struct throughput_config *cfg)
{
    long need = (long)cfg->prompt_tokens + cfg->decode_tokens;
    if (m->hp.n_ctx_train > 0 && need > (long)m->hp.n_ctx_train)
        fprintf(stderr,
                "gate: bench: warning: %d prompt + %d decode tokens = %ld positions exceed"
                " the model's context of %u (context_length); the figures are for positions"
                " the model was not trained for\n",
                cfg->prompt_tokens, cfg->decode_tokens, need, m->hp.n_ctx_train);
}

/* --prompt-batch: P tokens (mode_tokens seed 3, as the throughput gate) in one
 * backend_forward_last from an empty cache, W untimed then R timed runs; only the forward call is
 * timed. Every position goes through the layers and the cache, the output product runs for the
 * last position only — what llama-bench's ppN measures. Prints one line; 0 or an ERR_* status. */
static int bench_prompt_batch(const struct model *m, const struct mode *mode,
                              const struct throughput_config *cfg, struct gate_err *err)
{
    const int P = cfg->prompt_tokens;
    const size_t V = m->hp.n_vocab;
    struct backend_config bc = {
        .n_threads = cfg->n_threads, .n_ctx = P, .n_batch = P, .kv_f16 = cfg->kv_f16};
    for (int k = 0; k < KNOB_COUNT; k++)
        bc.knob[k] = mode->knob[k];
    struct backend *b = NULL;
    struct throughput_stats st;
    double tps[THROUGHPUT_MAX_RUNS];
    int32_t *tokens = malloc(sizeof *tokens * (size_t)P);
    float *logits = malloc(sizeof *logits * V);
    int rc = 0;
    if (!tokens || !logits) {
        rc = err_set(err, ERR_ENV,
                     "bench: cannot allocate %d tokens and %zu logits for"
                     " --prompt-batch",
                     P, V);
        goto done;
    }
    mode_tokens(3, m->hp.n_vocab, P, tokens);
    const double t_open = now_s();
    if ((rc = backend_open(&b, mode->backend, m, &bc, err)))
        goto done;
    const double load_s = now_s() - t_open;
    for (int r = 0; r < cfg->warmup + cfg->runs; r++) {
        if ((rc = backend_truncate(b, 0, err)))
            goto done;
        const double t0 = now_s();
        if ((rc = backend_forward_last(b, tokens, P, 0, logits, err)))
            goto done;
        const double dt = now_s() - t0;
        if (r >= cfg->warmup)
            tps[r - cfg->warmup] = P / dt;
    }
    if ((rc = throughput_stats(tps, cfg->runs, &st))) {
        err_set(err, rc, "bench: --prompt-batch timings of %s are not finite and positive",
                mode->backend);
        goto done;
    }
    printf("prompt-batch (%s, %d tokens in one forward, last position's logits only, like"
           " llama-bench's pp; kv %s): %.1f tokens/s median of %d (min %.1f, max %.1f, spread %.1f,"
           " cv %.3f); backend open %.3f s, not counted\n",
           mode->backend, P, cfg->kv_f16 ? "f16" : "f32", st.median, st.n, st.min, st.max,
           st.spread, st.cv, load_s);
done:
    backend_close(b);
    free(logits);
    free(tokens);
    return rc;
}

/* 1 when v is one of the "|"-separated names of list. */
static int in_bar_list(const char *list, const char *v)
{
    for (const char *s = list; *s;) {
        const size_t len = strcspn(s, "|");
        if (len == strlen(v) && !strncmp(s, v, len))
            return 1;
        s += len + (s[len] == '|');
    }
    return 0;
}

/* Every value any backend's row offers for knob k, "|"-separated in the rows' order, into buf. */
static const char *knob_all_values(enum backend_knob k, char *buf, size_t n)
{
    buf[0] = '\0';
    for (int i = 0; i < backend_count(); i++)
        for (const char *s = backend_knob_values(backend_name(i), k); *s;) {
            const size_t len = strcspn(s, ",");
            char v[32];
            snprintf(v, sizeof v, "%.*s", (int)len, s);
            if (!in_bar_list(buf, v))
                snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", buf[0] ? "|" : "", v);
            s += len + (s[len] == ',');
        }
    return buf;
}

/* The knob whose key is name ("gemv" for --gemv), or -1. */
static int knob_of(const char *name)
{
    for (int k = 0; k < KNOB_COUNT; k++)
        if (!strcmp(name, BACKEND_KNOBS[k].key))
            return k;
    return -1;
}

static void bench_usage(FILE *f)
{
    struct throughput_config d;
    gatedef_config(GATE_ID_THROUGHPUT, NULL, 1, &d, sizeof d);
    char flags[256] = "", vals[64];
    size_t line = 50; /* the usage line's length before the first knob */
    for (int k = 0; k < KNOB_COUNT; k++) {
        char one[96];
        snprintf(one, sizeof one, "[--%s %s]", BACKEND_KNOBS[k].key,
                 knob_all_values(k, vals, sizeof vals));
        const int wrap = line + 1 + strlen(one) > 96;
        snprintf(flags + strlen(flags), sizeof flags - strlen(flags), "%s%s",
                 !k     ? ""
                 : wrap ? "\n                  "
                        : " ",
                 one);
        line = (wrap ? 18 : line + 1) + strlen(one);
    }
    fprintf(f, BENCH_USAGE, flags, d.prompt_tokens, d.decode_tokens, d.runs, d.warmup,
            d.check_positions, d.max_runs, d.max_seconds, d.max_regression);
    /* the kernel generations, from the backend rows (engine/backend.c, BACKEND_KNOBS) */
    for (int k = 0; k < KNOB_COUNT; k++) {
        char flag[32];
        snprintf(flag, sizeof flag, "--%s V", BACKEND_KNOBS[k].key);
        fprintf(f, "  %-16s%s (", flag, BACKEND_KNOBS[k].doc);
        for (int i = 0, any = 0; i < backend_count(); i++) {
            const char *v = backend_knob_values(backend_name(i), k);
            if (*v)
                fprintf(f, "%s%s: %s", any++ ? "; " : "", backend_name(i), v);
        }
        fprintf(f,
                ", the first the default);\n"
                "                  receipts record it in metrics.ran.%s.\n",
                BACKEND_KNOBS[k].key);
    }
}

int cmd_bench(int argc, char **argv)
{
    const char *model = NULL, *backend = backend_judge_name(), *mode_text = NULL, *v,
               *db = "receipts.db";
    const char *knob[KNOB_COUNT] = {0}; /* --gemv, --route, --attn, --graph (BACKEND_KNOBS) */
    long long compare_id = 0;
    int prompt_batch = 0;
    struct throughput_config cfg; /* the gate table's defaults, bench's own where its row says */
    gatedef_config(GATE_ID_THROUGHPUT, NULL, 1, &cfg, sizeof cfg);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            bench_usage(stdout);
            return 0;
        }
        /* every setting flag through its row: --runs, --prompt-tokens, --max-seconds, ... */
        const int r = gatedef_flag(GATE_ID_THROUGHPUT, "bench", NULL, argc, argv, &i, &cfg);
        if (r < 0)
            return 2;
        if (r)
            continue;
        if (!strcmp(argv[i], "--threads")) {
            if (cli_value(argc, argv, &i, &v) ||
                cli_int("bench", argv[i - 1], v, 1, 1 << 16, &cfg.n_threads))
                return 2;
        } else if (!strcmp(argv[i], "--backend")) {
            if (cli_value(argc, argv, &i, &backend))
                return 2;
        } else if (!strcmp(argv[i], "--prompt-batch")) {
            prompt_batch = 1;
        } else if (!strcmp(argv[i], "--no-check")) {
            cfg.check_positions = 0;
        } else if (!strcmp(argv[i], "--db")) {
            if (cli_value(argc, argv, &i, &db))
                return 2;
        } else if (!strcmp(argv[i], "--compare")) {
            char *end = NULL;
            if (cli_value(argc, argv, &i, &v))
                return 2;
            compare_id = strtoll(v, &end, 10);
            if (!*v || *end || compare_id < 1)
                return cli_fail(2,
                                "bench: --compare takes a receipt id (gate receipt list), not"
                                " '%s'",
                                v);
        } else if (!strcmp(argv[i], "--kv")) {
            if (cli_value(argc, argv, &i, &v))
                return 2;
            if (strcmp(v, "f16") && strcmp(v, "f32"))
                return cli_fail(2, "bench: --kv takes f32 or f16, not '%s'", v);
            cfg.kv_f16 = !strcmp(v, "f16");
        } else if (!strncmp(argv[i], "--", 2) && knob_of(argv[i] + 2) >= 0) {
            const int k = knob_of(argv[i] + 2);
            if (cli_value(argc, argv, &i, &knob[k]))
                return 2;
        } else if (!strcmp(argv[i], "--mode")) {
            if (cli_value(argc, argv, &i, &mode_text))
                return 2;
        } else if (argv[i][0] == '-' || model) {
            bench_usage(stderr);
            return cli_fail(2, "bench: unexpected argument '%s'", argv[i]);
        } else {
            model = argv[i];
        }
    }
    if (!model) {
        bench_usage(stderr);
        return 2;
    }
    if (cfg.max_runs < cfg.runs)
        cfg.max_runs = cfg.runs; /* --runs alone: at least that many */
    struct gate_err err = {0};
    struct model *m = NULL;
    struct mode mode;
    struct throughput_result r = {0};
    char text[48];
    snprintf(text, sizeof text, "%.32s.prefill", backend);
    int rc = mode_parse(mode_text ? mode_text : text, &mode, &err);
    if (!rc && mode_text && strcmp(mode.backend, backend) && strcmp(backend, backend_judge_name()))
        rc = err_set(&err, ERR_INPUT, "bench: --backend %s and --mode %s disagree", backend,
                     mode_text);
    for (int k = 0; !rc && k < KNOB_COUNT; k++) {
        if (!knob[k])
            continue;
        if (!backend_offers_knob(mode.backend, k, knob[k])) {
            const char *own = backend_knob_values(mode.backend, k);
            char offered[160] = "";
            for (int b = 0; b < backend_count(); b++)
                if (*backend_knob_values(backend_name(b), k))
                    snprintf(offered + strlen(offered), sizeof offered - strlen(offered),
                             "%s%s: %s", offered[0] ? "; " : "", backend_name(b),
                             backend_knob_values(backend_name(b), k));
            rc = err_set(&err, ERR_INPUT, "bench: --%s %s, but backend '%s' %s%s%s (%s)",
                         BACKEND_KNOBS[k].key, knob[k], mode.backend,
                         *own ? "offers only " : "has no ", *own ? own : BACKEND_KNOBS[k].what,
                         *own ? "" : " generations to select", offered);
        } else {
            snprintf(mode.knob[k], sizeof mode.knob[k], "%s", knob[k]);
        }
    }
    if (!rc) {
        const double t0 = now_s();
        rc = model_load(&m, model, &err);
        if (!rc) {
            char knobs[160] = "";
            for (int k = 0; k < KNOB_COUNT; k++)
                if (knob[k])
                    snprintf(knobs + strlen(knobs), sizeof knobs - strlen(knobs), ", %s %s",
                             BACKEND_KNOBS[k].what, knob[k]);
            printf("bench: %s (model load %.3f s, not counted), %d threads, KV cache %s%s\n", model,
                   now_s() - t0, cfg.n_threads ? cfg.n_threads : pool_default_threads(),
                   cfg.kv_f16 ? "F16" : "F32", knobs);
        }
    }
    if (!rc && prompt_batch) {
        struct throughput_config only_prompt = cfg;
        only_prompt.decode_tokens = 0; /* --prompt-batch decodes nothing */
        bench_warn_context(m, &only_prompt);
        rc = bench_prompt_batch(m, &mode, &cfg, &err);
        model_free(m);
        return rc ? cli_fail(err_exit_code(rc), "%s", err.msg) : 0;
    }
    json_t *base = NULL;
    char base_name[65] = "";
    if (!rc && compare_id) { /* issue 27 §3: the gate's regression test from the command line */
        struct store *st = NULL;
        struct baseline b;
        char sha[65], mode_name[32];
        json_t *env = identity_environment(cfg.n_threads);
        /* the bench's identity settings: its --kv, and GATE_CPU_ISA's cap where it names one */
        struct cell_variant bench_v = {{0}};
        bench_v.at[CELL_KV] = cfg.kv_f16 ? KV_F16 : KV_F32;
        cell_setting_parse(CELL_ISA, getenv("GATE_CPU_ISA"), 0, &bench_v.at[CELL_ISA]);
        mode_format(&mode, mode_name, sizeof mode_name);
        if (!(rc = identity_file_sha256(model, sha, &err)) &&
            !(rc = store_open_readonly(&st, db, &err)) &&
            !(rc =
                  baseline_from_receipt(st, compare_id, mode_name, sha, env, &bench_v, &b, &err))) {
            base = baseline_json(&b);
            snprintf(base_name, sizeof base_name, "%s", b.receipt[0] ? b.receipt : "receipt");
            cfg.baseline = base_name;
            cfg.base_json = base;
            if (b.refused[0])
                fprintf(stderr, "gate: bench: --compare %lld refused: %s\n", compare_id, b.refused);
        }
        store_close(st);
        json_decref(env);
    }
    if (!rc) {
        struct bench_ticker tk;
        char mode_name[32];
        mode_format(&mode, mode_name, sizeof mode_name);
        bench_warn_context(m, &cfg);
        fflush(stdout);
        bench_progress_start(&tk, &cfg, mode_name);
        tk.total = cfg.warmup + cfg.runs;
        cfg.progress = bench_on_run;
        cfg.progress_ctx = &tk;
        rc = throughput_gate(m, &mode, &cfg, &r, &err);
        bench_progress_end(&tk);
    }
    if (!rc)
        throughput_print(stdout, &r);
    /* with a floor, or outputs that disagree with the judge, the gate's verdict decides the
     * exit: FAIL 1; ERROR (inconclusive or host starved: the host, not the engine) 3. Without
     * either, bench only measures (fewer than 3 runs are allowed here, not in a gate) */
    const enum gate_verdict verdict =
        cfg.min_prefill_tps > 0 || cfg.min_decode_tps > 0 || r.n_check_bad || compare_id
            ? r.verdict
            : GATE_PASS;
    json_decref(base);
    throughput_result_free(&r);
    model_free(m);
    if (rc)
        return cli_fail(err_exit_code(rc), "%s", err.msg);
    return verdict == GATE_PASS ? 0 : verdict == GATE_FAIL ? 1 : 3;
}
