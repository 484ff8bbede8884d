/* judgecache.h — the judge's results, cached content-addressed (issue 26 §3: a judge that keeps
 * up). The reference twin stays the simple, exact specification; what it computes for one
 * plain judge run is a pure function of (this binary, the model's bytes, the roundings it
 * emulates, the tokens, which taps were asked for, which rows were kept), so a run of the same
 * inputs — the same parity sequence judged for every cell of one model, or for a cell's gates one
 * after the other — is read back instead of recomputed.
 *
 * Invariants:
 * - the key is the SHA-256 of all of those inputs; "this binary" is its own SHA-256 (any change
 *   of code, even uncommitted, is another key: a stale entry can never be hit);
 * - only plain runs are cached: no faults active, no forced routes (the route-tie replay), a
 *   model loaded through a pin (its digest known) and a known emulation; anything else runs as
 *   before and is counted as not cacheable;
 * - an entry is verified on read: its header's key must equal the key asked and the SHA-256 of
 *   its payload the header's; a mismatch (a corrupted or truncated file) is counted, the result
 *   recomputed and the entry rewritten — never used;
 * - a hit leaves the judge's KV cache empty (n_past 0): a caller that would continue from the
 *   judged positions gets the backend's "pos0 != n_past" error, never a silent wrong state;
 * - entries are written whole (a temporary file renamed into place), in a folder per binary
 *   (the first 16 hex of its digest); the three most recently used binaries' folders are kept,
 *   older ones removed at open (a rebuilt gate's entries can never be hit again); entries larger
 *   than the cap (GATE_JUDGE_CACHE_MAX_MB, default 1024) are not written.
 * One cache per process (the harness opens it for a run); closed, nothing is cached.
 * Start reading: judgecache_open(), judgecache_judge().
 */
#ifndef GATE_JUDGECACHE_H
#define GATE_JUDGECACHE_H

#include "base/err.h"
#include "engine/backend.h"

struct judgecache_stats {
    int hits, misses, corrupt, uncacheable, stored;
    double saved_s; /* the compute time the hits' entries record: what recomputing would cost */
    double spent_s; /* compute time of the misses */
};

/* Cache judge results in folder dir (created), keyed with binary_sha256 (64 hex). ERR_ENV when
 * the folder cannot be made. Replaces an open cache (its statistics are reset). */
int judgecache_open(const char *dir, const char *binary_sha256, struct gate_err *err);
void judgecache_close(void);
/* The statistics since the last open; all 0 when none is open. */
void judgecache_stats(struct judgecache_stats *out);

/* oracles/mode.c's mode_judge_kept through the cache: mode_forward_kept of the n tokens on the
 * judge b (its cache truncated to 0 first) writing logits and taps (every row, or the rows of
 * keep: struct mode_keep), or the same bytes read back from a verified entry. The key holds the
 * kept positions. Without an open cache, exactly the plain run. */
struct mode_keep;
int judgecache_judge(struct backend *b, const int32_t *tokens, int n, const struct mode_keep *keep,
                     float *logits, const struct backend_taps *taps, struct gate_err *err);

#endif
