/* trimul_ph1_wg.cu — the triangle multiplication backward's first phase (its output side)
 * as one persistent wgmma kernel (sm_90a) at C = Ch = 128. For every pair row m of a chunk:
 *   y  = LN_out(T)            (T channel-major, the saved statistics)
 *   u  = y·W_zᵀ,  s = σ(gl),  dd = dout ⊙ mask
 *   dgl = dd ⊙ u ⊙ s(1 − s)   (to HBM: phase 3 reads it)
 *   du = dd ⊙ s;  dW_z += duᵀ·y  (per-CTA fp32 partials, then a fixed-order sum)
 *   dy = du·W_z;  dT = LN_out backward of dy (channel-major, to HBM: phase 2 reads it),
 *                 with per-CTA Σ dy⊙x̂, Σ dy for dγ, dβ.
 * It replaces, per chunk, out_proj_wg.cu's TRI_BWD kernel (which wrote y and du for the
 * GEMMs), two cuBLAS GEMMs (dW_z; dy, written and read back in bf16) and the channel-major
 * LN backward (tri_ln_cm_bwd_v_kernel, which read T again): at N = 768 on an H200 those took
 * about 0.30 ms per chunk of the block's three (ncu, 2026-11-30). Written by hand: the
 * products chain through the gate's epilogue and a row-wise LayerNorm backward, which no
 * library GEMM does. Not the CPU reference (src/ops/cpu/trimul.c).
 *
 * Design (ta_out_bwd_wg.cu's): a CTA is two warpgroups on one 64-row subtile at a time;
 * warpgroup j owns output columns 64j .. 64j + 63 of u (and so of du, dgl) and of dy (and
 * so of dT's channels), and rows 64j .. of dW_z (64 fp32 accumulators for the whole run).
 * Shared memory holds W_z once (128 rows c × 128 channels, 128-byte swizzle: K-major for
 * u = y·W_zᵀ, MN-major for dy = du·W_z), three stages of [T | dout | gl | statistics]
 * refilled two subtiles ahead by cp.async (rows past the chunk zero-filled), and the y and du
 * tiles: y channel-major (the MN-major A of u, the K-major B of dW_z), du row-major (the
 * K-major A of dy, the MN-major A of dW_z). LN_out's backward needs each row's Σ over all
 * 128 channels: the two warpgroups' halves meet in shared memory (warpgroup 0's + 1's, a
 * fixed order). dT is staged channel-major over the consumed dout block and stored as
 * 128-byte lines; dgl over the gl block, as 128-byte rows. */
#include "trimul_ph1_cuda.h"

#include <stdlib.h>

#include "fusion_util.cuh"
#include "ln_tile.cuh"
#include "ops/dropout.h"
#include "wgmma_ptx.cuh"

#define T1_C 128                    /* C = Ch: the one width this kernel takes */
#define T1_SUB 64                   /* rows per subtile */
#define T1_BLK (T1_SUB * 128)       /* a 64-column block of 64 rows (or 64 lines of 64 rows) */
#define T1_TILE (2 * T1_BLK)        /* 16 KB */
#define T1_W (2 * T1_C * 128)       /* W_z: two 64-channel blocks of 128 rows c × 128 B */
#define T1_STAGE (3 * T1_TILE + 1024) /* T | dout | gl | mean, rstd (64 + 64 fp32) */
#define T1_NS 3
#define T1_XS (2 * T1_SUB * 2 * 4)  /* the row sums' halves: [warpgroup][row][2] fp32 */
#define T1_SMEM (1024 + T1_W + T1_NS * T1_STAGE + 2 * T1_TILE + T1_XS + 2 * T1_C * 4)

typedef struct {
  bf16 *dgl;          /* (M, C) */
  bf16 *dT;           /* (Ch, ldm) channel-major */
  float *part_w;      /* (grid, C, Ch) or NULL (no dW_z) */
  float *part_ln;     /* (grid, 2Ch) */
  const bf16 *T;      /* (Ch, ldm) channel-major */
  int64_t ldm;
  const float *mean, *rstd; /* (M) */
  const bf16 *gamma, *beta; /* (Ch) */
  const bf16 *w;            /* W_z (C, Ch) */
  const bf16 *dout;         /* (M, C) */
  const bf16 *glb;          /* (rows, C) local */
  const float *mask;        /* (N, C) or NULL */
  int axis, N;
  int64_t m_base, rows;
} t1_params;

/* Subtile s (local rows r0 = 64s ..) into the stage at stg, nothing for s ≥ nsub: by the
 * CTA's 256 threads, cp.async. T: line c (channel) of 64 rows, 16-byte chunk j (8 rows) at
 * c·128 + ((j ^ c) & 7)·16 — the MN-major / K-major operand layout of wgmma_ptx.cuh (a
 * chunk holding the chunk's last row may read up to 7 padding columns of its plane, inside
 * ldm, and chunks past it are zero-filled); dout and gl rows as two swizzled 64-column
 * blocks (rows past zero-filled: dd = 0 there, so du, dy and their sums get nothing);
 * mean, rstd (zeros past). */
static __device__ __forceinline__ void t1_load(unsigned char *stg, const t1_params &p, int64_t s,
                                               int64_t nsub, int tid) {
  if (s >= nsub) return;
  const int64_t r0 = s * T1_SUB, m0 = p.m_base + r0;
  const int rows = (int)(p.rows - r0 < T1_SUB ? p.rows - r0 : T1_SUB);
#pragma unroll
  for (int i = 0; i < T1_C * 8 / 256; i++) {
    const int idx = tid + 256 * i, c = idx >> 3, j = idx & 7;
    const bool ok = 8 * j < rows;
    lg_cp16z(stg + c * 128 + (((j ^ c) & 7) << 4), p.T + (int64_t)c * p.ldm + m0 + (ok ? 8 * j : 0), ok);
  }
#pragma unroll
  for (int i = 0; i < T1_SUB * 16 / 256; i++) {
    const int idx = tid + 256 * i, r = idx >> 4, q = idx & 15;
    const uint32_t off = (q >> 3) * T1_BLK + mf_sw128_chunk(r, q & 7);
    const bool ok = r < rows;
    const int64_t rr = ok ? r : 0;
    lg_cp16z(stg + T1_TILE + off, p.dout + (m0 + rr) * T1_C + q * 8, ok);
    lg_cp16z(stg + 2 * T1_TILE + off, p.glb + (r0 + rr) * T1_C + q * 8, ok);
  }
  if (tid < 2 * T1_SUB) {
    const int r = tid & (T1_SUB - 1);
    const float *src = (tid < T1_SUB ? p.mean : p.rstd) + m0 + (r < rows ? r : 0);
    lg_cp4z(stg + 3 * T1_TILE + 4 * tid, src, r < rows);
  }
}

/* The mask values of the subtile's dout chunks that thread tid scales, a subtile ahead. */
#define T1_MI (T1_SUB * 16 / 256)
static __device__ __forceinline__ void t1_mask_load(float (&mk)[T1_MI][8], const t1_params &p, int64_t s,
                                                    int tid) {
  const int64_t r0 = s * T1_SUB, m0 = p.m_base + r0;
  const int rows = (int)(p.rows - r0 < T1_SUB ? p.rows - r0 : T1_SUB);
#pragma unroll
  for (int i = 0; i < T1_MI; i++) {
    const int idx = tid + 256 * i, r = idx >> 4, q = idx & 15;
    const uint32_t m = (uint32_t)(m0 + (r < rows ? r : 0)), a = m / (uint32_t)p.N, b = m - a * (uint32_t)p.N;
    mf_ldvf<8>(mk[i], p.mask + (int64_t)(p.axis == MF_DROPOUT_ROWWISE ? b : a) * T1_C + q * 8);
  }
}

static __global__ void __launch_bounds__(256, 1) trimul_ph1_kernel(const t1_params p) {
  extern __shared__ unsigned char t1_raw[];
  unsigned char *sm = t1_raw + ((1024u - (mf_smem_u32(t1_raw) & 1023u)) & 1023u);
  unsigned char *ws = sm, *stages = sm + T1_W;
  unsigned char *yt = stages + T1_NS * T1_STAGE, *dut = yt + T1_TILE;
  float *xs = (float *)(dut + T1_TILE); /* [wg][row][2] */
  float *gb = xs + 2 * T1_SUB * 2;      /* γ (Ch) | β (Ch) */
  const int tid = (int)threadIdx.x, wg = lg_warp_id() >> 2, t128 = tid & 127;
  const int warp = (tid >> 5) & 3, lane = tid & 31;
  const int64_t nsub = (p.rows + T1_SUB - 1) / T1_SUB, G = gridDim.x;
  const bool want_dw = p.part_w != NULL;

  /* W_z rows c, channels k: block k/64 of 128 rows × 128 B (K-major for u = y·W_zᵀ; the
   * same bytes are W_z MN-major for dy = du·W_z: lines c, 64 channels of block k/64) */
#pragma unroll 4
  for (int idx = tid; idx < T1_C * 16; idx += 256) {
    const int n = idx >> 4, q = idx & 15;
    lg_cp16(ws + (q >> 3) * (T1_C * 128) + mf_sw128_chunk(n, q & 7), p.w + n * T1_C + q * 8);
  }
  for (int c = tid; c < T1_C; c += 256) {
    gb[c] = mf_bf16_to_f32(p.gamma[c]);
    gb[T1_C + c] = mf_bf16_to_f32(p.beta[c]);
  }
  t1_load(stages, p, blockIdx.x, nsub, tid);
  mf_cp_async_commit();
  t1_load(stages + T1_STAGE, p, blockIdx.x + G, nsub, tid);
  mf_cp_async_commit();

  const uint32_t w_u = mf_smem_u32(ws), y_u = mf_smem_u32(yt), du_u = mf_smem_u32(dut);
  /* operand descriptors: W_z's, y's and du's (fixed buffers) once, each k16 block's from them
   * (mf_wg_desc_off) */
  const uint64_t dwz = mf_wg_desc(w_u + wg * T1_BLK), dwz_mn = mf_wg_desc_mn(w_u + wg * (T1_C * 128), T1_C * 128);
  const uint64_t dy_mn = mf_wg_desc_mn(y_u, T1_TILE), dyk = mf_wg_desc(y_u);
  const uint64_t ddu = mf_wg_desc(du_u), ddu_mn = mf_wg_desc_mn(du_u + wg * T1_BLK, T1_BLK);
  float dw[64]; /* dW_z rows 64·wg + 16·warp + lane/4 (+8), channels 8i + 2(lane % 4) (+1) */
  float pg[16], pb[16]; /* Σ dy⊙x̂, Σ dy of this thread's 16 channels 64·wg + 8i + 2(lane % 4) + e */
#pragma unroll
  for (int i = 0; i < 64; i++) dw[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; i++) pg[i] = pb[i] = 0.0f;
  float gam[16]; /* γ of this thread's fragment channels 64·wg + 8i + 2(lane % 4) + e */
#pragma unroll
  for (int k = 0; k < 16; k++) gam[k] = mf_bf16_to_f32(p.gamma[64 * wg + 8 * (k >> 1) + 2 * (lane & 3) + (k & 1)]);
  float mk[T1_MI][8];
  if (p.mask && blockIdx.x < nsub) t1_mask_load(mk, p, blockIdx.x, tid);
  int st = 0;
  for (int64_t s = blockIdx.x; s < nsub; s += G, st = st == T1_NS - 1 ? 0 : st + 1) {
    const int64_t r0 = s * T1_SUB, m0 = p.m_base + r0;
    const int rows = (int)(p.rows - r0 < T1_SUB ? p.rows - r0 : T1_SUB);
    unsigned char *tt = stages + st * T1_STAGE, *dt = tt + T1_TILE, *gt = tt + 2 * T1_TILE;
    const float *mu = (const float *)(tt + 3 * T1_TILE), *rsd = mu + T1_SUB;
    mf_cp_async_wait<1>();
    __syncthreads(); /* every thread's copies; the previous subtile done everywhere */
    t1_load(stages + (st == 0 ? T1_NS - 1 : st - 1) * T1_STAGE, p, s + 2 * G, nsub, tid);
    mf_cp_async_commit();
    if (p.mask) { /* dd = dout ⊙ mask in place */
#pragma unroll
      for (int i = 0; i < T1_MI; i++) {
        const int idx = tid + 256 * i, r = idx >> 4, q = idx & 15;
        if (r >= rows) continue;
        float x[8];
        bf16 *v = (bf16 *)(dt + (q >> 3) * T1_BLK + mf_sw128_chunk(r, q & 7));
        mf_ldv<8>(x, v);
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] *= mk[i][k];
        mf_stv<8>(v, x);
      }
      if (s + G < nsub) t1_mask_load(mk, p, s + G, tid);
    }
    { /* y = LN_out(T) into yt (same layout); rows past the chunk 0 (their T may be padding) */
      const int j = tid & 7;
      float m8[8], r8[8];
#pragma unroll
      for (int k = 0; k < 8; k++) {
        const int r = 8 * j + k;
        m8[k] = mu[r];
        r8[k] = r < rows ? rsd[r] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < T1_C / 32; i++) {
        const int c = (tid >> 3) + 32 * i;
        const uint32_t off = c * 128 + (((j ^ c) & 7) << 4);
        uint4 v = *(const uint4 *)(tt + off);
        bf16 *x = (bf16 *)&v;
        const float g = gb[c], b = gb[T1_C + c];
#pragma unroll
        for (int k = 0; k < 8; k++)
          x[k] = mf_f32_to_bf16(8 * j + k < rows ? (mf_bf16_to_f32(x[k]) - m8[k]) * r8[k] * g + b : 0.0f);
        *(uint4 *)(yt + off) = v;
      }
    }
    mf_fence_proxy_async();
    __syncthreads(); /* y complete, dd scaled */

    /* u (64 × 64: columns c of block wg) = y·W_zᵀ: A = y MN-major (lines = channels k),
     * B = W_z K-major (rows c of block wg) */
    float u[32];
    mf_wg_fence();
#pragma unroll
    for (int k = 0; k < T1_C / 16; k++)
      mf_wg_ss_n64<0, 1>(u, mf_wg_desc_off(dy_mn, k * 2048), mf_wg_desc_off(dwz, (k / 4) * (T1_C * 128) + (k % 4) * 32),
                         k > 0);
    mf_wg_commit();
    mf_wg_wait<0>();
    mf_wg_pin(u);

    /* the gate's backward on the fragments (row 16·warp + lane/4 + 8hh, column
     * 64wg + 8i + 2(lane % 4) + e): du into dut, dgl over gl in place */
    {
      unsigned char *gbk = gt + wg * T1_BLK, *dub = dut + wg * T1_BLK;
      const unsigned char *dbk = dt + wg * T1_BLK;
      uint32_t d2[2][8], g2[2][8];
      mf_frag_load2(d2, g2, dbk, gbk, warp, lane);
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
          const uint32_t off = mf_frag_off(warp, lane, hh, i);
          const float2 dd = mf_unpack_bf16x2(d2[hh][i]), gl = mf_unpack_bf16x2(g2[hh][i]);
          const float s0 = mf_sigmoidf_tanh(gl.x), s1 = mf_sigmoidf_tanh(gl.y);
          const float u0 = u[4 * i + 2 * hh], u1 = u[4 * i + 2 * hh + 1];
          *(uint32_t *)(dub + off) = mf_pack_bf16x2(dd.x * s0, dd.y * s1);
          *(uint32_t *)(gbk + off) = mf_pack_bf16x2(dd.x * u0 * s0 * (1.0f - s0), dd.y * u1 * s1 * (1.0f - s1));
        }
      }
    }
    mf_fence_proxy_async();
    __syncthreads(); /* du complete in both blocks */

    /* dy (64 × 64: channels of block wg) = du·W_z: A = du K-major, B = W_z MN-major;
     * dW_z (rows c of block wg) += du[:, block]ᵀ·y: A = du MN-major, B = y K-major */
    float dy[32];
    mf_wg_fence();
#pragma unroll
    for (int k = 0; k < T1_C / 16; k++)
      mf_wg_ss_n64<1>(dy, mf_wg_desc_off(ddu, (k / 4) * T1_BLK + (k % 4) * 32), mf_wg_desc_off(dwz_mn, k * 2048),
                      k > 0);
    if (want_dw) {
#pragma unroll
      for (int k = 0; k < T1_SUB / 16; k++)
        mf_wg_ss_n128<0, 1>(dw, mf_wg_desc_off(ddu_mn, k * 2048), mf_wg_desc_off(dyk, k * 32), 1);
    }
    mf_wg_commit();
    mf_wg_wait<0>();
    mf_wg_pin(dy);
    mf_wg_pin(dw);

    /* LN_out backward: x̂ = (T − μ)·rstd from the raw tile (its 8 × 8 blocks transposed
     * into the fragment layout by ldmatrix: block (i, hh) = channels 64wg + 8i .., rows
     * 16·warp + 8hh ..), g = γ·dy; the rows' sums over this warpgroup's 64 channels, then
     * both halves */
    float xh[2][16], sg[2] = {0.0f, 0.0f}, sgx[2] = {0.0f, 0.0f};
    {
      const uint32_t t_u = mf_smem_u32(tt);
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const int q = lane >> 3, i = 2 * k + (q >> 1), hh = q & 1;
        const int c = 64 * wg + 8 * i + (lane & 7);
        uint32_t v[4];
        mf_ldsm_x4_t(v, t_u + c * 128 + ((((2 * warp + hh) ^ c) & 7) << 4));
#pragma unroll
        for (int qq = 0; qq < 4; qq++) {
          const int i2 = 2 * k + (qq >> 1), h2 = qq & 1;
          const float2 tv = mf_unpack_bf16x2(v[qq]);
          xh[h2][2 * i2] = tv.x;
          xh[h2][2 * i2 + 1] = tv.y;
        }
      }
    }
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const int r = 16 * warp + (lane >> 2) + 8 * hh;
      const float m_ = mu[r], rs_ = rsd[r];
#pragma unroll
      for (int i = 0; i < 8; i++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          /* rows past the chunk: x̂ = 0 (their T may be padding; their dy is 0) */
          const float x = r < rows ? (xh[hh][2 * i + e] - m_) * rs_ : 0.0f;
          const float d = dy[4 * i + 2 * hh + e], g = d * gam[2 * i + e];
          xh[hh][2 * i + e] = x;
          sg[hh] += g;
          sgx[hh] += g * x;
          pg[2 * i + e] += d * x;
          pb[2 * i + e] += d;
        }
    }
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      sg[hh] += __shfl_xor_sync(0xffffffffu, sg[hh], 1);
      sg[hh] += __shfl_xor_sync(0xffffffffu, sg[hh], 2);
      sgx[hh] += __shfl_xor_sync(0xffffffffu, sgx[hh], 1);
      sgx[hh] += __shfl_xor_sync(0xffffffffu, sgx[hh], 2);
      if ((lane & 3) == 0) {
        const int r = 16 * warp + (lane >> 2) + 8 * hh;
        xs[(wg * T1_SUB + r) * 2] = sg[hh];
        xs[(wg * T1_SUB + r) * 2 + 1] = sgx[hh];
      }
    }
    __syncthreads(); /* both halves of every row's sums */
    {
      unsigned char *dTs = dt + wg * T1_BLK; /* dT staged channel-major over this warpgroup's dout block */
      uint32_t o2[2][8]; /* dT of (row hh, channels 8i + 2(lane % 4) + {0, 1}) as bf16 pairs */
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        const int r = 16 * warp + (lane >> 2) + 8 * hh;
        const float rs_ = rsd[r];
        const float a = (xs[r * 2] + xs[(T1_SUB + r) * 2]) * (1.0f / T1_C);
        const float bx = (xs[r * 2 + 1] + xs[(T1_SUB + r) * 2 + 1]) * (1.0f / T1_C);
#pragma unroll
        for (int i = 0; i < 8; i++) {
          float o[2];
#pragma unroll
          for (int e = 0; e < 2; e++)
            o[e] = rs_ * (dy[4 * i + 2 * hh + e] * gam[2 * i + e] - a - xh[hh][2 * i + e] * bx);
          o2[hh][i] = mf_pack_bf16x2(o[0], o[1]);
        }
      }
      /* into the channel-major staging, transposed back by stmatrix (the blocks of the
       * ldmatrix above, local channel lines) */
      const uint32_t s_u = mf_smem_u32(dTs);
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const int q = lane >> 3, i = 2 * k + (q >> 1), hh = q & 1, cl = 8 * i + (lane & 7);
        const uint32_t v[4] = {o2[0][2 * k], o2[1][2 * k], o2[0][2 * k + 1], o2[1][2 * k + 1]};
        mf_stsm_x4_t(s_u + cl * 128 + ((((2 * warp + hh) ^ cl) & 7) << 4), v);
      }
      mf_bar_wg(wg); /* the warpgroup's dT lines and dgl rows complete */
      uint4 vt[4], vg[4];
      const unsigned char *gbk = gt + wg * T1_BLK;
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int idx = t128 + 128 * i, l = idx >> 3, j = idx & 7;
        vt[i] = *(const uint4 *)(dTs + l * 128 + (((j ^ l) & 7) << 4));
        vg[i] = *(const uint4 *)(gbk + mf_sw128_chunk(l, j));
      }
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int idx = t128 + 128 * i, l = idx >> 3, j = idx & 7;
        if (8 * j < rows) *(uint4 *)(p.dT + (int64_t)(64 * wg + l) * p.ldm + m0 + 8 * j) = vt[i];
        if (l < rows) *(uint4 *)(p.dgl + (m0 + l) * T1_C + 64 * wg + 8 * j) = vg[i];
      }
    }
  }
  mf_cp_async_wait<0>();
  if (want_dw) { /* this CTA's dW_z rows 64·wg .. */
    float *pw = p.part_w + (int64_t)blockIdx.x * T1_C * T1_C;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const int c = 64 * wg + 16 * warp + (lane >> 2) + 8 * hh;
#pragma unroll
      for (int i = 0; i < 16; i++)
        *(float2 *)(pw + c * T1_C + 8 * i + 2 * (lane & 3)) = make_float2(dw[4 * i + 2 * hh], dw[4 * i + 2 * hh + 1]);
    }
  }
  /* Σ dy⊙x̂, Σ dy per channel: over the 8 row lanes of a warp (xor 4, 8, 16), then the four
   * warps of the warpgroup in order, through yt (free now) */
#pragma unroll
  for (int k = 0; k < 16; k++)
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) {
      pg[k] += __shfl_xor_sync(0xffffffffu, pg[k], o);
      pb[k] += __shfl_xor_sync(0xffffffffu, pb[k], o);
    }
  __syncthreads();
  float *red = (float *)yt; /* [wg][warp][2][64] */
  if (lane < 4)
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int cl = 8 * i + 2 * lane + e;
        red[((wg * 4 + warp) * 2 + 0) * 64 + cl] = pg[2 * i + e];
        red[((wg * 4 + warp) * 2 + 1) * 64 + cl] = pb[2 * i + e];
      }
  __syncthreads();
  { /* thread t: channel 64wg + t % 64, sum t / 64 (0: dγ, 1: dβ) */
    const int cl = t128 & 63, w2 = t128 >> 6;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; w++) sum += red[((wg * 4 + w) * 2 + w2) * 64 + cl];
    p.part_ln[(int64_t)blockIdx.x * 2 * T1_C + w2 * T1_C + 64 * wg + cl] = sum;
  }
}

/* ================================================================ host */

static int g_t1_on = -1; /* −1: not yet read from the environment */
static int64_t g_t1_calls;

extern "C" int mf_trimul_ph1_wg_set(int on) {
  if (g_t1_on < 0) {
    const char *e = getenv("MF_TRIMUL_PH1");
    g_t1_on = e && e[0] == '0' ? 0 : 1;
  }
  const int prev = g_t1_on;
  if (on >= 0) g_t1_on = on ? 1 : 0;
  return prev;
}

extern "C" int64_t mf_trimul_ph1_wg_calls(void) { return g_t1_calls; }

extern "C" size_t mf_trimul_ph1_wg_part_bytes(void) {
  return (size_t)mf_sm_count_or132() * T1_C * T1_C * sizeof(float);
}

extern "C" int mf_trimul_ph1_wg_supported(int C, int Ch, int64_t ldm, int64_t m_base, const void *dgl,
                                          const void *dT, const void *T, const void *dout,
                                          const void *glb, const void *w_z, const void *mask) {
  if (!mf_trimul_ph1_wg_set(-1) || C != T1_C || Ch != T1_C || ldm % 8 != 0 || m_base % 8 != 0) return 0;
  const void *ptrs[] = {dgl, dT, T, dout, glb, w_z, mask};
  for (int i = 0; i < 7; i++)
    if (ptrs[i] && ((uintptr_t)ptrs[i] & 15) != 0) return 0;
  return mf_dev_sm90();
}

extern "C" int mf_trimul_ph1_wg_cuda(bf16 *dgl, bf16 *dT, float *dw_z, float *part_w, float *part_ln,
                                     const bf16 *T, int64_t ldm, const float *mean, const float *rstd,
                                     const bf16 *gamma, const bf16 *beta, const bf16 *w_z,
                                     const bf16 *dout, const bf16 *glb, const float *mask, int axis,
                                     int N, int64_t m_base, int64_t rows, cudaStream_t stream) {
  const int64_t M = (int64_t)N * N;
  MF_ASSERT(mf_trimul_ph1_wg_supported(T1_C, T1_C, ldm, m_base, dgl, dT, T, dout, glb, w_z, mask) &&
                ldm >= M && N < 65536,
            "trimul_ph1_wg: ldm=%lld (>= M=%lld, a multiple of 8), m_base=%lld (a multiple of 8), "
            "16-byte aligned arrays, sm_90", (long long)ldm, (long long)M, (long long)m_base);
  MF_ASSERT(dgl && dT && part_ln && T && mean && rstd && gamma && beta && w_z && dout && glb &&
                (!dw_z || part_w),
            "trimul_ph1_wg: NULL argument");
  MF_ASSERT(m_base >= 0 && rows >= 0 && m_base + rows <= M, "trimul_ph1_wg: rows [%lld, %lld) of %lld",
            (long long)m_base, (long long)(m_base + rows), (long long)M);
  if (rows == 0) return 0;
  t1_params p;
  p.dgl = dgl;
  p.dT = dT;
  p.part_w = dw_z ? part_w : NULL;
  p.part_ln = part_ln;
  p.T = T;
  p.ldm = ldm;
  p.mean = mean;
  p.rstd = rstd;
  p.gamma = gamma;
  p.beta = beta;
  p.w = w_z;
  p.dout = dout;
  p.glb = glb;
  p.mask = mask;
  p.axis = axis;
  p.N = N;
  p.m_base = m_base;
  p.rows = rows;
  const int64_t nsub = (rows + T1_SUB - 1) / T1_SUB;
  const int grid = (int)(nsub < mf_sm_count_or132() ? nsub : mf_sm_count_or132());
  MF_CHECK_CUDA(cudaFuncSetAttribute(trimul_ph1_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T1_SMEM));
  trimul_ph1_kernel<<<grid, 256, T1_SMEM, stream>>>(p);
  MF_CHECK_LAUNCH();
  if (dw_z) mf_sum_parts_cuda(dw_z, part_w, grid, T1_C * T1_C, stream);
  g_t1_calls++;
  return grid;
}
