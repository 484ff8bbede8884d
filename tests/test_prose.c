/* test_prose.c — the prose in parity's inputs (oracles/prose.h) and the sequence parity_tokens()
 * builds from it: fresh per seed, text-like, within the vocabulary, the same prefix whatever its
 * length, and the conformance sequence when no run seed is given. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "engine/synth.h"
#include "engine/tokenizer.h"
#include "oracles/mode.h"
#include "oracles/parity.h"
#include "oracles/prose.h"
#include "support/check.h"

static char *text_of(uint64_t seed, int words)
{
    char *s = NULL;
    struct gate_err err = {0};
    cr_assert_eq(prose_text(seed, words, &s, &err), 0, "%s", err.msg);
    return s;
}

static int count_words(const char *s)
{
    int n = 0;
    for (const char *c = s; *c; c++)
        n += !isspace((unsigned char)*c) && (c == s || isspace((unsigned char)c[-1]));
    return n;
}

Test(prose, the_text_is_whole_capitalized_sentences_of_printable_words)
{
    for (uint64_t seed = 1; seed <= 20; seed++) {
        char *s = text_of(seed, 200);
        const size_t len = strlen(s);
        cr_expect_geq(count_words(s), 200, "seed %llu: %d words", (unsigned long long)seed,
                      count_words(s));
        cr_expect(isupper((unsigned char)s[0]), "seed %llu starts '%.20s'",
                  (unsigned long long)seed, s);
        cr_expect_eq(s[len - 1], '.', "seed %llu ends mid-sentence: '%s'", (unsigned long long)seed,
                     s + (len > 30 ? len - 30 : 0));
        for (size_t i = 0; i < len; i++) {
            cr_expect(isprint((unsigned char)s[i]) || s[i] == '\n', "byte %zu is 0x%02x", i,
                      (unsigned char)s[i]);
            if (i >= 2 && s[i - 2] == '.' && s[i - 1] == ' ')
                cr_expect(!islower((unsigned char)s[i]), "a sentence starts lower-case at %zu", i);
        }
        free(s);
    }
}

Test(prose, each_seed_gives_its_own_text_and_the_same_seed_the_same_text)
{
    char *a = text_of(7, 120), *b = text_of(7, 120), *c = text_of(8, 120);
    cr_expect_str_eq(a, b);
    cr_expect_str_neq(a, c);
    free(a);
    free(b);
    free(c);
}

/* Fresh, not the corpus read out: the chain jumps between sentences, so sentences end (none
 * longer than 60 words: the chain's long-sentence stop) and 50 walks of 100 words hold more than
 * 150 of them. */
Test(prose, a_walk_leaves_its_sentence_for_another_often)
{
    int joins = 0, words = 0;
    for (uint64_t seed = 1; seed <= 50; seed++) {
        char *s = text_of(seed, 100);
        int len = 0;
        for (char *w = strtok(s, " \n"); w; w = strtok(NULL, " \n")) {
            words++;
            len++;
            if (w[strlen(w) - 1] == '.') {
                cr_expect_leq(len, 60, "seed %llu: a sentence of %d words",
                              (unsigned long long)seed, len);
                joins++;
                len = 0;
            }
        }
        free(s);
    }
    cr_expect_gt(joins, 50 * 3, "%d sentences in %d words", joins, words);
}

Test(prose, tokens_are_exactly_n_ids_of_the_model_s_tokenizer_within_its_vocabulary)
{
    uint8_t *buf = NULL;
    struct model *m = check_tiny_model("tiny-dense", &buf);
    struct tok *t = NULL;
    struct gate_err err = {0};
    cr_assert_eq(tok_load(&t, m->gguf, &err), 0, "%s", err.msg);
    int32_t ids[300];
    for (uint64_t seed = 1; seed <= 5; seed++) {
        memset(ids, 0xff, sizeof ids);
        cr_assert_eq(prose_tokens(t, seed, m->hp.n_vocab, 300, ids, &err), 0, "%s", err.msg);
        for (int i = 0; i < 300; i++)
            cr_expect(ids[i] >= 0 && (uint32_t)ids[i] < m->hp.n_vocab, "id %d at %d", ids[i], i);
        char *back = NULL;
        size_t blen = 0;
        cr_assert_eq(tok_decode(t, ids, 300, &back, &blen, &err), 0, "%s", err.msg);
        char *want = text_of(seed, 300);
        cr_expect(blen > 0 && !strncmp(back, want, blen), "decoded '%.60s' is not the prose", back);
        free(want);
        free(back);
    }
    cr_expect_eq(prose_tokens(t, 1, 200, 300, ids, &err), ERR_INPUT,
                 "ids past a smaller embedding table were accepted");
    cr_expect(strstr(err.msg, "embedding table"), "%s", err.msg);
    tok_free(t);
    model_free(m);
    free(buf);
}

/* parity_tokens(): a run's seed mixes prose into random ids, about half of each, in segments;
 * every prefix is the same whatever the length asked for (falsify's sweep asks for fewer
 * tokens than parity); no seed gives the conformance sequence, unchanged. */
Test(prose, a_run_s_sequence_is_half_prose_in_segments_and_the_same_prefix_at_any_length)
{
    uint8_t *buf = NULL;
    struct model *m = check_tiny_model("tiny-dense", &buf);
    struct gate_err err = {0};
    enum { N = 1200 };
    static int32_t a[N], b[N], ids[N];
    static uint8_t is_prose[N], is_prose_b[N];
    for (uint64_t seed = 1; seed <= 8; seed++) {
        struct parity_config c = {.token_seed = seed * 0x9e37};
        int n_prose = -1, n_prose_b = -1;
        cr_assert_eq(parity_tokens(&c, m, N, a, &n_prose, is_prose, &err), 0, "%s", err.msg);
        cr_assert_eq(parity_tokens(&c, m, 333, b, &n_prose_b, is_prose_b, &err), 0, "%s", err.msg);
        cr_expect_arr_eq(a, b, 333 * sizeof *a, "seed %llu: the prefix changed with the length",
                         (unsigned long long)seed);
        cr_expect_arr_eq(is_prose, is_prose_b, 333, "the prose marks changed with the length");
        int counted = 0, runs = 0;
        for (int i = 0; i < N; i++) {
            counted += is_prose[i];
            runs += is_prose[i] && (i == 0 || !is_prose[i - 1]);
            cr_expect(a[i] >= 0 && (uint32_t)a[i] < m->hp.n_vocab);
        }
        cr_expect_eq(counted, n_prose);
        cr_expect(n_prose > N * 3 / 10 && n_prose < N * 7 / 10, "seed %llu: %d of %d prose",
                  (unsigned long long)seed, n_prose, N);
        cr_expect_geq(runs, 4, "prose in %d segments", runs);
        /* the random segments are mode_tokens(seed)'s ids at those positions */
        mode_tokens(c.token_seed, m->hp.n_vocab, N, ids);
        for (int i = 0; i < N; i++)
            if (!is_prose[i])
                cr_expect_eq(a[i], ids[i], "position %d", i);
    }
    struct parity_config none = {0};
    int n_prose = -1;
    cr_assert_eq(parity_tokens(&none, m, N, a, &n_prose, NULL, &err), 0);
    mode_tokens(PARITY_TOKEN_SEED, m->hp.n_vocab, N, ids);
    cr_expect_arr_eq(a, ids, sizeof a, "the conformance sequence changed");
    cr_expect_eq(n_prose, 0);
    model_free(m);
    free(buf);
}

/* prose_chat(): six messages, user and assistant in turn, each a short cut of fresh prose ending
 * in '.' or '?', within its word range; a seed's own conversation, the same for the same seed. */
Test(prose, a_conversation_is_six_short_messages_of_fresh_prose_in_turn)
{
    struct gate_err err = {0};
    int asks = 0;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        struct chat_msg a[PROSE_CHAT_MSGS], b[PROSE_CHAT_MSGS], c[PROSE_CHAT_MSGS];
        char *sa = NULL, *sb = NULL, *sc = NULL;
        cr_assert_eq(prose_chat(seed, 1, a, &sa, &err), 0, "%s", err.msg);
        cr_assert_eq(prose_chat(seed, 1, b, &sb, &err), 0, "%s", err.msg);
        cr_assert_eq(prose_chat(seed + 1000, 1, c, &sc, &err), 0, "%s", err.msg);
        int differ = 0;
        for (int i = 0; i < PROSE_CHAT_MSGS; i++) {
            const char *s = a[i].content;
            const size_t len = strlen(s);
            const int user = i % 2 == 0, words = count_words(s);
            cr_expect_str_eq(a[i].role, user ? "user" : "assistant");
            cr_expect(user ? words >= 8 && words <= 20 : words >= 3 && words <= 14,
                      "seed %llu message %d has %d words: '%s'", (unsigned long long)seed, i, words,
                      s);
            cr_expect(isupper((unsigned char)s[0]), "'%s'", s);
            cr_expect(s[len - 1] == '.' || (user && s[len - 1] == '?'), "'%s'", s);
            asks += s[len - 1] == '?';
            for (size_t k = 0; k < len; k++)
                cr_expect(isprint((unsigned char)s[k]), "byte 0x%02x in '%s'", (unsigned char)s[k],
                          s);
            cr_expect_str_eq(s, b[i].content);
            differ += strcmp(s, c[i].content) != 0;
        }
        cr_expect_geq(differ, 5, "seed %llu and another gave %d different messages of 6",
                      (unsigned long long)seed, differ);
        struct chat_msg l[PROSE_CHAT_MSGS];
        char *sl = NULL;
        cr_assert_eq(prose_chat(seed, 4, l, &sl, &err), 0, "%s", err.msg);
        cr_expect_geq(count_words(l[0].content), 32, "scale 4: '%s'", l[0].content);
        free(sa);
        free(sb);
        free(sc);
        free(sl);
    }
    cr_expect(asks > 5 && asks < 55, "%d of 60 user messages ask", asks);
}

/* parity_chat_tokens(): no run seed gives the fixed conversation, unchanged; a run's seed its own
 * conversation in the model's chat template — six turns cut at <|im_start|>, at least the 64
 * positions parity needs, each seed another — which is what chat cells are judged on. */
Test(prose, a_run_s_chat_is_a_fresh_conversation_in_the_model_s_template)
{
    uint8_t *buf = NULL;
    struct model *m = check_tiny_model("tiny-dense", &buf);
    struct tok *t = NULL;
    struct gate_err err = {0};
    cr_assert_eq(tok_load(&t, m->gguf, &err), 0, "%s", err.msg);
    const int32_t im_start = tok_find(t, "<|im_start|>");
    int32_t *fx = NULL, *fx2 = NULL, *prev = NULL;
    int *fe = NULL, *fe2 = NULL, nf = 0, nf2 = 0, ft = 0, ft2 = 0, fb = -1, fb2 = -1, nprev = 0;
    struct parity_config none = {0};
    cr_assert_eq(parity_chat_tokens(&none, m, &fx, &nf, &fe, &ft, &fb, &err), 0, "%s", err.msg);
    cr_assert_eq(mode_chat_for_model(m, &fx2, &nf2, &fe2, &ft2, &fb2, &err), 0, "%s", err.msg);
    cr_expect_eq(nf, nf2);
    cr_expect_arr_eq(fx, fx2, (size_t)nf * sizeof *fx, "no seed: not the fixed conversation");
    cr_expect_eq(fb, 0);
    for (uint64_t seed = 1; seed <= 6; seed++) {
        struct parity_config c = {.token_seed = seed * 0x5eed};
        int32_t *ids = NULL, *again = NULL;
        int *ends = NULL, *ends2 = NULL, n = 0, n2 = 0, turns = 0, turns2 = 0, f = -1, f2 = -1;
        cr_assert_eq(parity_chat_tokens(&c, m, &ids, &n, &ends, &turns, &f, &err), 0, "%s",
                     err.msg);
        cr_assert_eq(parity_chat_tokens(&c, m, &again, &n2, &ends2, &turns2, &f2, &err), 0);
        cr_expect_eq(f, 0, "seed %llu fell back to random ids", (unsigned long long)seed);
        cr_expect_eq(turns, 6);
        cr_expect_geq(n, PARITY_MIN_POSITIONS);
        cr_expect_eq(ids[0], im_start);
        for (int i = 0; i + 1 < turns; i++)
            cr_expect_eq(ids[ends[i]], im_start, "turn %d does not end at <|im_start|>", i);
        cr_expect_eq(ends[turns - 1], n);
        cr_expect(n2 == n && !memcmp(ids, again, (size_t)n * sizeof *ids), "not reproducible");
        cr_expect(n != nf || memcmp(ids, fx, (size_t)n * sizeof *ids),
                  "seed %llu: the fixed conversation", (unsigned long long)seed);
        cr_expect(!prev || n != nprev || memcmp(ids, prev, (size_t)n * sizeof *ids),
                  "seed %llu: the previous seed's conversation", (unsigned long long)seed);
        for (int i = 0; i < n; i++)
            cr_expect(ids[i] >= 0 && (uint32_t)ids[i] < m->hp.n_vocab);
        /* the text of the first user turn is prose_chat's first message */
        struct chat_msg msgs[PROSE_CHAT_MSGS];
        char *store = NULL, *text = NULL;
        size_t len = 0;
        cr_assert_eq(prose_chat(c.token_seed, 1, msgs, &store, &err), 0);
        cr_assert_eq(tok_decode(t, ids, ends[0], &text, &len, &err), 0, "%s", err.msg);
        cr_expect(strstr(text, msgs[0].content), "turn 0 '%s' lacks '%s'", text, msgs[0].content);
        free(text);
        free(store);
        free(prev);
        prev = ids;
        nprev = n;
        free(again);
        free(ends);
        free(ends2);
    }
    free(prev);
    free(fx);
    free(fx2);
    free(fe);
    free(fe2);
    tok_free(t);
    model_free(m);
    free(buf);
}

/* The text segments of a run's sequence take turns being plain prose and a chat request (the
 * model's ChatML, <|im_start|> first): an engine wrong only where the context holds chat tokens,
 * or only where it holds none, meets both in the gate's decode and prefill cells. Three runs in
 * four hold a chat request within 64 positions; a long sequence always holds both kinds. */
Test(prose, a_run_s_sequence_holds_chat_requests_and_plain_prose)
{
    uint8_t *buf = NULL;
    struct model *m = check_tiny_model("tiny-dense", &buf);
    struct tok *t = prose_model_tok(m);
    cr_assert(t);
    const int32_t im_start = tok_find(t, "<|im_start|>");
    cr_assert_geq(im_start, 0);
    struct gate_err err = {0};
    enum { N = 1200 };
    static int32_t ids[N];
    static uint8_t is_prose[N];
    int short_with_chat = 0, chat_first = 0;
    for (uint64_t seed = 1; seed <= 100; seed++) {
        struct parity_config c = {.token_seed = seed * 0x9e3779b97f4a7c15ull};
        cr_assert_eq(parity_tokens(&c, m, N, ids, NULL, is_prose, &err), 0, "%s", err.msg);
        int chat_segments = 0, plain_segments = 0, has = 0;
        for (int i = 0; i < N; i++) {
            has |= i < 64 && ids[i] == im_start;
            if (!is_prose[i] || (i > 0 && is_prose[i - 1]))
                continue;
            /* a text segment starts here: a chat one starts with <|im_start|> */
            int j = i, chat = 0;
            while (j < N && is_prose[j])
                chat |= ids[j++] == im_start;
            cr_expect_eq(chat, ids[i] == im_start, "seed %llu: a chat segment at %d starts %d",
                         (unsigned long long)seed, i, ids[i]);
            chat_segments += chat;
            plain_segments += !chat;
            chat_first += i == 0 && chat;
        }
        cr_expect(chat_segments >= 2 && plain_segments >= 2, "seed %llu: %d chat, %d plain",
                  (unsigned long long)seed, chat_segments, plain_segments);
        short_with_chat += has;
    }
    cr_expect(short_with_chat >= 60 && short_with_chat <= 95,
              "%d of 100 runs hold a chat request within 64 positions", short_with_chat);
    cr_expect(chat_first >= 30 && chat_first <= 70, "%d of 100 start with a chat", chat_first);
    tok_free(t);
    model_free(m);
    free(buf);
}
