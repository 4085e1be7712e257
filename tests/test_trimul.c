/* test_trimul.c — the triangle multiplicative update (src/ops/trimul.h): forward against a
 * naive double implementation written here from the equations of af3-spec §6.4.1
 * (explicit O(N³) loops, nothing shared with the op), finite-difference gradient checks of
 * dz and every parameter, the gradient contract (dz assigns, parameters accumulate), the
 * outgoing/incoming transpose symmetry, the parameter count at default dimensions, the
 * extent of the saved workspace and the shape assertions. Built in double (mf_real = double). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ops/gemm.h"
#include "ops/trimul.h"

/* ------------------------------------------------------------ naive reference */

/* out (N, N, C): Δz of Alg 12 (outgoing) / Alg 13 (incoming), straight from the equations. */
static void ref_trimul(double *out, const double *z, const uint8_t *pm, const mf_trimul_weights *w,
                       int N, int C, int Ch, int outgoing) {
  int64_t M = (int64_t)N * N;
  double *x = mf_test_alloc(M * C), *A = mf_test_alloc(M * Ch), *B = mf_test_alloc(M * Ch);
  double *p = mf_test_alloc(Ch), *g = mf_test_alloc(Ch), *t = mf_test_alloc(Ch);
  double *y = mf_test_alloc(Ch), *gate = mf_test_alloc(C), *u = mf_test_alloc(C);
  for (int64_t m = 0; m < M; m++) {
    mf_test_ref_ln(x + m * C, z + m * C, w->ln_in_g, w->ln_in_b, C);
    double mk = pm ? pm[m] : 1;
    mf_test_ref_matvec(p, w->w_ap, x + m * C, Ch, C);
    mf_test_ref_matvec(g, w->w_ag, x + m * C, Ch, C);
    for (int c = 0; c < Ch; c++) A[m * Ch + c] = mk * mf_test_sigmoid(g[c]) * p[c];
    mf_test_ref_matvec(p, w->w_bp, x + m * C, Ch, C);
    mf_test_ref_matvec(g, w->w_bg, x + m * C, Ch, C);
    for (int c = 0; c < Ch; c++) B[m * Ch + c] = mk * mf_test_sigmoid(g[c]) * p[c];
  }
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      for (int c = 0; c < Ch; c++) {
        double s = 0;
        for (int k = 0; k < N; k++) {
          if (outgoing) /* T_ij = Σ_k A_ik B_jk */
            s += A[((int64_t)i * N + k) * Ch + c] * B[((int64_t)j * N + k) * Ch + c];
          else /* T_ij = Σ_k A_ki B_kj */
            s += A[((int64_t)k * N + i) * Ch + c] * B[((int64_t)k * N + j) * Ch + c];
        }
        t[c] = s;
      }
      mf_test_ref_ln(y, t, w->ln_out_g, w->ln_out_b, Ch);
      const double *xij = x + ((int64_t)i * N + j) * C;
      mf_test_ref_matvec(gate, w->w_g, xij, C, C);
      mf_test_ref_matvec(u, w->w_z, y, C, Ch);
      for (int c = 0; c < C; c++) out[((int64_t)i * N + j) * C + c] = mf_test_sigmoid(gate[c]) * u[c];
    }
}

/* ------------------------------------------------------------ fixtures */

typedef struct {
  int N, C, Ch, outgoing;
  int64_t M, np;
  double *z, *flat, *out, *saved, *wout; /* wout: the loss weights, L = Σ out·wout */
  uint8_t *pm;                           /* NULL or (N, N) */
  mf_trimul_weights w;
} fixture;

/* Random inputs; weights scaled so activations stay O(1); LN γ near 1. */
static void fixture_init(fixture *f, int N, int C, int Ch, int outgoing, int masked,
                         uint64_t seed) {
  memset(f, 0, sizeof *f);
  f->N = N;
  f->C = C;
  f->Ch = Ch;
  f->outgoing = outgoing;
  f->M = (int64_t)N * N;
  f->np = mf_trimul_weights_bind(&f->w, NULL, C, Ch);
  f->flat = mf_test_alloc(f->np);
  mf_trimul_weights_bind(&f->w, f->flat, C, Ch);
  mf_test_randn(f->flat, f->np, seed, 1.0);
  for (int c = 0; c < C; c++) {
    f->w.ln_in_g[c] = 1 + 0.2 * f->w.ln_in_g[c];
    f->w.ln_in_b[c] *= 0.2;
  }
  for (int c = 0; c < Ch; c++) {
    f->w.ln_out_g[c] = 1 + 0.2 * f->w.ln_out_g[c];
    f->w.ln_out_b[c] *= 0.2;
  }
  double sc = 1 / sqrt((double)C), sh = 1 / sqrt((double)Ch);
  for (int64_t e = 0; e < (int64_t)Ch * C; e++) {
    f->w.w_ap[e] *= sc;
    f->w.w_ag[e] *= sc;
    f->w.w_bp[e] *= sc;
    f->w.w_bg[e] *= sc;
    f->w.w_z[e] *= sh;
  }
  for (int64_t e = 0; e < (int64_t)C * C; e++) f->w.w_g[e] *= sc;
  f->z = mf_test_alloc(f->M * C);
  mf_test_randn(f->z, f->M * C, seed + 1, 1.0);
  for (int64_t m = 0; m < f->M; m++) /* uneven per-pair offsets and scales */
    for (int c = 0; c < C; c++)
      f->z[m * C + c] = 0.5 * (double)(m % 3) + (1 + 0.1 * (double)(m % 4)) * f->z[m * C + c];
  f->out = mf_test_alloc(f->M * C);
  f->saved = mf_test_alloc((int64_t)mf_trimul_saved_size(N, C, Ch));
  f->wout = mf_test_alloc(f->M * C);
  mf_test_randn(f->wout, f->M * C, seed + 2, 1.0);
  f->pm = NULL;
  if (masked) {
    /* token mask with the last token padded, plus one extra masked pair */
    uint8_t *pmbuf = (uint8_t *)mf_test_alloc(f->M / 8 + 1);
    for (int i = 0; i < N; i++)
      for (int j = 0; j < N; j++) pmbuf[i * N + j] = (uint8_t)(i != N - 1 && j != N - 1);
    if (N > 2) pmbuf[1 * N + 0] = 0;
    f->pm = pmbuf;
  }
}

static double loss_fn(void *ctx) {
  fixture *f = ctx;
  mf_trimul_forward(f->out, f->saved, f->z, f->pm, &f->w, f->N, f->C, f->Ch, f->outgoing);
  return mf_test_dot(f->out, f->wout, f->M * f->C);
}

/* ------------------------------------------------------------ tests */

static void test_forward(void) {
  static const int Ns[] = {1, 5, 7};
  for (int in = 0; in < 3; in++)
    for (int og = 0; og <= 1; og++)
      for (int masked = 0; masked <= 1; masked++) {
        fixture f;
        fixture_init(&f, Ns[in], 6, 5, og, masked, 100 + (uint64_t)(10 * in + 2 * og + masked));
        double *ref = mf_test_alloc(f.M * f.C);
        ref_trimul(ref, f.z, f.pm, &f.w, f.N, f.C, f.Ch, og);
        mf_test_poison(f.out, f.M * f.C);
        mf_test_poison(f.saved, (int64_t)mf_trimul_saved_size(f.N, f.C, f.Ch));
        mf_trimul_forward(f.out, f.saved, f.z, f.pm, &f.w, f.N, f.C, f.Ch, og);
        char what[96];
        snprintf(what, sizeof what, "forward %s N=%d C=6 Ch=5 %s", og ? "outgoing" : "incoming",
                 f.N, masked ? "masked" : "no mask");
        /* both sides in double: only summation order differs */
        mf_test_close(what, f.out, ref, f.M * f.C, 1e-12);
      }
  /* an explicit all-ones mask is the same as no mask; the masked pairs change the output */
  fixture f;
  fixture_init(&f, 5, 6, 5, 1, 0, 7);
  double *a = mf_test_alloc(f.M * f.C), *b = mf_test_alloc(f.M * f.C);
  uint8_t ones[25];
  memset(ones, 1, sizeof ones);
  mf_trimul_forward(a, f.saved, f.z, NULL, &f.w, 5, 6, 5, 1);
  mf_trimul_forward(b, f.saved, f.z, ones, &f.w, 5, 6, 5, 1);
  MF_TEST(mf_test_maxabs(a, b, f.M * f.C) == 0, "all-ones mask == NULL mask");
  ones[7] = 0;
  mf_trimul_forward(b, f.saved, f.z, ones, &f.w, 5, 6, 5, 1);
  MF_TEST(mf_test_maxabs(a, b, f.M * f.C) > 1e-6, "a masked pair changes the output");
}

/* AF3 channel widths (C = Ch = 128) at a small N, through OpenBLAS and through the loop. */
static void test_forward_af3_widths(void) {
  for (int og = 0; og <= 1; og++) {
    fixture f;
    fixture_init(&f, 12, 128, 128, og, 1, 300 + (uint64_t)og);
    double *ref = mf_test_alloc(f.M * f.C);
    ref_trimul(ref, f.z, f.pm, &f.w, f.N, f.C, f.Ch, og);
    for (int blas = 0; blas <= 1; blas++) {
      int old = mf_gemm_use_blas(blas);
      mf_test_poison(f.out, f.M * f.C);
      mf_trimul_forward(f.out, f.saved, f.z, f.pm, &f.w, f.N, f.C, f.Ch, og);
      mf_gemm_use_blas(old);
      char what[96];
      snprintf(what, sizeof what, "forward %s N=12 C=Ch=128 masked (gemm %s)",
               og ? "outgoing" : "incoming", blas ? "blas if built" : "loop");
      mf_test_close(what, f.out, ref, f.M * f.C, 1e-11);
    }
  }
}

static const char *const k_names[] = {"ln_in_g", "ln_in_b", "w_ap",     "w_ag",     "w_bp",
                                      "w_bg",    "w_g",     "ln_out_g", "ln_out_b", "w_z"};

/* Pointer to field f of a weights struct (same order as k_names and the struct). */
static double *field_ptr(const mf_trimul_weights *w, int f) {
  double *const p[] = {w->ln_in_g, w->ln_in_b, w->w_ap, w->w_ag,     w->w_bp,
                       w->w_bg,    w->w_g,     w->ln_out_g, w->ln_out_b, w->w_z};
  return p[f];
}

/* Finite differences in double, central, h = 1e-6: truncation O(h²) ≈ 1e-12 and rounding
 * ≈ 1e-16·|L|/h ≈ 1e-9 relative, so a relative error above 1e-6 is a wrong gradient. */
static void gradcheck_case(int N, int C, int Ch, int og, int masked, int64_t max_checks,
                           uint64_t seed) {
  fixture f;
  fixture_init(&f, N, C, Ch, og, masked, seed);
  double *dz = mf_test_alloc(f.M * C), *gflat = mf_test_alloc(f.np);
  mf_trimul_weights g;
  mf_trimul_weights_bind(&g, gflat, C, Ch);
  loss_fn(&f);
  mf_test_poison(dz, f.M * C);
  mf_trimul_backward(dz, &g, f.wout, f.saved, f.z, f.pm, &f.w, N, C, Ch, og);
  char what[128];
  const char *dir = og ? "out" : "in";
  snprintf(what, sizeof what, "%s N=%d C=%d Ch=%d%s dz", dir, N, C, Ch, masked ? " masked" : "");
  mf_test_gradcheck(what, loss_fn, &f, f.z, dz, f.M * C, max_checks, 1e-6, 1e-6);
  int64_t off = 0;
  for (int k = 0; k < 10; k++) {
    double *p = field_ptr(&f.w, k);
    int64_t n = (k + 1 < 10 ? field_ptr(&f.w, k + 1) - p : f.np - off);
    snprintf(what, sizeof what, "%s N=%d C=%d Ch=%d%s %s", dir, N, C, Ch, masked ? " masked" : "",
             k_names[k]);
    mf_test_gradcheck(what, loss_fn, &f, p, field_ptr(&g, k), n, max_checks, 1e-6, 1e-6);
    off += n;
  }
}

static void test_gradients(void) {
  for (int og = 0; og <= 1; og++) {
    gradcheck_case(5, 6, 5, og, 1, 100000, 500 + (uint64_t)og);
    gradcheck_case(1, 6, 5, og, 0, 100000, 510 + (uint64_t)og);
    gradcheck_case(7, 4, 3, og, 0, 60, 520 + (uint64_t)og);
  }
  /* AF3 widths: a spread of 24 elements per tensor */
  gradcheck_case(4, 128, 128, 1, 1, 24, 530);
  gradcheck_case(4, 128, 128, 0, 1, 24, 531);
}

/* dz assigns (NaN in dz beforehand is overwritten); parameter gradients accumulate
 * (a second backward adds the same amount again); NULL gradients are skipped. */
static void test_contract(void) {
  fixture f;
  fixture_init(&f, 5, 6, 5, 1, 1, 600);
  double *dz1 = mf_test_alloc(f.M * f.C), *dz2 = mf_test_alloc(f.M * f.C);
  double *g1 = mf_test_alloc(f.np), *g2 = mf_test_alloc(f.np), *twice = mf_test_alloc(f.np);
  mf_trimul_weights w1, w2;
  mf_trimul_weights_bind(&w1, g1, f.C, f.Ch);
  mf_trimul_weights_bind(&w2, g2, f.C, f.Ch);
  int64_t live0 = mf_mem_stats(MF_HOST).current;
  loss_fn(&f);
  mf_test_poison(dz1, f.M * f.C);
  mf_trimul_backward(dz1, &w1, f.wout, f.saved, f.z, f.pm, &f.w, f.N, f.C, f.Ch, 1);
  MF_TEST(mf_mem_stats(MF_HOST).current == live0, "trimul: forward and backward free all scratch");
  mf_test_randn(g2, f.np, 601, 1.0);
  for (int64_t e = 0; e < f.np; e++) twice[e] = g2[e] + 2 * g1[e];
  for (int rep = 0; rep < 2; rep++) {
    mf_test_randn(dz2, f.M * f.C, 602, 1.0);
    mf_trimul_backward(dz2, &w2, f.wout, f.saved, f.z, f.pm, &f.w, f.N, f.C, f.Ch, 1);
  }
  mf_test_close("parameter gradients accumulate", g2, twice, f.np, 1e-14);
  mf_test_close("dz assigns", dz2, dz1, f.M * f.C, 0);
  mf_trimul_backward(dz2, NULL, f.wout, f.saved, f.z, f.pm, &f.w, f.N, f.C, f.Ch, 1);
  mf_test_close("dz with NULL parameter gradients", dz2, dz1, f.M * f.C, 0);
  mf_trimul_weights part = w2;
  part.w_ap = part.ln_out_b = NULL;
  memcpy(twice, g2, (size_t)f.np * sizeof *twice);
  mf_trimul_backward(dz2, &part, f.wout, f.saved, f.z, f.pm, &f.w, f.N, f.C, f.Ch, 1);
  int skipped_ok = 1, others_ok = 1;
  int64_t ap0 = w2.w_ap - g2, ap1 = ap0 + (int64_t)f.Ch * f.C;
  int64_t ob0 = w2.ln_out_b - g2, ob1 = ob0 + f.Ch;
  for (int64_t e = 0; e < f.np; e++) {
    int skip = (e >= ap0 && e < ap1) || (e >= ob0 && e < ob1);
    if (skip) skipped_ok &= g2[e] == twice[e];
    else others_ok &= fabs(g2[e] - (twice[e] + g1[e])) <= 1e-12 * (1 + fabs(g1[e]));
  }
  MF_TEST(skipped_ok && others_ok,
          "NULL gradient fields are skipped (%d), the rest accumulate (%d)",
          skipped_ok, others_ok);
}

/* outgoing(z; W) = transpose(incoming(zᵀ; W with A ↔ B)), forward and backward. */
static void test_symmetry(void) {
  const int N = 6, C = 5, Ch = 4;
  fixture f;
  fixture_init(&f, N, C, Ch, 1, 1, 700);
  int64_t M = f.M;
  uint8_t pmt[36];
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) pmt[j * N + i] = f.pm[i * N + j];
  mf_trimul_weights sw = f.w; /* the same buffers, A and B projections exchanged */
  sw.w_ap = f.w.w_bp;
  sw.w_ag = f.w.w_bg;
  sw.w_bp = f.w.w_ap;
  sw.w_bg = f.w.w_ag;
  double *zt = mf_test_alloc(M * C), *o1 = mf_test_alloc(M * C), *o2t = mf_test_alloc(M * C);
  double *o2 = mf_test_alloc(M * C), *s2 = mf_test_alloc((int64_t)mf_trimul_saved_size(N, C, Ch));
  mf_test_transpose_pair(zt, f.z, N, C);
  mf_trimul_forward(o1, f.saved, f.z, f.pm, &f.w, N, C, Ch, 1);
  mf_trimul_forward(o2t, s2, zt, pmt, &sw, N, C, Ch, 0);
  mf_test_transpose_pair(o2, o2t, N, C);
  mf_test_close("outgoing(z) == incoming(z^T)^T with A<->B weights", o2, o1, M * C, 1e-12);
  /* with identical weights the two are different functions */
  mf_trimul_forward(o2t, s2, zt, pmt, &f.w, N, C, Ch, 0);
  mf_test_transpose_pair(o2, o2t, N, C);
  MF_TEST(mf_test_relerr(o2, o1, M * C) > 1e-3, "identical weights: not the same function");
  mf_trimul_forward(o2t, s2, zt, pmt, &sw, N, C, Ch, 0);

  double *dz1 = mf_test_alloc(M * C), *dz2t = mf_test_alloc(M * C), *dz2 = mf_test_alloc(M * C);
  double *doutt = mf_test_alloc(M * C), *g1 = mf_test_alloc(f.np), *g2 = mf_test_alloc(f.np);
  mf_trimul_weights w1, w2;
  mf_trimul_weights_bind(&w1, g1, C, Ch);
  mf_trimul_weights_bind(&w2, g2, C, Ch);
  mf_trimul_weights w2s = w2; /* gradients of the exchanged weights land in their own slots */
  w2s.w_ap = w2.w_bp;
  w2s.w_ag = w2.w_bg;
  w2s.w_bp = w2.w_ap;
  w2s.w_bg = w2.w_ag;
  mf_test_transpose_pair(doutt, f.wout, N, C);
  mf_trimul_backward(dz1, &w1, f.wout, f.saved, f.z, f.pm, &f.w, N, C, Ch, 1);
  mf_trimul_backward(dz2t, &w2s, doutt, s2, zt, pmt, &sw, N, C, Ch, 0);
  mf_test_transpose_pair(dz2, dz2t, N, C);
  mf_test_close("symmetry: dz", dz2, dz1, M * C, 1e-12);
  mf_test_close("symmetry: parameter gradients", g2, g1, f.np, 1e-12);
}

/* 98,816 = 2·128 (LN) + 4·128·128 + 2·128 (LN) + 128·128 + 128·128 (af3-spec §11) */
static void test_param_count(void) {
  mf_trimul_weights w;
  int64_t n = mf_trimul_weights_bind(&w, NULL, 128, 128);
  MF_TEST(n == 98816, "trimul parameters at C=Ch=128: %lld (spec 98,816)", (long long)n);
  MF_TEST(w.w_ap == NULL && w.w_z == NULL, "bind(NULL) leaves fields NULL");
  /* the slices tile the flat buffer in struct order with the documented shapes */
  const int C = 7, Ch = 3;
  double *flat = mf_test_alloc(mf_trimul_weights_bind(&w, NULL, C, Ch));
  int64_t total = mf_trimul_weights_bind(&w, flat, C, Ch);
  const int64_t sizes[] = {C, C, Ch * C, Ch * C, Ch * C, Ch * C, C * C, Ch, Ch, C * Ch};
  int64_t off = 0;
  int ok = 1;
  for (int k = 0; k < 10; k++) {
    ok &= field_ptr(&w, k) == flat + off;
    off += sizes[k];
  }
  MF_TEST(ok && total == off, "weights tile the flat buffer (%lld of %lld)", (long long)off,
          (long long)total);
}

/* The op writes exactly mf_trimul_saved_size elements of `saved`, and out only. */
static void test_saved_extent(void) {
  fixture f;
  fixture_init(&f, 5, 6, 5, 0, 1, 800);
  int64_t ns = (int64_t)mf_trimul_saved_size(5, 6, 5), guard = 64;
  MF_TEST(ns == 25 * (3 * 6 + 6 * 5 + 4), "saved size formula: %lld", (long long)ns);
  double *buf = mf_test_alloc(ns + 2 * guard), *obuf = mf_test_alloc(f.M * f.C + 2 * guard);
  for (int64_t e = 0; e < ns + 2 * guard; e++) buf[e] = 12345.0;
  for (int64_t e = 0; e < f.M * f.C + 2 * guard; e++) obuf[e] = 12345.0;
  mf_trimul_forward(obuf + guard, buf + guard, f.z, f.pm, &f.w, 5, 6, 5, 0);
  int ok = 1;
  for (int64_t e = 0; e < guard; e++)
    ok &= buf[e] == 12345.0 && buf[guard + ns + e] == 12345.0 && obuf[e] == 12345.0 &&
          obuf[guard + f.M * f.C + e] == 12345.0;
  MF_TEST(ok, "forward stays inside out and saved");
}

static void bad_dims(void *ctx) {
  fixture *f = ctx;
  mf_trimul_forward(f->out, f->saved, f->z, NULL, &f->w, 5, 0, 5, 1);
}
static void bad_flag(void *ctx) {
  fixture *f = ctx;
  mf_trimul_forward(f->out, f->saved, f->z, NULL, &f->w, 5, 6, 5, 2);
}
static void missing_weight(void *ctx) {
  fixture *f = ctx;
  mf_trimul_weights w = f->w;
  w.w_g = NULL;
  mf_trimul_backward(f->out, NULL, f->wout, f->saved, f->z, NULL, &w, 5, 6, 5, 1);
}

static void test_asserts(void) {
  fixture f;
  fixture_init(&f, 5, 6, 5, 1, 0, 900);
  MF_TEST(mf_test_expect_fatal(bad_dims, &f, "trimul dims"), "C=0 is fatal: %s",
          mf_test_last_fatal());
  MF_TEST(mf_test_expect_fatal(bad_flag, &f, "outgoing"), "outgoing=2 is fatal: %s",
          mf_test_last_fatal());
  MF_TEST(mf_test_expect_fatal(missing_weight, &f, "weight"), "a NULL weight is fatal: %s",
          mf_test_last_fatal());
}

int main(void) {
  mf_test_begin("test_trimul");
  test_forward();
  test_forward_af3_widths();
  test_gradients();
  test_contract();
  test_symmetry();
  test_param_count();
  test_saved_extent();
  test_asserts();
  return mf_test_end();
}
