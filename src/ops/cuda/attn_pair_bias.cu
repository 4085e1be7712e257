/* attn_pair_bias.cu — the trunk's single attention with pair bias on the GPU, forward and
 * backward (see attn_pair_bias_cuda.h; the CPU reference is src/ops/cpu/attn_pair_bias.c).
 *
 * Single track (N rows, tiny): LN(s) (mf_ln_rows_cuda) → four cuBLAS GEMMs into one fp32
 * (N, 4·HD) buffer [q | k | v | g] → one re-layout kernel into heads (H, N, D) adding b_q
 * → EvoFlash-3D (B = R = 1, gate fused, key mask; its strided entry points, for the bias
 * layout below) → heads back to (N, HD) → GEMM with W_o (beta = 1 for the residual).
 * Pair track (N² rows, the only large pass): one fused kernel per direction —
 *   forward  apb_bias_fwd_kernel: a warp normalises a row of z (Cz channels in registers),
 *            dots it with W_z (H, Cz) held in registers (γ folded in, β·W_z as a constant),
 *            reduce-scatters the H sums across the warp and the block writes the tile of
 *            rows transposed into bias (H, N, NB) through shared memory (coalesced);
 *   backward apb_bias_bwd_kernel: recomputes the row's LN, dx̂ = Σ_h dbias[h]·W_z[h] from
 *            a shared-memory tile of dbias, LN backward added into dz, and per-lane fp32
 *            partials of dW_z = Σ dbias·LN_z(z), dγ, dβ kept in registers; a block sums its
 *            warps in warp order, the blocks' partials are summed in a fixed order by
 *            mf_colsum_cuda (no atomics; the row → block map depends only on N).
 * The pair pass reads z once in the forward and z, dz once in the backward (writes dz once).
 * Bias layout: bias and dbias are (H, N, NB), pair (i, j) = m (i = m / N, j = m % N) of
 * head h at h·N·NB + i·NB + j, NB = N rounded up to 8 (apb_nb; the attention's
 * views.bias_row). EvoFlash-3D copies bias tiles 16 bytes at a time only when the row
 * stride is a multiple of 8 elements; a dense (H, N, N) with N % 8 != 0 fell back to
 * element-wise copies (triangle attention, the same kernels: 2–2.3× slower at N = 2050
 * than at 2048, H200). The forward kernels zero the padding columns N .. NB − 1 (never read
 * for a logit); the attention never writes those of dbias, and the backward kernels never
 * read them.
 * Three variants of the pair kernels (mf_apb_cuda_set_variant): 1 stages each block's tile
 * of 64 rows of z (and dz) in shared memory, double-buffered with cp.async, so a whole tile
 * of loads is in flight; 0 lets each warp load its own rows (portable); 2 (the default) is
 * 1 with the backward's products on the tensor cores where Cz = 128, H <= 16
 * (apb_bias_bwd_mma_kernel).
 * Pair-kernel limits: Cz <= 128 and H <= 16 (the row and W_z live in registers).
 * Not the CPU reference, not the conditioned (AdaLN) variant. */
#include "attn_pair_bias_cuda.h"

#include <math.h>

#include "attention_cuda.h"
#include "fusion_util.cuh"
#include "ln_linear_cuda.h"
#include "mma_ptx.cuh"

#define APB_WARPS 8
#define APB_THREADS (APB_WARPS * MF_WARP_SIZE)
#define APB_TR 64                /* pair rows per block tile (8 per warp) */
#define APB_FWD_MAX_BLOCKS 1056  /* grid-stride over tiles beyond this */
#define APB_BWD_MAX_BLOCKS 264   /* = the number of dW_z partials (fixed: determinism) */
#define APB_MAX_CZ 128
#define APB_MAX_H 16

/* The row stride of bias and dbias (H, N, NB): N rounded up to 8, so that EvoFlash-3D copies
 * their rows 16 bytes at a time for any N (see the file comment). */
static __host__ __device__ int64_t apb_nb(int N) { return ((int64_t)N + 7) / 8 * 8; }

/* Offset in bias / dbias (H, N, NB) of head h at the pair index m = m0 + r, where
 * m0 = i0·N + j0 (a tile's first pair, split once per tile) and 0 <= r < APB_TR:
 * (h, i, j) = (h, m / N, m % N) at (h·N + i)·NB + j, with a 32-bit division. */
static __device__ __forceinline__ int64_t apb_bias_off(int h, int64_t i0, int j0, int r, int N) {
  const int jr = j0 + r, q = jr / N;
  return ((int64_t)h * N + i0 + q) * apb_nb(N) + (jr - q * N);
}

/* Where pair m0 + r of a tile lies in bias / dbias (H, N, NB): head h's element is at
 * h·hs + off; last: j = N − 1 (the row's padding columns follow). The kernels' threads
 * keep one r (threadIdx % APB_TR) across their heads, so this is split once per tile and
 * thread instead of per element (a 64-bit and a 32-bit division each: the pair-bias
 * forward's store had been a sixth of its issued instructions). */
typedef struct {
  int64_t off, hs;
  bool last;
} apb_pos;
static __device__ __forceinline__ apb_pos apb_tile_pos(int64_t m0, int r, int N) {
  const int64_t i0 = m0 / N;
  const int jr = (int)(m0 - i0 * N) + r, q = jr / N, j = jr - q * N;
  return {(i0 + q) * apb_nb(N) + j, (int64_t)N * apb_nb(N), j == N - 1};
}
static_assert(APB_THREADS % APB_TR == 0, "a thread keeps its tile row r across heads");

/* bias (H, N, NB) ← the tile's fp32 sums tile (HG, APB_TR + 1) of pairs m0 .. m0 + nr − 1,
 * by the whole block (coalesced along the rows j of bias; thread t takes row t % APB_TR of
 * heads t / APB_TR + k·APB_THREADS / APB_TR); the padding columns N .. NB − 1 of a row are
 * zeroed with its last pair (never read for a logit, but the attention copies them with
 * the row's last 16 bytes). */
static __device__ __forceinline__ void apb_store_bias_tile(bf16 *__restrict__ bias,
                                                           const float *tile, int64_t m0, int nr,
                                                           int N, int H) {
  const int r = threadIdx.x % APB_TR;
  if (r >= nr) return;
  const apb_pos ps = apb_tile_pos(m0, r, N);
  const int npad = (int)(apb_nb(N) - N);
  for (int h = threadIdx.x / APB_TR; h < H; h += APB_THREADS / APB_TR) {
    bf16 *e = bias + h * ps.hs + ps.off;
    *e = mf_f32_to_bf16(tile[h * (APB_TR + 1) + r]);
    if (ps.last)
      for (int p = 1; p <= npad; p++) e[p] = mf_f32_to_bf16(0.0f);
  }
}

/* ================================================================ pair kernels */

/* v[0..V) = row values as fp32 (0 past C): mf_row_load_bf16 (fusion_util.cuh, whose
 * mf_row_chan is the channel layout here too), with one 8-byte load per lane for V = 4. */
template <int V, bool CONTIG>
static __device__ __forceinline__ void apb_load_row(float *v, const bf16 *__restrict__ row, int lane,
                                                    int C) {
  if (CONTIG && V == 4) {
    const uint2 u = *(const uint2 *)(row + lane * 4);
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
    v[0] = __low2float(h[0]);
    v[1] = __high2float(h[0]);
    v[2] = __low2float(h[1]);
    v[3] = __high2float(h[1]);
  } else {
    mf_row_load_bf16<V, CONTIG>(v, row, lane, C);
  }
}

template <int V, bool CONTIG>
static __device__ __forceinline__ void apb_store_row(bf16 *__restrict__ row, const float *v, int lane,
                                                     int C) {
  if (CONTIG && V == 4) {
    uint2 u;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&u;
    h[0] = __floats2bfloat162_rn(v[0], v[1]);
    h[1] = __floats2bfloat162_rn(v[2], v[3]);
    *(uint2 *)(row + lane * 4) = u;
  } else if (CONTIG) {
#pragma unroll
    for (int i = 0; i < V; i += 2)
      *(__nv_bfloat162 *)(row + lane * V + i) = __floats2bfloat162_rn(v[i], v[i + 1]);
  } else {
#pragma unroll
    for (int i = 0; i < V; i++) {
      const int c = i * MF_WARP_SIZE + lane;
      if (c < C) row[c] = mf_f32_to_bf16(v[i]);
    }
  }
}

/* Mean and rstd (fp32, two-pass over registers) of a row whose values past C are 0;
 * xh[i] = (x − mean)·rstd, 0 past C. */
template <int V, bool CONTIG>
static __device__ __forceinline__ void apb_normalise(float *xh, float *rs_out, const float *x,
                                                     int lane, int C) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < V; i++) s += x[i];
  const float mu = mf_warp_sum(s) / (float)C;
  float q = 0.0f;
#pragma unroll
  for (int i = 0; i < V; i++) {
    const float d = x[i] - mu;
    q += mf_row_chan<V, CONTIG>(lane, i) < C ? d * d : 0.0f;
  }
  const float rs = 1.0f / sqrtf(mf_warp_sum(q) / (float)C + (float)MF_LN_EPS);
#pragma unroll
  for (int i = 0; i < V; i++) xh[i] = mf_row_chan<V, CONTIG>(lane, i) < C ? (x[i] - mu) * rs : 0.0f;
  *rs_out = rs;
}

/* Reduce-scatter of a[0..2·HALF) over lanes OFF apart: the lane with bit OFF set keeps the
 * upper half, its partner the lower, each adding the other's; recursion halves again. */
template <int HALF, int OFF>
static __device__ __forceinline__ void apb_reduce_scatter(float *a, int lane) {
  const bool up = (lane & OFF) != 0;
#pragma unroll
  for (int k = 0; k < HALF; k++) {
    const float send = up ? a[k] : a[k + HALF];
    const float keep = up ? a[k + HALF] : a[k];
    a[k] = keep + __shfl_xor_sync(0xffffffffu, send, OFF);
  }
  if constexpr (HALF > 1) apb_reduce_scatter<HALF / 2, OFF / 2>(a, lane);
}

/* W_z with γ folded in: wf[h][i] = γ_c·W_z[h, c]; cb[h] = Σ_c β_c·W_z[h, c] (warp-summed);
 * 0 for heads past H and channels past Cz. */
template <int V, bool CONTIG, int HG>
static __device__ __forceinline__ void apb_fwd_weights(float (&wf)[HG][V], float (&cb)[HG],
                                                       const bf16 *gamma, const bf16 *beta,
                                                       const bf16 *w, int lane, int Cz, int H) {
#pragma unroll
  for (int h = 0; h < HG; h++) {
    float t = 0.0f;
#pragma unroll
    for (int i = 0; i < V; i++) {
      const int c = mf_row_chan<V, CONTIG>(lane, i);
      const bool ok = h < H && c < Cz;
      const float wv = ok ? mf_bf16_to_f32(w[(int64_t)h * Cz + c]) : 0.0f;
      wf[h][i] = ok ? mf_bf16_to_f32(gamma[c]) * wv : 0.0f;
      t += ok ? mf_bf16_to_f32(beta[c]) * wv : 0.0f;
    }
    cb[h] = mf_warp_sum(t);
  }
}

/* One row of the forward: LN of the row (registers), its dot products with the HG heads
 * of wf (γ folded in; cb = β·W_z added once, by lane 0), reduce-scattered over the warp:
 * returns the sum of head hl (see the kernels), complete on the writer lanes. */
template <int V, bool CONTIG, int HG>
static __device__ __forceinline__ float apb_fwd_row(const bf16 *row, const float (&wf)[HG][V],
                                                    const float (&cb)[HG], int lane, int Cz) {
  float x[V], xh[V], rs;
  apb_load_row<V, CONTIG>(x, row, lane, Cz);
  apb_normalise<V, CONTIG>(xh, &rs, x, lane, Cz);
  float a[HG];
#pragma unroll
  for (int h = 0; h < HG; h++) {
    float acc = lane == 0 ? cb[h] : 0.0f;
#pragma unroll
    for (int i = 0; i < V; i++) acc = fmaf(xh[i], wf[h][i], acc);
    a[h] = acc;
  }
  apb_reduce_scatter<HG / 2, MF_WARP_SIZE / 2>(a, lane);
#pragma unroll
  for (int off = MF_WARP_SIZE / HG / 2; off >= 1; off /= 2)
    a[0] += __shfl_xor_sync(0xffffffffu, a[0], off);
  return a[0];
}

/* bias (H, N, NB) = (LN_z(z (M, Cz))·W_zᵀ)ᵀ, M = N², padding columns zeroed: see the file
 * comment. HG >= H heads in registers (heads past H have zero weights and are not written). */
template <int V, bool CONTIG, int HG>
static __global__ void __launch_bounds__(APB_THREADS)
apb_bias_fwd_kernel(bf16 *__restrict__ bias, const bf16 *__restrict__ z,
                    const bf16 *__restrict__ gamma, const bf16 *__restrict__ beta,
                    const bf16 *__restrict__ w, int N, int Cz, int H) {
  const int64_t M = (int64_t)N * N;
  __shared__ float tile[HG * (APB_TR + 1)];
  const int lane = threadIdx.x % MF_WARP_SIZE, wp = threadIdx.x / MF_WARP_SIZE;
  float wf[HG][V], cb[HG]; /* W_z with γ folded in, β·W_z: apb_fwd_weights */
  apb_fwd_weights<V, CONTIG, HG>(wf, cb, gamma, beta, w, lane, Cz, H);
  /* after the reduce-scatter below, lane holds the sum of head hl (lanes whose low
   * log2(32/HG) bits are 0 write it) */
  int hl = 0;
#pragma unroll
  for (int half = HG / 2, off = MF_WARP_SIZE / 2; half >= 1; half /= 2, off /= 2)
    hl += (lane & off) ? half : 0;
  const bool writer = (lane & (MF_WARP_SIZE / HG - 1)) == 0 && hl < H;

  const int64_t ntiles = (M + APB_TR - 1) / APB_TR;
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
    const int64_t m0 = t * APB_TR;
    const int nr = (int)(M - m0 < APB_TR ? M - m0 : APB_TR);
    for (int r = wp; r < nr; r += APB_WARPS) {
      const float bh = apb_fwd_row<V, CONTIG, HG>(z + (m0 + r) * Cz, wf, cb, lane, Cz);
      if (writer) tile[hl * (APB_TR + 1) + r] = bh;
    }
    __syncthreads();
    apb_store_bias_tile(bias, tile, m0, nr, N, H);
    __syncthreads();
  }
}

/* Backward of the pair bias: dbias (H, N, NB) → dz (M, Cz) += LN_z backward of
 * dx̂ = Σ_h dbias[h]·W_z[h] (dz may be NULL); part (gridDim.x, H·Cz + 2Cz) = this block's
 * Σ dbias·ẑ (dW_z), Σ dx̂⊙x̂ (dγ), Σ dx̂ (dβ). */
template <int V, bool CONTIG, int HG>
static __global__ void __launch_bounds__(APB_THREADS)
apb_bias_bwd_kernel(bf16 *__restrict__ dz, float *__restrict__ part, const bf16 *__restrict__ dbias,
                    const bf16 *__restrict__ z, const bf16 *__restrict__ gamma,
                    const bf16 *__restrict__ beta, const bf16 *__restrict__ w, int N, int Cz,
                    int H) {
  const int64_t M = (int64_t)N * N;
  __shared__ float dt[HG * (APB_TR + 1)];
  extern __shared__ float red[]; /* (H·Cz + 2Cz) */
  const int lane = threadIdx.x % MF_WARP_SIZE, wp = threadIdx.x / MF_WARP_SIZE;
  float wr[HG][V], gm[V], bt[V], acc[HG][V], pg[V], pb[V];
#pragma unroll
  for (int i = 0; i < V; i++) {
    const int c = mf_row_chan<V, CONTIG>(lane, i);
    gm[i] = c < Cz ? mf_bf16_to_f32(gamma[c]) : 0.0f;
    bt[i] = c < Cz ? mf_bf16_to_f32(beta[c]) : 0.0f;
    pg[i] = pb[i] = 0.0f;
#pragma unroll
    for (int h = 0; h < HG; h++) {
      wr[h][i] = (h < H && c < Cz) ? mf_bf16_to_f32(w[(int64_t)h * Cz + c]) : 0.0f;
      acc[h][i] = 0.0f;
    }
  }
  const int64_t ntiles = (M + APB_TR - 1) / APB_TR;
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
    const int64_t m0 = t * APB_TR;
    const int nr = (int)(M - m0 < APB_TR ? M - m0 : APB_TR);
    const int64_t i0 = m0 / N;
    const int j0 = (int)(m0 - i0 * N);
    for (int idx = threadIdx.x; idx < HG * APB_TR; idx += blockDim.x) {
      const int h = idx / APB_TR, r = idx - h * APB_TR;
      dt[h * (APB_TR + 1) + r] =
          (h < H && r < nr) ? mf_bf16_to_f32(dbias[apb_bias_off(h, i0, j0, r, N)]) : 0.0f;
    }
    __syncthreads();
    for (int r = wp; r < nr; r += APB_WARPS) {
      float x[V], xh[V], rs, dy[V];
      apb_load_row<V, CONTIG>(x, z + (m0 + r) * Cz, lane, Cz);
      apb_normalise<V, CONTIG>(xh, &rs, x, lane, Cz);
#pragma unroll
      for (int i = 0; i < V; i++) dy[i] = 0.0f;
#pragma unroll
      for (int h = 0; h < HG; h++) {
        const float d = dt[h * (APB_TR + 1) + r];
#pragma unroll
        for (int i = 0; i < V; i++) {
          dy[i] = fmaf(d, wr[h][i], dy[i]);
          acc[h][i] = fmaf(d, fmaf(xh[i], gm[i], bt[i]), acc[h][i]);
        }
      }
      float sg = 0.0f, sgx = 0.0f;
#pragma unroll
      for (int i = 0; i < V; i++) {
        pg[i] = fmaf(dy[i], xh[i], pg[i]);
        pb[i] += dy[i];
        const float g = dy[i] * gm[i];
        sg += g;
        sgx = fmaf(g, xh[i], sgx);
      }
      if (dz) {
        sg = mf_warp_sum(sg) / (float)Cz;
        sgx = mf_warp_sum(sgx) / (float)Cz;
        bf16 *row = dz + (m0 + r) * Cz;
        float o[V];
        apb_load_row<V, CONTIG>(o, row, lane, Cz);
#pragma unroll
        for (int i = 0; i < V; i++) o[i] += rs * (dy[i] * gm[i] - sg - xh[i] * sgx);
        apb_store_row<V, CONTIG>(row, o, lane, Cz);
      }
    }
    __syncthreads();
  }
  /* this block's partials: warps added in order 0..APB_WARPS−1 */
  const int HC = H * Cz;
  for (int k = 0; k < APB_WARPS; k++) {
    if (wp == k) {
#pragma unroll
      for (int i = 0; i < V; i++) {
        const int c = mf_row_chan<V, CONTIG>(lane, i);
        if (c >= Cz) continue;
#pragma unroll
        for (int h = 0; h < HG; h++)
          if (h < H) red[h * Cz + c] = (k ? red[h * Cz + c] : 0.0f) + acc[h][i];
        red[HC + c] = (k ? red[HC + c] : 0.0f) + pg[i];
        red[HC + Cz + c] = (k ? red[HC + Cz + c] : 0.0f) + pb[i];
      }
    }
    __syncthreads();
  }
  const int P = HC + 2 * Cz;
  for (int j = threadIdx.x; j < P; j += blockDim.x) part[(int64_t)blockIdx.x * P + j] = red[j];
}

/* ---------------------------------------------------------------- pipelined variant
 * The same two kernels with the block's tile of z rows (and of dz, backward) staged in
 * shared memory, double-buffered: the loads of tile t + gridDim.x are issued (cp.async,
 * 16 bytes, when ASYNC: Cz % 8 == 0 and 16-byte aligned z, dz; else plain copies) before
 * tile t is computed, so a block keeps a whole tile of loads in flight instead of one row
 * per warp; the next tile's dbias values are prefetched into registers likewise. */

static __device__ __forceinline__ void apb_cp16(void *smem, const void *gmem) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
static __device__ __forceinline__ void apb_cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
static __device__ __forceinline__ void apb_cp_wait_all(void) {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* dst (n bf16, shared) ← src (n bf16, global), by the whole block. */
template <bool ASYNC>
static __device__ __forceinline__ void apb_tile_issue(bf16 *dst, const bf16 *__restrict__ src, int n) {
  if (ASYNC) {
    for (int c = threadIdx.x; c < n / 8; c += blockDim.x) apb_cp16(dst + c * 8, src + c * 8);
  } else {
    for (int e = threadIdx.x; e < n; e += blockDim.x) dst[e] = src[e];
  }
}

template <int V, bool CONTIG, int HG, bool ASYNC>
static __global__ void __launch_bounds__(APB_THREADS)
apb_bias_fwd_pipe_kernel(bf16 *__restrict__ bias, const bf16 *__restrict__ z,
                         const bf16 *__restrict__ gamma, const bf16 *__restrict__ beta,
                         const bf16 *__restrict__ w, int N, int Cz, int H) {
  const int64_t M = (int64_t)N * N;
  extern __shared__ __align__(16) unsigned char apb_sm[];
  bf16 *zt = (bf16 *)apb_sm;                         /* (2, APB_TR, Cz) */
  float *tile = (float *)(zt + 2 * APB_TR * Cz);     /* (HG, APB_TR + 1) */
  const int lane = threadIdx.x % MF_WARP_SIZE, wp = threadIdx.x / MF_WARP_SIZE;
  float wf[HG][V], cb[HG];
  apb_fwd_weights<V, CONTIG, HG>(wf, cb, gamma, beta, w, lane, Cz, H);
  int hl = 0;
#pragma unroll
  for (int half = HG / 2, off = MF_WARP_SIZE / 2; half >= 1; half /= 2, off /= 2)
    hl += (lane & off) ? half : 0;
  const bool writer = (lane & (MF_WARP_SIZE / HG - 1)) == 0 && hl < H;

  const int64_t ntiles = (M + APB_TR - 1) / APB_TR;
  int64_t t = blockIdx.x;
  if (t < ntiles) {
    const int64_t m0 = t * APB_TR;
    apb_tile_issue<ASYNC>(zt, z + m0 * Cz, (int)((M - m0 < APB_TR ? M - m0 : APB_TR) * Cz));
    if (ASYNC) apb_cp_commit();
  }
  for (int buf = 0; t < ntiles; t += gridDim.x, buf ^= 1) {
    const int64_t m0 = t * APB_TR;
    const int nr = (int)(M - m0 < APB_TR ? M - m0 : APB_TR);
    if (ASYNC) apb_cp_wait_all();
    __syncthreads();
    const int64_t tn = t + gridDim.x;
    if (tn < ntiles) {
      const int64_t mn = tn * APB_TR;
      apb_tile_issue<ASYNC>(zt + (buf ^ 1) * APB_TR * Cz, z + mn * Cz,
                            (int)((M - mn < APB_TR ? M - mn : APB_TR) * Cz));
      if (ASYNC) apb_cp_commit();
    }
    const bf16 *zb = zt + buf * APB_TR * Cz;
    for (int r = wp; r < nr; r += APB_WARPS) {
      const float bh = apb_fwd_row<V, CONTIG, HG>(zb + r * Cz, wf, cb, lane, Cz);
      if (writer) tile[hl * (APB_TR + 1) + r] = bh;
    }
    __syncthreads();
    apb_store_bias_tile(bias, tile, m0, nr, N, H);
  }
}

template <int V, bool CONTIG, int HG, bool ASYNC>
static __global__ void __launch_bounds__(APB_THREADS)
apb_bias_bwd_pipe_kernel(bf16 *__restrict__ dz, float *__restrict__ part,
                         const bf16 *__restrict__ dbias, const bf16 *__restrict__ z,
                         const bf16 *__restrict__ gamma, const bf16 *__restrict__ beta,
                         const bf16 *__restrict__ w, int N, int Cz, int H) {
  const int64_t M = (int64_t)N * N;
  constexpr int DBN = (HG * APB_TR + APB_THREADS - 1) / APB_THREADS;
  extern __shared__ __align__(16) unsigned char apb_sm[];
  bf16 *zt = (bf16 *)apb_sm;                     /* (2, APB_TR, Cz) */
  bf16 *dzt = zt + 2 * APB_TR * Cz;              /* (2, APB_TR, Cz) */
  float *dt = (float *)(dzt + 2 * APB_TR * Cz);  /* (HG, APB_TR + 1) */
  float *red = dt + HG * (APB_TR + 1);           /* (H·Cz + 2Cz) */
  const int lane = threadIdx.x % MF_WARP_SIZE, wp = threadIdx.x / MF_WARP_SIZE;
  float wr[HG][V], gm[V], bt[V], acc[HG][V], pg[V], pb[V];
#pragma unroll
  for (int i = 0; i < V; i++) {
    const int c = mf_row_chan<V, CONTIG>(lane, i);
    gm[i] = c < Cz ? mf_bf16_to_f32(gamma[c]) : 0.0f;
    bt[i] = c < Cz ? mf_bf16_to_f32(beta[c]) : 0.0f;
    pg[i] = pb[i] = 0.0f;
#pragma unroll
    for (int h = 0; h < HG; h++) {
      wr[h][i] = (h < H && c < Cz) ? mf_bf16_to_f32(w[(int64_t)h * Cz + c]) : 0.0f;
      acc[h][i] = 0.0f;
    }
  }
  const int64_t ntiles = (M + APB_TR - 1) / APB_TR;
  float dbp[DBN];
  int64_t t = blockIdx.x;
  if (t < ntiles) {
    const int64_t m0 = t * APB_TR;
    const int nr = (int)(M - m0 < APB_TR ? M - m0 : APB_TR);
    apb_tile_issue<ASYNC>(zt, z + m0 * Cz, nr * Cz);
    if (dz) apb_tile_issue<ASYNC>(dzt, dz + m0 * Cz, nr * Cz);
    if (ASYNC) apb_cp_commit();
    const int r = threadIdx.x % APB_TR;
    const apb_pos ps = apb_tile_pos(m0, r, N);
#pragma unroll
    for (int k = 0; k < DBN; k++) {
      const int h = threadIdx.x / APB_TR + k * (APB_THREADS / APB_TR);
      dbp[k] = (h < H && r < nr) ? mf_bf16_to_f32(dbias[h * ps.hs + ps.off]) : 0.0f;
    }
  }
  for (int buf = 0; t < ntiles; t += gridDim.x, buf ^= 1) {
    const int64_t m0 = t * APB_TR;
    const int nr = (int)(M - m0 < APB_TR ? M - m0 : APB_TR);
#pragma unroll
    for (int k = 0; k < DBN; k++) {
      const int idx = threadIdx.x + k * APB_THREADS, h = idx / APB_TR, r = idx - h * APB_TR;
      if (h < HG) dt[h * (APB_TR + 1) + r] = dbp[k];
    }
    if (ASYNC) apb_cp_wait_all();
    __syncthreads();
    const int64_t tn = t + gridDim.x;
    if (tn < ntiles) {
      const int64_t mn = tn * APB_TR;
      const int nn = (int)(M - mn < APB_TR ? M - mn : APB_TR);
      apb_tile_issue<ASYNC>(zt + (buf ^ 1) * APB_TR * Cz, z + mn * Cz, nn * Cz);
      if (dz) apb_tile_issue<ASYNC>(dzt + (buf ^ 1) * APB_TR * Cz, dz + mn * Cz, nn * Cz);
      if (ASYNC) apb_cp_commit();
      const int r = threadIdx.x % APB_TR;
      const apb_pos ps = apb_tile_pos(mn, r, N);
#pragma unroll
      for (int k = 0; k < DBN; k++) {
        const int h = threadIdx.x / APB_TR + k * (APB_THREADS / APB_TR);
        dbp[k] = (h < H && r < nn) ? mf_bf16_to_f32(dbias[h * ps.hs + ps.off]) : 0.0f;
      }
    }
    const bf16 *zb = zt + buf * APB_TR * Cz, *dzb = dzt + buf * APB_TR * Cz;
    for (int r = wp; r < nr; r += APB_WARPS) {
      float x[V], xh[V], rs, dy[V];
      apb_load_row<V, CONTIG>(x, zb + r * Cz, lane, Cz);
      apb_normalise<V, CONTIG>(xh, &rs, x, lane, Cz);
#pragma unroll
      for (int i = 0; i < V; i++) dy[i] = 0.0f;
#pragma unroll
      for (int h = 0; h < HG; h++) {
        const float d = dt[h * (APB_TR + 1) + r];
#pragma unroll
        for (int i = 0; i < V; i++) {
          dy[i] = fmaf(d, wr[h][i], dy[i]);
          acc[h][i] = fmaf(d, fmaf(xh[i], gm[i], bt[i]), acc[h][i]);
        }
      }
      float sg = 0.0f, sgx = 0.0f;
#pragma unroll
      for (int i = 0; i < V; i++) {
        pg[i] = fmaf(dy[i], xh[i], pg[i]);
        pb[i] += dy[i];
        const float g = dy[i] * gm[i];
        sg += g;
        sgx = fmaf(g, xh[i], sgx);
      }
      if (dz) {
        sg = mf_warp_sum(sg) / (float)Cz;
        sgx = mf_warp_sum(sgx) / (float)Cz;
        float o[V];
        apb_load_row<V, CONTIG>(o, dzb + r * Cz, lane, Cz);
#pragma unroll
        for (int i = 0; i < V; i++) o[i] += rs * (dy[i] * gm[i] - sg - xh[i] * sgx);
        apb_store_row<V, CONTIG>(dz + (m0 + r) * Cz, o, lane, Cz);
      }
    }
    __syncthreads();
  }
  const int HC = H * Cz;
  for (int k = 0; k < APB_WARPS; k++) {
    if (wp == k) {
#pragma unroll
      for (int i = 0; i < V; i++) {
        const int c = mf_row_chan<V, CONTIG>(lane, i);
        if (c >= Cz) continue;
#pragma unroll
        for (int h = 0; h < HG; h++)
          if (h < H) red[h * Cz + c] = (k ? red[h * Cz + c] : 0.0f) + acc[h][i];
        red[HC + c] = (k ? red[HC + c] : 0.0f) + pg[i];
        red[HC + Cz + c] = (k ? red[HC + Cz + c] : 0.0f) + pb[i];
      }
    }
    __syncthreads();
  }
  const int P = HC + 2 * Cz;
  for (int j = threadIdx.x; j < P; j += blockDim.x) part[(int64_t)blockIdx.x * P + j] = red[j];
}

/* ---------------------------------------------------------------- tensor-core backward
 * apb_bias_bwd_mma_kernel: the pair backward of apb_bias_bwd_pipe_kernel for Cz = 128,
 * H <= 16 (variant 2, the default where it applies), with its products on mma.sync
 * m16n8k16 (bf16 in, fp32 accumulate) instead of 3·H FMAs per channel and row on the CUDA
 * cores (that kernel took 0.75 ms of the block's backward at N = 768, H200, ncu
 * 2026-11-30). As in ln_linear_bwd_wg.cu it never sums dy over rows: with ẑ = x̂·γ + β,
 *   G (H × Cz) = dbiasᵀ·x̂,  S (H) = Σ_rows dbias  ⇒  dW = γ ⊙ G + β ⊗ S,
 *   dγ = Σ_h W ⊙ G,  dβ = Σ_h W·S  (= Σ dy·x̂ and Σ dy, dy = dbias·W).
 * Per 64-row tile, 8 warps:
 *   1. the dbias tile as bf16 db [h][r] (heads past H zero), from registers prefetched
 *      during the previous tile (each thread adds its 4 values to its S partials); z (and
 *      dz) tiles arrive by cp.async one tile ahead;
 *   2. LN statistics, warp per 8 rows (two-pass half-warp sums, two rows per step,
 *      am_ln_rows), x̂ in bf16 into xb [r][c];
 *   3. dy (64 × 128) = dbias·W: warp w takes rows 16·(w & 3).., channels 64·(w >> 2)..,
 *      A from db by ldmatrix.trans, B = W fragments in registers (loaded once);
 *   4. the LayerNorm backward on the dy fragments (x̂ recomputed in fp32 from the z tile):
 *      Σ dy·γ and Σ dy·γ·x̂ per row over the quad, then across the two channel halves
 *      through shared memory (half 0 + half 1), dz += rstd·(dy·γ − mean − x̂·mean) into the
 *      dz tile, stored coalesced;
 *   5. G += dbiasᵀ·x̂: warp w takes channels 16w.., A = db by ldmatrix, B = xb by
 *      ldmatrix.trans, accumulated over the CTA's tiles in registers.
 * part[block] gets the same [dW (H·Cz) | dγ (Cz) | dβ (Cz)] as the other variants, each
 * entry a fixed-order sum: deterministic. Numerics: G from bf16 x̂ (the other kernels sum
 * fp32 products per row), dy exact products of bf16 inputs in fp32. */
#define AM_C 128
#define AM_HG 16
#define AM_ZP (AM_C + 8) /* z, dz, x̂ tile pitch (elements): conflict-free fragment and ldmatrix rows */
#define AM_DP (APB_TR + 8) /* db pitch */
#define AM_DBN (AM_HG * APB_TR / APB_THREADS) /* dbias values per thread and tile */
#define AM_SMEM ((size_t)(5 * APB_TR * AM_ZP + AM_HG * AM_DP) * 2 + \
                 (size_t)(2 * APB_TR + 4 * APB_TR + 2 * AM_C + APB_THREADS * AM_DBN + AM_HG) * 4)

static __device__ __forceinline__ void am_tile_issue(bf16 *dst, const bf16 *__restrict__ src, int rows) {
  for (int idx = threadIdx.x; idx < rows * (AM_C / 8); idx += APB_THREADS) {
    const int r = idx >> 4, q = idx & 15;
    apb_cp16(dst + r * AM_ZP + q * 8, src + (int64_t)r * AM_C + q * 8);
  }
}

/* LayerNorm of the tile's rows 8·wp .. 8·wp + 7, two rows per step (a half-warp each, 8
 * channels per lane: one 16-byte shared load and store, 4 shuffles per sum; the 32-lane
 * form took 5, and 8 steps): into xo (APB_TR, AM_ZP) bf16 x̂ = (z − μ)·rstd, or x̂·γ + β
 * when gl (the lane's 8 γ, β in gl, bl: channels 8·(lane % 16)..) is given; μ, rstd into
 * st (2, APB_TR) when st is not NULL. Rows past nr are zeros (their statistics are never
 * used). */
static __device__ __forceinline__ void am_ln_rows(bf16 *xo, float *st, const bf16 *zb,
                                                  const float *gl, const float *bl, int nr,
                                                  int wp, int lane) {
  const int c0 = 8 * (lane & 15);
#pragma unroll
  for (int k = 0; k < 4; k++) {
    const int r = 8 * wp + 2 * k + (lane >> 4);
    const uint4 u = *(const uint4 *)(zb + r * AM_ZP + c0);
    const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&u;
    float x[8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
      x[2 * i] = r < nr ? __low2float(h2[i]) : 0.0f;
      x[2 * i + 1] = r < nr ? __high2float(h2[i]) : 0.0f;
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) s += x[i];
#pragma unroll
    for (int o = 1; o < 16; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float mu = s * (1.0f / AM_C);
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) q += (x[i] - mu) * (x[i] - mu);
#pragma unroll
    for (int o = 1; o < 16; o <<= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    const float rs = 1.0f / sqrtf(q * (1.0f / AM_C) + (float)MF_LN_EPS);
    if (st && (lane & 15) == 0) {
      st[r] = mu;
      st[APB_TR + r] = rs;
    }
    uint4 o;
    __nv_bfloat162 *o2 = (__nv_bfloat162 *)&o;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      float y0 = (x[2 * i] - mu) * rs, y1 = (x[2 * i + 1] - mu) * rs;
      if (gl) {
        y0 = y0 * gl[2 * i] + bl[2 * i];
        y1 = y1 * gl[2 * i + 1] + bl[2 * i + 1];
      }
      o2[i] = __floats2bfloat162_rn(y0, y1);
    }
    if (r >= nr) o = make_uint4(0u, 0u, 0u, 0u);
    *(uint4 *)(xo + r * AM_ZP + c0) = o;
  }
}

/* The pair forward on the tensor cores (variant 2 where Cz = 128, H <= 16): per 64-row tile,
 * z rows by cp.async one tile ahead, ẑ = LN(z)·γ + β in bf16 (am_ln_rows), then bias
 * (64 × 16) = ẑ·Wᵀ by mma.sync — warp w takes rows 16·(w & 3).., heads 8·(w >> 2).., 8
 * k-steps, A = ẑ by ldmatrix, B = W rows from registers (loaded once) — staged in fp32 and
 * stored transposed as apb_bias_fwd_pipe_kernel does (apb_store_bias_tile). Same op; the
 * pipe kernel sums fp32 x̂·(γ ⊙ W) per row instead of bf16 ẑ·W. Bounded at 4 CTAs per SM
 * (55 registers; 55 KB of shared memory each): one more tile in flight per SM than at the
 * register count of a 2-CTA bound (66, 3 CTAs), 146 → 131 µs at N = 768 (H200, ncu,
 * dev/cuda/README.md step 31). */
#define AM_FWD_SMEM ((size_t)3 * APB_TR * AM_ZP * 2 + (size_t)AM_HG * (APB_TR + 1) * 4)
static __global__ void __launch_bounds__(APB_THREADS, 4)
apb_bias_fwd_mma_kernel(bf16 *__restrict__ bias, const bf16 *__restrict__ z,
                        const bf16 *__restrict__ gamma, const bf16 *__restrict__ beta,
                        const bf16 *__restrict__ w, int N, int H) {
  /* bias (H, N, NB); z (M, 128); w (H, 128) */
  const int64_t M = (int64_t)N * N;
  extern __shared__ __align__(16) unsigned char apb_sm[];
  bf16 *zt = (bf16 *)apb_sm;                         /* (2, APB_TR, AM_ZP) */
  bf16 *zh = zt + 2 * APB_TR * AM_ZP;                /* (APB_TR, AM_ZP) ẑ */
  float *tile = (float *)(zh + APB_TR * AM_ZP);      /* (AM_HG, APB_TR + 1) */
  const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
  const int g = lane >> 2, tq = lane & 3, mt = wp & 3, nt = wp >> 2;
  float gl[8], bl[8]; /* am_ln_rows: channels 8·(lane % 16) .. + 7 */
#pragma unroll
  for (int i = 0; i < 8; i++) {
    gl[i] = mf_bf16_to_f32(gamma[8 * (lane & 15) + i]);
    bl[i] = mf_bf16_to_f32(beta[8 * (lane & 15) + i]);
  }
  /* B fragments of k-step ks (k = channel, n = head 8·nt + g): W[h][16ks + 2tq ..] pairs */
  uint32_t wb[AM_C / 16][2];
  {
    const int h = 8 * nt + g;
#pragma unroll
    for (int ks = 0; ks < AM_C / 16; ks++)
#pragma unroll
      for (int hf = 0; hf < 2; hf++)
        wb[ks][hf] = h < H ? *(const uint32_t *)(w + (int64_t)h * AM_C + 16 * ks + 2 * tq + 8 * hf) : 0u;
  }
  const int64_t ntiles = (M + APB_TR - 1) / APB_TR;
  int64_t t = blockIdx.x;
  if (t < ntiles) {
    const int64_t m0 = t * APB_TR;
    am_tile_issue(zt, z + m0 * AM_C, (int)(M - m0 < APB_TR ? M - m0 : APB_TR));
    apb_cp_commit();
  }
  for (int buf = 0; t < ntiles; t += gridDim.x, buf ^= 1) {
    const int64_t m0 = t * APB_TR;
    const int nr = (int)(M - m0 < APB_TR ? M - m0 : APB_TR);
    apb_cp_wait_all();
    __syncthreads(); /* this tile's rows; the previous tile's ẑ and stores done */
    const int64_t tn = t + gridDim.x;
    if (tn < ntiles) {
      const int64_t mn = tn * APB_TR;
      am_tile_issue(zt + (buf ^ 1) * APB_TR * AM_ZP, z + mn * AM_C, (int)(M - mn < APB_TR ? M - mn : APB_TR));
      apb_cp_commit();
    }
    am_ln_rows(zh, NULL, zt + buf * APB_TR * AM_ZP, gl, bl, nr, wp, lane);
    __syncthreads();
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int ks = 0; ks < AM_C / 16; ks++) {
      uint32_t a[4];
      const int q = lane >> 3, i = lane & 7; /* matrix q: rows 16mt + i (+8), k 16ks (+8) */
      mf_ldsm_x4(a, mf_smem_u32(zh + (16 * mt + i + 8 * (q & 1)) * AM_ZP + 16 * ks + 8 * (q >> 1)));
      mf_mma_bf16(c, a, wb[ks][0], wb[ks][1]);
    }
    /* c: rows 16mt + g (+8), heads 8nt + 2tq (+1) */
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int h = 8 * nt + 2 * tq + (e & 1), r = 16 * mt + g + 8 * (e >> 1);
      tile[h * (APB_TR + 1) + r] = c[e];
    }
    __syncthreads();
    apb_store_bias_tile(bias, tile, m0, nr, N, H);
  }
}

/* Tile t of the backward: its z (and dz) rows into zs (dzs) by cp.async (one group), its
 * dbias values (heads threadIdx / 64 + 4k, row threadIdx % 64; zero past H and the rows)
 * into dbp. */
static __device__ __forceinline__ void am_bwd_issue(bf16 *zs, bf16 *dzs, bf16 (&dbp)[AM_DBN],
                                                    const bf16 *__restrict__ z,
                                                    const bf16 *__restrict__ dz,
                                                    const bf16 *__restrict__ dbias, int64_t t,
                                                    int64_t M, int N, int H) {
  const int64_t m0 = t * APB_TR;
  const int nr = (int)(M - m0 < APB_TR ? M - m0 : APB_TR);
  am_tile_issue(zs, z + m0 * AM_C, nr);
  if (dz) am_tile_issue(dzs, dz + m0 * AM_C, nr);
  apb_cp_commit();
  const int r = threadIdx.x % APB_TR;
  const apb_pos ps = apb_tile_pos(m0, r, N);
#pragma unroll
  for (int k = 0; k < AM_DBN; k++) {
    const int h = threadIdx.x / APB_TR + k * (APB_THREADS / APB_TR);
    dbp[k] = (h < H && r < nr) ? dbias[h * ps.hs + ps.off] : mf_f32_to_bf16(0.0f);
  }
}

static __global__ void __launch_bounds__(APB_THREADS, 2)
apb_bias_bwd_mma_kernel(bf16 *__restrict__ dz, float *__restrict__ part,
                        const bf16 *__restrict__ dbias, const bf16 *__restrict__ z,
                        const bf16 *__restrict__ gamma, const bf16 *__restrict__ beta,
                        const bf16 *__restrict__ w, int N, int H) {
  /* dz, z (M, 128); dbias (H, N, NB); w (H, 128); part (gridDim.x, H·128 + 256) */
  const int64_t M = (int64_t)N * N;
  constexpr int DBN = AM_DBN;
  extern __shared__ __align__(16) unsigned char apb_sm[];
  bf16 *zt = (bf16 *)apb_sm;                 /* (2, APB_TR, AM_ZP) */
  bf16 *dzt = zt + 2 * APB_TR * AM_ZP;       /* (2, APB_TR, AM_ZP) */
  bf16 *xb = dzt + 2 * APB_TR * AM_ZP;       /* (APB_TR, AM_ZP) x̂ */
  bf16 *db = xb + APB_TR * AM_ZP;            /* (AM_HG, AM_DP) dbias tile [h][r] */
  float *st = (float *)(db + AM_HG * AM_DP); /* (2, APB_TR): μ, rstd */
  float *xs = st + 2 * APB_TR;               /* (2 halves, APB_TR, 2): Σ dy·γ, Σ dy·γ·x̂ */
  float *gs = xs + 4 * APB_TR;               /* (2, AM_C): γ, β */
  float *ss = gs + 2 * AM_C;                 /* (APB_THREADS, DBN): the threads' S partials */
  float *sh = ss + APB_THREADS * DBN;        /* (AM_HG): S */
  const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
  const int g = lane >> 2, tq = lane & 3, mt = wp & 3, nh = wp >> 2;

  for (int c = threadIdx.x; c < AM_C; c += APB_THREADS) {
    gs[c] = mf_bf16_to_f32(gamma[c]);
    gs[AM_C + c] = mf_bf16_to_f32(beta[c]);
  }
  /* W fragments (B of dy = dbias·W: k = head, n = channel): n-tile j covers channels
   * 64·nh + 8j .. ; b0 = W[2tq, 2tq+1][c], b1 = W[2tq+8, 2tq+9][c], c = 64·nh + 8j + g */
  uint32_t wb[8][2];
#pragma unroll
  for (int j = 0; j < 8; j++) {
    const int c = 64 * nh + 8 * j + g;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
      const int h0 = 2 * tq + 8 * hf;
      const bf16 lo = h0 < H ? w[(int64_t)h0 * AM_C + c] : mf_f32_to_bf16(0.0f);
      const bf16 hi = h0 + 1 < H ? w[(int64_t)(h0 + 1) * AM_C + c] : mf_f32_to_bf16(0.0f);
      wb[j][hf] = (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
    }
  }
  float ga[2][4], sp[DBN]; /* G fragments; S partials of heads threadIdx / 64 + 4k */
#pragma unroll
  for (int j = 0; j < 2; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) ga[j][e] = 0.0f;
#pragma unroll
  for (int k = 0; k < DBN; k++) sp[k] = 0.0f;

  const int64_t ntiles = (M + APB_TR - 1) / APB_TR;
  bf16 dbp[DBN];
  int64_t t = blockIdx.x;
  if (t < ntiles) am_bwd_issue(zt, dzt, dbp, z, dz, dbias, t, M, N, H);
  __syncthreads(); /* γ, β */
  for (int buf = 0; t < ntiles; t += gridDim.x, buf ^= 1) {
    const int64_t m0 = t * APB_TR;
    const int nr = (int)(M - m0 < APB_TR ? M - m0 : APB_TR);
    bf16 *zb = zt + buf * APB_TR * AM_ZP, *dzb = dzt + buf * APB_TR * AM_ZP;
    /* 1. the dbias tile; this tile's z, dz landed */
#pragma unroll
    for (int k = 0; k < DBN; k++) {
      const int idx = threadIdx.x + k * APB_THREADS, h = idx / APB_TR, r = idx - h * APB_TR;
      db[h * AM_DP + r] = dbp[k];
      sp[k] += mf_bf16_to_f32(dbp[k]);
    }
    apb_cp_wait_all();
    __syncthreads(); /* (A) */
    const int64_t tn = t + gridDim.x;
    if (tn < ntiles) /* the next tile's loads */
      am_bwd_issue(zt + (buf ^ 1) * APB_TR * AM_ZP, dzt + (buf ^ 1) * APB_TR * AM_ZP, dbp, z, dz,
                   dbias, tn, M, N, H);
    /* 2. statistics and x̂, rows 8·wp .. 8·wp + 7 (rows past nr: zeros) */
    am_ln_rows(xb, st, zb, NULL, NULL, nr, wp, lane);
    __syncthreads(); /* (B) db, xb, statistics */

    /* 3. dy: rows 16·mt + g (+8), channels 64·nh + 8j + 2·tq (+1) */
    float dy[8][4];
    {
      uint32_t a[4];
      const int q = lane >> 3, i = lane & 7; /* ldmatrix.trans: matrix q, row i */
      mf_ldsm_x4_t(a, mf_smem_u32(db + (i + 8 * (q >> 1)) * AM_DP + 16 * mt + 8 * (q & 1)));
#pragma unroll
      for (int j = 0; j < 8; j++) {
        dy[j][0] = dy[j][1] = dy[j][2] = dy[j][3] = 0.0f;
        mf_mma_bf16(dy[j], a, wb[j][0], wb[j][1]);
      }
    }
    /* 4. the LayerNorm backward: dy ← dy·γ, row sums of it and of it·x̂ */
    const int r_lo = 16 * mt + g, r_hi = r_lo + 8;
    const float mu_lo = st[r_lo], rs_lo = st[APB_TR + r_lo];
    const float mu_hi = st[r_hi], rs_hi = st[APB_TR + r_hi];
    float sa_lo = 0.0f, sb_lo = 0.0f, sa_hi = 0.0f, sb_hi = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int c = 64 * nh + 8 * j + 2 * tq;
      const __nv_bfloat162 zl = *(const __nv_bfloat162 *)(zb + r_lo * AM_ZP + c);
      const __nv_bfloat162 zu = *(const __nv_bfloat162 *)(zb + r_hi * AM_ZP + c);
      const float x0 = (__low2float(zl) - mu_lo) * rs_lo, x1 = (__high2float(zl) - mu_lo) * rs_lo;
      const float x2 = (__low2float(zu) - mu_hi) * rs_hi, x3 = (__high2float(zu) - mu_hi) * rs_hi;
      const float g0 = gs[c], g1 = gs[c + 1];
      dy[j][0] *= g0;
      dy[j][1] *= g1;
      dy[j][2] *= g0;
      dy[j][3] *= g1;
      sa_lo += dy[j][0] + dy[j][1];
      sb_lo += dy[j][0] * x0 + dy[j][1] * x1;
      sa_hi += dy[j][2] + dy[j][3];
      sb_hi += dy[j][2] * x2 + dy[j][3] * x3;
    }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      sa_lo += __shfl_xor_sync(0xffffffffu, sa_lo, o);
      sb_lo += __shfl_xor_sync(0xffffffffu, sb_lo, o);
      sa_hi += __shfl_xor_sync(0xffffffffu, sa_hi, o);
      sb_hi += __shfl_xor_sync(0xffffffffu, sb_hi, o);
    }
    if (tq == 0) {
      xs[(nh * APB_TR + r_lo) * 2] = sa_lo;
      xs[(nh * APB_TR + r_lo) * 2 + 1] = sb_lo;
      xs[(nh * APB_TR + r_hi) * 2] = sa_hi;
      xs[(nh * APB_TR + r_hi) * 2 + 1] = sb_hi;
    }
    __syncthreads(); /* (C) */
    if (dz) {
      const float ma_lo = (xs[r_lo * 2] + xs[(APB_TR + r_lo) * 2]) * (1.0f / AM_C);
      const float mb_lo = (xs[r_lo * 2 + 1] + xs[(APB_TR + r_lo) * 2 + 1]) * (1.0f / AM_C);
      const float ma_hi = (xs[r_hi * 2] + xs[(APB_TR + r_hi) * 2]) * (1.0f / AM_C);
      const float mb_hi = (xs[r_hi * 2 + 1] + xs[(APB_TR + r_hi) * 2 + 1]) * (1.0f / AM_C);
#pragma unroll
      for (int j = 0; j < 8; j++) {
        const int c = 64 * nh + 8 * j + 2 * tq;
        const __nv_bfloat162 zl = *(const __nv_bfloat162 *)(zb + r_lo * AM_ZP + c);
        const __nv_bfloat162 zu = *(const __nv_bfloat162 *)(zb + r_hi * AM_ZP + c);
        __nv_bfloat162 *pl = (__nv_bfloat162 *)(dzb + r_lo * AM_ZP + c);
        __nv_bfloat162 *pu = (__nv_bfloat162 *)(dzb + r_hi * AM_ZP + c);
        const __nv_bfloat162 ol = *pl, ou = *pu;
        *pl = __floats2bfloat162_rn(
            __low2float(ol) + rs_lo * (dy[j][0] - ma_lo - (__low2float(zl) - mu_lo) * rs_lo * mb_lo),
            __high2float(ol) + rs_lo * (dy[j][1] - ma_lo - (__high2float(zl) - mu_lo) * rs_lo * mb_lo));
        *pu = __floats2bfloat162_rn(
            __low2float(ou) + rs_hi * (dy[j][2] - ma_hi - (__low2float(zu) - mu_hi) * rs_hi * mb_hi),
            __high2float(ou) + rs_hi * (dy[j][3] - ma_hi - (__high2float(zu) - mu_hi) * rs_hi * mb_hi));
      }
    }
    /* 5. G += dbiasᵀ·x̂: heads g (+8), channels 16·wp + 8j + 2·tq (+1) */
#pragma unroll
    for (int ks = 0; ks < APB_TR / 16; ks++) {
      uint32_t a[4], b[4];
      const int q = lane >> 3, i = lane & 7;
      mf_ldsm_x4(a, mf_smem_u32(db + (i + 8 * (q & 1)) * AM_DP + 16 * ks + 8 * (q >> 1)));
      mf_ldsm_x4_t(b, mf_smem_u32(xb + (16 * ks + i + 8 * (q & 1)) * AM_ZP + 16 * wp + 8 * (q >> 1)));
      mf_mma_bf16(ga[0], a, b[0], b[1]);
      mf_mma_bf16(ga[1], a, b[2], b[3]);
    }
    __syncthreads(); /* (D) the dz tile complete; db, xb read */
    if (dz)
      for (int idx = threadIdx.x; idx < nr * (AM_C / 8); idx += APB_THREADS) {
        const int r = idx >> 4, q = idx & 15;
        *(uint4 *)(dz + (m0 + r) * AM_C + q * 8) = *(const uint4 *)(dzb + r * AM_ZP + q * 8);
      }
  }
  apb_cp_wait_all();

  /* S: head h = threadIdx / 64 + 4k is partial k of threads 64·(h % 4) .. + 63, summed in
   * thread order */
#pragma unroll
  for (int k = 0; k < DBN; k++) ss[threadIdx.x * DBN + k] = sp[k];
  __syncthreads();
  if (threadIdx.x < AM_HG) {
    const int h = threadIdx.x, grp = h % (APB_THREADS / APB_TR), k = h / (APB_THREADS / APB_TR);
    float sum = 0.0f;
    for (int th = 0; th < APB_TR; th++) sum += ss[(grp * APB_TR + th) * DBN + k];
    sh[h] = sum;
  }
  __syncthreads();
  /* part: dW = γ ⊙ G + β ⊗ S from the fragments (each (h, c) in one thread); dγ = Σ_h W ⊙ G
   * over the fragment's two heads, then the 8 head-lanes; dβ = Σ_h W·S */
  const int P = H * AM_C + 2 * AM_C;
  float *pp = part + (int64_t)blockIdx.x * P;
#pragma unroll
  for (int j = 0; j < 2; j++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int c = 16 * wp + 8 * j + 2 * tq + e;
      float dg = 0.0f;
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        const int h = g + 8 * hh;
        const float G = ga[j][2 * hh + e];
        if (h < H) {
          pp[h * AM_C + c] = gs[c] * G + gs[AM_C + c] * sh[h];
          dg += mf_bf16_to_f32(w[(int64_t)h * AM_C + c]) * G;
        }
      }
#pragma unroll
      for (int o = 4; o <= 16; o <<= 1) dg += __shfl_xor_sync(0xffffffffu, dg, o);
      if (g == 0) pp[H * AM_C + c] = dg;
    }
  for (int c = threadIdx.x; c < AM_C; c += APB_THREADS) {
    float s = 0.0f;
    for (int h = 0; h < H; h++) s += mf_bf16_to_f32(w[(int64_t)h * AM_C + c]) * sh[h];
    pp[H * AM_C + AM_C + c] = s;
  }
}

/* ================================================================ single-track kernels */

typedef struct {
  bf16 *p[4];
} apb_heads;

/* h.p[t] without a dynamically indexed parameter array (which would go through local memory). */
static __device__ __forceinline__ bf16 *apb_pick(const apb_heads &h, int t) {
  return t == 0 ? h.p[0] : t == 1 ? h.p[1] : t == 2 ? h.p[2] : h.p[3];
}

/* dst.p[t] (H, N, D) ← src (N, ld) columns t·HD .. (t+1)·HD − 1, t < T, 8 values per thread
 * (D % 8 == 0); b0 (HD) added to tensor 0 when not NULL. */
template <typename SRC>
static __global__ void apb_rows_to_heads_kernel(apb_heads dst, const SRC *__restrict__ src, int ld,
                                                const bf16 *__restrict__ b0, int T, int N, int H,
                                                int D) {
  const int HD = H * D, per_row = T * HD / 8;
  const int64_t n = (int64_t)N * per_row;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int i = (int)(idx / per_row), col = (int)(idx - (int64_t)i * per_row) * 8;
    const int t = col / HD, hd = col - t * HD, h = hd / D, d = hd - h * D;
    float v[8];
    if constexpr (sizeof(SRC) == 4)
      mf_ldvf<8>(v, (const float *)src + (int64_t)i * ld + col);
    else
      mf_ldv<8>(v, (const bf16 *)src + (int64_t)i * ld + col);
    if (t == 0 && b0) {
      float b[8];
      mf_ldv<8>(b, b0 + hd);
#pragma unroll
      for (int k = 0; k < 8; k++) v[k] += b[k];
    }
    mf_stv<8>(apb_pick(dst, t) + ((int64_t)h * N + i) * D + d, v);
  }
}

/* dst (N, ld) columns t·HD .. ← src.p[t] (H, N, D), t < T, 8 values per thread. */
static __global__ void apb_heads_to_rows_kernel(bf16 *__restrict__ dst, int ld, apb_heads src, int T,
                                                int N, int H, int D) {
  const int HD = H * D, per_row = T * HD / 8;
  const int64_t n = (int64_t)N * per_row;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int i = (int)(idx / per_row), col = (int)(idx - (int64_t)i * per_row) * 8;
    const int t = col / HD, hd = col - t * HD, h = hd / D, d = hd - h * D;
    *(uint4 *)(dst + (int64_t)i * ld + col) =
        *(const uint4 *)(apb_pick(src, t) + ((int64_t)h * N + i) * D + d);
  }
}

/* ================================================================ launchers */

#define APB_DISPATCH(launch)                                                          \
  do {                                                                                \
    if (Cz <= 32) {                                                                   \
      const int V_ = 1; const bool CG_ = false; APB_DISPATCH_H(launch);               \
    } else if (Cz <= 64) {                                                            \
      const int V_ = 2;                                                               \
      if (Cz == 64) { const bool CG_ = true; APB_DISPATCH_H(launch); }                \
      else { const bool CG_ = false; APB_DISPATCH_H(launch); }                        \
    } else {                                                                          \
      const int V_ = 4;                                                               \
      if (Cz == 128) { const bool CG_ = true; APB_DISPATCH_H(launch); }               \
      else { const bool CG_ = false; APB_DISPATCH_H(launch); }                        \
    }                                                                                 \
  } while (0)
#define APB_DISPATCH_H(launch)                                                        \
  do {                                                                                \
    if (H <= 4) { const int HG_ = 4; launch; }                                        \
    else if (H <= 8) { const int HG_ = 8; launch; }                                   \
    else { const int HG_ = 16; launch; }                                              \
  } while (0)

static int64_t pair_tiles(int N) { return ((int64_t)N * N + APB_TR - 1) / APB_TR; }
static int bwd_blocks(int N) {
  const int64_t t = pair_tiles(N);
  return (int)(t < APB_BWD_MAX_BLOCKS ? t : APB_BWD_MAX_BLOCKS);
}

/* 2: the tensor-core pair backward where it applies (Cz = 128, H <= 16; the default), else
 * as 1; 1: pipelined tiles; 0: per-warp row loads */
static int g_variant = 2;

extern "C" int mf_apb_cuda_set_variant(int variant) {
  MF_ASSERT(variant >= 0 && variant <= 2, "apb_cuda variant %d", variant);
  const int old = g_variant;
  g_variant = variant;
  return old;
}

/* Launches kern with `smem` bytes of dynamic shared memory, opting in past 48 KiB. */
template <typename... KArgs, typename... Args>
static void apb_go(void (*kern)(KArgs...), unsigned blocks, size_t smem, cudaStream_t s,
                   Args... args) {
  if (smem > 48 * 1024)
    MF_CHECK_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  kern<<<blocks, APB_THREADS, smem, s>>>(args...);
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static void launch_bias_fwd(bf16 *bias, const bf16 *z, const mf_apb_cuda_weights *w, int N,
                            int Cz, int H, cudaStream_t s) {
  const int64_t t = pair_tiles(N);
  const unsigned blocks = (unsigned)(t < APB_FWD_MAX_BLOCKS ? t : APB_FWD_MAX_BLOCKS);
  if (g_variant == 2 && Cz == AM_C && H <= AM_HG && aligned16(z) && aligned16(w->w_z)) {
    apb_go(apb_bias_fwd_mma_kernel, blocks, AM_FWD_SMEM, s, bias, z, w->ln_z_g, w->ln_z_b,
           w->w_z, N, H);
  } else if (g_variant == 0) {
    APB_DISPATCH((apb_bias_fwd_kernel<V_, CG_, HG_><<<blocks, APB_THREADS, 0, s>>>(
        bias, z, w->ln_z_g, w->ln_z_b, w->w_z, N, Cz, H)));
  } else {
    const int HGmax = H <= 4 ? 4 : H <= 8 ? 8 : 16;
    const size_t smem = (size_t)2 * APB_TR * Cz * sizeof(bf16) + (size_t)HGmax * (APB_TR + 1) * sizeof(float);
    if (Cz % 8 == 0 && aligned16(z)) {
      APB_DISPATCH((apb_go(apb_bias_fwd_pipe_kernel<V_, CG_, HG_, true>, blocks, smem, s,
                           bias, z, w->ln_z_g, w->ln_z_b, w->w_z, N, Cz, H)));
    } else {
      APB_DISPATCH((apb_go(apb_bias_fwd_pipe_kernel<V_, CG_, HG_, false>, blocks, smem, s,
                           bias, z, w->ln_z_g, w->ln_z_b, w->w_z, N, Cz, H)));
    }
  }
  MF_CHECK_LAUNCH();
}

static void launch_bias_bwd(bf16 *dz, float *part, const bf16 *dbias, const bf16 *z,
                            const mf_apb_cuda_weights *w, int N, int Cz, int H, cudaStream_t s) {
  const unsigned blocks = (unsigned)bwd_blocks(N);
  if (g_variant == 2 && Cz == AM_C && H <= AM_HG && aligned16(z) && (!dz || aligned16(dz))) {
    apb_go(apb_bias_bwd_mma_kernel, blocks, AM_SMEM, s, dz, part, dbias, z, w->ln_z_g, w->ln_z_b,
           w->w_z, N, H);
  } else if (g_variant == 0) {
    const size_t smem = (size_t)(H * Cz + 2 * Cz) * sizeof(float);
    APB_DISPATCH((apb_bias_bwd_kernel<V_, CG_, HG_><<<blocks, APB_THREADS, smem, s>>>(
        dz, part, dbias, z, w->ln_z_g, w->ln_z_b, w->w_z, N, Cz, H)));
  } else {
    const int HGmax = H <= 4 ? 4 : H <= 8 ? 8 : 16;
    const size_t smem = (size_t)4 * APB_TR * Cz * sizeof(bf16) +
                        (size_t)HGmax * (APB_TR + 1) * sizeof(float) +
                        (size_t)(H * Cz + 2 * Cz) * sizeof(float);
    if (Cz % 8 == 0 && aligned16(z) && (!dz || aligned16(dz))) {
      APB_DISPATCH((apb_go(apb_bias_bwd_pipe_kernel<V_, CG_, HG_, true>, blocks, smem, s,
                           dz, part, dbias, z, w->ln_z_g, w->ln_z_b, w->w_z, N, Cz, H)));
    } else {
      APB_DISPATCH((apb_go(apb_bias_bwd_pipe_kernel<V_, CG_, HG_, false>, blocks, smem, s,
                           dz, part, dbias, z, w->ln_z_g, w->ln_z_b, w->w_z, N, Cz, H)));
    }
  }
  MF_CHECK_LAUNCH();
}

static void launch_rows_to_heads_f32(bf16 *const *dst, const float *src, int ld, const bf16 *b0,
                                     int T, int N, int H, int D, cudaStream_t s) {
  apb_heads h = {{dst[0], T > 1 ? dst[1] : NULL, T > 2 ? dst[2] : NULL, T > 3 ? dst[3] : NULL}};
  apb_rows_to_heads_kernel<float><<<mf_ew_blocks((int64_t)N * T * H * D / 8), 256, 0, s>>>(
      h, src, ld, b0, T, N, H, D);
  MF_CHECK_LAUNCH();
}

static void launch_heads_to_rows(bf16 *dst, int ld, bf16 *const *src, int T, int N, int H, int D,
                                 cudaStream_t s) {
  apb_heads h = {{src[0], T > 1 ? src[1] : NULL, T > 2 ? src[2] : NULL, T > 3 ? src[3] : NULL}};
  apb_heads_to_rows_kernel<<<mf_ew_blocks((int64_t)N * T * H * D / 8), 256, 0, s>>>(dst, ld, h, T,
                                                                                    N, H, D);
  MF_CHECK_LAUNCH();
}

/* ================================================================ buffers */

typedef struct {
  float *mean_s, *rstd_s;   /* (N) LN(s) statistics */
  bf16 *ahat;               /* (N, Cs) LN(s) */
  bf16 *qh, *kh, *vh, *gh;  /* (H, N, D) */
  bf16 *bias;               /* (H, N, NB): row stride NB = apb_nb(N), padding zeroed */
  float *lse;               /* (H, N) */
  bf16 *oh;                 /* (H, N, D) gated attention output */
  bf16 *og;                 /* (N, HD) the same, row layout (input of W_o) */
} apb_saved;

static size_t saved_carve(apb_saved *v, void *base, int N, int Cs, int H, int D) {
  const size_t n = (size_t)N, hnd = (size_t)H * N * D;
  mf_carver c = {(char *)base, 0};
  v->mean_s = (float *)mf_carve(&c, n * sizeof(float));
  v->rstd_s = (float *)mf_carve(&c, n * sizeof(float));
  v->ahat = (bf16 *)mf_carve(&c, n * Cs * sizeof(bf16));
  v->qh = (bf16 *)mf_carve(&c, hnd * sizeof(bf16));
  v->kh = (bf16 *)mf_carve(&c, hnd * sizeof(bf16));
  v->vh = (bf16 *)mf_carve(&c, hnd * sizeof(bf16));
  v->gh = (bf16 *)mf_carve(&c, hnd * sizeof(bf16));
  v->bias = (bf16 *)mf_carve(&c, (size_t)H * n * apb_nb(N) * sizeof(bf16));
  v->lse = (float *)mf_carve(&c, (size_t)H * n * sizeof(float));
  v->oh = (bf16 *)mf_carve(&c, hnd * sizeof(bf16));
  v->og = (bf16 *)mf_carve(&c, hnd * sizeof(bf16));
  return c.used;
}

typedef struct {
  float *pf;                     /* (N, 4HD) fp32: forward [q | k | v | g]; backward dΔs·W_o */
  bf16 *doh, *dqh, *dkh, *dvh, *dgh; /* (H, N, D) */
  bf16 *dbias;                   /* (H, N, NB): row stride NB = apb_nb(N) */
  void *att;                     /* attention backward workspace (strided entry point) */
  size_t att_bytes;
  bf16 *dP;                      /* (N, 4HD) [dq | dk | dv | dg] row layout */
  float *dahat;                  /* (N, Cs) */
  float *lnpart;                 /* (mf_ln_rows_backward_parts(N), 2Cs) */
  float *zpart;                  /* (APB_BWD_MAX_BLOCKS, H·Cz + 2Cz) */
} apb_ws;

static mf_attn_dims att_dims(int N, int H, int D) {
  return (mf_attn_dims){1, 1, H, N, N, D, 1.0 / sqrt((double)D)};
}

/* The attention's views: q, k, v, gate, out and their gradients packed (H, N, D); bias and
 * dbias (H, N, NB). */
static mf_attn_views att_views(int N, int H, int D) {
  mf_attn_views vw = mf_attn_packed_views(att_dims(N, H, D));
  vw.bias_row = apb_nb(N);
  return vw;
}

static size_t ws_carve(apb_ws *v, void *base, int N, int Cs, int Cz, int H, int D) {
  const size_t n = (size_t)N, hd = (size_t)H * D, hnd = hd * n;
  mf_carver c = {(char *)base, 0};
  v->pf = (float *)mf_carve(&c, n * 4 * hd * sizeof(float));
  v->doh = (bf16 *)mf_carve(&c, hnd * sizeof(bf16));
  v->dqh = (bf16 *)mf_carve(&c, hnd * sizeof(bf16));
  v->dkh = (bf16 *)mf_carve(&c, hnd * sizeof(bf16));
  v->dvh = (bf16 *)mf_carve(&c, hnd * sizeof(bf16));
  v->dgh = (bf16 *)mf_carve(&c, hnd * sizeof(bf16));
  v->dbias = (bf16 *)mf_carve(&c, (size_t)H * n * apb_nb(N) * sizeof(bf16));
  v->att_bytes = mf_attention_backward_strided_cuda_workspace(att_dims(N, H, D), 1);
  v->att = mf_carve(&c, v->att_bytes);
  v->dP = (bf16 *)mf_carve(&c, n * 4 * hd * sizeof(bf16));
  v->dahat = (float *)mf_carve(&c, n * Cs * sizeof(float));
  v->lnpart = (float *)mf_carve(&c, (size_t)mf_ln_rows_backward_parts(N) * 2 * Cs * sizeof(float));
  v->zpart = (float *)mf_carve(&c, (size_t)APB_BWD_MAX_BLOCKS * (H * Cz + 2 * Cz) * sizeof(float));
  return c.used;
}

extern "C" size_t mf_apb_cuda_saved_bytes(int N, int Cs, int Cz, int H, int D) {
  (void)Cz;
  apb_saved v;
  return saved_carve(&v, NULL, N, Cs, H, D);
}

extern "C" size_t mf_apb_cuda_workspace(int N, int Cs, int Cz, int H, int D) {
  apb_ws v;
  return ws_carve(&v, NULL, N, Cs, Cz, H, D);
}

static void apb_check(const mf_apb_cuda_weights *w, int N, int Cs, int Cz, int H, int D) {
  MF_ASSERT(N > 0 && Cs > 0 && Cs <= 1024 && Cz > 0 && Cz <= APB_MAX_CZ && H > 0 &&
                H <= APB_MAX_H && D > 0 && D <= 64 && D % 8 == 0,
            "apb_cuda dims N=%d Cs=%d Cz=%d H=%d D=%d (Cs <= 1024, Cz <= %d, H <= %d, D %% 8 == 0, "
            "D <= 64)",
            N, Cs, Cz, H, D, APB_MAX_CZ, APB_MAX_H);
  MF_ASSERT(w && w->ln_s_g && w->ln_s_b && w->w_q && w->b_q && w->w_k && w->w_v && w->w_g &&
                w->ln_z_g && w->ln_z_b && w->w_z && w->w_o,
            "apb_cuda: every weight is required");
  MF_ASSERT(((uintptr_t)w->b_q & 15) == 0,
            "apb_cuda: b_q must be 16-byte aligned (it is read as 8-element vectors)");
}

/* ================================================================ forward */

extern "C" void mf_apb_forward_cuda(bf16 *out, void *saved, const bf16 *s, const bf16 *z,
                                    const uint8_t *mask, const mf_apb_cuda_weights *w, int N,
                                    int Cs, int Cz, int H, int D, int accumulate, void *ws,
                                    size_t ws_bytes, const mf_cuda_blas *blas,
                                    cudaStream_t stream) {
  apb_check(w, N, Cs, Cz, H, D);
  MF_ASSERT(out && saved && s && z && ws && blas, "apb_forward_cuda: NULL argument");
  const int HD = H * D;
  apb_saved v;
  saved_carve(&v, saved, N, Cs, H, D);
  apb_ws b;
  MF_ASSERT(ws_carve(&b, NULL, N, Cs, Cz, H, D) <= ws_bytes, "apb_cuda: workspace too small");
  ws_carve(&b, ws, N, Cs, Cz, H, D);

  /* â = LN(s); [q | k | v | g] = â·W_pᵀ (fp32) → heads, + b_q */
  mf_ln_rows_cuda(v.ahat, v.mean_s, v.rstd_s, s, w->ln_s_g, w->ln_s_b, N, Cs, MF_LN_FULL, 0,
                  stream);
  const bf16 *wp[4] = {w->w_q, w->w_k, w->w_v, w->w_g};
  for (int p = 0; p < 4; p++)
    mf_gemm_rm_cuda(blas, stream, 0, 1, N, HD, Cs, 1.0f, v.ahat, Cs, wp[p], Cs, 0.0f,
                    b.pf + (int64_t)p * HD, MF_GEMM_OUT_F32, 4 * HD);
  bf16 *const heads[4] = {v.qh, v.kh, v.vh, v.gh};
  launch_rows_to_heads_f32(heads, b.pf, 4 * HD, w->b_q, 4, N, H, D, stream);

  /* the pair bias (H, N, NB): the one pass over z */
  launch_bias_fwd(v.bias, z, w, N, Cz, H, stream);

  /* gated attention, heads → rows, output projection (+ the residual) */
  const mf_attn_views vw = att_views(N, H, D);
  mf_attention_forward_strided_cuda(v.oh, v.lse, v.qh, v.kh, v.vh, v.bias, mask, v.gh,
                                    att_dims(N, H, D), &vw, stream);
  bf16 *const oh[1] = {v.oh};
  launch_heads_to_rows(v.og, HD, oh, 1, N, H, D, stream);
  mf_gemm_rm_cuda(blas, stream, 0, 1, N, Cs, HD, 1.0f, v.og, HD, w->w_o, HD,
                  accumulate ? 1.0f : 0.0f, out, MF_GEMM_OUT_BF16, Cs);
}

/* ================================================================ backward */

#define G(field) (g ? g->field : NULL)

extern "C" void mf_apb_backward_cuda(bf16 *ds, bf16 *dz, const mf_apb_cuda_grads *g,
                                     const bf16 *dout, const void *saved, const bf16 *s,
                                     const bf16 *z, const uint8_t *mask,
                                     const mf_apb_cuda_weights *w, int N, int Cs, int Cz, int H,
                                     int D, int accumulate_ds, void *ws, size_t ws_bytes,
                                     const mf_cuda_blas *blas, cudaStream_t stream) {
  apb_check(w, N, Cs, Cz, H, D);
  MF_ASSERT(dout && saved && s && z && ws && blas, "apb_backward_cuda: NULL argument");
  const int HD = H * D;
  apb_saved v;
  saved_carve(&v, (void *)saved, N, Cs, H, D);
  apb_ws b;
  MF_ASSERT(ws_carve(&b, NULL, N, Cs, Cz, H, D) <= ws_bytes, "apb_cuda: workspace too small");
  ws_carve(&b, ws, N, Cs, Cz, H, D);

  float *gwp[4] = {G(w_q), G(w_k), G(w_v), G(w_g)};
  const int need_s = ds || G(ln_s_g) || G(ln_s_b);
  const int need_proj = need_s || G(b_q) || gwp[0] || gwp[1] || gwp[2] || gwp[3];
  const int need_z = dz || G(w_z) || G(ln_z_g) || G(ln_z_b);

  /* output projection: dW_o += dΔsᵀ·og; d(og) = dΔs·W_o → heads */
  if (G(w_o))
    mf_gemm_rm_cuda(blas, stream, 1, 0, Cs, HD, N, 1.0f, dout, Cs, v.og, HD, 1.0f, G(w_o),
                    MF_GEMM_OUT_F32, HD);
  if (!need_proj && !need_z) return;
  mf_gemm_rm_cuda(blas, stream, 0, 0, N, HD, Cs, 1.0f, dout, Cs, w->w_o, HD, 0.0f, b.pf,
                  MF_GEMM_OUT_F32, HD);
  bf16 *const doh[1] = {b.doh};
  launch_rows_to_heads_f32(doh, b.pf, HD, NULL, 1, N, H, D, stream);

  /* attention: dq, dk, dv, dgate (H, N, D), dbias (H, N, NB) */
  const mf_attn_views vw = att_views(N, H, D);
  mf_attention_backward_strided_cuda(need_proj ? b.dqh : NULL, need_proj ? b.dkh : NULL,
                                     need_proj ? b.dvh : NULL, need_z ? b.dbias : NULL,
                                     need_proj ? b.dgh : NULL, b.doh, v.oh, v.lse, v.qh, v.kh,
                                     v.vh, v.bias, mask, v.gh, att_dims(N, H, D), &vw, b.att,
                                     b.att_bytes, stream);

  /* projections: dW_p += d_pᵀ·â, db_q += Σ_i dq, dâ = Σ_p d_p·W_p, ds = LN(s) backward */
  if (need_proj) {
    bf16 *const dh[4] = {b.dqh, b.dkh, b.dvh, b.dgh};
    launch_heads_to_rows(b.dP, 4 * HD, dh, 4, N, H, D, stream);
    if (G(b_q)) {
      mf_colsum_cuda<bf16>(G(b_q), NULL, NULL, HD, 0, b.dP, 4 * HD, N, HD, stream);
    }
    const bf16 *wp[4] = {w->w_q, w->w_k, w->w_v, w->w_g};
    for (int p = 0; p < 4; p++) {
      const bf16 *dPp = b.dP + (int64_t)p * HD;
      if (gwp[p])
        mf_gemm_rm_cuda(blas, stream, 1, 0, HD, Cs, N, 1.0f, dPp, 4 * HD, v.ahat, Cs, 1.0f,
                        gwp[p], MF_GEMM_OUT_F32, Cs);
      if (need_s)
        mf_gemm_rm_cuda(blas, stream, 0, 0, N, Cs, HD, 1.0f, dPp, 4 * HD, wp[p], Cs,
                        p ? 1.0f : 0.0f, b.dahat, MF_GEMM_OUT_F32, Cs);
    }
    if (need_s) {
      mf_ln_rows_backward_cuda(ds, b.lnpart, b.dahat, s, v.mean_s, v.rstd_s, w->ln_s_g, N, Cs,
                               MF_LN_FULL, accumulate_ds, stream);
      mf_ln_param_grad_reduce_cuda(G(ln_s_g), G(ln_s_b), b.lnpart, mf_ln_rows_backward_parts(N),
                                   Cs, stream);
    }
  }

  /* the pair pass: dz += LN_z backward(dbiasᵀ·W_z), dW_z, dγ_z, dβ_z from ordered partials */
  if (need_z) {
    launch_bias_bwd(dz, b.zpart, b.dbias, z, w, N, Cz, H, stream);
    if (G(w_z) || G(ln_z_g) || G(ln_z_b)) {
      const int P = H * Cz + 2 * Cz;
      mf_colsum_cuda<float>(G(w_z), G(ln_z_g), G(ln_z_b), H * Cz, Cz, b.zpart, P, bwd_blocks(N), P, stream);
    }
  }
}
