/* ln_linear_bwd_wg.cu — the whole LayerNorm + Linear backward as one persistent wgmma
 * kernel (sm_90a), C = 128, O = 64 or 128: configuration 7 of mf_ln_gemm_bwd_set_variant
 * (ln_gemm_bwd_cuda.h), used by mf_ln_linear_backward_cuda when that is in force. For
 * out = y·Wᵀ + bias, y = LN(inp) (FULL / SCALE / NONE), from dout and the saved (mean,
 * rstd) it forms
 *   dy (rows, C) = dout·W          dinp = the LayerNorm backward of dy (ASSIGNED)
 *   dW (O, C) += doutᵀ·y           dbias (O) += Σ dout      dγ += Σ dy⊙x̂, dβ += Σ dy
 * reading inp and dout once and writing dinp once. Not the CPU reference, not a forward,
 * not the gated projection or the transition (they keep the other configurations).
 *
 * A CTA is two warpgroups over 128-row tiles, 64 rows each (transition_wg.cu's structure).
 * Once per CTA: Wᵀ (C × O) into shared memory, transposed by scalar stores, in the
 * swizzled K-major layout of wgmma_ptx.cuh (B of dy = dout·W). Per tile, with the raw
 * inp and dout tiles cp.async'd (swizzled, rows ≥ M zero-filled) during the previous tile:
 *   1. all threads: y = LN(inp) from (mean, rstd) into the swizzled layout; the per-thread
 *      column sums of dout (dbias);
 *   2. each warpgroup issues dy (64 × C, fp32 registers) = dout·W (O/16 × m64n128k16, A
 *      its 64 dout rows, B = Wᵀ) and then dW_acc (64 × 128 or 64 × 64 fp32 registers,
 *      kept over all the CTA's tiles) += doutᵀ·y (8 × wgmma with BOTH operands MN-major:
 *      the dout and y tiles as stored ARE doutᵀ and yᵀ in wgmma's transposed form, see
 *      mf_wg_desc_mn); it waits only for dy, so the dW product runs during 3.;
 *   3. the LayerNorm backward from the dy fragments: x̂ re-read from the raw tile (the
 *      fragment positions are conflict-free in the swizzled layout), row sums across the
 *      quad by shuffles, dinp written in place over the raw tile (each thread overwrites
 *      exactly what it read), then 16-byte stores of the warpgroup's rows; column
 *      partials of dγ / dβ over the 8 row groups by shuffles, over the 8 warps through
 *      shared memory in warp order, over the CTA's tiles in tile order in registers.
 * The end: one partial row per CTA, [dW (O × C) | dbias (O) | dγ (C) | dβ (C)] fp32, and a
 * reduce kernel adds Σ over the CTAs in CTA order to the gradients (no atomics; the grid
 * is min(tiles, SMs), so two runs are bit-identical).
 * Work per 128-row tile: 2 × 128·128·O·2 FLOP on the tensor cores, 32 KB + 256·O B read,
 * 32 KB written. Not yet run on a GPU (see the report of branch h-lbw). */
#include "ln_gemm_bwd_cuda.h"

#include "fusion_util.cuh"
#include "ln_tile.cuh"
#include "wgmma_ptx.cuh"

#define LW_THREADS 256 /* two warpgroups */
#define LW_C 128       /* the one channel width this kernel takes */

/* Shared memory, byte offsets from a 1024-aligned base (operand blocks 1024-aligned):
 *   wt: Wᵀ, O/64 blocks of (C rows × 128 B); xs[2]: raw inp tiles (then dinp), C/64 blocks
 *   of (LG_BM rows × 128 B); ds[2]: dout tiles, O/64 blocks; ys: y, like xs;
 *   red: (8 warps, 2C) fp32 column partials; gb: γ, β (C each) fp32. */
template <int O>
struct lw_layout {
  static constexpr int C = LW_C;
  static constexpr int WT = C * O * 2, XT = LG_BM * C * 2, DT = LG_BM * O * 2, RED = 8 * 2 * C * 4;
  static constexpr int wt = 0, xs = WT, ds = xs + 2 * XT, ys = ds + 2 * DT, red = ys + XT;
  static constexpr int gb = red + RED, bytes = gb + 2 * C * 4 + 1024; /* + alignment slack */
  static constexpr int PL = O * C + O + 2 * C; /* partial row length (floats) */
};
static_assert(lw_layout<128>::bytes <= 227 * 1024, "ln_linear_bwd_wg: shared memory");
static_assert(2 * LW_C == LW_THREADS, "ln_linear_bwd_wg: one [dγ | dβ] column per thread");

struct lw_params {
  bf16 *dinp;        /* (M, C) or NULL */
  float *part;       /* (grid, PL) */
  const bf16 *dout;  /* (M, O) */
  const float *mean; /* (M) */
  const float *rstd; /* (M) */
  const bf16 *inp;   /* (M, C) */
  const bf16 *gamma; /* (C) */
  const bf16 *beta;  /* (C) */
  const bf16 *w;     /* (O, C) */
  int64_t M;
  int mode, need_dy, need_dw, need_db, need_gb; /* need_dy: dinp or dγ/dβ wanted, need_dw:
  dweight; both GEMMs run regardless (the wgmma pipeline stays free of branches: ptxas
  serialises wgmma it cannot prove waited for) */
};

/* 16 bytes global → shared by cp.async, zero-filled past `bytes` (0 or 16). */
static __device__ __forceinline__ void lw_cp16z(void *smem, const void *gmem, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(mf_smem_u32(smem)), "l"(gmem),
               "r"(bytes)
               : "memory");
}

/* Raw inp and dout rows of tile t into xs, ds (swizzled; rows ≥ M zero-filled), by cp.async. */
template <int O>
static __device__ __forceinline__ void lw_load(unsigned char *xs, unsigned char *ds, const lw_params &p,
                                               int64_t t, int64_t ntiles) {
  constexpr int C = LW_C;
  if (t >= ntiles) return;
  const int64_t m0 = t * LG_BM;
  const int rows = (int)(p.M - m0 < LG_BM ? p.M - m0 : LG_BM);
#pragma unroll
  for (int i = 0; i < LG_BM * (C / 8) / LW_THREADS; i++) {
    const int idx = (int)threadIdx.x + i * LW_THREADS, r = idx / (C / 8), ch = idx % (C / 8);
    const bool ok = r < rows;
    lw_cp16z(xs + (ch / 8) * (LG_BM * 128) + mf_sw128_chunk(r, ch % 8),
             p.inp + (ok ? (m0 + r) * C + ch * 8 : 0), ok ? 16 : 0);
  }
#pragma unroll
  for (int i = 0; i < LG_BM * (O / 8) / LW_THREADS; i++) {
    const int idx = (int)threadIdx.x + i * LW_THREADS, r = idx / (O / 8), ch = idx % (O / 8);
    const bool ok = r < rows;
    lw_cp16z(ds + (ch / 8) * (LG_BM * 128) + mf_sw128_chunk(r, ch % 8),
             p.dout + (ok ? (m0 + r) * O + ch * 8 : 0), ok ? 16 : 0);
  }
}

static __device__ __forceinline__ void lw_bar_wg(int wg) { /* the 128 threads of warpgroup wg */
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
}

/* Sums a, b, c, d over the 8 lanes of equal lane % 4 (the 8 row groups of a fragment). */
static __device__ __forceinline__ void lw_sum_rows4(float &a, float &b, float &c, float &d) {
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
    c += __shfl_xor_sync(0xffffffffu, c, o);
    d += __shfl_xor_sync(0xffffffffu, d, o);
  }
}

template <int O>
static __global__ void __launch_bounds__(LW_THREADS, 1) lw_kernel(const lw_params p) {
  typedef lw_layout<O> L;
  constexpr int C = LW_C, NQ = LW_THREADS / O, RPG = LG_BM / NQ; /* dbias: row groups */
  constexpr int DWN = O == 128 ? 128 : 64;                       /* dW columns per warpgroup */
  extern __shared__ unsigned char lw_raw[];
  unsigned char *sm = lw_raw + ((1024u - (mf_smem_u32(lw_raw) & 1023u)) & 1023u);
  float *red = (float *)(sm + L::red), *sg = (float *)(sm + L::gb), *sb = sg + C;
  const int tid = (int)threadIdx.x, lane = tid & 31, warp = lg_warp_id(), wg = warp >> 2, wl = warp & 3;
  const int q = lane & 3;
  const int64_t M = p.M, ntiles = (M + LG_BM - 1) / LG_BM;
  const uint32_t wt_u = mf_smem_u32(sm + L::wt), ys_u = mf_smem_u32(sm + L::ys);

  for (int c = tid; c < C; c += LW_THREADS) {
    sg[c] = p.mode == MF_LN_NONE ? 1.0f : mf_bf16_to_f32(p.gamma[c]);
    sb[c] = p.mode == MF_LN_FULL ? mf_bf16_to_f32(p.beta[c]) : 0.0f;
  }
  /* Wᵀ: element (c, o) at block o/64, swizzled row c */
  for (int idx = tid; idx < O * C / 8; idx += LW_THREADS) {
      const int o = idx / (C / 8), c8 = (idx % (C / 8)) * 8;
      const uint4 v = *(const uint4 *)(p.w + (int64_t)o * C + c8);
      const bf16 *e = (const bf16 *)&v;
#pragma unroll
      for (int j = 0; j < 8; j++)
        *(bf16 *)(sm + L::wt + (o / 64) * (C * 128) + mf_sw128(c8 + j, o % 64)) = e[j];
    }
  lw_load<O>(sm + L::xs, sm + L::ds, p, blockIdx.x, ntiles);
  mf_cp_async_commit();

  float dw[DWN / 2]; /* dW rows (O == 128: 64·wg ..) × columns (O == 64: 64·wg ..) */
#pragma unroll
  for (int i = 0; i < DWN / 2; i++) dw[i] = 0.0f;
  float pacc = 0.0f, dbacc = 0.0f; /* column tid of [dγ | dβ]; dbias column tid % O */
  int it = 0;
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x, it++) {
    const int buf = it & 1;
    unsigned char *xb = sm + L::xs + buf * L::XT, *db = sm + L::ds + buf * L::DT;
    const uint32_t db_u = mf_smem_u32(db);
    const int64_t m0 = t * LG_BM;
    const int rows = (int)(M - m0 < LG_BM ? M - m0 : LG_BM);
    mf_cp_async_wait<0>();
    mf_fence_proxy_async();
    __syncthreads(); /* tile t here; the previous tile done (ys, red, buffers buf ^ 1 free) */
    lw_load<O>(sm + L::xs + (buf ^ 1) * L::XT, sm + L::ds + (buf ^ 1) * L::DT, p, t + gridDim.x, ntiles);
    mf_cp_async_commit();

    /* 1. y = LN(inp) (rows ≥ M: zeros) in the layout of xs; dbias column sums */
    {
#pragma unroll 2
      for (int i = 0; i < LG_BM * (C / 8) / LW_THREADS; i++) {
        const int idx = tid + i * LW_THREADS, r = idx / (C / 8), ch = idx % (C / 8);
        const int off = (ch / 8) * (LG_BM * 128) + (int)mf_sw128_chunk(r, ch % 8);
        uint4 v = *(const uint4 *)(xb + off);
        if (r < rows) {
          const float mu = p.mean[m0 + r], rs = p.rstd[m0 + r];
          uint32_t *u = (uint32_t *)&v;
#pragma unroll
          for (int j = 0; j < 4; j++) {
            const int c = ch * 8 + 2 * j;
            const __nv_bfloat162 x2 = *(const __nv_bfloat162 *)&u[j];
            const __nv_bfloat162 y2 = __floats2bfloat162_rn((__low2float(x2) - mu) * rs * sg[c] + sb[c],
                                                            (__high2float(x2) - mu) * rs * sg[c + 1] + sb[c + 1]);
            u[j] = *(const uint32_t *)&y2;
          }
        } else {
          v = make_uint4(0u, 0u, 0u, 0u);
        }
        *(uint4 *)(sm + L::ys + off) = v;
      }
    }
    if (p.need_db) {
      const int o = tid % O, rg = tid / O;
      const unsigned char *col = db + (o / 64) * (LG_BM * 128);
      float s = 0.0f;
#pragma unroll 8
      for (int r = rg * RPG; r < (rg + 1) * RPG; r++) s += mf_bf16_to_f32(*(const bf16 *)(col + mf_sw128(r, o % 64)));
      dbacc += s;
    }
    mf_fence_proxy_async();
    __syncthreads(); /* y ready */

    /* 2. dy = dout·W (this warpgroup's 64 rows); dW_acc += doutᵀ·y (all 128 rows) */
    float dy[C / 2];
    mf_wg_fence();
    {
#pragma unroll
      for (int k = 0; k < O / 16; k++) {
        const int kb = k / 4, kk = k % 4;
        mf_wg_ss_n128(dy, mf_wg_desc(db_u + kb * (LG_BM * 128) + wg * 64 * 128 + kk * 32),
                      mf_wg_desc(wt_u + kb * (C * 128) + kk * 32), k > 0);
      }
      mf_wg_commit();
    }
    {
      const uint32_t a_u = db_u + (O == 128 ? wg : 0) * (LG_BM * 128);
      const uint32_t b_u = ys_u + (O == 128 ? 0 : wg) * (LG_BM * 128);
#pragma unroll
      for (int k = 0; k < LG_BM / 16; k++) {
        const uint64_t da = mf_wg_desc_mn(a_u + k * 2048, LG_BM * 128);
        const uint64_t dbd = mf_wg_desc_mn(b_u + k * 2048, LG_BM * 128);
        if constexpr (O == 128) mf_wg_ss_n128_tt(dw, da, dbd, 1);
        else mf_wg_ss_n64_tt(dw, da, dbd, 1);
      }
      mf_wg_commit();
    }

    /* 3. the LayerNorm backward of rows ra, rb = ra + 8 from dy */
    mf_wg_wait<1>(); /* dy done; the dW product may still run */
    mf_wg_pin(dy);
    if (p.need_dy) {
      const int ra = wg * 64 + wl * 16 + (lane >> 2), rb = ra + 8;
      const bool oka = ra < rows, okb = rb < rows;
      const float mua = oka ? p.mean[m0 + ra] : 0.0f, rsa = oka ? p.rstd[m0 + ra] : 0.0f;
      const float mub = okb ? p.mean[m0 + rb] : 0.0f, rsb = okb ? p.rstd[m0 + rb] : 0.0f;
      float sga = 0.0f, sgxa = 0.0f, sgb = 0.0f, sgxb = 0.0f;
#pragma unroll
      for (int i = 0; i < C / 8; i++) {
        const int c = 8 * i + 2 * q, blk = (c / 64) * (LG_BM * 128);
        const __nv_bfloat162 xa = *(const __nv_bfloat162 *)(xb + blk + mf_sw128(ra, c % 64));
        const __nv_bfloat162 xbv = *(const __nv_bfloat162 *)(xb + blk + mf_sw128(rb, c % 64));
        const float xa0 = (__low2float(xa) - mua) * rsa, xa1 = (__high2float(xa) - mua) * rsa;
        const float xb0 = (__low2float(xbv) - mub) * rsb, xb1 = (__high2float(xbv) - mub) * rsb;
        const float g0 = sg[c], g1 = sg[c + 1];
        const float ga0 = dy[4 * i] * g0, ga1 = dy[4 * i + 1] * g1;
        const float gb0 = dy[4 * i + 2] * g0, gb1 = dy[4 * i + 3] * g1;
        sga += ga0 + ga1;
        sgxa += ga0 * xa0 + ga1 * xa1;
        sgb += gb0 + gb1;
        sgxb += gb0 * xb0 + gb1 * xb1;
        if (p.need_gb) { /* column partials over the warp's 16 rows */
          float q0 = dy[4 * i] * xa0 + dy[4 * i + 2] * xb0, q1 = dy[4 * i + 1] * xa1 + dy[4 * i + 3] * xb1;
          float b0 = dy[4 * i] + dy[4 * i + 2], b1 = dy[4 * i + 1] + dy[4 * i + 3];
          lw_sum_rows4(q0, q1, b0, b1);
          if (lane < 4) {
            *(float2 *)(red + warp * 2 * C + c) = make_float2(q0, q1);
            *(float2 *)(red + warp * 2 * C + C + c) = make_float2(b0, b1);
          }
        }
      }
      if (p.dinp) {
#pragma unroll
        for (int o = 1; o < 4; o <<= 1) {
          sga += __shfl_xor_sync(0xffffffffu, sga, o);
          sgxa += __shfl_xor_sync(0xffffffffu, sgxa, o);
          sgb += __shfl_xor_sync(0xffffffffu, sgb, o);
          sgxb += __shfl_xor_sync(0xffffffffu, sgxb, o);
        }
        sga *= 1.0f / C;
        sgxa *= 1.0f / C;
        sgb *= 1.0f / C;
        sgxb *= 1.0f / C;
#pragma unroll
        for (int i = 0; i < C / 8; i++) { /* dinp over the raw rows, in place */
          const int c = 8 * i + 2 * q, blk = (c / 64) * (LG_BM * 128);
          __nv_bfloat162 *pa = (__nv_bfloat162 *)(xb + blk + mf_sw128(ra, c % 64));
          __nv_bfloat162 *pb = (__nv_bfloat162 *)(xb + blk + mf_sw128(rb, c % 64));
          const __nv_bfloat162 xa = *pa, xbv = *pb;
          const float xa0 = (__low2float(xa) - mua) * rsa, xa1 = (__high2float(xa) - mua) * rsa;
          const float xb0 = (__low2float(xbv) - mub) * rsb, xb1 = (__high2float(xbv) - mub) * rsb;
          const float g0 = sg[c], g1 = sg[c + 1];
          *pa = __floats2bfloat162_rn(rsa * (dy[4 * i] * g0 - sga - xa0 * sgxa),
                                      rsa * (dy[4 * i + 1] * g1 - sga - xa1 * sgxa));
          *pb = __floats2bfloat162_rn(rsb * (dy[4 * i + 2] * g0 - sgb - xb0 * sgxb),
                                      rsb * (dy[4 * i + 3] * g1 - sgb - xb1 * sgxb));
        }
        lw_bar_wg(wg);
#pragma unroll 4
        for (int i = 0; i < 64 * (C / 8) / 128; i++) {
          const int idx = (tid & 127) + i * 128, r = wg * 64 + idx / (C / 8), ch = idx % (C / 8);
          if (r < rows)
            *(uint4 *)(p.dinp + (m0 + r) * C + ch * 8) =
                *(const uint4 *)(xb + (ch / 8) * (LG_BM * 128) + mf_sw128_chunk(r, ch % 8));
        }
      }
    }
    if (p.need_gb) {
      __syncthreads(); /* red complete */
      float s = 0.0f;
#pragma unroll
      for (int w = 0; w < 8; w++) s += red[w * 2 * C + tid];
      pacc += s;
    }
    mf_wg_wait<0>(); /* before the next tile's barrier lets ys and this dout buffer change */
    mf_wg_pin(dw);
  }
  mf_cp_async_wait<0>();

  /* the CTA's partial row [dW | dbias | dγ | dβ] */
  float *pr = p.part + (int64_t)blockIdx.x * L::PL;
  if (p.need_dw) {
    const int oa = (O == 128 ? wg * 64 : 0) + wl * 16 + (lane >> 2), c0 = O == 128 ? 0 : wg * 64;
#pragma unroll
    for (int i = 0; i < DWN / 8; i++) {
      const int c = c0 + 8 * i + 2 * q;
      *(float2 *)(pr + (int64_t)oa * C + c) = make_float2(dw[4 * i], dw[4 * i + 1]);
      *(float2 *)(pr + (int64_t)(oa + 8) * C + c) = make_float2(dw[4 * i + 2], dw[4 * i + 3]);
    }
  }
  __syncthreads(); /* red free */
  red[tid] = dbacc;
  __syncthreads();
  if (p.need_db && tid < O) {
    float s = 0.0f;
#pragma unroll
    for (int g = 0; g < NQ; g++) s += red[g * O + tid];
    pr[O * C + tid] = s;
  }
  if (p.need_gb) pr[O * C + O + tid] = pacc;
}

/* grad (+)= Σ over the CTAs' partial rows, in CTA order; one thread per column of
 * [dW | dbias | dγ | dβ] (absent gradients skipped). */
static __global__ void lw_reduce_kernel(float *__restrict__ dweight, float *__restrict__ dbias,
                                        float *__restrict__ dgamma, float *__restrict__ dbeta,
                                        const float *__restrict__ part, int parts, int O, int C) {
  const int PL = O * C + O + 2 * C, j = (int)(blockIdx.x * blockDim.x + threadIdx.x);
  float *dst = NULL;
  if (j < O * C) dst = dweight ? dweight + j : NULL;
  else if (j < O * C + O) dst = dbias ? dbias + (j - O * C) : NULL;
  else if (j < O * C + O + C) dst = dgamma ? dgamma + (j - O * C - O) : NULL;
  else if (j < PL) dst = dbeta ? dbeta + (j - O * C - O - C) : NULL;
  if (!dst) return;
  float s = 0.0f;
#pragma unroll 8
  for (int k = 0; k < parts; k++) s += part[(int64_t)k * PL + j];
  *dst += s;
}

static int lw_aligned(const void *p) { return !p || ((uintptr_t)p & 15) == 0; }

extern "C" int mf_ln_linear_bwd_wg_supported(int C, int O, mf_ln_mode mode, const void *inp,
                                             const void *dout, const void *w, const void *dinp) {
  return C == LW_C && (O == 64 || O == 128) &&
         (mode == MF_LN_FULL || mode == MF_LN_SCALE || mode == MF_LN_NONE) && lw_aligned(inp) &&
         lw_aligned(dout) && lw_aligned(w) && lw_aligned(dinp);
}

extern "C" size_t mf_ln_linear_bwd_wg_workspace(int C, int O) {
  if (C != LW_C || (O != 64 && O != 128)) return 0;
  return (size_t)mf_sm_count() * (size_t)(O * C + O + 2 * C) * sizeof(float);
}

template <int O>
static void lw_launch(const lw_params &p, int grid, cudaStream_t s) {
  static int attr = 0;
  const int smem = lw_layout<O>::bytes;
  if (!attr) {
    MF_CHECK_CUDA(cudaFuncSetAttribute(lw_kernel<O>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    attr = 1;
  }
  lw_kernel<O><<<grid, LW_THREADS, smem, s>>>(p);
  MF_CHECK_LAUNCH();
}

extern "C" void mf_ln_linear_bwd_wg_cuda(bf16 *dinp, float *dgamma, float *dbeta, float *dweight,
                                         float *dbias, float *part, size_t part_bytes,
                                         const bf16 *dout, const float *mean, const float *rstd,
                                         const bf16 *inp, const bf16 *gamma, const bf16 *beta,
                                         const bf16 *weight, int64_t M, int C, int O,
                                         mf_ln_mode mode, cudaStream_t stream) {
  MF_ASSERT(mf_ln_linear_bwd_wg_supported(C, O, mode, inp, dout, weight, dinp),
            "ln_linear_bwd_wg: unsupported C=%d O=%d mode=%d (or alignment)", C, O, (int)mode);
  MF_ASSERT(part_bytes >= mf_ln_linear_bwd_wg_workspace(C, O), "ln_linear_bwd_wg: partials too small");
  MF_ASSERT(dout && mean && rstd && inp && weight && part, "ln_linear_bwd_wg: NULL argument");
  MF_ASSERT(mode == MF_LN_NONE || gamma, "ln_linear_bwd_wg: gamma required");
  MF_ASSERT(mode != MF_LN_FULL || beta, "ln_linear_bwd_wg: beta required");
  if (mode == MF_LN_NONE) dgamma = NULL;
  if (mode != MF_LN_FULL) dbeta = NULL;
  if (M <= 0 || (!dinp && !dgamma && !dbeta && !dweight && !dbias)) return;
  const int64_t ntiles = (M + LG_BM - 1) / LG_BM;
  const int grid = (int)(ntiles < mf_sm_count() ? ntiles : mf_sm_count());
  lw_params p = {dinp, part, dout, mean, rstd, inp, gamma, beta, weight, M, (int)mode,
                 dinp || dgamma || dbeta, dweight != NULL, dbias != NULL, dgamma || dbeta};
  if (O == 128) lw_launch<128>(p, grid, stream);
  else lw_launch<64>(p, grid, stream);
  const int PL = O * C + O + 2 * C;
  lw_reduce_kernel<<<(PL + 255) / 256, 256, 0, stream>>>(dweight, dbias, dgamma, dbeta, part, grid, O, C);
  MF_CHECK_LAUNCH();
}
