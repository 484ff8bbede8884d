/* faultsim.c — see faultsim.h. One countdown (faultsim_step) and three ways into it, each a
 * public hook of the library it faults, so no other file of gate needs an edit:
 *   alloc   SQLite's allocator (sqlite3_config SQLITE_CONFIG_MALLOC wrapping the default
 *           methods) and jansson's (json_set_alloc_funcs over malloc/free)
 *   write   a VFS that wraps SQLite's default VFS, forwards every method and fails the counted
 *           call of xWrite / xSync / xTruncate; registered as the new default
 *   sqlite  an auto-extension that gives every new connection a SQLITE_TRACE_STMT callback (it
 *           counts statement runs) and a progress handler of period 1 (it interrupts the run
 *           that the countdown picked)
 * Start reading: faultsim_arm().
 */
#include "base/faultsim.h"

#include <errno.h>
#include <execinfo.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static enum faultsim_kind armed_kind;
static long long armed_nth;
static atomic_llong n_calls;
static atomic_int n_fired;
static atomic_int interrupt_pending; /* sqlite: the picked statement run has not been stopped */

static const char *const KIND_NAMES[] = {"off", "alloc", "write", "sqlite"};

int faultsim_parse(const char *spec, enum faultsim_kind *kind, long long *nth, struct gate_err *err)
{
    *kind = FAULTSIM_OFF;
    *nth = 0;
    if (!spec || !*spec)
        return 0;
    const char *colon = strchr(spec, ':');
    enum faultsim_kind k = FAULTSIM_OFF;
    for (int i = FAULTSIM_ALLOC; colon && i <= FAULTSIM_SQLITE; i++)
        if ((size_t)(colon - spec) == strlen(KIND_NAMES[i]) &&
            !strncmp(spec, KIND_NAMES[i], (size_t)(colon - spec)))
            k = (enum faultsim_kind)i;
    if (k == FAULTSIM_OFF)
        return err_set(err, ERR_INPUT, "GATE_FAULTSIM '%s': expected alloc:N, write:N or sqlite:N",
                       spec);
    char *end = NULL;
    errno = 0;
    long long n = strtoll(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || n < 1 || colon[1] == '-' || colon[1] == '+')
        return err_set(err, ERR_INPUT, "GATE_FAULTSIM '%s': N must be a whole number >= 1", spec);
    *kind = k;
    *nth = n;
    return 0;
}

int faultsim_step(enum faultsim_kind kind)
{
    if (kind == FAULTSIM_OFF || kind != armed_kind)
        return 0;
    long long i = atomic_fetch_add(&n_calls, 1) + 1;
    if (i != armed_nth)
        return 0;
    atomic_store(&n_fired, 1);
    const char *bt = getenv("GATE_FAULTSIM_BACKTRACE");
    if (bt && *bt && strcmp(bt, "0")) { /* where the failing call came from, for debugging */
        void *frames[32];
        fprintf(stderr, "faultsim: %s #%lld fails here:\n", KIND_NAMES[kind], i);
        backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
    }
    return 1;
}

void faultsim_report(FILE *out)
{
    if (armed_kind == FAULTSIM_OFF)
        return;
    fprintf(out, "faultsim: %s #%lld %s (%lld calls)\n", KIND_NAMES[armed_kind], armed_nth,
            atomic_load(&n_fired) ? "failed" : "not reached", (long long)atomic_load(&n_calls));
    fflush(out);
}

static void report_at_exit(void)
{
    faultsim_report(stderr);
}

/* ---- alloc: SQLite's and jansson's allocators ------------------------------------------------ */

static sqlite3_mem_methods real_mem;

static void *mem_malloc(int n)
{
    return faultsim_step(FAULTSIM_ALLOC) ? NULL : real_mem.xMalloc(n);
}
static void mem_free(void *p)
{
    real_mem.xFree(p);
}
static void *mem_realloc(void *p, int n)
{
    return faultsim_step(FAULTSIM_ALLOC) ? NULL : real_mem.xRealloc(p, n);
}
static int mem_size(void *p)
{
    return real_mem.xSize(p);
}
static int mem_roundup(int n)
{
    return real_mem.xRoundup(n);
}
static int mem_init(void *app)
{
    return real_mem.xInit(app);
}
static void mem_shutdown(void *app)
{
    real_mem.xShutdown(app);
}

static long long json_failures;

/* jansson's allocator in every gate process: counts failures (injected or real), because jansson
 * drops a key silently when it cannot allocate it, and a receipt missing a number must never be
 * signed (see faultsim_json_failures). */
static void *json_malloc(size_t n)
{
    void *p = faultsim_step(FAULTSIM_ALLOC) ? NULL : malloc(n);
    if (!p)
        json_failures++;
    return p;
}

void faultsim_json_guard(void)
{
    json_set_alloc_funcs(json_malloc, free);
}

long long faultsim_json_failures(void)
{
    return json_failures;
}

static int arm_alloc(struct gate_err *err)
{
    int rc = sqlite3_config(SQLITE_CONFIG_GETMALLOC, &real_mem);
    if (rc == SQLITE_OK) {
        static sqlite3_mem_methods wrap;
        wrap = (sqlite3_mem_methods){mem_malloc,  mem_free, mem_realloc,  mem_size,
                                     mem_roundup, mem_init, mem_shutdown, real_mem.pAppData};
        rc = sqlite3_config(SQLITE_CONFIG_MALLOC, &wrap);
    }
    if (rc != SQLITE_OK)
        return err_set(err, ERR_ENV, "faultsim: SQLite refused the allocator hook: %s",
                       sqlite3_errstr(rc));
    json_set_alloc_funcs(json_malloc, free);
    return 0;
}

/* ---- write: a VFS over the default one ------------------------------------------------------- */

struct fs_file {
    sqlite3_file base;  /* base.pMethods is &fs_io while real is open */
    sqlite3_file *real; /* the wrapped VFS's file, stored right after this struct */
};

static sqlite3_vfs *real_vfs;

static sqlite3_file *real_of(sqlite3_file *f)
{
    return ((struct fs_file *)f)->real;
}

static int io_close(sqlite3_file *f)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods ? r->pMethods->xClose(r) : SQLITE_OK;
}
static int io_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off)
{
    return real_of(f)->pMethods->xRead(real_of(f), buf, n, off);
}
static int io_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off)
{
    if (faultsim_step(FAULTSIM_WRITE))
        return SQLITE_IOERR_WRITE;
    return real_of(f)->pMethods->xWrite(real_of(f), buf, n, off);
}
static int io_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    if (faultsim_step(FAULTSIM_WRITE))
        return SQLITE_IOERR_TRUNCATE;
    return real_of(f)->pMethods->xTruncate(real_of(f), size);
}
static int io_sync(sqlite3_file *f, int flags)
{
    if (faultsim_step(FAULTSIM_WRITE))
        return SQLITE_IOERR_FSYNC;
    return real_of(f)->pMethods->xSync(real_of(f), flags);
}
static int io_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
    return real_of(f)->pMethods->xFileSize(real_of(f), size);
}
static int io_lock(sqlite3_file *f, int lock)
{
    return real_of(f)->pMethods->xLock(real_of(f), lock);
}
static int io_unlock(sqlite3_file *f, int lock)
{
    return real_of(f)->pMethods->xUnlock(real_of(f), lock);
}
static int io_check_reserved(sqlite3_file *f, int *out)
{
    return real_of(f)->pMethods->xCheckReservedLock(real_of(f), out);
}
static int io_file_control(sqlite3_file *f, int op, void *arg)
{
    return real_of(f)->pMethods->xFileControl(real_of(f), op, arg);
}
static int io_sector_size(sqlite3_file *f)
{
    return real_of(f)->pMethods->xSectorSize(real_of(f));
}
static int io_device_chars(sqlite3_file *f)
{
    return real_of(f)->pMethods->xDeviceCharacteristics(real_of(f));
}
/* Version 2 and 3 methods: forwarded only when the real file has them. */
static int io_shm_map(sqlite3_file *f, int pg, int pgsz, int extend, void volatile **out)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->iVersion >= 2 ? r->pMethods->xShmMap(r, pg, pgsz, extend, out)
                                      : SQLITE_IOERR_SHMMAP;
}
static int io_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->iVersion >= 2 ? r->pMethods->xShmLock(r, off, n, flags)
                                      : SQLITE_IOERR_SHMLOCK;
}
static void io_shm_barrier(sqlite3_file *f)
{
    sqlite3_file *r = real_of(f);
    if (r->pMethods->iVersion >= 2)
        r->pMethods->xShmBarrier(r);
}
static int io_shm_unmap(sqlite3_file *f, int del)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->iVersion >= 2 ? r->pMethods->xShmUnmap(r, del) : SQLITE_OK;
}
static int io_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **out)
{
    sqlite3_file *r = real_of(f);
    if (r->pMethods->iVersion >= 3)
        return r->pMethods->xFetch(r, off, n, out);
    *out = NULL; /* no memory map: SQLite reads through xRead */
    return SQLITE_OK;
}
static int io_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->iVersion >= 3 ? r->pMethods->xUnfetch(r, off, p) : SQLITE_OK;
}

static const sqlite3_io_methods fs_io = {
    .iVersion = 3,
    .xClose = io_close,
    .xRead = io_read,
    .xWrite = io_write,
    .xTruncate = io_truncate,
    .xSync = io_sync,
    .xFileSize = io_file_size,
    .xLock = io_lock,
    .xUnlock = io_unlock,
    .xCheckReservedLock = io_check_reserved,
    .xFileControl = io_file_control,
    .xSectorSize = io_sector_size,
    .xDeviceCharacteristics = io_device_chars,
    .xShmMap = io_shm_map,
    .xShmLock = io_shm_lock,
    .xShmBarrier = io_shm_barrier,
    .xShmUnmap = io_shm_unmap,
    .xFetch = io_fetch,
    .xUnfetch = io_unfetch,
};

static int vfs_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags,
                    int *out_flags)
{
    (void)vfs;
    struct fs_file *f = (struct fs_file *)file;
    f->real = (sqlite3_file *)&f[1];
    f->real->pMethods = NULL;
    int rc = real_vfs->xOpen(real_vfs, name, f->real, flags, out_flags);
    /* SQLite calls xClose whenever pMethods is set, even after a failed open */
    f->base.pMethods = f->real->pMethods ? &fs_io : NULL;
    return rc;
}
static int vfs_delete(sqlite3_vfs *v, const char *name, int sync)
{
    (void)v;
    return real_vfs->xDelete(real_vfs, name, sync);
}
static int vfs_access(sqlite3_vfs *v, const char *name, int flags, int *out)
{
    (void)v;
    return real_vfs->xAccess(real_vfs, name, flags, out);
}
static int vfs_full_pathname(sqlite3_vfs *v, const char *name, int n, char *out)
{
    (void)v;
    return real_vfs->xFullPathname(real_vfs, name, n, out);
}
static void *vfs_dlopen(sqlite3_vfs *v, const char *name)
{
    (void)v;
    return real_vfs->xDlOpen(real_vfs, name);
}
static void vfs_dlerror(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    real_vfs->xDlError(real_vfs, n, out);
}
static void (*vfs_dlsym(sqlite3_vfs *v, void *h, const char *sym))(void)
{
    (void)v;
    return real_vfs->xDlSym(real_vfs, h, sym);
}
static void vfs_dlclose(sqlite3_vfs *v, void *h)
{
    (void)v;
    real_vfs->xDlClose(real_vfs, h);
}
static int vfs_randomness(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return real_vfs->xRandomness(real_vfs, n, out);
}
static int vfs_sleep(sqlite3_vfs *v, int us)
{
    (void)v;
    return real_vfs->xSleep(real_vfs, us);
}
static int vfs_current_time(sqlite3_vfs *v, double *out)
{
    (void)v;
    return real_vfs->xCurrentTime(real_vfs, out);
}
static int vfs_last_error(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return real_vfs->xGetLastError ? real_vfs->xGetLastError(real_vfs, n, out) : 0;
}
static int vfs_current_time64(sqlite3_vfs *v, sqlite3_int64 *out)
{
    (void)v;
    return real_vfs->xCurrentTimeInt64(real_vfs, out);
}
static int vfs_set_syscall(sqlite3_vfs *v, const char *name, sqlite3_syscall_ptr p)
{
    (void)v;
    return real_vfs->xSetSystemCall(real_vfs, name, p);
}
static sqlite3_syscall_ptr vfs_get_syscall(sqlite3_vfs *v, const char *name)
{
    (void)v;
    return real_vfs->xGetSystemCall(real_vfs, name);
}
static const char *vfs_next_syscall(sqlite3_vfs *v, const char *name)
{
    (void)v;
    return real_vfs->xNextSystemCall(real_vfs, name);
}

static int arm_write(struct gate_err *err)
{
    static sqlite3_vfs vfs;
    real_vfs = sqlite3_vfs_find(NULL);
    if (!real_vfs)
        return err_set(err, ERR_ENV, "faultsim: SQLite has no default VFS to wrap");
    vfs = (sqlite3_vfs){
        .iVersion = real_vfs->iVersion < 3 ? real_vfs->iVersion : 3,
        .szOsFile = (int)sizeof(struct fs_file) + real_vfs->szOsFile,
        .mxPathname = real_vfs->mxPathname,
        .zName = "gate-faultsim",
        .xOpen = vfs_open,
        .xDelete = vfs_delete,
        .xAccess = vfs_access,
        .xFullPathname = vfs_full_pathname,
        .xDlOpen = vfs_dlopen,
        .xDlError = vfs_dlerror,
        .xDlSym = vfs_dlsym,
        .xDlClose = vfs_dlclose,
        .xRandomness = vfs_randomness,
        .xSleep = vfs_sleep,
        .xCurrentTime = vfs_current_time,
        .xGetLastError = vfs_last_error,
    };
    if (vfs.iVersion >= 2)
        vfs.xCurrentTimeInt64 = vfs_current_time64;
    if (vfs.iVersion >= 3) {
        vfs.xSetSystemCall = vfs_set_syscall;
        vfs.xGetSystemCall = vfs_get_syscall;
        vfs.xNextSystemCall = vfs_next_syscall;
    }
    int rc = sqlite3_vfs_register(&vfs, 1);
    if (rc != SQLITE_OK)
        return err_set(err, ERR_ENV, "faultsim: SQLite refused the wrapping VFS: %s",
                       sqlite3_errstr(rc));
    return 0;
}

/* ---- sqlite: interrupt the Nth statement run ------------------------------------------------- */

static int on_trace(unsigned type, void *ctx, void *p, void *x)
{
    (void)ctx, (void)p, (void)x;
    if (type == SQLITE_TRACE_STMT && faultsim_step(FAULTSIM_SQLITE))
        atomic_store(&interrupt_pending, 1);
    return 0;
}

/* Called every VM instruction and, since SQLite 3.19, at least once at the end of every run, so
 * the run the trace picked is always stopped (SQLITE_INTERRUPT) before it returns. */
static int on_progress(void *ctx)
{
    (void)ctx;
    return atomic_exchange(&interrupt_pending, 0);
}

static int on_connection(sqlite3 *db, char **msg, const sqlite3_api_routines *api)
{
    (void)msg, (void)api;
    sqlite3_trace_v2(db, SQLITE_TRACE_STMT, on_trace, NULL);
    sqlite3_progress_handler(db, 1, on_progress, NULL);
    return SQLITE_OK;
}

static int arm_sqlite(struct gate_err *err)
{
    int rc = sqlite3_auto_extension((void (*)(void))on_connection);
    if (rc != SQLITE_OK)
        return err_set(err, ERR_ENV, "faultsim: SQLite refused the auto-extension: %s",
                       sqlite3_errstr(rc));
    return 0;
}

/* ---- arming ---------------------------------------------------------------------------------- */

int faultsim_arm(enum faultsim_kind kind, long long nth, struct gate_err *err)
{
    int rc = 0;
    if (kind == FAULTSIM_OFF)
        goto cleanup;
    if (armed_kind != FAULTSIM_OFF) {
        rc = err_set(err, ERR_INPUT, "faultsim: already armed (%s:%lld)", KIND_NAMES[armed_kind],
                     armed_nth);
        goto cleanup;
    }
    if (kind == FAULTSIM_ALLOC)
        rc = arm_alloc(err);
    else if (kind == FAULTSIM_WRITE)
        rc = arm_write(err);
    else
        rc = arm_sqlite(err);
    if (rc)
        goto cleanup;
    armed_nth = nth;
    atomic_store(&n_calls, 0);
    atomic_store(&n_fired, 0);
    armed_kind = kind; /* last: nothing counts before the hooks are all in place */
    atexit(report_at_exit);
cleanup:
    return rc;
}

int faultsim_init(void)
{
    struct gate_err err = {0};
    enum faultsim_kind kind;
    long long nth;
    if (faultsim_parse(getenv("GATE_FAULTSIM"), &kind, &nth, &err) ||
        faultsim_arm(kind, nth, &err)) {
        fprintf(stderr, "gate: %s\n", err.msg);
        return 2;
    }
    return 0;
}
