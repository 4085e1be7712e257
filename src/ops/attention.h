/* attention.h — gated multi-head attention with a pair bias broadcast over rows: the
 * one general form behind triangle attention (starting/ending node: R = N rows),
 * single attention with pair bias (R = 1), MSA row attention (R = S) and the
 * diffusion/atom transformers (R = diffusion copies, B = windows).
 *
 *   logits[b,r,h,q,k] = scale·q[b,r,h,q,:]·k[b,r,h,k,:] + bias[b,h,q,k]   (mask[b,r,k] = 1)
 *   A = softmax over k of the valid keys (masked keys get exactly zero weight)
 *   o[b,r,h,q,:] = Σ_k A·v[b,r,h,k,:]
 *   out = sigmoid(gate) ⊙ o                 (gate, same shape as out, may be NULL)
 *
 * Masked keys are excluded from the softmax, not given -1e9: they get exactly zero weight
 * and exactly zero dk, dv, dbias. A row whose keys are all masked (or whose valid logits
 * are all -inf) gives out = 0, lse = -inf and zero gradients (no NaN); with -1e9 masking
 * such a row would instead average v uniformly. mask: any nonzero byte is valid.
 * Shapes (contiguous, row-major): q, out, gate (B, R, H, Q, D); k, v (B, R, H, K, D);
 * bias (B, H, Q, K) or NULL; mask (B, R, K) uint8, 1 = valid, or NULL (all valid);
 * lse (B, R, H, Q). CPU reference in src/ops/cpu/attention.c; EvoFlash-3D (CUDA) in
 * src/ops/cuda/attention*.cu computes the same function.
 *
 * Gradient contract: dq, dk, dv, dgate and dbias all ASSIGN; dbias (B, H, Q, K) is the
 * sum over R of dlogits. Any gradient pointer may be NULL to skip it. */
#ifndef MF_OPS_ATTENTION_H
#define MF_OPS_ATTENTION_H

#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int B, R, H, Q, K, D;
  double scale; /* multiplies q·k; 1/sqrt(D) in AF3 */
} mf_attn_dims;

/* out (B, R, H, Q, D); lse (B, R, H, Q) = log Σ_k exp(logits) over the valid keys, the
 * only statistic the backward needs (may be NULL when no backward follows). */
void mf_attention_forward(mf_real *out, mf_real *lse, const mf_real *q, const mf_real *k,
                          const mf_real *v, const mf_real *bias, const uint8_t *mask,
                          const mf_real *gate, mf_attn_dims d);

/* dq (B, R, H, Q, D), dk, dv (B, R, H, K, D), dbias (B, H, Q, K), dgate (B, R, H, Q, D),
 * all ASSIGN; dout (B, R, H, Q, D); lse from the forward (required). The probabilities
 * and the ungated output are recomputed from lse. dgate needs gate. */
void mf_attention_backward(mf_real *dq, mf_real *dk, mf_real *dv, mf_real *dbias, mf_real *dgate,
                           const mf_real *dout, const mf_real *lse, const mf_real *q,
                           const mf_real *k, const mf_real *v, const mf_real *bias,
                           const uint8_t *mask, const mf_real *gate, mf_attn_dims d);

#ifdef __cplusplus
}
#endif

#endif
