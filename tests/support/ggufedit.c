/* ggufedit.c — see ggufedit.h. Re-adds every record through the writer (all value types the
 * conformance models use), applying the edit on the way. */
#include "ggufedit.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/quant.h"

static int same(const char *a, const char *b)
{
    return a && b && !strcmp(a, b);
}

void gguf_edit_copy(const char *src, const char *dst, const struct gguf_edit *e)
{
    struct gate_err err = {0};
    struct gguf_file *f = NULL;
    cr_assert_eq(gguf_open(&f, src, 0, &err), 0, "%s", err.msg);
    struct gguf_writer *w = gguf_writer_new();
    cr_assert(w);
    void **bufs = calloc(f->n_tensors + 1, sizeof *bufs);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        if (same(kv->key, e->drop_key) || same(kv->key, e->drop_key2) ||
            same(kv->key, e->set_u32_key) || same(kv->key, e->set_f32_key) ||
            same(kv->key, e->set_str_key))
            continue;
        if (!strcmp(kv->key, "general.alignment"))
            continue; /* re-added by set_alignment below */
        switch (kv->type) {
        case GGUF_TYPE_UINT32:
            gguf_writer_add_u32(w, kv->key, (uint32_t)gguf_kv_uint(kv, 0));
            break;
        case GGUF_TYPE_INT32:
            gguf_writer_add_i32(w, kv->key, (int32_t)gguf_kv_uint(kv, 0));
            break;
        case GGUF_TYPE_FLOAT32:
            gguf_writer_add_f32(w, kv->key, (float)gguf_kv_float(kv, 0));
            break;
        case GGUF_TYPE_BOOL:
            gguf_writer_add_bool(w, kv->key, kv->data[0]);
            break;
        case GGUF_TYPE_STRING: {
            char *s = strndup(kv->strs[0].ptr, kv->strs[0].len);
            gguf_writer_add_str(w, kv->key, s);
            free(s);
            break;
        }
        case GGUF_TYPE_ARRAY:
            if (kv->arr_type == GGUF_TYPE_STRING) {
                char **v = calloc(kv->n + 1, sizeof *v);
                for (uint64_t j = 0; j < kv->n; j++)
                    v[j] = strndup(kv->strs[j].ptr, kv->strs[j].len);
                gguf_writer_add_arr_str(w, kv->key, (const char *const *)v, kv->n);
                for (uint64_t j = 0; j < kv->n; j++)
                    free(v[j]);
                free(v);
            } else if (kv->arr_type == GGUF_TYPE_INT32) {
                gguf_writer_add_arr_i32(w, kv->key, (const int32_t *)kv->data, kv->n);
            } else if (kv->arr_type == GGUF_TYPE_FLOAT32) {
                gguf_writer_add_arr_f32(w, kv->key, (const float *)kv->data, kv->n);
            } else {
                cr_assert_fail("ggufedit: array type %d of '%s' not handled", kv->arr_type,
                               kv->key);
            }
            break;
        default:
            cr_assert_fail("ggufedit: value type %d of '%s' not handled", kv->type, kv->key);
        }
    }
    if (f->alignment != GGUF_DEFAULT_ALIGNMENT)
        gguf_writer_set_alignment(w, f->alignment);
    if (e->set_u32_key)
        gguf_writer_add_u32(w, e->set_u32_key, e->set_u32);
    if (e->set_f32_key)
        gguf_writer_add_f32(w, e->set_f32_key, e->set_f32);
    if (e->set_str_key)
        gguf_writer_add_str(w, e->set_str_key, e->set_str);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        if (same(t->name, e->drop_tensor))
            continue;
        if (same(t->name, e->edit_tensor)) {
            int64_t ne[4];
            int nd = e->n_dims ? e->n_dims : (int)t->n_dims;
            for (int d = 0; d < 4; d++)
                ne[d] = e->n_dims ? e->ne[d] : t->ne[d];
            int type = e->type >= 0 ? e->type : t->type;
            int64_t rows = 1;
            for (int d = 1; d < nd; d++)
                rows *= ne[d];
            size_t nb = quant_row_bytes(type, ne[0]) * (size_t)rows;
            bufs[i] = calloc(nb ? nb : 1, 1);
            cr_assert_eq(gguf_writer_add_tensor(w, t->name, type, (uint32_t)nd, ne, bufs[i]), 0);
            continue;
        }
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data), 0);
    }
    cr_assert_eq(gguf_writer_write_file(w, dst, &err), 0, "%s", err.msg);
    gguf_writer_free(w);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        free(bufs[i]);
    free(bufs);
    gguf_close(f);
}
