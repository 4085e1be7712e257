/* test_dropout.c — structured dropout (src/ops/dropout.h): the Philox mask (keep rate
 * ≈ 1−p, values 0 or 1/(1−p), element k = uniform k of the stream, determinism, distinct
 * streams), row-wise sharing over the first axis and column-wise over the second,
 * forward/backward and the fused residual form against naive loops, p = 0 identity. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ops/dropout.h"

static void test_mask(void) {
  const int64_t R = 512;
  const int C = 256;
  int64_t n = R * C;
  uint64_t seed = 42, st = mf_rng_stream(3, MF_RNG_DROPOUT, 5);
  double ps[3] = {0.15, 0.25, 0.5};
  for (int t = 0; t < 3; t++) {
    double p = ps[t];
    double *mk = mf_test_alloc(n);
    mf_test_poison(mk, n);
    mf_dropout_mask(mk, R, C, p, seed, st);
    int64_t kept = 0, bad = 0, mism = 0;
    for (int64_t k = 0; k < n; k++) {
      if (mk[k] == 1.0 / (1.0 - p)) kept++;
      else if (mk[k] != 0) bad++;
      /* element k is decided by uniform k of the stream, and nothing else */
      int keep = (double)mf_rng_uniform(seed, st, (uint64_t)k) >= p;
      if (keep != (mk[k] != 0)) mism++;
    }
    double rate = (double)kept / n, sd = sqrt(p * (1 - p) / n);
    MF_TEST(bad == 0, "p=%.2f: values are 0 or 1/(1-p) (%lld others)", p, (long long)bad);
    MF_TEST(fabs(rate - (1 - p)) < 5 * sd, "p=%.2f: keep rate %.5f vs %.5f (5 sd = %.2g)", p, rate,
            1 - p, 5 * sd);
    MF_TEST(mism == 0, "p=%.2f: mask element k = (uniform k >= p) (%lld mismatches)", p,
            (long long)mism);
    double mean = 0;
    for (int64_t k = 0; k < n; k++) mean += mk[k];
    mean /= n;
    MF_TEST(fabs(mean - 1) < 5 * sd / (1 - p), "p=%.2f: mask mean %.5f ≈ 1 (unbiased)", p, mean);
  }

  /* determinism and stream/seed dependence */
  const int64_t r2 = 64;
  const int c2 = 32;
  double *a = mf_test_alloc(r2 * c2), *b = mf_test_alloc(r2 * c2);
  double *c = mf_test_alloc(r2 * c2), *e = mf_test_alloc(r2 * c2);
  mf_dropout_mask(a, r2, c2, 0.25, seed, st);
  mf_dropout_mask(b, r2, c2, 0.25, seed, st);
  mf_dropout_mask(c, r2, c2, 0.25, seed, mf_rng_stream(3, MF_RNG_DROPOUT, 6));
  mf_dropout_mask(e, r2, c2, 0.25, seed + 1, st);
  MF_TEST(memcmp(a, b, (size_t)(r2 * c2) * sizeof *a) == 0, "same (seed, stream): same mask");
  int64_t dc = 0, de = 0;
  for (int64_t k = 0; k < r2 * c2; k++) {
    dc += (a[k] != 0) != (c[k] != 0);
    de += (a[k] != 0) != (e[k] != 0);
  }
  /* two independent masks at p = 0.25 differ in 2·0.25·0.75 = 37.5% of places */
  MF_TEST(dc > 500 && dc < 1000, "another stream gives another mask (%lld of 2048 differ)",
          (long long)dc);
  MF_TEST(de > 500 && de < 1000, "another seed gives another mask (%lld of 2048 differ)",
          (long long)de);

  double *one = mf_test_alloc(r2 * c2), *ref = mf_test_alloc(r2 * c2);
  for (int64_t k = 0; k < r2 * c2; k++) ref[k] = 1;
  mf_dropout_mask(one, r2, c2, 0.0, seed, st);
  MF_TEST(memcmp(one, ref, (size_t)(r2 * c2) * sizeof *one) == 0, "p = 0: all ones");
}

/* Naive: out[a,b,c] = x[a,b,c]·mask[(rowwise ? b : a), c] */
static void ref_dropout(double *out, const double *x, const double *mask, int64_t A, int64_t B,
                        int C, int rowwise) {
  for (int64_t a = 0; a < A; a++)
    for (int64_t b = 0; b < B; b++)
      for (int c = 0; c < C; c++)
        out[(a * B + b) * C + c] = x[(a * B + b) * C + c] * mask[(rowwise ? b : a) * C + c];
}

typedef struct {
  double *x, *z0, *z, *mask, *r;
  int64_t A, B;
  int C;
  mf_dropout_axis axis;
  int residual;
} ctx_t;

static double loss_fn(void *p) {
  ctx_t *c = p;
  int64_t n = c->A * c->B * c->C;
  if (c->residual) {
    memcpy(c->z, c->z0, (size_t)n * sizeof *c->z);
    mf_dropout_residual_forward(c->z, c->x, c->mask, c->A, c->B, c->C, c->axis);
  } else {
    mf_dropout_forward(c->z, c->x, c->mask, c->A, c->B, c->C, c->axis);
  }
  return mf_test_dot(c->z, c->r, n);
}

static void test_apply(int64_t A, int64_t B, int C, mf_dropout_axis axis, const char *name) {
  int rowwise = axis == MF_DROPOUT_ROWWISE;
  int64_t n = A * B * C, R = rowwise ? B : A;
  uint64_t st = mf_rng_stream(1, MF_RNG_DROPOUT, rowwise ? 1 : 2);
  ctx_t c = {.A = A, .B = B, .C = C, .axis = axis};
  c.x = mf_test_alloc(n);
  c.z0 = mf_test_alloc(n);
  c.z = mf_test_alloc(n);
  c.r = mf_test_alloc(n);
  c.mask = mf_test_alloc(R * C);
  mf_test_randn(c.x, n, 1, 1.0);
  mf_test_randn(c.z0, n, 2, 1.0);
  mf_test_randn(c.r, n, 3, 1.0);
  mf_dropout_mask(c.mask, R, C, 0.25, 7, st);
  double *ref = mf_test_alloc(n);
  ref_dropout(ref, c.x, c.mask, A, B, C, rowwise);
  mf_test_poison(c.z, n);
  mf_dropout_forward(c.z, c.x, c.mask, A, B, C, axis);
  char what[96];
  snprintf(what, sizeof what, "%s forward exact", name);
  MF_TEST(memcmp(c.z, ref, (size_t)n * sizeof *ref) == 0, "%s", what);

  /* sharing: the zero pattern repeats along the shared axis */
  int64_t breaks = 0, drops = 0;
  for (int64_t a = 0; a < A; a++)
    for (int64_t b = 0; b < B; b++)
      for (int k = 0; k < C; k++) {
        int dropped = c.z[(a * B + b) * C + k] == 0;
        int64_t a0 = rowwise ? 0 : a, b0 = rowwise ? b : 0;
        drops += dropped;
        breaks += dropped != (c.z[(a0 * B + b0) * C + k] == 0);
      }
  MF_TEST(breaks == 0 && drops > 0 && drops < n,
          "%s: mask shared over the %s axis (%lld breaks, %lld dropped of %lld)", name,
          rowwise ? "first" : "second", (long long)breaks, (long long)drops, (long long)n);

  /* in place */
  double *y = mf_test_alloc(n);
  memcpy(y, c.x, (size_t)n * sizeof *y);
  mf_dropout_forward(y, y, c.mask, A, B, C, axis);
  MF_TEST(memcmp(y, ref, (size_t)n * sizeof *ref) == 0, "%s in place", name);

  /* backward: dx = dout ⊙ mask, exact, and against finite differences */
  double *dx = mf_test_alloc(n), *dref = mf_test_alloc(n);
  mf_test_poison(dx, n);
  mf_dropout_backward(dx, c.r, c.mask, A, B, C, axis);
  ref_dropout(dref, c.r, c.mask, A, B, C, rowwise);
  MF_TEST(memcmp(dx, dref, (size_t)n * sizeof *dx) == 0, "%s backward exact", name);
  snprintf(what, sizeof what, "%s dx", name);
  mf_test_gradcheck(what, loss_fn, &c, c.x, dx, n, 200, 1e-6, 1e-8);

  /* fused residual: z = z0 + x ⊙ mask; dx = dz ⊙ mask; dz0 = dz */
  c.residual = 1;
  loss_fn(&c);
  double *zr = mf_test_alloc(n);
  for (int64_t k = 0; k < n; k++) zr[k] = c.z0[k] + ref[k];
  snprintf(what, sizeof what, "%s residual forward", name);
  mf_test_close(what, c.z, zr, n, 1e-15);
  snprintf(what, sizeof what, "%s residual dx", name);
  mf_test_gradcheck(what, loss_fn, &c, c.x, dx, n, 200, 1e-6, 1e-8);
  snprintf(what, sizeof what, "%s residual dz passes through", name);
  mf_test_gradcheck(what, loss_fn, &c, c.z0, c.r, n, 200, 1e-6, 1e-8);

  /* p = 0: identity */
  mf_dropout_mask(c.mask, R, C, 0.0, 7, st);
  mf_dropout_forward(y, c.x, c.mask, A, B, C, axis);
  MF_TEST(memcmp(y, c.x, (size_t)n * sizeof *y) == 0, "%s p = 0 is the identity", name);
}

static void bad_p(void *p) {
  double m[4];
  (void)p;
  mf_dropout_mask(m, 2, 2, 1.0, 1, 1);
}

int main(void) {
  mf_test_begin("test_dropout");
  test_mask();
  test_apply(9, 9, 5, MF_DROPOUT_ROWWISE, "pair row-wise");
  test_apply(9, 9, 5, MF_DROPOUT_COLWISE, "pair column-wise");
  test_apply(4, 11, 6, MF_DROPOUT_ROWWISE, "MSA (S, N, Cm) row-wise");
  MF_TEST(mf_test_expect_fatal(bad_p, NULL, "dropout rate"), "p = 1 is refused: %s",
          mf_test_last_fatal());
  return mf_test_end();
}
