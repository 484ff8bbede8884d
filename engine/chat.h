/* chat.h — Qwen3's chat template (ChatML with <think> handling) written out in C, no Jinja.
 *
 * Reproduces tokenizer_config.json's chat_template of the Qwen3 models for messages without
 * tools, tool calls or a separate reasoning_content field: the same bytes the Jinja template
 * renders (tests/test_chat.c compares against renderings made by jinja2). Start reading:
 * chat_format().
 */
#ifndef GATE_CHAT_H
#define GATE_CHAT_H

#include "base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One turn. role: "system", "user", "assistant" or "tool"; content: NUL-terminated UTF-8. Both
 * borrowed for the duration of the call. */
struct chat_msg {
    const char *role;
    const char *content;
};

/* Render msgs[0..n) as the Qwen3 template does:
 *  - a first system message becomes "<|im_start|>system\n...<|im_end|>\n"; a later one is
 *    rendered like a user turn;
 *  - user turns "<|im_start|>user\n...<|im_end|>\n";
 *  - assistant turns: content after the last "</think>" (leading newlines dropped) with the
 *    reasoning removed, except for turns after the last real user query, which keep their
 *    reasoning in a "<think>\n...\n</think>\n\n" block (the final turn always gets one);
 *  - consecutive tool messages share one user turn of <tool_response> blocks;
 *  - add_generation_prompt appends "<|im_start|>assistant\n", and with enable_thinking = 0 also
 *    the empty "<think>\n\n</think>\n\n" block (non-thinking mode).
 * *out is malloc'd and NUL-terminated (caller frees). n < 1 (the template needs messages[0]),
 * an unknown role or a NULL role/content is ERR_INPUT naming the message index; out of memory
 * is ERR_ENV. */
int chat_format(const struct chat_msg *msgs, int n, int add_generation_prompt, int enable_thinking,
                char **out, struct gate_err *err);

#ifdef __cplusplus
}
#endif
#endif
