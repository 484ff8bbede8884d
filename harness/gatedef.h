/* gatedef.h — the gate table: one row per gate (name, settings schema with defaults and bounds,
 * the judge that turns settings + metrics into checks and a verdict), like redis's
 * static_configs[]: the ladder parses, defaults and records settings from these rows, and
 * `gate run`, `gate receipt show/verify` and `gate release check` all judge through them.
 * Adding a gate: one row here, its judge next to its oracle, its run in harness/run.c.
 * Start reading: GATE_DEFS in gatedef.c.
 */
#ifndef GATE_GATEDEF_H
#define GATE_GATEDEF_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "base/err.h"
#include "oracles/gates.h"

enum gate_setting_type {
    GS_INT,      /* an integer within [lo, hi] */
    GS_NUM,      /* a finite number within [lo, hi] */
    GS_SHA256,   /* 64 lower-case hex digits (a file pin); "" when not declared */
    GS_BASELINE, /* "previous", or a receipt hash (64 lower-case hex); "" when not declared */
    GS_TEXT,     /* free text of 1..200 characters (a stated reason); "" when not declared */
};

/* One setting: the ladder key `gates.<gate>.<key>`, the key the receipt records and the flag
 * `--<key with - for _>` of the command that runs the gate outside a ladder. Its default and
 * bounds are written here only: the ladder's cells, the oracle's config struct (gatedef_config)
 * and the command's flags (gatedef_flag) all take them from the row. */
struct gate_setting {
    const char *key;
    enum gate_setting_type type;
    size_t offset; /* into struct ladder_gates: int, double, char[65] or (GS_TEXT) char[201] */
    size_t cfg;    /* into the gate's oracle config struct (struct gate_def.cfg_size), of the
                    * same type (int or double); GS_NOCFG: the setting is not one of its fields */
    double dflt, lo, hi;
    const char *doc;
};
#define GS_NOCFG ((size_t)-1)

/* A setting whose default and lower bound the command that runs the gate outside a ladder (gate
 * bench) deliberately takes otherwise (documented in its usage and in docs/ladder.md): the
 * command's flag and its config (gatedef_config with cmd 1) use these; the ladder never does. */
struct gate_cmd_setting {
    const char *cmd; /* the command ("bench": `gate bench`) */
    const char *key; /* a row of the gate's settings */
    double dflt, lo;
    const char *why;
};

struct ladder_gates;

/* A gate's settings rules beyond each setting's bounds, decided from a cell's resolved settings
 * and its mode alone (a combination that cannot run): 0 or ERR_INPUT with the reason. */
typedef int (*gate_settings_check_fn)(const struct ladder_gates *g, const char *mode,
                                      struct gate_err *err);

struct gate_def {
    const char *name;
    const struct gate_setting *settings; /* terminated by a row with key NULL */
    gate_judge_fn judge;
    int check_ran; /* the gate runs the subject: its metrics record what ran */
    int cell_gate; /* run on every cell (anchor is run per anchor case instead) */
    const char *proves;
    /* NULL, or the oracle's own config check (the function its run calls before anything runs)
     * over the config the run builds from the cell (ladder_*_config): ladder_load refuses a
     * cell it rejects at file:line:col, so `gate run` never signs a FAIL for an input error */
    gate_settings_check_fn check;
    /* the oracle's config struct the rows' cfg offsets index (struct parity_config, ...; 0 when
     * the gate has none), and the fields of it that are not this gate's rows (another gate's
     * settings, the engine's proxy kinds), set after the rows by link (NULL: none) */
    size_t cfg_size;
    void (*link)(const struct ladder_gates *g, void *cfg);
    const struct gate_cmd_setting *cmd; /* NULL, or terminated by a row with key NULL */
    /* the keys of the gate's ladder section that are not settings rows (NULL-terminated; NULL:
     * none): golden's `goldens` file, falsify's `faults` list. The section takes these and its
     * rows' keys, nothing else */
    const char *const *section_keys;
};

/* Every gate, cell gates first in the order `gate run` runs them; terminated by name NULL.
 * GATE_DEFS[id] is gate `id`: the run, the reports and the receipt printers index their own
 * per-gate tables (a runner, a drawer) by it, each held to GATE_COUNT by a static assertion, so
 * adding a gate is one row here, one id, one oracle file, and the compiler names every table
 * that lacks its entry (issue 24 §3). */
enum gate_id {
    GATE_ID_CAPABILITY,
    GATE_ID_PARITY,
    GATE_ID_GOLDEN,
    GATE_ID_THROUGHPUT,
    GATE_ID_FALSIFY,
    GATE_ID_CONSISTENCY,
    GATE_ID_ANCHOR,
    GATE_COUNT
};
extern const struct gate_def GATE_DEFS[];

/* The row named name, or NULL. */
const struct gate_def *gatedef_find(const char *name);

/* Row d's settings check for a cell (g, mode): 0 when d has none, else d->check's status (a
 * gate the cell does not run, consistency where the ladder does not name it, passes). */
int gatedef_check(const struct gate_def *d, const struct ladder_gates *g, const char *mode,
                  struct gate_err *err);

/* Row `key` of gate id's settings, or NULL. */
const struct gate_setting *gatedef_setting(enum gate_id id, const char *key);

/* The command's own row for setting s of gate id (struct gate_cmd_setting), or NULL. */
const struct gate_cmd_setting *gatedef_cmd_setting(enum gate_id id, const struct gate_setting *s);

/* The default of setting `key` of gate `gate` (its row); NaN when there is no such row. */
double gatedef_default(const char *gate, const char *key);

/* Fill cfg, the oracle config struct of gate id (size bytes: sizeof of struct parity_config,
 * throughput_config, falsify_config or consistency_config; another size is a broken invariant and
 * aborts), the one filler of every oracle config: zeroed, then every row of the gate with a cfg
 * field set from g (a cell's resolved settings) or, g NULL, from the row's default (cmd 1: the
 * command's own default where the row has one), then the row's link. What `gate run` hands its
 * oracle, what the ladder check judges and what `gate parity/falsify/bench` start from. */
void gatedef_config(enum gate_id id, const struct ladder_gates *g, int cmd, void *cfg, size_t size);

/* The typed views of gatedef_config (g NULL: the defaults; cmd 0). */
struct parity_config;
struct throughput_config;
struct falsify_config;
struct consistency_config;
void gatedef_parity_config(const struct ladder_gates *g, struct parity_config *c);
void gatedef_throughput_config(const struct ladder_gates *g, struct throughput_config *c);
void gatedef_falsify_config(const struct ladder_gates *g, struct falsify_config *c);
void gatedef_consistency_config(const struct ladder_gates *g, struct consistency_config *c);

/* The settings table of docs/ladder.md, generated from the rows (every key, default, bounds,
 * meaning, and a command's own default and lower bound), as Markdown on f: `gate ladder
 * settings` prints it and tests/test_gatedef.c holds the doc's copy to it. */
void gatedef_settings_markdown(FILE *f);

/* The one flag parser of the commands that run a gate outside a ladder (gate parity, falsify,
 * bench): when argv[*i] is `--KEY` for a row of gate id with a cfg field (KEY the row's key, '_'
 * written '-'; skip: NULL or a NULL-terminated list of keys the command does not take this way),
 * its value (argv[*i + 1]; *i advances) is parsed with the row's type and bounds into cfg (the
 * gate's config struct, as gatedef_config) and 1 is returned; 0 when argv[*i] is no such flag;
 * -1 after printing "gate CMD: --FLAG ..." (a missing value, not a number, out of bounds) on
 * stderr. The bounds are the row's (the lower one the gate's cmd row's where it has one). */
int gatedef_flag(enum gate_id id, const char *cmd, const char *const *skip, int argc, char **argv,
                 int *i, void *cfg);

/* Judge one recorded gate: gate_judge_common() with the row's judge. mode is the cell's mode
 * ("ref.decode"); checks receives the checks (a new array the caller owns). An unknown gate name
 * is FAIL. */
enum gate_verdict gatedef_judge(const char *gate, const char *mode, const json_t *settings,
                                const json_t *metrics, json_t **checks, char *why, size_t n);

/* The gate object a receipt records: {"verdict", "settings", "metrics", "checks"} with the
 * verdict and checks from gatedef_judge(); takes ownership of settings and metrics. When error is
 * non-NULL it is recorded as metrics "error" (the gate could not run the subject: FAIL). */
json_t *gatedef_row(const char *gate, const char *mode, json_t *settings, json_t *metrics,
                    const char *error);

/* The overall verdict of a receipt's gates object: FAIL if any gate FAILs, else ERROR if any is
 * ERROR, else PASS; no gate at all is FAIL. verdicts are taken from the "verdict" members. */
enum gate_verdict gatedef_overall(const json_t *gates);

/* Judge every gate of a receipt payload again from its own recorded settings and metrics (the
 * audit view: `gate receipt show/verify`; the release check judges with the LADDER's settings
 * instead). mode is the payload's cell mode. *overall receives the re-derived verdict. Returns
 * 0 when every recorded verdict (per gate and overall) equals the re-derived one; ERR_RUNTIME
 * with the first disagreement in err otherwise; ERR_INPUT when the payload has no gates object. */
int gatedef_rejudge_payload(const json_t *payload, enum gate_verdict *overall,
                            struct gate_err *err);

#endif
