/* loss.h — softmax cross-entropy over K bins (the distogram loss, docs/af3-spec.md §9.6,
 * and any other binned head), plus the distogram helpers: the 64-bin distance binning
 * and the head's symmetrisation logits_ij ← l_ij + l_ji (§8.1). CPU reference in
 * src/ops/cpu/loss.c. Not the confidence-head losses (those have their own binning).
 *
 *   loss = Σ_m w_m·(−log softmax(logits_m)[t_m]) / max(Σ_m w_m, MF_CE_TINY)
 * weight NULL means all ones. A set of rows whose weights are all zero gives loss 0 and
 * zero gradients.
 *
 * Gradient contract: dlogits ASSIGNS; the symmetrisation backward dl ASSIGNS. */
#ifndef MF_OPS_LOSS_H
#define MF_OPS_LOSS_H

#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MF_CE_TINY 1e-8 /* floor of the weight sum in the denominator */

/* Returns the loss; lse (M) = log Σ_k exp(logits_m,k) saved for the backward.
 * logits (M, K); target (M) int32 bin index in [0, K); weight (M) or NULL. */
double mf_softmax_ce_forward(mf_real *lse, const mf_real *logits, const int32_t *target,
                             const mf_real *weight, int64_t M, int K);

/* dlogits (M, K) = dloss·w_m·(softmax(logits_m) − onehot(t_m)) / max(Σ w, MF_CE_TINY)
 * (ASSIGN); lse (M) from the forward of the same logits. */
void mf_softmax_ce_backward(mf_real *dlogits, double dloss, const mf_real *lse,
                            const mf_real *logits, const int32_t *target, const mf_real *weight,
                            int64_t M, int K);

/* Distogram bins: 64 bins over the edges 2.3125 + 0.3125·k, k = 0..62. Bin 0 is
 * d < 2.3125 Å, bin b (1..62) is edge(b−1) <= d < edge(b), bin 63 is d >= 21.6875 Å.
 * d must not be NaN. */
#define MF_DISTOGRAM_BINS 64
#define MF_DISTOGRAM_FIRST_EDGE 2.3125
#define MF_DISTOGRAM_STEP 0.3125
int mf_distogram_bin(double d);

/* out (N, N, K): out_ij = l_ij + l_ji for l (N, N, K); out may equal l (in place). */
void mf_distogram_symmetrize_forward(mf_real *out, const mf_real *l, int N, int K);
/* dl (N, N, K) = dout_ij + dout_ji (ASSIGN); dl may equal dout. */
void mf_distogram_symmetrize_backward(mf_real *dl, const mf_real *dout, int N, int K);

#ifdef __cplusplus
}
#endif

#endif
