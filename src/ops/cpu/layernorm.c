/* layernorm.c — CPU reference LayerNorm (full / scale-only / no-affine), statistics in
 * double. See layernorm.h. */
#include "ops/layernorm.h"

#include <math.h>

void mf_layernorm_forward(mf_real *out, mf_real *mean, mf_real *rstd, const mf_real *inp,
                          const mf_real *gamma, const mf_real *beta, int64_t M, int C,
                          mf_ln_mode mode) {
  MF_ASSERT(C > 0 && M >= 0, "layernorm dims M=%lld C=%d", (long long)M, C);
  MF_ASSERT(mode != MF_LN_IDENTITY, "MF_LN_IDENTITY is not a LayerNorm");
  MF_ASSERT(mode == MF_LN_NONE || gamma, "layernorm: gamma required");
  MF_ASSERT(mode != MF_LN_FULL || beta, "layernorm: beta required");
  for (int64_t m = 0; m < M; m++) {
    const mf_real *x = inp + m * C;
    double s = 0, s2 = 0;
    for (int c = 0; c < C; c++) s += x[c];
    double mu = s / C;
    for (int c = 0; c < C; c++) s2 += (x[c] - mu) * (x[c] - mu);
    double r = 1.0 / sqrt(s2 / C + MF_LN_EPS);
    mean[m] = (mf_real)mu;
    rstd[m] = (mf_real)r;
    mf_real *y = out + m * C;
    for (int c = 0; c < C; c++) {
      double xh = (x[c] - mu) * r;
      if (mode != MF_LN_NONE) xh *= gamma[c];
      if (mode == MF_LN_FULL) xh += beta[c];
      y[c] = (mf_real)xh;
    }
  }
}

void mf_layernorm_backward(mf_real *dinp, mf_real *dgamma, mf_real *dbeta, const mf_real *dout,
                           const mf_real *mean, const mf_real *rstd, const mf_real *inp,
                           const mf_real *gamma, int64_t M, int C, mf_ln_mode mode) {
  MF_ASSERT(C > 0 && M >= 0, "layernorm dims M=%lld C=%d", (long long)M, C);
  MF_ASSERT(mode != MF_LN_IDENTITY, "MF_LN_IDENTITY is not a LayerNorm");
  double *dg = NULL, *db = NULL;
  if (dgamma && mode != MF_LN_NONE) dg = mf_xcalloc((size_t)C * sizeof *dg, "ln dgamma");
  if (dbeta && mode == MF_LN_FULL) db = mf_xcalloc((size_t)C * sizeof *db, "ln dbeta");
  for (int64_t m = 0; m < M; m++) {
    const mf_real *x = inp + m * C, *dy = dout + m * C;
    double mu = mean[m], r = rstd[m];
    double sg = 0, sgx = 0;
    for (int c = 0; c < C; c++) {
      double xh = (x[c] - mu) * r, g = mode == MF_LN_NONE ? dy[c] : dy[c] * gamma[c];
      sg += g;
      sgx += g * xh;
      if (dg) dg[c] += dy[c] * xh;
      if (db) db[c] += dy[c];
    }
    sg /= C;
    sgx /= C;
    if (dinp)
      for (int c = 0; c < C; c++) {
        double xh = (x[c] - mu) * r, g = mode == MF_LN_NONE ? dy[c] : dy[c] * gamma[c];
        dinp[m * C + c] = (mf_real)(r * (g - sg - xh * sgx));
      }
  }
  for (int c = 0; dg && c < C; c++) dgamma[c] += (mf_real)dg[c];
  for (int c = 0; db && c < C; c++) dbeta[c] += (mf_real)db[c];
  mf_free(dg);
  mf_free(db);
}
