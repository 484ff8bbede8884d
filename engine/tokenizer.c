/* tokenizer.c — byte-level BPE with the Qwen2 pre-tokenizer (see tokenizer.h for the pipeline).
 *
 * Data layout: token texts live in one arena (text + off[id]); their decoded bytes in another
 * (dec + dec_off[id]). Two open-addressing hash tables: token text -> id, and (left id, right id)
 * -> (merge rank, merged id), so BPE runs on ids and never builds strings. Nothing is cached
 * across calls and the struct is read-only after tok_load(), so encoding is thread-safe.
 * Start reading: tok_encode() -> encode_segment() -> bpe_word().
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include "tokenizer.h"

#include <limits.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* The Qwen2 split regex of tokenizer.json, with \s spelled out as Unicode White_Space (what HF's
 * Oniguruma matches): PCRE2's UCP \s also takes U+180E, which Oniguruma does not. */
#define WS                                                                                         \
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"             \
    "\\x{202F}\\x{205F}\\x{3000}"
static const char QWEN2_PATTERN[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
                                    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
                                    "|\\p{N}"
                                    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*"
                                    "|[" WS "]*[\\r\\n]+"
                                    "|[" WS "]+(?![^" WS "])"
                                    "|[" WS "]+";

struct merge_slot {
    uint64_t key; /* (left << 32) | right; EMPTY_KEY when free */
    int32_t rank;
    int32_t result;
};
#define EMPTY_KEY UINT64_MAX

struct tok {
    int n_vocab;
    char *text;        /* all token texts back to back */
    uint32_t *off;     /* n_vocab + 1 offsets into text */
    uint8_t *type;     /* enum tok_type per token */
    char *dec;         /* decoded bytes of every token back to back */
    uint32_t *dec_off; /* n_vocab + 1 offsets into dec */

    int32_t *tmap; /* token text -> id, -1 = free; tmap_mask + 1 slots */
    uint32_t tmap_mask;
    struct merge_slot *mmap; /* mmap_mask + 1 slots */
    uint32_t mmap_mask;
    int n_merges;

    int32_t byte_tok[256]; /* id of the one-symbol token of each byte */

    int32_t *special; /* control and user-defined ids with non-empty text, longest first */
    int n_special;
    uint8_t special_first[256]; /* 1 when some special token starts with this byte */

    pcre2_code *re;
    int32_t bos, eos, pad;
};

/* ---- GPT-2 bytes_to_unicode ------------------------------------------------------------- */

/* Printable Latin-1 bytes map to themselves; the other 68 bytes to 256, 257, ... in order. */
static uint32_t byte_to_cp(int b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
        return (uint32_t)b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF)))
            n++;
    return 256u + (uint32_t)n;
}

struct byte_map {
    uint32_t cp[256];     /* byte -> code point */
    int16_t byte_of[324]; /* code point -> byte, -1 if not a mapped code point */
    char utf8[256][3];    /* UTF-8 of cp[b] */
    uint8_t utf8_len[256];
};

static void byte_map_init(struct byte_map *m)
{
    for (int i = 0; i < 324; i++)
        m->byte_of[i] = -1;
    for (int b = 0; b < 256; b++) {
        uint32_t c = byte_to_cp(b);
        m->cp[b] = c;
        m->byte_of[c] = (int16_t)b;
        if (c < 0x80) {
            m->utf8[b][0] = (char)c;
            m->utf8_len[b] = 1;
        } else {
            m->utf8[b][0] = (char)(0xC0 | (c >> 6));
            m->utf8[b][1] = (char)(0x80 | (c & 0x3F));
            m->utf8_len[b] = 2;
        }
    }
}

/* ---- small helpers ---------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static uint32_t table_size(uint64_t n)
{
    uint32_t s = 16;
    while (s < 2 * n)
        s <<= 1;
    return s;
}

static int32_t find_len(const struct tok *t, const char *s, size_t n)
{
    uint32_t i = (uint32_t)hash_bytes(s, n) & t->tmap_mask;
    for (;;) {
        int32_t id = t->tmap[i];
        if (id < 0)
            return -1;
        size_t len = t->off[id + 1] - t->off[id];
        if (len == n && memcmp(t->text + t->off[id], s, n) == 0)
            return id;
        i = (i + 1) & t->tmap_mask;
    }
}

static const struct merge_slot *find_merge(const struct tok *t, int32_t left, int32_t right)
{
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    uint32_t i = (uint32_t)hash_u64(key) & t->mmap_mask;
    for (;;) {
        const struct merge_slot *s = &t->mmap[i];
        if (s->key == key)
            return s;
        if (s->key == EMPTY_KEY)
            return NULL;
        i = (i + 1) & t->mmap_mask;
    }
}

/* Decode one UTF-8 sequence at s[0..n) strictly (Unicode Table 3-7). Returns its length and sets
 * *cp, or returns -k where k >= 1 is the length of the maximal ill-formed subpart to replace. */
static int utf8_next(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        if (b == 0xE0)
            lo = 0xA0;
        if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        if (b == 0xF0)
            lo = 0x90;
        if (b == 0xF4)
            hi = 0x8F;
    } else {
        return -1;
    }
    uint32_t c = b & (0x3F >> need);
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n)
            return -k;
        uint8_t x = s[k];
        if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF))
            return -k;
        c = (c << 6) | (x & 0x3F);
    }
    *cp = c;
    return need + 1;
}

/* Growable int32 vector. */
struct ivec {
    int32_t *v;
    int n, cap;
};

static int ivec_push(struct ivec *a, int32_t x)
{
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 64;
        int32_t *p = realloc(a->v, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        a->v = p;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

/* ---- loading ---------------------------------------------------------------------------- */

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const struct tok *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->off[x + 1] - t->off[x], ly = t->off[y + 1] - t->off[y];
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int require_str(const struct gguf_file *f, const char *key, const char *want,
                       struct gate_err *err)
{
    char *v = NULL;
    int rc = gguf_get_str(f, key, &v, err);
    if (rc)
        goto done;
    if (strcmp(v, want) != 0)
        rc = err_set(err, ERR_INPUT, "%s: %s is '%s'; only '%s' is supported", f->path, key, v,
                     want);
done:
    free(v);
    return rc;
}

static int opt_id(const struct gguf_file *f, const char *key, int n_vocab, int32_t *out,
                  struct gate_err *err)
{
    *out = -1;
    if (!gguf_find_kv(f, key))
        return 0;
    uint32_t v;
    int rc = gguf_get_u32(f, key, &v, err);
    if (rc)
        return rc;
    if (v >= (uint32_t)n_vocab)
        return err_set(err, ERR_INPUT, "%s: %s = %u is outside the vocabulary (%d tokens)", f->path,
                       key, v, n_vocab);
    *out = (int32_t)v;
    return 0;
}

/* Bytes a normal token stands for: each symbol through the inverse byte map; a token with a
 * symbol outside the map decodes to its raw text (as HF's ByteLevel decoder does). */
static size_t decode_normal(const struct byte_map *bm, const char *s, size_t n, char *out)
{
    size_t o = 0, i = 0;
    while (i < n) {
        uint32_t cp;
        int k = utf8_next((const uint8_t *)s + i, n - i, &cp);
        if (k < 0 || cp >= 324 || bm->byte_of[cp] < 0) {
            memcpy(out, s, n);
            return n;
        }
        out[o++] = (char)bm->byte_of[cp];
        i += (size_t)k;
    }
    return o;
}

static int load_tokens(struct tok *t, const struct gguf_file *f, const struct byte_map *bm,
                       struct gate_err *err)
{
    const struct gguf_kv *kv = NULL, *tt = NULL;
    int rc = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &kv, err);
    if (rc)
        return rc;
    if (kv->n == 0 || kv->n > (uint64_t)INT32_MAX / 2)
        return err_set(err, ERR_INPUT, "%s: tokenizer.ggml.tokens has %llu entries", f->path,
                       (unsigned long long)kv->n);
    int n = (int)kv->n;
    if (gguf_find_kv(f, "tokenizer.ggml.token_type")) {
        rc = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &tt, err);
        if (rc)
            return rc;
        if (tt->n != kv->n)
            return err_set(err, ERR_INPUT,
                           "%s: tokenizer.ggml.token_type has %llu entries but there are %d tokens",
                           f->path, (unsigned long long)tt->n, n);
    }
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += kv->strs[i].len;
    if (total >= UINT32_MAX)
        return err_set(err, ERR_INPUT, "%s: tokenizer.ggml.tokens is too large", f->path);

    t->n_vocab = n;
    t->off = malloc(((size_t)n + 1) * sizeof *t->off);
    t->dec_off = malloc(((size_t)n + 1) * sizeof *t->dec_off);
    t->type = malloc((size_t)n);
    t->text = malloc(total + 1);
    t->dec = malloc(total + 1);
    t->tmap_mask = table_size((uint64_t)n) - 1;
    t->tmap = malloc(((size_t)t->tmap_mask + 1) * sizeof *t->tmap);
    if (!t->off || !t->dec_off || !t->type || !t->text || !t->dec || !t->tmap)
        return err_set(err, ERR_ENV, "out of memory loading %d tokens", n);
    memset(t->tmap, 0xFF, ((size_t)t->tmap_mask + 1) * sizeof *t->tmap);

    uint32_t o = 0, d = 0;
    for (int i = 0; i < n; i++) {
        const struct gguf_str *s = &kv->strs[i];
        int ty = TOK_TYPE_NORMAL;
        if (tt) {
            ty = (int)(int32_t)gguf_kv_uint(tt, (uint64_t)i);
            if (ty < TOK_TYPE_NORMAL || ty > TOK_TYPE_BYTE)
                return err_set(err, ERR_INPUT, "%s: tokenizer.ggml.token_type[%d] = %d is unknown",
                               f->path, i, ty);
        }
        t->type[i] = (uint8_t)ty;
        t->off[i] = o;
        t->dec_off[i] = d;
        memcpy(t->text + o, s->ptr, s->len);
        if (ty == TOK_TYPE_NORMAL || ty == TOK_TYPE_BYTE) {
            d += (uint32_t)decode_normal(bm, s->ptr, s->len, t->dec + d);
        } else if (ty != TOK_TYPE_UNUSED) {
            memcpy(t->dec + d, s->ptr, s->len);
            d += (uint32_t)s->len;
        }
        o += (uint32_t)s->len;
        /* Insert; the first of duplicate texts keeps the slot. */
        uint32_t h = (uint32_t)hash_bytes(s->ptr, s->len) & t->tmap_mask;
        while (t->tmap[h] >= 0) {
            int32_t j = t->tmap[h];
            if (t->off[j + 1] - t->off[j] == s->len &&
                memcmp(t->text + t->off[j], s->ptr, s->len) == 0)
                break;
            h = (h + 1) & t->tmap_mask;
        }
        t->off[i + 1] = o; /* later tokens compare against this one's end */
        if (t->tmap[h] < 0)
            t->tmap[h] = i;
    }
    t->off[n] = o;
    t->dec_off[n] = d;
    return 0;
}

static int load_merges(struct tok *t, const struct gguf_file *f, struct gate_err *err)
{
    const struct gguf_kv *kv = NULL;
    int rc = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING, &kv, err);
    if (rc)
        return rc;
    if (kv->n >= (uint64_t)INT32_MAX / 2)
        return err_set(err, ERR_INPUT, "%s: tokenizer.ggml.merges has %llu entries", f->path,
                       (unsigned long long)kv->n);
    t->n_merges = (int)kv->n;
    t->mmap_mask = table_size(kv->n) - 1;
    t->mmap = malloc(((size_t)t->mmap_mask + 1) * sizeof *t->mmap);
    char *cat = NULL;
    size_t cat_cap = 0;
    if (!t->mmap)
        return err_set(err, ERR_ENV, "out of memory loading %d merges", t->n_merges);
    for (uint32_t i = 0; i <= t->mmap_mask; i++)
        t->mmap[i].key = EMPTY_KEY;

    for (int r = 0; r < t->n_merges; r++) {
        const struct gguf_str *s = &kv->strs[r];
        /* Split at the first space after the first byte, as llama.cpp does. */
        const char *sp = s->len > 1 ? memchr(s->ptr + 1, ' ', s->len - 1) : NULL;
        if (!sp) {
            rc = err_set(err, ERR_INPUT, "%s: tokenizer.ggml.merges[%d] '%.*s' has no space",
                         f->path, r, (int)(s->len > 200 ? 200 : s->len), s->ptr);
            goto done;
        }
        size_t ll = (size_t)(sp - s->ptr), rl = s->len - ll - 1;
        int32_t l = find_len(t, s->ptr, ll), rr = find_len(t, sp + 1, rl);
        if (ll + rl > cat_cap) {
            cat_cap = (ll + rl) * 2;
            char *p = realloc(cat, cat_cap);
            if (!p) {
                rc = err_set(err, ERR_ENV, "out of memory loading merges");
                goto done;
            }
            cat = p;
        }
        memcpy(cat, s->ptr, ll);
        memcpy(cat + ll, sp + 1, rl);
        int32_t res = find_len(t, cat, ll + rl);
        if (l < 0 || rr < 0 || res < 0) {
            rc = err_set(err, ERR_INPUT,
                         "%s: tokenizer.ggml.merges[%d] '%.*s': '%.*s' is not a token", f->path, r,
                         (int)(s->len > 200 ? 200 : s->len), s->ptr,
                         (int)(l < 0    ? ll
                               : rr < 0 ? rl
                                        : ll + rl),
                         l < 0    ? s->ptr
                         : rr < 0 ? sp + 1
                                  : cat);
            goto done;
        }
        uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)rr;
        uint32_t h = (uint32_t)hash_u64(key) & t->mmap_mask;
        while (t->mmap[h].key != EMPTY_KEY && t->mmap[h].key != key)
            h = (h + 1) & t->mmap_mask;
        if (t->mmap[h].key == EMPTY_KEY) { /* a repeated pair keeps its best (first) rank */
            t->mmap[h].key = key;
            t->mmap[h].rank = r;
            t->mmap[h].result = res;
        }
    }
done:
    free(cat);
    return rc;
}

static int load_special(struct tok *t, const struct byte_map *bm, const char *path,
                        struct gate_err *err)
{
    for (int b = 0; b < 256; b++) {
        t->byte_tok[b] = find_len(t, bm->utf8[b], bm->utf8_len[b]);
        if (t->byte_tok[b] < 0)
            return err_set(err, ERR_INPUT, "%s: byte 0x%02X has no token '%.*s' in the vocabulary",
                           path, b, (int)bm->utf8_len[b], bm->utf8[b]);
    }
    int n = 0;
    for (int i = 0; i < t->n_vocab; i++)
        if ((t->type[i] == TOK_TYPE_CONTROL || t->type[i] == TOK_TYPE_USER_DEFINED) &&
            t->off[i + 1] > t->off[i])
            n++;
    t->special = malloc(((size_t)n + 1) * sizeof *t->special);
    if (!t->special)
        return err_set(err, ERR_ENV, "tokenizer: out of memory for the special-token table");
    n = 0;
    for (int i = 0; i < t->n_vocab; i++)
        if ((t->type[i] == TOK_TYPE_CONTROL || t->type[i] == TOK_TYPE_USER_DEFINED) &&
            t->off[i + 1] > t->off[i]) {
            t->special[n++] = i;
            t->special_first[(uint8_t)t->text[t->off[i]]] = 1;
        }
    t->n_special = n;
    qsort_r(t->special, (size_t)n, sizeof *t->special, cmp_special, t);
    return 0;
}

int tok_load(struct tok **out, const struct gguf_file *f, struct gate_err *err)
{
    struct byte_map bm;
    struct tok *t = calloc(1, sizeof *t);
    int rc = 0;
    *out = NULL;
    if (!t)
        return err_set(err, ERR_ENV, "tokenizer: out of memory for the tokenizer");
    byte_map_init(&bm);

    rc = require_str(f, "tokenizer.ggml.model", "gpt2", err);
    if (!rc)
        rc = require_str(f, "tokenizer.ggml.pre", "qwen2", err);
    if (!rc)
        rc = load_tokens(t, f, &bm, err);
    if (!rc)
        rc = load_merges(t, f, err);
    if (!rc)
        rc = load_special(t, &bm, f->path, err);
    if (!rc)
        rc = opt_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos, err);
    if (!rc)
        rc = opt_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos, err);
    if (!rc)
        rc = opt_id(f, "tokenizer.ggml.padding_token_id", t->n_vocab, &t->pad, err);
    if (rc)
        goto done;

    int ecode;
    PCRE2_SIZE eoff;
    t->re = pcre2_compile((PCRE2_SPTR)QWEN2_PATTERN, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                          &ecode, &eoff, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ecode, msg, sizeof msg);
        rc = err_set(err, ERR_ENV, "cannot compile the qwen2 split regex at offset %zu: %s",
                     (size_t)eoff, (const char *)msg);
        goto done;
    }
    *out = t;
    t = NULL;
done:
    tok_free(t);
    return rc;
}

void tok_free(struct tok *t)
{
    if (!t)
        return;
    pcre2_code_free(t->re);
    free(t->text);
    free(t->off);
    free(t->type);
    free(t->dec);
    free(t->dec_off);
    free(t->tmap);
    free(t->mmap);
    free(t->special);
    free(t);
}

/* ---- encoding --------------------------------------------------------------------------- */

/* A candidate merge of the adjacent symbols left and right (indices into the word). */
struct pair {
    int32_t rank;
    int32_t left, right;
    int32_t left_id, right_id; /* the ids when queued; a changed id marks the entry stale */
};

/* Per-call scratch, grown as needed; freed by tok_encode(). */
struct scratch {
    int32_t *id, *prev, *next; /* the word's symbols as a linked list; id -1 = merged away */
    struct pair *heap;
    size_t cap;  /* symbols; the heap holds up to 3 * cap pairs */
    char *clean; /* UTF-8 with ill-formed parts replaced */
    size_t clean_cap;
    pcre2_match_data *md;
};

static int pair_less(const struct pair *a, const struct pair *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(struct pair *h, size_t *n, struct pair p)
{
    size_t i = (*n)++;
    while (i > 0 && pair_less(&p, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = p;
}

static struct pair heap_pop(struct pair *h, size_t *n)
{
    struct pair top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && pair_less(&h[c + 1], &h[c]))
            c++;
        if (!pair_less(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

static void queue_pair(const struct tok *t, struct scratch *s, size_t *nh, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return;
    const struct merge_slot *ms = find_merge(t, s->id[l], s->id[r]);
    if (ms)
        heap_push(s->heap, nh, (struct pair){ms->rank, l, r, s->id[l], s->id[r]});
}

/* BPE over one word's bytes: start from one symbol per byte and repeatedly merge the adjacent
 * pair of lowest rank, leftmost on ties (HF's priority order); append the final ids to out.
 * A heap keeps this O(n log n), so a long whitespace run costs little. */
static int bpe_word(const struct tok *t, struct scratch *s, const uint8_t *w, size_t n,
                    struct ivec *out)
{
    if (n == 1)
        return ivec_push(out, t->byte_tok[w[0]]);
    if (n > s->cap) {
        size_t cap = n * 2;
        int32_t *a = realloc(s->id, cap * sizeof *a), *b = NULL, *c = NULL;
        if (a)
            s->id = a;
        b = a ? realloc(s->prev, cap * sizeof *b) : NULL;
        if (b)
            s->prev = b;
        c = b ? realloc(s->next, cap * sizeof *c) : NULL;
        if (c)
            s->next = c;
        struct pair *h = c ? realloc(s->heap, 3 * cap * sizeof *h) : NULL;
        if (!h)
            return -1;
        s->heap = h;
        s->cap = cap;
    }
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        s->id[i] = t->byte_tok[w[i]];
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++)
        queue_pair(t, s, &nh, (int32_t)i, (int32_t)i + 1);
    while (nh > 0) {
        struct pair p = heap_pop(s->heap, &nh);
        if (s->id[p.left] != p.left_id || s->id[p.right] != p.right_id ||
            s->next[p.left] != p.right)
            continue; /* stale: one side was merged since this pair was queued */
        s->id[p.left] = find_merge(t, p.left_id, p.right_id)->result;
        s->id[p.right] = -1;
        s->next[p.left] = s->next[p.right];
        if (s->next[p.right] >= 0)
            s->prev[s->next[p.right]] = p.left;
        queue_pair(t, s, &nh, s->prev[p.left], p.left);
        queue_pair(t, s, &nh, p.left, s->next[p.left]);
    }
    for (int32_t i = 0; i >= 0; i = s->next[i])
        if (ivec_push(out, s->id[i]))
            return -1;
    return 0;
}

/* Replace every maximal ill-formed subpart of s[0..n) by U+FFFD into s->clean. Returns the new
 * length, or -1 on out of memory. */
static long sanitize_utf8(struct scratch *sc, const uint8_t *s, size_t n)
{
    if (3 * n + 1 > sc->clean_cap) {
        char *p = realloc(sc->clean, 3 * n + 1);
        if (!p)
            return -1;
        sc->clean = p;
        sc->clean_cap = 3 * n + 1;
    }
    size_t o = 0, i = 0;
    while (i < n) {
        uint32_t cp;
        int k = utf8_next(s + i, n - i, &cp);
        if (k > 0) {
            memcpy(sc->clean + o, s + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else {
            memcpy(sc->clean + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += (size_t)-k;
        }
    }
    return (long)o;
}

static int encode_segment(const struct tok *t, struct scratch *sc, const char *seg, size_t n,
                          size_t base, struct ivec *out, struct gate_err *err)
{
    int rc = 0;
    utf8proc_uint8_t *nfc = NULL;
    const uint8_t *s = (const uint8_t *)seg;
    int ascii = 1;
    for (size_t i = 0; i < n && ascii; i++)
        ascii = s[i] < 0x80;
    if (!ascii) {
        long cl = sanitize_utf8(sc, s, n);
        if (cl < 0) {
            rc = err_set(err, ERR_ENV, "out of memory encoding %zu bytes", n);
            goto done;
        }
        /* ASCII is already NFC; everything else goes through utf8proc's NFC. */
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)sc->clean, cl, &nfc,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (r < 0) {
            rc = err_set(err, r == UTF8PROC_ERROR_NOMEM ? ERR_ENV : ERR_INPUT,
                         "cannot NFC-normalize the text at byte %zu: %s", base, utf8proc_errmsg(r));
            goto done;
        }
        s = nfc;
        n = (size_t)r;
    }

    size_t pos = 0, prev = 0;
    while (pos < n) {
        int m = pcre2_match(t->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, sc->md, NULL);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof msg);
            rc = err_set(err, ERR_INPUT, "split regex failed near byte %zu of the text: %s",
                         base + pos, (const char *)msg);
            goto done;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* cannot happen with this pattern; step one character to stay safe */
            me = ms + 1;
            while (me < n && (s[me] & 0xC0) == 0x80)
                me++;
        }
        if (ms > prev && bpe_word(t, sc, s + prev, ms - prev, out)) /* an unmatched gap */
            goto oom;
        if (bpe_word(t, sc, s + ms, me - ms, out))
            goto oom;
        prev = pos = me;
    }
    if (n > prev && bpe_word(t, sc, s + prev, n - prev, out))
        goto oom;
    goto done;
oom:
    rc = err_set(err, ERR_ENV, "out of memory encoding %zu bytes", n);
done:
    free(nfc);
    return rc;
}

/* The longest special token allowed here that starts at text[i], or -1. */
static int32_t match_special(const struct tok *t, const char *text, size_t len, size_t i,
                             int parse_special)
{
    if (!t->special_first[(uint8_t)text[i]])
        return -1;
    for (int k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        if (!parse_special && t->type[id] != TOK_TYPE_USER_DEFINED)
            continue;
        size_t l = t->off[id + 1] - t->off[id];
        if (l <= len - i && memcmp(text + i, t->text + t->off[id], l) == 0)
            return id;
    }
    return -1;
}

int tok_encode(const struct tok *t, const char *text, size_t len, int parse_special, int32_t **ids,
               int *n_ids, struct gate_err *err)
{
    struct ivec out = {0};
    struct scratch sc = {0};
    int rc = 0;
    *ids = NULL;
    *n_ids = 0;
    if (len > (size_t)INT_MAX / 4) {
        rc = err_set(err, ERR_INPUT, "text of %zu bytes is too long to encode", len);
        goto done;
    }
    sc.md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!sc.md || ivec_push(&out, 0)) {
        rc = err_set(err, ERR_ENV, "out of memory encoding %zu bytes", len);
        goto done;
    }
    out.n = 0;

    size_t seg = 0;
    for (size_t i = 0; i < len;) {
        int32_t id = t->n_special ? match_special(t, text, len, i, parse_special) : -1;
        if (id < 0) {
            i++;
            continue;
        }
        if (i > seg && (rc = encode_segment(t, &sc, text + seg, i - seg, seg, &out, err)))
            goto done;
        if (ivec_push(&out, id)) {
            rc = err_set(err, ERR_ENV, "out of memory encoding %zu bytes", len);
            goto done;
        }
        i += t->off[id + 1] - t->off[id];
        seg = i;
    }
    if (len > seg && (rc = encode_segment(t, &sc, text + seg, len - seg, seg, &out, err)))
        goto done;
    *ids = out.v;
    *n_ids = out.n;
    out.v = NULL;
done:
    free(out.v);
    free(sc.id);
    free(sc.prev);
    free(sc.next);
    free(sc.heap);
    free(sc.clean);
    pcre2_match_data_free(sc.md);
    return rc;
}

/* ---- decoding and lookups --------------------------------------------------------------- */

int tok_decode(const struct tok *t, const int32_t *ids, int n, char **out, size_t *out_len,
               struct gate_err *err)
{
    size_t total = 0;
    char *buf = NULL;
    int rc = 0;
    *out = NULL;
    *out_len = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            rc = err_set(err, ERR_INPUT,
                         "token id %d at position %d is outside the vocabulary "
                         "(%d tokens)",
                         (int)ids[i], i, t->n_vocab);
            goto done;
        }
        total += t->dec_off[ids[i] + 1] - t->dec_off[ids[i]];
    }
    buf = malloc(total + 1);
    if (!buf) {
        rc = err_set(err, ERR_ENV, "out of memory decoding %d tokens", n);
        goto done;
    }
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        size_t l = t->dec_off[ids[i] + 1] - t->dec_off[ids[i]];
        memcpy(buf + o, t->dec + t->dec_off[ids[i]], l);
        o += l;
    }
    buf[o] = '\0';
    *out = buf;
    *out_len = o;
    buf = NULL;
done:
    free(buf);
    return rc;
}

int tok_n_vocab(const struct tok *t)
{
    return t->n_vocab;
}

int32_t tok_eos(const struct tok *t)
{
    return t->eos;
}

int32_t tok_bos(const struct tok *t)
{
    return t->bos;
}

int32_t tok_find(const struct tok *t, const char *piece)
{
    return find_len(t, piece, strlen(piece));
}

int tok_token_type(const struct tok *t, int32_t id)
{
    return id < 0 || id >= t->n_vocab ? 0 : t->type[id];
}

/* ---- token-id text (tok_parse_ids) ------------------------------------------------------------
 */

static int id_sep(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == ',' ||
           c == '[' || c == ']';
}

int tok_parse_ids(const char *text, size_t len, const char *what, uint32_t n_vocab, int32_t **ids,
                  int *n, struct gate_err *err)
{
    int rc = 0, cap = 16, count = 0, line = 1;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    *ids = NULL;
    *n = 0;
    if (!v)
        return err_set(err, ERR_ENV, "%s: out of memory reading token ids", what);
    const int64_t limit = n_vocab ? (int64_t)n_vocab : (int64_t)INT32_MAX + 1;
    size_t i = 0;
    while (i < len) {
        if (id_sep(text[i])) {
            line += text[i] == '\n';
            i++;
            continue;
        }
        const size_t start = i;
        while (i < len && !id_sep(text[i]))
            i++;
        const size_t wl = i - start;
        /* decimal with an optional '-' (so "-5" is reported as out of range, not as garbage);
         * accumulation stops past 12 digits, which is out of range whatever the bound */
        const size_t d0 = text[start] == '-' ? 1 : 0;
        int decimal = wl > d0;
        int64_t val = 0;
        for (size_t k = start + d0; decimal && k < i; k++) {
            if (text[k] < '0' || text[k] > '9')
                decimal = 0;
            else if (val < 1000000000000LL)
                val = val * 10 + (text[k] - '0');
        }
        if (d0)
            val = -val;
        if (!decimal || val < 0 || val >= limit) {
            char shown[4 * 40 + 1];
            size_t o = 0;
            for (size_t k = start; k < start + (wl > 40 ? 40 : wl); k++) {
                const unsigned char c = (unsigned char)text[k];
                if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
                    shown[o++] = (char)c;
                else
                    o += (size_t)snprintf(shown + o, sizeof shown - o, "\\x%02X", c);
            }
            shown[o] = '\0';
            char reason[96];
            if (!decimal)
                snprintf(reason, sizeof reason, "not a decimal integer");
            else if (n_vocab)
                snprintf(reason, sizeof reason, "outside the vocabulary [0, %u)", n_vocab);
            else
                snprintf(reason, sizeof reason, "outside [0, %d]", INT32_MAX);
            rc = err_set(err, ERR_INPUT, "%s:%d: '%s%s' is not a token id (id %d: %s)", what, line,
                         shown, wl > 40 ? "..." : "", count + 1, reason);
            goto done;
        }
        if (count == cap) {
            if (cap > INT32_MAX / 2) {
                rc = err_set(err, ERR_INPUT, "%s: more than %d token ids", what, cap);
                goto done;
            }
            int32_t *p = realloc(v, (size_t)cap * 2 * sizeof *p);
            if (!p) {
                rc = err_set(err, ERR_ENV, "%s: out of memory reading %d token ids", what, count);
                goto done;
            }
            v = p;
            cap *= 2;
        }
        v[count++] = (int32_t)val;
    }
done:
    if (rc) {
        free(v);
        return rc;
    }
    *ids = v;
    *n = count;
    return 0;
}
