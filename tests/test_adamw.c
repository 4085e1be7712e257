/* test_adamw.c — AdamW step, global gradient norm and clipping scale (src/ops/adamw.h):
 * several steps against a naive double re-implementation of the update equations,
 * closed forms for the bias-corrected moments after two steps, the effects of β, ε,
 * weight decay and the gradient scale, the AF3 defaults, norm and clip scale. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ops/adamw.h"

/* Naive AdamW (torch.optim.AdamW), one parameter at a time. */
static void ref_step(double *p, double *m, double *v, const double *g, double scale, int t,
                     double lr, double b1, double b2, double eps, double wd, int64_t n) {
  for (int64_t k = 0; k < n; k++) {
    double gk = g[k] * scale;
    p[k] = p[k] - lr * wd * p[k];
    m[k] = b1 * m[k] + (1 - b1) * gk;
    v[k] = b2 * v[k] + (1 - b2) * gk * gk;
    double mhat = m[k] / (1 - pow(b1, t)), vhat = v[k] / (1 - pow(b2, t));
    p[k] = p[k] - lr * mhat / (sqrt(vhat) + eps);
  }
}

static void test_defaults(void) {
  mf_adamw_config c = mf_adamw_default();
  MF_TEST(c.lr == 1.8e-3 && c.beta1 == 0.9 && c.beta2 == 0.95 && c.eps == 1e-8 &&
              c.weight_decay == 0,
          "AF3 defaults: lr %g b1 %g b2 %g eps %g wd %g", c.lr, c.beta1, c.beta2, c.eps,
          c.weight_decay);
}

static void test_steps(void) {
  const int64_t n = 257;
  mf_adamw_config cfg = {.lr = 1e-2, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.1};
  double *p = mf_test_alloc(n), *m = mf_test_alloc(n), *v = mf_test_alloc(n), *g = mf_test_alloc(n);
  double *rp = mf_test_alloc(n), *rm = mf_test_alloc(n), *rv = mf_test_alloc(n);
  mf_test_randn(p, n, 1, 1.0);
  memcpy(rp, p, (size_t)n * sizeof *p);
  for (int t = 1; t <= 6; t++) {
    mf_test_randn(g, n, 10 + (uint64_t)t, t == 3 ? 1e-7 : 1.0); /* step 3: tiny grads, ε matters */
    double scale = t == 4 ? 0.37 : 1.0;
    cfg.lr = 1e-2 * t; /* a schedule */
    mf_adamw_step(p, m, v, g, scale, t, &cfg, n);
    ref_step(rp, rm, rv, g, scale, t, cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, n);
    char what[48];
    snprintf(what, sizeof what, "step %d params", t);
    mf_test_close(what, p, rp, n, 1e-14);
    snprintf(what, sizeof what, "step %d m, v", t);
    MF_TEST(mf_test_relerr(m, rm, n) < 1e-14 && mf_test_relerr(v, rv, n) < 1e-14, "%s", what);
  }
}

static void test_effects(void) {
  const double lr = 1e-3;
  mf_adamw_config cfg = mf_adamw_default();
  cfg.lr = lr;
  /* step 1: m̂ = g, v̂ = g², so the update is lr·g/(|g| + ε), whatever the βs */
  double g[4] = {3.0, -0.5, 1e-8, -2e-8}, p[4] = {0}, m[4] = {0}, v[4] = {0};
  mf_adamw_step(p, m, v, g, 1.0, 1, &cfg, 4);
  MF_TEST(fabs(p[0] + lr * 3 / (3 + 1e-8)) < 1e-18 && fabs(p[1] - lr * 0.5 / (0.5 + 1e-8)) < 1e-18,
          "step 1 moves by lr·g/(|g| + ε) ≈ lr·sign(g): %.17g %.17g", p[0], p[1]);
  MF_TEST(fabs(p[2] + lr * 0.5) < 1e-12 && fabs(p[3] - lr * 2.0 / 3.0) < 1e-12,
          "ε = 1e-8 halves a 1e-8 gradient's step: %g %g", p[2], p[3]);

  /* two steps: m̂₂ = (β1·g1 + g2)/(1 + β1), v̂₂ = (β2·g1² + g2²)/(1 + β2) */
  double b1s[2] = {0.9, 0.5}, b2s[2] = {0.95, 0.999};
  for (int k = 0; k < 2; k++) {
    mf_adamw_config c2 = cfg;
    c2.beta1 = b1s[k];
    c2.beta2 = b2s[k];
    double q[1] = {0.25}, mm[1] = {0}, vv[1] = {0}, g1[1] = {2.0}, g2[1] = {-1.0};
    mf_adamw_step(q, mm, vv, g1, 1.0, 1, &c2, 1);
    double q1 = q[0];
    mf_adamw_step(q, mm, vv, g2, 1.0, 2, &c2, 1);
    double mh = (c2.beta1 * 2.0 - 1.0) / (1 + c2.beta1), vh = (c2.beta2 * 4.0 + 1.0) / (1 + c2.beta2);
    double expect = q1 - lr * mh / (sqrt(vh) + c2.eps);
    MF_TEST(fabs(q[0] - expect) < 1e-15, "β1 %.2f β2 %.3f: step 2 closed form %.17g vs %.17g",
            c2.beta1, c2.beta2, q[0], expect);
  }

  /* decoupled weight decay: with zero gradient only the decay acts, p·(1 − lr·wd) */
  mf_adamw_config cw = cfg;
  cw.weight_decay = 0.1;
  double pw[3] = {1.0, -4.0, 0.0}, mw[3] = {0}, vw[3] = {0}, gz[3] = {0};
  mf_adamw_step(pw, mw, vw, gz, 1.0, 1, &cw, 3);
  MF_TEST(pw[0] == 1.0 * (1 - lr * 0.1) && pw[1] == -4.0 * (1 - lr * 0.1) && pw[2] == 0,
          "weight decay alone: %.17g %.17g", pw[0], pw[1]);
  /* ... and it is not folded into the gradient: the Adam part is unchanged by wd */
  double pa[1] = {2.0}, ma[1] = {0}, va[1] = {0}, pb[1] = {2.0}, mb[1] = {0}, vb[1] = {0};
  double gg[1] = {0.3};
  mf_adamw_step(pa, ma, va, gg, 1.0, 1, &cfg, 1);
  mf_adamw_step(pb, mb, vb, gg, 1.0, 1, &cw, 1);
  MF_TEST(ma[0] == mb[0] && va[0] == vb[0] && fabs((pb[0] - pa[0]) + lr * 0.1 * 2.0) < 1e-15,
          "decoupled: moments equal, params differ by lr·wd·p (%g)", pb[0] - pa[0]);

  /* the gradient scale is a scale on g */
  double s1[2] = {1, 2}, m1[2] = {0}, v1[2] = {0}, s2[2] = {1, 2}, m2[2] = {0}, v2[2] = {0};
  double ga[2] = {4.0, -6.0}, gb[2] = {1.0, -1.5};
  mf_adamw_step(s1, m1, v1, ga, 0.25, 1, &cfg, 2);
  mf_adamw_step(s2, m2, v2, gb, 1.0, 1, &cfg, 2);
  MF_TEST(s1[0] == s2[0] && s1[1] == s2[1] && m1[1] == m2[1] && v1[1] == v2[1],
          "grad_scale 0.25 on 4g = scale 1 on g");
}

static void test_norm_clip(void) {
  const int64_t n = 1001;
  double *g = mf_test_alloc(n);
  mf_test_randn(g, n, 5, 3.0);
  double s = 0;
  for (int64_t k = 0; k < n; k++) s += g[k] * g[k];
  double nr = mf_grad_global_norm(g, n);
  MF_TEST(fabs(nr - sqrt(s)) <= 1e-14 * sqrt(s), "global norm %.15g vs %.15g", nr, sqrt(s));
  double e[2] = {3, 4};
  MF_TEST(mf_grad_global_norm(e, 2) == 5 && mf_grad_global_norm(e, 0) == 0, "norm of (3,4) is 5");
  g[7] = NAN;
  MF_TEST(!isfinite(mf_grad_global_norm(g, n)), "NaN gradient gives a non-finite norm");

  MF_TEST(fabs(mf_grad_clip_scale(20, 10) - 10 / (20 + 1e-6)) < 1e-16, "clip scale 10/(20+1e-6)");
  MF_TEST(mf_grad_clip_scale(5, 10) == 1 && mf_grad_clip_scale(10 - 2e-6, 10) == 1,
          "no clipping below the threshold");
  MF_TEST(mf_grad_clip_scale(10, 10) == 10 / (10 + 1e-6), "at the threshold: 10/(10+1e-6)");
  MF_TEST(mf_grad_clip_scale(0, 10) == 1 && mf_grad_clip_scale(50, 0) == 1, "zero norm, no max");
  MF_TEST(isnan(mf_grad_clip_scale(NAN, 10)) && isnan(mf_grad_clip_scale(INFINITY, 10)),
          "non-finite norm gives NaN");
  /* after clipping, the effective gradient norm is max_norm (to 1e-6 relative) */
  double big[3] = {30, 40, 0};
  double sc = mf_grad_clip_scale(mf_grad_global_norm(big, 3), 10);
  MF_TEST(fabs(sc * 50 - 10) < 1e-6, "clipped norm %.9g ≈ 10", sc * 50);
}

static void bad_step(void *p) {
  (void)p;
  double x[1] = {0}, m[1] = {0}, v[1] = {0}, g[1] = {1};
  mf_adamw_config c = mf_adamw_default();
  mf_adamw_step(x, m, v, g, 1.0, 0, &c, 1);
}

int main(void) {
  mf_test_begin("test_adamw");
  test_defaults();
  test_steps();
  test_effects();
  test_norm_clip();
  MF_TEST(mf_test_expect_fatal(bad_step, NULL, "t=0"), "step 0 is refused: %s", mf_test_last_fatal());
  return mf_test_end();
}
