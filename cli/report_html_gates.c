/* report_html_gates.c — one gate of a receipt on `gate report`'s page (report_html_parts.h has
 * the contract): re-judged through the gate table (gatedef_judge) from the settings and metrics
 * the receipt records, its checks (value, operator, threshold), and the gate's own drawer —
 * parity: its counts, the plot, the thresholds over the backend's noise, the localization of a
 * failed run and the per-position table; golden: the greedy tokens side by side, decoded when
 * the model file is here; throughput: the runs, their spread and the baseline; falsify: each
 * fault's witness and the sweep's detection rates.
 * Invariants: DRAWERS[] has one entry per enum gate_id (a static assertion holds it to
 * GATE_COUNT); a receipt key that no gate has is shown, never judged; every string from the
 * receipt goes through html_put().
 * Start reading: html_gate_draw(), then DRAWERS[].
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd_tokenize.h"
#include "cli/report_html_parts.h"
#include "engine/tokenizer.h"
#include "harness/gatedef.h"
#include "oracles/gates.h"

/* Per-position rows listed in a parity table (the plot shows every position). */
#define MAX_POSITION_ROWS 1024

/* The checks of a gate row: metric, value, operator, threshold, pass. */
static void draw_checks(FILE *f, const json_t *checks)
{
    if (!json_is_array(checks) || json_array_size(checks) == 0) {
        fputs("<p class=\"muted\">no checks recorded</p>\n", f);
        return;
    }
    fputs("<table class=\"checks\"><tr><th>check</th><th>value</th><th>op</th>"
          "<th>threshold</th><th></th></tr>\n",
          f);
    size_t i;
    json_t *c;
    json_array_foreach(checks, i, c)
    {
        int pass = json_is_true(json_object_get(c, "pass"));
        fprintf(f, "<tr class=\"%s\"><td>", pass ? "ok" : "bad");
        html_put(f, html_ostr(c, "metric"));
        fputs("</td><td class=\"num\">", f);
        html_json(f, json_object_get(c, "value"));
        fputs("</td><td>", f);
        html_put(f, html_ostr(c, "op"));
        fputs("</td><td class=\"num\">", f);
        html_json(f, json_object_get(c, "threshold"));
        fprintf(f, "</td><td>%s</td></tr>\n", pass ? "ok" : "<b>FAILED</b>");
    }
    fputs("</table>\n", f);
}

/* The localization of a failed parity run: first diverging layer, and per layer the hidden
 * state's cosine and (MoE) the routing agreement. */
static void draw_localization(FILE *f, const json_t *loc)
{
    if (!json_is_object(loc))
        return;
    fputs("<div class=\"localization\"><h4>localization</h4>\n<p>first diverging layer: <b>", f);
    html_json(f, json_object_get(loc, "first_bad_layer"));
    fputs("</b>, at position ", f);
    html_json(f, json_object_get(loc, "at_position"));
    fputs("</p>\n<table><tr><th>layer</th><th>hidden cosine (mean)</th><th>min</th>"
          "<th>at position</th><th>routing agreement</th><th>same / different expert sets</th>"
          "<th>different at a near tie</th><th>judge router gap min</th></tr>\n",
          f);
    size_t i;
    json_t *x;
    json_t *layers = json_object_get(loc, "layers");
    json_array_foreach(layers, i, x)
    {
        double same = html_onum(x, "same_expert_set"), diff = html_onum(x, "different_expert_set");
        int moe = json_object_get(x, "same_expert_set") != NULL;
        int bad = json_equal(json_object_get(x, "layer"), json_object_get(loc, "first_bad_layer"));
        fprintf(f, "<tr%s><td class=\"num\">", bad ? " class=\"bad\"" : "");
        html_json(f, json_object_get(x, "layer"));
        fputs("</td><td class=\"num\">", f);
        html_num(f, html_onum(x, "hidden_cosine"));
        fputs("</td><td class=\"num\">", f);
        html_num(f, html_onum(x, "hidden_cosine_min"));
        fputs("</td><td class=\"num\">", f);
        html_json(f, json_object_get(x, "hidden_cosine_min_position"));
        fputs("</td><td class=\"num\">", f);
        if (moe && same + diff > 0)
            fprintf(f, "%.1f%%", 100.0 * same / (same + diff));
        else
            fputs("&mdash;", f);
        fputs("</td><td class=\"num\">", f);
        if (moe)
            fprintf(f, "%g / %g", same, diff);
        else
            fputs("&mdash; (dense)", f);
        fputs("</td><td class=\"num\">", f);
        html_json(f, json_object_get(x, "different_near_tie"));
        fputs("</td><td class=\"num\">", f);
        html_json(f, json_object_get(x, "ref_router_gap_min"));
        fputs("</td></tr>\n", f);
    }
    fputs("</table></div>\n", f);
}

static void draw_parity(FILE *f, const json_t *g)
{
    const json_t *m = json_object_get(g, "metrics"), *s = json_object_get(g, "settings");
    fputs("<p>", f);
    static const char *const keys[] = {"n_pos",
                                       "n_match",
                                       "n_tie_flip",
                                       "n_wrong",
                                       "n_nonfinite",
                                       "worst_position",
                                       "first_failing_position"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        fprintf(f, "%s%s: ", k ? ", " : "", keys[k]);
        html_json(f, json_object_get(m, keys[k]));
    }
    fputs("</p>\n", f);
    html_parity_plot(f, m, s);
    const json_t *nz = json_object_get(m, "noise"), *mg = json_object_get(nz, "margin");
    if (json_is_object(mg)) { /* each threshold over the backend's documented noise */
        fputs("<p class=\"margins\">thresholds over the ", f);
        html_put(f, html_ostr(nz, "backend"));
        fputs(" backend's documented noise: ", f);
        const char *k;
        const json_t *v;
        int first = 1;
        json_object_foreach((json_t *)mg, k, v)
        {
            fprintf(f, "%s", first ? "" : ", ");
            first = 0;
            html_put(f, k);
            if (json_is_null(v))
                fputs(" (not measured)", f);
            else
                fprintf(f, " %.3gx", html_jnum(v));
        }
        fputs(" (", f);
        html_put(f, html_ostr(nz, "source"));
        fputs(")</p>\n", f);
    }
    const char *loose = html_ostr(s, "loose_reason");
    if (loose && loose[0]) {
        fputs("<p class=\"note loose\">looser than the noise allows, by the ladder's reason: ", f);
        html_put(f, loose);
        fputs("</p>\n", f);
    }
    draw_localization(f, json_object_get(m, "localization"));
    const json_t *pp = json_object_get(m, "per_position");
    const json_t *cls = json_object_get(pp, "class");
    size_t n = json_array_size(json_object_get(pp, "cosine"));
    if (!n)
        return;
    fprintf(f, "<details><summary>per position (%zu)</summary>\n", n);
    fputs("<table class=\"positions\"><tr><th>pos</th><th>class</th><th>cosine</th><th>KL</th>"
          "<th>top-5 overlap</th><th>judge top</th><th>test top</th><th>judge top-2 gap</th>"
          "</tr>\n",
          f);
    static const char *const cols[] = {"cosine",  "kld",      "top5_overlap",
                                       "ref_top", "test_top", "ref_gap"};
    for (size_t i = 0; i < n && i < MAX_POSITION_ROWS; i++) {
        const char *c = json_string_value(json_array_get(cls, i));
        const char *rc = !c || !strcmp(c, "MATCH") ? ""
                         : !strcmp(c, "TIE_FLIP")  ? " class=\"tie\""
                                                   : " class=\"bad\"";
        fprintf(f, "<tr%s><td class=\"num\">%zu</td><td>", rc, i);
        html_put(f, c ? c : "?");
        fputs("</td>", f);
        for (size_t k = 0; k < sizeof cols / sizeof cols[0]; k++) {
            fputs("<td class=\"num\">", f);
            html_json(f, json_array_get(json_object_get(pp, cols[k]), i));
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table></details>\n", f);
}

/* The pieces of tokens, decoded with t (NULL: ids only). */
static void piece(FILE *f, const struct tok *t, const json_t *id)
{
    fputs("<span class=\"tok\">", f);
    if (t && json_is_integer(id)) {
        int32_t v = (int32_t)json_integer_value(id);
        char *bytes = NULL, *shown = NULL;
        size_t len = 0;
        struct gate_err e = {0};
        if (v >= 0 && v < tok_n_vocab(t) && !tok_decode(t, &v, 1, &bytes, &len, &e) &&
            (shown = cmd_tokenize_escape(bytes, len)))
            html_put_entities(f, shown); /* already escaped once, as `gate tokenize` shows it */
        else
            fputs("?", f);
        free(bytes);
        free(shown);
    } else {
        html_json(f, id);
    }
    fputs("</span>", f);
}

static void draw_golden(FILE *f, const json_t *g, const struct tok *t, const char *model_path)
{
    const json_t *m = json_object_get(g, "metrics");
    const json_t *by = json_object_get(m, "recorded_by");
    fputs("<p>goldens: ", f);
    html_json(f, json_object_get(m, "source"));
    if (by) {
        fputs(" &mdash; recorded by ", f);
        html_json(f, json_object_get(by, "engine"));
        fputs(" ", f);
        html_json(f, json_object_get(by, "backend"));
        fputs(" at commit <code>", f);
        html_json(f, json_object_get(by, "git_commit"));
        fputs("</code> on ", f);
        html_json(f, json_object_get(by, "date"));
    }
    fputs("; pieces ", f);
    if (t) {
        fputs("decoded with the tokenizer of <code>", f);
        html_put(f, model_path);
        fputs("</code>", f);
    } else {
        fputs("not decoded (the model file is not here): token ids only", f);
    }
    fputs("</p>\n", f);
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(m, "cases"), i, c)
    {
        const json_t *want = json_object_get(c, "expected"), *got = json_object_get(c, "got");
        double fd = html_onum(c, "first_diff");
        int same = fd < 0;
        fprintf(f, "<details class=\"golden-case\"%s><summary>case ", same ? "" : " open");
        html_put(f, html_ostr(c, "name"));
        fputs(": ", f);
        if (same)
            fputs("identical", f);
        else {
            fputs("<b>first difference at token ", f);
            html_num(f, fd);
            fputs("</b>", f);
        }
        fputs(" (", f);
        html_json(f, json_object_get(c, "prompt_tokens"));
        fputs(" prompt tokens)</summary>\n", f);
        fputs("<table class=\"golden-diff\"><tr><th>#</th><th>golden id</th><th>golden piece</th>"
              "<th>got id</th><th>got piece</th></tr>\n",
              f);
        size_t n = json_array_size(want) > json_array_size(got) ? json_array_size(want)
                                                                : json_array_size(got);
        for (size_t k = 0; k < n; k++) {
            const json_t *a = json_array_get(want, k), *b = json_array_get(got, k);
            int differs = !(a && b && json_equal(a, b));
            fprintf(f, "<tr%s><td class=\"num\">%zu</td><td class=\"num\">",
                    differs ? " class=\"diff\"" : "", k);
            html_json(f, a);
            fputs("</td><td>", f);
            if (a)
                piece(f, t, a);
            fputs("</td><td class=\"num\">", f);
            html_json(f, b);
            fputs("</td><td>", f);
            if (b)
                piece(f, t, b);
            fputs("</td></tr>\n", f);
        }
        fputs("</table></details>\n", f);
    }
}

static void draw_throughput(FILE *f, const json_t *g)
{
    const json_t *m = json_object_get(g, "metrics"), *s = json_object_get(g, "settings");
    fputs("<table class=\"throughput\"><tr><th></th><th>median tok/s</th><th>interval</th>"
          "<th>floor</th><th>min</th><th>max</th><th>cv</th><th>runs (tok/s)</th></tr>\n",
          f);
    static const char *const ph[] = {"prefill", "decode"};
    static const char *const floor_key[] = {"min_prefill_tps", "min_decode_tps"};
    static const char *const run_key[] = {"prefill_tps", "decode_tps"};
    for (int k = 0; k < 2; k++) {
        const json_t *x = json_object_get(m, ph[k]);
        if (!x)
            continue;
        fprintf(f, "<tr><th>%s</th><td class=\"num\">", ph[k]);
        html_num(f, html_onum(x, "median_tps"));
        fputs("</td><td class=\"num\">", f);
        html_num(f, html_onum(x, "ci_lo_tps"));
        fputs("&ndash;", f);
        html_num(f, html_onum(x, "ci_hi_tps"));
        fputs("</td><td class=\"num\">", f);
        html_json(f, json_object_get(s, floor_key[k]));
        fputs("</td><td class=\"num\">", f);
        html_num(f, html_onum(x, "min_tps"));
        fputs("</td><td class=\"num\">", f);
        html_num(f, html_onum(x, "max_tps"));
        fputs("</td><td class=\"num\">", f);
        html_num(f, html_onum(x, "cv"));
        fputs("</td><td class=\"mono\">", f);
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(m, "runs"), i, v)
        {
            fputs(i ? ", " : "", f);
            html_num(f, html_onum(v, run_key[k]));
        }
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n<p class=\"muted\">", f);
    fputs("load ", f);
    html_num(f, html_onum(m, "load_s"));
    fputs(" s (not counted); ", f);
    html_json(f, json_object_get(m, "prompt_tokens"));
    fputs(" prompt tokens, ", f);
    html_json(f, json_object_get(m, "decode_tokens"));
    fputs(" decode tokens, warm-up ", f);
    html_json(f, json_object_get(m, "warmup"));
    fputs(" discarded; host-starved runs ", f);
    html_json(f, json_object_get(m, "starved_runs"));
    fputs(" (", f);
    html_json(f, json_object_get(m, "starvation"));
    fputs("); spot checks ", f);
    fprintf(f, "%zu", json_array_size(json_object_get(m, "spot")));
    fputs("; host ", f);
    html_json(f, json_object_get(m, "host"));
    fputs("; prompt path: ", f);
    html_json(f, json_object_get(m, "prompt_path"));
    fputs("</p>\n", f);
    const json_t *bl = json_object_get(m, "baseline"), *vs = json_object_get(m, "vs_baseline");
    if (bl) { /* issue 27 §2: this build against the baseline it was compared with */
        fputs("<p class=\"baseline\">baseline ", f);
        html_json(f, json_object_get(s, "baseline"));
        fputs(": ", f);
        if (vs)
            for (int k = 0; k < 2; k++) {
                const json_t *q = json_object_get(vs, ph[k]);
                fprintf(f, "%s%s ", k ? "; " : "", ph[k]);
                html_num(f, html_onum(q, "ratio"));
                fputs("&times; [", f);
                html_num(f, html_onum(q, "lo"));
                fputs("&ndash;", f);
                html_num(f, html_onum(q, "hi"));
                fputs("]", f);
            }
        else
            html_json(f, json_object_get(bl, json_object_get(bl, "refused") ? "refused" : "none"));
        fputs(" (receipt ", f);
        html_json(f, json_object_get(bl, "receipt"));
        fputs(", version ", f);
        html_json(f, json_object_get(bl, "version"));
        fputs(")</p>\n", f);
    }
}

static void draw_falsify(FILE *f, const json_t *g)
{
    const json_t *m = json_object_get(g, "metrics"), *s = json_object_get(g, "settings");
    const json_t *clean = json_object_get(m, "clean");
    if (clean) {
        fputs("<p>clean run (no fault): ", f);
        html_json(f, json_object_get(clean, "reason"));
        fputs("</p>\n", f);
    }
    fputs("<table class=\"faults\"><tr><th>fault</th><th>parity verdict</th>"
          "<th>fired witness (tap, layer, position)</th><th>hidden / route diffs</th>"
          "<th>rejected by</th></tr>\n",
          f);
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(m, "faults"), i, x)
    {
        const json_t *w = json_object_get(x, "witness"), *p = json_object_get(x, "parity");
        const char *v = html_ostr(p, "verdict");
        fprintf(f, "<tr%s><td>", v && !strcmp(v, "FAIL") ? "" : " class=\"bad\"");
        html_put(f, html_ostr(x, "fault"));
        fputs("</td><td>", f);
        html_put(f, v ? v : "?");
        fputs("</td><td>", f);
        if (w) {
            html_json(f, json_object_get(w, "tap"));
            fputs(", layer ", f);
            html_json(f, json_object_get(w, "layer"));
            fputs(", position ", f);
            html_json(f, json_object_get(w, "position"));
        } else {
            fputs("<b>did not fire</b>", f);
        }
        fputs("</td><td class=\"num\">", f);
        html_json(f, json_object_get(w, "hidden_diffs"));
        fputs(" / ", f);
        html_json(f, json_object_get(w, "route_diffs"));
        fputs("</td><td>", f);
        html_json(f, json_object_get(x, "rejected_by"));
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
    const json_t *kinds = json_object_get(json_object_get(m, "sweep"), "kinds");
    if (!json_array_size(kinds))
        return;
    fputs("<table class=\"sweep\"><tr><th>fault (sweep)</th><th>samples</th><th>detected</th>"
          "<th>escapes</th><th>no-ops</th><th>detection rate</th><th>min_detection</th></tr>\n",
          f);
    double min_det = html_onum(s, "min_detection");
    json_array_foreach(kinds, i, x)
    {
        double det = html_onum(x, "detected"), esc = html_onum(x, "escapes");
        double rate = det + esc > 0 ? det / (det + esc) : NAN;
        fprintf(f, "<tr%s><td>", isfinite(rate) && rate >= min_det ? "" : " class=\"bad\"");
        html_put(f, html_ostr(x, "fault"));
        fprintf(f, "</td><td class=\"num\">%zu</td><td class=\"num\">",
                json_array_size(json_object_get(x, "points")));
        html_num(f, det);
        fputs("</td><td class=\"num\">", f);
        html_num(f, esc);
        fputs("</td><td class=\"num\">", f);
        html_num(f, html_onum(x, "noops"));
        fputs("</td><td class=\"num\">", f);
        if (isfinite(rate))
            fprintf(f, "%.1f%%", 100 * rate);
        else
            fputs("&mdash;", f);
        fputs("</td><td class=\"num\">", f);
        html_num(f, min_det);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* Each gate's own drawer, by its row (NULL: the checks table alone; golden's drawer takes the
 * tokenizer and the model too and is called by id in html_gate_draw). A new gate adds its row
 * here, or the build stops at the assertion. */
static void (*const DRAWERS[])(FILE *, const json_t *) = {
    [GATE_ID_CAPABILITY] = NULL,      [GATE_ID_PARITY] = draw_parity,
    [GATE_ID_GOLDEN] = NULL,          [GATE_ID_THROUGHPUT] = draw_throughput,
    [GATE_ID_FALSIFY] = draw_falsify, [GATE_ID_CONSISTENCY] = NULL,
    [GATE_ID_ANCHOR] = NULL,
};
_Static_assert(sizeof DRAWERS / sizeof DRAWERS[0] == GATE_COUNT, "DRAWERS: one entry per gate");

/* The audit view of `gate receipt show`: the gate judged again from what the receipt records (the
 * matrix's state is the ladder's judgement, not this). */
void html_gate_draw(FILE *f, const char *name, const char *mode, const json_t *g,
                    const struct tok *t, const char *model_path)
{
    json_t *checks = NULL;
    char why[512] = "";
    enum gate_verdict v = gatedef_judge(name, mode ? mode : "", json_object_get(g, "settings"),
                                        json_object_get(g, "metrics"), &checks, why, sizeof why);
    const char *vc = gate_verdict_name(v);
    const char *recorded = html_ostr(g, "verdict");
    /* gate names come from the receipt: only letters and '_' go into the class */
    char cls[24];
    size_t j = 0;
    for (const char *c = name; *c && j + 1 < sizeof cls; c++)
        if ((*c >= 'a' && *c <= 'z') || *c == '_')
            cls[j++] = *c;
    cls[j] = '\0';
    /* a failed gate and the parity plot are open; the rest folds away */
    fprintf(f, "<details class=\"gate gate-%s v-%s\"%s><summary>", cls, vc,
            v == GATE_PASS && strcmp(name, "parity") ? "" : " open");
    html_put(f, name);
    fputs(" ", f);
    html_badge(f, vc, NULL, 0);
    const char *summary = v == GATE_PASS ? html_ostr(json_object_get(g, "metrics"), "reason") : why;
    if (summary && *summary) {
        fputs(" <span class=\"reason\">", f);
        html_put(f, summary);
        fputs("</span>", f);
    }
    fputs("</summary>\n", f);
    if (!recorded || strcmp(recorded, vc)) {
        fputs("<p class=\"note\">the receipt records ", f);
        html_put(f, recorded ? recorded : "no verdict");
        fputs(" for this gate; its numbers say ", f);
        fputs(vc, f);
        fputs(".</p>\n", f);
    }
    if (json_object_get(json_object_get(g, "metrics"), "error")) {
        fputs("<p class=\"unverified\">error: ", f);
        html_json(f, json_object_get(json_object_get(g, "metrics"), "error"));
        fputs("</p>\n", f);
    }
    draw_checks(f, checks);
    json_decref(checks);
    const struct gate_def *d = gatedef_find(name);
    const int id = d ? (int)(d - GATE_DEFS) : -1;
    if (id == GATE_ID_GOLDEN) { /* its drawer also needs the tokenizer and the model */
        if (json_object_get(json_object_get(g, "metrics"), "cases"))
            draw_golden(f, g, t, model_path);
    } else if (id >= 0 && DRAWERS[id]) {
        DRAWERS[id](f, g);
    }
    fputs("</details>\n", f);
}
