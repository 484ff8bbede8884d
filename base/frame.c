/* frame.c — see frame.h. One reader (frame_in_want / frame_in_got) whose checks run part by
 * part as the bytes arrive, one writer (frame_encode), and the blocking loops engines use.
 * Start reading: frame_in_got().
 */
#include "base/frame.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void frame_put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

uint64_t frame_get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void frame_escape(const char *in, size_t len, char *out, size_t n)
{
    size_t at = 0;
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)in[i];
        char one[8];
        if (c == '\n')
            snprintf(one, sizeof one, "\\n");
        else if (c == '\t')
            snprintf(one, sizeof one, "\\t");
        else if (c == '"' || c == '\\' || c < 0x20 || c >= 0x7f)
            snprintf(one, sizeof one, "\\x%02x", c);
        else
            snprintf(one, sizeof one, "%c", c);
        const size_t w = strlen(one);
        if (at + w + 1 > n)
            break;
        memcpy(out + at, one, w);
        at += w;
    }
    out[at] = '\0';
}

/* ---- reading --------------------------------------------------------------------------------- */

static void init(struct frame_in *f, enum frame_dir dir, void *dst, uint64_t limit)
{
    memset(f, 0, sizeof *f);
    f->dir = dir;
    f->dst = dst;
    f->limit = limit;
    f->part = FRAME_AT_H;
}

void frame_in_reply(struct frame_in *f, void *dst, uint64_t dst_len)
{
    init(f, FRAME_REPLY, dst, dst_len);
}

void frame_in_request(struct frame_in *f, void *dst, uint64_t max)
{
    init(f, FRAME_REQUEST, dst, max);
}

void frame_in_free(struct frame_in *f)
{
    free(f->header);
    json_decref(f->json);
    free(f->owned);
    f->header = NULL;
    f->json = NULL;
    f->owned = NULL;
    f->payload = NULL;
}

json_t *frame_in_take_json(struct frame_in *f)
{
    json_t *j = f->json;
    f->json = NULL;
    return j;
}

/* The length the current part needs in all. */
static uint64_t part_len(const struct frame_in *f)
{
    switch (f->part) {
    case FRAME_AT_H:
        return 4;
    case FRAME_AT_HEADER:
        return f->h;
    case FRAME_AT_B:
        return 8;
    case FRAME_AT_PAYLOAD:
        return f->b;
    default:
        return 0;
    }
}

size_t frame_in_want(struct frame_in *f, unsigned char **to)
{
    switch (f->part) {
    case FRAME_AT_H:
    case FRAME_AT_B:
        *to = f->pre + f->got;
        break;
    case FRAME_AT_HEADER:
        *to = (unsigned char *)f->header + f->got;
        break;
    case FRAME_AT_PAYLOAD:
        *to = f->payload + f->got;
        break;
    default:
        *to = NULL;
        return 0;
    }
    return (size_t)(part_len(f) - f->got);
}

uint64_t frame_in_bytes(const struct frame_in *f)
{
    return f->total;
}

static int bad(struct frame_in *f, char *why, size_t wn, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad(struct frame_in *f, char *why, size_t wn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, wn, fmt, ap);
    va_end(ap);
    f->part = FRAME_AT_BROKEN;
    return FRAME_BAD;
}

/* A reply's header: one JSON object with a boolean "ok". */
static int check_reply_header(struct frame_in *f, char *why, size_t wn)
{
    json_error_t je;
    json_t *j = json_loadb(f->header, (size_t)f->h, JSON_REJECT_DUPLICATES, &je);
    if (!j || !json_is_object(j)) {
        char q[120];
        frame_escape(f->header, f->h < 48 ? (size_t)f->h : 48, q, sizeof q);
        const int not_object = j != NULL;
        json_decref(j);
        return bad(f, why, wn, "reply header is not one JSON object (%s): \"%s%s\"",
                   not_object ? "not an object" : je.text, q, f->h > 48 ? "..." : "");
    }
    if (!json_is_boolean(json_object_get(j, "ok"))) {
        json_decref(j);
        return bad(f, why, wn, "reply header has no boolean \"ok\"");
    }
    f->json = j;
    return FRAME_MORE;
}

/* B, before a byte of the payload: a reply's error refused with its text, an ok reply's B
 * exactly the limit; a request's B at most the limit. */
static int check_b(struct frame_in *f, char *why, size_t wn)
{
    if (f->dir == FRAME_REPLY) {
        if (!json_is_true(json_object_get(f->json, "ok"))) {
            const char *e = json_string_value(json_object_get(f->json, "error"));
            char q[300];
            frame_escape(e ? e : "(no error text)", e ? strlen(e) : 15, q, sizeof q);
            return bad(f, why, wn, "the engine answered an error: \"%s\"", q);
        }
        if (f->b != f->limit)
            return bad(f, why, wn, "reply payload is %llu bytes, expected exactly %llu",
                       (unsigned long long)f->b, (unsigned long long)f->limit);
        f->payload = f->dst;
        return FRAME_MORE;
    }
    if (f->b > f->limit)
        return bad(f, why, wn, "request payload of %llu bytes is over the limit of %llu",
                   (unsigned long long)f->b, (unsigned long long)f->limit);
    if (f->dst || !f->b) {
        f->payload = f->dst;
        return FRAME_MORE;
    }
    if (!(f->owned = malloc((size_t)f->b)))
        return bad(f, why, wn, "out of memory for a %llu-byte request payload",
                   (unsigned long long)f->b);
    f->payload = f->owned;
    return FRAME_MORE;
}

int frame_in_got(struct frame_in *f, size_t n, char *why, size_t wn)
{
    if (f->part >= FRAME_AT_END)
        return f->part == FRAME_AT_END ? FRAME_WHOLE : FRAME_BAD;
    f->got += n;
    f->total += n;
    if (f->got < part_len(f))
        return FRAME_MORE;
    f->got = 0;
    int rc = FRAME_MORE;
    switch (f->part) {
    case FRAME_AT_H:
        f->h = frame_get_le(f->pre, 4);
        if (f->h < 1 || f->h > FRAME_HEADER_MAX)
            return bad(f, why, wn, "%s header length %llu is outside 1..%d",
                       f->dir == FRAME_REPLY ? "reply" : "request", (unsigned long long)f->h,
                       FRAME_HEADER_MAX);
        if (!(f->header = malloc((size_t)f->h + 1)))
            return bad(f, why, wn, "out of memory for a %llu-byte header",
                       (unsigned long long)f->h);
        f->part = FRAME_AT_HEADER;
        break;
    case FRAME_AT_HEADER:
        f->header[f->h] = '\0';
        if (f->dir == FRAME_REPLY && (rc = check_reply_header(f, why, wn)))
            return rc;
        f->part = FRAME_AT_B;
        break;
    case FRAME_AT_B:
        f->b = frame_get_le(f->pre, 8);
        if ((rc = check_b(f, why, wn)))
            return rc;
        f->part = f->b ? FRAME_AT_PAYLOAD : FRAME_AT_END;
        break;
    default:
        f->part = FRAME_AT_END;
        break;
    }
    return f->part == FRAME_AT_END ? FRAME_WHOLE : FRAME_MORE;
}

int frame_in_request_parse(const struct frame_in *f, json_t **req, const char **op, char *why,
                           size_t wn)
{
    json_error_t je;
    *req = NULL;
    *op = NULL;
    json_t *j = json_loadb(f->header, (size_t)f->h, JSON_REJECT_DUPLICATES, &je);
    if (!j || !json_is_object(j)) {
        snprintf(why, wn, "the request header is not a JSON object: %s",
                 j ? "another JSON value" : je.text);
        json_decref(j);
        return FRAME_BAD;
    }
    const char *name = json_string_value(json_object_get(j, "op"));
    if (!name) {
        snprintf(why, wn, "the request has no string \"op\"");
        json_decref(j);
        return FRAME_BAD;
    }
    *req = j;
    *op = name;
    return FRAME_WHOLE;
}

int frame_read(int fd, struct frame_in *f, char *why, size_t wn)
{
    for (;;) {
        unsigned char *to;
        const size_t need = frame_in_want(f, &to);
        if (!need)
            return f->part == FRAME_AT_END ? FRAME_WHOLE : FRAME_BAD;
        const ssize_t r = read(fd, to, need < (1u << 20) ? need : (1u << 20));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            const uint64_t at = frame_in_bytes(f);
            if (r == 0 && at == 0)
                return FRAME_EOF;
            snprintf(why, wn, "the stream %s after %llu bytes of a frame",
                     r == 0 ? "ended" : strerror(errno), (unsigned long long)at);
            return FRAME_CUT;
        }
        const int rc = frame_in_got(f, (size_t)r, why, wn);
        if (rc)
            return rc;
    }
}

/* ---- writing --------------------------------------------------------------------------------- */

int frame_encode(const json_t *j, size_t flags, uint64_t b, unsigned char **out, size_t *len,
                 char *why, size_t wn)
{
    *out = NULL;
    *len = 0;
    char *text = j ? json_dumps(j, JSON_COMPACT | flags) : NULL;
    if (!text) {
        snprintf(why, wn,
                 "cannot encode the header as JSON (out of memory, or a string that is not"
                 " UTF-8)");
        return -1;
    }
    const size_t h = strlen(text);
    if (h < 1 || h > FRAME_HEADER_MAX) {
        snprintf(why, wn, "a header of %zu bytes is outside 1..%d", h, FRAME_HEADER_MAX);
        free(text);
        return -1;
    }
    unsigned char *buf = malloc(4 + h + 8);
    if (!buf) {
        snprintf(why, wn, "out of memory for a %zu-byte frame header", h);
        free(text);
        return -1;
    }
    frame_put_le(buf, h, 4);
    memcpy(buf + 4, text, h);
    frame_put_le(buf + 4 + h, b, 8);
    free(text);
    *out = buf;
    *len = 4 + h + 8;
    return 0;
}

int frame_write(int fd, const void *buf, size_t n)
{
    size_t put = 0;
    while (put < n) {
        const ssize_t w = write(fd, (const char *)buf + put, n - put);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return -1;
        }
        put += (size_t)w;
    }
    return 0;
}

int frame_send(int fd, const json_t *j, size_t flags, const void *payload, uint64_t b, char *why,
               size_t wn)
{
    unsigned char *head = NULL;
    size_t len = 0;
    if (frame_encode(j, flags, b, &head, &len, why, wn))
        return -1;
    int rc = frame_write(fd, head, len);
    if (!rc && b)
        rc = frame_write(fd, payload, (size_t)b);
    if (rc)
        snprintf(why, wn, "cannot write a frame: %s", strerror(errno));
    free(head);
    return rc;
}
