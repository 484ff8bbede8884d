/* cmd_stub.c — temporary: commands not yet implemented. */
#include <stdarg.h>
#include <stdio.h>

#include "harness/cli.h"

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

int cmd_model(int argc, char **argv) { (void)argc; (void)argv; return cli_fail(2, "not yet"); }
int cmd_eval(int argc, char **argv) { (void)argc; (void)argv; return cli_fail(2, "not yet"); }
int cmd_generate(int argc, char **argv) { (void)argc; (void)argv; return cli_fail(2, "not yet"); }
int cmd_bench(int argc, char **argv) { (void)argc; (void)argv; return cli_fail(2, "not yet"); }
