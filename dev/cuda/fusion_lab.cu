/* fusion_lab.cu — EvoFusion kernel lab: the forward variants of LayerNorm + Linear and of
 * the SwiGLU transition side by side, each validated against the CPU reference (linked
 * from libmegafold_f64.a, never copied) and timed on the pair-sized problem.
 *   variant 1: "L2 chunks" — LN staging + cuBLAS in chunks of about 24 MiB of staging, so
 *              that the normalised rows and the transition's 4c hidden stay in L2 between
 *              the kernel that writes them and the GEMM that reads them (19456 rows for
 *              LN + Linear 128 → 128, 5120 rows for the transition: bytes per row
 *              C·6 + O·4 and C·6 + Hd·8);
 *   variant 2: "one pass" — the staging path (the fallback): LN staging + cuBLAS with
 *              mf_fusion_chunk_rows' budget (MF_FUSION_STAGING_BYTES, one chunk here);
 *   variant 3 (LN + Linear only): the custom fused kernel — LN in registers into shared
 *              memory, WMMA tensor-core GEMM, one store (mf_ln_linear_cuda_set_variant 0);
 *   variant 4: the mma.sync kernels of ln_gemm.cu (mf_ln_linear_cuda_set_variant 2):
 *              persistent LN + GEMM with W resident, and the whole transition in one
 *              kernel (hidden chunked through shared memory).
 * Results on an H200 (2026-11-30, N = 384, ms, variants 1 / 2 / 3 / 4): LN + Linear
 * 0.140 / 0.064 / 0.117 / 0.045; transition 0.719 / 0.326 / — / 0.254; N = 768: LN +
 * Linear 0.476 / 0.239 / 0.426 / 0.143, transition 3.18 / 1.27 / — / 0.958. L2
 * residency does not pay for the small per-chunk GEMMs, the WMMA kernel is slower than
 * staging (ln_linear.cu says why), and variant 4 (mf_ln_linear_cuda_set_variant 2) is the
 * production default.
 *   build-…/dev/fusion_lab [N [reps]]      (M = N², default N = 384, C = 128, 20 reps) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ops/cuda/device.h"
#include "ops/cuda/gemm_cuda.h"
#include "ops/cuda/gpu.h"
#include "ops/cuda/ln_linear_cuda.h"
#include "ops/cuda/transition_cuda.h"
#include "ops/ln_linear.h"
#include "ops/transition.h"

static mf_bf16_t *dev_rand(int64_t n, uint64_t seed, double scale, double offset, double *keep) {
  mf_bf16 *h = (mf_bf16 *)malloc((size_t)n * sizeof(mf_bf16));
  MF_CHECK_PTR(h);
  for (int64_t i = 0; i < n; i++) {
    h[i] = mf_bf16_from_f32((float)(scale * mf_rng_normal(seed, MF_RNG_TEST, (uint64_t)i) + offset));
    if (keep) keep[i] = mf_f32_from_bf16(h[i]);
  }
  mf_bf16_t *d = NULL;
  MF_CHECK_CUDA(cudaMalloc(&d, (size_t)n * 2));
  MF_CHECK_CUDA(cudaMemcpy(d, h, (size_t)n * 2, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

static double relerr_dev(const mf_bf16_t *d, const double *ref, int64_t n) {
  mf_bf16 *h = (mf_bf16 *)malloc((size_t)n * sizeof(mf_bf16));
  MF_CHECK_PTR(h);
  MF_CHECK_CUDA(cudaMemcpy(h, d, (size_t)n * 2, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double g = mf_f32_from_bf16(h[i]);
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
  }
  free(h);
  return isfinite(num) ? sqrt(num / (den > 0 ? den : 1)) : INFINITY;
}

typedef void (*lab_fn)(void *ctx);

static float time_ms(lab_fn fn, void *ctx, int reps) {
  cudaEvent_t e0, e1;
  MF_CHECK_CUDA(cudaEventCreate(&e0));
  MF_CHECK_CUDA(cudaEventCreate(&e1));
  fn(ctx);
  fn(ctx);
  float best = 1e30f;
  for (int r = 0; r < reps; r++) {
    MF_CHECK_CUDA(cudaEventRecord(e0, 0));
    fn(ctx);
    MF_CHECK_CUDA(cudaEventRecord(e1, 0));
    MF_CHECK_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    MF_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    if (ms < best) best = ms;
  }
  MF_CHECK_CUDA(cudaEventDestroy(e0));
  MF_CHECK_CUDA(cudaEventDestroy(e1));
  return best;
}

typedef struct {
  mf_cuda_blas *blas;
  int64_t M;
  int C, O;
  mf_bf16_t *x, *g, *b, *w, *w2, *out;
  float *mean, *rstd;
  void *ws;
  size_t wsb;
  int transition;
} lab_ctx;

static void run_fwd(void *p) {
  lab_ctx *c = (lab_ctx *)p;
  if (c->transition)
    mf_transition_forward_cuda(c->out, c->mean, c->rstd, c->x, c->g, c->b, c->w, c->w2, c->M, c->C,
                               c->O, MF_LN_FULL, 0, c->ws, c->wsb, c->blas, 0);
  else
    mf_ln_linear_forward_cuda(c->out, c->mean, c->rstd, c->x, c->g, c->b, c->w, NULL, c->M, c->C,
                              c->O, MF_LN_FULL, c->ws, c->wsb, c->blas, 0);
}

int main(int argc, char **argv) {
  const int N = argc > 1 ? atoi(argv[1]) : 384, C = 128;
  const int reps = argc > 2 ? atoi(argv[2]) : 20; /* 1 under compute-sanitizer */
  const int64_t M = (int64_t)N * N, Mv = 2048; /* Mv rows validated against the CPU */
  if (mf_cuda_init(0) != MF_OK) {
    fprintf(stderr, "fusion_lab: %s\n", mf_error_message());
    return 1;
  }
  mf_cuda_blas blas;
  mf_cuda_blas_create(&blas, 0);
  const int default_variant = mf_ln_linear_cuda_set_variant(1);
  printf("fusion_lab: M = %d² = %lld rows, C = %d\n", N, (long long)M, C);
  printf("%-12s %-16s %10s %10s %12s\n", "op", "variant", "relerr", "ms", "GB/s(min)");
  for (int tr = 0; tr < 2; tr++) {
    const int O = tr ? 4 * C : 128; /* transition: Hd = 4C */
    double *xh = (double *)malloc((size_t)M * C * sizeof(double));
    double *gh = (double *)malloc(C * sizeof(double)), *bh = (double *)malloc(C * sizeof(double));
    const int64_t nw = tr ? 2 * (int64_t)O * C : (int64_t)O * C, nw2 = tr ? (int64_t)C * O : 1;
    double *wh = (double *)malloc((size_t)nw * sizeof(double));
    double *w2h = (double *)malloc((size_t)nw2 * sizeof(double));
    lab_ctx c = {&blas, M, C, O, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, tr};
    c.x = dev_rand(M * C, 1, 1.5, 0.3, xh);
    c.g = dev_rand(C, 2, 0.2, 1.0, gh);
    c.b = dev_rand(C, 3, 0.2, 0.0, bh);
    c.w = dev_rand(nw, 4, 1.0 / sqrt((double)C), 0, wh);
    c.w2 = tr ? dev_rand(nw2, 5, 1.0 / sqrt((double)O), 0, w2h) : NULL;
    const int Oo = tr ? C : O;
    MF_CHECK_CUDA(cudaMalloc(&c.out, (size_t)M * Oo * 2));
    MF_CHECK_CUDA(cudaMalloc(&c.mean, (size_t)M * 4));
    MF_CHECK_CUDA(cudaMalloc(&c.rstd, (size_t)M * 4));
    /* reference on the first Mv rows */
    double *ref = (double *)malloc((size_t)Mv * Oo * sizeof(double));
    double *mu = (double *)malloc(Mv * sizeof(double)), *rs = (double *)malloc(Mv * sizeof(double));
    if (tr)
      mf_transition_forward(ref, mu, rs, xh, gh, bh, wh, wh + (int64_t)O * C, w2h, Mv, C, O, MF_LN_FULL);
    else
      mf_ln_linear_forward(ref, mu, rs, xh, gh, bh, wh, NULL, Mv, C, O, MF_LN_FULL);
    for (int v = 1; v <= 4; v++) {
      if (tr && v == 3) continue;
      mf_fusion_set_chunk_rows(v == 1 ? (tr ? 5120 : 19456) : 0);
      mf_ln_linear_cuda_set_variant(v == 3 ? 0 : v == 4 ? 2 : 1);
      c.wsb = tr ? mf_transition_cuda_workspace(M, C, O) : mf_ln_linear_cuda_workspace(M, C, O, 0);
      MF_CHECK_CUDA(cudaMalloc(&c.ws, c.wsb));
      run_fwd(&c);
      MF_CHECK_CUDA(cudaDeviceSynchronize());
      double err = relerr_dev(c.out, ref, Mv * Oo);
      float ms = time_ms(run_fwd, &c, reps);
      double bytes = (double)M * (C + Oo) * 2;
      printf("%-12s %-16s %10.2e %10.4f %12.1f\n", tr ? "transition" : "ln_linear",
             v == 1 ? "1 L2 chunks" : v == 2 ? "2 one pass" : v == 3 ? "3 fused wmma" : "4 mma.sync", err, ms, bytes / ms / 1e6);
      MF_CHECK_CUDA(cudaFree(c.ws));
    }
    mf_fusion_set_chunk_rows(0);
    mf_ln_linear_cuda_set_variant(default_variant);
    cudaFree(c.x); cudaFree(c.g); cudaFree(c.b); cudaFree(c.w); cudaFree(c.w2);
    cudaFree(c.out); cudaFree(c.mean); cudaFree(c.rstd);
    free(xh); free(gh); free(bh); free(wh); free(w2h); free(ref); free(mu); free(rs);
  }
  mf_cuda_blas_destroy(&blas);
  return 0;
}
