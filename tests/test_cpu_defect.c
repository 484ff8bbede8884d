/* test_cpu_defect.c — parity's localization points at the right layer (issue 17). This binary
 * links a cpu engine with one planted defect (engine/cpu.c built with
 * GATE_TEST_CPU_DEFECT_LAYER=1: layer 1's FFN is dropped; CMakeLists.txt), never shipped in gate.
 * The parity gate must FAIL it on every conformance model and name layer 1 as the first layer
 * whose hidden state diverges from the judge's — not layer 0, not "somewhere".
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "engine/model.h"
#include "harness/gatedef.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include "tests/support/check.h"

static void localize_case(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/conformance/%s/model.gguf", check_shared_dir(), name);
    struct gate_err err = {0};
    struct model *m = NULL;
    cr_assert_eq(model_load(&m, path, &err), 0, "%s", err.msg);
    struct mode md;
    cr_assert_eq(mode_parse("cpu.decode", &md, &err), 0, "%s", err.msg);
    struct parity_config cfg;
    gatedef_parity_config(NULL, &cfg);
    cfg.positions = 64;
    struct parity_result r;
    cr_assert_eq(parity_run(m, &md, NULL, NULL, 0, &cfg, 2, &r, &err), 0, "%s", err.msg);
    cr_expect_eq(r.pass, 0, "%s: a dropped FFN must fail parity", name);
    cr_expect(r.localized, "%s: a failing run is localized", name);
    cr_expect_eq(r.first_bad_layer, 1, "%s: the first diverging layer is %d, not the planted 1",
                 name, r.first_bad_layer);
    if (r.localized && r.n_layer > 1)
        cr_expect(r.layers[0].hidden_cosine_min >= cfg.min_cosine,
                  "%s: layer 0 is clean (min hidden cosine %g)", name,
                  r.layers[0].hidden_cosine_min);
    parity_result_free(&r);
    model_free(m);
}

Test(cpu_defect, localization_names_the_layer_with_the_planted_defect)
{
    static const char *const cases[] = {"qwen3-dense-tiny-q4_k_m", "qwen3moe-tiny-q4_k_m",
                                        "qwen3-dense-tiny-f32", "qwen3moe-tiny-q8_0"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        localize_case(cases[i]);
}
