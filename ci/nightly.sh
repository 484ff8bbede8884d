#!/usr/bin/env bash
# ci/nightly.sh — the nightly ladder at real shapes (ladders/nightly.yaml, issue 26 §1, §2).
# NOT part of the test command: its cells take minutes to hours on two cores (docs/nightly.md).
#
#   ci/nightly.sh [run] [PATTERN]   every cell of host 'local' (or those matching the --only
#                                   PATTERN), one `gate run --only CELL` each, then the release
#                                   check; prints each cell's estimate, wall time and verdict
#   ci/nightly.sh pin ID PRESET     synthesize ID-PRESET-Q4_K_M-1.gguf into the cache and print
#                                   the sha256 line to pin it with (a model not yet in the ladder)
#   ci/nightly.sh goldens           record the goldens of every ladder model (gate golden record;
#                                   prints the golden.sha256 line to pin)
#
# Environment: GATE_MODEL_CACHE (default ~/.cache/gate/nightly) holds the synthesized models and
# the judge cache, outside the repository: a model is written once, atomically under its final
# name, and checked against its pin on every run, so an interrupted nightly resumes with every
# finished file. NIGHTLY_THREADS (default 2), NIGHTLY_DB (default $GATE_MODEL_CACHE/nightly.db),
# GATE_KEY (default ~/.config/gate/keys/local.key). Runs under `nice -n 10`.
# The inputs: every cell runs with one --input-seed, drawn once per store and kept next to it
# ($db.input-seed), so the cells of a model share the judge's cached logits across invocations
# and sessions, and still no engine knows its inputs in advance (docs/gates.md, "Inputs").
set -euo pipefail
cd "$(dirname "$0")/.."
export GATE_MODEL_CACHE="${GATE_MODEL_CACHE:-$HOME/.cache/gate/nightly}"
threads="${NIGHTLY_THREADS:-2}"
db="${NIGHTLY_DB:-$GATE_MODEL_CACHE/nightly.db}"
key="${GATE_KEY:-$HOME/.config/gate/keys/local.key}"
ladder=ladders/nightly.yaml
mkdir -p "$GATE_MODEL_CACHE"

# a CPU-only build of the binary, as ci/demo.sh makes it (build-demo/, the tests' build/ untouched)
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build-demo "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGATE_CUDA=OFF \
    -DGATE_TESTS=OFF >/dev/null
cmake --build build-demo -j 2 --target gate >/dev/null
gate=(nice -n 10 build-demo/gate)

if [ ! -f "$key" ]; then
    build-demo/gate key gen --host local -o "$key" --pub ladders/nightly.pub
else
    build-demo/gate key pub "$key" > ladders/nightly.pub
fi

cmd="${1:-run}"
case "$cmd" in
pin)
    id="${2:?usage: ci/nightly.sh pin ID PRESET}"
    preset="${3:?usage: ci/nightly.sh pin ID PRESET}"
    out="$GATE_MODEL_CACHE/$id-$preset-Q4_K_M-1.gguf"
    [ -f "$out" ] || /usr/bin/time -f "synthesized in %e s, peak RSS %M KB" \
        "${gate[@]}" model synth --preset "$preset" --quant Q4_K_M --seed 1 \
        --threads "$threads" -o "$out"
    echo "    sha256: $(sha256sum "$out" | cut -d' ' -f1)   # $id ($preset Q4_K_M seed 1)"
    exit 0
    ;;
goldens)
    "${gate[@]}" golden record "$ladder" --threads "$threads"
    exit 0
    ;;
run) pattern="${2:-*}" ;;
*) pattern="$cmd" ;;
esac

# one input seed for the whole campaign (16 hex digits, not 0), kept with the store
seedfile="$db.input-seed"
if [ ! -s "$seedfile" ]; then
    seed=0
    while [ "$seed" = 0 ] || [ "$seed" = 0000000000000000 ]; do
        seed=$(od -An -N8 -tx8 /dev/urandom | tr -d ' \n')
    done
    echo "$seed" > "$seedfile"
fi
input_seed=$(cat "$seedfile")
echo "inputs: --input-seed $input_seed (from $seedfile; delete it to draw another)"

echo "== gate ladder check =="
build-demo/gate ladder check "$ladder"
# the required cells of host local, as ladder check lists them (first word of each line)
mapfile -t cells < <(build-demo/gate ladder check "$ladder" |
    sed -n '/^required cells:/,/^excluded cells/{s|^  \([^ ]*/local/[^ ]*\) .*|\1|p}')
echo
printf '%-40s %10s %10s  %s\n' cell estimate wall verdict
total=0
for cell in "${cells[@]}"; do
    # shellcheck disable=SC2053 # a glob on purpose
    [[ "$cell" == $pattern ]] || continue
    log="$GATE_MODEL_CACHE/nightly-$(echo "$cell" | tr '/+=' '___').log"
    t0=$(date +%s.%N)
    set +e
    "${gate[@]}" run "$ladder" --host local --key "$key" --db "$db" --threads "$threads" \
        --only "$cell" --input-seed "$input_seed" >"$log" 2>&1
    rc=$?
    set -e
    t1=$(date +%s.%N)
    wall=$(python3 -c "print(f'{$t1 - $t0:.0f}')")
    total=$(python3 -c "print(f'{$total + $wall:.0f}')")
    est=$(sed -n 's/.*: estimated \([0-9]*\) s.*/\1 s/p' "$log" | head -1)
    verdict=$(sed -n "s|^  $cell *=> \([A-Z]*\).*|\1|p" "$log" | head -1)
    printf '%-40s %10s %8s s  %s (exit %d; %s)\n' "$cell" "${est:-?}" "$wall" \
        "${verdict:-none}" "$rc" "$log"
done
echo "cells' wall time in all: $total s (threads $threads, load now: $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "== gate release check =="
set +e
build-demo/gate release check "$ladder" --db "$db"
rel=$?
set -e
exit "$rel"
