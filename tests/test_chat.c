/* test_chat.c — the C Qwen3 chat template against jinja2's rendering of the published template.
 *
 * tests/data/tokenizer_expected_chat.json is written by tests/data/gen_tokenizer_expected.py
 * (jinja2 running tokenizer_config.json's chat_template as transformers does).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"

#define EXPECTED GATE_SOURCE_DIR "/tests/data/tokenizer_expected_chat.json"

Test(chat, renders_exactly_what_the_jinja_template_renders)
{
    json_error_t jerr;
    json_t *root = json_load_file(EXPECTED, 0, &jerr);
    cr_assert_not_null(root, "%s: %s (line %d)", EXPECTED, jerr.text, jerr.line);
    json_t *cases = json_object_get(root, "cases"), *c;
    size_t i, n_pass = 0;
    cr_assert_geq(json_array_size(cases), 10);
    json_array_foreach(cases, i, c)
    {
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *want = json_string_value(json_object_get(c, "expected"));
        json_t *jm = json_object_get(c, "messages");
        size_t n = json_array_size(jm);
        struct chat_msg *msgs = calloc(n ? n : 1, sizeof *msgs);
        cr_assert_not_null(msgs);
        for (size_t k = 0; k < n; k++) {
            msgs[k].role = json_string_value(json_object_get(json_array_get(jm, k), "role"));
            msgs[k].content = json_string_value(json_object_get(json_array_get(jm, k), "content"));
        }
        struct gate_err err = {0};
        char *out = NULL;
        int rc = chat_format(
            msgs, (int)n, (int)json_integer_value(json_object_get(c, "add_generation_prompt")),
            (int)json_integer_value(json_object_get(c, "enable_thinking")), &out, &err);
        cr_expect_eq(rc, 0, "%s: %s", name, err.msg);
        if (rc == 0) {
            size_t k = 0;
            while (out[k] && out[k] == want[k])
                k++;
            if (out[k] == want[k])
                n_pass++;
            else
                cr_expect_fail(
                    "%s: first difference at byte %zu\n--- got ---\n%s\n--- want ---\n%s", name, k,
                    out, want);
        }
        free(out);
        free(msgs);
    }
    fprintf(stderr, "chat: %zu/%zu renderings match jinja2\n", n_pass, json_array_size(cases));
    json_decref(root);
}

Test(chat, rejects_an_unknown_role)
{
    struct chat_msg m[2] = {{"user", "hi"}, {"narrator", "once upon a time"}};
    struct gate_err err = {0};
    char *out = (char *)"sentinel";
    cr_expect_eq(chat_format(m, 2, 1, 1, &out, &err), ERR_INPUT);
    cr_expect_null(out);
    cr_expect(strstr(err.msg, "'narrator'") && strstr(err.msg, "message 1"), "message: %s",
              err.msg);
}

Test(chat, rejects_no_messages_and_missing_fields)
{
    struct gate_err err = {0};
    char *out = NULL;
    cr_expect_eq(chat_format(NULL, 0, 1, 1, &out, &err), ERR_INPUT);
    err_clear(&err);
    struct chat_msg m[1] = {{"user", NULL}};
    cr_expect_eq(chat_format(m, 1, 1, 1, &out, &err), ERR_INPUT);
    cr_expect(strstr(err.msg, "content"), "message: %s", err.msg);
}

Test(chat, generation_prompt_in_non_thinking_mode_has_the_empty_think_block)
{
    struct chat_msg m[1] = {{"user", "Hi"}};
    struct gate_err err = {0};
    char *out = NULL;
    cr_assert_eq(chat_format(m, 1, 1, 0, &out, &err), 0, "%s", err.msg);
    cr_expect_str_eq(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                          "<think>\n\n</think>\n\n");
    free(out);
}
