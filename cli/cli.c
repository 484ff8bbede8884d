/* cli.c — helpers shared by the subcommands: failure messages, option values, id files. */
#include "cli/cli.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/synth.h"
#include "engine/tokenizer.h"
#include "harness/ladder.h"

int cli_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("gate: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

int cli_value(int argc, char **argv, int *i, const char **out)
{
    if (*i + 1 >= argc) {
        cli_fail(2, "%s: option '%s' needs a value", argv[0], argv[*i]);
        return -1;
    }
    *out = argv[++*i];
    return 0;
}

int cli_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_fail(2, "%s: %s '%s' is not an integer in [%d, %d]", cmd, opt, s, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int cli_read_ids(const char *path, int32_t **ids, int *n, struct gate_err *err)
{
    *ids = NULL;
    *n = 0;
    char *text = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return err_set(err, ERR_INPUT, "cannot open '%s': %s", path, strerror(errno));
    for (;;) {
        if (len == cap) {
            if (cap >= ((size_t)1 << 31)) {
                rc = err_set(err, ERR_INPUT, "'%s' is too big for a token id file", path);
                goto done;
            }
            char *p = realloc(text, cap ? 2 * cap : 4096);
            if (!p) {
                rc = err_set(err, ERR_ENV, "out of memory reading '%s'", path);
                goto done;
            }
            text = p;
            cap = cap ? 2 * cap : 4096;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        rc = err_set(err, ERR_INPUT, "cannot read '%s': %s", path, strerror(errno));
        goto done;
    }
    if ((rc = tok_parse_ids(text, len, path, 0, ids, n, err)))
        goto done;
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        rc = err_set(err, ERR_INPUT, "%s: no token ids", path);
    }
done:
    fclose(f);
    free(text);
    return rc;
}

/* Length of the valid UTF-8 sequence at p (2..4), or 0 when p does not start one. */
static int utf8_len(const unsigned char *p)
{
    int len = *p >= 0xf0 && *p <= 0xf4 ? 4 : *p >= 0xe0 ? 3 : *p >= 0xc2 && *p < 0xe0 ? 2 : 0;
    if (*p >= 0xf5)
        len = 0;
    for (int i = 1; i < len; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    return len;
}

const char *cli_safe(const char *s, char *buf, size_t n)
{
    static const char HEX[] = "0123456789abcdef";
    size_t k = 0;
    if (!s)
        s = "(null)";
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int len = *p < 0x80 ? 1 : utf8_len(p);
        /* escaped: C0, DEL, a C1 code point (U+0080..U+009F = 0xC2 0x80..0x9F), any byte that
         * does not start valid UTF-8 (a raw 0x9B is CSI to an 8-bit terminal) */
        int esc = *p < 0x20 || *p == 0x7f || len == 0 || (*p == 0xc2 && p[1] <= 0x9f);
        int count = len ? len : 1;
        size_t need = esc ? 4 * (size_t)count : *p == '\\' ? 2 : (size_t)count;
        if (k + need >= n)
            break;
        for (int i = 0; i < count; i++) {
            unsigned char b = p[i];
            if (esc) {
                buf[k++] = '\\';
                buf[k++] = 'x';
                buf[k++] = HEX[b >> 4];
                buf[k++] = HEX[b & 15];
            } else if (b == '\\') {
                buf[k++] = '\\';
                buf[k++] = '\\';
            } else {
                buf[k++] = (char)b;
            }
        }
        p += count;
    }
    if (n)
        buf[k < n ? k : n - 1] = '\0';
    return buf;
}

static void ensure_progress(void *ctx, uint64_t done, uint64_t total, int i, int n,
                            const char *tensor)
{
    const struct ladder_model *lm = ctx;
    (void)tensor;
    if (isatty(2))
        fprintf(stderr, "\r  synthesizing %-24s [%-30.*s] %3d%%", lm->id,
                (int)(total ? 30 * done / total : 30), "##############################",
                (int)(total ? 100 * done / total : 100));
    else if (i + 1 == n)
        fprintf(stderr, "  synthesized %s (%d tensors)\n", lm->id, n);
}

int cli_ensure_model(const struct ladder_model *lm, int threads, struct gate_err *err)
{
    struct stat st;
    const int cached = stat(lm->path, &st) == 0;
    if (!lm->synth) {
        if (cached)
            return 0;
        return err_set(err, ERR_INPUT, "model '%s': '%s' cannot be read: %s", lm->id, lm->path,
                       strerror(errno));
    }
    if (cached) { /* a stale copy (another shape under the same name) is rewritten */
        int written = 0;
        int rc = ladder_model_ensure(lm, threads, ensure_progress, (void *)lm, &written, err);
        if (written)
            fprintf(stderr, "gate: model '%s': the cached %s was not the pinned file: rewritten\n",
                    lm->id, lm->path);
        return rc;
    }
    fprintf(stderr, "gate: model '%s' is not in the cache yet: writing %s\n", lm->id, lm->path);
    int rc = ladder_model_ensure(lm, threads, ensure_progress, (void *)lm, NULL, err);
    if (isatty(2))
        fprintf(stderr, "\n");
    return rc;
}
