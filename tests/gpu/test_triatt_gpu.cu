/* test_triatt_gpu.cu — GPU test of the triangle attention module (src/ops/cuda/triatt.cu,
 * starting and ending node) against the CPU reference built in double (mf_triatt_forward /
 * mf_triatt_backward of libmegafold_f64.a) on bf16-representable random inputs and
 * weights, so the comparison measures only the GPU's arithmetic: out, dz and every
 * parameter gradient by relative error (tolerance TOL; the observed errors are printed).
 * Shapes: N ∈ {1, 7, 33, 64, 100, 200}, C ∈ {16, 128}, H = 4 with D = 32, and D = 16 and
 * D = 8 cases, plus H = 3, C = 20 (padded bias columns, scalar epilogues); pair masks m_i·m_j with at least one
 * fully masked token; with and without the fused residual + row/column dropout (p = 0.25;
 * the CPU side applies the same mask with mf_dropout_mask and
 * mf_dropout_residual_forward/backward). Every output and the saved buffer and workspace are
 * poisoned with NaN before the run; every case runs twice and must be bit-identical; after
 * the second run the backward is called once more: parameter gradients must show twice
 * the increment (ACCUMULATE), dz must be unchanged (ASSIGN) or, with a residual, show
 * twice the increment over the residual path's gradient (ACCUMULATE; one case passes dz
 * aliasing dout). Two cases force 256-row chunks (several chunks, a partial last one); the
 * others use the automatic chunking (the staging aliased into the whole-tensor buffers where
 * chunks of at least half the automatic size fit there, else in a region of its own, as at
 * N = 1); two cases at N = 100 per non-default order of the attention forward's CTAs
 * (mf_attention_cuda_set_fwd_order); two cases with the projection backward's dx̂ through
 * cuBLAS and the row kernel instead of gemm_ln_bwd_wg.cu (mf_gemm_ln_bwd_set_enabled(0)). Last, fwd and bwd milliseconds at N = 384 and
 * 768 (C = 128, H = 4, D = 32) are printed, not asserted, once per CTA order, with the
 * attention core alone on the same shapes for the breakdown (MF_TEST_NO_TIMING=1 skips the timings,
 * MF_TRIATT_BENCH_ONLY=1 runs only them; MF_TRIATT_BENCH_N=2048,3072 times those sizes
 * instead, in the default CTA order only). MF_TRIATT_TEST_SMALL=1 runs two small shapes
 * only (for compute-sanitizer). Needs a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "ops/cuda/device.h"
#include "ops/cuda/dropout_cuda.h"
#include "ops/cuda/gemm_cuda.h"
#include "ops/cuda/gemm_ln_bwd_cuda.h"
#include "ops/cuda/gpu.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/ln_gemm_cuda.h"
#include "ops/cuda/ln_linear_cuda.h"
#include "ops/cuda/ta_out_bwd_cuda.h"
#include "ops/cuda/triatt_cuda.h"
#include "ops/dropout.h"
#include "ops/triatt.h"

/* capacities of gpu_test_util.h's allocation registry and raw_set */
#define GPU_TEST_MAX_ALLOCS 64
#define GPU_TEST_MAX_OUTS 4
#include "gpu_test_util.h"

#define TOL 2e-2

static mf_cuda_blas g_blas;

/* Worst relative errors seen, per kind (printed at the end). */
static double g_worst[3]; /* out, dz, parameter gradients */

static double norm2(const double *x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
  return sqrt(s);
}

/* Counted check that relerr(got, ref) <= tol, recorded under kind. */
static void close_kind(int kind, const char *what, const double *got, const double *ref, int64_t n,
                       double tol) {
  const double e = mf_test_relerr(got, ref, n);
  if (!(e <= g_worst[kind])) g_worst[kind] = e;
  mf_test_close(what, got, ref, n, tol);
}

/* Counted check that got − base ≈ times·(ref − base) (accumulated increments). When
 * scale_norm > 0 and the reference increment is below 1e-3 of it (a degenerate block, e.g.
 * dW_q with a single key, where the double reference is 0 up to rounding and the GPU shows
 * bf16 noise), the error is measured against scale_norm instead. */
static void check_inc(const char *what, const double *got_in, const double *base,
                      const double *ref_after, int64_t n, double times, double tol,
                      double scale_norm) {
  double *got = mf_test_alloc(n), *ref = mf_test_alloc(n);
  for (int64_t i = 0; i < n; i++) {
    got[i] = got_in[i] - base[i];
    ref[i] = times * (ref_after[i] - base[i]);
  }
  const double rn = norm2(ref, n);
  if (scale_norm > 0 && rn < 1e-3 * scale_norm) {
    for (int64_t i = 0; i < n; i++) got[i] -= ref[i];
    const double e = norm2(got, n) / scale_norm;
    if (!(e <= g_worst[2])) g_worst[2] = e;
    MF_TEST(e <= tol, "%s: degenerate block (ref norm %.3g), error vs the whole gradient %.3g "
            "(tol %.1g)", what, rn, e, tol);
    return;
  }
  close_kind(2, what, got, ref, n, tol);
}

/* ---------------------------------------------------------------- one case */

/* mask: 0 = none, 1 = pair mask m_i·m_j with random padded tokens (token N/2 always padded);
 * resdrop: -1 = none, else the dropout axis of the fused residual; alias: dz = dout. */
static void test_triatt(int N, int C, int H, int D, int starting, int mask, int resdrop,
                        int alias, uint64_t seed) {
  char what[200], w2[260];
#define WHAT(s) (snprintf(w2, sizeof w2, "%s: %s", what, s), w2)
  const int64_t M = (int64_t)N * N, HD = (int64_t)H * D, K5 = 4 * HD + H;
  mf_triatt_weights w, gw;
  const int64_t np = mf_triatt_weights_bind(&w, NULL, C, H, D);
  double *flat = mf_test_alloc(np), *gflat = mf_test_alloc(np), *g0 = mf_test_alloc(np);
  mf_triatt_weights_bind(&w, flat, C, H, D);
  mf_triatt_weights_bind(&gw, gflat, C, H, D);
  rand_bf16(w.ln_g, C, seed + 1, 0.2, 1.0);
  rand_bf16(w.ln_b, C, seed + 2, 0.2, 0.0);
  rand_bf16(w.w_q, K5 * C, seed + 3, 1.0 / sqrt((double)C), 0.0); /* q k v b g: consecutive */
  rand_bf16(w.w_o, (int64_t)C * HD, seed + 4, 1.0 / sqrt((double)HD), 0.0);
  rand_bf16(g0, np, seed + 5, 1.0, 0.0);
  memcpy(gflat, g0, (size_t)np * sizeof(double));
  double *z = mf_test_alloc(M * C), *dout = mf_test_alloc(M * C);
  double *res0 = mf_test_alloc(M * C), *dres = mf_test_alloc(M * C);
  rand_bf16(z, M * C, seed + 6, 1.5, 0.3);
  rand_bf16(dout, M * C, seed + 7, 1.0, 0.0);
  rand_bf16(res0, M * C, seed + 8, 1.0, 0.0);
  rand_bf16(dres, M * C, seed + 9, 1.0, 0.0);
  if (alias) memcpy(dres, dout, (size_t)M * C * sizeof(double)); /* dz starts as dout */
  uint8_t *pm = (uint8_t *)malloc((size_t)M);
  MF_CHECK_PTR(pm);
  double *u = mf_test_alloc(N);
  mf_test_randu(u, N, seed + 10, 0, 1);
  int padded = 0;
  for (int i = 0; i < N; i++) {
    const int pad = mask && (u[i] >= 0.85 || i == N / 2);
    padded += pad;
    u[i] = pad ? 0.0 : 1.0;
  }
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) pm[(int64_t)i * N + j] = u[i] != 0.0 && u[j] != 0.0;
  const mf_dropout_axis axis = resdrop == MF_DROPOUT_COLWISE ? MF_DROPOUT_COLWISE
                                                              : MF_DROPOUT_ROWWISE;
  const mf_resdrop_cuda rd = {0.25, 77 + seed, mf_rng_stream(5, MF_RNG_DROPOUT, 2), axis, NULL};
  const mf_resdrop_cuda *rdp = resdrop >= 0 ? &rd : NULL;

  /* reference (double) */
  double *saved = mf_test_alloc((int64_t)mf_triatt_saved_size(N, C, H, D));
  double *out = mf_test_alloc(M * C), *dz = mf_test_alloc(M * C), *dd = mf_test_alloc(M * C);
  double *dmask = mf_test_alloc((int64_t)N * C);
  mf_triatt_forward(out, saved, z, mask ? pm : NULL, &w, N, C, H, D, starting);
  const double *dd_in = dout;
  if (rdp) {
    mf_dropout_mask(dmask, N, C, rd.p, rd.seed, rd.stream);
    double *o2 = mf_test_alloc(M * C);
    memcpy(o2, res0, (size_t)M * C * sizeof(double));
    mf_dropout_residual_forward(o2, out, dmask, N, N, C, axis); /* res0 += mask ⊙ Δz */
    memcpy(out, o2, (size_t)M * C * sizeof(double));
    mf_dropout_backward(dd, dout, dmask, N, N, C, axis);
    dd_in = dd;
  }
  mf_triatt_backward(dz, &gw, dd_in, saved, z, mask ? pm : NULL, &w, N, C, H, D, starting);
  double *dz2 = mf_test_alloc(M * C); /* dz after a second backward */
  for (int64_t i = 0; i < M * C; i++) {
    dz2[i] = rdp ? dres[i] + 2.0 * dz[i] : dz[i];
    if (rdp) dz[i] += dres[i];
  }

  /* GPU */
  mf_bf16_t *flat_d = to_bf16(flat, np), *z_d = to_bf16(z, M * C);
  mf_bf16_t *dout_d = (mf_bf16_t *)dev_alloc((size_t)M * C * 2);
  const int64_t o_qkvbg = 2 * C, o_o = o_qkvbg + K5 * C;
  mf_triatt_cuda_weights wd = {flat_d, flat_d + C, flat_d + o_qkvbg, flat_d + o_o};
  float *gd = (float *)dev_alloc((size_t)np * 4);
  mf_triatt_cuda_grads gg = {gd, gd + C, gd + o_qkvbg, gd + o_o};
  uint8_t *pm_d = NULL;
  if (mask) {
    pm_d = (uint8_t *)dev_alloc((size_t)M);
    MF_CHECK_CUDA(cudaMemcpy(pm_d, pm, (size_t)M, cudaMemcpyHostToDevice));
  }
  mf_bf16_t *out_d = (mf_bf16_t *)dev_alloc((size_t)M * C * 2);
  mf_bf16_t *dz_d = alias ? dout_d : (mf_bf16_t *)dev_alloc((size_t)M * C * 2);
  /* run 0 recomputes the projections in the backward, run 1 keeps them (keep = 1): both
   * buffers sized for the larger of the two */
  const size_t sb = mf_triatt_cuda_saved_bytes(N, C, H, D, 1);
  const size_t wsb0 = mf_triatt_cuda_workspace(N, C, H, D, 0), wsb1 = mf_triatt_cuda_workspace(N, C, H, D, 1);
  const size_t wsb = wsb0 > wsb1 ? wsb0 : wsb1;
  MF_TEST(mf_triatt_cuda_saved_bytes(N, C, H, D, 1) > mf_triatt_cuda_saved_bytes(N, C, H, D, 0),
          "triatt N=%d: keeping the projections adds saved bytes", N);
  void *saved_d = dev_alloc(sb), *ws = dev_alloc(wsb);
  snprintf(what, sizeof what, "triatt %s N=%d C=%d H=%d D=%d%s%s%s",
           starting ? "starting" : "ending", N, C, H, D,
           mask ? (padded ? " mask(padded tokens)" : " mask") : "",
           rdp ? (axis == MF_DROPOUT_ROWWISE ? " +residual+rowdrop" : " +residual+coldrop") : "",
           alias ? " dz=dout" : "");
  raw_set runs[2] = {};
  const int64_t proj_calls0 = mf_out_proj_wg_calls(), tb_calls0 = mf_ta_out_bwd_wg_calls();
  double *h = mf_test_alloc(np > M * C ? np : M * C);
  for (int run = 0; run < 2; run++) {
    up_f32(gd, g0, np);
    up_bf16(dout_d, dout, M * C);
    poison(saved_d, sb);
    poison(ws, wsb);
    if (rdp) {
      up_bf16(out_d, res0, M * C);
      if (!alias) up_bf16(dz_d, dres, M * C);
    } else {
      poison(out_d, (size_t)M * C * 2);
      poison(dz_d, (size_t)M * C * 2);
    }
    const int keep = run; /* run 1 must match run 0 bit for bit */
    mf_triatt_forward_cuda(out_d, saved_d, z_d, pm_d, &wd, N, C, H, D, starting, keep, rdp, ws,
                           wsb, &g_blas, 0);
    mf_triatt_backward_cuda(dz_d, &gg, dout_d, saved_d, z_d, pm_d, &wd, N, C, H, D, starting,
                            keep, rdp, ws, wsb, &g_blas, 0);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    raw_add(&runs[run], out_d, (size_t)M * C * 2);
    raw_add(&runs[run], dz_d, (size_t)M * C * 2);
    raw_add(&runs[run], gd, (size_t)np * 4);
    if (run == 0) {
      from_bf16(h, out_d, M * C);
      close_kind(0, WHAT("out"), h, out, M * C, TOL);
      from_bf16(h, dz_d, M * C);
      close_kind(1, WHAT("dz"), h, dz, M * C, TOL);
      from_f32(h, gd, np);
      const int64_t off[5] = {0, C, o_qkvbg, o_o, np};
      const char *name[4] = {"d ln_g", "d ln_b", "d w_qkvbg", "d w_o"};
      for (int f = 0; f < 4; f++)
        check_inc(WHAT(name[f]), h + off[f], g0 + off[f], gflat + off[f], off[f + 1] - off[f],
                  1.0, TOL, 0.0);
      /* the five blocks of w_qkvbg separately: q, k, v, b, g */
      const int64_t qo[6] = {0, HD * C, 2 * HD * C, 3 * HD * C, (3 * HD + H) * C, K5 * C};
      const char *qn[5] = {"d w_q", "d w_k", "d w_v", "d w_b", "d w_g"};
      double *inc = mf_test_alloc(K5 * C);
      for (int64_t i = 0; i < K5 * C; i++) inc[i] = gflat[o_qkvbg + i] - g0[o_qkvbg + i];
      const double whole = norm2(inc, K5 * C);
      for (int f = 0; f < 5; f++)
        check_inc(WHAT(qn[f]), h + o_qkvbg + qo[f], g0 + o_qkvbg + qo[f], gflat + o_qkvbg + qo[f],
                  qo[f + 1] - qo[f], 1.0, TOL, whole);
    } else {
      /* a second backward: parameter gradients accumulate again; dz assigns (or adds
       * once more with a residual) */
      if (alias) up_bf16(dout_d, dout, M * C); /* dout was overwritten by dz */
      mf_triatt_backward_cuda(dz_d, &gg, dout_d, saved_d, z_d, pm_d, &wd, N, C, H, D, starting,
                              keep, rdp, ws, wsb, &g_blas, 0); /* the kept P is read only */
      MF_CHECK_CUDA(cudaDeviceSynchronize());
      from_f32(h, gd, np);
      check_inc(WHAT("params after 2 backwards (x2)"), h, g0, gflat, np, 2.0, TOL, 0.0);
      if (!alias) {
        from_bf16(h, dz_d, M * C);
        close_kind(1, WHAT(rdp ? "dz after 2 backwards (residual + 2x)" : "dz after 2 backwards (same)"),
                   h, dz2, M * C, TOL);
      }
    }
  }
  MF_TEST(raw_same(&runs[0], &runs[1]),
          "%s: two runs bit-identical (the second keeping the projections)", what);
  if (rdp) { /* the residual read where it lies (rd.res, a buffer of its own): out2 = res +
              * mask ⊙ Δz with no copy first, bit-identical to run 0's out */
    mf_resdrop_cuda rr = rd;
    rr.res = to_bf16(res0, M * C);
    mf_bf16_t *out2_d = (mf_bf16_t *)dev_alloc((size_t)M * C * 2);
    poison(out2_d, (size_t)M * C * 2);
    poison(saved_d, sb);
    mf_triatt_forward_cuda(out2_d, saved_d, z_d, pm_d, &wd, N, C, H, D, starting, 0, &rr, ws, wsb,
                           &g_blas, 0);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    void *o2 = fetch_raw(out2_d, (size_t)M * C * 2);
    MF_TEST(memcmp(o2, runs[0].raw[0], (size_t)M * C * 2) == 0,
            "%s: the forward with rd.res (out = res + …) bit-identical to the in-place one", what);
    free(o2);
  }
  if (C == 128 && HD == 128) /* the output projection took the fused wgmma kernel */
    MF_TEST(mf_out_proj_wg_calls() == proj_calls0 + 2 + (rdp ? 1 : 0),
            "%s: out_proj_wg ran %lld times, not %d", what,
            (long long)(mf_out_proj_wg_calls() - proj_calls0), 2 + (rdp ? 1 : 0));
  /* the backward's output side in one kernel (ta_out_bwd_wg.cu) where it takes the shape
   * and is switched on: three backwards */
  const int64_t tb = mf_ta_out_bwd_wg_calls() - tb_calls0;
  const int64_t tb_want = C == 128 && H == 4 && D == 32 && mf_ta_out_bwd_wg_set(-1) ? 3 : 0;
  MF_TEST(tb == tb_want, "%s: ta_out_bwd_wg ran %lld times, not %lld", what, (long long)tb,
          (long long)tb_want);
  raw_free(&runs[0]);
  raw_free(&runs[1]);
  free(pm);
  dev_free_all();
  mf_test_free_all();
#undef WHAT
}

/* ---------------------------------------------------------------- timing */

static __global__ void fill_kernel(mf_bf16_t *x, int64_t n, uint32_t seed, float scale,
                                   float offset) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t s = (uint32_t)i * 2654435761u ^ seed;
    s ^= s >> 15;
    s *= 2246822519u;
    s ^= s >> 13;
    s *= 3266489917u;
    s ^= s >> 16;
    const float r = ((float)(s & 0xffffff) / 16777216.0f - 0.5f) * 3.4641016f; /* var 1 */
    x[i] = __float2bfloat16_rn(r * scale + offset);
  }
}
static void fill(mf_bf16_t *x, int64_t n, uint32_t seed, float scale, float offset) {
  fill_kernel<<<1024, 256>>>(x, n, seed, scale, offset);
  MF_CHECK_LAUNCH();
}

static void bench(int N, int starting) {
  const int C = 128, H = 4, D = 32;
  const int64_t M = (int64_t)N * N, HD = (int64_t)H * D, K5 = 4 * HD + H;
  const int64_t np = 2 * C + K5 * C + C * HD;
  mf_bf16_t *wflat = (mf_bf16_t *)dev_alloc((size_t)np * 2);
  fill(wflat, 2 * C, 1, 0.2f, 1.0f);
  fill(wflat + 2 * C, np - 2 * C, 2, 0.09f, 0.0f);
  mf_triatt_cuda_weights wd = {wflat, wflat + C, wflat + 2 * C, wflat + 2 * C + K5 * C};
  float *gd = (float *)dev_alloc((size_t)np * 4);
  MF_CHECK_CUDA(cudaMemset(gd, 0, (size_t)np * 4));
  mf_triatt_cuda_grads gg = {gd, gd + C, gd + 2 * C, gd + 2 * C + K5 * C};
  mf_bf16_t *z = (mf_bf16_t *)dev_alloc((size_t)M * C * 2);
  mf_bf16_t *out = (mf_bf16_t *)dev_alloc((size_t)M * C * 2);
  mf_bf16_t *dout = (mf_bf16_t *)dev_alloc((size_t)M * C * 2);
  mf_bf16_t *dz = (mf_bf16_t *)dev_alloc((size_t)M * C * 2);
  fill(z, M * C, 3, 1.0f, 0.0f);
  fill(dout, M * C, 4, 1.0f, 0.0f);
  MF_CHECK_CUDA(cudaMemcpy(dz, dout, (size_t)M * C * 2, cudaMemcpyDeviceToDevice));
  uint8_t *pm = (uint8_t *)dev_alloc((size_t)M);
  MF_CHECK_CUDA(cudaMemset(pm, 1, (size_t)M));
  const mf_resdrop_cuda rd = {0.25, 5, 6, starting ? MF_DROPOUT_ROWWISE : MF_DROPOUT_COLWISE, NULL};
  cudaEvent_t e0, e1, e2;
  MF_CHECK_CUDA(cudaEventCreate(&e0));
  MF_CHECK_CUDA(cudaEventCreate(&e1));
  MF_CHECK_CUDA(cudaEventCreate(&e2));
  /* once per order of the attention forward's CTAs (only the default one with
   * MF_TRIATT_BENCH_N, for large N) */
  const int def_order = mf_attention_cuda_set_fwd_order(0);
  mf_attention_cuda_set_fwd_order(def_order);
  const int only_default = getenv("MF_TRIATT_BENCH_N") != NULL;
  for (int pi = 0; pi < 3; pi++) {
    if (only_default && pi != def_order) continue;
    const int prev_order = mf_attention_cuda_set_fwd_order(pi);
    /* the default order also with the projections kept for the backward */
    for (int keep = 0; keep <= (pi == def_order); keep++) {
      const size_t sb = mf_triatt_cuda_saved_bytes(N, C, H, D, keep);
      const size_t wsb = mf_triatt_cuda_workspace(N, C, H, D, keep);
      void *saved = NULL, *ws = NULL;
      MF_CHECK_CUDA(cudaMalloc(&saved, sb));
      MF_CHECK_CUDA(cudaMalloc(&ws, wsb));
      float fwd = 0, bwd = 0;
      for (int it = 0; it < 7; it++) {
        MF_CHECK_CUDA(cudaEventRecord(e0, 0));
        mf_triatt_forward_cuda(out, saved, z, pm, &wd, N, C, H, D, starting, keep, &rd, ws, wsb,
                               &g_blas, 0);
        MF_CHECK_CUDA(cudaEventRecord(e1, 0));
        mf_triatt_backward_cuda(dz, &gg, dout, saved, z, pm, &wd, N, C, H, D, starting, keep, &rd, ws,
                                wsb, &g_blas, 0);
        MF_CHECK_CUDA(cudaEventRecord(e2, 0));
        MF_CHECK_CUDA(cudaEventSynchronize(e2));
        float a, b;
        MF_CHECK_CUDA(cudaEventElapsedTime(&a, e0, e1));
        MF_CHECK_CUDA(cudaEventElapsedTime(&b, e1, e2));
        if (it >= 2) { /* 2 warm-ups, 5 timed */
          fwd += a / 5;
          bwd += b / 5;
        }
      }
      printf("triatt timing %s N=%d C=%d H=%d D=%d (pair mask, residual+dropout), fwd CTA order %d, "
             "keep %d: fwd %.3f ms, bwd %.3f ms, fwd+bwd %.3f ms; saved %.1f MiB, workspace %.1f MiB\n",
             starting ? "starting" : "ending", N, C, H, D, pi, keep, fwd, bwd, fwd + bwd,
             sb / 1048576.0, wsb / 1048576.0);
      MF_CHECK_CUDA(cudaFree(saved));
      MF_CHECK_CUDA(cudaFree(ws));
    }
    mf_attention_cuda_set_fwd_order(prev_order);
  }
  /* the attention core alone on tensors of the same shapes, for the breakdown */
  {
    const size_t an = (size_t)M * HD * 2, bn = (size_t)M * H * 2;
    mf_bf16_t *t[11];
    for (int i = 0; i < 11; i++) t[i] = (mf_bf16_t *)dev_alloc(i == 4 || i == 10 ? bn : an);
    for (int i = 0; i < 6; i++) fill(t[i], (int64_t)((i == 4 ? bn : an) / 2), 10 + i, 1.0f, 0.0f);
    /* 0 q, 1 k, 2 v, 3 g, 4 bias, 5 dout, 6 out, 7 dq, 8 dk, 9 dv, 10 dbias; dg below */
    mf_bf16_t *dg = (mf_bf16_t *)dev_alloc(an);
    float *lse = (float *)dev_alloc((size_t)M * H * 4);
    mf_attn_dims d = {1, N, H, N, N, D, 1.0 / sqrt((double)D)};
    const size_t awb = mf_attention_backward_cuda_workspace(d, 1);
    void *aw = dev_alloc(awb);
    float af = 0, ab = 0;
    for (int it = 0; it < 7; it++) {
      MF_CHECK_CUDA(cudaEventRecord(e0, 0));
      mf_attention_forward_cuda(t[6], lse, t[0], t[1], t[2], t[4], pm, t[3], d, 0);
      MF_CHECK_CUDA(cudaEventRecord(e1, 0));
      mf_attention_backward_cuda(t[7], t[8], t[9], t[10], dg, t[5], t[6], lse, t[0], t[1], t[2],
                                 t[4], pm, t[3], d, aw, awb, 0);
      MF_CHECK_CUDA(cudaEventRecord(e2, 0));
      MF_CHECK_CUDA(cudaEventSynchronize(e2));
      float a, b;
      MF_CHECK_CUDA(cudaEventElapsedTime(&a, e0, e1));
      MF_CHECK_CUDA(cudaEventElapsedTime(&b, e1, e2));
      if (it >= 2) {
        af += a / 5;
        ab += b / 5;
      }
    }
    printf("triatt timing N=%d: of which the attention core alone (mf_attention_*_cuda, same "
           "shapes): fwd %.3f ms, bwd %.3f ms\n", N, af, ab);
  }
  MF_CHECK_CUDA(cudaEventDestroy(e0));
  MF_CHECK_CUDA(cudaEventDestroy(e1));
  MF_CHECK_CUDA(cudaEventDestroy(e2));
  dev_free_all();
}

int main(void) {
  if (!gpu_test_begin("test_triatt_gpu")) return mf_test_end();
  mf_cuda_blas_create(&g_blas, 0);
  uint64_t s = 1000;
  const int RW = MF_DROPOUT_ROWWISE, CW = MF_DROPOUT_COLWISE;
  if (getenv("MF_TRIATT_TEST_SMALL")) { /* a few small shapes (compute-sanitizer) */
    test_triatt(33, 128, 4, 32, 1, 1, RW, 0, s += 20);
    test_triatt(7, 128, 4, 32, 0, 0, -1, 0, s += 20);
    mf_cuda_blas_destroy(&g_blas);
    return mf_test_end();
  }
  if (!getenv("MF_TRIATT_BENCH_ONLY")) {
    for (int st = 1; st >= 0; st--) {
      /* N, C, H, D, starting, mask, resdrop, alias */
      test_triatt(1, 16, 4, 32, st, 0, -1, 0, s += 20);
      test_triatt(1, 16, 4, 32, st, 1, RW, 0, s += 20); /* the only token padded */
      test_triatt(7, 16, 4, 32, st, 1, -1, 0, s += 20);
      test_triatt(7, 128, 4, 32, st, 0, CW, 0, s += 20);
      test_triatt(33, 128, 4, 32, st, 1, st ? RW : CW, 0, s += 20);
      test_triatt(33, 16, 4, 16, st, 1, -1, 0, s += 20);
      test_triatt(33, 20, 3, 8, st, 1, CW, 0, s += 20); /* H % 4 != 0, C % 8 != 0 */
      test_triatt(64, 128, 4, 32, st, 1, -1, 0, s += 20);
      test_triatt(64, 16, 4, 32, st, 0, RW, 1, s += 20); /* dz = dout */
      test_triatt(100, 128, 4, 32, st, 1, st ? CW : RW, 0, s += 20);
      test_triatt(1, 128, 4, 32, st, 1, RW, 0, s += 20);   /* one pair row */
      test_triatt(65, 128, 4, 32, st, 0, RW, 1, s += 20);  /* dz = dout at C = 128 */
    }
    /* forced 256-row chunks: several chunks with a partial last one */
    const int64_t prev = mf_fusion_set_chunk_rows(256);
    test_triatt(33, 128, 4, 32, 1, 1, RW, 0, s += 20);
    test_triatt(33, 128, 4, 32, 0, 1, CW, 0, s += 20);
    mf_fusion_set_chunk_rows(prev);
    test_triatt(200, 128, 4, 32, 1, 1, RW, 0, s += 20);
    test_triatt(200, 128, 4, 32, 0, 1, CW, 0, s += 20);
    /* the other orders of the attention forward's CTAs (N = 100: in the default order 2,
     * a partial group of rows) */
    const int def_order = mf_attention_cuda_set_fwd_order(0);
    mf_attention_cuda_set_fwd_order(def_order);
    for (int order = 0; order <= 2; order++) {
      if (order == def_order) continue;
      mf_attention_cuda_set_fwd_order(order);
      test_triatt(100, 128, 4, 32, 1, 1, RW, 0, s += 20);
      test_triatt(100, 128, 4, 32, 0, 1, CW, 0, s += 20);
    }
    mf_attention_cuda_set_fwd_order(def_order);
    /* the projection backward's dx̂ through cuBLAS and the row kernel (without
     * gemm_ln_bwd_wg.cu), as before that kernel */
    const int gl_on = mf_gemm_ln_bwd_set_enabled(0);
    test_triatt(33, 128, 4, 32, 1, 1, RW, 0, s += 20);
    test_triatt(100, 128, 4, 32, 0, 1, CW, 0, s += 20);
    mf_gemm_ln_bwd_set_enabled(gl_on);
    /* the output side's backward as before ta_out_bwd_wg.cu (dropout pass, two cuBLAS
     * GEMMs per chunk, the attention's own prologue) */
    const int tb_on = mf_ta_out_bwd_wg_set(0);
    test_triatt(33, 128, 4, 32, 1, 1, RW, 0, s += 20);
    test_triatt(100, 128, 4, 32, 0, 1, CW, 0, s += 20);
    test_triatt(64, 128, 4, 32, 1, 0, -1, 0, s += 20);
    mf_ta_out_bwd_wg_set(tb_on);

    printf("triatt worst relative errors: out %.3g, dz %.3g, parameter gradients %.3g (tol %.1g)\n",
           g_worst[0], g_worst[1], g_worst[2], TOL);
  }
  /* MF_ATT_VARIANT: the attention variant the timings run (mf_attention_cuda_set_variant) */
  if (getenv("MF_ATT_VARIANT") && getenv("MF_TRIATT_BENCH_ONLY"))
    mf_attention_cuda_set_variant(atoi(getenv("MF_ATT_VARIANT")));
  /* MF_ATT_DBIAS_WG=0|1: the dbias pass's kernel the timings run (mf_attention_cuda_set_dbias_wg) */
  if (getenv("MF_ATT_DBIAS_WG") && getenv("MF_TRIATT_BENCH_ONLY"))
    mf_attention_cuda_set_dbias_wg(atoi(getenv("MF_ATT_DBIAS_WG")));
  /* MF_ATT_TMA=mask: the TMA kernels the timings run (mf_attention_cuda_set_tma) */
  if (getenv("MF_ATT_TMA") && getenv("MF_TRIATT_BENCH_ONLY"))
    mf_attention_cuda_set_tma(atoi(getenv("MF_ATT_TMA")));
  if (getenv("MF_TRIATT_BENCH_N")) { /* e.g. "2048,3072": the sizes to time */
    for (const char *c = getenv("MF_TRIATT_BENCH_N"); *c;) {
      char *end;
      const long n = strtol(c, &end, 10);
      if (end == c) break;
      if (n > 0)
        for (int st = 1; st >= 0; st--) bench((int)n, st);
      c = *end == ',' ? end + 1 : end;
    }
  } else if (!getenv("MF_TEST_NO_TIMING"))
    for (int st = 1; st >= 0; st--) {
      bench(384, st);
      bench(768, st);
    }
  mf_cuda_blas_destroy(&g_blas);
  return mf_test_end();
}
