/* transition.c — CPU reference of the SwiGLU transition, built from mf_layernorm_*,
 * mf_linear_* and mf_gemm, recomputing x̂, a and b in row chunks in the backward.
 * Not the fused CUDA kernel. See transition.h. */
#include "ops/transition.h"
#include "ops/cpu/cpu_math.h"

#include <math.h>

#include "ops/gemm.h"
#include "ops/linear.h"
#include "ops/ln_linear.h"

static mf_real *scratch(int64_t n, const char *what) {
  return mf_xmalloc((size_t)n * sizeof(mf_real), what);
}

static void check_args(int64_t M, int C, int Hd, mf_ln_mode mode, const mf_real *mean,
                       const mf_real *rstd, const mf_real *gamma, const mf_real *beta) {
  MF_ASSERT(M >= 0 && C > 0 && Hd > 0, "transition dims M=%lld C=%d Hd=%d", (long long)M, C, Hd);
  MF_ASSERT(mode == MF_LN_FULL || mode == MF_LN_SCALE || mode == MF_LN_NONE ||
                mode == MF_LN_IDENTITY,
            "transition: bad mode %d", (int)mode);
  MF_ASSERT(mode == MF_LN_IDENTITY || (mean && rstd), "transition: mean/rstd required");
  MF_ASSERT(mode == MF_LN_NONE || mode == MF_LN_IDENTITY || gamma, "transition: gamma required");
  MF_ASSERT(mode != MF_LN_FULL || beta, "transition: beta required");
}

/* h (n) = silu(a) ⊙ b elementwise, in double; h may be a. */
static void swiglu(mf_real *h, const mf_real *a, const mf_real *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double av = a[i];
    h[i] = (mf_real)(av * mf_sigmoid(av) * b[i]);
  }
}

void mf_transition_forward(mf_real *out, mf_real *mean, mf_real *rstd, const mf_real *inp,
                           const mf_real *gamma, const mf_real *beta, const mf_real *w_a,
                           const mf_real *w_b, const mf_real *w_o, int64_t M, int C, int Hd,
                           mf_ln_mode mode) {
  check_args(M, C, Hd, mode, mean, rstd, gamma, beta);
  if (M == 0) return;
  int64_t chunk = M < MF_TRANSITION_CHUNK ? M : MF_TRANSITION_CHUNK;
  mf_real *xh = mode == MF_LN_IDENTITY ? NULL : scratch(chunk * C, "transition xhat"); /* (chunk, C) */
  mf_real *a = scratch(chunk * Hd, "transition a"); /* (chunk, Hd): a, then h = silu(a) ⊙ b */
  mf_real *b = scratch(chunk * Hd, "transition b"); /* (chunk, Hd) */
  for (int64_t r0 = 0; r0 < M; r0 += chunk) {
    int64_t rows = M - r0 < chunk ? M - r0 : chunk;
    const mf_real *x = inp + r0 * C;
    if (xh) {
      mf_layernorm_forward(xh, mean + r0, rstd + r0, x, gamma, beta, rows, C, mode);
      x = xh;
    }
    mf_linear_forward(a, x, w_a, NULL, rows, C, Hd);
    mf_linear_forward(b, x, w_b, NULL, rows, C, Hd);
    swiglu(a, a, b, rows * Hd); /* h = silu(a) ⊙ b, in a */
    mf_linear_forward(out + r0 * C, a, w_o, NULL, rows, Hd, C);
  }
  mf_free(b);
  mf_free(a);
  mf_free(xh);
}

void mf_transition_backward(mf_real *dinp, mf_real *dgamma, mf_real *dbeta, mf_real *dw_a,
                            mf_real *dw_b, mf_real *dw_o, const mf_real *dout,
                            const mf_real *mean, const mf_real *rstd, const mf_real *inp,
                            const mf_real *gamma, const mf_real *beta, const mf_real *w_a,
                            const mf_real *w_b, const mf_real *w_o, int64_t M, int C, int Hd,
                            mf_ln_mode mode) {
  check_args(M, C, Hd, mode, mean, rstd, gamma, beta);
  if (M == 0) return;
  int ident = mode == MF_LN_IDENTITY;
  if (mode == MF_LN_NONE || ident) dgamma = NULL;
  if (mode != MF_LN_FULL) dbeta = NULL;
  int need_dx = dinp || dgamma || dbeta;      /* dx̂ needed */
  int need_dh = need_dx || dw_a || dw_b;      /* dh = dout·W_o needed */
  if (!need_dh && !dw_o) return;

  int64_t chunk = M < MF_TRANSITION_CHUNK ? M : MF_TRANSITION_CHUNK;
  mf_real *xh = ident ? NULL : scratch(chunk * C, "transition xhat");                /* (chunk, C) */
  mf_real *dxh = need_dx && !ident ? scratch(chunk * C, "transition dxhat") : NULL;  /* (chunk, C) */
  mf_real *a = scratch(chunk * Hd, "transition a");   /* (chunk, Hd): a, then da */
  mf_real *b = scratch(chunk * Hd, "transition b");   /* (chunk, Hd): b, then db */
  mf_real *h = scratch(chunk * Hd, "transition h");   /* (chunk, Hd): h, then dh */
  /* dgamma/dbeta: per-chunk partials (mf_real) summed across chunks in double */
  mf_ln_chunk_grads lg;
  mf_ln_chunk_grads_init(&lg, dgamma != NULL, dbeta != NULL, C, "transition");

  for (int64_t r0 = 0; r0 < M; r0 += chunk) {
    int64_t rows = M - r0 < chunk ? M - r0 : chunk, n = rows * Hd;
    const mf_real *dy = dout + r0 * C;
    /* recompute x̂, a = x̂·W_aᵀ, b = x̂·W_bᵀ */
    const mf_real *x = inp + r0 * C;
    if (xh) {
      mf_ln_linear_normalize(xh, mean + r0, rstd + r0, x, gamma, beta, rows, C, mode);
      x = xh;
    }
    mf_linear_forward(a, x, w_a, NULL, rows, C, Hd);
    mf_linear_forward(b, x, w_b, NULL, rows, C, Hd);
    /* out = h·W_oᵀ  ⇒  dw_o += doutᵀ·h, dh = dout·W_o */
    if (dw_o) {
      swiglu(h, a, b, n);
      mf_linear_backward(NULL, dw_o, NULL, dy, h, w_o, rows, Hd, C);
    }
    if (!need_dh) continue;
    mf_linear_backward(h, NULL, NULL, dy, NULL, w_o, rows, Hd, C);
    /* h = silu(a) ⊙ b  ⇒  da = dh ⊙ b ⊙ silu'(a), db = dh ⊙ silu(a) */
    for (int64_t i = 0; i < n; i++) {
      double av = a[i], bv = b[i], dh = h[i], s = mf_sigmoid(av);
      a[i] = (mf_real)(dh * bv * s * (1.0 + av * (1.0 - s)));
      b[i] = (mf_real)(dh * av * s);
    }
    /* a = x̂·W_aᵀ, b = x̂·W_bᵀ  ⇒  dx̂ = da·W_a + db·W_b, dw_a += daᵀ·x̂, dw_b += dbᵀ·x̂ */
    mf_real *dx = ident ? (dinp ? dinp + r0 * C : NULL) : dxh;
    mf_linear_backward(dx, dw_a, NULL, a, x, w_a, rows, C, Hd);
    mf_linear_backward(NULL, dw_b, NULL, b, x, w_b, rows, C, Hd);
    if (dx) mf_gemm(0, 0, rows, C, Hd, 1.0, b, Hd, w_b, C, 1.0, dx, C);
    if (ident || !need_dx) continue;
    mf_ln_chunk_grads_backward(&lg, dinp ? dinp + r0 * C : NULL, dxh, mean + r0, rstd + r0,
                               inp + r0 * C, gamma, rows, C, mode);
  }
  mf_ln_chunk_grads_finish(&lg, dgamma, dbeta, C);
  mf_free(h);
  mf_free(b);
  mf_free(a);
  mf_free(dxh);
  mf_free(xh);
}
