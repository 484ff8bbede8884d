/* vocab.c — tokenizer metadata writers: import of a Hugging Face tokenizer.json.gz (zlib +
 * jansson) and the synthetic byte-level vocabulary of the tiny models.
 *
 * The import mirrors convert_hf_to_gguf.py's get_vocab_base() for Qwen (see vocab.h); strings
 * handed to the writer are borrowed from the parsed JSON or from one owned arena, and the writer
 * copies them. Start reading: vocab_import_hf().
 */
#include "vocab.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "tokenizer.h"

/* GPT-2 bytes_to_unicode: the code point standing for byte b. */
static uint32_t byte_cp(int b)
{
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (printable)
        return (uint32_t)b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF)))
            n++;
    return 256u + (uint32_t)n;
}

static int put_cp(char *p, uint32_t c)
{
    if (c < 0x80) {
        p[0] = (char)c;
        return 1;
    }
    p[0] = (char)(0xC0 | (c >> 6));
    p[1] = (char)(0x80 | (c & 0x3F));
    return 2;
}

/* Read a whole gzip (or plain) file; *out malloc'd and NUL-terminated. */
static int read_gz(const char *path, char **out, size_t *size, struct gate_err *err)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;
    gzFile gz = gzopen(path, "rb");
    if (!gz) {
        rc = err_set(err, ERR_ENV, "cannot open '%s'", path);
        goto done;
    }
    for (;;) {
        if (cap - len < 65536) {
            cap = cap ? cap * 2 : 1 << 22;
            char *p = realloc(buf, cap + 1);
            if (!p) {
                rc = err_set(err, ERR_ENV, "out of memory reading '%s'", path);
                goto done;
            }
            buf = p;
        }
        int r = gzread(gz, buf + len, (unsigned)(cap - len));
        if (r < 0) {
            int zerr;
            const char *m = gzerror(gz, &zerr);
            rc = err_set(err, ERR_INPUT, "cannot decompress '%s': %s", path, m);
            goto done;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    *out = buf;
    *size = len;
    buf = NULL;
done:
    if (gz)
        gzclose(gz);
    free(buf);
    return rc;
}

static int looks_special(const char *s)
{
    size_t n = strlen(s);
    return n >= 4 && strncmp(s, "<|", 2) == 0 && strcmp(s + n - 2, "|>") == 0;
}

/* The id of an id-valued JSON integer within [0, limit), else -1. */
static long json_id(const json_t *v, long limit)
{
    if (!json_is_integer(v))
        return -1;
    json_int_t x = json_integer_value(v);
    return x >= 0 && x < limit ? (long)x : -1;
}

#define MAX_IDS (1L << 24)

int vocab_import_hf(struct gguf_writer *w, const char *path, uint32_t pad_to, struct gate_err *err)
{
    char *raw = NULL, *pads = NULL, *merge_text = NULL;
    const char **tokens = NULL, **merges = NULL;
    int32_t *types = NULL;
    size_t raw_len = 0;
    json_t *root = NULL;
    json_error_t jerr;
    int rc = read_gz(path, &raw, &raw_len, err);
    if (rc)
        goto done;
    root = json_loadb(raw, raw_len, 0, &jerr);
    if (!root) {
        rc = err_set(err, ERR_INPUT, "'%s': invalid JSON at line %d column %d: %s", path, jerr.line,
                     jerr.column, jerr.text);
        goto done;
    }
    json_t *model = json_object_get(root, "model");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *jmerges = json_object_get(model, "merges");
    json_t *added = json_object_get(root, "added_tokens");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (!mtype || strcmp(mtype, "BPE") != 0 || !json_is_object(vocab) || !json_is_array(jmerges) ||
        (added && !json_is_array(added))) {
        rc = err_set(err, ERR_INPUT,
                     "'%s': expected a BPE model with model.vocab, model.merges and added_tokens",
                     path);
        goto done;
    }

    /* Size: the largest id + 1, then padded. */
    long n = 0;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val)
    {
        long id = json_id(val, MAX_IDS);
        if (id < 0) {
            rc = err_set(err, ERR_INPUT, "'%s': model.vocab['%s'] is not a valid id", path, key);
            goto done;
        }
        if (id + 1 > n)
            n = id + 1;
    }
    size_t i;
    json_array_foreach(added, i, val)
    {
        long id = json_id(json_object_get(val, "id"), MAX_IDS);
        if (id < 0 || !json_is_string(json_object_get(val, "content"))) {
            rc = err_set(err, ERR_INPUT, "'%s': added_tokens[%zu] has no valid id and content",
                         path, i);
            goto done;
        }
        if (id + 1 > n)
            n = id + 1;
    }
    if (pad_to > MAX_IDS) {
        rc = err_set(err, ERR_INPUT, "pad_to = %u is larger than %ld tokens", pad_to, MAX_IDS);
        goto done;
    }
    if (pad_to && (long)pad_to < n) {
        rc = err_set(err, ERR_INPUT, "'%s' has %ld token ids, more than pad_to = %u", path, n,
                     pad_to);
        goto done;
    }
    if (pad_to)
        n = (long)pad_to;

    tokens = calloc((size_t)n, sizeof *tokens);
    types = calloc((size_t)n, sizeof *types);
    pads = malloc((size_t)n * 24);
    if (!tokens || !types || !pads) {
        rc = err_set(err, ERR_ENV, "out of memory importing '%s'", path);
        goto done;
    }
    json_object_foreach(vocab, key, val)
    {
        long id = json_id(val, n);
        if (tokens[id]) {
            rc = err_set(err, ERR_INPUT, "'%s': id %ld appears twice in model.vocab", path, id);
            goto done;
        }
        tokens[id] = key;
        types[id] = TOK_TYPE_NORMAL;
    }
    long bos = -1, eos = -1;
    json_array_foreach(added, i, val)
    {
        long id = json_id(json_object_get(val, "id"), n);
        json_t *content = json_object_get(val, "content");
        const char *s = json_string_value(content);
        if (strlen(s) != json_string_length(content)) {
            rc = err_set(err, ERR_INPUT, "'%s': added_tokens[%zu] contains a NUL byte", path, i);
            goto done;
        }
        if (tokens[id] && strcmp(tokens[id], s) != 0) {
            rc = err_set(err, ERR_INPUT, "'%s': added token '%s' reuses id %ld of '%s'", path, s,
                         id, tokens[id]);
            goto done;
        }
        tokens[id] = s;
        types[id] = json_is_true(json_object_get(val, "special")) || looks_special(s)
                        ? TOK_TYPE_CONTROL
                        : TOK_TYPE_USER_DEFINED;
        if (strcmp(s, "<|endoftext|>") == 0)
            bos = id;
        if (strcmp(s, "<|im_end|>") == 0)
            eos = id;
    }
    if (bos < 0 || eos < 0) {
        rc = err_set(err, ERR_INPUT, "'%s' has no added token '%s'", path,
                     bos < 0 ? "<|endoftext|>" : "<|im_end|>");
        goto done;
    }
    for (long id = 0; id < n; id++)
        if (!tokens[id]) {
            char *p = pads + id * 24;
            snprintf(p, 24, "[PAD%d]", (int)id);
            tokens[id] = p;
            types[id] = TOK_TYPE_UNUSED;
        }

    /* Merges: "left right" strings (older files) or [left, right] pairs (newer ones). */
    size_t nm = json_array_size(jmerges), text_len = 0;
    json_array_foreach(jmerges, i, val)
    {
        if (json_is_string(val)) {
            text_len += json_string_length(val) + 1;
        } else if (json_is_array(val) && json_array_size(val) == 2 &&
                   json_is_string(json_array_get(val, 0)) &&
                   json_is_string(json_array_get(val, 1))) {
            text_len += json_string_length(json_array_get(val, 0)) +
                        json_string_length(json_array_get(val, 1)) + 2;
        } else {
            rc = err_set(err, ERR_INPUT, "'%s': model.merges[%zu] is neither a string nor a pair",
                         path, i);
            goto done;
        }
    }
    merges = malloc((nm ? nm : 1) * sizeof *merges);
    merge_text = malloc(text_len + 1);
    if (!merges || !merge_text) {
        rc = err_set(err, ERR_ENV, "out of memory importing '%s'", path);
        goto done;
    }
    char *p = merge_text;
    json_array_foreach(jmerges, i, val)
    {
        merges[i] = p;
        if (json_is_string(val)) {
            p += sprintf(p, "%s", json_string_value(val)) + 1;
        } else {
            p += sprintf(p, "%s %s", json_string_value(json_array_get(val, 0)),
                         json_string_value(json_array_get(val, 1))) +
                 1;
        }
    }

    if (gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2") ||
        gguf_writer_add_str(w, "tokenizer.ggml.pre", "qwen2") ||
        gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tokens, (uint64_t)n) ||
        gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)n) ||
        gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, nm) ||
        gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos) ||
        gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos) ||
        gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)bos) ||
        gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 0))
        rc = err_set(err, ERR_ENV, "out of memory adding the vocabulary of '%s'", path);
done:
    json_decref(root);
    free(raw);
    free(pads);
    free(merge_text);
    free((void *)tokens);
    free((void *)merges);
    free(types);
    return rc;
}

/* ---- synthetic byte-level vocabulary ---------------------------------------------------- */

#define BL_MIN 259
#define BL_MAX (259 + 256 + 676 * 3)

int vocab_add_byte_level(struct gguf_writer *w, uint32_t n_vocab, struct gate_err *err)
{
    static const char freq[] = "etaoinshrdlcumwfgypbvkjxqz";
    char *arena = NULL;
    const char **tokens = NULL, **merges = NULL;
    int32_t *types = NULL;
    int rc = 0;
    if (n_vocab < BL_MIN || n_vocab > BL_MAX)
        return err_set(err, ERR_INPUT, "a byte-level vocabulary needs %d..%d tokens, not %u",
                       BL_MIN, BL_MAX, n_vocab);
    uint32_t n_merges = n_vocab - 259;
    tokens = calloc(n_vocab, sizeof *tokens);
    merges = calloc(n_merges ? n_merges : 1, sizeof *merges);
    types = malloc(n_vocab * sizeof *types);
    arena = malloc((size_t)n_vocab * 32);
    if (!tokens || !merges || !types || !arena) {
        rc = err_set(err, ERR_ENV, "out of memory building a %u-token vocabulary", n_vocab);
        goto done;
    }

    /* Byte tokens ordered by code point (GPT-2's order): printable bytes, then the rest. */
    char sym[256][3];
    int byte_at[256], nb = 0;
    for (int b = 0; b < 256; b++) {
        int l = put_cp(sym[b], byte_cp(b));
        sym[b][l] = '\0';
    }
    for (uint32_t c = 0; c < 324; c++)
        for (int b = 0; b < 256; b++)
            if (byte_cp(b) == c)
                byte_at[nb++] = b;
    char *p = arena;
    uint32_t id = 0;
    for (int k = 0; k < 256; k++) {
        tokens[id] = sym[byte_at[k]];
        types[id++] = TOK_TYPE_NORMAL;
    }

    /* Candidate merges in order; the first n_merges are kept. */
    const char *G = sym[' '];
    uint32_t m = 0;
#define ADD_MERGE(L, R)                                                                            \
    do {                                                                                           \
        if (m < n_merges) {                                                                        \
            merges[m++] = p;                                                                       \
            p += sprintf(p, "%s %s", (L), (R)) + 1;                                                \
            tokens[id] = p;                                                                        \
            p += sprintf(p, "%s%s", (L), (R)) + 1;                                                 \
            types[id++] = TOK_TYPE_NORMAL;                                                         \
        }                                                                                          \
    } while (0)
    ADD_MERGE(G, G);
    for (int k = 0; freq[k]; k++)
        ADD_MERGE(G, sym[(int)freq[k]]);
    for (int k = 0; k < 256; k++) {
        int b = byte_at[k];
        if (b != ' ' && !(b >= 'a' && b <= 'z'))
            ADD_MERGE(G, sym[b]);
    }
    char a[3] = {0}, c[3] = {0}, ga[8];
    for (int x = 'a'; x <= 'z'; x++)
        for (int y = 'a'; y <= 'z'; y++) {
            a[0] = (char)x;
            c[0] = (char)y;
            ADD_MERGE(a, c);
        }
    for (int x = 'a'; x <= 'z'; x++)
        for (int y = 'a'; y <= 'z'; y++) {
            snprintf(ga, sizeof ga, "%s%c", G, x);
            c[0] = (char)y;
            ADD_MERGE(ga, c);
        }
    for (int x = 'A'; x <= 'Z'; x++)
        for (int y = 'a'; y <= 'z'; y++) {
            a[0] = (char)x;
            c[0] = (char)y;
            ADD_MERGE(a, c);
        }
#undef ADD_MERGE
    static const char *const ctl[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (int k = 0; k < 3; k++) {
        tokens[id] = ctl[k];
        types[id++] = TOK_TYPE_CONTROL;
    }
    if (id != n_vocab || m != n_merges)
        abort(); /* the candidate list is longer than BL_MAX allows */

    if (gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2") ||
        gguf_writer_add_str(w, "tokenizer.ggml.pre", "qwen2") ||
        gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tokens, n_vocab) ||
        gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", types, n_vocab) ||
        gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, n_merges) ||
        gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", n_vocab - 3) ||
        gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", n_vocab - 1) ||
        gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", n_vocab - 3) ||
        gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 0))
        rc = err_set(err, ERR_ENV, "out of memory adding a byte-level vocabulary");
done:
    free(arena);
    free((void *)tokens);
    free((void *)merges);
    free(types);
    return rc;
}
