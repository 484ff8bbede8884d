/* test_cuda_backend.c — the CUDA backend as the harness sees it: a clear refusal on a host
 * without a device (this test runs everywhere the CUDA backend is built). The device paths are
 * judged in test_cuda_parity.c.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "harness/selftest.h"

static struct model *tiny(const char *preset, uint8_t **buf)
{
    struct synth_options o;
    memset(&o, 0, sizeof o);
    o.spec = *synth_preset_find(preset);
    o.quant = SYNTH_Q4_K_M;
    o.seed = 1;
    size_t size = 0;
    struct gate_err err = {0};
    struct gguf_file *f = NULL;
    struct model *m = NULL;
    cr_assert_eq(synth_write_mem(&o, buf, &size, &err), 0, "%s", err.msg);
    cr_assert_eq(gguf_open_mem(&f, *buf, size, preset, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(model_from_gguf(&m, f, &err), 0, "%s", err.msg);
    return m;
}

Test(cuda_backend, is_registered_when_built)
{
    cr_assert_not_null(backend_find("cuda"));
}

Test(cuda_backend, refuses_clearly_without_a_device)
{
    struct gate_err err = {0};
    char dev[160];
    if (!selftest_device(dev, sizeof dev, &err))
        cr_skip_test("a CUDA device is present (%s): the refusal cannot be observed", dev);
    uint8_t *buf = NULL;
    struct model *m = tiny("tiny-moe", &buf);
    struct backend *b = NULL;
    err_clear(&err);
    struct backend_config cfg = {.n_ctx = 128};
    int rc = backend_open(&b, "cuda", m, &cfg, &err);
    cr_assert_eq(rc, ERR_ENV, "rc %d: %s", rc, err.msg);
    cr_assert_null(b);
    cr_assert(strstr(err.msg, "no usable CUDA device") || strstr(err.msg, "driver"), "%s",
              err.msg);
    model_free(m);
    free(buf);
}

