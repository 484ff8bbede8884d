/* skip.h — the one way a test skips (issue 10 §5: skips are never passes).
 *
 * Every skip prints "SKIP suite::test: reason" on stderr, so the reason shows in the normal
 * (non-verbose) output — Criterion itself only counts skips — and ci/test.sh lists each skip
 * with its reason after the run. A skip because the host has no usable GPU FAILS instead when
 * $GATE_REQUIRE_GPU=1 (the GPU host's checks set it): on a host that must have a device, a
 * device test that could not run is a failure, never a pass (DESIGN.md settled question 6).
 *
 * Every other skip names the GATE_REQUIRE_* variable that turns it into a failure
 * (check_skip_unless_required): a skip is allowed only where the host really lacks the thing,
 * and ci/test.sh sets each variable wherever the thing must exist — GATE_REQUIRE_XMLLINT and
 * GATE_REQUIRE_CHROMIUM always (ci/deps.sh installs both), GATE_REQUIRE_ISA to the instruction
 * sets /proc/cpuinfo lists, GATE_REQUIRE_GPU when nvidia-smi lists a GPU, GATE_REQUIRE_CLEAN_TREE
 * on a clean checkout and under CI (the end-to-end release tests: a dirty build cannot release).
 * A skip that depends only on the build configuration is no skip: that test is not compiled
 * there.
 * Start reading: check_skip_no_device(), check_skip_unless_required().
 */
#ifndef GATE_TEST_SKIP_H
#define GATE_TEST_SKIP_H

/* 1 when $GATE_REQUIRE_GPU is set to anything but "" or "0": device tests must not skip. */
int check_gpu_required(void);

/* The current test cannot run because no usable device exists (reason printf-style, e.g. the
 * backend's own error text). Prints the SKIP line and skips the test, or, when
 * check_gpu_required(), fails it with "GATE_REQUIRE_GPU=1 but ...". Does not return. */
void check_skip_no_device(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Skip the current test for a reason that is not a missing device (printf-style): prints the
 * SKIP line and skips, whatever GATE_REQUIRE_GPU says. Does not return. */
void check_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* 1 when the environment variable var (a GATE_REQUIRE_* name) is set to anything but "" or "0". */
int check_required(const char *var);

/* The current test cannot run because the host lacks something (a tool, an instruction set):
 * when check_required(var), FAIL with "VAR=... but <reason>"; else print the SKIP line and
 * skip. Does not return. */
void check_skip_unless_required(const char *var, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* Skip for want of instruction set isa ("avx2", "avx512"): fails instead when the
 * comma-separated list in $GATE_REQUIRE_ISA names it (ci/test.sh derives the list from
 * /proc/cpuinfo, so a build or a dispatcher that does not find what the CPU has fails CI).
 * Does not return. */
void check_skip_no_isa(const char *isa, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* 1 when $GATE_REQUIRE_ISA's comma-separated list names isa exactly. */
int check_isa_required(const char *isa);

#endif
