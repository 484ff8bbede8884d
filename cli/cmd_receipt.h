/* cmd_receipt.h — the `gate key` and `gate receipt` commands (receipts/ is their library).
 * Each takes argv after the binary name (argv[0] = "key" / "receipt") and returns a process exit
 * code: 0 ok, 1 verification failure, 2 usage/input error, 3 environment error.
 */
#ifndef GATE_CMD_RECEIPT_H
#define GATE_CMD_RECEIPT_H

/* gate key gen --host ID [-o FILE] [--pub FILE.pub] | gate key pub FILE [--pub FILE.pub] */
int cmd_key(int argc, char **argv);

/* gate receipt list|show|verify|export|import ... (see RECEIPT_USAGE in cmd_receipt.c) */
int cmd_receipt(int argc, char **argv);

#endif
