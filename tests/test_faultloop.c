/* test_faultloop.c — SQLite-style fault loops over a whole `gate run` + `gate release check` +
 * `gate receipt verify --all` (issue 11, "Fault loops"), and the GATE_FAULTSIM hook itself
 * (base/faultsim.h).
 *
 * For each fault kind (alloc, write, sqlite) and N = 1, 2, 3, ...: copy a store that already
 * holds one receipt, run the three commands with GATE_FAULTSIM=KIND:N, then check what a release
 * engineer relies on after any failure:
 *   - every command exits with a status (0..3), never a signal or a sanitizer report, and a fault
 *     never turns a non-zero exit of the unfaulted command into 0;
 *   - the store passes PRAGMA integrity_check and an unfaulted `gate receipt verify --all`;
 *   - it holds the old receipts plus at most one new one; a run that exits 0 wrote one;
 *   - a new receipt is whole: every key path of the unfaulted receipt is present (except inside
 *     a gate recorded as an error), and no gate that FAILs unfaulted PASSes under the fault;
 *   - the run's output names the receipt it wrote, and names none when it wrote none.
 * The write and sqlite loops run N through every value until the hook reports "not reached" in
 * all three commands (every write and every statement of the three is failed once); the alloc
 * loop runs every value up to 64, then grows by 1.25x until "not reached". Under ASan
 * (GATE_ASAN=1) every loop runs N = 1, then 64x (the normal build proves the counts; the ASan
 * build looks for memory errors on the failure paths). Each loop prints the exact N it ran.
 * docs/receipts.md ("Fault loops") records the counts. One test runs the three loops on one
 * prepared store.
 *
 * The cell: one synthetic dense model of the smallest useful shape (qwen3, hidden 64, 1 layer,
 * 2/1 heads of 32, ffn 128, vocabulary 512, Q8_0; written once into the test's folder by
 * `gate model synth` and pinned by its digest): every iteration that gets past the ladder pays
 * the whole cell, and the loop judges the store, not the engine, so the cell's forwards are
 * kept as cheap as a real model's gates allow (~0.07 s of CPU per run instead of ~0.9 s with
 * tiny-dense Q4_K_M). cpu.decode (the fast engine as subject), parity at 64 positions (the
 * ladder's least), tiny throughput settings (any spread accepted: a busy host must not turn the
 * baseline into an ERROR row), falsify [skip_qk_norm] without the sampled sweep (its power probe
 * then runs 6 probes: 5 matmuls at the one layer, and the output matrix), goldens recorded for
 * the model by `gate golden record` at setup and then altered to expect another first token
 * (ladderfix_alter_goldens), so the cell's verdict is FAIL (golden, a judged failure: the
 * judge's margin there is ~0.5, far from a near tie) on every build: a fault must never turn
 * that FAIL into a PASS.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/faultsim.h"
#include "harness/identity.h"
#include "tests/support/check.h"
#include "tests/support/ladderfix.h"

#define MAX_VIOLATIONS 6

static char dir[600];
static const char *bin;

static const char *path_in(const char *name)
{
    return check_path(dir, name);
}

/* ---- running gate ---------------------------------------------------------------------------- */

struct outcome {
    int status;  /* raw wait status */
    int code;    /* exit code, or -1 when killed by a signal */
    int fired;   /* the hook said "failed" */
    int counted; /* the hook printed its line at all */
    char *out;   /* stdout + stderr (malloc'd) */
};

static void outcome_free(struct outcome *o)
{
    free(o->out);
    o->out = NULL;
}

/* Run gate with the NULL-terminated arguments, GATE_FAULTSIM=fault (NULL: unset), stdout and
 * stderr into dir/log. */
static void gate(struct outcome *o, const char *fault, const char *log, ...)
{
    const char *argv[24] = {bin};
    int argc = 1;
    va_list ap;
    va_start(ap, log);
    for (const char *a; (a = va_arg(ap, const char *)) && argc < 23;)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    const char *logpath = path_in(log);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork failed");
    if (pid == 0) {
        int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0)
            _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        if (fault)
            setenv("GATE_FAULTSIM", fault, 1);
        else
            unsetenv("GATE_FAULTSIM");
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    memset(o, 0, sizeof *o);
    cr_assert_eq(waitpid(pid, &o->status, 0), pid);
    o->code = WIFEXITED(o->status) ? WEXITSTATUS(o->status) : -1;
    o->out = check_slurp_text(logpath);
    /* the report line: "faultsim: KIND #N failed (M calls)" or "... not reached (M calls)" */
    for (const char *p = o->out; (p = strstr(p, "faultsim: ")); p++) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[256];
        snprintf(line, sizeof line, "%.*s", (int)(len < 255 ? len : 255), p);
        if (strstr(line, " failed ("))
            o->counted = o->fired = 1;
        else if (strstr(line, " not reached ("))
            o->counted = 1;
    }
}

/* The last ~800 bytes of a command's output, for a failure message. */
static const char *tail(const struct outcome *o)
{
    size_t n = strlen(o->out);
    return n > 800 ? o->out + n - 800 : o->out;
}

static void copy_file(const char *from, const char *to)
{
    size_t n = 0;
    uint8_t *b = check_slurp(from, &n);
    unlink(to);
    if (!b)
        return;
    FILE *f = fopen(to, "wb");
    cr_assert(f, "cannot write '%s'", to);
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
}

/* ---- the store as the test sees it (its own SQLite, never gate's) ---------------------------- */

/* PRAGMA integrity_check's answer ("ok" when whole) and the receipt count; the newest payload
 * into *last (malloc'd; NULL when there are none). */
static void inspect(const char *db_path, char *check, size_t n_check, int *n_rows, char **last)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    snprintf(check, n_check, "cannot open");
    *n_rows = -1;
    *last = NULL;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK)
        goto cleanup;
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        snprintf(check, n_check, "%s", (const char *)sqlite3_column_text(st, 0));
    else
        snprintf(check, n_check, "integrity_check did not run: %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM receipts", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        *n_rows = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT payload FROM receipts ORDER BY id DESC LIMIT 1", -1, &st,
                           NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        *last = strdup((const char *)sqlite3_column_text(st, 0));
cleanup:
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* Every leaf's key path of v into set ("$.gates.parity.metrics.cosine[]"), arrays merged. */
static void key_paths(json_t *v, const char *prefix, json_t *set)
{
    char p[1024];
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x)
        {
            snprintf(p, sizeof p, "%s.%s", prefix, k);
            key_paths(x, p, set);
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        snprintf(p, sizeof p, "%s[]", prefix);
        json_array_foreach(v, i, x) key_paths(x, p, set);
    } else {
        json_object_set_new(set, prefix, json_true());
    }
}

/* ---- the loop -------------------------------------------------------------------------------- */

struct loop {
    const char *kind;
    char ladder[1024], key[1024], base_db[1024], db[1024];
    int base_run_code, base_check_code, base_rows;
    json_t *base_payload, *base_paths;
    int violations;
    int n_misprinted;      /* runs that wrote no receipt but printed a receipt id */
    char misprinted[2048]; /* their faults */
};

static void violation(struct loop *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void violation(struct loop *l, const char *fmt, ...)
{
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cr_expect_fail("%s", msg);
    l->violations++;
}

/* A command under the fault ended as a program may end: an exit status 0..3, no signal, no
 * sanitizer report, and the hook's line printed. */
static void judge_exit(struct loop *l, const char *what, const char *fault, const struct outcome *o)
{
    if (o->code < 0 || o->code > 3)
        violation(l, "%s with GATE_FAULTSIM=%s: %s %d (wait status %d):\n%s", what, fault,
                  o->code < 0 ? "killed by signal" : "exit",
                  o->code < 0 ? WTERMSIG(o->status) : o->code, o->status, tail(o));
    else if (strstr(o->out, "Sanitizer") || strstr(o->out, "runtime error:"))
        violation(l, "%s with GATE_FAULTSIM=%s: sanitizer report:\n%s", what, fault, tail(o));
    else if (!o->counted)
        violation(l, "%s with GATE_FAULTSIM=%s: the hook printed no report line:\n%s", what, fault,
                  tail(o));
}

/* The receipt a faulted run wrote is whole: every key path of the unfaulted receipt is there
 * (a gate that recorded an error may lack its numbers), and no gate that FAILs unfaulted
 * PASSes. */
static void judge_receipt(struct loop *l, const char *fault, const char *payload)
{
    json_error_t je;
    json_t *p = json_loads(payload, 0, &je);
    if (!p) {
        violation(l, "GATE_FAULTSIM=%s: the new receipt's payload is not JSON: %s", fault, je.text);
        return;
    }
    json_t *paths = json_object();
    key_paths(p, "$", paths);
    const char *path;
    json_t *x;
    json_object_foreach(l->base_paths, path, x)
    {
        if (json_object_get(paths, path))
            continue;
        char gname[64] = "";
        if (!strncmp(path, "$.gates.", 8))
            sscanf(path + 8, "%63[^.]", gname);
        json_t *g = gname[0] ? json_object_get(json_object_get(p, "gates"), gname) : NULL;
        if (json_is_string(json_object_get(json_object_get(g, "metrics"), "error")) &&
            strcmp(json_string_value(json_object_get(g, "verdict")), "PASS") != 0)
            continue; /* the gate failed with its error recorded: its numbers may be absent */
        violation(l,
                  "GATE_FAULTSIM=%s: half-written receipt: %s is missing (the unfaulted "
                  "receipt has it)",
                  fault, path);
        break;
    }
    json_t *base_gates = json_object_get(l->base_payload, "gates");
    const char *gn;
    json_t *bg;
    json_object_foreach(base_gates, gn, bg)
    {
        const char *bv = json_string_value(json_object_get(bg, "verdict"));
        const char *v = json_string_value(
            json_object_get(json_object_get(json_object_get(p, "gates"), gn), "verdict"));
        if (bv && strcmp(bv, "PASS") != 0 && v && !strcmp(v, "PASS"))
            violation(l, "GATE_FAULTSIM=%s: gate %s PASSes under the fault but is %s without it",
                      fault, gn, bv);
    }
    const char *bv = json_string_value(json_object_get(l->base_payload, "verdict"));
    const char *v = json_string_value(json_object_get(p, "verdict"));
    if (bv && strcmp(bv, "PASS") != 0 && v && !strcmp(v, "PASS"))
        violation(l, "GATE_FAULTSIM=%s: the cell PASSes under the fault but is %s without it",
                  fault, bv);
    json_decref(paths);
    json_decref(p);
}

/* One iteration at N; returns 1 when the fault fired in any of the three commands. */
static int iterate(struct loop *l, long long n)
{
    char fault[64];
    snprintf(fault, sizeof fault, "%s:%lld", l->kind, n);
    copy_file(l->base_db, l->db);
    char side[1100];
    snprintf(side, sizeof side, "%s-wal", l->db);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", l->db);
    unlink(side);

    struct outcome r, c, v, post;
    gate(&r, fault, "run.out", "run", l->ladder, "--host", "a", "--db", l->db, "--key", l->key,
         "--threads", "1", NULL);
    gate(&c, fault, "check.out", "release", "check", l->ladder, "--db", l->db, NULL);
    gate(&v, fault, "verify.out", "receipt", "verify", "--all", "--db", l->db, NULL);
    judge_exit(l, "gate run", fault, &r);
    judge_exit(l, "gate release check", fault, &c);
    judge_exit(l, "gate receipt verify --all", fault, &v);
    if (r.code == 0 && l->base_run_code != 0)
        violation(l, "gate run with GATE_FAULTSIM=%s exits 0; unfaulted it exits %d:\n%s", fault,
                  l->base_run_code, tail(&r));
    if (c.code == 0 && l->base_check_code != 0)
        violation(l, "gate release check with GATE_FAULTSIM=%s exits 0; unfaulted it exits %d:\n%s",
                  fault, l->base_check_code, tail(&c));

    /* the store afterwards, unfaulted */
    char check[512];
    int rows;
    char *last = NULL;
    inspect(l->db, check, sizeof check, &rows, &last);
    if (strcmp(check, "ok") != 0)
        violation(l, "GATE_FAULTSIM=%s: PRAGMA integrity_check says: %s", fault, check);
    gate(&post, NULL, "post.out", "receipt", "verify", "--all", "--db", l->db, NULL);
    if (post.code != 0)
        violation(l, "GATE_FAULTSIM=%s: afterwards `gate receipt verify --all` exits %d:\n%s",
                  fault, post.code, tail(&post));
    if (rows != l->base_rows && rows != l->base_rows + 1)
        violation(l, "GATE_FAULTSIM=%s: the store holds %d receipts; before the run it held %d",
                  fault, rows, l->base_rows);
    char named[64];
    snprintf(named, sizeof named, "(receipt %d)", l->base_rows + 1);
    if (rows == l->base_rows + 1) {
        judge_receipt(l, fault, last ? last : "");
        if (!strstr(r.out, named))
            violation(l, "GATE_FAULTSIM=%s: gate run wrote receipt %d but does not say so:\n%s",
                      fault, rows, tail(&r));
    } else if (rows == l->base_rows) {
        if (r.code == 0)
            violation(l, "gate run with GATE_FAULTSIM=%s exits 0 but wrote no receipt:\n%s", fault,
                      tail(&r));
        const char *claim = strstr(r.out, "(receipt ");
        if (claim) { /* collected, reported once at the end of the loop (see run_loop) */
            int id = atoi(claim + 9);
            size_t u = strlen(l->misprinted);
            if (u < sizeof l->misprinted - 48)
                snprintf(l->misprinted + u, sizeof l->misprinted - u, "%s%s (prints receipt %d)",
                         u ? ", " : "", fault, id);
            l->n_misprinted++;
        }
    }
    int fired = r.fired || c.fired || v.fired;
    free(last);
    outcome_free(&r);
    outcome_free(&c);
    outcome_free(&v);
    outcome_free(&post);
    return fired;
}

/* The loop's ladder at path (see the header comment) over the model fl.gguf of digest
 * model_sha; goldens_sha NULL: the goldens file is declared but not pinned yet (gate golden
 * record accepts that, gate run does not). */
static void write_ladder(const char *path, const char *model_sha, const char *goldens_sha)
{
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f,
            "release: {name: faultloop, version: '%s'}\n"
            "models:\n"
            "  dense:\n"
            "    path: fl.gguf\n"
            "    sha256: %s\n"
            "    arch: qwen3\n"
            "hosts:\n  a: {device: none, trust: ['file:a.pub']}\n"
            "modes: [cpu.decode]\n"
            "cells:\n  - {model: dense, host: a, mode: cpu.decode}\n"
            "gates:\n  defaults:\n"
            "    parity: {positions: 64}\n"
            "    golden: {goldens: fl-goldens.json%s%s}\n"
            "    throughput: {runs: 3, warmup: 0, prompt_tokens: 8, decode_tokens: 4"
            "}\n"
            "    falsify: {faults: [skip_qk_norm], sweep_samples: 0}\n"
            "unanchored: {qwen3: 'the fault loop judges the receipt store, not the engine'}\n",
            GATE_VERSION, model_sha, goldens_sha ? ", sha256: " : "",
            goldens_sha ? goldens_sha : "");
    cr_assert_eq(fclose(f), 0);
}

/* Make the folder, key, ladder and a store holding one unfaulted receipt. */
static void setup_loop(struct loop *l)
{
    memset(l, 0, sizeof *l);
    bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (run through ctest, or set it to build/gate)");
    check_make_dir(dir, sizeof dir, "faultloop");
    snprintf(l->ladder, sizeof l->ladder, "%s", path_in("fl.yaml"));
    snprintf(l->key, sizeof l->key, "%s", path_in("a.key"));
    snprintf(l->base_db, sizeof l->base_db, "%s", path_in("base.db"));
    snprintf(l->db, sizeof l->db, "%s", path_in("it.db"));
    struct outcome o;
    gate(&o, NULL, "setup.out", "key", "gen", "--host", "a", "-o", l->key, "--pub",
         path_in("a.pub"), NULL);
    cr_assert_eq(o.code, 0, "gate key gen:\n%s", o.out);
    outcome_free(&o);
    /* the model is synthesized here, once, and its goldens recorded; the ladder pins both */
    gate(&o, NULL, "setup.out", "model", "synth", "--arch", "qwen3", "--hidden", "64", "--layers",
         "1", "--heads", "2", "--kv-heads", "1", "--head-dim", "32", "--ffn", "128", "--quant",
         "Q8_0", "--seed", "1", "-o", path_in("fl.gguf"), NULL);
    cr_assert_eq(o.code, 0, "gate model synth:\n%s", o.out);
    outcome_free(&o);
    char msha[65];
    struct gate_err err = {0};
    cr_assert_eq(identity_file_sha256(path_in("fl.gguf"), msha, &err), 0, "%s", err.msg);
    write_ladder(l->ladder, msha, NULL);
    gate(&o, NULL, "setup.out", "golden", "record", l->ladder, NULL);
    cr_assert_eq(o.code, 0, "gate golden record:\n%s", o.out);
    outcome_free(&o);
    char gsha[65];
    ladderfix_alter_goldens(path_in("fl-goldens.json"), gsha);
    write_ladder(l->ladder, msha, gsha);
    gate(&o, NULL, "setup.out", "run", l->ladder, "--host", "a", "--db", l->base_db, "--key",
         l->key, "--threads", "1", NULL);
    cr_assert(o.code == 0 || o.code == 1, "the unfaulted run must finish (exit %d):\n%s", o.code,
              o.out);
    l->base_run_code = o.code;
    outcome_free(&o);
    gate(&o, NULL, "setup.out", "release", "check", l->ladder, "--db", l->base_db, NULL);
    cr_assert(o.code >= 0 && o.code <= 3, "unfaulted release check: exit %d:\n%s", o.code, o.out);
    l->base_check_code = o.code;
    outcome_free(&o);
    gate(&o, NULL, "setup.out", "receipt", "verify", "--all", "--db", l->base_db, NULL);
    cr_assert_eq(o.code, 0, "unfaulted receipt verify:\n%s", o.out);
    outcome_free(&o);
    char check[512], *last = NULL;
    inspect(l->base_db, check, sizeof check, &l->base_rows, &last);
    cr_assert_str_eq(check, "ok");
    cr_assert_eq(l->base_rows, 1);
    json_error_t je;
    l->base_payload = json_loads(last, 0, &je);
    cr_assert(l->base_payload, "%s", je.text);
    /* the FAIL the loop guards is the golden judge's (the gate ran every case) */
    cr_assert_str_eq(json_string_value(json_object_get(l->base_payload, "verdict")), "FAIL");
    json_t *bgold = json_object_get(json_object_get(l->base_payload, "gates"), "golden");
    cr_assert_str_eq(json_string_value(json_object_get(bgold, "verdict")), "FAIL");
    cr_assert(strstr(json_string_value(json_object_get(bgold, "reason")), "WRONG"), "%s",
              json_string_value(json_object_get(bgold, "reason")));
    l->base_paths = json_object();
    key_paths(l->base_payload, "$", l->base_paths);
    free(last);
}

/* Loop N over one fault kind on the prepared store. */
static void run_loop(struct loop *l, const char *kind)
{
    l->kind = kind;
    l->violations = l->n_misprinted = 0;
    l->misprinted[0] = '\0';
    int asan = check_asan();
    /* every write and statement; every allocation up to 64, then a geometric sample (tens of
     * thousands are counted); under ASan a sparse sample of each (see the header comment) */
    const long long dense = asan ? 1 : strcmp(kind, "alloc") ? LLONG_MAX : 64;
    const double growth = asan ? 64.0 : 1.25;
    char sparse[2048] = "";
    size_t used = 0;
    int iterations = 0;
    long long n = 1;
    for (;;) {
        int fired = iterate(l, n);
        iterations++;
        if (!fired)
            break;
        if (l->violations >= MAX_VIOLATIONS) {
            cr_expect_fail("faultloop %s: %d violations, stopped at N = %lld", kind, l->violations,
                           n);
            break;
        }
        cr_assert_lt(n, 100000000LL, "faultloop %s: the hook still fires at N = %lld", kind, n);
        long long next = n < dense ? n + 1 : (long long)((double)n * growth);
        n = next > n ? next : n + 1;
        if (n > dense && used < sizeof sparse - 24)
            used += (size_t)snprintf(sparse + used, sizeof sparse - used, ", %lld", n);
    }
    char head[48] = "1";
    const long long top = n < dense ? n : dense; /* the last N of the dense run */
    if (top > 1)
        snprintf(head, sizeof head, "1..%lld", top);
    fprintf(stderr,
            "faultloop %s: %d iterations, N = %s%s; N = %lld reached no %s call in gate run,"
            " release check or receipt verify%s\n",
            kind, iterations, head, sparse, n, kind, asan ? " (ASan build)" : "");
    /* issue 11: a receipt that could not be written is never printed as "=> FAIL (receipt 0)"
     * or with a rolled-back id */
    cr_expect_eq(l->n_misprinted, 0,
                 "faultloop %s: %d runs wrote no receipt but printed a receipt id: %s", kind,
                 l->n_misprinted, l->misprinted);
}

/* One test, one prepared store, three loops: the unfaulted baseline run is paid once (it is
 * most of the cost under ASan). */
Test(faultloop, no_failed_allocation_write_or_statement_breaks_the_store, .timeout = 3600)
{
    struct loop l;
    setup_loop(&l);
    run_loop(&l, "alloc");
    run_loop(&l, "write");
    run_loop(&l, "sqlite");
    json_decref(l.base_payload);
    json_decref(l.base_paths);
}

/* ---- the hook itself ------------------------------------------------------------------------- */

Test(faultsim, parses_kind_and_count)
{
    struct gate_err err = {0};
    enum faultsim_kind k;
    long long n;
    cr_expect_eq(faultsim_parse("alloc:7", &k, &n, &err), 0, "%s", err.msg);
    cr_expect(k == FAULTSIM_ALLOC && n == 7);
    cr_expect_eq(faultsim_parse("write:1", &k, &n, &err), 0);
    cr_expect(k == FAULTSIM_WRITE && n == 1);
    cr_expect_eq(faultsim_parse("sqlite:123456", &k, &n, &err), 0);
    cr_expect(k == FAULTSIM_SQLITE && n == 123456);
    cr_expect_eq(faultsim_parse("", &k, &n, &err), 0);
    cr_expect_eq(k, FAULTSIM_OFF);
    cr_expect_eq(faultsim_parse(NULL, &k, &n, &err), 0);
    cr_expect_eq(k, FAULTSIM_OFF);
    static const char *const bad[] = {"alloc",
                                      "alloc:",
                                      "alloc:0",
                                      "alloc:-3",
                                      "alloc:+3",
                                      "alloc:3x",
                                      "alloc:x",
                                      "disk:3",
                                      "allocx:3",
                                      ":3",
                                      "alloc:99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err_clear(&err);
        cr_expect_eq(faultsim_parse(bad[i], &k, &n, &err), ERR_INPUT, "'%s' accepted", bad[i]);
        cr_expect(strstr(err.msg, bad[i]), "the message does not quote '%s': %s", bad[i], err.msg);
    }
}

Test(faultsim, fails_exactly_the_nth_allocation_once)
{
    struct gate_err err = {0};
    cr_assert_eq(faultsim_arm(FAULTSIM_ALLOC, 3, &err), 0, "%s", err.msg);
    json_t *o[5];
    for (int i = 0; i < 5; i++)
        o[i] = json_integer(i); /* one allocation each */
    for (int i = 0; i < 5; i++)
        cr_expect((o[i] == NULL) == (i == 2), "allocation %d: %p", i + 1, (void *)o[i]);
    for (int i = 0; i < 5; i++)
        json_decref(o[i]);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    faultsim_report(f);
    fclose(f);
    cr_expect(strstr(buf, "faultsim: alloc #3 failed (5 calls)"), "%s", buf);
    free(buf);
    cr_expect_eq(faultsim_arm(FAULTSIM_WRITE, 1, &err), ERR_INPUT, "a second arming");
}

Test(faultsim, fails_the_nth_write_through_the_default_vfs)
{
    struct gate_err err = {0};
    cr_assert_eq(faultsim_arm(FAULTSIM_WRITE, 1, &err), 0, "%s", err.msg);
    char path[1024];
    snprintf(path, sizeof path, "%s/vfsXXXXXX", check_tmp_dir());
    cr_assert(mkdtemp(path));
    strcat(path, "/w.db");
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    int rc = sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1)", NULL, NULL, NULL);
    cr_expect_eq(rc & 0xff, SQLITE_IOERR, "the first write must fail: %s", sqlite3_errstr(rc));
    /* once only: the same work succeeds afterwards and the file is whole */
    rc = sqlite3_exec(db, "CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES (1)", NULL, NULL,
                      NULL);
    cr_expect_eq(rc, SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

Test(faultsim, interrupts_the_nth_statement)
{
    struct gate_err err = {0};
    cr_assert_eq(faultsim_arm(FAULTSIM_SQLITE, 2, &err), 0, "%s", err.msg);
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
    cr_expect_eq(sqlite3_exec(db, "CREATE TABLE t(x)", NULL, NULL, NULL), SQLITE_OK);
    cr_expect_eq(sqlite3_exec(db, "INSERT INTO t VALUES (1)", NULL, NULL, NULL), SQLITE_INTERRUPT);
    cr_expect_eq(sqlite3_exec(db, "INSERT INTO t VALUES (2)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT group_concat(x) FROM t", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 0), "2");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

Test(faultsim, gate_refuses_a_malformed_spec_and_reports_an_unreached_one)
{
    bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN is not set (run through ctest, or set it to build/gate)");
    check_make_dir(dir, sizeof dir, "faultsim");
    struct outcome o;
    gate(&o, "alloc:zero", "bad.out", "version", NULL);
    cr_expect_eq(o.code, 2, "a malformed GATE_FAULTSIM must be exit 2:\n%s", o.out);
    cr_expect(strstr(o.out, "GATE_FAULTSIM 'alloc:zero'"), "%s", o.out);
    outcome_free(&o);
    gate(&o, "alloc:999999999", "far.out", "version", NULL);
    cr_expect_eq(o.code, 0, "%s", o.out);
    cr_expect(strstr(o.out, "faultsim: alloc #999999999 not reached (0 calls)"), "%s", o.out);
    outcome_free(&o);
    gate(&o, NULL, "off.out", "version", NULL);
    cr_expect_eq(o.code, 0, "%s", o.out);
    cr_expect(!strstr(o.out, "faultsim"), "the hook must be silent when unset: %s", o.out);
    outcome_free(&o);
}
