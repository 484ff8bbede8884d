/* cmd_stats.h — `gate model stats`'s distribution verdict for `gate ladder check`.
 *
 * For every model of a ladder whose file exists, the reference twin's next-token distributions
 * over STATS_LADDER_POSITIONS ids of the parity sequence's seed (oracles/distribution.h): one
 * line of figures on stdout, and a warning on stderr naming the model and the figures for each
 * of its cells' max_kld the distributions are degenerate for (never an error: the run records
 * the same verdict in each parity receipt, metrics.distribution). A model not written yet is
 * listed as not measured. Cost: one twin forward of that many positions per model.
 */
#ifndef GATE_CMD_STATS_H
#define GATE_CMD_STATS_H

#include "harness/ladder.h"

#define STATS_LADDER_POSITIONS 16

void stats_ladder_distributions(const struct ladder *l, int threads);

#endif
