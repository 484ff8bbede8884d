/* sanitize.c — gate_check_range() for the sanitizer build (see sanitize.h). */
#include "base/sanitize.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>

void gate_check_range(const void *p, size_t bytes)
{
    if (!bytes)
        return;
    const volatile char *bad = __asan_region_is_poisoned((void *)p, bytes);
    if (bad)
        (void)*bad; /* an instrumented read of the first bad byte: ASan reports it and stops */
}
#else
/* ISO C wants a translation unit to hold a declaration */
typedef int gate_sanitize_unused;
#endif
