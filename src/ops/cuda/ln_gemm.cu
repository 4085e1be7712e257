/* ln_gemm.cu — EvoFusion's fused forward kernels on mma.sync tensor cores: LayerNorm +
 * Linear with the bias / sigmoid-gate / SwiGLU epilogue (W resident in shared memory), and
 * the whole SwiGLU transition (hidden chunked through shared memory, weights streamed from
 * L2). Persistent CTAs, cp.async row tiles, ldmatrix from padded shared memory, fp32
 * accumulation and LayerNorm statistics. See ln_gemm_cuda.h. Forward only; the backwards
 * stay in ln_linear.cu / transition.cu. Not the CPU reference. */
#include "ln_gemm_cuda.h"

#include <stdlib.h>

#include "fusion_util.cuh"
#include "ln_tile.cuh"
#include "mma_ptx.cuh"

#define LG_WARPS 8    /* 4 (rows) × 2 (columns) warps, 32 rows each */
#define LG_THREADS (LG_WARPS * 32)
#define LG_SMEM_MAX (227 * 1024)
#define TF_HC 64      /* hidden channels per transition chunk */

/* ================================================================ PTX helpers */

static __device__ __forceinline__ void lg_bar_pair(int id) { /* the 2 warps sharing 32 rows */
  asm volatile("bar.sync %0, 64;\n" ::"r"(id) : "memory");
}
static __device__ __forceinline__ void lg_bar_group(int id, int threads) { /* a warp group */
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/* a = 0: a warp's MT × NT m16n8 fp32 accumulator tiles */
template <int MT, int NT>
static __device__ __forceinline__ void lg_zero(float (&a)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) a[mt][nt][e] = 0.0f;
}

/* acc (2 m16 × 2·NB n8 tiles: the warp's 32 rows × 16·NB columns) += A·Bᵀ over K:
 * A = rows row0.. of the bf16 tile sa (., lda), columns 0..K; B = for each nb the 16 rows
 * brow[nb].. of the bf16 tile sb (., ldb) (one weight row per output column). The k loop
 * stays rolled (a small hot loop: the fully unrolled bodies of a first version ran at a
 * fraction of the tensor rate) and double-buffers the fragments: the ldmatrix of step
 * k + 16 is issued before the mma of step k. K % 32 == 0. */
template <int K, int NB>
static __device__ __forceinline__ void lg_warp_gemm(float (&acc)[2][2 * NB][4], const bf16 *sa,
                                                    int lda, int row0, const bf16 *sb, int ldb,
                                                    const int (&brow)[NB], int lane) {
  static_assert(K % 32 == 0, "lg_warp_gemm: K % 32");
  const uint32_t a0 = mf_smem_u32(sa + (row0 + (lane & 15)) * lda + (lane >> 4) * 8);
  const uint32_t a1 = a0 + 16 * lda * (uint32_t)sizeof(bf16);
  uint32_t bb[NB];
#pragma unroll
  for (int nb = 0; nb < NB; nb++)
    bb[nb] = mf_smem_u32(sb + (brow[nb] + (lane & 7) + ((lane >> 4) << 3)) * ldb +
                         ((lane >> 3) & 1) * 8);
  uint32_t fa[2][2][4], fb[2][NB][4];
#define LG_LOAD(S, K0)                                                        \
  do {                                                                        \
    const uint32_t o_ = (uint32_t)(K0) * (uint32_t)sizeof(bf16);              \
    mf_ldsm_x4(fa[S][0], a0 + o_);                                              \
    mf_ldsm_x4(fa[S][1], a1 + o_);                                              \
    _Pragma("unroll") for (int nb = 0; nb < NB; nb++) mf_ldsm_x4(fb[S][nb], bb[nb] + o_); \
  } while (0)
#define LG_MMA(S)                                                             \
  do {                                                                        \
    _Pragma("unroll") for (int nb = 0; nb < NB; nb++)                          \
      _Pragma("unroll") for (int mt = 0; mt < 2; mt++) {                      \
        mf_mma_bf16(acc[mt][2 * nb], fa[S][mt], fb[S][nb][0], fb[S][nb][1]);       \
        mf_mma_bf16(acc[mt][2 * nb + 1], fa[S][mt], fb[S][nb][2], fb[S][nb][3]);   \
      }                                                                       \
  } while (0)
  LG_LOAD(0, 0);
#pragma unroll 1
  for (int k0 = 0; k0 < K; k0 += 32) {
    LG_LOAD(1, k0 + 16);
    LG_MMA(0);
    LG_LOAD(0, k0 + 32 < K ? k0 + 32 : 0); /* the last one is a harmless reload of step 0 */
    LG_MMA(1);
  }
#undef LG_LOAD
#undef LG_MMA
}

/* ================================================================ LN + GEMM + epilogue */

/* EPI 0: bias; 1: sigmoid gate with row mask; 2: SwiGLU. The CTA's 8 warps form `halves`
 * independent groups of G = 8 / halves warps (1 group: 128-row tiles; 2 groups: 64-row tiles
 * each, sharing the resident W but synchronising only among themselves through named
 * barriers, so one group's LayerNorm overlaps the other's GEMM). Warp (wm, wn) of a group
 * owns rows 32·wm.. of the group's tile and, per pass of 2·OW output columns starting at o0,
 * output columns o0 + OW·wn .. + OW (for EPI 1/2 these need accumulator columns from both
 * halves of W: the p / a rows and the g / b rows O later). */
template <int C, int EPI>
static __global__ void __launch_bounds__(LG_THREADS, 1)
ln_gemm_mma_kernel(bf16 *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
                   const bf16 *__restrict__ x, const bf16 *__restrict__ gamma,
                   const bf16 *__restrict__ beta, const bf16 *__restrict__ w,
                   const bf16 *__restrict__ bias, const uint8_t *__restrict__ mask, int64_t M,
                   int O, int mode, int nbuf, int halves) {
  constexpr int LDA = C + 8, OW = EPI ? 32 : 64, LDO = OW + 8, NTO = OW / 8;
  extern __shared__ __align__(16) unsigned char lg_smem[];
  const int nacc = EPI ? 2 * O : O;
  const int lane = threadIdx.x & 31, warp = lg_warp_id();
  const int G = LG_WARPS / halves, half = warp / G, hw = warp - half * G;
  const int wm = hw % (G / 2), wn = hw / (G / 2), bm = 16 * G, gtid = hw * 32 + lane;
  bf16 *sw = (bf16 *)lg_smem;                                    /* (nacc, LDA) W, resident */
  bf16 *xa = sw + nacc * LDA + half * (bm * LDA + nbuf * bm * C + G * 32 * LDO); /* (bm, LDA) */
  bf16 *xs = xa + bm * LDA;                                      /* (nbuf, bm, C) raw rows */
  bf16 *ow = xs + nbuf * bm * C + hw * 32 * LDO;                 /* (32, LDO) warp staging */
  const int64_t ntiles = (M + bm - 1) / bm;
  const int64_t t0 = (int64_t)blockIdx.x * halves + half, tstride = (int64_t)gridDim.x * halves;
  float g[2 * (C / 64)], bb[2 * (C / 64)];
  lg_ln_params<C>(g, bb, gamma, beta, mode, lane);

  /* W, each CTA starting at another row (all CTAs at once on the same L2 lines would queue) */
  const int rot = (int)(blockIdx.x * 16u % (unsigned)nacc);
  for (int idx = threadIdx.x; idx < nacc * (C / 8); idx += LG_THREADS) {
    const int n0 = idx / (C / 8), k8 = (idx - n0 * (C / 8)) * 8;
    const int n = n0 + rot < nacc ? n0 + rot : n0 + rot - nacc;
    lg_cp16(sw + n * LDA + k8, w + (int64_t)n * C + k8);
  }
  mf_cp_async_commit();
  lg_load_tile<C>(xs, x, t0, ntiles, M, bm, gtid);
  mf_cp_async_commit();
  if (nbuf == 2) {
    lg_load_tile<C>(xs + bm * C, x, t0 + tstride, ntiles, M, bm, gtid);
    mf_cp_async_commit();
    mf_cp_async_wait<2>();
  } else {
    mf_cp_async_wait<1>();
  }
  __syncthreads(); /* W landed (loaded by every thread of the CTA) */
  int it = 0;
  for (int64_t t = t0; t < ntiles; t += tstride, it++) {
    bf16 *xb = xs + (nbuf == 2 ? (it & 1) : 0) * bm * C;
    if (nbuf == 2) mf_cp_async_wait<1>(); else mf_cp_async_wait<0>();
    lg_bar_group(1 + half, 32 * G); /* tile t's rows landed; the group is done with xa */
    const int64_t m0 = t * bm;
    lg_ln_tile<C>(xa, xb, mean, rstd, m0, M, g, bb, mode, hw, lane);
    lg_bar_group(1 + half, 32 * G); /* xa ready, xb free */
    lg_load_tile<C>(xb, x, t + (int64_t)nbuf * tstride, ntiles, M, bm, gtid);
    mf_cp_async_commit();

    for (int o0 = 0; o0 < O; o0 += 2 * OW) {
      float acc[2][8][4];
      lg_zero(acc);
      int brow[4]; /* weight rows of the warp's 4 column blocks (blocks past O: row 0, unused) */
#pragma unroll
      for (int nb = 0; nb < 4; nb++) {
        const int ocol = EPI ? o0 + wn * OW + (nb & 1) * 16 : o0 + wn * OW + nb * 16;
        brow[nb] = ocol >= O ? 0 : EPI && nb >= 2 ? O + ocol : ocol;
      }
      lg_warp_gemm<C, 4>(acc, xa, LDA, wm * 32, sw, LDA, brow, lane);
      /* epilogue in registers → the warp's staging block (32, OW) */
#pragma unroll
      for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int rl = mt * 16 + h * 8 + (lane >> 2);
          const int64_t r = m0 + wm * 32 + rl;
          bool keep = true;
          if (EPI == 1) keep = r < M && (!mask || mask[r]);
#pragma unroll
          for (int nt = 0; nt < NTO; nt++) {
            const int col = nt * 8 + 2 * (lane & 3);
            float v0 = acc[mt][nt][2 * h], v1 = acc[mt][nt][2 * h + 1];
            if (EPI == 0) {
              const int oc = o0 + wn * OW + col;
              if (bias && oc < O) {
                v0 += mf_bf16_to_f32(bias[oc]);
                v1 += mf_bf16_to_f32(bias[oc + 1]);
              }
            } else if (EPI == 1) {
              v0 = keep ? mf_sigmoidf_fast(acc[mt][nt + 4][2 * h]) * v0 : 0.0f;
              v1 = keep ? mf_sigmoidf_fast(acc[mt][nt + 4][2 * h + 1]) * v1 : 0.0f;
            } else {
              v0 = v0 * mf_sigmoidf_fast(v0) * acc[mt][nt + 4][2 * h];
              v1 = v1 * mf_sigmoidf_fast(v1) * acc[mt][nt + 4][2 * h + 1];
            }
            *(__nv_bfloat162 *)(ow + rl * LDO + col) = __floats2bfloat162_rn(v0, v1);
          }
        }
      __syncwarp();
      constexpr int CPR = OW / 8; /* 16-byte pieces per staged row */
#pragma unroll
      for (int idx = lane; idx < 32 * CPR; idx += 32) {
        const int rl = idx / CPR, ch = idx - rl * CPR;
        const int64_t r = m0 + wm * 32 + rl;
        const int col = o0 + wn * OW + ch * 8;
        if (r < M && col < O) *(uint4 *)(out + r * O + col) = *(const uint4 *)(ow + rl * LDO + ch * 8);
      }
      __syncwarp();
    }
  }
  mf_cp_async_wait<0>();
}

/* Warp groups per ln_gemm CTA (1 or 2; see the kernel): 2, or MF_LN_GEMM_HALVES from the
 * environment (read once; for the lab and the benchmark). */
static int lg_halves(void) {
  static int h = 0;
  if (!h) {
    const char *e = getenv("MF_LN_GEMM_HALVES");
    h = e && atoi(e) == 1 ? 1 : 2;
  }
  return h;
}

/* Shared memory of ln_gemm for nbuf raw-tile buffers (the same for 1 or 2 warp groups). */
static size_t lg_smem_bytes(int C, int O, int epi, int nbuf) {
  const int nacc = epi ? 2 * O : O, ldo = (epi ? 32 : 64) + 8;
  return ((size_t)nacc * (C + 8) + (size_t)LG_BM * (C + 8) + (size_t)nbuf * LG_BM * C +
          (size_t)LG_WARPS * 32 * ldo) * sizeof(bf16);
}
static int lg_nbuf(int C, int O, int epi) {
  if (lg_smem_bytes(C, O, epi, 2) <= LG_SMEM_MAX) return 2;
  if (lg_smem_bytes(C, O, epi, 1) <= LG_SMEM_MAX) return 1;
  return 0;
}

extern "C" int mf_ln_gemm_mma_supported(int C, int O, int epilogue, mf_ln_mode mode,
                                        const void *x, const void *out, const void *w) {
  return (C == 64 || C == 128 || C == 192 || C == 256) && O > 0 && O % 16 == 0 &&
         epilogue >= 0 && epilogue <= 2 && mode >= MF_LN_FULL && mode <= MF_LN_IDENTITY &&
         lg_nbuf(C, O, epilogue) > 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)out % 16 == 0 &&
         (uintptr_t)w % 16 == 0;
}

template <int C, int EPI>
static void lg_launch(bf16 *out, float *mean, float *rstd, const bf16 *x, const bf16 *gamma,
                      const bf16 *beta, const bf16 *w, const bf16 *bias, const uint8_t *mask,
                      int64_t M, int O, int mode, cudaStream_t s) {
  const int nbuf = lg_nbuf(C, O, EPI);
  const size_t smem = lg_smem_bytes(C, O, EPI, nbuf);
  MF_CHECK_CUDA(cudaFuncSetAttribute(ln_gemm_mma_kernel<C, EPI>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const int halves = lg_halves();
  const int64_t ntiles = (M + LG_BM - 1) / LG_BM;
  const int grid = (int)(ntiles < mf_sm_count() ? ntiles : mf_sm_count());
  ln_gemm_mma_kernel<C, EPI><<<grid, LG_THREADS, smem, s>>>(out, mean, rstd, x, gamma, beta, w,
                                                            bias, mask, M, O, mode, nbuf, halves);
  MF_CHECK_LAUNCH();
}

extern "C" void mf_ln_gemm_mma_cuda(bf16 *out, float *mean, float *rstd, const bf16 *x,
                                    const bf16 *gamma, const bf16 *beta, const bf16 *w,
                                    const bf16 *bias, const uint8_t *mask, int64_t M, int C, int O,
                                    mf_ln_mode mode, int epilogue, cudaStream_t stream) {
  MF_ASSERT(mf_ln_gemm_mma_supported(C, O, epilogue, mode, x, out, w),
            "ln_gemm_mma: unsupported C=%d O=%d epilogue=%d mode=%d (or alignment)", C, O,
            epilogue, (int)mode);
  lg_check_ln_args("ln_gemm_mma", mode, gamma, beta, mean, rstd, 0);
  if (M <= 0) return;
  if (mode == MF_LN_IDENTITY) mean = rstd = NULL;
  const int md = (int)mode;
#define LG_CASE(C_)                                                                            \
  if (C == C_) {                                                                               \
    if (epilogue == 0) lg_launch<C_, 0>(out, mean, rstd, x, gamma, beta, w, bias, mask, M, O, md, stream); \
    else if (epilogue == 1) lg_launch<C_, 1>(out, mean, rstd, x, gamma, beta, w, bias, mask, M, O, md, stream); \
    else lg_launch<C_, 2>(out, mean, rstd, x, gamma, beta, w, bias, mask, M, O, md, stream);   \
    return;                                                                                    \
  }
  LG_CASE(64)
  LG_CASE(128)
  LG_CASE(192)
  LG_CASE(256)
#undef LG_CASE
}

/* ================================================================ fused transition */

/* Per 128-row tile: LN → xa; then for each chunk j of TF_HC hidden channels:
 *   [a | b] (128, 2·64) = x̂·[W_a; W_b]_jᵀ  (warp: 32 rows × (32 a + 32 b) columns)
 *   h_j = silu(a) ⊙ b → hs (128, 64) bf16   (the two warps of a row block pair up)
 *   out_acc (128, C) += h_j·W_o[:, j]ᵀ     (warp: 32 rows × C/2 columns, in registers)
 * The weight chunk j+1 (and, at j = 0, the next tile's raw rows and this tile's residual)
 * load by cp.async while chunk j computes. Epilogue: + residual (accumulate), bf16, staged
 * in os (the residual's buffer) and stored 16 bytes at a time. */
template <int C>
struct tf_layout {
  static constexpr int LDA = C + 8, LDH = TF_HC + 8;
  static constexpr size_t wab = (size_t)2 * TF_HC * LDA; /* (128, LDA) per buffer */
  static constexpr size_t wo = (size_t)C * LDH;          /* (C, LDH) per buffer */
  static constexpr size_t xa = (size_t)LG_BM * LDA, hs = (size_t)LG_BM * LDH;
  static constexpr size_t xs = (size_t)LG_BM * C, os = (size_t)LG_BM * LDA;
  static constexpr size_t bytes = (2 * (wab + wo) + xa + hs + xs + os) * sizeof(bf16);
};

template <int C>
static __device__ __forceinline__ void tf_load_w(bf16 *swab, bf16 *swo, const bf16 *__restrict__ w_ab,
                                                 const bf16 *__restrict__ w_o, int j, int Hd) {
  constexpr int LDA = C + 8, LDH = TF_HC + 8;
  static_assert(2 * TF_HC * (C / 8) % LG_THREADS == 0 && C * (TF_HC / 8) % LG_THREADS == 0,
                "tf_load_w");
#pragma unroll
  for (int i = 0; i < 2 * TF_HC * (C / 8) / LG_THREADS; i++) {
    const int idx = (int)threadIdx.x + i * LG_THREADS;
    const int n = idx / (C / 8), k8 = (idx - n * (C / 8)) * 8;
    const int row = n < TF_HC ? j * TF_HC + n : Hd + j * TF_HC + (n - TF_HC);
    lg_cp16(swab + n * LDA + k8, w_ab + (int64_t)row * C + k8);
  }
#pragma unroll
  for (int i = 0; i < C * (TF_HC / 8) / LG_THREADS; i++) {
    const int idx = (int)threadIdx.x + i * LG_THREADS;
    const int n = idx / (TF_HC / 8), k8 = (idx - n * (TF_HC / 8)) * 8;
    lg_cp16(swo + n * LDH + k8, w_o + (int64_t)n * Hd + j * TF_HC + k8);
  }
}

template <int C>
static __global__ void __launch_bounds__(LG_THREADS, 1)
transition_fused_kernel(bf16 *out, float *__restrict__ mean, float *__restrict__ rstd,
                        const bf16 *x, const bf16 *__restrict__ gamma,
                        const bf16 *__restrict__ beta, const bf16 *__restrict__ w_ab,
                        const bf16 *__restrict__ w_o, int64_t M, int Hd, int mode,
                        int accumulate) {
  /* out and x are not __restrict__: they may be the same tensor */
  typedef tf_layout<C> L;
  constexpr int LDA = L::LDA, LDH = L::LDH, WOUT = C / 2, NB2 = WOUT / 16;
  extern __shared__ __align__(16) unsigned char lg_smem[];
  bf16 *swab0 = (bf16 *)lg_smem;      /* 2 × (2·TF_HC, LDA) [W_a; W_b] chunk buffers */
  bf16 *swo0 = swab0 + 2 * L::wab;     /* 2 × (C, LDH) W_o chunk buffers */
  bf16 *xa = swo0 + 2 * L::wo;         /* (LG_BM, LDA) x̂ */
  bf16 *hs = xa + L::xa;               /* (LG_BM, LDH) h chunk */
  bf16 *xs = hs + L::hs;               /* (LG_BM, C) raw rows of the next tile */
  bf16 *os = xs + L::xs;               /* (LG_BM, LDA) residual / output staging */
  const int lane = threadIdx.x & 31, warp = lg_warp_id(), wm = warp & 3, wn = warp >> 2;
  const int64_t ntiles = (M + LG_BM - 1) / LG_BM;
  const int nch = Hd / TF_HC;
  float g[2 * (C / 64)], bb[2 * (C / 64)];
  lg_ln_params<C>(g, bb, gamma, beta, mode, lane);

  /* Tile t takes its hidden chunks in the order t % nch, t % nch + 1, … (mod nch): the CTAs
   * working at the same time stream different chunks from L2 instead of all the same lines,
   * and each row's summation order still depends on its tile alone. */
  tf_load_w<C>(swab0, swo0, w_ab, w_o, (int)(blockIdx.x % (unsigned)nch), Hd);
  lg_load_tile<C>(xs, x, blockIdx.x, ntiles, M, LG_BM, threadIdx.x);
  mf_cp_async_commit();
  mf_cp_async_wait<0>();
  __syncthreads();
  int q = 0; /* chunks done by this CTA: weight buffer q & 1 */
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
    const int64_t m0 = t * LG_BM;
    const int rows = (int)(M - m0 < LG_BM ? M - m0 : LG_BM);
    lg_ln_tile<C>(xa, xs, mean, rstd, m0, M, g, bb, mode, warp, lane);
    __syncthreads(); /* xa ready; xs, os, hs and the other weight buffer free */
    float acc[2][C / 16][4]; /* out block: 32 rows × C/2 columns */
    lg_zero(acc);

    const int s0 = (int)(t % nch);
    for (int j = 0; j < nch; j++, q++) {
      const int buf = q & 1;
      const int jn = j + 1 < nch ? (s0 + j + 1) % nch : (int)((t + gridDim.x) % nch);
      if (j > 0) __syncthreads(); /* chunk j−1 done: weight buffer buf ^ 1 and hs free */
      tf_load_w<C>(swab0 + (buf ^ 1) * L::wab, swo0 + (buf ^ 1) * L::wo, w_ab, w_o, jn, Hd);
      if (j == 0) {
        lg_load_tile<C>(xs, x, t + gridDim.x, ntiles, M, LG_BM, threadIdx.x);
        if (accumulate) lg_load_residual<C, LG_THREADS>(os, LDA, out, m0, rows, (int)threadIdx.x);
      }
      mf_cp_async_commit();
      mf_cp_async_wait<1>(); /* everything but the group just issued: weight chunk j is here */
      __syncthreads();

      /* [a | b] = x̂·[W_a; W_b]_jᵀ */
      float ab[2][8][4];
      lg_zero(ab);
      {
        const int brow[4] = {wn * 32, wn * 32 + 16, TF_HC + wn * 32, TF_HC + wn * 32 + 16};
        lg_warp_gemm<C, 4>(ab, xa, LDA, wm * 32, swab0 + buf * L::wab, LDA, brow, lane);
      }
      /* h = silu(a) ⊙ b → hs rows 32·wm.., hidden columns 32·wn.. */
#pragma unroll
      for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int rl = wm * 32 + mt * 16 + h * 8 + (lane >> 2);
#pragma unroll
          for (int nt = 0; nt < 4; nt++) {
            const float a0 = ab[mt][nt][2 * h], a1 = ab[mt][nt][2 * h + 1];
            const float h0 = a0 * mf_sigmoidf_fast(a0) * ab[mt][nt + 4][2 * h];
            const float h1 = a1 * mf_sigmoidf_fast(a1) * ab[mt][nt + 4][2 * h + 1];
            *(__nv_bfloat162 *)(hs + rl * LDH + wn * 32 + nt * 8 + 2 * (lane & 3)) =
                __floats2bfloat162_rn(h0, h1);
          }
        }
      lg_bar_pair(1 + wm); /* both halves of the rows' h_j are in hs */

      /* out_acc += h_j·W_o[:, j]ᵀ */
      {
        int brow[NB2];
#pragma unroll
        for (int nb = 0; nb < NB2; nb++) brow[nb] = wn * WOUT + nb * 16;
        lg_warp_gemm<TF_HC, NB2>(acc, hs, LDH, wm * 32, swo0 + buf * L::wo, LDH, brow, lane);
      }
    }

    /* epilogue: (+ residual) → bf16 in the warp's block of os → 16-byte stores */
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int rl = wm * 32 + mt * 16 + h * 8 + (lane >> 2);
#pragma unroll
        for (int nt = 0; nt < C / 16; nt++) {
          __nv_bfloat162 *p = (__nv_bfloat162 *)(os + rl * LDA + wn * WOUT + nt * 8 + 2 * (lane & 3));
          float v0 = acc[mt][nt][2 * h], v1 = acc[mt][nt][2 * h + 1];
          if (accumulate) {
            const __nv_bfloat162 rv = *p;
            v0 += __low2float(rv);
            v1 += __high2float(rv);
          }
          *p = __floats2bfloat162_rn(v0, v1);
        }
      }
    __syncwarp();
    constexpr int CPR = WOUT / 8;
#pragma unroll
    for (int idx = lane; idx < 32 * CPR; idx += 32) {
      const int rl = wm * 32 + idx / CPR, ch = idx % CPR;
      if (rl < rows)
        *(uint4 *)(out + (m0 + rl) * C + wn * WOUT + ch * 8) =
            *(const uint4 *)(os + rl * LDA + wn * WOUT + ch * 8);
    }
    __syncthreads(); /* next tile: xs (loaded at chunk 0, waited at chunk 1) visible, os free */
  }
  mf_cp_async_wait<0>();
}

extern "C" int mf_transition_fused_supported(int C, int Hd, mf_ln_mode mode, const void *inp,
                                             const void *out, const void *w_ab,
                                             const void *w_o) {
  return (C == 64 || C == 128) && Hd % TF_HC == 0 && Hd >= 2 * TF_HC && mode >= MF_LN_FULL &&
         mode <= MF_LN_IDENTITY && (uintptr_t)inp % 16 == 0 && (uintptr_t)out % 16 == 0 &&
         (uintptr_t)w_ab % 16 == 0 && (uintptr_t)w_o % 16 == 0;
}

template <int C>
static void tf_launch(bf16 *out, float *mean, float *rstd, const bf16 *x, const bf16 *gamma,
                      const bf16 *beta, const bf16 *w_ab, const bf16 *w_o, int64_t M, int Hd,
                      int mode, int accumulate, cudaStream_t s) {
  const size_t smem = tf_layout<C>::bytes;
  static_assert(tf_layout<C>::bytes <= LG_SMEM_MAX, "transition_fused: shared memory");
  MF_CHECK_CUDA(cudaFuncSetAttribute(transition_fused_kernel<C>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const int64_t ntiles = (M + LG_BM - 1) / LG_BM;
  const int grid = (int)(ntiles < mf_sm_count() ? ntiles : mf_sm_count());
  transition_fused_kernel<C><<<grid, LG_THREADS, smem, s>>>(out, mean, rstd, x, gamma, beta, w_ab,
                                                            w_o, M, Hd, mode, accumulate);
  MF_CHECK_LAUNCH();
}

extern "C" void mf_transition_fused_forward_cuda(bf16 *out, float *mean, float *rstd,
                                                 const bf16 *inp, const bf16 *gamma,
                                                 const bf16 *beta, const bf16 *w_ab,
                                                 const bf16 *w_o, int64_t M, int C, int Hd,
                                                 mf_ln_mode mode, int accumulate,
                                                 cudaStream_t stream) {
  MF_ASSERT(mf_transition_fused_supported(C, Hd, mode, inp, out, w_ab, w_o),
            "transition_fused: unsupported C=%d Hd=%d mode=%d (or alignment)", C, Hd, (int)mode);
  lg_check_ln_args("transition_fused", mode, gamma, beta, mean, rstd, 1);
  if (M <= 0) return;
  if (mode == MF_LN_IDENTITY) mean = rstd = NULL;
  if (C == 64)
    tf_launch<64>(out, mean, rstd, inp, gamma, beta, w_ab, w_o, M, Hd, (int)mode, accumulate, stream);
  else
    tf_launch<128>(out, mean, rstd, inp, gamma, beta, w_ab, w_o, M, Hd, (int)mode, accumulate, stream);
}
