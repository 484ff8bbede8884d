/* fuzz_receipt.c — libFuzzer target for receipt import (receipts/store_exchange.c).
 *
 * The first byte of an input chooses what the rest is:
 *   0  an export file (JSON lines of DSSE envelopes), imported whole with store_import();
 *   1  the payload of one receipt envelope: wrapped here into an export line (base64, keyid
 *      "fuzz", an all-zero signature), so mutations reach receipt_parse() and the checks before
 *      the signature instead of dying in the base64 layer;
 *   2  the same for a head record payload (store_head_parse()).
 * The store is a real one in a private scratch folder (mkdtemp), empty at every input: an import
 * that succeeds (the seeds: exports the tests wrote) is walked with store_foreach(), then the
 * store is deleted and made again, so every input starts from the same state. Checked: no memory
 * error (ASan, UBSan), a refusal carries a message and imports nothing, an accepted import's
 * rows all verify (signature, chain, columns). Build and run: fuzz/README.md.
 */
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "receipts/receipt.h"
#include "receipts/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], db[96], file[96];
static struct store *st;

static void remove_db(void)
{
    static const char *const SUFFIX[] = {"", "-wal", "-shm", "-journal"};
    char p[128];
    for (size_t i = 0; i < sizeof SUFFIX / sizeof SUFFIX[0]; i++) {
        snprintf(p, sizeof p, "%s%s", db, SUFFIX[i]);
        unlink(p);
    }
}

static void open_db(void)
{
    struct gate_err err = {0};
    if (store_open(&st, db, &err))
        abort(); /* the harness itself cannot run */
}

static void cleanup(void)
{
    store_close(st);
    st = NULL;
    remove_db();
    unlink(file);
    rmdir(dir);
}

static void setup(void)
{
    if (sodium_init() < 0)
        abort();
    snprintf(dir, sizeof dir, "%s/gate-fuzz-receipt-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        abort();
    snprintf(db, sizeof db, "%s/receipts.db", dir);
    snprintf(file, sizeof file, "%s/import.jsonl", dir);
    open_db();
    atexit(cleanup);
}

/* One export line holding payload (n bytes) as an envelope of type. */
static void wrap(FILE *f, const char *type, const uint8_t *payload, size_t n)
{
    static const unsigned char zero[64];
    char sig[sodium_base64_ENCODED_LEN(64, sodium_base64_VARIANT_ORIGINAL)];
    size_t cap = sodium_base64_encoded_len(n, sodium_base64_VARIANT_ORIGINAL);
    char *pb = malloc(cap);
    if (!pb)
        abort();
    sodium_bin2base64(pb, cap, payload, n, sodium_base64_VARIANT_ORIGINAL);
    sodium_bin2base64(sig, sizeof sig, zero, sizeof zero, sodium_base64_VARIANT_ORIGINAL);
    fprintf(f,
            "{\"payload\":\"%s\",\"payloadType\":\"%s\",\"signatures\":[{\"keyid\":\"fuzz\","
            "\"sig\":\"%s\"}]}\n",
            pb, type, sig);
    free(pb);
}

static int check_row(void *ctx, const struct store_row *r)
{
    (void)ctx;
    if (!r->sig_ok || !r->chain_ok || !r->columns_ok)
        abort(); /* an import that succeeded stored a row that does not verify */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        setup();
    if (size < 1)
        return 0;
    FILE *f = fopen(file, "wb");
    if (!f)
        abort();
    const int mode = data[0] % 3;
    if (mode == 0)
        fwrite(data + 1, 1, size - 1, f);
    else
        wrap(f, mode == 1 ? RECEIPT_PAYLOAD_TYPE : HEAD_PAYLOAD_TYPE, data + 1, size - 1);
    if (fclose(f) != 0)
        abort();
    struct gate_err err = {0};
    int n = -1;
    int rc = store_import(st, file, &n, &err);
    if (rc) {
        if (n != 0 || err.code != rc || err.msg[0] == '\0')
            abort(); /* a refusal imports nothing and says why */
        return 0;
    }
    if (n < 0 || store_foreach(st, check_row, NULL, &err) != 0)
        abort();
    if (n > 0) {
        store_close(st);
        remove_db();
        open_db();
    }
    return 0;
}
