/* test_ladder.c — the ladder parser: a valid ladder expands to the right cells with the right
 * settings; every malformed ladder is refused with file:line:column and what was expected. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "harness/ladder.h"
#include "tests/support/check.h"

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

static const struct bad_case BAD[] = {
    {"empty", "", "the ladder is empty"},
    {"not_yaml", "release: [unclosed\n", "YAML error"},
    {"unknown_top_key", HEAD "cells: [{model: m, host: local, mode: ref.decode}]\nskip: yes\n",
     ":9:1: unknown key 'skip' in the ladder (expected one of: release, models, hosts, modes,"
     " cells, gates)"},
    {"duplicate_key",
     HEAD "cells: [{model: m, host: local, mode: ref.decode}]\ncells: []\n",
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
    {"judge_mode",
     HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n",
     NULL /* valid: placeholder for the judge test below */},
    {"positions_below_64",
     HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
          "gates: {defaults: {parity: {positions: 32}}}\n",
     "parity.positions is 32; parity is judged at >= 64 positions"},
    {"wrong_type", HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
                        "gates: {defaults: {parity: {min_cosine: high}}}\n",
     "parity.min_cosine must be a number, found 'high'"},
    {"unknown_gate_key", HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
                              "gates: {defaults: {parity: {optional: true}}}\n",
     "unknown key 'optional' in parity"},
    {"routing_fault_on_dense", HEAD "cells: [{model: d, host: local, mode: ref.decode}]\n"
                                    "gates: {defaults: {falsify: [wrong_expert]}}\n",
     "fault wrong_expert cannot apply to model 'd' (arch qwen3 has no experts)"},
    {"unknown_fault", HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
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
    {"bad_sha", "release: {name: r, version: '1'}\nmodels:\n  m: {path: m.gguf, sha256: abc,"
                " arch: qwen3}\n",
     ":3:29: model 'm': sha256 must be 64 lower-case hex digits"},
    {"path_and_synth",
     "release: {name: r, version: '1'}\nmodels:\n  m: {path: a, synth: {preset: tiny-moe,"
     " quant: F32}, sha256: x, arch: qwen3}\n",
     "model 'm' needs exactly one of 'path' or 'synth'"},
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
    {"device_word", "release: {name: r, version: '1'}\nmodels:\n  m: {path: a, sha256: "
                    "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch:"
                    " qwen3}\nhosts:\n  h: {device: gpu, trust: []}\n",
     "device must be 'none' or a mapping"},
    {"override_undefined",
     HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
          "gates: {overrides: [{match: {model: zz}}]}\n",
     "override matches model 'zz', which is not defined"},
    {"runs_below_3", HEAD "cells: [{model: m, host: local, mode: ref.decode}]\n"
                          "gates: {defaults: {throughput: {runs: 1}}}\n",
     "throughput.runs must be in [3, 1000], found 1"},
    {"empty_cells", HEAD "cells: []\n", "cells must not be empty"},
    {"cells_mixed", HEAD "cells: [{model: m, hosts: [local], mode: ref.decode}]\n",
     "either a matrix (models, hosts, modes) or one cell"},
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
