/* loss.c — CPU reference of the binned softmax cross-entropy and the distogram helpers.
 * See loss.h. */
#include "ops/loss.h"

#include <math.h>

static void ce_check(const mf_real *logits, const int32_t *target, int64_t M, int K) {
  MF_ASSERT(M >= 0 && K > 0, "softmax_ce dims M=%lld K=%d", (long long)M, K);
  MF_ASSERT(M == 0 || (logits && target), "softmax_ce: NULL argument");
  for (int64_t m = 0; m < M; m++)
    MF_ASSERT(target[m] >= 0 && target[m] < K, "softmax_ce: target[%lld] = %d not in [0, %d)",
              (long long)m, (int)target[m], K);
}

static double weight_sum(const mf_real *weight, int64_t M) {
  double s = 0;
  if (!weight) return (double)M;
  for (int64_t m = 0; m < M; m++) s += weight[m];
  return s;
}

double mf_softmax_ce_forward(mf_real *lse, const mf_real *logits, const int32_t *target,
                             const mf_real *weight, int64_t M, int K) {
  ce_check(logits, target, M, K);
  double num = 0;
  for (int64_t m = 0; m < M; m++) {
    const mf_real *l = logits + m * K;
    double mx = l[0], s = 0;
    for (int k = 1; k < K; k++) mx = l[k] > mx ? l[k] : mx;
    for (int k = 0; k < K; k++) s += exp(l[k] - mx);
    double ls = mx + log(s);
    lse[m] = (mf_real)ls;
    double wm = weight ? weight[m] : 1.0;
    if (wm != 0) num += wm * (ls - l[target[m]]);
  }
  double den = weight_sum(weight, M);
  return num / (den > MF_CE_TINY ? den : MF_CE_TINY);
}

void mf_softmax_ce_backward(mf_real *dlogits, double dloss, const mf_real *lse,
                            const mf_real *logits, const int32_t *target, const mf_real *weight,
                            int64_t M, int K) {
  ce_check(logits, target, M, K);
  double den = weight_sum(weight, M);
  double scale = dloss / (den > MF_CE_TINY ? den : MF_CE_TINY);
  for (int64_t m = 0; m < M; m++) {
    const mf_real *l = logits + m * K;
    mf_real *dl = dlogits + m * K;
    double wm = (weight ? weight[m] : 1.0) * scale;
    for (int k = 0; k < K; k++) {
      double pk = wm != 0 ? exp(l[k] - (double)lse[m]) : 0;
      dl[k] = (mf_real)(wm * (pk - (k == target[m])));
    }
  }
}

static double distogram_edge(int k) { return MF_DISTOGRAM_FIRST_EDGE + MF_DISTOGRAM_STEP * k; }

int mf_distogram_bin(double d) {
  MF_ASSERT(!isnan(d), "distogram_bin: NaN distance");
  if (d < MF_DISTOGRAM_FIRST_EDGE) return 0;
  double t = floor((d - MF_DISTOGRAM_FIRST_EDGE) / MF_DISTOGRAM_STEP) + 1;
  int b = t >= MF_DISTOGRAM_BINS - 1 ? MF_DISTOGRAM_BINS - 1 : (int)t;
  /* the edges are exact in binary; settle any rounding of the division against them */
  while (b < MF_DISTOGRAM_BINS - 1 && d >= distogram_edge(b)) b++;
  while (b > 0 && d < distogram_edge(b - 1)) b--;
  return b;
}

void mf_distogram_symmetrize_forward(mf_real *out, const mf_real *l, int N, int K) {
  MF_ASSERT(N >= 0 && K > 0, "distogram_symmetrize dims N=%d K=%d", N, K);
  for (int i = 0; i < N; i++)
    for (int j = i; j < N; j++) {
      const mf_real *a = l + ((int64_t)i * N + j) * K, *b = l + ((int64_t)j * N + i) * K;
      mf_real *oa = out + ((int64_t)i * N + j) * K, *ob = out + ((int64_t)j * N + i) * K;
      for (int k = 0; k < K; k++) {
        mf_real s = a[k] + b[k]; /* read both before writing (in place) */
        oa[k] = s;
        ob[k] = s;
      }
    }
}

void mf_distogram_symmetrize_backward(mf_real *dl, const mf_real *dout, int N, int K) {
  /* the map l → l + lᵀ is self-adjoint */
  mf_distogram_symmetrize_forward(dl, dout, N, K);
}
