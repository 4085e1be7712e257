/* transition.h — the SwiGLU transition of AF3 (spec §4.2, SI Alg 11), the MLP of every
 * Pairformer / MSA / diffusion block:
 *
 *   x̂   = LN(inp)                     mode FULL in the trunk; MF_LN_IDENTITY (no
 *                                      normalisation) for the conditioned transition,
 *                                      whose input is already AdaLN's output
 *   a   = x̂·W_aᵀ,  b = x̂·W_bᵀ          W_a, W_b (Hd, C), no bias
 *   out = (silu(a) ⊙ b)·W_oᵀ           W_o (C, Hd), no bias; the caller adds the residual
 *
 * with Hd = n·C (n = 4 in the trunk, 2 in the diffusion transformer). The forward keeps
 * only mean and rstd (M); the backward recomputes x̂, a and b in chunks of
 * MF_TRANSITION_CHUNK rows (the CUDA path recomputes them too). Weights in PyTorch's
 * (out, in) layout. CPU reference in src/ops/cpu/transition.c; not the CUDA kernel.
 *
 * Gradient contract: dinp ASSIGNS; dgamma, dbeta, dw_a, dw_b and dw_o ACCUMULATE (+=).
 * Any gradient pointer may be NULL to skip it. */
#ifndef MF_OPS_TRANSITION_H
#define MF_OPS_TRANSITION_H

#include <stdint.h>

#include "core/core.h"
#include "ops/layernorm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows processed at a time (scratch ~ CHUNK × (2C + 3Hd) values). */
#define MF_TRANSITION_CHUNK 64

/* out (M, C) = (silu(x̂·w_aᵀ) ⊙ (x̂·w_bᵀ))·w_oᵀ, x̂ = LN(inp (M, C)).
 * mean (M), rstd (M) saved (not written, and may be NULL, for MF_LN_IDENTITY).
 * gamma (C) read for FULL/SCALE, beta (C) for FULL; w_a (Hd, C), w_b (Hd, C), w_o (C, Hd).
 * out must not overlap inp. */
void mf_transition_forward(mf_real *out, mf_real *mean, mf_real *rstd, const mf_real *inp,
                           const mf_real *gamma, const mf_real *beta, const mf_real *w_a,
                           const mf_real *w_b, const mf_real *w_o, int64_t M, int C, int Hd,
                           mf_ln_mode mode);

/* With h = silu(a) ⊙ b and silu'(a) = σ(a)(1 + a(1 − σ(a))):
 *   dh = dout·W_o,   dw_o (C, Hd) += doutᵀ·h
 *   da = dh ⊙ b ⊙ silu'(a),  db = dh ⊙ silu(a)
 *   dx̂ = da·W_a + db·W_b,    dw_a (Hd, C) += daᵀ·x̂,  dw_b (Hd, C) += dbᵀ·x̂
 *   dinp (M, C), dgamma (C) +=, dbeta (C) += : the LayerNorm backward of dx̂
 *   (IDENTITY: dinp = dx̂).
 * dout (M, C); mean, rstd (M) from the forward. */
void mf_transition_backward(mf_real *dinp, mf_real *dgamma, mf_real *dbeta, mf_real *dw_a,
                            mf_real *dw_b, mf_real *dw_o, const mf_real *dout,
                            const mf_real *mean, const mf_real *rstd, const mf_real *inp,
                            const mf_real *gamma, const mf_real *beta, const mf_real *w_a,
                            const mf_real *w_b, const mf_real *w_o, int64_t M, int C, int Hd,
                            mf_ln_mode mode);

#ifdef __cplusplus
}
#endif

#endif
