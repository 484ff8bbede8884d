/* fuzz_exec.c — libFuzzer target for the exec backend's reply frames (engine/exec.c).
 *
 * An input is what an engine could write to its stdout: two bytes F (little-endian, the number of
 * floats a forward reply carries), then a stream of reply frames. Each frame is decoded by
 * exec_reply_decode(), which runs exchange()'s own checks, first as a reply without payload (every
 * op but forward), then as a forward reply of F * 4 bytes; the stream stops at the first frame
 * both refuse. Checked: no read outside the input, a refusal always carries a message and hands
 * out nothing, an accepted frame lies inside the input, its header is an object whose "ok" is
 * true, and its payload has exactly the size asked for. Build and run: fuzz/README.md.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/exec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink;

/* One decode with dst_len; returns the frame's bytes, 0 when refused. */
static size_t one(const uint8_t *buf, size_t size, uint64_t dst_len)
{
    json_t *hdr = (json_t *)1;
    const void *payload = (const void *)1;
    size_t used = 1;
    struct gate_err err = {0};
    int rc = exec_reply_decode(buf, size, dst_len, &hdr, &payload, &used, &err);
    if (rc) {
        if (hdr || payload || used || err.code != rc || err.msg[0] == '\0')
            abort(); /* a refusal hands out nothing and says why */
        return 0;
    }
    if (!json_is_object(hdr) || !json_is_true(json_object_get(hdr, "ok")))
        abort(); /* an accepted reply is an ok object */
    const uint8_t *p = payload;
    if (used < 13 || used > size || p < buf + 13 || (size_t)(p - buf) + dst_len != used)
        abort(); /* the frame and its payload lie inside the input, payload last */
    if (dst_len) {
        sink ^= p[0];
        sink ^= p[dst_len - 1];
    }
    json_decref(hdr);
    return used;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const uint64_t floats = (uint64_t)data[0] | (uint64_t)data[1] << 8;
    /* an exact-size copy, so ASan sees a read one byte past the stream */
    const size_t n = size - 2;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return 0;
    memcpy(buf, data + 2, n);
    size_t at = 0;
    while (at < n) {
        size_t used = one(buf + at, n - at, 0);
        if (!used)
            used = one(buf + at, n - at, floats * 4);
        if (!used)
            break;
        at += used;
    }
    free(buf);
    return 0;
}
