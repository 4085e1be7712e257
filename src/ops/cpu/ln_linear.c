/* ln_linear.c — CPU reference of LayerNorm + linear, built from mf_layernorm_* and
 * mf_linear_*, with the normalised input recomputed in row chunks instead of stored.
 * Not the fused CUDA kernel. See ln_linear.h. */
#include "ops/ln_linear.h"
#include "ops/cpu/cpu_math.h"

#include <string.h>

#include "ops/linear.h"

static mf_real *scratch(int64_t n, const char *what) {
  return mf_xmalloc((size_t)n * sizeof(mf_real), what);
}

static void check_args(int64_t M, int C, int O, mf_ln_mode mode, const mf_real *gamma,
                       const mf_real *beta) {
  MF_ASSERT(M >= 0 && C > 0 && O > 0, "ln_linear dims M=%lld C=%d O=%d", (long long)M, C, O);
  MF_ASSERT(mode == MF_LN_FULL || mode == MF_LN_SCALE || mode == MF_LN_NONE,
            "ln_linear: mode %d is not FULL, SCALE or NONE", (int)mode);
  MF_ASSERT(mode == MF_LN_NONE || gamma, "ln_linear: gamma required");
  MF_ASSERT(mode != MF_LN_FULL || beta, "ln_linear: beta required");
}

void mf_ln_linear_normalize(mf_real *y, const mf_real *mean, const mf_real *rstd,
                            const mf_real *inp, const mf_real *gamma, const mf_real *beta,
                            int64_t M, int C, mf_ln_mode mode) {
  MF_ASSERT(M >= 0 && C > 0, "ln_linear_normalize dims M=%lld C=%d", (long long)M, C);
  if (mode == MF_LN_IDENTITY) {
    if (y != inp && M > 0) memcpy(y, inp, (size_t)M * (size_t)C * sizeof(mf_real));
    return;
  }
  MF_ASSERT(mode == MF_LN_FULL || mode == MF_LN_SCALE || mode == MF_LN_NONE,
            "ln_linear_normalize: bad mode %d", (int)mode);
  MF_ASSERT(mode == MF_LN_NONE || gamma, "ln_linear_normalize: gamma required");
  MF_ASSERT(mode != MF_LN_FULL || beta, "ln_linear_normalize: beta required");
  for (int64_t m = 0; m < M; m++) {
    const mf_real *x = inp + m * C;
    mf_real *ym = y + m * C;
    double mu = mean[m], r = rstd[m];
    for (int c = 0; c < C; c++) {
      double v = (x[c] - mu) * r;
      if (mode != MF_LN_NONE) v *= gamma[c];
      if (mode == MF_LN_FULL) v += beta[c];
      ym[c] = (mf_real)v;
    }
  }
}

void mf_ln_linear_forward(mf_real *out, mf_real *mean, mf_real *rstd, const mf_real *inp,
                          const mf_real *gamma, const mf_real *beta, const mf_real *weight,
                          const mf_real *bias, int64_t M, int C, int O, mf_ln_mode mode) {
  check_args(M, C, O, mode, gamma, beta);
  if (M == 0) return;
  int64_t chunk = M < MF_LN_LINEAR_CHUNK ? M : MF_LN_LINEAR_CHUNK;
  mf_real *y = scratch(chunk * C, "ln_linear y chunk"); /* (chunk, C) */
  for (int64_t r0 = 0; r0 < M; r0 += chunk) {
    int64_t rows = M - r0 < chunk ? M - r0 : chunk;
    mf_layernorm_forward(y, mean + r0, rstd + r0, inp + r0 * C, gamma, beta, rows, C, mode);
    mf_linear_forward(out + r0 * O, y, weight, bias, rows, C, O);
  }
  mf_free(y);
}

void mf_ln_linear_backward(mf_real *dinp, mf_real *dgamma, mf_real *dbeta, mf_real *dweight,
                           mf_real *dbias, const mf_real *dout, const mf_real *mean,
                           const mf_real *rstd, const mf_real *inp, const mf_real *gamma,
                           const mf_real *beta, const mf_real *weight, int64_t M, int C, int O,
                           mf_ln_mode mode) {
  check_args(M, C, O, mode, gamma, beta);
  if (M == 0) return;
  /* dbias (O) += Σ_m dout: one pass over dout, summed in double by mf_linear_backward */
  if (dbias) mf_linear_backward(NULL, NULL, dbias, dout, inp, weight, M, C, O);
  if (mode == MF_LN_NONE) dgamma = NULL;
  if (mode != MF_LN_FULL) dbeta = NULL;
  int need_dy = dinp || dgamma || dbeta;
  if (!need_dy && !dweight) return;

  int64_t chunk = M < MF_LN_LINEAR_CHUNK ? M : MF_LN_LINEAR_CHUNK;
  mf_real *y = dweight ? scratch(chunk * C, "ln_linear y chunk") : NULL;    /* (chunk, C) */
  mf_real *dy = need_dy ? scratch(chunk * C, "ln_linear dy chunk") : NULL;  /* (chunk, C) */
  /* dgamma/dbeta: per-chunk partials (mf_real) summed across chunks in double */
  mf_ln_chunk_grads lg;
  mf_ln_chunk_grads_init(&lg, dgamma != NULL, dbeta != NULL, C, "ln_linear");

  for (int64_t r0 = 0; r0 < M; r0 += chunk) {
    int64_t rows = M - r0 < chunk ? M - r0 : chunk;
    /* forward: out = y·Wᵀ + b, y = LN(inp) ⇒ dy = dout·W, dweight += doutᵀ·y */
    if (y) mf_ln_linear_normalize(y, mean + r0, rstd + r0, inp + r0 * C, gamma, beta, rows, C, mode);
    mf_linear_backward(dy, dweight, NULL, dout + r0 * O, y, weight, rows, C, O);
    if (!need_dy) continue;
    mf_ln_chunk_grads_backward(&lg, dinp ? dinp + r0 * C : NULL, dy, mean + r0, rstd + r0,
                               inp + r0 * C, gamma, rows, C, mode);
  }
  mf_ln_chunk_grads_finish(&lg, dgamma, dbeta, C);
  mf_free(dy);
  mf_free(y);
}
