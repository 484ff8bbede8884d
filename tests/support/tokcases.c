/* tokcases.c — see tokcases.h. */
#include "tokcases.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *tokcases_unhex(const char *h, size_t *n)
{
    size_t l = strlen(h) / 2;
    char *p = malloc(l + 1);
    cr_assert_not_null(p);
    for (size_t i = 0; i < l; i++) {
        unsigned v;
        cr_assert_eq(sscanf(h + 2 * i, "%2x", &v), 1);
        p[i] = (char)v;
    }
    p[l] = '\0';
    *n = l;
    return p;
}

json_t *tokcases_load(void)
{
    json_error_t jerr;
    json_t *root = json_load_file(TOKCASES_PATH, JSON_ALLOW_NUL, &jerr);
    cr_assert_not_null(root, "%s: %s (line %d)", TOKCASES_PATH, jerr.text, jerr.line);
    json_t *cases = json_object_get(root, "cases");
    cr_assert(json_is_array(cases) && json_array_size(cases) >= 40);
    json_incref(cases);
    json_decref(root);
    return cases;
}
