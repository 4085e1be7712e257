/* ln_gemm_bwd_wg.cu — the backward of the SwiGLU transition and of the gated projection as
 * one persistent wgmma kernel (sm_90a, C = 128): configuration 7 of ln_gemm_bwd_cuda.h (kinds
 * MF_LGB_SWIGLU and MF_LGB_GATED), with the contract of mf_ln_gemm_bwd_cuda — it forms dinp
 * (and per-CTA dγ/dβ partials) on chip and writes what the caller's cuBLAS weight-gradient
 * GEMMs need: y = LN(inp), s1 = [da | db] / [dp | dg] and (SWIGLU) s2 = h, bf16. Not the
 * weight gradients, not a forward, not the CPU reference.
 *
 * A CTA is two warpgroups over 128-row tiles, 64 rows each. Per tile: the raw rows, dout and
 * the rows' saved (mean, rstd) (cp.async'd during the previous tile's last chunk) give
 * y = LN(x) (C/8 lanes of 8 channels a row, γ, β from shared memory) into the swizzled
 * operand layout (wgmma_ptx.cuh) and to global y; the raw rows and y use two buffers that
 * swap roles every tile, so the raw rows stay for the LayerNorm backward; then per
 * chunk j of 64 hidden (SWIGLU) or output (GATED) channels each warpgroup forms
 *   [a | b] or [p | g] (64 × 128 fp32) = y·[W_1; W_2]_jᵀ   wgmma, B = the weight chunk,
 *                                                         K-major;
 *   SWIGLU: dh (64 × 64 fp32) = dout·W_o[:, j]             wgmma, B = the W_o chunk read
 *           MN-major (the tile the forward reads K-major: no transposed copy);
 *           h, da = dh·b·σ(a)(1 + a(1 − σ(a))), db = dh·silu(a);
 *   GATED:  dp = dout·m·σ(g), dg = dout·m·p·σ(g)(1 − σ(g)) (dout from the staged tile,
 *           m the row mask);
 *   the gradient pair packed into bf16 A fragments and staged for 16-byte stores;
 *   dy (64 × 128 fp32) += [d1 | d2]·[W_1; W_2]_j           wgmma, A from registers, B =
 *                                                         the weight chunk read MN-major.
 * The weight chunks are double-buffered by cp.async; with at most two chunks (the gated
 * projection at O <= 128) both stay resident, loaded once. After the last chunk the
 * LayerNorm backward runs on the dy accumulators (row sums over the quad's lanes; x from
 * the raw-row buffer), dinp is staged and written (or added), and the column partials of Σ dy⊙x̂
 * and Σ dy accumulate in registers across the CTA's tiles (a reduce-scatter over the
 * warp's rows); at the end the 8 warps' partials are summed in warp order through shared
 * memory into one partial row per CTA. Every order is fixed: two runs are bit-identical.
 * Numerics as configurations 1–3 (ln_gemm_bwd_cuda.h): y, h and the gradient pairs
 * rounded to bf16 where they are stored or fed to the tensor cores; the GEMM outputs, dh
 * and dy fp32.
 * Measured (H200, 2026-11-30, bench/evofusion, C = 128, M = 768², whole backward incl. the
 * cuBLAS dW GEMMs): gated (O = 128) 0.565 ms, was 0.731 before the statistics, γ, β and the
 * raw rows were kept in shared memory (their global loads took a quarter of the stall
 * samples); transition (Hd = 512) 2.19 ms, was 2.32. Tried: the gated kernel's two
 * warpgroups on their own 64-row tiles without CTA-wide barriers, 0.592 ms (not kept). */
#include "ln_gemm_bwd_cuda.h"

#include "fusion_util.cuh"
#include "ln_tile.cuh"
#include "wgmma_ptx.cuh"

#define TB_THREADS 256 /* two warpgroups */
#define TB_HC 64       /* hidden (SWIGLU) / output (GATED) channels per chunk */
#define TB_C 128       /* the one channel width this kernel takes */

/* Shared memory, byte offsets from a 1024-aligned base:
 *   wab[2]: the [W_1; W_2] chunk: C/64 blocks of (2·TB_HC rows × 128 B), K-major over C;
 *   wo[2]:  SWIGLU: the W_o chunk, C rows (o) × TB_HC (h) = one block;
 *   ya: y of the tile, C/64 blocks of (LG_BM rows × 128 B);
 *   ds: dout of the tile, W/64 blocks of (LG_BM rows × 128 B), W = C (SWIGLU: the dh GEMM's
 *       A operand) or O <= TB_OMAX (GATED: read by the elementwise backward);
 *   xs: the raw rows, laid out like ya (xs and ya swap roles every tile);
 *   stg: per warpgroup two 64-row × 128 B swizzled blocks staging h and the gradient pair
 *        for 16-byte stores (4-byte stores straight from the fragments ran 2.7× slower).
 * During the LayerNorm backward stg stages dinp the same way.
 *   st: the tile's mean and rstd (LG_BM each, fp32), then γ and β (C each, fp32). */
#define TB_OMAX 256
template <int KIND>
struct tb_layout {
  static constexpr bool SW = KIND == MF_LGB_SWIGLU;
  static constexpr int WAB = (TB_C / 64) * 2 * TB_HC * 128, WO = SW ? TB_C * TB_HC * 2 : 0;
  static constexpr int YA = (TB_C / 64) * LG_BM * 128, XS = LG_BM * TB_C * 2;
  static constexpr int DS = ((SW ? TB_C : TB_OMAX) / 64) * LG_BM * 128;
  static constexpr int STG = 2 * 64 * 128;
  static constexpr int wab = 0, wo = 2 * WAB, ya = wo + 2 * WO, ds = ya + YA, xs = ds + DS;
  static constexpr int stg = xs + XS;
  static constexpr int ST = (2 * LG_BM + 2 * TB_C) * 4; /* the tile's mean, rstd; γ, β (fp32) */
  static constexpr int st = stg + 2 * STG;
  static constexpr int bytes = st + ST + 1024; /* + the alignment slack */
};
static_assert(tb_layout<MF_LGB_SWIGLU>::bytes <= 227 * 1024, "ln_gemm_bwd_wg: shared memory");
static_assert(tb_layout<MF_LGB_GATED>::bytes <= 227 * 1024, "ln_gemm_bwd_wg: shared memory");

/* Weight chunk j: [W_1; W_2] rows into wab (K-major over C), SWIGLU: W_o[:, j] into wo.
 * O: the width of W_1 (Hd or the gated output width). */
template <int KIND>
static __device__ __forceinline__ void tb_load_w(unsigned char *wab, unsigned char *wo,
                                                 const bf16 *__restrict__ w_ab,
                                                 const bf16 *__restrict__ w_o, int j, int O) {
  constexpr int PA = 2 * TB_HC * (TB_C / 8), PO = TB_C * (TB_HC / 8);
  static_assert(PA % TB_THREADS == 0 && PO % TB_THREADS == 0, "tb_load_w");
#pragma unroll
  for (int i = 0; i < PA / TB_THREADS; i++) {
    const int idx = (int)threadIdx.x + i * TB_THREADS;
    const int n = idx / (TB_C / 8), p = idx % (TB_C / 8);
    const int row = n < TB_HC ? j * TB_HC + n : O + j * TB_HC + (n - TB_HC);
    lg_cp16(wab + (p / 8) * (2 * TB_HC * 128) + mf_sw128_chunk(n, p % 8), w_ab + (int64_t)row * TB_C + p * 8);
  }
  if (KIND == MF_LGB_SWIGLU)
#pragma unroll
    for (int i = 0; i < PO / TB_THREADS; i++) {
      const int idx = (int)threadIdx.x + i * TB_THREADS;
      const int n = idx / (TB_HC / 8), ch = idx % (TB_HC / 8);
      lg_cp16(wo + mf_sw128_chunk(n, ch), w_o + (int64_t)n * O + j * TB_HC + ch * 8);
    }
}

/* Raw rows of tile t into xs and its dout rows (width W) into ds (both swizzled, C/64 and
 * W/64 blocks), and (mean != NULL) its rows' mean and rstd into st[0..LG_BM) and
 * st[LG_BM..2·LG_BM); rows >= M zero. */
static __device__ __forceinline__ void tb_load_tile(unsigned char *xs, unsigned char *ds,
                                                    float *st, const bf16 *x, const bf16 *dout,
                                                    const float *mean, const float *rstd, int W,
                                                    int64_t t, int64_t ntiles, int64_t M) {
  if (t >= ntiles) return;
  const int64_t m0 = t * LG_BM;
  constexpr int P = LG_BM * (TB_C / 8);
#pragma unroll
  for (int i = 0; i < P / TB_THREADS; i++) {
    const int idx = (int)threadIdx.x + i * TB_THREADS;
    const int r = idx / (TB_C / 8), p = idx % (TB_C / 8);
    const bool ok = m0 + r < M;
    lg_cp16z(xs + (p / 8) * (LG_BM * 128) + mf_sw128_chunk(r, p % 8),
            x + (ok ? (m0 + r) * TB_C + p * 8 : 0), ok);
  }
  static_assert(2 * LG_BM == TB_THREADS, "tb_load_tile: one statistic per thread");
  if (mean) {
    const int r = (int)threadIdx.x % LG_BM;
    const bool ok = m0 + r < M;
    lg_cp4z(st + threadIdx.x, ((int)threadIdx.x < LG_BM ? mean : rstd) + (ok ? m0 + r : 0), ok);
  }
  for (int idx = (int)threadIdx.x; idx < LG_BM * (W / 8); idx += TB_THREADS) {
    const int r = idx / (W / 8), p = idx % (W / 8);
    const bool ok = m0 + r < M;
    lg_cp16z(ds + (p / 8) * (LG_BM * 128) + mf_sw128_chunk(r, p % 8),
            dout + (ok ? (m0 + r) * W + p * 8 : 0), ok);
  }
}

/* The A fragments fr[k0 .. k0 + 3] (64 rows × 64 columns of the warpgroup, bf16 pairs)
 * into a swizzled staging block: fragment (nt / 2, 2·(nt & 1) + h) is row rl + 8·h,
 * columns 8·nt + 2·t4 + {0, 1}. */
static __device__ __forceinline__ void tb_stage_frags(unsigned char *blk, const uint32_t (&fr)[8][4],
                                                      int k0, int rl, int t4) {
#pragma unroll
  for (int nt = 0; nt < 8; nt++)
#pragma unroll
    for (int h = 0; h < 2; h++)
      *(uint32_t *)(blk + mf_sw128(rl + 8 * h, 8 * nt + 2 * t4)) = fr[k0 + nt / 2][2 * (nt & 1) + h];
}

/* O: Hd (SWIGLU) or the gated output width; s1 (M, 2O); s2, dcopy SWIGLU only; mask
 * (M) GATED only, or NULL. */
template <int KIND>
static __global__ void __launch_bounds__(TB_THREADS, 1)
lgb_wg_kernel(bf16 *dinp, int add, float *__restrict__ part, bf16 *__restrict__ y,
              bf16 *__restrict__ s1, bf16 *__restrict__ s2, bf16 *__restrict__ dcopy,
              const bf16 *dout, const float *__restrict__ mean, const float *__restrict__ rstd,
              const bf16 *__restrict__ inp, const bf16 *__restrict__ gamma,
              const bf16 *__restrict__ beta, const bf16 *__restrict__ w_ab,
              const bf16 *__restrict__ w_o, const uint8_t *__restrict__ mask, int64_t M, int O,
              int mode) {
  /* dinp and dout are not __restrict__: the adding backward may run in place */
  typedef tb_layout<KIND> L;
  constexpr bool SW = KIND == MF_LGB_SWIGLU;
  const int Hd = O, W = SW ? TB_C : O; /* the dout width */
  constexpr int C = TB_C;
  extern __shared__ unsigned char tb_raw[];
  unsigned char *sm = tb_raw + ((1024u - (mf_smem_u32(tb_raw) & 1023u)) & 1023u);
  unsigned char *wab0 = sm + L::wab, *wo0 = sm + L::wo, *ds = sm + L::ds;
  float *st = (float *)(sm + L::st); /* the tile's mean, rstd (LG_BM each), then γ, β (C each) */
  const int lane = threadIdx.x & 31, warp = lg_warp_id(), wg = warp >> 2, wl = warp & 3;
  const int t4 = lane & 3, g8 = lane >> 2;
  const int64_t ntiles = (M + LG_BM - 1) / LG_BM;
  const int nch = Hd / TB_HC;
  /* at most two chunks: both stay in the two weight buffers (chunk j in buffer j), loaded
   * once; otherwise they stream through them */
  const bool resident = nch <= 2;
  const bool dx_on = dinp != NULL || part != NULL;
  const float *mean_ld = mode != MF_LN_IDENTITY ? mean : NULL; /* statistics to stage */
  if ((int)threadIdx.x < C) { /* γ, β (read after the first barrier) */
    st[2 * LG_BM + threadIdx.x] =
        (mode == MF_LN_FULL || mode == MF_LN_SCALE) ? mf_bf16_to_f32(gamma[threadIdx.x]) : 1.0f;
    st[2 * LG_BM + C + threadIdx.x] = mode == MF_LN_FULL ? mf_bf16_to_f32(beta[threadIdx.x]) : 0.0f;
  }
  /* dγ, dβ column partials kept by this lane: columns 8·i + 2·t4 + e for i = 2·g8, 2·g8 + 1 */
  float pg[4] = {0.f, 0.f, 0.f, 0.f}, pb[4] = {0.f, 0.f, 0.f, 0.f};
  const uint32_t ds_u = mf_smem_u32(ds) + wg * 64 * 128;

  if (resident) {
    tb_load_w<KIND>(wab0, wo0, w_ab, w_o, 0, Hd);
    if (nch == 2) tb_load_w<KIND>(wab0 + L::WAB, wo0 + L::WO, w_ab, w_o, 1, Hd);
  } else {
    tb_load_w<KIND>(wab0, wo0, w_ab, w_o, (int)(blockIdx.x % (unsigned)nch), Hd);
  }
  /* the raw rows and y alternate between the buffers xs and ya tile by tile: the next
   * tile's rows land in this tile's y buffer once its last [W_1; W_2] GEMM has read it, and
   * this tile's rows stay for its LayerNorm backward */
  tb_load_tile(sm + L::xs, ds, st, inp, dout, mean_ld, rstd, W, blockIdx.x, ntiles, M);
  mf_cp_async_commit();
  int q = 0;  /* chunks done by this CTA: weight buffer q & 1 (streamed weights) */
  int tk = 0; /* tiles done by this CTA */
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x, tk++) {
    const int64_t m0 = t * LG_BM;
    const int rows = (int)(M - m0 < LG_BM ? M - m0 : LG_BM);
    unsigned char *xr = sm + ((tk & 1) ? L::ya : L::xs); /* this tile's raw rows */
    unsigned char *ya = sm + ((tk & 1) ? L::xs : L::ya); /* its y, then the next raw rows */
    const uint32_t ya_u = mf_smem_u32(ya) + wg * 64 * 128;
    mf_cp_async_wait<0>();
    __syncthreads(); /* xr, ds, the statistics and weight chunk s0 of this tile are here */

    /* y = LN(x) with the saved statistics: warp w, rows 16·w .. 16·w + 15, each row over
     * C/8 lanes of 8 channels (16-byte accesses; raw rows and y share the layout) */
    {
      constexpr int LPR = C / 8, RPP = 32 / LPR;
      const int sub = lane / LPR, cl = lane % LPR;
      const uint32_t off0 = (cl / 8) * (LG_BM * 128);
      float gg[8], bv[8]; /* γ, β of the lane's channels (per tile: registers are free here) */
#pragma unroll
      for (int h = 0; h < 2; h++) {
        *(float4 *)&gg[4 * h] = *(const float4 *)(st + 2 * LG_BM + 8 * cl + 4 * h);
        *(float4 *)&bv[4 * h] = *(const float4 *)(st + 2 * LG_BM + C + 8 * cl + 4 * h);
      }
#pragma unroll 2
      for (int k = 0; k < 16 / RPP; k++) {
        const int r = warp * 16 + k * RPP + sub;
        const bool ok = r < rows;
        const float mu = ok && mode != MF_LN_IDENTITY ? st[r] : 0.0f;
        const float rs = ok && mode != MF_LN_IDENTITY ? st[LG_BM + r] : 1.0f;
        const uint32_t off = off0 + mf_sw128_chunk(r, cl % 8);
        uint4 u = *(const uint4 *)(xr + off);
        uint32_t *w = (uint32_t *)&u;
#pragma unroll
        for (int j = 0; j < 4; j++) {
          const float2 xv = __bfloat1622float2(*(const __nv_bfloat162 *)&w[j]);
          w[j] = ok ? mf_pack_bf16x2((xv.x - mu) * rs * gg[2 * j] + bv[2 * j],
                                     (xv.y - mu) * rs * gg[2 * j + 1] + bv[2 * j + 1])
                    : 0u;
        }
        *(uint4 *)(ya + off) = u;
        if (y && ok) *(uint4 *)(y + (m0 + r) * C + 8 * cl) = u;
      }
    }
    if (SW && dcopy) /* dout's rows for the caller's dW_o GEMM when dinp overwrites dout */
#pragma unroll
      for (int i = 0; i < LG_BM * (C / 8) / TB_THREADS; i++) {
        const int idx = (int)threadIdx.x + i * TB_THREADS;
        const int r = idx / (C / 8), p = idx % (C / 8);
        if (r < rows)
          *(uint4 *)(dcopy + (m0 + r) * C + p * 8) =
              *(const uint4 *)(ds + (p / 8) * (LG_BM * 128) + mf_sw128_chunk(r, p % 8));
      }
    mf_fence_proxy_async();
    __syncthreads(); /* ya ready */

    float acc[C / 2]; /* dy: this warpgroup's 64 rows × C */
#pragma unroll
    for (int i = 0; i < C / 2; i++) acc[i] = 0.0f;
    const int s0 = (int)(t % nch);
    const int ra = wg * 64 + wl * 16 + g8; /* this thread's accumulator rows ra, ra + 8 */
    float bmu[2], brs[2]; /* their statistics, read before the next tile's replace them */
    for (int j = 0; j < nch; j++, q++) {
      const int jc = (s0 + j) % nch, buf = resident ? jc : (q & 1);
      if (!resident) {
        const int jn = j + 1 < nch ? (s0 + j + 1) % nch : (int)((t + gridDim.x) % nch);
        if (j > 0) __syncthreads(); /* chunk j−1's wgmma done in both groups: buf ^ 1 free */
        tb_load_w<KIND>(wab0 + (buf ^ 1) * L::WAB, wo0 + (buf ^ 1) * L::WO, w_ab, w_o, jn, Hd);
        mf_cp_async_commit();
        mf_cp_async_wait<1>(); /* chunk j is here */
        mf_fence_proxy_async();
        __syncthreads();
      }
      const uint32_t wab_u = mf_smem_u32(wab0 + buf * L::WAB), wo_u = mf_smem_u32(wo0 + buf * L::WO);

      float ab[64], dh[SW ? 32 : 1];
      const uint64_t dya = mf_wg_desc(ya_u), dwab = mf_wg_desc(wab_u);
      mf_wg_fence();
#pragma unroll
      for (int k = 0; k < C / 16; k++) { /* [a | b] or [p | g] = y·[W_1; W_2]_jᵀ */
        const int kb = k / 4, kk = k % 4;
        mf_wg_ss_n128(ab, mf_wg_desc_off(dya, kb * LG_BM * 128 + kk * 32),
                      mf_wg_desc_off(dwab, kb * 2 * TB_HC * 128 + kk * 32), k > 0);
      }
      if constexpr (SW) {
        const uint64_t dds = mf_wg_desc(ds_u), dwo = mf_wg_desc_mn(wo_u, TB_HC * 128);
#pragma unroll
        for (int k = 0; k < C / 16; k++) { /* dh = dout·W_o[:, j]: B = the W_o chunk, MN-major */
          const int kb = k / 4, kk = k % 4;
          mf_wg_ss_n64<1>(*(float(*)[32])dh, mf_wg_desc_off(dds, kb * LG_BM * 128 + kk * 32),
                          mf_wg_desc_off(dwo, k * 2048), k > 0);
        }
      }
      mf_wg_commit();
      mf_wg_wait<0>();
      mf_wg_pin(ab);
      mf_wg_pin(dh);
      if (SW && j + 1 == nch) {
        /* every [a | b] and dh of the tile is done in both groups: prefetch the next tile */
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
          bmu[hh] = mode != MF_LN_IDENTITY ? st[ra + 8 * hh] : 0.0f;
          brs[hh] = mode != MF_LN_IDENTITY ? st[LG_BM + ra + 8 * hh] : 1.0f;
        }
        __syncthreads();
        tb_load_tile(ya, ds, st, inp, dout, mean_ld, rstd, W, t + gridDim.x, ntiles, M);
        mf_cp_async_commit();
      }

      /* the elementwise backward: the gradient pair as A fragments, h into staging block 0 */
      unsigned char *stg = sm + L::stg + wg * L::STG;
      uint32_t fr[8][4]; /* k16 blocks 0..3: da / dp, 4..7: db / dg */
      const int rl = wl * 16 + g8; /* the thread's rows rl, rl + 8 of the warpgroup's 64 */
      float mrow[2] = {1.0f, 1.0f}; /* GATED: the rows' mask */
      if (!SW && mask)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int r = wg * 64 + rl + 8 * h;
          mrow[h] = r < rows && mask[m0 + r] ? 1.0f : 0.0f;
        }
#pragma unroll
      for (int nt = 0; nt < 8; nt++) {
        float d1v[4], d2v[4], hv[4];
        float2 dov[2]; /* GATED: dout at (rows rl, rl + 8; columns 8·nt + 2·t4 + {0, 1}) */
        if (!SW)
#pragma unroll
          for (int h = 0; h < 2; h++)
            dov[h] = __bfloat1622float2(*(const __nv_bfloat162 *)(
                ds + jc * (LG_BM * 128) + mf_sw128(wg * 64 + rl + 8 * h, 8 * nt + 2 * t4)));
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const float a = ab[4 * nt + e], b = ab[4 * (nt + 8) + e];
          if constexpr (SW) {
            const float d = dh[4 * nt + e];
            const float sg = mf_sigmoidf_fast(a), si = a * sg;
            hv[e] = si * b;
            d2v[e] = d * si;
            d1v[e] = d * b * sg * (1.0f + a * (1.0f - sg));
          } else { /* a = p, b = g; σ by one tanh.approx (8 instructions a pair, not 11) */
            const float d = (e & 1 ? dov[e >> 1].y : dov[e >> 1].x) * mrow[e >> 1];
            const float sg = mf_sigmoidf_tanh(b);
            d1v[e] = d * sg;
            d2v[e] = (d * a) * fmaf(-sg, sg, sg);
            hv[e] = 0.0f;
          }
        }
        fr[nt / 2][2 * (nt & 1)] = mf_pack_bf16x2(d1v[0], d1v[1]);
        fr[nt / 2][2 * (nt & 1) + 1] = mf_pack_bf16x2(d1v[2], d1v[3]);
        fr[4 + nt / 2][2 * (nt & 1)] = mf_pack_bf16x2(d2v[0], d2v[1]);
        fr[4 + nt / 2][2 * (nt & 1) + 1] = mf_pack_bf16x2(d2v[2], d2v[3]);
        if (SW && s2) {
          *(uint32_t *)(stg + mf_sw128(rl, 8 * nt + 2 * t4)) = mf_pack_bf16x2(hv[0], hv[1]);
          *(uint32_t *)(stg + mf_sw128(rl + 8, 8 * nt + 2 * t4)) = mf_pack_bf16x2(hv[2], hv[3]);
        }
      }
      if (!SW && j + 1 == nch) {
        /* every read of the tile's y and dout is done in both groups: prefetch the next tile */
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
          bmu[hh] = mode != MF_LN_IDENTITY ? st[ra + 8 * hh] : 0.0f;
          brs[hh] = mode != MF_LN_IDENTITY ? st[LG_BM + ra + 8 * hh] : 1.0f;
        }
        __syncthreads();
        tb_load_tile(ya, ds, st, inp, dout, mean_ld, rstd, W, t + gridDim.x, ntiles, M);
        mf_cp_async_commit();
      }
      if (s1 || (SW && s2)) { /* h (block 0) and d1 (block 1), then d2 (block 0): 16-byte stores */
        const int tid = (int)(threadIdx.x & 127), nr = rows - wg * 64;
        const int64_t r0 = m0 + wg * 64;
        if (s1) tb_stage_frags(stg + 8192, fr, 0, rl, t4);
        mf_bar_wg(wg);
        if (SW && s2) lg_store_block64(s2 + r0 * Hd + jc * TB_HC, Hd, stg, nr, tid);
        if (s1) {
          lg_store_block64(s1 + r0 * 2 * Hd + jc * TB_HC, 2 * Hd, stg + 8192, nr, tid);
          mf_bar_wg(wg); /* block 0 read */
          tb_stage_frags(stg, fr, 4, rl, t4);
          mf_bar_wg(wg);
          lg_store_block64(s1 + r0 * 2 * Hd + Hd + jc * TB_HC, 2 * Hd, stg, nr, tid);
        }
      }
      if (dx_on) { /* dy += [da | db]·[W_a; W_b]_j: B = the chunk, MN-major */
        const uint64_t dwab_mn = mf_wg_desc_mn(wab_u, 2 * TB_HC * 128);
        mf_wg_fence();
#pragma unroll
        for (int kk = 0; kk < 8; kk++) mf_wg_rs_n128<1>(acc, fr[kk], mf_wg_desc_off(dwab_mn, kk * 2048), 1);
        mf_wg_commit();
        mf_wg_wait<0>();
        mf_wg_pin(acc);
      }
    }
    if (!dx_on) continue;

    /* LayerNorm backward of rows ra, ra + 8 (each row's C columns over the quad's lanes; x
     * from the tile's raw rows in xr); vg, vb: this thread's column terms dy⊙x̂ and dy
     * summed over its two rows */
    unsigned char *stg = sm + L::stg + wg * L::STG; /* stages dinp: two 64-column blocks */
    if (dinp) mf_bar_wg(wg); /* the group's last stores from stg are done */
    float vg[C / 4], vb[C / 4];
    lg_ln_bwd_rows<C>(acc, xr, st + 2 * LG_BM, bmu, brs, ra, rows, t4, dinp ? stg : NULL, 8192, wg * 64,
                      dinp ? dinp + m0 * C : NULL, add, vg, vb);
    if (dinp) {
      const int tid = (int)(threadIdx.x & 127), nr = rows - wg * 64;
      mf_bar_wg(wg); /* dinp staged */
      lg_store_block64(dinp + (m0 + wg * 64) * C, C, stg, nr, tid);
      lg_store_block64(dinp + (m0 + wg * 64) * C + 64, C, stg + 8192, nr, tid);
    }
    if (part) {
      /* column sums over the warp's 16 rows: a reduce-scatter over the 8 lanes of equal t4
       * (xor 16, 8, 4); lane g8 ends with the value slots 4·g8 .. 4·g8 + 3 (n-tiles 2·g8,
       * 2·g8 + 1) */
      lg_reduce_scatter32(vg, pg, lane);
      lg_reduce_scatter32(vb, pb, lane);
    }
  }
  mf_cp_async_wait<0>();
  if (!part) return;
  lg_cta_part_store<C>((float *)sm, pg, pb, part, warp, lane); /* over the weight buffers */
}

extern "C" int mf_ln_gemm_bwd_wg_supported(int kind, int C, int O, mf_ln_mode mode) {
  if (C != TB_C || O < TB_HC || O % TB_HC || mode < MF_LN_FULL || mode > MF_LN_NONE) return 0;
  return kind == MF_LGB_SWIGLU || (kind == MF_LGB_GATED && O <= TB_OMAX);
}

template <int KIND>
static int lgb_wg_launch(bf16 *dinp, int add, float *part, bf16 *y, bf16 *s1, bf16 *s2, bf16 *dcopy,
                         const bf16 *dout, const float *mean, const float *rstd, const bf16 *inp,
                         const bf16 *gamma, const bf16 *beta, const bf16 *w, const bf16 *w_o,
                         const uint8_t *mask, int64_t rows, int O, int mode, cudaStream_t stream) {
  const int smem = tb_layout<KIND>::bytes;
  MF_CHECK_CUDA(cudaFuncSetAttribute(lgb_wg_kernel<KIND>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t ntiles = (rows + LG_BM - 1) / LG_BM;
  const int grid = (int)(ntiles < mf_sm_count() ? ntiles : mf_sm_count());
  lgb_wg_kernel<KIND><<<grid, TB_THREADS, smem, stream>>>(dinp, add, part, y, s1, s2, dcopy, dout, mean,
                                                          rstd, inp, gamma, beta, w, w_o, mask, rows,
                                                          O, mode);
  MF_CHECK_LAUNCH();
  return grid;
}

extern "C" int mf_ln_gemm_bwd_wg_cuda(int kind, bf16 *dinp, int add, float *part, bf16 *y,
                                      bf16 *s1, bf16 *s2, bf16 *dcopy, const bf16 *dout,
                                      const float *mean, const float *rstd, const bf16 *inp,
                                      const bf16 *gamma, const bf16 *beta, const bf16 *w,
                                      const bf16 *w_o, const uint8_t *mask, int64_t rows, int C,
                                      int O, mf_ln_mode mode, cudaStream_t stream) {
  MF_ASSERT(mf_ln_gemm_bwd_wg_supported(kind, C, O, mode),
            "ln_gemm_bwd_wg: unsupported kind=%d C=%d O=%d mode=%d", kind, C, O, (int)mode);
  MF_ASSERT(mean && rstd && inp && dout && w, "ln_gemm_bwd_wg: mean, rstd, inp, dout, w required");
  MF_ASSERT(kind != MF_LGB_SWIGLU || w_o, "ln_gemm_bwd_wg: w_o required");
  MF_ASSERT(mode == MF_LN_NONE || gamma, "ln_gemm_bwd_wg: gamma required");
  MF_ASSERT(mode != MF_LN_FULL || beta, "ln_gemm_bwd_wg: beta required");
  if (rows <= 0) return 0;
  if (kind == MF_LGB_SWIGLU)
    return lgb_wg_launch<MF_LGB_SWIGLU>(dinp, add, part, y, s1, s2, dcopy, dout, mean, rstd, inp,
                                        gamma, beta, w, w_o, NULL, rows, O, (int)mode, stream);
  return lgb_wg_launch<MF_LGB_GATED>(dinp, add, part, y, s1, NULL, NULL, dout, mean, rstd, inp, gamma,
                                     beta, w, NULL, mask, rows, O, (int)mode, stream);
}
