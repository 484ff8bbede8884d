/* falsify.c — fault-injection runs, the gate's sampled sweep, its judge, and the full sweep
 * (see falsify.h).
 *
 * One parity session serves every run: the judge's logits are computed once, the subject's
 * backend stays open and each run sets its faults with backend_set_faults() (a copy).
 * Invariant: falsify_run()'s verdict is falsify_judge()'s over the metrics it records.
 * Start reading: falsify_run(), falsify_judge(), then falsify_sweep().
 */
#include "oracles/falsify.h"
#include "oracles/compare.h"

#include "base/detmath.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(((struct falsify_fault *)0)->metric) ==
                   sizeof(((struct parity_result *)0)->reason),
               "a fault's metric holds parity's reason");

int falsify_check_floor(const struct parity_config *p, struct gate_err *err)
{
    int rc = parity_config_check(p, err);
    if (rc)
        return rc;
    if (!(p->min_cosine >= FALSIFY_FLOOR_MIN_COSINE))
        return err_set(err, ERR_INPUT,
                       "falsify: parity min_cosine %g is looser than the floor"
                       " %g: faults would pass by construction",
                       p->min_cosine, FALSIFY_FLOOR_MIN_COSINE);
    if (!(p->max_kld <= FALSIFY_FLOOR_MAX_KLD))
        return err_set(err, ERR_INPUT,
                       "falsify: parity max_kld %g is looser than the floor %g:"
                       " faults would pass by construction",
                       p->max_kld, FALSIFY_FLOOR_MAX_KLD);
    if (!(p->max_mean_kld <= FALSIFY_FLOOR_MAX_MEAN_KLD))
        return err_set(err, ERR_INPUT,
                       "falsify: parity max_mean_kld %g is looser than the floor"
                       " %g: faults would pass by construction",
                       p->max_mean_kld, FALSIFY_FLOOR_MAX_MEAN_KLD);
    if (!(p->near_tie <= FALSIFY_FLOOR_NEAR_TIE))
        return err_set(err, ERR_INPUT,
                       "falsify: parity near_tie %g is looser than the floor %g:"
                       " it would excuse the argmax flips faults produce",
                       p->near_tie, FALSIFY_FLOOR_NEAR_TIE);
    if (!(p->route_tie <= FALSIFY_FLOOR_ROUTE_TIE))
        return err_set(err, ERR_INPUT,
                       "falsify: parity route_tie %g is looser than the floor %g:"
                       " it would excuse the routing changes faults produce",
                       p->route_tie, FALSIFY_FLOOR_ROUTE_TIE);
    return 0;
}

unsigned falsify_kinds_used(const struct fault_set *faults)
{
    unsigned used = 1u << FAULT_SCALE; /* the power probe */
    for (int i = 0; faults && i < faults->n; i++)
        used |= 1u << faults->f[i].kind;
    return used;
}

/* 1 when kind k goes into the judge (falsify_config.proxy_kinds) */
static int by_proxy(const struct falsify_config *cfg, enum fault_kind k)
{
    return (int)((cfg->proxy_kinds >> k) & 1u);
}

int falsify_config_check(const struct falsify_config *cfg, struct gate_err *err)
{
    /* sweep_samples, min_detection, power_factor and power_layers are single fields: their
     * ranges are the gate table's rows (harness/gatedef.c, written with FALSIFY_MIN_DETECTION_FLOOR
     * and FALSIFY_POWER_FACTOR_MAX), refused where they are read; what is left relates two gates'
     * settings: parity's thresholds against falsify's strength floor */
    return falsify_check_floor(&cfg->parity, err);
}

void falsify_default_faults(const struct model *m, struct fault_set *out)
{
    fault_default_set(m->hp.n_expert > 0, out); /* the fault kind table's default column */
    int k = 0;
    for (int i = 0; i < out->n; i++) /* skip_qk_norm only where there is a Q/K norm to skip */
        if (out->f[i].kind != FAULT_SKIP_QK_NORM || model_has_qk_norm(m))
            out->f[k++] = out->f[i];
    out->n = k;
}

int falsify_check_faults(const struct fault_set *faults, int n_layer, int is_moe, int n_expert_used,
                         int has_qk_norm, int n_pos, struct gate_err *err)
{
    if (!faults || faults->n == 0)
        return err_set(err, ERR_INPUT,
                       "falsify needs at least one fault (an empty list proves"
                       " nothing)");
    for (int i = 0; i < faults->n; i++) {
        const struct fault_spec *f = &faults->f[i];
        if (f->kind == FAULT_SKIP_QK_NORM && !has_qk_norm)
            return err_set(err, ERR_INPUT,
                           "fault 'skip_qk_norm' cannot apply: this model has"
                           " no per-head Q/K norm");
        if (n_pos > 0 && f->pos_lo >= n_pos) {
            char name[128];
            fault_format(f, name, sizeof name);
            return err_set(err, ERR_INPUT,
                           "fault '%s': position scope starts at %d but the cell judges %d"
                           " positions (0-%d): it can never fire",
                           name, f->pos_lo, n_pos, n_pos - 1);
        }
    }
    return fault_validate(faults, n_layer, is_moe, n_expert_used, err);
}

static int check_faults(const struct model *m, const struct fault_set *faults, struct gate_err *err)
{
    const struct model_hparams *hp = &m->hp;
    return falsify_check_faults(faults, (int)hp->n_layer, hp->n_expert > 0, (int)hp->n_expert_used,
                                model_has_qk_norm(m), -1, err);
}

void falsify_result_free(struct falsify_result *r)
{
    if (!r)
        return;
    parity_result_free(&r->clean);
    for (int i = 0; i < r->n; i++) {
        parity_result_free(&r->f[i].parity);
        parity_result_free(&r->f[i].agreement);
    }
    for (int i = 0; i < r->n_kinds; i++) {
        free(r->k[i].s);
        r->k[i].s = NULL;
    }
    json_decref(r->metrics);
    json_decref(r->checks);
    r->metrics = r->checks = NULL;
}

json_t *falsify_settings_json(const struct fault_set *faults, const struct falsify_config *cfg)
{
    json_t *fa = json_array();
    for (int i = 0; faults && i < faults->n; i++) {
        const struct fault_spec *f = &faults->f[i];
        json_array_append_new(fa, json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "kind",
                                            fault_kind_name(f->kind), "rank", f->rank, "layer_lo",
                                            f->layer_lo, "layer_hi", f->layer_hi, "pos_lo",
                                            f->pos_lo, "pos_hi", f->pos_hi));
    }
    const struct parity_config *p = &cfg->parity;
    json_t *o = json_pack("{s:o, s:{s:i, s:f, s:f, s:f, s:f, s:f}, s:i, s:f, s:f, s:i}", "faults",
                          fa, "parity", "positions", p->positions, "min_cosine", p->min_cosine,
                          "max_mean_kld", p->max_mean_kld, "max_kld", p->max_kld, "near_tie",
                          p->near_tie, "route_tie", p->route_tie, "sweep_samples",
                          cfg->sweep_samples, "min_detection", cfg->min_detection, "power_factor",
                          cfg->power_factor, "power_layers", cfg->power_layers);
    if (o && cfg->engine) /* an exec cell: the judge reads which kinds the engine takes */
        json_object_set_new(o, "engine", json_deep_copy(cfg->engine));
    else if (o && cfg->proxy_kinds) {
        json_t *pk = json_array();
        for (int k = 0; k < FAULT_KIND_COUNT; k++)
            if (cfg->proxy_kinds & (1u << k))
                json_array_append_new(pk, json_string(fault_kind_name((enum fault_kind)k)));
        json_object_set_new(o, "proxy_kinds", pk);
    }
    /* the rel-L2 bounds as the ladder records them (INFINITY: not judged, left out) */
    json_t *po = json_object_get(o, "parity");
    if (po && !isinf(p->max_rel_l2))
        json_object_set_new(po, "max_rel_l2", json_real(p->max_rel_l2));
    if (po && !isinf(p->max_mean_rel_l2))
        json_object_set_new(po, "max_mean_rel_l2", json_real(p->max_mean_rel_l2));
    if (po) /* the forced layers' bound ("Inf": not judged; absent reads as the default) */
        json_object_set_new(po, "max_forced", parity_json_number(p->max_forced));
    return o;
}

/* ---- the gate's sampled sweep --------------------------------------------------------------- */

static int min_i(int a, int b)
{
    return a < b ? a : b;
}

/* The sequence the parity session judges (as parity_session_open builds it), for the judge's
 * own routing taps. */
static int session_tokens(const struct model *m, const struct mode *mode, const int32_t *tokens,
                          int n, const struct parity_config *cfg, int32_t **out, int *n_out,
                          struct gate_err *err)
{
    int *ends = NULL, n_turns = 0, fallback = 0;
    if (tokens) {
        if (!(*out = malloc((size_t)n * sizeof **out)))
            return err_set(err, ERR_ENV, "falsify: out of memory for the sweep's positions");
        memcpy(*out, tokens, (size_t)n * sizeof **out);
        *n_out = n;
        return 0;
    }
    if (mode->path == MODE_CHAT) {
        int rc = parity_chat_tokens(cfg, m, out, n_out, &ends, &n_turns, &fallback, err);
        free(ends);
        return rc;
    }
    if (!(*out = malloc((size_t)cfg->positions * sizeof **out)))
        return err_set(err, ERR_ENV, "falsify: out of memory for the positions");
    *n_out = cfg->positions;
    return parity_tokens(cfg, m, cfg->positions, *out, NULL, NULL, err);
}

/* The judge's routed weights over the session's sequence: w (n_layer, n, k), malloc'd. */
static int clean_weights(const struct model *m, const int32_t *ids, int n, int n_threads, float **w,
                         struct gate_err *err)
{
    const struct model_hparams *hp = &m->hp;
    struct backend *j = NULL;
    struct backend_taps taps = {0};
    float *logits = malloc((size_t)n * hp->n_vocab * sizeof *logits);
    *w = calloc((size_t)hp->n_layer * (size_t)n * hp->n_expert_used, sizeof **w);
    int rc = 0;
    if (!logits || !*w)
        rc = err_set(err, ERR_ENV, "out of memory for the routed weights (%d positions)", n);
    taps.expert_w = *w;
    if (!rc)
        rc = mode_open_judge(&j, m, n, n_threads, err);
    if (!rc)
        rc = mode_judge(j, ids, n, logits, &taps, err);
    backend_close(j);
    free(logits);
    return rc;
}

/* The parity numbers a sweep point, an agreement or a power probe records of one run. */
static struct falsify_numbers numbers_of(const struct parity_result *r)
{
    return (struct falsify_numbers){.min_cosine = r->cosine.min,
                                    .mean_kld = r->kld.mean,
                                    .max_kld = r->kld.max,
                                    .max_rel_l2 = r->rel_l2.max,
                                    .mean_rel_l2 = r->rel_l2.mean,
                                    .n_wrong = r->n_wrong,
                                    .n_nonfinite = r->n_nonfinite,
                                    .n_route_refused = r->route.n_refused,
                                    .forced = r->forced.measured,
                                    .forced_worst = r->forced.worst,
                                    .forced_row = r->forced.row,
                                    .forced_head = r->forced.head};
}

/* Sample kind K's (layer, position) pairs deterministically and inject the fault at each. */
static int sweep_kind(struct parity_session *s, const struct model *m, struct falsify_kind *K,
                      int samples, const float *w, const struct parity_config *cfg, int proxy,
                      struct gate_err *err)
{
    const int L = (int)m->hp.n_layer, n = parity_session_n(s), k = (int)m->hp.n_expert_used;
    const int l_lo = K->spec.layer_lo, l_hi = min_i(K->spec.layer_hi, L - 1);
    const int p_lo = K->spec.pos_lo, p_hi = min_i(K->spec.pos_hi, n - 1);
    struct parity_result r = {0};
    int rc = 0;
    if (l_hi < l_lo || p_hi < p_lo)
        return err_set(err, ERR_INPUT, "fault '%s': its scope holds no (layer, position) pair",
                       K->name);
    const int nl = l_hi - l_lo + 1, np = p_hi - p_lo + 1;
    K->n_pairs = nl * np;
    K->n = min_i(samples, K->n_pairs);
    if (K->n < 1)
        return 0;
    if (!(K->s = calloc((size_t)K->n, sizeof *K->s)))
        return err_set(err, ERR_ENV, "falsify: out of memory for the sweep samples");
    uint64_t st = 0x5eedull + (uint64_t)K->spec.kind;
    for (int i = 0; i < K->n; i++) {
        int idx = i;
        if (K->n < K->n_pairs) { /* distinct pairs from a fixed stream */
            for (int dup = 1; dup;) {
                idx = (int)(det_splitmix64(&st) % (uint64_t)K->n_pairs);
                dup = 0;
                for (int j = 0; j < i; j++)
                    dup |= K->s[j].layer == l_lo + idx / np && K->s[j].pos == p_lo + idx % np;
            }
        }
        struct falsify_sample *x = &K->s[i];
        x->layer = l_lo + idx / np;
        x->pos = p_lo + idx % np;
        struct fault_set one = {.n = 1, .f = {K->spec}};
        one.f[0].layer_lo = one.f[0].layer_hi = x->layer;
        one.f[0].pos_lo = one.f[0].pos_hi = x->pos;
        struct parity_witness wit;
        memset(&wit, 0, sizeof wit);
        if (proxy) { /* into the judge: the subject's clean run against it must be rejected */
            if ((rc = parity_session_agreement(s, &one, cfg, &r, &wit.n_logit_diff, err)))
                break;
            x->proxy = 1;
        } else if ((rc = parity_session_run(s, &one, cfg, 0, &r, err)) ||
                   (rc = parity_session_witness(s, K->spec.kind, &wit, err)))
            break;
        if (wit.tapless) { /* the logits moved; was it the injection asked for? */
            struct parity_result ag = {0};
            rc = parity_session_agreement(s, &one, cfg, &ag, NULL, err);
            x->agreement = numbers_of(&ag);
            parity_result_free(&ag);
            if (rc)
                break;
        }
        x->route_diffs = wit.n_route_diff;
        x->hidden_diffs = wit.n_hidden_diff;
        x->logit_diffs = wit.n_logit_diff;
        x->tapless = wit.tapless;
        x->min_cosine = r.cosine.min;
        x->mean_kld = r.kld.mean;
        x->max_kld = r.kld.max;
        x->max_rel_l2 = r.rel_l2.max;
        x->mean_rel_l2 = r.rel_l2.mean;
        x->n_wrong = r.n_wrong;
        x->n_nonfinite = r.n_nonfinite;
        x->n_route_refused = r.route.n_refused;
        if (K->spec.kind == FAULT_UNIFORM_WEIGHTS && w) {
            const float *ww = w + ((size_t)x->layer * (size_t)n + (size_t)x->pos) * (size_t)k;
            for (int e = 0; e < k; e++) {
                double d = fabs((double)ww[e] - 1.0 / k);
                x->uniform_dev = d > x->uniform_dev ? d : x->uniform_dev;
            }
        }
        parity_result_free(&r);
    }
    parity_result_free(&r);
    return rc;
}

/* ---- the power probe (issue 22 §3) --------------------------------------------------------- */

/* A probe's layers for one tensor: the last layer (the least downstream amplification: the
 * hardest to see), then distinct others from a fixed stream. */
static int probe_layers(int L, int want, int tensor, int *out)
{
    int n = 0;
    out[n++] = L - 1;
    uint64_t st = 0x90e4b0deull ^ (uint64_t)tensor;
    while (n < want && n < L) {
        const int l = (int)(det_splitmix64(&st) % (uint64_t)L);
        int dup = 0;
        for (int i = 0; i < n; i++)
            dup |= out[i] == l;
        if (!dup)
            out[n++] = l;
    }
    return n;
}

/* Every power tensor of the model scaled by cfg->power_factor at its probe layers (the output
 * matrix once), each judged by parity against the session's judge; *out's probes. */
static int power_probe(struct parity_session *s, const struct model *m,
                       const struct falsify_config *cfg, struct falsify_result *out,
                       struct gate_err *err)
{
    int tensors[FAULT_T_COUNT], layers[FALSIFY_MAX_PROBES];
    const int L = (int)m->hp.n_layer, nt = fault_power_tensors(m->hp.n_expert > 0, tensors);
    const int want =
        cfg->power_layers < FALSIFY_MAX_PROBES ? cfg->power_layers : FALSIFY_MAX_PROBES;
    int rc = 0;
    for (int i = 0; !rc && i < nt; i++) {
        const int is_out = tensors[i] == FAULT_T_OUTPUT;
        const int nl = is_out ? 1 : probe_layers(L, want, tensors[i], layers);
        for (int j = 0; !rc && j < nl; j++) {
            if (out->n_probes >= FALSIFY_MAX_PROBES)
                return err_set(err, ERR_INPUT,
                               "falsify: more than %d power probes (power_layers %d x %d tensors)",
                               FALSIFY_MAX_PROBES, cfg->power_layers, nt);
            struct falsify_probe *p = &out->probes[out->n_probes++];
            p->tensor = tensors[i];
            p->layer = is_out ? -1 : layers[j];
            char text[128];
            struct fault_set one = {.n = 1};
            if (is_out)
                snprintf(text, sizeof text, "scale:tensor=output,factor=%.9g", cfg->power_factor);
            else
                snprintf(text, sizeof text, "scale:tensor=blk.%d.%s,factor=%.9g", p->layer,
                         fault_tensor_name(tensors[i]), cfg->power_factor);
            if ((rc = fault_parse(text, &one.f[0], err)))
                break;
            fault_format(&one.f[0], p->name, sizeof p->name);
            struct parity_result r = {0};
            struct parity_witness w;
            memset(&w, 0, sizeof w);
            if (by_proxy(cfg, FAULT_SCALE)) { /* into the judge: the clean subject against it */
                rc = parity_session_agreement(s, &one, &cfg->parity, &r, &w.n_logit_diff, err);
                p->proxy = 1;
            } else {
                rc = parity_session_run(s, &one, &cfg->parity, 0, &r, err);
                if (!rc)
                    rc = parity_session_witness(s, FAULT_SCALE, &w, err);
            }
            if (!rc) {
                p->num = numbers_of(&r);
                p->hidden_diffs = w.n_hidden_diff;
                p->logit_diffs = w.n_logit_diff;
                p->tapless = w.tapless;
            }
            if (!rc && w.tapless) { /* moved logits must be the asked-for scale's */
                struct parity_result ag = {0};
                rc = parity_session_agreement(s, &one, &cfg->parity, &ag, NULL, err);
                p->agreement = numbers_of(&ag);
                parity_result_free(&ag);
            }
            parity_result_free(&r);
        }
    }
    return rc;
}

int falsify_run(const struct model *m, const struct mode *mode, const struct fault_set *faults,
                const int32_t *tokens, int n, const struct falsify_config *cfg, int n_threads,
                struct falsify_result *out, struct gate_err *err)
{
    struct parity_session *s = NULL;
    int32_t *ids = NULL;
    float *w = NULL;
    json_t *settings = NULL;
    int n_ids = 0;
    memset(out, 0, sizeof *out);
    out->verdict = GATE_FAIL;
    struct falsify_config own = *cfg;
    if (tokens) /* supplied tokens: every one is judged, and parity's rule asks for that many */
        own.parity.positions = n;
    cfg = &own;
    mode_format(mode, out->mode, sizeof out->mode);
    int rc = check_faults(m, faults, err);
    if (!rc)
        rc = falsify_config_check(cfg, err);
    out->is_moe = m->hp.n_expert > 0;
    out->kinds_used = falsify_kinds_used(faults);
    out->proxy_kinds = cfg->proxy_kinds & out->kinds_used;
    out->n_layer = (int)m->hp.n_layer;
    out->power_factor = cfg->power_factor;
    if (!rc)
        rc = parity_session_open(&s, m, mode, tokens, n, &cfg->parity, n_threads, 1, err);
    if (!rc)
        rc = parity_session_run(s, NULL, &cfg->parity, 1, &out->clean, err);
    for (int i = 0; !rc && i < faults->n; i++) {
        struct falsify_fault *ff = &out->f[i];
        struct fault_set one = {.n = 1, .f = {faults->f[i]}};
        ff->spec = faults->f[i];
        fault_format(&ff->spec, ff->name, sizeof ff->name);
        if (by_proxy(cfg, ff->spec.kind)) {
            /* the judge takes the fault; the engine's clean run against it must be rejected */
            memset(&ff->witness, 0, sizeof ff->witness);
            ff->witness.layer = ff->witness.pos = -1;
            if ((rc = parity_session_agreement(s, &one, &cfg->parity, &ff->parity,
                                               &ff->witness.n_logit_diff, err)))
                break;
            out->n = i + 1;
            ff->proxy = 1;
            ff->witness.fired = ff->witness.n_logit_diff > 0;
            snprintf(ff->witness.what, sizeof ff->witness.what, "%s",
                     "the judge's logits (by proxy)");
            ff->fired = ff->witness.fired;
            ff->rejected = !ff->parity.pass;
            ff->severity = parity_severity(&ff->parity);
            ff->pass = ff->fired && ff->rejected;
            if (!ff->fired)
                snprintf(ff->metric, sizeof ff->metric, "%s",
                         "fault did not fire: the judge's logits did not move");
            else
                memcpy(ff->metric, ff->parity.reason, sizeof ff->metric);
            continue;
        }
        if ((rc = parity_session_run(s, &one, &cfg->parity, 1, &ff->parity, err)))
            break;
        out->n = i + 1;
        if ((rc = parity_session_witness(s, ff->spec.kind, &ff->witness, err)))
            break;
        ff->fired = ff->witness.fired;
        /* no taps (an exec engine): the logits moving is no evidence that the fault was the one
         * asked for; its faulted run must match the judge's run with the same fault */
        if (ff->witness.tapless) {
            if ((rc = parity_session_agreement(s, &one, &cfg->parity, &ff->agreement, NULL, err)))
                break;
            ff->has_agreement = 1;
            ff->fired = ff->fired && ff->agreement.pass;
        }
        ff->rejected = !ff->parity.pass;
        ff->severity = parity_severity(&ff->parity);
        ff->pass = ff->fired && ff->rejected;
        if (!ff->fired && ff->witness.fired) {
            char reason[200]; /* a copy: gcc's -Wrestrict sees one object in ff (ASan build) */
            snprintf(reason, sizeof reason, "%s", ff->agreement.reason);
            snprintf(ff->metric, sizeof ff->metric,
                     "the engine's faulted run does not match the judge's run with the same"
                     " fault: %s",
                     reason);
        } else if (!ff->fired)
            snprintf(ff->metric, sizeof ff->metric,
                     "fault did not fire: no tap differs from"
                     " the clean run");
        else
            memcpy(ff->metric, ff->parity.reason, sizeof ff->metric); /* same size, NUL inside */
    }
    /* the sampled sweep: one kind at a time, the first listed fault of each kind */
    for (int i = 0; !rc && cfg->sweep_samples > 0 && i < faults->n; i++) {
        int seen = 0;
        for (int j = 0; j < out->n_kinds; j++)
            seen |= out->k[j].spec.kind == faults->f[i].kind;
        if (seen)
            continue;
        struct falsify_kind *K = &out->k[out->n_kinds++];
        K->spec = faults->f[i];
        fault_format(&K->spec, K->name, sizeof K->name);
        if (K->spec.kind == FAULT_UNIFORM_WEIGHTS && !w) {
            if ((rc = session_tokens(m, mode, tokens, n, &cfg->parity, &ids, &n_ids, err)))
                break;
            if (n_ids != parity_session_n(s)) {
                rc = err_set(err, ERR_ENV,
                             "falsify: the session judges %d positions, the"
                             " routing taps %d",
                             parity_session_n(s), n_ids);
                break;
            }
            if ((rc = clean_weights(m, ids, n_ids, n_threads, &w, err)))
                break;
        }
        parity_session_set_forced(s, 0); /* gross faults: the logits judge them */
        rc = sweep_kind(s, m, K, cfg->sweep_samples, w, &cfg->parity, by_proxy(cfg, K->spec.kind),
                        err);
        parity_session_set_forced(s, 1);
    }
    if (!rc)
        rc = power_probe(s, m, cfg, out, err);
    if (rc)
        goto done;
    /* the verdict is the judge's, over exactly the metrics recorded */
    char why[320] = "";
    out->metrics = falsify_result_json(out);
    out->checks = json_array();
    settings = falsify_settings_json(faults, cfg);
    if (!out->metrics || !out->checks || !settings) {
        rc = err_set(err, ERR_ENV, "falsify: out of memory for the gate's metrics");
        goto done;
    }
    out->verdict = falsify_judge(settings, out->metrics, out->checks, why, sizeof why);
    out->pass = out->verdict == GATE_PASS;
    /* the per-kind counts as the judge defines them, for the printout */
    json_t *kinds = json_object_get(json_object_get(out->metrics, "sweep"), "kinds");
    for (int i = 0; i < out->n_kinds; i++) {
        json_t *x = json_array_get(kinds, (size_t)i);
        out->k[i].detected = (int)json_integer_value(json_object_get(x, "detected"));
        out->k[i].escapes = (int)json_integer_value(json_object_get(x, "escapes"));
        out->k[i].noops = (int)json_integer_value(json_object_get(x, "noops"));
        const int d = out->k[i].n - out->k[i].noops;
        out->k[i].rate = d > 0 ? (double)out->k[i].detected / d : NAN;
    }
    /* which kinds went by proxy, for the gate run's line (docs/exec.md, "Falsify by proxy") */
    char proxied[128], pnote[256] = "";
    fault_kinds_text(out->proxy_kinds, proxied, sizeof proxied);
    if (out->proxy_kinds && out->proxy_kinds == out->kinds_used)
        snprintf(pnote, sizeof pnote, "%s",
                 out->pass ? " (by proxy: the engine takes no faults, they went into the judge)"
                           : " (by proxy)");
    else if (out->proxy_kinds)
        snprintf(pnote, sizeof pnote,
                 " (%.127s by proxy, into the judge: the engine does not take %s; the other kinds"
                 " into the engine)",
                 proxied, out->proxy_kinds & (out->proxy_kinds - 1) ? "these kinds" : "that kind");
    if (out->pass)
        snprintf(out->reason, sizeof out->reason,
                 "PASS%s: %s %d fault%s fired and %s rejected; sampled sweep %d per kind at or"
                 " above %g detection; %d power probes (one matmul x %g) all rejected",
                 pnote, out->n == 1 ? "the" : "all", out->n, out->n == 1 ? "" : "s",
                 out->n == 1 ? "was" : "were", cfg->sweep_samples, cfg->min_detection,
                 out->n_probes, cfg->power_factor);
    else
        snprintf(out->reason, sizeof out->reason, "FAIL%s: %.250s", pnote, why);
done:
    json_decref(settings);
    free(ids);
    free(w);
    parity_session_close(s);
    return rc;
}

/* ---- the judge ------------------------------------------------------------------------------ */

struct thresholds {
    double min_cosine, max_mean_kld, max_kld, near_tie, route_tie;
    const json_t *settings; /* the parity settings object: parity's own rule reads it */
};

/* Rejected from a recorded parity metrics object (per-position arrays, or a sweep point's
 * summary numbers): parity's one rule (oracles/parity.h, parity_metrics_rejected). */
static int parity_rejects(const json_t *p, const struct thresholds *t, int *malformed)
{
    const int r = parity_metrics_rejected(t->settings, p, NULL, 0);
    *malformed = r < 0;
    return r > 0;
}

static int is_routing_name(const char *kind)
{
    return kind && strcmp(kind, "skip_qk_norm") != 0;
}

static int has_string(const json_t *list, const char *s)
{
    size_t i;
    const json_t *v;
    json_array_foreach(list, i, v)
    {
        const char *sv = json_string_value(v);
        if (sv && s && !strcmp(sv, s))
            return 1;
    }
    return 0;
}

/* 1 when fault kind `kind` goes into the judge (falsify by proxy): the settings' engine (an exec
 * cell) does not take it — its supports lack faults, or its `faults` list (the kinds it injects
 * itself) lacks the kind; an engine with faults and no list takes every kind. Without an engine
 * (gate falsify, a cell of gate's own backends) the settings' "proxy_kinds" says
 * (falsify_settings_json records it; a ladder's settings never hold it; "proxy": true, as
 * receipts before per-kind proxy recorded it, is every kind). */
static int settings_proxy(const json_t *settings, const char *kind)
{
    const json_t *e = json_object_get(settings, "engine");
    if (!e)
        return json_is_true(json_object_get(settings, "proxy")) ||
               has_string(json_object_get(settings, "proxy_kinds"), kind);
    if (!has_string(json_object_get(e, "supports"), "faults"))
        return 1;
    const json_t *takes = json_object_get(e, "faults");
    return takes ? !has_string(takes, kind) : 0;
}

/* The check that an item (a fault, a sweep point, a probe) was recorded by proxy exactly when
 * its kind goes by proxy; 0 (and the first failure's sentence) when it was not. */
static int proxy_as_due(json_t *checks, const json_t *item, int due, const char *what,
                        const char *kind, char *first, size_t fn, int *fails)
{
    const int rec = json_is_true(json_object_get(item, "proxy"));
    char metric[200];
    snprintf(metric, sizeof metric, "%.100s by proxy exactly when the engine does not take %.40s",
             what, kind);
    if (gate_check_bool(checks, metric, rec == due))
        return 1;
    if (!(*fails)++)
        snprintf(first, fn,
                 "%s was %s, but the cell's engine %s %s: proxy is due exactly for the kinds the"
                 " engine does not take",
                 what, rec ? "injected by proxy (into the judge)" : "injected into the engine",
                 due ? "does not take" : "takes", kind);
    return 0;
}

/* The power probe's part of the verdict (falsify.h: struct falsify_config): the settings' factor
 * and layers, every power tensor of the recorded model probed at enough layers (the last among
 * them), and every probe fired and rejected by parity at the cell's thresholds. */
static void power_judge(const json_t *settings, const json_t *metrics, const struct thresholds *t,
                        json_t *checks, char *first, size_t fn, int *fails)
{
    double pf = NAN, pl = NAN, rf = NAN, L = NAN;
    const json_t *pw = json_object_get(metrics, "power");
    const json_t *probes = json_object_get(pw, "probes");
    gate_metric_num(settings, "power_factor", &pf);
    gate_metric_num(settings, "power_layers", &pl);
    gate_metric_num(pw, "factor", &rf);
    gate_metric_num(pw, "n_layer", &L);
    const int ok_set =
        gate_check_num(checks, "power_factor", pf, ">", 1) &
        gate_check_num(checks, "power_factor bound", pf, "<=", FALSIFY_POWER_FACTOR_MAX) &
        gate_check_num(checks, "power_layers", pl, ">=", 1);
    if (!ok_set) {
        if (!(*fails)++)
            snprintf(first, fn,
                     "the power probe's settings are missing or out of range (power_factor in"
                     " (1, %g], power_layers >= 1)",
                     FALSIFY_POWER_FACTOR_MAX);
        return;
    }
    if (!gate_check_num(checks, "power probe factor recorded", rf, "==", pf) ||
        !gate_check_num(checks, "power probe layers recorded", L, ">=", 1) ||
        !json_is_array(probes)) {
        if (!(*fails)++)
            snprintf(first, fn, "the power probe was not recorded (or with another factor)");
        return;
    }
    /* coverage: every power tensor of the model, at min(power_layers, n_layer) distinct layers
     * including the last; the output matrix once */
    int tensors[FAULT_T_COUNT];
    const int nt = fault_power_tensors(json_is_true(json_object_get(pw, "moe")), tensors);
    char metric[160];
    for (int i = 0; i < nt; i++) {
        const char *tn = fault_tensor_name(tensors[i]);
        const int is_out = tensors[i] == FAULT_T_OUTPUT;
        int n_at = 0, last = 0;
        for (size_t j = 0; j < json_array_size(probes); j++) {
            const json_t *x = json_array_get(probes, j);
            const char *xt = json_string_value(json_object_get(x, "tensor"));
            double xl = NAN;
            gate_metric_num(x, "layer", &xl);
            if (!xt || strcmp(xt, tn))
                continue;
            int dup = 0; /* distinct layers only */
            for (size_t q = 0; q < j; q++) {
                const json_t *y = json_array_get(probes, q);
                const char *yt = json_string_value(json_object_get(y, "tensor"));
                double yl = NAN;
                gate_metric_num(y, "layer", &yl);
                dup |= yt && !strcmp(yt, tn) && yl == xl;
            }
            n_at += !dup;
            last |= is_out ? xl == -1 : xl == L - 1;
        }
        const double want = is_out ? 1 : (pl < L ? pl : L);
        snprintf(metric, sizeof metric, "power probes of %s", tn);
        const int enough = gate_check_num(checks, metric, n_at, ">=", want);
        snprintf(metric, sizeof metric, "power probe of %s at %s", tn,
                 is_out ? "the output" : "the last layer");
        if (!(gate_check_bool(checks, metric, last) && enough) && !(*fails)++)
            snprintf(first, fn,
                     "the power probe covers %s at %d layer%s (%g due, the last among them)", tn,
                     n_at, n_at == 1 ? "" : "s", want);
    }
    for (size_t j = 0; j < json_array_size(probes); j++) {
        const json_t *x = json_array_get(probes, j);
        const char *name = json_string_value(json_object_get(x, "fault"));
        name = name ? name : "?";
        const int tapless = json_is_true(json_object_get(x, "tapless"));
        double hd = NAN, ld = NAN;
        gate_metric_num(x, "hidden_diffs", &hd);
        gate_metric_num(x, "logit_diffs", &ld);
        int fired = tapless ? ld > 0 : (hd > 0 || ld > 0), malformed = 0, ag_bad = 0;
        const int proxy = settings_proxy(settings, "scale");
        snprintf(metric, sizeof metric, "power probe %.80s", name);
        proxy_as_due(checks, x, proxy, metric, "scale", first, fn, fails);
        if (proxy) /* by proxy: the judge's logits moved */
            fired = json_is_true(json_object_get(x, "proxy")) && ld > 0;
        else if (json_is_true(json_object_get(x, "proxy")))
            fired = 0; /* the judge took it: nothing acted on the engine */
        if (tapless && json_object_get(settings, "engine") == NULL)
            fired = 0; /* only an exec engine reports no taps */
        if (tapless) {
            const json_t *ag = json_object_get(x, "agreement");
            fired = fired && ag && !parity_rejects(ag, t, &ag_bad) && !ag_bad;
        }
        snprintf(metric, sizeof metric, "power probe %.80s fired", name);
        if (!gate_check_bool(checks, metric, fired) && !(*fails)++)
            snprintf(first, fn, "power probe %s did not act on the engine: it tested nothing",
                     name);
        const int rej = parity_rejects(x, t, &malformed);
        snprintf(metric, sizeof metric, "power probe %.80s rejected", name);
        if (!gate_check_bool(checks, metric, rej && !malformed) && !(*fails)++) {
            double mr = NAN, xr = NAN;
            gate_metric_num(x, "mean_rel_l2", &mr);
            gate_metric_num(x, "max_rel_l2", &xr);
            snprintf(first, fn,
                     "power probe %s passes parity (mean rel-L2 %.3g, max rel-L2 %.3g): the"
                     " thresholds are too loose to see a %.3g %% error of one matmul",
                     name, mr, xr, (pf - 1) * 100);
        }
    }
}

enum gate_verdict falsify_judge(const json_t *settings, const json_t *metrics, json_t *checks,
                                char *why, size_t n)
{
    const json_t *sp = json_object_get(settings, "parity");
    const json_t *sf = json_object_get(settings, "faults");
    struct thresholds t = {.settings = sp};
    double samples_d, min_det;
    char first[320] = "", metric[160];
    int fails = 0;
    if (gate_metric_num(sp, "min_cosine", &t.min_cosine) ||
        gate_metric_num(sp, "max_mean_kld", &t.max_mean_kld) ||
        gate_metric_num(sp, "max_kld", &t.max_kld) ||
        gate_metric_num(sp, "near_tie", &t.near_tie) ||
        (json_object_get(sp, "route_tie") && gate_metric_num(sp, "route_tie", &t.route_tie)) ||
        gate_metric_num(settings, "sweep_samples", &samples_d) ||
        gate_metric_num(settings, "min_detection", &min_det) || !json_is_array(sf)) {
        gate_check_bool(checks, "settings complete", 0);
        gate_say(why, n,
                 "falsify settings need faults, parity thresholds, sweep_samples and"
                 " min_detection");
        return GATE_FAIL;
    }
    /* the strength floor: looser thresholds prove nothing */
    int floor_ok = gate_check_num(checks, "parity.min_cosine floor", t.min_cosine,
                                  ">=", FALSIFY_FLOOR_MIN_COSINE);
    floor_ok &=
        gate_check_num(checks, "parity.max_kld floor", t.max_kld, "<=", FALSIFY_FLOOR_MAX_KLD);
    floor_ok &= gate_check_num(checks, "parity.max_mean_kld floor", t.max_mean_kld,
                               "<=", FALSIFY_FLOOR_MAX_MEAN_KLD);
    floor_ok &=
        gate_check_num(checks, "parity.near_tie floor", t.near_tie, "<=", FALSIFY_FLOOR_NEAR_TIE);
    /* absent: 0, no route ties (the strictest); falsify_check_floor refuses a looser one */
    floor_ok &= gate_check_num(checks, "parity.route_tie floor", t.route_tie,
                               "<=", FALSIFY_FLOOR_ROUTE_TIE);
    if (samples_d > 0 &&
        !gate_check_num(checks, "min_detection floor", min_det,
                        ">=", FALSIFY_MIN_DETECTION_FLOOR) &&
        !fails++)
        snprintf(first, sizeof first,
                 "min_detection %g is below %g: a detection floor of 0 cannot fail, the sweep"
                 " proves nothing",
                 min_det, FALSIFY_MIN_DETECTION_FLOOR);
    if (!floor_ok && !fails++)
        snprintf(first, sizeof first,
                 "parity thresholds are looser than the falsify floor"
                 " (min_cosine >= %g, max_kld <= %g, max_mean_kld <= %g, near_tie <= %g,"
                 " route_tie <= %g)",
                 FALSIFY_FLOOR_MIN_COSINE, FALSIFY_FLOOR_MAX_KLD, FALSIFY_FLOOR_MAX_MEAN_KLD,
                 FALSIFY_FLOOR_NEAR_TIE, FALSIFY_FLOOR_ROUTE_TIE);
    int malformed;
    int clean_rej = parity_rejects(json_object_get(metrics, "clean"), &t, &malformed);
    if (!gate_check_bool(checks, "clean run passes parity", !clean_rej && !malformed) && !fails++)
        snprintf(first, sizeof first,
                 "the clean run fails parity (or was not recorded): a"
                 " rejection proves nothing");
    const json_t *mf = json_object_get(metrics, "faults");
    if (!gate_check_num(checks, "faults judged", (double)json_array_size(mf),
                        "==", (double)json_array_size(sf)) ||
        !gate_check_num(checks, "faults listed", (double)json_array_size(sf), ">=", 1)) {
        if (!fails++)
            snprintf(first, sizeof first, "%zu faults recorded for %zu listed", json_array_size(mf),
                     json_array_size(sf));
    }
    for (size_t i = 0; i < json_array_size(mf) && i < json_array_size(sf); i++) {
        const json_t *f = json_array_get(mf, i);
        const char *kind = json_string_value(json_object_get(f, "kind"));
        const char *want = json_string_value(json_object_get(json_array_get(sf, i), "kind"));
        const char *name = json_string_value(json_object_get(f, "fault"));
        name = name ? name : "?";
        snprintf(metric, sizeof metric, "%.80s kind", name);
        if (!gate_check_str(checks, metric, kind ? kind : "", want ? want : "?") && !fails++)
            snprintf(first, sizeof first, "fault %zu is %s, the settings list %s", i,
                     kind ? kind : "?", want ? want : "?");
        const json_t *wit = json_object_get(f, "witness");
        double count = NAN;
        /* falsify by proxy exactly when the cell's engine does not take this kind (its settings
         * say), per fault: the settings' kind, never the recorded one */
        const int proxy = settings_proxy(settings, want);
        snprintf(metric, sizeof metric, "fault %.80s", name);
        if (!proxy_as_due(checks, f, proxy, metric, want ? want : "?", first, sizeof first, &fails))
            continue;
        if (proxy) { /* the judge took the fault: it fired when the judge's logits moved */
            gate_metric_num(wit, "logit_diffs", &count);
            snprintf(metric, sizeof metric, "%.80s fired in the judge (proxy)", name);
            if (!gate_check_bool(checks, metric,
                                 json_is_true(json_object_get(f, "proxy")) && count > 0) &&
                !fails++)
                snprintf(first, sizeof first, "fault %s (by proxy) did not fire in the judge",
                         name);
            int rej = parity_rejects(json_object_get(f, "parity"), &t, &malformed);
            snprintf(metric, sizeof metric, "%.80s rejected (proxy)", name);
            if (!gate_check_bool(checks, metric, rej && !malformed) && !fails++)
                snprintf(first, sizeof first,
                         "fault %s by proxy: the engine's clean run passes parity against the judge"
                         " under the fault, so at these thresholds and this engine's noise the"
                         " fault would not be seen",
                         name);
            continue;
        }
        /* an engine gate did not build (settings.engine: an exec cell) reports no taps, so its
         * witness is the logits moving; any other subject must show the fault in its taps */
        const int tapless = json_is_true(json_object_get(wit, "tapless"));
        snprintf(metric, sizeof metric, "%.80s tap-less witness only on an exec engine", name);
        if (tapless &&
            !gate_check_bool(checks, metric, json_object_get(settings, "engine") != NULL) &&
            !fails++)
            snprintf(first, sizeof first,
                     "fault %s has a tap-less witness, but the cell's engine records taps", name);
        gate_metric_num(wit,
                        tapless                 ? "logit_diffs"
                        : is_routing_name(kind) ? "route_diffs"
                                                : "hidden_diffs",
                        &count);
        snprintf(metric, sizeof metric, "%.80s witness count", name);
        if (!gate_check_num(checks, metric, count, ">", 0) && !fails++)
            snprintf(first, sizeof first, "fault %s did not fire: it tested nothing", name);
        /* a tap-less witness only says the logits moved: the faulted run must also match the
         * judge's run with the same fault (an engine that ignores set_faults and jitters its
         * logits instead moves them too) */
        if (tapless) {
            int agree_malformed = 0;
            const json_t *ag = json_object_get(f, "agreement");
            const int off = !ag || parity_rejects(ag, &t, &agree_malformed);
            snprintf(metric, sizeof metric, "%.80s faulted run matches the judge's", name);
            if (!gate_check_bool(checks, metric, !off && !agree_malformed) && !fails++)
                snprintf(first, sizeof first,
                         "fault %s: the engine's faulted run does not match the judge's run with"
                         " the same fault (%s): the engine did not apply it",
                         name, !ag ? "not recorded" : "parity rejects the pair");
        }
        int rej = parity_rejects(json_object_get(f, "parity"), &t, &malformed);
        snprintf(metric, sizeof metric, "%.80s rejected", name);
        if (!gate_check_bool(checks, metric, rej && !malformed) && !fails++)
            snprintf(first, sizeof first,
                     "fault %s escaped the parity oracle: it is blind"
                     " there",
                     name);
    }
    /* the sampled sweep, per kind listed */
    const json_t *kinds = json_object_get(json_object_get(metrics, "sweep"), "kinds");
    for (size_t i = 0; samples_d > 0 && i < json_array_size(sf); i++) {
        const char *kind = json_string_value(json_object_get(json_array_get(sf, i), "kind"));
        int dup = 0;
        for (size_t j = 0; j < i; j++) {
            const char *kj = json_string_value(json_object_get(json_array_get(sf, j), "kind"));
            dup |= kj && kind && !strcmp(kj, kind);
        }
        if (dup || !kind)
            continue;
        const json_t *K = NULL;
        for (size_t j = 0; j < json_array_size(kinds); j++) {
            const char *kj = json_string_value(json_object_get(json_array_get(kinds, j), "kind"));
            if (kj && !strcmp(kj, kind))
                K = json_array_get(kinds, j);
        }
        const json_t *pts = json_object_get(K, "points");
        const int proxy = settings_proxy(settings, kind);
        double pairs = NAN;
        gate_metric_num(K, "pairs", &pairs);
        const double want_n = pairs < samples_d ? pairs : samples_d;
        snprintf(metric, sizeof metric, "%s sweep samples", kind);
        if (!gate_check_num(checks, metric, (double)json_array_size(pts), "==", want_n) && !fails++)
            snprintf(first, sizeof first, "%s: %zu sweep samples recorded, %g due", kind,
                     json_array_size(pts), want_n);
        int det = 0, noop = 0;
        for (size_t j = 0; j < json_array_size(pts); j++) {
            const json_t *x = json_array_get(pts, j);
            double rd = NAN, hd = NAN, dev = NAN;
            gate_metric_num(x, "route_diffs", &rd);
            gate_metric_num(x, "hidden_diffs", &hd);
            gate_metric_num(x, "uniform_dev", &dev);
            /* a tap-less sample (exec engines only, as for the listed faults) fired when its
             * logits moved */
            const int tapless = json_is_true(json_object_get(x, "tapless")) &&
                                json_object_get(settings, "engine") != NULL;
            snprintf(metric, sizeof metric, "%s sweep sample L%g @%g", kind,
                     json_number_value(json_object_get(x, "layer")),
                     json_number_value(json_object_get(x, "position")));
            if (!proxy_as_due(checks, x, proxy, metric, kind, first, sizeof first, &fails)) {
                noop++; /* counted as nothing tested; the check above already FAILs */
                continue;
            }
            if (proxy) { /* by proxy: fired when the judge's logits moved */
                double ld = NAN;
                gate_metric_num(x, "logit_diffs", &ld);
                rd = hd = json_is_true(json_object_get(x, "proxy")) && ld > 0 ? ld : 0;
            }
            if (tapless) { /* fired: the logits moved, as the judge's did under that injection */
                int agree_malformed = 0;
                const json_t *ag = json_object_get(x, "agreement");
                gate_metric_num(x, "logit_diffs", &hd);
                if (!ag || parity_rejects(ag, &t, &agree_malformed) || agree_malformed)
                    hd = 0;
            }
            const int fired = !tapless && !proxy && is_routing_name(kind) ? rd > 0 : hd > 0;
            if (!fired || (!strcmp(kind, "uniform_weights") && dev < FALSIFY_NOOP_UNIFORM)) {
                noop++;
                continue;
            }
            det += parity_rejects(x, &t, &malformed) && !malformed;
        }
        const int tested = (int)json_array_size(pts) - noop;
        const double rate = tested > 0 ? (double)det / tested : NAN;
        snprintf(metric, sizeof metric,
                 "%s sweep detection rate (%d detected, %d escapes, %d"
                 " no-ops)",
                 kind, det, tested - det, noop);
        if (!gate_check_num(checks, metric, rate, ">=", min_det) && !fails++)
            snprintf(first, sizeof first,
                     "%s: sampled sweep detected %d of %d injections that"
                     " changed something (%d no-ops), below min_detection %g",
                     kind, det, tested, noop, min_det);
    }
    power_judge(settings, metrics, &t, checks, first, sizeof first, &fails);
    gate_say(why, n, "%s", fails ? first : "");
    return fails ? GATE_FAIL : GATE_PASS;
}

static json_t *sample_json(const struct falsify_sample *x)
{
    json_t *o = json_pack(
        "{s:i, s:i, s:i, s:i, s:o, s:o, s:o, s:o, s:i, s:i}", "layer", x->layer, "position", x->pos,
        "route_diffs", x->route_diffs, "hidden_diffs", x->hidden_diffs, "uniform_dev",
        parity_json_number(x->uniform_dev), "min_cosine", parity_json_number(x->min_cosine),
        "mean_kld", parity_json_number(x->mean_kld), "max_kld", parity_json_number(x->max_kld),
        "wrong_positions", x->n_wrong, "nonfinite_positions", x->n_nonfinite);
    if (o && x->proxy) {
        json_object_set_new(o, "proxy", json_true());
        json_object_set_new(o, "logit_diffs", json_integer(x->logit_diffs));
    }
    if (o) {
        json_object_set_new(o, "max_rel_l2", parity_json_number(x->max_rel_l2));
        json_object_set_new(o, "mean_rel_l2", parity_json_number(x->mean_rel_l2));
        json_object_set_new(o, "route_refused", json_integer(x->n_route_refused));
    }
    if (o && x->tapless) {
        const struct falsify_numbers *a = &x->agreement;
        json_object_set_new(o, "logit_diffs", json_integer(x->logit_diffs));
        json_object_set_new(o, "tapless", json_true());
        json_object_set_new(
            o, "agreement",
            json_pack("{s:o, s:o, s:o, s:o, s:o, s:i, s:i, s:i}", "min_cosine",
                      parity_json_number(a->min_cosine), "mean_kld",
                      parity_json_number(a->mean_kld), "max_kld", parity_json_number(a->max_kld),
                      "max_rel_l2", parity_json_number(a->max_rel_l2), "mean_rel_l2",
                      parity_json_number(a->mean_rel_l2), "wrong_positions", a->n_wrong,
                      "nonfinite_positions", a->n_nonfinite, "route_refused", a->n_route_refused));
    }
    return o;
}

/* The informational counts: parity's rule over a sample's summary numbers, as the judge reads
 * the recorded points (parity_metrics_rejected): positions as the session's */
static int numbers_rejected(const struct parity_config *c, const struct falsify_numbers *x)
{
    struct parity_summary s;
    memset(&s, 0, sizeof s);
    s.n_pos = c->positions;
    s.min_cosine = x->min_cosine, s.mean_kld = x->mean_kld, s.max_kld = x->max_kld;
    s.max_rel_l2 = x->max_rel_l2;
    s.mean_rel_l2 = x->mean_rel_l2;
    s.n_wrong = x->n_wrong, s.n_nonfinite = x->n_nonfinite;
    s.route.n_refused = x->n_route_refused;
    s.forced.measured = x->forced;
    s.forced.worst = x->forced_worst, s.forced.head = x->forced_head;
    s.forced.row = x->forced_row;
    s.forced.row_layer = s.forced.row_pos = -1;
    return parity_rejected(c, &s);
}

/* A falsify_numbers as the keys parity_metrics_rejected reads of a sweep point, into o. */
static void numbers_json(json_t *o, const struct falsify_numbers *x)
{
    json_object_set_new(o, "min_cosine", parity_json_number(x->min_cosine));
    json_object_set_new(o, "mean_kld", parity_json_number(x->mean_kld));
    json_object_set_new(o, "max_kld", parity_json_number(x->max_kld));
    json_object_set_new(o, "max_rel_l2", parity_json_number(x->max_rel_l2));
    json_object_set_new(o, "mean_rel_l2", parity_json_number(x->mean_rel_l2));
    json_object_set_new(o, "wrong_positions", json_integer(x->n_wrong));
    json_object_set_new(o, "nonfinite_positions", json_integer(x->n_nonfinite));
    json_object_set_new(o, "route_refused", json_integer(x->n_route_refused));
    if (x->forced) { /* parity's forced layers, when the run measured them */
        json_object_set_new(o, "forced_worst", parity_json_number(x->forced_worst));
        json_object_set_new(o, "forced_row", parity_json_number(x->forced_row));
        json_object_set_new(o, "forced_head", parity_json_number(x->forced_head));
    }
}

static json_t *power_json(const struct falsify_result *r)
{
    json_t *o = json_object(), *ps = json_array();
    json_object_set_new(o, "factor", json_real(r->power_factor));
    json_object_set_new(o, "moe", json_boolean(r->is_moe));
    json_object_set_new(o, "n_layer", json_integer(r->n_layer));
    for (int i = 0; i < r->n_probes; i++) {
        const struct falsify_probe *p = &r->probes[i];
        json_t *x = json_object();
        json_object_set_new(x, "fault", json_string(p->name));
        json_object_set_new(x, "tensor", json_string(fault_tensor_name(p->tensor)));
        json_object_set_new(x, "layer", json_integer(p->layer));
        json_object_set_new(x, "hidden_diffs", json_integer(p->hidden_diffs));
        json_object_set_new(x, "logit_diffs", json_integer(p->logit_diffs));
        if (p->proxy)
            json_object_set_new(x, "proxy", json_true());
        numbers_json(x, &p->num);
        if (p->tapless) {
            json_t *a = json_object();
            numbers_json(a, &p->agreement);
            json_object_set_new(x, "tapless", json_true());
            json_object_set_new(x, "agreement", a);
        }
        json_array_append_new(ps, x);
    }
    json_object_set_new(o, "probes", ps);
    return o;
}

json_t *falsify_result_json(const struct falsify_result *r)
{
    json_t *o = json_object(), *fa = json_array(), *ks = json_array();
    json_object_set_new(o, "mode", json_string(r->mode));
    json_object_set_new(o, "clean", parity_result_json(&r->clean));
    for (int i = 0; i < r->n; i++) {
        const struct falsify_fault *f = &r->f[i];
        json_t *x = json_object();
        json_object_set_new(x, "fault", json_string(f->name));
        json_object_set_new(x, "kind", json_string(fault_kind_name(f->spec.kind)));
        json_t *w = json_object();
        json_object_set_new(w, "layer", json_integer(f->witness.layer));
        json_object_set_new(w, "position", json_integer(f->witness.pos));
        json_object_set_new(w, "tap", json_string(f->witness.what));
        json_object_set_new(w, "route_diffs", json_integer(f->witness.n_route_diff));
        json_object_set_new(w, "hidden_diffs", json_integer(f->witness.n_hidden_diff));
        json_object_set_new(w, "logit_diffs", json_integer(f->witness.n_logit_diff));
        if (f->witness.tapless)
            json_object_set_new(w, "tapless", json_true());
        if (f->proxy) /* recorded as a proxy, never as the engine's own injection */
            json_object_set_new(x, "proxy", json_true());
        json_object_set_new(x, "witness", w);
        json_object_set_new(x, "rejected_by", json_string(f->metric)); /* informational */
        json_object_set_new(x, "severity", parity_json_number(f->severity));
        json_object_set_new(x, "parity", parity_result_json(&f->parity));
        if (f->has_agreement)
            json_object_set_new(x, "agreement", parity_result_json(&f->agreement));
        json_array_append_new(fa, x);
    }
    json_object_set_new(o, "faults", fa);
    for (int i = 0; i < r->n_kinds; i++) {
        const struct falsify_kind *K = &r->k[i];
        json_t *pts = json_array();
        int det = 0, noop = 0;
        for (int j = 0; j < K->n; j++) {
            const struct falsify_sample *x = &K->s[j];
            const struct falsify_numbers *a = &x->agreement;
            const int fired = x->proxy ? x->logit_diffs > 0
                              : x->tapless
                                  ? x->logit_diffs > 0 && !numbers_rejected(&r->clean.cfg, a)
                              : fault_is_routing(K->spec.kind) ? x->route_diffs > 0
                                                               : x->hidden_diffs > 0;
            const int is_noop = !fired || (K->spec.kind == FAULT_UNIFORM_WEIGHTS &&
                                           x->uniform_dev < FALSIFY_NOOP_UNIFORM);
            noop += is_noop;
            const struct falsify_numbers xn = {.min_cosine = x->min_cosine,
                                               .mean_kld = x->mean_kld,
                                               .max_kld = x->max_kld,
                                               .max_rel_l2 = x->max_rel_l2,
                                               .mean_rel_l2 = x->mean_rel_l2,
                                               .n_wrong = x->n_wrong,
                                               .n_nonfinite = x->n_nonfinite,
                                               .n_route_refused = x->n_route_refused};
            det += !is_noop && numbers_rejected(&r->clean.cfg, &xn);
            json_array_append_new(pts, sample_json(x));
        }
        /* the counts are informational; the judge recounts them from the points */
        json_array_append_new(ks, json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:o}", "kind",
                                            fault_kind_name(K->spec.kind), "fault", K->name,
                                            "pairs", K->n_pairs, "detected", det, "escapes",
                                            K->n - noop - det, "noops", noop, "points", pts));
    }
    json_object_set_new(o, "sweep", json_pack("{s:o}", "kinds", ks));
    json_object_set_new(o, "power", power_json(r));
    return o;
}

void falsify_print(FILE *f, const struct falsify_result *r)
{
    fprintf(f, "falsify %s: clean run %s (min cosine %.6f, max KLD %.3g)\n", r->mode,
            r->clean.pass ? "PASS" : "FAIL", r->clean.cosine.min, r->clean.kld.max);
    fprintf(f, "  %-44s %-6s %-14s %-8s %10s %10s %6s  %s\n", "fault", "fired", "witness", "parity",
            "min cos", "max KLD", "WRONG", "verdict");
    for (int i = 0; i < r->n; i++) {
        const struct falsify_fault *x = &r->f[i];
        char wit[32] = "-";
        if (x->fired)
            snprintf(wit, sizeof wit, "L%d @%d", x->witness.layer, x->witness.pos);
        fprintf(f, "  %-44s %-6s %-14s %-8s %10.6f %10.4g %6d  %s\n", x->name,
                x->fired ? "yes" : "NO", wit, x->rejected ? "REJECT" : "pass", x->parity.cosine.min,
                x->parity.kld.max, x->parity.n_wrong,
                x->pass     ? "ok"
                : !x->fired ? "FAIL (did not fire)"
                            : "FAIL (escaped)");
    }
    for (int i = 0; i < r->n; i++)
        fprintf(f, "  %s: %s\n", r->f[i].name, r->f[i].metric);
    if (r->n_kinds)
        fprintf(f,
                "  sampled sweep (one layer x one position per injection):\n"
                "  %-24s %8s %8s %8s %8s %8s %7s\n",
                "kind", "pairs", "samples", "detected", "escapes", "no-ops", "rate");
    for (int i = 0; i < r->n_kinds; i++) {
        const struct falsify_kind *K = &r->k[i];
        fprintf(f, "  %-24s %8d %8d %8d %8d %8d %6.1f%%\n", fault_kind_name(K->spec.kind),
                K->n_pairs, K->n, K->detected, K->escapes, K->noops, 100.0 * K->rate);
        for (int j = 0; j < K->n; j++)
            if (K->s[j].uniform_dev > 0 && K->s[j].uniform_dev < FALSIFY_NOOP_UNIFORM)
                fprintf(f, "      no-op: L%d @%d weights already uniform within %.2g\n",
                        K->s[j].layer, K->s[j].pos, K->s[j].uniform_dev);
    }
    if (r->n_probes) {
        fprintf(f, "  power probe (one matmul scaled by %g; must be rejected):\n", r->power_factor);
        fprintf(f, "  %-44s %12s %12s %10s\n", "probe", "mean rel-L2", "max rel-L2", "max KLD");
        for (int i = 0; i < r->n_probes; i++)
            fprintf(f, "  %-44s %12.4g %12.4g %10.3g\n", r->probes[i].name,
                    r->probes[i].num.mean_rel_l2, r->probes[i].num.max_rel_l2,
                    r->probes[i].num.max_kld);
    }
    fprintf(f, "  %s\n", r->reason);
}

/* ---- the sweep ------------------------------------------------------------------------------ */

static struct falsify_sweep_point point_of(int layer, int pos, const struct parity_result *r)
{
    struct falsify_sweep_point p = {layer,         pos,        parity_severity(r),
                                    r->cosine.min, r->kld.max, r->n_wrong};
    return p;
}

int falsify_sweep(const struct model *m, const struct mode *mode, const struct fault_set *kinds,
                  const int32_t *tokens, int n, const struct falsify_config *cfg, int n_threads,
                  falsify_progress_fn progress, void *ctx, struct falsify_sweep_result *out,
                  struct gate_err *err)
{
    int done_runs = 0, total_runs = 0;
    struct parity_session *s = NULL;
    struct parity_result r = {0};
    memset(out, 0, sizeof *out);
    mode_format(mode, out->mode, sizeof out->mode);
    struct falsify_config own = *cfg;
    if (tokens) /* supplied tokens: every one is judged (as in falsify_run) */
        own.parity.positions = n;
    cfg = &own;
    out->cfg = cfg->parity;
    int rc = check_faults(m, kinds, err);
    if (!rc && cfg->n_clean < 1)
        rc = err_set(err, ERR_INPUT, "the sweep needs at least one clean run (got %d)",
                     cfg->n_clean);
    if (!rc)
        rc = parity_session_open(&s, m, mode, tokens, n, &cfg->parity, n_threads, 1, err);
    if (rc)
        goto done;
    out->n_pos = parity_session_n(s);
    out->n_layer = (int)m->hp.n_layer;
    out->pos_lo = INT_MAX;
    out->pos_hi = -1;
    out->noise_min_cosine = 1.0;
    total_runs = cfg->n_clean;
    for (int ki = 0; ki < kinds->n; ki++) {
        const struct fault_spec *f = &kinds->f[ki];
        const int nl = min_i(f->layer_hi, out->n_layer - 1) - f->layer_lo + 1;
        const int np = min_i(f->pos_hi, out->n_pos - 1) - f->pos_lo + 1;
        if (nl > 0 && np > 0)
            total_runs += nl * np;
    }
    if (progress)
        progress(ctx, 0, total_runs);
    /* the noise ceiling: the clean mode, N times */
    out->n_clean = cfg->n_clean;
    for (int i = 0; i < cfg->n_clean; i++) {
        if ((rc = parity_session_run(s, NULL, &cfg->parity, 0, &r, err)))
            goto done;
        double sev = parity_severity(&r);
        out->noise_severity = compare_worst_max(out->noise_severity, sev);
        out->noise_min_cosine = compare_worst_min(out->noise_min_cosine, r.cosine.min);
        out->noise_max_kld = compare_worst_max(out->noise_max_kld, r.kld.max);
        out->noise_mean_kld = compare_worst_max(out->noise_mean_kld, r.kld.mean);
        out->noise_wrong += r.n_wrong + r.n_nonfinite;
        out->threshold_in_noise |= !r.pass;
        parity_result_free(&r);
        if (progress)
            progress(ctx, ++done_runs, total_runs);
    }
    out->weakest_severity = INFINITY;
    out->n_kinds = kinds->n;
    for (int ki = 0; ki < kinds->n; ki++) {
        struct falsify_sweep_kind *K = &out->k[ki];
        K->spec = kinds->f[ki];
        fault_format(&K->spec, K->name, sizeof K->name);
        const int l_hi = min_i(K->spec.layer_hi, out->n_layer - 1);
        const int p_hi = min_i(K->spec.pos_hi, out->n_pos - 1);
        if (K->spec.pos_lo >= out->n_pos) {
            rc = err_set(err, ERR_INPUT,
                         "fault '%s': position scope starts at %d but the"
                         " sequence has %d positions",
                         K->name, K->spec.pos_lo, out->n_pos);
            goto done;
        }
        out->pos_lo = min_i(out->pos_lo, K->spec.pos_lo);
        out->pos_hi = p_hi > out->pos_hi ? p_hi : out->pos_hi;
        for (int l = K->spec.layer_lo; l <= l_hi; l++)
            for (int p = K->spec.pos_lo; p <= p_hi; p++) {
                struct fault_set one = {.n = 1, .f = {K->spec}};
                one.f[0].layer_lo = one.f[0].layer_hi = l;
                one.f[0].pos_lo = one.f[0].pos_hi = p;
                struct parity_witness w;
                if ((rc = parity_session_run(s, &one, &cfg->parity, 0, &r, err)) ||
                    (rc = parity_session_witness(s, K->spec.kind, &w, err)))
                    goto done;
                K->n_injected++;
                struct falsify_sweep_point pt = point_of(l, p, &r);
                if (!w.fired)
                    K->n_not_fired++;
                else if (!r.pass) {
                    K->n_detected++;
                    if (!K->have_weakest || pt.severity < K->weakest.severity) {
                        K->weakest = pt;
                        K->have_weakest = 1;
                    }
                } else {
                    K->n_escaped++;
                    if (K->n_escapes_listed < FALSIFY_SWEEP_MAX_ESCAPES)
                        K->escapes[K->n_escapes_listed++] = pt;
                }
                parity_result_free(&r);
                if (progress)
                    progress(ctx, ++done_runs, total_runs);
            }
        const int fired = K->n_injected - K->n_not_fired;
        K->detection_rate = fired ? (double)K->n_detected / fired : NAN;
        if (K->have_weakest && K->weakest.severity < out->weakest_severity)
            out->weakest_severity = K->weakest.severity;
        out->threshold_above_weakest |= K->n_escaped > 0;
    }
    out->separation =
        out->noise_severity > 0 ? out->weakest_severity / out->noise_severity : INFINITY;
    out->threshold_in_noise |= out->noise_severity >= 0.5;
    char *w = out->warning;
    const size_t wn = sizeof out->warning;
    int at = 0;
    if (out->threshold_in_noise)
        at += snprintf(w + at, wn - (size_t)at,
                       "WARNING: THE THRESHOLDS SIT IN THE NOISE: the"
                       " noisiest clean run reaches severity %.3g (1 = rejected). ",
                       out->noise_severity);
    if (out->threshold_above_weakest && at < (int)wn) {
        int esc = 0;
        for (int i = 0; i < out->n_kinds; i++)
            esc += out->k[i].n_escaped;
        snprintf(w + at, wn - (size_t)at,
                 "WARNING: THE THRESHOLDS SIT ABOVE THE WEAKEST FAULT:"
                 " %d injected faults escaped parity.",
                 esc);
    }
    out->pass = !out->threshold_in_noise && !out->threshold_above_weakest;
done:
    parity_result_free(&r);
    parity_session_close(s);
    return rc;
}

static json_t *point_json(const struct falsify_sweep_point *p)
{
    json_t *o = json_object();
    json_object_set_new(o, "layer", json_integer(p->layer));
    json_object_set_new(o, "position", json_integer(p->pos));
    json_object_set_new(o, "severity", parity_json_number(p->severity));
    json_object_set_new(o, "min_cosine", parity_json_number(p->min_cosine));
    json_object_set_new(o, "max_kld", parity_json_number(p->max_kld));
    json_object_set_new(o, "n_wrong", json_integer(p->n_wrong));
    return o;
}

json_t *falsify_sweep_json(const struct falsify_sweep_result *r)
{
    json_t *o = json_object(), *ks = json_array();
    json_object_set_new(o, "mode", json_string(r->mode));
    json_object_set_new(o, "verdict", json_string(r->pass ? "PASS" : "FAIL"));
    json_object_set_new(o, "warning", json_string(r->warning));
    json_object_set_new(o, "n_pos", json_integer(r->n_pos));
    json_object_set_new(o, "n_layer", json_integer(r->n_layer));
    json_t *c = json_object();
    json_object_set_new(c, "runs", json_integer(r->n_clean));
    json_object_set_new(c, "severity", parity_json_number(r->noise_severity));
    json_object_set_new(c, "min_cosine", parity_json_number(r->noise_min_cosine));
    json_object_set_new(c, "max_kld", parity_json_number(r->noise_max_kld));
    json_object_set_new(c, "mean_kld", parity_json_number(r->noise_mean_kld));
    json_object_set_new(c, "wrong_or_nonfinite", json_integer(r->noise_wrong));
    json_object_set_new(o, "noise_ceiling", c);
    json_object_set_new(o, "weakest_detected_severity", parity_json_number(r->weakest_severity));
    json_object_set_new(o, "separation", parity_json_number(r->separation));
    json_object_set_new(o, "threshold_in_noise", json_boolean(r->threshold_in_noise));
    json_object_set_new(o, "threshold_above_weakest", json_boolean(r->threshold_above_weakest));
    for (int i = 0; i < r->n_kinds; i++) {
        const struct falsify_sweep_kind *k = &r->k[i];
        json_t *x = json_object(), *es = json_array();
        json_object_set_new(x, "fault", json_string(k->name));
        json_object_set_new(x, "injected", json_integer(k->n_injected));
        json_object_set_new(x, "not_fired", json_integer(k->n_not_fired));
        json_object_set_new(x, "detected", json_integer(k->n_detected));
        json_object_set_new(x, "escaped", json_integer(k->n_escaped));
        json_object_set_new(x, "detection_rate", parity_json_number(k->detection_rate));
        json_object_set_new(x, "weakest_detected",
                            k->have_weakest ? point_json(&k->weakest) : json_null());
        for (int e = 0; e < k->n_escapes_listed; e++)
            json_array_append_new(es, point_json(&k->escapes[e]));
        json_object_set_new(x, "escapes", es);
        json_array_append_new(ks, x);
    }
    json_object_set_new(o, "kinds", ks);
    return o;
}

void falsify_sweep_print(FILE *f, const struct falsify_sweep_result *r)
{
    fprintf(f,
            "falsify --sweep %s: %d layers x positions %d-%d of %d, thresholds min cosine %g,"
            " mean KLD %g, max KLD %g\n",
            r->mode, r->n_layer, r->pos_lo, r->pos_hi, r->n_pos, r->cfg.min_cosine,
            r->cfg.max_mean_kld, r->cfg.max_kld);
    fprintf(f,
            "  noise ceiling (%d clean runs): min cosine %.9f, max KLD %.3g, mean KLD %.3g,"
            " severity %.3g\n",
            r->n_clean, r->noise_min_cosine, r->noise_max_kld, r->noise_mean_kld,
            r->noise_severity);
    fprintf(f, "  %-24s %8s %9s %8s %8s %9s   %s\n", "fault", "injected", "not fired", "detected",
            "escaped", "rate",
            "weakest detected (layer @pos: severity, min cos,"
            " max KLD)");
    for (int i = 0; i < r->n_kinds; i++) {
        const struct falsify_sweep_kind *k = &r->k[i];
        fprintf(f, "  %-24s %8d %9d %8d %8d %8.1f%%   ", k->name, k->n_injected, k->n_not_fired,
                k->n_detected, k->n_escaped, 100.0 * k->detection_rate);
        if (k->have_weakest)
            fprintf(f, "L%d @%d: %.3g, %.6f, %.4g\n", k->weakest.layer, k->weakest.pos,
                    k->weakest.severity, k->weakest.min_cosine, k->weakest.max_kld);
        else
            fprintf(f, "-\n");
        for (int e = 0; e < k->n_escapes_listed; e++)
            fprintf(f, "      escaped: L%d @%d severity %.3g (min cos %.6f, max KLD %.4g)\n",
                    k->escapes[e].layer, k->escapes[e].pos, k->escapes[e].severity,
                    k->escapes[e].min_cosine, k->escapes[e].max_kld);
    }
    fprintf(f, "  separation: weakest detected severity %.3g / noisiest clean %.3g = %.3g\n",
            r->weakest_severity, r->noise_severity, r->separation);
    if (r->warning[0])
        fprintf(f, "\n  !!! %s\n\n", r->warning);
    fprintf(f, "  %s\n",
            r->pass ? "PASS: every injected fault was detected, clean runs sit"
                      " well inside the thresholds"
                    : "FAIL: see the warnings above");
}
