#!/usr/bin/env bash
# The test entry point (README's test command runs this after ci/deps.sh): builds the normal
# configuration and the AddressSanitizer + UBSan configuration, and runs every test in both.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$jobs"
(cd build && ctest --output-on-failure -j "$jobs")
cmake -S . -B build-asan "${gen[@]}" -DCMAKE_BUILD_TYPE=Debug -DGATE_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    GATE_ASAN=1 ctest --output-on-failure -j "$jobs")
echo "ci/test.sh: all tests passed (normal and sanitizer builds)"
