/* ln_gemm_bwd.cu — the fused backward kernel of LayerNorm + Linear, the gated projection
 * and the SwiGLU transition (mma.sync bf16 tensor cores, persistent CTAs of 8 warps over
 * 128-row tiles, weights streamed through shared memory in chunks of 64 with cp.async
 * double buffering). See ln_gemm_bwd_cuda.h for what it computes and writes. Not the
 * weight-gradient GEMMs (cuBLAS, in the callers), not a forward.
 *
 * Per tile: cp.async the dout tile into shared memory; LN-recompute y = LN(inp) from the
 * saved (mean, rstd), one warp per row, into shared memory (and to global y for the
 * callers' dW GEMMs). Per chunk j of 64 output/hidden channels, each warp owns 16 rows:
 *   GATED/SWIGLU: [p | g] or [a | b] (16 × 128) = y·W_jᵀ on tensor cores (fp32, registers);
 *   SWIGLU: dh (16 × 64) = dout·w_o[:, j] on tensor cores; GATED: dp comes from dout;
 *   the elementwise backward in registers → [dp | dg] or [da | db] as bf16 A fragments
 *   (the m16n8 accumulator layout is the m16k16 A layout), stored for the dW GEMMs;
 *   dy (16 × C, fp32 registers) += [d· | d·]·W_j  (LINEAR: dy += dout_j·W_j).
 * Then the LayerNorm backward from the registers: row sums by quad shuffles, dinp
 * written (or added), column partials of dγ/dβ reduced over the warp's rows by shuffles,
 * over the warps through shared memory in warp order, and over the CTA's tiles in tile
 * order in registers; one partial row per CTA at the end.
 *
 * Measured on an H200 (dev/cuda/bwd_lab.cu, 2026-11-30, M = N² rows, C = 128, FULL; whole
 * backward incl. the cuBLAS weight gradients, ms, staging / configurations 1 / 2 / 3):
 *   LN + Linear 128→128  N = 384: 0.149 / 0.202 / 0.194 / 0.201   N = 768: 0.542 / 0.758 / 0.723 / 0.756
 *   gated 128→128        N = 384: 0.251 / 0.308 / 0.296 / 0.299   N = 768: 0.941 / 1.158 / 1.121 / 1.132
 *   transition Hd = 512  N = 384: 0.785 / 1.024 / 0.926 / 0.905   N = 768: 3.036 / 3.643 / 3.338 / 3.243
 * so it is OFF by default (LGB_DEFAULTS: the wgmma kernels of configuration 7 are the
 * defaults); mf_ln_gemm_bwd_set_variant(1..3) turns it on.
 * Where the time goes (transition, N = 768): the kernel alone 2.45 ms (configuration 3;
 * 158 TFLOP/s of its 386 GFLOP), the two dW GEMMs 0.52 ms (447 TFLOP/s). The kernel's
 * shared-memory floor — ldmatrix.x4 for every B fragment, 16-row warp tiles (dy must stay
 * in registers), about 12k ldmatrix.x4 per 128-row tile at 128 B/clk — is ≈ 28 µs per
 * tile, 0.95 ms at N = 768; it runs at ≈ 70 µs per tile. Suspects not yet profiled: the
 * fully unrolled code (72–106 KB of SASS per instantiation, beyond the instruction cache),
 * one or two CTAs of 8 warps per SM serialising LN prologue / chunks / epilogue, and the
 * 255-register budget leaving no room to software-pipeline ldmatrix → mma. LINEAR does
 * little math and still reaches only ≈ 1.2 TB/s: latency-bound. Next levers: ncu stall
 * reasons; less unrolling outside the chunk loop; wgmma with B from shared memory.
 *
 * The light kernel (template flag DX = false; SWIGLU only; configurations 4..6): the same
 * tile loop without dy and the LayerNorm backward — per tile it writes y, [da | db] and h
 * (bf16) and the transition (transition.cu) runs dx̂ = [da | db]·w_ab (cuBLAS, fp32) and
 * the LayerNorm row backward as its staging path does: 232 of the 386 GFLOP at N = 768 and
 * ≈ 11 KB of HBM traffic per row instead of ≈ 17 KB (staging). Its shared-memory reads per
 * 16 rows and chunk of 32: 64 ldmatrix.x4 for 96 mma (the full kernel: 96 for 128). With
 * MT = 2 m16 tiles per warp (configuration 6: 8 warps × 32 rows, 256-row tiles, 216 KiB of
 * shared memory) each B fragment feeds four mma: 80 ldmatrix.x4 for 192 mma per 32 rows.
 * ptxas (sm_90a, C = 128): 4 (8 warps, BN 64) 238 registers; 5 (4 warps, BN 32, 2 CTAs/SM)
 * 242; 6 (MT = 2) 255; no spills (the full SWIGLU configurations: 249–255, 2 and 3
 * spilling 64 / 12 bytes). Dynamic shared memory at C = 128: 4 172 KiB, 5 101 KiB, 6 216
 * KiB, so shared memory, not registers, sets the occupancy (4, 6: one CTA per SM; 5: two).
 * Timed since (bwd_lab, above: 4 / 5 / 6 whole backward 3.978 / 3.268 / 2.990 ms at N = 768,
 * the kernels alone 2.61 / 1.88 / 1.57 ms); the wgmma kernel of configuration 7 replaces
 * them (ln_gemm_bwd_wg.cu). */
#include "ln_gemm_bwd_cuda.h"

#include "fusion_util.cuh"
#include "mma_ptx.cuh"

#define LGB_MAX_GRID 1024
#define LGB_MIN_BM 64 /* the smallest tile of any configuration (parts bound) */

/* Configurations (mf_ln_gemm_bwd_set_variant): 1 = 8 warps (128-row tiles), weight
 * chunks of 64, one CTA per SM; 2 = 4 warps (64-row tiles), chunks of 32 (64 for
 * LINEAR), fast sigmoid, several CTAs per SM; 3 = 8 warps, chunks of 32, fast sigmoid.
 * The light kernel (DX = false; SWIGLU only; the caller does dx̂ and the LayerNorm
 * backward): 4 = 8 warps, chunks of 64, fast sigmoid; 5 = 4 warps, chunks of 32, fast
 * sigmoid, two CTAs per SM; 6 = 8 warps of 32 rows (two m16 tiles: 256-row tiles, each
 * B fragment feeds four mma instead of two), chunks of 32, fast sigmoid, one CTA per SM
 * (216 KiB of shared memory at C = 128). */
#define LGB_NVAR 7 /* the largest configuration number */
/* Configuration 7: the wgmma kernels — LINEAR: ln_linear_bwd_wg.cu (taken by ln_linear.cu
 * through mf_ln_gemm_bwd_wg, not through this file's kernel); GATED and SWIGLU:
 * ln_gemm_bwd_wg.cu (C = 128). Other shapes run staging under it. */
#define LGB_WG 7
static int lgb_is_light(int var) { return var >= 4 && var <= 6; }
/* Defaults per kind (LINEAR, GATED, SWIGLU): 7, the wgmma kernels, where they take the
 * shape (else staging + cuBLAS). H200, 2026-11-30, bench/evofusion, M = 768² (384²), C =
 * 128, whole backward incl. the dW GEMMs, staging → 7: LN + Linear 0.530 → 0.381 ms
 * (0.147 → 0.115), gated O = 128 0.925 → 0.734 (0.250 → 0.193), transition Hd = 512
 * 3.040 → 2.329 (0.786 → 0.643). The mma.sync configurations 1–6 all measured slower
 * than staging (the file comment) and stay opt-in. */
#define LGB_DEFAULTS {7, 7, 7}
static int g_lgb_variant[3] = LGB_DEFAULTS;

extern "C" int mf_ln_gemm_bwd_set_variant(int variant) {
  static const int defaults[3] = LGB_DEFAULTS;
  const int old = g_lgb_variant[0];
  for (int k = 0; k < 3; k++)
    g_lgb_variant[k] = variant >= 0 && variant <= LGB_NVAR ? variant : defaults[k];
  return old;
}

static int lgb_aligned(const void *p) { return !p || ((uintptr_t)p & 15) == 0; }

static int lgb_shape_ok(int kind, int C, int O, mf_ln_mode mode, const void *p0, const void *p1,
                        const void *p2, const void *p3) {
  if (kind < 0 || kind > 2) return 0;
  if (C != 64 && C != 128) return 0;
  if (O <= 0 || O % 64) return 0;
  if (kind != MF_LGB_SWIGLU && O > 256) return 0;
  if (mode != MF_LN_FULL && mode != MF_LN_SCALE && mode != MF_LN_NONE) return 0;
  return lgb_aligned(p0) && lgb_aligned(p1) && lgb_aligned(p2) && lgb_aligned(p3);
}

extern "C" int mf_ln_gemm_bwd_supported(int kind, int C, int O, mf_ln_mode mode, const void *p0,
                                        const void *p1, const void *p2, const void *p3) {
  if (kind >= 0 && kind <= 2 && g_lgb_variant[kind] == LGB_WG)
    return mf_ln_gemm_bwd_wg_supported(kind, C, O, mode) &&
           lgb_shape_ok(kind, C, O, mode, p0, p1, p2, p3);
  return kind >= 0 && kind <= 2 && g_lgb_variant[kind] &&
         (kind == MF_LGB_SWIGLU || !lgb_is_light(g_lgb_variant[kind])) &&
         lgb_shape_ok(kind, C, O, mode, p0, p1, p2, p3);
}

extern "C" int mf_ln_gemm_bwd_wg(int kind) {
  return kind == MF_LGB_LINEAR && g_lgb_variant[kind] == LGB_WG;
}

extern "C" int mf_ln_gemm_bwd_config(int kind) {
  return kind >= 0 && kind <= 2 ? g_lgb_variant[kind] : 0;
}

extern "C" int mf_ln_gemm_bwd_light(int kind) {
  return kind >= 0 && kind <= 2 && lgb_is_light(g_lgb_variant[kind]);
}

extern "C" int mf_ln_gemm_bwd_parts(int64_t rows) {
  int64_t t = (rows + LGB_MIN_BM - 1) / LGB_MIN_BM;
  int64_t g = (int64_t)mf_sm_count() * 4;
  if (g > LGB_MAX_GRID) g = LGB_MAX_GRID;
  if (t < g) g = t;
  return (int)(g < 1 ? 1 : g);
}

/* ---------------------------------------------------------------- PTX helpers */
/* 16 bytes global → shared, zero-filled past src_bytes (0 or 16) */
static __device__ __forceinline__ void lgb_cp16(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
template <bool FAST>
static __device__ __forceinline__ float lgb_sigmoid(float x) {
  if constexpr (FAST) return mf_sigmoidf_fast(x);
  else return mf_sigmoidf(x);
}
static __device__ __forceinline__ float2 lgb_unpack(uint32_t u) {
  __nv_bfloat162 v = *(__nv_bfloat162 *)&u;
  return make_float2(__low2float(v), __high2float(v));
}
/* d[0], d[1] (two 16 × 8 fp32 tiles) += a (16 × 16 bf16) · the two n8 halves of the x4
 * B fragment b */
static __device__ __forceinline__ void lgb_mma_x2(float (*d)[4], const uint32_t *a,
                                                  const uint32_t *b) {
  mf_mma_bf16(d[0], a, b[0], b[1]);
  mf_mma_bf16(d[1], a, b[2], b[3]);
}
/* The LayerNorm backward of one row at a lane's channel pair: from x (the raw pair), the
 * row's mu, rs, the pair's dy (d0, d1) and γ (g0, g1), the row's Σ dy⊙γ / C (sg) and
 * Σ dy⊙γ⊙x̂ / C (sgx), plus o (the old dinp pair, or 0): the bf16 pair to store. */
static __device__ __forceinline__ uint32_t lgb_ln_dx(float2 x, float mu, float rs, float d0,
                                                     float d1, float g0, float g1, float sg,
                                                     float sgx, float2 o) {
  const float x0 = (x.x - mu) * rs, x1 = (x.y - mu) * rs;
  const float v0 = rs * (d0 * g0 - sg - x0 * sgx) + o.x;
  const float v1 = rs * (d1 * g1 - sg - x1 * sgx) + o.y;
  return mf_pack_bf16x2(v0, v1);
}
/* a, b, c, d each summed over the lanes whose index differs in the bits FROM .. TO/2
 * (xor butterfly, offsets FROM, 2·FROM, .. < TO) */
template <int FROM, int TO>
static __device__ __forceinline__ void lgb_xor_sum4(float &a, float &b, float &c, float &d) {
#pragma unroll
  for (int off = FROM; off < TO; off <<= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, off);
    b += __shfl_xor_sync(0xffffffffu, b, off);
    c += __shfl_xor_sync(0xffffffffu, c, off);
    d += __shfl_xor_sync(0xffffffffu, d, off);
  }
}
/* d[0 .. 2·NP) (16 × 16·NP fp32, n8 tiles) += a (16 × 16 bf16) · B, B = the 16 rows k0..
 * of the bf16 shared tile sb (., ld), columns 0 .. 16·NP, by transposed ldmatrix (bk, lh:
 * the lane's row / column address parts) */
template <int NP>
static __device__ __forceinline__ void lgb_mma_bt(float (*d)[4], const uint32_t *a,
                                                  const bf16 *sb, int ld, int k0, int lane,
                                                  int bk, int lh) {
#pragma unroll
  for (int np = 0; np < NP; np++) {
    uint32_t b[4];
    mf_ldsm_x4_t(b, mf_smem_u32(sb + (k0 + (lane & 7) + bk) * ld + np * 16 + lh));
    lgb_mma_x2(d + 2 * np, a, b);
  }
}

/* ---------------------------------------------------------------- the kernel */
typedef struct {
  bf16 *dinp;        /* (rows, C) or NULL */
  float *part;       /* (gridDim.x, 2C) or NULL */
  bf16 *y;           /* (rows, C) or NULL */
  bf16 *s1;          /* GATED/SWIGLU: (rows, 2O) or NULL */
  bf16 *s2;          /* SWIGLU: h (rows, O) or NULL */
  bf16 *dcopy;       /* a copy of dout (rows, C) (SWIGLU) or NULL */
  const bf16 *dout;  /* (rows, O) or (rows, C) for SWIGLU; may equal dinp */
  const float *mean; /* (rows) */
  const float *rstd; /* (rows) */
  const bf16 *inp;   /* (rows, C) */
  const bf16 *gamma; /* (C) */
  const bf16 *beta;  /* (C) */
  const bf16 *w;     /* (O, C) LINEAR, (2O, C) GATED/SWIGLU */
  const bf16 *wo;    /* (C, O) SWIGLU */
  const uint8_t *mask; /* (rows) GATED, or NULL */
  int64_t rows;
  int O;
  int mode;
  int add;
} lgb_params;

/* C channels, KIND, WARPS warps of 16 rows (tile LGB_BM = 16·WARPS rows), weight chunks of
 * BN output/hidden channels, FAST sigmoid (__expf, __fdividef), MINB CTAs per SM wanted,
 * DX: dy and the LayerNorm backward on chip (false: the light kernel, which writes y, s1,
 * s2 only and leaves dx̂ = s1·W and the LayerNorm backward to the caller; no dy registers,
 * no reduction buffer), MT m16 tiles per warp (warp tiles of 16·MT rows, so each B fragment
 * from shared memory feeds MT tiles; MT > 1 only in the light SWIGLU kernel). */
template <int C, int KIND, int WARPS, int BN, bool FAST, int MINB, bool DX, int MT>
struct lgb_cfg {
  static constexpr int LGB_WARPS = WARPS;
  static constexpr int LGB_THREADS = WARPS * MF_WARP_SIZE;
  static constexpr int LGB_BM = 16 * WARPS * MT;
  static_assert(MT == 1 || (!DX && KIND == MF_LGB_SWIGLU),
                "ln_gemm_bwd: several m16 tiles per warp only in the light SwiGLU kernel");
  static constexpr int LGB_BN = BN;
  static constexpr int LDY = C + 8;                /* y tile row stride (elements) */
  static constexpr int LDW = C + 8;                /* weight chunk row stride */
  static constexpr int LDO = BN + 8;               /* w_o slice row stride */
  static constexpr int WROWS = KIND == MF_LGB_LINEAR ? BN : 2 * BN;
  static constexpr int STAGE = WROWS * LDW + (KIND == MF_LGB_SWIGLU ? C * LDO : 0);
  /* chunks of 32: the warp's [d· | d· (| h)] rows are staged in shared memory (16 rows of
   * NS·BN, padded) and stored to global in 16-byte pieces; chunks of 64 store directly */
  static constexpr bool STG = BN == 32 && KIND != MF_LGB_LINEAR;
  static constexpr int NS = KIND == MF_LGB_SWIGLU ? 3 : 2;
  static constexpr int LDS = NS * BN + 8;
  static constexpr int STG_WARP = STG ? 16 * LDS : 0; /* elements per warp */
  static size_t smem_bytes(int O) {
    const int DW = KIND == MF_LGB_SWIGLU ? C : O;
    return ((size_t)LGB_BM * LDY + (size_t)LGB_BM * (DW + 8) + 2 * (size_t)STAGE +
            (size_t)WARPS * STG_WARP) * 2 +
           (DX ? (size_t)WARPS * 2 * C * 4 : 0);
  }
};

template <int C, int KIND, int WARPS, int BN, bool FAST, int MINB, bool DX, int MT>
static __global__ void __launch_bounds__(WARPS * 32, MINB)
    lgb_kernel(const lgb_params p) {
  typedef lgb_cfg<C, KIND, WARPS, BN, FAST, MINB, DX, MT> K;
  constexpr int LGB_WARPS = K::LGB_WARPS, LGB_THREADS = K::LGB_THREADS;
  constexpr int LGB_BM = K::LGB_BM, LGB_BN = K::LGB_BN;
  constexpr int V = C / 32;       /* LN values per lane */
  constexpr int NT = C / 8;       /* n-tiles of dy */
  constexpr int NJ = LGB_BN / 8;  /* n-tiles of a chunk */
  constexpr int KJ = LGB_BN / 16; /* k-steps of a chunk */
  constexpr int PK = (2 * C + LGB_THREADS - 1) / LGB_THREADS; /* partial columns per thread */
  extern __shared__ __align__(16) unsigned char lgb_sm[];
  const int O = p.O;
  const int DW = KIND == MF_LGB_SWIGLU ? C : O;
  const int LDD = DW + 8;
  bf16 *sy = (bf16 *)lgb_sm;                /* (BM, LDY) */
  bf16 *sd = sy + LGB_BM * K::LDY;          /* (BM, LDD) */
  bf16 *sw0 = sd + LGB_BM * LDD;            /* 2 stages */
  float *red = (float *)(sw0 + 2 * K::STAGE + LGB_WARPS * K::STG_WARP); /* (WARPS, 2C) */
  const int tid = threadIdx.x, warp = tid / MF_WARP_SIZE, lane = tid % MF_WARP_SIZE;
  const int g = lane >> 2, t = lane & 3, wr = warp * 16 * MT; /* the warp's first row */
  bf16 *sstg = sw0 + 2 * K::STAGE + warp * K::STG_WARP; /* the warp's (16, LDS) staging */
  const int64_t rows = p.rows;
  const int64_t ntiles = (rows + LGB_BM - 1) / LGB_BM;
  const int nch = O / LGB_BN;
  const bool need_dx = DX && (p.dinp || p.part); /* constant false in the light kernel */
  const int mode = p.mode;

  /* weight chunk j → stage st (one cp.async group) */
  auto issue_w = [&](bf16 *st, int j) {
    const int j0 = j * LGB_BN;
    constexpr int VPR = C / 8;
    for (int i = tid; i < K::WROWS * VPR; i += LGB_THREADS) {
      const int r = i / VPR, v = i - r * VPR;
      const int grow = (KIND == MF_LGB_LINEAR || r < LGB_BN) ? j0 + r : O + j0 + r - LGB_BN;
      lgb_cp16(mf_smem_u32(st + r * K::LDW + v * 8), p.w + (int64_t)grow * C + v * 8, 16);
    }
    if (KIND == MF_LGB_SWIGLU) {
      bf16 *so = st + K::WROWS * K::LDW;
      for (int i = tid; i < C * (LGB_BN / 8); i += LGB_THREADS) {
        const int c = i / (LGB_BN / 8), v = i % (LGB_BN / 8);
        lgb_cp16(mf_smem_u32(so + c * K::LDO + v * 8), p.wo + (int64_t)c * O + j0 + v * 8, 16);
      }
    }
    mf_cp_async_commit();
  };

  float gmv[V], btv[V];
#pragma unroll
  for (int i = 0; i < V; i++) {
    const int c = lane * V + i;
    gmv[i] = mode != MF_LN_NONE ? mf_bf16_to_f32(p.gamma[c]) : 1.0f;
    btv[i] = mode == MF_LN_FULL ? mf_bf16_to_f32(p.beta[c]) : 0.0f;
  }
  float pacc[PK]; /* columns tid + k·THREADS of the CTA's [Σ dy⊙x̂ | Σ dy] */
#pragma unroll
  for (int k = 0; k < PK; k++) pacc[k] = 0.0f;
  __shared__ float sgam[C]; /* γ (1 for NONE), for the LayerNorm backward */
  for (int c = tid; c < C; c += LGB_THREADS)
    sgam[c] = mode != MF_LN_NONE ? mf_bf16_to_f32(p.gamma[c]) : 1.0f;

  int stage = 0;
  issue_w(sw0, 0);
  for (int64_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const int64_t r0 = tile * LGB_BM;
    /* dout tile → sd (rows past the end zero-filled) */
    {
      const int dvr = DW / 8;
      for (int i = tid; i < LGB_BM * dvr; i += LGB_THREADS) {
        const int r = i / dvr, v = i - r * dvr;
        const int64_t gr = r0 + r;
        const bool ok = gr < rows;
        lgb_cp16(mf_smem_u32(sd + r * LDD + v * 8), p.dout + (ok ? gr : 0) * DW + v * 8, ok ? 16 : 0);
      }
      mf_cp_async_commit();
    }
    /* y = LN(inp) from the saved statistics → sy (and global y): the warp's 16 rows in two
     * batches of 8, all loads of a batch issued before any store */
#pragma unroll
    for (int bt = 0; bt < 2 * MT; bt++) {
      float xv[8][V], mu[8], rs[8];
#pragma unroll
      for (int rr = 0; rr < 8; rr++) {
        const int64_t gr = r0 + wr + bt * 8 + rr;
        if (gr < rows) {
          mu[rr] = p.mean[gr];
          rs[rr] = p.rstd[gr];
          mf_row_load_bf16<V, true>(xv[rr], p.inp + gr * C, lane, C);
        } else {
          mu[rr] = rs[rr] = 0.0f;
#pragma unroll
          for (int i = 0; i < V; i++) xv[rr][i] = 0.0f;
        }
      }
#pragma unroll
      for (int rr = 0; rr < 8; rr++) {
        const int r = wr + bt * 8 + rr;
        const int64_t gr = r0 + r;
        float o[V];
#pragma unroll
        for (int i = 0; i < V; i++) {
          float v = (xv[rr][i] - mu[rr]) * rs[rr];
          if (mode != MF_LN_NONE) v *= gmv[i];
          if (mode == MF_LN_FULL) v += btv[i];
          o[i] = gr < rows ? v : 0.0f;
        }
        uint32_t pk[V / 2];
#pragma unroll
        for (int i = 0; i < V / 2; i++) pk[i] = mf_pack_bf16x2(o[2 * i], o[2 * i + 1]);
        if constexpr (V == 4) {
          const uint2 u = make_uint2(pk[0], pk[1]);
          *(uint2 *)(sy + r * K::LDY + lane * V) = u;
          if (p.y && gr < rows) *(uint2 *)(p.y + gr * C + lane * V) = u;
        } else {
          *(uint32_t *)(sy + r * K::LDY + lane * V) = pk[0];
          if (p.y && gr < rows) *(uint32_t *)(p.y + gr * C + lane * V) = pk[0];
        }
      }
    }
    /* the per-row values of the warp's rows g and g + 8 (mask, statistics), loaded early */
    const int64_t ra = r0 + wr + g, rb = ra + 8;
    const bool oka = ra < rows, okb = rb < rows;
    const float mua = oka ? p.mean[ra] : 0.0f, rsa = oka ? p.rstd[ra] : 0.0f;
    const float mub = okb ? p.mean[rb] : 0.0f, rsb = okb ? p.rstd[rb] : 0.0f;
    const float ma = (oka && (KIND != MF_LGB_GATED || !p.mask || p.mask[ra])) ? 1.0f : 0.0f;
    const float mb = (okb && (KIND != MF_LGB_GATED || !p.mask || p.mask[rb])) ? 1.0f : 0.0f;
    mf_cp_async_wait<0>();
    __syncthreads();
    if (KIND == MF_LGB_SWIGLU && p.dcopy) { /* for the caller's dW_o when dinp overwrites dout */
      const int dvr = DW / 8;
      for (int i = tid; i < LGB_BM * dvr; i += LGB_THREADS) {
        const int r = i / dvr, v = i - r * dvr;
        if (r0 + r < rows)
          *(uint4 *)(p.dcopy + (r0 + r) * DW + v * 8) = *(const uint4 *)(sd + r * LDD + v * 8);
      }
    }

    float dx[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) dx[n][0] = dx[n][1] = dx[n][2] = dx[n][3] = 0.0f;

    for (int j = 0; j < nch; j++) {
      const bool more = j + 1 < nch || tile + gridDim.x < ntiles;
      if (more)
        issue_w(sw0 + (stage ^ 1) * K::STAGE, j + 1 < nch ? j + 1 : 0);
      else
        mf_cp_async_commit();
      mf_cp_async_wait<1>();
      __syncthreads();
      const bf16 *sw = sw0 + stage * K::STAGE;
      const int j0 = j * LGB_BN;
      const int lr = lane & 15, lh = (lane >> 4) * 8;          /* A / trans-B address parts */
      const int bn = (lane & 7) + (lane >> 4) * 8, bk = ((lane >> 3) & 1) * 8; /* B parts */
      if constexpr (KIND == MF_LGB_LINEAR) {
        if (need_dx) {
#pragma unroll
          for (int kk = 0; kk < KJ; kk++) {
            uint32_t a[4];
            mf_ldsm_x4(a, mf_smem_u32(sd + (wr + lr) * LDD + j0 + kk * 16 + lh));
            lgb_mma_bt<NT / 2>(dx, a, sw, K::LDW, kk * 16, lane, bk, lh);
          }
        }
      } else {
        /* [p | g] or [a | b] of the chunk: pa, pb (16 × BN each, per m16 tile of the warp) */
        float pa[MT][NJ][4], pb[MT][NJ][4], dd[MT][NJ][4];
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
          for (int n = 0; n < NJ; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) pa[m][n][e] = pb[m][n][e] = dd[m][n][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < C / 16; kk++) {
          uint32_t a[MT][4];
#pragma unroll
          for (int m = 0; m < MT; m++)
            mf_ldsm_x4(a[m], mf_smem_u32(sy + (wr + 16 * m + lr) * K::LDY + kk * 16 + lh));
#pragma unroll
          for (int np = 0; np < NJ / 2; np++) {
            uint32_t b[4];
            mf_ldsm_x4(b, mf_smem_u32(sw + (np * 16 + bn) * K::LDW + kk * 16 + bk));
#pragma unroll
            for (int m = 0; m < MT; m++) lgb_mma_x2(pa[m] + 2 * np, a[m], b);
            mf_ldsm_x4(b, mf_smem_u32(sw + (LGB_BN + np * 16 + bn) * K::LDW + kk * 16 + bk));
#pragma unroll
            for (int m = 0; m < MT; m++) lgb_mma_x2(pb[m] + 2 * np, a[m], b);
          }
        }
        if constexpr (KIND == MF_LGB_SWIGLU) {
          /* dh (16 × BN per m16 tile) = dout·w_o[:, j0 : j0 + BN] */
          const bf16 *so = sw + K::WROWS * K::LDW;
#pragma unroll
          for (int kk = 0; kk < C / 16; kk++) {
            uint32_t a[MT][4];
#pragma unroll
            for (int m = 0; m < MT; m++)
              mf_ldsm_x4(a[m], mf_smem_u32(sd + (wr + 16 * m + lr) * LDD + kk * 16 + lh));
#pragma unroll
            for (int np = 0; np < NJ / 2; np++) {
              uint32_t b[4];
              mf_ldsm_x4_t(b, mf_smem_u32(so + (kk * 16 + (lane & 7) + bk) * K::LDO + np * 16 + lh));
#pragma unroll
              for (int m = 0; m < MT; m++) lgb_mma_x2(dd[m] + 2 * np, a[m], b);
            }
          }
        } else {
          /* d(out) of the chunk from the dout tile, masked (MT == 1) */
#pragma unroll
          for (int n = 0; n < NJ; n++) {
            const int c = j0 + n * 8 + 2 * t;
            const float2 va = lgb_unpack(*(const uint32_t *)(sd + (wr + g) * LDD + c));
            const float2 vb = lgb_unpack(*(const uint32_t *)(sd + (wr + g + 8) * LDD + c));
            dd[0][n][0] = va.x * ma;
            dd[0][n][1] = va.y * ma;
            dd[0][n][2] = vb.x * mb;
            dd[0][n][3] = vb.y * mb;
          }
        }
        /* the elementwise backward → bf16 A fragments ua = d(first), ub = d(second), per
         * m16 tile m (rows wr + 16m + g, + 8) */
        uint32_t ua[MT][NJ][2], ub[MT][NJ][2];
#pragma unroll
        for (int m = 0; m < MT; m++) {
#pragma unroll
          for (int n = 0; n < NJ; n++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
              float u[2], v[2], hh[2];
#pragma unroll
              for (int e = 0; e < 2; e++) {
                const float x = pa[m][n][2 * h + e], z = pb[m][n][2 * h + e];
                const float d = dd[m][n][2 * h + e];
                if constexpr (KIND == MF_LGB_SWIGLU) { /* h = silu(a)⊙b */
                  const float s = lgb_sigmoid<FAST>(x);
                  hh[e] = x * s * z;
                  u[e] = d * z * s * (1.0f + x * (1.0f - s));
                  v[e] = d * x * s;
                } else { /* out = σ(g)⊙p */
                  const float s = lgb_sigmoid<FAST>(z);
                  hh[e] = 0.0f;
                  u[e] = d * s;
                  v[e] = d * x * s * (1.0f - s);
                }
              }
              ua[m][n][h] = mf_pack_bf16x2(u[0], u[1]);
              ub[m][n][h] = mf_pack_bf16x2(v[0], v[1]);
              if constexpr (K::STG) {
                uint32_t *row = (uint32_t *)(sstg + (g + 8 * h) * K::LDS + n * 8 + 2 * t);
                row[0] = ua[m][n][h];
                row[LGB_BN / 2] = ub[m][n][h];
                if (KIND == MF_LGB_SWIGLU) row[LGB_BN] = mf_pack_bf16x2(hh[0], hh[1]);
                continue;
              }
              const int64_t r = r0 + wr + 16 * m + g + 8 * h;
              if (r < rows) {
                const int c = j0 + n * 8 + 2 * t;
                if (p.s1) {
                  *(uint32_t *)(p.s1 + r * 2 * O + c) = ua[m][n][h];
                  *(uint32_t *)(p.s1 + r * 2 * O + O + c) = ub[m][n][h];
                }
                if (KIND == MF_LGB_SWIGLU && p.s2)
                  *(uint32_t *)(p.s2 + r * O + c) = mf_pack_bf16x2(hh[0], hh[1]);
              }
            }
          }
          if constexpr (K::STG) { /* the staged rows → global, 16 bytes per lane */
            __syncwarp();
            constexpr int VR = K::NS * (LGB_BN / 8); /* 16-byte pieces per row */
#pragma unroll
            for (int k = 0; k < VR / 2; k++) {
              const int i = lane + k * 32, rr = i / VR, w8 = i % VR;
              const int seg = w8 / (LGB_BN / 8), v = w8 % (LGB_BN / 8);
              const int64_t r = r0 + wr + 16 * m + rr;
              bf16 *dst = seg == 2 ? p.s2 : p.s1;
              if (r < rows && dst) {
                const int64_t off = seg == 2 ? r * O : r * 2 * O + (seg ? O : 0);
                *(uint4 *)(dst + off + j0 + v * 8) =
                    *(const uint4 *)(sstg + rr * K::LDS + seg * LGB_BN + v * 8);
              }
            }
            __syncwarp();
          }
        }
        /* dy += [ua | ub] (16 × 2BN) · W_j (2BN × C) */
        if (need_dx) {
#pragma unroll
          for (int kk = 0; kk < 2 * KJ; kk++) {
            const int q = (kk % KJ) * 2;
            uint32_t a[4];
            if (kk < KJ) {
              a[0] = ua[0][q][0]; a[1] = ua[0][q][1]; a[2] = ua[0][q + 1][0]; a[3] = ua[0][q + 1][1];
            } else {
              a[0] = ub[0][q][0]; a[1] = ub[0][q][1]; a[2] = ub[0][q + 1][0]; a[3] = ub[0][q + 1][1];
            }
            lgb_mma_bt<NT / 2>(dx, a, sw, K::LDW, kk * 16, lane, bk, lh);
          }
        }
      }
      __syncthreads();
      stage ^= 1;
    }

    /* LayerNorm backward of the warp's 16 rows from dx (rows g and g + 8 of the warp); the
     * rows' inp (and, adding, the old dinp) loaded in one batch before any store */
    if (need_dx) {
      uint32_t xpa[NT], xpb[NT];
#pragma unroll
      for (int n = 0; n < NT; n++) {
        const int c = n * 8 + 2 * t;
        xpa[n] = oka ? *(const uint32_t *)(p.inp + ra * C + c) : 0u;
        xpb[n] = okb ? *(const uint32_t *)(p.inp + rb * C + c) : 0u;
      }
      float sga = 0.0f, sgxa = 0.0f, sgb = 0.0f, sgxb = 0.0f;
#pragma unroll
      for (int n = 0; n < NT; n++) {
        const int c = n * 8 + 2 * t;
        const float2 xa = lgb_unpack(xpa[n]), xb = lgb_unpack(xpb[n]);
        const float xa0 = (xa.x - mua) * rsa, xa1 = (xa.y - mua) * rsa;
        const float xb0 = (xb.x - mub) * rsb, xb1 = (xb.y - mub) * rsb;
        const float g0 = sgam[c], g1 = sgam[c + 1];
        const float ga0 = dx[n][0] * g0, ga1 = dx[n][1] * g1;
        const float gb0 = dx[n][2] * g0, gb1 = dx[n][3] * g1;
        sga += ga0 + ga1;
        sgxa += ga0 * xa0 + ga1 * xa1;
        sgb += gb0 + gb1;
        sgxb += gb0 * xb0 + gb1 * xb1;
        /* column partials over the warp's 16 rows: rows g, g + 8, then the 8 row groups */
        float q0 = dx[n][0] * xa0 + dx[n][2] * xb0, q1 = dx[n][1] * xa1 + dx[n][3] * xb1;
        float b0 = dx[n][0] + dx[n][2], b1 = dx[n][1] + dx[n][3];
        lgb_xor_sum4<4, 32>(q0, q1, b0, b1);
        if (g == 0) {
          red[warp * 2 * C + c] = q0;
          red[warp * 2 * C + c + 1] = q1;
          red[warp * 2 * C + C + c] = b0;
          red[warp * 2 * C + C + c + 1] = b1;
        }
      }
      lgb_xor_sum4<1, 4>(sga, sgxa, sgb, sgxb);
      sga /= (float)C;
      sgxa /= (float)C;
      sgb /= (float)C;
      sgxb /= (float)C;
      if (p.dinp) {
        uint32_t opa[NT], opb[NT];
#pragma unroll
        for (int n = 0; n < NT; n++) {
          const int c = n * 8 + 2 * t;
          opa[n] = (p.add && oka) ? *(const uint32_t *)(p.dinp + ra * C + c) : 0u;
          opb[n] = (p.add && okb) ? *(const uint32_t *)(p.dinp + rb * C + c) : 0u;
        }
#pragma unroll
        for (int n = 0; n < NT; n++) {
          const int c = n * 8 + 2 * t;
          const float g0 = sgam[c], g1 = sgam[c + 1];
          const float2 xa = lgb_unpack(xpa[n]), xb = lgb_unpack(xpb[n]);
          const float2 oa = lgb_unpack(opa[n]), ob = lgb_unpack(opb[n]);
          if (oka)
            *(uint32_t *)(p.dinp + ra * C + c) =
                lgb_ln_dx(xa, mua, rsa, dx[n][0], dx[n][1], g0, g1, sga, sgxa, oa);
          if (okb)
            *(uint32_t *)(p.dinp + rb * C + c) =
                lgb_ln_dx(xb, mub, rsb, dx[n][2], dx[n][3], g0, g1, sgb, sgxb, ob);
        }
      }
      __syncthreads();
#pragma unroll
      for (int k = 0; k < PK; k++) {
        const int col = tid + k * LGB_THREADS;
        if (col < 2 * C) {
          float s = 0.0f;
#pragma unroll
          for (int w = 0; w < LGB_WARPS; w++) s += red[w * 2 * C + col];
          pacc[k] += s;
        }
      }
    }
  }
  mf_cp_async_wait<0>();
  if (DX && p.part)
#pragma unroll
    for (int k = 0; k < PK; k++) {
      const int col = tid + k * LGB_THREADS;
      if (col < 2 * C) p.part[(int64_t)blockIdx.x * 2 * C + col] = pacc[k];
    }
}

/* Launches configuration <C, KIND, WARPS, BN, FAST, MINB, DX, MT>: a persistent grid of
 * min(tiles, resident CTAs, LGB_MAX_GRID) CTAs (resident = SMs × CTAs per SM from the
 * occupancy calculator: fixed for one GPU model, so the summation order is too). */
template <int C, int KIND, int WARPS, int BN, bool FAST, int MINB, bool DX, int MT>
static int lgb_launch(const lgb_params &p, cudaStream_t s) {
  typedef lgb_cfg<C, KIND, WARPS, BN, FAST, MINB, DX, MT> K;
  static size_t attr = 0, occ_smem = 0;
  static int occ = 1;
  const size_t smem = K::smem_bytes(p.O);
  if (smem > attr) {
    MF_CHECK_CUDA(cudaFuncSetAttribute(lgb_kernel<C, KIND, WARPS, BN, FAST, MINB, DX, MT>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    attr = smem;
  }
  if (smem != occ_smem) {
    MF_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &occ, lgb_kernel<C, KIND, WARPS, BN, FAST, MINB, DX, MT>, K::LGB_THREADS, smem));
    occ = occ < 1 ? 1 : (occ > 4 ? 4 : occ);
    occ_smem = smem;
  }
  const int64_t tiles = (p.rows + K::LGB_BM - 1) / K::LGB_BM;
  int64_t grid = (int64_t)mf_sm_count() * occ;
  if (grid > LGB_MAX_GRID) grid = LGB_MAX_GRID;
  if (grid > tiles) grid = tiles;
  lgb_kernel<C, KIND, WARPS, BN, FAST, MINB, DX, MT><<<(unsigned)grid, K::LGB_THREADS, smem, s>>>(p);
  MF_CHECK_LAUNCH();
  return (int)grid;
}

extern "C" int mf_ln_gemm_bwd_cuda(int kind, bf16 *dinp, int add, float *part, bf16 *y, bf16 *s1,
                                   bf16 *s2, bf16 *dcopy, const bf16 *dout, const float *mean,
                                   const float *rstd, const bf16 *inp, const bf16 *gamma,
                                   const bf16 *beta, const bf16 *w, const bf16 *w_o,
                                   const uint8_t *mask, int64_t rows, int C, int O,
                                   mf_ln_mode mode, cudaStream_t stream) {
  MF_ASSERT(kind >= 0 && kind <= 2, "ln_gemm_bwd: kind %d", kind);
  /* variant 0 (the ops' staging path) does not stop a direct call: configuration 1; the
   * light configurations run only for SWIGLU without dinp and part, else configuration 2
   * (for 5) or 3 (for 4, 6), which form dy; 7 runs ln_gemm_bwd_wg.cu where it takes the
   * shape, else configuration 3 */
  int var = g_lgb_variant[kind] ? g_lgb_variant[kind] : 1;
  if (lgb_is_light(var) && (kind != MF_LGB_SWIGLU || dinp || part)) var = var == 5 ? 2 : 3;
  MF_ASSERT(lgb_shape_ok(kind, C, O, mode, inp, dout, w, w_o) && mean && rstd && inp && dout && w, "ln_gemm_bwd: unsupported kind=%d C=%d O=%d mode=%d",
            kind, C, O, (int)mode);
  MF_ASSERT(kind != MF_LGB_SWIGLU || w_o, "ln_gemm_bwd: w_o required");
  MF_ASSERT(mode == MF_LN_NONE || gamma, "ln_gemm_bwd: gamma required");
  MF_ASSERT(mode != MF_LN_FULL || beta, "ln_gemm_bwd: beta required");
  MF_ASSERT(!dinp || ((uintptr_t)dinp & 3) == 0, "ln_gemm_bwd: dinp alignment");
  /* y is written with 8-byte stores, s1 and s2 with up to 16-byte ones, dcopy likewise */
  MF_ASSERT(lgb_aligned(y) && lgb_aligned(s1) && lgb_aligned(s2) && lgb_aligned(dcopy),
            "ln_gemm_bwd: y, s1, s2 and dcopy must be 16-byte aligned");
  if (rows <= 0) return 0;
  if (var == LGB_WG && mf_ln_gemm_bwd_wg_supported(kind, C, O, mode))
    return mf_ln_gemm_bwd_wg_cuda(kind, dinp, add, part, y, s1, s2, dcopy, dout, mean, rstd, inp,
                                  gamma, beta, w, w_o, mask, rows, C, O, mode, stream);
  if (var == LGB_WG) var = 3;
  lgb_params p = {dinp, part, y, s1, s2, dcopy, dout, mean, rstd, inp, gamma, beta, w, w_o, mask,
                  rows, O, (int)mode, add};
#define LGB_CFG(C_, K_, W_, BN_, F_, MB_) \
  if (C == C_ && kind == K_) return lgb_launch<C_, K_, W_, BN_, F_, MB_, true, 1>(p, stream);
#define LGB_VARIANTS(C_)                                             \
  if (var == 4) {                                                    \
    if (C == C_)                                                     \
      return lgb_launch<C_, MF_LGB_SWIGLU, 8, 64, true, 1, false, 1>(p, stream); \
  } else if (var == 5) {                                             \
    if (C == C_)                                                     \
      return lgb_launch<C_, MF_LGB_SWIGLU, 4, 32, true, 2, false, 1>(p, stream); \
  } else if (var == 6) {                                             \
    if (C == C_)                                                     \
      return lgb_launch<C_, MF_LGB_SWIGLU, 8, 32, true, 1, false, 2>(p, stream); \
  } else if (var == 1) {                                             \
    LGB_CFG(C_, MF_LGB_LINEAR, 8, 64, false, 1)                      \
    LGB_CFG(C_, MF_LGB_GATED, 8, 64, false, 1)                       \
    LGB_CFG(C_, MF_LGB_SWIGLU, 8, 64, false, 1)                      \
  } else if (var == 2) {                                             \
    LGB_CFG(C_, MF_LGB_LINEAR, 4, 64, true, 3)                       \
    LGB_CFG(C_, MF_LGB_GATED, 4, 32, true, 2)                        \
    LGB_CFG(C_, MF_LGB_SWIGLU, 4, 32, true, 2)                       \
  } else {                                                           \
    LGB_CFG(C_, MF_LGB_LINEAR, 8, 64, true, 1)                       \
    LGB_CFG(C_, MF_LGB_GATED, 8, 32, true, 1)                        \
    LGB_CFG(C_, MF_LGB_SWIGLU, 8, 32, true, 1)                       \
  }
  LGB_VARIANTS(64)
  LGB_VARIANTS(128)
#undef LGB_VARIANTS
#undef LGB_CFG
  MF_FATAL("ln_gemm_bwd: kind %d", kind);
  return 0;
}
