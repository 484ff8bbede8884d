/* fuzz_gguf.c — libFuzzer target for the GGUF reader.
 *
 * Opens each input with gguf_open_mem(), once with full validation and once metadata-only, and
 * reads what a caller would trust after a successful open: every tensor's first and last byte,
 * every string's last byte, every scalar and array element. Any read outside the input is an
 * ASan report; an accepted file whose tensor escapes the input aborts. Build and run:
 * fuzz/README.md.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink;

static void touch(const struct gguf_file *f, const uint8_t *buf, size_t size, unsigned flags)
{
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        if (flags & GGUF_OPEN_METADATA_ONLY) {
            if (t->data)
                abort(); /* metadata-only opens must not hand out data */
            continue;
        }
        const uint8_t *d = t->data;
        if (!d || t->nbytes == 0 || d < buf || t->nbytes > size ||
            (size_t)(d - buf) > size - t->nbytes)
            abort(); /* an accepted tensor outside the input */
        sink ^= d[0];
        sink ^= d[t->nbytes - 1];
    }
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        if (kv->strs) {
            for (uint64_t j = 0; j < kv->n; j++)
                if (kv->strs[j].len)
                    sink ^= (uint8_t)kv->strs[j].ptr[kv->strs[j].len - 1];
            continue;
        }
        enum gguf_type t = kv->type == GGUF_TYPE_ARRAY ? kv->arr_type : kv->type;
        for (uint64_t j = 0; j < kv->n; j++) {
            if (t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64) {
                double v = gguf_kv_float(kv, j); /* bits only: a NaN must not be converted */
                uint64_t u;
                memcpy(&u, &v, 8);
                sink ^= (uint8_t)u;
            } else {
                sink ^= (uint8_t)gguf_kv_uint(kv, j);
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const unsigned flags[2] = {0, GGUF_OPEN_METADATA_ONLY};
    /* an exact-size copy: libFuzzer's buffer is exact too, but this keeps the contract explicit
     * (the reader borrows the memory until gguf_close) */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    for (int k = 0; k < 2; k++) {
        struct gguf_file *f = NULL;
        struct gate_err err = {0};
        int rc = gguf_open_mem(&f, buf, size, "fuzz", flags[k], &err);
        if (rc) {
            if (f || err.code != rc || err.msg[0] == '\0')
                abort(); /* a failure must be reported, once, with a message */
            continue;
        }
        touch(f, buf, size, flags[k]);
        gguf_close(f);
    }
    free(buf);
    return 0;
}
