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
#include <sys/wait.h>
#include <unistd.h>

#include "harness/identity.h"
#include "tests/support/check.h"

static char repo[600], compiled[700], out_h[700], bdir[700];
static char cflags[512];   /* extra flags in the compile command of engine/a.c (issue 23 §4) */
static char lflags[512];   /* LINK_FLAGS of the gate binary's link statement */
static char prefixes[512]; /* PREFIXES of gate_buildconfig.cmake (the dependency prefixes) */
static char identity_file[800]; /* -DIDENTITY for the script ("" = none) */

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
    /* a build folder as CMake's Ninja generator leaves it, outside the repository */
    snprintf(bdir, sizeof bdir, "%s.build", repo);
    sh("rm -rf '%s' && mkdir -p '%s/CMakeFiles'", bdir, bdir);
    cflags[0] = lflags[0] = prefixes[0] = identity_file[0] = '\0';
}

/* Write bdir's compile_commands.json, build.ninja, CMakeFiles/rules.ninja and
 * gate_buildconfig.cmake for one compiled file (engine/a.c) with cflags and lflags. */
static void write_build(void)
{
    char path[800];
    snprintf(path, sizeof path, "%s/compile_commands.json", bdir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f,
            "[{\"directory\": \"%s\", \"command\": \"/usr/bin/cc -DGATE_VERSION=1 -I%s"
            " -I%s -O3 %s -o CMakeFiles/gate_core.dir/engine/a.c.o -c %s/engine/a.c\","
            " \"file\": \"%s/engine/a.c\"}]\n",
            bdir, repo, bdir, cflags, repo, repo);
    fclose(f);
    snprintf(path, sizeof path, "%s/build.ninja", bdir);
    cr_assert((f = fopen(path, "w")));
    fprintf(f,
            "build gate: C_EXECUTABLE_LINKER__gate_Release CMakeFiles/gate.dir/cli/main.c.o\n"
            "  FLAGS = -O3\n  LINK_FLAGS = %s\n  LINK_LIBRARIES = libgate_core.a -lm\n\n",
            lflags);
    fclose(f);
    snprintf(path, sizeof path, "%s/CMakeFiles/rules.ninja", bdir);
    cr_assert((f = fopen(path, "w")));
    fprintf(f, "rule C_EXECUTABLE_LINKER__gate_Release\n"
               "  command = $PRE_LINK && /usr/bin/cc $FLAGS $LINK_FLAGS $in -o $TARGET_FILE"
               " $LINK_LIBRARIES && $POST_BUILD\n\n");
    fclose(f);
    snprintf(path, sizeof path, "%s/gate_buildconfig.cmake", bdir);
    cr_assert((f = fopen(path, "w")));
    fprintf(f,
            "set(COMPILER [[/usr/bin/cc]])\nset(COMPILER_ID [[GNU]])\n"
            "set(COMPILER_VERSION [[1.0]])\nset(LAUNCHERS [[]])\n"
            "set(ALLOWED_DEFINES [[GATE_VERSION;_GNU_SOURCE]])\nset(PREFIXES [[%s]])\n",
            prefixes);
    fclose(f);
}

struct info {
    int dirty;
    int count;
    char commit[64];
    char reason[512];
    char source_sha256[80];
    char config_sha256[80];
    char compiler[512];
};

/* Run the script over repo and read the header it wrote. */
static struct info buildinfo(void)
{
    struct info in;
    memset(&in, 0, sizeof in);
    in.dirty = -1;
    write_build();
    sh("rm -f '%s' && cmake -DSRC='%s' -DOUT='%s' -DCOMPILED='%s' -DFLAGS=test -DBUILD='%s'"
       " -DCONFIG='%s/gate_buildconfig.cmake' -DIDENTITY='%s' -P '%s/ci/buildinfo.cmake'",
       out_h, repo, out_h, compiled, bdir, bdir, identity_file, GATE_SOURCE_DIR);
    FILE *f = fopen(out_h, "r");
    cr_assert(f, "the script wrote no %s", out_h);
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        sscanf(line, "#define GATE_GIT_COMMIT \"%63[^\"]\"", in.commit);
        sscanf(line, "#define GATE_GIT_DIRTY %d", &in.dirty);
        sscanf(line, "#define GATE_DIRTY_COUNT %d", &in.count);
        sscanf(line, "#define GATE_DIRTY_REASON \"%511[^\"]\"", in.reason);
        sscanf(line, "#define GATE_SOURCE_SHA256 \"%79[^\"]\"", in.source_sha256);
        sscanf(line, "#define GATE_BUILD_CONFIG_SHA256 \"%79[^\"]\"", in.config_sha256);
        sscanf(line, "#define GATE_COMPILER \"%511[^\"]\"", in.compiler);
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

/* Issue 23 §4: a build configured with -DCMAKE_C_FLAGS="-include /tmp/elsewhere/evil.h" (a
 * header outside the tree) recorded git_dirty false. Every way into the compile or link commands
 * that reads or injects code from outside the tree and the system prefixes is dirty now. */
Test(identity, an_include_from_outside_the_tree_is_dirty)
{
    make_repo();
    snprintf(cflags, sizeof cflags, "-include /tmp/elsewhere/evil.h");
    expect_dirty("has flag -include");
}

Test(identity, an_include_directory_outside_the_tree_is_dirty)
{
    make_repo();
    snprintf(cflags, sizeof cflags, "-I/tmp/elsewhere");
    expect_dirty("reads /tmp/elsewhere, outside the source tree");
    make_repo();
    snprintf(cflags, sizeof cflags, "-isystem ../../elsewhere");
    expect_dirty("reads ../../elsewhere, outside the source tree");
}

Test(identity, a_preprocessor_passthrough_is_dirty)
{
    make_repo();
    snprintf(cflags, sizeof cflags, "-Wp,-include,/tmp/elsewhere/evil.h");
    expect_dirty("has flag -Wp,-include");
}

Test(identity, a_definition_gate_does_not_make_is_dirty)
{
    make_repo();
    snprintf(cflags, sizeof cflags, "-DGATE_TEST_BROKEN_TWIN=1");
    expect_dirty("defines GATE_TEST_BROKEN_TWIN");
}

Test(identity, a_link_input_from_outside_the_tree_is_dirty)
{
    make_repo();
    snprintf(lflags, sizeof lflags, "/tmp/elsewhere/evil.o");
    expect_dirty("the link of the gate binary (LINK_FLAGS) reads /tmp/elsewhere/evil.o");
}

Test(identity, an_include_path_in_the_environment_is_dirty)
{
    make_repo();
    setenv("CPATH", "/tmp/elsewhere", 1);
    expect_dirty("the build's environment (CPATH) reads /tmp/elsewhere");
    unsetenv("CPATH");
}

Test(identity, a_header_in_the_build_folder_is_dirty)
{
    make_repo();
    sh("echo '#define X 1' > '%s/sodium.h'", bdir);
    expect_dirty("header sodium.h in the build folder");
}

Test(identity, missing_compile_commands_are_dirty)
{
    make_repo();
    write_build();
    sh("rm -f '%s/compile_commands.json'", bdir);
    struct info in;
    memset(&in, 0, sizeof in);
    sh("rm -f '%s' && cmake -DSRC='%s' -DOUT='%s' -DCOMPILED='%s' -DFLAGS=test -DBUILD='%s'"
       " -DCONFIG='%s/gate_buildconfig.cmake' -P '%s/ci/buildinfo.cmake'",
       out_h, repo, out_h, compiled, bdir, bdir, GATE_SOURCE_DIR);
    FILE *f = fopen(out_h, "r");
    cr_assert(f);
    char line[1024];
    while (fgets(line, sizeof line, f))
        sscanf(line, "#define GATE_DIRTY_REASON \"%511[^\"]\"", in.reason);
    fclose(f);
    cr_expect(strstr(in.reason, "compile commands (compile_commands.json) are not recorded"), "%s",
              in.reason);
}

Test(identity, the_config_digest_follows_the_flags_and_names_the_compiler)
{
    make_repo();
    struct info a = buildinfo();
    cr_expect_eq(a.dirty, 0, "%s", a.reason);
    cr_expect_eq(strlen(a.config_sha256), 64);
    cr_expect(strstr(a.compiler, "GNU 1.0 /usr/bin/cc"), "%s", a.compiler);
    snprintf(cflags, sizeof cflags, "-O2 -fno-strict-aliasing");
    struct info b = buildinfo();
    cr_expect_eq(b.dirty, 0, "recorded optimisation flags do not make a build dirty (%s)",
                 b.reason);
    cr_expect_str_neq(a.config_sha256, b.config_sha256, "the digest must cover the flags");
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
    cr_expect_eq(strlen(id.build_config_sha256), 64);
    cr_expect_str_eq(json_string_value(json_object_get(j, "build_config_sha256")),
                     id.build_config_sha256);
    cr_expect_str_eq(json_string_value(json_object_get(j, "compiler")), id.compiler);
    cr_expect(id.compiler[0]);
    json_decref(j);
}

/* Issue 25: the device build links its libraries from a carried prefix, and CMake writes their
 * folder into the link as -Wl,-rpath,DIR. That made every device build dirty ("has flag
 * -Wl,-rpath,..."); a run-time search path into the dependency prefixes is clean now, and one
 * outside them is still dirty. */
Test(identity, a_run_time_search_path_into_the_prefixes_is_clean_and_elsewhere_dirty)
{
    make_repo();
    snprintf(prefixes, sizeof prefixes, "/tmp/gate-carried-prefix/usr/lib");
    snprintf(lflags, sizeof lflags,
             "-Wl,-rpath,/tmp/gate-carried-prefix/usr/lib:/usr/local/cuda/lib");
    struct info in = buildinfo();
    cr_expect_eq(in.dirty, 0, "an rpath into the prefixes: %s", in.reason);
    snprintf(lflags, sizeof lflags, "-Wl,-rpath,/usr/lib:/tmp/elsewhere/lib");
    expect_dirty("(run-time search path) reads /tmp/elsewhere/lib, outside");
    snprintf(lflags, sizeof lflags, "-Wl,-rpath,$ORIGIN/lib");
    expect_dirty("has run-time search path entry $ORIGIN/lib, which is not an absolute path");
}

/* Write the build-identity file of repo (ci/identity.cmake); its exit status. */
static int write_identity(void)
{
    snprintf(identity_file, sizeof identity_file, "%s.IDENTITY", repo);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cmake -DMODE=write -DSRC='%s' -DIDENTITY='%s' -P '%s/ci/identity.cmake' >/dev/null "
             "2>&1",
             repo, identity_file, GATE_SOURCE_DIR);
    const int ws = system(cmd);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

/* Issue 25 R1: a tree whose .git did not travel is its identity file's commit, clean, with the
 * same source digest git gives, as long as every file is the commit's: an edit or a file the
 * commit does not hold in a source folder makes it dirty; without the file it has no commit. */
Test(identity, a_tree_without_git_is_the_commit_its_identity_file_names)
{
    make_repo();
    struct info by_git = buildinfo();
    cr_assert_eq(by_git.dirty, 0, "%s", by_git.reason);
    cr_assert_eq(write_identity(), 0);
    sh("rm -rf '%s/.git'", repo);
    struct info in = buildinfo();
    cr_expect_eq(in.dirty, 0, "the verified tree: %s", in.reason);
    cr_expect_str_eq(in.commit, by_git.commit);
    cr_expect_str_eq(in.source_sha256, by_git.source_sha256);

    put("engine/a.h", "#define A 2\n");
    expect_dirty("engine/a.h differs from commit");
    put("engine/a.h", "#define A 1\n");
    put("engine/b.h", "#define B 1\n");
    expect_dirty("untracked file engine/b.h in a source folder");
    sh("rm '%s/engine/b.h'", repo);
    cr_expect_eq(buildinfo().dirty, 0);

    identity_file[0] = '\0';
    expect_dirty("no git commit at");
}

/* The device copy's .git was a snapshot older than the prepared commit: git's HEAD named the
 * earlier commit and every later edit made the build dirty, so no receipt of the run counted.
 * When the identity file names another commit and the whole tree verifies against it, the tree
 * is that commit; a tree that does not verify keeps git's answer (dirty). */
Test(identity, a_stale_git_yields_to_an_identity_file_the_tree_verifies_against)
{
    make_repo();
    struct info old_commit = buildinfo();
    put("engine/a.h", "#define A 2\n");
    sh("cd '%s' && git add -A && git -c user.name=t -c user.email=t@t -c commit.gpgsign=false "
       "commit -q -m second",
       repo);
    struct info by_git = buildinfo();
    cr_assert_eq(by_git.dirty, 0, "%s", by_git.reason);
    cr_assert_str_neq(by_git.commit, old_commit.commit);
    cr_assert_eq(write_identity(), 0);
    sh("cd '%s' && git reset -q --soft HEAD~1", repo); /* .git at the first commit, tree second */

    struct info in = buildinfo();
    cr_expect_eq(in.dirty, 0, "the verified tree: %s", in.reason);
    cr_expect_str_eq(in.commit, by_git.commit);
    cr_expect_str_eq(in.source_sha256, by_git.source_sha256);

    put("engine/a.h", "#define A 3\n"); /* verifies against neither: git's commit, dirty */
    in = buildinfo();
    cr_expect_eq(in.dirty, 1);
    cr_expect_str_eq(in.commit, old_commit.commit);
    put("engine/a.h", "#define A 2\n");

    identity_file[0] = '\0'; /* without the file: git's stale answer, dirty */
    in = buildinfo();
    cr_expect_eq(in.dirty, 1);
    cr_expect_str_eq(in.commit, old_commit.commit);
}

/* CMake 3.27+ with Ninja has the linker write its depfile (-Wl,--dependency-file=...): seen on
 * the GPU host, where it made every build dirty. Into the build folder it is clean; a depfile
 * path outside the allowed folders is still dirty. */
Test(identity, a_linker_depfile_in_the_build_folder_is_clean_and_elsewhere_dirty)
{
    make_repo();
    snprintf(lflags, sizeof lflags, "-Wl,--dependency-file=CMakeFiles/gate.dir/link.d");
    struct info in = buildinfo();
    cr_expect_eq(in.dirty, 0, "a depfile in the build folder: %s", in.reason);
    snprintf(lflags, sizeof lflags, "-Wl,--dependency-file=/tmp/elsewhere/link.d");
    expect_dirty("(linker depfile) reads /tmp/elsewhere/link.d, outside");
    snprintf(lflags, sizeof lflags, "-Wl,--dependency-file=x.d,-z,now");
    expect_dirty("which no clean build of gate uses");
}

/* A tree copied without its .git into another repository's folder must not take that
 * repository's commit: its identity file's commit is the one. */
Test(identity, a_tree_inside_another_repository_keeps_its_own_commit)
{
    make_repo();
    cr_assert_eq(write_identity(), 0);
    struct info by_git = buildinfo();
    char outer[700];
    snprintf(outer, sizeof outer, "%s.outer", repo);
    sh("rm -rf '%s/.git' && mkdir -p '%s' && cd '%s' && git init -q . && git -c user.name=t -c "
       "user.email=t@t -c commit.gpgsign=false commit -q --allow-empty -m outer && mv '%s' inner",
       repo, outer, outer, repo);
    const int len = snprintf(repo, sizeof repo, "%.580s/inner", outer);
    cr_assert(len > 0 && (size_t)len < sizeof repo);
    FILE *f = fopen(compiled, "w");
    cr_assert(f);
    fprintf(f, "%s/engine/a.c\n", repo);
    fclose(f);
    struct info in = buildinfo();
    cr_expect_str_eq(in.commit, by_git.commit, "took the enclosing repository's commit");
    cr_expect_eq(in.dirty, 0, "%s", in.reason);
}

/* The writer refuses a tree that is not its clean commit: an edit git status cannot see (an
 * assume-unchanged bit) and an untracked file both leave no identity file behind. */
Test(identity, the_identity_writer_refuses_a_tree_that_is_not_its_commit)
{
    make_repo();
    sh("cd '%s' && git update-index --assume-unchanged engine/a.h", repo);
    put("engine/a.h", "#define A 2\n");
    cr_expect_neq(write_identity(), 0);
    cr_expect_neq(access(identity_file, F_OK), 0, "an identity file was written");
    make_repo();
    put("notes.txt", "x\n");
    cr_expect_neq(write_identity(), 0);
    cr_expect_neq(access(identity_file, F_OK), 0, "an identity file was written");
    sh("rm '%s/notes.txt'", repo);
    cr_expect_eq(write_identity(), 0);
    cr_expect_eq(access(identity_file, F_OK), 0);
}
