/* ggml.h (test stand-in) — the few ggml declarations adapters/llama_cpp.c uses, with the types
 * and enum values of the real ggml.h / ggml-backend.h (ggml 0.25, llama.cpp's tree), so that the
 * adapter compiles unchanged against tests/llama_stub/ (the include folder of the test-only
 * target gate-llama-stub; CMakeLists.txt). Only what the adapter calls is declared; a call the
 * adapter adds later without a stub fails the stub build, which is the point.
 * Implemented by tests/llama_stub/llama_stub.c. Not the real ggml: never installed.
 */
#ifndef GATE_LLAMA_STUB_GGML_H
#define GATE_LLAMA_STUB_GGML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum ggml_log_level {
    GGML_LOG_LEVEL_NONE = 0,
    GGML_LOG_LEVEL_DEBUG = 1,
    GGML_LOG_LEVEL_INFO = 2,
    GGML_LOG_LEVEL_WARN = 3,
    GGML_LOG_LEVEL_ERROR = 4,
    GGML_LOG_LEVEL_CONT = 5, /* continues the previous message */
};

typedef void (*ggml_log_callback)(enum ggml_log_level level, const char *text, void *user_data);

/* the real enum has ~40 members; the adapter names two (their real values) */
enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
};

typedef struct ggml_backend_device *ggml_backend_dev_t;

const char *ggml_version(void);
const char *ggml_commit(void);
const char *ggml_type_name(enum ggml_type type);

#ifdef __cplusplus
}
#endif
#endif
