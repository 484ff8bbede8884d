/* skip.c — see skip.h. */
#include "skip.h"

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int check_required(const char *var)
{
    const char *e = getenv(var);
    return e && *e && strcmp(e, "0") != 0;
}

int check_gpu_required(void)
{
    return check_required("GATE_REQUIRE_GPU");
}

int check_isa_required(const char *isa)
{
    const char *e = getenv("GATE_REQUIRE_ISA");
    const size_t n = strlen(isa);
    for (const char *p = e; p && *p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncmp(p, isa, n))
            return 1;
        p = end ? end + 1 : NULL;
    }
    return 0;
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

/* fail (with what) or skip, after the reason was formatted */
static void __attribute__((noreturn)) skip_or_fail(int required, const char *what, const char *why)
{
    if (required) {
        say("FAIL", why);
        cr_assert_fail("%s but this test cannot run: %s", what, why);
        abort(); /* not reached: cr_assert_fail ends the test */
    }
    say("SKIP", why);
    cr_skip_test("%s", why);
}

void check_skip_unless_required(const char *var, const char *fmt, ...)
{
    char why[1024], what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(what, sizeof what, "%s=%s", var, getenv(var) ? getenv(var) : "");
    skip_or_fail(check_required(var), what, why);
}

void check_skip_no_isa(const char *isa, const char *fmt, ...)
{
    char why[1024], what[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    const char *e = getenv("GATE_REQUIRE_ISA");
    snprintf(what, sizeof what, "GATE_REQUIRE_ISA=%s names %s", e ? e : "", isa);
    skip_or_fail(check_isa_required(isa), what, why);
}
