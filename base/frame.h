/* frame.h — the gate-exec frame codec (docs/exec.md, "Frames"): the one reader and writer of
 * frames for gate (engine/exec.c reads replies), its reference engine (tests/exec_engine.c) and
 * the llama.cpp adapter (adapters/llama_cpp.c), which read requests.
 *
 * A frame: u32 little-endian H (1..FRAME_HEADER_MAX) | H bytes of header (one JSON object) |
 * u64 little-endian B | B bytes of payload.
 *
 * Invariants: a struct frame_in asks for the bytes of one part at a time (frame_in_want) and
 * checks each length the moment its bytes are in (frame_in_got), before a byte of what it
 * announces is read: H against 1..FRAME_HEADER_MAX; for a reply, the header as one JSON object
 * with a boolean "ok", an error reply refused with its text, an ok reply's B exactly the length
 * the caller expects; for a request, B at most the caller's limit. So a reader never allocates
 * or reads more than it allowed, and never reads past the frame. The same reader serves a
 * non-blocking pipe (exec.c's poll loop), a blocking descriptor (frame_read) and a buffer in
 * memory (exec_reply_decode, the fuzz target).
 * Start reading: frame_in_got().
 */
#ifndef GATE_FRAME_H
#define GATE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FRAME_HEADER_MAX 65536

struct json_t;

enum frame_dir {
    FRAME_REQUEST, /* engine side: B at most the limit, the header parsed by the caller */
    FRAME_REPLY,   /* gate side: header {"ok": bool, ...}; ok: B exactly the limit */
};

enum frame_part {
    FRAME_AT_H,
    FRAME_AT_HEADER,
    FRAME_AT_B,
    FRAME_AT_PAYLOAD,
    FRAME_AT_END,   /* whole */
    FRAME_AT_BROKEN /* a check failed: wants nothing more */
};

/* frame_in_got / frame_read results */
enum frame_status {
    FRAME_MORE = 0,  /* more bytes wanted */
    FRAME_WHOLE = 1, /* the frame is whole and passed every check */
    FRAME_EOF = 2,   /* frame_read: the stream ended before the frame's first byte */
    FRAME_BAD = -1,  /* a length or the header broke a rule (the reason in why) */
    FRAME_CUT = -2,  /* frame_read: the stream ended, or a read failed, inside the frame */
};

/* One frame being read. Fields are read-only to callers; set up by frame_in_reply/_request,
 * released by frame_in_free. */
struct frame_in {
    enum frame_dir dir;
    unsigned char *dst;     /* where the payload goes (borrowed), or NULL: allocated */
    uint64_t limit;         /* reply: B an ok reply must carry; request: the most B */
    enum frame_part part;   /* the part being read */
    unsigned char pre[8];   /* H or B as it arrives */
    uint64_t got;           /* bytes of the current part */
    uint64_t total;         /* bytes of the frame read so far */
    uint64_t h, b;          /* the lengths, once read */
    char *header;           /* h bytes + NUL (owned), from FRAME_AT_B on */
    struct json_t *json;    /* reply: the header object (owned until taken), from FRAME_AT_B on */
    unsigned char *payload; /* b bytes once whole: dst, or owned when dst was NULL */
    unsigned char *owned;
};

/* Read a reply whose ok form must carry exactly dst_len payload bytes, into dst (dst_len bytes;
 * may be NULL only when dst_len is 0). */
void frame_in_reply(struct frame_in *f, void *dst, uint64_t dst_len);
/* Read a request with at most max payload bytes, into dst (max bytes) or, when dst is NULL, a
 * buffer of exactly B bytes allocated once B is known. */
void frame_in_request(struct frame_in *f, void *dst, uint64_t max);
/* Where the next bytes go (*to) and how many the current part still needs; 0 when the frame
 * is whole or broken. Read at most that many (or fewer: any count goes to frame_in_got). */
size_t frame_in_want(struct frame_in *f, unsigned char **to);
/* n (1..frame_in_want's count) bytes were stored at *to. Returns FRAME_MORE, FRAME_WHOLE or
 * FRAME_BAD with the reason (no engine or request named) in why (wn bytes). */
int frame_in_got(struct frame_in *f, size_t n, char *why, size_t wn);
/* The bytes of the frame read so far. */
uint64_t frame_in_bytes(const struct frame_in *f);
/* The reply's header object; the caller json_decref()s it (NULL before FRAME_AT_B). */
struct json_t *frame_in_take_json(struct frame_in *f);
/* A whole request's header as one JSON object (duplicate keys refused) with a string "op":
 * *req (caller decrefs) and *op (borrowed from *req); FRAME_BAD with the reason otherwise
 * (*req NULL). The frame itself was whole, so an engine can answer this with an error reply. */
int frame_in_request_parse(const struct frame_in *f, struct json_t **req, const char **op,
                           char *why, size_t wn);
/* Free what the reader holds (header, untaken JSON, an allocated payload); f may be reset. */
void frame_in_free(struct frame_in *f);

/* Read one frame from blocking descriptor fd (EINTR retried): FRAME_WHOLE, FRAME_EOF (no byte
 * of a frame came), FRAME_BAD or FRAME_CUT with the reason in why. */
int frame_read(int fd, struct frame_in *f, char *why, size_t wn);

/* The frame's head for header object j (json_dumps with JSON_COMPACT | flags) and payload
 * length b: *out (malloc'd, the caller frees) holds 4 + H + 8 bytes, *len their count. -1 with
 * the reason when j cannot be encoded (out of memory, a string that is not UTF-8) or H is
 * outside 1..FRAME_HEADER_MAX. */
int frame_encode(const struct json_t *j, size_t flags, uint64_t b, unsigned char **out, size_t *len,
                 char *why, size_t wn);
/* Write n bytes to blocking descriptor fd (EINTR retried): 0, or -1 with errno. */
int frame_write(int fd, const void *buf, size_t n);
/* frame_encode, then the head and b payload bytes written to fd: 0, or -1 with the reason. */
int frame_send(int fd, const struct json_t *j, size_t flags, const void *payload, uint64_t b,
               char *why, size_t wn);

/* Little-endian integers of n (4 or 8) bytes, as frames carry their lengths. */
void frame_put_le(unsigned char *p, uint64_t v, int n);
uint64_t frame_get_le(const unsigned char *p, int n);

/* Escape bytes for quoting in a message: printable ASCII except '"' and '\\' kept, everything
 * else as \n, \t or \xNN. Always NUL-terminates out (n > 0); cuts at a whole escape. */
void frame_escape(const char *in, size_t len, char *out, size_t n);

#ifdef __cplusplus
}
#endif
#endif
