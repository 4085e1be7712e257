#!/usr/bin/env bash
# evoflash3d.sh — one GPU job: builds the CUDA library and bench/evoflash3d.cu, times
# EvoFlash-3D (fwd, bwd, fwd+bwd, memory) and then the PyTorch peers
# (bench/evoflash3d_peers.py over the shared baselines file) on the same shapes, and
# writes bench/results/evoflash3d.json and the markdown table (evoflash3d.md) into
# $RESULTS (default bench/results). Run on a machine with a GPU, from the repo root:
#   BASELINES=../shared/bench/tri_attn_baselines.py bench/evoflash3d.sh
# Environment: TRI, SINGLE (comma lists of N), BUILD (build dir), PEERS=0 to skip peers,
# PEER_TRI, PEER_SINGLE, PEER_VARIANTS (naive,naive_compiled,sdpa,flex) and PEERS_BUDGET_S
# (seconds the peers may take) to run fewer of them,
# LIBS (prebuilt objects/libraries with src/core and the CUDA attention: skips the build).
set -euo pipefail
BUILD=${BUILD:-build-gpu}
RESULTS=${RESULTS:-bench/results}
TRI=${TRI:-256,384,512,768,1024,1536,2048}
SINGLE=${SINGLE:-256,512,1024,2048,4096}
mkdir -p "$RESULTS" "$BUILD/bench"
# The libraries from the Makefile; if the tree does not build as a whole (a module that
# needs a library this machine lacks), just what the benchmark needs: src/core and the
# CUDA attention.
if [[ -n "${LIBS:-}" ]]; then
  :  # prebuilt by the caller
elif make BUILD="$BUILD" -j16 "$BUILD/libmegafold_cuda.a" "$BUILD/libmegafold.a" >/dev/null 2>&1; then
  LIBS="$BUILD/libmegafold_cuda.a $BUILD/libmegafold.a"
else
  echo "make failed; building src/core + attention only"
  M="$BUILD/min"; mkdir -p "$M"
  for f in src/core/*.c; do gcc -std=c11 -O2 -Iinclude -Isrc -c "$f" -o "$M/$(basename "$f" .c).o"; done
  nvcc -std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc \
    -c src/ops/cuda/attention.cu -o "$M/attention_cu.o"
  rm -f "$M/libmin.a"; ar rcs "$M/libmin.a" "$M"/*.o
  LIBS="$M/libmin.a"
fi
nvcc -std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc \
  bench/evoflash3d.cu -o "$BUILD/bench/evoflash3d" $LIBS -lm
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
"$BUILD/bench/evoflash3d" --tri "$TRI" --single "$SINGLE" --json "$RESULTS/evoflash3d_ours.json"
if [[ "${PEERS:-1}" != 0 ]]; then
  PYTHONUNBUFFERED=1 python3 bench/evoflash3d_peers.py --tri "${PEER_TRI:-$TRI}" \
    --single "${PEER_SINGLE:-$SINGLE}" --variants "${PEER_VARIANTS:-naive,naive_compiled,sdpa,flex}" \
    --json "$RESULTS/evoflash3d_peers.json" || echo "peers failed"
fi
python3 bench/evoflash3d_report.py "$RESULTS/evoflash3d_ours.json" "$RESULTS/evoflash3d_peers.json" \
  "$RESULTS/evoflash3d.json" "${CMD:-TRI=$TRI SINGLE=$SINGLE bench/evoflash3d.sh}" "$gpu" | tee "$RESULTS/evoflash3d.md"
