/* transition.cu — EvoFusion SwiGLU transition on the GPU: the forward dispatches to the
 * one-kernel fused transition of ln_gemm.cu where the shape allows (variant 2, default);
 * otherwise LN into a bf16 staging chunk, one GEMM for both 4c projections, the SwiGLU
 * epilogue, the output GEMM (with the residual add as beta = 1), all per row chunk;
 * backward by recomputation.
 * See transition_cuda.h. Not the CPU reference (src/ops/cpu/transition.c). */
#include "transition_cuda.h"

#include "fusion_util.cuh"
#include "ln_gemm_cuda.h"
#include "ln_gemm_bwd_cuda.h"
#include "ln_linear_cuda.h"
#include "transition_bwd_cl_cuda.h"

/* The kernels take VEC = 8 consecutive hidden channels per thread when Hd % 8 == 0. */

/* h (rows, Hd) = silu(a) ⊙ b from ab (rows, 2Hd) = [a | b]. */
template <int VEC>
static __global__ void swiglu_kernel(bf16 *__restrict__ h, const bf16 *__restrict__ ab, int64_t rows,
                              int Hd) {
  const int hv = Hd / VEC;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * hv;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / hv;
    const int j = (int)(i - r * hv) * VEC;
    float a[VEC], b[VEC];
    mf_ldv<VEC>(a, ab + r * 2 * Hd + j);
    mf_ldv<VEC>(b, ab + r * 2 * Hd + Hd + j);
#pragma unroll
    for (int k = 0; k < VEC; k++) a[k] = a[k] * mf_sigmoidf(a[k]) * b[k];
    mf_stv<VEC>(h + r * Hd + j, a);
  }
}

/* In place: ab (rows, 2Hd) = [a | b] becomes [da | db]:
 * da = dh ⊙ b ⊙ s(1 + a(1 − s)),  db = dh ⊙ a ⊙ s,  s = sigmoid(a); dh (rows, Hd).
 * With h != NULL it also writes h (rows, Hd) = silu(a) ⊙ b (for dW_o) in the same pass,
 * so the backward reads [a | b] once. */
template <int VEC>
static __global__ void swiglu_backward_kernel(bf16 *__restrict__ ab, bf16 *__restrict__ h,
                                       const bf16 *__restrict__ dh, int64_t rows, int Hd) {
  const int hv = Hd / VEC;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * hv;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / hv;
    const int j = (int)(i - r * hv) * VEC;
    float a[VEC], b[VEC], d[VEC], hh[VEC];
    mf_ldv<VEC>(a, ab + r * 2 * Hd + j);
    mf_ldv<VEC>(b, ab + r * 2 * Hd + Hd + j);
    mf_ldv<VEC>(d, dh + r * Hd + j);
#pragma unroll
    for (int k = 0; k < VEC; k++) {
      const float s = mf_sigmoidf(a[k]), av = a[k];
      hh[k] = av * s * b[k];
      a[k] = d[k] * b[k] * s * (1.0f + av * (1.0f - s));
      b[k] = d[k] * av * s;
    }
    if (h) mf_stv<VEC>(h + r * Hd + j, hh);
    mf_stv<VEC>(ab + r * 2 * Hd + j, a);
    mf_stv<VEC>(ab + r * 2 * Hd + Hd + j, b);
  }
}

static void launch_swiglu(bf16 *h, const bf16 *ab, int64_t rows, int Hd, cudaStream_t s) {
  if (Hd % 8 == 0)
    swiglu_kernel<8><<<mf_ew_blocks(rows * Hd / 8), 256, 0, s>>>(h, ab, rows, Hd);
  else
    swiglu_kernel<1><<<mf_ew_blocks(rows * Hd), 256, 0, s>>>(h, ab, rows, Hd);
  MF_CHECK_LAUNCH();
}
static void launch_swiglu_backward(bf16 *ab, bf16 *h, const bf16 *dh, int64_t rows, int Hd,
                                   cudaStream_t s) {
  if (Hd % 8 == 0)
    swiglu_backward_kernel<8><<<mf_ew_blocks(rows * Hd / 8), 256, 0, s>>>(ab, h, dh, rows, Hd);
  else
    swiglu_backward_kernel<1><<<mf_ew_blocks(rows * Hd), 256, 0, s>>>(ab, h, dh, rows, Hd);
  MF_CHECK_LAUNCH();
}

typedef struct {
  bf16 *xh;    /* (R, C) normalised rows */
  bf16 *ab;    /* (R, 2Hd) [a | b], then [da | db] */
  bf16 *h;     /* (R, Hd) silu(a) ⊙ b */
  bf16 *dh;    /* (R, Hd) dout·W_o */
  float *dxh;  /* (R, C) fp32 */
  float *part; /* (mf_ln_rows_backward_parts(R), 2C) */
} tr_ws;

static int64_t tr_chunk(int64_t M, int C, int Hd) {
  return mf_fusion_chunk_rows(M, (size_t)C * 6 + (size_t)Hd * 8);
}

static size_t tr_carve(tr_ws *w, void *base, int64_t M, int C, int Hd) {
  const int64_t R = tr_chunk(M, C, Hd);
  mf_carver cv = {(char *)base, 0};
  w->xh = (bf16 *)mf_carve(&cv, (size_t)R * C * sizeof(bf16));
  w->ab = (bf16 *)mf_carve(&cv, (size_t)R * 2 * Hd * sizeof(bf16));
  w->h = (bf16 *)mf_carve(&cv, (size_t)R * Hd * sizeof(bf16));
  w->dh = (bf16 *)mf_carve(&cv, (size_t)R * Hd * sizeof(bf16));
  w->dxh = (float *)mf_carve(&cv, (size_t)R * C * sizeof(float));
  w->part = (float *)mf_carve(&cv, (size_t)mf_ln_rows_backward_parts(R) * 2 * C * sizeof(float));
  return cv.used;
}

extern "C" size_t mf_transition_cuda_workspace(int64_t M, int C, int Hd) {
  tr_ws w;
  const size_t staging = tr_carve(&w, NULL, M, C, Hd), cl = mf_transition_bwd_cl_workspace(C, Hd);
  return staging > cl ? staging : cl;
}

static void tr_check(int64_t M, int C, int Hd, mf_ln_mode mode, const float *mean,
                     const float *rstd, const bf16 *gamma, const bf16 *beta) {
  MF_ASSERT(M >= 0 && C > 0 && C <= 1024 && Hd > 0, "transition_cuda dims M=%lld C=%d Hd=%d",
            (long long)M, C, Hd);
  MF_ASSERT(mode == MF_LN_FULL || mode == MF_LN_SCALE || mode == MF_LN_NONE ||
                mode == MF_LN_IDENTITY,
            "transition_cuda: bad mode %d", (int)mode);
  MF_ASSERT(mode == MF_LN_IDENTITY || (mean && rstd), "transition_cuda: mean/rstd required");
  MF_ASSERT(mode == MF_LN_NONE || mode == MF_LN_IDENTITY || gamma, "transition_cuda: gamma required");
  MF_ASSERT(mode != MF_LN_FULL || beta, "transition_cuda: beta required");
}

extern "C" void mf_transition_forward_cuda(bf16 *out, float *mean, float *rstd, const bf16 *inp,
                                           const bf16 *gamma, const bf16 *beta,
                                           const bf16 *w_ab, const bf16 *w_o, int64_t M, int C,
                                           int Hd, mf_ln_mode mode, int accumulate, void *ws,
                                           size_t ws_bytes, const mf_cuda_blas *blas,
                                           cudaStream_t stream) {
  tr_check(M, C, Hd, mode, mean, rstd, gamma, beta);
  if (M == 0) return;
  const int variant = mf_ln_linear_cuda_get_variant();
  if (variant == 3 && mf_transition_wg_supported(C, Hd, mode, inp, out, w_ab, w_o)) {
    /* variant 3: the whole transition in one wgmma kernel (transition_wg.cu) */
    mf_transition_wg_forward_cuda(out, mean, rstd, inp, gamma, beta, w_ab, w_o, M, C, Hd, mode,
                                  accumulate ? out : NULL, NULL, stream);
    return;
  }
  if (variant >= 2 && mf_transition_fused_supported(C, Hd, mode, inp, out, w_ab, w_o)) {
    /* variant 2: the whole transition in one kernel (ln_gemm.cu), no workspace */
    mf_transition_fused_forward_cuda(out, mean, rstd, inp, gamma, beta, w_ab, w_o, M, C, Hd, mode,
                                     accumulate, stream);
    return;
  }
  tr_ws w;
  MF_ASSERT(tr_carve(&w, NULL, M, C, Hd) <= ws_bytes, "transition_cuda: workspace too small");
  tr_carve(&w, ws, M, C, Hd);
  const int64_t R = tr_chunk(M, C, Hd);
  const int ident = mode == MF_LN_IDENTITY;
  for (int64_t r0 = 0; r0 < M; r0 += R) {
    const int64_t rows = M - r0 < R ? M - r0 : R;
    const bf16 *x = inp + r0 * C; /* (rows, C) */
    if (mf_ln_gemm_fused_supported(C, Hd, mode, x, w.h, w_ab)) {
      /* LN + [a | b] GEMM + SwiGLU in one kernel: h (rows, Hd) directly */
      mf_ln_gemm_fused_cuda(w.h, mean + r0, rstd + r0, x, gamma, beta, w_ab, NULL, NULL, rows, C,
                            Hd, mode, 2, stream);
    } else {
      if (!ident) {
        mf_ln_rows_cuda(w.xh, mean + r0, rstd + r0, x, gamma, beta, rows, C, mode, 0, stream);
        x = w.xh;
      }
      mf_gemm_rm_cuda(blas, stream, 0, 1, rows, 2 * Hd, C, 1.0f, x, C, w_ab, C, 0.0f, w.ab,
                      MF_GEMM_OUT_BF16, 2 * Hd);
      launch_swiglu(w.h, w.ab, rows, Hd, stream);
    }
    mf_gemm_rm_cuda(blas, stream, 0, 1, rows, C, Hd, 1.0f, w.h, Hd, w_o, Hd,
                    accumulate ? 1.0f : 0.0f, out + r0 * C, MF_GEMM_OUT_BF16, C);
  }
}

extern "C" void mf_transition_forward_res_cuda(bf16 *out, bf16 *copy, const bf16 *res, float *mean,
                                               float *rstd, const bf16 *inp, const bf16 *gamma,
                                               const bf16 *beta, const bf16 *w_ab,
                                               const bf16 *w_o, int64_t M, int C, int Hd,
                                               mf_ln_mode mode, void *ws, size_t ws_bytes,
                                               const mf_cuda_blas *blas, cudaStream_t stream) {
  tr_check(M, C, Hd, mode, mean, rstd, gamma, beta);
  MF_ASSERT(res, "transition_cuda: res required (mf_transition_forward_cuda adds into out)");
  MF_ASSERT(res == out || res + M * C <= out || out + M * C <= res,
            "transition_cuda: the residual res must be out or not overlap it");
  const bf16 *ins[3] = {out, res, inp};
  for (int i = 0; copy && i < 3; i++)
    MF_ASSERT(copy + M * C <= ins[i] || ins[i] + M * C <= copy,
              "transition_cuda: copy must overlap none of out, res and inp");
  if (M == 0) return;
  if (mf_ln_linear_cuda_get_variant() == 3 && mf_transition_wg_supported(C, Hd, mode, inp, out, w_ab, w_o) &&
      (uintptr_t)res % 16 == 0 && (uintptr_t)copy % 16 == 0) {
    /* the wgmma kernel reads the residual in its epilogue (no copy) and stores each output
     * piece to copy as well */
    mf_transition_wg_forward_cuda(out, mean, rstd, inp, gamma, beta, w_ab, w_o, M, C, Hd, mode, res,
                                  copy, stream);
    return;
  }
  /* the other paths add into out: the residual first (an input sharing out's rows would be
   * overwritten before it is read) */
  MF_ASSERT(res == out || inp == out || inp + M * C <= out || out + M * C <= inp,
            "transition_cuda: with res, inp must be out or not overlap it");
  if (res != out) {
    MF_ASSERT(inp != out, "transition_cuda: out = res + T(out) needs out == res");
    MF_CHECK_CUDA(cudaMemcpyAsync(out, res, (size_t)M * C * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
  }
  mf_transition_forward_cuda(out, mean, rstd, inp, gamma, beta, w_ab, w_o, M, C, Hd, mode, 1, ws, ws_bytes,
                             blas, stream);
  if (copy)
    MF_CHECK_CUDA(cudaMemcpyAsync(copy, out, (size_t)M * C * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
}

/* The backward; add_dinp = 1 adds into dinp instead of assigning it (not for IDENTITY). */
static void tr_backward(bf16 *dinp, float *dgamma, float *dbeta, float *dw_ab, float *dw_o,
                        const bf16 *dout, const float *mean, const float *rstd, const bf16 *inp,
                        const bf16 *gamma, const bf16 *beta, const bf16 *w_ab, const bf16 *w_o,
                        int64_t M, int C, int Hd, mf_ln_mode mode, int add_dinp, void *ws,
                        size_t ws_bytes, const mf_cuda_blas *blas, cudaStream_t stream) {
  tr_check(M, C, Hd, mode, mean, rstd, gamma, beta);
  MF_ASSERT(!(add_dinp && mode == MF_LN_IDENTITY),
            "transition_cuda: the adding backward needs a LayerNorm mode");
  if (M == 0) return;
  const int ident = mode == MF_LN_IDENTITY;
  if (mode == MF_LN_NONE || ident) dgamma = NULL;
  if (mode != MF_LN_FULL) dbeta = NULL;
  const int need_dx = dinp || dgamma || dbeta;
  const int need_dh = need_dx || dw_ab;
  if (!need_dh && !dw_o) return;
  /* in place means the same rows: a partial overlap would race between CTAs */
  MF_ASSERT(!dinp || (const bf16 *)dinp == dout || (const bf16 *)dinp >= dout + M * C ||
                dout >= dinp + M * C,
            "transition backward: dinp must equal dout or not overlap it");
  /* default at C = 128: the whole backward in one cluster kernel, the weight gradients on
   * chip (transition_bwd_cl.cu); off under the other ln_gemm_bwd configurations, so they
   * stay testable */
  if (!ident && mf_ln_gemm_bwd_config(MF_LGB_SWIGLU) == 7 &&
      mf_transition_bwd_cl_supported(C, Hd, mode, inp, dout, mean, rstd, w_ab, w_o, dinp) &&
      mf_transition_bwd_cl_workspace(C, Hd) <= ws_bytes) {
    mf_transition_bwd_cl_cuda(dinp, add_dinp, dgamma, dbeta, dw_ab, dw_o, dout, mean, rstd, inp, gamma,
                              beta, w_ab, w_o, M, Hd, mode, ws, ws_bytes, stream);
    return;
  }
  tr_ws w;
  MF_ASSERT(tr_carve(&w, NULL, M, C, Hd) <= ws_bytes, "transition_cuda: workspace too small");
  tr_carve(&w, ws, M, C, Hd);
  const int64_t R = tr_chunk(M, C, Hd);
  /* opt-in (off by default: measured slower): the fused kernel of ln_gemm_bwd_cuda.h —
   * x̂, [a | b], dh, [da | db], dx̂ and the LN backward on chip; writes x̂, h and [da | db]
   * for the weight-gradient GEMMs. When dinp overwrites dout (the adding backward in
   * place) it also writes a copy of dout for dw_o. */
  const int fused = !ident && (!dinp || ((uintptr_t)dinp & 3) == 0) &&
                    mf_ln_gemm_bwd_supported(MF_LGB_SWIGLU, C, Hd, mode, inp, dout, w_ab, w_o);
  /* its light configurations form no dx̂: the kernel writes x̂, [da | db] and h, and dx̂ =
   * [da | db]·w_ab and the LayerNorm backward run here as on the staging path */
  const int light = fused && mf_ln_gemm_bwd_light(MF_LGB_SWIGLU);
  const int alias = dinp && dw_o && (const bf16 *)dinp < dout + M * C && dout < dinp + M * C;
  for (int64_t r0 = 0; r0 < M; r0 += R) {
    const int64_t rows = M - r0 < R ? M - r0 : R;
    const bf16 *dy = dout + r0 * C; /* (rows, C) */
    const bf16 *x = inp + r0 * C;   /* (rows, C) */
    if (light) {
      /* dout is read (kernel, dW_o) before dinp's rows are written (LN backward below), so
       * the in-place case needs no copy of dout */
      mf_ln_gemm_bwd_cuda(MF_LGB_SWIGLU, NULL, 0, NULL, dw_ab ? w.xh : NULL,
                          need_dh ? w.ab : NULL, dw_o ? w.h : NULL, NULL, dy, mean + r0,
                          rstd + r0, x, gamma, beta, w_ab, w_o, NULL, rows, C, Hd, mode, stream);
      if (dw_o)
        mf_gemm_rm_cuda(blas, stream, 1, 0, C, Hd, rows, 1.0f, dy, C, w.h, Hd, 1.0f, dw_o,
                        MF_GEMM_OUT_F32, Hd);
      if (dw_ab)
        mf_gemm_rm_cuda(blas, stream, 1, 0, 2 * Hd, C, rows, 1.0f, w.ab, 2 * Hd, w.xh, C, 1.0f,
                        dw_ab, MF_GEMM_OUT_F32, C);
      if (!need_dx) continue;
      mf_gemm_rm_cuda(blas, stream, 0, 0, rows, C, 2 * Hd, 1.0f, w.ab, 2 * Hd, w_ab, C, 0.0f,
                      w.dxh, MF_GEMM_OUT_F32, C);
      mf_ln_rows_backward_cuda(dinp ? dinp + r0 * C : NULL, w.part, w.dxh, x, mean + r0,
                               rstd + r0, gamma, rows, C, mode, add_dinp, stream);
      mf_ln_param_grad_reduce_cuda(dgamma, dbeta, w.part, mf_ln_rows_backward_parts(rows), C,
                                   stream);
      continue;
    }
    if (fused) {
      bf16 *dcopy = alias ? (bf16 *)w.dxh : NULL; /* (rows, C): dxh is unused on this path */
      const int parts = mf_ln_gemm_bwd_cuda(
          MF_LGB_SWIGLU, dinp ? dinp + r0 * C : NULL, add_dinp, (dgamma || dbeta) ? w.part : NULL,
          dw_ab ? w.xh : NULL, dw_ab ? w.ab : NULL, dw_o ? w.h : NULL, dcopy, dy, mean + r0,
          rstd + r0, x, gamma, beta, w_ab, w_o, NULL, rows, C, Hd, mode, stream);
      if (dw_o)
        mf_gemm_rm_cuda(blas, stream, 1, 0, C, Hd, rows, 1.0f, dcopy ? dcopy : dy, C, w.h, Hd,
                        1.0f, dw_o, MF_GEMM_OUT_F32, Hd);
      if (dw_ab)
        mf_gemm_rm_cuda(blas, stream, 1, 0, 2 * Hd, C, rows, 1.0f, w.ab, 2 * Hd, w.xh, C, 1.0f,
                        dw_ab, MF_GEMM_OUT_F32, C);
      mf_ln_param_grad_reduce_cuda(dgamma, dbeta, w.part, parts, C, stream);
      continue;
    }
    /* recompute x̂, [a | b] */
    if (!ident) {
      mf_ln_rows_cuda(w.xh, (float *)mean + r0, (float *)rstd + r0, x, gamma, beta, rows, C,
                      mode, 1, stream);
      x = w.xh;
    }
    mf_gemm_rm_cuda(blas, stream, 0, 1, rows, 2 * Hd, C, 1.0f, x, C, w_ab, C, 0.0f, w.ab,
                    MF_GEMM_OUT_BF16, 2 * Hd);
    /* out = h·W_oᵀ  ⇒  dh = dout·W_o, dw_o += doutᵀ·h */
    if (!need_dh) { /* only dw_o: h alone */
      launch_swiglu(w.h, w.ab, rows, Hd, stream);
      mf_gemm_rm_cuda(blas, stream, 1, 0, C, Hd, rows, 1.0f, dy, C, w.h, Hd, 1.0f, dw_o,
                      MF_GEMM_OUT_F32, Hd);
      continue;
    }
    mf_gemm_rm_cuda(blas, stream, 0, 0, rows, Hd, C, 1.0f, dy, C, w_o, Hd, 0.0f, w.dh,
                    MF_GEMM_OUT_BF16, Hd);
    /* h = silu(a) ⊙ b  ⇒  [da | db] in place of [a | b], and h itself, in one pass */
    launch_swiglu_backward(w.ab, dw_o ? w.h : NULL, w.dh, rows, Hd, stream);
    if (dw_o)
      mf_gemm_rm_cuda(blas, stream, 1, 0, C, Hd, rows, 1.0f, dy, C, w.h, Hd, 1.0f, dw_o,
                      MF_GEMM_OUT_F32, Hd);
    /* [a | b] = x̂·w_abᵀ  ⇒  dw_ab += [da | db]ᵀ·x̂,  dx̂ = [da | db]·w_ab */
    if (dw_ab)
      mf_gemm_rm_cuda(blas, stream, 1, 0, 2 * Hd, C, rows, 1.0f, w.ab, 2 * Hd, x, C, 1.0f, dw_ab,
                      MF_GEMM_OUT_F32, C);
    if (!need_dx) continue;
    mf_gemm_rm_cuda(blas, stream, 0, 0, rows, C, 2 * Hd, 1.0f, w.ab, 2 * Hd, w_ab, C, 0.0f,
                    w.dxh, MF_GEMM_OUT_F32, C);
    if (ident) {
      if (dinp) mf_f32_to_bf16_cuda(dinp + r0 * C, w.dxh, rows * C, stream);
      continue;
    }
    mf_ln_rows_backward_cuda(dinp ? dinp + r0 * C : NULL, w.part, w.dxh, inp + r0 * C,
                             mean + r0, rstd + r0, gamma, rows, C, mode, add_dinp, stream);
    mf_ln_param_grad_reduce_cuda(dgamma, dbeta, w.part, mf_ln_rows_backward_parts(rows), C,
                                 stream);
  }
}

extern "C" void mf_transition_backward_cuda(bf16 *dinp, float *dgamma, float *dbeta,
                                            float *dw_ab, float *dw_o, const bf16 *dout,
                                            const float *mean, const float *rstd,
                                            const bf16 *inp, const bf16 *gamma,
                                            const bf16 *beta, const bf16 *w_ab, const bf16 *w_o,
                                            int64_t M, int C, int Hd, mf_ln_mode mode, void *ws,
                                            size_t ws_bytes, const mf_cuda_blas *blas,
                                            cudaStream_t stream) {
  tr_backward(dinp, dgamma, dbeta, dw_ab, dw_o, dout, mean, rstd, inp, gamma, beta, w_ab, w_o, M,
              C, Hd, mode, 0, ws, ws_bytes, blas, stream);
}

extern "C" void mf_transition_backward_add_cuda(bf16 *dinp, float *dgamma, float *dbeta,
                                                float *dw_ab, float *dw_o, const bf16 *dout,
                                                const float *mean, const float *rstd,
                                                const bf16 *inp, const bf16 *gamma,
                                                const bf16 *beta, const bf16 *w_ab,
                                                const bf16 *w_o, int64_t M, int C, int Hd,
                                                mf_ln_mode mode, void *ws, size_t ws_bytes,
                                                const mf_cuda_blas *blas, cudaStream_t stream) {
  tr_backward(dinp, dgamma, dbeta, dw_ab, dw_o, dout, mean, rstd, inp, gamma, beta, w_ab, w_o, M,
              C, Hd, mode, 1, ws, ws_bytes, blas, stream);
}
