/* opm.c — CPU reference of the OuterProductMean (docs/af3-spec.md §6.3), chunked over i,
 * composed from mf_layernorm_*, mf_linear_* and mf_gemm. See opm.h. Not the CUDA path. */
#include "ops/opm.h"
#include "ops/cpu/cpu_math.h"

#include <string.h>

#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/linear.h"
#include "ops/ln_linear.h"

static void opm_check(mf_opm_dims d) {
  MF_ASSERT(d.S > 0 && d.N > 0 && d.Cm > 0 && d.Ch > 0 && d.Cz > 0 && d.chunk >= 0,
            "opm dims S=%d N=%d Cm=%d Ch=%d Cz=%d chunk=%d", d.S, d.N, d.Cm, d.Ch, d.Cz, d.chunk);
}

static mf_real *scratch(size_t n, const char *what) {
  return mf_xmalloc((n ? n : 1) * sizeof(mf_real), what);
}

/* Rows i (forward, backward pass 1) or columns j (backward pass 2) per chunk. */
static int opm_chunk(mf_opm_dims d) {
  if (d.chunk > 0) return d.chunk < d.N ? d.chunk : d.N;
  int64_t per = (int64_t)d.N * (2 * (int64_t)d.Ch * d.Ch + d.Cz);
  int64_t r = MF_OPM_CHUNK_ELEMS / per;
  if (r < 1) r = 1;
  return r < d.N ? (int)r : d.N;
}

/* inv (N, N): inv_ij = 1 / (eps + Σ_s mask_si·mask_sj), computed once per call (mask NULL:
 * every count is S). The counts are small integers, exact in double. Caller frees. */
static double *opm_inv_counts(const uint8_t *mask, int S, int N) {
  int64_t NN = (int64_t)N * N;
  double *inv = mf_xmalloc((size_t)NN * sizeof(double), "opm counts");
  if (!mask) {
    for (int64_t k = 0; k < NN; k++) inv[k] = 1.0 / (MF_OPM_EPS + S);
    return inv;
  }
  for (int64_t k = 0; k < NN; k++) inv[k] = 0;
  for (int s = 0; s < S; s++) {
    const uint8_t *ms = mask + (int64_t)s * N;
    for (int i = 0; i < N; i++) {
      if (!ms[i]) continue;
      double *row = inv + (int64_t)i * N;
      for (int j = 0; j < N; j++) row[j] += ms[j] != 0;
    }
  }
  for (int64_t k = 0; k < NN; k++) inv[k] = 1.0 / (MF_OPM_EPS + inv[k]);
  return inv;
}

int64_t mf_opm_weights_bind(mf_opm_weights *w, mf_real *flat, mf_opm_dims d) {
  opm_check(d);
  int64_t sizes[6] = {d.Cm, d.Cm, (int64_t)d.Ch * d.Cm, (int64_t)d.Ch * d.Cm,
                      (int64_t)d.Cz * d.Ch * d.Ch, d.Cz};
  mf_real **f[6] = {&w->ln_g, &w->ln_b, &w->w_a, &w->w_b, &w->w_o, &w->b_o};
  return mf_bind_fields(f, sizes, 6, flat);
}

size_t mf_opm_saved_size(mf_opm_dims d) {
  opm_check(d);
  size_t sn = (size_t)d.S * (size_t)d.N;
  return 2 * sn + 2 * sn * (size_t)d.Ch;
}

/* O (ri·Ch, N·Ch) = A[:, rows i0..i0+ri)ᵀ · B, then F (ri, N, Ch·Ch) = its (i, j, c, e)
 * permutation: F[(ii·N + j)·Ch² + c·Ch + e] = O[(ii·Ch + c)·N·Ch + j·Ch + e]. */
static void opm_outer(mf_real *F, mf_real *O, const mf_real *A, const mf_real *B, int i0, int ri,
                      mf_opm_dims d) {
  int64_t NC = (int64_t)d.N * d.Ch, C2 = (int64_t)d.Ch * d.Ch;
  mf_gemm(1, 0, (int64_t)ri * d.Ch, NC, d.S, 1.0, A + (int64_t)i0 * d.Ch, NC, B, NC, 0.0, O, NC);
  for (int ii = 0; ii < ri; ii++)
    for (int c = 0; c < d.Ch; c++)
      for (int j = 0; j < d.N; j++)
        memcpy(F + ((int64_t)ii * d.N + j) * C2 + (int64_t)c * d.Ch,
               O + ((int64_t)ii * d.Ch + c) * NC + (int64_t)j * d.Ch, (size_t)d.Ch * sizeof(mf_real));
}

void mf_opm_forward(mf_real *out, mf_real *saved, const mf_real *m, const uint8_t *mask,
                    const mf_opm_weights *w, mf_opm_dims d) {
  opm_check(d);
  MF_ASSERT(out && saved && m && w && w->ln_g && w->ln_b && w->w_a && w->w_b && w->w_o && w->b_o,
            "opm_forward: NULL argument");
  int64_t SN = (int64_t)d.S * d.N, NC = (int64_t)d.N * d.Ch, C2 = (int64_t)d.Ch * d.Ch;
  mf_real *mean = saved, *rstd = saved + SN, *A = saved + 2 * SN, *B = A + SN * d.Ch;

  mf_real *x = scratch((size_t)(SN * d.Cm), "opm x");
  mf_layernorm_forward(x, mean, rstd, m, w->ln_g, w->ln_b, SN, d.Cm, MF_LN_FULL);
  mf_linear_forward(A, x, w->w_a, NULL, SN, d.Cm, d.Ch);
  mf_linear_forward(B, x, w->w_b, NULL, SN, d.Cm, d.Ch);
  mf_free(x);
  if (mask)
    for (int64_t sn = 0; sn < SN; sn++)
      if (!mask[sn]) {
        memset(A + sn * d.Ch, 0, (size_t)d.Ch * sizeof(mf_real));
        memset(B + sn * d.Ch, 0, (size_t)d.Ch * sizeof(mf_real));
      }

  int r = opm_chunk(d);
  double *invc = opm_inv_counts(mask, d.S, d.N);
  mf_real *O = scratch((size_t)((int64_t)r * d.Ch * NC), "opm O");
  mf_real *F = scratch((size_t)((int64_t)r * d.N * C2), "opm F");
  for (int i0 = 0; i0 < d.N; i0 += r) {
    int ri = i0 + r <= d.N ? r : d.N - i0;
    opm_outer(F, O, A, B, i0, ri, d);
    mf_real *o = out + (int64_t)i0 * d.N * d.Cz;
    mf_linear_forward(o, F, w->w_o, w->b_o, (int64_t)ri * d.N, (int)C2, d.Cz);
    for (int ii = 0; ii < ri; ii++)
      for (int j = 0; j < d.N; j++) {
        double inv = invc[(int64_t)(i0 + ii) * d.N + j];
        mf_real *oj = o + ((int64_t)ii * d.N + j) * d.Cz;
        for (int c = 0; c < d.Cz; c++) oj[c] = (mf_real)(oj[c] * inv);
      }
  }
  mf_free(invc);
  mf_free(O);
  mf_free(F);
}

void mf_opm_backward(mf_real *dm, const mf_opm_weights *grads, const mf_real *dout,
                     const mf_real *saved, const mf_real *m, const uint8_t *mask,
                     const mf_opm_weights *w, mf_opm_dims d) {
  opm_check(d);
  MF_ASSERT(dout && saved && m && w && w->ln_g && w->ln_b && w->w_a && w->w_b && w->w_o,
            "opm_backward: NULL argument");
  mf_opm_weights none = {0};
  const mf_opm_weights *g = grads ? grads : &none;
  int64_t SN = (int64_t)d.S * d.N, NC = (int64_t)d.N * d.Ch, C2 = (int64_t)d.Ch * d.Ch;
  const mf_real *mean = saved, *rstd = saved + SN, *A = saved + 2 * SN, *B = A + SN * d.Ch;
  int need_ab = dm || g->ln_g || g->ln_b || g->w_a || g->w_b;
  int r = opm_chunk(d);

  mf_real *dA = need_ab ? scratch((size_t)(SN * d.Ch), "opm dA") : NULL;
  mf_real *dB = need_ab ? scratch((size_t)(SN * d.Ch), "opm dB") : NULL;
  mf_real *dY = scratch((size_t)((int64_t)r * d.N * d.Cz), "opm dY");
  mf_real *F = scratch((size_t)((int64_t)r * d.N * C2), "opm F");
  mf_real *G = scratch((size_t)((int64_t)r * d.N * C2), "opm G");
  double *invc = opm_inv_counts(mask, d.S, d.N);

  /* Pass 1, rows i: dY_ij = dout_ij / count_ij; dW_o += dYᵀ·F, db_o += Σ dY;
   * dF = dY·W_o, permuted to G (ri·Ch, N·Ch); dA[:, i-chunk] = B · Gᵀ. */
  for (int i0 = 0; i0 < d.N; i0 += r) {
    int ri = i0 + r <= d.N ? r : d.N - i0;
    for (int ii = 0; ii < ri; ii++)
      for (int j = 0; j < d.N; j++) {
        double inv = invc[(int64_t)(i0 + ii) * d.N + j];
        const mf_real *src = dout + ((int64_t)(i0 + ii) * d.N + j) * d.Cz;
        mf_real *dst = dY + ((int64_t)ii * d.N + j) * d.Cz;
        for (int c = 0; c < d.Cz; c++) dst[c] = (mf_real)(src[c] * inv);
      }
    if (g->w_o) opm_outer(F, G, A, B, i0, ri, d); /* F = flatten(O); G is its scratch */
    mf_linear_backward(need_ab ? G : NULL, g->w_o, g->b_o, dY, F, w->w_o, (int64_t)ri * d.N,
                       (int)C2, d.Cz);
    if (!need_ab) continue;
    /* G (ri, N, Ch, Ch) → F laid out (ri·Ch, N·Ch) */
    for (int ii = 0; ii < ri; ii++)
      for (int c = 0; c < d.Ch; c++)
        for (int j = 0; j < d.N; j++)
          memcpy(F + ((int64_t)ii * d.Ch + c) * NC + (int64_t)j * d.Ch,
                 G + ((int64_t)ii * d.N + j) * C2 + (int64_t)c * d.Ch, (size_t)d.Ch * sizeof(mf_real));
    mf_gemm(0, 1, d.S, (int64_t)ri * d.Ch, NC, 1.0, B, NC, F, NC, 0.0, dA + (int64_t)i0 * d.Ch, NC);
  }

  /* Pass 2, columns j: dF'(i, jj) = dY_ij·W_o over all i, permuted to G' (N·Ch, rj·Ch);
   * dB[:, j-chunk] = A · G'. Each element of dB is one product (no cross-chunk sums). */
  for (int j0 = 0; need_ab && j0 < d.N; j0 += r) {
    int rj = j0 + r <= d.N ? r : d.N - j0;
    for (int i = 0; i < d.N; i++)
      for (int jj = 0; jj < rj; jj++) {
        double inv = invc[(int64_t)i * d.N + j0 + jj];
        const mf_real *src = dout + ((int64_t)i * d.N + j0 + jj) * d.Cz;
        mf_real *dst = dY + ((int64_t)i * rj + jj) * d.Cz;
        for (int c = 0; c < d.Cz; c++) dst[c] = (mf_real)(src[c] * inv);
      }
    /* dY here is (N·rj, Cz): it fits, since N·rj <= N·r rows. */
    mf_linear_backward(F, NULL, NULL, dY, NULL, w->w_o, (int64_t)d.N * rj, (int)C2, d.Cz);
    int64_t RC = (int64_t)rj * d.Ch;
    for (int i = 0; i < d.N; i++)
      for (int c = 0; c < d.Ch; c++)
        for (int jj = 0; jj < rj; jj++)
          memcpy(G + ((int64_t)i * d.Ch + c) * RC + (int64_t)jj * d.Ch,
                 F + ((int64_t)i * rj + jj) * C2 + (int64_t)c * d.Ch, (size_t)d.Ch * sizeof(mf_real));
    mf_gemm(0, 0, d.S, RC, NC, 1.0, A, NC, G, RC, 0.0, dB + (int64_t)j0 * d.Ch, NC);
  }
  mf_free(dY);
  mf_free(F);
  mf_free(G);
  mf_free(invc);
  if (!need_ab) return;

  /* Through the mask, the projections and the LayerNorm. */
  if (mask)
    for (int64_t sn = 0; sn < SN; sn++)
      if (!mask[sn]) {
        memset(dA + sn * d.Ch, 0, (size_t)d.Ch * sizeof(mf_real));
        memset(dB + sn * d.Ch, 0, (size_t)d.Ch * sizeof(mf_real));
      }
  mf_real *x = scratch((size_t)(SN * d.Cm), "opm x");
  mf_ln_linear_normalize(x, mean, rstd, m, w->ln_g, w->ln_b, SN, d.Cm, MF_LN_FULL);
  mf_real *dx = scratch((size_t)(SN * d.Cm), "opm dx");
  mf_linear_backward(dx, g->w_a, NULL, dA, x, w->w_a, SN, d.Cm, d.Ch);
  mf_linear_backward(NULL, g->w_b, NULL, dB, x, w->w_b, SN, d.Cm, d.Ch);
  mf_gemm(0, 0, SN, d.Cm, d.Ch, 1.0, dB, d.Ch, w->w_b, d.Cm, 1.0, dx, d.Cm);
  if (dm || g->ln_g || g->ln_b)
    mf_layernorm_backward(dm, g->ln_g, g->ln_b, dx, mean, rstd, m, w->ln_g, SN, d.Cm, MF_LN_FULL);
  mf_free(x);
  mf_free(dx);
  mf_free(dA);
  mf_free(dB);
}
