/* fuzz_ladder.c — libFuzzer target for the ladder parser (harness/ladder.c).
 *
 * Each input is written to ladder.yaml in a private scratch folder (made once, mkdtemp) and
 * loaded with ladder_load(), the path `gate run` and `gate ladder check` take; the folder also
 * holds a.pub, demo.pub and gpu.pub (one valid public key each), the trust files the tests' and
 * the repository's ladders name, so seeded inputs get past their hosts. An accepted ladder is
 * then read the way its users read it: every cell's and exclusion's name, every gate's recorded
 * settings (of the first 64 cells), the anchor check. Checked: no memory error (ASan, UBSan), a
 * refusal carries a message and hands out nothing, every index an accepted ladder holds is in
 * range. Files the ladder names (models, goldens, anchors) are not opened here: ladder_load() does
 * not open them either. Build and run: fuzz/README.md.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/ladder.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], path[96];
static volatile size_t sink;

static const char *const GATES[] = {"capability", "parity", "golden", "throughput", "falsify"};

static void put(const char *name, const void *bytes, size_t n)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(bytes, 1, n, f) != n || fclose(f) != 0)
        abort(); /* the harness itself cannot run */
}

static void cleanup(void)
{
    static const char *const NAMES[] = {"a.pub", "demo.pub", "gpu.pub", "ladder.yaml"};
    char p[128];
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, NAMES[i]);
        unlink(p);
    }
    rmdir(dir);
}

static void setup(void)
{
    static const char KEY[] =
        "ed25519:3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29\n";
    snprintf(dir, sizeof dir, "%s/gate-fuzz-ladder-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        abort();
    put("a.pub", KEY, sizeof KEY - 1);
    put("demo.pub", KEY, sizeof KEY - 1);
    put("gpu.pub", KEY, sizeof KEY - 1);
    snprintf(path, sizeof path, "%s/ladder.yaml", dir);
    atexit(cleanup);
}

static void use(const struct ladder *l)
{
    char name[512];
    for (int i = 0; i < l->n_cells; i++) {
        const struct ladder_cell *c = &l->cells[i];
        if (c->model < 0 || c->model >= l->n_models || c->host < 0 || c->host >= l->n_hosts)
            abort(); /* an accepted cell names a model and host the ladder has */
        sink += strlen(ladder_cell_name(l, i, name, sizeof name));
        /* the first cells' settings only: a seed at the cell-count bound would spend seconds
         * here on every run, and each cell's settings come from the same code */
        for (size_t g = 0; i < 64 && g < sizeof GATES / sizeof GATES[0]; g++) {
            json_t *set = ladder_gate_settings(&c->g, GATES[g]);
            char *text = set ? json_dumps(set, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
            sink += text ? strlen(text) : 0;
            free(text);
            json_decref(set);
        }
    }
    for (int i = 0; i < l->n_excluded; i++) {
        const struct ladder_excluded *e = &l->excluded[i];
        if (e->model < 0 || e->model >= l->n_models || e->host < 0 || e->host >= l->n_hosts)
            abort();
        sink += strlen(ladder_excluded_name(l, i, name, sizeof name));
    }
    for (int i = 0; i < l->n_engines; i++)
        if (ladder_find_engine(l, l->engines[i].e.name) < 0)
            abort();
    struct gate_err err = {0};
    if (ladder_check_anchored(l, &err) && err.msg[0] == '\0')
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        setup();
    put("ladder.yaml", data, size);
    struct ladder *l = (struct ladder *)1;
    struct gate_err err = {0};
    int rc = ladder_load(&l, path, &err);
    if (rc) {
        if (l || err.code != rc || err.msg[0] == '\0')
            abort(); /* a refusal hands out nothing and says why */
        return 0;
    }
    use(l);
    ladder_free(l);
    return 0;
}
