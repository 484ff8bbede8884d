/* receiptfix.c — see receiptfix.h. */
#include "tests/support/receiptfix.h"

#include <criterion/criterion.h>
#include <stdio.h>

#include "harness/gatedef.h"
#include "tests/support/check.h"

void receiptfix_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", check_tmp_dir(), name);
}

struct key_pair receiptfix_key(const char *name, const char *host)
{
    char path[512];
    struct key_pair k;
    struct gate_err err = {0};
    receiptfix_path(path, sizeof path, name);
    cr_assert_eq(key_generate(path, host, &k, &err), 0, "%s", err.msg);
    return k;
}

json_t *receiptfix_judged(int numbers_pass, const char *claim)
{
    json_t *cos = json_array(), *kld = json_array(), *gap = json_array(), *rt = json_array(),
           *tt = json_array();
    for (int i = 0; i < 64; i++) {
        json_array_append_new(cos, json_real(!numbers_pass && i == 5 ? 0.5 : 0.9995));
        json_array_append_new(kld, json_real(0.0));
        json_array_append_new(gap, json_real(1.0));
        json_array_append_new(rt, json_integer(1));
        json_array_append_new(tt, json_integer(1));
    }
    json_t *m = json_pack("{s:{s:o, s:o, s:o, s:o, s:o}, s:{s:s, s:s, s:i, s:i, s:i}}",
                          "per_position", "cosine", cos, "kld", kld, "ref_gap", gap, "ref_top", rt,
                          "test_top", tt, "ran", "backend", "ref", "device", "cpu: t", "forwards",
                          64, "tokens", 64, "kernel_launches", 0);
    /* a ref subject judged at every position records its forced layers (exact: the twin) */
    json_object_set_new(m, "forced_layers",
                        json_pack("{s:b, s:f, s:i, s:f, s:f, s:i, s:i}", "measured", 1, "worst",
                                  0.0, "worst_layer", 0, "row", 0.0, "head", 0.0, "layers", 2,
                                  "positions", 64));
    json_t *settings = json_pack("{s:i, s:f, s:f, s:f, s:f}", "positions", 64, "min_cosine", 0.999,
                                 "max_mean_kld", 1e-3, "max_kld", 1e-2, "near_tie", 0.05);
    json_t *g = gatedef_row("parity", "ref.decode", settings, m, NULL);
    if (claim)
        json_object_set_new(g, "verdict", json_string(claim));
    const char *v = claim ? claim : json_string_value(json_object_get(g, "verdict"));
    return json_pack("{s:s, s:{s:o}}", "verdict", v, "gates", "parity", g);
}
