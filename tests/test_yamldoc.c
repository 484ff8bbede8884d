/* test_yamldoc.c — harness/yamldoc.{h,c} on its own, without a ladder: the prescan's refusals
 * (syntax, aliases, a second document, depth and entry bounds), each at file:line:column; the
 * mapping check (wrong node type, non-scalar, duplicate and unknown keys, the line of the first
 * occurrence); the typed readers on good values, at their bounds and on every wrong kind; and
 * lists. Every message is compared whole, so a changed place or wording shows.
 * Start reading: yamldoc.a_mapping_refuses_duplicate_unknown_and_non_scalar_keys.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "harness/yamldoc.h"

static const struct yamldoc_limits LIM = {.max_depth = 4, .max_entries = 3, .what = "thing"},
                                   WIDE = {.max_depth = 4, .max_entries = 100, .what = "thing"};

/* Load text as file "f.yaml" into y (errors into err) within lim. */
static int load_within(struct yamldoc *y, struct gate_err *err, const char *text,
                       const struct yamldoc_limits *lim)
{
    memset(y, 0, sizeof *y);
    y->path = "f.yaml";
    y->err = err;
    err_clear(err);
    return yamldoc_load(y, (const unsigned char *)text, strlen(text), lim);
}

static int load(struct yamldoc *y, struct gate_err *err, const char *text)
{
    return load_within(y, err, text, &LIM);
}

/* Load text, expecting ERR_INPUT with exactly want. */
static void refused(const char *text, const char *want)
{
    struct yamldoc y;
    struct gate_err err = {0};
    cr_expect_eq(load(&y, &err, text), ERR_INPUT, "accepted: %s", text);
    cr_expect_str_eq(err.msg, want, "%s\n got %s\nwant %s", text, err.msg, want);
    cr_expect_eq(y.loaded, 0, "a refused document left something to free");
    yamldoc_free(&y);
}

Test(yamldoc, the_prescan_refuses_at_the_place_with_the_owner_named)
{
    refused("a: [1, 2\n", "f.yaml:2:1: YAML error: did not find expected ',' or ']' while parsing a"
                          " flow sequence");
    refused("a: &x 1\nb: *x\n",
            "f.yaml:2:4: YAML aliases (*name) are not allowed in a thing; write the value out");
    refused("a: 1\n---\nb: 2\n", "f.yaml:2:1: a thing is one YAML document; found a second");
    /* depth 4 allowed, the fifth collection refused where it starts */
    struct yamldoc y;
    struct gate_err err = {0};
    cr_expect_eq(load(&y, &err, "a: {b: {c: [1]}}\n"), 0, "%s", err.msg);
    yamldoc_free(&y);
    refused("a: {b: {c: [{d: 1}]}}\n",
            "f.yaml:1:13: YAML nested deeper than 4 levels (the bound for a thing)");
    /* three entries allowed; a fourth refused at itself, in a list and in a mapping */
    cr_expect_eq(load(&y, &err, "a: [1, 2, 3]\nb: 1\nc: 2\n"), 0, "%s", err.msg);
    yamldoc_free(&y);
    refused("a: [1, 2, 3, 4]\n",
            "f.yaml:1:14: a list with more than 3 entries (the bound for one thing collection)");
    refused("a: 1\nb: 2\nc: 3\nd: 4\n",
            "f.yaml:4:1: a mapping with more than 3 entries (the bound for one thing collection)");
}

Test(yamldoc, an_empty_document_has_no_root_and_a_good_one_reads_back)
{
    struct yamldoc y;
    struct gate_err err = {0};
    cr_assert_eq(load(&y, &err, ""), 0, "%s", err.msg);
    cr_expect_null(yamldoc_root(&y), "an empty document has no root");
    yamldoc_free(&y);
    yamldoc_free(&y); /* twice: nothing left */
    yamldoc_free(NULL);
    cr_assert_eq(load(&y, &err, "name: x\nlist: [a, b]\n"), 0, "%s", err.msg);
    yaml_node_t *r = yamldoc_root(&y), *v = NULL;
    static const char *const keys[] = {"name", "list", NULL};
    cr_assert_eq(yamldoc_check_map(&y, r, "the top", keys), 0, "%s", err.msg);
    cr_expect_str_eq(yamldoc_scalar(yamldoc_get(&y, r, "name")), "x");
    cr_expect_null(yamldoc_get(&y, r, "other"));
    cr_expect_str_eq(yamldoc_kind(yamldoc_get(&y, r, "list")), "a list");
    cr_expect_str_eq(yamldoc_kind(r), "a mapping");
    cr_expect_str_eq(yamldoc_kind(NULL), "nothing");
    cr_expect_null(yamldoc_scalar(r), "a mapping is no scalar");
    cr_expect_eq(yamldoc_need(&y, r, "list", "the top", &v), 0);
    int n = 0;
    yaml_node_t *it;
    YAMLDOC_FOR_ITEMS(&y, v, it)
    cr_expect_str_eq(yamldoc_scalar(it), n++ ? "b" : "a");
    cr_expect_eq(n, 2);
    cr_expect_eq(yamldoc_need(&y, r, "size", "the top", &v), ERR_INPUT);
    cr_expect_str_eq(err.msg, "f.yaml:1:1: the top is missing required key 'size'");
    cr_expect_null(v);
    yamldoc_free(&y);
}

Test(yamldoc, a_mapping_refuses_duplicate_unknown_and_non_scalar_keys)
{
    static const char *const keys[] = {"a", "b", "c", NULL};
    static const struct {
        const char *text, *want;
        int any_key; /* allowed = NULL */
    } cases[] = {
        {"m: [1]\n", "f.yaml:1:4: m must be a mapping, found a list", 0},
        {"m: x\n", "f.yaml:1:4: m must be a mapping, found a scalar", 0},
        {"m: {a: 1, b: 2, a: 3}\n", "f.yaml:1:17: duplicate key 'a' in m (first at line 1)", 0},
        {"m:\n  b: 1\n  a: 2\n  b: 3\n", "f.yaml:4:3: duplicate key 'b' in m (first at line 2)", 1},
        {"m: {a: 1, z: 2}\n", "f.yaml:1:11: unknown key 'z' in m (expected one of: a, b, c)", 0},
        {"m: {a: 1, [x]: 2}\n", "f.yaml:1:11: keys of m must be scalars", 1},
        {"m: {{x: 1}: 2}\n", "f.yaml:1:5: keys of m must be scalars", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct yamldoc y;
        struct gate_err err = {0};
        cr_assert_eq(load(&y, &err, cases[i].text), 0, "%s", err.msg);
        yaml_node_t *m = yamldoc_get(&y, yamldoc_root(&y), "m");
        cr_expect_eq(yamldoc_check_map(&y, m, "m", cases[i].any_key ? NULL : keys), ERR_INPUT,
                     "case %zu accepted", i);
        cr_expect_str_eq(err.msg, cases[i].want, "case %zu\n got %s\nwant %s", i, err.msg,
                         cases[i].want);
        yamldoc_free(&y);
    }
    /* the first error wins: a second failure does not overwrite the message */
    struct yamldoc y;
    struct gate_err err = {0};
    cr_assert_eq(load(&y, &err, "m: {a: 1, z: 2}\nl: 1\n"), 0, "%s", err.msg);
    yaml_node_t *r = yamldoc_root(&y);
    yamldoc_check_map(&y, yamldoc_get(&y, r, "m"), "m", keys);
    cr_expect_eq(yamldoc_check_seq(&y, yamldoc_get(&y, r, "l"), "l", 0), ERR_INPUT);
    cr_expect_str_eq(err.msg, "f.yaml:1:11: unknown key 'z' in m (expected one of: a, b, c)");
    yamldoc_free(&y);
}

Test(yamldoc, typed_readers_take_good_values_and_refuse_the_rest_at_their_place)
{
    struct yamldoc y;
    struct gate_err err = {0};
    cr_assert_eq(load_within(&y, &err,
                             "s: hello\ne: ''\ni: 42\nneg: -3\nbig: 99999999999999999999\nf: 2.5\n"
                             "nan: .nan\nl: [1]\nm: {a: 1}\nx: 12abcd\nnil: []\n",
                             &WIDE),
                 0, "%s", err.msg);
    yaml_node_t *r = yamldoc_root(&y);
#define AT(k) yamldoc_get(&y, r, k)
    char buf[6];
    int iv = -1;
    double dv = -1;
    cr_expect_eq(yamldoc_get_str(&y, AT("s"), "s", buf, sizeof buf), 0, "%s", err.msg);
    cr_expect_str_eq(buf, "hello");
    cr_expect_eq(yamldoc_get_int(&y, AT("i"), "i", 0, 42, &iv), 0, "%s", err.msg);
    cr_expect_eq(iv, 42, "the upper bound is inclusive");
    cr_expect_eq(yamldoc_get_int(&y, AT("neg"), "neg", -3, 0, &iv), 0, "%s", err.msg);
    cr_expect_eq(iv, -3, "the lower bound is inclusive");
    cr_expect_eq(yamldoc_get_num(&y, AT("f"), "f", 2.5, 2.5, &dv), 0, "%s", err.msg);
    cr_expect_eq(dv, 2.5);
    cr_expect_eq(yamldoc_check_seq(&y, AT("l"), "l", 1), 0, "%s", err.msg);
    cr_expect_eq(yamldoc_check_seq(&y, AT("nil"), "nil", 0), 0, "an empty list may be allowed");
    static const struct {
        int kind; /* 0 str (cap 6), 1 int [0, 41], 2 num [0, 1], 3 nonempty list */
        const char *key, *want;
    } bad[] = {
        {0, "e", "f.yaml:2:4: e must not be empty"},
        {0, "x", "f.yaml:10:4: x is longer than 5 characters"},
        {0, "l", "f.yaml:8:4: l must be a string, found a list"},
        {0, "m", "f.yaml:9:4: m must be a string, found a mapping"},
        {1, "i", "f.yaml:3:4: i must be in [0, 41], found 42"},
        {1, "neg", "f.yaml:4:6: neg must be in [0, 41], found -3"},
        {1, "big", "f.yaml:5:6: big must be an integer, found '99999999999999999999'"},
        {1, "f", "f.yaml:6:4: f must be an integer, found '2.5'"},
        {1, "x", "f.yaml:10:4: x must be an integer, found '12abcd'"},
        {1, "e", "f.yaml:2:4: e must be an integer, found ''"},
        {1, "l", "f.yaml:8:4: l must be an integer, found a list"},
        {2, "f", "f.yaml:6:4: f must be in [0, 1], found 2.5"},
        {2, "nan", "f.yaml:7:6: nan must be a number, found '.nan'"},
        {2, "x", "f.yaml:10:4: x must be a number, found '12abcd'"},
        {2, "m", "f.yaml:9:4: m must be a number, found a mapping"},
        {3, "s", "f.yaml:1:4: s must be a list, found a scalar"},
        {3, "nil", "f.yaml:11:6: nil must not be empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err_clear(&err);
        int rc = bad[i].kind == 0   ? yamldoc_get_str(&y, AT(bad[i].key), bad[i].key, buf, 6)
                 : bad[i].kind == 1 ? yamldoc_get_int(&y, AT(bad[i].key), bad[i].key, 0, 41, &iv)
                 : bad[i].kind == 2 ? yamldoc_get_num(&y, AT(bad[i].key), bad[i].key, 0, 1, &dv)
                                    : yamldoc_check_seq(&y, AT(bad[i].key), bad[i].key, 1);
        cr_expect_eq(rc, ERR_INPUT, "case %zu (%s) accepted", i, bad[i].key);
        cr_expect_str_eq(err.msg, bad[i].want, "case %zu\n got %s\nwant %s", i, err.msg,
                         bad[i].want);
    }
    cr_expect_eq(iv, -3, "a refused integer left the output as it was");
    cr_expect_eq(dv, 2.5, "a refused number left the output as it was");
#undef AT
    /* an error without a node names the file only */
    err_clear(&err);
    cr_expect_eq(yamldoc_fail(&y, NULL, "no %s here", "node"), ERR_INPUT);
    cr_expect_str_eq(err.msg, "f.yaml: no node here");
    yamldoc_free(&y);
}
