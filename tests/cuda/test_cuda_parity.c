/* test_cuda_parity.c — on a GPU host, cuda.decode and cuda.prefill of the tiny dense and MoE
 * models judged against the reference twin by the parity oracle (64 positions). Skips visibly,
 * with the reason, without a device — and fails instead under GATE_REQUIRE_GPU=1 (support/skip.h).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "harness/gatedef.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include "oracles/selftest.h"
#include "tests/support/check.h"
#include "tests/support/skip.h"

static void judge(const char *preset, const char *mode_name)
{
    struct gate_err err = {0};
    char dev[160];
    if (selftest_device(dev, sizeof dev, &err))
        check_skip_no_device("%s", err.msg);
    uint8_t *buf = NULL;
    struct model *m = check_tiny_model(preset, &buf);
    struct mode mode;
    cr_assert_eq(mode_parse(mode_name, &mode, &err), 0);
    struct parity_config cfg;
    gatedef_parity_config(NULL, &cfg);
    cfg.positions = 64;
    struct parity_result pr;
    memset(&pr, 0, sizeof pr);
    cr_assert_eq(parity_run(m, &mode, NULL, NULL, 0, &cfg, 0, &pr, &err), 0, "%s", err.msg);
    cr_expect(pr.pass, "%s on %s: %s", mode_name, preset, pr.reason);
    parity_result_free(&pr);
    model_free(m);
    free(buf);
}

Test(cuda_parity, decode_of_tiny_moe_passes_parity)
{
    judge("tiny-moe", "cuda.decode");
}
Test(cuda_parity, prefill_of_tiny_moe_passes_parity)
{
    judge("tiny-moe", "cuda.prefill");
}
Test(cuda_parity, decode_of_tiny_dense_passes_parity)
{
    judge("tiny-dense", "cuda.decode");
}
Test(cuda_parity, prefill_of_tiny_dense_passes_parity)
{
    judge("tiny-dense", "cuda.prefill");
}
