/* attention_lab.cu — kernel lab for EvoFlash-3D (attention with a pair bias broadcast over
 * rows): the versions side by side, each validated against the real CPU reference
 * (src/ops/cpu/attention.c in double, linked from libmegafold_f64.a, never copied) and
 * timed on a triangle-attention shape. Timings and notes: dev/cuda/README.md.
 *
 *   v0 simt      lab only: forward, one warp per query row, two passes over the keys
 *                (max, then exp-sum and P·V), no shared memory, no tensor cores
 *   v1 portable  src/ops/cuda/attention.cu with the portable fragment path (warp
 *                shuffles + FMAs in place of mma.sync/ldmatrix/cp.async): fwd + bwd
 *   v2 mma       src/ops/cuda/attention.cu, one 4-warp CTA per 64-row tile
 *                (mf_attention_cuda_set_variant(2)): mma.sync m16n8k16 bf16, ldmatrix,
 *                cp.async double buffering; fwd + bwd
 *   v3 g21, v4 g12, v5 g22   the same kernels with CTAs of 2 or 4 warpgroups sharing the
 *                tiles they stream (layouts (2,1), (1,2), (2,2) in every kernel;
 *                set_variant(3..5))
 *   v6 3-pass    set_variant(6): v2's layout and the dbias pass split into row ranges
 *                when its grid is short of full waves (the default until step 7)
 *   v7 fused     set_variant(7): dK, dV and dQ in one pass (a CTA per (b, r, h) slab,
 *                key tiles outer, query tiles inner, dQ in an fp32 accumulator of the
 *                whole slab in shared memory or in the CTA's global scratch), dbias as v6
 *   v8 fused-gmem, v9 fused-smem   v7 with the dQ accumulator forced into global scratch
 *                or shared memory (set_variant(8), (9)); va, vb: v8 with the fused
 *                kernel's step schedule 0 (three barriers per step) or 2 (two, dV/dK
 *                products after the dSᵀ barrier) in place of 1 (set_variant(10), (11))
 *   vc fused2, vd fused2-m2   set_variant(12), (13): the fused pass with CTAs of two
 *                warpgroups on key-tile pairs sharing the Q/dO tiles and the dQ
 *                accumulator (fused2_kernel), 1 / 2 CTAs per SM in the register bound
 *
 *   attention_lab [N_time...]  (default 512: R = N, H = 4, D = 32; per-kernel backward
 *                              times = backward with only dK/dV, only dQ, dQ + dbias minus
 *                              dQ; for v7..v9: the fused pass (dQ, dK, dV, no dbias)
 *                              and dbias = all − fused; fwd+bwd timed as one;
 *                              then v7's forward in each CTA order 0..2;
 *                              LAB_VERSIONS=2678 times only those versions)
 * Not a test (tests/gpu/test_attention_gpu.cu is) and not the benchmark (bench/). */
#ifndef MF_REAL_DOUBLE
#define MF_REAL_DOUBLE 1 /* the oracle library is the double build */
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/gpu.h"

/* v0: one warp per (b, r, h, q) row. out (B,R,H,Q,D), lse (B,R,H,Q); no gate. */
__global__ static void v0_simt_fwd(mf_bf16_t *out, float *lse, const mf_bf16_t *q,
                                   const mf_bf16_t *k, const mf_bf16_t *v, const mf_bf16_t *bias,
                                   const uint8_t *mask, mf_attn_dims d, float scale) {
  const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / MF_WARP_SIZE;
  const int lane = threadIdx.x % MF_WARP_SIZE;
  const int64_t nrows = (int64_t)d.B * d.R * d.H * d.Q;
  if (row >= nrows) return;
  const int i = (int)(row % d.Q);
  const int64_t brh = row / d.Q;
  const int h = (int)(brh % d.H);
  const int64_t br = brh / d.H;
  const int b = (int)(br / d.R);
  const mf_bf16_t *qr = q + row * d.D, *kb = k + brh * d.K * d.D, *vb = v + brh * d.K * d.D;
  const mf_bf16_t *brow = bias ? bias + (((int64_t)b * d.H + h) * d.Q + i) * d.K : NULL;
  const uint8_t *mrow = mask ? mask + br * d.K : NULL;
  float mx = -INFINITY;
  for (int j = lane; j < d.K; j += MF_WARP_SIZE) {
    if (mrow && !mrow[j]) continue;
    float s = 0;
    for (int c = 0; c < d.D; c++) s += mf_bf16_to_f32(qr[c]) * mf_bf16_to_f32(kb[(int64_t)j * d.D + c]);
    s = s * scale + (brow ? mf_bf16_to_f32(brow[j]) : 0.f);
    mx = fmaxf(mx, s);
  }
  mx = mf_warp_max(mx);
  float acc[64];
  for (int c = 0; c < d.D; c++) acc[c] = 0;
  float l = 0;
  for (int j = lane; j < d.K; j += MF_WARP_SIZE) {
    if (mrow && !mrow[j]) continue;
    float s = 0;
    for (int c = 0; c < d.D; c++) s += mf_bf16_to_f32(qr[c]) * mf_bf16_to_f32(kb[(int64_t)j * d.D + c]);
    s = s * scale + (brow ? mf_bf16_to_f32(brow[j]) : 0.f);
    const float p = __expf(s - mx);
    l += p;
    for (int c = 0; c < d.D; c++) acc[c] += p * mf_bf16_to_f32(vb[(int64_t)j * d.D + c]);
  }
  l = mf_warp_sum(l);
  for (int c = 0; c < d.D; c++) {
    const float a = mf_warp_sum(acc[c]);
    if (lane == 0) out[row * d.D + c] = mf_f32_to_bf16(l > 0 ? a / l : 0.f);
  }
  if (lane == 0) lse[row] = l > 0 ? mx + logf(l) : -INFINITY;
}

static void rand_fill(double *x, int64_t n, unsigned seed) {
  srand(seed);
  for (int64_t i = 0; i < n; i++) {
    double u1 = (rand() + 1.0) / (RAND_MAX + 2.0), u2 = rand() / (RAND_MAX + 1.0);
    x[i] = mf_f32_from_bf16(mf_bf16_from_f32((float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2))));
  }
}

/* Timing inputs, made on the device (the host path takes minutes at N = 2048): uniform
 * with unit variance from a hash of the index. */
__global__ static void fill_dev(mf_bf16_t *x, int64_t n, uint32_t seed) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 40503u ^ seed * 2246822519u;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    x[i] = mf_f32_to_bf16(((float)(h >> 8) * (1.f / 16777216.f) * 2.f - 1.f) * 1.7320508f);
  }
}
static mf_bf16_t *dev_random(int64_t n, uint32_t seed) {
  mf_bf16_t *d;
  MF_CHECK_CUDA(cudaMalloc(&d, (size_t)n * 2));
  fill_dev<<<1024, 256>>>(d, n, seed);
  MF_CHECK_LAUNCH();
  return d;
}

static mf_bf16_t *upload(const double *x, int64_t n) {
  mf_bf16 *h = (mf_bf16 *)malloc((size_t)n * 2);
  for (int64_t i = 0; i < n; i++) h[i] = mf_bf16_from_f32((float)x[i]);
  mf_bf16_t *d;
  MF_CHECK_CUDA(cudaMalloc(&d, (size_t)n * 2));
  MF_CHECK_CUDA(cudaMemcpy(d, h, (size_t)n * 2, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

static double relerr_dev(const mf_bf16_t *d, const double *ref, int64_t n) {
  mf_bf16 *h = (mf_bf16 *)malloc((size_t)n * 2);
  MF_CHECK_CUDA(cudaMemcpy(h, d, (size_t)n * 2, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    const double g = mf_f32_from_bf16(h[i]);
    if (!isfinite(g)) { free(h); return INFINITY; }
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
  }
  free(h);
  return sqrt(num / (den > 0 ? den : 1));
}

typedef struct {
  mf_attn_dims d;
  mf_bf16_t *q, *k, *v, *bias, *dout, *out, *dq, *dk, *dv, *dbias;
  uint8_t *mask;
  float *lse;
  void *ws;
  size_t wsb;
} problem;

static void make_problem(problem *p, mf_attn_dims d, int with_mask, double **host) {
  p->d = d;
  const int64_t nq = (int64_t)d.B * d.R * d.H * d.Q * d.D, nb = (int64_t)d.B * d.H * d.Q * d.K;
  double *x = NULL;
  if (host) {
    x = (double *)malloc((size_t)(5 * nq + nb) * sizeof(double));
    rand_fill(x, 5 * nq + nb, 7);
    p->q = upload(x, nq);
    p->k = upload(x + nq, nq);
    p->v = upload(x + 2 * nq, nq);
    p->dout = upload(x + 3 * nq, nq);
    p->bias = upload(x + 5 * nq, nb);
  } else {
    p->q = dev_random(nq, 1);
    p->k = dev_random(nq, 2);
    p->v = dev_random(nq, 3);
    p->dout = dev_random(nq, 4);
    p->bias = dev_random(nb, 5);
  }
  p->mask = NULL;
  if (with_mask) {
    const int64_t nm = (int64_t)d.B * d.R * d.K;
    uint8_t *m = (uint8_t *)malloc((size_t)nm);
    for (int64_t i = 0; i < nm; i++) m[i] = (i * 2654435761u >> 7) % 5 != 0;
    memset(m + d.K, 0, (size_t)d.K); /* r = 1 fully masked */
    MF_CHECK_CUDA(cudaMalloc(&p->mask, (size_t)nm));
    MF_CHECK_CUDA(cudaMemcpy(p->mask, m, (size_t)nm, cudaMemcpyHostToDevice));
    if (host) host[5] = (double *)(void *)m;
  }
  MF_CHECK_CUDA(cudaMalloc(&p->out, nq * 2));
  MF_CHECK_CUDA(cudaMalloc(&p->dq, nq * 2));
  MF_CHECK_CUDA(cudaMalloc(&p->dk, nq * 2));
  MF_CHECK_CUDA(cudaMalloc(&p->dv, nq * 2));
  MF_CHECK_CUDA(cudaMalloc(&p->dbias, nb * 2));
  MF_CHECK_CUDA(cudaMalloc(&p->lse, (size_t)d.B * d.R * d.H * d.Q * 4));
  p->wsb = mf_attention_backward_cuda_workspace(d, 0);
  MF_CHECK_CUDA(cudaMalloc(&p->ws, p->wsb));
  if (host) host[0] = x;
}

static void free_problem(problem *p) {
  void *ps[] = {p->q, p->k, p->v, p->bias, p->dout, p->out, p->dq, p->dk, p->dv, p->dbias, p->lse, p->ws, p->mask};
  for (int i = 0; i < 13; i++)
    if (ps[i]) MF_CHECK_CUDA(cudaFree(ps[i]));
}

#define NVER 14
static const int ver_variant[NVER] = {-1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};

/* which: 0 all gradients, 1 dK/dV only, 2 dQ only, 3 dQ and dbias, 4 dQ, dK, dV (each
 * with the prologue; the dbias pass alone is 3 minus 2, since its split form borrows dq's
 * buffer; the fused pass is 4) */
static int g_which = 0;

static void run_fwd(problem *p, int version) {
  if (version == 0) {
    const int64_t rows = (int64_t)p->d.B * p->d.R * p->d.H * p->d.Q;
    v0_simt_fwd<<<mf_cdiv(rows * MF_WARP_SIZE, 256), 256>>>(p->out, p->lse, p->q, p->k, p->v, p->bias,
                                                           p->mask, p->d, (float)p->d.scale);
    MF_CHECK_LAUNCH();
    return;
  }
  mf_attention_cuda_set_variant(ver_variant[version]);
  mf_attention_forward_cuda(p->out, p->lse, p->q, p->k, p->v, p->bias, p->mask, NULL, p->d, 0);
}

static void run_bwd(problem *p, int version) {
  mf_attention_cuda_set_variant(ver_variant[version]);
  const int w = g_which;
  const int kv = w == 0 || w == 1 || w == 4;
  mf_attention_backward_cuda(w != 1 ? p->dq : NULL, kv ? p->dk : NULL, kv ? p->dv : NULL,
                             w == 0 || w == 3 ? p->dbias : NULL,
                             NULL, p->dout, p->out, p->lse, p->q,
                             p->k, p->v, p->bias, p->mask, NULL, p->d, p->ws, p->wsb, 0);
}

/* bwd: 0 forward, 1 backward, 2 forward + backward */
static float time_ms(problem *p, int version, int bwd) {
  cudaEvent_t e0, e1;
  MF_CHECK_CUDA(cudaEventCreate(&e0));
  MF_CHECK_CUDA(cudaEventCreate(&e1));
  float best[7];
  run_fwd(p, version);
  if (bwd) run_bwd(p, version);
  for (int rep = 0; rep < 7; rep++) {
    MF_CHECK_CUDA(cudaEventRecord(e0));
    if (bwd != 1) run_fwd(p, version);
    if (bwd) run_bwd(p, version);
    MF_CHECK_CUDA(cudaEventRecord(e1));
    MF_CHECK_CUDA(cudaEventSynchronize(e1));
    MF_CHECK_CUDA(cudaEventElapsedTime(&best[rep], e0, e1));
  }
  for (int i = 0; i < 7; i++)
    for (int j = i + 1; j < 7; j++)
      if (best[j] < best[i]) { float t = best[i]; best[i] = best[j]; best[j] = t; }
  MF_CHECK_CUDA(cudaEventDestroy(e0));
  MF_CHECK_CUDA(cudaEventDestroy(e1));
  return best[3];
}

static int same_dev(const void *a, const void *b, size_t n) {
  char *ha = (char *)malloc(n), *hb = (char *)malloc(n);
  MF_CHECK_CUDA(cudaMemcpy(ha, a, n, cudaMemcpyDeviceToHost));
  MF_CHECK_CUDA(cudaMemcpy(hb, b, n, cudaMemcpyDeviceToHost));
  const int ok = memcmp(ha, hb, n) == 0;
  free(ha);
  free(hb);
  return ok;
}

int main(int argc, char **argv) {
  const char *names[NVER] = {"v0 simt", "v1 portable", "v2 mma", "v3 g21", "v4 g12", "v5 g22",
                             "v6 3-pass", "v7 fused", "v8 fused-g", "v9 fused-s", "va fused-g0",
                             "vb fused-g2", "vc fused2", "vd fused2-m2"};
  /* validation: B=1, R=5, H=3, N=130, D=32, bias and mask (one fully masked r); R odd so
   * that a CTA of two row warpgroups has one past the end */
  mf_attn_dims dv = {1, 5, 3, 130, 130, 32, 1.0 / sqrt(32.0)};
  double *host[6] = {0};
  problem pv;
  make_problem(&pv, dv, 1, host);
  const int64_t nq = (int64_t)dv.B * dv.R * dv.H * dv.Q * dv.D, nb = (int64_t)dv.B * dv.H * dv.Q * dv.K;
  double *x = host[0], *mh = host[5];
  uint8_t *mask = (uint8_t *)(void *)mh;
  double *ro = (double *)malloc(nq * 8), *rl = (double *)malloc(nq * 8), *rdq = (double *)malloc(nq * 8);
  double *rdk = (double *)malloc(nq * 8), *rdv = (double *)malloc(nq * 8), *rdb = (double *)malloc(nb * 8);
  mf_attention_forward(ro, rl, x, x + nq, x + 2 * nq, x + 5 * nq, mask, NULL, dv);
  mf_attention_backward(rdq, rdk, rdv, rdb, NULL, x + 3 * nq, rl, x, x + nq, x + 2 * nq, x + 5 * nq,
                        mask, NULL, dv);
  mf_bf16_t *keep[4];
  for (int i = 0; i < 4; i++) MF_CHECK_CUDA(cudaMalloc(&keep[i], (size_t)(i == 3 ? nb : nq) * 2));
  int bad = 0;
  printf("validation vs CPU reference (double), B=1 R=5 H=3 N=130 D=32, bias + mask:\n");
  for (int ver = 0; ver < NVER; ver++) {
    MF_CHECK_CUDA(cudaMemset(pv.out, 0xff, nq * 2));
    run_fwd(&pv, ver);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    const double eo = relerr_dev(pv.out, ro, nq);
    bad += !(eo < 1e-2);
    printf("  %-12s out %.2e", names[ver], eo);
    if (ver > 0) {
      void *gs[] = {pv.dq, pv.dk, pv.dv, pv.dbias};
      for (int rep = 0; rep < 2; rep++) {
        for (int i = 0; i < 4; i++) MF_CHECK_CUDA(cudaMemset(gs[i], 0xff, (i == 3 ? nb : nq) * 2));
        run_bwd(&pv, ver);
        MF_CHECK_CUDA(cudaDeviceSynchronize());
        if (rep == 0)
          for (int i = 0; i < 4; i++)
            MF_CHECK_CUDA(cudaMemcpy(keep[i], gs[i], (i == 3 ? nb : nq) * 2, cudaMemcpyDeviceToDevice));
      }
      const double e[4] = {relerr_dev(pv.dq, rdq, nq), relerr_dev(pv.dk, rdk, nq),
                           relerr_dev(pv.dv, rdv, nq), relerr_dev(pv.dbias, rdb, nb)};
      int same = 1;
      for (int i = 0; i < 4; i++) {
        bad += !(e[i] < 1e-2);
        same &= same_dev(keep[i], gs[i], (size_t)(i == 3 ? nb : nq) * 2);
      }
      bad += !same;
      printf("  dq %.2e  dk %.2e  dv %.2e  dbias %.2e  rerun %s", e[0], e[1], e[2], e[3],
             same ? "bit-identical" : "DIFFERS");
    }
    printf("\n");
  }
  for (int i = 0; i < 4; i++) MF_CHECK_CUDA(cudaFree(keep[i]));
  free_problem(&pv);
  printf("validation: %s\n", bad ? "FAILED" : "ok");

  /* timing: triangle attention R = N, H = 4, D = 32, no mask */
  for (int ai = 1; ai < (argc > 1 ? argc : 2); ai++) {
    const int Nt = argc > 1 ? atoi(argv[ai]) : 512;
    mf_attn_dims dt = {1, Nt, 4, Nt, Nt, 32, 1.0 / sqrt(32.0)};
    problem pt;
    make_problem(&pt, dt, 0, NULL);
    const double f1 = 4.0 * Nt * 4.0 * Nt * (double)Nt * 32;
    printf("timing, triangle attention N=R=%d H=4 D=32 (median of 7; dkdv, dq: backward with "
           "only that gradient, prologue included; dbias: (dq + dbias) - dq):\n", Nt);
    for (int ver = 0; ver < NVER; ver++) {
      if (ver < 2 && Nt > 512) continue; /* the slow versions only at small N */
      if (getenv("LAB_VERSIONS") && !strchr(getenv("LAB_VERSIONS"), "0123456789abcd"[ver])) continue;
      const float tf = time_ms(&pt, ver, 0);
      printf("  %-12s fwd %8.3f ms (%6.1f TFLOP/s)", names[ver], tf, f1 / tf / 1e9);
      if (ver > 0) {
        const float tb = time_ms(&pt, ver, 1);
        printf("  bwd %8.3f ms (%6.1f TFLOP/s)", tb, 2.5 * f1 / tb / 1e9);
        if (ver > 1) printf("  fwd+bwd %8.3f", time_ms(&pt, ver, 2));
        if (ver >= 7) {
          g_which = 4;
          const float tf4 = time_ms(&pt, ver, 1);
          g_which = 0;
          printf("  fused %7.3f  dbias %7.3f", tf4, tb - tf4);
        } else if (ver > 1) {
          float tk[3];
          for (int w = 1; w <= 3; w++) {
            g_which = w;
            tk[w - 1] = time_ms(&pt, ver, 1);
          }
          g_which = 0;
          printf("  dkdv %7.3f  dq %7.3f  dbias %7.3f", tk[0], tk[1], tk[2] - tk[1]);
        }
      }
      printf("\n");
    }
    /* the default version's forward in each order of its CTAs (mf_attention_cuda_set_fwd_order) */
    for (int order = 0; order <= 2; order++) {
      const int prev = mf_attention_cuda_set_fwd_order(order);
      const float tf = time_ms(&pt, 7, 0);
      printf("  v7 fwd, CTA order %d: %8.3f ms (%6.1f TFLOP/s)\n", order, tf, f1 / tf / 1e9);
      mf_attention_cuda_set_fwd_order(prev);
    }
    free_problem(&pt);
  }
  mf_attention_cuda_set_variant(0);
  return bad ? 1 : 0;
}
