/* test_fusion_gpu.cu — GPU test of EvoFusion (src/ops/cuda/{ln_linear,transition,trimul,
 * dropout}.cu) against the CPU references built in double (libmegafold_f64.a): LayerNorm +
 * Linear, the gated projection, the SwiGLU transition, the triangle multiplicative update
 * (outgoing and incoming, pair masks, fused residual + row/column dropout) and residual +
 * dropout, forward and every gradient, by relative error on bf16-representable random
 * inputs (tolerance 1e-2 for every output and gradient; the errors seen on an H200 were
 * at most 7.6e-3). LayerNorm + Linear, the gated projection and the transition run in
 * every forward variant (staging + cuBLAS, the fused custom kernels; variant 3: the wgmma
 * kernels of ln_gemm_wg.cu and transition_wg.cu). Sizes are not
 * tile multiples (M = 1, 7, 129, 300, 4099, 17000 (more 128-row tiles than 132 CTAs); N = 7, 9, 33, 65; widths 20, 36, 40 that are
 * not multiples of 8); the larger cases also run with 256- or 1024-row chunks so the
 * multi-chunk paths (partial last chunk, accumulated weight gradients) are exercised. The
 * triangle update also runs at N² % 8 != 0 (N = 6, 9, 33, 37, 50, 63, 130) with small
 * forced chunks in both transposing-kernel variants (the vectorised one on a padded
 * channel stride, with a tail tile of the last chunk).
 * Every output is poisoned with NaN before the run; parameter gradients start from
 * random values (they accumulate) and the increments are compared; every case runs
 * twice and must be bit-identical. The backwards of LayerNorm + Linear, the gated
 * projection and the transition also run on the shapes the fused backward kernel takes
 * (src/ops/cuda/ln_gemm_bwd.cu: C 64/128, widths % 64 == 0; M not a multiple of its
 * 128-row tile, M = 1, masks, FULL/SCALE/NONE, several chunks, the adding transition
 * backward in place) with that kernel (its three configurations and, for the transition,
 * the three light ones; and the wgmma kernels, configuration 7; all opt-in) and with
 * staging + cuBLAS, and the transition backward with gradients skipped
 * (NULL) must reproduce the full call's bits for the gradients it computes. The LayerNorm
 * row kernels (mf_ln_rows_cuda and its backward) are also tested alone, and they and the
 * residual + dropout kernels must match their generic variants (set_variant(0)) bit for
 * bit. The GEMM + LayerNorm backward kernel (gemm_ln_bwd_wg.cu, which the trimul's phase 3
 * runs at C = 128) is tested alone against the double reference beside the cuBLAS + row
 * kernel path it replaced, and two trimul cases run with it switched off. The trimul's
 * third phase as one kernel (trimul_ph3_wg.cu, the default at C = Ch = 128) is checked to
 * have run, and three cases run with it switched off (the two-kernel path). The row-major
 * GEMM helpers (gemm.cu, cuBLAS) run at inner dimensions k % 8 != 0 where cuBLAS 13.1
 * alone dropped the k tail (k = 4225, 4226, 9409, 9410: the weight gradients' pair rows at
 * N = 65, 97), single and batched, fp32 and bf16 output. Needs a GPU; not a benchmark. */
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
#include "ops/cuda/ln_gemm_bwd_cuda.h"
#include "ops/cuda/ln_gemm_cuda.h"
#include "ops/cuda/ln_linear_cuda.h"
#include "ops/cuda/transition_bwd_cl_cuda.h"
#include "ops/cuda/transition_cuda.h"
#include "ops/cuda/trimul_cuda.h"
#include "ops/cuda/trimul_ph1_cuda.h"
#include "ops/cuda/trimul_ph3_cuda.h"
#include "ops/dropout.h"
#include "ops/layernorm.h"
#include "ops/linear.h"
#include "ops/ln_linear.h"
#include "ops/transition.h"
#include "ops/trimul.h"

/* capacities of gpu_test_util.h's allocation registry and raw_set */
#define GPU_TEST_MAX_ALLOCS 256
#define GPU_TEST_MAX_OUTS 12
#include "gpu_test_util.h"

#define TOL 1e-2
#define TOL_TRIMUL_BWD 1.5e-2 /* the trimul parameter gradients go through five bf16-rounded intermediates; 1.08e-2 seen (H200, 2026-11-30) for d ln_in_g at C = 16 */

static mf_cuda_blas g_blas;

/* got −= base elementwise (the accumulated increment of a parameter gradient). */
static void minus(double *got, const double *base, int64_t n) {
  for (int64_t i = 0; i < n; i++) got[i] -= base[i];
}
static void check_grad_inc(const char *what, const float *d, const double *init, const double *ref_after,
                           int64_t n, double tol) {
  double *got = mf_test_alloc(n), *ref = mf_test_alloc(n);
  from_f32(got, d, n);
  minus(got, init, n);
  memcpy(ref, ref_after, (size_t)n * sizeof(double));
  minus(ref, init, n);
  mf_test_close(what, got, ref, n, tol);
}
static void check_bf16(const char *what, const mf_bf16_t *d, const double *ref, int64_t n, double tol) {
  double *got = mf_test_alloc(n);
  from_bf16(got, d, n);
  mf_test_close(what, got, ref, n, tol);
}
static void check_f32(const char *what, const float *d, const double *ref, int64_t n, double tol) {
  double *got = mf_test_alloc(n);
  from_f32(got, d, n);
  mf_test_close(what, got, ref, n, tol);
}

/* A forward's bf16 output (n values) and its LayerNorm statistics (M rows) against the
 * CPU reference, reported as "<what>: out" / ": mean" / ": rstd". */
static void check_out_stats(const char *what, const mf_bf16_t *out_d, const double *out,
                            int64_t n, const float *mean_d, const double *mean,
                            const float *rstd_d, const double *rstd, int64_t M) {
  char w2[200];
  snprintf(w2, sizeof w2, "%s: %s", what, "out");
  check_bf16(w2, out_d, out, n, TOL);
  snprintf(w2, sizeof w2, "%s: %s", what, "mean");
  check_f32(w2, mean_d, mean, M, 1e-3);
  snprintf(w2, sizeof w2, "%s: %s", what, "rstd");
  check_f32(w2, rstd_d, rstd, M, 1e-3);
}

/* The end of a case run twice: the two runs' raw results bit-identical, then freed. */
static void end_runs(raw_set *runs, const char *what) {
  MF_TEST(raw_same(&runs[0], &runs[1]), "%s: two runs bit-identical", what);
  raw_free(&runs[0]);
  raw_free(&runs[1]);
}

static const char *mode_name(mf_ln_mode m) {
  return m == MF_LN_FULL ? "full" : m == MF_LN_SCALE ? "scale" : m == MF_LN_NONE ? "none" : "identity";
}

static void *ws_alloc(size_t bytes) {
  void *w = dev_alloc(bytes);
  poison(w, bytes);
  return w;
}

/* ================================================================ GEMM helpers */

/* C (m, n) = alpha·op(A)·op(B) + beta·C by mf_gemm_rm_cuda (batch == 0) or
 * mf_gemm_rm_batched_cuda (batch matrices at fixed strides) against a double reference. The
 * inner dimensions k % 8 != 0 are those where cuBLAS 13.1 alone dropped the last k % 8
 * terms (gemm.cu's header): a relative error ≈ sqrt((k mod 8) / k), 1–2 %, well above
 * the bf16-output tolerance and 100× the fp32 one. */
static void test_gemm_rm(int64_t m, int64_t n, int64_t k, int ta, int tb, int out_bf16,
                         int batch, uint64_t seed) {
  const int nb = batch ? batch : 1;
  const int64_t na = m * k, nbm = k * n, nc = m * n;
  double *a = mf_test_alloc(na * nb), *b = mf_test_alloc(nbm * nb), *c = mf_test_alloc(nc * nb);
  rand_bf16(a, na * nb, seed + 1, 1.0, 0.0);
  rand_bf16(b, nbm * nb, seed + 2, 1.0, 0.0);
  rand_bf16(c, nc * nb, seed + 3, 1.0, 0.0); /* bf16-representable: exact in either output */
  const double alpha = 0.5, beta = 1.0;
  double *ref = mf_test_alloc(nc * nb);
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  for (int q = 0; q < nb; q++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double acc = 0;
        for (int64_t t = 0; t < k; t++)
          acc += a[q * na + (ta ? t * lda + i : i * lda + t)] * b[q * nbm + (tb ? j * ldb + t : t * ldb + j)];
        ref[q * nc + i * n + j] = alpha * acc + beta * c[q * nc + i * n + j];
      }
  mf_bf16_t *a_d = to_bf16(a, na * nb), *b_d = to_bf16(b, nbm * nb);
  void *c_d = out_bf16 ? (void *)to_bf16(c, nc * nb) : (void *)to_f32(c, nc * nb);
  const mf_gemm_out ct = out_bf16 ? MF_GEMM_OUT_BF16 : MF_GEMM_OUT_F32;
  if (batch)
    mf_gemm_rm_batched_cuda(&g_blas, 0, ta, tb, m, n, k, (float)alpha, a_d, lda, na, b_d, ldb,
                            nbm, (float)beta, c_d, ct, n, nc, batch);
  else
    mf_gemm_rm_cuda(&g_blas, 0, ta, tb, m, n, k, (float)alpha, a_d, lda, b_d, ldb, (float)beta,
                    c_d, ct, n);
  MF_CHECK_CUDA(cudaDeviceSynchronize());
  char what[160];
  snprintf(what, sizeof what, "gemm_rm%s m=%lld n=%lld k=%lld op=%c%c %s", batch ? " batched" : "",
           (long long)m, (long long)n, (long long)k, ta ? 'T' : 'N', tb ? 'T' : 'N',
           out_bf16 ? "bf16" : "fp32");
  if (out_bf16) check_bf16(what, (const mf_bf16_t *)c_d, ref, nc * nb, TOL);
  else check_f32(what, (const float *)c_d, ref, nc * nb, 1e-4);
  dev_free_all();
}

static void test_gemm_helpers(uint64_t *s) {
  const int64_t ks[] = {4225, 4226, 9409, 9410, 1089, 4224, 7, 1};
  for (int i = 0; i < 8; i++) {
    test_gemm_rm(128, 128, ks[i], 1, 0, 0, 0, *s += 20); /* the weight-gradient layout */
    test_gemm_rm(576, 128, ks[i], 1, 0, 1, 0, *s += 20);
  }
  test_gemm_rm(128, 128, 4226, 0, 0, 0, 0, *s += 20);
  test_gemm_rm(100, 72, 4225, 0, 1, 1, 0, *s += 20);
  test_gemm_rm(128, 64, 4225, 1, 0, 0, 2, *s += 20); /* batched: the tail per matrix */
  test_gemm_rm(65, 65, 65, 0, 1, 1, 3, *s += 20);    /* the trimul contraction's shape at N = 65 */
}

/* ================================================================ LayerNorm + Linear */

/* Which backward gradients test_ln_linear asks for: 0 all; 1 only dweight and dbeta (dinp,
 * dgamma, dbias NULL); 2 only dinp, dgamma and dbias (dweight, dbeta NULL). */
static int g_lnl_null = 0;
/* 1: test_ln_linear's second run caps the wgmma forward at two warpgroups per CTA
 * (mf_ln_gemm_wg_set_nwg), so "two runs bit-identical" compares three with two */
static int g_lnl_nwg_ab = 0;

static void test_ln_linear(int64_t M, int C, int O, mf_ln_mode mode, int has_bias, int64_t chunk,
                           uint64_t seed, int variant) {
  char what[160];
  mf_fusion_set_chunk_rows(chunk);
  mf_ln_linear_cuda_set_variant(variant);
  double *x = mf_test_alloc(M * C), *g = mf_test_alloc(C), *b = mf_test_alloc(C);
  double *W = mf_test_alloc((int64_t)O * C), *bias = mf_test_alloc(O), *dout = mf_test_alloc(M * O);
  rand_bf16(x, M * C, seed + 1, 1.5, 0.3);
  rand_bf16(g, C, seed + 2, 0.2, 1.0);
  rand_bf16(b, C, seed + 3, 0.2, 0.0);
  rand_bf16(W, (int64_t)O * C, seed + 4, 1.0 / sqrt((double)C), 0.0);
  rand_bf16(bias, O, seed + 5, 0.1, 0.0);
  rand_bf16(dout, M * O, seed + 6, 1.0, 0.0);
  /* initial parameter gradients (they accumulate) */
  double *g0 = mf_test_alloc(C), *b0 = mf_test_alloc(C), *W0 = mf_test_alloc((int64_t)O * C);
  double *bias0 = mf_test_alloc(O);
  rand_bf16(g0, C, seed + 7, 1.0, 0.0);
  rand_bf16(b0, C, seed + 8, 1.0, 0.0);
  rand_bf16(W0, (int64_t)O * C, seed + 9, 1.0, 0.0);
  rand_bf16(bias0, O, seed + 10, 1.0, 0.0);

  /* reference */
  double *out = mf_test_alloc(M * O), *mean = mf_test_alloc(M), *rstd = mf_test_alloc(M);
  double *dx = mf_test_alloc(M * C), *dg = mf_test_alloc(C), *db = mf_test_alloc(C);
  double *dW = mf_test_alloc((int64_t)O * C), *dbias = mf_test_alloc(O);
  memcpy(dg, g0, C * sizeof(double));
  memcpy(db, b0, C * sizeof(double));
  memcpy(dW, W0, (size_t)O * C * sizeof(double));
  memcpy(dbias, bias0, O * sizeof(double));
  mf_ln_linear_forward(out, mean, rstd, x, g, b, W, has_bias ? bias : NULL, M, C, O, mode);
  mf_ln_linear_backward(dx, dg, db, dW, has_bias ? dbias : NULL, dout, mean, rstd, x, g, b, W, M,
                        C, O, mode);

  mf_bf16_t *x_d = to_bf16(x, M * C), *g_d = to_bf16(g, C), *b_d = to_bf16(b, C);
  mf_bf16_t *W_d = to_bf16(W, (int64_t)O * C), *bias_d = to_bf16(bias, O), *dout_d = to_bf16(dout, M * O);
  mf_bf16_t *out_d = (mf_bf16_t *)dev_alloc(M * O * 2), *dx_d = (mf_bf16_t *)dev_alloc(M * C * 2);
  float *mean_d = (float *)dev_alloc(M * 4), *rstd_d = (float *)dev_alloc(M * 4);
  size_t wsb = mf_ln_linear_cuda_workspace(M, C, O, has_bias);
  void *ws = ws_alloc(wsb);
  raw_set runs[2] = {};
  for (int run = 0; run < 2; run++) {
    float *dg_d = to_f32(g0, C), *db_d = to_f32(b0, C), *dW_d = to_f32(W0, (int64_t)O * C);
    float *dbias_d = to_f32(bias0, O);
    poison(out_d, M * O * 2);
    poison(dx_d, M * C * 2);
    poison(mean_d, M * 4);
    poison(rstd_d, M * 4);
    if (g_lnl_nwg_ab) mf_ln_gemm_wg_set_nwg(run == 0 ? 3 : 2);
    mf_ln_linear_forward_cuda(out_d, mean_d, rstd_d, x_d, g_d, b_d, W_d, has_bias ? bias_d : NULL,
                              M, C, O, mode, ws, wsb, &g_blas, 0);
    if (g_lnl_nwg_ab) mf_ln_gemm_wg_set_nwg(3);
    const int n1 = g_lnl_null == 1, n2 = g_lnl_null == 2;
    mf_ln_linear_backward_cuda(n1 ? NULL : dx_d, n1 ? NULL : dg_d, n2 ? NULL : db_d,
                               n2 ? NULL : dW_d, (has_bias && !n1) ? dbias_d : NULL, dout_d, mean_d,
                               rstd_d, x_d, g_d, b_d, W_d, M, C, O, mode, ws, wsb, &g_blas, 0);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    raw_add(&runs[run], out_d, M * O * 2);
    raw_add(&runs[run], dx_d, M * C * 2);
    raw_add(&runs[run], dW_d, (size_t)O * C * 4);
    raw_add(&runs[run], dg_d, C * 4);
    raw_add(&runs[run], db_d, C * 4);
    raw_add(&runs[run], dbias_d, O * 4);
    if (run == 1) continue;
    snprintf(what, sizeof what, "ln_linear M=%lld C=%d O=%d %s%s chunk=%lld variant=%d%s", (long long)M,
             C, O, mode_name(mode), has_bias ? " bias" : "", (long long)chunk, variant,
             n1 ? " (only dW, dbeta)" : n2 ? " (only dinp, dgamma, dbias)" : "");
    char w2[200];
#define WHAT(s) (snprintf(w2, sizeof w2, "%s: %s", what, s), w2)
    check_out_stats(what, out_d, out, M * O, mean_d, mean, rstd_d, rstd, M);
    /* a gradient not asked for must stay as it was (its reference: the initial value) */
    if (!n1) check_bf16(WHAT("dinp"), dx_d, dx, M * C, TOL);
    check_grad_inc(WHAT("dweight"), dW_d, W0, n2 ? W0 : dW, (int64_t)O * C, TOL);
    if (mode != MF_LN_NONE) check_grad_inc(WHAT("dgamma"), dg_d, g0, n1 ? g0 : dg, C, TOL);
    if (mode == MF_LN_FULL) check_grad_inc(WHAT("dbeta"), db_d, b0, n2 ? b0 : db, C, TOL);
    if (has_bias) check_grad_inc(WHAT("dbias"), dbias_d, bias0, n1 ? bias0 : dbias, O, TOL);
  }
  end_runs(runs, what);
  dev_free_all();
  mf_test_free_all();
  mf_fusion_set_chunk_rows(0);
}

/* ================================================================ gated projection */

static void test_gated(int64_t M, int C, int O, mf_ln_mode mode, int use_mask, int64_t chunk,
                       uint64_t seed, int variant) {
  char what[160], w2[200];
  mf_fusion_set_chunk_rows(chunk);
  mf_ln_linear_cuda_set_variant(variant);
  const int ident = mode == MF_LN_IDENTITY;
  double *x = mf_test_alloc(M * C), *g = mf_test_alloc(C), *b = mf_test_alloc(C);
  double *Wpg = mf_test_alloc(2 * (int64_t)O * C), *dout = mf_test_alloc(M * O);
  rand_bf16(x, M * C, seed + 1, 1.5, 0.3);
  rand_bf16(g, C, seed + 2, 0.2, 1.0);
  rand_bf16(b, C, seed + 3, 0.2, 0.0);
  rand_bf16(Wpg, 2 * (int64_t)O * C, seed + 4, 1.0 / sqrt((double)C), 0.0);
  rand_bf16(dout, M * O, seed + 5, 1.0, 0.0);
  uint8_t *mask = (uint8_t *)malloc((size_t)M);
  double *u = mf_test_alloc(M);
  mf_test_randu(u, M, seed + 6, 0, 1);
  for (int64_t i = 0; i < M; i++) mask[i] = use_mask ? u[i] < 0.8 : 1;
  double *g0 = mf_test_alloc(C), *b0 = mf_test_alloc(C), *W0 = mf_test_alloc(2 * (int64_t)O * C);
  rand_bf16(g0, C, seed + 7, 1.0, 0.0);
  rand_bf16(b0, C, seed + 8, 1.0, 0.0);
  rand_bf16(W0, 2 * (int64_t)O * C, seed + 9, 1.0, 0.0);

  /* reference: p = LN(x)·W_pᵀ, q = LN(x)·W_gᵀ, out = mask·σ(q)·p, composed from the CPU ops */
  const double *Wp = Wpg, *Wg = Wpg + (int64_t)O * C;
  double *p = mf_test_alloc(M * O), *q = mf_test_alloc(M * O), *out = mf_test_alloc(M * O);
  double *mean = mf_test_alloc(M), *rstd = mf_test_alloc(M);
  if (ident) {
    mf_linear_forward(p, x, Wp, NULL, M, C, O);
    mf_linear_forward(q, x, Wg, NULL, M, C, O);
  } else {
    mf_ln_linear_forward(p, mean, rstd, x, g, b, Wp, NULL, M, C, O, mode);
    mf_ln_linear_forward(q, mean, rstd, x, g, b, Wg, NULL, M, C, O, mode);
  }
  double *dp = mf_test_alloc(M * O), *dq = mf_test_alloc(M * O);
  for (int64_t m = 0; m < M; m++)
    for (int o = 0; o < O; o++) {
      const int64_t i = m * O + o;
      const double s = 1.0 / (1.0 + exp(-q[i])), mk = mask[m] ? 1.0 : 0.0;
      out[i] = mk * s * p[i];
      dp[i] = dout[i] * mk * s;
      dq[i] = dout[i] * mk * p[i] * s * (1 - s);
    }
  double *dx = mf_test_alloc(M * C), *dx2 = mf_test_alloc(M * C), *dg = mf_test_alloc(C);
  double *db = mf_test_alloc(C), *dW = mf_test_alloc(2 * (int64_t)O * C);
  memcpy(dg, g0, C * sizeof(double));
  memcpy(db, b0, C * sizeof(double));
  memcpy(dW, W0, (size_t)2 * O * C * sizeof(double));
  if (ident) {
    mf_linear_backward(dx, dW, NULL, dp, x, Wp, M, C, O);
    mf_linear_backward(dx2, dW + (int64_t)O * C, NULL, dq, x, Wg, M, C, O);
  } else {
    mf_ln_linear_backward(dx, dg, db, dW, NULL, dp, mean, rstd, x, g, b, Wp, M, C, O, mode);
    mf_ln_linear_backward(dx2, dg, db, dW + (int64_t)O * C, NULL, dq, mean, rstd, x, g, b, Wg, M,
                          C, O, mode);
  }
  for (int64_t i = 0; i < M * C; i++) dx[i] += dx2[i];

  mf_bf16_t *x_d = to_bf16(x, M * C), *g_d = to_bf16(g, C), *b_d = to_bf16(b, C);
  mf_bf16_t *W_d = to_bf16(Wpg, 2 * (int64_t)O * C), *dout_d = to_bf16(dout, M * O);
  uint8_t *mask_d = NULL;
  if (use_mask) {
    mask_d = (uint8_t *)dev_alloc((size_t)M);
    MF_CHECK_CUDA(cudaMemcpy(mask_d, mask, (size_t)M, cudaMemcpyHostToDevice));
  }
  mf_bf16_t *out_d = (mf_bf16_t *)dev_alloc(M * O * 2), *dx_d = (mf_bf16_t *)dev_alloc(M * C * 2);
  float *mean_d = (float *)dev_alloc(M * 4), *rstd_d = (float *)dev_alloc(M * 4);
  size_t wsb = mf_gated_linear_cuda_workspace(M, C, O);
  void *ws = ws_alloc(wsb);
  raw_set runs[2] = {};
  snprintf(what, sizeof what, "gated_linear M=%lld C=%d O=%d %s%s chunk=%lld variant=%d",
           (long long)M, C, O, mode_name(mode), use_mask ? " mask" : "", (long long)chunk, variant);
  for (int run = 0; run < 2; run++) {
    float *dg_d = to_f32(g0, C), *db_d = to_f32(b0, C), *dW_d = to_f32(W0, 2 * (int64_t)O * C);
    poison(out_d, M * O * 2);
    poison(dx_d, M * C * 2);
    poison(mean_d, M * 4);
    poison(rstd_d, M * 4);
    if (g_lnl_nwg_ab) mf_ln_gemm_wg_set_nwg(run == 0 ? 3 : 2);
    mf_gated_linear_forward_cuda(out_d, mean_d, rstd_d, x_d, g_d, b_d, W_d, mask_d, M, C, O, mode,
                                 ws, wsb, &g_blas, 0);
    if (g_lnl_nwg_ab) mf_ln_gemm_wg_set_nwg(3);
    mf_gated_linear_backward_cuda(dx_d, dg_d, db_d, dW_d, dout_d, mean_d, rstd_d, x_d, g_d, b_d,
                                  W_d, mask_d, M, C, O, mode, ws, wsb, &g_blas, 0);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    raw_add(&runs[run], out_d, M * O * 2);
    raw_add(&runs[run], dx_d, M * C * 2);
    raw_add(&runs[run], dW_d, (size_t)2 * O * C * 4);
    raw_add(&runs[run], dg_d, C * 4);
    raw_add(&runs[run], db_d, C * 4);
    if (run == 1) continue;
    check_bf16(WHAT("out"), out_d, out, M * O, TOL);
    check_bf16(WHAT("dinp"), dx_d, dx, M * C, TOL);
    check_grad_inc(WHAT("dw_pg"), dW_d, W0, dW, 2 * (int64_t)O * C, TOL);
    if (!ident && mode != MF_LN_NONE) check_grad_inc(WHAT("dgamma"), dg_d, g0, dg, C, TOL);
    if (mode == MF_LN_FULL) check_grad_inc(WHAT("dbeta"), db_d, b0, db, C, TOL);
  }
  end_runs(runs, what);
  free(mask);
  dev_free_all();
  mf_test_free_all();
  mf_fusion_set_chunk_rows(0);
}

/* ================================================================ transition */

/* The mean of test_transition's inputs (their standard deviation is 1.5): 0.3, or large
 * where a case checks a kernel that folds the LayerNorm into its products. */
static double g_tr_xmean = 0.3;

static void test_transition(int64_t M, int C, int Hd, mf_ln_mode mode, int accumulate,
                            int64_t chunk, uint64_t seed, int variant) {
  char what[160], w2[200];
  mf_fusion_set_chunk_rows(chunk);
  mf_ln_linear_cuda_set_variant(variant);
  const int ident = mode == MF_LN_IDENTITY;
  double *x = mf_test_alloc(M * C), *g = mf_test_alloc(C), *b = mf_test_alloc(C);
  double *Wab = mf_test_alloc(2 * (int64_t)Hd * C), *Wo = mf_test_alloc((int64_t)C * Hd);
  double *dout = mf_test_alloc(M * C), *res = mf_test_alloc(M * C);
  rand_bf16(x, M * C, seed + 1, 1.5, g_tr_xmean);
  rand_bf16(g, C, seed + 2, 0.2, 1.0);
  rand_bf16(b, C, seed + 3, 0.2, 0.0);
  rand_bf16(Wab, 2 * (int64_t)Hd * C, seed + 4, 1.0 / sqrt((double)C), 0.0);
  rand_bf16(Wo, (int64_t)C * Hd, seed + 5, 1.0 / sqrt((double)Hd), 0.0);
  rand_bf16(dout, M * C, seed + 6, 1.0, 0.0);
  rand_bf16(res, M * C, seed + 7, 0.3, 0.0);
  double *g0 = mf_test_alloc(C), *b0 = mf_test_alloc(C), *Wab0 = mf_test_alloc(2 * (int64_t)Hd * C);
  double *Wo0 = mf_test_alloc((int64_t)C * Hd);
  rand_bf16(g0, C, seed + 8, 1.0, 0.0);
  rand_bf16(b0, C, seed + 9, 1.0, 0.0);
  rand_bf16(Wab0, 2 * (int64_t)Hd * C, seed + 10, 1.0, 0.0);
  rand_bf16(Wo0, (int64_t)C * Hd, seed + 11, 1.0, 0.0);

  double *out = mf_test_alloc(M * C), *mean = mf_test_alloc(M), *rstd = mf_test_alloc(M);
  double *dx = mf_test_alloc(M * C), *dg = mf_test_alloc(C), *db = mf_test_alloc(C);
  double *dWab = mf_test_alloc(2 * (int64_t)Hd * C), *dWo = mf_test_alloc((int64_t)C * Hd);
  memcpy(dg, g0, C * sizeof(double));
  memcpy(db, b0, C * sizeof(double));
  memcpy(dWab, Wab0, (size_t)2 * Hd * C * sizeof(double));
  memcpy(dWo, Wo0, (size_t)C * Hd * sizeof(double));
  mf_transition_forward(out, mean, rstd, x, g, b, Wab, Wab + (int64_t)Hd * C, Wo, M, C, Hd, mode);
  mf_transition_backward(dx, dg, db, dWab, dWab + (int64_t)Hd * C, dWo, dout, mean, rstd, x, g, b,
                         Wab, Wab + (int64_t)Hd * C, Wo, M, C, Hd, mode);
  if (accumulate)
    for (int64_t i = 0; i < M * C; i++) out[i] += res[i];
  /* with a residual (and a LayerNorm) the backward runs in place, adding: dout += ∂/∂inp */
  const int add_back = accumulate && !ident;
  if (add_back)
    for (int64_t i = 0; i < M * C; i++) dx[i] += dout[i];

  mf_bf16_t *x_d = to_bf16(x, M * C), *g_d = to_bf16(g, C), *b_d = to_bf16(b, C);
  mf_bf16_t *Wab_d = to_bf16(Wab, 2 * (int64_t)Hd * C), *Wo_d = to_bf16(Wo, (int64_t)C * Hd);
  mf_bf16_t *dout_d = to_bf16(dout, M * C);
  mf_bf16_t *out_d = (mf_bf16_t *)dev_alloc(M * C * 2), *dx_d = (mf_bf16_t *)dev_alloc(M * C * 2);
  float *mean_d = (float *)dev_alloc(M * 4), *rstd_d = (float *)dev_alloc(M * 4);
  size_t wsb = mf_transition_cuda_workspace(M, C, Hd);
  void *ws = ws_alloc(wsb);
  raw_set runs[2] = {};
  snprintf(what, sizeof what, "transition M=%lld C=%d Hd=%d %s%s chunk=%lld variant=%d x mean %g",
           (long long)M, C, Hd, mode_name(mode),
           add_back ? " +residual, in-place adding backward" : accumulate ? " +residual" : "",
           (long long)chunk, variant, g_tr_xmean);
  for (int run = 0; run < 2; run++) {
    float *dg_d = to_f32(g0, C), *db_d = to_f32(b0, C);
    float *dWab_d = to_f32(Wab0, 2 * (int64_t)Hd * C), *dWo_d = to_f32(Wo0, (int64_t)C * Hd);
    up_or_poison_bf16(out_d, res, M * C, accumulate);
    up_or_poison_bf16(dx_d, dout, M * C, add_back);
    poison(mean_d, M * 4);
    poison(rstd_d, M * 4);
    mf_transition_forward_cuda(out_d, ident ? NULL : mean_d, ident ? NULL : rstd_d, x_d, g_d, b_d,
                               Wab_d, Wo_d, M, C, Hd, mode, accumulate, ws, wsb, &g_blas, 0);
    if (add_back) /* in place: dinp = dout = dx_d */
      mf_transition_backward_add_cuda(dx_d, dg_d, db_d, dWab_d, dWo_d, dx_d, mean_d, rstd_d, x_d,
                                      g_d, b_d, Wab_d, Wo_d, M, C, Hd, mode, ws, wsb, &g_blas, 0);
    else
      mf_transition_backward_cuda(dx_d, dg_d, db_d, dWab_d, dWo_d, dout_d, mean_d, rstd_d, x_d,
                                  g_d, b_d, Wab_d, Wo_d, M, C, Hd, mode, ws, wsb, &g_blas, 0);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    raw_add(&runs[run], out_d, M * C * 2);
    raw_add(&runs[run], dx_d, M * C * 2);
    raw_add(&runs[run], dWab_d, (size_t)2 * Hd * C * 4);
    raw_add(&runs[run], dWo_d, (size_t)C * Hd * 4);
    raw_add(&runs[run], dg_d, C * 4);
    raw_add(&runs[run], db_d, C * 4);
    if (run == 1) continue;
    check_bf16(WHAT("out"), out_d, out, M * C, TOL);
    check_bf16(WHAT("dinp"), dx_d, dx, M * C, TOL);
    check_grad_inc(WHAT("dw_ab"), dWab_d, Wab0, dWab, 2 * (int64_t)Hd * C, TOL);
    check_grad_inc(WHAT("dw_o"), dWo_d, Wo0, dWo, (int64_t)C * Hd, TOL);
    if (!ident && mode != MF_LN_NONE) check_grad_inc(WHAT("dgamma"), dg_d, g0, dg, C, TOL);
    if (mode == MF_LN_FULL) check_grad_inc(WHAT("dbeta"), db_d, b0, db, C, TOL);
  }
  end_runs(runs, what);
  dev_free_all();
  mf_test_free_all();
  mf_fusion_set_chunk_rows(0);
}

/* ================================================================ mma.sync kernels directly */

/* The transition in place (out == inp, accumulate = 1: z += T(z), as the Pairformer block
 * could call it), forward only: out and mean/rstd against the CPU, two runs bit-identical. */
static void test_transition_inplace(int64_t M, int C, int Hd, mf_ln_mode mode, uint64_t seed,
                                    int variant) {
  char what[160];
  mf_ln_linear_cuda_set_variant(variant);
  double *x = mf_test_alloc(M * C), *g = mf_test_alloc(C), *b = mf_test_alloc(C);
  double *Wab = mf_test_alloc(2 * (int64_t)Hd * C), *Wo = mf_test_alloc((int64_t)C * Hd);
  rand_bf16(x, M * C, seed + 1, 1.5, 0.3);
  rand_bf16(g, C, seed + 2, 0.2, 1.0);
  rand_bf16(b, C, seed + 3, 0.2, 0.0);
  rand_bf16(Wab, 2 * (int64_t)Hd * C, seed + 4, 1.0 / sqrt((double)C), 0.0);
  rand_bf16(Wo, (int64_t)C * Hd, seed + 5, 1.0 / sqrt((double)Hd), 0.0);
  double *out = mf_test_alloc(M * C), *mean = mf_test_alloc(M), *rstd = mf_test_alloc(M);
  mf_transition_forward(out, mean, rstd, x, g, b, Wab, Wab + (int64_t)Hd * C, Wo, M, C, Hd, mode);
  for (int64_t i = 0; i < M * C; i++) out[i] += x[i];
  mf_bf16_t *g_d = to_bf16(g, C), *b_d = to_bf16(b, C);
  mf_bf16_t *Wab_d = to_bf16(Wab, 2 * (int64_t)Hd * C), *Wo_d = to_bf16(Wo, (int64_t)C * Hd);
  mf_bf16_t *z_d = (mf_bf16_t *)dev_alloc(M * C * 2);
  float *mean_d = (float *)dev_alloc(M * 4), *rstd_d = (float *)dev_alloc(M * 4);
  size_t wsb = mf_transition_cuda_workspace(M, C, Hd);
  void *ws = ws_alloc(wsb);
  raw_set runs[2] = {};
  snprintf(what, sizeof what, "transition in place (out = inp += T) M=%lld C=%d Hd=%d %s variant=%d%s",
           (long long)M, C, Hd, mode_name(mode), variant,
           variant == 3 && mf_transition_wg_supported(C, Hd, mode, z_d, z_d, Wab_d, Wo_d)
               ? " [wgmma kernel]"
           : variant >= 2 && mf_transition_fused_supported(C, Hd, mode, z_d, z_d, Wab_d, Wo_d)
               ? " [fused kernel]" : "");
  for (int run = 0; run < 2; run++) {
    up_bf16(z_d, x, M * C);
    poison(mean_d, M * 4);
    poison(rstd_d, M * 4);
    mf_transition_forward_cuda(z_d, mean_d, rstd_d, z_d, g_d, b_d, Wab_d, Wo_d, M, C, Hd, mode, 1,
                               ws, wsb, &g_blas, 0);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    raw_add(&runs[run], z_d, M * C * 2);
    raw_add(&runs[run], mean_d, M * 4);
    raw_add(&runs[run], rstd_d, M * 4);
    if (run == 1) continue;
    check_out_stats(what, z_d, out, M * C, mean_d, mean, rstd_d, rstd, M);
  }
  /* out-of-place with the residual read where it lies (mf_transition_forward_res_cuda, the
   * Pairformer block's z5 = z4 + PT(z4)): res = inp and out a buffer of its own, then res a
   * third buffer, then also a copy of the result into a fourth; all bit-identical to the
   * in-place run */
  mf_bf16_t *x_d = to_bf16(x, M * C), *o2_d = (mf_bf16_t *)dev_alloc(M * C * 2);
  mf_bf16_t *o3_d = (mf_bf16_t *)dev_alloc(M * C * 2);
  const mf_bf16_t *res_d[2] = {x_d, to_bf16(x, M * C)};
  for (int r = 0; r < 3; r++) {
    poison(o2_d, M * C * 2);
    poison(o3_d, M * C * 2);
    mf_transition_forward_res_cuda(o2_d, r == 2 ? o3_d : NULL, res_d[r & 1], mean_d, rstd_d, x_d,
                                   g_d, b_d, Wab_d, Wo_d, M, C, Hd, mode, ws, wsb, &g_blas, 0);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    MF_TEST(dev_same(o2_d, z_d, (size_t)M * C * 2), "%s: out = res + T(inp) into another buffer, %s, bit-identical",
            what, r == 1 ? "res a copy of inp in a third buffer" : "res = inp");
    if (r == 2)
      MF_TEST(dev_same(o3_d, z_d, (size_t)M * C * 2), "%s: the result's copy (copy), bit-identical",
              what);
  }
  end_runs(runs, what);
  dev_free_all();
  mf_test_free_all();
}

/* ln_gemm's SwiGLU epilogue (2), which no op dispatches to today: out = silu(a) ⊙ b,
 * [a | b] = LN(x)·[W_a; W_b]ᵀ, against the CPU LayerNorm + Linear (IDENTITY: plain Linear),
 * through the mma.sync kernel (wg = 0) or the wgmma kernel of ln_gemm_wg.cu (wg = 1). */
static void test_ln_gemm_swiglu(int64_t M, int C, int O, mf_ln_mode mode, uint64_t seed, int wg) {
  char what[160];
  const int ident = mode == MF_LN_IDENTITY;
  double *x = mf_test_alloc(M * C), *g = mf_test_alloc(C), *b = mf_test_alloc(C);
  double *W = mf_test_alloc(2 * (int64_t)O * C);
  rand_bf16(x, M * C, seed + 1, 1.5, 0.3);
  rand_bf16(g, C, seed + 2, 0.2, 1.0);
  rand_bf16(b, C, seed + 3, 0.2, 0.0);
  rand_bf16(W, 2 * (int64_t)O * C, seed + 4, 1.0 / sqrt((double)C), 0.0);
  double *pa = mf_test_alloc(M * O), *pb = mf_test_alloc(M * O), *out = mf_test_alloc(M * O);
  double *mean = mf_test_alloc(M), *rstd = mf_test_alloc(M);
  if (ident) {
    mf_linear_forward(pa, x, W, NULL, M, C, O);
    mf_linear_forward(pb, x, W + (int64_t)O * C, NULL, M, C, O);
  } else {
    mf_ln_linear_forward(pa, mean, rstd, x, g, b, W, NULL, M, C, O, mode);
    mf_ln_linear_forward(pb, mean, rstd, x, g, b, W + (int64_t)O * C, NULL, M, C, O, mode);
  }
  for (int64_t i = 0; i < M * O; i++) out[i] = pa[i] / (1.0 + exp(-pa[i])) * pb[i];
  mf_bf16_t *x_d = to_bf16(x, M * C), *g_d = to_bf16(g, C), *b_d = to_bf16(b, C);
  mf_bf16_t *W_d = to_bf16(W, 2 * (int64_t)O * C), *out_d = (mf_bf16_t *)dev_alloc(M * O * 2);
  float *mean_d = (float *)dev_alloc(M * 4), *rstd_d = (float *)dev_alloc(M * 4);
  snprintf(what, sizeof what, "%s SwiGLU M=%lld C=%d O=%d %s", wg ? "ln_gemm_wg" : "ln_gemm_mma",
           (long long)M, C, O, mode_name(mode));
  MF_TEST(wg ? mf_ln_gemm_wg_supported(C, O, 2, mode, x_d, out_d, W_d)
             : mf_ln_gemm_mma_supported(C, O, 2, mode, x_d, out_d, W_d),
          "%s: supported", what);
  raw_set runs[2] = {};
  for (int run = 0; run < 2; run++) {
    poison(out_d, M * O * 2);
    poison(mean_d, M * 4);
    poison(rstd_d, M * 4);
    if (wg) mf_ln_gemm_wg_cuda(out_d, mean_d, rstd_d, x_d, g_d, b_d, W_d, NULL, NULL, M, C, O, mode, 2, 0);
    else mf_ln_gemm_mma_cuda(out_d, mean_d, rstd_d, x_d, g_d, b_d, W_d, NULL, NULL, M, C, O, mode, 2, 0);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    raw_add(&runs[run], out_d, M * O * 2);
    if (!ident) raw_add(&runs[run], mean_d, M * 4);
    if (run == 1) continue;
    if (ident) {
      char w2[200];
      snprintf(w2, sizeof w2, "%s: out", what);
      check_bf16(w2, out_d, out, M * O, TOL);
    } else {
      check_out_stats(what, out_d, out, M * O, mean_d, mean, rstd_d, rstd, M);
    }
  }
  end_runs(runs, what);
  dev_free_all();
  mf_test_free_all();
}

/* Appends a copy of src's result i to dst. */
static void raw_dup(raw_set *dst, const raw_set *src, int i) {
  MF_ASSERT(dst->n < GPU_TEST_MAX_OUTS && i < src->n, "raw_dup");
  dst->raw[dst->n] = malloc(src->bytes[i]);
  MF_CHECK_PTR(dst->raw[dst->n]);
  memcpy(dst->raw[dst->n], src->raw[i], src->bytes[i]);
  dst->bytes[dst->n++] = src->bytes[i];
}

/* The transition backward with gradients skipped (NULL) must give the same bits for the
 * gradients it does compute as the full call: the fused backward writes x̂, h, [da | db]
 * and dout's copy only for the GEMMs that need them, and skips dy without dinp/dγ/dβ. */
static void test_transition_null(int64_t M, int C, int Hd, mf_ln_mode mode, uint64_t seed) {
  char what[160];
  double *x = mf_test_alloc(M * C), *g = mf_test_alloc(C), *b = mf_test_alloc(C);
  double *Wab = mf_test_alloc(2 * (int64_t)Hd * C), *Wo = mf_test_alloc((int64_t)C * Hd);
  double *dout = mf_test_alloc(M * C);
  rand_bf16(x, M * C, seed + 1, 1.5, 0.3);
  rand_bf16(g, C, seed + 2, 0.2, 1.0);
  rand_bf16(b, C, seed + 3, 0.2, 0.0);
  rand_bf16(Wab, 2 * (int64_t)Hd * C, seed + 4, 1.0 / sqrt((double)C), 0.0);
  rand_bf16(Wo, (int64_t)C * Hd, seed + 5, 1.0 / sqrt((double)Hd), 0.0);
  rand_bf16(dout, M * C, seed + 6, 1.0, 0.0);
  mf_bf16_t *x_d = to_bf16(x, M * C), *g_d = to_bf16(g, C), *b_d = to_bf16(b, C);
  mf_bf16_t *Wab_d = to_bf16(Wab, 2 * (int64_t)Hd * C), *Wo_d = to_bf16(Wo, (int64_t)C * Hd);
  mf_bf16_t *dout_d = to_bf16(dout, M * C), *out_d = (mf_bf16_t *)dev_alloc(M * C * 2);
  mf_bf16_t *dx_d = (mf_bf16_t *)dev_alloc(M * C * 2);
  float *mean_d = (float *)dev_alloc(M * 4), *rstd_d = (float *)dev_alloc(M * 4);
  const size_t wsb = mf_transition_cuda_workspace(M, C, Hd);
  void *ws = ws_alloc(wsb);
  mf_transition_forward_cuda(out_d, mean_d, rstd_d, x_d, g_d, b_d, Wab_d, Wo_d, M, C, Hd, mode, 0,
                             ws, wsb, &g_blas, 0);
  const size_t nab = (size_t)2 * Hd * C * 4, no = (size_t)C * Hd * 4;
  raw_set full = {}, part = {};
  /* 0: everything; 1: dinp only; 2: weight gradients only; 3: dγ/dβ only; 4: dw_o only */
  for (int k = 0; k < 5; k++) {
    float *dg_d = (float *)dev_alloc(C * 4), *db_d = (float *)dev_alloc(C * 4);
    float *dWab_d = (float *)dev_alloc(nab), *dWo_d = (float *)dev_alloc(no);
    MF_CHECK_CUDA(cudaMemset(dg_d, 0, C * 4));
    MF_CHECK_CUDA(cudaMemset(db_d, 0, C * 4));
    MF_CHECK_CUDA(cudaMemset(dWab_d, 0, nab));
    MF_CHECK_CUDA(cudaMemset(dWo_d, 0, no));
    poison(dx_d, M * C * 2);
    const int want_dx = k == 0 || k == 1, want_w = k == 0 || k == 2, want_g = k == 0 || k == 3;
    mf_transition_backward_cuda(want_dx ? dx_d : NULL, want_g ? dg_d : NULL, want_g ? db_d : NULL,
                                want_w ? dWab_d : NULL, (want_w || k == 4) ? dWo_d : NULL, dout_d,
                                mean_d, rstd_d, x_d, g_d, b_d, Wab_d, Wo_d, M, C, Hd, mode, ws,
                                wsb, &g_blas, 0);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    raw_set *r = k == 0 ? &full : &part;
    if (want_dx) raw_add(r, dx_d, M * C * 2);
    if (want_w) raw_add(r, dWab_d, nab);
    if (want_w || k == 4) raw_add(r, dWo_d, no);
    if (want_g && mode != MF_LN_NONE) raw_add(r, dg_d, C * 4);
    if (want_g && mode == MF_LN_FULL) raw_add(r, db_d, C * 4);
  }
  /* full holds [dx, dWab, dWo, (dγ), (dβ)]; the partial runs, in order, hold
   * [dx] [dWab, dWo] [(dγ), (dβ)] [dWo] */
  MF_TEST(full.n >= 3, "transition null-skips: full run recorded");
  raw_set ref = {};
  for (int i = 0; i < full.n; i++) raw_dup(&ref, &full, i);
  raw_dup(&ref, &full, 2);
  snprintf(what, sizeof what, "transition M=%lld C=%d Hd=%d %s: NULL-skipped gradients",
           (long long)M, C, Hd, mode_name(mode));
  MF_TEST(raw_same(&ref, &part), "%s: the computed ones bit-identical to the full call's", what);
  raw_free(&full);
  raw_free(&part);
  raw_free(&ref);
  dev_free_all();
  mf_test_free_all();
}

/* ================================================================ LayerNorm rows */

/* The CPU reference of a LayerNorm backward in double: y, mean, rstd = LN(x) and dx, dg, db
 * from dy (dg, db zeroed first; dx + dx0 when accumulate). */
static void ln_ref_backward(double *dx, double *dg, double *db, double *y, double *mean, double *rstd,
                            const double *x, const double *g, const double *b, const double *dy,
                            const double *dx0, int64_t M, int C, mf_ln_mode mode, int accumulate) {
  memset(dg, 0, (size_t)C * sizeof(double));
  memset(db, 0, (size_t)C * sizeof(double));
  mf_layernorm_forward(y, mean, rstd, x, g, b, M, C, mode);
  mf_layernorm_backward(dx, dg, db, dy, mean, rstd, x, g, M, C, mode);
  if (accumulate)
    for (int64_t i = 0; i < M * C; i++) dx[i] += dx0[i];
}

/* The row building blocks alone: mf_ln_rows_cuda (statistics computed, then recomputed from
 * the saved ones) and mf_ln_rows_backward_cuda (dx assigned or added, the γ/β partials
 * reduced) against the CPU LayerNorm; run twice with the default (vectorised where the
 * shape allows) kernels and once with the generic ones (mf_ln_rows_cuda_set_variant(0)):
 * all three runs bit-identical. Then twice each with the half-warp forwards (variants 2,
 * 3 and 4, ln_rows_hw.cuh; C = 64, 128, 256): their sums run in another order, so they are
 * checked against the CPU reference (same tolerances) and bit-identical on the rerun. */
static void test_ln_rows(int64_t M, int C, mf_ln_mode mode, int accumulate, uint64_t seed) {
  char what[160], w2[256];
  double *x = mf_test_alloc(M * C), *g = mf_test_alloc(C), *b = mf_test_alloc(C);
  double *dy = mf_test_alloc(M * C), *dx0 = mf_test_alloc(M * C);
  double *y = mf_test_alloc(M * C), *mean = mf_test_alloc(M), *rstd = mf_test_alloc(M);
  double *dx = mf_test_alloc(M * C), *dg = mf_test_alloc(C), *db = mf_test_alloc(C);
  rand_bf16(x, M * C, seed + 1, 1.5, 0.3);
  rand_bf16(g, C, seed + 2, 0.2, 1.0);
  rand_bf16(b, C, seed + 3, 0.2, 0.0);
  rand_bf16(dy, M * C, seed + 4, 1.0, 0.0);
  rand_bf16(dx0, M * C, seed + 5, 1.0, 0.0);
  ln_ref_backward(dx, dg, db, y, mean, rstd, x, g, b, dy, dx0, M, C, mode, accumulate);
  mf_bf16_t *x_d = to_bf16(x, M * C), *g_d = to_bf16(g, C), *b_d = to_bf16(b, C);
  float *dy_d = to_f32(dy, M * C);
  mf_bf16_t *y_d = (mf_bf16_t *)dev_alloc(M * C * 2), *y2_d = (mf_bf16_t *)dev_alloc(M * C * 2);
  mf_bf16_t *dx_d = (mf_bf16_t *)dev_alloc(M * C * 2);
  float *mean_d = (float *)dev_alloc(M * 4), *rstd_d = (float *)dev_alloc(M * 4);
  const int parts = mf_ln_rows_backward_parts(M);
  float *part_d = (float *)dev_alloc((size_t)parts * 2 * C * 4);
  float *dg_d = (float *)dev_alloc(C * 4), *db_d = (float *)dev_alloc(C * 4);
  snprintf(what, sizeof what, "ln_rows M=%lld C=%d %s%s", (long long)M, C, mode_name(mode),
           accumulate ? " dx+=" : "");
  /* runs: the default kernels twice, the generic ones (0), the vectorised ones (1), then
   * the half-warp forwards (variants 2, 3, 4; ln_rows_hw.cuh) twice each */
  enum { NRUNS = 10 };
  static const int run_variant[NRUNS] = {-1, -1, 0, 1, 2, 2, 3, 3, 4, 4};
  raw_set runs[NRUNS] = {};
  const int def = mf_ln_rows_cuda_set_variant(-1);
  char whatv[200];
  for (int run = 0; run < NRUNS; run++) {
    mf_ln_rows_cuda_set_variant(run_variant[run] < 0 ? def : run_variant[run]);
    poison(y_d, M * C * 2);
    poison(y2_d, M * C * 2);
    poison(mean_d, M * 4);
    poison(rstd_d, M * 4);
    poison(part_d, (size_t)parts * 2 * C * 4);
    if (accumulate) up_bf16(dx_d, dx0, M * C);
    else poison(dx_d, M * C * 2);
    MF_CHECK_CUDA(cudaMemset(dg_d, 0, C * 4));
    MF_CHECK_CUDA(cudaMemset(db_d, 0, C * 4));
    mf_ln_rows_cuda(y_d, mean_d, rstd_d, x_d, g_d, b_d, M, C, mode, 0, 0);
    mf_ln_rows_cuda(y2_d, mean_d, rstd_d, x_d, g_d, b_d, M, C, mode, 1, 0);
    mf_ln_rows_backward_cuda(dx_d, part_d, dy_d, x_d, mean_d, rstd_d, g_d, M, C, mode, accumulate, 0);
    mf_ln_param_grad_reduce_cuda(dg_d, db_d, part_d, parts, C, 0);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    raw_add(&runs[run], y_d, M * C * 2);
    raw_add(&runs[run], y2_d, M * C * 2);
    raw_add(&runs[run], mean_d, M * 4);
    raw_add(&runs[run], rstd_d, M * 4);
    raw_add(&runs[run], dx_d, M * C * 2);
    raw_add(&runs[run], dg_d, C * 4);
    raw_add(&runs[run], db_d, C * 4);
    if (run != 0 && (run < 4 || run % 2 == 1)) continue;
    /* the CPU reference: the default run and the first run of each half-warp variant */
    if (run == 0) snprintf(whatv, sizeof whatv, "%s", what);
    else snprintf(whatv, sizeof whatv, "%s [variant %d]", what, run_variant[run]);
    check_out_stats(whatv, y_d, y, M * C, mean_d, mean, rstd_d, rstd, M);
    snprintf(w2, sizeof w2, "%s: y from saved statistics", whatv);
    check_bf16(w2, y2_d, y, M * C, TOL);
    snprintf(w2, sizeof w2, "%s: dx", whatv);
    check_bf16(w2, dx_d, dx, M * C, TOL);
    snprintf(w2, sizeof w2, "%s: dgamma", whatv);
    if (mode != MF_LN_NONE) check_f32(w2, dg_d, dg, C, TOL);
    snprintf(w2, sizeof w2, "%s: dbeta", whatv);
    if (mode == MF_LN_FULL) check_f32(w2, db_d, db, C, TOL);
  }
  mf_ln_rows_cuda_set_variant(def);
  MF_TEST(raw_same(&runs[3], &runs[2]), "%s: vectorised kernels bit-identical to the generic ones",
          what);
  raw_free(&runs[2]);
  raw_free(&runs[3]);
  for (int hv = 4; hv < NRUNS; hv += 2) { /* the half-warp variants: bit-identical reruns */
    snprintf(whatv, sizeof whatv, "%s [variant %d]", what, run_variant[hv]);
    end_runs(&runs[hv], whatv);
  }
  end_runs(runs, what);
  dev_free_all();
  mf_test_free_all();
}

/* ================================================================ GEMM + LayerNorm backward */

/* mf_gemm_ln_bwd_cuda (gemm_ln_bwd_wg.cu) alone: dinp = LN backward of d·w (+ d2·w2 when
 * K2 > 0: the second term), with d (M, lda) of which K columns are used, w (K, 128), d2
 * (M, K2 + 8) of which K2 columns are used, w2 (K2, 128), against the CPU reference in
 * double (the products in double, then mf_layernorm_backward); dinp assigned or added,
 * dγ/dβ through the partial rows and mf_ln_param_grad_reduce_cuda; run twice, with its
 * blocks copied by TMA (the default) and by cp.async (mf_gemm_ln_bwd_set_tma(0)),
 * bit-identical. Then the path it replaced (cuBLAS into fp32 dx̂, mf_ln_rows_backward_cuda)
 * against the same reference, so both stay within the tolerance. */
static void test_gemm_ln_bwd(int64_t M, int K, int64_t lda, int K2, mf_ln_mode mode, int accumulate,
                             uint64_t seed) {
  const int C = 128;
  const int64_t ld2 = K2 + 8;
  char what[160], w2s[256];
  double *x = mf_test_alloc(M * C), *g = mf_test_alloc(C), *b = mf_test_alloc(C);
  double *d = mf_test_alloc(M * lda), *w = mf_test_alloc((int64_t)K * C);
  double *d2 = mf_test_alloc(M * ld2), *w2 = mf_test_alloc((int64_t)(K2 ? K2 : 1) * C);
  double *dxh = mf_test_alloc(M * C), *dx0 = mf_test_alloc(M * C), *y = mf_test_alloc(M * C);
  double *mean = mf_test_alloc(M), *rstd = mf_test_alloc(M);
  double *dx = mf_test_alloc(M * C), *dg = mf_test_alloc(C), *db = mf_test_alloc(C);
  rand_bf16(x, M * C, seed + 1, 1.5, 0.3);
  rand_bf16(g, C, seed + 2, 0.2, 1.0);
  rand_bf16(b, C, seed + 3, 0.2, 0.0);
  rand_bf16(d, M * lda, seed + 4, 1.0, 0.0);
  rand_bf16(w, (int64_t)K * C, seed + 5, 1.0 / sqrt((double)K), 0.0);
  rand_bf16(dx0, M * C, seed + 6, 1.0, 0.0);
  rand_bf16(d2, M * ld2, seed + 7, 1.0, 0.0);
  rand_bf16(w2, (int64_t)(K2 ? K2 : 1) * C, seed + 8, 1.0 / sqrt((double)(K2 ? K2 : 1)), 0.0);
  for (int64_t r = 0; r < M; r++)
    for (int c = 0; c < C; c++) {
      double acc = 0.0;
      for (int k = 0; k < K; k++) acc += d[r * lda + k] * w[(int64_t)k * C + c];
      for (int k = 0; k < K2; k++) acc += d2[r * ld2 + k] * w2[(int64_t)k * C + c];
      dxh[r * C + c] = acc;
    }
  ln_ref_backward(dx, dg, db, y, mean, rstd, x, g, b, dxh, dx0, M, C, mode, accumulate);
  mf_bf16_t *x_d = to_bf16(x, M * C), *g_d = to_bf16(g, C), *d_d = to_bf16(d, M * lda);
  mf_bf16_t *w_d = to_bf16(w, (int64_t)K * C), *dx_d = (mf_bf16_t *)dev_alloc(M * C * 2);
  mf_bf16_t *d2_d = to_bf16(d2, M * ld2), *w2_d = to_bf16(w2, (int64_t)(K2 ? K2 : 1) * C);
  float *mean_d = to_f32(mean, M), *rstd_d = to_f32(rstd, M), *dxh_d = (float *)dev_alloc(M * C * 4);
  const int parts = mf_ln_rows_backward_parts(M);
  float *part_d = (float *)dev_alloc((size_t)parts * 2 * C * 4);
  float *dg_d = (float *)dev_alloc(C * 4), *db_d = (float *)dev_alloc(C * 4);
  const mf_gemm_ln_term terms[2] = {{d_d, lda, w_d, K}, {d2_d, ld2, w2_d, K2}};
  const int nt = K2 ? 2 : 1;
  snprintf(what, sizeof what, "gemm_ln_bwd M=%lld K=%d lda=%lld K2=%d %s%s", (long long)M, K,
           (long long)lda, K2, mode_name(mode), accumulate ? " dx+=" : "");
  MF_TEST(mf_gemm_ln_bwd_supported(terms, nt, C, mode, x_d, dx_d), "%s: supported", what);
  raw_set runs[2] = {};
  const int tma_prev = mf_gemm_ln_bwd_set_tma(-1);
  for (int run = 0; run < 3; run++) { /* 0, 1: the kernel (TMA, cp.async); 2: cuBLAS + the row kernel */
    if (accumulate) up_bf16(dx_d, dx0, M * C);
    else poison(dx_d, M * C * 2);
    poison(part_d, (size_t)parts * 2 * C * 4);
    MF_CHECK_CUDA(cudaMemset(dg_d, 0, C * 4));
    MF_CHECK_CUDA(cudaMemset(db_d, 0, C * 4));
    int np = 0;
    if (run < 2) {
      mf_gemm_ln_bwd_set_tma(run == 0);
      np = mf_gemm_ln_bwd_cuda(dx_d, accumulate, part_d, terms, nt, x_d, mean_d, rstd_d, g_d, M, C,
                               mode, 0);
      MF_TEST(np == mf_gemm_ln_bwd_parts(M) && np <= parts, "%s: %d partial rows", what, np);
    } else {
      mf_gemm_rm_cuda(&g_blas, 0, 0, 0, M, C, K, 1.0f, d_d, lda, w_d, C, 0.0f, dxh_d,
                      MF_GEMM_OUT_F32, C);
      if (K2)
        mf_gemm_rm_cuda(&g_blas, 0, 0, 0, M, C, K2, 1.0f, d2_d, ld2, w2_d, C, 1.0f, dxh_d,
                        MF_GEMM_OUT_F32, C);
      mf_ln_rows_backward_cuda(dx_d, part_d, dxh_d, x_d, mean_d, rstd_d, g_d, M, C, mode,
                               accumulate, 0);
      np = parts;
    }
    mf_ln_param_grad_reduce_cuda(dg_d, db_d, part_d, np, C, 0);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    if (run < 2) {
      raw_add(&runs[run], dx_d, M * C * 2);
      raw_add(&runs[run], dg_d, C * 4);
      raw_add(&runs[run], db_d, C * 4);
    }
    if (run == 1) continue;
    const char *tag = run ? " [cuBLAS + rows]" : "";
    snprintf(w2s, sizeof w2s, "%s%s: dx", what, tag);
    check_bf16(w2s, dx_d, dx, M * C, TOL);
    snprintf(w2s, sizeof w2s, "%s%s: dgamma", what, tag);
    if (mode != MF_LN_NONE) check_f32(w2s, dg_d, dg, C, TOL);
    snprintf(w2s, sizeof w2s, "%s%s: dbeta", what, tag);
    if (mode == MF_LN_FULL) check_f32(w2s, db_d, db, C, TOL);
  }
  mf_gemm_ln_bwd_set_tma(tma_prev);
  end_runs(runs, what);
  /* what the kernel refuses: a first term of k % 64 != 0 beside a second, k % 8 != 0 */
  const mf_gemm_ln_term bad[2] = {{d_d, lda, w_d, 72}, {d2_d, ld2, w2_d, 8}};
  MF_TEST(!mf_gemm_ln_bwd_supported(bad, 2, C, mode, x_d, dx_d) &&
              !mf_gemm_ln_bwd_supported(bad + 1, 1, 64, mode, x_d, dx_d),
          "%s: unsupported shapes refused", what);
  dev_free_all();
  mf_test_free_all();
}

/* ================================================================ residual + dropout */

/* mf_ln_param_grad_reduce_cuda alone: dγ, dβ (C) += the column sums of part (parts, 2C)
 * against a double sum, NULL dβ, two runs bit-identical; parts ≤ 4096 take the one-launch
 * kernel, more the two-stage reduce. */
static void test_ln_param_reduce(int parts, int C, uint64_t seed) {
  char what[96];
  snprintf(what, sizeof what, "ln_param_reduce parts=%d C=%d", parts, C);
  const int64_t n = (int64_t)parts * 2 * C;
  double *part = mf_test_alloc(n), *g0 = mf_test_alloc(2 * C), *ref = mf_test_alloc(2 * C);
  rand_bf16(part, n, seed, 1.0, 0.0);
  rand_bf16(g0, 2 * C, seed + 1, 1.0, 0.0);
  for (int j = 0; j < 2 * C; j++) {
    ref[j] = g0[j];
    for (int p = 0; p < parts; p++) ref[j] += part[(int64_t)p * 2 * C + j];
  }
  float *part_d = (float *)dev_alloc((size_t)n * 4), *g_d = (float *)dev_alloc((size_t)2 * C * 4);
  raw_set runs[2] = {};
  double *got = mf_test_alloc(2 * C);
  for (int run = 0; run < 2; run++) {
    up_f32(part_d, part, n);
    up_f32(g_d, g0, 2 * C);
    mf_ln_param_grad_reduce_cuda(g_d, g_d + C, part_d, parts, C, 0);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    raw_add(&runs[run], g_d, (size_t)2 * C * 4);
  }
  from_f32(got, g_d, 2 * C);
  double err = 0.0, nrm = 0.0;
  for (int j = 0; j < 2 * C; j++) {
    err += (got[j] - ref[j]) * (got[j] - ref[j]);
    nrm += ref[j] * ref[j];
  }
  MF_TEST(sqrt(err / (nrm > 0 ? nrm : 1)) < 5e-5, "%s: sums (rel err %.2e)", what, sqrt(err / (nrm > 0 ? nrm : 1)));
  MF_TEST(raw_same(&runs[0], &runs[1]), "%s: two runs bit-identical", what);
  up_f32(part_d, part, n);
  up_f32(g_d, g0, 2 * C);
  mf_ln_param_grad_reduce_cuda(g_d, NULL, part_d, parts, C, 0); /* dβ not wanted */
  from_f32(got, g_d, 2 * C);
  int ok = 1;
  for (int j = C; j < 2 * C; j++) ok &= got[j] == (double)(float)g0[j];
  MF_TEST(ok, "%s: NULL dbeta leaves the memory after dgamma alone", what);
  raw_free(&runs[0]);
  raw_free(&runs[1]);
  dev_free_all();
  mf_test_free_all();
}

static void test_dropout(int64_t A, int64_t B, int C, mf_dropout_axis axis, double p, uint64_t seed) {
  char what[160], w2[200];
  const int64_t n = A * B * C, R = axis == MF_DROPOUT_ROWWISE ? B : A;
  const uint64_t dseed = 1234 + seed, dstream = mf_rng_stream(7, MF_RNG_DROPOUT, 3);
  double *mask = mf_test_alloc(R * C), *x = mf_test_alloc(n), *z = mf_test_alloc(n);
  double *dout = mf_test_alloc(n), *dx = mf_test_alloc(n);
  rand_bf16(x, n, seed + 1, 1.0, 0.0);
  rand_bf16(z, n, seed + 2, 1.0, 0.0);
  rand_bf16(dout, n, seed + 3, 1.0, 0.0);
  mf_bf16_t *x_d = to_bf16(x, n), *z_d = to_bf16(z, n), *dout_d = to_bf16(dout, n);
  mf_bf16_t *dx_d = (mf_bf16_t *)dev_alloc(n * 2);
  float *mask_d = (float *)dev_alloc(R * C * 4);
  mf_dropout_mask(mask, R, C, p, dseed, dstream);
  mf_dropout_residual_forward(z, x, mask, A, B, C, axis);
  mf_dropout_backward(dx, dout, mask, A, B, C, axis);
  snprintf(what, sizeof what, "resdrop A=%lld B=%lld C=%d %s p=%.2f", (long long)A, (long long)B, C,
           axis == MF_DROPOUT_ROWWISE ? "row" : "col", p);
  raw_set runs[3] = {};
  const int rd_def = mf_dropout_cuda_set_variant(-1);
  for (int run = 0; run < 3; run++) { /* run 2: the grid-stride kernel (variant 0) */
    mf_dropout_cuda_set_variant(run < 2 ? rd_def : 0);
    if (run >= 1) { /* restore z (the first run added into it) */
      double *z0 = mf_test_alloc(n);
      rand_bf16(z0, n, seed + 2, 1.0, 0.0);
      up_bf16(z_d, z0, n);
    }
    poison(mask_d, R * C * 4);
    poison(dx_d, n * 2);
    mf_dropout_mask_cuda(mask_d, R, C, p, dseed, dstream, 0);
    mf_dropout_residual_forward_cuda(z_d, x_d, mask_d, A, B, C, axis, 0);
    mf_dropout_backward_cuda(dx_d, dout_d, mask_d, A, B, C, axis, 0);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    raw_add(&runs[run], mask_d, R * C * 4);
    raw_add(&runs[run], z_d, n * 2);
    raw_add(&runs[run], dx_d, n * 2);
    if (run >= 1) continue;
    double *gm = mf_test_alloc(R * C);
    from_f32(gm, mask_d, R * C);
    int64_t bad = 0;
    for (int64_t i = 0; i < R * C; i++) bad += (gm[i] == 0) != (mask[i] == 0);
    MF_TEST(bad == 0, "%s: mask pattern equals the CPU's (%lld differ)", what, (long long)bad);
    check_f32(WHAT("mask"), mask_d, mask, R * C, 1e-6);
    check_bf16(WHAT("z += x*mask"), z_d, z, n, TOL);
    check_bf16(WHAT("dx"), dx_d, dx, n, TOL);
  }
  mf_dropout_cuda_set_variant(rd_def);
  MF_TEST(raw_same(&runs[0], &runs[2]), "%s: default kernel bit-identical to the grid-stride one",
          what);
  raw_free(&runs[2]);
  end_runs(runs, what);
  dev_free_all();
  mf_test_free_all();
}

/* ================================================================ trimul */

static void test_trimul(int N, int C, int Ch, int outgoing, int use_mask, int resdrop,
                        int64_t chunk, uint64_t seed) {
  char what[200], w2[240];
  mf_fusion_set_chunk_rows(chunk);
  const int64_t M = (int64_t)N * N;
  mf_trimul_weights w, gw;
  const int64_t np = mf_trimul_weights_bind(&w, NULL, C, Ch);
  double *flat = mf_test_alloc(np), *gflat = mf_test_alloc(np), *g0 = mf_test_alloc(np);
  mf_trimul_weights_bind(&w, flat, C, Ch);
  mf_trimul_weights_bind(&gw, gflat, C, Ch);
  rand_bf16(w.ln_in_g, C, seed + 1, 0.2, 1.0);
  rand_bf16(w.ln_in_b, C, seed + 2, 0.2, 0.0);
  rand_bf16(w.w_ap, (int64_t)4 * Ch * C, seed + 3, 1.0 / sqrt((double)C), 0.0); /* ap ag bp bg */
  rand_bf16(w.w_g, (int64_t)C * C, seed + 4, 1.0 / sqrt((double)C), 0.0);
  rand_bf16(w.ln_out_g, Ch, seed + 5, 0.2, 1.0);
  rand_bf16(w.ln_out_b, Ch, seed + 6, 0.2, 0.0);
  rand_bf16(w.w_z, (int64_t)C * Ch, seed + 7, 1.0 / sqrt((double)Ch), 0.0);
  rand_bf16(g0, np, seed + 8, 1.0, 0.0);
  memcpy(gflat, g0, (size_t)np * sizeof(double));
  double *z = mf_test_alloc(M * C), *dout = mf_test_alloc(M * C), *res = mf_test_alloc(M * C);
  rand_bf16(z, M * C, seed + 9, 1.5, 0.3);
  rand_bf16(dout, M * C, seed + 10, 1.0, 0.0);
  rand_bf16(res, M * C, seed + 11, 1.0, 0.0);
  uint8_t *pm = (uint8_t *)malloc((size_t)M);
  double *u = mf_test_alloc(N);
  mf_test_randu(u, N, seed + 12, 0, 1);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) pm[(int64_t)i * N + j] = !use_mask || (u[i] < 0.85 && u[j] < 0.85);
  const mf_dropout_axis axis = outgoing ? MF_DROPOUT_ROWWISE : MF_DROPOUT_COLWISE;
  const mf_resdrop_cuda rd = {0.25, 99 + seed, mf_rng_stream(3, MF_RNG_DROPOUT, 1), axis, NULL};

  /* reference */
  double *saved = mf_test_alloc((int64_t)mf_trimul_saved_size(N, C, Ch));
  double *out = mf_test_alloc(M * C), *dz = mf_test_alloc(M * C), *dd = mf_test_alloc(M * C);
  double *mask = mf_test_alloc((int64_t)N * C);
  mf_trimul_forward(out, saved, z, use_mask ? pm : NULL, &w, N, C, Ch, outgoing);
  const double *dd_in = dout;
  if (resdrop) {
    mf_dropout_mask(mask, N, C, rd.p, rd.seed, rd.stream);
    mf_dropout_residual_forward(res, out, mask, N, N, C, axis); /* res += mask ⊙ Δz */
    memcpy(out, res, (size_t)M * C * sizeof(double));
    mf_dropout_backward(dd, dout, mask, N, N, C, axis);
    dd_in = dd;
  }
  mf_trimul_backward(dz, &gw, dd_in, saved, z, use_mask ? pm : NULL, &w, N, C, Ch, outgoing);
  if (resdrop)
    for (int64_t i = 0; i < M * C; i++) dz[i] += dout[i];

  /* GPU */
  mf_bf16_t *flat_d = to_bf16(flat, np), *z_d = to_bf16(z, M * C), *dout_d = to_bf16(dout, M * C);
  const int64_t o_cat = 2 * C, o_lg = o_cat + (int64_t)(4 * Ch + C) * C;
  mf_trimul_cuda_weights wd = {flat_d, flat_d + C, flat_d + o_cat, flat_d + o_lg,
                               flat_d + o_lg + Ch, flat_d + o_lg + 2 * Ch};
  uint8_t *pm_d = NULL;
  if (use_mask) {
    pm_d = (uint8_t *)dev_alloc((size_t)M);
    MF_CHECK_CUDA(cudaMemcpy(pm_d, pm, (size_t)M, cudaMemcpyHostToDevice));
  }
  mf_bf16_t *out_d = (mf_bf16_t *)dev_alloc(M * C * 2), *dz_d = (mf_bf16_t *)dev_alloc(M * C * 2);
  const size_t sb = mf_trimul_cuda_saved_bytes(N, Ch), wsb = mf_trimul_cuda_workspace(N, C, Ch);
  void *saved_d = dev_alloc(sb), *ws = ws_alloc(wsb);
  double *res0 = mf_test_alloc(M * C);
  rand_bf16(res0, M * C, seed + 11, 1.0, 0.0);
  const int tvar = mf_trimul_cuda_set_variant(1); /* read the variant in force */
  mf_trimul_cuda_set_variant(tvar);
  snprintf(what, sizeof what, "trimul %s N=%d C=%d Ch=%d%s%s chunk=%lld variant=%d",
           outgoing ? "outgoing" : "incoming", N, C, Ch, use_mask ? " mask" : "",
           resdrop ? " +residual+dropout" : "", (long long)chunk, tvar);
  raw_set runs[2] = {};
  const int64_t out_calls0 = mf_trimul_out_wg_calls(), bwd_calls0 = mf_trimul_out_bwd_wg_calls();
  const int64_t ph1_calls0 = mf_trimul_ph1_wg_calls(), ph3_calls0 = mf_trimul_ph3_wg_calls();
  for (int run = 0; run < 2; run++) {
    float *gd = to_f32(g0, np);
    mf_trimul_cuda_grads gg = {gd, gd + C, gd + o_cat, gd + o_lg, gd + o_lg + Ch, gd + o_lg + 2 * Ch};
    poison(saved_d, sb);
    up_or_poison_bf16(out_d, res0, M * C, resdrop);
    up_or_poison_bf16(dz_d, dout, M * C, resdrop);
    mf_trimul_forward_cuda(out_d, saved_d, z_d, pm_d, &wd, N, C, Ch, outgoing, resdrop ? &rd : NULL,
                           ws, wsb, &g_blas, 0);
    mf_trimul_backward_cuda(dz_d, &gg, dout_d, saved_d, z_d, pm_d, &wd, N, C, Ch, outgoing,
                            resdrop ? &rd : NULL, ws, wsb, &g_blas, 0);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    raw_add(&runs[run], out_d, M * C * 2);
    raw_add(&runs[run], dz_d, M * C * 2);
    raw_add(&runs[run], gd, (size_t)np * 4);
    if (run == 1) continue;
    check_bf16(WHAT("out"), out_d, out, M * C, TOL);
    check_bf16(WHAT("dz"), dz_d, dz, M * C, TOL_TRIMUL_BWD);
    check_grad_inc(WHAT("d ln_in_g"), gg.ln_in_g, g0, gflat, C, TOL_TRIMUL_BWD);
    check_grad_inc(WHAT("d ln_in_b"), gg.ln_in_b, g0 + C, gflat + C, C, TOL_TRIMUL_BWD);
    check_grad_inc(WHAT("d w_ap,w_ag,w_bp,w_bg"), gg.w_cat, g0 + o_cat, gflat + o_cat,
                   (int64_t)4 * Ch * C, TOL_TRIMUL_BWD);
    check_grad_inc(WHAT("d w_g"), gg.w_cat + (int64_t)4 * Ch * C, g0 + o_cat + (int64_t)4 * Ch * C,
                   gflat + o_cat + (int64_t)4 * Ch * C, (int64_t)C * C, TOL_TRIMUL_BWD);
    check_grad_inc(WHAT("d ln_out_g"), gg.ln_out_g, g0 + o_lg, gflat + o_lg, Ch, TOL_TRIMUL_BWD);
    check_grad_inc(WHAT("d ln_out_b"), gg.ln_out_b, g0 + o_lg + Ch, gflat + o_lg + Ch, Ch,
                   TOL_TRIMUL_BWD);
    check_grad_inc(WHAT("d w_z"), gg.w_z, g0 + o_lg + 2 * Ch, gflat + o_lg + 2 * Ch,
                   (int64_t)C * Ch, TOL_TRIMUL_BWD);
  }
  if (resdrop) { /* the residual read where it lies (rd.res, a buffer of its own): out2 = res +
                  * mask ⊙ Δz with no copy first, bit-identical to the in-place run */
    mf_resdrop_cuda rr = rd;
    rr.res = to_bf16(res0, M * C);
    mf_bf16_t *out2_d = (mf_bf16_t *)dev_alloc(M * C * 2);
    poison(out2_d, M * C * 2);
    poison(saved_d, sb);
    mf_trimul_forward_cuda(out2_d, saved_d, z_d, pm_d, &wd, N, C, Ch, outgoing, &rr, ws, wsb, &g_blas, 0);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    MF_TEST(dev_same(out2_d, out_d, (size_t)M * C * 2),
            "%s: the forward with rd.res (out = res + …) bit-identical to the in-place one", what);
  }
  end_runs(runs, what);
  if (tvar == 2 && C == 128 && Ch == 128) { /* the output side took the fused wgmma kernels */
    MF_TEST(mf_trimul_out_wg_calls() == out_calls0 + 2 + (resdrop ? 1 : 0),
            "%s: trimul_out_wg ran %lld times, not %d", what,
            (long long)(mf_trimul_out_wg_calls() - out_calls0), 2 + (resdrop ? 1 : 0));
    if (mf_trimul_ph1_wg_set(-1)) /* the backward's whole first phase in one kernel */
      MF_TEST(mf_trimul_ph1_wg_calls() >= ph1_calls0 + 2 && mf_trimul_out_bwd_wg_calls() == bwd_calls0,
              "%s: trimul_ph1_wg ran %lld times, trimul_out_bwd_wg %lld", what,
              (long long)(mf_trimul_ph1_wg_calls() - ph1_calls0),
              (long long)(mf_trimul_out_bwd_wg_calls() - bwd_calls0));
    else
      MF_TEST(mf_trimul_out_bwd_wg_calls() >= bwd_calls0 + 2, "%s: trimul_out_bwd_wg ran %lld times",
              what, (long long)(mf_trimul_out_bwd_wg_calls() - bwd_calls0));
    /* the backward's third phase in one kernel (trimul_ph3_wg.cu), or not at all when off */
    const int64_t ph3 = mf_trimul_ph3_wg_calls() - ph3_calls0;
    MF_TEST(mf_trimul_ph3_wg_set(-1) ? ph3 >= 2 : ph3 == 0, "%s: trimul_ph3_wg ran %lld times (%s)", what,
            (long long)ph3, mf_trimul_ph3_wg_set(-1) ? "on" : "off");
  }
  free(pm);
  dev_free_all();
  mf_test_free_all();
  mf_fusion_set_chunk_rows(0);
}

/* The transition backward on thread block clusters (transition_bwd_cl.cu, the default at
 * C = 128): every cluster size (Hd = 128, 256, 512), one row, partial last tiles, fewer
 * tiles than clusters and many tiles per cluster (both stage parities, the peer buffer
 * handshake many times over), every LN mode, the adding backward in place, NULL-skipped
 * gradients; each checks that the kernel ran (twice: the determinism rerun). Then the
 * earlier configuration-7 kernel with the cluster kernel switched off. */
static void tc_case(int64_t M, int Hd, mf_ln_mode mode, int accumulate, uint64_t seed) {
  const int64_t c0 = mf_transition_bwd_cl_calls();
  test_transition(M, 128, Hd, mode, accumulate, 0, seed, 3);
  MF_TEST(mf_transition_bwd_cl_calls() == c0 + 2,
          "transition M=%lld Hd=%d: the cluster backward ran %lld times, not 2", (long long)M, Hd,
          (long long)(mf_transition_bwd_cl_calls() - c0));
}

static void test_transition_cl(uint64_t *s, int small) {
  const int prev = mf_transition_bwd_cl_set(1);
  if (small) { /* compute-sanitizer: every cluster size, partial tiles, in place */
    tc_case(1, 512, MF_LN_FULL, 1, *s += 20);
    tc_case(65, 128, MF_LN_NONE, 0, *s += 20);
    tc_case(300, 256, MF_LN_FULL, 0, *s += 20);
    tc_case(1000, 256, MF_LN_SCALE, 1, *s += 20);
    tc_case(4099, 512, MF_LN_FULL, 1, *s += 20);
    mf_transition_bwd_cl_set(prev);
    return;
  }
  tc_case(1, 512, MF_LN_FULL, 1, *s += 20);
  tc_case(63, 512, MF_LN_FULL, 0, *s += 20);
  tc_case(64, 256, MF_LN_SCALE, 1, *s += 20);
  tc_case(65, 128, MF_LN_NONE, 0, *s += 20);
  tc_case(1000, 256, MF_LN_FULL, 1, *s += 20);
  tc_case(4099, 256, MF_LN_FULL, 0, *s += 20);
  tc_case(17000, 128, MF_LN_SCALE, 1, *s += 20);
  tc_case(17000, 512, MF_LN_FULL, 1, *s += 20); /* in place, 17 tiles per cluster, a partial last */
  tc_case(40000, 512, MF_LN_FULL, 1, *s += 20);  /* ≈ 39 tiles per cluster */
  tc_case(40001, 512, MF_LN_SCALE, 0, *s += 20);
  /* rows whose mean is 16 standard deviations: the kernel folds the LayerNorm into its
   * products (raw rows times γ ∘ W, then the rows' μ and 1/rstd), so the cancellation of
   * the mean must happen in fp32 */
  g_tr_xmean = 24.0;
  tc_case(4099, 512, MF_LN_FULL, 1, *s += 20);
  tc_case(1000, 256, MF_LN_SCALE, 0, *s += 20);
  tc_case(300, 128, MF_LN_NONE, 0, *s += 20);
  g_tr_xmean = 0.3;
  const int64_t c0 = mf_transition_bwd_cl_calls();
  test_transition_null(4099, 128, 512, MF_LN_FULL, *s += 20);
  test_transition_inplace(4099, 128, 512, MF_LN_FULL, *s += 20, 3);
  MF_TEST(mf_transition_bwd_cl_calls() > c0, "transition null/in-place: the cluster backward ran");
  const int64_t c1 = mf_transition_bwd_cl_calls();
  test_transition(300, 128, 64, MF_LN_FULL, 1, 0, *s += 20, 3); /* Hd = 64: not taken */
  MF_TEST(mf_transition_bwd_cl_calls() == c1, "transition Hd=64: the cluster backward is not taken");
  mf_transition_bwd_cl_set(0); /* the configuration-7 kernel + cuBLAS dW */
  test_transition(4099, 128, 512, MF_LN_FULL, 1, 1024, *s += 20, 3);
  test_transition(300, 128, 256, MF_LN_NONE, 0, 0, *s += 20, 3);
  mf_transition_bwd_cl_set(prev);
}

int main(void) {
  if (!gpu_test_begin("test_fusion_gpu")) return mf_test_end();
  mf_cuda_blas_create(&g_blas, 0);
  uint64_t s = 100;
  if (getenv("MF_FUSION_TEST_GEMM")) { /* the cuBLAS GEMM helpers alone */
    test_gemm_helpers(&s);
    mf_cuda_blas_destroy(&g_blas);
    return mf_test_end();
  }
  if (getenv("MF_FUSION_TEST_CL")) { /* the cluster transition backward alone: small (=1, for
                                      * compute-sanitizer) or its full set (=2, to rerun many times) */
    test_transition_cl(&s, atoi(getenv("MF_FUSION_TEST_CL")) != 2);
    mf_cuda_blas_destroy(&g_blas);
    return mf_test_end();
  }
  if (getenv("MF_FUSION_TEST_TR")) { /* the transition forward's wgmma kernel alone (in place,
                                      * and with the residual and the copy), three shapes */
    test_transition_inplace(300, 128, 512, MF_LN_FULL, s += 20, 3);
    test_transition_inplace(4099, 128, 512, MF_LN_SCALE, s += 20, 3);
    test_transition_inplace(129, 128, 128, MF_LN_NONE, s += 20, 3);
    test_transition_inplace(300, 384, 1536, MF_LN_FULL, s += 20, 3); /* not taken: the copy by cudaMemcpy */
    mf_cuda_blas_destroy(&g_blas);
    return mf_test_end();
  }
  if (getenv("MF_FUSION_TEST_PH1")) { /* the trimul backward's first phase in one kernel
                                       * (trimul_ph1_wg.cu), two shapes (compute-sanitizer) */
    test_trimul(33, 128, 128, 0, 1, 1, 0, s += 20);
    test_trimul(65, 128, 128, 1, 1, 0, 1024, s += 20);
    mf_cuda_blas_destroy(&g_blas);
    return mf_test_end();
  }
  if (getenv("MF_FUSION_TEST_PH3")) { /* the trimul backward's third phase in one kernel
                                       * (trimul_ph3_wg.cu), three shapes (compute-sanitizer) */
    test_trimul(7, 128, 128, 0, 1, 0, 0, s += 20);
    test_trimul(33, 128, 128, 0, 1, 1, 0, s += 20);
    test_trimul(65, 128, 128, 1, 1, 0, 1024, s += 20);
    mf_cuda_blas_destroy(&g_blas);
    return mf_test_end();
  }
  if (getenv("MF_FUSION_TEST_WG")) { /* the wgmma kernels alone, few shapes (compute-sanitizer) */
    mf_ln_gemm_bwd_set_variant(7);
    test_ln_linear(1000, 128, 128, MF_LN_FULL, 1, 0, s += 20, 3);
    test_ln_linear(129, 64, 64, MF_LN_SCALE, 1, 0, s += 20, 3);
    test_ln_linear(40000, 128, 128, MF_LN_NONE, 0, 0, s += 20, 3); /* several tiles per CTA */
    g_lnl_nwg_ab = 1; /* three warpgroups per CTA against two, bit for bit */
    test_ln_linear(40000, 128, 128, MF_LN_FULL, 1, 0, s += 20, 3);
    test_ln_linear(1001, 64, 128, MF_LN_SCALE, 0, 0, s += 20, 3);
    test_gated(40000, 128, 128, MF_LN_FULL, 1, 0, s += 20, 3); /* one raw buffer per warpgroup */
    g_lnl_nwg_ab = 0;
    test_gated(300, 128, 128, MF_LN_FULL, 1, 0, s += 20, 3);
    test_gated(300, 128, 192, MF_LN_SCALE, 1, 0, s += 20, 3);
    test_gated(17000, 128, 128, MF_LN_NONE, 1, 0, s += 20, 3); /* two tiles on one CTA */
    test_gated(40000, 128, 128, MF_LN_SCALE, 1, 0, s += 20, 3); /* several tiles per CTA */
    test_transition(40000, 128, 512, MF_LN_NONE, 1, 0, s += 20, 3);
    test_transition(300, 128, 512, MF_LN_FULL, 1, 0, s += 20, 3);
    test_transition(129, 128, 128, MF_LN_NONE, 0, 0, s += 20, 3);
    mf_ln_gemm_bwd_set_variant(-1);
    test_transition_cl(&s, 0);
    /* the wgmma input projection (channel-major) and the fused output side */
    test_trimul(33, 128, 128, 0, 1, 1, 0, s += 20);
    test_trimul(65, 128, 128, 1, 1, 0, 1024, s += 20);
    /* the GEMM + LayerNorm backward (TMA and cp.async): two terms, several tiles per CTA */
    test_gemm_ln_bwd(40000, 64, 64, 8, MF_LN_SCALE, 1, s += 20);
    test_gemm_ln_bwd(300, 136, 144, 0, MF_LN_FULL, 0, s += 20);
    mf_cuda_blas_destroy(&g_blas); /* after the last test that uses it (was before test_trimul) */
    return mf_test_end();
  }

  /* variant 3: the wgmma kernel of ln_gemm_wg.cu where the shape allows it (C 64/128,
   * O % 64 == 0; else 2); 2: the mma.sync kernels of ln_gemm.cu where the shape allows it
   * (else 1); 1: staging + cuBLAS; 0: the WMMA fused kernel where the shape allows it
   * (else 1) */
  test_gemm_helpers(&s); /* first: every EvoFusion op's cuBLAS path goes through them */
  const int default_variant = mf_ln_linear_cuda_set_variant(1);
  for (int v = 0; v < 4; v++) {
    test_ln_linear(7, 128, 16, MF_LN_FULL, 1, 0, s += 20, v);
    test_ln_linear(300, 128, 384, MF_LN_SCALE, 0, 0, s += 20, v);
    test_ln_linear(4099, 128, 128, MF_LN_FULL, 1, 1024, s += 20, v);
    test_ln_linear(4099, 384, 4, MF_LN_NONE, 0, 0, s += 20, v);
    test_ln_linear(300, 64, 1024, MF_LN_FULL, 0, 256, s += 20, v);
    test_ln_linear(300, 128, 640, MF_LN_FULL, 1, 0, s += 20, v);
    test_ln_linear(301, 256, 128, MF_LN_NONE, 1, 0, s += 20, v);
    test_ln_linear(129, 192, 64, MF_LN_FULL, 0, 0, s += 20, v);

    test_gated(7, 128, 16, MF_LN_FULL, 1, 0, s += 20, v);
    test_gated(300, 128, 128, MF_LN_FULL, 1, 0, s += 20, v);
    test_gated(4099, 128, 64, MF_LN_IDENTITY, 0, 1024, s += 20, v);
    test_gated(4099, 128, 128, MF_LN_SCALE, 1, 1024, s += 20, v);
    test_gated(300, 40, 20, MF_LN_FULL, 1, 256, s += 20, v); /* widths not multiples of 8 */
    test_gated(257, 256, 192, MF_LN_FULL, 0, 0, s += 20, v);
    /* shapes the mma.sync kernel takes: partial tiles, 1 or 2 row buffers, several passes */
    test_ln_linear(1000, 128, 256, MF_LN_FULL, 1, 0, s += 20, v);
    test_ln_linear(129, 64, 48, MF_LN_SCALE, 1, 0, s += 20, v);
    test_gated(1000, 128, 192, MF_LN_FULL, 1, 0, s += 20, v);
    test_gated(129, 64, 16, MF_LN_NONE, 1, 0, s += 20, v);
    test_gated(300, 192, 96, MF_LN_IDENTITY, 1, 0, s += 20, v);
    if (v >= 2) { /* the wgmma kernel's edges (and the same shapes through mma.sync) */
      test_ln_linear(7, 128, 64, MF_LN_FULL, 1, 0, s += 20, v);      /* M < 64: one subtile */
      test_ln_linear(100, 128, 192, MF_LN_NONE, 0, 0, s += 20, v);   /* 128 + 64 columns */
      test_ln_linear(17000, 128, 128, MF_LN_FULL, 1, 0, s += 20, v); /* > 132 tiles */
      test_ln_linear(1, 64, 320, MF_LN_SCALE, 1, 0, s += 20, v);     /* M = 1, 128 + 128 + 64 */
      test_ln_linear(4099, 128, 384, MF_LN_FULL, 0, 0, s += 20, v);  /* 2 row buffers */
      test_gated(7, 128, 64, MF_LN_NONE, 1, 0, s += 20, v);
      test_gated(17000, 128, 128, MF_LN_FULL, 1, 0, s += 20, v);
      test_gated(193, 64, 256, MF_LN_SCALE, 0, 0, s += 20, v);
      test_gated(300, 128, 192, MF_LN_IDENTITY, 1, 0, s += 20, v);
    }
  }
  mf_ln_linear_cuda_set_variant(default_variant);

  for (int v = 0; v < 4; v++) { /* 3: the wgmma kernel (C = 128) */
    test_transition(7, 128, 512, MF_LN_FULL, 0, 0, s += 20, v);
    test_transition(300, 128, 512, MF_LN_FULL, 1, 0, s += 20, v);
    test_transition(4099, 128, 512, MF_LN_FULL, 0, 1024, s += 20, v);
    test_transition(300, 384, 1536, MF_LN_FULL, 0, 0, s += 20, v);
    test_transition(300, 128, 256, MF_LN_IDENTITY, 1, 256, s += 20, v);
    test_transition(300, 128, 512, MF_LN_NONE, 0, 0, s += 20, v);
    test_transition(300, 40, 36, MF_LN_FULL, 1, 256, s += 20, v); /* widths not multiples of 8 */
    test_transition(129, 256, 192, MF_LN_SCALE, 0, 0, s += 20, v);
    test_transition(1000, 64, 128, MF_LN_SCALE, 1, 0, s += 20, v);
    test_transition(300, 128, 192, MF_LN_IDENTITY, 0, 0, s += 20, v);
    if (v >= 2) /* more 128-row tiles than an H200's 132 persistent CTAs */
      test_transition(17000, 128, 512, MF_LN_SCALE, 1, 0, s += 20, v);
  }
  test_transition_cl(&s, 0);
  for (int v = 1; v < 4; v++) {
    test_transition_inplace(4099, 128, 512, MF_LN_FULL, s += 20, v);
    test_transition_inplace(300, 64, 256, MF_LN_NONE, s += 20, v);
    test_transition_inplace(300, 384, 1536, MF_LN_FULL, s += 20, v); /* fallback */
  }
  /* the wgmma forwards (LN + Linear, gated) with three warpgroups per CTA against two, bit
   * for bit */
  g_lnl_nwg_ab = 1;
  test_ln_linear(40000, 128, 128, MF_LN_FULL, 1, 0, s += 20, 3);
  test_ln_linear(1001, 64, 128, MF_LN_SCALE, 0, 0, s += 20, 3);
  test_ln_linear(4099, 128, 64, MF_LN_NONE, 1, 0, s += 20, 3);
  test_gated(40000, 128, 128, MF_LN_FULL, 1, 0, s += 20, 3);
  test_gated(1001, 64, 128, MF_LN_SCALE, 0, 0, s += 20, 3);
  g_lnl_nwg_ab = 0;
  mf_ln_linear_cuda_set_variant(default_variant);
  test_ln_gemm_swiglu(300, 128, 128, MF_LN_FULL, s += 20, 0);
  test_ln_gemm_swiglu(1000, 64, 80, MF_LN_SCALE, s += 20, 0);
  test_ln_gemm_swiglu(129, 256, 64, MF_LN_NONE, s += 20, 0);
  /* the wgmma kernel (ln_gemm_wg.cu): partial and tiny tiles, O = 64..192 (one to three
   * interleaved [W_a; W_b] passes), more 128-row tiles than an H200's 132 CTAs */
  test_ln_gemm_swiglu(300, 128, 128, MF_LN_FULL, s += 20, 1);
  test_ln_gemm_swiglu(1000, 64, 192, MF_LN_SCALE, s += 20, 1);
  test_ln_gemm_swiglu(17000, 128, 64, MF_LN_NONE, s += 20, 1);
  test_ln_gemm_swiglu(7, 128, 192, MF_LN_FULL, s += 20, 1);
  test_ln_gemm_swiglu(129, 128, 64, MF_LN_IDENTITY, s += 20, 1);

  /* The backward's paths on the shapes the fused kernel takes (C 64/128, O % 64 == 0):
   * bv = 1..3 the fused kernel's configurations (ln_gemm_bwd_cuda.h), 4..6 its light
   * configurations (the transition only: LINEAR and GATED would run staging, so they are
   * skipped there), bv = 0 staging + cuBLAS; the other cases above ran with each kind's
   * default.
   * M not a multiple of the 128-row tile, masks, FULL/SCALE/NONE, multi-chunk, the adding
   * transition backward in place (dinp = dout), gradients skipped. */
  for (int bv = 7; bv >= 0; bv--) { /* 7 (wgmma, LINEAR); 6, 5, 4 (light), 3, 2, 1; staging */
    mf_ln_gemm_bwd_set_variant(bv);
    printf("test_fusion_gpu: backward configuration %d (mf_ln_gemm_bwd_set_variant)\n", bv);
    if (bv == 7) { /* the wgmma LN + Linear backward: C = 128, O = 64 / 128 (else staging);
                    the gated and transition cases below run ln_gemm_bwd_wg.cu */
      const int64_t calls0 = mf_ln_linear_bwd_wg_calls();
      test_ln_linear(1000, 128, 128, MF_LN_FULL, 1, 0, s += 20, 1);  /* partial last tile */
      /* each test_ln_linear runs the backward twice (the determinism rerun) */
      MF_TEST(mf_ln_linear_bwd_wg_calls() == calls0 + 2,
              "backward configuration 7: ln_linear took the wgmma kernel (%lld launches)",
              (long long)(mf_ln_linear_bwd_wg_calls() - calls0));
      test_ln_linear(1, 128, 128, MF_LN_FULL, 1, 0, s += 20, 1);     /* one row */
      test_ln_linear(17000, 128, 128, MF_LN_SCALE, 1, 0, s += 20, 1); /* > 132 tiles */
      test_ln_linear(4099, 128, 64, MF_LN_NONE, 1, 1024, s += 20, 1); /* O = 64 */
      test_ln_linear(129, 128, 64, MF_LN_FULL, 0, 0, s += 20, 1);
      test_ln_linear(256, 128, 128, MF_LN_NONE, 0, 0, s += 20, 1);   /* whole tiles */
      test_ln_linear(17000, 128, 64, MF_LN_FULL, 1, 0, s += 20, 1);
      const int64_t calls1 = mf_ln_linear_bwd_wg_calls();
      test_ln_linear(1000, 64, 256, MF_LN_SCALE, 1, 0, s += 20, 1);  /* not taken: staging */
      MF_TEST(mf_ln_linear_bwd_wg_calls() == calls1, "backward configuration 7: C = 64 runs staging");
      for (g_lnl_null = 1; g_lnl_null <= 2; g_lnl_null++) {         /* NULL gradients */
        test_ln_linear(1000, 128, 128, MF_LN_FULL, 1, 0, s += 20, 1);
        test_ln_linear(300, 128, 64, MF_LN_SCALE, 1, 0, s += 20, 1);
      }
      g_lnl_null = 0;
    }
    if (bv <= 3 || bv == 7) { /* 7: gated on the wgmma kernel (C = 128), LINEAR as above */
      test_ln_linear(1000, 64, 256, MF_LN_SCALE, 1, 0, s += 20, 1);
      test_ln_linear(4099, 128, 64, MF_LN_NONE, 0, 1024, s += 20, 1);
      test_ln_linear(1, 128, 128, MF_LN_FULL, 0, 0, s += 20, 1);
      test_gated(1000, 64, 128, MF_LN_NONE, 1, 0, s += 20, 1);
      test_gated(4099, 128, 256, MF_LN_FULL, 1, 1024, s += 20, 1);
      test_gated(130, 128, 64, MF_LN_SCALE, 0, 0, s += 20, 1);
    }
    test_transition(1000, 64, 256, MF_LN_SCALE, 1, 0, s += 20, 1);
    test_transition(4099, 128, 512, MF_LN_NONE, 1, 1024, s += 20, 1);
    test_transition(129, 128, 64, MF_LN_FULL, 0, 0, s += 20, 1);
    test_transition(7, 64, 128, MF_LN_FULL, 1, 0, s += 20, 1);
    test_transition(2000, 128, 512, MF_LN_SCALE, 1, 512, s += 20, 1);
    test_transition_null(1000, 128, 512, MF_LN_FULL, s += 20);
    test_transition_null(300, 64, 128, MF_LN_SCALE, s += 20);
    test_transition(1, 128, 128, MF_LN_FULL, 1, 0, s += 20, 1); /* one row, in place */
    if (bv == 7) { /* the wgmma kernels: more tiles than SMs, in place, every LN mode */
      test_transition(17000, 128, 512, MF_LN_FULL, 1, 0, s += 20, 3);
      test_transition(17000, 128, 256, MF_LN_SCALE, 0, 0, s += 20, 3);
      test_transition(300, 128, 512, MF_LN_NONE, 1, 0, s += 20, 3);
      test_transition_null(4099, 128, 512, MF_LN_SCALE, s += 20);
      test_gated(17000, 128, 128, MF_LN_FULL, 1, 0, s += 20, 3);
      test_gated(300, 128, 64, MF_LN_NONE, 0, 0, s += 20, 3);
      test_gated(1000, 128, 192, MF_LN_SCALE, 1, 0, s += 20, 3);
      /* two and three tiles per CTA: the raw-row / y buffers swap roles tile by tile, the
       * weights stay resident (gated O = 128) or stream (transition) */
      test_gated(40000, 128, 128, MF_LN_SCALE, 1, 0, s += 20, 3);
      test_transition(40000, 128, 512, MF_LN_FULL, 1, 0, s += 20, 3);
      test_gated(40001, 128, 64, MF_LN_NONE, 0, 0, s += 20, 3);
      /* one row, a partial second tile, a partial last tile with several tiles per CTA */
      test_gated(1, 128, 128, MF_LN_FULL, 1, 0, s += 20, 3);
      test_gated(65, 128, 128, MF_LN_SCALE, 0, 0, s += 20, 3);
      test_gated(40001, 128, 128, MF_LN_FULL, 1, 0, s += 20, 3);
    }
  }
  mf_ln_gemm_bwd_set_variant(-1);

  test_dropout(33, 33, 128, MF_DROPOUT_ROWWISE, 0.25, s += 20);
  test_dropout(33, 33, 128, MF_DROPOUT_COLWISE, 0.25, s += 20);
  test_dropout(7, 65, 20, MF_DROPOUT_ROWWISE, 0.5, s += 20);
  test_dropout(65, 7, 20, MF_DROPOUT_COLWISE, 0.0, s += 20);
  /* the slot kernel (C % 8 == 0; COLWISE only from C = 64): uneven pieces, C = 40 / 64 */
  test_dropout(300, 257, 128, MF_DROPOUT_ROWWISE, 0.25, s += 20);
  test_dropout(257, 300, 64, MF_DROPOUT_COLWISE, 0.25, s += 20);
  test_dropout(7, 65, 40, MF_DROPOUT_ROWWISE, 0.5, s += 20);
  test_dropout(65, 7, 40, MF_DROPOUT_COLWISE, 0.5, s += 20); /* grid-stride kernel */
  test_dropout(1, 3, 128, MF_DROPOUT_ROWWISE, 0.25, s += 20);
  /* a forward above 64 MiB (the default takes the grid-stride kernel there, the slot
   * kernel for the backward) */
  test_dropout(520, 520, 128, MF_DROPOUT_COLWISE, 0.25, s += 20);

  /* the LayerNorm row kernels alone: the vectorised ones (forward C = 64 / 128 / 256,
   * backward C = 64 / 128) with partial row groups, one row, more row groups than the
   * persistent grid's warps (M = 70001 at C = 128), and the generic ones (C = 40, 384) */
  test_ln_rows(1000, 128, MF_LN_FULL, 0, s += 20);
  test_ln_rows(70001, 128, MF_LN_SCALE, 1, s += 20);
  test_ln_rows(1, 128, MF_LN_NONE, 0, s += 20);
  test_ln_rows(9000, 64, MF_LN_FULL, 1, s += 20);
  test_ln_rows(300, 256, MF_LN_SCALE, 0, s += 20);
  test_ln_rows(129, 40, MF_LN_NONE, 1, s += 20);
  test_ln_rows(77, 384, MF_LN_FULL, 0, s += 20);
  test_ln_rows(1003, 64, MF_LN_NONE, 0, s += 20); /* half-warp forwards: partial row groups */
  test_ln_rows(3, 256, MF_LN_FULL, 1, s += 20);
  test_ln_rows(2, 128, MF_LN_SCALE, 0, s += 20);

  /* GEMM + LayerNorm backward (gemm_ln_bwd_wg.cu): one row; partial 128-row tiles; more
   * tiles than SMs (several per CTA, the ring across tiles); K of 1, 2 and 3+ steps (the
   * prefetch distance), K % 64 != 0 (zero-filled columns), lda > K; the triangle
   * attention's width (520) */
  test_gemm_ln_bwd(1, 64, 64, 0, MF_LN_FULL, 0, s += 20);
  test_gemm_ln_bwd(129, 8, 16, 0, MF_LN_SCALE, 1, s += 20);
  test_gemm_ln_bwd(300, 136, 144, 0, MF_LN_NONE, 0, s += 20);
  test_gemm_ln_bwd(1000, 520, 520, 0, MF_LN_FULL, 1, s += 20);
  test_gemm_ln_bwd(40000, 192, 200, 0, MF_LN_FULL, 0, s += 20);
  /* two terms (the trimul's dP4·W4 + dgl·W_g: K = 512 + 128), a short and an odd second */
  test_ln_param_reduce(1, 128, s += 20);
  test_ln_param_reduce(133, 64, s += 20);
  test_ln_param_reduce(1056, 128, s += 20);
  test_ln_param_reduce(4096, 16, s += 20);
  test_ln_param_reduce(5001, 128, s += 20); /* the two-stage reduce */
  test_gemm_ln_bwd(17000, 512, 640, 128, MF_LN_FULL, 1, s += 20);
  test_gemm_ln_bwd(333, 64, 64, 8, MF_LN_SCALE, 0, s += 20);
  test_gemm_ln_bwd(1000, 128, 136, 72, MF_LN_FULL, 1, s += 20);

  /* the trimul's chunk staging lives in its dead gradient planes (host-side sizes): at the
   * AF3 sizes the workspace is sg (N², C) + three (Ch, N²) planes + what phase 3's staging
   * needs beyond one plane (2 KiB a row in tri_chunk's chunks, or 1.25 KiB a row in the
   * fully fused backward's larger ones) + the partials and mask (1350 MiB at N = 768 with a
   * staging region of its own, 4 KiB a row) */
  for (int n = 384; n <= 1024; n += 128) {
    const double m = (double)n * n, planes = m * 128 * 2 * 4;
    const double rows = (double)mf_fusion_chunk_rows((int64_t)n * n, 128 * 8 + 128 * 10);
    const double rows_f = (double)mf_fusion_chunk_rows_in((int64_t)n * n, 128 * 2 + 128 * 8,
                                                          (size_t)1 << 30);
    const double stage = rows * 2048 > rows_f * 1280 ? rows * 2048 : rows_f * 1280;
    const double wsz = (double)mf_trimul_cuda_workspace(n, 128, 128);
    MF_TEST(wsz <= planes + stage - m * 256 + (16 << 20),
            "trimul workspace N=%d C=Ch=128: %.1f MiB (sg and the planes: %.1f MiB)", n,
            wsz / 1048576.0, planes / 1048576.0);
  }
  test_trimul(7, 128, 128, 1, 0, 0, 0, s += 20);
  test_trimul(7, 128, 128, 0, 1, 0, 0, s += 20);
  test_trimul(33, 128, 128, 1, 1, 1, 0, s += 20);
  test_trimul(33, 128, 128, 0, 0, 1, 0, s += 20);
  test_trimul(33, 64, 32, 1, 1, 0, 256, s += 20);
  test_trimul(65, 128, 128, 1, 1, 0, 1024, s += 20);
  test_trimul(65, 128, 128, 0, 1, 1, 1024, s += 20);
  test_trimul(9, 20, 12, 0, 1, 1, 0, s += 20); /* channels not multiples of 8 */
  { /* the backward's first phase as before trimul_ph1_wg.cu (out_proj_wg.cu's TRI_BWD
     * kernel, two cuBLAS GEMMs, the channel-major LN backward) */
    const int ph1 = mf_trimul_ph1_wg_set(0);
    test_trimul(33, 128, 128, 1, 1, 1, 0, s += 20);
    test_trimul(65, 128, 128, 0, 1, 1, 1024, s += 20);
    mf_trimul_ph1_wg_set(ph1);
  }
  /* 625 subtiles of 64 rows: the fused output side's warpgroups take two each (both T
   * buffers), M % 64 == 0 */
  test_trimul(200, 128, 128, 0, 1, 1, 0, s += 20);
  /* N² % 8 == 0: the vectorised transposing kernels (variant 1, the default) — full and
   * partial 64-row tiles, chunks of 8k rows (104, 40), Ch/8 not a power of two (24),
   * Ch = 256 (shared memory above 48 KiB), Ch = 8; chunk 96 of M = 1156 ends in a
   * 4-row chunk; a forced chunk of 100 rows is rounded down to 96 (trimul keeps chunk
   * starts on the 8-column grid) */
  test_trimul(16, 128, 128, 1, 1, 1, 0, s += 20);
  test_trimul(20, 128, 128, 0, 1, 0, 104, s += 20);
  test_trimul(16, 40, 24, 0, 1, 0, 0, s += 20);
  test_trimul(8, 16, 256, 1, 1, 0, 0, s += 20);
  /* Ch = 8 with C = 16: at C = 8 the 8-element d ln_in_b (a cancelling sum over 256 rows)
   * carried 1.08e-2 of bf16 noise against the 1e-2 tolerance while dz and d ln_in_g of the
   * same run were at 4.7e-3 (H200, 2026-11-30) */
  test_trimul(16, 16, 8, 1, 0, 1, 40, s += 20);
  test_trimul(34, 64, 32, 1, 1, 1, 96, s += 20);
  test_trimul(34, 64, 32, 0, 1, 0, 100, s += 20);
  /* variant 1 (the vectorised gate kernel where the default takes the fused wgmma input
   * projection, variant 2): the same shapes as the default's */
  const int tri_default = mf_trimul_cuda_set_variant(1);
  test_trimul(7, 128, 128, 0, 1, 0, 0, s += 20);
  test_trimul(65, 128, 128, 1, 1, 0, 1024, s += 20);
  /* variant 0: the scalar kernels on the same even shapes */
  mf_trimul_cuda_set_variant(0);
  test_trimul(16, 128, 128, 1, 1, 1, 0, s += 20);
  test_trimul(20, 128, 128, 0, 1, 0, 104, s += 20);
  /* N² % 8 != 0 (N % 4 != 0), masks, in all three variants: the channel-major arrays have the
   * padded stride ldm = N² rounded up to 8 (NaN-poisoned padding in the saved buffer and
   * the workspace), so the vectorised kernels run here too, the last chunk ending in a
   * tail tile of nr % 8 != 0 rows. Chunks forced small: 200 (M = 1369: 6 chunks of 200,
   * then 169 rows), 300 → 296 (M = 2500: last chunk 132 rows), 500 → 496 (M = 3969, Ch
   * = 24: last chunk 497 rows), 5 → 8 (M = 81: 10 chunks of 8, then 1 row), 4000 (M =
   * 16900: last chunk 900 rows, 4 mod 8); single chunks at M = 2500 and M = 36 (< 64 rows,
   * ldm = 40). Variant 0 first, then 1, then the default. */
  for (int tv = 0; tv < 3; tv++) {
    mf_trimul_cuda_set_variant(tv == 0 ? 0 : tv == 1 ? 1 : tri_default);
    test_trimul(37, 64, 32, 0, 1, 1, 200, s += 20);
    test_trimul(50, 128, 128, 1, 1, 0, 0, s += 20);
    test_trimul(50, 64, 32, 0, 1, 1, 300, s += 20);
    test_trimul(63, 64, 24, 1, 1, 0, 500, s += 20);
    test_trimul(9, 64, 16, 1, 1, 0, 5, s += 20);
    test_trimul(130, 64, 32, 1, 1, 1, 4000, s += 20);
    test_trimul(6, 128, 64, 0, 1, 0, 0, s += 20);
    test_trimul(33, 128, 128, 0, 1, 0, 256, s += 20);
  }
  mf_trimul_cuda_set_variant(tri_default);
  /* phase 3 as before trimul_ph3_wg.cu: the two gated-backward kernels and the GEMM +
   * LayerNorm backward kernel; then also without the latter (cuBLAS into fp32 dx̂, then the
   * row kernel), as before it */
  const int ph3_on = mf_trimul_ph3_wg_set(0);
  test_trimul(7, 128, 128, 0, 1, 0, 0, s += 20);
  test_trimul(33, 128, 128, 1, 1, 1, 0, s += 20);
  test_trimul(65, 128, 128, 0, 1, 1, 1024, s += 20);
  const int gl_on = mf_gemm_ln_bwd_set_enabled(0);
  test_trimul(33, 128, 128, 1, 1, 1, 0, s += 20);
  test_trimul(65, 128, 128, 0, 1, 1, 1024, s += 20);
  mf_gemm_ln_bwd_set_enabled(gl_on);
  mf_trimul_ph3_wg_set(ph3_on);

  mf_cuda_blas_destroy(&g_blas);
  return mf_test_end();
}
