/* gpu_test_util.h — host-side helpers shared by the GPU tests (tests/gpu/test_*_gpu.cu):
 * bf16 rounding of doubles and bf16-representable random inputs, host↔device copies
 * between double arrays and bf16/fp32 device buffers, NaN poisoning (or the initial value
 * of an accumulating output), raw byte fetches, and
 * the test start (harness begin + GPU init, a counted failure when there is no GPU).
 * Two optional parts, each switched on by the including test defining its capacity first:
 *   GPU_TEST_MAX_ALLOCS n — a registry of device allocations (dev_alloc, freed together by
 *     dev_free_all; asserts past n) and the allocating uploads to_bf16/to_f32;
 *   GPU_TEST_MAX_OUTS n  — raw_set, the raw bytes of up to n GPU results of one run, for the
 *     bit-identity check of two runs.
 * Every function is static inline, so a test that uses only some of them compiles without
 * warnings. This is not a test (the Makefile builds only the .cu files of tests/gpu) and
 * not part of a library; it holds no tolerance, seed or comparison policy — those stay in
 * each test. */
#ifndef MF_GPU_TEST_UTIL_H
#define MF_GPU_TEST_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "../harness.h"
#include "ops/cuda/device.h"
#include "ops/cuda/gpu.h"

/* Starts the harness (mf_test_begin(name)) and the GPU (mf_cuda_init(0)); 1 when the GPU is
 * usable, else a failed check "no GPU: ..." at the caller's line and 0 (the caller returns
 * mf_test_end()). */
#define gpu_test_begin(name) gpu_test_begin_at(__FILE__, __LINE__, name)
static inline int gpu_test_begin_at(const char *file, int line, const char *name) {
  mf_test_begin(name);
  if (mf_cuda_init(0) == MF_OK) return 1;
  mf_test_check(0, file, line, "no GPU: %s", mf_error_message());
  return 0;
}

/* x rounded to the nearest bf16 (through fp32), as a double. */
static inline double bf16r(double x) { return mf_f32_from_bf16(mf_bf16_from_f32((float)x)); }

/* x = bf16(scale·randn + offset), randn from mf_test_randn(seed) */
static inline void rand_bf16(double *x, int64_t n, uint64_t seed, double scale, double offset) {
  mf_test_randn(x, n, seed, scale);
  for (int64_t i = 0; i < n; i++) x[i] = bf16r(x[i] + offset);
}

/* Every byte of d (bytes of them) set to 0xff: NaN in bf16 and fp32. */
static inline void poison(void *d, size_t bytes) { MF_CHECK_CUDA(cudaMemset(d, 0xff, bytes)); }

/* d (n, bf16) = x (n) rounded to bf16; d is an existing device buffer. */
static inline void up_bf16(mf_bf16_t *d, const double *x, int64_t n) {
  mf_bf16 *h = (mf_bf16 *)malloc((size_t)(n ? n : 1) * sizeof(mf_bf16));
  MF_CHECK_PTR(h);
  for (int64_t i = 0; i < n; i++) h[i] = mf_bf16_from_f32((float)x[i]);
  MF_CHECK_CUDA(cudaMemcpy(d, h, (size_t)n * sizeof(mf_bf16), cudaMemcpyHostToDevice));
  free(h);
}
/* d (n, bf16) = x (n) rounded to bf16 when up (an output that accumulates into its initial
 * value), else every byte of d poisoned (an output that is assigned). */
static inline void up_or_poison_bf16(mf_bf16_t *d, const double *x, int64_t n, int up) {
  if (up)
    up_bf16(d, x, n);
  else
    poison(d, (size_t)n * 2);
}
/* d (n, fp32) = x (n) rounded to fp32; d is an existing device buffer. */
static inline void up_f32(float *d, const double *x, int64_t n) {
  float *h = (float *)malloc((size_t)(n ? n : 1) * sizeof(float));
  MF_CHECK_PTR(h);
  for (int64_t i = 0; i < n; i++) h[i] = (float)x[i];
  MF_CHECK_CUDA(cudaMemcpy(d, h, (size_t)n * 4, cudaMemcpyHostToDevice));
  free(h);
}
/* x (n) = the device bf16 buffer d (n), widened. */
static inline void from_bf16(double *x, const mf_bf16_t *d, int64_t n) {
  mf_bf16 *h = (mf_bf16 *)malloc((size_t)(n ? n : 1) * sizeof(mf_bf16));
  MF_CHECK_PTR(h);
  MF_CHECK_CUDA(cudaMemcpy(h, d, (size_t)n * 2, cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < n; i++) x[i] = mf_f32_from_bf16(h[i]);
  free(h);
}
/* x (n) = the device fp32 buffer d (n), widened. */
static inline void from_f32(double *x, const float *d, int64_t n) {
  float *h = (float *)malloc((size_t)(n ? n : 1) * sizeof(float));
  MF_CHECK_PTR(h);
  MF_CHECK_CUDA(cudaMemcpy(h, d, (size_t)n * 4, cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < n; i++) x[i] = h[i];
  free(h);
}
/* A malloc'ed host copy of the device bytes d (bytes of them); the caller frees it. */
static inline void *fetch_raw(const void *d, size_t bytes) {
  void *h = malloc(bytes ? bytes : 1);
  MF_CHECK_PTR(h);
  MF_CHECK_CUDA(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
  return h;
}

/* 1 when the device buffers a and b hold the same bytes (bytes of them). */
static inline int dev_same(const void *a, const void *b, size_t bytes) {
  void *ha = fetch_raw(a, bytes), *hb = fetch_raw(b, bytes);
  const int same = memcmp(ha, hb, bytes) == 0;
  free(ha);
  free(hb);
  return same;
}

#ifdef GPU_TEST_MAX_ALLOCS
/* ---------------------------------------------------------------- allocation registry */
static void *g_allocs[GPU_TEST_MAX_ALLOCS];
static int g_nallocs;

/* cudaMalloc(bytes, at least 16), remembered for dev_free_all. */
static inline void *dev_alloc(size_t bytes) {
  void *d = NULL;
  MF_CHECK_CUDA(cudaMalloc(&d, bytes ? bytes : 16));
  MF_ASSERT(g_nallocs < GPU_TEST_MAX_ALLOCS, "too many test allocations");
  g_allocs[g_nallocs++] = d;
  return d;
}
/* Frees every dev_alloc buffer. */
static inline void dev_free_all(void) {
  for (int i = 0; i < g_nallocs; i++) MF_CHECK_CUDA(cudaFree(g_allocs[i]));
  g_nallocs = 0;
}
/* A new registered device copy of x (n) in bf16. */
static inline mf_bf16_t *to_bf16(const double *x, int64_t n) {
  mf_bf16_t *d = (mf_bf16_t *)dev_alloc((size_t)n * 2);
  up_bf16(d, x, n);
  return d;
}
/* A new registered device copy of x (n) in fp32. */
static inline float *to_f32(const double *x, int64_t n) {
  float *d = (float *)dev_alloc((size_t)n * 4);
  up_f32(d, x, n);
  return d;
}
#endif /* GPU_TEST_MAX_ALLOCS */

#ifdef GPU_TEST_MAX_OUTS
/* ---------------------------------------------------------------- raw results of one run */
/* The GPU results of one run, as raw bytes (for the bit-identity check). */
typedef struct {
  void *raw[GPU_TEST_MAX_OUTS];
  size_t bytes[GPU_TEST_MAX_OUTS];
  int n;
} raw_set;
/* Appends a host copy of the device bytes d (bytes of them); asserts past the capacity. */
static inline void raw_add(raw_set *s, const void *d, size_t bytes) {
  MF_ASSERT(s->n < GPU_TEST_MAX_OUTS, "raw_set full");
  s->raw[s->n] = fetch_raw(d, bytes);
  s->bytes[s->n++] = bytes;
}
/* 1 when a and b hold the same number of results, each of the same size and bytes; on a
 * difference, prints which result (in raw_add order) and its first differing byte. */
static inline int raw_same(const raw_set *a, const raw_set *b) {
  if (a->n != b->n) return 0;
  for (int i = 0; i < a->n; i++) {
    if (a->bytes[i] != b->bytes[i]) return 0;
    if (memcmp(a->raw[i], b->raw[i], a->bytes[i])) {
      size_t k = 0;
      while (((const unsigned char *)a->raw[i])[k] == ((const unsigned char *)b->raw[i])[k]) k++;
      fprintf(stderr, "raw_same: result %d (of %d) differs first at byte %zu of %zu\n", i, a->n, k,
              a->bytes[i]);
      return 0;
    }
  }
  return 1;
}
static inline void raw_free(raw_set *s) {
  for (int i = 0; i < s->n; i++) free(s->raw[i]);
  s->n = 0;
}
#endif /* GPU_TEST_MAX_OUTS */

#endif
