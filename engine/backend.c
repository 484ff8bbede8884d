/* backend.c — the registry of backends compiled into this build. */
#include <string.h>

#include "backend.h"

#ifdef GATE_HAVE_CUDA
extern const struct backend_ops backend_cuda_ops; /* kernels/cuda_backend.cu */
#define CUDA_KNOWN ", cuda"
#else
#define CUDA_KNOWN ""
#endif

const struct backend_ops *backend_find(const char *name)
{
    if (!strcmp(name, "ref"))
        return &backend_ref_ops;
#ifdef GATE_HAVE_CUDA
    if (!strcmp(name, "cuda"))
        return &backend_cuda_ops;
#endif
    return NULL;
}

int backend_open(struct backend **out, const char *name, const struct model *m,
                 const struct backend_config *cfg, struct gate_err *err)
{
    *out = NULL;
    const struct backend_ops *ops = backend_find(name);
    if (!ops)
        return err_set(err, ERR_INPUT, "backend '%s' is not available in this build (known:"
                       " ref%s)", name, CUDA_KNOWN);
    return ops->open(out, m, cfg, err);
}

static backend_close_fn close_observer;
static void *close_observer_ctx;

void backend_set_close_observer(backend_close_fn fn, void *ctx)
{
    close_observer = fn;
    close_observer_ctx = ctx;
}

void backend_close(struct backend *b)
{
    if (!b)
        return;
    if (close_observer)
        close_observer(close_observer_ctx, b);
    b->ops->close(b);
}
