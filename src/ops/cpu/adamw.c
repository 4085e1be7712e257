/* adamw.c — CPU reference of the AdamW step, the global gradient norm and the clipping
 * scale. See adamw.h. */
#include "ops/adamw.h"

#include <math.h>

mf_adamw_config mf_adamw_default(void) {
  mf_adamw_config c = {.lr = 1.8e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0};
  return c;
}

void mf_adamw_step(mf_real *param, mf_real *m, mf_real *v, const mf_real *grad, double grad_scale,
                   int64_t t, const mf_adamw_config *cfg, int64_t n) {
  MF_ASSERT(cfg && n >= 0 && t >= 1, "adamw_step: n=%lld t=%lld", (long long)n, (long long)t);
  MF_ASSERT(cfg->beta1 >= 0 && cfg->beta1 < 1 && cfg->beta2 >= 0 && cfg->beta2 < 1 &&
                cfg->eps > 0 && cfg->lr >= 0 && cfg->weight_decay >= 0,
            "adamw config lr=%g beta1=%g beta2=%g eps=%g wd=%g", cfg->lr, cfg->beta1, cfg->beta2,
            cfg->eps, cfg->weight_decay);
  double b1 = cfg->beta1, b2 = cfg->beta2;
  double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
  double decay = 1.0 - cfg->lr * cfg->weight_decay;
  for (int64_t k = 0; k < n; k++) {
    double g = grad_scale * grad[k];
    double mk = b1 * m[k] + (1.0 - b1) * g;
    double vk = b2 * v[k] + (1.0 - b2) * g * g;
    double p = param[k] * decay;
    p -= cfg->lr * (mk / bc1) / (sqrt(vk / bc2) + cfg->eps);
    m[k] = (mf_real)mk;
    v[k] = (mf_real)vk;
    param[k] = (mf_real)p;
  }
}

double mf_grad_global_norm(const mf_real *g, int64_t n) {
  MF_ASSERT(n >= 0, "grad_global_norm n=%lld", (long long)n);
  double s = 0;
  for (int64_t k = 0; k < n; k++) s += (double)g[k] * g[k];
  return sqrt(s);
}

double mf_grad_clip_scale(double norm, double max_norm) {
  if (isnan(norm) || isinf(norm)) return NAN;
  if (max_norm <= 0) return 1.0;
  double s = max_norm / (norm + 1e-6);
  return s < 1.0 ? s : 1.0;
}
