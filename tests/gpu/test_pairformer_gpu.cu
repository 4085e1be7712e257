/* test_pairformer_gpu.cu — GPU test of the Pairformer block and stack
 * (src/model/cuda/pairformer_cuda.cu) against the CPU reference stack built in double
 * (model/stack.h over model/pairformer.h): the same parameter table, weights and inputs
 * (rounded to bf16 first, so only the GPU's arithmetic is measured), token masks with a
 * masked token, dropout on (the same Philox masks on both sides), L = 1 and L = 2. Every
 * output and every parameter tensor's gradient is compared by relative error. Then, on the
 * GPU alone: the three checkpointing policies give bit-identical outputs and gradients,
 * two runs are bit-identical, gradients accumulate, and the planner refuses a crop that
 * does not fit with the largest N that does. With MF_PARITY_OUT=dir set it also writes
 * the GPU's results of one case as a parity bundle for tools/reference/parity.py.
 * Prints (does not assert) one block's forward/backward time at a few N. With
 * MF_PF_TIMING_ONLY=N it only times one block at that N, twice (MF_ATT_VARIANT,
 * MF_TRIMUL_VARIANT pick the attention and triangle-update kernel variants). Needs a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "model/cuda/pairformer_cuda.h"
#include "model/params.h"
#include "model/parity.h"
#include "model/stack.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/device.h"
#include "ops/cuda/gpu.h"
#include "ops/cuda/ln_linear_cuda.h"

#include "gpu_test_util.h"

#define TOL 3e-2

/* ---------------------------------------------------------------- device helpers */
/* Untracked device buffers (the caller cudaFrees them); the copies through gpu_test_util.h. */
static void *dalloc(size_t bytes) {
  void *d = NULL;
  MF_CHECK_CUDA(cudaMalloc(&d, bytes ? bytes : 16));
  return d;
}
/* A new device copy of x (n) in bf16 / fp32. */
static mf_bf16_t *new_bf16(const double *x, int64_t n) {
  mf_bf16_t *d = (mf_bf16_t *)dalloc((size_t)n * 2);
  up_bf16(d, x, n);
  return d;
}
static float *new_f32(const double *x, int64_t n) {
  float *d = (float *)dalloc((size_t)n * 4);
  up_f32(d, x, n);
  return d;
}

static mf_pairformer_config small_config(void) {
  mf_pairformer_config c = {.c_s = 32, .c_z = 16, .c_mul = 16, .h_tri = 2, .d_tri = 8,
                            .h_s = 2, .d_s = 16, .n_trans = 2, .p_drop = 0.25};
  return c;
}

/* Parameters: the AF3 initialisation, then every element perturbed (the zero-initialised
 * gates and output projections would hide most gradients), rounded to bf16. */
static void make_params(double *p, const mf_params_table *t, uint64_t seed) {
  mf_params_init(t, p, seed);
  double *noise = (double *)malloc((size_t)t->total * sizeof(double));
  MF_CHECK_PTR(noise);
  mf_test_randn(noise, t->total, seed + 17, 0.05);
  for (int64_t i = 0; i < t->total; i++) p[i] = bf16r(p[i] + noise[i]);
  free(noise);
}

/* One problem: inputs, output gradients, mask (host, bf16-representable doubles). */
typedef struct {
  int N, L, masked, training;
  mf_pairformer_config c;
  mf_params_table t;
  double *params, *s, *z, *dso, *dzo;
  uint8_t *mask;
  int64_t sn, zn;
} problem;

static void problem_make(problem *P, mf_pairformer_config c, int L, int N, int masked,
                         int training, uint64_t seed) {
  memset(P, 0, sizeof *P);
  P->N = N;
  P->L = L;
  P->masked = masked;
  P->training = training;
  P->c = c;
  MF_ASSERT(mf_params_build_pairformer(&P->t, &c, L) == MF_OK, "%s", mf_error_message());
  P->sn = (int64_t)N * c.c_s;
  P->zn = (int64_t)N * N * c.c_z;
  P->params = mf_test_alloc(P->t.total);
  make_params(P->params, &P->t, seed);
  P->s = mf_test_alloc(P->sn);
  P->z = mf_test_alloc(P->zn);
  P->dso = mf_test_alloc(P->sn);
  P->dzo = mf_test_alloc(P->zn);
  mf_test_randn(P->s, P->sn, seed + 1, 1.0);
  mf_test_randn(P->z, P->zn, seed + 2, 1.0);
  mf_test_randn(P->dso, P->sn, seed + 3, 1.0);
  mf_test_randn(P->dzo, P->zn, seed + 4, 1.0);
  for (int64_t i = 0; i < P->sn; i++) P->s[i] = bf16r(P->s[i]), P->dso[i] = bf16r(P->dso[i]);
  for (int64_t i = 0; i < P->zn; i++) P->z[i] = bf16r(P->z[i]), P->dzo[i] = bf16r(P->dzo[i]);
  if (masked) {
    P->mask = (uint8_t *)malloc((size_t)N);
    MF_CHECK_PTR(P->mask);
    for (int i = 0; i < N; i++) P->mask[i] = (uint8_t)(N == 1 || i % 5 != 3);
  }
}

static void problem_free(problem *P) {
  mf_params_free(&P->t);
  free(P->mask);
}

/* The reference: the CPU stack in double. */
typedef struct {
  double *so, *zo, *ds, *dz, *grads;
} results;

static void cpu_run(const problem *P, results *r) {
  r->so = mf_test_alloc(P->sn);
  r->zo = mf_test_alloc(P->zn);
  r->ds = mf_test_alloc(P->sn);
  r->dz = mf_test_alloc(P->zn);
  r->grads = mf_test_alloc(P->t.total);
  mf_stack st;
  mf_stack_policy pol = {MF_STACK_RECOMPUTE, 0};
  MF_ASSERT(mf_stack_init(&st, &P->t, pol, P->N, 0) == MF_OK, "%s", mf_error_message());
  mf_stack_rng rng = {7, 3, P->training};
  mf_stack_forward(&st, r->so, r->zo, P->s, P->z, P->mask, P->params, P->N, rng);
  mf_stack_backward(&st, r->ds, r->dz, r->grads, P->dso, P->dzo, P->s, P->z, P->mask, P->params,
                    P->N, rng);
  mf_stack_free(&st);
}

/* The GPU: raw device results of one run. */
typedef struct {
  mf_bf16_t *so, *zo, *ds, *dz;
  float *grads;
} gpu_results;

/* A stack planned for crops up to N_max (0: P->N) runs P's crop. */
static void gpu_run_planned(const problem *P, mf_stack_policy pol, gpu_results *g, int reps,
                            int run_blocks, int N_max) {
  mf_pf_cuda_stack st;
  MF_ASSERT(mf_pf_cuda_stack_init(&st, &P->t, pol, N_max > 0 ? N_max : P->N, 0, 0) == MF_OK,
            "%s", mf_error_message());
  mf_pf_cuda_stack_set_run_blocks(&st, run_blocks);
  float *master = new_f32(P->params, P->t.total);
  mf_pf_cuda_stack_set_params(&st, master);
  mf_bf16_t *s = new_bf16(P->s, P->sn), *z = new_bf16(P->z, P->zn);
  uint8_t *mask = NULL;
  if (P->mask) {
    mask = (uint8_t *)dalloc((size_t)P->N);
    MF_CHECK_CUDA(cudaMemcpy(mask, P->mask, (size_t)P->N, cudaMemcpyHostToDevice));
  }
  g->so = (mf_bf16_t *)dalloc((size_t)P->sn * 2);
  g->zo = (mf_bf16_t *)dalloc((size_t)P->zn * 2);
  g->grads = (float *)dalloc((size_t)P->t.total * 4);
  MF_CHECK_CUDA(cudaMemset(g->so, 0xff, (size_t)P->sn * 2)); /* NaN: unwritten fails */
  MF_CHECK_CUDA(cudaMemset(g->zo, 0xff, (size_t)P->zn * 2));
  MF_CHECK_CUDA(cudaMemset(g->grads, 0, (size_t)P->t.total * 4));
  mf_stack_rng rng = {7, 3, P->training};
  for (int rep = 0; rep < reps; rep++) { /* reps > 1: gradients accumulate */
    mf_pf_cuda_stack_forward(&st, (__nv_bfloat16 *)g->so, (__nv_bfloat16 *)g->zo,
                             (const __nv_bfloat16 *)s, (const __nv_bfloat16 *)z, mask, P->N, rng);
    if (rep == 0) {
      g->ds = new_bf16(P->dso, P->sn);
      g->dz = new_bf16(P->dzo, P->zn);
    } else {
      mf_bf16_t *a = new_bf16(P->dso, P->sn), *b = new_bf16(P->dzo, P->zn);
      MF_CHECK_CUDA(cudaMemcpy(g->ds, a, (size_t)P->sn * 2, cudaMemcpyDeviceToDevice));
      MF_CHECK_CUDA(cudaMemcpy(g->dz, b, (size_t)P->zn * 2, cudaMemcpyDeviceToDevice));
      cudaFree(a);
      cudaFree(b);
    }
    mf_pf_cuda_stack_backward(&st, (__nv_bfloat16 *)g->ds, (__nv_bfloat16 *)g->dz, g->grads,
                              (const __nv_bfloat16 *)s, (const __nv_bfloat16 *)z, mask, P->N, rng);
  }
  MF_CHECK_CUDA(cudaDeviceSynchronize());
  mf_pf_cuda_stack_free(&st);
  cudaFree(master);
  cudaFree(s);
  cudaFree(z);
  cudaFree(mask);
}

static void gpu_run_blocks(const problem *P, mf_stack_policy pol, gpu_results *g, int reps,
                           int run_blocks) {
  gpu_run_planned(P, pol, g, reps, run_blocks, 0);
}

static void gpu_run(const problem *P, mf_stack_policy pol, gpu_results *g, int reps) {
  gpu_run_blocks(P, pol, g, reps, 0);
}

static void gpu_free(gpu_results *g) {
  cudaFree(g->so);
  cudaFree(g->zo);
  cudaFree(g->ds);
  cudaFree(g->dz);
  cudaFree(g->grads);
  memset(g, 0, sizeof *g);
}

static int gpu_same(const problem *P, const gpu_results *a, const gpu_results *b) {
  const void *pa[5] = {a->so, a->zo, a->ds, a->dz, a->grads};
  const void *pb[5] = {b->so, b->zo, b->ds, b->dz, b->grads};
  size_t by[5] = {(size_t)P->sn * 2, (size_t)P->zn * 2, (size_t)P->sn * 2, (size_t)P->zn * 2,
                  (size_t)P->t.total * 4};
  int same = 1;
  for (int k = 0; k < 5; k++) {
    void *x = fetch_raw(pa[k], by[k]), *y = fetch_raw(pb[k], by[k]);
    same &= memcmp(x, y, by[k]) == 0;
    free(x);
    free(y);
  }
  return same;
}

/* ---------------------------------------------------------------- the cases */

static void check_vs_cpu(const char *name, mf_pairformer_config c, int L, int N, int masked,
                         int training, uint64_t seed) {
  problem P;
  problem_make(&P, c, L, N, masked, training, seed);
  results r;
  cpu_run(&P, &r);
  gpu_results g;
  mf_stack_policy pol = {MF_STACK_RECOMPUTE, 0};
  gpu_run(&P, pol, &g, 1);
  double *x = mf_test_alloc(P.zn > P.t.total ? P.zn : P.t.total);
  char what[160];
#define CMP(label, dev, kind, ref, n)                                                    \
  do {                                                                                   \
    if (kind) from_f32(x, (const float *)(dev), n); else from_bf16(x, (const mf_bf16_t *)(dev), n); \
    snprintf(what, sizeof what, "%s %s", name, label);                                   \
    double e = mf_test_relerr(x, ref, n);                                                \
    printf("  %-44s rel err %.2e\n", what, e);                                           \
    MF_TEST(e <= TOL, "%s: rel err %.3e > %.1e", what, e, TOL);                          \
  } while (0)
  CMP("out.s", g.so, 0, r.so, P.sn);
  CMP("out.z", g.zo, 0, r.zo, P.zn);
  CMP("grad.in.s", g.ds, 0, r.ds, P.sn);
  CMP("grad.in.z", g.dz, 0, r.dz, P.zn);
  double *gall = mf_test_alloc(P.t.total);
  from_f32(gall, g.grads, P.t.total);
  /* A gradient that is zero in exact arithmetic (single_att.ln_z_b: a per-head constant
   * added to every logit of a row, which the softmax ignores) has only rounding noise for a
   * reference; such a tensor (norm below 1e-6 of the largest) is measured against the
   * largest gradient norm instead, as tools/reference/parity.py does. */
  double big = 0;
  for (int i = 0; i < P.t.n; i++) {
    const mf_param_entry *e = &P.t.entries[i];
    double n2 = sqrt(mf_test_dot(r.grads + e->offset, r.grads + e->offset, e->numel));
    if (n2 > big) big = n2;
  }
  double worst = 0;
  const char *worst_name = "";
  for (int i = 0; i < P.t.n; i++) {
    const mf_param_entry *e = &P.t.entries[i];
    double err = mf_test_relerr(gall + e->offset, r.grads + e->offset, e->numel);
    double rn = sqrt(mf_test_dot(r.grads + e->offset, r.grads + e->offset, e->numel));
    if (rn <= 1e-6 * big) {
      double d2 = 0;
      for (int64_t k = 0; k < e->numel; k++) {
        double d = gall[e->offset + k] - r.grads[e->offset + k];
        d2 += d * d;
      }
      err = sqrt(d2) / big;
    }
    snprintf(what, sizeof what, "%s grad.%s", name, e->name);
    MF_TEST(err <= TOL, "%s: rel err %.3e > %.1e", what, err, TOL);
    if (err > worst || err != err) worst = err, worst_name = e->name;
  }
  printf("  %-44s worst param grad %.2e (%s)\n", name, worst, worst_name);
#undef CMP
  gpu_free(&g);
  problem_free(&P);
}

/* With MF_PARITY_OUT=dir: the GPU's results on one problem as a parity bundle
 * (model/parity.h) at dir/<name>.safetensors, for tools/reference/parity.py. */
static void write_bundle(const char *dir, const char *name, mf_pairformer_config c, int N) {
  problem P;
  problem_make(&P, c, 2, N, 1, 1, 77);
  gpu_results g;
  gpu_run(&P, (mf_stack_policy){MF_STACK_RECOMPUTE, 0}, &g, 1);
  mf_stack_rng rng = {7, 3, P.training};
  const int Cs = P.c.c_s, Cz = P.c.c_z;
  const int64_t sh_s[2] = {N, Cs}, sh_z[3] = {N, N, Cz}, sh_m[1] = {N};
  double *x = mf_test_alloc(P.zn > P.t.total ? P.zn : P.t.total);
  float *f = (float *)malloc((size_t)(P.zn > P.t.total ? P.zn : P.t.total) * sizeof(float));
  MF_CHECK_PTR(f);
  mf_parity *b;
  mf_status st = mf_parity_open(&b);
  st = st ? st : mf_parity_meta_std(b, &P.t, N, P.training, "gpu-bf16");
  st = st ? st : mf_parity_add_params(b, "", &P.t, P.params);
  st = st ? st : mf_parity_add_f32(b, "in.s", 2, sh_s, P.s);
  st = st ? st : mf_parity_add_f32(b, "in.z", 3, sh_z, P.z);
  st = st ? st : mf_parity_add_u8(b, "in.mask", 1, sh_m, P.mask);
  st = st ? st : mf_parity_add_f32(b, "dout.s", 2, sh_s, P.dso);
  st = st ? st : mf_parity_add_f32(b, "dout.z", 3, sh_z, P.dzo);
  st = st ? st : mf_parity_add_dropout(b, &P.t, N, rng);
  const void *dev[4] = {g.so, g.zo, g.ds, g.dz};
  const char *names[4] = {"out.s", "out.z", "grad.in.s", "grad.in.z"};
  for (int k = 0; k < 4 && st == MF_OK; k++) {
    int64_t n = k % 2 ? P.zn : P.sn;
    from_bf16(x, (const mf_bf16_t *)dev[k], n);
    for (int64_t i = 0; i < n; i++) f[i] = (float)x[i];
    st = mf_parity_add_f32_raw(b, names[k], k % 2 ? 3 : 2, k % 2 ? sh_z : sh_s, f);
  }
  MF_CHECK_CUDA(cudaMemcpy(f, g.grads, (size_t)P.t.total * 4, cudaMemcpyDeviceToHost));
  st = st ? st : mf_parity_add_params_f32(b, "grad.", &P.t, f);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
  st = st ? st : mf_parity_write(b, path);
  MF_TEST(st == MF_OK, "parity bundle written to %s (%s)", path, st ? mf_error_message() : "ok");
  printf("  parity bundle: %s\n", path);
  mf_parity_free(b);
  free(f);
  gpu_free(&g);
  problem_free(&P);
}

static void check_policies(void) {
  problem P;
  problem_make(&P, small_config(), 5, 33, 1, 1, 91);
  gpu_results a, b, k2, all, twice;
  gpu_run(&P, (mf_stack_policy){MF_STACK_RECOMPUTE, 0}, &a, 1);
  gpu_run(&P, (mf_stack_policy){MF_STACK_RECOMPUTE, 0}, &b, 1);
  gpu_run(&P, (mf_stack_policy){MF_STACK_EVERY_K, 2}, &k2, 1);
  gpu_run(&P, (mf_stack_policy){MF_STACK_KEEP_ALL, 0}, &all, 1);
  MF_TEST(gpu_same(&P, &a, &b), "two runs are bit-identical");
  MF_TEST(gpu_same(&P, &a, &k2), "every-2 checkpointing gives bit-identical results");
  MF_TEST(gpu_same(&P, &a, &all), "keep-all gives bit-identical results");
  /* the triangle attentions' projections recomputed or kept for the backward (forced
   * either way through the environment; init chose for a and b) */
  gpu_results k0, k1;
  setenv("MF_PF_KEEP_PROJ", "0", 1);
  gpu_run(&P, (mf_stack_policy){MF_STACK_RECOMPUTE, 0}, &k0, 1);
  setenv("MF_PF_KEEP_PROJ", "1", 1);
  gpu_run(&P, (mf_stack_policy){MF_STACK_RECOMPUTE, 0}, &k1, 1);
  unsetenv("MF_PF_KEEP_PROJ");
  MF_TEST(gpu_same(&P, &a, &k0) && gpu_same(&P, &a, &k1),
          "projections kept or recomputed give bit-identical results");
  gpu_free(&k0);
  gpu_free(&k1);
  /* parameter gradients accumulate: two forward/backward rounds give twice the gradient */
  gpu_run(&P, (mf_stack_policy){MF_STACK_RECOMPUTE, 0}, &twice, 2);
  double *g1 = mf_test_alloc(P.t.total), *g2 = mf_test_alloc(P.t.total);
  from_f32(g1, a.grads, P.t.total);
  from_f32(g2, twice.grads, P.t.total);
  for (int64_t i = 0; i < P.t.total; i++) g1[i] *= 2;
  MF_TEST(mf_test_relerr(g2, g1, P.t.total) < 1e-6, "gradients accumulate (2 rounds = 2×)");
  gpu_free(&a);
  gpu_free(&b);
  gpu_free(&k2);
  gpu_free(&all);
  gpu_free(&twice);
  problem_free(&P);
}

/* A 5-block stack told to run its first 2 blocks equals the 2-block stack with the same
 * first two blocks, bit for bit, and leaves the other blocks' gradients zero. */
static void check_run_blocks(mf_stack_policy pol) {
  problem P2, P5;
  problem_make(&P2, small_config(), 2, 21, 1, 1, 55);
  problem_make(&P5, small_config(), 5, 21, 1, 1, 55);
  for (int i = 0; i < P2.t.n; i++) {
    const mf_param_entry *e2 = &P2.t.entries[i], *e5 = &P5.t.entries[i];
    memcpy(P5.params + e5->offset, P2.params + e2->offset, (size_t)e2->numel * sizeof(double));
  }
  gpu_results a, b;
  gpu_run(&P2, pol, &a, 1);
  gpu_run_blocks(&P5, pol, &b, 1, 2);
  int same = 1, zero = 1;
  const void *pa[4] = {a.so, a.zo, a.ds, a.dz}, *pb[4] = {b.so, b.zo, b.ds, b.dz};
  for (int k = 0; k < 4; k++) {
    size_t by = (size_t)(k % 2 ? P2.zn : P2.sn) * 2;
    void *x = fetch_raw(pa[k], by), *y = fetch_raw(pb[k], by);
    same &= memcmp(x, y, by) == 0;
    free(x);
    free(y);
  }
  float *g2 = (float *)fetch_raw(a.grads, (size_t)P2.t.total * 4);
  float *g5 = (float *)fetch_raw(b.grads, (size_t)P5.t.total * 4);
  for (int i = 0; i < P2.t.n; i++) {
    const mf_param_entry *e2 = &P2.t.entries[i], *e5 = &P5.t.entries[i];
    same &= memcmp(g2 + e2->offset, g5 + e5->offset, (size_t)e2->numel * 4) == 0;
    for (int64_t k = e2->numel; k < e5->numel; k++) zero &= g5[e5->offset + k] == 0.0f;
  }
  MF_TEST(same, "run_blocks = 2 of 5 (%s) equals the 2-block stack bit for bit",
          mf_stack_policy_name(pol.kind));
  MF_TEST(zero, "run_blocks = 2 of 5 (%s) leaves blocks 2..4 without gradient",
          mf_stack_policy_name(pol.kind));
  free(g2);
  free(g5);
  gpu_free(&a);
  gpu_free(&b);
  problem_free(&P2);
  problem_free(&P5);
}

static void check_planner(void) {
  mf_pairformer_config c = mf_pairformer_config_default();
  mf_params_table t;
  MF_ASSERT(mf_params_build_pairformer(&t, &c, 48) == MF_OK, "%s", mf_error_message());
  mf_pf_cuda_stack st;
  int64_t budget = (int64_t)8 << 30;
  mf_status s = mf_pf_cuda_stack_init(&st, &t, (mf_stack_policy){MF_STACK_RECOMPUTE, 0}, 4096,
                                      budget, 0);
  MF_TEST(s == MF_ERR_CONFIG && strstr(mf_error_message(), "largest N that fits"),
          "a crop that does not fit is refused naming the largest N (%s)", mf_error_message());
  int n = mf_stack_max_n_sized(&c, 48, (mf_stack_policy){MF_STACK_RECOMPUTE, 0},
                               mf_pf_cuda_sizes, NULL, budget);
  mf_stack_plan p;
  MF_TEST(n > 0 && mf_stack_plan_fit_sized(&p, &c, 48, n, (mf_stack_policy){MF_STACK_RECOMPUTE, 0},
                                           mf_pf_cuda_sizes, NULL, budget) == MF_OK,
          "the largest N (%d) fits", n);
  printf("  planner: 48 blocks in 8 GiB fit N <= %d (recompute)\n", n);
  /* at that N only the plan without the kept projections fits: init takes it; at a small
   * crop the plan with them fits and init keeps them */
  s = mf_pf_cuda_stack_init(&st, &t, (mf_stack_policy){MF_STACK_RECOMPUTE, 0}, n, budget, 0);
  MF_TEST(s == MF_OK && st.keep == 0, "at the largest N (%d) init plans without the kept "
          "projections (status %d, keep %d)", n, (int)s, st.keep);
  mf_pf_cuda_stack_free(&st);
  s = mf_pf_cuda_stack_init(&st, &t, (mf_stack_policy){MF_STACK_RECOMPUTE, 0}, 128, budget, 0);
  MF_TEST(s == MF_OK && st.keep == 1, "at N = 128 init keeps the projections (status %d, keep %d)",
          (int)s, st.keep);
  mf_pf_cuda_stack_free(&st);
  mf_params_free(&t);
}

/* A stack planned at N_max runs every crop N <= N_max, also where the ops' workspace at N
 * is larger than at N_max (their row chunking is not monotone in N): it must equal, bit for
 * bit, the stack planned at N itself. */
static void check_crop_below_plan(void) {
  mf_pairformer_config c = mf_pairformer_config_default();
  size_t best = 0;
  int n_best = 0, m = 0;
  for (int n = 1; n <= 1024 && !m; n++) {
    size_t w = mf_pf_cuda_block_workspace(&c, n, 0);
    if (w > best) best = w, n_best = n;
    else if (w < best) m = n;
  }
  if (!m) { /* the workspace is monotone up to 1024: the envelope is the workspace itself */
    int same = 1;
    for (int n = 1; n <= 1024; n++)
      same &= mf_pf_cuda_block_workspace_upto(&c, n, 0) == mf_pf_cuda_block_workspace(&c, n, 0);
    MF_TEST(same, "block workspace monotone up to N = 1024 and block_workspace_upto equal to it");
    return;
  }
  /* the envelope at m is the largest workspace below it (n_best's), not m's own */
  MF_TEST(mf_pf_cuda_block_workspace_upto(&c, m, 0) == best &&
              mf_pf_cuda_block_workspace(&c, m, 0) < best,
          "block_workspace_upto(%d) = %zu, the workspace at N = %d (its own: %zu)", m,
          mf_pf_cuda_block_workspace_upto(&c, m, 0), n_best, mf_pf_cuda_block_workspace(&c, m, 0));
  problem P;
  problem_make(&P, c, 1, n_best, 1, 1, 21);
  gpu_results a, b;
  gpu_run_planned(&P, (mf_stack_policy){MF_STACK_RECOMPUTE, 0}, &a, 1, 0, m);
  gpu_run(&P, (mf_stack_policy){MF_STACK_RECOMPUTE, 0}, &b, 1);
  MF_TEST(gpu_same(&P, &a, &b), "N = %d in a stack planned at N_max = %d equals the stack "
          "planned at N = %d bit for bit", n_best, m, n_best);
  gpu_free(&a);
  gpu_free(&b);
  problem_free(&P);
}

static void time_block(int N) {
  mf_pairformer_config c = mf_pairformer_config_default();
  problem P;
  problem_make(&P, c, 1, N, 0, 1, 5);
  mf_pf_cuda_stack st;
  MF_ASSERT(mf_pf_cuda_stack_init(&st, &P.t, (mf_stack_policy){MF_STACK_RECOMPUTE, 0}, N, 0, 0) ==
                MF_OK, "%s", mf_error_message());
  float *master = new_f32(P.params, P.t.total), *grads = (float *)dalloc((size_t)P.t.total * 4);
  mf_pf_cuda_stack_set_params(&st, master);
  mf_bf16_t *s = new_bf16(P.s, P.sn), *z = new_bf16(P.z, P.zn), *so = new_bf16(P.s, P.sn),
            *zo = new_bf16(P.z, P.zn), *ds = new_bf16(P.dso, P.sn), *dz = new_bf16(P.dzo, P.zn);
  mf_stack_rng rng = {1, 1, 1};
  cudaEvent_t e0, e1, e2;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventCreate(&e2);
  float tf = 0, tb = 0;
  for (int rep = 0; rep < 5; rep++) {
    cudaEventRecord(e0);
    mf_pf_cuda_stack_forward(&st, (__nv_bfloat16 *)so, (__nv_bfloat16 *)zo, (__nv_bfloat16 *)s,
                             (__nv_bfloat16 *)z, NULL, N, rng);
    cudaEventRecord(e1);
    mf_pf_cuda_stack_backward(&st, (__nv_bfloat16 *)ds, (__nv_bfloat16 *)dz, grads,
                              (__nv_bfloat16 *)s, (__nv_bfloat16 *)z, NULL, N, rng);
    cudaEventRecord(e2);
    cudaEventSynchronize(e2);
    float a, b;
    cudaEventElapsedTime(&a, e0, e1);
    cudaEventElapsedTime(&b, e1, e2);
    if (rep >= 2) tf += a / 3, tb += b / 3;
  }
  printf("  timing (not a benchmark): one AF3 block N = %d: fwd %.2f ms, bwd %.2f ms, "
         "arena %.2f GiB\n", N, tf, tb, st.plan.total_bytes / 1073741824.0);
  cudaFree(master); cudaFree(grads); cudaFree(s); cudaFree(z); cudaFree(so); cudaFree(zo);
  cudaFree(ds); cudaFree(dz);
  mf_pf_cuda_stack_free(&st);
  problem_free(&P);
}

int main(void) {
  MF_ASSERT(mf_cuda_init(0) == MF_OK, "%s", mf_error_message());
  mf_test_begin("test_pairformer_gpu");
  if (getenv("MF_PF_TIMING_ONLY")) {
    const int N = atoi(getenv("MF_PF_TIMING_ONLY"));
    /* MF_ATT_VARIANT: the attention variant to time (mf_attention_cuda_set_variant) */
    if (getenv("MF_ATT_VARIANT")) mf_attention_cuda_set_variant(atoi(getenv("MF_ATT_VARIANT")));
    /* MF_TRIMUL_VARIANT: the transposing kernels of the triangle updates (0 scalar, 1 default) */
    if (getenv("MF_TRIMUL_VARIANT")) mf_trimul_cuda_set_variant(atoi(getenv("MF_TRIMUL_VARIANT")));
    for (int i = 0; i < 2; i++) time_block(N);
    mf_test_free_all();
    return mf_test_end();
  }
  mf_pairformer_config af3 = mf_pairformer_config_default();
  check_vs_cpu("small N=1", small_config(), 1, 1, 0, 0, 11);
  check_vs_cpu("small N=37 L=2 mask drop", small_config(), 2, 37, 1, 1, 12);
  check_vs_cpu("af3 N=24 mask drop", af3, 1, 24, 1, 1, 13);
  check_vs_cpu("af3 N=48", af3, 1, 48, 0, 0, 14);
  /* the ops' row chunks forced small (300 rows: 6 chunks of the 1600 pair rows, the last
   * partial and not a multiple of N), so the block runs every op's multi-chunk path */
  int64_t old_chunk = mf_fusion_set_chunk_rows(300);
  check_vs_cpu("af3 N=40 mask drop chunk=300", af3, 1, 40, 1, 1, 15);
  mf_fusion_set_chunk_rows(old_chunk);
  check_policies();
  check_run_blocks((mf_stack_policy){MF_STACK_RECOMPUTE, 0});
  check_run_blocks((mf_stack_policy){MF_STACK_EVERY_K, 3});
  check_planner();
  check_crop_below_plan();
  if (getenv("MF_PARITY_OUT")) {
    write_bundle(getenv("MF_PARITY_OUT"), "gpu_small_L2_N29", small_config(), 29);
    write_bundle(getenv("MF_PARITY_OUT"), "gpu_af3_L2_N40", af3, 40);
  }
  if (!getenv("MF_TEST_NO_TIMING")) {
    time_block(256);
    time_block(384);
  }
  mf_test_free_all();
  return mf_test_end();
}
