/* test_broken_twin.c — issue 10's story: a wrong judge must not reach RELEASE OK, even after the
 * goldens are re-recorded from it.
 *
 * This binary is linked with engine/ref.c compiled under GATE_TEST_BROKEN_TWIN (CMakeLists.txt):
 * its reference twin scales attention by 1/head_dim instead of 1/sqrt(head_dim); so is
 * gate_broken_twin ($GATE_BROKEN_BIN), the gate CLI with that twin. Neither is ever installed.
 * 1. The anchor oracle, in process, against the exact conformance references: FAIL, NMSE ~0.1.
 * 2. The story through the CLI on a one-cell ladder (a one-layer synthetic dense model, the
 *    smallest useful shape): goldens recorded by the correct gate, a run with the broken one
 *    (golden FAILs), goldens re-recorded by the broken one (--force), a run again: the cell
 *    PASSes (parity compares the twin with itself), the anchor FAILs, and the release check does
 *    not print RELEASE OK — its reason says the judge itself is wrong.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "harness/identity.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "oracles/anchor.h"
#include "receipts/key.h"
#include "receipts/receipt.h"
#include "receipts/store.h"
#include "tests/support/check.h"
#include "tests/support/conformance.h"
#include "tests/support/ladderfix.h"

#define DENSE "qwen3-dense-tiny-q4_k_m"

static const char *sha_of(const char *path)
{
    static char buf[8][65];
    static int k;
    k = (k + 1) % 8;
    struct gate_err err = {0};
    cr_assert_eq(identity_file_sha256(path, buf[k], &err), 0, "%s", err.msg);
    return buf[k];
}

/* ---- 1. the oracle catches the broken twin ------------------------------------------------- */

static void expect_caught(const char *c, const char *arch)
{
    static const char *const files[] = {"model.gguf", "tokens.txt", "logits_exact.f32",
                                        "greedy_exact.txt"};
    char path[4][1400], sha[4][65];
    for (int i = 0; i < 4; i++) {
        snprintf(path[i], sizeof path[i], "%s", conformance_path(c, files[i]));
        snprintf(sha[i], sizeof sha[i], "%s", sha_of(path[i]));
    }
    struct anchor_spec s = {.id = c,
                            .arch = arch,
                            .model = {path[0], sha[0]},
                            .tokens = {path[1], sha[1]},
                            .logits = {path[2], sha[2]},
                            .greedy = {path[3], sha[3]},
                            .greedy_after = 16,
                            .max_nmse = 1e-8,
                            .min_cosine = 0.999999,
                            .near_tie = 1e-3};
    struct gate_err err = {0};
    json_t *m = NULL;
    cr_assert_eq(anchor_run(&s, 2, &m, &err), 0, "%s: %s", c, err.msg);
    json_t *settings = anchor_settings_json(&s), *checks = json_array();
    char why[512];
    cr_expect_eq(anchor_judge(settings, m, checks, why, sizeof why), GATE_FAIL,
                 "%s: the broken twin passed its anchor", c);
    cr_expect(strstr(why, "the judge itself is wrong") && strstr(why, "nmse"), "%s: %s", c, why);
    double nmse = NAN;
    cr_assert_eq(gate_metric_num(m, "nmse", &nmse), 0);
    /* the conformance README's sensitivity table: wrong attention scales move NMSE by 1e-2..1e-1 */
    cr_expect(nmse > 1e-2 && nmse < 1.0, "%s: NMSE %g", c, nmse);
    cr_log_info("broken twin on %s: NMSE %.3g (%s)", c, nmse, why);
    json_decref(settings);
    json_decref(checks);
    json_decref(m);
}

Test(broken_twin, the_anchor_oracle_catches_a_wrong_attention_scale)
{
    expect_caught(DENSE, "qwen3");
    expect_caught("qwen3moe-tiny-q4_k_m", "qwen3moe");
}

/* ---- 2. the story through the CLI ----------------------------------------------------------- */

static char dir[700];

static const char *in_dir(const char *name)
{
    return check_path(dir, name);
}

static char *slurp_text(const char *path)
{
    char *t = check_slurp_text(path); /* NUL-terminated: strstr is safe on it */
    return t ? t : strdup("");
}

/* The cell's model (dense.gguf) pinned by its digest, written by the story. */
static char model_sha[65];

/* One synthetic dense cell (the smallest ladder that tells the story: the smallest useful model,
 * one fault, one sampled injection, the power probe at one layer per tensor) plus the dense exact
 * conformance anchor; goldens pinned by goldens_sha. */
static void write_ladder(const char *goldens_sha)
{
    FILE *f = fopen(in_dir("story.yaml"), "w");
    cr_assert(f);
    fprintf(f,
            "release: {name: story, version: '%s'}\n"
            "models:\n  dense: {path: dense.gguf, sha256: %s, arch: qwen3}\n"
            "hosts:\n  a: {device: none, trust: ['file:a.pub']}\n"
            "modes: [ref.decode]\n"
            "cells:\n  - {model: dense, host: a, mode: ref.decode}\n"
            "gates:\n  defaults:\n"
            "    parity: {positions: 64}\n"
            "    golden: {goldens: goldens.json, sha256: %s, tokens: 8}\n"
            "    throughput: {runs: 3, warmup: 0, prompt_tokens: 16, decode_tokens: 4}\n"
            "    falsify: {faults: [skip_qk_norm], sweep_samples: 1, power_layers: 1}\n"
            "anchors:\n  conf-dense:\n    arch: qwen3\n"
            "    reference: \"float64 exact evaluation (../shared/conformance)\"\n"
            "    model: {path: %s, sha256: %s}\n    tokens: {path: %s, sha256: %s}\n"
            "    logits: {path: %s, sha256: %s}\n"
            "    greedy: {path: %s, sha256: %s, after: 16}\n"
            "    thresholds: {max_nmse: 1.0e-8, min_cosine: 0.999999, near_tie: 1.0e-3}\n",
            GATE_VERSION, model_sha, goldens_sha, conformance_path(DENSE, "model.gguf"),
            sha_of(conformance_path(DENSE, "model.gguf")), conformance_path(DENSE, "tokens.txt"),
            sha_of(conformance_path(DENSE, "tokens.txt")),
            conformance_path(DENSE, "logits_exact.f32"),
            sha_of(conformance_path(DENSE, "logits_exact.f32")),
            conformance_path(DENSE, "greedy_exact.txt"),
            sha_of(conformance_path(DENSE, "greedy_exact.txt")));
    fclose(f);
}

struct verdicts {
    int64_t after;   /* only receipts with a larger id */
    char cell[16];   /* verdict of dense/a/ref.decode ("" when none) */
    char golden[16]; /* its golden gate's verdict */
    char anchor[16]; /* verdict of conf-dense/a/anchor ("" when none) */
    int64_t last;
    json_t *payloads; /* every payload seen (array) */
};

static int collect(void *ctx, const struct store_row *row)
{
    struct verdicts *v = ctx;
    if (row->id > v->last)
        v->last = row->id;
    if (row->id <= v->after)
        return 0;
    json_t *p = NULL;
    struct gate_err err = {0};
    if (receipt_parse(row->payload, row->len, &p, &err))
        return 0;
    json_t *cell = json_object_get(p, "cell");
    const char *model = json_string_value(json_object_get(cell, "model"));
    const char *mode = json_string_value(json_object_get(cell, "mode"));
    const char *verdict = json_string_value(json_object_get(p, "verdict"));
    if (model && mode && verdict && !strcmp(model, "dense") && !strcmp(mode, "ref.decode")) {
        snprintf(v->cell, sizeof v->cell, "%s", verdict);
        const char *g = json_string_value(
            json_object_get(json_object_get(json_object_get(p, "gates"), "golden"), "verdict"));
        snprintf(v->golden, sizeof v->golden, "%s", g ? g : "?");
    }
    if (model && mode && verdict && !strcmp(model, "conf-dense") && !strcmp(mode, "anchor"))
        snprintf(v->anchor, sizeof v->anchor, "%s", verdict);
    json_array_append_new(v->payloads, p);
    return 0;
}

static void read_db(struct verdicts *v, int64_t after)
{
    memset(v, 0, sizeof *v);
    v->after = after;
    v->payloads = json_array();
    struct gate_err err = {0};
    struct store *st = NULL;
    cr_assert_eq(store_open(&st, in_dir("story.db"), &err), 0, "%s", err.msg);
    cr_assert_eq(store_foreach(st, collect, v, &err), 0, "%s", err.msg);
    store_close(st);
}

Test(broken_twin, the_release_is_blocked_even_after_goldens_are_rerecorded, .timeout = 900)
{
    const char *good = getenv("GATE_BIN");
    cr_assert(good, "GATE_BIN is not set");
    char broken[1024];
    if (getenv("GATE_BROKEN_BIN")) {
        snprintf(broken, sizeof broken, "%s", getenv("GATE_BROKEN_BIN"));
    } else {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s", good);
        snprintf(broken, sizeof broken, "%s/gate_broken_twin", dirname(tmp));
    }
    struct stat st;
    cr_assert_eq(stat(broken, &st), 0, "no broken-twin gate at %s (build gate_broken_twin)",
                 broken);
    check_make_dir(dir, sizeof dir, "story");
    struct gate_err err = {0};
    struct key_pair key;
    cr_assert_eq(key_generate(in_dir("a.key"), "a", &key, &err), 0, "%s", err.msg);
    cr_assert_eq(key_write_public(in_dir("a.pub"), &key, &err), 0, "%s", err.msg);
    char log[1024], yaml[1024], db[1024], kp[1024];
    snprintf(log, sizeof log, "%s", in_dir("story.log"));
    snprintf(yaml, sizeof yaml, "%s", in_dir("story.yaml"));
    snprintf(db, sizeof db, "%s", in_dir("story.db"));
    snprintf(kp, sizeof kp, "%s", in_dir("a.key"));
    /* the smallest useful shape (as test_faultloop's cell): one layer, hidden 64, 2 heads / 1 KV
     * head of 32, FFN 128, Q8_0; the broken twin's attention scale (1/32, not 1/sqrt(32)) moves
     * its greedy continuations as on any shape */
    cr_assert_eq(ladderfix_sh("%s model synth --arch qwen3 --hidden 64 --layers 1 --heads 2"
                              " --kv-heads 1 --head-dim 32 --ffn 128 --quant Q8_0 --seed 1 -o %s"
                              " >%s 2>&1",
                              good, in_dir("dense.gguf"), log),
                 0, "see %s", log);
    snprintf(model_sha, sizeof model_sha, "%s", sha_of(in_dir("dense.gguf")));

    /* 0. goldens recorded by the correct build, pinned */
    char zero[65];
    memset(zero, '0', 64);
    zero[64] = '\0';
    write_ladder(zero);
    cr_assert_eq(ladderfix_sh("%s golden record %s >%s 2>&1", good, yaml, log), 0, "see %s", log);
    write_ladder(sha_of(in_dir("goldens.json")));

    /* 1. the broken build: its decode agrees with its own twin, but not with the goldens */
    cr_expect_eq(
        ladderfix_sh("%s run %s --host a --db %s --key %s >%s 2>&1", broken, yaml, db, kp, log), 1,
        "see %s", log);
    struct verdicts v;
    read_db(&v, 0);
    cr_expect_str_eq(v.golden, "FAIL", "goldens from the correct twin must fail the broken one");
    cr_expect_str_eq(v.anchor, "FAIL", "gate run must write an anchor receipt, and it must FAIL");
    int64_t first = v.last;
    json_decref(v.payloads);

    /* 2. re-record the goldens with the broken build (forced: they exist), commit, run again */
    cr_expect_eq(ladderfix_sh("%s golden record %s --force >%s 2>&1", broken, yaml, log), 0,
                 "see %s", log);
    write_ladder(sha_of(in_dir("goldens.json")));
    ladderfix_sh("%s run %s --host a --db %s --key %s >%s 2>&1", broken, yaml, db, kp, log);
    read_db(&v, first);
    cr_expect_str_eq(v.cell, "PASS",
                     "the cell compares the broken twin with itself and passes;"
                     " see %s",
                     log);
    cr_expect_str_eq(v.anchor, "FAIL", "the anchor must FAIL for the broken twin; see %s", log);

    /* 3. the release check, as the CLI runs it: never RELEASE OK */
    int rc = ladderfix_sh("%s release check %s --db %s >%s 2>&1", broken, yaml, db, log);
    char *out = slurp_text(log);
    cr_expect_eq(rc, 1, "release check exit %d:\n%s", rc, out);
    cr_expect_null(strstr(out, "RELEASE OK"), "%s", out);
    free(out);

    /* 4. the same receipts as a clean build would have made them (this checkout may be dirty,
     * and dirty receipts never count): re-signed for a stand-in clean identity, the cell is PASS
     * and only the anchor blocks, with a reason that says the judge itself is wrong */
    struct identity self;
    memset(&self, 0, sizeof self);
    snprintf(self.version, sizeof self.version, "%s", GATE_VERSION);
    snprintf(self.git_commit, sizeof self.git_commit, "c0ffee0000000000000000000000000000000002");
    snprintf(self.binary_sha256, sizeof self.binary_sha256, "%064d", 0);
    struct store *clean = NULL;
    cr_assert_eq(store_open(&clean, in_dir("clean.db"), &err), 0, "%s", err.msg);
    size_t i;
    json_t *p;
    json_array_foreach(v.payloads, i, p)
    {
        json_object_set_new(json_object_get(p, "subject"), "engine", identity_json(&self));
        json_object_del(p, "nonce");
        int64_t rid;
        cr_assert_eq(store_append(clean, p, &key, &rid, &err), 0, "%s", err.msg);
    }
    store_close(clean);
    json_decref(v.payloads);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    rc = release_check_to(f, yaml, in_dir("clean.db"), NULL, &self);
    fclose(f);
    cr_expect_eq(rc, 1, "exit %d:\n%s", rc, buf);
    cr_expect_null(strstr(buf, "RELEASE OK"), "%s", buf);
    cr_expect(strstr(buf, "conf-dense"), "the anchor must be its own row:\n%s", buf);
    cr_expect(strstr(buf, "judge itself is wrong"),
              "the reason must say the judge itself is"
              " wrong:\n%s",
              buf);
    free(buf);
    /* the rows themselves (the printed matrix above is one reading of them): the cell PASSes —
     * parity compared the broken twin with itself and the goldens came from it — and only the
     * anchor blocks */
    struct ladder *l = NULL;
    cr_assert_eq(ladder_load(&l, yaml, &err), 0, "%s", err.msg);
    struct store *rs = NULL;
    cr_assert_eq(store_open(&rs, in_dir("clean.db"), &err), 0, "%s", err.msg);
    struct release_options ro = {.ladder = yaml, .db = in_dir("clean.db")};
    struct release_result r;
    cr_assert_eq(release_evaluate(l, rs, &self, &ro, &r, &err), 0, "%s", err.msg);
    cr_expect_eq(r.n_cells, 1);
    cr_expect_str_eq(r.cells[0].name, "dense/a/ref.decode");
    cr_expect_eq(r.cells[0].state, RELEASE_PASS, "the cell is %s, not PASS: %s",
                 release_state_name(r.cells[0].state), r.cells[0].reason);
    cr_expect_eq(r.n_bad_cells, 0);
    cr_expect_eq(r.n_anchors, 1);
    cr_expect_eq(r.anchors[0].state, RELEASE_FAIL, "the anchor is %s: %s",
                 release_state_name(r.anchors[0].state), r.anchors[0].reason);
    cr_expect_eq(r.n_bad_anchors, 1);
    cr_expect_not(r.ok);
    release_result_free(&r);
    store_close(rs);
    ladder_free(l);
}
