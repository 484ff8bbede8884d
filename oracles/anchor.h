/* anchor.h — the anchor gate: the judge itself on trial (issue 10 §1).
 *
 * Every other gate compares a mode with the reference twin; nothing there can notice a twin that
 * is wrong in the same way as the engine. An anchor case is a model, its token ids and the logits
 * (and optionally a greedy continuation) that an engine which is not gate computed for them, each
 * file pinned by SHA-256 in the ladder. anchor_run() runs the judge exactly as the other gates
 * use it (the ref twin's batched whole-sequence forward, mode_judge(), no faults) on the anchor's
 * tokens and compares with the reference through the parity math (parity_judge(): per-position
 * cosine, KL, argmax classes MATCH / TIE_FLIP / WRONG) plus the NMSE over all logits; with a
 * greedy continuation it also decodes greedily through the KV cache after `after` prompt tokens
 * and compares id by id. anchor_judge() turns settings + metrics into checks and a verdict, the
 * same way everywhere (oracles/gates.h). docs/gates.md ("anchor") has the math and thresholds.
 * Start reading: anchor_run(), then anchor_judge().
 */
#ifndef GATE_ANCHOR_H
#define GATE_ANCHOR_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"
#include "oracles/gates.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A pinned file: read once, through one descriptor, and refused unless its bytes hash to
 * sha256 (64 lower-case hex digits). Both strings are borrowed. */
struct anchor_file {
    const char *path;
    const char *sha256;
};

/* One anchor case as the ladder states it. All strings borrowed. */
struct anchor_spec {
    const char *id;            /* the anchor's ladder id (messages only) */
    const char *arch;          /* the architecture it anchors: "qwen3" or "qwen3moe" */
    struct anchor_file model;  /* GGUF */
    struct anchor_file tokens; /* whitespace-separated token ids, one position each */
    struct anchor_file logits; /* float32 LE, (n_pos, n_vocab) position-major */
    struct anchor_file greedy; /* greedy ids after greedy_after prompt tokens; path NULL = none */
    int greedy_after;          /* prompt length of the greedy continuation (>= 1 when greedy) */
    double max_nmse;           /* NMSE = sum (twin - ref)^2 / sum ref^2 over all logits, <= this */
    double min_cosine;         /* every position's logit cosine >= this */
    double near_tie;           /* argmax flips where the reference's margin < this are TIE_FLIP */
};

/* The settings a receipt records for the anchor gate (new reference): {"arch", "max_nmse",
 * "min_cosine", "near_tie", "model_sha256", "tokens_sha256", "logits_sha256", "greedy_sha256"
 * ("" when none), "greedy_after" (0 when none)}. The release check compares a receipt's copy
 * with the one made from the current ladder, so a changed threshold or reference file is STALE. */
json_t *anchor_settings_json(const struct anchor_spec *s);

/* The logit part of the metrics: compare twin with reference (both (n_pos, n_vocab)) and add to
 * metrics "n_pos", "n_vocab", "nmse", "max_abs_diff", "min_cosine", "min_cosine_pos",
 * "mean_cosine", "mean_kld", "max_kld", "n_match", "n_tie_flip", "n_wrong", "n_nonfinite",
 * "first_wrong_pos", "first_nonfinite_pos" (-1 when none). Non-finite numbers are recorded as
 * "NaN" / "Inf" strings. Pure. ERR_INPUT when n_pos < PARITY_MIN_POSITIONS or n_vocab < 5 (the
 * parity math's own bounds), ERR_ENV when out of memory. */
int anchor_logit_metrics(const float *reference, const float *twin, int n_pos, int n_vocab,
                         double near_tie, json_t *metrics, struct gate_err *err);

/* Run the anchor case: read every file of s once through a pinned descriptor (a digest other than
 * the pin is ERR_INPUT naming the file, both digests and the anchor), check the model's
 * architecture against s->arch, run the judge (ref backend, no faults, n_threads workers) over
 * all tokens in one batched forward, and, when s->greedy.path is set, greedy-decode through the
 * KV cache. *metrics (new reference, NULL on error) holds anchor_logit_metrics()'s keys plus
 * "backend", "device" (what ran), "arch" (the model's), "model_sha256", "tokens_sha256",
 * "logits_sha256", "greedy_sha256" (the digests of the bytes actually read; "" when no greedy),
 * and with a greedy file "greedy_after", "greedy_expected", "greedy_matched" (ids equal before
 * the first difference), "greedy_first_diff" (-1 when none). Returns 0 when a comparison was
 * made, whatever its outcome; else ERR_INPUT / ERR_ENV with err set. */
int anchor_run(const struct anchor_spec *s, int n_threads, json_t **metrics, struct gate_err *err);

/* What anchor_run() checks before it runs the judge, through the same code: every file opened
 * once and matched against its pin, the model loaded and of s->arch, the token and greedy files
 * parsed against its vocabulary, the logits file's size, greedy.after within the tokens. 0, or
 * anchor_run()'s ERR_INPUT / ERR_ENV. `gate ladder check` and `gate run` call it for every
 * anchor (ladder_check_files), so a missing or mismatched anchor file is an input error, never
 * a signed FAIL anchor receipt. */
int anchor_check(const struct anchor_spec *s, struct gate_err *err);

/* The anchor gate's judge (gate_judge_fn): from settings (anchor_settings_json's keys) and
 * metrics (anchor_run's keys) alone. Checks: backend == "ref"; arch and every digest equal to
 * the settings'; n_pos >= 64; n_nonfinite <= 0; nmse <= max_nmse; min_cosine >= min_cosine;
 * n_wrong <= 0; with a greedy file (settings greedy_sha256 not ""): greedy_after equal to the
 * settings', greedy_expected >= 1 and greedy_matched >= greedy_expected. A FAIL's why starts with
 * "the judge itself is wrong" and names the first failing check with value and threshold. */
enum gate_verdict anchor_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                               char *why, size_t n);

#ifdef __cplusplus
}
#endif
#endif
