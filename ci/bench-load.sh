#!/usr/bin/env bash
# bench-load.sh — the thread pool on a busy machine (issue 27 section 0): tokens/s of the
# reference twin and of the `cpu` engine with 1 and 2 threads, idle and with BUSY busy loops
# running beside them, for one gate binary or two side by side (OLD and NEW, interleaved within
# each round so that both see the same background). Prints figures; judges nothing and is not
# run by CI (figures go to docs/bench.md).
#
# The busy loops are shell loops started by this script, so they share its session (and, with
# the kernel's autogroup scheduling, its CPU share) as `yes > /dev/null &` typed in the same
# terminal would. Each figure is `gate bench`'s median of RUNS timed runs (default mode:
# BACKEND.prefill, PROMPT prompt tokens then DECODE decode steps; the prefill and decode rates);
# the summary takes the median over ROUNDS rounds and the ratio 2 threads / 1 thread of those
# medians. A bench that does not finish in TIMEOUT seconds is shown as "timeout" (the old pool
# under load). The load average at the start and end of each round is printed: other work on the
# machine is not controlled here, so say what it was when quoting figures.
#
# Usage: ci/bench-load.sh   (environment: NEW=build/gate OLD=path/to/other/gate (optional)
#   MODELS_DIR=/dev/shm/gate-bench-load ROUNDS=3 BUSY=4 LOADS="0 4" RUNS=3 PROMPT=32 DECODE=32
#   TIMEOUT=300 CASES="ref:tiny-moe cpu:q06-q4km")
#   cases: ref:tiny-moe is the demo ladder's tiny-moe (Q4_K_M, seed 1) on the twin; cpu:q06-q4km
#   the Qwen3-0.6B shape at Q4_K_M (--fast-blocks) on the cpu engine; cpu:tiny-moe also works.
set -euo pipefail
cd "$(dirname "$0")/.."
NEW=${NEW:-build/gate}
OLD=${OLD:-}
MODELS_DIR=${MODELS_DIR:-/dev/shm/gate-bench-load}
ROUNDS=${ROUNDS:-3}
BUSY=${BUSY:-4}
LOADS=${LOADS:-"0 $BUSY"}
RUNS=${RUNS:-3}
PROMPT=${PROMPT:-32}
DECODE=${DECODE:-32}
TIMEOUT=${TIMEOUT:-300}
CASES=${CASES:-"ref:tiny-moe cpu:q06-q4km"}

die() {
    echo "bench-load.sh: $*" >&2
    exit 2
}
[ -x "$NEW" ] || die "no gate binary at '$NEW' (set NEW=)"
[ -z "$OLD" ] || [ -x "$OLD" ] || die "no gate binary at '$OLD' (OLD=)"
mkdir -p "$MODELS_DIR"
tmp=$(mktemp -d)
busy_pids=()
stop_busy() {
    for pid in "${busy_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${busy_pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    busy_pids=()
}
trap 'stop_busy; rm -rf "$tmp"' EXIT

model_file() {
    case "$1" in
    tiny-moe) echo "$MODELS_DIR/tiny-moe-q4km-s1.gguf" ;;
    q06-q4km) echo "$MODELS_DIR/qwen3-0.6b-q4km-fast.gguf" ;;
    *) die "unknown model '$1' (tiny-moe, q06-q4km)" ;;
    esac
}
make_model() {
    local f
    f=$(model_file "$1")
    [ -s "$f" ] && return 0
    case "$1" in
    tiny-moe) "$NEW" model synth --preset tiny-moe --quant Q4_K_M --seed 1 -o "$f" >/dev/null ;;
    q06-q4km)
        "$NEW" model synth --preset qwen3-0.6b --quant Q4_K_M --fast-blocks -o "$f" >/dev/null
        ;;
    esac
}
for c in $CASES; do
    make_model "${c#*:}"
done

bins="new"
[ -n "$OLD" ] && bins="old new"
bin_path() { if [ "$1" = old ]; then echo "$OLD"; else echo "$NEW"; fi; }

echo "== machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)," \
    "$(nproc) CPUs usable, autogroup $(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null ||
        echo '?'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== binaries: new=$NEW${OLD:+ old=$OLD}; $RUNS timed runs (1 warm-up) of $PROMPT prompt" \
    "+ $DECODE decode tokens; $ROUNDS rounds; loads: $LOADS busy loops"

# one bench: prints "prefill decode" tokens/s, or "timeout timeout"
bench_one() {
    local out
    if ! out=$(timeout "$TIMEOUT" "$1" bench "$2" --backend "$3" --threads "$4" --runs "$RUNS" \
        --warmup 1 --prompt-tokens "$PROMPT" --decode-tokens "$DECODE" 2>/dev/null); then
        echo "timeout timeout"
        return
    fi
    awk '$1 == "prefill" && $3 == "tokens/s" { p = $2 } $1 == "decode" && $3 == "tokens/s" { d = $2 }
         END { print (p == "" ? "error" : p), (d == "" ? "error" : d) }' <<<"$out"
}

results=$tmp/results.tsv # round load case bin threads prefill decode
for round in $(seq 1 "$ROUNDS"); do
    for load in $LOADS; do
        for ((i = 0; i < load; i++)); do
            (while :; do :; done) &
            busy_pids+=($!)
        done
        echo "-- round $round, $load busy loops, load average $(cut -d' ' -f1-3 /proc/loadavg)"
        for c in $CASES; do
            backend=${c%%:*} model=${c#*:}
            for threads in 1 2; do
                for b in $bins; do
                    read -r pf dc < <(bench_one "$(bin_path "$b")" "$(model_file "$model")" \
                        "$backend" "$threads")
                    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$load" "$c" "$b" \
                        "$threads" "$pf" "$dc" >>"$results"
                    printf '   %-14s %-3s %d thread(s): prefill %-8s decode %s\n' "$c" "$b" \
                        "$threads" "$pf" "$dc"
                done
            done
        done
        stop_busy
    done
done
echo "== done, load average $(cut -d' ' -f1-3 /proc/loadavg)"

# the summary: medians over rounds ("timeout" counts as 0 tokens/s; "error" is dropped)
echo
echo "median over $ROUNDS rounds, tokens/s (prefill / decode); ratio = 2 threads / 1 thread"
printf '%-14s %-5s %-4s %-20s %-20s %s\n' case loops bin "1 thread" "2 threads" \
    "ratio prefill / decode"
awk -F'\t' '
function median(key,   n, i, j, t, v) {
    n = split(vals[key], v, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) {
        t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
    if (n == 0) return -1
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
function add(key, x) { if (x == "error") return; if (x == "timeout") x = 0
    vals[key] = vals[key] (vals[key] == "" ? "" : " ") x }
{ k = $2 SUBSEP $3 SUBSEP $4; seen[k] = 1; add(k SUBSEP $5 SUBSEP "p", $6); add(k SUBSEP $5 SUBSEP "d", $7) }
function fmt(x) { return x < 0 ? "-" : sprintf("%.1f", x) }
function ratio(a, b) { return (a < 0 || b <= 0) ? "-" : sprintf("%.2f", a / b) }
END {
    for (k in seen) {
        split(k, f, SUBSEP)
        p1 = median(k SUBSEP 1 SUBSEP "p"); d1 = median(k SUBSEP 1 SUBSEP "d")
        p2 = median(k SUBSEP 2 SUBSEP "p"); d2 = median(k SUBSEP 2 SUBSEP "d")
        printf "%-14s %-5s %-4s %-20s %-20s %s / %s\n", f[2], f[1], f[3], fmt(p1) " / " fmt(d1),
            fmt(p2) " / " fmt(d2), ratio(p2, p1), ratio(d2, d1)
    }
}' "$results" | sort -k1,1 -k2,2n -k3,3r
