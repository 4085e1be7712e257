/* trimul.cu — EvoFusion triangle multiplicative update on the GPU, forward and backward:
 * LN_in staging + one projection GEMM + gate/mask epilogue into channel-major A, B (or,
 * variant 2, the default, three wgmma LN + projection kernels writing A, B and σ(g), and in
 * the backward two recomputing the projection with the gate backward as their epilogue);
 * batched per-channel GEMMs; LN_out (channel-major in, row-major staging out) + W_z GEMM
 * + gated output epilogue with an optional fused residual + row/column dropout.
 * The four transposing kernels (gate forward, LN_out forward and backward, gate backward)
 * exist twice: scalar 32-row tiles, and vectorised 64-row tiles with 16-byte accesses
 * (mf_trimul_cuda_set_variant). The channel-major arrays have a channel stride padded to a
 * multiple of 8 (tri_ldm) and chunks start on multiples of 8 (tri_chunk), so the vectorised
 * kernels run for every N, N² % 8 != 0 included (a tail tile of the last chunk); before,
 * odd N and N ≡ 2 (mod 4) fell back to the scalar kernels everywhere, 1.8x their time.
 * See trimul_cuda.h. Not the CPU reference (src/ops/cpu/trimul.c). */
#include "trimul_cuda.h"

#include "fusion_util.cuh"
#include "gemm_ln_bwd_cuda.h"
#include "ln_gemm_cuda.h"
#include "ln_linear_cuda.h"
#include "trimul_ph1_cuda.h"
#include "trimul_ph3_cuda.h"

#define TRI_TM 32      /* rows (pair positions) per tile of the scalar transposing kernels */
#define TRI_THREADS 256
#define TRI_MAX_CHV 8  /* Ch <= 32·8 */

/* ================================================================ kernels */

/* From P (rows, 4Ch + C) = x̂·w_catᵀ of chunk rows m0..m0+rows−1:
 *   A_cm[c, m] = pm[m]·σ(ag)·ap,  B_cm[c, m] = pm[m]·σ(bg)·bp   (Ch, ldm) chan.-major
 *   sg[m, c] = σ(g)                                              (M, C)
 * Transposed through shared memory: a tile of TRI_TM rows × Ch channels; P is read VEC
 * channels at a time (8 when C and Ch are multiples of 8). */
template <int VEC>
static __global__ void tri_gate_fwd_kernel(bf16 *__restrict__ A_cm, bf16 *__restrict__ B_cm,
                                    bf16 *__restrict__ sg, const bf16 *__restrict__ P,
                                    const uint8_t *__restrict__ pm, int64_t ldm, int64_t m0,
                                    int64_t rows, int C, int Ch) {
  extern __shared__ float tile[]; /* (Ch, TRI_TM + 1) */
  const int64_t t0 = (int64_t)blockIdx.x * TRI_TM;
  const int nr = (int)(rows - t0 < TRI_TM ? rows - t0 : TRI_TM);
  const int ldp = 4 * Ch + C, cv = Ch / VEC;
  for (int op = 0; op < 2; op++) {
    for (int idx = threadIdx.x; idx < TRI_TM * cv; idx += blockDim.x) {
      const int r = idx / cv, c = (idx - r * cv) * VEC;
      if (r < nr) {
        const bf16 *prow = P + (t0 + r) * ldp + op * 2 * Ch;
        float p[VEC], g[VEC];
        mf_ldv<VEC>(p, prow + c);
        mf_ldv<VEC>(g, prow + Ch + c);
        const bool keep = pm ? pm[m0 + t0 + r] != 0 : true;
#pragma unroll
        for (int k = 0; k < VEC; k++)
          tile[(c + k) * (TRI_TM + 1) + r] = keep ? mf_sigmoidf(g[k]) * p[k] : 0.0f;
      }
    }
    __syncthreads();
    bf16 *dst = op ? B_cm : A_cm;
    for (int idx = threadIdx.x; idx < TRI_TM * Ch; idx += blockDim.x) {
      const int c = idx / TRI_TM, r = idx - c * TRI_TM;
      if (r < nr) dst[(int64_t)c * ldm + m0 + t0 + r] = mf_f32_to_bf16(tile[c * (TRI_TM + 1) + r]);
    }
    __syncthreads();
  }
  const int gv = C / VEC;
  for (int idx = threadIdx.x; idx < TRI_TM * gv; idx += blockDim.x) {
    const int r = idx / gv, c = (idx - r * gv) * VEC;
    if (r < nr) {
      float g[VEC];
      mf_ldv<VEC>(g, P + (t0 + r) * ldp + 4 * Ch + c);
#pragma unroll
      for (int k = 0; k < VEC; k++) g[k] = mf_sigmoidf(g[k]);
      mf_stv<VEC>(sg + (m0 + t0 + r) * C + c, g);
    }
  }
}

/* tile (Ch, TRI_TM + 1) fp32 = T_cm (Ch, ldm) columns m0 + t0 .. m0 + t0 + nr − 1, the block's
 * nr = min(rows − t0, TRI_TM) of the chunk's rows, by the whole block (then synchronised);
 * returns nr. */
static __device__ __forceinline__ int tri_cm_tile_load(float *tile, const bf16 *__restrict__ T_cm,
                                                       int64_t ldm, int64_t m0, int64_t t0,
                                                       int64_t rows, int Ch) {
  const int nr = (int)(rows - t0 < TRI_TM ? rows - t0 : TRI_TM);
  for (int idx = threadIdx.x; idx < TRI_TM * Ch; idx += blockDim.x) {
    const int c = idx / TRI_TM, r = idx - c * TRI_TM;
    if (r < nr) tile[c * (TRI_TM + 1) + r] = mf_bf16_to_f32(T_cm[(int64_t)c * ldm + m0 + t0 + r]);
  }
  __syncthreads();
  return nr;
}

/* y (rows, Ch) row-major = LN_out of T_cm (Ch, ldm) columns m0..m0+rows−1; statistics
 * computed into mean/rstd (M, indexed by m) or read from them (use_saved). */
static __global__ void tri_ln_cm_kernel(bf16 *__restrict__ y, float *__restrict__ mean,
                                 float *__restrict__ rstd, const bf16 *__restrict__ T_cm,
                                 const bf16 *__restrict__ gamma, const bf16 *__restrict__ beta,
                                 int64_t ldm, int64_t m0, int64_t rows, int Ch, int use_saved) {
  extern __shared__ float tile[]; /* (Ch, TRI_TM + 1) */
  const int64_t t0 = (int64_t)blockIdx.x * TRI_TM;
  const int nr = tri_cm_tile_load(tile, T_cm, ldm, m0, t0, rows, Ch);
  const int lane = threadIdx.x % MF_WARP_SIZE, w = threadIdx.x / MF_WARP_SIZE;
  const int nw = blockDim.x / MF_WARP_SIZE;
  for (int r = w; r < nr; r += nw) {
    const int64_t m = m0 + t0 + r;
    float mu, rs;
    if (use_saved) {
      mu = mean[m];
      rs = rstd[m];
    } else {
      float s = 0.0f;
      for (int c = lane; c < Ch; c += MF_WARP_SIZE) s += tile[c * (TRI_TM + 1) + r];
      mu = mf_warp_sum(s) / (float)Ch;
      float q = 0.0f;
      for (int c = lane; c < Ch; c += MF_WARP_SIZE) {
        const float d = tile[c * (TRI_TM + 1) + r] - mu;
        q += d * d;
      }
      rs = 1.0f / sqrtf(mf_warp_sum(q) / (float)Ch + (float)MF_LN_EPS);
      if (lane == 0) {
        mean[m] = mu;
        rstd[m] = rs;
      }
    }
    for (int c = lane; c < Ch; c += MF_WARP_SIZE)
      y[(t0 + r) * Ch + c] = mf_f32_to_bf16((tile[c * (TRI_TM + 1) + r] - mu) * rs *
                                                mf_bf16_to_f32(gamma[c]) +
                                            mf_bf16_to_f32(beta[c]));
  }
}

/* LN_out backward, channel-major: dT_cm (Ch, ldm) columns m0.. from dy (rows, Ch) bf16,
 * T_cm and the saved statistics; part (gridDim.x, 2Ch) = per-block Σ dy⊙x̂ and Σ dy. */
static __global__ void tri_ln_cm_bwd_kernel(bf16 *__restrict__ dT_cm, float *__restrict__ part,
                                     const bf16 *__restrict__ dy, const bf16 *__restrict__ T_cm,
                                     const float *__restrict__ mean,
                                     const float *__restrict__ rstd,
                                     const bf16 *__restrict__ gamma, int64_t ldm, int64_t m0,
                                     int64_t rows, int Ch) {
  extern __shared__ float sm[]; /* tile (Ch, TRI_TM + 1), then (warps, 2Ch) */
  float *tile = sm, *red = sm + Ch * (TRI_TM + 1);
  const int64_t t0 = (int64_t)blockIdx.x * TRI_TM;
  const int nr = tri_cm_tile_load(tile, T_cm, ldm, m0, t0, rows, Ch);
  const int lane = threadIdx.x % MF_WARP_SIZE, w = threadIdx.x / MF_WARP_SIZE;
  const int nw = blockDim.x / MF_WARP_SIZE;
  float pg[TRI_MAX_CHV], pb[TRI_MAX_CHV];
#pragma unroll
  for (int i = 0; i < TRI_MAX_CHV; i++) pg[i] = pb[i] = 0.0f;
  for (int r = w; r < nr; r += nw) {
    const int64_t m = m0 + t0 + r;
    const float mu = mean[m], rs = rstd[m];
    float xh[TRI_MAX_CHV], g[TRI_MAX_CHV], sg = 0.0f, sgx = 0.0f;
#pragma unroll
    for (int i = 0; i < TRI_MAX_CHV; i++) {
      const int c = i * MF_WARP_SIZE + lane;
      xh[i] = g[i] = 0.0f;
      if (c < Ch) {
        const float d = mf_bf16_to_f32(dy[(t0 + r) * Ch + c]);
        xh[i] = (tile[c * (TRI_TM + 1) + r] - mu) * rs;
        g[i] = d * mf_bf16_to_f32(gamma[c]);
        pg[i] += d * xh[i];
        pb[i] += d;
      }
      sg += g[i];
      sgx += g[i] * xh[i];
    }
    sg = mf_warp_sum(sg) / (float)Ch;
    sgx = mf_warp_sum(sgx) / (float)Ch;
#pragma unroll
    for (int i = 0; i < TRI_MAX_CHV; i++) {
      const int c = i * MF_WARP_SIZE + lane;
      if (c < Ch) tile[c * (TRI_TM + 1) + r] = rs * (g[i] - sg - xh[i] * sgx);
    }
  }
#pragma unroll
  for (int i = 0; i < TRI_MAX_CHV; i++) {
    const int c = i * MF_WARP_SIZE + lane;
    if (c < Ch) {
      red[w * 2 * Ch + c] = pg[i];
      red[w * 2 * Ch + Ch + c] = pb[i];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < TRI_TM * Ch; idx += blockDim.x) {
    const int c = idx / TRI_TM, r = idx - c * TRI_TM;
    if (r < nr) dT_cm[(int64_t)c * ldm + m0 + t0 + r] = mf_f32_to_bf16(tile[c * (TRI_TM + 1) + r]);
  }
  for (int j = threadIdx.x; j < 2 * Ch; j += blockDim.x) {
    float s = 0.0f;
    for (int k = 0; k < nw; k++) s += red[k * 2 * Ch + j];
    part[(int64_t)blockIdx.x * 2 * Ch + j] = s;
  }
}

/* In place on P4 (rows, 4Ch) = [ap | ag | bp | bg] of chunk rows m0..: with d = pm·dA_cm
 * (or dB_cm) read channel-major, ap → d·σ(ag), ag → d·ap·σ(ag)(1 − σ(ag)); same for B.
 * P4 is accessed VEC channels at a time (8 when Ch % 8 == 0). */
template <int VEC>
static __global__ void tri_gate_bwd_kernel(bf16 *__restrict__ P4, const bf16 *__restrict__ dA_cm,
                                    const bf16 *__restrict__ dB_cm,
                                    const uint8_t *__restrict__ pm, int64_t ldm, int64_t m0,
                                    int64_t rows, int Ch) {
  extern __shared__ float tile[]; /* (Ch, TRI_TM + 1) */
  const int64_t t0 = (int64_t)blockIdx.x * TRI_TM;
  const int nr = (int)(rows - t0 < TRI_TM ? rows - t0 : TRI_TM);
  const int cv = Ch / VEC;
  for (int op = 0; op < 2; op++) {
    const bf16 *src = op ? dB_cm : dA_cm;
    for (int idx = threadIdx.x; idx < TRI_TM * Ch; idx += blockDim.x) {
      const int c = idx / TRI_TM, r = idx - c * TRI_TM;
      if (r < nr) tile[c * (TRI_TM + 1) + r] = mf_bf16_to_f32(src[(int64_t)c * ldm + m0 + t0 + r]);
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < TRI_TM * cv; idx += blockDim.x) {
      const int r = idx / cv, c = (idx - r * cv) * VEC;
      if (r < nr) {
        bf16 *prow = P4 + (t0 + r) * 4 * Ch + op * 2 * Ch;
        const bool keep = pm ? pm[m0 + t0 + r] != 0 : true;
        float p[VEC], g[VEC];
        mf_ldv<VEC>(p, prow + c);
        mf_ldv<VEC>(g, prow + Ch + c);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
          const float d = keep ? tile[(c + k) * (TRI_TM + 1) + r] : 0.0f, sv = mf_sigmoidf(g[k]);
          g[k] = d * p[k] * sv * (1.0f - sv);
          p[k] = d * sv;
        }
        mf_stv<VEC>(prow + c, p);
        mf_stv<VEC>(prow + Ch + c, g);
      }
    }
    __syncthreads();
  }
}

/* ---------------------------------------------------------------- vectorised kernels (variant 1)
 * The same four kernels with 16-byte accesses on both sides: TRI_TMV-row tiles, bf16
 * staging in shared memory laid out row-major (row r, channels c) with 16-byte chunks
 * XOR-swizzled by the row's group of 8 (chunk j stored at j ^ ((r >> 3) & smask)), so the
 * channel-major side (a thread: 8 consecutive pair rows m of one channel, one uint4 in
 * global memory, 8 scalar bf16 in shared memory, lanes over the tile's 8-row groups first)
 * and the row-major side (a thread: 8 consecutive channels of one row, uint4 both in global
 * and shared memory) are both free of bank conflicts. The channel-major arrays have the
 * padded channel stride ldm = M rounded up to 8 (tri_ldm), so every channel plane starts on
 * the 16-byte grid for any N. Used where Ch % 8 == 0, m0 % 8 == 0 and rows % 8 == 0 or the
 * chunk is the last one (tri_vec_ok; tri_chunk makes every chunk but the last a multiple of
 * 8 rows); else the kernels above run. The last tile of a last chunk with M % 8 != 0 has
 * nr % 8 != 0 rows: its row-major side is guarded per row, its channel-major side moves
 * whole 8-column groups, reading padding columns M .. ldm − 1 into unused tile rows and
 * writing zeros there (nobody else reads them: the contraction GEMMs see the first M
 * elements of each plane). Values are rounded to bf16
 * exactly where the kernels above round them; only LN reductions are summed in another
 * order. smask = (largest power of two dividing Ch/8, at most 8) − 1; lg = log2 of the
 * lanes per row in the LN kernels (the smallest power of two >= Ch/8). */

#define TRI_TMV 64 /* rows per tile of the vectorised kernels */
#define TRI_CM_UNROLL 4

static __device__ __forceinline__ int tri_sw(int r, int c, int Ch, int smask) {
  return r * Ch + ((((c >> 3) ^ ((r >> 3) & smask))) << 3) + (c & 7);
}

/* tile (TRI_TMV, Ch) bf16 swizzled = T_cm (Ch, ldm) columns col0 .. col0 + nr8 − 1, nr8 = nr
 * rounded up to 8 (col0 % 8 == 0, ldm % 8 == 0, col0 + nr8 <= ldm: a tail tile reads up to 7
 * padding columns into tile rows nr .., which the callers never use), by the whole block;
 * with NT = 2 also tile2 from T2_cm, both tiles' loads in flight together. The caller
 * synchronises. */
template <int NT>
static __device__ __forceinline__ void tri_cm_load_v(bf16 *tile, const bf16 *__restrict__ T_cm,
                                                     bf16 *tile2, const bf16 *__restrict__ T2_cm,
                                                     int64_t ldm, int64_t col0, int nr, int Ch,
                                                     int smask) {
  const int ng = (nr + 7) >> 3, total = Ch * ng;
  for (int base = threadIdx.x; base < total; base += TRI_CM_UNROLL * blockDim.x) {
    uint4 u[NT][TRI_CM_UNROLL];
#pragma unroll
    for (int i = 0; i < TRI_CM_UNROLL; i++) {
      const int idx = base + i * blockDim.x;
      if (idx < total) {
        const int c = idx / ng, g = idx - c * ng;
        const int64_t off = (int64_t)c * ldm + col0 + g * 8;
        u[0][i] = *(const uint4 *)(T_cm + off);
        if constexpr (NT == 2) u[NT - 1][i] = *(const uint4 *)(T2_cm + off);
      }
    }
#pragma unroll
    for (int i = 0; i < TRI_CM_UNROLL; i++) {
      const int idx = base + i * blockDim.x;
      if (idx < total) {
        const int c = idx / ng, g = idx - c * ng;
#pragma unroll
        for (int t = 0; t < NT; t++) {
          const bf16 *h = (const bf16 *)&u[t][i];
          bf16 *dst = t ? tile2 : tile;
#pragma unroll
          for (int k = 0; k < 8; k++) dst[tri_sw(g * 8 + k, c, Ch, smask)] = h[k];
        }
      }
    }
  }
}

/* dst (Ch, ldm) columns col0 .. col0 + nr8 − 1 = tile (TRI_TMV, Ch) swizzled rows 0 .. nr − 1,
 * then zeros in the padding columns col0 + nr .. col0 + nr8 − 1 of a tail tile (same
 * conditions). */
static __device__ __forceinline__ void tri_cm_store_v(bf16 *__restrict__ dst, const bf16 *tile,
                                                      int64_t ldm, int64_t col0, int nr, int Ch,
                                                      int smask) {
  const int ng = (nr + 7) >> 3, total = Ch * ng;
  for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
    const int c = idx / ng, g = idx - c * ng;
    uint4 u;
    bf16 *h = (bf16 *)&u;
#pragma unroll
    for (int k = 0; k < 8; k++)
      h[k] = g * 8 + k < nr ? tile[tri_sw(g * 8 + k, c, Ch, smask)] : mf_f32_to_bf16(0.0f);
    *(uint4 *)(dst + (int64_t)c * ldm + col0 + g * 8) = u;
  }
}

/* The row's chunk j (channels 8j .. 8j + 7) in a swizzled tile. */
static __device__ __forceinline__ bf16 *tri_row_chunk(bf16 *tile, int r, int j, int Ch, int smask) {
  return tile + r * Ch + ((j ^ ((r >> 3) & smask)) << 3);
}

/* Sum over the 2^lg lanes of a row group (lanes differing in the low lg bits). */
static __device__ __forceinline__ float tri_group_sum(float v, int lg) {
  for (int o = (1 << lg) >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* tri_gate_fwd_kernel, vectorised (C % 8 == 0 too). Shared: A and B tiles. */
static __global__ void tri_gate_fwd_v_kernel(bf16 *__restrict__ A_cm, bf16 *__restrict__ B_cm,
                                             bf16 *__restrict__ sg, const bf16 *__restrict__ P,
                                             const uint8_t *__restrict__ pm, int64_t ldm,
                                             int64_t m0, int64_t rows, int C, int Ch, int smask) {
  extern __shared__ uint4 tri_smv[];
  bf16 *ta = (bf16 *)tri_smv, *tb = ta + TRI_TMV * Ch; /* (TRI_TMV, Ch) each, swizzled */
  const int64_t t0 = (int64_t)blockIdx.x * TRI_TMV;
  const int nr = (int)(rows - t0 < TRI_TMV ? rows - t0 : TRI_TMV);
  const int ldp = 4 * Ch + C, nch = Ch >> 3;
  for (int idx = threadIdx.x; idx < nr * nch; idx += blockDim.x) {
    const int r = idx / nch, j = idx - r * nch;
    const bf16 *prow = P + (t0 + r) * ldp + j * 8;
    float ap[8], ag[8], bp[8], bg[8];
    mf_ldv<8>(ap, prow);
    mf_ldv<8>(ag, prow + Ch);
    mf_ldv<8>(bp, prow + 2 * Ch);
    mf_ldv<8>(bg, prow + 3 * Ch);
    const bool keep = pm ? pm[m0 + t0 + r] != 0 : true;
#pragma unroll
    for (int k = 0; k < 8; k++) {
      ap[k] = keep ? mf_sigmoidf(ag[k]) * ap[k] : 0.0f;
      bp[k] = keep ? mf_sigmoidf(bg[k]) * bp[k] : 0.0f;
    }
    mf_stv<8>(tri_row_chunk(ta, r, j, Ch, smask), ap);
    mf_stv<8>(tri_row_chunk(tb, r, j, Ch, smask), bp);
  }
  const int gv = C >> 3;
  for (int idx = threadIdx.x; idx < nr * gv; idx += blockDim.x) {
    const int r = idx / gv, c = (idx - r * gv) * 8;
    float g[8];
    mf_ldv<8>(g, P + (t0 + r) * ldp + 4 * Ch + c);
#pragma unroll
    for (int k = 0; k < 8; k++) g[k] = mf_sigmoidf(g[k]);
    mf_stv<8>(sg + (m0 + t0 + r) * C + c, g);
  }
  __syncthreads();
  tri_cm_store_v(A_cm, ta, ldm, m0 + t0, nr, Ch, smask);
  tri_cm_store_v(B_cm, tb, ldm, m0 + t0, nr, Ch, smask);
}

/* tri_ln_cm_kernel, vectorised: 2^lg lanes per row, 8 channels per lane. */
static __global__ void tri_ln_cm_v_kernel(bf16 *__restrict__ y, float *__restrict__ mean,
                                          float *__restrict__ rstd, const bf16 *__restrict__ T_cm,
                                          const bf16 *__restrict__ gamma,
                                          const bf16 *__restrict__ beta, int64_t ldm, int64_t m0,
                                          int64_t rows, int Ch, int use_saved, int smask, int lg) {
  extern __shared__ uint4 tri_smv[];
  bf16 *tile = (bf16 *)tri_smv; /* (TRI_TMV, Ch) swizzled */
  const int64_t t0 = (int64_t)blockIdx.x * TRI_TMV;
  const int nr = (int)(rows - t0 < TRI_TMV ? rows - t0 : TRI_TMV);
  tri_cm_load_v<1>(tile, T_cm, NULL, NULL, ldm, m0 + t0, nr, Ch, smask);
  const int lane = threadIdx.x % MF_WARP_SIZE, w = threadIdx.x / MF_WARP_SIZE;
  const int nw = blockDim.x / MF_WARP_SIZE, rpw = MF_WARP_SIZE >> lg;
  const int j = lane & ((1 << lg) - 1), sub = lane >> lg;
  const bool act = j < (Ch >> 3);
  float gm[8], bt[8];
#pragma unroll
  for (int k = 0; k < 8; k++) { /* scalar: the weights need not be 16-byte aligned */
    gm[k] = act ? mf_bf16_to_f32(gamma[j * 8 + k]) : 0.0f;
    bt[k] = act ? mf_bf16_to_f32(beta[j * 8 + k]) : 0.0f;
  }
  __syncthreads();
  for (int rb = w * rpw; rb < nr; rb += nw * rpw) { /* uniform per warp */
    const int r = rb + sub;
    const bool ok = act && r < nr;
    const int64_t m = m0 + t0 + r;
    float x[8];
#pragma unroll
    for (int k = 0; k < 8; k++) x[k] = 0.0f;
    if (ok) mf_ldv<8>(x, tri_row_chunk(tile, r, j, Ch, smask));
    float mu = 0.0f, rs = 0.0f;
    if (use_saved) {
      if (r < nr) {
        mu = mean[m];
        rs = rstd[m];
      }
    } else {
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < 8; k++) s += x[k];
      mu = tri_group_sum(s, lg) / (float)Ch;
      float q = 0.0f;
#pragma unroll
      for (int k = 0; k < 8; k++) {
        const float d = x[k] - mu;
        q += ok ? d * d : 0.0f;
      }
      rs = 1.0f / sqrtf(tri_group_sum(q, lg) / (float)Ch + (float)MF_LN_EPS);
      if (j == 0 && r < nr) {
        mean[m] = mu;
        rstd[m] = rs;
      }
    }
    if (ok) {
#pragma unroll
      for (int k = 0; k < 8; k++) x[k] = (x[k] - mu) * rs * gm[k] + bt[k];
      mf_stv<8>(y + (t0 + r) * Ch + j * 8, x);
    }
  }
}

/* tri_ln_cm_bwd_kernel, vectorised; part (gridDim.x, 2Ch) as there (per TRI_TMV-row block).
 * Shared: the T tile (overwritten by dT), then (warps · rows per warp, 2Ch) fp32. */
static __global__ void __launch_bounds__(TRI_THREADS, 4)
tri_ln_cm_bwd_v_kernel(bf16 *__restrict__ dT_cm, float *__restrict__ part,
                       const bf16 *__restrict__ dy, const bf16 *__restrict__ T_cm,
                       const float *__restrict__ mean, const float *__restrict__ rstd,
                       const bf16 *__restrict__ gamma, int64_t ldm, int64_t m0, int64_t rows,
                       int Ch, int smask, int lg) {
  extern __shared__ uint4 tri_smv[];
  bf16 *tile = (bf16 *)tri_smv;
  float *red = (float *)(tile + TRI_TMV * Ch);
  const int64_t t0 = (int64_t)blockIdx.x * TRI_TMV;
  const int nr = (int)(rows - t0 < TRI_TMV ? rows - t0 : TRI_TMV);
  const int lane = threadIdx.x % MF_WARP_SIZE, w = threadIdx.x / MF_WARP_SIZE;
  const int nw = blockDim.x / MF_WARP_SIZE, rpw = MF_WARP_SIZE >> lg;
  const int j = lane & ((1 << lg) - 1), sub = lane >> lg;
  const bool act = j < (Ch >> 3);
  float gm[8], pg[8], pb[8], dn[8]; /* dn: the next row's dy, loaded one row ahead */
#pragma unroll
  for (int k = 0; k < 8; k++) { /* gamma scalar: the weights need not be 16-byte aligned */
    gm[k] = act ? mf_bf16_to_f32(gamma[j * 8 + k]) : 0.0f;
    pg[k] = pb[k] = dn[k] = 0.0f;
  }
  if (act && w * rpw + sub < nr) mf_ldv<8>(dn, dy + (t0 + w * rpw + sub) * Ch + j * 8);
  tri_cm_load_v<1>(tile, T_cm, NULL, NULL, ldm, m0 + t0, nr, Ch, smask);
  __syncthreads();
  for (int rb = w * rpw; rb < nr; rb += nw * rpw) { /* uniform per warp */
    const int r = rb + sub;
    const bool ok = act && r < nr;
    float x[8], g[8], d[8], mu = 0.0f, rs = 0.0f, sg = 0.0f, sgx = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) {
      x[k] = g[k] = 0.0f;
      d[k] = dn[k];
    }
    if (act && r + nw * rpw < nr) mf_ldv<8>(dn, dy + (t0 + r + nw * rpw) * Ch + j * 8);
    if (ok) {
      const int64_t m = m0 + t0 + r;
      mu = mean[m];
      rs = rstd[m];
      mf_ldv<8>(x, tri_row_chunk(tile, r, j, Ch, smask));
#pragma unroll
      for (int k = 0; k < 8; k++) {
        x[k] = (x[k] - mu) * rs;
        g[k] = d[k] * gm[k];
        pg[k] += d[k] * x[k];
        pb[k] += d[k];
        sg += g[k];
        sgx += g[k] * x[k];
      }
    }
    sg = tri_group_sum(sg, lg) / (float)Ch;
    sgx = tri_group_sum(sgx, lg) / (float)Ch;
    if (ok) {
#pragma unroll
      for (int k = 0; k < 8; k++) x[k] = rs * (g[k] - sg - x[k] * sgx);
      mf_stv<8>(tri_row_chunk(tile, r, j, Ch, smask), x);
    }
  }
  if (act) {
    float *rr = red + (w * rpw + sub) * 2 * Ch + j * 8;
#pragma unroll
    for (int k = 0; k < 8; k++) {
      rr[k] = pg[k];
      rr[Ch + k] = pb[k];
    }
  }
  __syncthreads();
  tri_cm_store_v(dT_cm, tile, ldm, m0 + t0, nr, Ch, smask);
  const int ng = nw * rpw;
  for (int jj = threadIdx.x; jj < 2 * Ch; jj += blockDim.x) {
    float s = 0.0f;
    for (int k = 0; k < ng; k++) s += red[k * 2 * Ch + jj];
    part[(int64_t)blockIdx.x * 2 * Ch + jj] = s;
  }
}

/* tri_gate_bwd_kernel, vectorised. Shared: dA and dB tiles. */
static __global__ void __launch_bounds__(TRI_THREADS, 4)
tri_gate_bwd_v_kernel(bf16 *__restrict__ P4, const bf16 *__restrict__ dA_cm,
                      const bf16 *__restrict__ dB_cm, const uint8_t *__restrict__ pm, int64_t ldm,
                      int64_t m0, int64_t rows, int Ch, int smask) {
  extern __shared__ uint4 tri_smv[];
  bf16 *ta = (bf16 *)tri_smv, *tb = ta + TRI_TMV * Ch;
  const int64_t t0 = (int64_t)blockIdx.x * TRI_TMV;
  const int nr = (int)(rows - t0 < TRI_TMV ? rows - t0 : TRI_TMV);
  const int nch = Ch >> 3;
  tri_cm_load_v<2>(ta, dA_cm, tb, dB_cm, ldm, m0 + t0, nr, Ch, smask);
  __syncthreads();
  for (int idx = threadIdx.x; idx < nr * nch; idx += blockDim.x) {
    const int r = idx / nch, j = idx - r * nch;
    bf16 *prow = P4 + (t0 + r) * 4 * Ch + j * 8;
    const bool keep = pm ? pm[m0 + t0 + r] != 0 : true;
    uint4 up[2], ug[2], ud[2]; /* all six 16-byte loads in flight before the arithmetic */
#pragma unroll
    for (int op = 0; op < 2; op++) {
      up[op] = *(const uint4 *)(prow + op * 2 * Ch);
      ug[op] = *(const uint4 *)(prow + op * 2 * Ch + Ch);
      ud[op] = *(const uint4 *)tri_row_chunk(op ? tb : ta, r, j, Ch, smask);
    }
#pragma unroll
    for (int op = 0; op < 2; op++) {
      float p[8], g[8], dd[8];
      mf_ldv<8>(p, (const bf16 *)&up[op]);
      mf_ldv<8>(g, (const bf16 *)&ug[op]);
      mf_ldv<8>(dd, (const bf16 *)&ud[op]);
#pragma unroll
      for (int k = 0; k < 8; k++) {
        const float d = keep ? dd[k] : 0.0f, sv = mf_sigmoidf(g[k]);
        g[k] = d * p[k] * sv * (1.0f - sv);
        p[k] = d * sv;
      }
      mf_stv<8>(prow + op * 2 * Ch, p);
      mf_stv<8>(prow + op * 2 * Ch + Ch, g);
    }
  }
}

/* out (M, C) rows m0..: = sg ⊙ u, or = res + mask ⊙ sg ⊙ u (mask != NULL: the residual,
 * res = out in place); VEC consecutive channels per thread (8 when C % 8 == 0). */
template <int VEC>
static __global__ void tri_out_fwd_kernel(bf16 *out, const bf16 *__restrict__ sg,
                                   const float *__restrict__ u, const float *__restrict__ mask,
                                   const bf16 *res, int axis, int N, int64_t m0, int64_t rows, int C) {
  const int cv = C / VEC;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * cv;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / cv, m = m0 + r;
    const int c = (int)(i - r * cv) * VEC;
    float g[VEC], v[VEC];
    mf_ldv<VEC>(g, sg + m * C + c);
    mf_ldvf<VEC>(v, u + r * C + c);
#pragma unroll
    for (int k = 0; k < VEC; k++) v[k] *= g[k];
    if (mask) {
      const int64_t a = m / N, b = m - a * N;
      float mk[VEC], o[VEC];
      mf_ldvf<VEC>(mk, mask + (axis == MF_DROPOUT_ROWWISE ? b : a) * C + c);
      mf_ldv<VEC>(o, res + m * C + c);
#pragma unroll
      for (int k = 0; k < VEC; k++) v[k] = o[k] + mk[k] * v[k];
    }
    mf_stv<VEC>(out + m * C + c, v);
  }
}

/* From dout (M, C) rows m0.. (⊙ mask with a residual), the gate logits gl (rows, C; fp32,
 * or bf16 glb when GLB) and u (rows, C): du (rows, C) = d·s,  dgl (M, C) rows m0.. =
 * d·u·s(1 − s), s = σ(gl). */
template <int VEC, bool GLB>
static __global__ void tri_out_bwd_kernel(bf16 *__restrict__ du, bf16 *__restrict__ dgl,
                                   const bf16 *__restrict__ dout, const float *__restrict__ gl,
                                   const bf16 *__restrict__ glb,
                                   const float *__restrict__ u, const float *__restrict__ mask,
                                   int axis, int N, int64_t m0, int64_t rows, int C) {
  const int cv = C / VEC;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * cv;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / cv, m = m0 + r;
    const int c = (int)(i - r * cv) * VEC;
    float d[VEC], l[VEC], uu[VEC];
    mf_ldv<VEC>(d, dout + m * C + c);
    if (GLB) mf_ldv<VEC>(l, glb + r * C + c);
    else mf_ldvf<VEC>(l, gl + r * C + c);
    mf_ldvf<VEC>(uu, u + r * C + c);
    if (mask) {
      const int64_t a = m / N, b = m - a * N;
      float mk[VEC];
      mf_ldvf<VEC>(mk, mask + (axis == MF_DROPOUT_ROWWISE ? b : a) * C + c);
#pragma unroll
      for (int k = 0; k < VEC; k++) d[k] *= mk[k];
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) {
      const float s = mf_sigmoidf(l[k]);
      l[k] = d[k] * uu[k] * s * (1.0f - s);
      d[k] *= s;
    }
    mf_stv<VEC>(du + r * C + c, d);
    mf_stv<VEC>(dgl + m * C + c, l);
  }
}

/* ================================================================ launchers */

static size_t tile_smem(int Ch) { return (size_t)Ch * (TRI_TM + 1) * sizeof(float); }

static int g_tri_variant = 2;

extern "C" int mf_trimul_cuda_set_variant(int variant) {
  const int old = g_tri_variant;
  g_tri_variant = variant == 0 ? 0 : variant == 1 ? 1 : 2;
  return old;
}

/* The vectorised kernels apply to this chunk of M rows (see above them) with these arrays
 * of channel stride ldm: the chunk's 8-column groups lie inside the planes. */
static int tri_al16(const void *p) { return (uintptr_t)p % 16 == 0; }
static int tri_vec_ok(int64_t M, int64_t ldm, int64_t m0, int64_t rows, int Ch, const void *cm0,
                      const void *cm1, const void *rm) {
  return g_tri_variant >= 1 && Ch % 8 == 0 && ldm % 8 == 0 && m0 % 8 == 0 &&
         (rows % 8 == 0 || m0 + rows == M) && (m0 + rows + 7) / 8 * 8 <= ldm && tri_al16(cm0) &&
         tri_al16(cm1) && tri_al16(rm);
}
static int tri_smask(int Ch) {
  int p = (Ch / 8) & -(Ch / 8);
  return (p > 8 ? 8 : p) - 1;
}
static int tri_lg(int Ch) {
  int lg = 0;
  while ((1 << lg) < Ch / 8) lg++;
  return lg;
}
static size_t tile_smem_v(int Ch) { return (size_t)TRI_TMV * Ch * sizeof(bf16); }
/* Opts kernel func in to smem bytes of dynamic shared memory where above the default. */
static void tri_smem_optin(const void *func, size_t smem) {
  if (smem > 48 * 1024)
    MF_CHECK_CUDA(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem));
}

static void launch_gate_fwd(bf16 *A_cm, bf16 *B_cm, bf16 *sg, const bf16 *P, const uint8_t *pm,
                            int64_t M, int64_t ldm, int64_t m0, int64_t rows, int C, int Ch,
                            cudaStream_t s) {
  if (C % 8 == 0 && tri_vec_ok(M, ldm, m0, rows, Ch, A_cm, B_cm, P) && tri_al16(sg)) {
    const size_t smem = 2 * tile_smem_v(Ch);
    tri_smem_optin((const void *)tri_gate_fwd_v_kernel, smem);
    tri_gate_fwd_v_kernel<<<mf_cdiv(rows, TRI_TMV), TRI_THREADS, smem, s>>>(
        A_cm, B_cm, sg, P, pm, ldm, m0, rows, C, Ch, tri_smask(Ch));
  } else if (C % 8 == 0 && Ch % 8 == 0)
    tri_gate_fwd_kernel<8><<<mf_cdiv(rows, TRI_TM), TRI_THREADS, tile_smem(Ch), s>>>(
        A_cm, B_cm, sg, P, pm, ldm, m0, rows, C, Ch);
  else
    tri_gate_fwd_kernel<1><<<mf_cdiv(rows, TRI_TM), TRI_THREADS, tile_smem(Ch), s>>>(
        A_cm, B_cm, sg, P, pm, ldm, m0, rows, C, Ch);
  MF_CHECK_LAUNCH();
}
static void launch_ln_cm(bf16 *y, float *mean, float *rstd, const bf16 *T_cm, const bf16 *g,
                         const bf16 *b, int64_t M, int64_t ldm, int64_t m0, int64_t rows, int Ch,
                         int use_saved, cudaStream_t s) {
  if (tri_vec_ok(M, ldm, m0, rows, Ch, T_cm, T_cm, y))
    tri_ln_cm_v_kernel<<<mf_cdiv(rows, TRI_TMV), TRI_THREADS, tile_smem_v(Ch), s>>>(
        y, mean, rstd, T_cm, g, b, ldm, m0, rows, Ch, use_saved, tri_smask(Ch), tri_lg(Ch));
  else
    tri_ln_cm_kernel<<<mf_cdiv(rows, TRI_TM), TRI_THREADS, tile_smem(Ch), s>>>(
        y, mean, rstd, T_cm, g, b, ldm, m0, rows, Ch, use_saved);
  MF_CHECK_LAUNCH();
}
/* Partials of the LN_out backward for a chunk of rows: at most this many (the workspace's
 * size); launch_ln_cm_bwd returns the number it wrote. */
static int ln_cm_bwd_parts(int64_t rows) { return (int)mf_cdiv(rows, TRI_TM); }
static int launch_ln_cm_bwd(bf16 *dT_cm, float *part, const bf16 *dy, const bf16 *T_cm,
                            const float *mean, const float *rstd, const bf16 *g, int64_t M,
                            int64_t ldm, int64_t m0, int64_t rows, int Ch, cudaStream_t s) {
  const int nw = TRI_THREADS / MF_WARP_SIZE;
  if (tri_vec_ok(M, ldm, m0, rows, Ch, dT_cm, T_cm, dy)) {
    const int lg = tri_lg(Ch), parts = (int)mf_cdiv(rows, TRI_TMV);
    const size_t smem =
        tile_smem_v(Ch) + (size_t)nw * (MF_WARP_SIZE >> lg) * 2 * Ch * sizeof(float);
    tri_smem_optin((const void *)tri_ln_cm_bwd_v_kernel, smem);
    tri_ln_cm_bwd_v_kernel<<<parts, TRI_THREADS, smem, s>>>(dT_cm, part, dy, T_cm, mean, rstd, g,
                                                           ldm, m0, rows, Ch, tri_smask(Ch), lg);
    MF_CHECK_LAUNCH();
    return parts;
  }
  const size_t smem = tile_smem(Ch) + (size_t)nw * 2 * Ch * sizeof(float);
  tri_smem_optin((const void *)tri_ln_cm_bwd_kernel, smem); /* Ch > 128 */
  tri_ln_cm_bwd_kernel<<<ln_cm_bwd_parts(rows), TRI_THREADS, smem, s>>>(
      dT_cm, part, dy, T_cm, mean, rstd, g, ldm, m0, rows, Ch);
  MF_CHECK_LAUNCH();
  return ln_cm_bwd_parts(rows);
}
static void launch_gate_bwd(bf16 *P4, const bf16 *dA_cm, const bf16 *dB_cm, const uint8_t *pm,
                            int64_t M, int64_t ldm, int64_t m0, int64_t rows, int Ch,
                            cudaStream_t s) {
  if (tri_vec_ok(M, ldm, m0, rows, Ch, dA_cm, dB_cm, P4)) {
    const size_t smem = 2 * tile_smem_v(Ch);
    tri_smem_optin((const void *)tri_gate_bwd_v_kernel, smem);
    tri_gate_bwd_v_kernel<<<mf_cdiv(rows, TRI_TMV), TRI_THREADS, smem, s>>>(
        P4, dA_cm, dB_cm, pm, ldm, m0, rows, Ch, tri_smask(Ch));
  } else if (Ch % 8 == 0)
    tri_gate_bwd_kernel<8><<<mf_cdiv(rows, TRI_TM), TRI_THREADS, tile_smem(Ch), s>>>(
        P4, dA_cm, dB_cm, pm, ldm, m0, rows, Ch);
  else
    tri_gate_bwd_kernel<1><<<mf_cdiv(rows, TRI_TM), TRI_THREADS, tile_smem(Ch), s>>>(
        P4, dA_cm, dB_cm, pm, ldm, m0, rows, Ch);
  MF_CHECK_LAUNCH();
}
static void launch_out_fwd(bf16 *out, const bf16 *sg, const float *u, const float *mask,
                           const bf16 *res, int axis, int N, int64_t m0, int64_t rows, int C,
                           cudaStream_t s) {
  if (!res) res = out;
  if (C % 8 == 0)
    tri_out_fwd_kernel<8><<<mf_ew_blocks(rows * C / 8), 256, 0, s>>>(out, sg, u, mask, res, axis, N,
                                                                     m0, rows, C);
  else
    tri_out_fwd_kernel<1><<<mf_ew_blocks(rows * C), 256, 0, s>>>(out, sg, u, mask, res, axis, N, m0,
                                                                 rows, C);
  MF_CHECK_LAUNCH();
}
/* gl fp32, or glb bf16 when gl is NULL */
static void launch_out_bwd(bf16 *du, bf16 *dgl, const bf16 *dout, const float *gl, const bf16 *glb,
                           const float *u, const float *mask, int axis, int N, int64_t m0,
                           int64_t rows, int C, cudaStream_t s) {
  const int64_t n = C % 8 == 0 ? rows * C / 8 : rows * C;
  if (C % 8 == 0 && !gl)
    tri_out_bwd_kernel<8, true><<<mf_ew_blocks(n), 256, 0, s>>>(du, dgl, dout, gl, glb, u, mask,
                                                                axis, N, m0, rows, C);
  else if (C % 8 == 0)
    tri_out_bwd_kernel<8, false><<<mf_ew_blocks(n), 256, 0, s>>>(du, dgl, dout, gl, glb, u, mask,
                                                                 axis, N, m0, rows, C);
  else if (!gl)
    tri_out_bwd_kernel<1, true><<<mf_ew_blocks(n), 256, 0, s>>>(du, dgl, dout, gl, glb, u, mask,
                                                                axis, N, m0, rows, C);
  else
    tri_out_bwd_kernel<1, false><<<mf_ew_blocks(n), 256, 0, s>>>(du, dgl, dout, gl, glb, u, mask,
                                                                 axis, N, m0, rows, C);
  MF_CHECK_LAUNCH();
}

/* ================================================================ buffers */

/* The channel stride of the channel-major arrays: M = N² rounded up to 8, so every channel
 * plane starts 16-byte aligned (the vectorised kernels) whatever N is. Columns M .. ldm − 1
 * are padding: the contraction GEMMs read and write the first M elements of each plane only;
 * the vectorised kernels may read them and write zeros there. */
static int64_t tri_ldm(int64_t M) { return (M + 7) / 8 * 8; }

typedef struct {
  float *mu_in, *rs_in;   /* (M) LN_in statistics */
  bf16 *a, *b, *t;        /* (Ch, ldm) channel-major A, B, T, ldm = tri_ldm(M) */
  float *mu_out, *rs_out; /* (M) LN_out statistics */
} tri_saved;

static size_t saved_carve(tri_saved *s, void *base, int64_t M, int Ch) {
  const int64_t ldm = tri_ldm(M);
  mf_carver cv = {(char *)base, 0};
  s->mu_in = (float *)mf_carve(&cv, (size_t)M * sizeof(float));
  s->rs_in = (float *)mf_carve(&cv, (size_t)M * sizeof(float));
  s->a = (bf16 *)mf_carve(&cv, (size_t)ldm * Ch * sizeof(bf16));
  s->b = (bf16 *)mf_carve(&cv, (size_t)ldm * Ch * sizeof(bf16));
  s->t = (bf16 *)mf_carve(&cv, (size_t)ldm * Ch * sizeof(bf16));
  s->mu_out = (float *)mf_carve(&cv, (size_t)M * sizeof(float));
  s->rs_out = (float *)mf_carve(&cv, (size_t)M * sizeof(float));
  return cv.used;
}

/* Chunk staging of R rows (each phase carves only the buffers it uses; NULL otherwise). */
typedef struct {
  int64_t R;    /* rows per chunk */
  bf16 *xh;     /* (R, C) LN_in rows */
  bf16 *P;      /* (R, 4Ch + C) projections, then (R, 4Ch [+ C]) their gradients */
  bf16 *y;      /* (R, Ch) LN_out rows, or (Ch, ldm(R)) channel-major */
  float *u;     /* (R, C) y·W_zᵀ */
  float *gl;    /* (R, C) gate logits, fp32 — or bf16 in the same room (fused path) */
  bf16 *du;     /* (R, C) */
  bf16 *dy;     /* (R, Ch) LN_out's output gradient, bf16 (as the activations it is the gradient of) */
  float *dxh;   /* (R, C) */
} tri_stage;

typedef struct {
  float *part;  /* (max parts, 2·max(C, Ch)) */
  float *mask;  /* (N, C) dropout mask */
  bf16 *sg;     /* (M, C) σ(x·W_gᵀ) (forward); dgl, the gate-logit gradient (backward) */
  bf16 *dT, *dA, *dB; /* (Ch, ldm) channel-major gradients (backward), ldm = tri_ldm(M) */
  float *dwz_part;    /* trimul_ph1_wg.cu's dW_z partials (C = Ch = 128), else NULL */
  tri_stage fwd, ph1, ph3; /* the staging of the unfused forward, backward phases 1 and 3 */
  tri_stage ph1f, ph3f;    /* phases 1 and 3 of the fully fused backward (tri_chunk_full) */
} tri_ws;

/* Rows per chunk: mf_fusion_chunk_rows (a multiple of 256, or M, unless a test overrides
 * it) made a multiple of 8 when below M, so every chunk starts on the 8-column grid of the
 * channel-major arrays and only the last one may have rows % 8 != 0 (tri_vec_ok). */
static int64_t tri_chunk(int64_t M, int C, int Ch) {
  int64_t R = mf_fusion_chunk_rows(M, (size_t)C * 8 + (size_t)Ch * 10);
  if (R < M) R = R < 8 ? 8 : R / 8 * 8;
  return R < M ? R : M;
}

/* The fully fused backward (phase 1 in trimul_ph1_wg.cu, phase 3 in ln_gemm_wg.cu's gated
 * backward and gemm_ln_bwd_wg.cu) stages far less per row than tri_chunk's worst case (phase
 * 1 only the bf16 gate logits, phase 3 x̂ and dP4 at a row stride of 4Ch: 1.25 KiB a row at
 * C = Ch = 128 against 2.25 KiB), so it takes larger chunks, under a budget of its own: one
 * chunk up to M ≈ 838 000 rows (N ≈ 915) at C = Ch = 128. At N = 768 one chunk instead of
 * three took the triangle multiplication's backward from 2.31–2.33 to 2.16–2.17 ms and the
 * Pairformer block's backward from 15.91–16.00 to 15.66–15.79 ms (H200, 2026-12-01, one job,
 * three rounds: fewer kernel tails, split-K and parameter reductions), for 0.3 GiB more
 * workspace (the block's peak 4.43 → 4.74 GiB). Beyond N ≈ 1200 the staging fits in the
 * dead plane either way. */
#define TRI_FULL_STAGING_BYTES ((size_t)1 << 30)
static int64_t tri_chunk_full(int64_t M, int C, int Ch) {
  int64_t R = mf_fusion_chunk_rows_in(M, (size_t)C * 2 + (size_t)Ch * 8, TRI_FULL_STAGING_BYTES);
  if (R < M) R = R < 8 ? 8 : R / 8 * 8;
  return R < M ? R : M;
}

/* The staging sets. TRI_FWD: the unfused forward (xh, P, y, u); TRI_PH1: the backward's
 * phase 1 (fused: gl as bf16, du, y, u, dy; unfused: xh, gl fp32, y, u, du, dy); TRI_PH3:
 * its phase 3 (xh, P, dxh); TRI_PH1F, TRI_PH3F: the fully fused backward's phases 1 (gl as
 * bf16) and 3 (xh, and P as (R, 4Ch): dP4 without the dgl columns). */
enum { TRI_FWD, TRI_PH1, TRI_PH3, TRI_PH1F, TRI_PH3F };
static size_t stage_carve(tri_stage *st, void *base, int64_t R, int C, int Ch, int set, int fused) {
  mf_carver cv = {(char *)base, 0};
  memset(st, 0, sizeof *st);
  st->R = R;
  const size_t rc = (size_t)R * C, rh = (size_t)R * Ch;
  if (set == TRI_PH1F || set == TRI_PH3F) {
    if (set == TRI_PH1F) st->gl = (float *)mf_carve(&cv, rc * sizeof(bf16));
    else {
      st->xh = (bf16 *)mf_carve(&cv, rc * sizeof(bf16));
      st->P = (bf16 *)mf_carve(&cv, (size_t)R * 4 * Ch * sizeof(bf16));
    }
    return cv.used;
  }
  if (set == TRI_FWD || set == TRI_PH3 || !fused) st->xh = (bf16 *)mf_carve(&cv, rc * sizeof(bf16));
  if (set != TRI_PH1) st->P = (bf16 *)mf_carve(&cv, (size_t)R * (4 * Ch + C) * sizeof(bf16));
  if (set != TRI_PH3) st->y = (bf16 *)mf_carve(&cv, (size_t)tri_ldm(R) * Ch * sizeof(bf16));
  /* u: PH1's fused path too, for the chunks that trimul_out_bwd_wg does not take */
  if (set != TRI_PH3) st->u = (float *)mf_carve(&cv, rc * sizeof(float));
  if (set == TRI_PH1) {
    st->gl = (float *)mf_carve(&cv, rc * (fused ? sizeof(bf16) : sizeof(float)));
    st->du = (bf16 *)mf_carve(&cv, rc * sizeof(bf16));
    st->dy = (bf16 *)mf_carve(&cv, rh * sizeof(bf16));
  }
  if (set == TRI_PH3) st->dxh = (float *)mf_carve(&cv, rc * sizeof(float));
  return cv.used;
}

/* [part, mask, sg | dT, extra, dA, dB]: the chunk staging (tri_chunk's rows, as when it
 * had a region of its own) goes into the gradient planes that are dead in its phase,
 * widened by the extra region between them: phase 3's into dT | extra (dT is read last in
 * phase 2), phase 1's into extra | dA | dB (dA, dB are written in phase 2; phase 1 writes
 * dT), the unfused forward's into all four (the planes are backward-only). extra is what
 * the largest set needs beyond its planes, over both paths (fused or not: decided per call
 * from pointers); at N = 768, C = Ch = 128 phase 3's fused set (xh, P, dxh: 2 KiB a row)
 * needs 252 MiB beyond dT, and the workspace went from 1350 to 822 MiB; the fully fused
 * backward's one chunk (x̂ and dP4, 1.25 KiB a row) needs 576 MiB beyond dT: 1167 MiB. */
static size_t ws_carve(tri_ws *w, void *base, int N, int C, int Ch, int fused) {
  const int64_t M = (int64_t)N * N, R = tri_chunk(M, C, Ch), ldm = tri_ldm(M);
  const int64_t Rf = tri_chunk_full(M, C, Ch), Rm = R > Rf ? R : Rf;
  const int cm = C > Ch ? C : Ch;
  /* the row LN backward's blocks (≤ 1056; trimul_ph1_wg and gemm_ln_bwd_wg take fewer), or
   * the channel-major LN backward's tiles, which run in tri_chunk's chunks only */
  int parts = mf_ln_rows_backward_parts(Rm);
  if (ln_cm_bwd_parts(R) > parts) parts = ln_cm_bwd_parts(R);
  const size_t plane = mf_cuda_align((size_t)ldm * Ch * sizeof(bf16));
  /* FWD, PH1, PH3, PH1F, PH3F without extra */
  const size_t room[5] = {3 * plane, 2 * plane, plane, 2 * plane, plane};
  size_t extra = 0;
  tri_stage st;
  for (int set = 0; set < 5; set++)
    for (int f = 0; f < 2; f++) {
      const size_t b = stage_carve(&st, NULL, set >= TRI_PH1F ? Rf : R, C, Ch, set, f);
      if (b > room[set] && b - room[set] > extra) extra = b - room[set];
    }
  extra = mf_cuda_align(extra);
  mf_carver cv = {(char *)base, 0};
  w->part = (float *)mf_carve(&cv, (size_t)parts * 2 * cm * sizeof(float));
  w->mask = (float *)mf_carve(&cv, (size_t)N * C * sizeof(float));
  w->sg = (bf16 *)mf_carve(&cv, (size_t)M * C * sizeof(bf16));
  char *p0 = base ? (char *)base + cv.used : NULL;
  w->dT = (bf16 *)mf_carve(&cv, plane);
  if (extra) mf_carve(&cv, extra);
  w->dA = (bf16 *)mf_carve(&cv, plane);
  w->dB = (bf16 *)mf_carve(&cv, plane);
  stage_carve(&w->fwd, p0, R, C, Ch, TRI_FWD, fused);
  stage_carve(&w->ph3, p0, R, C, Ch, TRI_PH3, fused);
  stage_carve(&w->ph1, p0 ? p0 + plane : NULL, R, C, Ch, TRI_PH1, fused);
  stage_carve(&w->ph3f, p0, Rf, C, Ch, TRI_PH3F, 1);
  stage_carve(&w->ph1f, p0 ? p0 + plane : NULL, Rf, C, Ch, TRI_PH1F, 1);
  w->dwz_part = C == 128 && Ch == 128 ? (float *)mf_carve(&cv, mf_trimul_ph1_wg_part_bytes()) : NULL;
  return cv.used;
}

extern "C" size_t mf_trimul_cuda_saved_bytes(int N, int Ch) {
  tri_saved s;
  return saved_carve(&s, NULL, (int64_t)N * N, Ch);
}

extern "C" size_t mf_trimul_cuda_workspace(int N, int C, int Ch) {
  tri_ws w;
  return ws_carve(&w, NULL, N, C, Ch, 1);
}

static void tri_check(const mf_trimul_cuda_weights *w, int N, int C, int Ch, int outgoing,
                      const mf_resdrop_cuda *rd) {
  MF_ASSERT(N > 0 && C > 0 && C <= 1024 && Ch > 0 && Ch <= 32 * TRI_MAX_CHV,
            "trimul_cuda dims N=%d C=%d Ch=%d (C <= 1024, Ch <= %d)", N, C, Ch, 32 * TRI_MAX_CHV);
  MF_ASSERT(outgoing == 0 || outgoing == 1, "trimul_cuda: outgoing=%d", outgoing);
  MF_ASSERT(w && w->ln_in_g && w->ln_in_b && w->w_cat && w->ln_out_g && w->ln_out_b && w->w_z,
            "trimul_cuda: every weight is required");
  MF_ASSERT(!rd || (rd->p >= 0 && rd->p < 1 && (rd->axis == MF_DROPOUT_ROWWISE ||
                                                rd->axis == MF_DROPOUT_COLWISE)),
            "trimul_cuda: bad residual dropout spec");
}

/* T_c = A_c·B_cᵀ (outgoing) or A_cᵀ·B_c (incoming), c < Ch, over channel-major buffers
 * (Ch, ldm) whose planes hold (N, N) row-major matrices in their first M = N² elements
 * (leading dimension N, batch stride ldm = tri_ldm(M)): the padding is neither read nor
 * written. */
static void contract(const mf_cuda_blas *blas, cudaStream_t s, int ta, int tb, const bf16 *X,
                     const bf16 *Y, bf16 *Z, int N, int Ch) {
  const int64_t ldm = tri_ldm((int64_t)N * N);
  mf_gemm_rm_batched_cuda(blas, s, ta, tb, N, N, N, 1.0f, X, N, ldm, Y, N, ldm, 0.0f, Z,
                          MF_GEMM_OUT_BF16, N, ldm, Ch);
}

/* ================================================================ forward */

/* Variant 2: the input side as three wgmma LayerNorm + projection kernels over all M rows
 * (ln_gemm_wg.cu) instead of LN staging, one cuBLAS GEMM into P (M, 4Ch + C) and the
 * transposing gate kernel per chunk: A_cm = pm ⊙ σ(x̂·W_agᵀ) ⊙ (x̂·W_apᵀ) and B_cm likewise,
 * written channel-major from the epilogue, and sg = σ(x̂·W_gᵀ) row-major — P never goes
 * through HBM (at N = 768: 0.76 GB written and read back per forward). w_cat's rows are
 * [ap | ag | bp | bg | g], so [W_ap; W_ag] and [W_bp; W_bg] are the gated epilogue's
 * [W_p; W_g] as they lie. Values differ from variant 1 by the bf16 rounding of P (the
 * epilogue takes the fp32 accumulators). */
static int tri_fused_in_ok(const bf16 *z, const bf16 *w_cat, const tri_saved *s, const bf16 *sg,
                           int C, int Ch) {
  const bf16 *w_b = w_cat + (int64_t)2 * Ch * C, *w_g = w_cat + (int64_t)4 * Ch * C;
  return g_tri_variant == 2 && mf_ln_gemm_wg_supported(C, Ch, 1, MF_LN_FULL, z, s->a, w_cat) &&
         mf_ln_gemm_wg_supported(C, Ch, 1, MF_LN_FULL, z, s->b, w_b) &&
         mf_ln_gemm_wg_supported(C, C, 3, MF_LN_FULL, z, sg, w_g);
}

extern "C" void mf_trimul_forward_cuda(bf16 *out, void *saved, const bf16 *z, const uint8_t *pm,
                                       const mf_trimul_cuda_weights *w, int N, int C, int Ch,
                                       int outgoing, const mf_resdrop_cuda *rd, void *ws,
                                       size_t ws_bytes, const mf_cuda_blas *blas,
                                       cudaStream_t stream) {
  tri_check(w, N, C, Ch, outgoing, rd);
  MF_ASSERT(out && saved && z && ws, "trimul_forward_cuda: NULL argument");
  const int64_t M = (int64_t)N * N, ldm = tri_ldm(M);
  MF_ASSERT(!rd || !rd->res || rd->res == out || rd->res + M * C <= out || out + M * C <= rd->res,
            "trimul_forward_cuda: the residual res must be out or not overlap it");
  const int K = 4 * Ch + C;
  tri_saved s;
  saved_carve(&s, saved, M, Ch);
  tri_ws b;
  MF_ASSERT(ws_carve(&b, NULL, N, C, Ch, 0) <= ws_bytes, "trimul_cuda: workspace too small");
  ws_carve(&b, ws, N, C, Ch, 0); /* the unfused forward's staging (unused by the fused one) */
  const tri_stage *st = &b.fwd;
  const int64_t R = st->R;
  if (rd)
    mf_dropout_mask_cuda(b.mask, N, C, rd->p, rd->seed, rd->stream, stream);

  /* x̂ = LN_in(z); [ap | ag | bp | bg | g] = x̂·w_catᵀ; A, B channel-major; σ(g) */
  if (tri_fused_in_ok(z, w->w_cat, &s, b.sg, C, Ch)) {
    const bf16 *w_b = w->w_cat + (int64_t)2 * Ch * C, *w_g = w->w_cat + (int64_t)4 * Ch * C;
    mf_ln_gemm_wg_cm_cuda(s.a, ldm, s.mu_in, s.rs_in, z, w->ln_in_g, w->ln_in_b, w->w_cat, NULL,
                          pm, M, C, Ch, MF_LN_FULL, 1, stream);
    mf_ln_gemm_wg_cm_cuda(s.b, ldm, NULL, NULL, z, w->ln_in_g, w->ln_in_b, w_b, NULL, pm, M, C,
                          Ch, MF_LN_FULL, 1, stream);
    mf_ln_gemm_wg_cuda(b.sg, NULL, NULL, z, w->ln_in_g, w->ln_in_b, w_g, NULL, NULL, M, C, C,
                       MF_LN_FULL, 3, stream);
  } else {
    for (int64_t r0 = 0; r0 < M; r0 += R) {
      const int64_t rows = M - r0 < R ? M - r0 : R;
      mf_ln_rows_cuda(st->xh, s.mu_in + r0, s.rs_in + r0, z + r0 * C, w->ln_in_g, w->ln_in_b,
                      rows, C, MF_LN_FULL, 0, stream);
      mf_gemm_rm_cuda(blas, stream, 0, 1, rows, K, C, 1.0f, st->xh, C, w->w_cat, C, 0.0f, st->P,
                      MF_GEMM_OUT_BF16, K);
      launch_gate_fwd(s.a, s.b, b.sg, st->P, pm, M, ldm, r0, rows, C, Ch, stream);
    }
  }
  /* the triangular contraction, per channel */
  if (outgoing)
    contract(blas, stream, 0, 1, s.a, s.b, s.t, N, Ch);
  else
    contract(blas, stream, 1, 0, s.a, s.b, s.t, N, Ch);
  /* Δz = σ(g) ⊙ (LN_out(T)·W_zᵀ), optionally out += mask ⊙ Δz: variant 2 in one wgmma
   * kernel over all rows (out_proj_wg.cu) where it takes the shape, else per chunk */
  const float *dmask = rd ? b.mask : NULL;
  if (g_tri_variant == 2 && mf_trimul_out_wg_supported(C, Ch, ldm, out, s.t, b.sg, w->w_z, dmask) &&
      (uintptr_t)(rd ? rd->res : NULL) % 16 == 0) {
    mf_trimul_out_wg_cuda(out, s.mu_out, s.rs_out, s.t, ldm, w->ln_out_g, w->ln_out_b, w->w_z,
                          b.sg, dmask, rd ? rd->res : NULL, rd ? (int)rd->axis : 0, N, C, Ch, stream);
    return;
  }
  for (int64_t r0 = 0; r0 < M; r0 += R) {
    const int64_t rows = M - r0 < R ? M - r0 : R;
    launch_ln_cm(st->y, s.mu_out, s.rs_out, s.t, w->ln_out_g, w->ln_out_b, M, ldm, r0, rows, Ch,
                 0, stream);
    mf_gemm_rm_cuda(blas, stream, 0, 1, rows, C, Ch, 1.0f, st->y, Ch, w->w_z, Ch, 0.0f, st->u,
                    MF_GEMM_OUT_F32, C);
    launch_out_fwd(out, b.sg, st->u, dmask, rd ? rd->res : NULL, rd ? (int)rd->axis : 0, N, r0, rows,
                   C, stream);
  }
}

/* ================================================================ backward */

#define G(field) (g ? g->field : NULL)

extern "C" void mf_trimul_backward_cuda(bf16 *dz, const mf_trimul_cuda_grads *g, const bf16 *dout,
                                        const void *saved, const bf16 *z, const uint8_t *pm,
                                        const mf_trimul_cuda_weights *w, int N, int C, int Ch,
                                        int outgoing, const mf_resdrop_cuda *rd, void *ws,
                                        size_t ws_bytes, const mf_cuda_blas *blas,
                                        cudaStream_t stream) {
  tri_check(w, N, C, Ch, outgoing, rd);
  MF_ASSERT(dz && dout && saved && z && ws, "trimul_backward_cuda: NULL argument");
  const int64_t M = (int64_t)N * N, ldm = tri_ldm(M);
  const bf16 *w_g = w->w_cat + (int64_t)4 * Ch * C; /* (C, C) */
  float *dw_cat = G(w_cat), *dw_g = dw_cat ? dw_cat + (int64_t)4 * Ch * C : NULL;
  tri_saved s;
  saved_carve(&s, (void *)saved, M, Ch);
  tri_ws b;
  MF_ASSERT(ws_carve(&b, NULL, N, C, Ch, 1) <= ws_bytes, "trimul_cuda: workspace too small");
  ws_carve(&b, ws, N, C, Ch, 1); /* the fused path's staging; re-carved below if it cannot run */
  if (rd)
    mf_dropout_mask_cuda(b.mask, N, C, rd->p, rd->seed, rd->stream, stream);
  bf16 *dgl = b.sg; /* (M, C) */
  const int K = 4 * Ch + C; /* columns of P */
  /* variant 2: phase 3's recomputed projection and gate backward as two wgmma kernels
   * (ln_gemm_wg.cu, epilogue 4) instead of a cuBLAS GEMM into P4 and the transposing gate
   * kernel (P4 written once instead of three times, read once instead of twice), with dgl
   * copied beside them so that P = [dP4 | dgl] (rows, 4Ch + C) meets the whole w_cat in one
   * GEMM each for dW_cat (dW_g included) and dx̂ */
  const int K4 = 4 * Ch;
  const int fused_gate_bwd = g_tri_variant == 2 && K % 8 == 0 &&
                             mf_ln_gemm_wg_supported(C, Ch, 4, MF_LN_FULL, z, b.ph3.P, w->w_cat) &&
                             mf_ln_gemm_wg_supported(C, C, 0, MF_LN_FULL, z, b.ph1.gl, w_g) &&
                             tri_al16(b.ph3.P + 2 * Ch) && tri_al16(w->w_cat + (int64_t)2 * Ch * C) &&
                             tri_al16(b.dA) && tri_al16(b.dB);
  if (!fused_gate_bwd) ws_carve(&b, ws, N, C, Ch, 0);
  const float *dmask = rd ? b.mask : NULL;
  /* the fully fused backward (tri_chunk_full): every chunk of phase 1 in trimul_ph1_wg.cu
   * and of phase 3 in gemm_ln_bwd_wg.cu, so that its staging holds only the bf16 gate logits
   * (phase 1) and x̂ and dP4 at row stride 4Ch (phase 3), in larger chunks */
  int full = fused_gate_bwd && b.dwz_part && mf_gemm_ln_bwd_enabled() &&
             mf_ln_gemm_wg_supported(C, Ch, 4, MF_LN_FULL, z, b.ph3f.P, w->w_cat) &&
             mf_ln_gemm_wg_supported(C, C, 0, MF_LN_FULL, z, b.ph1f.gl, w_g) &&
             tri_al16(b.ph3f.P + 2 * Ch);
  for (int64_t r0 = 0; full && r0 < M; r0 += b.ph3f.R) {
    const mf_gemm_ln_term tf[2] = {{b.ph3f.P, K4, w->w_cat, K4}, {dgl + r0 * C, C, w_g, C}};
    full = mf_trimul_ph1_wg_supported(C, Ch, ldm, r0, dgl, b.dT, s.t, dout, (bf16 *)b.ph1f.gl,
                                      w->w_z, dmask) &&
           mf_gemm_ln_bwd_supported(tf, 2, C, MF_LN_FULL, z + r0 * C, dz + r0 * C);
  }
  const tri_stage *p1 = full ? &b.ph1f : &b.ph1, *p3 = full ? &b.ph3f : &b.ph3;
  const int ldp = full ? K4 : K; /* P's row stride in phase 3 */

  /* phase 1, per chunk: out = σ(gl) ⊙ u, u = y·W_zᵀ, y = LN_out(T)
   *   ⇒ du = d⊙σ, dgl = d⊙u⊙σ(1−σ); dW_z += duᵀ·y; dW_g += dglᵀ·x̂; dy = du·W_z;
   *     dT = LN_out backward of dy (channel-major). Variant 2: gl = LN_in(z)·W_gᵀ in bf16 by
   *     one wgmma kernel, dW_g in phase 3 */
  const int64_t R1 = p1->R;
  for (int64_t r0 = 0; r0 < M; r0 += R1) {
    const int64_t rows = M - r0 < R1 ? M - r0 : R1;
    bf16 *glb = (bf16 *)p1->gl; /* variant 2: the gate logits in bf16, in gl's room */
    if (fused_gate_bwd) { /* x̂ is not needed here (dW_g waits for phase 3): LN + W_g at once */
      mf_ln_gemm_wg_cuda(glb, NULL, NULL, z + r0 * C, w->ln_in_g, w->ln_in_b, w_g, NULL, NULL,
                         rows, C, C, MF_LN_FULL, 0, stream);
    } else {
      mf_ln_rows_cuda(p1->xh, s.mu_in + r0, s.rs_in + r0, z + r0 * C, w->ln_in_g, w->ln_in_b, rows,
                      C, MF_LN_FULL, 1, stream);
      mf_gemm_rm_cuda(blas, stream, 0, 1, rows, C, C, 1.0f, p1->xh, C, w_g, C, 0.0f, p1->gl,
                      MF_GEMM_OUT_F32, C);
    }
    if (fused_gate_bwd && b.dwz_part &&
        mf_trimul_ph1_wg_supported(C, Ch, ldm, r0, dgl, b.dT, s.t, dout, glb, w->w_z, dmask)) {
      /* the rest of the phase in one kernel (trimul_ph1_wg.cu): y, u, du, dy never reach HBM */
      const int parts = mf_trimul_ph1_wg_cuda(dgl, b.dT, G(w_z), b.dwz_part, b.part, s.t, ldm, s.mu_out,
                                              s.rs_out, w->ln_out_g, w->ln_out_b, w->w_z, dout, glb,
                                              dmask, rd ? (int)rd->axis : 0, N, r0, rows, stream);
      mf_ln_param_grad_reduce_cuda(G(ln_out_g), G(ln_out_b), b.part, parts, Ch, stream);
      continue;
    }
    int y_cm = 0; /* y channel-major (Ch, ldm(R)) from the fused kernel, else rows (R, Ch) */
    if (fused_gate_bwd && mf_trimul_out_bwd_wg_supported(C, Ch, ldm, r0, p1->du, dgl, p1->y, s.t, dout,
                                                         glb, w->w_z, dmask)) {
      /* y, u = y·W_zᵀ and the gate backward in one wgmma kernel (out_proj_wg.cu): u never
       * goes to HBM */
      mf_trimul_out_bwd_wg_cuda(p1->du, dgl, p1->y, tri_ldm(R1), s.mu_out, s.rs_out, s.t, ldm,
                                w->ln_out_g, w->ln_out_b, w->w_z, dout, glb, dmask,
                                rd ? (int)rd->axis : 0, N, r0, rows, C, Ch, stream);
      y_cm = 1;
    } else {
      launch_ln_cm(p1->y, s.mu_out, s.rs_out, s.t, w->ln_out_g, w->ln_out_b, M, ldm, r0, rows, Ch,
                   1, stream);
      mf_gemm_rm_cuda(blas, stream, 0, 1, rows, C, Ch, 1.0f, p1->y, Ch, w->w_z, Ch, 0.0f, p1->u,
                      MF_GEMM_OUT_F32, C);
      launch_out_bwd(p1->du, dgl, dout, fused_gate_bwd ? NULL : p1->gl, glb, p1->u, dmask,
                     rd ? (int)rd->axis : 0, N, r0, rows, C, stream);
    }
    if (G(w_z) && y_cm) /* dW_z += duᵀ·y with y stored transposed */
      mf_gemm_rm_cuda(blas, stream, 1, 1, C, Ch, rows, 1.0f, p1->du, C, p1->y, tri_ldm(R1), 1.0f,
                      G(w_z), MF_GEMM_OUT_F32, Ch);
    else if (G(w_z))
      mf_gemm_rm_cuda(blas, stream, 1, 0, C, Ch, rows, 1.0f, p1->du, C, p1->y, Ch, 1.0f, G(w_z),
                      MF_GEMM_OUT_F32, Ch);
    if (dw_g && !fused_gate_bwd) /* variant 2: in phase 3 with dW_cat */
      mf_gemm_rm_cuda(blas, stream, 1, 0, C, C, rows, 1.0f, dgl + r0 * C, C, p1->xh, C, 1.0f, dw_g,
                      MF_GEMM_OUT_F32, C);
    mf_gemm_rm_cuda(blas, stream, 0, 0, rows, Ch, C, 1.0f, p1->du, C, w->w_z, Ch, 0.0f, p1->dy,
                    MF_GEMM_OUT_BF16, Ch);
    const int parts = launch_ln_cm_bwd(b.dT, b.part, p1->dy, s.t, s.mu_out, s.rs_out,
                                       w->ln_out_g, M, ldm, r0, rows, Ch, stream);
    mf_ln_param_grad_reduce_cuda(G(ln_out_g), G(ln_out_b), b.part, parts, Ch, stream);
  }

  /* phase 2: the contraction's gradients, per channel */
  if (outgoing) {
    /* T_c = A_c·B_cᵀ  ⇒  dA_c = dT_c·B_c,  dB_c = dT_cᵀ·A_c */
    contract(blas, stream, 0, 0, b.dT, s.b, b.dA, N, Ch);
    contract(blas, stream, 1, 0, b.dT, s.a, b.dB, N, Ch);
  } else {
    /* T_c = A_cᵀ·B_c  ⇒  dA_c = B_c·dT_cᵀ,  dB_c = A_c·dT_c */
    contract(blas, stream, 0, 1, s.b, b.dT, b.dA, N, Ch);
    contract(blas, stream, 0, 0, s.a, b.dT, b.dB, N, Ch);
  }

  /* phase 3, per chunk: A = pm⊙σ(ag)⊙ap, B likewise (recomputed projections)
   *   ⇒ dP4 = [dap | dag | dbp | dbg]; dW_cat[0:4Ch] += dP4ᵀ·x̂;
   *     dx̂ = dP4·W_cat[0:4Ch] + dgl·W_g; dz = LN_in backward of dx̂ */
  const int64_t R3 = p3->R;
  for (int64_t r0 = 0; r0 < M; r0 += R3) {
    const int64_t rows = M - r0 < R3 ? M - r0 : R3;
    if (fused_gate_bwd &&
        mf_trimul_ph3_wg_supported(C, Ch, ldm, ldp, p3->P, p3->xh, dz + r0 * C, b.dA + r0, b.dB + r0,
                                   dgl + r0 * C, z + r0 * C, w->w_cat, w_g)) {
      /* the whole phase in one kernel (trimul_ph3_wg.cu): dP4 is written once, for the dW
       * GEMMs, and dx̂ never leaves the chip */
      const int parts = mf_trimul_ph3_wg_cuda(p3->P, ldp, dw_cat ? p3->xh : NULL, dz + r0 * C, rd ? 1 : 0,
                                              b.part, b.dA + r0, b.dB + r0, ldm, dgl + r0 * C, z + r0 * C,
                                              s.mu_in + r0, s.rs_in + r0, w->ln_in_g, w->ln_in_b,
                                              w->w_cat, w_g, pm ? pm + r0 : NULL, rows, stream);
      if (dw_cat) { /* dW_cat[0:4Ch] += dP4ᵀ·x̂, dW_g += dglᵀ·x̂ */
        mf_gemm_rm_cuda(blas, stream, 1, 0, K4, C, rows, 1.0f, p3->P, ldp, p3->xh, C, 1.0f, dw_cat,
                        MF_GEMM_OUT_F32, C);
        mf_gemm_rm_cuda(blas, stream, 1, 0, C, C, rows, 1.0f, dgl + r0 * C, C, p3->xh, C, 1.0f, dw_g,
                        MF_GEMM_OUT_F32, C);
      }
      mf_ln_param_grad_reduce_cuda(G(ln_in_g), G(ln_in_b), b.part, parts, C, stream);
      continue;
    }
    int xh_done = 0; /* x̂ (for the dW GEMMs) stored by the first gated backward */
    if (fused_gate_bwd) { /* P ← [dap | dag | dbp | dbg] straight from z (variant 2) */
      const uint8_t *pmc = pm ? pm + r0 : NULL;
      xh_done = mf_ln_gemm_wg_gated_bwd_cuda(p3->P, ldp, p3->xh, b.dA + r0, ldm, NULL, NULL,
                                             z + r0 * C, w->ln_in_g, w->ln_in_b, w->w_cat, pmc,
                                             rows, C, Ch, MF_LN_FULL, stream);
      mf_ln_gemm_wg_gated_bwd_cuda(p3->P + 2 * Ch, ldp, NULL, b.dB + r0, ldm, NULL, NULL,
                                   z + r0 * C, w->ln_in_g, w->ln_in_b,
                                   w->w_cat + (int64_t)2 * Ch * C, pmc, rows, C, Ch, MF_LN_FULL,
                                   stream);
    }
    if (!xh_done)
      mf_ln_rows_cuda(p3->xh, s.mu_in + r0, s.rs_in + r0, z + r0 * C, w->ln_in_g, w->ln_in_b, rows,
                      C, MF_LN_FULL, 1, stream);
    if (fused_gate_bwd) {
      /* dx̂ = dP4·W_cat[0:4Ch] + dgl·W_g and the LayerNorm backward in one kernel
       * (gemm_ln_bwd_wg.cu): no fp32 dx̂ in HBM and no copy of dgl into P */
      const mf_gemm_ln_term tt[2] = {{p3->P, ldp, w->w_cat, K4}, {dgl + r0 * C, C, w_g, C}};
      if (mf_gemm_ln_bwd_enabled() &&
          mf_gemm_ln_bwd_supported(tt, 2, C, MF_LN_FULL, z + r0 * C, dz + r0 * C)) {
        if (dw_cat) { /* dW_cat[0:4Ch] += dP4ᵀ·x̂, dW_g += dglᵀ·x̂ */
          mf_gemm_rm_cuda(blas, stream, 1, 0, K4, C, rows, 1.0f, p3->P, ldp, p3->xh, C, 1.0f, dw_cat,
                          MF_GEMM_OUT_F32, C);
          mf_gemm_rm_cuda(blas, stream, 1, 0, C, C, rows, 1.0f, dgl + r0 * C, C, p3->xh, C, 1.0f,
                          dw_g, MF_GEMM_OUT_F32, C);
        }
        const int parts = mf_gemm_ln_bwd_cuda(dz + r0 * C, rd ? 1 : 0, b.part, tt, 2, z + r0 * C,
                                              s.mu_in + r0, s.rs_in + r0, w->ln_in_g, rows, C,
                                              MF_LN_FULL, stream);
        mf_ln_param_grad_reduce_cuda(G(ln_in_g), G(ln_in_b), b.part, parts, C, stream);
        continue;
      }
      MF_ASSERT(!full, "trimul_cuda: the fully fused phase 3 fell back");
      MF_CHECK_CUDA(cudaMemcpy2DAsync(p3->P + K4, (size_t)K * 2, dgl + r0 * C, (size_t)C * 2,
                                      (size_t)C * 2, (size_t)rows, cudaMemcpyDeviceToDevice, stream));
      if (dw_cat) /* dW_cat (w_g's rows included) += Pᵀ·x̂ */
        mf_gemm_rm_cuda(blas, stream, 1, 0, K, C, rows, 1.0f, p3->P, K, p3->xh, C, 1.0f, dw_cat,
                        MF_GEMM_OUT_F32, C);
      mf_gemm_rm_cuda(blas, stream, 0, 0, rows, C, K, 1.0f, p3->P, K, w->w_cat, C, 0.0f, p3->dxh,
                      MF_GEMM_OUT_F32, C);
    } else {
      mf_gemm_rm_cuda(blas, stream, 0, 1, rows, K4, C, 1.0f, p3->xh, C, w->w_cat, C, 0.0f, p3->P,
                      MF_GEMM_OUT_BF16, K4);
      launch_gate_bwd(p3->P, b.dA, b.dB, pm, M, ldm, r0, rows, Ch, stream);
      if (dw_cat)
        mf_gemm_rm_cuda(blas, stream, 1, 0, K4, C, rows, 1.0f, p3->P, K4, p3->xh, C, 1.0f, dw_cat,
                        MF_GEMM_OUT_F32, C);
      mf_gemm_rm_cuda(blas, stream, 0, 0, rows, C, K4, 1.0f, p3->P, K4, w->w_cat, C, 0.0f, p3->dxh,
                      MF_GEMM_OUT_F32, C);
      mf_gemm_rm_cuda(blas, stream, 0, 0, rows, C, C, 1.0f, dgl + r0 * C, C, w_g, C, 1.0f,
                      p3->dxh, MF_GEMM_OUT_F32, C);
    }
    mf_ln_rows_backward_cuda(dz + r0 * C, b.part, p3->dxh, z + r0 * C, s.mu_in + r0, s.rs_in + r0,
                             w->ln_in_g, rows, C, MF_LN_FULL, rd ? 1 : 0, stream);
    mf_ln_param_grad_reduce_cuda(G(ln_in_g), G(ln_in_b), b.part, mf_ln_rows_backward_parts(rows),
                                 C, stream);
  }
}
