/* out_proj_wg.cu — the output side of the pair sub-layers as one persistent wgmma kernel
 * (sm_90a), 128 input and 128 output channels, in three modes:
 *   TRI_FWD, the triangle multiplication's forward (mf_trimul_out_wg_cuda):
 *     out (M, C)  = sg ⊙ (LN_out(T)·W_zᵀ)            (mask == NULL)
 *     out (M, C) = res + mask ⊙ sg ⊙ (LN_out(T)·W_zᵀ)   (the residual with row / column
 *                                                     dropout; res = out: in place)
 *   TRI_BWD, its backward's first step on a chunk of rows (mf_trimul_out_bwd_wg_cuda): y =
 *     LN_out(T) with the saved statistics (written out for dW_z), u = y·W_zᵀ, and the gate
 *     backward du = dd·s, dgl = dd·u·s(1 − s), dd = dout (⊙ mask), s = σ(gate logits) —
 *     replacing tri_ln_cm_v_kernel, a cuBLAS GEMM into fp32 u and tri_out_bwd_kernel;
 *   PLAIN, the triangle attention's output projection (mf_out_proj_wg_cuda):
 *     out (M, C) = o·W_oᵀ,  or  out = res + mask ⊙ (o·W_oᵀ),  o (M, 128) row-major
 *     (it replaces a cuBLAS GEMM into fp32 rows and ta_resdrop_kernel, triatt.cu).
 * For the triangle multiplication: T (Ch, ldm) channel-major (the triangular contraction's output, trimul.cu), sg = σ(g)
 * (M, C) row-major, mask (N, C) fp32 indexed by b (ROWWISE) or a (COLWISE) of m = a·N + b;
 * the LN_out statistics mean, rstd (M) are written for the backward. It replaces, per chunk
 * of rows, tri_ln_cm_v_kernel (x̂ rows to HBM), a cuBLAS GEMM (u, fp32, to HBM) and
 * tri_out_fwd_kernel: in one pass T, sg and out are read once and out written once (at
 * N = 768, H200, an ncu profile of the block, 2026-11-30: those three took 0.44 ms per
 * triangle multiplication for about 0.6 GB of necessary traffic). Same math as that path,
 * except that the statistics are summed in another order and u is never rounded (it was
 * fp32 there too). Not the CPU reference (src/ops/cpu/trimul.c, src/ops/cpu/triatt.c).
 *
 * Design (ln_gemm_wg.cu's): a CTA is TO_NWG warpgroups that run independently on 64-row
 * subtiles (warpgroup wg takes s = NWG·blockIdx + wg, + NWG·gridDim, …), W_z resident in
 * shared memory in the swizzled K-major B layout (wgmma_ptx.cuh). Per subtile, double
 * buffered by cp.async: the T tile arrives as it lies in HBM, one 128-byte line of 64 rows
 * per channel, chunks swizzled by the channel — which is the MN-major A operand layout of
 * wgmma (mf_wg_desc_mn: rows of the operand are k = channels). The LayerNorm runs on that
 * tile in place (16-byte chunks of 8 rows in registers, each row's sums over its channels
 * by a warp butterfly in a fixed order: to_layernorm16), then 8 × wgmma m64n128k16
 * with A MN-major; the accumulators are staged in fp32 in the consumed tile (two halves of
 * 64 columns) and the epilogue reads them back 8 consecutive columns per thread, so that
 * the stores (out; dgl, du) are coalesced 16-byte pieces, and the row-major operands (sg
 * and the residual out; dout and the gate logits) come from shared memory, cp.async'd at
 * the top of the subtile (in flight during its LayerNorm and GEMM; issued one subtile ahead
 * into the single E buffer, right after the previous epilogue, they had no time to land:
 * 0.276 ms). (A first version worked on the fragments with 4-byte global accesses, 8
 * rows per warp instruction: the output side got slower than the kernels it replaced; a
 * second staged u but read sg / out from global memory in the epilogue: 0.354 ms for the
 * trimul forward's 0.6 GB at N = 768, 1.7 TB/s.) The tile is refilled after that. Rows past the range are computed from whatever the tile's unused
 * lines hold and never stored. Deterministic. Without the
 * LayerNorm (PLAIN) the tile is the 64 rows of o as they lie (two K-major blocks of 64
 * channels, 128-byte rows swizzled), the GEMM's A operand as it is. TRI_BWD reads mean,
 * rstd instead of summing — and so normalises 16-byte pieces (8 rows of a channel line)
 * rather than a row's channels 2 bytes at a time (to_layernorm_saved16: the trimul backward
 * 3.01 → 2.97 ms at N = 768) — and copies the normalised tile to y channel-major (its lines
 * as they lie) while the GEMM runs. */
#include "ln_gemm_cuda.h"

#include "fusion_util.cuh"
#include "ln_tile.cuh"
#include "ops/dropout.h"
#include "wgmma_ptx.cuh"

#define TO_C 128   /* C = Ch: the one width this kernel takes */
#define TO_SUB 64  /* rows per warpgroup subtile */
#define TO_NWG 3   /* warpgroups per CTA */
#define TO_TILE (TO_C * TO_SUB * 2) /* bytes of one A tile: 128 lines × 128 B */

/* The three uses (see the file comment). */
enum { TO_TRI_FWD = 0, TO_PLAIN = 1, TO_TRI_BWD = 2 };

/* Shared memory from a 1024-aligned base: W (2 blocks of 128 n-rows × 128 B = 32 KB);
 * per warpgroup 2 A tiles and the epilogue's two row tiles E (16 KB each: 64 rows × 128
 * bf16, row-major); γ, β fp32 (2 × 128). 226 KB with 3 warpgroups. */
#define TO_W_BYTES (TO_C * TO_C * 2)
#define TO_WG_BYTES (4 * TO_TILE)
#define TO_SMEM (TO_W_BYTES + TO_NWG * TO_WG_BYTES + 2 * TO_C * 4 + 1024)

/* One launch's arguments. The kernel covers rows [m_base, m_base + rows) of the M = N² pair
 * rows; "local" arrays are indexed by m − m_base. */
typedef struct {
  bf16 *out;          /* TRI_FWD, PLAIN: (M, C); TRI_BWD: du, local (rows, C) */
  bf16 *dgl;          /* TRI_BWD: (M, C) */
  bf16 *y;            /* TRI_BWD: LN_out, channel-major (Ch, ldy), local columns */
  int64_t ldy;
  float *mean, *rstd; /* (M): written (TRI_FWD) or read (TRI_BWD) */
  const bf16 *A;      /* T (Ch, ldm) channel-major, or o (M, 128) row-major (PLAIN) */
  int64_t ldm;
  const bf16 *gamma, *beta; /* (Ch) */
  const bf16 *w;            /* (C, 128) */
  const bf16 *sg;           /* TRI_FWD: σ(g) (M, C) */
  const bf16 *dout;         /* TRI_BWD: (M, C) */
  const bf16 *glb;          /* TRI_BWD: gate logits, local (rows, C) */
  const float *mask;        /* (N, C) or NULL */
  const bf16 *res;          /* TRI_FWD, PLAIN with a mask: the residual (M, C); NULL: out */
  int axis, N;
  int64_t m_base, rows;
} to_params;

/* Subtile s (rows m0 = m_base + 64·s ..) into tile, nothing for s ≥ nsub; rows past the
 * range skipped. PLAIN: the rows of o as the K-major A operand, block k/64 of 64 rows ×
 * 128 B (mf_sw128_chunk). Else the T lines: channel c's 64 rows at c·128, 16-byte chunk j
 * at ((j ^ c) & 7)·16 (a chunk holding the last row may read up to 7 padding columns of its
 * plane, inside ldm). The caller commits one cp.async group either way. */
template <int MODE>
static __device__ __forceinline__ void to_load(unsigned char *tile, const to_params &p, int64_t s,
                                               int64_t nsub, int tid) {
  if (s >= nsub) return;
  const int64_t m0 = p.m_base + s * TO_SUB, r0 = s * TO_SUB;
  const int rows = (int)(p.rows - r0 < TO_SUB ? p.rows - r0 : TO_SUB);
#pragma unroll
  for (int i = 0; i < TO_C * 8 / 128; i++) {
    const int idx = tid + i * 128;
    if constexpr (MODE == TO_PLAIN) {
      const int r = idx >> 4, q = idx & 15;
      if (r < rows)
        lg_cp16(tile + (q >> 3) * (TO_SUB * 128) + mf_sw128_chunk(r, q & 7), p.A + (m0 + r) * TO_C + q * 8);
    } else {
      const int c = idx >> 3, j = idx & 7;
      if (8 * j < rows) lg_cp16(tile + c * 128 + (((j ^ c) & 7) << 4), p.A + (int64_t)c * p.ldm + m0 + 8 * j);
    }
  }
}

/* The epilogue's row-major operands of subtile s into e (two 16 KB tiles of 64 rows × 128
 * bf16), by cp.async: TRI_FWD e0 = sg rows, e1 = the residual's rows (res, or out in
 * place; with a mask); PLAIN e1 = the same; TRI_BWD e0 = dout rows, e1 = the gate
 * logits' local rows. Rows past the range skipped; nothing for s ≥ nsub. */
template <int MODE>
static __device__ __forceinline__ void to_load_e(unsigned char *e, const to_params &p, int64_t s,
                                                 int64_t nsub, int tid) {
  if (s >= nsub) return;
  const int64_t r0 = s * TO_SUB, m0 = p.m_base + r0;
  const int rows = (int)(p.rows - r0 < TO_SUB ? p.rows - r0 : TO_SUB);
  const bf16 *src0 = MODE == TO_TRI_FWD ? p.sg + m0 * TO_C : MODE == TO_TRI_BWD ? p.dout + m0 * TO_C : NULL;
  const bf16 *src1 = MODE == TO_TRI_BWD ? p.glb + r0 * TO_C : p.mask ? (p.res ? p.res : p.out) + m0 * TO_C : NULL;
#pragma unroll
  for (int i = 0; i < TO_SUB * 16 / 128; i++) {
    const int idx = tid + i * 128;
    if ((idx >> 4) >= rows) continue;
    if (src0) lg_cp16(e + idx * 16, src0 + idx * 8);
    if (src1) lg_cp16(e + TO_TILE + idx * 16, src1 + idx * 8);
  }
}

/* TRI_FWD's LayerNorm of the T tile in place, x̂ = (t − μ)·rstd·γ + β in bf16, 16 bytes at
 * a time: lane l of warp wl takes the 16-byte chunk j = 2·wl + l % 2 (rows 8j .. 8j + 7) of
 * the channel lines l/2 + 16i, i < 8, and keeps the 8 chunks in registers; each row's sums
 * over the 128 channels (the mean, then Σ (t − μ)²) are the lane's 8 lines, then the 16
 * lanes of equal j by an xor butterfly (the same value on every lane); lanes 0 and 1 write
 * μ, rstd of rows < rows. It replaced a thread per row half reading and writing its 64
 * values 2 bytes at a time, about half of the kernel's stall samples (ncu, N = 768,
 * 2026-11-30). Rows past the range are computed from whatever the tile's unused lines hold
 * (never stored). */
static __device__ __forceinline__ void to_layernorm16(unsigned char *tile, const to_params &p,
                                                      const float *gb, int64_t m0, int rows,
                                                      int tid) {
  const int lane = tid & 31, j = 2 * (tid >> 5) + (lane & 1), lg = lane >> 1;
  uint4 v[8];
#pragma unroll
  for (int i = 0; i < 8; i++) {
    const int c = lg + 16 * i;
    v[i] = *(const uint4 *)(tile + c * 128 + (((j ^ c) & 7) << 4));
  }
  float mu[8], rs[8];
#pragma unroll
  for (int k = 0; k < 8; k++) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) sum += mf_bf16_to_f32(((const bf16 *)&v[i])[k]);
#pragma unroll
    for (int o = 2; o < 32; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    mu[k] = sum * (1.0f / TO_C);
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const float dv = mf_bf16_to_f32(((const bf16 *)&v[i])[k]) - mu[k];
      q += dv * dv;
    }
#pragma unroll
    for (int o = 2; o < 32; o <<= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    rs[k] = 1.0f / sqrtf(q * (1.0f / TO_C) + (float)MF_LN_EPS);
  }
  if (lg == 0)
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const int r = 8 * j + k;
      if (r < rows) {
        p.mean[m0 + r] = mu[k];
        p.rstd[m0 + r] = rs[k];
      }
    }
#pragma unroll
  for (int i = 0; i < 8; i++) {
    const int c = lg + 16 * i;
    bf16 *x = (bf16 *)&v[i];
    const float g = gb[c], b = gb[TO_C + c];
#pragma unroll
    for (int k = 0; k < 8; k++) x[k] = mf_f32_to_bf16((mf_bf16_to_f32(x[k]) - mu[k]) * rs[k] * g + b);
    *(uint4 *)(tile + c * 128 + (((j ^ c) & 7) << 4)) = v[i];
  }
}

/* TRI_BWD's LayerNorm with the saved statistics, 16 bytes at a time: thread t takes the
 * 16-byte chunk j = t % 8 (rows 8j .. 8j + 7) of channel lines t / 8 + 16i, i < 8, reads
 * it, normalises its 8 values and writes it back (the same arithmetic per element as
 * to_layernorm; rows past the range get μ = rstd = 0, never stored). to_layernorm's 2-byte
 * accesses of one row's channels made its short-scoreboard stalls the kernel's largest
 * (ncu, 2026-11-30). */
static __device__ __forceinline__ void to_layernorm_saved16(unsigned char *tile, const to_params &p,
                                                            const float *gb, int64_t m0, int rows,
                                                            int tid) {
  const int j = tid & 7;
  float mu[8], rs[8];
#pragma unroll
  for (int k = 0; k < 8; k++) {
    const int r = 8 * j + k;
    mu[k] = r < rows ? p.mean[m0 + r] : 0.0f;
    rs[k] = r < rows ? p.rstd[m0 + r] : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < TO_C / 16; i++) {
    const int c = (tid >> 3) + 16 * i;
    uint4 *q = (uint4 *)(tile + c * 128 + (((j ^ c) & 7) << 4));
    uint4 v = *q;
    bf16 *x = (bf16 *)&v;
    const float g = gb[c], b = gb[TO_C + c];
#pragma unroll
    for (int k = 0; k < 8; k++) x[k] = mf_f32_to_bf16((mf_bf16_to_f32(x[k]) - mu[k]) * rs[k] * g + b);
    *q = v;
  }
}

/* TRI_BWD: the tile's LN_out lines to y (Ch, ldy) channel-major, local columns r0 ..: each
 * 16-byte chunk as it lies (8 threads per 128-byte line; a chunk holding the last row
 * carries up to 7 columns past it, inside ldy). */
static __device__ __forceinline__ void to_store_y(bf16 *__restrict__ y, int64_t ldy,
                                                  const unsigned char *tile, int64_t r0, int rows,
                                                  int tid) {
#pragma unroll
  for (int i = 0; i < TO_C * 8 / 128; i++) {
    const int idx = tid + i * 128, c = idx >> 3, j = idx & 7;
    if (8 * j < rows)
      *(uint4 *)(y + (int64_t)c * ldy + r0 + 8 * j) = *(const uint4 *)(tile + c * 128 + (((j ^ c) & 7) << 4));
  }
}

/* The fp32 staging of 64 rows × 64 accumulator columns (16 KB, in the consumed A tile): row
 * r at r·256, 16-byte chunk k (4 columns) at ((k ^ r) & 15)·16. */
static __device__ __forceinline__ uint32_t to_st_off(int r, int c) {
  return (uint32_t)(r * 256 + ((((c >> 2) ^ r) & 15) << 4) + (c & 3) * 4);
}

/* The epilogue of 8 consecutive columns c0 .. c0 + 7 of row m (local row rl; tile row rt of
 * the E tiles e) from u[8]: the row-major operands from e, the mask row (2 × 16 bytes) from
 * global memory, 16-byte stores. */
template <int MODE>
static __device__ __forceinline__ void to_epilogue8(const to_params &p, const float *u, int64_t m,
                                                    int64_t rl, int c0, const unsigned char *e,
                                                    int rt) {
  const bf16 *e0 = (const bf16 *)e + rt * TO_C + c0, *e1 = (const bf16 *)(e + TO_TILE) + rt * TO_C + c0;
  const int64_t a = m / p.N, b = m - a * p.N;
  float mk[8];
  if (p.mask) mf_ldvf<8>(mk, p.mask + (p.axis == MF_DROPOUT_ROWWISE ? b : a) * TO_C + c0);
  float v[8];
  if constexpr (MODE == TO_TRI_BWD) { /* du = dd·s, dgl = dd·u·s(1 − s), s = σ(gl) */
    float dd[8], l[8];
    mf_ldv<8>(dd, e0);
    mf_ldv<8>(l, e1);
#pragma unroll
    for (int k = 0; k < 8; k++) {
      if (p.mask) dd[k] *= mk[k];
      const float sv = mf_sigmoidf(l[k]);
      l[k] = dd[k] * u[k] * sv * (1.0f - sv);
      v[k] = dd[k] * sv;
    }
    mf_stv<8>(p.dgl + m * TO_C + c0, l);
    mf_stv<8>(p.out + rl * TO_C + c0, v);
  } else {
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = u[k];
    if constexpr (MODE == TO_TRI_FWD) {
      float g[8];
      mf_ldv<8>(g, e0);
#pragma unroll
      for (int k = 0; k < 8; k++) v[k] *= g[k];
    }
    if (p.mask) {
      float o[8];
      mf_ldv<8>(o, e1);
#pragma unroll
      for (int k = 0; k < 8; k++) v[k] = o[k] + mk[k] * v[k];
    }
    mf_stv<8>(p.out + m * TO_C + c0, v);
  }
}

template <int MODE>
static __global__ void __launch_bounds__(128 * TO_NWG, 1) out_proj_wg_kernel(const to_params p) {
  extern __shared__ unsigned char to_raw[];
  unsigned char *sm = to_raw + ((1024u - (mf_smem_u32(to_raw) & 1023u)) & 1023u);
  unsigned char *ws = sm, *tiles = sm + TO_W_BYTES;
  float *gb = (float *)(tiles + TO_NWG * TO_WG_BYTES); /* γ (C) | β (C) */
  const int lane = threadIdx.x & 31, warp = lg_warp_id(), wg = warp >> 2, wl = warp & 3;
  const int tid = (int)(threadIdx.x & 127);
  const int64_t nsub = (p.rows + TO_SUB - 1) / TO_SUB;
  const int64_t s0 = TO_NWG * (int64_t)blockIdx.x + wg, stride = TO_NWG * (int64_t)gridDim.x;

  /* W rows n (output channels), k = input channels: block k/64 of 128 rows × 128 B */
  for (int idx = threadIdx.x; idx < TO_C * (TO_C / 8); idx += 128 * TO_NWG) {
    const int n = idx / (TO_C / 8), q = idx % (TO_C / 8);
    lg_cp16(ws + (q / 8) * (TO_C * 128) + mf_sw128_chunk(n, q % 8), p.w + (int64_t)n * TO_C + q * 8);
  }
  if (MODE != TO_PLAIN)
    for (int c = threadIdx.x; c < TO_C; c += 128 * TO_NWG) {
      gb[c] = mf_bf16_to_f32(p.gamma[c]);
      gb[TO_C + c] = mf_bf16_to_f32(p.beta[c]);
    }
  unsigned char *tw = tiles + wg * TO_WG_BYTES; /* this warpgroup's two A tiles */
  unsigned char *te = tw + 2 * TO_TILE;         /* and its E tiles */
  /* cp.async groups: [W, A(s0)], [A(s0 + stride)]; then per subtile s [E(s)] at its top
   * (waited for before its epilogue: in flight during the LayerNorm and the GEMM) and
   * [A(s + 2·stride)] after its epilogue: at the top of each subtile all but the newest
   * group are complete, which covers that subtile's A */
  to_load<MODE>(tw, p, s0, nsub, tid);
  mf_cp_async_commit();
  to_load<MODE>(tw + TO_TILE, p, s0 + stride, nsub, tid);
  mf_cp_async_commit();
  mf_cp_async_wait<1>();
  mf_fence_proxy_async();
  __syncthreads(); /* W, γ, β visible to all; from here on each warpgroup runs alone */

  const uint32_t w_u = mf_smem_u32(ws);
  /* operand descriptors: W's once, the A tile's per subtile (mf_wg_desc_off) */
  const uint64_t dw = mf_wg_desc(w_u);
  int buf = 0;
  for (int64_t s = s0; s < nsub; s += stride, buf ^= 1) {
    const int64_t r0 = s * TO_SUB, m0 = p.m_base + r0;
    const int rows = (int)(p.rows - r0 < TO_SUB ? p.rows - r0 : TO_SUB);
    unsigned char *tile = tw + buf * TO_TILE;
    mf_cp_async_wait<1>(); /* this subtile's group (the next one may be in flight) */
    mf_fence_proxy_async(); /* its cp.async writes before wgmma reads them (PLAIN) */
    mf_bar_wg(wg);
    to_load_e<MODE>(te, p, s, nsub, tid); /* the epilogue's operands (E free since the last one) */
    mf_cp_async_commit();
    if constexpr (MODE == TO_TRI_BWD) {
      to_layernorm_saved16(tile, p, gb, m0, rows, tid);
      mf_fence_proxy_async();
      mf_bar_wg(wg); /* x̂ ready for wgmma (and for to_store_y) */
    } else if constexpr (MODE != TO_PLAIN) {
      to_layernorm16(tile, p, gb, m0, rows, tid);
      mf_fence_proxy_async();
      mf_bar_wg(wg); /* x̂ ready for wgmma (and for to_store_y) */
    }

    /* u (64 × 128) = A·Wᵀ: A MN-major (the T tile: k16 step = 16 channel lines) or K-major
     * (PLAIN), W K-major */
    float d[64];
    const uint32_t a_u = mf_smem_u32(tile);
    const uint64_t da = MODE != TO_PLAIN ? mf_wg_desc_mn(a_u, TO_TILE) : mf_wg_desc(a_u);
    mf_wg_fence();
#pragma unroll
    for (int k = 0; k < TO_C / 16; k++) {
      const uint64_t db = mf_wg_desc_off(dw, (k / 4) * (TO_C * 128) + (k % 4) * 32);
      if constexpr (MODE != TO_PLAIN) mf_wg_ss_n128<0, 1>(d, mf_wg_desc_off(da, k * 2048), db, k > 0);
      else mf_wg_ss_n128<0, 0>(d, mf_wg_desc_off(da, (k / 4) * (TO_SUB * 128) + (k % 4) * 32), db, k > 0);
    }
    mf_wg_commit();
    if constexpr (MODE == TO_TRI_BWD) to_store_y(p.y, p.ldy, tile, r0, rows, tid); /* during the GEMM */
    mf_wg_wait<0>();
    mf_wg_pin(d);
    mf_cp_async_wait<0>(); /* E landed */
    mf_bar_wg(wg); /* every warp's wgmma (and y's reads) done with the tile: it stages u now */

    /* epilogue, per half of the columns: the fragments d[4i + 2hh + e] = (row 16·wl +
     * lane/4 + 8·hh, column 8i + 2·(lane % 4) + e) staged in fp32 in the tile, then each
     * thread takes 8 consecutive columns of a row (8 threads per row's half: coalesced) */
#pragma unroll
    for (int h = 0; h < 2; h++) {
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        const int rl = wl * 16 + (lane >> 2) + 8 * hh;
#pragma unroll
        for (int i = 8 * h; i < 8 * h + 8; i++)
          *(float2 *)(tile + to_st_off(rl, 8 * i - 64 * h + 2 * (lane & 3))) =
              make_float2(d[4 * i + 2 * hh], d[4 * i + 2 * hh + 1]);
      }
      mf_bar_wg(wg);
#pragma unroll
      for (int it = 0; it < TO_SUB * 8 / 128; it++) {
        const int idx = tid + it * 128, rl = idx >> 3, cg = idx & 7;
        if (rl < rows) {
          float u[8];
          *(float4 *)u = *(const float4 *)(tile + to_st_off(rl, 8 * cg));
          *(float4 *)(u + 4) = *(const float4 *)(tile + to_st_off(rl, 8 * cg + 4));
          to_epilogue8<MODE>(p, u, m0 + rl, r0 + rl, 64 * h + 8 * cg, te, rl);
        }
      }
      mf_bar_wg(wg); /* the staging and E read before they are rewritten (next half, refills) */
    }
    to_load<MODE>(tile, p, s + 2 * stride, nsub, tid);
    mf_cp_async_commit();
  }
  mf_cp_async_wait<0>();
}

static int to_al16(const void *p) { return (uintptr_t)p % 16 == 0; }
/* launches of the three kernels (the tests check the paths taken) */
static int64_t g_calls[3];
extern "C" int64_t mf_trimul_out_wg_calls(void) { return g_calls[TO_TRI_FWD]; }
extern "C" int64_t mf_trimul_out_bwd_wg_calls(void) { return g_calls[TO_TRI_BWD]; }
extern "C" int64_t mf_out_proj_wg_calls(void) { return g_calls[TO_PLAIN]; }

template <int MODE>
static void to_launch(const to_params &p, cudaStream_t stream) {
  if (p.rows <= 0) return;
  MF_CHECK_CUDA(cudaFuncSetAttribute(out_proj_wg_kernel<MODE>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, TO_SMEM));
  const int64_t ntile = (p.rows + TO_NWG * TO_SUB - 1) / (TO_NWG * TO_SUB);
  const int grid = (int)(ntile < mf_sm_count() ? ntile : mf_sm_count());
  out_proj_wg_kernel<MODE><<<grid, 128 * TO_NWG, TO_SMEM, stream>>>(p);
  MF_CHECK_LAUNCH();
  g_calls[MODE]++;
}

/* The arguments every mode has (the others zero). */
static to_params to_common(bf16 *out, const bf16 *A, int64_t ldm, const bf16 *w, const float *mask,
                           int axis, int N, int64_t m_base, int64_t rows) {
  to_params p = {};
  p.out = out;
  p.A = A;
  p.ldm = ldm;
  p.w = w;
  p.mask = mask;
  p.axis = axis;
  p.N = N;
  p.m_base = m_base;
  p.rows = rows;
  return p;
}

extern "C" int mf_trimul_out_wg_supported(int C, int Ch, int64_t ldm, const void *out,
                                          const void *T, const void *sg, const void *w,
                                          const void *mask) {
  return C == TO_C && Ch == TO_C && ldm % 8 == 0 && to_al16(out) && to_al16(T) && to_al16(sg) &&
         to_al16(w) && (uintptr_t)mask % 8 == 0;
}

extern "C" void mf_trimul_out_wg_cuda(bf16 *out, float *mean, float *rstd, const bf16 *T,
                                      int64_t ldm, const bf16 *gamma, const bf16 *beta,
                                      const bf16 *w, const bf16 *sg, const float *mask,
                                      const bf16 *res, int axis, int N, int C, int Ch,
                                      cudaStream_t stream) {
  const int64_t M = (int64_t)N * N;
  MF_ASSERT(mf_trimul_out_wg_supported(C, Ch, ldm, out, T, sg, w, mask) && ldm >= M,
            "trimul_out_wg: C=%d Ch=%d (both 128), ldm=%lld (>= M=%lld, a multiple of 8), "
            "16-byte aligned out, T, sg, w", C, Ch, (long long)ldm, (long long)M);
  MF_ASSERT(out && mean && rstd && T && gamma && beta && w && sg, "trimul_out_wg: NULL argument");
  MF_ASSERT(to_al16(res), "trimul_out_wg: res must be 16-byte aligned");
  to_params p = to_common(out, T, ldm, w, mask, axis, N, 0, M);
  p.res = res;
  p.mean = mean;
  p.rstd = rstd;
  p.gamma = gamma;
  p.beta = beta;
  p.sg = sg;
  to_launch<TO_TRI_FWD>(p, stream);
}

extern "C" int mf_trimul_out_bwd_wg_supported(int C, int Ch, int64_t ldm, int64_t m_base,
                                              const void *du, const void *dgl, const void *y,
                                              const void *T, const void *dout, const void *glb,
                                              const void *w, const void *mask) {
  return C == TO_C && Ch == TO_C && ldm % 8 == 0 && m_base % 8 == 0 && to_al16(du) &&
         to_al16(dgl) && to_al16(y) && to_al16(T) && to_al16(dout) && to_al16(glb) &&
         to_al16(w) && (uintptr_t)mask % 8 == 0;
}

extern "C" void mf_trimul_out_bwd_wg_cuda(bf16 *du, bf16 *dgl, bf16 *y, int64_t ldy, const float *mean,
                                          const float *rstd, const bf16 *T, int64_t ldm,
                                          const bf16 *gamma, const bf16 *beta, const bf16 *w,
                                          const bf16 *dout, const bf16 *glb, const float *mask,
                                          int axis, int N, int64_t m_base, int64_t rows, int C,
                                          int Ch, cudaStream_t stream) {
  const int64_t M = (int64_t)N * N;
  MF_ASSERT(mf_trimul_out_bwd_wg_supported(C, Ch, ldm, m_base, du, dgl, y, T, dout, glb, w, mask) &&
                ldm >= M && m_base >= 0 && rows >= 0 && m_base + rows <= M,
            "trimul_out_bwd_wg: C=%d Ch=%d (both 128), ldm=%lld (>= M=%lld, a multiple of 8), "
            "rows [%lld, %lld) (start a multiple of 8), 16-byte aligned arrays", C, Ch,
            (long long)ldm, (long long)M, (long long)m_base, (long long)(m_base + rows));
  MF_ASSERT(ldy % 8 == 0 && ldy >= (rows + 7) / 8 * 8,
            "trimul_out_bwd_wg: y's channel stride ldy=%lld (a multiple of 8, >= rows=%lld)",
            (long long)ldy, (long long)rows);
  MF_ASSERT(du && dgl && y && mean && rstd && T && gamma && beta && w && dout && glb,
            "trimul_out_bwd_wg: NULL argument");
  to_params p = to_common(du, T, ldm, w, mask, axis, N, m_base, rows);
  p.dgl = dgl;
  p.y = y;
  p.ldy = ldy;
  p.mean = (float *)mean; /* read only in this mode */
  p.rstd = (float *)rstd;
  p.gamma = gamma;
  p.beta = beta;
  p.dout = dout;
  p.glb = glb;
  to_launch<TO_TRI_BWD>(p, stream);
}

extern "C" int mf_out_proj_wg_supported(int K, int C, const void *out, const void *o,
                                        const void *w, const void *mask) {
  return K == TO_C && C == TO_C && to_al16(out) && to_al16(o) && to_al16(w) &&
         (uintptr_t)mask % 8 == 0;
}

extern "C" void mf_out_proj_wg_cuda(bf16 *out, const bf16 *o, const bf16 *w, const float *mask,
                                    const bf16 *res, int axis, int N, int K, int C,
                                    cudaStream_t stream) {
  MF_ASSERT(mf_out_proj_wg_supported(K, C, out, o, w, mask),
            "out_proj_wg: K=%d C=%d (both 128), 16-byte aligned out, o, w, 8-byte aligned mask",
            K, C);
  MF_ASSERT(out && o && w, "out_proj_wg: NULL argument");
  MF_ASSERT(to_al16(res), "out_proj_wg: res must be 16-byte aligned");
  to_params p = to_common(out, o, 0, w, mask, axis, N, 0, (int64_t)N * N);
  p.res = res;
  to_launch<TO_PLAIN>(p, stream);
}
