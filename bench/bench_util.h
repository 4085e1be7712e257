/* bench_util.h — host helpers shared by the CUDA benchmarks (the .cu files of bench/)
 * and the kernel labs (those of dev/cuda/): random bf16 device tensors from the Philox
 * test stream, zeroed device buffers, the median of a set of timings, the loop over a
 * comma list of N, and the shared inputs of the EvoFusion problems (evo_io_alloc). Every
 * function is static inline, so a program that uses only some of them compiles without
 * warnings; C++ (the templates), so only .cu files include it. Not a library, not a timing policy (warm-up,
 * repetitions and what is timed stay in each program). */
#ifndef MF_BENCH_UTIL_H
#define MF_BENCH_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/tensor.h"
#include "ops/cuda/gpu.h"

/* N(0, scale²) + offset in bf16, drawn from the Philox test stream on the host: n values
 * on the device (cudaMalloc'd; the caller frees). */
static inline mf_bf16_t *dev_rand(int64_t n, uint64_t seed, double scale, double offset) {
  mf_bf16 *h = (mf_bf16 *)malloc((size_t)n * sizeof(mf_bf16));
  MF_CHECK_PTR(h);
  for (int64_t i = 0; i < n; i++)
    h[i] = mf_bf16_from_f32(
        (float)(scale * mf_rng_normal(seed, MF_RNG_TEST, (uint64_t)i) + offset));
  mf_bf16_t *d = NULL;
  MF_CHECK_CUDA(cudaMalloc(&d, (size_t)n * 2));
  MF_CHECK_CUDA(cudaMemcpy(d, h, (size_t)n * 2, cudaMemcpyHostToDevice));
  free(h);
  return d;
}
/* bytes of zeroed device memory (cudaMalloc'd; the caller frees) */
static inline void *dev_zero(size_t bytes) {
  void *d = NULL;
  MF_CHECK_CUDA(cudaMalloc(&d, bytes));
  MF_CHECK_CUDA(cudaMemset(d, 0, bytes));
  return d;
}

static inline int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}
/* The median (upper, for even n) of t[0..n), which it sorts in place. */
static inline float median_f32(float *t, int n) {
  qsort(t, (size_t)n, sizeof(float), cmp_float);
  return t[n / 2];
}

/* The inputs and outputs the pair-sized EvoFusion problems of bench/evofusion.cu and
 * dev/cuda/bwd_lab.cu share, on their problem struct P (fields of these names): x (M, C)
 * random (seed 11), dout (M, C) random (seed 12), out and dx (M, C) bf16 zeroed, γ g and β b
 * (C) random (seeds 13, 14), mean and rstd (M) and dg and db (C) fp32 zeroed. */
template <typename P>
static inline void evo_io_alloc(P *p, int64_t M, int C) {
  p->x = dev_rand(M * C, 11, 1.5, 0.3);
  p->dout = dev_rand(M * C, 12, 1.0, 0.0);
  p->out = (mf_bf16_t *)dev_zero((size_t)M * C * 2);
  p->dx = (mf_bf16_t *)dev_zero((size_t)M * C * 2);
  p->g = dev_rand(C, 13, 0.2, 1.0);
  p->b = dev_rand(C, 14, 0.2, 0.0);
  p->mean = (float *)dev_zero((size_t)M * 4);
  p->rstd = (float *)dev_zero((size_t)M * 4);
  p->dg = (float *)dev_zero((size_t)C * 4);
  p->db = (float *)dev_zero((size_t)C * 4);
}
/* Frees what evo_io_alloc allocated. */
template <typename P>
static inline void evo_io_free(P *p) {
  void *frees[] = {p->x, p->dout, p->out, p->dx, p->g, p->b, p->mean, p->rstd, p->dg, p->db};
  for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) MF_CHECK_CUDA(cudaFree(frees[i]));
}

/* fn(N) for each positive N of the comma list ns ("384,768"), in order. */
static inline void for_each_n(const char *ns, void (*fn)(int)) {
  for (const char *s = ns; *s;) {
    const int N = atoi(s);
    if (N > 0) fn(N);
    const char *c = strchr(s, ',');
    if (!c) break;
    s = c + 1;
  }
}

#endif
