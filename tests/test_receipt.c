/* test_receipt.c — canonical payload bytes, DSSE-PAE signatures (round trip, flipped byte,
 * wrong domain), chain hash and verdict re-derivation (receipts/receipt.h). Host keys are tested
 * in test_key.c, the `gate key` / `gate receipt` commands in test_cmd_receipt.c.
 */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <math.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "receipts/key.h"
#include "receipts/receipt.h"
#include "receipts/store.h"
#include "tests/support/check.h"
#include "tests/support/receiptfix.h"

/* ---- canonical payload ---------------------------------------------------------------------- */

Test(receipt, canonical_is_sorted_compact_and_stable)
{
    struct gate_err err = {0};
    json_t *a = json_pack("{s:i, s:{s:f, s:s}, s:[i, b, n], s:s}", "zeta", 1, "alpha", "y", 0.1,
                          "x", "caf\xc3\xa9", "mid", 3, 1, "b", "q\"\\/");
    json_t *b = json_pack("{s:s, s:[i, b, n], s:{s:s, s:f}, s:i}", "b", "q\"\\/", "mid", 3, 1,
                          "alpha", "x", "caf\xc3\xa9", "y", 0.1, "zeta", 1);
    char *sa, *sb;
    size_t la, lb;
    cr_assert_eq(receipt_canonical(a, &sa, &la, &err), 0, "%s", err.msg);
    cr_assert_eq(receipt_canonical(b, &sb, &lb, &err), 0, "%s", err.msg);
    cr_assert_str_eq(sa, "{\"alpha\":{\"x\":\"caf\xc3\xa9\",\"y\":0.10000000000000001},"
                         "\"b\":\"q\\\"\\\\/\",\"mid\":[3,true,null],\"zeta\":1}");
    cr_assert_str_eq(sa, sb);
    cr_assert_eq(la, strlen(sa));
    json_t *back = NULL;
    cr_assert_eq(receipt_parse(sa, la, &back, &err), 0, "%s", err.msg);
    cr_assert(json_equal(back, a));
    json_decref(back);
    free(sa);
    free(sb);
    json_decref(a);
    json_decref(b);
}

Test(receipt, reals_round_trip_and_integral_reals_stay_reals)
{
    struct gate_err err = {0};
    json_t *a = json_pack("{s:f, s:f, s:f, s:f}", "a", 1.0, "b", 0.999, "c", 1e-300, "d", -0.0);
    char *s;
    size_t n;
    cr_assert_eq(receipt_canonical(a, &s, &n, &err), 0, "%s", err.msg);
    cr_assert_str_eq(s, "{\"a\":1.0,\"b\":0.999,\"c\":1e-300,\"d\":-0.0}");
    json_t *back = NULL;
    cr_assert_eq(receipt_parse(s, n, &back, &err), 0, "%s", err.msg);
    cr_assert(json_real_value(json_object_get(back, "b")) == 0.999);
    json_decref(back);
    free(s);
    json_decref(a);
}

Test(receipt, refuses_non_canonical_and_duplicate_keys)
{
    struct gate_err err = {0};
    json_t *v = NULL;
    const char *spaced = "{\"a\": 1}";
    cr_assert_eq(receipt_parse(spaced, strlen(spaced), &v, &err), ERR_INPUT);
    err_clear(&err);
    const char *unsorted = "{\"b\":1,\"a\":2}";
    cr_assert_eq(receipt_parse(unsorted, strlen(unsorted), &v, &err), ERR_INPUT);
    err_clear(&err);
    const char *dup = "{\"a\":1,\"a\":2}";
    cr_assert_eq(receipt_parse(dup, strlen(dup), &v, &err), ERR_INPUT);
    err_clear(&err);
    const char *exp = "{\"a\":1e5}";
    cr_assert_eq(receipt_parse(exp, strlen(exp), &v, &err), ERR_INPUT);
    cr_assert_null(v);
    json_t *arr = json_array();
    char *s;
    size_t n;
    cr_assert_eq(receipt_canonical(arr, &s, &n, &err), ERR_INPUT);
    json_decref(arr);
}

Test(receipt, non_finite_reals_cannot_enter_a_payload)
{
    /* jansson refuses to build them; callers record the strings "NaN"/"Inf" instead */
    cr_assert_null(json_real(NAN));
    cr_assert_null(json_real(INFINITY));
    json_t *p = json_pack("{s:{s:s}}", "parity", "max_kld", "NaN");
    char *s;
    size_t n;
    struct gate_err err = {0};
    cr_assert_eq(receipt_canonical(p, &s, &n, &err), 0, "%s", err.msg);
    cr_assert_str_eq(s, "{\"parity\":{\"max_kld\":\"NaN\"}}");
    free(s);
    json_decref(p);
}

/* ---- signatures and hashes ------------------------------------------------------------------ */

static const char PAYLOAD[] = "{\"cell\":{\"host\":\"h\",\"mode\":\"ref.decode\",\"model\":\"m\"},"
                              "\"verdict\":\"PASS\"}";

Test(receipt, sign_verify_round_trip)
{
    struct key_pair k = receiptfix_key("s.key", "h");
    unsigned char sig[64];
    cr_assert_eq(receipt_sign(PAYLOAD, strlen(PAYLOAD), &k, sig), 0);
    cr_assert_eq(receipt_verify(PAYLOAD, strlen(PAYLOAD), k.pk, sig), 0);
    struct key_pair other = receiptfix_key("o.key", "h");
    cr_assert_neq(receipt_verify(PAYLOAD, strlen(PAYLOAD), other.pk, sig), 0);
}

Test(receipt, a_flipped_payload_byte_fails)
{
    struct key_pair k = receiptfix_key("f.key", "h");
    unsigned char sig[64];
    char copy[sizeof PAYLOAD];
    cr_assert_eq(receipt_sign(PAYLOAD, strlen(PAYLOAD), &k, sig), 0);
    for (size_t i = 0; i < strlen(PAYLOAD); i++) {
        memcpy(copy, PAYLOAD, sizeof PAYLOAD);
        copy[i] ^= 0x01;
        cr_assert_neq(receipt_verify(copy, strlen(PAYLOAD), k.pk, sig), 0, "byte %zu", i);
    }
    unsigned char bad[64];
    memcpy(bad, sig, 64);
    bad[5] ^= 0x80;
    cr_assert_neq(receipt_verify(PAYLOAD, strlen(PAYLOAD), k.pk, bad), 0);
}

Test(receipt, the_domain_prefix_separates_receipts_from_everything_else)
{
    struct key_pair k = receiptfix_key("d.key", "h");
    unsigned char sig[64];
    /* a bare signature over the payload (no domain) must not verify as a receipt */
    crypto_sign_detached(sig, NULL, (const unsigned char *)PAYLOAD, strlen(PAYLOAD), k.sk);
    cr_assert_neq(receipt_verify(PAYLOAD, strlen(PAYLOAD), k.pk, sig), 0);
    /* nor a sign-off signature, nor one under another payloadType */
    cr_assert_eq(receipt_sign_type(SIGNOFF_PAYLOAD_TYPE, PAYLOAD, strlen(PAYLOAD), &k, sig), 0);
    cr_assert_neq(receipt_verify(PAYLOAD, strlen(PAYLOAD), k.pk, sig), 0);
    cr_assert_eq(receipt_verify_type(SIGNOFF_PAYLOAD_TYPE, PAYLOAD, strlen(PAYLOAD), k.pk, sig), 0);
    cr_assert_eq(receipt_sign_type("application/vnd.gate.receipt.v2+json", PAYLOAD, strlen(PAYLOAD),
                                   &k, sig),
                 0);
    cr_assert_neq(receipt_verify(PAYLOAD, strlen(PAYLOAD), k.pk, sig), 0);
}

Test(receipt, pae_matches_the_dsse_spec)
{
    unsigned char *m;
    size_t n;
    cr_assert_eq(receipt_pae("http://example.com/HelloWorld", "hello world", 11, &m, &n), 0);
    const char *want = "DSSEv1 29 http://example.com/HelloWorld 11 hello world";
    cr_assert_eq(n, strlen(want));
    cr_assert_eq(memcmp(m, want, n), 0);
    free(m);
}

Test(receipt, hash_covers_payload_and_signature)
{
    unsigned char sig[64] = {0};
    char h1[65], h2[65], h3[65];
    receipt_hash(PAYLOAD, strlen(PAYLOAD), sig, h1);
    sig[63] = 1;
    receipt_hash(PAYLOAD, strlen(PAYLOAD), sig, h2);
    receipt_hash(PAYLOAD, strlen(PAYLOAD) - 1, sig, h3);
    cr_assert_eq(strlen(h1), 64);
    cr_assert_str_neq(h1, h2);
    cr_assert_str_neq(h2, h3);
}

/* ---- verdict re-derivation ------------------------------------------------------------------ */

static json_t *gated(const char *overall, const char *gate_verdict, double value, int pass)
{
    return json_pack("{s:s, s:{s:{s:s, s:[{s:s, s:f, s:s, s:f, s:b}]}}}", "verdict", overall,
                     "gates", "parity", "verdict", gate_verdict, "checks", "metric", "min_cosine",
                     "value", value, "op", ">=", "threshold", 0.999, "pass", pass);
}

Test(receipt, rederive_accepts_consistent_verdicts)
{
    struct gate_err err = {0};
    json_t *p = gated("PASS", "PASS", 0.9995, 1);
    cr_assert_eq(receipt_rederive(p, &err), 0, "%s", err.msg);
    json_decref(p);
    p = gated("FAIL", "FAIL", 0.5, 0);
    cr_assert_eq(receipt_rederive(p, &err), 0, "%s", err.msg);
    json_decref(p);
}

Test(receipt, rederive_flags_a_pass_the_numbers_do_not_support)
{
    struct gate_err err = {0};
    json_t *p = gated("PASS", "PASS", 0.5, 1);
    cr_assert_eq(receipt_rederive(p, &err), ERR_RUNTIME);
    cr_assert(strstr(err.msg, "min_cosine"), "%s", err.msg);
    json_decref(p);
    err_clear(&err);
    p = gated("PASS", "FAIL", 0.5, 0);
    cr_assert_eq(receipt_rederive(p, &err), ERR_RUNTIME);
    json_decref(p);
    err_clear(&err);
    /* NaN recorded as a string fails every comparison */
    p = json_pack("{s:s, s:{s:{s:s, s:[{s:s, s:s, s:s, s:f, s:b}]}}}", "verdict", "PASS", "gates",
                  "parity", "verdict", "PASS", "checks", "metric", "max_kld", "value", "NaN", "op",
                  "<=", "threshold", 0.01, "pass", 1);
    cr_assert_eq(receipt_rederive(p, &err), ERR_RUNTIME);
    json_decref(p);
    err_clear(&err);
    p = json_pack("{s:s, s:{}}", "verdict", "PASS", "gates");
    cr_assert_eq(receipt_rederive(p, &err), ERR_RUNTIME);
    cr_assert(strstr(err.msg, "no gates"), "%s", err.msg);
    json_decref(p);
}

/* One gate "parity" with one check of value op threshold recording pass, and the overall and
 * gate verdicts: the payload a receipt's numbers are re-derived from. */
static json_t *one_check(const char *overall, const char *gate_verdict, json_t *value,
                         const char *op, json_t *threshold, int pass)
{
    return json_pack("{s:s, s:{s:{s:s, s:[{s:s, s:o, s:s, s:o, s:b}]}}}", "verdict", overall,
                     "gates", "parity", "verdict", gate_verdict, "checks", "metric", "m", "value",
                     value, "op", op, "threshold", threshold, "pass", pass);
}

Test(receipt, rederive_fails_an_infinite_value_against_every_threshold)
{
    struct gate_err err = {0};
    /* Inf >= 0.999 would hold as a C comparison; DESIGN.md settled question 8 says it fails */
    json_t *p = one_check("PASS", "PASS", json_string("Inf"), ">=", json_real(0.999), 1);
    cr_expect_eq(receipt_rederive(p, &err), ERR_RUNTIME, "an infinite value passed: %s", err.msg);
    json_decref(p);
    err_clear(&err);
    p = one_check("PASS", "PASS", json_real(0.5), "<=", json_string("Inf"), 1);
    cr_expect_eq(receipt_rederive(p, &err), ERR_RUNTIME, "an infinite bound passed: %s", err.msg);
    json_decref(p);
    err_clear(&err);
    p = one_check("FAIL", "FAIL", json_string("-Inf"), "<", json_real(0), 0);
    cr_expect_eq(receipt_rederive(p, &err), 0, "%s", err.msg);
    json_decref(p);
}

Test(receipt, rederive_compares_a_non_numeric_equality_by_value)
{
    struct gate_err err = {0};
    json_t *p = one_check("PASS", "PASS", json_string("cuda"), "==", json_string("cpu"), 1);
    cr_expect_eq(receipt_rederive(p, &err), ERR_RUNTIME, "\"cuda\" == \"cpu\" held: %s", err.msg);
    json_decref(p);
    err_clear(&err);
    p = one_check("PASS", "PASS", json_string("cpu"), "==", json_string("cpu"), 1);
    cr_expect_eq(receipt_rederive(p, &err), 0, "%s", err.msg);
    json_decref(p);
}

Test(receipt, rederive_flags_a_passing_gate_with_no_checks)
{
    struct gate_err err = {0};
    json_t *p = json_pack("{s:s, s:{s:{s:s, s:[]}}}", "verdict", "PASS", "gates", "parity",
                          "verdict", "PASS", "checks");
    cr_expect_eq(receipt_rederive(p, &err), ERR_RUNTIME, "a gate that checked nothing passed");
    cr_expect(strstr(err.msg, "gate 'parity' records PASS"), "%s", err.msg);
    json_decref(p);
}

Test(receipt, rederive_flags_a_passing_gate_that_recorded_an_error)
{
    struct gate_err err = {0};
    json_t *p = one_check("PASS", "PASS", json_real(0.9995), ">=", json_real(0.999), 1);
    json_object_set_new(json_object_get(json_object_get(p, "gates"), "parity"), "error",
                        json_string("the judge could not run"));
    cr_expect_eq(receipt_rederive(p, &err), ERR_RUNTIME, "a gate with an error passed");
    cr_expect(strstr(err.msg, "gate 'parity' records PASS"), "%s", err.msg);
    json_decref(p);
}

Test(receipt, rederive_flags_a_gate_verdict_its_checks_do_not_support_under_a_failing_receipt)
{
    /* the overall FAIL agrees with the numbers, but the gate's own PASS does not: a reader of
     * the gate rows (the report, the release check) would see a passing gate */
    struct gate_err err = {0};
    json_t *p = one_check("FAIL", "PASS", json_real(0.5), ">=", json_real(0.999), 0);
    cr_expect_eq(receipt_rederive(p, &err), ERR_RUNTIME, "a gate's PASS went unchecked");
    cr_expect(strstr(err.msg, "gate 'parity' records PASS but its checks say FAIL"), "%s", err.msg);
    json_decref(p);
}

Test(receipt, rederive_refuses_verdicts_other_than_pass_or_fail)
{
    struct gate_err err = {0};
    json_t *p = one_check("FAIL", "SKIPPED", json_real(0.5), ">=", json_real(0.999), 0);
    cr_expect_eq(receipt_rederive(p, &err), ERR_INPUT, "a gate verdict SKIPPED was accepted");
    cr_expect(strstr(err.msg, "gate 'parity' has no \"verdict\" of PASS or FAIL"), "%s", err.msg);
    json_decref(p);
    err_clear(&err);
    p = one_check("WAIVED", "FAIL", json_real(0.5), ">=", json_real(0.999), 0);
    cr_expect_eq(receipt_rederive(p, &err), ERR_INPUT, "an overall verdict WAIVED was accepted");
    cr_expect(strstr(err.msg, "payload \"verdict\" is not"), "%s", err.msg);
    json_decref(p);
}
