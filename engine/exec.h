/* exec.h — the `exec` backend: an engine gate did not build, run as a child process that speaks
 * the gate-exec protocol (docs/exec.md) over its stdin and stdout.
 *
 * A ladder declares the engine (struct exec_engine: argv, timeout, what it supports); one cell
 * holds one session of the backend (backend_session_open(BACKEND_EXTERNAL, {engine, model}),
 * engine/backend.h; private to exec.c), which starts the child at the first backend_open(),
 * keeps it across the cell's gates (the engine is started once per cell), and ends it with `bye`
 * at backend_session_close(). A backend opened on the session is a view of that child:
 * backend_forward() becomes `forward` requests, backend_truncate() `truncate`,
 * backend_set_faults() a `set_faults` before the next forward.
 * Invariants: every frame is bounded and checked before it is believed (header size, JSON shape,
 * sizes, the model digest); every exchange runs under the engine's timeout with poll() and
 * non-blocking pipes; on any failure the child is killed (SIGTERM, SIGKILL after a grace period)
 * and always reaped, and the error names the engine, the request, the child's exit status or
 * signal and its stderr tail (escaped). gate never hangs or crashes on an engine's behalf.
 * The engine is an adversary: it runs sandboxed (engine/isolate.h), cannot outlive its session,
 * has a time budget over the whole cell, and is refused before it starts when its binary, files
 * or build id differ from the ladder's pins (docs/exec.md, "Threat model").
 * Start reading: session_open() in exec.c, then exchange().
 */
#ifndef GATE_EXEC_H
#define GATE_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EXEC_PROTOCOL 1           /* gate-exec version this build speaks */
#define EXEC_ARGV_MAX 64          /* arguments of an engine's argv */
#define EXEC_NAME_MAX 19          /* engine name + NUL: "exec.NAME.prefill" fits a 32-byte mode */
#define EXEC_STDERR_TAIL 4096     /* bytes of the child's stderr kept for messages */
#define EXEC_GRACE_S 2.0          /* SIGTERM -> SIGKILL grace period */
#define EXEC_TIMEOUT_DEFAULT 60.0 /* seconds per exchange when the ladder says nothing */

/* What an engine may be asked for (the ladder's `supports`), as bits. */
enum exec_support {
    EXEC_SUPPORTS_DECODE = 1,
    EXEC_SUPPORTS_PREFILL = 2,
    EXEC_SUPPORTS_CHAT = 4,
    EXEC_SUPPORTS_FAULTS = 8,
};

#define EXEC_ENV_MAX 32                 /* `env:` entries of an engine */
#define EXEC_PATHS_MAX 32               /* `allow:`, `devices:` and `files:` entries of an engine */
#define EXEC_CELL_TIMEOUT_DEFAULT 600.0 /* seconds an engine may take over a whole cell */

/* A file an engine entry pins (`files:`): granted read-only, its digest checked before a start. */
struct exec_file {
    char *path;      /* absolute (resolved against the ladder's folder) */
    char sha256[65]; /* lower-case hex */
};

/* An engine as a ladder declares it. argv is NULL-terminated; the strings are owned by whoever
 * filled the struct (the ladder) and borrowed by sessions for as long as they live. argv[0] is
 * already resolved (a relative path containing '/' against the ladder's folder); one without '/'
 * is looked up in the child's PATH (isolate_resolve). */
struct exec_engine {
    char name[EXEC_NAME_MAX];
    int argc;                      /* 1 .. EXEC_ARGV_MAX */
    char *argv[EXEC_ARGV_MAX + 1]; /* argv[argc] == NULL */
    double timeout_s;              /* deadline of each request/reply exchange (> 0) */
    double cell_timeout_s;         /* the engine's time over the whole session (> 0; 0: default) */
    unsigned supports;             /* enum exec_support bits */
    /* the fault kinds it injects itself (the ladder's `faults:`; bit 1 << enum fault_kind each):
     * its hello must list every one, and gate sends no other. 0: not given (with
     * EXEC_SUPPORTS_FAULTS: every kind the falsify gate asks for) */
    unsigned faults;
    /* isolation (docs/exec.md, "Threat model") */
    int isolation_none; /* the ladder said `isolation: none` (then reason is non-empty) */
    char reason[256];   /* why it runs unisolated */
    int n_env;          /* "NAME=value" entries the child gets beside the fixed ones */
    char *env[EXEC_ENV_MAX];
    int n_allow; /* extra read-only paths (absolute) */
    char *allow[EXEC_PATHS_MAX];
    int n_devices; /* extra read-write paths (absolute), e.g. /dev/nvidia0 */
    char *devices[EXEC_PATHS_MAX];
    /* pins (empty: unpinned) */
    char sha256[65];    /* of the engine binary (argv[0] as resolved) */
    char build_id[128]; /* hello's build_id must equal it */
    int n_files;
    struct exec_file files[EXEC_PATHS_MAX];
};

/* The handshake of the running (or last) child: what ran, for the receipt
 * (backend_session_info's hello). */
struct exec_hello {
    char engine[128], version[128], build_id[128], device[128];
    unsigned faults; /* bit (1 << enum fault_kind) per kind the engine can inject */
    int max_tokens;  /* most tokens per forward request */
};

/* The engine's pins as every start checks them: argv[0] resolved (the engine's PATH for a bare
 * name) into exe (exe_n bytes), hashed into exe_sha256, equal to e->sha256 when pinned; every
 * `files` entry matching its pin. 0 or ERR_RUNTIME "exec engine 'NAME': ..." naming the file and
 * both digests. `gate ladder check` and `gate run` call it for every engine before anything runs
 * (harness/ladder.c), so a missing or changed engine is an input error there; a session calls it
 * again at each start (a binary replaced mid-run is then a FAILED row). */
int exec_engine_check_pins(const struct exec_engine *e, char *exe, size_t exe_n,
                           char exe_sha256[65], struct gate_err *err);

/* The session (backend_session_open with the engine e, borrowed: must outlive the session; the
 * model file, made absolute; its pinned digest, 64 lower-case hex, which the engine's `load`
 * reply must equal; ERR_INPUT for a bad engine or digest) starts nothing: the child is spawned by
 * the first backend_open() whose backend_config.session is it. Closing it sends `bye` to a live
 * child (it must answer and exit within the timeout, else it is killed), always reaped.
 * backend_session_info() says: the last child's handshake (have_hello 0 when no child ever
 * answered hello), the children started (1 for a cell whose engine never failed; a failure kills
 * the child and the next open starts a fresh one), the pid of the live child (0 when none), and
 * the identity below. */

/* What the session measured about the engine it ran, for the receipt: the binary as resolved
 * (path, SHA-256: "" before the first start), the isolation it ran under ("landlock ABI N" or
 * "none: REASON"), how its descendants were contained ("pid namespace", or "subreaper sweep
 * (no pid namespace: WHY)"; isolate_spawn; "" before the first start), and the seconds the
 * engine took over the session. */
struct exec_identity {
    char path[4096];
    char sha256[65];
    char isolation[300];
    char containment[160];
    double engine_s;
};

/* Parse a `supports` word ("decode", "prefill", "chat", "faults") into its bit; 0 if unknown. */
unsigned exec_support_bit(const char *word);

struct json_t;

/* Decode the reply frame at the start of buf (len bytes: 4-byte header length H, H bytes of JSON
 * header, 8-byte payload length B, B bytes of payload; docs/exec.md) with the checks a live
 * engine's reply meets in exchange(): H in bounds, one JSON object with a boolean "ok", an error
 * reply refused with its text, and an ok reply's payload exactly dst_len bytes. On 0: *hdr (may be
 * NULL: dropped) the header, which the caller json_decref()s; *payload (may be NULL) points into
 * buf; *used (may be NULL) the frame's bytes, so the next frame starts at buf + *used. ERR_RUNTIME
 * with the reason otherwise, including a frame cut short (which exchange() would wait for). For
 * the fuzz target (fuzz/fuzz_exec.c) and tests; exchange() itself reads from a pipe. */
int exec_reply_decode(const void *buf, size_t len, uint64_t dst_len, struct json_t **hdr,
                      const void **payload, size_t *used, struct gate_err *err);

extern const struct backend_ops backend_exec_ops;

#ifdef __cplusplus
}
#endif
#endif
