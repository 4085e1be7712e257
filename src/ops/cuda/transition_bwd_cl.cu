/* transition_bwd_cl.cu — the SwiGLU transition's whole backward (C = 128, Hd = 64·S,
 * S = 2, 4, 8) as ONE persistent kernel on thread block clusters of S CTAs (sm_90a):
 * dinp, the dγ/dβ partials and the weight gradients dW_ab, dW_o, with nothing of the 4c
 * hidden leaving the chip. The earlier backward (ln_gemm_bwd_wg.cu) keeps a row tile's
 * whole hidden on one CTA, so it must write h, [da | db] and x̂ (1.95 GB at M = 768²) for
 * cuBLAS to form dW from; here the hidden is split over the CTAs of a cluster instead, each
 * holding its hidden chunk's weight gradients in registers for the whole run, and the one
 * sum that then crosses CTAs — dx̂ = Σ_chunks [da | db]_j·W_ab,j — is reduce-scattered
 * through distributed shared memory (st.async into the row owner's buffer).
 *
 * Cluster c takes the 64-row tiles c, c + ncl, …; CTA j of it owns hidden channels
 * 64j .. 64j + 63 (rows j·64.. of W_a and of W_b, columns j·64.. of W_o, resident in shared
 * memory) and rows j·64/S .. of every tile for the LayerNorm backward.
 *
 * x̂ is never formed. The LayerNorm is folded into the products (README step 29), with
 * W' = γ ∘ W_ab (bf16, resident), u = W'·1 and v = W·β per hidden channel, σ = 1/rs:
 *   [a | b] = rs·(x·W'ᵀ − μ·u + σ·v), the last two terms one extra k16 step of the
 *     products (per-row factors (−μ, σ) against (u, v), each split into two bf16 so that
 *     the cancellation against x·W'ᵀ happens in fp32);
 *   dW_ab = γ ∘ (d'ᵀ·x − d'ᵀ·μ) + β ∘ (d'ᵀ·σ), d' = rs ∘ [da | db], the two row sums as 8
 *     extra columns beside x in the same products;
 *   the exchange carries rs·(dx̂ ∘ γ) = d'·W', so the owner's LayerNorm backward needs no
 *     γ and no rs; dγ = Σ_o W[o, :] ∘ (d'ᵀ·x − d'ᵀ·μ)[o, :] and dβ = Σ_o W[o, :]·(d'ᵀ·σ)[o]
 *     come from B's accumulators at the end.
 * Three warpgroups:
 *   WG A: [a | b] (64 × 128, 8 + 1 k16 steps) and dh = dout·W_o[:, j] (64 × 64), wgmma
 *         from shared memory; then, in two halves of the hidden chunk, h = silu(a)·b and
 *         d' (bf16) into shared memory and, as A fragments, d'·W'_j — the first half's
 *         products run while the second half's SwiGLU backward does; the partial sums'
 *         columns 0..63 go by st.async to the rows' owners, rounded to bf16, while
 *         64..127 form (16-byte stores laid out so that a warp's store covers 512
 *         contiguous bytes: tc_unit);
 *   WG B: the per-row factors of each tile, two tiles ahead, and dW_ab,j (128 × 136 fp32,
 *         registers for the whole run) += d'ᵀ·[x | factors], both operands read MN-major
 *         from shared memory; at the end dW_ab,j and the CTA's dγ/dβ partials;
 *   WG C: issues the TMA copies (x, dout, mean, rstd of a tile; three stages, refilled as
 *         soon as A, B and C have read one), accumulates dW_o[:, j] (128 × 64 fp32,
 *         registers) += doutᵀ·h, and for its owned rows sums the S partials in rank order,
 *         runs the LayerNorm backward (x and the old dinp prefetched from L2 while its
 *         products run) and writes (or adds into) dinp.
 * setmaxnreg gives B's 136 accumulators and A's tile room (tc_regs_*). Barriers: per stage full (TMA),
 * factors ready, empty (all 384 threads); hidden ready / hidden free for the one h, [da | db]
 * buffer; per CTA recv-full (16 KB of st.async transactions) and peer-free (S remote
 * arrivals, relaxed: every owner has read its buffer, so the next tile's partials may
 * come). At the end the weight-gradient partials (one per cluster) and the dγ/dβ partials
 * (one per CTA) go to the workspace and small kernels add them up in cluster / CTA order.
 * Every sum has a fixed order: two runs are bit-identical. Numerics as ln_gemm_bwd_wg.cu
 * (h and [da | db] are rounded to bf16 where the tensor cores read them, W' = γ ∘ W where
 * x̂ was; the GEMM outputs and dh are fp32) but for dx̂: each CTA's partial dx̂_j is fp32 in its registers
 * and crosses the cluster rounded to bf16, and the owner sums the S partials in fp32 —
 * the tensor-parallel reduction that Megatron-style training also does in the compute
 * type; it halves the exchange that bounded the kernel (README step 24).
 * Measured (H200, 2026-11-30, bench/evofusion, M = N², C = 128, Hd = 512): 1.36–1.37 ms
 * at N = 768 and 0.36 ms at N = 384 (1.57–1.68 / 0.42–0.44 with the partials in fp32,
 * 1.80 / 0.48 before the hidden halves, the shared-space pointer and the register
 * budgets; 2.18 / 0.61 for ln_gemm_bwd_wg.cu + cuBLAS). With no exchange at all (wrong
 * results, timing only) it took 1.25 ms: the remote stores, not the products, were what
 * A waited on (dev/cuda/README.md steps 21, 23 and 24). Folding the LayerNorm in (step
 * 29): 1.30–1.32 against 1.36–1.37 ms in the same job at N = 768 (0.354–0.359 against
 * 0.358–0.362 at N = 384); 1.345 ms against torch.compile's 2.048 in the 00:40 UTC table.
 * Written by hand for the reason wgmma_ptx.cuh gives (no CUTLASS). */
#include "transition_bwd_cl_cuda.h"

#include <stdlib.h>
#include <string.h>

#include "fusion_util.cuh"
#include "ln_linear_cuda.h"
#include "tma_ptx.cuh"
#include "wgmma_ptx.cuh"

#define TC_THREADS 384 /* three warpgroups: A, B, C */
#define TC_C 128       /* the one channel width */
#define TC_BM 64       /* rows per tile */
#define TC_HC 64       /* hidden channels per CTA */

/* Shared memory, byte offsets from a 1024-aligned base (operand blocks 1024-aligned, all
 * in the 128-byte-swizzled layout of wgmma_ptx.cuh):
 *   wab: W' = γ ∘ [W_a; W_b] rows of this CTA's chunk (128 rows: 64 of W_a, 64 of W_b) × C,
 *        two 64-column blocks of 128 rows;
 *   wo:  W_o[:, chunk] as C rows × 64 hidden, one block;
 *   per input stage (TC_NS): xr the raw rows (TMA, two blocks of 64 rows); ee the rows'
 *        factors in chunk 0 of each 128-byte row (B, make_e; the rest of the block zero),
 *        the third 64-column block beside xr for B's MN-major read; dy dout (TMA, two
 *        blocks);
 *   hh:  h (64 rows × 64 hidden), dd: rs ∘ [da | db] (two blocks) — one buffer: B and C
 *        read them long before A writes the next tile's;
 *   recv: the S partial rs·(dx̂ ∘ γ) slices of the owned rows, S slots of (64/S)·C bf16 in
 *         the senders' order (tc_unit);
 *   bext: (u, v) of the chunk's 128 hidden channels, the B side of A's extra k16 step
 *         (chunks 0 and 1 of each row);
 *   st:   per stage mean (64) and rstd (64) fp32 (TMA);
 *   bar:  the mbarriers. */
#define TC_NS 3 /* input stages */
struct tc_layout {
  static constexpr int WAB = 2 * 128 * 128, WO = TC_C * 128;
  static constexpr int BLK = TC_BM * 128; /* one 64-column block of a tile */
  static constexpr int xr = 0, ee = 2 * BLK, dy = 3 * BLK, STAGE = 5 * BLK;
  static constexpr int wab = 0, wo = WAB, stage = wo + WO, hh = stage + TC_NS * STAGE, dd = hh + BLK;
  static constexpr int recv = dd + 2 * BLK, RECV = TC_BM * TC_C * 2; /* bf16 partials */
  static constexpr int bext = recv + RECV, BEXT = 128 * 128; /* the products' extra k16 step, B side */
  static constexpr int st = bext + BEXT, ST = 2 * TC_BM * 4, bar = st + TC_NS * ST;
  static constexpr int NBAR = 3 * TC_NS + 4; /* full, factors ready, empty per stage; hd, hfree, rfull, pfree */
  static constexpr int bytes = bar + NBAR * 8 + 1024;
  static constexpr int TX_TILE = 4 * BLK + ST; /* x, dout, mean, rstd */
};
static_assert(tc_layout::bytes <= 227 * 1024, "transition_bwd_cl: shared memory");
static_assert(tc_layout::stage % 1024 == 0 && tc_layout::hh % 1024 == 0 && tc_layout::recv % 1024 == 0 &&
                  tc_layout::bext % 1024 == 0,
              "transition_bwd_cl: block alignment");

struct tc_tmaps {
  CUtensorMap x, dy, mean, rstd; /* (M, C) bf16 boxes 64 × 64 swizzled; (M) fp32 boxes 64 */
};

struct tc_params {
  bf16 *dinp;               /* (M, C) or NULL */
  float *pab, *po, *part;   /* per cluster (2Hd, C), (C, Hd); per CTA (2C); each may be NULL */
  const bf16 *inp;          /* (M, C): the owned rows' x for the LayerNorm backward */
  const float *mean, *rstd; /* (M) */
  const bf16 *gamma, *beta; /* (C) */
  const bf16 *w_ab, *w_o;   /* (2Hd, C), (C, Hd) */
  int64_t M;
  int Hd, mode, add;
};

/* Register budgets per warpgroup (setmaxnreg; the launch gives each thread 168): B holds
 * 136 accumulators for the whole run and takes 192, A ([a | b], dh,
 * dx̂_j and the A fragments of one tile) 176, C (64 accumulators) gives up to 136:
 * 176 + 192 + 136 = 504 = 65536 / 128. */
static __device__ __forceinline__ void tc_regs_a(void) { asm volatile("setmaxnreg.inc.sync.aligned.u32 176;\n" ::: "memory"); }
static __device__ __forceinline__ void tc_regs_b(void) { asm volatile("setmaxnreg.inc.sync.aligned.u32 192;\n" ::: "memory"); }
static __device__ __forceinline__ void tc_regs_c(void) { asm volatile("setmaxnreg.dec.sync.aligned.u32 136;\n" ::: "memory"); }

/* Byte offset, in a source's slot of the receive buffer (RPD rows × C bf16), of row m's
 * 16-byte unit (qq, t4): the pieces q = 2qq and 2qq + 1 of lane t4, a piece (q, t4) being
 * the columns 16q + 2·t4 + {0, 1} and 16q + 8 + 2·t4 + {0, 1} (the accumulator's order).
 * A warp's store of one qq for its eight rows covers 512 contiguous bytes. */
static __device__ __forceinline__ int tc_unit(int m, int qq, int t4) {
  return ((m >> 3) * 4 + qq) * 512 + (m & 7) * 64 + t4 * 16;
}

/* Columns c0, c0 + 1 and c0 + 8, c0 + 9 of a bf16 row: two 4-byte loads. */
static __device__ __forceinline__ uint2 tc_ld2(const bf16 *q) {
  return make_uint2(*(const uint32_t *)q, *(const uint32_t *)(q + 8));
}

static __device__ __forceinline__ void tc_bar_c(void) { /* the 128 threads of WG C */
  asm volatile("bar.sync 1, 128;\n" ::: "memory");
}

/* The TMA copies of tile t into stage s (one thread). */
static __device__ __forceinline__ void tc_issue(const tc_tmaps &tm, uint32_t su, int s, uint32_t fullb, int64_t t) {
  typedef tc_layout L;
  const int r0 = (int)(t * TC_BM);
  const uint32_t sb = su + L::stage + s * L::STAGE, stb = su + L::st + s * L::ST;
  mf_mbar_expect_tx(fullb, L::TX_TILE);
  mf_tma_load_2d(sb + L::xr, &tm.x, 0, r0, fullb);
  mf_tma_load_2d(sb + L::xr + L::BLK, &tm.x, 64, r0, fullb);
  mf_tma_load_2d(sb + L::dy, &tm.dy, 0, r0, fullb);
  mf_tma_load_2d(sb + L::dy + L::BLK, &tm.dy, 64, r0, fullb);
  mf_tma_load_1d(stb, &tm.mean, r0, fullb);
  mf_tma_load_1d(stb + TC_BM * 4, &tm.rstd, r0, fullb);
}

template <int S>
static __global__ void __launch_bounds__(TC_THREADS, 1)
    tc_kernel(const tc_params p, const __grid_constant__ tc_tmaps tm) {
  typedef tc_layout L;
  constexpr int RPD = TC_BM / S; /* rows of a tile each CTA owns */
  extern __shared__ __align__(16) unsigned char tc_smem_raw[];
  /* 1024-aligned by pointer arithmetic on the shared array itself, so that the compiler
   * still knows sm points to shared memory (LDS / STS): through an integer round trip
   * every access was a generic LD / ST. */
  const uint32_t raw = mf_smem_u32(tc_smem_raw), su = (raw + 1023u) & ~1023u;
  unsigned char *sm = tc_smem_raw + (su - raw);
  const int tid = (int)threadIdx.x, wg = tid >> 7, lane = tid & 31, g8 = lane >> 2, t4 = lane & 3;
  const int wl = (tid >> 5) & 3; /* warp within its warpgroup */
  const uint32_t rank = mf_cluster_rank(), cid = mf_cluster_id(), ncl = mf_cluster_count();
  const int64_t ntiles = (p.M + TC_BM - 1) / TC_BM;
  const int K = cid < ntiles ? (int)((ntiles - 1 - cid) / ncl + 1) : 0; /* this cluster's tiles */
  const int Hd = p.Hd, j = (int)rank;

  const uint32_t bar = su + L::bar;
  auto full = [&](int s) { return bar + 8 * s; };
  auto eready = [&](int s) { return bar + 8 * (TC_NS + s); };
  auto empty = [&](int s) { return bar + 8 * (2 * TC_NS + s); };
  const uint32_t hdb = bar + 24 * TC_NS, hfree = hdb + 8, rfull = hdb + 16, pfree = hdb + 24;
  if (tid == 0) {
    for (int s = 0; s < TC_NS; s++) {
      mf_mbar_init(full(s), 1);
      mf_mbar_init(eready(s), 128);
      mf_mbar_init(empty(s), TC_THREADS);
    }
    mf_mbar_init(hdb, 128);
    mf_mbar_init(hfree, 256);
    mf_mbar_init(rfull, 1);
    mf_mbar_init(pfree, S);
    mf_mbar_init_fence();
  }
  /* the chunk's weights, swizzled, once: W'_ab,j = γ ∘ W_ab,j (bf16); and per hidden
   * channel o, u = W'·1 and v = W·β split into bf16 pairs, the B side of the products'
   * extra k16 step: (u_hi, u_hi, v_hi, v_hi, u_lo, v_lo, 0, 0 | 0 × 8) */
  for (int i = tid; i < 128 * 16; i += TC_THREADS) { /* wab: 128 rows × 16 chunks; a row's 16 in one half-warp */
    const int n = i >> 4, q = i & 15;
    const int64_t row = n < TC_HC ? (int64_t)j * TC_HC + n : (int64_t)Hd + j * TC_HC + (n - TC_HC);
    const uint4 w = *(const uint4 *)(p.w_ab + row * TC_C + q * 8);
    const __nv_bfloat162 *w2 = (const __nv_bfloat162 *)&w;
    uint4 ws;
    uint32_t *ws32 = (uint32_t *)&ws;
    float us = 0.0f, vs = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const float2 f = __bfloat1622float2(w2[e]);
      const int c = q * 8 + 2 * e;
      const float g0 = p.mode == MF_LN_NONE ? 1.0f : mf_bf16_to_f32(p.gamma[c]);
      const float g1 = p.mode == MF_LN_NONE ? 1.0f : mf_bf16_to_f32(p.gamma[c + 1]);
      ws32[e] = mf_pack_bf16x2(f.x * g0, f.y * g1);
      const float2 fs = __bfloat1622float2(*(const __nv_bfloat162 *)&ws32[e]);
      us += fs.x + fs.y;
      if (p.mode == MF_LN_FULL) vs += f.x * mf_bf16_to_f32(p.beta[c]) + f.y * mf_bf16_to_f32(p.beta[c + 1]);
    }
    *(uint4 *)(sm + L::wab + (q >> 3) * (128 * 128) + mf_sw128_chunk(n, q & 7)) = ws;
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) {
      us += __shfl_xor_sync(0xffffffffu, us, o);
      vs += __shfl_xor_sync(0xffffffffu, vs, o);
    }
    if (q == 0) {
      const float uh = mf_bf16_to_f32(__float2bfloat16_rn(us)), vh = mf_bf16_to_f32(__float2bfloat16_rn(vs));
      *(uint4 *)(sm + L::bext + mf_sw128_chunk(n, 0)) =
          make_uint4(mf_pack_bf16x2(uh, uh), mf_pack_bf16x2(vh, vh), mf_pack_bf16x2(us - uh, vs - vh), 0u);
      *(uint4 *)(sm + L::bext + mf_sw128_chunk(n, 1)) = make_uint4(0, 0, 0, 0);
    }
  }
  /* the per-row factors next to each stage's x (make_e): chunk 1 of each row, and all the
   * block but chunk 0, stay zero */
  for (int i = tid; i < TC_NS * L::BLK / 16; i += TC_THREADS)
    *(uint4 *)(sm + L::stage + (i / (L::BLK / 16)) * L::STAGE + L::ee + (i % (L::BLK / 16)) * 16) = make_uint4(0, 0, 0, 0);
  for (int i = tid; i < TC_C * 8; i += TC_THREADS) { /* wo: C rows × 8 chunks */
    const int c = i >> 3, q = i & 7;
    *(uint4 *)(sm + L::wo + mf_sw128_chunk(c, q)) = *(const uint4 *)(p.w_o + (int64_t)c * Hd + j * TC_HC + q * 8);
  }
  mf_fence_proxy_async();
  __syncthreads();
  if (tid == 256 && K > 0) mf_mbar_expect_tx(rfull, L::RECV);
  mf_cluster_sync(); /* every CTA's barriers exist before any remote arrival */

  unsigned char *hh = sm + L::hh, *dd = sm + L::dd;

  if (wg == 0) {
    /* ---------------------------------------------------------------- WG A */
    tc_regs_a();
    const int rl = wl * 16 + g8; /* rows rl, rl + 8 of the tile */
    const uint32_t dst0 = (uint32_t)(rl / RPD), dst1 = (uint32_t)((rl + 8) / RPD);
    const uint32_t rb0 = mf_mapa(rfull, dst0), rb1 = mf_mapa(rfull, dst1);
    /* The partial sums travel in the accumulator's order, so that each st.async of a warp
     * writes 512 contiguous bytes (remote shared memory wants coalesced accesses, as global
     * memory does): in the slot of source j at a destination, row m's pieces 2qq, 2qq + 1
     * of lane t4 lie in the 16-byte unit tc_unit(m, qq, t4); one warp's eight rows of a
     * half share m / 8. */
    const uint32_t ra0 = mf_mapa(su + L::recv + (uint32_t)(j * RPD * TC_C * 2 + tc_unit(rl % RPD, 0, t4)), dst0);
    const uint32_t ra1 = mf_mapa(su + L::recv + (uint32_t)(j * RPD * TC_C * 2 + tc_unit((rl + 8) % RPD, 0, t4)), dst1);
    /* units qq0, qq0 + 1 (pieces 2·qq0 .. 2·qq0 + 3) of the rows rl, rl + 8 from the n64
     * accumulator d (columns 64·(qq0 / 2) ..), rounded to bf16: the exchange's bytes, not
     * the tensor cores, bound the kernel (README step 24: sending half of the fp32 bytes
     * took 1.61 → 1.30 ms at N = 768), and a tensor-parallel reduction of partial sums in
     * the compute type is what Megatron-style training does across GPUs too. */
    auto send = [&](const float(&d)[32], int qq0) {
#pragma unroll
      for (int u = 0; u < 2; u++) {
        const float *e = d + 16 * u;
        mf_st_async_v4(ra0 + 512 * (qq0 + u), mf_pack_bf16x2(e[0], e[1]), mf_pack_bf16x2(e[4], e[5]),
                       mf_pack_bf16x2(e[8], e[9]), mf_pack_bf16x2(e[12], e[13]), rb0);
        mf_st_async_v4(ra1 + 512 * (qq0 + u), mf_pack_bf16x2(e[2], e[3]), mf_pack_bf16x2(e[6], e[7]),
                       mf_pack_bf16x2(e[10], e[11]), mf_pack_bf16x2(e[14], e[15]), rb1);
      }
    };
    /* Per tile: [a | b] and dh (one group); then the SwiGLU backward in two halves of the
     * hidden (channels 0..31 and 32..63 of a and of b), the first half's dx̂_j products
     * running on the tensor cores while the second half's SwiGLU backward runs; then lo
     * (dx̂_j columns 0..63) sent while hi forms. wgmma groups complete in order. */
    uint32_t fr[8][4]; /* rs ∘ [da | db] as A fragments: k16 blocks 0..3 da, 4..7 db (W_ab,j's row order) */
    /* The SwiGLU backward of hidden half hf from the raw-row products A = x·W'ᵀ − μ·u +
     * σ·v (the extra k16 step included), [a | b] = rs·A: with r2 = rs², hr = rs / 2,
     *   sg = σ(a), h = rs²·A_a·sg·A_b, and the rs-scaled gradients (what B's dW and the
     *   exchange want, README step 29) rs·db = r2·d·A_a·sg,
     *   rs·da = r2·d·A_b·sg·(1 + A_a·(rs − rs·sg)):
     * two multiplications more per element than the plain SwiGLU backward. h and
     * rs ∘ [da | db] (bf16) into shared memory (for C and B) and the latter into fr. */
    auto swiglu = [&](const float(&ab)[64], const float(&dh)[32], const float(&rs)[2], int hf) {
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int nt = 4 * hf + i; /* 8-column group of the hidden chunk */
        float dav[4], dbv[4], hv[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const float r = rs[e >> 1], r2 = r * r;
          const float A = ab[4 * nt + e], Bv = ab[32 + 4 * nt + e], d = r2 * dh[4 * nt + e];
          float th;
          asm("tanh.approx.f32 %0, %1;" : "=f"(th) : "f"((0.5f * r) * A));
          const float sg = fmaf(0.5f, th, 0.5f), si = A * sg;
          hv[e] = si * Bv * r2;
          dbv[e] = d * si;
          dav[e] = d * Bv * sg * fmaf(A, fmaf(-r, sg, r), 1.0f);
        }
        uint32_t *fa = fr[nt / 2], *fb = fr[4 + nt / 2];
        fa[2 * (nt & 1)] = mf_pack_bf16x2(dav[0], dav[1]);
        fa[2 * (nt & 1) + 1] = mf_pack_bf16x2(dav[2], dav[3]);
        fb[2 * (nt & 1)] = mf_pack_bf16x2(dbv[0], dbv[1]);
        fb[2 * (nt & 1) + 1] = mf_pack_bf16x2(dbv[2], dbv[3]);
        const uint32_t o0 = mf_sw128(rl, 8 * nt + 2 * t4), o1 = mf_sw128(rl + 8, 8 * nt + 2 * t4);
        *(uint32_t *)(hh + o0) = mf_pack_bf16x2(hv[0], hv[1]);
        *(uint32_t *)(hh + o1) = mf_pack_bf16x2(hv[2], hv[3]);
        *(uint32_t *)(dd + o0) = fa[2 * (nt & 1)];
        *(uint32_t *)(dd + o1) = fa[2 * (nt & 1) + 1];
        *(uint32_t *)(dd + L::BLK + o0) = fb[2 * (nt & 1)];
        *(uint32_t *)(dd + L::BLK + o1) = fb[2 * (nt & 1) + 1];
      }
    };
    /* d (+)= the k16 blocks of hidden half hf (da: 2hf, 2hf + 1; db: 4 + 2hf, 5 + 2hf) of
     * [da | db]·W_ab,j, columns 64·c .. of dx̂_j (B MN-major) */
    /* operand descriptors: the resident weights' once, the stage's per tile (mf_wg_desc_off) */
    const uint64_t dwab = mf_wg_desc(su + L::wab), dwab_mn = mf_wg_desc_mn(su + L::wab, 128 * 128);
    const uint64_t dwo_mn = mf_wg_desc_mn(su + L::wo, L::BLK), dbext = mf_wg_desc(su + L::bext);
    auto dxhat = [&](float(&d)[32], int hf, int c) {
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int q = (i & 1) + 2 * hf + 4 * (i >> 1);
        mf_wg_rs_n64<1>(d, fr[q], mf_wg_desc_off(dwab_mn, c * (128 * 128) + q * 2048), hf > 0 || i > 0);
      }
    };
    for (int k = 0; k < K; k++) {
      const int s = k % TC_NS;
      const uint32_t ph = (uint32_t)((k / TC_NS) & 1), sb = su + L::stage + s * L::STAGE;
      mf_mbar_wait(full(s), ph);
      mf_mbar_wait(eready(s), ph);
      float ab[64], dh[32], rs[2];
      {
        const float *stm = (const float *)(sm + L::st + s * L::ST);
        rs[0] = stm[TC_BM + rl];
        rs[1] = stm[TC_BM + rl + 8];
      }
      const uint64_t dxr = mf_wg_desc(sb + L::xr), ddy = mf_wg_desc(sb + L::dy);
      mf_wg_fence();
#pragma unroll
      for (int q = 0; q < 8; q++) { /* [a | b] (before the LayerNorm's row factors) = x·W'_ab,jᵀ */
        const int kb = q >> 2, kk = q & 3;
        mf_wg_ss_n128(ab, mf_wg_desc_off(dxr, kb * L::BLK + kk * 32), mf_wg_desc_off(dwab, kb * (128 * 128) + kk * 32),
                      q > 0);
      }
      /* + (−μ, σ)·(u, v) per row and channel: the tile's factor block (K-major here) */
      mf_wg_ss_n128(ab, mf_wg_desc(sb + L::ee), dbext, 1);
#pragma unroll
      for (int q = 0; q < 8; q++) { /* dh = dout·W_o[:, j] (B MN-major) */
        const int kb = q >> 2, kk = q & 3;
        mf_wg_ss_n64<1>(dh, mf_wg_desc_off(ddy, kb * L::BLK + kk * 32), mf_wg_desc_off(dwo_mn, q * 2048), q > 0);
      }
      mf_wg_commit();
      mf_wg_wait<0>();
      mf_wg_pin(ab);
      mf_wg_pin(dh);
      mf_mbar_arrive(empty(s)); /* x, dout and the statistics of the stage read */
      if (k > 0) mf_mbar_wait(hfree, (uint32_t)((k - 1) & 1)); /* B and C read tile k − 1's h, [da | db] */

      float lo[32], hi[32]; /* the partial rs·(dx̂ ∘ γ)_j = fr·W'_j, columns 0..63, 64..127 */
      swiglu(ab, dh, rs, 0);
      mf_wg_fence();
      dxhat(lo, 0, 0);
      dxhat(hi, 0, 1);
      mf_wg_commit();
      swiglu(ab, dh, rs, 1);
      mf_fence_proxy_async();
      mf_mbar_arrive(hdb); /* h and [da | db] of tile k written */
      mf_wg_fence();
      dxhat(lo, 1, 0);
      mf_wg_commit();
      dxhat(hi, 1, 1);
      mf_wg_commit();
      mf_wg_wait<1>();
      mf_wg_pin(lo);
      /* the owners read tile k − 1. Their arrivals are relaxed (values already used), so an
       * acquire at cluster scope would order nothing more and cost an L1 invalidation. */
      if (k > 0) mf_mbar_wait(pfree, (uint32_t)((k - 1) & 1));
      send(lo, 0);
      mf_wg_wait<0>();
      mf_wg_pin(hi);
      send(hi, 2);
    }
  } else if (wg == 1) {
    /* ---------------------------------------------------------------- WG B */
    tc_regs_b();
    const int bt = tid - 128;
    /* The LayerNorm is folded into the products (README step 29): with d' = rs ∘ [da | db]
     * (what A stores), dW[o, c] = Σ_r d[r, o]·x̂[r, c] = γ_c·(P[o, c] − s1[o]) + β_c·s2[o],
     * P = d'ᵀ·x over the raw rows, s1 = d'ᵀ·μ, s2 = d'ᵀ·(1/rs) = Σ_r d[r, o]. s1 and s2 come
     * from the same products: the tile's factor block holds per row, in its 16-byte chunk 0,
     * (−μ_hi, −μ_lo, σ_hi, σ_lo, −μ_hi, σ_hi, 0, 0), μ and σ = 1/rs split into two bf16
     * each, so the cancellation P − s1 happens in fp32: B reads it MN-major as columns
     * 128..135 beside x, A K-major as its extra k16 step against (u, v). Written two tiles
     * ahead. */
    auto make_e = [&](int k) {
      const int s = k % TC_NS;
      mf_mbar_wait(full(s), (uint32_t)((k / TC_NS) & 1));
      if (bt < TC_BM) {
        const float *stm = (const float *)(sm + L::st + s * L::ST);
        const float mu = stm[bt], rs = stm[TC_BM + bt], sg = rs > 0.0f ? 1.0f / rs : 0.0f;
        const float mh = mf_bf16_to_f32(__float2bfloat16_rn(mu)), gh = mf_bf16_to_f32(__float2bfloat16_rn(sg));
        *(uint4 *)(sm + L::stage + s * L::STAGE + L::ee + mf_sw128_chunk(bt, 0)) =
            make_uint4(mf_pack_bf16x2(-mh, -(mu - mh)), mf_pack_bf16x2(gh, sg - gh), mf_pack_bf16x2(-mh, gh), 0u);
        mf_fence_proxy_async();
      }
      mf_mbar_arrive(eready(s)); /* A's products wait for it; B's own are behind A's h */
    };
    for (int k = 0; k < 2 && k < K; k++) make_e(k);

    float wa[68], wb[68]; /* dW_a,j, dW_b,j rows 16·wl + g8 (+ 8): P, then (−s1, s2) in 64..67 */
    const uint64_t ddd_mn = mf_wg_desc_mn(su + L::dd, L::BLK);
#pragma unroll
    for (int i = 0; i < 68; i++) wa[i] = wb[i] = 0.0f;
    for (int k = 0; k < K; k++) {
      const int s = k % TC_NS;
      const uint32_t sb = su + L::stage + s * L::STAGE;
      mf_mbar_wait(hdb, (uint32_t)(k & 1));
      const uint64_t dxr = mf_wg_desc_mn(sb + L::xr, L::BLK); /* x, then the factor columns (L::ee) */
      mf_wg_fence();
#pragma unroll
      for (int kk = 0; kk < 4; kk++) { /* k = the tile's rows, 16 per step */
        const uint64_t bx = mf_wg_desc_off(dxr, kk * 2048);
        mf_wg_ss_n136_tt(wa, mf_wg_desc_off(ddd_mn, kk * 2048), bx, 1);
        mf_wg_ss_n136_tt(wb, mf_wg_desc_off(ddd_mn, L::BLK + kk * 2048), bx, 1);
      }
      mf_wg_commit();
      mf_wg_wait<0>();
      mf_wg_pin(wa);
      mf_wg_pin(wb);
      mf_mbar_arrive(hfree);
      mf_mbar_arrive(empty(s));
      if (k + 2 < K) make_e(k + 2);
    }
    /* dW = γ ∘ (P − s1) + β ∘ s2, and this CTA's share of dγ_c = Σ_o W[o, c]·(P − s1)[o, c]
     * and dβ_c = Σ_o W[o, c]·s2[o] (dx̂ = [da | db]·W, so Σ_r dx̂[r, c]·x̂raw[r, c] is that
     * sum over the hidden channels): C's owned rows see only dx̂ ∘ γ */
    float ns1[2][2], s2[2][2]; /* [wa / wb][row h2] */
#pragma unroll
    for (int h2 = 0; h2 < 2; h2++) {
      const float xa = wa[64 + 2 * h2] + wa[65 + 2 * h2], xb = wb[64 + 2 * h2] + wb[65 + 2 * h2];
      ns1[0][h2] = __shfl_sync(0xffffffffu, xa, lane & ~3);
      s2[0][h2] = __shfl_sync(0xffffffffu, xa, (lane & ~3) | 1);
      ns1[1][h2] = __shfl_sync(0xffffffffu, xb, lane & ~3);
      s2[1][h2] = __shfl_sync(0xffffffffu, xb, (lane & ~3) | 1);
    }
    float *pa = p.pab ? p.pab + (int64_t)cid * 2 * Hd * TC_C : NULL;
    float *red = (float *)(sm + L::stage + L::ee); /* stage 0's factor block: B's alone, read */
#pragma unroll
    for (int i = 0; i < 16; i++) {
      float pg[2] = {0.0f, 0.0f}, pb[2] = {0.0f, 0.0f};
      const int c = 8 * i + 2 * t4; /* columns c, c + 1 */
      float gc[2], bc[2];
#pragma unroll
      for (int e = 0; e < 2; e++) {
        gc[e] = p.mode == MF_LN_NONE ? 1.0f : mf_bf16_to_f32(p.gamma[c + e]);
        bc[e] = p.mode == MF_LN_FULL ? mf_bf16_to_f32(p.beta[c + e]) : 0.0f;
      }
#pragma unroll
      for (int ab2 = 0; ab2 < 2; ab2++)
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
          const int r = wl * 16 + g8 + 8 * h2;
          const int64_t row = ab2 ? (int64_t)Hd + j * TC_HC + r : (int64_t)j * TC_HC + r;
          const float *acc = (ab2 ? wb : wa) + 4 * i + 2 * h2;
          const float q0 = acc[0] + ns1[ab2][h2], q1 = acc[1] + ns1[ab2][h2], s = s2[ab2][h2];
          if (pa) *(float2 *)(pa + row * TC_C + c) = make_float2(gc[0] * q0 + bc[0] * s, gc[1] * q1 + bc[1] * s);
          if (p.part) {
            const float2 w = __bfloat1622float2(*(const __nv_bfloat162 *)(p.w_ab + row * TC_C + c));
            pg[0] += w.x * q0;
            pg[1] += w.y * q1;
            pb[0] += w.x * s;
            pb[1] += w.y * s;
          }
        }
      if (p.part) { /* Σ over the warp's rows (lanes of one t4), then the 4 warps via shared memory */
#pragma unroll
        for (int e = 0; e < 2; e++)
#pragma unroll
          for (int o = 4; o < 32; o <<= 1) {
            pg[e] += __shfl_xor_sync(0xffffffffu, pg[e], o);
            pb[e] += __shfl_xor_sync(0xffffffffu, pb[e], o);
          }
        if (g8 == 0) {
          *(float2 *)(red + wl * 2 * TC_C + 8 * i + 2 * t4) = make_float2(pg[0], pg[1]);
          *(float2 *)(red + wl * 2 * TC_C + TC_C + 8 * i + 2 * t4) = make_float2(pb[0], pb[1]);
        }
      }
    }
    if (p.part) {
      asm volatile("bar.sync 2, 128;\n" ::: "memory");
      for (int c = bt; c < 2 * TC_C; c += 128)
        p.part[(int64_t)blockIdx.x * 2 * TC_C + c] = red[c] + red[2 * TC_C + c] + red[4 * TC_C + c] + red[6 * TC_C + c];
    }
  } else {
    /* ---------------------------------------------------------------- WG C */
    tc_regs_c();
    constexpr int RPW = RPD / 4;               /* owned rows per warp: 2 (S = 8) .. 8 (S = 2) */
    constexpr int PF = RPW <= 4 ? RPW : 1;     /* rows whose x (and old dinp) load early */
    /* LN backward: the lane's columns c0, c0 + 1, c0 + 8, c0 + 9 (the pieces' order) */
    const int c0 = 16 * (lane >> 2) + 2 * (lane & 3);
    float wo[2][32]; /* dW_o rows (C) 64·mh + 16·wl + g8 (+ 8), hidden columns of the chunk */
    const uint64_t dhh_mn = mf_wg_desc_mn(su + L::hh, L::BLK);
#pragma unroll
    for (int i = 0; i < 32; i++) wo[0][i] = wo[1][i] = 0.0f;
    if (tid == 256)
      for (int k = 0; k < TC_NS && k < K; k++) tc_issue(tm, su, k, full(k), cid + (int64_t)k * ncl);
    __syncwarp();
    for (int k = 0; k < K; k++) {
      const int s = k % TC_NS;
      const uint32_t ph = (uint32_t)((k / TC_NS) & 1), sb = su + L::stage + s * L::STAGE;
      const int64_t t = cid + (int64_t)k * ncl;
      mf_mbar_wait(hdb, (uint32_t)(k & 1));
      const uint64_t ddy = mf_wg_desc_mn(sb + L::dy, L::BLK);
      mf_wg_fence();
#pragma unroll
      for (int mh = 0; mh < 2; mh++) /* dW_o[:, chunk] += doutᵀ·h: both MN-major */
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
          mf_wg_ss_n64_tt(wo[mh], mf_wg_desc_off(ddy, mh * L::BLK + kk * 2048), mf_wg_desc_off(dhh_mn, kk * 2048), 1);
      mf_wg_commit();
      /* while they run: the owned rows' x (and old dinp) from global memory (L2: the tile
       * was just read) */
      const int64_t row0 = t * TC_BM + j * RPD + wl; /* the warp's rows row0 + 4i */
      mf_mbar_wait(full(s), ph); /* complete long ago; makes the TMA's statistics visible here */
      const float *stm = (const float *)(sm + L::st + s * L::ST);
      uint2 xpf[PF], opf[PF];
      float mpf[PF], rpf[PF]; /* the rows' statistics: the stage is refilled before they are used */
#pragma unroll
      for (int i = 0; i < PF; i++) {
        const int64_t row = row0 + 4 * i;
        xpf[i] = opf[i] = make_uint2(0, 0);
        mpf[i] = stm[j * RPD + wl + 4 * i];
        rpf[i] = stm[TC_BM + j * RPD + wl + 4 * i];
        if (row < p.M) {
          xpf[i] = tc_ld2(p.inp + row * TC_C + c0);
          if (p.dinp && p.add) opf[i] = tc_ld2(p.dinp + row * TC_C + c0);
        }
      }
      mf_wg_wait<0>();
      mf_wg_pin(wo[0]);
      mf_wg_pin(wo[1]);
      mf_mbar_arrive(hfree);
      mf_mbar_arrive(empty(s)); /* the stage's dout and statistics read */
      if (tid == 256 && k + TC_NS < K) { /* refill the stage with tile k + TC_NS */
        mf_mbar_wait(empty(s), ph);
        tc_issue(tm, su, s, full(s), cid + (int64_t)(k + TC_NS) * ncl);
      }
      __syncwarp();

      /* the owned rows: Σ of the S partials in rank order, the LayerNorm backward */
      mf_mbar_wait_cluster(rfull, (uint32_t)(k & 1));
      const unsigned char *rv = sm + L::recv;
#pragma unroll
      for (int i = 0; i < RPW; i++) {
        const int m = wl + 4 * i;
        const int64_t row = row0 + 4 * i;
        if (row >= p.M) break; /* warp-uniform */
        float gv[4] = {0, 0, 0, 0}; /* rs·(dx̂ ∘ γ): the piece (q, t4) = (lane / 4, lane % 4) of each source */
        const int pq = lane >> 2, pofs = tc_unit(m, pq >> 1, lane & 3) + (pq & 1) * 8;
#pragma unroll
        for (int src = 0; src < S; src++) {
          const uint2 v = *(const uint2 *)(rv + src * RPD * TC_C * 2 + pofs);
          const float2 v01 = __bfloat1622float2(*(const __nv_bfloat162 *)&v.x);
          const float2 v23 = __bfloat1622float2(*(const __nv_bfloat162 *)&v.y);
          gv[0] += v01.x;
          gv[1] += v01.y;
          gv[2] += v23.x;
          gv[3] += v23.y;
        }
        uint2 xv = xpf[i < PF ? i : 0], ov = opf[i < PF ? i : 0];
        float mu = mpf[i < PF ? i : 0], rs = rpf[i < PF ? i : 0];
        if (i >= PF) {
          xv = tc_ld2(p.inp + row * TC_C + c0);
          if (p.dinp && p.add) ov = tc_ld2(p.dinp + row * TC_C + c0);
          mu = p.mean[row];
          rs = p.rstd[row];
        }
        const float2 x01 = __bfloat1622float2(*(const __nv_bfloat162 *)&xv.x);
        const float2 x23 = __bfloat1622float2(*(const __nv_bfloat162 *)&xv.y);
        const float xh[4] = {(x01.x - mu) * rs, (x01.y - mu) * rs, (x23.x - mu) * rs, (x23.y - mu) * rs};
        float sg = 0.0f, sgx = 0.0f;
#pragma unroll
        for (int e = 0; e < 4; e++) {
          sg += gv[e];
          sgx += gv[e] * xh[e];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
          sg += __shfl_xor_sync(0xffffffffu, sg, o);
          sgx += __shfl_xor_sync(0xffffffffu, sgx, o);
        }
        sg *= 1.0f / TC_C;
        sgx *= 1.0f / TC_C;
        if (p.dinp) {
          float d[4];
#pragma unroll
          for (int e = 0; e < 4; e++) d[e] = gv[e] - sg - xh[e] * sgx; /* gv = rs·dx̂∘γ */
          if (p.add) {
            const float2 o01 = __bfloat1622float2(*(const __nv_bfloat162 *)&ov.x);
            const float2 o23 = __bfloat1622float2(*(const __nv_bfloat162 *)&ov.y);
            d[0] += o01.x;
            d[1] += o01.y;
            d[2] += o23.x;
            d[3] += o23.y;
          }
          *(uint32_t *)(p.dinp + row * TC_C + c0) = mf_pack_bf16x2(d[0], d[1]);
          *(uint32_t *)(p.dinp + row * TC_C + c0 + 8) = mf_pack_bf16x2(d[2], d[3]);
        }
      }
      tc_bar_c(); /* every owned row of the buffer read */
      if (tid == 256 && k + 1 < K) {
        mf_mbar_expect_tx(rfull, L::RECV); /* before any partial of tile k + 1 can come */
        for (int d = 0; d < S; d++) mf_mbar_arrive_remote_relaxed(mf_mapa(pfree, (uint32_t)d));
      }
      __syncwarp();
    }
    if (p.po) {
      float *po = p.po + (int64_t)cid * TC_C * Hd;
#pragma unroll
      for (int mh = 0; mh < 2; mh++)
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
          float *ro = po + (int64_t)(64 * mh + 16 * wl + g8 + 8 * h2) * Hd + j * TC_HC;
#pragma unroll
          for (int i = 0; i < 8; i++)
            *(float2 *)(ro + 8 * i + 2 * t4) = make_float2(wo[mh][4 * i + 2 * h2], wo[mh][4 * i + 2 * h2 + 1]);
        }
    }
  }
  mf_cluster_sync(); /* no CTA leaves while a peer may still address its shared memory */
}

/* dw (n) += Σ_c part[c·n + i] over the ncl cluster partials, in cluster order. */
static __global__ void tc_reduce_kernel(float *__restrict__ dw, const float *__restrict__ part, int64_t n, int ncl) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int c = 0; c < ncl; c++) s += part[(int64_t)c * n + i];
    dw[i] += s;
  }
}

/* ================================================================ host */

static int g_tc_on = -1; /* −1: not yet read from the environment */
static int64_t g_tc_calls;

extern "C" int mf_transition_bwd_cl_set(int on) {
  if (g_tc_on < 0) {
    const char *e = getenv("MF_TRANSITION_BWD_CL");
    g_tc_on = e && e[0] == '0' ? 0 : 1;
  }
  const int prev = g_tc_on;
  if (on >= 0) g_tc_on = on ? 1 : 0;
  return prev;
}

extern "C" int64_t mf_transition_bwd_cl_calls(void) { return g_tc_calls; }

static int tc_aligned(const void *q) { return ((uintptr_t)q & 15) == 0; }

/* Clusters of 2, 4 or 8 CTAs. Not 1 (Hd = 64): st.async into a "cluster" of one CTA ran
 * right, but compute-sanitizer's memcheck rejects it (a cluster needs two blocks). */
static int tc_S(int Hd) { return Hd == 128 ? 2 : Hd == 256 ? 4 : Hd == 512 ? 8 : 0; }

extern "C" int mf_transition_bwd_cl_supported(int C, int Hd, mf_ln_mode mode, const void *inp,
                                              const void *dout, const void *mean, const void *rstd,
                                              const void *w_ab, const void *w_o, const void *dinp) {
  if (!mf_transition_bwd_cl_set(-1) || C != TC_C || !tc_S(Hd)) return 0;
  if (mode != MF_LN_FULL && mode != MF_LN_SCALE && mode != MF_LN_NONE) return 0;
  if (!inp || !dout || !mean || !rstd || !w_ab || !w_o) return 0;
  if (!tc_aligned(inp) || !tc_aligned(dout) || !tc_aligned(mean) || !tc_aligned(rstd) || !tc_aligned(w_ab) ||
      !tc_aligned(w_o) || (dinp && !tc_aligned(dinp)))
    return 0;
  return mf_dev_sm90() && mf_tma_encoder() != NULL;
}

template <int S>
static void tc_attr(void) {
  static bool done = false;
  if (!done) {
    MF_CHECK_CUDA(cudaFuncSetAttribute(tc_kernel<S>, cudaFuncAttributeMaxDynamicSharedMemorySize, tc_layout::bytes));
    done = true;
  }
}

/* A launch of ncl clusters of S CTAs (at: the configuration's one attribute). */
static cudaLaunchConfig_t tc_config(cudaLaunchAttribute *at, int S, int ncl, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  at->id = cudaLaunchAttributeClusterDimension;
  at->val.clusterDim.x = (unsigned)S;
  at->val.clusterDim.y = 1;
  at->val.clusterDim.z = 1;
  cfg.gridDim = dim3((unsigned)(S * ncl), 1, 1);
  cfg.blockDim = dim3(TC_THREADS, 1, 1);
  cfg.dynamicSmemBytes = tc_layout::bytes;
  cfg.stream = stream;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  return cfg;
}

/* Clusters of S CTAs that fit on the device at once (cached per S). */
template <int S>
static int tc_max_clusters(void) {
  static int n = -1;
  if (n < 0) {
    tc_attr<S>();
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t cfg = tc_config(&at, S, 64, 0);
    int c = 0;
    MF_CHECK_CUDA(cudaOccupancyMaxActiveClusters(&c, tc_kernel<S>, &cfg));
    n = c > 0 ? c : 1;
  }
  return n;
}

static int tc_clusters(int S) {
  switch (S) {
  case 2: return tc_max_clusters<2>();
  case 4: return tc_max_clusters<4>();
  default: return tc_max_clusters<8>();
  }
}

/* The workspace bound: the partials of at most SMs / S clusters, one dγ/dβ row per SM. */
extern "C" size_t mf_transition_bwd_cl_workspace(int C, int Hd) {
  const int S = tc_S(Hd);
  if (C != TC_C || !S) return 0;
  const int sms = mf_sm_count_or132(), ncl = sms / S > 0 ? sms / S : 1;
  mf_carver cv = {NULL, 0};
  mf_carve(&cv, (size_t)ncl * 3 * Hd * TC_C * sizeof(float));
  mf_carve(&cv, (size_t)sms * 2 * TC_C * sizeof(float));
  return cv.used;
}

template <int S>
static void tc_launch(const tc_params &p, const tc_tmaps &tm, int ncl, cudaStream_t stream) {
  tc_attr<S>();
  cudaLaunchAttribute at;
  const cudaLaunchConfig_t cfg = tc_config(&at, S, ncl, stream);
  MF_CHECK_CUDA(cudaLaunchKernelEx(&cfg, tc_kernel<S>, p, tm));
}

extern "C" void mf_transition_bwd_cl_cuda(bf16 *dinp, int add, float *dgamma, float *dbeta, float *dw_ab,
                                          float *dw_o, const bf16 *dout, const float *mean, const float *rstd,
                                          const bf16 *inp, const bf16 *gamma, const bf16 *beta, const bf16 *w_ab,
                                          const bf16 *w_o, int64_t M, int Hd, mf_ln_mode mode, void *ws,
                                          size_t ws_bytes, cudaStream_t stream) {
  MF_ASSERT(mf_transition_bwd_cl_supported(TC_C, Hd, mode, inp, dout, mean, rstd, w_ab, w_o, dinp),
            "transition_bwd_cl: unsupported Hd=%d mode=%d or alignment", Hd, (int)mode);
  MF_ASSERT(mode == MF_LN_NONE || gamma, "transition_bwd_cl: gamma required");
  MF_ASSERT(mode != MF_LN_FULL || beta, "transition_bwd_cl: beta required");
  MF_ASSERT(M >= 0 && M < ((int64_t)1 << 31), "transition_bwd_cl: M=%lld out of range", (long long)M);
  if (mode == MF_LN_NONE) dgamma = NULL;
  if (mode != MF_LN_FULL) dbeta = NULL;
  if (M == 0) return;
  const int S = tc_S(Hd);
  const int64_t ntiles = (M + TC_BM - 1) / TC_BM;
  int ncl = tc_clusters(S);
  const int sms = mf_sm_count_or132();
  if (ncl > sms / S && sms / S > 0) ncl = sms / S; /* the workspace's bound */
  if (ncl > ntiles) ncl = (int)ntiles;
  MF_ASSERT(mf_transition_bwd_cl_workspace(TC_C, Hd) <= ws_bytes, "transition_bwd_cl: workspace %zu < %zu bytes",
            ws_bytes, mf_transition_bwd_cl_workspace(TC_C, Hd));
  mf_carver cv = {(char *)ws, 0};
  float *pw = (float *)mf_carve(&cv, (size_t)ncl * 3 * Hd * TC_C * sizeof(float));
  float *part = (float *)mf_carve(&cv, (size_t)sms * 2 * TC_C * sizeof(float));
  tc_params p = {};
  p.dinp = dinp;
  p.inp = inp;
  p.mean = mean;
  p.rstd = rstd;
  p.pab = dw_ab ? pw : NULL;
  p.po = dw_o ? pw + (int64_t)ncl * 2 * Hd * TC_C : NULL;
  p.part = (dgamma || dbeta) ? part : NULL;
  p.gamma = gamma;
  p.beta = beta;
  p.w_ab = w_ab;
  p.w_o = w_o;
  p.M = M;
  p.Hd = Hd;
  p.mode = (int)mode;
  p.add = add ? 1 : 0;
  tc_tmaps tm;
  memset(&tm, 0, sizeof tm);
  const uint64_t xd[2] = {(uint64_t)TC_C, (uint64_t)M}, xs[1] = {(uint64_t)TC_C * 2};
  const uint32_t xb[2] = {64, TC_BM};
  const uint64_t sd[1] = {(uint64_t)M}, ss[1] = {4};
  const uint32_t sbx[1] = {TC_BM};
  MF_ASSERT(mf_tma_encode_bf16(&tm.x, inp, 2, xd, xs, xb, CU_TENSOR_MAP_SWIZZLE_128B) == 0 &&
                mf_tma_encode_bf16(&tm.dy, dout, 2, xd, xs, xb, CU_TENSOR_MAP_SWIZZLE_128B) == 0 &&
                mf_tma_encode(&tm.mean, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, mean, 1, sd, ss, sbx,
                              CU_TENSOR_MAP_SWIZZLE_NONE) == 0 &&
                mf_tma_encode(&tm.rstd, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, rstd, 1, sd, ss, sbx,
                              CU_TENSOR_MAP_SWIZZLE_NONE) == 0,
            "transition_bwd_cl: tensor maps refused (M=%lld)", (long long)M);
  switch (S) {
  case 2: tc_launch<2>(p, tm, ncl, stream); break;
  case 4: tc_launch<4>(p, tm, ncl, stream); break;
  default: tc_launch<8>(p, tm, ncl, stream); break;
  }
  MF_CHECK_LAUNCH();
  g_tc_calls++;
  if (dw_ab) {
    const int64_t n = (int64_t)2 * Hd * TC_C;
    tc_reduce_kernel<<<mf_ew_blocks(n), 256, 0, stream>>>(dw_ab, p.pab, n, ncl);
    MF_CHECK_LAUNCH();
  }
  if (dw_o) {
    const int64_t n = (int64_t)TC_C * Hd;
    tc_reduce_kernel<<<mf_ew_blocks(n), 256, 0, stream>>>(dw_o, p.po, n, ncl);
    MF_CHECK_LAUNCH();
  }
  mf_ln_param_grad_reduce_cuda(dgamma, dbeta, part, S * ncl, TC_C, stream);
}
