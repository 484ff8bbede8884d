/* cmd_oracle.h — the oracle commands for investigations: `gate parity` and `gate falsify`.
 * Each takes argv after the binary name (argv[0] is the subcommand) and returns the exit code
 * of DESIGN.md settled question 6: 0 pass, 1 judged failure, 2 usage or input error, 3
 * environment error (e.g. a cuda mode on a host without the CUDA backend).
 */
#ifndef GATE_CMD_ORACLE_H
#define GATE_CMD_ORACLE_H

/* gate parity MODEL.gguf --mode MODE [--positions N] [--tokens FILE] [--threads N]
 *            [--fault SPEC]... [--min-cosine X] [--max-mean-kld X] [--max-kld X]
 *            [--near-tie X] [--json FILE] */
int cmd_parity(int argc, char **argv);

/* gate falsify MODEL.gguf --mode MODE --fault KIND[,KIND...] [--layers L] [--positions P]
 *             [--sweep] [--clean-runs N] [--length N] [--tokens FILE] [--threads N]
 *             [threshold options as parity] [--json FILE] */
int cmd_falsify(int argc, char **argv);

#endif
