/* test_layernorm.c — mf_layernorm_forward/backward in the three modes (FULL, SCALE,
 * NONE) against a naive double LayerNorm written from the equations (spec §4.1),
 * finite-difference gradient checks wrt input, gamma and beta, the gradient contract
 * (dinp assigns, dgamma/dbeta accumulate, NULL skips), the edge cases M = 1, C = 1 and
 * an odd C = 37, and the refusal of MF_LN_IDENTITY. Links the double build.
 * Not a test of the fused LN + linear (test_ln_linear.c) or of the float path (test_ops_f32.c). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ops/layernorm.h"

_Static_assert(sizeof(mf_real) == sizeof(double), "test_layernorm links the double build");

static const char *mode_name(mf_ln_mode mode) {
  return mode == MF_LN_FULL ? "full" : mode == MF_LN_SCALE ? "scale" : "none";
}

/* y = γ ⊙ (x − μ)/sqrt(var + 1e-5) + β per row, population variance */
static void naive_ln(double *y, double *mu_out, double *r_out, const double *x, const double *g,
                     const double *b, int64_t M, int C, mf_ln_mode mode) {
  for (int64_t m = 0; m < M; m++) {
    const double *xr = x + m * C;
    double mu = 0, var = 0;
    for (int c = 0; c < C; c++) mu += xr[c];
    mu /= C;
    for (int c = 0; c < C; c++) var += (xr[c] - mu) * (xr[c] - mu);
    var /= C;
    double r = 1.0 / sqrt(var + 1e-5);
    mu_out[m] = mu;
    r_out[m] = r;
    for (int c = 0; c < C; c++) {
      double v = (xr[c] - mu) * r;
      y[m * C + c] = mode == MF_LN_NONE ? v : mode == MF_LN_SCALE ? g[c] * v : g[c] * v + b[c];
    }
  }
}

typedef struct {
  double *out, *mean, *rstd, *x, *g, *b, *wt; /* out, x, wt (M, C); mean, rstd (M); g, b (C) */
  int64_t M;
  int C;
  mf_ln_mode mode;
} ln_ctx;

static double ln_loss(void *p) {
  ln_ctx *c = p;
  mf_layernorm_forward(c->out, c->mean, c->rstd, c->x, c->g, c->b, c->M, c->C, c->mode);
  return mf_test_dot(c->out, c->wt, c->M * c->C);
}

static void test_case(int64_t M, int C, mf_ln_mode mode, uint64_t seed) {
  char what[128], tag[64];
  snprintf(tag, sizeof tag, "ln %s M=%lld C=%d", mode_name(mode), (long long)M, C);
  double *x = mf_test_alloc(M * C), *g = mf_test_alloc(C), *b = mf_test_alloc(C);
  double *out = mf_test_alloc(M * C), *mean = mf_test_alloc(M), *rstd = mf_test_alloc(M);
  double *ref = mf_test_alloc(M * C), *rmean = mf_test_alloc(M), *rrstd = mf_test_alloc(M);
  double *dout = mf_test_alloc(M * C);
  mf_test_randn(x, M * C, seed, 2.0);
  for (int64_t i = 0; i < M * C; i++) x[i] += 0.5; /* non-zero mean */
  mf_test_randu(g, C, seed + 1, 0.5, 1.5);
  mf_test_randn(b, C, seed + 2, 1.0);
  mf_test_randn(dout, M * C, seed + 3, 1.0);
  /* gamma/beta are not read in the modes that do not use them */
  const double *gp = mode == MF_LN_NONE ? NULL : g, *bp = mode == MF_LN_FULL ? b : NULL;

  naive_ln(ref, rmean, rrstd, x, g, b, M, C, mode);
  mf_test_poison(out, M * C);
  mf_test_poison(mean, M);
  mf_test_poison(rstd, M);
  mf_layernorm_forward(out, mean, rstd, x, gp, bp, M, C, mode);
  snprintf(what, sizeof what, "%s fwd out", tag);
  mf_test_close(what, out, ref, M * C, 1e-12);
  snprintf(what, sizeof what, "%s fwd mean", tag);
  mf_test_close(what, mean, rmean, M, 1e-12);
  snprintf(what, sizeof what, "%s fwd rstd", tag);
  mf_test_close(what, rstd, rrstd, M, 1e-12);

  /* backward vs the naive formulas, on top of random existing parameter gradients */
  double *dx = mf_test_alloc(M * C), *dg = mf_test_alloc(C), *db = mf_test_alloc(C);
  double *dg0 = mf_test_alloc(C), *db0 = mf_test_alloc(C);
  double *rdx = mf_test_alloc(M * C), *rdg = mf_test_alloc(C), *rdb = mf_test_alloc(C);
  mf_test_randn(dg0, C, seed + 4, 1.0);
  mf_test_randn(db0, C, seed + 5, 1.0);
  memcpy(rdg, dg0, sizeof(double) * (size_t)C);
  memcpy(rdb, db0, sizeof(double) * (size_t)C);
  for (int64_t m = 0; m < M; m++) {
    double sg = 0, sgx = 0;
    for (int c = 0; c < C; c++) {
      double xh = (x[m * C + c] - rmean[m]) * rrstd[m];
      double gg = dout[m * C + c] * (mode == MF_LN_NONE ? 1.0 : g[c]);
      sg += gg;
      sgx += gg * xh;
      rdg[c] += dout[m * C + c] * xh;
      rdb[c] += dout[m * C + c];
    }
    for (int c = 0; c < C; c++) {
      double xh = (x[m * C + c] - rmean[m]) * rrstd[m];
      double gg = dout[m * C + c] * (mode == MF_LN_NONE ? 1.0 : g[c]);
      rdx[m * C + c] = rrstd[m] * (gg - sg / C - xh * sgx / C);
    }
  }
  mf_test_poison(dx, M * C);
  memcpy(dg, dg0, sizeof(double) * (size_t)C);
  memcpy(db, db0, sizeof(double) * (size_t)C);
  mf_layernorm_backward(dx, dg, db, dout, mean, rstd, x, gp, M, C, mode);
  snprintf(what, sizeof what, "%s bwd dinp (assigns)", tag);
  mf_test_close(what, dx, rdx, M * C, 1e-11);
  snprintf(what, sizeof what, "%s bwd dgamma (accumulates)", tag);
  if (mode != MF_LN_NONE) mf_test_close(what, dg, rdg, C, 1e-12);
  else MF_TEST(mf_test_maxabs(dg, dg0, C) == 0, "%s: dgamma untouched in mode none", tag);
  snprintf(what, sizeof what, "%s bwd dbeta (accumulates)", tag);
  if (mode == MF_LN_FULL) mf_test_close(what, db, rdb, C, 1e-12);
  else MF_TEST(mf_test_maxabs(db, db0, C) == 0, "%s: dbeta untouched outside mode full", tag);

  /* NULL skips: dinp alone */
  mf_test_poison(dx, M * C);
  mf_layernorm_backward(dx, NULL, NULL, dout, mean, rstd, x, gp, M, C, mode);
  snprintf(what, sizeof what, "%s bwd dinp alone", tag);
  mf_test_close(what, dx, rdx, M * C, 1e-11);

  /* finite differences of L = Σ out ⊙ dout. tol 1e-6: central differences in double
   * with h = 1e-6 have truncation error ~h²·|f'''| ≈ 1e-12 and rounding ~1e-10 here */
  ln_ctx c = {out, mean, rstd, x, (double *)gp, (double *)bp, dout, M, C, mode};
  memset(dg, 0, sizeof(double) * (size_t)C);
  memset(db, 0, sizeof(double) * (size_t)C);
  mf_layernorm_backward(dx, dg, db, dout, mean, rstd, x, gp, M, C, mode);
  snprintf(what, sizeof what, "%s dinp", tag);
  mf_test_gradcheck(what, ln_loss, &c, x, dx, M * C, 60, 1e-6, 1e-6);
  if (mode != MF_LN_NONE) {
    snprintf(what, sizeof what, "%s dgamma", tag);
    mf_test_gradcheck(what, ln_loss, &c, g, dg, C, 60, 1e-6, 1e-6);
  }
  if (mode == MF_LN_FULL) {
    snprintf(what, sizeof what, "%s dbeta", tag);
    mf_test_gradcheck(what, ln_loss, &c, b, db, C, 60, 1e-6, 1e-6);
  }
}

/* C = 1: x̂ = 0 for any x, so out = β, the input gradient is exactly 0 and rstd = 1/sqrt(eps) */
static void test_c1(void) {
  double x[3] = {-2, 0.5, 7}, g[1] = {1.7}, b[1] = {0.3}, out[3], mean[3], rstd[3];
  double dout[3] = {1, -2, 3}, dx[3], dg[1] = {0}, db[1] = {0};
  mf_test_poison(out, 3);
  mf_layernorm_forward(out, mean, rstd, x, g, b, 3, 1, MF_LN_FULL);
  int ok = 1;
  for (int i = 0; i < 3; i++)
    ok &= out[i] == 0.3 && mean[i] == x[i] && fabs(rstd[i] - 1 / sqrt(1e-5)) < 1e-9;
  MF_TEST(ok, "ln C=1: out = beta, mean = x, rstd = 1/sqrt(eps)");
  mf_test_poison(dx, 3);
  mf_layernorm_backward(dx, dg, db, dout, mean, rstd, x, g, 3, 1, MF_LN_FULL);
  MF_TEST(dx[0] == 0 && dx[1] == 0 && dx[2] == 0 && dg[0] == 0 && db[0] == 2,
          "ln C=1: dinp = 0, dgamma = 0, dbeta = sum dout (%g %g %g, %g, %g)", dx[0], dx[1], dx[2],
          dg[0], db[0]);
}

static void ln_identity(void *ctx) {
  double *p = ctx;
  mf_layernorm_forward(p, p + 4, p + 5, p + 6, NULL, NULL, 1, 4, MF_LN_IDENTITY);
}
static void ln_no_gamma(void *ctx) {
  double *p = ctx;
  mf_layernorm_forward(p, p + 4, p + 5, p + 6, NULL, NULL, 1, 4, MF_LN_SCALE);
}

int main(void) {
  mf_test_begin("test_layernorm");
  static const mf_ln_mode modes[3] = {MF_LN_FULL, MF_LN_SCALE, MF_LN_NONE};
  for (int k = 0; k < 3; k++) {
    test_case(17, 37, modes[k], 10 + 10 * (uint64_t)k);
    test_case(1, 37, modes[k], 50 + 10 * (uint64_t)k);
    test_case(6, 1, modes[k], 90 + 10 * (uint64_t)k);
    test_case(40, 8, modes[k], 130 + 10 * (uint64_t)k);
  }
  test_c1();
  double buf[16] = {0};
  MF_TEST(mf_test_expect_fatal(ln_identity, buf, "MF_LN_IDENTITY"),
          "MF_LN_IDENTITY is refused: %s", mf_test_last_fatal());
  MF_TEST(mf_test_expect_fatal(ln_no_gamma, buf, "gamma required"),
          "scale mode without gamma is refused: %s", mf_test_last_fatal());
  return mf_test_end();
}
