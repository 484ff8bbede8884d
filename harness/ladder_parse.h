/* ladder_parse.h — internal to the ladder parser (harness/ladder.c parses the file's sections,
 * harness/ladder_settings.c resolves the gates' settings per cell): the parse state, the
 * yamldoc readers under the short names both files use, and the helpers they share. Other
 * modules use harness/ladder.h. Start reading: struct parse.
 */
#ifndef GATE_LADDER_PARSE_H
#define GATE_LADDER_PARSE_H

#include "harness/ladder.h"
#include "harness/yamldoc.h"

struct parse {
    struct yamldoc y; /* the document, the ladder's path, the caller's error record */
    struct ladder *l; /* the ladder being filled */
};

/* The yamldoc readers on p's document (harness/yamldoc.h says what each refuses). */
#define fail(p, ...) yamldoc_fail(&(p)->y, __VA_ARGS__)
#define FOR_ITEMS(p, seq, it) YAMLDOC_FOR_ITEMS(&(p)->y, seq, it)
#define FOR_PAIRS(map, pr) YAMLDOC_FOR_PAIRS(map, pr)
static inline yaml_node_t *node(struct parse *p, int i)
{
    return yamldoc_node(&p->y, i);
}
static inline const char *scalar(const yaml_node_t *n)
{
    return yamldoc_scalar(n);
}
static inline const char *kind(const yaml_node_t *n)
{
    return yamldoc_kind(n);
}
static inline int check_map(struct parse *p, yaml_node_t *map, const char *what,
                            const char *const *allowed)
{
    return yamldoc_check_map(&p->y, map, what, allowed);
}
static inline yaml_node_t *get(struct parse *p, yaml_node_t *map, const char *key)
{
    return yamldoc_get(&p->y, map, key);
}
static inline int need(struct parse *p, yaml_node_t *map, const char *key, const char *what,
                       yaml_node_t **out)
{
    return yamldoc_need(&p->y, map, key, what, out);
}
static inline int get_str(struct parse *p, yaml_node_t *n, const char *what, char *buf, size_t cap)
{
    return yamldoc_get_str(&p->y, n, what, buf, cap);
}
static inline int get_int(struct parse *p, yaml_node_t *n, const char *what, long lo, long hi,
                          int *out)
{
    return yamldoc_get_int(&p->y, n, what, lo, hi, out);
}
static inline int get_num(struct parse *p, yaml_node_t *n, const char *what, double lo, double hi,
                          double *out)
{
    return yamldoc_get_num(&p->y, n, what, lo, hi, out);
}
static inline int check_seq(struct parse *p, yaml_node_t *n, const char *what, int nonempty)
{
    return yamldoc_check_seq(&p->y, n, what, nonempty);
}

/* rel resolved against the ladder's folder (an absolute rel unchanged); malloc'd, NULL out of
 * memory. */
char *ladder_resolve(const struct ladder *l, const char *rel);

/* A mode the ladder may name: the fixed list, or exec.<engine>.<path> of a declared engine that
 * lists the path in `supports`. 0 ok; else the refusal at n (n NULL: only the status). */
int ladder_mode_declared(struct parse *p, yaml_node_t *n, const char *text);

/* Identity setting s (receipts/cellkey.h's row) read from v into *out (its value number);
 * where names the entry in messages ("a cells entry's"). */
int ladder_parse_setting(struct parse *p, yaml_node_t *v, const char *where, enum cell_setting_id s,
                         unsigned char *out);

/* The `gates` section (NULL: absent): every cell's settings resolved (the rows' defaults, then
 * gates.defaults, then every matching override in order) and checked (harness/ladder_settings.c).
 * Called after the cells are expanded. */
int ladder_parse_gates(struct parse *p, yaml_node_t *gates);

#endif
