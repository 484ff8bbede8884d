/* test_skip.c — skips are never passes (issue 10 §5): the one skip helper (tests/support/skip.h)
 * that every device test goes through prints its reason in the normal output, and a device test
 * that skips for want of a GPU FAILS when GATE_REQUIRE_GPU=1.
 *
 * The rule is tested on Criterion itself, not on a stand-in: the test re-runs its own binary,
 * filtered to itself, as a probe (GATE_SKIP_PROBE=1) that calls check_skip_no_device() exactly as
 * tests/cuda do on a host without a device, and reads the probe's exit status, output and TAP
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

/* Run this test binary filtered to the probe test, with GATE_SKIP_PROBE=1 and GATE_REQUIRE_GPU
 * set to require (NULL: unset); stdout+stderr to out, TAP report to tap. Returns the wait
 * status. */
static int run_probe(const char *require, const char *out, const char *tap)
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
        if (require)
            setenv("GATE_REQUIRE_GPU", require, 1);
        else
            unsetenv("GATE_REQUIRE_GPU");
        execl("/proc/self/exe", "test_skip", "--jobs", "1", "--filter", PROBE_TEST, tap_arg,
              (char *)NULL);
        _exit(127);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return st;
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
