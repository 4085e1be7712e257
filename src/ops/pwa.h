/* pwa.h — MSA pair-weighted averaging of the MSA module (AF3 SI Alg 10,
 * docs/af3-spec.md §6.3), forward and backward, as one op. It returns the MSA update Δm
 * only; the caller applies the row dropout and adds it to m. CPU reference in
 * src/ops/cpu/pwa.c, built from mf_layernorm_*, mf_linear_* and mf_gemm.
 *
 *   x        = LN_m(m)                              full LN over Cm, (S, N, Cm)
 *   v        = x·W_vᵀ                               (S, N, H·Ch), head h = channels h·Ch..
 *   b[i,j,h] = (LN_z(z)·W_bᵀ)[i,j,h]                full LN over Cz, (N, N, H)
 *   w_ij^h   = softmax over j of b_ij^h, token-masked j excluded exactly (weight 0)
 *   g        = sigmoid(x·W_gᵀ)                      (S, N, H·Ch)
 *   o_si^h   = g_si^h ⊙ Σ_j w_ij^h v_sj^h
 *   Δm       = concat_h(o)·W_oᵀ                     (S, N, Cm)
 * No biases. There are no queries or keys: the weights come from z alone and are shared
 * by all S rows. tmask (N) uint8, 1 = valid token, or NULL. A query row i whose keys are
 * all masked gets w = 0, hence o = 0 (no NaN).
 *
 * Gradient contract: dm and dz ASSIGN; every parameter gradient ACCUMULATES (+=). A NULL
 * field of the gradient struct (or a NULL struct, or dm / dz = NULL) skips that gradient.
 * The gradient w.r.t. w is summed over all S rows before it goes through the softmax. */
#ifndef MF_OPS_PWA_H
#define MF_OPS_PWA_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int S, N; /* MSA rows, tokens */
  int Cm;   /* MSA channels (64) */
  int Cz;   /* pair channels (128) */
  int H;    /* heads (8) */
  int Ch;   /* channels per head (8) */
} mf_pwa_dims;

/* Parameters (PyTorch (out, in) layout). The same struct type holds their gradients. */
typedef struct {
  mf_real *ln_m_g; /* (Cm)        LN_m scale γ */
  mf_real *ln_m_b; /* (Cm)        LN_m offset β */
  mf_real *ln_z_g; /* (Cz)        LN_z scale γ */
  mf_real *ln_z_b; /* (Cz)        LN_z offset β */
  mf_real *w_v;    /* (H·Ch, Cm)  values */
  mf_real *w_b;    /* (H, Cz)     pair → per-head logits */
  mf_real *w_g;    /* (H·Ch, Cm)  gate */
  mf_real *w_o;    /* (Cm, H·Ch)  output projection */
} mf_pwa_weights;

/* Points the fields of w at consecutive slices of `flat`, in struct order; returns the
 * number of parameters. flat = NULL sets every field to NULL and only counts. */
int64_t mf_pwa_weights_bind(mf_pwa_weights *w, mf_real *flat, mf_pwa_dims d);

/* Number of mf_real elements of the `saved` workspace, 2·S·N + 2·N² + 3·S·N·H·Ch + H·N²,
 * laid out as: LN_m mean, rstd (S·N each); LN_z mean, rstd (N·N each); v (S, N, H·Ch);
 * g (S, N, H·Ch) after the sigmoid; w (H, N, N) with w[h][i][j] = w_ij^h; the weighted
 * sum Σ_j w_ij^h v_sj^h (S, N, H·Ch), before the gate. */
size_t mf_pwa_saved_size(mf_pwa_dims d);

/* out (S, N, Cm) = Δm; saved (mf_pwa_saved_size(d)) is filled for the backward;
 * m (S, N, Cm); z (N, N, Cz); tmask (N) or NULL. */
void mf_pwa_forward(mf_real *out, mf_real *saved, const mf_real *m, const mf_real *z,
                    const uint8_t *tmask, const mf_pwa_weights *w, mf_pwa_dims d);

/* dm (S, N, Cm), dz (N, N, Cz): input gradients (ASSIGN, each may be NULL); grads:
 * parameter gradients (ACCUMULATE, may be NULL); dout (S, N, Cm) = dL/dΔm; saved from
 * the forward of the same m, z, tmask and w. */
void mf_pwa_backward(mf_real *dm, mf_real *dz, const mf_pwa_weights *grads, const mf_real *dout,
                     const mf_real *saved, const mf_real *m, const mf_real *z,
                     const uint8_t *tmask, const mf_pwa_weights *w, mf_pwa_dims d);

#ifdef __cplusplus
}
#endif

#endif
