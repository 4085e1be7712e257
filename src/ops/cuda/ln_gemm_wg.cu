/* ln_gemm_wg.cu — EvoFusion's fused LayerNorm + Linear + epilogue FORWARD as one persistent
 * wgmma kernel (sm_90a): out (M, O) = epilogue(LN(x (M, C))·Wᵀ), mean, rstd (M) fp32
 * written (not for IDENTITY); epilogue 0: + bias (NULL: none); 1: W = [W_p; W_g] (2O, C),
 * out = mask ⊙ σ(g) ⊙ p (mask NULL: all ones); 2: W = [W_a; W_b], out = silu(a) ⊙ b;
 * 3: out = σ(x̂·Wᵀ) (no bias); 4, the gated projection's backward with its forward
 * recomputed: W = [W_p; W_g], d = mask ⊙ dcm (dcm (O, ldm) channel-major), out (M, ldo) =
 * [d ⊙ σ(g) | d ⊙ p ⊙ σ(g)(1 − σ(g))] (mf_ln_gemm_wg_gated_bwd_cuda; the triangle
 * multiplication's gate backward, whose dcm is dA or dB; with xhat it also stores x̂ itself,
 * its swizzled operand blocks being TMA boxes as they lie, for the caller's dW GEMMs: at the
 * trimul's one phase-3 chunk at N = 768 that kernel went 240 → 270 µs and the 87 µs
 * LayerNorm pass it replaces is gone, H200, 2026-12-01). Row-major out, or channel-major (mf_ln_gemm_wg_cm_cuda:
 * element (m, o) at o·ldm + m, the layout of the triangle multiplication's per-channel
 * planes: the epilogue stages its tile transposed, 64 rows of a column per 128-byte line, and
 * 8 threads store each line).
 * Epilogues 0–2: the same op and math as ln_gemm.cu's mma.sync kernel (ln_gemm_cuda.h), the
 * ln_linear variant 3 (ln_linear_cuda.h); 1 (channel-major), 3 and 4: the triangle
 * multiplication's variant 2 (trimul.cu). Not the CPU reference; epilogue 4 is the only
 * backward here (the dW GEMMs and the LayerNorm backward stay with the caller).
 *
 * Design (a memory-bound op: read x, write out; the GEMM is small): a CTA is NWG = 3
 * warpgroups where shared memory holds them (the plain, sigmoid and gated epilogues with a
 * small W, e.g. C = 128, O <= 128; mf_ln_gemm_wg_set_nwg), else 2, that run INDEPENDENTLY on 64-row
 * subtiles (warpgroup wg takes subtiles s = NWG·blockIdx + wg, + NWG·gridDim, …),
 * synchronising only among their own 128 threads (named barriers), so one group's
 * LayerNorm / epilogue overlaps another's GEMM and the groups drift apart freely. W is loaded once per CTA into shared memory in the swizzled
 * wgmma operand layout (wgmma_ptx.cuh) and stays resident. Each warpgroup's raw x rows
 * (a subtile's rows are contiguous: one bulk copy by the warpgroup's thread 0, completing
 * on the buffer's mbarrier) are requested NBUF (2–4, as shared memory allows, 1 for the
 * 3-warpgroup gated kernel; MF_LN_GEMM_WG_NBUF caps it) subtiles
 * ahead, so HBM reads stay in flight during the LayerNorm, GEMM and epilogue of the
 * current subtile (what the mma.sync kernel, latency-bound at 8 warps per SM, lacks).
 * Per subtile:
 *   x̂ (64 × C) = LN(x rows)                 lg_ln_tile_v<C>, straight into the swizzled
 *                                             A layout; the raw buffer is then refilled;
 *   per pass of N accumulator columns (N = 128, or 64 for a plain remainder):
 *     d (64 × N fp32) = x̂·W[n0 .. n0 + N]ᵀ  C/16 × wgmma m64nNk16, A and B from shared memory;
 *     epilogue in registers → bf16 staged in shared memory (64 × 64 blocks in the
 *     128-byte swizzle) → one TMA store per block by the warpgroup's thread 0 (the map
 *     clips rows ≥ M; lw_tma_store_on says for which kernels), or 16-byte stores by all
 *     128 threads. A stored block is rewritten only after the store has read it.
 * For epilogues 1/2 the resident W is stored with its halves interleaved per 64 output
 * columns (shared rows 128j .. 128j + 63 = W_p / W_a rows 64j.., the next 64 = W_g / W_b
 * rows 64j..), so one m64n128 accumulator holds p | g (a | b) of 64 output columns.
 * Limits (mf_ln_gemm_wg_supported; otherwise the mma.sync kernel runs): C in {64, 128},
 * O % 64 == 0, W plus two raw buffers fit in shared memory (C = 128: O ≤ 384 plain, ≤ 192
 * gated / SwiGLU; C = 64: ≤ 1152 / 640), 16-byte aligned pointers. C = 192 / 256 would
 * leave room for at most one raw buffer next to a useful W: not taken. Deterministic:
 * each output element's sum is one warpgroup's fixed wgmma sequence (no atomics).
 * Measured (H200, 2026-11-30 08:10 UTC, bench/evofusion, C = 128, O = 128): LN + Linear
 * 0.101 ms at M = 768² (2.98 TB/s, 70 % of the copy bandwidth; two warpgroups 0.116 ms,
 * 61 %; the mma.sync kernel 0.146), 0.034 ms at 384² (two: 0.037); gated (two warpgroups)
 * 0.197 ms, 0.059 ms. With lg_ln_tile (lane pairs strided by 64) instead of lg_ln_tile_v
 * and two warpgroups: 0.133 ms, 54 %. The bulk copies replaced cp.async by every thread
 * (2026-11-30 22:08 UTC, same binaries, three rounds, M = 768²): LN + Linear 0.105–0.110 →
 * 0.105–0.106 ms, gated 0.160–0.161 → 0.155–0.158 ms, the triangle multiplication's
 * backward 2.265–2.279 → 2.251–2.260 ms. */
#include "ln_gemm_cuda.h"

#include <stdlib.h>
#include <string.h>

#include "fusion_util.cuh"
#include "ln_tile.cuh"
#include "tma_ptx.cuh"
#include "wgmma_ptx.cuh"

#define LW_SUB 64      /* rows per warpgroup subtile */
#define LW_MAXBUF 4
#define LW_SMEM_MAX (227 * 1024)
#define LW_BARS (3 * LW_MAXBUF * 8) /* one mbarrier per warpgroup and raw buffer */

/* Shared memory for NWG warpgroups (R = 64·NWG rows), byte offsets from a 1024-aligned
 * base (operand blocks 1024-aligned):
 *   xa: x̂, C/64 blocks of (R rows × 128 B), warpgroup wg's rows 64·wg..;
 *   w:  W, C/64 blocks of (nacc rows × 128 B), resident;
 *   xs: nbuf × (R, C) raw rows, warpgroup wg's rows 64·wg.. of each;
 *   os: per warpgroup the widest pass's output columns (OSW) as OSW/64 swizzled blocks of
 *       (64 rows × 128 B) (conflict-free fragment writes and 16-byte reads, no padding). */
/* Epilogues 1, 2 and 4 take two accumulator columns per output column. */
static __host__ __device__ constexpr bool lw_gated(int epi) { return epi == 1 || epi == 2 || epi == 4; }
/* Staged output columns per pass (epilogue 4 stages both of its halves). */
static __host__ __device__ inline int lw_osw(int O, int epi) {
  return epi == 4 ? 128 : lw_gated(epi) || O < 128 ? 64 : 128;
}
static size_t lw_smem_bytes(int C, int O, int epi, int nbuf, int nwg) {
  const size_t R = (size_t)LW_SUB * nwg, nacc = lw_gated(epi) ? 2 * (size_t)O : (size_t)O;
  return R * C * 2 + nacc * C * 2 + (size_t)nbuf * R * C * 2 + R * lw_osw(O, epi) * 2 +
         (epi == 4 ? R * 64 * 2 : 0) + LW_BARS + 1024; /* epilogue 4's dcm tiles; the raw
                                                         * buffers' mbarriers; the slack */
}
/* Raw row buffers per warpgroup for nwg warpgroups: the most that fit (≤ LW_MAXBUF), capped
 * by MF_LN_GEMM_WG_NBUF (2..4) from the environment (read once; for the lab and the bench);
 * 0 when not even min_nb fit. With one buffer the next subtile's rows are requested once the
 * LayerNorm has read this one's, and land during its GEMM and epilogue. */
static int lw_nbuf(int C, int O, int epi, int nwg, int min_nb = 2) {
  static int cap = 0;
  if (!cap) {
    const char *e = getenv("MF_LN_GEMM_WG_NBUF");
    const int v = e ? atoi(e) : 0;
    cap = v >= 2 && v <= LW_MAXBUF ? v : LW_MAXBUF;
  }
  for (int nb = cap; nb >= min_nb; nb--)
    if (lw_smem_bytes(C, O, epi, nb, nwg) <= LW_SMEM_MAX) return nb;
  return 0;
}
/* Raw buffers of the 3-warpgroup gated kernel: one is all that fits next to its W. */
static int lw_min_nb(int epi, int nwg) { return nwg == 3 && epi == 1 ? 1 : 2; }
/* Warpgroups per CTA: 3 where they fit (more warps to hide the LayerNorm's latency) — with
 * two raw buffers each for the plain and sigmoid epilogues (e.g. C = 128, O <= 128), with
 * one for the gated epilogue (C = 128, O <= 128) — else 2; mf_ln_gemm_wg_set_nwg caps it. */
static int g_nwg_cap = 3;
extern "C" int mf_ln_gemm_wg_set_nwg(int nwg) {
  const int prev = g_nwg_cap;
  g_nwg_cap = nwg == 2 ? 2 : 3;
  return prev;
}
static int lw_nwg(int C, int O, int epi) {
  return g_nwg_cap >= 3 && (epi == 0 || epi == 1 || epi == 3) &&
                 lw_nbuf(C, O, epi, 3, lw_min_nb(epi, 3)) > 0
             ? 3
             : 2;
}

/* One pass of N accumulator columns (shared W rows n0 .. n0 + N) for the warpgroup's 64
 * rows: GEMM, epilogue, staged 16-byte stores of output columns oc0 .. oc0 + NO (NO = N for
 * EPI 0 / 3, N/2 otherwise; ldm > 0: channel-major out, column o at o·ldm). os: the
 * warpgroup's staging blocks (NO/64 × 64 rows × 128 B, swizzled); BR: the rows of xa's
 * blocks. */
template <int C, int EPI, int N, int BR, bool CM>
static __device__ __forceinline__ void lw_pass(bf16 *__restrict__ out, unsigned char *os,
                                               uint32_t xa_u, uint32_t w_u, int nacc, int n0, int oc0,
                                               const bf16 *__restrict__ bias,
                                               const uint8_t *__restrict__ mask, int64_t m0,
                                               int rows, int64_t M, int O, int64_t ldm, int first,
                                               int wg, int wl, int lane, const bf16 *__restrict__ dcm,
                                               unsigned char *ds, int64_t ldo, int ost,
                                               const CUtensorMap *omap, int tst) {
  static_assert(!lw_gated(EPI) || N == 128, "lw_pass: gated / SwiGLU passes are m64n128");
  constexpr int NO = lw_gated(EPI) ? N / 2 : N;
  float d[N / 2];
  uint4 dv[4]; /* epilogue 4: this thread's pieces of the pass's (64 columns × 64 rows) dcm tile */
  if constexpr (EPI == 4) { /* loaded during the GEMM; 8 threads per column's 128-byte line */
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const int idx = (int)(threadIdx.x & 127) + q * 128, c = idx >> 3, j = idx & 7;
      dv[q] = 8 * j < rows ? *(const uint4 *)(dcm + (int64_t)(oc0 + c) * ldm + m0 + 8 * j)
                           : make_uint4(0u, 0u, 0u, 0u);
    }
  }
  const uint64_t da0 = mf_wg_desc(xa_u), db0 = mf_wg_desc(w_u + n0 * 128);
  mf_wg_fence();
#pragma unroll
  for (int k = 0; k < C / 16; k++) {
    const int kb = k / 4, kk = k % 4;
    const uint64_t da = mf_wg_desc_off(da0, kb * BR * 128 + kk * 32);
    const uint64_t db = mf_wg_desc_off(db0, kb * nacc * 128 + kk * 32);
    if constexpr (N == 128) mf_wg_ss_n128(d, da, db, k > 0);
    else mf_wg_ss_n64(d, da, db, k > 0);
  }
  mf_wg_commit();
  mf_wg_wait<0>();
  mf_wg_pin(d);
  if (!first) { /* the previous pass's stores have read os (epilogue 4: and ds) */
    if (tst && (threadIdx.x & 127) == 0) mf_bulk_wait_read();
    mf_bar_wg(wg);
  }
  if constexpr (EPI == 4) { /* the dcm tile transposed: column c's 64 rows at c·128, chunks swizzled */
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const int idx = (int)(threadIdx.x & 127) + q * 128, c = idx >> 3, j = idx & 7;
      *(uint4 *)(ds + c * 128 + (((j ^ c) & 7) << 4)) = dv[q];
    }
    mf_bar_wg(wg);
  }

  /* accumulator layout: d[4i + 2hh + e] = (row 16·wl + lane/4 + 8·hh,
   *                                        column 8i + 2·(lane%4) + e) */
#pragma unroll
  for (int hh = 0; hh < 2; hh++) {
    const int rl = wl * 16 + (lane >> 2) + 8 * hh;
    bool keep = true;
    if (EPI == 1 || EPI == 4) {
      const int64_t r = m0 + rl;
      keep = r < M && (!mask || mask[r]);
    }
#pragma unroll
    for (int i = 0; i < NO / 8; i++) {
      const int col = 8 * i + 2 * (lane & 3);
      float v0 = d[4 * i + 2 * hh], v1 = d[4 * i + 2 * hh + 1];
      if (EPI == 0) {
        if (bias) {
          v0 += mf_bf16_to_f32(bias[oc0 + col]);
          v1 += mf_bf16_to_f32(bias[oc0 + col + 1]);
        }
      } else if (EPI == 3) {
        v0 = mf_sigmoidf_fast(v0);
        v1 = mf_sigmoidf_fast(v1);
      } else if (EPI == 4) { /* dp in staging block 0, dg in block 1 */
        const float g0 = d[4 * (i + NO / 8) + 2 * hh], g1 = d[4 * (i + NO / 8) + 2 * hh + 1];
        const int sw = (rl & 7) * 2;
        const float d0 = keep ? mf_bf16_to_f32(*(const bf16 *)(ds + col * 128 + ((((rl >> 3) ^ col) & 7) << 4) + sw)) : 0.0f;
        const float d1 = keep ? mf_bf16_to_f32(*(const bf16 *)(ds + (col + 1) * 128 + ((((rl >> 3) ^ (col + 1)) & 7) << 4) + sw)) : 0.0f;
        const float s0 = mf_sigmoidf_fast(g0), s1 = mf_sigmoidf_fast(g1);
        *(__nv_bfloat162 *)(os + 8192 + mf_sw128(rl, col)) =
            __floats2bfloat162_rn(d0 * v0 * s0 * (1.0f - s0), d1 * v1 * s1 * (1.0f - s1));
        v0 = d0 * s0;
        v1 = d1 * s1;
      } else if (EPI == 1) {
        const float g0 = d[4 * (i + NO / 8) + 2 * hh], g1 = d[4 * (i + NO / 8) + 2 * hh + 1];
        v0 = keep ? mf_sigmoidf_fast(g0) * v0 : 0.0f;
        v1 = keep ? mf_sigmoidf_fast(g1) * v1 : 0.0f;
      } else {
        const float b0 = d[4 * (i + NO / 8) + 2 * hh], b1 = d[4 * (i + NO / 8) + 2 * hh + 1];
        v0 = v0 * mf_sigmoidf_fast(v0) * b0;
        v1 = v1 * mf_sigmoidf_fast(v1) * b1;
      }
      if constexpr (CM) { /* transposed: column c's 64 rows in 128 bytes at c·128, chunks
                           * (8 rows) swizzled by c % 8 — conflict-free both ways */
        const __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
        *(bf16 *)(os + col * 128 + ((((rl >> 3) ^ col) & 7) << 4) + (rl & 7) * 2) = h.x;
        *(bf16 *)(os + (col + 1) * 128 + ((((rl >> 3) ^ (col + 1)) & 7) << 4) + (rl & 7) * 2) = h.y;
      } else {
        *(__nv_bfloat162 *)(os + (col / 64) * 8192 + mf_sw128(rl, col % 64)) =
            __floats2bfloat162_rn(v0, v1);
      }
    }
  }
  if (tst) mf_fence_proxy_async(); /* the staged blocks visible to the TMA unit */
  mf_bar_wg(wg);
  if (tst) { /* one thread stores the staged 64 × 64 blocks by TMA (the map clips rows >= M,
              * row-major columns >= ost); os is rewritten after mf_bulk_wait_read */
    if ((threadIdx.x & 127) == 0) {
      const uint32_t os_u = mf_smem_u32(os);
      if constexpr (EPI == 4) { /* dp at columns oc0.., dg at O + oc0.. */
        mf_tma_store_2d(omap, oc0, (int)m0, os_u);
        mf_tma_store_2d(omap, O + oc0, (int)m0, os_u + 8192);
      } else {
#pragma unroll
        for (int b = 0; b < NO / 64; b++) {
          if (CM) mf_tma_store_2d(omap, (int)m0, oc0 + 64 * b, os_u + b * 8192);
          else if (oc0 + 64 * b < ost) mf_tma_store_2d(omap, oc0 + 64 * b, (int)m0, os_u + b * 8192);
        }
      }
      mf_bulk_commit();
    }
    return;
  }
  if constexpr (CM) { /* 8 threads per column: its 64 rows as one 128-byte line */
#pragma unroll 4
    for (int i = 0; i < NO * 8 / 128; i++) {
      const int idx = (int)(threadIdx.x & 127) + i * 128, c = idx >> 3, j = idx & 7;
      if (8 * j >= rows) continue;
      const uint4 v = *(const uint4 *)(os + c * 128 + (((j ^ c) & 7) << 4));
      bf16 *dst = out + (int64_t)(oc0 + c) * ldm + m0 + 8 * j;
      if (8 * j + 8 <= rows) {
        *(uint4 *)dst = v;
      } else {
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 8; k++)
          if (k < rows - 8 * j) *(uint16_t *)(dst + k) = (uint16_t)(w[k / 2] >> (16 * (k % 2)));
      }
    }
    return;
  }
  if constexpr (EPI == 4) { /* rows of [dp | dg]: 16 pieces, dp at oc0.., dg at O + oc0.. */
#pragma unroll
    for (int i = 0; i < LW_SUB * 16 / 128; i++) {
      const int idx = (int)(threadIdx.x & 127) + i * 128;
      const int r = idx / 16, ch = idx % 16;
      if (r < rows)
        *(uint4 *)(out + (m0 + r) * ldo + (ch < 8 ? oc0 + ch * 8 : O + oc0 + (ch - 8) * 8)) =
            *(const uint4 *)(os + (ch / 8) * 8192 + mf_sw128_chunk(r, ch % 8));
    }
    return;
  }
  constexpr int CPR = NO / 8; /* 16-byte pieces per staged row */
#pragma unroll
  for (int i = 0; i < LW_SUB * CPR / 128; i++) {
    const int idx = (int)(threadIdx.x & 127) + i * 128;
    const int r = idx / CPR, ch = idx % CPR;
    if (r < rows && oc0 + ch * 8 < ost)
      *(uint4 *)(out + (m0 + r) * ldo + oc0 + ch * 8) =
          *(const uint4 *)(os + (ch / 8) * 8192 + mf_sw128_chunk(r, ch % 8));
  }
}

template <int C, int EPI, int NWG, bool CM>
static __global__ void __launch_bounds__(128 * NWG, 1)
ln_gemm_wg_kernel(bf16 *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
                  const bf16 *__restrict__ x, const bf16 *__restrict__ gamma,
                  const bf16 *__restrict__ beta, const bf16 *__restrict__ w,
                  const bf16 *__restrict__ bias, const uint8_t *__restrict__ mask, int64_t M,
                  int O, int64_t ldm, int mode, int nbuf, const bf16 *__restrict__ dcm, int64_t ldo,
                  int ost, const __grid_constant__ CUtensorMap omap, int tst,
                  const __grid_constant__ CUtensorMap xmap, int xst) {
  /* out (M, ldo) of which columns 0 .. ost − 1 are stored (row-major epilogues 0 and 3; the
   * others store all O), or (O, ldm) channel-major when ldm > 0; mean, rstd (M); x (M, C);
   * gamma, beta (C); w (nacc, C); bias (O); mask (M); tst: the stores by TMA (else by all
   * threads); xst (only with tst): x̂ itself stored too, by TMA through xmap (M, C) */
  extern __shared__ unsigned char lw_raw[];
  unsigned char *sm = lw_raw + ((1024u - (mf_smem_u32(lw_raw) & 1023u)) & 1023u);
  constexpr int R = LW_SUB * NWG, THREADS = 128 * NWG; /* rows of a CTA's tile layouts */
  const int nacc = lw_gated(EPI) ? 2 * O : O;
  unsigned char *xa = sm, *ws = sm + R * C * 2;
  bf16 *xs = (bf16 *)(ws + nacc * C * 2);          /* nbuf × (R, C) */
  unsigned char *os = (unsigned char *)(xs + nbuf * R * C); /* NWG × (OSW/64 blocks) */
  const int osb = lw_osw(O, EPI) * 128;            /* staging bytes per warpgroup */
  const int lane = threadIdx.x & 31, warp = lg_warp_id(), wg = warp >> 2, wl = warp & 3;
  const int tid = (int)(threadIdx.x & 127);
  const int64_t nsub = (M + LW_SUB - 1) / LW_SUB;
  const int64_t s0 = NWG * (int64_t)blockIdx.x + wg, stride = NWG * (int64_t)gridDim.x;
  uint64_t *bars = (uint64_t *)(os + NWG * osb + (EPI == 4 ? NWG * 8192 : 0)); /* NWG × LW_MAXBUF */
  if (threadIdx.x == 0) {
    for (int i = 0; i < NWG * LW_MAXBUF; i++) mf_mbar_init(mf_smem_u32(bars + i), 1);
    mf_mbar_init_fence();
  }
  __syncthreads();
  float g[8], bb[8]; /* γ, β of the lane's 8 channels (lg_ln_tile_v) */
  lg_ln_params_v<C>(g, bb, gamma, beta, mode, lane);

  /* W, swizzled (gated / SwiGLU: halves interleaved per 64 output columns), each CTA
   * starting at another row (all CTAs on the same L2 lines at once would queue) */
  const int rot = (int)(blockIdx.x * 16u % (unsigned)nacc);
  for (int idx = threadIdx.x; idx < nacc * (C / 8); idx += THREADS) {
    const int n0 = idx / (C / 8), p = idx - n0 * (C / 8);
    const int n = n0 + rot < nacc ? n0 + rot : n0 + rot - nacc; /* shared row */
    const int src = lw_gated(EPI) ? ((n >> 6) & 1) * O + (n >> 7) * 64 + (n & 63) : n;
    lg_cp16(ws + (p / 8) * (nacc * 128) + mf_sw128_chunk(n, p % 8),
            w + (int64_t)src * C + p * 8);
  }
  mf_cp_async_commit();
  /* the raw rows: one bulk copy (the TMA engine's linear copy) of a subtile's contiguous
   * rows·C·2 bytes per buffer, by the warpgroup's thread 0, completing on the buffer's
   * mbarrier (the LayerNorm rows kernels reached 71 % of the copy bandwidth with cp.async,
   * 78 % with bulk copies: BENCHMARKS.md) */
  const uint32_t bar_u = mf_smem_u32(bars) + 8u * (uint32_t)(wg * LW_MAXBUF);
  auto load_raw = [&](int b, int64_t s) {
    if (tid != 0 || s >= nsub) return;
    const int64_t m0 = s * LW_SUB;
    const uint32_t bytes = (uint32_t)((M - m0 < LW_SUB ? M - m0 : LW_SUB) * C * 2);
    mf_mbar_expect_tx(bar_u + 8u * b, bytes);
    mf_bulk_load(mf_smem_u32(xs + b * R * C + wg * LW_SUB * C), x + m0 * C, bytes, bar_u + 8u * b);
  };
  for (int b = 0; b < nbuf; b++) load_raw(b, s0 + b * stride);
  mf_cp_async_wait<0>(); /* W landed */
  mf_fence_proxy_async();
  __syncthreads(); /* the last CTA-wide barrier: from here on each warpgroup runs alone */

  const uint32_t xa_u = mf_smem_u32(xa) + wg * LW_SUB * 128, w_u = mf_smem_u32(ws);
  unsigned char *osw = os + wg * osb;
  unsigned char *dsw = os + NWG * osb + wg * 8192; /* epilogue 4: NWG × (64 × 64) dcm tiles */
  int buf = 0;
  uint32_t phase = 0; /* the parity of the buffers' current round, flipped after buffer nbuf − 1 */
  for (int64_t s = s0; s < nsub; s += stride) {
    const int64_t m0 = s * LW_SUB;
    const int rows = (int)(M - m0 < LW_SUB ? M - m0 : LW_SUB);
    bf16 *xb = xs + buf * R * C;
    mf_mbar_wait(bar_u + 8u * buf, phase); /* this subtile's rows landed */
    if (tst && tid == 0) mf_bulk_wait_read();
    mf_bar_wg(wg); /* the previous subtile's stores done with os */
    /* rows 64·wg.. of the R-row layouts: warp index 4·wg + wl, row base m0 − 64·wg */
    lg_ln_tile_v<C, R>((bf16 *)xa, xb, mean, rstd, m0 - wg * LW_SUB, M, g, bb, mode, warp, lane);
    mf_fence_proxy_async();
    mf_bar_wg(wg); /* x̂ ready for wgmma; xb free */
    if (xst && tid == 0) { /* x̂'s 64 × 64 blocks are TMA boxes already (the 128-byte swizzle);
                            * the next subtile rewrites them after mf_bulk_wait_read above */
#pragma unroll
      for (int b = 0; b < C / 64; b++) mf_tma_store_2d(&xmap, 64 * b, (int)m0, xa_u + b * R * 128);
      mf_bulk_commit();
    }
    load_raw(buf, s + nbuf * stride);
    if (++buf == nbuf) {
      buf = 0;
      phase ^= 1u;
    }

    if constexpr (!lw_gated(EPI)) { /* output columns n0.. = shared W rows n0.. */
      int n0 = 0;
      for (; n0 + 128 <= O; n0 += 128)
        lw_pass<C, EPI, 128, R, CM>(out, osw, xa_u, w_u, nacc, n0, n0, bias, mask, m0, rows, M, O,
                                ldm, n0 == 0, wg, wl, lane, dcm, dsw, ldo, ost, &omap, tst);
      if (n0 < O) /* O % 128 == 64: one m64n64 pass */
        lw_pass<C, EPI, 64, R, CM>(out, osw, xa_u, w_u, nacc, n0, n0, bias, mask, m0, rows, M, O,
                               ldm, n0 == 0, wg, wl, lane, dcm, dsw, ldo, ost, &omap, tst);
    } else { /* output columns 64j.. = shared W rows 128j.. (p | g or a | b) */
      for (int j = 0; j < O / 64; j++)
        lw_pass<C, EPI, 128, R, CM>(out, osw, xa_u, w_u, nacc, 128 * j, 64 * j, bias, mask, m0,
                                rows, M, O, ldm, j == 0, wg, wl, lane, dcm, dsw, ldo, ost, &omap, tst);
    }
  }
  if (tst && tid == 0) mf_bulk_wait_all(); /* the TMA stores done before the CTA exits */
}

extern "C" int mf_ln_gemm_wg_supported(int C, int O, int epilogue, mf_ln_mode mode,
                                       const void *x, const void *out, const void *w) {
  return (C == 64 || C == 128) && O > 0 && O % 64 == 0 && epilogue >= 0 && epilogue <= 4 &&
         mode >= MF_LN_FULL && mode <= MF_LN_IDENTITY &&
         lw_nbuf(C, O, epilogue, 2) > 0 && (uintptr_t)x % 16 == 0 &&
         (uintptr_t)out % 16 == 0 && (uintptr_t)w % 16 == 0;
}

/* One call's arguments (see the entry points below). */
typedef struct {
  bf16 *out;
  float *mean, *rstd;
  const bf16 *x, *gamma, *beta, *w, *bias, *dcm;
  const uint8_t *mask;
  int64_t M, ldm, ldo;
  int O, mode, ost; /* ost: the row-major plain / sigmoid epilogues' stored columns (<= O) */
  bf16 *xhat;       /* epilogue 4: x̂ (M, C) stored too where the TMA stores run, else NULL */
} lw_args;

/* The TMA store epilogue for the kernels in MF_LN_GEMM_WG_TMA_STORE's mask (read once; for
 * A/B runs): 1 row-major out (epilogues 0–3) with three warpgroups, 2 row-major with two, 4
 * channel-major, 8 epilogue 4; default 13. Also off where the driver refuses the map. Its
 * thread-issued form, 16-byte st.global by all 128 threads of a warpgroup, stays for the
 * two-warpgroup row-major kernels and as the fallback. Measured per kernel in one block step
 * at N = 768 (H200, 2026-11-30, ncu; 23:33 UTC mask 0 against 7, 23:40 UTC 5 against 13):
 * channel-major gated 169 → 153 µs, row-major sigmoid (three warpgroups) 124 → 116, LN +
 * Linear (three) 40 → 36, epilogue 4 95 → 85, but the triangle attention's two-warpgroup
 * O = 384 projection 266 → 275 µs. Two staging buffers per warpgroup (stores of one pass
 * under the next pass's products, a raw buffer fewer) were slower still (23:40 UTC). */
static int lw_tma_store_on(int nwg, bool cm, int epi) {
  static int mask = -1;
  if (mask < 0) {
    const char *e = getenv("MF_LN_GEMM_WG_TMA_STORE");
    mask = e ? atoi(e) & 15 : 13;
  }
  return mask & (epi == 4 ? 8 : cm ? 4 : nwg == 3 ? 1 : 2);
}

/* Returns whether x̂ was stored (a.xhat, epilogue 4 with TMA stores). */
template <int C, int EPI, int NWG, bool CM>
static int lw_launch_n(const lw_args &a, cudaStream_t s) {
  /* out as 64 × 64 boxes in the staging's 128-byte swizzle: (ost columns, M rows) at row
   * stride ldo (epilogue 4: the 2O columns of [dp | dg]), or channel-major (M, O) at channel
   * stride ldm */
  CUtensorMap omap;
  memset(&omap, 0, sizeof omap);
  int tst = 0;
  if (lw_tma_store_on(NWG, CM, EPI)) {
    const uint64_t cols = EPI == 4 ? 2 * (uint64_t)a.O : (uint64_t)a.ost;
    const uint64_t dims[2] = {CM ? (uint64_t)a.M : cols, CM ? (uint64_t)a.O : (uint64_t)a.M};
    const uint64_t strides[1] = {(uint64_t)(CM ? a.ldm : a.ldo) * 2};
    const uint32_t box[2] = {64, 64};
    tst = mf_tma_encode_bf16(&omap, a.out, 2, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B) == 0;
  }
  CUtensorMap xmap;
  memset(&xmap, 0, sizeof xmap);
  int xst = 0;
  if (EPI == 4 && tst && a.xhat && (uintptr_t)a.xhat % 16 == 0) {
    const uint64_t dims[2] = {(uint64_t)C, (uint64_t)a.M}, strides[1] = {(uint64_t)C * 2};
    const uint32_t box[2] = {64, 64};
    xst = mf_tma_encode_bf16(&xmap, a.xhat, 2, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B) == 0;
  }
  const int nbuf = lw_nbuf(C, a.O, EPI, NWG, lw_min_nb(EPI, NWG));
  const size_t smem = lw_smem_bytes(C, a.O, EPI, nbuf, NWG);
  MF_CHECK_CUDA(cudaFuncSetAttribute(ln_gemm_wg_kernel<C, EPI, NWG, CM>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const int64_t ntile = (a.M + NWG * LW_SUB - 1) / (NWG * LW_SUB); /* a subtile per warpgroup */
  const int grid = (int)(ntile < mf_sm_count() ? ntile : mf_sm_count());
  ln_gemm_wg_kernel<C, EPI, NWG, CM><<<grid, 128 * NWG, smem, s>>>(
      a.out, a.mean, a.rstd, a.x, a.gamma, a.beta, a.w, a.bias, a.mask, a.M, a.O, a.ldm, a.mode,
      nbuf, a.dcm, a.ldo, a.ost, omap, tst, xmap, xst);
  MF_CHECK_LAUNCH();
  return xst;
}

template <int C, int EPI>
static int lw_launch(const lw_args &a, cudaStream_t s) {
  if constexpr (EPI == 1 || EPI == 3) /* the channel-major kernels (the triangle multiplication's) */
    if (a.ldm > 0) {
      if (EPI == 1 && lw_nwg(C, a.O, EPI) == 3) return lw_launch_n<C, EPI, 3, true>(a, s);
      return lw_launch_n<C, EPI, 2, true>(a, s);
    }
  MF_ASSERT(a.ldm == 0 || EPI == 4, "ln_gemm_wg: channel-major out with epilogue %d", EPI);
  if constexpr (EPI == 0 || EPI == 1 || EPI == 3)
    if (lw_nwg(C, a.O, EPI) == 3) return lw_launch_n<C, EPI, 3, false>(a, s);
  return lw_launch_n<C, EPI, 2, false>(a, s);
}

/* Returns whether x̂ was stored (a.xhat; trivially for M = 0). */
static int lw_run(lw_args a, int C, int epilogue, cudaStream_t stream) {
  const mf_ln_mode mode = (mf_ln_mode)a.mode;
  MF_ASSERT(mf_ln_gemm_wg_supported(C, a.O, epilogue, mode, a.x, a.out, a.w),
            "ln_gemm_wg: unsupported C=%d O=%d epilogue=%d mode=%d (or alignment)", C, a.O,
            epilogue, a.mode);
  lg_check_ln_args("ln_gemm_wg", mode, a.gamma, a.beta, a.mean, a.rstd, 0);
  if (a.M <= 0) return 1;
  if (mode == MF_LN_IDENTITY) a.mean = a.rstd = NULL;
#define LW_CASE(C_)                                                                            \
  if (C == C_) {                                                                               \
    switch (epilogue) {                                                                        \
    case 0: return lw_launch<C_, 0>(a, stream);                                                \
    case 1: return lw_launch<C_, 1>(a, stream);                                                \
    case 2: return lw_launch<C_, 2>(a, stream);                                                \
    case 3: return lw_launch<C_, 3>(a, stream);                                                \
    default: return lw_launch<C_, 4>(a, stream);                                               \
    }                                                                                          \
  }
  LW_CASE(64)
  LW_CASE(128)
#undef LW_CASE
  return 0;
}

extern "C" void mf_ln_gemm_wg_cuda(bf16 *out, float *mean, float *rstd, const bf16 *x,
                                   const bf16 *gamma, const bf16 *beta, const bf16 *w,
                                   const bf16 *bias, const uint8_t *mask, int64_t M, int C, int O,
                                   mf_ln_mode mode, int epilogue, cudaStream_t stream) {
  MF_ASSERT(epilogue != 4, "ln_gemm_wg: epilogue 4 is mf_ln_gemm_wg_gated_bwd_cuda");
  const lw_args a = {out, mean, rstd, x, gamma, beta, w, bias, NULL, mask, M, 0, O, O, (int)mode, O, NULL};
  lw_run(a, C, epilogue, stream);
}

extern "C" void mf_ln_gemm_wg_cm_cuda(bf16 *out, int64_t ldm, float *mean, float *rstd,
                                      const bf16 *x, const bf16 *gamma, const bf16 *beta,
                                      const bf16 *w, const bf16 *bias, const uint8_t *mask,
                                      int64_t M, int C, int O, mf_ln_mode mode, int epilogue,
                                      cudaStream_t stream) {
  MF_ASSERT(ldm >= M && ldm % 8 == 0,
            "ln_gemm_wg_cm: channel stride ldm=%lld (>= M=%lld, a multiple of 8)", (long long)ldm,
            (long long)M);
  MF_ASSERT(epilogue == 1 || epilogue == 3, "ln_gemm_wg_cm: epilogue %d (1 or 3)", epilogue);
  const lw_args a = {out, mean, rstd, x, gamma, beta, w, bias, NULL, mask, M, ldm, O, O, (int)mode, O, NULL};
  lw_run(a, C, epilogue, stream);
}

extern "C" int mf_ln_gemm_wg_gated_bwd_cuda(bf16 *out, int64_t ldo, bf16 *xhat, const bf16 *dcm,
                                            int64_t ldm, float *mean, float *rstd, const bf16 *x,
                                            const bf16 *gamma, const bf16 *beta, const bf16 *w,
                                            const uint8_t *mask, int64_t M, int C, int O,
                                            mf_ln_mode mode, cudaStream_t stream) {
  MF_ASSERT(dcm && ldm >= M && ldm % 8 == 0 && (uintptr_t)dcm % 16 == 0,
            "ln_gemm_wg_gated_bwd: dcm with channel stride ldm=%lld (>= M=%lld, a multiple of 8, "
            "16-byte aligned)", (long long)ldm, (long long)M);
  MF_ASSERT(ldo >= 2 * O && ldo % 8 == 0, "ln_gemm_wg_gated_bwd: out row stride ldo=%lld (>= 2·O=%d, a multiple of 8)",
            (long long)ldo, 2 * O);
  const lw_args a = {out, mean, rstd, x, gamma, beta, w, NULL, dcm, mask, M, ldm, ldo, O, (int)mode,
                     O, xhat};
  return lw_run(a, C, 4, stream);
}

extern "C" void mf_ln_gemm_wg_ld_cuda(bf16 *out, int64_t ldo, int ncols, float *mean, float *rstd,
                                      const bf16 *x, const bf16 *gamma, const bf16 *beta,
                                      const bf16 *w, const bf16 *bias, int64_t M, int C, int O,
                                      mf_ln_mode mode, cudaStream_t stream) {
  MF_ASSERT(ncols > 0 && ncols <= O && ncols % 8 == 0 && ldo >= ncols && ldo % 8 == 0,
            "ln_gemm_wg_ld: ncols=%d (<= O=%d, a multiple of 8), row stride ldo=%lld (>= ncols, a "
            "multiple of 8)", ncols, O, (long long)ldo);
  const lw_args a = {out, mean, rstd, x, gamma, beta, w, bias, NULL, NULL, M, 0, ldo, O, (int)mode, ncols, NULL};
  lw_run(a, C, 0, stream);
}
