/* skip.c — see skip.h. */
#include "skip.h"

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int check_gpu_required(void)
{
    const char *e = getenv("GATE_REQUIRE_GPU");
    return e && *e && strcmp(e, "0") != 0;
}

/* Print the SKIP line on stderr (one write, so parallel test processes do not interleave). */
static void say(const char *tag, const char *why)
{
    const char *suite = criterion_current_suite ? criterion_current_suite->name : "?";
    const char *test = criterion_current_test ? criterion_current_test->name : "?";
    fprintf(stderr, "%s %s::%s: %s\n", tag, suite, test, why);
    fflush(stderr);
}

void check_skip_no_device(const char *fmt, ...)
{
    char why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (check_gpu_required()) {
        say("FAIL", why);
        cr_assert_fail("GATE_REQUIRE_GPU=1 but this device test cannot run: %s", why);
        abort(); /* not reached: cr_assert_fail ends the test */
    }
    say("SKIP", why);
    cr_skip_test("%s", why);
}

void check_skip(const char *fmt, ...)
{
    char why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    say("SKIP", why);
    cr_skip_test("%s", why);
}
