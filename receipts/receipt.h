/* receipt.h — the receipt payload: canonical JSON, Ed25519 signatures over a DSSE envelope's
 * pre-authentication encoding, the chain hash, and a verdict re-derivation from recorded numbers.
 *
 * Invariants: a payload is a JSON object serialized by receipt_canonical() (keys sorted by byte
 * order, compact, UTF-8, reals printed with jansson's "%.17g" round-trip form, never NaN/Inf —
 * callers record non-finite numbers as the strings "NaN", "Inf", "-Inf"). The bytes that are
 * signed, hashed and stored are exactly those canonical bytes. A signature covers
 * PAE(payloadType, payload) (DSSE v1), so a receipt signature can never verify as a sign-off or
 * as anything else the same key signs. The chain link of a receipt is
 * SHA-256(payload || signature). docs/receipts.md documents every payload field.
 * Start reading: receipt_canonical(), receipt_sign().
 */
#ifndef GATE_RECEIPT_H
#define GATE_RECEIPT_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"
#include "receipts/key.h"

#define RECEIPT_SCHEMA_VERSION 1

/* DSSE payloadType of a receipt and of a release sign-off: the domain separation. */
#define RECEIPT_PAYLOAD_TYPE "application/vnd.gate.receipt.v1+json"
#define SIGNOFF_PAYLOAD_TYPE "application/vnd.gate.signoff.v1+json"

/* prev_hash of the first receipt of a chain: 64 zeros. */
#define RECEIPT_GENESIS_HASH "0000000000000000000000000000000000000000000000000000000000000000"

/* Serialize payload (a JSON object) canonically into *out (malloc'd, NUL-terminated; caller
 * frees) of *len bytes. Refuses (ERR_INPUT) a non-object root and any non-finite real, naming
 * the JSON path of the offending value. */
int receipt_canonical(const json_t *payload, char **out, size_t *len, struct gate_err *err);

/* Parse stored payload bytes strictly (duplicate keys refused) into *out (caller json_decref's)
 * and require them to be an object in canonical form: re-serializing must give the same bytes.
 * Errors: ERR_INPUT with the reason. */
int receipt_parse(const char *payload, size_t len, json_t **out, struct gate_err *err);

/* Ed25519 signature by k over PAE(RECEIPT_PAYLOAD_TYPE, payload[0..len)) into sig.
 * Returns 0, or ERR_ENV when memory for the message cannot be allocated (sig is then zeroed). */
int receipt_sign(const char *payload, size_t len, const struct key_pair *k, unsigned char sig[64]);

/* 0 when sig is k's signature over PAE(RECEIPT_PAYLOAD_TYPE, payload); -1 otherwise (also when
 * memory runs out — the caller must treat it as not verified). */
int receipt_verify(const char *payload, size_t len, const unsigned char pk[32],
                   const unsigned char sig[64]);

/* The same two for any DSSE payloadType (sign-offs use SIGNOFF_PAYLOAD_TYPE). */
int receipt_sign_type(const char *type, const char *payload, size_t len, const struct key_pair *k,
                      unsigned char sig[64]);
int receipt_verify_type(const char *type, const char *payload, size_t len,
                        const unsigned char pk[32], const unsigned char sig[64]);

/* The DSSE v1 pre-authentication encoding "DSSEv1 <len(type)> <type> <len(body)> <body>"
 * into *out (malloc'd; caller frees), *out_len bytes. Returns 0 or ERR_ENV (out of memory). */
int receipt_pae(const char *type, const char *body, size_t len, unsigned char **out,
                size_t *out_len);

/* The chain link: lowercase hex SHA-256 of payload bytes followed by the 64 signature bytes. */
void receipt_hash(const char *payload, size_t len, const unsigned char sig[64], char hex[65]);

/* 32 lowercase hex digits of fresh randomness (the payload's "nonce"). */
void receipt_nonce(char hex[33]);

/* The cell of a payload as "model/host/mode" plus its identity settings' suffix into out (the
 * store's `cell` column): receipts/cellkey.h's name, the one every report and the ladder use.
 * Errors: ERR_INPUT when "cell" is malformed (cell_key_of_payload) or the name does not fit. */
int receipt_cell_name(const json_t *payload, char *out, size_t n, struct gate_err *err);

/* Re-derive the verdicts a payload records from its own numbers (docs/receipts.md, "gates"):
 * every check's pass flag from value, op and threshold; every gate's verdict from its checks and
 * error; the overall verdict from the gates (PASS only when there is at least one gate and all
 * pass). Returns 0 when everything agrees; ERR_RUNTIME with the first disagreement in err;
 * ERR_INPUT when the gates are malformed. Settings-vs-ladder comparison is the release check's. */
int receipt_rederive(const json_t *payload, struct gate_err *err);

#endif
