/* trimul_out_wg.cu — the triangle multiplication's output side (forward) as one persistent
 * wgmma kernel (sm_90a), C = Ch = 128:
 *   out (M, C)  = sg ⊙ (LN_out(T)·W_zᵀ)              (mask == NULL)
 *   out (M, C) += mask ⊙ sg ⊙ (LN_out(T)·W_zᵀ)       (the residual with row / column dropout)
 * T (Ch, ldm) channel-major (the triangular contraction's output, trimul.cu), sg = σ(g)
 * (M, C) row-major, mask (N, C) fp32 indexed by b (ROWWISE) or a (COLWISE) of m = a·N + b;
 * the LN_out statistics mean, rstd (M) are written for the backward. It replaces, per chunk
 * of rows, tri_ln_cm_v_kernel (x̂ rows to HBM), a cuBLAS GEMM (u, fp32, to HBM) and
 * tri_out_fwd_kernel: in one pass T, sg and out are read once and out written once (at
 * N = 768, H200, an ncu profile of the block, 2026-11-30: those three took 0.44 ms per
 * triangle multiplication for about 0.6 GB of necessary traffic). Same math as that path,
 * except that the statistics are summed in another order and u is never rounded (it was
 * fp32 there too). Not the CPU reference (src/ops/cpu/trimul.c); the backward keeps its
 * kernels (it reads mean, rstd from here).
 *
 * Design (ln_gemm_wg.cu's): a CTA is TO_NWG warpgroups that run independently on 64-row
 * subtiles (warpgroup wg takes s = NWG·blockIdx + wg, + NWG·gridDim, …), W_z resident in
 * shared memory in the swizzled K-major B layout (wgmma_ptx.cuh). Per subtile, double
 * buffered by cp.async: the T tile arrives as it lies in HBM, one 128-byte line of 64 rows
 * per channel, chunks swizzled by the channel — which is the MN-major A operand layout of
 * wgmma (mf_wg_desc_mn: rows of the operand are k = channels). The LayerNorm runs on that
 * tile in place (thread = one row × 64 channels, the row's values in registers, the two
 * halves' sums exchanged through shared memory in a fixed order), then 8 × wgmma m64n128k16
 * with A MN-major, and the epilogue works on the accumulator fragments: × sg, then
 * out = o + mask·v (or v), with 4-byte accesses to sg / out / mask in the fragment pattern
 * (two consecutive fragments of a thread cover a 32-byte sector). Rows ≥ M are computed
 * from whatever the tile's unused lines hold and never stored. Deterministic. */
#include "ln_gemm_cuda.h"

#include "fusion_util.cuh"
#include "ln_tile.cuh"
#include "ops/dropout.h"
#include "wgmma_ptx.cuh"

#define TO_C 128   /* C = Ch: the one width this kernel takes */
#define TO_SUB 64  /* rows per warpgroup subtile */
#define TO_NWG 3   /* warpgroups per CTA */
#define TO_TILE (TO_C * TO_SUB * 2) /* bytes of one T tile: 128 lines × 128 B */

/* Shared memory from a 1024-aligned base: W_z (2 blocks of 128 n-rows × 128 B = 32 KB);
 * per warpgroup 2 T tiles (16 KB each); γ, β fp32 (2 × 128); per warpgroup the row-sum
 * exchange (2 × 2 × 64 fp32). */
#define TO_W_BYTES (TO_C * TO_C * 2)
#define TO_SMEM (TO_W_BYTES + TO_NWG * 2 * TO_TILE + 2 * TO_C * 4 + TO_NWG * 256 * 4 + 1024)

static __device__ __forceinline__ void to_bar_wg(int wg) { /* the 128 threads of warpgroup wg */
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
}

/* Subtile s's T lines into tile (channel c's rows m0 .. m0 + 63 at c·128, 16-byte chunk j at
 * ((j ^ c) & 7)·16); chunks at or past M skipped (a chunk holding row M − 1 may read up to 7
 * padding columns of its plane, inside ldm); nothing for s ≥ nsub. One cp.async group is
 * committed by the caller either way. */
static __device__ __forceinline__ void to_load_tile(unsigned char *tile, const bf16 *__restrict__ T,
                                                    int64_t ldm, int64_t s, int64_t nsub,
                                                    int64_t M, int tid) {
  if (s >= nsub) return;
  const int64_t m0 = s * TO_SUB;
  const int rows = (int)(M - m0 < TO_SUB ? M - m0 : TO_SUB);
#pragma unroll
  for (int i = 0; i < TO_C * 8 / 128; i++) {
    const int idx = tid + i * 128, c = idx >> 3, j = idx & 7;
    if (8 * j < rows) lg_cp16(tile + c * 128 + (((j ^ c) & 7) << 4), T + (int64_t)c * ldm + m0 + 8 * j);
  }
}

static __global__ void __launch_bounds__(128 * TO_NWG, 1)
trimul_out_wg_kernel(bf16 *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
                     const bf16 *__restrict__ T, int64_t ldm, const bf16 *__restrict__ gamma,
                     const bf16 *__restrict__ beta, const bf16 *__restrict__ w,
                     const bf16 *__restrict__ sg, const float *__restrict__ mask, int axis,
                     int N, int64_t M) {
  /* out, sg (M, C); mean, rstd (M); T (Ch, ldm); gamma, beta (Ch); w (C, Ch); mask (N, C) */
  extern __shared__ unsigned char to_raw[];
  unsigned char *sm = to_raw + ((1024u - (mf_smem_u32(to_raw) & 1023u)) & 1023u);
  unsigned char *ws = sm, *tiles = sm + TO_W_BYTES;
  float *gb = (float *)(tiles + TO_NWG * 2 * TO_TILE); /* γ (C) | β (C) */
  const int lane = threadIdx.x & 31, warp = lg_warp_id(), wg = warp >> 2, wl = warp & 3;
  const int tid = (int)(threadIdx.x & 127);
  float *red = gb + 2 * TO_C + wg * 256; /* [sum: half 0 | half 1 | sq: half 0 | half 1] × 64 */
  const int64_t nsub = (M + TO_SUB - 1) / TO_SUB;
  const int64_t s0 = TO_NWG * (int64_t)blockIdx.x + wg, stride = TO_NWG * (int64_t)gridDim.x;

  /* W_z rows n (output channels), k = input channels: block k/64 of 128 rows × 128 B */
  for (int idx = threadIdx.x; idx < TO_C * (TO_C / 8); idx += 128 * TO_NWG) {
    const int n = idx / (TO_C / 8), p = idx % (TO_C / 8);
    lg_cp16(ws + (p / 8) * (TO_C * 128) + mf_sw128_chunk(n, p % 8), w + (int64_t)n * TO_C + p * 8);
  }
  for (int c = threadIdx.x; c < TO_C; c += 128 * TO_NWG) {
    gb[c] = mf_bf16_to_f32(gamma[c]);
    gb[TO_C + c] = mf_bf16_to_f32(beta[c]);
  }
  unsigned char *tw = tiles + wg * 2 * TO_TILE; /* this warpgroup's two T tiles */
  to_load_tile(tw, T, ldm, s0, nsub, M, tid);
  mf_cp_async_commit(); /* W_z and the first tile */
  to_load_tile(tw + TO_TILE, T, ldm, s0 + stride, nsub, M, tid);
  mf_cp_async_commit();
  mf_cp_async_wait<1>();
  mf_fence_proxy_async();
  __syncthreads(); /* W_z, γ, β visible to all; from here on each warpgroup runs alone */

  const uint32_t w_u = mf_smem_u32(ws);
  const int r = tid & 63, hf = tid >> 6; /* LayerNorm: row r, channels 64·hf .. 64·hf + 63 */
  int buf = 0;
  for (int64_t s = s0; s < nsub; s += stride, buf ^= 1) {
    const int64_t m0 = s * TO_SUB;
    unsigned char *tile = tw + buf * TO_TILE;
    mf_cp_async_wait<1>(); /* this subtile's group (the next one may be in flight) */
    to_bar_wg(wg);

    /* LN_out of row r in place: x̂ = (t − μ)·rstd·γ + β, bf16 */
    float x[64];
#pragma unroll
    for (int k = 0; k < 64; k++) {
      const int c = 64 * hf + k;
      x[k] = mf_bf16_to_f32(*(const bf16 *)(tile + c * 128 + ((((r >> 3) ^ c) & 7) << 4) + (r & 7) * 2));
    }
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < 64; k++) sum += x[k];
    red[hf * 64 + r] = sum;
    to_bar_wg(wg);
    const float mu = (red[r] + red[64 + r]) * (1.0f / TO_C);
    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < 64; k++) {
      const float dv = x[k] - mu;
      q += dv * dv;
    }
    red[128 + hf * 64 + r] = q;
    to_bar_wg(wg);
    const float rs = 1.0f / sqrtf((red[128 + r] + red[192 + r]) * (1.0f / TO_C) + (float)MF_LN_EPS);
    if (hf == 0 && m0 + r < M) {
      mean[m0 + r] = mu;
      rstd[m0 + r] = rs;
    }
#pragma unroll
    for (int k = 0; k < 64; k++) {
      const int c = 64 * hf + k;
      *(bf16 *)(tile + c * 128 + ((((r >> 3) ^ c) & 7) << 4) + (r & 7) * 2) =
          mf_f32_to_bf16((x[k] - mu) * rs * gb[c] + gb[TO_C + c]);
    }
    mf_fence_proxy_async();
    to_bar_wg(wg); /* x̂ ready for wgmma */

    /* u (64 × 128) = x̂·W_zᵀ: A MN-major (k16 step = 16 channel lines), B K-major */
    float d[64];
    const uint32_t a_u = mf_smem_u32(tile);
    mf_wg_fence();
#pragma unroll
    for (int k = 0; k < TO_C / 16; k++) {
      const uint64_t da = mf_wg_desc_mn(a_u + k * 2048, TO_TILE);
      const uint64_t db = mf_wg_desc(w_u + (k / 4) * (TO_C * 128) + (k % 4) * 32);
      mf_wg_ss_n128<0, 1>(d, da, db, k > 0);
    }
    mf_wg_commit();
    mf_wg_wait<0>();
    mf_wg_pin(d);
    to_bar_wg(wg); /* every warp's wgmma done with the tile: refill it */
    to_load_tile(tile, T, ldm, s + 2 * stride, nsub, M, tid);
    mf_cp_async_commit();

    /* epilogue on the fragments: d[4i + 2hh + e] = (row 16·wl + lane/4 + 8·hh,
     * column 8i + 2·(lane % 4) + e) */
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const int64_t m = m0 + wl * 16 + (lane >> 2) + 8 * hh;
      if (m >= M) continue;
      const int64_t a = m / N, b = m - a * N;
      const float *mrow = mask ? mask + (axis == MF_DROPOUT_ROWWISE ? b : a) * TO_C : NULL;
      const bf16 *grow = sg + m * TO_C;
      bf16 *orow = out + m * TO_C;
#pragma unroll
      for (int i = 0; i < TO_C / 8; i++) {
        const int col = 8 * i + 2 * (lane & 3);
        const __nv_bfloat162 g2 = *(const __nv_bfloat162 *)(grow + col);
        float v0 = d[4 * i + 2 * hh] * __low2float(g2), v1 = d[4 * i + 2 * hh + 1] * __high2float(g2);
        if (mrow) {
          const float2 mk = *(const float2 *)(mrow + col);
          const __nv_bfloat162 o2 = *(const __nv_bfloat162 *)(orow + col);
          v0 = __low2float(o2) + mk.x * v0;
          v1 = __high2float(o2) + mk.y * v1;
        }
        *(__nv_bfloat162 *)(orow + col) = __floats2bfloat162_rn(v0, v1);
      }
    }
  }
  mf_cp_async_wait<0>();
}

static int to_al16(const void *p) { return (uintptr_t)p % 16 == 0; }
static int64_t g_to_calls; /* launches of trimul_out_wg_kernel (the tests check the path taken) */
extern "C" int64_t mf_trimul_out_wg_calls(void) { return g_to_calls; }

extern "C" int mf_trimul_out_wg_supported(int C, int Ch, int64_t ldm, const void *out,
                                          const void *T, const void *sg, const void *w,
                                          const void *mask) {
  return C == TO_C && Ch == TO_C && ldm % 8 == 0 && to_al16(out) && to_al16(T) && to_al16(sg) &&
         to_al16(w) && (uintptr_t)mask % 8 == 0;
}

extern "C" void mf_trimul_out_wg_cuda(bf16 *out, float *mean, float *rstd, const bf16 *T,
                                      int64_t ldm, const bf16 *gamma, const bf16 *beta,
                                      const bf16 *w, const bf16 *sg, const float *mask, int axis,
                                      int N, int C, int Ch, cudaStream_t stream) {
  const int64_t M = (int64_t)N * N;
  MF_ASSERT(mf_trimul_out_wg_supported(C, Ch, ldm, out, T, sg, w, mask) && ldm >= M,
            "trimul_out_wg: C=%d Ch=%d (both 128), ldm=%lld (>= M=%lld, a multiple of 8), "
            "16-byte aligned out, T, sg, w", C, Ch, (long long)ldm, (long long)M);
  MF_ASSERT(out && mean && rstd && T && gamma && beta && w && sg, "trimul_out_wg: NULL argument");
  if (M <= 0) return;
  MF_CHECK_CUDA(cudaFuncSetAttribute(trimul_out_wg_kernel,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, TO_SMEM));
  const int64_t ntile = (M + TO_NWG * TO_SUB - 1) / (TO_NWG * TO_SUB);
  const int grid = (int)(ntile < mf_sm_count() ? ntile : mf_sm_count());
  trimul_out_wg_kernel<<<grid, 128 * TO_NWG, TO_SMEM, stream>>>(out, mean, rstd, T, ldm, gamma,
                                                                beta, w, sg, mask, axis, N, M);
  MF_CHECK_LAUNCH();
  g_to_calls++;
}
