#!/usr/bin/env bash
# evofusion.sh — one GPU job for EvoFusion: builds (or reuses carried) binaries, runs the
# GPU test (tests/gpu/test_fusion_gpu.cu), the kernel lab (dev/cuda/fusion_lab.cu), the
# benchmark (bench/evofusion.cu) and its PyTorch peers (bench/evofusion_peers.py) on the
# same GPU, then merges both into $RESULTS/evofusion.json (DESIGN.md format) and the
# markdown table $RESULTS/evofusion.md (bench/evofusion_report.py). From the repo root:
#   bench/evofusion.sh              (on a GPU machine)
#   bench/evofusion.sh --build-only (here: the minimal build into $BUILD, no GPU needed)
# Environment: NS (comma list of N, default 384,768), BUILD (default build-fusion),
# RESULTS (default bench/results), PEERS=0 skips the peers, PEERS_BUDGET_S (seconds of
# torch.compile work before the remaining compiled peers are skipped).
set -uo pipefail
BUILD=${BUILD:-build-fusion}
RESULTS=${RESULTS:-bench/results}
NS=${NS:-384,768}
export NCCL_NVLS_ENABLE=0
NVCC="nvcc -std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc -Xcompiler -Wall,-Wextra"

# The minimal build: src/core + src/ops/cpu (double, the oracle; no BLAS) + the CUDA files
# this job needs, so that it depends on neither OpenBLAS nor the data-layer libraries.
build_min() {
  local M="$BUILD/min" pids=()
  mkdir -p "$M" "$BUILD/tests/gpu" "$BUILD/bench" "$BUILD/dev"
  for f in src/core/*.c src/ops/cpu/*.c tests/harness.c; do
    gcc -std=c11 -O2 -Iinclude -Isrc -DMF_REAL_DOUBLE -c "$f" -o "$M/$(basename "$f" .c).o" & pids+=($!)
  done
  # every CUDA op file but EvoFlash-3D's (attention, its modules), so that a kernel file a
  # fusion op starts calling is built without editing this list
  for f in src/ops/cuda/*.cu; do
    case "$(basename "$f" .cu)" in attention | attn_pair_bias | triatt) continue ;; esac
    $NVCC -c "$f" -o "$M/$(basename "$f" .cu)_cu.o" & pids+=($!)
  done
  local ok=1
  for p in "${pids[@]}"; do wait "$p" || ok=0; done
  [[ $ok == 1 ]] || { echo "build_min: compile failed"; return 1; }
  rm -f "$M/libfusion.a"; ar rcs "$M/libfusion.a" "$M"/*.o
  $NVCC -DMF_REAL_DOUBLE tests/gpu/test_fusion_gpu.cu -o "$BUILD/tests/gpu/test_fusion_gpu" "$M/libfusion.a" -lcublas -lcublasLt -lm &
  local a=$!
  $NVCC bench/evofusion.cu -o "$BUILD/bench/evofusion" "$M/libfusion.a" -lcublas -lcublasLt -lm &
  local b=$!
  $NVCC -DMF_REAL_DOUBLE dev/cuda/fusion_lab.cu -o "$BUILD/dev/fusion_lab" "$M/libfusion.a" -lcublas -lcublasLt -lm &
  local c=$!
  wait $a && wait $b && wait $c
}

if [[ "${1:-}" == "--build-only" ]]; then build_min; exit $?; fi

OUTDIR=${OUT:-$RESULTS}
mkdir -p "$RESULTS" "$OUTDIR"
T="$BUILD/tests/gpu/test_fusion_gpu"; B="$BUILD/bench/evofusion"; L="$BUILD/dev/fusion_lab"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [[ -d $d ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$d"; done
if [[ ! -x $T || ! -x $B ]] || ldd "$T" "$B" | grep -q "not found"; then
  echo "carried binaries unusable here; building"
  BUILD=build-gpu2; T="$BUILD/tests/gpu/test_fusion_gpu"; B="$BUILD/bench/evofusion"; L="$BUILD/dev/fusion_lab"
  time build_min 2>&1 | tail -20
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)

echo "== GPU test"
MF_TEST_VERBOSE=1 "$T" > "$OUTDIR/test.log" 2>&1; echo "test exit $?"; grep -E "FAIL|passed" "$OUTDIR/test.log" | tail -80
echo "== benchmark (ours)"
"$B" --ns "$NS" --json "$OUTDIR/evofusion_ours.json" 2>&1 | tee "$OUTDIR/bench.log"
echo "== lab"
[[ -x $L ]] && "$L" 384 2>&1 | tee "$OUTDIR/lab.log"
if [[ "${PEERS:-1}" != 0 ]]; then
  echo "== peers"
  PYTHONUNBUFFERED=1 python3 bench/evofusion_peers.py --ns "$NS" --json "$OUTDIR/evofusion_peers.json" 2>&1 | tee "$OUTDIR/peers.log"
fi
python3 bench/evofusion_report.py "$OUTDIR/evofusion_ours.json" "$OUTDIR/evofusion_peers.json" \
  "$OUTDIR/evofusion.json" "NS=$NS bench/evofusion.sh" "$gpu" | tee "$OUTDIR/evofusion.md"
