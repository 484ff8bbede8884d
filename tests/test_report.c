/* test_report.c — the CI-facing formats of cli/report.c (issue 13): JUnit XML for `gate run`
 * and `gate release check`, and `gate release check --json`.
 *
 * Every JUnit file is read back by a tiny well-formedness check (xml_check below: one root,
 * tags nested and closed, attribute values quoted, no raw '<' or control character in text or
 * values, only the five entities) that also counts testcases, failures, errors and skips per
 * testsuite and compares them with the counts the file declares. The JSON is parsed with
 * jansson. Release results are built with tests/support/ladderfix.h, as tests/test_release.c
 * builds them: receipts from the documented payload schema, signed through the store, judged
 * against a stand-in clean build. No gate run happens here.
 * report.one_matrix_in_the_text_json_junit_and_html pins the release matrix that all four
 * outputs of a release lay (text, JSON, JUnit, and the HTML page of cli/report_html.c) byte for
 * byte on a ladder with two models, two hosts, identity-setting columns, an excluded cell, an
 * empty grid entry and an anchor case.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/report.h"
#include "cli/report_html.h"
#include "harness/identity.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "receipts/key.h"
#include "receipts/store.h"
#include "tests/support/check.h"
#include "tests/support/ladderfix.h"
#include "tests/support/skip.h"

/* a build commit that carries markup and a terminal escape: receipt-borne text that the STALE
 * reason quotes */
#define EVIL_COMMIT "bad</failure><x a=\"&\">\x1b]0;pwned\x07"

static struct ladderfix fx;

static const char *path_in(const char *name)
{
    return ladderfix_path(&fx, name);
}

/* ladderfix's release ladder: one MoE model, hosts a and b, cells moe/a/ref.decode (0),
 * moe/b/ref.decode (1), moe/a/ref.chat excluded with a reason that holds markup, and an anchor
 * case "conf" for which no receipt can exist here (MISSING). */
static void setup(void)
{
    ladderfix_init(&fx, "report");
    ladderfix_ladder(&fx, "ladder.yaml", "flaky <chat> & co", 1);
}

TestSuite(report, .init = setup);

/* Append one receipt for ladder cell ci to db, signed by k: the gates of a real PASS receipt
 * judged through the gate table (ladderfix_add), parity failing when fail, the build's commit
 * replaced when commit is not NULL. */
static void add(const char *db, const struct key_pair *k, int ci, int fail, const char *commit)
{
    ladderfix_add(&fx, path_in("ladder.yaml"), db, k, ci,
                  (struct ladderfix_fake){.fail = fail, .commit = commit});
}

/* The release of the test ladder from db as the build fx.self; *lp receives the ladder. */
static void evaluate(const char *db, struct ladder **lp, struct release_result *r)
{
    ladderfix_evaluate(&fx, path_in("ladder.yaml"), db, lp, r);
}

/* ---- a tiny XML well-formedness check that counts JUnit elements ----------------------------- */

struct suite_count {
    char name[2048];
    int decl_tests, decl_failures, decl_errors, decl_skipped; /* the attributes (-1: absent) */
    int tests, failures, errors, skipped;                     /* the elements inside */
};

struct xml_counts {
    struct suite_count suites[16];
    int n_suites;
    int root_tests, root_failures, root_errors; /* <testsuites> attributes */
    int tests, failures, errors, skipped;       /* elements in the whole file */
};

/* Text or an attribute value from p up to a byte in stop: no raw '<', no control character
 * but tab / newline / CR, '&' only as one of the five entities. Returns the end or NULL. */
static const char *xml_chars(const char *p, const char *stop, char *what, size_t n)
{
    size_t k = 0;
    for (; *p && !strchr(stop, *p); p++) {
        unsigned char c = (unsigned char)*p;
        cr_assert(c != '<', "raw '<' in XML text or value near: %.60s", p);
        cr_assert(c >= 0x20 || c == '\t' || c == '\n' || c == '\r',
                  "control character 0x%02x in XML near: %.60s", c, p);
        if (c == '&') {
            static const char *const ent[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
            int ok = 0;
            for (int i = 0; i < 5; i++)
                ok |= !strncmp(p, ent[i], strlen(ent[i]));
            cr_assert(ok, "bad entity near: %.60s", p);
        }
        if (what && k + 1 < n)
            what[k++] = *p;
    }
    if (what)
        what[k] = '\0';
    return p;
}

/* Check the whole document s and count its JUnit elements into *c. */
static void xml_check(const char *s, struct xml_counts *c)
{
    memset(c, 0, sizeof *c);
    const char *p = s;
    if (!strncmp(p, "<?xml", 5)) {
        p = strstr(p, "?>");
        cr_assert(p, "unterminated XML declaration");
        p += 2;
    }
    char stack[16][32];
    int depth = 0, roots = 0;
    struct suite_count *cur = NULL;
    while (*p) {
        if (*p != '<') {
            cr_assert(depth > 0 || strchr(" \t\r\n", *p), "text outside the root: %.60s", p);
            p = xml_chars(p, "<", NULL, 0);
            continue;
        }
        p++;
        if (*p == '/') {
            char name[32];
            size_t n = strcspn(p + 1, ">");
            cr_assert(p[1 + n] == '>' && n < sizeof name, "bad end tag: %.60s", p);
            snprintf(name, sizeof name, "%.*s", (int)n, p + 1);
            cr_assert(depth > 0 && !strcmp(stack[depth - 1], name), "</%s> closes <%s>", name,
                      depth ? stack[depth - 1] : "nothing");
            if (!strcmp(name, "testsuite"))
                cur = NULL;
            depth--;
            p += n + 2;
            continue;
        }
        char name[32];
        size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz-_");
        cr_assert(n > 0 && n < sizeof name, "bad start tag: %.60s", p);
        snprintf(name, sizeof name, "%.*s", (int)n, p);
        p += n;
        if (depth == 0)
            roots++;
        int is_suite = !strcmp(name, "testsuite");
        if (is_suite) {
            cr_assert(c->n_suites < 16);
            cur = &c->suites[c->n_suites++];
            memset(cur, 0, sizeof *cur);
            cur->decl_tests = cur->decl_failures = cur->decl_errors = cur->decl_skipped = -1;
        }
        for (;;) {
            while (strchr(" \t\r\n", *p) && *p)
                p++;
            if (*p == '>' || (*p == '/' && p[1] == '>'))
                break;
            char an[32], av[2048];
            size_t m = strcspn(p, "=");
            cr_assert(p[m] == '=' && p[m + 1] == '"' && m < sizeof an, "bad attribute: %.60s", p);
            snprintf(an, sizeof an, "%.*s", (int)m, p);
            p = xml_chars(p + m + 2, "\"", av, sizeof av);
            cr_assert(*p == '"', "unterminated attribute value");
            p++;
            int v = atoi(av);
            if (is_suite && !strcmp(an, "name"))
                snprintf(cur->name, sizeof cur->name, "%s", av);
            else if (is_suite && !strcmp(an, "tests"))
                cur->decl_tests = v;
            else if (is_suite && !strcmp(an, "failures"))
                cur->decl_failures = v;
            else if (is_suite && !strcmp(an, "errors"))
                cur->decl_errors = v;
            else if (is_suite && !strcmp(an, "skipped"))
                cur->decl_skipped = v;
            else if (!strcmp(name, "testsuites") && !strcmp(an, "tests"))
                c->root_tests = v;
            else if (!strcmp(name, "testsuites") && !strcmp(an, "failures"))
                c->root_failures = v;
            else if (!strcmp(name, "testsuites") && !strcmp(an, "errors"))
                c->root_errors = v;
        }
        int *field = !strcmp(name, "testcase")  ? &c->tests
                     : !strcmp(name, "failure") ? &c->failures
                     : !strcmp(name, "error")   ? &c->errors
                     : !strcmp(name, "skipped") ? &c->skipped
                                                : NULL;
        if (field) {
            (*field)++;
            cr_assert(cur, "<%s> outside a testsuite", name);
            int *sf = field == &c->tests      ? &cur->tests
                      : field == &c->failures ? &cur->failures
                      : field == &c->errors   ? &cur->errors
                                              : &cur->skipped;
            (*sf)++;
        }
        if (*p == '/') {
            p += 2;
            if (is_suite)
                cur = NULL;
            continue;
        }
        p++;
        cr_assert(depth < 16);
        snprintf(stack[depth++], sizeof stack[0], "%s", name);
    }
    cr_assert_eq(depth, 0, "unclosed <%s>", depth ? stack[depth - 1] : "");
    cr_assert_eq(roots, 1, "%d root elements", roots);
    for (int i = 0; i < c->n_suites; i++) {
        const struct suite_count *t = &c->suites[i];
        cr_expect_eq(t->decl_tests, t->tests, "suite %s declares %d tests, holds %d", t->name,
                     t->decl_tests, t->tests);
        cr_expect_eq(t->decl_failures, t->failures, "suite %s: failures", t->name);
        cr_expect_eq(t->decl_errors, t->errors, "suite %s: errors", t->name);
        cr_expect_eq(t->decl_skipped, t->skipped, "suite %s: skipped", t->name);
    }
    cr_expect_eq(c->root_tests, c->tests);
    cr_expect_eq(c->root_failures, c->failures);
    cr_expect_eq(c->root_errors, c->errors);
}

/* ---- gate release check --junit / --json ----------------------------------------------------- */

/* moe/a/ref.decode FAILs (receipt 1), moe/b/ref.decode only has a receipt of another build whose
 * commit carries markup and an escape (STALE, receipt 2), moe/a/ref.chat is EXCLUDED, the anchor
 * is MISSING. */
static void blocked_release(const char *db)
{
    add(db, &fx.key_a, 0, 1, NULL);
    add(db, &fx.key_b, 1, 0, EVIL_COMMIT);
}

Test(report, release_junit_has_a_testcase_per_row_and_escapes_receipt_text)
{
    blocked_release(path_in("r.db"));
    struct ladder *l = NULL;
    struct release_result r;
    evaluate(path_in("r.db"), &l, &r);
    struct gate_err err = {0};
    cr_assert_eq(report_release_junit(path_in("release.xml"), l, &r, NULL, &err), 0, "%s", err.msg);
    char *xml = check_slurp_text(path_in("release.xml"));
    cr_assert(xml);
    struct xml_counts c;
    xml_check(xml, &c);
    cr_expect_eq(c.n_suites, 1);
    cr_expect_str_eq(c.suites[0].name, "release");
    /* two cells (FAIL, STALE) and the anchor (MISSING) fail; the excluded cell is skipped */
    cr_expect_eq(c.tests, 4, "%s", xml);
    cr_expect_eq(c.failures, 3, "%s", xml);
    cr_expect_eq(c.errors, 0, "%s", xml);
    cr_expect_eq(c.skipped, 1, "%s", xml);
    cr_expect(strstr(xml, "message=\"FAIL (receipt 1): receipt 1 FAILED parity"), "%s", xml);
    cr_expect(strstr(xml, "message=\"STALE (receipt 2): receipt 2 is for build"
                          " bad&lt;/failure&gt;&lt;x a=&quot;&amp;&quot;&gt;\\x1b]0;pwned\\x07"),
              "%s", xml);
    cr_expect(strstr(xml, "<skipped message=\"excluded: flaky &lt;chat&gt; &amp; co\"/>"), "%s",
              xml);
    cr_expect(strstr(xml, "classname=\"anchor\" name=\"conf\""), "%s", xml);
    free(xml);
    release_result_free(&r);
    ladder_free(l);
}

Test(report, release_json_holds_every_row_with_state_receipts_and_reason)
{
    blocked_release(path_in("r.db"));
    add(path_in("r.db"), &fx.key_a, 0, 0, NULL); /* a PASS after the FAIL: FLAKY, receipt 3 */
    struct ladder *l = NULL;
    struct release_result r;
    evaluate(path_in("r.db"), &l, &r);
    char *buf = NULL;
    size_t len = 0;
    struct gate_err err = {0};
    FILE *f = open_memstream(&buf, &len);
    cr_assert_eq(report_release_json(f, l, "ladder.yaml", "r.db", &fx.self, &r, NULL, &err), 0);
    fclose(f);
    json_error_t je;
    json_t *doc = json_loads(buf, 0, &je);
    cr_assert(doc, "not JSON (%s): %s", je.text, buf);
    cr_expect_str_eq(json_string_value(json_object_get(doc, "schema")), "gate.release/1");
    cr_expect(json_is_false(json_object_get(doc, "ok")));
    cr_expect_str_eq(
        json_string_value(json_object_get(json_object_get(doc, "build"), "git_commit")),
        fx.self.git_commit);
    cr_expect(json_is_null(json_object_get(doc, "store_problem")));
    cr_expect(json_is_null(json_object_get(doc, "signoff")));
    json_t *counts = json_object_get(doc, "counts");
    cr_expect_eq(json_integer_value(json_object_get(counts, "required")), 2);
    cr_expect_eq(json_integer_value(json_object_get(counts, "excluded")), 1);
    cr_expect_eq(json_integer_value(json_object_get(counts, "anchors")), 1);
    cr_expect_eq(json_integer_value(json_object_get(counts, "bad_cells")), 2);
    json_t *states = json_object_get(counts, "states");
    cr_expect_eq(json_integer_value(json_object_get(states, "FLAKY")), 1);
    cr_expect_eq(json_integer_value(json_object_get(states, "STALE")), 1);
    cr_expect_eq(json_integer_value(json_object_get(states, "MISSING")), 1);
    cr_expect_eq(json_integer_value(json_object_get(states, "EXCLUDED")), 1);
    cr_expect_eq(json_integer_value(json_object_get(states, "PASS")), 0);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(doc, "store"), "receipts")), 3);
    static const struct {
        const char *kind, *name, *state;
        json_int_t blocking; /* 0: null */
        int n_pass;
    } want[] = {
        {"cell", "moe/a/ref.decode", "FLAKY", 1, 1},
        {"cell", "moe/b/ref.decode", "STALE", 2, 0},
        {"excluded", "moe/a/ref.chat", "EXCLUDED", 0, 0},
        {"anchor", "conf", "MISSING", 0, 0},
    };
    json_t *rows = json_object_get(doc, "rows");
    cr_assert_eq(json_array_size(rows), 4, "%s", buf);
    for (size_t i = 0; i < 4; i++) {
        json_t *w = json_array_get(rows, i);
        cr_expect_str_eq(json_string_value(json_object_get(w, "kind")), want[i].kind);
        cr_expect_str_eq(json_string_value(json_object_get(w, "name")), want[i].name);
        cr_expect_str_eq(json_string_value(json_object_get(w, "state")), want[i].state, "row %s",
                         want[i].name);
        json_t *b = json_object_get(w, "blocking_receipt");
        if (want[i].blocking)
            cr_expect_eq(json_integer_value(b), want[i].blocking, "row %s", want[i].name);
        else
            cr_expect(json_is_null(b), "row %s", want[i].name);
        json_t *ids = json_object_get(w, "pass_receipts");
        cr_expect_eq(json_array_size(ids), (size_t)want[i].n_pass, "row %s", want[i].name);
    }
    json_t *flaky = json_array_get(rows, 0);
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(flaky, "pass_receipts"), 0)), 3);
    cr_expect_str_eq(json_string_value(json_object_get(flaky, "host")), "a");
    cr_expect_str_eq(json_string_value(json_object_get(flaky, "mode")), "ref.decode");
    /* receipt-borne text arrives whole (the consumer escapes it for its own output) */
    cr_expect(
        strstr(json_string_value(json_object_get(json_array_get(rows, 1), "reason")), EVIL_COMMIT),
        "%s", buf);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(rows, 2), "excluded_reason")),
                     "flaky <chat> & co");
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(rows, 3), "arch")),
                     "qwen3moe");
    json_decref(doc);
    free(buf);
    release_result_free(&r);
    ladder_free(l);
}

/* The command layer: --json replaces the text on stdout, exit codes stay, --junit is written
 * also when the check cannot run, and a JUnit file that cannot be written is an exit 3. */
Test(report, release_check_json_and_junit_keep_the_exit_codes)
{
    blocked_release(path_in("r.db"));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    char ladder[1024], db[1024];
    snprintf(ladder, sizeof ladder, "%s", path_in("ladder.yaml"));
    snprintf(db, sizeof db, "%s", path_in("r.db"));
    struct release_options o = {.ladder = ladder, .db = db};
    int code = release_check_report(f, &o, &fx.self, 1, path_in("r.xml"));
    fclose(f);
    cr_expect_eq(code, 1, "%s", buf);
    json_t *doc = json_loads(buf, 0, NULL);
    cr_assert(doc, "stdout is not one JSON document: %s", buf);
    cr_expect(json_is_false(json_object_get(doc, "ok")));
    cr_expect_null(strstr(buf, "RELEASE BLOCKED"), "text mixed into the JSON: %s", buf);
    json_decref(doc);
    free(buf);
    struct stat sb;
    cr_expect_eq(stat(path_in("r.xml"), &sb), 0, "--junit wrote nothing");
    /* a store that does not exist: exit 2, JSON {"ok": false, "error"}, a JUnit <error> */
    buf = NULL;
    f = open_memstream(&buf, &len);
    o.db = path_in("missing.db");
    code = release_check_report(f, &o, &fx.self, 1, path_in("missing.xml"));
    fclose(f);
    cr_expect_eq(code, 2, "%s", buf);
    doc = json_loads(buf, 0, NULL);
    cr_assert(doc, "%s", buf);
    cr_expect(json_is_false(json_object_get(doc, "ok")));
    cr_expect(json_string_value(json_object_get(doc, "error")), "%s", buf);
    json_decref(doc);
    free(buf);
    char *xml = check_slurp_text(path_in("missing.xml"));
    cr_assert(xml, "a check that could not run left no JUnit file");
    struct xml_counts c;
    xml_check(xml, &c);
    cr_expect_eq(c.tests, 1);
    cr_expect_eq(c.errors, 1, "%s", xml);
    cr_expect(strstr(xml, "missing.db"), "the error names the store: %s", xml);
    free(xml);
    /* an OK release whose JUnit file cannot be written is not a 0 */
    char db2[1024];
    snprintf(db2, sizeof db2, "%s", path_in("ok.db"));
    add(db2, &fx.key_a, 0, 0, NULL);
    add(db2, &fx.key_b, 1, 0, NULL);
    ladderfix_drop_anchor(path_in("ladder.yaml"), "report test");
    o.db = db2;
    f = fopen("/dev/null", "w");
    cr_expect_eq(release_check_report(f, &o, &fx.self, 0, path_in("r.xml")), 0);
    cr_expect_eq(release_check_report(f, &o, &fx.self, 0, path_in("no/such/dir/r.xml")), 3);
    fclose(f);
    /* --sign --json: the sign-off is in the document */
    char key[1024];
    snprintf(key, sizeof key, "%s", path_in("a.key"));
    o.sign_key = key;
    buf = NULL;
    f = open_memstream(&buf, &len);
    code = release_check_report(f, &o, &fx.self, 1, NULL);
    fclose(f);
    cr_expect_eq(code, 0, "%s", buf);
    doc = json_loads(buf, 0, NULL);
    cr_assert(doc, "%s", buf);
    cr_expect(json_is_true(json_object_get(doc, "ok")));
    json_t *so = json_object_get(doc, "signoff");
    cr_expect_str_eq(json_string_value(json_object_get(so, "key_id")), fx.key_a.id, "%s", buf);
    cr_expect_eq(strlen(json_string_value(json_object_get(so, "head"))), 64, "%s", buf);
    cr_expect_null(strstr(buf, "sign-off written"), "text mixed into the JSON: %s", buf);
    json_decref(doc);
    free(buf);
}

/* ---- gate run --junit ------------------------------------------------------------------------ */

static void set_gate(struct run_cell_result *c, const char *name, const char *verdict,
                     const char *summary)
{
    struct run_gate *g = &c->gates[c->n_gates++];
    snprintf(g->name, sizeof g->name, "%s", name);
    snprintf(g->verdict, sizeof g->verdict, "%s", verdict);
    snprintf(g->summary, sizeof g->summary, "%s", summary);
}

Test(report, run_junit_has_a_suite_per_cell_and_a_case_per_gate)
{
    struct run_cell_result cells[3];
    memset(cells, 0, sizeof cells);
    /* a PASS cell, stored */
    snprintf(cells[0].name, sizeof cells[0].name, "moe/a/ref.decode");
    snprintf(cells[0].verdict, sizeof cells[0].verdict, "PASS");
    cells[0].pass = 1;
    cells[0].receipt_id = 7;
    set_gate(&cells[0], "capability", "PASS", "ran on ref");
    set_gate(&cells[0], "parity", "PASS", "min cosine 0.99999");
    /* a FAIL and an ERROR gate whose summaries carry markup, controls and invalid UTF-8 */
    snprintf(cells[1].name, sizeof cells[1].name, "moe/a/ref.<chat>");
    snprintf(cells[1].verdict, sizeof cells[1].verdict, "FAIL");
    cells[1].receipt_id = 8;
    set_gate(&cells[1], "capability", "PASS", "ran on ref");
    set_gate(&cells[1], "parity", "FAIL", "cosine 0.42 < 0.999 at position 5 & \x1b[31m\xff");
    set_gate(&cells[1], "golden", "ERROR", "cannot read '</testcase>': \x01\"quoted\"");
    /* an anchor case whose receipt was not stored */
    snprintf(cells[2].name, sizeof cells[2].name, "anchor/conf/a");
    cells[2].is_anchor = 1;
    snprintf(cells[2].verdict, sizeof cells[2].verdict, "PASS");
    snprintf(cells[2].store_error, sizeof cells[2].store_error, "disk <full>");
    set_gate(&cells[2], "anchor", "PASS", "nmse 1e-14");
    struct run_result res = {.cells = cells, .n = 3, .n_pass = 1};
    struct gate_err err = {0};
    cr_assert_eq(report_run_junit(path_in("run.xml"), &res, NULL, &err), 0, "%s", err.msg);
    char *xml = check_slurp_text(path_in("run.xml"));
    cr_assert(xml);
    struct xml_counts c;
    xml_check(xml, &c);
    cr_expect_eq(c.n_suites, 3, "%s", xml);
    cr_expect_str_eq(c.suites[1].name, "moe/a/ref.&lt;chat&gt;");
    /* gates plus one "receipt" case per cell */
    cr_expect_eq(c.suites[0].tests, 3, "%s", xml);
    cr_expect_eq(c.suites[0].failures + c.suites[0].errors, 0, "%s", xml);
    cr_expect_eq(c.suites[1].tests, 4, "%s", xml);
    cr_expect_eq(c.suites[1].failures, 1, "%s", xml);
    cr_expect_eq(c.suites[1].errors, 1, "%s", xml);
    cr_expect_eq(c.suites[2].errors, 1, "the receipt that was not stored: %s", xml);
    cr_expect(strstr(xml, "<failure message=\"cosine 0.42 &lt; 0.999 at position 5 &amp;"
                          " \\x1b[31m\\xff\" type=\"FAIL\">"),
              "%s", xml);
    cr_expect(strstr(xml, "<error message=\"cannot read &apos;&lt;/testcase&gt;&apos;: "
                          "\\x01&quot;quoted&quot;\""),
              "%s", xml);
    cr_expect(strstr(xml, "not stored: no receipt exists for this run: disk &lt;full&gt;"), "%s",
              xml);
    cr_expect(strstr(xml, "<property name=\"receipt\" value=\"7\"/>"), "%s", xml);
    free(xml);
}

Test(report, run_junit_of_a_run_that_did_not_happen_is_an_error_not_an_empty_pass)
{
    struct gate_err err = {0};
    /* an older file at the path is replaced whole */
    FILE *f = fopen(path_in("run.xml"), "w");
    cr_assert(f);
    fputs("<testsuites tests=\"9\"/>\n", f);
    fclose(f);
    cr_assert_eq(report_run_junit(path_in("run.xml"), NULL, "ladder 'x.yaml': no such file", &err),
                 0, "%s", err.msg);
    char *xml = check_slurp_text(path_in("run.xml"));
    cr_assert(xml);
    struct xml_counts c;
    xml_check(xml, &c);
    cr_expect_eq(c.tests, 1, "%s", xml);
    cr_expect_eq(c.errors, 1, "%s", xml);
    cr_expect(strstr(xml, "ladder &apos;x.yaml&apos;: no such file"), "%s", xml);
    free(xml);
    /* an empty result without a message is an error too */
    struct run_result none = {0};
    cr_assert_eq(report_run_junit(path_in("run.xml"), &none, NULL, &err), 0, "%s", err.msg);
    xml = check_slurp_text(path_in("run.xml"));
    xml_check(xml, &c);
    cr_expect_eq(c.errors, 1, "%s", xml);
    free(xml);
    /* a folder that does not exist: ERR_ENV naming the path */
    cr_expect_eq(report_run_junit(path_in("nope/run.xml"), &none, NULL, &err), ERR_ENV);
    cr_expect(strstr(err.msg, "nope/run.xml"), "%s", err.msg);
}

/* ---- the common JUnit schema (tests/data/junit.xsd, docs/reports.md) ------------------------- */

/* 1: xmllint validates path against tests/data/junit.xsd; 0: it reports a validity error (its
 * exit 3; a schema that does not compile is neither); -1: anything else. Output in path.lint. */
static int junit_schema_valid(const char *path)
{
    char cmd[3300];
    snprintf(cmd, sizeof cmd,
             "xmllint --noout --schema '%s/tests/data/junit.xsd' '%s' >'%s.lint' 2>&1; r=$?;"
             " [ $r = 0 ] && exit 10; [ $r = 3 ] && exit 11; exit 12",
             GATE_SOURCE_DIR, path, path);
    int st = system(cmd) >> 8;
    return st == 10 ? 1 : st == 11 ? 0 : -1;
}

static void skip_without_xmllint(void)
{
    if (system("command -v xmllint >/dev/null 2>&1") != 0)
        check_skip_unless_required("GATE_REQUIRE_XMLLINT",
                                   "xmllint is absent: JUnit schema validation not run "
                                   "(ci/deps.sh installs libxml2-utils)");
}

static void expect_valid(const char *path)
{
    char lint[1100];
    snprintf(lint, sizeof lint, "%s.lint", path);
    int v = junit_schema_valid(path);
    char *why = check_slurp_text(lint), *xml = check_slurp_text(path);
    cr_expect_eq(v, 1, "%s does not validate against the common JUnit schema:\n%s\n%s", path, why,
                 xml);
    free(why);
    free(xml);
}

/* Every JUnit shape gate writes: a blocked release (failures, a skip), a run with PASS, FAIL and
 * ERROR gates and a receipt that was not stored, a run that did not happen, a check that could
 * not run. (The files of a real `gate run` / `release check` are validated in test_fleet.c.) */
Test(report, junit_files_validate_against_the_common_schema)
{
    skip_without_xmllint();
    struct gate_err err = {0};
    blocked_release(path_in("r.db"));
    struct ladder *l = NULL;
    struct release_result r;
    evaluate(path_in("r.db"), &l, &r);
    cr_assert_eq(report_release_junit(path_in("release.xml"), l, &r, NULL, &err), 0, "%s", err.msg);
    release_result_free(&r);
    ladder_free(l);
    expect_valid(path_in("release.xml"));

    struct run_cell_result cells[2];
    memset(cells, 0, sizeof cells);
    snprintf(cells[0].name, sizeof cells[0].name, "moe/a/ref.decode");
    snprintf(cells[0].verdict, sizeof cells[0].verdict, "FAIL");
    cells[0].receipt_id = 3;
    set_gate(&cells[0], "capability", "PASS", "ran on ref");
    set_gate(&cells[0], "parity", "FAIL", "cosine 0.42 < 0.999 at position 5 & <x>");
    set_gate(&cells[0], "golden", "ERROR", "cannot read 'g.json'");
    snprintf(cells[1].name, sizeof cells[1].name, "anchor/conf/a");
    cells[1].is_anchor = 1;
    snprintf(cells[1].verdict, sizeof cells[1].verdict, "PASS");
    snprintf(cells[1].store_error, sizeof cells[1].store_error, "disk full");
    set_gate(&cells[1], "anchor", "PASS", "nmse 1e-14");
    struct run_result res = {.cells = cells, .n = 2, .n_pass = 1};
    cr_assert_eq(report_run_junit(path_in("run.xml"), &res, NULL, &err), 0, "%s", err.msg);
    expect_valid(path_in("run.xml"));
    cr_assert_eq(report_run_junit(path_in("none.xml"), NULL, "ladder 'x.yaml': no such file", &err),
                 0, "%s", err.msg);
    expect_valid(path_in("none.xml"));

    char ladder[1024], db[1024];
    snprintf(ladder, sizeof ladder, "%s", path_in("ladder.yaml"));
    snprintf(db, sizeof db, "%s", path_in("missing.db"));
    struct release_options o = {.ladder = ladder, .db = db};
    FILE *f = fopen("/dev/null", "w");
    cr_assert(f);
    cr_expect_eq(release_check_report(f, &o, &fx.self, 0, path_in("cannot.xml")), 2);
    fclose(f);
    expect_valid(path_in("cannot.xml"));
}

/* The attack side: the schema must be able to fail. Each document below is well-formed XML that
 * a CI system would misread (a failure with no reason, a suite without its counts, a count that
 * is not a number, two outcomes for one test, a test outside a suite); each must be rejected as
 * a validity error, while the same document unmutated validates. */
Test(report, junit_schema_rejects_documents_a_ci_system_would_misread)
{
    skip_without_xmllint();
    static const char GOOD[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<testsuites name=\"gate run\" tests=\"2\" failures=\"1\" errors=\"0\">\n"
        "  <testsuite name=\"m/a/ref.decode\" tests=\"2\" failures=\"1\" errors=\"0\" "
        "skipped=\"0\">\n"
        "    <properties><property name=\"verdict\" value=\"FAIL\"/></properties>\n"
        "    <testcase classname=\"m/a/ref.decode\" name=\"capability\"/>\n"
        "    <testcase classname=\"m/a/ref.decode\" name=\"parity\">"
        "<failure message=\"cosine 0.42\" type=\"FAIL\">cosine 0.42</failure></testcase>\n"
        "  </testsuite>\n"
        "</testsuites>\n";
    static const struct {
        const char *what, *from, *to;
    } attack[] = {
        {"a failure without a message", "<failure message=\"cosine 0.42\" type", "<failure type"},
        {"an error without a message",
         "<failure message=\"cosine 0.42\" type=\"FAIL\">cosine 0.42</failure>",
         "<error type=\"ERROR\">disk full</error>"},
        {"a skip without a message",
         "<failure message=\"cosine 0.42\" type=\"FAIL\">cosine "
         "0.42</failure>",
         "<skipped/>"},
        {"a testsuite without its failures count",
         " tests=\"2\" failures=\"1\" errors=\"0\" "
         "skipped",
         " tests=\"2\" errors=\"0\" skipped"},
        {"a count that is not a number", "<testsuites name=\"gate run\" tests=\"2\"",
         "<testsuites name=\"gate run\" tests=\"two\""},
        {"a negative count", "errors=\"0\" skipped=\"0\"", "errors=\"0\" skipped=\"-1\""},
        {"two outcomes in one testcase", "cosine 0.42</failure>",
         "cosine 0.42</failure><error message=\"x\">x</error>"},
        {"a testcase without a classname",
         "<testcase classname=\"m/a/ref.decode\" "
         "name=\"capability\"/>",
         "<testcase name=\"capability\"/>"},
        {"a testcase outside a testsuite", "  </testsuite>\n",
         "  </testsuite>\n  <testcase classname=\"x\" name=\"y\"/>\n"},
        {"properties after the testcases",
         "    <properties><property name=\"verdict\" "
         "value=\"FAIL\"/></properties>\n",
         ""},
    };
    FILE *f = fopen(path_in("good.xml"), "w");
    cr_assert(f);
    fputs(GOOD, f);
    fclose(f);
    expect_valid(path_in("good.xml"));
    for (size_t i = 0; i < sizeof attack / sizeof attack[0]; i++) {
        const char *at = strstr(GOOD, attack[i].from);
        cr_assert(at, "attack '%s': its anchor is not in the document", attack[i].what);
        char doc[4096], name[64];
        snprintf(doc, sizeof doc, "%.*s%s%s", (int)(at - GOOD), GOOD, attack[i].to,
                 at + strlen(attack[i].from));
        if (i == sizeof attack / sizeof attack[0] - 1) { /* move properties to the end */
            char *end = strstr(doc, "  </testsuite>");
            cr_assert(end);
            char tail[2048];
            snprintf(tail, sizeof tail,
                     "    <properties><property name=\"verdict\" "
                     "value=\"FAIL\"/></properties>\n%s",
                     end);
            snprintf(end, sizeof doc - (size_t)(end - doc), "%s", tail);
        }
        snprintf(name, sizeof name, "attack%zu.xml", i);
        f = fopen(path_in(name), "w");
        cr_assert(f);
        fputs(doc, f);
        fclose(f);
        int v = junit_schema_valid(path_in(name));
        char lint[1100];
        snprintf(lint, sizeof lint, "%s.lint", path_in(name));
        char *why = check_slurp_text(lint);
        cr_expect_eq(v, 0, "the schema accepted %s (xmllint: %s):\n%s", attack[i].what, why, doc);
        free(why);
    }
}

/* ---- a blocked release is never green (issue 23 §5) ------------------------------------------ */

/* Every cell PASSes for the clean stand-in build, but the checking binary is dirty: a9e2031's
 * `release check --junit` exited 1 and wrote failures="0" errors="0". Every output must carry the
 * reason: a failing JUnit testcase, a "blocked_by" entry in the JSON. */
Test(report, a_dirty_build_fails_in_junit_and_json_not_only_in_the_exit_code)
{
    add(path_in("ok.db"), &fx.key_a, 0, 0, NULL);
    add(path_in("ok.db"), &fx.key_b, 1, 0, NULL);
    ladderfix_drop_anchor(path_in("ladder.yaml"), "report test");
    struct identity dirty = fx.self;
    dirty.git_dirty = 1;
    dirty.dirty_count = 1;
    snprintf(dirty.dirty_reason, sizeof dirty.dirty_reason,
             "the compile command of base/atomic.c has flag -include");
    char ladder[1024], db[1024];
    snprintf(ladder, sizeof ladder, "%s", path_in("ladder.yaml"));
    snprintf(db, sizeof db, "%s", path_in("ok.db"));
    struct release_options o = {.ladder = ladder, .db = db};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    /* the clean build: OK, nothing blocks, JUnit green */
    cr_assert_eq(release_check_report(f, &o, &fx.self, 1, path_in("clean.xml")), 0);
    fclose(f);
    json_t *doc = json_loads(buf, 0, NULL);
    cr_assert(doc, "%s", buf);
    cr_expect_eq(json_array_size(json_object_get(doc, "blocked_by")), 0, "%s", buf);
    json_decref(doc);
    free(buf);
    char *xml = check_slurp_text(path_in("clean.xml"));
    struct xml_counts c;
    xml_check(xml, &c);
    cr_expect_eq(c.failures + c.errors, 0, "%s", xml);
    free(xml);
    /* the dirty build: exit 1, and JUnit and JSON say why */
    buf = NULL;
    f = open_memstream(&buf, &len);
    cr_expect_eq(release_check_report(f, &o, &dirty, 1, path_in("dirty.xml")), 1);
    fclose(f);
    doc = json_loads(buf, 0, NULL);
    cr_assert(doc, "%s", buf);
    json_t *b = json_array_get(json_object_get(doc, "blocked_by"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(b, "kind")), "build", "%s", buf);
    cr_expect(strstr(json_string_value(json_object_get(b, "reason")), "-include"), "%s", buf);
    json_decref(doc);
    free(buf);
    xml = check_slurp_text(path_in("dirty.xml"));
    cr_assert(xml);
    xml_check(xml, &c);
    cr_expect_geq(c.failures, 1, "a blocked release with failures=0: %s", xml);
    cr_expect_eq(c.root_failures, c.failures, "%s", xml);
    cr_expect(strstr(xml, "classname=\"release\" name=\"clean build\""), "%s", xml);
    cr_expect(strstr(xml, "has flag -include"), "%s", xml);
    free(xml);
}

/* A chain head that the store no longer holds (a documented tail deletion): every output fails
 * and names the store problem. */
Test(report, an_expected_head_that_is_gone_fails_in_junit_and_json)
{
    add(path_in("ok.db"), &fx.key_a, 0, 0, NULL);
    add(path_in("ok.db"), &fx.key_b, 1, 0, NULL);
    ladderfix_drop_anchor(path_in("ladder.yaml"), "report test");
    char ladder[1024], db[1024];
    snprintf(ladder, sizeof ladder, "%s", path_in("ladder.yaml"));
    snprintf(db, sizeof db, "%s", path_in("ok.db"));
    struct release_options o = {
        .ladder = ladder,
        .db = db,
        .expect_head = "ab00000000000000000000000000000000000000000000000000000000000000"};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_expect_eq(release_check_report(f, &o, &fx.self, 1, path_in("head.xml")), 1);
    fclose(f);
    json_t *doc = json_loads(buf, 0, NULL);
    cr_assert(doc, "%s", buf);
    json_t *b = json_array_get(json_object_get(doc, "blocked_by"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(b, "kind")), "store", "%s", buf);
    json_decref(doc);
    free(buf);
    char *xml = check_slurp_text(path_in("head.xml"));
    struct xml_counts c;
    xml_check(xml, &c);
    cr_expect(strstr(xml, "classname=\"release\" name=\"store verifies\""), "%s", xml);
    cr_expect_geq(c.failures, 3, "%s", xml);
    free(xml);
}

/* ---- one release matrix, four outputs (issue 24 §4) ------------------------------------------ */

/* A ladder wider than ladderfix's: two models (moe, moe2: the same pinned file), hosts a and b,
 * an F16-KV cell (its own column), an excluded cell, a model without a cell in a column, and the
 * anchor case "conf". Cells, in ladder order: moe/a/ref.decode, moe2/a/ref.decode,
 * moe/a/ref.chat, moe/a/cpu.decode+kv=f16, moe2/b/ref.decode; moe2/a/ref.chat excluded. */
static const char *wide_ladder(void)
{
    const char *path = path_in("wide.yaml");
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f,
            "release: {name: rel, version: 1.0.0}\n"
            "models:\n"
            "  moe: {path: %s/conformance/qwen3moe-tiny-q4_k_m/model.gguf, sha256: %s,"
            " arch: qwen3moe}\n"
            "  moe2: {path: %s/conformance/qwen3moe-tiny-q4_k_m/model.gguf, sha256: %s,"
            " arch: qwen3moe}\n"
            "hosts:\n  a: {device: none, trust: ['file:a.pub']}\n"
            "  b: {device: none, trust: ['file:b.pub']}\n"
            "modes: [ref.decode, ref.chat, cpu.decode]\n"
            "cells:\n"
            "  - {models: [moe, moe2], hosts: [a], modes: [ref.decode, ref.chat],"
            " exclude: [{model: moe2, mode: ref.chat, reason: \"chat <later> & co\"}]}\n"
            "  - {model: moe, host: a, mode: cpu.decode, kv: f16}\n"
            "  - {model: moe2, host: b, mode: ref.decode}\n"
            "  - {model: moe2, host: a, mode: cpu.decode, isa: portable}\n"
            "gates:\n  defaults:\n    golden: {goldens: g.json, sha256: " LADDERFIX_GOLDENS_SHA
            "}\n"
            "anchors:\n  conf:\n    arch: qwen3moe\n    reference: test\n"
            "    model: {path: m.gguf, sha256: %064d}\n    tokens: {path: t.txt, sha256: %064d}\n"
            "    logits: {path: l.f32, sha256: %064d}\n"
            "    thresholds: {max_nmse: 1.0e-8, min_cosine: 0.999999, near_tie: 1.0e-3}\n",
            check_shared_dir(), LADDERFIX_MOE_SHA, check_shared_dir(), LADDERFIX_MOE_SHA, 1, 2, 3);
    cr_assert_eq(fclose(f), 0);
    return path;
}

/* The text of `want` must be in `got` as one piece; on a miss, both are shown. */
static void expect_block(const char *got, const char *want, const char *what)
{
    cr_expect(strstr(got, want), "%s is not laid as pinned.\n--- want:\n%s--- got:\n%s", what, want,
              got);
}

/* Every output lays the same matrix: the rows in one order (cells, excluded cells, anchor cases,
 * each in ladder order) with their identity, and the text and HTML grids with one column per
 * host x mode x identity settings in order of first appearance. The layouts are pinned byte for
 * byte (the reasons, which are the release check's, are left out). */
Test(report, one_matrix_in_the_text_json_junit_and_html)
{
    char ladder[1024], db[1024];
    snprintf(ladder, sizeof ladder, "%s", wide_ladder());
    snprintf(db, sizeof db, "%s", path_in("wide.db"));
    /* moe/a/ref.decode PASS (1), moe/a/ref.chat FAIL (2), moe/a/cpu.decode+kv=f16 PASS (3); the
     * moe2 cells and the anchor MISSING */
    ladderfix_add(&fx, ladder, db, &fx.key_a, 0, (struct ladderfix_fake){0});
    ladderfix_add(&fx, ladder, db, &fx.key_a, 1, (struct ladderfix_fake){.fail = 1});
    ladderfix_add(&fx, ladder, db, &fx.key_a, 3, (struct ladderfix_fake){0});
    struct ladder *l = NULL;
    struct release_result r;
    ladderfix_evaluate(&fx, ladder, db, &l, &r);
    struct gate_err err = {0};

    /* text */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_eq(report_release(f, l, "wide.yaml", "wide.db", &fx.self, &r, &err), 0);
    fclose(f);
    expect_block(buf,
                 "6 required cells, 1 excluded, 1 anchor case\n\n"
                 "model                a/ref.decode           a/ref.chat             "
                 "a/cpu.decode+kv=f16    b/ref.decode           a/cpu.decode+isa=portable\n"
                 "moe                  PASS                   FAIL                   "
                 "PASS                   -                      -                     \n"
                 "moe2                 MISSING                EXCLUDED               "
                 "-                      MISSING                MISSING               \n"
                 "anchor               MISSING                (judge on trial: conf, qwen3moe)\n"
                 "\nexcluded: moe2/a/ref.chat                      chat <later> & co\n"
                 "RELEASE BLOCKED: 4 of 6 required cells and 1 of 1 anchor case are not PASS\n"
                 "  anchor conf                              MISSING   ",
                 "the text matrix");
    static const char *const blocked[] = {
        "\n  moe/a/ref.chat                           FAIL      receipt 2 FAILED parity",
        "\n  moe2/a/ref.decode                        MISSING   no receipt",
        "\n  moe2/b/ref.decode                        MISSING   no receipt",
        "\n  moe2/a/cpu.decode+isa=portable           MISSING   no receipt",
    };
    const char *at = buf;
    for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++) {
        const char *p = strstr(at, blocked[i]);
        cr_expect(p, "blocking line %zu (%s) is not next: %s", i, blocked[i], buf);
        at = p ? p : at;
    }
    free(buf);

    /* JSON: the rows in order, each with its identity */
    buf = NULL;
    f = open_memstream(&buf, &len);
    cr_assert_eq(report_release_json(f, l, "wide.yaml", "wide.db", &fx.self, &r, NULL, &err), 0);
    fclose(f);
    json_t *doc = json_loads(buf, 0, NULL);
    cr_assert(doc, "%s", buf);
    static const struct {
        const char *kind, *name, *model, *host, *mode, *kv, *isa, *state;
    } want[] = {
        {"cell", "moe/a/ref.decode", "moe", "a", "ref.decode", "f32", NULL, "PASS"},
        {"cell", "moe/a/ref.chat", "moe", "a", "ref.chat", "f32", NULL, "FAIL"},
        {"cell", "moe2/a/ref.decode", "moe2", "a", "ref.decode", "f32", NULL, "MISSING"},
        {"cell", "moe/a/cpu.decode+kv=f16", "moe", "a", "cpu.decode", "f16", NULL, "PASS"},
        {"cell", "moe2/b/ref.decode", "moe2", "b", "ref.decode", "f32", NULL, "MISSING"},
        {"cell", "moe2/a/cpu.decode+isa=portable", "moe2", "a", "cpu.decode", "f32", "portable",
         "MISSING"},
        {"excluded", "moe2/a/ref.chat", "moe2", "a", "ref.chat", "f32", NULL, "EXCLUDED"},
        {"anchor", "conf", NULL, NULL, NULL, NULL, NULL, "MISSING"},
    };
    json_t *rows = json_object_get(doc, "rows");
    cr_assert_eq(json_array_size(rows), sizeof want / sizeof want[0], "%s", buf);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        json_t *w = json_array_get(rows, i);
        const char *keys[] = {"kind", "name", "model", "host", "mode", "kv", "isa", "state"};
        const char *vals[] = {want[i].kind, want[i].name, want[i].model, want[i].host,
                              want[i].mode, want[i].kv,   want[i].isa,   want[i].state};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            const char *got = json_string_value(json_object_get(w, keys[k]));
            if (vals[k])
                cr_expect(got && !strcmp(got, vals[k]), "row %zu %s: '%s', not '%s'", i, keys[k],
                          got ? got : "(absent)", vals[k]);
            else
                cr_expect_null(json_object_get(w, keys[k]), "row %zu has a %s", i, keys[k]);
        }
    }
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(rows, 6), "excluded_reason")),
                     "chat <later> & co");
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(rows, 7), "arch")),
                     "qwen3moe");
    json_decref(doc);
    free(buf);

    /* JUnit: one testcase per row, in the same order */
    cr_assert_eq(report_release_junit(path_in("wide.xml"), l, &r, NULL, &err), 0, "%s", err.msg);
    char *xml = check_slurp_text(path_in("wide.xml"));
    cr_assert(xml);
    struct xml_counts c;
    xml_check(xml, &c);
    cr_expect_eq(c.tests, 8, "%s", xml);
    cr_expect_eq(c.failures, 5, "%s", xml);
    cr_expect_eq(c.skipped, 1, "%s", xml);
    at = xml;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char tc[256];
        snprintf(tc, sizeof tc, "<testcase classname=\"%s\" name=\"%s\"",
                 want[i].kind[0] == 'c' ? "cell" : want[i].kind, want[i].name);
        const char *p = strstr(at, tc);
        cr_expect(p, "testcase %zu (%s) is not next: %s", i, tc, xml);
        at = p ? p : at;
    }
    cr_expect(strstr(xml, "<skipped message=\"excluded: chat &lt;later&gt; &amp; co\"/>"), "%s",
              xml);
    free(xml);

    /* HTML: the matrix table's rows up to their reasons, and the grid whole */
    int ok = -1;
    cr_assert_eq(
        report_html_check(ladder, db, NULL, path_in("wide.html"), &fx.self, NULL, &ok, &err), 0,
        "%s", err.msg);
    cr_expect_eq(ok, 0);
    char *html = check_slurp_text(path_in("wide.html"));
    cr_assert(html);
    static const char *const matrix_rows[] = {
        "<tr><th>model</th><th>host</th><th>mode</th><th>state</th><th>receipt</th>"
        "<th>reason</th></tr>\n<tr class=\"row-cell\"><td>moe</td><td>a</td><td>ref.decode</td>"
        "<td class=\"st st-PASS\"><a href=\"#cell-0\">PASS</a></td><td class=\"num\">1</td>"
        "<td class=\"reason\"></td></tr>\n",
        "<tr class=\"row-cell\"><td>moe</td><td>a</td><td>ref.chat</td><td class=\"st st-FAIL\">"
        "<a href=\"#cell-1\">FAIL</a></td><td class=\"num\">2</td><td class=\"reason\">receipt 2",
        "<tr class=\"row-cell\"><td>moe2</td><td>a</td><td>ref.decode</td><td class=\"st "
        "st-MISSING\"><a href=\"#cell-2\">MISSING</a></td><td class=\"num\">&mdash;</td>",
        "<tr class=\"row-cell\"><td>moe</td><td>a</td><td>cpu.decode+kv=f16</td><td class=\"st "
        "st-PASS\"><a href=\"#cell-3\">PASS</a></td><td class=\"num\">3</td><td class=\"reason\">"
        "</td></tr>\n",
        "<tr class=\"row-cell\"><td>moe2</td><td>b</td><td>ref.decode</td><td class=\"st "
        "st-MISSING\"><a href=\"#cell-4\">MISSING</a></td><td class=\"num\">&mdash;</td>",
        "<tr class=\"row-cell\"><td>moe2</td><td>a</td><td>cpu.decode+isa=portable</td><td "
        "class=\"st st-MISSING\"><a href=\"#cell-5\">MISSING</a></td><td class=\"num\">&mdash;"
        "</td>",
        "<tr class=\"row-excluded\"><td>moe2</td><td>a</td><td>ref.chat</td><td class=\"st "
        "st-EXCLUDED\"><a href=\"#excl-0\">EXCLUDED</a></td><td class=\"num\">&mdash;</td><td "
        "class=\"reason\">excluded: chat &lt;later&gt; &amp; co</td></tr>\n",
        "<tr class=\"row-anchor\"><td>anchor: conf</td><td colspan=\"2\">judge on trial: "
        "qwen3moe</td><td class=\"st st-MISSING\"><a href=\"#anchor-0\">MISSING</a></td><td "
        "class=\"num\">&mdash;</td><td class=\"reason\">no receipt",
    };
    at = strstr(html, "<h2>release matrix</h2>\n<table class=\"matrix\" id=\"matrix\">\n");
    cr_assert(at, "no matrix");
    for (size_t i = 0; i < sizeof matrix_rows / sizeof matrix_rows[0]; i++) {
        const char *p = strstr(at, matrix_rows[i]);
        cr_expect(p, "matrix row %zu is not next as pinned:\n%s\n--- in:\n%s", i, matrix_rows[i],
                  at);
        at = p ? p : at;
    }
    expect_block(html,
                 "</table>\n<table class=\"grid\" id=\"grid\">\n"
                 "<tr><th>model \\ host/mode</th><th>a<br>ref.decode</th><th>a<br>ref.chat</th>"
                 "<th>a<br>cpu.decode+kv=f16</th><th>b<br>ref.decode</th>"
                 "<th>a<br>cpu.decode+isa=portable</th></tr>\n"
                 "<tr><th>moe</th><td class=\"st st-PASS\"><a href=\"#cell-0\">PASS</a></td>"
                 "<td class=\"st st-FAIL\"><a href=\"#cell-1\">FAIL</a></td>"
                 "<td class=\"st st-PASS\"><a href=\"#cell-3\">PASS</a></td>"
                 "<td class=\"st st-NONE\">&mdash;</td><td class=\"st st-NONE\">&mdash;</td></tr>\n"
                 "<tr><th>moe2</th><td class=\"st st-MISSING\"><a href=\"#cell-2\">MISSING</a></td>"
                 "<td class=\"st st-EXCLUDED\"><a href=\"#excl-0\">EXCLUDED</a></td>"
                 "<td class=\"st st-NONE\">&mdash;</td>"
                 "<td class=\"st st-MISSING\"><a href=\"#cell-4\">MISSING</a></td>"
                 "<td class=\"st st-MISSING\"><a href=\"#cell-5\">MISSING</a></td></tr>\n"
                 "</table>\n<h2>build and ladder</h2>\n",
                 "the HTML grid");
    /* each row's section carries the key's identity too (an F16 cell says f16) */
    const char *s3 = strstr(html, "id=\"cell-3\"");
    cr_assert(s3);
    cr_expect(strstr(s3, "<tr><th>KV cache</th><td>f16"), "the F16 cell's receipt shows its KV");
    free(html);
    release_result_free(&r);
    ladder_free(l);
}

/* A JSON row carries every identity setting that is set: kv always, isa and prefill when set (a
 * prefill cell's row once said only model/host/mode/kv, the same as its F32 sibling's). */
Test(report, json_rows_carry_every_identity_setting)
{
    const char *path = path_in("pf.yaml");
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f,
            "release: {name: rel, version: 1.0.0}\n"
            "models:\n  moe: {path: %s/conformance/qwen3moe-tiny-q4_k_m/model.gguf, sha256: %s,"
            " arch: qwen3moe}\n"
            "hosts:\n  a: {device: none, trust: ['file:a.pub']}\n"
            "modes: [cuda.prefill]\n"
            "cells:\n  - {model: moe, host: a, mode: cuda.prefill}\n"
            "  - {model: moe, host: a, mode: cuda.prefill, prefill: bf16}\n"
            "gates:\n  defaults:\n    golden: {goldens: g.json, sha256: " LADDERFIX_GOLDENS_SHA
            "}\n"
            "unanchored: {qwen3moe: 'report test'}\n",
            check_shared_dir(), LADDERFIX_MOE_SHA);
    cr_assert_eq(fclose(f), 0);
    struct gate_err err = {0};
    struct store *st = NULL;
    cr_assert_eq(store_open(&st, path_in("pf.db"), &err), 0, "%s", err.msg); /* an empty store */
    store_close(st);
    struct ladder *l = NULL;
    struct release_result r;
    ladderfix_evaluate(&fx, path, path_in("pf.db"), &l, &r);
    char *buf = NULL;
    size_t len = 0;
    f = open_memstream(&buf, &len);
    cr_assert_eq(report_release_json(f, l, "pf.yaml", "pf.db", &fx.self, &r, NULL, &err), 0);
    fclose(f);
    json_t *doc = json_loads(buf, 0, NULL);
    cr_assert(doc, "%s", buf);
    json_t *rows = json_object_get(doc, "rows");
    cr_assert_eq(json_array_size(rows), 2, "%s", buf);
    cr_expect_null(json_object_get(json_array_get(rows, 0), "prefill"), "the F32 default: %s", buf);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(rows, 1), "prefill")), "bf16",
                     "%s", buf);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(rows, 1), "name")),
                     "moe/a/cuda.prefill+prefill=bf16");
    json_decref(doc);
    free(buf);
    release_result_free(&r);
    ladder_free(l);
}
