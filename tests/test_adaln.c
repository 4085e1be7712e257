/* test_adaln.c — adaptive LayerNorm (spec §4.3) and the adaLN-Zero gate (§4.4): forward
 * against naive double loops written from the equations, finite-difference checks of
 * every gradient (a, s, gamma_s, w_gamma, b_gamma, w_beta; gate: x, s, weight, bias),
 * M across the recompute chunk (MF_ADALN_CHUNK), the in-place gate, and the gradient
 * contract (da, ds, dx assign; parameter gradients accumulate; NULL skips).
 * Links the double build. Not a test of the whole diffusion transformer block. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ops/adaln.h"

_Static_assert(sizeof(mf_real) == sizeof(double), "test_adaln links the double build");

/* (x − μ)/sqrt(var + 1e-5) of one row, population variance */
static void naive_norm(double *y, const double *x, int C) {
  double mu = 0, var = 0;
  for (int c = 0; c < C; c++) mu += x[c];
  mu /= C;
  for (int c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
  double r = 1.0 / sqrt(var / C + 1e-5);
  for (int c = 0; c < C; c++) y[c] = (x[c] - mu) * r;
}

/* out = sigmoid(ŝ·W_γᵀ + b_γ) ⊙ â + ŝ·W_βᵀ,  â = LN(a), ŝ = γ_s ⊙ LN(s) */
static void naive_adaln(double *out, const double *a, const double *s, const double *gs,
                        const double *wg, const double *bg, const double *wb, int64_t M, int Ca,
                        int Cs) {
  double ah[64], sh[64];
  MF_ASSERT(Ca <= 64 && Cs <= 64, "naive_adaln: test sizes only");
  for (int64_t m = 0; m < M; m++) {
    naive_norm(ah, a + m * Ca, Ca);
    naive_norm(sh, s + m * Cs, Cs);
    for (int k = 0; k < Cs; k++) sh[k] *= gs[k];
    for (int c = 0; c < Ca; c++) {
      double g = bg ? bg[c] : 0, bt = 0;
      for (int k = 0; k < Cs; k++) {
        g += sh[k] * wg[(int64_t)c * Cs + k];
        bt += sh[k] * wb[(int64_t)c * Cs + k];
      }
      out[m * Ca + c] = mf_test_sigmoid(g) * ah[c] + bt;
    }
  }
}

typedef struct {
  double *out, *am, *ar, *sm, *sr, *a, *s, *gs, *wg, *bg, *wb, *wt;
  int64_t M;
  int Ca, Cs;
} ada_ctx;

static double ada_loss(void *p) {
  ada_ctx *c = p;
  mf_adaln_forward(c->out, c->am, c->ar, c->sm, c->sr, c->a, c->s, c->gs, c->wg, c->bg, c->wb,
                   c->M, c->Ca, c->Cs);
  return mf_test_dot(c->out, c->wt, c->M * c->Ca);
}

static void test_adaln_case(int64_t M, int Ca, int Cs, int with_bias, uint64_t seed) {
  char what[160], tag[80];
  snprintf(tag, sizeof tag, "adaln M=%lld Ca=%d Cs=%d bias=%d", (long long)M, Ca, Cs, with_bias);
  const int64_t MA = M * Ca, MS = M * Cs, AS = (int64_t)Ca * Cs;
  double *a = mf_test_alloc(MA), *s = mf_test_alloc(MS), *gs = mf_test_alloc(Cs);
  double *wg = mf_test_alloc(AS), *bg = with_bias ? mf_test_alloc(Ca) : NULL;
  double *wb = mf_test_alloc(AS), *dout = mf_test_alloc(MA);
  mf_test_randn(a, MA, seed, 1.0);
  mf_test_randn(s, MS, seed + 1, 2.0);
  for (int64_t i = 0; i < MS; i++) s[i] += 0.7;
  mf_test_randu(gs, Cs, seed + 2, 0.5, 1.5);
  mf_test_randn(wg, AS, seed + 3, 1.0 / sqrt(Cs));
  if (bg) mf_test_randn(bg, Ca, seed + 4, 1.0);
  mf_test_randn(wb, AS, seed + 5, 1.0 / sqrt(Cs));
  mf_test_randn(dout, MA, seed + 6, 1.0);

  double *out = mf_test_alloc(MA), *ref = mf_test_alloc(MA);
  double *am = mf_test_alloc(M), *ar = mf_test_alloc(M), *sm = mf_test_alloc(M);
  double *sr = mf_test_alloc(M);
  naive_adaln(ref, a, s, gs, wg, bg, wb, M, Ca, Cs);
  mf_test_poison(out, MA);
  mf_test_poison(am, M);
  mf_test_poison(ar, M);
  mf_test_poison(sm, M);
  mf_test_poison(sr, M);
  mf_adaln_forward(out, am, ar, sm, sr, a, s, gs, wg, bg, wb, M, Ca, Cs);
  snprintf(what, sizeof what, "%s fwd", tag);
  mf_test_close(what, out, ref, MA, 1e-12);

  /* all gradients from zero */
  double *da = mf_test_alloc(MA), *ds = mf_test_alloc(MS), *dgs = mf_test_alloc(Cs);
  double *dwg = mf_test_alloc(AS), *dbg = mf_test_alloc(Ca), *dwb = mf_test_alloc(AS);
  mf_test_poison(da, MA);
  mf_test_poison(ds, MS);
  mf_adaln_backward(da, ds, dgs, dwg, bg ? dbg : NULL, dwb, dout, am, ar, sm, sr, a, s, gs, wg, bg,
                    wb, M, Ca, Cs);

  /* contract: da, ds assign over existing values; parameter gradients add to them */
  double *e = mf_test_alloc(MA), *es = mf_test_alloc(MS), *egs = mf_test_alloc(Cs);
  double *ewg = mf_test_alloc(AS), *ebg = mf_test_alloc(Ca), *ewb = mf_test_alloc(AS);
  mf_test_randn(e, MA, seed + 7, 1.0);
  mf_test_randn(es, MS, seed + 8, 1.0);
  mf_test_randn(egs, Cs, seed + 9, 1.0);
  mf_test_randn(ewg, AS, seed + 10, 1.0);
  mf_test_randn(ebg, Ca, seed + 11, 1.0);
  mf_test_randn(ewb, AS, seed + 12, 1.0);
  mf_adaln_backward(e, es, egs, ewg, bg ? ebg : NULL, ewb, dout, am, ar, sm, sr, a, s, gs, wg, bg,
                    wb, M, Ca, Cs);
  snprintf(what, sizeof what, "%s da assigns", tag);
  mf_test_close(what, e, da, MA, 1e-13);
  snprintf(what, sizeof what, "%s ds assigns", tag);
  mf_test_close(what, es, ds, MS, 1e-13);
  mf_test_accumulates(tag, "dgamma_s", egs, dgs, Cs, seed + 9, 1e-13);
  mf_test_accumulates(tag, "dw_gamma", ewg, dwg, AS, seed + 10, 1e-13);
  mf_test_accumulates(tag, "dw_beta", ewb, dwb, AS, seed + 12, 1e-13);
  if (bg) mf_test_accumulates(tag, "db_gamma", ebg, dbg, Ca, seed + 11, 1e-13);

  /* NULL skips: da alone, ds alone, dw_beta alone */
  mf_test_poison(e, MA);
  mf_adaln_backward(e, NULL, NULL, NULL, NULL, NULL, dout, am, ar, sm, sr, a, s, gs, wg, bg, wb, M,
                    Ca, Cs);
  snprintf(what, sizeof what, "%s da alone", tag);
  mf_test_close(what, e, da, MA, 1e-13);
  mf_test_poison(es, MS);
  mf_adaln_backward(NULL, es, NULL, NULL, NULL, NULL, dout, am, ar, sm, sr, a, s, gs, wg, bg, wb, M,
                    Ca, Cs);
  snprintf(what, sizeof what, "%s ds alone", tag);
  mf_test_close(what, es, ds, MS, 1e-13);
  memset(ewb, 0, sizeof(double) * (size_t)AS);
  mf_adaln_backward(NULL, NULL, NULL, NULL, NULL, ewb, dout, am, ar, sm, sr, a, s, gs, wg, bg, wb,
                    M, Ca, Cs);
  snprintf(what, sizeof what, "%s dw_beta alone", tag);
  mf_test_close(what, ewb, dwb, AS, 1e-13);

  /* finite differences of L = Σ out ⊙ dout, every gradient. tol 1e-6: central differences
   * in double with h = 1e-6 (truncation ~1e-12, rounding ~1e-10 relative) */
  ada_ctx c = {out, am, ar, sm, sr, a, s, gs, wg, bg, wb, dout, M, Ca, Cs};
  snprintf(what, sizeof what, "%s da", tag);
  mf_test_gradcheck(what, ada_loss, &c, a, da, MA, 40, 1e-6, 1e-6);
  snprintf(what, sizeof what, "%s ds", tag);
  mf_test_gradcheck(what, ada_loss, &c, s, ds, MS, 40, 1e-6, 1e-6);
  snprintf(what, sizeof what, "%s dgamma_s", tag);
  mf_test_gradcheck(what, ada_loss, &c, gs, dgs, Cs, 40, 1e-6, 1e-6);
  snprintf(what, sizeof what, "%s dw_gamma", tag);
  mf_test_gradcheck(what, ada_loss, &c, wg, dwg, AS, 40, 1e-6, 1e-6);
  snprintf(what, sizeof what, "%s dw_beta", tag);
  mf_test_gradcheck(what, ada_loss, &c, wb, dwb, AS, 40, 1e-6, 1e-6);
  if (bg) {
    snprintf(what, sizeof what, "%s db_gamma", tag);
    mf_test_gradcheck(what, ada_loss, &c, bg, dbg, Ca, 40, 1e-6, 1e-6);
  }
}

/* ------------------------------------------------------------------ gate */

typedef struct {
  double *out, *x, *s, *w, *b, *wt;
  int64_t M;
  int C, Cs;
} gate_ctx;

static double gate_loss(void *p) {
  gate_ctx *c = p;
  mf_adaln_gate_forward(c->out, c->x, c->s, c->w, c->b, c->M, c->C, c->Cs);
  return mf_test_dot(c->out, c->wt, c->M * c->C);
}

static void test_gate_case(int64_t M, int C, int Cs, int with_bias, uint64_t seed) {
  char what[160], tag[80];
  snprintf(tag, sizeof tag, "adaln_gate M=%lld C=%d Cs=%d bias=%d", (long long)M, C, Cs,
           with_bias);
  const int64_t MC = M * C, MS = M * Cs, CS = (int64_t)C * Cs;
  double *x = mf_test_alloc(MC), *s = mf_test_alloc(MS), *w = mf_test_alloc(CS);
  double *b = with_bias ? mf_test_alloc(C) : NULL, *dout = mf_test_alloc(MC);
  mf_test_randn(x, MC, seed, 1.0);
  mf_test_randn(s, MS, seed + 1, 1.0); /* raw conditioning: not normalised */
  mf_test_randn(w, CS, seed + 2, 1.0 / sqrt(Cs));
  if (b) {
    mf_test_randn(b, C, seed + 3, 0.5);
    for (int c = 0; c < C; c++) b[c] -= 2.0; /* around the adaLN-Zero init */
  }
  mf_test_randn(dout, MC, seed + 4, 1.0);

  double *out = mf_test_alloc(MC), *ref = mf_test_alloc(MC);
  for (int64_t m = 0; m < M; m++)
    for (int c = 0; c < C; c++) {
      double g = b ? b[c] : 0;
      for (int k = 0; k < Cs; k++) g += s[m * Cs + k] * w[(int64_t)c * Cs + k];
      ref[m * C + c] = mf_test_sigmoid(g) * x[m * C + c];
    }
  mf_test_poison(out, MC);
  mf_adaln_gate_forward(out, x, s, w, b, M, C, Cs);
  snprintf(what, sizeof what, "%s fwd", tag);
  mf_test_close(what, out, ref, MC, 1e-13);
  double *inplace = mf_test_alloc(MC);
  memcpy(inplace, x, sizeof(double) * (size_t)MC);
  mf_adaln_gate_forward(inplace, inplace, s, w, b, M, C, Cs);
  snprintf(what, sizeof what, "%s fwd in place", tag);
  mf_test_close(what, inplace, ref, MC, 1e-13);

  double *dx = mf_test_alloc(MC), *ds = mf_test_alloc(MS), *dw = mf_test_alloc(CS);
  double *db = mf_test_alloc(C);
  mf_test_poison(dx, MC);
  mf_test_poison(ds, MS);
  mf_adaln_gate_backward(dx, ds, dw, b ? db : NULL, dout, x, s, w, b, M, C, Cs);

  /* contract */
  double *ex = mf_test_alloc(MC), *es = mf_test_alloc(MS), *ew = mf_test_alloc(CS);
  double *eb = mf_test_alloc(C);
  mf_test_randn(ex, MC, seed + 5, 1.0);
  mf_test_randn(es, MS, seed + 6, 1.0);
  mf_test_randn(ew, CS, seed + 7, 1.0);
  mf_test_randn(eb, C, seed + 8, 1.0);
  mf_adaln_gate_backward(ex, es, ew, b ? eb : NULL, dout, x, s, w, b, M, C, Cs);
  snprintf(what, sizeof what, "%s dx assigns", tag);
  mf_test_close(what, ex, dx, MC, 1e-13);
  snprintf(what, sizeof what, "%s ds assigns", tag);
  mf_test_close(what, es, ds, MS, 1e-13);
  mf_test_accumulates(tag, "dweight", ew, dw, CS, seed + 7, 1e-13);
  if (b) mf_test_accumulates(tag, "dbias", eb, db, C, seed + 8, 1e-13);
  mf_test_poison(es, MS);
  mf_adaln_gate_backward(NULL, es, NULL, NULL, dout, x, s, w, b, M, C, Cs);
  snprintf(what, sizeof what, "%s ds alone", tag);
  mf_test_close(what, es, ds, MS, 1e-13);

  /* tol 1e-6: central differences in double, h = 1e-6 */
  gate_ctx c = {out, x, s, w, b, dout, M, C, Cs};
  snprintf(what, sizeof what, "%s dx", tag);
  mf_test_gradcheck(what, gate_loss, &c, x, dx, MC, 40, 1e-6, 1e-6);
  snprintf(what, sizeof what, "%s ds", tag);
  mf_test_gradcheck(what, gate_loss, &c, s, ds, MS, 40, 1e-6, 1e-6);
  snprintf(what, sizeof what, "%s dweight", tag);
  mf_test_gradcheck(what, gate_loss, &c, w, dw, CS, 40, 1e-6, 1e-6);
  if (b) {
    snprintf(what, sizeof what, "%s dbias", tag);
    mf_test_gradcheck(what, gate_loss, &c, b, db, C, 40, 1e-6, 1e-6);
  }
}

int main(void) {
  mf_test_begin("test_adaln");
  uint64_t seed = 7;
  for (int bias = 1; bias >= 0; bias--) {
    test_adaln_case(MF_ADALN_CHUNK + 6, 20, 13, bias, seed += 20); /* two chunks */
    test_adaln_case(1, 5, 3, bias, seed += 20);
    test_adaln_case(4, 1, 4, bias, seed += 20); /* Ca = 1: â = 0 */
    test_gate_case(MF_ADALN_CHUNK + 6, 20, 13, bias, seed += 20);
    test_gate_case(1, 5, 3, bias, seed += 20);
    test_gate_case(3, 1, 1, bias, seed += 20);
  }
  return mf_test_end();
}
