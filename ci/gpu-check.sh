#!/usr/bin/env bash
# The GPU check: one script an (offline) NVIDIA GPU host runs from the repository root, in stages
# within one overall budget (GATE_GPU_BUDGET_S, default 540 s of command time), writing to $OUT
# (or the directory given as $1; at most 8 files):
#   gpu-check.log  every stage's commands and output      build.log    configure + build
#   selftest.txt   gate selftest, one process per kernel family, then end to end
#   bench.txt      gate bench --backend cuda on real-shape fast-blocks models (in /dev/shm)
#   ladder.txt     gate run ladders/gpu.yaml + gate release check
#   suite.txt      the whole Criterion suite of the CUDA build (ctest), with its counts and skips
#   receipts.db    the signed receipts (kept in scratch while the ladder runs; receipts.db.tar
#                  with the -wal / -shm files when the stage was killed: never more than 8 files)
#   summary.json   every stage in order: status, exit code, seconds, reason; rewritten after
#                  every stage, so a run cut short still says what finished
# Stages, in order (a failed stage does not stop the later ones, except preflight):
#   preflight  nvidia-smi lists a GPU; the driver supports the toolkit's CUDA version; the
#              toolkit's library folder holds libcudart.so.N and cuBLAS (libcublas.so.N); glibc is
#              at least what the carried .deb libraries need (.deb/MANIFEST); cmake, nvcc; the
#              tree has a commit identity (below). A failed preflight stops the check at once
#              (outside a dry run).
#   deps       unpack the .deb files carried in .deb/ (ci/fetch-debs.sh) into a fresh .deb/root
#              with dpkg -x (or plain ar + tar), rewrite the absolute symlinks inside it (zlib's
#              libz.so -> /lib/...) to relative ones, and point pkg-config at it; with no
#              pkg-config on the host, the carried pkgconf (.deb/bin/pkg-config, a wrapper) is put
#              on PATH
#   build      cmake -DGATE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${GATE_CUDA_ARCH:-90a}
#              -DGATE_WERROR=OFF (a newer host compiler's new warnings must not stop the one
#              build), target gate; its RUNPATH holds the toolkit's library folder (CMakeLists.txt)
#              and the carried prefix; then every library gate needs must load (ldd: no "not
#              found"), or the stage fails naming them
#   selftest.F gate selftest --kernels-only --family F, each family in its own process (one
#              sticky CUDA error cannot poison the rest), GATE_CUDA_DEBUG=1 (synchronize after
#              every launch, so the failing kernel is named); exit 3 = no device: a FAILURE
#   e2e        gate selftest --model <conformance models>: cuda.* parity, capability, device faults
#   bench      Qwen3-30B-A3B shape (128 experts, hidden 2048, $GATE_BENCH_LAYERS layers) and
#              Qwen3-8B shape ($GATE_BENCH_LAYERS_8B layers), Q4_K_M fast blocks, in /dev/shm;
#              30B-A3B old and new side by side: v1, then GEMV v2, + routing v2, + split
#              attention, + the decode graph (each run's settings in its bench line)
#   ladder     gate run ladders/gpu.yaml --host h200; gate release check
#   suite      the whole test suite once on the device (issue 28): the same build folder
#              reconfigured with -DGATE_TESTS=ON (Criterion carried: fetch-debs --with-criterion),
#              every target built, ctest with GATE_REQUIRE_GPU=1 and GATE_REQUIRE_ISA set from
#              /proc/cpuinfo (a device or ISA test that would skip fails), GATE_TEST_SHARED =
#              the carried ./shared; then ci/tap-summary.sh's counts and every remaining skip
# The carried libraries reach the loader only for gate, its test binaries and the ldd check
# (with_carried sets LD_LIBRARY_PATH on their command lines): git, cmake, the compilers and
# python run with the host's own libraries.
#
# Commit identity (R1): receipts from a build without a clean commit never count. The tree's
# commit is git's when git works and the tree is the top of its own repository, with "clean"
# meaning `git status --porcelain` succeeded with no output. When .git did not travel (or there is
# no git), .deb/IDENTITY (ci/identity.cmake) stands in: GATE_PREPARE_ONLY=1 writes it here from
# the clean commit (the commit, and each tracked file's git tree line and SHA-256); preflight and
# the build (ci/buildinfo.cmake) verify the tree against those hashes, so the binary records that
# commit, clean, only when every file is the commit's. With neither, preflight fails at once.
#
# Every stage runs as a re-invocation of this script (`timeout ... bash ci/gpu-check.sh --stage
# NAME`): timeout cannot run a shell function. Its timeout is its own limit clipped to what is
# left of the budget; a stage with less than 5 s left is skipped ("budget spent").
#
# GATE_GPU_SKIP=bench,suite: leave those stages out ("selftest" names every selftest.F); each is
# reported skipped, so the check cannot PASS with any stage left out.
#
# GATE_GPU_DRYRUN=1: the whole control flow on a CPU host (CI runs it: tests/test_gpucheck.c).
# Every stage starts; the ones that need a GPU fail with their reason; with GATE_BIN set the
# build stage uses that binary instead of compiling; the bench synthesizes the tiny-moe preset
# instead of the real shapes; the ladder runs in a temporary copy (nothing is written to the
# tree). Exit 0 only when every stage passed (never in a dry run on a CPU host).
#
# GATE_PREPARE_ONLY=1 (where apt and ../shared exist): fetch the .deb files (ci/fetch-debs.sh
# --with-criterion, for the suite stage) when
# .deb/ has none, copy ../shared/{conformance,tokenizers} into ./shared, write .deb/IDENTITY when
# the tree is its clean commit (else remove it and warn: receipts from a dirty tree never count),
# remove a local .deb/root (rebuilt there; it would only add to what is carried), say what to
# carry; stop (ci/README.md).
# GATE_DEB_DIR (default .deb): where the .deb files, MANIFEST, IDENTITY and the prefix live.
set -uo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$SELF")/.."
ROOT=$PWD

# ---- environment shared by the main script and the stage processes -------------------------------
DEB=${GATE_DEB_DIR:-$ROOT/.deb}
[ -d "$DEB" ] && DEB=$(cd "$DEB" && pwd)
export GATE_DEB_DIR="$DEB"
B=${B:-$ROOT/build-gpu}
ML=x86_64-linux-gnu
deps_env() {
    local P="$DEB/root"
    if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
        export PATH="/usr/local/cuda/bin:$PATH"
    fi
    GATE_LIBPATH=""
    if [ -d "$P/usr/lib/$ML" ]; then
        export PKG_CONFIG_SYSROOT_DIR="$P"
        export PKG_CONFIG_LIBDIR="$P/usr/lib/$ML/pkgconfig:$P/usr/share/pkgconfig"
        # R8: for gate only (gate_cmd), never exported: git, cmake and python keep the host's
        GATE_LIBPATH="$P/usr/lib/$ML:$P/lib/$ML"
        # R2: no pkg-config on the host: the carried pkgconf (its wrapper, written by st_deps)
        if ! command -v pkg-config >/dev/null && [ -x "$DEB/bin/pkg-config" ]; then
            export PATH="$DEB/bin:$PATH"
        fi
    fi
}

# a command with the carried libraries on its loader path (R8: only that process sees them)
with_carried() {
    if [ -n "${GATE_LIBPATH:-}" ]; then
        LD_LIBRARY_PATH="$GATE_LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
    else
        "$@"
    fi
}

# gate itself with them
gate_cmd() { with_carried "$GATE" "$@"; }

# The commit $DEB/IDENTITY names ("" when none), and its check of the tree (ci/identity.cmake:
# exit 0 when every file is the commit's; its "identity: ..." line on stdout)
identity_commit() { sed -n 's/^commit \([0-9a-f]*\)$/\1/p' "$DEB/IDENTITY" | head -n1; }
identity_check() {
    cmake -DMODE=check -DSRC="$ROOT" -DIDENTITY="$DEB/IDENTITY" -P "$ROOT/ci/identity.cmake" 2>&1
}

# R1: the tree's commit identity. Sets COMMIT (or "unknown"), CLEAN (true/false), ID_FROM (git,
# identity file, none) and ID_WHY (why not clean, or why there is no identity).
tree_identity() {
    COMMIT=unknown CLEAN=false ID_FROM=none ID_WHY=""
    local top head st out
    if top=$(git -C "$ROOT" rev-parse --show-toplevel 2>&1) &&
        [ "$(cd "$top" 2>/dev/null && pwd -P)" = "$(pwd -P)" ] &&
        head=$(git -C "$ROOT" rev-parse --verify 'HEAD^{commit}' 2>&1); then
        COMMIT=$head ID_FROM=git
        if ! st=$(git -C "$ROOT" status --porcelain 2>&1); then
            ID_WHY="git status failed (${st//$'\n'/ }): cannot tell whether the tree is clean"
        elif [ -n "$st" ]; then
            ID_WHY="the tree is not clean ($(printf '%s\n' "$st" | wc -l) git status entries)"
        else
            CLEAN=true
        fi
        # a stale .git (the device copy carried a snapshot older than the prepared commit): when
        # the identity file names another commit and the whole tree verifies against it, the
        # tree is that commit (ci/buildinfo.cmake makes the same choice for the binary)
        if [ "$CLEAN" != true ] && [ -f "$DEB/IDENTITY" ] && command -v cmake >/dev/null; then
            local idc
            idc=$(identity_commit)
            if [ -n "$idc" ] && [ "$idc" != "$head" ] && identity_check >/dev/null; then
                COMMIT=$idc CLEAN=true ID_WHY=""
                ID_FROM="identity file (git's HEAD ${head:0:12} is another commit: a stale .git)"
            fi
        fi
        return 0
    fi
    [ -n "${top:-}" ] && [ -z "${head:-}" ] && [ -d "$top" ] &&
        top="the tree is inside another repository ($top), not one of its own"
    if [ -f "$DEB/IDENTITY" ] && command -v cmake >/dev/null; then
        COMMIT=$(identity_commit)
        COMMIT=${COMMIT:-unknown} ID_FROM="identity file"
        if out=$(identity_check); then
            CLEAN=true
        else
            ID_WHY=$(printf '%s\n' "$out" | grep -m1 '^identity: ' || printf '%s' "${out//$'\n'/ }")
        fi
        [ "$COMMIT" != unknown ] || { ID_FROM=none; ID_WHY="$DEB/IDENTITY names no commit"; }
        return 0
    fi
    ID_WHY="git rev-parse HEAD failed (${top//$'\n'/ }) and there is no $DEB/IDENTITY: no commit identity (did .git travel, is git installed? GATE_PREPARE_ONLY=1 writes .deb/IDENTITY on the clean commit)"
}

# The CUDA toolkit's library folders, one per line: the -L folders nvcc itself links with (its
# --dryrun; a wrapper script named nvcc does not mislead it), then lib64, lib and targets/*/lib
# under its TOP (or under the folder above the real nvcc's bin/).
cuda_lib_dirs() {
    local nv top d dry
    nv=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    [ -e "$nv" ] || return 0
    dry=$("$nv" --dryrun -x cu -c /dev/null -o /dev/null 2>&1)
    top=$(printf '%s\n' "$dry" | sed -n 's/^#\$ TOP=//p' | head -n1)
    [ -n "$top" ] || top=$(dirname "$(dirname "$(readlink -f "$nv")")")
    {
        printf '%s\n' "$dry" | sed -n 's/^#\$ LIBRARIES=//p' | grep -o '"-L[^"]*"' | tr -d '"' |
            sed 's/^-L//' | grep -v '/stubs$'
        for d in "$top/lib64" "$top/lib" "$top"/targets/*/lib; do echo "$d"; done
    } | while IFS= read -r d; do [ -d "$d" ] && (cd "$d" && pwd -P); done | awk '!seen[$0]++'
    return 0
}

# ---- the stages (each runs in its own process: ci/gpu-check.sh --stage NAME [ARG]) -------------

# 1 when version $1 >= version $2 (dotted numbers).
version_ge() {
    [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$2" ]
}

st_preflight() {
    local bad=0 why=() nvcc nvcc_cuda
    nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    nvcc_cuda=$("$nvcc" --version 2>/dev/null | grep -o 'release [0-9.]*' | awk '{print $2}')
    if ! command -v nvidia-smi >/dev/null; then
        why+=("nvidia-smi not found: no NVIDIA driver on this host")
        bad=1
    else
        local gpus
        gpus=$(nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version \
            --format=csv,noheader 2>&1) || { why+=("nvidia-smi failed: ${gpus//$'\n'/ }"); bad=1; }
        echo "GPUs: ${gpus:-none}"
        [ -n "$gpus" ] || { why+=("nvidia-smi lists no GPU"); bad=1; }
        local drv_cuda
        drv_cuda=$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -n1 | awk '{print $3}')
        echo "driver supports CUDA ${drv_cuda:-?}; toolkit (nvcc) is CUDA ${nvcc_cuda:-?}"
        if [ -n "$drv_cuda" ] && [ -n "$nvcc_cuda" ] && ! version_ge "$drv_cuda" "$nvcc_cuda"; then
            why+=("the driver supports CUDA $drv_cuda but the toolkit is CUDA $nvcc_cuda")
            bad=1
        fi
    fi
    if [ -z "${GATE_BIN:-}" ] || [ "${GATE_GPU_DRYRUN:-0}" != 1 ]; then # the build needs them
        command -v cmake >/dev/null || { why+=("cmake not found"); bad=1; }
        command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
            { why+=("nvcc not found (neither on PATH nor /usr/local/cuda/bin)"); bad=1; }
    fi
    # R5: the runtime and cuBLAS of the toolkit that builds gate (its RUNPATH names that folder;
    # cuBLAS is opened from there on first use)
    if [ -n "$nvcc_cuda" ]; then
        local major=${nvcc_cuda%%.*} lib dirs found
        dirs=$(cuda_lib_dirs)
        for lib in libcudart.so.$major libcublas.so.$major libcublasLt.so.$major; do
            found=""
            while IFS= read -r d; do
                [ -n "$d" ] && [ -e "$d/$lib" ] && found="$d/$lib" && break
            done <<<"$dirs"
            if [ -n "$found" ]; then
                echo "found $found"
            else
                why+=("$lib (CUDA $nvcc_cuda's $([ "${lib#libcublas}" = "$lib" ] && echo runtime || echo cuBLAS)) not found next to $nvcc (looked in: ${dirs//$'\n'/ })")
                bad=1
            fi
        done
    fi
    local glibc need
    glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
    need=$(sed -n 's/^glibc_min=//p' "$ROOT/.deb/MANIFEST" 2>/dev/null)
    echo "glibc ${glibc:-?}; the carried packages need ${need:-(no .deb/MANIFEST: not checked)}"
    if [ -n "$need" ] && [ -n "$glibc" ] && ! version_ge "$glibc" "$need"; then
        why+=("glibc $glibc is older than $need, which the carried .deb libraries need")
        bad=1
    fi
    # R1: the build records this commit; without one every receipt is dirty and useless
    tree_identity
    if [ "$ID_FROM" = none ]; then
        why+=("$ID_WHY")
        bad=1
    elif [ "$ID_FROM" = git ] && [ "${ID_WHY#git status failed}" != "$ID_WHY" ]; then
        why+=("$ID_WHY")
        bad=1
    else
        echo "commit $COMMIT (from $ID_FROM)"
        [ "$CLEAN" = true ] ||
            echo "warning: $ID_WHY: receipts from this run will not count for a release"
    fi
    if [ $bad = 1 ]; then
        local IFS=';'
        echo "preflight failed: ${why[*]}"
        return 1
    fi
    echo "preflight ok"
}

st_deps() {
    local prefix="$DEB/root" n=0 d
    for d in "$DEB"/*.deb; do
        [ -e "$d" ] || break
        [ $n = 0 ] && rm -rf "$prefix" "${DEB:?}/bin" # a fresh prefix: nothing left from another set
        mkdir -p "$prefix"
        if command -v dpkg >/dev/null; then
            dpkg -x "$d" "$prefix" || { echo "cannot unpack $d"; return 1; }
        else # ar + tar: a .deb is an ar archive holding data.tar.*
            (tmp=$(mktemp -d) && cd "$tmp" && ar x "$d" && tar -xf data.tar.* -C "$prefix" &&
                rm -rf "$tmp") || { echo "cannot unpack $d"; return 1; }
        fi
        n=$((n + 1))
    done
    [ $n = 0 ] || relink_prefix "$prefix" || return 1
    if [ -x "$prefix/usr/bin/pkgconf" ]; then # R2: the carried pkgconf, with its own library
        mkdir -p "$DEB/bin"
        cat >"$DEB/bin/pkg-config" <<'WRAP'
#!/bin/sh
# written by ci/gpu-check.sh: the carried pkgconf, loading its libpkgconf from the carried prefix
P=$(cd "$(dirname "$0")/../root" && pwd)
LD_LIBRARY_PATH="$P/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$P/usr/bin/pkgconf" "$@"
WRAP
        chmod +x "$DEB/bin/pkg-config"
    fi
    deps_env
    command -v pkg-config >/dev/null ||
        { echo "no pkg-config: neither on the host nor carried (pkgconf in .deb/)"; return 1; }
    local missing=() p
    for p in yaml-0.1 sqlite3 libsodium libpcre2-8 libutf8proc jansson; do
        pkg-config --exists "$p" 2>/dev/null || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "missing libraries: ${missing[*]} (run ci/fetch-debs.sh where apt works and carry .deb/)"
        return 1
    fi
    if [ $n = 0 ]; then
        echo "no .deb files in .deb/: the system's libraries are used"
    else
        echo "unpacked $n packages into $prefix; pkg-config is $(command -v pkg-config)"
    fi
}

# R3: a symlink in the prefix with an absolute target (zlib1g-dev's usr/lib/.../libz.so ->
# /lib/x86_64-linux-gnu/libz.so.1.2.13) would resolve on the host, where the file may be absent
# or another version: point it at the same path inside the prefix, relatively.
relink_prefix() {
    local prefix=$1 l t n=0 dangling=()
    while IFS= read -r -d '' l; do
        t=$(readlink "$l")
        case $t in /*) ;; *) continue ;; esac
        ln -sfn "$(realpath -m -s --relative-to="$(dirname "$l")" "$prefix$t")" "$l" ||
            { echo "cannot rewrite the symlink $l"; return 1; }
        n=$((n + 1))
        [ -e "$l" ] || dangling+=("${l#"$prefix"}")
    done < <(find "$prefix" -type l -print0)
    echo "rewrote $n absolute symlinks in $prefix to relative ones"
    [ ${#dangling[@]} = 0 ] ||
        echo "warning: these point at files no carried package holds: ${dangling[*]}"
}

st_build() {
    local args=(-S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGATE_CUDA=ON
        -DCMAKE_CUDA_ARCHITECTURES="${GATE_CUDA_ARCH:-90a}" -DGATE_TESTS=OFF -DGATE_WERROR=OFF
        -DGATE_BUILD_IDENTITY="$DEB/IDENTITY")
    command -v ninja >/dev/null && args+=(-G Ninja)
    [ -d "$DEB/root/usr" ] && command -v pkg-config >/dev/null &&
        args+=(-DPKG_CONFIG_EXECUTABLE="$(command -v pkg-config)" -DCMAKE_PREFIX_PATH="$DEB/root/usr")
    if [ "${GATE_GPU_DRYRUN:-0}" = 1 ] && [ -n "${GATE_BIN:-}" ]; then
        [ -x "$GATE_BIN" ] || { echo "dry run: GATE_BIN=$GATE_BIN is not executable"; return 1; }
        echo "dry run: would configure with: cmake ${args[*]}"
        check_loads "$GATE_BIN" || return 1
        echo "dry run: not building; using GATE_BIN=$GATE_BIN"
        return 0
    fi
    cmake "${args[@]}" || { echo "configure failed"; return 1; }
    cmake --build "$B" -j "$(nproc)" --target gate || { echo "build failed"; return 1; }
    check_loads "$B/gate" || return 1
    echo "built $B/gate"
}

# R5: every shared library the binary needs resolves (its RUNPATH, the carried prefix on
# gate's own loader path, the host's loader cache), else a failure naming them
check_loads() {
    local out miss
    command -v ldd >/dev/null || { echo "warning: no ldd: the libraries of $1 are not checked"; return 0; }
    out=$(with_carried ldd "$1" 2>&1) || return 0 # not a dynamic executable (a script standing in for gate)
    miss=$(printf '%s\n' "$out" | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
    if [ -n "$miss" ]; then
        echo "$1 cannot start: ${miss% } not found (RUNPATH: $(readelf -d "$1" 2>/dev/null |
            sed -n 's/.*R.*PATH.*\[\(.*\)\]/\1/p' | head -n1))"
        return 1
    fi
    echo "every library of $1 loads"
}

st_selftest() { # $1 = kernel family
    GATE_CUDA_DEBUG=1 gate_cmd selftest --kernels-only --family "$1"
}

st_e2e() {
    local models=() m
    for m in "$GATE_SHARED"/conformance/*/model.gguf; do [ -e "$m" ] && models+=(--model "$m"); done
    GATE_CUDA_DEBUG=1 gate_cmd selftest "${models[@]}"
}

st_bench() {
    local dir=$SCRATCH/models L=${GATE_BENCH_LAYERS:-8} L8=${GATE_BENCH_LAYERS_8B:-6}
    mkdir -p "$dir"
    if [ "${GATE_GPU_DRYRUN:-0}" = 1 ]; then # the control flow, not the real shapes
        gate_cmd model synth --preset tiny-moe --quant Q4_K_M --fast-blocks -o "$dir/tiny.gguf" ||
            return 1
        gate_cmd bench "$dir/tiny.gguf" --backend cuda --prompt-tokens 16 --decode-tokens 4 \
            --runs 3 --warmup 1
        return
    fi
    gate_cmd model synth --preset qwen3-30b-a3b --layers "$L" --quant Q4_K_M --fast-blocks \
        -o "$dir/a3b-L$L.gguf" || return 1
    gate_cmd bench "$dir/a3b-L$L.gguf" --backend cuda --prompt-tokens 512 --decode-tokens 64 \
        --runs 3 --warmup 1 || return 1
    # the same with GEMV v2 (issue 25 §3): old and new side by side, decode tokens/s compared
    gate_cmd bench "$dir/a3b-L$L.gguf" --backend cuda --gemv v2 --prompt-tokens 512 \
        --decode-tokens 64 --runs 3 --warmup 1 || return 1
    # and routing v2 (one warp per token) on top of GEMV v2
    gate_cmd bench "$dir/a3b-L$L.gguf" --backend cuda --gemv v2 --route v2 --prompt-tokens 512 \
        --decode-tokens 64 --runs 3 --warmup 1 || return 1
    # and split-KV attention, then the decode step as one CUDA graph (attn v1 vs split, graph off
    # vs on: each against the line before it)
    gate_cmd bench "$dir/a3b-L$L.gguf" --backend cuda --gemv v2 --route v2 --attn split \
        --prompt-tokens 512 --decode-tokens 64 --runs 3 --warmup 1 || return 1
    gate_cmd bench "$dir/a3b-L$L.gguf" --backend cuda --gemv v2 --route v2 --attn split \
        --graph on --prompt-tokens 512 --decode-tokens 64 --runs 3 --warmup 1 || return 1
    echo "(30B-A3B shape with $L of 48 layers: see docs/performance.md for the extrapolation)"
    rm -f "$dir/a3b-L$L.gguf"
    gate_cmd model synth --preset qwen3-8b --layers "$L8" --quant Q4_K_M --fast-blocks \
        -o "$dir/8b-L$L8.gguf" || return 1
    gate_cmd bench "$dir/8b-L$L8.gguf" --backend cuda --prompt-tokens 512 --decode-tokens 64 \
        --runs 3 --warmup 1
}

st_ladder() {
    local lad="$ROOT/ladders" keydir="$ROOT/build-gpu/keys"
    if [ "${GATE_GPU_DRYRUN:-0}" = 1 ]; then # a private copy: nothing is written to the tree
        lad="$SCRATCH/ladders"
        keydir="$SCRATCH/keys"
        mkdir -p "$lad"
        cp "$ROOT/ladders/gpu.yaml" "$ROOT/ladders/demo-goldens.json" "$lad/" || return 1
        ln -sfn "$GATE_SHARED" "$SCRATCH/shared"
    fi
    local key="$keydir/h200.key"
    mkdir -p "$keydir"
    rm -f "$key" "$lad/gpu.pub"
    gate_cmd key gen --host h200 -o "$key" --pub "$lad/gpu.pub" || return 1
    # R7: the DB lives in scratch (its -wal / -shm files too, should the stage be killed); the
    # driver brings it back as one file when the check ends (save_db)
    gate_cmd run "$lad/gpu.yaml" --host h200 --key "$key" --db "$SCRATCH/receipts.db" 2>&1 |
        tee "$SCRATCH/run.out"
    local run_rc=${PIPESTATUS[0]} rel_rc=none
    if [ -e "$SCRATCH/receipts.db" ]; then
        gate_cmd release check "$lad/gpu.yaml" --db "$SCRATCH/receipts.db"
        rel_rc=$?
    fi
    echo "gate run exit $run_rc, gate release check exit $rel_rc ($([ "$run_rc" = 0 ] ||
        grep -v '^[[:space:]]*$' "$SCRATCH/run.out" | tail -n1))"
    [ "$run_rc" = 0 ] && [ "$rel_rc" = 0 ]
}

# The whole suite once on the device (issue 28: "run the whole suite once in the GPU check when a
# device is lent"). The build folder the build stage made gains the tests (the CUDA objects are
# not rebuilt); a skip for want of the device or of an instruction set the CPU lists fails.
st_suite() {
    local require=(GATE_REQUIRE_GPU=1) isa=() flags jobs
    flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
    has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }
    has avx2 fma f16c && isa+=(avx2)
    has avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni && isa+=(avx512)
    require+=("GATE_REQUIRE_ISA=$(IFS=,; echo "${isa[*]:-}")")
    [ "$CLEAN" = true ] && require+=(GATE_REQUIRE_CLEAN_TREE=1)
    jobs=$(nproc 2>/dev/null || echo 2)
    pkg-config --exists criterion 2>/dev/null ||
        { echo "no Criterion: prepare with GATE_PREPARE_ONLY=1 (ci/fetch-debs.sh --with-criterion) and carry .deb/"; return 1; }
    if [ "${GATE_GPU_DRYRUN:-0}" = 1 ]; then
        echo "dry run: would reconfigure $B with -DGATE_TESTS=ON -DGATE_TEST_SHARED=$GATE_SHARED, build every target, and run: env ${require[*]} ctest -j $jobs"
        echo "dry run: the suite is not built: no CUDA device (a dry run hides it)"
        return 3
    fi
    [ -f "$B/CMakeCache.txt" ] || { echo "no configured build in $B: the build stage did not run"; return 1; }
    cmake -S "$ROOT" -B "$B" -DGATE_TESTS=ON -DGATE_TEST_SHARED="$GATE_SHARED" >/dev/null ||
        { echo "configure with the tests failed"; return 1; }
    cmake --build "$B" -j "$jobs" || { echo "building the tests failed"; return 1; }
    mkdir -p "$B/test-reports"
    rm -f "$B"/test-reports/*.tap
    echo "env ${require[*]} ctest -j $jobs"
    # the test binaries link Criterion's carried closure (libgit2, ...), which their RUNPATH does
    # not reach: the carried prefix is on the loader path for the suite only
    local rc=0
    (cd "$B" && with_carried env "${require[@]}" ctest --output-on-failure -j "$jobs") || rc=$?
    "$ROOT/ci/tap-summary.sh" "$B" suite
    # the first device run's unexplained F32 NaN in test_cpu (docs/kernels.md): when it fails
    # again, rerun it with glibc's AVX-512 (EVEX) string functions off; a pass then points at the
    # host's register state, not at gate's kernels
    if [ -f "$B/test-reports/test_cpu.tap" ] && grep -q '^not ok' "$B/test-reports/test_cpu.tap"; then
        echo "test_cpu failed: rerun with GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW"
        (cd "$B" && with_carried env GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW \
            GATE_BIN="$B/gate" timeout 120 ./test_cpu 2>&1 | grep -E '^\[(FAIL|----)\]|Synthesis' | head -40) || true
    fi
    echo "ctest exit $rc"
    return $rc
}

if [ "${1:-}" = --stage ]; then
    deps_env
    [ "$2" = suite ] && tree_identity >/dev/null
    "st_$2" "${@:3}"
    exit $?
fi

# ---- the driver ---------------------------------------------------------------------------------
OUT="${1:-${OUT:-$ROOT/out/gpu-check}}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/gpu-check.log"
: >"$LOG"
# NOW = the epoch second (date +%s without a process: the driver asks after every stage)
now() { printf -v NOW '%(%s)T' -1; }
now
T0=$NOW
BUDGET=${GATE_GPU_BUDGET_S:-540}
DRY=${GATE_GPU_DRYRUN:-0}
say() {
    local line
    now
    line="[$((NOW - T0))s] $*"
    printf '%s\n' "$line"
    printf '%s\n' "$line" >>"$LOG"
}

if [ -d ../shared/conformance ] && [ ! -d shared/conformance ] && [ "$DRY" != 1 ]; then
    mkdir -p shared
    cp -r ../shared/conformance ../shared/tokenizers shared/ 2>>"$LOG"
fi
if [ "${GATE_PREPARE_ONLY:-0}" = 1 ]; then
    if ! ls "$DEB"/*.deb >/dev/null 2>&1; then
        ci/fetch-debs.sh --with-criterion 2>&1 | tee -a "$LOG" ||
            { say "prepare: ci/fetch-debs.sh failed"; exit 1; }
    fi
    [ -d shared/conformance ] || { say "prepare: no ./shared/conformance (is ../shared there?)"; exit 1; }
    rm -rf "${DEB:?}/root" "${DEB:?}/bin" # unpacked again on the GPU host
    if idw=$(cmake -DMODE=write -DSRC="$ROOT" -DIDENTITY="$DEB/IDENTITY" -P ci/identity.cmake 2>&1); then
        say "prepare: $(printf '%s\n' "$idw" | grep -m1 '^identity: ')"
    else
        say "prepare: WARNING: no build identity ($(printf '%s\n' "$idw" | grep -m1 '^identity: ' || echo "$idw")): commit, or the receipts will not count unless .git travels"
    fi
    say "prepared: ./shared ($(du -sh shared | cut -f1)) and .deb/ ($(du -sh "$DEB" | cut -f1): $(ls "$DEB"/*.deb | wc -l) packages, $(head -n1 "$DEB/MANIFEST" 2>/dev/null)$([ -f "$DEB/IDENTITY" ] && echo ", IDENTITY")); carry [\".deb\", \"shared\"] and run ci/gpu-check.sh \"\$OUT\" on the GPU host"
    exit 0
fi
# R6: scratch (the bench models, ~3.4 GB, and the receipts DB) in shared memory only when it has
# room: GATE_SHM_DIR (default /dev/shm) needs GATE_SHM_NEED_MB free (default 4096), else disk
SHM_DIR=${GATE_SHM_DIR:-/dev/shm}
SHM_NEED_MB=${GATE_SHM_NEED_MB:-4096}
shm_free_mb=$(df -Pm "$SHM_DIR" 2>/dev/null | awk 'NR == 2 {print $4}')
SCRATCH=""
if [ -n "$shm_free_mb" ] && [ "$shm_free_mb" -ge "$SHM_NEED_MB" ]; then
    SCRATCH=$(mktemp -d "$SHM_DIR/gate-gpu-check.XXXXXX" 2>/dev/null)
fi
if [ -z "$SCRATCH" ]; then
    SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/gate-gpu-check.XXXXXX")
    say "scratch on disk ($SCRATCH): $SHM_DIR has ${shm_free_mb:-unknown} MB free, the check wants $SHM_NEED_MB"
else
    say "scratch in $SHM_DIR ($SCRATCH, $shm_free_mb MB free)"
fi
trap 'rm -rf "$SCRATCH"' EXIT
B="$ROOT/build-gpu"
GATE="$B/gate"
[ "$DRY" = 1 ] && [ -n "${GATE_BIN:-}" ] && GATE=$GATE_BIN
[ "$DRY" = 1 ] && [ -z "${GATE_SHARED:-}" ] && [ -d ../shared/conformance ] && GATE_SHARED=$(cd ../shared && pwd)
export GATE_SHARED="${GATE_SHARED:-$ROOT/shared}"
# on the GPU host a test or check that would skip for lack of a device must fail instead
export GATE_REQUIRE_GPU=1
export ROOT OUT SCRATCH B GATE GATE_GPU_DRYRUN="$DRY"

# The kernel families of oracles/selftest.c (selftest_kernels' FAMILY rows; the dry-run test
# checks that this list and that table agree).
FAMILIES=(gemv gemv_experts gemv_swiglu gemv_v2 gemv_v2_experts gemv_v2_swiglu gemm embed argmax
    rmsnorm qk_norm_rope attention attention_split attention_graph route route_v2 moe_sum)
# name:limit_s:output file (bench: its five 30B-A3B lines took ~22 s each on the H200 and the
# 8B shape ~15 s a run, past the 150 s it had on 2026-12-04)
PLAN=("preflight:20:gpu-check.log" "deps:60:build.log" "build:240:build.log")
for f in "${FAMILIES[@]}"; do PLAN+=("selftest.$f:60:selftest.txt"); done
PLAN+=("e2e:150:selftest.txt" "bench:240:bench.txt" "ladder:200:ladder.txt" "suite:240:suite.txt")

N=${#PLAN[@]}
S_STATUS=() S_RC=() S_SEC=() S_REASON=()
for ((i = 0; i < N; i++)); do S_STATUS[i]=pending S_RC[i]=null S_SEC[i]=0 S_REASON[i]=""; done

# JS = $1 as a JSON string: control characters dropped, at most 300 bytes (as tr -d '\000-\037'
# | cut -c1-300 did, without a process: write_summary runs it for every stage after every stage)
JSON_CTL=$'\001\002\003\004\005\006\007\010\011\012\013\014\015\016\017\020\021\022\023\024\025\026\027\030\031\032\033\034\035\036\037'
json_str() {
    local LC_ALL=C s=$1
    s=${s//[$JSON_CTL]/}
    s=${s:0:300}
    s=${s//\\/\\\\}
    JS="\"${s//\"/\\\"}\""
}

write_summary() { # $1 = result (running, PASS, FAIL)
    local tmp="$OUT/.summary.json.tmp" i dry=false
    [ "$DRY" = 1 ] && dry=true
    now
    json_str "$COMMIT"
    {
        printf '{"commit":%s,"tree_clean":%s,"dry_run":%s,"budget_s":%d,"elapsed_s":%d,' \
            "$JS" "$CLEAN" "$dry" "$BUDGET" "$((NOW - T0))"
        printf '"result":"%s","stages":[' "$1"
        for ((i = 0; i < N; i++)); do
            [ $i = 0 ] || printf ','
            json_str "${S_REASON[i]}"
            printf '{"name":"%s","status":"%s","rc":%s,"seconds":%d,"reason":%s}' \
                "${PLAN[i]%%:*}" "${S_STATUS[i]}" "${S_RC[i]}" "${S_SEC[i]}" "$JS"
        done
        printf ']}\n'
    } >"$tmp" && mv -f "$tmp" "$OUT/summary.json"
}

# GATE_GPU_SKIP: stages to leave out, comma-separated names ("selftest" = every selftest.F), for a
# device lease too short for all of them; a stage left out is skipped, so the check is a FAIL
skip_named() {
    local n
    IFS=, read -ra SKIPS <<<"${GATE_GPU_SKIP:-}"
    for n in "${SKIPS[@]}"; do
        [ "$n" = "$1" ] || [ "$n" = "${1%%.*}" ] && return 0
    done
    return 1
}

# clean only when git answered, and answered nothing, or the identity file verified (R1)
tree_identity
stop_early=""
for ((i = 0; i < N; i++)); do
    IFS=: read -r name limit file <<<"${PLAN[i]}"
    if [ -n "$stop_early" ]; then
        S_STATUS[i]=skipped S_REASON[i]="not run: $stop_early"
        continue
    fi
    if skip_named "$name"; then
        S_STATUS[i]=skipped S_REASON[i]="not run: GATE_GPU_SKIP names it"
        say "== stage $name skipped: GATE_GPU_SKIP"
        write_summary running
        continue
    fi
    now
    left=$((BUDGET - (NOW - T0)))
    if [ $left -lt 5 ]; then
        S_STATUS[i]=skipped S_REASON[i]="not run: the ${BUDGET}s budget is spent"
        say "== stage $name skipped: budget spent"
        write_summary running
        continue
    fi
    t=$((limit < left ? limit : left))
    case $name in
    selftest.*) args=(selftest "${name#selftest.}") ;;
    *) args=("$name") ;;
    esac
    say "== stage $name (timeout ${t}s of ${left}s left)"
    part="$SCRATCH/stage.out"
    now
    s0=$NOW
    timeout --kill-after=10 "$t" bash "$SELF" --stage "${args[@]}" >"$part" 2>&1
    rc=$?
    [ "$file" = gpu-check.log ] || cat "$part" >>"$OUT/$file"
    cat "$part" >>"$LOG"
    now
    S_SEC[i]=$((NOW - s0)) S_RC[i]=$rc
    last=$(grep -v '^[[:space:]]*$' "$part" | tail -n1)
    case $rc in
    0) S_STATUS[i]=pass S_REASON[i]="$last" ;;
    124 | 137) S_STATUS[i]=timeout S_REASON[i]="timed out after ${t}s; last output: $last" ;;
    *) S_STATUS[i]=fail S_REASON[i]="exit $rc: $last" ;;
    esac
    # selftest prints its reason on the first line when it skips; prefer that line
    if [ $rc = 3 ] && grep -q 'SKIPPED' "$part"; then
        S_REASON[i]="exit 3 (no usable CUDA device: a failure on a GPU host): $(grep -m1 SKIPPED "$part")"
    fi
    say "== stage $name exit $rc (${S_SEC[i]}s)"
    if [ "$name" = preflight ] && [ $rc != 0 ] && [ "$DRY" != 1 ]; then
        stop_early="preflight failed"
    fi
    write_summary running
done

# R7: the receipts come back as one file: receipts.db when SQLite closed it cleanly (no WAL
# left), else receipts.db.tar holding the DB with its -wal / -shm (a killed stage), so $OUT holds
# at most the 8 files named at the top
save_db() {
    local db="$SCRATCH/receipts.db" f extra=()
    [ -e "$db" ] || return 0
    for f in "$db-wal" "$db-shm" "$db-journal"; do [ -e "$f" ] && extra+=("$(basename "$f")"); done
    if [ ${#extra[@]} = 0 ]; then
        cp "$db" "$OUT/receipts.db" && say "receipts: $OUT/receipts.db"
    else
        tar -C "$SCRATCH" -cf "$OUT/receipts.db.tar" receipts.db "${extra[@]}" &&
            say "receipts: $OUT/receipts.db.tar (the DB with ${extra[*]}: a stage was cut short)"
    fi
}
save_db

result=PASS
for ((i = 0; i < N; i++)); do [ "${S_STATUS[i]}" = pass ] || result=FAIL; done
write_summary $result
cat "$OUT/summary.json" >>"$LOG"
for ((i = 0; i < N; i++)); do
    [ "${S_STATUS[i]}" = pass ] || say "gpu-check: ${PLAN[i]%%:*}: ${S_STATUS[i]}: ${S_REASON[i]}"
done
say "gpu-check: $result"
[ $result = PASS ]
