#!/usr/bin/env bash
# Usage: ci/tap-summary.sh BUILD [PREFIX]   (PREFIX starts each line; default ci/test.sh)
# The Criterion counts (run, passed, failed, skipped) over every test binary of BUILD, and each
# skipped test with its reason, read from the TAP report each test binary writes into
# BUILD/test-reports/ (issue 10 §5: a skip is never a silent pass); names each binary that wrote
# no report (crashed or did not run). ci/test.sh prints it after each ctest run, ci/gpu-check.sh
# after the suite stage. Always exits 0: the verdict is ctest's.
set -uo pipefail
build=$1
prefix=${2:-ci/test.sh}
reports=$build/test-reports
# CTEST_EXCLUDE (ci/test.sh): binaries the run left out on purpose, named as such, not as crashed
names=$(cd "$build" && ctest -N ${CTEST_EXCLUDE:+-E "$CTEST_EXCLUDE"} | sed -n 's/^ *Test *#[0-9]*: *//p')
if [ -n "${CTEST_EXCLUDE:-}" ]; then
    left=$(cd "$build" && ctest -N -R "$CTEST_EXCLUDE" | sed -n 's/^ *Test *#[0-9]*: *//p' | tr '\n' ' ')
    echo "$prefix: $build: left out of this run (CTEST_EXCLUDE): ${left% }"
fi
for n in $names; do
    [ -s "$reports/$n.tap" ] || echo "$prefix: $build: $n wrote no TAP report (crashed or did not run)"
done
cat "$reports"/*.tap 2>/dev/null | awk -v build="$build" -v prefix="$prefix" '
    /^ok - / {
        run++
        if ($0 ~ /  # SKIP /) {
            skip++
            line = $0
            sub(/^ok - /, "", line)
            sub(/  # SKIP /, ": ", line)
            skips[skip] = line
        } else {
            pass++
        }
    }
    /^not ok - / { run++; fail++ }
    END {
        printf "%s: %s: %d tests run: %d passed, %d failed, %d skipped\n",
               prefix, build, run, pass, fail, skip
        for (i = 1; i <= skip; i++)
            printf "  SKIP %s\n", skips[i]
    }'
exit 0
