/* bwd_lab.cu — lab of the fused LayerNorm + GEMM backward (src/ops/cuda/ln_gemm_bwd.cu)
 * against the staging + cuBLAS backward it replaces, on the pair-sized problems of
 * bench/evofusion.cu (M = N² rows, C = 128; LN + Linear 128 → 128, gated projection
 * 128 → 128, SwiGLU transition Hd = 512, mode FULL): each backward timed as staging +
 * cuBLAS and in the fused kernel's configurations 1..3 in the same process (median of
 * CUDA-event timed repetitions, the variants interleaved call by call), the relative L2
 * difference between each configuration's dinp / weight gradient and staging's, and for
 * the transition the fused kernel alone and the two weight-gradient GEMMs alone (where
 * the time goes). Not a correctness test (tests/gpu/test_fusion_gpu.cu is), not the
 * benchmark of record (bench/evofusion.cu is).
 * Result on an H200 (2026-11-30): every fused configuration slower than staging (0.72–
 * 0.94×; transition N = 768: staging 3.036 ms, best fused 3.243 ms, of which the kernel
 * alone 2.447 ms and the dW GEMMs 0.519 ms); numbers in src/ops/cuda/ln_gemm_bwd.cu.
 * Relative differences fused vs staging: dinp ≤ 4.1e-3, dW ≤ 3.5e-3 (bf16 rounding of
 * a, b, dh in staging; the fused kernel keeps them fp32).
 * Configurations 4..6 (the light kernel, transition only) are timed alongside; for the
 * other two ops they run staging.
 *   build-…/dev/bwd_lab [N,N,...]      (default 384,768) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/device.h"
#include "ops/cuda/gemm_cuda.h"
#include "ops/cuda/gpu.h"
#include "ops/cuda/ln_gemm_bwd_cuda.h"
#include "ops/cuda/ln_linear_cuda.h"
#include "ops/cuda/transition_cuda.h"

#include "../../bench/bench_util.h"

#define C_PAIR 128
#define HD (4 * C_PAIR)
#define REPS 15

static mf_cuda_blas g_blas;

typedef struct {
  int64_t M;
  int op; /* 0 ln_linear, 1 gated, 2 transition, 3 transition adding in place, 4 fused kernel
             alone (transition), 5 the transition's two dW GEMMs alone, 6 the wgmma kernel
             (configuration 7) alone with parts switched off */
  mf_bf16_t *x, *dout, *out, *dx, *g, *b, *w1, *w2;
  float *mean, *rstd, *dg, *db, *dw1, *dw2;
  void *ws;
  size_t wsb;
  int wg_mask; /* op 6 */
} prob;

static void run(prob *p) {
  const int64_t M = p->M;
  const int C = C_PAIR;
  switch (p->op) {
  case 0:
    mf_ln_linear_backward_cuda(p->dx, p->dg, p->db, p->dw1, NULL, p->dout, p->mean, p->rstd, p->x,
                               p->g, p->b, p->w1, M, C, C, MF_LN_FULL, p->ws, p->wsb, &g_blas, 0);
    break;
  case 1:
    mf_gated_linear_backward_cuda(p->dx, p->dg, p->db, p->dw1, p->dout, p->mean, p->rstd, p->x,
                                  p->g, p->b, p->w1, NULL, M, C, C, MF_LN_FULL, p->ws, p->wsb,
                                  &g_blas, 0);
    break;
  case 2:
    mf_transition_backward_cuda(p->dx, p->dg, p->db, p->dw1, p->dw2, p->dout, p->mean, p->rstd,
                                p->x, p->g, p->b, p->w1, p->w2, M, C, HD, MF_LN_FULL, p->ws,
                                p->wsb, &g_blas, 0);
    break;
  case 3: /* in place: dinp = dout = dx (its contents drift; the time does not) */
    mf_transition_backward_add_cuda(p->dx, p->dg, p->db, p->dw1, p->dw2, p->dx, p->mean, p->rstd,
                                    p->x, p->g, p->b, p->w1, p->w2, M, C, HD, MF_LN_FULL, p->ws,
                                    p->wsb, &g_blas, 0);
    break;
  case 4: { /* the fused kernel over all rows at once (workspace of one chunk of M rows);
               the light configurations without dinp and partials (they form no dy) */
    mf_bf16_t *y = (mf_bf16_t *)p->ws, *ab = y + M * C, *h = ab + M * 2 * HD;
    float *part = (float *)(h + M * HD);
    const int light = mf_ln_gemm_bwd_light(MF_LGB_SWIGLU);
    mf_ln_gemm_bwd_cuda(MF_LGB_SWIGLU, light ? NULL : p->dx, 0, light ? NULL : part, y, ab, h,
                        NULL, p->dout, p->mean, p->rstd, p->x, p->g, p->b, p->w1, p->w2, NULL, M,
                        C, HD, MF_LN_FULL, 0);
    break;
  }
  case 6: /* the wgmma kernel (configuration 7) alone, parts switched off by p->wg_mask:
             1 no y / s1 / s2 stores, 2 no dinp / partials (no dy, no LN backward) */
  {
    mf_bf16_t *y = (mf_bf16_t *)p->ws, *ab = y + M * C, *h = ab + M * 2 * HD;
    float *part = (float *)(h + M * HD);
    const int ns = p->wg_mask & 1, nd = p->wg_mask & 2;
    mf_ln_gemm_bwd_wg_cuda(MF_LGB_SWIGLU, nd ? NULL : p->dx, 0, nd ? NULL : part, ns ? NULL : y,
                           ns ? NULL : ab, ns ? NULL : h, NULL, p->dout, p->mean, p->rstd, p->x,
                           p->g, p->b, p->w1, p->w2, NULL, M, C, HD, MF_LN_FULL, 0);
    break;
  }
  case 5: {
    mf_bf16_t *y = (mf_bf16_t *)p->ws, *ab = y + M * C, *h = ab + M * 2 * HD;
    mf_gemm_rm_cuda(&g_blas, 0, 1, 0, C, HD, M, 1.0f, p->dout, C, h, HD, 1.0f, p->dw2,
                    MF_GEMM_OUT_F32, HD);
    mf_gemm_rm_cuda(&g_blas, 0, 1, 0, 2 * HD, C, M, 1.0f, ab, 2 * HD, y, C, 1.0f, p->dw1,
                    MF_GEMM_OUT_F32, C);
    break;
  }
  }
}

#define NVAR 7 /* mf_ln_gemm_bwd_set_variant: 0 staging + cuBLAS, 1..3 the fused kernel's
                 configurations, 4..6 its light ones (transition only: LINEAR and GATED
                 run staging there) */

/* medians of REPS timed calls per variant, the variants interleaved call by call */
static void time_vars(prob *p, float *ms) {
  cudaEvent_t e0, e1;
  MF_CHECK_CUDA(cudaEventCreate(&e0));
  MF_CHECK_CUDA(cudaEventCreate(&e1));
  float t[NVAR][REPS];
  for (int v = 0; v < NVAR; v++) {
    mf_ln_gemm_bwd_set_variant(v);
    for (int i = 0; i < 2; i++) run(p);
  }
  for (int r = 0; r < REPS; r++)
    for (int v = 0; v < NVAR; v++) {
      mf_ln_gemm_bwd_set_variant(v);
      MF_CHECK_CUDA(cudaDeviceSynchronize());
      MF_CHECK_CUDA(cudaEventRecord(e0, 0));
      run(p);
      MF_CHECK_CUDA(cudaEventRecord(e1, 0));
      MF_CHECK_CUDA(cudaEventSynchronize(e1));
      MF_CHECK_CUDA(cudaEventElapsedTime(&t[v][r], e0, e1));
    }
  for (int v = 0; v < NVAR; v++) ms[v] = median_f32(t[v], REPS);
  mf_ln_gemm_bwd_set_variant(-1);
  MF_CHECK_CUDA(cudaEventDestroy(e0));
  MF_CHECK_CUDA(cudaEventDestroy(e1));
}

static void print_vars(const char *what, int N, const float *ms) {
  printf("%-24s N=%4d  staging %.3f ms", what, N, ms[0]);
  for (int v = 1; v < NVAR; v++) printf("  fused[%d] %.3f ms (%.2fx)", v, ms[v], ms[0] / ms[v]);
  printf("\n");
}

static float time_one(prob *p) {
  cudaEvent_t e0, e1;
  MF_CHECK_CUDA(cudaEventCreate(&e0));
  MF_CHECK_CUDA(cudaEventCreate(&e1));
  float t[REPS];
  run(p);
  for (int r = 0; r < REPS; r++) {
    MF_CHECK_CUDA(cudaEventRecord(e0, 0));
    run(p);
    MF_CHECK_CUDA(cudaEventRecord(e1, 0));
    MF_CHECK_CUDA(cudaEventSynchronize(e1));
    MF_CHECK_CUDA(cudaEventElapsedTime(&t[r], e0, e1));
  }
  const float m = median_f32(t, REPS);
  MF_CHECK_CUDA(cudaEventDestroy(e0));
  MF_CHECK_CUDA(cudaEventDestroy(e1));
  return m;
}

/* relative L2 difference of two host arrays (bf16 when bf = 1, else fp32) */
static double rel(const void *a, const void *b, int64_t n, int bf) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double x, y;
    if (bf) {
      x = mf_f32_from_bf16(((const mf_bf16 *)a)[i]);
      y = mf_f32_from_bf16(((const mf_bf16 *)b)[i]);
    } else {
      x = ((const float *)a)[i];
      y = ((const float *)b)[i];
    }
    num += (x - y) * (x - y);
    den += y * y;
  }
  return sqrt(num / (den > 0 ? den : 1));
}

static void *host_copy(const void *d, size_t bytes) {
  void *h = malloc(bytes);
  MF_CHECK_PTR(h);
  MF_CHECK_CUDA(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
  return h;
}

/* one call of staging (0) and of variant vv from zeroed weight gradients: rel. difference
 * of dinp and dw1 */
static void compare(prob *p, int vv, size_t dw1_bytes, double *rdx, double *rdw) {
  void *hx[2], *hw[2];
  for (int v = 0; v < 2; v++) {
    mf_ln_gemm_bwd_set_variant(v ? vv : 0);
    MF_CHECK_CUDA(cudaMemset(p->dw1, 0, dw1_bytes));
    run(p);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    hx[v] = host_copy(p->dx, (size_t)p->M * C_PAIR * 2);
    hw[v] = host_copy(p->dw1, dw1_bytes);
  }
  mf_ln_gemm_bwd_set_variant(-1);
  *rdx = rel(hx[1], hx[0], p->M * C_PAIR, 1);
  *rdw = rel(hw[1], hw[0], (int64_t)(dw1_bytes / 4), 0);
  for (int v = 0; v < 2; v++) {
    free(hx[v]);
    free(hw[v]);
  }
}

/* op's backward timed in every variant, then each fused configuration's dinp and dw1
 * (dw1_bytes, printed as dw) against staging's */
static void lab_op(prob *p, int op, const char *what, int N, size_t dw1_bytes, const char *dw) {
  float ms[NVAR];
  double rx, rw;
  p->op = op;
  time_vars(p, ms);
  print_vars(what, N, ms);
  for (int v = 1; v < NVAR; v++) {
    compare(p, v, dw1_bytes, &rx, &rw);
    printf("  fused[%d] vs staging: rel diff dinp %.2e %s %.2e\n", v, rx, dw, rw);
  }
}

static void lab_n(int N) {
  const int C = C_PAIR;
  prob p;
  memset(&p, 0, sizeof p);
  p.M = (int64_t)N * N;
  const int64_t M = p.M;
  evo_io_alloc(&p, M, C);
  float ms[NVAR];

  /* LN + Linear 128 → 128 */
  p.w1 = dev_rand((int64_t)C * C, 15, 0.09, 0);
  p.dw1 = (float *)dev_zero((size_t)C * C * 4);
  p.wsb = mf_ln_linear_cuda_workspace(M, C, C, 0);
  p.ws = dev_zero(p.wsb);
  mf_ln_linear_forward_cuda(p.out, p.mean, p.rstd, p.x, p.g, p.b, p.w1, NULL, M, C, C, MF_LN_FULL,
                            p.ws, p.wsb, &g_blas, 0);
  lab_op(&p, 0, "ln_linear bwd", N, (size_t)C * C * 4, "dW");
  MF_CHECK_CUDA(cudaFree(p.ws));
  MF_CHECK_CUDA(cudaFree(p.w1));
  MF_CHECK_CUDA(cudaFree(p.dw1));

  /* gated 128 → 128 */
  p.w1 = dev_rand(2 * (int64_t)C * C, 16, 0.09, 0);
  p.dw1 = (float *)dev_zero((size_t)2 * C * C * 4);
  p.wsb = mf_gated_linear_cuda_workspace(M, C, C);
  p.ws = dev_zero(p.wsb);
  mf_gated_linear_forward_cuda(p.out, p.mean, p.rstd, p.x, p.g, p.b, p.w1, NULL, M, C, C,
                               MF_LN_FULL, p.ws, p.wsb, &g_blas, 0);
  lab_op(&p, 1, "gated bwd", N, (size_t)2 * C * C * 4, "dW_pg");
  MF_CHECK_CUDA(cudaFree(p.ws));
  MF_CHECK_CUDA(cudaFree(p.w1));
  MF_CHECK_CUDA(cudaFree(p.dw1));

  /* transition Hd = 512 */
  p.w1 = dev_rand(2 * (int64_t)HD * C, 17, 0.09, 0);
  p.w2 = dev_rand((int64_t)C * HD, 18, 0.044, 0);
  p.dw1 = (float *)dev_zero((size_t)2 * HD * C * 4);
  p.dw2 = (float *)dev_zero((size_t)C * HD * 4);
  p.wsb = mf_transition_cuda_workspace(M, C, HD);
  const size_t whole = (size_t)M * (C + 3 * HD) * 2 + (size_t)1024 * 2 * C * 4 + 4096;
  p.ws = dev_zero(p.wsb > whole ? p.wsb : whole);
  mf_transition_forward_cuda(p.out, p.mean, p.rstd, p.x, p.g, p.b, p.w1, p.w2, M, C, HD,
                             MF_LN_FULL, 0, p.ws, p.wsb, &g_blas, 0);
  lab_op(&p, 2, "transition bwd", N, (size_t)2 * HD * C * 4, "dW_ab");
  p.op = 3;
  time_vars(&p, ms);
  print_vars("transition bwd add/inpl", N, ms);
  p.op = 4;
  float tk = 1e9f, tl[3] = {1e9f, 1e9f, 1e9f};
  for (int v = 1; v < NVAR; v++) {
    mf_ln_gemm_bwd_set_variant(v);
    const float tv = time_one(&p);
    printf("transition N=%4d  fused kernel [%d] alone: %.3f ms%s\n", N, v, tv,
           v >= 4 ? " (light: no dy, no LN backward)" : "");
    if (v >= 4) tl[v - 4] = tv;
    else if (tv < tk) tk = tv;
  }
  mf_ln_gemm_bwd_set_variant(-1);
  {
    static const char *const part_name[4] = {"all", "no y/s1/s2 stores", "no dy/LN backward",
                                             "neither"};
    p.op = 6;
    for (int mk = 0; mk < 4; mk++) {
      p.wg_mask = mk;
      printf("transition N=%4d  wgmma kernel [7] alone, %s: %.3f ms\n", N, part_name[mk], time_one(&p));
    }
  }
  p.op = 5;
  const float tg = time_one(&p);
  /* the light kernels' (4..6) FLOPs: [a|b] and dh only; the rest of their backward is the
   * dW GEMMs above plus dx̂ = [da|db]·w_ab and the LN row backward (as on staging) */
  const double fl_l = 2.0 * M * C * (2.0 * HD) + 2.0 * M * C * HD; /* [a|b], dh */
  printf("transition N=%4d  light kernels: %.0f GFLOP; [4] %.0f  [5] %.0f  [6] %.0f TFLOP/s\n",
         N, fl_l / 1e9, fl_l / tl[0] / 1e9, fl_l / tl[1] / 1e9, fl_l / tl[2] / 1e9);
  const double fl_k = 2.0 * M * C * (2.0 * HD) * 2 + 2.0 * M * C * HD; /* [a|b], dx̂, dh */
  const double fl_g = 2.0 * M * C * HD + 2.0 * M * C * 2.0 * HD;
  const double by_k = (double)M * (C * 2 * 2 + C * 2 * 2 + (C + 3 * HD) * 2); /* r x,dout; w y,dinp,ab,h (x re-read in L2) */
  printf("transition N=%4d  fastest fused kernel alone (one pass over M): %.3f ms (%.0f TFLOP/s, %.0f GB/s);"
         " dW_o + dW_ab GEMMs alone %.3f ms (%.0f TFLOP/s)\n",
         N, tk, fl_k / tk / 1e9, by_k / tk / 1e6, tg, fl_g / tg / 1e9);
  MF_CHECK_CUDA(cudaFree(p.ws));
  MF_CHECK_CUDA(cudaFree(p.w1));
  MF_CHECK_CUDA(cudaFree(p.w2));
  MF_CHECK_CUDA(cudaFree(p.dw1));
  MF_CHECK_CUDA(cudaFree(p.dw2));
  evo_io_free(&p);
}

int main(int argc, char **argv) {
  const char *ns = argc > 1 ? argv[1] : "384,768";
  if (mf_cuda_init(0) != MF_OK) {
    fprintf(stderr, "bwd_lab: %s\n", mf_error_message());
    return 1;
  }
  char desc[256];
  printf("bwd_lab on %s\n", mf_cuda_describe(desc, sizeof desc));
  mf_cuda_blas_create(&g_blas, 0);
  for_each_n(ns, lab_n);
  mf_cuda_blas_destroy(&g_blas);
  return 0;
}
