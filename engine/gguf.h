/* gguf.h — a validating, memory-mapped, read-only GGUF v2/v3 reader, and a writer.
 *
 * Invariants after gguf_open() succeeds: every key is unique and non-empty; every string,
 * array and tensor lies inside the file; every tensor has 1..4 dims, positive dims whose
 * product does not overflow, a known type, ne[0] a multiple of the type's block size, an
 * aligned offset, and no overlap with another tensor. Nothing is read outside the mapping.
 * Layout facts: ../shared/FACTS.md §1. Start reading: gguf_open().
 */
#ifndef GATE_GGUF_H
#define GATE_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT = 13,
};

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64 /* tensor names are shorter than this (GGML_MAX_NAME) */
#define GGUF_DEFAULT_ALIGNMENT 32

/* A string inside the mapping: not NUL-terminated. */
struct gguf_str {
    uint64_t len;
    const char *ptr;
};

struct gguf_kv {
    char *key;               /* owned, NUL-terminated */
    enum gguf_type type;     /* value type */
    enum gguf_type arr_type; /* element type when type == ARRAY */
    uint64_t n;              /* element count for arrays, 1 otherwise */
    uint64_t offset;         /* byte offset of the record's key in the file */
    const uint8_t *data;     /* scalar value or first array element, inside the mapping */
    struct gguf_str *strs;   /* owned: n strings when this is a string or array of strings */
};

struct gguf_tensor {
    char name[GGUF_MAX_NAME];
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* missing dims are 1 */
    int type;                  /* enum quant_type */
    uint64_t offset;           /* relative to the data blob */
    uint64_t nbytes;
    const void *data; /* inside the mapping; NULL for a metadata-only open */
};

struct gguf_file {
    char *path; /* as given, for messages */
    uint8_t *map;
    size_t size;
    int mapped; /* 1: map is an mmap; 0: borrowed memory */
    uint32_t version;
    uint64_t n_kv;
    struct gguf_kv *kv;
    uint64_t n_tensors;
    struct gguf_tensor *tensors;
    uint32_t alignment;
    uint64_t data_offset; /* absolute byte offset of the data blob */
};

enum gguf_open_flags {
    /* Read and validate the header, metadata and tensor infos only; tensor data pointers stay
     * NULL and the data blob is not required to be present (vocabulary-only use). */
    GGUF_OPEN_METADATA_ONLY = 1,
};

/* Open and validate a GGUF file. On success *out owns the mapping; free with gguf_close().
 * On failure returns ERR_INPUT (bad file) or ERR_ENV (cannot open/map) and err names the
 * path, the problem and the byte offset, key or tensor. */
int gguf_open(struct gguf_file **out, const char *path, unsigned flags, struct gate_err *err);

/* Same over an open descriptor (a regular file, read from offset 0): the file is mapped from fd
 * itself, never re-opened by name, so the bytes validated are those of the file fd refers to
 * (e.g. one pinned by engine/pin.h). fd stays the caller's (the mapping keeps its own reference;
 * the caller may close fd right after). name is for messages. */
int gguf_open_fd(struct gguf_file **out, int fd, const char *name, unsigned flags,
                 struct gate_err *err);

/* Same over an anonymous mapping of size bytes that the file takes over (munmap()ed by
 * gguf_close(), on failure too): the hashed private copy of a pinned file (pin_take()). */
int gguf_open_owned(struct gguf_file **out, void *map, size_t size, const char *name,
                    unsigned flags, struct gate_err *err);

/* Same over caller memory [buf, buf+size), borrowed until gguf_close(). name is for messages. */
int gguf_open_mem(struct gguf_file **out, const void *buf, size_t size, const char *name,
                  unsigned flags, struct gate_err *err);

void gguf_close(struct gguf_file *f);

/* Lookups; NULL when absent. Borrowed until gguf_close(). */
const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* Typed getters with exact type checks (as llama.cpp's loader does). Return 0, or ERR_INPUT
 * with a message naming the key and the expected and actual types. A missing key is an error
 * too; use gguf_find_kv() first for optional keys. */
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out, struct gate_err *err);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *out, struct gate_err *err);
int gguf_get_bool(const struct gguf_file *f, const char *key, int *out, struct gate_err *err);
/* out is a NUL-terminated copy (malloc'd, caller frees). */
int gguf_get_str(const struct gguf_file *f, const char *key, char **out, struct gate_err *err);
/* An array whose element type must equal `elem`; *n and *kv borrowed. */
int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_type elem,
                 const struct gguf_kv **kv, struct gate_err *err);

/* Scalar accessors for a kv known to have that type (no checks). */
uint64_t gguf_kv_uint(const struct gguf_kv *kv, uint64_t i); /* any integer type, element i */
double gguf_kv_float(const struct gguf_kv *kv, uint64_t i);  /* FLOAT32/FLOAT64, element i */

const char *gguf_type_name(int type);
size_t gguf_type_size(int type); /* scalar size; 0 for STRING/ARRAY/unknown */

/* ---- writer -------------------------------------------------------------------------------
 * Builds a GGUF v3 file: metadata records in the order added, tensors packed in the order
 * added (llama.cpp's packing rule: each at the previous end rounded up to the alignment).
 * Tensor data is either borrowed (`data`, valid until the write) or produced on demand by a
 * fill callback, so multi-GB files are written tensor by tensor with bounded memory.
 */
struct gguf_writer;

/* Produce the bytes of tensor `index` into buf (nbytes long). Return 0 or an error status. */
typedef int (*gguf_fill_fn)(void *ctx, int index, void *buf, size_t nbytes, struct gate_err *err);

struct gguf_writer *gguf_writer_new(void); /* NULL on out of memory */
void gguf_writer_free(struct gguf_writer *w);

int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment);
int gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v);
int gguf_writer_add_bool(struct gguf_writer *w, const char *key, int v);
int gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *v);
int gguf_writer_add_arr_str(struct gguf_writer *w, const char *key, const char *const *v,
                            uint64_t n);
int gguf_writer_add_arr_i32(struct gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
int gguf_writer_add_arr_f32(struct gguf_writer *w, const char *key, const float *v, uint64_t n);
/* ne has n_dims entries (ne[0] contiguous). data: nbytes borrowed bytes, or NULL to use fill. */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, int type, uint32_t n_dims,
                           const int64_t *ne, const void *data);
void gguf_writer_set_fill(struct gguf_writer *w, gguf_fill_fn fill, void *ctx);

/* Write to path atomically (a temporary file in the same folder renamed into place; on any
 * failure, a full disk included, nothing is left under path). */
int gguf_writer_write_file(struct gguf_writer *w, const char *path, struct gate_err *err);
/* Write into a malloc'd buffer (*buf, *size; caller frees). */
int gguf_writer_write_mem(struct gguf_writer *w, uint8_t **buf, size_t *size, struct gate_err *err);

#ifdef __cplusplus
}
#endif
#endif
