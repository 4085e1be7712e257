/* gemm_ln_bwd_wg.cu — dinp = LayerNorm backward of (D·W) as one persistent wgmma kernel
 * (sm_90a, C = 128): the contract of gemm_ln_bwd_cuda.h. It replaces a cuBLAS GEMM into an
 * fp32 (rows, C) dx̂ buffer and the row kernel that read it back (ln_linear.cu): the
 * fp32 round trip was 1 KB a row, as much as the GEMM's own input at K = 512.
 *
 * A CTA is two warpgroups over 128-row tiles, 64 rows each; the grid is min(tiles, SMs)
 * and CTA b takes tiles b, b + grid, …. The K dimension is walked in steps of 64 through
 * a ring of GL_S shared-memory stages, each holding the step's D block (128 rows × 64 k,
 * K-major, 128-byte swizzle) and W block (64 k rows × 128 n, read MN-major: W is stored
 * (K, C) row-major, no transposed copy). The ring runs across tiles: a CTA's (tile, step)
 * pairs form one sequence, and step g + dist is loaded (cp.async by all 256 threads,
 * columns ≥ K and rows ≥ M zero-filled) while step g computes, so the next tile's first
 * blocks arrive during this tile's LayerNorm backward. A tile's raw input rows and their
 * (mean, rstd) ride with its first step into one of two tile buffers.
 * Per step each warpgroup issues 4 × wgmma m64n128k16 into its 64 × 128 fp32 accumulators
 * and waits for them. After the tile's last step the LayerNorm backward runs on the
 * accumulators (lg_ln_bwd_rows, ln_tile.cuh), dinp is written in place over the raw rows
 * it came from (each thread overwrites exactly the elements it read) and stored 16 bytes
 * at a time; the dγ/dβ column terms are reduce-scattered into per-lane partials kept
 * across the CTA's tiles and summed in warp order at the end (lg_cta_part_store). Every
 * order is fixed, so two runs are bit-identical. Numerics: the products in bf16 with fp32
 * accumulation (as cuBLAS's), the LayerNorm backward in fp32 as the row kernel's.
 *
 * Measured (H200, 2026-11-30; ncu and A/B runs of the same binary with MF_GEMM_LN_BWD=0/1):
 * at the trimul's phase-3 chunk (196 608 rows, K = 640, add) 145–147 µs at 2.4 TB/s (49 %
 * of the device-memory peak; the GEMM and row kernel it replaces took 0.089 + 0.074 ms);
 * the triangle attention's module backward 5.71 → 5.65 ms; trimul backward at N = 768
 * 2.98 → 2.93 ms with dgl copied beside dP4 as one term, 2.97 → 2.84 ms with dgl as the
 * second term (no copy); the block 27.70 → 27.25–27.39 ms. ncu: 8 warps per SM,
 * 4.4 cycles per issued instruction, L2 at 60 % (every CTA reads all of W per tile). Tried
 * and slower (same job style): two CTAs per SM (BK = 32, 64-byte-swizzled D, a
 * register-lean two-pass LayerNorm, 128 registers): 161 µs; the old dinp staged in shared
 * memory with a single row buffer: 157 µs; separate D (6 stages, 5 ahead) and W (3 stages)
 * rings: 168 µs; an L2::256B prefetch hint on the D copies: no change; writing the
 * LayerNorm output for the callers' dW GEMMs during the first step (dropping their row
 * pass): block and trimul unchanged within 0.02 ms, not kept. What would move it:
 * W's L2 traffic (TMA multicast across a CTA pair) and producing D on chip (fusing the
 * trimul's gated backward that writes it).
 * gl_tma_kernel (the default since 2026-11-30, dev/cuda/README step 20) is this kernel with
 * its blocks copied by TMA and no CTA-wide barrier per step: the Pairformer block at N =
 * 768 26.05 / 25.93 → 25.79 / 25.70 ms (same binary, MF_GEMM_LN_BWD_TMA=0/1 alternated,
 * 17:08 UTC), about −20 µs of each of its 12 calls' ~160 µs. */
#include "gemm_ln_bwd_cuda.h"

#include <stdlib.h>
#include <string.h>

#include "fusion_util.cuh"
#include "ln_linear_cuda.h"
#include "ln_tile.cuh"
#include "tma_ptx.cuh"
#include "wgmma_ptx.cuh"

#define GL_THREADS 256 /* two warpgroups */
#define GL_C 128       /* the one channel width this kernel takes */
#define GL_BK 64       /* k per step */
#define GL_S 4         /* stages of the ring */

/* Shared memory, byte offsets from a 1024-aligned base:
 *   stage s: the D block (LG_BM rows × 128 B, K-major, 128-byte swizzle) then the W block
 *            (two 64-column halves of GL_BK rows × 128 B) — 32 KB;
 *   xs[2]:   a tile's raw input rows, C/64 blocks of (LG_BM rows × 128 B), then its dinp;
 *   st[2]:   a tile's mean and rstd (LG_BM each, fp32);
 *   gam:     γ (C fp32);
 *   bars:    gl_tma_kernel's barriers: full[GL_S], empty[GL_S], xe[2]. */
struct gl_layout {
  static constexpr int DB = LG_BM * 128, WB = GL_BK * 128 * (GL_C / 64), STAGE = DB + WB;
  static constexpr int XT = (GL_C / 64) * LG_BM * 128, ST = 2 * LG_BM * 4;
  static constexpr int stages = 0, xs = GL_S * STAGE, st = xs + 2 * XT, gam = st + 2 * ST;
  static constexpr int bars = gam + GL_C * 4;
  static constexpr int bytes = bars + (2 * GL_S + 2) * 8 + 1024; /* + the alignment slack */
};
static_assert(gl_layout::bytes <= 227 * 1024, "gemm_ln_bwd_wg: shared memory");
static_assert(GL_S * gl_layout::STAGE >= 8 * 2 * GL_C * 4, "gemm_ln_bwd_wg: reduction room");

struct gl_params {
  bf16 *dinp;        /* (M, C) or NULL */
  float *part;       /* (grid, 2C) or NULL */
  const bf16 *d[2];  /* (M, ld[j]) the terms' D */
  const bf16 *w[2];  /* (K[j], C) their W */
  const bf16 *inp;   /* (M, C) */
  const float *mean; /* (M) */
  const float *rstd; /* (M) */
  int64_t ld[2], M;
  int K[2], nk1, add; /* K[1] = 0: one term; nk1: the first term's k-steps */
};

/* Step g of this CTA's sequence into stage (g % GL_S): the D and W blocks of k-step g % nk
 * of its tile g / nk, and on a tile's first step its raw rows and statistics into tile
 * buffer (g / nk) & 1. Nothing past the CTA's last tile. */
static __device__ __forceinline__ void gl_load_step(unsigned char *sm, const gl_params &p, int64_t g,
                                                    int nk, int64_t ntiles) {
  typedef gl_layout L;
  const int64_t i = g / nk, t = (int64_t)blockIdx.x + i * gridDim.x;
  if (t >= ntiles) return;
  const int ks = (int)(g - i * nk), tm = ks >= p.nk1, k0 = (tm ? ks - p.nk1 : ks) * GL_BK;
  /* the term this step belongs to (selects, not an indexed parameter array: that went
   * through a local-memory copy) */
  const bf16 *d = tm ? p.d[1] : p.d[0], *w = tm ? p.w[1] : p.w[0];
  const int64_t ld = tm ? p.ld[1] : p.ld[0];
  const int K = tm ? p.K[1] : p.K[0];
  const int64_t m0 = t * LG_BM;
  unsigned char *stage = sm + L::stages + (int)(g % GL_S) * L::STAGE;
#pragma unroll
  for (int j = 0; j < LG_BM * 8 / GL_THREADS; j++) { /* D: 128 rows × 8 chunks */
    const int idx = (int)threadIdx.x + j * GL_THREADS, r = idx >> 3, c = idx & 7;
    const bool ok = m0 + r < p.M && k0 + 8 * c < K;
    lg_cp16z(stage + mf_sw128_chunk(r, c), d + (ok ? (m0 + r) * ld + k0 + 8 * c : 0), ok);
  }
#pragma unroll
  for (int j = 0; j < GL_BK * (GL_C / 8) / GL_THREADS; j++) { /* W: 64 rows × 16 chunks */
    const int idx = (int)threadIdx.x + j * GL_THREADS, r = idx >> 4, c = idx & 15;
    const bool ok = k0 + r < K;
    lg_cp16z(stage + L::DB + (c >> 3) * (GL_BK * 128) + mf_sw128_chunk(r, c & 7),
             w + (ok ? (int64_t)(k0 + r) * GL_C + 8 * c : 0), ok);
  }
  if (ks == 0) {
    unsigned char *xs = sm + L::xs + (int)(i & 1) * L::XT;
#pragma unroll
    for (int j = 0; j < LG_BM * (GL_C / 8) / GL_THREADS; j++) {
      const int idx = (int)threadIdx.x + j * GL_THREADS, r = idx >> 4, c = idx & 15;
      const bool ok = m0 + r < p.M;
      lg_cp16z(xs + (c >> 3) * (LG_BM * 128) + mf_sw128_chunk(r, c & 7),
               p.inp + (ok ? (m0 + r) * GL_C + 8 * c : 0), ok);
    }
    static_assert(2 * LG_BM == GL_THREADS, "gl_load_step: one statistic per thread");
    const int r = (int)threadIdx.x % LG_BM;
    const bool ok = m0 + r < p.M;
    lg_cp4z((float *)(sm + L::st + (int)(i & 1) * L::ST) + threadIdx.x,
            ((int)threadIdx.x < LG_BM ? p.mean : p.rstd) + (ok ? m0 + r : 0), ok);
  }
}

/* Waits until the cp.async group of the step `dist` steps back is complete (dist = the
 * ring's prefetch distance, 1 .. GL_S − 1). */
static __device__ __forceinline__ void gl_wait_dist(int dist) {
  if (dist >= 3) mf_cp_async_wait<2>();
  else if (dist == 2) mf_cp_async_wait<1>();
  else mf_cp_async_wait<0>();
}

/* One k-step's products into acc (this warpgroup's 64 rows × C): the stage at shared
 * address su, 4 × wgmma m64n128k16, committed, not waited for. */
static __device__ __forceinline__ void gl_step_mma(float (&acc)[GL_C / 2], uint32_t su, int wg) {
  typedef gl_layout L;
  /* operand descriptors: the stage's once per step, each k16 block's from them (mf_wg_desc_off) */
  const uint64_t dd = mf_wg_desc(su + wg * 64 * 128), dw = mf_wg_desc_mn(su + L::DB, GL_BK * 128);
  mf_wg_fence();
#pragma unroll
  for (int kk = 0; kk < GL_BK / 16; kk++)
    mf_wg_ss_n128<1>(acc, mf_wg_desc_off(dd, kk * 32), mf_wg_desc_off(dw, kk * 2048), 1);
  mf_wg_commit();
}

/* The end of tile i (rows m0 .. m0 + rows − 1): the LayerNorm backward from acc with the
 * raw rows and statistics of tile buffer i & 1, dinp written over the raw rows and then
 * stored 16 bytes at a time, the dγ/dβ column terms reduce-scattered into pg, pb. */
static __device__ __forceinline__ void gl_tile_end(const gl_params &p, unsigned char *sm, int i, int64_t m0,
                                                   int rows, const float (&acc)[GL_C / 2], const float *gam,
                                                   float (&pg)[4], float (&pb)[4]) {
  typedef gl_layout L;
  constexpr int C = GL_C;
  const int lane = threadIdx.x & 31, warp = lg_warp_id(), wg = warp >> 2, wl = warp & 3;
  const int ra = wg * 64 + wl * 16 + (lane >> 2); /* this thread's accumulator rows ra, ra + 8 */
  unsigned char *xr = sm + L::xs + (i & 1) * L::XT;
  const float *st = (const float *)(sm + L::st + (i & 1) * L::ST);
  const float mu[2] = {st[ra], st[ra + 8]}, rs[2] = {st[LG_BM + ra], st[LG_BM + ra + 8]};
  float vg[C / 4], vb[C / 4];
  lg_ln_bwd_rows<C>(acc, xr, gam, mu, rs, ra, rows, lane & 3, p.dinp ? xr : NULL, LG_BM * 128, 0,
                    p.dinp ? p.dinp + m0 * C : NULL, p.add, vg, vb);
  if (p.dinp) {
    const int tid = (int)(threadIdx.x & 127), nr = rows - wg * 64;
    mf_bar_wg(wg); /* the group's rows staged */
    lg_store_block64(p.dinp + (m0 + wg * 64) * C, C, xr + wg * 64 * 128, nr, tid);
    lg_store_block64(p.dinp + (m0 + wg * 64) * C + 64, C, xr + LG_BM * 128 + wg * 64 * 128, nr, tid);
  }
  if (p.part) {
    lg_reduce_scatter32(vg, pg, lane);
    lg_reduce_scatter32(vb, pb, lane);
  }
}

/* This CTA's tiles (blockIdx.x, + gridDim.x, …), k-step by k-step: step(acc, g) adds step
 * g's products into acc and waits for them (g counts the CTA's steps across its tiles);
 * after a tile's last step gl_tile_end, then done(i) (i: the CTA's tile count). */
template <class Step, class Done>
static __device__ __forceinline__ void gl_tiles(const gl_params &p, unsigned char *sm, int nk, const float *gam,
                                                float (&pg)[4], float (&pb)[4], Step &&step, Done &&done) {
  const int64_t ntiles = (p.M + LG_BM - 1) / LG_BM;
  int64_t g = 0;
  int i = 0;
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x, i++) {
    const int64_t m0 = t * LG_BM;
    const int rows = (int)(p.M - m0 < LG_BM ? p.M - m0 : LG_BM);
    float acc[GL_C / 2]; /* dx̂: this warpgroup's 64 rows × C */
#pragma unroll
    for (int k = 0; k < GL_C / 2; k++) acc[k] = 0.0f;
    for (int ks = 0; ks < nk; ks++, g++) step(acc, g);
    gl_tile_end(p, sm, i, m0, rows, acc, gam, pg, pb);
    done(i);
  }
}

static __global__ void __launch_bounds__(GL_THREADS, 1) gl_kernel(const gl_params p, const bf16 *gamma,
                                                                  int mode) {
  typedef gl_layout L;
  constexpr int C = GL_C;
  extern __shared__ unsigned char gl_raw[];
  unsigned char *sm = gl_raw + ((1024u - (mf_smem_u32(gl_raw) & 1023u)) & 1023u);
  float *gam = (float *)(sm + L::gam);
  const int lane = threadIdx.x & 31, warp = lg_warp_id(), wg = warp >> 2;
  const int64_t ntiles = (p.M + LG_BM - 1) / LG_BM;
  const int nk = p.nk1 + (p.K[1] + GL_BK - 1) / GL_BK;
  /* the prefetch distance: at most GL_S − 1 and at most one tile's steps, so that a tile
   * buffer is refilled only after the tile two back has finished its LayerNorm backward */
  const int dist = nk < GL_S - 1 ? nk : GL_S - 1;
  if ((int)threadIdx.x < C)
    gam[threadIdx.x] = mode == MF_LN_NONE ? 1.0f : mf_bf16_to_f32(gamma[threadIdx.x]);
  float pg[4] = {0.f, 0.f, 0.f, 0.f}, pb[4] = {0.f, 0.f, 0.f, 0.f};
  for (int s = 0; s < dist; s++) {
    gl_load_step(sm, p, s, nk, ntiles);
    mf_cp_async_commit();
  }
  gl_tiles(
      p, sm, nk, gam, pg, pb,
      [&](float(&acc)[C / 2], int64_t g) {
        gl_wait_dist(dist);
        mf_fence_proxy_async();
        __syncthreads(); /* step g is here for everyone; step g − 1's stage is free */
        gl_load_step(sm, p, g + dist, nk, ntiles);
        mf_cp_async_commit();
        gl_step_mma(acc, mf_smem_u32(sm + L::stages + (int)(g % GL_S) * L::STAGE), wg);
        mf_wg_wait<0>();
        mf_wg_pin(acc);
      },
      [](int) {});
  mf_cp_async_wait<0>();
  if (p.part) lg_cta_part_store<C>((float *)(sm + L::stages), pg, pb, p.part, warp, lane);
}

/* gl_kernel with its blocks copied by TMA (the default where the maps encode; README step
 * 20 of dev/cuda): thread 0 issues each step's D box (128 rows × 64 k, 128-byte swizzle,
 * zeros past K and M) and W's two 64-column halves, and on a tile's first step its raw
 * rows (two boxes) and (mean, rstd) (1-D boxes, zeros past M), all onto the stage's full
 * barrier, instead of 256 threads' cp.async with their address arithmetic. No CTA-wide
 * barrier per step: every thread arrives on the stage's empty barrier after its wgmma
 * has read it, and on its tile buffer's xe barrier after the LayerNorm backward has
 * stored from it; thread 0 refills a stage (a tile buffer) once those completed. The
 * products, the LayerNorm backward and every order are gl_kernel's: same bits. */
struct gl_tmaps {
  CUtensorMap d[2], w[2]; /* the terms' D (box 64 k × 128 rows) and W (64 n × 64 k) */
  CUtensorMap inp;        /* (M, C): box 64 channels × 128 rows */
  CUtensorMap mean, rstd; /* (M) fp32: box 128 */
};

static __global__ void __launch_bounds__(GL_THREADS, 1)
    gl_tma_kernel(const gl_params p, const __grid_constant__ gl_tmaps tm, const bf16 *gamma, int mode) {
  typedef gl_layout L;
  constexpr int C = GL_C;
  extern __shared__ unsigned char gl_raw[];
  unsigned char *sm = gl_raw + ((1024u - (mf_smem_u32(gl_raw) & 1023u)) & 1023u);
  const uint32_t sa = mf_smem_u32(sm);
  const uint32_t fullb = sa + L::bars, emptyb = fullb + 8 * GL_S, xeb = emptyb + 8 * GL_S;
  float *gam = (float *)(sm + L::gam);
  const int tid = threadIdx.x, lane = tid & 31, warp = lg_warp_id(), wg = warp >> 2;
  const int64_t ntiles = (p.M + LG_BM - 1) / LG_BM;
  const int nk = p.nk1 + (p.K[1] + GL_BK - 1) / GL_BK;
  const int dist = nk < GL_S - 1 ? nk : GL_S - 1; /* as gl_kernel's */
  if (tid == 0) {
    for (int s = 0; s < GL_S; s++) {
      mf_mbar_init(fullb + 8 * s, 1);
      mf_mbar_init(emptyb + 8 * s, GL_THREADS);
    }
    mf_mbar_init(xeb, GL_THREADS);
    mf_mbar_init(xeb + 8, GL_THREADS);
    mf_mbar_init_fence();
  }
  if (tid < C) gam[tid] = mode == MF_LN_NONE ? 1.0f : mf_bf16_to_f32(gamma[tid]);
  __syncthreads();
  /* thread 0: step g of this CTA's sequence (tile g / nk, k-step g % nk) into stage g % GL_S */
  auto issue = [&](int64_t g) {
    const int64_t i = g / nk, t = (int64_t)blockIdx.x + i * gridDim.x;
    if (t >= ntiles) return;
    const int s = (int)(g % GL_S), ks = (int)(g - i * nk), tm1 = ks >= p.nk1;
    const int k0 = (tm1 ? ks - p.nk1 : ks) * GL_BK, m0 = (int)(t * LG_BM);
    const uint32_t fb = fullb + 8 * s, stage = sa + L::stages + s * L::STAGE;
    if (g >= GL_S) mf_mbar_wait(emptyb + 8 * s, (uint32_t)((g / GL_S - 1) & 1)); /* step g − GL_S read */
    if (ks == 0 && i >= 2) mf_mbar_wait(xeb + 8 * (int)(i & 1), (uint32_t)(((i - 2) / 2) & 1)); /* tile i − 2 */
    mf_mbar_expect_tx(fb, L::STAGE + (ks == 0 ? L::XT + 2 * LG_BM * 4 : 0));
    mf_tma_load_2d(stage, tm1 ? &tm.d[1] : &tm.d[0], k0, m0, fb);
    for (int h = 0; h < GL_C / 64; h++)
      mf_tma_load_2d(stage + L::DB + h * (GL_BK * 128), tm1 ? &tm.w[1] : &tm.w[0], 64 * h, k0, fb);
    if (ks == 0) {
      const uint32_t xs = sa + L::xs + (int)(i & 1) * L::XT, st = sa + L::st + (int)(i & 1) * L::ST;
      for (int h = 0; h < GL_C / 64; h++) mf_tma_load_2d(xs + h * (LG_BM * 128), &tm.inp, 64 * h, m0, fb);
      mf_tma_load_1d(st, &tm.mean, m0, fb);
      mf_tma_load_1d(st + LG_BM * 4, &tm.rstd, m0, fb);
    }
  };
  if (tid == 0)
    for (int s = 0; s < dist; s++) issue(s);
  float pg[4] = {0.f, 0.f, 0.f, 0.f}, pb[4] = {0.f, 0.f, 0.f, 0.f};
  gl_tiles(
      p, sm, nk, gam, pg, pb,
      [&](float(&acc)[C / 2], int64_t g) {
        const int s = (int)(g % GL_S);
        mf_mbar_wait(fullb + 8 * s, (uint32_t)((g / GL_S) & 1));
        gl_step_mma(acc, sa + L::stages + s * L::STAGE, wg);
        if (tid == 0) issue(g + dist); /* under this step's products */
        __syncwarp();
        mf_wg_wait<0>();
        mf_wg_pin(acc);
        mf_mbar_arrive(emptyb + 8 * s); /* this thread's product has read the stage */
      },
      [&](int i) {
        mf_fence_proxy_async(); /* this thread's accesses to the tile buffer, before TMA refills it */
        mf_mbar_arrive(xeb + 8 * (i & 1));
      });
  if (p.part) lg_cta_part_store<C>((float *)(sm + L::stages), pg, pb, p.part, warp, lane);
}

/* The maps of gl_tma_kernel; false where the driver refuses one (the caller runs gl_kernel). */
static bool gl_maps(gl_tmaps *m, const gl_params &p, int nt) {
  memset(m, 0, sizeof *m);
  for (int j = 0; j < nt; j++) {
    const uint64_t dd[2] = {(uint64_t)p.K[j], (uint64_t)p.M}, ds[1] = {(uint64_t)p.ld[j] * 2};
    const uint32_t db[2] = {GL_BK, LG_BM};
    const uint64_t wd[2] = {(uint64_t)GL_C, (uint64_t)p.K[j]}, ws[1] = {(uint64_t)GL_C * 2};
    const uint32_t wb[2] = {64, GL_BK};
    if (mf_tma_encode_bf16(&m->d[j], p.d[j], 2, dd, ds, db, CU_TENSOR_MAP_SWIZZLE_128B) != 0 ||
        mf_tma_encode_bf16(&m->w[j], p.w[j], 2, wd, ws, wb, CU_TENSOR_MAP_SWIZZLE_128B) != 0)
      return false;
  }
  const uint64_t xd[2] = {(uint64_t)GL_C, (uint64_t)p.M}, xst[1] = {(uint64_t)GL_C * 2};
  const uint32_t xb[2] = {64, LG_BM};
  const uint64_t sd[1] = {(uint64_t)p.M}, sst[1] = {4};
  const uint32_t sbx[1] = {LG_BM};
  return mf_tma_encode_bf16(&m->inp, p.inp, 2, xd, xst, xb, CU_TENSOR_MAP_SWIZZLE_128B) == 0 &&
         mf_tma_encode(&m->mean, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.mean, 1, sd, sst, sbx,
                       CU_TENSOR_MAP_SWIZZLE_NONE) == 0 &&
         mf_tma_encode(&m->rstd, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.rstd, 1, sd, sst, sbx,
                       CU_TENSOR_MAP_SWIZZLE_NONE) == 0;
}

static int g_gl_tma = -1; /* −1: not yet read from the environment */

extern "C" int mf_gemm_ln_bwd_set_tma(int v) {
  if (g_gl_tma < 0) {
    const char *e = getenv("MF_GEMM_LN_BWD_TMA");
    g_gl_tma = e && e[0] == '0' ? 0 : 1;
  }
  const int prev = g_gl_tma;
  if (v >= 0) g_gl_tma = v ? 1 : 0;
  return prev;
}

static int gl_aligned(const void *q) { return ((uintptr_t)q & 15) == 0; }

extern "C" int mf_gemm_ln_bwd_supported(const mf_gemm_ln_term *t, int nt, int C, mf_ln_mode mode,
                                        const void *inp, const void *dinp) {
  if (C != GL_C || !t || nt < 1 || nt > 2) return 0;
  if (mode != MF_LN_FULL && mode != MF_LN_SCALE && mode != MF_LN_NONE) return 0;
  for (int j = 0; j < nt; j++)
    if (!t[j].d || !t[j].w || t[j].k <= 0 || t[j].k % 8 || t[j].ld < t[j].k || t[j].ld % 8 ||
        !gl_aligned(t[j].d) || !gl_aligned(t[j].w))
      return 0;
  if (nt == 2 && t[0].k % GL_BK) return 0;
  return inp && gl_aligned(inp) && (!dinp || gl_aligned(dinp));
}

static int g_gl_enabled = -1; /* −1: not yet read from the environment */

extern "C" int mf_gemm_ln_bwd_enabled(void) {
  if (g_gl_enabled < 0) {
    const char *e = getenv("MF_GEMM_LN_BWD");
    g_gl_enabled = e && e[0] == '0' ? 0 : 1;
  }
  return g_gl_enabled;
}

extern "C" int mf_gemm_ln_bwd_set_enabled(int v) {
  const int prev = mf_gemm_ln_bwd_enabled();
  if (v >= 0) g_gl_enabled = v ? 1 : 0;
  return prev;
}

extern "C" int mf_gemm_ln_bwd_parts(int64_t rows) {
  const int64_t ntiles = (rows + LG_BM - 1) / LG_BM;
  return (int)(ntiles < mf_sm_count() ? ntiles : mf_sm_count());
}

extern "C" int mf_gemm_ln_bwd_cuda(bf16 *dinp, int add, float *part, const mf_gemm_ln_term *t, int nt,
                                   const bf16 *inp, const float *mean, const float *rstd,
                                   const bf16 *gamma, int64_t rows, int C, mf_ln_mode mode,
                                   cudaStream_t stream) {
  MF_ASSERT(mf_gemm_ln_bwd_supported(t, nt, C, mode, inp, dinp),
            "gemm_ln_bwd: unsupported terms (%d: k = %d, %d; ld = %lld, %lld), C=%d, mode=%d or "
            "alignment", nt, t && nt > 0 ? t[0].k : 0, t && nt > 1 ? t[1].k : 0,
            (long long)(t && nt > 0 ? t[0].ld : 0), (long long)(t && nt > 1 ? t[1].ld : 0), C,
            (int)mode);
  MF_ASSERT(mean && rstd, "gemm_ln_bwd: mean and rstd required");
  MF_ASSERT(mode == MF_LN_NONE || gamma, "gemm_ln_bwd: gamma required");
  if (rows <= 0) return 0;
  const int grid = mf_gemm_ln_bwd_parts(rows);
  MF_ASSERT(grid <= mf_ln_rows_backward_parts(rows), "gemm_ln_bwd: %d partial rows for %lld rows",
            grid, (long long)rows);
  gl_params p = {};
  p.dinp = dinp;
  p.part = part;
  for (int j = 0; j < nt; j++) {
    p.d[j] = t[j].d;
    p.w[j] = t[j].w;
    p.ld[j] = t[j].ld;
    p.K[j] = t[j].k;
  }
  p.inp = inp;
  p.mean = mean;
  p.rstd = rstd;
  p.M = rows;
  p.nk1 = (t[0].k + GL_BK - 1) / GL_BK;
  p.add = add ? 1 : 0;
  const int smem = gl_layout::bytes;
  gl_tmaps tm;
  if (mf_gemm_ln_bwd_set_tma(-1) && gl_aligned(mean) && gl_aligned(rstd) && gl_maps(&tm, p, nt)) {
    MF_CHECK_CUDA(cudaFuncSetAttribute(gl_tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    gl_tma_kernel<<<grid, GL_THREADS, smem, stream>>>(p, tm, gamma, (int)mode);
  } else {
    MF_CHECK_CUDA(cudaFuncSetAttribute(gl_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    gl_kernel<<<grid, GL_THREADS, smem, stream>>>(p, gamma, (int)mode);
  }
  MF_CHECK_LAUNCH();
  return grid;
}
