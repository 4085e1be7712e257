/* test_opm.c — OuterProductMean (src/ops/opm.h): forward against a naive double loop
 * written from the equations of docs/af3-spec.md §6.3, chunking invariance, finite-
 * difference checks of dm and every parameter gradient with an MSA mask that has a
 * fully masked row and a padded token, the ASSIGN/ACCUMULATE contract, scratch freed. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ops/gemm.h"
#include "ops/opm.h"

#define NFIELD 6

typedef struct {
  mf_opm_dims d;
  double *m, *flat, *out, *saved, *r;
  const uint8_t *mask;
  mf_opm_weights w;
} ctx_t;

/* Independent reference: every sum written out, in double. */
static void ref_opm(double *out, const double *m, const uint8_t *mask, const mf_opm_weights *w,
                    mf_opm_dims d) {
  int S = d.S, N = d.N, Cm = d.Cm, Ch = d.Ch, Cz = d.Cz;
  double *a = mf_test_alloc((int64_t)S * N * Ch), *b = mf_test_alloc((int64_t)S * N * Ch);
  double *x = mf_test_alloc(Cm);
  for (int s = 0; s < S; s++)
    for (int n = 0; n < N; n++) {
      const double *row = m + ((int64_t)s * N + n) * Cm;
      double mu = 0, var = 0;
      for (int k = 0; k < Cm; k++) mu += row[k];
      mu /= Cm;
      for (int k = 0; k < Cm; k++) var += (row[k] - mu) * (row[k] - mu);
      var /= Cm;
      for (int k = 0; k < Cm; k++) x[k] = (row[k] - mu) / sqrt(var + 1e-5) * w->ln_g[k] + w->ln_b[k];
      double mk = mask ? mask[s * N + n] : 1;
      for (int c = 0; c < Ch; c++) {
        double sa = 0, sb = 0;
        for (int k = 0; k < Cm; k++) {
          sa += x[k] * w->w_a[c * Cm + k];
          sb += x[k] * w->w_b[c * Cm + k];
        }
        a[((int64_t)s * N + n) * Ch + c] = mk * sa;
        b[((int64_t)s * N + n) * Ch + c] = mk * sb;
      }
    }
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      double cnt = 0;
      for (int s = 0; s < S; s++) cnt += mask ? (double)(mask[s * N + i] * mask[s * N + j]) : 1.0;
      for (int zc = 0; zc < Cz; zc++) {
        double acc = 0;
        for (int c = 0; c < Ch; c++)
          for (int e = 0; e < Ch; e++) {
            double o = 0;
            for (int s = 0; s < S; s++)
              o += a[((int64_t)s * N + i) * Ch + c] * b[((int64_t)s * N + j) * Ch + e];
            acc += o * w->w_o[(int64_t)zc * Ch * Ch + c * Ch + e];
          }
        out[((int64_t)i * N + j) * Cz + zc] = (acc + w->b_o[zc]) / (1e-3 + cnt);
      }
    }
}

static double loss_fn(void *p) {
  ctx_t *c = p;
  mf_opm_forward(c->out, c->saved, c->m, c->mask, &c->w, c->d);
  return mf_test_dot(c->out, c->r, (int64_t)c->d.N * c->d.N * c->d.Cz);
}

static int64_t nparams(mf_opm_dims d) {
  mf_opm_weights t;
  return mf_opm_weights_bind(&t, NULL, d);
}

static void field_sizes(int64_t *sz, mf_opm_dims d) {
  sz[0] = sz[1] = d.Cm;
  sz[2] = sz[3] = (int64_t)d.Ch * d.Cm;
  sz[4] = (int64_t)d.Cz * d.Ch * d.Ch;
  sz[5] = d.Cz;
}
static mf_real *field(mf_opm_weights *w, int k) {
  mf_real *f[NFIELD] = {w->ln_g, w->ln_b, w->w_a, w->w_b, w->w_o, w->b_o};
  return f[k];
}
static const char *field_name[NFIELD] = {"ln_g", "ln_b", "w_a", "w_b", "w_o", "b_o"};

static void setup(ctx_t *c, mf_opm_dims d, const uint8_t *mask, uint64_t seed) {
  memset(c, 0, sizeof *c);
  c->d = d;
  c->mask = mask;
  int64_t SN = (int64_t)d.S * d.N, NN = (int64_t)d.N * d.N;
  int64_t np = nparams(d);
  c->flat = mf_test_alloc(np);
  mf_opm_weights_bind(&c->w, c->flat, d);
  mf_test_randn(c->flat, np, seed, 0.5);
  for (int k = 0; k < d.Cm; k++) c->w.ln_g[k] += 1.0;
  c->m = mf_test_alloc(SN * d.Cm);
  mf_test_randn(c->m, SN * d.Cm, seed + 1, 1.0);
  for (int64_t k = 0; k < SN * d.Cm; k++) c->m[k] += 0.3; /* a non-zero mean for the LN */
  c->out = mf_test_alloc(NN * d.Cz);
  c->saved = mf_test_alloc((int64_t)mf_opm_saved_size(d));
  c->r = mf_test_alloc(NN * d.Cz);
  mf_test_randn(c->r, NN * d.Cz, seed + 2, 1.0);
}

static void test_forward(void) {
  mf_opm_dims d = {.S = 5, .N = 6, .Cm = 7, .Ch = 3, .Cz = 4, .chunk = 0};
  uint8_t mask[5 * 6];
  for (int k = 0; k < 30; k++) mask[k] = (k * 7 + 3) % 5 != 0;
  for (int n = 0; n < 6; n++) mask[2 * 6 + n] = 0; /* MSA row 2 fully masked */
  for (int s = 0; s < 5; s++) mask[s * 6 + 4] = 0; /* token 4 padded in every row */
  int64_t NN = 36, nout = NN * d.Cz;
  for (int masked = 0; masked < 2; masked++) {
    ctx_t c;
    setup(&c, d, masked ? mask : NULL, 10 + (uint64_t)masked);
    double *ref = mf_test_alloc(nout), *first = mf_test_alloc(nout);
    ref_opm(ref, c.m, c.mask, &c.w, d);
    int chunks[4] = {0, 1, 4, 6};
    for (int k = 0; k < 4; k++) {
      c.d.chunk = chunks[k];
      mf_test_poison(c.out, nout);
      mf_test_poison(c.saved, (int64_t)mf_opm_saved_size(d));
      mf_opm_forward(c.out, c.saved, c.m, c.mask, &c.w, c.d);
      char what[64];
      snprintf(what, sizeof what, "forward vs naive (mask %d, chunk %d)", masked, chunks[k]);
      mf_test_close(what, c.out, ref, nout, 1e-12);
      if (k == 0) memcpy(first, c.out, (size_t)nout * sizeof *first);
      else MF_TEST(mf_test_maxabs(c.out, first, nout) < 1e-12, "chunk %d matches chunk 0", chunks[k]);
    }
    if (masked) {
      /* pairs touching token 4 have count 0: out = b_o / 1e-3 exactly */
      double worst = 0;
      for (int i = 0; i < 6; i++)
        for (int zc = 0; zc < d.Cz; zc++) {
          double e = fabs(c.out[((int64_t)i * 6 + 4) * d.Cz + zc] - c.w.b_o[zc] / 1e-3);
          worst = e > worst ? e : worst;
        }
      MF_TEST(worst < 1e-9, "empty pair gives b_o/1e-3 (err %g)", worst);
      /* the empty pairs dominate the norm: compare the others on their own */
      double *gs = mf_test_alloc(nout), *rs = mf_test_alloc(nout);
      int64_t n = 0;
      for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++)
          if (i != 4 && j != 4)
            for (int zc = 0; zc < d.Cz; zc++, n++) {
              gs[n] = c.out[((int64_t)i * 6 + j) * d.Cz + zc];
              rs[n] = ref[((int64_t)i * 6 + j) * d.Cz + zc];
            }
      mf_test_close("forward vs naive, non-empty pairs", gs, rs, n, 1e-12);
    }
  }
}

static void test_gradients(int use_mask, int chunk) {
  mf_opm_dims d = {.S = 4, .N = 5, .Cm = 6, .Ch = 3, .Cz = 4, .chunk = chunk};
  uint8_t mask[4 * 5];
  for (int k = 0; k < 20; k++) mask[k] = (k % 3) != 1;
  for (int n = 0; n < 5; n++) mask[1 * 5 + n] = 0; /* MSA row 1 fully masked */
  for (int s = 0; s < 4; s++) mask[s * 5 + 2] = 0; /* token 2 padded */
  ctx_t c;
  setup(&c, d, use_mask ? mask : NULL, 100 + (uint64_t)use_mask);
  int64_t SN = (int64_t)d.S * d.N, np = nparams(d);
  double *gflat = mf_test_alloc(np), *dm = mf_test_alloc(SN * d.Cm);
  mf_opm_weights g;
  mf_opm_weights_bind(&g, gflat, d);
  loss_fn(&c);
  mf_test_poison(dm, SN * d.Cm);
  mf_opm_backward(dm, &g, c.r, c.saved, c.m, c.mask, &c.w, d);
  int finite = 1;
  for (int64_t k = 0; k < SN * d.Cm; k++) finite &= isfinite(dm[k]) != 0;
  for (int64_t k = 0; k < np; k++) finite &= isfinite(gflat[k]) != 0;
  MF_TEST(finite, "gradients finite (mask %d)", use_mask);
  char what[64];
  snprintf(what, sizeof what, "dm (mask %d, chunk %d)", use_mask, chunk);
  mf_test_gradcheck(what, loss_fn, &c, c.m, dm, SN * d.Cm, 1000, 1e-6, 1e-6);
  if (use_mask) {
    /* a fully masked MSA row and the padded token's rows get exactly zero gradient */
    double z = 0;
    for (int n = 0; n < 5; n++)
      for (int k = 0; k < d.Cm; k++) z += fabs(dm[(1 * 5 + n) * d.Cm + k]);
    for (int s = 0; s < 4; s++)
      for (int k = 0; k < d.Cm; k++) z += fabs(dm[(s * 5 + 2) * d.Cm + k]);
    MF_TEST(z == 0, "masked rows get zero dm (%g)", z);
  }
  int64_t sz[NFIELD];
  field_sizes(sz, d);
  for (int k = 0; k < NFIELD; k++) {
    snprintf(what, sizeof what, "d%s (mask %d, chunk %d)", field_name[k], use_mask, chunk);
    mf_test_gradcheck(what, loss_fn, &c, field(&c.w, k), field(&g, k), sz[k], 1000, 1e-6, 1e-6);
  }

  /* contract: parameter grads accumulate, dm assigns; NULL grads leave dm unchanged */
  double *g1 = mf_test_alloc(np), *dm2 = mf_test_alloc(SN * d.Cm);
  memcpy(g1, gflat, (size_t)np * sizeof *g1);
  mf_test_randn(dm2, SN * d.Cm, 5, 1.0);
  loss_fn(&c);
  mf_opm_backward(dm2, &g, c.r, c.saved, c.m, c.mask, &c.w, d);
  double *twice = mf_test_alloc(np);
  for (int64_t k = 0; k < np; k++) twice[k] = 2 * g1[k];
  mf_test_close("parameter grads accumulate", gflat, twice, np, 1e-13);
  mf_test_close("dm assigns", dm2, dm, SN * d.Cm, 1e-13);
  mf_test_randn(dm2, SN * d.Cm, 6, 1.0);
  mf_opm_backward(dm2, NULL, c.r, c.saved, c.m, c.mask, &c.w, d);
  mf_test_close("dm with NULL grads", dm2, dm, SN * d.Cm, 1e-13);
  /* only the output-side gradients: dm = NULL */
  mf_opm_weights g2;
  double *g2flat = mf_test_alloc(np);
  mf_opm_weights_bind(&g2, g2flat, d);
  g2.ln_g = g2.ln_b = g2.w_a = g2.w_b = NULL;
  mf_opm_backward(NULL, &g2, c.r, c.saved, c.m, c.mask, &c.w, d);
  int64_t off = 2 * d.Cm + 2 * (int64_t)d.Ch * d.Cm;
  mf_test_close("dW_o, db_o alone", g2flat + off, g1 + off, np - off, 1e-13);
}

static void test_memory(void) {
  mf_opm_dims d = {.S = 3, .N = 7, .Cm = 4, .Ch = 2, .Cz = 3, .chunk = 3};
  ctx_t c;
  setup(&c, d, NULL, 7);
  int64_t np = nparams(d);
  double *gflat = mf_test_alloc(np), *dm = mf_test_alloc((int64_t)d.S * d.N * d.Cm);
  mf_opm_weights g;
  mf_opm_weights_bind(&g, gflat, d);
  int64_t before = mf_mem_stats(MF_HOST).current;
  loss_fn(&c);
  mf_opm_backward(dm, &g, c.r, c.saved, c.m, NULL, &c.w, d);
  MF_TEST(mf_mem_stats(MF_HOST).current == before, "all scratch freed");
  MF_TEST(mf_opm_saved_size(d) == (size_t)(2 * 21 + 2 * 21 * 2), "saved size");
  MF_TEST(np == 4 + 4 + 8 + 8 + 3 * 4 + 3, "parameter count %lld", (long long)np);
  mf_opm_dims big = {.S = 128, .N = 384, .Cm = 64, .Ch = 32, .Cz = 128, .chunk = 0};
  MF_TEST(mf_opm_weights_bind(&g, NULL, big) == 64 * 2 + 2 * 32 * 64 + 128 * 1024 + 128,
          "AF3 parameter count");
}

/* Medium sizes: leading dimensions past the GEMM loop's 64-wide blocks, several chunks. */
static void test_medium(void) {
  mf_opm_dims d = {.S = 9, .N = 13, .Cm = 16, .Ch = 8, .Cz = 12, .chunk = 5};
  uint8_t mask[9 * 13];
  for (int k = 0; k < 9 * 13; k++) mask[k] = (k * 5 + 1) % 7 != 0;
  ctx_t c;
  setup(&c, d, mask, 300);
  int64_t SN = (int64_t)d.S * d.N, nout = (int64_t)d.N * d.N * d.Cz, np = nparams(d);
  double *ref = mf_test_alloc(nout);
  ref_opm(ref, c.m, mask, &c.w, d);
  mf_test_poison(c.out, nout);
  loss_fn(&c);
  mf_test_close("medium forward vs naive", c.out, ref, nout, 1e-12);
  double *gflat = mf_test_alloc(np), *dm = mf_test_alloc(SN * d.Cm);
  mf_opm_weights g;
  mf_opm_weights_bind(&g, gflat, d);
  mf_opm_backward(dm, &g, c.r, c.saved, c.m, mask, &c.w, d);
  mf_test_gradcheck("medium dm", loss_fn, &c, c.m, dm, SN * d.Cm, 150, 1e-6, 1e-6);
  int64_t sz[NFIELD];
  field_sizes(sz, d);
  for (int k = 0; k < NFIELD; k++) {
    char what[48];
    snprintf(what, sizeof what, "medium d%s", field_name[k]);
    mf_test_gradcheck(what, loss_fn, &c, field(&c.w, k), field(&g, k), sz[k], 60, 1e-6, 1e-6);
  }
}

static void bad_dims(void *p) {
  (void)p;
  mf_opm_dims d = {.S = 2, .N = 2, .Cm = 4, .Ch = 0, .Cz = 3, .chunk = 0};
  (void)mf_opm_saved_size(d);
}

int main(void) {
  mf_test_begin("test_opm");
  test_forward();
  int was = mf_gemm_use_blas(0); /* the built-in GEMM loop too (OpenBLAS builds) */
  test_forward();
  test_gradients(1, 3);
  mf_gemm_use_blas(was);
  test_gradients(0, 0);
  test_gradients(1, 2);
  test_gradients(1, 0);
  test_memory();
  test_medium();
  MF_TEST(mf_test_expect_fatal(bad_dims, NULL, "opm dims"), "bad dims are fatal: %s",
          mf_test_last_fatal());
  return mf_test_end();
}
