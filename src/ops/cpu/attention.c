/* attention.c — CPU reference of gated multi-head attention with a pair bias broadcast
 * over rows (see attention.h for the function and the shapes). Plain loops, one
 * (b, r, h, q) query row at a time, everything accumulated in double; the logits of a
 * row are materialised (K values), never the whole (R, H, Q, K) tensor.
 * Not fast and not the GPU path: EvoFlash-3D (src/ops/cuda/attention*.cu) computes the
 * same function and is tested against this file.
 *
 * Masked keys are excluded from the softmax (not given -1e9): they get exactly zero
 * weight and exactly zero dk, dv and dbias. A row with no valid key (or whose valid
 * logits are all -inf) has out = 0, lse = -inf and contributes nothing to any gradient.
 *
 * Backward recomputes the probabilities from lse, P = exp(logit − lse), and the
 * ungated output o = P·v, then
 *   dO = dout ⊙ σ(gate)            dgate = dout ⊙ o ⊙ σ(gate)(1 − σ(gate))
 *   Di = Σ_d dO·o                  dP = dO·vᵀ           dS = P ⊙ (dP − Di)
 *   dq = scale·dS·k                dk = scale·dSᵀ·q     dv = Pᵀ·dO
 *   dbias[b,h,q,k] = Σ_r dS[b,r,h,q,k]
 * Loop order b, h, r, q: dbias of one (b, h) is reduced over r in a double buffer
 * (Q·K) in a fixed order, and dk, dv of one (b, r, h) over q in another (2·K·D), so the
 * result is deterministic and each output element is written once. */
#include "ops/attention.h"
#include "ops/cpu/cpu_math.h"

#include <math.h>
#include <string.h>

static void check_dims(mf_attn_dims d) {
  MF_ASSERT(d.B >= 0 && d.R >= 0 && d.H >= 0 && d.Q >= 0 && d.K >= 0 && d.D > 0,
            "attention dims B=%d R=%d H=%d Q=%d K=%d D=%d", d.B, d.R, d.H, d.Q, d.K, d.D);
  MF_ASSERT(isfinite(d.scale), "attention scale %g", d.scale);
}


/* Logits of one query row over the K keys, in double: s[k] = scale·qrow·k[k] + brow[k]
 * for valid keys, -inf for masked ones. qrow (D), kmat (K, D), brow (K) or NULL,
 * mrow (K) or NULL. Returns the maximum (-inf when no key is valid). */
static double row_logits(double *s, const mf_real *qrow, const mf_real *kmat,
                         const mf_real *brow, const uint8_t *mrow, int K, int D, double scale) {
  double mx = -INFINITY;
  for (int kk = 0; kk < K; kk++) {
    if (mrow && !mrow[kk]) {
      s[kk] = -INFINITY;
      continue;
    }
    const mf_real *kr = kmat + (int64_t)kk * D;
    double dot = 0;
    for (int c = 0; c < D; c++) dot += (double)qrow[c] * (double)kr[c];
    double x = scale * dot + (brow ? (double)brow[kk] : 0.0);
    s[kk] = x;
    if (x > mx || x != x) mx = x; /* a NaN logit makes the row NaN (and sticks) */
  }
  return mx;
}

void mf_attention_forward(mf_real *out, mf_real *lse, const mf_real *q, const mf_real *k,
                          const mf_real *v, const mf_real *bias, const uint8_t *mask,
                          const mf_real *gate, mf_attn_dims d) {
  check_dims(d);
  MF_ASSERT(out && q && k && v, "attention forward: out, q, k, v are required");
  const int K = d.K, D = d.D, Q = d.Q;
  const int64_t nrows = (int64_t)d.B * d.R * d.H * Q;
  if (nrows == 0) return;
  double *s = mf_xmalloc((size_t)(K + 1) * sizeof(double), "attention logits row");
  double *acc = mf_xmalloc((size_t)D * sizeof(double), "attention output row");
  for (int b = 0; b < d.B; b++)
    for (int r = 0; r < d.R; r++) {
      const uint8_t *mrow = mask ? mask + ((int64_t)b * d.R + r) * K : NULL;
      for (int h = 0; h < d.H; h++) {
        const int64_t brh = ((int64_t)b * d.R + r) * d.H + h; /* (b, r, h) */
        const mf_real *kmat = k + brh * K * D, *vmat = v + brh * K * D;
        for (int i = 0; i < Q; i++) {
          const int64_t row = brh * Q + i; /* (b, r, h, q) */
          const mf_real *brow = bias ? bias + (((int64_t)b * d.H + h) * Q + i) * K : NULL;
          mf_real *orow = out + row * D;
          double mx = row_logits(s, q + row * D, kmat, brow, mrow, K, D, d.scale);
          if (mx == -INFINITY) { /* no valid key: empty softmax */
            for (int c = 0; c < D; c++) orow[c] = 0;
            if (lse) lse[row] = (mf_real)-INFINITY;
            continue;
          }
          double sum = 0;
          for (int c = 0; c < D; c++) acc[c] = 0;
          for (int kk = 0; kk < K; kk++) {
            if (s[kk] == -INFINITY) continue; /* masked (or a -inf bias): weight exactly 0 */
            double p = exp(s[kk] - mx);
            sum += p;
            const mf_real *vr = vmat + (int64_t)kk * D;
            for (int c = 0; c < D; c++) acc[c] += p * (double)vr[c];
          }
          if (lse) lse[row] = (mf_real)(mx + log(sum));
          const mf_real *grow = gate ? gate + row * D : NULL;
          for (int c = 0; c < D; c++) {
            double o = acc[c] / sum;
            if (grow) o *= mf_sigmoid((double)grow[c]);
            orow[c] = (mf_real)o;
          }
        }
      }
    }
  mf_free(s);
  mf_free(acc);
}

void mf_attention_backward(mf_real *dq, mf_real *dk, mf_real *dv, mf_real *dbias, mf_real *dgate,
                           const mf_real *dout, const mf_real *lse, const mf_real *q,
                           const mf_real *k, const mf_real *v, const mf_real *bias,
                           const uint8_t *mask, const mf_real *gate, mf_attn_dims d) {
  check_dims(d);
  MF_ASSERT(dout && lse && q && k && v, "attention backward: dout, lse, q, k, v are required");
  MF_ASSERT(!dgate || gate, "attention backward: dgate without a gate");
  const int K = d.K, D = d.D, Q = d.Q;
  const int64_t KD = (int64_t)K * D, QK = (int64_t)Q * K;
  /* scratch (doubles): s/P (K), dS (K), o (D), dO (D), dk/dv accumulators (K·D each),
   * dbias accumulator (Q·K) */
  const int64_t nscratch = 2 * (int64_t)K + 2 * (int64_t)D + 2 * KD + (dbias ? QK : 0) + 1;
  double *scratch = mf_xmalloc((size_t)nscratch * sizeof(double), "attention backward scratch");
  double *P = scratch, *dS = P + K, *o = dS + K, *dO = o + D, *dka = dO + D, *dva = dka + KD;
  double *dba = dbias ? dva + KD : NULL;

  for (int b = 0; b < d.B; b++)
    for (int h = 0; h < d.H; h++) {
      if (dba) memset(dba, 0, (size_t)QK * sizeof(double));
      for (int r = 0; r < d.R; r++) {
        const uint8_t *mrow = mask ? mask + ((int64_t)b * d.R + r) * K : NULL;
        const int64_t brh = ((int64_t)b * d.R + r) * d.H + h;
        const mf_real *kmat = k + brh * KD, *vmat = v + brh * KD;
        memset(dka, 0, (size_t)(2 * KD) * sizeof(double)); /* dka and dva */
        for (int i = 0; i < Q; i++) {
          const int64_t row = brh * Q + i;
          const double L = (double)lse[row];
          if (L == -INFINITY) { /* empty row: out = 0 whatever q and gate are */
            if (dq)
              for (int c = 0; c < D; c++) dq[row * D + c] = 0;
            if (dgate)
              for (int c = 0; c < D; c++) dgate[row * D + c] = 0;
            continue;
          }
          const mf_real *qrow = q + row * D, *dorow = dout + row * D;
          const mf_real *brow = bias ? bias + (((int64_t)b * d.H + h) * Q + i) * K : NULL;
          const mf_real *grow = gate ? gate + row * D : NULL;
          row_logits(P, qrow, kmat, brow, mrow, K, D, d.scale);
          for (int c = 0; c < D; c++) o[c] = 0;
          for (int kk = 0; kk < K; kk++) {
            P[kk] = P[kk] == -INFINITY ? 0.0 : exp(P[kk] - L);
            if (P[kk] == 0) continue;
            const mf_real *vr = vmat + (int64_t)kk * D;
            for (int c = 0; c < D; c++) o[c] += P[kk] * (double)vr[c];
          }
          /* gate: out = σ(g)·o */
          double Di = 0;
          for (int c = 0; c < D; c++) {
            double g = grow ? mf_sigmoid((double)grow[c]) : 1.0;
            dO[c] = (double)dorow[c] * g;
            if (dgate) dgate[row * D + c] = (mf_real)((double)dorow[c] * o[c] * g * (1.0 - g));
            Di += dO[c] * o[c];
          }
          /* dS = P ⊙ (dO·vᵀ − Di); masked keys (P = 0) stay exactly 0 */
          for (int kk = 0; kk < K; kk++) {
            if (P[kk] == 0) {
              dS[kk] = 0;
              continue;
            }
            const mf_real *vr = vmat + (int64_t)kk * D;
            double dp = 0;
            for (int c = 0; c < D; c++) dp += dO[c] * (double)vr[c];
            dS[kk] = P[kk] * (dp - Di);
          }
          if (dq)
            for (int c = 0; c < D; c++) {
              double a = 0;
              for (int kk = 0; kk < K; kk++)
                if (dS[kk] != 0) a += dS[kk] * (double)kmat[(int64_t)kk * D + c];
              dq[row * D + c] = (mf_real)(d.scale * a);
            }
          for (int kk = 0; kk < K; kk++) {
            if (P[kk] == 0) continue;
            double *dkr = dka + (int64_t)kk * D, *dvr = dva + (int64_t)kk * D;
            for (int c = 0; c < D; c++) {
              dkr[c] += dS[kk] * (double)qrow[c];
              dvr[c] += P[kk] * dO[c];
            }
          }
          if (dba) {
            double *dbr = dba + (int64_t)i * K;
            for (int kk = 0; kk < K; kk++) dbr[kk] += dS[kk];
          }
        }
        if (dk)
          for (int64_t x = 0; x < KD; x++) dk[brh * KD + x] = (mf_real)(d.scale * dka[x]);
        if (dv)
          for (int64_t x = 0; x < KD; x++) dv[brh * KD + x] = (mf_real)dva[x];
      }
      if (dbias) {
        mf_real *db = dbias + ((int64_t)b * d.H + h) * QK;
        for (int64_t x = 0; x < QK; x++) db[x] = (mf_real)dba[x];
      }
    }
  mf_free(scratch);
}
