/* chat.c — the Qwen3 chat template in C (see chat.h for the rules it reproduces).
 *
 * Each branch below names the line of the Jinja template it mirrors. Python's str methods that
 * the template uses (split, lstrip('\n'), rstrip('\n'), strip('\n')) become byte ranges over the
 * content, so nothing is copied until it is appended. Start reading: chat_format().
 */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
};

static void put(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void puts_(struct sbuf *b, const char *s)
{
    put(b, s, strlen(s));
}

/* A byte range [s, e). */
struct span {
    const char *s, *e;
};

static struct span lstrip_nl(struct span x)
{
    while (x.s < x.e && *x.s == '\n')
        x.s++;
    return x;
}

static struct span rstrip_nl(struct span x)
{
    while (x.e > x.s && x.e[-1] == '\n')
        x.e--;
    return x;
}

/* Last occurrence of needle in x, or NULL. */
static const char *find_last(struct span x, const char *needle)
{
    size_t n = strlen(needle), len = (size_t)(x.e - x.s);
    if (len < n)
        return NULL;
    for (size_t k = len - n + 1; k-- > 0;)
        if (memcmp(x.s + k, needle, n) == 0)
            return x.s + k;
    return NULL;
}

static int has_prefix(const char *s, const char *pre)
{
    return strncmp(s, pre, strlen(pre)) == 0;
}

static int has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && memcmp(s + n - m, suf, m) == 0;
}

static int is_role(const struct chat_msg *m, const char *role)
{
    return strcmp(m->role, role) == 0;
}

int chat_format(const struct chat_msg *msgs, int n, int add_generation_prompt, int enable_thinking,
                char **out, struct gate_err *err)
{
    struct sbuf b = {0};
    int rc = 0;
    *out = NULL;
    if (n <= 0) { /* the template indexes messages[0], which Jinja refuses on an empty list */
        rc = err_set(err, ERR_INPUT, "no chat messages to format");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            rc = err_set(err, ERR_INPUT, "chat message %d has no %s", i,
                         msgs[i].role ? "content" : "role");
            goto done;
        }
        if (!is_role(&msgs[i], "system") && !is_role(&msgs[i], "user") &&
            !is_role(&msgs[i], "assistant") && !is_role(&msgs[i], "tool")) {
            rc = err_set(err, ERR_INPUT,
                         "chat message %d has role '%s'; the Qwen3 template knows system, user, "
                         "assistant and tool",
                         i, msgs[i].role);
            goto done;
        }
    }

    /* {%- if messages[0].role == 'system' %} */
    if (is_role(&msgs[0], "system")) {
        puts_(&b, "<|im_start|>system\n");
        puts_(&b, msgs[0].content);
        puts_(&b, "<|im_end|>\n");
    }
    /* ns.last_query_index: the last user message that is not a wrapped tool response. */
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        const char *c = msgs[i].content;
        if (is_role(&msgs[i], "user") &&
            !(has_prefix(c, "<tool_response>") && has_suffix(c, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    for (int i = 0; i < n; i++) {
        const struct chat_msg *m = &msgs[i];
        if (is_role(m, "user") || (is_role(m, "system") && i > 0)) {
            puts_(&b, "<|im_start|>");
            puts_(&b, m->role);
            puts_(&b, "\n");
            puts_(&b, m->content);
            puts_(&b, "<|im_end|>\n");
        } else if (is_role(m, "assistant")) {
            struct span all = {m->content, m->content + strlen(m->content)};
            struct span content = all, reasoning = {all.s, all.s};
            const char *close = strstr(all.s, "</think>");
            if (close) {
                /* content = split('</think>')[-1].lstrip('\n') */
                const char *last = find_last(all, "</think>");
                content = lstrip_nl((struct span){last + 8, all.e});
                /* reasoning = split('</think>')[0].rstrip('\n').split('<think>')[-1]
                 *             .lstrip('\n') */
                reasoning = rstrip_nl((struct span){all.s, close});
                const char *open = find_last(reasoning, "<think>");
                if (open)
                    reasoning.s = open + 7;
                reasoning = lstrip_nl(reasoning);
            }
            puts_(&b, "<|im_start|>assistant\n");
            if (i > last_query && (i == n - 1 || reasoning.e > reasoning.s)) {
                struct span r = rstrip_nl(lstrip_nl(reasoning));
                content = lstrip_nl(content);
                puts_(&b, "<think>\n");
                put(&b, r.s, (size_t)(r.e - r.s));
                puts_(&b, "\n</think>\n\n");
            }
            put(&b, content.s, (size_t)(content.e - content.s));
            puts_(&b, "<|im_end|>\n");
        } else if (is_role(m, "tool")) {
            if (i == 0 || !is_role(&msgs[i - 1], "tool"))
                puts_(&b, "<|im_start|>user");
            puts_(&b, "\n<tool_response>\n");
            puts_(&b, m->content);
            puts_(&b, "\n</tool_response>");
            if (i == n - 1 || !is_role(&msgs[i + 1], "tool"))
                puts_(&b, "<|im_end|>\n");
        }
    }
    if (add_generation_prompt) {
        puts_(&b, "<|im_start|>assistant\n");
        if (!enable_thinking)
            puts_(&b, "<think>\n\n</think>\n\n");
    }
    put(&b, "", 0);
    if (b.oom) {
        rc = err_set(err, ERR_ENV, "out of memory formatting %d chat messages", n);
        goto done;
    }
    *out = b.p;
    b.p = NULL;
done:
    free(b.p);
    return rc;
}
