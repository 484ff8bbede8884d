/* llama.h (test stand-in) — the part of llama.cpp's C API that adapters/llama_cpp.c calls, with
 * the real signatures, typedefs and enum values (llama.cpp as bundled in llama-cpp-python
 * 0.3.36), so the adapter compiles unchanged against it as the test-only target
 * gate-llama-stub (CMakeLists.txt). The structs carry only the fields the adapter touches (it
 * sets params by name, after the *_default_params() call, as real callers do).
 * Implemented by tests/llama_stub/llama_stub.c: deterministic, cheap behaviour that the tests
 * predict (tests/llama_stub/llama_stub.h) and failures injected through the environment.
 * Not the real llama.cpp: never installed, never linked into gate-llama.
 */
#ifndef GATE_LLAMA_STUB_LLAMA_H
#define GATE_LLAMA_STUB_LLAMA_H

#include "ggml.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t llama_pos;
typedef int32_t llama_token;
typedef int32_t llama_seq_id;

struct llama_model;
struct llama_context;
struct llama_vocab;
typedef struct llama_memory_i *llama_memory_t;

enum llama_flash_attn_type {
    LLAMA_FLASH_ATTN_TYPE_AUTO = -1,
    LLAMA_FLASH_ATTN_TYPE_DISABLED = 0,
    LLAMA_FLASH_ATTN_TYPE_ENABLED = 1,
};

typedef struct llama_batch {
    int32_t n_tokens;
    llama_token *token;
    float *embd;
    llama_pos *pos;
    int32_t *n_seq_id;
    llama_seq_id **seq_id;
    int8_t *logits; /* nonzero: output logits for this token */
} llama_batch;

struct llama_model_params {
    ggml_backend_dev_t *devices; /* NULL-terminated; NULL: every device */
    int32_t n_gpu_layers;
    bool use_extra_bufts; /* repacked weight buffers */
};

struct llama_context_params {
    uint32_t n_ctx;
    uint32_t n_batch;
    uint32_t n_ubatch;
    uint32_t n_seq_max;
    int32_t n_threads;
    int32_t n_threads_batch;
    enum llama_flash_attn_type flash_attn_type;
    enum ggml_type type_k;
    enum ggml_type type_v;
    bool embeddings;
    bool offload_kqv;
    bool no_perf;
    bool op_offload;
};

const char *llama_flash_attn_type_name(enum llama_flash_attn_type flash_attn_type);

struct llama_model_params llama_model_default_params(void);
struct llama_context_params llama_context_default_params(void);

const char *llama_version(void);
void llama_backend_init(void);
void llama_backend_free(void);
void llama_log_set(ggml_log_callback log_callback, void *user_data);
const char *llama_print_system_info(void);

struct llama_model *llama_model_load_from_file_ptr(FILE *file, struct llama_model_params params);
void llama_model_free(struct llama_model *model);
struct llama_context *llama_init_from_model(struct llama_model *model,
                                            struct llama_context_params params);
void llama_free(struct llama_context *ctx);

uint32_t llama_n_ctx(const struct llama_context *ctx);
uint32_t llama_n_batch(const struct llama_context *ctx);
uint32_t llama_n_ubatch(const struct llama_context *ctx);
const struct llama_vocab *llama_model_get_vocab(const struct llama_model *model);
int32_t llama_vocab_n_tokens(const struct llama_vocab *vocab);
llama_memory_t llama_get_memory(const struct llama_context *ctx);
bool llama_memory_seq_rm(llama_memory_t mem, llama_seq_id seq_id, llama_pos p0, llama_pos p1);

struct llama_batch llama_batch_init(int32_t n_tokens, int32_t embd, int32_t n_seq_max);
void llama_batch_free(struct llama_batch batch);
int32_t llama_decode(struct llama_context *ctx, struct llama_batch batch);
float *llama_get_logits_ith(struct llama_context *ctx, int32_t i);

#ifdef __cplusplus
}
#endif
#endif
