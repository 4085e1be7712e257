/* test_ops_f32.c — the dense CPU ops in the FLOAT build (mf_real = float, OpenBLAS sgemm
 * when the build has it, and the built-in loop): linear, layernorm, ln_linear,
 * transition and adaln (+ gate), forward and backward, on moderately sized random
 * inputs (M = 300, C = 128), against naive references computed in double from the same
 * float-rounded inputs. Tolerance: relative error (‖got − ref‖/‖ref‖) 1e-5, what float
 * storage with double or sgemm accumulation gives at these sizes (observed <= 5e-7).
 * The ASan build compiles it in float too (libmegafold_asan32.a).
 * Not a gradient check (test_<op>.c do those in double). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ops/adaln.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/linear.h"
#include "ops/ln_linear.h"
#include "ops/transition.h"

#ifdef MF_REAL_DOUBLE
#error "test_ops_f32.c tests the float build"
#endif
#define TOL 1e-5

enum { M = 300, C = 128, O = 96, HD = 512, CS = 64 };

static const char *g_backend = "";

/* n values of mf_real (mf_test_alloc gives n doubles: room for n mf_real either way) */
static mf_real *ralloc(int64_t n) { return (mf_real *)mf_test_alloc(n); }

/* Random doubles, rounded to mf_real so the reference sees exactly the op's inputs. */
static double *rnd(int64_t n, uint64_t seed, double scale, double shift) {
  double *x = mf_test_alloc(n);
  mf_test_randn(x, n, seed, scale);
  for (int64_t i = 0; i < n; i++) x[i] = (double)(mf_real)(x[i] + shift);
  return x;
}
static mf_real *to_real(const double *x, int64_t n) {
  mf_real *r = ralloc(n);
  for (int64_t i = 0; i < n; i++) r[i] = (mf_real)x[i];
  return r;
}
static mf_real *poisoned(int64_t n) {
  mf_real *r = ralloc(n);
  for (int64_t i = 0; i < n; i++) r[i] = (mf_real)NAN;
  return r;
}
static mf_real *zeros(int64_t n) { return ralloc(n); /* mf_test_alloc zeroes */ }

/* Counted check of an mf_real result against a double reference. */
static void close_r(const char *what, const mf_real *got, const double *ref, int64_t n) {
  double *g = mf_test_alloc(n);
  for (int64_t i = 0; i < n; i++) g[i] = got[i];
  char buf[160];
  snprintf(buf, sizeof buf, "f32 %s [%s]", what, g_backend);
  mf_test_close(buf, g, ref, n, TOL);
}

/* ------------------------------------------------------------ naive references (double) */


/* out (m, o) = x (m, i) · w (o, i)ᵀ + b (o) */
static void nv_lin(double *out, const double *x, const double *w, const double *b, int64_t m_,
                   int i_, int o_) {
  for (int64_t m = 0; m < m_; m++)
    for (int o = 0; o < o_; o++) {
      double s = b ? b[o] : 0;
      for (int i = 0; i < i_; i++) s += x[m * i_ + i] * w[(int64_t)o * i_ + i];
      out[m * o_ + o] = s;
    }
}

/* dx = dout·w (assign; NULL skips), dw += doutᵀ·x, db += Σ dout */
static void nv_lin_bwd(double *dx, double *dw, double *db, const double *dout, const double *x,
                       const double *w, int64_t m_, int i_, int o_) {
  for (int64_t m = 0; m < m_; m++) {
    for (int i = 0; dx && i < i_; i++) {
      double s = 0;
      for (int o = 0; o < o_; o++) s += dout[m * o_ + o] * w[(int64_t)o * i_ + i];
      dx[m * i_ + i] = s;
    }
    for (int o = 0; o < o_; o++) {
      double d = dout[m * o_ + o];
      if (db) db[o] += d;
      for (int i = 0; dw && i < i_; i++) dw[(int64_t)o * i_ + i] += d * x[m * i_ + i];
    }
  }
}

/* y = LN(x) per mode; keeps x̂ and rstd for the backward */
static void nv_ln(double *y, double *xh, double *r, const double *x, const double *g,
                  const double *b, int64_t m_, int c_, mf_ln_mode mode) {
  for (int64_t m = 0; m < m_; m++) {
    double mu = 0, var = 0;
    for (int c = 0; c < c_; c++) mu += x[m * c_ + c];
    mu /= c_;
    for (int c = 0; c < c_; c++) var += (x[m * c_ + c] - mu) * (x[m * c_ + c] - mu);
    r[m] = 1.0 / sqrt(var / c_ + 1e-5);
    for (int c = 0; c < c_; c++) {
      double v = (x[m * c_ + c] - mu) * r[m];
      xh[m * c_ + c] = v;
      if (mode == MF_LN_FULL || mode == MF_LN_SCALE) v *= g[c];
      if (mode == MF_LN_FULL) v += b[c];
      y[m * c_ + c] = v;
    }
  }
}

/* dx = r·(gy − mean(gy) − x̂·mean(gy ⊙ x̂)), gy = dy ⊙ γ; dg += Σ dy ⊙ x̂; db += Σ dy */
static void nv_ln_bwd(double *dx, double *dg, double *db, const double *dy, const double *xh,
                      const double *r, const double *g, int64_t m_, int c_, mf_ln_mode mode) {
  for (int64_t m = 0; m < m_; m++) {
    double s1 = 0, s2 = 0;
    for (int c = 0; c < c_; c++) {
      double gy = dy[m * c_ + c] * (mode == MF_LN_NONE ? 1.0 : g[c]);
      s1 += gy;
      s2 += gy * xh[m * c_ + c];
      if (dg) dg[c] += dy[m * c_ + c] * xh[m * c_ + c];
      if (db) db[c] += dy[m * c_ + c];
    }
    for (int c = 0; c < c_; c++) {
      double gy = dy[m * c_ + c] * (mode == MF_LN_NONE ? 1.0 : g[c]);
      dx[m * c_ + c] = r[m] * (gy - s1 / c_ - xh[m * c_ + c] * s2 / c_);
    }
  }
}

/* ------------------------------------------------------------------------ tests */

static void test_linear(void) {
  double *x = rnd(M * C, 1, 1.0, 0), *w = rnd(O * C, 2, 0.1, 0), *b = rnd(O, 3, 1.0, 0);
  double *dout = rnd(M * O, 4, 1.0, 0);
  double *ref = mf_test_alloc(M * O), *rdx = mf_test_alloc(M * C), *rdw = mf_test_alloc(O * C);
  double *rdb = mf_test_alloc(O);
  nv_lin(ref, x, w, b, M, C, O);
  nv_lin_bwd(rdx, rdw, rdb, dout, x, w, M, C, O);
  mf_real *rx = to_real(x, M * C), *rw = to_real(w, O * C), *rb = to_real(b, O);
  mf_real *out = poisoned(M * O), *dx = poisoned(M * C), *dw = zeros(O * C), *db = zeros(O);
  mf_linear_forward(out, rx, rw, rb, M, C, O);
  mf_linear_backward(dx, dw, db, to_real(dout, M * O), rx, rw, M, C, O);
  close_r("linear out", out, ref, M * O);
  close_r("linear dinp", dx, rdx, M * C);
  close_r("linear dweight", dw, rdw, O * C);
  close_r("linear dbias", db, rdb, O);
}

static void test_layernorm(mf_ln_mode mode) {
  const char *mn = mode == MF_LN_FULL ? "full" : mode == MF_LN_SCALE ? "scale" : "none";
  double *x = rnd(M * C, 10, 2.0, 1.0), *g = rnd(C, 11, 0.2, 1.0), *b = rnd(C, 12, 1.0, 0);
  double *dout = rnd(M * C, 13, 1.0, 0);
  double *ref = mf_test_alloc(M * C), *xh = mf_test_alloc(M * C), *r = mf_test_alloc(M);
  double *rdx = mf_test_alloc(M * C), *rdg = mf_test_alloc(C), *rdb = mf_test_alloc(C);
  nv_ln(ref, xh, r, x, g, b, M, C, mode);
  nv_ln_bwd(rdx, rdg, rdb, dout, xh, r, g, M, C, mode);
  mf_real *rx = to_real(x, M * C), *rg = to_real(g, C), *rb = to_real(b, C);
  mf_real *out = poisoned(M * C), *mean = poisoned(M), *rstd = poisoned(M);
  mf_real *dx = poisoned(M * C), *dg = zeros(C), *db = zeros(C);
  mf_layernorm_forward(out, mean, rstd, rx, rg, rb, M, C, mode);
  mf_layernorm_backward(dx, dg, db, to_real(dout, M * C), mean, rstd, rx, rg, M, C, mode);
  char what[64];
  snprintf(what, sizeof what, "layernorm %s out", mn);
  close_r(what, out, ref, M * C);
  snprintf(what, sizeof what, "layernorm %s rstd", mn);
  close_r(what, rstd, r, M);
  snprintf(what, sizeof what, "layernorm %s dinp", mn);
  close_r(what, dx, rdx, M * C);
  if (mode != MF_LN_NONE) {
    snprintf(what, sizeof what, "layernorm %s dgamma", mn);
    close_r(what, dg, rdg, C);
  }
  if (mode == MF_LN_FULL) {
    snprintf(what, sizeof what, "layernorm %s dbeta", mn);
    close_r(what, db, rdb, C);
  }
}

static void test_ln_linear(void) {
  double *x = rnd(M * C, 20, 1.0, -0.5), *g = rnd(C, 21, 0.2, 1.0), *b = rnd(C, 22, 0.5, 0);
  double *w = rnd(O * C, 23, 0.1, 0), *bias = rnd(O, 24, 1.0, 0), *dout = rnd(M * O, 25, 1.0, 0);
  double *y = mf_test_alloc(M * C), *xh = mf_test_alloc(M * C), *r = mf_test_alloc(M);
  double *ref = mf_test_alloc(M * O), *dy = mf_test_alloc(M * C), *rdx = mf_test_alloc(M * C);
  double *rdg = mf_test_alloc(C), *rdb = mf_test_alloc(C), *rdw = mf_test_alloc(O * C);
  double *rdbias = mf_test_alloc(O);
  nv_ln(y, xh, r, x, g, b, M, C, MF_LN_FULL);
  nv_lin(ref, y, w, bias, M, C, O);
  nv_lin_bwd(dy, rdw, rdbias, dout, y, w, M, C, O);
  nv_ln_bwd(rdx, rdg, rdb, dy, xh, r, g, M, C, MF_LN_FULL);
  mf_real *rx = to_real(x, M * C), *rg = to_real(g, C), *rb = to_real(b, C);
  mf_real *rw = to_real(w, O * C), *rbias = to_real(bias, O);
  mf_real *out = poisoned(M * O), *mean = poisoned(M), *rstd = poisoned(M);
  mf_real *dx = poisoned(M * C), *dg = zeros(C), *db = zeros(C), *dw = zeros(O * C);
  mf_real *dbias = zeros(O);
  mf_ln_linear_forward(out, mean, rstd, rx, rg, rb, rw, rbias, M, C, O, MF_LN_FULL);
  mf_ln_linear_backward(dx, dg, db, dw, dbias, to_real(dout, M * O), mean, rstd, rx, rg, rb, rw, M,
                        C, O, MF_LN_FULL);
  close_r("ln_linear out", out, ref, M * O);
  close_r("ln_linear dinp", dx, rdx, M * C);
  close_r("ln_linear dgamma", dg, rdg, C);
  close_r("ln_linear dbeta", db, rdb, C);
  close_r("ln_linear dweight", dw, rdw, O * C);
  close_r("ln_linear dbias", dbias, rdbias, O);
}

static void test_transition(mf_ln_mode mode) {
  const char *mn = mode == MF_LN_FULL ? "full" : "identity";
  int ln = mode != MF_LN_IDENTITY;
  double *x = rnd(M * C, 30, 1.0, 0.3), *g = rnd(C, 31, 0.2, 1.0), *b = rnd(C, 32, 0.5, 0);
  double *wa = rnd(HD * C, 33, 1.0 / sqrt(C), 0), *wb = rnd(HD * C, 34, 1.0 / sqrt(C), 0);
  double *wo = rnd(C * HD, 35, 1.0 / sqrt(HD), 0), *dout = rnd(M * C, 36, 1.0, 0);
  /* naive forward, keeping every intermediate */
  double *xh = mf_test_alloc(M * C), *xn = mf_test_alloc(M * C), *r = mf_test_alloc(M);
  double *a = mf_test_alloc(M * HD), *bb = mf_test_alloc(M * HD), *h = mf_test_alloc(M * HD);
  double *ref = mf_test_alloc(M * C);
  if (ln) nv_ln(xh, xn, r, x, g, b, M, C, mode);
  else memcpy(xh, x, sizeof(double) * M * C);
  nv_lin(a, xh, wa, NULL, M, C, HD);
  nv_lin(bb, xh, wb, NULL, M, C, HD);
  for (int64_t i = 0; i < (int64_t)M * HD; i++) h[i] = a[i] * mf_test_sigmoid(a[i]) * bb[i];
  nv_lin(ref, h, wo, NULL, M, HD, C);
  /* naive backward */
  double *dh = mf_test_alloc(M * HD), *rdwo = mf_test_alloc(C * HD), *rdwa = mf_test_alloc(HD * C);
  double *rdwb = mf_test_alloc(HD * C), *dxh = mf_test_alloc(M * C), *dxh2 = mf_test_alloc(M * C);
  double *rdx = mf_test_alloc(M * C), *rdg = mf_test_alloc(C), *rdb = mf_test_alloc(C);
  nv_lin_bwd(dh, rdwo, NULL, dout, h, wo, M, HD, C);
  for (int64_t i = 0; i < (int64_t)M * HD; i++) {
    double s = mf_test_sigmoid(a[i]), da = dh[i] * bb[i] * s * (1 + a[i] * (1 - s)), db_ = dh[i] * a[i] * s;
    a[i] = da;
    bb[i] = db_;
  }
  nv_lin_bwd(dxh, rdwa, NULL, a, xh, wa, M, C, HD);
  nv_lin_bwd(dxh2, rdwb, NULL, bb, xh, wb, M, C, HD);
  for (int64_t i = 0; i < (int64_t)M * C; i++) dxh[i] += dxh2[i];
  if (ln) nv_ln_bwd(rdx, rdg, rdb, dxh, xn, r, g, M, C, mode);
  else memcpy(rdx, dxh, sizeof(double) * M * C);

  mf_real *rx = to_real(x, M * C), *rg = ln ? to_real(g, C) : NULL, *rb = ln ? to_real(b, C) : NULL;
  mf_real *rwa = to_real(wa, HD * C), *rwb = to_real(wb, HD * C), *rwo = to_real(wo, C * HD);
  mf_real *out = poisoned(M * C), *mean = ln ? poisoned(M) : NULL, *rstd = ln ? poisoned(M) : NULL;
  mf_real *dx = poisoned(M * C), *dg = zeros(C), *db = zeros(C), *dwa = zeros(HD * C);
  mf_real *dwb = zeros(HD * C), *dwo = zeros(C * HD);
  mf_transition_forward(out, mean, rstd, rx, rg, rb, rwa, rwb, rwo, M, C, HD, mode);
  mf_transition_backward(dx, ln ? dg : NULL, ln ? db : NULL, dwa, dwb, dwo, to_real(dout, M * C),
                         mean, rstd, rx, rg, rb, rwa, rwb, rwo, M, C, HD, mode);
  char what[64];
  snprintf(what, sizeof what, "transition %s out", mn);
  close_r(what, out, ref, M * C);
  snprintf(what, sizeof what, "transition %s dinp", mn);
  close_r(what, dx, rdx, M * C);
  snprintf(what, sizeof what, "transition %s dw_a", mn);
  close_r(what, dwa, rdwa, HD * C);
  snprintf(what, sizeof what, "transition %s dw_b", mn);
  close_r(what, dwb, rdwb, HD * C);
  snprintf(what, sizeof what, "transition %s dw_o", mn);
  close_r(what, dwo, rdwo, C * HD);
  if (ln) {
    snprintf(what, sizeof what, "transition %s dgamma", mn);
    close_r(what, dg, rdg, C);
    snprintf(what, sizeof what, "transition %s dbeta", mn);
    close_r(what, db, rdb, C);
  }
}

static void test_adaln(void) {
  double *a = rnd(M * C, 40, 1.0, 0.2), *s = rnd(M * CS, 41, 2.0, -0.4), *gs = rnd(CS, 42, 0.2, 1);
  double *wg = rnd(C * CS, 43, 1.0 / sqrt(CS), 0), *bg = rnd(C, 44, 1.0, 0);
  double *wb = rnd(C * CS, 45, 1.0 / sqrt(CS), 0), *dout = rnd(M * C, 46, 1.0, 0);
  double *ah = mf_test_alloc(M * C), *an = mf_test_alloc(M * C), *ar = mf_test_alloc(M);
  double *sh = mf_test_alloc(M * CS), *sn = mf_test_alloc(M * CS), *sr = mf_test_alloc(M);
  double *gl = mf_test_alloc(M * C), *ref = mf_test_alloc(M * C);
  nv_ln(ah, an, ar, a, NULL, NULL, M, C, MF_LN_NONE);
  nv_ln(sh, sn, sr, s, gs, NULL, M, CS, MF_LN_SCALE);
  nv_lin(gl, sh, wg, bg, M, CS, C);
  nv_lin(ref, sh, wb, NULL, M, CS, C);
  for (int64_t i = 0; i < (int64_t)M * C; i++) ref[i] += mf_test_sigmoid(gl[i]) * ah[i];
  double *dah = mf_test_alloc(M * C), *dgl = mf_test_alloc(M * C), *dsh = mf_test_alloc(M * CS);
  double *dsh2 = mf_test_alloc(M * CS), *rda = mf_test_alloc(M * C), *rds = mf_test_alloc(M * CS);
  double *rdgs = mf_test_alloc(CS), *rdwg = mf_test_alloc(C * CS), *rdbg = mf_test_alloc(C);
  double *rdwb = mf_test_alloc(C * CS);
  for (int64_t i = 0; i < (int64_t)M * C; i++) {
    double sg = mf_test_sigmoid(gl[i]);
    dah[i] = dout[i] * sg;
    dgl[i] = dout[i] * ah[i] * sg * (1 - sg);
  }
  nv_lin_bwd(dsh, rdwg, rdbg, dgl, sh, wg, M, CS, C);
  nv_lin_bwd(dsh2, rdwb, NULL, dout, sh, wb, M, CS, C);
  for (int64_t i = 0; i < (int64_t)M * CS; i++) dsh[i] += dsh2[i];
  nv_ln_bwd(rda, NULL, NULL, dah, an, ar, NULL, M, C, MF_LN_NONE);
  nv_ln_bwd(rds, rdgs, NULL, dsh, sn, sr, gs, M, CS, MF_LN_SCALE);

  mf_real *ra = to_real(a, M * C), *rs = to_real(s, M * CS), *rgs = to_real(gs, CS);
  mf_real *rwg = to_real(wg, C * CS), *rbg = to_real(bg, C), *rwb = to_real(wb, C * CS);
  mf_real *out = poisoned(M * C), *am = poisoned(M), *arr = poisoned(M), *sm = poisoned(M);
  mf_real *srr = poisoned(M), *da = poisoned(M * C), *ds = poisoned(M * CS), *dgs = zeros(CS);
  mf_real *dwg = zeros(C * CS), *dbg = zeros(C), *dwb = zeros(C * CS);
  mf_adaln_forward(out, am, arr, sm, srr, ra, rs, rgs, rwg, rbg, rwb, M, C, CS);
  mf_adaln_backward(da, ds, dgs, dwg, dbg, dwb, to_real(dout, M * C), am, arr, sm, srr, ra, rs, rgs,
                    rwg, rbg, rwb, M, C, CS);
  close_r("adaln out", out, ref, M * C);
  close_r("adaln da", da, rda, M * C);
  close_r("adaln ds", ds, rds, M * CS);
  close_r("adaln dgamma_s", dgs, rdgs, CS);
  close_r("adaln dw_gamma", dwg, rdwg, C * CS);
  close_r("adaln db_gamma", dbg, rdbg, C);
  close_r("adaln dw_beta", dwb, rdwb, C * CS);

  /* gate on the raw s: out = σ(s·Wᵀ + b) ⊙ x, with x = a */
  double *gref = mf_test_alloc(M * C), *gdx = mf_test_alloc(M * C), *gds = mf_test_alloc(M * CS);
  double *gdw = mf_test_alloc(C * CS), *gdb = mf_test_alloc(C);
  nv_lin(gl, s, wg, bg, M, CS, C);
  for (int64_t i = 0; i < (int64_t)M * C; i++) {
    double sg = mf_test_sigmoid(gl[i]);
    gref[i] = sg * a[i];
    gdx[i] = dout[i] * sg;
    dgl[i] = dout[i] * a[i] * sg * (1 - sg);
  }
  nv_lin_bwd(gds, gdw, gdb, dgl, s, wg, M, CS, C);
  mf_real *gout = poisoned(M * C), *gx = poisoned(M * C), *gs_ = poisoned(M * CS);
  mf_real *gw = zeros(C * CS), *gb = zeros(C);
  mf_adaln_gate_forward(gout, ra, rs, rwg, rbg, M, C, CS);
  mf_adaln_gate_backward(gx, gs_, gw, gb, to_real(dout, M * C), ra, rs, rwg, rbg, M, C, CS);
  close_r("adaln_gate out", gout, gref, M * C);
  close_r("adaln_gate dx", gx, gdx, M * C);
  close_r("adaln_gate ds", gs_, gds, M * CS);
  close_r("adaln_gate dweight", gw, gdw, C * CS);
  close_r("adaln_gate dbias", gb, gdb, C);
}

int main(void) {
  mf_test_begin("test_ops_f32");
  MF_TEST(strcmp(MF_REAL_NAME, sizeof(mf_real) == 4 ? "f32" : "f64") == 0, "mf_real is %s",
          MF_REAL_NAME);
  int prev = mf_gemm_use_blas(1);
  int have_blas = mf_gemm_use_blas(1);
  for (int pass = 0; pass < 2; pass++) {
    int blas = pass == 0 && have_blas;
    if (pass == 1 && !have_blas) break; /* without OpenBLAS the first pass was the loop */
    mf_gemm_use_blas(blas);
    g_backend = blas ? (sizeof(mf_real) == 4 ? "sgemm" : "dgemm") : "loop";
    test_linear();
    test_layernorm(MF_LN_FULL);
    test_layernorm(MF_LN_SCALE);
    test_layernorm(MF_LN_NONE);
    test_ln_linear();
    test_transition(MF_LN_FULL);
    test_transition(MF_LN_IDENTITY);
    test_adaln();
    mf_test_free_all(); /* the next pass allocates afresh */
  }
  mf_gemm_use_blas(prev);
  return mf_test_end();
}
