#!/usr/bin/env bash
# fuzz.sh — builds the libFuzzer target for the mmCIF reader (tests/fuzz/fuzz_cif.c) with
# clang -fsanitize=fuzzer,address,undefined and runs it for N seconds on J workers, seeded
# with the shared mmCIF files (decompressed, whole and cut down to their _atom_site loop).
#   scripts/fuzz.sh [seconds=120] [jobs=4]        FUZZ_MAX_LEN=bytes (default 65536)
# Work files go to build-fuzz/ (corpus/ grows between runs; crashes land in build-fuzz/
# as crash-*/leak-*/timeout-*). Exits non-zero when the fuzzer reported a finding.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-120}
jobs=${2:-4}
out=build-fuzz
data=../shared/data/mmcif
mkdir -p "$out/corpus" "$out/seeds"
CC=${FUZZ_CC:-clang}
flags="-std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Iinclude -Isrc"
$CC $flags tests/fuzz/fuzz_cif.c src/data/cif.c src/data/structure.c \
  src/core/alloc.c src/core/check.c src/core/log.c -lz -lm -pthread -o "$out/fuzz_cif"
if [[ -d $data ]]; then
  for f in "$data"/*.cif.gz; do
    b=$(basename "$f" .cif.gz)
    [[ -f $out/seeds/$b.cif ]] || zcat "$f" > "$out/seeds/$b.cif"
    # the header plus the first 60 rows of _atom_site, so seeds fit -max_len
    [[ -f $out/seeds/$b.head.cif ]] || awk '
      /^_atom_site\./ { inatom = 1 }
      NR <= 60 || inatom { print; if (inatom && !/^_/ && ++rows >= 60) exit }' \
      "$out/seeds/$b.cif" > "$out/seeds/$b.head.cif"
  done
  ls "$data"/*.cif.gz | head -n 5 | xargs -I{} cp {} "$out/seeds/"
else
  echo "fuzz.sh: $data not found: starting from an empty corpus"
fi
echo "fuzz.sh: running $out/fuzz_cif for ${secs}s on $jobs workers"
cd "$out"
rm -f fuzz-*.log fuzz.log
ASAN_OPTIONS=detect_leaks=1 ./fuzz_cif -max_total_time="$secs" -max_len="${FUZZ_MAX_LEN:-65536}" -timeout=10 \
  -rss_limit_mb=4096 -jobs="$jobs" -workers="$jobs" -print_final_stats=1 corpus seeds \
  > fuzz.log 2>&1 || true
grep -hE "^#[0-9]+.*DONE|stat::number_of_executed_units|ERROR|SUMMARY" fuzz*.log | tail -n 20 || true
if ls crash-* leak-* timeout-* oom-* >/dev/null 2>&1; then
  echo "fuzz.sh: findings:"; ls -l crash-* leak-* timeout-* oom-* 2>/dev/null
  exit 1
fi
echo "fuzz.sh: no findings"
