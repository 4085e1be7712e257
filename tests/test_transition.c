/* test_transition.c — the SwiGLU transition (spec §4.2): forward against a naive double
 * loop written from the equations, finite-difference checks of every gradient (inp,
 * gamma, beta, w_a, w_b, w_o) in modes FULL (trunk), IDENTITY (after AdaLN), SCALE and
 * NONE, M across the recompute chunk (MF_TRANSITION_CHUNK), and the gradient contract
 * (dinp assigns, parameter gradients accumulate, NULL skips). Links the double build.
 * Not a test of the residual add or of the conditioned gate (test_adaln.c). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ops/transition.h"

_Static_assert(sizeof(mf_real) == sizeof(double), "test_transition links the double build");

static const char *mode_name(mf_ln_mode mode) {
  switch (mode) {
    case MF_LN_FULL: return "full";
    case MF_LN_SCALE: return "scale";
    case MF_LN_NONE: return "none";
    case MF_LN_IDENTITY: return "identity";
  }
  return "?";
}

/* out = (silu(x̂·W_aᵀ) ⊙ (x̂·W_bᵀ))·W_oᵀ with x̂ = LN(x) (or x for IDENTITY) */
static void naive_transition(double *out, const double *x, const double *g, const double *b,
                             const double *wa, const double *wb, const double *wo, int64_t M,
                             int C, int Hd, mf_ln_mode mode) {
  double xh[64], h[256];
  MF_ASSERT(C <= 64 && Hd <= 256, "naive_transition: test sizes only");
  for (int64_t m = 0; m < M; m++) {
    const double *xr = x + m * C;
    double mu = 0, var = 0;
    for (int c = 0; c < C; c++) mu += xr[c];
    mu /= C;
    for (int c = 0; c < C; c++) var += (xr[c] - mu) * (xr[c] - mu);
    double r = 1.0 / sqrt(var / C + 1e-5);
    for (int c = 0; c < C; c++) {
      double v = mode == MF_LN_IDENTITY ? xr[c] : (xr[c] - mu) * r;
      if (mode == MF_LN_FULL || mode == MF_LN_SCALE) v *= g[c];
      if (mode == MF_LN_FULL) v += b[c];
      xh[c] = v;
    }
    for (int j = 0; j < Hd; j++) {
      double av = 0, bv = 0;
      for (int c = 0; c < C; c++) {
        av += xh[c] * wa[(int64_t)j * C + c];
        bv += xh[c] * wb[(int64_t)j * C + c];
      }
      h[j] = av / (1.0 + exp(-av)) * bv;
    }
    for (int c = 0; c < C; c++) {
      double s = 0;
      for (int j = 0; j < Hd; j++) s += h[j] * wo[(int64_t)c * Hd + j];
      out[m * C + c] = s;
    }
  }
}

typedef struct {
  double *out, *mean, *rstd, *x, *g, *b, *wa, *wb, *wo, *wt;
  int64_t M;
  int C, Hd;
  mf_ln_mode mode;
} ctx_t;

static double loss(void *p) {
  ctx_t *c = p;
  mf_transition_forward(c->out, c->mean, c->rstd, c->x, c->g, c->b, c->wa, c->wb, c->wo, c->M,
                        c->C, c->Hd, c->mode);
  return mf_test_dot(c->out, c->wt, c->M * c->C);
}

static void test_case(int64_t M, int C, int Hd, mf_ln_mode mode, uint64_t seed) {
  char what[160], tag[80];
  snprintf(tag, sizeof tag, "transition %s M=%lld C=%d Hd=%d", mode_name(mode), (long long)M, C,
           Hd);
  const int64_t MC = M * C, HC = (int64_t)Hd * C;
  int ln = mode != MF_LN_IDENTITY, has_g = mode == MF_LN_FULL || mode == MF_LN_SCALE,
      has_b = mode == MF_LN_FULL;
  double *x = mf_test_alloc(MC), *g = mf_test_alloc(C), *b = mf_test_alloc(C);
  double *wa = mf_test_alloc(HC), *wb = mf_test_alloc(HC), *wo = mf_test_alloc(HC);
  double *dout = mf_test_alloc(MC);
  mf_test_randn(x, MC, seed, 1.0);
  for (int64_t i = 0; i < MC; i++) x[i] += 0.2;
  mf_test_randu(g, C, seed + 1, 0.5, 1.5);
  mf_test_randn(b, C, seed + 2, 0.5);
  mf_test_randn(wa, HC, seed + 3, 1.0 / sqrt(C));
  mf_test_randn(wb, HC, seed + 4, 1.0 / sqrt(C));
  mf_test_randn(wo, HC, seed + 5, 1.0 / sqrt(Hd));
  mf_test_randn(dout, MC, seed + 6, 1.0);
  double *gp = has_g ? g : NULL, *bp = has_b ? b : NULL;

  double *out = mf_test_alloc(MC), *ref = mf_test_alloc(MC);
  double *mean = ln ? mf_test_alloc(M) : NULL, *rstd = ln ? mf_test_alloc(M) : NULL;
  naive_transition(ref, x, g, b, wa, wb, wo, M, C, Hd, mode);
  mf_test_poison(out, MC);
  if (ln) {
    mf_test_poison(mean, M);
    mf_test_poison(rstd, M);
  }
  mf_transition_forward(out, mean, rstd, x, gp, bp, wa, wb, wo, M, C, Hd, mode);
  snprintf(what, sizeof what, "%s fwd", tag);
  mf_test_close(what, out, ref, MC, 1e-12);
  if (ln) {
    int finite = 1;
    for (int64_t m = 0; m < M; m++) finite &= isfinite(mean[m]) && rstd[m] > 0;
    MF_TEST(finite, "%s: mean/rstd written", tag);
  }

  /* all gradients from zero */
  double *dx = mf_test_alloc(MC), *dg = mf_test_alloc(C), *db = mf_test_alloc(C);
  double *dwa = mf_test_alloc(HC), *dwb = mf_test_alloc(HC), *dwo = mf_test_alloc(HC);
  mf_test_poison(dx, MC);
  mf_transition_backward(dx, has_g ? dg : NULL, has_b ? db : NULL, dwa, dwb, dwo, dout, mean,
                         rstd, x, gp, bp, wa, wb, wo, M, C, Hd, mode);

  /* contract: on top of random existing gradients the parameter gradients add, dinp
   * assigns; NULL gradients are skipped and do not change the others */
  double *ex = mf_test_alloc(MC), *eg = mf_test_alloc(C), *eb = mf_test_alloc(C);
  double *ewa = mf_test_alloc(HC), *ewb = mf_test_alloc(HC), *ewo = mf_test_alloc(HC);
  mf_test_randn(ex, MC, seed + 7, 1.0);
  mf_test_randn(eg, C, seed + 8, 1.0);
  mf_test_randn(eb, C, seed + 9, 1.0);
  mf_test_randn(ewa, HC, seed + 10, 1.0);
  mf_test_randn(ewb, HC, seed + 11, 1.0);
  mf_test_randn(ewo, HC, seed + 12, 1.0);
  mf_transition_backward(ex, has_g ? eg : NULL, has_b ? eb : NULL, ewa, ewb, ewo, dout, mean,
                         rstd, x, gp, bp, wa, wb, wo, M, C, Hd, mode);
  snprintf(what, sizeof what, "%s dinp assigns", tag);
  mf_test_close(what, ex, dx, MC, 1e-13);
  mf_test_accumulates(tag, "dw_a", ewa, dwa, HC, seed + 10, 1e-13);
  mf_test_accumulates(tag, "dw_b", ewb, dwb, HC, seed + 11, 1e-13);
  mf_test_accumulates(tag, "dw_o", ewo, dwo, HC, seed + 12, 1e-13);
  if (has_g) mf_test_accumulates(tag, "dgamma", eg, dg, C, seed + 8, 1e-13);
  if (has_b) mf_test_accumulates(tag, "dbeta", eb, db, C, seed + 9, 1e-13);

  mf_test_poison(ex, MC);
  mf_transition_backward(ex, NULL, NULL, NULL, NULL, NULL, dout, mean, rstd, x, gp, bp, wa, wb, wo,
                         M, C, Hd, mode);
  snprintf(what, sizeof what, "%s dinp alone", tag);
  mf_test_close(what, ex, dx, MC, 1e-13);
  memset(ewo, 0, sizeof(double) * (size_t)HC);
  mf_transition_backward(NULL, NULL, NULL, NULL, NULL, ewo, dout, mean, rstd, x, gp, bp, wa, wb,
                         wo, M, C, Hd, mode);
  snprintf(what, sizeof what, "%s dw_o alone", tag);
  mf_test_close(what, ewo, dwo, HC, 1e-13);
  memset(ewa, 0, sizeof(double) * (size_t)HC);
  mf_transition_backward(NULL, NULL, NULL, ewa, NULL, NULL, dout, mean, rstd, x, gp, bp, wa, wb,
                         wo, M, C, Hd, mode);
  snprintf(what, sizeof what, "%s dw_a alone", tag);
  mf_test_close(what, ewa, dwa, HC, 1e-13);

  /* finite differences of L = Σ out ⊙ dout, every gradient. tol 1e-6: central differences
   * in double with h = 1e-6 (truncation ~h²·|f'''| ~ 1e-12, rounding ~1e-10 relative) */
  ctx_t c = {out, mean, rstd, x, gp, bp, wa, wb, wo, dout, M, C, Hd, mode};
  snprintf(what, sizeof what, "%s dinp", tag);
  mf_test_gradcheck(what, loss, &c, x, dx, MC, 40, 1e-6, 1e-6);
  snprintf(what, sizeof what, "%s dw_a", tag);
  mf_test_gradcheck(what, loss, &c, wa, dwa, HC, 40, 1e-6, 1e-6);
  snprintf(what, sizeof what, "%s dw_b", tag);
  mf_test_gradcheck(what, loss, &c, wb, dwb, HC, 40, 1e-6, 1e-6);
  snprintf(what, sizeof what, "%s dw_o", tag);
  mf_test_gradcheck(what, loss, &c, wo, dwo, HC, 40, 1e-6, 1e-6);
  if (has_g) {
    snprintf(what, sizeof what, "%s dgamma", tag);
    mf_test_gradcheck(what, loss, &c, g, dg, C, 40, 1e-6, 1e-6);
  }
  if (has_b) {
    snprintf(what, sizeof what, "%s dbeta", tag);
    mf_test_gradcheck(what, loss, &c, b, db, C, 40, 1e-6, 1e-6);
  }
}

static void no_stats(void *ctx) {
  double *p = ctx;
  mf_transition_forward(p, NULL, NULL, p, p, p, p, p, p, 1, 2, 2, MF_LN_FULL);
}

int main(void) {
  mf_test_begin("test_transition");
  static const mf_ln_mode modes[4] = {MF_LN_FULL, MF_LN_IDENTITY, MF_LN_SCALE, MF_LN_NONE};
  uint64_t seed = 3;
  for (int k = 0; k < 4; k++) {
    test_case(MF_TRANSITION_CHUNK + 6, 12, 24, modes[k], seed += 20); /* two chunks, n = 2 */
    test_case(5, 8, 32, modes[k], seed += 20);                        /* n = 4 */
    test_case(1, 3, 6, modes[k], seed += 20);
  }
  double buf[8] = {0};
  MF_TEST(mf_test_expect_fatal(no_stats, buf, "mean/rstd required"),
          "transition with LayerNorm but no mean/rstd is refused: %s", mf_test_last_fatal());
  return mf_test_end();
}
