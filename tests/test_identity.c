/* test_identity.c — the build identity comes from what was compiled: ci/buildinfo.cmake run over
 * a small temporary git repository (a copy of the script, a CMakeLists.txt, engine/a.c and
 * engine/a.h) must call it clean only when every source file equals HEAD and no untracked or
 * ignored file sits in a source folder. Each attack of issue 11 ("builds that only look clean")
 * is one test; each gave GATE_GIT_DIRTY 0 with the script that used
 * `git status --untracked-files=no`.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/identity.h"
#include "tests/support/check.h"

static char repo[600], compiled[700], out_h[700];

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Run a shell command (quiet), asserting that it succeeds. */
static void sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[4400];
    snprintf(full, sizeof full, "(%s) >/dev/null 2>&1", cmd);
    cr_assert_eq(system(full), 0, "command failed: %s", cmd);
}

static void put(const char *rel, const char *text)
{
    char path[800];
    snprintf(path, sizeof path, "%s/%s", repo, rel);
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* A committed repository: CMakeLists.txt, ci/buildinfo.cmake (this checkout's), engine/a.c,
 * engine/a.h, a .gitignore that ignores *.orig; compiled list names engine/a.c. */
static void make_repo(void)
{
    static int serial;
    snprintf(repo, sizeof repo, "%s/identity-%d", check_tmp_dir(), serial++);
    sh("rm -rf '%s' && mkdir -p '%s/engine' '%s/ci'", repo, repo, repo);
    sh("cp '%s/ci/buildinfo.cmake' '%s/ci/buildinfo.cmake'", GATE_SOURCE_DIR, repo);
    put("CMakeLists.txt", "project(x C)\n");
    put("engine/a.c", "#include \"a.h\"\nint a(void) { return A; }\n");
    put("engine/a.h", "#define A 1\n");
    put(".gitignore", "*.orig\n");
    sh("cd '%s' && git init -q . && git add -A && git -c user.name=t -c user.email=t@t"
       " -c commit.gpgsign=false commit -q -m init",
       repo);
    snprintf(compiled, sizeof compiled, "%s.compiled", repo);
    snprintf(out_h, sizeof out_h, "%s.buildinfo.h", repo);
    FILE *f = fopen(compiled, "w");
    cr_assert(f);
    fprintf(f, "%s/engine/a.c\n", repo);
    fclose(f);
}

struct info {
    int dirty;
    int count;
    char reason[512];
    char source_sha256[80];
};

/* Run the script over repo and read the header it wrote. */
static struct info buildinfo(void)
{
    struct info in;
    memset(&in, 0, sizeof in);
    in.dirty = -1;
    sh("rm -f '%s' && cmake -DSRC='%s' -DOUT='%s' -DCOMPILED='%s' -DFLAGS=test -P"
       " '%s/ci/buildinfo.cmake'",
       out_h, repo, out_h, compiled, GATE_SOURCE_DIR);
    FILE *f = fopen(out_h, "r");
    cr_assert(f, "the script wrote no %s", out_h);
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        sscanf(line, "#define GATE_GIT_DIRTY %d", &in.dirty);
        sscanf(line, "#define GATE_DIRTY_COUNT %d", &in.count);
        sscanf(line, "#define GATE_DIRTY_REASON \"%511[^\"]\"", in.reason);
        sscanf(line, "#define GATE_SOURCE_SHA256 \"%79[^\"]\"", in.source_sha256);
    }
    fclose(f);
    return in;
}

static void expect_dirty(const char *why)
{
    struct info in = buildinfo();
    cr_expect_eq(in.dirty, 1, "GATE_GIT_DIRTY should be 1 (%s), got %d", why, in.dirty);
    cr_expect_geq(in.count, 1);
    cr_expect(strstr(in.reason, why), "reason '%s' should contain '%s'", in.reason, why);
}

Test(identity, a_clean_copy_is_clean)
{
    make_repo();
    struct info in = buildinfo();
    cr_expect_eq(in.dirty, 0, "a committed tree with nothing else is clean (reason '%s')",
                 in.reason);
    cr_expect_eq(in.count, 0);
    cr_expect_str_eq(in.reason, "");
    cr_expect_eq(strlen(in.source_sha256), 64);
}

Test(identity, an_untracked_header_in_a_source_folder_is_dirty)
{
    make_repo();
    put("engine/b.h", "#define A 2\n"); /* would shadow a tracked header via -I ordering */
    expect_dirty("untracked file engine/b.h in a source folder");
}

Test(identity, an_ignored_file_in_a_source_folder_is_dirty)
{
    make_repo();
    put("engine/a.h.orig", "#define A 2\n");
    expect_dirty("untracked file engine/a.h.orig in a source folder");
}

Test(identity, an_assume_unchanged_edit_is_dirty)
{
    make_repo();
    sh("cd '%s' && git update-index --assume-unchanged engine/a.h", repo);
    put("engine/a.h", "#define A 2\n");
    sh("cd '%s' && test -z \"$(git status --porcelain --untracked-files=no)\"", repo);
    expect_dirty("engine/a.h differs from HEAD");
}

Test(identity, a_skip_worktree_edit_is_dirty)
{
    make_repo();
    sh("cd '%s' && git update-index --skip-worktree engine/a.c", repo);
    put("engine/a.c", "int a(void) { return 3; }\n");
    sh("cd '%s' && test -z \"$(git status --porcelain --untracked-files=no)\"", repo);
    expect_dirty("engine/a.c differs from HEAD");
}

Test(identity, a_staged_but_uncommitted_edit_is_dirty)
{
    make_repo();
    put("engine/a.h", "#define A 2\n");
    sh("cd '%s' && git add engine/a.h", repo);
    expect_dirty("engine/a.h differs from HEAD");
}

Test(identity, a_compiled_file_that_is_not_tracked_is_dirty)
{
    make_repo();
    sh("mkdir -p '%s/extra'", repo);
    put("extra/x.c", "int x;\n");
    FILE *f = fopen(compiled, "a");
    cr_assert(f);
    fprintf(f, "%s/extra/x.c\n", repo);
    fclose(f);
    expect_dirty("compiled file extra/x.c is not tracked at HEAD");
}

Test(identity, source_digest_is_the_commit_tree_not_the_working_copy)
{
    make_repo();
    struct info clean = buildinfo();
    put("engine/a.h", "#define A 2\n");
    struct info dirty = buildinfo();
    cr_expect_eq(dirty.dirty, 1);
    cr_expect_str_eq(dirty.source_sha256, clean.source_sha256,
                     "source_sha256 names the commit's sources, whatever was edited");
    sh("cd '%s' && git -c user.name=t -c user.email=t@t -c commit.gpgsign=false commit -q -am"
       " two",
       repo);
    struct info next = buildinfo();
    cr_expect_eq(next.dirty, 0);
    cr_expect_str_neq(next.source_sha256, clean.source_sha256);
}

Test(identity, json_carries_source_digest_and_dirty_reason)
{
    struct identity id;
    struct gate_err err = {0};
    cr_assert_eq(identity_get(&id, &err), 0, "%s", err.msg);
    cr_expect_eq(strlen(id.source_sha256), 64);
    cr_expect_eq(id.git_dirty != 0, id.dirty_count > 0);
    cr_expect_eq(id.git_dirty != 0, id.dirty_reason[0] != '\0');
    json_t *j = identity_json(&id);
    cr_assert(j);
    cr_expect_str_eq(json_string_value(json_object_get(j, "source_sha256")), id.source_sha256);
    cr_expect_str_eq(json_string_value(json_object_get(j, "dirty_reason")), id.dirty_reason);
    json_decref(j);
}
