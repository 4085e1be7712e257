/* triatt.h — triangle attention of the Pairformer (AF3 SI Alg 14 starting node / Alg 15
 * ending node, docs/af3-spec.md §6.4.2), forward and backward, as one whole-module op over
 * the pair tensor. It computes the update Δz only; the caller adds the residual (and any
 * row/column dropout). The attention core is mf_attention_* (src/ops/attention.h) with
 * B = 1, R = N rows, Q = K = N; this module adds the LayerNorm, the projections, the
 * shared bias and the output projection. CPU reference in src/ops/cpu/triatt.c.
 *
 * Starting node (row-wise: row i attends along the second index):
 *   x = LN(z)                                        full LN over C
 *   q_ij, k_ij, v_ij, g_ij = x_ij·W_{q,k,v,g}ᵀ        (H, D) each, no bias
 *   b_jk^h = (x_jk·W_bᵀ)^h                           the same for every row i
 *   logit_ijk^h = q_ij^h·k_ik^h / sqrt(D) + b_jk^h   over the keys k with pm_ik = 1
 *   o_ij^h = Σ_k softmax_k(logit_ijk^h) v_ik^h
 *   Δz_ij = (sigmoid(g_ij) ⊙ concat_h o_ij^h)·W_oᵀ
 * Ending node (column-wise): logit_ijk^h = q_ij·k_kj/sqrt(D) + b_ki^h with key mask pm_kj,
 * o_ij = Σ_k A v_kj; computed as transpose(starting node on transpose(z), transpose(pm))
 * with the ending node's own weights.
 *
 * Masked keys get exactly zero weight (the attention op excludes them rather than adding
 * −1e9); a row with no valid key (a padded token's row) gives Δz = 0 there, not NaN.
 * pm is the pair mask m_i·m_j (N, N), uint8 1 = valid, or NULL (all valid).
 *
 * Gradient contract: dz ASSIGNS; every parameter gradient ACCUMULATES (+=). A NULL field
 * of the gradient struct (or a NULL struct) skips that gradient. */
#ifndef MF_OPS_TRIATT_H
#define MF_OPS_TRIATT_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The parameters of one triangle attention (weights in PyTorch (out, in) layout; the
 * H·D axis is head-major: row h·D + d is head h, channel d). The same struct type holds
 * their gradients. */
typedef struct {
  mf_real *ln_g; /* (C)        LN scale γ */
  mf_real *ln_b; /* (C)        LN offset β */
  mf_real *w_q;  /* (H·D, C)   queries */
  mf_real *w_k;  /* (H·D, C)   keys */
  mf_real *w_v;  /* (H·D, C)   values */
  mf_real *w_b;  /* (H, C)     pair bias */
  mf_real *w_g;  /* (H·D, C)   output gate (sigmoid) */
  mf_real *w_o;  /* (C, H·D)   output projection */
} mf_triatt_weights;

/* Points the fields of w at consecutive slices of one flat buffer `flat`, in the order
 * of the struct, and returns the number of parameters (82,688 at C = 128, H = 4, D = 32).
 * With flat = NULL every field is set to NULL and only the count is returned. */
int64_t mf_triatt_weights_bind(mf_triatt_weights *w, mf_real *flat, int C, int H, int D);

/* Number of mf_real elements of the `saved` workspace for N tokens:
 * N²·(C + 2 + 5·H·D + 2·H). */
size_t mf_triatt_saved_size(int N, int C, int H, int D);

/* out (N, N, C) = Δz; saved (mf_triatt_saved_size(N, C, H, D)) is filled for the backward;
 * z (N, N, C); pm (N, N) or NULL; starting = 1 (Alg 14) or 0 (ending node, Alg 15). */
void mf_triatt_forward(mf_real *out, mf_real *saved, const mf_real *z, const uint8_t *pm,
                       const mf_triatt_weights *w, int N, int C, int H, int D, int starting);

/* dz (N, N, C) = dL/dz (ASSIGN); grads: parameter gradients (ACCUMULATE, may be NULL);
 * dout (N, N, C) = dL/dΔz; saved from the forward of the same z, pm, w and flag. */
void mf_triatt_backward(mf_real *dz, const mf_triatt_weights *grads, const mf_real *dout,
                        const mf_real *saved, const mf_real *z, const uint8_t *pm,
                        const mf_triatt_weights *w, int N, int C, int H, int D, int starting);

#ifdef __cplusplus
}
#endif

#endif
