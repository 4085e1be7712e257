/* attention.cu — EvoFlash-3D: fused attention with a pair bias broadcast over rows, on
 * the GPU, forward and backward (the function of src/ops/attention.h; C entry points
 * and shapes in attention_cuda.h). bf16 in and out, fp32 accumulation, fp32 lse.
 * Not the CPU reference (src/ops/cpu/attention.c) and not the kernel lab
 * (dev/cuda/attention_lab.cu, which times the versions side by side).
 *
 * Kernels (tiles of BQ = 64 queries × BK = 64 keys, a warpgroup of 4 warps per tile, one
 * warp per 16 rows, head dim padded to DP ∈ {16, 32, 48, 64} in shared memory; a CTA is
 * 1, 2 or 4 such warpgroups that share the tiles they stream: two rows r share the bias
 * tile, two query (key) tiles share the K/V (Q/dO) tiles — see "Warpgroups" below; the
 * "one CTA per" below is one warpgroup per):
 *   fwd_kernel     one CTA per (b, r, h, query tile); online softmax over key tiles in
 *                  registers (exponentials as ex2 of log2e·s − mu, mu a row's reference
 *                  maximum, raised only when a logit exceeds it by 2^8: softmax_step,
 *                  README step 37); logits never
 *                  leave the chip; saves lse only. Key tiles double-buffered (cp.async);
 *                  a tile whose keys are all valid skips the per-logit mask. CTAs
 *                  numbered in groups of 8 rows r of one (b, h) (fwd_cta, order 2) so
 *                  that the slabs' K/V tiles and the head's bias stay in L2.
 *   prep_kernel    backward prologue, PREP_LPR threads per row: Di = Σ_d dout·out (fp32), and
 *                  with a gate dgate = dout·out·(1 − σ(gate)), dO = dout·σ(gate).
 *   dkdv_kernel    one CTA per (b, r, h, key tile), loops over query tiles:
 *                  Sᵀ = K·Qᵀ, Pᵀ = exp(Sᵀ − lse), dPᵀ = V·dOᵀ, dSᵀ = Pᵀ(dPᵀ − Di),
 *                  dV = Σ Pᵀ·dO, dK = scale·Σ dSᵀ·Q.
 *   dq_kernel      one CTA per (b, r, h, query tile), loops over key tiles:
 *                  dQ = scale·Σ dS·K; when R = 1 it also writes dbias = dS (no sum to do).
 *   dbias_kernel   one CTA per (b, h, query tile, key tile), loops over r = 0..R-1 in
 *                  order, accumulating dS in fp32 registers: dbias = Σ_r dS without
 *                  atomics, bit-identical run to run, extra memory O(B·H·Q·K) = dbias.
 *   fused_kernel   (the default for R > 1 when dQ and dK/dV are both wanted; replaces
 *                  dkdv_kernel + dq_kernel) one CTA per (b, r, h) slab at a time: key tiles
 *                  outer as in dkdv_kernel, and each step's dQ contribution dS·K added to
 *                  an fp32 accumulator of all the slab's query rows (shared memory, or the
 *                  CTA's own global scratch), each slot read and written by one thread in
 *                  key-tile order: no atomics, one recompute of P fewer.
 *   fused2_kernel  (the default instead of fused_kernel from 32 query tiles on, N ≥ 2048)
 *                  fused_kernel with CTAs of two warpgroups on pairs of key tiles that
 *                  share the Q/dO tiles and the dQ accumulator (half the slabs in flight).
 *   fwd_tma_kernel, dbias_tma_kernel, fused_tma_kernel  (where D = 32 and the views'
 *                  strides are multiples of 16 bytes) fwd_kernel, dbias_kernel and
 *                  fused_kernel<32, true, 1> with their tiles copied by TMA (tma_ptx.cuh:
 *                  one thread issues a step's boxes onto an mbarrier; swizzled boxes read
 *                  through tile views); bit-identical to them with WG = false (README step
 *                  13). WG = true (the default for the forward and the dbias pass): their
 *                  matrix products on Hopper's wgmma (wgmma_ptx.cuh) reading the boxes in
 *                  place, Q / P fragments from registers; the same elementwise code, equal
 *                  to the others to rounding (README step 15); the dbias pass takes query
 *                  tiles in pairs sharing each row's K, V boxes (KQ = 2, step 16).
                  A key mask with K % 16 == 0 comes as one more TMA box per stage (the
                  tile's 64 bytes; each warp votes on whether all are valid), and the
                  forward's gate rows as a box with Q (README step 20).
 *   fused_wg_kernel<KT>  (the default fused pass where D = 32 and the views allow, at every
 *                  N) fused_tma_kernel on wgmma (K, V, P, dS fragments from registers, dQ
 *                  from the swizzled dSᵀ tile), over KT = 2 key tiles per pass: Q, dO and
 *                  the dQ accumulator copied once per query step for both (README step 16);
 *                  the query tiles in alternating directions per pass (step 37).
 *                  mf_attention_cuda_set_tma(mask) selects all of these.
 * Bias and dbias rows are p.bl elements apart (mf_attn_views.bias_row; K when dense): the
 * bias tiles are copied 16 bytes at a time only when p.bl % 8 == 0 (README step 11).
 * No kernel uses atomics; every output element is written by exactly one thread.
 * Fully masked rows (no valid key): out = 0, lse = -inf, zero gradients, no NaN.
 * Version history and timings: dev/cuda/README.md.
 *
 * Portability (DESIGN.md): the matrix products go through mma_16816(), ldsm_x4() and
 * cp_async16(), each with an sm_80+ path (mma.sync m16n8k16 bf16, ldmatrix, cp.async)
 * and a portable path of the same fragment semantics (warp shuffles, FMAs, plain loads),
 * chosen by the template flag MMA; mf_attention_cuda_set_variant(1) runs the portable
 * one (the lab and the tests check both). The fragment layouts are those of a 32-lane
 * warp, which the portable path emulates with shuffles. */
#include "attention_cuda.h"
#include "gpu.h"
#include "tma_ptx.cuh"
#include "wgmma_ptx.cuh"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <atomic>

#define ATT_BQ 64
#define ATT_BK 64
#define ATT_WARPS 4
#define ATT_THREADS (ATT_WARPS * MF_WARP_SIZE)
#define ATT_BP (ATT_BK + 8) /* pitch (elements) of a (BQ, BK) bias tile in shared memory */
#define ATT_LOG2E 1.4426950408889634f
#define ATT_LN2 0.69314718055994531f

static_assert(MF_WARP_SIZE == 32, "the m16n8k16 fragment layout is that of a 32-lane warp");

typedef mf_bf16_t bf16;

/* 0: the default (ATT_DEFAULT_VARIANT), 1: portable, 2..5: lab layouts, 6: three
 * backward passes (split dbias), 7: fused dK/dV/dQ pass, 8 / 9: fused with the dQ
 * accumulator forced into global scratch / shared memory (tests and lab), 10 / 11: 8 with
 * the step schedule 0 / 2 of fused_kernel (lab, tests), 12 / 13: the fused pass by
 * fused2_kernel (two warpgroups on key-tile pairs) with 1 / 2 CTAs per SM in its
 * register bound (head dims 17..32 and 49..64; others run 7) */
static int g_variant = 0;
/* fwd_kernel's CTA order (fwd_cta), mf_attention_cuda_set_fwd_order; 2 by measurement
 * (dev/cuda/README.md: the triangle-attention module's forward at N = 768 2.79 ms against
 * 3.34 in order 0) */
#define ATT_FWD_ORDER_DEFAULT 2
static int g_fwd_order = ATT_FWD_ORDER_DEFAULT;

/* ------------------------------------------------------------------------------------
 * Fragment primitives. A fragment of m16n8k16 (bf16): lane = 4g + t;
 *   A (16×16, row-major) a0: (g, 2t..2t+1) a1: (g+8, 2t..) a2: (g, 2t+8..) a3: (g+8, 2t+8..)
 *   B (16×8, k × n)      b0: (k = 2t..2t+1, n = g)  b1: (k = 2t+8..2t+9, n = g)
 *   C (16×8, fp32)       c0, c1: (g, 2t..2t+1)     c2, c3: (g+8, 2t..2t+1)
 * The lower index of a pair sits in the low 16 bits. */

__device__ __forceinline__ float lo_f(uint32_t x) { return __uint_as_float(x << 16); }
__device__ __forceinline__ float hi_f(uint32_t x) { return __uint_as_float(x & 0xffff0000u); }

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

/* Portable c += a·b: every lane gathers the row of A and the column of B it needs. */
__device__ __forceinline__ void mma_portable(float c[4], const uint32_t a[4], uint32_t b0,
                                             uint32_t b1) {
  const int lane = threadIdx.x % MF_WARP_SIZE, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int tk = 0; tk < 4; tk++) {
    const uint32_t A0 = __shfl_sync(0xffffffffu, a[0], g * 4 + tk);
    const uint32_t A1 = __shfl_sync(0xffffffffu, a[1], g * 4 + tk);
    const uint32_t A2 = __shfl_sync(0xffffffffu, a[2], g * 4 + tk);
    const uint32_t A3 = __shfl_sync(0xffffffffu, a[3], g * 4 + tk);
    const uint32_t B00 = __shfl_sync(0xffffffffu, b0, (2 * t) * 4 + tk);
    const uint32_t B10 = __shfl_sync(0xffffffffu, b1, (2 * t) * 4 + tk);
    const uint32_t B01 = __shfl_sync(0xffffffffu, b0, (2 * t + 1) * 4 + tk);
    const uint32_t B11 = __shfl_sync(0xffffffffu, b1, (2 * t + 1) * 4 + tk);
    c[0] += lo_f(A0) * lo_f(B00) + hi_f(A0) * hi_f(B00) + lo_f(A2) * lo_f(B10) + hi_f(A2) * hi_f(B10);
    c[1] += lo_f(A0) * lo_f(B01) + hi_f(A0) * hi_f(B01) + lo_f(A2) * lo_f(B11) + hi_f(A2) * hi_f(B11);
    c[2] += lo_f(A1) * lo_f(B00) + hi_f(A1) * hi_f(B00) + lo_f(A3) * lo_f(B10) + hi_f(A3) * hi_f(B10);
    c[3] += lo_f(A1) * lo_f(B01) + hi_f(A1) * hi_f(B01) + lo_f(A3) * lo_f(B11) + hi_f(A3) * hi_f(B11);
  }
}

/* sm_80+: one tensor-core instruction. */
__device__ __forceinline__ void mma_sm80(float c[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  mma_portable(c, a, b0, b1);
#endif
}

/* 2^x: sm_80+ one MUFU.EX2 (flush to zero, 2^-inf = 0); portable: exp2f. */
__device__ __forceinline__ float ex2_sm80(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}
template <bool MMA>
__device__ __forceinline__ float fast_exp2(float x) {
  if constexpr (MMA) return ex2_sm80(x);
  else return exp2f(x);
}

template <bool MMA>
__device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], uint32_t b0,
                                          uint32_t b1) {
  if constexpr (MMA) mma_sm80(c, a, b0, b1);
  else mma_portable(c, a, b0, b1);
}

/* Four 8×8 bf16 matrices from shared memory; lane l gives the address of row l%8 of
 * matrix l/8. Plain: lane 4g+t gets (row g, cols 2t..2t+1) of each; TRANS: (rows 2t..2t+1,
 * col g), i.e. the fragment of the transposed matrix. */
template <bool TRANS>
__device__ __forceinline__ void ldsm_x4_portable(uint32_t r[4], const bf16 *p) {
  const int lane = threadIdx.x % MF_WARP_SIZE, g = lane >> 2, t = lane & 3;
  const unsigned long long mine = (unsigned long long)(uintptr_t)p;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    if (!TRANS) {
      const bf16 *row = (const bf16 *)(uintptr_t)__shfl_sync(0xffffffffu, mine, 8 * i + g);
      r[i] = *reinterpret_cast<const uint32_t *>(row + 2 * t);
    } else {
      const bf16 *r0 = (const bf16 *)(uintptr_t)__shfl_sync(0xffffffffu, mine, 8 * i + 2 * t);
      const bf16 *r1 = (const bf16 *)(uintptr_t)__shfl_sync(0xffffffffu, mine, 8 * i + 2 * t + 1);
      const uint32_t lo = *reinterpret_cast<const unsigned short *>(r0 + g);
      const uint32_t hi = *reinterpret_cast<const unsigned short *>(r1 + g);
      r[i] = lo | (hi << 16);
    }
  }
}

template <bool TRANS>
__device__ __forceinline__ void ldsm_x4_sm80(uint32_t r[4], const bf16 *p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  if (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#else
  ldsm_x4_portable<TRANS>(r, p);
#endif
}

template <bool MMA, bool TRANS>
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16 *p) {
  if constexpr (MMA) ldsm_x4_sm80<TRANS>(r, p);
  else ldsm_x4_portable<TRANS>(r, p);
}

/* 16 bytes global → shared; zero-filled when !ok (src is then not read). */
template <bool MMA>
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool ok) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (MMA) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src),
                 "r"(ok ? 16 : 0));
    return;
  }
#endif
  *reinterpret_cast<uint4 *>(dst) = ok ? *reinterpret_cast<const uint4 *>(src) : make_uint4(0, 0, 0, 0);
}
template <bool MMA>
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (MMA) asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <bool MMA, int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (MMA) asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/* ------------------------------------------------------------------------------------
 * Tile loads into shared memory. */

/* Loads of a (64, DP) row tile (q, k, v or dO rows) into shared memory (pitch DP+8),
 * planned once per thread: the 64·DP/8 16-byte chunks split exactly over the 128 threads
 * of the warpgroup that loads the tile (DP/16 each), so a tile costs each thread DP/16 predicated copies and no index
 * arithmetic. Chunks past D (head-dim padding) or past the valid rows are zero-filled. */
template <int DP>
struct row_plan {
  static constexpr int CH = DP / 8, NJ = 64 * CH / ATT_THREADS;
  static_assert(64 * CH % ATT_THREADS == 0, "chunks split evenly over the threads");
  int col[NJ], soff[NJ], row[NJ];
  __device__ __forceinline__ explicit row_plan(int D) {
#pragma unroll
    for (int j = 0; j < NJ; j++) {
      const int i = threadIdx.x % ATT_THREADS + j * ATT_THREADS, r = i / CH, c = i % CH;
      col[j] = c * 8;
      soff[j] = r * (DP + 8) + c * 8;
      row[j] = c * 8 < D ? r : 1 << 30; /* padding columns: never valid, zero-filled */
    }
  }
  /* s (64, DP+8) ← rows [0, nrows) of g (·, ld): row i at g + i·ld (ld: the view's row
   * stride in elements, a multiple of 8; 64·ld < 2³¹, checked by the launcher). */
  template <bool MMA>
  __device__ __forceinline__ void load(bf16 *s, const bf16 *g, int nrows, int ld) const {
#pragma unroll
    for (int j = 0; j < NJ; j++) {
      const bool ok = row[j] < nrows;
      cp_async16<MMA>(s + soff[j], g + (ok ? row[j] * ld + col[j] : 0), ok);
    }
  }
};

/* Loads of a (BQ, BK) bias tile (row stride ld) into shared memory (pitch ATT_BP): 16-byte
 * copies, 4 per thread, when rows are 16-byte aligned (ld % 8 == 0); else one element at
 * a time. Zero outside the valid rows/cols, all zero when g is NULL. */
struct bias_plan {
  int off[4], row0, c;
  int64_t ld;
  __device__ __forceinline__ explicit bias_plan(int64_t ld_) : ld(ld_) {
    row0 = threadIdx.x % ATT_THREADS / (ATT_BK / 8);
    c = (threadIdx.x % (ATT_BK / 8)) * 8;
#pragma unroll
    for (int j = 0; j < 4; j++) off[j] = (int)((row0 + 16 * j) * ld + c);
  }
  template <bool MMA>
  __device__ __forceinline__ void load(bf16 *s, const bf16 *g, int rows, int cols) const {
    static_assert(ATT_BQ * ATT_BK / 8 == 4 * ATT_THREADS, "4 chunks per thread");
    if (g && (ld & 7) == 0) {
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const bool ok = row0 + 16 * j < rows && c < cols;
        cp_async16<MMA>(s + (row0 + 16 * j) * ATT_BP + c, ok ? g + off[j] : g, ok);
      }
    } else {
      unsigned short *su = reinterpret_cast<unsigned short *>(s);
      const unsigned short *gu = reinterpret_cast<const unsigned short *>(g);
      for (int i = threadIdx.x % ATT_THREADS; i < ATT_BQ * ATT_BK; i += ATT_THREADS) {
        const int row = i / ATT_BK, cc = i % ATT_BK;
        su[row * ATT_BP + cc] = (g && row < rows && cc < cols) ? gu[row * ld + cc] : 0;
      }
    }
  }
};

/* s (BK) ← 1 where key k0+c is in range and valid; mrow (K) or NULL. The words
 * s[BK..BK+7] get, per warp of the first two, whether all its keys are valid, so that
 * all_valid() lets a whole tile skip the per-element mask. */
/* In two halves, so that a loop can issue the global byte load a step before the value
 * is needed (a load consumed at once stalled the warp, and the barrier the others;
 * README step 9): mask_fetch() returns key k0+c's mask byte for the threads c < BK
 * (1 without a mask, 0 past K), mask_put() stores the flags and the warps' votes. */
__device__ __forceinline__ uint32_t mask_fetch(const uint8_t *mrow, int k0, int K) {
  const int c = threadIdx.x % ATT_THREADS;
  if (c >= ATT_BK || k0 + c >= K) return 0;
  return mrow ? mrow[k0 + c] : 1u;
}
__device__ __forceinline__ void mask_put(uint8_t *s, uint32_t m) {
  static_assert(ATT_BK == 2 * MF_WARP_SIZE && ATT_THREADS >= ATT_BK, "one key per thread of 2 warps");
  const int c = threadIdx.x % ATT_THREADS;
  if (c < ATT_BK) {
    const bool ok = m != 0;
    s[c] = ok;
    const bool all = __all_sync(0xffffffffu, ok);
    if (c % MF_WARP_SIZE == 0) reinterpret_cast<int *>(s + ATT_BK)[c / MF_WARP_SIZE] = all;
  }
}
__device__ __forceinline__ void load_mask(uint8_t *s, const uint8_t *mrow, int k0, int K) {
  mask_put(s, mask_fetch(mrow, k0, K));
}
__device__ __forceinline__ bool all_valid(const uint8_t *s) {
  const int *f = reinterpret_cast<const int *>(s + ATT_BK);
  return f[0] && f[1];
}
#define ATT_MS (ATT_BK + 16) /* bytes of one stage of load_mask() */
/* A stage of the TMA kernels' mask bytes: the tile's 64 bytes as the mask map copies them
 * (p.mtma; then the flag words are not written: raw_all_valid), 128-byte aligned. */
#define ATT_MS_TMA 128
/* whether all 64 keys of a stage the mask map copied (raw bytes, nonzero = valid; zero
 * past K) are valid: each warp votes on its own (README step 20) */
__device__ __forceinline__ bool raw_all_valid(const uint8_t *s) {
  const uint32_t m = *reinterpret_cast<const uint16_t *>(s + 2 * (threadIdx.x % MF_WARP_SIZE));
  return __all_sync(0xffffffffu, (m & 0xffu) != 0u && (m >> 8) != 0u);
}

/* The same for one warp (the TMA kernels' producer warp): lane l takes keys 2l, 2l+1;
 * returns their bits (1 = in range and valid), mask_put_w() writes the stage (bytes and
 * the two flags, here both the tile's vote). */
__device__ __forceinline__ uint32_t mask_fetch_w(const uint8_t *mrow, int k0, int K) {
  const int c = k0 + 2 * (threadIdx.x % MF_WARP_SIZE);
  uint32_t m = 0;
  if (c < K) m = mrow ? (mrow[c] != 0) : 1u;
  if (c + 1 < K) m |= (mrow ? (mrow[c + 1] != 0) : 1u) << 1;
  return m;
}
__device__ __forceinline__ void mask_put_w(uint8_t *s, uint32_t m) {
  static_assert(ATT_BK == 2 * MF_WARP_SIZE, "two keys per lane");
  const int lane = threadIdx.x % MF_WARP_SIZE;
  *reinterpret_cast<uint16_t *>(s + 2 * lane) = (uint16_t)((m & 1u) | ((m >> 1) << 8));
  const int all = __all_sync(0xffffffffu, m == 3u);
  if (lane == 0) reinterpret_cast<int *>(s + ATT_BK)[0] = reinterpret_cast<int *>(s + ATT_BK)[1] = all;
}

/* Views of a tile in shared memory for the fragment loaders: ptr(row, ch) = the 16-byte
 * chunk ch (8 bf16) of row `row`. tv_pitch: rows PITCH elements apart (the cp.async
 * tiles: (64, DP+8), bias (BQ, ATT_BP)); tv_sw64 / tv_sw128: the boxes that TMA writes with
 * the 64- / 128-byte swizzle (64- / 128-byte rows, tma_ptx.cuh), based on 512 / 1024 bytes. */
template <int PITCH>
struct tv_pitch {
  const bf16 *p;
  __device__ __forceinline__ const bf16 *ptr(int row, int ch) const { return p + row * PITCH + ch * 8; }
};
struct tv_sw64 {
  const bf16 *p;
  __device__ __forceinline__ const bf16 *ptr(int row, int ch) const { return p + (mf_sw64(row, ch) >> 1); }
};
struct tv_sw128 {
  const bf16 *p;
  __device__ __forceinline__ const bf16 *ptr(int row, int ch) const {
    return p + (mf_sw128_chunk(row, ch) >> 1);
  }
};
template <int DP>
using tv_tile = tv_pitch<DP + 8>;
using tv_bias = tv_pitch<ATT_BP>;

/* A fragments of this warp's 16 rows of a (64, DP) tile: f[kk] covers cols 16kk..16kk+15. */
template <int DP, bool MMA, class TV>
__device__ __forceinline__ void load_a_frags_v(uint32_t f[DP / 16][4], const TV &s, int warp) {
  const int lane = threadIdx.x % MF_WARP_SIZE;
#pragma unroll
  for (int kk = 0; kk < DP / 16; kk++)
    ldsm_x4<MMA, false>(f[kk], s.ptr(warp * 16 + (lane % 16), kk * 2 + lane / 16));
}
template <int DP, bool MMA>
__device__ __forceinline__ void load_a_frags(uint32_t f[DP / 16][4], const bf16 *s, int warp) {
  load_a_frags_v<DP, MMA>(f, tv_tile<DP>{s}, warp);
}

/* acc (16, 64) += A (16, DP) · Mᵀ where M is a (64, DP) tile (rows = the n index). */
template <int DP, bool MMA, class TV>
__device__ __forceinline__ void mm_abt_v(float acc[8][4], const uint32_t a[DP / 16][4], const TV &m) {
  const int lane = threadIdx.x % MF_WARP_SIZE, i = lane / 8;
#pragma unroll
  for (int kk = 0; kk < DP / 16; kk++)
#pragma unroll
    for (int n2 = 0; n2 < 4; n2++) {
      uint32_t b[4];
      ldsm_x4<MMA, false>(b, m.ptr(n2 * 16 + (i / 2) * 8 + lane % 8, kk * 2 + i % 2));
      mma_16816<MMA>(acc[2 * n2], a[kk], b[0], b[1]);
      mma_16816<MMA>(acc[2 * n2 + 1], a[kk], b[2], b[3]);
    }
}
template <int DP, bool MMA>
__device__ __forceinline__ void mm_abt(float acc[8][4], const uint32_t a[DP / 16][4], const bf16 *m) {
  mm_abt_v<DP, MMA>(acc, a, tv_tile<DP>{m});
}

/* The A fragment of columns 16j..16j+15 of this warp's (16, 64) C-fragment tile p,
 * rounded to bf16 (the same lanes hold them in both layouts). */
__device__ __forceinline__ void pack_a_frag(uint32_t a[4], const float p[8][4], int j) {
  a[0] = pack_bf16x2(p[2 * j][0], p[2 * j][1]);
  a[1] = pack_bf16x2(p[2 * j][2], p[2 * j][3]);
  a[2] = pack_bf16x2(p[2 * j + 1][0], p[2 * j + 1][1]);
  a[3] = pack_bf16x2(p[2 * j + 1][2], p[2 * j + 1][3]);
}

/* The warpgroup's d (64 × 32) += A (64 × 64; this warp's A fragments a[j] for the k-steps
 * j) · M, M the (64, 32) TMA box at shared address box (64-byte rows, 64-byte swizzle) read
 * MN-major: four wgmma m64n32k16, issued, not waited for (the caller fences and commits). */
__device__ __forceinline__ void wg_pm_box(float (&d)[16], const uint32_t a[4][4], uint32_t box) {
#pragma unroll
  for (int j = 0; j < 4; j++) mf_wg_rs_n32<1>(d, a[j], mf_wg_desc_sw64(box + j * 1024, 4096, 512), 1);
}
/* The same from the box's descriptor (mf_wg_desc_sw64(box, 4096, 512)): the start
 * address field (bits 0..13: address / 16) advanced by plain adds instead of a mask and a
 * shift per product (uniform-datapath instructions were a sixth of the TMA kernels' issued
 * instructions, ncu; dev/cuda/README.md). */
__device__ __forceinline__ void wg_pm_desc(float (&d)[16], const uint32_t a[4][4], uint64_t desc) {
#pragma unroll
  for (int j = 0; j < 4; j++) mf_wg_rs_n32<1>(d, a[j], desc + (uint64_t)(j * 1024 / 16), 1);
}

/* acc (16, DP) += P (16, 64; C fragments, rounded to bf16 here) · M, M a (64, DP) tile.
 * RS: also acc[DP / 8] (16, 8) += P · 1, the row sums of the rounded P (every column). */
#define ATT_BF16_ONES 0x3f803f80u /* two bf16 1.0 */
template <int DP, bool MMA, class TV, bool RS = false>
__device__ __forceinline__ void mm_pm_v(float acc[][4], const float p[8][4], const TV &m) {
  const int lane = threadIdx.x % MF_WARP_SIZE, i = lane / 8;
#pragma unroll
  for (int j = 0; j < 4; j++) {
    uint32_t a[4];
    pack_a_frag(a, p, j);
#pragma unroll
    for (int n2 = 0; n2 < DP / 16; n2++) {
      uint32_t b[4];
      ldsm_x4<MMA, true>(b, m.ptr(j * 16 + (i % 2) * 8 + lane % 8, n2 * 2 + i / 2));
      mma_16816<MMA>(acc[2 * n2], a, b[0], b[1]);
      mma_16816<MMA>(acc[2 * n2 + 1], a, b[2], b[3]);
    }
    if constexpr (RS) mma_16816<MMA>(acc[DP / 8], a, ATT_BF16_ONES, ATT_BF16_ONES);
  }
}
template <int DP, bool MMA>
__device__ __forceinline__ void mm_pm(float acc[DP / 8][4], const float p[8][4], const bf16 *m) {
  mm_pm_v<DP, MMA>(acc, p, tv_tile<DP>{m});
}

/* lse in the exp2 domain; an empty row (lse = -inf) becomes +inf so that P = 0. */
__device__ __forceinline__ float lse_log2(float lse) {
  return lse == -INFINITY ? INFINITY : lse * ATT_LOG2E;
}


/* Writes this warp's (16, DP) C fragments, times `mul`, to rows [row0, row0+16) of
 * g (nrows, D; row stride ld) as bf16 (rows ≥ nrows and cols ≥ D skipped). */
template <int DP>
__device__ __forceinline__ void store_rows(bf16 *g, const float acc[DP / 8][4], int row0,
                                           int nrows, int D, int64_t ld, float mul) {
  const int lane = threadIdx.x % MF_WARP_SIZE, gq = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nd = 0; nd < DP / 8; nd++) {
    if (nd * 8 >= D) continue;
#pragma unroll
    for (int hrow = 0; hrow < 2; hrow++) {
      const int row = row0 + gq + 8 * hrow;
      if (row >= nrows) continue;
      *reinterpret_cast<__nv_bfloat162 *>(g + row * ld + nd * 8 + 2 * t) =
          __floats2bfloat162_rn(acc[nd][2 * hrow] * mul, acc[nd][2 * hrow + 1] * mul);
    }
  }
}

/* ------------------------------------------------------------------------------------
 * Parameters shared by the kernels. */
typedef struct {
  const bf16 *q, *k, *v, *bias, *gate, *dout; /* see attention_cuda.h for shapes */
  const uint8_t *mask;
  bf16 *out, *dq, *dk, *dv, *dbias;
  float *lse;       /* (B,R,H,Q) */
  const float *ld;  /* (B,R,H,2,QP) workspace, QP = nqb·BQ: per slab lse·log2e then Di
                     * (slab_ld; prep_kernel writes it) */
  const bf16 *dO;   /* (B,R,H,Q,D): dout, or dout⊙σ(gate) in the workspace */
  int B, R, H, Q, K, D;
  int nqb, nkb;     /* query / key tiles */
  float scale;
  int rs;           /* dbias pass: rows r split into rs ranges (1: no split) */
  float *dbp;       /* rs > 1: (rs,B,H,Q,K) fp32 partial sums (dq's packed buffer or the
                     * workspace's scratch, whichever is larger) */
  float *dqacc;     /* fused pass, global mode: (grid, nqb·64, DP) fp32 dQ accumulators */
  int order;        /* fwd_kernel's CTA order (1×1 layout only): see fwd_cta */
  int mtma;         /* 1: the TMA kernels' maps include the key mask (att_tmaps.mask) */
  int gtma;         /* 1: fwd_tma_kernel's maps include the gate (att_tmaps.gate) */
  int64_t bl;       /* row stride (elements, >= K) of bias and dbias (B,H,Q,·): views.bias_row or K */
  /* element strides of the views (mf_attn_views); sdO: dO's (packed when it is the
   * workspace's gated copy, else dout's) */
  mf_attn_stride sq, sk, sv, sg, so, sdO, sdq, sdk, sdv;
} att_params;

/* Offset of slab (b, r, h) of a view. */
__device__ __forceinline__ int64_t vofs(const mf_attn_stride &s, int b, int r, int h) {
  return (int64_t)b * s.b + (int64_t)r * s.r + (int64_t)h * s.h;
}

/* A bias box in the 128-byte swizzle (as tv_sw128) at shared address base, with the four
 * ldmatrix addresses that logits() reads computed once per thread: off[j] is the byte
 * offset of (row 16·warp + 8·((lane / 8) % 2) + lane % 8, chunk 2j + lane / 16). The
 * forward recomputed them from the lane every key tile (about 17 integer instructions a
 * tile, README step 37); held, each ldmatrix is one instruction off a uniform base. */
struct tv_sw128_lg {
  uint32_t base;
  const uint32_t *off;
  __device__ static void offsets(uint32_t off[4], int warp) {
    const int lane = threadIdx.x % MF_WARP_SIZE, i = lane / 8;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      off[j] = mf_sw128_chunk(warp * 16 + (i % 2) * 8 + lane % 8, 2 * j + i / 2);
      asm volatile("" : "+r"(off[j])); /* opaque: ptxas rematerialised them in the loop */
    }
  }
};
/* bb ← the ldmatrix x4 of logits() at (row, chunk 2j + lane / 16) of view bs */
template <bool MMA, class TV>
__device__ __forceinline__ void ldsm_bias(uint32_t bb[4], const TV &bs, int row, int j) {
  const int lane = threadIdx.x % MF_WARP_SIZE;
  ldsm_x4<MMA, false>(bb, bs.ptr(row, 2 * j + lane / 16));
}
template <bool MMA>
__device__ __forceinline__ void ldsm_bias(uint32_t bb[4], const tv_sw128_lg &bs, int, int j) {
  static_assert(MMA, "tv_sw128_lg: the tensor-core kernels only");
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(bb[0]), "=r"(bb[1]), "=r"(bb[2]), "=r"(bb[3])
               : "r"(bs.base + bs.off[j]));
}

/* Logits of this warp's (16 rows, 64 keys) tile, in place: s ← scale·s + bias, or -inf
 * for a masked key (MASKED only); mx0, mx1 are set to
 * the maxima of rows g and g+8 over this thread's columns. bs: (BQ, BK) bias tile. */
template <bool MASKED, bool MMA, class TV = tv_bias>
__device__ __forceinline__ void logits(float s[8][4], const TV &bs, const uint8_t *ms,
                                       float scale, int warp, float &mx0, float &mx1) {
  const int lane = threadIdx.x % MF_WARP_SIZE, t = lane & 3, i = lane / 8;
#pragma unroll
  for (int nb = 0; nb < 8; nb += 2) {
    /* bias in C-fragment layout, two n-blocks per ldmatrix: r0, r1 rows g, g+8 of nb */
    uint32_t bb[4];
    ldsm_bias<MMA>(bb, bs, warp * 16 + (i % 2) * 8 + lane % 8, nb / 2);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int n = nb + h, col = n * 8 + 2 * t;
      s[n][0] = fmaf(s[n][0], scale, lo_f(bb[2 * h]));
      s[n][1] = fmaf(s[n][1], scale, hi_f(bb[2 * h]));
      s[n][2] = fmaf(s[n][2], scale, lo_f(bb[2 * h + 1]));
      s[n][3] = fmaf(s[n][3], scale, hi_f(bb[2 * h + 1]));
      if (MASKED) {
        const unsigned short mk = *reinterpret_cast<const unsigned short *>(ms + col);
        if (!(mk & 0xff)) s[n][0] = s[n][2] = -INFINITY;
        if (!(mk >> 8)) s[n][1] = s[n][3] = -INFINITY;
      }
      if (n == 0) { /* the first pair starts the maxima (no max with −∞: 2 FMNMX a tile) */
        mx0 = fmaxf(s[n][0], s[n][1]);
        mx1 = fmaxf(s[n][2], s[n][3]);
      } else {
        mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
        mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
      }
    }
  }
}

/* s (this warp's 16 rows × 64 keys, natural units) ← 2^(log2e·s − mu) with mu0 for rows g,
 * mu1 for rows g + 8 (one FFMA and one ex2 per logit). */
template <bool MMA>
__device__ __forceinline__ void exp2_rows(float s[8][4], float mu0, float mu1) {
#pragma unroll
  for (int nb = 0; nb < 8; nb++) {
    s[nb][0] = fast_exp2<MMA>(fmaf(s[nb][0], ATT_LOG2E, -mu0));
    s[nb][1] = fast_exp2<MMA>(fmaf(s[nb][1], ATT_LOG2E, -mu0));
    s[nb][2] = fast_exp2<MMA>(fmaf(s[nb][2], ATT_LOG2E, -mu1));
    s[nb][3] = fast_exp2<MMA>(fmaf(s[nb][3], ATT_LOG2E, -mu1));
  }
}

/* One online-softmax step of the forward over a key tile's logits s (natural units; mx0,
 * mx1: the maxima of rows g, g+8 over this thread's columns, from logits()). The state of
 * a row is mu = log2e·m, its reference maximum in exp2 units (−FLT_MAX before its first
 * valid key); s is replaced by P = 2^(log2e·s − mu) and the accumulators o[0..NO) hold
 * Σ P·v and (o[NO − 1], by mm_pm_v<RS>) Σ P under that mu.
 * Lazy rescaling (README step 37): mu is raised, and o rescaled by 2^(mu_old − mu_new),
 * only when some row of the warp has a logit more than ATT_RESCALE_LOG2 above its mu
 * (a warp vote, so the branch is uniform); otherwise mu stays and P ≤ 2^ATT_RESCALE_LOG2
 * = 256, which bf16 P and the fp32 sums hold without loss. The result depends only on
 * the (fixed) order of the tiles, so it is deterministic, and lse = (mu + log2 l)·ln2 is
 * exact whatever mu is. Skipping saves the 20 multiplications of o, two exponentials and
 * the per-row reference arithmetic on most tiles. (README step 15: the row sums by the
 * tensor cores, 4 mma.sync per tile in place of 32 FADDs per thread; they are the sums of
 * the bf16-rounded P that the products use.) */
#define ATT_RESCALE_LOG2 8.f
#define ATT_MU_EMPTY (-3.402823466e38f) /* mu of a row with no valid key yet: −FLT_MAX */
template <bool MMA, int NO>
__device__ __forceinline__ void softmax_step(float s[8][4], float o[NO][4], float &mu0, float &mu1,
                                             float mx0, float mx1) {
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  /* a masked tile row has mx = −∞: −∞·log2e − mu = −∞, no growth (never NaN: mu finite) */
  const float x0 = mx0 * ATT_LOG2E, x1 = mx1 * ATT_LOG2E;
  const bool grow = x0 - mu0 > ATT_RESCALE_LOG2 || x1 - mu1 > ATT_RESCALE_LOG2;
  if (__any_sync(0xffffffffu, grow)) {
    const float mn0 = fmaxf(mu0, x0), mn1 = fmaxf(mu1, x1);
    const float al0 = fast_exp2<MMA>(mu0 - mn0), al1 = fast_exp2<MMA>(mu1 - mn1);
#pragma unroll
    for (int i = 0; i < NO; i++) {
      o[i][0] *= al0; o[i][1] *= al0;
      o[i][2] *= al1; o[i][3] *= al1;
    }
    mu0 = mn0;
    mu1 = mn1;
  }
  exp2_rows<MMA>(s, mu0, mu1);
}

/* The forward's end of a row pair, from the row sums l0, l1 (rows g, g+8; mm_pm_v<RS>
 * leaves the whole sum in every column) and the rows' mu: lse (-inf for a row with no
 * valid key) and the normaliser of o (0 for such a row). */
__device__ __forceinline__ void softmax_finish(float l0, float l1, float mu0, float mu1, float &lse0,
                                               float &lse1, float &inv0, float &inv1) {
  inv0 = l0 > 0.f ? 1.f / l0 : 0.f;
  inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
  lse0 = l0 > 0.f ? (mu0 + log2f(l0)) * ATT_LN2 : -INFINITY;
  lse1 = l1 > 0.f ? (mu1 + log2f(l1)) * ATT_LN2 : -INFINITY;
}

/* ------------------------------------------------------------------------------------
 * Warpgroups. A CTA is G = GA·GB warpgroups of 4 warps; warpgroup wg does the work of
 * one 4-warp CTA of the first version (one 64-row tile) and shares the tiles it streams
 * with the others: in fwd/dq the GA = GR warpgroups of different rows r (same query tile)
 * share the bias tile and the GB = GQ warpgroups of different query tiles (same r) share
 * the K/V tiles; dkdv likewise with key tiles; dbias shares Q/dO over key tiles and K/V
 * over query tiles. Bytes from L2 per logit at D = 32: 2/GR (bias) + 2/GQ (K, V), which
 * is what bounds these kernels (README). G = 1 is the first version exactly. */
/* 1: the forward's gate tile goes through shared memory (copied during the last key
 * step), 0: each thread loads its gate values at the end (README step 9) */
#ifndef FWD_GATE_SMEM
#define FWD_GATE_SMEM 1
#endif
/* Minimum CTAs per SM for __launch_bounds__ (a register cap of 65536 / (threads·minb)):
 * At DP = 32: fwd 96 / 121 / 121 registers for G = 1 / 2 / 4, dkdv 160 / 128 / 128. */
__host__ __device__ constexpr int minb_fwd(bool MMA, int DP, int G) {
  return !(MMA && DP <= 32) ? (G == 1 ? 3 : 1) : G == 1 ? 5 : G == 2 ? 2 : 1;
}
__host__ __device__ constexpr int minb_bwd(bool MMA, int DP, int G) {
  return !(MMA && DP <= 32) ? 1 : G == 1 ? 4 : G == 2 ? 2 : 1;
}
__host__ __device__ constexpr int minb_dkdv(bool MMA, int DP, int G) {
  return !(MMA && DP <= 32) ? 1 : G == 1 ? 3 : G == 2 ? 2 : 1;
}

/* ------------------------------------------------------------------------------------
 * Forward. Grid: B·H·⌈nqb/GQ⌉·⌈R/GR⌉ CTAs, r fastest so that the CTAs sharing a bias
 * tile run together. out (B,R,H,Q,D), lse (B,R,H,Q). */
/* The (r, query tile, h, b) of this CTA of the forward (one warpgroup per CTA), by p.order;
 * every order visits the same CTAs, so outputs do not depend on it. 0: r fastest, then
 * the query tile (consecutive CTAs share the bias tile). 1: the query tile fastest, then r
 * (the CTAs of one (b, r, h) slab run together and share its K/V tiles in L2). 2: groups
 * of ATT_FWD_RB rows r of one (b, h), inside a group r fastest, then the query tile: both
 * reuses, with a small working set (ATT_FWD_RB slabs' K/V and one head's bias). */
#define ATT_FWD_RB 8
__device__ __forceinline__ void fwd_cta(const att_params &p, int &r, int &qb, int &h, int &b) {
  const int64_t per_bh = (int64_t)p.R * p.nqb;
  const int64_t bh = blockIdx.x / per_bh, rem = blockIdx.x - bh * per_bh;
  h = (int)(bh % p.H);
  b = (int)(bh / p.H);
  if (p.order == 1) {
    r = (int)(rem / p.nqb);
    qb = (int)(rem - (int64_t)r * p.nqb);
  } else if (p.order == 2) {
    const int64_t gsz = (int64_t)ATT_FWD_RB * p.nqb;
    const int g = (int)(rem / gsz), w = (int)(rem - g * gsz);
    const int rows = min(ATT_FWD_RB, p.R - g * ATT_FWD_RB);
    qb = w / rows;
    r = g * ATT_FWD_RB + (w - qb * rows);
  } else {
    qb = (int)(rem / p.R);
    r = (int)(rem - (int64_t)qb * p.R);
  }
}

template <int DP, bool MMA, int GR, int GQ>
__global__ void __launch_bounds__(ATT_THREADS * GR * GQ, minb_fwd(MMA, DP, GR * GQ)) fwd_kernel(att_params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int G = GR * GQ, TP = DP + 8, TILE = 64 * TP, BT = ATT_BQ * ATT_BP;
  const int wg = G == 1 ? 0 : threadIdx.x / ATT_THREADS, jr = wg % GR, jq = wg / GR;
  bf16 *Qs = reinterpret_cast<bf16 *>(smem) + wg * TILE;  /* [G][TILE] */
  bf16 *Ks = reinterpret_cast<bf16 *>(smem) + G * TILE + jr * 2 * TILE; /* [GR][2][TILE] */
  bf16 *Vs = Ks + GR * 2 * TILE;                                        /* [GR][2][TILE] */
  bf16 *Bs = reinterpret_cast<bf16 *>(smem) + (G + 4 * GR) * TILE + jq * 2 * BT; /* [GQ][2][BT] */
  uint8_t *Ms = reinterpret_cast<uint8_t *>(reinterpret_cast<bf16 *>(smem) + (G + 4 * GR) * TILE + GQ * 2 * BT) +
                jr * 2 * ATT_MS; /* [GR][2][ATT_MS] */

  int rr, qb, h, b;
  if (G == 1) {
    fwd_cta(p, rr, qb, h, b);
  } else {
    int64_t idx = blockIdx.x;
    const int nrg = (p.R + GR - 1) / GR, nqg = (p.nqb + GQ - 1) / GQ;
    rr = (int)(idx % nrg) * GR + jr; idx /= nrg;
    qb = (int)(idx % nqg) * GQ + jq; idx /= nqg;
    h = (int)(idx % p.H);
    b = (int)(idx / p.H);
  }
  const bool act = rr < p.R; /* a warpgroup past the last row redoes row R-1, stores nothing */
  const int r = act ? rr : p.R - 1;
  const bool ldkv = jq == 0, ldb = jr == 0; /* who loads the shared tiles */
  const int Q = p.Q, K = p.K, D = p.D, q0 = qb * ATT_BQ;
  const int64_t brh = ((int64_t)b * p.R + r) * p.H + h;
  const int stq = (int)p.sq.row, stk = (int)p.sk.row, stv = (int)p.sv.row;
  const bf16 *qg = p.q + vofs(p.sq, b, r, h) + (int64_t)q0 * stq;
  const bf16 *kg = p.k + vofs(p.sk, b, r, h), *vg = p.v + vofs(p.sv, b, r, h);
  const bf16 *bg = p.bias ? p.bias + (((int64_t)b * p.H + h) * Q + q0) * p.bl : NULL;
  const uint8_t *mg = p.mask ? p.mask + ((int64_t)b * p.R + r) * K : NULL;
  const int warp = threadIdx.x / MF_WARP_SIZE % ATT_WARPS, lane = threadIdx.x % MF_WARP_SIZE;
  const row_plan<DP> rp(D);
  const bias_plan bp(p.bl);
  const int gq = lane >> 2, t = lane & 3;

  const int nkb = p.nkb;
  rp.template load<MMA>(Qs, qg, Q - q0, stq);
  if (ldkv) {
    rp.template load<MMA>(Ks, kg, K, stk);
    rp.template load<MMA>(Vs, vg, K, stv);
    load_mask(Ms, mg, 0, K);
  }
  if (ldb) bp.template load<MMA>(Bs, bg, Q - q0, K);
  cp_async_commit<MMA>();
  cp_async_wait<MMA, 0>();
  __syncthreads();
  uint32_t qf[DP / 16][4];
  load_a_frags<DP, MMA>(qf, Qs, warp);

  float o[DP / 8 + 1][4]; /* the output's n-blocks, then the row sums (mm_pm_v<RS>) */
#pragma unroll
  for (int i = 0; i < DP / 8 + 1; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m0 = ATT_MU_EMPTY, m1 = ATT_MU_EMPTY; /* the rows' mu (softmax_step) */

  /* the next tile's mask bytes, fetched a step ahead (mask_fetch) */
  uint32_t mnext = ldkv && nkb > 1 ? mask_fetch(mg, ATT_BK, K) : 0u;
  /* with a gate and one warpgroup, the gate tile (64, DP) of this CTA's rows is copied
   * during the last step into the K stage that step leaves free (FWD_GATE_SMEM) */
  const bool gate_smem = FWD_GATE_SMEM && G == 1 && p.gate != NULL && nkb > 0;
  const bf16 *gg = p.gate ? p.gate + vofs(p.sg, b, r, h) : NULL;
  for (int it = 0; it < nkb; it++) {
    const int st = it & 1;
    if (it + 1 < nkb) { /* prefetch the next key tile into the other stage */
      const int k1 = (it + 1) * ATT_BK, sn = st ^ 1;
      if (ldkv) {
        rp.template load<MMA>(Ks + sn * TILE, kg + (int64_t)k1 * stk, K - k1, stk);
        rp.template load<MMA>(Vs + sn * TILE, vg + (int64_t)k1 * stv, K - k1, stv);
        mask_put(Ms + sn * ATT_MS, mnext);
        if (it + 2 < nkb) mnext = mask_fetch(mg, k1 + ATT_BK, K);
      }
      if (ldb) bp.template load<MMA>(Bs + sn * BT, bg ? bg + k1 : NULL, Q - q0, K - k1);
    } else if (gate_smem) {
      rp.template load<MMA>(Ks + (st ^ 1) * TILE, gg + (int64_t)q0 * p.sg.row, Q - q0, (int)p.sg.row);
    }
    cp_async_commit<MMA>();
    cp_async_wait<MMA, 1>();
    __syncthreads();
    const bf16 *ks = Ks + st * TILE, *vs = Vs + st * TILE, *bs = Bs + st * BT;
    const uint8_t *ms = Ms + st * ATT_MS;

    float s[8][4];
#pragma unroll
    for (int i = 0; i < 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
    mm_abt<DP, MMA>(s, qf, ks);

    float mx0 = -INFINITY, mx1 = -INFINITY;
    if (all_valid(ms)) logits<false, MMA>(s, tv_bias{bs}, ms, p.scale, warp, mx0, mx1);
    else logits<true, MMA>(s, tv_bias{bs}, ms, p.scale, warp, mx0, mx1);
    softmax_step<MMA, DP / 8 + 1>(s, o, m0, m1, mx0, mx1);
    mm_pm_v<DP, MMA, tv_tile<DP>, true>(o, s, tv_tile<DP>{vs});
    __syncthreads(); /* the stage is refilled by the next iteration's prefetch */
  }

  float lse0, lse1, inv0, inv1;
  softmax_finish(o[DP / 8][0], o[DP / 8][2], m0, m1, lse0, lse1, inv0, inv1);
  const int row0 = q0 + warp * 16 + gq, row1 = row0 + 8;
  if (act && p.lse && t == 0) {
    float *lg = p.lse + brh * Q;
    if (row0 < Q) lg[row0] = lse0;
    if (row1 < Q) lg[row1] = lse1;
  }
#pragma unroll
  for (int i = 0; i < DP / 8; i++) {
    o[i][0] *= inv0; o[i][1] *= inv0;
    o[i][2] *= inv1; o[i][3] *= inv1;
  }
  if (gate_smem) {
    cp_async_wait<MMA, 0>();
    __syncthreads();
  }
  if (p.gate) { /* out = σ(gate) ⊙ o */
    const bf16 *gs = Ks + (((nkb - 1) & 1) ^ 1) * TILE; /* the gate tile when gate_smem */
#pragma unroll
    for (int nd = 0; nd < DP / 8; nd++) {
      if (nd * 8 >= D) continue;
#pragma unroll
      for (int hrow = 0; hrow < 2; hrow++) {
        const int row = hrow ? row1 : row0;
        if (row >= Q) continue;
        const bf16 *gp = gate_smem ? gs + (row - q0) * TP + nd * 8 + 2 * t
                                   : gg + (int64_t)row * p.sg.row + nd * 8 + 2 * t;
        const float2 gv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(gp));
        o[nd][2 * hrow] *= 1.f / (1.f + __expf(-gv.x));
        o[nd][2 * hrow + 1] *= 1.f / (1.f + __expf(-gv.y));
      }
    }
  }
  if (act) store_rows<DP>(p.out + vofs(p.so, b, r, h), o, q0 + warp * 16, Q, D, p.so.row, 1.f);
}

/* ------------------------------------------------------------------------------------
 * Forward with TMA tile copies (fwd_tma_kernel, D = 32, tensor cores; the default where
 * its tensor maps can be made: README step 13). The same CTA, tiles, arithmetic and order
 * as fwd_kernel<32, true, 1, 1> — out and lse are bit-identical to it — but the Q, K, V and
 * bias tiles come by cp.async.bulk.tensor, one thread issuing each stage's three copies
 * onto a transaction barrier, instead of 8 predicated 16-byte cp.async per thread and
 * step with their address arithmetic (27 % of fwd_kernel's instructions at N = 768, ncu).
 * Shared memory: two stages of K (64 × 64 B, 64-byte swizzle) | V (same) | bias (64 ×
 * 128 B, 128-byte swizzle), then Q, the mask stages and the barriers. */
#define TMA_KV 4096    /* bytes of a (64, 32) bf16 tile */
#define TMA_BIAS 8192  /* bytes of a (64, 64) bf16 bias tile */
#define TMA_STAGE (2 * TMA_KV + TMA_BIAS)
#define TMA_FWD_SMEM (2 * TMA_STAGE + TMA_KV + 2 * ATT_MS_TMA + 5 * 8 + 1024) /* + alignment slack */
#define TMA_FWD_GATE (TMA_KV + 512) /* more, with the gate's box (p.gtma) after the barriers */

/* The tensor maps of one call: views with dimensions (d, row, h, r, b) in that order
 * (view_map), whatever their strides. */
typedef struct {
  CUtensorMap q, k, v, bias, dO; /* bias: the forward's; dO: the backward's (p.dO, p.sdO) */
  CUtensorMap q2, dO2;           /* the dbias pass over query-tile pairs: q, dO in 128-row boxes */
  CUtensorMap mask;              /* p.mtma: the key mask (B·R rows, K bytes), box 64 keys × 1 row */
  CUtensorMap gate;              /* p.gtma: the forward's gate, a view map as q's */
} att_tmaps;

/* Copies the (row, h, r, b) box of a view map into shared address dst, completing on fb. */
__device__ __forceinline__ void tma_view(uint32_t dst, const CUtensorMap *map, int row, int h, int r, int b,
                                         uint32_t fb) {
  mf_tma_load_5d(dst, map, 0, row, h, r, b, fb);
}

/* tanh(x) by the special-function unit (max. relative error about 2^-11, ample for a gate
 * applied to a bf16 output) */
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* MT: the key mask comes by the mask map (p.mask, p.mtma; wgmma kernel only): a template
 * argument, so that the kernels without it keep their registers (the runtime flag cost the
 * unmasked forward 2 %, README step 20). */
template <int MINB, bool WG, bool MT = false>
__global__ void __launch_bounds__(ATT_THREADS, MINB) fwd_tma_kernel(att_params p, const __grid_constant__ att_tmaps tm) {
  static_assert(!MT || WG, "the mask map only on the wgmma forward");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = mf_smem_u32(smem_raw), base = (raw + 1023u) & ~1023u;
  unsigned char *sb = smem_raw + (base - raw);
  const uint32_t qa = base + 2 * TMA_STAGE;
  uint8_t *Ms = sb + 2 * TMA_STAGE + TMA_KV; /* [2][ATT_MS_TMA] */
  const uint32_t msa = qa + TMA_KV;          /* Ms's shared address */
  /* barriers: Q; full[2] (the stage's copies and mask flags landed: warp 0's 32 lanes
   * arrive, lane 0 with the copies' bytes; lane 0 alone where the flags are fixed, mfast); empty[2] (all 128 threads are done with the
   * stage: each arrives after its own last read, so every access is ordered by its own
   * release). No CTA-wide barrier per step: warp 0 refills stage s for step it + 1 once
   * empty[s] has completed for step it − 1. */
  const uint32_t bar = (msa + 2 * ATT_MS_TMA + 7u) & ~7u, full = bar + 8, empty = bar + 24;
  /* the gate's box (p.gtma; the launch adds TMA_FWD_GATE bytes only then, so that the
   * kernels without a gate keep their shared-memory size): 512-aligned for the swizzle */
  const uint32_t ga = (bar + 5 * 8 + 511u) & ~511u;

  int r, qb, h, b;
  fwd_cta(p, r, qb, h, b);
  const int Q = p.Q, K = p.K, D = p.D, q0 = qb * ATT_BQ, tid = threadIdx.x;
  const int64_t brh = ((int64_t)b * p.R + r) * p.H + h;
  const uint8_t *mg = p.mask ? p.mask + ((int64_t)b * p.R + r) * K : NULL;
  const int warp = tid / MF_WARP_SIZE, lane = tid % MF_WARP_SIZE, gq = lane >> 2, t = lane & 3;
  const int nkb = p.nkb;
  const bool has_bias = p.bias != NULL;
  /* no mask and whole key tiles (mconst): both stages' mask flags are written once (all
   * valid) and only the issuing lane arrives on a full barrier (README step 19). A mask
   * the map covers (mtma): the tile's mask bytes are a fourth copy of the stage, so again
   * only the issuing lane arrives, and warp 0 does no mask work per step (step 20). */
  constexpr bool mtma = MT; /* the launcher passes a mask and its map */
  const bool gate_tma = p.gate != NULL && p.gtma;
  const bool mconst = !MT && mg == NULL && K % ATT_BK == 0;
  const bool mfast = mconst || mtma;
  const uint32_t stage_tx = (has_bias ? TMA_STAGE : 2 * TMA_KV) + (mtma ? ATT_BK : 0);
  auto issue = [&](int s, int k0) { /* thread 0: stage s ← key tile at k0 */
    const uint32_t dst = base + s * TMA_STAGE, fb = full + 8 * s;
    mf_mbar_expect_tx(fb, stage_tx);
    tma_view(dst, &tm.k, k0, h, r, b, fb);
    tma_view(dst + TMA_KV, &tm.v, k0, h, r, b, fb);
    if (has_bias) mf_tma_load_4d(dst + 2 * TMA_KV, &tm.bias, k0, q0, h, b, fb);
    if (mtma) mf_tma_load_2d(msa + s * ATT_MS_TMA, &tm.mask, k0, b * p.R + r, fb);
  };

  if (tid == 0) {
    const int nfull = mfast ? 1 : MF_WARP_SIZE; /* warp 0's lanes (one with the copies' bytes) */
    mf_mbar_init(bar, 1);
    mf_mbar_init(full, nfull);
    mf_mbar_init(full + 8, nfull);
    mf_mbar_init(empty, ATT_THREADS); /* every thread, after its last read of the stage */
    mf_mbar_init(empty + 8, ATT_THREADS);
    mf_mbar_init_fence();
  }
  if (!has_bias) /* a zero bias tile in both stages, never overwritten */
    for (int s = 0; s < 2; s++)
      for (int i = tid; i < TMA_BIAS / 16; i += ATT_THREADS)
        reinterpret_cast<uint4 *>(sb + s * TMA_STAGE + 2 * TMA_KV)[i] = make_uint4(0, 0, 0, 0);
  if (mconst && warp == 0) {
    mask_put_w(Ms, 3u);
    mask_put_w(Ms + ATT_MS_TMA, 3u);
  }
  __syncthreads();
  uint32_t mnext = 0; /* warp 0: the next key tile's mask bits */
  if (warp == 0) {
    if (!mfast) {
      if (nkb > 0) mask_put_w(Ms, mask_fetch_w(mg, 0, K));
      if (nkb > 1) mnext = mask_fetch_w(mg, ATT_BK, K);
    }
    if (lane == 0) {
      mf_mbar_expect_tx(bar, gate_tma ? 2 * TMA_KV : TMA_KV);
      tma_view(qa, &tm.q, q0, h, r, b, bar);
      if (gate_tma) tma_view(ga, &tm.gate, q0, h, r, b, bar); /* the gate's rows, used at the end */
      if (nkb > 0) issue(0, 0);
    } else if (nkb > 0 && !mfast) {
      mf_mbar_arrive(full); /* this lane's mask bytes of stage 0 */
    }
  }
  mf_mbar_wait(bar, 0);
  uint32_t qf[2][4];
  load_a_frags_v<32, true>(qf, tv_sw64{reinterpret_cast<const bf16 *>(sb + 2 * TMA_STAGE)}, warp);

  uint32_t lgo[4]; /* logits()' ldmatrix offsets in a stage's bias box */
  tv_sw128_lg::offsets(lgo, warp);
  float o[5][4]; /* the output's n-blocks, then the row sums (mm_pm_v<RS>) */
#pragma unroll
  for (int i = 0; i < 5; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m0 = ATT_MU_EMPTY, m1 = ATT_MU_EMPTY; /* the rows' mu (softmax_step) */
  /* wgmma descriptors of stage 0's K and V boxes (WG) */
  const uint64_t dk0 = mf_wg_desc_sw64(base, 16, 512), dv0 = mf_wg_desc_sw64(base + TMA_KV, 4096, 512);
  /* the gate: by TMA with Q (gate_tma), else in the last step into the free stage */
  const bool gate_smem = p.gate != NULL && nkb > 0 && !gate_tma;
  const bf16 *gg = p.gate ? p.gate + vofs(p.sg, b, r, h) : NULL;
  /* warp 0: stage st^1 ← key tile it + 1, once step it − 1 is done everywhere. The wgmma
   * kernel calls it after issuing step it's S product, so that warp 0's copy issue runs
   * under that product instead of holding the warpgroup at it (README step 19). */
  auto produce = [&](int it, int st) {
    if (it + 1 >= nkb || warp != 0) return;
    const int k1 = (it + 1) * ATT_BK;
    if (mfast) {
      if (lane == 0) {
        if (it >= 1) mf_mbar_wait(empty + 8 * (st ^ 1), (uint32_t)((it - 1) >> 1) & 1u);
        issue(st ^ 1, k1);
      }
      __syncwarp();
    } else {
      if (it >= 1) mf_mbar_wait(empty + 8 * (st ^ 1), (uint32_t)((it - 1) >> 1) & 1u);
      mask_put_w(Ms + (st ^ 1) * ATT_MS_TMA, mnext);
      if (it + 2 < nkb) mnext = mask_fetch_w(mg, k1 + ATT_BK, K);
      if (lane == 0) issue(st ^ 1, k1);
      else mf_mbar_arrive(full + 8 * (st ^ 1)); /* this lane's mask bytes */
    }
  };
  for (int it = 0; it < nkb; it++) {
    const int st = it & 1;
    if (it + 1 < nkb) {
      if constexpr (!WG) produce(it, st);
    } else if (gate_smem) { /* the gate tile (64, 40) into the free stage's K|V bytes */
      if (it >= 1) mf_mbar_wait(empty + 8 * (st ^ 1), (uint32_t)((it - 1) >> 1) & 1u);
      const row_plan<32> rp(D);
      rp.template load<true>(reinterpret_cast<bf16 *>(sb + (st ^ 1) * TMA_STAGE), gg + (int64_t)q0 * p.sg.row,
                             Q - q0, (int)p.sg.row);
      cp_async_commit<true>();
    }
    mf_mbar_wait(full + 8 * st, (uint32_t)(it >> 1) & 1u);
    const bf16 *ks = reinterpret_cast<const bf16 *>(sb + st * TMA_STAGE), *vs = ks + TMA_KV / 2;
    const tv_sw128_lg bs{base + st * TMA_STAGE + 2 * TMA_KV, lgo};
    const uint8_t *ms = Ms + st * ATT_MS_TMA;
    /* whether every key of the tile is valid: known without reading the flags when there is
     * no mask and the tiles are whole (mconst); else read while the S product runs (WG) or
     * before it, so that the two dependent shared loads are not on the path after its wait
     * (step 37) */
    bool allv = mconst;
    if (!WG && !mconst) allv = mtma ? raw_all_valid(ms) : all_valid(ms);

    float s[8][4];
    if constexpr (WG) { /* S = Q·Kᵀ: A (Q) from registers, B the K-major K box */
      float(&s32)[32] = reinterpret_cast<float(&)[32]>(s);
      const uint64_t dk = dk0 + (uint64_t)(st * (TMA_STAGE / 16)); /* this stage's K box */
      mf_wg_fence();
      mf_wg_rs_n64<0>(s32, qf[0], dk, 0);
      mf_wg_rs_n64<0>(s32, qf[1], dk + 32 / 16, 1);
      mf_wg_commit();
      produce(it, st);
      if (!mconst) allv = mtma ? raw_all_valid(ms) : all_valid(ms);
      mf_wg_wait<0>();
      mf_wg_pin(s32);
    } else {
#pragma unroll
      for (int i = 0; i < 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
      mm_abt_v<32, true>(s, qf, tv_sw64{ks});
    }

    float mx0 = -INFINITY, mx1 = -INFINITY;
    if (allv) logits<false, true>(s, bs, ms, p.scale, warp, mx0, mx1);
    else logits<true, true>(s, bs, ms, p.scale, warp, mx0, mx1);
    softmax_step<true, 5>(s, o, m0, m1, mx0, mx1);
    if constexpr (WG) { /* O += P·V: A (P) from registers, B the MN-major V box; row sums by mma.sync */
      float(&o16)[16] = reinterpret_cast<float(&)[16]>(o);
      uint32_t pa[4][4];
#pragma unroll
      for (int j = 0; j < 4; j++) pack_a_frag(pa[j], s, j);
      mf_wg_fence();
      wg_pm_desc(o16, pa, dv0 + (uint64_t)(st * (TMA_STAGE / 16)));
      mf_wg_commit();
#pragma unroll
      for (int j = 0; j < 4; j++) mma_16816<true>(o[4], pa[j], ATT_BF16_ONES, ATT_BF16_ONES);
      mf_wg_wait<0>();
      mf_wg_pin(o16);
    } else {
      mm_pm_v<32, true, tv_sw64, true>(o, s, tv_sw64{vs});
    }
    mf_mbar_arrive(empty + 8 * st); /* this thread is done with the stage */
  }

  float lse0, lse1, inv0, inv1;
  softmax_finish(o[4][0], o[4][2], m0, m1, lse0, lse1, inv0, inv1);
  const int row0 = q0 + warp * 16 + gq, row1 = row0 + 8;
  if (p.lse && t == 0) {
    float *lg = p.lse + brh * Q;
    if (row0 < Q) lg[row0] = lse0;
    if (row1 < Q) lg[row1] = lse1;
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    o[i][0] *= inv0; o[i][1] *= inv0;
    o[i][2] *= inv1; o[i][3] *= inv1;
  }
  if (gate_smem || gate_tma) {
    if (gate_smem) {
      cp_async_wait<true, 0>();
      __syncthreads();
    }
    const bf16 *gs = reinterpret_cast<const bf16 *>(sb + (((nkb - 1) & 1) ^ 1) * TMA_STAGE);
    const tv_sw64 gb{reinterpret_cast<const bf16 *>(sb + (ga - base))}; /* gate_tma: the box at ga */
#pragma unroll
    for (int nd = 0; nd < 4; nd++)
#pragma unroll
      for (int hrow = 0; hrow < 2; hrow++) {
        const int row = hrow ? row1 : row0;
        if (row >= Q) continue;
        const bf16 *gp = gate_tma ? gb.ptr(row - q0, nd) + 2 * t : gs + (row - q0) * 40 + nd * 8 + 2 * t;
        const float2 gv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(gp));
        if constexpr (WG) { /* σ(g) = (1 + tanh(g/2))/2: one MUFU op instead of two (step 20) */
          o[nd][2 * hrow] *= fmaf(0.5f, tanh_approx(0.5f * gv.x), 0.5f);
          o[nd][2 * hrow + 1] *= fmaf(0.5f, tanh_approx(0.5f * gv.y), 0.5f);
        } else {
          o[nd][2 * hrow] *= 1.f / (1.f + __expf(-gv.x));
          o[nd][2 * hrow + 1] *= 1.f / (1.f + __expf(-gv.y));
        }
      }
  }
  store_rows<32>(p.out + vofs(p.so, b, r, h), o, q0 + warp * 16, Q, D, p.so.row, 1.f);
}

/* ------------------------------------------------------------------------------------
 * Backward prologue, PREP_LPR threads per (b, r, h, q) row, q < QP = nqb·BQ: the slab's
 * side rows (slab_ld): lse·log2e (+inf when lse = -inf) and Di (fp32) = Σ_d dout·out,
 * +inf and 0 for the padding rows q ≥ Q; with a gate, dgate = dout·out·(1 − σ(g)) and
 * dO = dout·σ(g) (bf16, packed, into the workspace). dout, out, gate, dgate are strided
 * views (dO packed); dgate may be dout itself: each 16-byte chunk is read before the
 * same thread writes it. */
typedef struct {
  mf_attn_stride dout, out, gate, dgate;
} prep_strides;
#define PREP_LPR 4 /* lanes per row of prep_kernel (a power of two dividing 32) */
__global__ void prep_kernel(float *ld, bf16 *dO, bf16 *dgate, const bf16 *dout, const bf16 *out,
                            const bf16 *gate, const float *lse, int64_t nrows, int D, int R,
                            int H, int Q, int QP, prep_strides ps) {
  /* PREP_LPR lanes per row, lane sub taking the 16-byte chunks sub, sub + PREP_LPR, …: a
   * warp reads 8 rows' whole 64-byte head slices per instruction (one row per thread read
   * them 16 bytes at a time, 32 rows apart) */
  /* prow: the padded row (brh, q < QP), nrows = B·R·H·QP; row: the real one (q < Q) */
  const int64_t prow = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / PREP_LPR;
  const int sub = (int)(threadIdx.x % PREP_LPR);
  const int64_t brh = prow / QP, q = prow - brh * QP, row = brh * Q + q;
  const bool live = prow < nrows && q < Q;
  float acc = 0.f;
  if (live) {
    const int64_t br = brh / H;
    const int h = (int)(brh - br * H), r = (int)(br % R), b = (int)(br / R);
    const int64_t od = vofs(ps.dout, b, r, h) + q * ps.dout.row, oo = vofs(ps.out, b, r, h) + q * ps.out.row;
    const int64_t og = gate ? vofs(ps.gate, b, r, h) + q * ps.gate.row : 0;
    const int64_t odg = dgate ? vofs(ps.dgate, b, r, h) + q * ps.dgate.row : 0;
    for (int c = sub * 8; c < D; c += 8 * PREP_LPR) {
      const int64_t off = row * D + c;
      uint4 du = *reinterpret_cast<const uint4 *>(dout + od + c);
      uint4 ou = *reinterpret_cast<const uint4 *>(out + oo + c);
      const uint32_t *dw = reinterpret_cast<const uint32_t *>(&du);
      const uint32_t *ow = reinterpret_cast<const uint32_t *>(&ou);
      uint4 gu = make_uint4(0, 0, 0, 0), eo = gu, gr = gu;
      if (gate) gu = *reinterpret_cast<const uint4 *>(gate + og + c);
      const uint32_t *gw = reinterpret_cast<const uint32_t *>(&gu);
      uint32_t *ew = reinterpret_cast<uint32_t *>(&eo), *rw = reinterpret_cast<uint32_t *>(&gr);
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const float d0 = lo_f(dw[j]), d1 = hi_f(dw[j]), o0 = lo_f(ow[j]), o1 = hi_f(ow[j]);
        acc += d0 * o0 + d1 * o1;
        if (gate) {
          const float s0 = 1.f / (1.f + __expf(-lo_f(gw[j]))), s1 = 1.f / (1.f + __expf(-hi_f(gw[j])));
          ew[j] = pack_bf16x2(d0 * s0, d1 * s1);
          rw[j] = pack_bf16x2(d0 * o0 * (1.f - s0), d1 * o1 * (1.f - s1));
        }
      }
      if (gate) {
        *reinterpret_cast<uint4 *>(dO + off) = eo;
        if (dgate) *reinterpret_cast<uint4 *>(dgate + odg + c) = gr;
      }
    }
  }
  /* the row's lanes are adjacent and all live or all not: a fixed-order sum */
#pragma unroll
  for (int m = 1; m < PREP_LPR; m *= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m);
  if (prow < nrows && sub == 0) {
    ld[brh * 2 * QP + q] = live ? lse_log2(lse[row]) : INFINITY;
    ld[brh * 2 * QP + QP + q] = acc;
  }
}

/* ------------------------------------------------------------------------------------
 * Shared by the backward kernels: s = A·Mᵀ and dp = B·Nᵀ for this warp's 16 rows of A, B
 * (A fragments) and the (64, DP+8) tiles M, N: the S and dP products (dq_kernel,
 * dbias_kernel: A = Q, B = dO, M = K, N = V) or their transposes (dkdv_kernel,
 * fused_kernel: A = K, B = V, M = Q, N = dO). */
template <int DP, bool MMA, class TV = tv_tile<DP>>
__device__ __forceinline__ void s_dp_products(float s[8][4], float dp[8][4],
                                              const uint32_t a[DP / 16][4], const TV &m,
                                              const uint32_t b[DP / 16][4], const TV &n) {
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) s[i][e] = dp[i][e] = 0.f;
  mm_abt_v<DP, MMA>(s, a, m);
  mm_abt_v<DP, MMA>(dp, b, n);
}

/* The backward's per-row inputs of slab brh, written by prep_kernel: lse·log2e at
 * [0, QP) (+inf for a row without a valid key and for the padding rows Q..QP-1, so that
 * P = 0 there) and Di at [QP, 2·QP) (0 in the padding), QP = nqb·BQ. Padded to whole
 * tiles and 16-byte aligned so that a tile's rows are copied by cp.async with the tiles
 * they go with: a plain load there stalled its warp, and the barrier the others
 * (README step 9). */
__device__ __forceinline__ const float *slab_ld(const att_params &p, int64_t brh) {
  return p.ld + brh * 2 * ((int64_t)p.nqb * ATT_BQ);
}

/* Shared by dkdv_kernel, dbias_kernel and fused_kernel: lse·log2e and Di of the query rows
 * q1.. of a tile into stage sn of Ls, Ds (ATT_BQ each), 16-byte cp.async copies by the
 * threads c0 = 0..31 of the loading warpgroup (part of the caller's commit group).
 * ldg: slab_ld() of the slab. */
template <bool MMA>
__device__ __forceinline__ void load_lse_di(float *Ls, float *Ds, int sn, const float *ldg,
                                            int q1, int QP, int c0) {
  static_assert(ATT_BQ == 64, "16 chunks of 4 floats per array and tile");
  if (c0 < 16) cp_async16<MMA>(Ls + sn * ATT_BQ + 4 * c0, ldg + q1 + 4 * c0, true);
  else if (c0 < 32) cp_async16<MMA>(Ds + sn * ATT_BQ + 4 * (c0 - 16), ldg + QP + q1 + 4 * (c0 - 16), true);
}

/* Shared by dkdv_kernel and fused_kernel: the Pᵀ/dSᵀ step of one n-block (this warp's 16
 * keys × 8 queries): s = Sᵀ and dp = dPᵀ (C fragments) become, in place,
 * Pᵀ = exp2((Sᵀ·scale + biasᵀ)·log2e − L) (0 for masked keys) and dSᵀ = Pᵀ ⊙ (dPᵀ − Dv);
 * b2: the two biasᵀ registers (keys g, g+8); L, Dv: lse·log2e and Di of the queries 2t,
 * 2t+1; km0, km1: all ones for a valid key g, g+8, else 0 (key_mask_bits).
 * A masked key's P is the exponential ANDed with its zero mask word: one LOP3 per logit.
 * Written as `kv ? exp2(..) : 0` it compiled to a predicated MUFU behind a zeroing of the
 * destination through a uniform register, two instructions per logit (UMOV, IMAD.U32;
 * dev/cuda/README.md step 37). AND also turns an infinite or NaN exponential of a masked
 * key into +0. */
__device__ __forceinline__ float and_mask(float x, uint32_t m) {
  uint32_t y;
  asm("and.b32 %0, %1, %2;" : "=r"(y) : "r"(__float_as_uint(x)), "r"(m));
  return __uint_as_float(y);
}
__device__ __forceinline__ uint32_t key_mask_bits(bool kv) { return kv ? 0xffffffffu : 0u; }
template <bool MMA>
__device__ __forceinline__ void pt_dst(float s[4], float dp[4], const uint32_t b2[2], float2 L,
                                       float2 Dv, uint32_t km0, uint32_t km1, float scale) {
#pragma unroll
  for (int e = 0; e < 4; e++) {
    const uint32_t w = b2[e >> 1];
    const float bv = (e & 1) ? hi_f(w) : lo_f(w);
    const float pv = and_mask(fast_exp2<MMA>(fmaf(fmaf(s[e], scale, bv), ATT_LOG2E, -((e & 1) ? L.y : L.x))),
                              (e >> 1) ? km1 : km0);
    s[e] = pv;                                        /* Pᵀ */
    dp[e] = pv * (dp[e] - ((e & 1) ? Dv.y : Dv.x)); /* dSᵀ */
  }
}

/* Shared by dkdv_kernel, fused_kernel and fused2_kernel: the K and V A-fragments of this
 * warp's 16 keys of a key tile (tile views ks, vs), whether its keys g and g+8 are valid (Ms, from
 * load_mask), and the dK, dV accumulators zeroed. */
template <int DP, bool MMA, class TV>
__device__ __forceinline__ void key_tile_start_v(uint32_t kf[DP / 16][4], uint32_t vf[DP / 16][4],
                                                 bool &kv0, bool &kv1, float dk[DP / 8][4],
                                                 float dv[DP / 8][4], const TV &ks, const TV &vs,
                                                 const uint8_t *Ms, int warp) {
  const int gq = (threadIdx.x % MF_WARP_SIZE) >> 2;
  load_a_frags_v<DP, MMA>(kf, ks, warp);
  load_a_frags_v<DP, MMA>(vf, vs, warp);
  kv0 = Ms[warp * 16 + gq] != 0;
  kv1 = Ms[warp * 16 + gq + 8] != 0;
#pragma unroll
  for (int i = 0; i < DP / 8; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[i][e] = dv[i][e] = 0.f;
}
/* The same on (64, DP+8) pitch tiles. */
template <int DP, bool MMA>
__device__ __forceinline__ void key_tile_start(uint32_t kf[DP / 16][4], uint32_t vf[DP / 16][4],
                                               bool &kv0, bool &kv1, float dk[DP / 8][4],
                                               float dv[DP / 8][4], const bf16 *Ks,
                                               const bf16 *Vs, const uint8_t *Ms, int warp) {
  key_tile_start_v<DP, MMA>(kf, vf, kv0, kv1, dk, dv, tv_tile<DP>{Ks}, tv_tile<DP>{Vs}, Ms, warp);
}

/* Shared by dkdv_kernel, fused_kernel and fused2_kernel: one query tile's Pᵀ and dSᵀ in
 * place of Sᵀ and dPᵀ (this warp's 16 keys × 64 queries; pt_dst per n-block, the biasᵀ
 * fragments by ldmatrix.trans of the (queries, keys) tile bs, two n-blocks per
 * instruction); ls, ds: the tile's lse·log2e and Di. STORE: dSᵀ also as bf16 into the
 * (keys, queries) tile st (st_pitch or st_sw128), rows of this warp's keys, for the dQ
 * products. */
struct st_pitch { /* rows sp elements apart */
  bf16 *p;
  int sp;
  __device__ __forceinline__ uint32_t *at(int row, int col) const {
    return reinterpret_cast<uint32_t *>(p + row * sp + col);
  }
};
struct st_sw128 { /* 128-byte rows in the 128-byte swizzle (wgmma's MN-major A operand) */
  unsigned char *p;
  __device__ __forceinline__ uint32_t *at(int row, int col) const {
    return reinterpret_cast<uint32_t *>(p + mf_sw128(row, col));
  }
};
/* The Pᵀ/dSᵀ step of this warp's (16 keys, 64 queries) tile (pt_dst per n-block); STORE:
 * dSᵀ also into st in bf16, and where dsa is given, the same packed pairs into it in
 * A-fragment order (dsa[j] is pack_a_frag(·, dp, j)), so that a caller feeding dSᵀ to a
 * wgmma from registers does not convert it twice (the conversions are inline asm, which
 * the compiler did not merge: 16 F2FP per tile; dev/cuda/README.md step 37). */
template <bool MMA, bool STORE, class TV = tv_bias, class SV = st_pitch>
__device__ __forceinline__ void pt_dst_tile(float s[8][4], float dp[8][4], const TV &bs,
                                            const float *ls, const float *ds, bool kv0, bool kv1,
                                            float scale, const SV &st, int warp,
                                            uint32_t (*dsa)[4] = nullptr) {
  const int lane = threadIdx.x % MF_WARP_SIZE, gq = lane >> 2, t = lane & 3;
  const uint32_t km0 = key_mask_bits(kv0), km1 = key_mask_bits(kv1);
#pragma unroll
  for (int nb = 0; nb < 8; nb += 2) {
    uint32_t bb[4];
    ldsm_x4<MMA, true>(bb, bs.ptr((nb + lane / 16) * 8 + lane % 8, warp * 2 + (lane / 8) % 2));
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const int n = nb + hh, qc = n * 8 + 2 * t;
      pt_dst<MMA>(s[n], dp[n], bb + 2 * hh, *reinterpret_cast<const float2 *>(ls + qc),
                  *reinterpret_cast<const float2 *>(ds + qc), km0, km1, scale);
      if constexpr (STORE) { /* dSᵀ rows (keys) g, g+8 of this warp, queries qc, qc+1 */
        const uint32_t lo = pack_bf16x2(dp[n][0], dp[n][1]), hi = pack_bf16x2(dp[n][2], dp[n][3]);
        *st.at(warp * 16 + gq, qc) = lo;
        *st.at(warp * 16 + gq + 8, qc) = hi;
        if (dsa) {
          dsa[n / 2][2 * (n % 2)] = lo;
          dsa[n / 2][2 * (n % 2) + 1] = hi;
        }
      }
    }
  }
}

/* ------------------------------------------------------------------------------------
 * dK, dV. Grid: B·H·⌈nkb/GK⌉·⌈R/GR⌉ CTAs (r fastest); each warp owns 16 keys of its
 * warpgroup's key tile and computes the transposed products Sᵀ (16 keys, 64 queries) per
 * query tile. The GR warpgroups of different r share the bias tile, the GK of different
 * key tiles share Q, dO, lse, Di. dk, dv (B,R,H,K,D). */
template <int DP, bool MMA, int GR, int GK>
__global__ void __launch_bounds__(ATT_THREADS * GR * GK, minb_dkdv(MMA, DP, GR * GK)) dkdv_kernel(att_params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int G = GR * GK, TP = DP + 8, TILE = 64 * TP, BT = ATT_BQ * ATT_BP;
  const int wg = G == 1 ? 0 : threadIdx.x / ATT_THREADS, jr = wg % GR, jk = wg / GR;
  bf16 *s0 = reinterpret_cast<bf16 *>(smem);
  bf16 *Ks = s0 + wg * TILE;                       /* [G][TILE] */
  bf16 *Vs = s0 + (G + wg) * TILE;                 /* [G][TILE] */
  bf16 *Qs = s0 + 2 * G * TILE + jr * 2 * TILE;    /* [GR][2][TILE] */
  bf16 *dOs = Qs + GR * 2 * TILE;                  /* [GR][2][TILE] */
  bf16 *Bs = s0 + (2 * G + 4 * GR) * TILE + jk * 2 * BT;              /* [GK][2][BT] */
  float *Ls = reinterpret_cast<float *>(s0 + (2 * G + 4 * GR) * TILE + GK * 2 * BT) +
              jr * 2 * ATT_BQ;                                         /* [GR][2][BQ] lse·log2e */
  float *Ds = Ls + GR * 2 * ATT_BQ;                                    /* [GR][2][BQ] Di */
  uint8_t *Ms = reinterpret_cast<uint8_t *>(Ls - jr * 2 * ATT_BQ + GR * 4 * ATT_BQ) +
                wg * ATT_MS;                                           /* [G][ATT_MS] */

  int64_t idx = blockIdx.x;
  const int nrg = (p.R + GR - 1) / GR, nkg = (p.nkb + GK - 1) / GK;
  const int rr = (int)(idx % nrg) * GR + jr; idx /= nrg;
  const int kb = (int)(idx % nkg) * GK + jk; idx /= nkg;
  const int h = (int)(idx % p.H);
  const int b = (int)(idx / p.H);
  const bool act = rr < p.R; /* a warpgroup past the last row redoes row R-1, stores nothing */
  const int r = act ? rr : p.R - 1;
  const bool ldq = jk == 0, ldb = jr == 0; /* who loads the shared tiles */
  const int Q = p.Q, K = p.K, D = p.D, k0 = kb * ATT_BK;
  const int64_t brh = ((int64_t)b * p.R + r) * p.H + h;
  const int stq = (int)p.sq.row, sto = (int)p.sdO.row, stk = (int)p.sk.row, stv = (int)p.sv.row;
  const bf16 *qg = p.q + vofs(p.sq, b, r, h), *dog = p.dO + vofs(p.sdO, b, r, h);
  const bf16 *kg = p.k + vofs(p.sk, b, r, h) + (int64_t)k0 * stk;
  const bf16 *vg = p.v + vofs(p.sv, b, r, h) + (int64_t)k0 * stv;
  const bf16 *bg = p.bias ? p.bias + ((int64_t)b * p.H + h) * Q * p.bl + k0 : NULL;
  const uint8_t *mg = p.mask ? p.mask + ((int64_t)b * p.R + r) * K : NULL;
  const float *ldg = slab_ld(p, brh);
  const int warp = threadIdx.x / MF_WARP_SIZE % ATT_WARPS;
  const row_plan<DP> rp(D);
  const bias_plan bp(p.bl);
  const int nqb = p.nqb;

  auto prefetch = [&](int it, int sn) {
    const int q1 = it * ATT_BQ;
    if (ldq) {
      rp.template load<MMA>(Qs + sn * TILE, qg + (int64_t)q1 * stq, Q - q1, stq);
      rp.template load<MMA>(dOs + sn * TILE, dog + (int64_t)q1 * sto, Q - q1, sto);
      load_lse_di<MMA>(Ls, Ds, sn, ldg, q1, nqb * ATT_BQ, threadIdx.x % ATT_THREADS);
    }
    if (ldb) bp.template load<MMA>(Bs + sn * BT, bg ? bg + (int64_t)q1 * p.bl : NULL, Q - q1, K - k0);
  };

  rp.template load<MMA>(Ks, kg, K - k0, stk);
  rp.template load<MMA>(Vs, vg, K - k0, stv);
  load_mask(Ms, mg, k0, K);
  prefetch(0, 0);
  cp_async_commit<MMA>();
  cp_async_wait<MMA, 0>();
  __syncthreads();
  uint32_t kf[DP / 16][4], vf[DP / 16][4];
  bool kv0, kv1;
  float dk[DP / 8][4], dv[DP / 8][4];
  key_tile_start<DP, MMA>(kf, vf, kv0, kv1, dk, dv, Ks, Vs, Ms, warp);

  for (int it = 0; it < nqb; it++) {
    const int st = it & 1;
    if (it + 1 < nqb) prefetch(it + 1, st ^ 1);
    cp_async_commit<MMA>();
    cp_async_wait<MMA, 1>();
    __syncthreads();
    const bf16 *qs = Qs + st * TILE, *dos = dOs + st * TILE, *bs = Bs + st * ATT_BQ * ATT_BP;
    const float *ls = Ls + st * ATT_BQ, *ds = Ds + st * ATT_BQ;

    float s[8][4], dp[8][4];
    s_dp_products<DP, MMA>(s, dp, kf, tv_tile<DP>{qs}, vf, tv_tile<DP>{dos}); /* Sᵀ = K·Qᵀ (16 keys, 64 queries), dPᵀ = V·dOᵀ */
    pt_dst_tile<MMA, false>(s, dp, tv_bias{bs}, ls, ds, kv0, kv1, p.scale, st_pitch{NULL, 0}, warp);
    mm_pm<DP, MMA>(dv, s, dos);  /* dV += Pᵀ·dO */
    mm_pm<DP, MMA>(dk, dp, qs);  /* dK += dSᵀ·Q */
    __syncthreads();
  }
  if (act && p.dk) store_rows<DP>(p.dk + vofs(p.sdk, b, r, h), dk, k0 + warp * 16, K, D, p.sdk.row, p.scale);
  if (act && p.dv) store_rows<DP>(p.dv + vofs(p.sdv, b, r, h), dv, k0 + warp * 16, K, D, p.sdv.row, 1.f);
}

/* ------------------------------------------------------------------------------------
 * Shared by dq_kernel and dbias_kernel: for this warp's 16 queries and a 64-key tile,
 * ds = dS = P ⊙ (dP − Di) with P = exp(S − lse) (0 for masked keys and padded rows);
 * s gets P. lse0/lse1 in the exp2 domain (+inf for rows that must give P = 0). */
template <bool MMA, class TV = tv_bias>
__device__ __forceinline__ void make_ds(float s[8][4], float dp[8][4], const TV &bs,
                                        const uint8_t *ms, float lse0, float lse1, float di0,
                                        float di1, float scale, int warp, bool raw = false) {
  float mx0 = 0.f, mx1 = 0.f; /* unused */
  if (raw ? raw_all_valid(ms) : all_valid(ms)) logits<false, MMA>(s, bs, ms, scale, warp, mx0, mx1);
  else logits<true, MMA>(s, bs, ms, scale, warp, mx0, mx1);
#pragma unroll
  for (int nb = 0; nb < 8; nb++) {
    s[nb][0] = fast_exp2<MMA>(fmaf(s[nb][0], ATT_LOG2E, -lse0));
    s[nb][1] = fast_exp2<MMA>(fmaf(s[nb][1], ATT_LOG2E, -lse0));
    s[nb][2] = fast_exp2<MMA>(fmaf(s[nb][2], ATT_LOG2E, -lse1));
    s[nb][3] = fast_exp2<MMA>(fmaf(s[nb][3], ATT_LOG2E, -lse1));
    dp[nb][0] = s[nb][0] * (dp[nb][0] - di0);
    dp[nb][1] = s[nb][1] * (dp[nb][1] - di0);
    dp[nb][2] = s[nb][2] * (dp[nb][2] - di1);
    dp[nb][3] = s[nb][3] * (dp[nb][3] - di1);
  }
}

/* dQ (and dbias = dS when R = 1). Grid: B·H·⌈nqb/GQ⌉·⌈R/GR⌉ CTAs (r fastest); the
 * warpgroups share tiles as in the forward. dq (B,R,H,Q,D). */
template <int DP, bool MMA, bool DBIAS, int GR, int GQ>
__global__ void __launch_bounds__(ATT_THREADS * GR * GQ, minb_bwd(MMA, DP, GR * GQ)) dq_kernel(att_params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int G = GR * GQ, TP = DP + 8, TILE = 64 * TP, BT = ATT_BQ * ATT_BP;
  const int wg = G == 1 ? 0 : threadIdx.x / ATT_THREADS, jr = wg % GR, jq = wg / GR;
  bf16 *s0 = reinterpret_cast<bf16 *>(smem);
  bf16 *Qs = s0 + wg * TILE;                                 /* [G][TILE] */
  bf16 *dOs = s0 + (G + wg) * TILE;                          /* [G][TILE] */
  bf16 *Ks = s0 + 2 * G * TILE + jr * 2 * TILE;              /* [GR][2][TILE] */
  bf16 *Vs = Ks + GR * 2 * TILE;                             /* [GR][2][TILE] */
  bf16 *Bs = s0 + (2 * G + 4 * GR) * TILE + jq * 2 * BT;     /* [GQ][2][BT] */
  uint8_t *Ms = reinterpret_cast<uint8_t *>(s0 + (2 * G + 4 * GR) * TILE + GQ * 2 * BT) +
                jr * 2 * ATT_MS;                             /* [GR][2][ATT_MS] */

  int64_t idx = blockIdx.x;
  const int nrg = (p.R + GR - 1) / GR, nqg = (p.nqb + GQ - 1) / GQ;
  const int rr = (int)(idx % nrg) * GR + jr; idx /= nrg;
  const int qb = (int)(idx % nqg) * GQ + jq; idx /= nqg;
  const int h = (int)(idx % p.H);
  const int b = (int)(idx / p.H);
  const bool act = rr < p.R; /* a warpgroup past the last row redoes row R-1, stores nothing */
  const int r = act ? rr : p.R - 1;
  const bool ldkv = jq == 0, ldb = jr == 0; /* who loads the shared tiles */
  const int Q = p.Q, K = p.K, D = p.D, q0 = qb * ATT_BQ;
  const int64_t brh = ((int64_t)b * p.R + r) * p.H + h;
  const int stq = (int)p.sq.row, sto = (int)p.sdO.row, stk = (int)p.sk.row, stv = (int)p.sv.row;
  const bf16 *qg = p.q + vofs(p.sq, b, r, h) + (int64_t)q0 * stq;
  const bf16 *dog = p.dO + vofs(p.sdO, b, r, h) + (int64_t)q0 * sto;
  const bf16 *kg = p.k + vofs(p.sk, b, r, h), *vg = p.v + vofs(p.sv, b, r, h);
  const bf16 *bg = p.bias ? p.bias + (((int64_t)b * p.H + h) * Q + q0) * p.bl : NULL;
  const uint8_t *mg = p.mask ? p.mask + ((int64_t)b * p.R + r) * K : NULL;
  const int warp = threadIdx.x / MF_WARP_SIZE % ATT_WARPS, lane = threadIdx.x % MF_WARP_SIZE;
  const row_plan<DP> rp(D);
  const bias_plan bp(p.bl);
  const int gq = lane >> 2, t = lane & 3;
  const int nkb = p.nkb;
  const int row0 = q0 + warp * 16 + gq, row1 = row0 + 8;
  const float *ldg = slab_ld(p, brh); /* rows up to QP exist (padding: lse +inf, Di 0) */
  const float lse0 = ldg[row0], lse1 = ldg[row1];
  const float di0 = ldg[p.nqb * ATT_BQ + row0], di1 = ldg[p.nqb * ATT_BQ + row1];

  rp.template load<MMA>(Qs, qg, Q - q0, stq);
  rp.template load<MMA>(dOs, dog, Q - q0, sto);
  if (ldkv) {
    rp.template load<MMA>(Ks, kg, K, stk);
    rp.template load<MMA>(Vs, vg, K, stv);
    load_mask(Ms, mg, 0, K);
  }
  if (ldb) bp.template load<MMA>(Bs, bg, Q - q0, K);
  cp_async_commit<MMA>();
  cp_async_wait<MMA, 0>();
  __syncthreads();
  uint32_t qf[DP / 16][4], dof[DP / 16][4];
  load_a_frags<DP, MMA>(qf, Qs, warp);
  load_a_frags<DP, MMA>(dof, dOs, warp);

  float dq[DP / 8][4];
#pragma unroll
  for (int i = 0; i < DP / 8; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;

  for (int it = 0; it < nkb; it++) {
    const int st = it & 1;
    if (it + 1 < nkb) {
      const int k1 = (it + 1) * ATT_BK, sn = st ^ 1;
      if (ldkv) {
        rp.template load<MMA>(Ks + sn * TILE, kg + (int64_t)k1 * stk, K - k1, stk);
        rp.template load<MMA>(Vs + sn * TILE, vg + (int64_t)k1 * stv, K - k1, stv);
        load_mask(Ms + sn * ATT_MS, mg, k1, K);
      }
      if (ldb) bp.template load<MMA>(Bs + sn * BT, bg ? bg + k1 : NULL, Q - q0, K - k1);
    }
    cp_async_commit<MMA>();
    cp_async_wait<MMA, 1>();
    __syncthreads();
    const bf16 *ks = Ks + st * TILE, *vs = Vs + st * TILE, *bs = Bs + st * BT;
    const uint8_t *ms = Ms + st * ATT_MS;

    float s[8][4], dp[8][4];
    s_dp_products<DP, MMA>(s, dp, qf, tv_tile<DP>{ks}, dof, tv_tile<DP>{vs}); /* S = Q·Kᵀ, dP = dO·Vᵀ */
    make_ds<MMA>(s, dp, tv_bias{bs}, ms, lse0, lse1, di0, di1, p.scale, warp);
    if (DBIAS && act) { /* R = 1: dbias = dS, each element written once */
      bf16 *db = p.dbias + ((int64_t)b * p.H + h) * Q * p.bl;
      const int kbase = it * ATT_BK;
#pragma unroll
      for (int nb = 0; nb < 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int row = (e >> 1) ? row1 : row0, col = kbase + nb * 8 + 2 * t + (e & 1);
          if (row < Q && col < K) db[(int64_t)row * p.bl + col] = mf_f32_to_bf16(dp[nb][e]);
        }
    }
    mm_pm<DP, MMA>(dq, dp, ks); /* dQ += dS·K */
    __syncthreads();
  }
  if (act) store_rows<DP>(p.dq + vofs(p.sdq, b, r, h), dq, q0 + warp * 16, Q, D, p.sdq.row, p.scale);
}

/* A dbias pass's (query tile q0, key tile k0) of (b, h), this warp's 16 rows (C-fragment
 * layout): bf16 into dbias, or fp32 into range sp's partial sums when the pass is split. */
__device__ __forceinline__ void dbias_store(const att_params &p, const float acc[8][4], int sp, int b,
                                           int h, int q0, int k0, int warp) {
  const int lane = threadIdx.x % MF_WARP_SIZE, gq = lane >> 2, t = lane & 3, Q = p.Q, K = p.K;
  const int64_t bh = (int64_t)b * p.H + h;
  bf16 *db = p.dbias + bh * Q * p.bl;
  float *dbp = p.rs > 1 ? p.dbp + ((int64_t)sp * p.B * p.H + bh) * Q * K : NULL;
#pragma unroll
  for (int nb = 0; nb < 8; nb++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int row = q0 + warp * 16 + gq + (e >> 1) * 8, col = k0 + nb * 8 + 2 * t + (e & 1);
      if (row < Q && col < K) {
        if (dbp) dbp[(int64_t)row * K + col] = acc[nb][e];
        else db[(int64_t)row * p.bl + col] = mf_f32_to_bf16(acc[nb][e]);
      }
    }
}

/* dbias = Σ_r dS. Grid: rs·B·H·⌈nqb/GQ⌉·⌈nkb/GK⌉ CTAs; each warpgroup owns one (query
 * tile, key tile) of one (b, h) and walks its range of rows r in order, accumulating in
 * fp32 registers (rs = 1: all rows, dbias written here; rs > 1: fp32 partial sums, summed
 * in range order by dbias_reduce_kernel — more CTAs when the grid is short of full waves);
 * the GQ warpgroups of different query tiles share K, V and the mask, the GK of different
 * key tiles share Q, dO, lse, Di. dbias (B,H,Q,K). */
template <int DP, bool MMA, int GQ, int GK>
__global__ void __launch_bounds__(ATT_THREADS * GQ * GK, minb_bwd(MMA, DP, GQ * GK)) dbias_kernel(att_params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int G = GQ * GK, TP = DP + 8, TILE = 64 * TP, BT = ATT_BQ * ATT_BP;
  const int wg = G == 1 ? 0 : threadIdx.x / ATT_THREADS, jq = wg % GQ, jk = wg / GQ;
  bf16 *s0 = reinterpret_cast<bf16 *>(smem);
  bf16 *Qs = s0 + jq * 2 * TILE;                    /* [GQ][2][TILE] */
  bf16 *dOs = Qs + GQ * 2 * TILE;                   /* [GQ][2][TILE] */
  bf16 *Ks = s0 + 4 * GQ * TILE + jk * 2 * TILE;    /* [GK][2][TILE] */
  bf16 *Vs = Ks + GK * 2 * TILE;                    /* [GK][2][TILE] */
  bf16 *Bs = s0 + 4 * (GQ + GK) * TILE + wg * BT;   /* [G][BT] */
  float *L0 = reinterpret_cast<float *>(s0 + 4 * (GQ + GK) * TILE + G * BT);
  float *Ls = L0 + jq * 2 * ATT_BQ;                 /* [GQ][2][BQ] */
  float *Ds = Ls + GQ * 2 * ATT_BQ;                 /* [GQ][2][BQ] */
  uint8_t *Ms = reinterpret_cast<uint8_t *>(L0 + GQ * 4 * ATT_BQ) + jk * 2 * ATT_MS; /* [GK][2][ATT_MS] */

  int64_t idx = blockIdx.x;
  const int nkg = (p.nkb + GK - 1) / GK, nqg = (p.nqb + GQ - 1) / GQ;
  const int64_t per = (int64_t)p.B * p.H * nqg * nkg; /* CTAs per range of rows */
  const int sp = (int)(idx / per); idx %= per;
  const int kb = (int)(idx % nkg) * GK + jk; idx /= nkg;
  const int qb = (int)(idx % nqg) * GQ + jq; idx /= nqg;
  const int h = (int)(idx % p.H);
  const int b = (int)(idx / p.H);
  const bool ldq = jk == 0, ldkv = jq == 0; /* who loads the shared tiles */
  const int Q = p.Q, K = p.K, D = p.D, q0 = qb * ATT_BQ, k0 = kb * ATT_BK, R = p.R;
  const bf16 *bg = p.bias ? p.bias + (((int64_t)b * p.H + h) * Q + q0) * p.bl + k0 : NULL;
  const int warp = threadIdx.x / MF_WARP_SIZE % ATT_WARPS, lane = threadIdx.x % MF_WARP_SIZE;
  const row_plan<DP> rp(D);
  const bias_plan bp(p.bl);
  const int gq = lane >> 2;

  const int stq = (int)p.sq.row, sto = (int)p.sdO.row, stk = (int)p.sk.row, stv = (int)p.sv.row;
  /* row r's mask bytes of this key tile (mask_fetch), fetched a row ahead in the loop */
  auto mfetch = [&](int r) {
    return mask_fetch(p.mask ? p.mask + ((int64_t)b * R + r) * K : NULL, k0, K);
  };
  auto prefetch = [&](int r, int sn, uint32_t m) {
    const int64_t brh = ((int64_t)b * R + r) * p.H + h;
    if (ldq) {
      rp.template load<MMA>(Qs + sn * TILE, p.q + vofs(p.sq, b, r, h) + (int64_t)q0 * stq, Q - q0, stq);
      rp.template load<MMA>(dOs + sn * TILE, p.dO + vofs(p.sdO, b, r, h) + (int64_t)q0 * sto, Q - q0, sto);
      load_lse_di<MMA>(Ls, Ds, sn, slab_ld(p, brh), q0, p.nqb * ATT_BQ, threadIdx.x % ATT_THREADS);
    }
    if (ldkv) {
      rp.template load<MMA>(Ks + sn * TILE, p.k + vofs(p.sk, b, r, h) + (int64_t)k0 * stk, K - k0, stk);
      rp.template load<MMA>(Vs + sn * TILE, p.v + vofs(p.sv, b, r, h) + (int64_t)k0 * stv, K - k0, stv);
      mask_put(Ms + sn * ATT_MS, m);
    }
  };

  /* rows [rb, re) of range sp (all rows when rs = 1), in order */
  const int rb = (int)((int64_t)sp * R / p.rs), re = (int)((int64_t)(sp + 1) * R / p.rs);
  bp.template load<MMA>(Bs, bg, Q - q0, K - k0);
  if (rb < re) prefetch(rb, 0, ldkv ? mfetch(rb) : 0u);
  uint32_t mnext = ldkv && rb + 1 < re ? mfetch(rb + 1) : 0u;
  cp_async_commit<MMA>();
  float acc[8][4];
#pragma unroll
  for (int i = 0; i < 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

  for (int r = rb; r < re; r++) {
    const int st = (r - rb) & 1;
    if (r + 1 < re) {
      prefetch(r + 1, st ^ 1, mnext);
      if (ldkv && r + 2 < re) mnext = mfetch(r + 2);
    }
    cp_async_commit<MMA>();
    cp_async_wait<MMA, 1>();
    __syncthreads();
    const bf16 *qs = Qs + st * TILE, *dos = dOs + st * TILE;
    uint32_t qf[DP / 16][4], dof[DP / 16][4];
    load_a_frags<DP, MMA>(qf, qs, warp);
    load_a_frags<DP, MMA>(dof, dos, warp);
    const int rl0 = warp * 16 + gq, rl1 = rl0 + 8;
    const float *ls = Ls + st * ATT_BQ, *ds = Ds + st * ATT_BQ;
    float s[8][4], dp[8][4];
    s_dp_products<DP, MMA>(s, dp, qf, tv_tile<DP>{Ks + st * TILE}, dof, tv_tile<DP>{Vs + st * TILE});
    make_ds<MMA>(s, dp, tv_bias{Bs}, Ms + st * ATT_MS, ls[rl0], ls[rl1], ds[rl0], ds[rl1], p.scale, warp);
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][e] += dp[i][e];
    __syncthreads();
  }
  dbias_store(p, acc, sp, b, h, q0, k0, warp);
}

/* ------------------------------------------------------------------------------------
 * dbias_kernel<32, true, 1, 1> with TMA copies (dbias_tma_kernel; the default where D = 32
 * and the views allow, README step 13): per row r one thread issues the Q, dO, K, V boxes
 * (64-byte swizzle) and the lse·log2e and Di rows (bulk copies) of the next row onto the
 * stage's transaction barrier; the bias tile, loaded once, stays in the cp.async layout.
 * Same arithmetic and order as dbias_kernel: bit-identical dbias. Stage: Q | dO | K | V
 * (4 KB each) | lse·log2e | Di (256 B each). */
/* KQ = 2 (dbias_tma_kernel<true, 2>, README step 16): two query tiles per CTA share each
 * row's K, V boxes and mask (3 bytes of L2 per logit instead of 4); a missing second tile
 * is skipped. Stage: Q_0..Q_{KQ-1} | dO_0.. | K | V | lse·log2e_0.. | Di_0.. */
#define TD_STAGE_K(KQ) ((KQ) == 1 ? 17408 : 25600) /* (2·KQ + 2)·4096 + KQ·512, rounded up to 1 KB */
#define TD_SMEM_K(KQ) (2 * TD_STAGE_K(KQ) + (KQ) * ATT_BQ * ATT_BP * 2 + 2 * ATT_MS_TMA + 4 * 8 + 1024)
#define TD_STAGE TD_STAGE_K(1)
#define TD_SMEM TD_SMEM_K(1)

template <bool WG, int KQ = 1>
__global__ void __launch_bounds__(ATT_THREADS, KQ == 1 ? 4 : 3) dbias_tma_kernel(att_params p, const __grid_constant__ att_tmaps tm) {
  static_assert(KQ == 1 || WG, "query-tile pairs only on wgmma");
  constexpr uint32_t STG = TD_STAGE_K(KQ), LS = (2 * KQ + 2) * TMA_KV; /* the stage size; lse's offset */
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = mf_smem_u32(smem_raw), base = (raw + 1023u) & ~1023u;
  unsigned char *sb = smem_raw + (base - raw);
  bf16 *Bs = reinterpret_cast<bf16 *>(sb + 2 * STG); /* [KQ][BQ][BP] */
  uint8_t *Ms = sb + 2 * STG + KQ * ATT_BQ * ATT_BP * 2; /* [2][ATT_MS_TMA] (128-byte aligned) */
  const uint32_t msa = base + 2 * STG + KQ * ATT_BQ * ATT_BP * 2; /* Ms's shared address */
  /* barriers full[2], empty[2]: as in fwd_tma_kernel (warp 0 refills a stage once all
   * 128 threads have arrived on its empty barrier; no CTA-wide barrier per row) */
  const uint32_t bar = (msa + 2 * ATT_MS_TMA + 7u) & ~7u, empty = bar + 16;
  const uint64_t dt0 = mf_wg_desc_sw64(base, 16, 512); /* stage 0's boxes, K-major (WG; wg_pm_desc) */

  int64_t idx = blockIdx.x;
  const int nqp = (p.nqb + KQ - 1) / KQ;                 /* groups of KQ query tiles */
  const int64_t per = (int64_t)p.B * p.H * nqp * p.nkb; /* CTAs per range of rows */
  const int sp = (int)(idx / per);
  idx %= per;
  const int kb = (int)(idx % p.nkb); idx /= p.nkb;
  const int qb = (int)(idx % nqp) * KQ; idx /= nqp;
  const int h = (int)(idx % p.H), b = (int)(idx / p.H);
  const int nq = min(KQ, p.nqb - qb); /* this CTA's query tiles */
  const int Q = p.Q, K = p.K, q0 = qb * ATT_BQ, k0 = kb * ATT_BK, R = p.R, tid = threadIdx.x;
  const int warp = tid / MF_WARP_SIZE, lane = tid % MF_WARP_SIZE, gq = lane >> 2;
  const bias_plan bp(p.bl);
  auto mfetch = [&](int r) {
    return mask_fetch_w(p.mask ? p.mask + ((int64_t)b * R + r) * K : NULL, k0, K);
  };
  const bool mtma = p.mask != NULL && p.mtma; /* row r's mask bytes come with its copies */
  auto issue = [&](int r, int s) { /* thread 0: stage s ← row r's tiles */
    const uint32_t dst = base + s * STG, fb = bar + 8 * s;
    const float *ldg = slab_ld(p, ((int64_t)b * R + r) * p.H + h);
    const uint32_t mtx = mtma ? ATT_BK : 0u;
    if (mtma) mf_tma_load_2d(msa + s * ATT_MS_TMA, &tm.mask, k0, b * R + r, fb);
    if constexpr (KQ == 2) { /* both query tiles in one 128-row box each (rows past Q come as
                              * zeros), lse and Di in one copy each (README step 19) */
      mf_mbar_expect_tx(fb, 6 * TMA_KV + nq * 2 * ATT_BQ * 4 + mtx);
      tma_view(dst, &tm.q2, q0, h, r, b, fb);
      tma_view(dst + 2 * TMA_KV, &tm.dO2, q0, h, r, b, fb);
      mf_bulk_load(dst + LS, ldg + q0, nq * ATT_BQ * 4, fb);
      mf_bulk_load(dst + LS + KQ * ATT_BQ * 4, ldg + p.nqb * ATT_BQ + q0, nq * ATT_BQ * 4, fb);
    } else {
      mf_mbar_expect_tx(fb, 4 * TMA_KV + 2 * ATT_BQ * 4 + mtx);
      tma_view(dst, &tm.q, q0, h, r, b, fb);
      tma_view(dst + TMA_KV, &tm.dO, q0, h, r, b, fb);
      mf_bulk_load(dst + LS, ldg + q0, ATT_BQ * 4, fb);
      mf_bulk_load(dst + LS + ATT_BQ * 4, ldg + p.nqb * ATT_BQ + q0, ATT_BQ * 4, fb);
    }
    tma_view(dst + 2 * KQ * TMA_KV, &tm.k, k0, h, r, b, fb);
    tma_view(dst + (2 * KQ + 1) * TMA_KV, &tm.v, k0, h, r, b, fb);
  };

  /* rows [rb, re) of range sp (all rows when rs = 1), in order */
  const int rb = (int)((int64_t)sp * R / p.rs), re = (int)((int64_t)(sp + 1) * R / p.rs);
  /* no mask (mconst): every row's mask flags are the key tile's, written once into both
   * stages, and only the issuing lane arrives on a full barrier (README step 19); a mask
   * the map covers (mtma): the row's mask bytes are one more copy of the stage, and again
   * only the issuing lane arrives (step 20) */
  const bool mconst = p.mask == NULL, mfast = mconst || mtma;
  if (tid == 0) {
    const int nfull = mfast ? 1 : MF_WARP_SIZE; /* warp 0's lanes (one with the copies' bytes) */
    mf_mbar_init(bar, nfull);
    mf_mbar_init(bar + 8, nfull);
    mf_mbar_init(empty, ATT_THREADS); /* every thread, after its last read of the stage */
    mf_mbar_init(empty + 8, ATT_THREADS);
    mf_mbar_init_fence();
  }
  for (int t = 0; t < nq; t++)
    bp.template load<true>(Bs + t * ATT_BQ * ATT_BP,
                           p.bias ? p.bias + (((int64_t)b * p.H + h) * Q + q0 + t * ATT_BQ) * p.bl + k0 : NULL,
                           Q - q0 - t * ATT_BQ, K - k0);
  cp_async_commit<true>();
  if (mconst && warp == 0) {
    const uint32_t m = mfetch(0);
    mask_put_w(Ms, m);
    mask_put_w(Ms + ATT_MS_TMA, m);
  }
  __syncthreads(); /* the barriers (and the fast path's mask flags) */
  uint32_t mnext = 0; /* warp 0: the next row's mask bits */
  if (warp == 0) {
    if (!mfast) {
      if (rb < re) mask_put_w(Ms, mfetch(rb));
      if (rb + 1 < re) mnext = mfetch(rb + 1);
    }
    if (lane == 0 && rb < re) issue(rb, 0);
    else if (rb < re && !mfast) mf_mbar_arrive(bar); /* this lane's mask bytes of stage 0 */
  }
  cp_async_wait<true, 0>();
  __syncthreads(); /* the bias tile */
  float acc[KQ][8][4];
#pragma unroll
  for (int t = 0; t < KQ; t++)
#pragma unroll
    for (int i = 0; i < 8; i++) acc[t][i][0] = acc[t][i][1] = acc[t][i][2] = acc[t][i][3] = 0.f;
  const int rl0 = warp * 16 + gq, rl1 = rl0 + 8;
  for (int r = rb; r < re; r++) {
    const int st = (r - rb) & 1;
    if (r + 1 < re && warp == 0) { /* stage st^1 ← row r + 1, once row r − 1 is done everywhere */
      if (mfast) {
        if (lane == 0) {
          if (r > rb) mf_mbar_wait(empty + 8 * (st ^ 1), (uint32_t)((r - rb - 1) >> 1) & 1u);
          issue(r + 1, st ^ 1);
        }
        __syncwarp();
      } else {
        if (r > rb) mf_mbar_wait(empty + 8 * (st ^ 1), (uint32_t)((r - rb - 1) >> 1) & 1u);
        mask_put_w(Ms + (st ^ 1) * ATT_MS_TMA, mnext);
        if (r + 2 < re) mnext = mfetch(r + 2);
        if (lane == 0) issue(r + 1, st ^ 1);
        else mf_mbar_arrive(bar + 8 * (st ^ 1)); /* this lane's mask bytes */
      }
    }
    mf_mbar_wait(bar + 8 * st, (uint32_t)((r - rb) >> 1) & 1u);
#pragma unroll
    for (int t = 0; t < KQ; t++) { /* query tile qb + t */
      if (t > 0 && t >= nq) break;
      const bf16 *t0 = reinterpret_cast<const bf16 *>(sb + st * STG); /* Q, dO, K, V (KQ = 1) */
      const float *ls = reinterpret_cast<const float *>(sb + st * STG + LS) + t * ATT_BQ, *ds = ls + KQ * ATT_BQ;
      float s[8][4], dp[8][4];
      if constexpr (WG) { /* S = Q·Kᵀ, dP = dO·Vᵀ: four wgmma, every operand a K-major TMA box */
        const uint64_t dt = dt0 + (uint64_t)(st * (STG / 16)); /* this stage's first box (address / 16) */
        float(&s32)[32] = reinterpret_cast<float(&)[32]>(s);
        float(&dp32)[32] = reinterpret_cast<float(&)[32]>(dp);
        mf_wg_fence();
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
          mf_wg_ss_n64<0>(s32, dt + (uint64_t)((t * TMA_KV + 32 * kk) / 16),
                          dt + (uint64_t)((2 * KQ * TMA_KV + 32 * kk) / 16), kk);
          mf_wg_ss_n64<0>(dp32, dt + (uint64_t)(((KQ + t) * TMA_KV + 32 * kk) / 16),
                          dt + (uint64_t)(((2 * KQ + 1) * TMA_KV + 32 * kk) / 16), kk);
        }
        mf_wg_commit();
        mf_wg_wait<0>();
        mf_wg_pin(s32);
        mf_wg_pin(dp32);
      } else {
        uint32_t qf[2][4], dof[2][4];
        load_a_frags_v<32, true>(qf, tv_sw64{t0}, warp);
        load_a_frags_v<32, true>(dof, tv_sw64{t0 + TMA_KV / 2}, warp);
        s_dp_products<32, true>(s, dp, qf, tv_sw64{t0 + TMA_KV}, dof, tv_sw64{t0 + 3 * TMA_KV / 2});
      }
      make_ds<true>(s, dp, tv_bias{Bs + t * ATT_BQ * ATT_BP}, Ms + st * ATT_MS_TMA, ls[rl0], ls[rl1], ds[rl0],
                    ds[rl1], p.scale, warp, mtma);
#pragma unroll
      for (int i = 0; i < 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[t][i][e] += dp[i][e];
    }
    mf_mbar_arrive(empty + 8 * st); /* this thread is done with the stage */
  }
#pragma unroll
  for (int t = 0; t < KQ; t++)
    if (t < nq) dbias_store(p, acc[t], sp, b, h, q0 + t * ATT_BQ, k0, warp);
}

/* ------------------------------------------------------------------------------------
 * The dbias pass on Hopper's warpgroup MMA (sm_90a; D = DP = 32; README step 12): one
 * warpgroup per CTA, the same (range, b, h, query tile, key tile) decomposition, row walk,
 * loads and elementwise step (make_ds) as dbias_kernel<32, true, 1, 1>, but S = Q·Kᵀ and
 * dP = dO·Vᵀ are four wgmma m64n64k16 with both operands in shared memory instead of 32
 * mma.sync fed by ldmatrix per warp: the tensor core reads the tiles itself, the warps
 * issue 4 instructions per row r, and the accumulators land in the m16n8 C-fragment
 * layout make_ds already takes. Tiles (64 rows × 32) are stored as 8 × 8 "core matrices"
 * without swizzle (wgmma's interleaved layout): core (row / 8, k / 8) at
 * ((row / 8)·4 + k / 8)·128 bytes, row % 8 at 16-byte steps; descriptor LBO = 128 (the
 * next 8 k), SBO = 512 (the next 8 rows); a k16 step is 256 bytes. */
#define ATT_WG_TILE 4096 /* bytes of one (64, 32) bf16 tile in the core-matrix layout */
static __device__ __forceinline__ uint32_t wg_cm_off(int row, int kc) {
  return (uint32_t)((((row >> 3) << 2) + kc) * 128 + (row & 7) * 16);
}
/* Descriptor of the core-matrix layout (no swizzle: mode bits 0). */
static __device__ __forceinline__ uint64_t wg_desc_cm(uint32_t saddr) {
  return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(512 >> 4) << 32);
}
/* rows [0, nrows) of g (row stride ld elements, ld % 8 == 0, 16-byte aligned rows) into the
 * core-matrix tile s; the other rows zero. 256 copies of 16 bytes, 2 per thread. */
static __device__ __forceinline__ void wg_tile_load(unsigned char *s, const bf16 *g, int nrows, int ld) {
#pragma unroll
  for (int j = 0; j < 2; j++) {
    const int i = threadIdx.x % ATT_THREADS + j * ATT_THREADS, row = i >> 2, kc = i & 3;
    const bool ok = row < nrows;
    cp_async16<true>(s + wg_cm_off(row, kc), g + (ok ? (int64_t)row * ld + kc * 8 : 0), ok);
  }
}
/* Shared memory: 2 stages × (Q, dO, K, V) tiles, the bias tile, lse/Di, the mask. */
static size_t dbias_wg_smem(void) {
  return 8 * ATT_WG_TILE + (size_t)ATT_BQ * ATT_BP * sizeof(bf16) + 4 * ATT_BQ * sizeof(float) +
         2 * ATT_MS;
}

__global__ void __launch_bounds__(ATT_THREADS, 4) dbias_wg_kernel(att_params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char *T0 = smem; /* stage st: Q at st·4T, dO +T, K +2T, V +3T (T = ATT_WG_TILE) */
  bf16 *Bs = reinterpret_cast<bf16 *>(smem + 8 * ATT_WG_TILE);
  float *Ls = reinterpret_cast<float *>(Bs + ATT_BQ * ATT_BP); /* [2][BQ] */
  float *Ds = Ls + 2 * ATT_BQ;                                 /* [2][BQ] */
  uint8_t *Ms = reinterpret_cast<uint8_t *>(Ds + 2 * ATT_BQ);   /* [2][ATT_MS] */

  int64_t idx = blockIdx.x;
  const int64_t per = (int64_t)p.B * p.H * p.nqb * p.nkb; /* CTAs per range of rows */
  const int sp = (int)(idx / per); idx %= per;
  const int kb = (int)(idx % p.nkb); idx /= p.nkb;
  const int qb = (int)(idx % p.nqb); idx /= p.nqb;
  const int h = (int)(idx % p.H);
  const int b = (int)(idx / p.H);
  const int Q = p.Q, K = p.K, q0 = qb * ATT_BQ, k0 = kb * ATT_BK, R = p.R;
  const bf16 *bg = p.bias ? p.bias + (((int64_t)b * p.H + h) * Q + q0) * p.bl + k0 : NULL;
  const int warp = threadIdx.x / MF_WARP_SIZE, lane = threadIdx.x % MF_WARP_SIZE;
  const bias_plan bp(p.bl);
  const int gq = lane >> 2;
  const int stq = (int)p.sq.row, sto = (int)p.sdO.row, stk = (int)p.sk.row, stv = (int)p.sv.row;
  auto mfetch = [&](int r) {
    return mask_fetch(p.mask ? p.mask + ((int64_t)b * R + r) * K : NULL, k0, K);
  };
  auto prefetch = [&](int r, int sn, uint32_t m) {
    const int64_t brh = ((int64_t)b * R + r) * p.H + h;
    unsigned char *st = T0 + sn * 4 * ATT_WG_TILE;
    wg_tile_load(st, p.q + vofs(p.sq, b, r, h) + (int64_t)q0 * stq, Q - q0, stq);
    wg_tile_load(st + ATT_WG_TILE, p.dO + vofs(p.sdO, b, r, h) + (int64_t)q0 * sto, Q - q0, sto);
    wg_tile_load(st + 2 * ATT_WG_TILE, p.k + vofs(p.sk, b, r, h) + (int64_t)k0 * stk, K - k0, stk);
    wg_tile_load(st + 3 * ATT_WG_TILE, p.v + vofs(p.sv, b, r, h) + (int64_t)k0 * stv, K - k0, stv);
    load_lse_di<true>(Ls, Ds, sn, slab_ld(p, brh), q0, p.nqb * ATT_BQ, threadIdx.x);
    mask_put(Ms + sn * ATT_MS, m);
  };

  const int rb = (int)((int64_t)sp * R / p.rs), re = (int)((int64_t)(sp + 1) * R / p.rs);
  bp.template load<true>(Bs, bg, Q - q0, K - k0);
  if (rb < re) prefetch(rb, 0, mfetch(rb));
  uint32_t mnext = rb + 1 < re ? mfetch(rb + 1) : 0u;
  cp_async_commit<true>();
  float acc[8][4];
#pragma unroll
  for (int i = 0; i < 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  const uint32_t t0 = mf_smem_u32(T0);

  for (int r = rb; r < re; r++) {
    const int st = (r - rb) & 1;
    if (r + 1 < re) {
      prefetch(r + 1, st ^ 1, mnext);
      if (r + 2 < re) mnext = mfetch(r + 2);
    }
    cp_async_commit<true>();
    cp_async_wait<true, 1>();
    mf_fence_proxy_async(); /* the tiles this thread copied, visible to the tensor core */
    __syncthreads();
    const uint32_t base = t0 + st * 4 * ATT_WG_TILE;
    float s[8][4], dp[8][4];
    float (&sf)[32] = *reinterpret_cast<float (*)[32]>(&s[0][0]);
    float (&dpf)[32] = *reinterpret_cast<float (*)[32]>(&dp[0][0]);
    mf_wg_fence();
#pragma unroll
    for (int kk = 0; kk < 2; kk++) /* S = Q·Kᵀ, dP = dO·Vᵀ over D = 32 */
      mf_wg_ss_n64(sf, wg_desc_cm(base + kk * 256), wg_desc_cm(base + 2 * ATT_WG_TILE + kk * 256), kk);
#pragma unroll
    for (int kk = 0; kk < 2; kk++)
      mf_wg_ss_n64(dpf, wg_desc_cm(base + ATT_WG_TILE + kk * 256), wg_desc_cm(base + 3 * ATT_WG_TILE + kk * 256), kk);
    mf_wg_commit();
    mf_wg_wait<0>();
    mf_wg_pin(sf);
    mf_wg_pin(dpf);
    const int rl0 = warp * 16 + gq, rl1 = rl0 + 8;
    const float *ls = Ls + st * ATT_BQ, *ds = Ds + st * ATT_BQ;
    make_ds<true>(s, dp, tv_bias{Bs}, Ms + st * ATT_MS, ls[rl0], ls[rl1], ds[rl0], ds[rl1], p.scale, warp);
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][e] += dp[i][e];
    __syncthreads();
  }
  dbias_store(p, acc, sp, b, h, q0, k0, warp);
}

/* dbias (B·H·Q rows of K, row stride bl) = Σ_s part[s] over the rs row ranges of a split
 * dbias pass (part: rs × n dense, n = B·H·Q·K), s in order: one thread per element, so
 * the sum is the same every run. */
__global__ void dbias_reduce_kernel(bf16 *dbias, const float *part, int rs, int64_t n, int K,
                                    int64_t bl) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = part[i];
  for (int sp = 1; sp < rs; sp++) acc += part[sp * n + i];
  const int64_t row = i / K;
  dbias[row * bl + (i - row * K)] = mf_f32_to_bf16(acc);
}

/* ------------------------------------------------------------------------------------
 * Fused dK, dV, dQ (dev/cuda/README.md, step 7). One CTA (4 warps) owns a whole
 * (b, r, h) slab at a time: for each key tile in order (outer) it does the work of one
 * dkdv_kernel CTA (dK, dV of the tile in registers over all query tiles, inner), and at
 * each (key tile, query tile) step also adds the step's dQ contribution dS·K (16 queries
 * × 64 keys per warp) to an fp32 dQ accumulator of all the slab's query rows:
 *   - the warps store dSᵀ (bf16, the same rounding as the dq pass) to shared memory; after
 *     a barrier warp w takes its 16 query rows of dS (ldmatrix.trans) for all 64 keys and
 *     multiplies by the key tile (the warps split the queries, so no partial dQ is ever
 *     combined across warps);
 *   - the accumulator is in fragment order: slot (query tile, warp, lane) holds one
 *     thread's DP/2 floats, read and written by that thread only, in key-tile order, so
 *     dQ = scale·Σ_kb Σ_k dS·K sums in the same order every run (no atomics);
 *   - GACC = false: the accumulator lives in shared memory (nqb·64·DP·4 bytes);
 *     GACC = true: in a global fp32 scratch owned by the CTA (grid = resident CTAs, each
 *     walking slabs blockIdx.x, + gridDim.x, …), the slot of the next query tile
 *     prefetched by cp.async with the Q/dO tiles into a two-stage buffer, and written back
 *     by plain stores. Every write of a slot is followed by a __syncthreads before the
 *     cp.async that reads it back;
 *   - the last key tile writes dQ as bf16 (no final accumulator pass); the first one does
 *     not read the accumulator.
 * Step schedules (SCHED; README step 7): 0 = dkdv_kernel's two barriers per step (tile
 * ready; stage free) plus the dSᵀ one; 1 = two: the next tile's prefetch is issued after
 * the barrier that follows the previous step's last reads, so no end-of-step barrier;
 * 2 = 1 with the dV, dK products moved after the dSᵀ barrier, beside the dQ products.
 * dq, dk, dv (B,R,H,·,D); p.dqacc (gridDim.x, nqb, 4, DP/8, 32) float4 when GACC. */
/* The fused passes' dQ accumulator fragments c[0..NC) (this thread's float4 slots, at(i)
 * gives slot i's value), or zeros for the first key tile. */
template <int NC, class F>
__device__ __forceinline__ void acc_load(float c[][4], bool first, F at) {
#pragma unroll
  for (int i = 0; i < NC; i++) {
    if (first) {
      c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.f;
    } else {
      const float4 a = at(i);
      c[i][0] = a.x; c[i][1] = a.y; c[i][2] = a.z; c[i][3] = a.w;
    }
  }
}

/* The dQ step of fused_kernel / fused_tma_kernel (after the dSᵀ barrier): this warp's dQ
 * rows it·64 + 16·warp + [0, 16) += dS (16, 64 keys) · K (64, DP) with dS from St (keys,
 * queries; pitch BQ + 8) and K from Ks (pitch DP + 8); the running sum comes from the
 * accumulator slots (stage st in shared memory in the global mode, tile it otherwise; none
 * for the first key tile) and goes back to them (global scratch, or shared memory), or,
 * for the last key tile, to dq scaled by p.scale. */
template <int DP, bool GACC>
__device__ __forceinline__ void fused_dq_step(const att_params &p, float4 *Acc, float4 *gacc, const bf16 *St,
                                              const bf16 *Ks, int it, int st, int kb, int nkb, int b, int r,
                                              int h, int warp, int lane, int Q, int D) {
  constexpr bool MMA = true;
  constexpr int TP = DP + 8, ND = DP / 8, SP = ATT_BQ + 8;
  auto slot = [&](int i, int nd) { return ((i * ATT_WARPS + warp) * ND + nd) * 32 + lane; };
  float c[ND][4];
  acc_load<ND>(c, kb == 0, [&](int nd) { return Acc[slot(GACC ? st : it, nd)]; });
#pragma unroll
  for (int j = 0; j < 4; j++) { /* keys 16j..16j+15 */
    uint32_t a[4];
    ldsm_x4<MMA, true>(a, St + (j * 16 + (lane / 16) * 8 + lane % 8) * SP + warp * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
    for (int n2 = 0; n2 < DP / 16; n2++) {
      uint32_t bk[4];
      ldsm_x4<MMA, true>(bk, Ks + (j * 16 + ((lane / 8) % 2) * 8 + lane % 8) * TP + n2 * 16 + (lane / 16) * 8);
      mma_16816<MMA>(c[2 * n2], a, bk[0], bk[1]);
      mma_16816<MMA>(c[2 * n2 + 1], a, bk[2], bk[3]);
    }
  }
  if (kb == nkb - 1) {
    store_rows<DP>(p.dq + vofs(p.sdq, b, r, h), c, it * ATT_BQ + warp * 16, Q, D, p.sdq.row, p.scale);
  } else {
#pragma unroll
    for (int nd = 0; nd < ND; nd++) {
      const float4 v = make_float4(c[nd][0], c[nd][1], c[nd][2], c[nd][3]);
      if (GACC) gacc[slot(it, nd)] = v;
      else Acc[slot(it, nd)] = v;
    }
  }
}

template <int DP, bool GACC, int SCHED>
__global__ void __launch_bounds__(ATT_THREADS, minb_dkdv(true, DP, 1)) fused_kernel(att_params p) {
  constexpr bool MMA = true;
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int TP = DP + 8, TILE = 64 * TP, BT = ATT_BQ * ATT_BP, ND = DP / 8, SP = ATT_BQ + 8;
  bf16 *s0 = reinterpret_cast<bf16 *>(smem);
  bf16 *Ks = s0, *Vs = s0 + TILE;              /* [TILE] each */
  bf16 *Qs = s0 + 2 * TILE, *dOs = s0 + 4 * TILE; /* [2][TILE] each */
  bf16 *Bs = s0 + 6 * TILE;                    /* [2][BT] */
  bf16 *St = Bs + 2 * BT;                      /* [BK][SP]: dSᵀ (keys, queries) */
  float *Ls = reinterpret_cast<float *>(St + ATT_BK * SP); /* [2][BQ] lse·log2e */
  float *Ds = Ls + 2 * ATT_BQ;                             /* [2][BQ] Di */
  float4 *Acc = reinterpret_cast<float4 *>(Ds + 2 * ATT_BQ); /* [2 or nqb][4][ND][32] */
  uint8_t *Ms = reinterpret_cast<uint8_t *>(Acc + (GACC ? 2 : p.nqb) * ATT_WARPS * ND * 32);

  const int Q = p.Q, K = p.K, D = p.D, nqb = p.nqb, nkb = p.nkb;
  const int warp = threadIdx.x / MF_WARP_SIZE, lane = threadIdx.x % MF_WARP_SIZE;
  const row_plan<DP> rp(D);
  const bias_plan bp(p.bl);
  const int64_t nslab = (int64_t)p.B * p.R * p.H;
  float4 *gacc = GACC ? reinterpret_cast<float4 *>(p.dqacc) + (int64_t)blockIdx.x * nqb * ATT_WARPS * ND * 32 : NULL;
  /* this thread's float4 slots: Acc / gacc + slot(tile or stage) */
  auto slot = [&](int i, int nd) { return ((i * ATT_WARPS + warp) * ND + nd) * 32 + lane; };

  const int stq = (int)p.sq.row, sto = (int)p.sdO.row, stk = (int)p.sk.row, stv = (int)p.sv.row;
  for (int64_t brh = blockIdx.x; brh < nslab; brh += gridDim.x) {
    const int h = (int)(brh % p.H);
    const int64_t br = brh / p.H;
    const int b = (int)(br / p.R), r = (int)(br % p.R);
    const bf16 *qg = p.q + vofs(p.sq, b, r, h), *dog = p.dO + vofs(p.sdO, b, r, h);
    const uint8_t *mg = p.mask ? p.mask + br * K : NULL;
    const float *ldg = slab_ld(p, brh);
    for (int kb = 0; kb < nkb; kb++) {
      const int k0 = kb * ATT_BK;
      const bf16 *kg = p.k + vofs(p.sk, b, r, h) + (int64_t)k0 * stk;
      const bf16 *vg = p.v + vofs(p.sv, b, r, h) + (int64_t)k0 * stv;
      const bf16 *bg = p.bias ? p.bias + ((int64_t)b * p.H + h) * Q * p.bl + k0 : NULL;
      auto prefetch = [&](int it, int sn) {
        const int q1 = it * ATT_BQ;
        rp.template load<MMA>(Qs + sn * TILE, qg + (int64_t)q1 * stq, Q - q1, stq);
        rp.template load<MMA>(dOs + sn * TILE, dog + (int64_t)q1 * sto, Q - q1, sto);
        load_lse_di<MMA>(Ls, Ds, sn, ldg, q1, nqb * ATT_BQ, threadIdx.x);
        bp.template load<MMA>(Bs + sn * BT, bg ? bg + (int64_t)q1 * p.bl : NULL, Q - q1, K - k0);
        if (GACC && kb > 0)
#pragma unroll
          for (int nd = 0; nd < ND; nd++) cp_async16<MMA>(Acc + slot(sn, nd), gacc + slot(it, nd), true);
      };

      __syncthreads(); /* the previous key tile is done with every buffer */
      rp.template load<MMA>(Ks, kg, K - k0, stk);
      rp.template load<MMA>(Vs, vg, K - k0, stv);
      load_mask(Ms, mg, k0, K);
      prefetch(0, 0);
      cp_async_commit<MMA>();
      cp_async_wait<MMA, 0>();
      __syncthreads();
      uint32_t kf[DP / 16][4], vf[DP / 16][4];
      bool kv0, kv1;
      float dk[DP / 8][4], dv[DP / 8][4];
      key_tile_start<DP, MMA>(kf, vf, kv0, kv1, dk, dv, Ks, Vs, Ms, warp);

      for (int it = 0; it < nqb; it++) {
        const int st = it & 1;
        if constexpr (SCHED == 0) { /* three barriers per step, as dkdv_kernel + one */
          if (it + 1 < nqb) prefetch(it + 1, st ^ 1);
          cp_async_commit<MMA>();
          cp_async_wait<MMA, 1>();
          __syncthreads();
        } else { /* two: the prefetch after the barrier that ends the previous step's reads */
          if (it > 0) {
            cp_async_wait<MMA, 0>();
            __syncthreads();
          }
          if (it + 1 < nqb) prefetch(it + 1, st ^ 1);
          cp_async_commit<MMA>();
        }
        const bf16 *qs = Qs + st * TILE, *dos = dOs + st * TILE, *bs = Bs + st * BT;
        const float *ls = Ls + st * ATT_BQ, *ds = Ds + st * ATT_BQ;

        float s[8][4], dp[8][4];
        s_dp_products<DP, MMA>(s, dp, kf, tv_tile<DP>{qs}, vf, tv_tile<DP>{dos}); /* Sᵀ = K·Qᵀ (16 keys, 64 queries), dPᵀ = V·dOᵀ */
        pt_dst_tile<MMA, true>(s, dp, tv_bias{bs}, ls, ds, kv0, kv1, p.scale, st_pitch{St, SP}, warp);
        if constexpr (SCHED != 2) {
          mm_pm<DP, MMA>(dv, s, dos);  /* dV += Pᵀ·dO */
          mm_pm<DP, MMA>(dk, dp, qs);  /* dK += dSᵀ·Q */
        }
        __syncthreads();             /* dSᵀ complete */

        fused_dq_step<DP, GACC>(p, Acc, gacc, St, Ks, it, st, kb, nkb, b, r, h, warp, lane, Q, D);
        if constexpr (SCHED == 2) { /* after the barrier, beside the dQ products */
          mm_pm<DP, MMA>(dv, s, dos);
          mm_pm<DP, MMA>(dk, dp, qs);
        }
        if constexpr (SCHED == 0) __syncthreads(); /* dSᵀ and the stage are refilled next */
      }
      if (p.dk) store_rows<DP>(p.dk + vofs(p.sdk, b, r, h), dk, k0 + warp * 16, K, D, p.sdk.row, p.scale);
      if (p.dv) store_rows<DP>(p.dv + vofs(p.sdv, b, r, h), dv, k0 + warp * 16, K, D, p.sdv.row, 1.f);
    }
  }
}

/* ------------------------------------------------------------------------------------
 * fused_kernel<32, true, 1> with TMA copies (fused_tma_kernel; the default for the fused
 * pass where D = 32 and the views allow, README step 13): per query step one thread issues
 * the next step's Q and dO boxes (64-byte swizzle), bias box (128-byte swizzle, the
 * forward's map) and lse·log2e / Di rows (bulk copies) onto the stage's transaction
 * barrier; the key tile's K and V and the dQ accumulator slots stay cp.async copies (the
 * slots are this CTA's own global stores of the previous key tile: generic-proxy copies
 * need no proxy fence). Same arithmetic and order as fused_kernel: bit-identical dq, dk,
 * dv. Stage: Q | dO (4 KB each) | bias (8 KB) | lse·log2e | Di (256 B each). */
/* One query step's copies of fused_tma_kernel / fused_wg_kernel<KT> (thread 0): the Q and
 * dO boxes of rows q1.., the KT bias boxes of key tiles k0.. (with a bias), the rows'
 * lse·log2e and Di (bulk copies from ldg, slab_ld()) into the stage at dst, onto its
 * transaction barrier fb (stage_tx bytes). Stage: Q | dO | bias_0.. | lse·log2e | Di. */
template <int KT>
__device__ __forceinline__ void tma_fused_stage(const att_tmaps &tm, uint32_t dst, uint32_t fb, uint32_t stage_tx,
                                                int q1, int k0, int h, int r, int b, bool has_bias,
                                                const float *ldg, int nqb) {
  mf_mbar_expect_tx(fb, stage_tx);
  tma_view(dst, &tm.q, q1, h, r, b, fb);
  tma_view(dst + TMA_KV, &tm.dO, q1, h, r, b, fb);
  if (has_bias)
    for (int t = 0; t < KT; t++) mf_tma_load_4d(dst + 2 * TMA_KV + t * TMA_BIAS, &tm.bias, k0 + t * ATT_BK, q1, h, b, fb);
  mf_bulk_load(dst + 2 * TMA_KV + KT * TMA_BIAS, ldg + q1, ATT_BQ * 4, fb);
  mf_bulk_load(dst + 2 * TMA_KV + KT * TMA_BIAS + ATT_BQ * 4, ldg + nqb * ATT_BQ + q1, ATT_BQ * 4, fb);
}

/* tma_fused_stage split over the four warps' lane 0 (fused_wg_kernel; the stage barrier
 * counts 4 arrivals, each with its own bytes, so its tx-count never goes below zero):
 * warp 0 Q, warp 1 dO, warp 2 the bias boxes, warp 3 lse and Di — none of them holds the
 * warpgroup at its next wgmma for all six copies (README step 19). */
template <int KT>
__device__ __forceinline__ void tma_fused_stage_w(const att_tmaps &tm, uint32_t dst, uint32_t fb, int warp,
                                                  int q1, int k0, int h, int r, int b, bool has_bias,
                                                  const float *ldg, int nqb) {
  if (warp == 0) {
    mf_mbar_expect_tx(fb, TMA_KV);
    tma_view(dst, &tm.q, q1, h, r, b, fb);
  } else if (warp == 1) {
    mf_mbar_expect_tx(fb, TMA_KV);
    tma_view(dst + TMA_KV, &tm.dO, q1, h, r, b, fb);
  } else if (warp == 2) {
    mf_mbar_expect_tx(fb, has_bias ? KT * TMA_BIAS : 0);
    if (has_bias)
      for (int t = 0; t < KT; t++) mf_tma_load_4d(dst + 2 * TMA_KV + t * TMA_BIAS, &tm.bias, k0 + t * ATT_BK, q1, h, b, fb);
  } else {
    mf_mbar_expect_tx(fb, 2 * ATT_BQ * 4);
    mf_bulk_load(dst + 2 * TMA_KV + KT * TMA_BIAS, ldg + q1, ATT_BQ * 4, fb);
    mf_bulk_load(dst + 2 * TMA_KV + KT * TMA_BIAS + ATT_BQ * 4, ldg + nqb * ATT_BQ + q1, ATT_BQ * 4, fb);
  }
}

/* The head of query step it of fused_tma_kernel / fused_wg_kernel: once every thread is
 * done with the previous step (its stage may be refilled), the next step's copies are
 * issued into the other stage (prefetch(it + 1, stage), one commit group for its cp.async
 * part), then this step's stage is awaited on its transaction barrier (phase bits in ph). */
template <class F>
__device__ __forceinline__ void tma_step_head(int it, int nqb, uint32_t bar, uint32_t &ph, F &&prefetch) {
  const int st = it & 1;
  if (it > 0) {
    cp_async_wait<true, 0>();
    __syncthreads();
  }
  if (it + 1 < nqb) prefetch(it + 1, st ^ 1);
  cp_async_commit<true>();
  mf_mbar_wait(bar + 8 * st, (ph >> st) & 1u);
  ph ^= 1u << st;
}

#define TF_STAGE 17408 /* 2·4096 + 8192 + 512, rounded up to 1 KB */
#define TF_SMEM (2 * TF_STAGE + 2 * 64 * 40 * 2 + ATT_BK * (ATT_BQ + 8) * 2 + 2 * ATT_WARPS * 4 * 32 * 16 + \
                 ATT_MS + 2 * 8 + 1024)

__global__ void __launch_bounds__(ATT_THREADS, minb_dkdv(true, 32, 1)) fused_tma_kernel(att_params p, const __grid_constant__ att_tmaps tm) {
  constexpr bool MMA = true;
  constexpr int DP = 32, TP = DP + 8, TILE = 64 * TP, ND = DP / 8, SP = ATT_BQ + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = mf_smem_u32(smem_raw), base = (raw + 1023u) & ~1023u;
  unsigned char *sb = smem_raw + (base - raw);
  bf16 *Ks = reinterpret_cast<bf16 *>(sb + 2 * TF_STAGE), *Vs = Ks + TILE; /* [TILE] each */
  bf16 *St = Vs + TILE;                                                    /* [BK][SP]: dSᵀ */
  float4 *Acc = reinterpret_cast<float4 *>(St + ATT_BK * SP);              /* [2][4][ND][32] */
  uint8_t *Ms = reinterpret_cast<uint8_t *>(Acc + 2 * ATT_WARPS * ND * 32);
  const uint32_t bar = (mf_smem_u32(Ms) + ATT_MS + 7u) & ~7u;

  const int K = p.K, D = p.D, nqb = p.nqb, nkb = p.nkb, tid = threadIdx.x;
  const int warp = tid / MF_WARP_SIZE, lane = tid % MF_WARP_SIZE;
  const row_plan<DP> rp(D);
  const int64_t nslab = (int64_t)p.B * p.R * p.H;
  float4 *gacc = reinterpret_cast<float4 *>(p.dqacc) + (int64_t)blockIdx.x * nqb * ATT_WARPS * ND * 32;
  auto slot = [&](int i, int nd) { return ((i * ATT_WARPS + warp) * ND + nd) * 32 + lane; };
  const int stk = (int)p.sk.row, stv = (int)p.sv.row;
  if (tid == 0) {
    mf_mbar_init(bar, 1);
    mf_mbar_init(bar + 8, 1);
    mf_mbar_init_fence();
  }
  uint32_t ph = 0; /* the stages' barrier phases (bit s) */
  const bool has_bias = p.bias != NULL;
  if (!has_bias) /* zero bias tiles in both stages, never overwritten */
    for (int s = 0; s < 2; s++)
      for (int i = tid; i < TMA_BIAS / 16; i += ATT_THREADS)
        reinterpret_cast<uint4 *>(sb + s * TF_STAGE + 2 * TMA_KV)[i] = make_uint4(0, 0, 0, 0);
  const uint32_t stage_tx = 2 * TMA_KV + (has_bias ? TMA_BIAS : 0) + 2 * ATT_BQ * 4;
  for (int64_t brh = blockIdx.x; brh < nslab; brh += gridDim.x) {
    const int h = (int)(brh % p.H);
    const int64_t br = brh / p.H;
    const int b = (int)(br / p.R), r = (int)(br % p.R);
    const uint8_t *mg = p.mask ? p.mask + br * K : NULL;
    const float *ldg = slab_ld(p, brh);
    for (int kb = 0; kb < nkb; kb++) {
      const int k0 = kb * ATT_BK;
      const bf16 *kg = p.k + vofs(p.sk, b, r, h) + (int64_t)k0 * stk;
      const bf16 *vg = p.v + vofs(p.sv, b, r, h) + (int64_t)k0 * stv;
      auto prefetch = [&](int it, int sn) {
        const int q1 = it * ATT_BQ;
        if (tid == 0) tma_fused_stage<1>(tm, base + sn * TF_STAGE, bar + 8 * sn, stage_tx, q1, k0, h, r, b, has_bias, ldg, nqb);
        if (kb > 0)
#pragma unroll
          for (int nd = 0; nd < ND; nd++) cp_async16<MMA>(Acc + slot(sn, nd), gacc + slot(it, nd), true);
      };

      __syncthreads(); /* the previous key tile is done with every buffer (and the barriers are set) */
      rp.template load<MMA>(Ks, kg, K - k0, stk);
      rp.template load<MMA>(Vs, vg, K - k0, stv);
      load_mask(Ms, mg, k0, K);
      prefetch(0, 0);
      cp_async_commit<MMA>();
      cp_async_wait<MMA, 0>();
      __syncthreads();
      uint32_t kf[DP / 16][4], vf[DP / 16][4];
      bool kv0, kv1;
      float dk[DP / 8][4], dv[DP / 8][4];
      key_tile_start<DP, MMA>(kf, vf, kv0, kv1, dk, dv, Ks, Vs, Ms, warp);

      for (int it = 0; it < nqb; it++) {
        const int st = it & 1;
        tma_step_head(it, nqb, bar, ph, prefetch);
        const bf16 *qs = reinterpret_cast<const bf16 *>(sb + st * TF_STAGE), *dos = qs + TMA_KV / 2;
        const float *ls = reinterpret_cast<const float *>(sb + st * TF_STAGE + 2 * TMA_KV + TMA_BIAS);
        const float *ds = ls + ATT_BQ;

        float s[8][4], dp[8][4];
        s_dp_products<DP, MMA>(s, dp, kf, tv_sw64{qs}, vf, tv_sw64{dos}); /* Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ */
        pt_dst_tile<MMA, true>(s, dp, tv_sw128{qs + TMA_KV}, ls, ds, kv0, kv1, p.scale, st_pitch{St, SP}, warp);
        mm_pm_v<DP, MMA>(dv, s, tv_sw64{dos}); /* dV += Pᵀ·dO */
        mm_pm_v<DP, MMA>(dk, dp, tv_sw64{qs}); /* dK += dSᵀ·Q */
        __syncthreads();                       /* dSᵀ complete */

        fused_dq_step<DP, true>(p, Acc, gacc, St, Ks, it, st, kb, nkb, b, r, h, warp, lane, p.Q, D);
      }
      if (p.dk) store_rows<DP>(p.dk + vofs(p.sdk, b, r, h), dk, k0 + warp * 16, K, D, p.sdk.row, p.scale);
      if (p.dv) store_rows<DP>(p.dv + vofs(p.sdv, b, r, h), dv, k0 + warp * 16, K, D, p.sdv.row, 1.f);
    }
  }
}

/* ------------------------------------------------------------------------------------
 * fused_wg_kernel<KT> (README steps 15–16; the default fused pass where D = 32 and the
 * views allow): fused_tma_kernel with its products on wgmma, reading the TMA boxes in place
 * — Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ with K, V from registers; dV += Pᵀ·dO and dK += dSᵀ·Q with P,
 * dS from registers against the MN-major Q and dO boxes; dQ += dS·K with dS read MN-major
 * from dSᵀ (stored in the 128-byte swizzle) and B = K's box (K and V come by TMA too) — over
 * KT key tiles per CTA pass. ncu put the KT = 1 pass at the device-memory bandwidth
 * (3.7–4.0 TB/s: per 64 × 64 step the Q and dO boxes, 8 KB, and the dQ accumulator's fp32
 * round trip through the CTA's global scratch, 16 KB, most of it missing L2), so with
 * KT = 2 each query step copies Q, dO, lse, Di and the accumulator once for two key tiles:
 * half those bytes per key. Per step and key tile t: Sᵀ, dPᵀ, the elementwise step with
 * tile t's bias and mask, dV_t, dK_t, then dQ += dS_t·K_t after the dSᵀ barrier; dQ sums
 * the tiles in order in registers before the slot is written back (the same additions in
 * the same order for either KT; not fused_tma_kernel's order of rounding). A missing last
 * tile of an odd count is skipped. All KT tiles' K, V fragments and dK, dV accumulators
 * live in registers: 3 CTAs per SM for KT = 1, 2 for KT = 2.
 * Shared memory: two stages of Q | dO | bias_0..bias_{KT-1} | lse·log2e | Di, then K_0 | V_0
 * | K_1 | V_1 (TMA boxes), dSᵀ (64 rows × 128 B), the accumulator stages, the tiles' mask
 * bytes and the barriers. */
#define TW_STAGE_K(KT) ((KT) == 1 ? 17408 : 25600) /* 2·4096 + KT·8192 + 512, rounded up to 1 KB */
#define TW_SMEM_K(KT) (2 * TW_STAGE_K(KT) + 2 * (KT) * TMA_KV + ATT_BK * 128 + 2 * ATT_WARPS * 4 * 32 * 16 + \
                       (KT) * ATT_MS + 3 * 8 + 1024)

/* SC32: p.scale is 1/√32 (ATT_SCALE32), AF3's scale at D = 32, and the kernel uses it as an
 * immediate operand: with 254 registers live, ptxas otherwise reloaded p.scale from the
 * constant bank (LDC) before nearly every group of logits, 6 % of the pass's issued
 * instructions (ncu, dev/cuda/README.md). Same arithmetic either way. */
#define ATT_SCALE32 0.17677669529663687f
template <int KT, bool SC32 = false>
__global__ void __launch_bounds__(ATT_THREADS, KT == 1 ? 3 : 2) fused_wg_kernel(att_params p, const __grid_constant__ att_tmaps tm) {
  constexpr bool MMA = true;
  constexpr int DP = 32, ND = DP / 8;
  constexpr uint32_t STG = TW_STAGE_K(KT);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = mf_smem_u32(smem_raw), base = (raw + 1023u) & ~1023u;
  unsigned char *sb = smem_raw + (base - raw);
  const uint32_t kva = base + 2 * STG, sta = kva + 2 * KT * TMA_KV; /* K_t at kva + t·2·TMA_KV, V_t + TMA_KV */
  unsigned char *St = sb + 2 * STG + 2 * KT * TMA_KV;
  float4 *Acc = reinterpret_cast<float4 *>(St + ATT_BK * 128); /* [2][4][ND][32] */
  uint8_t *Ms = reinterpret_cast<uint8_t *>(Acc + 2 * ATT_WARPS * ND * 32); /* [KT][ATT_MS]: tile t's */
  const uint32_t bar = (mf_smem_u32(Ms) + KT * ATT_MS + 7u) & ~7u, kvbar = bar + 16; /* stages 0, 1; K|V */
  /* wgmma descriptors (address field advanced by adds, wg_pm_desc): stage 0's Q box
   * K-major and MN-major, dSᵀ MN-major, K_0's box MN-major */
  const uint64_t dqk0 = mf_wg_desc_sw64(base, 16, 512), dqm0 = mf_wg_desc_sw64(base, 4096, 512);
  const uint64_t dst0 = mf_wg_desc_mn(sta, 8192), dkv0 = mf_wg_desc_sw64(kva, 4096, 512);

  const int K = p.K, nqb = p.nqb, nkb = p.nkb, tid = threadIdx.x;
  const float scale = SC32 ? ATT_SCALE32 : p.scale;
  const int warp = tid / MF_WARP_SIZE, lane = tid % MF_WARP_SIZE;
  const int64_t nslab = (int64_t)p.B * p.R * p.H;
  float4 *gacc = reinterpret_cast<float4 *>(p.dqacc) + (int64_t)blockIdx.x * nqb * ATT_WARPS * ND * 32;
  auto slot = [&](int i, int nd) { return ((i * ATT_WARPS + warp) * ND + nd) * 32 + lane; };
  if (tid == 0) {
    mf_mbar_init(bar, ATT_WARPS); /* the stages: lane 0 of every warp (tma_fused_stage_w) */
    mf_mbar_init(bar + 8, ATT_WARPS);
    mf_mbar_init(kvbar, 1);
    mf_mbar_init_fence();
  }
  uint32_t ph = 0; /* the stages' barrier phases (bit s), and K|V's (bit 2) */
  const bool has_bias = p.bias != NULL;
  if (!has_bias) /* zero bias tiles in both stages, never overwritten */
    for (int s = 0; s < 2; s++)
      for (int i = tid; i < KT * TMA_BIAS / 16; i += ATT_THREADS)
        reinterpret_cast<uint4 *>(sb + s * STG + 2 * TMA_KV)[i] = make_uint4(0, 0, 0, 0);
  for (int64_t brh = blockIdx.x; brh < nslab; brh += gridDim.x) {
    const int h = (int)(brh % p.H);
    const int64_t br = brh / p.H;
    const int b = (int)(br / p.R), r = (int)(br % p.R);
    const uint8_t *mg = p.mask ? p.mask + br * K : NULL;
    const float *ldg = slab_ld(p, brh);
    for (int kb = 0; kb < nkb; kb += KT) {
      const int k0 = kb * ATT_BK, nt = min(KT, nkb - kb); /* this pass's key tiles */
      /* step it's query tile: the passes alternate direction (README step 37), so that a
       * pass starts on the tiles whose Q, dO and dQ accumulator the previous pass touched
       * last and L2 may still hold (in one direction every pass saw its slab's 256 KB
       * last touched a whole pass earlier, with the other CTAs' slabs in between: about
       * 68 MB in flight at N = 1024, more than L2). Each tile still sums its key tiles in
       * pass order: the same results. */
      const bool rev = (kb / KT) & 1;
      auto qtile = [&](int it) { return rev ? nqb - 1 - it : it; };
      auto prefetch = [&](int it, int sn) {
        const int q1 = qtile(it) * ATT_BQ;
        if (lane == 0) tma_fused_stage_w<KT>(tm, base + sn * STG, bar + 8 * sn, warp, q1, k0, h, r, b, has_bias, ldg, nqb);
        if (kb > 0)
#pragma unroll
          for (int nd = 0; nd < ND; nd++) cp_async16<MMA>(Acc + slot(sn, nd), gacc + slot(qtile(it), nd), true);
      };

      __syncthreads(); /* the previous key tiles are done with every buffer (and the barriers are set) */
      if (tid == 0) { /* K_t, V_t (past K: zeros) */
        mf_mbar_expect_tx(kvbar, 2 * KT * TMA_KV);
#pragma unroll
        for (int t = 0; t < KT; t++) {
          tma_view(kva + t * 2 * TMA_KV, &tm.k, k0 + t * ATT_BK, h, r, b, kvbar);
          tma_view(kva + t * 2 * TMA_KV + TMA_KV, &tm.v, k0 + t * ATT_BK, h, r, b, kvbar);
        }
      }
      for (int t = 0; t < KT; t++) load_mask(Ms + t * ATT_MS, mg, k0 + t * ATT_BK, K);
      prefetch(0, 0);
      cp_async_commit<MMA>();
      cp_async_wait<MMA, 0>();
      mf_mbar_wait(kvbar, (ph >> 2) & 1u);
      ph ^= 4u;
      __syncthreads();
      uint32_t kf[KT][DP / 16][4], vf[KT][DP / 16][4];
      bool kv0[KT], kv1[KT];
      float dk[KT][DP / 8][4], dv[KT][DP / 8][4];
#pragma unroll
      for (int t = 0; t < KT; t++) {
        const bf16 *kt = reinterpret_cast<const bf16 *>(sb + 2 * STG + t * 2 * TMA_KV);
        key_tile_start_v<DP, MMA>(kf[t], vf[t], kv0[t], kv1[t], dk[t], dv[t], tv_sw64{kt},
                                  tv_sw64{kt + TMA_KV / 2}, Ms + t * ATT_MS, warp);
      }

      for (int it = 0; it < nqb; it++) {
        const int st = it & 1;
        tma_step_head(it, nqb, bar, ph, prefetch);
        const bf16 *qs = reinterpret_cast<const bf16 *>(sb + st * STG);
        const float *ls = reinterpret_cast<const float *>(sb + st * STG + 2 * TMA_KV + KT * TMA_BIAS);
        const float *ds = ls + ATT_BQ;
        /* the Q and dO boxes' descriptors: K-major (Sᵀ, dPᵀ) and MN-major (dV, dK) */
        const uint64_t dqk = dqk0 + (uint64_t)(st * (STG / 16)), dqm = dqm0 + (uint64_t)(st * (STG / 16));
        const int qt = qtile(it);
        float c[ND][4]; /* dQ rows qt·64 + 16·warp.. of this slab, over the pass's key tiles */
        float(&c16)[16] = reinterpret_cast<float(&)[16]>(c);
        acc_load<ND>(c, kb == 0, [&](int nd) { return Acc[slot(st, nd)]; });
#pragma unroll
        for (int t = 0; t < KT; t++) {
          if (t >= nt) break;
          if (t > 0) __syncthreads(); /* tile t−1's dQ products are done everywhere: dSᵀ is free */
          float s[8][4], dp[8][4];
          float(&s32)[32] = reinterpret_cast<float(&)[32]>(s);
          float(&dp32)[32] = reinterpret_cast<float(&)[32]>(dp);
          float(&dv16)[16] = reinterpret_cast<float(&)[16]>(dv[t]);
          float(&dk16)[16] = reinterpret_cast<float(&)[16]>(dk[t]);
          mf_wg_fence(); /* Sᵀ = K_t·Qᵀ, dPᵀ = V_t·dOᵀ */
          mf_wg_rs_n64<0>(s32, kf[t][0], dqk, 0);
          mf_wg_rs_n64<0>(s32, kf[t][1], dqk + 32 / 16, 1);
          mf_wg_rs_n64<0>(dp32, vf[t][0], dqk + TMA_KV / 16, 0);
          mf_wg_rs_n64<0>(dp32, vf[t][1], dqk + (TMA_KV + 32) / 16, 1);
          mf_wg_commit();
          mf_wg_wait<0>();
          mf_wg_pin(s32);
          mf_wg_pin(dp32);
          uint32_t pa[4][4], sa[4][4];
          pt_dst_tile<MMA, true>(s, dp, tv_sw128{qs + TMA_KV + t * TMA_BIAS / 2}, ls, ds, kv0[t], kv1[t], scale,
                                 st_sw128{St}, warp, sa);
#pragma unroll
          for (int j = 0; j < 4; j++) pack_a_frag(pa[j], s, j);
          mf_wg_fence(); /* dV_t += Pᵀ·dO, dK_t += dSᵀ·Q */
          wg_pm_desc(dv16, pa, dqm + TMA_KV / 16);
          wg_pm_desc(dk16, sa, dqm);
          mf_wg_commit();
          mf_fence_proxy_async(); /* dSᵀ (generic stores) before the wgmma that reads it */
          __syncthreads();        /* dSᵀ complete */
          mf_wg_fence();          /* dQ += dS·K_t: A = dS read MN-major from dSᵀ, B = K_t's box */
#pragma unroll
          for (int j = 0; j < 4; j++)
            mf_wg_ss_n32_tt(c16, dst0 + (uint64_t)(j * 2048 / 16),
                            dkv0 + (uint64_t)((t * 2 * TMA_KV + j * 1024) / 16), 1);
          mf_wg_commit();
          mf_wg_wait<0>();
          mf_wg_pin(c16);
          mf_wg_pin(dv16);
          mf_wg_pin(dk16);
        }
        if (kb + KT >= nkb) {
          store_rows<DP>(p.dq + vofs(p.sdq, b, r, h), c, qt * ATT_BQ + warp * 16, p.Q, p.D, p.sdq.row, scale);
        } else {
#pragma unroll
          for (int nd = 0; nd < ND; nd++) gacc[slot(qt, nd)] = make_float4(c[nd][0], c[nd][1], c[nd][2], c[nd][3]);
        }
      }
#pragma unroll
      for (int t = 0; t < KT; t++) {
        if (t >= nt) break;
        const int kt0 = k0 + t * ATT_BK + warp * 16;
        if (p.dk) store_rows<DP>(p.dk + vofs(p.sdk, b, r, h), dk[t], kt0, K, p.D, p.sdk.row, scale);
        if (p.dv) store_rows<DP>(p.dv + vofs(p.sdv, b, r, h), dv[t], kt0, K, p.D, p.sdv.row, 1.f);
      }
    }
  }
}

/* ------------------------------------------------------------------------------------
 * fused2_kernel (README step 10): fused_kernel with CTAs of two warpgroups that walk a
 * slab's key tiles in pairs, warpgroup wg owning key tile 2·kp + wg (a missing last one
 * is all masked: zero tiles, no stores). The pair shares each query step's Q, dO, lse,
 * Di tiles (warpgroup 0 copies Q, lse, Di, warpgroup 1 dO) and the dQ accumulator, so
 * that a slab costs half the tile copies and half the accumulator round trips of
 * fused_kernel, and the CTAs in flight hold half the slabs: fused_kernel's working set
 * (≈ 200 KB per CTA: the slab's Q, dO and dQ accumulator, × 396 CTAs at N = 768) did
 * not fit the 50 MB L2 (ncu: 57 % L2 hits, 2.4 TB/s from device memory).
 * dQ phase: warp w of 8 owns query rows 16·(w % 4) of the tile and the head-dim half
 * w / 4 (DP/2 columns) and sums dS·K over both key tiles, tile 0 first (a fixed order:
 * bit-identical reruns; not the order of fused_kernel, whose sums differ in rounding).
 * DP % 32 == 0 (whole 16-column fragment pairs per half). Global accumulator only,
 * schedule 1. MINB: CTAs per SM for __launch_bounds__ (1, or 2: 128 registers).
 * dq, dk, dv (B,R,H,·,D); p.dqacc (gridDim.x, nqb, 8, DP/16, 32) float4. */
template <int DP, int MINB>
__global__ void __launch_bounds__(2 * ATT_THREADS, MINB) fused2_kernel(att_params p) {
  constexpr bool MMA = true;
  static_assert(DP % 32 == 0, "head-dim halves of whole fragment pairs");
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int TP = DP + 8, TILE = 64 * TP, BT = ATT_BQ * ATT_BP, NH = DP / 16, SP = ATT_BQ + 8;
  constexpr int W8 = 2 * ATT_WARPS;
  const int wg = threadIdx.x / ATT_THREADS;
  bf16 *s0 = reinterpret_cast<bf16 *>(smem);
  bf16 *Ks = s0 + wg * TILE, *Vs = s0 + (2 + wg) * TILE;   /* [2][TILE] each: per warpgroup */
  bf16 *K0 = s0;                                            /* both warpgroups' K tiles */
  bf16 *Qs = s0 + 4 * TILE, *dOs = s0 + 6 * TILE;           /* [2][TILE] each: per stage */
  bf16 *Bs = s0 + 8 * TILE;                                 /* [2 stages][2 wg][BT] */
  bf16 *St0 = Bs + 4 * BT;                                  /* [2 wg][BK][SP]: dSᵀ */
  bf16 *St = St0 + wg * ATT_BK * SP;
  float *Ls = reinterpret_cast<float *>(St0 + 2 * ATT_BK * SP); /* [2][BQ] lse·log2e */
  float *Ds = Ls + 2 * ATT_BQ;                                  /* [2][BQ] Di */
  float4 *Acc = reinterpret_cast<float4 *>(Ds + 2 * ATT_BQ);    /* [2][8][NH][32] */
  uint8_t *Ms = reinterpret_cast<uint8_t *>(Acc + 2 * W8 * NH * 32) + wg * ATT_MS; /* [2 wg][ATT_MS] */

  const int Q = p.Q, K = p.K, D = p.D, nqb = p.nqb, nkb = p.nkb, QP = nqb * ATT_BQ;
  const int w8 = threadIdx.x / MF_WARP_SIZE, warp = w8 % ATT_WARPS, lane = threadIdx.x % MF_WARP_SIZE;
  const int gq = lane >> 2, t = lane & 3, hd = w8 / ATT_WARPS; /* hd: this warp's dQ half */
  const row_plan<DP> rp(D);
  const bias_plan bp(p.bl);
  const int64_t nslab = (int64_t)p.B * p.R * p.H;
  const int nkp = (nkb + 1) / 2;
  float4 *gacc = reinterpret_cast<float4 *>(p.dqacc) + (int64_t)blockIdx.x * nqb * W8 * NH * 32;
  auto slot = [&](int i, int nh) { return ((i * W8 + w8) * NH + nh) * 32 + lane; };

  const int stq = (int)p.sq.row, sto = (int)p.sdO.row, stk = (int)p.sk.row, stv = (int)p.sv.row;
  for (int64_t brh = blockIdx.x; brh < nslab; brh += gridDim.x) {
    const int h = (int)(brh % p.H);
    const int64_t br = brh / p.H;
    const int b = (int)(br / p.R), r = (int)(br % p.R);
    const bf16 *qg = p.q + vofs(p.sq, b, r, h), *dog = p.dO + vofs(p.sdO, b, r, h);
    const uint8_t *mg = p.mask ? p.mask + br * K : NULL;
    const float *ldg = slab_ld(p, brh);
    for (int kp = 0; kp < nkp; kp++) {
      const int k0 = (2 * kp + wg) * ATT_BK; /* this warpgroup's key tile (≥ K: all masked) */
      const bf16 *kg = p.k + vofs(p.sk, b, r, h) + (int64_t)min(k0, K) * stk;
      const bf16 *vg = p.v + vofs(p.sv, b, r, h) + (int64_t)min(k0, K) * stv;
      const bf16 *bg = p.bias ? p.bias + ((int64_t)b * p.H + h) * Q * p.bl + min(k0, K) : NULL;
      auto prefetch = [&](int it, int sn) {
        const int q1 = it * ATT_BQ;
        if (wg == 0) {
          rp.template load<MMA>(Qs + sn * TILE, qg + (int64_t)q1 * stq, Q - q1, stq);
          load_lse_di<MMA>(Ls, Ds, sn, ldg, q1, QP, threadIdx.x);
        } else {
          rp.template load<MMA>(dOs + sn * TILE, dog + (int64_t)q1 * sto, Q - q1, sto);
        }
        bp.template load<MMA>(Bs + (sn * 2 + wg) * BT, bg ? bg + (int64_t)q1 * p.bl : NULL, Q - q1, K - k0);
        if (kp > 0)
#pragma unroll
          for (int nh = 0; nh < NH; nh++) cp_async16<MMA>(Acc + slot(sn, nh), gacc + slot(it, nh), true);
      };

      __syncthreads(); /* the previous pair is done with every buffer */
      rp.template load<MMA>(Ks, kg, K - k0, stk);
      rp.template load<MMA>(Vs, vg, K - k0, stv);
      load_mask(Ms, mg, k0, K);
      prefetch(0, 0);
      cp_async_commit<MMA>();
      cp_async_wait<MMA, 0>();
      __syncthreads();
      uint32_t kf[DP / 16][4], vf[DP / 16][4];
      bool kv0, kv1;
      float dk[DP / 8][4], dv[DP / 8][4];
      key_tile_start<DP, MMA>(kf, vf, kv0, kv1, dk, dv, Ks, Vs, Ms, warp);

      for (int it = 0; it < nqb; it++) {
        const int st = it & 1;
        if (it > 0) { /* schedule 1: the prefetch after the barrier that ends the previous step's reads */
          cp_async_wait<MMA, 0>();
          __syncthreads();
        }
        if (it + 1 < nqb) prefetch(it + 1, st ^ 1);
        cp_async_commit<MMA>();
        const bf16 *qs = Qs + st * TILE, *dos = dOs + st * TILE, *bs = Bs + (st * 2 + wg) * BT;
        const float *ls = Ls + st * ATT_BQ, *ds = Ds + st * ATT_BQ;

        float s[8][4], dp[8][4];
        s_dp_products<DP, MMA>(s, dp, kf, tv_tile<DP>{qs}, vf, tv_tile<DP>{dos}); /* Sᵀ = K·Qᵀ (16 keys, 64 queries), dPᵀ = V·dOᵀ */
        pt_dst_tile<MMA, true>(s, dp, tv_bias{bs}, ls, ds, kv0, kv1, p.scale, st_pitch{St, SP}, warp);
        mm_pm<DP, MMA>(dv, s, dos); /* dV += Pᵀ·dO */
        mm_pm<DP, MMA>(dk, dp, qs); /* dK += dSᵀ·Q */
        __syncthreads();            /* both warpgroups' dSᵀ complete */

        /* dQ rows it·64 + 16·warp + [0, 16), columns of half hd, += Σ over both key tiles of dS · K */
        float c[NH][4];
        acc_load<NH>(c, kp == 0, [&](int nh) { return Acc[slot(st, nh)]; });
#pragma unroll
        for (int kt = 0; kt < 2; kt++) {
          const bf16 *stk_ = St0 + kt * ATT_BK * SP, *ks = K0 + kt * TILE;
#pragma unroll
          for (int j = 0; j < 4; j++) { /* keys 16j..16j+15 of key tile kt */
            uint32_t a[4];
            ldsm_x4<MMA, true>(a, stk_ + (j * 16 + (lane / 16) * 8 + lane % 8) * SP + warp * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
            for (int n2 = 0; n2 < NH / 2; n2++) {
              uint32_t bk[4];
              ldsm_x4<MMA, true>(bk, ks + (j * 16 + ((lane / 8) % 2) * 8 + lane % 8) * TP +
                                         (hd * (NH / 2) + n2) * 16 + (lane / 16) * 8);
              mma_16816<MMA>(c[2 * n2], a, bk[0], bk[1]);
              mma_16816<MMA>(c[2 * n2 + 1], a, bk[2], bk[3]);
            }
          }
        }
        if (kp == nkp - 1) { /* dQ as bf16: columns hd·DP/2 + 8·nh + 2t, rows g, g+8 */
          bf16 *dqg = p.dq + vofs(p.sdq, b, r, h);
#pragma unroll
          for (int nh = 0; nh < NH; nh++) {
            const int col = hd * (DP / 2) + nh * 8;
            if (col >= D) continue;
#pragma unroll
            for (int hrow = 0; hrow < 2; hrow++) {
              const int row = it * ATT_BQ + warp * 16 + gq + 8 * hrow;
              if (row >= Q) continue;
              *reinterpret_cast<__nv_bfloat162 *>(dqg + row * p.sdq.row + col + 2 * t) =
                  __floats2bfloat162_rn(c[nh][2 * hrow] * p.scale, c[nh][2 * hrow + 1] * p.scale);
            }
          }
        } else {
#pragma unroll
          for (int nh = 0; nh < NH; nh++) gacc[slot(it, nh)] = make_float4(c[nh][0], c[nh][1], c[nh][2], c[nh][3]);
        }
      }
      if (p.dk) store_rows<DP>(p.dk + vofs(p.sdk, b, r, h), dk, k0 + warp * 16, K, D, p.sdk.row, p.scale);
      if (p.dv) store_rows<DP>(p.dv + vofs(p.sdv, b, r, h), dv, k0 + warp * 16, K, D, p.sdv.row, 1.f);
    }
  }
}

/* ------------------------------------------------------------------------------------
 * Launchers: shared memory per kernel, head-dim dispatch. */

static size_t tile_bytes(int DP) { return (size_t)64 * (DP + 8) * sizeof(bf16); }
static size_t bias_bytes(void) { return (size_t)ATT_BQ * ATT_BP * sizeof(bf16); }

static int padded_dim(int D) { return D <= 16 ? 16 : D <= 32 ? 32 : D <= 48 ? 48 : 64; }

static void check_args(const mf_attn_dims *d, const void *const *ptrs, int nptrs) {
  MF_ASSERT(d->B >= 0 && d->R >= 0 && d->H >= 0 && d->Q >= 0 && d->K >= 0,
            "attention dims B=%d R=%d H=%d Q=%d K=%d", d->B, d->R, d->H, d->Q, d->K);
  MF_ASSERT(d->D > 0 && d->D <= 64 && d->D % 8 == 0,
            "EvoFlash-3D needs D %% 8 == 0 and D <= 64, got D=%d", d->D);
  for (int i = 0; i < nptrs; i++)
    MF_ASSERT(((uintptr_t)ptrs[i] & 15) == 0, "attention: pointer %d is not 16-byte aligned", i);
}

static att_params make_params(mf_attn_dims d) {
  att_params p = {};
  p.order = g_fwd_order;
  p.B = d.B; p.R = d.R; p.H = d.H; p.Q = d.Q; p.K = d.K; p.D = d.D;
  p.nqb = (int)mf_cdiv(d.Q, ATT_BQ);
  p.nkb = (int)mf_cdiv(d.K, ATT_BK);
  p.scale = (float)d.scale;
  p.rs = 1;
  p.bl = d.K;
  return p;
}

template <typename Kern>
static void launch(Kern kern, int64_t grid, int threads, size_t smem, cudaStream_t stream,
                   const att_params &p) {
  if (grid == 0) return;
  MF_ASSERT(grid < 2147483647LL, "attention grid of %lld CTAs", (long long)grid);
  MF_CHECK_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  kern<<<(unsigned)grid, threads, smem, stream>>>(p);
  MF_CHECK_LAUNCH();
}

/* Warpgroup layouts (GA, GB) by code: 0 = (1, 1), the first version; 1 = (2, 1); 2 = (1, 2);
 * 3 = (2, 2). Per kernel, GA×GB is fwd/dq GR×GQ, dkdv GR×GK, dbias GQ×GK. */
typedef struct {
  int fwd, dkdv, dq, dbias;
} att_cfgs;
/* Defaults for R > 1: the timings (dev/cuda/README.md, step 5) showed no layout reliably
 * faster than (1, 1) at N = 768..2048, so the first version's layout stays. */
#define ATT_CFG_FWD 0
#define ATT_CFG_DKDV 0
#define ATT_CFG_DQ 0
#define ATT_CFG_DBIAS 0
/* The backward that variant 0 runs: 6 (three passes) or 7 (fused dK/dV/dQ), README step 7 */
#define ATT_DEFAULT_VARIANT 7
/* Variant 7 runs fused2_kernel (1 CTA per SM) from this many query tiles on (N ≥ 2048 at
 * BQ = 64), fused_kernel below: the fused pass at N = 768 / 1024 / 1536 / 2048 / 3072
 * took 3.69 / 8.15 / 30.4 / 73.9 / 251 ms in fused_kernel and 3.99 / 9.07 / 29.5 / 68.4 /
 * 228 ms in fused2_kernel (H200, README step 10) */
#define ATT_FUSED2_MIN_QB 32
/* fused_kernel's step schedule for variants 7..9 (README step 7) */
#define ATT_FUSED_SCHED 1

static att_cfgs pick_cfgs(const att_params &p) {
  if (g_variant == 1 || g_variant == 2 || p.R == 1) return att_cfgs{0, 0, 0, 0};
  if (g_variant >= 3 && g_variant <= 5) { /* lab: one layout for all kernels */
    const int c = g_variant - 2;
    return att_cfgs{c, c, c, c};
  }
  return att_cfgs{ATT_CFG_FWD, ATT_CFG_DKDV, ATT_CFG_DQ, ATT_CFG_DBIAS};
}

/* Calls f.template go<GA, GB>() for layout code c. The other layouts exist for the lab's
 * shape only (DP = 32, tensor cores; they were not faster: README step 5); elsewhere every
 * code runs (1, 1), which keeps the library's build time. */
template <int DP, bool MMA, typename F>
static void with_cfg(int c, F &&f) {
  if constexpr (MMA && DP == 32) {
    switch (c) {
    case 1: f.template go<2, 1>(); return;
    case 2: f.template go<1, 2>(); return;
    case 3: f.template go<2, 2>(); return;
    default: break;
    }
  }
  f.template go<1, 1>();
}

template <int DP, bool MMA>
struct fwd_launch {
  const att_params &p;
  cudaStream_t stream;
  template <int GR, int GQ>
  void go() const {
    const int G = GR * GQ;
    const size_t smem = (G + 4 * GR) * tile_bytes(DP) + 2 * GQ * bias_bytes() + 2 * GR * ATT_MS;
    launch(fwd_kernel<DP, MMA, GR, GQ>, (int64_t)p.B * p.H * mf_cdiv(p.nqb, GQ) * mf_cdiv(p.R, GR),
           ATT_THREADS * G, smem, stream, p);
  }
};

template <int DP, bool MMA>
struct dkdv_launch {
  const att_params &p;
  cudaStream_t stream;
  template <int GR, int GK>
  void go() const {
    const int G = GR * GK;
    const size_t smem = (2 * G + 4 * GR) * tile_bytes(DP) + 2 * GK * bias_bytes() +
                        GR * 4 * ATT_BQ * sizeof(float) + G * ATT_MS;
    launch(dkdv_kernel<DP, MMA, GR, GK>, (int64_t)p.B * p.H * mf_cdiv(p.nkb, GK) * mf_cdiv(p.R, GR),
           ATT_THREADS * G, smem, stream, p);
  }
};

template <int DP, bool MMA, bool DBIAS>
struct dq_launch {
  const att_params &p;
  cudaStream_t stream;
  template <int GR, int GQ>
  void go() const {
    const int G = GR * GQ;
    const size_t smem = (2 * G + 4 * GR) * tile_bytes(DP) + 2 * GQ * bias_bytes() + 2 * GR * ATT_MS;
    launch(dq_kernel<DP, MMA, DBIAS, GR, GQ>, (int64_t)p.B * p.H * mf_cdiv(p.nqb, GQ) * mf_cdiv(p.R, GR),
           ATT_THREADS * G, smem, stream, p);
  }
};

/* Row ranges for the dbias pass: its grid (T CTAs, each walking all R rows) is often a
 * little over a whole number of waves (N = 768, H = 4: 576 CTAs on 528 slots, so the last
 * 48 run alone for a whole pass). With rs ranges there are rs·T shorter CTAs; take the rs
 * that minimises ⌈rs·T/slots⌉/rs (the passes' length in units of the unsplit CTA), when
 * it saves at least 5 %, with rs·B·H·Q·K fp32 partial sums fitting in `cap` bytes. */
static int dbias_ranges(int64_t T, int64_t slots, int R, int64_t bhqk, size_t cap) {
  if (slots <= 0 || T <= 0) return 1;
  int best = 1;
  double cost = (double)((T + slots - 1) / slots);
  for (int rs = 2; rs <= 16 && rs <= R; rs++) {
    if ((size_t)rs * (size_t)bhqk * sizeof(float) > cap) break;
    const double c = (double)((rs * T + slots - 1) / slots) / rs;
    if (c < 0.95 * cost) {
      best = rs;
      cost = c;
    }
  }
  return best;
}

/* A dbias pass of T CTAs (kern, threads, smem): split into row ranges when that fills the
 * last wave better (dbias_ranges; the partial sums in scratch), then reduced. */
template <typename Kern, typename Go>
static void dbias_run_with(Kern kern, int64_t T, int threads, size_t smem, const att_params &p,
                           float *scratch, size_t scratch_bytes, cudaStream_t stream, Go &&go) {
  const int64_t bhqk = (int64_t)p.B * p.H * p.Q * p.K;
  att_params q = p;
  q.rs = 1;
  if (scratch && T > 0) {
    int dev = 0, sms = 0, per_sm = 0;
    MF_CHECK_CUDA(cudaGetDevice(&dev));
    MF_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    MF_CHECK_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    MF_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, threads, smem));
    q.rs = dbias_ranges(T, (int64_t)sms * per_sm, p.R, bhqk, scratch_bytes);
    q.dbp = scratch;
  }
  go(q, T * q.rs);
  if (q.rs > 1) {
    dbias_reduce_kernel<<<mf_cdiv(bhqk, 256), 256, 0, stream>>>(p.dbias, scratch, q.rs, bhqk, p.K, p.bl);
    MF_CHECK_LAUNCH();
  }
}

/* dbias_run_with for a kernel that takes the parameters alone. */
template <typename Kern>
static void dbias_run(Kern kern, int64_t T, int threads, size_t smem, const att_params &p,
                      float *scratch, size_t scratch_bytes, cudaStream_t stream) {
  dbias_run_with(kern, T, threads, smem, p, scratch, scratch_bytes, stream,
                 [&](const att_params &q, int64_t grid) { launch(kern, grid, threads, smem, stream, q); });
}

template <int DP, bool MMA>
struct dbias_launch {
  const att_params &p;
  cudaStream_t stream;
  float *scratch;   /* dq's buffer (overwritten later by the dq pass), or NULL */
  size_t scratch_bytes;
  template <int GQ, int GK>
  void go() const {
    const int G = GQ * GK;
    const size_t smem = 4 * (GQ + GK) * tile_bytes(DP) + G * bias_bytes() +
                        GQ * 4 * ATT_BQ * sizeof(float) + 2 * GK * ATT_MS;
    const int64_t T = (int64_t)p.B * p.H * mf_cdiv(p.nqb, GQ) * mf_cdiv(p.nkb, GK);
    dbias_run(dbias_kernel<DP, MMA, GQ, GK>, T, ATT_THREADS * G, smem, p, scratch, scratch_bytes, stream);
  }
};

/* 1: the dbias pass on wgmma (dbias_wg_kernel) where D = 32; 0 (default): mma.sync. The
 * wgmma kernel is correct but slower (H200, 2026-11-30, N = 768 triangle attention, the
 * attention backward 7.13 ms against 5.79): one warpgroup per CTA loads its own Q, dO, K,
 * V tiles — 4 bytes of L2 traffic per logit, twice dbias_kernel's 2 × 2 tile sharing — and
 * this pass is bound by that traffic, not by the tensor core (README step 12). */
static int g_dbias_wg = 0;

extern "C" int mf_attention_cuda_set_dbias_wg(int on) {
  const int old = g_dbias_wg;
  g_dbias_wg = on != 0;
  return old;
}

/* The TMA kernels (attention_cuda.h, mf_attention_cuda_set_tma): a bit mask, all on by
 * default where D = 32; the count of their launches lets the tests see that they ran. */
/* fwd 5 CTAs per SM: 1.345 ms against 1.431 at N = 768; the wgmma kernels: fwd+bwd 6.65 -> 5.98 ms
 * at N = 768 (README step 15); the fused pass over key-tile pairs: 5.90 -> 5.36 ms; the dbias pass over
 * query-tile pairs: module backward 6.41 -> 6.29 ms (step 16) */
static int g_tma = MF_ATT_TMA_FWD | MF_ATT_TMA_DBIAS | MF_ATT_TMA_FUSED | MF_ATT_TMA_FWD_WG | MF_ATT_TMA_DBIAS_WG |
                   MF_ATT_TMA_FUSED_WG | MF_ATT_TMA_FUSED_WG2 | MF_ATT_TMA_DBIAS_WG2 | MF_ATT_TMA_MASK |
                   MF_ATT_TMA_GATE;
static std::atomic<long> g_tma_calls{0};

extern "C" int mf_attention_cuda_set_tma(int mask) {
  const int old = g_tma;
  g_tma = mask & (MF_ATT_TMA_FWD | MF_ATT_TMA_FWD4 | MF_ATT_TMA_DBIAS | MF_ATT_TMA_FUSED | MF_ATT_TMA_FUSED_WG |
                  MF_ATT_TMA_DBIAS_WG | MF_ATT_TMA_FWD_WG | MF_ATT_TMA_FUSED_WG2 | MF_ATT_TMA_DBIAS_WG2 |
                  MF_ATT_TMA_MASK | MF_ATT_TMA_GATE);
  return old;
}
extern "C" long mf_attention_cuda_tma_calls(void) { return g_tma_calls.load(); }

/* Tensor map of a (B, R, H, rows, 32) bf16 view with element strides s: dimension 0 the
 * head dim (contiguous), dimensions 1..4 the view's (row, h, r, b) in that order whatever
 * their strides (TMA does not need them sorted; fixed coordinates spare the kernels' copy
 * issue a runtime permutation, README step 19), a size-1 dimension given a stride past
 * every extent (its value is never used; TMA wants multiples of 16 bytes). Box: 32 × 64
 * rows, 64-byte swizzle. false when a stride is not a multiple of 16 bytes or the driver
 * refuses. */
static bool view_map(CUtensorMap *m, const bf16 *base, const mf_attn_stride &s, int rows,
                     const att_params &p, uint32_t box_rows = ATT_BK) {
  struct dim {
    uint64_t n, stride;
  } d[4] = {{(uint64_t)rows, (uint64_t)s.row * 2}, {(uint64_t)p.H, (uint64_t)s.h * 2},
            {(uint64_t)p.R, (uint64_t)s.r * 2}, {(uint64_t)p.B, (uint64_t)s.b * 2}};
  uint64_t ext = 64;
  for (int i = 0; i < 4; i++)
    if (d[i].n > 1) {
      if (d[i].stride % 16 != 0 || d[i].stride == 0) return false;
      if (d[i].n * d[i].stride > ext) ext = d[i].n * d[i].stride;
    }
  for (int i = 0; i < 4; i++)
    if (d[i].n <= 1) d[i].stride = (ext + 15) / 16 * 16;
  uint64_t dims[5] = {32, 0, 0, 0, 0}, strides[4];
  uint32_t box[5] = {32, box_rows, 1, 1, 1};
  for (int i = 0; i < 4; i++) {
    dims[i + 1] = d[i].n;
    strides[i] = d[i].stride;
  }
  return mf_tma_encode_bf16(m, base, 5, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_64B) == 0;
}

/* Tensor map of the key mask (B·R rows of K bytes; K % 16 == 0 and a 16-byte aligned
 * base, else false: the kernels then stage the flags from warp 0): box 64 keys × 1 row,
 * zeros past K (masked). Returns whether p.mtma may be set. */
static bool mask_map(CUtensorMap *m, const att_params &p) {
  if (!p.mask || p.K % 16 != 0 || (uintptr_t)p.mask % 16 != 0) return false;
  const uint64_t dims[2] = {(uint64_t)p.K, (uint64_t)p.B * p.R}, strides[1] = {(uint64_t)p.K};
  const uint32_t box[2] = {ATT_BK, 1};
  return mf_tma_encode(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.mask, 2, dims, strides, box,
                       CU_TENSOR_MAP_SWIZZLE_NONE) == 0;
}

/* Tensor map of the bias (B, H, Q, ·) with rows p.bl elements apart (p.bl % 8 == 0): box
 * 64 keys × 64 queries, 128-byte swizzle. */
static bool bias_map(CUtensorMap *m, const att_params &p) {
  const uint64_t dims[4] = {(uint64_t)p.K, (uint64_t)p.Q, (uint64_t)p.H, (uint64_t)p.B};
  const uint64_t bl = (uint64_t)p.bl * 2;
  const uint64_t strides[3] = {bl, bl * p.Q, bl * p.Q * p.H};
  const uint32_t box[4] = {ATT_BK, ATT_BQ, 1, 1};
  return mf_tma_encode_bf16(m, p.bias, 4, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B) == 0;
}

/* Runs the forward with fwd_tma_kernel when it applies (D = 32, tensor cores, keys, a
 * bias with 16-byte rows, maps the driver accepts); false: the caller runs fwd_kernel. */
static bool forward_tma(const att_params &p, cudaStream_t stream) {
  if (!(g_tma & MF_ATT_TMA_FWD) || p.D != 32 || p.K == 0 || (p.bias && p.bl % 8 != 0)) return false;
  att_tmaps tm;
  memset(&tm, 0, sizeof tm);
  if (!view_map(&tm.q, p.q, p.sq, p.Q, p) || !view_map(&tm.k, p.k, p.sk, p.K, p) ||
      !view_map(&tm.v, p.v, p.sv, p.K, p))
    return false;
  if (p.bias && !bias_map(&tm.bias, p)) return false;
  const bool wg = g_tma & MF_ATT_TMA_FWD_WG;
  att_params pm = p;
  pm.mtma = wg && mask_map(&tm.mask, p) && (g_tma & MF_ATT_TMA_MASK);
  pm.gtma = p.gate && (g_tma & MF_ATT_TMA_GATE) && view_map(&tm.gate, p.gate, p.sg, p.Q, p);
  const int64_t grid = (int64_t)p.B * p.H * p.nqb * p.R;
  if (grid == 0) return true;
  MF_ASSERT(grid < 2147483647LL, "attention grid of %lld CTAs", (long long)grid);
  const bool f4 = g_tma & MF_ATT_TMA_FWD4;
  auto kern = pm.mtma ? (f4 ? fwd_tma_kernel<4, true, true> : fwd_tma_kernel<5, true, true>)
              : f4    ? (wg ? fwd_tma_kernel<4, true> : fwd_tma_kernel<4, false>)
                      : (wg ? fwd_tma_kernel<5, true> : fwd_tma_kernel<5, false>);
  const int smem = TMA_FWD_SMEM + (pm.gtma ? TMA_FWD_GATE : 0);
  MF_CHECK_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kern<<<(unsigned)grid, ATT_THREADS, smem, stream>>>(pm, tm);
  MF_CHECK_LAUNCH();
  g_tma_calls++;
  return true;
}

/* The dbias pass with dbias_tma_kernel when it applies (D = 32, maps of q, dO, k, v the
 * driver accepts); false: the caller runs dbias_kernel. */
static bool dbias_tma(const att_params &p, float *scratch, size_t scratch_bytes, cudaStream_t stream) {
  if (!(g_tma & MF_ATT_TMA_DBIAS) || p.D != 32 || p.Q == 0 || p.K == 0) return false;
  att_tmaps tm;
  memset(&tm, 0, sizeof tm);
  if (!view_map(&tm.q, p.q, p.sq, p.Q, p) || !view_map(&tm.dO, p.dO, p.sdO, p.Q, p) ||
      !view_map(&tm.k, p.k, p.sk, p.K, p) || !view_map(&tm.v, p.v, p.sv, p.K, p))
    return false;
  const bool wg = g_tma & MF_ATT_TMA_DBIAS_WG, two = wg && (g_tma & MF_ATT_TMA_DBIAS_WG2);
  if (two && (!view_map(&tm.q2, p.q, p.sq, p.Q, p, 2 * ATT_BQ) || !view_map(&tm.dO2, p.dO, p.sdO, p.Q, p, 2 * ATT_BQ)))
    return false;
  auto kern = two ? dbias_tma_kernel<true, 2> : wg ? dbias_tma_kernel<true, 1> : dbias_tma_kernel<false, 1>;
  const int KQ = two ? 2 : 1;
  const size_t smem = TD_SMEM_K(KQ);
  att_params pm = p;
  pm.mtma = mask_map(&tm.mask, p) && (g_tma & MF_ATT_TMA_MASK);
  dbias_run_with(kern, (int64_t)p.B * p.H * ((p.nqb + KQ - 1) / KQ) * p.nkb, ATT_THREADS, smem, pm, scratch,
                 scratch_bytes, stream, [&](const att_params &q, int64_t grid) {
                   if (grid == 0) return;
                   MF_ASSERT(grid < 2147483647LL, "attention grid of %lld CTAs", (long long)grid);
                   MF_CHECK_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
                   kern<<<(unsigned)grid, ATT_THREADS, smem, stream>>>(q, tm);
                   MF_CHECK_LAUNCH();
                 });
  g_tma_calls++;
  return true;
}

template <int DP, bool MMA>
static void forward_dp(const att_params &p, cudaStream_t stream) {
  if constexpr (MMA && DP == 32)
    if (pick_cfgs(p).fwd == 0 && g_variant != 2 && forward_tma(p, stream)) return;
  with_cfg<DP, MMA>(pick_cfgs(p).fwd, fwd_launch<DP, MMA>{p, stream});
}

/* The fused dK/dV/dQ pass: shared memory for the accumulator in mode GACC, and the
 * grid. Global mode: one CTA per resident slot (SMs × occupancy), at most one per slab;
 * shared mode: one CTA per slab. */
static size_t fused_smem(int DP, bool gacc, int nqb) {
  const size_t acc = (size_t)(gacc ? 2 : nqb) * 64 * DP * sizeof(float);
  return 6 * tile_bytes(DP) + 2 * bias_bytes() + (size_t)ATT_BK * (ATT_BQ + 8) * sizeof(bf16) +
         4 * ATT_BQ * sizeof(float) + acc + ATT_MS;
}
/* CTAs per SM of the fused pass in mode GACC (0: it does not fit this GPU's shared
 * memory); *slots = SMs × that. The global mode's shared memory does not depend on nqb,
 * so its answer is cached per device: the workspace sizer asks for every crop up to N_max
 * (mf_pf_cuda_block_workspace_upto), and each uncached answer costs five CUDA calls. */
#define ATT_OCC_DEVICES 64
/* CTAs per SM of kern (threads, smem bytes), cached in cache[device] when `cached`. */
template <typename Kern>
static int occupancy(Kern kern, int threads, size_t smem, bool cached, std::atomic<int> *cache,
                     int64_t *slots) {
  int dev = 0;
  MF_CHECK_CUDA(cudaGetDevice(&dev));
  cached = cached && dev >= 0 && dev < ATT_OCC_DEVICES;
  if (cached) {
    const int c = cache[dev].load(std::memory_order_relaxed); /* (sms << 8 | per_sm) + 1; 0 = unknown */
    if (c > 0) {
      if (slots) *slots = (int64_t)((c - 1) >> 8) * ((c - 1) & 255);
      return (c - 1) & 255;
    }
  }
  int sms = 0, per_sm = 0, maxs = 0;
  MF_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  MF_CHECK_CUDA(cudaDeviceGetAttribute(&maxs, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (smem <= (size_t)maxs) {
    MF_CHECK_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    MF_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, threads, smem));
  }
  if (per_sm > 255) per_sm = 255;
  if (cached) cache[dev].store(((sms << 8) | per_sm) + 1, std::memory_order_relaxed);
  if (slots) *slots = (int64_t)sms * per_sm;
  return per_sm;
}
template <int DP, bool GACC>
static int fused_occupancy(int nqb, int64_t *slots) {
  static std::atomic<int> cache[ATT_OCC_DEVICES];
  return occupancy(fused_kernel<DP, GACC, ATT_FUSED_SCHED>, ATT_THREADS, fused_smem(DP, GACC, nqb),
                   GACC, cache, slots);
}
/* fused2_kernel: shared memory (independent of nqb) and CTAs per SM, cached per device */
static size_t fused2_smem(int DP) {
  return 8 * tile_bytes(DP) + 4 * bias_bytes() + (size_t)2 * ATT_BK * (ATT_BQ + 8) * sizeof(bf16) +
         4 * ATT_BQ * sizeof(float) + (size_t)2 * 2 * ATT_WARPS * (DP / 16) * 32 * sizeof(float4) +
         2 * ATT_MS;
}
template <int DP, int MINB>
static int fused2_occupancy(int64_t *slots) {
  static std::atomic<int> cache[ATT_OCC_DEVICES];
  return occupancy(fused2_kernel<DP, MINB>, 2 * ATT_THREADS, fused2_smem(DP), true, cache, slots);
}
/* fp32 scratch (bytes) of the global mode: min(slabs, resident CTAs) × nqb·64·DP, for the
 * kernel of any variant (fused_kernel, fused2_kernel of either bound). */
template <int DP>
static size_t fused_scratch_bytes(const att_params &p) {
  int64_t slots = 0, s2 = 0;
  fused_occupancy<DP, true>(p.nqb, &slots);
  if constexpr (DP % 32 == 0) {
    fused2_occupancy<DP, 1>(&s2);
    slots = s2 > slots ? s2 : slots;
    fused2_occupancy<DP, 2>(&s2);
    slots = s2 > slots ? s2 : slots;
  }
  const int64_t slabs = (int64_t)p.B * p.R * p.H, grid = slabs < slots ? slabs : slots;
  return (size_t)grid * p.nqb * 64 * DP * sizeof(float);
}

/* Uses the fused pass for dK, dV and dQ together when R > 1 (for R = 1 its grid is only
 * B·H slabs) and the variant asks for it; the dQ accumulator goes to shared memory when
 * that costs no occupancy against the global mode (variant 7), or as forced (8, 9). */
/* The fused pass with fused_tma_kernel on `grid` CTAs (the global-accumulator mode's grid,
 * for which the scratch is sized) when it applies (D = 32, maps of q, dO, k, v and the bias
 * the driver accepts); false: the caller runs fused_kernel. */
static int g_fused_per_sm = 0; /* mf_attention_cuda_set_fused_grid */

extern "C" int mf_attention_cuda_set_fused_grid(int per_sm) {
  const int old = g_fused_per_sm;
  g_fused_per_sm = per_sm < 0 ? 0 : per_sm;
  return old;
}

static bool fused_tma(const att_params &p, int64_t grid, cudaStream_t stream) {
  if (!(g_tma & MF_ATT_TMA_FUSED) || p.D != 32 || p.Q == 0 || p.K == 0 || (p.bias && p.bl % 8 != 0))
    return false;
  if (g_fused_per_sm > 0) { /* a smaller persistent grid (fewer slabs in flight); the scratch is
                              * sized for the default one, so never a larger one */
    int dev = 0, sms = 0;
    MF_CHECK_CUDA(cudaGetDevice(&dev));
    MF_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int64_t cap = (int64_t)sms * g_fused_per_sm;
    if (cap < grid) grid = cap;
  }
  att_tmaps tm;
  memset(&tm, 0, sizeof tm);
  if (!view_map(&tm.q, p.q, p.sq, p.Q, p) || !view_map(&tm.dO, p.dO, p.sdO, p.Q, p))
    return false;
  if ((g_tma & MF_ATT_TMA_FUSED_WG) &&
      (!view_map(&tm.k, p.k, p.sk, p.K, p) || !view_map(&tm.v, p.v, p.sv, p.K, p)))
    return false;
  if (p.bias && !bias_map(&tm.bias, p)) return false;
  if (grid == 0) return true;
  if (g_tma & MF_ATT_TMA_FUSED_WG) { /* on its own persistent grid */
    static std::atomic<int> occ_cache[4][ATT_OCC_DEVICES];
    const bool two = g_tma & MF_ATT_TMA_FUSED_WG2, sc = p.scale == ATT_SCALE32;
    auto kern = two ? (sc ? fused_wg_kernel<2, true> : fused_wg_kernel<2>)
                    : (sc ? fused_wg_kernel<1, true> : fused_wg_kernel<1>);
    const size_t smem = two ? TW_SMEM_K(2) : TW_SMEM_K(1);
    int64_t slots = 0;
    MF_ASSERT(occupancy(kern, ATT_THREADS, smem, true, occ_cache[2 * two + sc], &slots) > 0,
              "attention: fused_wg_kernel does not fit");
    if (slots < grid) grid = slots; /* the scratch is sized for the default grid, never a larger one */
    kern<<<(unsigned)grid, ATT_THREADS, smem, stream>>>(p, tm);
    MF_CHECK_LAUNCH();
    g_tma_calls++;
    return true;
  }
  MF_CHECK_CUDA(cudaFuncSetAttribute(fused_tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, TF_SMEM));
  fused_tma_kernel<<<(unsigned)grid, ATT_THREADS, TF_SMEM, stream>>>(p, tm);
  MF_CHECK_LAUNCH();
  g_tma_calls++;
  return true;
}

template <int DP>
static void fused_launch(const att_params &p, int variant, float *scratch, size_t scratch_bytes,
                         cudaStream_t stream) {
  int64_t gslots = 0;
  const int occ_g = fused_occupancy<DP, true>(p.nqb, &gslots);
  const int occ_s = fused_occupancy<DP, false>(p.nqb, NULL);
  MF_ASSERT(occ_g > 0, "attention: fused pass does not fit");
  const bool gacc = variant == 8 || variant >= 10 || (variant != 9 && occ_s < occ_g) || occ_s == 0;
  const int64_t slabs = (int64_t)p.B * p.R * p.H;
  att_params q = p;
  if constexpr (DP % 32 == 0) {
    /* two warpgroups on key-tile pairs: forced (12, 13), or by default from
     * ATT_FUSED2_MIN_QB query tiles on (README step 10) unless the wgmma TMA pass runs
     * (README step 15: it is faster at every N measured) */
    const bool wg = DP == 32 && (g_tma & MF_ATT_TMA_FUSED) && (g_tma & MF_ATT_TMA_FUSED_WG);
    if (variant == 7 && p.nqb >= ATT_FUSED2_MIN_QB && !wg) variant = 12;
    if (variant == 12 || variant == 13) {
      int64_t slots2 = 0;
      const int occ2 = variant == 12 ? fused2_occupancy<DP, 1>(&slots2) : fused2_occupancy<DP, 2>(&slots2);
      if (occ2 > 0) {
        const int64_t grid = slabs < slots2 ? slabs : slots2;
        MF_ASSERT(scratch && (size_t)grid * p.nqb * 64 * DP * sizeof(float) <= scratch_bytes,
                  "attention: fused pass scratch of %zu bytes is short", scratch_bytes);
        q.dqacc = scratch;
        if (variant == 12) launch(fused2_kernel<DP, 1>, grid, 2 * ATT_THREADS, fused2_smem(DP), stream, q);
        else launch(fused2_kernel<DP, 2>, grid, 2 * ATT_THREADS, fused2_smem(DP), stream, q);
        return;
      }
    }
  }
  if (gacc) {
    const int64_t grid = slabs < gslots ? slabs : gslots;
    MF_ASSERT(scratch && (size_t)grid * p.nqb * 64 * DP * sizeof(float) <= scratch_bytes,
              "attention: fused pass scratch of %zu bytes is short", scratch_bytes);
    q.dqacc = scratch;
    if (DP == 32 && (variant == 7 || variant == 8) && fused_tma(q, grid, stream)) return;
    const size_t smem = fused_smem(DP, true, p.nqb);
    if (variant == 10) launch(fused_kernel<DP, true, 0>, grid, ATT_THREADS, smem, stream, q);
    else if (variant == 11) launch(fused_kernel<DP, true, 2>, grid, ATT_THREADS, smem, stream, q);
    else launch(fused_kernel<DP, true, ATT_FUSED_SCHED>, grid, ATT_THREADS, smem, stream, q);
  } else {
    launch(fused_kernel<DP, false, ATT_FUSED_SCHED>, slabs, ATT_THREADS, fused_smem(DP, false, p.nqb), stream, q);
  }
}

static int effective_variant(void) { return g_variant == 0 ? ATT_DEFAULT_VARIANT : g_variant; }


template <int DP, bool MMA>
static void backward_dp(const att_params &p, bool want_dkdv, bool want_dq, bool want_dbias,
                        bool dq_packed, float *scratch, size_t scratch_bytes, cudaStream_t stream) {
  const att_cfgs c = pick_cfgs(p);
  const int v = effective_variant();
  /* the fused pass where it fits this GPU (global mode; else the dK/dV and dQ passes) */
  const bool fused = MMA && v >= 7 && p.R > 1 && want_dkdv && want_dq &&
                     fused_occupancy<DP, true>(p.nqb, NULL) > 0;
  if (want_dkdv && !fused) with_cfg<DP, MMA>(c.dkdv, dkdv_launch<DP, MMA>{p, stream});
  const bool dbias_in_dq = want_dbias && want_dq && p.R == 1; /* R = 1: layout (1, 1) */
  if (want_dbias && !dbias_in_dq) {
    /* before dq and the fused pass: the split pass's partial sums borrow dq's buffer when
     * it is packed, or the workspace's scratch (the fused pass's, used only after it),
     * whichever is larger */
    float *sbuf = NULL;
    size_t sbytes = 0;
    if (MMA && v >= 6) {
      if (want_dq && dq_packed) {
        sbuf = (float *)p.dq;
        sbytes = (size_t)p.B * p.R * p.H * p.Q * p.D * sizeof(bf16);
      }
      if (scratch_bytes > sbytes) {
        sbuf = scratch;
        sbytes = scratch_bytes;
      }
    }
    if (MMA && DP == 32 && p.D == 32 && !g_dbias_wg && pick_cfgs(p).dbias == 0 && v != 2 &&
        dbias_tma(p, sbuf, sbytes, stream)) {
      /* done */
    } else if (MMA && DP == 32 && p.D == 32 && g_dbias_wg)
      dbias_run(dbias_wg_kernel, (int64_t)p.B * p.H * p.nqb * p.nkb, ATT_THREADS, dbias_wg_smem(), p,
                sbuf, sbytes, stream);
    else
      with_cfg<DP, MMA>(c.dbias, dbias_launch<DP, MMA>{p, stream, sbuf, sbytes});
  }
  if (fused) {
    if constexpr (MMA) fused_launch<DP>(p, v, scratch, scratch_bytes, stream);
  } else if (want_dq) {
    if (dbias_in_dq) dq_launch<DP, MMA, true>{p, stream}.template go<1, 1>();
    else with_cfg<DP, MMA>(c.dq, dq_launch<DP, MMA, false>{p, stream});
  }
}

template <int DP, bool MMA>
static void scratch_dp(const att_params &p, size_t *bytes) {
  *bytes = p.R > 1 ? fused_scratch_bytes<DP>(p) : 0;
}

#define MF_ATT_DISPATCH(fn, DPV, ...)                                        \
  do {                                                                       \
    const bool mma_ = g_variant != 1;                                        \
    switch (DPV) {                                                           \
    case 16: mma_ ? fn<16, true>(__VA_ARGS__) : fn<16, false>(__VA_ARGS__); break; \
    case 32: mma_ ? fn<32, true>(__VA_ARGS__) : fn<32, false>(__VA_ARGS__); break; \
    case 48: mma_ ? fn<48, true>(__VA_ARGS__) : fn<48, false>(__VA_ARGS__); break; \
    default: mma_ ? fn<64, true>(__VA_ARGS__) : fn<64, false>(__VA_ARGS__); break; \
    }                                                                        \
  } while (0)

extern "C" int mf_attention_cuda_set_fwd_order(int order) {
  MF_ASSERT(order >= 0 && order <= 2, "attention forward order %d", order);
  const int old = g_fwd_order;
  g_fwd_order = order;
  return old;
}

extern "C" int mf_attention_cuda_set_variant(int variant) {
  MF_ASSERT(variant >= 0 && variant <= 13, "attention variant %d", variant);
  const int old = g_variant;
  g_variant = variant;
  return old;
}

/* ------------------------------------------------------------------------------------
 * Strided views (attention_cuda.h). */

static mf_attn_stride packed_stride(const mf_attn_dims &d, int rows) {
  const int64_t hs = (int64_t)rows * d.D;
  return mf_attn_stride{(int64_t)d.R * d.H * hs, (int64_t)d.H * hs, hs, d.D};
}

extern "C" mf_attn_views mf_attn_packed_views(mf_attn_dims d) {
  const mf_attn_stride sq = packed_stride(d, d.Q), sk = packed_stride(d, d.K);
  return mf_attn_views{sq, sk, sk, sq, sq, sq, sq, sk, sk, sq, 0};
}

static bool same_stride(const mf_attn_stride &a, const mf_attn_stride &b) {
  return a.b == b.b && a.r == b.r && a.h == b.h && a.row == b.row;
}

/* Strides in elements, multiples of 8 (16-byte rows given 16-byte aligned bases), row
 * strides at least D and small enough for the kernels' 32-bit in-tile offsets. */
static void check_stride(const char *name, const mf_attn_stride &s, const mf_attn_dims &d) {
  MF_ASSERT(s.b % 8 == 0 && s.r % 8 == 0 && s.h % 8 == 0 && s.row % 8 == 0,
            "attention view %s: strides (%lld, %lld, %lld, %lld) must be multiples of 8", name,
            (long long)s.b, (long long)s.r, (long long)s.h, (long long)s.row);
  MF_ASSERT(s.b >= 0 && s.r >= 0 && s.h >= 0 && s.row >= d.D && s.row * 64 < 2147483647LL,
            "attention view %s: row stride %lld (D = %d)", name, (long long)s.row, d.D);
}

static void set_strides(att_params &p, const mf_attn_views &v) {
  p.sq = v.q; p.sk = v.k; p.sv = v.v; p.sg = v.gate; p.so = v.out;
  p.sdq = v.dq; p.sdk = v.dk; p.sdv = v.dv;
  p.bl = v.bias_row ? v.bias_row : p.K;
}
/* views.bias_row: 0 (dense) or at least K */
static void check_bias_row(const mf_attn_views &v, const mf_attn_dims &d) {
  MF_ASSERT(v.bias_row == 0 || (v.bias_row >= d.K && v.bias_row * 64 < 2147483647LL),
            "attention: bias row stride %lld for K = %d (0 = dense, else >= K)",
            (long long)v.bias_row, d.K);
}

/* x (B, R, H, n, D) view ← 0. */
static __global__ void zero_view_kernel(bf16 *x, mf_attn_stride s, int R, int H, int n, int D,
                                        int64_t total) {
  const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= total) return; /* one 8-element chunk per thread */
  const int nc = D / 8;
  const int64_t row = t / nc, brh = row / n, br = brh / H;
  const int c = (int)(t - row * nc) * 8, i = (int)(row - brh * n), h = (int)(brh - br * H);
  const int r = (int)(br % R), b = (int)(br / R);
  *reinterpret_cast<uint4 *>(x + (int64_t)b * s.b + (int64_t)r * s.r + (int64_t)h * s.h +
                             (int64_t)i * s.row + c) = make_uint4(0, 0, 0, 0);
}
static void zero_view(bf16 *x, const mf_attn_stride &s, const mf_attn_dims &d, int n,
                      cudaStream_t stream) {
  const int64_t total = (int64_t)d.B * d.R * d.H * n * (d.D / 8);
  if (!x || total == 0) return;
  zero_view_kernel<<<mf_cdiv(total, 256), 256, 0, stream>>>(x, s, d.R, d.H, n, d.D, total);
  MF_CHECK_LAUNCH();
}

extern "C" void mf_attention_forward_strided_cuda(bf16 *out, float *lse, const bf16 *q,
                                                  const bf16 *k, const bf16 *v, const bf16 *bias,
                                                  const uint8_t *mask, const bf16 *gate,
                                                  mf_attn_dims d, const mf_attn_views *views,
                                                  cudaStream_t stream) {
  const void *ptrs[] = {out, lse, q, k, v, bias, gate};
  check_args(&d, ptrs, 7);
  MF_ASSERT(out && q && k && v && views, "attention forward: out, q, k, v, views are required");
  check_stride("q", views->q, d);
  check_stride("k", views->k, d);
  check_stride("v", views->v, d);
  check_stride("out", views->out, d);
  if (gate) check_stride("gate", views->gate, d);
  check_bias_row(*views, d);
  att_params p = make_params(d);
  set_strides(p, *views);
  p.out = out; p.lse = lse; p.q = q; p.k = k; p.v = v; p.bias = bias; p.mask = mask; p.gate = gate;
  if ((int64_t)d.B * d.R * d.H * d.Q == 0) return;
  /* K = 0: nkb = 0, every row is empty (out = 0, lse = -inf) */
  MF_ATT_DISPATCH(forward_dp, padded_dim(d.D), p, stream);
}

extern "C" void mf_attention_forward_cuda(bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                                          const bf16 *v, const bf16 *bias, const uint8_t *mask,
                                          const bf16 *gate, mf_attn_dims d, cudaStream_t stream) {
  const mf_attn_views pv = mf_attn_packed_views(d);
  mf_attention_forward_strided_cuda(out, lse, q, k, v, bias, mask, gate, d, &pv, stream);
}

/* Workspace layout: the side rows (slab_ld: lse·log2e and Di, fp32, B·R·H·2·QP), padded
 * to 256 bytes; the gated dO (bf16, rows·D), padded; the fused pass's fp32 dQ scratch
 * (global mode; sized for any variant, so that the workspace does not depend on
 * mf_attention_cuda_set_variant). */
static size_t ws_ld_bytes(const mf_attn_dims &d) {
  const size_t qp = (size_t)mf_cdiv(d.Q, ATT_BQ) * ATT_BQ;
  return ((size_t)d.B * d.R * d.H * 2 * qp * sizeof(float) + 255) / 256 * 256;
}
static size_t ws_do_bytes(size_t rows, int D, int has_gate) {
  return has_gate ? (rows * D * sizeof(bf16) + 255) / 256 * 256 : 0;
}
static size_t ws_scratch_bytes(mf_attn_dims d) {
  if ((int64_t)d.B * d.R * d.H * d.Q == 0 || d.K == 0 || d.R <= 1) return 0;
  const att_params p = make_params(d);
  size_t s = 0;
  switch (padded_dim(d.D)) {
  case 16: scratch_dp<16, true>(p, &s); break;
  case 32: scratch_dp<32, true>(p, &s); break;
  case 48: scratch_dp<48, true>(p, &s); break;
  default: scratch_dp<64, true>(p, &s); break;
  }
  return s;
}

extern "C" size_t mf_attention_backward_cuda_workspace(mf_attn_dims d, int has_gate) {
  const size_t rows = (size_t)d.B * d.R * d.H * d.Q;
  return ws_ld_bytes(d) + ws_do_bytes(rows, d.D, has_gate) + ws_scratch_bytes(d);
}

/* The strided backward's scratch also holds the split dbias pass's partial sums for up
 * to ATT_SPLIT_WS row ranges (the packed backward borrows dq's buffer for up to 16; 10 is
 * what N = 768 uses), at most the dq buffer's size. */
#define ATT_SPLIT_WS 10
extern "C" size_t mf_attention_backward_strided_cuda_workspace(mf_attn_dims d, int has_gate) {
  const size_t rows = (size_t)d.B * d.R * d.H * d.Q;
  size_t split = 0;
  if (rows > 0 && d.K > 0 && d.R > 1) {
    const size_t part = (size_t)(d.R < ATT_SPLIT_WS ? d.R : ATT_SPLIT_WS) * d.B * d.H * d.Q * d.K * sizeof(float);
    const size_t dqb = rows * d.D * sizeof(bf16);
    split = part < dqb ? part : dqb;
  }
  const size_t fs = ws_scratch_bytes(d);
  return ws_ld_bytes(d) + ws_do_bytes(rows, d.D, has_gate) + (split > fs ? split : fs);
}

/* The checks both strided backwards make of the arguments they share. */
static void check_backward_views(const bf16 *dq, const bf16 *dk, const bf16 *dv,
                                 const mf_attn_views &vw, const mf_attn_dims &d) {
  check_stride("q", vw.q, d);
  check_stride("k", vw.k, d);
  check_stride("v", vw.v, d);
  check_stride("dout", vw.dout, d);
  if (dq) check_stride("dq", vw.dq, d);
  if (dk) check_stride("dk", vw.dk, d);
  if (dv) check_stride("dv", vw.dv, d);
  check_bias_row(vw, d);
}

/* The backward after its prologue (p.ld, p.dO, p.sdO set): the passes, or with no keys dq = 0. */
static void backward_run(att_params &p, bf16 *dq, const mf_attn_views &vw, const mf_attn_dims &d,
                         bool want_dkdv, bool want_dbias, float *scratch, size_t scratch_bytes,
                         cudaStream_t stream) {
  if (d.K == 0) { /* no keys: dq = 0 (dk, dv, dbias are empty) */
    zero_view(dq, vw.dq, d, d.Q, stream);
    return;
  }
  const bool dq_packed = same_stride(vw.dq, packed_stride(d, d.Q));
  MF_ATT_DISPATCH(backward_dp, padded_dim(d.D), p, want_dkdv, dq != NULL, want_dbias, dq_packed,
                  scratch, scratch_bytes, stream);
}

/* The start both strided backwards share: dbias zeroed where there is nothing to sum (the
 * padding columns of a strided dbias too); false when there are no rows (dk, dv zeroed). */
static bool backward_begin(bf16 *dk, bf16 *dv, bf16 *dbias, const mf_attn_views &vw,
                           const mf_attn_dims &d, cudaStream_t stream) {
  const int64_t rows = (int64_t)d.B * d.R * d.H * d.Q;
  if (dbias && (rows == 0 || d.K == 0))
    MF_CHECK_CUDA(cudaMemsetAsync(dbias, 0, (size_t)d.B * d.H * d.Q * (vw.bias_row ? vw.bias_row : d.K) * sizeof(bf16), stream));
  if (rows == 0) {
    zero_view(dk, vw.dk, d, d.K, stream);
    zero_view(dv, vw.dv, d, d.K, stream);
    return false;
  }
  return true;
}

extern "C" void mf_attention_backward_strided_cuda(
    bf16 *dq, bf16 *dk, bf16 *dv, bf16 *dbias, bf16 *dgate, const bf16 *dout, const bf16 *out,
    const float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *bias,
    const uint8_t *mask, const bf16 *gate, mf_attn_dims d, const mf_attn_views *views,
    void *workspace, size_t workspace_bytes, cudaStream_t stream) {
  const void *ptrs[] = {dq, dk, dv, dbias, dgate, dout, out, lse, q, k, v, bias, gate, workspace};
  check_args(&d, ptrs, 14);
  MF_ASSERT(dout && out && lse && q && k && v && views,
            "attention backward: dout, out, lse, q, k, v, views are required");
  MF_ASSERT(!dgate || gate, "attention backward: dgate without a gate");
  MF_ASSERT(!dbias || bias, "attention backward: dbias without a bias");
  MF_ASSERT(workspace_bytes >= mf_attention_backward_cuda_workspace(d, gate != NULL) && workspace,
            "attention backward: workspace of %zu bytes, %zu needed", workspace_bytes,
            mf_attention_backward_cuda_workspace(d, gate != NULL));
  const mf_attn_views &vw = *views;
  check_backward_views(dq, dk, dv, vw, d);
  check_stride("out", vw.out, d);
  if (gate) check_stride("gate", vw.gate, d);
  if (dgate) check_stride("dgate", vw.dgate, d);
  MF_ASSERT(!dgate || (void *)dgate != (void *)dout || same_stride(vw.dgate, vw.dout),
            "attention backward: dgate may alias dout only as the same view");
  const int64_t rows = (int64_t)d.B * d.R * d.H * d.Q;
  if (!backward_begin(dk, dv, dbias, vw, d, stream)) return;
  att_params p = make_params(d);
  set_strides(p, vw);
  p.q = q; p.k = k; p.v = v; p.bias = bias; p.mask = mask; p.gate = gate; p.dout = dout;
  p.lse = const_cast<float *>(lse);
  p.dq = dq; p.dk = dk; p.dv = dv; p.dbias = dbias;
  float *ld = (float *)workspace;
  bf16 *dOeff = gate ? (bf16 *)((char *)workspace + ws_ld_bytes(d)) : NULL;
  const size_t ws_fixed = ws_ld_bytes(d) + ws_do_bytes((size_t)rows, d.D, gate != NULL);
  p.ld = ld;
  p.dO = gate ? dOeff : dout;
  p.sdO = gate ? packed_stride(d, d.Q) : vw.dout;

  const prep_strides ps = {vw.dout, vw.out, vw.gate, vw.dgate};
  const int64_t prows = rows / d.Q * ((int64_t)p.nqb * ATT_BQ); /* padded to whole tiles */
  prep_kernel<<<mf_cdiv(prows * PREP_LPR, 256), 256, 0, stream>>>(ld, dOeff, dgate, dout, out, gate, lse,
                                                       prows, d.D, d.R, d.H, d.Q,
                                                       p.nqb * ATT_BQ, ps);
  MF_CHECK_LAUNCH();
  backward_run(p, dq, vw, d, dk || dv, dbias != NULL, (float *)((char *)workspace + ws_fixed),
               workspace_bytes - ws_fixed, stream);
}

/* ------------------------------------------------------------------------------------
 * The backward with its prologue done by the caller (attention_cuda.h: the side rows). */
extern "C" int mf_attention_side_rows_qp(mf_attn_dims d) { return (int)mf_cdiv(d.Q, ATT_BQ) * ATT_BQ; }
extern "C" size_t mf_attention_side_rows_bytes(mf_attn_dims d) { return ws_ld_bytes(d); }

/* The padding rows q in [Q, QP) of every slab's side rows: lse·log2e = +inf, Di = 0. */
static __global__ void side_pad_kernel(float *side, int64_t slabs, int Q, int QP) {
  const int np = QP - Q;
  const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= slabs * np) return;
  const int64_t s = t / np;
  const int q = Q + (int)(t - s * np);
  side[s * 2 * QP + q] = INFINITY;
  side[s * 2 * QP + QP + q] = 0.f;
}

extern "C" void mf_attention_side_rows_pad_cuda(float *side, mf_attn_dims d, cudaStream_t stream) {
  const int QP = mf_attention_side_rows_qp(d);
  const int64_t total = (int64_t)d.B * d.R * d.H * (QP - d.Q);
  if (total == 0) return;
  MF_ASSERT(side, "attention side rows: NULL");
  side_pad_kernel<<<mf_cdiv(total, 256), 256, 0, stream>>>(side, (int64_t)d.B * d.R * d.H, d.Q, QP);
  MF_CHECK_LAUNCH();
}

extern "C" size_t mf_attention_backward_prepared_cuda_workspace(mf_attn_dims d) {
  const size_t rows = (size_t)d.B * d.R * d.H * d.Q;
  return mf_attention_backward_strided_cuda_workspace(d, 0) - ws_ld_bytes(d) - ws_do_bytes(rows, d.D, 0);
}

extern "C" void mf_attention_backward_prepared_strided_cuda(
    bf16 *dq, bf16 *dk, bf16 *dv, bf16 *dbias, const bf16 *dO, const float *side, const bf16 *q,
    const bf16 *k, const bf16 *v, const bf16 *bias, const uint8_t *mask, mf_attn_dims d,
    const mf_attn_views *views, void *workspace, size_t workspace_bytes, cudaStream_t stream) {
  const void *ptrs[] = {dq, dk, dv, dbias, dO, side, q, k, v, bias, workspace};
  check_args(&d, ptrs, 11);
  MF_ASSERT(dO && side && q && k && v && views,
            "attention backward (prepared): dO, side rows, q, k, v, views are required");
  MF_ASSERT(!dbias || bias, "attention backward: dbias without a bias");
  const size_t need = mf_attention_backward_prepared_cuda_workspace(d);
  MF_ASSERT(workspace_bytes >= need && (workspace || need == 0),
            "attention backward (prepared): workspace of %zu bytes, %zu needed", workspace_bytes, need);
  const mf_attn_views &vw = *views;
  check_backward_views(dq, dk, dv, vw, d);
  if (!backward_begin(dk, dv, dbias, vw, d, stream)) return;
  att_params p = make_params(d);
  set_strides(p, vw);
  p.q = q; p.k = k; p.v = v; p.bias = bias; p.mask = mask;
  p.dq = dq; p.dk = dk; p.dv = dv; p.dbias = dbias;
  p.ld = const_cast<float *>(side);
  p.dO = dO;
  p.sdO = vw.dout;
  backward_run(p, dq, vw, d, dk || dv, dbias != NULL, (float *)workspace, workspace_bytes, stream);
}

extern "C" void mf_attention_backward_cuda(bf16 *dq, bf16 *dk, bf16 *dv, bf16 *dbias, bf16 *dgate,
                                           const bf16 *dout, const bf16 *out, const float *lse,
                                           const bf16 *q, const bf16 *k, const bf16 *v,
                                           const bf16 *bias, const uint8_t *mask, const bf16 *gate,
                                           mf_attn_dims d, void *workspace, size_t workspace_bytes,
                                           cudaStream_t stream) {
  const mf_attn_views pv = mf_attn_packed_views(d);
  mf_attention_backward_strided_cuda(dq, dk, dv, dbias, dgate, dout, out, lse, q, k, v, bias, mask,
                                     gate, d, &pv, workspace, workspace_bytes, stream);
}
