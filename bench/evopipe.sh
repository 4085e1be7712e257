#!/usr/bin/env bash
# evopipe.sh — the EvoPipe benchmark (issue 6): builds bench/evopipe.c (CPU: prep throughput,
# mmCIF reading, time per cropped example from the cache vs from the files) and
# bench/evopipe.cu (GPU: loader + staging feeding a synthetic step, data-wait fraction),
# runs them with gemmi's peer timing (bench/evopipe_gemmi.py, /usr/bin/python3 with
# Debian's python3-gemmi) and merges everything into bench/results/evopipe.json (DESIGN.md
# format). From the repo root:
#   bench/evopipe.sh build        build into $BUILD (default build-bench): the library via the
#                                 Makefile (NO_CUDA=1), then the two programs; the data
#                                 libraries are linked statically so the binaries also run
#                                 on the device machine
#   bench/evopipe.sh cpu          CPU part + gemmi here        → $RES/evopipe_cpu.json, _gemmi.json
#   bench/evopipe.sh gpu          GPU part (on a GPU machine)   → $RES/evopipe_gpu.json (+ the CPU
#                                 part there as $RES/evopipe_cpu_gpuhost.json when CPU_TOO=1)
#   bench/evopipe.sh merge        → bench/results/evopipe.json
#   bench/evopipe.sh all          build, cpu, gpu (when a GPU is present), merge
# Environment: DATA (default ../shared/data), BUILD, RES (raw results, default
# $BUILD/bench/results), THREADS (prep threads, default 1,2), WORKERS (loader workers,
# default 1,2), STEPS (example steps, default 232), REPS (parse passes, default 5),
# GPU_STEPS (default 100), STEP_MS (default 20,100), GPU_WORKERS (default 4).
#
# On the device machine ../shared does not travel: copy mmcif/, msa/, ccd/ into an ignored
# folder (build-bench/evodata) and carry it with build-bench/bench; the run of 2026-11-29 was
#   DATA=build-bench/evodata RES=$OUT THREADS=1,2,4,8,16 WORKERS=1,2,4,8 REPS=3 CPU_TOO=1 \
#     bench/evopipe.sh gpu        (carry: build-bench/bench, build-bench/evodata)
# then the files of $OUT copied into build-bench/bench/results and `bench/evopipe.sh merge`.
#
# Build rule (what a Makefile target would do; the Makefile builds no bench/ programs):
#   make BUILD=$BUILD NO_CUDA=1 $BUILD/libmegafold.a
#   gcc  -std=c11 -O2 -g $WARN -Iinclude -Isrc -pthread bench/evopipe.c $BUILD/libmegafold.a \
#        -Wl,-Bstatic -llmdb -lzstd -ljansson -lz -Wl,-Bdynamic -lm -pthread
#   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc bench/evopipe.cu \
#        src/ops/cuda/staging.cu src/ops/cuda/device.cu $BUILD/libmegafold.a \
#        <liblmdb.a libzstd.a libjansson.a libz.a by path> -lm -lpthread
set -uo pipefail
BUILD=${BUILD:-build-bench}
DATA=${DATA:-../shared/data}
RES=${RES:-$BUILD/bench/results}
THREADS=${THREADS:-1,2}
WORKERS=${WORKERS:-1,2}
STEPS=${STEPS:-232}
REPS=${REPS:-5}
GPU_STEPS=${GPU_STEPS:-100}
STEP_MS=${STEP_MS:-20,100}
GPU_WORKERS=${GPU_WORKERS:-4}
export NCCL_NVLS_ENABLE=0
WARN="-Wall -Wextra -Wshadow -Wmissing-prototypes -Wstrict-prototypes"
STATIC_LIBS="-Wl,-Bstatic -llmdb -lzstd -ljansson -lz -Wl,-Bdynamic -lm -pthread"
# nvcc reorders -l options, so it gets the archives by path
STATIC_A="$(for l in lmdb zstd jansson z; do printf '%s ' "$(gcc -print-file-name=lib$l.a)"; done)"
NVCC="nvcc -std=c++17 -O3 -g -lineinfo -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc -Xcompiler -Wall,-Wextra"
CPU_BIN="$BUILD/bench/evopipe"
GPU_BIN="$BUILD/bench/evopipe_gpu"
mkdir -p "$RES"

build() {
  make --no-print-directory BUILD="$BUILD" NO_CUDA=1 -j"$(nproc)" "$BUILD/libmegafold.a" >"$RES/build.log" 2>&1 ||
    { tail -30 "$RES/build.log"; echo "evopipe.sh: library build failed"; return 1; }
  mkdir -p "$BUILD/bench" "$BUILD/bench/cuda"
  gcc -std=c11 -O2 -g $WARN -Iinclude -Isrc -pthread bench/evopipe.c -o "$CPU_BIN" \
    "$BUILD/libmegafold.a" $STATIC_LIBS || return 1
  if command -v nvcc >/dev/null 2>&1; then
    $NVCC -c src/ops/cuda/staging.cu -o "$BUILD/bench/cuda/staging.o" &&
      $NVCC -c src/ops/cuda/device.cu -o "$BUILD/bench/cuda/device.o" &&
      $NVCC bench/evopipe.cu -o "$GPU_BIN" "$BUILD/bench/cuda/staging.o" "$BUILD/bench/cuda/device.o" \
        "$BUILD/libmegafold.a" $STATIC_A -lm -lpthread ||
      return 1
  else
    echo "evopipe.sh: no nvcc, GPU part not built"
  fi
}

run_cpu() {
  local tag=${1:-cpu}
  echo "== megafold (CPU part) on $(hostname): $(nproc) cores"
  "$CPU_BIN" --data "$DATA" --threads "$THREADS" --workers "$WORKERS" --steps "$STEPS" \
    --reps "$REPS" --json "$RES/evopipe_$tag.json" || return 1
  if /usr/bin/python3 -c 'import gemmi' 2>/dev/null; then
    echo "== gemmi (same files, same machine)"
    /usr/bin/python3 bench/evopipe_gemmi.py --data "$DATA" --reps "$REPS" \
      --json "$RES/evopipe_gemmi${tag#cpu}.json"
  else
    echo "== gemmi: /usr/bin/python3 has no gemmi here, peer skipped"
  fi
}

run_gpu() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
  "$GPU_BIN" --data "$DATA" --steps "$GPU_STEPS" --step-ms "$STEP_MS" --workers "$GPU_WORKERS" \
    --json "$RES/evopipe_gpu.json"
}

merge() {
  python3 - "$RES" <<'EOF'
import json, os, sys, datetime
res = sys.argv[1]
def load(name):
    p = os.path.join(res, name)
    return json.load(open(p)) if os.path.exists(p) else None
cpu, gem, gpu = load('evopipe_cpu.json'), load('evopipe_gemmi.json'), load('evopipe_gpu.json')
cpu2, gem2 = load('evopipe_cpu_gpuhost.json'), load('evopipe_gemmi_gpuhost.json')
rows = []
cmd_cpu = 'bench/evopipe.sh cpu  (build-bench/bench/evopipe --threads 1,2 --workers 1,2 --steps 232 --reps 5; /usr/bin/python3 bench/evopipe_gemmi.py --reps 5)'
cmd_gpu = ('DATA=build-bench/evodata RES=$OUT THREADS=1,2,4,8,16 WORKERS=1,2,4,8 REPS=3 CPU_TOO=1 '
           'bench/evopipe.sh gpu  (device machine; runs build-bench/bench/evopipe_gpu --steps 100 '
           '--step-ms 20,100 --workers 4, whose no-cache contrast is the files source with 8 '
           'workers at a 20 ms step)')
cmd_cpu2 = ('same call as the GPU part (CPU_TOO=1): build-bench/bench/evopipe --threads 1,2,4,8,16 '
            '--workers 1,2,4,8 --steps 232 --reps 3 on the device machine (no gemmi there)')
for blob, machine, cmd in ((cpu, 'cpu host', cmd_cpu), (gem, 'cpu host', cmd_cpu),
                           (cpu2, 'gpu host', cmd_cpu2), (gem2, 'gpu host', cmd_cpu2),
                           (gpu, 'gpu host', cmd_gpu)):
    for r in (blob or {}).get('rows', []):
        r = dict(r)
        r.setdefault('machine', machine)
        r['command'] = cmd
        rows.append(r)
out = {'bench': 'evopipe',
       'gpu': (gpu or {}).get('gpu', 'not run'),
       'cpu': (cpu or {}).get('cpu', 'unknown'),
       'gpu_host_cpu': (cpu2 or {}).get('cpu', 'not run'),
       'gemmi_version': (gem or {}).get('gemmi_version'),
       'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d'),
       'command': 'bench/evopipe.sh all  (cpu part and gemmi on the cpu host; gpu part on the device machine)',
       'data': '../shared/data: 116 mmCIF (gz) + 139 a3m (gz), CCD subset',
       'goals': {'cached_vs_files_min_ratio': 20, 'data_wait_max_frac': 0.01,
                 'mmcif_parse_vs_gemmi': '>= 1x'},
       'rows': rows}
def pick(machine, variant, what, **kw):
    for r in rows:
        if r['machine'] == machine and r['variant'] == variant and r['what'] == what and \
                all(r.get(k) == v for k, v in kw.items()):
            return r
summary = {}
c, f = pick('cpu host', 'megafold', 'example'), pick('cpu host', 'no-cache', 'example')
if c and f:
    summary['cached_vs_files_1thread_median'] = round(f['median_ms'] / c['median_ms'], 2)
    summary['cached_vs_files_1thread_mean'] = round(f['mean_ms'] / c['mean_ms'], 2)
    summary['cached_vs_files_goal_met'] = summary['cached_vs_files_1thread_median'] >= 20
for what in ('cif_parse', 'structure'):
    m, g = pick('cpu host', 'megafold', what), pick('cpu host', 'gemmi', what)
    if m and g:
        summary['%s_speedup_vs_gemmi' % what] = round(g['seconds'] / m['seconds'], 2)
loops = [r for r in rows if r['what'] == 'train_loop' and r['variant'] == 'megafold']
if loops:
    summary['data_wait_frac_max'] = max(r['data_wait_frac'] for r in loops)
    summary['data_wait_goal_met'] = summary['data_wait_frac_max'] < 0.01
out['summary'] = summary
os.makedirs('bench/results', exist_ok=True)
json.dump(out, open('bench/results/evopipe.json', 'w'), indent=1)
print('wrote bench/results/evopipe.json with %d rows' % len(rows))
EOF
}

case "${1:-all}" in
  build) build ;;
  cpu) run_cpu cpu ;;
  gpu) run_gpu && if [[ "${CPU_TOO:-0}" == 1 ]]; then run_cpu cpu_gpuhost; fi ;;
  merge) merge ;;
  all)
    build || exit 1
    run_cpu cpu || exit 1
    if nvidia-smi >/dev/null 2>&1; then run_gpu; fi
    merge
    ;;
  *) echo "usage: bench/evopipe.sh build|cpu|gpu|merge|all"; exit 2 ;;
esac
