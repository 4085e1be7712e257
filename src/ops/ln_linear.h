/* ln_linear.h — LayerNorm fused with the linear layer that reads it (EvoFusion):
 *
 *   y   = LN(inp)                       (mode FULL: γ ⊙ x̂ + β, SCALE: γ ⊙ x̂, NONE: x̂)
 *   out = y·Wᵀ (+ bias)                 W in PyTorch's (out, in) layout
 *
 * The forward keeps only the row statistics (mean, rstd); y is never stored. The
 * backward recomputes y from (inp, mean, rstd) in chunks of MF_LN_LINEAR_CHUNK rows, so
 * its scratch is bounded by the chunk, not by M. Numerically the forward is
 * mf_layernorm_forward followed by mf_linear_forward (it is built from them).
 * CPU reference in src/ops/cpu/ln_linear.c; not the CUDA kernel (src/ops/cuda).
 *
 * Also here: mf_ln_linear_normalize, the "recompute y from saved statistics" step that
 * other recomputing composites (the transition) share.
 *
 * Gradient contract: dinp ASSIGNS; dgamma, dbeta, dweight and dbias ACCUMULATE (+=).
 * Any gradient pointer may be NULL to skip it. */
#ifndef MF_OPS_LN_LINEAR_H
#define MF_OPS_LN_LINEAR_H

#include <stdint.h>

#include "core/core.h"
#include "ops/layernorm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows normalised at a time (scratch: CHUNK × C values forward, 2 × CHUNK × C backward). */
#define MF_LN_LINEAR_CHUNK 64

/* out (M, O) = LN(inp (M, C)) · weight (O, C)ᵀ + bias (O)   [bias may be NULL]
 * mean (M), rstd (M) saved. gamma (C) is read for FULL/SCALE, beta (C) for FULL.
 * mode is FULL, SCALE or NONE (not IDENTITY: that is plain mf_linear_forward). */
void mf_ln_linear_forward(mf_real *out, mf_real *mean, mf_real *rstd, const mf_real *inp,
                          const mf_real *gamma, const mf_real *beta, const mf_real *weight,
                          const mf_real *bias, int64_t M, int C, int O, mf_ln_mode mode);

/* With y recomputed from mean/rstd, dy = dout·W:
 *   dweight (O, C) += dout (M, O)ᵀ · y,   dbias (O) += Σ_m dout,
 *   dinp (M, C), dgamma (C) +=, dbeta (C) += : the LayerNorm backward of dy
 * (see layernorm.h). beta is read (FULL) because y feeds dweight.
 * dout (M, O); mean, rstd (M) from the forward; inp (M, C), gamma, beta (C), weight (O, C). */
void mf_ln_linear_backward(mf_real *dinp, mf_real *dgamma, mf_real *dbeta, mf_real *dweight,
                           mf_real *dbias, const mf_real *dout, const mf_real *mean,
                           const mf_real *rstd, const mf_real *inp, const mf_real *gamma,
                           const mf_real *beta, const mf_real *weight, int64_t M, int C, int O,
                           mf_ln_mode mode);

/* y (M, C) = LN(inp (M, C)) using the saved mean (M), rstd (M) — no statistics are
 * computed; gamma (C), beta (C) as in the forward. FULL/SCALE/NONE as above; IDENTITY
 * copies inp (mean, rstd unused). */
void mf_ln_linear_normalize(mf_real *y, const mf_real *mean, const mf_real *rstd,
                            const mf_real *inp, const mf_real *gamma, const mf_real *beta,
                            int64_t M, int C, mf_ln_mode mode);

#ifdef __cplusplus
}
#endif

#endif
