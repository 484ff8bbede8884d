#!/usr/bin/env bash
# The throughput gate under load (issue 27 §1's goal; figures, not a test): with LOAD busy loops
# beside it, run the demo ladder REPEATS times into fresh stores and print every cell's
# throughput verdict with its medians, intervals, floors, runs and host-starved runs; then an
# exec engine slowed below its floor (tests/exec_engine.c --slow-forward) on the tiny MoE model,
# whose throughput must FAIL at any load. Needs build/gate and build/exec_engine (the test build).
# Usage: ci/throughput-load.sh LOAD [REPEATS] [SLEEP_MS]
set -euo pipefail
cd "$(dirname "$0")/.."
load=${1:?usage: ci/throughput-load.sh LOAD [REPEATS] [SLEEP_MS]}
repeats=${2:-5}
sleep_ms=${3:-20}
gate=$PWD/build/gate
engine=$PWD/build/exec_engine
[ -x "$gate" ] && [ -x "$engine" ] || { echo "build/gate and build/exec_engine first" >&2; exit 2; }
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$tmp" ladders/.load-demo.yaml ladders/.load.pub
}
trap cleanup EXIT
for _ in $(seq 1 "$load"); do
    (while :; do :; done) &
    pids+=($!)
done
sleep 2
# the demo ladder beside itself (its relative paths stay right), trusting this script's key
lad=ladders/.load-demo.yaml
"$gate" key gen --host local -o "$tmp/k.key" --pub ladders/.load.pub >/dev/null
sed "s#file:demo.pub#file:.load.pub#" ladders/demo.yaml > "$lad"
cp ladders/.load.pub "$tmp/k.pub"
echo "load: $load busy loops on $(nproc) CPUs; /proc/loadavg now: $(cat /proc/loadavg)"
row() { # DB: one line per cell's throughput row
    sqlite3 -separator ' | ' "$1" "select json_extract(payload,'\$.cell.model') || '/' ||
        json_extract(payload,'\$.cell.mode') || coalesce('/' || json_extract(payload,'\$.cell.kv'),''),
        json_extract(payload,'\$.gates.throughput.verdict'),
        printf('prefill %.0f [%.0f-%.0f] floor %g', json_extract(payload,'\$.gates.throughput.metrics.prefill.median_tps'),
               json_extract(payload,'\$.gates.throughput.metrics.prefill.ci_lo_tps'),
               json_extract(payload,'\$.gates.throughput.metrics.prefill.ci_hi_tps'),
               json_extract(payload,'\$.gates.throughput.settings.min_prefill_tps')),
        printf('decode %.0f [%.0f-%.0f] floor %g', json_extract(payload,'\$.gates.throughput.metrics.decode.median_tps'),
               json_extract(payload,'\$.gates.throughput.metrics.decode.ci_lo_tps'),
               json_extract(payload,'\$.gates.throughput.metrics.decode.ci_hi_tps'),
               json_extract(payload,'\$.gates.throughput.settings.min_decode_tps')),
        printf('%d runs, %d starved, load %.1f', json_array_length(json_extract(payload,'\$.gates.throughput.metrics.runs')),
               json_extract(payload,'\$.gates.throughput.metrics.starved_runs'),
               json_extract(payload,'\$.gates.throughput.metrics.host.loadavg_1m_end')),
        coalesce(json_extract(payload,'\$.gates.throughput.reason'),'')
        from receipts order by id"
}
for i in $(seq 1 "$repeats"); do
    echo "== demo ladder, repeat $i =="
    "$gate" run "$lad" --host local --key "$tmp/k.key" --db "$tmp/d$i.db" >/dev/null 2>&1 || true
    row "$tmp/d$i.db"
done
echo "== an exec engine sleeping ${sleep_ms} ms per forward (floor above what it can reach) =="
cat > "$tmp/slow.yaml" <<EOF
release: {name: slow, version: 0.0.1}
models:
  moe: {path: $(cd .. && pwd)/shared/conformance/qwen3moe-tiny-q4_k_m/model.gguf,
        sha256: 9bdb98987dd76a89e999a35b48d771fb7b758494a03d7cf4b5313f00e5fe9560, arch: qwen3moe}
hosts:
  local: {device: none, trust: [file:k.pub]}
engines:
  slow: {argv: [$engine, --slow-forward, '$sleep_ms'], timeout_s: 60, supports: [decode, faults]}
modes: [exec.slow.decode]
cells:
  - {models: [moe], hosts: [local], modes: [exec.slow.decode]}
gates:
  defaults:
    parity: {positions: 64}
    golden: {goldens: g.json}
    throughput: {prompt_tokens: 16, decode_tokens: 8, min_prefill_tps: 100, min_decode_tps: 100}
    falsify: {faults: [uniform_weights], sweep_samples: 1}
unanchored: {qwen3moe: "a throughput measurement: the judge is anchored by the demo ladder"}
EOF
# every cell runs the golden gate, and ladder check refuses a cell without pinned goldens
(cd "$tmp" && "$gate" golden record slow.yaml >/dev/null)
sed -i "s#goldens: g.json}#goldens: g.json, sha256: $(sha256sum "$tmp/g.json" | cut -c1-64)}#" "$tmp/slow.yaml"
(cd "$tmp" && "$gate" run slow.yaml --host local --key k.key --db slow.db >/dev/null 2>&1) || true
row "$tmp/slow.db"
echo "/proc/loadavg at the end: $(cat /proc/loadavg)"
