/* session.h — the exec backend's session as the tests drive it: opened and read through the
 * backend API (backend_session_open / _info / _close, engine/backend.h), as the harness does; the
 * session itself is private to engine/exec.c. Static inline helpers, one line each.
 * Start reading: test_session_new().
 */
#ifndef GATE_TEST_SESSION_H
#define GATE_TEST_SESSION_H

#include "engine/backend.h"
#include "engine/exec.h"

/* The cell's session of engine e on model file path, pinned as sha (backend_session_open). */
static inline int test_session_new(struct backend_session **out, const struct exec_engine *e,
                                   const char *path, const char *sha, struct gate_err *err)
{
    const struct backend_session_config c = {.engine = e, .model_path = path, .model_sha256 = sha};
    return backend_session_open(out, BACKEND_EXTERNAL, &c, err);
}

/* The last child's handshake: 0, or -1 when none completed. */
static inline int test_session_hello(const struct backend_session *s, struct exec_hello *out)
{
    struct backend_session_info si;
    backend_session_info(s, &si);
    *out = si.hello;
    return si.have_hello ? 0 : -1;
}

/* The live child's pid (0 when none) and the children started. */
static inline int test_session_pid(const struct backend_session *s)
{
    struct backend_session_info si;
    backend_session_info(s, &si);
    return si.pid;
}

static inline int test_session_spawns(const struct backend_session *s)
{
    struct backend_session_info si;
    backend_session_info(s, &si);
    return si.spawns;
}

/* What the session measured about the engine. */
static inline void test_session_identity(const struct backend_session *s, struct exec_identity *out)
{
    struct backend_session_info si;
    backend_session_info(s, &si);
    *out = si.identity;
}

#endif
