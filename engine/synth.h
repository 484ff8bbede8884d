/* synth.h — deterministic synthetic Qwen3 / Qwen3-MoE GGUF models (`gate model synth`).
 *
 * A model is a shape (struct synth_spec: a preset with the published shapes, or custom), a quant
 * mix (enum synth_quant, the llama-quantize type policy of FACTS.md §8) and a seed. Every weight
 * element is a pure function of (seed, tensor name, element index): a splitmix64 counter
 * generator feeding the polar Gaussian method in IEEE arithmetic only, so any tensor, row or block
 * can be produced independently, by any thread, with the same bits on every machine. The file is
 * written tensor by tensor through the GGUF writer's fill callback (memory: the largest tensor
 * plus one row per thread), atomically under its final name.
 * Fast mode (settled question 10) emits random but valid quantized blocks directly for
 * throughput runs on huge shapes; it is deterministic too and the metadata says so.
 * Start reading: synth_plan(), then synth_values(), then synth_write().
 */
#ifndef GATE_SYNTH_H
#define GATE_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The shape of a model; field meanings as struct model_hparams. */
struct synth_spec {
    const char *name; /* preset name, or "custom"; static string */
    enum model_arch arch;
    uint32_t n_vocab, n_ctx, n_embd, n_layer, n_head, n_head_kv, head_dim;
    uint32_t n_ff;                              /* dense FFN (qwen3; metadata only for MoE) */
    uint32_t n_expert, n_expert_used, n_ff_exp; /* qwen3moe */
    float rope_base, eps;
    int tied; /* 1: no output.weight, logits use token_embd */
};

/* Quant mixes, named as llama-quantize's ftypes (general.file_type in parentheses). */
enum synth_quant {
    SYNTH_F32 = 0, /* (0) every tensor F32 */
    SYNTH_F16,     /* (1) 2-D weights F16; norms and router F32 */
    SYNTH_BF16,    /* (32) 2-D weights BF16; norms and router F32 */
    SYNTH_Q8_0,    /* (7) */
    SYNTH_Q4_K_M,  /* (15) */
    SYNTH_Q5_K_M,  /* (17) */
    SYNTH_Q6_K,    /* (18) */
    SYNTH_QUANT_COUNT,
};

struct synth_options {
    struct synth_spec spec;
    int quant; /* enum synth_quant */
    uint32_t seed;
    int fast_blocks;       /* 1: random valid blocks, no quantization (throughput runs) */
    int n_threads;         /* 0 = online CPUs; never changes a byte of the output */
    const char *tokenizer; /* tokenizer.json.gz for the Qwen3 vocabulary; NULL = default */
};

/* The generator's recipe for one tensor: element values are mean + sigma * N(0,1). */
struct synth_tensor {
    char name[GGUF_MAX_NAME];
    int type; /* enum quant_type, from the quant policy */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* missing dims are 1 */
    int64_t n_elements;
    uint64_t nbytes;
    double mean, sigma;
    uint64_t key; /* the counter generator's key for this tensor: f(seed, name) */
};

/* Presets, in a fixed order; *n receives the count. Static storage. */
const struct synth_spec *synth_presets(int *n);

/* The preset called name, or NULL. */
const struct synth_spec *synth_preset_find(const char *name);

/* "Q4_K_M" etc. (case-insensitive) -> enum synth_quant, or -1. */
int synth_quant_from_name(const char *name);
const char *synth_quant_name(int quant); /* "Q4_K_M"; "?" when out of range */
uint32_t synth_file_type(int quant);     /* general.file_type */

/* The tokenizer used when options.tokenizer is NULL: $GATE_SHARED/tokenizers/qwen3/
 * tokenizer.json.gz, else the ../shared folder next to the source tree. Static buffer. */
const char *synth_default_tokenizer(void);

/* Check everything before a byte is written: architecture, positive sizes, head counts that
 * divide, even head_dim, experts_used <= experts, a vocabulary size gate can provide, every row
 * length a multiple of the chosen block size (256 for the K-quant mixes), eps and rope base in
 * range. ERR_INPUT with a sentence naming the flag and the values. */
int synth_validate(const struct synth_options *o, struct gate_err *err);

/* The tensor list in file order with types, shapes, byte sizes and generator scales.
 * *out is malloc'd (caller frees), *n its length. Validates first. */
int synth_plan(const struct synth_options *o, struct synth_tensor **out, int *n,
               struct gate_err *err);

/* The generator's float values of elements [begin, begin + n) of t (flat index, ne[0]
 * contiguous) into out (n). Pure: depends only on t->key, mean, sigma and the indices. */
void synth_values(const struct synth_tensor *t, int64_t begin, int64_t n, float *out);

/* n standard Gaussian values for (key, begin..begin+n) with the same generator. */
void synth_gaussian(uint64_t key, int64_t begin, int64_t n, float *out);

/* The generator key of a tensor name under a seed. */
uint64_t synth_tensor_key(uint32_t seed, const char *name);

/* Exact size in bytes of the file synth_write() would produce. vocab_bytes: the size of the
 * tokenizer metadata if already known (the same for every quant of one vocabulary), or -1 to
 * compute it (for the Qwen3 vocabulary that reads the tokenizer file). *vocab_out (may be
 * NULL) receives it for the next call. */
int synth_file_bytes(const struct synth_options *o, int64_t vocab_bytes, uint64_t *bytes,
                     int64_t *vocab_out, struct gate_err *err);

/* Progress after each tensor: bytes of tensor data produced so far and in all, the tensor just
 * produced (index i of n). Called on the writing thread. */
typedef void (*synth_progress_fn)(void *ctx, uint64_t done, uint64_t total, int i, int n,
                                  const char *tensor);

/* Write the model to path atomically: on any failure (bad options, unwritable folder, full
 * disk) nothing is left under path and no temporary file remains. Memory: the largest tensor's
 * bytes plus one row of floats per thread. progress may be NULL. ERR_INPUT for bad options,
 * ERR_ENV for I/O and memory. */
int synth_write(const struct synth_options *o, const char *path, synth_progress_fn progress,
                void *progress_ctx, struct gate_err *err);

/* The same into a malloc'd buffer (tests; *buf caller frees). */
int synth_write_mem(const struct synth_options *o, uint8_t **buf, size_t *size,
                    struct gate_err *err);

#ifdef __cplusplus
}
#endif
#endif
