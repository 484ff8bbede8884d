/* cmd_synth.h — `gate model synth`: write a deterministic synthetic Qwen3 / Qwen3-MoE GGUF.
 * The work is engine/synth.c; this is argument parsing, the size check and progress display.
 */
#ifndef GATE_CMD_SYNTH_H
#define GATE_CMD_SYNTH_H

/* argv[0] is "synth". Returns the process exit code (0, 2 usage/input, 3 environment). */
int cmd_model_synth(int argc, char **argv);

#endif
