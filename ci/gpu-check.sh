#!/usr/bin/env bash
# The GPU check: one script an (offline) NVIDIA GPU host runs from the repository root, in stages
# within about 5 minutes, writing at most 8 files to $OUT (or the directory given as $1):
#   gpu-check.log  every stage's commands and output      build.log    configure + build
#   selftest.txt   gate selftest: kernels vs CPU twins, cuda.* parity and device faults
#   ladder.txt     gate run ladders/gpu.yaml + gate release check
#   bench.txt      gate bench --backend cuda on real-shape fast-blocks models
#   receipts.db    the signed receipts                     summary.json  stage -> exit code
# Stages (each bounded by a timeout; a failed stage does not stop the later ones):
#   0 shared   copy what the checks need from ../shared into ./shared (run once where ../shared
#              exists, before the tree is sent; on the GPU host ./shared is already there)
#   1 deps     unpack the .deb files carried in .deb/ (ci/fetch-debs.sh) into .deb/root with
#              dpkg -x (or plain ar + tar) and point pkg-config / the loader at them
#   2 build    cmake -DGATE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${GATE_CUDA_ARCH:-90a}, target gate
#   3 selftest gate selftest (+ the conformance models)        exit 3 = no device: a FAILURE here
#   4 ladder   gate run ladders/gpu.yaml --host h200; gate release check
#   5 bench    Qwen3-30B-A3B shape (128 experts, hidden 2048, $GATE_BENCH_LAYERS layers) and
#              Qwen3-8B shape ($GATE_BENCH_LAYERS_8B layers), Q4_K_M fast blocks
# Exit 0 only when every stage passed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT="${1:-${OUT:-$ROOT/out/gpu-check}}"
mkdir -p "$OUT"
LOG="$OUT/gpu-check.log"
: > "$LOG"
declare -A RC
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }
stage() { # stage NAME TIMEOUT_S OUTFILE CMD...
    local name=$1 t=$2 out=$3
    shift 3
    say "== stage $name (timeout ${t}s): $*"
    timeout --kill-after=10 "$t" "$@" > >(tee -a "$out" >> "$LOG") 2>&1
    RC[$name]=$?
    say "== stage $name exit ${RC[$name]}"
}

# ---- 0 shared -----------------------------------------------------------------------------------
if [ -d ../shared/conformance ] && [ ! -d shared/conformance ]; then
    mkdir -p shared
    cp -r ../shared/conformance ../shared/tokenizers shared/ 2>>"$LOG"
fi
export GATE_SHARED="$ROOT/shared"
# on the GPU host a test or check that would skip for lack of a device must fail instead
export GATE_REQUIRE_GPU=1
if [ "${GATE_PREPARE_ONLY:-0}" = 1 ]; then
    say "prepared ./shared and .deb/ ($(ls .deb/*.deb 2>/dev/null | wc -l) packages); stop"
    exit 0
fi

# ---- 1 deps -------------------------------------------------------------------------------------
deps() {
    local prefix="$ROOT/.deb/root"
    mkdir -p "$prefix"
    for d in "$ROOT"/.deb/*.deb; do
        [ -e "$d" ] || { echo "no .deb files in .deb/ (run ci/fetch-debs.sh where apt works)"; return 0; }
        if command -v dpkg >/dev/null; then
            dpkg -x "$d" "$prefix" || return 1
        else # ar + tar: a .deb is an ar archive holding data.tar.*
            (tmp=$(mktemp -d) && cd "$tmp" && ar x "$d" && tar -xf data.tar.* -C "$prefix" && rm -rf "$tmp") || return 1
        fi
    done
    echo "unpacked $(ls "$ROOT"/.deb/*.deb | wc -l) packages into $prefix"
}
stage deps 60 "$OUT/build.log" deps
P="$ROOT/.deb/root"
ML=x86_64-linux-gnu
if [ -d "$P/usr/lib/$ML" ]; then
    export PKG_CONFIG_SYSROOT_DIR="$P"
    export PKG_CONFIG_LIBDIR="$P/usr/lib/$ML/pkgconfig:$P/usr/share/pkgconfig"
    export LD_LIBRARY_PATH="$P/usr/lib/$ML:$P/lib/$ML${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    PKGCONF=$(command -v pkg-config || true)
    [ -z "$PKGCONF" ] && [ -x "$P/usr/bin/pkgconf" ] && PKGCONF="$P/usr/bin/pkgconf"
    CMAKE_DEPS=(-DPKG_CONFIG_EXECUTABLE="$PKGCONF" -DCMAKE_PREFIX_PATH="$P/usr")
else
    CMAKE_DEPS=()
fi

# ---- 2 build ------------------------------------------------------------------------------------
B="$ROOT/build-gpu"
build() {
    local gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv
    cmake -S "$ROOT" -B "$B" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGATE_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="${GATE_CUDA_ARCH:-90a}" -DGATE_TESTS=OFF "${CMAKE_DEPS[@]}" &&
        cmake --build "$B" -j "$(nproc)" --target gate
}
stage build 240 "$OUT/build.log" build
GATE="$B/gate"

# ---- 3 selftest ---------------------------------------------------------------------------------
models=()
for m in "$GATE_SHARED"/conformance/*/model.gguf; do [ -e "$m" ] && models+=(--model "$m"); done
if [ -x "$GATE" ]; then
    stage selftest 150 "$OUT/selftest.txt" "$GATE" selftest "${models[@]}"
    [ "${RC[selftest]}" = 3 ] && say "selftest exit 3: no usable CUDA device — on a GPU host this is a failure"
else
    RC[selftest]=127
fi

# ---- 4 ladder -----------------------------------------------------------------------------------
ladder() {
    local key="$ROOT/build-gpu/keys/h200.key"
    mkdir -p "$(dirname "$key")"
    rm -f "$key" "$ROOT/ladders/gpu.pub"
    "$GATE" key gen --host h200 -o "$key" --pub "$ROOT/ladders/gpu.pub" || return 1
    "$GATE" run ladders/gpu.yaml --host h200 --key "$key" --db "$OUT/receipts.db"
    local run_rc=$?
    "$GATE" release check ladders/gpu.yaml --db "$OUT/receipts.db"
    local rel_rc=$?
    echo "gate run exit $run_rc, gate release check exit $rel_rc"
    [ "$run_rc" = 0 ] && [ "$rel_rc" = 0 ]
}
if [ -x "$GATE" ]; then stage ladder 200 "$OUT/ladder.txt" ladder; else RC[ladder]=127; fi

# ---- 5 bench ------------------------------------------------------------------------------------
bench() {
    local dir="$ROOT/build-gpu/models" L=${GATE_BENCH_LAYERS:-8} L8=${GATE_BENCH_LAYERS_8B:-6}
    mkdir -p "$dir"
    "$GATE" model synth --preset qwen3-30b-a3b --layers "$L" --quant Q4_K_M --fast-blocks \
        -o "$dir/a3b-L$L.gguf" || return 1
    "$GATE" bench "$dir/a3b-L$L.gguf" --backend cuda --prompt-tokens 512 --decode-tokens 64 \
        --runs 3 --warmup 1 || return 1
    echo "(30B-A3B shape with $L of 48 layers: decode tokens/s at 48 layers ~ measured * $L / 48,"
    echo " ignoring the LM head's share)"
    "$GATE" model synth --preset qwen3-8b --layers "$L8" --quant Q4_K_M --fast-blocks \
        -o "$dir/8b-L$L8.gguf" || return 1
    "$GATE" bench "$dir/8b-L$L8.gguf" --backend cuda --prompt-tokens 512 --decode-tokens 64 \
        --runs 3 --warmup 1
}
if [ -x "$GATE" ]; then stage bench 150 "$OUT/bench.txt" bench; else RC[bench]=127; fi

# ---- summary ------------------------------------------------------------------------------------
{
    printf '{"commit":"%s","elapsed_s":%d,"stages":{' "$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
        "$(( $(date +%s) - T0 ))"
    first=1
    for s in deps build selftest ladder bench; do
        [ $first = 1 ] || printf ','
        first=0
        printf '"%s":%s' "$s" "${RC[$s]:-null}"
    done
    printf '}}\n'
} > "$OUT/summary.json"
cat "$OUT/summary.json" | tee -a "$LOG"
for s in deps build selftest ladder bench; do
    [ "${RC[$s]:-1}" = 0 ] || { say "gpu-check: FAIL (stage $s exit ${RC[$s]:-none})"; exit 1; }
done
say "gpu-check: PASS"
