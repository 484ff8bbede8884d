/* cmd_run.c — `gate run`, `gate release check`, `gate golden record`: argument parsing, the
 * order of the steps, and the mapping of statuses to exit codes (DESIGN.md settled question 6).
 * The work is in harness/run.c, harness/release.c and oracles/golden.c, which return data; the
 * drawing is in cli/report.c.
 * Start reading: cmd_run(), then release_check_opts().
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/report.h"
#include "engine/model.h"
#include "engine/pin.h"
#include "harness/identity.h"
#include "harness/ladder.h"
#include "harness/run.h"
#include "oracles/golden.h"
#include "receipts/key.h"
#include "receipts/store.h"

static const char RUN_USAGE[] =
    "usage: gate run LADDER.yaml --host ID [--db receipts.db] [--key FILE] [--only PATTERN]\n"
    "                [--threads N] [--json] [--junit FILE] [--input-seed HEX]\n"
    "  Runs every cell of this host (--host or $GATE_HOST) through the capability, parity,\n"
    "  golden, throughput and falsify gates and writes one signed receipt per cell.\n"
    "  --key     signing key (default ~/.config/gate/keys/<host>.key; make one with gate key gen)\n"
    "  --only    fnmatch pattern over model/host/mode (an F16-KV cell's name ends +kv=f16)\n"
    "  --junit   also write the results as JUnit XML to FILE (one testsuite per cell, one\n"
    "            testcase per gate; written even when nothing could run; docs/reports.md)\n"
    "  --input-seed  the seed of the inputs parity and falsify judge (1 to 16 hex digits, not\n"
    "            0): reproduces a run; by default each run draws a fresh one, so an engine\n"
    "            cannot know its test inputs (every receipt records it; docs/gates.md)\n"
    "  Exit 0 when every cell passed, 1 when any failed, 2 for usage or ladder errors,\n"
    "  3 for environment errors (no GPU where the host declares one, disk full).\n";

int cmd_run(int argc, char **argv)
{
    struct run_options o;
    memset(&o, 0, sizeof o);
    const char *v, *junit = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(RUN_USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--host")) {
            if (cli_value(argc, argv, &i, &o.host))
                return 2;
        } else if (!strcmp(argv[i], "--db")) {
            if (cli_value(argc, argv, &i, &o.db))
                return 2;
        } else if (!strcmp(argv[i], "--key")) {
            if (cli_value(argc, argv, &i, &o.key))
                return 2;
        } else if (!strcmp(argv[i], "--only")) {
            if (cli_value(argc, argv, &i, &o.only))
                return 2;
        } else if (!strcmp(argv[i], "--threads")) {
            if (cli_value(argc, argv, &i, &v) ||
                cli_int("run", "--threads", v, 1, 1024, &o.threads))
                return 2;
        } else if (!strcmp(argv[i], "--input-seed")) {
            char *end = NULL;
            if (cli_value(argc, argv, &i, &v))
                return 2;
            errno = 0;
            const unsigned long long s = strtoull(v, &end, 16);
            if (!*v || *v == '-' || *v == '+' || strlen(v) > 16 || *end || errno || !s)
                return cli_fail(2, "run: --input-seed must be 1 to 16 hex digits, not 0: '%s'", v);
            o.input_seed = (uint64_t)s;
        } else if (!strcmp(argv[i], "--json")) {
            o.json = 1;
        } else if (!strcmp(argv[i], "--junit")) {
            if (cli_value(argc, argv, &i, &junit))
                return 2;
        } else if (argv[i][0] == '-' || o.ladder) {
            fputs(RUN_USAGE, stderr);
            return cli_fail(2, "run: unexpected argument '%s'", argv[i]);
        } else {
            o.ladder = argv[i];
        }
    }
    if (!o.ladder) {
        fputs(RUN_USAGE, stderr);
        return 2;
    }
    struct report_run rep;
    memset(&rep, 0, sizeof rep);
    rep.json = o.json;
    rep.tty = isatty(2) && !o.json;
    struct run_result res;
    struct gate_err err = {0};
    int rc = run_ladder(&o, report_run_progress, &rep, &res, &err);
    report_run_end(&rep);
    int code;
    if (res.n == 0) {
        /* nothing ran: the status says why */
        code = rc ? cli_fail(err_exit_code(rc), "%s", err.msg) : 2;
    } else {
        /* the events already named a receipt or head that could not be written */
        report_run_results(stdout, &res, o.json);
        code = rc ? err_exit_code(rc) : res.n_pass == res.n ? 0 : 1;
    }
    /* a run that stopped early is an <error> in the file, never an empty green report */
    struct gate_err jerr = {0};
    if (junit &&
        report_run_junit(junit, &res, rc ? err.msg[0] ? err.msg : "the run stopped early" : NULL,
                         &jerr))
        code = cli_fail(code ? code : 3, "run --junit: %s", jerr.msg);
    run_result_free(&res);
    return code;
}

static const char RELEASE_USAGE[] =
    "usage: gate release check LADDER.yaml [--db receipts.db] [--sign KEY] [--expect-head HASH]\n"
    "                          [--json] [--junit FILE]\n"
    "  For every required cell and every anchor case: PASS, FAIL, FLAKY, ERROR, MISSING, STALE,\n"
    "  UNTRUSTED or TAMPERED, re-judged from the signed receipts for this exact build and the\n"
    "  ladder's pinned digests and settings; excluded cells are listed as EXCLUDED with their\n"
    "  reason. Prints the matrix and the blocking rows, each naming its receipt; exit 0 only\n"
    "  when every row is PASS. The store is opened read-only unless --sign, which writes a\n"
    "  signed sign-off and head record when the release passes. --expect-head HASH requires the\n"
    "  store to still hold the receipt a `gate run` printed as its chain head.\n"
    "  --json prints the whole matrix as one JSON document instead (rows, states, blocking\n"
    "  receipts, reasons, counts, build; docs/reports.md); --junit FILE also writes it as JUnit\n"
    "  XML. Exit codes are the same.\n";

int cmd_release(int argc, char **argv)
{
    struct release_options o = {.db = "receipts.db"};
    const char *junit = NULL;
    int json = 0;
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(RELEASE_USAGE, stdout);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "check")) {
        fputs(RELEASE_USAGE, stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(RELEASE_USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--db")) {
            if (cli_value(argc, argv, &i, &o.db))
                return 2;
        } else if (!strcmp(argv[i], "--sign")) {
            if (cli_value(argc, argv, &i, &o.sign_key))
                return 2;
        } else if (!strcmp(argv[i], "--expect-head")) {
            if (cli_value(argc, argv, &i, &o.expect_head))
                return 2;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--junit")) {
            if (cli_value(argc, argv, &i, &junit))
                return 2;
        } else if (argv[i][0] == '-' || o.ladder) {
            fputs(RELEASE_USAGE, stderr);
            return cli_fail(2, "release: unexpected argument '%s'", argv[i]);
        } else {
            o.ladder = argv[i];
        }
    }
    if (!o.ladder) {
        fputs(RELEASE_USAGE, stderr);
        return 2;
    }
    return release_check_report(stdout, &o, NULL, json, junit);
}

/* `gate release check` (declared in cli/cli.h): release_check_report() without the CI
 * outputs. Returns the exit code. */
int release_check_opts(FILE *out, const struct release_options *o, const struct identity *self)
{
    return release_check_report(out, o, self, 0, NULL);
}

/* The check could not run: say so on stderr (and as JSON on out), return code. */
static int check_failed(FILE *out, int json, int code, const char *msg)
{
    if (json) {
        json_t *j =
            json_pack("{s:s, s:b, s:s?}", "schema", "gate.release/1", "ok", 0, "error", msg);
        if (!j) /* msg not UTF-8: the error is on stderr anyway */
            j = json_pack("{s:s, s:b, s:s}", "schema", "gate.release/1", "ok", 0, "error",
                          "the check could not run (see stderr)");
        json_dumpf(j, out, JSON_INDENT(2));
        fputc('\n', out);
        json_decref(j);
    }
    return cli_fail(code, "%s", msg);
}

/* The whole `gate release check` (report.h has the contract): load and check the ladder, the
 * build identity (self, or the running binary's), the sign-off key, open the store (read-only
 * unless signing), evaluate, print (text or JSON), sign when OK, write the JUnit file. */
int release_check_report(FILE *out, const struct release_options *o, const struct identity *self,
                         int json, const char *junit)
{
    struct gate_err err = {0}, jerr = {0};
    struct ladder *l = NULL;
    struct store *st = NULL;
    struct identity id;
    struct key_pair k;
    struct release_result r;
    json_t *signoff = NULL;
    int rc, code = 0, evaluated = 0;
    char msg[sizeof err.msg + 64];
    msg[0] = '\0';
    memset(&k, 0, sizeof k);
    memset(&r, 0, sizeof r);
    if ((rc = ladder_load(&l, o->ladder, &err)) || (rc = ladder_check_runnable(l, &err))) {
        snprintf(msg, sizeof msg, "%s", err.msg);
        code = check_failed(out, json, err_exit_code(rc), msg);
        goto out;
    }
    if (self)
        id = *self;
    else if ((rc = identity_get(&id, &err))) {
        snprintf(msg, sizeof msg, "%s", err.msg);
        code = check_failed(out, json, err_exit_code(rc), msg);
        goto out;
    }
    /* a sign-off writes to the store; a check only reads it (and works on a read-only file) */
    if (o->sign_key && (rc = key_load(o->sign_key, &k, &err))) {
        snprintf(msg, sizeof msg, "release check --sign: %s", err.msg);
        code = check_failed(out, json, err_exit_code(rc), msg);
        goto out;
    }
    rc = o->sign_key ? store_open(&st, o->db, &err) : store_open_readonly(&st, o->db, &err);
    if (rc || (rc = release_evaluate(l, st, &id, o, &r, &err))) {
        snprintf(msg, sizeof msg, "%s", err.msg);
        code = check_failed(out, json, err_exit_code(rc), msg);
        goto out;
    }
    evaluated = 1;
    if (!json && (rc = report_release(out, l, o->ladder, o->db, &id, &r, &err))) {
        code = cli_fail(err_exit_code(rc), "%s", err.msg); /* the matrix was not laid */
        goto out;
    }
    code = r.ok ? 0 : 1;
    if (o->sign_key && r.ok) {
        char head[65];
        int64_t count = 0;
        if ((rc = release_sign(l, st, &id, &r, &k, head, &count, &err))) {
            /* the matrix was judged; only the sign-off failed */
            code = cli_fail(err_exit_code(rc), "%s", err.msg);
            struct gate_err ignored = {0}; /* the exit code already says the check failed */
            if (json)
                report_release_json(out, l, o->ladder, o->db, &id, &r, NULL, &ignored);
            goto out;
        }
        if (json)
            signoff = json_pack("{s:s, s:s, s:s, s:I}", "db", o->db, "key_id", k.id, "head", head,
                                "receipts", (json_int_t)count);
        else
            fprintf(out,
                    "sign-off written to %s, signed by %s; chain head %s (%" PRId64 " receipts)\n",
                    o->db, k.id, head, count);
    } else if (o->sign_key && !json) {
        fprintf(out, "not signed: the release is blocked\n");
    }
    if (json && (rc = report_release_json(out, l, o->ladder, o->db, &id, &r, signoff, &err)))
        code = cli_fail(err_exit_code(rc), "%s", err.msg);
out:
    if (junit && report_release_junit(junit, evaluated ? l : NULL, evaluated ? &r : NULL,
                                      msg[0] ? msg : err.msg, &jerr))
        code = cli_fail(code ? code : 3, "release check --junit: %s", jerr.msg);
    json_decref(signoff);
    release_result_free(&r);
    key_wipe(&k);
    store_close(st);
    ladder_free(l);
    return code;
}

int release_check_to(FILE *out, const char *ladder, const char *db, const char *sign_key,
                     const struct identity *self)
{
    struct release_options o = {.ladder = ladder, .db = db, .sign_key = sign_key};
    return release_check_opts(out, &o, self);
}

static const char GOLDEN_USAGE[] =
    "usage: gate golden record LADDER.yaml [--threads N] [--force]\n"
    "  Records, from the reference twin, the greedy continuations of every ladder model into the\n"
    "  goldens file its gates declare (gates.golden.goldens), keyed by the model's SHA-256, with\n"
    "  who recorded them (this build, backend ref, date): REGRESSION goldens, labelled so in\n"
    "  every report. A model that already has an entry is skipped (kept, and said so) unless\n"
    "  --force, which records it again. The file's bytes change: pin the new digest in the\n"
    "  ladder (gates.golden.sha256) — old receipts go STALE.\n"
    "  Prints the file's new digest and the line to pin it. A `synth:` model not yet in the\n"
    "  cache is synthesized first, as gate run does, into .gate-cache/ID-PRESET-QUANT-SEED.gguf\n"
    "  next to the ladder (deterministic: the bytes the ladder pins; delete the folder to\n"
    "  reclaim the space). A `path:` model must exist. No receipt is written.\n";

int cmd_golden(int argc, char **argv)
{
    const char *ladder = NULL, *v;
    int threads = 0, force = 0;
    if (argc < 2 || strcmp(argv[1], "record")) {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            fputs(GOLDEN_USAGE, stdout);
            return 0;
        }
        fputs(GOLDEN_USAGE, stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(GOLDEN_USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--force")) {
            force = 1;
        } else if (!strcmp(argv[i], "--threads")) {
            if (cli_value(argc, argv, &i, &v) ||
                cli_int("golden", "--threads", v, 1, 1024, &threads))
                return 2;
        } else if (argv[i][0] == '-' || ladder) {
            fputs(GOLDEN_USAGE, stderr);
            return cli_fail(2, "golden: unexpected argument '%s'", argv[i]);
        } else {
            ladder = argv[i];
        }
    }
    if (!ladder) {
        fputs(GOLDEN_USAGE, stderr);
        return 2;
    }
    struct gate_err err = {0};
    struct ladder *l = NULL;
    struct identity self;
    int rc = ladder_load(&l, ladder, &err);
    if (!rc && (rc = identity_get(&self, &err)))
        ladder_free(l);
    if (rc)
        return cli_fail(err_exit_code(rc), "%s", err.msg);
    int n = 0, kept = 0;
    for (int mi = 0; mi < l->n_models && !rc; mi++) {
        /* every distinct goldens file / token count the model's cells use */
        for (int ci = 0; ci < l->n_cells && !rc; ci++) {
            const struct ladder_cell *c = &l->cells[ci];
            if (c->model != mi || !c->g.goldens[0])
                continue;
            /* recorded already: by an earlier cell of this model, or of an earlier model that
             * is the same file under the same pin (one entry per digest; the nightly's rungs
             * share one synthesized file) */
            int dup = 0;
            for (int cj = 0; cj < l->n_cells && !dup; cj++) {
                const struct ladder_cell *o = &l->cells[cj];
                const struct ladder_model *om = &l->models[o->model], *mm = &l->models[mi];
                const int same = o->model == mi ? cj < ci
                                                : o->model < mi && !strcmp(om->path, mm->path) &&
                                                      !strcmp(om->sha256, mm->sha256);
                dup = same && !strcmp(o->g.goldens, c->g.goldens) &&
                      o->g.golden_tokens == c->g.golden_tokens;
            }
            if (dup)
                continue;
            /* the file must be the pinned one, recorded before or not (a wrong file is named
             * here, not at the first run) */
            struct model *m = NULL;
            struct pinned pf = {.fd = -1};
            rc = cli_ensure_model(&l->models[mi], threads, &err);
            /* opened once, hashed and run from one private copy (engine/pin.h) */
            if (!rc)
                rc = pin_open_bounded(l->models[mi].path, NULL, UINT64_MAX, &pf, &err);
            if (!rc && strcmp(pf.sha256, l->models[mi].sha256))
                rc = err_set(&err, ERR_INPUT,
                             "model '%s' (%s) has SHA-256 %s but the ladder pins"
                             " %s: not recording goldens for another file",
                             l->models[mi].id, l->models[mi].path, pf.sha256, l->models[mi].sha256);
            /* recorded before (a ladder that gained a model records only the new one): kept and
             * said so, the twin not run for it; another token count than its cells ask is
             * refused */
            char who[64] = "";
            int had = 0;
            if (!rc && !force)
                rc = golden_entry_of(c->g.goldens, pf.sha256, who, sizeof who, &had, &err);
            if (!rc && who[0] && had != c->g.golden_tokens)
                rc = err_set(&err, ERR_INPUT,
                             "goldens for %s (%.12s...) in %s hold %d tokens per prompt but its"
                             " cells ask %d (gates.golden.tokens): not keeping them (--force"
                             " records them again)",
                             l->models[mi].id, pf.sha256, c->g.goldens, had, c->g.golden_tokens);
            if (!rc && who[0]) {
                printf("goldens for %s (%.12s...) are already in %s, recorded by %s: kept"
                       " (--force records them again)\n",
                       l->models[mi].id, pf.sha256, c->g.goldens, who);
                kept++;
                pin_close(&pf);
                continue;
            }
            if (!rc)
                rc = model_load_pinned(&m, &pf, &err);
            pin_close(&pf);
            if (!rc) {
                json_t *by = golden_recorded_by_gate(self.git_commit, self.git_dirty);
                rc = golden_record_force(c->g.goldens, m, c->g.golden_tokens, threads, force, by,
                                         &err);
                json_decref(by);
            }
            if (!rc) {
                printf("recorded %d greedy tokens per prompt for %s into %s\n", c->g.golden_tokens,
                       l->models[mi].id, c->g.goldens);
                n++;
            }
            model_free(m);
        }
    }
    /* the goldens are evidence pinned by their bytes: give the new digest and the line */
    for (int ci = 0; !rc && ci < l->n_cells; ci++) {
        const struct ladder_gates *g = &l->cells[ci].g;
        int dup = !g->goldens[0];
        for (int cj = 0; cj < ci && !dup; cj++)
            dup = !strcmp(l->cells[cj].g.goldens, g->goldens);
        char sha[65];
        if (dup || identity_file_sha256(g->goldens, sha, NULL))
            continue;
        if (strcmp(sha, g->goldens_sha256))
            printf("goldens %s: sha256 %s (the ladder pins %s)\n  pin it in %s:"
                   " gates.golden.sha256: %s\n",
                   g->goldens, sha, g->goldens_sha256[0] ? g->goldens_sha256 : "nothing", ladder,
                   sha);
        else
            printf("goldens %s: sha256 %s (already the ladder's pin)\n", g->goldens, sha);
    }
    ladder_free(l);
    if (rc)
        return cli_fail(err_exit_code(rc), "%s", err.msg);
    if (n == 0 && kept == 0)
        return cli_fail(2, "golden: no cell of %s declares gates.golden.goldens", ladder);
    return 0;
}
