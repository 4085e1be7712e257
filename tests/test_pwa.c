/* test_pwa.c — MSA pair-weighted averaging (src/ops/pwa.h): forward against a naive
 * double loop written from the equations of docs/af3-spec.md §6.3, the saved softmax
 * (rows sum to 1, padded keys exactly 0), finite-difference checks of dm, dz and every
 * parameter gradient with and without padded tokens, an all-padded input (no NaN), the
 * ASSIGN/ACCUMULATE contract and freed scratch. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ops/gemm.h"
#include "ops/pwa.h"

#define NFIELD 8

typedef struct {
  mf_pwa_dims d;
  double *m, *z, *flat, *out, *saved, *r;
  const uint8_t *mask;
  mf_pwa_weights w;
} ctx_t;

/* Independent reference from the equations, in double. */
static void ref_pwa(double *out, const double *m, const double *z, const uint8_t *mask,
                    const mf_pwa_weights *w, mf_pwa_dims d) {
  int S = d.S, N = d.N, Cm = d.Cm, Cz = d.Cz, H = d.H, Ch = d.Ch, HC = H * Ch;
  double *x = mf_test_alloc(Cm), *zl = mf_test_alloc(Cz);
  double *v = mf_test_alloc((int64_t)S * N * HC), *g = mf_test_alloc((int64_t)S * N * HC);
  double *b = mf_test_alloc((int64_t)N * N * H), *wt = mf_test_alloc((int64_t)N * N * H);
  double *o = mf_test_alloc(HC);
  for (int s = 0; s < S; s++)
    for (int n = 0; n < N; n++) {
      mf_test_ref_ln(x, m + ((int64_t)s * N + n) * Cm, w->ln_m_g, w->ln_m_b, Cm);
      for (int q = 0; q < HC; q++) {
        double sv = 0, sg = 0;
        for (int k = 0; k < Cm; k++) {
          sv += x[k] * w->w_v[q * Cm + k];
          sg += x[k] * w->w_g[q * Cm + k];
        }
        v[((int64_t)s * N + n) * HC + q] = sv;
        g[((int64_t)s * N + n) * HC + q] = 1 / (1 + exp(-sg));
      }
    }
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      mf_test_ref_ln(zl, z + ((int64_t)i * N + j) * Cz, w->ln_z_g, w->ln_z_b, Cz);
      for (int h = 0; h < H; h++) {
        double s = 0;
        for (int k = 0; k < Cz; k++) s += zl[k] * w->w_b[h * Cz + k];
        b[((int64_t)i * N + j) * H + h] = s;
      }
    }
  for (int i = 0; i < N; i++)
    for (int h = 0; h < H; h++) {
      double den = 0;
      for (int j = 0; j < N; j++)
        if (!mask || mask[j]) den += exp(b[((int64_t)i * N + j) * H + h]);
      for (int j = 0; j < N; j++)
        wt[((int64_t)i * N + j) * H + h] =
            (!mask || mask[j]) ? exp(b[((int64_t)i * N + j) * H + h]) / den : 0;
    }
  for (int s = 0; s < S; s++)
    for (int i = 0; i < N; i++) {
      for (int h = 0; h < H; h++)
        for (int c = 0; c < Ch; c++) {
          double acc = 0;
          for (int j = 0; j < N; j++)
            acc += wt[((int64_t)i * N + j) * H + h] * v[((int64_t)s * N + j) * HC + h * Ch + c];
          o[h * Ch + c] = g[((int64_t)s * N + i) * HC + h * Ch + c] * acc;
        }
      for (int k = 0; k < Cm; k++) {
        double acc = 0;
        for (int q = 0; q < HC; q++) acc += o[q] * w->w_o[k * HC + q];
        out[((int64_t)s * N + i) * Cm + k] = acc;
      }
    }
}

static double loss_fn(void *p) {
  ctx_t *c = p;
  mf_pwa_forward(c->out, c->saved, c->m, c->z, c->mask, &c->w, c->d);
  return mf_test_dot(c->out, c->r, (int64_t)c->d.S * c->d.N * c->d.Cm);
}

static int64_t nparams(mf_pwa_dims d) {
  mf_pwa_weights t;
  return mf_pwa_weights_bind(&t, NULL, d);
}
static void field_sizes(int64_t *sz, mf_pwa_dims d) {
  int64_t HC = (int64_t)d.H * d.Ch;
  sz[0] = sz[1] = d.Cm;
  sz[2] = sz[3] = d.Cz;
  sz[4] = sz[6] = HC * d.Cm;
  sz[5] = (int64_t)d.H * d.Cz;
  sz[7] = d.Cm * HC;
}
static mf_real *field(mf_pwa_weights *w, int k) {
  mf_real *f[NFIELD] = {w->ln_m_g, w->ln_m_b, w->ln_z_g, w->ln_z_b, w->w_v, w->w_b, w->w_g, w->w_o};
  return f[k];
}
static const char *field_name[NFIELD] = {"ln_m_g", "ln_m_b", "ln_z_g", "ln_z_b",
                                         "w_v",    "w_b",    "w_g",    "w_o"};

static void setup(ctx_t *c, mf_pwa_dims d, const uint8_t *mask, uint64_t seed) {
  memset(c, 0, sizeof *c);
  c->d = d;
  c->mask = mask;
  int64_t SN = (int64_t)d.S * d.N, NN = (int64_t)d.N * d.N, np = nparams(d);
  c->flat = mf_test_alloc(np);
  mf_pwa_weights_bind(&c->w, c->flat, d);
  mf_test_randn(c->flat, np, seed, 0.6);
  for (int k = 0; k < d.Cm; k++) c->w.ln_m_g[k] += 1.0;
  for (int k = 0; k < d.Cz; k++) c->w.ln_z_g[k] += 1.0;
  c->m = mf_test_alloc(SN * d.Cm);
  mf_test_randn(c->m, SN * d.Cm, seed + 1, 1.0);
  c->z = mf_test_alloc(NN * d.Cz);
  mf_test_randn(c->z, NN * d.Cz, seed + 2, 1.0);
  for (int64_t k = 0; k < NN * d.Cz; k++) c->z[k] -= 0.2;
  c->out = mf_test_alloc(SN * d.Cm);
  c->saved = mf_test_alloc((int64_t)mf_pwa_saved_size(d));
  c->r = mf_test_alloc(SN * d.Cm);
  mf_test_randn(c->r, SN * d.Cm, seed + 3, 1.0);
}

static int all_finite(const double *x, int64_t n) {
  for (int64_t k = 0; k < n; k++)
    if (!isfinite(x[k])) return 0;
  return 1;
}

static void test_forward(void) {
  mf_pwa_dims d = {.S = 4, .N = 6, .Cm = 5, .Cz = 7, .H = 3, .Ch = 2};
  uint8_t mask[6] = {1, 1, 0, 1, 1, 0};
  int64_t SN = 24, NN = 36, nout = SN * d.Cm;
  for (int masked = 0; masked < 2; masked++) {
    ctx_t c;
    setup(&c, d, masked ? mask : NULL, 20 + (uint64_t)masked);
    double *ref = mf_test_alloc(nout);
    ref_pwa(ref, c.m, c.z, c.mask, &c.w, d);
    mf_test_poison(c.out, nout);
    mf_test_poison(c.saved, (int64_t)mf_pwa_saved_size(d));
    mf_pwa_forward(c.out, c.saved, c.m, c.z, c.mask, &c.w, d);
    char what[64];
    snprintf(what, sizeof what, "forward vs naive (mask %d)", masked);
    mf_test_close(what, c.out, ref, nout, 1e-12);
    /* the saved softmax w (H, N, N): rows sum to 1 over valid keys, padded keys are 0 */
    const double *w = c.saved + 2 * SN + 2 * NN + 2 * SN * d.H * d.Ch;
    double worst = 0, padded = 0;
    for (int h = 0; h < d.H; h++)
      for (int i = 0; i < d.N; i++) {
        double s = 0;
        for (int j = 0; j < d.N; j++) {
          s += w[((int64_t)h * d.N + i) * d.N + j];
          if (masked && !mask[j]) padded += fabs(w[((int64_t)h * d.N + i) * d.N + j]);
        }
        worst = fabs(s - 1) > worst ? fabs(s - 1) : worst;
      }
    MF_TEST(worst < 1e-14 && padded == 0, "softmax rows sum to 1 (%g), padded keys 0 (%g)", worst,
            padded);
  }
  /* every token padded: w = 0, out = 0, no NaN anywhere (forward and backward) */
  uint8_t none[6] = {0};
  ctx_t c;
  setup(&c, d, none, 30);
  mf_test_poison(c.out, nout);
  mf_pwa_forward(c.out, c.saved, c.m, c.z, none, &c.w, d);
  double *zero = mf_test_alloc(NN * d.Cz > nout ? NN * d.Cz : nout);
  MF_TEST(mf_test_maxabs(c.out, zero, nout) == 0, "all tokens padded: output exactly 0");
  double *dm = mf_test_alloc(nout), *dz = mf_test_alloc(NN * d.Cz), *gf = mf_test_alloc(nparams(d));
  mf_pwa_weights g;
  mf_pwa_weights_bind(&g, gf, d);
  mf_pwa_backward(dm, dz, &g, c.r, c.saved, c.m, c.z, none, &c.w, d);
  MF_TEST(all_finite(dm, nout) && all_finite(dz, NN * d.Cz) && all_finite(gf, nparams(d)),
          "all tokens padded: finite gradients");
  MF_TEST(mf_test_maxabs(dz, zero, NN * d.Cz) == 0, "all tokens padded: dz = 0");
}

static void test_gradients(int use_mask) {
  mf_pwa_dims d = {.S = 3, .N = 5, .Cm = 6, .Cz = 5, .H = 2, .Ch = 3};
  uint8_t mask[5] = {1, 0, 1, 1, 0};
  ctx_t c;
  setup(&c, d, use_mask ? mask : NULL, 200 + (uint64_t)use_mask);
  int64_t SN = (int64_t)d.S * d.N, NN = (int64_t)d.N * d.N, np = nparams(d);
  double *gflat = mf_test_alloc(np), *dm = mf_test_alloc(SN * d.Cm), *dz = mf_test_alloc(NN * d.Cz);
  mf_pwa_weights g;
  mf_pwa_weights_bind(&g, gflat, d);
  loss_fn(&c);
  mf_test_poison(dm, SN * d.Cm);
  mf_test_poison(dz, NN * d.Cz);
  mf_pwa_backward(dm, dz, &g, c.r, c.saved, c.m, c.z, c.mask, &c.w, d);
  MF_TEST(all_finite(dm, SN * d.Cm) && all_finite(dz, NN * d.Cz) && all_finite(gflat, np),
          "gradients finite (mask %d)", use_mask);
  char what[64];
  snprintf(what, sizeof what, "dm (mask %d)", use_mask);
  mf_test_gradcheck(what, loss_fn, &c, c.m, dm, SN * d.Cm, 1000, 1e-6, 1e-6);
  snprintf(what, sizeof what, "dz (mask %d)", use_mask);
  mf_test_gradcheck(what, loss_fn, &c, c.z, dz, NN * d.Cz, 1000, 1e-6, 1e-6);
  if (use_mask) {
    /* pair entries (i, j) with j padded never reach the output */
    double s = 0;
    for (int i = 0; i < d.N; i++)
      for (int k = 0; k < d.Cz; k++) s += fabs(dz[((int64_t)i * d.N + 1) * d.Cz + k]);
    MF_TEST(s == 0, "dz of a padded key is exactly 0 (%g)", s);
  }
  int64_t sz[NFIELD];
  field_sizes(sz, d);
  for (int k = 0; k < NFIELD; k++) {
    if (k == 3) {
      /* LN_z's β shifts b_ij^h by a constant over j, which the softmax ignores: its true
       * gradient is 0, and the analytic one must be 0 up to rounding */
      double mx = 0;
      for (int q = 0; q < d.Cz; q++) mx = fabs(g.ln_z_b[q]) > mx ? fabs(g.ln_z_b[q]) : mx;
      MF_TEST(mx < 1e-12, "dln_z_b = 0 by softmax shift invariance (max %g)", mx);
      continue;
    }
    snprintf(what, sizeof what, "d%s (mask %d)", field_name[k], use_mask);
    mf_test_gradcheck(what, loss_fn, &c, field(&c.w, k), field(&g, k), sz[k], 1000, 1e-6, 1e-6);
  }

  /* contract: parameter grads accumulate; dm and dz assign; NULL grads keep dm, dz */
  double *g1 = mf_test_alloc(np), *dm2 = mf_test_alloc(SN * d.Cm), *dz2 = mf_test_alloc(NN * d.Cz);
  memcpy(g1, gflat, (size_t)np * sizeof *g1);
  mf_test_randn(dm2, SN * d.Cm, 8, 1.0);
  mf_test_randn(dz2, NN * d.Cz, 9, 1.0);
  loss_fn(&c);
  mf_pwa_backward(dm2, dz2, &g, c.r, c.saved, c.m, c.z, c.mask, &c.w, d);
  double *twice = mf_test_alloc(np);
  for (int64_t k = 0; k < np; k++) twice[k] = 2 * g1[k];
  mf_test_close("parameter grads accumulate", gflat, twice, np, 1e-13);
  mf_test_close("dm assigns", dm2, dm, SN * d.Cm, 1e-13);
  mf_test_close("dz assigns", dz2, dz, NN * d.Cz, 1e-13);
  mf_test_randn(dm2, SN * d.Cm, 10, 1.0);
  mf_test_randn(dz2, NN * d.Cz, 11, 1.0);
  mf_pwa_backward(dm2, dz2, NULL, c.r, c.saved, c.m, c.z, c.mask, &c.w, d);
  mf_test_close("dm with NULL grads", dm2, dm, SN * d.Cm, 1e-13);
  mf_test_close("dz with NULL grads", dz2, dz, NN * d.Cz, 1e-13);
  /* only the pair side */
  mf_test_randn(dz2, NN * d.Cz, 12, 1.0);
  mf_pwa_backward(NULL, dz2, NULL, c.r, c.saved, c.m, c.z, c.mask, &c.w, d);
  mf_test_close("dz alone", dz2, dz, NN * d.Cz, 1e-13);
}

static void test_memory(void) {
  mf_pwa_dims d = {.S = 2, .N = 4, .Cm = 3, .Cz = 4, .H = 2, .Ch = 2};
  ctx_t c;
  setup(&c, d, NULL, 3);
  int64_t np = nparams(d);
  double *gf = mf_test_alloc(np), *dm = mf_test_alloc(24), *dz = mf_test_alloc(64);
  mf_pwa_weights g;
  mf_pwa_weights_bind(&g, gf, d);
  int64_t before = mf_mem_stats(MF_HOST).current;
  loss_fn(&c);
  mf_pwa_backward(dm, dz, &g, c.r, c.saved, c.m, c.z, NULL, &c.w, d);
  MF_TEST(mf_mem_stats(MF_HOST).current == before, "all scratch freed");
  MF_TEST(mf_pwa_saved_size(d) == (size_t)(2 * 8 + 2 * 16 + 3 * 8 * 4 + 2 * 16), "saved size");
  mf_pwa_dims af3 = {.S = 128, .N = 384, .Cm = 64, .Cz = 128, .H = 8, .Ch = 8};
  MF_TEST(nparams(af3) == 2 * 64 + 2 * 128 + 64 * 64 + 8 * 128 + 64 * 64 + 64 * 64,
          "AF3 parameter count %lld", (long long)nparams(af3));
}

/* Medium sizes: leading dimensions past the GEMM loop's 64-wide blocks. */
static void test_medium(void) {
  mf_pwa_dims d = {.S = 7, .N = 12, .Cm = 16, .Cz = 12, .H = 4, .Ch = 5};
  uint8_t mask[12] = {1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1};
  ctx_t c;
  setup(&c, d, mask, 400);
  int64_t SN = (int64_t)d.S * d.N, NN = (int64_t)d.N * d.N, np = nparams(d);
  double *ref = mf_test_alloc(SN * d.Cm);
  ref_pwa(ref, c.m, c.z, mask, &c.w, d);
  mf_test_poison(c.out, SN * d.Cm);
  loss_fn(&c);
  mf_test_close("medium forward vs naive", c.out, ref, SN * d.Cm, 1e-12);
  double *gflat = mf_test_alloc(np), *dm = mf_test_alloc(SN * d.Cm), *dz = mf_test_alloc(NN * d.Cz);
  mf_pwa_weights g;
  mf_pwa_weights_bind(&g, gflat, d);
  mf_pwa_backward(dm, dz, &g, c.r, c.saved, c.m, c.z, mask, &c.w, d);
  mf_test_gradcheck("medium dm", loss_fn, &c, c.m, dm, SN * d.Cm, 150, 1e-6, 1e-6);
  mf_test_gradcheck("medium dz", loss_fn, &c, c.z, dz, NN * d.Cz, 150, 1e-6, 1e-6);
  int64_t sz[NFIELD];
  field_sizes(sz, d);
  for (int k = 0; k < NFIELD; k++) {
    if (k == 3) continue; /* zero by shift invariance, checked in test_gradients */
    char what[48];
    snprintf(what, sizeof what, "medium d%s", field_name[k]);
    mf_test_gradcheck(what, loss_fn, &c, field(&c.w, k), field(&g, k), sz[k], 60, 1e-6, 1e-6);
  }
}

static void bad_dims(void *p) {
  (void)p;
  mf_pwa_dims d = {.S = 2, .N = 0, .Cm = 4, .Cz = 3, .H = 1, .Ch = 1};
  (void)mf_pwa_saved_size(d);
}

int main(void) {
  mf_test_begin("test_pwa");
  test_forward();
  int was = mf_gemm_use_blas(0); /* the built-in GEMM loop too (OpenBLAS builds) */
  test_forward();
  test_gradients(1);
  mf_gemm_use_blas(was);
  test_gradients(0);
  test_gradients(1);
  test_memory();
  test_medium();
  MF_TEST(mf_test_expect_fatal(bad_dims, NULL, "pwa dims"), "bad dims are fatal: %s",
          mf_test_last_fatal());
  return mf_test_end();
}
