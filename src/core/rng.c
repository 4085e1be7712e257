/* rng.c — host entry points of the Philox generator (the arithmetic is in philox.h,
 * shared with the CUDA kernels). */
#include "rng.h"

#include "check.h"
#include "philox.h"

void mf_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  mf_philox4x32_10_inl(ctr, key, out);
}

uint64_t mf_rng_stream(uint64_t step, uint32_t purpose, uint32_t sub) {
  MF_ASSERT(purpose < 4096 && sub < 4096 && step < (1ull << 40), "stream (%llu, %u, %u)",
            (unsigned long long)step, purpose, sub);
  return (step << 24) | ((uint64_t)purpose << 12) | sub;
}

float mf_rng_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
  return mf_philox_uniform(seed, stream, i);
}
float mf_rng_normal(uint64_t seed, uint64_t stream, uint64_t i) {
  return mf_philox_normal(seed, stream, i);
}
float mf_rng_trunc_normal(uint64_t seed, uint64_t stream, uint64_t i, double lo, double hi) {
  return mf_philox_trunc_normal(seed, stream, i, lo, hi);
}

void mf_rng_fill_uniform(float *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset) {
  for (int64_t k = 0; k < n; k++) out[k] = mf_philox_uniform(seed, stream, offset + (uint64_t)k);
}
void mf_rng_fill_normal(float *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset) {
  for (int64_t k = 0; k < n; k++) out[k] = mf_philox_normal(seed, stream, offset + (uint64_t)k);
}
void mf_rng_fill_trunc_normal(float *out, int64_t n, uint64_t seed, uint64_t stream,
                              uint64_t offset, double lo, double hi, double scale) {
  for (int64_t k = 0; k < n; k++)
    out[k] = (float)(scale * mf_philox_trunc_normal(seed, stream, offset + (uint64_t)k, lo, hi));
}
