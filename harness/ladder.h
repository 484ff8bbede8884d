/* ladder.h — a release ladder: the required cells (model x host x mode) and the gates'
 * settings, parsed strictly from YAML (docs/ladder.md documents every key).
 *
 * Invariants after ladder_load() succeeds: every key was known, of the right type and unique;
 * every cell names defined models, hosts and modes from the fixed list every build knows;
 * no cell is the judge itself; parity runs >= 64 positions; every gate's settings pass its
 * oracle's config check (the gate table's row: gatedef_check); every fault listed can apply to
 * the cell's model architecture and judged positions; every model pins a SHA-256; a `kv: f16` cell
 * names a backend that offers an F16 KV cache (backend_offers_kv_f16). There is no "optional" and
 * no "skip": every expanded cell is required. Start reading: struct ladder, then ladder_load().
 */
#ifndef GATE_LADDER_H
#define GATE_LADDER_H

#include <jansson.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/exec.h"
#include "engine/synth.h"
#include "faults/fault.h"
#include "receipts/cellkey.h"
#include "receipts/receipt.h"

#define LADDER_ID_MAX 64
#define LADDER_MAX_TRUST 16
/* Bounds (issue 11): a ladder that exceeds one fails fast with a message, it never runs for
 * minutes or exhausts memory. */
#define LADDER_FILE_MAX (1 << 20)  /* bytes of the ladder file */
#define LADDER_MAX_DEPTH 32        /* nesting of YAML collections */
#define LADDER_MAX_ENTRIES 4096    /* entries of any one YAML mapping or list */
#define LADDER_MAX_CELLS 4096      /* expanded cells, required and excluded together */
#define LADDER_TRUST_FILE_MAX 4096 /* bytes of a `file:NAME.pub` trusted key file */

struct ladder_model {
    char id[LADDER_ID_MAX];
    char *path;      /* GGUF path (resolved against the ladder's folder), or the synth output */
    int synth;       /* 1: written by gate from the spec below */
    char preset[32]; /* synth preset */
    char quant[16];  /* synth quant */
    uint64_t seed;   /* synth seed */
    /* synth hyperparameter overrides of the preset (0: the preset's): RMSNorm epsilon and RoPE
     * base, the numbers only the file's metadata carries (docs/ladder.md, "Models"), as the f32
     * the file holds: two specs are one file exactly when these are equal */
    float eps, rope_base;
    char sha256[65]; /* pinned digest, lower-case hex */
    char arch[16];   /* expected architecture: qwen3 or qwen3moe */
    int line;
};

/* An engine gate did not build (docs/exec.md), as the top-level `engines:` section declares it;
 * modes exec.<name>.<path> name it. */
struct ladder_engine {
    struct exec_engine e; /* argv strings owned here; argv[0] resolved against the ladder's folder
                           * when it is relative and contains '/' */
    char *argv0;          /* argv[0] as written: the settings record the ladder's words, not a path
                           * that differs between hosts */
    int line, supports_line, supports_col;
};

struct ladder_host {
    char id[LADDER_ID_MAX];
    int gpu;               /* 1 when a device is declared */
    char device_name[128]; /* expected GPU name */
    char compute_capability[16];
    double min_memory_gib;
    int n_trust;
    unsigned char trust[LADDER_MAX_TRUST][32]; /* Ed25519 public keys trusted for this host */
    int line;
};

/* A cell's resolved gate settings. The defaults, bounds and receipt keys of every numeric
 * setting are rows of the gate table (harness/gatedef.c); these fields are their typed views. */
struct ladder_gates {
    /* parity */
    int positions;
    double min_cosine, max_mean_kld, max_kld, near_tie, route_tie, max_rel_l2, max_mean_rel_l2;
    double max_forced;      /* parity: the forced layers' bound */
    char loose_reason[201]; /* parity: why its thresholds may sit loose ("" = none stated) */
    int span;               /* parity: the generated sequence's length (0 = positions) */
    /* golden */
    char goldens[512];       /* goldens file (resolved); "" = none declared */
    char goldens_sha256[65]; /* its pinned digest ("" only when no file is declared) */
    int golden_tokens;       /* greedy tokens per prompt */
    double golden_near_tie;  /* judge margin below which a greedy flip is a TIE_FLIP */
    /* throughput */
    int runs, warmup, prompt_tokens, decode_tokens, max_runs, check_positions;
    double min_prefill_tps, min_decode_tps, max_seconds, max_wait, max_regression;
    char baseline[65]; /* "", "previous" or a receipt hash (harness/baseline.h) */
    /* falsify */
    struct fault_set falsify;
    int sweep_samples;    /* sampled single-layer x single-position injections per kind */
    double min_detection; /* least detection rate per kind over those samples */
    double power_factor;  /* the power probe's scale (oracles/falsify.h) */
    int power_layers;     /* its layers per tensor */
    /* consistency (oracles/consistency.h): run on a cell only when the ladder names the gate */
    int consistency; /* 1: the cell's gates include consistency */
    int cons_positions, cons_repeats;
    double cons_max_abs;
    /* exec cells: the engine the mode names (borrowed from the ladder); NULL otherwise. Its
     * argv, timeout and supports are part of every gate's recorded settings */
    const struct ladder_engine *engine;
    /* the cell's identity settings (CELL_SETTINGS rows: kv, isa, prefill; from struct ladder_cell):
     * recorded in every cell gate's settings when not the default (cell_variant_settings), so a
     * receipt made under other settings does not match the ladder at release check */
    struct cell_variant v;
};

struct ladder_cell {
    int model;             /* index into models */
    int host;              /* index into hosts */
    char mode[32];         /* "<backend>.<path>" */
    struct cell_variant v; /* the cells entry's `kv` and `isa` (defaults: f32, the backend's
                            * best): part of the cell's identity (receipts/cellkey.h) — two cells
                            * that differ only here are two required cells with their own
                            * receipts; every gate opens the subject with them */
    int line, col; /* where the ladder lists the cell (its mode in the cells entry), 1-based: the
                    * position of check-time errors about the cell's resolved settings */
    struct ladder_gates g;
};

/* A cell a matrix entry's `exclude` removed: not required, but never invisible (issue 10 §3):
 * `gate ladder check`, the release matrix and the sign-off list it with its reason. */
struct ladder_excluded {
    int model; /* index into models */
    int host;  /* index into hosts */
    char mode[32];
    struct cell_variant v; /* the matrix entry's `kv` and `isa` (identity, as above) */
    char reason[256];      /* the first matching exclusion's reason */
    int line;              /* line of that exclusion in the ladder file */
};

/* A file the ladder pins: path resolved against the ladder's folder, SHA-256 lower-case hex. */
struct ladder_pin {
    char *path; /* owned; NULL when the optional file is absent */
    char sha256[65];
};

/* An anchor case: a model, its token ids and an independent engine's logits (and optionally its
 * greedy continuation), every file pinned, with the thresholds the judge must meet on it. */
struct ladder_anchor {
    char id[LADDER_ID_MAX];
    char arch[16];       /* the architecture it anchors: qwen3 or qwen3moe */
    char reference[256]; /* who computed the reference (not gate), for reports */
    struct ladder_pin model, tokens, logits;
    struct ladder_pin greedy; /* greedy.path NULL: no greedy continuation */
    int greedy_after;         /* prompt tokens before the greedy continuation */
    double max_nmse, min_cosine, near_tie;
    int line;
};

/* An architecture the ladder gates without an anchor, and why (shown in every report). */
struct ladder_unanchored {
    char arch[16];
    char reason[256];
    int line;
};

struct ladder {
    char *path;
    char *dir;       /* folder of the ladder file, for relative paths */
    char sha256[65]; /* of the ladder file's bytes */
    char name[64], version[32];
    int n_models, n_hosts, n_cells;
    struct ladder_model *models;
    struct ladder_host *hosts;
    struct ladder_cell *cells;
    /* anchors (issue 10 §1): the judge on trial, per architecture; see struct ladder_anchor */
    int n_anchors;
    struct ladder_anchor *anchors;
    int n_unanchored;
    struct ladder_unanchored *unanchored;
    /* SHA-256 (lower-case hex) over the sorted lines "HOST ed25519:HEX\n", one per trusted key
     * of every host, keys from `file:` entries resolved: binds the trusted keys into the
     * ladder's identity even when they live outside the ladder file */
    char trust_sha256[65];
    /* cells removed by `exclude` (never required, always shown), in expansion order */
    int n_excluded;
    struct ladder_excluded *excluded;
    /* engines gate did not build (docs/exec.md), in file order */
    int n_engines;
    struct ladder_engine *engines;
};

/* Parse and validate path. Errors are ERR_INPUT with "file:line:column: what, expected what".
 * The file is read once through one descriptor (engine/pin.h): a regular file of at most
 * LADDER_FILE_MAX bytes; YAML aliases are refused and nesting is bounded (LADDER_MAX_DEPTH)
 * before the document is built; the expansion is bounded (LADDER_MAX_CELLS) before a matrix is
 * expanded. Refused too: a ladder with no required cell, and a model whose every cell is
 * excluded. Trusted key files (`file:NAME.pub`) resolve inside the ladder's folder only (no
 * absolute path, no "..", no symlink), must be regular files of at most LADDER_TRUST_FILE_MAX
 * bytes holding one key, and their content is never quoted in a message. */
int ladder_load(struct ladder **out, const char *path, struct gate_err *err);
void ladder_free(struct ladder *l);

/* The positions a cell's falsify gate judges, known from the ladder: parity.positions on the
 * decode and prefill paths; -1 on the chat path (the conversation's length comes from the model).
 */
int ladder_cell_fault_positions(const struct ladder_cell *c);

/* Index of an engine of the `engines:` section, or -1. */
int ladder_find_engine(const struct ladder *l, const char *name);

/* Index of a host / model id, or -1. */
int ladder_find_host(const struct ladder *l, const char *id);
int ladder_find_model(const struct ladder *l, const char *id);

/* The identity of cell i / excluded cell i (strings borrowed from l). */
struct cell_key ladder_cell_key(const struct ladder *l, int i);
struct cell_key ladder_excluded_key(const struct ladder *l, int i);
/* Row i of the cells followed by the excluded cells (i < n_cells: cell i; else excluded
 * i - n_cells): the order the release matrix and the reports list them. */
struct cell_key ladder_row_key(const struct ladder *l, int i);

/* A report column of key k: "host/mode" plus its identity suffix ("ci-cpu/cpu.decode+kv=f16"),
 * so cells that differ only in identity settings are columns of their own. */
const char *ladder_column_name(const struct cell_key *k, char *buf, size_t n);

/* The name of cell i ("tiny/ci-cpu/cpu.decode", "tiny/ci-cpu/cpu.decode+kv=f16+isa=avx2";
 * cell_key_name) into buf: the name receipts, reports and --only patterns use. */
const char *ladder_cell_name(const struct ladder *l, int i, char *buf, int n);

/* The name of excluded cell i into buf (the same rule). */
const char *ladder_excluded_name(const struct ladder *l, int i, char *buf, int n);

/* The oracles' config structs of a cell's settings: gatedef_config() (harness/gatedef.h), one
 * filler over the gate table's rows for `gate run` and the ladder check alike. */

/* The fault kinds the cell's falsify gate injects into the judge instead of the engine (falsify
 * by proxy, per kind; bit 1 << enum fault_kind each): for an exec engine, the kinds the gate uses
 * (falsify_kinds_used: its faults and scale, the power probe) that the engine does not take —
 * every one when its supports lack faults, those outside its `faults:` list when it has one.
 * 0 for gate's own engines and for an engine with faults and no list. Every report says so. */
unsigned ladder_falsify_proxy_kinds(const struct ladder_gates *g);

/* 1 when some kind of the cell's falsify gate goes by proxy (ladder_falsify_proxy_kinds != 0). */
int ladder_falsify_by_proxy(const struct ladder_gates *g);

/* The proxied kinds' names into buf ("scale, kv_corrupt"; "" for none); returns 0 none, 1 every
 * kind the gate uses (the engine takes no faults), 2 some (partial proxy). */
int ladder_falsify_proxy_text(const struct ladder_gates *g, char *buf, size_t n);

/* The settings of one gate ("capability", "parity", "golden", "throughput", "falsify") as
 * recorded in a receipt; the release check compares a receipt's copy with this (new ref). */
json_t *ladder_gate_settings(const struct ladder_gates *g, const char *gate);

/* The modes every build knows (settled question 3). */
int ladder_mode_known(const char *mode);

/* Index of an anchor id, or -1. */
int ladder_find_anchor(const struct ladder *l, const char *id);

/* Every architecture a model of the ladder has must have an anchor or an `unanchored` entry with
 * a reason: ERR_INPUT "file:line:col: ..." naming the architecture and the first model that has
 * it. `gate ladder check`, `gate run` and the release check refuse a ladder that fails it
 * (ladder_load() parses anchors but does not call it, so ladders written before anchors still
 * load for the other commands' tests). */
int ladder_check_anchored(const struct ladder *l, struct gate_err *err);

/* The `unanchored` reason for arch, or NULL when the architecture is anchored or not gated. */
const char *ladder_unanchored_reason(const struct ladder *l, const char *arch);

/* The golden gate's file rule for cell ci, the one copy `ladder check` and the run both use:
 * the cell declares a goldens file (the golden gate runs on every cell; without one it cannot
 * pass) and pins it by golden.sha256 (the message gives the file's digest when it exists).
 * ERR_INPUT "file:line:col: cell NAME: ..." at the cell's position. */
int ladder_cell_goldens_check(const struct ladder *l, int ci, struct gate_err *err);

/* What `gate ladder check`, `gate run` and `gate release check` require beyond parsing:
 * ladder_check_anchored(), and ladder_cell_goldens_check() for every cell. `gate golden record`
 * needs neither (it writes the goldens file the ladder declares). ERR_INPUT. */
int ladder_check_runnable(const struct ladder *l, struct gate_err *err);

/* Make sure model lm's file exists: a `synth:` model missing from the cache (.gate-cache/ next to
 * the ladder) is written by the deterministic synthesizer (threads workers, progress as
 * synth_write takes it); a file that exists, or a `path:` model, is left alone. *written (may be
 * NULL) says whether a file was synthesized. ERR_INPUT unknown preset/quant, ERR_ENV I/O. The one
 * synth-on-demand of gate run and gate golden record. */
int ladder_model_ensure(const struct ladder_model *lm, int threads, synth_progress_fn progress,
                        void *ctx, int *written, struct gate_err *err);

/* The files a ladder names, checked before anything runs (issue 16): every synth model's preset
 * and quant are known and its preset's architecture is the declared arch; every `path:` model
 * file exists and its GGUF metadata's general.architecture (metadata only, no tensor data) is the
 * declared arch; every declared goldens file exists. ERR_INPUT "file:line:col: ..." naming the
 * model or cell; then ladder_check_golden_entries() for every host. Synthetic model files need
 * not exist yet (gate run writes them). Called after ladder_check_runnable() by `gate ladder
 * check` and `gate run` (the release check needs no model or goldens file: it judges signed
 * numbers against the ladder's pins). */
int ladder_check_files(const struct ladder *l, struct gate_err *err);

/* The RMSNorm epsilon and RoPE base model i is run with: its synth preset's with the spec's
 * overrides, or its file's metadata (no tensor data read). 0, or ERR_INPUT / ERR_ENV with the
 * reason (a `path:` file that cannot be read, metadata without the keys). */
int ladder_model_hparams(const struct ladder *l, int i, double *eps, double *rope_base,
                         struct gate_err *err);

/* The engines (a mode without its path: cpu, cuda, exec.NAME; never ref, the judge itself) this
 * ladder cannot catch hard-coding a hyperparameter only the metadata carries: every model of the
 * engine's cells has one RMSNorm epsilon, or one RoPE base (docs/ladder.md, "Hyperparameters off
 * the usual values"). Returns how many; why (n bytes) gets one sentence per engine, naming it and
 * the value, separated by newlines. Models whose values cannot be read are left out. `gate
 * ladder check` prints each as a warning. */
int ladder_hparams_uniform(const struct ladder *l, char *why, size_t n);

/* The position an engine's cells should judge past: 2048, the default context of many engines
 * (a RoPE table, a KV cache or a score buffer sized for it fails only after it). */
#define LADDER_SPAN_REACH 2048

/* The engines (as ladder_hparams_uniform) whose cells all judge parity within the first
 * LADDER_SPAN_REACH positions although a model of theirs has a longer context: a bug at a later
 * position passes every gate. Returns how many; why (n bytes) gets one sentence per engine,
 * separated by newlines. `gate ladder check` prints each as a warning. */
int ladder_span_short(const struct ladder *l, char *why, size_t n);

/* The real models' counts an engine's cells should reach: a vocabulary past 16-bit token ids
 * (Qwen3's is 151,936), and for MoE models more experts than a 64-bit mask holds and eight a
 * token (qwen3-30b-a3b: 128, top-8). */
#define LADDER_VOCAB_REACH 65536
#define LADDER_EXPERTS_REACH 64
#define LADDER_TOPK_REACH 8

/* The engines (as ladder_hparams_uniform) whose models all have a vocabulary of at most
 * LADDER_VOCAB_REACH tokens, or, among their MoE models, at most LADDER_EXPERTS_REACH experts or
 * fewer than LADDER_TOPK_REACH a token: a bug sized for the small counts passes every gate.
 * Returns how many; why (n bytes) gets one sentence per engine, separated by newlines. Counts
 * that cannot be read are left out. `gate ladder check` prints each as a warning. */
int ladder_counts_small(const struct ladder *l, char *why, size_t n);

/* The goldens of cell ci for the model digest model_sha, read as the golden gate reads them (its
 * one copy; `gate run`'s golden gate and the check below both call it): the cell's goldens rule
 * (ladder_cell_goldens_check), the file opened once and checked against its pin, the model's
 * entry loaded and validated (golden_load_buf) from those bytes, and its n_gen equal to
 * gates.golden.tokens (what the golden judge requires). set is filled (free with
 * golden_set_free; zeroed on error). ERR_INPUT / ERR_ENV with the reason. */
struct golden_set;
int ladder_cell_goldens_load(const struct ladder *l, int ci, const char *model_sha,
                             struct golden_set *set, struct gate_err *err);

/* Every cell of host (-1: every host) that declares a goldens file (declaring one is
 * ladder_check_runnable's rule) loads its goldens through ladder_cell_goldens_load() for its
 * model's pinned SHA-256. ladder_check_files() calls it for every host, so `gate ladder
 * check` and `gate run` refuse a goldens file whose bytes are not the pin, that holds no valid
 * entry for a cell's model, or whose token count is not the cell's, before any receipt is
 * written: an input error (exit 2), never a signed FAIL. ERR_INPUT naming the cell, the model,
 * the file and the fix (gate golden record). */
int ladder_check_golden_entries(const struct ladder *l, int host, struct gate_err *err);

#endif
