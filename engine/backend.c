/* backend.c — the registry of backends compiled into this build. */
#include <string.h>

#include "backend.h"

const struct backend_ops *backend_find(const char *name)
{
    if (!strcmp(name, "ref"))
        return &backend_ref_ops;
    return NULL;
}

int backend_open(struct backend **out, const char *name, const struct model *m,
                 const struct backend_config *cfg, struct gate_err *err)
{
    *out = NULL;
    const struct backend_ops *ops = backend_find(name);
    if (!ops)
        return err_set(err, ERR_INPUT, "backend '%s' is not available in this build (known:"
                       " ref%s)", name, "");
    return ops->open(out, m, cfg, err);
}

void backend_close(struct backend *b)
{
    if (b)
        b->ops->close(b);
}
