/* test_kv_ladder.c — the KV cache type as a ladder setting (issue 17: "KV cache F32 (F16
 * selectable)"): a cells entry's `kv: f16` is strictly parsed and refused on a backend that
 * offers no F16 cache; it is part of the cell's identity (name, receipt cell, release matching);
 * every gate of the cell opens its subject with it and the receipt records what the backend
 * reported; an F32 receipt never satisfies an F16 cell (nor the reverse).
 * Start reading: kv_ladder.an_f16_cell_runs_end_to_end_and_its_receipt_says_f16, then
 * kv_ladder.an_f32_receipt_never_satisfies_an_f16_cell.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/model.h"
#include "harness/gatedef.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "oracles/gates.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include "receipts/receipt.h"
#include "tests/support/check.h"
#include "tests/support/conformance.h"
#include "tests/support/ladderfix.h"

/* The tiny MoE conformance model (tests/data/release_metrics.json was recorded on it) is pinned
 * to LADDERFIX_MOE_SHA; the parse tests trust this inline key. */
#define MOE_SHA LADDERFIX_MOE_SHA
#define KEY_A "ed25519:3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29"

/* Each test's scratch folder, host keys a (a.key, a.pub) and b, the stand-in build. */
static struct ladderfix fx;

static const char *path_in(const char *name)
{
    return ladderfix_path(&fx, name);
}

static void make_dir(void)
{
    ladderfix_init(&fx, "kv");
}

static const char *moe_path(void)
{
    return conformance_path("qwen3moe-tiny-q4_k_m", "model.gguf");
}

/* Write l.yaml: one model m (the conformance MoE), host a (inline key), modes, the cells text
 * (each entry a line starting with "  - "), gates text; returns its path. */
static const char *write_ladder(const char *modes, const char *cells, const char *gates)
{
    const char *p = path_in("l.yaml");
    FILE *f = fopen(p, "w");
    cr_assert(f, "cannot write %s", p);
    fprintf(f,
            "release: {name: r, version: '1'}\n"                     /* 1 */
            "models:\n"                                              /* 2 */
            "  m: {path: %s, sha256: " MOE_SHA ", arch: qwen3moe}\n" /* 3 */
            "hosts:\n"                                               /* 4 */
            "  local: {device: none, trust: [" KEY_A "]}\n"          /* 5 */
            "modes: [%s]\n"                                          /* 6 */
            "cells:\n"                                               /* 7 */
            "%s"                                                     /* 8.. */
            "%s"
            "unanchored: {qwen3moe: 'kv ladder tests'}\n",
            moe_path(), modes, cells, gates ? gates : "");
    cr_assert_eq(fclose(f), 0);
    return p;
}

/* ---- the ladder ---------------------------------------------------------------------------- */

Test(kv_ladder, kv_is_part_of_the_cell_and_of_every_gate_s_settings)
{
    make_dir();
    struct gate_err err = {0};
    struct ladder *l = NULL;
    const char *p =
        write_ladder("cpu.decode, cpu.prefill, ref.decode",
                     "  - {models: [m], hosts: [local], modes: [cpu.decode, cpu.prefill]}\n"
                     "  - {model: m, host: local, mode: cpu.decode, kv: f16}\n"
                     "  - {model: m, host: local, mode: ref.decode, kv: f32}\n",
                     "gates:\n  overrides:\n"
                     "    - match: {mode: cpu.decode, kv: f16}\n"
                     "      parity: {min_cosine: 0.995}\n");
    cr_assert_eq(ladder_load(&l, p, &err), 0, "%s", err.msg);
    cr_assert_eq(l->n_cells, 4, "the same model/host/mode with f32 and f16 are two cells");
    char name[256];
    cr_expect_str_eq(ladder_cell_name(l, 0, name, sizeof name), "m/local/cpu.decode");
    cr_expect_str_eq(ladder_cell_name(l, 2, name, sizeof name), "m/local/cpu.decode+kv=f16");
    cr_expect_str_eq(ladder_cell_name(l, 3, name, sizeof name), "m/local/ref.decode");
    cr_expect_eq(l->cells[0].v.at[CELL_KV], KV_F32);
    cr_expect_eq(l->cells[2].v.at[CELL_KV], KV_F16);
    cr_expect_eq(l->cells[2].g.v.at[CELL_KV], KV_F16, "the settings carry the cell's KV type");
    cr_expect_eq(l->cells[3].v.at[CELL_KV], KV_F32, "kv: f32 is the default, written out");
    /* an override can match the KV type */
    cr_expect_float_eq(l->cells[2].g.min_cosine, 0.995, 1e-12);
    cr_expect_float_eq(l->cells[0].g.min_cosine, 0.999, 1e-12);
    /* every cell gate of the F16 cell records kv f16 (falsify's nested parity too); an F32
     * cell records nothing, so its settings are what they were before the key */
    for (int i = 0; GATE_DEFS[i].name; i++) {
        if (!GATE_DEFS[i].cell_gate)
            continue;
        json_t *s16 = ladder_gate_settings(&l->cells[2].g, GATE_DEFS[i].name);
        json_t *s32 = ladder_gate_settings(&l->cells[0].g, GATE_DEFS[i].name);
        cr_expect_str_eq(json_string_value(json_object_get(s16, "kv")), "f16", "gate %s",
                         GATE_DEFS[i].name);
        cr_expect_null(json_object_get(s32, "kv"), "gate %s", GATE_DEFS[i].name);
        if (!strcmp(GATE_DEFS[i].name, "falsify"))
            cr_expect_str_eq(
                json_string_value(json_object_get(json_object_get(s16, "parity"), "kv")), "f16");
        json_decref(s16);
        json_decref(s32);
    }
    /* the receipt's cell names itself the way the ladder does (the store's cell column) */
    json_t *payload = json_pack("{s:{s:s, s:s, s:s, s:s}}", "cell", "model", "m", "host", "local",
                                "mode", "cpu.decode", "kv", "f16");
    char rname[256];
    cr_assert_eq(receipt_cell_name(payload, rname, sizeof rname, &err), 0, "%s", err.msg);
    cr_expect_str_eq(rname, "m/local/cpu.decode+kv=f16");
    json_object_set_new(json_object_get(payload, "cell"), "kv", json_string("f8"));
    cr_expect_eq(receipt_cell_name(payload, rname, sizeof rname, NULL), ERR_INPUT,
                 "a cell kv that is neither f32 nor f16 has no name");
    json_decref(payload);
    ladder_free(l);
}

struct bad_case {
    const char *name, *modes, *cells, *gates;
    const char *want; /* substring of the message, with line:column */
};

static const struct bad_case BAD[] = {
    {"unknown value", "cpu.decode", "  - {model: m, host: local, mode: cpu.decode, kv: f8}\n", NULL,
     "l.yaml:8:51: a cells entry's kv must be f32 or f16 (the KV cache type), not 'f8'"},
    {"wrong type", "cpu.decode", "  - {model: m, host: local, mode: cpu.decode, kv: [f16]}\n", NULL,
     "l.yaml:8:51: a cells entry's kv must be f32 or f16 (the KV cache type), not a list"},
    {"a number", "cpu.decode", "  - {model: m, host: local, mode: cpu.decode, kv: 16}\n", NULL,
     "l.yaml:8:51: a cells entry's kv must be f32 or f16 (the KV cache type), not '16'"},
    {"the twin", "ref.decode", "  - {model: m, host: local, mode: ref.decode, kv: f16}\n", NULL,
     "l.yaml:8:51: cell m/local/ref.decode: kv: f16, but backend 'ref' offers no F16 KV cache"
     " (only cuda, cpu do); an F16 cell is refused, never run as F32"},
    {"one mode of a matrix", "cpu.decode, ref.chat",
     "  - {models: [m], hosts: [local], modes: [cpu.decode, ref.chat], kv: f16}\n", NULL,
     "l.yaml:8:70: cell m/local/ref.chat: kv: f16, but backend 'ref' offers no F16 KV cache"},
    {"listed twice", "cpu.decode",
     "  - {model: m, host: local, mode: cpu.decode, kv: f16}\n"
     "  - {model: m, host: local, mode: cpu.decode}\n"
     "  - {models: [m], hosts: [local], modes: [cpu.decode], kv: f16}\n",
     NULL, "l.yaml:10:43: cell m/local/cpu.decode+kv=f16 is listed twice (first at line 8)"},
    {"override match", "cpu.decode", "  - {model: m, host: local, mode: cpu.decode, kv: f16}\n",
     "gates:\n  overrides:\n    - match: {kv: F16}\n      parity: {min_cosine: 0.995}\n",
     "l.yaml:11:19: an override's match kv must be f32 or f16 (the KV cache type), not 'F16'"},
};

Test(kv_ladder, a_bad_kv_is_refused_naming_file_line_and_cell)
{
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        make_dir();
        struct gate_err err = {0};
        struct ladder *l = NULL;
        const char *p = write_ladder(BAD[i].modes, BAD[i].cells, BAD[i].gates);
        cr_expect_eq(ladder_load(&l, p, &err), ERR_INPUT, "%s: accepted", BAD[i].name);
        cr_expect(strstr(err.msg, BAD[i].want), "%s: want '%s' in: %s", BAD[i].name, BAD[i].want,
                  err.msg);
        ladder_free(l);
    }
    /* exec modes: the engine is another program; gate cannot ask its cache type */
    make_dir();
    FILE *f = fopen(path_in("l.yaml"), "w");
    cr_assert(f);
    fprintf(f,
            "release: {name: r, version: '1'}\n"
            "models:\n  m: {path: %s, sha256: " MOE_SHA ", arch: qwen3moe}\n"
            "hosts:\n  local: {device: none, trust: [" KEY_A "]}\n"
            "engines:\n  twin: {argv: [x], supports: [decode, faults]}\n"
            "modes: [exec.twin.decode]\n"
            "cells:\n  - {model: m, host: local, mode: exec.twin.decode, kv: f16}\n"
            "unanchored: {qwen3moe: t}\n",
            moe_path());
    fclose(f);
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_expect_eq(ladder_load(&l, path_in("l.yaml"), &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "cell m/local/exec.twin.decode: kv: f16, but backend 'exec'"), "%s",
              err.msg);
    ladder_free(l);
}

/* The ladder believes engine/backend.c's word (backend_offers_kv_f16); each compiled-in backend
 * must keep it: its open honours kv_f16 exactly when the list says so. */
Test(kv_ladder, every_backend_keeps_its_word_about_an_f16_cache)
{
    struct model *m = check_load_case("qwen3moe-tiny-q4_k_m"); /* a file: no synthesis */
    int offered = 0;
    for (int i = 0; i < backend_count(); i++) {
        const char *name = backend_name(i);
        if (!backend_find(name))
            continue; /* not in this build (cuda on a CPU-only one) */
        struct backend_config cfg = {.n_threads = 1, .n_ctx = 16, .n_batch = 16, .kv_f16 = 1};
        struct backend *b = NULL;
        struct gate_err err = {0};
        const int rc = backend_open(&b, name, m, &cfg, &err);
        if (rc == ERR_ENV && backend_is_device(name)) {
            /* compiled in, no device here (cuda without a GPU): its word is held where one is */
            fprintf(stderr, "backend %s not opened here: %s\n", name, err.msg);
            continue;
        }
        cr_expect_eq(rc == 0, backend_offers_kv_f16(name) == 1,
                     "backend %s: open with kv_f16 %s, but the list says it %s", name,
                     rc ? "refused" : "succeeded",
                     backend_offers_kv_f16(name) ? "offers one" : "offers none");
        if (!rc)
            cr_expect_eq(b->kv_f16, 1, "backend %s opened without reporting an F16 cache", name);
        offered += !rc;
        backend_close(b);
    }
    cr_expect_geq(offered, 1, "no backend of this build offers an F16 KV cache");
    cr_expect_eq(backend_offers_kv_f16("exec"), 0);
    cr_expect_eq(backend_offers_kv_f16("nope"), 0);
    model_free(m);
}

/* mode_open (every gate's subject) hands the mode's KV type to the backend; the ran recorder
 * reports what the backend says, and the numbers really differ from an F32 cache. */
Test(kv_ladder, mode_open_opens_the_subject_with_the_cell_s_kv)
{
    struct model *m = check_load_case("qwen3moe-tiny-q4_k_m"); /* a file: no synthesis */
    const int n = 24, V = (int)m->hp.n_vocab;
    int32_t tokens[24];
    mode_tokens(7, (uint32_t)V, n, tokens);
    float *lg[2];
    for (int kv = 0; kv < 2; kv++) {
        struct mode md;
        struct gate_err err = {0};
        cr_assert_eq(mode_parse("cpu.decode", &md, &err), 0, "%s", err.msg);
        md.kv_f16 = kv;
        struct mode_ran ran;
        mode_ran_begin(&ran);
        struct backend *b = NULL;
        cr_assert_eq(mode_open(&b, &md, m, n, 1, NULL, &err), 0, "%s", err.msg);
        cr_expect_eq(b->kv_f16, kv);
        lg[kv] = malloc((size_t)n * V * sizeof *lg[kv]);
        cr_assert(lg[kv]);
        cr_assert_eq(mode_run(b, MODE_DECODE, tokens, n, NULL, 0, lg[kv], &err), 0, "%s", err.msg);
        backend_close(b);
        mode_ran_end();
        cr_expect_str_eq(ran.kv, kv ? "f16" : "f32");
        json_t *rj = mode_ran_json(&ran);
        cr_expect_str_eq(json_string_value(json_object_get(rj, "kv")), kv ? "f16" : "f32");
        json_decref(rj);
    }
    cr_expect_neq(memcmp(lg[0], lg[1], (size_t)n * V * sizeof(float)), 0,
                  "an F16 cache gave the F32 cache's logits bit for bit");
    free(lg[0]);
    free(lg[1]);
    model_free(m);
}

/* ---- end to end: gate run ------------------------------------------------------------------ */

static json_t *gate_of(const struct run_result *r, const char *gate)
{
    return json_object_get(r->cells[0].gates_json, gate);
}

Test(kv_ladder, an_f16_cell_runs_end_to_end_and_its_receipt_says_f16)
{
    make_dir();
    struct gate_err err = {0};
    /* the smallest ladder that proves it: one cell, parity at 64 positions, goldens recorded
     * for the model (ladderfix_one_cell), a short throughput, one fault without the sweep and
     * one layer of power probes */
    const char *p = ladderfix_one_cell(&fx, "l.yaml", NULL, "cpu.decode", ", kv: f16",
                                       "    throughput: {runs: 3, warmup: 0, prompt_tokens: 8,"
                                       " decode_tokens: 2}\n"
                                       "    falsify: {faults: [skip_qk_norm], sweep_samples: 0,"
                                       " power_layers: 1}\n");
    struct run_options o = {.ladder = p,
                            .host = "a",
                            .db = path_in("r.db"),
                            .key = path_in("a.key"),
                            .threads = 1,
                            .input_seed = 0x5eed}; /* verdicts asserted: not a draw's */
    struct run_result res;
    cr_assert_eq(run_ladder(&o, NULL, NULL, &res, &err), 0, "%s", err.msg);
    cr_assert_eq(res.n, 1);
    cr_expect_str_eq(res.cells[0].name, "moe/a/cpu.decode+kv=f16");
    json_t *parity = gate_of(&res, "parity");
    cr_expect_str_eq(json_string_value(json_object_get(parity, "verdict")), "PASS", "parity: %s",
                     json_string_value(json_object_get(parity, "reason")));
    /* every gate that runs the subject: the settings ask for f16 and the backend reported f16 */
    static const char *const gates[] = {"capability", "parity", "golden", "throughput", "falsify"};
    for (int g = 0; g < 5; g++) {
        json_t *row = gate_of(&res, gates[g]);
        cr_expect_str_eq(json_string_value(json_object_get(json_object_get(row, "settings"), "kv")),
                         "f16", "gate %s settings", gates[g]);
        json_t *ran = json_object_get(json_object_get(row, "metrics"), "ran");
        cr_expect_str_eq(json_string_value(json_object_get(ran, "kv")), "f16",
                         "gate %s: the subject did not run with an F16 cache", gates[g]);
    }
    run_result_free(&res);
    /* the signed payload's cell carries the KV type, and the store names the cell with it */
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_open_v2(path_in("r.db"), &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "select json_extract(payload,'$.cell.kv'), cell from receipts",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 0), "f16");
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 1), "moe/a/cpu.decode+kv=f16");
    sqlite3_finalize(st);
    sqlite3_close(db);
    /* what a person reads: receipt show, the release matrix, the HTML report */
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s && '%s' receipt show 1 --db r.db > show.txt 2>&1;"
             " '%s' release check l.yaml --db r.db > release.txt 2>&1;"
             " '%s' report l.yaml --db r.db -o report.html > /dev/null 2>&1; true",
             fx.dir, bin, bin, bin);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    char *show = check_slurp_text(path_in("show.txt"));
    cr_expect(strstr(show, "receipt 1: moe/a/cpu.decode+kv=f16"), "%s", show);
    cr_expect(strstr(show, "mode cpu.decode, kv f16"), "%s", show);
    free(show);
    char *rel = check_slurp_text(path_in("release.txt"));
    cr_expect(strstr(rel, "a/cpu.decode+kv=f16"), "the matrix has no F16 column: %s", rel);
    free(rel);
    char *html = check_slurp_text(path_in("report.html"));
    cr_expect(strstr(html, "<th>KV cache</th><td>f16"), "the HTML receipt has no KV row");
    cr_expect(strstr(html, "cpu.decode+kv=f16"), "the HTML matrix does not name the F16 cell");
    free(html);
}

/* ---- the release check --------------------------------------------------------------------- */

/* A receipt for cell ci of l (model m, host a, mode cpu.decode) in db, signed by key a: the
 * recorded numbers of a real PASS receipt judged with the cell's settings (ladderfix_add), its
 * payload's cell.kv and every gate's metrics.ran.kv as given (NULL: absent). */
static void add_receipt(const char *l, int ci, const char *db, const char *cell_kv,
                        const char *ran_kv)
{
    ladderfix_add(&fx, l, db, &fx.key_a, ci,
                  (struct ladderfix_fake){.cell_kv = cell_kv, .ran_kv = ran_kv});
}

/* The release of l from db as the stand-in build: the state of each cell into states. */
static int evaluate(const char *l, const char *db, enum release_state *states, char reasons[][700])
{
    struct release_result r;
    ladderfix_evaluate(&fx, l, db, NULL, &r);
    for (int i = 0; i < r.n_cells; i++) {
        states[i] = r.cells[i].state;
        snprintf(reasons[i], 700, "%s", r.cells[i].reason);
    }
    const int ok = r.ok;
    release_result_free(&r);
    return ok;
}

Test(kv_ladder, an_f32_receipt_never_satisfies_an_f16_cell)
{
    make_dir();
    struct gate_err err = {0};
    char p[1024]; /* path_in's buffers rotate */
    snprintf(p, sizeof p, "%s", path_in("l.yaml"));
    FILE *f = fopen(p, "w");
    cr_assert(f);
    fprintf(f,
            "release: {name: rel, version: 1.0.0}\n"
            "models:\n  m: {path: %s, sha256: " MOE_SHA ", arch: qwen3moe}\n"
            "hosts:\n  a: {device: none, trust: ['file:a.pub']}\n"
            "modes: [cpu.decode]\n"
            "cells:\n  - {model: m, host: a, mode: cpu.decode}\n"
            "  - {model: m, host: a, mode: cpu.decode, kv: f16}\n"
            "gates:\n  defaults:\n    golden: {goldens: g.json, sha256: " LADDERFIX_GOLDENS_SHA
            "}\n"
            "unanchored: {qwen3moe: 'recorded numbers only'}\n",
            moe_path());
    cr_assert_eq(fclose(f), 0);
    struct ladder *l = NULL;
    cr_assert_eq(ladder_load(&l, p, &err), 0, "%s", err.msg);
    cr_assert_eq(l->n_cells, 2);
    ladder_free(l);
    enum release_state s[2];
    char why[2][700];

    /* the attack: a genuine PASS receipt of the F32 cell offered for the F16 one */
    add_receipt(p, 0, path_in("attack.db"), "f32", "f32");
    cr_expect_eq(evaluate(p, path_in("attack.db"), s, why), 0, "the release is OK without F16");
    cr_expect_eq(s[0], RELEASE_PASS, "the F32 cell: %s", why[0]);
    cr_expect_eq(s[1], RELEASE_MISSING, "the F16 cell is %s: %s", release_state_name(s[1]), why[1]);
    /* a receipt from before the key (no cell.kv) is an F32 receipt too */
    add_receipt(p, 0, path_in("old.db"), NULL, "f32");
    evaluate(p, path_in("old.db"), s, why);
    cr_expect_eq(s[1], RELEASE_MISSING, "no cell.kv counted for F16: %s", why[1]);
    /* an F32 run relabelled as the F16 cell: its settings are not the F16 cell's */
    add_receipt(p, 0, path_in("relabel.db"), "f16", "f32");
    evaluate(p, path_in("relabel.db"), s, why);
    cr_expect_eq(s[1], RELEASE_STALE, "relabelled: %s (%s)", release_state_name(s[1]), why[1]);
    cr_expect(strstr(why[1], ".kv (absent) -> \"f16\""), "%s", why[1]);
    /* a harness that dropped the setting: the F16 cell's settings, but the backend ran F32 */
    add_receipt(p, 1, path_in("dropped.db"), "f16", "f32");
    evaluate(p, path_in("dropped.db"), s, why);
    cr_expect_eq(s[1], RELEASE_FAIL, "dropped: %s (%s)", release_state_name(s[1]), why[1]);
    cr_expect(strstr(why[1], "asks for KV cache f16 but the subject ran f32"), "%s", why[1]);
    /* and the reverse: an F16 receipt does not count for the F32 cell */
    add_receipt(p, 1, path_in("reverse.db"), "f16", "f16");
    cr_expect_eq(evaluate(p, path_in("reverse.db"), s, why), 0);
    cr_expect_eq(s[0], RELEASE_MISSING, "the F32 cell is %s: %s", release_state_name(s[0]), why[0]);
    cr_expect_eq(s[1], RELEASE_PASS, "the F16 cell: %s", why[1]);
    /* an F32 cell whose subject ran F16 fails too */
    add_receipt(p, 0, path_in("f32ran16.db"), "f32", "f16");
    evaluate(p, path_in("f32ran16.db"), s, why);
    cr_expect_eq(s[0], RELEASE_FAIL, "f32 cell ran f16: %s (%s)", release_state_name(s[0]), why[0]);
    /* the control: both cells with their own receipts, the release is OK */
    add_receipt(p, 0, path_in("both.db"), "f32", "f32");
    add_receipt(p, 1, path_in("both.db"), "f16", "f16");
    cr_expect_eq(evaluate(p, path_in("both.db"), s, why), 1, "%s / %s", why[0], why[1]);
}

/* ---- the F16 cache's rounding (issue 22 §1: kv-f16-trunc, the catalogue's last survivor) ---- */

/* Parity of the cpu engine's F16-KV decode on conformance case `name`, the first 64 positions. */
static void f16_parity(const char *name, struct parity_result *out)
{
    struct gate_err err = {0};
    struct model *m = NULL;
    cr_assert_eq(model_load(&m, conformance_path(name, "model.gguf"), &err), 0, "%s", err.msg);
    struct mode md;
    cr_assert_eq(mode_parse("cpu.decode", &md, &err), 0, "%s", err.msg);
    md.kv_f16 = 1;
    struct parity_config cfg;
    gatedef_parity_config(NULL, &cfg);
    cfg.positions = 64;
    cr_assert_eq(parity_run(m, &md, NULL, NULL, 0, &cfg, 1, out, &err), 0, "%s", err.msg);
    model_free(m);
}

Test(kv_ladder, the_f16_cache_is_judged_against_a_judge_that_rounds_its_cache)
{
    /* float weights: the engine's own noise is far below the rounding's effect, so the
     * rounding itself is judged (measured 0.14 for this case; truncation gives 2.9) */
    struct parity_result r;
    f16_parity("qwen3-dense-tiny-f32", &r);
    cr_expect(r.kv_f16 && r.kv_round.measured, "not measured: %s", r.kv_round.why);
    cr_expect(r.kv_round.n >= 64 && r.kv_round.ratio < 0.5, "ratio %g over %d positions",
              r.kv_round.ratio, r.kv_round.n);
    cr_expect(r.pass, "%s", r.reason);
    /* the receipt's numbers re-judge the same; an edited ratio FAILs; a missing record FAILs */
    json_t *metrics = parity_result_json(&r);
    json_t *settings =
        json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s}", "positions", 64, "min_cosine",
                  r.cfg.min_cosine, "max_mean_kld", r.cfg.max_mean_kld, "max_kld", r.cfg.max_kld,
                  "near_tie", r.cfg.near_tie, "route_tie", r.cfg.route_tie, "max_rel_l2",
                  r.cfg.max_rel_l2, "max_mean_rel_l2", r.cfg.max_mean_rel_l2, "kv", "f16");
    char why[512];
    json_t *checks = json_array();
    cr_expect_eq(parity_gate_judge(settings, metrics, checks, why, sizeof why), GATE_PASS, "%s",
                 why);
    json_object_set_new(json_object_get(metrics, "kv_f16_rounding"), "ratio", json_real(2.9));
    json_array_clear(checks);
    why[0] = '\0';
    cr_expect_eq(parity_gate_judge(settings, metrics, checks, why, sizeof why), GATE_FAIL,
                 "a truncating cache's ratio passed");
    cr_expect(strstr(why, "does not round as it claims"), "%s", why);
    json_object_del(metrics, "kv_f16_rounding");
    json_array_clear(checks);
    why[0] = '\0';
    cr_expect_eq(parity_gate_judge(settings, metrics, checks, why, sizeof why), GATE_FAIL,
                 "an F16 cell without the record passed");
    json_decref(checks);
    json_decref(settings);
    json_decref(metrics);
    parity_result_free(&r);
    /* quantized weights: not decidable, and said so (never a silent pass of the rounding) */
    f16_parity("qwen3-dense-tiny-q8_0", &r);
    cr_expect(r.kv_f16 && !r.kv_round.measured);
    cr_expect(strstr(r.kv_round.why, "not decidable") && strstr(r.kv_round.why, "quantized"), "%s",
              r.kv_round.why);
    json_t *j = parity_result_json(&r);
    cr_expect(json_is_false(json_object_get(json_object_get(j, "kv_f16_rounding"), "measured")));
    json_decref(j);
    parity_result_free(&r);
}

static int cmp_ratio(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* mutation pass (kv_round_measure): the recorded ratio is, by its definition, the median over
 * the judged positions of the subject's distance to a judge rounding its cache to F16 over that
 * judge's distance to the F32 judge, and F16 weights (float) leave it decidable: a median taken
 * as the smallest position, a ratio of squares, or F16 weights taken for quantized would each let
 * a cache that truncates (ratio 2.9) pass as one that rounds. The forced twin rounds its cache as
 * the subject claims. */
Test(kv_ladder, the_f16_rounding_ratio_is_the_median_of_its_definition_and_f16_weights_decide_it)
{
    uint8_t *buf = NULL;
    struct synth_options o;
    memset(&o, 0, sizeof o);
    o.spec = *synth_preset_find("tiny-dense");
    o.quant = SYNTH_F16;
    o.seed = 1;
    struct model *m = check_synth_model(&o, "tiny-dense-f16", &buf);
    struct gate_err err = {0};
    struct mode md;
    cr_assert_eq(mode_parse("cpu.decode", &md, &err), 0, "%s", err.msg);
    md.kv_f16 = 1;
    struct parity_config cfg;
    gatedef_parity_config(NULL, &cfg);
    enum { N = 64 };
    cfg.positions = N;
    struct parity_result r;
    cr_assert_eq(parity_run(m, &md, NULL, NULL, 0, &cfg, 1, &r, &err), 0, "%s", err.msg);
    cr_expect(r.kv_f16 && r.kv_round.measured, "F16 weights: %s", r.kv_round.why);
    cr_expect(strstr(r.forced.rounding, "kv-f16"), "the forced twin rounds as '%s'",
              r.forced.rounding);
    /* the three runs of the definition: the subject, the judge rounding its cache, the judge */
    const size_t V = m->hp.n_vocab;
    int32_t ids[N];
    cr_assert_eq(parity_tokens(&cfg, m, N, ids, NULL, NULL, &err), 0, "%s", err.msg);
    float *lg = malloc(3 * N * V * sizeof *lg);
    cr_assert_not_null(lg);
    struct backend *b = NULL;
    cr_assert_eq(mode_open_batch(&b, &md, m, N, 1, 1, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(mode_run(b, MODE_DECODE, ids, N, NULL, 0, lg, &err), 0, "%s", err.msg);
    backend_close(b);
    const char *emulate[2] = {"kv-f16", ""};
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(mode_open_judge_rounded(&b, m, N, 1, emulate[k], &err), 0, "%s", err.msg);
        cr_assert_eq(mode_judge(b, ids, N, lg + (size_t)(1 + k) * N * V, NULL, &err), 0, "%s",
                     err.msg);
        backend_close(b);
    }
    double ratio[N];
    int n = 0;
    for (int p = 0; p < N; p++) {
        const float *s = lg + (size_t)p * V, *j16 = s + (size_t)N * V, *j = j16 + (size_t)N * V;
        double e = 0, d = 0;
        for (size_t i = 0; i < V; i++) {
            e += ((double)s[i] - j16[i]) * ((double)s[i] - j16[i]);
            d += ((double)j16[i] - j[i]) * ((double)j16[i] - j[i]);
        }
        if (d > 0)
            ratio[n++] = sqrt(e / d);
    }
    qsort(ratio, (size_t)n, sizeof *ratio, cmp_ratio);
    cr_assert_gt(n, N / 2, "the F16 rounding moved %d positions", n);
    cr_expect_eq(r.kv_round.n, n);
    cr_expect(fabs(r.kv_round.ratio - ratio[n / 2]) <= 1e-9 * ratio[n / 2],
              "ratio %.9g, the median of the definition %.9g (smallest %.9g)", r.kv_round.ratio,
              ratio[n / 2], ratio[0]);
    cr_expect(fabs(r.kv_round.p90 - ratio[n * 9 / 10]) <= 1e-9 * ratio[n * 9 / 10],
              "p90 %.9g, %.9g", r.kv_round.p90, ratio[n * 9 / 10]);
    free(lg);
    parity_result_free(&r);
    model_free(m);
    free(buf);
}
