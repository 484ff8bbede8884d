/* distribution.h — is a model's next-token distribution something the KL bounds can see into?
 *
 * Parity judges KL(judge || subject) per position. How much KL a logit error produces depends on
 * the judge's own distribution: a uniform logit scale error (a softmax temperature T = 1 + e)
 * moves KL by about (e^2 / 2) * Var_p(z) — the varentropy, the log-partition function's
 * curvature. On a near-one-hot distribution (the first real-shape synthetic presets: entropy
 * 1e-8 nats, top-1 1.000) Var_p(z) ~ 1e-9 and no bug that keeps the argmax moves KL above any
 * threshold: the KL bounds are vacuous there, whatever they are set to.
 *
 * The criterion (docs/synth.md, "Degenerate distributions"): a model is degenerate for a cell
 * when, at the median judged position, the cell's max_kld cannot see a 25 % temperature error —
 * KL(p || softmax(z / 1.25)) < max_kld. KL is parity's coarse, probability-space oracle (the
 * rel-L2 bounds and the power probe see the 1 % errors); if a quarter off in temperature stays
 * under it at half the positions, KL sees nothing an argmax-keeping bug does. Healthy
 * distributions (entropy ~1-4 nats) give that probe KL ~0.05-0.1, 5-10x the default max_kld
 * 1e-2; the degenerate presets gave 1e-10 and below.
 *
 * Pure functions over logits; distribution_of_model() runs the reference twin for them.
 * Start reading: distribution_positions(), distribution_degenerate().
 */
#ifndef GATE_DISTRIBUTION_H
#define GATE_DISTRIBUTION_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DIST_PROBE_TEMP 1.25 /* the temperature error the criterion asks KL to see */

/* One position's figures (natural logarithms). */
struct dist_pos {
    double entropy;    /* H(p), nats */
    double top1;       /* the largest probability */
    double varentropy; /* Var_p(log p) = Var_p(z): KL's curvature for a temperature error */
    double probe_kl;   /* KL(p || softmax(z / DIST_PROBE_TEMP)), nats */
};

struct dist_summary {
    int n; /* positions; 0: not measured */
    double entropy_min, entropy_median, entropy_max;
    double top1_min, top1_median, top1_max;
    double varentropy_median;
    double probe_kl_median;
    int n_nonfinite; /* positions with a non-finite logit (left out of the figures) */
};

/* The figures of one position's logits z (n_vocab). A non-finite logit gives NAN everywhere. */
void distribution_pos(const float *z, int n_vocab, struct dist_pos *out);

/* distribution_pos() for n_pos rows of logits (position-major) into out (n_pos, may be NULL)
 * and their summary into *s (medians over the finite positions). ERR_ENV out of memory. */
int distribution_positions(const float *logits, int n_pos, int n_vocab, struct dist_pos *out,
                           struct dist_summary *s, struct gate_err *err);

/* 1 when s is degenerate for a cell judged with max_kld (the criterion above), with a sentence
 * naming the figures into why (n bytes; "" when healthy or not measured). 0 otherwise, and 0
 * when nothing was measured. */
int distribution_degenerate(const struct dist_summary *s, double max_kld, char *why, size_t n);

/* The receipt's record (metrics.distribution): positions, entropy and top1 {min, median, max},
 * varentropy_median, probe {temperature, kl_median}, max_kld, degenerate, reason. */
json_t *distribution_json(const struct dist_summary *s, double max_kld);

/* Load the model at path, run the reference twin over n deterministic token ids
 * (mode_tokens(seed, ...)) and summarize the distributions at every position. ERR_INPUT/ERR_ENV
 * as model_load and the backend say. */
int distribution_of_model(const char *path, uint64_t seed, int n, int threads,
                          struct dist_summary *s, struct gate_err *err);

#ifdef __cplusplus
}
#endif
#endif
