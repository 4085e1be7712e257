/* adaln.h — adaptive LayerNorm (spec §4.3, SI Alg 26) and the adaLN-Zero output gate
 * (spec §4.4), the conditioning of the diffusion and atom transformers:
 *
 *   AdaLN(a, s):   â   = LN_noaffine(a)                 a (M, Ca)
 *                  ŝ   = LN_scaleonly(s; γ_s)           s (M, Cs)
 *                  out = sigmoid(ŝ·W_γᵀ + b_γ) ⊙ â + ŝ·W_βᵀ
 *   gate(x, s):    out = sigmoid(s·Wᵀ + b) ⊙ x         s raw (not normalised)
 *
 * Weights in PyTorch's (out, in) layout: W_γ, W_β (Ca, Cs); gate W (C, Cs). The AdaLN
 * forward keeps only the row statistics of a and s; the backward recomputes â, ŝ and the
 * pre-sigmoid logits in chunks of MF_ADALN_CHUNK rows. The gate keeps nothing and
 * recomputes its logits. CPU reference in src/ops/cpu/adaln.c; not the CUDA kernels.
 *
 * Gradient contract: da, ds, dx ASSIGN (a caller whose s fans in to several AdaLNs and
 * gates sums the results itself); dgamma_s, dw_gamma, db_gamma, dw_beta, dweight, dbias
 * ACCUMULATE (+=). Any gradient pointer may be NULL to skip it. */
#ifndef MF_OPS_ADALN_H
#define MF_OPS_ADALN_H

#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows processed at a time (scratch ~ CHUNK × (2Cs + 3Ca) values). */
#define MF_ADALN_CHUNK 64

/* out (M, Ca) = sigmoid(ŝ·w_gammaᵀ + b_gamma) ⊙ LN(a (M, Ca)) + ŝ·w_betaᵀ,
 * ŝ = gamma_s (Cs) ⊙ LN(s (M, Cs)).  w_gamma (Ca, Cs), b_gamma (Ca) [may be NULL],
 * w_beta (Ca, Cs). Saved: a_mean, a_rstd, s_mean, s_rstd (M). out must not overlap a. */
void mf_adaln_forward(mf_real *out, mf_real *a_mean, mf_real *a_rstd, mf_real *s_mean,
                      mf_real *s_rstd, const mf_real *a, const mf_real *s,
                      const mf_real *gamma_s, const mf_real *w_gamma, const mf_real *b_gamma,
                      const mf_real *w_beta, int64_t M, int Ca, int Cs);

/* With g = ŝ·W_γᵀ + b_γ, σ = sigmoid(g):
 *   dâ = dout ⊙ σ                        → da (M, Ca) by the no-affine LN backward
 *   dg = dout ⊙ â ⊙ σ(1 − σ)             → dw_gamma (Ca, Cs) += dgᵀ·ŝ, db_gamma (Ca) += Σ_m dg
 *   dw_beta (Ca, Cs) += doutᵀ·ŝ
 *   dŝ = dg·W_γ + dout·W_β               → ds (M, Cs), dgamma_s (Cs) += by the scale-only
 *                                          LN backward
 * dout (M, Ca); the four statistics (M) from the forward. */
void mf_adaln_backward(mf_real *da, mf_real *ds, mf_real *dgamma_s, mf_real *dw_gamma,
                       mf_real *db_gamma, mf_real *dw_beta, const mf_real *dout,
                       const mf_real *a_mean, const mf_real *a_rstd, const mf_real *s_mean,
                       const mf_real *s_rstd, const mf_real *a, const mf_real *s,
                       const mf_real *gamma_s, const mf_real *w_gamma, const mf_real *b_gamma,
                       const mf_real *w_beta, int64_t M, int Ca, int Cs);

/* out (M, C) = sigmoid(s (M, Cs) · weight (C, Cs)ᵀ + bias (C)) ⊙ x (M, C)
 * [bias may be NULL]. out may be x (in place); the backward needs the ungated x. */
void mf_adaln_gate_forward(mf_real *out, const mf_real *x, const mf_real *s,
                           const mf_real *weight, const mf_real *bias, int64_t M, int C, int Cs);

/* With σ = sigmoid(s·Wᵀ + b):  dx (M, C) = dout ⊙ σ;  dg = dout ⊙ x ⊙ σ(1 − σ);
 * ds (M, Cs) = dg·W;  dweight (C, Cs) += dgᵀ·s;  dbias (C) += Σ_m dg.
 * dout (M, C). */
void mf_adaln_gate_backward(mf_real *dx, mf_real *ds, mf_real *dweight, mf_real *dbias,
                            const mf_real *dout, const mf_real *x, const mf_real *s,
                            const mf_real *weight, const mf_real *bias, int64_t M, int C,
                            int Cs);

#ifdef __cplusplus
}
#endif

#endif
