#!/usr/bin/env bash
# test_demo.sh — the README's main job end to end: `megafold demo` must exit 0, which it does
# only when the distogram loss fell and the Pairformer block received gradients.
# MF_BUILD names the build directory (the Makefile sets it).
set -u
bin="${MF_BUILD:-build}/megafold"
out=$("$bin" demo --n 12 --steps 10 2>&1)
rc=$?
if [[ $rc -eq 0 ]] && grep -q "^done: 10 steps" <<<"$out"; then
  echo "test_demo: 1 passed, 0 failed"
else
  printf '%s\n' "$out" | tail -n 15
  echo "FAIL megafold demo exited $rc"
  echo "test_demo: 0 passed, 1 failed"
  exit 1
fi
