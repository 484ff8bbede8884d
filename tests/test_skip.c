/* test_skip.c — skips are never passes (issue 10 §5, issue 28): the one skip helper
 * (tests/support/skip.h) prints its reason in the normal output, a device test that skips for
 * want of a GPU FAILS when GATE_REQUIRE_GPU=1, a skip for a missing tool FAILS when its
 * GATE_REQUIRE_* variable is set (ci/test.sh sets GATE_REQUIRE_XMLLINT and
 * GATE_REQUIRE_CHROMIUM), and a skip for a missing instruction set FAILS when GATE_REQUIRE_ISA
 * names it (ci/test.sh lists what /proc/cpuinfo has).
 *
 * The rule is tested on Criterion itself, not on a stand-in: the test re-runs its own binary,
 * filtered to one probe test, as a probe (GATE_SKIP_PROBE=1) that calls the helper exactly as the
 * tests do on a host that lacks the thing, and reads the probe's exit status, output and TAP
 * report. The CUDA test binaries are not built in a CPU-only build, so this is where the rule is
 * checked on every host.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/check.h"
#include "tests/support/skip.h"

#define PROBE_TEST "skip/a_device_skip_fails_when_a_gpu_is_required"
#define PROBE_REASON "no usable CUDA device (probe: simulated host without a GPU)"

/* Run this test binary filtered to the probe test `test` ("skip/NAME"), with GATE_SKIP_PROBE=1
 * and the variable var set to val (NULL: unset); stdout+stderr to out, TAP report to tap.
 * Returns the wait status. */
static int run_probe_of(const char *test, const char *var, const char *val, const char *out,
                        const char *tap)
{
    char tap_arg[1200];
    snprintf(tap_arg, sizeof tap_arg, "--tap=%s", tap);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork failed");
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0)
            _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        unsetenv("BXFI_MAP"); /* the runner's worker handle: the probe is a fresh run, not one */
        setenv("GATE_SKIP_PROBE", "1", 1);
        /* whatever the suite runs under (ci/test.sh sets them), the probe sees only var */
        unsetenv("GATE_REQUIRE_GPU");
        unsetenv("GATE_REQUIRE_XMLLINT");
        unsetenv("GATE_REQUIRE_ISA");
        if (val)
            setenv(var, val, 1);
        execl("/proc/self/exe", "test_skip", "--jobs", "1", "--filter", test, tap_arg,
              (char *)NULL);
        _exit(127);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return st;
}

static int run_probe(const char *require, const char *out, const char *tap)
{
    return run_probe_of(PROBE_TEST, "GATE_REQUIRE_GPU", require, out, tap);
}

/* Run probe test `test` with var=val; expect a visible skip with reason (skip != 0) or a failure
 * whose message contains fail_text. */
static void expect_probe(const char *test, const char *var, const char *val, int skip,
                         const char *reason, const char *fail_text)
{
    char out[1024], tap[1024], line[600], tap_skip[600];
    snprintf(out, sizeof out, "%s/probe-%s.out", check_tmp_dir(), var);
    snprintf(tap, sizeof tap, "%s/probe-%s.tap", check_tmp_dir(), var);
    const int st = run_probe_of(test, var, val, out, tap);
    char *o = check_slurp_text(out), *t = check_slurp_text(tap);
    snprintf(line, sizeof line, "SKIP skip::%s: %s", strchr(test, '/') + 1, reason);
    snprintf(tap_skip, sizeof tap_skip, "# SKIP %s", reason);
    if (skip) {
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s=%s: a plain skip must not fail:\n%s",
                  var, val ? val : "(unset)", o);
        cr_expect(strstr(o, line), "%s=%s: no \"%s\" in the output:\n%s", var,
                  val ? val : "(unset)", line, o);
        cr_expect(strstr(t, tap_skip), "%s=%s: the TAP report lacks the skip:\n%s", var,
                  val ? val : "(unset)", t);
    } else {
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) != 0,
                  "%s=%s: the skip must fail the run (status %d):\n%s", var, val, st, o);
        cr_expect(strstr(o, fail_text) && strstr(o, reason),
                  "%s=%s: the failure does not say \"%s\" and why:\n%s", var, val, fail_text, o);
        cr_expect(strstr(t, tap_skip) == NULL, "%s=%s: a required run must not count the skip:\n%s",
                  var, val, t);
    }
    free(o);
    free(t);
}

Test(skip, a_device_skip_fails_when_a_gpu_is_required, .timeout = 1200)
{
    if (getenv("GATE_SKIP_PROBE")) /* the probe: what a device test does on a GPU-less host */
        check_skip_no_device(PROBE_REASON);

    char out[1024], tap[1024];
    /* GATE_REQUIRE_GPU unset: a visible skip — exit 0, the reason in the normal output and in
     * the TAP report that ci/test.sh summarizes */
    snprintf(out, sizeof out, "%s/probe-skip.out", check_tmp_dir());
    snprintf(tap, sizeof tap, "%s/probe-skip.tap", check_tmp_dir());
    int st = run_probe(NULL, out, tap);
    char *o = check_slurp_text(out), *t = check_slurp_text(tap);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a plain skip must not fail the run:\n%s", o);
    cr_expect(strstr(o, "SKIP skip::a_device_skip_fails_when_a_gpu_is_required: " PROBE_REASON),
              "the skip reason is not in the normal output:\n%s", o);
    cr_expect(strstr(t, "# SKIP " PROBE_REASON), "the TAP report lacks the skip:\n%s", t);
    free(o);
    free(t);

    /* GATE_REQUIRE_GPU=0 is the same as unset */
    st = run_probe("0", out, tap);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "GATE_REQUIRE_GPU=0 must still skip");

    /* GATE_REQUIRE_GPU=1: the same skip is a failure, with the reason */
    snprintf(out, sizeof out, "%s/probe-require.out", check_tmp_dir());
    snprintf(tap, sizeof tap, "%s/probe-require.tap", check_tmp_dir());
    st = run_probe("1", out, tap);
    o = check_slurp_text(out);
    t = check_slurp_text(tap);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) != 0,
              "with GATE_REQUIRE_GPU=1 a device skip must fail the run (status %d):\n%s", st, o);
    cr_expect(strstr(o, "GATE_REQUIRE_GPU=1 but this device test cannot run: " PROBE_REASON),
              "the failure does not say why:\n%s", o);
    cr_expect(strstr(t, "not ok - skip::a_device_skip_fails_when_a_gpu_is_required"),
              "the TAP report does not show the failure:\n%s", t);
    cr_expect(strstr(t, "# SKIP " PROBE_REASON) == NULL,
              "a required-GPU run must not count the device skip:\n%s", t);
    free(o);
    free(t);
}

Test(skip, gpu_required_reads_the_variable)
{
    unsetenv("GATE_REQUIRE_GPU");
    cr_expect_eq(check_gpu_required(), 0);
    setenv("GATE_REQUIRE_GPU", "", 1);
    cr_expect_eq(check_gpu_required(), 0);
    setenv("GATE_REQUIRE_GPU", "0", 1);
    cr_expect_eq(check_gpu_required(), 0);
    setenv("GATE_REQUIRE_GPU", "1", 1);
    cr_expect_eq(check_gpu_required(), 1);
    setenv("GATE_REQUIRE_GPU", "yes", 1);
    cr_expect_eq(check_gpu_required(), 1);
    unsetenv("GATE_REQUIRE_GPU");
}

#define TOOL_TEST "skip/a_tool_skip_fails_when_the_tool_is_required"
#define TOOL_REASON "probe-tool is absent (probe: simulated host without it)"

Test(skip, a_tool_skip_fails_when_the_tool_is_required, .timeout = 1200)
{
    if (getenv("GATE_SKIP_PROBE"))
        check_skip_unless_required("GATE_REQUIRE_XMLLINT", TOOL_REASON);
    expect_probe(TOOL_TEST, "GATE_REQUIRE_XMLLINT", NULL, 1, TOOL_REASON, NULL);
    expect_probe(TOOL_TEST, "GATE_REQUIRE_XMLLINT", "0", 1, TOOL_REASON, NULL);
    expect_probe(TOOL_TEST, "GATE_REQUIRE_XMLLINT", "1", 0, TOOL_REASON,
                 "GATE_REQUIRE_XMLLINT=1 but this test cannot run: ");
}

#define ISA_TEST "skip/an_isa_skip_fails_when_the_cpu_lists_it"
#define ISA_REASON "no avx512 here (probe: simulated CPU without it)"

Test(skip, an_isa_skip_fails_when_the_cpu_lists_it, .timeout = 1200)
{
    if (getenv("GATE_SKIP_PROBE"))
        check_skip_no_isa("avx512", ISA_REASON);
    expect_probe(ISA_TEST, "GATE_REQUIRE_ISA", NULL, 1, ISA_REASON, NULL);
    expect_probe(ISA_TEST, "GATE_REQUIRE_ISA", "avx2", 1, ISA_REASON, NULL);
    expect_probe(ISA_TEST, "GATE_REQUIRE_ISA", "avx2,avx512", 0, ISA_REASON,
                 "GATE_REQUIRE_ISA=avx2,avx512 names avx512 but this test cannot run: ");
}

Test(skip, the_isa_list_names_whole_entries)
{
    unsetenv("GATE_REQUIRE_ISA");
    cr_expect_eq(check_isa_required("avx2"), 0);
    setenv("GATE_REQUIRE_ISA", "", 1);
    cr_expect_eq(check_isa_required("avx2"), 0);
    setenv("GATE_REQUIRE_ISA", "avx2", 1);
    cr_expect_eq(check_isa_required("avx2"), 1);
    cr_expect_eq(check_isa_required("avx512"), 0);
    setenv("GATE_REQUIRE_ISA", "avx2,avx512", 1);
    cr_expect_eq(check_isa_required("avx2"), 1);
    cr_expect_eq(check_isa_required("avx512"), 1);
    cr_expect_eq(check_isa_required("avx"), 0, "a prefix of an entry is not the entry");
    setenv("GATE_REQUIRE_ISA", "avx512x,xavx2", 1);
    cr_expect_eq(check_isa_required("avx512"), 0);
    cr_expect_eq(check_isa_required("avx2"), 0);
    unsetenv("GATE_REQUIRE_ISA");
    setenv("GATE_REQUIRE_XMLLINT", "0", 1);
    cr_expect_eq(check_required("GATE_REQUIRE_XMLLINT"), 0);
    setenv("GATE_REQUIRE_XMLLINT", "1", 1);
    cr_expect_eq(check_required("GATE_REQUIRE_XMLLINT"), 1);
    unsetenv("GATE_REQUIRE_XMLLINT");
}
