#!/usr/bin/env bash
# The README's demo command: build gate, make a host key if there is none, run the demo ladder
# (two synthetic models, the reference twin's decode / prefill / chat paths, every gate including
# falsification) into ./receipts.db, then ask for the release sign-off.
set -euo pipefail
cd "$(dirname "$0")/.."
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# the demo runs on the CPU host: a CPU-only build of just the binary (build-demo/, so the test
# configuration in build/ is left alone)
cmake -S . -B build-demo "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGATE_CUDA=OFF \
    -DGATE_TESTS=OFF >/dev/null
cmake --build build-demo -j "$(nproc 2>/dev/null || echo 2)" --target gate >/dev/null
gate=build-demo/gate
key="${GATE_KEY:-$HOME/.config/gate/keys/local.key}"
if [ ! -f "$key" ]; then
    "$gate" key gen --host local -o "$key" --pub ladders/demo.pub
else
    "$gate" key pub "$key" > ladders/demo.pub
fi
echo
echo "== gate ladder check: the required cells =="
"$gate" ladder check ladders/demo.yaml
echo
echo "== gate run: every cell of host 'local', one signed receipt each =="
set +e
"$gate" run ladders/demo.yaml --host local --key "$key" --db receipts.db
run_rc=$?
echo
echo "== gate release check: sign off only if every required cell has a valid PASS receipt =="
"$gate" release check ladders/demo.yaml --db receipts.db
rel_rc=$?
echo
echo "== gate report: the release as one static HTML page =="
"$gate" report ladders/demo.yaml --db receipts.db -o build-demo/report.html
rep_rc=$?
set -e
echo
echo "gate run exited $run_rc, gate release check exited $rel_rc, gate report exited $rep_rc."
echo "Open the report: build-demo/report.html (one file: no scripts, nothing fetched)."
echo "Audit any receipt with: $gate receipt show ID --db receipts.db   (gate receipt list --db receipts.db)"
[ "$run_rc" -eq 0 ] && [ "$rel_rc" -eq 0 ] && [ "$rep_rc" -eq 0 ]
