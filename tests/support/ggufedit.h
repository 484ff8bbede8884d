/* ggufedit.h — rewrite a GGUF file with one edit, for tests of what the loader rejects. */
#ifndef GATE_TEST_GGUFEDIT_H
#define GATE_TEST_GGUFEDIT_H

#include <stdint.h>

struct gguf_edit {
    const char *drop_key;    /* remove this metadata key */
    const char *drop_key2;   /* and this one */
    const char *set_u32_key; /* add or replace this key as UINT32 = set_u32 */
    uint32_t set_u32;
    const char *set_f32_key; /* add or replace as FLOAT32 = set_f32 */
    float set_f32;
    const char *set_str_key; /* add or replace as STRING = set_str */
    const char *set_str;
    const char *drop_tensor; /* remove this tensor */
    const char *edit_tensor; /* change this tensor's shape and/or type (data zero-filled) */
    int n_dims;              /* new dims (0 = keep) */
    int64_t ne[4];
    int type; /* new type (-1 = keep) */
};

/* Copy src to dst applying e. Returns 0 or aborts the test with a message. */
void gguf_edit_copy(const char *src, const char *dst, const struct gguf_edit *e);

#endif
