/* ln_tile.cuh — the row-tile pieces shared by EvoFusion's fused forward kernels
 * (ln_gemm.cu: mma.sync; ln_gemm_wg.cu, transition_wg.cu: wgmma): the 16-byte cp.async, a
 * warp-uniform warp index, LayerNorm of a 128-row tile in shared memory (lg_ln_tile: lane
 * pairs, x̂ into a padded tile or into the swizzled wgmma operand layout; lg_ln_tile_v:
 * 16-byte lanes, the swizzled layout only), the per-lane γ/β and the cp.async load of a raw
 * row tile. Not a public header; C code never includes it. */
#ifndef MF_OPS_CUDA_LN_TILE_CUH
#define MF_OPS_CUDA_LN_TILE_CUH

#include "fusion_util.cuh"
#include "ops/layernorm.h"
#include "wgmma_ptx.cuh"

#define LG_BM 128 /* rows per tile */

static __device__ __forceinline__ void lg_cp16(void *smem, const void *gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(mf_smem_u32(smem)), "l"(gmem)
               : "memory");
}

/* The warp index as a value the compiler knows to be warp-uniform. */
static __device__ __forceinline__ int lg_warp_id(void) {
  return __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 5), 0);
}

/* Rows 16·warp .. 16·warp + 15 of the raw tile xs (LG_BM, C) (rows m0 + r of x) into
 * xa (LG_BM, C + 8) as bf16 x̂ (SWZ: into the wgmma operand layout of wgmma_ptx.cuh, C/64
 * blocks of LG_BM rows); mean, rstd written for rows < M (not for IDENTITY). Lane
 * channels are pairs strided by 64 (c = 64·i + 2·lane): conflict-free shared accesses.
 * RG rows at a time, so that their warp reductions interleave (latency, not throughput,
 * bounds a lone row's shuffles). Rows ≥ M become zeros (never stored downstream).
 * g, bb: γ, β of the lane's channels (1 and 0 where the mode has none). */
template <int C, bool SWZ = false>
static __device__ __forceinline__ void lg_ln_tile(bf16 *__restrict__ xa, const bf16 *__restrict__ xs,
                                                  float *__restrict__ mean, float *__restrict__ rstd,
                                                  int64_t m0, int64_t M, const float *g,
                                                  const float *bb, int mode, int warp, int lane) {
  constexpr int NP = C / 64, LDA = C + 8, RG = C <= 128 ? 8 : 4;
  constexpr float inv_c = 1.0f / (float)C;
#pragma unroll 1
  for (int grp = 0; grp < 16 / RG; grp++) {
    const int r0 = warp * 16 + grp * RG;
    float v[RG][2 * NP];
#pragma unroll
    for (int k = 0; k < RG; k++) {
      const bool ok = m0 + r0 + k < M;
      const __nv_bfloat162 *src = (const __nv_bfloat162 *)(xs + (r0 + k) * C);
#pragma unroll
      for (int i = 0; i < NP; i++) {
        const __nv_bfloat162 p = src[32 * i + lane];
        v[k][2 * i] = ok ? __low2float(p) : 0.0f;
        v[k][2 * i + 1] = ok ? __high2float(p) : 0.0f;
      }
    }
    if (mode != MF_LN_IDENTITY) {
      float s[RG], q[RG];
#pragma unroll
      for (int k = 0; k < RG; k++) {
        s[k] = 0.0f;
#pragma unroll
        for (int i = 0; i < 2 * NP; i++) s[k] += v[k][i];
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int k = 0; k < RG; k++) s[k] += __shfl_xor_sync(0xffffffffu, s[k], o);
#pragma unroll
      for (int k = 0; k < RG; k++) {
        s[k] *= inv_c; /* the mean */
        q[k] = 0.0f;
#pragma unroll
        for (int i = 0; i < 2 * NP; i++) q[k] += (v[k][i] - s[k]) * (v[k][i] - s[k]);
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int k = 0; k < RG; k++) q[k] += __shfl_xor_sync(0xffffffffu, q[k], o);
      float my_mu = 0.0f, my_rs = 0.0f; /* lane k keeps row k's statistics */
#pragma unroll
      for (int k = 0; k < RG; k++) {
        const float rs = rsqrtf(q[k] * inv_c + (float)MF_LN_EPS);
        my_mu = lane == k ? s[k] : my_mu;
        my_rs = lane == k ? rs : my_rs;
        const float keep = m0 + r0 + k < M ? 1.0f : 0.0f; /* rows ≥ M: zeros */
#pragma unroll
        for (int i = 0; i < 2 * NP; i++) v[k][i] = ((v[k][i] - s[k]) * rs * g[i] + bb[i]) * keep;
      }
      const int64_t r = m0 + r0 + lane;
      if (mean && lane < RG && r < M) {
        mean[r] = my_mu;
        rstd[r] = my_rs;
      }
    }
#pragma unroll
    for (int k = 0; k < RG; k++) {
      if (SWZ) { /* 64-channel block i of row r at i·LG_BM·128 bytes, 128-byte swizzle */
        const int r = r0 + k;
#pragma unroll
        for (int i = 0; i < NP; i++)
          *(__nv_bfloat162 *)((unsigned char *)xa + i * LG_BM * 128 + mf_sw128(r, 2 * lane)) =
              __floats2bfloat162_rn(v[k][2 * i], v[k][2 * i + 1]);
      } else {
        __nv_bfloat162 *dst = (__nv_bfloat162 *)(xa + (r0 + k) * LDA);
#pragma unroll
        for (int i = 0; i < NP; i++)
          dst[32 * i + lane] = __floats2bfloat162_rn(v[k][2 * i], v[k][2 * i + 1]);
      }
    }
  }
}

template <int C>
static __device__ __forceinline__ void lg_ln_params(float *g, float *bb, const bf16 *gamma,
                                                    const bf16 *beta, int mode, int lane) {
#pragma unroll
  for (int i = 0; i < 2 * (C / 64); i++) {
    const int c = 64 * (i / 2) + 2 * lane + (i & 1);
    g[i] = (mode == MF_LN_FULL || mode == MF_LN_SCALE) ? mf_bf16_to_f32(gamma[c]) : 1.0f;
    bb[i] = mode == MF_LN_FULL ? mf_bf16_to_f32(beta[c]) : 0.0f;
  }
}

/* The same LayerNorm as lg_ln_tile<C, true> (x̂ into the swizzled wgmma operand layout,
 * mean/rstd of rows < M, rows ≥ M zeros), laid out for fewer instructions: each row is
 * spread over C/8 lanes holding 8 consecutive channels (one 16-byte load and one 16-byte
 * store per lane and row, 32/(C/8) rows per warp instruction), so a row's sums take
 * log2(C/8) shuffles instead of 5 and a warp's 16 rows take 16·8/C passes instead of 16.
 * Four passes at a time interleave their reductions. The mma/wgmma forwards spent about
 * half their issue slots in lg_ln_tile (ncu, ln_gemm_wg_kernel at M = 768²).
 * g, bb: γ, β of the lane's channels from lg_ln_params_v. C = 64 or 128. */
template <int C>
static __device__ __forceinline__ void lg_ln_params_v(float *g, float *bb, const bf16 *gamma,
                                                      const bf16 *beta, int mode, int lane) {
  const int c0 = 8 * (lane % (C / 8));
#pragma unroll
  for (int j = 0; j < 8; j++) {
    g[j] = (mode == MF_LN_FULL || mode == MF_LN_SCALE) ? mf_bf16_to_f32(gamma[c0 + j]) : 1.0f;
    bb[j] = mode == MF_LN_FULL ? mf_bf16_to_f32(beta[c0 + j]) : 0.0f;
  }
}

template <int C, int BR = LG_BM, bool XSW = false> /* BR: rows per 64-column block of xa;
                                                   * XSW: xs in the same swizzled blocks */
static __device__ __forceinline__ void lg_ln_tile_v(bf16 *__restrict__ xa, const bf16 *__restrict__ xs,
                                                    float *__restrict__ mean, float *__restrict__ rstd,
                                                    int64_t m0, int64_t M, const float *g,
                                                    const float *bb, int mode, int warp, int lane) {
  static_assert(C == 64 || C == 128, "lg_ln_tile_v: C = 64 or 128");
  constexpr int LPR = C / 8, RPP = 32 / LPR, NPASS = 16 / RPP, PG = NPASS < 4 ? NPASS : 4;
  constexpr float inv_c = 1.0f / (float)C;
  const int sub = lane / LPR, cl = lane % LPR; /* the lane's row in a pass, its 16-byte piece */
#pragma unroll 1
  for (int grp = 0; grp < NPASS / PG; grp++) {
    float v[PG][8];
    int rr[PG];
    bool ok[PG];
#pragma unroll
    for (int k = 0; k < PG; k++) {
      rr[k] = warp * 16 + (grp * PG + k) * RPP + sub;
      ok[k] = m0 + rr[k] < M;
      const uint4 u = XSW ? *(const uint4 *)((const unsigned char *)xs + (cl / 8) * (BR * 128) +
                                             mf_sw128_chunk(rr[k], cl % 8))
                          : *(const uint4 *)(xs + rr[k] * C + cl * 8);
      const uint32_t *w = (const uint32_t *)&u;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const __nv_bfloat162 p = *(const __nv_bfloat162 *)&w[j];
        v[k][2 * j] = ok[k] ? __low2float(p) : 0.0f;
        v[k][2 * j + 1] = ok[k] ? __high2float(p) : 0.0f;
      }
    }
    if (mode != MF_LN_IDENTITY) {
      float s[PG], q[PG];
#pragma unroll
      for (int k = 0; k < PG; k++) {
        s[k] = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) s[k] += v[k][j];
      }
#pragma unroll
      for (int o = 1; o < LPR; o <<= 1)
#pragma unroll
        for (int k = 0; k < PG; k++) s[k] += __shfl_xor_sync(0xffffffffu, s[k], o);
#pragma unroll
      for (int k = 0; k < PG; k++) {
        s[k] *= inv_c; /* the mean */
        q[k] = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) q[k] += (v[k][j] - s[k]) * (v[k][j] - s[k]);
      }
#pragma unroll
      for (int o = 1; o < LPR; o <<= 1)
#pragma unroll
        for (int k = 0; k < PG; k++) q[k] += __shfl_xor_sync(0xffffffffu, q[k], o);
#pragma unroll
      for (int k = 0; k < PG; k++) {
        const float rs = rsqrtf(q[k] * inv_c + (float)MF_LN_EPS);
#pragma unroll
        for (int j = 0; j < 8; j++) v[k][j] = (v[k][j] - s[k]) * rs * g[j] + bb[j];
        if (mean && cl == 0 && ok[k]) {
          mean[m0 + rr[k]] = s[k];
          rstd[m0 + rr[k]] = rs;
        }
      }
    }
#pragma unroll
    for (int k = 0; k < PG; k++) {
      uint4 u;
      uint32_t *w = (uint32_t *)&u;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const __nv_bfloat162 p = __floats2bfloat162_rn(v[k][2 * j], v[k][2 * j + 1]);
        w[j] = ok[k] ? *(const uint32_t *)&p : 0u; /* rows ≥ M: zeros */
      }
      *(uint4 *)((unsigned char *)xa + (cl / 8) * (BR * 128) + mf_sw128_chunk(rr[k], cl % 8)) = u;
    }
  }
}

/* Raw rows of tile t (bm rows) of x (M, C) into xs (bm, C) by cp.async (rows ≥ M skipped),
 * by the 2·bm threads tid = 0.. of a warp group (C/16 pieces of 16 bytes each). */
template <int C>
static __device__ __forceinline__ void lg_load_tile(bf16 *xs, const bf16 *__restrict__ x,
                                                    int64_t t, int64_t ntiles, int64_t M, int bm,
                                                    int tid) {
  if (t >= ntiles) return;
  const int64_t m0 = t * bm;
  const int rows = (int)(M - m0 < bm ? M - m0 : bm);
#pragma unroll
  for (int i = 0; i < C / 16; i++) { /* fixed trip count: no remainder code */
    const int idx = tid + i * 2 * bm;
    if (idx < rows * (C / 8)) lg_cp16(xs + idx * 8, x + m0 * C + (int64_t)idx * 8);
  }
}

/* The residual rows m0 .. m0 + rows − 1 of out (M, C) into the staging tile os (pitch ldo
 * elements) by cp.async, by the `threads` threads tid = 0.. of the CTA (the transition
 * forwards' accumulate mode). */
template <int C, int THREADS>
static __device__ __forceinline__ void lg_load_residual(bf16 *os, int ldo, const bf16 *out,
                                                        int64_t m0, int rows, int tid) {
#pragma unroll
  for (int i = 0; i < LG_BM * (C / 8) / THREADS; i++) {
    const int idx = tid + i * THREADS;
    const int r = idx / (C / 8), k8 = (idx - r * (C / 8)) * 8;
    if (r < rows) lg_cp16(os + r * ldo + k8, out + (m0 + r) * C + k8);
  }
}

/* The LayerNorm arguments every fused LN + GEMM forward checks (who: its name in the
 * message): γ unless the mode is NONE or IDENTITY, β for FULL, and with stats = 1 mean and
 * rstd unless the mode is IDENTITY. Host side. */
static inline void lg_check_ln_args(const char *who, mf_ln_mode mode, const void *gamma,
                                    const void *beta, const float *mean, const float *rstd,
                                    int stats) {
  MF_ASSERT(!stats || mode == MF_LN_IDENTITY || (mean && rstd), "%s: mean/rstd required", who);
  MF_ASSERT(mode == MF_LN_IDENTITY || mode == MF_LN_NONE || gamma, "%s: gamma required", who);
  MF_ASSERT(mode != MF_LN_FULL || beta, "%s: beta required", who);
}

/* 16 bytes global → shared, zero-filled when !ok */
static __device__ __forceinline__ void lg_cp16z(void *dst, const void *src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(mf_smem_u32(dst)), "l"(src),
               "r"(ok ? 16 : 0)
               : "memory");
}

/* 4 bytes global → shared, zero-filled when !ok */
static __device__ __forceinline__ void lg_cp4z(void *dst, const void *src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(mf_smem_u32(dst)), "l"(src),
               "r"(ok ? 4 : 0)
               : "memory");
}

/* The 64 rows × 64 columns of a staged block (swizzled) to global rows row0.. (row stride
 * ld elements), rows < nrows; by the 128 threads of a warpgroup (tid 0..127). */
static __device__ __forceinline__ void lg_store_block64(bf16 *dst, int64_t ld, const unsigned char *blk,
                                                     int nrows, int tid) {
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int idx = tid + 128 * i, r = idx >> 3, ch = idx & 7;
    if (r < nrows) *(uint4 *)(dst + r * ld + ch * 8) = *(const uint4 *)(blk + mf_sw128_chunk(r, ch));
  }
}

/* v (32 column terms of this lane's quad position t4) summed over the 8 lanes of equal
 * t4 and scattered: acc[k] += Σ v[4·g8 + k], k < 4 (g8 = lane / 4). Fixed order. */
static __device__ __forceinline__ void lg_reduce_scatter32(const float (&v)[32], float (&acc)[4], int lane) {
  float w16[16], w8[8];
  const bool b4 = (lane >> 4) & 1, b3 = (lane >> 3) & 1, b2 = (lane >> 2) & 1;
#pragma unroll
  for (int k = 0; k < 16; k++) {
    const float send = b4 ? v[k] : v[k + 16], keep = b4 ? v[k + 16] : v[k];
    w16[k] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
  }
#pragma unroll
  for (int k = 0; k < 8; k++) {
    const float send = b3 ? w16[k] : w16[k + 8], keep = b3 ? w16[k + 8] : w16[k];
    w8[k] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
  }
#pragma unroll
  for (int k = 0; k < 4; k++) {
    const float send = b2 ? w8[k] : w8[k + 4], keep = b2 ? w8[k + 4] : w8[k];
    acc[k] += keep + __shfl_xor_sync(0xffffffffu, send, 4);
  }
}

/* The LayerNorm backward of the two rows rl, rl + 8 (tile rows) whose dy = d(x̂) the
 * thread's accumulator fragments hold (acc[4i + 2hh + e]: row rl + 8hh, column
 * 8i + 2·t4 + e, i < C/8; the quad's four lanes hold a row's C columns):
 *   dinp = rstd·(γdy − mean(γdy) − x̂·mean(γdy⊙x̂)),  x̂ = (x − μ)·rstd
 * with x read from the raw tile xr (C/64 swizzled blocks of LG_BM rows), γ from gam (C
 * fp32), the rows' statistics in mu[], rs[]. dinp (bf16, + the global row's old value
 * when add) goes into the swizzled blocks at ob (block stride ob_stride, row rl − orow0)
 * when ob != NULL; vg, vb receive the thread's column terms dy⊙x̂ and dy summed over its
 * two rows (rows ≥ rows contribute nothing). dinp_g: row 0 of the tile in global memory
 * (read only when add). Shared by the wgmma backward kernels (ln_gemm_bwd_wg.cu,
 * gemm_ln_bwd_wg.cu). */
template <int C>
static __device__ __forceinline__ void lg_ln_bwd_rows(const float (&acc)[C / 2], const unsigned char *xr,
                                                      const float *gam, const float (&mu)[2],
                                                      const float (&rs)[2], int rl, int rows, int t4,
                                                      unsigned char *ob, int ob_stride, int orow0,
                                                      const bf16 *dinp_g, int add, float (&vg)[C / 4],
                                                      float (&vb)[C / 4]) {
  constexpr float inv_c = 1.0f / (float)C;
#pragma unroll
  for (int hh = 0; hh < 2; hh++) {
    const int r = rl + 8 * hh;
    const bool ok = r < rows;
    float xh[C / 4], gv[C / 4], sg = 0.0f, sgx = 0.0f;
#pragma unroll
    for (int i = 0; i < C / 8; i++) {
      const float2 xv = __bfloat1622float2(
          *(const __nv_bfloat162 *)(xr + (i / 8) * (LG_BM * 128) + mf_sw128(r, 8 * (i % 8) + 2 * t4)));
      xh[2 * i] = (xv.x - mu[hh]) * rs[hh];
      xh[2 * i + 1] = (xv.y - mu[hh]) * rs[hh];
      const float2 ga = *(const float2 *)(gam + 8 * i + 2 * t4);
#pragma unroll
      for (int e = 0; e < 2; e++) {
        gv[2 * i + e] = acc[4 * i + 2 * hh + e] * (e ? ga.y : ga.x);
        sg += gv[2 * i + e];
        sgx += gv[2 * i + e] * xh[2 * i + e];
      }
    }
    sg += __shfl_xor_sync(0xffffffffu, sg, 1);
    sg += __shfl_xor_sync(0xffffffffu, sg, 2);
    sgx += __shfl_xor_sync(0xffffffffu, sgx, 1);
    sgx += __shfl_xor_sync(0xffffffffu, sgx, 2);
    sg *= inv_c;
    sgx *= inv_c;
    if (ob)
#pragma unroll
      for (int i = 0; i < C / 8; i++) {
        float d0 = rs[hh] * (gv[2 * i] - sg - xh[2 * i] * sgx);
        float d1 = rs[hh] * (gv[2 * i + 1] - sg - xh[2 * i + 1] * sgx);
        if (add && ok) {
          const float2 o =
              __bfloat1622float2(*(const __nv_bfloat162 *)(dinp_g + (int64_t)r * C + 8 * i + 2 * t4));
          d0 += o.x;
          d1 += o.y;
        }
        *(__nv_bfloat162 *)(ob + (i / 8) * ob_stride + mf_sw128(r - orow0, 8 * (i % 8) + 2 * t4)) =
            __floats2bfloat162_rn(d0, d1);
      }
#pragma unroll
    for (int i = 0; i < C / 8; i++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const float dyv = ok ? acc[4 * i + 2 * hh + e] : 0.0f; /* rows ≥ rows: nothing */
        vg[2 * i + e] = (hh ? vg[2 * i + e] : 0.0f) + dyv * xh[2 * i + e];
        vb[2 * i + e] = (hh ? vb[2 * i + e] : 0.0f) + dyv;
      }
  }
}

/* The end of a 256-thread (8-warp) kernel that kept dγ/dβ column partials pg, pb per lane
 * (lg_reduce_scatter32's slots: lane (g8, t4) holds column 8·(2·g8 + ii) + 2·t4 + e at
 * [2ii + e]):
 * the 8 warps' values summed in warp order through red (8·2C fp32 of shared memory no
 * longer in use) into part[blockIdx.x] = [Σ dy⊙x̂ (C) | Σ dy (C)]. Contains __syncthreads:
 * every thread of the CTA calls it. */
template <int C>
static __device__ __forceinline__ void lg_cta_part_store(float *red, const float (&pg)[4],
                                                         const float (&pb)[4], float *part,
                                                         int warp, int lane) {
  const int t4 = lane & 3, g8 = lane >> 2;
  __syncthreads();
#pragma unroll
  for (int ii = 0; ii < 2; ii++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int c = 8 * (2 * g8 + ii) + 2 * t4 + e;
      red[warp * 2 * C + c] = pg[2 * ii + e];
      red[warp * 2 * C + C + c] = pb[2 * ii + e];
    }
  __syncthreads();
  for (int c = threadIdx.x; c < 2 * C; c += 256) {
    float s = 0.0f;
    for (int w = 0; w < 8; w++) s += red[w * 2 * C + c];
    part[(int64_t)blockIdx.x * 2 * C + c] = s;
  }
}

#endif
