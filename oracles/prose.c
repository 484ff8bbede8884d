/* prose.c — fresh English-like text: a word-bigram chain over a built-in corpus (prose.h). */
#include "oracles/prose.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/detmath.h"
#include "oracles/mode.h"

/* The corpus: plain sentences on everyday things, written for gate. The chain only needs words
 * that recur in different company, so that a walk leaves one sentence for another often. */
static const char CORPUS[] =
    "The river runs past the old mill and turns toward the town before it reaches the sea. "
    "In the morning the market opens early, and the farmers bring bread, cheese and apples from "
    "the hills. A small boat waits at the end of the pier while the fishermen mend their nets. "
    "The train to the city leaves every hour, but on a Sunday it stops at every station. "
    "Children walk to school along the river, and in winter the path is covered with snow. "
    "The library keeps the letters of the first families who built the town. "
    "My grandmother kept a garden behind the house, with beans, onions and a row of tall "
    "sunflowers. She said that a good garden needs patience more than water. "
    "When the wind comes from the north, the boats stay in the harbour and the cafes fill up. "
    "The bridge was built of stone two hundred years ago and has never been closed. "
    "A good map shows the roads, the rivers and the height of the hills, but it cannot show "
    "the weather. The baker starts work at four in the morning and sells the last loaf by noon. "
    "Most of the houses on the hill have red roofs and small windows that face the sea. "
    "In the evening the light turns gold and the swallows fly low over the water. "
    "The teacher asked the class to write a short story about a journey they would like to "
    "take. One boy wrote about a ship that sailed to the edge of the world and found another "
    "town just like his own. The doctor visits the villages in the valley once a week. "
    "People say that the winter was colder when they were young, but the records do not agree. "
    "A clock in the square strikes every hour, and the pigeons rise from the roof of the church. "
    "The museum has a room full of old tools, and each one has a card that explains its use. "
    "If you follow the path beyond the farm, you reach a lake where the water is clear and cold. "
    "The cook at the inn makes a soup of fish, potatoes and cream that travellers remember for "
    "years. Her brother repairs bicycles in a shed behind the station. "
    "On market days the square is so full that the buses have to wait at the edge of town. "
    "The mayor wants a new road to the coast, but many people would rather keep the old one. "
    "Every spring the river floods the low fields, and every summer the fields are greener for "
    "it. The old man at the corner sells newspapers and knows everyone by name. "
    "A letter from the city took three days to arrive, because the post goes round by the hills. "
    "The students climbed the hill to watch the stars, and one of them brought a small "
    "telescope. They saw the moons of a planet and drew them in a notebook. "
    "Rain fell all night, and in the morning the streets were washed clean. "
    "The carpenter builds tables from the oak trees that fall in the storms. "
    "Some visitors come for the walking, and others come for the food and the quiet. "
    "The harbour master writes the name of every ship that enters in a large green book. "
    "When the festival begins, the streets are lit with lanterns and music plays until late. "
    "A farmer on the hill keeps sheep, and in spring the lambs run along the stone walls. "
    "The school has a choir that sings in the church at the end of every year. "
    "It is a long walk to the next village, but the view from the top of the pass is worth it. "
    "The shop on the corner sells everything from nails and rope to coffee and postcards. "
    "Most evenings the fishermen sit outside the cafe and talk about the weather and the sea. "
    "The first snow came early this year, and the children built a wall of snow across the lane. "
    "Her father taught her to read the clouds, so she always knew when the rain would come. "
    "A young engineer from the city came to measure the bridge and said it would stand for "
    "another century. The water in the well is sweet, and people come from far away to fill "
    "their bottles. At night the lighthouse turns its lamp, and the ships find their way home. "
    "The town council meets on the first Monday of the month in a room above the bakery. "
    "He kept a diary for forty years, and each page records the weather, the prices and the "
    "news. The orchard behind the school gives more apples than the town can eat. "
    "In the autumn the leaves turn red and yellow, and the hills look as if they were on fire. "
    "The bus driver waits for the last passenger, even when the bus is already late. "
    "A storm in the night broke the branches of the old tree in the square. "
    "The next morning everyone came to help, and by noon the square was clear again. ";

/* The corpus cut into words (pointers into a private copy, NUL-terminated), and for each word
 * the next occurrence of the same word (a ring): the chain's successors of word w are the words
 * after each occurrence of w. Built once, then read-only. */
static struct {
    char *text;
    const char **word;
    int *same_next;
    int n;
} chain;

static void chain_build(void)
{
    char *text = strdup(CORPUS);
    int cap = 0;
    for (const char *c = CORPUS; *c; c++)
        cap += *c == ' ';
    const char **word = malloc((size_t)(cap + 1) * sizeof *word);
    int *same_next = malloc((size_t)(cap + 1) * sizeof *same_next);
    if (!text || !word || !same_next) {
        free(text);
        free(word);
        free(same_next);
        return; /* chain.n stays 0: prose_text() reports it */
    }
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(text, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
        word[n++] = tok;
    for (int i = 0; i < n; i++) {
        int j = (i + 1) % n;
        while (strcmp(word[j], word[i]))
            j = (j + 1) % n;
        same_next[i] = j;
    }
    chain.text = text;
    chain.word = word;
    chain.same_next = same_next;
    chain.n = n;
}

static int ends_sentence(const char *w)
{
    const size_t len = strlen(w);
    return len && w[len - 1] == '.';
}

/* A word that starts a sentence in the corpus, drawn from st. */
static int sentence_start(uint64_t *st)
{
    for (;;) {
        const int i = (int)(det_splitmix64(st) % (uint64_t)chain.n);
        if (i == 0 || ends_sentence(chain.word[i - 1]))
            return i;
    }
}

/* The word after w in the chain: the word after a random occurrence of w; at the corpus's end, a
 * new sentence. A sentence already `long` ends at the first occurrence of w that a full stop
 * follows, where there is one (the chain alone wanders through "and" and "the" for 70 words). */
static int chain_next(int w, int long_sentence, uint64_t *st)
{
    int hops = (int)(det_splitmix64(st) % 8);
    while (hops--)
        w = chain.same_next[w];
    if (long_sentence)
        for (int v = w, first = 1; first || v != w; v = chain.same_next[v], first = 0)
            if (v + 1 < chain.n && ends_sentence(chain.word[v + 1]))
                return v + 1;
    return w + 1 < chain.n ? w + 1 : sentence_start(st);
}

int prose_text(uint64_t seed, int words, char **out, struct gate_err *err)
{
    *out = NULL;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, chain_build);
    if (!chain.n)
        return err_set(err, ERR_ENV, "prose: out of memory for the corpus");
    size_t cap = 64, len = 0;
    char *s = malloc(cap);
    if (!s)
        return err_set(err, ERR_ENV, "prose: out of memory");
    uint64_t st = seed ^ 0x9e3779b97f4a7c15ull;
    int w = sentence_start(&st), sentences = 0, in_sentence = 0;
    for (int k = 0; k < words || !ends_sentence(chain.word[w]); k++) {
        if (k)
            w = chain_next(w, in_sentence >= 25, &st);
        in_sentence = ends_sentence(chain.word[w]) ? 0 : in_sentence + 1;
        const char *word = chain.word[w];
        const size_t wl = strlen(word);
        if (len + wl + 3 > cap) {
            char *grown = realloc(s, cap = 2 * (len + wl + 3));
            if (!grown) {
                free(s);
                return err_set(err, ERR_ENV, "prose: out of memory");
            }
            s = grown;
        }
        if (len) {
            const int paragraph = s[len - 1] == '.' && ++sentences % 5 == 0;
            s[len++] = paragraph ? '\n' : ' ';
            if (paragraph)
                s[len++] = '\n';
        }
        memcpy(s + len, word, wl);
        if (len == 0 || s[len - 2] == '.' || s[len - 1] == '\n')
            if (s[len] >= 'a' && s[len] <= 'z')
                s[len] = (char)(s[len] - 'a' + 'A');
        len += wl;
    }
    s[len] = 0;
    *out = s;
    return 0;
}

int prose_tokens(const struct tok *t, uint64_t seed, uint32_t n_vocab, int n, int32_t *out,
                 struct gate_err *err)
{
    int words = n > 8 ? n : 8;
    for (;;) {
        char *text = NULL;
        int32_t *ids = NULL;
        int nids = 0, rc;
        if ((rc = prose_text(seed, words, &text, err)))
            return rc;
        rc = tok_encode(t, text, strlen(text), 0, &ids, &nids, err);
        free(text);
        if (rc)
            return rc;
        if (nids >= n) {
            for (int i = 0; i < n; i++)
                if (ids[i] < 0 || (uint32_t)ids[i] >= n_vocab) {
                    rc = err_set(err, ERR_INPUT,
                                 "prose: the tokenizer gives id %d, past the model's %u-token"
                                 " embedding table",
                                 (int)ids[i], n_vocab);
                    free(ids);
                    return rc;
                }
            memcpy(out, ids, (size_t)n * sizeof *out);
            free(ids);
            return 0;
        }
        free(ids);
        words *= 2;
    }
}

#define PROSE_SALT 0x70726f7365ull /* "prose": the segment schedule's stream */
#define PROSE_SEG_MIN 16
#define PROSE_SEG_SPAN 33 /* segments of 16..48 tokens: 64 positions hold two at least */

/* Exactly n ids of a fresh conversation (prose_chat(seed)) in t's ChatML, special tokens parsed:
 * what a chat request looks like, <|im_start|> first. ERR_INPUT when t has no <|im_start|> or an
 * id is past n_vocab (the caller keeps plain prose there). */
static int chat_segment_tokens(const struct tok *t, uint64_t seed, uint32_t n_vocab, int n,
                               int32_t *out, struct gate_err *err)
{
    if (tok_find(t, "<|im_start|>") < 0)
        return err_set(err, ERR_INPUT, "prose: the tokenizer has no <|im_start|>");
    for (int scale = 1;; scale *= 2) {
        struct chat_msg msgs[PROSE_CHAT_MSGS];
        char *store = NULL, *text = NULL;
        int32_t *ids = NULL;
        int nids = 0;
        int rc = prose_chat(seed, scale, msgs, &store, err);
        if (!rc)
            rc = chat_format(msgs, PROSE_CHAT_MSGS, 0, 0, &text, err);
        if (!rc)
            rc = tok_encode(t, text, strlen(text), 1, &ids, &nids, err);
        free(store);
        free(text);
        if (rc)
            return rc;
        if (nids >= n) {
            for (int i = 0; i < n && !rc; i++)
                if (ids[i] < 0 || (uint32_t)ids[i] >= n_vocab)
                    rc = err_set(err, ERR_INPUT, "prose: chat id %d past the vocabulary",
                                 (int)ids[i]);
            if (!rc)
                memcpy(out, ids, (size_t)n * sizeof *out);
            free(ids);
            return rc;
        }
        free(ids);
    }
}

int prose_mixed_tokens(const struct tok *t, uint64_t seed, uint32_t n_vocab, int n, int32_t *out,
                       int *n_prose, uint8_t *is_prose, struct gate_err *err)
{
    if (n_prose)
        *n_prose = 0;
    if (is_prose)
        memset(is_prose, 0, (size_t)n);
    mode_tokens(seed, n_vocab, n, out);
    if (!t)
        return 0;
    int32_t seg[PROSE_SEG_MIN + PROSE_SEG_SPAN];
    struct gate_err quiet = {0};
    uint64_t st = seed ^ PROSE_SALT;
    /* the text segments take turns being plain prose and a chat request, the first one's kind
     * drawn: every context a user sends — with chat tokens and without — is in some run */
    const int chat_first = (int)((seed ^ PROSE_SALT) >> 63);
    for (int at = 0, prose = 1, k = 0; at < n; prose = !prose) {
        const int len = PROSE_SEG_MIN + (int)(det_splitmix64(&st) % PROSE_SEG_SPAN);
        const uint64_t seg_seed = det_splitmix64(&st);
        const int take = len < n - at ? len : n - at;
        /* the whole segment is encoded whatever n, so every prefix is the same; a segment the
         * tokenizer cannot give within the vocabulary stays random ids (a chat one plain prose) */
        int rc = 1;
        if (prose && (k++ + chat_first) % 2)
            rc = chat_segment_tokens(t, seg_seed, n_vocab, len, seg, &quiet);
        if (prose && rc && rc != ERR_ENV)
            rc = prose_tokens(t, seg_seed, n_vocab, len, seg, &quiet);
        if (rc == ERR_ENV)
            return err_set(err, ERR_ENV, "%s", quiet.msg);
        if (!rc) {
            memcpy(out + at, seg, (size_t)take * sizeof *seg);
            if (is_prose)
                memset(is_prose + at, 1, (size_t)take);
            if (n_prose)
                *n_prose += take;
        }
        at += take;
    }
    return 0;
}

int prose_mixed_for_model(const struct model *m, uint64_t seed, int n, int32_t *out, int *n_prose,
                          uint8_t *is_prose, struct gate_err *err)
{
    struct tok *t = prose_model_tok(m);
    const int rc = prose_mixed_tokens(t, seed, m->hp.n_vocab, n, out, n_prose, is_prose, err);
    tok_free(t);
    return rc;
}

#define PROSE_CHAT_SALT 0x63686174ull /* "chat": the conversation's stream */

int prose_chat(uint64_t seed, int scale, struct chat_msg msgs[PROSE_CHAT_MSGS], char **store,
               struct gate_err *err)
{
    char *text[PROSE_CHAT_MSGS] = {0};
    size_t total = 0;
    int rc = 0;
    uint64_t st = seed ^ PROSE_CHAT_SALT;
    *store = NULL;
    for (int i = 0; i < PROSE_CHAT_MSGS && !rc; i++) {
        const int user = i % 2 == 0;
        const uint64_t r = det_splitmix64(&st);
        const int words = (user ? 8 + (int)(r % 13) : 3 + (int)(r % 12)) * (scale > 1 ? scale : 1);
        const int ask = user && (r >> 32) % 2;
        if ((rc = prose_text(det_splitmix64(&st), words, &text[i], err)))
            break;
        /* the first `words` words on one line, the cut's trailing punctuation replaced */
        char *c = text[i];
        int k = 0;
        for (char *p = c; *p; p++)
            if (*p == '\n')
                *p = ' ';
        size_t len = 0;
        while (c[len] && k < words)
            if (c[len++] == ' ' && c[len] != ' ')
                k++;
        while (len && (c[len - 1] == ' ' || c[len - 1] == '.' || c[len - 1] == ','))
            len--;
        if (!(c = realloc(text[i], len + 2))) {
            rc = err_set(err, ERR_ENV, "prose: out of memory for a conversation");
            break;
        }
        text[i] = c;
        c[len] = ask ? '?' : '.';
        c[len + 1] = 0;
        total += len + 2;
    }
    char *block = rc ? NULL : malloc(total ? total : 1);
    if (!rc && !block)
        rc = err_set(err, ERR_ENV, "prose: out of memory for a conversation");
    for (int i = 0, at = 0; i < PROSE_CHAT_MSGS && !rc; i++) {
        const size_t len = strlen(text[i]) + 1;
        memcpy(block + at, text[i], len);
        msgs[i].role = i % 2 == 0 ? "user" : "assistant";
        msgs[i].content = block + at;
        at += (int)len;
    }
    for (int i = 0; i < PROSE_CHAT_MSGS; i++)
        free(text[i]);
    if (rc)
        free(block);
    else
        *store = block;
    return rc;
}

struct tok *prose_model_tok(const struct model *m)
{
    struct tok *t = NULL;
    struct gate_err quiet = {0};
    return m->gguf && !tok_load(&t, m->gguf, &quiet) ? t : NULL;
}
