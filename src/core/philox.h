/* philox.h — Philox-4x32-10 (Salmon et al., SC'11) and the transforms that turn its
 * bits into uniform, normal and truncated-normal numbers, as inline functions that
 * compile for the host (C) and the device (CUDA, through MF_HD), so the CPU and GPU
 * draw the same numbers for the same (seed, stream, index).
 *
 * Element i of stream (seed, stream) comes from lane i%4 of the Philox block with
 * counter {i/4 lo, i/4 hi, stream lo, stream hi} and key {seed lo, seed hi}.
 * Uniforms and the raw bits are bit-identical on CPU and GPU; normals are computed in
 * double from those bits and agree to the last float bit except when the two math
 * libraries round a log/cos differently (rare; never more than 1 ulp). */
#ifndef MF_PHILOX_H
#define MF_PHILOX_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MF_HD __host__ __device__ __forceinline__
#else
#define MF_HD static inline
#endif

#define MF_PHILOX_M0 0xD2511F53u
#define MF_PHILOX_M1 0xCD9E8D57u
#define MF_PHILOX_W0 0x9E3779B9u
#define MF_PHILOX_W1 0xBB67AE85u

MF_HD void mf_philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
  uint64_t p = (uint64_t)a * (uint64_t)b;
  *hi = (uint32_t)(p >> 32);
  *lo = (uint32_t)p;
}

/* out = Philox4x32-10(ctr, key) */
MF_HD void mf_philox4x32_10_inl(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    uint32_t hi0, lo0, hi1, lo1;
    mf_philox_mulhilo(MF_PHILOX_M0, c0, &hi0, &lo0);
    mf_philox_mulhilo(MF_PHILOX_M1, c2, &hi1, &lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += MF_PHILOX_W0;
    k1 += MF_PHILOX_W1;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* The 4 raw words of the block holding element i. */
MF_HD void mf_philox_block(uint64_t seed, uint64_t stream, uint64_t i, uint32_t out[4]) {
  uint64_t b = i >> 2;
  uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  mf_philox4x32_10_inl(ctr, key, out);
}

/* Bits → float uniform in (0, 1): 23 random bits, centred; never 0, never 1. */
MF_HD float mf_philox_u01f(uint32_t x) { return (float)(x >> 9) * 0x1p-23f + 0x1p-24f; }
/* Bits → double uniform in (0, 1), 32 random bits. */
MF_HD double mf_philox_u01d(uint32_t x) { return ((double)x + 0.5) * 0x1p-32; }

/* Inverse of the standard normal CDF: Acklam's rational approximation refined by one
 * Halley step with erfc, accurate to ~1e-15 over (0, 1). */
MF_HD double mf_norm_icdf(double p) {
  const double a[6] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                       1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
  const double b[5] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                       6.680131188771972e+01, -1.328068155288572e+01};
  const double c[6] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                       -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
  const double d[4] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                       3.754408661907416e+00};
  double x, q, r;
  if (p < 0.02425) {
    q = sqrt(-2 * log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p > 1 - 0.02425) {
    q = sqrt(-2 * log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else {
    q = p - 0.5;
    r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  /* Halley refinement: e = Phi(x) - p */
  double e = 0.5 * erfc(-x / 1.4142135623730951) - p;
  double u = e * 2.5066282746310002 * exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

MF_HD double mf_norm_cdf(double x) { return 0.5 * erfc(-x / 1.4142135623730951); }

/* Element i of a stream, as a uniform float in (0,1). */
MF_HD float mf_philox_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
  uint32_t w[4];
  mf_philox_block(seed, stream, i, w);
  return mf_philox_u01f(w[i & 3]);
}

/* Element i as a standard normal: Box-Muller on lane pairs (0,1) and (2,3). */
MF_HD float mf_philox_normal(uint64_t seed, uint64_t stream, uint64_t i) {
  uint32_t w[4];
  mf_philox_block(seed, stream, i, w);
  int pair = (int)(i & 2);
  double u1 = mf_philox_u01d(w[pair]), u2 = mf_philox_u01d(w[pair + 1]);
  double r = sqrt(-2.0 * log(u1)), t = 6.283185307179586 * u2;
  return (float)((i & 1) ? r * sin(t) : r * cos(t));
}

/* Element i as a standard normal truncated to [lo, hi], by inverting the CDF. */
MF_HD float mf_philox_trunc_normal(uint64_t seed, uint64_t stream, uint64_t i, double lo,
                                   double hi) {
  uint32_t w[4];
  mf_philox_block(seed, stream, i, w);
  double plo = mf_norm_cdf(lo), phi = mf_norm_cdf(hi);
  double x = mf_norm_icdf(plo + mf_philox_u01d(w[i & 3]) * (phi - plo));
  return (float)(x < lo ? lo : x > hi ? hi : x);
}

#endif
