/* cublas_lazy.c — cuBLAS loaded on first use, not at process start.
 *
 * Linking libcublas (and with it libcublasLt, about half a gigabyte) made every gate process pay
 * ~0.8 s before main() on a host without a GPU (measured: `gate --version` 0.83 s in the CUDA
 * build against 0.035 s without; mostly the kernel mapping and faulting in the libraries' data
 * for their 362,634 relative relocations). The fault loop runs gate ~500 times. The CUDA
 * backend calls six cuBLAS functions; this file defines them, and each forwards to the library
 * opened with dlopen on the first call. When the library cannot be opened, every function
 * answers CUBLAS_STATUS_NOT_INITIALIZED and cublasGetStatusString() says why. */
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define STR_(x) #x
#define STR(x) STR_(x)

static void *lib;
static char why[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
    /* the loader's search path first, then the toolkit folder the build found (a host whose
     * ldconfig does not list it) */
    static const char *const names[] = {"libcublas.so." STR(CUBLAS_VER_MAJOR),
#ifdef GATE_CUBLAS_DIR
                                        GATE_CUBLAS_DIR "/libcublas.so." STR(CUBLAS_VER_MAJOR),
#endif
                                        "libcublas.so"};
    for (size_t i = 0; !lib && i < sizeof names / sizeof names[0]; i++)
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        snprintf(why, sizeof why, "cannot load cuBLAS (%s): %s", names[0], dlerror());
}

static void *sym(const char *name)
{
    pthread_once(&once, load);
    return lib ? dlsym(lib, name) : NULL;
}

/* FORWARD(ret, name, params, args, fail): define name, forwarding to the library's */
#define FORWARD(ret, name, params, args, fail)                                                     \
    ret CUBLASWINAPI name params                                                                   \
    {                                                                                              \
        static ret(CUBLASWINAPI *f) params;                                                        \
        if (!f)                                                                                    \
            *(void **)&f = sym(#name);                                                             \
        return f ? f args : (fail);                                                                \
    }

FORWARD(cublasStatus_t, cublasCreate_v2, (cublasHandle_t * h), (h), CUBLAS_STATUS_NOT_INITIALIZED)
FORWARD(cublasStatus_t, cublasDestroy_v2, (cublasHandle_t h), (h), CUBLAS_STATUS_NOT_INITIALIZED)
FORWARD(cublasStatus_t, cublasSetStream_v2, (cublasHandle_t h, cudaStream_t s), (h, s),
        CUBLAS_STATUS_NOT_INITIALIZED)
FORWARD(const char *, cublasGetStatusName, (cublasStatus_t s), (s), "CUBLAS_STATUS_UNKNOWN")
FORWARD(const char *, cublasGetStatusString, (cublasStatus_t s), (s),
        why[0] ? why : "cuBLAS could not be loaded")
FORWARD(cublasStatus_t, cublasGemmEx,
        (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
         const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
         cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
         cublasComputeType_t computeType, cublasGemmAlgo_t algo),
        (h, ta, tb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, computeType,
         algo),
        CUBLAS_STATUS_NOT_INITIALIZED)
