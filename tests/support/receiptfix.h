/* receiptfix.h — what the receipt, key and receipt-CLI tests share: a host key generated in the
 * scratch folder, and a payload whose parity gate is judged by the gate table (so its verdicts
 * are the ones `receipt verify` and the release check re-derive).
 */
#ifndef GATE_TEST_RECEIPTFIX_H
#define GATE_TEST_RECEIPTFIX_H

#include <jansson.h>
#include <stddef.h>

#include "receipts/key.h"

/* out (n bytes) = check_tmp_dir()/name. */
void receiptfix_path(char *out, size_t n, const char *name);

/* A fresh key pair for host, written to check_tmp_dir()/name (asserts on failure). */
struct key_pair receiptfix_key(const char *name, const char *host);

/* A payload whose one gate (parity) is judged by the gate table over 64 positions of numbers
 * that pass or fail (one position at cosine 0.5); claim forges the recorded verdicts (NULL:
 * the judged ones). The caller json_decref()s it. */
json_t *receiptfix_judged(int numbers_pass, const char *claim);

#endif
