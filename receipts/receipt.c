/* receipt.c — canonical payload bytes, DSSE-PAE Ed25519 signatures, chain hashes, verdict
 * re-derivation (see receipt.h and docs/receipts.md).
 *
 * Canonical form is jansson's own serializer with JSON_COMPACT | JSON_SORT_KEYS (no hand-written
 * escaping): keys sorted by strcmp() of their UTF-8 bytes, no whitespace, non-ASCII emitted as
 * UTF-8, reals as the shortest of "%.17g" with ".0" appended when integral. Parsing then
 * re-serializing a canonical payload gives the same bytes, which receipt_parse() checks.
 */
#include "receipts/receipt.h"

#include "receipts/cellkey.h"

#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CANON_FLAGS (JSON_COMPACT | JSON_SORT_KEYS)

/* Find the first non-finite real under v; writes its JSON path into path. 1 if found. */
static int find_nonfinite(const json_t *v, char *path, size_t n, size_t used)
{
    if (json_is_real(v))
        return !isfinite(json_real_value(v));
    if (json_is_object(v)) {
        const char *key;
        json_t *child;
        json_object_foreach((json_t *)v, key, child)
        {
            int w = snprintf(path + used, n - used, ".%s", key);
            size_t u = w < 0 ? used : used + (size_t)w;
            if (u >= n)
                u = n - 1;
            if (find_nonfinite(child, path, n, u))
                return 1;
            path[used] = '\0';
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *child;
        json_array_foreach(v, i, child)
        {
            int w = snprintf(path + used, n - used, "[%zu]", i);
            size_t u = w < 0 ? used : used + (size_t)w;
            if (u >= n)
                u = n - 1;
            if (find_nonfinite(child, path, n, u))
                return 1;
            path[used] = '\0';
        }
    }
    return 0;
}

int receipt_canonical(const json_t *payload, char **out, size_t *len, struct gate_err *err)
{
    char path[256] = "$";
    *out = NULL;
    *len = 0;
    if (!json_is_object(payload))
        return err_set(err, ERR_INPUT, "a receipt payload must be a JSON object");
    if (find_nonfinite(payload, path, sizeof path, 1))
        return err_set(err, ERR_INPUT,
                       "receipt payload value %s is not finite; record it as the string "
                       "\"NaN\" or \"Inf\"",
                       path);
    char *s = json_dumps(payload, CANON_FLAGS);
    if (!s)
        return err_set(err, ERR_ENV, "cannot serialize the receipt payload (out of memory)");
    *out = s;
    *len = strlen(s);
    return 0;
}

int receipt_parse(const char *payload, size_t len, json_t **out, struct gate_err *err)
{
    json_error_t jerr;
    char *again = NULL;
    int rc = 0;
    *out = NULL;
    json_t *v = json_loadb(payload, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!v) {
        rc = err_set(err, ERR_INPUT, "payload is not valid JSON: %s at byte %d", jerr.text,
                     jerr.position);
        goto cleanup;
    }
    if (!json_is_object(v)) {
        rc = err_set(err, ERR_INPUT, "payload is not a JSON object");
        goto cleanup;
    }
    again = json_dumps(v, CANON_FLAGS);
    if (!again) {
        rc = err_set(err, ERR_ENV, "cannot re-serialize the payload (out of memory)");
        goto cleanup;
    }
    if (strlen(again) != len || memcmp(again, payload, len) != 0) {
        rc = err_set(err, ERR_INPUT, "payload is not in canonical form");
        goto cleanup;
    }
    *out = v;
    v = NULL;
cleanup:
    free(again);
    json_decref(v);
    return rc;
}

int receipt_pae(const char *type, const char *body, size_t len, unsigned char **out,
                size_t *out_len)
{
    size_t tlen = strlen(type);
    char head[128];
    *out = NULL;
    *out_len = 0;
    /* "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body; two 20-digit lengths always fit */
    int h1 = snprintf(head, sizeof head, "DSSEv1 %zu ", tlen);
    char mid[48];
    int h2 = snprintf(mid, sizeof mid, " %zu ", len);
    size_t total = (size_t)h1 + tlen + (size_t)h2 + len;
    unsigned char *m = malloc(total ? total : 1);
    if (!m)
        return ERR_ENV;
    memcpy(m, head, (size_t)h1);
    memcpy(m + h1, type, tlen);
    memcpy(m + h1 + tlen, mid, (size_t)h2);
    if (len)
        memcpy(m + h1 + tlen + h2, body, len);
    *out = m;
    *out_len = total;
    return 0;
}

int receipt_sign_type(const char *type, const char *payload, size_t len, const struct key_pair *k,
                      unsigned char sig[64])
{
    unsigned char *m = NULL;
    size_t mlen = 0;
    memset(sig, 0, 64);
    if (receipt_pae(type, payload, len, &m, &mlen) != 0)
        return ERR_ENV;
    crypto_sign_detached(sig, NULL, m, mlen, k->sk);
    free(m);
    return 0;
}

int receipt_verify_type(const char *type, const char *payload, size_t len,
                        const unsigned char pk[32], const unsigned char sig[64])
{
    unsigned char *m = NULL;
    size_t mlen = 0;
    if (receipt_pae(type, payload, len, &m, &mlen) != 0)
        return -1;
    int rc = crypto_sign_verify_detached(sig, m, mlen, pk) == 0 ? 0 : -1;
    free(m);
    return rc;
}

int receipt_sign(const char *payload, size_t len, const struct key_pair *k, unsigned char sig[64])
{
    return receipt_sign_type(RECEIPT_PAYLOAD_TYPE, payload, len, k, sig);
}

int receipt_verify(const char *payload, size_t len, const unsigned char pk[32],
                   const unsigned char sig[64])
{
    return receipt_verify_type(RECEIPT_PAYLOAD_TYPE, payload, len, pk, sig);
}

void receipt_hash(const char *payload, size_t len, const unsigned char sig[64], char hex[65])
{
    crypto_hash_sha256_state st;
    unsigned char d[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_init(&st);
    crypto_hash_sha256_update(&st, (const unsigned char *)payload, len);
    crypto_hash_sha256_update(&st, sig, 64);
    crypto_hash_sha256_final(&st, d);
    sodium_bin2hex(hex, 65, d, sizeof d);
}

void receipt_nonce(char hex[33])
{
    unsigned char r[16];
    if (sodium_init() < 0)
        abort(); /* libsodium cannot initialize: no randomness, an invariant of the process */
    randombytes_buf(r, sizeof r);
    sodium_bin2hex(hex, 33, r, sizeof r);
}

int receipt_cell_name(const json_t *payload, char *out, size_t n, struct gate_err *err)
{
    struct cell_key k;
    int rc = cell_key_of_payload(payload, &k, err);
    return rc ? rc : cell_key_name(&k, out, n, err);
}

/* ---- verdict re-derivation ------------------------------------------------------------------ */

/* A recorded number: a JSON number, or one of the strings "NaN", "Inf", "-Inf". */
static int number_of(const json_t *v, double *out)
{
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return 0;
    }
    const char *s = json_string_value(v);
    if (s && !strcmp(s, "NaN")) {
        *out = NAN;
        return 0;
    }
    if (s && (!strcmp(s, "Inf") || !strcmp(s, "+Inf"))) {
        *out = INFINITY;
        return 0;
    }
    if (s && !strcmp(s, "-Inf")) {
        *out = -INFINITY;
        return 0;
    }
    return -1;
}

/* Whether value op threshold holds; -1 when op or operands are malformed. Any non-finite
 * number fails every comparison (DESIGN.md settled question 8). */
static int check_holds(const json_t *value, const char *op, const json_t *threshold)
{
    double a, b;
    int ge = !strcmp(op, ">="), le = !strcmp(op, "<="), gt = !strcmp(op, ">");
    int lt = !strcmp(op, "<"), eq = !strcmp(op, "==");
    if (!(ge || le || gt || lt || eq))
        return -1;
    if (eq && !(json_is_number(value) && json_is_number(threshold)) &&
        (number_of(value, &a) != 0 || number_of(threshold, &b) != 0))
        return json_equal((json_t *)value, (json_t *)threshold) ? 1 : 0;
    if (number_of(value, &a) != 0 || number_of(threshold, &b) != 0)
        return -1;
    if (!isfinite(a) || !isfinite(b))
        return 0;
    return ge ? a >= b : le ? a <= b : gt ? a > b : lt ? a < b : a == b;
}

static int verdict_pass(const char *v)
{
    return v && !strcmp(v, "PASS");
}

static int verdict_known(const char *v)
{
    return v && (!strcmp(v, "PASS") || !strcmp(v, "FAIL"));
}

int receipt_rederive(const json_t *payload, struct gate_err *err)
{
    const char *overall = json_string_value(json_object_get(payload, "verdict"));
    json_t *gates = json_object_get(payload, "gates");
    if (!verdict_known(overall))
        return err_set(err, ERR_INPUT, "payload \"verdict\" is not \"PASS\" or \"FAIL\"");
    if (!json_is_object(gates))
        return err_set(err, ERR_INPUT, "payload \"gates\" is not an object");
    int all_pass = json_object_size(gates) > 0;
    const char *name;
    json_t *g;
    json_object_foreach(gates, name, g)
    {
        const char *gv = json_string_value(json_object_get(g, "verdict"));
        json_t *checks = json_object_get(g, "checks");
        if (!json_is_object(g) || !verdict_known(gv))
            return err_set(err, ERR_INPUT, "gate '%s' has no \"verdict\" of PASS or FAIL", name);
        if (!json_is_array(checks))
            return err_set(err, ERR_INPUT, "gate '%s' has no \"checks\" array", name);
        int gate_pass = json_array_size(checks) > 0 && !json_object_get(g, "error");
        size_t i;
        json_t *c;
        json_array_foreach(checks, i, c)
        {
            const char *metric = json_string_value(json_object_get(c, "metric"));
            const char *op = json_string_value(json_object_get(c, "op"));
            json_t *pass = json_object_get(c, "pass");
            if (!metric || !op || !json_is_boolean(pass) || !json_object_get(c, "value") ||
                !json_object_get(c, "threshold"))
                return err_set(err, ERR_INPUT,
                               "gate '%s' check %zu lacks metric, value, op, threshold or pass",
                               name, i);
            int holds =
                check_holds(json_object_get(c, "value"), op, json_object_get(c, "threshold"));
            if (holds < 0)
                return err_set(err, ERR_INPUT, "gate '%s' check '%s': cannot compare with '%s'",
                               name, metric, op);
            if (holds != json_is_true(pass))
                return err_set(err, ERR_RUNTIME,
                               "gate '%s' check '%s' records pass=%s but its value and threshold "
                               "say %s",
                               name, metric, json_is_true(pass) ? "true" : "false",
                               holds ? "true" : "false");
            gate_pass = gate_pass && holds;
        }
        if (gate_pass != verdict_pass(gv))
            return err_set(err, ERR_RUNTIME, "gate '%s' records %s but its checks say %s", name, gv,
                           gate_pass ? "PASS" : "FAIL");
        all_pass = all_pass && gate_pass;
    }
    if (all_pass != verdict_pass(overall))
        return err_set(err, ERR_RUNTIME, "receipt records %s but its gates say %s%s", overall,
                       all_pass ? "PASS" : "FAIL",
                       json_object_size(gates) ? "" : " (no gates ran)");
    return 0;
}
