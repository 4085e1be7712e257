/* ln_rows_hw.cuh — the "half-warp" LayerNorm row forwards: mf_ln_rows_cuda's variants 2
 * (mf_ln_rows_hw_kernel: loads into registers), 3 (mf_ln_rows_hw_cp_kernel: a per-thread
 * cp.async ring in shared memory) and 4 (mf_ln_rows_hw_bulk_kernel: a ring of
 * cp.async.bulk chunks with mbarriers) — ln_linear.cu instantiates one configuration of
 * each — and the versions v3–v9 of dev/cuda/ln_bw_lab.cu (which instantiates the others).
 * Not a public header; C code never includes it. Not the CPU reference
 * (src/ops/cpu/layernorm.c).
 *
 * Layout: LPR lanes per row, 8 channels (16 bytes) per lane, so C = 8·LPR (LPR = 8, 16,
 * 32: C = 64, 128, 256) and one warp covers RPW = 32 / LPR rows per 16-byte load; the
 * warp's rows form a "group" of RPW consecutive rows. Each warp loads U groups before it
 * reduces any (U·16 bytes per lane in flight), reduces each row over its LPR lanes with
 * xor shuffles (offsets LPR/2 … 1), and stores 16 bytes per lane.
 * Row order: CONTIG = false: grid-stride — group g of step k is taken by warp
 * g mod W (W warps in the grid), so consecutive warps take consecutive groups and every
 * load instruction of the grid covers one contiguous stretch of x; CONTIG = true: each
 * warp takes an equal contiguous share of the groups (as ln_rows_vec_kernel does).
 * Arithmetic: as ln_rows_vec_kernel (mean = Σx/C, var = Σ(x − mean)²/C two-pass from
 * registers, rstd = 1/sqrt(var + eps), the element-wise roundings pinned with __fsub_rn /
 * __fmul_rn / __fadd_rn), but the sums run over 8 channels per lane and a tree over LPR
 * lanes, so mean/rstd may differ from the 32-lane kernels in the last bits (and y by one
 * bf16 ulp of max(|y|, 1) where that moves a rounding: more of its own ulps where t·γ + β
 * cancels to near 0). x, y (rows, C) 16-byte aligned; mean, rstd
 * (rows) fp32; gamma, beta (C) bf16 of any alignment (read once per thread). */
#ifndef MF_OPS_CUDA_LN_ROWS_HW_CUH
#define MF_OPS_CUDA_LN_ROWS_HW_CUH

#include "fusion_util.cuh"
#include "ops/layernorm.h"
#include "tma_ptx.cuh"

#define MF_LN_HW_THREADS 256 /* 8 warps per block */

/* two bf16 (low half first) of a 32-bit word as fp32 */
static __device__ __forceinline__ float mf_lnhw_lo(uint32_t w) { return __uint_as_float(w << 16); }
static __device__ __forceinline__ float mf_lnhw_hi(uint32_t w) {
  return __uint_as_float(w & 0xffff0000u);
}

/* γ, β of the lane's 8 channels c0 … c0 + 7, packed as bf16 pairs (8 registers, not 16);
 * (1, 0) where the mode has none. */
static __device__ __forceinline__ void mf_lnhw_params(uint32_t *gw, uint32_t *bw, const bf16 *gamma,
                                                      const bf16 *beta, int c0, int mode) {
#pragma unroll
  for (int k = 0; k < 4; k++) {
    uint32_t g2 = 0x3f803f80u, b2 = 0u; /* (1, 1), (0, 0) */
    if (mode != MF_LN_NONE)
      g2 = (uint32_t)__bfloat16_as_ushort(gamma[c0 + 2 * k]) |
           ((uint32_t)__bfloat16_as_ushort(gamma[c0 + 2 * k + 1]) << 16);
    if (mode == MF_LN_FULL)
      b2 = (uint32_t)__bfloat16_as_ushort(beta[c0 + 2 * k]) |
           ((uint32_t)__bfloat16_as_ushort(beta[c0 + 2 * k + 1]) << 16);
    gw[k] = g2;
    bw[k] = b2;
  }
}

/* LayerNorm of the lane's 8 channels u (bf16 pairs) of row r (ok: r < rows, the same on
 * the row's LPR lanes; every lane of the warp must call it: the shuffles are warp-wide);
 * y[r, c0 … c0 + 7] written, mean/rstd[r] by the row's lane 0 (sl = 0) when computed. */
template <int LPR, bool STCS>
static __device__ __forceinline__ void mf_lnhw_row(bf16 *__restrict__ y, float *__restrict__ mean,
                                                   float *__restrict__ rstd, uint4 u, bool ok,
                                                   int64_t r, int sl, const uint32_t *gw,
                                                   const uint32_t *bw, int mode, int use_saved) {
  constexpr int C = 8 * LPR;
  const int c0 = sl * 8;
  const uint32_t wd[4] = {u.x, u.y, u.z, u.w};
  float v[8];
#pragma unroll
  for (int k = 0; k < 4; k++) {
    v[2 * k] = mf_lnhw_lo(wd[k]);
    v[2 * k + 1] = mf_lnhw_hi(wd[k]);
  }
  float mu, rs;
  if (use_saved) {
    mu = ok ? mean[r] : 0.0f;
    rs = ok ? rstd[r] : 0.0f;
  } else {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) s += v[i];
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    mu = s / (float)C;
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const float d = __fsub_rn(v[i], mu);
      q = __fadd_rn(q, __fmul_rn(d, d));
    }
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    rs = 1.0f / sqrtf(q / (float)C + (float)MF_LN_EPS);
    if (ok && sl == 0 && mean) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
  uint32_t ow[4];
#pragma unroll
  for (int k = 0; k < 4; k++) {
    float t0 = __fmul_rn(__fsub_rn(v[2 * k], mu), rs);
    float t1 = __fmul_rn(__fsub_rn(v[2 * k + 1], mu), rs);
    if (mode != MF_LN_NONE) {
      t0 = __fmul_rn(t0, mf_lnhw_lo(gw[k]));
      t1 = __fmul_rn(t1, mf_lnhw_hi(gw[k]));
    }
    if (mode == MF_LN_FULL) {
      t0 = __fadd_rn(t0, mf_lnhw_lo(bw[k]));
      t1 = __fadd_rn(t1, mf_lnhw_hi(bw[k]));
    }
    const __nv_bfloat162 h = __floats2bfloat162_rn(t0, t1);
    memcpy(&ow[k], &h, 4);
  }
  if (ok) {
    const uint4 o4 = make_uint4(ow[0], ow[1], ow[2], ow[3]);
    uint4 *dst = (uint4 *)(y + r * C + c0);
    if (STCS) __stcs(dst, o4);
    else *dst = o4;
  }
}

/* The register kernel: U groups per warp loaded (__ldcs) into registers, then reduced. */
template <int LPR, int U, bool STCS, bool CONTIG, int MINB>
static __global__ void __launch_bounds__(MF_LN_HW_THREADS, MINB)
    mf_ln_rows_hw_kernel(bf16 *__restrict__ y, float *__restrict__ mean, float *__restrict__ rstd,
                         const bf16 *__restrict__ x, const bf16 *__restrict__ gamma,
                         const bf16 *__restrict__ beta, int64_t rows, int mode, int use_saved) {
  constexpr int C = 8 * LPR, RPW = 32 / LPR;
  static_assert(LPR == 8 || LPR == 16 || LPR == 32, "LPR must be 8, 16 or 32");
  const int lane = threadIdx.x % MF_WARP_SIZE, w = threadIdx.x / MF_WARP_SIZE;
  const int sub = lane / LPR, sl = lane % LPR; /* row of the group, lane within the row */
  uint32_t gw[4], bw[4];
  mf_lnhw_params(gw, bw, gamma, beta, sl * 8, mode);
  const int64_t nw = blockDim.x / MF_WARP_SIZE;
  const int64_t W = (int64_t)gridDim.x * nw, gwarp = (int64_t)blockIdx.x * nw + w;
  const int64_t G = (rows + RPW - 1) / RPW; /* groups */
  int64_t gb, ge, gstep, ustride;
  if (CONTIG) { /* groups [G·gw/W, G·(gw+1)/W), U consecutive ones per step */
    gb = G * gwarp / W;
    ge = G * (gwarp + 1) / W;
    gstep = U;
    ustride = 1;
  } else { /* groups gw, gw + W, …; U of them (W apart) per step */
    gb = gwarp;
    ge = G;
    gstep = W * U;
    ustride = W;
  }
  for (int64_t g0 = gb; g0 < ge; g0 += gstep) { /* warp-uniform */
    uint4 u[U];
#pragma unroll
    for (int j = 0; j < U; j++) {
      const int64_t r = (g0 + j * ustride) * RPW + sub;
      u[j] = make_uint4(0u, 0u, 0u, 0u);
      if (g0 + j * ustride < ge && r < rows) u[j] = __ldcs((const uint4 *)(x + r * C + sl * 8));
    }
#pragma unroll
    for (int j = 0; j < U; j++) {
      if (g0 + j * ustride >= ge) break; /* warp-uniform */
      const int64_t r = (g0 + j * ustride) * RPW + sub;
      mf_lnhw_row<LPR, STCS>(y, mean, rstd, u[j], r < rows, r, sl, gw, bw, mode, use_saved);
    }
  }
}

/* The cp.async kernel: the same rows, order (grid-stride) and arithmetic, but the loads go
 * through a ring of S stages in shared memory, U groups per warp per stage, each thread
 * copying (cp.async.cg, 16 bytes) and later reading back only its own slots — so no
 * barrier is needed, and S·U·16 bytes per thread are in flight without holding registers
 * (the register kernel keeps U·16 bytes in flight only while it waits, and none while it
 * reduces and stores). Shared memory: S·U·MF_LN_HW_THREADS·16 bytes, static. */
static __device__ __forceinline__ void mf_lnhw_cp16(uint4 *smem, const void *gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                   (uint32_t)__cvta_generic_to_shared(smem)),
               "l"(gmem)
               : "memory");
}
template <int LPR, int U, int S, int MINB>
static __global__ void __launch_bounds__(MF_LN_HW_THREADS, MINB)
    mf_ln_rows_hw_cp_kernel(bf16 *__restrict__ y, float *__restrict__ mean, float *__restrict__ rstd,
                            const bf16 *__restrict__ x, const bf16 *__restrict__ gamma,
                            const bf16 *__restrict__ beta, int64_t rows, int mode, int use_saved) {
  constexpr int C = 8 * LPR, RPW = 32 / LPR;
  static_assert(LPR == 8 || LPR == 16 || LPR == 32, "LPR must be 8, 16 or 32");
  static_assert(S >= 2 && S * U * MF_LN_HW_THREADS * 16 <= 48 * 1024, "stages exceed 48 KiB");
  __shared__ uint4 ring[S][U][MF_LN_HW_THREADS];
  const int tid = threadIdx.x, lane = tid % MF_WARP_SIZE, w = tid / MF_WARP_SIZE;
  const int sub = lane / LPR, sl = lane % LPR;
  uint32_t gw[4], bw[4];
  mf_lnhw_params(gw, bw, gamma, beta, sl * 8, mode);
  const int64_t nw = blockDim.x / MF_WARP_SIZE;
  const int64_t W = (int64_t)gridDim.x * nw, gwarp = (int64_t)blockIdx.x * nw + w;
  const int64_t G = (rows + RPW - 1) / RPW;
  /* step t, slot j: group gwarp + (t·U + j)·W */
  const bf16 *xl = x + sub * C + sl * 8; /* the lane's first channel of a group's first row */
  int64_t gi = gwarp;                    /* next group to issue */
#pragma unroll
  for (int t = 0; t < S - 1; t++) {
#pragma unroll
    for (int j = 0; j < U; j++) {
      if (gi < G && gi * RPW + sub < rows) mf_lnhw_cp16(&ring[t][j][tid], xl + gi * RPW * C);
      gi += W;
    }
    asm volatile("cp.async.commit_group;\n" ::);
  }
  int slot = 0;
  for (int64_t g0 = gwarp; g0 < G; g0 += W * U) { /* warp-uniform */
    { /* issue step t + S − 1 into the slot read at step t − 1 */
      const int ns = slot == 0 ? S - 1 : slot - 1;
#pragma unroll
      for (int j = 0; j < U; j++) {
        if (gi < G && gi * RPW + sub < rows) mf_lnhw_cp16(&ring[ns][j][tid], xl + gi * RPW * C);
        gi += W;
      }
      asm volatile("cp.async.commit_group;\n" ::);
    }
    asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 1) : "memory");
#pragma unroll
    for (int j = 0; j < U; j++) {
      const int64_t g = g0 + (int64_t)j * W;
      if (g >= G) break; /* warp-uniform */
      const int64_t r = g * RPW + sub;
      const uint4 u = ring[slot][j][tid];
      mf_lnhw_row<LPR, false>(y, mean, rstd, u, r < rows, r, sl, gw, bw, mode, use_saved);
    }
    slot = slot == S - 1 ? 0 : slot + 1;
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* The bulk-copy kernel: a block takes chunks of RB consecutive rows in grid-stride order
 * (chunk b, b + gridDim.x, …); thread 0 copies each chunk with one cp.async.bulk (the TMA
 * engine's linear copy, no tensor map) into a ring of S stages of shared memory, completing
 * on the stage's "full" mbarrier; each warp takes RB / RPW / 8 row groups of the chunk from
 * shared memory into registers, arrives on the stage's "empty" mbarrier and reduces them,
 * and thread 0 waits for "empty" before it refills the stage. Rows, lanes and arithmetic
 * as the kernels above. Shared memory: S·RB·C·2 bytes, static (≤ 48 KiB). */
/* The copies and barriers: tma_ptx.cuh. */
template <int LPR, int RB, int S, int MINB>
static __global__ void __launch_bounds__(MF_LN_HW_THREADS, MINB)
    mf_ln_rows_hw_bulk_kernel(bf16 *__restrict__ y, float *__restrict__ mean, float *__restrict__ rstd,
                              const bf16 *__restrict__ x, const bf16 *__restrict__ gamma,
                              const bf16 *__restrict__ beta, int64_t rows, int mode, int use_saved) {
  constexpr int C = 8 * LPR, RPW = 32 / LPR, NW = MF_LN_HW_THREADS / MF_WARP_SIZE;
  constexpr int U = RB / RPW / NW; /* row groups per warp per chunk */
  constexpr int CH16 = RB * C * 2 / 16; /* 16-byte words per chunk */
  static_assert(U >= 1 && U * RPW * NW == RB, "RB must be a multiple of 8·RPW");
  static_assert(S >= 2 && S * CH16 * 16 + 16 * S <= 48 * 1024, "stages exceed 48 KiB");
  __shared__ __align__(128) uint4 ring[S][CH16];
  __shared__ __align__(8) uint64_t bars[2 * S]; /* full[0..S), empty[S..2S) */
  const int tid = threadIdx.x, lane = tid % MF_WARP_SIZE, w = tid / MF_WARP_SIZE;
  const int sub = lane / LPR, sl = lane % LPR;
  const uint32_t bar0 = (uint32_t)__cvta_generic_to_shared(&bars[0]);
  const uint32_t ring0 = (uint32_t)__cvta_generic_to_shared(&ring[0][0]);
  if (tid == 0) {
    for (int k = 0; k < S; k++) {
      mf_mbar_init(bar0 + 8 * k, 1);        /* full: the producer's expect_tx */
      mf_mbar_init(bar0 + 8 * (S + k), NW); /* empty: one arrival per warp */
    }
    mf_mbar_init_fence();
  }
  __syncthreads();
  uint32_t gw[4], bw[4];
  mf_lnhw_params(gw, bw, gamma, beta, sl * 8, mode);
  const int64_t nchunks = (rows + RB - 1) / RB;
  /* thread 0: chunk t of this block into stage t mod S */
  auto issue = [&](int64_t t) {
    const int64_t c = (int64_t)blockIdx.x + t * gridDim.x;
    if (c >= nchunks) return;
    const int64_t r0 = c * RB, nr = rows - r0 < RB ? rows - r0 : RB;
    const uint32_t bytes = (uint32_t)(nr * C * 2), st = (uint32_t)(t % S);
    mf_mbar_expect_tx(bar0 + 8 * st, bytes);
    mf_bulk_load(ring0 + st * CH16 * 16, x + r0 * C, bytes, bar0 + 8 * st);
  };
  if (tid == 0)
    for (int t = 0; t < S - 1; t++) issue(t);
  for (int64_t t = 0;; t++) {
    const int64_t c = (int64_t)blockIdx.x + t * gridDim.x;
    if (c >= nchunks) break; /* block-uniform */
    const int st = (int)(t % S);
    if (tid == 0) { /* refill the stage chunk t − 1 used, once every warp has read it */
      if (t >= 1) {
        const int64_t tp = t - 1;
        mf_mbar_wait(bar0 + 8 * (S + (uint32_t)(tp % S)), (uint32_t)((tp / S) & 1));
      }
      issue(t + S - 1);
    }
    mf_mbar_wait(bar0 + 8 * st, (uint32_t)((t / S) & 1));
    uint4 u[U];
#pragma unroll
    for (int j = 0; j < U; j++) /* group w + NW·j of the chunk */
      u[j] = ring[st][((w + NW * j) * RPW + sub) * (C / 8) + sl];
    __syncwarp();
    if (lane == 0) mf_mbar_arrive(bar0 + 8 * (S + st));
#pragma unroll
    for (int j = 0; j < U; j++) {
      const int64_t r = c * RB + (w + NW * j) * RPW + sub;
      mf_lnhw_row<LPR, false>(y, mean, rstd, u[j], r < rows, r, sl, gw, bw, mode, use_saved);
    }
  }
}

/* Blocks of MF_LN_HW_THREADS for the bulk kernel: one chunk of RB rows each, capped at cap. */
static inline unsigned mf_ln_hw_bulk_blocks(int64_t rows, int rb, int64_t cap) {
  int64_t b = (rows + rb - 1) / rb;
  if (cap > 0 && b > cap) b = cap;
  return (unsigned)(b < 1 ? 1 : b);
}

/* Blocks of MF_LN_HW_THREADS for the kernel above: one pass over the groups
 * (U groups per warp), capped at `cap` blocks when cap > 0 (a persistent grid:
 * the SM count times the resident blocks per SM). */
static inline unsigned mf_ln_hw_blocks(int64_t rows, int lpr, int u, int64_t cap) {
  const int64_t G = (rows + 32 / lpr - 1) / (32 / lpr);
  const int64_t per_block = (int64_t)(MF_LN_HW_THREADS / MF_WARP_SIZE) * u;
  int64_t b = (G + per_block - 1) / per_block;
  if (cap > 0 && b > cap) b = cap;
  return (unsigned)(b < 1 ? 1 : b);
}

#endif
