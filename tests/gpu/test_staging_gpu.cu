/* test_staging_gpu.cu — GPU test of the example staging (src/ops/cuda/staging.cu) fed by
 * the loader (src/data/loader.c) with pinned ring slots: for 12 steps, each example copied
 * on the staging stream, the training stream waits on the ready event, a kernel reads the
 * device copy (sum of the token pad mask == the real token count) and a device-to-host copy
 * on the training stream returns bytes equal to the host slot and to a loader run with
 * plain (unpinned) memory; then the buffer-reuse guard: with one device buffer, a copy of
 * new data must wait until the training stream, held by a spinning kernel, has read the old
 * data; bad arguments are errors. Synthetic entries (every MF_FEATURES feature). Needs a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "data/crop.h"
#include "data/featurize.h"
#include "data/loader.h"
#include "ops/cuda/device.h"
#include "ops/cuda/gpu.h"
#include "ops/cuda/staging.h"

/* ------------------------------------------------------------------ synthetic records */

static uint32_t hash32(uint64_t a, uint64_t b) {
  uint32_t w[4];
  uint32_t ctr[4] = {(uint32_t)a, (uint32_t)(a >> 32), (uint32_t)b, (uint32_t)(b >> 32)};
  uint32_t key[2] = {0x9e37u, 0x79b9u};
  mf_philox4x32_10(ctr, key, w);
  return w[0];
}

#define N_ENT 6
static const char *g_names[N_ENT] = {"gpu0", "gpu1", "gpu2", "gpu3", "gpu4", "gpu5"};

static void synth(int e, mf_feature_set *fs) {
  mf_features_init(fs, g_names[e]);
  const int64_t N = 20 + hash32(e, 1) % 60, S = 1 + hash32(e, 2) % 20;
  int64_t Na = 0;
  int32_t *nat = (int32_t *)malloc((size_t)N * sizeof(int32_t));
  for (int64_t i = 0; i < N; i++) nat[i] = 1 + (int32_t)(hash32(e, 10 + i) % 3), Na += nat[i];
  int r = 0;
#define ROW(nm, a, b, c, d)                                                                  \
  {                                                                                          \
    char roles[MF_MAX_DIMS + 1];                                                             \
    mf_dtype dt;                                                                             \
    int nd;                                                                                  \
    int64_t dims[MF_MAX_DIMS], shape[MF_MAX_DIMS], numel = 1;                                \
    mf_crop_axes(#nm, roles, NULL, &dt, &nd, dims);                                          \
    for (int d_ = 0; d_ < nd; d_++) {                                                        \
      char ro = d_ < (int)strlen(roles) ? roles[d_] : '.';                                   \
      shape[d_] = ro == 'T' ? N : ro == 'A' ? Na : ro == 'S' ? S : dims[d_];                 \
      numel *= shape[d_];                                                                    \
    }                                                                                        \
    void *p = mf_features_add(fs, #nm, dt, nd, shape, NULL);                                 \
    MF_CHECK_PTR(p);                                                                         \
    for (int64_t i = 0; i < numel; i++) {                                                    \
      uint32_t h = hash32((uint64_t)e << 8 | (uint64_t)r, (uint64_t)i);                      \
      if (dt == MF_F32) ((float *)p)[i] = (float)(h % 1000) * 0.01f;                         \
      else if (dt == MF_I32) ((int32_t *)p)[i] = (int32_t)(h % 500);                         \
      else if (dt == MF_U8) ((uint8_t *)p)[i] = (uint8_t)(h % 32);                           \
    }                                                                                        \
    r++;                                                                                     \
  }
  MF_FEATURES(ROW)
#undef ROW
  int32_t *asym = (int32_t *)mf_features_get(fs, "asym_id")->data;
  int32_t *cen = (int32_t *)mf_features_get(fs, "token_centre_atom")->data;
  int32_t *rep = (int32_t *)mf_features_get(fs, "token_rep_atom")->data;
  int32_t *a2t = (int32_t *)mf_features_get(fs, "atom_to_token")->data;
  float *x = (float *)mf_features_get(fs, "coordinate")->data;
  int64_t a = 0;
  for (int64_t i = 0; i < N; i++) {
    asym[i] = (int32_t)(i * 2 / N);
    cen[i] = rep[i] = (int32_t)a;
    for (int j = 0; j < nat[i]; j++, a++) {
      a2t[a] = (int32_t)i;
      x[3 * a] = (float)(3.8 * i), x[3 * a + 1] = (float)(asym[i] * 10), x[3 * a + 2] = (float)j;
    }
  }
  free(nat);
}

typedef struct {
  uint8_t *rec[N_ENT];
  size_t len[N_ENT];
} mem_src;

static mf_status mem_get(void *ctx, int w, int64_t k, const uint8_t **rec, size_t *len) {
  (void)w;
  mem_src *m = (mem_src *)ctx;
  *rec = m->rec[k];
  *len = m->len[k];
  return MF_OK;
}
static const char *mem_name(void *ctx, int64_t k) {
  (void)ctx;
  return g_names[k];
}

static void loader_config(mf_loader_config *c, int workers, int pinned) {
  mf_loader_config_default(c);
  c->workers = workers;
  c->slots = 3;
  c->seed = 2026;
  c->crop.crop_size = 48;
  c->crop.max_msa_rows = 8;
  if (pinned) {
    c->host.alloc = mf_staging_host_alloc;
    c->host.free = mf_staging_host_free;
  }
}

/* ------------------------------------------------------------------ kernels */

__global__ void sum_f32(const float *x, int n, float *out) {
  float s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  s = mf_warp_sum(s);
  __shared__ float part[32];
  if ((threadIdx.x % MF_WARP_SIZE) == 0) part[threadIdx.x / MF_WARP_SIZE] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0;
    for (int w = 0; w < (int)(blockDim.x / MF_WARP_SIZE); w++) t += part[w];
    *out = t;
  }
}

__global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

/* ------------------------------------------------------------------ tests */

static void test_loader_to_gpu(const mf_loader_source *src) {
  const int steps = 12;
  mf_loader_config cp, cu;
  loader_config(&cp, 4, 1);
  loader_config(&cu, 1, 0);
  mf_loader *Lp = NULL, *Lu = NULL;
  MF_TEST(mf_loader_create(&cp, src, &Lp) == MF_OK, "loader with pinned slots: %s", mf_error_message());
  MF_TEST(mf_loader_create(&cu, src, &Lu) == MF_OK, "loader with plain slots");
  if (!Lp || !Lu) {
    mf_loader_destroy(Lp), mf_loader_destroy(Lu);
    return;
  }
  const mf_crop_layout *lay = mf_loader_layout(Lp);
  const mf_crop_slot_feature *tm = mf_crop_layout_find(lay, MF_CROP_F_TOKEN_PAD);
  mf_staging *s = NULL;
  MF_TEST(mf_staging_create(lay->total, 2, &s) == MF_OK, "staging of 2 x %zu bytes", lay->total);
  cudaStream_t train;
  MF_CHECK_CUDA(cudaStreamCreateWithFlags(&train, cudaStreamNonBlocking));
  uint8_t *back = (uint8_t *)mf_staging_host_alloc(NULL, lay->total);
  float *dsum, hsum = 0;
  MF_CHECK_CUDA(cudaMalloc(&dsum, sizeof(float)));
  int bytes_ok = 1, plain_ok = 1, sum_ok = 1, pinned = 1, order_ok = 1;
  for (int t = 0; t < steps; t++) {
    mf_loader_example ex, eu;
    if (mf_loader_next(Lp, &ex) != MF_OK || mf_loader_next(Lu, &eu) != MF_OK) {
      MF_TEST(0, "loader_next: %s", mf_error_message());
      break;
    }
    order_ok &= ex.step == (uint64_t)t;
    cudaPointerAttributes at;
    pinned &= cudaPointerGetAttributes(&at, ex.data) == cudaSuccess && at.type == cudaMemoryTypeHost;
    mf_staging_buffer b;
    if (mf_staging_copy(s, ex.data, lay->total, &b) != MF_OK ||
        mf_staging_wait(s, &b, (void *)train) != MF_OK) {
      MF_TEST(0, "staging: %s", mf_error_message());
      break;
    }
    sum_f32<<<1, 256, 0, train>>>((const float *)((const char *)b.dev + tm->offset),
                                  (int)tm->shape[0], dsum);
    MF_CHECK_LAUNCH();
    MF_CHECK_CUDA(cudaMemcpyAsync(back, b.dev, lay->total, cudaMemcpyDeviceToHost, train));
    MF_CHECK_CUDA(cudaMemcpyAsync(&hsum, dsum, sizeof(float), cudaMemcpyDeviceToHost, train));
    mf_staging_done(s, &b, (void *)train);
    mf_staging_host_sync(s, &b);
    MF_CHECK_CUDA(cudaStreamSynchronize(train));
    bytes_ok &= memcmp(back, ex.data, lay->total) == 0;
    plain_ok &= memcmp(ex.data, eu.data, lay->total) == 0;
    sum_ok &= hsum == (float)ex.n_tok;
    mf_loader_release(Lp, &ex);
    mf_loader_release(Lu, &eu);
  }
  MF_TEST(order_ok && pinned, "examples in step order, in pinned slots");
  MF_TEST(bytes_ok, "device copy == host slot, byte for byte (%d steps)", steps);
  MF_TEST(plain_ok, "pinned 4-worker loader == plain 1-worker loader");
  MF_TEST(sum_ok, "a kernel on the training stream reads the copied token mask");
  MF_CHECK_CUDA(cudaFree(dsum));
  mf_staging_host_free(NULL, back);
  MF_CHECK_CUDA(cudaStreamDestroy(train));
  mf_staging_destroy(s);
  mf_loader_destroy(Lp);
  mf_loader_destroy(Lu);
}

/* One buffer: the second copy must not overwrite it before the training stream read it. */
static void test_reuse_guard(void) {
  const size_t n = 1 << 20;
  uint8_t *h1 = (uint8_t *)mf_staging_host_alloc(NULL, n), *h2 = (uint8_t *)mf_staging_host_alloc(NULL, n);
  uint8_t *back = (uint8_t *)mf_staging_host_alloc(NULL, n);
  memset(h1, 0x11, n);
  memset(h2, 0x22, n);
  mf_staging *s = NULL;
  mf_staging_create(n, 1, &s);
  cudaStream_t train;
  MF_CHECK_CUDA(cudaStreamCreateWithFlags(&train, cudaStreamNonBlocking));
  mf_staging_buffer b1, b2;
  mf_staging_copy(s, h1, n, &b1);
  mf_staging_wait(s, &b1, (void *)train);
  spin<<<1, 1, 0, train>>>(200000000LL); /* ~0.1 s: the copy below would land meanwhile */
  MF_CHECK_LAUNCH();
  MF_CHECK_CUDA(cudaMemcpyAsync(back, b1.dev, n, cudaMemcpyDeviceToHost, train));
  mf_staging_done(s, &b1, (void *)train);
  mf_staging_copy(s, h2, n, &b2);
  mf_staging_wait(s, &b2, (void *)train);
  MF_CHECK_CUDA(cudaStreamSynchronize(train));
  MF_TEST(b2.index == b1.index && back[0] == 0x11 && back[n - 1] == 0x11,
          "a reused buffer is overwritten only after the training stream released it");
  MF_CHECK_CUDA(cudaMemcpy(back, b2.dev, n, cudaMemcpyDeviceToHost));
  MF_TEST(back[0] == 0x22 && back[n - 1] == 0x22, "the second copy arrived afterwards");
  mf_staging_buffer big;
  MF_TEST(mf_staging_copy(s, h1, n + 1, &big) == MF_ERR_CONFIG, "a copy larger than the buffer is an error");
  mf_staging *bad = NULL;
  MF_TEST(mf_staging_create(0, 2, &bad) == MF_ERR_CONFIG && !bad, "0-byte staging rejected");
  mf_error_clear();
  MF_CHECK_CUDA(cudaStreamDestroy(train));
  mf_staging_destroy(s);
  mf_staging_host_free(NULL, h1), mf_staging_host_free(NULL, h2), mf_staging_host_free(NULL, back);
}

int main(void) {
  mf_test_begin("test_staging_gpu");
  if (mf_cuda_init(0) != MF_OK) {
    MF_TEST(0, "no GPU: %s", mf_error_message());
    return mf_test_end();
  }
  mem_src m;
  for (int e = 0; e < N_ENT; e++) {
    mf_feature_set fs;
    synth(e, &fs);
    MF_ASSERT(mf_features_encode(&fs, 3, &m.rec[e], &m.len[e]) == MF_OK, "%s", mf_error_message());
    mf_features_free(&fs);
  }
  mf_loader_source src;
  memset(&src, 0, sizeof src);
  src.n = N_ENT, src.ctx = &m, src.get = mem_get, src.name = mem_name;
  test_loader_to_gpu(&src);
  test_reuse_guard();
  for (int e = 0; e < N_ENT; e++) mf_free(m.rec[e]);
  return mf_test_end();
}
