/* report_html_base.c — the skeleton of `gate report`'s page (report_html_parts.h has the
 * contracts): the <head> with its inline style sheet and Content-Security-Policy, the escaping
 * every string passes through, how numbers and JSON values are printed, state badges and the ids
 * rows are linked by. Invariants: html_put() is the only way receipt-, ladder- or store-borne
 * text reaches the page (cli_safe, then the five markup characters as entities); a number is
 * printed as receipts record it (non-finite as "NaN" / "Inf"); the page fetches nothing.
 * Start reading: html_put(), then html_head().
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/report_html_parts.h"
#include "harness/ladder.h"
#include "oracles/gates.h"

/* ---- escaping and numbers -------------------------------------------------------------------- */

/* Text that is already safe for a terminal (valid UTF-8, no controls: cli_safe() or
 * cmd_tokenize_escape() output) as HTML: & < > " ' as entities. */
void html_put_entities(FILE *f, const char *buf)
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
void html_put(FILE *f, const char *s)
{
    size_t n = 4 * strlen(s ? s : "(null)") + 1;
    char small[1024], *buf = n <= sizeof small ? small : malloc(n);
    if (!buf) {
        fprintf(f, "(out of memory for %zu bytes of escaped text)", n);
        return;
    }
    cli_safe(s, buf, n);
    html_put_entities(f, buf);
    if (buf != small)
        free(buf);
}

/* A number as receipts show it: %.6g, or NaN / Inf / -Inf. */
void html_num(FILE *f, double v)
{
    if (isnan(v))
        fputs("NaN", f);
    else if (isinf(v))
        fputs(v > 0 ? "Inf" : "-Inf", f);
    else
        fprintf(f, "%.6g", v);
}

/* A JSON value of a metric (number, "NaN"/"Inf" string) as a double; NAN when absent. */
double html_jnum(const json_t *v)
{
    double d = NAN;
    if (gate_json_num(v, &d))
        return NAN;
    return d;
}

double html_onum(const json_t *o, const char *key)
{
    return html_jnum(json_object_get(o, key));
}

/* Any JSON scalar: numbers through pnum, strings escaped, booleans as words, null as "—";
 * arrays and objects compact, escaped. */
void html_json(FILE *f, const json_t *v)
{
    if (!v || json_is_null(v)) {
        fputs("&mdash;", f);
    } else if (json_is_string(v)) {
        html_put(f, json_string_value(v));
    } else if (json_is_number(v)) {
        html_num(f, json_number_value(v));
    } else if (json_is_boolean(v)) {
        fputs(json_is_true(v) ? "true" : "false", f);
    } else {
        char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        html_put(f, s ? s : "(out of memory for a JSON value's text)");
        free(s);
    }
}

const char *html_ostr(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* ---- the page's frame ------------------------------------------------------------------------ */

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

void html_head(FILE *f, const struct ladder *l)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n", f);
    /* belt and braces: even a page someone edits cannot load anything from elsewhere */
    fputs("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none';"
          " style-src 'unsafe-inline'; img-src data:\">\n",
          f);
    fputs("<title>gate release report: ", f);
    html_put(f, l->name);
    fputc(' ', f);
    html_put(f, l->version);
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n", CSS);
}

/* A state badge: <td> (cell 1) or <span>, linked to href when not NULL. */
void html_badge(FILE *f, const char *state, const char *href, int cell)
{
    fprintf(f, "<%s class=\"st st-%s\">", cell ? "td" : "span", state);
    if (href)
        fprintf(f, "<a href=\"#%s\">%s</a>", href, state);
    else
        fputs(state, f);
    fprintf(f, "</%s>", cell ? "td" : "span");
}

/* ---- ids ------------------------------------------------------------------------------------- */

const char *html_row_anchor(enum release_row_kind k, int i, char *buf, size_t n)
{
    snprintf(buf, n, "%s-%d",
             k == RELEASE_ROW_CELL       ? "cell"
             : k == RELEASE_ROW_EXCLUDED ? "excl"
                                         : "anchor",
             i);
    return buf;
}
