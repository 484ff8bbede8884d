/* report_html_plots.c — the plots of `gate report`'s page, inline SVG (report_html_parts.h has
 * the contracts): parity per position (cosine above on a linear axis, KL below on a log10 axis,
 * the ladder's thresholds dashed, argmax flips and route-tie replays marked), and a cell's
 * throughput over the release versions in the store.
 * Invariants: an SVG here has fixed pixel sizes and no script; a value that is not finite is
 * drawn at its panel's floor, never left out of a polyline (the position axis stays whole);
 * numbers in titles go through html_num() or %g.
 * Start reading: html_parity_plot().
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/report_html_parts.h"
#include "receipts/store.h"

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
void html_parity_plot(FILE *f, const json_t *m, const json_t *settings)
{
    const json_t *pp = json_object_get(m, "per_position");
    const json_t *cos = json_object_get(pp, "cosine"), *kld = json_object_get(pp, "kld");
    const json_t *cls = json_object_get(pp, "class"), *rg = json_object_get(pp, "route_deficit");
    size_t n = json_array_size(cos);
    if (n == 0 || json_array_size(kld) != n) {
        fputs("<p class=\"muted\">no per-position numbers recorded: no plot</p>\n", f);
        return;
    }
    double min_cos = html_onum(settings, "min_cosine"), max_kld = html_onum(settings, "max_kld");
    double max_mean = html_onum(settings, "max_mean_kld");
    double cmin = 1, kmax = 0;
    for (size_t i = 0; i < n; i++) {
        double c = html_jnum(json_array_get(cos, i)), k = html_jnum(json_array_get(kld, i));
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
            double v = html_jnum(json_array_get(ser[s], i));
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
        double deficit = html_jnum(json_array_get(rg, i)); /* null: nothing forced there */
        double yc = yof(html_jnum(json_array_get(cos, i)), clo, chi, T1, B1);
        double yk = yof(klog(html_jnum(json_array_get(kld, i)), klo), klo, khi, T2, B2);
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

/* ---- throughput over releases ---------------------------------------------------------------- */

/* Issue 27 §2: a cell's throughput over the release versions in the store, oldest version on the
 * left. */
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
    double pre = html_onum(json_object_get(m, "prefill"), "median_tps");
    double dec = html_onum(json_object_get(m, "decode"), "median_tps");
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

void html_trend_draw(FILE *f, struct store *st, const char *cell)
{
    struct trend *t = calloc(1, sizeof *t);
    struct gate_err e = {0};
    if (!t)
        return;
    t->cell = cell;
    if (store_foreach(st, on_trend, t, &e) || t->n < 2) {
        free(t);
        return;
    }
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
            html_put(f, t->version[i]);
            fputs(" ", f);
            html_num(f, t->tps[i][k]);
        }
        fputs(")", f);
    }
    fputs("</p>\n", f);
    free(t);
}
