/* cli.c — helpers shared by the subcommands: failure messages, option values, id files. */
#include "harness/cli.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    FILE *f = fopen(path, "r");
    if (!f)
        return err_set(err, ERR_INPUT, "cannot open '%s': %s", path, strerror(errno));
    int rc = 0, cap = 0;
    char word[64];
    int c, len = 0, line = 1, word_line = 1;
    for (;;) {
        c = fgetc(f);
        if (c == EOF || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',') {
            if (len > 0) {
                word[len] = '\0';
                char *end;
                errno = 0;
                long v = strtol(word, &end, 10);
                if (errno || *end || v < 0 || v > INT32_MAX) {
                    rc = err_set(err, ERR_INPUT, "%s:%d: '%s' is not a token id", path,
                                 word_line, word);
                    break;
                }
                if (*n == cap) {
                    cap = cap ? 2 * cap : 256;
                    int32_t *p = realloc(*ids, (size_t)cap * sizeof *p);
                    if (!p) {
                        rc = err_set(err, ERR_ENV, "out of memory reading '%s'", path);
                        break;
                    }
                    *ids = p;
                }
                (*ids)[(*n)++] = (int32_t)v;
                len = 0;
            }
            if (c == '\n')
                line++;
            if (c == EOF)
                break;
            continue;
        }
        if (len == 0)
            word_line = line;
        if (len + 1 >= (int)sizeof word) {
            rc = err_set(err, ERR_INPUT, "%s:%d: token id '%.20s...' is too long", path, line,
                         word);
            break;
        }
        word[len++] = (char)c;
    }
    fclose(f);
    if (!rc && *n == 0)
        rc = err_set(err, ERR_INPUT, "%s: no token ids", path);
    if (rc) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return rc;
}
