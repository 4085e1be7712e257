#!/usr/bin/env bash
# pairformer.sh — one GPU job for the Pairformer trunk: builds the CUDA library, the double
# CPU oracle (core + ops + model; no data layer, so no LMDB/zstd/jansson) and
# bench/pairformer.cu, times ours (one block, the 48-block stack, the largest N the planner
# allows and, with MAX_N_RUN=1, one real 48-block run there), then the PyTorch peers
# (bench/pairformer_peers.py over the shared baseline) on the same GPU, and writes
# $RESULTS/pairformer.json (DESIGN.md format) and the markdown $RESULTS/pairformer.md
# (bench/pairformer_report.py). From the repo root, on a GPU machine:
#   BASELINE=../shared/bench/pairformer_baseline.py bench/pairformer.sh
#   bench/pairformer.sh --build-only      (here: just the build, no GPU needed)
# Environment: BLOCK_NS (one block; default 256,384,512,768,1024,1536,2048), STACK_NS
# (48-block stack; default 384,768), MAX_N_RUN=1 (the real run at the largest every-7 N;
# slow, about a minute), RUN_N (that run's N instead of the planner's), OURS=0 (skip ours:
# reuse $RESULTS/pairformer_ours.json), PEERS=0 (skip the peers), PEER_NS (default
# BLOCK_NS), PEER_COMPILE_NS (torch.compile's N; default 384,768), PEERS_BUDGET_S
# (seconds the peers may take; default 420), BASELINE (the baseline file), BUILD (default
# build-gpu), RESULTS (default bench/results), CMD (the command recorded in the results).
set -uo pipefail
BUILD=${BUILD:-build-gpu}
RESULTS=${RESULTS:-bench/results}
BLOCK_NS=${BLOCK_NS:-256,384,512,768,1024,1536,2048}
STACK_NS=${STACK_NS:-384,768}
export NCCL_NVLS_ENABLE=0
B="$BUILD/bench/pairformer"

build() {
  mkdir -p "$BUILD"
  make -j16 BUILD="$BUILD" "$BUILD/libmegafold_cuda.a" "$BUILD/libmegafold_oracle_f64.a" \
    > "$BUILD/pairformer_make.log" 2>&1 || { tail -30 "$BUILD/pairformer_make.log"; echo "make failed"; return 1; }
  # The oracle lib uses OpenBLAS when the Makefile found it (it then defines MF_HAVE_BLAS).
  local blas=""
  echo 'int main(void){return 0;}' | cc -x c - -include cblas.h -lopenblas -o /dev/null 2>/dev/null \
    && blas=-lopenblas
  mkdir -p "$BUILD/bench"
  nvcc -std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc \
    -Xcompiler -Wall,-Wextra -DMF_REAL_DOUBLE bench/pairformer.cu -o "$B" \
    "$BUILD/libmegafold_cuda.a" "$BUILD/libmegafold_oracle_f64.a" \
    -lcublas -lcublasLt -lcudart $blas -lm
}

if [[ "${1:-}" == "--build-only" ]]; then mkdir -p "$RESULTS"; build; exit $?; fi

mkdir -p "$RESULTS"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [[ -d $d ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$d"; done
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
echo "$gpu"
if [[ "${OURS:-1}" != 0 ]]; then
  echo "== build"; T0=$SECONDS
  build || exit 1
  echo "built in $((SECONDS - T0)) s"
  echo "== ours"; T0=$SECONDS
  maxn=--max-n
  [[ "${MAX_N_RUN:-0}" == 1 ]] && maxn=--max-n-run
  "$B" --block "$BLOCK_NS" --stack "$STACK_NS" $maxn ${RUN_N:+--run-n $RUN_N} \
    --json "$RESULTS/pairformer_ours.json" 2>&1 | tee "$RESULTS/pairformer_ours.log"
  echo "ours: exit ${PIPESTATUS[0]}, $((SECONDS - T0)) s"
fi
if [[ "${PEERS:-1}" != 0 ]]; then
  echo "== peers"; T0=$SECONDS
  PYTHONUNBUFFERED=1 python3 bench/pairformer_peers.py --ns "${PEER_NS:-$BLOCK_NS}" \
    --stack-ns "$STACK_NS" --json "$RESULTS/pairformer_peers.json" 2>&1 \
    | tee "$RESULTS/pairformer_peers.log"
  echo "peers: exit ${PIPESTATUS[0]}, $((SECONDS - T0)) s"
fi
python3 bench/pairformer_report.py "$RESULTS/pairformer_ours.json" "$RESULTS/pairformer_peers.json" \
  "$RESULTS/pairformer.json" "${CMD:-BLOCK_NS=$BLOCK_NS STACK_NS=$STACK_NS MAX_N_RUN=${MAX_N_RUN:-0} bench/pairformer.sh}" \
  "$gpu" | tee "$RESULTS/pairformer.md"
