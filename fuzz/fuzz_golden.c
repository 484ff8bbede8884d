/* fuzz_golden.c — libFuzzer target for the goldens loader (oracles/golden.c).
 *
 * Each input is a goldens file's bytes, loaded with golden_load_buf() (what golden_load() and the
 * golden gate run on a file the ladder names) once for every model digest the input's "models"
 * object holds (at most four) and once for a digest it does not hold. An accepted set is read the
 * way the golden gate reads it: every case's prompt, ids and texts, recorded_by. Checked: no
 * memory error (ASan, UBSan), a refusal carries a message and leaves nothing to free, an accepted
 * set is keyed by the digest asked for and its counts are in range. Build and run:
 * fuzz/README.md.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracles/golden.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile size_t sink;

static void load(const char *buf, size_t size, const char *sha)
{
    struct golden_set g;
    struct gate_err err = {0};
    int rc = golden_load_buf(buf, size, "fuzz", sha, &g, &err);
    if (rc) {
        if (err.code != rc || err.msg[0] == '\0' || g.c || g.n || g.recorded_by)
            abort(); /* a refusal says why and hands out nothing */
        golden_set_free(&g);
        return;
    }
    if (strcmp(g.sha256, sha) || g.n < 0 || g.n_gen < 1 || (g.n && !g.c) || !g.recorded_by ||
        !golden_source_of(g.recorded_by))
        abort();
    for (int i = 0; i < g.n; i++) {
        const struct golden_case *c = &g.c[i];
        if (c->n_prompt < 0 || c->n_ids < 0 || (c->n_prompt && !c->prompt) ||
            (c->n_ids && !c->ids) || memchr(c->name, '\0', sizeof c->name) == NULL)
            abort();
        for (int k = 0; k < c->n_prompt; k++)
            sink += (size_t)c->prompt[k];
        for (int k = 0; k < c->n_ids; k++)
            sink += (size_t)c->ids[k];
        sink += c->text ? strlen(c->text) : 0;
        sink += c->expect_text ? strlen(c->expect_text) : 0;
    }
    golden_set_free(&g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an exact-size copy: the loader takes a length, and must not read a terminator */
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    json_t *root = json_loadb(buf, size, 0, NULL);
    const char *key;
    json_t *v;
    int k = 0;
    json_object_foreach(json_object_get(root, "models"), key, v)
    {
        if (k++ == 4)
            break;
        load(buf, size, key);
    }
    load(buf, size, "0000000000000000000000000000000000000000000000000000000000000000");
    json_decref(root);
    free(buf);
    return 0;
}
