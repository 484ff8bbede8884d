/* ladder.c — the ladder parser (see ladder.h): the file read once and loaded through
 * harness/yamldoc.c (which refuses unknown and duplicate keys, wrong types and missing fields at
 * file:line:column), then its sections: release, models, hosts, engines, modes, cells (expanded:
 * matrix minus exclusions, plus explicit entries; duplicates found through a hash table),
 * anchors; the gates section is resolved per cell by harness/ladder_settings.c, and the checks
 * that read the files a ladder names are in harness/ladder_files.c.
 * Start reading: ladder_load(), then parse_root().
 */
#include "harness/ladder.h"

#include "harness/gatedef.h"
#include "harness/identity.h"
#include "harness/ladder_parse.h"
#include "harness/run.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "engine/pin.h"
#include "engine/synth.h"
#include "oracles/golden.h"

char *ladder_resolve(const struct ladder *l, const char *rel)
{
    size_t n = strlen(l->dir) + strlen(rel) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s", rel[0] == '/' ? "" : l->dir, rel);
    if (s && rel[0] == '/')
        memmove(s, s + 1, strlen(s));
    return s;
}

/* ---- sections ------------------------------------------------------------------------------ */

static int parse_release(struct parse *p, yaml_node_t *n)
{
    static const char *const keys[] = {"name", "version", NULL};
    yaml_node_t *v;
    int rc = check_map(p, n, "release", keys);
    if (!rc && !(rc = need(p, n, "name", "release", &v)))
        rc = get_str(p, v, "release.name", p->l->name, sizeof p->l->name);
    if (!rc && !(rc = need(p, n, "version", "release", &v)))
        rc = get_str(p, v, "release.version", p->l->version, sizeof p->l->version);
    return rc;
}

/* The shortest %g form of v that reads back as v (one name per float: 0.05f is "0.05") */
static const char *float_name(char *buf, size_t n, float v)
{
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v)
            break;
    }
    return buf;
}

static int parse_model(struct parse *p, yaml_node_t *k, yaml_node_t *n, struct ladder_model *m)
{
    static const char *const keys[] = {"path", "synth", "sha256", "arch", NULL};
    static const char *const skeys[] = {"preset", "quant", "seed", "eps", "rope_base", NULL};
    char what[128];
    yaml_node_t *v;
    int rc;
    snprintf(m->id, sizeof m->id, "%s", scalar(k));
    snprintf(what, sizeof what, "model '%s'", m->id);
    m->line = (int)k->start_mark.line + 1;
    if ((rc = check_map(p, n, what, keys)))
        return rc;
    yaml_node_t *path = get(p, n, "path"), *synth = get(p, n, "synth");
    if (!path == !synth)
        return fail(p, n, "%s needs exactly one of 'path' or 'synth'", what);
    if (path) {
        char buf[512];
        if ((rc = get_str(p, path, "path", buf, sizeof buf)))
            return rc;
        m->path = ladder_resolve(p->l, buf);
    } else {
        m->synth = 1;
        if ((rc = check_map(p, synth, "synth", skeys)))
            return rc;
        if ((rc = need(p, synth, "preset", "synth", &v)) ||
            (rc = get_str(p, v, "synth.preset", m->preset, sizeof m->preset)) ||
            (rc = need(p, synth, "quant", "synth", &v)) ||
            (rc = get_str(p, v, "synth.quant", m->quant, sizeof m->quant)))
            return rc;
        int seed = 0;
        if ((v = get(p, synth, "seed")) && (rc = get_int(p, v, "synth.seed", 0, 2147483647, &seed)))
            return rc;
        m->seed = (uint64_t)seed;
        /* the preset's epsilon and RoPE base overridden, kept as the f32 the file will hold (two
         * specs are the same file exactly when these are equal); the base must exceed 1, as the
         * synthesizer and the model loader require */
        double eps = 0, rope = 0;
        if ((v = get(p, synth, "eps")) && (rc = get_num(p, v, "synth.eps", 1e-12, 0.5, &eps)))
            return rc;
        if ((v = get(p, synth, "rope_base")) &&
            (rc = get_num(p, v, "synth.rope_base", 1.0, 1e9, &rope)))
            return rc;
        if (v && !(rope > 1.0))
            return fail(p, v, "synth.rope_base must be greater than 1, found %g", rope);
        m->eps = (float)eps;
        m->rope_base = (float)rope;
        /* one file per synth spec: models that share preset, quant, seed and overrides share the
         * first one's cached file (one synthesis; the nightly's long-context rungs, issue 26 §2),
         * in $GATE_MODEL_CACHE when set (docs/ladder.md, "The model cache") */
        const char *file_id = m->id, *mc = getenv("GATE_MODEL_CACHE");
        for (const struct ladder_model *o = p->l->models; o < m && file_id == m->id; o++)
            if (o->synth && !strcmp(o->preset, m->preset) && !strcmp(o->quant, m->quant) &&
                o->seed == m->seed && o->eps == m->eps && o->rope_base == m->rope_base)
                file_id = o->id;
        char rel[1024], over[96] = "", num[32];
        if (m->eps > 0)
            snprintf(over, sizeof over, "-eps%s", float_name(num, sizeof num, m->eps));
        if (m->rope_base > 0)
            snprintf(over + strlen(over), sizeof over - strlen(over), "-rope%s",
                     float_name(num, sizeof num, m->rope_base));
        snprintf(rel, sizeof rel, "%s/%s-%s-%s-%d%s.gguf", mc && *mc ? mc : ".gate-cache", file_id,
                 m->preset, m->quant, seed, over);
        m->path = ladder_resolve(p->l, rel);
    }
    if (!m->path)
        return err_set(p->y.err, ERR_ENV, "ladder: out of memory for a model's path");
    if ((rc = need(p, n, "sha256", what, &v)) ||
        (rc = get_str(p, v, "sha256", m->sha256, sizeof m->sha256)))
        return rc;
    if (strlen(m->sha256) != 64 || strspn(m->sha256, "0123456789abcdef") != 64)
        return fail(p, v,
                    "%s: sha256 must be 64 lower-case hex digits (the file is identified by"
                    " its bytes)",
                    what);
    for (const struct ladder_model *o = p->l->models; m->synth && o < m; o++)
        if (o->synth && !strcmp(o->path, m->path) && strcmp(o->sha256, m->sha256))
            return fail(p, v,
                        "%s: synthesized as model '%s' (same preset, quant, seed and overrides) but"
                        " pinned to another sha256",
                        what, o->id);
    if ((rc = need(p, n, "arch", what, &v)) ||
        (rc = get_str(p, v, "arch", m->arch, sizeof m->arch)))
        return rc;
    if (strcmp(m->arch, "qwen3") && strcmp(m->arch, "qwen3moe"))
        return fail(p, v, "%s: arch '%s' is not supported (expected qwen3 or qwen3moe)", what,
                    m->arch);
    /* checked here, before the per-arch falsify defaults: a MoE preset declared qwen3 is an arch
     * mismatch, not "wrong_expert cannot apply" (issue 16) */
    const struct synth_spec *sp = m->synth ? synth_preset_find(m->preset) : NULL;
    if (sp && strcmp(m->arch, model_arch_name(sp->arch)))
        return fail(p, v, "%s: arch '%s' contradicts synth preset '%s', which is %s", what, m->arch,
                    m->preset, model_arch_name(sp->arch));
    return 0;
}

/* Parse "ed25519:" + 64 hex digits (exactly; text is NUL-terminated) into pk; 0 when it is one. */
static int public_key(const char *text, unsigned char pk[32])
{
    size_t len = 0;
    const char *end = NULL;
    return strncmp(text, "ed25519:", 8) == 0 && strlen(text + 8) == 64 &&
                   sodium_hex2bin(pk, 32, text + 8, 64, NULL, &len, &end) == 0 && len == 32 &&
                   *end == '\0'
               ? 0
               : -1;
}

/* Read the one key of trust file `name` (issue 11, "files the ladder did not pin"): a path
 * relative to the ladder's folder that stays inside it (no absolute path, no "..", no symlink
 * anywhere that leads out, checked on the descriptor actually opened), a regular file (a FIFO
 * fails at once: O_NONBLOCK) of at most LADDER_TRUST_FILE_MAX bytes holding exactly one
 * "ed25519:HEX" line. Errors never quote the file's content. */
static int read_trust_file(struct parse *p, yaml_node_t *n, const char *name, unsigned char pk[32])
{
    char text[LADDER_TRUST_FILE_MAX + 2], proc[64];
    char *path = NULL, *real_dir = NULL, *real = NULL;
    struct stat st;
    int rc = 0, fd = -1;
    size_t got = 0;
    if (!*name || name[0] == '/') {
        rc = fail(p, n, "trusted key file '%s' must be a path relative to the ladder's folder",
                  name);
        goto cleanup;
    }
    for (const char *c = name; *c; c = strchr(c, '/') ? strchr(c, '/') + 1 : c + strlen(c))
        if (!strncmp(c, "..", 2) && (c[2] == '/' || c[2] == '\0')) {
            rc = fail(p, n,
                      "trusted key file '%s' must stay inside the ladder's folder (no"
                      " '..')",
                      name);
            goto cleanup;
        }
    if (!(path = ladder_resolve(p->l, name))) {
        rc = err_set(p->y.err, ERR_ENV, "ladder: out of memory for a file's path");
        goto cleanup;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY);
    if (fd < 0) {
        rc = errno == ELOOP
                 ? fail(p, n,
                        "trusted key file '%s' is a symbolic link; name the"
                        " file itself",
                        name)
                 : fail(p, n, "cannot read trusted key file '%s': %s", name, strerror(errno));
        goto cleanup;
    }
    /* where the descriptor really points, every folder symlink resolved */
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    real_dir = realpath(p->l->dir, NULL);
    if (!(real = realpath(proc, NULL)))
        real = realpath(path, NULL);
    size_t dl = real_dir ? strlen(real_dir) : 0;
    if (!real_dir || !real || !(dl == 1 || (strncmp(real, real_dir, dl) == 0 && real[dl] == '/'))) {
        rc = fail(p, n, "trusted key file '%s' resolves outside the ladder's folder", name);
        goto cleanup;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = fail(p, n, "trusted key file '%s' is not a regular file", name);
        goto cleanup;
    }
    if (st.st_size > LADDER_TRUST_FILE_MAX) {
        rc = fail(p, n,
                  "trusted key file '%s' is %lld bytes, more than the %d a public key"
                  " file holds",
                  name, (long long)st.st_size, LADDER_TRUST_FILE_MAX);
        goto cleanup;
    }
    for (;;) {
        ssize_t r = read(fd, text + got, sizeof text - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = fail(p, n, "cannot read trusted key file '%s': %s", name, strerror(errno));
            goto cleanup;
        }
        if (r == 0 || (got += (size_t)r) == sizeof text - 1)
            break;
    }
    if (got > LADDER_TRUST_FILE_MAX) {
        rc = fail(p, n, "trusted key file '%s' is more than %d bytes", name, LADDER_TRUST_FILE_MAX);
        goto cleanup;
    }
    text[got] = '\0';
    while (got > 0 && strchr(" \t\r\n", text[got - 1]))
        text[--got] = '\0';
    if (strlen(text) != got || public_key(text, pk) != 0)
        rc = fail(p, n,
                  "trusted key file '%s' does not hold one public key (expected a single"
                  " line 'ed25519:' and 64 hex digits; the content is not shown)",
                  name);
cleanup:
    if (fd >= 0)
        close(fd);
    sodium_memzero(text, sizeof text);
    free(path);
    free(real_dir);
    free(real);
    return rc;
}

static int parse_key_text(struct parse *p, yaml_node_t *n, const char *text, unsigned char pk[32])
{
    if (!strncmp(text, "file:", 5))
        return read_trust_file(p, n, text + 5, pk);
    if (strncmp(text, "ed25519:", 8) != 0)
        return fail(p, n, "trusted key '%.40s' must be 'ed25519:HEX' or 'file:NAME.pub'", text);
    if (public_key(text, pk) != 0)
        return fail(p, n, "trusted key '%.40s' is not 32 bytes of hex", text);
    return 0;
}

static int parse_host(struct parse *p, yaml_node_t *k, yaml_node_t *n, struct ladder_host *h)
{
    static const char *const keys[] = {"device", "trust", NULL};
    static const char *const dkeys[] = {"name", "compute_capability", "min_memory_gib", NULL};
    char what[128];
    yaml_node_t *v, *it;
    int rc;
    snprintf(h->id, sizeof h->id, "%s", scalar(k));
    snprintf(what, sizeof what, "host '%s'", h->id);
    h->line = (int)k->start_mark.line + 1;
    if ((rc = check_map(p, n, what, keys)) || (rc = need(p, n, "device", what, &v)))
        return rc;
    if (scalar(v)) {
        if (strcmp(scalar(v), "none"))
            return fail(p, v,
                        "%s: device must be 'none' or a mapping with name,"
                        " compute_capability, min_memory_gib",
                        what);
    } else {
        h->gpu = 1;
        if ((rc = check_map(p, v, "device", dkeys)))
            return rc;
        yaml_node_t *d;
        if ((rc = need(p, v, "name", "device", &d)) ||
            (rc = get_str(p, d, "device.name", h->device_name, sizeof h->device_name)))
            return rc;
        if ((d = get(p, v, "compute_capability")) &&
            (rc = get_str(p, d, "device.compute_capability", h->compute_capability,
                          sizeof h->compute_capability)))
            return rc;
        if ((d = get(p, v, "min_memory_gib")) &&
            (rc = get_num(p, d, "device.min_memory_gib", 0, 1e6, &h->min_memory_gib)))
            return rc;
    }
    if ((rc = need(p, n, "trust", what, &v)) || (rc = check_seq(p, v, "trust", 1)))
        return rc;
    FOR_ITEMS(p, v, it)
    {
        if (h->n_trust == LADDER_MAX_TRUST)
            return fail(p, it, "%s trusts more than %d keys", what, LADDER_MAX_TRUST);
        if (!scalar(it))
            return fail(p, it, "trusted keys must be strings");
        if ((rc = parse_key_text(p, it, scalar(it), h->trust[h->n_trust++])))
            return rc;
    }
    return 0;
}

/* A list of paths (`allow:`, `devices:`) into out (resolved against the ladder's folder). */
static int engine_paths(struct parse *p, yaml_node_t *x, const char *what, const char *key,
                        char **out, int *n)
{
    yaml_node_t *it;
    int rc;
    if ((rc = check_seq(p, x, key, 0)))
        return rc;
    FOR_ITEMS(p, x, it)
    {
        char buf[1024];
        if (*n == EXEC_PATHS_MAX)
            return fail(p, it, "%s: %s has more than %d entries", what, key, EXEC_PATHS_MAX);
        if ((rc = get_str(p, it, key, buf, sizeof buf)))
            return rc;
        if (!(out[*n] = ladder_resolve(p->l, buf)))
            return err_set(p->y.err, ERR_ENV, "ladder: out of memory for a path of %s %s", what,
                           key);
        (*n)++;
    }
    return 0;
}

/* The isolation, environment and pins of one engine entry (docs/exec.md, "Threat model" and
 * "Pinning the engine"). */
static int parse_engine_guard(struct parse *p, yaml_node_t *e, const char *what,
                              struct ladder_engine *le)
{
    struct exec_engine *x = &le->e;
    yaml_node_t *v, *it;
    char buf[1024];
    int rc;
    x->cell_timeout_s = EXEC_CELL_TIMEOUT_DEFAULT;
    if ((v = get(p, e, "cell_timeout_s")) &&
        (rc = get_num(p, v, "cell_timeout_s", 0.1, 86400, &x->cell_timeout_s)))
        return rc;
    if ((v = get(p, e, "isolation"))) {
        if ((rc = get_str(p, v, "isolation", buf, sizeof buf)))
            return rc;
        if (strcmp(buf, "landlock") && strcmp(buf, "none"))
            return fail(p, v, "%s: isolation must be landlock (the default) or none, found '%s'",
                        what, buf);
        x->isolation_none = !strcmp(buf, "none");
    }
    v = get(p, e, "reason");
    if (x->isolation_none && !v)
        return fail(p, e,
                    "%s: isolation: none needs a reason (why this engine may run with access to"
                    " everything gate can read; it is recorded in every receipt)",
                    what);
    if (v && !x->isolation_none)
        return fail(p, v, "%s: reason is only for isolation: none", what);
    if (v && (rc = get_str(p, v, "reason", x->reason, sizeof x->reason)))
        return rc;
    if ((v = get(p, e, "env"))) {
        if ((rc = check_map(p, v, "env", NULL)))
            return rc;
        FOR_PAIRS(v, pr)
        {
            yaml_node_t *k = node(p, pr->key), *val = node(p, pr->value);
            const char *name = scalar(k);
            int ok = name && (isalpha((unsigned char)name[0]) || name[0] == '_');
            for (const char *c = name; ok && *c; c++)
                ok = isalnum((unsigned char)*c) || *c == '_';
            if (!ok)
                return fail(p, k, "%s: env name '%s' must be letters, digits and '_'", what,
                            name ? name : kind(k));
            if (x->n_env == EXEC_ENV_MAX)
                return fail(p, k, "%s: env has more than %d entries", what, EXEC_ENV_MAX);
            const char *val_s = scalar(val);
            if (!val_s)
                return fail(p, val, "%s: env %s must be a string, found %s", what, name, kind(val));
            const size_t len = strlen(name) + strlen(val_s) + 2;
            if (!(x->env[x->n_env] = malloc(len)))
                return err_set(p->y.err, ERR_ENV,
                               "ladder: out of memory for an engine's environment");
            snprintf(x->env[x->n_env++], len, "%s=%s", name, val_s);
        }
    }
    if ((v = get(p, e, "allow")) && (rc = engine_paths(p, v, what, "allow", x->allow, &x->n_allow)))
        return rc;
    if ((v = get(p, e, "devices")) &&
        (rc = engine_paths(p, v, what, "devices", x->devices, &x->n_devices)))
        return rc;
    if ((v = get(p, e, "sha256"))) {
        if ((rc = get_str(p, v, "sha256", x->sha256, sizeof x->sha256)))
            return rc;
        if (strlen(x->sha256) != 64 || strspn(x->sha256, "0123456789abcdef") != 64)
            return fail(p, v,
                        "%s: sha256 must be 64 lower-case hex digits (the SHA-256 of the engine"
                        " binary argv[0] names)",
                        what);
    }
    if ((v = get(p, e, "build_id")) &&
        (rc = get_str(p, v, "build_id", x->build_id, sizeof x->build_id)))
        return rc;
    if ((v = get(p, e, "files"))) {
        static const char *const fkeys[] = {"path", "sha256", NULL};
        if ((rc = check_seq(p, v, "files", 0)))
            return rc;
        FOR_ITEMS(p, v, it)
        {
            yaml_node_t *f;
            struct exec_file *xf = &x->files[x->n_files];
            if (x->n_files == EXEC_PATHS_MAX)
                return fail(p, it, "%s: files has more than %d entries", what, EXEC_PATHS_MAX);
            if ((rc = check_map(p, it, "a files entry", fkeys)) ||
                (rc = need(p, it, "path", "a files entry", &f)) ||
                (rc = get_str(p, f, "path", buf, sizeof buf)) ||
                (rc = need(p, it, "sha256", "a files entry", &f)) ||
                (rc = get_str(p, f, "sha256", xf->sha256, sizeof xf->sha256)))
                return rc;
            if (strlen(xf->sha256) != 64 || strspn(xf->sha256, "0123456789abcdef") != 64)
                return fail(p, f, "%s: a files entry's sha256 must be 64 lower-case hex digits",
                            what);
            if (!(xf->path = ladder_resolve(p->l, buf)))
                return err_set(p->y.err, ERR_ENV,
                               "ladder: out of memory for an engine file's path");
            x->n_files++;
        }
    }
    return 0;
}

/* engines: {NAME: {argv: [...], timeout_s: N, supports: [...], ...}} (docs/exec.md). */
static int parse_engines(struct parse *p, yaml_node_t *root)
{
    static const char *const keys[] = {
        "argv",  "timeout_s", "supports", "cell_timeout_s", "isolation", "reason", "env",
        "allow", "devices",   "sha256",   "build_id",       "files",     "faults", NULL};
    struct ladder *l = p->l;
    yaml_node_t *v = get(p, root, "engines"), *x, *it;
    int rc;
    if (!v)
        return 0;
    if ((rc = check_map(p, v, "engines", NULL)))
        return rc;
    const size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
    if (n == 0)
        return fail(p, v, "engines must not be empty (omit it when the ladder gates none)");
    if (!(l->engines = calloc(n, sizeof *l->engines)))
        return err_set(p->y.err, ERR_ENV, "ladder: out of memory for the engines");
    FOR_PAIRS(v, pr)
    {
        yaml_node_t *k = node(p, pr->key), *e = node(p, pr->value);
        struct ladder_engine *le = &l->engines[l->n_engines++];
        const char *name = scalar(k);
        char what[64];
        int ok = strlen(name) >= 1 && strlen(name) < sizeof le->e.name;
        for (const char *c = name; ok && *c; c++)
            ok = isalnum((unsigned char)*c) || *c == '-' || *c == '_';
        if (!ok)
            return fail(p, k,
                        "engine name '%s' must be 1-%d letters, digits, '-' or '_' (it is"
                        " part of the mode exec.%s.<path>)",
                        name, (int)sizeof le->e.name - 1, name);
        snprintf(le->e.name, sizeof le->e.name, "%s", name);
        snprintf(what, sizeof what, "engine '%s'", name);
        le->line = (int)k->start_mark.line + 1;
        le->e.timeout_s = EXEC_TIMEOUT_DEFAULT;
        if ((rc = check_map(p, e, what, keys)) || (rc = need(p, e, "argv", what, &x)) ||
            (rc = check_seq(p, x, "argv", 1)))
            return rc;
        FOR_ITEMS(p, x, it)
        {
            char buf[1024];
            if (le->e.argc == EXEC_ARGV_MAX)
                return fail(p, it, "%s: argv has more than %d entries", what, EXEC_ARGV_MAX);
            if ((rc = get_str(p, it, "argv entries", buf, sizeof buf)))
                return rc;
            char *arg = le->e.argc == 0 && strchr(buf, '/') && buf[0] != '/'
                            ? ladder_resolve(l, buf)
                            : strdup(buf);
            if (!arg || (le->e.argc == 0 && !(le->argv0 = strdup(buf)))) {
                free(arg);
                return err_set(p->y.err, ERR_ENV, "ladder: out of memory for an engine's command");
            }
            le->e.argv[le->e.argc++] = arg;
        }
        if ((x = get(p, e, "timeout_s")) &&
            (rc = get_num(p, x, "timeout_s", 0.1, 3600, &le->e.timeout_s)))
            return rc;
        if ((rc = need(p, e, "supports", what, &x)) || (rc = check_seq(p, x, "supports", 1)))
            return rc;
        le->supports_line = (int)x->start_mark.line + 1;
        le->supports_col = (int)x->start_mark.column + 1;
        FOR_ITEMS(p, x, it)
        {
            const unsigned bit = exec_support_bit(scalar(it));
            if (!bit)
                return fail(p, it,
                            "%s: supports entry '%s' is not one of decode, prefill, chat,"
                            " faults",
                            what, scalar(it) ? scalar(it) : kind(it));
            le->e.supports |= bit;
        }
        /* faults: the kinds it injects itself; the falsify gate proxies the others */
        if ((x = get(p, e, "faults"))) {
            if ((rc = check_seq(p, x, "faults", 1)))
                return rc;
            if (!(le->e.supports & EXEC_SUPPORTS_FAULTS))
                return fail(p, x,
                            "%s: faults lists the kinds the engine injects, but its supports do"
                            " not list faults (an engine that takes none needs no list: its"
                            " falsify gate runs by proxy)",
                            what);
            FOR_ITEMS(p, x, it)
            {
                const int k = fault_kind_find(scalar(it));
                char known[160];
                if (k < 0)
                    return fail(
                        p, it, "%s: faults entry '%s' is not a fault kind (known: %s)", what,
                        scalar(it) ? scalar(it) : kind(it),
                        fault_kinds_text((1u << FAULT_KIND_COUNT) - 1, known, sizeof known));
                if (le->e.faults & (1u << k))
                    return fail(p, it, "%s: faults lists '%s' twice", what, scalar(it));
                le->e.faults |= 1u << k;
            }
        }
        if ((rc = parse_engine_guard(p, e, what, le)))
            return rc;
    }
    return 0;
}

int ladder_find_engine(const struct ladder *l, const char *name)
{
    for (int i = 0; i < l->n_engines; i++)
        if (!strcmp(l->engines[i].e.name, name))
            return i;
    return -1;
}

int ladder_mode_declared(struct parse *p, yaml_node_t *n, const char *text)
{
    struct mode m;
    struct gate_err why = {0};
    if (mode_parse(text, &m, &why))
        return n ? fail(p, n,
                        "unknown mode '%s' (expected <backend>.<path> with backend cuda,"
                        " cpu or ref and path decode, prefill or chat, or exec.<engine>.<path>)",
                        text)
                 : ERR_INPUT;
    if (!m.engine[0])
        return 0;
    const int ei = ladder_find_engine(p->l, m.engine);
    if (ei < 0)
        return n ? fail(p, n,
                        "mode '%s' names engine '%s', which the ladder's engines: section"
                        " does not declare",
                        text, m.engine)
                 : ERR_INPUT;
    const struct ladder_engine *le = &p->l->engines[ei];
    const unsigned bit = m.path == MODE_DECODE    ? EXEC_SUPPORTS_DECODE
                         : m.path == MODE_PREFILL ? EXEC_SUPPORTS_PREFILL
                                                  : EXEC_SUPPORTS_CHAT;
    if (!(le->e.supports & bit))
        return n ? fail(p, n,
                        "mode '%s': engine '%s' (line %d) does not list %s in its supports;"
                        " a path the engine does not declare is refused, not skipped",
                        text, m.engine, le->line, mode_path_name(m.path))
                 : ERR_INPUT;
    return 0;
}

int ladder_mode_known(const char *mode)
{
    return mode_known(mode); /* the one mode list (oracles/mode.c over engine/backend.c's) */
}

/* ---- cells --------------------------------------------------------------------------------- */

/* Every expanded cell, required or excluded, in an open-addressing table keyed by (model, host,
 * mode): the duplicate check costs O(1) per cell instead of a scan of every cell so far. */
#define CELL_SLOTS 16384 /* a power of two, more than twice LADDER_MAX_CELLS */
struct cell_seen {
    uint32_t key[CELL_SLOTS]; /* 0: empty; else 1 + (model * n_hosts + host) * modes + mode */
    int line[CELL_SLOTS];
    unsigned char excluded[CELL_SLOTS];
};

static int cell_mode_index(const struct ladder *l, const char *mode)
{
    struct mode m;
    if (mode_parse(mode, &m, NULL))
        return 0;    /* unreachable: modes were checked by ladder_mode_declared() */
    if (m.engine[0]) /* exec modes follow the fixed list: engine x path */
        return mode_count() + ladder_find_engine(l, m.engine) * 3 + (int)m.path;
    return mode_index(&m);
}

/* Record cell (model, host, mode, v) from line `line`; a cell met twice is an error at `at`.
 * The identity settings are part of the identity: the same model/host/mode with kv f32 and
 * kv f16 (or two isas) are two cells. */
static int seen_add(struct parse *p, struct cell_seen *s, yaml_node_t *at, int model, int host,
                    const char *mode, const struct cell_variant *v, int excluded)
{
    const struct ladder *l = p->l;
    uint32_t key = 1 +
                   (((uint32_t)model * (uint32_t)l->n_hosts + (uint32_t)host) *
                        (uint32_t)(mode_count() + 3 * l->n_engines) +
                    (uint32_t)cell_mode_index(l, mode)) *
                       cell_variant_count() +
                   cell_variant_index(v);
    uint32_t i = (key * 2654435761u) >> 18; /* 14 bits: CELL_SLOTS */
    for (; s->key[i]; i = (i + 1) & (CELL_SLOTS - 1)) {
        if (s->key[i] != key)
            continue;
        char kv[CELL_SUFFIX_MAX];
        const char *m = l->models[model].id, *h = l->hosts[host].id;
        cell_variant_suffix(v, kv, sizeof kv);
        if (s->excluded[i] != excluded)
            return fail(p, at,
                        "cell %s/%s/%s%s is both excluded and required (the other at line"
                        " %d)",
                        m, h, mode, kv, s->line[i]);
        return fail(p, at, "cell %s/%s/%s%s is listed twice (first at line %d)", m, h, mode, kv,
                    s->line[i]);
    }
    s->key[i] = key;
    s->line[i] = (int)at->start_mark.line + 1;
    s->excluded[i] = (unsigned char)excluded;
    return 0;
}

/* Append to an array that grows by doubling: *n a power of two (or 0) means it is full. */
static void *grow(void *a, int n, size_t size)
{
    if (n > 0 && (n & (n - 1)) != 0)
        return a;
    return realloc(a, (size_t)(n ? 2 * n : 1) * size);
}

static int add_cell(struct parse *p, yaml_node_t *at, int model, int host, const char *mode,
                    const struct cell_variant *v)
{
    struct ladder *l = p->l;
    struct ladder_cell *c = grow(l->cells, l->n_cells, sizeof *c);
    if (!c)
        return err_set(p->y.err, ERR_ENV, "ladder: out of memory for the cells");
    l->cells = c;
    c = &l->cells[l->n_cells++];
    memset(c, 0, sizeof *c);
    c->model = model;
    c->host = host;
    snprintf(c->mode, sizeof c->mode, "%s", mode);
    c->v = *v;
    c->line = at ? (int)at->start_mark.line + 1 : 0;
    c->col = at ? (int)at->start_mark.column + 1 : 0;
    return 0;
}

/* Keep an excluded cell with the reason of exclusion x (issue 10 §3: no cell vanishes). */
static int add_excluded(struct parse *p, yaml_node_t *x, int model, int host, const char *mode,
                        const struct cell_variant *v)
{
    struct ladder *l = p->l;
    const char *reason = scalar(get(p, x, "reason"));
    struct ladder_excluded *e = grow(l->excluded, l->n_excluded, sizeof *e);
    if (!e)
        return err_set(p->y.err, ERR_ENV, "ladder: out of memory for the excluded cells");
    l->excluded = e;
    e = &l->excluded[l->n_excluded++];
    memset(e, 0, sizeof *e);
    e->model = model;
    e->host = host;
    snprintf(e->mode, sizeof e->mode, "%s", mode);
    e->v = *v;
    snprintf(e->reason, sizeof e->reason, "%s", reason);
    e->line = (int)x->start_mark.line + 1;
    return 0;
}

/* Resolve a list of ids (or one scalar) against models/hosts/modes; out gets indices. */
static int id_list(struct parse *p, yaml_node_t *n, const char *what, int kind_, yaml_node_t *modes,
                   const char **ids, yaml_node_t **at, int *count, int cap)
{
    yaml_node_t *it;
    *count = 0;
    if (scalar(n)) {
        ids[0] = scalar(n);
        at[0] = n;
        *count = 1;
    } else {
        int rc = check_seq(p, n, what, 1);
        if (rc)
            return rc;
        FOR_ITEMS(p, n, it)
        {
            if (!scalar(it))
                return fail(p, it, "%s entries must be ids", what);
            if (*count == cap)
                return fail(p, it, "%s has more than %d entries", what, cap);
            ids[*count] = scalar(it);
            at[(*count)++] = it;
        }
    }
    for (int i = 0; i < *count; i++) {
        int ok = 0;
        if (kind_ == 0)
            ok = ladder_find_model(p->l, ids[i]) >= 0;
        else if (kind_ == 1)
            ok = ladder_find_host(p->l, ids[i]) >= 0;
        else {
            yaml_node_t *m;
            FOR_ITEMS(p, modes, m)
            ok |= !strcmp(scalar(m), ids[i]);
        }
        if (!ok)
            return fail(p, at[i], "%s '%s' is not defined in %s", what, ids[i],
                        kind_ == 0   ? "models"
                        : kind_ == 1 ? "hosts"
                                     : "modes");
    }
    return 0;
}

/* After expansion: something is required, and no declared model lost every cell to `exclude`
 * (issue 10 §3: a model the ladder names is gated, or the ladder says nothing about it). */
static int check_coverage(struct parse *p, yaml_node_t *cells)
{
    const struct ladder *l = p->l;
    int rc = 0;
    if (l->n_cells == 0)
        return fail(p, cells,
                    "the ladder expands to no required cell (%d excluded): a release"
                    " gate must gate something",
                    l->n_excluded);
    int *required = calloc((size_t)l->n_models, sizeof *required);
    if (!required)
        return err_set(p->y.err, ERR_ENV, "ladder: out of memory for the coverage check");
    for (int i = 0; i < l->n_cells; i++)
        required[l->cells[i].model]++;
    for (int i = 0; i < l->n_excluded && !rc; i++) {
        const struct ladder_excluded *e = &l->excluded[i];
        if (!required[e->model])
            rc = err_set(p->y.err, ERR_INPUT,
                         "%s:%d: every cell of model '%s' is excluded (this"
                         " exclusion: \"%.80s\"); a model the ladder declares must be gated in at"
                         " least one cell: gate one or remove the model",
                         p->y.path, e->line, l->models[e->model].id, e->reason);
    }
    free(required);
    return rc;
}

/* An identity setting's value (a cells entry's, or an override match's), where names the
 * entry ("a cells entry's"): one of the row's values, the default's name included. */
int ladder_parse_setting(struct parse *p, yaml_node_t *v, const char *where, enum cell_setting_id s,
                         unsigned char *out)
{
    const char *t = scalar(v);
    char choices[96];
    if (cell_setting_parse(s, t, 1, out))
        return fail(p, v, "%s %s must be %s (%s), not %s%s%s", where, CELL_SETTINGS[s].key,
                    cell_setting_choices(s, 1, 0, choices, sizeof choices),
                    CELL_SETTINGS[s].meaning, t ? "'" : "", t ? t : kind(v), t ? "'" : "");
    return 0;
}

/* A cell whose identity setting is not the default must name a backend whose row offers it
 * (the row's refuses(), the same in every build): any other is refused here, at the setting,
 * rather than run otherwise under its name. Whether this host can run it is the run's question. */
static int check_offered(struct parse *p, yaml_node_t *const *at, int model, int host,
                         const char *mode, const struct cell_variant *v)
{
    struct mode m;
    char why[256];
    if (mode_parse(mode, &m, NULL))
        return 0;
    for (int s = 0; s < CELL_SETTING_COUNT; s++) {
        const char *value = cell_variant_value(v, (enum cell_setting_id)s);
        if (v->at[s] &&
            CELL_SETTINGS[s].refuses((enum cell_setting_id)s, m.backend, value, why, sizeof why))
            return fail(p, at[s], "cell %s/%s/%s: %s: %s, but backend '%s' %s",
                        p->l->models[model].id, p->l->hosts[host].id, mode, CELL_SETTINGS[s].key,
                        value, m.backend, why);
    }
    return 0;
}

static int parse_cells(struct parse *p, yaml_node_t *cells, yaml_node_t *modes)
{
    const char *keys[7 + CELL_SETTING_COUNT + 1] = {"models", "hosts", "modes", "exclude",
                                                    "model",  "host",  "mode"};
    for (int s = 0; s < CELL_SETTING_COUNT; s++)
        keys[7 + s] = CELL_SETTINGS[s].key; /* and the NULL after them */
    static const char *const xkeys[] = {"model", "host", "mode", "reason", NULL};
    yaml_node_t *e, *x;
    struct cell_seen *seen = NULL;
    int rc = check_seq(p, cells, "cells", 1);
    if (rc)
        return rc;
    if (!(seen = calloc(1, sizeof *seen)))
        return err_set(p->y.err, ERR_ENV, "ladder: out of memory for the cell index");
    FOR_ITEMS(p, cells, e)
    {
        if ((rc = check_map(p, e, "a cells entry", keys)))
            goto out;
        int matrix = get(p, e, "models") || get(p, e, "hosts") || get(p, e, "modes");
        int single = get(p, e, "model") || get(p, e, "host") || get(p, e, "mode");
        if (matrix == single) {
            rc = fail(p, e,
                      "a cells entry is either a matrix (models, hosts, modes) or one"
                      " cell (model, host, mode)");
            goto out;
        }
        const char *mi[64], *hi[64], *oi[64];
        yaml_node_t *ma[64], *ha[64], *oa[64], *v;
        int nm, nh, no;
        const char *mk = matrix ? "models" : "model", *hk = matrix ? "hosts" : "host",
                   *ok = matrix ? "modes" : "mode";
        if ((rc = need(p, e, mk, "a cells entry", &v)) ||
            (rc = id_list(p, v, mk, 0, modes, mi, ma, &nm, 64)) ||
            (rc = need(p, e, hk, "a cells entry", &v)) ||
            (rc = id_list(p, v, hk, 1, modes, hi, ha, &nh, 64)) ||
            (rc = need(p, e, ok, "a cells entry", &v)) ||
            (rc = id_list(p, v, ok, 2, modes, oi, oa, &no, 64)))
            goto out;
        struct cell_variant cv = {{0}};
        yaml_node_t *sn[CELL_SETTING_COUNT];
        for (int s = 0; s < CELL_SETTING_COUNT; s++)
            if ((sn[s] = get(p, e, CELL_SETTINGS[s].key)) &&
                (rc = ladder_parse_setting(p, sn[s], "a cells entry's", (enum cell_setting_id)s,
                                           &cv.at[s])))
                goto out;
        if (!matrix && get(p, e, "exclude")) {
            rc = fail(p, get(p, e, "exclude"), "'exclude' belongs to a matrix entry");
            goto out;
        }
        /* the bound before the expansion: a huge matrix fails here, in microseconds */
        long total = (long)p->l->n_cells + p->l->n_excluded + (long)nm * nh * no;
        if (total > LADDER_MAX_CELLS) {
            rc = fail(p, e,
                      "this entry (%d x %d x %d cells) takes the ladder to %ld cells, more"
                      " than the %d a ladder may hold; split the release into several ladders",
                      nm, nh, no, total, LADDER_MAX_CELLS);
            goto out;
        }
        yaml_node_t *ex = get(p, e, "exclude");
        int n_ex = 0, used[64] = {0};
        yaml_node_t *exs[64];
        if (ex) {
            if ((rc = check_seq(p, ex, "exclude", 1)))
                goto out;
            FOR_ITEMS(p, ex, x)
            {
                if ((rc = check_map(p, x, "an exclusion", xkeys)))
                    goto out;
                yaml_node_t *r = get(p, x, "reason");
                if (!r || !scalar(r) || !*scalar(r)) {
                    rc = fail(p, x, "an exclusion must carry a non-empty 'reason'");
                    goto out;
                }
                if (strlen(scalar(r)) >= sizeof p->l->excluded->reason) {
                    rc = fail(p, r, "an exclusion's reason is longer than %zu characters",
                              sizeof p->l->excluded->reason - 1);
                    goto out;
                }
                if (n_ex == 64) {
                    rc = fail(p, x, "too many exclusions");
                    goto out;
                }
                exs[n_ex++] = x;
            }
        }
        for (int a = 0; a < nm; a++)
            for (int b = 0; b < nh; b++)
                for (int c = 0; c < no; c++) {
                    int skip = -1;
                    for (int i = 0; i < n_ex; i++) {
                        yaml_node_t *fm = get(p, exs[i], "model"), *fh = get(p, exs[i], "host"),
                                    *fo = get(p, exs[i], "mode");
                        if ((!fm || !strcmp(scalar(fm) ? scalar(fm) : "", mi[a])) &&
                            (!fh || !strcmp(scalar(fh) ? scalar(fh) : "", hi[b])) &&
                            (!fo || !strcmp(scalar(fo) ? scalar(fo) : "", oi[c]))) {
                            if (skip < 0)
                                skip = i;
                            used[i] = 1;
                        }
                    }
                    int model = ladder_find_model(p->l, mi[a]);
                    int host = ladder_find_host(p->l, hi[b]);
                    if ((rc = check_offered(p, sn, model, host, oi[c], &cv)) ||
                        (rc = seen_add(p, seen, skip < 0 ? oa[c] : exs[skip], model, host, oi[c],
                                       &cv, skip >= 0)) ||
                        (rc = skip < 0 ? add_cell(p, oa[c], model, host, oi[c], &cv)
                                       : add_excluded(p, exs[skip], model, host, oi[c], &cv)))
                        goto out;
                }
        for (int i = 0; i < n_ex; i++)
            if (!used[i]) {
                rc = fail(p, exs[i], "this exclusion matches no cell of its matrix");
                goto out;
            }
    }
    rc = check_coverage(p, cells);
out:
    free(seen);
    return rc;
}

/* The positions a cell's falsify gate judges, known from the ladder: parity.positions (falsify
 * runs without the span) on the decode and prefill paths; -1 on the chat path (the conversation's
 * length comes from the model). */
/* ---- anchors (issue 10 §1) ----------------------------------------------------------------- */

static int is_sha256(const char *s)
{
    return strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

/* {path, sha256} (greedy: also after) of anchor a's file `what`. */
static int parse_anchor_pin(struct parse *p, yaml_node_t *n, const struct ladder_anchor *a,
                            const char *what, struct ladder_pin *pin, int *after)
{
    static const char *const keys[] = {"path", "sha256", NULL};
    static const char *const gkeys[] = {"path", "sha256", "after", NULL};
    char ctx[128], buf[512];
    yaml_node_t *v;
    int rc;
    snprintf(ctx, sizeof ctx, "anchor '%s' %s", a->id, what);
    if ((rc = check_map(p, n, ctx, after ? gkeys : keys)) || (rc = need(p, n, "path", ctx, &v)) ||
        (rc = get_str(p, v, "path", buf, sizeof buf)))
        return rc;
    if (!(pin->path = ladder_resolve(p->l, buf)))
        return err_set(p->y.err, ERR_ENV, "ladder: out of memory for an anchor file's path");
    if ((rc = need(p, n, "sha256", ctx, &v)) ||
        (rc = get_str(p, v, "sha256", pin->sha256, sizeof pin->sha256)))
        return rc;
    if (!is_sha256(pin->sha256))
        return fail(p, v,
                    "%s: sha256 must be 64 lower-case hex digits (a reference is identified"
                    " by its bytes)",
                    ctx);
    if (after && ((rc = need(p, n, "after", ctx, &v)) ||
                  (rc = get_int(p, v, "greedy.after", 1, 1 << 20, after))))
        return rc;
    return 0;
}

static int parse_anchor(struct parse *p, yaml_node_t *k, yaml_node_t *n, struct ladder_anchor *a)
{
    static const char *const keys[] = {"arch",   "reference", "model",      "tokens",
                                       "logits", "greedy",    "thresholds", NULL};
    static const char *const tkeys[] = {"max_nmse", "min_cosine", "near_tie", NULL};
    char what[128];
    yaml_node_t *v, *t;
    int rc;
    snprintf(a->id, sizeof a->id, "%s", scalar(k) ? scalar(k) : "");
    snprintf(what, sizeof what, "anchor '%s'", a->id);
    a->line = (int)k->start_mark.line + 1;
    if (ladder_find_model(p->l, a->id) >= 0)
        return fail(p, k, "%s has the id of a model; anchor and model ids must differ", what);
    if ((rc = check_map(p, n, what, keys)) || (rc = need(p, n, "arch", what, &v)) ||
        (rc = get_str(p, v, "arch", a->arch, sizeof a->arch)))
        return rc;
    if (strcmp(a->arch, "qwen3") && strcmp(a->arch, "qwen3moe"))
        return fail(p, v, "%s: arch '%s' is not supported (expected qwen3 or qwen3moe)", what,
                    a->arch);
    if ((rc = need(p, n, "reference", what, &v)) ||
        (rc = get_str(p, v, "reference", a->reference, sizeof a->reference)) ||
        (rc = need(p, n, "model", what, &v)) ||
        (rc = parse_anchor_pin(p, v, a, "model", &a->model, NULL)) ||
        (rc = need(p, n, "tokens", what, &v)) ||
        (rc = parse_anchor_pin(p, v, a, "tokens", &a->tokens, NULL)) ||
        (rc = need(p, n, "logits", what, &v)) ||
        (rc = parse_anchor_pin(p, v, a, "logits", &a->logits, NULL)))
        return rc;
    if ((v = get(p, n, "greedy")) &&
        (rc = parse_anchor_pin(p, v, a, "greedy", &a->greedy, &a->greedy_after)))
        return rc;
    /* thresholds are stated, never defaulted; looser than these bounds an anchor sees nothing
     * (docs/gates.md: the smallest single mistake in the conformance README moves NMSE 1e-3) */
    if ((rc = need(p, n, "thresholds", what, &v)) || (rc = check_map(p, v, "thresholds", tkeys)) ||
        (rc = need(p, v, "max_nmse", "thresholds", &t)) ||
        (rc = get_num(p, t, "thresholds.max_nmse", 0, 1e-3, &a->max_nmse)) ||
        (rc = need(p, v, "min_cosine", "thresholds", &t)) ||
        (rc = get_num(p, t, "thresholds.min_cosine", 0.9, 1, &a->min_cosine)) ||
        (rc = need(p, v, "near_tie", "thresholds", &t)) ||
        (rc = get_num(p, t, "thresholds.near_tie", 0, 1, &a->near_tie)))
        return rc;
    return 0;
}

/* anchors: {ID: {...}} and unanchored: {ARCH: "reason"} (both optional here; whether every gated
 * architecture is covered is ladder_check_anchored()'s question). */
static int parse_anchors(struct parse *p, yaml_node_t *root)
{
    struct ladder *l = p->l;
    yaml_node_t *v;
    int rc;
    if ((v = get(p, root, "anchors"))) {
        if ((rc = check_map(p, v, "anchors", NULL)))
            return rc;
        size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
        if (n == 0)
            return fail(p, v, "anchors must not be empty (omit it and say why under unanchored)");
        if (!(l->anchors = calloc(n, sizeof *l->anchors)))
            return err_set(p->y.err, ERR_ENV, "ladder: out of memory for the anchors");
        FOR_PAIRS(v, pr)
        {
            if ((rc = parse_anchor(p, node(p, pr->key), node(p, pr->value),
                                   &l->anchors[l->n_anchors++])))
                return rc;
        }
    }
    if ((v = get(p, root, "unanchored"))) {
        if ((rc = check_map(p, v, "unanchored", NULL)))
            return rc;
        size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
        if (!(l->unanchored = calloc(n + 1, sizeof *l->unanchored)))
            return err_set(p->y.err, ERR_ENV, "ladder: out of memory for the unanchored list");
        FOR_PAIRS(v, pr)
        {
            yaml_node_t *k = node(p, pr->key), *r = node(p, pr->value);
            const char *arch = scalar(k); /* check_map() made every key a scalar */
            struct ladder_unanchored *u = &l->unanchored[l->n_unanchored++];
            u->line = (int)k->start_mark.line + 1;
            if (!arch || (strcmp(arch, "qwen3") && strcmp(arch, "qwen3moe")))
                return fail(p, k,
                            "unanchored: arch '%s' is not supported (expected qwen3 or"
                            " qwen3moe)",
                            arch ? arch : "?");
            snprintf(u->arch, sizeof u->arch, "%s", arch);
            if ((rc = get_str(p, r, "unanchored reason", u->reason, sizeof u->reason)))
                return rc;
            for (int i = 0; i < l->n_anchors; i++)
                if (!strcmp(l->anchors[i].arch, u->arch))
                    return fail(p, k, "unanchored names %s, but anchor '%s' (line %d) anchors it",
                                u->arch, l->anchors[i].id, l->anchors[i].line);
        }
    }
    return 0;
}

int ladder_find_anchor(const struct ladder *l, const char *id)
{
    for (int i = 0; i < l->n_anchors; i++)
        if (!strcmp(l->anchors[i].id, id))
            return i;
    return -1;
}

const char *ladder_unanchored_reason(const struct ladder *l, const char *arch)
{
    for (int i = 0; i < l->n_anchors; i++)
        if (!strcmp(l->anchors[i].arch, arch))
            return NULL;
    for (int i = 0; i < l->n_unanchored; i++)
        if (!strcmp(l->unanchored[i].arch, arch))
            return l->unanchored[i].reason;
    return NULL;
}

int ladder_check_anchored(const struct ladder *l, struct gate_err *err)
{
    for (int i = 0; i < l->n_models; i++) {
        const struct ladder_model *m = &l->models[i];
        int ok = 0;
        for (int a = 0; a < l->n_anchors && !ok; a++)
            ok = !strcmp(l->anchors[a].arch, m->arch);
        for (int u = 0; u < l->n_unanchored && !ok; u++)
            ok = !strcmp(l->unanchored[u].arch, m->arch);
        if (!ok)
            return err_set(err, ERR_INPUT,
                           "%s:%d:3: the ladder gates %s (model '%s') but no"
                           " anchor judges the judge for it: add an anchors entry with arch: %s"
                           " (a model, tokens and logits from an engine that is not gate, each"
                           " pinned by sha256), or say why not under unanchored: {%s: \"reason\"}",
                           l->path, m->line, m->arch, m->id, m->arch, m->arch);
    }
    return 0;
}

/* ---- top level ----------------------------------------------------------------------------- */

static int parse_root(struct parse *p, yaml_node_t *root)
{
    static const char *const keys[] = {"release", "models",  "hosts",      "modes",   "cells",
                                       "gates",   "anchors", "unanchored", "engines", NULL};
    struct ladder *l = p->l;
    yaml_node_t *v, *it;
    int rc;
    if (!root)
        return fail(p, NULL, "the ladder is empty");
    if ((rc = check_map(p, root, "the ladder", keys)) ||
        (rc = need(p, root, "release", "the ladder", &v)) || (rc = parse_release(p, v)) ||
        (rc = need(p, root, "models", "the ladder", &v)) || (rc = check_map(p, v, "models", NULL)))
        return rc;
    l->models = calloc((size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start) + 1,
                       sizeof *l->models);
    if (!l->models)
        return err_set(p->y.err, ERR_ENV, "ladder: out of memory for the models");
    FOR_PAIRS(v, pr)
    {
        if ((rc = parse_model(p, node(p, pr->key), node(p, pr->value), &l->models[l->n_models++])))
            return rc;
    }
    if (l->n_models == 0)
        return fail(p, v, "models must not be empty");
    if ((rc = need(p, root, "hosts", "the ladder", &v)) || (rc = check_map(p, v, "hosts", NULL)))
        return rc;
    l->hosts = calloc((size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start) + 1,
                      sizeof *l->hosts);
    if (!l->hosts)
        return err_set(p->y.err, ERR_ENV, "ladder: out of memory for the hosts");
    FOR_PAIRS(v, pr)
    {
        if ((rc = parse_host(p, node(p, pr->key), node(p, pr->value), &l->hosts[l->n_hosts++])))
            return rc;
    }
    if (l->n_hosts == 0)
        return fail(p, v, "hosts must not be empty");
    if ((rc = parse_engines(p, root)))
        return rc;
    yaml_node_t *modes;
    if ((rc = need(p, root, "modes", "the ladder", &modes)) ||
        (rc = check_seq(p, modes, "modes", 1)))
        return rc;
    FOR_ITEMS(p, modes, it)
    {
        const char *m = scalar(it);
        if (!m)
            return fail(p, it, "modes entries must be strings like ref.decode");
        if (!strcmp(m, "ref.batch") || !strcmp(m, "ref.judge"))
            return fail(p, it,
                        "mode '%s' is the judge itself (the reference twin's batched"
                        " forward); a cell must test a different path",
                        m);
        if ((rc = ladder_mode_declared(p, it, m)))
            return rc;
    }
    if ((rc = need(p, root, "cells", "the ladder", &v)) || (rc = parse_cells(p, v, modes)))
        return rc;
    if ((rc = ladder_parse_gates(p, get(p, root, "gates"))))
        return rc;
    return parse_anchors(p, root);
}

static int by_line(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* l->trust_sha256: SHA-256 over the sorted lines "HOST ed25519:HEX\n" of every trusted key. */
static int trust_digest(struct ladder *l, struct gate_err *err)
{
    int n = 0, k = 0;
    for (int h = 0; h < l->n_hosts; h++)
        n += l->hosts[h].n_trust;
    char **lines = calloc((size_t)n + 1, sizeof *lines);
    if (!lines)
        return err_set(err, ERR_ENV, "ladder: out of memory for the trusted keys");
    int rc = 0;
    for (int h = 0; h < l->n_hosts && !rc; h++)
        for (int t = 0; t < l->hosts[h].n_trust && !rc; t++) {
            char hex[65];
            sodium_bin2hex(hex, sizeof hex, l->hosts[h].trust[t], 32);
            size_t len = strlen(l->hosts[h].id) + 8 + 64 + 3;
            if (!(lines[k] = malloc(len)))
                rc = err_set(err, ERR_ENV, "ladder: out of memory for a trusted key");
            else
                snprintf(lines[k++], len, "%s ed25519:%s\n", l->hosts[h].id, hex);
        }
    if (!rc) {
        qsort(lines, (size_t)k, sizeof *lines, by_line);
        crypto_hash_sha256_state st;
        unsigned char d[32];
        crypto_hash_sha256_init(&st);
        for (int i = 0; i < k; i++)
            crypto_hash_sha256_update(&st, (const unsigned char *)lines[i], strlen(lines[i]));
        crypto_hash_sha256_final(&st, d);
        sodium_bin2hex(l->trust_sha256, sizeof l->trust_sha256, d, 32);
    }
    for (int i = 0; i < k; i++)
        free(lines[i]);
    free(lines);
    return rc;
}

int ladder_load(struct ladder **out, const char *path, struct gate_err *err)
{
    *out = NULL;
    int rc = 0;
    struct pinned file = {.fd = -1};
    uint8_t *bytes = NULL;
    size_t size = 0;
    struct parse p = {.y = {.path = path, .err = err}};
    struct ladder *l = calloc(1, sizeof *l);
    if (!l || !(l->path = strdup(path)))
        goto oom;
    char *tmp = strdup(path);
    if (!tmp)
        goto oom;
    l->dir = strdup(dirname(tmp));
    free(tmp);
    if (!l->dir)
        goto oom;
    p.l = l;
    /* one descriptor: a regular file within the bound, hashed and read from the same open */
    if ((rc = pin_open_bounded(path, NULL, LADDER_FILE_MAX, &file, err)) ||
        (rc = pin_read_all(&file, LADDER_FILE_MAX, &bytes, &size, err)))
        goto fail;
    snprintf(l->sha256, sizeof l->sha256, "%s", file.sha256);
    static const struct yamldoc_limits lim = {LADDER_MAX_DEPTH, LADDER_MAX_ENTRIES, "ladder"};
    if ((rc = yamldoc_load(&p.y, bytes, size, &lim)))
        goto fail;
    if ((rc = parse_root(&p, yamldoc_root(&p.y))) || (rc = trust_digest(l, err)))
        goto fail;
    yamldoc_free(&p.y);
    pin_close(&file);
    free(bytes);
    *out = l;
    return 0;
oom:
    rc = err_set(err, ERR_ENV, "ladder: out of memory for the ladder and its path '%s'", path);
fail:
    yamldoc_free(&p.y);
    pin_close(&file);
    free(bytes);
    ladder_free(l);
    return rc;
}

void ladder_free(struct ladder *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->n_models; i++)
        free(l->models[i].path);
    free(l->models);
    free(l->hosts);
    free(l->cells);
    for (int i = 0; i < l->n_anchors; i++) {
        free(l->anchors[i].model.path);
        free(l->anchors[i].tokens.path);
        free(l->anchors[i].logits.path);
        free(l->anchors[i].greedy.path);
    }
    free(l->anchors);
    free(l->unanchored);
    free(l->excluded);
    for (int i = 0; i < l->n_engines; i++) {
        struct exec_engine *x = &l->engines[i].e;
        for (int k = 0; k < x->argc; k++)
            free(x->argv[k]);
        for (int k = 0; k < x->n_env; k++)
            free(x->env[k]);
        for (int k = 0; k < x->n_allow; k++)
            free(x->allow[k]);
        for (int k = 0; k < x->n_devices; k++)
            free(x->devices[k]);
        for (int k = 0; k < x->n_files; k++)
            free(x->files[k].path);
        free(l->engines[i].argv0);
    }
    free(l->engines);
    free(l->path);
    free(l->dir);
    free(l);
}

int ladder_find_host(const struct ladder *l, const char *id)
{
    for (int i = 0; i < l->n_hosts; i++)
        if (!strcmp(l->hosts[i].id, id))
            return i;
    return -1;
}

int ladder_find_model(const struct ladder *l, const char *id)
{
    for (int i = 0; i < l->n_models; i++)
        if (!strcmp(l->models[i].id, id))
            return i;
    return -1;
}

struct cell_key ladder_cell_key(const struct ladder *l, int i)
{
    const struct ladder_cell *c = &l->cells[i];
    return (struct cell_key){l->models[c->model].id, l->hosts[c->host].id, c->mode, c->v};
}

struct cell_key ladder_excluded_key(const struct ladder *l, int i)
{
    const struct ladder_excluded *e = &l->excluded[i];
    return (struct cell_key){l->models[e->model].id, l->hosts[e->host].id, e->mode, e->v};
}

struct cell_key ladder_row_key(const struct ladder *l, int i)
{
    return i < l->n_cells ? ladder_cell_key(l, i) : ladder_excluded_key(l, i - l->n_cells);
}

const char *ladder_column_name(const struct cell_key *k, char *buf, size_t n)
{
    char suffix[CELL_SUFFIX_MAX];
    snprintf(buf, n, "%s/%s%s", k->host, k->mode,
             cell_variant_suffix(&k->v, suffix, sizeof suffix));
    return buf;
}

/* a name that does not fit is cut (ids and modes are bounded far below the callers' buffers) */
const char *ladder_cell_name(const struct ladder *l, int i, char *buf, int n)
{
    const struct cell_key k = ladder_cell_key(l, i);
    struct gate_err e = {0};
    cell_key_name(&k, buf, (size_t)n, &e);
    return buf;
}

const char *ladder_excluded_name(const struct ladder *l, int i, char *buf, int n)
{
    const struct cell_key k = ladder_excluded_key(l, i);
    struct gate_err e = {0};
    cell_key_name(&k, buf, (size_t)n, &e);
    return buf;
}

int ladder_cell_goldens_check(const struct ladder *l, int ci, struct gate_err *err)
{
    const struct ladder_cell *c = &l->cells[ci];
    const struct ladder_gates *g = &c->g;
    char name[256];
    ladder_cell_name(l, ci, name, sizeof name);
    if (!g->goldens[0])
        return err_set(err, ERR_INPUT,
                       "%s:%d:%d: cell %s: the golden gate runs on every cell and this one has no"
                       " goldens file: declare gates.golden.goldens (in gates.defaults or an"
                       " override matching the cell), then record it with: gate golden record %s",
                       l->path, c->line, c->col, name, l->path);
    if (!g->goldens_sha256[0]) {
        char sha[65] = "";
        identity_file_sha256(g->goldens, sha, NULL);
        return err_set(err, ERR_INPUT,
                       "%s:%d:%d: cell %s: gates.golden.goldens '%s' is not pinned:"
                       " goldens are evidence identified by their bytes; add golden.sha256: %s",
                       l->path, c->line, c->col, name, g->goldens,
                       sha[0] ? sha : "<sha256 of the file once recorded>");
    }
    return 0;
}

int ladder_check_runnable(const struct ladder *l, struct gate_err *err)
{
    int rc = ladder_check_anchored(l, err);
    for (int i = 0; !rc && i < l->n_cells; i++)
        rc = ladder_cell_goldens_check(l, i, err);
    return rc;
}
