/* cellkey.h — a cell's identity: model × host × mode × the settings that make identity (the KV
 * cache type, the instruction set and the prefill precision), written, read, named and compared
 * in one place, every setting one row of one table (CELL_SETTINGS[], redis config.c-style).
 *
 * Invariants: a setting at its default adds nothing to a name and to a gate's settings — an F32
 * cell on the backend's best instruction set has the identity it had before the settings existed
 * ("m/h/mode"; only kv is written in the payload's "cell" object at its default, so a reader sees
 * it); a non-default one is part of the identity everywhere: the payload's "cell" object, the
 * cell name ("m/h/mode+kv=f16+isa=avx2", settings in the rows' order), every cell gate's recorded
 * settings, the release matrix, baselines and reports. Two cells that differ only in a setting
 * are two cells with their own receipts. A new identity setting is one id and one row here plus
 * its effect where the subject opens (harness/run.c) and what the backend honours.
 * Start reading: struct cell_setting, CELL_SETTINGS (cellkey.c), struct cell_key.
 */
#ifndef GATE_CELLKEY_H
#define GATE_CELLKEY_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"

/* The identity settings, one row each in CELL_SETTINGS[], in the order a cell's name lists them
 * ("+kv=f16+isa=avx2+prefill=bf16"). Adding one: its id here, its row in cellkey.c, and its
 * effect where the cell's subject opens (harness/run.c) — the ladder's parse and backend check,
 * names, payloads, gate settings, override matches, the duplicate index, the judge of what ran
 * (oracles/gates.c) and the release matrix all loop over the rows. */
enum cell_setting_id {
    CELL_KV,
    CELL_ISA,
    CELL_PREFILL,
    /* the kernel generations (engine/backend.h, enum backend_knob, in its order): a cell can
     * require the fast paths of a device backend (`gemv: v2`), judged from metrics.ran.KEY */
    CELL_GEMV,
    CELL_ROUTE,
    CELL_ATTN,
    CELL_GRAPH,
    CELL_SETTING_COUNT
};
/* The knob of a kernel-generation setting: CELL_GEMV + k is knob k. */
#define CELL_KNOB_FIRST CELL_GEMV

/* The kv row's value indices: the subject's KV cache, F32 the default. */
enum kv_type { KV_F32 = 0, KV_F16 = 1 };

/* At most this many values besides the default. */
#define CELL_SETTING_MAX_VALUES 3

/* One identity setting. Its values are numbered: 0 the default, i the row's values[i - 1]. */
struct cell_setting {
    const char *key;  /* a cells entry's and an override match's key, the payload "cell"
                       * object's, the gates' settings', and "+KEY=" in a name */
    const char *dflt; /* the default's name, which a ladder may write ("f32"); NULL: the
                       * default has none (isa: whatever the backend runs best) */
    const char *values[CELL_SETTING_MAX_VALUES + 1]; /* the other values, NULL-terminated */
    int cell_has_default; /* the payload's "cell" object records the default too (kv: a reader
                           * sees it) and accepts it back; else an absent key is the default */
    const char *meaning;  /* for a ladder's parse error: "the KV cache type" */
    const char *noun;     /* for the judge's reason (oracles/gates.c): "KV cache" */
    /* 0 when backend (a mode's backend name, engine/backend.h) offers non-default value; else 1
     * with why (n bytes) what follows "but backend 'B' " in the ladder's refusal — read from the
     * backend's row, the same in every build (a cell is refused, never run otherwise) */
    int (*refuses)(enum cell_setting_id s, const char *backend, const char *value, char *why,
                   size_t n); /* s: this row's id (one function serves the four knob rows) */
};
extern const struct cell_setting CELL_SETTINGS[CELL_SETTING_COUNT];

/* The settings beside model/host/mode that make a cell's identity: each setting's value number
 * (0 the default). isa's values are the instruction sets the cpu backend can be held to
 * (engine/cpu_dot.h), so an AVX2 cell can be required on an AVX-512 host; prefill's the 16-bit
 * precisions of a backend's batched projections (its row's prefills, engine/backend.c); gemv,
 * route, attn and graph the kernel generations a backend's row offers (its knobs). */
struct cell_variant {
    unsigned char at[CELL_SETTING_COUNT];
};

/* The name of value number i of setting s: "" for a default without a name (and for an i out
 * of range). */
const char *cell_setting_name(enum cell_setting_id s, int i);

/* v's value of setting s: "" at the default, else its name ("f16", "avx2"). */
const char *cell_variant_value(const struct cell_variant *v, enum cell_setting_id s);

/* Parse text as a value of setting s into *i; -1 for anything else (i untouched). ladder: 1 for
 * a ladder's form (the default's name accepted when it has one), 0 for a payload's "cell" object
 * (the default's name only where the object records it). */
int cell_setting_parse(enum cell_setting_id s, const char *text, int ladder, unsigned char *i);

/* The values a parse of s accepts, for a message: "f32 or f16"; quoted: "\"f32\" or \"f16\"". */
const char *cell_setting_choices(enum cell_setting_id s, int ladder, int quoted, char *buf,
                                 size_t n);

/* The number of distinct variants (the product of every setting's value count), and v's number
 * among them, the first setting the most significant. */
unsigned cell_variant_count(void);
unsigned cell_variant_index(const struct cell_variant *v);

/* A cell's whole identity. The strings are borrowed (from a ladder or a parsed payload). */
struct cell_key {
    const char *model, *host, *mode;
    struct cell_variant v;
};

/* 1 when a and b name the same cell / the same identity settings. */
int cell_variant_same(const struct cell_variant *a, const struct cell_variant *b);
int cell_key_same(const struct cell_key *a, const struct cell_key *b);

/* Buffers that hold any variant's suffix and description whole: every setting at its longest
 * value is 71 bytes of suffix ("+kv=f16+isa=portable+prefill=bf16+gemv=v2+route=v2+attn=split
 * +graph=on") and 99 of description (tests/test_cellkey.c checks both fit with room to spare). */
#define CELL_SUFFIX_MAX 128
#define CELL_DESCRIBE_MAX 192

/* The name suffix of v: "" for the defaults, else "+kv=f16", "+isa=avx2", "+prefill=f16", in
 * the rows' order. */
const char *cell_variant_suffix(const struct cell_variant *v, char *buf, size_t n);

/* v in words for a message: "kv f32, isa avx2" (the settings a "cell" object records). */
const char *cell_variant_describe(const struct cell_variant *v, char *buf, size_t n);

/* "model/host/mode" plus the suffix into out; ERR_INPUT when it does not fit in n bytes. */
int cell_key_name(const struct cell_key *k, char *out, size_t n, struct gate_err *err);

/* The key a payload's "cell" object records (strings borrowed from payload). Absent settings
 * are the defaults (receipts from before a setting existed). ERR_INPUT when "cell" is not an
 * object of three non-empty strings, or a setting is present with a value no ladder can hold. */
int cell_key_of_payload(const json_t *payload, struct cell_key *out, struct gate_err *err);

/* The payload's "cell" object for k: model, host, mode and v's settings (cell_variant_put).
 * NULL out of memory. */
json_t *cell_key_json(const struct cell_key *k);

/* Put v's settings into o as a "cell" object records them: each non-default one, and a
 * default where the row says the object records it ("kv": "f32" always, so a reader sees it). */
void cell_variant_put(const struct cell_variant *v, json_t *o);

/* Record v's non-default settings into a gate's settings object ("kv": "f16", "isa": NAME,
 * "prefill": "f16"), so a receipt made under other settings never matches the cell at release
 * check. */
void cell_variant_settings(const struct cell_variant *v, json_t *settings);

#endif
