/* dropout.h — structured (row-/column-wise) dropout of AF3 (docs/af3-spec.md §4.6): one
 * Bernoulli mask shared along one axis of a 3-D activation, the kept values scaled by
 * 1/(1−p). The mask comes from the Philox stream, so the CPU and the GPU draw the same
 * mask for the same (seed, stream), and the backward can regenerate it instead of
 * storing it. CPU reference in src/ops/cpu/dropout.c. Not element-wise dropout.
 *
 * On x (A, B, C) — a pair update (N, N, C), or an MSA update (S, N, Cm):
 *   MF_DROPOUT_ROWWISE:  out[a,b,c] = x[a,b,c]·mask[b,c]   mask (B, C), shared over a
 *                        ([PX] DropoutRowwise: mask dim −3 = 1; pair: shared over rows i)
 *   MF_DROPOUT_COLWISE:  out[a,b,c] = x[a,b,c]·mask[a,c]   mask (A, C), shared over b
 *                        ([PX] DropoutColumnwise: mask dim −2 = 1; pair: shared over j)
 * mask holds 0 (dropped) or 1/(1−p) (kept): it already carries the scale.
 *
 * Gradient contract: dx ASSIGNS. The residual form z += x⊙mask has dz passing through
 * unchanged and dx = dz⊙mask, which is mf_dropout_backward with dout = dz. */
#ifndef MF_OPS_DROPOUT_H
#define MF_OPS_DROPOUT_H

#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  MF_DROPOUT_ROWWISE = 0, /* mask (B, C), shared over the first axis */
  MF_DROPOUT_COLWISE = 1  /* mask (A, C), shared over the second axis */
} mf_dropout_axis;

/* mask (R, C): element k = r·C + c is kept when (double)mf_rng_uniform(seed, stream, k) >= p
 * (the float uniform compared in double; a GPU kernel must compare the same way), and is
 * then 1/(1−p); dropped elements are 0. 0 <= p < 1; p = 0 gives all ones.
 * R is B for ROWWISE and A for COLWISE. */
void mf_dropout_mask(mf_real *mask, int64_t R, int C, double p, uint64_t seed, uint64_t stream);

/* out (A, B, C) = x (A, B, C) ⊙ mask broadcast along `axis`; out may equal x. */
void mf_dropout_forward(mf_real *out, const mf_real *x, const mf_real *mask, int64_t A,
                        int64_t B, int C, mf_dropout_axis axis);

/* dx (A, B, C) = dout (A, B, C) ⊙ mask (ASSIGN); dx may equal dout. */
void mf_dropout_backward(mf_real *dx, const mf_real *dout, const mf_real *mask, int64_t A,
                         int64_t B, int C, mf_dropout_axis axis);

/* Fused residual: z (A, B, C) += x (A, B, C) ⊙ mask. Backward: mf_dropout_backward(dx, dz, ...)
 * (dz itself flows on to the residual input unchanged). */
void mf_dropout_residual_forward(mf_real *z, const mf_real *x, const mf_real *mask, int64_t A,
                                 int64_t B, int C, mf_dropout_axis axis);

#ifdef __cplusplus
}
#endif

#endif
