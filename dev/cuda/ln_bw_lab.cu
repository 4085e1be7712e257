/* ln_bw_lab.cu — why the LayerNorm row forward (mf_ln_rows_cuda, C = 128, bf16 in/out,
 * fp32 mean/rstd) reaches only about half of the copy bandwidth, and faster versions.
 * In ONE run, at M = 589824 (768²) and 147456 (384²) rows, each version is timed with
 * CUDA events (median of `reps` after 3 warm-ups) and printed as ms, GB/s and % of a
 * cudaMemcpy D2D of the same activation bytes measured in the same run (read + write
 * counted; the LN versions also count 8 bytes of statistics per row):
 *   v0   the library forward, variant 1: ln_rows_vec_kernel<4, 8> (per-warp contiguous
 *        row shares of a persistent grid, 8 rows per step, 8 bytes per lane, __ldcs);
 *   v1   a pure copy with v0's access pattern (no LN math): the pattern or the math?
 *   v1w  v1 with 16 bytes per lane (2 rows per load instruction): the access width?
 *   v2   a pure copy, grid-stride, 16 bytes per thread, 4 in flight, 8 blocks per SM;
 *   v3*  the half-warp LN kernel (src/ops/cuda/ln_rows_hw.cuh): 16 lanes per row,
 *        16 bytes = 8 channels per lane, xor-shuffle reductions over the half-warp, rows in
 *        grid-stride order, U row pairs per warp in flight; a: U = 2, b: U = 4 on a
 *        persistent grid, c: U = 4 on a one-pass grid (no loop);
 *   v4*  v3 with streaming stores (__stcs) for y (a: U = 2, b: U = 4);
 *   v5*  v3 with per-warp contiguous row shares (v0's order; a: U = 2, b: U = 4);
 *   v6   v3a capped at 32 registers (8 blocks of 8 warps per SM instead of 4);
 *   v7   v3 with U = 8 (64 KiB → 128 KiB in flight per SM);
 *   v8*  the cp.async kernel (ln_rows_hw.cuh): v3's rows, order and arithmetic, the loads
 *        through a per-thread ring of S stages × U groups in shared memory (no barrier:
 *        each thread reads back only its own slots), so S·U·16 bytes per thread stay in
 *        flight while it reduces and stores; a: U = 2, S = 4; b: U = 1, S = 8; c: U = 2,
 *        S = 3 at 6 blocks/SM; d: U = 1, S = 4 at 8 blocks/SM;
 *   v9*  the bulk-copy kernel (ln_rows_hw.cuh): per block, chunks of RB rows in grid-stride
 *        order, one cp.async.bulk (TMA linear copy) per chunk into a ring of S stages with
 *        full/empty mbarriers; a: RB = 64, S = 2; b: RB = 32, S = 4; c: RB = 16, S = 4 at
 *        8 blocks/SM;
 *   lib2 the library's variant 2 (mf_ln_rows_cuda_set_variant(2): v4b's kernel, the
 *        default), lib3 its variant 3 (v8a's kernel), lib4 its variant 4 (v9b's kernel).
 * Every LN version is checked against v0 in the same run: y within 1 bf16 ulp of max(|y|, 1)
 * everywhere (an element that cancels to near 0 in FULL mode, t·γ + β, moves by many of
 * its own ulps when the statistics differ in their last bit: the first run, 2026-11-30,
 * showed up to 32 such ulps at M = 768² with the same statistics to 2e-7),
 * mean within 1e-6 relative to max(|mean|, 1/rstd) (the row's scale: a plain relative
 * error is meaningless for a mean near 0), rstd within 1e-6 relative; FULL at both sizes,
 * and at M = 147456 and M = 1003 also SCALE, NONE and the use_saved path (statistics
 * read from v0's). The lab exits 1 on any mismatch, printing the worst errors.
 * Not a test of the CPU reference (tests/gpu/test_fusion_gpu.cu checks the library
 * variants against the double CPU LayerNorm).
 *   build/dev/ln_bw_lab [reps]        (default 30) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/device.h"
#include "ops/cuda/gpu.h"
#include "ops/cuda/ln_linear_cuda.h"
#include "ops/cuda/ln_rows_hw.cuh"

#define C_LAB 128

typedef struct {
  int64_t M;
  bf16 *x, *y, *g, *b; /* x, y (M, C); g, b (C) */
  float *mean, *rstd;   /* (M); NULL: not written */
  int mode, use_saved;
} lab_args;

/* ---------------------------------------------------------------- copy kernels */

/* v1 / v1w: x → y (rows of 256 bytes), each warp of a persistent grid takes an equal
 * contiguous share of the rows, 8 rows (2 KiB) per step, B bytes per lane per access
 * (B = 8: one row per load instruction, as ln_rows_vec_kernel<4, 8>). */
template <int B>
static __global__ void __launch_bounds__(256, 4)
    copy_warp_kernel(uint8_t *__restrict__ y, const uint8_t *__restrict__ x, int64_t rows) {
  typedef typename std::conditional<B == 16, uint4, uint2>::type T;
  constexpr int N = 2048 / (32 * B); /* accesses per lane per step */
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int64_t W = (int64_t)gridDim.x * 8, gw = (int64_t)blockIdx.x * 8 + w;
  const int64_t rb = rows * gw / W, re = rows * (gw + 1) / W;
  for (int64_t r0 = rb; r0 < re; r0 += 8) {
    T t[N];
#pragma unroll
    for (int k = 0; k < N; k++) {
      const int64_t off = (int64_t)k * 32 * B + lane * B;
      if (r0 + off / 256 < re) t[k] = __ldcs((const T *)(x + r0 * 256 + off));
    }
#pragma unroll
    for (int k = 0; k < N; k++) {
      const int64_t off = (int64_t)k * 32 * B + lane * B;
      if (r0 + off / 256 < re) *(T *)(y + r0 * 256 + off) = t[k];
    }
  }
}

/* v2: n16 16-byte words x → y, grid-stride, U words per thread in flight. */
template <int U>
static __global__ void __launch_bounds__(256, 8)
    copy_gs_kernel(uint4 *__restrict__ y, const uint4 *__restrict__ x, int64_t n16) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i0 < n16; i0 += stride * U) {
    uint4 t[U];
#pragma unroll
    for (int j = 0; j < U; j++)
      if (i0 + j * stride < n16) t[j] = __ldcs(x + i0 + j * stride);
#pragma unroll
    for (int j = 0; j < U; j++)
      if (i0 + j * stride < n16) y[i0 + j * stride] = t[j];
  }
}

/* ---------------------------------------------------------------- launchers */

/* What the last launcher launched (printed next to its timing; -1: not known, e.g. the
 * library's kernels and the memcpy). */
static int g_regs = -1, g_occ = -1;
static long long g_blocks = -1;

/* Resident blocks per SM of `kernel` at 256 threads (at least 1); *regs: its registers. */
template <typename K>
static int lab_occ(K kernel, int *regs) {
  int occ = 0;
  MF_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, 256, 0));
  cudaFuncAttributes fa;
  MF_CHECK_CUDA(cudaFuncGetAttributes(&fa, kernel));
  *regs = fa.numRegs;
  return occ < 1 ? 1 : occ;
}
static void lab_info(int regs, int occ, long long blocks) {
  g_regs = regs;
  g_occ = occ;
  g_blocks = blocks;
}

static void run_lib1(const lab_args *a) {
  mf_ln_rows_cuda_set_variant(1);
  mf_ln_rows_cuda(a->y, a->mean, a->rstd, a->x, a->g, a->b, a->M, C_LAB, (mf_ln_mode)a->mode,
                  a->use_saved, 0);
}
static void run_lib_v(const lab_args *a, int v) {
  mf_ln_rows_cuda_set_variant(v);
  mf_ln_rows_cuda(a->y, a->mean, a->rstd, a->x, a->g, a->b, a->M, C_LAB, (mf_ln_mode)a->mode,
                  a->use_saved, 0);
  mf_ln_rows_cuda_set_variant(1);
}
static void run_lib2(const lab_args *a) { run_lib_v(a, 2); }
static void run_lib3(const lab_args *a) { run_lib_v(a, 3); }
static void run_lib4(const lab_args *a) { run_lib_v(a, 4); }
template <int B>
static void run_copy_warp(const lab_args *a) {
  static int occ = 0, regs = 0;
  if (!occ) occ = lab_occ(copy_warp_kernel<B>, &regs);
  const int64_t need = (a->M + 63) / 64, full = (int64_t)mf_sm_count() * occ;
  const unsigned blocks = (unsigned)(need < full ? need : full);
  lab_info(regs, occ, blocks);
  copy_warp_kernel<B><<<blocks, 256>>>((uint8_t *)a->y, (const uint8_t *)a->x, a->M);
  MF_CHECK_LAUNCH();
}
static void run_copy_gs(const lab_args *a) {
  const int64_t n16 = a->M * C_LAB * 2 / 16;
  int64_t blocks = (n16 + 256 * 4 - 1) / (256 * 4);
  static int occ = 0, regs = 0;
  if (!occ) occ = lab_occ(copy_gs_kernel<4>, &regs);
  const int64_t full = (int64_t)mf_sm_count() * 8;
  if (blocks > full) blocks = full;
  lab_info(regs, occ, blocks);
  copy_gs_kernel<4><<<(unsigned)blocks, 256>>>((uint4 *)a->y, (const uint4 *)a->x, n16);
  MF_CHECK_LAUNCH();
}
static void run_memcpy(const lab_args *a) {
  MF_CHECK_CUDA(cudaMemcpyAsync(a->y, a->x, (size_t)a->M * C_LAB * 2, cudaMemcpyDeviceToDevice, 0));
}
/* the half-warp kernel; ONEPASS: one pass over the row pairs (no cap on the grid) */
template <int U, bool ST, bool CG, int MINB, bool ONEPASS>
static void run_hw(const lab_args *a) {
  static int occ = 0, regs = 0;
  if (!occ) occ = lab_occ(mf_ln_rows_hw_kernel<16, U, ST, CG, MINB>, &regs);
  const unsigned blocks = mf_ln_hw_blocks(a->M, 16, U, ONEPASS ? 0 : (int64_t)mf_sm_count() * occ);
  lab_info(regs, occ, blocks);
  mf_ln_rows_hw_kernel<16, U, ST, CG, MINB><<<blocks, MF_LN_HW_THREADS>>>(
      a->y, a->mean, a->rstd, a->x, a->g, a->b, a->M, a->mode, a->use_saved);
  MF_CHECK_LAUNCH();
}

/* the cp.async kernel, persistent grid */
template <int U, int S, int MINB>
static void run_hwcp(const lab_args *a) {
  static int occ = 0, regs = 0;
  if (!occ) occ = lab_occ(mf_ln_rows_hw_cp_kernel<16, U, S, MINB>, &regs);
  const unsigned blocks = mf_ln_hw_blocks(a->M, 16, U, (int64_t)mf_sm_count() * occ);
  lab_info(regs, occ, blocks);
  mf_ln_rows_hw_cp_kernel<16, U, S, MINB><<<blocks, MF_LN_HW_THREADS>>>(
      a->y, a->mean, a->rstd, a->x, a->g, a->b, a->M, a->mode, a->use_saved);
  MF_CHECK_LAUNCH();
}

/* the bulk-copy kernel, persistent grid */
template <int RB, int S, int MINB>
static void run_hwbulk(const lab_args *a) {
  static int occ = 0, regs = 0;
  if (!occ) occ = lab_occ(mf_ln_rows_hw_bulk_kernel<16, RB, S, MINB>, &regs);
  const unsigned blocks = mf_ln_hw_bulk_blocks(a->M, RB, (int64_t)mf_sm_count() * occ);
  lab_info(regs, occ, blocks);
  mf_ln_rows_hw_bulk_kernel<16, RB, S, MINB><<<blocks, MF_LN_HW_THREADS>>>(
      a->y, a->mean, a->rstd, a->x, a->g, a->b, a->M, a->mode, a->use_saved);
  MF_CHECK_LAUNCH();
}

typedef void (*run_fn)(const lab_args *);
typedef struct {
  const char *name, *what;
  run_fn fn;
  int ln; /* 1: a LayerNorm (validated, stats bytes counted); 0: a copy */
} version;

static const version k_versions[] = {
    {"v0", "lib variant 1: ln_rows_vec_kernel<4,8>", run_lib1, 1},
    {"v1", "copy, v0 pattern (warp-contig, 8 B/lane)", run_copy_warp<8>, 0},
    {"v1w", "copy, warp-contig, 16 B/lane", run_copy_warp<16>, 0},
    {"v2", "copy, grid-stride, 16 B, 4 in flight", run_copy_gs, 0},
    {"v3a", "hw LN, grid-stride, U=2, persistent", run_hw<2, false, false, 4, false>, 1},
    {"v3b", "hw LN, grid-stride, U=4, persistent", run_hw<4, false, false, 4, false>, 1},
    {"v3c", "hw LN, grid-stride, U=4, one-pass grid", run_hw<4, false, false, 4, true>, 1},
    {"v4a", "v3a + __stcs y", run_hw<2, true, false, 4, false>, 1},
    {"v4b", "v3b + __stcs y", run_hw<4, true, false, 4, false>, 1},
    {"v5a", "hw LN, warp-contig, U=2, persistent", run_hw<2, false, true, 4, false>, 1},
    {"v5b", "hw LN, warp-contig, U=4, persistent", run_hw<4, false, true, 4, false>, 1},
    {"v6", "v3a at 8 blocks/SM (<= 32 regs)", run_hw<2, false, false, 8, false>, 1},
    {"v7", "hw LN, grid-stride, U=8, persistent", run_hw<8, false, false, 4, false>, 1},
    {"v8a", "hw LN, cp.async ring U=2 S=4 (32 KiB/blk), 4 blk/SM", run_hwcp<2, 4, 4>, 1},
    {"v8b", "hw LN, cp.async ring U=1 S=8 (32 KiB/blk), 4 blk/SM", run_hwcp<1, 8, 4>, 1},
    {"v8c", "hw LN, cp.async ring U=2 S=3 (24 KiB/blk), 6 blk/SM", run_hwcp<2, 3, 6>, 1},
    {"v8d", "hw LN, cp.async ring U=1 S=4 (16 KiB/blk), 8 blk/SM", run_hwcp<1, 4, 8>, 1},
    {"v9a", "hw LN, bulk copy ring RB=64 S=2 (32 KiB/blk)", run_hwbulk<64, 2, 4>, 1},
    {"v9b", "hw LN, bulk copy ring RB=32 S=4 (32 KiB/blk)", run_hwbulk<32, 4, 4>, 1},
    {"v9c", "hw LN, bulk copy ring RB=16 S=4 (16 KiB/blk), 8/SM", run_hwbulk<16, 4, 8>, 1},
    {"lib2", "lib variant 2 (= v4b, the default)", run_lib2, 1},
    {"lib3", "lib variant 3 (= v8a)", run_lib3, 1},
    {"lib4", "lib variant 4 (= v9b)", run_lib4, 1},
};
#define N_VERSIONS ((int)(sizeof k_versions / sizeof k_versions[0]))

/* ---------------------------------------------------------------- data, checks */

static __device__ __forceinline__ uint64_t lab_hash(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
/* x[i] = bf16(scale·N(0,1) + offset) (Box–Muller on a hash of (seed, i)) */
static __global__ void fill_normal_kernel(bf16 *x, int64_t n, uint64_t seed, float scale, float offset) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const uint64_t h = lab_hash(seed * 0x100000001b3ull ^ (uint64_t)i);
    const float u1 = ((float)(h >> 40) + 1.0f) * (1.0f / 16777217.0f);
    const float u2 = (float)((h >> 16) & 0xffffff) * (1.0f / 16777216.0f);
    const float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    x[i] = __float2bfloat16_rn(scale * z + offset);
  }
}

/* res[0] = max |ulp distance| of y vs yr, res[1] = count of distances > 1, res[2] / res[3] =
 * max mean / rstd error as fp32 bits (non-negative; NaN → +inf) when m != NULL. */
static __global__ void compare_kernel(unsigned long long *res, const bf16 *y, const bf16 *yr, int64_t n,
                                      const float *m, const float *mr, const float *r,
                                      const float *rr, int64_t M) {
  const int64_t t0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, st = (int64_t)gridDim.x * blockDim.x;
  unsigned dmax = 0;
  unsigned long long bad = 0;
  for (int64_t i = t0; i < n; i += st) {
    const unsigned short a = __bfloat16_as_ushort(y[i]), b = __bfloat16_as_ushort(yr[i]);
    const bool nan = ((a & 0x7f80) == 0x7f80 && (a & 0x7f)) || ((b & 0x7f80) == 0x7f80 && (b & 0x7f));
    /* in ulps of max(|yr|, 1): a value that cancels to near 0 (t·γ + β) may differ by many
     * of its own ulps when the statistics differ in their last bit */
    const float fa = __bfloat162float(y[i]), fb = __bfloat162float(yr[i]);
    const float ulp = ldexpf(1.0f, ilogbf(fmaxf(fabsf(fb), 1.0f)) - 7);
    const unsigned d = nan ? 0xffffu : (unsigned)ceilf(fabsf(fa - fb) / ulp);
    dmax = d > dmax ? d : dmax;
    bad += d > 1;
  }
  float em = 0.0f, er = 0.0f;
  if (m)
    for (int64_t i = t0; i < M; i += st) {
      const float scale = fmaxf(fabsf(mr[i]), 1.0f / rr[i]);
      float e1 = fabsf(m[i] - mr[i]) / scale, e2 = fabsf(r[i] - rr[i]) / fabsf(rr[i]);
      if (!(e1 <= 1e30f)) e1 = INFINITY;
      if (!(e2 <= 1e30f)) e2 = INFINITY;
      em = fmaxf(em, e1);
      er = fmaxf(er, e2);
    }
  atomicMax(&res[0], (unsigned long long)dmax);
  if (bad) atomicAdd(&res[1], bad);
  atomicMax(&res[2], (unsigned long long)__float_as_uint(em));
  atomicMax(&res[3], (unsigned long long)__float_as_uint(er));
}

typedef struct {
  unsigned long long ulp, bad;
  float em, er;
} cmp_res;

static cmp_res compare(const lab_args *t, const lab_args *ref, unsigned long long *res_d) {
  MF_CHECK_CUDA(cudaMemset(res_d, 0, 4 * sizeof(unsigned long long)));
  const bool stats = !t->use_saved && t->mean;
  compare_kernel<<<mf_sm_count() * 4, 256>>>(res_d, t->y, ref->y, t->M * C_LAB, stats ? t->mean : NULL,
                                             ref->mean, t->rstd, ref->rstd, t->M);
  MF_CHECK_LAUNCH();
  unsigned long long h[4];
  MF_CHECK_CUDA(cudaMemcpy(h, res_d, sizeof h, cudaMemcpyDeviceToHost));
  cmp_res r;
  r.ulp = h[0];
  r.bad = h[1];
  unsigned a = (unsigned)h[2], b = (unsigned)h[3];
  memcpy(&r.em, &a, 4);
  memcpy(&r.er, &b, 4);
  return r;
}
static int cmp_ok(cmp_res r) { return r.ulp <= 1 && r.bad == 0 && r.em <= 1e-6f && r.er <= 1e-6f; }

static float median_ms(run_fn fn, const lab_args *a, int reps) {
  cudaEvent_t e0, e1;
  MF_CHECK_CUDA(cudaEventCreate(&e0));
  MF_CHECK_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < 3; i++) fn(a);
  float *t = (float *)malloc((size_t)reps * sizeof(float));
  MF_CHECK_PTR(t);
  for (int r = 0; r < reps; r++) {
    MF_CHECK_CUDA(cudaEventRecord(e0, 0));
    fn(a);
    MF_CHECK_CUDA(cudaEventRecord(e1, 0));
    MF_CHECK_CUDA(cudaEventSynchronize(e1));
    MF_CHECK_CUDA(cudaEventElapsedTime(&t[r], e0, e1));
  }
  for (int i = 1; i < reps; i++) /* insertion sort */
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      const float s = t[j];
      t[j] = t[j - 1];
      t[j - 1] = s;
    }
  const float med = reps % 2 ? t[reps / 2] : 0.5f * (t[reps / 2 - 1] + t[reps / 2]);
  free(t);
  MF_CHECK_CUDA(cudaEventDestroy(e0));
  MF_CHECK_CUDA(cudaEventDestroy(e1));
  return med;
}

static const char *mode_str(int m) { return m == MF_LN_FULL ? "FULL" : m == MF_LN_SCALE ? "SCALE" : "NONE"; }

/* One problem size: validation of every LN version (FULL; with `extra` also SCALE, NONE,
 * use_saved), then timing (with timing). Returns the number of failed checks. */
static int lab_size(int64_t M, int reps, int extra, int timing, const bf16 *g, const bf16 *b,
                    unsigned long long *res_d) {
  const size_t act = (size_t)M * C_LAB * 2;
  lab_args ref = {M, NULL, NULL, (bf16 *)g, (bf16 *)b, NULL, NULL, MF_LN_FULL, 0};
  lab_args t = ref;
  MF_CHECK_CUDA(cudaMalloc(&ref.x, act));
  MF_CHECK_CUDA(cudaMalloc(&ref.y, act));
  MF_CHECK_CUDA(cudaMalloc(&t.y, act));
  MF_CHECK_CUDA(cudaMalloc(&ref.mean, (size_t)M * 4));
  MF_CHECK_CUDA(cudaMalloc(&ref.rstd, (size_t)M * 4));
  MF_CHECK_CUDA(cudaMalloc(&t.mean, (size_t)M * 4));
  MF_CHECK_CUDA(cudaMalloc(&t.rstd, (size_t)M * 4));
  t.x = ref.x;
  fill_normal_kernel<<<mf_sm_count() * 8, 256>>>(ref.x, M * C_LAB, 1 + (uint64_t)M, 1.5f, 0.3f);
  MF_CHECK_LAUNCH();
  int fails = 0;
  printf("\nM = %lld rows, C = %d: validation against v0\n", (long long)M, C_LAB);
  const int nmodes = extra ? 4 : 1;
  for (int k = 0; k < nmodes; k++) {
    /* k = 0 FULL, 1 SCALE, 2 NONE, 3 FULL from v0's saved statistics */
    const int mode = k == 1 ? MF_LN_SCALE : k == 2 ? MF_LN_NONE : MF_LN_FULL;
    ref.mode = t.mode = mode;
    ref.use_saved = t.use_saved = 0;
    run_lib1(&ref);
    if (k == 3) { /* the reference recomputes y from its own statistics; so do the versions */
      ref.use_saved = t.use_saved = 1;
      run_lib1(&ref);
    }
    for (int v = 0; v < N_VERSIONS; v++) {
      if (!k_versions[v].ln) continue;
      lab_args tv = t;
      if (k == 3) { /* statistics read from v0's */
        tv.mean = ref.mean;
        tv.rstd = ref.rstd;
      }
      MF_CHECK_CUDA(cudaMemset(tv.y, 0xff, act)); /* NaN poison */
      if (k != 3) {
        MF_CHECK_CUDA(cudaMemset(tv.mean, 0xff, (size_t)M * 4));
        MF_CHECK_CUDA(cudaMemset(tv.rstd, 0xff, (size_t)M * 4));
      }
      k_versions[v].fn(&tv);
      MF_CHECK_CUDA(cudaDeviceSynchronize());
      const cmp_res r = compare(&tv, &ref, res_d);
      const int ok = cmp_ok(r);
      fails += !ok;
      printf("  %-5s %-5s%s: y max %llu ulp (%llu > 1), mean err %.2e, rstd err %.2e  %s\n",
             k_versions[v].name, mode_str(mode), k == 3 ? " saved" : "      ", r.ulp, r.bad,
             (double)r.em, (double)r.er, ok ? "ok" : "MISMATCH");
    }
  }
  if (timing) {
    ref.mode = t.mode = MF_LN_FULL;
    ref.use_saved = t.use_saved = 0;
    const float cms = median_ms(run_memcpy, &t, reps);
    const double cbytes = 2.0 * act, cgbs = cbytes / cms / 1e6;
    printf("\nM = %lld rows, C = %d: median of %d (ms; GB/s = (read + write) / time; %% of the "
           "memcpy's GB/s)\n", (long long)M, C_LAB, reps);
    printf("  %-5s %-48s %9s %9s %7s %5s %6s %7s\n", "", "version", "ms", "GB/s", "%copy", "regs",
           "blk/SM", "blocks");
    printf("  %-5s %-48s %9.4f %9.1f %6.1f%%\n", "copy", "cudaMemcpy D2D", (double)cms, cgbs, 100.0);
    for (int v = 0; v < N_VERSIONS; v++) {
      lab_info(-1, -1, -1);
      const float ms = median_ms(k_versions[v].fn, &t, reps);
      const double bytes = cbytes + (k_versions[v].ln ? 8.0 * (double)M : 0.0), gbs = bytes / ms / 1e6;
      printf("  %-5s %-48s %9.4f %9.1f %6.1f%% %5d %6d %7lld\n", k_versions[v].name,
             k_versions[v].what, (double)ms, gbs, 100.0 * gbs / cgbs, g_regs, g_occ, g_blocks);
    }
  }
  MF_CHECK_CUDA(cudaFree(ref.x));
  MF_CHECK_CUDA(cudaFree(ref.y));
  MF_CHECK_CUDA(cudaFree(t.y));
  MF_CHECK_CUDA(cudaFree(ref.mean));
  MF_CHECK_CUDA(cudaFree(ref.rstd));
  MF_CHECK_CUDA(cudaFree(t.mean));
  MF_CHECK_CUDA(cudaFree(t.rstd));
  return fails;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 30;
  if (reps < 1) reps = 1;
  if (mf_cuda_init(0) != MF_OK) {
    fprintf(stderr, "ln_bw_lab: no CUDA device\n");
    return 1;
  }
  printf("ln_bw_lab: LayerNorm row forward bandwidth, C = %d, bf16 in/out, fp32 mean/rstd\n", C_LAB);
  const int def = mf_ln_rows_cuda_set_variant(-1);
  bf16 *g = NULL, *b = NULL;
  MF_CHECK_CUDA(cudaMalloc(&g, C_LAB * 2));
  MF_CHECK_CUDA(cudaMalloc(&b, C_LAB * 2));
  fill_normal_kernel<<<1, C_LAB>>>(g, C_LAB, 2, 0.2f, 1.0f);
  fill_normal_kernel<<<1, C_LAB>>>(b, C_LAB, 3, 0.2f, 0.0f);
  MF_CHECK_LAUNCH();
  unsigned long long *res_d = NULL;
  MF_CHECK_CUDA(cudaMalloc(&res_d, 4 * sizeof(unsigned long long)));
  int fails = 0;
  fails += lab_size(589824, reps, 0, 1, g, b, res_d);
  fails += lab_size(147456, reps, 1, 1, g, b, res_d);
  fails += lab_size(1003, reps, 1, 0, g, b, res_d);
  fails += lab_size(1, reps, 1, 0, g, b, res_d);
  mf_ln_rows_cuda_set_variant(def);
  MF_CHECK_CUDA(cudaFree(g));
  MF_CHECK_CUDA(cudaFree(b));
  MF_CHECK_CUDA(cudaFree(res_d));
  printf("\nln_bw_lab: %s (%d mismatching checks)\n", fails ? "FAILED" : "all versions match v0", fails);
  return fails ? 1 : 0;
}
