/* conformance.c — listing the conformance cases and naming their files (conformance.h).
 * Start reading: conformance_cases().
 */
#include "tests/support/conformance.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>

#include "tests/support/check.h"

int conformance_cases(char names[][CONFORMANCE_NAME_MAX], int max)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/conformance", check_shared_dir());
    DIR *d = opendir(dir);
    cr_assert(d, "cannot open %s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        char p[1400];
        snprintf(p, sizeof p, "%s/%s/model.gguf", dir, e->d_name);
        FILE *f = fopen(p, "rb");
        if (!f)
            continue;
        fclose(f);
        snprintf(names[n++], CONFORMANCE_NAME_MAX, "%s", e->d_name);
    }
    closedir(d);
    return n;
}

const char *conformance_path(const char *name, const char *file)
{
    static char buf[8][1400];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/conformance/%s/%s", check_shared_dir(), name, file);
    return buf[k];
}
