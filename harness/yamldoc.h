/* yamldoc.h — strict reading of one YAML document (libyaml's document API) for files a person
 * writes: the bytes prescanned on the event stream before the document is built (no aliases,
 * one document, bounded nesting and collection sizes), then typed lookups whose every error is
 * ERR_INPUT "file:line:column: what, expected what", and mappings refused when a key is unknown,
 * duplicated or not a scalar. The ladder parser (harness/ladder.c, ladder_settings.c) reads
 * through it; nothing here knows what a ladder is.
 * Start reading: yamldoc_load(), then yamldoc_check_map() and the yamldoc_get_* readers.
 */
#ifndef GATE_YAMLDOC_H
#define GATE_YAMLDOC_H

#include <stddef.h>
#include <yaml.h>

#include "base/err.h"

/* A loaded document and where its errors go. path: the file name messages quote (borrowed);
 * err: the caller's error record (borrowed; the first error wins). */
struct yamldoc {
    const char *path;
    yaml_document_t doc;
    int loaded; /* doc holds a document (yamldoc_free deletes it) */
    struct gate_err *err;
};

/* Bounds of a document (yamldoc_load): nesting of collections, and entries of one mapping or
 * list (a mapping's keys and values count as one entry each pair). */
struct yamldoc_limits {
    int max_depth;
    long max_entries;
    const char *what; /* "ladder": the messages name the bound's owner ("a ladder is one YAML
                       * document", "the bound for a ladder") */
};

/* Prescan bytes (size of them) and build the document into y (y->path, y->err set by the
 * caller). ERR_INPUT at file:line:column: a YAML syntax error, an alias, a second document, a
 * collection nested deeper than lim->max_depth (at most 64) or holding more than
 * lim->max_entries entries; ERR_ENV when the parser cannot be allocated. On error nothing is
 * left to free; on success free with yamldoc_free(). */
int yamldoc_load(struct yamldoc *y, const unsigned char *bytes, size_t size,
                 const struct yamldoc_limits *lim);
void yamldoc_free(struct yamldoc *y);

/* The root node (NULL for an empty document); node i of the document. */
yaml_node_t *yamldoc_root(struct yamldoc *y);
yaml_node_t *yamldoc_node(struct yamldoc *y, int i);

/* ERR_INPUT "path:line:col: MESSAGE" at n (n NULL: "path: MESSAGE") into y->err; returns the
 * status. */
int yamldoc_fail(struct yamldoc *y, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The text of a scalar node; NULL for any other node (or NULL). */
const char *yamldoc_scalar(const yaml_node_t *n);
/* "a scalar", "a list" or "a mapping": what a message says was found. */
const char *yamldoc_kind(const yaml_node_t *n);

/* map must be a mapping whose keys are scalars, unique (a duplicate quotes the line of the
 * first) and, when allowed is non-NULL (NULL-terminated), each one of allowed (an unknown key
 * lists them all). what names the mapping in messages ("gates.defaults"). */
int yamldoc_check_map(struct yamldoc *y, yaml_node_t *map, const char *what,
                      const char *const *allowed);

/* The value of key in map (a mapping checked by yamldoc_check_map), or NULL. */
yaml_node_t *yamldoc_get(struct yamldoc *y, yaml_node_t *map, const char *key);

/* *out = the value of key in map; "WHAT is missing required key 'KEY'" when absent. */
int yamldoc_need(struct yamldoc *y, yaml_node_t *map, const char *key, const char *what,
                 yaml_node_t **out);

/* Typed scalars; what names the value in messages. A string: non-empty, shorter than cap. An
 * integer: decimal, in [lo, hi]. A number: finite (not NaN), in [lo, hi]. */
int yamldoc_get_str(struct yamldoc *y, yaml_node_t *n, const char *what, char *buf, size_t cap);
int yamldoc_get_int(struct yamldoc *y, yaml_node_t *n, const char *what, long lo, long hi,
                    int *out);
int yamldoc_get_num(struct yamldoc *y, yaml_node_t *n, const char *what, double lo, double hi,
                    double *out);

/* n must be a list (nonempty: with at least one item). */
int yamldoc_check_seq(struct yamldoc *y, yaml_node_t *n, const char *what, int nonempty);

/* Every item node `it` of the list seq; every key/value pair `pr` of the mapping map. */
#define YAMLDOC_FOR_ITEMS(y, seq, it)                                                              \
    for (yaml_node_item_t *it##_i = (seq)->data.sequence.items.start;                              \
         it##_i < (seq)->data.sequence.items.top && ((it) = yamldoc_node(y, *it##_i)); it##_i++)
#define YAMLDOC_FOR_PAIRS(map, pr)                                                                 \
    for (yaml_node_pair_t *pr = (map)->data.mapping.pairs.start;                                   \
         pr < (map)->data.mapping.pairs.top; pr++)

#endif
