/* adamw.h — the AdamW optimiser step over one flat parameter buffer, the global gradient
 * norm and the clipping scale (docs/af3-spec.md §10.4). CPU reference in
 * src/ops/cpu/adamw.c. Not the LR schedule, EMA or gradient all-reduce (src/train/).
 *
 * Step t (1-based), g = grad_scale·grad:
 *   p ← p − lr·wd·p                                  (decoupled weight decay, first)
 *   m ← β1·m + (1−β1)·g
 *   v ← β2·v + (1−β2)·g²
 *   p ← p − lr·(m/(1−β1^t)) / (sqrt(v/(1−β2^t)) + ε)
 * which is PyTorch's torch.optim.AdamW. Each element is updated in double and stored as
 * mf_real. Params, grads and moments are all mf_real (fp32 master weights by default). */
#ifndef MF_OPS_ADAMW_H
#define MF_OPS_ADAMW_H

#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  double lr;           /* learning rate of this step (the schedule sets it) */
  double beta1;        /* 0.9 */
  double beta2;        /* 0.95 */
  double eps;          /* 1e-8 */
  double weight_decay; /* decoupled; 0 in AF3 ([PX] uses 1e-8) */
} mf_adamw_config;

/* The AF3 defaults: lr 1.8e-3 (peak), β1 0.9, β2 0.95, ε 1e-8, weight decay 0. */
mf_adamw_config mf_adamw_default(void);

/* One step over n values: param (n), m (n), v (n) updated in place; grad (n) read;
 * t >= 1 is the step number (bias correction); grad_scale multiplies grad (the clipping
 * scale, or 1). m and v start at zero before step 1. */
void mf_adamw_step(mf_real *param, mf_real *m, mf_real *v, const mf_real *grad, double grad_scale,
                   int64_t t, const mf_adamw_config *cfg, int64_t n);

/* ‖g‖₂ of g (n), accumulated in double. NaN/Inf in g gives a non-finite norm. */
double mf_grad_global_norm(const mf_real *g, int64_t n);

/* Clipping scale min(1, max_norm/(norm + 1e-6)) to pass as grad_scale. max_norm <= 0
 * turns clipping off (returns 1). A non-finite norm returns NaN: skip that step
 * (docs/af3-spec.md §13). */
double mf_grad_clip_scale(double norm, double max_norm);

#ifdef __cplusplus
}
#endif

#endif
