/* check.c — see check.h. */
#include "check.h"

#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "engine/tokenizer.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct compare_stats check_cmp(const float *a, const float *b, int64_t n, double atol, double rtol)
{
    return compare_floats(a, b, n, atol, rtol);
}

void check_floats(const char *what, const float *a, const float *b, int64_t n, double atol,
                  double rtol, double max_nmse)
{
    const struct compare_stats s = compare_floats(a, b, n, atol, rtol);
    char why[320];
    cr_assert(compare_pass(&s, max_nmse), "%s: %lld values: %s", what, (long long)n,
              compare_describe(&s, a, b, max_nmse, why, sizeof why));
}

const char *check_shared_dir(void)
{
    const char *e = getenv("GATE_SHARED");
    return e && *e ? e : GATE_SOURCE_DIR "/../shared";
}

const char *check_tmp_dir(void)
{
    static char dir[512];
    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/gate-test-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir))
            cr_assert_fail("cannot create a scratch folder under %s", t ? t : "/tmp");
    }
    return dir;
}

void check_make_dir(char *dir, size_t n, const char *tag)
{
    const int len = snprintf(dir, n, "%s/%sXXXXXX", check_tmp_dir(), tag);
    cr_assert(len > 0 && (size_t)len < n, "the scratch folder name '%s...' is too long", tag);
    cr_assert(mkdtemp(dir), "cannot make a scratch folder '%s'", dir);
}

const char *check_path(const char *dir, const char *name)
{
    static char buf[8][1024];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

uint8_t *check_slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    /* one byte more, always NUL: callers that treat the bytes as text may strstr them */
    uint8_t *p = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) {
        p[n] = 0;
        *size = (size_t)n;
    }
    return p;
}

int32_t *check_read_ids(const char *path, int *n)
{
    size_t len = 0;
    uint8_t *text = check_slurp(path, &len);
    *n = 0;
    if (!text)
        return NULL;
    int32_t *ids = NULL;
    struct gate_err err = {0};
    int rc = tok_parse_ids((const char *)text, len, path, 0, &ids, n, &err);
    free(text);
    cr_assert_eq(rc, 0, "%s", err.msg);
    return ids;
}

char *check_slurp_text(const char *path)
{
    size_t n = 0;
    uint8_t *b = check_slurp(path, &n);
    char *t = malloc(b ? n + 1 : 1);
    cr_assert(t, "out of memory reading '%s'", path);
    if (b)
        memcpy(t, b, n);
    t[b ? n : 0] = '\0';
    free(b);
    return t;
}

struct model *check_load_case(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/conformance/%s/model.gguf", check_shared_dir(), name);
    struct model *m = NULL;
    struct gate_err err = {0};
    cr_assert_eq(model_load(&m, path, &err), 0, "%s", err.msg);
    return m;
}

struct model *check_synth_model(const struct synth_options *o, const char *name, uint8_t **buf)
{
    size_t size = 0;
    struct gate_err err = {0};
    struct gguf_file *f = NULL;
    struct model *m = NULL;
    cr_assert_eq(synth_write_mem(o, buf, &size, &err), 0, "%s: %s", name, err.msg);
    cr_assert_eq(gguf_open_mem(&f, *buf, size, name, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(model_from_gguf(&m, f, &err), 0, "%s", err.msg);
    return m;
}

struct model *check_tiny_model(const char *preset, uint8_t **buf)
{
    struct synth_options o;
    memset(&o, 0, sizeof o);
    o.spec = *synth_preset_find(preset);
    o.quant = SYNTH_Q4_K_M;
    o.seed = 1;
    return check_synth_model(&o, preset, buf);
}

int check_asan(void)
{
    const char *a = getenv("GATE_ASAN");
    return a && *a && strcmp(a, "0") != 0;
}
