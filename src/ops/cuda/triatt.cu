/* triatt.cu — triangle attention (starting / ending node) on the GPU, forward and backward:
 * the LayerNorm + projection writing P (N², ldp) in z order (two wgmma LN + Linear calls
 * over all rows where they take the shape, else LN staging + a cuBLAS GEMM per chunk);
 * EvoFlash-3D directly on strided views of P (q, k, v, gate), o written in z order for the
 * W_o GEMM; only the bias (and its gradient) is moved, between P's bias columns and
 * (H, N, NB). The backward writes dq, dk, dv, dg straight into the gradient matrix dP.
 * (The re-layout path this replaced — per-chunk scatter/gather kernels between pair rows
 * and the attention layout — was removed; it lives in git history at commit 21eb25c.)
 * See triatt_cuda.h. Not the CPU reference (src/ops/cpu/triatt.c).
 *
 * Layouts. Pair rows m = a·N + b of z (N, N, C) are processed in z order, chunk by chunk.
 * The attention problem is the starting node on z (row i = a, query/key j = b) or on zᵀ
 * (ending node: i = b, j = a); the attention tensors q, k, v, g, o are (N, H, N, D) views
 * indexed (i, h, j, d) (ta_views), bias (H, N, NB) indexed (h, i, j), the key mask (N, N)
 * indexed (i, j) = pm (starting) or pmᵀ (ending, a transposed copy in the workspace: N²
 * bytes). Only the row permutation differs between the two nodes, so no transposed copy of
 * z, out, dout or dz is ever made. LN statistics are indexed by m. */
#include "triatt_cuda.h"

#include <math.h>
#include <stdlib.h>

#include "attention_cuda.h"
#include "fusion_util.cuh"
#include "gemm_ln_bwd_cuda.h"
#include "ln_gemm_cuda.h"
#include "ln_linear_cuda.h"
#include "ta_out_bwd_cuda.h"

/* ================================================================ kernels */

/* The projection columns: P (rows, ldp) holds [q | k | v | bias | 0 | g], HD, HD, HD, H,
 * BP − H zero columns, HD: the bias block is padded to BP = H rounded up to 8 so that every
 * segment starts at a multiple of 8 and ldp = 4HD + BP is one too (16-byte vectors
 * everywhere, and cuBLAS's aligned Hopper kernels; see ta_wpad). When HD is a multiple of
 * 64 (AF3's H = 4, D = 32), BP is H rounded up to 64 instead, so that P's rows and the g
 * block start on 128-byte lines and every head's 64-byte row (D = 32) lies in whole
 * sectors of one line: the attention reads those rows at a stride of ldp (starting node)
 * or N·ldp (ending node), and with ldp = 520 most of them straddled three sectors. ldp
 * 520 → 576 cut EvoFlash-3D's fwd+bwd on the module's views by 4–8 % at N = 768 (H200,
 * dev/cuda/README.md step 34) for 11 % more bytes in P and dP. */
static __host__ __device__ int ta_bp(int H, int D) {
  return (H * D) % 64 == 0 ? (H + 63) / 64 * 64 : (H + 7) / 8 * 8;
}
static __host__ __device__ int ta_ldp(int H, int D) { return 4 * H * D + ta_bp(H, D); }
/* The row stride of bias and dbias (H, N, ·): N rounded up to 8, so that EvoFlash-3D copies
 * bias rows 16 bytes at a time for any N (a dense (H, N, N) with N % 8 != 0 put its rows
 * off the 16-byte grid and took element-wise copies: the attention 2–2.3× slower at
 * N = 2050 than at 2048, H200). */
static __host__ __device__ int64_t ta_nb(int N) { return ((int64_t)N + 7) / 8 * 8; }
/* Rows of the padded weight copy wpad: P's ldp columns, then zero rows up to 3HD + OB, OB =
 * BP + HD rounded up to 64 (the second LayerNorm + Linear call's width, ta_project). */
static int ta_ob(int H, int D) { return (ta_bp(H, D) + H * D + 63) / 64 * 64; }
static int ta_wrows(int H, int D) { return 3 * H * D + ta_ob(H, D); }


/* Between the bias columns [3HD, 3HD + BP) of P (M, ldp), all pair rows in z order, and
 * bias (H, N, NB) at (h, i, j) (row stride NB = ta_nb(N)). TO_P = false gathers the bias
 * for the attention (and zeroes its padding columns N..NB-1, never read for a logit but
 * copied with their row's last 16 bytes): one thread per (i, j), in bias order (coalesced
 * on the (H, N, NB) side), reading the row's H columns as 16-byte vectors. TO_P = true
 * writes dbias into those columns of the gradient matrix, with zeros in the padding ones
 * (the projection backward's products read them against zero weight rows): up to 8
 * consecutive threads per P row, each storing 16-byte pieces of the block, the rows in the
 * order (j, i) of the ending node's bias for both nodes, so that consecutive rows lie N
 * rows apart in P (dbias, 2 bytes per head, is read from L2). H200, ncu, N = 768: with one
 * thread per (i, j) storing its BP/8 pieces in turn, 190 µs per call once BP grew 8 → 64
 * (ldp 576); one 32-byte sector a row 23 µs when consecutive rows were N apart in P (the
 * ending node) and 59 µs when they were adjacent (the starting node: 1152 bytes apart,
 * which camps on few memory partitions); a 16-byte half sector a row 33 / 81 µs. The
 * callers store whole sectors. */
/* Threads per P row of ta_bias_kernel<true> for cols columns: one per 16-byte piece, at
 * most 8 (a power of two dividing the block size). */
static __host__ __device__ int ta_bias_g(int cols) { return cols >= 64 ? 8 : cols >= 32 ? 4 : cols >= 16 ? 2 : 1; }
template <bool TO_P>
static __global__ void ta_bias_kernel(bf16 *__restrict__ P, int ldp, bf16 *__restrict__ bias,
                                      int N, int H, int D, int starting, int cols) {
  const int64_t M = (int64_t)N * N, NB = ta_nb(N), MB = (int64_t)N * NB;
  const int HD = H * D;
  /* TO_P: the block's first cols columns (a multiple of 8), by groups of G = ta_bias_g
   * threads per P row, thread k of a group storing pieces k, k + G, … */
  const int G = TO_P ? ta_bias_g(cols) : 1, k = (int)(threadIdx.x % G);
  for (int64_t q = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / G; q < M;
       q += (int64_t)gridDim.x * blockDim.x / G) {
    if constexpr (TO_P) { /* P's rows N apart for consecutive q, for either node */
      const int64_t a = q / N, b = q - a * N, i = starting ? b : a, j = starting ? a : b;
      const int64_t e = i * NB + j;
      bf16 *prow = P + (b * N + a) * ldp + 3 * HD;
      for (int c = 8 * k; c < cols; c += 8 * G) {
        __align__(16) bf16 v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) v[u] = c + u < H ? bias[(c + u) * MB + e] : mf_f32_to_bf16(0.0f);
        *(uint4 *)(prow + c) = *(const uint4 *)v;
      }
    } else {
      const int64_t i = q / N, j = q - i * N, m = starting ? q : j * N + i, e = i * NB + j;
      const bf16 *prow = P + m * ldp + 3 * HD;
      for (int c = 0; c < (H + 7) / 8 * 8; c += 8) { /* gather: the H columns */
        __align__(16) bf16 v[8];
        *(uint4 *)v = *(const uint4 *)(prow + c);
#pragma unroll
        for (int u = 0; u < 8; u++)
          if (c + u < H) bias[(c + u) * MB + e] = v[u];
      }
      if (j == N - 1) /* the row's padding columns */
        for (int h = 0; h < H; h++)
          for (int64_t jj = N; jj < NB; jj++) bias[h * MB + i * NB + jj] = mf_f32_to_bf16(0.0f);
    }
  }
}

/* out (M, C) rows m0.. = res + mask ⊙ u (u (rows, C) fp32; the residual with row/column
 * dropout, res = out in place: mask (N, C) indexed by b (ROWWISE) or a (COLWISE) of
 * m = a·N + b). */
template <int VEC>
static __global__ void ta_resdrop_kernel(bf16 *out, const float *__restrict__ u,
                                         const float *__restrict__ mask, const bf16 *res, int axis,
                                         int N, int64_t m0, int64_t rows, int C) {
  const int cv = C / VEC;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < rows * cv;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = t / cv, m = m0 + r, a = m / N, b = m - a * N;
    const int c = (int)(t - r * cv) * VEC;
    float v[VEC], mk[VEC], o[VEC];
    mf_ldvf<VEC>(v, u + r * C + c);
    mf_ldvf<VEC>(mk, mask + (axis == MF_DROPOUT_ROWWISE ? b : a) * C + c);
    mf_ldv<VEC>(o, res + m * C + c);
#pragma unroll
    for (int k = 0; k < VEC; k++) o[k] += mk[k] * v[k];
    mf_stv<VEC>(out + m * C + c, o);
  }
}

/* dd (rows, C) = dout (M, C) rows m0.. ⊙ mask (as ta_resdrop_kernel). */
template <int VEC>
static __global__ void ta_dropbwd_kernel(bf16 *__restrict__ dd, const bf16 *__restrict__ dout,
                                         const float *__restrict__ mask, int axis, int N,
                                         int64_t m0, int64_t rows, int C) {
  const int cv = C / VEC;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < rows * cv;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = t / cv, m = m0 + r, a = m / N, b = m - a * N;
    const int c = (int)(t - r * cv) * VEC;
    float d[VEC], mk[VEC];
    mf_ldv<VEC>(d, dout + m * C + c);
    mf_ldvf<VEC>(mk, mask + (axis == MF_DROPOUT_ROWWISE ? b : a) * C + c);
#pragma unroll
    for (int k = 0; k < VEC; k++) d[k] *= mk[k];
    mf_stv<VEC>(dd + r * C + c, d);
  }
}

/* pmt (N, N) = pmᵀ. */
static __global__ void ta_mask_t_kernel(uint8_t *__restrict__ pmt, const uint8_t *__restrict__ pm,
                                        int N) {
  const int64_t M = (int64_t)N * N;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < M;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t a = t / N, b = t - a * N;
    pmt[t] = pm[b * N + a];
  }
}

/* ================================================================ launchers */

static void launch_resdrop(bf16 *out, const float *u, const float *mask, const bf16 *res, int axis,
                           int N, int64_t m0, int64_t rows, int C, cudaStream_t s) {
  if (!res) res = out;
  if (C % 8 == 0)
    ta_resdrop_kernel<8><<<mf_ew_blocks(rows * C / 8), 256, 0, s>>>(out, u, mask, res, axis, N, m0,
                                                                    rows, C);
  else
    ta_resdrop_kernel<1><<<mf_ew_blocks(rows * C), 256, 0, s>>>(out, u, mask, res, axis, N, m0, rows,
                                                                C);
  MF_CHECK_LAUNCH();
}

static void launch_dropbwd(bf16 *dd, const bf16 *dout, const float *mask, int axis, int N,
                           int64_t m0, int64_t rows, int C, cudaStream_t s) {
  if (C % 8 == 0)
    ta_dropbwd_kernel<8><<<mf_ew_blocks(rows * C / 8), 256, 0, s>>>(dd, dout, mask, axis, N, m0,
                                                                    rows, C);
  else
    ta_dropbwd_kernel<1><<<mf_ew_blocks(rows * C), 256, 0, s>>>(dd, dout, mask, axis, N, m0,
                                                                rows, C);
  MF_CHECK_LAUNCH();
}

/* ================================================================ buffers */

typedef struct {
  float *mu, *rs; /* (M) LN statistics, indexed by pair row m of z */
  float *lse;     /* (N, H, N) softmax log-sum-exp, (i, h, j) */
  bf16 *o;        /* gated attention output: (M, HD) in z order */
  bf16 *P;        /* keep only: (M, ldp) the projections, which the backward then reads
                   * instead of recomputing them (NULL otherwise) */
} ta_saved;

static size_t saved_carve(ta_saved *s, void *base, int N, int H, int D, int keep) {
  const int64_t M = (int64_t)N * N;
  mf_carver cv = {(char *)base, 0};
  s->mu = (float *)mf_carve(&cv, (size_t)M * sizeof(float));
  s->rs = (float *)mf_carve(&cv, (size_t)M * sizeof(float));
  s->lse = (float *)mf_carve(&cv, (size_t)M * H * sizeof(float));
  s->o = (bf16 *)mf_carve(&cv, (size_t)M * H * D * sizeof(bf16));
  s->P = keep ? (bf16 *)mf_carve(&cv, (size_t)M * ta_ldp(H, D) * sizeof(bf16)) : NULL;
  return cv.used;
}

/* Chunk staging of R pair rows. */
typedef struct {
  bf16 *xh;    /* (R, C) LN rows */
  bf16 *dd;    /* (R, C) dout ⊙ dropout mask (backward with a residual) */
  float *u;    /* (R, C) Δz before the residual (forward), dx̂ (backward) */
  float *part; /* (parts, 2C) LN parameter-gradient partials */
} ta_stage;

static mf_attn_dims ta_dims(int N, int H, int D) {
  mf_attn_dims d = {1, N, H, N, N, D, 1.0 / sqrt((double)D)};
  return d;
}

extern "C" size_t mf_triatt_cuda_saved_bytes(int N, int C, int H, int D, int keep) {
  (void)C;
  ta_saved s;
  return saved_carve(&s, NULL, N, H, D, keep);
}

static size_t ws_size(int N, int C, int H, int D, int keep);

extern "C" size_t mf_triatt_cuda_workspace(int N, int C, int H, int D, int keep) {
  return ws_size(N, C, H, D, keep);
}

static void ta_check(const mf_triatt_cuda_weights *w, int N, int C, int H, int D, int starting,
                     int keep, const mf_resdrop_cuda *rd) {
  MF_ASSERT(N > 0 && C > 0 && C <= 1024 && H > 0 && D > 0 && D % 8 == 0 && D <= 64,
            "triatt_cuda dims N=%d C=%d H=%d D=%d (C <= 1024, D %% 8 == 0, D <= 64)", N, C, H, D);
  MF_ASSERT(starting == 0 || starting == 1, "triatt_cuda: starting=%d", starting);
  MF_ASSERT(keep == 0 || keep == 1, "triatt_cuda: keep=%d (0 or 1)", keep);
  MF_ASSERT(w && w->ln_g && w->ln_b && w->w_qkvbg && w->w_o, "triatt_cuda: every weight is required");
  MF_ASSERT(!rd || (rd->p >= 0 && rd->p < 1 && (rd->axis == MF_DROPOUT_ROWWISE ||
                                                rd->axis == MF_DROPOUT_COLWISE)),
            "triatt_cuda: bad residual dropout spec");
}

/* The key mask of the attention problem: pm (starting node) or pmᵀ (ending node). */
static const uint8_t *ta_key_mask(uint8_t *pmt, const uint8_t *pm, int N, int starting,
                                  cudaStream_t stream) {
  if (!pm || starting) return pm;
  ta_mask_t_kernel<<<mf_ew_blocks((int64_t)N * N), 256, 0, stream>>>(pmt, pm, N);
  MF_CHECK_LAUNCH();
  return pmt;
}

/* The projection weight in P's column order: rows [W_q; W_k; W_v; W_b; 0; W_g] with the
 * bias block padded to BP rows (ta_ldp). With the unpadded K5 = 4HD + H (516 at H = 4,
 * D = 32) as a GEMM's output width or inner dimension, cuBLAS fell back to 2-element-aligned
 * Ampere kernels (an H200 profile, 2026-11-30: 4.7 ms of a 48 ms block at N = 768). When H
 * is a multiple of 8 the layouts coincide and w_qkvbg is used as it is. */
static const bf16 *ta_wpad(bf16 *wpad, const mf_triatt_cuda_weights *w, int C, int H, int D,
                           cudaStream_t stream) {
  const int HD = H * D, BP = ta_bp(H, D);
  const size_t row = (size_t)C * sizeof(bf16);
  /* the zero rows past ldp (ta_wrows): read by ta_project's second wgmma call */
  MF_CHECK_CUDA(cudaMemsetAsync(wpad + (size_t)ta_ldp(H, D) * C, 0,
                                (size_t)(ta_wrows(H, D) - ta_ldp(H, D)) * row, stream));
  if (BP == H) {
    MF_CHECK_CUDA(cudaMemcpyAsync(wpad, w->w_qkvbg, (size_t)ta_ldp(H, D) * row,
                                  cudaMemcpyDeviceToDevice, stream));
    return wpad;
  }
  MF_CHECK_CUDA(cudaMemcpyAsync(wpad, w->w_qkvbg, (size_t)(3 * HD + H) * row,
                                cudaMemcpyDeviceToDevice, stream));
  MF_CHECK_CUDA(cudaMemsetAsync(wpad + (size_t)(3 * HD + H) * C, 0, (size_t)(BP - H) * row,
                                stream));
  MF_CHECK_CUDA(cudaMemcpyAsync(wpad + (size_t)(3 * HD + BP) * C,
                                w->w_qkvbg + (size_t)(3 * HD + H) * C, (size_t)HD * row,
                                cudaMemcpyDeviceToDevice, stream));
  return wpad;
}

/* dw (4HD + H, C) += dwpad (ldp, C) without its padding rows (fixed order: deterministic). */
static __global__ void ta_dw_unpad_kernel(float *__restrict__ dw, const float *__restrict__ dwp,
                                          int C, int H, int D) {
  const int HD = H * D, BP = ta_bp(H, D);
  const int64_t n = (int64_t)(4 * HD + H) * C;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = t / C;
    const int64_t rp = r < 3 * HD + H ? r : r + (BP - H);
    dw[t] += dwp[rp * C + (t - r * C)];
  }
}

/* ================================================================ the passes
 *
 * No re-layout of q, k, v, g, o: P (M, ldp) holds the projections of ALL pair rows in z
 * order (each chunk's GEMM writes its rows in place) and EvoFlash-3D reads q, k, v and
 * the gate as strided views of its column blocks (ta_views); the gated output goes
 * straight to the saved o (M, HD) in z order, which the W_o GEMMs read. Only the bias
 * moves to (H, N, NB) (ta_bias_kernel; NB = N rounded up to 8), and dbias back into its
 * columns. In the backward
 * the gradient matrix dP (M, ldp) takes dq, dk, dv, dg as strided views. Where
 * ta_out_bwd_wg.cu takes the shape (C = HD = 128, D = 32, sm_90), one kernel over all rows
 * forms dW_o, dg (into dP's g columns), dO ⊙ σ(g) (z order, in the attention workspace) and
 * the attention backward's side rows from dout, o and g, and the attention runs its
 * prepared backward (mf_attention_backward_prepared_strided_cuda) on those: at N = 768 on
 * an H200 0.27 ms per call against 0.62 ms for the chunked path (ncu, 2026-11-30). Else,
 * per chunk, dd = dout ⊙ mask, two cuBLAS GEMMs (dW_o; dO = dd·W_o into dP's g columns)
 * and the attention backward's own prologue, which reads dO there and overwrites it with
 * dg in place (attention_cuda.h allows dgate = dout). */

typedef struct {
  uint8_t *pmt;      /* (N, N) pmᵀ (ending node with a pair mask) */
  float *mask;       /* (N, C) dropout mask */
  bf16 *wpad;        /* (ta_wrows, C) w_qkvbg in P's column order, then zero rows */
  float *dwpad;      /* (ldp, C) its gradient (backward) */
  bf16 *P;           /* (M, ldp) [q | k | v | bias | 0 | g], pair rows in z order */
  bf16 *bias;        /* (H, N, NB): row stride NB = ta_nb(N) */
  bf16 *dP;          /* (M, ldp) gradients; its g columns hold dO until the attention backward */
  bf16 *dbias;       /* (H, N, NB) */
  void *att_ws;      /* the strided attention backward's workspace */
  size_t att_ws_bytes;
  /* the same bytes as the prepared backward's (ta_out_bwd_wg.cu path): */
  float *side;       /* the attention backward's side rows (attention_cuda.h) */
  bf16 *dOe;         /* (M, HD) dO ⊙ σ(g) in z order */
  void *pws;         /* the prepared backward's workspace */
  size_t pws_bytes;
  float *dwo_part;   /* the output side's dW_o partials (in pws when it is large enough) */
  int64_t R;         /* rows per chunk */
  ta_stage sx;       /* staging of the forward and the backward's phase 1 (in dbias, att_ws) */
  ta_stage sy;       /* staging of the backward's phase 3 (in P, bias: dead by then) */
} ta_ws;

/* Chunks of at least this many rows are large enough for the GEMMs to alias the staging
 * into the whole-tensor buffers rather than take a region of its own. */
#define TA_MIN_ALIAS_ROWS 16384

/* Chunk staging: LN rows, dout ⊙ mask, fp32 rows, LN partials (no
 * projection or output rows: the GEMMs use P, dP and o in place). */
static size_t stage_carve(ta_stage *st, void *base, int64_t R, int C) {
  mf_carver cv = {(char *)base, 0};
  st->xh = (bf16 *)mf_carve(&cv, (size_t)R * C * sizeof(bf16));
  st->dd = (bf16 *)mf_carve(&cv, (size_t)R * C * sizeof(bf16));
  st->u = (float *)mf_carve(&cv, (size_t)R * C * sizeof(float));
  st->part = (float *)mf_carve(&cv, (size_t)mf_ln_rows_backward_parts(R) * 2 * C * sizeof(float));
  return cv.used;
}

/* [pmt, mask, wpad, dwpad | Y: P, bias | X: dP, dbias, att_ws | staging, only when it
 * cannot alias]: sx inside [dbias, att_ws] (not live in the forward or the backward's
 * phase 1, while dP's g columns are), sy inside Y. With keep, P lives in the saved buffer
 * (w->P stays NULL: the caller points it there), Y is the bias alone and sy = sx (phase 3
 * runs after the attention backward and the dbias move: [dbias, att_ws] are dead). */
static size_t ws_carve(ta_ws *w, void *base, int N, int C, int H, int D, int keep) {
  const int64_t M = (int64_t)N * N;
  const int64_t R_auto = mf_fusion_chunk_rows(M, (size_t)C * (2 + 2 + 4));
  const size_t pb = (size_t)M * ta_ldp(H, D) * sizeof(bf16);
  const size_t bia = (size_t)N * ta_nb(N) * H * sizeof(bf16); /* (H, N, NB) */
  mf_carver cv = {(char *)base, 0};
  w->pmt = (uint8_t *)mf_carve(&cv, (size_t)M);
  w->mask = (float *)mf_carve(&cv, (size_t)N * C * sizeof(float));
  w->wpad = (bf16 *)mf_carve(&cv, (size_t)ta_wrows(H, D) * C * sizeof(bf16));
  w->dwpad = (float *)mf_carve(&cv, (size_t)ta_ldp(H, D) * C * sizeof(float));
  const size_t y0 = cv.used;
  w->P = keep ? NULL : (bf16 *)mf_carve(&cv, pb);
  w->bias = (bf16 *)mf_carve(&cv, bia);
  const size_t x0 = cv.used;
  w->dP = (bf16 *)mf_carve(&cv, pb);
  const size_t xs = cv.used;
  w->dbias = (bf16 *)mf_carve(&cv, bia);
  const mf_attn_dims ad = ta_dims(N, H, D);
  w->att_ws_bytes = mf_attention_backward_strided_cuda_workspace(ad, 1);
  w->att_ws = mf_carve(&cv, w->att_ws_bytes);
  const size_t x1 = cv.used;
  /* the prepared backward's view of att_ws: side rows | dOe | its workspace (the strided
   * backward keeps the same two arrays at the same places) */
  const size_t sb = mf_attention_side_rows_bytes(ad), ob = ((size_t)M * H * D * sizeof(bf16) + 255) / 256 * 256;
  w->side = base ? (float *)w->att_ws : NULL;
  w->dOe = base ? (bf16 *)((char *)w->att_ws + sb) : NULL;
  w->pws = base ? (char *)w->att_ws + sb + ob : NULL;
  w->pws_bytes = w->att_ws_bytes - sb - ob;
  /* the staging's room: the smaller of Y and [dbias, att_ws] — with keep too, where it all
   * goes into [dbias, att_ws], so that both layouts cut the same chunks (the chunked sums of
   * dW and of the LayerNorm's parameter gradients, and so the results, are bit-identical) */
  const size_t ysz = keep ? mf_cuda_align(pb) + mf_cuda_align(bia) : x0 - y0;
  const size_t cap = ysz < x1 - xs ? ysz : x1 - xs;

  ta_stage st;
  int64_t lo = 0, hi = R_auto;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (stage_carve(&st, NULL, mid, C) <= cap) lo = mid;
    else hi = mid - 1;
  }
  /* alias when chunks of at least half the automatic size fit (chunks of lo rows), or else
   * of at least TA_MIN_ALIAS_ROWS rows (then balanced chunks: e.g. N = 384, where one
   * chunk of all 147456 rows would need 144 MiB of staging beside [dbias, att_ws]'s
   * 61 MiB; three chunks alias) */
  if (lo >= 1 && (2 * lo >= R_auto || lo >= TA_MIN_ALIAS_ROWS)) { /* alias */
    const int64_t chunks = (M + lo - 1) / lo;
    const int64_t R = 2 * lo >= R_auto ? lo : (M + chunks - 1) / chunks; /* R <= lo */
    w->R = R;
    stage_carve(&w->sx, base ? (char *)base + xs : NULL, R, C);
    stage_carve(&w->sy, base ? (char *)base + (keep ? xs : y0) : NULL, R, C);
  } else { /* a region of its own */
    w->R = R_auto;
    void *sep = mf_carve(&cv, stage_carve(&st, NULL, R_auto, C));
    stage_carve(&w->sx, sep, R_auto, C);
    w->sy = w->sx;
  }
  /* the dW_o partials of ta_out_bwd_wg.cu: in the prepared backward's workspace (dead until
   * that backward runs) when they fit, else a region of their own */
  w->dwo_part = NULL;
  if (C == 128 && H == 4 && D == 32) {
    const size_t pb = mf_ta_out_bwd_wg_part_bytes();
    w->dwo_part = w->pws_bytes >= pb ? (float *)w->pws : (float *)mf_carve(&cv, pb);
  }
  return cv.used;
}

static size_t ws_size(int N, int C, int H, int D, int keep) {
  ta_ws w;
  return ws_carve(&w, NULL, N, C, H, D, keep);
}

/* The attention problem's views of P / dP (q, k, v, gate, dq, dk, dv, dgate, dout) and of
 * o (out): element (i, h, j, d) in pair row m = i·N + j (starting) or j·N + i (ending). */
static mf_attn_views ta_views(int N, int H, int D, int starting) {
  const int64_t ldp = ta_ldp(H, D), HD = (int64_t)H * D;
  const mf_attn_stride sp = starting ? mf_attn_stride{0, N * ldp, D, ldp}
                                     : mf_attn_stride{0, ldp, D, N * ldp};
  const mf_attn_stride so = starting ? mf_attn_stride{0, N * HD, D, HD}
                                     : mf_attn_stride{0, HD, D, N * HD};
  return mf_attn_views{sp, sp, sp, sp, so, sp, sp, sp, sp, sp, ta_nb(N)};
}

/* to_p: dbias into dP's bias block, its first cols columns (the rest are not written). */
static void launch_bias(bf16 *P, bf16 *bias, int N, int H, int D, int starting, bool to_p,
                        int cols, cudaStream_t s) {
  const unsigned nb = mf_ew_blocks((int64_t)N * N * (to_p ? ta_bias_g(cols) : 1));
  if (to_p) ta_bias_kernel<true><<<nb, 256, 0, s>>>(P, ta_ldp(H, D), bias, N, H, D, starting, cols);
  else ta_bias_kernel<false><<<nb, 256, 0, s>>>(P, ta_ldp(H, D), bias, N, H, D, starting, 0);
  MF_CHECK_LAUNCH();
}

/* The projection by LayerNorm + Linear wgmma kernels (ln_gemm_wg.cu) where they take the
 * shape: two calls over all rows, [q | k | v] (3HD columns) and [bias | 0 | g] (OB columns
 * computed against wpad's zero rows, BP + HD stored), each recomputing the LayerNorm from z
 * (the second identically; it writes no statistics), so that x̂ never goes through HBM: at
 * N = 768 on an H200 0.27 + 0.15 ms per call against 0.51 ms for LN staging + cuBLAS
 * (dev/cuda/README.md step 28). MF_TA_PROJ_WG=0 (read once) keeps the chunked path. */
static int ta_proj_wg(const bf16 *P, const bf16 *z, const bf16 *wq, int C, int H, int D) {
  static int on = -1;
  if (on < 0) {
    const char *e = getenv("MF_TA_PROJ_WG");
    on = !(e && e[0] == '0');
  }
  const int HD = H * D;
  return on && (3 * HD) % 64 == 0 && HD % 8 == 0 &&
         mf_ln_gemm_wg_supported(C, 3 * HD, 0, MF_LN_FULL, z, P, wq) &&
         mf_ln_gemm_wg_supported(C, ta_ob(H, D), 0, MF_LN_FULL, z, P + 3 * HD, wq + (size_t)3 * HD * C);
}

/* x̂ = LN(z) for chunk rows r0.. (statistics computed or read) and their projections
 * P rows r0.. = x̂·wqᵀ (all ldp columns; the padding ones come out 0). */
static void ta_project(bf16 *P, const ta_stage *st, const ta_saved *s, const bf16 *z,
                       const mf_triatt_cuda_weights *w, const bf16 *wq, int C, int H, int D,
                       int64_t r0, int64_t rows, int use_saved, const mf_cuda_blas *blas,
                       cudaStream_t stream) {
  const int ldp = ta_ldp(H, D);
  if (ta_proj_wg(P, z, wq, C, H, D)) {
    const int HD = H * D;
    mf_ln_gemm_wg_ld_cuda(P + r0 * ldp, ldp, 3 * HD, use_saved ? NULL : s->mu + r0,
                          use_saved ? NULL : s->rs + r0, z + r0 * C, w->ln_g, w->ln_b, wq, NULL,
                          rows, C, 3 * HD, MF_LN_FULL, stream);
    mf_ln_gemm_wg_ld_cuda(P + r0 * ldp + 3 * HD, ldp, ldp - 3 * HD, NULL, NULL, z + r0 * C,
                          w->ln_g, w->ln_b, wq + (size_t)3 * HD * C, NULL, rows, C, ta_ob(H, D),
                          MF_LN_FULL, stream);
    return;
  }
  mf_ln_rows_cuda(st->xh, s->mu + r0, s->rs + r0, z + r0 * C, w->ln_g, w->ln_b, rows, C,
                  MF_LN_FULL, use_saved, stream);
  mf_gemm_rm_cuda(blas, stream, 0, 1, rows, ldp, C, 1.0f, st->xh, C, wq, C, 0.0f,
                  P + r0 * ldp, MF_GEMM_OUT_BF16, ldp);
}

static void ta_forward(bf16 *out, void *saved, const bf16 *z, const uint8_t *pm,
                       const mf_triatt_cuda_weights *w, int N, int C, int H, int D,
                       int starting, int keep, const mf_resdrop_cuda *rd, void *ws,
                       size_t ws_bytes, const mf_cuda_blas *blas, cudaStream_t stream) {
  const int64_t M = (int64_t)N * N;
  const int HD = H * D, goff = 3 * HD + ta_bp(H, D);
  MF_ASSERT(!rd || !rd->res || rd->res == out || rd->res + M * C <= out || out + M * C <= rd->res,
            "triatt_cuda forward: the residual res must be out or not overlap it");
  ta_saved s;
  saved_carve(&s, saved, N, H, D, keep);
  ta_ws b;
  MF_ASSERT(ws_carve(&b, NULL, N, C, H, D, keep) <= ws_bytes, "triatt_cuda: workspace too small");
  ws_carve(&b, ws, N, C, H, D, keep);
  if (keep) b.P = s.P; /* the projections go straight to the saved buffer */
  const int64_t R = b.R;
  const ta_stage *st = &b.sx;
  if (rd) mf_dropout_mask_cuda(b.mask, N, C, rd->p, rd->seed, rd->stream, stream);
  const bf16 *wq = ta_wpad(b.wpad, w, C, H, D, stream);
  const uint8_t *kmask = ta_key_mask(b.pmt, pm, N, starting, stream);

  /* x̂ = LN(z); P = x̂·w_qkvbgᵀ in z order; the bias columns → (H, N, NB) */
  const int64_t RP = ta_proj_wg(b.P, z, wq, C, H, D) ? M : R; /* the wgmma path: one call */
  for (int64_t r0 = 0; r0 < M; r0 += RP)
    ta_project(b.P, st, &s, z, w, wq, C, H, D, r0, M - r0 < RP ? M - r0 : RP, 0, blas, stream);
  launch_bias(b.P, b.bias, N, H, D, starting, false, 0, stream);
  /* o = σ(g) ⊙ attention(q, k, v, bias, key mask), on views of P, into o in z order */
  const mf_attn_views vw = ta_views(N, H, D, starting);
  mf_attention_forward_strided_cuda(s.o, s.lse, b.P, b.P + HD, b.P + 2 * HD, b.bias, kmask,
                                    b.P + goff, ta_dims(N, H, D), &vw, stream);
  /* Δz = o·W_oᵀ; out = Δz or out += mask ⊙ Δz: one wgmma kernel over all rows
   * (out_proj_wg.cu) where it takes the shape (HD = C = 128), else per chunk */
  const float *dmask = rd ? b.mask : NULL;
  if (mf_out_proj_wg_supported(HD, C, out, s.o, w->w_o, dmask) && (uintptr_t)(rd ? rd->res : NULL) % 16 == 0) {
    mf_out_proj_wg_cuda(out, s.o, w->w_o, dmask, rd ? rd->res : NULL, rd ? (int)rd->axis : 0, N, HD, C,
                        stream);
    return;
  }
  for (int64_t r0 = 0; r0 < M; r0 += R) {
    const int64_t rows = M - r0 < R ? M - r0 : R;
    if (rd) {
      mf_gemm_rm_cuda(blas, stream, 0, 1, rows, C, HD, 1.0f, s.o + r0 * HD, HD, w->w_o, HD, 0.0f,
                      st->u, MF_GEMM_OUT_F32, C);
      launch_resdrop(out, st->u, b.mask, rd->res, (int)rd->axis, N, r0, rows, C, stream);
    } else {
      mf_gemm_rm_cuda(blas, stream, 0, 1, rows, C, HD, 1.0f, s.o + r0 * HD, HD, w->w_o, HD, 0.0f,
                      out + r0 * C, MF_GEMM_OUT_BF16, C);
    }
  }
}

#define G(field) (g ? g->field : NULL)

/* The backward's phase 1 without ta_out_bwd_wg.cu, per chunk: P recomputed (unless kept);
 * out = o·W_oᵀ with dΔz = dout (⊙ mask) ⇒ dW_o += dΔzᵀ·o, dO = dΔz·W_o into dP's g columns. */
static void ta_backward_out_chunks(const ta_ws *b, const ta_saved *s, const mf_triatt_cuda_grads *g,
                                   const bf16 *dout, const bf16 *z, const mf_triatt_cuda_weights *w,
                                   const bf16 *wq, int N, int C, int H, int D, int keep,
                                   const mf_resdrop_cuda *rd, const mf_cuda_blas *blas,
                                   cudaStream_t stream) {
  const int64_t M = (int64_t)N * N, R = b->R;
  const int HD = H * D, ldp = ta_ldp(H, D), goff = 3 * HD + ta_bp(H, D);
  const ta_stage *st = &b->sx;
  for (int64_t r0 = 0; r0 < M; r0 += R) {
    const int64_t rows = M - r0 < R ? M - r0 : R;
    if (!keep) ta_project(b->P, st, s, z, w, wq, C, H, D, r0, rows, 1, blas, stream);
    const bf16 *dd = dout + r0 * C;
    if (rd) {
      launch_dropbwd(st->dd, dout, b->mask, (int)rd->axis, N, r0, rows, C, stream);
      dd = st->dd;
    }
    if (G(w_o))
      mf_gemm_rm_cuda(blas, stream, 1, 0, C, HD, rows, 1.0f, dd, C, s->o + r0 * HD, HD, 1.0f,
                      G(w_o), MF_GEMM_OUT_F32, HD);
    mf_gemm_rm_cuda(blas, stream, 0, 0, rows, HD, C, 1.0f, dd, C, w->w_o, HD, 0.0f,
                    b->dP + r0 * ldp + goff, MF_GEMM_OUT_BF16, ldp);
  }
}

static void ta_backward(bf16 *dz, const mf_triatt_cuda_grads *g, const bf16 *dout,
                        const void *saved, const bf16 *z, const uint8_t *pm,
                        const mf_triatt_cuda_weights *w, int N, int C, int H, int D,
                        int starting, int keep, const mf_resdrop_cuda *rd, void *ws,
                        size_t ws_bytes, const mf_cuda_blas *blas, cudaStream_t stream) {
  const int64_t M = (int64_t)N * N;
  const int HD = H * D, ldp = ta_ldp(H, D), goff = 3 * HD + ta_bp(H, D);
  ta_saved s;
  saved_carve(&s, (void *)saved, N, H, D, keep); /* read only below */
  ta_ws b;
  MF_ASSERT(ws_carve(&b, NULL, N, C, H, D, keep) <= ws_bytes, "triatt_cuda: workspace too small");
  ws_carve(&b, ws, N, C, H, D, keep);
  if (keep) b.P = s.P; /* the forward's projections: read only */
  const int64_t R = b.R;
  const ta_stage *st = &b.sx; /* inside dbias, att_ws (not yet written) */
  if (rd) mf_dropout_mask_cuda(b.mask, N, C, rd->p, rd->seed, rd->stream, stream);
  const bf16 *wq = ta_wpad(b.wpad, w, C, H, D, stream);
  if (G(w_qkvbg))
    MF_CHECK_CUDA(cudaMemsetAsync(b.dwpad, 0, (size_t)ldp * C * sizeof(float), stream));
  const uint8_t *kmask = ta_key_mask(b.pmt, pm, N, starting, stream);

  const mf_attn_dims ad = ta_dims(N, H, D);
  if (mf_ta_out_bwd_wg_supported(C, H, D, ldp, b.dOe, b.dP + goff, dout, s.o, b.P + goff, w->w_o) &&
      b.dwo_part && (uintptr_t)b.mask % 16 == 0) {
    /* phase 1: P recomputed (unless kept); then the output side in one kernel
     * (ta_out_bwd_wg.cu): dW_o, dg into dP's g columns, dOe = dO ⊙ σ(g) and the side rows */
    if (!keep) {
      const int64_t RP = ta_proj_wg(b.P, z, wq, C, H, D) ? M : R; /* the wgmma path: one call */
      for (int64_t r0 = 0; r0 < M; r0 += RP)
        ta_project(b.P, st, &s, z, w, wq, C, H, D, r0, M - r0 < RP ? M - r0 : RP, 1, blas, stream);
    }
    mf_ta_out_bwd_wg_cuda(b.dOe, b.dP + goff, ldp, b.side, G(w_o), b.dwo_part, dout,
                          rd ? b.mask : NULL, rd ? (int)rd->axis : 0, s.o, b.P + goff, s.lse,
                          w->w_o, N, starting, mf_attention_side_rows_qp(ad), stream);
    mf_attention_side_rows_pad_cuda(b.side, ad, stream);
    launch_bias(b.P, b.bias, N, H, D, starting, false, 0, stream); /* reads P only */
    /* phase 2: the attention backward from those (dOe in z order: o's view) */
    mf_attn_views vw = ta_views(N, H, D, starting);
    vw.dout = vw.out;
    mf_attention_backward_prepared_strided_cuda(b.dP, b.dP + HD, b.dP + 2 * HD, b.dbias, b.dOe,
                                                b.side, b.P, b.P + HD, b.P + 2 * HD, b.bias, kmask,
                                                ad, &vw, b.pws, b.pws_bytes, stream);
  } else {
    ta_backward_out_chunks(&b, &s, g, dout, z, w, wq, N, C, H, D, keep, rd, blas, stream);
    launch_bias(b.P, b.bias, N, H, D, starting, false, 0, stream); /* reads P only */
    /* phase 2: the attention backward on views of P and dP (all its gradients assign; dg
     * replaces dO in place) */
    const mf_attn_views vw = ta_views(N, H, D, starting);
    mf_attention_backward_strided_cuda(b.dP, b.dP + HD, b.dP + 2 * HD, b.dbias, b.dP + goff,
                                       b.dP + goff, s.o, s.lse, b.P, b.P + HD, b.P + 2 * HD, b.bias,
                                       kmask, b.P + goff, ad, &vw, b.att_ws, b.att_ws_bytes, stream);
  }
  /* phase 3's dx̂ = dP·w_qkvbg by gemm_ln_bwd_wg where it takes the call: where the bias
   * block is padded past H rounded up to 8 (BP = 64 at AF3's shape), as two terms that skip
   * the rest of the padding, [g]·W_g + [q | k | v | bias, 16-padded]·W_qkvb, so that only
   * dbias and its first padding columns are written into dP (the cuBLAS dW GEMM reads the
   * other padding columns too, but their products land in dwpad's padding rows, which
   * ta_dw_unpad_kernel drops): zeroing all BP columns took 59 µs a call at N = 768 (H200),
   * 16 columns about 23 (ta_bias_kernel). */
  const int kb = 3 * HD + (H + 15) / 16 * 16; /* the bias to whole 32-byte sectors */
  const int split = kb < goff;
  const mf_gemm_ln_term tq1 = {b.dP, ldp, wq, ldp};
  const mf_gemm_ln_term tq2[2] = {{b.dP + goff, ldp, wq + (size_t)goff * C, HD}, {b.dP, ldp, wq, kb}};
  const bool gl = mf_gemm_ln_bwd_enabled() &&
                  mf_gemm_ln_bwd_supported(split ? tq2 : &tq1, split ? 2 : 1, C, MF_LN_FULL, z, dz);
  /* dbias into dP, with zeros in the padding columns that phase 3 reads */
  launch_bias(b.dP, b.dbias, N, H, D, starting, true, gl && split ? kb - 3 * HD : ta_bp(H, D), stream);

  /* phase 3, per chunk: dw_qkvbg += dPᵀ·x̂,  dx̂ = dP·w_qkvbg,  dz = LN backward
   * (staging now inside P, bias — or, with keep, dbias, att_ws: dead after the attention
   * backward and the dbias move) */
  st = &b.sy;
  for (int64_t r0 = 0; r0 < M; r0 += R) {
    const int64_t rows = M - r0 < R ? M - r0 : R;
    mf_ln_rows_cuda(st->xh, s.mu + r0, s.rs + r0, z + r0 * C, w->ln_g, w->ln_b, rows, C,
                    MF_LN_FULL, 1, stream);
    const bf16 *dp = b.dP + r0 * ldp;
    if (G(w_qkvbg))
      mf_gemm_rm_cuda(blas, stream, 1, 0, ldp, C, rows, 1.0f, dp, ldp, st->xh, C, 1.0f, b.dwpad,
                      MF_GEMM_OUT_F32, C);
    if (gl) { /* the chunks' pointers keep the alignment checked at r0 = 0 */
      /* dx̂ = dP·w_qkvbg and the LayerNorm backward in one kernel: no fp32 dx̂ in HBM */
      const mf_gemm_ln_term t1 = {dp, ldp, wq, ldp};
      const mf_gemm_ln_term t2[2] = {{dp + goff, ldp, tq2[0].w, HD}, {dp, ldp, wq, kb}};
      const int parts = mf_gemm_ln_bwd_cuda(dz + r0 * C, rd ? 1 : 0, st->part, split ? t2 : &t1,
                                            split ? 2 : 1, z + r0 * C, s.mu + r0, s.rs + r0, w->ln_g,
                                            rows, C, MF_LN_FULL, stream);
      mf_ln_param_grad_reduce_cuda(G(ln_g), G(ln_b), st->part, parts, C, stream);
      continue;
    }
    mf_gemm_rm_cuda(blas, stream, 0, 0, rows, C, ldp, 1.0f, dp, ldp, wq, C, 0.0f, st->u,
                    MF_GEMM_OUT_F32, C);
    mf_ln_rows_backward_cuda(dz + r0 * C, st->part, st->u, z + r0 * C, s.mu + r0, s.rs + r0,
                             w->ln_g, rows, C, MF_LN_FULL, rd ? 1 : 0, stream);
    mf_ln_param_grad_reduce_cuda(G(ln_g), G(ln_b), st->part, mf_ln_rows_backward_parts(rows), C,
                                 stream);
  }
  if (G(w_qkvbg)) {
    ta_dw_unpad_kernel<<<mf_ew_blocks((int64_t)(4 * HD + H) * C), 256, 0, stream>>>(
        G(w_qkvbg), b.dwpad, C, H, D);
    MF_CHECK_LAUNCH();
  }
}

/* ================================================================ entry points */

extern "C" void mf_triatt_forward_cuda(bf16 *out, void *saved, const bf16 *z, const uint8_t *pm,
                                       const mf_triatt_cuda_weights *w, int N, int C, int H,
                                       int D, int starting, int keep, const mf_resdrop_cuda *rd,
                                       void *ws, size_t ws_bytes, const mf_cuda_blas *blas,
                                       cudaStream_t stream) {
  ta_check(w, N, C, H, D, starting, keep, rd);
  MF_ASSERT(out && saved && z && ws, "triatt_forward_cuda: NULL argument");
  ta_forward(out, saved, z, pm, w, N, C, H, D, starting, keep, rd, ws, ws_bytes, blas, stream);
}

extern "C" void mf_triatt_backward_cuda(bf16 *dz, const mf_triatt_cuda_grads *g, const bf16 *dout,
                                        const void *saved, const bf16 *z, const uint8_t *pm,
                                        const mf_triatt_cuda_weights *w, int N, int C, int H,
                                        int D, int starting, int keep,
                                        const mf_resdrop_cuda *rd, void *ws, size_t ws_bytes,
                                        const mf_cuda_blas *blas, cudaStream_t stream) {
  ta_check(w, N, C, H, D, starting, keep, rd);
  MF_ASSERT(dz && dout && saved && z && ws, "triatt_backward_cuda: NULL argument");
  ta_backward(dz, g, dout, saved, z, pm, w, N, C, H, D, starting, keep, rd, ws, ws_bytes, blas,
              stream);
}
