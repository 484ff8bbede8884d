/* test_frame.c — the gate-exec frame codec (base/frame.h) on its own: the writer's frames read
 * back whole, the request reader's bounds (the engines' side: tests/exec_engine.c and the
 * llama.cpp adapter read through it), EOF against a frame cut short, and the reply reader fed
 * one byte at a time deciding as it does fed whole; frame_escape, which quotes an engine's text
 * in gate's messages, leaves printable ASCII inside its buffer. The reply side's refusals in
 * gate's words are tested through exec_reply_decode in test_exec.c.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/frame.h"

/* A pipe holding bytes (small: they fit its buffer), its write end closed. */
static int pipe_of(const void *bytes, size_t n)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(frame_write(p[1], bytes, n), 0);
    close(p[1]);
    return p[0];
}

/* Raw frame bytes: H as given, the header text, B as given, then plen payload bytes of 0x33. */
static size_t raw(unsigned char *buf, uint32_t h, const char *hdr, uint64_t b, size_t plen)
{
    frame_put_le(buf, h, 4);
    memcpy(buf + 4, hdr, strlen(hdr));
    frame_put_le(buf + 4 + strlen(hdr), b, 8);
    memset(buf + 12 + strlen(hdr), 0x33, plen);
    return 12 + strlen(hdr) + plen;
}

Test(frame, a_sent_frame_reads_back_whole_then_the_stream_ends_cleanly)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    json_t *j = json_pack("{s:s, s:i}", "op", "forward", "n_tokens", 2);
    const int32_t toks[2] = {7, -1};
    char why[300] = "";
    cr_assert_eq(frame_send(p[1], j, 0, toks, sizeof toks, why, sizeof why), 0, "%s", why);
    json_decref(j);
    close(p[1]);
    struct frame_in f;
    frame_in_request(&f, NULL, 64);
    cr_assert_eq(frame_read(p[0], &f, why, sizeof why), FRAME_WHOLE, "%s", why);
    cr_expect_eq(f.b, sizeof toks);
    cr_expect_eq(memcmp(f.payload, toks, sizeof toks), 0);
    json_t *req = NULL;
    const char *op = NULL;
    cr_assert_eq(frame_in_request_parse(&f, &req, &op, why, sizeof why), FRAME_WHOLE, "%s", why);
    cr_expect_str_eq(op, "forward");
    cr_expect_eq(json_integer_value(json_object_get(req, "n_tokens")), 2);
    json_decref(req);
    frame_in_free(&f);
    frame_in_request(&f, NULL, 64);
    cr_expect_eq(frame_read(p[0], &f, why, sizeof why), FRAME_EOF);
    frame_in_free(&f);
    close(p[0]);
}

Test(frame, the_request_reader_refuses_each_bound_before_reading_what_it_announces)
{
    static const struct {
        uint32_t h;
        const char *hdr;
        uint64_t b;
        size_t plen;
        int want;
        const char *says;
    } CASES[] = {
        {0, "", 0, 0, FRAME_BAD, "request header length 0 is outside 1..65536"},
        {65537, "{}", 0, 0, FRAME_BAD, "request header length 65537 is outside 1..65536"},
        {2, "{}", 17, 17, FRAME_BAD, "request payload of 17 bytes is over the limit of 16"},
        {2, "{}", (uint64_t)1 << 40, 0, FRAME_BAD, "over the limit of 16"},
        {2, "{}", 16, 16, FRAME_WHOLE, ""},
        {9, "{}", 0, 0, FRAME_CUT, "the stream ended after 6 bytes of a frame"},
        {2, "{}", 16, 3, FRAME_CUT, "the stream ended after 17 bytes of a frame"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        unsigned char buf[128];
        const size_t n = raw(buf, CASES[i].h, CASES[i].hdr, CASES[i].b, CASES[i].plen);
        /* a cut header: the bytes end inside it */
        const size_t len = CASES[i].h == 9 ? 6 : n;
        const int fd = pipe_of(buf, len);
        unsigned char dst[16];
        struct frame_in f;
        char why[300] = "";
        frame_in_request(&f, dst, sizeof dst);
        cr_expect_eq(frame_read(fd, &f, why, sizeof why), CASES[i].want, "case %zu: %s", i, why);
        cr_expect(strstr(why, CASES[i].says), "case %zu: %s", i, why);
        if (CASES[i].want == FRAME_BAD) /* nothing of what the bad length announced was read */
            cr_expect_leq(frame_in_bytes(&f), 12 + strlen(CASES[i].hdr), "case %zu", i);
        frame_in_free(&f);
        close(fd);
    }
}

Test(frame, a_whole_request_that_is_not_an_object_with_an_op_is_named)
{
    static const char *const BAD[][2] = {
        {"not json", "the request header is not a JSON object"},
        {"[1]", "not a JSON object: another JSON value"},
        {"{\"op\":\"a\",\"op\":\"b\"}", "duplicate object key"},
        {"{\"op\":1}", "the request has no string \"op\""},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        unsigned char buf[128];
        const size_t n = raw(buf, (uint32_t)strlen(BAD[i][0]), BAD[i][0], 0, 0);
        const int fd = pipe_of(buf, n);
        struct frame_in f;
        char why[300] = "";
        frame_in_request(&f, NULL, 0);
        cr_assert_eq(frame_read(fd, &f, why, sizeof why), FRAME_WHOLE, "%s", why);
        json_t *req = (json_t *)1;
        const char *op = "x";
        cr_expect_eq(frame_in_request_parse(&f, &req, &op, why, sizeof why), FRAME_BAD);
        cr_expect_null(req);
        cr_expect_null(op);
        cr_expect(strstr(why, BAD[i][1]), "%zu: %s", i, why);
        frame_in_free(&f);
        close(fd);
    }
}

/* The reply reader fed n bytes at a time: the status it ends in and its reason. */
static int feed(const unsigned char *buf, size_t len, size_t step, uint64_t dst_len, char *why,
                size_t wn)
{
    unsigned char dst[64];
    struct frame_in f;
    frame_in_reply(&f, dst, dst_len);
    size_t at = 0;
    int st = FRAME_MORE;
    while (st == FRAME_MORE && at < len) {
        unsigned char *to;
        size_t need = frame_in_want(&f, &to);
        cr_assert(need > 0);
        if (need > step)
            need = step;
        if (need > len - at)
            need = len - at;
        memcpy(to, buf + at, need);
        at += need;
        st = frame_in_got(&f, need, why, wn);
    }
    if (st == FRAME_WHOLE)
        cr_expect_eq(memcmp(dst, buf + len - dst_len, dst_len), 0);
    frame_in_free(&f);
    return st;
}

Test(frame, the_reply_reader_decides_the_same_fed_a_byte_at_a_time_or_whole)
{
    static const struct {
        const char *hdr;
        uint64_t b;
        uint64_t dst_len;
        int want;
    } CASES[] = {
        {"{\"ok\":true}", 8, 8, FRAME_WHOLE},
        {"{\"ok\":true}", 0, 0, FRAME_WHOLE},
        {"{\"ok\":true}", 8, 4, FRAME_BAD},
        {"{\"ok\":false,\"error\":\"no\"}", 0, 0, FRAME_BAD},
        {"{\"ok\":1}", 0, 0, FRAME_BAD},
        {"[true]", 0, 0, FRAME_BAD},
        {"{\"ok\":true,\"ok\":true}", 0, 0, FRAME_BAD},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        unsigned char buf[128];
        const size_t n =
            raw(buf, (uint32_t)strlen(CASES[i].hdr), CASES[i].hdr, CASES[i].b, (size_t)CASES[i].b);
        char w1[300] = "", w2[300] = "";
        cr_expect_eq(feed(buf, n, 1, CASES[i].dst_len, w1, sizeof w1), CASES[i].want, "%zu: %s", i,
                     w1);
        cr_expect_eq(feed(buf, n, n, CASES[i].dst_len, w2, sizeof w2), CASES[i].want, "%zu: %s", i,
                     w2);
        cr_expect_str_eq(w1, w2, "%zu", i);
    }
}

Test(frame, the_writer_refuses_a_header_it_may_not_send)
{
    char big[FRAME_HEADER_MAX + 8];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    json_t *j = json_pack("{s:s}", "x", big);
    unsigned char *out = (unsigned char *)1;
    size_t len = 1;
    char why[300] = "";
    cr_expect_eq(frame_encode(j, 0, 0, &out, &len, why, sizeof why), -1);
    cr_expect_null(out);
    cr_expect(strstr(why, "is outside 1..65536"), "%s", why);
    json_decref(j);
    j = json_pack("{s:b}", "ok", 1);
    cr_assert_eq(frame_encode(j, 0, 5, &out, &len, why, sizeof why), 0, "%s", why);
    cr_expect_eq(len, 4 + 11 + 8);
    cr_expect_eq(frame_get_le(out, 4), 11);
    cr_expect_eq(memcmp(out + 4, "{\"ok\":true}", 11), 0);
    cr_expect_eq(frame_get_le(out + 15, 8), 5);
    free(out);
    json_decref(j);
}

/* Text from an engine (an error reply, its stderr tail) is quoted through frame_escape: what
 * reaches a message or a terminal is printable ASCII without a bare quote or backslash, and the
 * output stops at a whole escape inside its buffer, never past it. */
Test(frame, escaping_leaves_printable_ascii_and_stays_inside_its_buffer)
{
    static const char in[] = "a\"b\\c\x7f\xff\xc3\xa9\x1b[0m\n\t";
    char out[128];
    frame_escape(in, sizeof in - 1, out, sizeof out);
    cr_expect_str_eq(out, "a\\x22b\\x5cc\\x7f\\xff\\xc3\\xa9\\x1b[0m\\n\\t");
    /* n bytes hold n - 1 characters and the NUL; an escape that does not fit is left out */
    char small[16];
    memset(small, '#', sizeof small);
    frame_escape("abcdefgh", 8, small, 5);
    cr_expect_str_eq(small, "abcd");
    cr_expect_eq(small[5], '#', "frame_escape wrote past the 5 bytes it was given");
    memset(small, '#', sizeof small);
    frame_escape("ab\x01", 3, small, 6);
    cr_expect_str_eq(small, "ab", "a cut escape");
    cr_expect_eq(small[6], '#');
}
