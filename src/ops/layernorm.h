/* layernorm.h — LayerNorm over the last (channel) axis, eps 1e-5, population variance,
 * in three variants: full (γ, β), scale-only (γ), no-affine. Statistics are computed
 * in double and saved as mean and rstd = 1/sqrt(var + eps) per row.
 * CPU reference in src/ops/cpu/layernorm.c.
 *
 * Gradient contract: dinp ASSIGNS; dgamma and dbeta ACCUMULATE. NULL skips a gradient. */
#ifndef MF_OPS_LAYERNORM_H
#define MF_OPS_LAYERNORM_H

#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MF_LN_EPS 1e-5

typedef enum {
  MF_LN_FULL = 0,     /* γ ⊙ x̂ + β */
  MF_LN_SCALE = 1,    /* γ ⊙ x̂ */
  MF_LN_NONE = 2,     /* x̂ */
  MF_LN_IDENTITY = 3  /* no normalisation at all: only for composite ops whose input is
                         already normalised (e.g. a transition after AdaLN) */
} mf_ln_mode;

/* out (M, C) = LN(inp (M, C)); mean (M), rstd (M) saved.
 * gamma (C) is read for FULL/SCALE, beta (C) for FULL (others may be NULL). */
void mf_layernorm_forward(mf_real *out, mf_real *mean, mf_real *rstd, const mf_real *inp,
                          const mf_real *gamma, const mf_real *beta, int64_t M, int C,
                          mf_ln_mode mode);

/* With x̂ = (x − μ)·r and g = dout ⊙ γ (dout for NONE):
 *   dinp = r·(g − mean(g) − x̂·mean(g ⊙ x̂)),  dgamma += Σ_m dout ⊙ x̂,  dbeta += Σ_m dout */
void mf_layernorm_backward(mf_real *dinp, mf_real *dgamma, mf_real *dbeta, const mf_real *dout,
                           const mf_real *mean, const mf_real *rstd, const mf_real *inp,
                           const mf_real *gamma, int64_t M, int C, mf_ln_mode mode);

#ifdef __cplusplus
}
#endif

#endif
