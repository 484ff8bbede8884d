/* conformance.h — the conformance cases of ../shared/conformance (its README: small synthetic
 * models, each with llama.cpp's logits and an exact float64 evaluation's) as the tests open
 * them: which case folders there are, and the path of a file inside one. Shared by test_ref.c,
 * test_cpu.c, test_anchor.c, test_broken_twin.c, test_cmd_engine.c and test_kv_ladder.c; a model is
 * loaded with check_load_case() (check.h). Start reading: conformance_cases().
 */
#ifndef GATE_TEST_CONFORMANCE_H
#define GATE_TEST_CONFORMANCE_H

/* room for the case list: more case folders than this are not listed */
#define CONFORMANCE_MAX_CASES 64
/* the size of one case name in the list */
#define CONFORMANCE_NAME_MAX 256

/* Every case folder under ../shared/conformance holding a model.gguf (cases added after a test
 * was written count too), in the order the directory lists them, the first max of them: their
 * names into names[0 .. count-1]. Returns the count. Asserts (Criterion) that the folder opens. */
int conformance_cases(char names[][CONFORMANCE_NAME_MAX], int max);

/* ../shared/conformance/<name>/<file>, in one of eight rotating static buffers (each valid until
 * eight more calls: one printf may take the four files of a case and their digests). */
const char *conformance_path(const char *name, const char *file);

#endif
