/* test_loss.c — binned softmax cross-entropy and distogram helpers (src/ops/loss.h):
 * loss against a naive double loop (with and without weights, zero weights, all-zero
 * weights, large logits), finite-difference check of dlogits and the ASSIGN contract,
 * distogram bin edges at and around every boundary, symmetrisation forward (also in
 * place) and its gradient. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ops/loss.h"

static double ref_ce(const double *logits, const int32_t *t, const double *w, int64_t M, int K) {
  double num = 0, den = 0;
  for (int64_t m = 0; m < M; m++) {
    double s = 0;
    for (int k = 0; k < K; k++) s += exp(logits[m * K + k]);
    double p = exp(logits[m * K + t[m]]) / s;
    double wm = w ? w[m] : 1.0;
    num += wm * -log(p);
    den += wm;
  }
  return num / (den > 1e-8 ? den : 1e-8);
}

typedef struct {
  double *logits, *lse, *w;
  int32_t *t;
  int64_t M;
  int K;
  double scale;
} ctx_t;

static double loss_fn(void *p) {
  ctx_t *c = p;
  return c->scale * mf_softmax_ce_forward(c->lse, c->logits, c->t, c->w, c->M, c->K);
}

static void test_ce(void) {
  const int64_t M = 37;
  const int K = 64;
  ctx_t c = {.M = M, .K = K, .scale = 0.7};
  c.logits = mf_test_alloc(M * K);
  c.lse = mf_test_alloc(M);
  int32_t t[37];
  c.t = t;
  mf_test_randn(c.logits, M * K, 1, 2.0);
  for (int64_t m = 0; m < M; m++) t[m] = (int32_t)((m * 13 + 5) % K);
  t[0] = 0;
  t[1] = K - 1;
  double *wbuf = mf_test_alloc(M);
  mf_test_randu(wbuf, M, 2, 0.0, 2.0);
  wbuf[3] = wbuf[10] = 0; /* pairs with an unresolved atom */

  for (int weighted = 0; weighted < 2; weighted++) {
    double *w = weighted ? wbuf : NULL;
    c.w = w;
    mf_test_poison(c.lse, M);
    double got = mf_softmax_ce_forward(c.lse, c.logits, t, w, M, K);
    double ref = ref_ce(c.logits, t, w, M, K);
    MF_TEST(fabs(got - ref) <= 1e-13 * fabs(ref), "CE vs naive (weighted %d): %.15g vs %.15g",
            weighted, got, ref);
    double *lref = mf_test_alloc(M);
    for (int64_t m = 0; m < M; m++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += exp(c.logits[m * K + k]);
      lref[m] = log(s);
    }
    mf_test_close("lse saved", c.lse, lref, M, 1e-14);

    double *dl = mf_test_alloc(M * K);
    mf_test_poison(dl, M * K);
    mf_softmax_ce_backward(dl, c.scale, c.lse, c.logits, t, w, M, K);
    /* analytic check from the formula, independent of the code path */
    double *dref = mf_test_alloc(M * K), ws = 0;
    for (int64_t m = 0; m < M; m++) ws += w ? w[m] : 1;
    for (int64_t m = 0; m < M; m++)
      for (int k = 0; k < K; k++)
        dref[m * K + k] = c.scale * (w ? w[m] : 1) / ws *
                          (exp(c.logits[m * K + k] - lref[m]) - (k == t[m]));
    mf_test_close("dlogits vs formula", dl, dref, M * K, 1e-13);
    char what[48];
    snprintf(what, sizeof what, "dlogits (weighted %d)", weighted);
    mf_test_gradcheck(what, loss_fn, &c, c.logits, dl, M * K, 600, 1e-6, 1e-6);
    if (weighted) {
      double z = 0;
      for (int k = 0; k < K; k++) z += fabs(dl[3 * K + k]) + fabs(dl[10 * K + k]);
      MF_TEST(z == 0, "zero-weight rows get zero gradient (%g)", z);
    }
    /* each row of dlogits sums to 0 */
    double worst = 0;
    for (int64_t m = 0; m < M; m++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += dl[m * K + k];
      worst = fabs(s) > worst ? fabs(s) : worst;
    }
    MF_TEST(worst < 1e-15, "rows of dlogits sum to 0 (%g)", worst);
  }

  /* all weights zero: loss 0, gradient 0, no NaN */
  double *zw = mf_test_alloc(M), *dl = mf_test_alloc(M * K);
  double l0 = mf_softmax_ce_forward(c.lse, c.logits, t, zw, M, K);
  mf_test_poison(dl, M * K);
  mf_softmax_ce_backward(dl, 1.0, c.lse, c.logits, t, zw, M, K);
  double z = 0;
  for (int64_t k = 0; k < M * K; k++) z += fabs(dl[k]);
  MF_TEST(l0 == 0 && z == 0, "all weights zero: loss %g, |grad| %g", l0, z);

  /* large logits: stable (no overflow), loss of a confident right answer ≈ 0 */
  double big[2 * 3] = {1000, 0, -1000, 800, 900, 1000};
  int32_t tb[2] = {0, 1};
  double lse2[2];
  double lb = mf_softmax_ce_forward(lse2, big, tb, NULL, 2, 3);
  double expect = (0 + (100 + log1p(exp(-100) + exp(-200)))) / 2; /* row 1: lse − 900 */
  MF_TEST(isfinite(lb) && fabs(lb - expect) < 1e-12, "large logits: %.15g vs %.15g", lb, expect);
}

static void bad_target(void *p) {
  double l[4] = {0}, lse[2];
  int32_t t[2] = {0, 4};
  (void)p;
  mf_softmax_ce_forward(lse, l, t, NULL, 2, 2);
}

static void test_bins(void) {
  MF_TEST(mf_distogram_bin(0.0) == 0 && mf_distogram_bin(2.3124) == 0, "below the first edge: bin 0");
  MF_TEST(mf_distogram_bin(2.3125) == 1, "d = 2.3125 is bin 1");
  MF_TEST(mf_distogram_bin(21.6875) == 63 && mf_distogram_bin(21.68749) == 62,
          "21.6875 starts bin 63, just below is bin 62");
  MF_TEST(mf_distogram_bin(1e6) == 63 && mf_distogram_bin(INFINITY) == 63, "far: bin 63");
  int bad = 0;
  for (int k = 0; k <= 62; k++) {
    double e = 2.3125 + 0.3125 * k; /* edges written from the spec: 2 + 0.3125·(k+1) */
    if (fabs(e - (2 + 0.3125 * (k + 1))) > 0) bad++;
    if (mf_distogram_bin(e) != k + 1) bad++;
    if (mf_distogram_bin(nextafter(e, 0)) != k) bad++;
    if (mf_distogram_bin(e + 0.15) != k + 1) bad++;
  }
  MF_TEST(bad == 0, "every edge: at the edge bin k+1, one ulp below bin k (%d wrong)", bad);
  /* against a naive count of the edges passed, over a fine sweep */
  int wrong = 0;
  for (int q = 0; q < 30000; q++) {
    double d = q * 0.001;
    int n = 0;
    for (int k = 0; k <= 62; k++) n += d >= 2.3125 + 0.3125 * k;
    wrong += mf_distogram_bin(d) != n;
  }
  MF_TEST(wrong == 0, "sweep 0..30 Å matches the edge count (%d wrong)", wrong);
}

typedef struct {
  double *l, *out, *r;
  int N, K;
} sym_ctx;

static double sym_loss(void *p) {
  sym_ctx *c = p;
  mf_distogram_symmetrize_forward(c->out, c->l, c->N, c->K);
  return mf_test_dot(c->out, c->r, (int64_t)c->N * c->N * c->K);
}

static void test_symmetrize(void) {
  const int N = 5, K = 4;
  int64_t n = (int64_t)N * N * K;
  sym_ctx c = {.N = N, .K = K};
  c.l = mf_test_alloc(n);
  c.out = mf_test_alloc(n);
  c.r = mf_test_alloc(n);
  mf_test_randn(c.l, n, 3, 1.0);
  mf_test_randn(c.r, n, 4, 1.0);
  double *ref = mf_test_alloc(n);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++)
      for (int k = 0; k < K; k++)
        ref[((int64_t)i * N + j) * K + k] = c.l[((int64_t)i * N + j) * K + k] + c.l[((int64_t)j * N + i) * K + k];
  mf_test_poison(c.out, n);
  mf_distogram_symmetrize_forward(c.out, c.l, N, K);
  MF_TEST(memcmp(c.out, ref, (size_t)n * sizeof *ref) == 0, "symmetrise forward exact");
  double *inpl = mf_test_alloc(n);
  memcpy(inpl, c.l, (size_t)n * sizeof *inpl);
  mf_distogram_symmetrize_forward(inpl, inpl, N, K);
  MF_TEST(memcmp(inpl, ref, (size_t)n * sizeof *ref) == 0, "symmetrise in place");

  double *dl = mf_test_alloc(n);
  mf_test_poison(dl, n);
  mf_distogram_symmetrize_backward(dl, c.r, N, K);
  mf_test_gradcheck("symmetrise dl", sym_loss, &c, c.l, dl, n, 1000, 1e-6, 1e-8);
  double *dref = mf_test_alloc(n);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++)
      for (int k = 0; k < K; k++)
        dref[((int64_t)i * N + j) * K + k] = c.r[((int64_t)i * N + j) * K + k] + c.r[((int64_t)j * N + i) * K + k];
  MF_TEST(memcmp(dl, dref, (size_t)n * sizeof *dl) == 0, "symmetrise backward exact (diagonal 2·dout)");
}

int main(void) {
  mf_test_begin("test_loss");
  test_ce();
  MF_TEST(mf_test_expect_fatal(bad_target, NULL, "target[1] = 4"), "out-of-range target is fatal: %s",
          mf_test_last_fatal());
  test_bins();
  test_symmetrize();
  return mf_test_end();
}
