/* test_attention.c — the CPU reference of gated attention with a row-broadcast pair bias
 * (src/ops/cpu/attention.c) against an independent naive implementation written here
 * from the equations: it materialises the full logits (B, R, H, Q, K) with -inf for
 * masked keys, and its backward uses rowsum(dP ⊙ P) for Di (the op uses Σ dO·o).
 * Covers the shapes of triangle attention (R = N), single attention (R = 1), MSA rows
 * and windowed attention (Q ≠ K), with and without mask, bias and gate; finite-difference
 * gradient checks of every input; fully masked rows (out 0, lse -inf, zero gradients, no
 * NaN); masked keys having no influence at all; dbias as the sum over R of per-row
 * dlogits. Not a test of the CUDA kernels (tests/gpu/). Built in double (MF_REAL_DOUBLE). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ops/attention.h"

_Static_assert(sizeof(mf_real) == sizeof(double), "test_attention is built in double");

typedef struct {
  int B, R, H, Q, K, D;
} cfg_t;

/* Everything one case needs: inputs, the op's outputs and gradients, the naive ones. */
typedef struct {
  cfg_t c;
  mf_attn_dims d;
  int64_t nq, nk, nb, nm, nl; /* elements of q/out/gate, k/v, bias, mask, lse */
  double *q, *k, *v, *bias, *gate, *w; /* bias, gate NULL when unused; w = dout */
  uint8_t *mask;                       /* NULL when unused */
  double *out, *lse;                   /* op forward */
  double *dq, *dk, *dv, *dbias, *dgate;
  double *rout, *rlse, *rdq, *rdk, *rdv, *rdbias, *rdgate, *rdS; /* naive */
  double *tmp_out;                                               /* gradcheck forward */
} case_t;

static uint8_t g_maskbuf[4096];

/* ---------------------------------------------------------------- naive reference */

static double sig(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Naive forward and backward from the equations; fills rout, rlse, rdq, rdk, rdv, rdbias,
 * rdgate and rdS (the per-row dlogits, (B, R, H, Q, K)). */
static void naive(case_t *t) {
  const cfg_t c = t->c;
  const int64_t nS = (int64_t)c.B * c.R * c.H * c.Q * c.K;
  double *S = mf_test_alloc(nS), *P = mf_test_alloc(nS), *o = mf_test_alloc(t->nq);
  double *dO = mf_test_alloc(t->nq);
#define IQ(b, r, h, i, x) (((((int64_t)(b) * c.R + (r)) * c.H + (h)) * c.Q + (i)) * c.D + (x))
#define IK(b, r, h, j, x) (((((int64_t)(b) * c.R + (r)) * c.H + (h)) * c.K + (j)) * c.D + (x))
#define IS(b, r, h, i, j) (((((int64_t)(b) * c.R + (r)) * c.H + (h)) * c.Q + (i)) * c.K + (j))
#define IB(b, h, i, j) ((((int64_t)(b) * c.H + (h)) * c.Q + (i)) * c.K + (j))
#define IL(b, r, h, i) ((((int64_t)(b) * c.R + (r)) * c.H + (h)) * c.Q + (i))
  /* logits, with -inf where the key is masked */
  for (int b = 0; b < c.B; b++)
    for (int r = 0; r < c.R; r++)
      for (int h = 0; h < c.H; h++)
        for (int i = 0; i < c.Q; i++)
          for (int j = 0; j < c.K; j++) {
            double s = 0;
            for (int x = 0; x < c.D; x++) s += t->q[IQ(b, r, h, i, x)] * t->k[IK(b, r, h, j, x)];
            s *= t->d.scale;
            if (t->bias) s += t->bias[IB(b, h, i, j)];
            if (t->mask && !t->mask[((int64_t)b * c.R + r) * c.K + j]) s = -INFINITY;
            S[IS(b, r, h, i, j)] = s;
          }
  /* softmax, lse, o, out */
  for (int b = 0; b < c.B; b++)
    for (int r = 0; r < c.R; r++)
      for (int h = 0; h < c.H; h++)
        for (int i = 0; i < c.Q; i++) {
          double m = -INFINITY, z = 0;
          for (int j = 0; j < c.K; j++) m = fmax(m, S[IS(b, r, h, i, j)]);
          for (int j = 0; j < c.K; j++)
            if (m > -INFINITY) z += exp(S[IS(b, r, h, i, j)] - m);
          for (int j = 0; j < c.K; j++)
            P[IS(b, r, h, i, j)] = m > -INFINITY ? exp(S[IS(b, r, h, i, j)] - m) / z : 0.0;
          t->rlse[IL(b, r, h, i)] = m > -INFINITY ? m + log(z) : -INFINITY;
          for (int x = 0; x < c.D; x++) {
            double a = 0;
            for (int j = 0; j < c.K; j++) a += P[IS(b, r, h, i, j)] * t->v[IK(b, r, h, j, x)];
            o[IQ(b, r, h, i, x)] = a;
            t->rout[IQ(b, r, h, i, x)] = t->gate ? sig(t->gate[IQ(b, r, h, i, x)]) * a : a;
          }
        }
  /* backward with dout = w */
  for (int64_t x = 0; x < t->nq; x++) {
    double g = t->gate ? sig(t->gate[x]) : 1.0;
    dO[x] = t->w[x] * g;
    if (t->gate) t->rdgate[x] = t->w[x] * o[x] * g * (1 - g);
  }
  memset(t->rdk, 0, (size_t)t->nk * sizeof(double));
  memset(t->rdv, 0, (size_t)t->nk * sizeof(double));
  if (t->bias) memset(t->rdbias, 0, (size_t)t->nb * sizeof(double));
  for (int b = 0; b < c.B; b++)
    for (int r = 0; r < c.R; r++)
      for (int h = 0; h < c.H; h++)
        for (int i = 0; i < c.Q; i++) {
          /* dP_j = dO·v_j; Di = Σ_j P_j dP_j; dS = P ⊙ (dP − Di) */
          double Di = 0;
          for (int j = 0; j < c.K; j++) {
            double dp = 0;
            for (int x = 0; x < c.D; x++) dp += dO[IQ(b, r, h, i, x)] * t->v[IK(b, r, h, j, x)];
            t->rdS[IS(b, r, h, i, j)] = dp;
            Di += P[IS(b, r, h, i, j)] * dp;
          }
          for (int j = 0; j < c.K; j++) {
            double *ds = &t->rdS[IS(b, r, h, i, j)];
            *ds = P[IS(b, r, h, i, j)] * (*ds - Di);
          }
          for (int x = 0; x < c.D; x++) {
            double a = 0;
            for (int j = 0; j < c.K; j++) a += t->rdS[IS(b, r, h, i, j)] * t->k[IK(b, r, h, j, x)];
            t->rdq[IQ(b, r, h, i, x)] = t->d.scale * a;
          }
          for (int j = 0; j < c.K; j++) {
            double ds = t->rdS[IS(b, r, h, i, j)], p = P[IS(b, r, h, i, j)];
            for (int x = 0; x < c.D; x++) {
              t->rdk[IK(b, r, h, j, x)] += t->d.scale * ds * t->q[IQ(b, r, h, i, x)];
              t->rdv[IK(b, r, h, j, x)] += p * dO[IQ(b, r, h, i, x)];
            }
            if (t->bias) t->rdbias[IB(b, h, i, j)] += ds;
          }
        }
#undef IQ
#undef IK
#undef IS
#undef IB
#undef IL
}

/* ---------------------------------------------------------------- setup */

static void setup(case_t *t, cfg_t c, int use_mask, int use_bias, int use_gate, uint64_t seed) {
  memset(t, 0, sizeof *t);
  t->c = c;
  t->d = (mf_attn_dims){c.B, c.R, c.H, c.Q, c.K, c.D, 1.0 / sqrt((double)c.D)};
  t->nq = (int64_t)c.B * c.R * c.H * c.Q * c.D;
  t->nk = (int64_t)c.B * c.R * c.H * c.K * c.D;
  t->nb = (int64_t)c.B * c.H * c.Q * c.K;
  t->nm = (int64_t)c.B * c.R * c.K;
  t->nl = (int64_t)c.B * c.R * c.H * c.Q;
  const int64_t nS = t->nl * c.K;
  t->q = mf_test_alloc(t->nq);
  t->k = mf_test_alloc(t->nk);
  t->v = mf_test_alloc(t->nk);
  t->w = mf_test_alloc(t->nq);
  mf_test_randn(t->q, t->nq, seed + 1, 1.0);
  mf_test_randn(t->k, t->nk, seed + 2, 1.0);
  mf_test_randn(t->v, t->nk, seed + 3, 1.0);
  mf_test_randn(t->w, t->nq, seed + 4, 1.0);
  if (use_bias) {
    t->bias = mf_test_alloc(t->nb);
    mf_test_randn(t->bias, t->nb, seed + 5, 1.0);
  }
  if (use_gate) {
    t->gate = mf_test_alloc(t->nq);
    mf_test_randn(t->gate, t->nq, seed + 6, 1.0);
  }
  if (use_mask) {
    MF_ASSERT(t->nm <= (int64_t)sizeof g_maskbuf, "mask too large for the test buffer");
    double *u = mf_test_alloc(t->nm);
    mf_test_randu(u, t->nm, seed + 7, 0, 1);
    t->mask = g_maskbuf;
    for (int64_t x = 0; x < t->nm; x++) t->mask[x] = u[x] < 0.7;
    /* the last key of batch 0 masked in every row (a key no row sees) */
    if (c.K >= 2)
      for (int r = 0; r < c.R; r++) t->mask[(int64_t)r * c.K + c.K - 1] = 0;
    /* one fully masked row (b = B-1, r = R/2) when that leaves others */
    if ((int64_t)c.B * c.R >= 2)
      memset(t->mask + ((int64_t)(c.B - 1) * c.R + c.R / 2) * c.K, 0, (size_t)c.K);
  }
  t->out = mf_test_alloc(t->nq);
  t->lse = mf_test_alloc(t->nl);
  t->dq = mf_test_alloc(t->nq);
  t->dk = mf_test_alloc(t->nk);
  t->dv = mf_test_alloc(t->nk);
  t->dbias = mf_test_alloc(t->nb);
  t->dgate = mf_test_alloc(t->nq);
  t->rout = mf_test_alloc(t->nq);
  t->rlse = mf_test_alloc(t->nl);
  t->rdq = mf_test_alloc(t->nq);
  t->rdk = mf_test_alloc(t->nk);
  t->rdv = mf_test_alloc(t->nk);
  t->rdbias = mf_test_alloc(t->nb);
  t->rdgate = mf_test_alloc(t->nq);
  t->rdS = mf_test_alloc(nS);
  t->tmp_out = mf_test_alloc(t->nq);
}

static void run_op(case_t *t) {
  mf_test_poison(t->out, t->nq);
  mf_test_poison(t->lse, t->nl);
  mf_attention_forward(t->out, t->lse, t->q, t->k, t->v, t->bias, t->mask, t->gate, t->d);
  mf_test_poison(t->dq, t->nq);
  mf_test_poison(t->dk, t->nk);
  mf_test_poison(t->dv, t->nk);
  mf_test_poison(t->dbias, t->nb);
  mf_test_poison(t->dgate, t->nq);
  mf_attention_backward(t->dq, t->dk, t->dv, t->bias ? t->dbias : NULL,
                        t->gate ? t->dgate : NULL, t->w, t->lse, t->q, t->k, t->v, t->bias,
                        t->mask, t->gate, t->d);
}

static double loss_fn(void *ctx) {
  case_t *t = ctx;
  mf_attention_forward(t->tmp_out, NULL, t->q, t->k, t->v, t->bias, t->mask, t->gate, t->d);
  return mf_test_dot(t->tmp_out, t->w, t->nq);
}

static int all_finite(const double *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return 0;
  return 1;
}

static int all_zero(const double *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (x[i] != 0.0) return 0;
  return 1;
}

/* ---------------------------------------------------------------- checks */

/* Fully masked rows: out exactly 0 and lse -inf; their dq, dgate, and dk, dv of that
 * (b, r) exactly 0. Keys masked in every row of a batch: dbias exactly 0. */
static void check_masked(case_t *t, const char *name) {
  const cfg_t c = t->c;
  int nfull = 0, ok_out = 1, ok_grad = 1, ok_key = 1, ok_db = 1;
  for (int b = 0; b < c.B; b++)
    for (int r = 0; r < c.R; r++) {
      const uint8_t *m = t->mask + ((int64_t)b * c.R + r) * c.K;
      int nvalid = 0;
      for (int j = 0; j < c.K; j++) nvalid += m[j] != 0;
      const int64_t brq = ((int64_t)b * c.R + r) * c.H * c.Q; /* first (b, r, 0, 0) row */
      const int64_t brk = ((int64_t)b * c.R + r) * c.H * c.K;
      if (nvalid == 0) {
        nfull++;
        ok_out &= all_zero(t->out + brq * c.D, (int64_t)c.H * c.Q * c.D);
        for (int64_t x = 0; x < (int64_t)c.H * c.Q; x++) ok_out &= t->lse[brq + x] == -INFINITY;
        ok_grad &= all_zero(t->dq + brq * c.D, (int64_t)c.H * c.Q * c.D);
        if (t->gate) ok_grad &= all_zero(t->dgate + brq * c.D, (int64_t)c.H * c.Q * c.D);
      }
      for (int h = 0; h < c.H; h++)
        for (int j = 0; j < c.K; j++)
          if (!m[j]) {
            ok_key &= all_zero(t->dk + (brk + (int64_t)h * c.K + j) * c.D, c.D);
            ok_key &= all_zero(t->dv + (brk + (int64_t)h * c.K + j) * c.D, c.D);
          }
    }
  if (t->bias)
    for (int b = 0; b < c.B; b++)
      for (int j = 0; j < c.K; j++) {
        int seen = 0;
        for (int r = 0; r < c.R; r++) seen |= t->mask[((int64_t)b * c.R + r) * c.K + j] != 0;
        if (seen) continue;
        for (int h = 0; h < c.H; h++)
          for (int i = 0; i < c.Q; i++)
            ok_db &= t->dbias[(((int64_t)b * c.H + h) * c.Q + i) * c.K + j] == 0.0;
      }
  if (nfull) {
    MF_TEST(ok_out, "%s: %d fully masked rows give out = 0 exactly and lse = -inf", name, nfull);
    MF_TEST(ok_grad, "%s: fully masked rows give dq = dgate = 0 exactly", name);
  }
  MF_TEST(ok_key, "%s: masked keys get dk = dv = 0 exactly", name);
  MF_TEST(ok_db, "%s: dbias = 0 exactly for keys masked in every row", name);
}

/* Changing k and v of masked keys changes nothing, bit for bit. */
static void check_masked_keys_inert(case_t *t, const char *name) {
  const cfg_t c = t->c;
  double *k2 = mf_test_alloc(t->nk), *v2 = mf_test_alloc(t->nk), *noise = mf_test_alloc(t->nk);
  memcpy(k2, t->k, (size_t)t->nk * sizeof(double));
  memcpy(v2, t->v, (size_t)t->nk * sizeof(double));
  mf_test_randn(noise, t->nk, 991, 50.0);
  int changed = 0;
  for (int b = 0; b < c.B; b++)
    for (int r = 0; r < c.R; r++)
      for (int h = 0; h < c.H; h++)
        for (int j = 0; j < c.K; j++)
          if (!t->mask[((int64_t)b * c.R + r) * c.K + j])
            for (int x = 0; x < c.D; x++) {
              int64_t e = (((((int64_t)b * c.R + r) * c.H + h) * c.K + j) * c.D) + x;
              k2[e] += noise[e];
              v2[e] -= noise[e];
              changed++;
            }
  if (!changed) return;
  double *out2 = mf_test_alloc(t->nq), *lse2 = mf_test_alloc(t->nl);
  double *dq2 = mf_test_alloc(t->nq), *dk2 = mf_test_alloc(t->nk), *dv2 = mf_test_alloc(t->nk);
  double *db2 = mf_test_alloc(t->nb), *dg2 = mf_test_alloc(t->nq);
  mf_attention_forward(out2, lse2, t->q, k2, v2, t->bias, t->mask, t->gate, t->d);
  mf_attention_backward(dq2, dk2, dv2, t->bias ? db2 : NULL, t->gate ? dg2 : NULL, t->w, lse2,
                        t->q, k2, v2, t->bias, t->mask, t->gate, t->d);
  int same = memcmp(out2, t->out, (size_t)t->nq * sizeof(double)) == 0 &&
             memcmp(lse2, t->lse, (size_t)t->nl * sizeof(double)) == 0 &&
             memcmp(dq2, t->dq, (size_t)t->nq * sizeof(double)) == 0 &&
             memcmp(dk2, t->dk, (size_t)t->nk * sizeof(double)) == 0 &&
             memcmp(dv2, t->dv, (size_t)t->nk * sizeof(double)) == 0 &&
             (!t->bias || memcmp(db2, t->dbias, (size_t)t->nb * sizeof(double)) == 0) &&
             (!t->gate || memcmp(dg2, t->dgate, (size_t)t->nq * sizeof(double)) == 0);
  MF_TEST(same, "%s: k, v of %d masked key entries changed; out, lse and all grads identical",
          name, changed);
}

/* dbias from one call over R equals the sum of dbias from R calls with R = 1 (each the
 * per-row dlogits of that row), and the sum over r of the naive per-row dlogits. */
static void check_dbias_rows(case_t *t, const char *name) {
  const cfg_t c = t->c;
  double *sum = mf_test_alloc(t->nb), *nsum = mf_test_alloc(t->nb);
  const int64_t qn = (int64_t)c.H * c.Q * c.D, kn = (int64_t)c.H * c.K * c.D;
  const int64_t ln = (int64_t)c.H * c.Q;
  double *q1 = mf_test_alloc(c.B * qn), *k1 = mf_test_alloc(c.B * kn);
  double *v1 = mf_test_alloc(c.B * kn), *g1 = mf_test_alloc(c.B * qn);
  double *w1 = mf_test_alloc(c.B * qn), *l1 = mf_test_alloc(c.B * ln);
  double *db1 = mf_test_alloc(t->nb);
  uint8_t m1[512];
  MF_ASSERT(c.B * c.K <= (int)sizeof m1, "mask slice too large");
  mf_attn_dims d1 = t->d;
  d1.R = 1;
  for (int r = 0; r < c.R; r++) {
    for (int b = 0; b < c.B; b++) {
      int64_t br = (int64_t)b * c.R + r;
      memcpy(q1 + b * qn, t->q + br * qn, (size_t)qn * sizeof(double));
      memcpy(k1 + b * kn, t->k + br * kn, (size_t)kn * sizeof(double));
      memcpy(v1 + b * kn, t->v + br * kn, (size_t)kn * sizeof(double));
      memcpy(w1 + b * qn, t->w + br * qn, (size_t)qn * sizeof(double));
      memcpy(l1 + b * ln, t->lse + br * ln, (size_t)ln * sizeof(double));
      if (t->gate) memcpy(g1 + b * qn, t->gate + br * qn, (size_t)qn * sizeof(double));
      if (t->mask) memcpy(m1 + b * c.K, t->mask + br * c.K, (size_t)c.K);
    }
    mf_attention_backward(NULL, NULL, NULL, db1, NULL, w1, l1, q1, k1, v1, t->bias,
                          t->mask ? m1 : NULL, t->gate ? g1 : NULL, d1);
    for (int64_t x = 0; x < t->nb; x++) sum[x] += db1[x];
  }
  /* naive: Σ_r dS[b, r, h, q, k] */
  for (int b = 0; b < c.B; b++)
    for (int r = 0; r < c.R; r++)
      for (int64_t x = 0; x < (int64_t)c.H * c.Q * c.K; x++)
        nsum[(int64_t)b * c.H * c.Q * c.K + x] +=
            t->rdS[((int64_t)b * c.R + r) * c.H * c.Q * c.K + x];
  char what[256];
  snprintf(what, sizeof what, "%s: dbias = sum over R of R=1 calls", name);
  mf_test_close(what, t->dbias, sum, t->nb, 1e-13);
  snprintf(what, sizeof what, "%s: dbias = sum over R of naive per-row dlogits", name);
  mf_test_close(what, t->dbias, nsum, t->nb, 1e-12);
}

static void run_case(cfg_t c, int use_mask, int use_bias, int use_gate, uint64_t seed,
                     int64_t max_checks) {
  char name[128];
  snprintf(name, sizeof name, "(B%d R%d H%d Q%d K%d D%d)%s%s%s", c.B, c.R, c.H, c.Q, c.K, c.D,
           use_mask ? " mask" : "", use_bias ? " bias" : "", use_gate ? " gate" : "");
  case_t t;
  setup(&t, c, use_mask, use_bias, use_gate, seed);
  naive(&t);
  run_op(&t);
  char what[256];
  /* forward and backward vs the naive double reference: same maths, different order of
   * operations, so agreement to ~1e-15 relative; tolerance 1e-12 */
  int lse_ok = 1;
  for (int64_t x = 0; x < t.nl; x++)
    lse_ok &= (t.lse[x] == -INFINITY && t.rlse[x] == -INFINITY) ||
              (isfinite(t.lse[x]) && fabs(t.lse[x] - t.rlse[x]) <= 1e-12 * (1 + fabs(t.rlse[x])));
  MF_TEST(lse_ok, "%s: lse matches naive", name);
  snprintf(what, sizeof what, "%s: out", name);
  mf_test_close(what, t.out, t.rout, t.nq, 1e-12);
  snprintf(what, sizeof what, "%s: dq vs naive", name);
  mf_test_close(what, t.dq, t.rdq, t.nq, 1e-12);
  snprintf(what, sizeof what, "%s: dk vs naive", name);
  mf_test_close(what, t.dk, t.rdk, t.nk, 1e-12);
  snprintf(what, sizeof what, "%s: dv vs naive", name);
  mf_test_close(what, t.dv, t.rdv, t.nk, 1e-12);
  if (use_bias) {
    snprintf(what, sizeof what, "%s: dbias vs naive", name);
    mf_test_close(what, t.dbias, t.rdbias, t.nb, 1e-12);
  }
  if (use_gate) {
    snprintf(what, sizeof what, "%s: dgate vs naive", name);
    mf_test_close(what, t.dgate, t.rdgate, t.nq, 1e-12);
  }
  MF_TEST(all_finite(t.out, t.nq) && all_finite(t.dq, t.nq) && all_finite(t.dk, t.nk) &&
              all_finite(t.dv, t.nk) && (!use_bias || all_finite(t.dbias, t.nb)) &&
              (!use_gate || all_finite(t.dgate, t.nq)),
          "%s: out and all gradients finite (no NaN)", name);

  /* finite differences of the op's own forward, L = Σ out·w, h = 1e-6 in double:
   * truncation ~h²·|f'''| and rounding ~1e-16/h, so agreement ~1e-9; tolerance 1e-6 */
  if (max_checks > 0) {
    const double h = 1e-6, tol = 1e-6;
    snprintf(what, sizeof what, "%s: dq", name);
    mf_test_gradcheck(what, loss_fn, &t, t.q, t.dq, t.nq, max_checks, h, tol);
    snprintf(what, sizeof what, "%s: dk", name);
    mf_test_gradcheck(what, loss_fn, &t, t.k, t.dk, t.nk, max_checks, h, tol);
    snprintf(what, sizeof what, "%s: dv", name);
    mf_test_gradcheck(what, loss_fn, &t, t.v, t.dv, t.nk, max_checks, h, tol);
    if (use_bias) {
      snprintf(what, sizeof what, "%s: dbias", name);
      mf_test_gradcheck(what, loss_fn, &t, t.bias, t.dbias, t.nb, max_checks, h, tol);
    }
    if (use_gate) {
      snprintf(what, sizeof what, "%s: dgate", name);
      mf_test_gradcheck(what, loss_fn, &t, t.gate, t.dgate, t.nq, max_checks, h, tol);
    }
  }
  if (use_mask) {
    check_masked(&t, name);
    check_masked_keys_inert(&t, name);
  }
  if (use_bias) check_dbias_rows(&t, name);

  /* lse may be NULL in the forward (inference): same output */
  mf_attention_forward(t.tmp_out, NULL, t.q, t.k, t.v, t.bias, t.mask, t.gate, t.d);
  MF_TEST(memcmp(t.tmp_out, t.out, (size_t)t.nq * sizeof(double)) == 0,
          "%s: forward without lse gives the same output", name);
}

/* Every key masked: output 0, lse -inf, every gradient exactly 0. */
static void test_all_masked(void) {
  cfg_t c = {1, 2, 2, 3, 4, 5};
  case_t t;
  setup(&t, c, 1, 1, 1, 70);
  memset(t.mask, 0, (size_t)t.nm);
  run_op(&t);
  int lse_ok = 1;
  for (int64_t x = 0; x < t.nl; x++) lse_ok &= t.lse[x] == -INFINITY;
  MF_TEST(all_zero(t.out, t.nq) && lse_ok, "all masked: out = 0, lse = -inf");
  MF_TEST(all_zero(t.dq, t.nq) && all_zero(t.dk, t.nk) && all_zero(t.dv, t.nk) &&
              all_zero(t.dbias, t.nb) && all_zero(t.dgate, t.nq),
          "all masked: all gradients exactly 0");
}

/* Large logits (|logit| ~ 1e3): the softmax must not overflow. */
static void test_large_logits(void) {
  cfg_t c = {1, 2, 2, 5, 6, 4};
  case_t t;
  setup(&t, c, 1, 1, 1, 80);
  for (int64_t x = 0; x < t.nq; x++) t.q[x] *= 300;
  for (int64_t x = 0; x < t.nb; x++) t.bias[x] *= 400;
  naive(&t);
  run_op(&t);
  MF_TEST(all_finite(t.out, t.nq) && all_finite(t.dq, t.nq) && all_finite(t.dk, t.nk) &&
              all_finite(t.dv, t.nk) && all_finite(t.dbias, t.nb),
          "large logits: finite output and gradients");
  /* out as tight as elsewhere; gradients 1e-10: with near one-hot P, dS = P(dP − Di) is a
   * difference of nearly equal numbers, which costs a few digits in both implementations */
  mf_test_close("large logits: out", t.out, t.rout, t.nq, 1e-12);
  mf_test_close("large logits: dk", t.dk, t.rdk, t.nk, 1e-10);
  mf_test_close("large logits: dbias", t.dbias, t.rdbias, t.nb, 1e-10);
}

/* A key with a -inf bias gets zero weight, like a masked key. */
static void test_inf_bias(void) {
  cfg_t c = {1, 1, 1, 2, 3, 2};
  case_t t;
  setup(&t, c, 0, 1, 0, 90);
  for (int i = 0; i < c.Q; i++) t.bias[i * c.K + 1] = -INFINITY;
  run_op(&t);
  double o0 = 0, p0 = exp(t.q[0] * t.k[0] * t.d.scale + t.q[1] * t.k[1] * t.d.scale + t.bias[0]);
  double p2 = exp(t.q[0] * t.k[4] * t.d.scale + t.q[1] * t.k[5] * t.d.scale + t.bias[2]);
  o0 = (p0 * t.v[0] + p2 * t.v[4]) / (p0 + p2);
  MF_TEST(fabs(t.out[0] - o0) < 1e-12 && all_finite(t.dq, t.nq) && all_finite(t.dk, t.nk) &&
              t.dk[2] == 0 && t.dk[3] == 0 && t.dv[2] == 0 && t.dv[3] == 0,
          "-inf bias: key excluded, finite grads (out %g vs %g)", t.out[0], o0);
}

static void fatal_dims(void *ctx) {
  (void)ctx;
  double x[4] = {0};
  mf_attention_forward(x, x, x, x, x, NULL, NULL, NULL, (mf_attn_dims){1, 1, 1, 1, 1, 0, 1.0});
}
static void fatal_dgate(void *ctx) {
  (void)ctx;
  double x[4] = {0};
  mf_attention_backward(x, x, x, NULL, x, x, x, x, x, x, NULL, NULL, NULL,
                        (mf_attn_dims){1, 1, 1, 1, 1, 1, 1.0});
}

/* A NaN input must show up as NaN in the output, not be hidden as an "empty" row. */
static void test_nan_propagates(void) {
  mf_attn_dims d = {1, 1, 1, 2, 3, 2, 1.0 / sqrt(2.0)};
  double q[4], k[6], v[6], out[4], lse[2];
  mf_test_randn(q, 4, 901, 1.0);
  mf_test_randn(k, 6, 902, 1.0);
  mf_test_randn(v, 6, 903, 1.0);
  q[0] = NAN; /* row 0: every logit is NaN; row 1 is finite */
  mf_attention_forward(out, lse, q, k, v, NULL, NULL, NULL, d);
  MF_TEST(isnan(out[0]) && isnan(out[1]) && isnan(lse[0]), "NaN logits give a NaN row");
  MF_TEST(isfinite(out[2]) && isfinite(out[3]) && isfinite(lse[1]), "other rows stay finite");
}

int main(void) {
  mf_test_begin("test_attention");
  double t0 = mf_time_now();
  const cfg_t cfgs[] = {
      {1, 1, 1, 1, 1, 1},   /* smallest */
      {1, 5, 2, 7, 7, 8},   /* R rows sharing a bias */
      {2, 3, 4, 9, 13, 16}, /* Q != K, B > 1 (windows x copies) */
      {1, 6, 4, 6, 6, 32},  /* triangle attention: R = N rows, bias (1, H, N, N) */
      {1, 1, 16, 10, 10, 24}, /* single attention with pair bias: R = 1, 16 x 24 */
  };
  const int64_t checks[] = {1000, 200, 150, 150, 150}; /* gradcheck elements per tensor */
  uint64_t seed = 100;
  for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++)
    for (int combo = 0; combo < 8; combo++) {
      int m = combo & 1, b = (combo >> 1) & 1, g = (combo >> 2) & 1;
      /* every combination: naive reference and gradchecks */
      run_case(cfgs[ci], m, b, g, seed, checks[ci]);
      seed += 10;
    }
  test_all_masked();
  test_large_logits();
  test_inf_bias();
  test_nan_propagates();
  MF_TEST(mf_test_expect_fatal(fatal_dims, NULL, "attention dims"), "D = 0 is fatal: %s",
          mf_test_last_fatal());
  MF_TEST(mf_test_expect_fatal(fatal_dgate, NULL, "dgate without a gate"),
          "dgate without a gate is fatal: %s", mf_test_last_fatal());
  MF_DEBUG("test_attention: %.2f s", mf_time_now() - t0);
  return mf_test_end();
}
