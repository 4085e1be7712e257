/* test_gemm_linear.c — mf_gemm (all four transpose combinations, odd sizes, padded
 * leading dimensions, beta 0/1, NaN in C with beta = 0, alpha = 0 / K = 0, batched) on
 * both backends (OpenBLAS and the built-in loop), and mf_linear forward/backward against
 * naive double loops, finite-difference gradient checks, and the gradient contract
 * (dinp assigns, dweight/dbias accumulate, NULL skips). Links the double build.
 * Not a GEMM benchmark. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ops/gemm.h"
#include "ops/linear.h"

_Static_assert(sizeof(mf_real) == sizeof(double), "test_gemm_linear links the double build");

#define SENTINEL 12345.0 /* written into leading-dimension padding; must survive */

/* element (i, k) of op(A) where op(A) is (M, K) */
static double opa(int ta, const double *A, int64_t lda, int64_t i, int64_t k) {
  return ta ? A[k * lda + i] : A[i * lda + k];
}

/* One mf_gemm call against the naive triple loop. */
static void check_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, double beta,
                       int pad, uint64_t seed, const char *backend) {
  int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  int64_t arows = ta ? K : M, brows = tb ? N : K;
  double *A = mf_test_alloc(arows * lda), *B = mf_test_alloc(brows * ldb);
  double *Cm = mf_test_alloc(M * ldc), *ref = mf_test_alloc(M * N), *got = mf_test_alloc(M * N);
  mf_test_randn(A, arows * lda, seed, 1.0);
  mf_test_randn(B, brows * ldb, seed + 1, 1.0);
  if (beta == 0)
    mf_test_poison(Cm, M * ldc); /* NaN in C must not leak through beta = 0 */
  else
    mf_test_randn(Cm, M * ldc, seed + 2, 1.0);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = N; j < ldc; j++) Cm[i * ldc + j] = SENTINEL;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++)
        s += opa(ta, A, lda, i, k) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      ref[i * N + j] = alpha * s + (beta == 0 ? 0 : beta * Cm[i * ldc + j]);
    }
  mf_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc);
  int pad_ok = 1;
  for (int64_t i = 0; i < M; i++) {
    for (int64_t j = 0; j < N; j++) got[i * N + j] = Cm[i * ldc + j];
    for (int64_t j = N; j < ldc; j++) pad_ok &= Cm[i * ldc + j] == SENTINEL;
  }
  char what[160];
  snprintf(what, sizeof what, "gemm %s ta=%d tb=%d M=%lld N=%lld K=%lld alpha=%g beta=%g pad=%d",
           backend, ta, tb, (long long)M, (long long)N, (long long)K, alpha, beta, pad);
  mf_test_close(what, got, ref, M * N, 1e-13); /* double, sums of <= 65 terms */
  MF_TEST(pad_ok, "%s: padding beyond N untouched", what);
}

static void test_gemm_backend(int use_blas) {
  const char *name = use_blas ? "blas" : "loop";
  static const int64_t sizes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {65, 70, 9}, {3, 129, 2}};
  uint64_t seed = 100;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        check_gemm(ta, tb, sizes[s][0], sizes[s][1], sizes[s][2], 1.0, 0.0, 0, seed++, name);
        check_gemm(ta, tb, sizes[s][0], sizes[s][1], sizes[s][2], 0.7, 1.0, 3, seed++, name);
      }
  check_gemm(0, 1, 9, 4, 6, -1.5, 0.5, 1, seed++, name);

  /* alpha = 0 and K = 0: C = beta·C exactly, A and B not read */
  double Cm[6], ref[6];
  mf_test_randn(Cm, 6, 7, 1.0);
  for (int i = 0; i < 6; i++) ref[i] = 0.5 * Cm[i];
  mf_gemm(0, 0, 2, 3, 0, 1.0, NULL, 1, NULL, 3, 0.5, Cm, 3);
  MF_TEST(mf_test_maxabs(Cm, ref, 6) == 0, "gemm %s K=0: C = beta*C", name);
  mf_test_poison(Cm, 6);
  double A[4] = {1, 2, 3, 4}, B[6] = {1, 2, 3, 4, 5, 6};
  mf_gemm(0, 0, 2, 3, 2, 0.0, A, 2, B, 3, 0.0, Cm, 3);
  int zero = 1;
  for (int i = 0; i < 6; i++) zero &= Cm[i] == 0;
  MF_TEST(zero, "gemm %s alpha=0 beta=0 over NaN: C = 0", name);

  /* batched: three products with gaps between them */
  const int64_t M = 5, N = 6, K = 7, batch = 3;
  const int64_t lda = M, ldb = N + 1, ldc = N;                     /* transa, not transb */
  const int64_t sA = K * lda + 3, sB = K * ldb + 5, sC = M * ldc + 2; /* strides with gaps */
  double *Ab = mf_test_alloc(batch * sA), *Bb = mf_test_alloc(batch * sB);
  double *Cb = mf_test_alloc(batch * sC), *rb = mf_test_alloc(batch * M * N);
  double *gb = mf_test_alloc(batch * M * N);
  mf_test_randn(Ab, batch * sA, 11, 1.0);
  mf_test_randn(Bb, batch * sB, 12, 1.0);
  mf_test_randn(Cb, batch * sC, 13, 1.0);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++) s += Ab[b * sA + k * lda + i] * Bb[b * sB + k * ldb + j];
        rb[(b * M + i) * N + j] = 2.0 * s + Cb[b * sC + i * ldc + j];
      }
  double gapC = Cb[sC - 1];
  mf_gemm_batched(1, 0, M, N, K, 2.0, Ab, lda, sA, Bb, ldb, sB, 1.0, Cb, ldc, sC, batch);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < M * N; i++) gb[b * M * N + i] = Cb[b * sC + i];
  char what[64];
  snprintf(what, sizeof what, "gemm_batched %s", name);
  mf_test_close(what, gb, rb, batch * M * N, 1e-13);
  MF_TEST(Cb[sC - 1] == gapC, "gemm_batched %s: gap between C matrices untouched", name);
}

static void test_gemm(void) {
  int prev = mf_gemm_use_blas(0);
  MF_TEST(mf_gemm_use_blas(0) == 0, "mf_gemm_use_blas returns the previous choice");
  test_gemm_backend(0);
#ifdef MF_HAVE_BLAS
  MF_TEST(prev == 1, "OpenBLAS is the default when the build has it");
  MF_TEST(mf_gemm_use_blas(1) == 0 && mf_gemm_use_blas(1) == 1, "switch to OpenBLAS");
  test_gemm_backend(1);
#else
  MF_TEST(prev == 0 && mf_gemm_use_blas(1) == 0, "without OpenBLAS the loop is always used");
#endif
  mf_gemm_use_blas(prev);
}

/* ------------------------------------------------------------------ linear */

typedef struct {
  double *out, *inp, *w, *b, *wt; /* out (M, O), inp (M, I), w (O, I), b (O), wt (M, O) */
  int64_t M;
  int I, O;
} lin_ctx;

static double lin_loss(void *p) {
  lin_ctx *c = p;
  mf_linear_forward(c->out, c->inp, c->w, c->b, c->M, c->I, c->O);
  return mf_test_dot(c->out, c->wt, c->M * c->O);
}

static void test_linear_case(int64_t M, int I, int O, int with_bias, uint64_t seed,
                             const char *backend) {
  char what[128];
  double *inp = mf_test_alloc(M * I), *w = mf_test_alloc((int64_t)O * I);
  double *b = with_bias ? mf_test_alloc(O) : NULL, *out = mf_test_alloc(M * O);
  double *ref = mf_test_alloc(M * O), *dout = mf_test_alloc(M * O);
  mf_test_randn(inp, M * I, seed, 1.0);
  mf_test_randn(w, (int64_t)O * I, seed + 1, 0.5);
  if (b) mf_test_randn(b, O, seed + 2, 1.0);
  mf_test_randn(dout, M * O, seed + 3, 1.0);

  /* forward vs out[m,o] = Σ_i inp[m,i]·w[o,i] + b[o] */
  for (int64_t m = 0; m < M; m++)
    for (int o = 0; o < O; o++) {
      double s = b ? b[o] : 0;
      for (int i = 0; i < I; i++) s += inp[m * I + i] * w[(int64_t)o * I + i];
      ref[m * O + o] = s;
    }
  mf_test_poison(out, M * O);
  mf_linear_forward(out, inp, w, b, M, I, O);
  snprintf(what, sizeof what, "linear %s fwd M=%lld I=%d O=%d bias=%d", backend, (long long)M, I,
           O, with_bias);
  mf_test_close(what, out, ref, M * O, 1e-13);

  /* backward vs the naive formulas, on top of random existing gradients */
  double *dinp = mf_test_alloc(M * I), *dw = mf_test_alloc((int64_t)O * I), *db = mf_test_alloc(O);
  double *dw0 = mf_test_alloc((int64_t)O * I), *db0 = mf_test_alloc(O);
  double *rdinp = mf_test_alloc(M * I), *rdw = mf_test_alloc((int64_t)O * I), *rdb = mf_test_alloc(O);
  mf_test_randn(dw0, (int64_t)O * I, seed + 4, 1.0);
  mf_test_randn(db0, O, seed + 5, 1.0);
  for (int64_t m = 0; m < M; m++)
    for (int i = 0; i < I; i++) {
      double s = 0;
      for (int o = 0; o < O; o++) s += dout[m * O + o] * w[(int64_t)o * I + i];
      rdinp[m * I + i] = s;
    }
  for (int o = 0; o < O; o++) {
    double sb = 0;
    for (int64_t m = 0; m < M; m++) sb += dout[m * O + o];
    rdb[o] = db0[o] + sb;
    for (int i = 0; i < I; i++) {
      double s = 0;
      for (int64_t m = 0; m < M; m++) s += dout[m * O + o] * inp[m * I + i];
      rdw[(int64_t)o * I + i] = dw0[(int64_t)o * I + i] + s;
    }
  }
  mf_test_poison(dinp, M * I); /* dinp assigns: poison must be overwritten */
  memcpy(dw, dw0, sizeof(double) * (size_t)O * (size_t)I);
  memcpy(db, db0, sizeof(double) * (size_t)O);
  mf_linear_backward(dinp, dw, b ? db : NULL, dout, inp, w, M, I, O);
  snprintf(what, sizeof what, "linear %s bwd dinp (assigns) M=%lld I=%d O=%d", backend,
           (long long)M, I, O);
  mf_test_close(what, dinp, rdinp, M * I, 1e-13);
  snprintf(what, sizeof what, "linear %s bwd dweight (accumulates)", backend);
  mf_test_close(what, dw, rdw, (int64_t)O * I, 1e-13);
  if (b) {
    snprintf(what, sizeof what, "linear %s bwd dbias (accumulates)", backend);
    mf_test_close(what, db, rdb, O, 1e-13);
  }

  /* NULL skips: only dbias; dinp and dweight untouched */
  if (b) {
    memcpy(db, db0, sizeof(double) * (size_t)O);
    mf_linear_backward(NULL, NULL, db, dout, inp, w, M, I, O);
    snprintf(what, sizeof what, "linear %s bwd dbias alone", backend);
    mf_test_close(what, db, rdb, O, 1e-13);
  }

  /* finite differences of L = Σ out ⊙ dout; tol 1e-6: central differences in double with
   * h = 1e-6 on a function that is linear in each input (truncation error is zero, the
   * remaining error is rounding, ~1e-10 relative) */
  lin_ctx c = {out, inp, w, b, dout, M, I, O};
  memset(dw, 0, sizeof(double) * (size_t)O * (size_t)I);
  memset(db, 0, sizeof(double) * (size_t)O);
  mf_linear_backward(dinp, dw, b ? db : NULL, dout, inp, w, M, I, O);
  snprintf(what, sizeof what, "linear %s dinp", backend);
  mf_test_gradcheck(what, lin_loss, &c, inp, dinp, M * I, 40, 1e-6, 1e-6);
  snprintf(what, sizeof what, "linear %s dweight", backend);
  mf_test_gradcheck(what, lin_loss, &c, w, dw, (int64_t)O * I, 40, 1e-6, 1e-6);
  if (b) {
    snprintf(what, sizeof what, "linear %s dbias", backend);
    mf_test_gradcheck(what, lin_loss, &c, b, db, O, 40, 1e-6, 1e-6);
  }
}

static void linear_bad_dims(void *ctx) {
  double *x = ctx;
  mf_linear_forward(x, x, x, NULL, 1, 0, 1);
}

static void test_linear(void) {
  int prev = mf_gemm_use_blas(0);
  for (int be = 0; be < 2; be++) {
    mf_gemm_use_blas(be);
    const char *name = be && prev ? "blas" : "loop";
    test_linear_case(13, 37, 11, 1, 200, name);
    test_linear_case(13, 37, 11, 0, 210, name);
    test_linear_case(1, 1, 1, 1, 220, name);
    test_linear_case(70, 5, 33, 1, 230, name);
  }
  mf_gemm_use_blas(prev);
  double x[4] = {0};
  MF_TEST(mf_test_expect_fatal(linear_bad_dims, x, "linear dims"),
          "linear with I=0 is fatal: %s", mf_test_last_fatal());
}

int main(void) {
  mf_test_begin("test_gemm_linear");
  test_gemm();
  test_linear();
  return mf_test_end();
}
