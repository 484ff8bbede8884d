/* exec_engine.c — the reference engine of the exec backend's tests: gate-exec version 1
 * (docs/exec.md) over gate's own reference twin, with planted flaws.
 *
 * It reads request frames on stdin and answers on stdout, one at a time, with blocking I/O: the
 * simplest engine that can be right. The logits are the twin's (backend "ref", one thread), so a
 * clean run passes parity bit for bit; the options make it wrong on purpose:
 *   --noise SIGMA          add SIGMA * u, u in [-1, 1] from splitmix64(position, token), to every
 *                          logit (deterministic; independent of how the calls are cut)
 *   --defect scale         logits scaled by 1.5 (parity must FAIL)
 *   --crash-at-forward N   the Nth forward request dies by SIGSEGV
 *   --hang-at-forward N    the Nth forward request never answers
 *   --error-at-forward N   the Nth forward request gets an error reply ("ok": false)
 *   --bad-frame            the first forward reply's header is not JSON
 *   --oversize-frame       the first forward reply announces a 1 MiB header
 *   --wrong-size           forward replies carry one float too few
 *   --extra-bytes          truncate replies are followed by three stray bytes (one write)
 *   --wrong-digest         load answers a digest that is not the file's
 *   --exit-early           exits with status 3 right after answering hello
 *   --no-faults            lists no fault kinds in hello
 *   --faults K1,K2,...     lists only these fault kinds in hello (and refuses set_faults with
 *                          any other): an engine that takes some kinds and not others
 *   --max-tokens N         hello's max_tokens (default 4096)
 *   --lie FIELD            one reply field is wrong: hello.protocol 2, hello.device "",
 *                          load.sha256 the file's digest with its last hex digit changed,
 *                          load.n_vocab one less than the model's, load.n_ctx one less than
 *                          asked, forward.n_tokens and forward.n_vocab one less than computed
 *   --reply-unread         its stdin pipe shrunk to one page, every forward is answered at once
 *                          (ok, zero logits), before its tokens are read
 * Attacks on gate itself (docs/exec.md, "Threat model"); what they got is reported in hello's
 * `device` ("cpu: " and ';'-separated findings), which gate records and the tests read:
 *   --steal PATH           try to read PATH (repeatable, at most 8): "s0=STOLEN:<hex of its first 4
 *                          bytes>" or "s0=denied"
 *   --steal-parent         find gate among its ancestors (/proc/self/stat's parent, then its
 *                          parent's: the host's view, whatever namespace the engine is in),
 *                          read its /proc/<pid>/cmdline, try the files after --key and --db
 *                          ("key=", "db="), list the key's folder ("kdir="), read gate's
 *                          /proc/<pid>/environ ("penv=") and look for GATE_TEST_SECRET in its own
 *                          environment ("env="), read any regular file open on a descriptor
 *                          >= 3 ("fd=")
 *   --grandchild           double-fork (setsid in between) a grandchild that sleeps for ten
 *                          minutes: "gc=<pid>"
 *   --leftovers NAME       leave everything an engine can behind, each process named NAME
 *                          (PR_SET_NAME, at most 15 bytes) so a test can look for it in /proc:
 *                          an intermediate child in its own session and its grandchild in
 *                          another one, both ignoring SIGTERM, SIGHUP and SIGINT and sleeping;
 *                          and a runner that forks a successor and exits at once, generation
 *                          after generation, each in a new session (a sweep that kills only
 *                          what it sees is one generation late), 2000 generations, the last
 *                          one sleeping. All give up 30 s after hello (so a failed test cleans
 *                          up after itself). hello answers once they run: "lo=3"
 *   --orphans N            leave N (at most 1000) processes that exit at once, orphaned (each
 *                          the child of a child that exited first), so they are reaped by
 *                          whoever adopted them or pile up as zombies there: "or=N" once all
 *                          have exited
 *   --linger               when its stdin closes (gate ended or died), stay: deaf to SIGTERM,
 *                          SIGHUP and SIGINT, named as --leftovers says, for up to 30 s
 *   --slow-forward MS      every forward request sleeps MS milliseconds before answering
 *   --replay               a lying fast engine (issue 23 §2): a forward request whose (n_past,
 *                          n_tokens) it has answered before gets that earlier reply again,
 *                          whatever the tokens; only new shapes are computed
 *   --fake-faults          a lying engine (issue 23 §3): set_faults is acknowledged but never
 *                          applied; while a fault list is set, every logit gets a large jitter
 *                          instead (so the logits move and parity rejects them)
 *   --known-inputs SEED    an engine that knows its test inputs (a "defeat device"): right only
 *                          while the sequence so far is the generated one of seed SEED (hex; as
 *                          gate's parity_tokens makes it for a run given that seed), every logit
 *                          scaled by 1.5 from the first position off it
 *   --nan-batched          a batched-path bug: a forward of more than one token answers NaN for
 *                          the first logit of its first row (one token at a time it is right)
 *   --only-random-ids      an engine that tells test inputs from text (a defeat device): right
 *                          where the last 12 tokens decode to something other than plain text,
 *                          every logit scaled by 1.01 where they read as text (letters, spaces,
 *                          and . , ' only, at least two spaces) — right on uniform random ids,
 *                          1 % off on what users send
 *   --known-chat           an engine that knows gate's chat conversation (a defeat device):
 *                          right wherever the context holds no <|im_start|> and on the fixed
 *                          conversation of mode_chat_for_model(); every logit scaled by 1.01 at
 *                          a position whose context holds <|im_start|> and has left that
 *                          conversation — right in every gate run's decode and prefill, and on
 *                          the chat gate's fixed input, 1 % off in every other chat
 * Faults: every kind of gate's table, applied by the twin (set_faults -> backend_set_faults).
 * Start reading: main().
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/detmath.h"
#include "base/frame.h"
#include "engine/backend.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "faults/fault.h"
#include "oracles/parity.h"

struct opts {
    double noise;
    int fake_faults, faults_on; /* --fake-faults, and whether a fault list is set */
    int defect;
    int crash_at, hang_at, error_at;
    int bad_frame, oversize_frame, wrong_size, extra_bytes, wrong_digest, exit_early;
    unsigned faults; /* the kinds it lists in hello and takes (bit 1 << enum fault_kind) */
    int max_tokens;
    int replay;
    uint64_t known;     /* --known-inputs SEED (0: off) */
    int only_random;    /* --only-random-ids */
    int nan_batched;    /* --nan-batched */
    int known_chat;     /* --known-chat */
    const char *device; /* what hello says the engine runs on */
    const char *steal[8];
    int n_steal, steal_parent, grandchild, slow_ms;
    const char *leftovers; /* --leftovers NAME */
    int linger;            /* --linger */
    int orphans;           /* --orphans N */
    const char *lie;       /* --lie FIELD ("op.field") */
    int reply_unread;      /* --reply-unread */
};

/* 1 when --lie names field ("op.field"). */
static int lies(const struct opts *o, const char *field)
{
    return o->lie && !strcmp(o->lie, field);
}

/* ---- attacks on gate (reported through hello's device) ------------------------------------- */

static void add_finding(char *out, size_t n, const char *fmt, const char *label, const char *what)
{
    const size_t at = strlen(out);
    snprintf(out + at, n - at, fmt, at ? ";" : "", label, what);
}

/* Try to read path: "label=STOLEN:<hex>" or "label=denied". */
static void try_read(char *out, size_t n, const char *label, const char *path)
{
    unsigned char b[4] = {0};
    char hex[16] = "";
    const int fd = open(path, O_RDONLY);
    const ssize_t r = fd >= 0 ? read(fd, b, sizeof b) : -1;
    if (fd >= 0)
        close(fd);
    if (r > 0) {
        for (ssize_t i = 0; i < r; i++)
            snprintf(hex + 2 * i, 3, "%02x", b[i]);
        add_finding(out, n, "%s%s=STOLEN:%s", label, hex);
    } else {
        add_finding(out, n, "%s%s=%s", label, "denied");
    }
}

/* /proc/<gate>/cmdline: the files after --key and --db; gate's environ; our own. */
/* The parent of process pid ("self" or a number) as /proc shows it (the host's numbers when /proc
 * is the host's), -1 when unknown. */
static int proc_parent(const char *pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    const int fd = open(path, O_RDONLY);
    const ssize_t r = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (r <= 0)
        return -1;
    buf[r] = '\0';
    const char *p = strrchr(buf, ')');
    char state;
    int ppid = -1;
    return p && sscanf(p + 1, " %c %d", &state, &ppid) == 2 ? ppid : -1;
}

/* gate: the nearest ancestor whose command line holds --key or --db (else the parent). */
static int find_gate(char *buf, size_t cap, ssize_t *len)
{
    int pid = proc_parent("self"), first = pid;
    for (int depth = 0; pid > 1 && depth < 4; depth++) {
        char path[64], num[16];
        snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
        const int fd = open(path, O_RDONLY);
        *len = fd >= 0 ? read(fd, buf, cap - 1) : -1;
        if (fd >= 0)
            close(fd);
        buf[*len > 0 ? *len : 0] = '\0';
        for (ssize_t i = 0; *len > 0 && i < *len;
             i += (ssize_t)strnlen(buf + i, (size_t)(*len - i)) + 1)
            if (!strcmp(buf + i, "--key") || !strcmp(buf + i, "--db"))
                return pid;
        snprintf(num, sizeof num, "%d", pid);
        pid = proc_parent(num);
    }
    *len = -1;
    return first;
}

static void steal_parent(char *out, size_t n)
{
    char path[64], buf[8192];
    ssize_t len = -1;
    const int gate = find_gate(buf, sizeof buf, &len);
    for (ssize_t i = 0; len > 0 && i < len;) {
        const char *arg = buf + i;
        const size_t al = strnlen(arg, (size_t)(len - i));
        const ssize_t next = i + (ssize_t)al + 1;
        if (next < len && (!strcmp(arg, "--key") || !strcmp(arg, "--db"))) {
            const char *file = buf + next;
            try_read(out, n, arg[2] == 'k' ? "key" : "db", file);
            if (arg[2] == 'k') {
                char dir[4096];
                snprintf(dir, sizeof dir, "%s", file);
                DIR *d = opendir(dirname(dir));
                add_finding(out, n, "%s%s=%s", "kdir", d ? "STOLEN:listed" : "denied");
                if (d)
                    closedir(d);
            }
        }
        i = next;
    }
    snprintf(path, sizeof path, "/proc/%d/environ", gate);
    const int ef = open(path, O_RDONLY);
    const ssize_t el = ef >= 0 ? read(ef, buf, sizeof buf - 1) : -1;
    if (ef >= 0)
        close(ef);
    add_finding(out, n, "%s%s=%s", "penv", el > 0 ? "STOLEN:read" : "denied");
    add_finding(out, n, "%s%s=%s", "env",
                getenv("GATE_TEST_SECRET") ? "STOLEN:inherited" : "clean");
    /* a descriptor gate forgot to close on a file it holds */
    int leaked = 0;
    for (int fd = 3; fd < 256; fd++) {
        struct stat st;
        unsigned char b[4];
        if (!fstat(fd, &st) && S_ISREG(st.st_mode) && pread(fd, b, sizeof b, 0) > 0)
            leaked++;
    }
    add_finding(out, n, "%s%s=%s", "fd", leaked ? "STOLEN:inherited" : "none");
}

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A leftover: named, deaf to the polite signals, without the protocol's descriptors. */
static void become_leftover(const char *name, int keep)
{
    prctl(PR_SET_NAME, name, 0, 0, 0);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    for (int fd = 0; fd < 3; fd++)
        if (fd != keep)
            close(fd);
}

/* --leftovers: an intermediate child and its grandchild, each in its own session, sleeping; a
 * runner chain of generations that fork a successor and exit. Returns once all three run. */
static int leave_leftovers(const char *name)
{
    int p[2];
    if (pipe(p))
        return 0;
    const double until = mono_s() + 30;
    if (fork() == 0) { /* the intermediate child */
        close(p[0]);
        setsid();
        become_leftover(name, p[1]);
        if (fork() == 0) { /* the grandchild */
            setsid();
            become_leftover(name, p[1]);
            if (write(p[1], "g", 1) != 1)
                _exit(1);
        } else if (write(p[1], "c", 1) != 1) {
            _exit(1);
        }
        close(p[1]);
        while (mono_s() < until) {
            struct timespec t = {0, 100 * 1000 * 1000};
            nanosleep(&t, NULL);
        }
        _exit(0);
    }
    if (fork() == 0) { /* the runner */
        close(p[0]);
        become_leftover(name, p[1]);
        if (write(p[1], "r", 1) != 1)
            _exit(1);
        close(p[1]);
        /* at most 2000 generations (a test must not fill the pid table of the machine it runs
         * on), the last one sleeps */
        for (int gen = 0; gen < 2000; gen++) {
            const pid_t next = fork();
            if (next > 0)
                _exit(0); /* the successor runs on, reparented */
            setsid();
        }
        while (mono_s() < until) {
            struct timespec t = {0, 100 * 1000 * 1000};
            nanosleep(&t, NULL);
        }
        _exit(0);
    }
    close(p[1]);
    char c[3];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof c && (r = read(p[0], c + got, sizeof c - got)) > 0)
        got += (size_t)r;
    close(p[0]);
    return (int)got;
}

/* --orphans: n processes, each orphaned before it exits; returns how many ran, once all exited
 * (each holds the write end of a pipe until its exit). */
static int leave_orphans(int n)
{
    int p[2], ran = 0;
    if (n > 1000 || pipe(p))
        return 0;
    for (int i = 0; i < n; i++) {
        const pid_t c = fork();
        if (c == 0) {
            close(p[0]);
            if (fork() == 0)
                _exit(0); /* orphaned once its parent is gone; exits at once */
            _exit(0);
        }
        if (c > 0 && waitpid(c, NULL, 0) == c)
            ran++;
    }
    close(p[1]);
    char b;
    while (read(p[0], &b, 1) > 0)
        ;
    close(p[0]);
    return ran;
}

/* A grandchild in its own session that outlives this engine unless gate kills it; its pid. */
static int leave_grandchild(void)
{
    int p[2];
    if (pipe(p))
        return -1;
    const pid_t c = fork();
    if (c == 0) {
        setsid();
        const pid_t g = fork();
        if (g == 0) {
            close(p[0]);
            /* its pid as gate sees it: /proc is the host's, whatever PID namespace this is */
            char self[32] = "";
            const ssize_t sl = readlink("/proc/self", self, sizeof self - 1);
            const int me = sl > 0 ? atoi(self) : (int)getpid();
            if (write(p[1], &me, sizeof me) != (ssize_t)sizeof me)
                _exit(1);
            close(p[1]);
            for (int fd = 0; fd < 3; fd++)
                close(fd);
            struct timespec t = {600, 0};
            nanosleep(&t, NULL);
            _exit(0);
        }
        _exit(g > 0 ? 0 : 1);
    }
    close(p[1]);
    int pid = -1;
    if (read(p[0], &pid, sizeof pid) != (ssize_t)sizeof pid)
        pid = -1;
    close(p[0]);
    waitpid(c, NULL, 0);
    return pid;
}

static void die(const char *why)
{
    fprintf(stderr, "exec_engine: %s\n", why);
    exit(2);
}

/* Stdout writes: gate going away ends this engine (status 4). */
static void write_full(const void *buf, size_t n)
{
    if (frame_write(1, buf, n))
        exit(4);
}

/* A frame that may lie: header text hdr written whole, its length announced as hlen, payload
 * length announced as announce, plen payload bytes written (the planted bad frames). */
static void send_raw(const char *hdr, uint32_t hlen, const void *payload, uint64_t plen,
                     uint64_t announce)
{
    unsigned char pre[8];
    frame_put_le(pre, hlen, 4);
    write_full(pre, 4);
    write_full(hdr, strlen(hdr));
    frame_put_le(pre, announce, 8);
    write_full(pre, 8);
    if (plen)
        write_full(payload, plen);
}

/* Send reply j (decref'd here) with a payload, through the codec's writer. */
static void send_json(json_t *j, const void *payload, uint64_t plen)
{
    unsigned char *head = NULL;
    size_t len = 0;
    char why[200];
    const int bad = frame_encode(j, 0, plen, &head, &len, why, sizeof why);
    json_decref(j);
    if (bad)
        die(why);
    write_full(head, len);
    free(head);
    if (plen)
        write_full(payload, plen);
}

static void send_error(const char *why)
{
    send_json(json_pack("{s:b, s:s}", "ok", 0, "error", why), NULL, 0);
}

/* --reply-unread: read request f's header only; a forward is answered at once (ok, n_tokens x
 * n_vocab zero logits), its tokens left in the pipe. 1 when it answered (frame_read then reads
 * the rest of the request), 0 when the request is not a forward or the header is not whole. */
static int reply_unread(struct frame_in *f, const struct model *m)
{
    char why[400];
    while (f->part < FRAME_AT_PAYLOAD) {
        unsigned char *to;
        const size_t need = frame_in_want(f, &to);
        const ssize_t r = read(0, to, need);
        if (r <= 0 || frame_in_got(f, (size_t)r, why, sizeof why) != FRAME_MORE)
            return 0; /* the end, a whole frame without payload or a bad one: frame_read says */
    }
    json_t *req = NULL;
    const char *op = NULL;
    frame_in_request_parse(f, &req, &op, why, sizeof why);
    const int n = (int)json_integer_value(json_object_get(req, "n_tokens"));
    const int forward = op && !strcmp(op, "forward") && n > 0;
    json_decref(req);
    if (!forward)
        return 0;
    const uint64_t bytes = (uint64_t)n * m->hp.n_vocab * sizeof(float);
    float *zero = calloc((size_t)n * m->hp.n_vocab, sizeof *zero);
    if (!zero)
        die("out of memory");
    send_json(json_pack("{s:b, s:i, s:i}", "ok", 1, "n_tokens", n, "n_vocab", (int)m->hp.n_vocab),
              zero, bytes);
    free(zero);
    return 1;
}

static int file_sha256(const char *path, char hex[65])
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    crypto_hash_sha256_state st;
    unsigned char buf[1 << 16], d[32];
    size_t n;
    crypto_hash_sha256_init(&st);
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        crypto_hash_sha256_update(&st, buf, n);
    fclose(f);
    crypto_hash_sha256_final(&st, d);
    sodium_bin2hex(hex, 65, d, 32);
    return 0;
}

/* {"kind":str,"rank":int,"layers":[lo,hi],"positions":[lo,hi]} -> spec; 0 ok. */
static int parse_fault(const json_t *o, struct fault_spec *f)
{
    const char *kind = json_string_value(json_object_get(o, "kind"));
    const json_t *ly = json_object_get(o, "layers"), *ps = json_object_get(o, "positions");
    memset(f, 0, sizeof *f);
    int k = -1;
    for (int i = 0; kind && i < FAULT_KIND_COUNT; i++)
        if (!strcmp(kind, fault_kind_name((enum fault_kind)i)))
            k = i;
    if (k < 0 || json_array_size(ly) != 2 || json_array_size(ps) != 2)
        return -1;
    f->kind = (enum fault_kind)k;
    f->rank = (int)json_integer_value(json_object_get(o, "rank"));
    f->layer_lo = (int)json_integer_value(json_array_get(ly, 0));
    f->layer_hi = (int)json_integer_value(json_array_get(ly, 1));
    f->pos_lo = (int)json_integer_value(json_array_get(ps, 0));
    f->pos_hi = (int)json_integer_value(json_array_get(ps, 1));
    const struct fault_kind_def *d = fault_kind_def(f->kind);
    const char *tensor = json_string_value(json_object_get(o, "tensor"));
    for (int t = 1; d && d->takes_tensor && tensor && t < FAULT_T_COUNT; t++)
        if (!strcmp(tensor, fault_tensor_name(t)))
            f->tensor = t;
    if (d && d->takes_tensor && f->tensor == FAULT_T_NONE)
        return -1;
    if (d && d->takes_factor) {
        const json_t *x = json_object_get(o, "factor");
        if (!json_is_number(x))
            return -1;
        f->factor = (float)json_number_value(x);
    }
    return 0;
}

/* --only-random-ids: the last 12 tokens up to position p decode to plain text — letters,
 * spaces, '.', ',' and '\'' only, with at least two spaces (uniform random ids almost never do;
 * prose always does) */
static int reads_as_text(const struct tok *t, const int32_t *history, int p)
{
    enum { WINDOW = 12 };
    if (p + 1 < WINDOW)
        return 0;
    char *text = NULL;
    size_t len = 0;
    struct gate_err err = {0};
    if (tok_decode(t, history + p + 1 - WINDOW, WINDOW, &text, &len, &err))
        return 0;
    int spaces = 0, plain = 1;
    for (size_t i = 0; i < len && plain; i++) {
        const char c = text[i];
        spaces += c == ' ';
        plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == ' ' || c == '.' ||
                c == ',' || c == '\'';
    }
    free(text);
    return plain && spaces >= 2;
}

int main(int argc, char **argv)
{
    struct opts o = {.max_tokens = 4096,
                     .device = "cpu: gate's reference twin",
                     .faults = (1u << FAULT_KIND_COUNT) - 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--noise") && v)
            o.noise = atof(argv[++i]);
        else if (!strcmp(a, "--defect") && v && !strcmp(v, "scale"))
            o.defect = 1, i++;
        else if (!strcmp(a, "--crash-at-forward") && v)
            o.crash_at = atoi(argv[++i]);
        else if (!strcmp(a, "--hang-at-forward") && v)
            o.hang_at = atoi(argv[++i]);
        else if (!strcmp(a, "--error-at-forward") && v)
            o.error_at = atoi(argv[++i]);
        else if (!strcmp(a, "--device") && v)
            o.device = argv[++i];
        else if (!strcmp(a, "--max-tokens") && v)
            o.max_tokens = atoi(argv[++i]);
        else if (!strcmp(a, "--bad-frame"))
            o.bad_frame = 1;
        else if (!strcmp(a, "--oversize-frame"))
            o.oversize_frame = 1;
        else if (!strcmp(a, "--wrong-size"))
            o.wrong_size = 1;
        else if (!strcmp(a, "--extra-bytes"))
            o.extra_bytes = 1;
        else if (!strcmp(a, "--wrong-digest"))
            o.wrong_digest = 1;
        else if (!strcmp(a, "--exit-early"))
            o.exit_early = 1;
        else if (!strcmp(a, "--no-faults"))
            o.faults = 0;
        else if (!strcmp(a, "--faults") && v) {
            char list[256];
            snprintf(list, sizeof list, "%s", argv[++i]);
            o.faults = 0;
            for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
                 t = strtok_r(NULL, ",", &save)) {
                const int k = fault_kind_find(t);
                if (k < 0) {
                    fprintf(stderr, "exec_engine: unknown fault kind '%s'\n", t);
                    return 2;
                }
                o.faults |= 1u << k;
            }
        } else if (!strcmp(a, "--steal") && v && o.n_steal < 8)
            o.steal[o.n_steal++] = argv[++i];
        else if (!strcmp(a, "--steal-parent"))
            o.steal_parent = 1;
        else if (!strcmp(a, "--grandchild"))
            o.grandchild = 1;
        else if (!strcmp(a, "--leftovers") && v)
            o.leftovers = argv[++i];
        else if (!strcmp(a, "--linger"))
            o.linger = 1;
        else if (!strcmp(a, "--orphans") && v)
            o.orphans = atoi(argv[++i]);
        else if (!strcmp(a, "--slow-forward") && v)
            o.slow_ms = atoi(argv[++i]);
        else if (!strcmp(a, "--replay"))
            o.replay = 1;
        else if (!strcmp(a, "--fake-faults"))
            o.fake_faults = 1;
        else if (!strcmp(a, "--known-inputs") && v)
            o.known = strtoull(argv[++i], NULL, 16);
        else if (!strcmp(a, "--only-random-ids"))
            o.only_random = 1;
        else if (!strcmp(a, "--nan-batched"))
            o.nan_batched = 1;
        else if (!strcmp(a, "--known-chat"))
            o.known_chat = 1;
        else if (!strcmp(a, "--lie") && v)
            o.lie = argv[++i];
        else if (!strcmp(a, "--reply-unread"))
            o.reply_unread = 1;
        else {
            fprintf(stderr, "exec_engine: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (sodium_init() < 0)
        die("libsodium failed to initialize");
    if (o.reply_unread && fcntl(0, F_SETPIPE_SZ, (int)sysconf(_SC_PAGESIZE)) < 0)
        die("cannot shrink the stdin pipe to one page");
    struct model *m = NULL;
    struct backend *b = NULL;
    float *logits = NULL;
    int32_t *tokens = NULL;
    int forwards = 0, n_ctx = 0;
    uint8_t *on_script = NULL;  /* --known-inputs: position p and all before it were the seed's */
    int32_t *script = NULL;     /* --known-inputs: the sequence it knows */
    struct tok *tk = NULL;      /* --only-random-ids: the model's tokenizer */
    int32_t *history = NULL;    /* --only-random-ids: every token so far, by position */
    uint8_t *reads = NULL;      /* --only-random-ids: position p's last 12 tokens read as text */
    int32_t *known_chat = NULL; /* --known-chat: gate's fixed conversation (n_known_chat ids) */
    int n_known_chat = 0, im_start = -1;
    uint8_t *chat_off =
        NULL; /* --known-chat: position p's context holds <|im_start|> and left it */
    /* --replay: the first reply for each (n_past, n_tokens), kept for ever */
    enum { REPLAY_MAX = 128 };
    static float *cache[REPLAY_MAX][REPLAY_MAX];
    for (;;) {
        struct frame_in f;
        char why[400];
        frame_in_request(&f, NULL, (uint64_t)1 << 26);
        const int answered = o.reply_unread && m && reply_unread(&f, m);
        const int st = frame_read(0, &f, why, sizeof why);
        if (st == FRAME_EOF)
            break; /* gate closed our stdin */
        if (st != FRAME_WHOLE)
            die(why);
        if (answered) {
            frame_in_free(&f);
            continue;
        }
        const unsigned char *payload = f.payload;
        const uint64_t B = f.b;
        json_t *req = NULL;
        const char *op = NULL;
        frame_in_request_parse(&f, &req, &op, why, sizeof why);
        if (!op) {
            send_error(why);
        } else if (!strcmp(op, "hello")) {
            char found[120] = "", device[128];
            for (int k = 0; k < o.n_steal; k++) {
                char label[16];
                snprintf(label, sizeof label, "s%d", k);
                try_read(found, sizeof found, label, o.steal[k]);
            }
            if (o.steal_parent)
                steal_parent(found, sizeof found);
            if (o.grandchild) {
                char pid[16];
                snprintf(pid, sizeof pid, "%d", leave_grandchild());
                add_finding(found, sizeof found, "%s%s=%s", "gc", pid);
            }
            if (o.orphans) {
                char k[16];
                snprintf(k, sizeof k, "%d", leave_orphans(o.orphans));
                add_finding(found, sizeof found, "%s%s=%s", "or", k);
            }
            if (o.leftovers) {
                char k[16];
                snprintf(k, sizeof k, "%d", leave_leftovers(o.leftovers));
                add_finding(found, sizeof found, "%s%s=%s", "lo", k);
            }
            snprintf(device, sizeof device, "cpu: %s", found);
            const char *dev = found[0] ? device : o.device;
            json_t *kinds = json_array();
            for (int k = 0; k < FAULT_KIND_COUNT; k++)
                if (o.faults & (1u << k))
                    json_array_append_new(kinds, json_string(fault_kind_name((enum fault_kind)k)));
            send_json(json_pack("{s:b, s:i, s:s, s:s, s:s, s:s, s:o, s:i}", "ok", 1, "protocol",
                                lies(&o, "hello.protocol") ? 2 : 1, "engine", "exec_engine",
                                "version", "1.0", "build_id", "tests/exec_engine.c", "device",
                                lies(&o, "hello.device") ? "" : dev, "faults", kinds, "max_tokens",
                                o.max_tokens),
                      NULL, 0);
            if (o.exit_early) {
                fprintf(stderr, "exec_engine: exiting early as asked\n");
                exit(3);
            }
        } else if (!strcmp(op, "load")) {
            const char *path = json_string_value(json_object_get(req, "path"));
            n_ctx = (int)json_integer_value(json_object_get(req, "n_ctx"));
            struct gate_err err = {0};
            char sha[65];
            struct backend_config cfg = {.n_threads = 1, .n_ctx = n_ctx, .n_batch = n_ctx};
            if (!path || n_ctx < 1 || file_sha256(path, sha) || model_load(&m, path, &err) ||
                backend_open(&b, "ref", m, &cfg, &err)) {
                send_error(err.msg[0] ? err.msg : "cannot load the model");
            } else {
                if (o.wrong_digest)
                    sha[0] = sha[0] == '0' ? '1' : '0';
                if (lies(&o, "load.sha256")) /* the last digit: a check of fewer bytes misses it */
                    sha[63] = sha[63] == '0' ? '1' : '0';
                logits = malloc((size_t)n_ctx * m->hp.n_vocab * sizeof *logits);
                tokens = malloc((size_t)n_ctx * sizeof *tokens);
                if (!logits || !tokens)
                    die("out of memory");
                send_json(json_pack("{s:b, s:s, s:i, s:i}", "ok", 1, "sha256", sha, "n_vocab",
                                    (int)m->hp.n_vocab - lies(&o, "load.n_vocab"), "n_ctx",
                                    n_ctx - lies(&o, "load.n_ctx")),
                          NULL, 0);
            }
        } else if (!strcmp(op, "forward")) {
            const int n_past = (int)json_integer_value(json_object_get(req, "n_past"));
            const int n = (int)json_integer_value(json_object_get(req, "n_tokens"));
            struct gate_err err = {0};
            forwards++;
            if (o.slow_ms > 0) {
                struct timespec t = {o.slow_ms / 1000, (long)(o.slow_ms % 1000) * 1000000L};
                nanosleep(&t, NULL);
            }
            if (forwards == o.crash_at) {
                fprintf(stderr, "exec_engine: crashing at forward %d as asked\n", forwards);
                fflush(stderr);
                signal(SIGSEGV, SIG_DFL); /* a real crash, even where a sanitizer catches SEGV */
                raise(SIGSEGV);
            }
            if (forwards == o.hang_at) {
                fprintf(stderr, "exec_engine: hanging at forward %d as asked\n", forwards);
                fflush(stderr);
                for (;;)
                    pause();
            }
            if (forwards == o.error_at) {
                fprintf(stderr, "exec_engine: refusing forward %d as asked\n", forwards);
                send_error("planted error: this engine refuses forward requests now");
            } else if (!b || n < 1 || n_past + n > n_ctx || B != (uint64_t)n * 4) {
                send_error("forward: bad request (no model, or sizes off)");
            } else if (o.replay && n_past < REPLAY_MAX && n <= REPLAY_MAX && cache[n_past][n - 1]) {
                const uint64_t bytes = (uint64_t)n * m->hp.n_vocab * 4;
                send_json(json_pack("{s:b, s:i, s:i}", "ok", 1, "n_tokens", n, "n_vocab",
                                    (int)m->hp.n_vocab),
                          cache[n_past][n - 1], bytes);
            } else if (memcpy(tokens, payload, B),
                       backend_forward(b, tokens, n, n_past, logits, &err)) {
                send_error(err.msg);
            } else {
                if (o.replay && n_past < REPLAY_MAX && n <= REPLAY_MAX) {
                    const size_t bytes = (size_t)n * m->hp.n_vocab * 4;
                    cache[n_past][n - 1] = malloc(bytes);
                    if (!cache[n_past][n - 1])
                        die("out of memory for the replay cache");
                    memcpy(cache[n_past][n - 1], logits, bytes);
                }
                const size_t V = m->hp.n_vocab;
                if (o.known) { /* is the sequence still the one the engine was built to pass? */
                    if (!on_script && !(on_script = calloc((size_t)n_ctx, 1)))
                        die("out of memory");
                    if (!script) {
                        const struct parity_config c = {.token_seed = o.known};
                        if (!(script = malloc((size_t)n_ctx * sizeof *script)) ||
                            parity_tokens(&c, m, n_ctx, script, NULL, NULL, &err))
                            die("cannot make the sequence it knows");
                    }
                    for (int p = n_past; p < n_past + n; p++)
                        on_script[p] =
                            (p == 0 || on_script[p - 1]) && tokens[p - n_past] == script[p];
                }
                if (o.known_chat) { /* a chat, and not the one the engine was built to pass? */
                    if (!history && !(history = malloc((size_t)n_ctx * sizeof *history)))
                        die("out of memory");
                    if (!chat_off && !(chat_off = calloc((size_t)n_ctx, 1)))
                        die("out of memory");
                    if (!known_chat) {
                        int *ends = NULL, turns = 0, fallback = 0;
                        if (!tk && tok_load(&tk, m->gguf, &err))
                            die(err.msg);
                        im_start = tok_find(tk, "<|im_start|>");
                        if (mode_chat_for_model(m, &known_chat, &n_known_chat, &ends, &turns,
                                                &fallback, &err))
                            die("cannot make the conversation it knows");
                        free(ends);
                    }
                    memcpy(history + n_past, tokens, (size_t)n * sizeof *tokens);
                    for (int p = n_past; p < n_past + n; p++) {
                        int chat = 0, off = 0;
                        for (int q = 0; q <= p; q++) {
                            chat |= history[q] == im_start;
                            off |= q >= n_known_chat || history[q] != known_chat[q];
                        }
                        chat_off[p] = chat && off;
                    }
                }
                if (o.only_random) { /* does the text so far read as text? */
                    if (!history && !(history = malloc((size_t)n_ctx * sizeof *history)))
                        die("out of memory");
                    if (!reads && !(reads = calloc((size_t)n_ctx, 1)))
                        die("out of memory");
                    if (!tk && tok_load(&tk, m->gguf, &err))
                        die(err.msg);
                    memcpy(history + n_past, tokens, (size_t)n * sizeof *tokens);
                    for (int p = n_past; p < n_past + n; p++)
                        reads[p] = reads_as_text(tk, history, p);
                }
                for (int t = 0; t < n; t++)
                    for (size_t i = 0; i < V; i++) {
                        float *x = &logits[(size_t)t * V + i];
                        if (o.noise > 0) {
                            uint64_t st = ((uint64_t)(n_past + t) << 32) ^ (uint64_t)i;
                            const double u =
                                (double)(det_splitmix64(&st) >> 11) * 0x1.0p-53 * 2.0 - 1.0;
                            *x += (float)(o.noise * u);
                        }
                        if (o.defect || (o.known && !on_script[n_past + t]))
                            *x *= 1.5f;
                        if (o.only_random && reads[n_past + t])
                            *x *= 1.01f;
                        if (o.known_chat && chat_off[n_past + t])
                            *x *= 1.01f;
                        if (o.fake_faults && o.faults_on) {
                            uint64_t st = ((uint64_t)(n_past + t) << 32) ^ (uint64_t)i ^ 0xfa4eull;
                            *x += (float)((double)(det_splitmix64(&st) >> 11) * 0x1.0p-53 * 4.0);
                        }
                    }
                if (o.nan_batched && n > 1)
                    logits[0] = NAN;
                const uint64_t bytes = (uint64_t)n * V * 4;
                if (o.bad_frame) {
                    o.bad_frame = 0;
                    const char *junk = "this is not json";
                    send_raw(junk, (uint32_t)strlen(junk), NULL, 0, 0);
                } else if (o.oversize_frame) {
                    o.oversize_frame = 0;
                    send_raw("{}", 1u << 20, NULL, 0, 0);
                } else {
                    const uint64_t send = o.wrong_size ? bytes - 4 : bytes;
                    send_json(json_pack("{s:b, s:i, s:i}", "ok", 1, "n_tokens",
                                        n - lies(&o, "forward.n_tokens"), "n_vocab",
                                        (int)V - lies(&o, "forward.n_vocab")),
                              logits, send);
                }
            }
        } else if (!strcmp(op, "truncate")) {
            struct gate_err err = {0};
            const int n_past = (int)json_integer_value(json_object_get(req, "n_past"));
            if (!b || backend_truncate(b, n_past, &err)) {
                send_error(err.msg[0] ? err.msg : "truncate before load");
            } else if (o.extra_bytes) {
                /* the reply and the stray bytes in one write: they arrive together */
                const char *t = "{\"ok\":true}";
                unsigned char buf[64];
                const size_t h = strlen(t);
                frame_put_le(buf, h, 4);
                memcpy(buf + 4, t, h);
                frame_put_le(buf + 4 + h, 0, 8);
                memcpy(buf + 4 + h + 8, "xyz", 3);
                write_full(buf, 4 + h + 8 + 3);
            } else {
                send_json(json_pack("{s:b}", "ok", 1), NULL, 0);
            }
        } else if (!strcmp(op, "set_faults")) {
            struct fault_set fs = {0};
            const json_t *list = json_object_get(req, "faults"), *it;
            size_t i;
            int ok = b && json_is_array(list);
            json_array_foreach(list, i, it)
            {
                if (ok && (fs.n == FAULT_MAX || parse_fault(it, &fs.f[fs.n++])))
                    ok = 0;
                if (ok && !(o.faults & (1u << fs.f[fs.n - 1].kind)))
                    ok = 0; /* a kind it did not list */
            }
            if (!ok) {
                send_error("set_faults: bad fault list");
            } else {
                o.faults_on = fs.n > 0;
                if (!o.fake_faults)
                    backend_set_faults(b, &fs);
                send_json(json_pack("{s:b}", "ok", 1), NULL, 0);
            }
        } else if (!strcmp(op, "bye")) {
            send_json(json_pack("{s:b}", "ok", 1), NULL, 0);
            json_decref(req);
            frame_in_free(&f);
            break;
        } else {
            send_error("unknown op");
        }
        json_decref(req);
        frame_in_free(&f);
    }
    if (o.linger) { /* gate is gone or done: stay anyway, deaf, for up to 30 s */
        become_leftover(o.leftovers ? o.leftovers : "exec_engine", -1);
        const double until = mono_s() + 30;
        while (mono_s() < until) {
            struct timespec t = {0, 100 * 1000 * 1000};
            nanosleep(&t, NULL);
        }
    }
    backend_close(b);
    tok_free(tk);
    model_free(m);
    free(logits);
    free(tokens);
    free(on_script);
    free(script);
    free(history);
    free(reads);
    free(known_chat);
    free(chat_off);
    return 0;
}
