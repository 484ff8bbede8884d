/* cmd_receipt.c — `gate key gen|pub` and `gate receipt list|show|verify|export|import`: thin
 * wrappers over receipts/key, receipts/receipt and receipts/store. Every status a receipt shows
 * is computed from the signed payload (store_foreach verifies each row); columns are only used
 * for listing and are flagged when they disagree with the payload. Every string that comes from
 * a receipt or an import file goes through safe() (cli_safe) before it reaches the terminal.
 * list, show, verify and export open the store read-only (store_open_readonly). verify judges a
 * sign-off's key only against a trust source given to it (--ladder: the release check's own
 * release_key_trusted(), any host; --trust: keys named on the command line) and says so plainly
 * when it has none.
 */
#include "cli/cmd_receipt.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/pin.h"
#include "harness/gatedef.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "receipts/cellkey.h"
#include "receipts/key.h"
#include "receipts/receipt.h"
#include "receipts/store.h"

#define DEFAULT_DB "receipts.db"

/* A receipt string escaped for the terminal; eight rotating buffers, so one printf may hold up
 * to eight (each valid until eight more calls). */
static const char *safe(const char *s)
{
    static char bufs[8][4096];
    static int next;
    next = (next + 1) % 8;
    return cli_safe(s, bufs[next], sizeof bufs[next]);
}

/* ---- gate key ------------------------------------------------------------------------------- */

static const char KEY_USAGE[] =
    "usage: gate key gen --host ID [-o FILE] [--pub FILE.pub]\n"
    "       gate key pub FILE [--pub FILE.pub]\n"
    "  gen writes a new Ed25519 private key for host ID (mode 0600; refuses to overwrite) to FILE\n"
    "  (default ~/.config/gate/keys/ID.key) and prints its public key, the line to paste into\n"
    "  the ladder's `trust:` list; --pub also writes it to FILE.pub for `file:NAME.pub`.\n"
    "  pub prints (and with --pub writes) the public key of an existing private key file.\n";

int cmd_key(int argc, char **argv)
{
    const char *host = NULL, *out = NULL, *pub = NULL, *file = NULL;
    char path[4096];
    struct key_pair k;
    struct gate_err err = {0};
    int rc = 0;
    memset(&k, 0, sizeof k);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(KEY_USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    int gen = !strcmp(argv[1], "gen");
    if (!gen && strcmp(argv[1], "pub") != 0)
        return cli_fail(2, "key: unknown subcommand '%s' (gen, pub)", argv[1]);
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--host") && gen) {
            if (cli_value(argc, argv, &i, &host))
                return 2;
        } else if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--out")) && gen) {
            if (cli_value(argc, argv, &i, &out))
                return 2;
        } else if (!strcmp(argv[i], "--pub")) {
            if (cli_value(argc, argv, &i, &pub))
                return 2;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(KEY_USAGE, stdout);
            return 0;
        } else if (argv[i][0] != '-' && !gen && !file) {
            file = argv[i];
        } else {
            return cli_fail(2, "key %s: unexpected argument '%s'\n%s", argv[1], argv[i], KEY_USAGE);
        }
    }
    if (gen) {
        if (!host)
            return cli_fail(2, "key gen: --host ID is required\n%s", KEY_USAGE);
        if (!out) {
            if ((rc = key_default_path(host, path, sizeof path, &err)))
                goto cleanup;
            out = path;
        }
        if ((rc = key_generate(out, host, &k, &err)))
            goto cleanup;
    } else {
        if (!file)
            return cli_fail(2, "key pub: the private key FILE is required\n%s", KEY_USAGE);
        if ((rc = key_load(file, &k, &err)))
            goto cleanup;
    }
    if (pub && (rc = key_write_public(pub, &k, &err)))
        goto cleanup;
    printf("%s\n", k.id);
    if (gen)
        fprintf(stderr,
                "gate: wrote private key '%s' (mode 0600) for host '%s'%s%s%s\n"
                "gate: trust it in the ladder: hosts: {%s: {trust: [%s]}}\n",
                out, k.host, pub ? " and public key '" : "", pub ? pub : "", pub ? "'" : "", k.host,
                k.id);
cleanup:
    key_wipe(&k);
    if (rc)
        return cli_fail(err_exit_code(rc), "%s", err.msg);
    return 0;
}

/* ---- gate receipt --------------------------------------------------------------------------- */

static const char RECEIPT_USAGE[] =
    "usage: gate receipt list [--db DB] [--cell PATTERN] [--verdict V]\n"
    "       gate receipt show ID [--db DB] [--full | --json]\n"
    "       gate receipt verify [--db DB] [--all] [--ladder LADDER] [--trust KEY]...\n"
    "       gate receipt export [--db DB] --out FILE\n"
    "       gate receipt import FILE [--db DB]\n"
    "  DB defaults to ./" DEFAULT_DB ". PATTERN is a shell glob over model/host/mode.\n"
    "  show prints a summary first (cell, verdict, the failing gate's error, each gate's\n"
    "  verdict and reason), then the details: numbers at 6 significant digits, per-position\n"
    "  arrays as min/p1/median/p99/max plus the offending positions (--full: every value);\n"
    "  --json prints the whole signed payload (full precision).\n"
    "  verify checks every receipt's signature, chain link, columns and re-derived verdicts, and\n"
    "  every head record against the chain, and every sign-off (signature, columns, the receipts\n"
    "  it names must be verified receipts of this store; store_audit); it exits 1 naming each\n"
    "  bad receipt, the first bad head record and the first bad sign-off; --all also prints the\n"
    "  good ones. A sign-off's key is judged only against a trust source: --ladder LADDER (the\n"
    "  keys the ladder trusts for any of its hosts, as release check reads them) and/or --trust\n"
    "  KEY (repeatable: 'ed25519:HEX' or a public key file as `gate key gen --pub` writes); a\n"
    "  sign-off by any other key is UNTRUSTED (exit 1). Without one, verify says that key trust\n"
    "  was not checked.\n"
    "  export writes one DSSE envelope per line; import verifies every signature first and\n"
    "  refuses the whole file if any is bad. An import of 1000 envelopes or more shows its\n"
    "  progress on stderr (a live line on a terminal, else a line per 1000 with counts).\n";

#define TRUST_MAX 16 /* --trust keys of one verify */

struct opts {
    const char *db, *cell, *verdict, *out, *arg, *ladder;
    const char *trust[TRUST_MAX];
    int all, json, n_trust;
};

static const char *row_status(const struct store_row *r)
{
    if (!r->sig_ok)
        return "BAD-SIGNATURE";
    if (!r->chain_ok)
        return "BROKEN-CHAIN";
    if (!r->columns_ok)
        return "BAD-COLUMNS";
    return "ok";
}

static int list_row(void *ctx, const struct store_row *r)
{
    const struct opts *o = ctx;
    if (o->cell && fnmatch(o->cell, r->cell, 0) != 0)
        return 0;
    if (o->verdict && strcasecmp(o->verdict, r->verdict) != 0)
        return 0;
    char key[24];
    snprintf(key, sizeof key, "%.20s", r->key_id);
    printf("%6" PRId64 "  %-20s  %-40s  %-7s  %s...  %s%s\n", r->id, safe(r->created_at),
           safe(r->cell), safe(r->verdict), safe(key), row_status(r),
           r->imported ? " (imported)" : "");
    return 0;
}

/* `receipt show --full`: per-position arrays printed whole instead of as a distribution. */
static int show_full;

/* Print a JSON scalar compactly; reals at 6 significant digits (0.05, not 0.050000000000000003:
 * the signed payload keeps every bit, `receipt show --json` prints it). */
static void print_scalar(const json_t *v)
{
    if (json_is_string(v)) {
        fputs(safe(json_string_value(v)), stdout);
        return;
    }
    if (json_is_real(v)) {
        printf("%.6g", json_real_value(v));
        return;
    }
    char *s =
        json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(6));
    fputs(s ? safe(s) : "?", stdout);
    free(s);
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define SHOW_COLLAPSE 8 /* arrays longer than this are summarized unless --full */

/* A long numeric array (one value per position) as its distribution: n, min, p1, median, p99,
 * max, and where the extremes are. */
static void print_distribution(const json_t *a)
{
    size_t n = json_array_size(a), i, at_min = 0, at_max = 0;
    double *v = malloc(n * sizeof *v);
    if (!v) {
        printf("(%zu values)", n);
        return;
    }
    for (i = 0; i < n; i++) {
        v[i] = json_number_value(json_array_get(a, i));
        if (v[i] < v[at_min])
            at_min = i;
        if (v[i] > v[at_max])
            at_max = i;
    }
    qsort(v, n, sizeof *v, by_double);
#define Q(p) v[(size_t)((p) * (double)(n - 1) + 0.5)]
    printf("n=%zu min=%.6g p1=%.6g median=%.6g p99=%.6g max=%.6g (min at %zu, max at %zu)", n, v[0],
           Q(0.01), Q(0.5), Q(0.99), v[n - 1], at_min, at_max);
#undef Q
    free(v);
}

/* A long array of strings (a class per position): the count of each value, and the positions
 * of every value other than the most common one (the offending positions), at most 32. */
static void print_classes(const json_t *a)
{
    const char *names[16];
    size_t counts[16], nn = 0, i, top = 0;
    json_t *e;
    json_array_foreach((json_t *)a, i, e)
    {
        const char *s = json_is_string(e) ? json_string_value(e) : "?";
        size_t k;
        for (k = 0; k < nn && strcmp(names[k], s); k++)
            ;
        if (k == nn && nn < 16) {
            names[nn] = s;
            counts[nn++] = 0;
        }
        if (k < nn)
            counts[k]++;
    }
    for (size_t k = 0; k < nn; k++) {
        printf("%s%s %zu", k ? ", " : "", safe(names[k]), counts[k]);
        if (counts[k] > counts[top])
            top = k;
    }
    int shown = 0;
    json_array_foreach((json_t *)a, i, e)
    {
        const char *s = json_is_string(e) ? json_string_value(e) : "?";
        if (nn == 0 || !strcmp(s, names[top]))
            continue;
        if (shown == 32) {
            printf(" ...");
            break;
        }
        printf("%s%zu:%s", shown++ ? " " : "; at ", i, safe(s));
    }
}

/* Print every leaf under v as "indent path: value", skipping the keys in skip (top level). */
static void print_flat(const char *indent, const char *path, const json_t *v,
                       const char *const *skip)
{
    char sub[512];
    if (!v) {
        printf("%s(absent)\n", indent);
        return;
    }
    if (json_is_object(v)) {
        const char *key;
        json_t *child;
        json_object_foreach((json_t *)v, key, child)
        {
            int skipped = 0;
            for (const char *const *s = skip; s && *s; s++)
                skipped |= !strcmp(*s, key);
            if (skipped)
                continue;
            snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", key);
            print_flat(indent, sub, child, NULL);
        }
    } else if (!show_full && json_is_array(v) && json_array_size(v) > SHOW_COLLAPSE &&
               (json_is_number(json_array_get(v, 0)) || json_is_string(json_array_get(v, 0)))) {
        int numbers = 1;
        size_t i;
        json_t *child;
        json_array_foreach(v, i, child) numbers &= json_is_number(child);
        printf("%s%-34s ", indent, safe(path));
        if (numbers)
            print_distribution(v);
        else
            print_classes(v);
        putchar('\n');
    } else if (json_is_array(v) && json_array_size(v) > 0 &&
               !json_is_number(json_array_get(v, 0))) {
        size_t i;
        json_t *child;
        json_array_foreach(v, i, child)
        {
            snprintf(sub, sizeof sub, "%s[%zu]", path, i);
            print_flat(indent, sub, child, NULL);
        }
    } else {
        printf("%s%-34s ", indent, safe(path));
        print_scalar(v);
        putchar('\n');
    }
}

static void print_gates(const json_t *gates)
{
    static const char *const SKIP[] = {"verdict", "checks", "error", NULL};
    const char *name;
    json_t *g;
    if (!json_is_object(gates) || json_object_size(gates) == 0) {
        printf("gates        (none: an empty gate list is a failure)\n");
        return;
    }
    printf("gates\n");
    json_object_foreach((json_t *)gates, name, g)
    {
        const char *v = json_string_value(json_object_get(g, "verdict"));
        printf("  %-12s %s\n", safe(name), v ? safe(v) : "(no verdict)");
        const char *error = json_string_value(json_object_get(g, "error"));
        if (error)
            printf("    error: %s\n", safe(error));
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(g, "checks"), i, c)
        {
            const char *metric = json_string_value(json_object_get(c, "metric"));
            const char *op = json_string_value(json_object_get(c, "op"));
            printf("    %-30s ", metric ? safe(metric) : "?");
            print_scalar(json_object_get(c, "value"));
            printf(" %s ", op ? safe(op) : "?");
            print_scalar(json_object_get(c, "threshold"));
            printf("   %s\n", json_is_true(json_object_get(c, "pass")) ? "ok" : "FAIL");
        }
        print_flat("    ", "", g, SKIP);
    }
}

/* The string value of v escaped for the terminal, or "?" when v is not a string. */
static const char *str_of(const json_t *v)
{
    const char *s = json_string_value(v);
    return s ? safe(s) : "?";
}

/* The first line of s, escaped and cut to width columns (with "..." when cut). */
static const char *one_line(const char *s, int width)
{
    static char buf[512];
    char line[512];
    size_t n = strcspn(s, "\n");
    snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line - 1 ? n : sizeof line - 1), s);
    if ((int)strlen(line) > width)
        snprintf(line + width - 3, sizeof line - (size_t)width + 3, "...");
    return cli_safe(line, buf, sizeof buf);
}

/* A gate's one-line reason: its "reason", else metrics.reason, else its error, else what its
 * checks say (the first failing one with its value and threshold, or how many passed). */
static const char *gate_reason(const json_t *g)
{
    static char buf[2][512];
    static int next;
    const char *why = json_string_value(json_object_get(g, "reason"));
    if (!why)
        why = json_string_value(json_object_get(json_object_get(g, "metrics"), "reason"));
    if (!why)
        why = json_string_value(json_object_get(g, "error"));
    if (why)
        return why;
    const json_t *checks = json_object_get(g, "checks"), *c;
    size_t i, n_ok = 0;
    char *b = buf[next = !next];
    json_array_foreach((json_t *)checks, i, c)
    {
        if (json_is_true(json_object_get(c, "pass"))) {
            n_ok++;
            continue;
        }
        char *v = json_dumps(json_object_get(c, "value"), JSON_ENCODE_ANY | JSON_REAL_PRECISION(6));
        char *t =
            json_dumps(json_object_get(c, "threshold"), JSON_ENCODE_ANY | JSON_REAL_PRECISION(6));
        const char *m = json_string_value(json_object_get(c, "metric"));
        const char *op = json_string_value(json_object_get(c, "op"));
        snprintf(b, sizeof buf[0], "%s %s %s %s fails", m ? m : "?", v ? v : "?", op ? op : "?",
                 t ? t : "?");
        free(v);
        free(t);
        return b;
    }
    if (json_array_size(checks) == 0)
        return NULL;
    snprintf(b, sizeof buf[0], "%zu check%s pass", n_ok, n_ok == 1 ? "" : "s");
    return b;
}

/* The gates in the gate table's order (the order they run), then any other key the payload has. */
static int gate_is_ordered(const char *name)
{
    return gatedef_find(name) != NULL;
}

/* The summary `receipt show` prints first: the cell and verdict, the first failing gate's error
 * (or reason) on its own line, then one line per gate: verdict and one-line reason. */
static void print_summary(const struct store_row *r, const json_t *p)
{
    json_t *cell = json_object_get(p, "cell"), *gates = json_object_get(p, "gates"), *g;
    const char *v = json_string_value(json_object_get(p, "verdict"));
    char cell_name[256];
    struct gate_err ne = {0};
    if (receipt_cell_name(p, cell_name, sizeof cell_name, &ne)) /* malformed: parts as found */
        snprintf(cell_name, sizeof cell_name, "%s/%s/%s (%s)",
                 str_of(json_object_get(cell, "model")), str_of(json_object_get(cell, "host")),
                 str_of(json_object_get(cell, "mode")), ne.msg[0] ? "malformed" : "");
    printf("receipt %" PRId64 ": %s  %s\n", r->id, safe(cell_name), v ? safe(v) : "?");
    const char *name, *order[64];
    int n = 0;
    for (int k = 0; k < GATE_COUNT; k++)
        if (json_object_get(gates, GATE_DEFS[k].name))
            order[n++] = GATE_DEFS[k].name;
    json_object_foreach(gates, name, g)
    {
        if (!gate_is_ordered(name) && n < 64)
            order[n++] = name;
    }
    for (int k = 0; k < n; k++) {
        g = json_object_get(gates, order[k]);
        const char *gv = json_string_value(json_object_get(g, "verdict"));
        if (gv && !strcmp(gv, "PASS"))
            continue;
        const char *err = json_string_value(json_object_get(g, "error"));
        const char *why = err ? err : gate_reason(g);
        printf("  %s %s: %s\n", gv ? safe(gv) : "(no verdict)", safe(order[k]),
               why ? one_line(why, 200) : "(no reason recorded)");
        break;
    }
    for (int k = 0; k < n; k++) {
        g = json_object_get(gates, order[k]);
        const char *gv = json_string_value(json_object_get(g, "verdict"));
        const char *why = gate_reason(g);
        printf("  %-11s %-6s %s\n", safe(order[k]), gv ? safe(gv) : "?",
               why ? one_line(why, 80) : "");
    }
    printf("  signature %s, chain %s, columns %s (--full: every value; --json: the payload)\n\n",
           r->sig_ok ? "ok" : "BAD", r->chain_ok ? "ok" : "BROKEN",
           r->columns_ok ? "ok" : "DISAGREE");
}

/* `receipt show --json`: the whole signed payload, parsed and printed with sorted keys, every
 * number at full precision, ASCII only (nothing in it can drive the terminal). */
static int show_json(void *ctx, const struct store_row *r)
{
    (void)ctx;
    json_t *p = NULL;
    struct gate_err err = {0};
    if (receipt_parse(r->payload, r->len, &p, &err) != 0) {
        fprintf(stderr, "gate: receipt %" PRId64 ": payload unreadable: %s\n", r->id,
                safe(err.msg));
        return 0;
    }
    json_dumpf(p, stdout, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    putchar('\n');
    json_decref(p);
    return 0;
}

static int show_row(void *ctx, const struct store_row *r)
{
    (void)ctx;
    json_t *p = NULL;
    struct gate_err err = {0};
    static const char *const SKIP[] = {
        "cell",        "verdict", "gates",  "key_id",     "prev_hash",   "ladder", "subject",
        "environment", "nonce",   "faults", "started_at", "finished_at", NULL};
    if (receipt_parse(r->payload, r->len, &p, &err) != 0) {
        printf("receipt      %" PRId64 " (%s, stored %s)\n", r->id,
               r->imported ? "imported" : "local", safe(r->created_at));
        printf("payload      UNREADABLE: %s\n", safe(err.msg));
        printf("status       %s: %s\n", row_status(r), safe(r->problem));
        return 0;
    }
    print_summary(r, p);
    printf("details\n");
    printf("receipt      %" PRId64 " (%s, stored %s)\n", r->id, r->imported ? "imported" : "local",
           safe(r->created_at));
    json_t *cell = json_object_get(p, "cell");
    const char *cmode = json_string_value(json_object_get(cell, "mode"));
    printf("cell         model %s, host %s, mode %s", str_of(json_object_get(cell, "model")),
           str_of(json_object_get(cell, "host")), str_of(json_object_get(cell, "mode")));
    /* the identity settings, one per row of CELL_SETTINGS (receipts/cellkey.c): a setting the
     * cell object records at its default too (kv) is always printed, one from before its key as
     * its default, said so; the others only when set. An anchor case runs the judge: none. */
    for (int k = 0; (!cmode || strcmp(cmode, "anchor")) && k < CELL_SETTING_COUNT; k++) {
        const struct cell_setting *row = &CELL_SETTINGS[k];
        const char *v = json_string_value(json_object_get(cell, row->key));
        if (v)
            printf(", %s %s", row->key, safe(v));
        else if (row->cell_has_default)
            printf(", %s %s (not recorded: before the %s key)", row->key, row->dflt, row->key);
    }
    printf("\n");
    printf("verdict      %s\n", str_of(json_object_get(p, "verdict")));
    const char *started = json_string_value(json_object_get(p, "started_at"));
    const char *finished = json_string_value(json_object_get(p, "finished_at"));
    if (started || finished)
        printf("time         %s .. %s\n", started ? safe(started) : "?",
               finished ? safe(finished) : "?");
    printf("key          %s\n", str_of(json_object_get(p, "key_id")));
    printf("signature    %s\n", r->sig_ok ? "ok" : "BAD");
    printf("chain        %s (prev %s, hash %s)\n", r->chain_ok ? "ok" : "BROKEN",
           str_of(json_object_get(p, "prev_hash")), safe(r->hash));
    printf("columns      %s\n", r->columns_ok ? "agree with the payload" : "DISAGREE");
    if (r->problem[0])
        printf("problem      %s\n", safe(r->problem));
    err_clear(&err);
    enum gate_verdict ov;
    if (gatedef_rejudge_payload(p, &ov, &err) == 0)
        printf("re-derived   verdicts agree with the recorded numbers\n");
    else
        printf("re-derived   DISAGREE: %s\n", safe(err.msg));
    printf("ladder\n");
    print_flat("  ", "", json_object_get(p, "ladder"), NULL);
    printf("subject\n");
    print_flat("  ", "", json_object_get(p, "subject"), NULL);
    printf("environment\n");
    print_flat("  ", "", json_object_get(p, "environment"), NULL);
    print_gates(json_object_get(p, "gates"));
    if (json_object_get(p, "faults")) {
        printf("faults\n");
        print_flat("  ", "", json_object_get(p, "faults"), NULL);
    }
    printf("other\n");
    print_flat("  ", "", p, SKIP);
    printf("  %-34s %s\n", "nonce", str_of(json_object_get(p, "nonce")));
    json_decref(p);
    return 0;
}

struct verify_ctx {
    int all, n, bad;
};

static int verify_row(void *vctx, const struct store_row *r)
{
    struct verify_ctx *v = vctx;
    json_t *p = NULL;
    struct gate_err err = {0};
    const char *why = r->problem;
    v->n++;
    if (r->sig_ok && r->chain_ok && r->columns_ok) {
        enum gate_verdict ov;
        if (receipt_parse(r->payload, r->len, &p, &err) != 0 ||
            gatedef_rejudge_payload(p, &ov, &err) != 0)
            why = err.msg;
    }
    json_decref(p);
    if (why[0]) {
        v->bad++;
        printf("receipt %" PRId64 " (%s): FAILED: %s\n", r->id, safe(r->cell), safe(why));
    } else if (v->all) {
        printf("receipt %" PRId64 " (%s, %s): ok\n", r->id, safe(r->cell), safe(r->verdict));
    }
    return 0;
}

/* ---- sign-off key trust (receipt verify --ladder / --trust) -------------------------------- */

struct trust_src {
    const struct ladder *l; /* NULL: no --ladder */
    int n;
    unsigned char pk[TRUST_MAX][32];
};

/* store_trust_fn: trusted by the ladder for any host (the release check's own test), or one of
 * the --trust keys. */
static int signoff_trusted(void *ctx, const char *key_id)
{
    const struct trust_src *t = ctx;
    unsigned char pk[32];
    if (t->l && release_key_trusted(t->l, -1, key_id))
        return 1;
    if (!key_id || key_parse_public(key_id, pk, NULL) != 0)
        return 0;
    for (int i = 0; i < t->n; i++)
        if (!memcmp(t->pk[i], pk, 32))
            return 1;
    return 0;
}

/* One --trust argument: "ed25519:HEX" inline, else a public key file opened as a ladder's files
 * are (pin_open: regular files only, no blocking open; at most LADDER_TRUST_FILE_MAX bytes)
 * holding that one line. Errors never quote a file's content. */
static int trust_key(const char *arg, unsigned char pk[32], struct gate_err *err)
{
    struct pinned p;
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = 0;
    if (!strncmp(arg, "ed25519:", 8))
        return key_parse_public(arg, pk, err);
    if ((rc = pin_open_bounded(arg, NULL, LADDER_TRUST_FILE_MAX, &p, err)))
        return rc;
    rc = pin_read_all(&p, LADDER_TRUST_FILE_MAX, &buf, &len, err);
    pin_close(&p);
    if (!rc && (strlen((const char *)buf) != len || key_parse_public((const char *)buf, pk, NULL)))
        rc = err_set(err, ERR_INPUT,
                     "--trust '%s' does not hold one public key (expected a single line"
                     " 'ed25519:' and 64 hex digits; the content is not shown)",
                     arg);
    free(buf);
    return rc;
}

/* ---- import progress ------------------------------------------------------------------------ */

/* Envelopes an input must hold before any progress shows (smaller imports print nothing), and
 * the step between two progress lines when stderr is not a terminal (CI logs). */
#define IMPORT_EVERY 1000

struct import_progress {
    const char *path, *db;
    int tty;      /* stderr is a terminal: one live line, redrawn at most every 0.1 s */
    int64_t size; /* bytes of the input file (0: unknown) */
    int shown;    /* the live line is on the terminal */
    double last;  /* monotonic seconds when the live line was last drawn */
};

static double monotonic_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* store_import_fn: "verified N envelopes (X of Y MiB)" while reading, then "checked N of M
 * receipts (K new)" in the transaction; on a terminal one line redrawn in place, otherwise a
 * line every IMPORT_EVERY envelopes or receipts and one when all receipts are checked. */
static void import_progress(void *ctx, const struct store_import_status *st)
{
    struct import_progress *p = ctx;
    char counts[160], size[64] = "", added[48] = "";
    if (st->lines < IMPORT_EVERY)
        return;
    int64_t n = st->storing ? st->receipts : st->lines;
    int last = st->storing && st->receipts == st->n_receipts;
    if (p->tty) {
        double t = monotonic_s();
        if (!last && p->shown && t - p->last < 0.1)
            return;
        p->last = t;
    } else if (!last && (n == 0 || n % IMPORT_EVERY != 0)) {
        return;
    }
    if (p->size > 0)
        snprintf(size, sizeof size, " (%.1f of %.1f MiB)", (double)st->bytes / 1048576.0,
                 (double)p->size / 1048576.0);
    if (!st->storing) {
        snprintf(counts, sizeof counts, "verified %" PRId64 " envelopes%s", st->lines, size);
    } else {
        snprintf(counts, sizeof counts, "checked %" PRId64 " of %" PRId64 " receipts", st->receipts,
                 st->n_receipts);
        snprintf(added, sizeof added, " (%" PRId64 " new)", st->added);
    }
    if (p->tty) {
        /* the counts only, cut to one terminal row: a wrapped line cannot be redrawn in place */
        struct winsize ws;
        int width = ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 16 ? ws.ws_col : 80;
        char line[224];
        snprintf(line, sizeof line, "%s%s", counts, added);
        fprintf(stderr, "\r\033[Kgate: import: %.*s", width - 15, line);
        p->shown = 1;
    } else if (!st->storing) {
        fprintf(stderr, "gate: import '%s': %s\n", safe(p->path), counts);
    } else {
        fprintf(stderr, "gate: import '%s': %s against '%s'%s\n", safe(p->path), counts,
                safe(p->db), added);
    }
    fflush(stderr);
}

/* Import o->arg into s with progress on stderr (import_progress); the live line is cleared
 * before anything else is printed. */
static int import_file(struct store *s, const struct opts *o, int *n, struct gate_err *err)
{
    struct import_progress p = {.path = o->arg, .db = o->db, .tty = isatty(2)};
    struct stat sb;
    if (stat(o->arg, &sb) == 0 && S_ISREG(sb.st_mode))
        p.size = (int64_t)sb.st_size;
    int rc = store_import_progress(s, o->arg, import_progress, &p, n, err);
    if (p.shown)
        fputs("\r\033[K", stderr);
    return rc;
}

static int count_row(void *ctx, const struct store_row *r)
{
    (void)r;
    (*(int *)ctx)++;
    return 0;
}

int cmd_receipt(int argc, char **argv)
{
    struct opts o = {.db = DEFAULT_DB};
    struct store *s = NULL;
    struct ladder *lad = NULL;
    struct gate_err err = {0};
    int rc = 0, exit_code = 0;
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(RECEIPT_USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *sub = argv[1];
    int is_list = !strcmp(sub, "list"), is_show = !strcmp(sub, "show");
    int is_verify = !strcmp(sub, "verify"), is_export = !strcmp(sub, "export");
    int is_import = !strcmp(sub, "import");
    if (!(is_list || is_show || is_verify || is_export || is_import))
        return cli_fail(2, "receipt: unknown subcommand '%s'\n%s", sub, RECEIPT_USAGE);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--db")) {
            if (cli_value(argc, argv, &i, &o.db))
                return 2;
        } else if (!strcmp(a, "--cell") && is_list) {
            if (cli_value(argc, argv, &i, &o.cell))
                return 2;
        } else if (!strcmp(a, "--verdict") && is_list) {
            if (cli_value(argc, argv, &i, &o.verdict))
                return 2;
        } else if ((!strcmp(a, "--out") || !strcmp(a, "-o")) && is_export) {
            if (cli_value(argc, argv, &i, &o.out))
                return 2;
        } else if (!strcmp(a, "--all") && is_verify) {
            o.all = 1;
        } else if (!strcmp(a, "--ladder") && is_verify) {
            if (cli_value(argc, argv, &i, &o.ladder))
                return 2;
        } else if (!strcmp(a, "--trust") && is_verify) {
            if (o.n_trust == TRUST_MAX)
                return cli_fail(2, "receipt verify: at most %d --trust keys", TRUST_MAX);
            if (cli_value(argc, argv, &i, &o.trust[o.n_trust++]))
                return 2;
        } else if (!strcmp(a, "--full") && is_show) {
            show_full = 1;
        } else if (!strcmp(a, "--json") && is_show) {
            o.json = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(RECEIPT_USAGE, stdout);
            return 0;
        } else if (a[0] != '-' && (is_show || is_import) && !o.arg) {
            o.arg = a;
        } else {
            return cli_fail(2, "receipt %s: unexpected argument '%s'\n%s", sub, a, RECEIPT_USAGE);
        }
    }
    if ((is_show || is_import) && !o.arg)
        return cli_fail(2, "receipt %s: %s is required\n%s", sub, is_show ? "ID" : "FILE",
                        RECEIPT_USAGE);
    if (is_export && !o.out)
        return cli_fail(2, "receipt export: --out FILE is required\n%s", RECEIPT_USAGE);
    int64_t id = 0;
    if (is_show) {
        char *end;
        id = strtoll(o.arg, &end, 10);
        if (*end || id <= 0)
            return cli_fail(2, "receipt show: '%s' is not a receipt id", o.arg);
    }
    rc = is_import ? store_open(&s, o.db, &err) : store_open_readonly(&s, o.db, &err);
    if (rc)
        goto cleanup;
    if (is_list) {
        printf("%6s  %-20s  %-40s  %-7s  %-23s  %s\n", "id", "stored (UTC)", "cell", "verdict",
               "key", "status");
        rc = store_foreach(s, list_row, &o, &err);
    } else if (is_show) {
        rc = store_get(s, id, o.json ? show_json : show_row, NULL, &err);
    } else if (is_verify) {
        struct verify_ctx v = {.all = o.all};
        struct store_audit a;
        struct trust_src t = {.n = o.n_trust};
        const int have_trust = o.ladder || o.n_trust;
        for (int i = 0; i < o.n_trust; i++)
            if ((rc = trust_key(o.trust[i], t.pk[i], &err)))
                goto cleanup;
        if (o.ladder && (rc = ladder_load(&lad, o.ladder, &err)))
            goto cleanup;
        t.l = lad;
        if ((rc = store_foreach(s, verify_row, &v, &err)) ||
            (rc = store_audit_trusted(s, have_trust ? signoff_trusted : NULL, &t, &a, &err)))
            goto cleanup;
        printf("%d receipt%s in '%s': %d ok, %d failed verification\n", v.n, v.n == 1 ? "" : "s",
               o.db, v.n - v.bad, v.bad);
        printf("%d head records: %d ok, %d failed verification\n", a.n_heads,
               a.n_heads - a.n_head_problems, a.n_head_problems);
        if (a.n_bad)
            printf("store TAMPERED: %d receipts fail verification, the first %s\n", a.n_bad,
                   safe(a.first_problem));
        printf("%d sign-off%s: %d ok, %d failed verification\n", a.n_signoffs,
               a.n_signoffs == 1 ? "" : "s", a.n_signoffs - a.n_signoff_problems,
               a.n_signoff_problems);
        if (a.n_signoff_problems)
            printf("store TAMPERED: %d sign-offs fail verification, the first %s\n",
                   a.n_signoff_problems, safe(a.signoff_problem));
        if (!a.signoff_trust_checked)
            printf("sign-off key trust NOT checked (no --ladder or --trust): a sign-off that"
                   " verifies may be signed by any key\n");
        else
            printf("sign-off key trust checked against %s%s%s%s%.0d%s: %d of %d verified sign-offs"
                   " by a trusted key\n",
                   o.ladder ? "ladder '" : "", o.ladder ? safe(o.ladder) : "",
                   o.ladder ? "' (the keys it trusts for any host)" : "",
                   o.ladder && o.n_trust ? " and " : "", o.n_trust,
                   !o.n_trust       ? ""
                   : o.n_trust == 1 ? " --trust key"
                                    : " --trust keys",
                   a.n_signoffs - a.n_signoff_problems - a.n_signoff_untrusted,
                   a.n_signoffs - a.n_signoff_problems);
        if (a.n_signoff_untrusted)
            printf("store UNTRUSTED: %d sign-off%s signed by a key no trust source names, the"
                   " first %s\n",
                   a.n_signoff_untrusted, a.n_signoff_untrusted == 1 ? " is" : "s are",
                   safe(a.signoff_untrusted));
        if (a.n_head_problems)
            printf("store TAMPERED: %s\n", safe(a.head_problem));
        else if (a.head_key[0] && o.all)
            printf("newest head record: key %s, receipt %s, chain of %" PRId64 "\n",
                   safe(a.head_key), safe(a.head_hash), a.head_count);
        exit_code =
            v.bad || a.n_bad || a.n_head_problems || a.n_signoff_problems || a.n_signoff_untrusted
                ? 1
                : 0;
    } else if (is_export) {
        int n = 0;
        if ((rc = store_export(s, o.out, &err)) || (rc = store_foreach(s, count_row, &n, &err)))
            goto cleanup;
        printf("exported %d receipt%s from '%s' to '%s'\n", n, n == 1 ? "" : "s", o.db, o.out);
    } else {
        int n = 0;
        if ((rc = import_file(s, &o, &n, &err)))
            goto cleanup;
        printf("imported %d new receipts from '%s' into '%s'\n", n, o.arg, o.db);
    }
cleanup:
    store_close(s);
    ladder_free(lad);
    if (rc)
        return cli_fail(err_exit_code(rc), "%s", safe(err.msg));
    return exit_code;
}
