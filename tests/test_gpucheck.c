/* test_gpucheck.c — the GPU check (ci/gpu-check.sh) works before it ever meets a GPU (issue 12):
 *
 * - its CPU dry run (GATE_GPU_DRYRUN=1, GATE_BIN = this build's gate) starts every stage in
 *   order, each stage ends with an exit status and a reason (no 127: a stage is never a shell
 *   function handed to timeout), the GPU stages fail cleanly with the no-device reason, and
 *   summary.json says so; it takes seconds;
 * - a spent budget skips the stages with that reason, and a stage's timeout is clipped to what is
 *   left of the budget;
 * - the script's list of kernel families is oracles/selftest.c's, so each family runs in its own
 *   process and none is forgotten;
 * - the host check's device-family match (backend_device_name_matches) is whole-word.
 * Everything is written under a temp folder; the dry run writes nothing into the tree.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "engine/backend.h"
#include "tests/support/check.h"

static const char *STAGES_HEAD[] = {"preflight", "deps", "build"};
static const char *STAGES_TAIL[] = {"e2e", "bench", "ladder"};

/* Run the dry run into OUT = tmp/<name> with an extra environment assignment (may be ""); return
 * the parsed summary.json (asserting it exists and parses) and set *status to the exit code. */
static json_t *dry_run(const char *name, const char *env, int *status)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN must name the gate binary (ctest sets it)");
    char out[1024], cmd[4096];
    snprintf(out, sizeof out, "%s/%s", check_tmp_dir(), name);
    snprintf(cmd, sizeof cmd,
             "env GATE_GPU_DRYRUN=1 GATE_BIN='%s' GATE_SHARED='%s' %s bash '%s/ci/gpu-check.sh' "
             "'%s' >'%s.stdout' 2>&1",
             bin, check_shared_dir(), env, GATE_SOURCE_DIR, out, out);
    const int ws = system(cmd);
    cr_assert(WIFEXITED(ws), "the dry run did not exit normally (%d)", ws);
    *status = WEXITSTATUS(ws);
    char path[1200];
    snprintf(path, sizeof path, "%s/summary.json", out);
    json_error_t je;
    json_t *sum = json_load_file(path, 0, &je);
    snprintf(path, sizeof path, "%s.stdout", out);
    char *text = check_slurp_text(path);
    cr_assert(sum, "no readable summary.json after the dry run (%s); its output:\n%s", je.text,
              text);
    free(text);
    return sum;
}

/* The kernel families of oracles/selftest.c (its FAMILY("name", ...) rows), space-separated. */
static void selftest_families(char *buf, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/oracles/selftest.c", GATE_SOURCE_DIR);
    char *src = check_slurp_text(path);
    buf[0] = 0;
    for (const char *p = src; (p = strstr(p, "    FAMILY(\"")); p++) {
        const char *name = p + 12, *end = strchr(name, '"');
        cr_assert(end);
        const size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%.*s", len ? " " : "", (int)(end - name), name);
    }
    free(src);
    cr_assert(buf[0], "found no FAMILY rows in %s", path);
}

Test(gpucheck, dry_run_starts_every_stage_and_writes_the_summary, .timeout = 300)
{
    int status = 0;
    json_t *sum = dry_run("dry", "", &status);
    cr_assert_eq(status, 1, "a dry run on a CPU host cannot pass (exit %d)", status);
    cr_assert(json_is_true(json_object_get(sum, "dry_run")));
    cr_assert_str_eq(json_string_value(json_object_get(sum, "result")), "FAIL");
    cr_assert_eq(json_integer_value(json_object_get(sum, "budget_s")), 480);

    /* the order: preflight, deps, build, one selftest stage per family, e2e, bench, ladder */
    char fams[512], expect[1024] = "";
    selftest_families(fams, sizeof fams);
    for (size_t i = 0; i < 3; i++)
        snprintf(expect + strlen(expect), sizeof expect - strlen(expect), "%s ", STAGES_HEAD[i]);
    char copy[512];
    snprintf(copy, sizeof copy, "%s", fams);
    for (char *save = NULL, *f = strtok_r(copy, " ", &save); f; f = strtok_r(NULL, " ", &save))
        snprintf(expect + strlen(expect), sizeof expect - strlen(expect), "selftest.%s ", f);
    for (size_t i = 0; i < 3; i++)
        snprintf(expect + strlen(expect), sizeof expect - strlen(expect), "%s ", STAGES_TAIL[i]);

    json_t *stages = json_object_get(sum, "stages");
    cr_assert(json_is_array(stages));
    char got[1024] = "";
    const int no_gpu = system("command -v nvidia-smi >/dev/null 2>&1") != 0;
    size_t i;
    json_t *s;
    json_array_foreach(stages, i, s)
    {
        const char *name = json_string_value(json_object_get(s, "name"));
        const char *st = json_string_value(json_object_get(s, "status"));
        const char *why = json_string_value(json_object_get(s, "reason"));
        const json_int_t rc = json_integer_value(json_object_get(s, "rc"));
        cr_assert(name && st && why);
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s ", name);
        /* every stage started and ended with a status and a reason */
        cr_assert(!strcmp(st, "pass") || !strcmp(st, "fail"), "stage %s: status %s (%s)", name, st,
                  why);
        cr_assert(json_is_integer(json_object_get(s, "rc")), "stage %s has no exit code", name);
        cr_assert(*why, "stage %s has no reason", name);
        cr_assert_neq(rc, 127, "stage %s: exit 127 (command not found): %s", name, why);
        cr_assert_neq(rc, 124, "stage %s timed out: %s", name, why);
        if (!strcmp(name, "deps") || !strcmp(name, "build"))
            cr_assert_str_eq(st, "pass", "stage %s: %s", name, why);
        if (!no_gpu)
            continue;
        /* on a host without a GPU: preflight says why; each GPU stage fails with its reason */
        if (!strcmp(name, "preflight"))
            cr_assert(strstr(why, "nvidia-smi"), "preflight: %s", why);
        if (!strncmp(name, "selftest.", 9) || !strcmp(name, "e2e") || !strcmp(name, "bench")) {
            cr_assert_eq(rc, 3, "stage %s: exit %d (%s), want 3 (no device)", name, (int)rc, why);
            cr_assert(strstr(why, "CUDA") || strstr(why, "cuda"), "stage %s: %s", name, why);
        }
        if (!strcmp(name, "ladder"))
            cr_assert(strstr(why, "gate run exit 3") && strstr(why, "none is usable"), "ladder: %s",
                      why);
    }
    cr_assert_str_eq(got, expect, "stages run: %s\nexpected: %s", got, expect);
    json_decref(sum);
}

Test(gpucheck, a_spent_budget_skips_stages_with_the_reason, .timeout = 120)
{
    int status = 0;
    json_t *sum = dry_run("nobudget", "GATE_GPU_BUDGET_S=0", &status);
    cr_assert_eq(status, 1);
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(sum, "stages"), i, s)
    {
        const char *why = json_string_value(json_object_get(s, "reason"));
        cr_assert_str_eq(json_string_value(json_object_get(s, "status")), "skipped");
        cr_assert(why && strstr(why, "budget is spent"), "reason: %s", why);
    }
    json_decref(sum);

    /* a budget smaller than a stage's own limit clips that stage's timeout */
    sum = dry_run("smallbudget", "GATE_GPU_BUDGET_S=9", &status);
    json_decref(sum);
    char path[1200];
    snprintf(path, sizeof path, "%s/smallbudget/gpu-check.log", check_tmp_dir());
    char *log = check_slurp_text(path);
    const char *first = strstr(log, "== stage preflight (timeout ");
    cr_assert(first, "no preflight line in the log:\n%s", log);
    const int t = atoi(first + strlen("== stage preflight (timeout "));
    cr_assert(t >= 1 && t <= 9, "preflight timeout %ds, not clipped to the 9 s budget", t);
    free(log);
}

/* Issue 25 R1 and R6: a tree whose .git did not travel (GIT_DIR names nothing) fails preflight
 * with the git reason and is never counted clean; a shared-memory folder without room for the
 * bench model puts the scratch folder on disk and says so. */
Test(gpucheck, no_git_fails_preflight_and_a_full_shm_puts_scratch_on_disk, .timeout = 300)
{
    int status = 0;
    json_t *sum = dry_run("nogit", "GIT_DIR=/nonexistent GATE_SHM_NEED_MB=999999999", &status);
    cr_expect(json_is_false(json_object_get(sum, "tree_clean")), "tree_clean without git");
    cr_expect_str_eq(json_string_value(json_object_get(sum, "commit")), "unknown");
    json_t *pre = json_array_get(json_object_get(sum, "stages"), 0);
    const char *why = json_string_value(json_object_get(pre, "reason"));
    cr_expect(why && strstr(why, "git rev-parse HEAD failed"), "preflight: %s", why);
    json_decref(sum);
    char path[1200];
    snprintf(path, sizeof path, "%s/nogit/gpu-check.log", check_tmp_dir());
    char *log = check_slurp_text(path);
    cr_expect(strstr(log, "scratch on disk (") && strstr(log, "the check wants 999999999"), "%s",
              log);
    free(log);
}

/* Issue 25 R7: a ladder stage killed with the receipts DB open leaves its -wal and -shm in
 * scratch, and they come back inside one receipts.db.tar, never as loose files in OUT. The kill
 * is simulated: GATE_BIN is a wrapper whose `run` writes a WAL-mode DB and dies by SIGKILL. */
Test(gpucheck, a_killed_ladder_stage_brings_the_db_back_as_one_file, .timeout = 300)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin);
    char wrap[1024], env[1200];
    snprintf(wrap, sizeof wrap, "%s/killed-gate.sh", check_tmp_dir());
    FILE *f = fopen(wrap, "w");
    cr_assert(f);
    fprintf(f,
            "#!/bin/sh\n"
            "if [ \"$1\" = run ]; then\n"
            "  while [ $# -gt 0 ] && [ \"$1\" != --db ]; do shift; done\n"
            "  exec python3 -c 'import os, sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1]); c.execute(\"PRAGMA journal_mode=WAL\")\n"
            "c.execute(\"CREATE TABLE t (x)\"); c.commit(); os.kill(os.getpid(), 9)' \"$2\"\n"
            "fi\n"
            "exec '%s' \"$@\"\n",
            bin);
    fclose(f);
    cr_assert_eq(chmod(wrap, 0755), 0);
    snprintf(env, sizeof env, "GATE_BIN='%s'", wrap);
    int status = 0;
    json_decref(dry_run("killed", env, &status));
    char out[1100], cmd[2600];
    snprintf(out, sizeof out, "%s/killed", check_tmp_dir());
    snprintf(cmd, sizeof cmd,
             "cd '%s' && [ ! -e receipts.db-wal ] && [ ! -e receipts.db-shm ] && "
             "[ $(ls -A | wc -l) -le 8 ] && tar -tf receipts.db.tar | grep -qx receipts.db-wal",
             out);
    cr_expect_eq(system(cmd), 0, "OUT (%s) holds loose WAL files or no receipts.db.tar", out);
}

Test(gpucheck, the_script_runs_every_kernel_family_of_the_selftest)
{
    char fams[512];
    selftest_families(fams, sizeof fams);
    char path[1024];
    snprintf(path, sizeof path, "%s/ci/gpu-check.sh", GATE_SOURCE_DIR);
    char *src = check_slurp_text(path);
    const char *list = strstr(src, "FAMILIES=(");
    cr_assert(list, "ci/gpu-check.sh has no FAMILIES=( list");
    list += strlen("FAMILIES=(");
    const char *end = strchr(list, ')');
    cr_assert(end);
    char script[512] = "";
    for (const char *p = list; p < end;) {
        while (p < end && strchr(" \t\n", *p))
            p++;
        const char *w = p;
        while (p < end && !strchr(" \t\n", *p))
            p++;
        if (p > w)
            snprintf(script + strlen(script), sizeof script - strlen(script), "%s%.*s",
                     script[0] ? " " : "", (int)(p - w), w);
    }
    cr_assert_str_eq(script, fams, "ci/gpu-check.sh FAMILIES vs oracles/selftest.c");
    free(src);
}

Test(gpucheck, a_declared_device_family_matches_whole_words)
{
    cr_assert(backend_device_name_matches("H200", "NVIDIA H200 NVL"));
    cr_assert(backend_device_name_matches("H200", "NVIDIA H200"));
    cr_assert(backend_device_name_matches("NVIDIA H200", "NVIDIA H200 NVL"));
    cr_assert(backend_device_name_matches("NVIDIA H200", "NVIDIA H200"));
    cr_assert(backend_device_name_matches("h200", "NVIDIA H200"));
    cr_assert(backend_device_name_matches("H100 80GB HBM3", "NVIDIA H100 80GB HBM3"));
    cr_assert(!backend_device_name_matches("H20", "NVIDIA H200"));
    cr_assert(!backend_device_name_matches("H200", "NVIDIA GH200 480GB"));
    cr_assert(!backend_device_name_matches("H200 NVL", "NVIDIA H200"));
    cr_assert(!backend_device_name_matches("NVIDIA H200 NVL", "NVIDIA H200"));
    cr_assert(!backend_device_name_matches("", "NVIDIA H200"));
    cr_assert(!backend_device_name_matches(NULL, "NVIDIA H200"));
    cr_assert(!backend_device_name_matches("H200", NULL));
}
