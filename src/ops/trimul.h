/* trimul.h — the triangle multiplicative update of the Pairformer (AF3 SI Alg 12
 * "outgoing" / Alg 13 "incoming", docs/af3-spec.md §6.4.1), forward and backward, as one
 * whole-module op over the pair tensor. It computes the update Δz only; the caller adds
 * the residual (and any row dropout). Not a fused kernel: the CPU reference composes
 * mf_layernorm_*, mf_linear_* and mf_gemm_batched (src/ops/cpu/trimul.c).
 *
 *   x  = LN_in(z)                                           full LN over C
 *   A  = pm ⊙ sigmoid(x·W_agᵀ) ⊙ (x·W_apᵀ)                  (N, N, Ch)
 *   B  = pm ⊙ sigmoid(x·W_bgᵀ) ⊙ (x·W_bpᵀ)                  (N, N, Ch)
 *   outgoing: T_ij = Σ_k A_ik ⊙ B_jk    (per channel c: T_c = A_c·B_cᵀ)
 *   incoming: T_ij = Σ_k A_ki ⊙ B_kj    (per channel c: T_c = A_cᵀ·B_c)
 *   Δz = sigmoid(x·W_gᵀ) ⊙ (LN_out(T)·W_zᵀ)                 LN_out full over Ch
 * No biases anywhere. pm is the pair mask m_i·m_j (N, N), uint8 1 = valid, or NULL.
 *
 * Symmetry: incoming on z equals transpose(outgoing on transpose(z)) when the A and B
 * projections are exchanged (W_ap ↔ W_bp, W_ag ↔ W_bg); with identical weights the two
 * differ in general.
 *
 * Gradient contract: dz ASSIGNS; every parameter gradient ACCUMULATES (+=). A NULL field
 * of the gradient struct (or a NULL struct) skips that gradient. */
#ifndef MF_OPS_TRIMUL_H
#define MF_OPS_TRIMUL_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The parameters of one triangle multiplication (weights in PyTorch (out, in) layout).
 * The same struct type holds their gradients. */
typedef struct {
  mf_real *ln_in_g;  /* (C)      LN_in scale γ */
  mf_real *ln_in_b;  /* (C)      LN_in offset β */
  mf_real *w_ap;     /* (Ch, C)  A projection */
  mf_real *w_ag;     /* (Ch, C)  A gate */
  mf_real *w_bp;     /* (Ch, C)  B projection */
  mf_real *w_bg;     /* (Ch, C)  B gate */
  mf_real *w_g;      /* (C, C)   output gate */
  mf_real *ln_out_g; /* (Ch)     LN_out scale γ */
  mf_real *ln_out_b; /* (Ch)     LN_out offset β */
  mf_real *w_z;      /* (C, Ch)  output projection */
} mf_trimul_weights;

/* Points the fields of w at consecutive slices of one flat buffer `flat`, in the order
 * of the struct, and returns the number of parameters (98,816 at C = Ch = 128).
 * With flat = NULL every field is set to NULL and only the count is returned. */
int64_t mf_trimul_weights_bind(mf_trimul_weights *w, mf_real *flat, int C, int Ch);

/* Number of mf_real elements of the `saved` workspace for N tokens:
 * N²·(3·C + 6·Ch + 4). */
size_t mf_trimul_saved_size(int N, int C, int Ch);

/* out (N, N, C) = Δz; saved (mf_trimul_saved_size(N, C, Ch)) is filled for the backward;
 * z (N, N, C); pm (N, N) or NULL; outgoing = 1 (Alg 12) or 0 (incoming, Alg 13). */
void mf_trimul_forward(mf_real *out, mf_real *saved, const mf_real *z, const uint8_t *pm,
                       const mf_trimul_weights *w, int N, int C, int Ch, int outgoing);

/* dz (N, N, C) = dL/dz (ASSIGN); grads: parameter gradients (ACCUMULATE, may be NULL);
 * dout (N, N, C) = dL/dΔz; saved from the forward of the same z, pm, w and flag. */
void mf_trimul_backward(mf_real *dz, const mf_trimul_weights *grads, const mf_real *dout,
                        const mf_real *saved, const mf_real *z, const uint8_t *pm,
                        const mf_trimul_weights *w, int N, int C, int Ch, int outgoing);

#ifdef __cplusplus
}
#endif

#endif
