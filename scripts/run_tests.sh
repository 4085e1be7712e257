#!/usr/bin/env bash
# run_tests.sh — runs test binaries, one at a time, and adds up their results.
# Each binary ends with a line "<name>: N passed, M failed" (tests/harness.c); a binary
# that crashes, times out, prints no such line, or checks nothing without saying it
# skipped, counts as one failure.
# Ends with the line "N passed, M failed"; exits non-zero on any failure.
set -u
timeout_s=${MF_TEST_TIMEOUT:-900}
passed=0 failed=0 bad=()
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
for t in "$@"; do
  start=$(date +%s%N)
  out=$(timeout "$timeout_s" "$t" 2>&1)
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  secs="$((ms / 1000)).$(( (ms % 1000) / 100 ))"
  line=$(printf '%s\n' "$out" | grep -E '^[A-Za-z0-9_./-]+: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
  if [[ -z "$line" ]]; then
    printf '%s\n' "$out" | tail -n 30
    echo "FAIL $t: no summary line (exit $rc)"
    failed=$((failed + 1)); bad+=("$t"); continue
  fi
  p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed/\1/')
  f=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed/\2/')
  if [[ $rc -ne 0 && $f -eq 0 ]]; then f=1; fi
  # a binary that checked nothing passes only if it says why (e.g. shared data absent)
  if [[ $p -eq 0 && $f -eq 0 ]] && ! grep -qi 'skip' <<<"$out"; then
    echo "FAIL $t: ran no check and gave no reason"
    f=1
  fi
  passed=$((passed + p)); failed=$((failed + f))
  if [[ $f -ne 0 ]]; then
    printf '%s\n' "$out" | grep -E 'FAIL|ERROR|error|Sanitizer' | head -n 40
    bad+=("$t")
  fi
  echo "$t: $p passed, $f failed (${secs}s)"
done
if [[ ${#bad[@]} -gt 0 ]]; then echo "failing: ${bad[*]}"; fi
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
