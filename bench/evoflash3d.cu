/* evoflash3d.cu — benchmark of EvoFlash-3D (src/ops/cuda/attention.cu): forward,
 * backward and forward+backward time and the peak device memory beyond the inputs, for
 * triangle attention (H = 4, D = 32, R = N) and single attention with pair bias
 * (H = 16, D = 24, R = 1), bf16, no mask, no gate (the function the PyTorch peers of
 * bench/evoflash3d_peers.py compute). Also measures the exponential unit's rate (ex2 per
 * second), the bound of the forward at D = 32. Not a correctness test
 * (tests/gpu/test_attention_gpu.cu is).
 *
 *   evoflash3d [--tri N,N,...] [--single N,N,...] [--json FILE] [--once 1] [--mask 1] [--gate 1]
 * Prints one line per (shape, pass) and writes JSON rows (DESIGN.md format, without the
 * header fields, which bench/evoflash3d.sh adds). --mask 1 adds an all-valid key mask
 * (B, R, K) and --gate 1 a sigmoid gate (B, R, H, Q, D), as the Pairformer's triangle
 * attention passes them: what they cost beyond the peers' function (the shape names get
 * "+mask", "+gate"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <algorithm>
#include <vector>

#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/gpu.h"

/* x (n) ← approximately N(0, 1) bf16, from a hash of (seed, i) (Box–Muller). */
__global__ static void fill_randn(mf_bf16_t *x, int64_t n, uint32_t seed) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed * 2246822519u ^ (uint32_t)(i >> 32) * 3266489917u;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    uint32_t h2 = h * 668265263u + 374761393u;
    h2 ^= h2 >> 15; h2 *= 2246822519u; h2 ^= h2 >> 13;
    const float u1 = ((h >> 8) + 1) * (1.f / 16777217.f), u2 = (h2 >> 8) * (1.f / 16777216.f);
    x[i] = mf_f32_to_bf16(sqrtf(-2.f * logf(u1)) * cospif(2.f * u2));
  }
}

/* Each thread: ITERS × 8 dependent-free ex2.approx; out keeps the compiler honest. */
__global__ static void ex2_rate(float *out, int iters) {
  float a[8];
  for (int j = 0; j < 8; j++) a[j] = threadIdx.x * 1e-7f + j * 1e-3f;
  for (int i = 0; i < iters; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) a[j] = exp2f(a[j]) - 1.0f;
  float s = 0;
  for (int j = 0; j < 8; j++) s += a[j];
  if (s == 12345.f) out[0] = s;
}

static mf_bf16_t *alloc_randn(int64_t n, uint32_t seed) {
  mf_bf16_t *p = NULL;
  MF_CHECK_CUDA(cudaMalloc(&p, (size_t)n * sizeof(mf_bf16_t)));
  fill_randn<<<1024, 256>>>(p, n, seed);
  MF_CHECK_LAUNCH();
  return p;
}

typedef struct {
  double fwd, bwd, fwdbwd;
} times_t;

static FILE *g_json;
static int g_rows;

static void json_row(const char *shape, int N, int R, int H, int D, const char *pass, double ms,
                     double peak_gib, double extra_gib, double flops) {
  printf("%-7s N=%5d R=%5d H=%2d D=%2d %-6s %9.3f ms  %7.1f TFLOP/s  peak %.3f GiB  extra %.3f GiB\n",
         shape, N, R, H, D, pass, ms, flops / ms / 1e9, peak_gib, extra_gib);
  fflush(stdout);
  if (!g_json) return;
  fprintf(g_json,
          "%s  {\"variant\": \"megafold\", \"shape\": \"%s\", \"N\": %d, \"R\": %d, \"H\": %d, \"D\": %d, "
          "\"pass\": \"%s\", \"ms\": %.4f, \"peak_gib\": %.4f, \"extra_gib\": %.4f, \"tflops\": %.2f}",
          g_rows++ ? ",\n" : "", shape, N, R, H, D, pass, ms, peak_gib, extra_gib,
          flops / ms / 1e9);
}

static double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

static int g_once; /* --once 1: one forward and one backward per shape, untimed (for ncu) */
static int g_mask, g_gate; /* --mask 1, --gate 1 */

static void bench_shape(const char *shape0, int N, int R, int H, int D) {
  if (N <= 0) return;
  char shape[32];
  snprintf(shape, sizeof shape, "%s%s%s", shape0, g_mask ? "+mask" : "", g_gate ? "+gate" : "");
  const int B = 1;
  mf_attn_dims d = {B, R, H, N, N, D, 1.0 / sqrt((double)D)};
  const int64_t nq = (int64_t)B * R * H * N * D, nb = (int64_t)B * H * N * N, nl = (int64_t)B * R * H * N;
  size_t free0 = 0, total = 0;
  MF_CHECK_CUDA(cudaDeviceSynchronize());
  MF_CHECK_CUDA(cudaMemGetInfo(&free0, &total));
  /* inputs: q, k, v, bias, dout */
  mf_bf16_t *q = alloc_randn(nq, 1), *k = alloc_randn(nq, 2), *v = alloc_randn(nq, 3);
  mf_bf16_t *bias = alloc_randn(nb, 4), *dout = alloc_randn(nq, 5);
  mf_bf16_t *gate = g_gate ? alloc_randn(nq, 6) : NULL;
  uint8_t *mask = NULL;
  if (g_mask) {
    MF_CHECK_CUDA(cudaMalloc(&mask, (size_t)B * R * N));
    MF_CHECK_CUDA(cudaMemset(mask, 1, (size_t)B * R * N));
  }
  MF_CHECK_CUDA(cudaDeviceSynchronize());
  size_t free1 = 0;
  MF_CHECK_CUDA(cudaMemGetInfo(&free1, &total));
  /* everything else the op needs: out, lse, dq, dk, dv, dbias, workspace */
  mf_bf16_t *out, *dq, *dk, *dv, *db, *dg = NULL;
  float *lse;
  const size_t ws = mf_attention_backward_cuda_workspace(d, g_gate);
  if (g_gate) MF_CHECK_CUDA(cudaMalloc(&dg, nq * 2));
  void *w;
  MF_CHECK_CUDA(cudaMalloc(&out, nq * 2));
  MF_CHECK_CUDA(cudaMalloc(&lse, nl * 4));
  MF_CHECK_CUDA(cudaMalloc(&dq, nq * 2));
  MF_CHECK_CUDA(cudaMalloc(&dk, nq * 2));
  MF_CHECK_CUDA(cudaMalloc(&dv, nq * 2));
  MF_CHECK_CUDA(cudaMalloc(&db, nb * 2));
  MF_CHECK_CUDA(cudaMalloc(&w, ws));
  MF_CHECK_CUDA(cudaDeviceSynchronize());
  size_t free2 = 0;
  MF_CHECK_CUDA(cudaMemGetInfo(&free2, &total));
  const double gib = 1024.0 * 1024 * 1024;
  /* the kernels allocate nothing: the peak is what was allocated here */
  const double extra = (double)(free1 - free2) / gib, peak = (double)(free0 - free2) / gib;

  auto fwd = [&]() { mf_attention_forward_cuda(out, lse, q, k, v, bias, mask, gate, d, 0); };
  auto bwd = [&]() {
    mf_attention_backward_cuda(dq, dk, dv, db, dg, dout, out, lse, q, k, v, bias, mask, gate, d, w, ws, 0);
  };
  cudaEvent_t e0, e1;
  MF_CHECK_CUDA(cudaEventCreate(&e0));
  MF_CHECK_CUDA(cudaEventCreate(&e1));
  if (g_once) {
    fwd();
    bwd();
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    void *ps[] = {q, k, v, bias, dout, out, lse, dq, dk, dv, db, w, gate, mask, dg};
    for (void *p : ps) MF_CHECK_CUDA(cudaFree(p));
    return;
  }
  auto time_it = [&](int which) {
    std::vector<float> ts;
    double spent = 0;
    for (int rep = 0; rep < 2; rep++) { /* warm-up */
      if (which != 1) fwd();
      if (which != 0) bwd();
    }
    for (int rep = 0; rep < 50 && (rep < 5 || spent < 1000.0); rep++) {
      if (which == 1) fwd(); /* bwd alone: a fresh forward first, outside the timing */
      MF_CHECK_CUDA(cudaEventRecord(e0));
      if (which != 1) fwd();
      if (which != 0) bwd();
      MF_CHECK_CUDA(cudaEventRecord(e1));
      MF_CHECK_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      MF_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      ts.push_back(ms);
      spent += ms;
    }
    return median(ts);
  };
  const double f1 = 4.0 * R * H * (double)N * N * D; /* QKᵀ and PV */
  const double tf = time_it(0), tb = time_it(1), tfb = time_it(2);
  json_row(shape, N, R, H, D, "fwd", tf, peak, extra, f1);
  json_row(shape, N, R, H, D, "bwd", tb, peak, extra, 2.5 * f1);
  json_row(shape, N, R, H, D, "fwdbwd", tfb, peak, extra, 3.5 * f1);
  MF_CHECK_CUDA(cudaEventDestroy(e0));
  MF_CHECK_CUDA(cudaEventDestroy(e1));
  void *ps[] = {q, k, v, bias, dout, out, lse, dq, dk, dv, db, w, gate, mask, dg};
  for (void *p : ps) MF_CHECK_CUDA(cudaFree(p));
}

static std::vector<int> parse_list(const char *s) {
  std::vector<int> v;
  while (s && *s) {
    v.push_back(atoi(s));
    s = strchr(s, ',');
    if (s) s++;
  }
  return v;
}

int main(int argc, char **argv) {
  std::vector<int> tri = parse_list("256,384,512,768,1024,1536,2048");
  std::vector<int> single = parse_list("256,512,1024,2048,4096");
  const char *json = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--tri")) tri = parse_list(argv[i + 1]);
    else if (!strcmp(argv[i], "--single")) single = parse_list(argv[i + 1]);
    else if (!strcmp(argv[i], "--json")) json = argv[i + 1];
    else if (!strcmp(argv[i], "--once")) g_once = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--mask")) g_mask = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--gate")) g_gate = atoi(argv[i + 1]);
  }
  /* MF_ATT_TMA=mask: the TMA kernels (mf_attention_cuda_set_tma), for A/B runs */
  if (getenv("MF_ATT_TMA")) mf_attention_cuda_set_tma(atoi(getenv("MF_ATT_TMA")));
  /* MF_ATT_FUSED_PER_SM=k: the TMA fused pass on at most k CTAs per SM (mf_attention_cuda_set_fused_grid) */
  if (getenv("MF_ATT_FUSED_PER_SM")) mf_attention_cuda_set_fused_grid(atoi(getenv("MF_ATT_FUSED_PER_SM")));
  cudaDeviceProp prop;
  MF_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  if (json) {
    g_json = fopen(json, "w");
    MF_CHECK_PTR(g_json);
    fprintf(g_json, "[\n");
  }
  { /* the exponential unit's rate */
    float *o;
    MF_CHECK_CUDA(cudaMalloc(&o, 4));
    const int blocks = prop.multiProcessorCount * 8, threads = 256, iters = 4096;
    ex2_rate<<<blocks, threads>>>(o, 64);
    MF_CHECK_LAUNCH();
    cudaEvent_t e0, e1;
    MF_CHECK_CUDA(cudaEventCreate(&e0));
    MF_CHECK_CUDA(cudaEventCreate(&e1));
    MF_CHECK_CUDA(cudaEventRecord(e0));
    ex2_rate<<<blocks, threads>>>(o, iters);
    MF_CHECK_LAUNCH();
    MF_CHECK_CUDA(cudaEventRecord(e1));
    MF_CHECK_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    MF_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    const double rate = (double)blocks * threads * iters * 8 / (ms * 1e-3);
    int khz = 0;
    MF_CHECK_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    printf("ex2 rate: %.3g /s (%.1f per SM per clock at %d MHz)\n", rate,
           rate / prop.multiProcessorCount / (khz * 1e3), khz / 1000);
    if (g_json)
      fprintf(g_json, "  {\"variant\": \"ex2_unit\", \"pass\": \"rate\", \"ex2_per_s\": %.4g}", rate);
    g_rows++;
    MF_CHECK_CUDA(cudaFree(o));
  }
  for (int N : tri) bench_shape("tri", N, N, 4, 32);
  for (int N : single) bench_shape("single", N, 1, 16, 24);
  if (g_json) {
    fprintf(g_json, "\n]\n");
    fclose(g_json);
  }
  return 0;
}
