/* anchor.c — the anchor gate: the reference twin against an engine that is not gate (anchor.h).
 *
 * Invariants: every file is read once, through one descriptor, and its bytes are hashed and
 * checked against the pin before any of them is used (the model is bound from those same bytes,
 * never re-opened by path); the judge is the twin's batched forward (mode_judge) on a ref
 * backend without faults; the verdict comes from anchor_judge() over settings + metrics only.
 */
#include "oracles/anchor.h"
#include "engine/ref_ops.h"
#include "oracles/compare.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/model.h"
#include "engine/pin.h"
#include "engine/tokenizer.h"
#include "oracles/mode.h"
#include "oracles/parity.h"

#define ANCHOR_MAX_FILE ((size_t)1 << 31) /* tokens, logits, greedy: 2 GiB at most */

/* ---- pinned files -------------------------------------------------------------------------- */

/* Open f through engine/pin.h (once, regular file, digest checked against the pin through the
 * descriptor); errors are prefixed with the anchor and the role of the file. */
static int open_pinned(const struct anchor_spec *s, const char *what, const struct anchor_file *f,
                       struct pinned *out, struct gate_err *err)
{
    struct gate_err e = {0};
    int rc = pin_open(f->path, f->sha256, out, &e);
    if (rc)
        return err_set(err, rc, "anchor '%s': its %s file: %s", s->id, what, e.msg);
    return 0;
}

/* A whole pinned text or data file, read from its descriptor (NUL-terminated). */
static int read_pinned(const struct anchor_spec *s, const char *what, const struct anchor_file *f,
                       struct pinned *pin, uint8_t **bytes, size_t *size, struct gate_err *err)
{
    struct gate_err e = {0};
    int rc = open_pinned(s, what, f, pin, err);
    if (!rc && (rc = pin_read_all(pin, ANCHOR_MAX_FILE, bytes, size, &e)))
        err_set(err, rc, "anchor '%s': its %s file: %s", s->id, what, e.msg);
    return rc;
}

/* The ids of a pinned text through the one parser (tok_parse_ids, bounded by the vocabulary);
 * an empty file is an error. Messages name the anchor and the file's role. */
static int parse_ids(const struct anchor_spec *s, const char *what, const struct anchor_file *f,
                     const uint8_t *text, size_t len, uint32_t n_vocab, int32_t **ids, int *n,
                     struct gate_err *err)
{
    struct gate_err e = {0};
    int rc = tok_parse_ids((const char *)text, len, f->path, n_vocab, ids, n, &e);
    if (rc)
        return err_set(err, rc, "anchor '%s': its %s file: %s", s->id, what, e.msg);
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        return err_set(err, ERR_INPUT, "anchor '%s': its %s file holds no token ids", s->id, what);
    }
    return 0;
}

/* ---- settings and metrics ------------------------------------------------------------------ */

json_t *anchor_settings_json(const struct anchor_spec *s)
{
    int greedy = s->greedy.path != NULL;
    return json_pack("{s:s, s:f, s:f, s:f, s:s, s:s, s:s, s:s, s:i}", "arch", s->arch, "max_nmse",
                     s->max_nmse, "min_cosine", s->min_cosine, "near_tie", s->near_tie,
                     "model_sha256", s->model.sha256, "tokens_sha256", s->tokens.sha256,
                     "logits_sha256", s->logits.sha256, "greedy_sha256",
                     greedy && s->greedy.sha256 ? s->greedy.sha256 : "", "greedy_after",
                     greedy ? s->greedy_after : 0);
}

static void put_num(json_t *o, const char *k, double v)
{
    json_object_set_new(o, k, parity_json_number(v));
}

static void put_int(json_t *o, const char *k, long long v)
{
    json_object_set_new(o, k, json_integer((json_int_t)v));
}

int anchor_logit_metrics(const float *reference, const float *twin, int n_pos, int n_vocab,
                         double near_tie, json_t *metrics, struct gate_err *err)
{
    /* only the metrics are read here, never the parity verdict: near_tie (which decides
     * TIE_FLIP from WRONG) is the anchor's; no threshold is judged (the anchor judge does) */
    const struct parity_config cfg = {.positions = PARITY_MIN_POSITIONS,
                                      .near_tie = near_tie,
                                      .min_cosine = -1,
                                      .max_mean_kld = INFINITY,
                                      .max_kld = INFINITY,
                                      .max_rel_l2 = INFINITY,
                                      .max_mean_rel_l2 = INFINITY,
                                      .max_forced = INFINITY};
    struct parity_result pr;
    /* the reference plays the judge's role in the parity math: its margins decide near ties */
    int rc = parity_judge(reference, twin, n_pos, n_vocab, &cfg, &pr);
    if (rc) {
        err_set(err, rc, "anchor comparison: %s", pr.reason);
        parity_result_free(&pr);
        return rc;
    }
    double num = 0.0, den = 0.0, max_abs = 0.0;
    const size_t total = (size_t)n_pos * (size_t)n_vocab;
    for (size_t i = 0; i < total; i++) {
        const double d = (double)twin[i] - (double)reference[i];
        num += d * d;
        den += (double)reference[i] * reference[i];
        max_abs = compare_worst_max(max_abs, fabs(d)); /* a NaN difference makes it NaN */
    }
    int first_wrong = -1;
    for (int p = 0; p < n_pos && first_wrong < 0; p++)
        if (pr.pos[p].cls == PARITY_WRONG)
            first_wrong = p;
    put_int(metrics, "n_pos", n_pos);
    put_int(metrics, "n_vocab", n_vocab);
    put_num(metrics, "nmse", den > 0 ? num / den : (num == 0 ? 0.0 : INFINITY));
    put_num(metrics, "max_abs_diff", max_abs);
    put_num(metrics, "min_cosine", pr.n_nonfinite ? NAN : pr.cosine.min);
    put_int(metrics, "min_cosine_pos", pr.n_nonfinite ? pr.first_nonfinite_pos : pr.cosine.argmin);
    put_num(metrics, "mean_cosine", pr.n_nonfinite ? NAN : pr.cosine.mean);
    put_num(metrics, "mean_kld", pr.n_nonfinite ? NAN : pr.kld.mean);
    put_num(metrics, "max_kld", pr.n_nonfinite ? NAN : pr.kld.max);
    put_int(metrics, "n_match", pr.n_match);
    put_int(metrics, "n_tie_flip", pr.n_tie_flip);
    put_int(metrics, "n_wrong", pr.n_wrong);
    put_int(metrics, "n_nonfinite", pr.n_nonfinite);
    put_int(metrics, "first_wrong_pos", first_wrong);
    put_int(metrics, "first_nonfinite_pos", pr.first_nonfinite_pos);
    parity_result_free(&pr);
    return 0;
}

/* ---- the run ------------------------------------------------------------------------------- */

/* anchor_run() and anchor_check(): with check_only, stop after every file has been read and
 * validated against the model (metrics stays NULL) — the same code path up to the judge's run. */
static int anchor_do(const struct anchor_spec *s, int n_threads, int check_only, json_t **metrics,
                     struct gate_err *err)
{
    int rc = 0;
    struct pinned pm = {.fd = -1}, pt = {.fd = -1}, pl = {.fd = -1}, pg = {.fd = -1};
    uint8_t *tok_text = NULL, *ref_bytes = NULL, *greedy_text = NULL;
    size_t tok_len = 0, ref_len = 0, greedy_len = 0;
    struct model *m = NULL;
    struct backend *b = NULL;
    int32_t *tokens = NULL, *greedy = NULL;
    float *logits = NULL, *ref = NULL;
    int n_tok = 0, n_greedy = 0;
    json_t *out = json_object();
    *metrics = NULL;
    if (!out)
        return err_set(err, ERR_ENV, "anchor: out of memory for the metrics");
    /* every file once, through the descriptor its digest was checked on */
    if ((rc = open_pinned(s, "model", &s->model, &pm, err)) ||
        (rc = read_pinned(s, "tokens", &s->tokens, &pt, &tok_text, &tok_len, err)) ||
        (rc = read_pinned(s, "logits", &s->logits, &pl, &ref_bytes, &ref_len, err)) ||
        (s->greedy.path &&
         (rc = read_pinned(s, "greedy", &s->greedy, &pg, &greedy_text, &greedy_len, err))))
        goto out;
    if ((rc = model_load_pinned(&m, &pm, err)))
        goto out;
    const char *arch = model_arch_name(m->hp.arch);
    if (strcmp(arch, s->arch)) {
        rc = err_set(err, ERR_INPUT,
                     "anchor '%s': its model '%s' is %s but the ladder says it"
                     " anchors %s",
                     s->id, s->model.path, arch, s->arch);
        goto out;
    }
    const int V = (int)m->hp.n_vocab;
    if ((rc = parse_ids(s, "tokens", &s->tokens, tok_text, tok_len, m->hp.n_vocab, &tokens, &n_tok,
                        err)))
        goto out;
    if (ref_len != (size_t)n_tok * (size_t)V * sizeof(float)) {
        rc = err_set(err, ERR_INPUT,
                     "anchor '%s': its logits file '%s' has %zu bytes; %d"
                     " positions x %d vocabulary x 4 bytes is %zu",
                     s->id, s->logits.path, ref_len, n_tok, V,
                     (size_t)n_tok * (size_t)V * sizeof(float));
        goto out;
    }
    if (s->greedy.path) {
        if ((rc = parse_ids(s, "greedy", &s->greedy, greedy_text, greedy_len, m->hp.n_vocab,
                            &greedy, &n_greedy, err)))
            goto out;
        if (s->greedy_after < 1 || s->greedy_after > n_tok) {
            rc = err_set(err, ERR_INPUT,
                         "anchor '%s': greedy.after is %d but the tokens file has"
                         " %d ids",
                         s->id, s->greedy_after, n_tok);
            goto out;
        }
    }
    if (check_only) /* everything the ladder names is there and fits: the run would compare */
        goto out;
    ref = malloc(ref_len ? ref_len : 1);
    logits = malloc(ref_len ? ref_len : 1);
    if (!ref || !logits) {
        rc =
            err_set(err, ERR_ENV, "anchor: out of memory for the reference and the judge's logits");
        goto out;
    }
    memcpy(ref, ref_bytes, ref_len); /* float32 little-endian, as the host stores floats */
    int n_ctx = n_tok;
    if (s->greedy.path && s->greedy_after + n_greedy > n_ctx)
        n_ctx = s->greedy_after + n_greedy;
    /* the judge exactly as every gate uses it: batched, whole sequence, ref, no faults */
    if ((rc = mode_open_judge(&b, m, n_ctx, n_threads, err)) ||
        (rc = mode_judge(b, tokens, n_tok, logits, NULL, err)))
        goto out;
    if ((rc = anchor_logit_metrics(ref, logits, n_tok, V, s->near_tie, out, err)))
        goto out;
    if (s->greedy.path) {
        /* the prompt in one batch, then one token at a time through the KV cache */
        const int after = s->greedy_after;
        int matched = 0, first_diff = -1;
        if ((rc = backend_truncate(b, 0, err)) ||
            (rc = backend_forward(b, tokens, after, 0, logits, err)))
            goto out;
        int32_t next = ref_argmax(logits + (size_t)(after - 1) * V, V);
        for (int i = 0; i < n_greedy; i++) {
            if (next != greedy[i]) {
                first_diff = i;
                break;
            }
            matched++;
            if (i + 1 < n_greedy) {
                if ((rc = backend_forward(b, &next, 1, after + i, logits, err)))
                    goto out;
                next = ref_argmax(logits, V);
            }
        }
        put_int(out, "greedy_after", after);
        put_int(out, "greedy_expected", n_greedy);
        put_int(out, "greedy_matched", matched);
        put_int(out, "greedy_first_diff", first_diff);
    }
    struct backend_info info;
    memset(&info, 0, sizeof info);
    backend_info(b, &info);
    json_object_set_new(out, "backend", json_string(info.backend));
    json_object_set_new(out, "device", json_string(info.device));
    json_object_set_new(out, "arch", json_string(arch));
    json_object_set_new(out, "model_sha256", json_string(pm.sha256));
    json_object_set_new(out, "tokens_sha256", json_string(pt.sha256));
    json_object_set_new(out, "logits_sha256", json_string(pl.sha256));
    json_object_set_new(out, "greedy_sha256", json_string(s->greedy.path ? pg.sha256 : ""));
    *metrics = out;
    out = NULL;
out:
    json_decref(out);
    backend_close(b);
    model_free(m);
    pin_close(&pm);
    pin_close(&pt);
    pin_close(&pl);
    pin_close(&pg);
    free(tok_text);
    free(ref_bytes);
    free(greedy_text);
    free(tokens);
    free(greedy);
    free(logits);
    free(ref);
    return rc;
}

int anchor_run(const struct anchor_spec *s, int n_threads, json_t **metrics, struct gate_err *err)
{
    return anchor_do(s, n_threads, 0, metrics, err);
}

int anchor_check(const struct anchor_spec *s, struct gate_err *err)
{
    json_t *none = NULL;
    return anchor_do(s, 1, 1, &none, err);
}

/* ---- the judge ----------------------------------------------------------------------------- */

struct judging {
    json_t *checks;
    char *why;
    size_t n;
    int pass;
};

/* Remember the first failing check as the reason. */
static void note(struct judging *j, int ok, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void note(struct judging *j, int ok, const char *fmt, ...)
{
    if (ok || !j->pass) {
        j->pass &= ok;
        return;
    }
    j->pass = 0;
    if (!j->n)
        return;
    int k = snprintf(j->why, j->n, "the judge itself is wrong: the reference twin ");
    if (k < 0 || (size_t)k >= j->n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->why + k, j->n - (size_t)k, fmt, ap);
    va_end(ap);
}

static void judge_num(struct judging *j, const json_t *metrics, const char *key, const char *op,
                      double threshold, const char *say)
{
    double v = NAN;
    int have = gate_metric_num(metrics, key, &v) == 0;
    int ok = gate_check_num(j->checks, key, v, op, threshold);
    if (!have)
        note(j, 0, "cannot be judged: metric '%s' is missing or not a number", key);
    else
        note(j, ok, "%s: %s %.4g, must be %s %.4g", say, key, v, op, threshold);
}

static void judge_str(struct judging *j, const json_t *settings, const json_t *metrics,
                      const char *key, const char *say)
{
    const char *want = json_string_value(json_object_get(settings, key));
    const char *got = json_string_value(json_object_get(metrics, key));
    int ok = gate_check_str(j->checks, key, got ? got : "(missing)", want ? want : "(missing)");
    if (!want)
        note(j, 0, "cannot be judged: setting '%s' is missing", key);
    else
        note(j, ok && got, "%s: %s is '%.16s', the ladder pins '%.16s'", say, key,
             got ? got : "(missing)", want);
}

enum gate_verdict anchor_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                               char *why, size_t n)
{
    struct judging j = {checks, why, n, 1};
    if (n)
        why[0] = '\0';
    double max_nmse = NAN, min_cos = NAN, after = 0;
    if (gate_metric_num(settings, "max_nmse", &max_nmse) ||
        gate_metric_num(settings, "min_cosine", &min_cos) ||
        gate_metric_num(settings, "greedy_after", &after)) {
        gate_check_bool(checks, "settings", 0);
        note(&j, 0,
             "cannot be judged: the anchor settings lack max_nmse, min_cosine or"
             " greedy_after");
        return GATE_FAIL;
    }
    const char *backend = json_string_value(json_object_get(metrics, "backend"));
    note(&j,
         gate_check_str(checks, "backend", backend ? backend : "(missing)", backend_judge_name()),
         "ran on '%s', not the judge's backend %s", backend ? backend : "(missing)",
         backend_judge_name());
    judge_str(&j, settings, metrics, "arch", "ran a model of another architecture");
    judge_str(&j, settings, metrics, "model_sha256", "ran another model file");
    judge_str(&j, settings, metrics, "tokens_sha256", "read another tokens file");
    judge_str(&j, settings, metrics, "logits_sha256", "was compared with another logits file");
    judge_num(&j, metrics, "n_pos", ">=", PARITY_MIN_POSITIONS, "judged too few positions");
    judge_num(&j, metrics, "n_nonfinite", "<=", 0, "produced non-finite logits");
    judge_num(&j, metrics, "nmse", "<=", max_nmse, "disagrees with the independent reference");
    judge_num(&j, metrics, "min_cosine", ">=", min_cos,
              "disagrees with the independent"
              " reference at a position");
    judge_num(&j, metrics, "n_wrong", "<=", 0,
              "picks another argmax than the independent"
              " reference where its margin is clear");
    const char *gsha = json_string_value(json_object_get(settings, "greedy_sha256"));
    if (gsha && *gsha) {
        judge_str(&j, settings, metrics, "greedy_sha256", "decoded against another greedy file");
        judge_num(&j, metrics, "greedy_after", "==", after, "decoded after another prompt length");
        judge_num(&j, metrics, "greedy_expected", ">=", 1, "had no greedy ids to reproduce");
        double expected = NAN;
        gate_metric_num(metrics, "greedy_expected", &expected);
        judge_num(&j, metrics, "greedy_matched", ">=", expected,
                  "does not reproduce the"
                  " independent greedy continuation");
    } else if (!gsha) {
        gate_check_bool(checks, "settings", 0);
        note(&j, 0, "cannot be judged: the anchor settings lack greedy_sha256");
    }
    return j.pass && json_array_size(checks) > 0 ? GATE_PASS : GATE_FAIL;
}
