#!/usr/bin/env bash
# bench-cpu.sh — the `cpu` engine, the reference twin and llama.cpp side by side on the same
# files, the same thread count, in one run (issue 17; figures go to docs/bench.md). Prints
# figures; judges nothing and is not run by CI.
#
# For each model (synthesized with --fast-blocks: speed does not depend on weight values):
#   Qwen3-0.6B shape Q4_K_M and Q8_0, and the Qwen3-30B-A3B shape Q4_K_M with A3B_LAYERS of its
#   48 layers (every layer has the same shape, so per-layer costs scale by 48 / A3B_LAYERS; the
#   tied-free output matrix and the embedding are whole);
# it prints
#   - llama-bench (LLAMA_BENCH, a CPU-only build from source): pp64, pp512, tg32, median and
#     spread of RUNS repetitions. llama-bench's pp test is the prompt in one batch computing the
#     last position's logits only; its tg test decodes from an empty cache.
#   - gate bench --prompt-batch (P = 64 and 512): the prompt in one batched forward from an
#     empty cache computing the LAST position's logits only (backend_forward_last) — the same
#     work as llama-bench's ppP.
#   - gate bench --mode B.decode --prompt-tokens 1 --decode-tokens 32: decode tokens/s (one
#     prompt token, then 32 single-token forwards: llama-bench's tg32 from an almost empty cache).
#   - peak RSS of each command (/usr/bin/time -v; gate's decode run, and the largest of its
#     prompt-batch runs), and the memory-bandwidth ceiling: the streaming
#     read bandwidth of ci/membw.c (best of its runs, THREADS threads) divided by the weight bytes
#     a decode token reads (every tensor; the embedding only when it is also the output; routed
#     expert tensors x n_expert_used / n_expert), and the fraction of it each engine's decode
#     reaches. The KV cache is not counted (a few MB at these lengths).
#
# Usage: ci/bench-cpu.sh   (environment: GATE=build/gate LLAMA_BENCH=/tmp/llama.cpp/build/bin/
#   llama-bench MODELS_DIR=/dev/shm/gate-bench THREADS=2 RUNS=5 A3B_LAYERS=8
#   BACKENDS="cpu ref" MODELS="q06-q4km q06-q80 a3b-q4km" GATE_PROMPTS="64 512" SKIP_LLAMA=0;
#   GATE_PROMPTS="64" skips gate's 512-token prompt, the slowest figure)
set -euo pipefail
cd "$(dirname "$0")/.."
GATE=${GATE:-build/gate}
LLAMA_BENCH=${LLAMA_BENCH:-/tmp/llama.cpp/build/bin/llama-bench}
MODELS_DIR=${MODELS_DIR:-/dev/shm/gate-bench}
THREADS=${THREADS:-2}
RUNS=${RUNS:-5}
A3B_LAYERS=${A3B_LAYERS:-8}
BACKENDS=${BACKENDS:-"cpu ref"}
MODELS=${MODELS:-"q06-q4km q06-q80 a3b-q4km"}
SKIP_LLAMA=${SKIP_LLAMA:-0}
GATE_PROMPTS=${GATE_PROMPTS:-"64 512"}
TIME=/usr/bin/time

die() {
    echo "bench-cpu.sh: $*" >&2
    exit 2
}
[ -x "$GATE" ] || die "no gate binary at '$GATE' (set GATE=)"
[ -x "$TIME" ] || die "no $TIME (apt-get install time): peak RSS needs it"
if [ "$SKIP_LLAMA" = 0 ] && [ ! -x "$LLAMA_BENCH" ]; then
    die "no llama-bench at '$LLAMA_BENCH' (build llama.cpp CPU-only from source, or SKIP_LLAMA=1)"
fi
mkdir -p "$MODELS_DIR"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- the machine ---------------------------------------------------------------------------
cc -O2 -march=native -pthread -o "$tmp/membw" ci/membw.c
echo "== machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)," \
    "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== $("$GATE" --version 2>&1 | head -1) ($GATE), checkout $(git rev-parse --short HEAD)"
membw_out=$("$tmp/membw" 1024 7 1 "$THREADS" 2>/dev/null)
echo "$membw_out"
GBPS=$(echo "$membw_out" | tail -1 | sed -n 's/.*best_gbps=\([0-9.]*\).*/\1/p')

# ---- the models ----------------------------------------------------------------------------
model_file() {
    case "$1" in
    a3b-q4km) echo "$MODELS_DIR/a3b-l$A3B_LAYERS-q4km.gguf" ;;
    *) echo "$MODELS_DIR/$1.gguf" ;;
    esac
}
synth() {
    local name=$1 f
    f=$(model_file "$name")
    [ -f "$f" ] && return 0
    case "$name" in
    q06-q4km) "$GATE" model synth --preset qwen3-0.6b --quant Q4_K_M --fast-blocks --seed 1 -o "$f" ;;
    q06-q80) "$GATE" model synth --preset qwen3-0.6b --quant Q8_0 --fast-blocks --seed 1 -o "$f" ;;
    a3b-q4km)
        "$GATE" model synth --preset qwen3-30b-a3b --layers "$A3B_LAYERS" --quant Q4_K_M \
            --fast-blocks --seed 1 -o "$f"
        ;;
    *) die "unknown model '$name' (q06-q4km, q06-q80, a3b-q4km)" ;;
    esac >/dev/null 2>"$tmp/synth.err" || {
        cat "$tmp/synth.err" >&2
        die "synth of $name failed"
    }
}

# Weight bytes one decode token reads, from gate model inspect's tensor table.
bytes_per_token() {
    "$GATE" model inspect "$1" | awk '
        /expert_used_count/ { used = $2 } /expert_count/ && !/used/ { nexp = $2 }
        /^tensors:/ { t = 1; next } /^quant mix:/ { t = 0 }
        t && $1 ~ /\.weight$/ { b[$1] = $NF }
        END {
            tied = !("output.weight" in b); sum = 0
            for (n in b) {
                x = b[n]
                if (n == "token_embd.weight" && !tied) x = 0
                if (n ~ /_exps\.weight$/ && nexp > 0) x = x * used / nexp
                sum += x
            }
            printf "%.0f\n", sum
        }'
}

# Peak RSS in MB of the command that wrote /usr/bin/time -v output to $1.
rss_mb() { awk '/Maximum resident set size/ { printf "%.0f", $NF / 1024 }' "$1"; }

# "median (min – max)" of llama-bench's samples for one test, from its jsonl.
llama_fig() {
    python3 - "$1" "$2" "$3" <<'EOF'
import json, statistics, sys
path, n_prompt, n_gen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for line in open(path):
    r = json.loads(line)
    if r["n_prompt"] == n_prompt and r["n_gen"] == n_gen:
        s = r["samples_ts"]
        print("%.1f (%.1f - %.1f, n=%d)" % (statistics.median(s), min(s), max(s), len(s)))
        break
else:
    print("n/a")
EOF
}
llama_median() { echo "$1" | awk '{ print $1 }'; }

# ---- side by side --------------------------------------------------------------------------
for name in $MODELS; do
    synth "$name"
    f=$(model_file "$name")
    bpt=$(bytes_per_token "$f")
    ceil=$(awk -v g="$GBPS" -v b="$bpt" 'BEGIN { printf "%.1f", g * 1e9 / b }')
    echo
    echo "== $name: $f ($(stat -c %s "$f") bytes), $THREADS threads, $RUNS runs"
    echo "   decode reads $bpt weight bytes/token; ceiling at ${GBPS} GB/s: $ceil tokens/s"
    if [ "$SKIP_LLAMA" = 0 ]; then
        "$TIME" -v "$LLAMA_BENCH" -m "$f" -t "$THREADS" -p 64,512 -n 32 -r "$RUNS" -o jsonl \
            >"$tmp/llama.jsonl" 2>"$tmp/llama.time" || {
            tail -5 "$tmp/llama.time" >&2
            die "llama-bench failed on $f"
        }
        tg=$(llama_fig "$tmp/llama.jsonl" 0 32)
        printf '   %-9s pp64 %-28s pp512 %-28s tg32 %-28s rss %s MB, %s%% of ceiling\n' \
            llama.cpp "$(llama_fig "$tmp/llama.jsonl" 64 0)" "$(llama_fig "$tmp/llama.jsonl" 512 0)" \
            "$tg" "$(rss_mb "$tmp/llama.time")" \
            "$(awk -v t="$(llama_median "$tg")" -v c="$ceil" 'BEGIN { printf "%.0f", 100 * t / c }')"
    fi
    for be in $BACKENDS; do
        line="   $(printf '%-9s' "$be")"
        rss=0
        for P in $GATE_PROMPTS; do
            "$TIME" -v "$GATE" bench "$f" --backend "$be" --prompt-batch --prompt-tokens "$P" \
                --threads "$THREADS" --runs "$RUNS" --warmup 1 >"$tmp/g.out" 2>"$tmp/g.time" || {
                tail -5 "$tmp/g.time" >&2
                die "gate bench --backend $be failed on $f"
            }
            fig=$(sed -n 's/.*: \([0-9.]*\) tokens\/s median of \([0-9]*\) (min \([0-9.]*\), max \([0-9.]*\).*/\1 (\3 - \4, n=\2)/p' "$tmp/g.out")
            line="$line pp$P $(printf '%-27s' "$fig")"
            r=$(rss_mb "$tmp/g.time")
            [ "$r" -gt "$rss" ] && rss=$r
        done
        "$TIME" -v "$GATE" bench "$f" --backend "$be" --mode "$be.decode" --prompt-tokens 1 \
            --decode-tokens 32 --threads "$THREADS" --runs "$RUNS" --warmup 1 \
            >"$tmp/g.out" 2>"$tmp/g.time" || {
            tail -5 "$tmp/g.time" >&2
            die "gate bench --mode $be.decode failed on $f"
        }
        tg=$(sed -n 's/^ *decode *\([0-9.]*\) tokens\/s.*median of \([0-9]*\).*min \([0-9.]*\).*max \([0-9.]*\).*/\1 (\3 - \4, n=\2)/p' "$tmp/g.out")
        [ -n "$tg" ] || tg=$(grep -i decode "$tmp/g.out" | tail -1)
        printf '%s tg32 %-28s rss %s MB (decode) / %s MB (prompt-batch), %s%% of ceiling\n' \
            "$line" "$tg" "$(rss_mb "$tmp/g.time")" "$rss" \
            "$(awk -v t="$(llama_median "$tg")" -v c="$ceil" 'BEGIN { printf "%.0f", 100 * t / c }')"
    done
done
echo
echo "gate's pp figures, like llama-bench's, compute the last position's logits only."
echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
