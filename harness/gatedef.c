/* gatedef.c — the gate table (see gatedef.h). Every default, bound and judge of a gate is in its
 * row here; harness/ladder.c parses settings from these rows, harness/run.c and
 * harness/release.c judge through gatedef_judge(). */
#include "harness/gatedef.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/ladder.h"
#include "oracles/mode.h"

/* The judges that live next to their oracles (referenced strongly: a judge can never be
 * missing from a binary that links the table). */
#include "oracles/anchor.h"
#include "oracles/consistency.h"
#include "oracles/falsify.h"
#include "oracles/golden.h"
#include "oracles/parity.h"
#include "oracles/throughput.h"

#define OFF(f) offsetof(struct ladder_gates, f)
/* the field of the gate's oracle config struct a row fills (gatedef_config) */
#define PAR(f) offsetof(struct parity_config, f)
#define THR(f) offsetof(struct throughput_config, f)
#define FAL(f) offsetof(struct falsify_config, f)
#define CON(f) offsetof(struct consistency_config, f)

static const struct gate_setting CAPABILITY[] = {{NULL}};

static const struct gate_setting PARITY[] = {
    {"positions", GS_INT, OFF(positions), PAR(positions), 96, 64, 1 << 20,
     "token positions judged; fewer than 64 is an error"},
    {"span", GS_INT, OFF(span), PAR(span), 0, 0, 1 << 20,
     "the generated sequence's length: `positions` positions spread over it are judged (one per"
     " equal stratum, the last included; which ones follows from the cell's name, recorded in the"
     " receipt), the subject and the judge still run every position; 0 = positions; shorter than"
     " positions is an error"},
    {"min_cosine", GS_NUM, OFF(min_cosine), PAR(min_cosine), 0.999, -1, 1,
     "every position's logit cosine must be at least this"},
    {"max_mean_kld", GS_NUM, OFF(max_mean_kld), PAR(max_mean_kld), 1e-3, 0, 1e9,
     "mean KL(ref || test) over positions, nats"},
    {"max_kld", GS_NUM, OFF(max_kld), PAR(max_kld), 1e-2, 0, 1e9, "every position's KL, nats"},
    {"near_tie", GS_NUM, OFF(near_tie), PAR(near_tie), 0.05, 0, 1e9,
     "logit gap below which an argmax flip is a TIE_FLIP (reported), not WRONG"},
    {"route_tie", GS_NUM, OFF(route_tie), PAR(route_tie), PARITY_ROUTE_TIE, 0, 1,
     "MoE: the router near tie (logits): where the subject's expert set differs from the judge's"
     " and both its router gap and the judge's deficit for that set are below it, the judge is"
     " replayed with the subject's set and every position judged; elsewhere a differing set"
     " FAILs"},
    {"max_rel_l2", GS_NUM, OFF(max_rel_l2), PAR(max_rel_l2), PARITY_MAX_REL_L2, 0, 1e9,
     "every position's relative L2 error of the centred logits (sees a uniform scale, which"
     " cosine cannot)"},
    {"loose_reason", GS_TEXT, OFF(loose_reason), GS_NOCFG, 0, 0, 0,
     "why a threshold may sit looser than its stated multiple of the backend's measured noise"
     " (docs/gates.md, \"Tolerances from noise\"); without it such a ladder is refused, with it"
     " the reason is shown in every report"},
    {"max_mean_rel_l2", GS_NUM, OFF(max_mean_rel_l2), PAR(max_mean_rel_l2), PARITY_MAX_MEAN_REL_L2,
     0, 1e9,
     "the mean of that error over the judged positions (sees a 1 % scale in a late layer, below"
     " the noise's per-position tail)"},
    {"max_forced", GS_NUM, OFF(max_forced), PAR(max_forced), PARITY_FORCED_MAX, 0, 1e9,
     "each layer of the subject run by the twin on the subject's own input (its claimed roundings"
     " emulated): the worst layer's error relative to what the layer adds must be at most this,"
     " its worst single (layer, position) row at most 1.5x it, the output head's at most 0.1x it"
     " (sees a 1 % error in one matmul where the logits' noise hides it; docs/gates.md \"Forced"
     " layers\")"},
    {NULL},
};

static const struct gate_setting GOLDEN[] = {
    {"tokens", GS_INT, OFF(golden_tokens), GS_NOCFG, 16, 1, 4096,
     "greedy tokens per prompt; must equal the recorded entry's `n_gen`"},
    {"near_tie", GS_NUM, OFF(golden_near_tie), GS_NOCFG, 0.05, 0, 1e9,
     "judge's top-1/top-2 margin below which a diverging greedy step is a TIE_FLIP"},
    {"sha256", GS_SHA256, OFF(goldens_sha256), GS_NOCFG, 0, 0, 0,
     "the goldens file's SHA-256 (required when `goldens` is set)"},
    {NULL},
};

static const struct gate_setting THROUGHPUT[] = {
    {"runs", GS_INT, OFF(runs), THR(runs), 6, THROUGHPUT_MIN_RUNS, THROUGHPUT_MAX_RUNS,
     "timed runs before the first decision (6 is the fewest with a 95% interval of the median)"},
    {"warmup", GS_INT, OFF(warmup), THR(warmup), 1, 0, 1000,
     "untimed runs first (counted in the receipt)"},
    {"prompt_tokens", GS_INT, OFF(prompt_tokens), THR(prompt_tokens), 64, 1, 1 << 20,
     "prompt length"},
    {"decode_tokens", GS_INT, OFF(decode_tokens), THR(decode_tokens), 16, 1, 1 << 20,
     "generated tokens"},
    {"min_prefill_tps", GS_NUM, OFF(min_prefill_tps), THR(min_prefill_tps), 0, 0, 1e12,
     "floor on the prompt rate, tokens/s: PASS when the median's 95% interval is above it, FAIL"
     " when the not-starved runs' interval is below it; 0 = no floor"},
    {"min_decode_tps", GS_NUM, OFF(min_decode_tps), THR(min_decode_tps), 0, 0, 1e12,
     "floor on the generation rate, tokens/s (as min_prefill_tps)"},
    {"max_runs", GS_INT, OFF(max_runs), THR(max_runs), 30, THROUGHPUT_MIN_RUNS, THROUGHPUT_MAX_RUNS,
     "budget: timed runs at most while the interval straddles a floor (>= runs)"},
    {"max_seconds", GS_NUM, OFF(max_seconds), THR(max_seconds), 20, 0.1, 3600,
     "budget: timed seconds at most (sum of the timed runs' wall time); spent and undecided is"
     " ERROR inconclusive / host starved, never FAIL"},
    {"max_wait", GS_NUM, OFF(max_wait), THR(max_wait), 0.25, 0.01, 1,
     "a run whose threads waited for a CPU more than this share of their demand is host-starved:"
     " no evidence that the engine is slow"},
    {"check_positions", GS_INT, OFF(check_positions), THR(check_positions), 2, 1,
     THROUGHPUT_MAX_CHECKS,
     "positions of every timed run checked against the judge (prompt and decode alternately)"},
    {"baseline", GS_BASELINE, OFF(baseline), GS_NOCFG, 0, 0, 0,
     "compare with: `previous` (newest PASS receipt of the cell, this host's key, the newest"
     " earlier release version) or a receipt hash; \"\" = no comparison"},
    {"max_regression", GS_NUM, OFF(max_regression), THR(max_regression), 0.05, 0, 0.99,
     "with a baseline: FAIL when the ratio to its median is confidently below 1 - this"},
    {NULL},
};

static const struct gate_setting FALSIFY[] = {
    {"sweep_samples", GS_INT, OFF(sweep_samples), FAL(sweep_samples), 4, 0, 4096,
     "sampled single-layer x single-position injections per fault kind"},
    {"min_detection", GS_NUM, OFF(min_detection), FAL(min_detection), 0.5,
     FALSIFY_MIN_DETECTION_FLOOR, 1,
     "least detection rate per fault kind over the sampled sweep (no-ops excluded); 0 is refused:"
     " a floor that cannot fail proves nothing (`gate falsify` takes the same default)"},
    {"power_factor", GS_NUM, OFF(power_factor), FAL(power_factor), FALSIFY_POWER_FACTOR, 1.0001,
     FALSIFY_POWER_FACTOR_MAX,
     "the power probe: every matmul tensor a uniform scale reaches the logits through, scaled by"
     " this at power_layers layers (the last among them), and the output matrix, must each be"
     " rejected by the cell's parity thresholds"},
    {"power_layers", GS_INT, OFF(power_layers), FAL(power_layers), FALSIFY_POWER_LAYERS, 1, 16,
     "layers per tensor of the power probe (the last layer and others from a fixed stream)"},
    {NULL},
};

/* Run on a cell only when its ladder names the gate (gates.defaults or an override):
 * `consistency: {}` takes these defaults. */
static const struct gate_setting CONSISTENCY[] = {
    {"positions", GS_INT, OFF(cons_positions), CON(positions), 64, 16, 1 << 16,
     "tokens of the sequence every variant runs"},
    {"repeats", GS_INT, OFF(cons_repeats), CON(repeats), 2, 1, 64,
     "runs per thread count (1, 2, 3): a race shows as two runs that differ"},
    {"max_abs", GS_NUM, OFF(cons_max_abs), CON(max_abs), 1e-3, 0, 1,
     "largest |logit difference| from the decode run for a backend that does not declare"
     " bit-identical paths (bitwise backends: 0)"},
    {NULL},
};

static const struct gate_setting ANCHOR[] = {{NULL}};

/* the section keys that are not settings rows (struct gate_def.section_keys) */
static const char *const GOLDEN_KEYS[] = {"goldens", NULL};
static const char *const FALSIFY_KEYS[] = {"faults", NULL};

/* gate bench's own: a longer decode by default (a steadier decode rate for a person reading
 * it), and one run allowed (a quick look: no interval, no verdict with a floor) */
static const struct gate_cmd_setting THROUGHPUT_BENCH[] = {
    {"bench", "decode_tokens", 32, 1, "a steadier decode rate to read"},
    {"bench", "runs", 6, 1, "one run is a quick look (the gate's interval needs 3)"},
    {"bench", "max_runs", 30, 1, "as runs"},
    {NULL, NULL, 0, 0, NULL},
};

/* ---- the links: fields of an oracle's config that are not its own gate's rows ------------- */

static void throughput_link(const struct ladder_gates *g, void *cfg)
{
    struct throughput_config *t = cfg;
    struct parity_config p; /* the spot checks of timed runs use the cell's parity rule */
    gatedef_parity_config(g, &p);
    t->check_min_cosine = p.min_cosine;
    t->check_near_tie = p.near_tie;
    t->check_route_tie = p.route_tie;
    t->baseline = g ? g->baseline : NULL;
}

static void falsify_link(const struct ladder_gates *g, void *cfg)
{
    struct falsify_config *f = cfg;
    gatedef_parity_config(g, &f->parity); /* the thresholds under test: the cell's parity */
    f->parity.span = 0; /* falsify re-runs the subject per fault: the first `positions` only */
    f->n_clean = FALSIFY_CLEAN_RUNS;
    /* the kinds the engine cannot take: falsify by proxy, per kind, recorded as such */
    f->proxy_kinds = g ? ladder_falsify_proxy_kinds(g) : 0;
}

/* ---- the rows' settings checks: the oracle's own check over the config the run builds ------- */

static int parity_check(const struct ladder_gates *g, const char *mode, struct gate_err *err)
{
    (void)mode;
    struct parity_config p;
    gatedef_parity_config(g, &p);
    return parity_config_check(&p, err);
}

static int throughput_check(const struct ladder_gates *g, const char *mode, struct gate_err *err)
{
    struct throughput_config t;
    struct mode m;
    gatedef_throughput_config(g, &t);
    int rc = mode_parse(mode, &m, err);
    return rc ? rc : throughput_config_check(&t, m.path, err);
}

static int falsify_check(const struct ladder_gates *g, const char *mode, struct gate_err *err)
{
    (void)mode;
    struct falsify_config f;
    gatedef_falsify_config(g, &f);
    return falsify_config_check(&f, err);
}

int gatedef_check(const struct gate_def *d, const struct ladder_gates *g, const char *mode,
                  struct gate_err *err)
{
    return d->check ? d->check(g, mode, err) : 0;
}

const struct gate_def GATE_DEFS[] = {
    {"capability", CAPABILITY, capability_gate_judge, 1, 1,
     "the mode's backend ran, on the device class the mode names (counters measured)", NULL, 0,
     NULL, NULL, NULL},
    {"parity", PARITY, parity_gate_judge, 1, 1,
     "the mode's logits match the judge's at every position within the thresholds", parity_check,
     sizeof(struct parity_config), NULL, NULL, NULL},
    {"golden", GOLDEN, golden_judge, 1, 1,
     "greedy continuations reproduce the recorded ids (TIE_FLIP at near ties)", NULL, 0, NULL, NULL,
     GOLDEN_KEYS},
    {"throughput", THROUGHPUT, throughput_judge, 1, 1,
     "the mode's own path meets the rate floors (95% interval of the median of fresh, checked "
     "runs)",
     throughput_check, sizeof(struct throughput_config), throughput_link, THROUGHPUT_BENCH, NULL},
    {"falsify", FALSIFY, falsify_judge, 1, 1,
     "injected faults are rejected by the parity math (the oracle is not blind)", falsify_check,
     sizeof(struct falsify_config), falsify_link, NULL, FALSIFY_KEYS},
    {"consistency", CONSISTENCY, consistency_judge, 1, 0,
     "the engine's declared invariances hold: decode = prefill = chunked (7, 45) = resumed, the"
     " same at 1, 2 and 3 threads repeated, under every instruction set it declares (bit for bit"
     " where it declares so)",
     NULL, sizeof(struct consistency_config), NULL, NULL, NULL},
    {"anchor", ANCHOR, anchor_judge, 0, 0,
     "the judge itself matches an independent reference (anchor cases)", NULL, 0, NULL, NULL, NULL},
    {NULL},
};
_Static_assert(sizeof GATE_DEFS / sizeof GATE_DEFS[0] == GATE_COUNT + 1,
               "GATE_DEFS: one row per enum gate_id, in its order (tests/test_gates.c checks the"
               " names)");

const struct gate_setting *gatedef_setting(enum gate_id id, const char *key)
{
    for (const struct gate_setting *s = (unsigned)id < GATE_COUNT ? GATE_DEFS[id].settings : NULL;
         s && s->key; s++)
        if (!strcmp(s->key, key))
            return s;
    return NULL;
}

const struct gate_cmd_setting *gatedef_cmd_setting(enum gate_id id, const struct gate_setting *s)
{
    const struct gate_cmd_setting *c = (unsigned)id < GATE_COUNT ? GATE_DEFS[id].cmd : NULL;
    for (; c && c->key && s; c++)
        if (!strcmp(c->key, s->key))
            return c;
    return NULL;
}

double gatedef_default(const char *gate, const char *key)
{
    const struct gate_def *d = gatedef_find(gate);
    for (const struct gate_setting *s = d ? d->settings : NULL; s && s->key; s++)
        if (!strcmp(s->key, key))
            return s->dflt;
    return NAN;
}

/* A default or bound as the docs write it: whole numbers below 10^7 in full, others with %g. */
static const char *num_text(double v, char *buf, size_t n)
{
    if (v == floor(v) && fabs(v) < 1e7)
        snprintf(buf, n, "%.0f", v);
    else
        snprintf(buf, n, "%g", v);
    return buf;
}

void gatedef_config(enum gate_id id, const struct ladder_gates *g, int cmd, void *cfg, size_t size)
{
    if ((unsigned)id >= GATE_COUNT || !GATE_DEFS[id].cfg_size || size != GATE_DEFS[id].cfg_size)
        abort(); /* a config struct that is not the gate's: our own invariant */
    const struct gate_def *d = &GATE_DEFS[id];
    memset(cfg, 0, size);
    for (const struct gate_setting *s = d->settings; s->key; s++) {
        if (s->cfg == GS_NOCFG)
            continue;
        char *to = (char *)cfg + s->cfg;
        const char *from = g ? (const char *)g + s->offset : NULL;
        const struct gate_cmd_setting *c = cmd ? gatedef_cmd_setting(id, s) : NULL;
        const double v = c ? c->dflt : s->dflt;
        if (s->type == GS_INT)
            *(int *)to = from ? *(const int *)from : (int)v;
        else if (s->type == GS_NUM)
            *(double *)to = from ? *(const double *)from : v;
        else
            abort(); /* a text setting has no typed field (GS_NOCFG) */
    }
    if (d->link)
        d->link(g, cfg);
}

void gatedef_parity_config(const struct ladder_gates *g, struct parity_config *c)
{
    gatedef_config(GATE_ID_PARITY, g, 0, c, sizeof *c);
}

void gatedef_throughput_config(const struct ladder_gates *g, struct throughput_config *c)
{
    gatedef_config(GATE_ID_THROUGHPUT, g, 0, c, sizeof *c);
}

void gatedef_falsify_config(const struct ladder_gates *g, struct falsify_config *c)
{
    gatedef_config(GATE_ID_FALSIFY, g, 0, c, sizeof *c);
}

void gatedef_consistency_config(const struct ladder_gates *g, struct consistency_config *c)
{
    gatedef_config(GATE_ID_CONSISTENCY, g, 0, c, sizeof *c);
}

int gatedef_flag(enum gate_id id, const char *cmd, const char *const *skip, int argc, char **argv,
                 int *i, void *cfg)
{
    const char *a = argv[*i];
    if ((unsigned)id >= GATE_COUNT || strncmp(a, "--", 2))
        return 0;
    const struct gate_setting *s = GATE_DEFS[id].settings;
    for (; s->key; s++) {
        if (s->cfg == GS_NOCFG || strlen(s->key) != strlen(a + 2))
            continue;
        int same = 1;
        for (size_t k = 0; same && s->key[k]; k++)
            same = a[2 + k] == (s->key[k] == '_' ? '-' : s->key[k]);
        int skipped = 0;
        for (const char *const *q = skip; q && *q && !skipped; q++)
            skipped = !strcmp(*q, s->key);
        if (same && !skipped)
            break;
    }
    if (!s->key)
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "gate %s: %s needs a value\n", cmd, a);
        return -1;
    }
    const char *v = argv[++*i];
    const struct gate_cmd_setting *c = gatedef_cmd_setting(id, s);
    const double lo = c ? c->lo : s->lo;
    char *end;
    errno = 0;
    const double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x) || (s->type == GS_INT && x != floor(x))) {
        fprintf(stderr, "gate %s: %s takes %s, not '%s'\n", cmd, a,
                s->type == GS_INT ? "an integer" : "a finite number", v);
        return -1;
    }
    if (x < lo || x > s->hi) {
        char l[32], h[32];
        fprintf(stderr, "gate %s: %s must be in [%s, %s], found %s\n", cmd, a,
                num_text(lo, l, sizeof l), num_text(s->hi, h, sizeof h), v);
        return -1;
    }
    char *to = (char *)cfg + s->cfg;
    if (s->type == GS_INT)
        *(int *)to = (int)x;
    else
        *(double *)to = x;
    return 1;
}

void gatedef_settings_markdown(FILE *f)
{
    fprintf(f, "| gate | key | default | bounds | meaning |\n|---|---|---|---|---|\n");
    for (int id = 0; id < GATE_COUNT; id++) {
        const struct gate_def *d = &GATE_DEFS[id];
        for (const struct gate_setting *s = d->settings; s->key; s++) {
            char dflt[32] = "none", lo[32], hi[32], bounds[96];
            if (s->type == GS_INT || s->type == GS_NUM) {
                num_text(s->dflt, dflt, sizeof dflt);
                snprintf(bounds, sizeof bounds, "%s to %s", num_text(s->lo, lo, sizeof lo),
                         num_text(s->hi, hi, sizeof hi));
            } else {
                snprintf(bounds, sizeof bounds, "%s",
                         s->type == GS_TEXT     ? "1 to 200 characters"
                         : s->type == GS_SHA256 ? "64 lower-case hex digits"
                                                : "`previous` or a receipt hash");
            }
            fprintf(f, "| %s | `%s` | %s | %s | ", s == d->settings ? d->name : "", s->key, dflt,
                    bounds);
            for (const char *t = s->doc; *t; t++) /* a '|' of the text is not a column */
                fputs(*t == '|' ? "\\|" : (char[2]){*t, 0}, f);
            const struct gate_cmd_setting *c = gatedef_cmd_setting((enum gate_id)id, s);
            if (c) {
                char flag[64];
                snprintf(flag, sizeof flag, "%s", s->key);
                for (char *u = strchr(flag, '_'); u; u = strchr(u, '_'))
                    *u = '-';
                fprintf(f, "; `gate %s --%s` defaults to %s, from %s: %s", c->cmd, flag,
                        num_text(c->dflt, dflt, sizeof dflt), num_text(c->lo, lo, sizeof lo),
                        c->why);
            }
            fprintf(f, " |\n");
        }
    }
}

const struct gate_def *gatedef_find(const char *name)
{
    for (int i = 0; name && GATE_DEFS[i].name; i++)
        if (!strcmp(GATE_DEFS[i].name, name))
            return &GATE_DEFS[i];
    return NULL;
}

static enum gate_verdict no_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                                  char *why, size_t n)
{
    (void)settings;
    (void)metrics;
    gate_check_bool(checks, "judge linked", 0);
    snprintf(why, n, "this build has no judge for the gate");
    return GATE_FAIL;
}

enum gate_verdict gatedef_judge(const char *gate, const char *mode, const json_t *settings,
                                const json_t *metrics, json_t **checks, char *why, size_t n)
{
    *checks = json_array();
    const struct gate_def *d = gatedef_find(gate);
    if (!d) {
        gate_check_bool(*checks, "known gate", 0);
        snprintf(why, n, "unknown gate '%s'", gate ? gate : "?");
        return GATE_FAIL;
    }
    return gate_judge_common(d->judge ? d->judge : no_judge, d->check_ran, mode, settings, metrics,
                             *checks, why, n);
}

json_t *gatedef_row(const char *gate, const char *mode, json_t *settings, json_t *metrics,
                    const char *error)
{
    if (!settings)
        settings = json_object();
    if (!metrics)
        metrics = json_object();
    if (error)
        json_object_set_new(metrics, "error", json_string(error));
    json_t *checks = NULL;
    char why[512] = "";
    enum gate_verdict v = gatedef_judge(gate, mode, settings, metrics, &checks, why, sizeof why);
    json_t *g = json_pack("{s:s, s:o, s:o, s:o}", "verdict", gate_verdict_name(v), "settings",
                          settings, "metrics", metrics, "checks", checks);
    if (why[0])
        json_object_set_new(g, "reason", json_string(why));
    return g;
}

enum gate_verdict gatedef_overall(const json_t *gates)
{
    int any_error = 0, n = 0;
    const char *k;
    json_t *g;
    json_object_foreach((json_t *)gates, k, g)
    {
        n++;
        int v = gate_verdict_parse(json_string_value(json_object_get(g, "verdict")));
        if (v < 0 || v == GATE_FAIL)
            return GATE_FAIL;
        any_error |= v == GATE_ERROR;
    }
    if (!n)
        return GATE_FAIL;
    return any_error ? GATE_ERROR : GATE_PASS;
}

int gatedef_rejudge_payload(const json_t *payload, enum gate_verdict *overall, struct gate_err *err)
{
    const json_t *gates = json_object_get(payload, "gates");
    const char *mode = json_string_value(json_object_get(json_object_get(payload, "cell"), "mode"));
    *overall = GATE_FAIL;
    if (!json_is_object(gates))
        return err_set(err, ERR_INPUT, "payload has no \"gates\" object");
    int any_error = 0, any_fail = json_object_size(gates) == 0, rc = 0;
    const char *name;
    json_t *g;
    json_object_foreach((json_t *)gates, name, g)
    {
        json_t *checks = NULL;
        char why[512] = "";
        enum gate_verdict v =
            gatedef_judge(name, mode, json_object_get(g, "settings"), json_object_get(g, "metrics"),
                          &checks, why, sizeof why);
        json_decref(checks);
        int recorded = gate_verdict_parse(json_string_value(json_object_get(g, "verdict")));
        if (recorded != (int)v && !rc)
            rc = err_set(err, ERR_RUNTIME, "gate '%s' records %s but its numbers say %s%s%s", name,
                         recorded >= 0 ? gate_verdict_name(recorded) : "no verdict",
                         gate_verdict_name(v), why[0] ? ": " : "", why);
        any_fail |= v == GATE_FAIL;
        any_error |= v == GATE_ERROR;
    }
    *overall = any_fail ? GATE_FAIL : any_error ? GATE_ERROR : GATE_PASS;
    int recorded = gate_verdict_parse(json_string_value(json_object_get(payload, "verdict")));
    if (recorded != (int)*overall && !rc)
        rc = err_set(err, ERR_RUNTIME, "receipt records %s but its gates say %s",
                     recorded >= 0 ? gate_verdict_name(recorded) : "no verdict",
                     gate_verdict_name(*overall));
    return rc;
}
