#!/usr/bin/env bash
# ci/mutants.sh — mutation testing of gate (issue 22 §1, issue 28): plant one realistic bug at a
# time from the catalogue ci/mutants/*.patch into a clean commit, build it, and see whether gate
# stops it. Engine mutants (Kind: ladder) run a ladder through `gate run`, then `gate release
# check`; a mutant is KILLED when a systematic gate (capability, parity, falsify, consistency,
# anchor, or any gate that is not golden / throughput) FAILs or ERRORs on a cell, "caught by luck"
# when only the golden gate failed, SURVIVED otherwise. Judging-code mutants (Kind: tests: oracles/,
# harness/release.c, receipts/) run the Criterion suite; KILLED names the first test binary that
# failed. CUDA mutants (Kind: cuda) are compiled for sm_90a only: "not run: no device". A mutant
# whose header says `Requires: avx512` plants its bug in code only an AVX-512 VNNI host runs
# (engine/cpu_dot.c's CPU_ISA_AVX512: avx512f, bw, vl, vnni); on another host it is NOT RUN, said
# so, and neither built nor counted (a host that never executes the bug cannot kill it).
#
# How a mutant is run (docs/gates.md, "Mutation testing"):
#   1. a detached git worktree of the base commit in WORK/src (reused across mutants: a checkout
#      rewrites only the files a patch touched, so the build below stays incremental);
#   2. `git apply` the patch and commit it there, so the mutant's build is clean at its own commit
#      (the release check counts only receipts of a clean build) — a patch that does not apply,
#      or a mutant that does not compile, is a catalogue bug and is reported as such;
#   3. one persistent build folder per kind (WORK/build: CPU-only; WORK/build-cuda: GATE_CUDA=ON,
#      sm_90a), through ccache when it is installed;
#   4. a fresh key and receipts database per mutant (WORK/run/NAME/), the ladder's `file:*.pub`
#      trust files written next to the ladder in the worktree (git-ignored);
#   5. `gate run LADDER --host HOST --only CELL --json` cell by cell (prefill cells first, then
#      decode, MoE models first; the first cell a systematic gate fails ends the mutant's run
#      unless --all-cells), then `gate release check LADDER --json`; the verdicts of every gate of
#      every cell that ran are in WORK/run/NAME/run.json.
# Before the mutants, the base itself runs the same way (the control): if any systematic or golden
# gate fails on the unmutated build, every "kill" would be noise, and the script stops.
#
# Usage: ci/mutants.sh [options] [MUTANT...]     (MUTANT: a catalogue name, without .patch)
#   --base REV       the commit to mutate (default HEAD of this checkout)
#   --ladder FILE    the ladder, relative to the repository (default ladders/demo.yaml)
#   --host ID        the ladder host to run (default local)
#   --only PATTERN   cells to run for ladder mutants (default: each mutant's Cells: header, else
#                    '*/cpu.*'); '*' runs every cell
#   --work DIR       scratch folder (default build-mutants/, git-ignored)
#   --kind K         only mutants of kind K (ladder, tests or cuda)
#   --sample         the CI sample: the mutants whose header says `Sample: yes`, on the one-cell
#                    ladder ladders/mutants-sample.yaml, no control; exit 1 unless every one is killed
#   --hinted-only    tests mutants: build and run only the binaries of their Tests: header (a
#                    survivor then says so: it passed those, the rest of the suite did not run)
#   --no-control     skip the control run of the base
#   --all-cells      run every matching cell of a ladder mutant (default: stop at the first cell
#                    whose systematic gate fails; prefill cells first, then decode, MoE first)
#   --check          only check that every patch applies to the base (git apply --check)
#   --list           list the catalogue and exit
#   --out FILE       also write the result table as TSV to FILE
# Exit: 0 when the run completed (survivors are results, not errors; --sample: every mutant
# killed), 1 when a mutant of the sample survived or the control failed, 2 for usage errors and
# catalogue bugs (a patch that does not apply or does not build).
# Be considerate on a shared machine: everything runs under `nice -n 10`.
set -euo pipefail
{ # the whole script is one compound command: bash reads it all before running it, so an edit
  # of this file (a rebase) during a long run does not change the running script

repo=$(cd "$(dirname "$0")/.." && pwd)
cat_dir="$repo/ci/mutants"
base=HEAD
ladder=ladders/demo.yaml
host=local
only=""
work="$repo/build-mutants"
kind_filter=""
sample=0
control=1
check_only=0
list_only=0
all_cells=0
hinted_only=0
out=""
names=()

die() {
    echo "ci/mutants.sh: $*" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
    --base) base=${2:?--base needs a revision}; shift 2 ;;
    --ladder) ladder=${2:?--ladder needs a file}; shift 2 ;;
    --host) host=${2:?--host needs an id}; shift 2 ;;
    --only) only=${2:?--only needs a pattern}; shift 2 ;;
    --work) work=${2:?--work needs a folder}; shift 2 ;;
    --kind) kind_filter=${2:?--kind needs ladder, tests or cuda}; shift 2 ;;
    --sample) sample=1; shift ;;
    --no-control) control=0; shift ;;
    --all-cells) all_cells=1; shift ;;
    --hinted-only) hinted_only=1; shift ;;
    --check) check_only=1; shift ;;
    --list) list_only=1; shift ;;
    --out) out=${2:?--out needs a file}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) names+=("$1"); shift ;;
    esac
done

# header FIELD FILE: the value of "Field: value" in the patch's header (the lines before the diff)
header() {
    sed -n '/^diff --git /q; s/^'"$1"': *//p' "$2" | head -n1
}

# host_lacks FEATURE: the CPU flags FEATURE needs that this host's /proc/cpuinfo lacks (empty: it
# has them all); status 1 for a feature this script does not know
host_lacks() {
    local need
    case "$1" in
    avx512) need="avx512f avx512bw avx512vl avx512_vnni" ;;
    *) return 1 ;;
    esac
    local flags missing=""
    flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
    for f in $need; do
        case "$flags" in *" $f "*) ;; *) missing="$missing${missing:+ }$f" ;; esac
    done
    printf '%s' "$missing"
}

# the catalogue, filtered by name, kind and sample
patches=()
if [ ${#names[@]} -gt 0 ]; then
    for n in "${names[@]}"; do
        [ -f "$cat_dir/$n.patch" ] || die "no mutant '$n' (ci/mutants/$n.patch)"
        patches+=("$cat_dir/$n.patch")
    done
else
    for p in "$cat_dir"/*.patch; do
        [ -f "$p" ] && patches+=("$p")
    done
fi
sel=()
for p in "${patches[@]}"; do
    k=$(header Kind "$p")
    case "$k" in ladder | tests | cuda) ;; *) die "$(basename "$p"): Kind '$k' is not ladder, tests or cuda" ;; esac
    [ -n "$(header Description "$p")" ] || die "$(basename "$p"): no Description: line"
    [ -n "$kind_filter" ] && [ "$k" != "$kind_filter" ] && continue
    [ "$sample" = 1 ] && [ "$(header Sample "$p")" != yes ] && continue
    sel+=("$p")
done
[ ${#sel[@]} -gt 0 ] || die "no mutant selected"

if [ "$list_only" = 1 ]; then
    printf '%-28s %-7s %-22s %s\n' mutant kind area description
    for p in "${sel[@]}"; do
        printf '%-28s %-7s %-22s %s\n' "$(basename "$p" .patch)" "$(header Kind "$p")" \
            "$(header Area "$p")" "$(header Description "$p")"
    done
    exit 0
fi

base_commit=$(git -C "$repo" rev-parse --verify "$base^{commit}") || die "no commit '$base'"
mkdir -p "$work"
work=$(cd "$work" && pwd)
src="$work/src"
NICE=(nice -n 10)
jobs=$(nproc 2>/dev/null || echo 2)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)

# --check: against the base commit's blobs in a private index, touching no worktree (a check
# run beside a mutants run once moved that run's scratch worktree to another commit)
if [ "$check_only" = 1 ]; then
    idx=$(mktemp)
    trap 'rm -f "$idx"' EXIT
    GIT_INDEX_FILE=$idx git -C "$repo" read-tree "$base_commit"
    bad=0
    for p in "${sel[@]}"; do
        if GIT_INDEX_FILE=$idx git -C "$repo" apply --cached --check "$p" 2>/dev/null; then
            echo "applies   $(basename "$p" .patch)"
        else
            echo "DOES NOT APPLY  $(basename "$p" .patch)"
            bad=1
        fi
    done
    exit $((bad * 2))
fi

# one run per work folder: two runs would check out their mutants in the same worktree
exec 9>"$work/.lock"
command -v flock >/dev/null && { flock -n 9 || die "another ci/mutants.sh run holds $work (its .lock)"; }
# the selected patches as they are now: an edit of the catalogue during the run (a patch renamed
# or regenerated) changes neither what runs nor the run itself
rm -rf "$work/catalogue" && mkdir -p "$work/catalogue"
for i in "${!sel[@]}"; do
    cp "${sel[$i]}" "$work/catalogue/" && sel[$i]="$work/catalogue/$(basename "${sel[$i]}")"
done

# the scratch worktree at the base commit; ../shared next to it (ladders name ../../shared)
if ! git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    rm -rf "$src"
    git -C "$repo" worktree prune
    git -C "$repo" worktree add -q --detach "$src" "$base_commit" || die "cannot add worktree $src"
fi
reset_src() {
    git -C "$src" checkout -q -f --detach "$base_commit"
    git -C "$src" clean -q -fd -- . # untracked files (ignored ones stay: model cache, .pub files)
}
reset_src
shared=""
for d in "$repo/../shared" "$repo/shared"; do
    [ -d "$d" ] && shared=$(cd "$d" && pwd) && break
done
[ -n "$shared" ] && [ ! -e "$work/shared" ] && ln -s "$shared" "$work/shared"

if [ "$sample" = 1 ]; then
    ladder=ladders/mutants-sample.yaml
    control=0
fi
[ -f "$src/$ladder" ] || die "no ladder '$ladder' at $base_commit"

# one key for every host of the ladder; each file:NAME.pub the ladder trusts is written next to it
keydir="$work/keys"
mkdir -p "$keydir"
key="$keydir/$host.key"

configure() { # configure DIR CUDA(ON/OFF) TESTS(ON/OFF)
    local dir=$1 cuda=$2 tests=$3 extra=()
    [ "$cuda" = ON ] && extra=(-DCMAKE_CUDA_ARCHITECTURES=90a)
    if [ ! -f "$dir/build.ninja" ] || [ "$(sed -n 's/^GATE_TESTS:BOOL=//p' "$dir/CMakeCache.txt")" != "$tests" ]; then
        "${NICE[@]}" cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
            -DGATE_CUDA="$cuda" -DGATE_TESTS="$tests" "${launcher[@]}" "${extra[@]}" >/dev/null
    fi
}

# build KIND LOG: the targets a mutant of KIND needs; 0 when built
build() {
    local k=$1 log=$2
    case "$k" in
    ladder)
        configure "$work/build" OFF "$tests_on" && "${NICE[@]}" ninja -C "$work/build" -j "$jobs" gate >"$log" 2>&1 ;;
    tests)
        local targets=()
        if [ "$hinted_only" = 1 ]; then
            targets=(gate $(header Tests "$p" | tr ',' ' '))
            [[ " ${targets[*]} " == *" test_broken_twin "* ]] && targets+=(gate_broken_twin)
        fi
        configure "$work/build" OFF ON && "${NICE[@]}" ninja -C "$work/build" -j "$jobs" "${targets[@]}" >"$log" 2>&1 ;;
    cuda)
        configure "$work/build-cuda" ON OFF >"$log" 2>&1 || return 1
        local objs=() f
        for f in $(git -C "$src" diff --name-only HEAD~1 HEAD -- 'kernels/*.cu'); do
            objs+=("CMakeFiles/gate_core.dir/$f.o")
        done
        [ ${#objs[@]} -gt 0 ] || { echo "the patch changes no kernels/*.cu file" >"$log"; return 1; }
        "${NICE[@]}" ninja -C "$work/build-cuda" -j "$jobs" "${objs[@]}" >"$log" 2>&1 ;;
    esac
}
# the test build is configured with tests once any tests mutant is selected (one folder for both)
tests_on=OFF
for p in "${sel[@]}"; do [ "$(header Kind "$p")" = tests ] && tests_on=ON; done

# classify RUNJSON RELJSON RC: "KILLED<TAB>by" / "LUCK<TAB>golden ..." / "SURVIVED<TAB>..." /
# "NO RESULT<TAB>why" from gate run's and release check's JSON
classify() {
    python3 - "$1" "$2" "$3" <<'EOF'
import json, sys
run, rel, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    cells = json.load(open(run))
except Exception as e:
    # gate run died (a crash in the engine under test): no receipt, the release stays blocked
    print("KILLED\tcrash (gate run exit %d, no JSON)" % rc)
    sys.exit(0)
if not isinstance(cells, list) or not cells:
    print("NO RESULT\tgate run wrote no cell (exit %d)" % rc)
    sys.exit(0)
sysg, luck, noise = {}, {}, []
for c in cells:
    for g, v in (c.get("gates") or {}).items():
        verdict = v.get("verdict")
        if verdict == "PASS":
            continue
        if g == "throughput":
            noise.append(c["cell"])
            continue
        d = luck if g == "golden" else sysg
        d.setdefault(g if verdict == "FAIL" else "%s:%s" % (g, verdict), []).append(c["cell"])
try:
    rows = {r["name"]: r["state"] for r in json.load(open(rel)).get("rows", [])}
except Exception:
    rows = {}
def by(d):
    return ", ".join("%s(%d)" % (g, len(v)) for g, v in sorted(d.items()))
if sysg:
    blocked = sorted({c for v in sysg.values() for c in v if rows.get(c, "?") != "PASS"})
    print("KILLED\t%s%s" % (by(sysg), "" if blocked else " [release rows not blocked?]"))
elif luck:
    print("LUCK\tgolden only: %s" % by(luck))
else:
    n_anchor = sum(1 for c in cells if str(c.get("cell", "")).startswith("anchor/"))
    print("SURVIVED\t%d cells + %d anchors, every systematic gate PASS" % (len(cells) - n_anchor, n_anchor))
EOF
}

results=()
add_result() { # name kind area result by seconds
    results+=("$(printf '%s\t%s\t%s\t%s\t%s\t%s' "$@")")
    printf '%-28s %-6s %-10s %s (%ss)\n' "$1" "$2" "$4" "$5" "$6"
}

rundir_for() { echo "$work/run/$1"; }

# cells_of PATTERN: the ladder's required cells of this host that PATTERN matches (fnmatch, as
# `gate run --only`), prefill cells first, then decode, then the rest; MoE models before dense
cells_of() {
    (cd "$src" && "$work/build/gate" ladder check "$ladder") | python3 -c '
import fnmatch, sys
pat, host = sys.argv[1], sys.argv[2]
cells, on = [], False
for line in sys.stdin:
    if line.startswith("required cells:"):
        on = True
        continue
    if on:
        if not line.startswith("  "):
            break
        name = line.split()[0]
        if name.split("/")[1] == host and fnmatch.fnmatchcase(name, pat):
            cells.append(name)
def rank(c):
    mode = c.split("/")[2]
    return ("prefill" not in mode, "decode" not in mode or "+" in mode, "moe" not in c, c)
print("\n".join(sorted(cells, key=rank)))
' "$1" "$host"
}

# run_ladder NAME PATTERN: one `gate run --only CELL` per matching cell into WORK/run/NAME (the
# first cell whose systematic gate fails ends the run unless --all-cells), then `gate release
# check`; prints the classification
run_ladder() {
    local name=$1 pat=$2 d
    d=$(rundir_for "$name")
    mkdir -p "$d"
    rm -f "$d"/run.* "$d"/release.* "$d"/receipts.db*
    local gate="$work/build/gate"
    if [ ! -f "$key" ]; then
        "$gate" key gen --host "$host" -o "$key" --pub "$keydir/$host.pub" >/dev/null 2>&1 || true
    fi
    local pub
    for pub in $(grep -o 'file:[A-Za-z0-9._-]*\.pub' "$src/$ladder" | sort -u | sed 's/^file://'); do
        cp "$keydir/$host.pub" "$(dirname "$src/$ladder")/$pub"
    done
    local cells rc=0 i=0 c
    cells=$(cells_of "$pat")
    [ -n "$cells" ] || { printf 'NO RESULT\tno cell of host %s matches %s\n' "$host" "$pat"; return; }
    for c in $cells; do
        i=$((i + 1))
        (cd "$src" && "${NICE[@]}" "$gate" run "$ladder" --host "$host" --key "$key" \
            --db "$d/receipts.db" --only "$c" --json >"$d/run.$i.json" 2>"$d/run.$i.err") || rc=$?
        [ "$all_cells" = 1 ] && continue
        case "$(classify "$d/run.$i.json" /dev/null "$rc")" in KILLED*) break ;; esac
    done
    # every cell's rows in one list (an anchor case once); a crash leaves run.json empty
    python3 -c '
import json, sys
d, n = sys.argv[1], int(sys.argv[2])
out, seen = [], set()
for k in range(1, n + 1):
    try:
        rows = json.load(open("%s/run.%d.json" % (d, k)))
    except Exception:
        sys.exit(0)
    for r in rows:
        if r.get("cell") not in seen:
            seen.add(r.get("cell"))
            out.append(r)
json.dump(out, sys.stdout, indent=1)
' "$d" "$i" >"$d/run.json"
    (cd "$src" && "$gate" release check "$ladder" --db "$d/receipts.db" --json >"$d/release.json" 2>"$d/release.err") || true
    if grep -q '"git_dirty": true' "$d/release.json" 2>/dev/null; then
        echo "NO RESULT	the build is dirty: $(grep -o '"dirty_reason": "[^"]*"' "$d/release.json" | head -n1)"
        return
    fi
    classify "$d/run.json" "$d/release.json" "$rc"
}

# run_tests NAME HINTS LOG: the suite, hinted binaries first, stop at the first failure
run_tests() {
    local name=$1 hints=$2 log=$3 failed=""
    local b="$work/build"
    local re=""
    [ -n "$hints" ] && re="^($(echo "$hints" | tr ' ,' '||' | sed 's/||*/|/g; s/^|//; s/|$//'))\$"
    local rc=0
    if [ -n "$re" ]; then
        (cd "$b" && "${NICE[@]}" ctest -R "$re" -j "$jobs" --stop-on-failure >"$log" 2>&1) || rc=$?
    fi
    if [ "$rc" = 0 ] && [ "$hinted_only" = 1 ]; then
        printf 'SURVIVED\tpassed %s (--hinted-only: the rest of the suite not run)\n' "$hints"
        return
    fi
    if [ "$rc" = 0 ]; then
        if [ -n "$re" ]; then
            (cd "$b" && "${NICE[@]}" ctest -E "$re" -j "$jobs" --stop-on-failure >>"$log" 2>&1) || rc=$?
        else
            (cd "$b" && "${NICE[@]}" ctest -j "$jobs" --stop-on-failure >>"$log" 2>&1) || rc=$?
        fi
    fi
    if [ "$rc" != 0 ]; then
        failed=$(sed -n 's/^[[:space:]]*[0-9]* - \([A-Za-z0-9_]*\) (.*/\1/p' "$log" | sort -u | tr '\n' ' ')
        printf 'KILLED\t%s\n' "${failed:-ctest exit $rc}"
    else
        printf 'SURVIVED\tevery test binary passed\n'
    fi
}

t_all=$(date +%s)
echo "ci/mutants.sh: base $(git -C "$repo" log -1 --format='%h %s' "$base_commit" | cut -c1-90)"
echo "ci/mutants.sh: ${#sel[@]} mutants, ladder $ladder, work $work"
status=0

if [ "$control" = 1 ]; then
    t0=$(date +%s)
    reset_src
    need=0
    for p in "${sel[@]}"; do [ "$(header Kind "$p")" = ladder ] && need=1; done
    if [ "$need" = 1 ]; then
        build ladder "$work/control.build.log" || die "the base does not build (see $work/control.build.log)"
        res=$(run_ladder control "${only:-*/cpu.*}")
        t=$(($(date +%s) - t0))
        if [ "$(cut -f1 <<<"$res")" != SURVIVED ]; then
            add_result "(control: base)" ladder - "FAIL" "$(cut -f2 <<<"$res")" "$t"
            echo "ci/mutants.sh: the unmutated base does not pass the ladder's correctness gates:" \
                "every kill would be noise; see $(rundir_for control)" >&2
            exit 1
        fi
        add_result "(control: base)" ladder - PASS "every systematic and golden gate passed" "$t"
    fi
fi

for p in "${sel[@]}"; do
    name=$(basename "$p" .patch)
    k=$(header Kind "$p")
    area=$(header Area "$p")
    t0=$(date +%s)
    reset_src
    d=$(rundir_for "$name")
    rm -rf "$d"
    mkdir -p "$d"
    req=$(header Requires "$p")
    if [ -n "$req" ]; then
        missing=$(host_lacks "$req") || die "$name: Requires '$req' is not a feature this script knows (avx512)"
        if [ -n "$missing" ]; then
            add_result "$name" "$k" "$area" "NOT RUN" "needs $req; this host lacks $missing" 0
            continue
        fi
    fi
    if ! git -C "$src" apply "$p" 2>"$d/apply.err"; then
        add_result "$name" "$k" "$area" "DOES NOT APPLY" "$(head -n1 "$d/apply.err")" 0
        status=2
        continue
    fi
    git -C "$src" -c user.name=gate-mutants -c user.email=mutants@gate.invalid \
        commit -q -a --no-verify -m "mutant $name" >/dev/null
    if ! build "$k" "$d/build.log"; then
        add_result "$name" "$k" "$area" "BUILD FAILED" "catalogue bug: see $d/build.log" \
            $(($(date +%s) - t0))
        status=2
        continue
    fi
    pat=${only:-$(header Cells "$p")}
    case "$k" in
    ladder) res=$(run_ladder "$name" "${pat:-*/cpu.*}") ;;
    tests) res=$(run_tests "$name" "$(header Tests "$p")" "$d/ctest.log") ;;
    cuda) res=$(printf 'NOT RUN\tcompiled for sm_90a; no device here') ;;
    esac
    add_result "$name" "$k" "$area" "$(cut -f1 <<<"$res")" "$(cut -f2 <<<"$res")" $(($(date +%s) - t0))
    if [ "$sample" = 1 ] && [ "$(cut -f1 <<<"$res")" != KILLED ]; then
        status=1
    fi
done
reset_src

# the table and the score
echo
printf '%-28s %-6s %-22s %-14s %-6s %s\n' mutant kind area result time by
n_k=0
n_s=0
n_l=0
n_run=0
for r in "${results[@]}"; do
    IFS=$'\t' read -r n k a res by t <<<"$r"
    printf '%-28s %-6s %-22s %-14s %5ss %s\n' "$n" "$k" "$a" "$res" "$t" "$by"
    [ "$a" = - ] && continue
    case "$res" in
    KILLED) n_k=$((n_k + 1)); n_run=$((n_run + 1)) ;;
    LUCK) n_l=$((n_l + 1)); n_run=$((n_run + 1)) ;;
    SURVIVED) n_s=$((n_s + 1)); n_run=$((n_run + 1)) ;;
    esac
done
echo
echo "ci/mutants.sh: killed $n_k of $n_run run (caught by luck $n_l, survived $n_s); $(($(date +%s) - t_all)) s in all"
if [ -n "$out" ]; then
    printf 'mutant\tkind\tarea\tresult\tby\tseconds\n' >"$out"
    printf '%s\n' "${results[@]}" >>"$out"
fi
exit "$status"
}
