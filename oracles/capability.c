/* capability.c — see capability.h. */
#include "oracles/capability.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"

void capability_judge(const struct mode *mode, const struct backend_info *info,
                      struct capability_result *out)
{
    memset(out, 0, sizeof *out);
    mode_format(mode, out->asked, sizeof out->asked);
    out->info = *info;
    /* a device backend (engine/backend.c's list says which) must count kernel launches */
    const int on_device = backend_is_device(mode->backend);
    const int cpu_device =
        !strncmp(info->device, "cpu", 3); /* a device string: not a backend name */
    /* an exec engine reports its own device, CPU or GPU: recorded, not judged (docs/exec.md) */
    const int exec = backend_is_external(mode->backend);
    char *why = out->reason;
    const size_t wn = sizeof out->reason;
    if (strcmp(info->backend, mode->backend))
        snprintf(why, wn, "FAIL: asked for %s but backend '%s' ran (on %s)", out->asked,
                 info->backend, info->device);
    else if (info->forwards == 0 || info->tokens == 0)
        snprintf(why, wn, "FAIL: %s evaluated nothing (%llu forward calls, %llu tokens)",
                 out->asked, (unsigned long long)info->forwards, (unsigned long long)info->tokens);
    else if (on_device && info->kernel_launches == 0)
        snprintf(why, wn,
                 "FAIL: %s counted zero CUDA kernel launches over %llu tokens: it did"
                 " not run on the GPU (device '%s')",
                 out->asked, (unsigned long long)info->tokens, info->device);
    else if (on_device && cpu_device)
        snprintf(why, wn, "FAIL: %s reports the CPU device '%s'", out->asked, info->device);
    else if (exec && !info->device[0])
        snprintf(why, wn, "FAIL: %s: the engine named no device", out->asked);
    else if (!on_device && !cpu_device && !exec)
        snprintf(why, wn, "FAIL: %s is a CPU mode but reports device '%s'", out->asked,
                 info->device);
    else if (!on_device && info->kernel_launches)
        snprintf(why, wn, "FAIL: %s is a CPU mode but counted %llu kernel launches", out->asked,
                 (unsigned long long)info->kernel_launches);
    else {
        out->pass = 1;
        snprintf(why, wn,
                 "PASS: %s ran on backend %s, device %s (%llu tokens, %llu kernel"
                 " launches)",
                 out->asked, info->backend, info->device, (unsigned long long)info->tokens,
                 (unsigned long long)info->kernel_launches);
    }
}

int capability_run(const struct model *m, const struct mode *mode, int n_threads,
                   struct capability_result *out, struct gate_err *err)
{
    enum { N = 16 };
    int32_t tokens[N];
    static const int TURNS[6] = {4, 6, 9, 11, 14, 16};
    struct backend *b = NULL;
    float *logits = NULL;
    struct backend_info info;
    memset(out, 0, sizeof *out);
    mode_format(mode, out->asked, sizeof out->asked);
    int rc = mode_open(&b, mode, m, N, n_threads, NULL, err);
    if (rc)
        goto done;
    logits = malloc((size_t)N * m->hp.n_vocab * sizeof *logits);
    if (!logits) {
        rc = err_set(err, ERR_ENV, "capability: out of memory for the logits");
        goto done;
    }
    mode_tokens(1, m->hp.n_vocab, N, tokens);
    if ((rc = mode_run(b, mode->path, tokens, N, TURNS, 6, logits, err)))
        goto done;
    backend_info(b, &info);
    capability_judge(mode, &info, out);
done:
    free(logits);
    backend_close(b);
    return rc;
}

json_t *capability_result_json(const struct capability_result *r)
{
    json_t *o = json_object();
    json_object_set_new(o, "verdict", json_string(r->pass ? "PASS" : "FAIL"));
    json_object_set_new(o, "reason", json_string(r->reason));
    json_object_set_new(o, "mode", json_string(r->asked));
    json_object_set_new(o, "backend", json_string(r->info.backend));
    json_object_set_new(o, "device", json_string(r->info.device));
    json_object_set_new(o, "forwards", json_integer((json_int_t)r->info.forwards));
    json_object_set_new(o, "tokens", json_integer((json_int_t)r->info.tokens));
    json_object_set_new(o, "kernel_launches", json_integer((json_int_t)r->info.kernel_launches));
    json_object_set_new(o, "device_bytes", json_integer((json_int_t)r->info.device_bytes));
    return o;
}
