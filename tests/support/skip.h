/* skip.h — the one way a test skips (issue 10 §5: skips are never passes).
 *
 * Every skip prints "SKIP suite::test: reason" on stderr, so the reason shows in the normal
 * (non-verbose) output — Criterion itself only counts skips — and ci/test.sh lists each skip
 * with its reason after the run. A skip because the host has no usable GPU FAILS instead when
 * $GATE_REQUIRE_GPU=1 (the GPU host's checks set it): on a host that must have a device, a
 * device test that could not run is a failure, never a pass (DESIGN.md settled question 6).
 * Start reading: check_skip_no_device().
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

#endif
