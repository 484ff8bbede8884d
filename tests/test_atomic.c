/* test_atomic.c — the one atomic writer (base/atomic.h) and the writers ported to it.
 *
 * What must hold: a committed file is complete, has the asked mode and leaves no temp file; an
 * aborted or failed write leaves the old file and no temp file; a SIGINT/SIGTERM during a write
 * removes every temp file and still ends the process by that signal; a symlink planted at a
 * temp-like name or at the final path is never written through; errors name the user's path.
 *
 * Interrupting a real writer in the middle of its write, deterministically: the child sets
 * RLIMIT_FSIZE to 0, so the writer's first write(2) fails and raises SIGXFSZ, whose handler
 * sends the process SIGTERM — delivered at once, while the temp file exists. Before the writers
 * shared base/atomic.c, only the GGUF writer removed its temp file then.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/atomic.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "oracles/golden.h"
#include "receipts/key.h"
#include "receipts/store.h"
#include "support/check.h"

/* A fresh folder under the test's scratch folder. */
static const char *fresh_dir(const char *name)
{
    static char dir[700];
    snprintf(dir, sizeof dir, "%s/%s", check_tmp_dir(), name);
    cr_assert_eq(mkdir(dir, 0755), 0, "mkdir %s: %s", dir, strerror(errno));
    return dir;
}

/* Entries of dir whose name contains part ("" = all, dot entries excluded). */
static int count_entries(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    cr_assert(d, "opendir %s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && strstr(e->d_name, part))
            n++;
    closedir(d);
    return n;
}

static void put_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

Test(atomic, commit_writes_the_whole_file_with_its_mode_and_leaves_no_temp)
{
    const char *dir = fresh_dir("commit");
    char path[800];
    snprintf(path, sizeof path, "%s/out.bin", dir);
    put_text(path, "old content\n");
    struct atomic_file a;
    struct gate_err err = {0};
    cr_assert_eq(atomic_open(&a, path, 0640, &err), 0, "%s", err.msg);
    cr_expect_eq(count_entries(dir, ".tmp."), 1, "the temp file sits next to the target");
    cr_assert_eq(atomic_write(&a, "new ", 4, &err), 0, "%s", err.msg);
    FILE *f = atomic_stream(&a, &err);
    cr_assert(f, "%s", err.msg);
    fprintf(f, "content %d\n", 2);
    cr_assert_eq(atomic_commit(&a, &err), 0, "%s", err.msg);
    atomic_abort(&a); /* after a commit: nothing */
    char *text = check_slurp_text(path);
    cr_expect_str_eq(text, "new content 2\n");
    free(text);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0640);
    cr_expect_eq(count_entries(dir, ""), 1, "only the target remains");
}

Test(atomic, abort_keeps_the_old_file_and_removes_the_temp)
{
    const char *dir = fresh_dir("abort");
    char path[800];
    snprintf(path, sizeof path, "%s/keep.txt", dir);
    put_text(path, "old\n");
    struct atomic_file a, never = {0};
    struct gate_err err = {0};
    atomic_abort(&never); /* a zeroed struct is "not open" */
    atomic_abort(NULL);
    cr_assert_eq(atomic_open(&a, path, 0644, &err), 0, "%s", err.msg);
    cr_assert_eq(atomic_write(&a, "half", 4, &err), 0, "%s", err.msg);
    atomic_abort(&a);
    atomic_abort(&a);
    char *text = check_slurp_text(path);
    cr_expect_str_eq(text, "old\n");
    free(text);
    cr_expect_eq(count_entries(dir, ""), 1);
}

Test(atomic, errors_name_the_users_path_never_the_temp)
{
    const char *dir = fresh_dir("errors");
    char path[800];
    struct atomic_file a;
    struct gate_err err = {0};
    snprintf(path, sizeof path, "%s/no/such/dir/x.f32", dir);
    cr_expect_eq(atomic_open(&a, path, 0644, &err), ERR_ENV);
    cr_expect(strstr(err.msg, "no/such/dir/x.f32'") && !strstr(err.msg, ".tmp.") &&
                  !strstr(err.msg, "XXXXXX"),
              "%s", err.msg);
    /* a rename over a folder fails at commit: the error names the target, the temp is gone */
    snprintf(path, sizeof path, "%s/taken", dir);
    cr_assert_eq(mkdir(path, 0755), 0);
    err_clear(&err);
    cr_assert_eq(atomic_open(&a, path, 0644, &err), 0, "%s", err.msg);
    cr_assert_eq(atomic_write(&a, "x", 1, &err), 0, "%s", err.msg);
    cr_expect_eq(atomic_commit(&a, &err), ERR_ENV);
    cr_expect(strstr(err.msg, "/taken'") && !strstr(err.msg, ".tmp."), "%s", err.msg);
    cr_expect_eq(count_entries(dir, ""), 1, "the failed commit left its temp file");
}

Test(atomic, a_symlink_at_a_temp_like_name_or_the_target_is_never_followed)
{
    const char *dir = fresh_dir("symlink");
    char path[800], victim[800], planted[900];
    snprintf(path, sizeof path, "%s/out.jsonl", dir);
    snprintf(victim, sizeof victim, "%s/victim.txt", dir);
    put_text(victim, "precious\n");
    /* every name an older or a careless writer could have used next to the target */
    const char *suffix[] = {".tmp", ".tmp.XXXXXX", ".XXXXXX", ".tmp.%ld", ".%ld"};
    for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
        char fmt[64];
        snprintf(fmt, sizeof fmt, "%%s%s", suffix[i]);
        snprintf(planted, sizeof planted, fmt, path, (long)getpid());
        cr_assert_eq(symlink(victim, planted), 0, "%s", planted);
    }
    cr_assert_eq(symlink(victim, path), 0); /* and at the final path itself */
    struct atomic_file a;
    struct gate_err err = {0};
    cr_assert_eq(atomic_open(&a, path, 0644, &err), 0, "%s", err.msg);
    struct stat st;
    char tmp_seen = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (strstr(e->d_name, "out.jsonl.tmp.") && lstat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            tmp_seen = 1;
            cr_expect_eq(st.st_mode & 0777, 0600, "the temp file is private until commit");
        }
    }
    closedir(d);
    cr_expect(tmp_seen, "the temp file is a regular file of its own");
    cr_assert_eq(atomic_write(&a, "new\n", 4, &err), 0, "%s", err.msg);
    cr_assert_eq(atomic_commit(&a, &err), 0, "%s", err.msg);
    char *v = check_slurp_text(victim);
    cr_expect_str_eq(v, "precious\n", "the write went through a planted symlink");
    free(v);
    cr_assert_eq(lstat(path, &st), 0);
    cr_expect(S_ISREG(st.st_mode), "the target is a regular file, not the planted link");
    /* victim, target and the five planted links: no temp file besides them */
    cr_expect_eq(count_entries(dir, ""), 7);
}

Test(atomic, an_ignored_sigint_stays_ignored_and_the_handler_goes_after_the_last_write)
{
    struct sigaction ign = {0}, cur;
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    cr_assert_eq(sigaction(SIGINT, &ign, NULL), 0);
    const char *dir = fresh_dir("dispositions");
    char p1[800], p2[800];
    snprintf(p1, sizeof p1, "%s/one", dir);
    snprintf(p2, sizeof p2, "%s/two", dir);
    struct atomic_file a, b;
    struct gate_err err = {0};
    cr_assert_eq(atomic_open(&a, p1, 0644, &err), 0, "%s", err.msg);
    cr_assert_eq(atomic_open(&b, p2, 0644, &err), 0, "%s", err.msg);
    sigaction(SIGINT, NULL, &cur);
    cr_expect(cur.sa_handler == SIG_IGN, "a Ctrl-C the process ignores must stay harmless");
    sigaction(SIGTERM, NULL, &cur);
    cr_expect(cur.sa_handler != SIG_DFL, "SIGTERM is handled while files are open");
    cr_assert_eq(atomic_commit(&a, &err), 0, "%s", err.msg);
    sigaction(SIGTERM, NULL, &cur);
    cr_expect(cur.sa_handler != SIG_DFL, "one file is still open");
    atomic_abort(&b);
    sigaction(SIGTERM, NULL, &cur);
    cr_expect(cur.sa_handler == SIG_DFL, "the previous disposition is back after the last one");
    cr_expect_eq(count_entries(dir, ""), 1);
}

/* Fork; the child opens two atomic files, writes part of each, tells the parent, and waits. The
 * parent sends sig: the child must die by sig and leave no temp file. */
static void kill_during_a_slow_write(int sig)
{
    char name[32];
    snprintf(name, sizeof name, "slow%d", sig);
    const char *dir = fresh_dir(name);
    char p1[800], p2[800];
    snprintf(p1, sizeof p1, "%s/a.bin", dir);
    snprintf(p2, sizeof p2, "%s/b.bin", dir);
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        struct atomic_file a, b;
        struct gate_err err = {0};
        if (atomic_open(&a, p1, 0644, &err) || atomic_write(&a, "part", 4, &err) ||
            atomic_open(&b, p2, 0644, &err) || atomic_write(&b, "part", 4, &err))
            _exit(3);
        if (write(pfd[1], "r", 1) != 1)
            _exit(4);
        for (;;)
            pause(); /* the rest of the write never comes */
    }
    close(pfd[1]);
    char c = 0;
    cr_assert_eq(read(pfd[0], &c, 1), 1, "the child could not open its files");
    close(pfd[0]);
    cr_expect_eq(count_entries(dir, ".tmp."), 2, "both temp files exist before the signal");
    cr_assert_eq(kill(pid, sig), 0);
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == sig,
              "the process must end by the signal it got (re-raised), status 0x%x", st);
    cr_expect_eq(count_entries(dir, ""), 0, "an interrupted write left a file behind");
}

Test(atomic, sigterm_during_a_slow_write_leaves_no_temp_file)
{
    kill_during_a_slow_write(SIGTERM);
}

Test(atomic, sigint_during_a_slow_write_leaves_no_temp_file)
{
    kill_during_a_slow_write(SIGINT);
}

/* ---- the ported writers, interrupted in the middle of their write(2) ------------------------ */

static void term_self(int sig)
{
    (void)sig;
    kill(getpid(), SIGTERM);
}

enum writer { W_PUBKEY, W_GGUF, W_GOLDEN, W_EXPORT };

static void interrupt_writer(enum writer which, const char *name)
{
    const char *dir = fresh_dir(name);
    char path[800];
    snprintf(path, sizeof path, "%s/out", dir);
    struct key_pair k;
    struct model *m = NULL;
    struct store *db = NULL;
    uint8_t *buf = NULL;
    struct gate_err err = {0};
    if (which == W_PUBKEY || which == W_EXPORT) {
        char kp[800];
        snprintf(kp, sizeof kp, "%s/../%s.key", dir, name);
        cr_assert_eq(key_generate(kp, "h", &k, &err), 0, "%s", err.msg);
    }
    if (which == W_EXPORT) {
        char dbp[800];
        snprintf(dbp, sizeof dbp, "%s/../%s.db", dir, name);
        cr_assert_eq(store_open(&db, dbp, &err), 0, "%s", err.msg);
        json_t *p = json_pack("{s:{s:s, s:s, s:s}, s:s}", "cell", "model", "m", "host", "h", "mode",
                              "ref.decode", "verdict", "PASS");
        int64_t id = 0;
        cr_assert_eq(store_append(db, p, &k, &id, &err), 0, "%s", err.msg);
        json_decref(p);
    } else if (which == W_GOLDEN) {
        m = check_tiny_model("tiny-dense", &buf);
    }
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        struct rlimit rl = {0, 0};
        struct sigaction sa = {0};
        sa.sa_handler = term_self;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGXFSZ, &sa, NULL);
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            _exit(5);
        int rc = 0;
        if (which == W_PUBKEY) {
            rc = key_write_public(path, &k, &err);
        } else if (which == W_GGUF) {
            struct gguf_writer *w = gguf_writer_new();
            gguf_writer_add_str(w, "general.architecture", "qwen3");
            rc = gguf_writer_write_file(w, path, &err);
        } else if (which == W_GOLDEN) {
            rc = golden_record_force(path, m, 2, 1, 1, NULL, &err);
        } else {
            rc = store_export(db, path, &err);
        }
        _exit(rc ? 6 : 7); /* not reached: the write raises SIGXFSZ, then SIGTERM */
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "status 0x%x", st);
    cr_expect_eq(count_entries(dir, ""), 0, "the interrupted %s writer left a file", name);
    if (which == W_PUBKEY || which == W_EXPORT)
        key_wipe(&k);
    store_close(db);
    model_free(m);
    free(buf);
}

Test(atomic, an_interrupted_public_key_write_leaves_no_temp_file)
{
    interrupt_writer(W_PUBKEY, "pubkey");
}

Test(atomic, an_interrupted_gguf_write_leaves_no_temp_file)
{
    interrupt_writer(W_GGUF, "gguf");
}

Test(atomic, an_interrupted_goldens_write_leaves_no_temp_file)
{
    interrupt_writer(W_GOLDEN, "goldens");
}

Test(atomic, an_interrupted_receipt_export_leaves_no_temp_file)
{
    interrupt_writer(W_EXPORT, "export");
}
