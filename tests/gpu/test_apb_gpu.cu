/* test_apb_gpu.cu — GPU test of the single attention with pair bias module
 * (src/ops/cuda/attn_pair_bias.cu) against the CPU reference built in double
 * (mf_apb_forward/backward of libmegafold_f64.a), on bf16-representable random inputs and
 * weights: out, ds, dz and every parameter gradient by relative error (‖gpu − ref‖/‖ref‖,
 * printed; tolerance 2e-2). Shapes: the AF3 trunk (Cs = 384, Cz = 128, H = 16, D = 24) at
 * N = 1, 7, 33, 37, 100, 130, 200 and a small one (Cs = 32, Cz = 16, H = 2, D = 16) at
 * N = 7, 33, 64, 100 — mostly N % 8 != 0, where the bias rows (H, N, NB) carry padding
 * columns (NB = N rounded up to 8), and N = 64, 200 without; token masks
 * with masked tokens and all masked; out with and without the residual (accumulate),
 * ds assigned and added (accumulate_ds); dz always ADDS (pre-filled with a random tensor);
 * parameter gradients start from random values and their increments are compared; one
 * case skips ds and the parameter gradients (NULL). Every output is poisoned (NaN) first;
 * every case runs twice and must be bit-identical. Then prints (does not check) forward
 * and backward times at N = 384, 766 and 768 with the AF3 shape (MF_APB_BENCH_N="766,768"
 * picks the sizes, MF_TEST_NO_TIMING=1 skips the timings), and the time of the unfused
 * alternative's first half (mf_ln_linear_forward_cuda with O = H over N² rows) and of the
 * attention alone, with the module's bias layout (rows of NB) and with a dense (H, N, N)
 * bias (rows of N: off the 16-byte grid when N % 8 != 0). The three pair-kernel variants
 * (mf_apb_cuda_set_variant) are checked (0 and 2 timed). MF_APB_TEST_SMALL=1 runs two small
 * shapes only (for compute-sanitizer). Needs a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "ops/attn_pair_bias.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/attn_pair_bias_cuda.h"
#include "ops/cuda/device.h"
#include "ops/cuda/gemm_cuda.h"
#include "ops/cuda/gpu.h"
#include "ops/cuda/ln_linear_cuda.h"

/* capacities of gpu_test_util.h's allocation registry and raw_set */
#define GPU_TEST_MAX_ALLOCS 96
#define GPU_TEST_MAX_OUTS 8
#include "gpu_test_util.h"

#define TOL 2e-2

static mf_cuda_blas g_blas;

/* relerr(got, ref) printed and checked against tol */
static void check_vec(const char *what, const double *got, const double *ref, int64_t n, double tol) {
  const double e = mf_test_relerr(got, ref, n);
  printf("  %-58s relerr %.3e\n", what, e);
  MF_TEST(e <= tol, "%s: relerr %.3e > %.1e", what, e, tol);
}
/* ‖got − ref‖ / max(‖ref‖, floor), printed and checked: floor > 0 for gradients that are
 * analytically ~0 (see the comment at their use), where a relative error measures noise. */
static double l2(const double *x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
  return sqrt(s);
}
static void check_vec_floor(const char *what, const double *got, const double *ref, int64_t n,
                            double floor, double tol) {
  const double nr = l2(ref, n);
  if (floor <= nr) {
    check_vec(what, got, ref, n, tol);
    return;
  }
  double d = 0.0;
  for (int64_t i = 0; i < n; i++) d += (got[i] - ref[i]) * (got[i] - ref[i]);
  double e = sqrt(d) / floor;
  if (!isfinite(e)) e = INFINITY;
  printf("  %-58s err/floor %.3e (|ref| %.1e < floor %.1e)\n", what, e, nr, floor);
  MF_TEST(e <= tol, "%s: error %.3e of the floor > %.1e", what, e, tol);
}
static void check_bf16(const char *what, const mf_bf16_t *d, const double *ref, int64_t n) {
  double *got = mf_test_alloc(n);
  from_bf16(got, d, n);
  check_vec(what, got, ref, n, TOL);
}

/* ================================================================ the module */

/* Flat parameter layout: the CPU bind order (src/model/pairformer.c bind_apb). */
typedef struct {
  int64_t ln_s_g, ln_s_b, w_q, b_q, w_k, w_v, w_g, ln_z_g, ln_z_b, w_z, w_o, total;
} apb_offsets;

static apb_offsets offsets_of(int Cs, int Cz, int H, int D) {
  const int64_t HD = (int64_t)H * D;
  apb_offsets o;
  o.ln_s_g = 0;
  o.ln_s_b = o.ln_s_g + Cs;
  o.w_q = o.ln_s_b + Cs;
  o.b_q = o.w_q + HD * Cs;
  o.w_k = o.b_q + HD;
  o.w_v = o.w_k + HD * Cs;
  o.w_g = o.w_v + HD * Cs;
  o.ln_z_g = o.w_g + HD * Cs;
  o.ln_z_b = o.ln_z_g + Cz;
  o.w_z = o.ln_z_b + Cz;
  o.w_o = o.w_z + (int64_t)H * Cz;
  o.total = o.w_o + (int64_t)Cs * HD;
  return o;
}

typedef enum { MASK_NONE = 0, MASK_SOME = 1, MASK_ALL = 2 } mask_kind;

static void test_apb(int N, int Cs, int Cz, int H, int D, mask_kind mk, int accumulate,
                     int accumulate_ds, int skip, uint64_t seed) {
  char what[200], w2[260];
#define WHAT(s) (snprintf(w2, sizeof w2, "%s: %s", what, s), w2)
  const int64_t HD = (int64_t)H * D, n = N, M = n * n;
  const apb_offsets o = offsets_of(Cs, Cz, H, D);
  const int64_t np = o.total;
  double *flat = mf_test_alloc(np), *gflat = mf_test_alloc(np), *g0 = mf_test_alloc(np);
  rand_bf16(flat + o.ln_s_g, Cs, seed + 1, 0.2, 1.0);
  rand_bf16(flat + o.ln_s_b, Cs, seed + 2, 0.2, 0.0);
  rand_bf16(flat + o.w_q, HD * Cs, seed + 3, 1.0 / sqrt((double)Cs), 0.0);
  rand_bf16(flat + o.b_q, HD, seed + 4, 0.2, 0.0);
  rand_bf16(flat + o.w_k, HD * Cs, seed + 5, 1.0 / sqrt((double)Cs), 0.0);
  rand_bf16(flat + o.w_v, HD * Cs, seed + 6, 1.0 / sqrt((double)Cs), 0.0);
  rand_bf16(flat + o.w_g, HD * Cs, seed + 7, 1.0 / sqrt((double)Cs), 0.0);
  rand_bf16(flat + o.ln_z_g, Cz, seed + 8, 0.2, 1.0);
  rand_bf16(flat + o.ln_z_b, Cz, seed + 9, 0.2, 0.0);
  rand_bf16(flat + o.w_z, (int64_t)H * Cz, seed + 10, 1.0 / sqrt((double)Cz), 0.0);
  rand_bf16(flat + o.w_o, Cs * HD, seed + 11, 1.0 / sqrt((double)HD), 0.0);
  rand_bf16(g0, np, seed + 12, 1.0, 0.0);
  memcpy(gflat, g0, (size_t)np * sizeof(double));
  mf_apb_weights w = {flat + o.ln_s_g, flat + o.ln_s_b, flat + o.w_q, flat + o.b_q, flat + o.w_k,
                      flat + o.w_v, flat + o.w_g, flat + o.ln_z_g, flat + o.ln_z_b, flat + o.w_z,
                      flat + o.w_o};
  mf_apb_weights gw = {gflat + o.ln_s_g, gflat + o.ln_s_b, gflat + o.w_q, gflat + o.b_q,
                       gflat + o.w_k, gflat + o.w_v, gflat + o.w_g, gflat + o.ln_z_g,
                       gflat + o.ln_z_b, gflat + o.w_z, gflat + o.w_o};

  double *s = mf_test_alloc(n * Cs), *z = mf_test_alloc(M * Cz), *dout = mf_test_alloc(n * Cs);
  double *res = mf_test_alloc(n * Cs), *ds0 = mf_test_alloc(n * Cs), *dz0 = mf_test_alloc(M * Cz);
  rand_bf16(s, n * Cs, seed + 13, 1.5, 0.3);
  rand_bf16(z, M * Cz, seed + 14, 1.5, 0.3);
  rand_bf16(dout, n * Cs, seed + 15, 1.0, 0.0);
  rand_bf16(res, n * Cs, seed + 16, 1.0, 0.0);
  rand_bf16(ds0, n * Cs, seed + 17, 1.0, 0.0);
  rand_bf16(dz0, M * Cz, seed + 18, 1.0, 0.0);
  uint8_t *mask = (uint8_t *)malloc((size_t)n);
  double *u = mf_test_alloc(n);
  mf_test_randu(u, n, seed + 19, 0, 1);
  for (int i = 0; i < N; i++) mask[i] = mk == MASK_NONE ? 1 : mk == MASK_ALL ? 0 : u[i] < 0.75;
  if (mk == MASK_SOME && N > 1) mask[N - 1] = 0; /* at least one masked token */

  /* reference (double) */
  double *saved = mf_test_alloc(mf_apb_saved_size(N, Cs, Cz, H, D));
  double *out = mf_test_alloc(n * Cs), *ds = mf_test_alloc(n * Cs), *dz = mf_test_alloc(M * Cz);
  const uint8_t *mref = mk == MASK_NONE ? NULL : mask;
  mf_apb_forward(out, saved, s, z, mref, &w, N, Cs, Cz, H, D);
  mf_apb_backward(skip ? NULL : ds, dz, skip ? NULL : &gw, dout, saved, s, z, mref, &w, N, Cs, Cz,
                  H, D);
  for (int64_t i = 0; i < n * Cs; i++) {
    if (accumulate) out[i] += res[i];
    if (accumulate_ds) ds[i] += ds0[i];
  }
  for (int64_t i = 0; i < M * Cz; i++) dz[i] += dz0[i];

  /* GPU */
  mf_bf16_t *flat_d = to_bf16(flat, np), *s_d = to_bf16(s, n * Cs), *z_d = to_bf16(z, M * Cz);
  mf_bf16_t *dout_d = to_bf16(dout, n * Cs);
  mf_apb_cuda_weights wd = {flat_d + o.ln_s_g, flat_d + o.ln_s_b, flat_d + o.w_q,
                            flat_d + o.b_q,    flat_d + o.w_k,    flat_d + o.w_v,
                            flat_d + o.w_g,    flat_d + o.ln_z_g, flat_d + o.ln_z_b,
                            flat_d + o.w_z,    flat_d + o.w_o};
  uint8_t *mask_d = NULL;
  if (mk != MASK_NONE) {
    mask_d = (uint8_t *)dev_alloc((size_t)n);
    MF_CHECK_CUDA(cudaMemcpy(mask_d, mask, (size_t)n, cudaMemcpyHostToDevice));
  }
  mf_bf16_t *out_d = (mf_bf16_t *)dev_alloc(n * Cs * 2), *ds_d = (mf_bf16_t *)dev_alloc(n * Cs * 2);
  mf_bf16_t *dz_d = (mf_bf16_t *)dev_alloc(M * Cz * 2);
  float *gd = (float *)dev_alloc((size_t)np * 4);
  mf_apb_cuda_grads gg = {gd + o.ln_s_g, gd + o.ln_s_b, gd + o.w_q,    gd + o.b_q,
                          gd + o.w_k,    gd + o.w_v,    gd + o.w_g,    gd + o.ln_z_g,
                          gd + o.ln_z_b, gd + o.w_z,    gd + o.w_o};
  const size_t sb = mf_apb_cuda_saved_bytes(N, Cs, Cz, H, D), wsb = mf_apb_cuda_workspace(N, Cs, Cz, H, D);
  void *saved_d = dev_alloc(sb), *ws = dev_alloc(wsb);
  double *gref = mf_test_alloc(np);
  memcpy(gref, gflat, (size_t)np * sizeof(double));
  const int default_variant = mf_apb_cuda_set_variant(0);
  raw_set first = {};
  for (int variant = 0; variant < 3; variant++) {
    mf_apb_cuda_set_variant(variant);
    memcpy(gflat, gref, (size_t)np * sizeof(double));
    snprintf(what, sizeof what,
             "apb N=%d Cs=%d Cz=%d H=%d D=%d mask=%s acc=%d acc_ds=%d%s variant=%d", N, Cs, Cz,
             H, D, mk == MASK_NONE ? "none" : mk == MASK_SOME ? "some" : "all", accumulate,
             accumulate_ds, skip ? " (ds, param grads skipped)" : "", variant);
    printf("%s\n", what);
    raw_set runs[2] = {};
    for (int run = 0; run < 2; run++) {
      up_f32(gd, g0, np);
      poison(saved_d, sb);
      poison(ws, wsb);
      up_or_poison_bf16(out_d, res, n * Cs, accumulate);
      up_or_poison_bf16(ds_d, ds0, n * Cs, accumulate_ds);
      up_bf16(dz_d, dz0, M * Cz);
      mf_apb_forward_cuda(out_d, saved_d, s_d, z_d, mask_d, &wd, N, Cs, Cz, H, D, accumulate, ws,
                          wsb, &g_blas, 0);
      mf_apb_backward_cuda(skip ? NULL : ds_d, dz_d, skip ? NULL : &gg, dout_d, saved_d, s_d, z_d,
                           mask_d, &wd, N, Cs, Cz, H, D, accumulate_ds, ws, wsb, &g_blas, 0);
      MF_CHECK_CUDA(cudaDeviceSynchronize());
      raw_add(&runs[run], out_d, n * Cs * 2);
      raw_add(&runs[run], ds_d, n * Cs * 2);
      raw_add(&runs[run], dz_d, M * Cz * 2);
      raw_add(&runs[run], gd, (size_t)np * 4);
      if (run == 1) continue;
      check_bf16(WHAT("out"), out_d, out, n * Cs);
      check_bf16(WHAT("dz (added)"), dz_d, dz, M * Cz);
      double *got = mf_test_alloc(np);
      from_f32(got, gd, np);
      if (skip) {
        MF_TEST(memcmp(got, g0, (size_t)np * sizeof(double)) == 0, "%s: NULL grads untouched",
                what);
        continue;
      }
      check_bf16(WHAT("ds"), ds_d, ds, n * Cs);
      for (int64_t i = 0; i < np; i++) {
        got[i] -= g0[i];
        gflat[i] -= g0[i];
      }
      static const char *names[11] = {"d ln_s_g", "d ln_s_b", "d w_q", "d b_q", "d w_k", "d w_v",
                                      "d w_g", "d ln_z_g", "d ln_z_b", "d w_z", "d w_o"};
      const int64_t offs[12] = {o.ln_s_g, o.ln_s_b, o.w_q, o.b_q, o.w_k, o.w_v,
                                o.w_g, o.ln_z_g, o.ln_z_b, o.w_z, o.w_o, o.total};
      /* Analytically ~0 gradients, measured against a non-degenerate sibling's scale:
       *   d ln_z_b = W_zᵀ·Σ_(i,j) dbias[:, i, j] and every softmax row sums its dlogits to 0;
       *   at N = 1 (one key) the softmax gradient vanishes: dq, dk, db_q, dbias are 0.
       * (The double reference gives ~1e-17; the GPU gives bf16 rounding noise.) */
      const double sc_v = l2(gflat + o.w_v, HD * Cs), sc_gz = l2(gflat + o.ln_z_g, Cz);
      for (int p = 0; p < 11; p++) {
        double floor = 0.0;
        if (N == 1 && (p == 2 || p == 3 || p == 4 || p == 7 || p == 8 || p == 9)) floor = sc_v;
        else if (p == 8) floor = sc_gz;
        check_vec_floor(WHAT(names[p]), got + offs[p], gflat + offs[p], offs[p + 1] - offs[p],
                        floor, TOL);
      }
    }
    MF_TEST(raw_same(&runs[0], &runs[1]), "%s: two runs bit-identical", what);
    if (variant == 0)
      first = runs[0];
    else
      printf("  variants 0 and %d give %s results\n", variant,
             raw_same(&first, &runs[0]) ? "bit-identical" : "different (rounding-level)");
    if (variant) raw_free(&runs[0]);
    raw_free(&runs[1]);
  }
  raw_free(&first);
  mf_apb_cuda_set_variant(default_variant);
  free(mask);
  dev_free_all();
  mf_test_free_all();
#undef WHAT
}

/* ================================================================ timing (printed only) */

static __global__ void fill_kernel(mf_bf16_t *x, int64_t n, uint32_t seed, float scale, float offset) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 16;
    h *= 2246822519u;
    h ^= h >> 13;
    h *= 3266489917u;
    h ^= h >> 16;
    x[i] = __float2bfloat16_rn(offset + scale * ((float)h * (1.0f / 4294967296.0f) - 0.5f) * 3.4641f);
  }
}
static mf_bf16_t *dev_rand(int64_t n, uint32_t seed, float scale, float offset) {
  mf_bf16_t *d = (mf_bf16_t *)dev_alloc((size_t)n * 2);
  fill_kernel<<<1024, 256>>>(d, n, seed, scale, offset);
  MF_CHECK_LAUNCH();
  return d;
}

static void bench(int N) {
  const int Cs = 384, Cz = 128, H = 16, D = 24;
  const int64_t HD = (int64_t)H * D, n = N, M = n * n;
  const apb_offsets o = offsets_of(Cs, Cz, H, D);
  mf_bf16_t *p = dev_rand(o.total, 1, 0.05f, 0.0f);
  mf_bf16_t *ones = dev_rand(2 * (Cs > Cz ? Cs : Cz), 2, 0.2f, 1.0f);
  mf_apb_cuda_weights wd = {ones, p + o.ln_s_b, p + o.w_q, p + o.b_q, p + o.w_k, p + o.w_v,
                            p + o.w_g, ones, p + o.ln_z_b, p + o.w_z, p + o.w_o};
  mf_bf16_t *s = dev_rand(n * Cs, 3, 1.0f, 0.0f), *z = dev_rand(M * Cz, 4, 1.0f, 0.0f);
  mf_bf16_t *dout = dev_rand(n * Cs, 5, 1.0f, 0.0f), *dz = dev_rand(M * Cz, 6, 1.0f, 0.0f);
  mf_bf16_t *out = (mf_bf16_t *)dev_alloc(n * Cs * 2), *ds = (mf_bf16_t *)dev_alloc(n * Cs * 2);
  float *gd = (float *)dev_alloc((size_t)o.total * 4);
  MF_CHECK_CUDA(cudaMemset(gd, 0, (size_t)o.total * 4));
  mf_apb_cuda_grads gg = {gd + o.ln_s_g, gd + o.ln_s_b, gd + o.w_q,    gd + o.b_q,
                          gd + o.w_k,    gd + o.w_v,    gd + o.w_g,    gd + o.ln_z_g,
                          gd + o.ln_z_b, gd + o.w_z,    gd + o.w_o};
  const size_t sb = mf_apb_cuda_saved_bytes(N, Cs, Cz, H, D), wsb = mf_apb_cuda_workspace(N, Cs, Cz, H, D);
  void *saved = dev_alloc(sb), *ws = dev_alloc(wsb);
  /* the unfused alternative's first half: LN_z + GEMM to H outputs (no transpose) */
  const size_t lwb = mf_ln_linear_cuda_workspace(M, Cz, H, 0);
  void *lws = dev_alloc(lwb);
  mf_bf16_t *lo = (mf_bf16_t *)dev_alloc((size_t)M * H * 2);
  float *lmean = (float *)dev_alloc((size_t)M * 4), *lrstd = (float *)dev_alloc((size_t)M * 4);
  /* the attention alone (B = R = 1, gate, bias), for the breakdown */
  const int64_t hnd = HD * n;
  mf_bf16_t *aq = dev_rand(hnd, 7, 1.0f, 0.0f), *ak = dev_rand(hnd, 8, 1.0f, 0.0f);
  mf_bf16_t *av = dev_rand(hnd, 9, 1.0f, 0.0f), *ag = dev_rand(hnd, 10, 1.0f, 0.0f);
  /* bias (H, N, NB) as the module lays it out (padding columns random: never read), and
   * the dense (H, N, N) alternative over the same buffer */
  const int64_t NB = (n + 7) / 8 * 8;
  mf_bf16_t *ab = dev_rand(H * n * NB, 11, 1.0f, 0.0f), *ado = dev_rand(hnd, 12, 1.0f, 0.0f);
  mf_bf16_t *ao = (mf_bf16_t *)dev_alloc((size_t)hnd * 2), *adq = (mf_bf16_t *)dev_alloc((size_t)hnd * 2);
  mf_bf16_t *adk = (mf_bf16_t *)dev_alloc((size_t)hnd * 2), *adv = (mf_bf16_t *)dev_alloc((size_t)hnd * 2);
  mf_bf16_t *adg = (mf_bf16_t *)dev_alloc((size_t)hnd * 2), *adb = (mf_bf16_t *)dev_alloc((size_t)H * n * NB * 2);
  float *alse = (float *)dev_alloc((size_t)H * n * 4);
  const mf_attn_dims ad = {1, 1, H, N, N, D, 1.0 / sqrt((double)D)};
  const size_t awb = mf_attention_backward_strided_cuda_workspace(ad, 1);
  void *aws = dev_alloc(awb);
  mf_attn_views avw[2] = {mf_attn_packed_views(ad), mf_attn_packed_views(ad)};
  avw[0].bias_row = NB; /* avw[1]: dense */
  cudaEvent_t e0, e1;
  MF_CHECK_CUDA(cudaEventCreate(&e0));
  MF_CHECK_CUDA(cudaEventCreate(&e1));
  float ms[9];
  const int default_variant = mf_apb_cuda_set_variant(0);
  for (int which = 0; which < 9; which++) {
    if (which == 5) mf_apb_cuda_set_variant(default_variant);
    for (int rep = 0; rep < 7; rep++) {
      if (rep == 2) MF_CHECK_CUDA(cudaEventRecord(e0, 0));
      if (which == 0 || which == 5)
        mf_apb_forward_cuda(out, saved, s, z, NULL, &wd, N, Cs, Cz, H, D, 0, ws, wsb, &g_blas, 0);
      else if (which == 1 || which == 6)
        mf_apb_backward_cuda(ds, dz, &gg, dout, saved, s, z, NULL, &wd, N, Cs, Cz, H, D, 0, ws, wsb,
                             &g_blas, 0);
      else if (which == 3 || which == 7)
        mf_attention_forward_strided_cuda(ao, alse, aq, ak, av, ab, NULL, ag, ad,
                                          &avw[which == 7], 0);
      else if (which == 4 || which == 8)
        mf_attention_backward_strided_cuda(adq, adk, adv, adb, adg, ado, ao, alse, aq, ak, av, ab,
                                           NULL, ag, ad, &avw[which == 8], aws, awb, 0);
      else
        mf_ln_linear_forward_cuda(lo, lmean, lrstd, z, wd.ln_z_g, wd.ln_z_b, wd.w_z, NULL, M, Cz, H,
                                  MF_LN_FULL, lws, lwb, &g_blas, 0);
    }
    MF_CHECK_CUDA(cudaEventRecord(e1, 0));
    MF_CHECK_CUDA(cudaEventSynchronize(e1));
    MF_CHECK_CUDA(cudaEventElapsedTime(&ms[which], e0, e1));
    ms[which] /= 5;
  }
  mf_apb_cuda_set_variant(default_variant);
  printf("bench apb N=%d Cs=%d Cz=%d H=%d D=%d: the default variant (2: the tensor-core pair backward): forward %.3f ms, "
         "backward %.3f ms; variant 0: forward %.3f ms, backward %.3f ms; the attention alone, "
         "bias rows of NB=%d (the module's): forward %.3f ms, backward %.3f ms; dense bias rows "
         "of N: forward %.3f ms, backward %.3f ms; the unfused LN_z+GEMM with O=H alone, no "
         "transpose: %.3f ms\n",
         N, Cs, Cz, H, D, ms[5], ms[6], ms[0], ms[1], (int)NB, ms[3], ms[4], ms[7], ms[8], ms[2]);
  (void)HD;
  MF_CHECK_CUDA(cudaEventDestroy(e0));
  MF_CHECK_CUDA(cudaEventDestroy(e1));
  dev_free_all();
}

int main(void) {
  if (!gpu_test_begin("test_apb_gpu")) return mf_test_end();
  mf_cuda_blas_create(&g_blas, 0);
  uint64_t sd = 500;
  if (getenv("MF_APB_TEST_SMALL")) { /* two small shapes (compute-sanitizer) */
    test_apb(33, 384, 128, 16, 24, MASK_SOME, 0, 1, 0, sd += 40);
    test_apb(9, 64, 128, 4, 16, MASK_SOME, 1, 0, 0, sd += 40);
    mf_cuda_blas_destroy(&g_blas);
    return mf_test_end();
  }
  /* AF3 trunk shape */
  test_apb(1, 384, 128, 16, 24, MASK_NONE, 0, 0, 0, sd += 40);
  test_apb(7, 384, 128, 16, 24, MASK_SOME, 1, 1, 0, sd += 40);
  test_apb(33, 384, 128, 16, 24, MASK_SOME, 0, 1, 0, sd += 40);
  test_apb(33, 384, 128, 16, 24, MASK_ALL, 1, 0, 0, sd += 40);
  test_apb(33, 384, 128, 16, 24, MASK_SOME, 0, 0, 1, sd += 40);
  test_apb(100, 384, 128, 16, 24, MASK_NONE, 1, 0, 0, sd += 40);
  test_apb(200, 384, 128, 16, 24, MASK_SOME, 1, 1, 0, sd += 40);
  /* small shape (lane-strided channels, 2 heads) */
  test_apb(7, 32, 16, 2, 16, MASK_ALL, 1, 1, 0, sd += 40);
  test_apb(33, 32, 16, 2, 16, MASK_SOME, 0, 0, 0, sd += 40);
  test_apb(100, 32, 16, 2, 16, MASK_NONE, 1, 1, 0, sd += 40);
  /* Cz between the register widths, H between the head groups */
  test_apb(65, 64, 96, 6, 8, MASK_SOME, 0, 1, 0, sd += 40);
  /* Cz not a multiple of 8 (plain tile copies instead of cp.async) */
  test_apb(9, 32, 20, 3, 8, MASK_SOME, 1, 0, 0, sd += 40);
  /* more N around the bias row padding (NB = N rounded up to 8): N % 8 = 5, 2 and 0 */
  test_apb(37, 384, 128, 16, 24, MASK_NONE, 0, 1, 0, sd += 40);
  test_apb(130, 384, 128, 16, 24, MASK_SOME, 1, 0, 0, sd += 40);
  test_apb(64, 32, 16, 2, 16, MASK_SOME, 1, 0, 0, sd += 40);
  /* Cz = 128 with H < 16 (the tensor-core backward's zero heads), N % 8 = 3 */
  test_apb(67, 64, 128, 4, 16, MASK_SOME, 1, 0, 0, sd += 40);

  if (getenv("MF_APB_BENCH_N")) { /* e.g. "766,768": the sizes to time */
    for (const char *c = getenv("MF_APB_BENCH_N"); *c;) {
      char *end;
      const long N = strtol(c, &end, 10);
      if (end == c) break;
      if (N > 0) bench((int)N);
      c = *end ? end + 1 : end;
    }
  } else if (!getenv("MF_TEST_NO_TIMING")) {
    bench(384);
    bench(766);
    bench(768);
  }
  mf_cuda_blas_destroy(&g_blas);
  return mf_test_end();
}
