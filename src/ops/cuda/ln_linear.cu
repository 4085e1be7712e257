/* ln_linear.cu — EvoFusion LayerNorm + Linear and the gated projection on the GPU:
 * LN rows into a bf16 staging chunk + cuBLAS GEMM + epilogue kernels,
 * forward and backward (recomputing the normalised rows), plus the LayerNorm building
 * blocks shared by transition.cu and trimul.cu. The default forward dispatches to the
 * fused mma.sync kernel of ln_gemm.cu where the shape allows. See ln_linear_cuda.h. Not
 * the CPU reference (src/ops/cpu/ln_linear.c). */
#include "ln_linear_cuda.h"

#include <mma.h>

#include "fusion_util.cuh"
#include "ln_gemm_cuda.h"
#include "ln_gemm_bwd_cuda.h"
#include "ln_rows_hw.cuh"

#define LN_ROWS_PER_BLOCK 8 /* warps per block (ln_rows_kernel: RPW rows each) */
#define LN_BWD_MAX_BLOCKS 1056 /* 8 blocks of 8 warps per SM on 132 SMs */

static int64_t g_chunk_override = 0;

extern "C" int64_t mf_fusion_set_chunk_rows(int64_t rows) {
  int64_t old = g_chunk_override;
  g_chunk_override = rows > 0 ? rows : 0;
  return old;
}

extern "C" int64_t mf_fusion_chunk_rows(int64_t M, size_t bytes_per_row) {
  return mf_fusion_chunk_rows_in(M, bytes_per_row, MF_FUSION_STAGING_BYTES);
}

extern "C" int64_t mf_fusion_chunk_rows_in(int64_t M, size_t bytes_per_row, size_t budget) {
  if (M <= 0) return 1;
  if (g_chunk_override) return g_chunk_override < M ? g_chunk_override : M;
  /* at most `budget` bytes of staging, in equal chunks (multiples of 256 rows) */
  int64_t cap = (int64_t)(budget / (bytes_per_row ? bytes_per_row : 1)) / 256 * 256;
  if (cap < 256) cap = 256;
  const int64_t chunks = (M + cap - 1) / cap;
  int64_t R = (M + chunks - 1) / chunks;
  R = (R + 255) / 256 * 256;
  return R < M ? R : M;
}

/* ================================================================ LayerNorm rows */

/* The row layout and load (mf_row_chan, mf_row_load_bf16) are in fusion_util.cuh. */

/* y (rows, C) = LN(x (rows, C)); one warp per RPW consecutive rows, V values per lane
 * (C <= 32·V). The RPW rows' loads are issued together (one row per warp kept too few
 * bytes in flight: ≈ 35 % of the copy bandwidth at C = 128). Statistics in fp32 from
 * registers (two-pass variance). */
template <int V, bool CONTIG, int RPW>
static __global__ void ln_rows_kernel(bf16 *__restrict__ y, float *__restrict__ mean,
                               float *__restrict__ rstd, const bf16 *__restrict__ x,
                               const bf16 *__restrict__ gamma, const bf16 *__restrict__ beta,
                               int64_t rows, int C, int mode, int use_saved) {
  const int lane = threadIdx.x % MF_WARP_SIZE, w = threadIdx.x / MF_WARP_SIZE;
  const int64_t r0 = ((int64_t)blockIdx.x * (blockDim.x / MF_WARP_SIZE) + w) * RPW;
  if (r0 >= rows) return;
  float v[RPW][V];
#pragma unroll
  for (int j = 0; j < RPW; j++)
    if (r0 + j < rows) mf_row_load_bf16<V, CONTIG>(v[j], x + (r0 + j) * C, lane, C);
#pragma unroll
  for (int j = 0; j < RPW; j++) {
    const int64_t r = r0 + j;
    if (r >= rows) break; /* warp-uniform */
    float mu, rs;
    if (use_saved) {
      mu = mean[r];
      rs = rstd[r];
    } else {
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < V; i++) s += v[j][i];
      mu = mf_warp_sum(s) / (float)C;
      float q = 0.0f;
#pragma unroll
      for (int i = 0; i < V; i++) {
        const float d = v[j][i] - mu;
        q += mf_row_chan<V, CONTIG>(lane, i) < C ? d * d : 0.0f;
      }
      rs = 1.0f / sqrtf(mf_warp_sum(q) / (float)C + (float)MF_LN_EPS);
      if (lane == 0 && mean) {
        mean[r] = mu;
        rstd[r] = rs;
      }
    }
    float o[V];
#pragma unroll
    for (int i = 0; i < V; i++) {
      const int c = mf_row_chan<V, CONTIG>(lane, i);
      float t = (v[j][i] - mu) * rs;
      if (c < C) {
        if (mode != MF_LN_NONE) t *= mf_bf16_to_f32(gamma[c]);
        if (mode == MF_LN_FULL) t += mf_bf16_to_f32(beta[c]);
      }
      o[i] = t;
    }
    bf16 *yr = y + r * C;
    if (CONTIG) {
#pragma unroll
      for (int i = 0; i < V; i += 2)
        *(__nv_bfloat162 *)(yr + lane * V + i) = __floats2bfloat162_rn(o[i], o[i + 1]);
    } else {
#pragma unroll
      for (int i = 0; i < V; i++) {
        const int c = i * MF_WARP_SIZE + lane;
        if (c < C) yr[c] = mf_f32_to_bf16(o[i]);
      }
    }
  }
}

/* dx (rows, C) and per-block partials part (gridDim.x, 2C) of Σ dy⊙x̂ and Σ dy.
 * Rows are taken in a fixed grid-stride order, so the partials are deterministic. */
template <int V, bool CONTIG>
static __global__ void ln_rows_bwd_kernel(bf16 *__restrict__ dx, float *__restrict__ part,
                                   const float *__restrict__ dy, const bf16 *__restrict__ x,
                                   const float *__restrict__ mean, const float *__restrict__ rstd,
                                   const bf16 *__restrict__ gamma, int64_t rows, int C, int mode,
                                   int accumulate) {
  extern __shared__ float sm[]; /* (warps, 2C) */
  const int lane = threadIdx.x % MF_WARP_SIZE, w = threadIdx.x / MF_WARP_SIZE;
  const int nw = blockDim.x / MF_WARP_SIZE;
  float pg[V], pb[V], gm[V];
#pragma unroll
  for (int i = 0; i < V; i++) {
    const int c = mf_row_chan<V, CONTIG>(lane, i);
    pg[i] = 0.0f;
    pb[i] = 0.0f;
    gm[i] = (c < C && mode != MF_LN_NONE) ? mf_bf16_to_f32(gamma[c]) : 1.0f;
  }
  /* two rows of the warp's grid-stride sequence per iteration, loads first (more bytes in
   * flight); the rows are still accumulated in sequence order */
  const int64_t stride = (int64_t)gridDim.x * nw;
  for (int64_t r0 = (int64_t)blockIdx.x * nw + w; r0 < rows; r0 += 2 * stride) {
    float xl[2][V], dl[2][V], mu[2], rs[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
      const int64_t r = r0 + u * stride;
      if (r >= rows) break; /* warp-uniform */
      mu[u] = mean[r];
      rs[u] = rstd[r];
      mf_row_load_bf16<V, CONTIG>(xl[u], x + r * C, lane, C);
      if (CONTIG) {
#pragma unroll
        for (int i = 0; i < V; i += 2) {
          const float2 t = *(const float2 *)(dy + r * C + lane * V + i);
          dl[u][i] = t.x;
          dl[u][i + 1] = t.y;
        }
      } else {
#pragma unroll
        for (int i = 0; i < V; i++) {
          const int c = i * MF_WARP_SIZE + lane;
          dl[u][i] = c < C ? dy[r * C + c] : 0.0f;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < 2; u++) {
      const int64_t r = r0 + u * stride;
      if (r >= rows) break;
      float xh[V], g[V], sg = 0.0f, sgx = 0.0f;
#pragma unroll
      for (int i = 0; i < V; i++) {
        const int c = mf_row_chan<V, CONTIG>(lane, i);
        const float d = dl[u][i];
        xh[i] = c < C ? (xl[u][i] - mu[u]) * rs[u] : 0.0f;
        g[i] = d * gm[i];
        sg += g[i];
        sgx += g[i] * xh[i];
        pg[i] += d * xh[i];
        pb[i] += d;
      }
      sg = mf_warp_sum(sg) / (float)C;
      sgx = mf_warp_sum(sgx) / (float)C;
      if (dx) {
        const float rsu = rs[u];
        bf16 *dr = dx + r * C;
        if (CONTIG && V <= 4) { /* the roundings pinned (ln_rows_bwd_vec_kernel's comment) */
#pragma unroll
          for (int i = 0; i < V; i += 2) {
            float a[2];
            const __nv_bfloat162 o = accumulate ? *(const __nv_bfloat162 *)(dr + lane * V + i)
                                                : __floats2bfloat162_rn(0.0f, 0.0f);
#pragma unroll
            for (int k = 0; k < 2; k++) {
              const float ok = k ? __high2float(o) : __low2float(o);
              if (V == 4 && ((i + k) & 3) >= 2) {
                const float t = __fmaf_rn(xh[i + k], -sgx, __fmaf_rn(dl[u][i + k], gm[i + k], -sg));
                a[k] = accumulate ? __fmaf_rn(rsu, t, ok) : __fmul_rn(rsu, t);
              } else {
                const float t = __fmul_rn(rsu, __fmaf_rn(xh[i + k], -sgx, __fsub_rn(g[i + k], sg)));
                a[k] = accumulate ? __fadd_rn(t, ok) : t;
              }
            }
            *(__nv_bfloat162 *)(dr + lane * V + i) = __floats2bfloat162_rn(a[0], a[1]);
          }
        } else if (CONTIG) {
#pragma unroll
          for (int i = 0; i < V; i += 2) {
            float a0 = rsu * (g[i] - sg - xh[i] * sgx), a1 = rsu * (g[i + 1] - sg - xh[i + 1] * sgx);
            if (accumulate) {
              const __nv_bfloat162 o = *(const __nv_bfloat162 *)(dr + lane * V + i);
              a0 += __low2float(o);
              a1 += __high2float(o);
            }
            *(__nv_bfloat162 *)(dr + lane * V + i) = __floats2bfloat162_rn(a0, a1);
          }
        } else {
#pragma unroll
          for (int i = 0; i < V; i++) {
            const int c = i * MF_WARP_SIZE + lane;
            if (c < C) {
              float v = rsu * (g[i] - sg - xh[i] * sgx);
              if (accumulate) v += mf_bf16_to_f32(dr[c]);
              dr[c] = mf_f32_to_bf16(v);
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < V; i++) {
    const int c = mf_row_chan<V, CONTIG>(lane, i);
    if (c < C) {
      sm[w * 2 * C + c] = pg[i];
      sm[w * 2 * C + C + c] = pb[i];
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < 2 * C; j += blockDim.x) {
    float s = 0.0f;
    for (int k = 0; k < nw; k++) s += sm[k * 2 * C + j];
    part[(int64_t)blockIdx.x * 2 * C + j] = s;
  }
}

/* ---------------------------------------------------------------- vectorised row kernels
 * Variant 1 (the default backward; the forward's default is variant 2 below) for
 * contiguous rows of C = 32·V (forward V = 2, 4, 8: C = 64, 128, 256;
 * backward V = 2, 4) with 2V-byte aligned rows (mf_ln_rows_cuda_set_variant(1)); variant 0
 * and every other C run the kernels above. Same lanes, channels, arithmetic, roundings
 * and summation order as those, so the results are bit-identical (the roundings are pinned
 * with __fmul_rn / __fadd_rn / __fmaf_rn to what the compiler made of the kernels above:
 * sm_90a SASS; the backward's dx of those is pinned the same way), but each lane
 * moves its V channels of a row with one 4-, 8- or 16-byte access (streaming loads for the
 * read-once x and dy), γ/β sit in registers, and the forward is a persistent grid of
 * whole waves (equal row shares per warp) whose warps load LN_VEC_RPW rows before reducing any (2 KiB per warp, 64 KiB
 * per SM in flight at C = 128, against 1 KiB per warp before). Row counts chosen from
 * registers and bytes in flight. Measured (H200, 2026-11-30, bench/evofusion, C = 128,
 * against the kernels above in the same run): forward 0.137 ms at M = 768² (53 % of the copy
 * bandwidth; 0.138) and 0.042 ms at 384² (0.043) — no gain; backward 0.174 ms (82 %;
 * 0.185, 78 %) and 0.053 ms (0.056). The pinned roundings are CUDA 13.0's (nvcc V13.0.88). */
#define LN_VEC_RPW 8 /* rows per warp per step of the vectorised forward (V <= 4) */
#define LN_VEC_BWD_RB 3 /* rows per warp per step of the vectorised backward */

static int g_ln_rows_variant = 2; /* ln_bw_lab, H200: 0.0917 ms against variant 1's 0.137 at M = 768² */

extern "C" int mf_ln_rows_cuda_set_variant(int variant) {
  const int old = g_ln_rows_variant;
  if (variant >= 0) g_ln_rows_variant = variant;
  return old;
}

/* V bf16 at p (2V-byte aligned) as raw 32-bit words (two channels each, low half first). */
template <int V>
static __device__ __forceinline__ void ln_ld_words(uint32_t *u, const bf16 *p) {
  if constexpr (V == 8) {
    const uint4 t = __ldcs((const uint4 *)p);
    u[0] = t.x; u[1] = t.y; u[2] = t.z; u[3] = t.w;
  } else if constexpr (V == 4) {
    const uint2 t = __ldcs((const uint2 *)p);
    u[0] = t.x; u[1] = t.y;
  } else {
    u[0] = __ldcs((const unsigned int *)p);
  }
}
template <int V>
static __device__ __forceinline__ void ln_words_f32(float *v, const uint32_t *u) {
#pragma unroll
  for (int k = 0; k < V / 2; k++) {
    __nv_bfloat162 h;
    memcpy(&h, &u[k], 4);
    v[2 * k] = __low2float(h);
    v[2 * k + 1] = __high2float(h);
  }
}
/* p (2V-byte aligned) = V values, rounded to nearest bf16 in pairs. */
template <int V>
static __device__ __forceinline__ void ln_st_bf16(bf16 *p, const float *o) {
  uint32_t u[V / 2];
#pragma unroll
  for (int k = 0; k < V / 2; k++) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(o[2 * k], o[2 * k + 1]);
    memcpy(&u[k], &h, 4);
  }
  if constexpr (V == 8) *(uint4 *)p = make_uint4(u[0], u[1], u[2], u[3]);
  else if constexpr (V == 4) *(uint2 *)p = make_uint2(u[0], u[1]);
  else *(unsigned int *)p = u[0];
}
/* Plain (cached) load of V bf16 as fp32: the accumulate path's read of dx. */
template <int V>
static __device__ __forceinline__ void ln_ld_plain(float *v, const bf16 *p) {
  uint32_t u[V / 2];
  if constexpr (V == 8) {
    const uint4 t = *(const uint4 *)p;
    u[0] = t.x; u[1] = t.y; u[2] = t.z; u[3] = t.w;
  } else if constexpr (V == 4) {
    const uint2 t = *(const uint2 *)p;
    u[0] = t.x; u[1] = t.y;
  } else {
    u[0] = *(const unsigned int *)p;
  }
  ln_words_f32<V>(v, u);
}

/* ln_rows_kernel<V, true, RPW> as a persistent grid: each warp takes an equal share of
 * consecutive rows, RPW at a time. */
template <int V, int RPW>
static __global__ void __launch_bounds__(LN_ROWS_PER_BLOCK *MF_WARP_SIZE, V <= 4 ? 4 : 3)
    ln_rows_vec_kernel(bf16 *__restrict__ y, float *__restrict__ mean, float *__restrict__ rstd,
                       const bf16 *__restrict__ x, const bf16 *__restrict__ gamma,
                       const bf16 *__restrict__ beta, int64_t rows, int C, int mode,
                       int use_saved) {
  const int lane = threadIdx.x % MF_WARP_SIZE, w = threadIdx.x / MF_WARP_SIZE;
  const int nw = blockDim.x / MF_WARP_SIZE;
  float gm[V], bt[V];
#pragma unroll
  for (int i = 0; i < V; i++) {
    const int c = lane * V + i;
    gm[i] = (c < C && mode != MF_LN_NONE) ? mf_bf16_to_f32(gamma[c]) : 1.0f;
    bt[i] = (c < C && mode == MF_LN_FULL) ? mf_bf16_to_f32(beta[c]) : 0.0f;
  }
  /* warp gw of W takes the consecutive rows [rows·gw/W, rows·(gw+1)/W): all warps end
   * within a row of each other (no partly busy last round) */
  const int64_t W = (int64_t)gridDim.x * nw, gw = (int64_t)blockIdx.x * nw + w;
  const int64_t rb = rows * gw / W, re = rows * (gw + 1) / W;
  for (int64_t r0 = rb; r0 < re; r0 += RPW) {
    uint32_t u[RPW][V / 2];
#pragma unroll
    for (int j = 0; j < RPW; j++)
      if (r0 + j < re) ln_ld_words<V>(u[j], x + (r0 + j) * C + lane * V);
#pragma unroll
    for (int j = 0; j < RPW; j++) {
      const int64_t r = r0 + j;
      if (r >= re) break; /* warp-uniform */
      float v[V];
      ln_words_f32<V>(v, u[j]);
      float mu, rs;
      if (use_saved) {
        mu = mean[r];
        rs = rstd[r];
      } else {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < V; i++) s += v[i];
        mu = mf_warp_sum(s) / (float)C;
        float q = 0.0f;
#pragma unroll
        for (int i = 0; i < V; i++) {
          const float d = __fsub_rn(v[i], mu);
          q = __fadd_rn(q, lane * V + i < C ? __fmul_rn(d, d) : 0.0f);
        }
        rs = 1.0f / sqrtf(mf_warp_sum(q) / (float)C + (float)MF_LN_EPS);
        if (lane == 0 && mean) {
          mean[r] = mu;
          rstd[r] = rs;
        }
      }
      float o[V];
#pragma unroll
      for (int i = 0; i < V; i++) {
        const int c = lane * V + i;
        float t = __fmul_rn(__fsub_rn(v[i], mu), rs);
        if (c < C) {
          if (mode != MF_LN_NONE) t = __fmul_rn(t, gm[i]);
          if (mode == MF_LN_FULL) t = __fadd_rn(t, bt[i]);
        }
        o[i] = t;
      }
      ln_st_bf16<V>(y + r * C + lane * V, o);
    }
  }
}

/* ln_rows_bwd_kernel<V, true> with the same rows per warp in the same order (so the same
 * partials), LN_VEC_BWD_RB rows of the warp's sequence loaded per step (dy as 16-byte
 * streaming loads, x as raw words), at most 64 registers so that 4 blocks fit an SM and the
 * mf_ln_rows_backward_parts(rows) <= 1056 blocks are whole waves on 132 SMs. */
template <int V, int RB>
static __global__ void __launch_bounds__(LN_ROWS_PER_BLOCK *MF_WARP_SIZE, 4)
    ln_rows_bwd_vec_kernel(bf16 *__restrict__ dx, float *__restrict__ part,
                           const float *__restrict__ dy, const bf16 *__restrict__ x,
                           const float *__restrict__ mean, const float *__restrict__ rstd,
                           const bf16 *__restrict__ gamma, int64_t rows, int C, int mode,
                           int accumulate) {
  extern __shared__ float sm[]; /* (warps, 2C) */
  const int lane = threadIdx.x % MF_WARP_SIZE, w = threadIdx.x / MF_WARP_SIZE;
  const int nw = blockDim.x / MF_WARP_SIZE;
  float pg[V], pb[V], gm[V];
#pragma unroll
  for (int i = 0; i < V; i++) {
    const int c = lane * V + i;
    pg[i] = 0.0f;
    pb[i] = 0.0f;
    gm[i] = (c < C && mode != MF_LN_NONE) ? mf_bf16_to_f32(gamma[c]) : 1.0f;
  }
  const int64_t stride = (int64_t)gridDim.x * nw;
  for (int64_t r0 = (int64_t)blockIdx.x * nw + w; r0 < rows; r0 += RB * stride) {
    uint32_t xu[RB][V / 2];
    float dl[RB][V], mu[RB], rs[RB];
#pragma unroll
    for (int u = 0; u < RB; u++) {
      const int64_t r = r0 + u * stride;
      if (r >= rows) break; /* warp-uniform */
      mu[u] = mean[r];
      rs[u] = rstd[r];
      ln_ld_words<V>(xu[u], x + r * C + lane * V);
      const float *dp = dy + r * C + lane * V;
#pragma unroll
      for (int i = 0; i < V; i += 4) {
        if (i + 4 <= V) {
          const float4 t = __ldcs((const float4 *)(dp + i));
          dl[u][i] = t.x;
          dl[u][i + 1] = t.y;
          dl[u][i + 2] = t.z;
          dl[u][i + 3] = t.w;
        } else {
          const float2 t = __ldcs((const float2 *)(dp + i));
          dl[u][i] = t.x;
          dl[u][i + 1] = t.y;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < RB; u++) {
      const int64_t r = r0 + u * stride;
      if (r >= rows) break;
      float xl[V], xh[V], g[V], sg = 0.0f, sgx = 0.0f;
      ln_words_f32<V>(xl, xu[u]);
#pragma unroll
      for (int i = 0; i < V; i++) {
        const int c = lane * V + i;
        const float d = dl[u][i];
        xh[i] = c < C ? __fmul_rn(__fsub_rn(xl[i], mu[u]), rs[u]) : 0.0f;
        g[i] = __fmul_rn(d, gm[i]);
        sg = __fadd_rn(sg, g[i]);
        sgx = __fmaf_rn(g[i], xh[i], sgx);
        pg[i] = __fmaf_rn(d, xh[i], pg[i]);
        pb[i] = __fadd_rn(pb[i], d);
      }
      sg = mf_warp_sum(sg) / (float)C;
      sgx = mf_warp_sum(sgx) / (float)C;
      if (dx) {
        const float rsu = rs[u];
        bf16 *dr = dx + r * C + lane * V;
        float o[V], a[V];
        if (accumulate) ln_ld_plain<V>(o, dr);
#pragma unroll
        for (int i = 0; i < V; i++) {
          /* the roundings of ln_rows_bwd_kernel<V, true> as compiled (sm_90a, CUDA 13.1):
           * V = 4 fuses channels 2, 3 of each lane (g − s as fma(dy, γ, −s), the add of dx
           * into the last fma), every other channel is rounded step by step */
          if (V == 4 && (i & 3) >= 2) {
            const float t = __fmaf_rn(xh[i], -sgx, __fmaf_rn(dl[u][i], gm[i], -sg));
            a[i] = accumulate ? __fmaf_rn(rsu, t, o[i]) : __fmul_rn(rsu, t);
          } else {
            const float t = __fmul_rn(rsu, __fmaf_rn(xh[i], -sgx, __fsub_rn(g[i], sg)));
            a[i] = accumulate ? __fadd_rn(t, o[i]) : t;
          }
        }
        ln_st_bf16<V>(dr, a);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < V; i++) {
    const int c = lane * V + i;
    if (c < C) {
      sm[w * 2 * C + c] = pg[i];
      sm[w * 2 * C + C + c] = pb[i];
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < 2 * C; j += blockDim.x) {
    float s = 0.0f;
    for (int k = 0; k < nw; k++) s += sm[k * 2 * C + j];
    part[(int64_t)blockIdx.x * 2 * C + j] = s;
  }
}

/* Whether the vectorised kernels take (C, the row pointers): variant >= 1 (variants 2–4:
 * the backward, and the forward where the half-warp kernels do not apply), C = 64, 128 or 256,
 * rows aligned to their 2V-byte lane accesses. */
static int ln_vec_ok(int C, const void *a, const void *b, const void *c) {
  if (g_ln_rows_variant < 1 || (C != 64 && C != 128 && C != 256)) return 0;
  const uintptr_t al = (uintptr_t)(C / 16) - 1; /* 2V − 1 bytes, V = C / 32 */
  return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & al) == 0;
}

template <int V, int RPW>
static void ln_rows_vec_launch(bf16 *y, float *mean, float *rstd, const bf16 *x,
                               const bf16 *gamma, const bf16 *beta, int64_t rows, int C, int mode,
                               int use_saved, cudaStream_t s) {
  static int occ = 0; /* resident blocks per SM (once per instance) */
  if (!occ) {
    MF_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &occ, ln_rows_vec_kernel<V, RPW>, LN_ROWS_PER_BLOCK * MF_WARP_SIZE, 0));
    if (occ < 1) occ = 1;
  }
  const int64_t need = (rows + (int64_t)RPW * LN_ROWS_PER_BLOCK - 1) / ((int64_t)RPW * LN_ROWS_PER_BLOCK);
  const int64_t full = (int64_t)mf_sm_count() * occ;
  const unsigned blocks = (unsigned)(need < full ? need : full);
  ln_rows_vec_kernel<V, RPW><<<blocks, LN_ROWS_PER_BLOCK * MF_WARP_SIZE, 0, s>>>(
      y, mean, rstd, x, gamma, beta, rows, C, mode, use_saved);
}

/* ---------------------------------------------------------------- half-warp forwards
 * Variants 2, 3 and 4 of mf_ln_rows_cuda for C = 64, 128, 256 with 16-byte aligned rows
 * (ln_rows_hw.cuh): C/8 lanes per row, 16 bytes = 8 channels per lane, xor-shuffle
 * reductions over the row's lanes, rows in grid-stride order over a persistent grid;
 *   variant 2 (default): mf_ln_rows_hw_kernel, LN_HW_U row groups per warp loaded (__ldcs)
 *              into registers before any is reduced, y stored with __stcs (ln_bw_lab v4b,
 *              the fastest there: 0.0917 ms at M = 768², 87 % of the memcpy);
 *   variant 3: mf_ln_rows_hw_cp_kernel, the loads through a per-thread cp.async ring of
 *              LN_HWCP_S stages × LN_HWCP_U groups in shared memory (bytes stay in flight
 *              while the warp reduces and stores);
 *   variant 4: mf_ln_rows_hw_bulk_kernel, chunks of LN_HWB_RB rows per block copied by one
 *              cp.async.bulk each into a ring of LN_HWB_S stages (full/empty mbarriers).
 * Their sums run in another order than variants 0/1 (8 channels per lane, then a tree over
 * C/8 lanes), so mean/rstd may differ from those in the last bits and y by one bf16 ulp;
 * two runs are bit-identical. Why: ln_rows_vec_kernel<4, 8> reached 0.135 ms at M = 768²
 * on an H200 (≈ 51 % of the D2D copy bandwidth); dev/cuda/ln_bw_lab.cu times them side by
 * side (not yet measured on the GPU when this was written: variant 1 stays the default).
 * The backward of variants 2–4 is variant 1's. */
#define LN_HW_U 4   /* variant 2: row groups per warp in flight */
#define LN_HWCP_U 2 /* variant 3: row groups per warp per stage */
#define LN_HWCP_S 4 /* variant 3: stages (32 KiB of shared memory per block) */
#define LN_HWB_RB 32 /* variant 4: rows per chunk (C = 128: 8 KiB) */
#define LN_HWB_S 4   /* variant 4: stages (C = 128: 32 KiB of shared memory per block) */

static int ln_hw_ok(int C, const void *y, const void *x) {
  if (g_ln_rows_variant < 2 || g_ln_rows_variant > 4 || (C != 64 && C != 128 && C != 256))
    return 0;
  return (((uintptr_t)y | (uintptr_t)x) & 15) == 0;
}

/* Resident blocks per SM of a kernel of MF_LN_HW_THREADS threads (at least 1). */
template <typename K>
static int ln_hw_occupancy(K kernel) {
  int occ = 0;
  MF_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, MF_LN_HW_THREADS, 0));
  return occ < 1 ? 1 : occ;
}

template <int LPR>
static void ln_rows_hw_launch(bf16 *y, float *mean, float *rstd, const bf16 *x, const bf16 *gamma,
                              const bf16 *beta, int64_t rows, int mode, int use_saved,
                              cudaStream_t s) {
  /* C = 256 keeps 32 rows of 512 bytes per bulk chunk only with 2 stages (48 KiB cap) */
  constexpr int BS = LPR == 32 ? 2 : LN_HWB_S;
  static int occ[3] = {0, 0, 0}; /* resident blocks per SM (once per instance) */
  const int k = g_ln_rows_variant - 2;
  if (!occ[k])
    occ[k] = k == 0   ? ln_hw_occupancy(mf_ln_rows_hw_kernel<LPR, LN_HW_U, true, false, 4>)
             : k == 1 ? ln_hw_occupancy(mf_ln_rows_hw_cp_kernel<LPR, LN_HWCP_U, LN_HWCP_S, 4>)
                      : ln_hw_occupancy(mf_ln_rows_hw_bulk_kernel<LPR, LN_HWB_RB, BS, 4>);
  const int64_t cap = (int64_t)mf_sm_count() * occ[k];
  if (k == 0)
    mf_ln_rows_hw_kernel<LPR, LN_HW_U, true, false, 4>
        <<<mf_ln_hw_blocks(rows, LPR, LN_HW_U, cap), MF_LN_HW_THREADS, 0, s>>>(
            y, mean, rstd, x, gamma, beta, rows, mode, use_saved);
  else if (k == 1)
    mf_ln_rows_hw_cp_kernel<LPR, LN_HWCP_U, LN_HWCP_S, 4>
        <<<mf_ln_hw_blocks(rows, LPR, LN_HWCP_U, cap), MF_LN_HW_THREADS, 0, s>>>(
            y, mean, rstd, x, gamma, beta, rows, mode, use_saved);
  else
    mf_ln_rows_hw_bulk_kernel<LPR, LN_HWB_RB, BS, 4>
        <<<mf_ln_hw_bulk_blocks(rows, LN_HWB_RB, cap), MF_LN_HW_THREADS, 0, s>>>(
            y, mean, rstd, x, gamma, beta, rows, mode, use_saved);
}

/* dgamma/dbeta (C) += Σ over parts, in order. */
/* dγ/dβ from the per-block partials part (parts, 2C), in two deterministic stages (the
 * summation order depends only on parts and C, never on scheduling, and nothing is atomic):
 *   stage 1: the parts are cut into G equal chunks; block (x, g) sums chunk g for 32
 *            columns, 8 threads per column striding through the chunk in order, then the 8
 *            in order, and writes the chunk's sum over the chunk's FIRST row (which no other
 *            block reads);
 *   stage 2: one thread per column adds the G chunk sums in order into dγ / dβ.
 * A one-pass reduction with a thread per column walking all parts was latency-bound
 * (≈ 77 µs per call at N = 768 on an H200, 4 % of a Pairformer block). */
#define LN_RED_COLS 32
#define LN_RED_ROWS 8
#define LN_RED_MAX_CHUNKS 128
static int ln_red_chunks(int parts) {
  int g = (parts + 15) / 16; /* at least 16 parts per chunk */
  return g < 1 ? 1 : (g > LN_RED_MAX_CHUNKS ? LN_RED_MAX_CHUNKS : g);
}

static __global__ void ln_param_reduce_stage1_kernel(float *__restrict__ part, int parts, int C,
                                                     int chunk) {
  __shared__ float acc[LN_RED_ROWS][LN_RED_COLS];
  const int j = blockIdx.x * LN_RED_COLS + threadIdx.x;
  const int p0 = blockIdx.y * chunk, p1 = min(parts, p0 + chunk);
  float s = 0.0f;
  if (j < 2 * C)
    for (int p = p0 + (int)threadIdx.y; p < p1; p += LN_RED_ROWS) s += part[(int64_t)p * 2 * C + j];
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < 2 * C && p0 < p1) {
    float t = 0.0f;
#pragma unroll
    for (int r = 0; r < LN_RED_ROWS; r++) t += acc[r][threadIdx.x];
    part[(int64_t)p0 * 2 * C + j] = t;
  }
}

static __global__ void ln_param_reduce_stage2_kernel(float *__restrict__ dgamma,
                                                     float *__restrict__ dbeta,
                                                     const float *__restrict__ part, int parts,
                                                     int C, int chunk) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= 2 * C) return;
  float s = 0.0f;
  for (int p = 0; p < parts; p += chunk) s += part[(int64_t)p * 2 * C + j];
  if (j < C) {
    if (dgamma) dgamma[j] += s;
  } else if (dbeta) {
    dbeta[j - C] += s;
  }
}

#define LN_DISPATCH_V(V_, CG_, launch)                                   \
  do {                                                                   \
    if (C == 32 * V_) { const bool CG_ = true; launch; }                 \
    else { const bool CG_ = false; launch; }                             \
  } while (0)
#define LN_DISPATCH(V_, CG_, launch)                                     \
  do {                                                                   \
    if (C <= 32) { const int V_ = 1; { const bool CG_ = false; launch; } } \
    else if (C <= 64) { const int V_ = 2; LN_DISPATCH_V(V_, CG_, launch); } \
    else if (C <= 128) { const int V_ = 4; LN_DISPATCH_V(V_, CG_, launch); } \
    else if (C <= 256) { const int V_ = 8; LN_DISPATCH_V(V_, CG_, launch); } \
    else if (C <= 384) { const int V_ = 12; LN_DISPATCH_V(V_, CG_, launch); } \
    else if (C <= 512) { const int V_ = 16; LN_DISPATCH_V(V_, CG_, launch); } \
    else { const int V_ = 32; LN_DISPATCH_V(V_, CG_, launch); }          \
  } while (0)

static void launch_ln_rows(bf16 *y, float *mean, float *rstd, const bf16 *x, const bf16 *gamma,
                           const bf16 *beta, int64_t rows, int C, mf_ln_mode mode, int use_saved,
                           cudaStream_t s) {
  if (rows <= 0) return;
  const int threads = LN_ROWS_PER_BLOCK * MF_WARP_SIZE;
  if (ln_hw_ok(C, y, x)) { /* variants 2–4: the half-warp kernels */
    if (C == 128)
      ln_rows_hw_launch<16>(y, mean, rstd, x, gamma, beta, rows, (int)mode, use_saved, s);
    else if (C == 64)
      ln_rows_hw_launch<8>(y, mean, rstd, x, gamma, beta, rows, (int)mode, use_saved, s);
    else
      ln_rows_hw_launch<32>(y, mean, rstd, x, gamma, beta, rows, (int)mode, use_saved, s);
  } else if (ln_vec_ok(C, y, x, x)) { /* the vectorised persistent kernel */
    if (C == 128)
      ln_rows_vec_launch<4, LN_VEC_RPW>(y, mean, rstd, x, gamma, beta, rows, C, (int)mode, use_saved, s);
    else if (C == 64)
      ln_rows_vec_launch<2, LN_VEC_RPW>(y, mean, rstd, x, gamma, beta, rows, C, (int)mode, use_saved, s);
    else
      ln_rows_vec_launch<8, 4>(y, mean, rstd, x, gamma, beta, rows, C, (int)mode, use_saved, s);
  } else if (C <= 256) { /* 4 rows per warp */
    const unsigned blocks = mf_cdiv(rows, LN_ROWS_PER_BLOCK * 4);
    LN_DISPATCH(V, CG, (ln_rows_kernel<V, CG, 4><<<blocks, threads, 0, s>>>(
                           y, mean, rstd, x, gamma, beta, rows, C, (int)mode, use_saved)));
  } else {
    const unsigned blocks = mf_cdiv(rows, LN_ROWS_PER_BLOCK);
    LN_DISPATCH(V, CG, (ln_rows_kernel<V, CG, 1><<<blocks, threads, 0, s>>>(
                           y, mean, rstd, x, gamma, beta, rows, C, (int)mode, use_saved)));
  }
  MF_CHECK_LAUNCH();
}

static void check_ln(int C, mf_ln_mode mode, const bf16 *gamma, const bf16 *beta) {
  MF_ASSERT(C > 0 && C <= 1024, "LayerNorm C=%d must be in 1..1024", C);
  MF_ASSERT(mode == MF_LN_FULL || mode == MF_LN_SCALE || mode == MF_LN_NONE,
            "LayerNorm mode %d is not FULL, SCALE or NONE", (int)mode);
  MF_ASSERT(mode == MF_LN_NONE || gamma, "LayerNorm: gamma required");
  MF_ASSERT(mode != MF_LN_FULL || beta, "LayerNorm: beta required");
}

extern "C" void mf_ln_rows_cuda(bf16 *y, float *mean, float *rstd, const bf16 *x,
                                const bf16 *gamma, const bf16 *beta, int64_t rows, int C,
                                mf_ln_mode mode, int use_saved, cudaStream_t stream) {
  check_ln(C, mode, gamma, beta);
  MF_ASSERT(!use_saved || (mean && rstd), "mf_ln_rows_cuda: saved statistics required");
  launch_ln_rows(y, mean, rstd, x, gamma, beta, rows, C, mode, use_saved, stream);
}

extern "C" int mf_ln_rows_backward_parts(int64_t rows) {
  int64_t b = (rows + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK;
  if (b < 1) b = 1;
  return (int)(b < LN_BWD_MAX_BLOCKS ? b : LN_BWD_MAX_BLOCKS);
}

template <int V, bool CG>
static void ln_rows_bwd_launch(unsigned blocks, int threads, size_t smem, cudaStream_t s, bf16 *dx,
                               float *part, const float *dy, const bf16 *x, const float *mean,
                               const float *rstd, const bf16 *gamma, int64_t rows, int C, int mode,
                               int accumulate) {
  if (smem > 48 * 1024) /* C > 768: opt in to more than the default dynamic shared memory */
    MF_CHECK_CUDA(cudaFuncSetAttribute(ln_rows_bwd_kernel<V, CG>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  ln_rows_bwd_kernel<V, CG><<<blocks, threads, smem, s>>>(dx, part, dy, x, mean, rstd, gamma, rows,
                                                          C, mode, accumulate);
}

static void launch_ln_rows_bwd(bf16 *dx, float *part, const float *dy, const bf16 *x,
                               const float *mean, const float *rstd, const bf16 *gamma,
                               int64_t rows, int C, mf_ln_mode mode, int accumulate,
                               cudaStream_t s) {
  const int threads = LN_ROWS_PER_BLOCK * MF_WARP_SIZE;
  const unsigned blocks = (unsigned)mf_ln_rows_backward_parts(rows);
  const size_t smem = (size_t)LN_ROWS_PER_BLOCK * 2 * C * sizeof(float);
  if (ln_vec_ok(C, dx, x, x) && C <= 128 && ((uintptr_t)dy & 15) == 0) { /* vectorised */
    if (C == 128)
      ln_rows_bwd_vec_kernel<4, LN_VEC_BWD_RB><<<blocks, threads, smem, s>>>(
          dx, part, dy, x, mean, rstd, gamma, rows, C, (int)mode, accumulate);
    else
      ln_rows_bwd_vec_kernel<2, LN_VEC_BWD_RB><<<blocks, threads, smem, s>>>(
          dx, part, dy, x, mean, rstd, gamma, rows, C, (int)mode, accumulate);
  } else {
    LN_DISPATCH(V, CG, (ln_rows_bwd_launch<V, CG>(blocks, threads, smem, s, dx, part, dy, x, mean,
                                                   rstd, gamma, rows, C, (int)mode, accumulate)));
  }
  MF_CHECK_LAUNCH();
}

extern "C" void mf_ln_rows_backward_cuda(bf16 *dx, float *part, const float *dy, const bf16 *x,
                                         const float *mean, const float *rstd,
                                         const bf16 *gamma, int64_t rows, int C,
                                         mf_ln_mode mode, int accumulate, cudaStream_t stream) {
  check_ln(C, mode, gamma, gamma);
  launch_ln_rows_bwd(dx, part, dy, x, mean, rstd, gamma, rows, C, mode, accumulate, stream);
}

/* One launch for up to LN_RED_ONE_MAX partial rows (every caller's count: row kernels stop at
 * LN_BWD_MAX_BLOCKS, the wgmma kernels at one row per CTA): a block per 32 columns, its
 * LN_RED_ONE_ROWS row lanes each summing every LN_RED_ONE_ROWS-th part in order, then the
 * lanes in order into dgamma / dbeta. Half the launches of the two-stage reduce, which stays
 * for larger counts (26 of these per Pairformer block step: dev/cuda/README.md). */
#define LN_RED_ONE_ROWS 32
#define LN_RED_ONE_MAX 4096
static __global__ void ln_param_reduce_one_kernel(float *__restrict__ dgamma, float *__restrict__ dbeta,
                                                  const float *__restrict__ part, int parts, int C) {
  __shared__ float acc[LN_RED_ONE_ROWS][LN_RED_COLS + 1];
  const int j = blockIdx.x * LN_RED_COLS + threadIdx.x;
  float s = 0.0f;
  if (j < 2 * C)
    for (int p = (int)threadIdx.y; p < parts; p += LN_RED_ONE_ROWS) s += part[(int64_t)p * 2 * C + j];
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || j >= 2 * C) return;
  float t = 0.0f;
#pragma unroll
  for (int r = 0; r < LN_RED_ONE_ROWS; r++) t += acc[r][threadIdx.x];
  if (j < C) {
    if (dgamma) dgamma[j] += t;
  } else if (dbeta) {
    dbeta[j - C] += t;
  }
}

extern "C" void mf_ln_param_grad_reduce_cuda(float *dgamma, float *dbeta, float *part,
                                             int parts, int C, cudaStream_t stream) {
  /* parts = 0: nothing to add (and chunk below would be 0: a division by zero) */
  if ((!dgamma && !dbeta) || parts <= 0) return;
  if (parts <= LN_RED_ONE_MAX) {
    ln_param_reduce_one_kernel<<<mf_cdiv(2 * C, LN_RED_COLS), dim3(LN_RED_COLS, LN_RED_ONE_ROWS), 0, stream>>>(
        dgamma, dbeta, part, parts, C);
    MF_CHECK_LAUNCH();
    return;
  }
  const int G = ln_red_chunks(parts), chunk = (parts + G - 1) / G;
  dim3 grid(mf_cdiv(2 * C, LN_RED_COLS), (unsigned)((parts + chunk - 1) / chunk));
  ln_param_reduce_stage1_kernel<<<grid, dim3(LN_RED_COLS, LN_RED_ROWS), 0, stream>>>(part, parts,
                                                                                   C, chunk);
  MF_CHECK_LAUNCH();
  ln_param_reduce_stage2_kernel<<<mf_cdiv(2 * C, 128), 128, 0, stream>>>(dgamma, dbeta, part,
                                                                         parts, C, chunk);
  MF_CHECK_LAUNCH();
}

/* ================================================================ epilogues */

/* The elementwise epilogues below take VEC = 8 consecutive columns per thread when the
 * width is a multiple of 8 (16-byte accesses), else VEC = 1. */

/* out (rows, O) bf16 = acc (rows, O) fp32 + bias (O). */
template <int VEC>
static __global__ void bias_epilogue_kernel(bf16 *__restrict__ out, const float *__restrict__ acc,
                                     const bf16 *__restrict__ bias, int64_t rows, int O) {
  const int ov = O / VEC;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * ov;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / ov;
    const int o = (int)(i - r * ov) * VEC;
    float a[VEC], b[VEC];
    mf_ldvf<VEC>(a, acc + r * O + o);
    mf_ldv<VEC>(b, bias + o);
#pragma unroll
    for (int k = 0; k < VEC; k++) a[k] += b[k];
    mf_stv<VEC>(out + r * O + o, a);
  }
}

/* out (rows, O) = mask ⊙ sigmoid(g) ⊙ p from pg (rows, 2O) = [p | g]; mask (rows) or NULL. */
template <int VEC>
static __global__ void gate_epilogue_kernel(bf16 *__restrict__ out, const bf16 *__restrict__ pg,
                                     const uint8_t *__restrict__ mask, int64_t rows, int O) {
  const int ov = O / VEC;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * ov;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / ov;
    const int o = (int)(i - r * ov) * VEC;
    float p[VEC], g[VEC];
    mf_ldv<VEC>(p, pg + r * 2 * O + o);
    mf_ldv<VEC>(g, pg + r * 2 * O + O + o);
    const bool keep = !mask || mask[r];
#pragma unroll
    for (int k = 0; k < VEC; k++) p[k] = keep ? mf_sigmoidf(g[k]) * p[k] : 0.0f;
    mf_stv<VEC>(out + r * O + o, p);
  }
}

/* In place: pg (rows, 2O) = [p | g] becomes [dp | dg] with dp = d·s, dg = d·p·s(1−s),
 * d = dout ⊙ mask, s = sigmoid(g). */
template <int VEC>
static __global__ void gate_backward_kernel(bf16 *__restrict__ pg, const bf16 *__restrict__ dout,
                                     const uint8_t *__restrict__ mask, int64_t rows, int O) {
  const int ov = O / VEC;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * ov;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / ov;
    const int o = (int)(i - r * ov) * VEC;
    float p[VEC], g[VEC], d[VEC];
    mf_ldv<VEC>(p, pg + r * 2 * O + o);
    mf_ldv<VEC>(g, pg + r * 2 * O + O + o);
    mf_ldv<VEC>(d, dout + r * O + o);
    const bool keep = !mask || mask[r];
#pragma unroll
    for (int k = 0; k < VEC; k++) {
      const float s = mf_sigmoidf(g[k]), dd = keep ? d[k] : 0.0f;
      g[k] = dd * p[k] * s * (1.0f - s);
      p[k] = dd * s;
    }
    mf_stv<VEC>(pg + r * 2 * O + o, p);
    mf_stv<VEC>(pg + r * 2 * O + O + o, g);
  }
}

/* dx (n) bf16 = dy (n) fp32 (the IDENTITY "LayerNorm" backward); n % VEC == 0. */
template <int VEC>
static __global__ void f32_to_bf16_kernel(bf16 *__restrict__ dx, const float *__restrict__ dy, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n / VEC;
       i += (int64_t)gridDim.x * blockDim.x) {
    float v[VEC];
    mf_ldvf<VEC>(v, dy + i * VEC);
    mf_stv<VEC>(dx + i * VEC, v);
  }
}

static __global__ void fill_bf16_kernel(bf16 *__restrict__ x, float v, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] = mf_f32_to_bf16(v);
}

static void launch_bias_epilogue(bf16 *out, const float *acc, const bf16 *bias, int64_t rows, int O,
                                 cudaStream_t s) {
  if (O % 8 == 0)
    bias_epilogue_kernel<8><<<mf_ew_blocks(rows * O / 8), 256, 0, s>>>(out, acc, bias, rows, O);
  else
    bias_epilogue_kernel<1><<<mf_ew_blocks(rows * O), 256, 0, s>>>(out, acc, bias, rows, O);
  MF_CHECK_LAUNCH();
}
static void launch_gate_epilogue(bf16 *out, const bf16 *pg, const uint8_t *mask, int64_t rows,
                                 int O, cudaStream_t s) {
  if (O % 8 == 0)
    gate_epilogue_kernel<8><<<mf_ew_blocks(rows * O / 8), 256, 0, s>>>(out, pg, mask, rows, O);
  else
    gate_epilogue_kernel<1><<<mf_ew_blocks(rows * O), 256, 0, s>>>(out, pg, mask, rows, O);
  MF_CHECK_LAUNCH();
}
static void launch_gate_backward(bf16 *pg, const bf16 *dout, const uint8_t *mask, int64_t rows,
                                 int O, cudaStream_t s) {
  if (O % 8 == 0)
    gate_backward_kernel<8><<<mf_ew_blocks(rows * O / 8), 256, 0, s>>>(pg, dout, mask, rows, O);
  else
    gate_backward_kernel<1><<<mf_ew_blocks(rows * O), 256, 0, s>>>(pg, dout, mask, rows, O);
  MF_CHECK_LAUNCH();
}
extern "C" void mf_f32_to_bf16_cuda(bf16 *dx, const float *dy, int64_t n, cudaStream_t s) {
  if (n % 8 == 0)
    f32_to_bf16_kernel<8><<<mf_ew_blocks(n / 8), 256, 0, s>>>(dx, dy, n);
  else
    f32_to_bf16_kernel<1><<<mf_ew_blocks(n), 256, 0, s>>>(dx, dy, n);
  MF_CHECK_LAUNCH();
}
static void launch_fill_bf16(bf16 *x, float v, int64_t n, cudaStream_t s) {
  fill_bf16_kernel<<<mf_ew_blocks(n), 256, 0, s>>>(x, v, n);
  MF_CHECK_LAUNCH();
}

/* ================================================================ fused LN + GEMM (custom) */

/* Variant 0 of the forward: one kernel per 128-row tile that normalises the rows in
 * registers straight into shared memory (bf16), multiplies them by W tile after W tile
 * with tensor cores (WMMA 16×16×16, bf16 in, fp32 accumulate: the portable tensor-core
 * API, no Hopper-only instructions) and applies the epilogue (bias, the sigmoid gate
 * pairing p column o with g column O + o, or SwiGLU) before one bf16 store — x is read
 * once and out written once, with no staging tensor. Needs C % 64 == 0, C <= 256,
 * O % 64 == 0 and 16-byte aligned pointers. Correct (tests/gpu/test_fusion_gpu.cu) but,
 * as written, SLOWER than variant 1 on an H200 (2026-11-29, M = 384², C = O = 128:
 * 0.123 ms vs 0.067 ms; gated 0.270 vs 0.112): one 137 KB block per SM with its load,
 * LayerNorm, WMMA and epilogue phases serialised by barriers leaves HBM idle most of the
 * time, and W is re-staged every 64 output columns. Variant 2 (ln_gemm.cu: persistent
 * CTAs, W resident, cp.async row tiles, mma.sync with double-buffered fragments) does what
 * this one lacks and is the default; this one is kept for comparison. */
#define FZ_BM 128     /* rows per block */
#define FZ_WARPS 8    /* 16 rows per warp */
#define FZ_PAD 8      /* bf16 padding of a shared-memory row */
#define FZ_OT 64      /* output columns per W tile */

/* 3: 2, with the wgmma kernels (ln_gemm_wg.cu, transition_wg.cu) where supported; 2: the
 * mma.sync kernels of ln_gemm.cu where supported (else 1); 1: staging + cuBLAS; 0: the
 * WMMA kernel above (else 1). */
static int g_lnl_variant = 3;

extern "C" int mf_ln_linear_cuda_set_variant(int variant) {
  int old = g_lnl_variant;
  g_lnl_variant = variant;
  return old;
}

extern "C" int mf_ln_linear_cuda_get_variant(void) { return g_lnl_variant; }

static size_t fz_smem(int C, int gated) { /* gated: 0, 1 or 2 */
  const int lda = C + FZ_PAD, bn = gated ? 2 * FZ_OT : FZ_OT;
  return (size_t)(FZ_BM + bn) * lda * sizeof(bf16) + (size_t)FZ_BM * (bn + 4) * sizeof(float);
}

extern "C" int mf_ln_gemm_fused_supported(int C, int O, mf_ln_mode mode, const void *x,
                                          const void *out, const void *w) {
  return g_lnl_variant == 0 && C % 64 == 0 && C <= 256 && O % FZ_OT == 0 &&
         mode != MF_LN_IDENTITY && ((uintptr_t)x % 16) == 0 && ((uintptr_t)out % 16) == 0 &&
         ((uintptr_t)w % 16) == 0;
}

/* out (M, O) = epilogue(LN(x (M, C))·Wᵀ); mean, rstd (M) written. W: plain (O, C) and
 * out = acc + bias; GATED = 1: W (2O, C) = [W_p; W_g] and out = mask ⊙ σ(g) ⊙ p;
 * GATED = 2 (SwiGLU): W (2O, C) = [W_a; W_b] and out = silu(a) ⊙ b. V = C / 32. */
template <int V, int GATED>
static __global__ void __launch_bounds__(FZ_WARPS * 32)
ln_gemm_fused_kernel(bf16 *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
                     const bf16 *__restrict__ x, const bf16 *__restrict__ gamma,
                     const bf16 *__restrict__ beta, const bf16 *__restrict__ w,
                     const bf16 *__restrict__ bias, const uint8_t *__restrict__ mask, int64_t M,
                     int O, int mode) {
  using namespace nvcuda;
  constexpr int C = 32 * V, BN = GATED ? 2 * FZ_OT : FZ_OT, NF = BN / 16;
  constexpr int lda = C + FZ_PAD, ldo = BN + 4;
  extern __shared__ __align__(128) unsigned char fz_smem_raw[];
  bf16 *sa = (bf16 *)fz_smem_raw;           /* (FZ_BM, lda) normalised rows */
  bf16 *sw = sa + FZ_BM * lda;              /* (BN, lda) W tile, rows = output columns */
  float *so = (float *)(sw + BN * lda);     /* (FZ_BM, ldo) fp32 accumulators */
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t m0 = (int64_t)blockIdx.x * FZ_BM;

  /* 1. LayerNorm, one warp per row, into sa */
  for (int rr = warp; rr < FZ_BM; rr += FZ_WARPS) {
    const int64_t r = m0 + rr;
    __nv_bfloat162 *dst = (__nv_bfloat162 *)(sa + rr * lda + lane * V);
    if (r >= M) {
#pragma unroll
      for (int i = 0; i < V; i += 2) dst[i / 2] = __floats2bfloat162_rn(0.0f, 0.0f);
      continue;
    }
    float v[V];
    mf_row_load_bf16<V, true>(v, x + r * C, lane, C);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < V; i++) s += v[i];
    const float mu = mf_warp_sum(s) / (float)C;
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < V; i++) q += (v[i] - mu) * (v[i] - mu);
    const float rs = 1.0f / sqrtf(mf_warp_sum(q) / (float)C + (float)MF_LN_EPS);
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
#pragma unroll
    for (int i = 0; i < V; i++) {
      const int c = lane * V + i;
      float t = (v[i] - mu) * rs;
      if (mode != MF_LN_NONE) t *= mf_bf16_to_f32(gamma[c]);
      if (mode == MF_LN_FULL) t += mf_bf16_to_f32(beta[c]);
      v[i] = t;
    }
#pragma unroll
    for (int i = 0; i < V; i += 2) dst[i / 2] = __floats2bfloat162_rn(v[i], v[i + 1]);
  }

  for (int o0 = 0; o0 < O; o0 += FZ_OT) {
    /* 2. W tile into sw: rows o0.. of W (plain) or of W_p then W_g (gated) */
    for (int idx = threadIdx.x; idx < BN * (C / 8); idx += blockDim.x) {
      const int n = idx / (C / 8), k8 = (idx - n * (C / 8)) * 8;
      const int row = GATED ? (n < FZ_OT ? o0 + n : O + o0 + n - FZ_OT) : o0 + n;
      *(uint4 *)(sw + n * lda + k8) = *(const uint4 *)(w + (int64_t)row * C + k8);
    }
    __syncthreads(); /* sa (first tile) and sw ready */
    /* 3. the warp's 16 rows × BN columns on tensor cores */
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[NF];
#pragma unroll
    for (int j = 0; j < NF; j++) wmma::fill_fragment(acc[j], 0.0f);
#pragma unroll
    for (int k = 0; k < C; k += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
      wmma::load_matrix_sync(a, sa + warp * 16 * lda + k, lda);
#pragma unroll
      for (int j = 0; j < NF; j++) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
        wmma::load_matrix_sync(b, sw + j * 16 * lda + k, lda);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < NF; j++)
      wmma::store_matrix_sync(so + warp * 16 * ldo + j * 16, acc[j], ldo, wmma::mem_row_major);
    __syncwarp();
    /* 4. epilogue on the warp's own rows, 8 columns per lane step */
    for (int idx = lane; idx < 16 * (FZ_OT / 8); idx += 32) {
      const int rr = idx / (FZ_OT / 8), c8 = (idx - rr * (FZ_OT / 8)) * 8;
      const int64_t r = m0 + warp * 16 + rr;
      if (r >= M) continue;
      const float *srow = so + (warp * 16 + rr) * ldo;
      float v[8];
      if (GATED == 2) {
#pragma unroll
        for (int k = 0; k < 8; k++) {
          const float a = srow[c8 + k];
          v[k] = a * mf_sigmoidf(a) * srow[FZ_OT + c8 + k];
        }
      } else if (GATED == 1) {
        const bool keep = !mask || mask[r];
#pragma unroll
        for (int k = 0; k < 8; k++)
          v[k] = keep ? mf_sigmoidf(srow[FZ_OT + c8 + k]) * srow[c8 + k] : 0.0f;
      } else {
#pragma unroll
        for (int k = 0; k < 8; k++)
          v[k] = srow[c8 + k] + (bias ? mf_bf16_to_f32(bias[o0 + c8 + k]) : 0.0f);
      }
      mf_stv<8>(out + r * O + o0 + c8, v);
    }
    __syncthreads(); /* every warp is done with sw before the next tile overwrites it */
  }
}

template <int V, int GATED>
static void fz_launch_t(bf16 *out, float *mean, float *rstd, const bf16 *x, const bf16 *gamma,
                        const bf16 *beta, const bf16 *w, const bf16 *bias, const uint8_t *mask,
                        int64_t M, int O, mf_ln_mode mode, cudaStream_t s) {
  const size_t smem = fz_smem(32 * V, GATED);
  MF_CHECK_CUDA(cudaFuncSetAttribute(ln_gemm_fused_kernel<V, GATED>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  ln_gemm_fused_kernel<V, GATED><<<mf_cdiv(M, FZ_BM), FZ_WARPS * 32, smem, s>>>(
      out, mean, rstd, x, gamma, beta, w, bias, mask, M, O, (int)mode);
  MF_CHECK_LAUNCH();
}

static void launch_ln_gemm_fused(bf16 *out, float *mean, float *rstd, const bf16 *x,
                                 const bf16 *gamma, const bf16 *beta, const bf16 *w,
                                 const bf16 *bias, const uint8_t *mask, int64_t M, int C, int O,
                                 mf_ln_mode mode, int gated, cudaStream_t s) {
#define FZ_CASE(V_)                                                                         \
  if (C == 32 * V_) {                                                                       \
    if (gated == 2) fz_launch_t<V_, 2>(out, mean, rstd, x, gamma, beta, w, bias, mask, M, O, mode, s); \
    else if (gated) fz_launch_t<V_, 1>(out, mean, rstd, x, gamma, beta, w, bias, mask, M, O, mode, s); \
    else fz_launch_t<V_, 0>(out, mean, rstd, x, gamma, beta, w, bias, mask, M, O, mode, s);  \
    return;                                                                                 \
  }
  FZ_CASE(2)
  FZ_CASE(4)
  FZ_CASE(6)
  FZ_CASE(8)
#undef FZ_CASE
  MF_FATAL("ln_gemm_fused: unsupported C=%d", C);
}

extern "C" void mf_ln_gemm_fused_cuda(bf16 *out, float *mean, float *rstd, const bf16 *x,
                                      const bf16 *gamma, const bf16 *beta, const bf16 *w,
                                      const bf16 *bias, const uint8_t *mask, int64_t M, int C,
                                      int O, mf_ln_mode mode, int epilogue, cudaStream_t stream) {
  MF_ASSERT(mf_ln_gemm_fused_supported(C, O, mode, x, out, w) && mean && rstd,
            "ln_gemm_fused: unsupported C=%d O=%d mode=%d (or alignment)", C, O, (int)mode);
  check_ln(C, mode, gamma, beta);
  if (M > 0) launch_ln_gemm_fused(out, mean, rstd, x, gamma, beta, w, bias, mask, M, C, O, mode,
                                  epilogue, stream);
}

/* ================================================================ LayerNorm + Linear */

/* The one-kernel forwards, tried in order: variant 3 (ln_gemm_wg.cu's wgmma kernel), variant 2
 * (ln_gemm.cu's MMA kernel), then variant 0
 * (the fused kernel above); gated 0 (bias or NULL) or 1 (mask or NULL). Returns 1 where one of
 * them ran, 0 where neither applies (the caller then takes the chunked path). */
static int ln_gemm_one_kernel(bf16 *out, float *mean, float *rstd, const bf16 *inp,
                              const bf16 *gamma, const bf16 *beta, const bf16 *w,
                              const bf16 *bias, const uint8_t *mask, int64_t M, int C, int O,
                              mf_ln_mode mode, int gated, cudaStream_t stream) {
  if (g_lnl_variant == 3 && mf_ln_gemm_wg_supported(C, O, gated, mode, inp, out, w)) {
    mf_ln_gemm_wg_cuda(out, mean, rstd, inp, gamma, beta, w, bias, mask, M, C, O, mode, gated,
                       stream); /* variant 3: ln_gemm_wg.cu */
    return 1;
  }
  if (g_lnl_variant >= 2 && mf_ln_gemm_mma_supported(C, O, gated, mode, inp, out, w)) {
    mf_ln_gemm_mma_cuda(out, mean, rstd, inp, gamma, beta, w, bias, mask, M, C, O, mode, gated,
                        stream); /* variant 2: ln_gemm.cu */
    return 1;
  }
  if (mf_ln_gemm_fused_supported(C, O, mode, inp, out, w)) { /* variant 0: one fused kernel */
    launch_ln_gemm_fused(out, mean, rstd, inp, gamma, beta, w, bias, mask, M, C, O, mode, gated,
                         stream);
    return 1;
  }
  return 0;
}

typedef struct {
  bf16 *y;     /* (R, C) normalised rows */
  float *acc;  /* (R, O) fp32 GEMM output before the bias (forward with bias) */
  float *dy;   /* (R, C) fp32 gradient of y (backward) */
  bf16 *ones;  /* (R) ones, for dbias = 1ᵀ·dout as a GEMM (backward with dbias) */
  float *part; /* (LN_BWD_MAX_BLOCKS, 2C) LayerNorm partials */
  float *wpart; /* the wgmma backward's partials (mf_ln_linear_bwd_wg_workspace bytes) */
  size_t wpart_bytes;
} lnl_ws;

static int64_t lnl_chunk(int64_t M, int C, int O) {
  return mf_fusion_chunk_rows(M, (size_t)C * 6 + (size_t)O * 4);
}

static size_t lnl_carve(lnl_ws *w, void *base, int64_t M, int C, int O) {
  const int64_t R = lnl_chunk(M, C, O);
  mf_carver cv = {(char *)base, 0};
  w->y = (bf16 *)mf_carve(&cv, (size_t)R * C * sizeof(bf16));
  w->acc = (float *)mf_carve(&cv, (size_t)R * O * sizeof(float));
  w->dy = (float *)mf_carve(&cv, (size_t)R * C * sizeof(float));
  w->ones = (bf16 *)mf_carve(&cv, (size_t)R * sizeof(bf16));
  w->part = (float *)mf_carve(&cv, (size_t)LN_BWD_MAX_BLOCKS * 2 * C * sizeof(float));
  w->wpart_bytes = mf_ln_linear_bwd_wg_workspace(C, O);
  w->wpart = (float *)mf_carve(&cv, w->wpart_bytes);
  return cv.used;
}

extern "C" size_t mf_ln_linear_cuda_workspace(int64_t M, int C, int O, int has_bias) {
  (void)has_bias;
  lnl_ws w;
  return lnl_carve(&w, NULL, M, C, O);
}

extern "C" void mf_ln_linear_forward_cuda(bf16 *out, float *mean, float *rstd, const bf16 *inp,
                                          const bf16 *gamma, const bf16 *beta,
                                          const bf16 *weight, const bf16 *bias, int64_t M, int C,
                                          int O, mf_ln_mode mode, void *ws, size_t ws_bytes,
                                          const mf_cuda_blas *blas, cudaStream_t stream) {
  check_ln(C, mode, gamma, beta);
  MF_ASSERT(M >= 0 && O > 0, "ln_linear_cuda dims M=%lld O=%d", (long long)M, O);
  MF_ASSERT(out && mean && rstd && inp && weight, "ln_linear_cuda: NULL argument");
  if (M == 0) return;
  if (ln_gemm_one_kernel(out, mean, rstd, inp, gamma, beta, weight, bias, NULL, M, C, O, mode, 0,
                         stream))
    return;
  lnl_ws w;
  MF_ASSERT(lnl_carve(&w, NULL, M, C, O) <= ws_bytes, "ln_linear_cuda: workspace too small");
  lnl_carve(&w, ws, M, C, O);
  const int64_t R = lnl_chunk(M, C, O);
  for (int64_t r0 = 0; r0 < M; r0 += R) {
    const int64_t rows = M - r0 < R ? M - r0 : R;
    launch_ln_rows(w.y, mean + r0, rstd + r0, inp + r0 * C, gamma, beta, rows, C, mode, 0, stream);
    if (bias) {
      mf_gemm_rm_cuda(blas, stream, 0, 1, rows, O, C, 1.0f, w.y, C, weight, C, 0.0f, w.acc,
                      MF_GEMM_OUT_F32, O);
      launch_bias_epilogue(out + r0 * O, w.acc, bias, rows, O, stream);
    } else {
      mf_gemm_rm_cuda(blas, stream, 0, 1, rows, O, C, 1.0f, w.y, C, weight, C, 0.0f,
                      out + r0 * O, MF_GEMM_OUT_BF16, O);
    }
  }
}

extern "C" void mf_ln_linear_backward_cuda(bf16 *dinp, float *dgamma, float *dbeta,
                                           float *dweight, float *dbias, const bf16 *dout,
                                           const float *mean, const float *rstd,
                                           const bf16 *inp, const bf16 *gamma, const bf16 *beta,
                                           const bf16 *weight, int64_t M, int C, int O,
                                           mf_ln_mode mode, void *ws, size_t ws_bytes,
                                           const mf_cuda_blas *blas, cudaStream_t stream) {
  check_ln(C, mode, gamma, beta);
  MF_ASSERT(M >= 0 && O > 0, "ln_linear_cuda dims M=%lld O=%d", (long long)M, O);
  if (M == 0) return;
  if (mode == MF_LN_NONE) dgamma = NULL;
  if (mode != MF_LN_FULL) dbeta = NULL;
  const int need_dy = dinp || dgamma || dbeta;
  lnl_ws w;
  MF_ASSERT(lnl_carve(&w, NULL, M, C, O) <= ws_bytes, "ln_linear_cuda: workspace too small");
  lnl_carve(&w, ws, M, C, O);
  /* opt-in (configuration 7, not yet the default): the whole backward as one wgmma kernel */
  if (mf_ln_gemm_bwd_wg(MF_LGB_LINEAR) &&
      mf_ln_linear_bwd_wg_supported(C, O, mode, inp, dout, weight, dinp)) {
    mf_ln_linear_bwd_wg_cuda(dinp, dgamma, dbeta, dweight, dbias, w.wpart, w.wpart_bytes, dout,
                             mean, rstd, inp, gamma, beta, weight, M, C, O, mode, stream);
    return;
  }
  const int64_t R = lnl_chunk(M, C, O);
  /* opt-in (off by default: measured slower): the fused kernel of ln_gemm_bwd_cuda.h —
   * y, dy = dout·W and the LN backward on chip */
  const int fused = need_dy && mf_ln_gemm_bwd_supported(MF_LGB_LINEAR, C, O, mode, inp, dout,
                                                        weight, dinp);
  if (dbias) launch_fill_bf16(w.ones, 1.0f, R, stream);
  for (int64_t r0 = 0; r0 < M; r0 += R) {
    const int64_t rows = M - r0 < R ? M - r0 : R;
    const bf16 *dout_c = dout + r0 * O; /* (rows, O) */
    /* out = y·Wᵀ + b  ⇒  dbias += 1ᵀ·dout, dweight += doutᵀ·y, dy = dout·W */
    if (dbias)
      mf_gemm_rm_cuda(blas, stream, 0, 0, 1, O, rows, 1.0f, w.ones, rows, dout_c, O, 1.0f, dbias,
                      MF_GEMM_OUT_F32, O);
    if (fused) {
      const int parts = mf_ln_gemm_bwd_cuda(
          MF_LGB_LINEAR, dinp ? dinp + r0 * C : NULL, 0, (dgamma || dbeta) ? w.part : NULL,
          dweight ? w.y : NULL, NULL, NULL, NULL, dout_c, mean + r0, rstd + r0, inp + r0 * C,
          gamma, beta, weight, NULL, NULL, rows, C, O, mode, stream);
      if (dweight)
        mf_gemm_rm_cuda(blas, stream, 1, 0, O, C, rows, 1.0f, dout_c, O, w.y, C, 1.0f, dweight,
                        MF_GEMM_OUT_F32, C);
      mf_ln_param_grad_reduce_cuda(dgamma, dbeta, w.part, parts, C, stream);
      continue;
    }
    if (dweight) {
      launch_ln_rows(w.y, (float *)mean + r0, (float *)rstd + r0, inp + r0 * C, gamma, beta,
                     rows, C, mode, 1, stream);
      mf_gemm_rm_cuda(blas, stream, 1, 0, O, C, rows, 1.0f, dout_c, O, w.y, C, 1.0f, dweight,
                      MF_GEMM_OUT_F32, C);
    }
    if (!need_dy) continue;
    mf_gemm_rm_cuda(blas, stream, 0, 0, rows, C, O, 1.0f, dout_c, O, weight, C, 0.0f, w.dy,
                    MF_GEMM_OUT_F32, C);
    /* y = LN(inp) */
    launch_ln_rows_bwd(dinp ? dinp + r0 * C : NULL, w.part, w.dy, inp + r0 * C, mean + r0,
                       rstd + r0, gamma, rows, C, mode, 0, stream);
    mf_ln_param_grad_reduce_cuda(dgamma, dbeta, w.part, mf_ln_rows_backward_parts(rows), C,
                                 stream);
  }
}

/* ================================================================ gated projection */

typedef struct {
  bf16 *y;     /* (R, C) normalised rows */
  bf16 *pg;    /* (R, 2O) [p | g], then [dp | dg] */
  float *dy;   /* (R, C) fp32 gradient of y */
  float *part; /* (LN_BWD_MAX_BLOCKS, 2C) */
} gl_ws;

/* Rows per chunk: the staging path keeps y, [p | g] and the fp32 dy of a chunk; the fused
 * backward (ln_gemm_bwd_cuda.h) only y and [dp | dg], so it takes one chunk where the
 * staging path would take two (M = 768²) — one kernel tail and one dW GEMM fewer. */
static int64_t gl_chunk(int64_t M, int C, int O, int fused) {
  return mf_fusion_chunk_rows(M, (size_t)C * (fused ? 2 : 6) + (size_t)O * 4);
}

static size_t gl_carve(gl_ws *w, void *base, int64_t M, int C, int O, int fused) {
  const int64_t R = gl_chunk(M, C, O, fused);
  mf_carver cv = {(char *)base, 0};
  w->y = (bf16 *)mf_carve(&cv, (size_t)R * C * sizeof(bf16));
  w->pg = (bf16 *)mf_carve(&cv, (size_t)R * 2 * O * sizeof(bf16));
  w->dy = fused ? NULL : (float *)mf_carve(&cv, (size_t)R * C * sizeof(float));
  w->part = (float *)mf_carve(&cv, (size_t)LN_BWD_MAX_BLOCKS * 2 * C * sizeof(float));
  return cv.used;
}

extern "C" size_t mf_gated_linear_cuda_workspace(int64_t M, int C, int O) {
  gl_ws w;
  const size_t a = gl_carve(&w, NULL, M, C, O, 0), b = gl_carve(&w, NULL, M, C, O, 1);
  return a > b ? a : b;
}

static void check_gl(int64_t M, int C, int O, mf_ln_mode mode, const bf16 *gamma, const bf16 *beta) {
  MF_ASSERT(M >= 0 && C > 0 && O > 0, "gated_linear_cuda dims M=%lld C=%d O=%d", (long long)M, C, O);
  if (mode != MF_LN_IDENTITY) check_ln(C, mode, gamma, beta);
}

extern "C" void mf_gated_linear_forward_cuda(bf16 *out, float *mean, float *rstd, const bf16 *inp,
                                             const bf16 *gamma, const bf16 *beta,
                                             const bf16 *w_pg, const uint8_t *mask, int64_t M,
                                             int C, int O, mf_ln_mode mode, void *ws,
                                             size_t ws_bytes, const mf_cuda_blas *blas,
                                             cudaStream_t stream) {
  check_gl(M, C, O, mode, gamma, beta);
  if (M == 0) return;
  const int ident = mode == MF_LN_IDENTITY;
  MF_ASSERT(ident || (mean && rstd), "gated_linear_cuda: mean/rstd required");
  if (ln_gemm_one_kernel(out, mean, rstd, inp, gamma, beta, w_pg, NULL, mask, M, C, O, mode, 1,
                         stream))
    return;
  gl_ws w;
  MF_ASSERT(gl_carve(&w, NULL, M, C, O, 0) <= ws_bytes, "gated_linear_cuda: workspace too small");
  gl_carve(&w, ws, M, C, O, 0);
  const int64_t R = gl_chunk(M, C, O, 0);
  for (int64_t r0 = 0; r0 < M; r0 += R) {
    const int64_t rows = M - r0 < R ? M - r0 : R;
    const bf16 *y = inp + r0 * C;
    if (!ident) {
      launch_ln_rows(w.y, mean + r0, rstd + r0, y, gamma, beta, rows, C, mode, 0, stream);
      y = w.y;
    }
    /* [p | g] (rows, 2O) = y·w_pgᵀ: one GEMM for both projections */
    mf_gemm_rm_cuda(blas, stream, 0, 1, rows, 2 * O, C, 1.0f, y, C, w_pg, C, 0.0f, w.pg,
                    MF_GEMM_OUT_BF16, 2 * O);
    launch_gate_epilogue(out + r0 * O, w.pg, mask ? mask + r0 : NULL, rows, O, stream);
  }
}

extern "C" void mf_gated_linear_backward_cuda(bf16 *dinp, float *dgamma, float *dbeta,
                                              float *dw_pg, const bf16 *dout, const float *mean,
                                              const float *rstd, const bf16 *inp,
                                              const bf16 *gamma, const bf16 *beta,
                                              const bf16 *w_pg, const uint8_t *mask, int64_t M,
                                              int C, int O, mf_ln_mode mode, void *ws,
                                              size_t ws_bytes, const mf_cuda_blas *blas,
                                              cudaStream_t stream) {
  check_gl(M, C, O, mode, gamma, beta);
  if (M == 0) return;
  const int ident = mode == MF_LN_IDENTITY;
  if (mode == MF_LN_NONE || ident) dgamma = NULL;
  if (mode != MF_LN_FULL) dbeta = NULL;
  const int need_dy = dinp || dgamma || dbeta;
  /* the fused kernel of ln_gemm_bwd_cuda.h where it applies — y, [p | g], [dp | dg], dy
   * and the LN backward on chip; it writes y and [dp | dg] for the dw_pg GEMM */
  const int fused = !ident && (need_dy || dw_pg) &&
                    mf_ln_gemm_bwd_supported(MF_LGB_GATED, C, O, mode, inp, dout, w_pg, dinp);
  gl_ws w;
  MF_ASSERT(gl_carve(&w, NULL, M, C, O, fused) <= ws_bytes, "gated_linear_cuda: workspace too small");
  gl_carve(&w, ws, M, C, O, fused);
  const int64_t R = gl_chunk(M, C, O, fused);
  for (int64_t r0 = 0; r0 < M; r0 += R) {
    const int64_t rows = M - r0 < R ? M - r0 : R;
    const bf16 *y = inp + r0 * C;
    if (fused) {
      const int parts = mf_ln_gemm_bwd_cuda(
          MF_LGB_GATED, dinp ? dinp + r0 * C : NULL, 0, (dgamma || dbeta) ? w.part : NULL,
          dw_pg ? w.y : NULL, dw_pg ? w.pg : NULL, NULL, NULL, dout + r0 * O, mean + r0,
          rstd + r0, inp + r0 * C, gamma, beta, w_pg, NULL, mask ? mask + r0 : NULL, rows, C, O,
          mode, stream);
      if (dw_pg)
        mf_gemm_rm_cuda(blas, stream, 1, 0, 2 * O, C, rows, 1.0f, w.pg, 2 * O, w.y, C, 1.0f,
                        dw_pg, MF_GEMM_OUT_F32, C);
      mf_ln_param_grad_reduce_cuda(dgamma, dbeta, w.part, parts, C, stream);
      continue;
    }
    if (!ident) {
      launch_ln_rows(w.y, (float *)mean + r0, (float *)rstd + r0, y, gamma, beta, rows, C, mode,
                     1, stream);
      y = w.y;
    }
    mf_gemm_rm_cuda(blas, stream, 0, 1, rows, 2 * O, C, 1.0f, y, C, w_pg, C, 0.0f, w.pg,
                    MF_GEMM_OUT_BF16, 2 * O);
    launch_gate_backward(w.pg, dout + r0 * O, mask ? mask + r0 : NULL, rows, O, stream);
    /* [p | g] = y·w_pgᵀ  ⇒  dw_pg += [dp | dg]ᵀ·y,  dy = [dp | dg]·w_pg */
    if (dw_pg)
      mf_gemm_rm_cuda(blas, stream, 1, 0, 2 * O, C, rows, 1.0f, w.pg, 2 * O, y, C, 1.0f, dw_pg,
                      MF_GEMM_OUT_F32, C);
    if (!need_dy) continue;
    mf_gemm_rm_cuda(blas, stream, 0, 0, rows, C, 2 * O, 1.0f, w.pg, 2 * O, w_pg, C, 0.0f, w.dy,
                    MF_GEMM_OUT_F32, C);
    if (ident) {
      if (dinp) mf_f32_to_bf16_cuda(dinp + r0 * C, w.dy, rows * C, stream);
      continue;
    }
    launch_ln_rows_bwd(dinp ? dinp + r0 * C : NULL, w.part, w.dy, inp + r0 * C, mean + r0,
                       rstd + r0, gamma, rows, C, mode, 0, stream);
    mf_ln_param_grad_reduce_cuda(dgamma, dbeta, w.part, mf_ln_rows_backward_parts(rows), C,
                                 stream);
  }
}
