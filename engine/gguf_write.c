/* gguf_write.c — the GGUF v3 writer (see gguf.h). Metadata is serialized as it is added;
 * tensors are recorded and their bytes produced only while writing, one at a time, so peak
 * memory is the largest single tensor. Files appear atomically under their final name.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic.h"
#include "gguf.h"
#include "quant.h"

struct wtensor {
    char name[GGUF_MAX_NAME];
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    int type;
    uint64_t nbytes;
    uint64_t offset;
    const void *data;
};

struct buf {
    uint8_t *p;
    size_t len, cap;
};

struct gguf_writer {
    struct buf kv;
    uint64_t n_kv;
    struct wtensor *t;
    uint64_t n_t, cap_t;
    uint32_t alignment;
    gguf_fill_fn fill;
    void *fill_ctx;
    int failed; /* an add_* call ran out of memory or got a bad argument */
};

static int put(struct buf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q)
            return ERR_ENV;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

static int put_str(struct buf *b, const char *s, size_t n)
{
    uint64_t len = n;
    return put(b, &len, 8) || put(b, s, n) ? ERR_ENV : 0;
}

struct gguf_writer *gguf_writer_new(void)
{
    struct gguf_writer *w = calloc(1, sizeof *w);
    if (w)
        w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(struct gguf_writer *w)
{
    if (!w)
        return;
    free(w->kv.p);
    free(w->t);
    free(w);
}

static int add_head(struct gguf_writer *w, const char *key, int32_t type)
{
    if (put_str(&w->kv, key, strlen(key)) || put(&w->kv, &type, 4)) {
        w->failed = 1;
        return ERR_ENV;
    }
    w->n_kv++;
    return 0;
}

static int add_scalar(struct gguf_writer *w, const char *key, int32_t type, const void *v, size_t n)
{
    if (add_head(w, key, type) || put(&w->kv, v, n)) {
        w->failed = 1;
        return ERR_ENV;
    }
    return 0;
}

int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t a)
{
    if (a == 0 || (a & (a - 1)))
        return ERR_INPUT;
    w->alignment = a;
    return add_scalar(w, "general.alignment", GGUF_TYPE_UINT32, &a, 4);
}

int gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
    return add_scalar(w, key, GGUF_TYPE_UINT32, &v, 4);
}

int gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v)
{
    return add_scalar(w, key, GGUF_TYPE_INT32, &v, 4);
}

int gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v)
{
    return add_scalar(w, key, GGUF_TYPE_FLOAT32, &v, 4);
}

int gguf_writer_add_bool(struct gguf_writer *w, const char *key, int v)
{
    uint8_t b = v ? 1 : 0;
    return add_scalar(w, key, GGUF_TYPE_BOOL, &b, 1);
}

int gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *v)
{
    if (add_head(w, key, GGUF_TYPE_STRING) || put_str(&w->kv, v, strlen(v))) {
        w->failed = 1;
        return ERR_ENV;
    }
    return 0;
}

static int add_arr_head(struct gguf_writer *w, const char *key, int32_t elem, uint64_t n)
{
    if (add_head(w, key, GGUF_TYPE_ARRAY) || put(&w->kv, &elem, 4) || put(&w->kv, &n, 8)) {
        w->failed = 1;
        return ERR_ENV;
    }
    return 0;
}

int gguf_writer_add_arr_str(struct gguf_writer *w, const char *key, const char *const *v,
                            uint64_t n)
{
    if (add_arr_head(w, key, GGUF_TYPE_STRING, n))
        return ERR_ENV;
    for (uint64_t i = 0; i < n; i++)
        if (put_str(&w->kv, v[i], strlen(v[i]))) {
            w->failed = 1;
            return ERR_ENV;
        }
    return 0;
}

int gguf_writer_add_arr_i32(struct gguf_writer *w, const char *key, const int32_t *v, uint64_t n)
{
    if (add_arr_head(w, key, GGUF_TYPE_INT32, n) || put(&w->kv, v, n * 4)) {
        w->failed = 1;
        return ERR_ENV;
    }
    return 0;
}

int gguf_writer_add_arr_f32(struct gguf_writer *w, const char *key, const float *v, uint64_t n)
{
    if (add_arr_head(w, key, GGUF_TYPE_FLOAT32, n) || put(&w->kv, v, n * 4)) {
        w->failed = 1;
        return ERR_ENV;
    }
    return 0;
}

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, int type, uint32_t n_dims,
                           const int64_t *ne, const void *data)
{
    if (strlen(name) >= GGUF_MAX_NAME || n_dims == 0 || n_dims > GGUF_MAX_DIMS ||
        quant_block_size(type) == 0 || ne[0] % quant_block_size(type) != 0) {
        w->failed = 1;
        return ERR_INPUT;
    }
    if (w->n_t == w->cap_t) {
        uint64_t cap = w->cap_t ? 2 * w->cap_t : 64;
        struct wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) {
            w->failed = 1;
            return ERR_ENV;
        }
        w->t = t;
        w->cap_t = cap;
    }
    struct wtensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    strcpy(t->name, name);
    t->n_dims = n_dims;
    int64_t rows = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
        if (d > 0)
            rows *= t->ne[d];
    }
    t->type = type;
    t->nbytes = quant_row_bytes(type, t->ne[0]) * (uint64_t)rows;
    t->data = data;
    return 0;
}

void gguf_writer_set_fill(struct gguf_writer *w, gguf_fill_fn fill, void *ctx)
{
    w->fill = fill;
    w->fill_ctx = ctx;
}

static uint64_t align_up(uint64_t x, uint32_t a)
{
    return (x + a - 1) / a * a;
}

/* Serialize header + metadata + tensor infos + padding into b; assigns offsets. */
static int build_head(struct gguf_writer *w, struct buf *b)
{
    uint32_t version = 3;
    int64_t n_t = (int64_t)w->n_t, n_kv = (int64_t)w->n_kv;
    int rc = put(b, "GGUF", 4) || put(b, &version, 4) || put(b, &n_t, 8) || put(b, &n_kv, 8) ||
             put(b, w->kv.p ? w->kv.p : (const uint8_t *)"", w->kv.len);
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t && !rc; i++) {
        struct wtensor *t = &w->t[i];
        t->offset = off;
        off = align_up(off + t->nbytes, w->alignment);
        rc = put_str(b, t->name, strlen(t->name)) || put(b, &t->n_dims, 4) ||
             put(b, t->ne, 8 * t->n_dims) || put(b, &t->type, 4) || put(b, &t->offset, 8);
    }
    static const uint8_t zeros[256];
    while (!rc && b->len % w->alignment)
        rc = put(b, zeros,
                 w->alignment - b->len % w->alignment > sizeof zeros
                     ? sizeof zeros
                     : w->alignment - b->len % w->alignment);
    return rc ? ERR_ENV : 0;
}

/* A sink: either a file descriptor or a memory buffer. */
struct sink {
    int fd;
    struct buf *mem;
    const char *name;
};

static int sink_put(struct sink *s, const void *p, size_t n, struct gate_err *err)
{
    if (s->mem)
        return put(s->mem, p, n) ? err_set(err, ERR_ENV, "out of memory writing %s", s->name) : 0;
    const uint8_t *q = p;
    while (n > 0) {
        ssize_t k = write(s->fd, q, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return err_set(err, ERR_ENV, "cannot write '%s': %s", s->name, strerror(errno));
        }
        q += k;
        n -= (size_t)k;
    }
    return 0;
}

static int write_all(struct gguf_writer *w, struct sink *s, struct gate_err *err)
{
    int rc = 0;
    struct buf head = {0};
    uint8_t *tmp = NULL;
    static const uint8_t zeros[256];
    if (w->failed) {
        rc = err_set(err, ERR_INPUT,
                     "%s: the GGUF writer was given a bad tensor or ran out"
                     " of memory while building metadata",
                     s->name);
        goto out;
    }
    if ((rc = build_head(w, &head))) {
        rc = err_set(err, ERR_ENV, "out of memory building the header of %s", s->name);
        goto out;
    }
    if ((rc = sink_put(s, head.p, head.len, err)))
        goto out;
    for (uint64_t i = 0; i < w->n_t; i++) {
        struct wtensor *t = &w->t[i];
        const void *data = t->data;
        if (!data) {
            if (!w->fill) {
                rc = err_set(err, ERR_INPUT, "tensor '%s' has no data and no fill callback",
                             t->name);
                goto out;
            }
            free(tmp);
            tmp = malloc(t->nbytes ? t->nbytes : 1);
            if (!tmp) {
                rc = err_set(err, ERR_ENV, "out of memory for tensor '%s' (%llu bytes)", t->name,
                             (unsigned long long)t->nbytes);
                goto out;
            }
            if ((rc = w->fill(w->fill_ctx, (int)i, tmp, t->nbytes, err)))
                goto out;
            data = tmp;
        }
        if ((rc = sink_put(s, data, t->nbytes, err)))
            goto out;
        uint64_t pad = align_up(t->nbytes, w->alignment) - t->nbytes;
        if (i + 1 < w->n_t)
            while (pad > 0 && !rc) {
                size_t k = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
                rc = sink_put(s, zeros, k, err);
                pad -= k;
            }
        if (rc)
            goto out;
    }
out:
    free(tmp);
    free(head.p);
    return rc;
}

int gguf_writer_write_mem(struct gguf_writer *w, uint8_t **buf, size_t *size, struct gate_err *err)
{
    struct buf mem = {0};
    struct sink s = {.fd = -1, .mem = &mem, .name = "memory buffer"};
    int rc = write_all(w, &s, err);
    if (rc) {
        free(mem.p);
        return rc;
    }
    *buf = mem.p;
    *size = mem.len;
    return 0;
}

int gguf_writer_write_file(struct gguf_writer *w, const char *path, struct gate_err *err)
{
    /* base/atomic.h: a temp file next to path, removed on failure and on SIGINT/SIGTERM (a
     * real-shape synthesis takes minutes; Ctrl-C is the common way out), renamed into place */
    struct atomic_file a;
    int rc = atomic_open(&a, path, 0644, err);
    if (rc)
        return rc;
    struct sink s = {.fd = a.fd, .mem = NULL, .name = path};
    rc = write_all(w, &s, err);
    if (!rc)
        rc = atomic_commit(&a, err);
    atomic_abort(&a);
    return rc;
}
