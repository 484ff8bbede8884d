/* report_html.c — `gate report`: the release as one static HTML page (report_html.h has the
 * contracts, docs/reports.md "HTML report" the layout).
 *
 * The page, top to bottom: a red banner when the store cannot be believed (TAMPERED), the
 * verdict line, the build and ladder identity, the release matrix (one row per required cell,
 * excluded cell and anchor case, coloured by state, linking to the row's section) and a
 * model x host/mode grid of the same states, then one section per row with the receipt that
 * decides it and each gate's checks (value, operator, threshold) plus what the gate needs to be
 * read: parity a plot of cosine and KL per position with the thresholds and the argmax flips
 * marked, and the localization when it failed; golden the greedy tokens side by side; throughput
 * the runs and their spread; falsify each fault's witness and the sweep's detection rates.
 * Invariants: no JavaScript, nothing fetched; every receipt-, ladder- or store-borne string
 * goes through put() (cli_safe, then HTML entities); numbers are printed by pnum() (non-finite
 * as "NaN" / "Inf", as receipts record them).
 * Start reading: report_html_write(), then draw_row().
 */
#include "cli/report_html.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic.h"
#include "cli/cli.h"
#include "cli/cmd_tokenize.h"
#include "cli/report.h"
#include "engine/tokenizer.h"
#include "harness/gatedef.h"
#include "harness/identity.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "oracles/gates.h"
#include "receipts/receipt.h"
#include "receipts/store.h"

/* Rows drawn between two progress lines. */
#define PROGRESS_EVERY 16
/* Per-position rows listed in a parity table (the plot shows every position). */
#define MAX_POSITION_ROWS 1024

/* ---- escaping and numbers -------------------------------------------------------------------- */

/* Text that is already safe for a terminal (valid UTF-8, no controls: cli_safe() or
 * cmd_tokenize_escape() output) as HTML: & < > " ' as entities. */
static void put_entities(FILE *f, const char *buf)
{
    for (const char *p = buf; *p; p++) {
        switch (*p) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&#39;", f);
            break;
        default:
            fputc(*p, f);
        }
    }
}

/* s as HTML text or a quoted attribute value: cli_safe() first (controls, DEL, C1 and invalid
 * UTF-8 become "\xNN"), then & < > " ' as entities. s may be NULL ("(null)"). */
static void put(FILE *f, const char *s)
{
    size_t n = 4 * strlen(s ? s : "(null)") + 1;
    char small[1024], *buf = n <= sizeof small ? small : malloc(n);
    if (!buf) {
        fputs("(out of memory)", f);
        return;
    }
    cli_safe(s, buf, n);
    put_entities(f, buf);
    if (buf != small)
        free(buf);
}

/* A number as receipts show it: %.6g, or NaN / Inf / -Inf. */
static void pnum(FILE *f, double v)
{
    if (isnan(v))
        fputs("NaN", f);
    else if (isinf(v))
        fputs(v > 0 ? "Inf" : "-Inf", f);
    else
        fprintf(f, "%.6g", v);
}

/* A JSON value of a metric (number, "NaN"/"Inf" string) as a double; NAN when absent. */
static double jnum(const json_t *v)
{
    double d = NAN;
    if (gate_json_num(v, &d))
        return NAN;
    return d;
}

static double onum(const json_t *o, const char *key)
{
    return jnum(json_object_get(o, key));
}

/* Any JSON scalar: numbers through pnum, strings escaped, booleans as words, null as "—";
 * arrays and objects compact, escaped. */
static void pjson(FILE *f, const json_t *v)
{
    if (!v || json_is_null(v)) {
        fputs("&mdash;", f);
    } else if (json_is_string(v)) {
        put(f, json_string_value(v));
    } else if (json_is_number(v)) {
        pnum(f, json_number_value(v));
    } else if (json_is_boolean(v)) {
        fputs(json_is_true(v) ? "true" : "false", f);
    } else {
        char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        put(f, s ? s : "(out of memory)");
        free(s);
    }
}

static const char *ostr(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* ---- the page's frame -------------------------------------------------------------------- */

static const char CSS[] =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;"
    "color:#1f2328;background:#fff;max-width:1200px}\n"
    "h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;margin:28px 0 8px;"
    "border-bottom:1px solid #d0d7de}h3{font-size:16px;margin:0 0 6px}\n"
    "table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid #d0d7de;"
    "padding:3px 8px;text-align:left;vertical-align:top}th{background:#f6f8fa}\n"
    "td.num{text-align:right;font-variant-numeric:tabular-nums}\n"
    "code,.mono{font-family:ui-monospace,'DejaVu Sans Mono',monospace;font-size:12px}\n"
    ".st{font-weight:700;white-space:nowrap}.st a{color:inherit}\n"
    ".st-PASS{background:#1a7f37;color:#fff}.st-FAIL{background:#cf222e;color:#fff}\n"
    ".st-FLAKY{background:#bc4c00;color:#fff}.st-ERROR{background:#82071e;color:#fff}\n"
    ".st-MISSING{background:#6e7781;color:#fff}.st-STALE{background:#d4a72c;color:#1f2328}\n"
    ".st-UNTRUSTED{background:#8250df;color:#fff}.st-TAMPERED{background:#000;color:#ff8182}\n"
    ".st-EXCLUDED{background:#d0d7de;color:#1f2328}.st-NONE{background:#fff;color:#8c959f}\n"
    "span.st{padding:1px 6px;border-radius:3px}\n"
    ".banner{padding:12px 16px;margin:0 0 16px;font-weight:700;border-radius:4px}\n"
    ".banner-tampered{background:#cf222e;color:#fff;font-size:16px}\n"
    ".banner-ok{background:#dafbe1;color:#1a7f37;border:1px solid #1a7f37}\n"
    ".banner-blocked{background:#ffebe9;color:#cf222e;border:1px solid #cf222e}\n"
    ".note{background:#fff8c5;border:1px solid #d4a72c;padding:6px 10px;margin:6px 0}\n"
    ".unverified{background:#ffebe9;border:1px solid #cf222e;padding:6px 10px;margin:6px 0;"
    "font-weight:700;color:#82071e}\n"
    "section.row{border:1px solid #d0d7de;border-radius:6px;padding:12px 16px;margin:16px 0}\n"
    "details{margin:6px 0}details>summary{cursor:pointer;font-weight:600}\n"
    "details.gate{border-left:4px solid #d0d7de;padding-left:10px}\n"
    "details.v-PASS{border-left-color:#1a7f37}details.v-FAIL{border-left-color:#cf222e}\n"
    "details.v-ERROR{border-left-color:#82071e}\n"
    "tr.bad td{background:#ffebe9}tr.tie td{background:#fff8c5}\n"
    ".tok{font-family:ui-monospace,'DejaVu Sans Mono',monospace;font-size:12px;"
    "white-space:pre;border:1px solid #d0d7de;border-radius:2px;padding:0 2px;"
    "background:#f6f8fa}\n"
    "tr.diff .tok{background:#ffebe9;border-color:#cf222e}\n"
    "svg.plot{border:1px solid #d0d7de;background:#fff;margin:6px 0}\n"
    ".muted{color:#656d76}\n";

static void head(FILE *f, const struct ladder *l)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n", f);
    /* belt and braces: even a page someone edits cannot load anything from elsewhere */
    fputs("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none';"
          " style-src 'unsafe-inline'; img-src data:\">\n",
          f);
    fputs("<title>gate release report: ", f);
    put(f, l->name);
    fputc(' ', f);
    put(f, l->version);
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n", CSS);
}

/* A state badge: <td> (cell 1) or <span>, linked to href when not NULL. */
static void badge(FILE *f, const char *state, const char *href, int cell)
{
    fprintf(f, "<%s class=\"st st-%s\">", cell ? "td" : "span", state);
    if (href)
        fprintf(f, "<a href=\"#%s\">%s</a>", href, state);
    else
        fputs(state, f);
    fprintf(f, "</%s>", cell ? "td" : "span");
}

/* ---- which receipt each row shows ------------------------------------------------------------ */

/* The newest receipt id per row, by the store's cell column (only to find evidence to show for
 * a row that no counted receipt decides: MISSING, EXCLUDED, TAMPERED). */
struct newest {
    const struct ladder *l;
    const struct release_result *r;
    int64_t *cells, *excluded, *anchors;
};

static int on_newest(void *ctx, const struct store_row *row)
{
    struct newest *x = ctx;
    for (int i = 0; i < x->r->n_cells; i++)
        if (!strcmp(row->cell, x->r->cells[i].name))
            x->cells[i] = row->id;
    for (int i = 0; i < x->r->n_excluded; i++)
        if (!strcmp(row->cell, x->r->excluded[i].name))
            x->excluded[i] = row->id;
    for (int i = 0; i < x->r->n_anchors; i++) {
        size_t n = strlen(x->r->anchors[i].name), m = strlen(row->cell);
        if (!strncmp(row->cell, x->r->anchors[i].name, n) && row->cell[n] == '/' &&
            m > n + strlen("/" RUN_ANCHOR_MODE) &&
            !strcmp(row->cell + m - strlen("/" RUN_ANCHOR_MODE), "/" RUN_ANCHOR_MODE))
            x->anchors[i] = row->id;
    }
    return 0;
}

/* One receipt as read back by store_get(). */
struct loaded {
    json_t *payload; /* parsed; NULL when it does not parse */
    int verified;    /* signature, chain and columns all verify */
    char problem[256];
    char created_at[32];
    int imported;
};

static int on_get(void *ctx, const struct store_row *row)
{
    struct loaded *x = ctx;
    struct gate_err e = {0};
    x->verified = row->sig_ok && row->chain_ok && row->columns_ok;
    snprintf(x->problem, sizeof x->problem, "%s", row->problem ? row->problem : "");
    snprintf(x->created_at, sizeof x->created_at, "%s", row->created_at);
    x->imported = row->imported;
    if (receipt_parse(row->payload, row->len, &x->payload, &e) != 0)
        x->payload = NULL;
    return 0;
}

/* ---- gates ----------------------------------------------------------------------------------- */

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
        put(f, ostr(c, "metric"));
        fputs("</td><td class=\"num\">", f);
        pjson(f, json_object_get(c, "value"));
        fputs("</td><td>", f);
        put(f, ostr(c, "op"));
        fputs("</td><td class=\"num\">", f);
        pjson(f, json_object_get(c, "threshold"));
        fprintf(f, "</td><td>%s</td></tr>\n", pass ? "ok" : "<b>FAILED</b>");
    }
    fputs("</table>\n", f);
}

/* y of value v on a panel from top to bottom for [lo, hi], clamped to the panel. */
static double yof(double v, double lo, double hi, double top, double bottom)
{
    double t = hi > lo ? (v - lo) / (hi - lo) : 0.5;
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    return bottom - t * (bottom - top);
}

/* log10 of a KL value for the plot: 0 and below drawn at the floor. */
static double klog(double v, double floor_log)
{
    return v > 0 && isfinite(v) ? fmax(log10(v), floor_log) : floor_log;
}

/* The parity plot: cosine per position (linear) above, KL per position (log10) below, the
 * thresholds as dashed lines, TIE_FLIP / WRONG / NONFINITE positions and route ties marked. */
static void parity_plot(FILE *f, const json_t *m, const json_t *settings)
{
    const json_t *pp = json_object_get(m, "per_position");
    const json_t *cos = json_object_get(pp, "cosine"), *kld = json_object_get(pp, "kld");
    const json_t *cls = json_object_get(pp, "class"), *rg = json_object_get(pp, "route_deficit");
    size_t n = json_array_size(cos);
    if (n == 0 || json_array_size(kld) != n) {
        fputs("<p class=\"muted\">no per-position numbers recorded: no plot</p>\n", f);
        return;
    }
    double min_cos = onum(settings, "min_cosine"), max_kld = onum(settings, "max_kld");
    double max_mean = onum(settings, "max_mean_kld");
    double cmin = 1, kmax = 0;
    for (size_t i = 0; i < n; i++) {
        double c = jnum(json_array_get(cos, i)), k = jnum(json_array_get(kld, i));
        if (isfinite(c) && c < cmin)
            cmin = c;
        if (isfinite(k) && k > kmax)
            kmax = k;
    }
    if (isfinite(min_cos) && min_cos < cmin)
        cmin = min_cos;
    double clo = cmin - (1 - cmin) * 0.15, chi = 1 + (1 - cmin) * 0.05;
    if (!(chi > clo)) {
        clo = 0.999;
        chi = 1.0001;
    }
    double top_k = fmax(kmax, isfinite(max_kld) ? max_kld : 0);
    double khi = top_k > 0 ? ceil(log10(top_k)) + 1 : 0, klo = fmin(-10, khi - 4);
    const double W = 960, X0 = 70, X1 = 940, T1 = 24, B1 = 170, T2 = 214, B2 = 360, H = 400;
#define PX(i) (X0 + (X1 - X0) * (n > 1 ? (double)(i) / (double)(n - 1) : 0.5))
    fprintf(f,
            "<svg class=\"plot plot-parity\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\""
            " height=\"%g\" viewBox=\"0 0 %g %g\" role=\"img\">\n",
            W, H, W, H);
    fprintf(f, "<title>parity per position: cosine and KL divergence, %zu positions</title>\n", n);
    /* frames and axis labels */
    fprintf(
        f,
        "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#d0d7de\"/>\n"
        "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#d0d7de\"/>\n",
        X0, T1, X1 - X0, B1 - T1, X0, T2, X1 - X0, B2 - T2);
    fprintf(f,
            "<text x=\"%g\" y=\"16\" font-size=\"12\" fill=\"#1f2328\">cosine of logits"
            " (linear)</text>\n"
            "<text x=\"%g\" y=\"206\" font-size=\"12\" fill=\"#1f2328\">KL divergence"
            " (log10)</text>\n"
            "<text x=\"%g\" y=\"392\" font-size=\"12\" fill=\"#1f2328\" text-anchor=\"middle\">"
            "position</text>\n",
            X0, X0, (X0 + X1) / 2);
    for (int t = 0; t <= 4; t++) {
        double v = clo + (1 - clo) * t / 4, y = yof(v, clo, chi, T1, B1); /* cosine <= 1 */
        fprintf(f,
                "<text x=\"%g\" y=\"%.1f\" font-size=\"10\" fill=\"#656d76\""
                " text-anchor=\"end\">%.6g</text>\n",
                X0 - 4, y + 3, v);
    }
    int step = (int)ceil((khi - klo) / 6);
    step = step < 1 ? 1 : step;
    for (double e = klo; e <= khi + 1e-9; e += step) {
        double y = yof(e, klo, khi, T2, B2);
        fprintf(f,
                "<text x=\"%g\" y=\"%.1f\" font-size=\"10\" fill=\"#656d76\""
                " text-anchor=\"end\">1e%d</text>\n"
                "<line x1=\"%g\" x2=\"%g\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eaeef2\"/>\n",
                X0 - 4, y + 3, (int)e, X0, X1, y, y);
    }
    for (int t = 0; t <= 4; t++) {
        size_t i = n > 1 ? (size_t)((double)(n - 1) * t / 4) : 0;
        fprintf(f,
                "<text x=\"%.1f\" y=\"376\" font-size=\"10\" fill=\"#656d76\""
                " text-anchor=\"middle\">%zu</text>\n",
                PX(i), i);
    }
    /* thresholds */
    if (isfinite(min_cos)) {
        double y = yof(min_cos, clo, chi, T1, B1);
        fprintf(f,
                "<line class=\"threshold\" x1=\"%g\" x2=\"%g\" y1=\"%.1f\" y2=\"%.1f\""
                " stroke=\"#cf222e\" stroke-dasharray=\"6 4\"/>\n"
                "<text x=\"%g\" y=\"%.1f\" font-size=\"10\" fill=\"#cf222e\""
                " text-anchor=\"end\">min_cosine %.6g</text>\n",
                X0, X1, y, y, X1 - 4, y - 3, min_cos);
    }
    const double kth[2] = {max_kld, max_mean};
    const char *kname[2] = {"max_kld", "max_mean_kld"}, *kcol[2] = {"#cf222e", "#bc4c00"};
    for (int t = 0; t < 2; t++) {
        if (!(isfinite(kth[t]) && kth[t] > 0))
            continue;
        double y = yof(klog(kth[t], klo), klo, khi, T2, B2);
        fprintf(f,
                "<line class=\"threshold\" x1=\"%g\" x2=\"%g\" y1=\"%.1f\" y2=\"%.1f\""
                " stroke=\"%s\" stroke-dasharray=\"6 4\"/>\n"
                "<text x=\"%g\" y=\"%.1f\" font-size=\"10\" fill=\"%s\" text-anchor=\"end\">"
                "%s %.3g</text>\n",
                X0, X1, y, y, kcol[t], X1 - 4, y - 3, kcol[t], kname[t], kth[t]);
    }
    /* the two series */
    const json_t *ser[2] = {cos, kld};
    for (int s = 0; s < 2; s++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
                s ? "#0969da" : "#1a7f37");
        for (size_t i = 0; i < n; i++) {
            double v = jnum(json_array_get(ser[s], i));
            double y = s ? yof(klog(v, klo), klo, khi, T2, B2)
                         : yof(isfinite(v) ? v : clo, clo, chi, T1, B1);
            fprintf(f, "%.1f,%.1f ", PX(i), y);
        }
        fputs("\"/>\n", f);
    }
    /* marks: argmax classes other than MATCH, and positions where the route-tie replay forced
     * the judge to the subject's expert set */
    int n_tie = 0, n_wrong = 0, n_nonfinite = 0, n_forced = 0;
    for (size_t i = 0; i < n; i++) {
        const char *c = json_string_value(json_array_get(cls, i));
        double deficit = jnum(json_array_get(rg, i)); /* null: nothing forced there */
        double yc = yof(jnum(json_array_get(cos, i)), clo, chi, T1, B1);
        double yk = yof(klog(jnum(json_array_get(kld, i)), klo), klo, khi, T2, B2);
        const char *what = NULL, *col = NULL, *cl = NULL;
        if (c && !strcmp(c, "TIE_FLIP")) {
            what = "TIE_FLIP (argmax flipped at a near tie of the judge)";
            col = "#bf8700";
            cl = "mark-tie";
            n_tie++;
        } else if (c && !strcmp(c, "WRONG")) {
            what = "WRONG (argmax differs)";
            col = "#cf222e";
            cl = "mark-wrong";
            n_wrong++;
        } else if (c && !strcmp(c, "NONFINITE")) {
            what = "NONFINITE logits";
            col = "#82071e";
            cl = "mark-nonfinite";
            n_nonfinite++;
        }
        if (what) {
            fprintf(f,
                    "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%g\" y2=\"%g\" stroke=\"%s\""
                    " stroke-opacity=\"0.35\"/>\n"
                    "<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>"
                    "position %zu: %s</title></circle>\n"
                    "<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>"
                    "position %zu: %s</title></circle>\n",
                    PX(i), PX(i), T1, B2, col, cl, PX(i), yc, col, i, what, cl, PX(i), yk, col, i,
                    what);
        }
        if (isfinite(deficit)) {
            n_forced++;
            fprintf(f,
                    "<rect class=\"mark-route-tie\" x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\""
                    " transform=\"rotate(45 %.1f %.1f)\" fill=\"#8250df\"><title>position %zu:"
                    " judge replayed with the subject's expert set at a router near tie (deficit"
                    " %.3g)</title></rect>\n",
                    PX(i) - 3.5, B1 - 10, PX(i), B1 - 6.5, i, deficit);
        }
    }
    fputs("</svg>\n", f);
#undef PX
    fprintf(f,
            "<p class=\"muted\">green: cosine per position; blue: KL per position; dashed: the"
            " ladder's thresholds. Marked: %d TIE_FLIP (amber), %d WRONG (red), %d NONFINITE"
            " (dark red), %d judged against the route-tie replay (violet diamonds).</p>\n",
            n_tie, n_wrong, n_nonfinite, n_forced);
}

/* The localization of a failed parity run: first diverging layer, and per layer the hidden
 * state's cosine and (MoE) the routing agreement. */
static void draw_localization(FILE *f, const json_t *loc)
{
    if (!json_is_object(loc))
        return;
    fputs("<div class=\"localization\"><h4>localization</h4>\n<p>first diverging layer: <b>", f);
    pjson(f, json_object_get(loc, "first_bad_layer"));
    fputs("</b>, at position ", f);
    pjson(f, json_object_get(loc, "at_position"));
    fputs("</p>\n<table><tr><th>layer</th><th>hidden cosine (mean)</th><th>min</th>"
          "<th>at position</th><th>routing agreement</th><th>same / different expert sets</th>"
          "<th>different at a near tie</th><th>judge router gap min</th></tr>\n",
          f);
    size_t i;
    json_t *x;
    json_t *layers = json_object_get(loc, "layers");
    json_array_foreach(layers, i, x)
    {
        double same = onum(x, "same_expert_set"), diff = onum(x, "different_expert_set");
        int moe = json_object_get(x, "same_expert_set") != NULL;
        int bad = json_equal(json_object_get(x, "layer"), json_object_get(loc, "first_bad_layer"));
        fprintf(f, "<tr%s><td class=\"num\">", bad ? " class=\"bad\"" : "");
        pjson(f, json_object_get(x, "layer"));
        fputs("</td><td class=\"num\">", f);
        pnum(f, onum(x, "hidden_cosine"));
        fputs("</td><td class=\"num\">", f);
        pnum(f, onum(x, "hidden_cosine_min"));
        fputs("</td><td class=\"num\">", f);
        pjson(f, json_object_get(x, "hidden_cosine_min_position"));
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
        pjson(f, json_object_get(x, "different_near_tie"));
        fputs("</td><td class=\"num\">", f);
        pjson(f, json_object_get(x, "ref_router_gap_min"));
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
        pjson(f, json_object_get(m, keys[k]));
    }
    fputs("</p>\n", f);
    parity_plot(f, m, s);
    const json_t *nz = json_object_get(m, "noise"), *mg = json_object_get(nz, "margin");
    if (json_is_object(mg)) { /* each threshold over the backend's documented noise */
        fputs("<p class=\"margins\">thresholds over the ", f);
        put(f, ostr(nz, "backend"));
        fputs(" backend's documented noise: ", f);
        const char *k;
        const json_t *v;
        int first = 1;
        json_object_foreach((json_t *)mg, k, v)
        {
            fprintf(f, "%s", first ? "" : ", ");
            first = 0;
            put(f, k);
            if (json_is_null(v))
                fputs(" (not measured)", f);
            else
                fprintf(f, " %.3gx", jnum(v));
        }
        fputs(" (", f);
        put(f, ostr(nz, "source"));
        fputs(")</p>\n", f);
    }
    const char *loose = ostr(s, "loose_reason");
    if (loose && loose[0]) {
        fputs("<p class=\"note loose\">looser than the noise allows, by the ladder's reason: ", f);
        put(f, loose);
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
        put(f, c ? c : "?");
        fputs("</td>", f);
        for (size_t k = 0; k < sizeof cols / sizeof cols[0]; k++) {
            fputs("<td class=\"num\">", f);
            pjson(f, json_array_get(json_object_get(pp, cols[k]), i));
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
            put_entities(f, shown); /* already escaped once, as `gate tokenize` shows it */
        else
            fputs("?", f);
        free(bytes);
        free(shown);
    } else {
        pjson(f, id);
    }
    fputs("</span>", f);
}

static void draw_golden(FILE *f, const json_t *g, const struct tok *t, const char *model_path)
{
    const json_t *m = json_object_get(g, "metrics");
    const json_t *by = json_object_get(m, "recorded_by");
    fputs("<p>goldens: ", f);
    pjson(f, json_object_get(m, "source"));
    if (by) {
        fputs(" &mdash; recorded by ", f);
        pjson(f, json_object_get(by, "engine"));
        fputs(" ", f);
        pjson(f, json_object_get(by, "backend"));
        fputs(" at commit <code>", f);
        pjson(f, json_object_get(by, "git_commit"));
        fputs("</code> on ", f);
        pjson(f, json_object_get(by, "date"));
    }
    fputs("; pieces ", f);
    if (t) {
        fputs("decoded with the tokenizer of <code>", f);
        put(f, model_path);
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
        double fd = onum(c, "first_diff");
        int same = fd < 0;
        fprintf(f, "<details class=\"golden-case\"%s><summary>case ", same ? "" : " open");
        put(f, ostr(c, "name"));
        fputs(": ", f);
        if (same)
            fputs("identical", f);
        else {
            fputs("<b>first difference at token ", f);
            pnum(f, fd);
            fputs("</b>", f);
        }
        fputs(" (", f);
        pjson(f, json_object_get(c, "prompt_tokens"));
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
            pjson(f, a);
            fputs("</td><td>", f);
            if (a)
                piece(f, t, a);
            fputs("</td><td class=\"num\">", f);
            pjson(f, b);
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
        pnum(f, onum(x, "median_tps"));
        fputs("</td><td class=\"num\">", f);
        pnum(f, onum(x, "ci_lo_tps"));
        fputs("&ndash;", f);
        pnum(f, onum(x, "ci_hi_tps"));
        fputs("</td><td class=\"num\">", f);
        pjson(f, json_object_get(s, floor_key[k]));
        fputs("</td><td class=\"num\">", f);
        pnum(f, onum(x, "min_tps"));
        fputs("</td><td class=\"num\">", f);
        pnum(f, onum(x, "max_tps"));
        fputs("</td><td class=\"num\">", f);
        pnum(f, onum(x, "cv"));
        fputs("</td><td class=\"mono\">", f);
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(m, "runs"), i, v)
        {
            fputs(i ? ", " : "", f);
            pnum(f, onum(v, run_key[k]));
        }
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n<p class=\"muted\">", f);
    fputs("load ", f);
    pnum(f, onum(m, "load_s"));
    fputs(" s (not counted); ", f);
    pjson(f, json_object_get(m, "prompt_tokens"));
    fputs(" prompt tokens, ", f);
    pjson(f, json_object_get(m, "decode_tokens"));
    fputs(" decode tokens, warm-up ", f);
    pjson(f, json_object_get(m, "warmup"));
    fputs(" discarded; host-starved runs ", f);
    pjson(f, json_object_get(m, "starved_runs"));
    fputs(" (", f);
    pjson(f, json_object_get(m, "starvation"));
    fputs("); spot checks ", f);
    fprintf(f, "%zu", json_array_size(json_object_get(m, "spot")));
    fputs("; host ", f);
    pjson(f, json_object_get(m, "host"));
    fputs("; prompt path: ", f);
    pjson(f, json_object_get(m, "prompt_path"));
    fputs("</p>\n", f);
    const json_t *bl = json_object_get(m, "baseline"), *vs = json_object_get(m, "vs_baseline");
    if (bl) { /* issue 27 §2: this build against the baseline it was compared with */
        fputs("<p class=\"baseline\">baseline ", f);
        pjson(f, json_object_get(s, "baseline"));
        fputs(": ", f);
        if (vs)
            for (int k = 0; k < 2; k++) {
                const json_t *q = json_object_get(vs, ph[k]);
                fprintf(f, "%s%s ", k ? "; " : "", ph[k]);
                pnum(f, onum(q, "ratio"));
                fputs("&times; [", f);
                pnum(f, onum(q, "lo"));
                fputs("&ndash;", f);
                pnum(f, onum(q, "hi"));
                fputs("]", f);
            }
        else
            pjson(f, json_object_get(bl, json_object_get(bl, "refused") ? "refused" : "none"));
        fputs(" (receipt ", f);
        pjson(f, json_object_get(bl, "receipt"));
        fputs(", version ", f);
        pjson(f, json_object_get(bl, "version"));
        fputs(")</p>\n", f);
    }
}

static void draw_falsify(FILE *f, const json_t *g)
{
    const json_t *m = json_object_get(g, "metrics"), *s = json_object_get(g, "settings");
    const json_t *clean = json_object_get(m, "clean");
    if (clean) {
        fputs("<p>clean run (no fault): ", f);
        pjson(f, json_object_get(clean, "reason"));
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
        const char *v = ostr(p, "verdict");
        fprintf(f, "<tr%s><td>", v && !strcmp(v, "FAIL") ? "" : " class=\"bad\"");
        put(f, ostr(x, "fault"));
        fputs("</td><td>", f);
        put(f, v ? v : "?");
        fputs("</td><td>", f);
        if (w) {
            pjson(f, json_object_get(w, "tap"));
            fputs(", layer ", f);
            pjson(f, json_object_get(w, "layer"));
            fputs(", position ", f);
            pjson(f, json_object_get(w, "position"));
        } else {
            fputs("<b>did not fire</b>", f);
        }
        fputs("</td><td class=\"num\">", f);
        pjson(f, json_object_get(w, "hidden_diffs"));
        fputs(" / ", f);
        pjson(f, json_object_get(w, "route_diffs"));
        fputs("</td><td>", f);
        pjson(f, json_object_get(x, "rejected_by"));
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
    const json_t *kinds = json_object_get(json_object_get(m, "sweep"), "kinds");
    if (!json_array_size(kinds))
        return;
    fputs("<table class=\"sweep\"><tr><th>fault (sweep)</th><th>samples</th><th>detected</th>"
          "<th>escapes</th><th>no-ops</th><th>detection rate</th><th>min_detection</th></tr>\n",
          f);
    double min_det = onum(s, "min_detection");
    json_array_foreach(kinds, i, x)
    {
        double det = onum(x, "detected"), esc = onum(x, "escapes");
        double rate = det + esc > 0 ? det / (det + esc) : NAN;
        fprintf(f, "<tr%s><td>", isfinite(rate) && rate >= min_det ? "" : " class=\"bad\"");
        put(f, ostr(x, "fault"));
        fprintf(f, "</td><td class=\"num\">%zu</td><td class=\"num\">",
                json_array_size(json_object_get(x, "points")));
        pnum(f, det);
        fputs("</td><td class=\"num\">", f);
        pnum(f, esc);
        fputs("</td><td class=\"num\">", f);
        pnum(f, onum(x, "noops"));
        fputs("</td><td class=\"num\">", f);
        if (isfinite(rate))
            fprintf(f, "%.1f%%", 100 * rate);
        else
            fputs("&mdash;", f);
        fputs("</td><td class=\"num\">", f);
        pnum(f, min_det);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* One gate of a receipt, judged again through the gate table from its recorded settings and
 * metrics (the audit view of `gate receipt show`; the matrix's state is the ladder's judgement):
 * the re-derived verdict and reason, the recorded verdict when it differs, the error, the
 * checks, and the gate's own view. */
/* Each gate's own drawer, by its row (NULL: the checks table alone; golden's drawer takes the
 * tokenizer and the model too and is called by name in draw_gate). */
static void (*const DRAWERS[])(FILE *, const json_t *) = {
    [GATE_ID_CAPABILITY] = NULL,      [GATE_ID_PARITY] = draw_parity,
    [GATE_ID_GOLDEN] = NULL,          [GATE_ID_THROUGHPUT] = draw_throughput,
    [GATE_ID_FALSIFY] = draw_falsify, [GATE_ID_CONSISTENCY] = NULL,
    [GATE_ID_ANCHOR] = NULL,
};
_Static_assert(sizeof DRAWERS / sizeof DRAWERS[0] == GATE_COUNT, "DRAWERS: one entry per gate");

static void draw_gate(FILE *f, const char *name, const char *mode, const json_t *g,
                      const struct tok *t, const char *model_path)
{
    json_t *checks = NULL;
    char why[512] = "";
    enum gate_verdict v = gatedef_judge(name, mode ? mode : "", json_object_get(g, "settings"),
                                        json_object_get(g, "metrics"), &checks, why, sizeof why);
    const char *vc = gate_verdict_name(v);
    const char *recorded = ostr(g, "verdict");
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
    put(f, name);
    fputs(" ", f);
    badge(f, vc, NULL, 0);
    const char *summary = v == GATE_PASS ? ostr(json_object_get(g, "metrics"), "reason") : why;
    if (summary && *summary) {
        fputs(" <span class=\"reason\">", f);
        put(f, summary);
        fputs("</span>", f);
    }
    fputs("</summary>\n", f);
    if (!recorded || strcmp(recorded, vc)) {
        fputs("<p class=\"note\">the receipt records ", f);
        put(f, recorded ? recorded : "no verdict");
        fputs(" for this gate; its numbers say ", f);
        fputs(vc, f);
        fputs(".</p>\n", f);
    }
    if (json_object_get(json_object_get(g, "metrics"), "error")) {
        fputs("<p class=\"unverified\">error: ", f);
        pjson(f, json_object_get(json_object_get(g, "metrics"), "error"));
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

/* ---- rows ------------------------------------------------------------------------------------ */

struct page {
    FILE *f;
    const struct ladder *l;
    const struct release_result *r;
    struct store *st;
    struct newest nw;
    struct tok **toks; /* per ladder model, loaded on first use */
    int *tok_tried;
};

static const struct tok *model_tok(struct page *pg, int mi)
{
    if (mi < 0 || mi >= pg->l->n_models)
        return NULL;
    if (!pg->tok_tried[mi]) {
        struct gate_err e = {0};
        pg->tok_tried[mi] = 1;
        if (pg->l->models[mi].path && access(pg->l->models[mi].path, R_OK) == 0 &&
            cmd_tokenize_load(&pg->toks[mi], pg->l->models[mi].path, &e))
            pg->toks[mi] = NULL;
    }
    return pg->toks[mi];
}

static void draw_receipt(struct page *pg, const struct loaded *x, int64_t id, int mi)
{
    FILE *f = pg->f;
    const json_t *p = x->payload;
    if (!x->verified || pg->r->store_problem[0]) {
        fprintf(f, "<p class=\"unverified\">UNVERIFIED: receipt %" PRId64 " ", id);
        if (!x->verified) {
            fputs("does not verify (", f);
            put(f, x->problem[0] ? x->problem : "signature, chain or columns");
            fputs(")", f);
        } else {
            fputs("is in a store that cannot be believed", f);
        }
        fputs("; shown only to help find the damage.</p>\n", f);
    }
    if (!p) {
        fputs("<p class=\"unverified\">its payload does not parse.</p>\n", f);
        return;
    }
    const json_t *eng = json_object_get(json_object_get(p, "subject"), "engine");
    const json_t *env = json_object_get(p, "environment");
    const json_t *cell = json_object_get(p, "cell");
    fprintf(f, "<table class=\"receipt\"><tr><th>receipt</th><td>%" PRId64 " (", id);
    put(f, x->created_at);
    fprintf(f, "%s), recorded verdict ", x->imported ? ", imported" : "");
    pjson(f, json_object_get(p, "verdict"));
    fputs("</td></tr>\n<tr><th>cell</th><td>", f);
    pjson(f, json_object_get(cell, "model"));
    fputs(" / ", f);
    pjson(f, json_object_get(cell, "host"));
    fputs(" / ", f);
    pjson(f, json_object_get(cell, "mode"));
    const char *cmode = json_string_value(json_object_get(cell, "mode"));
    if (!cmode || strcmp(cmode, "anchor")) { /* an anchor case runs the judge: always F32 */
        fputs("</td></tr>\n<tr><th>KV cache</th><td>", f);
        if (json_object_get(cell, "kv"))
            pjson(f, json_object_get(cell, "kv"));
        else
            fputs("f32 (not recorded: a receipt from before the kv key)", f);
        if (json_object_get(cell, "isa")) { /* an isa cell: its own identity setting */
            fputs("</td></tr>\n<tr><th>instruction set</th><td>", f);
            pjson(f, json_object_get(cell, "isa"));
        }
    }
    fputs("</td></tr>\n<tr><th>signed by</th><td class=\"mono\">", f);
    pjson(f, json_object_get(p, "key_id"));
    fputs("</td></tr>\n<tr><th>build</th><td class=\"mono\">", f);
    pjson(f, json_object_get(eng, "version"));
    fputs(" ", f);
    pjson(f, json_object_get(eng, "git_commit"));
    if (json_is_true(json_object_get(eng, "git_dirty")))
        fputs(" <b>(dirty tree)</b>", f);
    fputs("</td></tr>\n<tr><th>model sha256</th><td class=\"mono\">", f);
    pjson(f, json_object_get(json_object_get(json_object_get(p, "subject"), "model"), "sha256"));
    fputs("</td></tr>\n<tr><th>environment</th><td>", f);
    pjson(f, json_object_get(env, "hostname"));
    fputs(", cpu ", f);
    pjson(f, json_object_get(env, "cpu")); /* the host's CPU model: not a backend name */
    fputs(", gpu ", f);
    pjson(f, json_object_get(env, "gpu"));
    fputs(", threads ", f);
    pjson(f, json_object_get(env, "threads"));
    fputs("</td></tr>\n<tr><th>ran</th><td>", f);
    pjson(f, json_object_get(p, "started_at"));
    fputs(" &ndash; ", f);
    pjson(f, json_object_get(p, "finished_at"));
    fputs("</td></tr>\n</table>\n", f);
    const json_t *gates = json_object_get(p, "gates");
    const char *mode = ostr(cell, "mode");
    const char *model_path = mi >= 0 ? pg->l->models[mi].path : NULL;
    const struct tok *t = NULL;
    if (json_object_get(gates, "golden"))
        t = model_tok(pg, mi);
    for (int k = 0; k < GATE_COUNT; k++) /* the gate table's order */
        if (json_is_object(json_object_get(gates, GATE_DEFS[k].name)))
            draw_gate(f, GATE_DEFS[k].name, mode, json_object_get(gates, GATE_DEFS[k].name), t,
                      model_path);
    const char *name;
    json_t *g;
    json_object_foreach((json_t *)gates, name, g)
    {
        if (!gatedef_find(name) && json_is_object(g)) /* a key no gate has: shown, not judged */
            draw_gate(f, name, mode, g, NULL, NULL);
    }
}

/* The anchor of row kind k, index i ("cell-3", "excl-0", "anchor-1"). */
static const char *row_anchor(enum release_row_kind k, int i, char *buf, size_t n)
{
    snprintf(buf, n, "%s-%d",
             k == RELEASE_ROW_CELL       ? "cell"
             : k == RELEASE_ROW_EXCLUDED ? "excl"
                                         : "anchor",
             i);
    return buf;
}

/* One row's section: name, state, reason, the receipts behind it, the receipt that decides it. */
/* Issue 27 §2: the decode and prefill medians of a cell over the release versions in the store
 * (per version its newest verified PASS receipt), as a small SVG line each, oldest version on the
 * left; nothing when fewer than two versions have one. Reads the store once (store_foreach). */
struct trend {
    const char *cell;
    int n;
    char version[32][64];
    double tps[32][2]; /* prefill, decode medians */
};

static int on_trend(void *ctx, const struct store_row *row)
{
    struct trend *t = ctx;
    if (strcmp(row->cell, t->cell) || strcmp(row->verdict, "PASS") || !row->sig_ok ||
        !row->chain_ok || !row->columns_ok)
        return 0;
    json_t *p = json_loadb(row->payload, row->len, 0, NULL);
    const char *v = json_string_value(json_object_get(json_object_get(p, "ladder"), "version"));
    const json_t *m =
        json_object_get(json_object_get(json_object_get(p, "gates"), "throughput"), "metrics");
    double pre = onum(json_object_get(m, "prefill"), "median_tps");
    double dec = onum(json_object_get(m, "decode"), "median_tps");
    if (v && isfinite(pre) && isfinite(dec)) {
        int k = 0;
        while (k < t->n && strcmp(t->version[k], v))
            k++;
        if (k == t->n && t->n < 32)
            snprintf(t->version[t->n++], sizeof t->version[0], "%s", v);
        if (k < t->n) { /* the newest receipt of a version wins */
            t->tps[k][0] = pre;
            t->tps[k][1] = dec;
        }
    }
    json_decref(p);
    return 0;
}

static void draw_trend(struct page *pg, const char *cell)
{
    struct trend *t = calloc(1, sizeof *t);
    struct gate_err e = {0};
    if (!t)
        return;
    t->cell = cell;
    if (store_foreach(pg->st, on_trend, t, &e) || t->n < 2) {
        free(t);
        return;
    }
    FILE *f = pg->f;
    static const char *const ph[] = {"prefill", "decode"};
    fputs("<p class=\"trend\">throughput over releases (median tok/s, newest PASS receipt per"
          " version, in store order):",
          f);
    for (int k = 0; k < 2; k++) {
        double hi = 0;
        for (int i = 0; i < t->n; i++)
            hi = t->tps[i][k] > hi ? t->tps[i][k] : hi;
        fprintf(f,
                " %s <svg class=\"trend\" width=\"160\" height=\"40\" viewBox=\"0 0 160 40\">"
                "<polyline fill=\"none\" stroke=\"currentColor\" points=\"",
                ph[k]);
        for (int i = 0; i < t->n; i++)
            fprintf(f, "%s%.1f,%.1f", i ? " " : "", 5 + 150.0 * i / (t->n - 1),
                    35 - 30 * (hi > 0 ? t->tps[i][k] / hi : 0));
        fputs("\"/></svg>", f);
        for (int i = 0; i < t->n; i++) {
            fputs(i ? ", " : " (", f);
            put(f, t->version[i]);
            fputs(" ", f);
            pnum(f, t->tps[i][k]);
        }
        fputs(")", f);
    }
    fputs("</p>\n", f);
    free(t);
}

static int draw_row(struct page *pg, const struct release_row *row, int64_t newest,
                    struct gate_err *err)
{
    FILE *f = pg->f;
    const struct ladder *l = pg->l;
    char a[32];
    const char *state = release_state_name(row->state);
    fprintf(f, "<section class=\"row row-%s\" id=\"%s\">\n<h3>", state,
            row_anchor(row->kind, row->index, a, sizeof a));
    if (row->kind == RELEASE_ROW_ANCHOR)
        fputs("anchor ", f);
    put(f, row->name);
    fputs(" ", f);
    badge(f, state, NULL, 0);
    fputs("</h3>\n", f);
    int mi = -1;
    if (row->kind == RELEASE_ROW_CELL)
        mi = l->cells[row->index].model;
    else if (row->kind == RELEASE_ROW_EXCLUDED)
        mi = l->excluded[row->index].model;
    if (row->kind == RELEASE_ROW_EXCLUDED) {
        fputs("<p class=\"excluded-reason\">excluded: ", f);
        put(f, l->excluded[row->index].reason);
        fputs("</p>\n", f);
    }
    if (row->kind == RELEASE_ROW_ANCHOR) {
        const struct ladder_anchor *an = &l->anchors[row->index];
        fputs("<p>the judge on trial for ", f);
        put(f, an->arch);
        fputs(" against: ", f);
        put(f, an->reference);
        fputs("</p>\n", f);
    }
    if (row->reason[0]) {
        fputs("<p class=\"reason\"><b>why:</b> ", f);
        put(f, row->reason);
        fputs("</p>\n", f);
    }
    if (row->disagree[0]) {
        fputs("<p class=\"note\">warning: ", f);
        put(f, row->disagree);
        fputs("</p>\n", f);
    }
    fprintf(f,
            "<p class=\"muted\">receipts for this build: %d PASS, %d FAIL, %d ERROR; %d stale,"
            " %d untrusted",
            row->n_pass, row->n_fail, row->n_error, row->n_stale, row->n_untrusted);
    for (int k = 0; k < row->n_pass_ids; k++)
        fprintf(f, "%s%" PRId64, k ? ", " : "; PASS receipts ", row->pass_ids[k]);
    fputs("</p>\n", f);
    /* the receipt that decides the row, else the newest the store holds for it */
    int64_t id = 0;
    if (row->state != RELEASE_TAMPERED && row->blocking_id)
        id = row->blocking_id;
    else if (row->state != RELEASE_TAMPERED && row->n_pass_ids)
        id = row->pass_ids[row->n_pass_ids - 1];
    else
        id = newest;
    if (!id) {
        fputs("<p class=\"muted\">no receipt in the store for this row.</p>\n</section>\n", f);
        return 0;
    }
    if (row->state == RELEASE_TAMPERED || row->state == RELEASE_MISSING ||
        row->state == RELEASE_EXCLUDED)
        fprintf(f, "<p class=\"muted\">the newest receipt stored for this row (it does not count"
                   " for this release):</p>\n");
    struct loaded x;
    memset(&x, 0, sizeof x);
    struct gate_err e = {0};
    int rc = store_get(pg->st, id, on_get, &x, &e);
    if (rc == ERR_ENV) {
        rc = err_set(err, ERR_ENV, "report: cannot read receipt %" PRId64 ": %s", id, e.msg);
        goto out;
    }
    if (rc) {
        fprintf(f, "<p class=\"unverified\">receipt %" PRId64 " cannot be read: ", id);
        put(f, e.msg);
        fputs("</p>\n", f);
        rc = 0;
        goto out;
    }
    draw_receipt(pg, &x, id, mi);
    if (row->kind == RELEASE_ROW_CELL)
        draw_trend(pg, row->name);
out:
    json_decref(x.payload);
    fputs("</section>\n", f);
    return rc;
}

/* ---- header, identity, matrix ---------------------------------------------------------------- */

static void draw_identity(FILE *f, const struct ladder *l, const char *ladder_path, const char *db,
                          const struct identity *id, const struct release_result *r)
{
    char now[32];
    identity_utc_now(now);
    fputs("<h2>build and ladder</h2>\n<table class=\"ident\" id=\"identity\">\n", f);
    const char *rows[][2] = {
        {"release", NULL},
        {"ladder", ladder_path},
        {"ladder sha256", l->sha256},
        {"trust sha256", l->trust_sha256},
        {"build version", id->version},
        {"build commit", id->git_commit},
        {"source sha256", id->source_sha256},
        {"binary sha256", id->binary_sha256},
        {"build flags", id->build_flags},
        {"receipt store", db},
        {"generated (UTC)", now},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fputs("<tr><th>", f);
        put(f, rows[i][0]);
        fputs("</th><td class=\"mono\">", f);
        if (i == 0) {
            put(f, l->name);
            fputs(" ", f);
            put(f, l->version);
        } else {
            put(f, rows[i][1]);
        }
        if (i == 5 && id->git_dirty) {
            fputs(" <b>(dirty: ", f);
            put(f, id->dirty_reason[0] ? id->dirty_reason : "uncommitted changes");
            fputs(")</b>", f);
        }
        if (i == 9)
            fprintf(f, " (%d receipt%s)", r->n_receipts, r->n_receipts == 1 ? "" : "s");
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
    for (int i = 0; i < l->n_unanchored; i++) {
        fputs("<p class=\"note\">judge not anchored for ", f);
        put(f, l->unanchored[i].arch);
        fputs(": ", f);
        put(f, l->unanchored[i].reason);
        fputs("</p>\n", f);
    }
    for (int i = 0; i < l->n_cells; i++) /* docs/gates.md, "Tolerances from noise" */
        if (l->cells[i].g.loose_reason[0]) {
            char name[256];
            fputs("<p class=\"note loose\">cell ", f);
            put(f, ladder_cell_name(l, i, name, sizeof name));
            fputs(" may judge parity looser than the backend's noise allows"
                  " (parity.loose_reason): ",
                  f);
            put(f, l->cells[i].g.loose_reason);
            fputs("</p>\n", f);
        }
    for (int i = 0; i < l->n_cells; i++) { /* docs/exec.md, "Falsify by proxy" */
        char name[256], kinds[160];
        const int px = ladder_falsify_proxy_text(&l->cells[i].g, kinds, sizeof kinds);
        if (!px)
            continue;
        fputs("<p class=\"note proxy\">cell ", f);
        put(f, ladder_cell_name(l, i, name, sizeof name));
        fputs(px == 1 ? " is falsified by proxy: engine "
                      : " is falsified partly by proxy: engine ",
              f);
        put(f, l->cells[i].g.engine->e.name);
        if (px == 1)
            fputs(" takes no faults, so each fault went into the judge and the engine's clean run"
                  " had to be rejected against it</p>\n",
                  f);
        else {
            fputs(" does not take ", f);
            put(f, kinds);
            fputs(", so those faults went into the judge and the engine's clean run had to be"
                  " rejected against them; the other kinds were injected into the engine</p>\n",
                  f);
        }
    }
}

/* One row of the matrix table. */
static void matrix_row(FILE *f, const struct ladder *l, const struct release_row *row)
{
    char a[32];
    static const char *const kind[] = {"row-cell", "row-excluded", "row-anchor"};
    fprintf(f, "<tr class=\"%s\">", kind[row->kind]);
    if (row->kind == RELEASE_ROW_ANCHOR) {
        const struct ladder_anchor *an = &l->anchors[row->index];
        fputs("<td>anchor: ", f);
        put(f, an->id);
        fputs("</td><td colspan=\"2\">judge on trial: ", f);
        put(f, an->arch);
        fputs("</td>", f);
    } else {
        int ex = row->kind == RELEASE_ROW_EXCLUDED;
        int mi = ex ? l->excluded[row->index].model : l->cells[row->index].model;
        int hi = ex ? l->excluded[row->index].host : l->cells[row->index].host;
        fputs("<td>", f);
        put(f, l->models[mi].id);
        fputs("</td><td>", f);
        put(f, l->hosts[hi].id);
        fputs("</td><td>", f);
        put(f, ex ? l->excluded[row->index].mode : l->cells[row->index].mode);
        /* the identity settings are part of the cell: an F16 or isa cell is its own row */
        const struct cell_key key =
            ex ? ladder_excluded_key(l, row->index) : ladder_cell_key(l, row->index);
        char suffix[48];
        put(f, cell_variant_suffix(&key.v, suffix, sizeof suffix));
        fputs("</td>", f);
    }
    badge(f, release_state_name(row->state), row_anchor(row->kind, row->index, a, sizeof a), 1);
    fputs("<td class=\"num\">", f);
    if (row->blocking_id)
        fprintf(f, "%" PRId64, row->blocking_id);
    else if (row->n_pass_ids)
        fprintf(f, "%" PRId64, row->pass_ids[row->n_pass_ids - 1]);
    else
        fputs("&mdash;", f);
    fputs("</td><td class=\"reason\">", f);
    if (row->kind == RELEASE_ROW_EXCLUDED) {
        fputs("excluded: ", f);
        put(f, l->excluded[row->index].reason);
        if (row->reason[0])
            fputs("; ", f);
    }
    put(f, row->reason);
    fputs("</td></tr>\n", f);
}

/* The matrix: a table with one row per required cell, excluded cell and anchor case; then the
 * same states as a grid, models down, host/mode across. */
static void draw_matrix(FILE *f, const struct ladder *l, const struct release_result *r)
{
    fputs("<h2>release matrix</h2>\n<table class=\"matrix\" id=\"matrix\">\n<tr><th>model</th>"
          "<th>host</th><th>mode</th><th>state</th><th>receipt</th><th>reason</th></tr>\n",
          f);
    for (int i = 0; i < r->n_cells; i++)
        matrix_row(f, l, &r->cells[i]);
    for (int i = 0; i < r->n_excluded; i++)
        matrix_row(f, l, &r->excluded[i]);
    for (int i = 0; i < r->n_anchors; i++)
        matrix_row(f, l, &r->anchors[i]);
    fputs("</table>\n", f);
    /* the grid: columns are host/mode pairs in order of first appearance */
    int n = l->n_cells + l->n_excluded, n_cols = 0;
    int *col_of = calloc((size_t)n + 1, sizeof *col_of),
        *first = calloc((size_t)n + 1, sizeof *first);
    if (!col_of || !first)
        goto out;
    for (int i = 0; i < n; i++) {
        const struct cell_key key = ladder_row_key(l, i); /* identity settings: own column */
        col_of[i] = -1;
        for (int c = 0; c < n_cols && col_of[i] < 0; c++) {
            const struct cell_key kc = ladder_row_key(l, first[c]);
            if (!strcmp(kc.host, key.host) && !strcmp(kc.mode, key.mode) &&
                cell_variant_same(&kc.v, &key.v))
                col_of[i] = c;
        }
        if (col_of[i] < 0) {
            first[n_cols] = i;
            col_of[i] = n_cols++;
        }
    }
    fputs("<table class=\"grid\" id=\"grid\">\n<tr><th>model \\ host/mode</th>", f);
    for (int c = 0; c < n_cols; c++) {
        int j = first[c], ex = j >= l->n_cells, k = ex ? j - l->n_cells : j;
        fputs("<th>", f);
        put(f, l->hosts[ex ? l->excluded[k].host : l->cells[k].host].id);
        fputs("<br>", f);
        put(f, ex ? l->excluded[k].mode : l->cells[k].mode);
        const struct cell_key key = ladder_row_key(l, j);
        char suffix[48];
        put(f, cell_variant_suffix(&key.v, suffix, sizeof suffix));
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    for (int mi = 0; mi < l->n_models; mi++) {
        fputs("<tr><th>", f);
        put(f, l->models[mi].id);
        fputs("</th>", f);
        for (int c = 0; c < n_cols; c++) {
            int hit = -1;
            for (int i = 0; i < n && hit < 0; i++) {
                int ex = i >= l->n_cells, k = ex ? i - l->n_cells : i;
                if (col_of[i] == c && (ex ? l->excluded[k].model : l->cells[k].model) == mi)
                    hit = i;
            }
            if (hit < 0) {
                fputs("<td class=\"st st-NONE\">&mdash;</td>", f);
                continue;
            }
            int ex = hit >= l->n_cells, k = ex ? hit - l->n_cells : hit;
            const struct release_row *row = ex ? &r->excluded[k] : &r->cells[k];
            char a[32];
            badge(f, release_state_name(row->state), row_anchor(row->kind, row->index, a, sizeof a),
                  1);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
out:
    free(col_of);
    free(first);
}

/* ---- the page ----------------------------------------------------------------------------------
 */

static void progress_line(FILE *progress, int tty, int done, int total)
{
    if (!progress || total <= PROGRESS_EVERY)
        return;
    if (tty)
        fprintf(progress, "\r  gate report: %d of %d rows drawn\033[K%s", done, total,
                done == total ? "\n" : "");
    else if (done % PROGRESS_EVERY == 0 || done == total)
        fprintf(progress, "gate report: %d of %d rows drawn\n", done, total);
}

/* report_release_blockers callback: one <li> per reason into the page ctx. */
static void blocker_li(void *ctx, const char *kind, const char *subject, const char *reason)
{
    FILE *f = ctx;
    fputs("<li class=\"blocker-", f);
    put(f, kind);
    fputs("\"><b>", f);
    put(f, subject);
    fputs("</b>: ", f);
    put(f, reason);
    fputs("</li>\n", f);
}

int report_html_write(const char *path, const struct ladder *l, const char *ladder_path,
                      const char *db, struct store *st, const struct identity *id,
                      const struct release_result *r, FILE *progress, struct gate_err *err)
{
    struct atomic_file af = {0};
    struct page pg;
    int rc = 0;
    memset(&pg, 0, sizeof pg);
    pg.l = l;
    pg.r = r;
    pg.st = st;
    pg.nw.l = l;
    pg.nw.r = r;
    pg.nw.cells = calloc((size_t)r->n_cells + 1, sizeof(int64_t));
    pg.nw.excluded = calloc((size_t)r->n_excluded + 1, sizeof(int64_t));
    pg.nw.anchors = calloc((size_t)r->n_anchors + 1, sizeof(int64_t));
    pg.toks = calloc((size_t)l->n_models + 1, sizeof *pg.toks);
    pg.tok_tried = calloc((size_t)l->n_models + 1, sizeof *pg.tok_tried);
    if (!pg.nw.cells || !pg.nw.excluded || !pg.nw.anchors || !pg.toks || !pg.tok_tried) {
        rc = err_set(err, ERR_ENV, "report: out of memory drawing '%s'", path);
        goto out;
    }
    if ((rc = store_foreach(st, on_newest, &pg.nw, err)))
        goto out;
    if ((rc = atomic_open(&af, path, 0644, err)))
        goto out;
    FILE *f = pg.f = atomic_stream(&af, err);
    if (!f) {
        rc = ERR_ENV;
        goto out;
    }
    head(f, l);
    if (r->dirty) {
        fputs("<div class=\"banner banner-tampered\" id=\"dirty\">BUILD NOT CLEAN: ", f);
        put(f, r->dirty_reason);
        fputs(". No receipt can count for this gate binary: commit, rebuild, rerun.</div>\n", f);
    }
    if (r->store_problem[0]) {
        fputs("<div class=\"banner banner-tampered\" id=\"tampered\">STORE TAMPERED: ", f);
        put(f, r->store_problem);
        fputs(". Every row is TAMPERED; the receipts below are marked UNVERIFIED and shown only"
              " to help find the damage.</div>\n",
              f);
    }
    fputs("<h1>gate release report: ", f);
    put(f, l->name);
    fputs(" ", f);
    put(f, l->version);
    fputs("</h1>\n", f);
    if (r->ok)
        fprintf(f,
                "<div class=\"banner banner-ok\" id=\"verdict\">RELEASE OK: all %d required cells"
                " and %d anchor case%s PASS for this build</div>\n",
                r->n_cells, r->n_anchors, r->n_anchors == 1 ? "" : "s");
    else
        fprintf(f,
                "<div class=\"banner banner-blocked\" id=\"verdict\">RELEASE BLOCKED: %d of %d"
                " required cells and %d of %d anchor case%s are not PASS%s</div>\n",
                r->n_bad_cells, r->n_cells, r->n_bad_anchors, r->n_anchors,
                r->n_anchors == 1 ? "" : "s",
                r->dirty ? "; this binary is not a clean build, nothing can count" : "");
    if (!r->ok) {
        /* every reason, as JUnit and JSON carry them (issue 23 §5) */
        fputs("<ul class=\"banner banner-blocked\" id=\"blockers\">\n", f);
        report_release_blockers(r, blocker_li, f);
        fputs("</ul>\n", f);
    }
    draw_matrix(f, l, r);
    draw_identity(f, l, ladder_path, db, id, r);
    fputs("<h2>cells</h2>\n", f);
    int total = r->n_cells + r->n_excluded + r->n_anchors, done = 0;
    int tty = progress && isatty(fileno(progress));
    for (int i = 0; i < r->n_cells && !rc; i++, progress_line(progress, tty, ++done, total))
        rc = draw_row(&pg, &r->cells[i], pg.nw.cells[i], err);
    for (int i = 0; i < r->n_excluded && !rc; i++, progress_line(progress, tty, ++done, total))
        rc = draw_row(&pg, &r->excluded[i], pg.nw.excluded[i], err);
    if (!rc && r->n_anchors)
        fputs("<h2>anchor cases</h2>\n", f);
    for (int i = 0; i < r->n_anchors && !rc; i++, progress_line(progress, tty, ++done, total))
        rc = draw_row(&pg, &r->anchors[i], pg.nw.anchors[i], err);
    if (rc)
        goto out;
    fputs("<p class=\"muted\">drawn by gate report from the signed receipts; every number above"
          " is in the receipt named with it (gate receipt show ID).</p>\n</body>\n</html>\n",
          f);
    if (ferror(f)) {
        rc = err_set(err, ERR_ENV, "cannot write the HTML report '%s': write error", path);
        goto out;
    }
    rc = atomic_commit(&af, err);
out:
    atomic_abort(&af);
    for (int i = 0; pg.toks && i < l->n_models; i++)
        tok_free(pg.toks[i]);
    free(pg.toks);
    free(pg.tok_tried);
    free(pg.nw.cells);
    free(pg.nw.excluded);
    free(pg.nw.anchors);
    return rc;
}

int report_html_check(const char *ladder_path, const char *db, const char *expect_head,
                      const char *out_path, const struct identity *self, FILE *progress, int *ok,
                      struct gate_err *err)
{
    struct ladder *l = NULL;
    struct store *st = NULL;
    struct identity id;
    struct release_result r;
    struct release_options o = {.ladder = ladder_path, .db = db, .expect_head = expect_head};
    int rc;
    memset(&r, 0, sizeof r);
    if (ok)
        *ok = 0;
    if ((rc = ladder_load(&l, ladder_path, err)) || (rc = ladder_check_runnable(l, err)))
        goto out;
    if (self)
        id = *self;
    else if ((rc = identity_get(&id, err)))
        goto out;
    /* the same audit and judgement as `gate release check`: the page shows what it decides */
    if ((rc = store_open_readonly(&st, db, err)) ||
        (rc = release_evaluate(l, st, &id, &o, &r, err)))
        goto out;
    if ((rc = report_html_write(out_path, l, ladder_path, db, st, &id, &r, progress, err)))
        goto out;
    if (ok)
        *ok = r.ok;
out:
    release_result_free(&r);
    store_close(st);
    ladder_free(l);
    return rc;
}
