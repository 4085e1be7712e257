/* test_ln_linear.c — the fused LayerNorm + linear: forward and backward equal to the
 * unfused composition (mf_layernorm_* with mf_linear_*) to ~1e-12, forward against a
 * naive double loop, finite-difference checks of every gradient (inp, gamma, beta,
 * weight, bias) in modes FULL/SCALE/NONE with and without bias, M across the recompute
 * chunk (MF_LN_LINEAR_CHUNK), the gradient contract (dinp assigns, parameter gradients
 * accumulate, NULL skips) and mf_ln_linear_normalize. Links the double build.
 * Not a test of the parts alone (test_layernorm.c, test_gemm_linear.c do those). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ops/layernorm.h"
#include "ops/linear.h"
#include "ops/ln_linear.h"

_Static_assert(sizeof(mf_real) == sizeof(double), "test_ln_linear links the double build");

static const char *mode_name(mf_ln_mode mode) {
  return mode == MF_LN_FULL ? "full" : mode == MF_LN_SCALE ? "scale" : "none";
}

typedef struct {
  double *out, *mean, *rstd, *x, *g, *b, *w, *bias, *wt;
  int64_t M;
  int C, O;
  mf_ln_mode mode;
} ctx_t;

static double loss(void *p) {
  ctx_t *c = p;
  mf_ln_linear_forward(c->out, c->mean, c->rstd, c->x, c->g, c->b, c->w, c->bias, c->M, c->C,
                       c->O, c->mode);
  return mf_test_dot(c->out, c->wt, c->M * c->O);
}

static void test_case(int64_t M, int C, int O, mf_ln_mode mode, int with_bias, uint64_t seed) {
  char what[160], tag[80];
  snprintf(tag, sizeof tag, "ln_linear %s M=%lld C=%d O=%d bias=%d", mode_name(mode),
           (long long)M, C, O, with_bias);
  const int64_t MC = M * C, MO = M * O, OC = (int64_t)O * C;
  double *x = mf_test_alloc(MC), *g = mf_test_alloc(C), *b = mf_test_alloc(C);
  double *w = mf_test_alloc(OC), *bias = with_bias ? mf_test_alloc(O) : NULL;
  double *dout = mf_test_alloc(MO);
  mf_test_randn(x, MC, seed, 1.5);
  for (int64_t i = 0; i < MC; i++) x[i] -= 0.3;
  mf_test_randu(g, C, seed + 1, 0.5, 1.5);
  mf_test_randn(b, C, seed + 2, 1.0);
  mf_test_randn(w, OC, seed + 3, 1.0 / sqrt(C));
  if (bias) mf_test_randn(bias, O, seed + 4, 1.0);
  mf_test_randn(dout, MO, seed + 5, 1.0);
  double *gp = mode == MF_LN_NONE ? NULL : g, *bp = mode == MF_LN_FULL ? b : NULL;

  /* forward: fused vs composition vs naive */
  double *out = mf_test_alloc(MO), *mean = mf_test_alloc(M), *rstd = mf_test_alloc(M);
  double *y = mf_test_alloc(MC), *cout = mf_test_alloc(MO), *cmean = mf_test_alloc(M);
  double *crstd = mf_test_alloc(M), *nout = mf_test_alloc(MO);
  mf_test_poison(out, MO);
  mf_test_poison(mean, M);
  mf_test_poison(rstd, M);
  mf_ln_linear_forward(out, mean, rstd, x, gp, bp, w, bias, M, C, O, mode);
  mf_layernorm_forward(y, cmean, crstd, x, gp, bp, M, C, mode);
  mf_linear_forward(cout, y, w, bias, M, C, O);
  snprintf(what, sizeof what, "%s fwd == composition", tag);
  mf_test_close(what, out, cout, MO, 1e-12);
  snprintf(what, sizeof what, "%s fwd mean/rstd == layernorm's", tag);
  MF_TEST(mf_test_maxabs(mean, cmean, M) == 0 && mf_test_maxabs(rstd, crstd, M) == 0, "%s", what);
  for (int64_t m = 0; m < M; m++) { /* naive: LN from the equations, then the product */
    double mu = 0, var = 0;
    for (int c = 0; c < C; c++) mu += x[m * C + c];
    mu /= C;
    for (int c = 0; c < C; c++) var += (x[m * C + c] - mu) * (x[m * C + c] - mu);
    double r = 1.0 / sqrt(var / C + 1e-5);
    for (int o = 0; o < O; o++) {
      double s = bias ? bias[o] : 0;
      for (int c = 0; c < C; c++) {
        double v = (x[m * C + c] - mu) * r;
        if (mode != MF_LN_NONE) v *= g[c];
        if (mode == MF_LN_FULL) v += b[c];
        s += v * w[(int64_t)o * C + c];
      }
      nout[m * O + o] = s;
    }
  }
  snprintf(what, sizeof what, "%s fwd == naive", tag);
  mf_test_close(what, out, nout, MO, 1e-12);

  /* normalize from saved statistics == the layernorm forward's output */
  double *yn = mf_test_alloc(MC);
  mf_test_poison(yn, MC);
  mf_ln_linear_normalize(yn, mean, rstd, x, gp, bp, M, C, mode);
  snprintf(what, sizeof what, "%s normalize == layernorm fwd", tag);
  mf_test_close(what, yn, y, MC, 1e-15);

  /* backward: fused vs composition, both on top of the same random existing gradients */
  double *dx = mf_test_alloc(MC), *dg = mf_test_alloc(C), *db = mf_test_alloc(C);
  double *dw = mf_test_alloc(OC), *dbias = mf_test_alloc(O);
  double *cdx = mf_test_alloc(MC), *cdg = mf_test_alloc(C), *cdb = mf_test_alloc(C);
  double *cdw = mf_test_alloc(OC), *cdbias = mf_test_alloc(O), *dy = mf_test_alloc(MC);
  mf_test_randn(dg, C, seed + 6, 1.0);
  mf_test_randn(db, C, seed + 7, 1.0);
  mf_test_randn(dw, OC, seed + 8, 1.0);
  mf_test_randn(dbias, O, seed + 9, 1.0);
  memcpy(cdg, dg, sizeof(double) * (size_t)C);
  memcpy(cdb, db, sizeof(double) * (size_t)C);
  memcpy(cdw, dw, sizeof(double) * (size_t)OC);
  memcpy(cdbias, dbias, sizeof(double) * (size_t)O);
  mf_test_poison(dx, MC);
  mf_ln_linear_backward(dx, dg, db, dw, bias ? dbias : NULL, dout, mean, rstd, x, gp, bp, w, M, C,
                        O, mode);
  mf_linear_backward(dy, cdw, bias ? cdbias : NULL, dout, y, w, M, C, O);
  mf_layernorm_backward(cdx, cdg, cdb, dy, cmean, crstd, x, gp, M, C, mode);
  snprintf(what, sizeof what, "%s bwd dinp == composition", tag);
  mf_test_close(what, dx, cdx, MC, 1e-12);
  snprintf(what, sizeof what, "%s bwd dgamma == composition (accumulated)", tag);
  mf_test_close(what, dg, cdg, C, 1e-12);
  snprintf(what, sizeof what, "%s bwd dbeta == composition (accumulated)", tag);
  mf_test_close(what, db, cdb, C, 1e-12);
  snprintf(what, sizeof what, "%s bwd dweight == composition (accumulated)", tag);
  mf_test_close(what, dw, cdw, OC, 1e-12);
  snprintf(what, sizeof what, "%s bwd dbias == composition (accumulated)", tag);
  mf_test_close(what, dbias, cdbias, O, 1e-12);

  /* NULL skips: dinp alone, then dweight alone */
  double *dx2 = mf_test_alloc(MC), *dw2 = mf_test_alloc(OC), *dw0 = mf_test_alloc(OC);
  mf_test_poison(dx2, MC);
  mf_ln_linear_backward(dx2, NULL, NULL, NULL, NULL, dout, mean, rstd, x, gp, bp, w, M, C, O,
                        mode);
  snprintf(what, sizeof what, "%s bwd dinp alone", tag);
  mf_test_close(what, dx2, cdx, MC, 1e-12);
  mf_linear_backward(NULL, dw0, NULL, dout, y, w, M, C, O);
  mf_ln_linear_backward(NULL, NULL, NULL, dw2, NULL, dout, mean, rstd, x, gp, bp, w, M, C, O, mode);
  snprintf(what, sizeof what, "%s bwd dweight alone", tag);
  mf_test_close(what, dw2, dw0, OC, 1e-12);

  /* finite differences of L = Σ out ⊙ dout, every gradient. tol 1e-6: central differences
   * in double, h = 1e-6 (truncation ~1e-12, rounding ~1e-10 relative at these sizes) */
  memset(dg, 0, sizeof(double) * (size_t)C);
  memset(db, 0, sizeof(double) * (size_t)C);
  memset(dw, 0, sizeof(double) * (size_t)OC);
  memset(dbias, 0, sizeof(double) * (size_t)O);
  mf_ln_linear_backward(dx, dg, db, dw, bias ? dbias : NULL, dout, mean, rstd, x, gp, bp, w, M, C,
                        O, mode);
  ctx_t c = {out, mean, rstd, x, gp, bp, w, bias, dout, M, C, O, mode};
  snprintf(what, sizeof what, "%s dinp", tag);
  mf_test_gradcheck(what, loss, &c, x, dx, MC, 40, 1e-6, 1e-6);
  snprintf(what, sizeof what, "%s dweight", tag);
  mf_test_gradcheck(what, loss, &c, w, dw, OC, 40, 1e-6, 1e-6);
  if (bias) {
    snprintf(what, sizeof what, "%s dbias", tag);
    mf_test_gradcheck(what, loss, &c, bias, dbias, O, 40, 1e-6, 1e-6);
  }
  if (mode != MF_LN_NONE) {
    snprintf(what, sizeof what, "%s dgamma", tag);
    mf_test_gradcheck(what, loss, &c, g, dg, C, 40, 1e-6, 1e-6);
  }
  if (mode == MF_LN_FULL) {
    snprintf(what, sizeof what, "%s dbeta", tag);
    mf_test_gradcheck(what, loss, &c, b, db, C, 40, 1e-6, 1e-6);
  }
}

static void identity_refused(void *ctx) {
  double *p = ctx;
  mf_ln_linear_forward(p, p + 2, p + 3, p + 4, NULL, NULL, p + 6, NULL, 1, 2, 1, MF_LN_IDENTITY);
}

int main(void) {
  mf_test_begin("test_ln_linear");
  static const mf_ln_mode modes[3] = {MF_LN_FULL, MF_LN_SCALE, MF_LN_NONE};
  uint64_t seed = 1;
  for (int k = 0; k < 3; k++)
    for (int bias = 0; bias < 2; bias++) {
      test_case(70, 37, 23, modes[k], bias, seed += 10); /* two chunks, the second partial */
      test_case(MF_LN_LINEAR_CHUNK, 5, 7, modes[k], bias, seed += 10);
      test_case(2 * MF_LN_LINEAR_CHUNK + 1, 6, 3, modes[k], bias, seed += 10);
      test_case(1, 1, 3, modes[k], bias, seed += 10);
      test_case(3, 12, 1, modes[k], bias, seed += 10);
    }
  double buf[16] = {0};
  MF_TEST(mf_test_expect_fatal(identity_refused, buf, "not FULL, SCALE or NONE"),
          "ln_linear refuses MF_LN_IDENTITY: %s", mf_test_last_fatal());
  return mf_test_end();
}
