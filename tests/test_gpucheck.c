/* test_gpucheck.c — the GPU check (ci/gpu-check.sh) works before it ever meets a GPU (issue 12):
 *
 * - its CPU dry run (GATE_GPU_DRYRUN=1, GATE_BIN = this build's gate) starts every stage in
 *   order, each stage ends with an exit status and a reason (no 127: a stage is never a shell
 *   function handed to timeout), the GPU stages fail cleanly with the no-device reason, and
 *   summary.json says so; it takes seconds. The dry run hides any device with
 *   CUDA_VISIBLE_DEVICES="" (the CUDA runtime's own switch), so a CUDA build on a GPU host sees
 *   no device either and the test expects the same everywhere;
 * - a spent budget skips the stages with that reason, and a stage's timeout is clipped to what is
 *   left of the budget;
 * - the script's list of kernel families is oracles/selftest.c's, so each family runs in its own
 *   process and none is forgotten;
 * - the host check's device-family match (backend_device_name_matches) is whole-word;
 * - the first-run risks of issue 25 section 1, each simulated: a tree whose .git did not travel
 *   (R1: preflight names it; with the build-identity file the commit is known and the tree
 *   verified), a PATH without pkg-config (R2), a fresh prefix with an absolute symlink (R3),
 *   the -Werror switch (R4), a toolkit without cuBLAS and a binary whose library cannot load
 *   (R5), the carried libraries seen by gate only (R8).
 * Everything is written under a temp folder (GATE_DEB_DIR included); the dry run writes nothing
 * into the tree.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/backend.h"
#include "tests/support/check.h"

/* The script's knobs come from the environment; the suite stage runs these tests on the GPU host
 * inside the check itself (GATE_GPU_BUDGET_S=560 there made the dry run's budget 560, not the
 * default this file expects). Each test sets what it needs; nothing is inherited. */
__attribute__((constructor)) static void forget_the_callers_knobs(void)
{
    static const char *const KNOBS[] = {"GATE_GPU_BUDGET_S",
                                        "GATE_GPU_SKIP",
                                        "GATE_GPU_DRYRUN",
                                        "GATE_PREPARE_ONLY",
                                        "GATE_BENCH_LAYERS",
                                        "GATE_BENCH_LAYERS_8B",
                                        "GATE_CUDA_ARCH",
                                        "GATE_SHM_DIR",
                                        "GATE_SHM_NEED_MB",
                                        "GATE_DEB_DIR",
                                        NULL};
    for (int i = 0; KNOBS[i]; i++)
        unsetenv(KNOBS[i]);
}

static const char *STAGES_HEAD[] = {"preflight", "deps", "build"};
static const char *STAGES_TAIL[] = {"e2e", "bench", "ladder", "suite"};

/* Run the dry run into OUT = tmp/<name> with an extra environment assignment (may be ""); return
 * the parsed summary.json (asserting it exists and parses) and set *status to the exit code. */
static json_t *dry_run(const char *name, const char *env, int *status)
{
    const char *bin = getenv("GATE_BIN");
    cr_assert(bin && *bin, "GATE_BIN must name the gate binary (ctest sets it)");
    char out[1024], cmd[16384];
    snprintf(out, sizeof out, "%s/%s", check_tmp_dir(), name);
    /* GATE_DEB_DIR: an empty folder of its own unless env names one (a later assignment wins) */
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s.deb' && env CUDA_VISIBLE_DEVICES= GATE_GPU_DRYRUN=1 GATE_BIN='%s' "
             "GATE_SHARED='%s' GATE_DEB_DIR='%s.deb' %s bash '%s/ci/gpu-check.sh' '%s' "
             ">'%s.stdout' 2>&1",
             out, bin, check_shared_dir(), out, env, GATE_SOURCE_DIR, out, out);
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
    cr_assert_eq(status, 1, "a dry run without a visible device cannot pass (exit %d)", status);
    cr_assert(json_is_true(json_object_get(sum, "dry_run")));
    cr_assert_str_eq(json_string_value(json_object_get(sum, "result")), "FAIL");
    cr_assert_eq(json_integer_value(json_object_get(sum, "budget_s")), 540);

    /* the order: preflight, deps, build, a selftest stage per family, e2e, bench, ladder, suite */
    char fams[512], expect[1024] = "";
    selftest_families(fams, sizeof fams);
    for (size_t i = 0; i < 3; i++)
        snprintf(expect + strlen(expect), sizeof expect - strlen(expect), "%s ", STAGES_HEAD[i]);
    char copy[512];
    snprintf(copy, sizeof copy, "%s", fams);
    for (char *save = NULL, *f = strtok_r(copy, " ", &save); f; f = strtok_r(NULL, " ", &save))
        snprintf(expect + strlen(expect), sizeof expect - strlen(expect), "selftest.%s ", f);
    for (size_t i = 0; i < sizeof STAGES_TAIL / sizeof *STAGES_TAIL; i++)
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
        /* preflight asks nvidia-smi (which the hiding does not reach): on a host without one it
         * says why */
        if (no_gpu && !strcmp(name, "preflight"))
            cr_assert(strstr(why, "nvidia-smi"), "preflight: %s", why);
        /* the device is hidden on every host: each GPU stage fails with its reason */
        if (!strncmp(name, "selftest.", 9) || !strcmp(name, "e2e") || !strcmp(name, "bench")) {
            cr_assert_eq(rc, 3, "stage %s: exit %d (%s), want 3 (no device)", name, (int)rc, why);
            cr_assert(strstr(why, "CUDA") || strstr(why, "cuda"), "stage %s: %s", name, why);
        }
        if (!strcmp(name, "ladder"))
            cr_assert(strstr(why, "gate run exit 3") && strstr(why, "none is usable"), "ladder: %s",
                      why);
        /* issue 28: the whole suite runs once on the device; the dry run cannot build it, and
         * says so (a pass here would be a suite that never ran) */
        if (!strcmp(name, "suite"))
            cr_assert(rc == 3 && strstr(why, "no CUDA device"), "suite: exit %d: %s", (int)rc, why);
    }
    cr_assert_str_eq(got, expect, "stages run: %s\nexpected: %s", got, expect);
    json_decref(sum);

    /* R4, R1: the device build turns -Werror off and reads the build-identity file */
    char path[1200];
    snprintf(path, sizeof path, "%s/dry/build.log", check_tmp_dir());
    char *log = check_slurp_text(path);
    cr_expect(strstr(log, "would configure with: cmake ") && strstr(log, " -DGATE_WERROR=OFF") &&
                  strstr(log, " -DGATE_BUILD_IDENTITY="),
              "build.log:\n%s", log);
    free(log);

    /* issue 28: the suite stage runs the whole ctest with device skips made failures, on the
     * carried shared/ */
    snprintf(path, sizeof path, "%s/dry/suite.txt", check_tmp_dir());
    log = check_slurp_text(path);
    cr_expect(strstr(log, "-DGATE_TESTS=ON") && strstr(log, "-DGATE_TEST_SHARED=") &&
                  strstr(log, "GATE_REQUIRE_GPU=1") && strstr(log, "GATE_REQUIRE_ISA=") &&
                  strstr(log, "ctest -j "),
              "suite.txt:\n%s", log);
    free(log);
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

/* GATE_GPU_SKIP leaves the named stages out ("selftest" every family): each is skipped with the
 * reason, the others still run, and the check cannot pass with a stage left out. */
Test(gpucheck, stages_left_out_are_skipped_never_passed, .timeout = 300)
{
    int status = 0;
    json_t *sum = dry_run("skipsome", "GATE_GPU_SKIP=bench,selftest,suite", &status);
    cr_assert_eq(status, 1);
    cr_assert_str_eq(json_string_value(json_object_get(sum, "result")), "FAIL");
    size_t i, left_out = 0;
    json_t *s;
    json_array_foreach(json_object_get(sum, "stages"), i, s)
    {
        const char *name = json_string_value(json_object_get(s, "name"));
        const char *st = json_string_value(json_object_get(s, "status"));
        const char *why = json_string_value(json_object_get(s, "reason"));
        const bool named =
            !strcmp(name, "bench") || !strcmp(name, "suite") || !strncmp(name, "selftest.", 9);
        if (named) {
            left_out++;
            cr_assert_str_eq(st, "skipped", "stage %s", name);
            cr_assert(why && strstr(why, "GATE_GPU_SKIP"), "stage %s reason: %s", name, why);
        } else {
            cr_assert_str_neq(st, "skipped", "stage %s was not named but skipped", name);
        }
    }
    cr_assert_gt(left_out, 3);
    json_decref(sum);
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

/* ---- issue 25 section 1: the first-run risks, each simulated -------------------------------- */

/* Run a shell command; return its exit status, with its stdout and stderr in *text (to free). */
static int run_sh(char **text, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run_sh(char **text, const char *fmt, ...)
{
    static int serial;
    char cmd[8192], out[1100], full[9400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(out, sizeof out, "%s/sh-%d-%d.out", check_tmp_dir(), (int)getpid(), serial++);
    snprintf(full, sizeof full, "(%s) >'%s' 2>&1", cmd, out);
    const int ws = system(full);
    *text = check_slurp_text(out);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

/* A GATE_DEB_DIR at deb holding one .deb laid out like the carried ones: usr/bin/pkgconf (this
 * host's pkg-config program), the .pc files the deps stage asks for, and zlib's files with
 * zlib1g-dev's absolute link usr/lib/x86_64-linux-gnu/libz.so -> /lib/x86_64-linux-gnu/... */
static void make_fake_deb(const char *deb)
{
    char *t = NULL;
    const int rc = run_sh(
        &t,
        "set -e; d='%s'; w=\"$d.pkg\"; rm -rf \"$d\" \"$w\"; L=x86_64-linux-gnu;"
        "mkdir -p \"$d\" \"$w/DEBIAN\" \"$w/usr/bin\" \"$w/usr/lib/$L/pkgconfig\" \"$w/lib/$L\";"
        "printf 'Package: gate-fake\\nVersion: 1\\nArchitecture: all\\nMaintainer: t <t@t>\\n"
        "Description: t\\n' >\"$w/DEBIAN/control\";"
        "cp \"$(readlink -f \"$(command -v pkg-config)\")\" \"$w/usr/bin/pkgconf\";"
        "for p in yaml-0.1 sqlite3 libsodium libpcre2-8 libutf8proc jansson zlib; do"
        "  printf 'Name: %%s\\nDescription: t\\nVersion: 1\\nLibs: -lx\\n' $p"
        "    >\"$w/usr/lib/$L/pkgconfig/$p.pc\"; done;"
        "echo z >\"$w/lib/$L/libz.so.1.2.13\";"
        "ln -s /lib/$L/libz.so.1.2.13 \"$w/usr/lib/$L/libz.so\";"
        "dpkg-deb -Zgzip --build \"$w\" \"$d/gate-fake_1_all.deb\"",
        deb);
    cr_assert_eq(rc, 0, "cannot build the fake .deb:\n%s", t);
    free(t);
}

/* dir: a fresh folder of symbolic links to every program on PATH but pkg-config and pkgconf. */
static void path_without_pkg_config(char *dir, size_t n)
{
    check_make_dir(dir, n, "nopc");
    char *path = strdup(getenv("PATH"));
    cr_assert(path);
    for (char *save = NULL, *d = strtok_r(path, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        DIR *dp = opendir(d);
        if (!dp)
            continue;
        for (struct dirent *e; (e = readdir(dp));) {
            if (e->d_name[0] == '.' || strstr(e->d_name, "pkg-config") ||
                strstr(e->d_name, "pkgconf"))
                continue;
            char from[2048], to[2048];
            snprintf(from, sizeof from, "%s/%s", d, e->d_name);
            snprintf(to, sizeof to, "%s/%s", dir, e->d_name);
            cr_assert(symlink(from, to) == 0 || errno == EEXIST, "symlink %s: %s", to,
                      strerror(errno));
        }
        closedir(dp);
    }
    free(path);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "env PATH='%s' sh -c 'command -v pkg-config' >/dev/null", dir);
    cr_assert_neq(system(cmd), 0, "the simulated PATH still has a pkg-config");
}

/* R2: a host without pkg-config: the deps stage uses the carried pkgconf (the old script never
 * put it on PATH: "missing libraries: yaml-0.1 sqlite3 ..."). */
Test(gpucheck, the_carried_pkgconf_serves_a_host_without_pkg_config, .timeout = 120)
{
    char farm[1024], deb[1100];
    path_without_pkg_config(farm, sizeof farm);
    snprintf(deb, sizeof deb, "%s/r2.deb", check_tmp_dir());
    make_fake_deb(deb);
    char *t = NULL;
    const int rc =
        run_sh(&t, "env PATH='%s' GATE_DEB_DIR='%s' bash '%s/ci/gpu-check.sh' --stage deps", farm,
               deb, GATE_SOURCE_DIR);
    cr_expect_eq(rc, 0, "the deps stage on a host without pkg-config: exit %d\n%s", rc, t);
    char want[1200];
    snprintf(want, sizeof want, "pkg-config is %s/bin/pkg-config", deb);
    cr_expect(strstr(t, want), "want '%s' in:\n%s", want, t);
    free(t);
}

/* R3: a fresh prefix: zlib1g-dev's absolute libz.so link is rewritten to a relative one that
 * resolves inside the prefix; what an earlier unpack left there is gone. */
Test(gpucheck, absolute_symlinks_in_a_fresh_prefix_become_relative, .timeout = 120)
{
    char deb[1100], path[4000], root[1200];
    snprintf(deb, sizeof deb, "%s/r3.deb", check_tmp_dir());
    make_fake_deb(deb);
    snprintf(root, sizeof root, "%s/root", deb);
    snprintf(path, sizeof path, "mkdir -p '%s' && echo old >'%s/stale'", root, root);
    cr_assert_eq(system(path), 0);
    char *t = NULL;
    const int rc = run_sh(&t, "env GATE_DEB_DIR='%s' bash '%s/ci/gpu-check.sh' --stage deps", deb,
                          GATE_SOURCE_DIR);
    cr_expect_eq(rc, 0, "deps: exit %d\n%s", rc, t);
    free(t);
    snprintf(path, sizeof path, "%s/usr/lib/x86_64-linux-gnu/libz.so", root);
    char target[1024];
    const ssize_t k = readlink(path, target, sizeof target - 1);
    cr_assert(k > 0, "%s is not a symlink", path);
    target[k] = '\0';
    cr_expect_neq(target[0], '/', "libz.so still points at the host's %s", target);
    char *real = realpath(path, NULL), *rroot = realpath(root, NULL);
    cr_assert(rroot);
    cr_expect(real && !strncmp(real, rroot, strlen(rroot)) && real[strlen(rroot)] == '/',
              "libz.so resolves to %s, not inside the prefix %s", real ? real : "(nothing)", rroot);
    free(real);
    free(rroot);
    snprintf(path, sizeof path, "%s/stale", root);
    cr_expect_neq(access(path, F_OK), 0, "the prefix was not fresh: %s survived", path);
}

/* R4: GATE_WERROR=OFF takes -Werror out of every compile command (CMAKE_C_FLAGS=-Wno-error
 * could not: the targets' own -Werror comes later); ON (the default) puts it back. */
Test(gpucheck, the_werror_switch_controls_every_compile_command, .timeout = 120)
{
    char dir[1024], path[1200];
    check_make_dir(dir, sizeof dir, "werror");
    char *t = NULL;
    int rc = run_sh(&t, "cmake -S '%s' -B '%s' -DGATE_CUDA=OFF -DGATE_TESTS=OFF -DGATE_WERROR=OFF",
                    GATE_SOURCE_DIR, dir);
    cr_assert_eq(rc, 0, "configure: %s", t);
    free(t);
    snprintf(path, sizeof path, "%s/compile_commands.json", dir);
    char *cc = check_slurp_text(path);
    cr_expect(strstr(cc, "-Wall") && !strstr(cc, "-Werror"), "GATE_WERROR=OFF left -Werror in");
    free(cc);
    rc = run_sh(&t, "cmake -S '%s' -B '%s' -DGATE_WERROR=ON", GATE_SOURCE_DIR, dir);
    cr_assert_eq(rc, 0, "configure: %s", t);
    free(t);
    cc = check_slurp_text(path);
    cr_expect(strstr(cc, "-Werror"), "GATE_WERROR=ON has no -Werror");
    free(cc);
}

/* R5: a toolkit whose library folder lacks cuBLAS fails preflight with its name; with it, the
 * preflight names where it found the runtime and cuBLAS. The toolkit is a stand-in nvcc. */
Test(gpucheck, preflight_names_a_toolkit_without_cublas, .timeout = 120)
{
    char dir[1024], cmd[8192];
    check_make_dir(dir, sizeof dir, "cuda");
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/bin' '%s/lib64' && printf '#!/bin/sh\\necho \"Cuda compilation tools, "
             "release 13.0, V13.0.88\"\\n' >'%s/bin/nvcc' && chmod +x '%s/bin/nvcc' && "
             ": >'%s/lib64/libcudart.so.13'",
             dir, dir, dir, dir, dir);
    cr_assert_eq(system(cmd), 0);
    char *t = NULL;
    int rc = run_sh(&t,
                    "env PATH='%s/bin':\"$PATH\" GATE_DEB_DIR='%s/deb' bash '%s/ci/gpu-check.sh' "
                    "--stage preflight",
                    dir, dir, GATE_SOURCE_DIR);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(t, "libcublas.so.13 (CUDA 13.0's cuBLAS) not found next to"), "%s", t);
    cr_expect(!strstr(t, "libcudart.so.13 (CUDA"), "the runtime is there:\n%s", t);
    free(t);
    snprintf(cmd, sizeof cmd, ": >'%s/lib64/libcublas.so.13' && : >'%s/lib64/libcublasLt.so.13'",
             dir, dir);
    cr_assert_eq(system(cmd), 0);
    rc = run_sh(&t,
                "env PATH='%s/bin':\"$PATH\" GATE_DEB_DIR='%s/deb' bash '%s/ci/gpu-check.sh' "
                "--stage preflight",
                dir, dir, GATE_SOURCE_DIR);
    cr_expect(!strstr(t, "not found next to") && strstr(t, "/lib64/libcublas.so.13"), "%s", t);
    free(t);
}

/* R5: a gate binary that cannot load one of its libraries (its RUNPATH lacks the folder) fails
 * the build stage, naming the library, before any GPU stage runs it; the real one passes. */
Test(gpucheck, a_binary_whose_library_cannot_load_fails_the_build_stage, .timeout = 120)
{
    char dir[1024], cmd[8192];
    check_make_dir(dir, sizeof dir, "loads");
    snprintf(cmd, sizeof cmd,
             "cd '%s' && printf 'int f(void) { return 0; }\\n' >f.c && "
             "cc -shared -fPIC -Wl,-soname,libgatemissing.so.13 -o libgatemissing.so f.c && "
             "printf 'int f(void);\\nint main(void) { return f(); }\\n' >m.c && "
             "cc -o needs m.c -L. -lgatemissing && rm libgatemissing.so",
             dir);
    cr_assert_eq(system(cmd), 0);
    char *t = NULL;
    int rc = run_sh(&t,
                    "env GATE_GPU_DRYRUN=1 GATE_BIN='%s/needs' GATE_DEB_DIR='%s/deb' "
                    "bash '%s/ci/gpu-check.sh' --stage build",
                    dir, dir, GATE_SOURCE_DIR);
    cr_expect_neq(rc, 0, "%s", t);
    cr_expect(strstr(t, "libgatemissing.so.13 not found"), "%s", t);
    free(t);
    rc = run_sh(&t,
                "env GATE_GPU_DRYRUN=1 GATE_BIN='%s' GATE_DEB_DIR='%s/deb' "
                "bash '%s/ci/gpu-check.sh' --stage build",
                getenv("GATE_BIN"), dir, GATE_SOURCE_DIR);
    cr_expect_eq(rc, 0, "%s", t);
    cr_expect(strstr(t, "every library of "), "%s", t);
    free(t);
}

/* R8: the carried libraries are on gate's loader path and nobody else's: git and cmake (spies
 * first on PATH) run with the host's LD_LIBRARY_PATH through a whole dry run. */
Test(gpucheck, the_carried_libraries_reach_gate_only, .timeout = 300)
{
    char dir[1024], cmd[8192];
    check_make_dir(dir, sizeof dir, "r8");
    snprintf(
        cmd, sizeof cmd,
        "set -e; cd '%s'; mkdir -p spy deb/root/usr/lib/x86_64-linux-gnu;"
        "for p in git cmake; do real=$(command -v $p);"
        "  printf '#!/bin/sh\\necho \"%%s LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}\" >>\"%%s\"\\n"
        "exec \"%%s\" \"$@\"\\n' $p \"$PWD/seen.log\" \"$real\" >spy/$p; chmod +x spy/$p; done;"
        "printf '#!/bin/sh\\necho \"gate LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}\" >>\"%%s\"\\n"
        "exec \"%%s\" \"$@\"\\n' \"$PWD/seen.log\" '%s' >spy-gate; chmod +x spy-gate",
        dir, getenv("GATE_BIN"));
    cr_assert_eq(system(cmd), 0);
    char env[4096];
    snprintf(env, sizeof env,
             "PATH='%s/spy':\"$PATH\" GATE_BIN='%s/spy-gate' GATE_DEB_DIR='%s/deb'", dir, dir, dir);
    int status = 0;
    json_decref(dry_run("r8", env, &status));
    snprintf(cmd, sizeof cmd, "%s/seen.log", dir);
    char *seen = check_slurp_text(cmd), want[1200];
    snprintf(want, sizeof want, "%s/deb/root/usr/lib/x86_64-linux-gnu", dir);
    int gate = 0, git = 0;
    for (char *save = NULL, *l = strtok_r(seen, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(l, "gate ", 5)) {
            gate++;
            cr_expect(strstr(l, want), "gate ran without the carried libraries: %s", l);
        } else {
            git += !strncmp(l, "git ", 4);
            cr_expect(!strstr(l, want), "the carried libraries leaked to: %s", l);
        }
    }
    cr_expect(gate > 0 && git > 0, "the spies saw %d gate and %d git runs", gate, git);
    free(seen);
}

/* A committed copy of this checkout in dir/tree (git init, one commit, then the shell commands
 * `more` run in it, which may commit again), an empty dir/deb holding a placeholder .deb, and
 * GATE_PREPARE_ONLY=1 run on it (which must write the build identity); HEAD's commit into commit.
 */
static void prepared_copy(const char *dir, const char *more, char commit[64])
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "set -e; cd '%s'; mkdir -p tree deb tree/shared/conformance;"
             "git -C '%s' ls-files -z --cached --others --exclude-standard |"
             "  (cd '%s' && tar --null -T - -cf -) | tar -xf - -C tree;"
             "cd tree; git init -q .; git add -A;"
             "git -c user.name=t -c user.email=t@t -c commit.gpgsign=false commit -q -m copy;"
             "%s : >../deb/placeholder.deb",
             dir, GATE_SOURCE_DIR, GATE_SOURCE_DIR, more);
    cr_assert_eq(system(cmd), 0, "cannot make the committed copy");
    char *t = NULL;
    int rc = run_sh(&t,
                    "cd '%s/tree' && env GATE_PREPARE_ONLY=1 GATE_DEB_DIR='%s/deb' "
                    "bash ci/gpu-check.sh '%s/prep'",
                    dir, dir, dir);
    cr_assert_eq(rc, 0, "prepare: %s", t);
    cr_expect(strstr(t, "identity: wrote "), "%s", t);
    free(t);
    rc = run_sh(&t, "git -C '%s/tree' rev-parse HEAD", dir);
    cr_assert_eq(rc, 0);
    snprintf(commit, 64, "%.40s", t);
    free(t);
    cr_assert_eq(strlen(commit), 40, "no commit printed");
}

/* R1: a copy of the tree whose .git did not travel. GATE_PREPARE_ONLY=1 (on the committed copy)
 * writes the build-identity file; without .git the dry run's summary names that commit, clean;
 * an edited file makes it a warning (not clean), and without the file preflight fails naming
 * the missing identity. */
Test(gpucheck, a_tree_without_git_takes_its_commit_from_the_identity_file, .timeout = 300)
{
    char dir[1024], cmd[8192];
    check_make_dir(dir, sizeof dir, "r1");
    char commit[64];
    prepared_copy(dir, "", commit);
    char *t = NULL;
    int rc;

    snprintf(cmd, sizeof cmd, "rm -rf '%s/tree/.git' '%s/deb/placeholder.deb'", dir, dir);
    cr_assert_eq(system(cmd), 0);
    rc = run_sh(&t,
                "env GATE_GPU_DRYRUN=1 GATE_BIN='%s' GATE_SHARED='%s' GATE_DEB_DIR='%s/deb' "
                "bash '%s/tree/ci/gpu-check.sh' '%s/out'",
                getenv("GATE_BIN"), check_shared_dir(), dir, dir, dir);
    free(t);
    snprintf(cmd, sizeof cmd, "%s/out/summary.json", dir);
    json_error_t je;
    json_t *sum = json_load_file(cmd, 0, &je);
    cr_assert(sum, "no summary.json: %s", je.text);
    cr_expect_str_eq(json_string_value(json_object_get(sum, "commit")), commit);
    cr_expect(json_is_true(json_object_get(sum, "tree_clean")), "the verified copy is clean");
    const char *why = json_string_value(
        json_object_get(json_array_get(json_object_get(sum, "stages"), 0), "reason"));
    cr_expect(why && !strstr(why, "git") && !strstr(why, "identity"), "preflight: %s", why);
    json_decref(sum);

    /* an edit after the identity was written: the commit stays, the tree is not clean */
    snprintf(cmd, sizeof cmd, "echo edit >>'%s/tree/README.md'", dir);
    cr_assert_eq(system(cmd), 0);
    rc = run_sh(&t, "env GATE_DEB_DIR='%s/deb' bash '%s/tree/ci/gpu-check.sh' --stage preflight",
                dir, dir);
    char want[200];
    snprintf(want, sizeof want, "identity: README.md differs from commit %s", commit);
    cr_expect(strstr(t, want) && strstr(t, "warning: "), "want '%s' in:\n%s", want, t);
    free(t);

    /* neither .git nor the identity file: preflight fails at once, naming both */
    snprintf(cmd, sizeof cmd, "rm -f '%s/deb/IDENTITY'", dir);
    cr_assert_eq(system(cmd), 0);
    rc = run_sh(&t, "env GATE_DEB_DIR='%s/deb' bash '%s/tree/ci/gpu-check.sh' --stage preflight",
                dir, dir);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(t, "git rev-parse HEAD failed") && strstr(t, "IDENTITY: no commit identity"),
              "%s", t);
    free(t);
}

/* Seen on the first device run: the copy carried a .git older than the prepared commit, so git
 * named the earlier commit, dirty, and no receipt counted. Preflight now takes the identity
 * file's commit when the whole tree verifies against it; an edit after that keeps git's answer. */
Test(gpucheck, a_stale_git_yields_to_the_identity_file_the_tree_verifies_against, .timeout = 300)
{
    char dir[1024], cmd[8192];
    check_make_dir(dir, sizeof dir, "stale");
    char commit[64];
    prepared_copy(dir,
                  "echo later >>README.md; git add -A;"
                  "git -c user.name=t -c user.email=t@t -c commit.gpgsign=false commit -q -m two;",
                  commit);
    char *t = NULL;
    int rc = run_sh(&t, "git -C '%s/tree' reset -q --soft HEAD~1", dir);
    cr_assert_eq(rc, 0); /* .git one commit behind the tree and its identity file */
    free(t);
    rc = run_sh(&t, "env GATE_DEB_DIR='%s/deb' bash '%s/tree/ci/gpu-check.sh' --stage preflight",
                dir, dir);
    char want[200];
    snprintf(want, sizeof want, "commit %s (from identity file (git's HEAD", commit);
    cr_expect(strstr(t, want) && strstr(t, "a stale .git") && !strstr(t, "warning: "),
              "want '%s' in:\n%s", want, t);
    free(t);

    snprintf(cmd, sizeof cmd, "echo edit >>'%s/tree/README.md'", dir);
    cr_assert_eq(system(cmd), 0);
    rc = run_sh(&t, "env GATE_DEB_DIR='%s/deb' bash '%s/tree/ci/gpu-check.sh' --stage preflight",
                dir, dir);
    cr_expect(strstr(t, "(from git)") && strstr(t, "warning: the tree is not clean"), "%s", t);
    free(t);
}
