/* ladderfix.h — a release fixture for tests that need signed receipts in a store without running
 * the engine: a scratch folder with two host keys (a, b) and their .pub files, a stand-in clean
 * build identity, receipts fabricated from the recorded metrics of a real PASS receipt
 * (tests/data/release_metrics.json) and judged through the gate table as `gate run` records them,
 * the two-host release ladder those tests share, a one-cell ladder for an end-to-end `gate run`,
 * the release judged as that build, raw SQLite access that bypasses the append-only triggers (to
 * tamper), and a shell helper for CLI tests.
 * Used by tests/test_release.c, tests/test_report.c, tests/test_html_report.c,
 * tests/test_kv_ladder.c and tests/test_exec.c (test_fleet.c and test_broken_twin.c: the shell
 * helper), a folder built once and shared by the test processes of one runner
 * (ladderfix_once; tests/test_release_e2e.c), and the runner's shared goldens cache
 * (ladderfix_share_begin; tests/test_exec.c).
 * Start reading: ladderfix_init(), then ladderfix_ladder() and ladderfix_add().
 */
#ifndef GATE_TEST_LADDERFIX_H
#define GATE_TEST_LADDERFIX_H

#include <stdint.h>

#include "harness/identity.h"
#include "receipts/key.h"

struct ladder;
struct release_result;
struct sqlite3;

/* The pinned SHA-256 of ../shared/conformance/qwen3moe-tiny-q4_k_m/model.gguf (model moe of
 * ladderfix_ladder), and of the goldens file the golden gate of tests/data/release_metrics.json
 * was judged with (the ladder's golden setting must pin it for those numbers to count). */
#define LADDERFIX_MOE_SHA "9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560"
#define LADDERFIX_GOLDENS_SHA "0fbed51a3d977ffe726a861d7d701e94bce701dd84dd25b96184e4664ba2427f"

struct ladderfix {
    char dir[600];         /* the scratch folder (under check_tmp_dir()) */
    struct key_pair key_a; /* host "a": a.key, a.pub */
    struct key_pair key_b; /* host "b": b.key, b.pub */
    struct identity self;  /* a stand-in clean build: version 1.0.0, commit c0ffee...01 */
};

/* A fresh scratch folder named after tag, keys a and b with their .pub files, self. Asserts. */
void ladderfix_init(struct ladderfix *fx, const char *tag);

/* ladderfix_init in the existing folder dir (e.g. one of ladderfix_once). Asserts. */
void ladderfix_init_in(struct ladderfix *fx, const char *dir);

/* fx->dir/name: check_path's eight rotating buffers (each valid until eight more calls of it or
 * check_path). */
const char *ladderfix_path(const struct ladderfix *fx, const char *name);

/* Write fx->dir/name: the release ladder of the release tests. Release rel 1.0.0; model moe (the
 * tiny MoE conformance model, pinned to LADDERFIX_MOE_SHA); hosts a and b, device none, each
 * trusting its own key (file:a.pub, file:b.pub); modes ref.decode and ref.chat; cells
 * moe/a/ref.decode (0), moe/a/ref.chat (1), moe/b/ref.decode (2); golden defaults naming g.json
 * pinned to LADDERFIX_GOLDENS_SHA; every other setting the default, so the receipts of
 * ladderfix_add judge as PASS. exclude_reason non-NULL: moe/a/ref.chat is excluded with that
 * reason (written as given inside YAML double quotes), and the cells become moe/a/ref.decode (0)
 * and moe/b/ref.decode (1). anchor 1: ladderfix_add_anchor()'s anchor case "conf" is the last
 * entry; anchor 0: the last line declares qwen3moe unanchored. Returns the path (one of
 * ladderfix_path's buffers). Asserts. */
const char *ladderfix_ladder(const struct ladderfix *fx, const char *name,
                             const char *exclude_reason, int anchor);

/* Write fx->dir/name: the smallest ladder for an end-to-end `gate run` (release rel 1.0.0):
 * model moe (the tiny MoE conformance model, pinned to LADDERFIX_MOE_SHA), host a (device none,
 * trusting file:a.pub), then top (NULL, or whole top-level entries such as an engines: section),
 * modes: [mode], the one cell moe/a/mode with cell_extra inside its braces (NULL, or e.g.
 * ", kv: f16"), gate defaults parity {positions: 64}, golden {goldens: moe-goldens.json, sha256}
 * (recorded here by ladderfix_record_goldens at the default 16 tokens, so the golden gate runs
 * and a correct subject passes it; left out when defaults names golden itself) followed by
 * defaults (NULL, or lines indented under defaults:), qwen3moe unanchored. Returns the path (one
 * of ladderfix_path's buffers). Asserts. */
const char *ladderfix_one_cell(const struct ladderfix *fx, const char *name, const char *top,
                               const char *mode, const char *cell_extra, const char *defaults);

/* Record the goldens of the model file model_path into the goldens file out_path (gate golden
 * record's library call: the reference twin's greedy continuations of the default prompts,
 * n_gen tokens each; an entry already there for the model is kept) and put the file's SHA-256 in
 * sha, the value a ladder pins with golden.sha256. Milliseconds for the tiny conformance and
 * synthetic models (seconds under ASan: a new out_path gets a copy of the file recorded earlier
 * for the same model bytes and n_gen, in this process or, with ladderfix_share_begin, in this
 * runner). Asserts. */
void ladderfix_record_goldens(const char *model_path, const char *out_path, int n_gen,
                              char sha[65]);

/* Make the goldens file at path (written by ladderfix_record_goldens) expect what no correct
 * subject produces: the first case of every model entry expects, as its first generated id, the
 * id after the recorded one (away from any near tie on the recorded models, so the golden judge
 * calls it WRONG: a judged FAIL, the same on every machine). sha receives the file's new SHA-256.
 * Asserts. */
void ladderfix_alter_goldens(const char *path, char sha[65]);

/* Append to the ladder at path an anchor case "conf" for qwen3moe whose files (pinned to made-up
 * digests) exist nowhere, so no receipt can be made for it here and it stays MISSING, and remove
 * the ladder's `unanchored:` line (a ladder may not both anchor and un-anchor an arch). The
 * anchors entry is then the file's last one. Asserts. */
void ladderfix_add_anchor(const char *path);

/* The reverse of ladderfix_add_anchor: cut the ladder at path from its `anchors:` line to the end
 * (the anchors entry must be the last) and append `unanchored: {qwen3moe: 'reason'}` (reason is
 * written inside YAML single quotes as given). Asserts that there was an anchors entry. */
void ladderfix_drop_anchor(const char *path, const char *reason);

/* What to fake in one receipt. Zeroed: a PASS receipt of fx->self for the ladder's pin, its gates
 * judged with the ladder's settings for the cell. */
struct ladderfix_fake {
    int fail;                  /* 1: parity numbers that fail (position 5 at cosine 0.42), with
                                * the localization a failed run records (first bad layer 1,
                                * routing agreement 90 of 96 there) and position 7 an argmax
                                * TIE_FLIP */
    int golden_diff;           /* 1: the first golden case's 4th token differs (first_diff 3) */
    const char *commit;        /* NULL: self's commit */
    int dirty;                 /* 1: the build identity says its tree was dirty */
    const char *sha;           /* NULL: the model digest the ladder pins */
    const char *env_host;      /* NULL: the cell's host id; else environment.hostname (any text) */
    const char *binary_sha256; /* NULL: self's; else the engine's binary_sha256 */
    int no_gates;              /* 1: no gate at all (the overall verdict FAIL unless claim_pass) */
    double min_cosine;         /* 0: the ladder's; else parity judged (and recorded) with it */
    int claim_pass;            /* 1: every gate's verdict and the overall verdict say PASS
                                * whatever the numbers say */
    const char *release_name;  /* NULL: the ladder's release name */
    const char *release_version; /* NULL: the ladder's release version */
    const char *trust_sha256;    /* NULL: the ladder's trust_sha256 */
    const char *cell_kv;         /* NULL: the payload's cell.kv is "f16" for an F16 cell, absent
                                  * for an F32 one (as in receipts from before the key; the
                                  * release reads that as f32); else cell.kv as given */
    const char *ran_kv;          /* NULL: every gate's metrics.ran.kv is "f16" for an F16 cell,
                                  * absent for an F32 one (as in release_metrics.json); else as
                                  * given (what the backend reported) */
    int no_dirty_field;          /* 1: subject.engine has no git_dirty field at all (a payload
                                  * that never says whether its tree was clean) */
};

/* Append one receipt for cell ci of the ladder at ladder_path to db (created if missing), signed
 * by k: every gate of release_metrics.json judged with the ladder's settings for the cell (its
 * KV type included), its metrics.ran.backend the backend the cell's mode names (the text before
 * the first dot; the numbers were recorded on ref), the model digest the ladder pins. Returns the
 * receipt id. Asserts. */
int64_t ladderfix_add(const struct ladderfix *fx, const char *ladder_path, const char *db,
                      const struct key_pair *k, int ci, struct ladderfix_fake fk);

/* Judge the release of the ladder at ladder_path from the store db (opened read-only) as the
 * build fx->self, through release_evaluate. *r is filled (free with release_result_free); *lp
 * receives the loaded ladder (free with ladder_free), or with lp NULL it is freed here. Asserts
 * that the evaluation ran (not that the release is OK). */
void ladderfix_evaluate(const struct ladderfix *fx, const char *ladder_path, const char *db,
                        struct ladder **lp, struct release_result *r);

/* Open db with SQLite directly and drop the append-only triggers, so a test can alter rows as an
 * attacker with file access would. Close with sqlite3_close. Asserts. */
struct sqlite3 *ladderfix_open_raw(const char *db);

/* system() of a printf-style command line; its exit status (-1 when it did not exit). */
int ladderfix_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- what the test processes of one runner share -------------------------------------------
 * Criterion runs each Test in its own process, so a fixture that costs whole `gate run`s (or a
 * goldens recording) would be paid once per Test. A test file that shares calls
 * ladderfix_share_begin() from its ReportHook(PRE_ALL) (the runner, before any test starts: the
 * folder travels to the test processes in $GATE_LADDERFIX_SHARED) and ladderfix_share_end() from
 * its ReportHook(POST_ALL). Without that (another test file) everything below still works, per
 * process. */
void ladderfix_share_begin(void);
void ladderfix_share_end(void);
/* The two hooks, one macro each: Criterion names a hook by __LINE__, so each must stand on its own
 * line of the test file (needs <criterion/hooks.h>, which <criterion/criterion.h> includes). */
#define LADDERFIX_SHARE_BEGIN_HOOK                                                                 \
    ReportHook(PRE_ALL)(struct criterion_test_set * set)                                           \
    {                                                                                              \
        (void)set;                                                                                 \
        ladderfix_share_begin();                                                                   \
    }
#define LADDERFIX_SHARE_END_HOOK                                                                   \
    ReportHook(POST_ALL)(struct criterion_global_stats * stats)                                    \
    {                                                                                              \
        (void)stats;                                                                               \
        ladderfix_share_end();                                                                     \
    }

/* The folder `name` of the shared folder (or, without one, of this process's check_tmp_dir()),
 * built once: the first caller, holding a lock on the shared folder, runs build(dir, ctx) into
 * the new empty folder dir and marks it finished; every later caller, in any test process of the
 * runner, waits for the lock and gets the finished folder. A build that asserts leaves no mark
 * (its process ends, the lock is released) and the next caller builds again from an empty
 * folder. Callers treat the folder as read-only: copy what they change. The path goes to out
 * (1024 bytes) and is returned. Asserts. */
const char *ladderfix_once(const char *name, void (*build)(const char *dir, void *ctx), void *ctx,
                           char out[1024]);

#endif
