/* ladder_settings.c — a ladder's gate settings (see ladder.h): every cell's settings resolved
 * from the gate table's rows (harness/gatedef.c) — the rows' defaults, then gates.defaults, then
 * every override whose match fits the cell, in file order — and checked as the run will check
 * them (each gate's settings check, the parity looseness rule, the falsify faults against the
 * model's architecture), so an input error is refused at `gate ladder check`, never signed as a
 * FAIL; and the settings object each gate's receipt records (ladder_gate_settings).
 * Every section and key of `gates:` comes from the table: no list of gates or keys here.
 * Start reading: ladder_parse_gates(), then apply_gates().
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/gatedef.h"
#include "harness/ladder_parse.h"
#include "oracles/falsify.h"
#include "oracles/mode.h"
#include "oracles/parity.h"

unsigned ladder_falsify_proxy_kinds(const struct ladder_gates *g)
{
    if (!g->engine || g->falsify.n <= 0)
        return 0;
    const struct exec_engine *e = &g->engine->e;
    const unsigned takes = !(e->supports & EXEC_SUPPORTS_FAULTS) ? 0u : e->faults ? e->faults : ~0u;
    return falsify_kinds_used(&g->falsify) & ~takes;
}

int ladder_falsify_by_proxy(const struct ladder_gates *g)
{
    return ladder_falsify_proxy_kinds(g) != 0;
}

int ladder_falsify_proxy_text(const struct ladder_gates *g, char *buf, size_t n)
{
    const unsigned pk = ladder_falsify_proxy_kinds(g);
    fault_kinds_text(pk, buf, n);
    return !pk ? 0 : pk == falsify_kinds_used(&g->falsify) ? 1 : 2;
}

static void default_gates(struct ladder_gates *g)
{
    memset(g, 0, sizeof *g);
    for (int i = 0; GATE_DEFS[i].name; i++)
        for (const struct gate_setting *s = GATE_DEFS[i].settings; s->key; s++) {
            char *f = (char *)g + s->offset;
            if (s->type == GS_INT)
                *(int *)f = (int)s->dflt;
            else if (s->type == GS_NUM)
                *(double *)f = s->dflt;
            else
                f[0] = '\0';
        }
    g->falsify.n = -1; /* not set: filled per architecture */
}

/* Parse one setting of the gate table from v into g. */
static int parse_setting(struct parse *p, yaml_node_t *v, const char *gate,
                         const struct gate_setting *s, struct ladder_gates *g)
{
    char what[96];
    snprintf(what, sizeof what, "%s.%s", gate, s->key);
    char *f = (char *)g + s->offset;
    if (s->type == GS_INT) {
        int rc = get_int(p, v, what, (long)s->lo, (long)s->hi, (int *)f);
        if (rc && !strcmp(what, "parity.positions") && scalar(v) && atol(scalar(v)) >= 0 &&
            atol(scalar(v)) < 64)
            return fail(p, v, "parity.positions is %ld; parity is judged at >= 64 positions",
                        atol(scalar(v)));
        return rc;
    }
    if (s->type == GS_NUM)
        return get_num(p, v, what, s->lo, s->hi, (double *)f);
    const char *t = scalar(v);
    if (s->type == GS_TEXT) {
        if (!t || !t[0] || strlen(t) > 200)
            return fail(p, v, "%s must be a text of 1 to 200 characters", what);
        snprintf(f, 201, "%s", t);
        return 0;
    }
    if (s->type == GS_BASELINE && t && !strcmp(t, "previous")) {
        snprintf(f, 65, "%s", t);
        return 0;
    }
    int ok = t && strlen(t) == 64;
    for (int i = 0; ok && i < 64; i++)
        ok = (t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f');
    if (!ok)
        return fail(p, v, "%s must be %s64 lower-case hex digits (a SHA-256)", what,
                    s->type == GS_BASELINE ? "`previous` or a receipt hash of " : "");
    memcpy(f, t, 65);
    return 0;
}

/* The keys gate d's section takes: its setting rows, then its section keys that are not settings
 * (d->section_keys), NULL-terminated; NULL out of memory. Free with free(). */
static const char **section_keys(const struct gate_def *d)
{
    size_t n = 0, k = 0;
    for (const struct gate_setting *s = d->settings; s->key; s++)
        n++;
    for (const char *const *x = d->section_keys; x && *x; x++)
        n++;
    const char **keys = malloc((n + 1) * sizeof *keys);
    if (!keys)
        return NULL;
    for (const struct gate_setting *s = d->settings; s->key; s++)
        keys[k++] = s->key;
    for (const char *const *x = d->section_keys; x && *x; x++)
        keys[k++] = *x;
    keys[k] = NULL;
    return keys;
}

/* The falsify gate's fault list (a YAML list of fault strings) into g->falsify. */
static int parse_fault_list(struct parse *p, yaml_node_t *list, struct ladder_gates *g)
{
    yaml_node_t *it;
    int rc = check_seq(p, list, "falsify", 0);
    if (rc)
        return rc;
    if (list->data.sequence.items.top == list->data.sequence.items.start)
        return fail(p, list,
                    "falsify lists no fault: an empty list proves nothing (leave falsify"
                    " out for the architecture's default set; an engine that takes no"
                    " faults is falsified by proxy)");
    g->falsify.n = 0;
    FOR_ITEMS(p, list, it)
    {
        if (!scalar(it))
            return fail(p, it,
                        "falsify entries must be fault strings like"
                        " 'wrong_expert:rank=1,layers=0-3'");
        struct fault_spec f;
        struct gate_err fe = {0};
        if (fault_parse(scalar(it), &f, &fe) || fault_set_add(&g->falsify, &f, &fe))
            return fail(p, it, "%s", fe.msg);
    }
    return 0;
}

/* Apply one gates mapping (defaults or an override body) onto g. Its sections and every key of a
 * section come from the gate table (harness/gatedef.c): a section per gate that runs on cells and
 * has settings, holding its setting rows and its section_keys (golden.goldens, a path;
 * falsify.faults, the fault list, which the falsify section may also be on its own). */
static int apply_gates(struct parse *p, yaml_node_t *n, struct ladder_gates *g, int is_override)
{
    const char *keys[GATE_COUNT + 2];
    int nk = 0;
    for (int k = 0; k < GATE_COUNT; k++)
        if (GATE_DEFS[k].check_ran && GATE_DEFS[k].settings && GATE_DEFS[k].settings[0].key)
            keys[nk++] = GATE_DEFS[k].name;
    keys[nk++] = "match";
    keys[nk] = NULL;
    yaml_node_t *s, *v;
    int rc = check_map(p, n, is_override ? "override" : "gates.defaults", keys);
    if (rc)
        return rc;
    if (!is_override && get(p, n, "match"))
        return fail(p, get(p, n, "match"), "'match' belongs in gates.overrides entries");
    for (int gi = 0; keys[gi]; gi++) {
        const struct gate_def *d = gatedef_find(keys[gi]);
        if (!d || !(s = get(p, n, d->name)))
            continue;
        if (d == &GATE_DEFS[GATE_ID_CONSISTENCY]) /* named: the cells it reaches run the gate */
            g->consistency = 1;
        if (d == &GATE_DEFS[GATE_ID_FALSIFY] && s->type != YAML_MAPPING_NODE) {
            if ((rc = parse_fault_list(p, s, g))) /* the list form: the faults alone */
                return rc;
            continue;
        }
        const char **allowed = section_keys(d);
        if (!allowed)
            return err_set(p->y.err, ERR_ENV, "ladder: out of memory for the keys of section %s",
                           d->name);
        rc = check_map(p, s, d->name, allowed);
        free(allowed);
        if (rc)
            return rc;
        for (const struct gate_setting *st = d->settings; st->key; st++)
            if ((v = get(p, s, st->key)) && (rc = parse_setting(p, v, d->name, st, g)))
                return rc;
        if (d == &GATE_DEFS[GATE_ID_GOLDEN] && (v = get(p, s, "goldens"))) {
            char buf[512];
            if ((rc = get_str(p, v, "golden.goldens", buf, sizeof buf)))
                return rc;
            char *r = ladder_resolve(p->l, buf);
            snprintf(g->goldens, sizeof g->goldens, "%s", r ? r : buf);
            free(r);
        }
        if (d == &GATE_DEFS[GATE_ID_FALSIFY] && (v = get(p, s, "faults")) &&
            (rc = parse_fault_list(p, v, g)))
            return rc;
    }
    return 0;
}

int ladder_cell_fault_positions(const struct ladder_cell *c)
{
    struct mode md;
    if (mode_parse(c->mode, &md, NULL) || md.path == MODE_CHAT)
        return -1;
    return c->g.positions;
}

static int match_override(struct parse *p, yaml_node_t *match, const struct ladder_cell *c)
{
    const struct ladder *l = p->l;
    const char *want[3] = {l->models[c->model].id, l->hosts[c->host].id, c->mode};
    const char *keys[3] = {"model", "host", "mode"};
    for (int i = 0; i < 3; i++) {
        yaml_node_t *v = get(p, match, keys[i]);
        if (v && strcmp(scalar(v), want[i]))
            return 0;
    }
    /* an identity setting matches by its value's name: a default without one (isa) matches
     * no value a match can name */
    for (int s = 0; s < CELL_SETTING_COUNT; s++) {
        yaml_node_t *v = get(p, match, CELL_SETTINGS[s].key);
        if (v && strcmp(scalar(v), cell_setting_name((enum cell_setting_id)s, c->v.at[s])))
            return 0;
    }
    return 1;
}

/* Some cell of the ladder, required or excluded, that the override's match names: one that
 * matches none is a typo or a stale line (a mode the matrix does not list, a kv no cell has) that
 * would otherwise do nothing, silently — refused, as an exclusion that matches no cell is. */
static int override_matches_a_cell(struct parse *p, yaml_node_t *match)
{
    const struct ladder *l = p->l;
    for (int i = 0; i < l->n_cells; i++)
        if (match_override(p, match, &l->cells[i]))
            return 1;
    for (int i = 0; i < l->n_excluded; i++) {
        const struct ladder_excluded *x = &l->excluded[i];
        struct ladder_cell c = {.model = x->model, .host = x->host, .v = x->v};
        snprintf(c.mode, sizeof c.mode, "%s", x->mode);
        if (match_override(p, match, &c))
            return 1;
    }
    return 0;
}

int ladder_parse_gates(struct parse *p, yaml_node_t *gates)
{
    static const char *const keys[] = {"defaults", "overrides", NULL};
    const char *mkeys[3 + CELL_SETTING_COUNT + 1] = {"model", "host", "mode"};
    for (int s = 0; s < CELL_SETTING_COUNT; s++)
        mkeys[3 + s] = CELL_SETTINGS[s].key; /* and the NULL after them */
    struct ladder *l = p->l;
    struct ladder_gates base;
    yaml_node_t *d, *o, *it;
    int rc = 0;
    default_gates(&base);
    if (gates) {
        if ((rc = check_map(p, gates, "gates", keys)))
            return rc;
        if ((d = get(p, gates, "defaults")) && (rc = apply_gates(p, d, &base, 0)))
            goto out;
        if ((o = get(p, gates, "overrides"))) {
            if ((rc = check_seq(p, o, "gates.overrides", 0)))
                goto out;
            FOR_ITEMS(p, o, it)
            {
                yaml_node_t *m = it->type == YAML_MAPPING_NODE ? get(p, it, "match") : NULL;
                if (!m)
                    return fail(p, it, "an override needs a 'match' mapping");
                if ((rc = check_map(p, m, "match", mkeys)))
                    goto out;
                for (int k = 0; k < 3; k++) {
                    yaml_node_t *v = get(p, m, mkeys[k]);
                    if (v && (!scalar(v) || (k == 0 && ladder_find_model(l, scalar(v)) < 0) ||
                              (k == 1 && ladder_find_host(l, scalar(v)) < 0) ||
                              (k == 2 && ladder_mode_declared(p, NULL, scalar(v)))))
                        return fail(p, v, "override matches %s '%s', which is not defined",
                                    mkeys[k], scalar(v) ? scalar(v) : "?");
                }
                for (int s = 0; s < CELL_SETTING_COUNT; s++) {
                    yaml_node_t *v = get(p, m, CELL_SETTINGS[s].key);
                    unsigned char unused;
                    if (v && (rc = ladder_parse_setting(p, v, "an override's match",
                                                        (enum cell_setting_id)s, &unused)))
                        goto out;
                }
                if (!override_matches_a_cell(p, m))
                    return fail(p, m,
                                "this override matches no cell of the ladder (required or"
                                " excluded): it would change nothing");
            }
        }
    }
    for (int i = 0; i < l->n_cells; i++) {
        struct ladder_cell *c = &l->cells[i];
        c->g = base;
        c->g.v = c->v;
        if (gates && (o = get(p, gates, "overrides"))) {
            FOR_ITEMS(p, o, it)
            {
                if (match_override(p, get(p, it, "match"), c) &&
                    (rc = apply_gates(p, it, &c->g, 1)))
                    goto out;
            }
        }
        struct mode cm;
        if (!mode_parse(c->mode, &cm, NULL) && cm.engine[0]) {
            const struct ladder_engine *le = &l->engines[ladder_find_engine(l, cm.engine)];
            c->g.engine = le;
            /* an engine without `faults` in its supports is falsified by proxy (the judge
             * takes each fault; oracles/falsify.h) */
        }
        struct parity_config pc;
        gatedef_parity_config(&c->g, &pc);
        {
            /* thresholds far above the backend's measured noise need a stated reason */
            struct mode md;
            struct gate_err me = {0};
            char lw[400];
            if (!c->g.loose_reason[0] && !mode_parse(c->mode, &md, &me) &&
                parity_check_loose(&pc, md.backend, lw, sizeof lw)) {
                char name[256];
                rc = fail(p, gates, "cell %s: %s", ladder_cell_name(l, i, name, sizeof name), lw);
                goto out;
            }
        }
        /* every gate's own settings check (the gate table's rows: the function its oracle runs
         * first), so what would make the run error is refused here, never signed as a FAIL: a
         * falsify gate whose parity is looser than the floor, max_runs below runs, a chat cell's
         * throughput prompt shorter than its six turns, ... */
        for (int k = 0; GATE_DEFS[k].name; k++) {
            struct gate_err ge = {0};
            if (gatedef_check(&GATE_DEFS[k], &c->g, c->mode, &ge)) {
                char name[256];
                rc = fail(p, gates, "cell %s: %s", ladder_cell_name(l, i, name, sizeof name),
                          ge.msg);
                goto out;
            }
        }
        const struct ladder_model *m = &l->models[c->model];
        int moe = !strcmp(m->arch, "qwen3moe");
        if (c->g.falsify.n < 0) /* settled question 4: the fault table's default set */
            fault_default_set(moe, &c->g.falsify);
        {
            /* the run's fault rules with what the architecture alone decides (a routing fault
             * or a router tensor on a dense model; a position scope past the judged positions);
             * the model's layers and experts are checked by ladder_check_files */
            struct gate_err fe = {0};
            if (falsify_check_faults(&c->g.falsify, INT_MAX, moe, INT_MAX, 1,
                                     ladder_cell_fault_positions(c), &fe)) {
                char name[256];
                rc = fail(p, gates, "cell %s: model '%s' (arch %s): %s; override falsify for it",
                          ladder_cell_name(l, i, name, sizeof name), m->id, m->arch, fe.msg);
                goto out;
            }
        }
    }
out:
    return rc;
}

json_t *ladder_gate_settings(const struct ladder_gates *g, const char *gate)
{
    json_t *o = json_object();
    const struct gate_def *d = gatedef_find(gate);
    for (const struct gate_setting *s = d ? d->settings : NULL; s && s->key; s++) {
        const char *f = (const char *)g + s->offset;
        if (s->type == GS_INT)
            json_object_set_new(o, s->key, json_integer(*(const int *)f));
        else if (s->type == GS_NUM)
            json_object_set_new(o, s->key, json_real(*(const double *)f));
        else
            json_object_set_new(o, s->key, json_string(f));
    }
    if (g->engine) { /* exec cells: the engine command is part of what the receipt vouches for */
        const struct ladder_engine *le = g->engine;
        json_t *argv = json_array(), *sup = json_array();
        for (int k = 0; k < le->e.argc; k++)
            json_array_append_new(argv, json_string(k ? le->e.argv[k] : le->argv0));
        static const char *const words[] = {"decode", "prefill", "chat", "faults"};
        for (int k = 0; k < 4; k++)
            if (le->e.supports & exec_support_bit(words[k]))
                json_array_append_new(sup, json_string(words[k]));
        json_t *eo = json_pack("{s:s, s:o, s:f, s:o, s:f, s:s}", "name", le->e.name, "argv", argv,
                               "timeout_s", le->e.timeout_s, "supports", sup, "cell_timeout_s",
                               le->e.cell_timeout_s, "isolation",
                               le->e.isolation_none ? "none" : "landlock");
        if (le->e.isolation_none) /* shown wherever the settings are: why it ran unisolated */
            json_object_set_new(eo, "reason", json_string(le->e.reason));
        if (le->e.faults) { /* the kinds it injects itself; falsify proxies the others */
            json_t *fk = json_array();
            for (int k = 0; k < FAULT_KIND_COUNT; k++)
                if (le->e.faults & (1u << k))
                    json_array_append_new(fk, json_string(fault_kind_name((enum fault_kind)k)));
            json_object_set_new(eo, "faults", fk);
        }
        if (le->e.n_env) { /* the environment shapes what the engine does */
            json_t *env = json_object();
            for (int k = 0; k < le->e.n_env; k++) {
                const char *eq = strchr(le->e.env[k], '=');
                char name[256];
                snprintf(name, sizeof name, "%.*s", (int)(eq - le->e.env[k]), le->e.env[k]);
                json_object_set_new(env, name, json_string(eq + 1));
            }
            json_object_set_new(eo, "env", env);
        }
        json_object_set_new(o, "engine", eo);
    }
    /* an F16-KV or isa cell: recorded in every gate's settings, so a receipt of other settings
     * cannot match it (and gates.c holds metrics.ran.kv / ran.isa to them); default settings
     * record nothing here: their settings are what they were before the keys */
    cell_variant_settings(&g->v, o);
    if (!strcmp(gate, "golden")) /* the judge reads the pin under this name */
        json_object_set_new(o, "goldens_sha256", json_string(g->goldens_sha256));
    if (!strcmp(gate, "falsify")) {
        json_t *faults = json_array();
        for (int i = 0; i < g->falsify.n; i++) {
            const struct fault_spec *f = &g->falsify.f[i];
            json_array_append_new(faults,
                                  json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "kind",
                                            fault_kind_name(f->kind), "rank", f->rank, "layer_lo",
                                            f->layer_lo, "layer_hi", f->layer_hi, "pos_lo",
                                            f->pos_lo, "pos_hi", f->pos_hi));
        }
        json_object_set_new(o, "faults", faults);
        json_object_set_new(o, "parity", ladder_gate_settings(g, "parity"));
    }
    if (!strcmp(gate, "throughput")) /* the spot checks of timed runs use the cell's parity rule */
        json_object_set_new(o, "parity", ladder_gate_settings(g, "parity"));
    return o;
}
