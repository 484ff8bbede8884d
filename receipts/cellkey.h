/* cellkey.h — a cell's identity: model × host × mode × the settings that make identity (the KV
 * cache type, the instruction set and the prefill precision), written, read, named and compared
 * in one place.
 *
 * Invariants: a setting at its default is written nowhere and adds nothing to a name — an F32
 * cell on the backend's best instruction set has the identity it had before the settings existed
 * ("m/h/mode"); a non-default one is part of the identity everywhere: the payload's "cell"
 * object, the cell name ("m/h/mode+kv=f16+isa=avx2", settings in this fixed order), every cell
 * gate's recorded settings, the release matrix, baselines and reports. Two cells that differ
 * only in a setting are two cells with their own receipts. A new identity setting is one field
 * here plus its parse in harness/ladder.c and its effect where the subject opens.
 * Start reading: struct cell_key, cell_key_of_payload(), cell_key_name().
 */
#ifndef GATE_CELLKEY_H
#define GATE_CELLKEY_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"

/* The subject's KV cache. F32 is the default. */
enum kv_type { KV_F32 = 0, KV_F16 = 1 };

/* "f32" / "f16". */
const char *kv_type_name(enum kv_type kv);

/* Parse "f32" / "f16" into *out; -1 for anything else (out untouched). */
int kv_type_parse(const char *text, enum kv_type *out);

/* The settings beside model/host/mode that make a cell's identity. isa: "" = whatever the
 * backend runs best on the host (the default), else "portable", "avx2" or "avx512" — the
 * instruction set the cpu backend is held to (engine/cpu_dot.h), so an AVX2 cell can be required
 * on an AVX-512 host. */
struct cell_variant {
    enum kv_type kv;
    char isa[16];
    char prefill[8]; /* "" = f32 (the default), else "f16" or "bf16": the 16-bit precision of a
                      * backend's batched projections (its row's prefills, engine/backend.c) */
};

/* 1 when text is a non-default prefill precision a cell may ask for ("f16", "bf16"). */
int cell_prefill_known(const char *text);

/* 1 when text is an instruction-set name a cell may ask for ("portable", "avx2", "avx512"). */
int cell_isa_known(const char *text);

/* A cell's whole identity. The strings are borrowed (from a ladder or a parsed payload). */
struct cell_key {
    const char *model, *host, *mode;
    struct cell_variant v;
};

/* 1 when a and b name the same cell / the same identity settings. */
int cell_variant_same(const struct cell_variant *a, const struct cell_variant *b);
int cell_key_same(const struct cell_key *a, const struct cell_key *b);

/* The name suffix of v: "" for the defaults, else "+kv=f16", "+isa=avx2", "+prefill=f16", in
 * that order. */
const char *cell_variant_suffix(const struct cell_variant *v, char *buf, size_t n);

/* "model/host/mode" plus the suffix into out; ERR_INPUT when it does not fit in n bytes. */
int cell_key_name(const struct cell_key *k, char *out, size_t n, struct gate_err *err);

/* The key a payload's "cell" object records (strings borrowed from payload). Absent settings
 * are the defaults (receipts from before a setting existed). ERR_INPUT when "cell" is not an
 * object of three non-empty strings, or a setting is present with a value no ladder can hold. */
int cell_key_of_payload(const json_t *payload, struct cell_key *out, struct gate_err *err);

/* The payload's "cell" object for k: model, host, mode, "kv" always (so a reader sees it),
 * "isa" only when set. NULL out of memory. */
json_t *cell_key_json(const struct cell_key *k);

/* Record v's non-default settings into a gate's settings object ("kv": "f16", "isa": NAME,
 * "prefill": "f16"), so
 * a receipt made under other settings never matches the cell at release check. */
void cell_variant_settings(const struct cell_variant *v, json_t *settings);

#endif
