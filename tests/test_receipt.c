/* test_receipt.c — host keys (file mode, no overwrite, refusing readable keys, public key
 * parsing), canonical payload bytes, DSSE-PAE signatures (round trip, flipped byte, wrong
 * domain), chain hash, verdict re-derivation, and the `gate key` / `gate receipt` CLI (control
 * characters from receipts escaped, import exit codes, verify with head records).
 */
#include <criterion/criterion.h>

#include "harness/gatedef.h"
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

static void tmp_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", check_tmp_dir(), name);
}

static struct key_pair make_key(const char *name, const char *host)
{
    char path[512];
    struct key_pair k;
    struct gate_err err = {0};
    tmp_path(path, sizeof path, name);
    cr_assert_eq(key_generate(path, host, &k, &err), 0, "%s", err.msg);
    return k;
}

/* ---- keys ----------------------------------------------------------------------------------- */

Test(key, generate_writes_mode_0600_and_loads_back)
{
    char path[512];
    struct key_pair k, l;
    struct gate_err err = {0};
    struct stat st;
    tmp_path(path, sizeof path, "deep/er/h200.key");
    cr_assert_eq(key_generate(path, "h200", &k, &err), 0, "%s", err.msg);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
    cr_assert_eq(strncmp(k.id, "ed25519:", 8), 0);
    cr_assert_eq(strlen(k.id), KEY_ID_LEN);
    cr_assert_eq(key_load(path, &l, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(k.pk, l.pk, 32), 0);
    cr_assert_eq(memcmp(k.sk, l.sk, 64), 0);
    cr_assert_str_eq(l.host, "h200");
    cr_assert_str_eq(l.id, k.id);
}

Test(key, refuses_to_overwrite)
{
    char path[512];
    struct key_pair k;
    struct gate_err err = {0};
    tmp_path(path, sizeof path, "once.key");
    cr_assert_eq(key_generate(path, "h", &k, &err), 0, "%s", err.msg);
    size_t n1 = 0, n2 = 0;
    uint8_t *before = check_slurp(path, &n1);
    cr_assert_eq(key_generate(path, "h", &k, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "already exists"), "%s", err.msg);
    uint8_t *after = check_slurp(path, &n2);
    cr_assert(n1 == n2 && !memcmp(before, after, n1), "the existing key was changed");
    free(before);
    free(after);
}

Test(key, refuses_a_key_readable_by_others)
{
    char path[512];
    struct key_pair k;
    struct gate_err err = {0};
    tmp_path(path, sizeof path, "open.key");
    cr_assert_eq(key_generate(path, "h", &k, &err), 0, "%s", err.msg);
    cr_assert_eq(chmod(path, 0644), 0);
    cr_assert_eq(key_load(path, &k, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "0644") && strstr(err.msg, "chmod 600"), "%s", err.msg);
}

Test(key, refuses_a_bad_host_and_a_corrupt_file)
{
    char path[512];
    struct key_pair k;
    struct gate_err err = {0};
    tmp_path(path, sizeof path, "bad.key");
    cr_assert_eq(key_generate(path, "no spaces", &k, &err), ERR_INPUT);
    cr_assert_eq(access(path, F_OK), -1, "a refused key left a file");
    err_clear(&err);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert(fd >= 0);
    const char *text = "host: h\npublic: ed25519:"
                       "0000000000000000000000000000000000000000000000000000000000000000\n"
                       "seed: 0101010101010101010101010101010101010101010101010101010101010101\n";
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    cr_assert_eq(key_load(path, &k, &err), ERR_INPUT);
    cr_assert(strstr(err.msg, "does not match"), "%s", err.msg);
}

Test(key, parses_public_ids)
{
    struct key_pair k = make_key("pub.key", "h");
    unsigned char pk[32];
    char upper[100];
    struct gate_err err = {0};
    cr_assert_eq(key_parse_public(k.id, pk, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(pk, k.pk, 32), 0);
    snprintf(upper, sizeof upper, "  %s\n", k.id);
    for (char *p = upper + 10; *p; p++)
        if (*p >= 'a' && *p <= 'f')
            *p = (char)(*p - 'a' + 'A');
    cr_assert_eq(key_parse_public(upper, pk, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(pk, k.pk, 32), 0);
    cr_assert_eq(key_parse_public("ed25519:abcd", pk, &err), ERR_INPUT);
    cr_assert_eq(key_parse_public("rsa:00", pk, NULL), ERR_INPUT);
    char id[80];
    key_id_of(k.pk, id);
    cr_assert_str_eq(id, k.id);
}

Test(key, writes_the_public_file)
{
    struct key_pair k = make_key("w.key", "h");
    char path[512];
    struct gate_err err = {0};
    tmp_path(path, sizeof path, "w.pub");
    cr_assert_eq(key_write_public(path, &k, &err), 0, "%s", err.msg);
    size_t n = 0;
    char *text = (char *)check_slurp(path, &n);
    cr_assert_not_null(text);
    cr_assert_eq(n, KEY_ID_LEN + 1);
    cr_assert_eq(memcmp(text, k.id, KEY_ID_LEN), 0);
    free(text);
}

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
    struct key_pair k = make_key("s.key", "h");
    unsigned char sig[64];
    cr_assert_eq(receipt_sign(PAYLOAD, strlen(PAYLOAD), &k, sig), 0);
    cr_assert_eq(receipt_verify(PAYLOAD, strlen(PAYLOAD), k.pk, sig), 0);
    struct key_pair other = make_key("o.key", "h");
    cr_assert_neq(receipt_verify(PAYLOAD, strlen(PAYLOAD), other.pk, sig), 0);
}

Test(receipt, a_flipped_payload_byte_fails)
{
    struct key_pair k = make_key("f.key", "h");
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
    struct key_pair k = make_key("d.key", "h");
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

/* A payload whose one gate (parity) is judged by the gate table over numbers that pass or fail
 * (one position at cosine 0.5); claim forges the recorded verdicts (NULL: the judged ones). */
static json_t *judged(int numbers_pass, const char *claim)
{
    json_t *cos = json_array(), *kld = json_array(), *gap = json_array(), *rt = json_array(),
           *tt = json_array();
    for (int i = 0; i < 64; i++) {
        json_array_append_new(cos, json_real(!numbers_pass && i == 5 ? 0.5 : 0.9995));
        json_array_append_new(kld, json_real(0.0));
        json_array_append_new(gap, json_real(1.0));
        json_array_append_new(rt, json_integer(1));
        json_array_append_new(tt, json_integer(1));
    }
    json_t *m = json_pack("{s:{s:o, s:o, s:o, s:o, s:o}, s:{s:s, s:s, s:i, s:i, s:i}}",
                          "per_position", "cosine", cos, "kld", kld, "ref_gap", gap, "ref_top", rt,
                          "test_top", tt, "ran", "backend", "ref", "device", "cpu: t", "forwards",
                          64, "tokens", 64, "kernel_launches", 0);
    json_t *settings = json_pack("{s:i, s:f, s:f, s:f, s:f}", "positions", 64, "min_cosine", 0.999,
                                 "max_mean_kld", 1e-3, "max_kld", 1e-2, "near_tie", 0.05);
    json_t *g = gatedef_row("parity", "ref.decode", settings, m, NULL);
    if (claim)
        json_object_set_new(g, "verdict", json_string(claim));
    const char *v = claim ? claim : json_string_value(json_object_get(g, "verdict"));
    return json_pack("{s:s, s:{s:o}}", "verdict", v, "gates", "parity", g);
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

/* ---- CLI (GATE_BIN) ------------------------------------------------------------------------- */

/* Run $GATE_BIN with args (NULL-terminated), stdout+stderr into *out (static). Returns the exit
 * code. Fails the test when GATE_BIN is unset (ctest sets it) or the binary does not know the
 * command: an un-wired `gate receipt` is a failure, never a skip. */
static int gate(char **out, const char *const *args)
{
    static char buf[65536];
    const char *bin = getenv("GATE_BIN");
    if (!bin || !*bin)
        cr_assert_fail("GATE_BIN is not set (run through ctest, which sets it)");
    char log[512];
    tmp_path(log, sizeof log, "cli.log");
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        const char *argv[32] = {bin};
        int n = 1;
        for (; args[n - 1] && n < 31; n++)
            argv[n] = args[n - 1];
        argv[n] = NULL;
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    size_t n = 0;
    uint8_t *text = check_slurp(log, &n);
    n = n < sizeof buf - 1 ? n : sizeof buf - 1;
    memcpy(buf, text ? (char *)text : "", text ? n : 0);
    buf[text ? n : 0] = '\0';
    free(text);
    *out = buf;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2 && strstr(buf, "unknown command"))
        cr_assert_fail("%s does not know '%s' (not wired into cli/main.c):\n%s", bin, args[0], buf);
    cr_assert(WIFEXITED(status), "gate did not exit normally");
    return WEXITSTATUS(status);
}

#define GATE(out, ...) gate(out, (const char *const[]){__VA_ARGS__, NULL})

/* A store with three receipts (PASS, FAIL, PASS) for the CLI to read; returns its path. */
static const char *cli_db(const char *name, struct key_pair *k)
{
    static char path[512];
    struct store *s = NULL;
    struct gate_err err = {0};
    tmp_path(path, sizeof path, name);
    cr_assert_eq(store_open(&s, path, &err), 0, "%s", err.msg);
    for (int i = 0; i < 3; i++) {
        json_t *p = judged(i != 1, NULL);
        json_object_set_new(p, "cell",
                            json_pack("{s:s, s:s, s:s}", "model", i ? "tiny-moe" : "tiny-dense",
                                      "host", "local", "mode", "ref.decode"));
        json_object_set_new(p, "subject",
                            json_pack("{s:{s:s}}", "model", "sha256", "6c1e0000000000000000"));
        cr_assert_eq(store_append(s, p, k, NULL, &err), 0, "%s", err.msg);
        json_decref(p);
    }
    store_close(s);
    return path;
}

Test(cli, key_gen_prints_the_public_key_and_refuses_to_overwrite)
{
    char path[512], pub[512];
    char *out;
    tmp_path(path, sizeof path, "cli/h200.key");
    tmp_path(pub, sizeof pub, "cli/h200.pub");
    cr_assert_eq(GATE(&out, "key", "gen", "--host", "h200", "-o", path, "--pub", pub), 0, "%s",
                 out);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    size_t n = 0;
    char *text = (char *)check_slurp(pub, &n);
    cr_assert(text && n == KEY_ID_LEN + 1 && !strncmp(text, "ed25519:", 8));
    text[KEY_ID_LEN] = '\0';
    cr_assert(strstr(out, text), "the public key is not printed: %s", out);
    free(text);
    cr_assert_eq(GATE(&out, "key", "gen", "--host", "h200", "-o", path), 2);
    cr_assert(strstr(out, "already exists"), "%s", out);
    cr_assert_eq(chmod(path, 0644), 0);
    cr_assert_eq(GATE(&out, "key", "pub", path), 2);
    cr_assert(strstr(out, "chmod 600"), "%s", out);
    cr_assert_eq(GATE(&out, "key", "gen", "-o", path), 2);
}

Test(cli, receipt_list_show_verify)
{
    struct key_pair k = make_key("cli1.key", "local");
    const char *db = cli_db("cli1.db", &k);
    char *out;
    cr_assert_eq(GATE(&out, "receipt", "list", "--db", db), 0, "%s", out);
    cr_assert(strstr(out, "tiny-dense/local/ref.decode") && strstr(out, "tiny-moe"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "list", "--db", db, "--verdict", "FAIL"), 0, "%s", out);
    cr_assert(strstr(out, "FAIL") && !strstr(out, "PASS"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "list", "--db", db, "--cell", "tiny-dense/*"), 0);
    cr_assert(strstr(out, "tiny-dense") && !strstr(out, "tiny-moe"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "show", "2", "--db", db), 0, "%s", out);
    cr_assert(strstr(out, "model tiny-moe, host local, mode ref.decode"), "%s", out);
    cr_assert(strstr(out, "min_cosine") && strstr(out, ">= 0.999"), "%s", out);
    cr_assert(strstr(out, "signature    ok") && strstr(out, k.id), "%s", out);
    cr_assert(strstr(out, "6c1e0000000000000000"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "show", "9", "--db", db), 2, "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "verify", "--db", db, "--all"), 0, "%s", out);
    cr_assert(strstr(out, "3 ok, 0 failed"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "verify", "--db", "/nonexistent/x.db"), 2, "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "frobnicate"), 2, "%s", out);
}

/* issue 16: a summary first, numbers at a sensible precision, per-position arrays collapsed to
 * a distribution with the offending positions unless --full, --json the whole signed payload */
Test(cli, receipt_show_summarizes_first_and_collapses_per_position_arrays)
{
    struct key_pair k = make_key("cli5.key", "local");
    const char *db = cli_db("cli5.db", &k);
    char *out;
    cr_assert_eq(GATE(&out, "receipt", "show", "2", "--db", db), 0, "%s", out);
    cr_expect(!strncmp(out, "receipt 2: tiny-moe/local/ref.decode  FAIL\n", 43), "%s", out);
    const char *details = strstr(out, "\ndetails\n");
    const char *fail = strstr(out, "  FAIL parity: ");
    cr_expect(details && fail && fail < details, "the failing gate's reason comes first:\n%s", out);
    const char *row = strstr(out, "\n  parity      FAIL   ");
    cr_expect(row && row < details, "a summary row per gate:\n%s", out);
    cr_expect(strstr(out, "per_position.cosine") &&
                  strstr(out, "n=64 min=0.5 p1=0.9995 median=0.9995 p99=0.9995 max=0.9995"
                              " (min at 5,"),
              "per-position arrays as a distribution with where the extreme is:\n%s", out);
    cr_expect(!strstr(out, "0.050000000000000003") && strstr(out, "0.05"), "%s", out);
    cr_expect(!strstr(out, "0.99950000000000006"), "%s", out);
    cr_expect(!strstr(out, "[0.9995,"), "no whole arrays without --full:\n%s", out);
    cr_assert_eq(GATE(&out, "receipt", "show", "2", "--db", db, "--full"), 0, "%s", out);
    cr_expect(strstr(out, "[0.9995,0.9995,"), "--full prints every value:\n%s", out);
    cr_assert_eq(GATE(&out, "receipt", "show", "2", "--db", db, "--json"), 0, "%s", out);
    json_error_t je;
    json_t *p = json_loads(out, 0, &je);
    cr_assert(p, "--json prints JSON: %s\n%s", je.text, out);
    cr_expect_str_eq(json_string_value(json_object_get(p, "verdict")), "FAIL");
    cr_expect_eq(
        json_array_size(json_object_get(
            json_object_get(
                json_object_get(json_object_get(json_object_get(p, "gates"), "parity"), "metrics"),
                "per_position"),
            "cosine")),
        64);
    json_decref(p);
}

Test(cli, receipt_verify_names_a_tampered_receipt)
{
    struct key_pair k = make_key("cli2.key", "local");
    const char *db = cli_db("cli2.db", &k);
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h,
                              "DROP TRIGGER receipts_no_update; UPDATE receipts SET payload = "
                              "replace(payload, '\"FAIL\"', '\"PASS\"') WHERE id = 2",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(h);
    char *out;
    cr_assert_eq(GATE(&out, "receipt", "verify", "--db", db), 1, "%s", out);
    cr_assert(strstr(out, "receipt 2 (tiny-moe/local/ref.decode): FAILED: signature"), "%s", out);
    cr_assert(!strstr(out, "receipt 1 "), "%s", out);
    /* the chain follows recomputed hashes, so the next receipt's link breaks too */
    cr_assert(strstr(out, "receipt 3 (tiny-moe/local/ref.decode): FAILED: chain"), "%s", out);
}

Test(cli, receipt_verify_flags_a_verdict_its_numbers_do_not_support)
{
    struct key_pair k = make_key("cli5.key", "local");
    char path[512];
    struct store *s = NULL;
    struct gate_err err = {0};
    tmp_path(path, sizeof path, "cli5.db");
    cr_assert_eq(store_open(&s, path, &err), 0, "%s", err.msg);
    json_t *p = judged(0, "PASS"); /* signed, but a cosine of 0.5 is below 0.999 */
    json_object_set_new(
        p, "cell", json_pack("{s:s, s:s, s:s}", "model", "m", "host", "local", "mode", "ref.chat"));
    cr_assert_eq(store_append(s, p, &k, NULL, &err), 0, "%s", err.msg);
    json_decref(p);
    store_close(s);
    char *out;
    cr_assert_eq(GATE(&out, "receipt", "verify", "--db", path), 1, "%s", out);
    cr_assert(strstr(out, "receipt 1 (m/local/ref.chat): FAILED") &&
                  strstr(out, "its numbers say FAIL"),
              "%s", out);
}

Test(cli, receipt_export_import_and_a_forged_file)
{
    struct key_pair k = make_key("cli3.key", "local");
    const char *db = cli_db("cli3.db", &k);
    char file[512], fresh[512];
    char *out;
    tmp_path(file, sizeof file, "cli3.jsonl");
    tmp_path(fresh, sizeof fresh, "cli3-fresh.db");
    cr_assert_eq(GATE(&out, "receipt", "export", "--db", db, "--out", file), 0, "%s", out);
    cr_assert(strstr(out, "exported 3"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "import", file, "--db", fresh), 0, "%s", out);
    cr_assert(strstr(out, "imported 3"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "verify", "--db", fresh), 0, "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "export", "--db", db), 2, "%s", out);

    /* flip one character of line 3's base64 payload: its signature no longer verifies */
    size_t n = 0;
    char *text = (char *)check_slurp(file, &n);
    char *l3 = strchr(strchr(text, '\n') + 1, '\n') + 1;
    char *pl = strstr(l3, "\"payload\":\"") + 11;
    pl[4] = pl[4] == 'A' ? 'B' : 'A';
    FILE *f = fopen(file, "w");
    fwrite(text, 1, n, f);
    fclose(f);
    free(text);
    tmp_path(fresh, sizeof fresh, "cli3-forged.db");
    int code = GATE(&out, "receipt", "import", file, "--db", fresh);
    cr_assert(code == 1, "a forged receipt is a judged failure (docs/receipts.md): exit %d: %s",
              code, out);
    cr_assert(strstr(out, "cli3.jsonl:3"), "%s", out);
    cr_assert_eq(GATE(&out, "receipt", "list", "--db", fresh), 0, "%s", out);
    cr_assert(!strstr(out, "ref.decode"), "a refused file left receipts: %s", out);
}

Test(cli, a_store_locked_past_the_timeout_is_an_environment_error)
{
    struct key_pair k = make_key("cli4.key", "local");
    const char *db = cli_db("cli4.db", &k);
    char file[512];
    char *out;
    tmp_path(file, sizeof file, "cli4.jsonl");
    cr_assert_eq(GATE(&out, "receipt", "export", "--db", db, "--out", file), 0, "%s", out);
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    setenv("GATE_DB_BUSY_MS", "200", 1);
    cr_assert_eq(GATE(&out, "receipt", "import", file, "--db", db), 3, "%s", out);
    cr_assert(strstr(out, "locked"), "%s", out);
    sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(h);
}

Test(cli, safe_escapes_control_characters_and_keeps_utf8)
{
    char buf[128];
    cr_assert_str_eq(cli_safe("h\x1b]0;pwned\x07", buf, sizeof buf), "h\\x1b]0;pwned\\x07");
    cr_assert_str_eq(cli_safe("a\x7f"
                              "b\xc2\x9b"
                              "c",
                              buf, sizeof buf),
                     "a\\x7fb\\xc2\\x9bc");
    cr_assert_str_eq(cli_safe("raw\x9b", buf, sizeof buf), "raw\\x9b");
    cr_assert_str_eq(cli_safe("caf\xc3\xa9 \xe2\x80\x94 ok\\", buf, sizeof buf),
                     "caf\xc3\xa9 \xe2\x80\x94 ok\\\\");
    cr_assert_str_eq(cli_safe("\x1b\x1b", buf, 6), "\\x1b", "truncated inside an escape");
    cr_assert_str_eq(cli_safe(NULL, buf, sizeof buf), "(null)");
}

Test(cli, an_imported_receipt_cannot_rewrite_the_terminal)
{
    struct key_pair k = make_key("esc.key", "h200");
    char src[512], file[512], db[512];
    struct store *s = NULL;
    struct gate_err err = {0};
    tmp_path(src, sizeof src, "esc-src.db");
    tmp_path(file, sizeof file, "esc.jsonl");
    tmp_path(db, sizeof db, "esc.db");
    cr_assert_eq(store_open(&s, src, &err), 0, "%s", err.msg);
    json_t *p = judged(1, NULL);
    json_object_set_new(p, "cell",
                        json_pack("{s:s, s:s, s:s}", "model", "m", "host", "h\x1b]0;pwned\x07",
                                  "mode", "ref.decode"));
    json_object_set_new(p, "environment", json_pack("{s:s}", "hostname", "box\x1b[2J"));
    cr_assert_eq(store_append(s, p, &k, NULL, &err), 0, "%s", err.msg);
    json_decref(p);
    cr_assert_eq(store_export(s, file, &err), 0, "%s", err.msg);
    store_close(s);
    char *out;
    cr_assert_eq(GATE(&out, "receipt", "import", file, "--db", db), 0, "%s", out);
    const char *const cmds[][6] = {{"receipt", "list", "--db", db, NULL},
                                   {"receipt", "show", "1", "--db", db, NULL},
                                   {"receipt", "verify", "--all", "--db", db, NULL}};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(gate(&out, cmds[i]), 0, "%s", out);
        cr_assert(!strchr(out, '\x1b') && !strchr(out, '\x07'),
                  "'gate %s %s' printed a raw control character", cmds[i][0], cmds[i][1]);
        cr_assert(strstr(out, "h\\x1b]0;pwned\\x07"), "%s", out);
        if (i == 1)
            cr_assert(strstr(out, "box\\x1b[2J"), "%s", out);
    }
}

Test(cli, import_exit_codes_follow_the_docs)
{
    struct key_pair k = make_key("ex.key", "local");
    const char *db = cli_db("ex.db", &k);
    char file[512], fresh[512];
    char *out;
    tmp_path(file, sizeof file, "ex.jsonl");
    tmp_path(fresh, sizeof fresh, "ex-fresh.db");
    FILE *f = fopen(file, "w");
    fputs("{\"not\": \"an envelope\"}\n", f);
    fclose(f);
    cr_assert_eq(GATE(&out, "receipt", "import", file, "--db", fresh), 2, "%s", out);
    cr_assert(strstr(out, "ex.jsonl:1"), "%s", out);
    tmp_path(file, sizeof file, "nonexistent.jsonl");
    cr_assert_eq(GATE(&out, "receipt", "import", file, "--db", fresh), 2, "%s", out);
    /* a conflict: the fresh store holds a row carrying receipt 1's hash with other bytes */
    tmp_path(file, sizeof file, "ex.jsonl");
    cr_assert_eq(GATE(&out, "receipt", "export", "--db", db, "--out", file), 0, "%s", out);
    sqlite3 *h;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT hash FROM receipts WHERE id = 1", -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO receipts (origin, cell, verdict, payload, signature, key_id, hash, "
             "prev_hash, created_at) VALUES ('import', 'x', 'PASS', '{}', zeroblob(64), 'k', "
             "'%s', '', '')",
             (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(h);
    tmp_path(fresh, sizeof fresh, "ex-conflict.db");
    struct store *s = NULL;
    struct gate_err err = {0};
    cr_assert_eq(store_open(&s, fresh, &err), 0, "%s", err.msg);
    store_close(s);
    cr_assert_eq(sqlite3_open(fresh, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    cr_assert_eq(GATE(&out, "receipt", "import", file, "--db", fresh), 1, "%s", out);
    cr_assert(strstr(out, "ex.jsonl:1") && strstr(out, "stored receipt 1"), "%s", out);
}

Test(cli, receipt_verify_names_a_receipt_deleted_behind_a_head_record)
{
    struct key_pair k = make_key("vh.key", "local");
    const char *db = cli_db("vh.db", &k);
    struct store *s = NULL;
    struct gate_err err = {0};
    cr_assert_eq(store_open(&s, db, &err), 0, "%s", err.msg);
    cr_assert_eq(store_write_head(s, &k, NULL, NULL, &err), 0, "%s", err.msg);
    store_close(s);
    char *out;
    cr_assert_eq(GATE(&out, "receipt", "verify", "--all", "--db", db), 0, "%s", out);
    cr_assert(strstr(out, "1 head records: 1 ok"), "%s", out);
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h,
                              "DROP TRIGGER receipts_no_delete; DELETE FROM receipts WHERE id = 3",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(h);
    cr_assert_eq(GATE(&out, "receipt", "verify", "--all", "--db", db), 1, "%s", out);
    cr_assert(strstr(out, "store TAMPERED: head record 1") && strstr(out, "deleted"), "%s", out);
}

/* store_get callback: the verified row's recomputed hash. */
static int hash_of(void *ctx, const struct store_row *row)
{
    memcpy(ctx, row->hash, 65);
    return 0;
}

/* A sign-off into the store at db signed by k naming receipt hash (as release_sign writes). */
static void add_signoff(const char *db, const struct key_pair *k, const char *hash)
{
    struct store *s = NULL;
    struct gate_err err = {0};
    cr_assert_eq(store_open(&s, db, &err), 0, "%s", err.msg);
    json_t *p =
        json_pack("{s:[{s:s, s:[i], s:[s]}], s:[], s:s}", "cells", "cell", "m/local/ref.decode",
                  "receipts", 1, "receipt_sha256", hash, "anchors", "verdict", "PASS");
    cr_assert_eq(store_add_signoff(s, p, k, &err), 0, "%s", err.msg);
    json_decref(p);
    store_close(s);
}

/* Issue 23 §5: `receipt verify --all` never looked at sign-offs, so a garbage, forged or copied
 * sign-off row passed. Each is now named and the exit code is 1. */
Test(cli, receipt_verify_checks_every_sign_off)
{
    struct key_pair ka = make_key("so-a.key", "local"), kb = make_key("so-b.key", "other");
    char db_a[512], db_b[512], hash[65] = "";
    snprintf(db_a, sizeof db_a, "%s", cli_db("so-a.db", &ka));
    snprintf(db_b, sizeof db_b, "%s", cli_db("so-b.db", &kb));
    struct store *s = NULL;
    struct gate_err err = {0};
    cr_assert_eq(store_open(&s, db_a, &err), 0, "%s", err.msg);
    cr_assert_eq(store_get(s, 1, hash_of, hash, &err), 0, "%s", err.msg);
    store_close(s);
    add_signoff(db_a, &ka, hash);
    char *out;
    cr_expect_eq(GATE(&out, "receipt", "verify", "--all", "--db", db_a), 0, "%s", out);
    cr_expect(strstr(out, "1 sign-off: 1 ok, 0 failed verification"), "%s", out);
    /* copied: store A's sign-off row into store B, which holds none of the receipts it names */
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(db_b, &h), SQLITE_OK);
    char sql[1400];
    snprintf(sql, sizeof sql,
             "ATTACH '%s' AS a; INSERT INTO signoffs (payload, signature, key_id, hash,"
             " created_at) SELECT payload, signature, key_id, hash, created_at FROM a.signoffs",
             db_a);
    cr_assert_eq(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_close(h);
    cr_expect_eq(GATE(&out, "receipt", "verify", "--all", "--db", db_b), 1, "%s", out);
    cr_expect(strstr(out, "store TAMPERED: 1 sign-offs fail verification, the first sign-off 1"),
              "%s", out);
    cr_expect(strstr(out, "is not a verified receipt of this store"), "%s", out);
    /* forged: validly signed by a key, naming a receipt this store never held */
    add_signoff(db_a, &kb, "ab00000000000000000000000000000000000000000000000000000000000000");
    cr_expect_eq(GATE(&out, "receipt", "verify", "--db", db_a), 1, "%s", out);
    cr_expect(strstr(out, "sign-off 2 (key "), "%s", out);
    cr_expect(strstr(out, "names receipt ab00"), "%s", out);
    /* garbage: a row that is no signed record at all */
    char db_c[512];
    snprintf(db_c, sizeof db_c, "%s", cli_db("so-c.db", &ka));
    cr_assert_eq(sqlite3_open(db_c, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h,
                              "INSERT INTO signoffs (payload, signature, key_id, hash, created_at)"
                              " VALUES ('garbage', zeroblob(64), 'x', 'y', 'now')",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_close(h);
    cr_expect_eq(GATE(&out, "receipt", "verify", "--db", db_c), 1, "%s", out);
    cr_expect(strstr(out, "sign-off 1 (key ?...): payload is not canonical JSON"), "%s", out);
}

/* Issue 23 §5, key trust: a sign-off properly signed by a key nobody trusts, naming a real
 * receipt of the store, verified like any other (before this, `receipt verify` had no trust
 * source, and a sign-off by any well-formed key passed). With --ladder (the keys the ladder
 * trusts for any host, through the release check's release_key_trusted) or --trust it is
 * UNTRUSTED, exit 1; without either, verify says that key trust was not checked. */
Test(cli, receipt_verify_judges_each_sign_off_key_against_the_ladder_or_trust_keys)
{
    struct key_pair ka = make_key("st-a.key", "local"), kx = make_key("st-x.key", "local");
    char db[512], lad[512], pub[512], hash[65] = "";
    struct gate_err err = {0};
    snprintf(db, sizeof db, "%s", cli_db("st.db", &ka));
    struct store *s = NULL;
    cr_assert_eq(store_open(&s, db, &err), 0, "%s", err.msg);
    cr_assert_eq(store_get(s, 1, hash_of, hash, &err), 0, "%s", err.msg);
    store_close(s);
    add_signoff(db, &ka, hash); /* sign-off 1: the host's own key */
    add_signoff(db, &kx, hash); /* sign-off 2: any key at all, signed properly */
    tmp_path(pub, sizeof pub, "st-a.pub");
    cr_assert_eq(key_write_public(pub, &ka, &err), 0, "%s", err.msg);
    tmp_path(lad, sizeof lad, "st.yaml");
    FILE *f = fopen(lad, "w");
    cr_assert(f);
    fprintf(f,
            "release: {name: rel, version: 1.0.0}\n"
            "models:\n  m: {path: %s/conformance/qwen3moe-tiny-q4_k_m/model.gguf, sha256: "
            "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3moe}\n"
            "hosts:\n  local: {device: none, trust: ['file:st-a.pub']}\n"
            "modes: [ref.decode]\ncells:\n  - {model: m, host: local, mode: ref.decode}\n"
            "unanchored: {qwen3moe: 'receipt verify test'}\n",
            check_shared_dir());
    fclose(f);
    char *out;
    /* no trust source: both verify, and the output says plainly that trust was not judged */
    cr_expect_eq(GATE(&out, "receipt", "verify", "--db", db), 0, "%s", out);
    cr_expect(strstr(out, "2 sign-offs: 2 ok, 0 failed verification"), "%s", out);
    cr_expect(strstr(out, "sign-off key trust NOT checked"), "%s", out);
    cr_expect_null(strstr(out, "UNTRUSTED"), "%s", out);
    /* the ladder trusts ka for host local: sign-off 2 (kx) is named, exit 1 */
    char want[256];
    snprintf(want, sizeof want,
             "store UNTRUSTED: 1 sign-off is signed by a key no trust source names, the first"
             " sign-off 2 (key %s)",
             kx.id);
    cr_expect_eq(GATE(&out, "receipt", "verify", "--db", db, "--ladder", lad), 1, "%s", out);
    cr_expect(strstr(out, want), "%s", out);
    cr_expect(strstr(out, "1 of 2 verified sign-offs by a trusted key"), "%s", out);
    cr_expect_null(strstr(out, "NOT checked"), "%s", out);
    /* a public key file given with --trust is the same source */
    cr_expect_eq(GATE(&out, "receipt", "verify", "--db", db, "--trust", pub), 1, "%s", out);
    cr_expect(strstr(out, want), "%s", out);
    /* both keys trusted (one by the ladder, one inline): exit 0 */
    cr_expect_eq(
        GATE(&out, "receipt", "verify", "--all", "--db", db, "--ladder", lad, "--trust", kx.id), 0,
        "%s", out);
    cr_expect(strstr(out, "2 of 2 verified sign-offs by a trusted key"), "%s", out);
    /* a --trust that holds no key is an input error naming it, never "trusted nothing" */
    cr_expect_eq(GATE(&out, "receipt", "verify", "--db", db, "--trust", lad), 2, "%s", out);
    cr_expect(strstr(out, "does not hold one public key"), "%s", out);
    cr_expect_eq(GATE(&out, "receipt", "verify", "--db", db, "--trust", "ed25519:12"), 2, "%s",
                 out);
}
