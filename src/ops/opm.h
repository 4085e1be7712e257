/* opm.h — OuterProductMean of the MSA module (AF3 SI Alg 9, docs/af3-spec.md §6.3),
 * forward and backward, as one op: the MSA-to-pair communication update. It returns the
 * update only; the caller adds it to z. CPU reference in src/ops/cpu/opm.c, built from
 * mf_layernorm_*, mf_linear_* and mf_gemm; not a fused kernel.
 *
 *   x       = LN(m)                                  full LN over Cm, (S, N, Cm)
 *   A       = mask ⊙ (x·W_aᵀ),  B = mask ⊙ (x·W_bᵀ)   (S, N, Ch), no bias
 *   O_ij    = Σ_s A_si ⊗ B_sj                         (Ch, Ch), O_ij[c,e] = Σ_s A_si[c]·B_sj[e]
 *   out_ij  = (flatten(O_ij)·W_oᵀ + b_o) / (1e-3 + Σ_s mask_si·mask_sj)
 * flatten index c·Ch + e. The bias is divided by the count too (as [DM] and [PX] do), so
 * a pair with no valid row gets out_ij = 1000·b_o. mask (S, N) uint8, 1 = valid, or NULL.
 *
 * Work is chunked over i (dims.chunk rows at a time; 0 picks a chunk whose scratch is
 * about MF_OPM_CHUNK_ELEMS values), so no (N, N, Ch·Ch) intermediate is ever held whole.
 *
 * Gradient contract: dm ASSIGNS; every parameter gradient ACCUMULATES (+=). A NULL field
 * of the gradient struct (or a NULL struct, or dm = NULL) skips that gradient. */
#ifndef MF_OPS_OPM_H
#define MF_OPS_OPM_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Target size (values) of the per-chunk scratch when dims.chunk is 0. */
#define MF_OPM_CHUNK_ELEMS (1 << 22)

/* The count regulariser added to Σ_s mask_si·mask_sj. */
#define MF_OPM_EPS 1e-3

typedef struct {
  int S, N;   /* MSA rows, tokens */
  int Cm;     /* MSA channels (64) */
  int Ch;     /* hidden channels (32) */
  int Cz;     /* pair channels (128) */
  int chunk;  /* rows i per chunk; 0 = automatic */
} mf_opm_dims;

/* Parameters (PyTorch (out, in) layout). The same struct type holds their gradients. */
typedef struct {
  mf_real *ln_g; /* (Cm)        LN scale γ */
  mf_real *ln_b; /* (Cm)        LN offset β */
  mf_real *w_a;  /* (Ch, Cm)    left projection */
  mf_real *w_b;  /* (Ch, Cm)    right projection */
  mf_real *w_o;  /* (Cz, Ch·Ch) output projection, input index c·Ch + e */
  mf_real *b_o;  /* (Cz)        output bias */
} mf_opm_weights;

/* Points the fields of w at consecutive slices of `flat`, in struct order; returns the
 * number of parameters. flat = NULL sets every field to NULL and only counts. */
int64_t mf_opm_weights_bind(mf_opm_weights *w, mf_real *flat, mf_opm_dims d);

/* Number of mf_real elements of the `saved` workspace: 2·S·N + 2·S·N·Ch, laid out as
 * mean (S·N), rstd (S·N) of the LN, then A (S, N, Ch) and B (S, N, Ch) after masking. */
size_t mf_opm_saved_size(mf_opm_dims d);

/* out (N, N, Cz) = the update; saved (mf_opm_saved_size(d)) is filled for the backward;
 * m (S, N, Cm); mask (S, N) or NULL. */
void mf_opm_forward(mf_real *out, mf_real *saved, const mf_real *m, const uint8_t *mask,
                    const mf_opm_weights *w, mf_opm_dims d);

/* dm (S, N, Cm) = dL/dm (ASSIGN); grads: parameter gradients (ACCUMULATE, may be NULL);
 * dout (N, N, Cz) = dL/dout; saved from the forward of the same m, mask and w. */
void mf_opm_backward(mf_real *dm, const mf_opm_weights *grads, const mf_real *dout,
                     const mf_real *saved, const mf_real *m, const uint8_t *mask,
                     const mf_opm_weights *w, mf_opm_dims d);

#ifdef __cplusplus
}
#endif

#endif
