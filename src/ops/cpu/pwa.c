/* pwa.c — CPU reference of MSA pair-weighted averaging (docs/af3-spec.md §6.3), composed
 * from mf_layernorm_*, mf_linear_* and mf_gemm. See pwa.h. Not the CUDA path. */
#include "ops/pwa.h"
#include "ops/cpu/cpu_math.h"

#include <math.h>
#include <string.h>

#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/linear.h"
#include "ops/ln_linear.h"

static void pwa_check(mf_pwa_dims d) {
  MF_ASSERT(d.S > 0 && d.N > 0 && d.Cm > 0 && d.Cz > 0 && d.H > 0 && d.Ch > 0,
            "pwa dims S=%d N=%d Cm=%d Cz=%d H=%d Ch=%d", d.S, d.N, d.Cm, d.Cz, d.H, d.Ch);
}

static mf_real *scratch(size_t n, const char *what) {
  return mf_xmalloc((n ? n : 1) * sizeof(mf_real), what);
}

int64_t mf_pwa_weights_bind(mf_pwa_weights *w, mf_real *flat, mf_pwa_dims d) {
  pwa_check(d);
  int64_t HC = (int64_t)d.H * d.Ch;
  int64_t sizes[8] = {d.Cm, d.Cm, d.Cz, d.Cz, HC * d.Cm, (int64_t)d.H * d.Cz, HC * d.Cm,
                      (int64_t)d.Cm * HC};
  mf_real **f[8] = {&w->ln_m_g, &w->ln_m_b, &w->ln_z_g, &w->ln_z_b,
                    &w->w_v,    &w->w_b,    &w->w_g,    &w->w_o};
  return mf_bind_fields(f, sizes, 8, flat);
}

size_t mf_pwa_saved_size(mf_pwa_dims d) {
  pwa_check(d);
  size_t SN = (size_t)d.S * (size_t)d.N, NN = (size_t)d.N * (size_t)d.N;
  size_t HC = (size_t)d.H * (size_t)d.Ch;
  return 2 * SN + 2 * NN + 3 * SN * HC + (size_t)d.H * NN;
}

typedef struct {
  mf_real *mean_m, *rstd_m, *mean_z, *rstd_z, *v, *g, *w, *ws;
} pwa_saved;

static pwa_saved pwa_saved_split(mf_real *s, mf_pwa_dims d) {
  int64_t SN = (int64_t)d.S * d.N, NN = (int64_t)d.N * d.N, SNHC = SN * d.H * d.Ch;
  pwa_saved p;
  p.mean_m = s;
  p.rstd_m = s + SN;
  p.mean_z = s + 2 * SN;
  p.rstd_z = p.mean_z + NN;
  p.v = p.rstd_z + NN;
  p.g = p.v + SNHC;
  p.w = p.g + SNHC;
  p.ws = p.w + (int64_t)d.H * NN;
  return p;
}

/* Head h of an (S, N, H·Ch) tensor ↔ an (N, S·Ch) matrix: T[j, s·Ch + c] = X[s, j, h·Ch + c]. */
static void head_gather(mf_real *T, const mf_real *X, int h, mf_pwa_dims d) {
  int64_t HC = (int64_t)d.H * d.Ch, SC = (int64_t)d.S * d.Ch;
  for (int s = 0; s < d.S; s++)
    for (int j = 0; j < d.N; j++)
      memcpy(T + j * SC + (int64_t)s * d.Ch, X + ((int64_t)s * d.N + j) * HC + (int64_t)h * d.Ch,
             (size_t)d.Ch * sizeof(mf_real));
}
static void head_scatter(mf_real *X, const mf_real *T, int h, mf_pwa_dims d) {
  int64_t HC = (int64_t)d.H * d.Ch, SC = (int64_t)d.S * d.Ch;
  for (int s = 0; s < d.S; s++)
    for (int j = 0; j < d.N; j++)
      memcpy(X + ((int64_t)s * d.N + j) * HC + (int64_t)h * d.Ch, T + j * SC + (int64_t)s * d.Ch,
             (size_t)d.Ch * sizeof(mf_real));
}

void mf_pwa_forward(mf_real *out, mf_real *saved, const mf_real *m, const mf_real *z,
                    const uint8_t *tmask, const mf_pwa_weights *w, mf_pwa_dims d) {
  pwa_check(d);
  MF_ASSERT(out && saved && m && z && w && w->ln_m_g && w->ln_m_b && w->ln_z_g && w->ln_z_b &&
                w->w_v && w->w_b && w->w_g && w->w_o,
            "pwa_forward: NULL argument");
  int64_t SN = (int64_t)d.S * d.N, NN = (int64_t)d.N * d.N, HC = (int64_t)d.H * d.Ch;
  int64_t SC = (int64_t)d.S * d.Ch;
  pwa_saved p = pwa_saved_split(saved, d);

  mf_real *x = scratch((size_t)(SN * d.Cm), "pwa x");
  mf_layernorm_forward(x, p.mean_m, p.rstd_m, m, w->ln_m_g, w->ln_m_b, SN, d.Cm, MF_LN_FULL);
  mf_linear_forward(p.v, x, w->w_v, NULL, SN, d.Cm, (int)HC);
  mf_linear_forward(p.g, x, w->w_g, NULL, SN, d.Cm, (int)HC);
  for (int64_t k = 0; k < SN * HC; k++) p.g[k] = (mf_real)(1.0 / (1.0 + exp(-(double)p.g[k])));
  mf_free(x);

  /* logits b (N·N, H), then the masked softmax over j into w (H, N, N) */
  mf_real *zl = scratch((size_t)(NN * d.Cz), "pwa LN(z)");
  mf_real *bl = scratch((size_t)(NN * d.H), "pwa logits");
  mf_layernorm_forward(zl, p.mean_z, p.rstd_z, z, w->ln_z_g, w->ln_z_b, NN, d.Cz, MF_LN_FULL);
  mf_linear_forward(bl, zl, w->w_b, NULL, NN, d.Cz, d.H);
  mf_free(zl);
  for (int h = 0; h < d.H; h++)
    for (int i = 0; i < d.N; i++) {
      const mf_real *bi = bl + (int64_t)i * d.N * d.H + h;
      mf_real *wi = p.w + ((int64_t)h * d.N + i) * d.N;
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j < d.N; j++)
        if ((!tmask || tmask[j]) && bi[(int64_t)j * d.H] > mx) mx = bi[(int64_t)j * d.H];
      for (int j = 0; j < d.N; j++)
        if (!tmask || tmask[j]) sum += exp(bi[(int64_t)j * d.H] - mx);
      for (int j = 0; j < d.N; j++)
        wi[j] = (!tmask || tmask[j]) ? (mf_real)(exp(bi[(int64_t)j * d.H] - mx) / sum) : 0;
    }
  mf_free(bl);

  /* weighted sum per head: (N, S·Ch) = w_h (N, N) · v_h (N, S·Ch) */
  mf_real *T = scratch((size_t)(d.N * SC), "pwa head");
  mf_real *U = scratch((size_t)(d.N * SC), "pwa head sum");
  for (int h = 0; h < d.H; h++) {
    head_gather(T, p.v, h, d);
    mf_gemm(0, 0, d.N, SC, d.N, 1.0, p.w + (int64_t)h * NN, d.N, T, SC, 0.0, U, SC);
    head_scatter(p.ws, U, h, d);
  }
  mf_free(T);
  mf_free(U);

  mf_real *o = scratch((size_t)(SN * HC), "pwa o");
  for (int64_t k = 0; k < SN * HC; k++) o[k] = (mf_real)((double)p.g[k] * p.ws[k]);
  mf_linear_forward(out, o, w->w_o, NULL, SN, (int)HC, d.Cm);
  mf_free(o);
}

void mf_pwa_backward(mf_real *dm, mf_real *dz, const mf_pwa_weights *grads, const mf_real *dout,
                     const mf_real *saved, const mf_real *m, const mf_real *z,
                     const uint8_t *tmask, const mf_pwa_weights *w, mf_pwa_dims d) {
  pwa_check(d);
  MF_ASSERT(dout && saved && m && z && w && w->ln_m_g && w->ln_z_g && w->ln_z_b && w->w_v &&
                w->w_b && w->w_g && w->w_o,
            "pwa_backward: NULL argument");
  (void)tmask; /* masked keys have w = 0 in `saved`, so their gradients vanish by themselves */
  mf_pwa_weights none = {0};
  const mf_pwa_weights *gr = grads ? grads : &none;
  int64_t SN = (int64_t)d.S * d.N, NN = (int64_t)d.N * d.N, HC = (int64_t)d.H * d.Ch;
  int64_t SC = (int64_t)d.S * d.Ch;
  pwa_saved p = pwa_saved_split((mf_real *)saved, d); /* read only below */

  /* Δm = o·W_oᵀ with o = g ⊙ ws */
  mf_real *o = scratch((size_t)(SN * HC), "pwa o");
  for (int64_t k = 0; k < SN * HC; k++) o[k] = (mf_real)((double)p.g[k] * p.ws[k]);
  mf_real *dO = scratch((size_t)(SN * HC), "pwa do");
  mf_linear_backward(dO, gr->w_o, NULL, dout, o, w->w_o, SN, (int)HC, d.Cm);
  /* o → gate pre-activation (into o) and weighted sum (into dO) */
  for (int64_t k = 0; k < SN * HC; k++) {
    double gk = p.g[k], dk = dO[k];
    o[k] = (mf_real)(dk * p.ws[k] * gk * (1.0 - gk));
    dO[k] = (mf_real)(dk * gk);
  }
  mf_real *dgp = o, *dws = dO;

  /* per head: dw_h (N, N) = dws_h (N, S·Ch) · v_hᵀ — the sum over all S rows at once —
   * and dv_h (N, S·Ch) = w_hᵀ · dws_h */
  mf_real *dv = scratch((size_t)(SN * HC), "pwa dv");
  mf_real *dw = scratch((size_t)NN, "pwa dw");
  mf_real *db = scratch((size_t)(NN * d.H), "pwa dlogits");
  mf_real *T = scratch((size_t)(d.N * SC), "pwa head");
  mf_real *V = scratch((size_t)(d.N * SC), "pwa head v");
  mf_real *U = scratch((size_t)(d.N * SC), "pwa head dv");
  for (int h = 0; h < d.H; h++) {
    const mf_real *wh = p.w + (int64_t)h * NN;
    head_gather(T, dws, h, d);
    head_gather(V, p.v, h, d);
    mf_gemm(0, 1, d.N, d.N, SC, 1.0, T, SC, V, SC, 0.0, dw, d.N);
    mf_gemm(1, 0, d.N, SC, d.N, 1.0, wh, d.N, T, SC, 0.0, U, SC);
    head_scatter(dv, U, h, d);
    /* softmax backward: db = w ⊙ (dw − Σ_j w·dw); masked j have w = 0 */
    for (int i = 0; i < d.N; i++) {
      const mf_real *wi = wh + (int64_t)i * d.N, *dwi = dw + (int64_t)i * d.N;
      double dot = 0;
      for (int j = 0; j < d.N; j++) dot += (double)wi[j] * dwi[j];
      for (int j = 0; j < d.N; j++)
        db[((int64_t)i * d.N + j) * d.H + h] = (mf_real)(wi[j] * (dwi[j] - dot));
    }
  }
  mf_free(T);
  mf_free(V);
  mf_free(U);
  mf_free(dw);
  mf_free(dO);

  /* pair side: LN_z → W_b */
  if (dz || gr->ln_z_g || gr->ln_z_b || gr->w_b) {
    mf_real *zl = scratch((size_t)(NN * d.Cz), "pwa LN(z)");
    mf_ln_linear_normalize(zl, p.mean_z, p.rstd_z, z, w->ln_z_g, w->ln_z_b, NN, d.Cz,
                           MF_LN_FULL);
    mf_real *dzl = scratch((size_t)(NN * d.Cz), "pwa dLN(z)");
    mf_linear_backward(dzl, gr->w_b, NULL, db, zl, w->w_b, NN, d.Cz, d.H);
    mf_layernorm_backward(dz, gr->ln_z_g, gr->ln_z_b, dzl, p.mean_z, p.rstd_z, z, w->ln_z_g, NN,
                          d.Cz, MF_LN_FULL);
    mf_free(zl);
    mf_free(dzl);
  }
  mf_free(db);

  /* MSA side: v and gate projections → LN_m */
  if (dm || gr->ln_m_g || gr->ln_m_b || gr->w_v || gr->w_g) {
    mf_real *x = scratch((size_t)(SN * d.Cm), "pwa x");
    mf_ln_linear_normalize(x, p.mean_m, p.rstd_m, m, w->ln_m_g, w->ln_m_b, SN, d.Cm, MF_LN_FULL);
    mf_real *dx = scratch((size_t)(SN * d.Cm), "pwa dx");
    mf_linear_backward(dx, gr->w_v, NULL, dv, x, w->w_v, SN, d.Cm, (int)HC);
    mf_linear_backward(NULL, gr->w_g, NULL, dgp, x, w->w_g, SN, d.Cm, (int)HC);
    mf_gemm(0, 0, SN, d.Cm, HC, 1.0, dgp, HC, w->w_g, d.Cm, 1.0, dx, d.Cm);
    mf_layernorm_backward(dm, gr->ln_m_g, gr->ln_m_b, dx, p.mean_m, p.rstd_m, m, w->ln_m_g, SN,
                          d.Cm, MF_LN_FULL);
    mf_free(x);
    mf_free(dx);
  }
  mf_free(dv);
  mf_free(o);
}
