/* test_gatedef.c — the gate table as the one source of every setting's default and bound
 * (issue 24 §2): the oracles' config structs are filled from the rows (gatedef_config), the
 * commands that run a gate outside a ladder parse their flags through the same rows
 * (gatedef_flag) and start from the same defaults as a ladder's cell, and docs/ladder.md's
 * settings table lists every row with its default and bounds.
 * The judges of the table are tested in test_gates.c. Start reading: the first test.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/gatedef.h"
#include "harness/ladder.h"
#include "oracles/consistency.h"
#include "oracles/falsify.h"
#include "oracles/parity.h"
#include "oracles/throughput.h"
#include "support/check.h"
#include "support/ladderfix.h"

/* The value of a row's field in a config struct or a struct ladder_gates. */
static double field(const struct gate_setting *s, const void *base, size_t off)
{
    const char *f = (const char *)base + off;
    return s->type == GS_INT ? *(const int *)f : *(const double *)f;
}

static void set_field(const struct gate_setting *s, void *base, size_t off, double v)
{
    char *f = (char *)base + off;
    if (s->type == GS_INT)
        *(int *)f = (int)v;
    else
        *(double *)f = v;
}

Test(gatedef, every_row_with_a_config_field_fills_it_from_its_default_or_the_cell)
{
    int filled = 0;
    for (int id = 0; id < GATE_COUNT; id++) {
        const struct gate_def *d = &GATE_DEFS[id];
        if (!d->cfg_size)
            continue;
        char *cfg = calloc(1, d->cfg_size);
        cr_assert(cfg);
        gatedef_config((enum gate_id)id, NULL, 0, cfg, d->cfg_size);
        for (const struct gate_setting *s = d->settings; s->key; s++)
            if (s->cfg != GS_NOCFG)
                cr_expect_eq(field(s, cfg, s->cfg), s->dflt, "%s.%s: config %g, row default %g",
                             d->name, s->key, field(s, cfg, s->cfg), s->dflt);
        /* a cell whose every setting sits at its upper bound (never a default): each is copied */
        struct ladder_gates g;
        memset(&g, 0, sizeof g);
        for (const struct gate_setting *s = d->settings; s->key; s++)
            if (s->cfg != GS_NOCFG)
                set_field(s, &g, s->offset, s->hi);
        gatedef_config((enum gate_id)id, &g, 0, cfg, d->cfg_size);
        for (const struct gate_setting *s = d->settings; s->key; s++)
            if (s->cfg != GS_NOCFG) {
                cr_expect_neq(s->hi, s->dflt, "%s.%s", d->name, s->key);
                cr_expect_eq(field(s, cfg, s->cfg), s->hi, "%s.%s: config %g, cell %g", d->name,
                             s->key, field(s, cfg, s->cfg), s->hi);
                filled++;
            }
        free(cfg);
    }
    cr_expect_geq(filled, 25, "only %d settings fill an oracle config", filled);
}

Test(gatedef, the_links_carry_the_cells_parity_into_throughput_and_falsify)
{
    struct ladder_gates g;
    memset(&g, 0, sizeof g);
    g.min_cosine = 0.25;
    g.near_tie = 0.125;
    g.route_tie = 0.0625;
    g.positions = 80;
    g.span = 200;
    snprintf(g.baseline, sizeof g.baseline, "previous");
    struct throughput_config t;
    gatedef_throughput_config(&g, &t);
    cr_expect_eq(t.check_min_cosine, 0.25);
    cr_expect_eq(t.check_near_tie, 0.125);
    cr_expect_eq(t.check_route_tie, 0.0625);
    cr_expect_str_eq(t.baseline, "previous");
    struct falsify_config f;
    gatedef_falsify_config(&g, &f);
    cr_expect_eq(f.parity.min_cosine, 0.25);
    cr_expect_eq(f.parity.positions, 80);
    cr_expect_eq(f.parity.span, 0, "falsify judges the first positions only");
    cr_expect_eq(f.n_clean, FALSIFY_CLEAN_RUNS);
    gatedef_falsify_config(NULL, &f);
    cr_expect_eq(f.parity.min_cosine, gatedef_default("parity", "min_cosine"));
    cr_expect_eq(f.min_detection, gatedef_default("falsify", "min_detection"));
}

/* The examples: min_detection in `gate falsify` and in a ladder, prompt_tokens in `gate
 * bench` and in a ladder; the one deliberate difference (bench's decode_tokens) is its cmd row. */
Test(gatedef, a_command_and_a_ladders_cell_start_from_the_same_defaults)
{
    struct ladderfix fx;
    ladderfix_init(&fx, "gatedef-defaults");
    const char *path = ladderfix_ladder(&fx, "l.yaml", NULL, 0);
    struct ladder *l = NULL;
    struct gate_err err = {0};
    cr_assert_eq(ladder_load(&l, path, &err), 0, "%s", err.msg);
    struct falsify_config cell_f, cmd_f;
    gatedef_falsify_config(&l->cells[0].g, &cell_f);
    gatedef_falsify_config(NULL, &cmd_f);
    cr_expect_eq(cell_f.min_detection, cmd_f.min_detection);
    cr_expect_eq(cell_f.sweep_samples, cmd_f.sweep_samples);
    cr_expect_eq(cell_f.power_factor, cmd_f.power_factor);
    struct throughput_config cell_t, bench;
    gatedef_throughput_config(&l->cells[0].g, &cell_t);
    gatedef_config(GATE_ID_THROUGHPUT, NULL, 1, &bench, sizeof bench);
    cr_expect_eq(cell_t.prompt_tokens, bench.prompt_tokens);
    cr_expect_eq(cell_t.runs, bench.runs);
    cr_expect_eq(cell_t.max_seconds, bench.max_seconds);
    const struct gate_setting *dt = gatedef_setting(GATE_ID_THROUGHPUT, "decode_tokens");
    const struct gate_cmd_setting *own = gatedef_cmd_setting(GATE_ID_THROUGHPUT, dt);
    cr_assert(own, "bench's decode_tokens is its own row");
    cr_expect_eq(bench.decode_tokens, (int)own->dflt);
    cr_expect_eq(cell_t.decode_tokens, (int)dt->dflt);
    ladder_free(l);

    /* and the commands print the rows' defaults in their usage */
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    const char *out = ladderfix_path(&fx, "help.txt");
    cr_assert_eq(ladderfix_sh("%s falsify --help > %s 2>&1", bin, out), 0);
    char *text = check_slurp_text(out), want[128];
    snprintf(want, sizeof want, "N (default %d)", cmd_f.sweep_samples);
    cr_expect(strstr(text, want), "falsify --help lacks '%s':\n%s", want, text);
    snprintf(want, sizeof want, "X (default %g;", cmd_f.min_detection);
    cr_expect(strstr(text, want), "falsify --help lacks '%s':\n%s", want, text);
    free(text);
    cr_assert_eq(ladderfix_sh("%s bench --help > %s 2>&1", bin, out), 0);
    text = check_slurp_text(out);
    snprintf(want, sizeof want, "(defaults %d, %d, %d, %d)", bench.prompt_tokens,
             bench.decode_tokens, bench.runs, bench.warmup);
    cr_expect(strstr(text, want), "bench --help lacks '%s':\n%s", want, text);
    free(text);
}

/* gatedef_flag over argv {"gate", flag, value}: its status; *cfg filled as the row says. */
static int flag(enum gate_id id, const char *const *skip, const char *f, const char *v, void *cfg,
                int *i)
{
    char *argv[] = {"gate", (char *)f, (char *)v, NULL};
    *i = 1;
    return gatedef_flag(id, "test", skip, v ? 3 : 2, argv, i, cfg);
}

Test(gatedef, a_flag_parses_through_its_row_with_the_rows_bounds)
{
    struct parity_config p;
    gatedef_parity_config(NULL, &p);
    int i;
    cr_expect_eq(flag(GATE_ID_PARITY, NULL, "--min-cosine", "0.5", &p, &i), 1);
    cr_expect_eq(p.min_cosine, 0.5);
    cr_expect_eq(i, 2, "the value is consumed");
    cr_expect_eq(flag(GATE_ID_PARITY, NULL, "--max-mean-rel-l2", "0.01", &p, &i), 1);
    cr_expect_eq(p.max_mean_rel_l2, 0.01);
    cr_expect_eq(flag(GATE_ID_PARITY, NULL, "--min-cosine", "2", &p, &i), -1, "above the row's hi");
    cr_expect_eq(p.min_cosine, 0.5, "a refused value is not stored");
    cr_expect_eq(flag(GATE_ID_PARITY, NULL, "--positions", "63", &p, &i), -1, "below 64");
    cr_expect_eq(flag(GATE_ID_PARITY, NULL, "--positions", "64.5", &p, &i), -1, "not an integer");
    cr_expect_eq(flag(GATE_ID_PARITY, NULL, "--max-kld", "x", &p, &i), -1);
    cr_expect_eq(flag(GATE_ID_PARITY, NULL, "--max-kld", NULL, &p, &i), -1, "no value");
    cr_expect_eq(flag(GATE_ID_PARITY, NULL, "--max_kld", "1", &p, &i), 0, "flags use '-'");
    cr_expect_eq(flag(GATE_ID_PARITY, NULL, "--loose-reason", "x", &p, &i), 0, "not a field");
    static const char *const skip[] = {"positions", NULL};
    cr_expect_eq(flag(GATE_ID_PARITY, skip, "--positions", "64", &p, &i), 0, "skipped");
    cr_expect_eq(i, 1, "a flag that is not the row's consumes nothing");
    struct throughput_config t;
    gatedef_throughput_config(NULL, &t);
    cr_expect_eq(flag(GATE_ID_THROUGHPUT, NULL, "--runs", "1", &t, &i), 1, "bench's own lower");
    cr_expect_eq(t.runs, 1);
    cr_expect_eq(flag(GATE_ID_THROUGHPUT, NULL, "--runs", "0", &t, &i), -1);
    cr_expect_eq(flag(GATE_ID_THROUGHPUT, NULL, "--runs", "201", &t, &i), -1);
    cr_expect_eq(flag(GATE_ID_THROUGHPUT, NULL, "--max-wait", "2", &t, &i), -1);
    struct falsify_config f;
    gatedef_falsify_config(NULL, &f);
    cr_expect_eq(flag(GATE_ID_FALSIFY, NULL, "--min-detection", "0", &f, &i), -1,
                 "a floor that cannot fail is refused here as in a ladder");
    cr_expect_eq(flag(GATE_ID_FALSIFY, NULL, "--power-layers", "3", &f, &i), 1);
    cr_expect_eq(f.power_layers, 3);
}

/* A flag is its row's key exactly: a longer word that starts with the key is not that flag (a
 * typo is left to the command, which refuses what no row takes) */
Test(gatedef, a_flag_is_its_rows_key_exactly_not_a_word_that_starts_with_it)
{
    struct parity_config p;
    gatedef_parity_config(NULL, &p);
    int i;
    cr_expect_eq(flag(GATE_ID_PARITY, NULL, "--positions-x", "128", &p, &i), 0);
    cr_expect_eq(i, 1, "a flag that is not the row's consumes nothing");
    cr_expect_eq(p.positions, 96, "the row's default stays");
    cr_expect_eq(flag(GATE_ID_PARITY, NULL, "--max-kldx", "1", &p, &i), 0);
    cr_expect_eq(p.max_kld, 1e-2);
}

/* A command refuses an out-of-range flag with exit 2 and a message naming the flag, before it
 * reads a model (the model path does not exist). */
Test(gatedef, commands_refuse_an_out_of_range_flag_naming_it)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    struct ladderfix fx;
    ladderfix_init(&fx, "gatedef-flags");
    const char *out = ladderfix_path(&fx, "err.txt");
    static const struct {
        const char *args, *want;
    } C[] = {
        {"parity no.gguf --mode ref.decode --max-kld 1e10", "--max-kld must be in [0, 1e+09]"},
        {"parity no.gguf --mode ref.decode --positions 10", "--positions must be in [64,"},
        {"falsify no.gguf --mode ref.decode --fault all --min-detection 0",
         "--min-detection must be in [0.01, 1]"},
        {"falsify no.gguf --mode ref.decode --fault all --length 10", "--length"},
        {"bench no.gguf --runs 300", "--runs must be in [1, 200]"},
        {"bench no.gguf --max-seconds 0", "--max-seconds must be in [0.1, 3600]"},
        /* bounds only the rows hold now (the oracles' checks no longer repeat them) */
        {"bench no.gguf --warmup -1", "--warmup must be in [0, 1000]"},
        {"bench no.gguf --check-positions 9", "--check-positions must be in [1, 8]"},
        {"falsify no.gguf --mode ref.decode --fault all --power-layers 0",
         "--power-layers must be in [1, 16]"},
        {"falsify no.gguf --mode ref.decode --fault all --sweep-samples -1",
         "--sweep-samples must be in [0, 4096]"},
        {"falsify no.gguf --mode ref.decode --fault all --power-factor 1",
         "--power-factor must be in [1.0001, 1.05]"},
    };
    for (size_t k = 0; k < sizeof C / sizeof C[0]; k++) {
        int rc = ladderfix_sh("%s %s > %s 2>&1", bin, C[k].args, out);
        char *text = check_slurp_text(out);
        cr_expect_eq(rc, 2, "gate %s: exit %d\n%s", C[k].args, rc, text);
        cr_expect(strstr(text, C[k].want), "gate %s: no '%s' in:\n%s", C[k].args, C[k].want, text);
        free(text);
    }
}

/* The text of docs/NAME (malloc'd). */
static char *doc_text(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/docs/%s", GATE_SOURCE_DIR, name);
    char *t = check_slurp_text(path);
    cr_assert(t, "cannot read %s", path);
    return t;
}

/* docs/ladder.md's settings table is the generated one: a default, a bound, a key or a meaning
 * changed in a row (or in the doc) without the other fails here, with the text to paste. */
Test(gatedef, the_ladder_docs_settings_table_is_the_rows)
{
    char *doc = doc_text("ladder.md");
    const char *begin = "<!-- gate ladder settings: begin -->\n",
               *end_mark = "<!-- gate ladder settings: end -->";
    char *a = strstr(doc, begin), *b = a ? strstr(a, end_mark) : NULL;
    cr_assert(a && b, "docs/ladder.md has no generated settings table between the markers");
    a += strlen(begin);
    char *want = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&want, &n);
    cr_assert(f);
    gatedef_settings_markdown(f);
    fclose(f);
    cr_expect(strlen(want) == (size_t)(b - a) && !memcmp(want, a, (size_t)(b - a)),
              "docs/ladder.md's settings table differs from the gate table's rows; replace it with"
              " the output of `gate ladder settings`:\n%s",
              want);
    free(want);
    free(doc);
}

/* docs/gates.md's parity thresholds table ("Thresholds and where they come from") gives every
 * parity row with the row's default (the leading number of its default column). */
Test(gatedef, the_gates_docs_parity_thresholds_are_the_rows_defaults)
{
    char *doc = doc_text("gates.md");
    char *table = strstr(doc, "### Thresholds and where they come from");
    cr_assert(table, "docs/gates.md lost its thresholds section");
    int n = 0;
    for (const struct gate_setting *s = GATE_DEFS[GATE_ID_PARITY].settings; s->key; s++, n++) {
        char head[64];
        snprintf(head, sizeof head, "\n| %s | ", s->key);
        char *line = strstr(table, head);
        cr_assert(line, "docs/gates.md's thresholds table has no row for parity.%s", s->key);
        const char *cell = line + strlen(head);
        if (s->type != GS_INT && s->type != GS_NUM) {
            cr_expect(!strncmp(cell, "\"\"", 2) || !strncmp(cell, "none", 4),
                      "parity.%s: the doc's default is not empty", s->key);
            continue;
        }
        char *end;
        const double v = strtod(cell, &end);
        cr_expect(end != cell && fabs(v - s->dflt) <= 1e-12 * fabs(s->dflt),
                  "parity.%s: docs/gates.md says %.20s..., the row's default is %g", s->key, cell,
                  s->dflt);
    }
    cr_expect_geq(n, 10);
    free(doc);
}

/* The gates sections a ladder takes and the keys of each come from the table (issue 24 §3): every
 * numeric row of every cell gate is accepted at its default, and an unknown key is refused with
 * the row keys and the gate's section_keys as the expected list. */
Test(gatedef, a_ladders_gate_sections_and_their_keys_are_the_tables)
{
    struct ladderfix fx;
    ladderfix_init(&fx, "gatedef-sections");
    char text[8192] = "  overrides:\n    - match: {model: moe}\n";
    for (int id = 0; id < GATE_COUNT; id++) {
        const struct gate_def *d = &GATE_DEFS[id];
        if (!d->check_ran || !d->settings[0].key)
            continue;
        size_t n = strlen(text);
        n += (size_t)snprintf(text + n, sizeof text - n, "      %s: {", d->name);
        const char *sep = "";
        for (const struct gate_setting *s = d->settings; s->key; s++)
            if (s->type == GS_INT || s->type == GS_NUM) {
                n += (size_t)snprintf(text + n, sizeof text - n, "%s%s: %.17g", sep, s->key,
                                      s->dflt);
                sep = ", ";
            }
        n += (size_t)snprintf(text + n, sizeof text - n, "}\n");
        cr_assert_lt(n, sizeof text);
    }
    const char *path = ladderfix_one_cell(&fx, "all.yaml", NULL, "ref.decode", NULL, text);
    struct ladder *l = NULL;
    struct gate_err err = {0};
    cr_expect_eq(ladder_load(&l, path, &err), 0, "every row at its default: %s\n%s", err.msg, text);
    ladder_free(l);
    int sections = 0;
    for (int id = 0; id < GATE_COUNT; id++) {
        const struct gate_def *d = &GATE_DEFS[id];
        if (!d->check_ran || !d->settings[0].key)
            continue;
        sections++;
        snprintf(text, sizeof text,
                 "  overrides:\n    - match: {model: moe}\n      %s: {nope: 1}\n", d->name);
        path = ladderfix_one_cell(&fx, "bad.yaml", NULL, "ref.decode", NULL, text);
        char want[1024];
        size_t n = (size_t)snprintf(want, sizeof want,
                                    "unknown key 'nope' in %s (expected one of: ", d->name);
        const char *sep = "";
        for (const struct gate_setting *s = d->settings; s->key; s++, sep = ", ")
            n += (size_t)snprintf(want + n, sizeof want - n, "%s%s", sep, s->key);
        for (const char *const *k = d->section_keys; k && *k; k++)
            n += (size_t)snprintf(want + n, sizeof want - n, ", %s", *k);
        snprintf(want + n, sizeof want - n, ")");
        memset(&err, 0, sizeof err);
        l = NULL;
        cr_expect_eq(ladder_load(&l, path, &err), ERR_INPUT, "%s: an unknown key loaded", d->name);
        cr_expect(strstr(err.msg, want), "%s: got '%s', want '%s'", d->name, err.msg, want);
        ladder_free(l);
    }
    cr_expect_eq(sections, 5, "parity, golden, throughput, falsify, consistency");
}

/* ---- a row's bounds are the only ones ---------------------------------------------------------
 */

/* Write l.yaml: one cpu.decode cell and `gates.defaults.SECTION: {KEY: VALUE}` on line 11;
 * returns its path. */
static const char *bound_ladder(struct ladderfix *fx, const char *section, const char *key,
                                const char *value)
{
    const char *p = ladderfix_path(fx, "l.yaml");
    FILE *f = fopen(p, "w");
    cr_assert(f, "cannot write %s", p);
    fprintf(f,
            "release: {name: r, version: '1'}\n"
            "models:\n  moe: {path: m.gguf, sha256: " LADDERFIX_MOE_SHA ", arch: qwen3moe}\n"
            "hosts:\n  a: {device: none, trust: [%s]}\n"
            "modes: [cpu.decode]\n"
            "cells:\n  - {model: moe, host: a, mode: cpu.decode}\n"
            "gates:\n  defaults:\n    %s: {%s: %s}\n"
            "unanchored: {qwen3moe: 'bounds test'}\n",
            fx->key_a.id, section, key, value);
    cr_assert_eq(fclose(f), 0);
    return p;
}

/* Every integer and number row of every gate a ladder sets: one step past its lower and past its
 * upper bound is an input error at the value (file:line:col, the row's bounds quoted) when the
 * ladder loads. The oracles' config checks no longer repeat these bounds, so the row is the only
 * guard; the values they used to refuse are listed too, so a row widened past what the oracle
 * needs is caught here. */
Test(gatedef, a_value_past_a_rows_bound_is_refused_where_it_is_read)
{
    struct ladderfix fx;
    ladderfix_init(&fx, "gatedef-bounds");
    int n = 0;
    for (int id = 0; id < GATE_COUNT; id++) {
        const struct gate_def *d = &GATE_DEFS[id];
        for (const struct gate_setting *s = d->settings; d->cell_gate && s && s->key; s++) {
            if (s->type != GS_INT && s->type != GS_NUM)
                continue;
            for (int side = 0; side < 2; side++) {
                const double b = side ? s->hi : s->lo, step = s->type == GS_INT ? 1
                                                              : b != 0          ? fabs(b) * 0.01
                                                                                : 0.01;
                const double v = side ? b + step : b - step;
                char value[64], want[512], where[64];
                if (s->type == GS_INT)
                    snprintf(value, sizeof value, "%ld", (long)v);
                else
                    snprintf(value, sizeof value, "%.17g", v);
                const char *p = bound_ladder(&fx, d->name, s->key, value);
                /* "    SECTION: {KEY: " precedes the value on line 11 */
                snprintf(where, sizeof where,
                         ":11:%zu: ", 4 + strlen(d->name) + 3 + strlen(s->key) + 3);
                if (s->type == GS_INT)
                    snprintf(want, sizeof want, "%s%s%s.%s must be in [%ld, %ld], found %ld", p,
                             where, d->name, s->key, (long)s->lo, (long)s->hi, (long)v);
                else
                    snprintf(want, sizeof want, "%s%s%s.%s must be in [%g, %g], found %g", p, where,
                             d->name, s->key, s->lo, s->hi, v);
                struct ladder *l = NULL;
                struct gate_err err = {0};
                cr_expect_eq(ladder_load(&l, p, &err), ERR_INPUT, "%s.%s: %s accepted", d->name,
                             s->key, value);
                cr_expect_str_eq(err.msg, want, "%s.%s: %s\n got %s\nwant %s", d->name, s->key,
                                 value, err.msg, want);
                ladder_free(l);
                n++;
            }
        }
    }
    cr_expect_geq(n, 2 * 25, "only %d bounds tried", n);
    /* what falsify_config_check, throughput_config_check and consistency_config_check refused
     * on their own before: still refused at load, by the rows */
    static const struct {
        const char *section, *key, *value;
    } was_oracle[] = {
        {"falsify", "sweep_samples", "-1"},   {"falsify", "min_detection", "0"},
        {"falsify", "min_detection", "1.5"},  {"falsify", "power_factor", "1"},
        {"falsify", "power_factor", "1.06"},  {"falsify", "power_layers", "0"},
        {"throughput", "warmup", "-1"},       {"throughput", "prompt_tokens", "0"},
        {"throughput", "decode_tokens", "0"}, {"throughput", "check_positions", "9"},
        {"throughput", "max_seconds", "0"},   {"throughput", "max_runs", "201"},
        {"throughput", "runs", "0"},          {"consistency", "positions", "15"},
        {"consistency", "repeats", "0"},      {"consistency", "max_abs", "-0.1"},
    };
    for (size_t i = 0; i < sizeof was_oracle / sizeof was_oracle[0]; i++) {
        const char *p =
            bound_ladder(&fx, was_oracle[i].section, was_oracle[i].key, was_oracle[i].value);
        struct ladder *l = NULL;
        struct gate_err err = {0};
        char what[96];
        snprintf(what, sizeof what, ":11:%zu: %s.%s must be in [",
                 4 + strlen(was_oracle[i].section) + 3 + strlen(was_oracle[i].key) + 3,
                 was_oracle[i].section, was_oracle[i].key);
        cr_expect_eq(ladder_load(&l, p, &err), ERR_INPUT, "%s.%s: %s accepted",
                     was_oracle[i].section, was_oracle[i].key, was_oracle[i].value);
        cr_expect(strstr(err.msg, what), "%s.%s: %s", was_oracle[i].section, was_oracle[i].key,
                  err.msg);
        ladder_free(l);
    }
    /* and gate ladder check says so with exit 2, before anything runs */
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (ctest sets it)");
    const char *p = bound_ladder(&fx, "consistency", "positions", "15");
    const char *out = ladderfix_path(&fx, "check.txt");
    int rc = ladderfix_sh("'%s' ladder check '%s' > '%s' 2>&1", bin, p, out);
    char *text = check_slurp_text(out);
    cr_expect_eq(rc, 2, "exit %d: %s", rc, text);
    cr_expect(strstr(text, "l.yaml:11:30: consistency.positions must be in [16, 65536], found 15"),
              "%s", text);
    free(text);
}
