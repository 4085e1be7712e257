/* evofusion.cu — benchmark of the EvoFusion ops on the pair tensor (M = N² rows, c = 128):
 * LayerNorm + Linear (128 → 128), the gated projection (LN + [p | g] GEMM, 128 → 128), the
 * SwiGLU transition (Hd = 4c), the outgoing triangle multiplication (Ch = 128) and the
 * residual + row dropout, forward and backward separately, plus a device-to-device copy
 * measured in the same process as the bandwidth ceiling, and the LayerNorm row kernels alone
 * (mf_ln_rows_cuda and its backward: the staging paths' building block). The forwards of
 * the first three also run in each forward variant: "[mma]" (the mma.sync kernels of
 * ln_gemm.cu, variant 2), "[staging]" (LN staging + cuBLAS, variant 1), "[wmma]" (the WMMA
 * fused LN + GEMM, variant 0); the unsuffixed row is the default; "[generic]" and "[gs]"
 * are the previous LayerNorm-row and residual kernels (variant 0 of their setters);
 * "ln_rows[half-warp]" / "[hw-cp.async]" / "[hw-bulk]" the LayerNorm-row forwards of
 * variants 2 / 3 / 4. Times
 * are medians of CUDA-event timed repetitions after warm-up, on random bf16 inputs. "GB/s"
 * counts the op's unavoidable traffic only (each activation input read once, each
 * activation output written once, bf16; the LN rows: also the fp32 dy and the 8 bytes of
 * statistics per row), so it is comparable across implementations; "TFLOP/s" counts the
 * GEMM FLOPs of the forward (2× for the backward, without recomputation). Not a
 * correctness test (tests/gpu/test_fusion_gpu.cu is). Writes JSON rows in DESIGN.md's
 * format with --json.
 *   evofusion [--ns 384,768] [--reps 20] [--json out.json] [--only OP] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/device.h"
#include "ops/cuda/dropout_cuda.h"
#include "ops/cuda/gemm_cuda.h"
#include "ops/cuda/gpu.h"
#include "ops/cuda/ln_gemm_bwd_cuda.h"
#include "ops/cuda/ln_gemm_cuda.h"
#include "ops/cuda/ln_linear_cuda.h"
#include "ops/cuda/transition_bwd_cl_cuda.h"
#include "ops/cuda/transition_cuda.h"
#include "ops/cuda/trimul_cuda.h"

#include "bench_util.h"

#define C_PAIR 128

static mf_cuda_blas g_blas;
static int g_reps = 20;
#define WARM_MS 25.0f /* warm-up before each row's timed repetitions */

typedef void (*bench_fn)(void *ctx);

static float median_ms(bench_fn fn, void *ctx) {
  cudaEvent_t e0, e1;
  MF_CHECK_CUDA(cudaEventCreate(&e0));
  MF_CHECK_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < 3; i++) fn(ctx);
  /* then at least WARM_MS of the op, as triton.testing.do_bench warms up (25 ms), so that
   * clocks and caches settle after the previous, heavier op (bench/evofusion_peers.py
   * does the same): with 3 calls alone the first row of an op after the triangle
   * multiplication read 10–15 % slower than the same kernel's next row */
  float t1 = 0;
  MF_CHECK_CUDA(cudaEventRecord(e0, 0));
  fn(ctx);
  MF_CHECK_CUDA(cudaEventRecord(e1, 0));
  MF_CHECK_CUDA(cudaEventSynchronize(e1));
  MF_CHECK_CUDA(cudaEventElapsedTime(&t1, e0, e1));
  const int nwarm = t1 > 0 ? (int)(WARM_MS / t1) + 1 : 1;
  for (int i = 0; i < nwarm && i < 100000; i++) fn(ctx);
  MF_CHECK_CUDA(cudaDeviceSynchronize());
  float *t = (float *)malloc((size_t)g_reps * sizeof(float));
  for (int r = 0; r < g_reps; r++) {
    MF_CHECK_CUDA(cudaEventRecord(e0, 0));
    fn(ctx);
    MF_CHECK_CUDA(cudaEventRecord(e1, 0));
    MF_CHECK_CUDA(cudaEventSynchronize(e1));
    MF_CHECK_CUDA(cudaEventElapsedTime(&t[r], e0, e1));
  }
  float m = median_f32(t, g_reps);
  free(t);
  MF_CHECK_CUDA(cudaEventDestroy(e0));
  MF_CHECK_CUDA(cudaEventDestroy(e1));
  return m;
}

/* ---------------------------------------------------------------- the problems */
typedef struct {
  int N;
  int64_t M;
  mf_bf16_t *x, *dout, *out, *dx, *g, *b, *w1, *w2;
  float *mean, *rstd, *dg, *db, *dw1, *dw2;
  void *ws, *saved;
  size_t wsb;
  mf_trimul_cuda_weights tw;
  mf_trimul_cuda_grads tg;
  float *mask;
  mf_resdrop_cuda rd;
  float *dy, *part; /* (M, C) fp32 upstream gradient, (parts, 2C) of the LN row backward */
} prob;

static void lnl_fwd(void *p_) {
  prob *p = (prob *)p_;
  mf_ln_linear_forward_cuda(p->out, p->mean, p->rstd, p->x, p->g, p->b, p->w1, NULL, p->M, C_PAIR,
                            C_PAIR, MF_LN_FULL, p->ws, p->wsb, &g_blas, 0);
}
static void lnl_bwd(void *p_) {
  prob *p = (prob *)p_;
  mf_ln_linear_backward_cuda(p->dx, p->dg, p->db, p->dw1, NULL, p->dout, p->mean, p->rstd, p->x,
                             p->g, p->b, p->w1, p->M, C_PAIR, C_PAIR, MF_LN_FULL, p->ws, p->wsb,
                             &g_blas, 0);
}
static void gl_fwd(void *p_) {
  prob *p = (prob *)p_;
  mf_gated_linear_forward_cuda(p->out, p->mean, p->rstd, p->x, p->g, p->b, p->w1, NULL, p->M,
                               C_PAIR, C_PAIR, MF_LN_FULL, p->ws, p->wsb, &g_blas, 0);
}
static void gl_bwd(void *p_) {
  prob *p = (prob *)p_;
  mf_gated_linear_backward_cuda(p->dx, p->dg, p->db, p->dw1, p->dout, p->mean, p->rstd, p->x, p->g,
                                p->b, p->w1, NULL, p->M, C_PAIR, C_PAIR, MF_LN_FULL, p->ws, p->wsb,
                                &g_blas, 0);
}
static void tr_fwd(void *p_) {
  prob *p = (prob *)p_;
  mf_transition_forward_cuda(p->out, p->mean, p->rstd, p->x, p->g, p->b, p->w1, p->w2, p->M,
                             C_PAIR, 4 * C_PAIR, MF_LN_FULL, 0, p->ws, p->wsb, &g_blas, 0);
}
static void tr_bwd(void *p_) {
  prob *p = (prob *)p_;
  mf_transition_backward_cuda(p->dx, p->dg, p->db, p->dw1, p->dw2, p->dout, p->mean, p->rstd, p->x,
                              p->g, p->b, p->w1, p->w2, p->M, C_PAIR, 4 * C_PAIR, MF_LN_FULL,
                              p->ws, p->wsb, &g_blas, 0);
}
/* the adding backward (dinp += ∂/∂inp) into dx, and in place (dinp = dout = dx: the form the
 * Pairformer block runs, its residual's gradient updated where it lies) */
static void tr_bwd_add(void *p_) {
  prob *p = (prob *)p_;
  mf_transition_backward_add_cuda(p->dx, p->dg, p->db, p->dw1, p->dw2, p->dout, p->mean, p->rstd, p->x,
                                  p->g, p->b, p->w1, p->w2, p->M, C_PAIR, 4 * C_PAIR, MF_LN_FULL,
                                  p->ws, p->wsb, &g_blas, 0);
}
static void tr_bwd_inplace(void *p_) {
  prob *p = (prob *)p_;
  mf_transition_backward_add_cuda(p->dx, p->dg, p->db, p->dw1, p->dw2, p->dx, p->mean, p->rstd, p->x,
                                  p->g, p->b, p->w1, p->w2, p->M, C_PAIR, 4 * C_PAIR, MF_LN_FULL,
                                  p->ws, p->wsb, &g_blas, 0);
}
static void tm_fwd(void *p_) {
  prob *p = (prob *)p_;
  mf_trimul_forward_cuda(p->out, p->saved, p->x, NULL, &p->tw, p->N, C_PAIR, C_PAIR, 1, NULL, p->ws,
                         p->wsb, &g_blas, 0);
}
static void tm_bwd(void *p_) {
  prob *p = (prob *)p_;
  mf_trimul_backward_cuda(p->dx, &p->tg, p->dout, p->saved, p->x, NULL, &p->tw, p->N, C_PAIR,
                          C_PAIR, 1, NULL, p->ws, p->wsb, &g_blas, 0);
}
static void rd_fwd(void *p_) {
  prob *p = (prob *)p_;
  mf_dropout_mask_cuda(p->mask, p->N, C_PAIR, p->rd.p, p->rd.seed, p->rd.stream, 0);
  mf_dropout_residual_forward_cuda(p->out, p->x, p->mask, p->N, p->N, C_PAIR, MF_DROPOUT_ROWWISE, 0);
}
static void rd_bwd(void *p_) {
  prob *p = (prob *)p_;
  mf_dropout_mask_cuda(p->mask, p->N, C_PAIR, p->rd.p, p->rd.seed, p->rd.stream, 0);
  mf_dropout_backward_cuda(p->dx, p->dout, p->mask, p->N, p->N, C_PAIR, MF_DROPOUT_ROWWISE, 0);
}
static void ln_fwd(void *p_) {
  prob *p = (prob *)p_;
  mf_ln_rows_cuda(p->out, p->mean, p->rstd, p->x, p->g, p->b, p->M, C_PAIR, MF_LN_FULL, 0, 0);
}
static void ln_bwd(void *p_) {
  prob *p = (prob *)p_;
  mf_ln_rows_backward_cuda(p->dx, p->part, p->dy, p->x, p->mean, p->rstd, p->g, p->M, C_PAIR,
                           MF_LN_FULL, 0, 0);
}
typedef struct {
  void *dst, *src;
  size_t bytes;
} copy_ctx;
static void copy_run(void *c_) {
  copy_ctx *c = (copy_ctx *)c_;
  MF_CHECK_CUDA(cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, 0));
}

/* ---------------------------------------------------------------- output */
static FILE *g_json;
static int g_rows;
static double g_copy_gbps;

static void row(const char *op, int N, const char *pass, float ms, double bytes, double flops,
                double extra_bytes) {
  const double gbps = bytes / ms / 1e6, tf = flops / ms / 1e9;
  printf("%-21s N=%4d %-4s %9.3f ms %8.0f GB/s (%3.0f%% of copy) %7.1f TFLOP/s  extra %.2f GiB\n",
         op, N, pass, ms, gbps, g_copy_gbps > 0 ? 100 * gbps / g_copy_gbps : 0, tf,
         extra_bytes / (1 << 30));
  if (g_json)
    fprintf(g_json,
            "%s  {\"variant\": \"megafold\", \"op\": \"%s\", \"N\": %d, \"M\": %lld, \"pass\": \"%s\", "
            "\"ms\": %.5f, \"bytes\": %.0f, \"gbps\": %.1f, \"tflops\": %.2f, \"peak_gib\": %.4f}",
            g_rows++ ? ",\n" : "", op, N, (long long)N * N, pass, ms, bytes, gbps, tf,
            extra_bytes / (1 << 30));
}

/* The forward fn in each forward variant, as rows op[wmma] (variant 0), op[staging] (1) and
 * op[mma] (2) with extra bytes x0, x1, x2; then the variant it found is set again. */
static void fwd_variants(const char *op, int N, bench_fn fn, void *ctx, double bytes, double flops,
                         double x0, double x1, double x2) {
  static const char *const tag[4] = {"wmma", "staging", "mma", "wgmma"};
  const double extra[4] = {x0, x1, x2, x2};
  const int def = mf_ln_linear_cuda_get_variant();
  for (int v = 0; v < 4; v++) { /* 3 = 2 except for the transition (its wgmma kernel) */
    char name[64];
    snprintf(name, sizeof name, "%s[%s]", op, tag[v]);
    mf_ln_linear_cuda_set_variant(v);
    row(name, N, "fwd", median_ms(fn, ctx), bytes, flops, extra[v]);
  }
  if (!strcmp(op, "ln_linear") || !strcmp(op, "gated_linear")) { /* "[wgmma-2wg]": the wgmma kernel at two warpgroups a CTA */
    char name[64];
    snprintf(name, sizeof name, "%s[wgmma-2wg]", op);
    mf_ln_linear_cuda_set_variant(3);
    const int nw = mf_ln_gemm_wg_set_nwg(2);
    row(name, N, "fwd", median_ms(fn, ctx), bytes, flops, extra[3]);
    mf_ln_gemm_wg_set_nwg(nw);
  }
  mf_ln_linear_cuda_set_variant(def);
}

/* The backward's paths side by side (ln_gemm_bwd_cuda.h configurations): staging + cuBLAS,
 * the mma.sync light kernel (the transition only; the others run staging there) and the
 * wgmma kernels (configuration 7; for the transition without the cluster kernel that is
 * its default). */
static void bwd_variants(const char *op, int N, bench_fn fn, void *ctx, double bytes, double flops,
                         double extra) {
  static const int cfg[3] = {0, 6, 7};
  static const char *const tag[3] = {"staging", "light6", "wgmma"};
  const int def = mf_ln_gemm_bwd_set_variant(-1);
  for (int v = 0; v < 3; v++) {
    if (cfg[v] == 6 && strcmp(op, "transition") != 0) continue;
    char name[64];
    snprintf(name, sizeof name, "%s[%s]", op, tag[v]);
    mf_ln_gemm_bwd_set_variant(cfg[v]);
    /* the transition's default is the cluster kernel (transition_bwd_cl.cu); its "[wgmma]"
     * row is configuration 7's kernel + the cuBLAS dW GEMMs, as before it */
    const int cl = mf_transition_bwd_cl_set(0);
    row(name, N, "bwd", median_ms(fn, ctx), bytes, flops, extra);
    mf_transition_bwd_cl_set(cl);
  }
  mf_ln_gemm_bwd_set_variant(def);
}

/* The rows of one fused op (LN + Linear, gated, transition) whose buffers p holds: its
 * forward variants, the default forward and backward, the backward variants. fl: forward
 * FLOPs; x0: the wmma forward's extra bytes (the others': the workspace + statistics). */
static void op_rows(const char *op, int N, bench_fn fwd, bench_fn bwd, prob *p, double act,
                    double fl, double x0) {
  const double st = 8.0 * (double)p->M; /* mean, rstd */
  fwd_variants(op, N, fwd, p, 2 * act, fl, x0, (double)p->wsb + st, st);
  fwd(p);
  row(op, N, "fwd", median_ms(fwd, p), 2 * act, fl, (double)p->wsb + st);
  row(op, N, "bwd", median_ms(bwd, p), 3 * act, 2 * fl, (double)p->wsb);
  bwd_variants(op, N, bwd, p, 3 * act, 2 * fl, (double)p->wsb);
}

/* --only OP: the sections whose rows start with OP (for profiling one op); NULL: all */
static const char *g_only = NULL;
static int want(const char *op) { return !g_only || !strncmp(op, g_only, strlen(g_only)); }

static void bench_n(int N) {
  const int C = C_PAIR, Hd = 4 * C_PAIR;
  prob p;
  memset(&p, 0, sizeof p);
  p.N = N;
  p.M = (int64_t)N * N;
  const int64_t M = p.M;
  const double act = (double)M * C * 2; /* one bf16 activation (M, C) */
  evo_io_alloc(&p, M, C);
  const double fl_lin = 2.0 * M * C * C;

  /* the LayerNorm row kernels alone (mf_ln_rows_cuda / mf_ln_rows_backward_cuda, FULL):
   * forward x → y (bf16) + mean, rstd; backward dy (fp32), x, mean, rstd → dx (bf16) + the
   * γ/β partials (not counted: parts·2C floats). "[generic]" rows: the generic kernels
   * (mf_ln_rows_cuda_set_variant(0)); "[half-warp]" / "[hw-cp.async]" / "[hw-bulk]":
   * the forwards of variants 2 / 3 / 4 (ln_rows_hw.cuh; their backward is the default one). */
  if (want("ln_rows")) {
    p.dy = (float *)dev_zero((size_t)M * C * 4);
    p.part = (float *)dev_zero((size_t)mf_ln_rows_backward_parts(M) * 2 * C * 4);
    MF_CHECK_CUDA(cudaMemset(p.dy, 0x3c, (size_t)M * C * 4)); /* ≈ 0.0115, finite */
    const double bf = 2 * act + 8.0 * M, bb = (double)M * C * (4 + 2 + 2) + 8.0 * M;
    ln_fwd(&p);
    row("ln_rows", N, "fwd", median_ms(ln_fwd, &p), bf, 0, 0);
    row("ln_rows", N, "bwd", median_ms(ln_bwd, &p), bb, 0, 0);
    const int lv = mf_ln_rows_cuda_set_variant(0);
    row("ln_rows[generic]", N, "fwd", median_ms(ln_fwd, &p), bf, 0, 0);
    row("ln_rows[generic]", N, "bwd", median_ms(ln_bwd, &p), bb, 0, 0);
    mf_ln_rows_cuda_set_variant(2);
    row("ln_rows[half-warp]", N, "fwd", median_ms(ln_fwd, &p), bf, 0, 0);
    mf_ln_rows_cuda_set_variant(3);
    row("ln_rows[hw-cp.async]", N, "fwd", median_ms(ln_fwd, &p), bf, 0, 0);
    mf_ln_rows_cuda_set_variant(4);
    row("ln_rows[hw-bulk]", N, "fwd", median_ms(ln_fwd, &p), bf, 0, 0);
    mf_ln_rows_cuda_set_variant(lv);
    MF_CHECK_CUDA(cudaFree(p.dy));
    MF_CHECK_CUDA(cudaFree(p.part));
  }

  /* LayerNorm + Linear 128 → 128 */
  if (want("ln_linear")) {
    p.w1 = dev_rand((int64_t)C * C, 15, 0.09, 0);
    p.dw1 = (float *)dev_zero((size_t)C * C * 4);
    p.wsb = mf_ln_linear_cuda_workspace(M, C, C, 0);
    p.ws = dev_zero(p.wsb);
    op_rows("ln_linear", N, lnl_fwd, lnl_bwd, &p, act, fl_lin, 8.0 * M);
    MF_CHECK_CUDA(cudaFree(p.ws));
    MF_CHECK_CUDA(cudaFree(p.w1));
    MF_CHECK_CUDA(cudaFree(p.dw1));
  }

  /* gated projection: LN + [p | g] (256 outputs) + gate, 128 → 128 */
  if (want("gated_linear")) {
    p.w1 = dev_rand(2 * (int64_t)C * C, 16, 0.09, 0);
    p.dw1 = (float *)dev_zero((size_t)2 * C * C * 4);
    p.wsb = mf_gated_linear_cuda_workspace(M, C, C);
    p.ws = dev_zero(p.wsb);
    op_rows("gated_linear", N, gl_fwd, gl_bwd, &p, act, 2 * fl_lin, 8.0 * M);
    MF_CHECK_CUDA(cudaFree(p.ws));
    MF_CHECK_CUDA(cudaFree(p.w1));
    MF_CHECK_CUDA(cudaFree(p.dw1));
  }

  /* SwiGLU transition, Hd = 4c */
  if (want("transition")) {
    p.w1 = dev_rand(2 * (int64_t)Hd * C, 17, 0.09, 0);
    p.w2 = dev_rand((int64_t)C * Hd, 18, 0.044, 0);
    p.dw1 = (float *)dev_zero((size_t)2 * Hd * C * 4);
    p.dw2 = (float *)dev_zero((size_t)C * Hd * 4);
    p.wsb = mf_transition_cuda_workspace(M, C, Hd);
    p.ws = dev_zero(p.wsb);
    op_rows("transition", N, tr_fwd, tr_bwd, &p, act, 6.0 * M * C * Hd, (double)p.wsb + 8.0 * M);
    /* the adding backward, and in place (dx starts as a copy of dout and grows rep by rep:
     * timing only) */
    row("transition[add]", N, "bwd", median_ms(tr_bwd_add, &p), 4 * act, 12.0 * M * C * Hd, (double)p.wsb);
    MF_CHECK_CUDA(cudaMemcpy(p.dx, p.dout, (size_t)M * C * 2, cudaMemcpyDeviceToDevice));
    row("transition[in-place]", N, "bwd", median_ms(tr_bwd_inplace, &p), 3 * act, 12.0 * M * C * Hd,
        (double)p.wsb);
    MF_CHECK_CUDA(cudaFree(p.ws));
    MF_CHECK_CUDA(cudaFree(p.w1));
    MF_CHECK_CUDA(cudaFree(p.w2));
    MF_CHECK_CUDA(cudaFree(p.dw1));
    MF_CHECK_CUDA(cudaFree(p.dw2));
  }

  /* triangle multiplication, outgoing, C = Ch = 128 */
  if (want("trimul_out")) {
    const int Ch = C;
    const int64_t nw = 2 * C + (int64_t)(4 * Ch + C) * C + 2 * Ch + (int64_t)C * Ch;
    mf_bf16_t *flat = dev_rand(nw, 19, 0.09, 0);
    float *gflat = (float *)dev_zero((size_t)nw * 4);
    const int64_t o_cat = 2 * C, o_lg = o_cat + (int64_t)(4 * Ch + C) * C;
    /* LayerNorm γ ≈ 1: reuse p.g / p.b for both LayerNorms */
    p.tw.ln_in_g = p.g;
    p.tw.ln_in_b = p.b;
    p.tw.w_cat = flat + o_cat;
    p.tw.ln_out_g = p.g;
    p.tw.ln_out_b = p.b;
    p.tw.w_z = flat + o_lg + 2 * Ch;
    p.tg.ln_in_g = gflat;
    p.tg.ln_in_b = gflat + C;
    p.tg.w_cat = gflat + o_cat;
    p.tg.ln_out_g = gflat + o_lg;
    p.tg.ln_out_b = gflat + o_lg + Ch;
    p.tg.w_z = gflat + o_lg + 2 * Ch;
    const size_t sb = mf_trimul_cuda_saved_bytes(N, Ch);
    p.saved = dev_zero(sb);
    p.wsb = mf_trimul_cuda_workspace(N, C, Ch);
    p.ws = dev_zero(p.wsb);
    tm_fwd(&p);
    const double fl_tm = 2.0 * M * C * (4 * Ch + C) + 2.0 * N * (double)M * Ch + 2.0 * M * Ch * C;
    row("trimul_out", N, "fwd", median_ms(tm_fwd, &p), 2 * act, fl_tm, (double)(p.wsb + sb));
    row("trimul_out", N, "bwd", median_ms(tm_bwd, &p), 3 * act, 2 * fl_tm, (double)(p.wsb + sb));
    /* variant 1 (LN staging, cuBLAS into P, the vectorised gate kernel) and the scalar
     * transposing kernels (variant 0) for comparison, then the default */
    const int tdef = mf_trimul_cuda_set_variant(1);
    row("trimul_out[v1]", N, "fwd", median_ms(tm_fwd, &p), 2 * act, fl_tm, (double)(p.wsb + sb));
    row("trimul_out[v1]", N, "bwd", median_ms(tm_bwd, &p), 3 * act, 2 * fl_tm, (double)(p.wsb + sb));
    mf_trimul_cuda_set_variant(0);
    row("trimul_out[scalar]", N, "fwd", median_ms(tm_fwd, &p), 2 * act, fl_tm,
        (double)(p.wsb + sb));
    row("trimul_out[scalar]", N, "bwd", median_ms(tm_bwd, &p), 3 * act, 2 * fl_tm,
        (double)(p.wsb + sb));
    mf_trimul_cuda_set_variant(tdef);
    MF_CHECK_CUDA(cudaFree(p.ws));
    MF_CHECK_CUDA(cudaFree(p.saved));
    MF_CHECK_CUDA(cudaFree(flat));
    MF_CHECK_CUDA(cudaFree(gflat));
  }

  /* residual + row dropout p = 0.25 (mask regenerated from Philox every call) */
  p.mask = (float *)dev_zero((size_t)N * C * 4);
  p.rd.p = 0.25;
  p.rd.seed = 7;
  p.rd.stream = mf_rng_stream(1, MF_RNG_DROPOUT, 0);
  p.rd.axis = MF_DROPOUT_ROWWISE;
  row("resdrop_row", N, "fwd", median_ms(rd_fwd, &p), 3 * act, 0, (double)N * C * 4);
  row("resdrop_row", N, "bwd", median_ms(rd_bwd, &p), 2 * act, 0, (double)N * C * 4);
  const int rv = mf_dropout_cuda_set_variant(0); /* the grid-stride kernel, for comparison */
  row("resdrop_row[gs]", N, "fwd", median_ms(rd_fwd, &p), 3 * act, 0, (double)N * C * 4);
  row("resdrop_row[gs]", N, "bwd", median_ms(rd_bwd, &p), 2 * act, 0, (double)N * C * 4);
  mf_dropout_cuda_set_variant(rv);
  MF_CHECK_CUDA(cudaFree(p.mask));

  evo_io_free(&p);
}

int main(int argc, char **argv) {
  const char *ns = "384,768", *json = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ns") && i + 1 < argc) ns = argv[++i];
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) g_only = argv[++i];
    else {
      fprintf(stderr, "usage: evofusion [--ns 384,768] [--reps 20] [--json out.json] [--only OP]\n");
      return 2;
    }
  }
  if (mf_cuda_init(0) != MF_OK) {
    fprintf(stderr, "evofusion: %s\n", mf_error_message());
    return 1;
  }
  char desc[256];
  printf("evofusion on %s\n", mf_cuda_describe(desc, sizeof desc));
  mf_cuda_blas_create(&g_blas, 0);
  if (json) {
    g_json = fopen(json, "w");
    MF_CHECK_PTR(g_json);
    fprintf(g_json, "{\"gpu\": \"%s\", \"rows\": [\n", desc);
  }
  /* copy bandwidth: 2 GiB device to device, bytes read + written */
  if (want("resdrop")) {
    copy_ctx c = {NULL, NULL, (size_t)2 << 30};
    c.src = dev_zero(c.bytes);
    c.dst = dev_zero(c.bytes);
    const float ms = median_ms(copy_run, &c);
    g_copy_gbps = 2.0 * c.bytes / ms / 1e6;
    printf("d2d copy      %.3f ms for 2 GiB: %.0f GB/s (read + write)\n", ms, g_copy_gbps);
    if (g_json)
      fprintf(g_json, "  {\"variant\": \"megafold\", \"op\": \"d2d_copy\", \"N\": 0, \"pass\": \"copy\", "
                      "\"ms\": %.5f, \"bytes\": %.0f, \"gbps\": %.1f, \"peak_gib\": 0}",
              ms, 2.0 * c.bytes, g_copy_gbps);
    g_rows = 1;
    MF_CHECK_CUDA(cudaFree(c.src));
    MF_CHECK_CUDA(cudaFree(c.dst));
  }
  for_each_n(ns, bench_n);
  if (g_json) {
    fprintf(g_json, "\n], \"copy_gbps\": %.1f}\n", g_copy_gbps);
    fclose(g_json);
  }
  mf_cuda_blas_destroy(&g_blas);
  return 0;
}
