/* linear.c — CPU reference of the linear layer on top of mf_gemm. See linear.h. */
#include "ops/linear.h"

#include "ops/gemm.h"

void mf_linear_forward(mf_real *out, const mf_real *inp, const mf_real *weight,
                       const mf_real *bias, int64_t M, int I, int O) {
  MF_ASSERT(M >= 0 && I > 0 && O > 0, "linear dims M=%lld I=%d O=%d", (long long)M, I, O);
  mf_gemm(0, 1, M, O, I, 1.0, inp, I, weight, I, 0.0, out, O);
  if (bias)
    for (int64_t m = 0; m < M; m++)
      for (int o = 0; o < O; o++) out[m * O + o] += bias[o];
}

void mf_linear_backward(mf_real *dinp, mf_real *dweight, mf_real *dbias, const mf_real *dout,
                        const mf_real *inp, const mf_real *weight, int64_t M, int I, int O) {
  MF_ASSERT(M >= 0 && I > 0 && O > 0, "linear dims M=%lld I=%d O=%d", (long long)M, I, O);
  /* out = inp·Wᵀ + b  ⇒  dinp = dout·W,  dW += doutᵀ·inp,  db += Σ_m dout */
  if (dinp) mf_gemm(0, 0, M, I, O, 1.0, dout, O, weight, I, 0.0, dinp, I);
  if (dweight) mf_gemm(1, 0, O, I, M, 1.0, dout, O, inp, I, 1.0, dweight, I);
  if (dbias)
    for (int o = 0; o < O; o++) {
      double s = 0;
      for (int64_t m = 0; m < M; m++) s += dout[m * O + o];
      dbias[o] += (mf_real)s;
    }
}
