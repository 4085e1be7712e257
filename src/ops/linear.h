/* linear.h — the linear layer: out = inp·Wᵀ (+ bias), weights in PyTorch's (out, in)
 * layout so checkpoints map one to one onto the PyTorch reference.
 * CPU reference in src/ops/cpu/linear.c.
 *
 * Gradient contract: dinp ASSIGNS; dweight and dbias ACCUMULATE (+=). Any gradient
 * pointer may be NULL to skip it. */
#ifndef MF_OPS_LINEAR_H
#define MF_OPS_LINEAR_H

#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (M, O) = inp (M, I) · weight (O, I)ᵀ + bias (O) [bias may be NULL] */
void mf_linear_forward(mf_real *out, const mf_real *inp, const mf_real *weight,
                       const mf_real *bias, int64_t M, int I, int O);

/* dinp (M, I) = dout (M, O) · weight (O, I)
 * dweight (O, I) += dout (M, O)ᵀ · inp (M, I)
 * dbias (O) += Σ_m dout (M, O) */
void mf_linear_backward(mf_real *dinp, mf_real *dweight, mf_real *dbias, const mf_real *dout,
                        const mf_real *inp, const mf_real *weight, int64_t M, int I, int O);

#ifdef __cplusplus
}
#endif

#endif
