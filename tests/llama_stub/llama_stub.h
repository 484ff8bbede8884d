/* llama_stub.h — what the llama.cpp stand-in (tests/llama_stub/llama_stub.c) promises the tests
 * (tests/test_llama_cpp.c): the logits it computes, the text it reports about itself, and the
 * environment variables that steer it. The stand-in implements tests/llama_stub/llama.h and
 * ggml.h, and is linked into gate-llama-stub, adapters/llama_cpp.c built against it.
 *
 * The model: a vocabulary of $GATE_STUB_N_VOCAB tokens (the file only has to start with "GGUF";
 * nothing else of it is read), and a cache of token ids for sequence 0. The logits after the
 * token at position p depend on every token at 0..p (a running hash), like a real causal model:
 * a cache the adapter let go wrong (not truncated, not cleaned after a failed decode) gives other
 * numbers or an error, never the predicted ones.
 * Start reading: llama_stub_logit().
 */
#ifndef GATE_LLAMA_STUB_H
#define GATE_LLAMA_STUB_H

#include <stdint.h>

#define LLAMA_STUB_VERSION "0.0.0-stub"
#define LLAMA_STUB_GGML_VERSION "0.0.0-ggml-stub"
#define LLAMA_STUB_GGML_COMMIT "5tub5tub"
/* what llama_print_system_info returns unless $GATE_STUB_SYSINFO says otherwise (the real
 * format: "CPU : NAME = 0|1 | ..."); the adapter turns it into "cpu (SSE3 SSSE3 AVX2 FMA)" */
#define LLAMA_STUB_SYSINFO "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 0 | AVX2 = 1 | F16C = 0 | FMA = 1 | "

/* The environment (read once, by llama_backend_init):
 *   GATE_STUB_N_VOCAB=N     the vocabulary size (1..1048576); without it no model loads
 *   GATE_STUB_N_CTX=N       the context holds N positions, whatever the caller asked for
 *   GATE_STUB_SYSINFO=TEXT  llama_print_system_info's text
 *   GATE_STUB_FAIL=WHAT     comma-separated failures to inject:
 *       load        llama_model_load_from_file_ptr returns NULL (logged as an error)
 *       context     llama_init_from_model returns NULL
 *       decode@N    the Nth llama_decode call (1-based) returns 2 ("aborted") with its tokens
 *                   left in the cache, as llama.cpp leaves processed ubatches
 *       logits@I    llama_get_logits_ith(ctx, I) returns NULL
 *       seq_rm      llama_memory_seq_rm of part of a sequence returns false
 *       stdout      write stray text to stdout (descriptor 1) at load and at every decode, as a
 *                   stray printf inside a library would
 * What it was asked for is written to stderr, one line per load and per context:
 *   "llama-stub: model n_gpu_layers=0 devices=none use_extra_bufts=1"
 *   "llama-stub: context n_ctx=64 n_batch=5 n_ubatch=5 n_seq_max=1 threads=2/2 type_k=f16
 *    type_v=f16 flash_attn=auto embeddings=0 offload_kqv=0 op_offload=0"
 * and through the log callback, at load: an INFO line "llama-stub: info: loading", a WARN line
 * "llama-stub: warn: this is a stub" followed by a CONT line " (continued)\n", and a DEBUG line. */

static inline uint32_t llama_stub_mix(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

/* The running hash of the cache: h(-1) = LLAMA_STUB_H0, h(p) = step(h(p-1), token at p, p). */
#define LLAMA_STUB_H0 0x811c9dc5u
static inline uint32_t llama_stub_step(uint32_t h, int32_t token, int32_t pos)
{
    return llama_stub_mix(h ^ llama_stub_mix((uint32_t)token * 0x9e3779b1u + (uint32_t)pos));
}

/* The logit of vocabulary entry v after a prefix whose hash is h: a multiple of 1/4096 in
 * [-8, 8), exact in float32. */
static inline float llama_stub_logit(uint32_t h, int32_t v)
{
    uint32_t x = llama_stub_mix(h ^ ((uint32_t)v * 0x27d4eb2fu + 1u));
    return (float)((int32_t)(x & 0xffffu) - 32768) / 4096.0f;
}

#endif
