/* err.c — see err.h. */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(struct gate_err *err, int code, const char *fmt, ...)
{
    if (!err || err->code != 0)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

void err_clear(struct gate_err *err)
{
    if (!err)
        return;
    err->code = 0;
    err->msg[0] = '\0';
}

int err_exit_code(int code)
{
    switch (code) {
    case ERR_OK:
        return 0;
    case ERR_INPUT:
        return 2;
    case ERR_ENV:
        return 3;
    default:
        return 1;
    }
}
