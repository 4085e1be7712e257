/* ta_out_bwd_wg.cu — the triangle attention's output side, backward, as one persistent
 * wgmma kernel (sm_90a) at C = H·D = 128, H = 4, D = 32. For every pair row m (z order):
 *   dd   = dout ⊙ mask              (the residual's row/column dropout; dout without one)
 *   dO   = dd·W_o                   (the gradient of the gated output o, fp32 in registers)
 *   dW_o += ddᵀ·o                   (per-CTA fp32 partials, then a fixed-order sum)
 *   dOe  = dO ⊙ σ(g)                (the attention backward's dO, bf16, (M, 128) z order)
 *   dg   = dO ⊙ o ⊙ (1 − σ(g))      (the gate logits' gradient, into dP's g columns)
 *   the attention backward's side rows: lse·log2(e) and Di = Σ_d dO·o per head.
 * It replaces, per chunk of rows, ta_dropbwd_kernel (dd to HBM), two cuBLAS GEMMs (dW_o;
 * dO into dP's g columns) and EvoFlash-3D's backward prologue (prep_kernel, which read dO,
 * o and g back): at N = 768 on an H200 those took 0.62 ms per triangle attention (ncu of
 * the block, 2026-11-30), for about 0.8 GB of necessary traffic. Written by hand: no library
 * fuses a GEMM with this epilogue and a second, transposed product of the same tile. Not
 * the CPU reference (src/ops/cpu/triatt.c).
 *
 * Design. A CTA is two warpgroups on one subtile of up to 64 rows at a time (s =
 * blockIdx.x, + gridDim.x, …). Subtiles run in the attention problem's order — 64
 * consecutive queries of one row r, pair rows m = r·N + q (starting node) or q·N + r
 * (ending node, 256-byte rows N rows apart) — so that their lse values and side rows are
 * contiguous: in z order the ending node's were scattered 4-byte accesses, 0.40 against
 * 0.33 ms for the starting node at N = 768. Warpgroup j owns the output columns 64j .. 64j + 63 of dO (heads 2j,
 * 2j + 1) and the rows 64j .. of dW_o, so it keeps 32 fp32 accumulators for dO and 64 for
 * its half of dW_o, the latter for the whole run. Every operand is a row-major 128-column
 * matrix staged as two 64-column blocks of 128-byte rows in the 128-byte swizzle
 * (wgmma_ptx.cuh), which wgmma reads either way: dd K-major for dO = dd·W_o and MN-major
 * for dW_o = ddᵀ·o (k = the tile's rows); o and W_o MN-major. Three stages of (dd, o, g)
 * tiles by cp.async, refilled two subtiles ahead; rows past M are zero-filled, so they add
 * nothing to dW_o. The epilogue works on the dO fragments: σ(g) and o from the stage's
 * tiles, dOe written over the consumed dd block and dg over the g block in place, then
 * both blocks leave as coalesced 16-byte rows; Di by a fixed-order reduction over the
 * lane quad. Deterministic: the same sums in the same order every run (the number of dW_o
 * partials is the grid, min(⌈M/64⌉, SMs)). */
#include "ta_out_bwd_cuda.h"

#include <math.h>
#include <stdlib.h>

#include "fusion_util.cuh"
#include "ln_tile.cuh"
#include "ops/dropout.h"
#include "wgmma_ptx.cuh"

#define TB_C 128                  /* C = H·D: the one width this kernel takes */
#define TB_H 4                    /* heads of TB_D = 32 columns */
#define TB_SUB 64                 /* rows per subtile */
#define TB_BLK (TB_SUB * 128)     /* one 64-column block of a subtile: 64 rows × 128 B */
#define TB_TILE (2 * TB_BLK)      /* a subtile of one matrix: 16 KB */
#define TB_NS 3                   /* stages of (dd, o, g) */
#define TB_W (2 * TB_C * 128)     /* W_o: two 64-column blocks of 128 rows × 128 B */
#define TB_LSE (TB_SUB * TB_H * 4) /* a subtile's lse values, (row, head) fp32 */
#define TB_STAGE (3 * TB_TILE + TB_LSE) /* dd | o | g | lse (a multiple of 1024) */
#define TB_SMEM (1024 + TB_W + TB_NS * TB_STAGE)
#define TB_LOG2E 1.4426950408889634f /* as EvoFlash-3D's lse·log2(e) */

typedef struct {
  bf16 *dOe;         /* (M, 128) */
  bf16 *dg;          /* (M, ldg): the g columns of dP */
  int64_t ldg;
  float *side;       /* the side rows (attention_cuda.h) */
  float *part;       /* (grid, 128, 128) dW_o partials, or NULL (no dW_o) */
  const bf16 *dout;  /* (M, 128) */
  const float *mask; /* (N, 128) or NULL */
  const bf16 *o;     /* (M, 128) gated attention output */
  const bf16 *g;     /* (M, ldg) gate logits */
  const float *lse;  /* (N, H, N) */
  const bf16 *w;     /* W_o (128 C, 128 HD) */
  int axis, N, starting, qp;
  int64_t M;
} tb_params;

/* Subtile s: the queries q0 .. q0 + rows − 1 (rows <= 64) of the attention problem's row r,
 * s = r·⌈N/64⌉ + q0/64 — attention order, so that the side rows and the lse values of a
 * subtile are contiguous for either node. Their pair rows are m0 + j·dm: m = r·N + q
 * (starting node) or q·N + r (ending node). mrow: whether the dropout mask row of query j
 * is q0 + j (else r for all of them): b = m mod N for MF_DROPOUT_ROWWISE, a = m / N for
 * COLWISE. */
typedef struct {
  int64_t m0, dm;
  int r, q0, rows, mrow;
} tb_sub;

static __device__ __forceinline__ tb_sub tb_subtile(const tb_params &p, int64_t s) {
  const uint32_t nqt = ((uint32_t)p.N + TB_SUB - 1) / TB_SUB, r = (uint32_t)s / nqt; /* s < 2³² */
  tb_sub t;
  t.r = (int)r;
  t.q0 = (int)((uint32_t)s - r * nqt) * TB_SUB;
  t.rows = p.N - t.q0 < TB_SUB ? p.N - t.q0 : TB_SUB;
  t.m0 = p.starting ? (int64_t)r * p.N + t.q0 : (int64_t)t.q0 * p.N + r;
  t.dm = p.starting ? 1 : p.N;
  t.mrow = (p.axis == MF_DROPOUT_ROWWISE) == (p.starting != 0);
  return t;
}

/* Subtile s into the stage at stg ([dd | o | g], each two swizzled 64-column blocks, then
 * the lse values (row, head)), nothing for s ≥ nsub: by the CTA's 256 threads, cp.async;
 * dd and o rows past the subtile are zero-filled (they add nothing to dW_o), g and lse
 * rows past it skipped (never used). */
static __device__ __forceinline__ void tb_load(unsigned char *stg, const tb_params &p, int64_t s,
                                               int64_t nsub, int tid) {
  if (s >= nsub) return;
  const tb_sub t = tb_subtile(p, s);
  { /* lse of (query tid / 4, head tid % 4) */
    const int j = tid >> 2, h = tid & 3;
    if (j < t.rows)
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(mf_smem_u32(stg + 3 * TB_TILE + 4 * tid)),
                   "l"(p.lse + ((int64_t)t.r * TB_H + h) * p.N + t.q0 + j)
                   : "memory");
  }
#pragma unroll
  for (int i = 0; i < TB_SUB * 16 / 256; i++) {
    const int idx = tid + 256 * i, j = idx >> 4, q = idx & 15;
    const uint32_t off = (q >> 3) * TB_BLK + mf_sw128_chunk(j, q & 7);
    const bool ok = j < t.rows;
    const int64_t m = t.m0 + (ok ? j : 0) * t.dm;
    lg_cp16z(stg + off, p.dout + m * TB_C + q * 8, ok);
    lg_cp16z(stg + TB_TILE + off, p.o + m * TB_C + q * 8, ok);
    if (ok) lg_cp16(stg + 2 * TB_TILE + off, p.g + m * p.ldg + q * 8);
  }
}

/* The mask values of the subtile's dd chunks that thread tid scales (tb_mask), loaded a
 * subtile ahead into registers, all in flight at once. */
#define TB_MI (TB_SUB * 16 / 256) /* 16-byte chunks of dd per thread */
static __device__ __forceinline__ void tb_mask_load(float (&mk)[TB_MI][8], const tb_params &p, const tb_sub &t,
                                                    int tid) {
#pragma unroll
  for (int i = 0; i < TB_MI; i++) {
    const int idx = tid + 256 * i, j = idx >> 4, q = idx & 15;
    const int row = t.mrow ? t.q0 + (j < t.rows ? j : 0) : t.r;
    mf_ldvf<8>(mk[i], p.mask + (int64_t)row * TB_C + q * 8);
  }
}

/* dd = dout ⊙ mask in the stage's dd tile, in place (rows < rows), by 256 threads. */
static __device__ __forceinline__ void tb_mask(unsigned char *dd, const float (&mk)[TB_MI][8], int rows, int tid) {
#pragma unroll
  for (int i = 0; i < TB_MI; i++) {
    const int idx = tid + 256 * i, r = idx >> 4, q = idx & 15;
    if (r >= rows) continue;
    float x[8];
    bf16 *v = (bf16 *)(dd + (q >> 3) * TB_BLK + mf_sw128_chunk(r, q & 7));
    mf_ldv<8>(x, v);
#pragma unroll
    for (int k = 0; k < 8; k++) x[k] *= mk[i][k];
    mf_stv<8>(v, x);
  }
}

/* The warpgroup's two staged 64 × 64 blocks (swizzled) to global rows (row strides lda,
 * ldb), rows < rows: lg_store_block64 twice, with all eight 16-byte pieces read from
 * shared memory before the first global store (generic pointers: the compiler would
 * otherwise order each read after the previous store). */
static __device__ __forceinline__ void tb_store_blocks(bf16 *da, int64_t lda, const unsigned char *ba,
                                                       bf16 *dbp, int64_t ldb, const unsigned char *bb,
                                                       int rows, int tid) {
  uint4 va[4], vb[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int idx = tid + 128 * i, r = idx >> 3, ch = idx & 7;
    va[i] = *(const uint4 *)(ba + mf_sw128_chunk(r, ch));
    vb[i] = *(const uint4 *)(bb + mf_sw128_chunk(r, ch));
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int idx = tid + 128 * i, r = idx >> 3, ch = idx & 7;
    if (r < rows) {
      *(uint4 *)(da + r * lda + ch * 8) = va[i];
      *(uint4 *)(dbp + r * ldb + ch * 8) = vb[i];
    }
  }
}

static __global__ void __launch_bounds__(256, 1) ta_out_bwd_kernel(const tb_params p) {
  extern __shared__ unsigned char tb_raw[];
  unsigned char *sm = tb_raw + ((1024u - (mf_smem_u32(tb_raw) & 1023u)) & 1023u);
  unsigned char *ws = sm, *stages = sm + TB_W;
  const int tid = (int)threadIdx.x, wg = lg_warp_id() >> 2, t128 = tid & 127;
  const int warp = (tid >> 5) & 3, lane = tid & 31;
  const int64_t nsub = (int64_t)p.N * ((p.N + TB_SUB - 1) / TB_SUB), G = gridDim.x;
  const bool want_dw = p.part != NULL;

  /* W_o (c rows, hd columns) MN-major for dO = dd·W_o: block hd/64 of 128 lines c × 128 B */
#pragma unroll 4
  for (int idx = tid; idx < TB_C * 16; idx += 256) {
    const int c = idx >> 4, q = idx & 15;
    lg_cp16(ws + (q >> 3) * (TB_C * 128) + mf_sw128_chunk(c, q & 7), p.w + c * TB_C + q * 8);
  }
  /* cp.async groups: [W, subtile s0], [s0 + G]; then at each subtile one more, two ahead */
  tb_load(stages, p, blockIdx.x, nsub, tid);
  mf_cp_async_commit();
  tb_load(stages + TB_STAGE, p, blockIdx.x + G, nsub, tid);
  mf_cp_async_commit();

  const uint32_t w_u = mf_smem_u32(ws);
  /* operand descriptors: W_o's once, the stage's per subtile (mf_wg_desc_off) */
  const uint64_t dwo = mf_wg_desc_mn(w_u + wg * (TB_C * 128), TB_C * 128);
  float dw[64]; /* dW_o rows 64·wg + 16·warp + lane/4 (+8), columns 8i + 2(lane % 4) (+1) */
#pragma unroll
  for (int i = 0; i < 64; i++) dw[i] = 0.0f;
  float mk[TB_MI][8]; /* the mask values of this thread's dd chunks, a subtile ahead */
  if (p.mask && blockIdx.x < nsub) tb_mask_load(mk, p, tb_subtile(p, blockIdx.x), tid);
  int st = 0;
  for (int64_t s = blockIdx.x; s < nsub; s += G, st = st == TB_NS - 1 ? 0 : st + 1) {
    const tb_sub t = tb_subtile(p, s);
    const int rows = t.rows;
    unsigned char *dd = stages + st * TB_STAGE, *ot = dd + TB_TILE, *gt = dd + 2 * TB_TILE;
    const unsigned char *lt = dd + 3 * TB_TILE;
    mf_cp_async_wait<1>(); /* this subtile's group (the next one may be in flight) */
    mf_fence_proxy_async(); /* its cp.async writes before wgmma reads them */
    __syncthreads();        /* every thread's copies; the previous subtile done everywhere */
    /* the stage the previous subtile used, two subtiles ahead */
    tb_load(stages + (st == 0 ? TB_NS - 1 : st - 1) * TB_STAGE, p, s + 2 * G, nsub, tid);
    mf_cp_async_commit();
    if (p.mask) {
      tb_mask(dd, mk, rows, tid);
      if (s + G < nsub) tb_mask_load(mk, p, tb_subtile(p, s + G), tid);
      mf_fence_proxy_async();
      __syncthreads();
    }

    /* dO (64 × 64: this warpgroup's columns) = dd·W_o; dW_o (64 × 128) += dd[:, block]ᵀ·o */
    float d[32];
    const uint32_t dd_u = mf_smem_u32(dd), o_u = mf_smem_u32(ot);
    const uint64_t ddd = mf_wg_desc(dd_u);
    mf_wg_fence();
#pragma unroll
    for (int k = 0; k < TB_C / 16; k++)
      mf_wg_ss_n64<1>(d, mf_wg_desc_off(ddd, (k / 4) * TB_BLK + (k % 4) * 32), mf_wg_desc_off(dwo, k * 2048), k > 0);
    if (want_dw) {
      const uint64_t ddd_mn = mf_wg_desc_mn(dd_u + wg * TB_BLK, TB_BLK), dot = mf_wg_desc_mn(o_u, TB_BLK);
#pragma unroll
      for (int k = 0; k < TB_SUB / 16; k++)
        mf_wg_ss_n128_tt(dw, mf_wg_desc_off(ddd_mn, k * 2048), mf_wg_desc_off(dot, k * 2048), 1);
    }
    mf_wg_commit();
    mf_wg_wait<0>();
    mf_wg_pin(d);
    mf_wg_pin(dw);
    __syncthreads(); /* both warpgroups' products have read dd: its block wg takes dOe now */

    /* epilogue on the fragments: d[4i + 2hh + e] = (row 16·warp + lane/4 + 8hh, column
     * 8i + 2(lane % 4) + e) of this warpgroup's block */
    unsigned char *db = dd + wg * TB_BLK, *gb = gt + wg * TB_BLK;
    const unsigned char *ob = ot + wg * TB_BLK;
    float di[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}}; /* [hh][head − 2·wg] */
    /* all of the thread's g and o pairs first (mf_frag_load2) */
    uint32_t gl2[2][8], ov2[2][8];
    mf_frag_load2(gl2, ov2, gb, ob, warp, lane);
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const uint32_t off = mf_frag_off(warp, lane, hh, i);
        const float2 gl = mf_unpack_bf16x2(gl2[hh][i]), ov = mf_unpack_bf16x2(ov2[hh][i]);
        const float x0 = d[4 * i + 2 * hh], x1 = d[4 * i + 2 * hh + 1];
        const float s0 = mf_sigmoidf_tanh(gl.x), s1 = mf_sigmoidf_tanh(gl.y);
        *(uint32_t *)(db + off) = mf_pack_bf16x2(x0 * s0, x1 * s1);
        *(uint32_t *)(gb + off) = mf_pack_bf16x2(x0 * ov.x * (1.0f - s0), x1 * ov.y * (1.0f - s1));
        di[hh][i >> 2] += x0 * ov.x + x1 * ov.y;
      }
    }
    /* Di over the quad's 32 columns of each (row, head): the same sum on all four lanes */
#pragma unroll
    for (int hh = 0; hh < 2; hh++)
#pragma unroll
      for (int hl = 0; hl < 2; hl++) {
        di[hh][hl] += __shfl_xor_sync(0xffffffffu, di[hh][hl], 1);
        di[hh][hl] += __shfl_xor_sync(0xffffffffu, di[hh][hl], 2);
      }
    { /* lane k of the quad writes the side rows of (row half k / 2, head 2wg + k % 2) */
      const int k = lane & 3, hh = k >> 1, hl = k & 1, r = 16 * warp + (lane >> 2) + 8 * hh;
      if (r < rows) {
        const int64_t slab = (int64_t)t.r * TB_H + 2 * wg + hl;
        const float l = ((const float *)(lt))[r * TB_H + 2 * wg + hl];
        float *srow = p.side + slab * 2 * p.qp + t.q0 + r;
        srow[0] = l == -INFINITY ? INFINITY : l * TB_LOG2E;
        srow[p.qp] = k == 0 ? di[0][0] : k == 1 ? di[0][1] : k == 2 ? di[1][0] : di[1][1];
      }
    }
    mf_bar_wg(wg); /* the warpgroup's dOe and dg blocks complete */
    tb_store_blocks(p.dOe + t.m0 * TB_C + 64 * wg, t.dm * TB_C, db, p.dg + t.m0 * p.ldg + 64 * wg,
                    t.dm * p.ldg, gb, rows, t128);
  }
  mf_cp_async_wait<0>();
  if (want_dw) { /* this CTA's dW_o rows 64·wg .. */
    float *pb = p.part + (int64_t)blockIdx.x * TB_C * TB_C;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const int c = 64 * wg + 16 * warp + (lane >> 2) + 8 * hh;
#pragma unroll
      for (int i = 0; i < 16; i++)
        *(float2 *)(pb + c * TB_C + 8 * i + 2 * (lane & 3)) = make_float2(dw[4 * i + 2 * hh], dw[4 * i + 2 * hh + 1]);
    }
  }
}

/* ================================================================ host */

static int g_tb_on = -1; /* −1: not yet read from the environment */
static int64_t g_tb_calls;

extern "C" int mf_ta_out_bwd_wg_set(int on) {
  if (g_tb_on < 0) {
    const char *e = getenv("MF_TA_OUT_BWD");
    g_tb_on = e && e[0] == '0' ? 0 : 1;
  }
  const int prev = g_tb_on;
  if (on >= 0) g_tb_on = on ? 1 : 0;
  return prev;
}

extern "C" int64_t mf_ta_out_bwd_wg_calls(void) { return g_tb_calls; }

static int tb_al16(const void *q) { return ((uintptr_t)q & 15) == 0; }

extern "C" size_t mf_ta_out_bwd_wg_part_bytes(void) { return (size_t)mf_sm_count_or132() * TB_C * TB_C * sizeof(float); }

extern "C" int mf_ta_out_bwd_wg_supported(int C, int H, int D, int64_t ldg, const void *dOe,
                                          const void *dg, const void *dout, const void *o,
                                          const void *g, const void *w_o) {
  if (!mf_ta_out_bwd_wg_set(-1) || C != TB_C || H != TB_H || D * H != TB_C || ldg % 8 != 0 || ldg < TB_C)
    return 0;
  const void *ptrs[] = {dOe, dg, dout, o, g, w_o};
  for (int i = 0; i < 6; i++)
    if (ptrs[i] && !tb_al16(ptrs[i])) return 0;
  return mf_dev_sm90();
}

extern "C" void mf_ta_out_bwd_wg_cuda(bf16 *dOe, bf16 *dg, int64_t ldg, float *side, float *dw_o,
                                      float *part, const bf16 *dout, const float *mask, int axis,
                                      const bf16 *o, const bf16 *g, const float *lse, const bf16 *w_o,
                                      int N, int starting, int qp, cudaStream_t stream) {
  MF_ASSERT(mf_ta_out_bwd_wg_supported(TB_C, TB_H, TB_C / TB_H, ldg, dOe, dg, dout, o, g, w_o),
            "ta_out_bwd_wg: ldg=%lld (a multiple of 8, >= 128), 16-byte aligned arrays, sm_90",
            (long long)ldg);
  MF_ASSERT(dOe && dg && side && dout && o && g && lse && w_o && (!dw_o || part),
            "ta_out_bwd_wg: NULL argument");
  MF_ASSERT(N >= 0 && N < 65536 && qp >= N && qp % 64 == 0, "ta_out_bwd_wg: N=%d (< 65536), side rows of %d", N, qp);
  MF_ASSERT((uintptr_t)mask % 16 == 0, "ta_out_bwd_wg: the dropout mask must be 16-byte aligned");
  const int64_t M = (int64_t)N * N, nsub = (int64_t)N * ((N + TB_SUB - 1) / TB_SUB);
  if (M == 0) return;
  tb_params p;
  p.dOe = dOe;
  p.dg = dg;
  p.ldg = ldg;
  p.side = side;
  p.part = dw_o ? part : NULL;
  p.dout = dout;
  p.mask = mask;
  p.o = o;
  p.g = g;
  p.lse = lse;
  p.w = w_o;
  p.axis = axis;
  p.N = N;
  p.starting = starting;
  p.qp = qp;
  p.M = M;
  const int grid = (int)(nsub < mf_sm_count_or132() ? nsub : mf_sm_count_or132());
  MF_CHECK_CUDA(cudaFuncSetAttribute(ta_out_bwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, TB_SMEM));
  ta_out_bwd_kernel<<<grid, 256, TB_SMEM, stream>>>(p);
  MF_CHECK_LAUNCH();
  if (dw_o) {
    mf_sum_parts_cuda(dw_o, part, grid, TB_C * TB_C, stream);
  }
  g_tb_calls++;
}
