#!/usr/bin/env bash
# demo.sh — the README's main command: installs missing Debian packages, builds, and
# runs the built-in demo (no data, no GPU needed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
make -j"$(nproc 2>/dev/null || echo 2)" build/megafold >build.log 2>&1 || { tail -n 40 build.log; exit 1; }
exec build/megafold demo "$@"
