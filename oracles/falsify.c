/* falsify.c — fault-injection runs and the sweep (see falsify.h).
 *
 * One parity session serves every run: the judge's logits are computed once, the subject's
 * backend stays open and its live fault set is rewritten between runs (backend.h: the fault
 * set is borrowed for the backend's lifetime and read at every forward).
 * Start reading: falsify_run(), then falsify_sweep().
 */
#include "oracles/falsify.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(((struct falsify_fault *)0)->metric) ==
                   sizeof(((struct parity_result *)0)->reason),
               "a fault's metric holds parity's reason");

void falsify_config_default(struct falsify_config *c)
{
    parity_config_default(&c->parity);
    c->n_clean = 5;
}

void falsify_default_faults(const struct model *m, struct fault_set *out)
{
    memset(out, 0, sizeof *out);
    for (int k = 0; k < FAULT_KIND_COUNT; k++) {
        if (fault_is_routing((enum fault_kind)k) && m->hp.arch != ARCH_QWEN3MOE)
            continue;
        struct fault_spec f = {.kind = (enum fault_kind)k, .layer_hi = INT_MAX,
                               .pos_hi = INT_MAX};
        out->f[out->n++] = f;
    }
}

static int check_faults(const struct model *m, const struct fault_set *faults,
                        struct gate_err *err)
{
    const struct model_hparams *hp = &m->hp;
    if (!faults || faults->n == 0)
        return err_set(err, ERR_INPUT, "falsify needs at least one fault (an empty list proves"
                       " nothing)");
    return fault_validate(faults, (int)hp->n_layer, hp->arch == ARCH_QWEN3MOE,
                          (int)hp->n_expert_used, err);
}

void falsify_result_free(struct falsify_result *r)
{
    if (!r)
        return;
    parity_result_free(&r->clean);
    for (int i = 0; i < r->n; i++)
        parity_result_free(&r->f[i].parity);
}

int falsify_run(const struct model *m, const struct mode *mode, const struct fault_set *faults,
                const int32_t *tokens, int n, const struct falsify_config *cfg, int n_threads,
                struct falsify_result *out, struct gate_err *err)
{
    struct parity_session *s = NULL;
    memset(out, 0, sizeof *out);
    mode_format(mode, out->mode, sizeof out->mode);
    int rc = check_faults(m, faults, err);
    if (!rc)
        rc = parity_session_open(&s, m, mode, tokens, n, &cfg->parity, n_threads, 1, err);
    if (!rc)
        rc = parity_session_run(s, NULL, &cfg->parity, 1, &out->clean, err);
    for (int i = 0; !rc && i < faults->n; i++) {
        struct falsify_fault *ff = &out->f[i];
        struct fault_set one = {.n = 1, .f = {faults->f[i]}};
        ff->spec = faults->f[i];
        fault_format(&ff->spec, ff->name, sizeof ff->name);
        if ((rc = parity_session_run(s, &one, &cfg->parity, 1, &ff->parity, err)))
            break;
        out->n = i + 1;
        if ((rc = parity_session_witness(s, ff->spec.kind, &ff->witness, err)))
            break;
        ff->fired = ff->witness.fired;
        ff->rejected = !ff->parity.pass;
        ff->severity = parity_severity(&ff->parity);
        ff->pass = ff->fired && ff->rejected;
        if (!ff->fired)
            snprintf(ff->metric, sizeof ff->metric, "fault did not fire: no tap differs from"
                     " the clean run");
        else
            memcpy(ff->metric, ff->parity.reason, sizeof ff->metric); /* same size, NUL inside */
    }
    if (rc)
        goto done;
    int escaped = 0, unfired = 0;
    const char *first_bad = NULL;
    for (int i = 0; i < out->n; i++) {
        escaped += out->f[i].fired && !out->f[i].rejected;
        unfired += !out->f[i].fired;
        if (!out->f[i].pass && !first_bad)
            first_bad = out->f[i].name;
    }
    if (!out->clean.pass)
        snprintf(out->reason, sizeof out->reason, "FAIL: the clean run already fails parity"
                 " (%.200s): a rejection proves nothing", out->clean.reason);
    else if (unfired)
        snprintf(out->reason, sizeof out->reason, "FAIL: %d of %d faults did not fire (first:"
                 " %s): they tested nothing", unfired, out->n, first_bad);
    else if (escaped)
        snprintf(out->reason, sizeof out->reason, "FAIL: %d of %d faults escaped the parity"
                 " oracle (first: %s): it is blind there", escaped, out->n, first_bad);
    else {
        out->pass = 1;
        snprintf(out->reason, sizeof out->reason, "PASS: all %d faults fired and were rejected",
                 out->n);
    }
done:
    parity_session_close(s);
    return rc;
}

json_t *falsify_result_json(const struct falsify_result *r)
{
    json_t *o = json_object(), *fa = json_array();
    json_object_set_new(o, "mode", json_string(r->mode));
    json_object_set_new(o, "verdict", json_string(r->pass ? "PASS" : "FAIL"));
    json_object_set_new(o, "reason", json_string(r->reason));
    json_object_set_new(o, "clean", parity_result_json(&r->clean));
    for (int i = 0; i < r->n; i++) {
        const struct falsify_fault *f = &r->f[i];
        json_t *x = json_object();
        json_object_set_new(x, "fault", json_string(f->name));
        json_object_set_new(x, "fired", json_boolean(f->fired));
        json_t *w = json_object();
        json_object_set_new(w, "layer", json_integer(f->witness.layer));
        json_object_set_new(w, "position", json_integer(f->witness.pos));
        json_object_set_new(w, "tap", json_string(f->witness.what));
        json_object_set_new(w, "route_diffs", json_integer(f->witness.n_route_diff));
        json_object_set_new(w, "hidden_diffs", json_integer(f->witness.n_hidden_diff));
        json_object_set_new(x, "witness", w);
        json_object_set_new(x, "rejected", json_boolean(f->rejected));
        json_object_set_new(x, "verdict", json_string(f->pass ? "PASS" : "FAIL"));
        json_object_set_new(x, "rejected_by", json_string(f->metric));
        json_object_set_new(x, "severity", parity_json_number(f->severity));
        json_object_set_new(x, "parity", parity_result_json(&f->parity));
        json_array_append_new(fa, x);
    }
    json_object_set_new(o, "faults", fa);
    return o;
}

void falsify_print(FILE *f, const struct falsify_result *r)
{
    fprintf(f, "falsify %s: clean run %s (min cosine %.6f, max KLD %.3g)\n", r->mode,
            r->clean.pass ? "PASS" : "FAIL", r->clean.cosine.min, r->clean.kld.max);
    fprintf(f, "  %-44s %-6s %-14s %-8s %10s %10s %6s  %s\n", "fault", "fired", "witness",
            "parity", "min cos", "max KLD", "WRONG", "verdict");
    for (int i = 0; i < r->n; i++) {
        const struct falsify_fault *x = &r->f[i];
        char wit[32] = "-";
        if (x->fired)
            snprintf(wit, sizeof wit, "L%d @%d", x->witness.layer, x->witness.pos);
        fprintf(f, "  %-44s %-6s %-14s %-8s %10.6f %10.4g %6d  %s\n", x->name,
                x->fired ? "yes" : "NO", wit, x->rejected ? "REJECT" : "pass",
                x->parity.cosine.min, x->parity.kld.max, x->parity.n_wrong,
                x->pass ? "ok" : !x->fired ? "FAIL (did not fire)" : "FAIL (escaped)");
    }
    for (int i = 0; i < r->n; i++)
        fprintf(f, "  %s: %s\n", r->f[i].name, r->f[i].metric);
    fprintf(f, "  %s\n", r->reason);
}

/* ---- the sweep ------------------------------------------------------------------------------ */

static struct sweep_point point_of(int layer, int pos, const struct parity_result *r)
{
    struct sweep_point p = {layer, pos, parity_severity(r), r->cosine.min, r->kld.max,
                            r->n_wrong};
    return p;
}

static int min_i(int a, int b)
{
    return a < b ? a : b;
}

int falsify_sweep(const struct model *m, const struct mode *mode, const struct fault_set *kinds,
                  const int32_t *tokens, int n, const struct falsify_config *cfg, int n_threads,
                  struct sweep_result *out, struct gate_err *err)
{
    struct parity_session *s = NULL;
    struct parity_result r = {0};
    memset(out, 0, sizeof *out);
    mode_format(mode, out->mode, sizeof out->mode);
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
    /* the noise ceiling: the clean mode, N times */
    out->n_clean = cfg->n_clean;
    for (int i = 0; i < cfg->n_clean; i++) {
        if ((rc = parity_session_run(s, NULL, &cfg->parity, 0, &r, err)))
            goto done;
        double sev = parity_severity(&r);
        if (!(sev <= out->noise_severity))
            out->noise_severity = sev;
        if (!(r.cosine.min >= out->noise_min_cosine))
            out->noise_min_cosine = r.cosine.min;
        if (!(r.kld.max <= out->noise_max_kld))
            out->noise_max_kld = r.kld.max;
        if (!(r.kld.mean <= out->noise_mean_kld))
            out->noise_mean_kld = r.kld.mean;
        out->noise_wrong += r.n_wrong + r.n_nonfinite;
        out->threshold_in_noise |= !r.pass;
        parity_result_free(&r);
    }
    out->weakest_severity = INFINITY;
    out->n_kinds = kinds->n;
    for (int ki = 0; ki < kinds->n; ki++) {
        struct sweep_kind *K = &out->k[ki];
        K->spec = kinds->f[ki];
        fault_format(&K->spec, K->name, sizeof K->name);
        const int l_hi = min_i(K->spec.layer_hi, out->n_layer - 1);
        const int p_hi = min_i(K->spec.pos_hi, out->n_pos - 1);
        if (K->spec.pos_lo >= out->n_pos) {
            rc = err_set(err, ERR_INPUT, "fault '%s': position scope starts at %d but the"
                         " sequence has %d positions", K->name, K->spec.pos_lo, out->n_pos);
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
                struct sweep_point pt = point_of(l, p, &r);
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
                    if (K->n_escapes_listed < SWEEP_MAX_ESCAPES)
                        K->escapes[K->n_escapes_listed++] = pt;
                }
                parity_result_free(&r);
            }
        const int fired = K->n_injected - K->n_not_fired;
        K->detection_rate = fired ? (double)K->n_detected / fired : NAN;
        if (K->have_weakest && K->weakest.severity < out->weakest_severity)
            out->weakest_severity = K->weakest.severity;
        out->threshold_above_weakest |= K->n_escaped > 0;
    }
    out->separation = out->noise_severity > 0 ? out->weakest_severity / out->noise_severity
                                              : INFINITY;
    out->threshold_in_noise |= out->noise_severity >= 0.5;
    char *w = out->warning;
    const size_t wn = sizeof out->warning;
    int at = 0;
    if (out->threshold_in_noise)
        at += snprintf(w + at, wn - (size_t)at, "WARNING: THE THRESHOLDS SIT IN THE NOISE: the"
                       " noisiest clean run reaches severity %.3g (1 = rejected). ",
                       out->noise_severity);
    if (out->threshold_above_weakest && at < (int)wn) {
        int esc = 0;
        for (int i = 0; i < out->n_kinds; i++)
            esc += out->k[i].n_escaped;
        snprintf(w + at, wn - (size_t)at, "WARNING: THE THRESHOLDS SIT ABOVE THE WEAKEST FAULT:"
                 " %d injected faults escaped parity.", esc);
    }
    out->pass = !out->threshold_in_noise && !out->threshold_above_weakest;
done:
    parity_result_free(&r);
    parity_session_close(s);
    return rc;
}

static json_t *point_json(const struct sweep_point *p)
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

json_t *sweep_result_json(const struct sweep_result *r)
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
        const struct sweep_kind *k = &r->k[i];
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

void sweep_print(FILE *f, const struct sweep_result *r)
{
    fprintf(f, "falsify --sweep %s: %d layers x positions %d-%d of %d, thresholds min cosine %g,"
            " mean KLD %g, max KLD %g\n", r->mode, r->n_layer, r->pos_lo, r->pos_hi, r->n_pos,
            r->cfg.min_cosine, r->cfg.max_mean_kld, r->cfg.max_kld);
    fprintf(f, "  noise ceiling (%d clean runs): min cosine %.9f, max KLD %.3g, mean KLD %.3g,"
            " severity %.3g\n", r->n_clean, r->noise_min_cosine, r->noise_max_kld,
            r->noise_mean_kld, r->noise_severity);
    fprintf(f, "  %-24s %8s %9s %8s %8s %9s   %s\n", "fault", "injected", "not fired",
            "detected", "escaped", "rate", "weakest detected (layer @pos: severity, min cos,"
            " max KLD)");
    for (int i = 0; i < r->n_kinds; i++) {
        const struct sweep_kind *k = &r->k[i];
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
    fprintf(f, "  %s\n", r->pass ? "PASS: every injected fault was detected, clean runs sit"
                                   " well inside the thresholds"
                                 : "FAIL: see the warnings above");
}
