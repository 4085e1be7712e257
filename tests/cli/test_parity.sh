#!/usr/bin/env bash
# test_parity.sh — parity bundles end to end: make_bundle (the CPU double stack) writes
# bundles, the stdlib-only structure check (tools/reference/parity.py --check-only) accepts
# them and rejects a truncated one, and — where PyTorch is installed — the PyTorch reference
# (tools/reference/parity.py) recomputes them and agrees. Without torch the reference part
# says "skip" (CI has no torch). MF_BUILD names the build directory (the Makefile sets it);
# MF_PYTHON a python3 to try first for torch.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="${MF_BUILD:-build}/tools/make_bundle"
parity="$root/tools/reference/parity.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

check() { # name, command...
  local name=$1
  shift
  local out
  if out=$("$@" 2>&1); then
    passed=$((passed + 1))
  else
    printf '%s\n' "$out" | tail -n 20
    echo "FAIL $name"
    failed=$((failed + 1))
  fi
}
check_fails() { # name, command... (must exit non-zero)
  local name=$1
  shift
  if "$@" >/dev/null 2>&1; then
    echo "FAIL $name (accepted)"
    failed=$((failed + 1))
  else
    passed=$((passed + 1))
  fi
}

a="$tmp/train_mask.safetensors" b="$tmp/eval_n1.safetensors" c="$tmp/train_n5.safetensors"
check "make_bundle training+mask" "$bin" "$a" --N 12 --L 2 --training 1 --mask --seed 3
check "make_bundle eval N=1" "$bin" "$b" --N 1 --L 1 --training 0 --mask --seed 4
check "make_bundle training N=5" "$bin" "$c" --N 5 --L 2 --training 1 --seed 5
if command -v python3 >/dev/null 2>&1; then
  check "structure training+mask" python3 "$parity" "$a" --check-only
  check "structure eval N=1" python3 "$parity" "$b" --check-only
  check "structure training N=5" python3 "$parity" "$c" --check-only
  head -c -4 "$a" >"$tmp/truncated.safetensors"
  check_fails "structure rejects a truncated bundle" python3 "$parity" "$tmp/truncated.safetensors" --check-only
else
  echo "skip: bundle structure checks (no python3)"
fi
check_fails "make_bundle rejects a bad argument" "$bin" "$tmp/x.safetensors" --N 0

py=""
for cand in "${MF_PYTHON:-}" python3 /usr/bin/python3; do
  if [[ -n "$cand" ]] && "$cand" -c 'import torch' >/dev/null 2>&1; then
    py=$cand
    break
  fi
done
if [[ -n "$py" ]]; then
  for f in "$a" "$b" "$c"; do
    check "reference parity $(basename "$f")" "$py" "$parity" "$f"
  done
else
  echo "skip: PyTorch reference parity (no python3 with torch here)"
fi

echo "test_parity: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
