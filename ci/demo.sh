#!/usr/bin/env bash
# The README's demo command: build, then show the engine on a conformance model.
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${GATE_SHARED:-../shared}
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target gate >/dev/null
m="$shared/conformance/qwen3moe-tiny-q4_k_m"
echo "== gate model inspect (head) =="
build/gate model inspect "$m/model.gguf" | sed -n '1,6p;/^supported/p;/^hparams/p'
echo "== gate eval: 96 positions in one forward pass =="
build/gate eval "$m/model.gguf" --tokens "$m/tokens.txt" --logits /tmp/gate-demo-logits.f32
echo "== gate generate: 32 greedy tokens through the KV cache =="
head -16 "$m/tokens.txt" > /tmp/gate-demo-prompt.txt
build/gate generate "$m/model.gguf" --tokens /tmp/gate-demo-prompt.txt --n 32
echo "(expected, from the exact reference: $(tr '\n' ' ' < "$m/greedy_exact.txt"))"
