/* gguf.c — the GGUF reader (see gguf.h for the invariants it establishes).
 *
 * Every read goes through a bounds-checked cursor; every count is checked against the bytes
 * left before anything is allocated for it, so a hostile file can neither read out of bounds
 * nor make us allocate more than a small multiple of its own size.
 */

#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/pin.h"

#include "quant.h"

static const char *TYPE_NAMES[GGUF_TYPE_COUNT] = {
    "UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",   "FLOAT32",
    "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64",
};
static const size_t TYPE_SIZES[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_type_name(int type)
{
    return (type >= 0 && type < GGUF_TYPE_COUNT) ? TYPE_NAMES[type] : "unknown";
}

size_t gguf_type_size(int type)
{
    return (type >= 0 && type < GGUF_TYPE_COUNT) ? TYPE_SIZES[type] : 0;
}

struct cursor {
    const uint8_t *p;
    size_t size;
    size_t pos;
    const char *name;
    struct gate_err *err;
};

static int need(struct cursor *c, uint64_t n, const char *what)
{
    if (n > c->size - c->pos)
        return err_set(c->err, ERR_INPUT,
                       "%s: %s at byte %zu needs %" PRIu64 " bytes but the file ends at byte %zu",
                       c->name, what, c->pos, n, c->size);
    return 0;
}

static int rd(struct cursor *c, void *dst, size_t n, const char *what)
{
    int rc = need(c, n, what);
    if (rc)
        return rc;
    memcpy(dst, c->p + c->pos, n);
    c->pos += n;
    return 0;
}

static int rd_str(struct cursor *c, struct gguf_str *s, const char *what)
{
    size_t at = c->pos;
    int rc = rd(c, &s->len, 8, what);
    if (rc)
        return rc;
    if (s->len > c->size - c->pos)
        return err_set(c->err, ERR_INPUT,
                       "%s: %s at byte %zu has length %" PRIu64
                       ", past the end of the file (%zu bytes)",
                       c->name, what, at, s->len, c->size);
    s->ptr = (const char *)c->p + c->pos;
    c->pos += s->len;
    return 0;
}

static int cmp_kv_key(const void *a, const void *b)
{
    const struct gguf_kv *x = *(const struct gguf_kv *const *)a;
    const struct gguf_kv *y = *(const struct gguf_kv *const *)b;
    return strcmp(x->key, y->key);
}

static int cmp_tensor_name(const void *a, const void *b)
{
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
    const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static int cmp_tensor_offset(const void *a, const void *b)
{
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
    const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Keys come from the file and may be long; messages quote at most this many bytes of one. */
#define KEY_FMT "'%.100s'"

/* Read the value (type, then scalar or array) of the record whose key kv already holds. */
static int read_value(struct cursor *c, struct gguf_kv *kv)
{
    int rc = 0;
    int32_t t;
    if ((rc = rd(c, &t, 4, "value type")))
        return rc;
    if (t < 0 || t >= GGUF_TYPE_COUNT)
        return err_set(c->err, ERR_INPUT,
                       "%s: key " KEY_FMT " at byte %" PRIu64 " has unknown value type %" PRId32,
                       c->name, kv->key, kv->offset, t);
    kv->type = (enum gguf_type)t;
    kv->n = 1;
    enum gguf_type elem = kv->type;
    int is_arr = kv->type == GGUF_TYPE_ARRAY;
    if (is_arr) {
        int32_t et;
        if ((rc = rd(c, &et, 4, "array element type")))
            return rc;
        if (et < 0 || et >= GGUF_TYPE_COUNT)
            return err_set(c->err, ERR_INPUT,
                           "%s: array " KEY_FMT " at byte %" PRIu64
                           " has unknown element type %" PRId32,
                           c->name, kv->key, kv->offset, et);
        if (et == GGUF_TYPE_ARRAY)
            return err_set(c->err, ERR_INPUT,
                           "%s: array " KEY_FMT " at byte %" PRIu64
                           " nests arrays, which GGUF readers do not accept",
                           c->name, kv->key, kv->offset);
        kv->arr_type = (enum gguf_type)et;
        elem = kv->arr_type;
        if ((rc = rd(c, &kv->n, 8, "array count")))
            return rc;
    }
    kv->data = c->p + c->pos;
    if (elem == GGUF_TYPE_STRING) {
        /* every string needs at least its 8-byte length */
        if (is_arr && kv->n > (c->size - c->pos) / 8)
            return err_set(c->err, ERR_INPUT,
                           "%s: array " KEY_FMT " at byte %" PRIu64 " claims %" PRIu64
                           " strings, more than the %zu bytes left can hold",
                           c->name, kv->key, kv->offset, kv->n, c->size - c->pos);
        kv->strs = calloc(kv->n ? kv->n : 1, sizeof *kv->strs);
        if (!kv->strs)
            return err_set(c->err, ERR_ENV, "%s: out of memory reading key " KEY_FMT, c->name,
                           kv->key);
        char what[160];
        snprintf(what, sizeof what, "string value of key " KEY_FMT, kv->key);
        for (uint64_t i = 0; i < kv->n; i++)
            if ((rc = rd_str(c, &kv->strs[i], what)))
                return rc;
        return 0;
    }
    size_t es = TYPE_SIZES[elem];
    if (kv->n > (c->size - c->pos) / es) {
        if (is_arr)
            return err_set(c->err, ERR_INPUT,
                           "%s: array " KEY_FMT " at byte %" PRIu64 " claims %" PRIu64
                           " elements of %s (%zu bytes each) but only %zu"
                           " bytes are left",
                           c->name, kv->key, kv->offset, kv->n, TYPE_NAMES[elem], es,
                           c->size - c->pos);
        return err_set(c->err, ERR_INPUT,
                       "%s: %s value of key " KEY_FMT " at byte %zu needs %zu"
                       " bytes but the file ends at byte %zu",
                       c->name, TYPE_NAMES[elem], kv->key, c->pos, es, c->size);
    }
    if (elem == GGUF_TYPE_BOOL)
        for (uint64_t i = 0; i < kv->n; i++)
            if (kv->data[i] > 1)
                return err_set(c->err, ERR_INPUT,
                               "%s: key " KEY_FMT " has a BOOL byte %u at"
                               " byte %zu (must be 0 or 1)",
                               c->name, kv->key, kv->data[i], (size_t)(kv->data + i - c->p));
    c->pos += (size_t)(kv->n * es);
    return 0;
}

static int read_kvs(struct cursor *c, struct gguf_file *f)
{
    int rc = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        struct gguf_kv *kv = &f->kv[i];
        kv->offset = c->pos;
        struct gguf_str key = {0, NULL};
        if ((rc = rd_str(c, &key, "key")))
            return rc;
        if (key.len == 0)
            return err_set(c->err, ERR_INPUT,
                           "%s: key of record %" PRIu64 " at byte %" PRIu64 " is empty", c->name, i,
                           kv->offset);
        if (memchr(key.ptr, 0, key.len))
            return err_set(c->err, ERR_INPUT,
                           "%s: key of record %" PRIu64 " at byte %" PRIu64 " contains a NUL byte",
                           c->name, i, kv->offset);
        kv->key = strndup(key.ptr, key.len);
        if (!kv->key)
            return err_set(c->err, ERR_ENV, "%s: out of memory for a metadata key", c->name);
        if ((rc = read_value(c, kv)))
            return rc;
    }
    return 0;
}

static int check_duplicate_keys(struct cursor *c, struct gguf_file *f)
{
    if (f->n_kv < 2)
        return 0;
    int rc = 0;
    struct gguf_kv **v = malloc(f->n_kv * sizeof *v);
    if (!v)
        return err_set(c->err, ERR_ENV, "%s: out of memory for the metadata index", c->name);
    for (uint64_t i = 0; i < f->n_kv; i++)
        v[i] = &f->kv[i];
    qsort(v, f->n_kv, sizeof *v, cmp_kv_key);
    for (uint64_t i = 1; i < f->n_kv; i++)
        if (strcmp(v[i - 1]->key, v[i]->key) == 0) {
            const struct gguf_kv *later = v[i]->offset > v[i - 1]->offset ? v[i] : v[i - 1];
            rc = err_set(c->err, ERR_INPUT, "%s: duplicate key " KEY_FMT " at byte %" PRIu64,
                         c->name, later->key, later->offset);
            break;
        }
    free(v);
    return rc;
}

static int read_alignment(struct cursor *c, struct gguf_file *f)
{
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (!kv)
        return 0;
    if (kv->type != GGUF_TYPE_UINT32)
        return err_set(c->err, ERR_INPUT,
                       "%s: key 'general.alignment' has type %s, expected"
                       " UINT32",
                       c->name, gguf_type_name(kv->type));
    uint32_t a;
    memcpy(&a, kv->data, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return err_set(c->err, ERR_INPUT,
                       "%s: general.alignment = %" PRIu32 " is not a power of two", c->name, a);
    f->alignment = a;
    return 0;
}

static int read_tensor_info(struct cursor *c, struct gguf_file *f, struct gguf_tensor *t,
                            uint64_t i)
{
    int rc = 0;
    size_t at = c->pos;
    struct gguf_str name = {0, NULL};
    if ((rc = rd_str(c, &name, "tensor name")))
        return rc;
    if (name.len == 0)
        return err_set(c->err, ERR_INPUT, "%s: tensor %" PRIu64 " at byte %zu has an empty name",
                       c->name, i, at);
    if (name.len >= GGUF_MAX_NAME)
        return err_set(c->err, ERR_INPUT,
                       "%s: tensor %" PRIu64 " at byte %zu has a name of %" PRIu64
                       " bytes (limit %d)",
                       c->name, i, at, name.len, GGUF_MAX_NAME - 1);
    if (memchr(name.ptr, 0, name.len))
        return err_set(c->err, ERR_INPUT,
                       "%s: tensor %" PRIu64 " at byte %zu has a NUL byte in"
                       " its name",
                       c->name, i, at);
    memcpy(t->name, name.ptr, name.len);
    t->name[name.len] = '\0';
    if ((rc = rd(c, &t->n_dims, 4, "tensor n_dims")))
        return rc;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
        return err_set(c->err, ERR_INPUT,
                       "%s: tensor '%s' at byte %zu has %" PRIu32 " dimensions (must be 1..%d)",
                       c->name, t->name, at, t->n_dims, GGUF_MAX_DIMS);
    int64_t nel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if ((uint32_t)d >= t->n_dims)
            continue;
        if ((rc = rd(c, &t->ne[d], 8, "tensor dimension")))
            return rc;
        if (t->ne[d] <= 0)
            return err_set(c->err, ERR_INPUT,
                           "%s: tensor '%s' at byte %zu has ne[%d] = %" PRId64 " (must be > 0)",
                           c->name, t->name, at, d, t->ne[d]);
        if (nel > INT64_MAX / t->ne[d])
            return err_set(c->err, ERR_INPUT,
                           "%s: tensor '%s' at byte %zu has dims whose"
                           " element count overflows 64 bits",
                           c->name, t->name, at);
        nel *= t->ne[d];
    }
    int32_t type;
    if ((rc = rd(c, &type, 4, "tensor type")))
        return rc;
    t->type = type;
    int64_t bs = quant_block_size(type);
    if (bs == 0)
        return err_set(c->err, ERR_INPUT,
                       "%s: tensor '%s' at byte %zu has unknown type id %" PRId32, c->name, t->name,
                       at, type);
    if (t->ne[0] % bs != 0)
        return err_set(c->err, ERR_INPUT,
                       "%s: tensor '%s' at byte %zu has ne[0] = %" PRId64
                       ", not a multiple of the %s block size %" PRId64,
                       c->name, t->name, at, t->ne[0], quant_name(type), bs);
    uint64_t blocks = (uint64_t)(nel / bs);
    uint64_t ts = (uint64_t)quant_type_size(type);
    if (blocks > UINT64_MAX / ts)
        return err_set(c->err, ERR_INPUT, "%s: tensor '%s' byte size overflows 64 bits", c->name,
                       t->name);
    t->nbytes = blocks * ts;
    if ((rc = rd(c, &t->offset, 8, "tensor offset")))
        return rc;
    (void)f;
    return 0;
}

static int check_tensors(struct cursor *c, struct gguf_file *f, unsigned flags)
{
    int rc = 0;
    struct gguf_tensor **v = NULL;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment != 0)
            return err_set(c->err, ERR_INPUT,
                           "%s: tensor '%s' has offset %" PRIu64
                           ", not a multiple of the alignment %" PRIu32,
                           c->name, t->name, t->offset, f->alignment);
        if (flags & GGUF_OPEN_METADATA_ONLY)
            continue;
        uint64_t start = f->data_offset + t->offset;
        if (t->offset > UINT64_MAX - f->data_offset || t->nbytes > UINT64_MAX - start ||
            start + t->nbytes > c->size)
            return err_set(
                c->err, ERR_INPUT,
                "%s: tensor '%s' ends at byte %" PRIu64 " but the file has %zu bytes", c->name,
                t->name,
                (t->offset > UINT64_MAX - f->data_offset || t->nbytes > UINT64_MAX - start)
                    ? UINT64_MAX
                    : start + t->nbytes,
                c->size);
        t->data = c->p + start;
    }
    if (f->n_tensors < 2)
        return 0;
    v = malloc(f->n_tensors * sizeof *v);
    if (!v)
        return err_set(c->err, ERR_ENV, "%s: out of memory for the tensor index", c->name);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        v[i] = &f->tensors[i];
    qsort(v, f->n_tensors, sizeof *v, cmp_tensor_name);
    for (uint64_t i = 1; i < f->n_tensors; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0) {
            rc = err_set(c->err, ERR_INPUT, "%s: duplicate tensor name '%s'", c->name, v[i]->name);
            goto out;
        }
    qsort(v, f->n_tensors, sizeof *v, cmp_tensor_offset);
    for (uint64_t i = 1; i < f->n_tensors; i++)
        /* sorted, so the subtraction cannot wrap; the sum could (metadata-only opens) */
        if (v[i - 1]->nbytes > v[i]->offset - v[i - 1]->offset) {
            rc = err_set(c->err, ERR_INPUT,
                         "%s: tensors '%s' [%" PRIu64 ", %" PRIu64 ") and '%s' [%" PRIu64
                         ", %" PRIu64 ") overlap in the data blob",
                         c->name, v[i - 1]->name, v[i - 1]->offset,
                         v[i - 1]->offset + v[i - 1]->nbytes, v[i]->name, v[i]->offset,
                         v[i]->offset + v[i]->nbytes);
            goto out;
        }
out:
    free(v);
    return rc;
}

static int parse(struct gguf_file *f, unsigned flags, struct gate_err *err)
{
    struct cursor c = {.p = f->map, .size = f->size, .pos = 0, .name = f->path, .err = err};
    int rc = 0;
    uint8_t magic[4];
    /* Field by field, so a truncated header names the field it ends in. */
    if ((rc = rd(&c, magic, 4, "magic")))
        return rc;
    if (memcmp(magic, "GGUF", 4) != 0)
        return err_set(err, ERR_INPUT,
                       "%s: bad magic at byte 0 (expected 'GGUF', found bytes"
                       " %02x %02x %02x %02x)",
                       f->path, magic[0], magic[1], magic[2], magic[3]);
    if ((rc = rd(&c, &f->version, 4, "version")))
        return rc;
    if (f->version != 0 && (f->version & 0xffff) == 0)
        return err_set(err, ERR_INPUT,
                       "%s: version word 0x%08" PRIx32 " at byte 4 looks"
                       " byte-swapped (a big-endian file?)",
                       f->path, f->version);
    if (f->version < 2 || f->version > 3)
        return err_set(err, ERR_INPUT,
                       "%s: GGUF version %" PRIu32 " at byte 4 is not"
                       " supported (only 2 and 3)",
                       f->path, f->version);
    int64_t n_tensors, n_kv;
    if ((rc = rd(&c, &n_tensors, 8, "tensor count")) || (rc = rd(&c, &n_kv, 8, "metadata count")))
        return rc;
    if (n_tensors < 0)
        return err_set(err, ERR_INPUT, "%s: tensor count %" PRId64 " at byte 8 is negative",
                       f->path, n_tensors);
    if (n_kv < 0)
        return err_set(err, ERR_INPUT, "%s: metadata count %" PRId64 " at byte 16 is negative",
                       f->path, n_kv);
    /* smallest record: key len 8 + 1 byte key + type 4 + 1 byte value */
    if ((uint64_t)n_kv > (f->size - c.pos) / 14)
        return err_set(err, ERR_INPUT,
                       "%s: metadata count %" PRId64 " at byte 16 cannot fit"
                       " in a file of %zu bytes",
                       f->path, n_kv, f->size);
    /* smallest tensor info: name 8+1, n_dims 4, one dim 8, type 4, offset 8 */
    if ((uint64_t)n_tensors > (f->size - c.pos) / 33)
        return err_set(err, ERR_INPUT,
                       "%s: tensor count %" PRId64 " at byte 8 cannot fit"
                       " in a file of %zu bytes",
                       f->path, n_tensors, f->size);
    f->n_kv = (uint64_t)n_kv;
    f->n_tensors = (uint64_t)n_tensors;
    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors)
        return err_set(err, ERR_ENV, "%s: out of memory for the metadata and tensor tables",
                       f->path);
    if ((rc = read_kvs(&c, f)) || (rc = check_duplicate_keys(&c, f)) ||
        (rc = read_alignment(&c, f)))
        return rc;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if ((rc = read_tensor_info(&c, f, &f->tensors[i], i)))
            return rc;
    uint64_t pad = (f->alignment - c.pos % f->alignment) % f->alignment;
    f->data_offset = c.pos + pad;
    if (!(flags & GGUF_OPEN_METADATA_ONLY) && f->n_tensors > 0 && f->data_offset > f->size)
        return err_set(err, ERR_INPUT,
                       "%s: the data blob should start at byte %" PRIu64
                       " but the file has %zu bytes",
                       f->path, f->data_offset, f->size);
    return check_tensors(&c, f, flags);
}

static int open_common(struct gguf_file **out, struct gguf_file *f, unsigned flags,
                       struct gate_err *err)
{
    int rc = parse(f, flags, err);
    if (rc) {
        gguf_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

int gguf_open_mem(struct gguf_file **out, const void *buf, size_t size, const char *name,
                  unsigned flags, struct gate_err *err)
{
    *out = NULL;
    struct gguf_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name))) {
        free(f);
        return err_set(err, ERR_ENV, "%s: out of memory for the file record", name);
    }
    f->map = (uint8_t *)buf;
    f->size = size;
    return open_common(out, f, flags, err);
}

int gguf_open_owned(struct gguf_file **out, void *map, size_t size, const char *name,
                    unsigned flags, struct gate_err *err)
{
    *out = NULL;
    struct gguf_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name))) {
        if (map)
            munmap(map, size);
        free(f);
        return err_set(err, ERR_ENV, "%s: out of memory for the file record", name);
    }
    if (!size) {
        gguf_close(f);
        return err_set(err, ERR_INPUT, "%s: file is empty", name);
    }
    f->map = map;
    f->size = size;
    f->mapped = 1;
    return open_common(out, f, flags, err);
}

int gguf_open_fd(struct gguf_file **out, int fd, const char *name, unsigned flags,
                 struct gate_err *err)
{
    *out = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0)
        return err_set(err, ERR_ENV, "cannot read '%s': %s", name, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return err_set(err, ERR_INPUT, "cannot read '%s': not a regular file", name);
    if (st.st_size == 0)
        return err_set(err, ERR_INPUT, "%s: file is empty", name);
    /* the mapping holds its own reference to the file: fd stays the caller's */
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED)
        return err_set(err, ERR_ENV, "cannot map '%s': %s", name, strerror(errno));
    struct gguf_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name))) {
        munmap(map, (size_t)st.st_size);
        free(f);
        return err_set(err, ERR_ENV, "%s: out of memory for the file record", name);
    }
    f->map = map;
    f->size = (size_t)st.st_size;
    f->mapped = 1;
    return open_common(out, f, flags, err);
}

int gguf_open(struct gguf_file **out, const char *path, unsigned flags, struct gate_err *err)
{
    *out = NULL;
    int fd;
    uint64_t size;
    /* never blocking on a FIFO, never a device or a /proc file (engine/pin.h) */
    int rc = pin_open_regular(path, &fd, &size, err);
    if (rc)
        return rc;
    rc = gguf_open_fd(out, fd, path, flags, err);
    close(fd);
    return rc;
}

void gguf_close(struct gguf_file *f)
{
    if (!f)
        return;
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++) {
            free(f->kv[i].key);
            free(f->kv[i].strs);
        }
    free(f->kv);
    free(f->tensors);
    if (f->mapped)
        munmap(f->map, f->size);
    free(f->path);
    free(f);
}

const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key)
{
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key && strcmp(f->kv[i].key, key) == 0)
            return &f->kv[i];
    return NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name)
{
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

static int get_typed(const struct gguf_file *f, const char *key, enum gguf_type want,
                     const struct gguf_kv **kv, struct gate_err *err)
{
    *kv = gguf_find_kv(f, key);
    if (!*kv)
        return err_set(err, ERR_INPUT, "%s: required key '%s' is missing", f->path, key);
    if ((*kv)->type != want)
        return err_set(err, ERR_INPUT, "%s: key '%s' has type %s, expected %s", f->path, key,
                       gguf_type_name((*kv)->type), gguf_type_name(want));
    return 0;
}

int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out, struct gate_err *err)
{
    const struct gguf_kv *kv;
    int rc = get_typed(f, key, GGUF_TYPE_UINT32, &kv, err);
    if (!rc)
        memcpy(out, kv->data, 4);
    return rc;
}

int gguf_get_f32(const struct gguf_file *f, const char *key, float *out, struct gate_err *err)
{
    const struct gguf_kv *kv;
    int rc = get_typed(f, key, GGUF_TYPE_FLOAT32, &kv, err);
    if (!rc)
        memcpy(out, kv->data, 4);
    return rc;
}

int gguf_get_bool(const struct gguf_file *f, const char *key, int *out, struct gate_err *err)
{
    const struct gguf_kv *kv;
    int rc = get_typed(f, key, GGUF_TYPE_BOOL, &kv, err);
    if (!rc)
        *out = kv->data[0] != 0;
    return rc;
}

int gguf_get_str(const struct gguf_file *f, const char *key, char **out, struct gate_err *err)
{
    const struct gguf_kv *kv;
    *out = NULL;
    int rc = get_typed(f, key, GGUF_TYPE_STRING, &kv, err);
    if (rc)
        return rc;
    *out = strndup(kv->strs[0].ptr, kv->strs[0].len);
    if (!*out)
        return err_set(err, ERR_ENV, "out of memory for metadata string '%s'", key);
    return 0;
}

int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_type elem,
                 const struct gguf_kv **kv, struct gate_err *err)
{
    int rc = get_typed(f, key, GGUF_TYPE_ARRAY, kv, err);
    if (rc)
        return rc;
    if ((*kv)->arr_type != elem)
        return err_set(err, ERR_INPUT, "%s: array '%s' has elements of type %s, expected %s",
                       f->path, key, gguf_type_name((*kv)->arr_type), gguf_type_name(elem));
    return 0;
}

uint64_t gguf_kv_uint(const struct gguf_kv *kv, uint64_t i)
{
    enum gguf_type t = kv->type == GGUF_TYPE_ARRAY ? kv->arr_type : kv->type;
    const uint8_t *p = kv->data + i * TYPE_SIZES[t];
    switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_BOOL:
        return *p;
    case GGUF_TYPE_INT8:
        return (uint64_t)(int64_t) * (const int8_t *)p;
    case GGUF_TYPE_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case GGUF_TYPE_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        return (uint64_t)(int64_t)v;
    }
    case GGUF_TYPE_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case GGUF_TYPE_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        return (uint64_t)(int64_t)v;
    }
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    default:
        return 0;
    }
}

double gguf_kv_float(const struct gguf_kv *kv, uint64_t i)
{
    enum gguf_type t = kv->type == GGUF_TYPE_ARRAY ? kv->arr_type : kv->type;
    const uint8_t *p = kv->data + i * TYPE_SIZES[t];
    if (t == GGUF_TYPE_FLOAT32) {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    if (t == GGUF_TYPE_FLOAT64) {
        double v;
        memcpy(&v, p, 8);
        return v;
    }
    return 0;
}
