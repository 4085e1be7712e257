/* test_triatt.c — triangle attention, starting and ending node (src/ops/triatt.h): forward
 * against a naive double implementation written here from the equations of af3-spec §6.4.2
 * (materialised logits, both nodes written out directly, nothing shared with the op),
 * fully masked rows (padded tokens: zero output, no NaN), finite-difference gradient
 * checks of dz and every parameter, the gradient contract (dz assigns, parameters
 * accumulate), the ending = transpose(starting on transpose) identity forward and
 * backward, the parameter count at default dimensions, the extent of the saved workspace
 * and the shape assertions. Built in double (mf_real = double). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ops/triatt.h"

/* ------------------------------------------------------------ naive reference */

/* out (N, N, C): Alg 14 (starting) / Alg 15 (ending), straight from the equations.
 * Masked keys are left out of the softmax; a query with no valid key gets o = 0. */
static void ref_triatt(double *out, const double *z, const uint8_t *pm, const mf_triatt_weights *w,
                       int N, int C, int H, int D, int starting) {
  const int HD = H * D;
  const int64_t M = (int64_t)N * N;
  double *x = mf_test_alloc(M * C), *q = mf_test_alloc(M * HD), *k = mf_test_alloc(M * HD);
  double *v = mf_test_alloc(M * HD), *g = mf_test_alloc(M * HD), *b = mf_test_alloc(M * H);
  double *logit = mf_test_alloc((int64_t)N * N * N * H); /* (i, j, k, h) */
  double *o = mf_test_alloc(HD);
  for (int64_t m = 0; m < M; m++) {
    mf_test_ref_ln(x + m * C, z + m * C, w->ln_g, w->ln_b, C);
    mf_test_ref_matvec(q + m * HD, w->w_q, x + m * C, HD, C);
    mf_test_ref_matvec(k + m * HD, w->w_k, x + m * C, HD, C);
    mf_test_ref_matvec(v + m * HD, w->w_v, x + m * C, HD, C);
    mf_test_ref_matvec(g + m * HD, w->w_g, x + m * C, HD, C);
    mf_test_ref_matvec(b + m * H, w->w_b, x + m * C, H, C);
  }
#define AT(a, b) ((int64_t)(a) * N + (b))
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++)
      for (int kk = 0; kk < N; kk++)
        for (int h = 0; h < H; h++) {
          /* starting: q_ij·k_ik + b_jk;  ending: q_ij·k_kj + b_ki */
          int64_t key = starting ? AT(i, kk) : AT(kk, j);
          int64_t bb = starting ? AT(j, kk) : AT(kk, i);
          double dot = 0;
          for (int d = 0; d < D; d++) dot += q[AT(i, j) * HD + h * D + d] * k[key * HD + h * D + d];
          logit[(AT(i, j) * N + kk) * H + h] = dot / sqrt((double)D) + b[bb * H + h];
        }
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      for (int h = 0; h < H; h++) {
        double mx = -INFINITY, sum = 0;
        for (int kk = 0; kk < N; kk++) {
          int64_t key = starting ? AT(i, kk) : AT(kk, j);
          double l = logit[(AT(i, j) * N + kk) * H + h];
          if ((!pm || pm[key]) && l > mx) mx = l;
        }
        for (int d = 0; d < D; d++) o[h * D + d] = 0;
        for (int kk = 0; kk < N; kk++) {
          int64_t key = starting ? AT(i, kk) : AT(kk, j);
          if (pm && !pm[key]) continue;
          double p = exp(logit[(AT(i, j) * N + kk) * H + h] - mx);
          sum += p;
          for (int d = 0; d < D; d++) o[h * D + d] += p * v[key * HD + h * D + d];
        }
        for (int d = 0; d < D; d++) {
          double gate = mf_test_sigmoid(g[AT(i, j) * HD + h * D + d]);
          o[h * D + d] = sum > 0 ? gate * o[h * D + d] / sum : 0;
        }
      }
      mf_test_ref_matvec(out + AT(i, j) * C, w->w_o, o, C, HD);
    }
#undef AT
}

/* ------------------------------------------------------------ fixtures */

typedef struct {
  int N, C, H, D, starting;
  int64_t M, np;
  double *z, *flat, *out, *saved, *wout; /* wout: the loss weights, L = Σ out·wout */
  uint8_t *pm;                           /* NULL or (N, N) */
  mf_triatt_weights w;
} fixture;

/* Random inputs; weights scaled so logits stay O(1); LN γ near 1. masked: the last token
 * is padded (pm = m_i·m_j, so its row has no valid key) and one more pair is masked. */
static void fixture_init(fixture *f, int N, int C, int H, int D, int starting, int masked,
                         uint64_t seed) {
  memset(f, 0, sizeof *f);
  f->N = N;
  f->C = C;
  f->H = H;
  f->D = D;
  f->starting = starting;
  f->M = (int64_t)N * N;
  f->np = mf_triatt_weights_bind(&f->w, NULL, C, H, D);
  f->flat = mf_test_alloc(f->np);
  mf_triatt_weights_bind(&f->w, f->flat, C, H, D);
  mf_test_randn(f->flat, f->np, seed, 1.0);
  for (int c = 0; c < C; c++) {
    f->w.ln_g[c] = 1 + 0.2 * f->w.ln_g[c];
    f->w.ln_b[c] *= 0.2;
  }
  const int64_t HD = (int64_t)H * D;
  double sc = 1 / sqrt((double)C), so = 1 / sqrt((double)HD);
  for (int64_t e = 0; e < HD * C; e++) {
    f->w.w_q[e] *= sc;
    f->w.w_k[e] *= sc;
    f->w.w_v[e] *= sc;
    f->w.w_g[e] *= sc;
    f->w.w_o[e] *= so;
  }
  for (int64_t e = 0; e < (int64_t)H * C; e++) f->w.w_b[e] *= sc;
  f->z = mf_test_alloc(f->M * C);
  mf_test_randn(f->z, f->M * C, seed + 1, 1.0);
  for (int64_t m = 0; m < f->M; m++)
    for (int c = 0; c < C; c++)
      f->z[m * C + c] = 0.5 * (double)(m % 3) + (1 + 0.1 * (double)(m % 4)) * f->z[m * C + c];
  f->out = mf_test_alloc(f->M * C);
  f->saved = mf_test_alloc((int64_t)mf_triatt_saved_size(N, C, H, D));
  f->wout = mf_test_alloc(f->M * C);
  mf_test_randn(f->wout, f->M * C, seed + 2, 1.0);
  f->pm = NULL;
  if (masked) {
    uint8_t *pmbuf = (uint8_t *)mf_test_alloc(f->M / 8 + 1);
    for (int i = 0; i < N; i++)
      for (int j = 0; j < N; j++) pmbuf[i * N + j] = (uint8_t)(i != N - 1 && j != N - 1);
    if (N > 2) pmbuf[1 * N + 0] = 0;
    f->pm = pmbuf;
  }
}

static double loss_fn(void *ctx) {
  fixture *f = ctx;
  mf_triatt_forward(f->out, f->saved, f->z, f->pm, &f->w, f->N, f->C, f->H, f->D, f->starting);
  return mf_test_dot(f->out, f->wout, f->M * f->C);
}

static const char *node_name(int starting) { return starting ? "starting" : "ending"; }

/* ------------------------------------------------------------ tests */

static void test_forward(void) {
  static const int Ns[] = {1, 5, 7};
  for (int in = 0; in < 3; in++)
    for (int st = 0; st <= 1; st++)
      for (int masked = 0; masked <= 1; masked++) {
        fixture f;
        fixture_init(&f, Ns[in], 6, 2, 3, st, masked, 100 + (uint64_t)(10 * in + 2 * st + masked));
        double *ref = mf_test_alloc(f.M * f.C);
        ref_triatt(ref, f.z, f.pm, &f.w, f.N, f.C, f.H, f.D, st);
        mf_test_poison(f.out, f.M * f.C);
        mf_test_poison(f.saved, (int64_t)mf_triatt_saved_size(f.N, f.C, f.H, f.D));
        mf_triatt_forward(f.out, f.saved, f.z, f.pm, &f.w, f.N, f.C, f.H, f.D, st);
        char what[96];
        snprintf(what, sizeof what, "forward %s N=%d C=6 H=2 D=3 %s", node_name(st), f.N,
                 masked ? "masked" : "no mask");
        /* both sides in double: only summation order differs */
        mf_test_close(what, f.out, ref, f.M * f.C, 1e-12);
        if (masked) {
          /* the padded token's row (starting) / column (ending) has no valid key: Δz = 0 */
          int zero = 1;
          for (int t = 0; t < f.N; t++)
            for (int c = 0; c < f.C; c++) {
              int64_t m = st ? (int64_t)(f.N - 1) * f.N + t : (int64_t)t * f.N + (f.N - 1);
              zero &= f.out[m * f.C + c] == 0;
            }
          MF_TEST(zero, "%s: fully masked rows give exactly 0 (no NaN)", what);
        }
      }
  /* an explicit all-ones mask is the same as no mask; a masked pair changes the output */
  fixture f;
  fixture_init(&f, 5, 6, 2, 3, 1, 0, 7);
  double *a = mf_test_alloc(f.M * f.C), *b = mf_test_alloc(f.M * f.C);
  uint8_t ones[25];
  memset(ones, 1, sizeof ones);
  mf_triatt_forward(a, f.saved, f.z, NULL, &f.w, 5, 6, 2, 3, 1);
  mf_triatt_forward(b, f.saved, f.z, ones, &f.w, 5, 6, 2, 3, 1);
  MF_TEST(mf_test_maxabs(a, b, f.M * f.C) == 0, "all-ones mask == NULL mask");
  ones[7] = 0;
  mf_triatt_forward(b, f.saved, f.z, ones, &f.w, 5, 6, 2, 3, 1);
  MF_TEST(mf_test_maxabs(a, b, f.M * f.C) > 1e-6, "a masked pair changes the output");
  /* an entirely masked problem is all zeros */
  memset(ones, 0, sizeof ones);
  mf_test_poison(b, f.M * f.C);
  mf_triatt_forward(b, f.saved, f.z, ones, &f.w, 5, 6, 2, 3, 0);
  int zero = 1;
  for (int64_t e = 0; e < f.M * f.C; e++) zero &= b[e] == 0;
  MF_TEST(zero, "all keys masked: Δz = 0");
}

/* AF3 widths (C = 128, H = 4, D = 32) at a small N. */
static void test_forward_af3_widths(void) {
  for (int st = 0; st <= 1; st++) {
    fixture f;
    fixture_init(&f, 12, 128, 4, 32, st, 1, 300 + (uint64_t)st);
    double *ref = mf_test_alloc(f.M * f.C);
    ref_triatt(ref, f.z, f.pm, &f.w, f.N, f.C, f.H, f.D, st);
    mf_test_poison(f.out, f.M * f.C);
    mf_triatt_forward(f.out, f.saved, f.z, f.pm, &f.w, f.N, f.C, f.H, f.D, st);
    char what[96];
    snprintf(what, sizeof what, "forward %s N=12 C=128 H=4 D=32 masked", node_name(st));
    mf_test_close(what, f.out, ref, f.M * f.C, 1e-11);
  }
}

static const char *const k_names[] = {"ln_g", "ln_b", "w_q", "w_k", "w_v", "w_b", "w_g", "w_o"};
enum { NFIELDS = 8 };

/* Pointer to field f of a weights struct (same order as k_names and the struct). */
static double *field_ptr(const mf_triatt_weights *w, int f) {
  double *const p[NFIELDS] = {w->ln_g, w->ln_b, w->w_q, w->w_k, w->w_v, w->w_b, w->w_g, w->w_o};
  return p[f];
}

/* Finite differences in double, central, h = 1e-6: truncation O(h²) ≈ 1e-12 and rounding
 * ≈ 1e-16·|L|/h ≈ 1e-9 relative, so a relative error above 1e-6 is a wrong gradient. */
static void gradcheck_case(int N, int C, int H, int D, int st, int masked, int64_t max_checks,
                           uint64_t seed) {
  fixture f;
  fixture_init(&f, N, C, H, D, st, masked, seed);
  double *dz = mf_test_alloc(f.M * C), *gflat = mf_test_alloc(f.np);
  mf_triatt_weights g;
  mf_triatt_weights_bind(&g, gflat, C, H, D);
  loss_fn(&f);
  mf_test_poison(dz, f.M * C);
  mf_triatt_backward(dz, &g, f.wout, f.saved, f.z, f.pm, &f.w, N, C, H, D, st);
  char what[128];
  snprintf(what, sizeof what, "%s N=%d C=%d H=%d D=%d%s dz", node_name(st), N, C, H, D,
           masked ? " masked" : "");
  mf_test_gradcheck(what, loss_fn, &f, f.z, dz, f.M * C, max_checks, 1e-6, 1e-6);
  for (int k = 0; k < NFIELDS; k++) {
    double *p = field_ptr(&f.w, k);
    int64_t n = (k + 1 < NFIELDS ? field_ptr(&f.w, k + 1) : f.flat + f.np) - p;
    snprintf(what, sizeof what, "%s N=%d C=%d H=%d D=%d%s %s", node_name(st), N, C, H, D,
             masked ? " masked" : "", k_names[k]);
    mf_test_gradcheck(what, loss_fn, &f, p, field_ptr(&g, k), n, max_checks, 1e-6, 1e-6);
  }
}

static void test_gradients(void) {
  for (int st = 0; st <= 1; st++) {
    gradcheck_case(5, 6, 2, 3, st, 1, 100000, 500 + (uint64_t)st);
    gradcheck_case(1, 6, 2, 3, st, 0, 100000, 510 + (uint64_t)st);
    gradcheck_case(7, 4, 2, 2, st, 0, 60, 520 + (uint64_t)st);
  }
  /* AF3 widths: a spread of 24 elements per tensor */
  gradcheck_case(4, 128, 4, 32, 1, 1, 24, 530);
  gradcheck_case(4, 128, 4, 32, 0, 1, 24, 531);
}

/* dz assigns (NaN in dz beforehand is overwritten); parameter gradients accumulate
 * (a second backward adds the same amount again); NULL gradients are skipped. */
static void test_contract(void) {
  for (int st = 0; st <= 1; st++) {
    fixture f;
    fixture_init(&f, 5, 6, 2, 3, st, 1, 600 + (uint64_t)st);
    double *dz1 = mf_test_alloc(f.M * f.C), *dz2 = mf_test_alloc(f.M * f.C);
    double *g1 = mf_test_alloc(f.np), *g2 = mf_test_alloc(f.np), *twice = mf_test_alloc(f.np);
    mf_triatt_weights w1, w2;
    mf_triatt_weights_bind(&w1, g1, f.C, f.H, f.D);
    mf_triatt_weights_bind(&w2, g2, f.C, f.H, f.D);
    int64_t live0 = mf_mem_stats(MF_HOST).current;
    loss_fn(&f);
    mf_test_poison(dz1, f.M * f.C);
    mf_triatt_backward(dz1, &w1, f.wout, f.saved, f.z, f.pm, &f.w, f.N, f.C, f.H, f.D, st);
    MF_TEST(mf_mem_stats(MF_HOST).current == live0,
            "triatt: forward and backward free all scratch");
    mf_test_randn(g2, f.np, 601, 1.0);
    for (int64_t e = 0; e < f.np; e++) twice[e] = g2[e] + 2 * g1[e];
    for (int rep = 0; rep < 2; rep++) {
      mf_test_randn(dz2, f.M * f.C, 602, 1.0);
      mf_triatt_backward(dz2, &w2, f.wout, f.saved, f.z, f.pm, &f.w, f.N, f.C, f.H, f.D, st);
    }
    char what[80];
    snprintf(what, sizeof what, "%s: parameter gradients accumulate", node_name(st));
    mf_test_close(what, g2, twice, f.np, 1e-14);
    snprintf(what, sizeof what, "%s: dz assigns", node_name(st));
    mf_test_close(what, dz2, dz1, f.M * f.C, 0);
    mf_triatt_backward(dz2, NULL, f.wout, f.saved, f.z, f.pm, &f.w, f.N, f.C, f.H, f.D, st);
    snprintf(what, sizeof what, "%s: dz with NULL parameter gradients", node_name(st));
    mf_test_close(what, dz2, dz1, f.M * f.C, 0);
    mf_triatt_weights part = w2;
    part.w_b = part.ln_g = NULL;
    memcpy(twice, g2, (size_t)f.np * sizeof *twice);
    mf_triatt_backward(dz2, &part, f.wout, f.saved, f.z, f.pm, &f.w, f.N, f.C, f.H, f.D, st);
    int skipped_ok = 1, others_ok = 1;
    int64_t b0 = w2.w_b - g2, b1 = b0 + (int64_t)f.H * f.C;
    int64_t l0 = w2.ln_g - g2, l1 = l0 + f.C;
    for (int64_t e = 0; e < f.np; e++) {
      int skip = (e >= b0 && e < b1) || (e >= l0 && e < l1);
      if (skip) skipped_ok &= g2[e] == twice[e];
      else others_ok &= fabs(g2[e] - (twice[e] + g1[e])) <= 1e-12 * (1 + fabs(g1[e]));
    }
    MF_TEST(skipped_ok && others_ok,
            "%s: NULL gradient fields are skipped (%d), the rest accumulate (%d)", node_name(st),
            skipped_ok, others_ok);
  }
}

/* ending(z) = transpose(starting(zᵀ)) with the same weights, forward and backward
 * (dz transposed back, parameter gradients identical). */
static void test_symmetry(void) {
  const int N = 6, C = 5, H = 2, D = 3;
  fixture f;
  fixture_init(&f, N, C, H, D, 0, 1, 700);
  const int64_t M = f.M;
  uint8_t pmt[36];
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) pmt[j * N + i] = f.pm[i * N + j];
  double *zt = mf_test_alloc(M * C), *o1 = mf_test_alloc(M * C), *o2t = mf_test_alloc(M * C);
  double *o2 = mf_test_alloc(M * C), *s2 = mf_test_alloc((int64_t)mf_triatt_saved_size(N, C, H, D));
  mf_test_transpose_pair(zt, f.z, N, C);
  mf_triatt_forward(o1, f.saved, f.z, f.pm, &f.w, N, C, H, D, 0);
  mf_triatt_forward(o2t, s2, zt, pmt, &f.w, N, C, H, D, 1);
  mf_test_transpose_pair(o2, o2t, N, C);
  mf_test_close("ending(z) == starting(z^T)^T", o2, o1, M * C, 1e-12);
  /* and the two nodes are different functions of the same z */
  mf_triatt_forward(o2, s2, f.z, f.pm, &f.w, N, C, H, D, 1);
  MF_TEST(mf_test_relerr(o2, o1, M * C) > 1e-3, "starting(z) != ending(z)");
  mf_triatt_forward(o2t, s2, zt, pmt, &f.w, N, C, H, D, 1);

  double *dz1 = mf_test_alloc(M * C), *dz2t = mf_test_alloc(M * C), *dz2 = mf_test_alloc(M * C);
  double *doutt = mf_test_alloc(M * C), *g1 = mf_test_alloc(f.np), *g2 = mf_test_alloc(f.np);
  mf_triatt_weights w1, w2;
  mf_triatt_weights_bind(&w1, g1, C, H, D);
  mf_triatt_weights_bind(&w2, g2, C, H, D);
  mf_test_transpose_pair(doutt, f.wout, N, C);
  mf_triatt_backward(dz1, &w1, f.wout, f.saved, f.z, f.pm, &f.w, N, C, H, D, 0);
  mf_triatt_backward(dz2t, &w2, doutt, s2, zt, pmt, &f.w, N, C, H, D, 1);
  mf_test_transpose_pair(dz2, dz2t, N, C);
  mf_test_close("symmetry: dz", dz2, dz1, M * C, 1e-12);
  mf_test_close("symmetry: parameter gradients", g2, g1, f.np, 1e-12);
}

/* 82,688 = 256 (LN) + 128·4 (bias) + 4·128·128 (q, k, v, g) + 128·128 (o) (af3-spec §11) */
static void test_param_count(void) {
  mf_triatt_weights w;
  int64_t n = mf_triatt_weights_bind(&w, NULL, 128, 4, 32);
  MF_TEST(n == 82688, "triatt parameters at C=128 H=4 D=32: %lld (spec 82,688)", (long long)n);
  MF_TEST(w.w_q == NULL && w.w_o == NULL, "bind(NULL) leaves fields NULL");
  const int C = 7, H = 3, D = 2, HD = H * D;
  double *flat = mf_test_alloc(mf_triatt_weights_bind(&w, NULL, C, H, D));
  int64_t total = mf_triatt_weights_bind(&w, flat, C, H, D);
  const int64_t sizes[NFIELDS] = {C, C, HD * C, HD * C, HD * C, H * C, HD * C, C * HD};
  int64_t off = 0;
  int ok = 1;
  for (int k = 0; k < NFIELDS; k++) {
    ok &= field_ptr(&w, k) == flat + off;
    off += sizes[k];
  }
  MF_TEST(ok && total == off, "weights tile the flat buffer (%lld of %lld)", (long long)off,
          (long long)total);
}

/* The op writes exactly mf_triatt_saved_size elements of `saved`, and out only. */
static void test_saved_extent(void) {
  for (int st = 0; st <= 1; st++) {
    fixture f;
    fixture_init(&f, 5, 6, 2, 3, st, 1, 800);
    int64_t ns = (int64_t)mf_triatt_saved_size(5, 6, 2, 3), guard = 64;
    MF_TEST(ns == 25 * (6 + 2 + 5 * 6 + 2 * 2), "saved size formula: %lld", (long long)ns);
    double *buf = mf_test_alloc(ns + 2 * guard), *obuf = mf_test_alloc(f.M * f.C + 2 * guard);
    for (int64_t e = 0; e < ns + 2 * guard; e++) buf[e] = 12345.0;
    for (int64_t e = 0; e < f.M * f.C + 2 * guard; e++) obuf[e] = 12345.0;
    mf_triatt_forward(obuf + guard, buf + guard, f.z, f.pm, &f.w, 5, 6, 2, 3, st);
    int ok = 1;
    for (int64_t e = 0; e < guard; e++)
      ok &= buf[e] == 12345.0 && buf[guard + ns + e] == 12345.0 && obuf[e] == 12345.0 &&
            obuf[guard + f.M * f.C + e] == 12345.0;
    MF_TEST(ok, "%s: forward stays inside out and saved", node_name(st));
  }
}

static void bad_dims(void *ctx) {
  fixture *f = ctx;
  mf_triatt_forward(f->out, f->saved, f->z, NULL, &f->w, 5, 6, 0, 3, 1);
}
static void bad_flag(void *ctx) {
  fixture *f = ctx;
  mf_triatt_forward(f->out, f->saved, f->z, NULL, &f->w, 5, 6, 2, 3, -1);
}
static void missing_weight(void *ctx) {
  fixture *f = ctx;
  mf_triatt_weights w = f->w;
  w.w_b = NULL;
  mf_triatt_backward(f->out, NULL, f->wout, f->saved, f->z, NULL, &w, 5, 6, 2, 3, 0);
}

static void test_asserts(void) {
  fixture f;
  fixture_init(&f, 5, 6, 2, 3, 1, 0, 900);
  MF_TEST(mf_test_expect_fatal(bad_dims, &f, "triatt dims"), "H=0 is fatal: %s",
          mf_test_last_fatal());
  MF_TEST(mf_test_expect_fatal(bad_flag, &f, "starting"), "starting=-1 is fatal: %s",
          mf_test_last_fatal());
  MF_TEST(mf_test_expect_fatal(missing_weight, &f, "weight"), "a NULL weight is fatal: %s",
          mf_test_last_fatal());
}

int main(void) {
  mf_test_begin("test_triatt");
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
