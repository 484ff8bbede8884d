/* test_gguf.c — the GGUF reader and writer: valid files (hand-built byte by byte and written by
 * the writer) read back exactly; a table of corruptions each rejected with its own message; a
 * deterministic mutation run over the conformance models; the writer's atomicity and its two
 * data paths.
 *
 * Every buffer handed to gguf_open_mem() is a malloc'd copy of exactly the bytes under test, so
 * the sanitizer build catches any read past the end. Start reading: build_base() and CASES.
 */

#include <criterion/criterion.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/gguf.h"
#include "engine/quant.h"
#include "support/check.h"

/* ---- a byte builder ------------------------------------------------------------------------ */

struct bb {
    uint8_t *p;
    size_t len, cap;
};

static void bb_put(struct bb *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        cr_assert(b->p != NULL);
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void bb_u8(struct bb *b, uint8_t v)
{
    bb_put(b, &v, 1);
}
static void bb_u16(struct bb *b, uint16_t v)
{
    bb_put(b, &v, 2);
}
static void bb_u32(struct bb *b, uint32_t v)
{
    bb_put(b, &v, 4);
}
static void bb_i32(struct bb *b, int32_t v)
{
    bb_put(b, &v, 4);
}
static void bb_u64(struct bb *b, uint64_t v)
{
    bb_put(b, &v, 8);
}
static void bb_i64(struct bb *b, int64_t v)
{
    bb_put(b, &v, 8);
}
static void bb_f32(struct bb *b, float v)
{
    bb_put(b, &v, 4);
}
static void bb_f64(struct bb *b, double v)
{
    bb_put(b, &v, 8);
}

static void bb_str(struct bb *b, const char *s)
{
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}

static void bb_header(struct bb *b, uint32_t version, int64_t n_tensors, int64_t n_kv)
{
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_i64(b, n_tensors);
    bb_i64(b, n_kv);
}

static void bb_pad(struct bb *b, size_t align)
{
    while (b->len % align)
        bb_u8(b, 0);
}

/* ---- opening helpers ----------------------------------------------------------------------- */

/* A malloc'd copy of exactly n bytes (n may be 0), so an over-read is an ASan error. */
static uint8_t *dup_exact(const uint8_t *p, size_t n)
{
    uint8_t *q = malloc(n ? n : 1);
    cr_assert(q != NULL);
    if (n)
        memcpy(q, p, n);
    return q;
}

/* Open a copy, expect failure; returns the status and fills err. */
static int open_copy_fail(const uint8_t *p, size_t n, unsigned flags, struct gate_err *err)
{
    uint8_t *q = dup_exact(p, n);
    struct gguf_file *f = NULL;
    err_clear(err);
    int rc = gguf_open_mem(&f, q, n, "t.gguf", flags, err);
    gguf_close(f);
    free(q);
    return rc;
}

static void expect_ok(int rc, const struct gate_err *err)
{
    cr_assert_eq(rc, 0, "expected success, got %d: %s", rc, err->msg);
}

/* ---- the hand-built base file ------------------------------------------------------------- */

/* Byte positions of every field of the base file, recorded while building it. */
enum mark {
    M_KV0,
    M_KV0_VAL,
    M_KV1,
    M_KV1_KEY,
    M_KV1_TYPE,
    M_KV1_ELEM,
    M_KV1_COUNT,
    M_KV1_BODY,
    M_KV2,
    M_KV2_TYPE,
    M_KV2_VAL,
    M_KV3,
    M_KV3_KEY,
    M_KV3_COUNT,
    M_KV3_BODY,
    M_KV3_STR1,
    M_KV4,
    M_KV4_VAL,
    M_T0,
    M_T0_NDIMS,
    M_T0_DIMS,
    M_T0_TYPE,
    M_T0_OFF,
    M_T1,
    M_T1_NAME,
    M_T1_NDIMS,
    M_T1_DIMS,
    M_T1_TYPE,
    M_T1_OFF,
    M_PAD,
    M_DATA,
    M_T1_DATA,
    M_END,
    M_ZERO, /* always 0: for messages at fixed positions */
    M_COUNT,
};

static const char *LONG_NAME = "a hand-built GGUF file for the reader tests, sixty-four bytes..";

static float t0_value(int i)
{
    return (float)i * 0.5f - 3.0f;
}
static uint8_t t1_byte(int i)
{
    return (uint8_t)(i * 7 + 3);
}

/* GGUF v3 with 5 keys (string, UINT32 array, general.alignment = 32, string array, BOOL) and two
 * tensors: t0 F32 (32, 2) at offset 0 and t1 Q4_K (256) at offset 256; 5 bytes of padding. */
static void build_base(struct bb *b, size_t *m)
{
    memset(b, 0, sizeof *b);
    m[M_ZERO] = 0;
    bb_header(b, 3, 2, 5);
    m[M_KV0] = b->len;
    bb_str(b, "general.name");
    bb_u32(b, GGUF_TYPE_STRING);
    m[M_KV0_VAL] = b->len;
    bb_str(b, LONG_NAME);
    m[M_KV1] = b->len;
    bb_u64(b, 8);
    m[M_KV1_KEY] = b->len;
    bb_put(b, "test.arr", 8);
    m[M_KV1_TYPE] = b->len;
    bb_u32(b, GGUF_TYPE_ARRAY);
    m[M_KV1_ELEM] = b->len;
    bb_u32(b, GGUF_TYPE_UINT32);
    m[M_KV1_COUNT] = b->len;
    bb_u64(b, 3);
    m[M_KV1_BODY] = b->len;
    bb_u32(b, 7);
    bb_u32(b, 8);
    bb_u32(b, 9);
    m[M_KV2] = b->len;
    bb_str(b, "general.alignment");
    m[M_KV2_TYPE] = b->len;
    bb_u32(b, GGUF_TYPE_UINT32);
    m[M_KV2_VAL] = b->len;
    bb_u32(b, 32);
    m[M_KV3] = b->len;
    bb_u64(b, 8);
    m[M_KV3_KEY] = b->len;
    bb_put(b, "test.str", 8);
    bb_u32(b, GGUF_TYPE_ARRAY);
    bb_u32(b, GGUF_TYPE_STRING);
    m[M_KV3_COUNT] = b->len;
    bb_u64(b, 2);
    m[M_KV3_BODY] = b->len;
    bb_str(b, "ab");
    m[M_KV3_STR1] = b->len;
    bb_str(b, "cde");
    m[M_KV4] = b->len;
    bb_str(b, "test.flg");
    bb_u32(b, GGUF_TYPE_BOOL);
    m[M_KV4_VAL] = b->len;
    bb_u8(b, 1);

    m[M_T0] = b->len;
    bb_str(b, "t0");
    m[M_T0_NDIMS] = b->len;
    bb_u32(b, 2);
    m[M_T0_DIMS] = b->len;
    bb_i64(b, 32);
    bb_i64(b, 2);
    m[M_T0_TYPE] = b->len;
    bb_i32(b, QUANT_F32);
    m[M_T0_OFF] = b->len;
    bb_u64(b, 0);

    m[M_T1] = b->len;
    bb_u64(b, 2);
    m[M_T1_NAME] = b->len;
    bb_put(b, "t1", 2);
    m[M_T1_NDIMS] = b->len;
    bb_u32(b, 1);
    m[M_T1_DIMS] = b->len;
    bb_i64(b, 256);
    m[M_T1_TYPE] = b->len;
    bb_i32(b, QUANT_Q4_K);
    m[M_T1_OFF] = b->len;
    bb_u64(b, 256);

    m[M_PAD] = b->len;
    bb_pad(b, 32);
    m[M_DATA] = b->len;
    for (int i = 0; i < 64; i++)
        bb_f32(b, t0_value(i));
    m[M_T1_DATA] = b->len;
    for (int i = 0; i < 144; i++)
        bb_u8(b, t1_byte(i));
    m[M_END] = b->len;
}

Test(gguf, base_file_has_the_layout_the_corruption_table_assumes)
{
    struct bb b;
    size_t m[M_COUNT];
    build_base(&b, m);
    /* truncations in the records below must not trip the up-front count checks */
    cr_assert_gt(m[M_KV1], 24 + 5 * 14);
    cr_assert_gt(m[M_KV1], 24 + 2 * 33);
    cr_assert_gt(m[M_DATA], m[M_PAD], "the base file needs some padding");
    cr_assert_eq(m[M_END], m[M_DATA] + 256 + 144);
    free(b.p);
}

Test(gguf, opens_hand_built_file_with_every_field_in_place)
{
    struct bb b;
    size_t m[M_COUNT];
    build_base(&b, m);
    uint8_t *q = dup_exact(b.p, b.len);
    struct gguf_file *f = NULL;
    struct gate_err err = {0};
    expect_ok(gguf_open_mem(&f, q, b.len, "base.gguf", 0, &err), &err);

    cr_assert_eq(f->version, 3);
    cr_assert_eq(f->n_kv, 5);
    cr_assert_eq(f->n_tensors, 2);
    cr_assert_eq(f->alignment, 32);
    cr_assert_eq(f->data_offset, m[M_DATA]);

    char *name = NULL;
    expect_ok(gguf_get_str(f, "general.name", &name, &err), &err);
    cr_assert_str_eq(name, LONG_NAME);
    free(name);
    cr_assert_eq(f->kv[0].offset, m[M_KV0]);
    cr_assert_eq(f->kv[3].offset, m[M_KV3]);

    const struct gguf_kv *kv = NULL;
    expect_ok(gguf_get_arr(f, "test.arr", GGUF_TYPE_UINT32, &kv, &err), &err);
    cr_assert_eq(kv->n, 3);
    cr_assert_eq(kv->data, q + m[M_KV1_BODY]);
    for (uint64_t i = 0; i < 3; i++)
        cr_assert_eq(gguf_kv_uint(kv, i), 7 + i);

    expect_ok(gguf_get_arr(f, "test.str", GGUF_TYPE_STRING, &kv, &err), &err);
    cr_assert_eq(kv->n, 2);
    cr_assert_eq(kv->strs[0].len, 2);
    cr_assert(memcmp(kv->strs[0].ptr, "ab", 2) == 0);
    cr_assert_eq(kv->strs[1].len, 3);
    cr_assert_eq((const uint8_t *)kv->strs[1].ptr, q + m[M_KV3_STR1] + 8);

    int flag = 0;
    expect_ok(gguf_get_bool(f, "test.flg", &flag, &err), &err);
    cr_assert_eq(flag, 1);

    const struct gguf_tensor *t0 = gguf_find_tensor(f, "t0");
    const struct gguf_tensor *t1 = gguf_find_tensor(f, "t1");
    cr_assert(t0 && t1);
    cr_assert_eq(t0->n_dims, 2);
    cr_assert(t0->ne[0] == 32 && t0->ne[1] == 2 && t0->ne[2] == 1 && t0->ne[3] == 1);
    cr_assert_eq(t0->type, QUANT_F32);
    cr_assert_eq(t0->offset, 0);
    cr_assert_eq(t0->nbytes, 256);
    cr_assert_eq(t0->data, q + m[M_DATA]);
    const float *x = t0->data;
    for (int i = 0; i < 64; i++)
        cr_assert_eq(x[i], t0_value(i));
    cr_assert_eq(t1->n_dims, 1);
    cr_assert(t1->ne[0] == 256 && t1->ne[1] == 1);
    cr_assert_eq(t1->type, QUANT_Q4_K);
    cr_assert_eq(t1->offset, 256);
    cr_assert_eq(t1->nbytes, 144);
    cr_assert_eq(t1->data, q + m[M_T1_DATA]);
    for (int i = 0; i < 144; i++)
        cr_assert_eq(((const uint8_t *)t1->data)[i], t1_byte(i));
    cr_assert_null(gguf_find_tensor(f, "t2"));
    cr_assert_null(gguf_find_kv(f, "missing"));
    gguf_close(f);
    free(q);
    free(b.p);
}

Test(gguf, accepts_version_2)
{
    struct bb b;
    size_t m[M_COUNT];
    build_base(&b, m);
    uint32_t v2 = 2;
    memcpy(b.p + 4, &v2, 4);
    uint8_t *q = dup_exact(b.p, b.len);
    struct gguf_file *f = NULL;
    struct gate_err err = {0};
    expect_ok(gguf_open_mem(&f, q, b.len, "v2.gguf", 0, &err), &err);
    cr_assert_eq(f->version, 2);
    cr_assert_eq(f->n_tensors, 2);
    gguf_close(f);
    free(q);
    free(b.p);
}

Test(gguf, metadata_only_open_needs_no_data_blob_and_leaves_data_null)
{
    struct bb b;
    size_t m[M_COUNT];
    build_base(&b, m);
    struct gate_err err = {0};
    /* cut at the end of the tensor infos: no padding, no data */
    uint8_t *q = dup_exact(b.p, m[M_PAD]);
    struct gguf_file *f = NULL;
    expect_ok(gguf_open_mem(&f, q, m[M_PAD], "meta.gguf", GGUF_OPEN_METADATA_ONLY, &err), &err);
    cr_assert_eq(f->n_tensors, 2);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        cr_assert_null(f->tensors[i].data, "tensor %s has data", f->tensors[i].name);
    cr_assert_eq(gguf_find_tensor(f, "t1")->nbytes, 144);
    gguf_close(f);
    free(q);
    /* the same bytes without the flag are refused */
    cr_assert_eq(open_copy_fail(b.p, m[M_PAD], 0, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "the data blob should start at byte"), "%s", err.msg);
    free(b.p);
}

Test(gguf, opens_every_value_type_built_byte_by_byte)
{
    struct bb b = {0};
    bb_header(&b, 3, 1, 16);
    bb_str(&b, "u8");
    bb_u32(&b, GGUF_TYPE_UINT8);
    bb_u8(&b, 250);
    bb_str(&b, "i8");
    bb_u32(&b, GGUF_TYPE_INT8);
    bb_u8(&b, (uint8_t)-5);
    bb_str(&b, "u16");
    bb_u32(&b, GGUF_TYPE_UINT16);
    bb_u16(&b, 65000);
    bb_str(&b, "i16");
    bb_u32(&b, GGUF_TYPE_INT16);
    bb_u16(&b, (uint16_t)-300);
    bb_str(&b, "u32");
    bb_u32(&b, GGUF_TYPE_UINT32);
    bb_u32(&b, 4000000000u);
    bb_str(&b, "i32");
    bb_u32(&b, GGUF_TYPE_INT32);
    bb_i32(&b, -70000);
    bb_str(&b, "f32");
    bb_u32(&b, GGUF_TYPE_FLOAT32);
    bb_f32(&b, 1.5f);
    bb_str(&b, "bool");
    bb_u32(&b, GGUF_TYPE_BOOL);
    bb_u8(&b, 0);
    bb_str(&b, "str");
    bb_u32(&b, GGUF_TYPE_STRING);
    bb_str(&b, "");
    bb_str(&b, "u64");
    bb_u32(&b, GGUF_TYPE_UINT64);
    bb_u64(&b, UINT64_MAX - 1);
    bb_str(&b, "i64");
    bb_u32(&b, GGUF_TYPE_INT64);
    bb_i64(&b, INT64_MIN + 1);
    bb_str(&b, "f64");
    bb_u32(&b, GGUF_TYPE_FLOAT64);
    bb_f64(&b, -2.25);
    bb_str(&b, "arr.i16");
    bb_u32(&b, GGUF_TYPE_ARRAY);
    bb_u32(&b, GGUF_TYPE_INT16);
    bb_u64(&b, 3);
    bb_u16(&b, 1);
    bb_u16(&b, (uint16_t)-2);
    bb_u16(&b, 3);
    bb_str(&b, "arr.f64");
    bb_u32(&b, GGUF_TYPE_ARRAY);
    bb_u32(&b, GGUF_TYPE_FLOAT64);
    bb_u64(&b, 2);
    bb_f64(&b, 0.125);
    bb_f64(&b, 1e300);
    bb_str(&b, "arr.empty");
    bb_u32(&b, GGUF_TYPE_ARRAY);
    bb_u32(&b, GGUF_TYPE_STRING);
    bb_u64(&b, 0);
    bb_str(&b, "general.alignment");
    bb_u32(&b, GGUF_TYPE_UINT32);
    bb_u32(&b, 64);
    bb_str(&b, "w");
    bb_u32(&b, 2);
    bb_i64(&b, 64);
    bb_i64(&b, 3);
    bb_i32(&b, QUANT_Q8_0);
    bb_u64(&b, 0);
    size_t data_at = (b.len + 63) / 64 * 64;
    bb_pad(&b, 64);
    for (int i = 0; i < 3 * 2 * 34; i++)
        bb_u8(&b, (uint8_t)i);

    uint8_t *q = dup_exact(b.p, b.len);
    struct gguf_file *f = NULL;
    struct gate_err err = {0};
    expect_ok(gguf_open_mem(&f, q, b.len, "types.gguf", 0, &err), &err);
    cr_assert_eq(f->n_kv, 16);
    cr_assert_eq(f->alignment, 64);
    cr_assert_eq(f->data_offset, data_at);
    static const struct {
        const char *key;
        enum gguf_type type;
        uint64_t u;
    } ints[] = {
        {"u8", GGUF_TYPE_UINT8, 250},
        {"i8", GGUF_TYPE_INT8, (uint64_t)-5},
        {"u16", GGUF_TYPE_UINT16, 65000},
        {"i16", GGUF_TYPE_INT16, (uint64_t)-300},
        {"u32", GGUF_TYPE_UINT32, 4000000000u},
        {"i32", GGUF_TYPE_INT32, (uint64_t)-70000},
        {"bool", GGUF_TYPE_BOOL, 0},
        {"u64", GGUF_TYPE_UINT64, UINT64_MAX - 1},
        {"i64", GGUF_TYPE_INT64, (uint64_t)(INT64_MIN + 1)},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const struct gguf_kv *kv = gguf_find_kv(f, ints[i].key);
        cr_assert(kv, "key %s missing", ints[i].key);
        cr_assert_eq(kv->type, ints[i].type, "key %s", ints[i].key);
        cr_assert_eq(gguf_kv_uint(kv, 0), ints[i].u, "key %s", ints[i].key);
    }
    cr_assert_eq(gguf_kv_float(gguf_find_kv(f, "f32"), 0), 1.5);
    cr_assert_eq(gguf_kv_float(gguf_find_kv(f, "f64"), 0), -2.25);
    float f32 = 0;
    expect_ok(gguf_get_f32(f, "f32", &f32, &err), &err);
    cr_assert_eq(f32, 1.5f);
    char *s = NULL;
    expect_ok(gguf_get_str(f, "str", &s, &err), &err);
    cr_assert_str_eq(s, "");
    free(s);
    const struct gguf_kv *kv = NULL;
    expect_ok(gguf_get_arr(f, "arr.i16", GGUF_TYPE_INT16, &kv, &err), &err);
    cr_assert_eq(kv->n, 3);
    cr_assert_eq((int64_t)gguf_kv_uint(kv, 1), -2);
    expect_ok(gguf_get_arr(f, "arr.f64", GGUF_TYPE_FLOAT64, &kv, &err), &err);
    cr_assert_eq(gguf_kv_float(kv, 1), 1e300);
    expect_ok(gguf_get_arr(f, "arr.empty", GGUF_TYPE_STRING, &kv, &err), &err);
    cr_assert_eq(kv->n, 0);
    const struct gguf_tensor *w = gguf_find_tensor(f, "w");
    cr_assert_eq(w->nbytes, 3 * 2 * 34);
    cr_assert_eq(w->data, q + data_at);
    cr_assert_eq(((const uint8_t *)w->data)[203], 203);
    gguf_close(f);
    free(q);
    free(b.p);
}

Test(gguf, opens_a_file_with_no_tensors_and_no_keys)
{
    struct bb b = {0};
    bb_header(&b, 3, 0, 0);
    uint8_t *q = dup_exact(b.p, b.len);
    struct gguf_file *f = NULL;
    struct gate_err err = {0};
    expect_ok(gguf_open_mem(&f, q, b.len, "empty.gguf", 0, &err), &err);
    cr_assert_eq(f->n_kv, 0);
    cr_assert_eq(f->n_tensors, 0);
    gguf_close(f);
    free(q);
    free(b.p);
}

/* ---- the corruption table ------------------------------------------------------------------ */

enum ckind { TRUNC, PATCH8, PATCH32, PATCH64, PATCHSTR };

struct corruption {
    const char *name;
    enum ckind kind;
    int mark;           /* where: the base file position of this mark ... */
    long delta;         /* ... plus this */
    uint64_t value;     /* PATCH*: the new value */
    const char *bytes;  /* PATCHSTR: the new bytes */
    const char *expect; /* a substring of the message; one optional %zu ... */
    int at;             /* ... filled with mark[at] + at_delta */
    long at_delta;
    unsigned flags; /* open flags */
    int mark2;      /* when > 0, also write the 8 bytes value2 at mark[mark2] */
    uint64_t value2;
};

#define U64(x) ((uint64_t)(x))

/* A row of the table; mark2/value2 are set only where a case needs a second patch. */
#define ROW(name, kind, mark, delta, value, bytes, expect, at, at_delta, flags)                    \
    {                                                                                              \
        name, kind, mark, delta, value, bytes, expect, at, at_delta, flags, 0, 0                   \
    }

/* clang-format off */
static const struct corruption CASES[] = {
    /* truncation at every section boundary */
    ROW("cut inside magic", TRUNC, M_ZERO, 2, 0, 0,
        "magic at byte 0 needs 4 bytes", 0, 0, 0),
    ROW("cut at zero bytes", TRUNC, M_ZERO, 0, 0, 0,
        "magic at byte 0 needs 4 bytes", 0, 0, 0),
    ROW("cut inside version", TRUNC, M_ZERO, 6, 0, 0,
        "version at byte 4 needs 4 bytes but the file ends at byte 6", 0, 0, 0),
    ROW("cut inside tensor count", TRUNC, M_ZERO, 12, 0, 0,
        "tensor count at byte 8 needs 8", 0, 0, 0),
    ROW("cut inside metadata count", TRUNC, M_ZERO, 20, 0, 0,
        "metadata count at byte 16 needs 8", 0, 0, 0),
    ROW("cut right after the header", TRUNC, M_ZERO, 24, 0, 0,
        "metadata count 5 at byte 16 cannot fit in a file of 24 bytes", 0, 0, 0),
    ROW("cut inside a key length", TRUNC, M_KV1, 4, 0, 0,
        "key at byte %zu needs 8 bytes", M_KV1, 0, 0),
    ROW("cut inside key bytes", TRUNC, M_KV1_KEY, 3, 0, 0,
        "key at byte %zu has length 8, past the end of the file", M_KV1, 0, 0),
    ROW("cut inside a value type", TRUNC, M_KV2_TYPE, 2, 0, 0,
        "value type at byte %zu needs 4 bytes", M_KV2_TYPE, 0, 0),
    ROW("cut inside a scalar value", TRUNC, M_KV2_VAL, 3, 0, 0,
        "UINT32 value of key 'general.alignment' at byte %zu needs 4 bytes", M_KV2_VAL, 0, 0),
    ROW("cut before a BOOL value", TRUNC, M_KV4_VAL, 0, 0, 0,
        "BOOL value of key 'test.flg' at byte %zu needs 1 bytes", M_KV4_VAL, 0, 0),
    ROW("cut inside an array element type", TRUNC, M_KV1_ELEM, 1, 0, 0,
        "array element type at byte %zu", M_KV1_ELEM, 0, 0),
    ROW("cut inside an array count", TRUNC, M_KV1_COUNT, 5, 0, 0,
        "array count at byte %zu", M_KV1_COUNT, 0, 0),
    ROW("cut inside an array body", TRUNC, M_KV1_BODY, 6, 0, 0,
        "array 'test.arr' at byte %zu claims 3 elements of UINT32 (4 bytes each) but only 6 bytes "
        "are left", M_KV1, 0, 0),
    ROW("cut inside a string length in an array", TRUNC, M_KV3_STR1, 5, 0, 0,
        "array 'test.str' at byte %zu claims 2 strings, more than the 15 bytes left can hold",
        M_KV3, 0, 0),
    ROW("cut inside string bytes in an array", TRUNC, M_KV3_STR1, 9, 0, 0,
        "string value of key 'test.str' at byte %zu has length 3, past the end", M_KV3_STR1, 0, 0),
    ROW("cut inside a tensor name length", TRUNC, M_T0, 4, 0, 0,
        "tensor name at byte %zu needs 8", M_T0, 0, 0),
    ROW("cut inside a tensor name", TRUNC, M_T1_NAME, 1, 0, 0,
        "tensor name at byte %zu has length 2, past the end", M_T1, 0, 0),
    ROW("cut inside n_dims", TRUNC, M_T0_NDIMS, 3, 0, 0,
        "tensor n_dims at byte %zu needs 4", M_T0_NDIMS, 0, 0),
    ROW("cut inside dims", TRUNC, M_T0_DIMS, 12, 0, 0,
        "tensor dimension at byte %zu needs 8", M_T0_DIMS, 8, 0),
    ROW("cut inside a tensor type", TRUNC, M_T1_TYPE, 2, 0, 0,
        "tensor type at byte %zu needs 4", M_T1_TYPE, 0, 0),
    ROW("cut inside a tensor offset", TRUNC, M_T1_OFF, 7, 0, 0,
        "tensor offset at byte %zu needs 8", M_T1_OFF, 0, 0),
    ROW("cut inside the padding", TRUNC, M_PAD, 2, 0, 0,
        "the data blob should start at byte %zu", M_DATA, 0, 0),
    ROW("cut at the data blob", TRUNC, M_DATA, 0, 0, 0,
        "tensor 't0' ends at byte %zu but the file has", M_DATA, 256, 0),
    ROW("cut inside the first tensor's data", TRUNC, M_DATA, 100, 0, 0,
        "tensor 't0' ends at byte %zu", M_DATA, 256, 0),
    ROW("cut inside the last tensor's data", TRUNC, M_END, -1, 0, 0,
        "tensor 't1' ends at byte %zu but the file has", M_END, 0, 0),
    ROW("cut inside the tensor infos of a metadata-only open", TRUNC, M_T1_OFF, 4, 0, 0,
        "tensor offset at byte %zu needs 8", M_T1_OFF, 0, GGUF_OPEN_METADATA_ONLY),
    /* header */
    ROW("bad magic", PATCHSTR, M_ZERO, 0, 0, "GGML",
        "bad magic at byte 0 (expected 'GGUF', found bytes 47 47 4d 4c)", 0, 0, 0),
    ROW("version 1", PATCH32, M_ZERO, 4, 1, 0,
        "GGUF version 1 at byte 4 is not supported", 0, 0, 0),
    ROW("version 0", PATCH32, M_ZERO, 4, 0, 0,
        "GGUF version 0 at byte 4 is not supported", 0, 0, 0),
    ROW("version 4", PATCH32, M_ZERO, 4, 4, 0,
        "GGUF version 4 at byte 4 is not supported", 0, 0, 0),
    ROW("byte-swapped version", PATCH32, M_ZERO, 4, 0x03000000u, 0,
        "version word 0x03000000 at byte 4 looks byte-swapped", 0, 0, 0),
    ROW("negative tensor count", PATCH64, M_ZERO, 8, U64(-1), 0,
        "tensor count -1 at byte 8 is negative", 0, 0, 0),
    ROW("negative metadata count", PATCH64, M_ZERO, 16, U64(INT64_MIN), 0,
        "metadata count -9223372036854775808 at byte 16 is negative", 0, 0, 0),
    ROW("huge metadata count", PATCH64, M_ZERO, 16, U64(1) << 40, 0,
        "metadata count 1099511627776 at byte 16 cannot fit", 0, 0, 0),
    ROW("huge tensor count", PATCH64, M_ZERO, 8, U64(INT64_MAX), 0,
        "tensor count 9223372036854775807 at byte 8 cannot fit", 0, 0, 0),
    /* metadata */
    ROW("string length past the end", PATCH64, M_KV0_VAL, 0, U64(1) << 50, 0,
        "string value of key 'general.name' at byte %zu has length 1125899906842624, past the end",
        M_KV0_VAL, 0, 0),
    ROW("string length of all ones", PATCH64, M_KV0_VAL, 0, UINT64_MAX, 0,
        "has length 18446744073709551615, past the end", 0, 0, 0),
    ROW("key length past the end", PATCH64, M_KV1, 0, U64(1) << 62, 0,
        "key at byte %zu has length 4611686018427387904", M_KV1, 0, 0),
    ROW("empty key", PATCH64, M_KV1, 0, 0, 0,
        "key of record 1 at byte %zu is empty", M_KV1, 0, 0),
    ROW("NUL byte in a key", PATCH8, M_KV1_KEY, 4, 0, 0,
        "key of record 1 at byte %zu contains a NUL", M_KV1, 0, 0),
    ROW("duplicate key", PATCHSTR, M_KV3_KEY, 0, 0, "test.arr",
        "duplicate key 'test.arr' at byte %zu", M_KV3, 0, 0),
    ROW("huge array count", PATCH64, M_KV1_COUNT, 0, U64(1) << 61, 0,
        "array 'test.arr' at byte %zu claims 2305843009213693952 elements of UINT32", M_KV1, 0, 0),
    ROW("huge string array count", PATCH64, M_KV3_COUNT, 0, UINT64_MAX, 0,
        "array 'test.str' at byte %zu claims 18446744073709551615 strings", M_KV3, 0, 0),
    ROW("unknown value type", PATCH32, M_KV2_TYPE, 0, 13, 0,
        "key 'general.alignment' at byte %zu has unknown value type 13", M_KV2, 0, 0),
    ROW("negative value type", PATCH32, M_KV2_TYPE, 0, U64(-7), 0,
        "unknown value type -7", 0, 0, 0),
    ROW("nested array", PATCH32, M_KV1_ELEM, 0, GGUF_TYPE_ARRAY, 0,
        "array 'test.arr' at byte %zu nests arrays", M_KV1, 0, 0),
    ROW("unknown array element type", PATCH32, M_KV1_ELEM, 0, 77, 0,
        "array 'test.arr' at byte %zu has unknown element type 77", M_KV1, 0, 0),
    ROW("BOOL value 2", PATCH8, M_KV4_VAL, 0, 2, 0,
        "key 'test.flg' has a BOOL byte 2 at byte %zu", M_KV4_VAL, 0, 0),
    ROW("alignment of the wrong type", PATCH32, M_KV2_TYPE, 0, GGUF_TYPE_INT32, 0,
        "key 'general.alignment' has type INT32, expected UINT32", 0, 0, 0),
    ROW("alignment not a power of two", PATCH32, M_KV2_VAL, 0, 48, 0,
        "general.alignment = 48 is not a power of two", 0, 0, 0),
    ROW("alignment zero", PATCH32, M_KV2_VAL, 0, 0, 0,
        "general.alignment = 0 is not a power of two", 0, 0, 0),
    /* tensor infos */
    ROW("duplicate tensor name", PATCHSTR, M_T1_NAME, 0, 0, "t0",
        "duplicate tensor name 't0'", 0, 0, 0),
    ROW("tensor name of 64 bytes", PATCH64, M_T1, 0, 64, 0,
        "tensor 1 at byte %zu has a name of 64 bytes (limit 63)", M_T1, 0, 0),
    ROW("empty tensor name", PATCH64, M_T1, 0, 0, 0,
        "tensor 1 at byte %zu has an empty name", M_T1, 0, 0),
    ROW("NUL byte in a tensor name", PATCH8, M_T1_NAME, 1, 0, 0,
        "tensor 1 at byte %zu has a NUL", M_T1, 0, 0),
    ROW("n_dims 0", PATCH32, M_T0_NDIMS, 0, 0, 0,
        "tensor 't0' at byte %zu has 0 dimensions (must be 1..4)", M_T0, 0, 0),
    ROW("n_dims 5", PATCH32, M_T0_NDIMS, 0, 5, 0,
        "tensor 't0' at byte %zu has 5 dimensions", M_T0, 0, 0),
    ROW("ne zero", PATCH64, M_T0_DIMS, 8, 0, 0,
        "tensor 't0' at byte %zu has ne[1] = 0 (must be > 0)", M_T0, 0, 0),
    ROW("ne negative", PATCH64, M_T0_DIMS, 0, U64(-32), 0,
        "tensor 't0' at byte %zu has ne[0] = -32", M_T0, 0, 0),
    ROW("element count overflow", PATCH64, M_T0_DIMS, 8, U64(INT64_MAX / 2), 0,
        "tensor 't0' at byte %zu has dims whose element count overflows 64 bits", M_T0, 0, 0),
    ROW("unknown tensor type id", PATCH32, M_T1_TYPE, 0, 99, 0,
        "tensor 't1' at byte %zu has unknown type id 99", M_T1, 0, 0),
    ROW("removed tensor type id 4", PATCH32, M_T1_TYPE, 0, 4, 0,
        "has unknown type id 4", 0, 0, 0),
    ROW("negative tensor type id", PATCH32, M_T1_TYPE, 0, U64(-1), 0,
        "has unknown type id -1", 0, 0, 0),
    ROW("Q4_K row not a multiple of 256", PATCH64, M_T1_DIMS, 0, 128, 0,
        "tensor 't1' at byte %zu has ne[0] = 128, not a multiple of the Q4_K block size 256",
        M_T1, 0, 0),
    {.name = "Q8_0 row not a multiple of 32", .kind = PATCH32, .mark = M_T1_TYPE,
     .value = QUANT_Q8_0, .mark2 = M_T1_DIMS, .value2 = 48, .at = M_T1,
     .expect = "tensor 't1' at byte %zu has ne[0] = 48, not a multiple of the Q8_0 block size 32"},
    ROW("misaligned offset", PATCH64, M_T1_OFF, 0, 260, 0,
        "tensor 't1' has offset 260, not a multiple of the alignment 32", 0, 0, 0),
    ROW("misaligned offset in a metadata-only open", PATCH64, M_T1_OFF, 0, 8, 0,
        "tensor 't1' has offset 8, not a multiple of the alignment 32",
        0, 0, GGUF_OPEN_METADATA_ONLY),
    ROW("overlapping tensors", PATCH64, M_T1_OFF, 0, 224, 0,
        "tensors 't0' [0, 256) and 't1' [224, 368) overlap", 0, 0, 0),
    ROW("overlapping tensors in a metadata-only open", PATCH64, M_T0_OFF, 0, 256, 0,
        "overlap in the data blob", 0, 0, GGUF_OPEN_METADATA_ONLY),
    ROW("tensor past the end of the file", PATCH64, M_T1_OFF, 0, U64(1) << 40, 0,
        "tensor 't1' ends at byte %zu but the file has", M_DATA, (1L << 40) + 144, 0),
    ROW("tensor offset that wraps", PATCH64, M_T1_OFF, 0, UINT64_MAX - 31, 0,
        "tensor 't1' ends at byte 18446744073709551615", 0, 0, 0),
};
/* clang-format on */

/* Apply one corruption to a fresh base file; returns the length to open. */
static size_t corrupt(const struct corruption *c, struct bb *b, const size_t *m)
{
    size_t at = (size_t)((long)m[c->mark] + c->delta);
    switch (c->kind) {
    case TRUNC:
        return at;
    case PATCH8:
        b->p[at] = (uint8_t)c->value;
        break;
    case PATCH32: {
        uint32_t v = (uint32_t)c->value;
        memcpy(b->p + at, &v, 4);
        break;
    }
    case PATCH64:
        memcpy(b->p + at, &c->value, 8);
        break;
    case PATCHSTR:
        memcpy(b->p + at, c->bytes, strlen(c->bytes));
        break;
    }
    if (c->mark2 > 0)
        memcpy(b->p + m[c->mark2], &c->value2, 8);
    return b->len;
}

Test(gguf, rejects_every_corruption_in_the_table_with_its_own_message)
{
    size_t n_cases = sizeof CASES / sizeof CASES[0];
    cr_assert_geq(n_cases, 30);
    for (size_t i = 0; i < n_cases; i++) {
        const struct corruption *c = &CASES[i];
        struct bb b;
        size_t m[M_COUNT];
        build_base(&b, m);
        size_t n = corrupt(c, &b, m);
        char want[512];
        snprintf(want, sizeof want, c->expect, m[c->at] + (size_t)c->at_delta);
        struct gate_err err = {0};
        int rc = open_copy_fail(b.p, n, c->flags, &err);
        cr_expect_eq(rc, ERR_INPUT, "case '%s': status %d (%s)", c->name, rc, err.msg);
        cr_expect_eq(err.code, ERR_INPUT, "case '%s'", c->name);
        cr_expect(strstr(err.msg, want) != NULL, "case '%s': message\n  %s\nlacks\n  %s", c->name,
                  err.msg, want);
        cr_expect(strncmp(err.msg, "t.gguf: ", 8) == 0,
                  "case '%s': message does not start with"
                  " the file name: %s",
                  c->name, err.msg);
        free(b.p);
    }
}

Test(gguf, quotes_at_most_a_bounded_part_of_a_long_key)
{
    struct bb b = {0};
    char key[600];
    memset(key, 'k', sizeof key - 1);
    key[sizeof key - 1] = '\0';
    bb_header(&b, 3, 0, 1);
    bb_str(&b, key);
    bb_u32(&b, 99);
    bb_u32(&b, 0);
    struct gate_err err = {0};
    cr_assert_eq(open_copy_fail(b.p, b.len, 0, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "has unknown value type 99"), "%s", err.msg);
    free(b.p);
}

Test(gguf, reports_a_missing_file_with_its_path)
{
    struct gguf_file *f = NULL;
    struct gate_err err = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/no-such.gguf", check_tmp_dir());
    cr_assert_eq(gguf_open(&f, path, 0, &err), ERR_INPUT);
    cr_assert_null(f);
    cr_assert(strstr(err.msg, "cannot open '") && strstr(err.msg, "no-such.gguf"), "%s", err.msg);
    err_clear(&err);
    cr_assert_eq(gguf_open(&f, check_tmp_dir(), 0, &err), ERR_INPUT, "%s", err.msg);
}

Test(gguf, rejects_an_empty_file_on_disk)
{
    char path[512];
    snprintf(path, sizeof path, "%s/empty.gguf", check_tmp_dir());
    FILE *fp = fopen(path, "wb");
    cr_assert(fp);
    fclose(fp);
    struct gguf_file *f = NULL;
    struct gate_err err = {0};
    cr_assert_eq(gguf_open(&f, path, 0, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "file is empty"), "%s", err.msg);
}

/* ---- the writer ---------------------------------------------------------------------------- */

static const char *VOCAB[] = {"<s>", "hello", "", "wörld", "\xe2\x96\x81the"};
static const int32_t I32S[] = {-1, 0, 1, 2147483647};
static const float F32S[] = {0.5f, -1.25f, 3e38f};

struct wdata {
    float a[96];        /* F32 (32, 3) */
    uint8_t b[2 * 34];  /* Q8_0 (64) */
    uint8_t c[144 * 2]; /* Q4_K (256, 2) */
};

static void wdata_init(struct wdata *d)
{
    for (int i = 0; i < 96; i++)
        d->a[i] = (float)i / 8.0f;
    for (size_t i = 0; i < sizeof d->b; i++)
        d->b[i] = (uint8_t)(i * 13 + 1);
    for (size_t i = 0; i < sizeof d->c; i++)
        d->c[i] = (uint8_t)(i * 31 + 5);
}

static struct gguf_writer *make_writer(const struct wdata *d, uint32_t alignment, int borrowed)
{
    struct gguf_writer *w = gguf_writer_new();
    cr_assert(w);
    if (alignment)
        cr_assert_eq(gguf_writer_set_alignment(w, alignment), 0);
    cr_assert_eq(gguf_writer_add_str(w, "general.architecture", "qwen3"), 0);
    cr_assert_eq(gguf_writer_add_u32(w, "test.u32", 4000000000u), 0);
    cr_assert_eq(gguf_writer_add_i32(w, "test.i32", -12345), 0);
    cr_assert_eq(gguf_writer_add_f32(w, "test.f32", 1e-6f), 0);
    cr_assert_eq(gguf_writer_add_bool(w, "test.bool", 1), 0);
    cr_assert_eq(gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", VOCAB, 5), 0);
    cr_assert_eq(gguf_writer_add_arr_i32(w, "test.arr_i32", I32S, 4), 0);
    cr_assert_eq(gguf_writer_add_arr_f32(w, "test.arr_f32", F32S, 3), 0);
    int64_t ne_a[2] = {32, 3}, ne_b[1] = {64}, ne_c[2] = {256, 2};
    cr_assert_eq(gguf_writer_add_tensor(w, "a", QUANT_F32, 2, ne_a, borrowed ? d->a : NULL), 0);
    cr_assert_eq(gguf_writer_add_tensor(w, "b", QUANT_Q8_0, 1, ne_b, borrowed ? d->b : NULL), 0);
    cr_assert_eq(gguf_writer_add_tensor(w, "c", QUANT_Q4_K, 2, ne_c, borrowed ? d->c : NULL), 0);
    return w;
}

static int fill_wdata(void *ctx, int index, void *buf, size_t nbytes, struct gate_err *err)
{
    const struct wdata *d = ctx;
    const void *src[3] = {d->a, d->b, d->c};
    const size_t len[3] = {sizeof d->a, sizeof d->b, sizeof d->c};
    if (index < 0 || index > 2 || nbytes != len[index])
        return err_set(err, ERR_RUNTIME, "fill: unexpected tensor %d (%zu bytes)", index, nbytes);
    memcpy(buf, src[index], nbytes);
    return 0;
}

static int fill_fails(void *ctx, int index, void *buf, size_t nbytes, struct gate_err *err)
{
    (void)ctx;
    (void)buf;
    (void)nbytes;
    if (index == 1)
        return err_set(err, ERR_RUNTIME, "fill refused tensor %d", index);
    memset(buf, 0, nbytes);
    return 0;
}

/* Check a file written by make_writer(). */
static void check_written(const uint8_t *p, size_t n, uint32_t alignment, const struct wdata *d)
{
    uint8_t *q = dup_exact(p, n);
    struct gguf_file *f = NULL;
    struct gate_err err = {0};
    expect_ok(gguf_open_mem(&f, q, n, "written.gguf", 0, &err), &err);
    cr_assert_eq(f->version, 3);
    cr_assert_eq(f->alignment, alignment);
    cr_assert_eq(f->data_offset % alignment, 0);
    cr_assert_eq(f->n_kv, alignment != GGUF_DEFAULT_ALIGNMENT ? 9 : 8);
    char *s = NULL;
    expect_ok(gguf_get_str(f, "general.architecture", &s, &err), &err);
    cr_assert_str_eq(s, "qwen3");
    free(s);
    uint32_t u = 0;
    expect_ok(gguf_get_u32(f, "test.u32", &u, &err), &err);
    cr_assert_eq(u, 4000000000u);
    cr_assert_eq((int64_t)gguf_kv_uint(gguf_find_kv(f, "test.i32"), 0), -12345);
    float x = 0;
    expect_ok(gguf_get_f32(f, "test.f32", &x, &err), &err);
    cr_assert_eq(x, 1e-6f);
    int bv = 0;
    expect_ok(gguf_get_bool(f, "test.bool", &bv, &err), &err);
    cr_assert_eq(bv, 1);
    const struct gguf_kv *kv = NULL;
    expect_ok(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &kv, &err), &err);
    cr_assert_eq(kv->n, 5);
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(kv->strs[i].len, strlen(VOCAB[i]));
        cr_assert(memcmp(kv->strs[i].ptr, VOCAB[i], kv->strs[i].len) == 0, "token %d", i);
    }
    expect_ok(gguf_get_arr(f, "test.arr_i32", GGUF_TYPE_INT32, &kv, &err), &err);
    cr_assert_eq(kv->n, 4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq((int32_t)gguf_kv_uint(kv, (uint64_t)i), I32S[i]);
    expect_ok(gguf_get_arr(f, "test.arr_f32", GGUF_TYPE_FLOAT32, &kv, &err), &err);
    cr_assert_eq(kv->n, 3);
    for (int i = 0; i < 3; i++)
        cr_assert_eq((float)gguf_kv_float(kv, (uint64_t)i), F32S[i]);

    cr_assert_eq(f->n_tensors, 3);
    const void *src[3] = {d->a, d->b, d->c};
    const uint64_t len[3] = {sizeof d->a, sizeof d->b, sizeof d->c};
    const int types[3] = {QUANT_F32, QUANT_Q8_0, QUANT_Q4_K};
    uint64_t off = 0;
    for (int i = 0; i < 3; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        cr_assert_eq(t->type, types[i]);
        cr_assert_eq(t->nbytes, len[i], "tensor %s", t->name);
        cr_assert_eq(t->offset, off, "tensor %s packed at %" PRIu64, t->name, t->offset);
        cr_assert_eq((const uint8_t *)t->data, q + f->data_offset + off);
        cr_assert_eq(((uintptr_t)t->data - (uintptr_t)q) % alignment, 0);
        cr_assert(memcmp(t->data, src[i], len[i]) == 0, "tensor %s bytes differ", t->name);
        off = (off + len[i] + alignment - 1) / alignment * alignment;
    }
    cr_assert_eq(gguf_find_tensor(f, "c")->ne[1], 2);
    cr_assert_eq(n, f->data_offset + f->tensors[2].offset + f->tensors[2].nbytes,
                 "the file ends right after the last tensor");
    gguf_close(f);
    free(q);
}

Test(gguf, writer_output_reopens_with_the_same_metadata_and_tensors)
{
    struct wdata d;
    wdata_init(&d);
    const uint32_t aligns[] = {GGUF_DEFAULT_ALIGNMENT, 64, 1, 4096};
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
        struct gguf_writer *w = make_writer(&d, aligns[i] == 32 ? 0 : aligns[i], 1);
        uint8_t *p = NULL;
        size_t n = 0;
        struct gate_err err = {0};
        expect_ok(gguf_writer_write_mem(w, &p, &n, &err), &err);
        check_written(p, n, aligns[i], &d);
        free(p);
        gguf_writer_free(w);
    }
}

Test(gguf, writer_fill_callback_gives_the_same_bytes_as_borrowed_data)
{
    struct wdata d;
    wdata_init(&d);
    struct gate_err err = {0};
    struct gguf_writer *w1 = make_writer(&d, 64, 1);
    struct gguf_writer *w2 = make_writer(&d, 64, 0);
    gguf_writer_set_fill(w2, fill_wdata, &d);
    uint8_t *p1 = NULL, *p2 = NULL;
    size_t n1 = 0, n2 = 0;
    expect_ok(gguf_writer_write_mem(w1, &p1, &n1, &err), &err);
    expect_ok(gguf_writer_write_mem(w2, &p2, &n2, &err), &err);
    cr_assert_eq(n1, n2);
    cr_assert(memcmp(p1, p2, n1) == 0, "the two paths wrote different bytes");
    /* and to a file: the same bytes again */
    char path[512];
    snprintf(path, sizeof path, "%s/fill.gguf", check_tmp_dir());
    expect_ok(gguf_writer_write_file(w2, path, &err), &err);
    size_t n3 = 0;
    uint8_t *p3 = check_slurp(path, &n3);
    cr_assert(p3);
    cr_assert_eq(n3, n1);
    cr_assert(memcmp(p1, p3, n1) == 0);
    check_written(p3, n3, 64, &d);
    free(p1);
    free(p2);
    free(p3);
    gguf_writer_free(w1);
    gguf_writer_free(w2);
}

Test(gguf, writer_file_reopens_through_gguf_open)
{
    struct wdata d;
    wdata_init(&d);
    struct gguf_writer *w = make_writer(&d, 64, 1);
    char path[512];
    snprintf(path, sizeof path, "%s/reopen.gguf", check_tmp_dir());
    struct gate_err err = {0};
    expect_ok(gguf_writer_write_file(w, path, &err), &err);
    struct gguf_file *f = NULL;
    expect_ok(gguf_open(&f, path, 0, &err), &err);
    cr_assert_str_eq(f->path, path);
    cr_assert_eq(f->n_tensors, 3);
    cr_assert(memcmp(gguf_find_tensor(f, "c")->data, d.c, sizeof d.c) == 0);
    gguf_close(f);
    gguf_writer_free(w);
}

/* Number of entries in dir besides . and .. */
static int count_entries(const char *dir)
{
    DIR *dp = opendir(dir);
    cr_assert(dp, "cannot list %s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(dp);
    return n;
}

Test(gguf, writer_fails_clearly_when_the_folder_cannot_be_written_and_leaves_no_file)
{
    struct wdata d;
    wdata_init(&d);
    struct gguf_writer *w = make_writer(&d, 0, 1);
    char dir[512], path[700];
    snprintf(dir, sizeof dir, "%s/unwritable", check_tmp_dir());
    cr_assert_eq(mkdir(dir, 0700), 0);

    /* a folder that does not exist */
    snprintf(path, sizeof path, "%s/missing/x.gguf", dir);
    struct gate_err err = {0};
    cr_assert_eq(gguf_writer_write_file(w, path, &err), ERR_ENV);
    cr_assert(strstr(err.msg, "cannot create a file next to '") && strstr(err.msg, path), "%s",
              err.msg);
    cr_assert_eq(count_entries(dir), 0);

    /* a "folder" that is a regular file (fails even for root, unlike a mode-0500 folder) */
    char file[620];
    snprintf(file, sizeof file, "%s/plain", dir);
    FILE *fp = fopen(file, "wb");
    cr_assert(fp);
    fclose(fp);
    snprintf(path, sizeof path, "%s/plain/x.gguf", dir);
    err_clear(&err);
    cr_assert_eq(gguf_writer_write_file(w, path, &err), ERR_ENV);
    cr_assert(strstr(err.msg, "Not a directory"), "%s", err.msg);
    cr_assert_eq(count_entries(dir), 1);

    /* a read-only folder, where permissions bind (not as root) */
    if (geteuid() != 0) {
        char ro[620];
        snprintf(ro, sizeof ro, "%s/ro", dir);
        cr_assert_eq(mkdir(ro, 0500), 0);
        snprintf(path, sizeof path, "%s/x.gguf", ro);
        err_clear(&err);
        cr_assert_eq(gguf_writer_write_file(w, path, &err), ERR_ENV);
        cr_assert(strstr(err.msg, "Permission denied"), "%s", err.msg);
        cr_assert_eq(count_entries(ro), 0);
    }
    gguf_writer_free(w);
}

Test(gguf, writer_leaves_neither_file_nor_temporary_when_a_fill_fails)
{
    struct wdata d;
    wdata_init(&d);
    struct gguf_writer *w = make_writer(&d, 0, 0);
    gguf_writer_set_fill(w, fill_fails, NULL);
    char dir[512], path[700];
    snprintf(dir, sizeof dir, "%s/fillfail", check_tmp_dir());
    cr_assert_eq(mkdir(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/x.gguf", dir);
    struct gate_err err = {0};
    cr_assert_eq(gguf_writer_write_file(w, path, &err), ERR_RUNTIME);
    cr_assert(strstr(err.msg, "fill refused tensor 1"), "%s", err.msg);
    cr_assert_eq(count_entries(dir), 0, "a partial file or temporary was left behind");
    /* an existing file under the name survives a failed rewrite untouched */
    FILE *fp = fopen(path, "wb");
    cr_assert(fp);
    fputs("old", fp);
    fclose(fp);
    err_clear(&err);
    cr_assert_neq(gguf_writer_write_file(w, path, &err), 0);
    size_t n = 0;
    uint8_t *old = check_slurp(path, &n);
    cr_assert(old && n == 3 && memcmp(old, "old", 3) == 0);
    free(old);
    cr_assert_eq(count_entries(dir), 1);
    gguf_writer_free(w);
}

Test(gguf, writer_without_data_or_fill_fails_with_the_tensor_name)
{
    struct wdata d;
    wdata_init(&d);
    struct gguf_writer *w = make_writer(&d, 0, 0);
    uint8_t *p = NULL;
    size_t n = 0;
    struct gate_err err = {0};
    cr_assert_eq(gguf_writer_write_mem(w, &p, &n, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "tensor 'a' has no data and no fill callback"), "%s", err.msg);
    gguf_writer_free(w);
}

Test(gguf, writer_refuses_bad_tensors_and_alignments)
{
    struct gguf_writer *w = gguf_writer_new();
    int64_t ne[1] = {100};
    cr_assert_eq(gguf_writer_add_tensor(w, "x", QUANT_Q4_K, 1, ne, NULL), ERR_INPUT);
    cr_assert_eq(gguf_writer_set_alignment(w, 48), ERR_INPUT);
    cr_assert_eq(gguf_writer_set_alignment(w, 0), ERR_INPUT);
    uint8_t *p = NULL;
    size_t n = 0;
    struct gate_err err = {0};
    cr_assert_eq(gguf_writer_write_mem(w, &p, &n, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "bad tensor"), "%s", err.msg);
    gguf_writer_free(w);
}

/* ---- typed getters ------------------------------------------------------------------------- */

Test(gguf, typed_getters_name_the_key_and_both_types_or_the_missing_key)
{
    struct wdata d;
    wdata_init(&d);
    struct gguf_writer *w = make_writer(&d, 0, 1);
    uint8_t *p = NULL;
    size_t n = 0;
    struct gate_err err = {0};
    expect_ok(gguf_writer_write_mem(w, &p, &n, &err), &err);
    struct gguf_file *f = NULL;
    expect_ok(gguf_open_mem(&f, p, n, "g.gguf", 0, &err), &err);

    uint32_t u;
    cr_assert_eq(gguf_get_u32(f, "test.f32", &u, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "g.gguf: key 'test.f32' has type FLOAT32, expected UINT32"), "%s",
              err.msg);
    err_clear(&err);
    cr_assert_eq(gguf_get_u32(f, "test.i32", &u, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "key 'test.i32' has type INT32, expected UINT32"), "%s", err.msg);
    err_clear(&err);
    float x;
    cr_assert_eq(gguf_get_f32(f, "test.u32", &x, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "has type UINT32, expected FLOAT32"), "%s", err.msg);
    err_clear(&err);
    int bv;
    cr_assert_eq(gguf_get_bool(f, "test.u32", &bv, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "expected BOOL"), "%s", err.msg);
    err_clear(&err);
    char *s = (char *)"sentinel";
    cr_assert_eq(gguf_get_str(f, "tokenizer.ggml.tokens", &s, &err), ERR_INPUT);
    cr_assert_null(s);
    cr_assert(strstr(err.msg, "key 'tokenizer.ggml.tokens' has type ARRAY, expected STRING"), "%s",
              err.msg);
    err_clear(&err);
    const struct gguf_kv *kv;
    cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_INT32, &kv, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "array 'tokenizer.ggml.tokens' has elements of type STRING,"
                              " expected INT32"),
              "%s", err.msg);
    err_clear(&err);
    cr_assert_eq(gguf_get_arr(f, "test.u32", GGUF_TYPE_UINT32, &kv, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "has type UINT32, expected ARRAY"), "%s", err.msg);
    err_clear(&err);
    cr_assert_eq(gguf_get_u32(f, "qwen3.block_count", &u, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "g.gguf: required key 'qwen3.block_count' is missing"), "%s",
              err.msg);
    err_clear(&err);
    cr_assert_eq(gguf_get_str(f, "nope", &s, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "required key 'nope' is missing"), "%s", err.msg);
    /* the first error wins */
    cr_assert_eq(gguf_get_u32(f, "other", &u, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "'nope'"), "%s", err.msg);

    cr_assert_str_eq(gguf_type_name(GGUF_TYPE_FLOAT64), "FLOAT64");
    cr_assert_str_eq(gguf_type_name(13), "unknown");
    cr_assert_str_eq(gguf_type_name(-1), "unknown");
    cr_assert_eq(gguf_type_size(GGUF_TYPE_UINT16), 2);
    cr_assert_eq(gguf_type_size(GGUF_TYPE_STRING), 0);
    cr_assert_eq(gguf_type_size(99), 0);
    gguf_close(f);
    free(p);
    gguf_writer_free(w);
}

/* ---- the conformance models ---------------------------------------------------------------- */

static uint8_t *load_model(const char *name, size_t *n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/conformance/%s/model.gguf", check_shared_dir(), name);
    uint8_t *p = check_slurp(path, n);
    cr_assert(p, "cannot read %s", path);
    return p;
}

Test(gguf, opens_every_conformance_model_from_disk)
{
    static const char *names[] = {"qwen3-dense-tiny-f32",    "qwen3-dense-tiny-q8_0",
                                  "qwen3-dense-tiny-q4_k_m", "qwen3moe-tiny-f32",
                                  "qwen3moe-tiny-q8_0",      "qwen3moe-tiny-q4_k_m"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/conformance/%s/model.gguf", check_shared_dir(), names[i]);
        struct gguf_file *f = NULL;
        struct gate_err err = {0};
        expect_ok(gguf_open(&f, path, 0, &err), &err);
        cr_assert_eq(f->version, 3);
        cr_assert_gt(f->n_tensors, 10);
        const struct gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
        cr_assert(emb, "%s has no token_embd.weight", names[i]);
        cr_assert_eq(emb->ne[1], 512);
        const struct gguf_kv *kv = NULL;
        expect_ok(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &kv, &err), &err);
        cr_assert_eq(kv->n, 512);
        const struct gguf_tensor *last = &f->tensors[f->n_tensors - 1];
        cr_assert_leq(f->data_offset + last->offset + last->nbytes, f->size);
        gguf_close(f);
    }
}

/* splitmix64: a tiny, well-mixed, seedable PRNG. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rng_below(uint64_t *s, uint64_t n)
{
    return n ? rng_next(s) % n : 0;
}

/* Byte positions of the fields the parser decodes (lengths, types, counts), found by opening the
 * pristine model: mutations aimed here reach the parser's decisions, not string contents. */
struct targets {
    size_t *pos;
    size_t n;
    size_t tinfo_start; /* first byte of the tensor infos */
    size_t data_offset; /* first byte of the data blob */
};

static void add_target(struct targets *t, size_t pos)
{
    t->pos = realloc(t->pos, (t->n + 1) * sizeof *t->pos);
    cr_assert(t->pos);
    t->pos[t->n++] = pos;
}

static void find_targets(const uint8_t *p, size_t n, struct targets *tg)
{
    struct gguf_file *f = NULL;
    struct gate_err err = {0};
    expect_ok(gguf_open_mem(&f, p, n, "model", 0, &err), &err);
    memset(tg, 0, sizeof *tg);
    for (size_t i = 0; i < 24; i += 4)
        add_target(tg, i);
    size_t end = 24;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        size_t type_at = kv->offset + 8 + strlen(kv->key);
        add_target(tg, kv->offset);
        add_target(tg, type_at);
        if (kv->type == GGUF_TYPE_ARRAY) {
            add_target(tg, type_at + 4);
            add_target(tg, type_at + 8);
        }
        if (kv->strs) {
            /* the first few and the last string lengths */
            for (uint64_t j = 0; j < kv->n; j++)
                if (j < 4 || j + 1 == kv->n)
                    add_target(tg, (size_t)((const uint8_t *)kv->strs[j].ptr - p) - 8);
            if (kv->n)
                end = (size_t)((const uint8_t *)kv->strs[kv->n - 1].ptr - p) +
                      kv->strs[kv->n - 1].len;
            else
                end = (size_t)(kv->data - p);
        } else {
            enum gguf_type et = kv->type == GGUF_TYPE_ARRAY ? kv->arr_type : kv->type;
            end = (size_t)(kv->data - p) + kv->n * gguf_type_size(et);
            if (kv->type != GGUF_TYPE_ARRAY)
                add_target(tg, (size_t)(kv->data - p));
        }
    }
    tg->tinfo_start = end;
    tg->data_offset = f->data_offset;
    gguf_close(f);
}

/* Open a mutated copy and check the outcome: a clean error, or a file whose every tensor lies
 * inside the buffer (its first and last bytes are read, so ASan sees any escape). */
static int open_mutant(const uint8_t *p, size_t n, unsigned flags, uint64_t id)
{
    uint8_t *q = dup_exact(p, n);
    struct gguf_file *f = NULL;
    struct gate_err err = {0};
    int rc = gguf_open_mem(&f, q, n, "mutant", flags, &err);
    if (rc) {
        cr_assert_eq(rc, ERR_INPUT, "mutation %" PRIu64 ": status %d (%s)", id, rc, err.msg);
        cr_assert_eq(err.code, rc, "mutation %" PRIu64, id);
        cr_assert_gt(strlen(err.msg), 10, "mutation %" PRIu64 ": empty message", id);
        cr_assert_null(f);
    } else {
        volatile uint8_t sink = 0;
        cr_assert(f);
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const struct gguf_tensor *t = &f->tensors[i];
            if (flags & GGUF_OPEN_METADATA_ONLY) {
                cr_assert_null(t->data);
                continue;
            }
            const uint8_t *d = t->data;
            cr_assert(d >= q && t->nbytes <= n && (size_t)(d - q) <= n - t->nbytes,
                      "mutation %" PRIu64 ": tensor '%s' escapes the buffer", id, t->name);
            sink ^= d[0];
            sink ^= d[t->nbytes - 1];
        }
        for (uint64_t i = 0; i < f->n_kv; i++)
            for (uint64_t j = 0; f->kv[i].strs && j < f->kv[i].n; j++)
                if (f->kv[i].strs[j].len)
                    sink ^= (uint8_t)f->kv[i].strs[j].ptr[f->kv[i].strs[j].len - 1];
        (void)sink;
    }
    gguf_close(f);
    free(q);
    return rc;
}

static const uint64_t HUGE_VALUES[] = {
    UINT64_MAX, (uint64_t)INT64_MAX,   1ull << 63, 1ull << 32, 0xffffffffull,         0x7fffffffull,
    1ull << 40, 0x8000000000000001ull, 0,          64,         0xfffffffffffffff0ull,
};

/* count mutations of one model; returns how many were rejected. */
static int mutate_model(const char *name, int count, uint64_t seed)
{
    size_t n = 0;
    uint8_t *orig = load_model(name, &n);
    struct targets tg;
    find_targets(orig, n, &tg);
    cr_assert_lt(tg.data_offset, n);
    uint8_t *work = malloc(n);
    cr_assert(work);
    uint64_t s = seed;
    int rejected = 0;
    for (int i = 0; i < count; i++) {
        memcpy(work, orig, n);
        size_t len = n;
        uint64_t kind = rng_below(&s, 10);
        if (kind < 4) {
            /* 1..4 byte flips: at a parsed field, in the tensor infos, or anywhere before data */
            int flips = 1 + (int)rng_below(&s, 4);
            for (int k = 0; k < flips; k++) {
                uint64_t where = rng_below(&s, 3);
                size_t pos = where == 0 ? tg.pos[rng_below(&s, tg.n)] + rng_below(&s, 8)
                             : where == 1
                                 ? tg.tinfo_start + rng_below(&s, tg.data_offset - tg.tinfo_start)
                                 : rng_below(&s, tg.data_offset);
                if (pos < n)
                    work[pos] ^= (uint8_t)(1 + rng_below(&s, 255));
            }
        } else if (kind < 7) {
            /* truncation: mostly inside the header region, sometimes inside the data */
            len = rng_below(&s, 4) ? (size_t)rng_below(&s, tg.data_offset + 1)
                                   : tg.data_offset + (size_t)rng_below(&s, n - tg.data_offset);
        } else {
            /* an 8-byte overwrite with a huge value, at a field or in the tensor infos */
            uint64_t v = HUGE_VALUES[rng_below(&s, sizeof HUGE_VALUES / sizeof HUGE_VALUES[0])];
            if (rng_below(&s, 4) == 0)
                v = rng_next(&s);
            size_t pos = rng_below(&s, 2)
                             ? tg.pos[rng_below(&s, tg.n)]
                             : tg.tinfo_start + rng_below(&s, tg.data_offset - tg.tinfo_start);
            if (pos + 8 <= n)
                memcpy(work + pos, &v, 8);
        }
        unsigned flags = rng_below(&s, 4) == 0 ? GGUF_OPEN_METADATA_ONLY : 0;
        if (open_mutant(work, len, flags, (uint64_t)i))
            rejected++;
    }
    free(work);
    free(tg.pos);
    free(orig);
    return rejected;
}

static int mutation_count(void)
{
    return check_asan() ? 1000 : 2000;
}

Test(gguf, survives_deterministic_mutations_of_the_moe_model)
{
    int count = mutation_count();
    int rejected = mutate_model("qwen3moe-tiny-q4_k_m", count, 0x6767756631ull);
    /* most mutations of parsed fields must be caught; a few land harmlessly */
    cr_assert_gt(rejected, count / 2, "only %d of %d mutations were rejected", rejected, count);
    cr_assert_lt(rejected, count, "every mutation was rejected: the pristine path is untested");
}

Test(gguf, survives_deterministic_mutations_of_the_dense_model)
{
    int count = mutation_count();
    int rejected = mutate_model("qwen3-dense-tiny-q4_k_m", count, 0x6767756632ull);
    cr_assert_gt(rejected, count / 2, "only %d of %d mutations were rejected", rejected, count);
    cr_assert_lt(rejected, count);
}
