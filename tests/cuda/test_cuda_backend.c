/* test_cuda_backend.c — the CUDA backend as the harness sees it: a clear refusal on a host
 * without a device (this test runs everywhere the CUDA backend is built: on a GPU host the device
 * is hidden from the test's process with CUDA_VISIBLE_DEVICES="", the CUDA runtime's own switch,
 * so the refusal is observed there too and nothing skips). The device paths are judged in
 * test_cuda_parity.c.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "oracles/selftest.h"
#include "tests/support/check.h"

Test(cuda_backend, is_registered_when_built)
{
    cr_assert_not_null(backend_find("cuda"));
}

Test(cuda_backend, refuses_clearly_without_a_device)
{
    /* before the process's first CUDA call: the runtime reads it once, at initialization */
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    struct gate_err err = {0};
    char dev[160];
    cr_assert_neq(selftest_device(dev, sizeof dev, &err), 0,
                  "CUDA_VISIBLE_DEVICES=\"\" did not hide the device %s", dev);
    uint8_t *buf = NULL;
    struct model *m = check_tiny_model("tiny-moe", &buf);
    struct backend *b = NULL;
    err_clear(&err);
    struct backend_config cfg = {.n_ctx = 128};
    int rc = backend_open(&b, "cuda", m, &cfg, &err);
    cr_assert_eq(rc, ERR_ENV, "rc %d: %s", rc, err.msg);
    cr_assert_null(b);
    cr_assert(strstr(err.msg, "no usable CUDA device") || strstr(err.msg, "driver"), "%s", err.msg);
    model_free(m);
    free(buf);
}
