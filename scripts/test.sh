#!/usr/bin/env bash
# test.sh — the README's test command: installs missing Debian packages, builds
# everything this machine can build (CUDA too when nvcc is present: compiled, not run),
# then runs every CPU test, normally and under ASan/UBSan. Ends with "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
make -j"$jobs" all asan >build.log 2>&1 || { tail -n 60 build.log; echo "build failed (full log: build.log)"; echo "0 passed, 1 failed"; exit 1; }
grep -E 'warning:' build.log && { echo "build has warnings (see build.log)"; echo "0 passed, 1 failed"; exit 1; }
make --no-print-directory test-cpu-all
