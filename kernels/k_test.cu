/* k_test.cu — the C-callable launchers of k_test.h: host arrays in, the backend's own launchers
 * (k_ops.cuh) on a private stream, host arrays out. CPU twins of each are listed in k_ops.cuh;
 * harness/selftest.c pairs them up over edge shapes.
 * Device buffers are scoped (struct dbuf frees on every return path), so a failed call leaks
 * nothing. Start reading: k_test_gemv().
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/k_ops.cuh"
#include "kernels/k_test.h"

namespace
{

struct dbuf {
    void *p = nullptr;
    dbuf() = default;
    dbuf(const dbuf &) = delete;
    dbuf &operator=(const dbuf &) = delete;
    ~dbuf()
    {
        if (p)
            cudaFree(p);
    }
    template <class T> T *as() const
    {
        return (T *)p;
    }
};

struct tstream {
    struct k_stream ks = {nullptr, 0, 0, 1, 1, 1};
    ~tstream()
    {
        if (ks.s)
            cudaStreamDestroy(ks.s);
    }
};

/* Allocate n bytes (zeroed) and copy src (NULL: leave zero). cudaMemset is asynchronous and
 * the pageable cudaMemcpy may return before its DMA lands, both on the legacy stream, while the
 * kernels run on a non-blocking stream that does not wait for it: synchronize the device before
 * the buffer is handed to a kernel. */
int put(dbuf &b, const void *src, size_t n, struct gate_err *err)
{
    K_CUDA(cudaMalloc(&b.p, n ? n : 1));
    K_CUDA(cudaMemset(b.p, 0, n ? n : 1));
    if (src && n)
        K_CUDA(cudaMemcpy(b.p, src, n, cudaMemcpyHostToDevice));
    K_CUDA(cudaDeviceSynchronize());
    return 0;
}

/* Copy a result back after finish() has synchronized the kernels' stream. */
int get(void *dst, const dbuf &b, size_t n, struct gate_err *err)
{
    K_CUDA(cudaDeviceSynchronize());
    K_CUDA(cudaMemcpy(dst, b.p, n, cudaMemcpyDeviceToHost));
    return 0;
}

/* The launchers' stream: debug on, so every launch is synchronized and a device fault names the
 * kernel that raised it (gate selftest reports it per family). */
int start(tstream &t, struct gate_err *err)
{
    K_CUDA(cudaStreamCreateWithFlags(&t.ks.s, cudaStreamNonBlocking));
    t.ks.debug = 1;
    return 0;
}

int finish(tstream &t, struct gate_err *err)
{
    K_CUDA(cudaStreamSynchronize(t.ks.s));
    K_CUDA(cudaGetLastError());
    return 0;
}

struct k_weight weight_view(int type, const dbuf &b, int64_t rows, int64_t cols, int n_expert)
{
    struct k_weight w;
    w.data = b.as<uint8_t>();
    w.type = type;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = quant_row_bytes(type, cols);
    w.expert_stride = n_expert > 1 ? (size_t)rows * w.row_bytes : 0;
    return w;
}

} // namespace

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

extern "C" int k_test_device(char *name, size_t n, struct gate_err *err)
{
    int count = 0, drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return err_set(err, ERR_ENV,
                       "no CUDA device: cudaGetDeviceCount returned %s (%s);"
                       " driver CUDA %d.%d, runtime %d.%d",
                       e == cudaSuccess ? "0 devices" : cudaGetErrorName(e),
                       e == cudaSuccess ? "no device" : cudaGetErrorString(e), drv / 1000,
                       drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    cudaDeviceProp p;
    K_CUDA(cudaGetDeviceProperties(&p, 0));
    K_CUDA(cudaSetDevice(0));
    if (k_check_image(NULL))
        return err_set(err, ERR_ENV, "this build has no kernels for %.100s (sm_%d%d)", p.name,
                       p.major, p.minor);
    snprintf(name, n, "%.100s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
             (double)p.totalGlobalMem / (double)(1ull << 30));
    return 0;
}

extern "C" int k_test_gemv(int gemv, int type, const void *w, int64_t rows, int64_t cols,
                           int n_expert, const int32_t *ids, int x_div, const float *x, int n_x,
                           int n_vec, int accumulate, float *y, struct gate_err *err)
{
    tstream t;
    dbuf dw, dx, dy, di;
    const size_t wb = (size_t)n_expert * (size_t)rows * quant_row_bytes(type, cols);
    TRY(start(t, err));
    t.ks.gemv = gemv;
    TRY(put(dw, w, wb, err));
    TRY(put(dx, x, (size_t)n_x * (size_t)cols * 4, err));
    TRY(put(dy, y, (size_t)n_vec * (size_t)rows * 4, err));
    if (ids)
        TRY(put(di, ids, (size_t)n_vec * 4, err));
    struct k_weight kw = weight_view(type, dw, rows, cols, n_expert);
    TRY(k_gemv(&t.ks, &kw, dx.as<float>(), cols, x_div, dy.as<float>(), rows, n_vec,
               ids ? di.as<int32_t>() : NULL, accumulate, err));
    TRY(finish(t, err));
    return get(y, dy, (size_t)n_vec * (size_t)rows * 4, err);
}

extern "C" int k_test_gemv_swiglu(int gemv, int type, const void *gate, const void *up,
                                  int64_t rows, int64_t cols, int n_expert, const int32_t *ids,
                                  int x_div, const float *x, int n_x, int n_vec, float *y,
                                  struct gate_err *err)
{
    tstream t;
    dbuf dg, du, dx, dy, di;
    const size_t wb = (size_t)n_expert * (size_t)rows * quant_row_bytes(type, cols);
    TRY(start(t, err));
    t.ks.gemv = gemv;
    TRY(put(dg, gate, wb, err));
    TRY(put(du, up, wb, err));
    TRY(put(dx, x, (size_t)n_x * (size_t)cols * 4, err));
    TRY(put(dy, NULL, (size_t)n_vec * (size_t)rows * 4, err));
    if (ids)
        TRY(put(di, ids, (size_t)n_vec * 4, err));
    struct k_weight g = weight_view(type, dg, rows, cols, n_expert);
    struct k_weight u = weight_view(type, du, rows, cols, n_expert);
    TRY(k_gemv_swiglu(&t.ks, &g, &u, dx.as<float>(), cols, x_div, dy.as<float>(), rows, n_vec,
                      ids ? di.as<int32_t>() : NULL, err));
    TRY(finish(t, err));
    return get(y, dy, (size_t)n_vec * (size_t)rows * 4, err);
}

extern "C" int k_test_gemm(int type, const void *w, int64_t rows, int64_t cols, const float *x,
                           int n, int bf16, int accumulate, float *y, struct gate_err *err)
{
    tstream t;
    dbuf dw, dx, dy, tile, x16;
    struct k_gemm_ws ws;
    memset(&ws, 0, sizeof ws);
    TRY(start(t, err));
    TRY(put(dw, w, (size_t)rows * quant_row_bytes(type, cols), err));
    TRY(put(dx, x, (size_t)n * (size_t)cols * 4, err));
    TRY(put(dy, y, (size_t)n * (size_t)rows * 4, err));
    /* a small tile (a third of the rows) so that the tiling loop is exercised */
    ws.tile_elems = (size_t)cols * (size_t)(rows / 3 > 0 ? rows / 3 : 1);
    ws.x16_elems = (size_t)n * (size_t)cols;
    ws.f32 = bf16 == 2;
    ws.bf16 = bf16 == 1;
    TRY(put(tile, NULL, ws.tile_elems * (ws.f32 ? 4 : 2), err));
    TRY(put(x16, NULL, ws.x16_elems * 2, err));
    ws.tile = tile.p;
    ws.x16 = x16.p;
    K_BLAS(cublasCreate(&ws.blas));
    struct k_weight kw = weight_view(type, dw, rows, cols, 1);
    int rc =
        k_gemm(&t.ks, &ws, &kw, -1, dx.as<float>(), cols, n, dy.as<float>(), rows, accumulate, err);
    if (!rc)
        rc = finish(t, err);
    cublasDestroy(ws.blas);
    if (rc)
        return rc;
    return get(y, dy, (size_t)n * (size_t)rows * 4, err);
}

extern "C" int k_test_rmsnorm(const float *x, const float *w, int n, int E, float eps, float *y,
                              struct gate_err *err)
{
    tstream t;
    dbuf dx, dw, dy;
    TRY(start(t, err));
    TRY(put(dx, x, (size_t)n * E * 4, err));
    TRY(put(dw, w, (size_t)E * 4, err));
    TRY(put(dy, NULL, (size_t)n * E * 4, err));
    TRY(k_rmsnorm(&t.ks, dx.as<float>(), dw.as<float>(), dy.as<float>(), n, E, eps, err));
    TRY(finish(t, err));
    return get(y, dy, (size_t)n * E * 4, err);
}

/* Widen a cache of n_ctx rows of kvd elements (FP32 or FP16) to float on the host. */
static int get_cache(float *dst, const dbuf &b, size_t elems, int kv_f32, struct gate_err *err)
{
    if (kv_f32)
        return get(dst, b, elems * 4, err);
    uint16_t *h = (uint16_t *)malloc(elems * 2);
    if (!h)
        return err_set(err, ERR_ENV, "out of host memory");
    int rc = get(h, b, elems * 2, err);
    for (size_t i = 0; !rc && i < elems; i++)
        dst[i] = quant_fp16_to_f32(h[i]);
    free(h);
    return rc;
}

/* A graph of what `launch` enqueues on t's stream, with *dpos (device) read by the kernels: the
 * capture runs while *dpos holds `first` (never the position asked), then the graph is replayed
 * at `first` and at `pos0`, as the backend replays its decode graph at every position. The
 * launchers must not synchronize while capturing: debug is off for the capture. */
/* The position a graph is first replayed at: another one than pos0 whose n tokens fit n_ctx
 * (pos0 itself when none does). */
static int other_pos(int pos0, int n, int n_ctx)
{
    return pos0 > 0 ? pos0 - 1 : pos0 + 1 + n <= n_ctx ? pos0 + 1 : pos0;
}

template <class F>
static int graphed(tstream &t, int *dpos, int first, int pos0, F &&launch, struct gate_err *err)
{
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    K_CUDA(cudaMemcpy(dpos, &first, sizeof first, cudaMemcpyHostToDevice));
    K_CUDA(cudaDeviceSynchronize());
    t.ks.debug = 0;
    K_CUDA(cudaStreamBeginCapture(t.ks.s, cudaStreamCaptureModeThreadLocal));
    int rc = launch();
    cudaError_t e = cudaStreamEndCapture(t.ks.s, &g);
    t.ks.debug = 1;
    if (rc) {
        if (g)
            cudaGraphDestroy(g);
        return rc;
    }
    if (e != cudaSuccess)
        return k_fail_cuda(err, "cudaStreamEndCapture", __FILE__, __LINE__, e);
    e = cudaGraphInstantiate(&ge, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess)
        return k_fail_cuda(err, "cudaGraphInstantiate", __FILE__, __LINE__, e);
    const int at[2] = {first, pos0};
    for (int i = 0; i < 2 && e == cudaSuccess; i++) {
        e = cudaMemcpyAsync(dpos, &at[i], sizeof at[i], cudaMemcpyHostToDevice, t.ks.s);
        if (e == cudaSuccess)
            e = cudaGraphLaunch(ge, t.ks.s);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(t.ks.s);
    }
    cudaGraphExecDestroy(ge);
    if (e != cudaSuccess)
        return k_fail_cuda(err, "a replay of the captured graph", __FILE__, __LINE__, e);
    return 0;
}

extern "C" int k_test_qk_norm_rope(float *q, const float *k, const float *v, int n, int pos0,
                                   int layer, int nh, int nkv, int hd, const float *qn,
                                   const float *kn, float eps, const float *cs, const float *sn,
                                   int n_ctx, int kv_f32, const struct fault_set *faults, float *kc,
                                   float *vc, struct gate_err *err)
{
    return k_test_qk_norm_rope_at(0, q, k, v, n, pos0, layer, nh, nkv, hd, qn, kn, eps, cs, sn,
                                  n_ctx, kv_f32, faults, kc, vc, err);
}

extern "C" int k_test_qk_norm_rope_at(int graph, float *q, const float *k, const float *v, int n,
                                      int pos0, int layer, int nh, int nkv, int hd, const float *qn,
                                      const float *kn, float eps, const float *cs, const float *sn,
                                      int n_ctx, int kv_f32, const struct fault_set *faults,
                                      float *kc, float *vc, struct gate_err *err)
{
    tstream t;
    dbuf dq, dk, dv, dqn, dkn, dcs, dsn, dkc, dvc;
    const size_t kvd = (size_t)nkv * hd, cache = (size_t)n_ctx * kvd;
    TRY(start(t, err));
    TRY(put(dq, q, (size_t)n * nh * hd * 4, err));
    TRY(put(dk, k, (size_t)n * kvd * 4, err));
    TRY(put(dv, v, (size_t)n * kvd * 4, err));
    TRY(put(dqn, qn, (size_t)hd * 4, err));
    TRY(put(dkn, kn, (size_t)hd * 4, err));
    TRY(put(dcs, cs, (size_t)n_ctx * (hd / 2) * 4, err));
    TRY(put(dsn, sn, (size_t)n_ctx * (hd / 2) * 4, err));
    TRY(put(dkc, NULL, cache * (kv_f32 ? 4 : 2), err));
    TRY(put(dvc, NULL, cache * (kv_f32 ? 4 : 2), err));
    if (!graph) {
        TRY(k_qk_norm_rope_kv(&t.ks, dq.as<float>(), dk.as<float>(), dv.as<float>(), n, pos0, layer,
                              nh, nkv, hd, dqn.as<float>(), dkn.as<float>(), eps, dcs.as<float>(),
                              dsn.as<float>(), dkc.p, dvc.p, kv_f32, faults,
                              0.0f /* no base: a rope_shift fault is refused */, err));
    } else {
        /* q is rewritten in place: the first replay's q is restored before the second */
        dbuf dpos, dq0;
        TRY(put(dpos, NULL, sizeof(int), err));
        TRY(put(dq0, q, (size_t)n * nh * hd * 4, err));
        const size_t qb = (size_t)n * nh * hd * 4;
        TRY(graphed(
            t, dpos.as<int>(), other_pos(pos0, n, n_ctx), pos0,
            [&]() {
                K_CUDA(cudaMemcpyAsync(dq.p, dq0.p, qb, cudaMemcpyDeviceToDevice, t.ks.s));
                return k_qk_norm_rope_kv_at(
                    &t.ks, dq.as<float>(), dk.as<float>(), dv.as<float>(), n, -1, dpos.as<int>(),
                    layer, nh, nkv, hd, dqn.as<float>(), dkn.as<float>(), eps, dcs.as<float>(),
                    dsn.as<float>(), dkc.p, dvc.p, kv_f32, faults, 0.0f, err);
            },
            err));
        /* the first replay wrote K and V at other positions: the rows outside the asked ones
         * are zeroed again, so what comes back is comparable with the eager cache */
        const size_t row = (size_t)nkv * hd * (kv_f32 ? 4 : 2);
        const int other = other_pos(pos0, n, n_ctx);
        for (int p = other; p < other + n; p++)
            if (p < pos0 || p >= pos0 + n) {
                K_CUDA(cudaMemset((uint8_t *)dkc.p + (size_t)p * row, 0, row));
                K_CUDA(cudaMemset((uint8_t *)dvc.p + (size_t)p * row, 0, row));
            }
    }
    TRY(finish(t, err));
    TRY(get(q, dq, (size_t)n * nh * hd * 4, err));
    TRY(get_cache(kc, dkc, cache, kv_f32, err));
    return get_cache(vc, dvc, cache, kv_f32, err);
}

extern "C" int k_test_attention(const float *q, const float *kc, const float *vc, int kv_f32, int n,
                                int pos0, int nh, int nkv, int hd, int n_ctx, float *out,
                                struct gate_err *err)
{
    return k_test_attention_at(1, 0, q, kc, vc, kv_f32, n, pos0, nh, nkv, hd, n_ctx, 0, NULL, out,
                               err);
}

extern "C" int k_test_attention_at(int attn, int graph, const float *q, const float *kc,
                                   const float *vc, int kv_f32, int n, int pos0, int nh, int nkv,
                                   int hd, int n_ctx, int layer, const struct fault_set *faults,
                                   float *out, struct gate_err *err)
{
    tstream t;
    dbuf dq, dkc, dvc, dout;
    const size_t cache = (size_t)n_ctx * nkv * hd;
    TRY(start(t, err));
    TRY(k_attention_prepare(n_ctx, hd, err));
    TRY(put(dq, q, (size_t)n * nh * hd * 4, err));
    if (kv_f32) {
        TRY(put(dkc, kc, cache * 4, err));
        TRY(put(dvc, vc, cache * 4, err));
    } else {
        uint16_t *h = (uint16_t *)malloc(cache * 2 * 2);
        if (!h)
            return err_set(err, ERR_ENV, "out of host memory");
        for (size_t i = 0; i < cache; i++) {
            h[i] = quant_f32_to_fp16(kc[i]);
            h[cache + i] = quant_f32_to_fp16(vc[i]);
        }
        int rc = put(dkc, h, cache * 2, err);
        if (!rc)
            rc = put(dvc, h + cache, cache * 2, err);
        free(h);
        TRY(rc);
    }
    TRY(put(dout, NULL, (size_t)n * nh * hd * 4, err));
    t.ks.attn = attn;
    dbuf dpart, dpos;
    if (attn == 2)
        TRY(put(dpart, NULL,
                k_attention_split_floats(n, nh, graph ? n_ctx : pos0 + n, hd) * sizeof(float),
                err));
    if (!graph) {
        TRY(k_attention_at(&t.ks, dq.as<float>(), dkc.p, dvc.p, kv_f32, dout.as<float>(), n, pos0,
                           NULL, pos0 + n, nh, nkv, hd, layer, faults, dpart.as<float>(), err));
    } else {
        TRY(put(dpos, NULL, sizeof(int), err));
        TRY(graphed(
            t, dpos.as<int>(), other_pos(pos0, n, n_ctx), pos0,
            [&]() {
                return k_attention_at(&t.ks, dq.as<float>(), dkc.p, dvc.p, kv_f32, dout.as<float>(),
                                      n, -1, dpos.as<int>(), n_ctx, nh, nkv, hd, layer, faults,
                                      dpart.as<float>(), err);
            },
            err));
    }
    TRY(finish(t, err));
    return get(out, dout, (size_t)n * nh * hd * 4, err);
}

extern "C" int k_test_route(int route, const float *logits, int n, int X, int k, int layer,
                            int pos0, const struct fault_set *faults, int32_t *ids, float *w,
                            float *kth, float *k1th, struct gate_err *err)
{
    tstream t;
    dbuf dl, di, dw, dk, dk1;
    TRY(start(t, err));
    t.ks.route = route;
    TRY(put(dl, logits, (size_t)n * X * 4, err));
    TRY(put(di, NULL, (size_t)n * k * 4, err));
    TRY(put(dw, NULL, (size_t)n * k * 4, err));
    TRY(put(dk, NULL, (size_t)n * 4, err));
    TRY(put(dk1, NULL, (size_t)n * 4, err));
    TRY(k_route(&t.ks, dl.as<float>(), n, X, k, layer, pos0, faults, di.as<int32_t>(),
                dw.as<float>(), dk.as<float>(), dk1.as<float>(), err));
    TRY(finish(t, err));
    TRY(get(ids, di, (size_t)n * k * 4, err));
    TRY(get(w, dw, (size_t)n * k * 4, err));
    TRY(get(kth, dk, (size_t)n * 4, err));
    return get(k1th, dk1, (size_t)n * 4, err);
}

extern "C" int k_test_moe_sum(float *x, const float *w, const float *y, int n, int k, int E,
                              struct gate_err *err)
{
    tstream t;
    dbuf dx, dw, dy;
    TRY(start(t, err));
    TRY(put(dx, x, (size_t)n * E * 4, err));
    TRY(put(dw, w, (size_t)n * k * 4, err));
    TRY(put(dy, y, (size_t)n * k * E * 4, err));
    TRY(k_moe_sum(&t.ks, dx.as<float>(), dw.as<float>(), dy.as<float>(), n, k, E, err));
    TRY(finish(t, err));
    return get(x, dx, (size_t)n * E * 4, err);
}

extern "C" int k_test_embed(int type, const void *table, int64_t V, int64_t E,
                            const int32_t *tokens, int n, float *x, struct gate_err *err)
{
    tstream t;
    dbuf dt, dtok, dx;
    TRY(start(t, err));
    TRY(put(dt, table, (size_t)V * quant_row_bytes(type, E), err));
    TRY(put(dtok, tokens, (size_t)n * 4, err));
    TRY(put(dx, NULL, (size_t)n * E * 4, err));
    struct k_weight kw = weight_view(type, dt, V, E, 1);
    TRY(k_embed(&t.ks, &kw, dtok.as<int32_t>(), n, dx.as<float>(), err));
    TRY(finish(t, err));
    return get(x, dx, (size_t)n * E * 4, err);
}

extern "C" int k_test_argmax(const float *logits, int n, int V, int32_t *out, struct gate_err *err)
{
    tstream t;
    dbuf dl, dout;
    TRY(start(t, err));
    TRY(put(dl, logits, (size_t)n * V * 4, err));
    TRY(put(dout, NULL, (size_t)n * 4, err));
    TRY(k_argmax(&t.ks, dl.as<float>(), n, V, dout.as<int32_t>(), err));
    TRY(finish(t, err));
    return get(out, dout, (size_t)n * 4, err);
}

/* the CUDA backend's row's kernel tests (k_test.h; engine/backend.c's list points at it) */
extern "C" const struct backend_kernel_tests k_test_table = {
    k_test_device,          k_test_gemv,         k_test_gemv_swiglu, k_test_gemm,
    k_test_rmsnorm,         k_test_qk_norm_rope, k_test_attention,   k_test_attention_at,
    k_test_qk_norm_rope_at, k_test_route,        k_test_moe_sum,     k_test_embed,
    k_test_argmax,
};
