/* test_pairformer.c — the ops compose: one full Pairformer block (spec Alg. 17) on the
 * CPU, forward and backward. Checks the parameter count at AF3 dims, the identity at
 * AF3 initialisation (zero-init output projections), dropout determinism, and a
 * whole-block finite-difference check of ds, dz and a few parameters of every
 * sub-layer, with a padded token and dropout on. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "model/pairformer.h"

typedef struct {
  const mf_pairformer_config *c;
  const mf_pairformer_block *w;
  int N;
  double *s, *z, *Rs, *Rz, *s_out, *z_out, *saved;
  const uint8_t *mask;
  mf_pairformer_rng rng;
} ctx_t;

static double block_loss(void *p) {
  ctx_t *x = p;
  mf_pairformer_block_forward(x->s_out, x->z_out, x->saved, x->s, x->z, x->mask, x->w, x->c,
                              x->N, x->rng);
  int64_t sn = (int64_t)x->N * x->c->c_s, zn = (int64_t)x->N * x->N * x->c->c_z;
  return mf_test_dot(x->s_out, x->Rs, sn) + mf_test_dot(x->z_out, x->Rz, zn);
}

static void test_counts_and_init(void) {
  mf_pairformer_config c = mf_pairformer_config_default();
  mf_pairformer_block w;
  int64_t n = mf_pairformer_block_bind(&w, NULL, &c);
  MF_TEST(n == 3070848, "Pairformer block params at AF3 dims: %lld (want 3,070,848)", (long long)n);

  /* a small config: at initialisation every residual branch is zero, so out = in */
  c = (mf_pairformer_config){.c_s = 12, .c_z = 8, .c_mul = 6, .h_tri = 2, .d_tri = 4, .h_s = 3,
                             .d_s = 4, .n_trans = 2, .p_drop = 0.25};
  int N = 6;
  int64_t np = mf_pairformer_block_bind(&w, NULL, &c);
  double *flat = mf_test_alloc(np);
  mf_pairformer_block_bind(&w, flat, &c);
  mf_pairformer_block_init(&w, &c, 42, 0);
  MF_TEST(w.tri_out.ln_in_g[0] == 1 && w.tri_out.ln_in_b[0] == 0 && w.att_end.w_o[3] == 0,
          "LN γ=1, β=0, zero-init output projection");
  double m = 0, sd = 0, mx = 0;
  int64_t cnt = (int64_t)c.c_mul * c.c_z;
  for (int64_t i = 0; i < cnt; i++) {
    m += w.tri_out.w_ap[i];
    sd += w.tri_out.w_ap[i] * w.tri_out.w_ap[i];
    mx = fmax(mx, fabs(w.tri_out.w_ap[i]));
  }
  double expect_sd = sqrt(1.0 / c.c_z);
  MF_TEST(mx <= 2 * expect_sd / 0.87962566 + 1e-12 && sqrt(sd / cnt) > 0.5 * expect_sd &&
              sqrt(sd / cnt) < 1.5 * expect_sd,
          "lecun truncated normal: std %.3f (want ~%.3f), max %.3f", sqrt(sd / cnt), expect_sd, mx);
  double *s = mf_test_alloc((int64_t)N * c.c_s), *z = mf_test_alloc((int64_t)N * N * c.c_z);
  double *so = mf_test_alloc((int64_t)N * c.c_s), *zo = mf_test_alloc((int64_t)N * N * c.c_z);
  double *saved = mf_test_alloc((int64_t)mf_pairformer_block_saved_size(N, &c));
  mf_test_randn(s, (int64_t)N * c.c_s, 1, 1.0);
  mf_test_randn(z, (int64_t)N * N * c.c_z, 2, 1.0);
  mf_pairformer_rng rng = {7, 3, 0, 1};
  mf_pairformer_block_forward(so, zo, saved, s, z, NULL, &w, &c, N, rng);
  MF_TEST(mf_test_maxabs(so, s, (int64_t)N * c.c_s) == 0 &&
              mf_test_maxabs(zo, z, (int64_t)N * N * c.c_z) == 0,
          "identity at initialisation");

  mf_pairformer_config bad = c;
  bad.p_drop = 1.0;
  MF_TEST(mf_pairformer_config_check(&bad) == MF_ERR_CONFIG &&
              strstr(mf_error_message(), "p_drop"),
          "impossible config is refused: %s", mf_error_message());
}

static void test_block(int N, int with_mask, int training) {
  mf_pairformer_config c = {.c_s = 8, .c_z = 6, .c_mul = 5, .h_tri = 2, .d_tri = 3, .h_s = 2,
                            .d_s = 4, .n_trans = 2, .p_drop = 0.25};
  mf_pairformer_block w, g;
  int64_t np = mf_pairformer_block_bind(&w, NULL, &c);
  double *flat = mf_test_alloc(np), *gflat = mf_test_alloc(np);
  mf_pairformer_block_bind(&w, flat, &c);
  mf_pairformer_block_bind(&g, gflat, &c);
  mf_test_randn(flat, np, 100 + (uint64_t)N, 0.4); /* random, not the zero init: every path live */
  int64_t sn = (int64_t)N * c.c_s, zn = (int64_t)N * N * c.c_z;
  uint8_t mask[16];
  for (int i = 0; i < N; i++) mask[i] = (uint8_t)!(with_mask && i == N - 2);
  ctx_t x = {&c, &w, N, mf_test_alloc(sn), mf_test_alloc(zn), mf_test_alloc(sn), mf_test_alloc(zn),
             mf_test_alloc(sn), mf_test_alloc(zn),
             mf_test_alloc((int64_t)mf_pairformer_block_saved_size(N, &c)), with_mask ? mask : NULL,
             (mf_pairformer_rng){11, 5, 2, training}};
  mf_test_randn(x.s, sn, 3, 1.0);
  mf_test_randn(x.z, zn, 4, 1.0);
  mf_test_randn(x.Rs, sn, 5, 1.0);
  mf_test_randn(x.Rz, zn, 6, 1.0);

  mf_test_poison(x.s_out, sn);
  mf_test_poison(x.z_out, zn);
  block_loss(&x);
  MF_TEST(mf_test_relerr(x.s_out, x.s_out, sn) == 0 && mf_test_relerr(x.z_out, x.z_out, zn) == 0,
          "N=%d: every output written (no NaN)", N);

  /* same rng → bit-identical; another step → other dropout masks */
  double *s2 = mf_test_alloc(sn), *z2 = mf_test_alloc(zn);
  double *sv2 = mf_test_alloc((int64_t)mf_pairformer_block_saved_size(N, &c));
  mf_pairformer_block_forward(s2, z2, sv2, x.s, x.z, x.mask, &w, &c, N, x.rng);
  MF_TEST(memcmp(s2, x.s_out, (size_t)sn * 8) == 0 && memcmp(z2, x.z_out, (size_t)zn * 8) == 0,
          "N=%d: deterministic", N);
  if (training) {
    mf_pairformer_rng r2 = x.rng;
    r2.step++;
    mf_pairformer_block_forward(s2, z2, sv2, x.s, x.z, x.mask, &w, &c, N, r2);
    MF_TEST(mf_test_maxabs(z2, x.z_out, zn) > 1e-6, "N=%d: dropout masks change with the step", N);
  }

  /* analytic gradients */
  double *ds = mf_test_alloc(sn), *dz = mf_test_alloc(zn);
  mf_test_poison(ds, sn);
  mf_test_poison(dz, zn);
  block_loss(&x);
  mf_pairformer_block_backward(ds, dz, &g, x.Rs, x.Rz, x.saved, x.s, x.z, x.mask, &w, &c, N, x.rng);
  char what[96];
  /* tolerance: central differences in double with h = 1e-6 give ~1e-8 relative error on
   * these smooth functions; 1e-6 leaves margin and still catches any wrong term. */
  snprintf(what, sizeof what, "block N=%d mask=%d train=%d ds", N, with_mask, training);
  mf_test_gradcheck(what, block_loss, &x, x.s, ds, sn, 40, 1e-6, 1e-6);
  snprintf(what, sizeof what, "block N=%d mask=%d train=%d dz", N, with_mask, training);
  mf_test_gradcheck(what, block_loss, &x, x.z, dz, zn, 60, 1e-6, 1e-6);

  /* a few parameters of every sub-layer: each sub-layer struct is a contiguous range */
  struct { const char *name; const mf_real *lo; } sub[] = {
      {"tri_out", w.tri_out.ln_in_g},       {"tri_in", w.tri_in.ln_in_g},
      {"att_start", w.att_start.ln_g},      {"att_end", w.att_end.ln_g},
      {"pair_trans", w.pair_trans.ln_g},    {"single_att", w.single_att.ln_s_g},
      {"single_trans", w.single_trans.ln_g}, {"end", flat + np}};
  for (int k = 0; k < 7; k++) {
    int64_t a = sub[k].lo - flat, b = sub[k + 1].lo - flat;
    snprintf(what, sizeof what, "block N=%d mask=%d train=%d params of %s", N, with_mask, training,
             sub[k].name);
    /* single_att's ln_z_b has an exactly-zero gradient (softmax shift invariance); the
     * vector relerr over the checked set still measures the others. */
    mf_test_gradcheck(what, block_loss, &x, flat + a, gflat + a, b - a, 12, 1e-6, 1e-6);
  }
}

int main(void) {
  mf_test_begin("test_pairformer");
  test_counts_and_init();
  test_block(1, 0, 1);
  test_block(5, 1, 1);
  test_block(6, 0, 0);
  return mf_test_end();
}
