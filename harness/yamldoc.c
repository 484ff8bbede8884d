/* yamldoc.c — strict reading of one YAML document (see yamldoc.h): the event-stream prescan,
 * the load, and the typed lookups with file:line:column errors. Start reading: yamldoc_load().
 */
#include "harness/yamldoc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define YAMLDOC_MAX_DEPTH 64 /* the most a caller's limits may ask for (the prescan's stack) */

int yamldoc_fail(struct yamldoc *p, const yaml_node_t *n, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n)
        return err_set(p->err, ERR_INPUT, "%s:%zu:%zu: %s", p->path, n->start_mark.line + 1,
                       n->start_mark.column + 1, msg);
    return err_set(p->err, ERR_INPUT, "%s: %s", p->path, msg);
}

yaml_node_t *yamldoc_node(struct yamldoc *p, int i)
{
    return yaml_document_get_node(&p->doc, i);
}

const char *yamldoc_scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

const char *yamldoc_kind(const yaml_node_t *n)
{
    return !n                              ? "nothing"
           : n->type == YAML_SCALAR_NODE   ? "a scalar"
           : n->type == YAML_SEQUENCE_NODE ? "a list"
                                           : "a mapping";
}

/* qsort_r order of a mapping's keys: by text, then by position (equal keys keep file order). */
static int by_key(const void *a, const void *b, void *keys)
{
    int ia = *(const int *)a, ib = *(const int *)b;
    int c = strcmp(((const char **)keys)[ia], ((const char **)keys)[ib]);
    return c ? c : (ia > ib) - (ia < ib);
}

/* For a mapping of n scalar keys, first[i] = index of the first key equal to key i (i itself
 * when unique so far): sort + neighbours, O(n log n) rather than comparing every pair. */
static int first_equal_keys(struct yamldoc *p, yaml_node_t *map, int n, int *first)
{
    const char **keys = malloc((size_t)n * sizeof *keys);
    int *order = malloc((size_t)n * sizeof *order);
    if (!keys || !order) {
        free(keys);
        free(order);
        return err_set(p->err, ERR_ENV, "%s: out of memory for a mapping's key index", p->path);
    }
    for (int i = 0; i < n; i++) {
        keys[i] = yamldoc_scalar(yamldoc_node(p, map->data.mapping.pairs.start[i].key));
        order[i] = i;
    }
    qsort_r(order, (size_t)n, sizeof *order, by_key, keys);
    for (int j = 0; j < n; j++)
        first[order[j]] =
            j > 0 && !strcmp(keys[order[j]], keys[order[j - 1]]) ? first[order[j - 1]] : order[j];
    free(keys);
    free(order);
    return 0;
}

int yamldoc_check_map(struct yamldoc *p, yaml_node_t *map, const char *what,
                      const char *const *allowed)
{
    if (map->type != YAML_MAPPING_NODE)
        return yamldoc_fail(p, map, "%s must be a mapping, found %s", what, yamldoc_kind(map));
    int n = (int)(map->data.mapping.pairs.top - map->data.mapping.pairs.start), rc = 0;
    int *first = NULL;
    for (int i = 0; i < n; i++)
        if (!yamldoc_scalar(yamldoc_node(p, map->data.mapping.pairs.start[i].key)))
            return yamldoc_fail(p, yamldoc_node(p, map->data.mapping.pairs.start[i].key),
                                "keys of %s must be scalars", what);
    if (n > 0 && (!(first = malloc((size_t)n * sizeof *first)) ||
                  (rc = first_equal_keys(p, map, n, first)))) {
        free(first);
        return rc ? rc
                  : err_set(p->err, ERR_ENV,
                            "%s: out of memory for a mapping's first-occurrence index", p->path);
    }
    for (yaml_node_pair_t *a = map->data.mapping.pairs.start; a < map->data.mapping.pairs.top;
         a++) {
        yaml_node_t *k = yamldoc_node(p, a->key);
        const char *ks = yamldoc_scalar(k);
        int f = first[a - map->data.mapping.pairs.start];
        if (f != a - map->data.mapping.pairs.start) {
            yaml_node_t *b = yamldoc_node(p, map->data.mapping.pairs.start[f].key);
            free(first);
            return yamldoc_fail(p, k, "duplicate key '%s' in %s (first at line %zu)", ks, what,
                                b->start_mark.line + 1);
        }
        if (!allowed)
            continue;
        int ok = 0;
        for (const char *const *q = allowed; *q && !ok; q++)
            ok = !strcmp(*q, ks);
        if (!ok) {
            char list[512] = "";
            for (const char *const *q = allowed; *q; q++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                         q == allowed ? "" : ", ", *q);
            free(first);
            return yamldoc_fail(p, k, "unknown key '%s' in %s (expected one of: %s)", ks, what,
                                list);
        }
    }
    free(first);
    return 0;
}

yaml_node_t *yamldoc_get(struct yamldoc *p, yaml_node_t *map, const char *key)
{
    for (yaml_node_pair_t *a = map->data.mapping.pairs.start; a < map->data.mapping.pairs.top; a++)
        if (!strcmp(yamldoc_scalar(yamldoc_node(p, a->key)), key))
            return yamldoc_node(p, a->value);
    return NULL;
}

int yamldoc_need(struct yamldoc *p, yaml_node_t *map, const char *key, const char *what,
                 yaml_node_t **out)
{
    *out = yamldoc_get(p, map, key);
    if (!*out)
        return yamldoc_fail(p, map, "%s is missing required key '%s'", what, key);
    return 0;
}

int yamldoc_get_str(struct yamldoc *p, yaml_node_t *n, const char *what, char *buf, size_t cap)
{
    const char *s = yamldoc_scalar(n);
    if (!s)
        return yamldoc_fail(p, n, "%s must be a string, found %s", what, yamldoc_kind(n));
    if (!*s)
        return yamldoc_fail(p, n, "%s must not be empty", what);
    if (strlen(s) >= cap)
        return yamldoc_fail(p, n, "%s is longer than %zu characters", what, cap - 1);
    strcpy(buf, s);
    return 0;
}

int yamldoc_get_int(struct yamldoc *p, yaml_node_t *n, const char *what, long lo, long hi, int *out)
{
    const char *s = yamldoc_scalar(n);
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s)
        return yamldoc_fail(p, n, "%s must be an integer, found %s", what, yamldoc_kind(n));
    if (errno || end == s || *end)
        return yamldoc_fail(p, n, "%s must be an integer, found '%s'", what, s);
    if (v < lo || v > hi)
        return yamldoc_fail(p, n, "%s must be in [%ld, %ld], found %ld", what, lo, hi, v);
    *out = (int)v;
    return 0;
}

int yamldoc_get_num(struct yamldoc *p, yaml_node_t *n, const char *what, double lo, double hi,
                    double *out)
{
    const char *s = yamldoc_scalar(n);
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s)
        return yamldoc_fail(p, n, "%s must be a number, found %s", what, yamldoc_kind(n));
    if (errno || end == s || *end || v != v)
        return yamldoc_fail(p, n, "%s must be a number, found '%s'", what, s);
    if (v < lo || v > hi)
        return yamldoc_fail(p, n, "%s must be in [%g, %g], found %g", what, lo, hi, v);
    *out = v;
    return 0;
}

int yamldoc_check_seq(struct yamldoc *p, yaml_node_t *n, const char *what, int nonempty)
{
    if (n->type != YAML_SEQUENCE_NODE)
        return yamldoc_fail(p, n, "%s must be a list, found %s", what, yamldoc_kind(n));
    if (nonempty && n->data.sequence.items.top == n->data.sequence.items.start)
        return yamldoc_fail(p, n, "%s must not be empty", what);
    return 0;
}

/* Walk the YAML events once before the document is built: refuse aliases (a file a person
 * writes needs none; they make trees out of graphs), more than one document, nesting deeper than
 * lim->max_depth and collections of more than lim->max_entries entries, each at
 * file:line:column. */
static int prescan(const char *path, const unsigned char *bytes, size_t size,
                   const struct yamldoc_limits *lim, struct gate_err *err)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    long count[YAMLDOC_MAX_DEPTH + 1] = {0};
    int is_map[YAMLDOC_MAX_DEPTH + 1] = {0};
    const int max_depth = lim->max_depth < YAMLDOC_MAX_DEPTH ? lim->max_depth : YAMLDOC_MAX_DEPTH;
    int depth = 0, docs = 0, rc = 0, done = 0;
    if (!yaml_parser_initialize(&parser))
        return err_set(err, ERR_ENV, "%s: out of memory for the YAML parser", path);
    yaml_parser_set_input_string(&parser, bytes, size);
    while (!done && !rc) {
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = err_set(err, ERR_INPUT, "%s:%zu:%zu: YAML error: %s%s%s", path,
                         parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                         parser.problem ? parser.problem : "malformed", parser.context ? " " : "",
                         parser.context ? parser.context : "");
            break;
        }
        size_t line = ev.start_mark.line + 1, col = ev.start_mark.column + 1;
        int node = ev.type == YAML_SCALAR_EVENT || ev.type == YAML_SEQUENCE_START_EVENT ||
                   ev.type == YAML_MAPPING_START_EVENT || ev.type == YAML_ALIAS_EVENT;
        if (node && depth > 0 && ++count[depth] > (is_map[depth] ? 2L : 1L) * lim->max_entries)
            rc = err_set(err, ERR_INPUT,
                         "%s:%zu:%zu: a %s with more than %ld entries (the bound"
                         " for one %s collection)",
                         path, line, col, is_map[depth] ? "mapping" : "list", lim->max_entries,
                         lim->what);
        else if (ev.type == YAML_ALIAS_EVENT)
            rc = err_set(err, ERR_INPUT,
                         "%s:%zu:%zu: YAML aliases (*name) are not allowed in a"
                         " %s; write the value out",
                         path, line, col, lim->what);
        else if (ev.type == YAML_DOCUMENT_START_EVENT && ++docs > 1)
            rc = err_set(err, ERR_INPUT,
                         "%s:%zu:%zu: a %s is one YAML document; found a"
                         " second",
                         path, line, col, lim->what);
        else if (ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT) {
            if (depth == max_depth)
                rc = err_set(err, ERR_INPUT,
                             "%s:%zu:%zu: YAML nested deeper than %d levels (the"
                             " bound for a %s)",
                             path, line, col, max_depth, lim->what);
            else {
                depth++;
                count[depth] = 0;
                is_map[depth] = ev.type == YAML_MAPPING_START_EVENT;
            }
        } else if (ev.type == YAML_SEQUENCE_END_EVENT || ev.type == YAML_MAPPING_END_EVENT)
            depth--;
        else if (ev.type == YAML_STREAM_END_EVENT)
            done = 1;
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    return rc;
}

int yamldoc_load(struct yamldoc *y, const unsigned char *bytes, size_t size,
                 const struct yamldoc_limits *lim)
{
    y->loaded = 0;
    int rc = prescan(y->path, bytes, size, lim, y->err);
    if (rc)
        return rc;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        return err_set(y->err, ERR_ENV, "%s: out of memory for the YAML parser", y->path);
    yaml_parser_set_input_string(&parser, bytes, size);
    if (!yaml_parser_load(&parser, &y->doc))
        rc = err_set(y->err, ERR_INPUT, "%s:%zu:%zu: YAML error: %s%s%s", y->path,
                     parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                     parser.problem ? parser.problem : "malformed", parser.context ? " " : "",
                     parser.context ? parser.context : "");
    else
        y->loaded = 1;
    yaml_parser_delete(&parser); /* the document owns its nodes */
    return rc;
}

void yamldoc_free(struct yamldoc *y)
{
    if (y && y->loaded)
        yaml_document_delete(&y->doc);
    if (y)
        y->loaded = 0;
}

yaml_node_t *yamldoc_root(struct yamldoc *y)
{
    return yaml_document_get_root_node(&y->doc);
}
