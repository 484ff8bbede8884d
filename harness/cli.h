/* cli.h — the `gate` subcommands. Each cmd_* takes argv after its own name (argv[0] is the
 * subcommand name) and returns a process exit code (DESIGN.md settled question 6:
 * 0 pass, 1 judged failure, 2 usage/input error, 3 environment error).
 */
#ifndef GATE_CLI_H
#define GATE_CLI_H

int cmd_model(int argc, char **argv);    /* model inspect */
int cmd_eval(int argc, char **argv);     /* eval */
int cmd_generate(int argc, char **argv); /* generate */
int cmd_bench(int argc, char **argv);    /* bench */

/* Print "gate: <msg>" to stderr and return the exit code for code. */
int cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
