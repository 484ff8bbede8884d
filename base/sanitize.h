/* sanitize.h — a hot loop outside the sanitizers' instrumentation, its memory still checked.
 *
 * Under AddressSanitizer (the GATE_SANITIZE build, -O1) an instrumented float loop runs scalar
 * with a shadow check per load: the reference twin's dot product was 82 % of the sanitizer
 * test suite's time. A function marked GATE_UNINSTRUMENTED is compiled without ASan/UBSan
 * checks (and at -O3, CMakeLists.txt); it must call gate_check_range() on every range it reads
 * or writes first, which checks the whole range against ASan's shadow memory at once and reports
 * the first bad byte as an ordinary ASan error (the report names this call's stack). Outside the
 * sanitizer build both are nothing. */
#ifndef GATE_SANITIZE_H
#define GATE_SANITIZE_H

#include <stddef.h>
#include <stdint.h>

#if defined(__SANITIZE_ADDRESS__)
#define GATE_UNINSTRUMENTED __attribute__((no_sanitize("address", "undefined")))
/* Report an ASan error when any of the `bytes` bytes at p is not addressable. */
void gate_check_range(const void *p, size_t bytes);
#else
#define GATE_UNINSTRUMENTED
static inline void gate_check_range(const void *p, size_t bytes)
{
    (void)p;
    (void)bytes;
}
#endif

/* gate_check_range() over n floats at p (nothing for n <= 0): the common case of the kernels. */
static inline void gate_check_floats(const float *p, int64_t n)
{
    gate_check_range(p, n > 0 ? (size_t)n * sizeof *p : 0);
}

#endif
