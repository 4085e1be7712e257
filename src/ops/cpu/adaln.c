/* adaln.c — CPU reference of adaptive LayerNorm and the adaLN-Zero gate, built from
 * mf_layernorm_*, mf_linear_* and mf_gemm; normalised inputs and gate logits are
 * recomputed in row chunks in the backward. Not the CUDA kernels. See adaln.h. */
#include "ops/adaln.h"
#include "ops/cpu/cpu_math.h"

#include <math.h>
#include <string.h>

#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/linear.h"
#include "ops/ln_linear.h"

static mf_real *scratch(int64_t n, const char *what) {
  return mf_xmalloc((size_t)n * sizeof(mf_real), what);
}

static double *dscratch(int64_t n, const char *what) { /* zeroed doubles */
  return mf_xcalloc((size_t)n * sizeof(double), what);
}


void mf_adaln_forward(mf_real *out, mf_real *a_mean, mf_real *a_rstd, mf_real *s_mean,
                      mf_real *s_rstd, const mf_real *a, const mf_real *s,
                      const mf_real *gamma_s, const mf_real *w_gamma, const mf_real *b_gamma,
                      const mf_real *w_beta, int64_t M, int Ca, int Cs) {
  MF_ASSERT(M >= 0 && Ca > 0 && Cs > 0, "adaln dims M=%lld Ca=%d Cs=%d", (long long)M, Ca, Cs);
  MF_ASSERT(gamma_s && w_gamma && w_beta, "adaln: gamma_s, w_gamma and w_beta required");
  if (M == 0) return;
  int64_t chunk = M < MF_ADALN_CHUNK ? M : MF_ADALN_CHUNK;
  mf_real *ah = scratch(chunk * Ca, "adaln ahat"); /* (chunk, Ca) */
  mf_real *sh = scratch(chunk * Cs, "adaln shat"); /* (chunk, Cs) */
  mf_real *g = scratch(chunk * Ca, "adaln logits"); /* (chunk, Ca) */
  for (int64_t r0 = 0; r0 < M; r0 += chunk) {
    int64_t rows = M - r0 < chunk ? M - r0 : chunk;
    mf_real *o = out + r0 * Ca;
    mf_layernorm_forward(ah, a_mean + r0, a_rstd + r0, a + r0 * Ca, NULL, NULL, rows, Ca,
                         MF_LN_NONE);
    mf_layernorm_forward(sh, s_mean + r0, s_rstd + r0, s + r0 * Cs, gamma_s, NULL, rows, Cs,
                         MF_LN_SCALE);
    mf_linear_forward(g, sh, w_gamma, b_gamma, rows, Cs, Ca);
    mf_linear_forward(o, sh, w_beta, NULL, rows, Cs, Ca);
    for (int64_t i = 0; i < rows * Ca; i++) o[i] = (mf_real)(mf_sigmoid(g[i]) * ah[i] + o[i]);
  }
  mf_free(g);
  mf_free(sh);
  mf_free(ah);
}

void mf_adaln_backward(mf_real *da, mf_real *ds, mf_real *dgamma_s, mf_real *dw_gamma,
                       mf_real *db_gamma, mf_real *dw_beta, const mf_real *dout,
                       const mf_real *a_mean, const mf_real *a_rstd, const mf_real *s_mean,
                       const mf_real *s_rstd, const mf_real *a, const mf_real *s,
                       const mf_real *gamma_s, const mf_real *w_gamma, const mf_real *b_gamma,
                       const mf_real *w_beta, int64_t M, int Ca, int Cs) {
  MF_ASSERT(M >= 0 && Ca > 0 && Cs > 0, "adaln dims M=%lld Ca=%d Cs=%d", (long long)M, Ca, Cs);
  MF_ASSERT(gamma_s && w_gamma && w_beta, "adaln: gamma_s, w_gamma and w_beta required");
  if (M == 0) return;
  int need_dsh = ds || dgamma_s; /* dŝ needed */
  if (!da && !need_dsh && !dw_gamma && !db_gamma && !dw_beta) return;
  int64_t chunk = M < MF_ADALN_CHUNK ? M : MF_ADALN_CHUNK;
  mf_real *ah = scratch(chunk * Ca, "adaln ahat");                      /* (chunk, Ca) */
  mf_real *sh = scratch(chunk * Cs, "adaln shat");                      /* (chunk, Cs) */
  mf_real *g = scratch(chunk * Ca, "adaln logits");                     /* (chunk, Ca): g, then dg */
  mf_real *dah = da ? scratch(chunk * Ca, "adaln dahat") : NULL;        /* (chunk, Ca) */
  mf_real *dsh = need_dsh ? scratch(chunk * Cs, "adaln dshat") : NULL;  /* (chunk, Cs) */
  mf_real *pg = dgamma_s ? scratch(Cs, "adaln dgamma_s part") : NULL;   /* (Cs) per chunk */
  double *acc_g = dgamma_s ? dscratch(Cs, "adaln dgamma_s sum") : NULL; /* (Cs) */
  double *acc_b = db_gamma ? dscratch(Ca, "adaln db_gamma sum") : NULL; /* (Ca) */

  for (int64_t r0 = 0; r0 < M; r0 += chunk) {
    int64_t rows = M - r0 < chunk ? M - r0 : chunk;
    const mf_real *dy = dout + r0 * Ca;
    /* recompute â, ŝ and g = ŝ·W_γᵀ + b_γ */
    mf_ln_linear_normalize(ah, a_mean + r0, a_rstd + r0, a + r0 * Ca, NULL, NULL, rows, Ca,
                           MF_LN_NONE);
    mf_ln_linear_normalize(sh, s_mean + r0, s_rstd + r0, s + r0 * Cs, gamma_s, NULL, rows, Cs,
                           MF_LN_SCALE);
    mf_linear_forward(g, sh, w_gamma, b_gamma, rows, Cs, Ca);
    /* out = σ(g) ⊙ â + ŝ·W_βᵀ  ⇒  dâ = dout ⊙ σ, dg = dout ⊙ â ⊙ σ(1 − σ) */
    for (int64_t m = 0; m < rows; m++)
      for (int c = 0; c < Ca; c++) {
        int64_t i = m * Ca + c;
        double sg = mf_sigmoid(g[i]);
        if (dah) dah[i] = (mf_real)(dy[i] * sg);
        double dg = dy[i] * ah[i] * sg * (1.0 - sg);
        g[i] = (mf_real)dg;
        if (acc_b) acc_b[c] += dg;
      }
    /* dŝ = dg·W_γ + dout·W_β;  dw_gamma += dgᵀ·ŝ;  dw_beta += doutᵀ·ŝ */
    mf_linear_backward(dsh, dw_gamma, NULL, g, sh, w_gamma, rows, Cs, Ca);
    mf_linear_backward(NULL, dw_beta, NULL, dy, sh, w_beta, rows, Cs, Ca);
    if (dsh) mf_gemm(0, 0, rows, Cs, Ca, 1.0, dy, Ca, w_beta, Cs, 1.0, dsh, Cs);
    /* â = LN_noaffine(a), ŝ = LN_scaleonly(s) */
    if (da)
      mf_layernorm_backward(da + r0 * Ca, NULL, NULL, dah, a_mean + r0, a_rstd + r0, a + r0 * Ca,
                            NULL, rows, Ca, MF_LN_NONE);
    if (need_dsh) {
      if (pg) memset(pg, 0, (size_t)Cs * sizeof(mf_real));
      mf_layernorm_backward(ds ? ds + r0 * Cs : NULL, pg, NULL, dsh, s_mean + r0, s_rstd + r0,
                            s + r0 * Cs, gamma_s, rows, Cs, MF_LN_SCALE);
      for (int c = 0; pg && c < Cs; c++) acc_g[c] += pg[c];
    }
  }
  for (int c = 0; dgamma_s && c < Cs; c++) dgamma_s[c] += (mf_real)acc_g[c];
  for (int c = 0; db_gamma && c < Ca; c++) db_gamma[c] += (mf_real)acc_b[c];
  mf_free(acc_b);
  mf_free(acc_g);
  mf_free(pg);
  mf_free(dsh);
  mf_free(dah);
  mf_free(g);
  mf_free(sh);
  mf_free(ah);
}

void mf_adaln_gate_forward(mf_real *out, const mf_real *x, const mf_real *s,
                           const mf_real *weight, const mf_real *bias, int64_t M, int C, int Cs) {
  MF_ASSERT(M >= 0 && C > 0 && Cs > 0, "adaln_gate dims M=%lld C=%d Cs=%d", (long long)M, C, Cs);
  MF_ASSERT(weight, "adaln_gate: weight required");
  if (M == 0) return;
  int64_t chunk = M < MF_ADALN_CHUNK ? M : MF_ADALN_CHUNK;
  mf_real *g = scratch(chunk * C, "adaln_gate logits"); /* (chunk, C) */
  for (int64_t r0 = 0; r0 < M; r0 += chunk) {
    int64_t rows = M - r0 < chunk ? M - r0 : chunk;
    mf_linear_forward(g, s + r0 * Cs, weight, bias, rows, Cs, C);
    for (int64_t i = 0; i < rows * C; i++)
      out[r0 * C + i] = (mf_real)(mf_sigmoid(g[i]) * x[r0 * C + i]);
  }
  mf_free(g);
}

void mf_adaln_gate_backward(mf_real *dx, mf_real *ds, mf_real *dweight, mf_real *dbias,
                            const mf_real *dout, const mf_real *x, const mf_real *s,
                            const mf_real *weight, const mf_real *bias, int64_t M, int C,
                            int Cs) {
  MF_ASSERT(M >= 0 && C > 0 && Cs > 0, "adaln_gate dims M=%lld C=%d Cs=%d", (long long)M, C, Cs);
  MF_ASSERT(weight, "adaln_gate: weight required");
  if (M == 0 || (!dx && !ds && !dweight && !dbias)) return;
  int64_t chunk = M < MF_ADALN_CHUNK ? M : MF_ADALN_CHUNK;
  mf_real *g = scratch(chunk * C, "adaln_gate logits");             /* (chunk, C): g, then dg */
  double *acc_b = dbias ? dscratch(C, "adaln_gate dbias sum") : NULL; /* (C) */
  for (int64_t r0 = 0; r0 < M; r0 += chunk) {
    int64_t rows = M - r0 < chunk ? M - r0 : chunk;
    const mf_real *sm = s + r0 * Cs;
    mf_linear_forward(g, sm, weight, bias, rows, Cs, C);
    /* out = σ(g) ⊙ x  ⇒  dx = dout ⊙ σ, dg = dout ⊙ x ⊙ σ(1 − σ) */
    for (int64_t m = 0; m < rows; m++)
      for (int c = 0; c < C; c++) {
        int64_t i = m * C + c, j = r0 * C + i;
        double sg = mf_sigmoid(g[i]), dy = dout[j], dg = dy * x[j] * sg * (1.0 - sg);
        if (dx) dx[j] = (mf_real)(dy * sg);
        g[i] = (mf_real)dg;
        if (acc_b) acc_b[c] += dg;
      }
    /* g = s·Wᵀ + b  ⇒  ds = dg·W, dweight += dgᵀ·s */
    mf_linear_backward(ds ? ds + r0 * Cs : NULL, dweight, NULL, g, sm, weight, rows, Cs, C);
  }
  for (int c = 0; dbias && c < C; c++) dbias[c] += (mf_real)acc_b[c];
  mf_free(acc_b);
  mf_free(g);
}
