/* transition_wg.cu — the SwiGLU transition's forward as one persistent wgmma kernel
 * (sm_90a): out (+)= (silu(x̂·W_aᵀ) ⊙ x̂·W_bᵀ)·W_oᵀ, x̂ = LN(x), C = 128. The sm_80 mma.sync
 * kernel of ln_gemm.cu computes the same; this one is the ln_linear variant 3
 * (ln_linear_cuda.h). Not the CPU reference, not a backward.
 *
 * A CTA is two warpgroups over 128-row tiles, 64 rows each. Per tile: the 8 warps
 * normalise the raw rows (cp.async'd during the previous tile) into x̂ in the swizzled
 * operand layout (wgmma_ptx.cuh); then per chunk j of 64 hidden channels each warpgroup
 *   [a | b] (64 × 128, fp32 registers) = x̂·[W_a; W_b]_jᵀ   8 × wgmma m64n128k16, A and B
 *                                                          from shared memory;
 *   h_j = silu(a) ⊙ b, packed straight into bf16 A fragments (the accumulator layout is
 *         the A-fragment layout: no shared-memory round trip);
 *   out_acc (64 × 128) += h_j·W_o[:, j]ᵀ                   4 × wgmma m64n128k16, A from
 *                                                          registers.
 * The weight chunks (48 KB) are double-buffered by cp.async from L2 while the previous
 * chunk computes; the two warpgroups overlap each other's elementwise and tensor phases.
 * Epilogue: (+ residual, cp.async'd at chunk 0) → bf16 → staged in shared memory →
 * 16-byte stores. Each row's summation order depends only on its tile's chunk order
 * (t % nch, …), so two runs are bit-identical. */
#include "ln_gemm_cuda.h"

#include "fusion_util.cuh"
#include "ln_tile.cuh"
#include "wgmma_ptx.cuh"

#define TW_THREADS 256 /* two warpgroups */
#define TW_HC 64       /* hidden channels per chunk */
#define TW_C 128       /* the one channel width this kernel takes */

/* Shared memory, byte offsets from a 1024-aligned base (every operand block 1024-aligned):
 *   wab[2]: [W_a; W_b] chunk, C/64 blocks of (2·TW_HC rows × 128 B);
 *   wo[2]:  W_o[:, chunk] (C rows × TW_HC k = one block);
 *   xa: x̂, C/64 blocks of (LG_BM rows × 128 B); xs: raw rows of the next tile (LG_BM, C);
 *   os: residual / output staging (LG_BM, C + 8). */
struct tw_layout {
  static constexpr int WAB = (TW_C / 64) * 2 * TW_HC * 128, WO = TW_C * TW_HC * 2;
  static constexpr int XA = (TW_C / 64) * LG_BM * 128, XS = LG_BM * TW_C * 2;
  static constexpr int LDO = TW_C + 8, OS = LG_BM * LDO * 2;
  static constexpr int wab = 0, wo = 2 * WAB, xa = wo + 2 * WO, xs = xa + XA, os = xs + XS;
  static constexpr int bytes = os + OS + 1024; /* + the alignment slack */
};
static_assert(tw_layout::bytes <= 227 * 1024, "transition_wg: shared memory");

/* Weight chunk j into (wab, wo) by cp.async, swizzled; all TW_THREADS threads. */
static __device__ __forceinline__ void tw_load_w(unsigned char *wab, unsigned char *wo,
                                                 const bf16 *__restrict__ w_ab,
                                                 const bf16 *__restrict__ w_o, int j, int Hd) {
  constexpr int PA = 2 * TW_HC * (TW_C / 8), PO = TW_C * (TW_HC / 8);
  static_assert(PA % TW_THREADS == 0 && PO % TW_THREADS == 0, "tw_load_w");
#pragma unroll
  for (int i = 0; i < PA / TW_THREADS; i++) {
    const int idx = (int)threadIdx.x + i * TW_THREADS;
    const int n = idx / (TW_C / 8), p = idx % (TW_C / 8);
    const int row = n < TW_HC ? j * TW_HC + n : Hd + j * TW_HC + (n - TW_HC);
    lg_cp16(wab + (p / 8) * (2 * TW_HC * 128) + mf_sw128_chunk(n, p % 8), w_ab + (int64_t)row * TW_C + p * 8);
  }
#pragma unroll
  for (int i = 0; i < PO / TW_THREADS; i++) {
    const int idx = (int)threadIdx.x + i * TW_THREADS;
    const int n = idx / (TW_HC / 8), ch = idx % (TW_HC / 8);
    lg_cp16(wo + mf_sw128_chunk(n, ch), w_o + (int64_t)n * Hd + j * TW_HC + ch * 8);
  }
}

static __global__ void __launch_bounds__(TW_THREADS, 1)
transition_wg_kernel(bf16 *out, float *__restrict__ mean, float *__restrict__ rstd,
                     const bf16 *x, const bf16 *__restrict__ gamma, const bf16 *__restrict__ beta,
                     const bf16 *__restrict__ w_ab, const bf16 *__restrict__ w_o, int64_t M,
                     int Hd, int mode, const bf16 *res, bf16 *__restrict__ out2) {
  /* out, x and res (the residual, or NULL) are not __restrict__: they may be the same tensor;
   * out2 (M, C), unless NULL, receives the same rows as out (a second store of each piece) */
  typedef tw_layout L;
  constexpr int C = TW_C, LDO = L::LDO;
  extern __shared__ unsigned char tw_raw[];
  unsigned char *sm = tw_raw + ((1024u - (mf_smem_u32(tw_raw) & 1023u)) & 1023u);
  unsigned char *wab0 = sm + L::wab, *wo0 = sm + L::wo, *xa = sm + L::xa;
  bf16 *xs = (bf16 *)(sm + L::xs), *os = (bf16 *)(sm + L::os);
  const int lane = threadIdx.x & 31, warp = lg_warp_id(), wg = warp >> 2, wl = warp & 3;
  const int64_t ntiles = (M + LG_BM - 1) / LG_BM;
  const int nch = Hd / TW_HC;
  float g[8], bb[8]; /* γ, β of the lane's 8 channels (lg_ln_tile_v) */
  lg_ln_params_v<C>(g, bb, gamma, beta, mode, lane);
  const uint32_t xa_u = mf_smem_u32(xa) + wg * 64 * 128; /* this warpgroup's 64 rows */

  tw_load_w(wab0, wo0, w_ab, w_o, (int)(blockIdx.x % (unsigned)nch), Hd);
  lg_load_tile<C>(xs, x, blockIdx.x, ntiles, M, LG_BM, threadIdx.x);
  mf_cp_async_commit();
  mf_cp_async_wait<0>();
  __syncthreads();
  int q = 0; /* chunks done by this CTA: weight buffer q & 1 */
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
    const int64_t m0 = t * LG_BM;
    const int rows = (int)(M - m0 < LG_BM ? M - m0 : LG_BM);
    lg_ln_tile_v<C>((bf16 *)xa, xs, mean, rstd, m0, M, g, bb, mode, warp, lane);
    mf_fence_proxy_async();
    __syncthreads(); /* x̂ ready; xs, os and the other weight buffer free */
    float acc[C / 2]; /* out: this warpgroup's 64 rows × C */
#pragma unroll
    for (int i = 0; i < C / 2; i++) acc[i] = 0.0f;

    const int s0 = (int)(t % nch);
    for (int j = 0; j < nch; j++, q++) {
      const int buf = q & 1;
      const int jn = j + 1 < nch ? (s0 + j + 1) % nch : (int)((t + gridDim.x) % nch);
      if (j > 0) __syncthreads(); /* chunk j−1's wgmma done in both groups: buf ^ 1 free */
      tw_load_w(wab0 + (buf ^ 1) * L::WAB, wo0 + (buf ^ 1) * L::WO, w_ab, w_o, jn, Hd);
      if (j == 0) {
        lg_load_tile<C>(xs, x, t + gridDim.x, ntiles, M, LG_BM, threadIdx.x);
        if (res) lg_load_residual<C, TW_THREADS>(os, LDO, res, m0, rows, (int)threadIdx.x);
      }
      mf_cp_async_commit();
      mf_cp_async_wait<1>(); /* everything but the group just issued: chunk j is here */
      mf_fence_proxy_async();
      __syncthreads();
      const uint32_t wab_u = mf_smem_u32(wab0 + buf * L::WAB), wo_u = mf_smem_u32(wo0 + buf * L::WO);
      /* operand descriptors: x̂'s and the weight buffer's once per chunk, each k16 block's from
       * them (mf_wg_desc_off) */
      const uint64_t dxa = mf_wg_desc(xa_u), dwab = mf_wg_desc(wab_u), dwo = mf_wg_desc(wo_u);

      /* [a | b] = x̂·[W_a; W_b]_jᵀ: accumulator columns 0..63 a, 64..127 b */
      float ab[64];
      mf_wg_fence();
#pragma unroll
      for (int k = 0; k < C / 16; k++) {
        const int kb = k / 4, kk = k % 4;
        mf_wg_ss_n128(ab, mf_wg_desc_off(dxa, kb * LG_BM * 128 + kk * 32),
                      mf_wg_desc_off(dwab, kb * 2 * TW_HC * 128 + kk * 32), k > 0);
      }
      mf_wg_commit();
      mf_wg_wait<0>();
      mf_wg_pin(ab);

      /* h = silu(a) ⊙ b as the A fragments of the k16 blocks kk = 0..3 of the chunk */
      uint32_t hf[TW_HC / 16][4];
#pragma unroll
      for (int kk = 0; kk < TW_HC / 16; kk++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
          const int nt = 2 * kk + hh; /* n-tile of a; b is n-tile nt + 8 */
          float hv[4];
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const float a = ab[4 * nt + e];
            hv[e] = a * mf_sigmoidf_fast(a) * ab[4 * (nt + 8) + e];
          }
          hf[kk][2 * hh] = mf_pack_bf16x2(hv[0], hv[1]);     /* rows l/4, k 8·hh + 2·(l%4) */
          hf[kk][2 * hh + 1] = mf_pack_bf16x2(hv[2], hv[3]); /* rows l/4 + 8 */
        }

      /* out_acc += h_j·W_o[:, j]ᵀ */
      mf_wg_fence();
#pragma unroll
      for (int kk = 0; kk < TW_HC / 16; kk++) mf_wg_rs_n128(acc, hf[kk], mf_wg_desc_off(dwo, kk * 32), 1);
      mf_wg_commit();
      mf_wg_wait<0>(); /* before the barrier that lets the next prefetch overwrite buf */
      mf_wg_pin(acc);
    }

    /* epilogue: (+ residual) → bf16 in os → 16-byte stores of this warpgroup's rows */
    const int rb = wg * 64 + wl * 16 + (lane >> 2);
#pragma unroll
    for (int i = 0; i < C / 8; i++)
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        __nv_bfloat162 *p = (__nv_bfloat162 *)(os + (rb + 8 * hh) * LDO + 8 * i + 2 * (lane & 3));
        float v0 = acc[4 * i + 2 * hh], v1 = acc[4 * i + 2 * hh + 1];
        if (res) {
          const __nv_bfloat162 rv = *p;
          v0 += __low2float(rv);
          v1 += __high2float(rv);
        }
        *p = __floats2bfloat162_rn(v0, v1);
      }
    mf_bar_wg(wg);
#pragma unroll
    for (int i = 0; i < 64 * (C / 8) / 128; i++) {
      const int idx = (int)(threadIdx.x & 127) + i * 128;
      const int r = wg * 64 + idx / (C / 8), ch = idx % (C / 8);
      if (r < rows) {
        const uint4 v = *(const uint4 *)(os + r * LDO + ch * 8);
        *(uint4 *)(out + (m0 + r) * C + ch * 8) = v;
        if (out2) *(uint4 *)(out2 + (m0 + r) * C + ch * 8) = v;
      }
    }
    __syncthreads(); /* next tile: xs visible, os free */
  }
  mf_cp_async_wait<0>();
}

extern "C" int mf_transition_wg_supported(int C, int Hd, mf_ln_mode mode, const void *inp,
                                          const void *out, const void *w_ab, const void *w_o) {
  return C == TW_C && Hd % TW_HC == 0 && Hd >= 2 * TW_HC && mode >= MF_LN_FULL &&
         mode <= MF_LN_IDENTITY && (uintptr_t)inp % 16 == 0 && (uintptr_t)out % 16 == 0 &&
         (uintptr_t)w_ab % 16 == 0 && (uintptr_t)w_o % 16 == 0;
}

extern "C" void mf_transition_wg_forward_cuda(bf16 *out, float *mean, float *rstd,
                                              const bf16 *inp, const bf16 *gamma,
                                              const bf16 *beta, const bf16 *w_ab,
                                              const bf16 *w_o, int64_t M, int C, int Hd,
                                              mf_ln_mode mode, const bf16 *res, bf16 *out2,
                                              cudaStream_t stream) {
  MF_ASSERT(mf_transition_wg_supported(C, Hd, mode, inp, out, w_ab, w_o) && (uintptr_t)res % 16 == 0 &&
                (uintptr_t)out2 % 16 == 0,
            "transition_wg: unsupported C=%d Hd=%d mode=%d (or alignment)", C, Hd, (int)mode);
  lg_check_ln_args("transition_wg", mode, gamma, beta, mean, rstd, 1);
  if (M <= 0) return;
  if (mode == MF_LN_IDENTITY) mean = rstd = NULL;
  const int smem = tw_layout::bytes;
  MF_CHECK_CUDA(cudaFuncSetAttribute(transition_wg_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t ntiles = (M + LG_BM - 1) / LG_BM;
  const int grid = (int)(ntiles < mf_sm_count() ? ntiles : mf_sm_count());
  transition_wg_kernel<<<grid, TW_THREADS, smem, stream>>>(out, mean, rstd, inp, gamma, beta, w_ab,
                                                          w_o, M, Hd, (int)mode, res, out2);
  MF_CHECK_LAUNCH();
}
