/* test_cellkey.c — a cell's identity (receipts/cellkey.h) and the instruction set as a cell
 * setting (issue 22 §4: "selectable by a setting and recorded in every receipt's `ran`, so an
 * AVX2 cell can be required on an AVX-512 host"). The key's name, payload form and comparison;
 * a cells entry's `isa:` strictly parsed and refused where the backend selects none; an isa cell
 * runs end to end on that set (every gate's settings and ran.isa say so) and is a cell of its
 * own at release check; the judge FAILs a subject that ran another set.
 * The last two tests pin, byte for byte, what every identity setting produces (names, payload
 * "cell" objects, gate settings, override matches, duplicate detection and every refusal).
 * Start reading: cellkey.an_isa_cell_runs_on_its_set_and_is_a_cell_of_its_own.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "harness/gatedef.h"
#include "harness/identity.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "oracles/gates.h"
#include "receipts/cellkey.h"
#include "receipts/receipt.h"
#include "tests/support/check.h"
#include "tests/support/conformance.h"
#include "tests/support/ladderfix.h"

static struct ladderfix fx;

/* ---- the key ------------------------------------------------------------------------------- */

Test(cellkey, names_payloads_and_comparison)
{
    struct cell_key a = {"m", "h", "cpu.decode", {{0}}};
    struct cell_key b = a, c = a;
    cr_assert_eq(cell_setting_parse(CELL_ISA, "avx2", 1, &b.v.at[CELL_ISA]), 0);
    c.v.at[CELL_KV] = KV_F16;
    cr_assert_eq(cell_setting_parse(CELL_ISA, "portable", 1, &c.v.at[CELL_ISA]), 0);
    char name[128];
    struct gate_err err = {0};
    cr_assert_eq(cell_key_name(&a, name, sizeof name, &err), 0, "%s", err.msg);
    cr_expect_str_eq(name, "m/h/cpu.decode", "the defaults add nothing to a name");
    cell_key_name(&b, name, sizeof name, &err);
    cr_expect_str_eq(name, "m/h/cpu.decode+isa=avx2");
    cell_key_name(&c, name, sizeof name, &err);
    cr_expect_str_eq(name, "m/h/cpu.decode+kv=f16+isa=portable");
    cr_expect(!cell_key_same(&a, &b) && !cell_key_same(&b, &c) && cell_key_same(&a, &a));
    cr_expect_neq(cell_key_name(&c, name, 10, &err), 0, "a name that does not fit is an error");
    err_clear(&err);
    /* the payload form round-trips; the defaults read back from an absent key */
    json_t *p = json_pack("{s:o}", "cell", cell_key_json(&c));
    struct cell_key back;
    cr_assert_eq(cell_key_of_payload(p, &back, &err), 0, "%s", err.msg);
    cr_expect(cell_key_same(&back, &c));
    json_object_del(json_object_get(p, "cell"), "isa");
    json_object_del(json_object_get(p, "cell"), "kv");
    cr_assert_eq(cell_key_of_payload(p, &back, &err), 0, "%s", err.msg);
    cr_expect(cell_key_same(&back, &a), "absent settings are the defaults");
    /* a value no ladder can hold names no cell */
    json_object_set_new(json_object_get(p, "cell"), "isa", json_string("sse9"));
    cr_expect_eq(cell_key_of_payload(p, &back, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "\"isa\""), "%s", err.msg);
    err_clear(&err);
    json_object_set_new(json_object_get(p, "cell"), "isa", json_integer(2));
    cr_expect_eq(cell_key_of_payload(p, &back, &err), ERR_INPUT);
    err_clear(&err);
    struct cell_key d = {"m", "h", "cuda.prefill", {{0}}};
    d.v.at[CELL_KV] = KV_F16;
    cr_assert_eq(cell_setting_parse(CELL_PREFILL, "bf16", 1, &d.v.at[CELL_PREFILL]), 0);
    cell_key_name(&d, name, sizeof name, &err);
    cr_expect_str_eq(name, "m/h/cuda.prefill+kv=f16+prefill=bf16");
    json_t *pd = json_pack("{s:o}", "cell", cell_key_json(&d));
    cr_assert_eq(cell_key_of_payload(pd, &back, &err), 0, "%s", err.msg);
    cr_expect(cell_key_same(&back, &d) && !cell_key_same(&back, &a));
    json_object_set_new(json_object_get(pd, "cell"), "prefill", json_string("f32"));
    cr_expect_eq(cell_key_of_payload(pd, &back, &err), ERR_INPUT,
                 "an explicit f32 is not how a payload records the default");
    err_clear(&err);
    json_decref(pd);
    char stored[128];
    json_object_set_new(json_object_get(p, "cell"), "isa", json_string("avx512"));
    cr_assert_eq(receipt_cell_name(p, stored, sizeof stored, &err), 0, "%s", err.msg);
    cr_expect_str_eq(stored, "m/h/cpu.decode+isa=avx512", "the store's cell column names it");
    json_decref(p);
}

/* ---- the ladder ---------------------------------------------------------------------------- */

static int load_cells(const char *modes, const char *cells, const char *gates, struct ladder **out,
                      struct gate_err *err)
{
    const char *p = ladderfix_path(&fx, "l.yaml");
    FILE *f = fopen(p, "w");
    cr_assert(f);
    fprintf(f,
            "release: {name: r, version: '1'}\n"
            "models:\n  moe: {path: m.gguf, sha256: " LADDERFIX_MOE_SHA ", arch: qwen3moe}\n"
            "hosts:\n  a: {device: none, trust: [%s]}\n"
            "modes: [%s]\n"
            "cells:\n%s%s"
            "unanchored: {qwen3moe: 'cell key tests'}\n",
            fx.key_a.id, modes, cells, gates ? gates : "");
    cr_assert_eq(fclose(f), 0);
    return ladder_load(out, p, err);
}

Test(cellkey, isa_is_parsed_strictly_and_is_part_of_the_cell)
{
    ladderfix_init(&fx, "cellkey1");
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_assert_eq(load_cells("cpu.decode, ref.decode",
                            "  - {model: moe, host: a, mode: cpu.decode}\n"
                            "  - {model: moe, host: a, mode: cpu.decode, isa: avx2}\n"
                            "  - {model: moe, host: a, mode: cpu.decode, isa: portable, kv: f16}\n"
                            "  - {model: moe, host: a, mode: ref.decode}\n",
                            "gates:\n  overrides:\n"
                            "    - match: {isa: avx2}\n"
                            "      parity: {min_cosine: 0.9995}\n",
                            &l, &err),
                 0, "%s", err.msg);
    cr_assert_eq(l->n_cells, 4, "the same model/host/mode on another set is another cell");
    char name[256];
    cr_expect_str_eq(ladder_cell_name(l, 0, name, sizeof name), "moe/a/cpu.decode");
    cr_expect_str_eq(ladder_cell_name(l, 1, name, sizeof name), "moe/a/cpu.decode+isa=avx2");
    cr_expect_str_eq(ladder_cell_name(l, 2, name, sizeof name),
                     "moe/a/cpu.decode+kv=f16+isa=portable");
    /* every gate's settings carry it; the override matched only the avx2 cell */
    json_t *s0 = ladder_gate_settings(&l->cells[0].g, "parity"),
           *s1 = ladder_gate_settings(&l->cells[1].g, "parity");
    cr_expect_null(json_object_get(s0, "isa"), "a cell without isa records none");
    cr_expect_str_eq(json_string_value(json_object_get(s1, "isa")), "avx2");
    cr_expect_eq(json_real_value(json_object_get(s1, "min_cosine")), 0.9995);
    cr_expect_neq(json_real_value(json_object_get(s0, "min_cosine")), 0.9995);
    json_decref(s0);
    json_decref(s1);
    ladder_free(l);
    l = NULL;
    /* refused at check time, at the value, naming the cell and why */
    static const struct {
        const char *cells, *want;
    } bad[] = {
        {"  - {model: moe, host: a, mode: ref.decode, isa: avx2}\n",
         "backend 'ref' has no selectable instruction set"},
        {"  - {model: moe, host: a, mode: cpu.decode, isa: sse9}\n",
         "must be portable, avx2 or avx512"},
        {"  - {model: moe, host: a, mode: cpu.decode, isa: AVX2}\n",
         "must be portable, avx2 or avx512"},
        {"  - {model: moe, host: a, mode: cpu.decode, isa: [avx2]}\n",
         "must be portable, avx2 or avx512"},
        {"  - {model: moe, host: a, mode: cpu.decode, isa: avx2}\n"
         "  - {models: [moe], hosts: [a], modes: [cpu.decode], isa: avx2}\n",
         "cell moe/a/cpu.decode+isa=avx2 is listed twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err_clear(&err);
        cr_expect_eq(load_cells("cpu.decode, ref.decode", bad[i].cells, NULL, &l, &err), ERR_INPUT,
                     "case %zu was accepted", i);
        cr_expect(strstr(err.msg, bad[i].want), "case %zu: %s", i, err.msg);
        cr_expect(strstr(err.msg, "l.yaml:"), "case %zu names no place: %s", i, err.msg);
        ladder_free(l);
        l = NULL;
    }
    err_clear(&err);
    cr_expect_eq(load_cells("cpu.decode", "  - {model: moe, host: a, mode: cpu.decode}\n",
                            "gates:\n  overrides:\n    - match: {isa: avx3}\n"
                            "      parity: {min_cosine: 0.9995}\n",
                            &l, &err),
                 ERR_INPUT, "an override matching an unknown set was accepted");
    cr_expect(strstr(err.msg, "match isa"), "%s", err.msg);
    ladder_free(l);
}

/* ---- the judge ----------------------------------------------------------------------------- */

static enum gate_verdict judge_with(const char *want, const char *ran_isa, char *why)
{
    json_t *settings = json_pack("{s:i}", "positions", 64);
    if (want)
        json_object_set_new(settings, "isa", json_string(want));
    json_t *metrics =
        json_pack("{s:{s:s, s:s, s:i, s:i, s:i}}", "ran", "backend", "cpu", "device",
                  "cpu [isa avx2]", "subjects", 1, "tokens", 64, "kernel_launches", 0);
    if (ran_isa)
        json_object_set_new(json_object_get(metrics, "ran"), "isa", json_string(ran_isa));
    json_t *checks = json_array();
    const enum gate_verdict v = gate_judge_common(
        gatedef_find("capability")->judge, 1, "cpu.decode", settings, metrics, checks, why, 256);
    json_decref(settings);
    json_decref(metrics);
    json_decref(checks);
    return v;
}

Test(cellkey, the_judge_fails_a_subject_that_ran_another_set)
{
    char why[256];
    judge_with("avx2", "avx2", why);
    cr_expect_null(strstr(why, "instruction set"), "the right set was refused: %s", why);
    cr_expect_eq(judge_with("avx2", "avx512", why), GATE_FAIL, "another set passed");
    cr_expect(strstr(why, "asks for instruction set avx2 but the subject ran avx512"), "%s", why);
    cr_expect_eq(judge_with("portable", NULL, why), GATE_FAIL, "no recorded set passed");
    cr_expect(strstr(why, "instruction set portable but the subject ran none recorded"), "%s", why);
}

/* ---- end to end ---------------------------------------------------------------------------- */

/* A one-cell ladder (as ladderfix_one_cell's, cpu.decode) over model moe = moe1.gguf (digest
 * sha) in the fixture's folder. */
static const char *isa_ladder(const char *name, const char *sha, const char *cell_extra,
                              const char *defaults)
{
    const char *path = ladderfix_path(&fx, name);
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write '%s'", path);
    fprintf(f,
            "release: {name: rel, version: 1.0.0}\n"
            "models:\n  moe: {path: moe1.gguf, sha256: %s, arch: qwen3moe}\n"
            "hosts:\n  a: {device: none, trust: ['file:a.pub']}\n"
            "modes: [cpu.decode]\n"
            "cells:\n  - {model: moe, host: a, mode: cpu.decode%s}\n"
            "gates:\n  defaults:\n    parity: {positions: 64}\n%s"
            "unanchored: {qwen3moe: 'a one-cell test ladder'}\n",
            sha, cell_extra, defaults);
    cr_assert_eq(fclose(f), 0, "cannot write '%s'", path);
    return path;
}

Test(cellkey, an_isa_cell_runs_on_its_set_and_is_a_cell_of_its_own)
{
    ladderfix_init(&fx, "cellkey2");
    struct gate_err err = {0};
    /* portable: every host runs it, so this test means the same on every machine. The portable
     * kernels are the slowest subject there is (under ASan most of all): the model is tiny-moe
     * cut to one layer (Q4_K_M, the conformance model's kernels), the gates run at their least
     * (goldens of 4 tokens, the power probe at one layer per tensor) */
    struct synth_options so = {
        .spec = *synth_preset_find("tiny-moe"), .quant = SYNTH_Q4_K_M, .seed = 1, .n_threads = 1};
    so.spec.name = "custom";
    so.spec.n_layer = 1;
    char model[1024], msha[65], gsha[65], gates_text[512];
    snprintf(model, sizeof model, "%s", ladderfix_path(&fx, "moe1.gguf"));
    cr_assert_eq(synth_write(&so, model, NULL, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(identity_file_sha256(model, msha, &err), 0, "%s", err.msg);
    ladderfix_record_goldens(model, ladderfix_path(&fx, "g4.json"), 4, gsha);
    snprintf(gates_text, sizeof gates_text,
             "    golden: {goldens: g4.json, sha256: %s, tokens: 4}\n"
             "    throughput: {runs: 3, warmup: 0, prompt_tokens: 8, decode_tokens: 2}\n"
             "    falsify: {faults: [skip_qk_norm], sweep_samples: 0, power_layers: 1}\n",
             gsha);
    const char *p = isa_ladder("l.yaml", msha, ", isa: portable", gates_text);
    const char *before = backend_isa("cpu");
    char host_best[16];
    snprintf(host_best, sizeof host_best, "%s", before);
    struct run_options o = {.ladder = p,
                            .host = "a",
                            .db = ladderfix_path(&fx, "r.db"),
                            .key = ladderfix_path(&fx, "a.key"),
                            .threads = 1,
                            .input_seed = 0x5eed}; /* verdicts asserted: not a draw's */
    struct run_result res;
    cr_assert_eq(run_ladder(&o, NULL, NULL, &res, &err), 0, "%s", err.msg);
    cr_assert_eq(res.n, 1);
    cr_expect_str_eq(res.cells[0].name, "moe/a/cpu.decode+isa=portable");
    cr_expect_str_eq(backend_isa("cpu"), host_best, "the cell's set outlived the cell");
    static const char *const gates[] = {"capability", "parity", "throughput", "falsify"};
    for (int g = 0; g < 4; g++) {
        json_t *row = json_object_get(res.cells[0].gates_json, gates[g]);
        cr_expect_str_eq(
            json_string_value(json_object_get(json_object_get(row, "settings"), "isa")), "portable",
            "gate %s settings", gates[g]);
        json_t *ran = json_object_get(json_object_get(row, "metrics"), "ran");
        cr_expect_str_eq(json_string_value(json_object_get(ran, "isa")), "portable",
                         "gate %s: the subject did not run the portable kernels", gates[g]);
    }
    json_t *parity = json_object_get(res.cells[0].gates_json, "parity");
    cr_expect_str_eq(json_string_value(json_object_get(parity, "verdict")), "PASS", "parity: %s",
                     json_string_value(json_object_get(parity, "reason")));
    run_result_free(&res);
    /* the same cell without isa: its receipts never count for the isa cell, nor the reverse */
    isa_ladder("plain.yaml", msha, "", gates_text);
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s && '%s' release check plain.yaml --db r.db > plain.txt 2>&1;"
             " '%s' release check l.yaml --db r.db > own.txt 2>&1;"
             " '%s' receipt show 1 --db r.db > show.txt 2>&1; true",
             fx.dir, bin, bin, bin);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    char *plain = check_slurp_text(ladderfix_path(&fx, "plain.txt"));
    cr_expect(strstr(plain, "MISSING"),
              "an isa cell's receipt counted for the cell without isa: %s", plain);
    free(plain);
    char *own = check_slurp_text(ladderfix_path(&fx, "own.txt"));
    cr_expect(strstr(own, "a/cpu.decode+isa=portable") && !strstr(own, "MISSING"),
              "the isa cell's own receipt did not count: %s", own);
    free(own);
    /* what a person reads */
    char *show = check_slurp_text(ladderfix_path(&fx, "show.txt"));
    cr_expect(strstr(show, "receipt 1: moe/a/cpu.decode+isa=portable"), "%s", show);
    cr_expect(strstr(show, "kv f32, isa portable"), "%s", show);
    free(show);
}

/* ---- the prefill precision (issue 25 §2: what ran is what is recorded) ---------------------- */

/* A cells text the ladder must refuse, and what the message must say. */
struct refusal {
    const char *cells, *want;
};

/* Each of the n ladders (modes, bad[i].cells) is refused with ERR_INPUT naming bad[i].want. */
static void expect_refused(const char *modes, const struct refusal *bad, size_t n)
{
    struct gate_err err = {0};
    for (size_t i = 0; i < n; i++) {
        struct ladder *l = NULL;
        err_clear(&err);
        cr_expect_eq(load_cells(modes, bad[i].cells, NULL, &l, &err), ERR_INPUT,
                     "case %zu was accepted", i);
        cr_expect(strstr(err.msg, bad[i].want), "case %zu: %s", i, err.msg);
        ladder_free(l);
    }
}

/* The capability judge of a cell whose settings ask key = want (NULL: not asked) over a subject
 * of backend that reported key = ran: it FAILs naming noun exactly when pass is 0. */
static void expect_ran_judged(const char *mode, const char *backend, const char *key,
                              const char *want, const char *ran, const char *noun, int pass,
                              size_t i)
{
    json_t *settings = json_pack("{s:i}", "positions", 64);
    if (want)
        json_object_set_new(settings, key, json_string(want));
    json_t *metrics =
        json_pack("{s:{s:s, s:s, s:i, s:i, s:s}}", "ran", "backend", backend, "device", backend,
                  "tokens", 64, "kernel_launches", strcmp(backend, "cuda") ? 0 : 10, key, ran);
    json_t *checks = json_array();
    char why[256] = "";
    gate_judge_common(gatedef_find("capability")->judge, 1, mode, settings, metrics, checks, why,
                      sizeof why);
    cr_expect_eq(strstr(why, noun) != NULL, !pass, "case %zu (%s asked %s, ran %s): %s", i, key,
                 want ? want : "nothing", ran, why);
    json_decref(settings);
    json_decref(metrics);
    json_decref(checks);
}

Test(cellkey, prefill_precision_is_a_cell_setting_judged_like_kv)
{
    ladderfix_init(&fx, "cellkey3");
    struct gate_err err = {0};
    struct ladder *l = NULL;
    /* cuda is known to every build: its 16-bit configurations are cells of their own */
    cr_assert_eq(load_cells("cuda.decode, cuda.prefill",
                            "  - {model: moe, host: a, mode: cuda.prefill}\n"
                            "  - {model: moe, host: a, mode: cuda.prefill, kv: f16, prefill: f16}\n"
                            "  - {model: moe, host: a, mode: cuda.prefill, prefill: bf16}\n",
                            NULL, &l, &err),
                 0, "%s", err.msg);
    char name[256];
    cr_expect_str_eq(ladder_cell_name(l, 1, name, sizeof name),
                     "moe/a/cuda.prefill+kv=f16+prefill=f16");
    json_t *s1 = ladder_gate_settings(&l->cells[1].g, "parity"),
           *s0 = ladder_gate_settings(&l->cells[0].g, "parity");
    cr_expect_str_eq(json_string_value(json_object_get(s1, "prefill")), "f16");
    cr_expect_null(json_object_get(s0, "prefill"), "the F32 default records nothing");
    json_decref(s0);
    json_decref(s1);
    ladder_free(l);
    l = NULL;
    static const struct refusal bad[] = {
        {"  - {model: moe, host: a, mode: cpu.decode, prefill: f16}\n",
         "backend 'cpu' runs its batched projections in F32 only"},
        {"  - {model: moe, host: a, mode: cuda.prefill, prefill: fp16}\n",
         "must be f32, f16 or bf16"},
        {"  - {model: moe, host: a, mode: cuda.prefill}\n"
         "  - {model: moe, host: a, mode: cuda.prefill, prefill: f32}\n",
         "is listed twice"},
    };
    expect_refused("cpu.decode, cuda.prefill", bad, sizeof bad / sizeof bad[0]);
    /* the judge holds what ran to the cell: a 16-bit cell whose subject ran F32, and an F32
     * cell whose subject ran FP16 (an old GATE_CUDA_PREFILL), both FAIL */
    static const struct {
        const char *want, *ran;
        int pass;
    } cases[] = {{"f16", "f16", 1}, {"f16", "f32", 0}, {NULL, "f16", 0}, {NULL, "f32", 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_ran_judged("cpu.decode", "cpu", "prefill", cases[i].want, cases[i].ran,
                          "batched projections", cases[i].pass, i);
    /* and at open: a backend asked for a precision it does not run refuses (no silent F32) */
    struct model *m = NULL;
    cr_assert_eq(model_load(&m, conformance_path("qwen3-dense-tiny-q8_0", "model.gguf"), &err), 0,
                 "%s", err.msg);
    struct backend *b = NULL;
    struct backend_config cfg = {.n_threads = 1, .n_ctx = 16, .n_batch = 16, .prefill = "f16"};
    err_clear(&err);
    cr_expect_eq(backend_open(&b, "cpu", m, &cfg, &err), ERR_INPUT, "cpu opened as f16");
    cr_expect(strstr(err.msg, "runs its batched projections in f32, not f16"), "%s", err.msg);
    cr_expect_null(b);
    model_free(m);
}

/* The kernel generations (gemv, route, attn, graph) are cell settings: the fast paths the bench
 * measures (docs/performance.md: decode 3.7x v1 on an H200 with all four) can be required cells
 * of their own, refused on a backend without them, and judged from what the subject ran. */
Test(cellkey, kernel_generations_are_cell_settings_judged_like_prefill)
{
    /* one truth: every backend's knob values are exactly the rows' default and values */
    for (int k = 0; k < KNOB_COUNT; k++) {
        const struct cell_setting *r = &CELL_SETTINGS[CELL_KNOB_FIRST + k];
        cr_expect_str_eq(r->key, BACKEND_KNOBS[k].key, "row %d is not knob %d", k, k);
        char all[64];
        snprintf(all, sizeof all, "%s", r->dflt);
        for (int i = 0; r->values[i]; i++)
            snprintf(all + strlen(all), sizeof all - strlen(all), ",%s", r->values[i]);
        for (int b = 0; b < backend_count(); b++) {
            const char *has = backend_knob_values(backend_name(b), (enum backend_knob)k);
            if (has && *has)
                cr_expect_str_eq(has, all, "backend %s's %s values", backend_name(b), r->key);
        }
    }
    ladderfix_init(&fx, "cellkey4");
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_assert_eq(load_cells("cuda.decode, cuda.prefill",
                            "  - {model: moe, host: a, mode: cuda.decode}\n"
                            "  - {model: moe, host: a, mode: cuda.decode, gemv: v2, route: v2,"
                            " attn: split, graph: on}\n"
                            "  - {model: moe, host: a, mode: cuda.prefill, gemv: v1, prefill: f16,"
                            " graph: off, route: v2}\n",
                            "gates:\n  overrides:\n"
                            "    - match: {graph: on}\n      parity: {min_cosine: 0.9993}\n",
                            &l, &err),
                 0, "%s", err.msg);
    char name[256];
    cr_expect_str_eq(ladder_cell_name(l, 1, name, sizeof name),
                     "moe/a/cuda.decode+gemv=v2+route=v2+attn=split+graph=on");
    cr_expect_str_eq(ladder_cell_name(l, 2, name, sizeof name),
                     "moe/a/cuda.prefill+prefill=f16+route=v2");
    json_t *s1 = ladder_gate_settings(&l->cells[1].g, "parity"),
           *s0 = ladder_gate_settings(&l->cells[0].g, "parity");
    cr_expect_str_eq(json_string_value(json_object_get(s1, "gemv")), "v2");
    cr_expect_str_eq(json_string_value(json_object_get(s1, "graph")), "on");
    cr_expect_float_eq(json_real_value(json_object_get(s1, "min_cosine")), 0.9993, 1e-12);
    cr_expect_null(json_object_get(s0, "gemv"), "the v1 default records nothing");
    json_decref(s0);
    json_decref(s1);
    ladder_free(l);
    l = NULL;
    static const struct refusal bad[] = {
        {"  - {model: moe, host: a, mode: cpu.decode, gemv: v2}\n",
         "backend 'cpu' has no kernel generations (cuda offers v2)"},
        {"  - {model: moe, host: a, mode: cuda.decode, attn: v2}\n", "must be v1 or split"},
        {"  - {model: moe, host: a, mode: cuda.decode, graph: true}\n", "must be off or on"},
        {"  - {model: moe, host: a, mode: cuda.decode}\n"
         "  - {model: moe, host: a, mode: cuda.decode, gemv: v1}\n",
         "is listed twice"},
    };
    expect_refused("cpu.decode, cuda.decode", bad, sizeof bad / sizeof bad[0]);
    /* the judge holds what ran to the cell, both ways: a v2 cell whose subject ran v1, and a v1
     * cell whose subject ran v2 (a harness that leaked a command-line switch), both FAIL */
    static const struct {
        const char *key, *want, *ran, *noun;
        int pass;
    } cases[] = {{"gemv", "v2", "v2", "GEMV", 1},
                 {"gemv", "v2", "v1", "GEMV", 0},
                 {"gemv", NULL, "v2", "GEMV", 0},
                 {"gemv", NULL, "v1", "GEMV", 1},
                 {"graph", "on", "off", "decode graph", 0},
                 {"graph", "on", "eager: GATE_CUDA_DEBUG=1 syncs every launch", "decode graph", 0},
                 {"attn", "split", "mixed", "attention", 0},
                 {"route", NULL, "v1", "routing", 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_ran_judged("cuda.decode", "cuda", cases[i].key, cases[i].want, cases[i].ran,
                          cases[i].noun, cases[i].pass, i);
}

/* Every variant's suffix and description fit CELL_SUFFIX_MAX / CELL_DESCRIBE_MAX whole: with the
 * four kernel-generation rows the longest suffix grew to 71 bytes, and the 48-byte buffers the
 * names were made in cut it, so two cells could share a name. */
Test(cellkey, the_longest_variant_names_fit_whole)
{
    struct cell_variant v;
    memset(&v, 0, sizeof v);
    size_t want = 0, want_d = 0;
    for (int s = 0; s < CELL_SETTING_COUNT; s++) {
        int best = 0;
        size_t longest = 0;
        for (int i = 0; i <= CELL_SETTING_MAX_VALUES; i++) {
            const char *name = cell_setting_name((enum cell_setting_id)s, i);
            if (i > 0 && !*name)
                break;
            if (i > 0 && strlen(name) >= longest)
                longest = strlen(name), best = i;
        }
        v.at[s] = (unsigned char)best;
        want += 2 + strlen(CELL_SETTINGS[s].key) + longest;                 /* "+key=value" */
        want_d += (s ? 2 : 0) + strlen(CELL_SETTINGS[s].key) + 1 + longest; /* ", key value" */
    }
    char suffix[CELL_SUFFIX_MAX], desc[CELL_DESCRIBE_MAX];
    cell_variant_suffix(&v, suffix, sizeof suffix);
    cell_variant_describe(&v, desc, sizeof desc);
    cr_expect_eq(strlen(suffix), want, "suffix cut: '%s' (%zu of %zu bytes)", suffix,
                 strlen(suffix), want);
    cr_expect_eq(strlen(desc), want_d, "description cut: '%s' (%zu of %zu bytes)", desc,
                 strlen(desc), want_d);
    cr_expect_lt(want, (size_t)CELL_SUFFIX_MAX - 16, "CELL_SUFFIX_MAX leaves little room: %zu",
                 want);
    cr_expect_lt(want_d, (size_t)CELL_DESCRIBE_MAX - 16, "CELL_DESCRIBE_MAX: %zu", want_d);
    /* and a name made of it is whole */
    struct cell_key k = {"model", "host", "cuda.prefill", v};
    char name[256];
    struct gate_err err = {0};
    cr_assert_eq(cell_key_name(&k, name, sizeof name, &err), 0, "%s", err.msg);
    cr_expect(strstr(name, suffix) && strlen(name) == strlen("model/host/cuda.prefill") + want,
              "%s", name);
}

/* ---- every identity setting, pinned byte for byte ------------------------------------------ */
/* What a cell's identity settings produce — names, the payload's "cell" object, the gates'
 * settings, override matching, the ladder's duplicate index, every parse and backend refusal —
 * pinned as text, so the settings' code can be restructured without changing a byte. */

/* The name, the payload's "cell" object and a gate's identity settings (sorted, compact) of
 * the cell a payload's "cell" object names; ERR_INPUT text when it names none. */
static void key_texts(const char *cell_json, char *name, char *cell, char *settings)
{
    json_error_t je;
    json_t *p = json_pack("{s:o}", "cell", json_loads(cell_json, 0, &je));
    struct cell_key k;
    struct gate_err err = {0};
    name[0] = cell[0] = settings[0] = '\0';
    if (cell_key_of_payload(p, &k, &err)) {
        snprintf(name, 256, "ERR %.250s", err.msg);
        json_decref(p);
        return;
    }
    cr_assert_eq(cell_key_name(&k, name, 256, &err), 0, "%s", err.msg);
    json_t *c = cell_key_json(&k), *s = json_object();
    cell_variant_settings(&k.v, s);
    char *ct = json_dumps(c, JSON_SORT_KEYS | JSON_COMPACT),
         *st = json_dumps(s, JSON_SORT_KEYS | JSON_COMPACT);
    snprintf(cell, 256, "%s", ct);
    snprintf(settings, 256, "%s", st);
    free(ct);
    free(st);
    json_decref(c);
    json_decref(s);
    json_decref(p);
}

Test(cellkey, pinned_names_payloads_and_settings_of_every_value)
{
    static const char *const kvs[] = {NULL, "f32", "f16"};
    static const char *const isas[] = {NULL, "portable", "avx2", "avx512"};
    static const char *const pfs[] = {NULL, "f16", "bf16"};
    int n = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 3; c++) {
                char in[256], name[256], cell[256], settings[256], want[256], wcell[256], wset[256];
                snprintf(in, sizeof in,
                         "{\"model\":\"m\",\"host\":\"h\",\"mode\":\"x.y\"%s%s%s%s%s%s%s%s%s}",
                         kvs[a] ? ",\"kv\":\"" : "", kvs[a] ? kvs[a] : "", kvs[a] ? "\"" : "",
                         isas[b] ? ",\"isa\":\"" : "", isas[b] ? isas[b] : "", isas[b] ? "\"" : "",
                         pfs[c] ? ",\"prefill\":\"" : "", pfs[c] ? pfs[c] : "", pfs[c] ? "\"" : "");
                key_texts(in, name, cell, settings);
                const int f16 = a == 2;
                snprintf(want, sizeof want, "m/h/x.y%s%s%s%s%s", f16 ? "+kv=f16" : "",
                         isas[b] ? "+isa=" : "", isas[b] ? isas[b] : "", pfs[c] ? "+prefill=" : "",
                         pfs[c] ? pfs[c] : "");
                cr_expect_str_eq(name, want, "%s", in);
                /* sorted keys: host, isa, kv, mode, model, prefill; kv always written */
                snprintf(
                    wcell, sizeof wcell,
                    "{\"host\":\"h\",%s%s%s\"kv\":\"%s\",\"mode\":\"x.y\",\"model\":\"m\"%s%s%s}",
                    isas[b] ? "\"isa\":\"" : "", isas[b] ? isas[b] : "", isas[b] ? "\"," : "",
                    f16 ? "f16" : "f32", pfs[c] ? ",\"prefill\":\"" : "", pfs[c] ? pfs[c] : "",
                    pfs[c] ? "\"" : "");
                cr_expect_str_eq(cell, wcell, "%s", in);
                snprintf(wset, sizeof wset, "{%s%s%s%s%s%s%s%s}", isas[b] ? "\"isa\":\"" : "",
                         isas[b] ? isas[b] : "", isas[b] ? "\"" : "",
                         f16 ? (isas[b] ? ",\"kv\":\"f16\"" : "\"kv\":\"f16\"") : "",
                         pfs[c] && (isas[b] || f16) ? "," : "", pfs[c] ? "\"prefill\":\"" : "",
                         pfs[c] ? pfs[c] : "", pfs[c] ? "\"" : "");
                cr_expect_str_eq(settings, wset, "%s", in);
                n++;
            }
    cr_expect_eq(n, 36);
    /* a value no ladder can hold names no cell, and the message says what would */
    static const struct {
        const char *in, *want;
    } bad[] = {
        {"{\"model\":\"m\",\"host\":\"h\",\"mode\":\"x.y\",\"kv\":\"f8\"}",
         "ERR payload \"cell\" of m/h/x.y: \"kv\" must be \"f32\" or \"f16\""},
        {"{\"model\":\"m\",\"host\":\"h\",\"mode\":\"x.y\",\"kv\":1}",
         "ERR payload \"cell\" of m/h/x.y: \"kv\" must be \"f32\" or \"f16\""},
        {"{\"model\":\"m\",\"host\":\"h\",\"mode\":\"x.y\",\"isa\":\"\"}",
         "ERR payload \"cell\" of m/h/x.y: \"isa\" must be \"portable\", \"avx2\" or \"avx512\""},
        {"{\"model\":\"m\",\"host\":\"h\",\"mode\":\"x.y\",\"isa\":\"sse9\"}",
         "ERR payload \"cell\" of m/h/x.y: \"isa\" must be \"portable\", \"avx2\" or \"avx512\""},
        {"{\"model\":\"m\",\"host\":\"h\",\"mode\":\"x.y\",\"prefill\":\"f32\"}",
         "ERR payload \"cell\" of m/h/x.y: \"prefill\" must be \"f16\" or \"bf16\" (absent: f32)"},
        {"{\"model\":\"m\",\"host\":\"h\",\"mode\":\"x.y\",\"prefill\":null}",
         "ERR payload \"cell\" of m/h/x.y: \"prefill\" must be \"f16\" or \"bf16\" (absent: f32)"},
        {"{\"model\":\"m\",\"host\":\"h\"}",
         "ERR payload \"cell\" must be an object with non-empty strings \"model\", \"host\" and"
         " \"mode\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[256], cell[256], settings[256];
        key_texts(bad[i].in, name, cell, settings);
        cr_expect_str_eq(name, bad[i].want, "%s", bad[i].in);
    }
}

/* err.msg from its "l.yaml:" on (the folder is the test's own) */
static const char *at_ladder(const struct gate_err *err)
{
    const char *s = strstr(err->msg, "l.yaml:");
    return s ? s : err->msg;
}

Test(cellkey, pinned_ladder_cells_overrides_and_refusals_of_every_setting)
{
    ladderfix_init(&fx, "cellkey3");
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_assert_eq(
        load_cells(
            "cpu.decode, cpu.prefill, cuda.decode, cuda.prefill",
            "  - {model: moe, host: a, mode: cpu.decode}\n"
            "  - {model: moe, host: a, mode: cpu.decode, kv: f16}\n"
            "  - {models: [moe], hosts: [a], modes: [cpu.decode, cpu.prefill], isa: portable}\n"
            "  - {model: moe, host: a, mode: cpu.decode, isa: avx2}\n"
            "  - {model: moe, host: a, mode: cpu.decode, isa: avx512, kv: f16}\n"
            "  - {model: moe, host: a, mode: cpu.prefill, kv: f32, isa: avx512}\n"
            "  - {model: moe, host: a, mode: cuda.decode, kv: f16, prefill: f32}\n"
            "  - {model: moe, host: a, mode: cuda.prefill, prefill: f16}\n"
            "  - {model: moe, host: a, mode: cuda.prefill, prefill: bf16, kv: f16}\n"
            "  - {model: moe, host: a, mode: cuda.prefill}\n",
            "gates:\n  overrides:\n"
            "    - match: {kv: f16}\n      parity: {min_cosine: 0.9991}\n"
            "    - match: {kv: f32}\n      parity: {positions: 70}\n"
            "    - match: {isa: avx512}\n      parity: {max_kld: 0.009}\n"
            "    - match: {prefill: bf16}\n      parity: {max_mean_kld: 0.0009}\n"
            "    - match: {prefill: f32, mode: cpu.decode}\n      parity: {near_tie: 0.04}\n",
            &l, &err),
        0, "%s", err.msg);
    static const struct {
        const char *name, *settings;
    } want[] = {
        {"moe/a/cpu.decode",
         "{\"positions\":70,\"cos\":0.999,\"kld\":0.01,\"mkld\":0.001,\"tie\":0.04}"},
        {"moe/a/cpu.decode+kv=f16",
         "{\"kv\":\"f16\",\"positions\":96,\"cos\":0.9991,\"kld\":0.01,\"mkld\":0.001,\"tie\":0.04}"},
        {"moe/a/cpu.decode+isa=portable",
         "{\"isa\":\"portable\",\"positions\":70,\"cos\":0.999,\"kld\":0.01,\"mkld\":0.001,\"tie\":0.04}"},
        {"moe/a/cpu.prefill+isa=portable",
         "{\"isa\":\"portable\",\"positions\":70,\"cos\":0.999,\"kld\":0.01,\"mkld\":0.001,\"tie\":0.05}"},
        {"moe/a/cpu.decode+isa=avx2",
         "{\"isa\":\"avx2\",\"positions\":70,\"cos\":0.999,\"kld\":0.01,\"mkld\":0.001,\"tie\":0.04}"},
        {"moe/a/cpu.decode+kv=f16+isa=avx512",
         "{\"isa\":\"avx512\",\"kv\":\"f16\",\"positions\":96,\"cos\":0.9991,\"kld\":0.009,\"mkld\":0.001,"
         "\"tie\":0.04}"},
        {"moe/a/cpu.prefill+isa=avx512",
         "{\"isa\":\"avx512\",\"positions\":70,\"cos\":0.999,\"kld\":0.009,\"mkld\":0.001,\"tie\":0.05}"},
        {"moe/a/cuda.decode+kv=f16",
         "{\"kv\":\"f16\",\"positions\":96,\"cos\":0.9991,\"kld\":0.01,\"mkld\":0.001,\"tie\":0.05}"},
        {"moe/a/cuda.prefill+prefill=f16",
         "{\"prefill\":\"f16\",\"positions\":70,\"cos\":0.999,\"kld\":0.01,\"mkld\":0.001,\"tie\":0.05}"},
        {"moe/a/cuda.prefill+kv=f16+prefill=bf16",
         "{\"kv\":\"f16\",\"prefill\":\"bf16\",\"positions\":96,\"cos\":0.9991,\"kld\":0.01,"
         "\"mkld\":0.0009,\"tie\":0.05}"},
        {"moe/a/cuda.prefill",
         "{\"positions\":70,\"cos\":0.999,\"kld\":0.01,\"mkld\":0.001,\"tie\":0.05}"},
    };
    cr_assert_eq(l->n_cells, (int)(sizeof want / sizeof want[0]));
    for (int i = 0; i < l->n_cells; i++) {
        char name[256], got[512] = "";
        cr_expect_str_eq(ladder_cell_name(l, i, name, sizeof name), want[i].name);
        json_t *s = ladder_gate_settings(&l->cells[i].g, "parity");
        static const char *const ids[] = {"isa", "kv", "prefill"};
        for (int k = 0; k < 3; k++)
            if (json_object_get(s, ids[k]))
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s\"%s\":\"%s\"",
                         got[0] ? "," : "{", ids[k], json_string_value(json_object_get(s, ids[k])));
        snprintf(got + strlen(got), sizeof got - strlen(got),
                 "%s\"positions\":%lld,\"cos\":%g,\"kld\":%g,\"mkld\":%g,\"tie\":%g}",
                 got[0] ? "," : "{", (long long)json_integer_value(json_object_get(s, "positions")),
                 json_real_value(json_object_get(s, "min_cosine")),
                 json_real_value(json_object_get(s, "max_kld")),
                 json_real_value(json_object_get(s, "max_mean_kld")),
                 json_real_value(json_object_get(s, "near_tie")));
        cr_expect_str_eq(got, want[i].settings, "%s:\n got %s\nwant %s", want[i].name, got,
                         want[i].settings);
        /* the payload's cell object names the same cell */
        const struct cell_key k = ladder_cell_key(l, i);
        json_t *p = json_pack("{s:o}", "cell", cell_key_json(&k));
        struct cell_key back;
        cr_expect_eq(cell_key_of_payload(p, &back, &err), 0, "%s", err.msg);
        cr_expect(cell_key_same(&back, &k), "%s", want[i].name);
        json_decref(p);
        json_decref(s);
    }
    ladder_free(l);
    l = NULL;
    /* every refusal, byte for byte, at its place */
    static const struct {
        const char *modes, *cells, *gates, *want;
    } bad[] = {
        {"cpu.decode", "  - {model: moe, host: a, mode: cpu.decode, kv: f17}\n", NULL,
         "l.yaml:8:49: a cells entry's kv must be f32 or f16 (the KV cache type), not 'f17'"},
        {"cpu.decode", "  - {model: moe, host: a, mode: cpu.decode, kv: [f16]}\n", NULL,
         "l.yaml:8:49: a cells entry's kv must be f32 or f16 (the KV cache type), not a"
         " list"},
        {"cpu.decode", "  - {model: moe, host: a, mode: cpu.decode, isa: sse9}\n", NULL,
         "l.yaml:8:50: a cells entry's isa must be portable, avx2 or avx512 (the instruction set"
         " the subject runs), not 'sse9'"},
        {"cpu.decode", "  - {model: moe, host: a, mode: cpu.decode, isa: {x: 1}}\n", NULL,
         "l.yaml:8:50: a cells entry's isa must be portable, avx2 or avx512 (the instruction set"
         " the subject runs), not a mapping"},
        {"cuda.prefill", "  - {model: moe, host: a, mode: cuda.prefill, prefill: F16}\n", NULL,
         "l.yaml:8:56: a cells entry's prefill must be f32, f16 or bf16 (the batched"
         " projections' precision), not 'F16'"},
        {"ref.decode", "  - {model: moe, host: a, mode: ref.decode, kv: f16}\n", NULL,
         "l.yaml:8:49: cell moe/a/ref.decode: kv: f16, but backend 'ref' offers no F16 KV cache"
         " (only cuda, cpu do); an F16 cell is refused, never run as F32"},
        {"ref.decode", "  - {model: moe, host: a, mode: ref.decode, isa: avx2}\n", NULL,
         "l.yaml:8:50: cell moe/a/ref.decode: isa: avx2, but backend 'ref' has no selectable"
         " instruction set; an isa cell is refused, never run on another instruction set"},
        {"cuda.decode", "  - {model: moe, host: a, mode: cuda.decode, isa: avx512}\n", NULL,
         "l.yaml:8:51: cell moe/a/cuda.decode: isa: avx512, but backend 'cuda' has no selectable"
         " instruction set; an isa cell is refused, never run on another instruction set"},
        {"cpu.prefill", "  - {model: moe, host: a, mode: cpu.prefill, prefill: f16}\n", NULL,
         "l.yaml:8:55: cell moe/a/cpu.prefill: prefill: f16, but backend 'cpu' runs its batched"
         " projections in F32 only (cuda offer f16); a 16-bit cell is refused, never run as F32"},
        {"ref.prefill", "  - {model: moe, host: a, mode: ref.prefill, prefill: bf16}\n", NULL,
         "l.yaml:8:55: cell moe/a/ref.prefill: prefill: bf16, but backend 'ref' runs its batched"
         " projections in F32 only (cuda offer bf16); a 16-bit cell is refused, never run as"
         " F32"},
        {"cpu.decode",
         "  - {model: moe, host: a, mode: cpu.decode}\n"
         "  - {model: moe, host: a, mode: cpu.decode, kv: f32}\n",
         NULL, "l.yaml:9:33: cell moe/a/cpu.decode is listed twice (first at line 8)"},
        {"cuda.prefill",
         "  - {model: moe, host: a, mode: cuda.prefill, kv: f16, prefill: bf16}\n"
         "  - {models: [moe], hosts: [a], modes: [cuda.prefill], prefill: bf16, kv: f16}\n",
         NULL,
         "l.yaml:9:41: cell moe/a/cuda.prefill+kv=f16+prefill=bf16 is listed twice (first at"
         " line 8)"},
        {"cuda.prefill",
         "  - {model: moe, host: a, mode: cuda.prefill}\n"
         "  - {model: moe, host: a, mode: cuda.prefill, prefill: f32}\n",
         NULL, "l.yaml:9:33: cell moe/a/cuda.prefill is listed twice (first at line 8)"},
        {"cpu.decode, cpu.prefill",
         "  - {model: moe, host: a, mode: cpu.decode, isa: avx2, kv: f16}\n"
         "  - models: [moe]\n    hosts: [a]\n    modes: [cpu.decode, cpu.prefill]\n"
         "    isa: avx2\n    kv: f16\n"
         "    exclude: [{mode: cpu.decode, reason: r}]\n",
         NULL,
         "l.yaml:14:15: cell moe/a/cpu.decode+kv=f16+isa=avx2 is both excluded and required (the"
         " other at line 8)"},
        {"cpu.decode", "  - {model: moe, host: a, mode: cpu.decode}\n",
         "gates:\n  overrides:\n    - match: {kv: F16}\n      parity: {min_cosine: 0.9995}\n",
         "l.yaml:11:19: an override's match kv must be f32 or f16 (the KV cache type), not 'F16'"},
        {"cpu.decode", "  - {model: moe, host: a, mode: cpu.decode}\n",
         "gates:\n  overrides:\n    - match: {isa: avx3}\n      parity: {min_cosine: 0.9995}\n",
         "l.yaml:11:20: an override's match isa must be portable, avx2 or avx512 (the instruction"
         " set the subject runs), not 'avx3'"},
        {"cpu.decode", "  - {model: moe, host: a, mode: cpu.decode}\n",
         "gates:\n  overrides:\n    - match: {prefill: [f16]}\n      parity: {min_cosine: 0.9995}\n",
         "l.yaml:11:24: an override's match prefill must be f32, f16 or bf16 (the batched"
         " projections' precision), not a list"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err_clear(&err);
        cr_expect_eq(load_cells(bad[i].modes, bad[i].cells, bad[i].gates, &l, &err), ERR_INPUT,
                     "case %zu was accepted", i);
        cr_expect_str_eq(at_ladder(&err), bad[i].want, "case %zu:\n got %s\nwant %s", i,
                         at_ladder(&err), bad[i].want);
        ladder_free(l);
        l = NULL;
    }
}
