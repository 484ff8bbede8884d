#!/usr/bin/env bash
# The include arrows point one way (docs/ARCHITECTURE.md, "Layout"): a source file may include
# its own folder and the folders below it, never one above. Prints every violation; exit 1 on any.
# Levels: base 0; faults 1; engine 2 (its backend interface carries fault sets); kernels 3 (the
# CUDA backend implements engine's interface); oracles, receipts 4; harness 5; cli 6.
set -euo pipefail
cd "$(dirname "$0")/.."
level() {
    case "$1" in
    base) echo 0 ;; faults) echo 1 ;; engine) echo 2 ;; kernels) echo 3 ;;
    oracles | receipts) echo 4 ;; harness) echo 5 ;; cli) echo 6 ;; *) echo -1 ;;
    esac
}
bad=0
for f in $(git ls-files 'base/*' 'faults/*' 'engine/*' 'kernels/*' 'oracles/*' 'receipts/*' \
    'harness/*' 'cli/*' | grep -E '\.(c|h|cu|cuh)$'); do
    own=$(level "${f%%/*}")
    while IFS= read -r inc; do
        dir=${inc%%/*}
        [ "$dir" = "$inc" ] && continue # same-folder include without a path
        l=$(level "$dir")
        [ "$l" -lt 0 ] && continue
        if [ "$l" -gt "$own" ]; then
            echo "ci/check-layers.sh: $f includes \"$inc\" (an upper layer)"
            bad=1
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done
# Nothing above kernels/ includes a backend's own headers (issue 24 §5): oracles, receipts,
# harness and cli reach a backend's kernels through its row (engine/backend.h,
# backend_kernel_tests(); oracles/selftest.c), never "kernels/...", in any build.
for f in $(git ls-files 'oracles/*' 'receipts/*' 'harness/*' 'cli/*' | grep -E '\.(c|h)$'); do
    while IFS= read -r hit; do
        echo "ci/check-layers.sh: $f:${hit%%:*} includes a backend's header: ${hit#*:}"
        bad=1
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"kernels/' "$f" || true)
done
# Nothing above engine/ names a backend (issue 24 §5): oracles, receipts, harness and cli ask
# engine/backend.h what a backend is (judge, accelerator, external, device, its rows), never
# compare with "cuda", "cpu", "ref" or "exec". Comments are not code; a literal that is not a
# backend name (a JSON key, a device-string prefix) says so on its line: "not a backend name".
for f in $(git ls-files 'oracles/*' 'receipts/*' 'harness/*' 'cli/*' | grep -E '\.(c|h)$'); do
    while IFS= read -r hit; do
        echo "ci/check-layers.sh: $f:${hit%%:*} names a backend above engine/: ${hit#*:}"
        bad=1
    done < <(grep -n '"\(cuda\|cpu\|ref\|exec\)"' "$f" | grep -v 'not a backend name' |
        sed 's|/\*.*\*/||g' | grep -v '^[0-9]*:[[:space:]]*\(\*\|/\*\|//\)' |
        grep '"\(cuda\|cpu\|ref\|exec\)"' || true)
done
exit $bad
