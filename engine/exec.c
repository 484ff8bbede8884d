/* exec.c — the `exec` backend: a child process speaking gate-exec version 1 (docs/exec.md).
 *
 * One struct exec_session per cell owns the child (a struct child, base/child.h: pid, three
 * non-blocking pipes, the stderr tail) and the protocol's state (the handshake, the loaded
 * context, the cache length, the faults sent); a struct exec_backend is a view of it between
 * backend_open() and backend_close(). This file keeps the protocol; starting, talking to and
 * ending the process are base/child.c's. Every request goes through exchange(): one frame
 * written, one frame read through the frame codec (base/frame.h, shared with the engines), both
 * under the engine's deadline, the reply's header bounded and parsed before its payload size is
 * accepted, the payload read straight into the caller's buffer. Any failure goes through fail():
 * the child is ended (child_end: stdin closed, SIGTERM, SIGKILL after EXEC_GRACE_S) and reaped,
 * and the message carries its exit status or signal and its stderr tail, escaped.
 * The child is started by spawn(): the engine binary resolved and hashed against the ladder's
 * pin, its pinned files checked, a Landlock ruleset built (or the start refused on a host that
 * cannot isolate it), then isolate_spawn() (engine/isolate.h) — its own PID namespace (gate's
 * init as PID 1: everything the engine starts dies with it), minimal environment, no inherited
 * descriptors, no capabilities, its own process group. Every failure, and the session's end,
 * kills the group (in a namespace: its init, so the whole namespace) and sweeps the orphans
 * (gate is a child subreaper: the fallback where no namespace can be made).
 * Invariants: s->ch.pid != 0 exactly while a child is alive and unreaped (and registered with
 * isolate_register, so the sweep spares it); the pipes are close-on-exec in gate, so a second
 * engine never inherits the first's; SIGPIPE is ignored once a child has been started (a write
 * to a dead child is EPIPE, not the end of gate: child_start); the engine's time over the session
 * never exceeds cell_timeout_s (every exchange's deadline is cut to what is left), and a failure no
 * new child can cure (a pin, isolation, the budget) is kept in s->fatal and repeated.
 * Start reading: exchange(), then exec_open().
 */
#include "engine/exec.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "base/child.h"
#include "base/frame.h"
#include "engine/backend.h"
#include "engine/isolate.h"
#include "engine/pin.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gate-exec payloads are little-endian int32/float32, copied as they lie in memory"
#endif

/* The exec backend's session (struct backend_session, engine/backend.h): one per cell, opened
 * and closed through backend_session_open / _close, handed to each open in
 * backend_config.session. */
struct exec_session {
    struct backend_session base; /* first: a struct exec_session * is a struct backend_session * */
    const struct exec_engine *e; /* borrowed (the ladder's) */
    char *model_path;            /* absolute */
    char sha256[65];             /* the pinned digest the engine must report */
    struct child ch; /* the engine's process (in a PID namespace: its init), pipes, stderr tail;
                      * ch.spawns counts the children started */
    struct exec_hello hello;
    int have_hello;
    int loaded_ctx;        /* n_ctx the child loaded with (0: not loaded) */
    int n_past;            /* positions in the child's cache, as gate counts them */
    int attached;          /* a backend is open on this session */
    struct fault_set sent; /* the child's active faults, as last sent */
    /* isolation and identity (engine/isolate.h) */
    char exe[4096];        /* argv[0] as resolved, what execve runs */
    char exe_sha256[65];   /* its digest, measured before every start */
    char isolation[300];   /* "landlock ABI N" or "none: REASON" */
    char containment[160]; /* how its descendants are contained (isolate_spawn's how) */
    char scratch[512];     /* the private scratch folder (HOME, TMPDIR), removed at the end */
    char env_home[600], env_tmp[600];
    double engine_s; /* seconds spent waiting for the engine (the cell's budget) */
    char fatal[900]; /* a failure no new child can cure; every later open repeats it */
    int fatal_code;
};

struct exec_backend {
    struct backend base; /* first: a struct exec_backend * is a struct backend * */
    struct exec_session *s;
};

/* ---- small helpers --------------------------------------------------------------------------- */

_Static_assert(EXEC_STDERR_TAIL == CHILD_TAIL, "the stderr tail exec.h promises is base/child's");

unsigned exec_support_bit(const char *word)
{
    static const struct {
        const char *name;
        unsigned bit;
    } WORDS[] = {{"decode", EXEC_SUPPORTS_DECODE},
                 {"prefill", EXEC_SUPPORTS_PREFILL},
                 {"chat", EXEC_SUPPORTS_CHAT},
                 {"faults", EXEC_SUPPORTS_FAULTS}};
    for (size_t i = 0; word && i < sizeof WORDS / sizeof WORDS[0]; i++)
        if (!strcmp(word, WORDS[i].name))
            return WORDS[i].bit;
    return 0;
}

/* The child was reaped (child_end): it is no longer a live engine child, and every orphan it
 * left is killed and reaped (the subreaper fallback; in a PID namespace the kernel did it). */
static void engine_reaped(void *ctx, pid_t pid)
{
    (void)ctx;
    isolate_unregister(pid);
    isolate_sweep();
}

/* End the child (child_end: stdin closed, SIGTERM to its group, SIGKILL after the grace period,
 * always reaped, its orphans swept) and forget the protocol state it held. status (n bytes) says
 * how it ended. */
static void end_child(struct exec_session *s, char *status, size_t n)
{
    child_end(&s->ch, EXEC_GRACE_S, status, n);
    s->have_hello = 0;
    s->loaded_ctx = 0;
    s->n_past = 0;
    memset(&s->sent, 0, sizeof s->sent);
}

/* The failure of request `what`: end the child and fill err (ERR_RUNTIME) with the engine, the
 * request, the reason, how the child ended and the last of its stderr. */
static int fail(struct exec_session *s, const char *what, struct gate_err *err, const char *fmt,
                ...)
{
    char reason[512], status[160], tail[420];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    end_child(s, status, sizeof status);
    /* the message is bounded (struct gate_err): quote the end of the tail, where the cause is */
    const char *t;
    const size_t keep = child_tail(&s->ch, 200, &t);
    frame_escape(t, keep, tail, sizeof tail);
    return err_set(err, ERR_RUNTIME, "exec engine '%s' (%s): %s; %s; stderr: \"%s%s\"", s->e->name,
                   what, reason, status, keep < s->ch.tail_len ? "..." : "", tail);
}

/* ---- starting a child ------------------------------------------------------------------------ */

/* A failure that no new child can cure (a pin that does not match, no isolation, the cell's time
 * spent): recorded so every later open of the cell gets the same answer without starting
 * anything. */
static int fatal(struct exec_session *s, struct gate_err *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->fatal, sizeof s->fatal, fmt, ap);
    va_end(ap);
    s->fatal_code = code;
    return err_set(err, code, "%s", s->fatal);
}

/* The child's environment: the fixed minimum, then the ladder's entries (which win for a name
 * they share). Pointers into s->env_buf; NULL-terminated. */
static void build_env(struct exec_session *s, char **envp)
{
    static const char *const FIXED[] = {"PATH=" ISOLATE_DEFAULT_PATH, "LANG=C.UTF-8", NULL};
    int n = 0;
    for (int i = 0; FIXED[i]; i++) {
        const size_t k = strcspn(FIXED[i], "=") + 1;
        int overridden = 0;
        for (int j = 0; j < s->e->n_env; j++)
            overridden |= !strncmp(s->e->env[j], FIXED[i], k);
        if (!overridden)
            envp[n++] = (char *)FIXED[i];
    }
    snprintf(s->env_home, sizeof s->env_home, "HOME=%s", s->scratch);
    snprintf(s->env_tmp, sizeof s->env_tmp, "TMPDIR=%s", s->scratch);
    envp[n++] = s->env_home;
    envp[n++] = s->env_tmp;
    for (int j = 0; j < s->e->n_env; j++)
        envp[n++] = s->e->env[j];
    envp[n] = NULL;
}

int exec_engine_check_pins(const struct exec_engine *e, char *exe, size_t exe_n,
                           char exe_sha256[65], struct gate_err *err)
{
    const char *path_env = NULL;
    for (int j = 0; j < e->n_env; j++)
        if (!strncmp(e->env[j], "PATH=", 5))
            path_env = e->env[j] + 5;
    if (isolate_resolve(e->argv[0], path_env, exe, exe_n))
        return err_set(err, ERR_RUNTIME,
                       "exec engine '%s': cannot start '%s': no executable of that name in the"
                       " engine's PATH (%s)",
                       e->name, e->argv[0], path_env ? path_env : ISOLATE_DEFAULT_PATH);
    struct pinned pf = {.fd = -1};
    struct gate_err why = {0};
    if (pin_open_bounded(exe, NULL, PIN_MAX_SIZE, &pf, &why))
        return err_set(err, ERR_RUNTIME, "exec engine '%s': cannot start '%s': %s", e->name, exe,
                       why.msg);
    snprintf(exe_sha256, 65, "%s", pf.sha256);
    pin_close(&pf);
    if (e->sha256[0] && strcmp(e->sha256, exe_sha256))
        return err_set(err, ERR_RUNTIME,
                       "exec engine '%s': the engine binary '%s' has SHA-256 %s but the ladder"
                       " pins %s: it is not the engine this ladder gates (nothing was started)",
                       e->name, exe, exe_sha256, e->sha256);
    for (int i = 0; i < e->n_files; i++) {
        memset(&why, 0, sizeof why);
        if (pin_open_bounded(e->files[i].path, e->files[i].sha256, PIN_MAX_SIZE, &pf, &why))
            return err_set(err, ERR_RUNTIME,
                           "exec engine '%s': pinned file: %s (nothing was started)", e->name,
                           why.msg);
        pin_close(&pf);
    }
    return 0;
}

/* Resolve and hash the engine binary and its pinned files (exec_engine_check_pins, the check
 * `gate ladder check` makes too); a refusal is fatal for the session. */
static int check_pins(struct exec_session *s, struct gate_err *err)
{
    struct gate_err e = {0};
    const int rc = exec_engine_check_pins(s->e, s->exe, sizeof s->exe, s->exe_sha256, &e);
    return rc ? fatal(s, err, rc, "%s", e.msg) : 0;
}

/* The Landlock ruleset for this engine (*fd -1 under `isolation: none`), or the refusal of a
 * host that cannot isolate it. */
static int sandbox(struct exec_session *s, int *fd, struct gate_err *err)
{
    const struct exec_engine *e = s->e;
    char why[200];
    *fd = -1;
    const int abi = isolate_landlock_abi(why, sizeof why);
    if (e->isolation_none) {
        snprintf(s->isolation, sizeof s->isolation, "none: %s", e->reason);
        return 0;
    }
    if (abi < 1)
        return fatal(s, err, ERR_ENV,
                     "exec engine '%s': this host cannot isolate the engine (%s); gate does not"
                     " run an engine it cannot isolate unless the ladder's engine entry says"
                     " `isolation: none` with a `reason`",
                     e->name, why);
    const char *read[2 * EXEC_PATHS_MAX + 2], *rw[EXEC_PATHS_MAX + 1];
    int nr = 0, nw = 0;
    read[nr++] = s->model_path;
    for (int i = 0; i < e->n_files; i++)
        read[nr++] = e->files[i].path;
    for (int i = 0; i < e->n_allow; i++)
        read[nr++] = e->allow[i];
    read[nr] = NULL;
    for (int i = 0; i < e->n_devices; i++)
        rw[nw++] = e->devices[i];
    rw[nw] = NULL;
    const struct isolate_spec sp = {.exe = s->exe, .read = read, .rw = rw, .scratch = s->scratch};
    struct gate_err why2 = {0};
    if (isolate_prepare(&sp, abi, fd, &why2))
        return fatal(s, err, why2.code, "exec engine '%s': %s", e->name, why2.msg);
    snprintf(s->isolation, sizeof s->isolation, "landlock ABI %d", abi);
    return 0;
}

/* child_start's starter: the sandboxed start (isolate_spawn) of the engine, registered as a
 * live engine child so the sweep spares it. */
struct start_ctx {
    struct exec_session *s;
    int ruleset;   /* the Landlock ruleset (-1: none) */
    char **envp;   /* build_env's */
    char how[160]; /* isolate_spawn's containment */
};

static pid_t start_isolated(void *ctx, const struct child_ends *ends)
{
    struct start_ctx *sc = ctx;
    const struct isolate_child c = {.in_fd = ends->in_fd,
                                    .out_fd = ends->out_fd,
                                    .err_fd = ends->err_fd,
                                    .report_fd = ends->report_fd,
                                    .ruleset_fd = sc->ruleset,
                                    .path = sc->s->exe,
                                    .argv = sc->s->e->argv,
                                    .envp = sc->envp};
    const pid_t pid = isolate_spawn(&c, ends->status_fd, sc->how, sizeof sc->how);
    if (pid > 0) { /* (child_start makes it a group at once, as the child itself does) */
        isolate_register(pid);
        snprintf(sc->s->containment, sizeof sc->s->containment, "%s", sc->how);
    }
    return pid;
}

static int spawn(struct exec_session *s, struct gate_err *err)
{
    int rc = 0;
    if (s->fatal[0])
        return err_set(err, s->fatal_code, "%s", s->fatal);
    isolate_guard_self();
    if (!s->scratch[0] && (rc = isolate_scratch_new(s->scratch, sizeof s->scratch, err)))
        return rc;
    struct start_ctx sc = {.s = s, .ruleset = -1};
    if ((rc = check_pins(s, err)) || (rc = sandbox(s, &sc.ruleset, err)))
        return rc;
    char *envp[EXEC_ENV_MAX + 8];
    build_env(s, envp);
    sc.envp = envp;
    /* the status pipe: in a PID namespace, its init reports how the engine itself ended */
    const struct child_spec sp = {.start = start_isolated, .ctx = &sc, .want_status = 1};
    int step = 0, step_errno = 0;
    const int st = child_start(&s->ch, &sp, &step, &step_errno);
    if (st < 0)
        rc = err_set(err, ERR_ENV, "exec engine '%s': cannot start a child: %s", s->e->name,
                     strerror(errno));
    else if (st > 0)
        rc = err_set(err, ERR_RUNTIME, "exec engine '%s': cannot start '%s': %s failed: %s",
                     s->e->name, s->exe, isolate_step_name(step), strerror(step_errno));
    if (sc.ruleset >= 0)
        close(sc.ruleset);
    return rc;
}

/* ---- one exchange ---------------------------------------------------------------------------- */

/* The engine's time budget over the session, seconds. */
static double cell_budget(const struct exec_session *s)
{
    return s->e->cell_timeout_s > 0 ? s->e->cell_timeout_s : EXEC_CELL_TIMEOUT_DEFAULT;
}

int exec_reply_decode(const void *buf, size_t len, uint64_t dst_len, json_t **hdr,
                      const void **payload, size_t *used, struct gate_err *err)
{
    /* the reader exchange() runs over the pipe (base/frame.h), fed from memory; the payload is
     * not copied: it is handed out where it lies in buf */
    static const char *const PART[] = {"header-length", "header", "payload-length"};
    const unsigned char *p = buf;
    struct frame_in f;
    char why[400];
    size_t at = 0;
    int rc = 0;
    if (hdr)
        *hdr = NULL;
    if (payload)
        *payload = NULL;
    if (used)
        *used = 0;
    frame_in_reply(&f, NULL, dst_len);
    while (f.part < FRAME_AT_PAYLOAD) {
        unsigned char *to;
        const size_t need = frame_in_want(&f, &to);
        if (len - at < need) {
            rc = err_set(err, ERR_RUNTIME, "reply cut short: %zu of %llu %s bytes",
                         (size_t)f.got + (len - at), (unsigned long long)(f.got + need),
                         PART[f.part]);
            goto out;
        }
        memcpy(to, p + at, need);
        at += need;
        if (frame_in_got(&f, need, why, sizeof why) < 0) {
            rc = err_set(err, ERR_RUNTIME, "%s", why);
            goto out;
        }
    }
    if (len - at < f.b) {
        rc = err_set(err, ERR_RUNTIME, "reply cut short: %zu of %llu payload bytes", len - at,
                     (unsigned long long)f.b);
        goto out;
    }
    if (payload)
        *payload = p + at;
    if (used)
        *used = at + (size_t)f.b;
    if (hdr)
        *hdr = frame_in_take_json(&f);
out:
    frame_in_free(&f);
    return rc;
}

/* Write request `req` (+ payload, plen bytes) and read one reply: *reply gets its header (the
 * caller decrefs), the payload goes to dst, and must be exactly dst_len bytes when the reply is
 * ok (0 for every op but forward) and 0 when it is an error. An error reply, a broken frame, EOF
 * or the deadline ends the child (fail()). */
static int exchange(struct exec_session *s, const char *what, json_t *req, const void *payload,
                    uint64_t plen, json_t **reply, void *dst, uint64_t dst_len,
                    struct gate_err *err)
{
    *reply = NULL;
    if (!s->ch.pid)
        return err_set(err, ERR_RUNTIME, "exec engine '%s' (%s): no engine is running", s->e->name,
                       what);
    isolate_reap_orphans(); /* the subreaper fallback: no zombie pile while the cell runs */
    unsigned char *wbuf = NULL;
    size_t wlen = 0;
    char why[400];
    if (frame_encode(req, 0, plen, &wbuf, &wlen, why, sizeof why))
        return fail(s, what, err, "the request: %s", why);
    size_t woff = 0;
    uint64_t poff = 0;
    /* the reply, through the frame codec's reader: each length checked as it arrives */
    struct frame_in in;
    frame_in_reply(&in, dst, dst_len);
    int whole = 0, rc = 0;
    /* one deadline per exchange, and never past the engine's time budget for the cell */
    const double t0 = child_now(), budget = cell_budget(s) - s->engine_s;
    const int by_budget = budget < s->e->timeout_s;
    const double deadline = t0 + (by_budget ? budget : s->e->timeout_s);
    int charged = 0;
    while (!whole) {
        const int writing = woff < wlen || poff < plen;
        const double left = deadline - child_now();
        if (left <= 0 && by_budget) {
            s->engine_s += child_now() - t0;
            charged = 1;
            rc = fail(s, what, err,
                      "the engine used up the cell's time budget (cell_timeout_s %g: %.1f s"
                      " spent waiting for it over the cell)",
                      cell_budget(s), s->engine_s);
            snprintf(s->fatal, sizeof s->fatal,
                     "exec engine '%s' (%s): the engine used up the cell's time budget"
                     " (cell_timeout_s %g); nothing more is started for this cell",
                     s->e->name, what, cell_budget(s));
            s->fatal_code = ERR_RUNTIME;
            goto out;
        }
        if (left <= 0) {
            rc = fail(s, what, err,
                      "no complete reply within the timeout of %g s (%s, %llu reply bytes read)",
                      s->e->timeout_s,
                      writing ? "the request was not fully written" : "request sent",
                      (unsigned long long)frame_in_bytes(&in));
            goto out;
        }
        /* wake at least every 0.1 s to reap exited orphans (the subreaper fallback); stderr goes
         * to the tail meanwhile */
        int readable = 0, writable = 0;
        const int pr = child_poll(&s->ch, writing, left > 0.1 ? 100 : (int)(left * 1000.0) + 1,
                                  &readable, &writable);
        isolate_reap_orphans();
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0) {
            rc = fail(s, what, err, "poll failed: %s", strerror(errno));
            goto out;
        }
        if (!readable) {
            /* write only when there is nothing to read: an engine that answered early (an error
             * reply, then exit) is heard before its closed stdin is */
            if (writing && writable) {
                long w;
                if (woff < wlen)
                    w = child_write(&s->ch, wbuf + woff, wlen - woff);
                else
                    w = child_write(&s->ch, (const unsigned char *)payload + poff,
                                    (size_t)(plen - poff < (1u << 20) ? plen - poff : (1u << 20)));
                if (w < 0) {
                    rc = fail(s, what, err,
                              "cannot write the request: %s (the engine closed its stdin)",
                              strerror(errno));
                    goto out;
                }
                if (w > 0 && woff < wlen)
                    woff += (size_t)w;
                else if (w > 0)
                    poff += (uint64_t)w;
            }
            continue;
        }
        /* read as much of the current part as is there */
        unsigned char *to;
        const size_t need = frame_in_want(&in, &to);
        const long r = child_read(&s->ch, to, need < (1u << 20) ? need : (1u << 20));
        if (r == 0) /* nothing there after all */
            continue;
        if (r < 0) {
            rc =
                fail(s, what, err, "the engine closed its stdout %s",
                     frame_in_bytes(&in) == 0 ? "instead of replying" : "in the middle of a reply");
            goto out;
        }
        const int st = frame_in_got(&in, (size_t)r, why, sizeof why);
        if (st < 0) {
            rc = fail(s, what, err, "%s", why);
            goto out;
        }
        whole = st == FRAME_WHOLE;
    }
    if (woff < wlen || poff < plen) {
        rc = fail(s, what, err, "the engine replied before reading the whole request");
        goto out;
    }
    /* one reply per request: bytes already waiting behind it would be read as the next reply */
    unsigned char extra;
    int more = 0;
    if (child_poll(&s->ch, 0, 0, &more, NULL) == 1 && more && child_read(&s->ch, &extra, 1) == 1) {
        rc = fail(s, what, err, "the engine wrote more than one reply (bytes follow its reply)");
        goto out;
    }
    *reply = frame_in_take_json(&in);
out:
    if (!charged)
        s->engine_s += child_now() - t0;
    frame_in_free(&in);
    free(wbuf);
    return rc;
}

/* Integer field k of reply r in [lo, hi], or a failure naming it. */
static int reply_int(struct exec_session *s, const char *what, const json_t *r, const char *k,
                     long long lo, long long hi, long long *out, struct gate_err *err)
{
    const json_t *v = json_object_get(r, k);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return fail(s, what, err, "reply field \"%s\" must be an integer in %lld..%lld", k, lo, hi);
    *out = json_integer_value(v);
    return 0;
}

/* Non-empty string field k of reply r, at most n-1 bytes, no NUL. */
static int reply_str(struct exec_session *s, const char *what, const json_t *r, const char *k,
                     char *out, size_t n, struct gate_err *err)
{
    const json_t *v = json_object_get(r, k);
    const char *t = json_string_value(v);
    if (!t || !*t || json_string_length(v) != strlen(t) || strlen(t) >= n)
        return fail(s, what, err,
                    "reply field \"%s\" must be a non-empty string of at most %zu"
                    " bytes",
                    k, n - 1);
    snprintf(out, n, "%s", t);
    return 0;
}

/* ---- the session's requests ------------------------------------------------------------------ */

static int do_hello(struct exec_session *s, struct gate_err *err)
{
    struct exec_hello *h = &s->hello;
    json_t *req = json_pack("{s:s, s:i}", "op", "hello", "protocol", EXEC_PROTOCOL), *r = NULL;
    long long v = 0;
    int rc = exchange(s, "hello", req, NULL, 0, &r, NULL, 0, err);
    json_decref(req);
    if (rc)
        return rc;
    memset(h, 0, sizeof *h);
    const json_t *proto = json_object_get(r, "protocol");
    if (!json_is_integer(proto) || json_integer_value(proto) != EXEC_PROTOCOL) {
        rc = fail(s, "hello", err, "the engine speaks gate-exec %s%lld, gate speaks %d",
                  json_is_integer(proto) ? "" : "(no protocol number) ",
                  json_is_integer(proto) ? (long long)json_integer_value(proto) : 0LL,
                  EXEC_PROTOCOL);
        goto out;
    }
    if ((rc = reply_str(s, "hello", r, "engine", h->engine, sizeof h->engine, err)) ||
        (rc = reply_str(s, "hello", r, "version", h->version, sizeof h->version, err)) ||
        (rc = reply_str(s, "hello", r, "build_id", h->build_id, sizeof h->build_id, err)) ||
        (rc = reply_str(s, "hello", r, "device", h->device, sizeof h->device, err)) ||
        (rc = reply_int(s, "hello", r, "max_tokens", 1, 1 << 24, &v, err)))
        goto out;
    if (s->e->build_id[0] && strcmp(h->build_id, s->e->build_id)) {
        char q[300];
        frame_escape(h->build_id, strlen(h->build_id), q, sizeof q);
        snprintf(s->fatal, sizeof s->fatal,
                 "exec engine '%s' (hello): the engine reports build_id \"%s\" but the ladder"
                 " pins \"%s\": it is not the engine build this ladder gates",
                 s->e->name, q, s->e->build_id);
        s->fatal_code = ERR_RUNTIME;
        rc = fail(s, "hello", err,
                  "the engine reports build_id \"%s\" but the ladder pins"
                  " \"%s\"",
                  q, s->e->build_id);
        goto out;
    }
    h->max_tokens = (int)v;
    const json_t *fl = json_object_get(r, "faults"), *it;
    size_t i;
    if (!json_is_array(fl)) {
        rc = fail(s, "hello", err, "reply field \"faults\" must be a list of fault kind names");
        goto out;
    }
    json_array_foreach(fl, i, it)
    {
        const char *name = json_string_value(it);
        int kind = -1;
        for (int k = 0; name && k < FAULT_KIND_COUNT; k++)
            if (!strcmp(name, fault_kind_name((enum fault_kind)k)))
                kind = k;
        if (kind < 0) {
            char q[80];
            frame_escape(name ? name : "(not a string)", name ? strlen(name) : 14, q, sizeof q);
            rc = fail(s, "hello", err,
                      "the engine lists fault kind \"%s\", which gate does not know", q);
            goto out;
        }
        h->faults |= 1u << kind;
    }
    s->have_hello = 1;
out:
    json_decref(r);
    return rc;
}

static int do_load(struct exec_session *s, int n_ctx, uint32_t n_vocab, struct gate_err *err)
{
    json_t *req = json_pack("{s:s, s:s, s:i}", "op", "load", "path", s->model_path, "n_ctx", n_ctx);
    json_t *r = NULL;
    char sha[80];
    long long v = 0, ctx = 0;
    int rc = exchange(s, "load", req, NULL, 0, &r, NULL, 0, err);
    json_decref(req);
    if (rc)
        return rc;
    if ((rc = reply_str(s, "load", r, "sha256", sha, sizeof sha, err)) ||
        (rc = reply_int(s, "load", r, "n_vocab", 1, INT32_MAX, &v, err)) ||
        (rc = reply_int(s, "load", r, "n_ctx", 1, INT32_MAX, &ctx, err)))
        goto out;
    if (strcmp(sha, s->sha256)) {
        char q[120];
        frame_escape(sha, strlen(sha), q, sizeof q);
        rc = fail(s, "load", err,
                  "the engine loaded a file with SHA-256 \"%s\" but the ladder pins %s: it did"
                  " not load the model under test",
                  q, s->sha256);
    } else if ((uint32_t)v != n_vocab)
        rc = fail(s, "load", err, "the engine reports n_vocab %lld but the model has %u", v,
                  n_vocab);
    else if (ctx < n_ctx)
        rc = fail(s, "load", err, "the engine loaded a context of %lld positions, gate asked %d",
                  ctx, n_ctx);
    else
        s->loaded_ctx = n_ctx;
out:
    json_decref(r);
    return rc;
}

/* A request whose reply is {"ok":true} and nothing else. */
static int simple(struct exec_session *s, const char *what, json_t *req, struct gate_err *err)
{
    json_t *r = NULL;
    int rc = exchange(s, what, req, NULL, 0, &r, NULL, 0, err);
    json_decref(req);
    json_decref(r);
    return rc;
}

static int do_truncate(struct exec_session *s, int n_past, struct gate_err *err)
{
    char what[48];
    snprintf(what, sizeof what, "truncate n_past=%d", n_past);
    int rc = simple(s, what, json_pack("{s:s, s:i}", "op", "truncate", "n_past", n_past), err);
    if (!rc)
        s->n_past = n_past;
    return rc;
}

/* Make the child's faults equal fs: set_faults when they differ from what was last sent. */
static int sync_faults(struct exec_session *s, const struct fault_set *fs, struct gate_err *err)
{
    if (fs->n == s->sent.n && !memcmp(fs->f, s->sent.f, (size_t)fs->n * sizeof fs->f[0]))
        return 0;
    json_t *list = json_array();
    for (int i = 0; i < fs->n; i++) {
        const struct fault_spec *f = &fs->f[i];
        if (!(s->hello.faults & (1u << f->kind))) {
            json_decref(list);
            return err_set(err, ERR_RUNTIME,
                           "exec engine '%s' (set_faults): the engine cannot inject %s (its hello"
                           " lists the fault kinds it can inject; list the kinds it takes in the"
                           " ladder's engine entry, `faults: [...]`, and the others are falsified"
                           " by proxy)",
                           s->e->name, fault_kind_name(f->kind));
        }
        if (s->e->faults && !(s->e->faults & (1u << f->kind))) {
            json_decref(list);
            return err_set(err, ERR_RUNTIME,
                           "exec engine '%s' (set_faults): the ladder does not declare that the"
                           " engine injects %s (its `faults:` list)",
                           s->e->name, fault_kind_name(f->kind));
        }
        json_t *o = json_pack("{s:s, s:i, s:[i,i], s:[i,i]}", "kind", fault_kind_name(f->kind),
                              "rank", f->rank, "layers", f->layer_lo, f->layer_hi, "positions",
                              f->pos_lo, f->pos_hi);
        const struct fault_kind_def *d = fault_kind_def(f->kind);
        if (d && d->takes_tensor) /* scale: the tensor's name without blk.N. (layers scope it) */
            json_object_set_new(o, "tensor", json_string(fault_tensor_name(f->tensor)));
        if (d && d->takes_factor)
            json_object_set_new(o, "factor", json_real((double)f->factor));
        json_array_append_new(list, o);
    }
    int rc =
        simple(s, "set_faults", json_pack("{s:s, s:o}", "op", "set_faults", "faults", list), err);
    if (!rc)
        s->sent = *fs;
    return rc;
}

/* ---- the session ----------------------------------------------------------------------------- */

static int session_open(struct backend_session **out, const struct backend_session_config *cfg,
                        struct gate_err *err)
{
    *out = NULL;
    const struct exec_engine *e = cfg->engine;
    const char *model_path = cfg->model_path, *model_sha256 = cfg->model_sha256;
    if (!model_path)
        return err_set(err, ERR_INPUT, "exec engine '%s': no model file to load",
                       e ? e->name : "?");
    if (!e || e->argc < 1 || e->argc > EXEC_ARGV_MAX || !e->argv[0] || e->argv[e->argc] ||
        !(e->timeout_s > 0))
        return err_set(err, ERR_INPUT,
                       "exec engine '%s' needs 1..%d arguments (argv) and a timeout > 0",
                       e ? e->name : "?", EXEC_ARGV_MAX);
    if (!model_sha256 || strlen(model_sha256) != 64 ||
        strspn(model_sha256, "0123456789abcdef") != 64)
        return err_set(err, ERR_INPUT,
                       "exec engine '%s': the model digest must be 64 lower-case"
                       " hex digits",
                       e->name);
    struct exec_session *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(err, ERR_ENV, "exec: out of memory for the engine session");
    s->e = e;
    child_init(&s->ch);
    s->ch.reaped = engine_reaped;
    snprintf(s->sha256, sizeof s->sha256, "%s", model_sha256);
    s->model_path = realpath(model_path, NULL);
    if (!s->model_path) {
        int rc = err_set(err, ERR_INPUT, "exec engine '%s': model file '%s': %s", e->name,
                         model_path, strerror(errno));
        free(s);
        return rc;
    }
    *out = &s->base;
    return 0;
}

static void session_close(struct backend_session *bs)
{
    struct exec_session *s = (struct exec_session *)bs;
    if (!s)
        return;
    if (s->ch.pid) {
        struct gate_err quiet = {0};
        char status[160];
        if (!simple(s, "bye", json_pack("{s:s}", "op", "bye"), &quiet)) {
            /* it said goodbye: let it exit on its own (at most the timeout, and 10 s) before
             * end_child's signals */
            child_close_stdin(&s->ch);
            const double until = child_now() + (s->e->timeout_s < 10 ? s->e->timeout_s : 10);
            while (!child_exited(&s->ch) && child_now() < until) {
                child_drain_stderr(&s->ch);
                struct timespec ts = {0, 5 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        /* exited or not: its group, its orphans and itself are killed and reaped, every pipe
         * closed */
        end_child(s, status, sizeof status);
    }
    isolate_scratch_free(s->scratch);
    free(s->model_path);
    free(s);
}

/* The last child's handshake (have_hello: one completed, even if the child has ended since),
 * the children started, the live one, and what was measured about the engine. */
static void session_info(const struct backend_session *bs, struct backend_session_info *out)
{
    const struct exec_session *s = (const struct exec_session *)bs;
    memset(out, 0, sizeof *out);
    if (!s)
        return;
    out->spawns = s->ch.spawns;
    out->pid = (int)s->ch.pid;
    if (s->hello.engine[0]) {
        out->have_hello = 1;
        out->hello = s->hello;
    }
    struct exec_identity *id = &out->identity;
    snprintf(id->path, sizeof id->path, "%s", s->exe);
    snprintf(id->sha256, sizeof id->sha256, "%s", s->exe_sha256);
    snprintf(id->isolation, sizeof id->isolation, "%s", s->isolation);
    snprintf(id->containment, sizeof id->containment, "%s", s->containment);
    id->engine_s = s->engine_s;
}

/* ---- the backend ----------------------------------------------------------------------------- */

static int exec_describe(struct backend_device *out, struct gate_err *err)
{
    memset(out, 0, sizeof *out);
    return err_set(err, ERR_ENV,
                   "the exec backend has no device of its own: its engine names one in its"
                   " handshake");
}

static int exec_open(struct backend **out, const struct model *m, const struct backend_config *cfg,
                     struct gate_err *err)
{
    *out = NULL;
    struct exec_session *s = cfg ? (struct exec_session *)cfg->session : NULL;
    const struct model_hparams *hp = &m->hp;
    int rc = 0;
    if (!s)
        return err_set(err, ERR_INPUT,
                       "the exec backend needs an engine (a ladder's engines: entry and a mode"
                       " exec.<engine>.<path>)");
    if (s->attached)
        return err_set(err, ERR_RUNTIME,
                       "exec engine '%s' is already in use by another open backend (one child,"
                       " one cache)",
                       s->e->name);
    const int cap = hp->n_ctx_train > 0 && hp->n_ctx_train < 4096 ? (int)hp->n_ctx_train : 4096;
    const int n_ctx = cfg->n_ctx > 0 ? cfg->n_ctx : cap;
    if (s->ch.pid && s->loaded_ctx < n_ctx) {
        /* this gate needs a longer cache than the child loaded: a fresh child, loaded larger */
        char status[160];
        struct gate_err quiet = {0};
        if (simple(s, "bye", json_pack("{s:s}", "op", "bye"), &quiet) == 0)
            end_child(s, status, sizeof status);
    }
    if (!s->ch.pid) {
        if ((rc = spawn(s, err)) || (rc = do_hello(s, err)))
            return rc;
        if ((s->e->supports & EXEC_SUPPORTS_FAULTS) && !s->hello.faults)
            return fail(s, "hello", err,
                        "the ladder declares that the engine injects faults, but its hello lists"
                        " none");
        const unsigned miss = s->e->faults & ~s->hello.faults;
        if (miss) { /* each declared kind goes into the engine: it must be able to take it */
            char names[160];
            return fail(s, "hello", err,
                        "the ladder declares that the engine injects %s, but its hello does not"
                        " list %s",
                        fault_kinds_text(miss, names, sizeof names),
                        miss & (miss - 1) ? "them" : "it");
        }
        /* a cache long enough for the usual gates, so one child serves the whole cell */
        if ((rc = do_load(s, n_ctx > cap ? n_ctx : cap, hp->n_vocab, err)))
            return rc;
    } else {
        struct fault_set none = {0};
        if ((rc = do_truncate(s, 0, err)) || (rc = sync_faults(s, &none, err)))
            return rc;
    }
    struct exec_backend *b = calloc(1, sizeof *b);
    if (!b)
        return err_set(
            err, ERR_ENV,
            "exec: out of memory for the backend's view of the engine session (%zu bytes)",
            sizeof *b);
    b->s = s;
    b->base.ops = &backend_exec_ops;
    b->base.model = m;
    b->base.n_ctx = n_ctx;
    b->base.n_batch =
        cfg->n_batch > 0 && cfg->n_batch < s->hello.max_tokens ? cfg->n_batch : s->hello.max_tokens;
    s->attached = 1;
    *out = &b->base;
    return 0;
}

static int exec_forward(struct backend *bb, const int32_t *tokens, int n, int pos0, float *logits,
                        struct gate_err *err)
{
    struct exec_backend *b = (struct exec_backend *)bb;
    struct exec_session *s = b->s;
    const uint32_t V = bb->model->hp.n_vocab;
    char what[64];
    int rc;
    snprintf(what, sizeof what, "forward n_past=%d n_tokens=%d", pos0, n);
    if (!s->ch.pid)
        return err_set(err, ERR_RUNTIME,
                       "exec engine '%s' (%s): the engine is not running (an earlier failure"
                       " ended it)",
                       s->e->name, what);
    if ((rc = sync_faults(s, &bb->faults, err)))
        return rc;
    if (s->n_past != pos0 && (rc = do_truncate(s, pos0, err)))
        return rc;
    json_t *req = json_pack("{s:s, s:i, s:i}", "op", "forward", "n_past", pos0, "n_tokens", n);
    json_t *r = NULL;
    long long v = 0;
    rc = exchange(s, what, req, tokens, (uint64_t)n * sizeof(int32_t), &r, logits,
                  (uint64_t)n * V * sizeof(float), err);
    json_decref(req);
    if (!rc && !(rc = reply_int(s, what, r, "n_tokens", n, n, &v, err)))
        rc = reply_int(s, what, r, "n_vocab", V, V, &v, err);
    json_decref(r);
    if (!rc)
        s->n_past = pos0 + n;
    return rc;
}

static int exec_truncate(struct backend *bb, int n_pos, struct gate_err *err)
{
    struct exec_backend *b = (struct exec_backend *)bb;
    if (!b->s->ch.pid)
        return err_set(err, ERR_RUNTIME,
                       "exec engine '%s' (truncate): the engine is not running (an earlier"
                       " failure ended it)",
                       b->s->e->name);
    return do_truncate(b->s, n_pos, err);
}

static void exec_info(const struct backend *bb, struct backend_info *out)
{
    const struct exec_backend *b = (const struct exec_backend *)bb;
    const struct exec_hello *h = &b->s->hello;
    snprintf(out->backend, sizeof out->backend, "exec");
    snprintf(out->device, sizeof out->device, "%s", h->device[0] ? h->device : "unknown");
    snprintf(out->engine, sizeof out->engine, "%.80s %.80s (%.80s)", h->engine, h->version,
             h->build_id);
}

static void exec_close(struct backend *bb)
{
    struct exec_backend *b = (struct exec_backend *)bb;
    if (!b)
        return;
    b->s->attached = 0; /* the child stays for the cell's next gate (session_close ends it) */
    free(b);
}

const struct backend_ops backend_exec_ops = {
    .name = "exec",
    .describe = exec_describe,
    .open = exec_open,
    .forward = exec_forward,
    .truncate = exec_truncate,
    .info = exec_info,
    .close = exec_close,
    .no_taps = 1, /* gate-exec carries logits only: an engine's insides are its own */
    .session_open = session_open,
    .session_close = session_close,
    .session_info = session_info,
};
