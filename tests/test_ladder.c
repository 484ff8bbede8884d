/* test_ladder.c — the ladder parser: a valid ladder expands to the right cells with the right
 * settings; every malformed ladder is refused with file:line:column and what was expected. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/model.h"
#include "harness/identity.h"
#include "harness/ladder.h"
#include "oracles/mode.h"
#include "receipts/key.h"
#include "tests/support/check.h"
#include "tests/support/ladderfix.h"

static const char *data_ladder(const char *name)
{
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/tests/data/ladders/%s", GATE_SOURCE_DIR, name);
    return buf;
}

Test(ladder, expands_matrix_minus_exclusions_plus_explicit_cells)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_assert_eq(ladder_load(&l, data_ladder("ok.yaml"), &err), 0, "%s", err.msg);
    cr_expect_str_eq(l->name, "engine");
    cr_expect_str_eq(l->version, "0.3.0");
    cr_assert_eq(l->n_cells, 4, "2x1x2 matrix - 1 exclusion + 1 explicit = 4, got %d", l->n_cells);
    char name[256];
    cr_expect_str_eq(ladder_cell_name(l, 0, name, sizeof name), "tiny-moe/local/ref.decode");
    cr_expect_str_eq(ladder_cell_name(l, 2, name, sizeof name), "tiny-dense/local/ref.decode");
    cr_expect_str_eq(ladder_cell_name(l, 3, name, sizeof name), "tiny-moe/h200/cuda.decode");
    /* settings: defaults, then overrides in order */
    cr_expect_eq(l->cells[0].g.falsify.n, 4, "MoE cells falsify all four faults by default");
    cr_expect_eq(l->cells[2].g.falsify.n, 1, "the dense override keeps only skip_qk_norm");
    cr_expect_eq(l->cells[2].g.falsify.f[0].kind, FAULT_SKIP_QK_NORM);
    cr_expect_float_eq(l->cells[3].g.min_decode_tps, 900.0, 1e-9);
    cr_expect_float_eq(l->cells[0].g.min_decode_tps, 0.0, 1e-9);
    cr_expect_eq(l->cells[0].g.prompt_tokens, 32);
    cr_expect_eq(l->hosts[1].gpu, 1);
    cr_expect_str_eq(l->hosts[1].device_name, "NVIDIA H200");
    cr_expect_eq(l->hosts[0].n_trust, 1);
    cr_expect_eq(l->hosts[0].trust[0][0], 0x3b);
    cr_expect_eq(strlen(l->sha256), 64);
    /* the excluded cell stays in the ladder with its reason (issue 10 §3) */
    cr_assert_eq(l->n_excluded, 1);
    cr_expect_str_eq(ladder_excluded_name(l, 0, name, sizeof name), "tiny-dense/local/ref.chat");
    cr_expect_str_eq(l->excluded[0].reason, "dense chat covered by the MoE cell");
    cr_expect_eq(l->excluded[0].line, 23);
    cr_expect_eq(strlen(l->trust_sha256), 64);
    ladder_free(l);
}

/* The synth overrides (docs/ladder.md, "Models"): a model with its own epsilon or RoPE base is
 * its own file (never the preset's, never shared with another override), written with those
 * values in its metadata; models with the same spec and overrides share one file. */
Test(ladder, synth_overrides_name_their_own_file_and_reach_the_metadata, .timeout = 1200)
{
    unsetenv("GATE_MODEL_CACHE"); /* the cache next to the ladder, not a developer's */
    char dir[900], path[1000];
    snprintf(dir, sizeof dir, "%s/overrides", check_tmp_dir());
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/l.yaml", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("release: {name: r, version: '1'}\nmodels:\n"
          "  a: {synth: {preset: tiny-odd, quant: Q8_0, seed: 1}, sha256: "
          "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560"
          ", arch: qwen3}\n"
          "  b: {synth: {preset: tiny-odd, quant: Q8_0, seed: 1, eps: 0.05}, sha256: "
          "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560"
          ", arch: qwen3}\n"
          "  c: {synth: {preset: tiny-odd, quant: Q8_0, seed: 1, eps: 0.05}, sha256: "
          "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560"
          ", arch: qwen3}\n"
          "  d: {synth: {preset: tiny-odd, quant: Q8_0, seed: 1, eps: 0.05, rope_base: 50000},"
          " sha256: "
          "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560"
          ", arch: qwen3}\n"
          "hosts:\n  local: {device: none, trust: "
          "[ed25519:3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29]}\n"
          "modes: [ref.decode]\n"
          "cells: [{models: [a, b, c, d], hosts: [local], modes: [ref.decode]}]\n"
          "unanchored: {qwen3: test}\n",
          f);
    fclose(f);
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_assert_eq(ladder_load(&l, path, &err), 0, "%s", err.msg);
    cr_assert_eq(l->n_models, 4);
    const struct ladder_model *a = &l->models[0], *b = &l->models[1], *c = &l->models[2],
                              *d = &l->models[3];
    cr_expect(strstr(a->path, "/.gate-cache/a-tiny-odd-Q8_0-1.gguf"), "%s", a->path);
    cr_expect(strstr(b->path, "/.gate-cache/b-tiny-odd-Q8_0-1-eps0.05.gguf"), "%s", b->path);
    cr_expect_str_eq(c->path, b->path, "the same spec and overrides share one file");
    cr_expect(strstr(d->path, "/.gate-cache/d-tiny-odd-Q8_0-1-eps0.05-rope50000.gguf"), "%s",
              d->path);
    cr_expect(b->eps == 0.05f, "the f32 the file holds: %.9g", (double)b->eps);
    cr_expect(a->eps == 0.0f);
    cr_expect(d->rope_base == 50000.0f);
    int written = 0;
    cr_assert_eq(ladder_model_ensure(d, 1, NULL, NULL, &written, &err), 0, "%s", err.msg);
    cr_expect_eq(written, 1);
    /* the run's pin check judges the bytes (the pin here is another file's); read them back */
    struct model *m = NULL;
    cr_assert_eq(model_load(&m, d->path, &err), 0, "%s", err.msg);
    cr_expect_float_eq(m->hp.eps, 0.05f, 0.0f);
    cr_expect_float_eq(m->hp.rope_base, 50000.0f, 0.0f);
    char *args = NULL;
    cr_assert_eq(gguf_get_str(m->gguf, "gate.synth.args", &args, &err), 0, "%s", err.msg);
    cr_expect(strstr(args, "--rope-base 50000 --eps 0.0500000007"), "%s", args);
    free(args);
    /* what `gate model synth --preset tiny-odd --eps 0.05 --rope-base 50000` writes: preset
     * `custom` (the same bytes, so the same pin) */
    cr_assert_eq(gguf_get_str(m->gguf, "general.name", &args, &err), 0, "%s", err.msg);
    cr_expect_str_eq(args, "gate-synth-custom");
    free(args);
    model_free(m);
    ladder_free(l);
}

struct bad_case {
    const char *name;
    const char *yaml;
    const char *want; /* substring of the message, including line:column where it matters */
};

#define HEAD                                                                                       \
    "release: {name: r, version: '1'}\n"                                                           \
    "models:\n"                                                                                    \
    "  m: {path: m.gguf, sha256: "                                                                 \
    "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3moe}\n"          \
    "  d: {path: d.gguf, sha256: "                                                                 \
    "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3}\n"             \
    "hosts:\n"                                                                                     \
    "  local: {device: none, trust: "                                                              \
    "[ed25519:3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29]}\n"                \
    "modes: [ref.decode, ref.chat]\n"

/* HEAD with the cpu engine's decode mode: a backend whose noise is measured */
#define HEAD_CPU                                                                                   \
    "release: {name: r, version: '1'}\n"                                                           \
    "models:\n"                                                                                    \
    "  m: {path: m.gguf, sha256: "                                                                 \
    "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3moe}\n"          \
    "hosts:\n"                                                                                     \
    "  local: {device: none, trust: "                                                              \
    "[ed25519:3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29]}\n"                \
    "modes: [cpu.decode, ref.decode]\n"

static const struct bad_case BAD[] = {
    /* issue 22 §2: a threshold far above the backend's measured noise needs a stated reason */
    {"loose_cosine_on_cpu",
     HEAD_CPU "cells: [{model: m, host: local, mode: cpu.decode}]\n"
              "gates: {defaults: {parity: {min_cosine: 0.99}}}\n",
     "cell m/local/cpu.decode: parity.min_cosine 0.99 is looser than 1000 x the cpu backend's"
     " measured noise (5.2e-06: limit >= 0.9948); state why in parity.loose_reason"},
    {"loose_mean_rel_l2_on_cpu",
     HEAD_CPU "cells: [{model: m, host: local, mode: cpu.decode}]\n"
              "gates: {defaults: {parity: {max_mean_rel_l2: 0.01}}}\n",
     "parity.max_mean_rel_l2 0.01 is looser than 4 x the cpu backend's measured noise"},
    /* issue 24: an empty falsify list is a check-time error, never a signed FAIL */
    {"empty_falsify_list",
     HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
          "gates: {defaults: {falsify: []}}\n",
     ":9:29: falsify lists no fault: an empty list proves nothing"},
    {"empty_falsify_faults",
     HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
          "gates: {defaults: {falsify: {faults: [], sweep_samples: 2}}}\n",
     "falsify lists no fault"},
    {"empty_loose_reason",
     HEAD_CPU "cells: [{model: m, host: local, mode: cpu.decode}]\n"
              "gates: {defaults: {parity: {min_cosine: 0.99, loose_reason: ''}}}\n",
     "parity.loose_reason must be a text of 1 to 200 characters"},
    {"empty", "", "the ladder is empty"},
    {"not_yaml", "release: [unclosed\n", "YAML error"},
    {"unknown_top_key", HEAD "cells: [{model: m, host: local, mode: ref.decode}]\nskip: yes\n",
     ":9:1: unknown key 'skip' in the ladder (expected one of: release, models, hosts, modes,"
     " cells, gates, anchors, unanchored, engines)"},
    {"duplicate_key", HEAD "cells: [{model: m, host: local, mode: ref.decode}]\ncells: []\n",
     ":9:1: duplicate key 'cells' in the ladder (first at line 8)"},
    {"missing_release", "models: {}\n", "the ladder is missing required key 'release'"},
    {"missing_version", "release: {name: r}\n", "release is missing required key 'version'"},
    {"undefined_model", HEAD "cells: [{model: x, host: local, mode: ref.decode}]\n",
     ":8:17: model 'x' is not defined in models"},
    {"undefined_host", HEAD "cells: [{model: m, host: gpu9, mode: ref.decode}]\n",
     "host 'gpu9' is not defined in hosts"},
    {"mode_not_listed", HEAD "cells: [{model: m, host: local, mode: ref.prefill}]\n",
     "mode 'ref.prefill' is not defined in modes"},
    {"unknown_mode",
     "release: {name: r, version: '1'}\nmodels: {}\nhosts: {}\nmodes: [tpu.decode]\n",
     "models must not be empty"},
    {"judge_mode", HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n",
     NULL /* valid: placeholder for the judge test below */},
    {"positions_below_64",
     HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
          "gates: {defaults: {parity: {positions: 32}}}\n",
     "parity.positions must be in [64, 1048576], found 32"},
    {"wrong_type",
     HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
          "gates: {defaults: {parity: {min_cosine: high}}}\n",
     "parity.min_cosine must be a number, found 'high'"},
    {"unknown_gate_key",
     HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
          "gates: {defaults: {parity: {optional: true}}}\n",
     "unknown key 'optional' in parity"},
    {"routing_fault_on_dense",
     HEAD "cells: [{model: d, host: local, mode: ref.decode}]\n"
          "gates: {defaults: {falsify: [wrong_expert]}}\n",
     "cell d/local/ref.decode: model 'd' (arch qwen3): fault 'wrong_expert' cannot fire: it needs"
     " an MoE model and this model is dense (no router); override falsify for it"},
    /* issue 24: what the run's own checks refuse is refused at load, by those checks */
    {"router_tensor_on_dense",
     HEAD "cells: [{model: d, host: local, mode: ref.decode}]\n"
          "gates: {defaults: {falsify: ['scale:tensor=ffn_gate_inp,factor=1.5']}}\n",
     "model 'd' (arch qwen3): fault 'scale:tensor=ffn_gate_inp,factor=1.5': tensor ffn_gate_inp"
     " does not exist in this dense model"},
    {"fault_past_the_judged_positions",
     HEAD
     "cells: [{model: m, host: local, mode: ref.decode}]\n"
     "gates: {defaults: {parity: {positions: 64}, falsify: ['skip_qk_norm:positions=64-80']}}\n",
     "fault 'skip_qk_norm:positions=64-80': position scope starts at 64 but the cell judges 64"
     " positions (0-63): it can never fire"},
    {"chat_throughput_prompt_shorter_than_its_turns",
     HEAD "cells: [{model: m, host: local, mode: ref.chat}]\n"
          "gates: {defaults: {throughput: {prompt_tokens: 5}}}\n",
     "cell m/local/ref.chat: throughput: the chat path needs prompt_tokens >= 6 (six turns), got "
     "5"},
    {"max_runs_below_runs",
     HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
          "gates: {defaults: {throughput: {runs: 8, max_runs: 6}}}\n",
     "cell m/local/ref.decode: throughput: runs 8 (>= 1) and max_runs 6 (runs to 200)"},
    {"unknown_fault",
     HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
          "gates: {defaults: {falsify: [flip_bits]}}\n",
     "unknown fault 'flip_bits'"},
    {"exclusion_without_reason",
     HEAD "cells: [{models: [m], hosts: [local], modes: [ref.decode], exclude: [{model: m}]}]\n",
     "an exclusion must carry a non-empty 'reason'"},
    {"exclusion_matching_nothing",
     HEAD "cells: [{models: [m], hosts: [local], modes: [ref.decode],"
          " exclude: [{model: d, reason: x}]}]\n",
     "this exclusion matches no cell of its matrix"},
    {"cell_twice",
     HEAD "cells: [{model: m, host: local, mode: ref.decode}, {model: m, host: local,"
          " mode: ref.decode}]\n",
     "cell m/local/ref.decode is listed twice"},
    {"bad_sha",
     "release: {name: r, version: '1'}\nmodels:\n  m: {path: m.gguf, sha256: abc,"
     " arch: qwen3}\n",
     ":3:29: model 'm': sha256 must be 64 lower-case hex digits"},
    {"path_and_synth",
     "release: {name: r, version: '1'}\nmodels:\n  m: {path: a, synth: {preset: tiny-moe,"
     " quant: F32}, sha256: x, arch: qwen3}\n",
     "model 'm' needs exactly one of 'path' or 'synth'"},
    /* the synth overrides: numbers within their bounds, no other key */
    {"synth_eps_zero",
     "release: {name: r, version: '1'}\nmodels:\n  m: {synth: {preset: tiny-dense, quant: Q8_0,"
     " eps: 0}, sha256: x, arch: qwen3}\n",
     ":3:53: synth.eps must be in [1e-12, 0.5], found 0"},
    {"synth_eps_text",
     "release: {name: r, version: '1'}\nmodels:\n  m: {synth: {preset: tiny-dense, quant: Q8_0,"
     " eps: small}, sha256: x, arch: qwen3}\n",
     ":3:53: synth.eps must be a number"},
    {"synth_rope_base_huge",
     "release: {name: r, version: '1'}\nmodels:\n  m: {synth: {preset: tiny-dense, quant: Q8_0,"
     " rope_base: 1e12}, sha256: x, arch: qwen3}\n",
     "synth.rope_base must be in [1, 1e+09], found 1e+12"},
    {"synth_rope_base_one",
     "release: {name: r, version: '1'}\nmodels:\n  m: {synth: {preset: tiny-dense, quant: Q8_0,"
     " rope_base: 1}, sha256: x, arch: qwen3}\n",
     "synth.rope_base must be greater than 1, found 1"},
    {"synth_unknown_override",
     "release: {name: r, version: '1'}\nmodels:\n  m: {synth: {preset: tiny-dense, quant: Q8_0,"
     " kv_heads: 1}, sha256: x, arch: qwen3}\n",
     "unknown key 'kv_heads'"},
    {"bad_arch",
     "release: {name: r, version: '1'}\nmodels:\n  m: {path: a, sha256: "
     "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: llama}\n",
     "arch 'llama' is not supported"},
    {"bad_trust",
     "release: {name: r, version: '1'}\nmodels:\n  m: {path: a, sha256: "
     "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3}\n"
     "hosts:\n  h: {device: none, trust: [rsa:abc]}\n",
     "trusted key 'rsa:abc' must be 'ed25519:HEX' or 'file:NAME.pub'"},
    {"no_trust",
     "release: {name: r, version: '1'}\nmodels:\n  m: {path: a, sha256: "
     "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3}\n"
     "hosts:\n  h: {device: none, trust: []}\n",
     "trust must not be empty"},
    {"missing_trust_file",
     "release: {name: r, version: '1'}\nmodels:\n  m: {path: a, sha256: "
     "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3}\n"
     "hosts:\n  h: {device: none, trust: ['file:nope.pub']}\n",
     "cannot read trusted key file"},
    {"device_word",
     "release: {name: r, version: '1'}\nmodels:\n  m: {path: a, sha256: "
     "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch:"
     " qwen3}\nhosts:\n  h: {device: gpu, trust: []}\n",
     "device must be 'none' or a mapping"},
    {"override_undefined",
     HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
          "gates: {overrides: [{match: {model: zz}}]}\n",
     "override matches model 'zz', which is not defined"},
    {"runs_below_3",
     HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
          "gates: {defaults: {throughput: {runs: 1}}}\n",
     "throughput.runs must be in [3, 200], found 1"},
    {"empty_cells", HEAD "cells: []\n", "cells must not be empty"},
    {"cells_mixed", HEAD "cells: [{model: m, hosts: [local], mode: ref.decode}]\n",
     "either a matrix (models, hosts, modes) or one cell"},
    /* issue 10 §3: no cell vanishes */
    {"everything_excluded",
     HEAD "cells: [{models: [m], hosts: [local], modes: [ref.decode],"
          " exclude: [{model: m, reason: later}]}]\n",
     ":8:8: the ladder expands to no required cell (1 excluded)"},
    {"model_fully_excluded",
     HEAD "cells: [{models: [m, d], hosts: [local], modes: [ref.decode, ref.chat],"
          " exclude: [{model: d, reason: not yet}]}]\n",
     ":8: every cell of model 'd' is excluded"},
    {"excluded_and_required",
     HEAD "cells: [{models: [m, d], hosts: [local], modes: [ref.decode],"
          " exclude: [{model: d, reason: x}]}, {model: d, host: local, mode: ref.decode}]\n",
     "cell d/local/ref.decode is both excluded and required (the other at line 8)"},
    {"cell_twice_in_one_matrix",
     HEAD "cells: [{models: [m, m], hosts: [local], modes: [ref.decode]}]\n",
     "cell m/local/ref.decode is listed twice"},
    /* issue 11: bounds */
    {"alias",
     HEAD "cells: [{model: m, host: local, mode: &x ref.decode},"
          " {model: d, host: local, mode: *x}]\n",
     ":8:85: YAML aliases (*name) are not allowed"},
    {"two_documents", HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n---\n{}\n",
     ":9:1: a ladder is one YAML document"},
};

Test(ladder, refuses_every_malformed_ladder_with_its_position)
{
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        if (!BAD[i].want)
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.yaml", check_tmp_dir(), BAD[i].name);
        FILE *f = fopen(path, "w");
        cr_assert(f);
        fputs(BAD[i].yaml, f);
        fclose(f);
        struct gate_err err = {0};
        struct ladder *l = NULL;
        int rc = ladder_load(&l, path, &err);
        cr_expect_eq(rc, ERR_INPUT, "%s: expected ERR_INPUT, got %d (%s)", BAD[i].name, rc,
                     err.msg);
        cr_expect(strstr(err.msg, BAD[i].want), "%s: message \"%s\" lacks \"%s\"", BAD[i].name,
                  err.msg, BAD[i].want);
        cr_expect(rc == 0 || strstr(err.msg, path), "%s: message must name the file", BAD[i].name);
        ladder_free(l);
    }
}

Test(ladder, a_loose_threshold_loads_with_a_stated_reason_or_on_an_exact_backend)
{
    static const char *const ok[] = {
        /* the reason is recorded in the cell's parity settings */
        HEAD_CPU
        "cells: [{model: m, host: local, mode: cpu.decode}]\n"
        "gates: {defaults: {parity: {min_cosine: 0.99, loose_reason: 'a smoke ladder'}}}\n",
        /* the judge against itself: exact, nothing to be loose against */
        HEAD_CPU "cells: [{model: m, host: local, mode: ref.decode}]\n"
                 "gates: {defaults: {parity: {min_cosine: 0.99}}}\n",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/loose_ok_%zu.yaml", check_tmp_dir(), i);
        FILE *f = fopen(path, "w");
        cr_assert(f);
        fputs(ok[i], f);
        fclose(f);
        struct gate_err err = {0};
        struct ladder *l = NULL;
        cr_expect_eq(ladder_load(&l, path, &err), 0, "%zu: %s", i, err.msg);
        if (l && i == 0) {
            json_t *st = ladder_gate_settings(&l->cells[0].g, "parity");
            cr_expect_str_eq(json_string_value(json_object_get(st, "loose_reason")),
                             "a smoke ladder");
            json_decref(st);
        }
        ladder_free(l);
    }
}

Test(ladder, a_mode_identical_to_the_judge_is_an_error)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/judge.yaml", check_tmp_dir());
    FILE *f = fopen(path, "w");
    fputs("release: {name: r, version: '1'}\nmodels:\n  m: {path: a, sha256: "
          "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3}\n"
          "hosts:\n  h: {device: none, trust: "
          "[ed25519:3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29]}\n"
          "modes: [ref.batch]\n",
          f);
    fclose(f);
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_assert_eq(ladder_load(&l, path, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, ":6:9: mode 'ref.batch' is the judge itself"), "%s", err.msg);
}

Test(ladder, missing_file_is_an_input_error)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_assert_eq(ladder_load(&l, "/nonexistent/ladder.yaml", &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "cannot open '/nonexistent/ladder.yaml'"), "%s", err.msg);
}

/* ---- what a sloppy ladder must not do silently: loosen a gate, drop a cell, lose a setting - */

/* Write yaml as NAME in the test's tmp folder and load it; the status, the ladder in *l (NULL on
 * an error), the message in err. */
static int load_yaml(const char *name, const char *yaml, struct ladder **l, struct gate_err *err)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", check_tmp_dir(), name);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(yaml, f);
    fclose(f);
    *l = NULL;
    return ladder_load(l, path, err);
}

/* Expect yaml (as NAME) to be refused as an input error whose message holds want. */
static void expect_refused(const char *name, const char *yaml, const char *want)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    int rc = load_yaml(name, yaml, &l, &err);
    cr_expect_eq(rc, ERR_INPUT, "%s: accepted (rc %d), expected \"%s\"", name, rc, want);
    cr_expect(strstr(err.msg, want), "%s: message \"%s\" lacks \"%s\"", name, err.msg, want);
    ladder_free(l);
}

/* gates.defaults reaches every cell: a `match` there reads as a narrowing that would not happen,
 * so it is refused rather than applied to every cell */
Test(ladder, a_match_in_gates_defaults_is_refused_not_applied_to_every_cell)
{
    expect_refused("defaults-match.yaml",
                   HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
                        "gates: {defaults: {match: {model: d}, parity: {min_cosine: 0.9999}}}\n",
                   ":9:27: 'match' belongs in gates.overrides entries");
}

/* The consistency gate runs where the ladder names it: named in an override it runs on the cells
 * the override matches, and only there */
Test(ladder, consistency_named_in_an_override_runs_on_the_cells_it_matches)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_assert_eq(load_yaml("cons-override.yaml",
                           HEAD "cells: [{model: m, host: local, mode: ref.decode},"
                                " {model: d, host: local, mode: ref.decode}]\n"
                                "gates: {overrides: [{match: {model: m}, consistency: {}}]}\n",
                           &l, &err),
                 0, "%s", err.msg);
    cr_assert_eq(l->n_cells, 2);
    cr_expect_eq(l->cells[0].g.consistency, 1, "the override names consistency for model m");
    cr_expect_eq(l->cells[1].g.consistency, 0, "model d's cell is not matched");
    ladder_free(l);
}

/* An override whose match names a host the ladder does not declare, or a mode that is none (a
 * typo), would match no cell: the thresholds it sets would silently never apply, so it is refused
 * like an undeclared model */
Test(ladder, an_override_matching_an_undeclared_host_or_mode_is_refused)
{
    expect_refused("override-host.yaml",
                   HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
                        "gates: {overrides: [{match: {host: gpu9},"
                        " parity: {min_cosine: 0.9999}}]}\n",
                   "override matches host 'gpu9', which is not defined");
    expect_refused("override-mode.yaml",
                   HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
                        "gates: {overrides: [{match: {mode: ref.decod},"
                        " parity: {min_cosine: 0.9999}}]}\n",
                   "override matches mode 'ref.decod', which is not defined");
}

/* An override whose match is well formed but names no cell of the ladder (a mode the matrix does
 * not list, a kv no cell has) would change nothing without a word: refused like an exclusion that
 * matches nothing. One that matches only an excluded cell is kept (the exclusion may be lifted). */
Test(ladder, an_override_that_matches_no_cell_is_refused)
{
    expect_refused("override-none.yaml",
                   HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
                        "gates: {overrides: [{match: {mode: ref.chat},"
                        " parity: {min_cosine: 0.9999}}]}\n",
                   "this override matches no cell of the ladder");
    expect_refused("override-none-kv.yaml",
                   HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
                        "gates: {overrides: [{match: {model: m, kv: f16},"
                        " parity: {min_cosine: 0.9999}}]}\n",
                   "this override matches no cell of the ladder");
    struct ladder *l = NULL;
    struct gate_err err = {0};
    cr_expect_eq(load_yaml("override-excluded.yaml",
                           HEAD "cells: [{models: [m], hosts: [local], modes: [ref.decode,"
                                " ref.chat], exclude: [{mode: ref.chat, reason: not yet}]}]\n"
                                "gates: {overrides: [{match: {mode: ref.chat},"
                                " parity: {min_cosine: 0.9999}}]}\n",
                           &l, &err),
                 0, "an override of an excluded cell: %s", err.msg);
    ladder_free(l);
}

/* Pins are 64 lower-case hex digits, every character of them: the model's, the goldens' and a
 * baseline receipt's (a receipt hash), the engine binary's and its files' */
Test(ladder, a_pin_that_is_not_64_lower_case_hex_digits_is_refused)
{
    /* 63 good digits and a bad last one */
    static const char *const bad[] = {
        "000000000000000000000000000000000000000000000000000000000000000g",
        "000000000000000000000000000000000000000000000000000000000000000F",
    };
    char yaml[2048];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(yaml, sizeof yaml,
                 HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
                      "gates: {defaults: {golden: {goldens: g.json, sha256: %s}}}\n",
                 bad[i]);
        expect_refused("pin-golden.yaml", yaml,
                       "golden.sha256 must be 64 lower-case hex digits (a SHA-256)");
        snprintf(yaml, sizeof yaml,
                 HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
                      "gates: {defaults: {throughput: {baseline: %s}}}\n",
                 bad[i]);
        expect_refused("pin-baseline.yaml", yaml,
                       "throughput.baseline must be `previous` or a receipt hash of 64 lower-case"
                       " hex digits");
        snprintf(yaml, sizeof yaml,
                 "release: {name: r, version: '1'}\nmodels:\n  m: {path: m.gguf, sha256: %s,"
                 " arch: qwen3}\n",
                 bad[i]);
        expect_refused("pin-model.yaml", yaml,
                       "model 'm': sha256 must be 64 lower-case hex digits");
        snprintf(yaml, sizeof yaml,
                 HEAD "engines:\n  e: {argv: [/bin/true], supports: [decode], sha256: %s}\n"
                      "cells: [{model: m, host: local, mode: ref.decode}]\n",
                 bad[i]);
        expect_refused("pin-engine.yaml", yaml,
                       "engine 'e': sha256 must be 64 lower-case hex digits");
        snprintf(yaml, sizeof yaml,
                 HEAD "engines:\n  e: {argv: [/bin/true], supports: [decode],"
                      " files: [{path: w.bin, sha256: %s}]}\n"
                      "cells: [{model: m, host: local, mode: ref.decode}]\n",
                 bad[i]);
        expect_refused("pin-engine-file.yaml", yaml,
                       "engine 'e': a files entry's sha256 must be 64 lower-case hex digits");
    }
}

/* Two synth models of one spec are one cached file: two different pins for it cannot both hold,
 * and which one the run meets first would decide */
Test(ladder, one_synth_spec_pinned_to_two_digests_is_refused)
{
    expect_refused("synth-twins.yaml",
                   "release: {name: r, version: '1'}\nmodels:\n"
                   "  a: {synth: {preset: tiny-dense, quant: Q8_0, seed: 1}, sha256: "
                   "0000000000000000000000000000000000000000000000000000000000000000,"
                   " arch: qwen3}\n"
                   "  b: {synth: {preset: tiny-dense, quant: Q8_0, seed: 1}, sha256: "
                   "1111111111111111111111111111111111111111111111111111111111111111,"
                   " arch: qwen3}\n",
                   "model 'b': synthesized as model 'a' (same preset, quant, seed and overrides)"
                   " but pinned to another sha256");
}

/* HEAD with a second host, far */
#define HEAD_TWO_HOSTS                                                                             \
    "release: {name: r, version: '1'}\n"                                                           \
    "models:\n"                                                                                    \
    "  m: {path: m.gguf, sha256: "                                                                 \
    "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3moe}\n"          \
    "  d: {path: d.gguf, sha256: "                                                                 \
    "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3}\n"             \
    "hosts:\n"                                                                                     \
    "  local: {device: none, trust: "                                                              \
    "[ed25519:3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29]}\n"                \
    "  far: {device: none, trust: "                                                                \
    "[ed25519:3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29]}\n"                \
    "modes: [ref.decode, ref.chat]\n"

/* Excluding a cell drops it from the release: the reason is the record of why, never empty */
Test(ladder, an_exclusion_with_an_empty_reason_is_refused)
{
    expect_refused("exclude-empty.yaml",
                   HEAD "cells: [{models: [m, d], hosts: [local], modes: [ref.decode, ref.chat],"
                        " exclude: [{model: d, mode: ref.chat, reason: ''}]}]\n",
                   "an exclusion must carry a non-empty 'reason'");
}

/* An exclusion drops exactly the cells its model, host and mode all name: one field ignored would
 * drop required cells with it */
Test(ladder, an_exclusion_drops_only_the_cells_all_its_fields_name)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_assert_eq(load_yaml("exclude-one.yaml",
                           HEAD_TWO_HOSTS
                           "cells: [{models: [m, d], hosts: [local, far], modes: [ref.decode,"
                           " ref.chat], exclude: [{model: d, host: far, mode: ref.chat,"
                           " reason: one cell}]}]\n",
                           &l, &err),
                 0, "%s", err.msg);
    cr_expect_eq(l->n_cells, 7, "2 x 2 x 2 less one, got %d", l->n_cells);
    cr_assert_eq(l->n_excluded, 1);
    char name[256];
    cr_expect_str_eq(ladder_excluded_name(l, 0, name, sizeof name), "d/far/ref.chat");
    ladder_free(l);
}

/* What an exec cell's receipts vouch for: every gate's settings carry the engine as the ladder
 * declares it — its supports, the fault kinds it injects itself, its environment, its limits and
 * its isolation — so a receipt of the engine declared otherwise cannot stand for this cell */
Test(ladder, every_gates_settings_record_the_engine_as_the_ladder_declares_it)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_assert_eq(
        load_yaml("engine-settings.yaml",
                  "release: {name: r, version: '1'}\nmodels:\n"
                  "  m: {path: m.gguf, sha256: "
                  "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560,"
                  " arch: qwen3moe}\n"
                  "hosts:\n  local: {device: none, trust: "
                  "[ed25519:3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29]}\n"
                  "engines:\n  e: {argv: [/bin/true, -v], supports: [decode, faults],"
                  " faults: [scale], env: {OMP_NUM_THREADS: '2'}, timeout_s: 7,"
                  " cell_timeout_s: 60}\n"
                  "modes: [exec.e.decode]\n"
                  "cells: [{model: m, host: local, mode: exec.e.decode}]\n",
                  &l, &err),
        0, "%s", err.msg);
    json_t *s = ladder_gate_settings(&l->cells[0].g, "parity");
    const json_t *e = json_object_get(s, "engine");
    cr_assert(json_is_object(e), "no engine in the parity settings");
    cr_expect_str_eq(json_string_value(json_object_get(e, "name")), "e");
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(e, "argv"), 1)), "-v");
    const json_t *sup = json_object_get(e, "supports");
    cr_expect_eq(json_array_size(sup), 2);
    cr_expect_str_eq(json_string_value(json_array_get(sup, 0)), "decode");
    cr_expect_str_eq(json_string_value(json_array_get(sup, 1)), "faults");
    const json_t *fk = json_object_get(e, "faults");
    cr_expect_eq(json_array_size(fk), 1);
    cr_expect_str_eq(json_string_value(json_array_get(fk, 0)), "scale");
    cr_expect_str_eq(
        json_string_value(json_object_get(json_object_get(e, "env"), "OMP_NUM_THREADS")), "2");
    cr_expect_eq(json_real_value(json_object_get(e, "timeout_s")), 7);
    cr_expect_eq(json_real_value(json_object_get(e, "cell_timeout_s")), 60);
    cr_expect_str_eq(json_string_value(json_object_get(e, "isolation")), "landlock");
    json_decref(s);
    ladder_free(l);
}

/* ---- trust files (issue 11: files the ladder did not pin) ---------------------------------- */

#define KEY1 "ed25519:3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29"
#define KEY2 "ed25519:9d0f11aa6b2c3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f"

static char base[700];

/* A fresh folder base/ with base/l/ for the ladder and base/outside.pub (a valid key) next to
 * it, outside the ladder's folder. */
static void trust_setup(void)
{
    static int serial;
    char cmd[4000];
    snprintf(base, sizeof base, "%s/trust-%d", check_tmp_dir(), serial++);
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s' && mkdir -p '%s/l' && echo '" KEY2 "' > '%s/outside.pub'", base, base,
             base);
    cr_assert_eq(system(cmd), 0);
}

static void put_text(const char *rel, const char *text)
{
    char path[1000];
    snprintf(path, sizeof path, "%s/%s", base, rel);
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* Write base/l/ladder.yaml trusting `trust` for host local and load it. */
static int load_trusting(const char *trust, struct ladder **l, struct gate_err *err)
{
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "release: {name: r, version: '1'}\n"
             "models:\n  m: {path: m.gguf, sha256: "
             "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3moe}\n"
             "hosts:\n  local: {device: none, trust: ['%s']}\n"
             "modes: [ref.decode]\n"
             "cells: [{model: m, host: local, mode: ref.decode}]\n",
             trust);
    put_text("l/ladder.yaml", yaml);
    char path[1000];
    snprintf(path, sizeof path, "%s/l/ladder.yaml", base);
    *l = NULL;
    return ladder_load(l, path, err);
}

TestSuite(trust, .init = trust_setup, .timeout = 1200);

Test(trust, a_file_in_the_ladder_folder_loads)
{
    put_text("l/demo.pub", KEY1 "\n");
    struct gate_err err = {0};
    struct ladder *l;
    cr_assert_eq(load_trusting("file:demo.pub", &l, &err), 0, "%s", err.msg);
    cr_expect_eq(l->hosts[0].trust[0][0], 0x3b);
    ladder_free(l);
}

Test(trust, an_absolute_path_is_refused_and_not_read)
{
    put_text("abs.pub", "SECRET-CONTENT-OF-SOME-FILE\n");
    char t[1000];
    snprintf(t, sizeof t, "file:%s/abs.pub", base);
    struct gate_err err = {0};
    struct ladder *l;
    cr_expect_eq(load_trusting(t, &l, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "must be a path relative to the ladder's folder"), "%s", err.msg);
    cr_expect(!strstr(err.msg, "SECRET"), "the message quotes the file: %s", err.msg);
}

Test(trust, a_dotdot_escape_is_refused)
{
    struct gate_err err = {0};
    struct ladder *l;
    cr_expect_eq(load_trusting("file:../outside.pub", &l, &err), ERR_INPUT,
                 "a key outside the ladder's folder was trusted");
    cr_expect(strstr(err.msg, "must stay inside the ladder's folder"), "%s", err.msg);
    err_clear(&err);
    cr_expect_eq(load_trusting("file:sub/../../outside.pub", &l, &err), ERR_INPUT);
}

Test(trust, symlinks_leading_out_are_refused)
{
    char cmd[4000];
    snprintf(cmd, sizeof cmd, "ln -s ../outside.pub '%s/l/link.pub' && ln -s .. '%s/l/up'", base,
             base);
    cr_assert_eq(system(cmd), 0);
    struct gate_err err = {0};
    struct ladder *l;
    cr_expect_eq(load_trusting("file:link.pub", &l, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "symbolic link"), "%s", err.msg);
    err_clear(&err);
    cr_expect_eq(load_trusting("file:up/outside.pub", &l, &err), ERR_INPUT,
                 "a folder symlink led out of the ladder's folder");
    cr_expect(strstr(err.msg, "resolves outside the ladder's folder"), "%s", err.msg);
}

Test(trust, a_fifo_is_refused_without_hanging)
{
    char path[1000];
    snprintf(path, sizeof path, "%s/l/fifo.pub", base);
    cr_assert_eq(mkfifo(path, 0600), 0);
    struct gate_err err = {0};
    struct ladder *l;
    cr_expect_eq(load_trusting("file:fifo.pub", &l, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "not a regular file"), "%s", err.msg);
}

Test(trust, a_huge_file_is_refused)
{
    char path[1000];
    snprintf(path, sizeof path, "%s/l/big.pub", base);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(KEY1 "\n", f);
    for (int i = 0; i < (1 << 20) / 64; i++)
        fputs("# padding padding padding padding padding padding padding padding\n", f);
    fclose(f);
    struct gate_err err = {0};
    struct ladder *l;
    cr_expect_eq(load_trusting("file:big.pub", &l, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "more than the 4096"), "%s", err.msg);
}

Test(trust, a_bad_key_file_is_never_echoed)
{
    put_text("l/bad.pub", "ed25519:SECRET-PASSWORD-hunter2\n");
    struct gate_err err = {0};
    struct ladder *l;
    cr_expect_eq(load_trusting("file:bad.pub", &l, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "does not hold one public key"), "%s", err.msg);
    cr_expect(!strstr(err.msg, "SECRET") && !strstr(err.msg, "hunter2"),
              "the message quotes the file: %s", err.msg);
    err_clear(&err);
    put_text("l/two.pub", KEY1 "\n" KEY2 "\n"); /* one key per file */
    cr_expect_eq(load_trusting("file:two.pub", &l, &err), ERR_INPUT);
}

Test(trust, the_digest_binds_the_keys_not_the_file_name)
{
    struct gate_err err = {0};
    struct ladder *l;
    put_text("l/demo.pub", KEY1 "\n");
    cr_assert_eq(load_trusting("file:demo.pub", &l, &err), 0, "%s", err.msg);
    char d1[65], s1[65];
    strcpy(d1, l->trust_sha256);
    strcpy(s1, l->sha256);
    /* the documented definition: SHA-256 of the sorted "HOST ed25519:HEX\n" lines */
    unsigned char d[32];
    char hex[65];
    const char *line = "local " KEY1 "\n";
    crypto_hash_sha256(d, (const unsigned char *)line, strlen(line));
    sodium_bin2hex(hex, sizeof hex, d, 32);
    cr_expect_str_eq(d1, hex);
    ladder_free(l);
    /* swap the key behind the same file name: the ladder's bytes are the same, its trust not */
    put_text("l/demo.pub", KEY2 "\n");
    cr_assert_eq(load_trusting("file:demo.pub", &l, &err), 0, "%s", err.msg);
    cr_expect_str_eq(l->sha256, s1, "the ladder file did not change");
    cr_expect_str_neq(l->trust_sha256, d1, "a different trusted key must change trust_sha256");
    ladder_free(l);
    /* inline or from a file: the same key gives the same digest */
    cr_assert_eq(load_trusting(KEY1, &l, &err), 0, "%s", err.msg);
    cr_expect_str_eq(l->trust_sha256, d1);
    ladder_free(l);
}

/* The folder check compares whole path components: a folder symlink into a sibling whose name
 * starts with the ladder folder's (l -> l-x) leads out as much as one into any other */
Test(trust, a_symlink_into_a_sibling_folder_with_the_same_prefix_is_refused)
{
    char cmd[4000];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/l-x' && echo '" KEY2 "' > '%s/l-x/k.pub' && ln -s ../l-x '%s/l/side'",
             base, base, base);
    cr_assert_eq(system(cmd), 0);
    struct gate_err err = {0};
    struct ladder *l;
    cr_expect_eq(load_trusting("file:side/k.pub", &l, &err), ERR_INPUT,
                 "a folder symlink led into the sibling folder l-x");
    cr_expect(strstr(err.msg, "resolves outside the ladder's folder"), "%s", err.msg);
}

/* A key file holds one line and nothing else: bytes hidden after a NUL are not ignored */
Test(trust, a_key_file_with_bytes_after_a_nul_is_refused)
{
    char path[1000];
    snprintf(path, sizeof path, "%s/l/nul.pub", base);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    static const char text[] = KEY1 "\0" KEY2 "\n";
    cr_assert_eq(fwrite(text, 1, sizeof text - 1, f), sizeof text - 1);
    fclose(f);
    struct gate_err err = {0};
    struct ladder *l;
    cr_expect_eq(load_trusting("file:nul.pub", &l, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "does not hold one public key"), "%s", err.msg);
}

/* ---- bounds (issue 11: bounds instead of hangs) --------------------------------------------- */

static const char *write_tmp(const char *name, const char *text, size_t n)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", check_tmp_dir(), name);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    cr_assert_eq(fwrite(text, 1, n, f), n);
    fclose(f);
    return path;
}

Test(bounds, deep_nesting_fails_fast_with_its_position, .timeout = 1200)
{
    size_t depth = 100000, n = 0;
    char *y = malloc(2 * depth + 64);
    n += (size_t)sprintf(y, "release: ");
    memset(y + n, '[', depth);
    n += depth;
    memset(y + n, ']', depth);
    n += depth;
    y[n++] = '\n';
    const char *path = write_tmp("deep.yaml", y, n);
    free(y);
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_expect_eq(ladder_load(&l, path, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, ":1:41: YAML nested deeper than 32 levels"), "%s", err.msg);
}

/* A ladder with n_models models, n_hosts hosts, all nine modes, and `entries` matrix entries,
 * entry k covering models [64k, 64k+64) x every host x every mode. */
static char *big_ladder(int n_models, int n_hosts, int entries, int ids_per_entry, size_t *len)
{
    size_t cap = 64u << 20, n = 0;
    char *y = malloc(cap);
    n += (size_t)snprintf(y + n, cap - n, "release: {name: r, version: '1'}\nmodels:\n");
    for (int i = 0; i < n_models; i++)
        n += (size_t)snprintf(y + n, cap - n,
                              "  m%d: {path: m.gguf, sha256: 9bdb98987dd76a89e999"
                              "a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3moe}\n",
                              i);
    n += (size_t)snprintf(y + n, cap - n, "hosts:\n");
    for (int i = 0; i < n_hosts; i++)
        n += (size_t)snprintf(y + n, cap - n, "  h%d: {device: none, trust: [" KEY1 "]}\n", i);
    n += (size_t)snprintf(y + n, cap - n,
                          "modes: [cuda.decode, cuda.prefill, cuda.chat, cpu.decode, cpu.prefill,"
                          " cpu.chat, ref.decode, ref.prefill, ref.chat]\ncells:\n");
    for (int e = 0; e < entries; e++) {
        n += (size_t)snprintf(y + n, cap - n, "  - models: [");
        for (int i = 0; i < ids_per_entry; i++)
            n += (size_t)snprintf(y + n, cap - n, "%sm%d", i ? ", " : "",
                                  (e * ids_per_entry + i) % n_models);
        n += (size_t)snprintf(y + n, cap - n, "]\n    hosts: [");
        for (int i = 0; i < n_hosts; i++)
            n += (size_t)snprintf(y + n, cap - n, "%sh%d", i ? ", " : "", i);
        n += (size_t)snprintf(y + n, cap - n,
                              "]\n    modes: [cuda.decode, cuda.prefill, cuda.chat, cpu.decode,"
                              " cpu.prefill, cpu.chat, ref.decode, ref.prefill, ref.chat]\n");
    }
    *len = n;
    return y;
}

Test(bounds, a_huge_matrix_fails_fast_with_the_cell_bound, .timeout = 1200)
{
    /* 8 entries of 64 models x 64 hosts x 9 modes: 294,912 distinct cells; the old parser
     * expanded them with a quadratic duplicate check (hours) */
    size_t n;
    char *y = big_ladder(512, 64, 8, 64, &n);
    const char *path = write_tmp("huge.yaml", y, n);
    free(y);
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_expect_eq(ladder_load(&l, path, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "this entry (64 x 64 x 9 cells) takes the ladder to 36864 cells,"
                              " more than the 4096"),
              "%s", err.msg);
    ladder_free(l);
}

Test(bounds, a_thousand_models_by_every_mode_fails_fast, .timeout = 1200)
{
    size_t n;
    char *y = big_ladder(1000, 1, 1, 1000, &n);
    const char *path = write_tmp("wide.yaml", y, n);
    free(y);
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_expect_eq(ladder_load(&l, path, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "models has more than 64 entries"), "%s", err.msg);
}

Test(bounds, the_largest_ladder_within_the_bounds_loads, .timeout = 1200)
{
    /* 4096 cells exactly: 7 entries of 64 x 1 x 9 plus one of 8 x 1 x 8... simpler: 64 models x
     * 64 hosts x 1 mode */
    size_t n;
    char *y = big_ladder(64, 64, 1, 64, &n);
    /* keep one mode only: the cells' modes list is the last line */
    char *last = strstr(y, "]\n    modes: [cuda.decode, cuda.prefill");
    cr_assert(last);
    n = (size_t)(last - y) + (size_t)sprintf(last, "]\n    modes: [ref.decode]\n");
    const char *path = write_tmp("max.yaml", y, n);
    free(y);
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_assert_eq(ladder_load(&l, path, &err), 0, "%s", err.msg);
    cr_expect_eq(l->n_cells, 4096);
    ladder_free(l);
}

Test(bounds, a_duplicate_key_among_thousands_is_found_with_its_line, .timeout = 1200)
{
    size_t n;
    char *y = big_ladder(4000, 1, 1, 1, &n);
    /* rename model m3999 (line 4002) to m17 (line 20) */
    char *at = strstr(y, "  m3999:");
    cr_assert(at);
    memcpy(at, "  m17:  ", 8);
    const char *path = write_tmp("dupkey.yaml", y, n);
    free(y);
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_expect_eq(ladder_load(&l, path, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, ":4002:3: duplicate key 'm17' in models (first at line 20)"), "%s",
              err.msg);
}

Test(bounds, a_collection_over_the_entry_bound_is_refused, .timeout = 1200)
{
    size_t n;
    char *y = big_ladder(4100, 1, 1, 1, &n);
    const char *path = write_tmp("wide-models.yaml", y, n);
    free(y);
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_expect_eq(ladder_load(&l, path, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, ":4099:3: a mapping with more than 4096 entries"), "%s", err.msg);
}

Test(bounds, a_ladder_file_over_1_mib_or_not_regular_is_refused, .timeout = 1200)
{
    size_t n = (1 << 20) + 10;
    char *y = malloc(n);
    memset(y, '#', n);
    y[n - 1] = '\n';
    const char *path = write_tmp("big.yaml", y, n);
    free(y);
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_expect_eq(ladder_load(&l, path, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "more than the 1048576 allowed"), "%s", err.msg);
    err_clear(&err);
    char fifo[1024];
    snprintf(fifo, sizeof fifo, "%s/fifo.yaml", check_tmp_dir());
    unlink(fifo);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_expect_eq(ladder_load(&l, fifo, &err), ERR_INPUT, "a FIFO must not hang the loader");
    cr_expect(strstr(err.msg, "not a regular file"), "%s", err.msg);
}

/* ---- gate ladder check (issue 10 §3: exclusions listed with their reasons and counts) -------- */

/* "{goldens: NAME, sha256: ...}": goldens recorded for the model file MODEL (both in the test's
 * tmp folder) into NAME, pinned; every cell gate ladder check accepts declares its goldens. One
 * static buffer. */
static const char *goldens_of(const char *model, const char *name)
{
    static char line[200];
    char sha[65], mp[1000], gp[1000];
    snprintf(mp, sizeof mp, "%s/%s", check_tmp_dir(), model);
    snprintf(gp, sizeof gp, "%s/%s", check_tmp_dir(), name);
    ladderfix_record_goldens(mp, gp, 16, sha);
    snprintf(line, sizeof line, "{goldens: %s, sha256: %s}", name, sha);
    return line;
}

Test(ladder_check, lists_excluded_cells_with_reasons_and_counts)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    const char *yaml =
        "release: {name: r, version: '1'}\n"
        "models:\n  m: {path: m.gguf, sha256: "
        "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3moe}\n"
        "hosts:\n  local: {device: none, trust: [" KEY1 "]}\n"
        "modes: [ref.decode, ref.prefill, ref.chat]\n"
        "cells:\n  - models: [m]\n    hosts: [local]\n    modes: [ref.decode, ref.prefill, "
        "ref.chat]\n"
        "    exclude: [{mode: ref.prefill, reason: \"prefill kernel not ready\"}]\n"
        "unanchored: {qwen3moe: \"no independent reference in this test\"}\n"
        "gates: {defaults: {golden: %s}}\n";
    char cmd[3000], out[1200];
    /* a `path:` model must exist at check time (issue 16), and so must its goldens */
    snprintf(cmd, sizeof cmd, "cp '%s/conformance/qwen3moe-tiny-q4_k_m/model.gguf' '%s/m.gguf'",
             check_shared_dir(), check_tmp_dir());
    cr_assert_eq(system(cmd), 0);
    char text_[2000];
    snprintf(text_, sizeof text_, yaml, goldens_of("m.gguf", "check-g.json"));
    const char *path = write_tmp("check.yaml", text_, strlen(text_));
    snprintf(out, sizeof out, "%s/check.out", check_tmp_dir());
    snprintf(cmd, sizeof cmd, "'%s' ladder check '%s' >'%s' 2>&1", bin, path, out);
    cr_assert_eq(system(cmd), 0, "gate ladder check failed (see %s)", out);
    size_t n = 0;
    char *text = (char *)check_slurp(out, &n);
    cr_assert(text);
    text = realloc(text, n + 1);
    text[n] = '\0';
    cr_expect(strstr(text, "2 required, 1 excluded"), "%s", text);
    cr_expect(strstr(text, "m/local/ref.prefill"), "%s", text);
    cr_expect(strstr(text, "EXCLUDED (line 11): prefill kernel not ready"), "%s", text);
    cr_expect(strstr(text, "trusted keys sha256 "), "%s", text);
    free(text);
}

/* issue 16: the positions each cell is really judged at. Decode and prefill cells judge
 * parity.positions; a chat cell judges every position of a conversation drawn per run; the fixed
 * one's length (mode_chat_for_model) is printed when the model's file exists and is stated as
 * known at run time when it does not (a synth model not written yet). Counts take their plurals ("1
 * host"). */
Test(ladder_check, prints_the_positions_each_cell_is_judged_at)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    const char *yaml =
        "release: {name: r, version: '1'}\n"
        "models:\n  m: {path: m.gguf, sha256: "
        "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3moe}\n"
        "  s: {synth: {preset: tiny-dense, quant: Q4_K_M}, sha256: "
        "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3}\n"
        "hosts:\n  local: {device: none, trust: [" KEY1 "]}\n"
        "modes: [ref.decode, ref.chat]\n"
        "cells: [{models: [m, s], hosts: [local], modes: [ref.decode, ref.chat]}]\n"
        "gates: {defaults: {parity: {positions: 64}, golden: %s}}\n"
        "unanchored: {qwen3: \"t\", qwen3moe: \"t\"}\n";
    char cmd[3000], out[1200], model_path[1000];
    snprintf(model_path, sizeof model_path, "%s/m.gguf", check_tmp_dir());
    snprintf(cmd, sizeof cmd, "cp '%s/conformance/qwen3moe-tiny-q4_k_m/model.gguf' '%s'",
             check_shared_dir(), model_path);
    cr_assert_eq(system(cmd), 0);
    /* s pins m's digest too (its file is never read here): one goldens entry serves both */
    char text_[2000];
    snprintf(text_, sizeof text_, yaml, goldens_of("m.gguf", "positions-g.json"));
    const char *path = write_tmp("positions.yaml", text_, strlen(text_));
    /* the conversation's length for m, as the chat path's parity run computes it */
    struct model *m = NULL;
    struct gate_err err = {0};
    int32_t *ids = NULL;
    int *turn_ends = NULL, n = 0, n_turns = 0, fallback = 0;
    cr_assert_eq(model_load(&m, model_path, &err), 0, "%s", err.msg);
    cr_assert_eq(mode_chat_for_model(m, &ids, &n, &turn_ends, &n_turns, &fallback, &err), 0, "%s",
                 err.msg);
    free(ids);
    free(turn_ends);
    model_free(m);
    cr_assert(n != 64);
    snprintf(out, sizeof out, "%s/positions.out", check_tmp_dir());
    snprintf(cmd, sizeof cmd, "'%s' ladder check '%s' >'%s' 2>&1", bin, path, out);
    cr_assert_eq(system(cmd), 0, "gate ladder check failed (see %s)", out);
    char *text = check_slurp_text(out);
    char want[200];
    cr_expect(strstr(text, "2 models, 1 host: 4 required, 0 excluded"), "%s", text);
    cr_expect(strstr(text, "m/local/ref.decode                       parity 64 pos "), "%s", text);
    snprintf(want, sizeof want,
             "m/local/ref.chat                         parity every pos of a fresh chat (the "
             "fixed one: %d) ",
             n);
    cr_expect(strstr(text, want), "want '%s' in:\n%s", want, text);
    cr_expect(strstr(text, "s/local/ref.chat                         parity every pos of a "
                           "fresh chat (its length known at run time) "),
              "%s", text);
    cr_expect(!strstr(text, "ref.chat                         parity 64 pos"), "%s", text);
    free(text);
}

/* ---- ladders that cannot run fail at check time (issue 16) ---------------------------------- */

#define MOE_SHA "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560"
#define FILES_TAIL                                                                                 \
    "hosts:\n  local: {device: none, trust: [" KEY1 "]}\n"                                         \
    "modes: [ref.decode]\n"                                                                        \
    "cells: [{models: [m], hosts: [local], modes: [ref.decode]}]\n"                                \
    "unanchored: {qwen3: \"test\", qwen3moe: \"test\"}\n"

/* Load text as files.yaml in a fresh folder (with a copy of the conformance MoE model as
 * moe.gguf) and run ladder_check_files(); returns its status, the message in err. */
static int check_files(const char *text, struct gate_err *err)
{
    static int serial;
    char dir[600], cmd[4000], path[700];
    snprintf(dir, sizeof dir, "%s/files-%d", check_tmp_dir(), serial++);
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s' && mkdir -p '%s' && cp '%s/conformance/qwen3moe-tiny-"
             "q4_k_m/model.gguf' '%s/moe.gguf'",
             dir, dir, check_shared_dir(), dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(path, sizeof path, "%s/files.yaml", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
    struct ladder *l = NULL;
    int rc = ladder_load(&l, path, err);
    if (!rc)
        rc = ladder_check_files(l, err);
    ladder_free(l);
    return rc;
}

Test(ladder_files, a_runnable_ladder_passes)
{
    struct gate_err err = {0};
    cr_expect_eq(check_files("release: {name: r, version: '1'}\nmodels:\n"
                             "  m: {path: moe.gguf, sha256: " MOE_SHA ", arch: qwen3moe}\n"
                             "  s: {synth: {preset: tiny-dense, quant: Q4_K_M}, sha256: " MOE_SHA
                             ", arch: qwen3}\n" FILES_TAIL,
                             &err),
                 0, "%s", err.msg);
}

Test(ladder_files, an_unknown_synth_preset_or_quant_is_refused_with_its_line)
{
    struct gate_err err = {0};
    cr_expect_eq(check_files("release: {name: r, version: '1'}\nmodels:\n"
                             "  m: {synth: {preset: tiny-moo, quant: Q4_K_M}, sha256: " MOE_SHA
                             ", arch: qwen3moe}\n" FILES_TAIL,
                             &err),
                 ERR_INPUT);
    cr_expect(strstr(err.msg, "files.yaml:3:3: model 'm': unknown synth preset 'tiny-moo'"), "%s",
              err.msg);
    err_clear(&err);
    cr_expect_eq(check_files("release: {name: r, version: '1'}\nmodels:\n"
                             "  m: {synth: {preset: tiny-moe, quant: Q3_K}, sha256: " MOE_SHA
                             ", arch: qwen3moe}\n" FILES_TAIL,
                             &err),
                 ERR_INPUT);
    cr_expect(strstr(err.msg, "files.yaml:3:3: model 'm': unknown synth quant 'Q3_K'"), "%s",
              err.msg);
}

Test(ladder_files, a_missing_model_file_is_refused_with_its_line)
{
    struct gate_err err = {0};
    cr_expect_eq(check_files("release: {name: r, version: '1'}\nmodels:\n"
                             "  m: {path: nothere.gguf, sha256: " MOE_SHA
                             ", arch: qwen3moe}\n" FILES_TAIL,
                             &err),
                 ERR_INPUT);
    cr_expect(strstr(err.msg, "files.yaml:3:3: model 'm': path '") &&
                  strstr(err.msg, "nothere.gguf' cannot be read: No such file"),
              "%s", err.msg);
}

Test(ladder_files, an_arch_that_contradicts_the_file_is_refused)
{
    struct gate_err err = {0};
    cr_expect_eq(check_files("release: {name: r, version: '1'}\nmodels:\n"
                             "  m: {path: moe.gguf, sha256: " MOE_SHA ", arch: qwen3}\n"
                             "hosts:\n  local: {device: none, trust: [" KEY1 "]}\n"
                             "modes: [ref.decode]\n"
                             "cells: [{models: [m], hosts: [local], modes: [ref.decode]}]\n"
                             "gates: {defaults: {falsify: [skip_qk_norm]}}\n"
                             "unanchored: {qwen3: \"test\"}\n",
                             &err),
                 ERR_INPUT);
    cr_expect(strstr(err.msg, "files.yaml:3:3: model 'm': arch 'qwen3' contradicts the file") &&
                  strstr(err.msg, "general.architecture is 'qwen3moe'"),
              "%s", err.msg);
}

Test(ladder_files, a_moe_preset_declared_qwen3_is_an_arch_mismatch_not_a_fault_problem)
{
    struct gate_err err = {0};
    cr_expect_eq(check_files("release: {name: r, version: '1'}\nmodels:\n"
                             "  m: {synth: {preset: tiny-moe, quant: Q4_K_M}, sha256: " MOE_SHA
                             ", arch: qwen3}\n" FILES_TAIL,
                             &err),
                 ERR_INPUT);
    cr_expect(strstr(err.msg, "files.yaml:3:") &&
                  strstr(err.msg, "arch 'qwen3' contradicts synth preset 'tiny-moe', which is"
                                  " qwen3moe"),
              "%s", err.msg);
    cr_expect(!strstr(err.msg, "cannot fire"), "%s", err.msg);
}

/* The falsify gate's fault rules with the model's shape (issue 24): a layer scope or a rank the
 * model does not have made falsify_run refuse and `gate run` sign a FAIL; ladder check reads the
 * shape (the file's metadata, the synth preset) and refuses with the run's own check. */
Test(ladder_files, a_fault_scope_the_model_does_not_have_is_refused_with_its_shape)
{
    struct gate_err err = {0};
    cr_expect_eq(check_files("release: {name: r, version: '1'}\nmodels:\n"
                             "  m: {path: moe.gguf, sha256: " MOE_SHA
                             ", arch: qwen3moe}\n" FILES_TAIL
                             "gates:\n  defaults:\n    falsify: ['wrong_expert:layers=1-5']\n",
                             &err),
                 ERR_INPUT);
    cr_expect(strstr(err.msg, "files.yaml:7:47: cell m/local/ref.decode: model 'm' has 2 layers and"
                              " 2 experts per token: fault 'wrong_expert:layers=1-5': layer scope"
                              " 1-5 does not exist"),
              "%s", err.msg);
    err_clear(&err);
    cr_expect_eq(check_files("release: {name: r, version: '1'}\nmodels:\n"
                             "  m: {synth: {preset: tiny-moe, quant: Q4_K_M}, sha256: " MOE_SHA
                             ", arch: qwen3moe}\n" FILES_TAIL
                             "gates:\n  defaults:\n    falsify: ['dropped_expert:rank=2']\n",
                             &err),
                 ERR_INPUT);
    cr_expect(strstr(err.msg, "model 'm' has 4 layers and 2 experts per token: fault") &&
                  strstr(err.msg, "rank 2 does not exist (the model selects 2 experts, ranks 0-1)"),
              "%s", err.msg);
    err_clear(&err); /* within the shape: accepted */
    cr_expect_eq(
        check_files("release: {name: r, version: '1'}\nmodels:\n"
                    "  m: {path: moe.gguf, sha256: " MOE_SHA ", arch: qwen3moe}\n" FILES_TAIL
                    "gates:\n  defaults:\n    falsify: ['dropped_expert:rank=1,layers=1']\n",
                    &err),
        0, "%s", err.msg);
}

Test(ladder_files, a_missing_goldens_file_is_refused_with_its_position)
{
    struct gate_err err = {0};
    cr_expect_eq(check_files("release: {name: r, version: '1'}\nmodels:\n"
                             "  m: {path: moe.gguf, sha256: " MOE_SHA
                             ", arch: qwen3moe}\n" FILES_TAIL
                             "gates:\n  defaults:\n    golden: {goldens: gold.json,"
                             " sha256: " MOE_SHA "}\n",
                             &err),
                 ERR_INPUT);
    cr_expect(strstr(err.msg, "files.yaml:11:23: cell m/local/ref.decode: goldens file '") &&
                  strstr(err.msg, "gold.json' does not exist; record it with gate golden record"),
              "%s", err.msg);
}

/* ---- the golden gate's file rules, at check time (issue 24) ---------------------------------- */

/* Write text (a printf format whose one %s is the SHA-256 of goldens recorded for the conformance
 * MoE model at 16 tokens, g.json) as gold.yaml in a fresh folder holding moe.gguf and g.json, and
 * load it into *l (NULL on an error). Returns the status, the message in err. */
static int load_goldens(const char *text, struct ladder **l, struct gate_err *err)
{
    static int serial;
    char dir[600], cmd[4000], path[700], sha[65];
    snprintf(dir, sizeof dir, "%s/gold-%d", check_tmp_dir(), serial++);
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s' && mkdir -p '%s' && cp '%s/conformance/qwen3moe-tiny-"
             "q4_k_m/model.gguf' '%s/moe.gguf'",
             dir, dir, check_shared_dir(), dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(path, sizeof path, "%s/moe.gguf", dir);
    snprintf(cmd, sizeof cmd, "%s/g.json", dir);
    ladderfix_record_goldens(path, cmd, 16, sha);
    snprintf(path, sizeof path, "%s/gold.yaml", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f, text, sha);
    fclose(f);
    *l = NULL;
    return ladder_load(l, path, err);
}

/* load_goldens, then what `gate ladder check` runs after ladder_load: ladder_check_runnable,
 * ladder_check_files. Returns the status, the message in err. */
static int check_goldens(const char *text, struct gate_err *err)
{
    struct ladder *l = NULL;
    int rc = load_goldens(text, &l, err);
    if (!rc)
        rc = ladder_check_runnable(l, err);
    if (!rc)
        rc = ladder_check_files(l, err);
    ladder_free(l);
    return rc;
}

#define GOLD_HEAD                                                                                  \
    "release: {name: r, version: '1'}\nmodels:\n"                                                  \
    "  m: {path: moe.gguf, sha256: " MOE_SHA ", arch: qwen3moe}\n"                                 \
    "hosts:\n  local: {device: none, trust: [" KEY1 "]}\n"                                         \
    "modes: [ref.decode, ref.chat]\n"                                                              \
    "unanchored: {qwen3moe: \"test\"}\n"

/* GOLD_HEAD with two hosts, a and b */
#define GOLD_HEAD_AB                                                                               \
    "release: {name: r, version: '1'}\nmodels:\n"                                                  \
    "  m: {path: moe.gguf, sha256: " MOE_SHA ", arch: qwen3moe}\n"                                 \
    "hosts:\n  a: {device: none, trust: [" KEY1 "]}\n  b: {device: none, trust: [" KEY1 "]}\n"     \
    "modes: [ref.decode]\n"                                                                        \
    "unanchored: {qwen3moe: \"test\"}\n"

/* The golden gate runs on every cell: a cell that no defaults or override gives a goldens file
 * was accepted by ladder check and then signed a FAIL ("the ladder declares no goldens file");
 * now it is refused at the cell's position, and so is the run (below). */
Test(ladder_files, a_cell_without_a_goldens_file_is_refused_at_its_position)
{
    struct gate_err err = {0};
    cr_expect_eq(check_goldens(GOLD_HEAD "cells:\n"
                                         "  - {model: m, host: local, mode: ref.decode}\n"
                                         "  - {model: m, host: local, mode: ref.chat}\n"
                                         "gates:\n  overrides:\n    - match: {mode: ref.decode}\n"
                                         "      golden: {goldens: g.json, sha256: %s}\n",
                               &err),
                 ERR_INPUT);
    cr_expect(strstr(err.msg,
                     "gold.yaml:10:35: cell m/local/ref.chat: the golden gate runs on every"
                     " cell and this one has no goldens file"),
              "%s", err.msg);
    /* the same ladder with the goldens in the defaults: accepted */
    err_clear(&err);
    cr_expect_eq(check_goldens(GOLD_HEAD "cells:\n"
                                         "  - {model: m, host: local, mode: ref.decode}\n"
                                         "  - {model: m, host: local, mode: ref.chat}\n"
                                         "gates:\n  defaults:\n"
                                         "    golden: {goldens: g.json, sha256: %s}\n",
                               &err),
                 0, "%s", err.msg);
}

/* What the golden gate's loader refuses is refused at check time, by that loader: a goldens file
 * whose bytes are not its pin, and a token count other than the one recorded (the judge FAILed
 * "goldens hold 16 tokens per case, settings ask for 8" after running every case). */
Test(ladder_files, goldens_that_are_not_the_pin_or_hold_another_token_count_are_refused)
{
    struct gate_err err = {0};
    cr_expect_eq(check_goldens(GOLD_HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
                                         "gates:\n  defaults:\n"
                                         "    golden: {goldens: g.json, sha256: %s, tokens: 8}\n",
                               &err),
                 ERR_INPUT);
    cr_expect(strstr(err.msg, "gold.yaml:11:23: cell m/local/ref.decode: goldens '") &&
                  strstr(err.msg, "hold 16 tokens per case for this model but"
                                  " gates.golden.tokens is 8"),
              "%s", err.msg);
    err_clear(&err);
    cr_expect_eq(check_goldens(GOLD_HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
                                         "gates:\n  defaults:\n"
                                         "    golden: {goldens: g.json, sha256: " MOE_SHA "}\n"
                                         "# %s\n",
                               &err),
                 ERR_INPUT);
    cr_expect(strstr(err.msg, "gold.yaml:11:23: cell m/local/ref.decode: '") &&
                  strstr(err.msg, "g.json' does not match its pin: pinned sha256 " MOE_SHA),
              "%s", err.msg);
}

/* Goldens are evidence identified by their bytes: a goldens file without golden.sha256 is refused
 * by the check the run starts with, which names the digest to pin */
Test(ladder_files, goldens_without_a_pin_are_refused_naming_the_digest_to_pin)
{
    struct gate_err err = {0};
    cr_expect_eq(check_goldens(GOLD_HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
                                         "gates:\n  defaults:\n"
                                         "    golden: {goldens: g.json}\n"
                                         "# the goldens' digest is %s\n",
                               &err),
                 ERR_INPUT);
    cr_expect(strstr(err.msg, "cell m/local/ref.decode: gates.golden.goldens '") &&
                  strstr(err.msg, "g.json' is not pinned"),
              "%s", err.msg);
    /* the digest to add is the file's (check_goldens wrote it in the comment) */
    char want[200];
    const char *sha = strstr(err.msg, "add golden.sha256: ");
    cr_assert(sha, "%s", err.msg);
    snprintf(want, sizeof want, "%.64s", sha + strlen("add golden.sha256: "));
    cr_expect_eq(strlen(want), 64, "%s", err.msg);
    cr_expect_eq(strspn(want, "0123456789abcdef"), 64, "%s", err.msg);
}

/* Every sequence a cell runs fits the model's context length, not only parity's: the throughput
 * run's prompt plus its decode, and the consistency gate's positions where the ladder names it
 * (tiny-dense's context_length is 4096) */
Test(ladder_files, a_throughput_or_consistency_sequence_past_the_context_length_is_refused)
{
#define CTX_HEAD                                                                                   \
    "release: {name: r, version: '1'}\nmodels:\n"                                                  \
    "  s: {synth: {preset: tiny-dense, quant: Q4_K_M}, sha256: " MOE_SHA ", arch: qwen3}\n"        \
    "hosts:\n  local: {device: none, trust: [" KEY1 "]}\n"                                         \
    "modes: [ref.decode]\n"                                                                        \
    "cells: [{model: s, host: local, mode: ref.decode}]\n"                                         \
    "unanchored: {qwen3: \"test\"}\n"
    struct gate_err err = {0};
    cr_expect_eq(check_files(CTX_HEAD "gates: {defaults: {throughput: {prompt_tokens: 4090,"
                                      " decode_tokens: 6}}}\n",
                             &err),
                 0, "4096 positions fit: %s", err.msg);
    err_clear(&err);
    cr_expect_eq(check_files(CTX_HEAD "gates: {defaults: {throughput: {prompt_tokens: 4090,"
                                      " decode_tokens: 7}}}\n",
                             &err),
                 ERR_INPUT);
    cr_expect(strstr(err.msg, "cell s/local/ref.decode: throughput (prompt_tokens + decode_tokens)"
                              " runs 4097 positions but model 's' has context length 4096"),
              "%s", err.msg);
    err_clear(&err);
    cr_expect_eq(
        check_files(CTX_HEAD "gates: {defaults: {consistency: {positions: 4097}}}\n", &err),
        ERR_INPUT);
    cr_expect(strstr(err.msg, "cell s/local/ref.decode: consistency (positions) runs 4097"
                              " positions but model 's' has context length 4096"),
              "%s", err.msg);
#undef CTX_HEAD
}

/* gate run --host checks the goldens of that host's cells before it starts: a cell of the host
 * whose goldens the judge cannot use is refused there; another host's cells are not its question */
Test(ladder_files, a_run_checks_the_goldens_of_its_own_hosts_cells)
{
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_assert_eq(load_goldens(GOLD_HEAD_AB "cells: [{model: m, host: a, mode: ref.decode},"
                                           " {model: m, host: b, mode: ref.decode}]\n"
                                           "gates:\n  defaults:\n"
                                           "    golden: {goldens: g.json, sha256: %s}\n"
                                           "  overrides:\n    - match: {host: b}\n"
                                           "      golden: {tokens: 8}\n",
                              &l, &err),
                 0, "%s", err.msg);
    cr_expect_eq(ladder_check_golden_entries(l, 0, &err), 0, "host a's goldens hold: %s", err.msg);
    err_clear(&err);
    cr_expect_eq(ladder_check_golden_entries(l, 1, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "cell m/b/ref.decode: goldens '") &&
                  strstr(err.msg, "hold 16 tokens per case for this model but"
                                  " gates.golden.tokens is 8"),
              "%s", err.msg);
    ladder_free(l);
}

/* The CLI: gate ladder check exits 2 on such a ladder; gate run exits 2 before any receipt
 * (the store is never created), also for a goldens file without this model's entry (which ladder
 * check refuses too: issue 24, the run's own loader decides it at check time). */
Test(ladder_files, ladder_check_and_run_refuse_before_any_receipt)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    char dir[600], cmd[4000], yaml[2000];
    snprintf(dir, sizeof dir, "%s/files-cli", check_tmp_dir());
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s' && mkdir -p '%s' && cp '%s/conformance/qwen3moe-tiny-"
             "q4_k_m/model.gguf' '%s/moe.gguf' && printf '{\"schema\": 2, \"models\": {}}' >"
             " '%s/gold.json'",
             dir, dir, check_shared_dir(), dir, dir);
    cr_assert_eq(system(cmd), 0);
    char gpath[900], gsha[65];
    snprintf(gpath, sizeof gpath, "%s/gold.json", dir);
    cr_assert_eq(identity_file_sha256(gpath, gsha, NULL), 0);
    /* 1. a missing model file (the goldens declared and pinned: the model is what is wrong) */
    snprintf(yaml, sizeof yaml,
             "release: {name: r, version: '1'}\nmodels:\n"
             "  m: {path: gone.gguf, sha256: " MOE_SHA ", arch: qwen3moe}\n" FILES_TAIL
             "gates:\n  defaults:\n    golden: {goldens: gold.json, sha256: %s}\n",
             gsha);
    FILE *f = fopen(strcat(strcpy(cmd, dir), "/l.yaml"), "w");
    cr_assert(f);
    fputs(yaml, f);
    fclose(f);
    char run[4000];
    snprintf(run, sizeof run, "cd '%s' && '%s' ladder check l.yaml >out 2>&1", dir, bin);
    int rc = system(run);
    cr_expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "ladder check exit %d", WEXITSTATUS(rc));
    snprintf(run, sizeof run, "cd '%s' && '%s' run l.yaml --host local --db r.db >out 2>&1", dir,
             bin);
    rc = system(run);
    cr_expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "run exit %d", WEXITSTATUS(rc));
    char *out = check_slurp_text(strcat(strcpy(cmd, dir), "/out"));
    cr_expect(out && strstr(out, "l.yaml:3:3: model 'm': path '"), "%s", out ? out : "");
    free(out);
    /* 2. a pinned goldens file without the model's entry: check and run refuse it */
    snprintf(yaml, sizeof yaml,
             "release: {name: r, version: '1'}\nmodels:\n"
             "  m: {path: moe.gguf, sha256: " MOE_SHA ", arch: qwen3moe}\n" FILES_TAIL
             "gates:\n  defaults:\n    golden: {goldens: gold.json, sha256: %s}\n",
             gsha);
    f = fopen(strcat(strcpy(cmd, dir), "/l.yaml"), "w");
    cr_assert(f);
    fputs(yaml, f);
    fclose(f);
    snprintf(run, sizeof run, "cd '%s' && '%s' ladder check l.yaml >out 2>&1", dir, bin);
    rc = system(run);
    cr_expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "ladder check exit %d", WEXITSTATUS(rc));
    out = check_slurp_text(strcat(strcpy(cmd, dir), "/out"));
    cr_expect(out && strstr(out, "l.yaml:11:23: cell m/local/ref.decode: no usable goldens for"
                                 " model 'm'"),
              "%s", out ? out : "");
    free(out);
    snprintf(run, sizeof run, "cd '%s' && '%s' run l.yaml --host local --db r.db >out 2>&1", dir,
             bin);
    rc = system(run);
    cr_expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "run exit %d", WEXITSTATUS(rc));
    out = check_slurp_text(strcat(strcpy(cmd, dir), "/out"));
    cr_expect(out && strstr(out, "no usable goldens for model 'm'") &&
                  strstr(out, "gate golden record"),
              "%s", out ? out : "");
    free(out);
    struct stat st;
    cr_expect_neq(stat(strcat(strcpy(cmd, dir), "/r.db"), &st), 0,
                  "no receipt store may be created by a refused run");
}

/* ladder check names what each cell will do beyond the thresholds: parity's span, the
 * consistency gate, falsify by proxy and a stated loose_reason (issue 22 §2 / §5) */
Test(ladder_check, prints_span_consistency_and_a_loose_reason)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    const char *yaml =
        "release: {name: r, version: '1'}\n"
        "models:\n  m: {path: m2.gguf, sha256: "
        "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3moe}\n"
        "hosts:\n  local: {device: none, trust: [" KEY1 "]}\n"
        "modes: [cpu.decode]\n"
        "cells: [{model: m, host: local, mode: cpu.decode}]\n"
        "gates:\n  defaults:\n"
        "    parity: {positions: 64, span: 500, min_cosine: 0.99, loose_reason: 'a smoke run'}\n"
        "    consistency: {positions: 32}\n"
        "    golden: %s\n"
        "unanchored: {qwen3moe: \"t\"}\n";
    char cmd[3000], out[1200];
    snprintf(cmd, sizeof cmd, "cp '%s/conformance/qwen3moe-tiny-q4_k_m/model.gguf' '%s/m2.gguf'",
             check_shared_dir(), check_tmp_dir());
    cr_assert_eq(system(cmd), 0);
    char text_[2000];
    snprintf(text_, sizeof text_, yaml, goldens_of("m2.gguf", "span-g.json"));
    const char *path = write_tmp("span.yaml", text_, strlen(text_));
    snprintf(out, sizeof out, "%s/span.out", check_tmp_dir());
    snprintf(cmd, sizeof cmd, "'%s' ladder check '%s' >'%s' 2>&1", bin, path, out);
    const int rc = system(cmd);
    char *text = check_slurp_text(out);
    cr_assert_eq(rc, 0, "%s", text ? text : "");
    cr_expect(strstr(text, "m/local/cpu.decode                       parity 64 pos of 500 "), "%s",
              text);
    cr_expect(strstr(text, "| consistency"), "%s", text);
    cr_expect(strstr(text, "parity looser than the noise allows: a smoke run"), "%s", text);
    /* one model, Qwen3's values: the warning that the cpu engine could hard-code them */
    cr_expect(strstr(text, "warning: every model the cpu engine is judged on has RMSNorm epsilon"
                           " 1e-06 and RoPE base 1e+06"),
              "%s", text);
    free(text);
}

/* What coverage warning fn (ladder_hparams_uniform, ladder_span_short) says of a ladder with
 * these models, cells and gates section: the count it returns, its sentences in why. */
static int ladder_warning_of(int (*fn)(const struct ladder *, char *, size_t), const char *models,
                             const char *cells, const char *gates, char *why, size_t n)
{
    char text[4000], name[64];
    static int k;
    snprintf(text, sizeof text,
             "release: {name: r, version: '1'}\nmodels:\n%s"
             "hosts:\n  local: {device: none, trust: "
             "[ed25519:3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29]}\n"
             "  g: {device: {name: H200}, trust: "
             "[ed25519:3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29]}\n"
             "modes: [ref.decode, cpu.decode, cuda.decode]\ncells: %s\n%s"
             "unanchored: {qwen3: t, qwen3moe: t}\n",
             models, cells, gates);
    snprintf(name, sizeof name, "hparams%d.yaml", k++);
    const char *path = write_tmp(name, text, strlen(text));
    struct gate_err err = {0};
    struct ladder *l = NULL;
    cr_assert_eq(ladder_load(&l, path, &err), 0, "%s", err.msg);
    why[0] = '\0';
    const int r = fn(l, why, n);
    ladder_free(l);
    return r;
}

static int hparams_uniform_of(const char *models, const char *cells, char *why, size_t n)
{
    return ladder_warning_of(ladder_hparams_uniform, models, cells, "", why, n);
}

#define HP_SHA "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560"
#define HP_MODEL(id, spec, arch)                                                                   \
    "  " id ": {synth: {" spec "}, sha256: " HP_SHA ", arch: " arch "}\n"

/* A ladder whose judged models all share Qwen3's epsilon or RoPE base cannot catch an engine that
 * hard-codes it: ladder_hparams_uniform says which (gate ladder check warns); the twin's own
 * cells do not count, a model off both values silences it. */
Test(ladder_check, a_ladder_whose_models_share_eps_or_rope_base_is_named)
{
    char why[600];
    const char *two = HP_MODEL("d", "preset: tiny-dense, quant: Q8_0", "qwen3")
        HP_MODEL("m", "preset: tiny-moe, quant: Q8_0", "qwen3moe");
    cr_expect_eq(hparams_uniform_of(two, "[{models: [d, m], hosts: [local], modes: [cpu.decode]}]",
                                    why, sizeof why),
                 1);
    cr_expect(strstr(why, "every model the cpu engine is judged on has RMSNorm epsilon 1e-06 and"
                          " RoPE base 1e+06: an engine that hard-codes them (or misapplies"
                          " epsilon) passes"),
              "%s", why);
    cr_expect(strstr(why, "sets eps and rope_base off them"), "%s", why);
    /* a model off epsilon only: the RoPE base is still the one value */
    char models[2000];
    snprintf(models, sizeof models, "%s%s", two,
             HP_MODEL("e", "preset: tiny-dense, quant: Q8_0, eps: 0.01", "qwen3"));
    cr_expect_eq(hparams_uniform_of(models,
                                    "[{models: [d, m, e], hosts: [local], modes: [cpu.decode]}]",
                                    why, sizeof why),
                 1);
    cr_expect(strstr(why, "has RoPE base 1e+06: an engine that hard-codes it passes"), "%s", why);
    cr_expect(!strstr(why, "misapplies epsilon"), "the epsilons differ here: %s", why);
    cr_expect(strstr(why, "sets rope_base off it"), "%s", why);
    /* off both, but judged only through the twin's own cell: the engines never see it */
    snprintf(models, sizeof models, "%s%s", two,
             HP_MODEL("o", "preset: tiny-dense, quant: Q8_0, eps: 0.01, rope_base: 5e4", "qwen3"));
    cr_expect_eq(hparams_uniform_of(models,
                                    "[{models: [d, m], hosts: [local], modes: [cpu.decode]},"
                                    " {model: o, host: local, mode: ref.decode}]",
                                    why, sizeof why),
                 1, "a model only the twin runs does not count");
    /* in an engine's cell: silent */
    cr_expect_eq(hparams_uniform_of(models,
                                    "[{models: [d, m, o], hosts: [local], modes: [cpu.decode]}]",
                                    why, sizeof why),
                 0, "%s", why);
    /* per engine: the cpu engine sees the offbeat model, cuda does not */
    cr_expect_eq(hparams_uniform_of(models,
                                    "[{models: [d, m, o], hosts: [local], modes: [cpu.decode]},"
                                    " {models: [d, m], hosts: [g], modes: [cuda.decode]}]",
                                    why, sizeof why),
                 1, "%s", why);
    cr_expect(strstr(why, "every model the cuda engine is judged on has RMSNorm epsilon 1e-06"),
              "%s", why);
    cr_expect(!strstr(why, "cpu engine"), "%s", why);
    /* a `path:` model's values come from its file's metadata (the conformance model: 1e-6, 1e6) */
    char conf[1200];
    snprintf(conf, sizeof conf,
             "  c: {path: %s/conformance/qwen3moe-tiny-q4_k_m/model.gguf, sha256: " HP_SHA
             ", arch: qwen3moe}\n",
             check_shared_dir());
    snprintf(models, sizeof models, "%s%s", conf,
             HP_MODEL("o", "preset: tiny-dense, quant: Q8_0, eps: 0.01, rope_base: 5e4", "qwen3"));
    cr_expect_eq(hparams_uniform_of(models,
                                    "[{models: [c, o], hosts: [local], modes: [cpu.decode]}]", why,
                                    sizeof why),
                 0, "read from the file, the conformance model differs from o: %s", why);
    snprintf(models, sizeof models, "%s%s", conf,
             HP_MODEL("d", "preset: tiny-dense, quant: Q8_0", "qwen3"));
    cr_expect_eq(hparams_uniform_of(models,
                                    "[{models: [c, d], hosts: [local], modes: [cpu.decode]}]", why,
                                    sizeof why),
                 1, "read from the file, the conformance model has the preset's values");
    /* no engine cell at all: nothing to say */
    cr_expect_eq(hparams_uniform_of(two, "[{models: [d, m], hosts: [local], modes: [ref.decode]}]",
                                    why, sizeof why),
                 0, "%s", why);
}

/* No cell of an engine judging past position 2048 while its models' context is longer: a bug
 * past an engine's default context passes every gate (ladder_span_short names the engine). */
Test(ladder_check, an_engine_never_judged_past_2048_is_named)
{
    char why[1200];
    const char *d = HP_MODEL("d", "preset: tiny-dense, quant: Q8_0", "qwen3");
    const char *cpu_cell = "[{models: [d], hosts: [local], modes: [cpu.decode]}]";
    cr_expect_eq(ladder_warning_of(ladder_span_short, d, cpu_cell,
                                   "gates: {defaults: {parity: {span: 1200}}}\n", why, sizeof why),
                 1);
    cr_expect(strstr(why, "no cell judges the cpu engine's cpu.decode past position 1199 (its"
                          " models' context: up to 4096)"),
              "%s", why);
    /* one cell over the whole context: silent */
    cr_expect_eq(ladder_warning_of(ladder_span_short, d, cpu_cell,
                                   "gates: {defaults: {parity: {span: 4096}}}\n", why, sizeof why),
                 0, "%s", why);
    /* just past 2048 is enough */
    cr_expect_eq(ladder_warning_of(ladder_span_short, d, cpu_cell,
                                   "gates: {defaults: {parity: {span: 2049}}}\n", why, sizeof why),
                 0, "%s", why);
    cr_expect_eq(ladder_warning_of(ladder_span_short, d, cpu_cell,
                                   "gates: {defaults: {parity: {span: 2048}}}\n", why, sizeof why),
                 1, "positions 0..2047 never reach past 2048");
    /* per engine: cpu reaches 4096, cuda judges the default 96 positions */
    cr_expect_eq(
        ladder_warning_of(ladder_span_short, d,
                          "[{models: [d], hosts: [local], modes: [cpu.decode]},"
                          " {models: [d], hosts: [g], modes: [cuda.decode]}]",
                          "gates: {defaults: {parity: {span: 4096}},"
                          " overrides: [{match: {mode: cuda.decode}, parity: {span: 96}}]}\n",
                          why, sizeof why),
        1, "%s", why);
    cr_expect(strstr(why, "the cuda engine's cuda.decode past position 95"), "%s", why);
    cr_expect(!strstr(why, "cpu engine"), "%s", why);
    /* the judge's own cells never count */
    cr_expect_eq(ladder_warning_of(ladder_span_short, d,
                                   "[{models: [d], hosts: [local], modes: [ref.decode]}]", "", why,
                                   sizeof why),
                 0, "%s", why);
}

/* Per path, not per engine: each mode and cell setting runs code of its own (an F16 cache's
 * conversion, an instruction set's kernels), so a whole-context span on the F32 decode judges
 * nothing of the F16 cache past 2048 (mutant kv-f16-load-2048 passed every gate of the demo while
 * one F32 cell spanned 4096). ladder_span_short names each short path; one long cell of a path
 * silences it. */
Test(ladder_check, a_path_never_judged_past_2048_is_named_though_another_path_is)
{
    char why[1200];
    const char *d = HP_MODEL("d", "preset: tiny-dense, quant: Q8_0", "qwen3");
    const char *cells = "[{models: [d], hosts: [local], modes: [cpu.decode]},"
                        " {model: d, host: local, mode: cpu.decode, kv: f16},"
                        " {model: d, host: local, mode: cpu.decode, isa: portable}]";
    cr_expect_eq(ladder_warning_of(ladder_span_short, d, cells,
                                   "gates: {defaults: {parity: {span: 1200}},"
                                   " overrides: [{match: {mode: cpu.decode}, parity: {span: 4096}},"
                                   " {match: {kv: f16}, parity: {span: 1200}},"
                                   " {match: {isa: portable}, parity: {span: 2000}}]}\n",
                                   why, sizeof why),
                 1, "%s", why);
    cr_expect(strstr(why, "no cell judges the cpu engine's cpu.decode+kv=f16 past position 1199"
                          " (its models' context: up to 4096); nor cpu.decode+isa=portable past"
                          " 1999 (up to 4096): a bug at a later position on such a path"),
              "%s", why);
    cr_expect(!strstr(why, "cpu.decode past"), "the F32 decode spans 4096: %s", why);
    /* every path over the whole context: silent */
    cr_expect_eq(ladder_warning_of(ladder_span_short, d, cells,
                                   "gates: {defaults: {parity: {span: 4096}}}\n", why, sizeof why),
                 0, "%s", why);
}

/* An engine judged only on models with small counts (a vocabulary whose ids fit in 16 bits; MoE
 * models of at most 64 experts or fewer than 8 a token) cannot be caught by a bug sized for them:
 * ladder_counts_small names the engine and what is small; a model with the real counts in one of
 * its cells silences it. */
Test(ladder_check, an_engine_judged_only_on_small_counts_is_named)
{
    char why[1600], models[2000];
    const char *d = HP_MODEL("d", "preset: tiny-dense, quant: Q8_0", "qwen3");
    const char *m = HP_MODEL("m", "preset: tiny-moe-wide, quant: Q8_0", "qwen3moe");
    const char *a = HP_MODEL("a", "preset: tiny-a3b, quant: Q4_K_M", "qwen3moe");
    const char *big = HP_MODEL("b", "preset: qwen3-0.6b, quant: Q8_0", "qwen3");
    cr_expect_eq(ladder_warning_of(ladder_counts_small, d,
                                   "[{models: [d], hosts: [local], modes: [cpu.decode]}]", "", why,
                                   sizeof why),
                 1);
    cr_expect(strstr(why, "every model the cpu engine is judged on has a vocabulary of at most 512"
                          " tokens (token ids that fit in 16 bits): a bug sized for these counts"),
              "%s", why);
    cr_expect(!strstr(why, "experts"), "no MoE model here: %s", why);
    /* both counts small */
    snprintf(models, sizeof models, "%s%s", d, m);
    cr_expect_eq(ladder_warning_of(ladder_counts_small, models,
                                   "[{models: [d, m], hosts: [local], modes: [cpu.decode]}]", "",
                                   why, sizeof why),
                 1);
    cr_expect(strstr(why, "a vocabulary of at most 2543 tokens (token ids that fit in 16 bits), and"
                          " MoE models of at most 16 experts, 4 a token"),
              "%s", why);
    /* the real vocabulary on a dense model: only the MoE counts are short */
    snprintf(models, sizeof models, "%s%s", big, m);
    cr_expect_eq(ladder_warning_of(ladder_counts_small, models,
                                   "[{models: [b, m], hosts: [local], modes: [cpu.decode]}]", "",
                                   why, sizeof why),
                 1);
    cr_expect(strstr(why, "has MoE models of at most 16 experts, 4 a token"), "%s", why);
    cr_expect(!strstr(why, "vocabulary"), "%s", why);
    /* tiny-a3b: the real vocabulary, 128 experts top-8: silent */
    snprintf(models, sizeof models, "%s%s%s", d, m, a);
    cr_expect_eq(ladder_warning_of(ladder_counts_small, models,
                                   "[{models: [d, m, a], hosts: [local], modes: [cpu.decode]}]", "",
                                   why, sizeof why),
                 0, "%s", why);
    /* per engine: cpu sees tiny-a3b, cuda does not; the twin's own cell never counts */
    cr_expect_eq(ladder_warning_of(ladder_counts_small, models,
                                   "[{models: [d, m, a], hosts: [local], modes: [cpu.decode]},"
                                   " {models: [d, m], hosts: [g], modes: [cuda.decode]},"
                                   " {models: [d], hosts: [local], modes: [ref.decode]}]",
                                   "", why, sizeof why),
                 1, "%s", why);
    cr_expect(strstr(why, "every model the cuda engine is judged on has a vocabulary of at most"
                          " 2543 tokens"),
              "%s", why);
    cr_expect(!strstr(why, "cpu engine") && !strstr(why, "ref engine"), "%s", why);
    /* a `path:` model's counts come from its file: the conformance MoE model's vocabulary (its
     * token_embd rows) and expert counts (README there: vocab 512, 8 experts, top-2) */
    char conf[1200];
    snprintf(conf, sizeof conf,
             "  c: {path: %s/conformance/qwen3moe-tiny-q4_k_m/model.gguf, sha256: " HP_SHA
             ", arch: qwen3moe}\n",
             check_shared_dir());
    cr_expect_eq(ladder_warning_of(ladder_counts_small, conf,
                                   "[{models: [c], hosts: [local], modes: [cpu.decode]}]", "", why,
                                   sizeof why),
                 1, "%s", why);
    cr_expect(strstr(why, "has a vocabulary of at most 512 tokens (token ids that fit in 16"
                          " bits), and MoE models of at most 8 experts, 2 a token"),
              "read from the file (vocab 512, 8 experts, top-2): %s", why);
}

/* ---- the committed ladders ------------------------------------------------------------------ */

/* Every ladder in ladders/ passes what `gate ladder check` and `gate run` check before anything
 * runs (ladder_load, ladder_check_runnable, ladder_check_files: goldens through the golden
 * gate's loader, anchors through the anchor gate's, fault scopes against the model's shape),
 * where the scripts run them: a copy of ladders/ next to the trust files the scripts generate,
 * with shared/ where their anchors look for it. A goldens file re-recorded without re-pinning
 * every ladder that names it (gpu.yaml and mutants-sample.yaml pinned a stale digest, and every
 * golden gate of theirs signed a FAIL) fails here. */
Test(ladder_check, every_committed_ladder_passes_the_check)
{
    char dir[700], cmd[4096];
    check_make_dir(dir, sizeof dir, "committed");
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/repo/ladders' && cp '%s'/ladders/*.yaml '%s'/ladders/*.json"
             " '%s/repo/ladders/' && ln -s '%s' '%s/shared' && ln -s '%s' '%s/repo/shared'",
             dir, GATE_SOURCE_DIR, GATE_SOURCE_DIR, dir, check_shared_dir(), dir,
             check_shared_dir(), dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    struct gate_err err = {0};
    struct key_pair k;
    char path[1000];
    snprintf(path, sizeof path, "%s/k.key", dir);
    cr_assert_eq(key_generate(path, "local", &k, &err), 0, "%s", err.msg);
    /* what the scripts write (ci/demo.sh, ci/gpu-check.sh, ci/nightly.sh) */
    static const char *const pubs[] = {"demo.pub", "gpu.pub", "nightly.pub"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/repo/ladders/%s", dir, pubs[i]);
        cr_assert_eq(key_write_public(path, &k, &err), 0, "%s", err.msg);
    }
    int n = 0;
    snprintf(cmd, sizeof cmd, "%s/ladders", GATE_SOURCE_DIR);
    DIR *d = opendir(cmd);
    cr_assert(d, "cannot list %s", cmd);
    for (struct dirent *e; (e = readdir(d));) {
        const size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || len < 6 || strcmp(e->d_name + len - 5, ".yaml"))
            continue;
        snprintf(path, sizeof path, "%s/repo/ladders/%s", dir, e->d_name);
        struct ladder *l = NULL;
        err_clear(&err);
        int rc = ladder_load(&l, path, &err);
        if (!rc)
            rc = ladder_check_runnable(l, &err);
        if (!rc)
            rc = ladder_check_files(l, &err);
        cr_expect_eq(rc, 0, "ladders/%s: %s", e->d_name, err.msg);
        ladder_free(l);
        n++;
    }
    closedir(d);
    cr_expect_geq(n, 3, "only %d ladders found", n);
}
