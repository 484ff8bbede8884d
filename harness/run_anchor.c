/* run_anchor.c — one signed receipt per anchor case and host: the judge itself on trial
 * (issue 10 §1; oracles/anchor.h has the gate, run.h the contract).
 *
 * Invariants: the payload has the shape of a cell receipt (docs/receipts.md) with mode "anchor"
 * and the single gate "anchor"; its verdict is anchor_judge() over the recorded settings and
 * metrics, so the release check re-derives the same verdict from the same bytes; an anchor that
 * could not run is a FAIL row with its error, never a missing receipt.
 * Start reading: run_anchor_payload().
 */
#include "harness/run.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "engine/backend.h"
#include "harness/gatedef.h"
#include "harness/identity.h"
#include "harness/ladder.h"
#include "oracles/anchor.h"
#include "receipts/receipt.h"

static void spec_of(const struct ladder_anchor *a, struct anchor_spec *s)
{
    memset(s, 0, sizeof *s);
    s->id = a->id;
    s->arch = a->arch;
    s->model = (struct anchor_file){a->model.path, a->model.sha256};
    s->tokens = (struct anchor_file){a->tokens.path, a->tokens.sha256};
    s->logits = (struct anchor_file){a->logits.path, a->logits.sha256};
    if (a->greedy.path)
        s->greedy = (struct anchor_file){a->greedy.path, a->greedy.sha256};
    s->greedy_after = a->greedy_after;
    s->max_nmse = a->max_nmse;
    s->min_cosine = a->min_cosine;
    s->near_tie = a->near_tie;
}

int run_anchor_check(const struct ladder *l, int anchor_index, struct gate_err *err)
{
    struct anchor_spec s;
    struct gate_err e = {0};
    spec_of(&l->anchors[anchor_index], &s);
    const int rc = anchor_check(&s, &e);
    if (rc)
        err_set(err, rc, "%s:%d:3: %s (nothing was run, no receipt written)", l->path,
                l->anchors[anchor_index].line, e.msg);
    return rc;
}

json_t *run_anchor_settings(const struct ladder *l, int anchor_index)
{
    struct anchor_spec s;
    spec_of(&l->anchors[anchor_index], &s);
    return anchor_settings_json(&s);
}

/* The receipt's environment.gpu: what this host's device is ("none" on a CPU host). */
static json_t *gpu_environment(const struct ladder_host *h)
{
    if (!h->gpu)
        return json_string("none");
    /* the GPU backend's device query (engine/backend.h), whichever build this is */
    struct backend_device d;
    struct gate_err why = {0};
    if (backend_describe(backend_accelerator_name(), &d, &why) == 0) {
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", d.cc_major, d.cc_minor);
        return json_pack("{s:s, s:s, s:f, s:i, s:i}", "name", d.name, "compute_capability", cc,
                         "memory_gib", (double)d.total_bytes / (double)(1ull << 30), "driver",
                         d.driver, "runtime", d.runtime);
    }
    return json_pack("{s:s}", "error", why.msg);
}

json_t *run_anchor_payload(const struct ladder *l, int anchor_index, int host_index, int n_threads,
                           const struct identity *id, int *pass)
{
    const struct ladder_anchor *a = &l->anchors[anchor_index];
    const struct ladder_host *h = &l->hosts[host_index];
    char started[32], finished[32];
    struct anchor_spec spec;
    struct gate_err err = {0};
    json_t *metrics = NULL;
    identity_utc_now(started);
    spec_of(a, &spec);
    int rc = anchor_run(&spec, n_threads, &metrics, &err);
    identity_utc_now(finished);
    char model_sha[65] = "unknown";
    const char *ms = json_string_value(json_object_get(metrics, "model_sha256"));
    if (ms)
        snprintf(model_sha, sizeof model_sha, "%s", ms);
    /* the row every reader judges the same way: gate_judge_common() + anchor_judge(); a run
     * that could not compare is a FAIL row with its error */
    json_t *gate =
        gatedef_row("anchor", RUN_ANCHOR_MODE, run_anchor_settings(l, anchor_index),
                    rc ? NULL : metrics, rc ? (err.msg[0] ? err.msg : "did not run") : NULL);
    json_t *gates = json_pack("{s:o}", "anchor", gate);
    enum gate_verdict v = gatedef_overall(gates);
    *pass = v == GATE_PASS;
    json_t *model = json_pack("{s:s, s:s, s:s, s:s, s:s}", "id", a->id, "sha256", model_sha, "path",
                              a->model.path, "arch", a->arch, "reference", a->reference);
    json_t *env = identity_environment(n_threads);
    json_object_set_new(env, "host", json_string(h->id));
    json_object_set_new(env, "gpu", gpu_environment(h));
    return json_pack(
        "{s:i, s:{s:s, s:s, s:s, s:s, s:s}, s:{s:s, s:s, s:s}, s:{s:o, s:o}, s:o, s:o, s:[], s:s,"
        " s:s, s:s}",
        "schema_version", RECEIPT_SCHEMA_VERSION, "ladder", "name", l->name, "version", l->version,
        "sha256", l->sha256, "path", l->path, "trust_sha256", l->trust_sha256, "cell", "model",
        a->id, "host", h->id, "mode", RUN_ANCHOR_MODE, "subject", "model", model, "engine",
        identity_json(id), "environment", env, "gates", gates, "faults_active", "verdict",
        gate_verdict_name(v), "started_at", started, "finished_at", finished);
}
