/* pairformer.cu — benchmark of the Pairformer trunk on one GPU (model/cuda/pairformer_cuda.h):
 * one AF3 block and the 48-block stack, forward, backward and forward+backward, with time,
 * memory and model-FLOP utilisation, plus what the memory planner says is the largest crop
 * the 48-block stack can train on this GPU (and, optionally, one real run at that crop).
 * Not a correctness test (tests/gpu/test_pairformer_gpu.cu is); the PyTorch peers are
 * bench/pairformer_peers.py, merged by bench/pairformer_report.py.
 *
 *   pairformer [--block 256,384,...] [--stack 384,768] [--max-n] [--max-n-run] [--run-n N]
 *              [--run-blocks B]
 *              [--k 7] [--reps 5] [--stack-reps 2] [--margin-gib 2] [--json out.json]
 *              [--profile-pass] [--graph]
 *   pairformer --dry [--free-gib 139] [--block ...]   (no GPU: FLOPs and the planner only)
 *
 * What is measured (AF3 defaults c_s = 384, c_z = 128, dropout on, no mask, bf16 inputs
 * drawn on the device, weights = the AF3 initialisation of block 0 repeated in every block
 * plus N(0, 0.02²)-like noise so that no gate or projection is zero):
 *   --block   a 1-block stack (the backward reruns nothing): median of --reps repetitions
 *             after 2 warm-ups of (a) the forward, (b) the backward after an untimed
 *             forward, (c) forward+backward back to back. The output gradient (the backward
 *             works in place) is refilled and the parameter gradients zeroed, untimed,
 *             before every backward.
 *   --stack   48 blocks, policy recompute: 1 warm-up, then --stack-reps repetitions of the
 *             forward and of the backward timed separately; fwdbwd = their sum (median).
 *   peak_gib  every byte this process allocates on the GPU for that run, from cudaMemGetInfo
 *             before the setup and after setup and after the timed runs (the minimum free
 *             seen): the stack's arena (plan.total_bytes, also reported as arena_gib), the
 *             bf16 compute copy, the fp32 master weights and gradients, the block-gradient
 *             scratch, the cuBLAS handle and workspace, and the six I/O tensors s, z, s_out,
 *             z_out, ds, dz. No allocation happens inside forward or backward. (PyTorch's
 *             peak in the peers counts less: it excludes its inputs and bf16 weights.)
 *   FLOPs     the analytic forward count of ../shared/docs/flop_count.py
 *             pairformer_block(N) (matmul FLOPs only, 1 FMA = 2), recomputed here in C with
 *             the same formula (pf_block_fwd_flops, = 1536 N³ + 1,121,792 N² + 5,013,504 N):
 *             fwd F, bwd 2F, training 3F as the baseline's block_flops. Recomputation in
 *             the stack's backward is NOT counted (model FLOPs); "hfu" counts it.
 *   mfu       FLOPs of the pass / time / matmul peak, the peak measured in the same job:
 *             cuBLAS bf16 GEMM 8192×8192×8192 (cublasGemmEx, fp32 accumulate, bf16 out),
 *             best of 10.
 *   --max-n   the planner (model/stack.h with this GPU's sizer): the largest N whose
 *             48-block plan fits in the free memory at start minus everything that is not
 *             the arena (compute copy, master, gradients, scratch, a 64 MiB cuBLAS
 *             allowance), minus the three I/O pairs (in, out, grad) at that N, minus
 *             --margin-gib; for policy recompute, every-k (--k, default 7 ≈ √48), and the
 *             best k. AdamW moments (1.1 GiB at L = 48) are not counted; they fit in the
 *             margin. --max-n-run then allocates the whole 48-block stack (arena, weights,
 *             master, gradients, I/O) with every-k at that N (or --run-n) and really runs
 *             the forward+backward of its first --run-blocks blocks (default 2; 48 at this
 *             N would take many minutes of GPU time) inside it, reporting time and peak:
 *             the memory is the whole stack's (all of it is allocated up front), the time
 *             is that of the blocks run.
 *   --profile-pass  after each --block size's timing, one more forward + backward between
 *             cudaProfilerStart and cudaProfilerStop, for `ncu --profile-from-start off`
 *             (per-kernel times of exactly one training step of the block).
 *   MF_ATT_TMA=mask (environment): EvoFlash-3D's TMA kernels (mf_attention_cuda_set_tma),
 *             for A/B runs of the same binary.
 *   --graph   after each --block size's timing, one forward + backward captured as a CUDA
 *             graph and replayed (--reps + 2 times, the first 2 untimed): the block
 *             without launch gaps, for comparison with the stream timing.
 * Writes DESIGN.md's JSON (bench "pairformer", rows {"variant": "megafold", "scope": "block"
 * | "stack48", "N", "pass", "ms", "peak_gib", ...}, plus "matmul_peak_tflops" and a "max_n"
 * section) with --json, rewritten after every row so that a crash keeps what was measured. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_profiler_api.h>

#include "model/cuda/pairformer_cuda.h"
#include "model/params.h"
#include "model/stack.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/device.h"
#include "ops/cuda/gpu.h"

#define GIB 1073741824.0
#define L_STACK 48
#define BLAS_ALLOWANCE ((int64_t)64 << 20) /* cuBLAS handle + its 32 MiB workspace */

/* ---------------------------------------------------------------- FLOPs */
/* Forward FLOPs of one Pairformer block at crop N: ../shared/docs/flop_count.py
 * pairformer_block(N) with its defaults (c = ch = 128, H = 4, d = 32, transition n = 4;
 * single part c_s = 384, c_z = 128, 16 heads), term by term as there. */
static double pf_block_fwd_flops(double N) {
  const double c = 128, ch = 128, H = 4, d = 32, ntr = 4;
  const double cs = 384, cz = 128, Hs = 16, n = 4;
  const double N2 = N * N, N3 = N2 * N;
  double tm_cubic = 2 * ch * N3;                                  /* tri_mul */
  double tm_quad = (8 * c * ch + 2 * ch * c + 2 * c * c) * N2;
  double ta_cubic = 4 * H * d * N3;                               /* tri_att */
  double ta_quad = (2 * c * H + 8 * c * H * d + 2 * H * d * c) * N2;
  double trans = 6 * ntr * c * c * N2;                            /* transition_pair */
  double s_quad = (2 * cz * Hs + 4 * cs) * N2;                    /* single_part */
  double s_lin = 10 * cs * cs * N + 6 * n * cs * cs * N;
  return 2 * tm_cubic + 2 * ta_cubic + 2 * tm_quad + 2 * ta_quad + trans + s_quad + s_lin;
}

/* ---------------------------------------------------------------- JSON out */
static const char *g_json_path;
static char g_head[1024];     /* "gpu", "matmul_peak_tflops", ... (comma-terminated fields) */
static char **g_rows;
static int g_nrows;
static char g_maxn[4096];     /* the "max_n" object, "" until made */

static void json_write(void) {
  if (!g_json_path) return;
  FILE *f = fopen(g_json_path, "w");
  MF_CHECK_PTR(f);
  fprintf(f, "{\"bench\": \"pairformer\", %s\n \"rows\": [\n", g_head);
  for (int i = 0; i < g_nrows; i++) fprintf(f, "  %s%s\n", g_rows[i], i + 1 < g_nrows ? "," : "");
  fprintf(f, " ]%s%s\n}\n", g_maxn[0] ? ",\n \"max_n\": " : "", g_maxn);
  fclose(f);
}

static void json_row(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  g_rows = (char **)realloc(g_rows, (size_t)(g_nrows + 1) * sizeof(char *));
  MF_CHECK_PTR(g_rows);
  g_rows[g_nrows] = strdup(buf);
  MF_CHECK_PTR(g_rows[g_nrows]);
  g_nrows++;
  json_write();
}

/* ---------------------------------------------------------------- device helpers */
__device__ __forceinline__ float hash_uniform(uint64_t seed, uint64_t i) { /* [-1, 1) */
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return (float)(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* x (n) = uniform with standard deviation sd (bf16). */
__global__ void fill_bf16_kernel(mf_bf16_t *x, int64_t n, uint64_t seed, float sd) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] = mf_f32_to_bf16(1.7320508f * sd * hash_uniform(seed, (uint64_t)i));
}
/* x (n) += uniform with standard deviation sd. */
__global__ void add_noise_kernel(float *x, int64_t n, uint64_t seed, float sd) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] += 1.7320508f * sd * hash_uniform(seed, (uint64_t)i);
}

static void fill_bf16(mf_bf16_t *x, int64_t n, uint64_t seed, float sd) {
  fill_bf16_kernel<<<1024, 256>>>(x, n, seed, sd);
  MF_CHECK_LAUNCH();
}

static size_t mem_free(void) {
  size_t f = 0, t = 0;
  MF_CHECK_CUDA(cudaDeviceSynchronize());
  MF_CHECK_CUDA(cudaMemGetInfo(&f, &t));
  return f;
}

/* cudaMalloc that reports failure instead of aborting (the max-N run may not fit). */
static void *try_alloc(size_t bytes, int64_t *sum) {
  void *d = NULL;
  if (cudaMalloc(&d, bytes ? bytes : 16) != cudaSuccess) {
    cudaGetLastError();
    return NULL;
  }
  *sum += (int64_t)bytes;
  return d;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}
static float median(float *t, int n) {
  qsort(t, (size_t)n, sizeof(float), cmp_float);
  return n % 2 ? t[n / 2] : 0.5f * (t[n / 2 - 1] + t[n / 2]);
}

/* ---------------------------------------------------------------- the matmul peak */
static double matmul_peak_tflops(void) {
  const int n = 8192;
  const size_t bytes = (size_t)n * n * 2;
  mf_bf16_t *A, *B, *C;
  MF_CHECK_CUDA(cudaMalloc(&A, bytes));
  MF_CHECK_CUDA(cudaMalloc(&B, bytes));
  MF_CHECK_CUDA(cudaMalloc(&C, bytes));
  fill_bf16(A, (int64_t)n * n, 1, 1.0f);
  fill_bf16(B, (int64_t)n * n, 2, 1.0f);
  cublasHandle_t h;
  MF_CHECK_CUBLAS(cublasCreate(&h));
  const float one = 1.0f, zero = 0.0f;
  cudaEvent_t e0, e1;
  MF_CHECK_CUDA(cudaEventCreate(&e0));
  MF_CHECK_CUDA(cudaEventCreate(&e1));
  float best = 1e30f;
  for (int r = 0; r < 13; r++) { /* 3 warm-ups, best of 10 */
    MF_CHECK_CUDA(cudaEventRecord(e0, 0));
    MF_CHECK_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_16BF, n, B,
                                 CUDA_R_16BF, n, &zero, C, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
    MF_CHECK_CUDA(cudaEventRecord(e1, 0));
    MF_CHECK_CUDA(cudaEventSynchronize(e1));
    float ms;
    MF_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 3 && ms < best) best = ms;
  }
  MF_CHECK_CUDA(cudaEventDestroy(e0));
  MF_CHECK_CUDA(cudaEventDestroy(e1));
  MF_CHECK_CUBLAS(cublasDestroy(h));
  MF_CHECK_CUDA(cudaFree(A));
  MF_CHECK_CUDA(cudaFree(B));
  MF_CHECK_CUDA(cudaFree(C));
  return 2.0 * n * (double)n * n / (best * 1e-3) / 1e12;
}

/* ---------------------------------------------------------------- one set-up stack */
typedef struct {
  int L, N;
  mf_stack_policy pol;
  mf_params_table t;
  mf_pf_cuda_stack st;
  float *master, *grads;                           /* device fp32 (t.total), table layout */
  mf_bf16_t *s, *z, *so, *zo, *ds, *dz;            /* (N, Cs), (N, N, Cz) each pair */
  int64_t sn, zn;
  int64_t io_bytes, host_bytes;                    /* the run's own cudaMallocs */
  size_t free0, free_min;
} run;

/* Weights: the AF3 initialisation of block 0 (a one-block table) copied into every block of
 * t (the tables list the same tensors in the same order), plus small noise, on the device. */
static void upload_params(float *master, const mf_params_table *t, uint64_t seed) {
  mf_params_table t1;
  MF_ASSERT(mf_params_build_pairformer(&t1, &t->config, 1) == MF_OK, "%s", mf_error_message());
  MF_ASSERT(t1.n == t->n, "params tables of L = 1 and L = %d differ", t->L);
  mf_real *p1 = (mf_real *)malloc((size_t)t1.total * sizeof(mf_real));
  float *h = (float *)malloc((size_t)t->total * sizeof(float));
  MF_CHECK_PTR(p1);
  MF_CHECK_PTR(h);
  mf_params_init(&t1, p1, seed);
  for (int i = 0; i < t->n; i++) {
    const mf_param_entry *e = &t->entries[i], *e1 = &t1.entries[i];
    MF_ASSERT(!strcmp(e->name, e1->name) && e->block_numel == e1->block_numel,
              "params tables disagree at %s", e->name);
    int copies = e->stacked ? t->L : 1;
    for (int l = 0; l < copies; l++)
      for (int64_t j = 0; j < e->block_numel; j++)
        h[e->offset + (int64_t)l * e->block_numel + j] = (float)p1[e1->offset + j];
  }
  MF_CHECK_CUDA(cudaMemcpy(master, h, (size_t)t->total * sizeof(float), cudaMemcpyHostToDevice));
  add_noise_kernel<<<1024, 256>>>(master, t->total, seed + 1, 0.02f);
  MF_CHECK_LAUNCH();
  free(h);
  free(p1);
  mf_params_free(&t1);
}

static void run_free(run *r) {
  mf_pf_cuda_stack_free(&r->st);
  cudaFree(r->master);
  cudaFree(r->grads);
  cudaFree(r->s);
  cudaFree(r->z);
  cudaFree(r->so);
  cudaFree(r->zo);
  cudaFree(r->ds);
  cudaFree(r->dz);
  mf_params_free(&r->t);
  memset(r, 0, sizeof *r);
}

/* MF_OK, or MF_ERR_NOMEM / MF_ERR_CONFIG with a message (r is freed then). */
static mf_status run_setup(run *r, int L, int N, mf_stack_policy pol) {
  memset(r, 0, sizeof *r);
  r->L = L;
  r->N = N;
  r->pol = pol;
  mf_pairformer_config c = mf_pairformer_config_default();
  MF_ASSERT(mf_params_build_pairformer(&r->t, &c, L) == MF_OK, "%s", mf_error_message());
  r->sn = (int64_t)N * c.c_s;
  r->zn = (int64_t)N * N * c.c_z;
  r->free0 = mem_free();
  mf_status s = mf_pf_cuda_stack_init(&r->st, &r->t, pol, N, 0, 0);
  if (s != MF_OK) {
    run_free(r);
    return s;
  }
  int64_t *b = &r->io_bytes;
  r->master = (float *)try_alloc((size_t)r->t.total * 4, b);
  r->grads = (float *)try_alloc((size_t)r->t.total * 4, b);
  r->s = (mf_bf16_t *)try_alloc((size_t)r->sn * 2, b);
  r->z = (mf_bf16_t *)try_alloc((size_t)r->zn * 2, b);
  r->so = (mf_bf16_t *)try_alloc((size_t)r->sn * 2, b);
  r->zo = (mf_bf16_t *)try_alloc((size_t)r->zn * 2, b);
  r->ds = (mf_bf16_t *)try_alloc((size_t)r->sn * 2, b);
  r->dz = (mf_bf16_t *)try_alloc((size_t)r->zn * 2, b);
  if (!r->master || !r->grads || !r->s || !r->z || !r->so || !r->zo || !r->ds || !r->dz) {
    run_free(r);
    return mf_error_set(MF_ERR_NOMEM, "cannot allocate the weights and I/O tensors at N = %d", N);
  }
  upload_params(r->master, &r->t, 2024);
  mf_pf_cuda_stack_set_params(&r->st, r->master);
  MF_CHECK_CUDA(cudaMemset(r->grads, 0, (size_t)r->t.total * 4));
  fill_bf16(r->s, r->sn, 11, 1.0f);
  fill_bf16(r->z, r->zn, 12, 1.0f);
  r->free_min = mem_free();
  return MF_OK;
}

static void note_mem(run *r) {
  size_t f = mem_free();
  if (f < r->free_min) r->free_min = f;
}
static double run_peak_gib(const run *r) { return (double)(r->free0 - r->free_min) / GIB; }
static double run_arena_gib(const run *r) { return (double)r->st.plan.total_bytes / GIB; }

static const mf_stack_rng k_rng = {7, 1, 1}; /* training: dropout on */

static void fwd(run *r) {
  mf_pf_cuda_stack_forward(&r->st, (__nv_bfloat16 *)r->so, (__nv_bfloat16 *)r->zo,
                           (const __nv_bfloat16 *)r->s, (const __nv_bfloat16 *)r->z, NULL, r->N,
                           k_rng);
}
/* The output gradient and zeroed parameter gradients (untimed, before each backward). */
static void prep_bwd(run *r) {
  fill_bf16(r->ds, r->sn, 21, 1.0f);
  fill_bf16(r->dz, r->zn, 22, 1.0f);
  MF_CHECK_CUDA(cudaMemsetAsync(r->grads, 0, (size_t)r->t.total * 4, 0));
}
static void bwd(run *r) {
  mf_pf_cuda_stack_backward(&r->st, (__nv_bfloat16 *)r->ds, (__nv_bfloat16 *)r->dz, r->grads,
                            (const __nv_bfloat16 *)r->s, (const __nv_bfloat16 *)r->z, NULL, r->N,
                            k_rng);
}

static cudaEvent_t g_e[4];
static float elapsed(int a, int b) {
  float ms;
  MF_CHECK_CUDA(cudaEventSynchronize(g_e[b]));
  MF_CHECK_CUDA(cudaEventElapsedTime(&ms, g_e[a], g_e[b]));
  return ms;
}

static double g_peak_tflops; /* the matmul peak of this job */

static void emit(const char *scope, const run *r, const char *pass, double ms, double flops,
                 double hflops, int reps) {
  double tf = flops / (ms * 1e-3) / 1e12;
  double mfu = g_peak_tflops > 0 ? tf / g_peak_tflops : 0;
  double hfu = g_peak_tflops > 0 ? hflops / (ms * 1e-3) / 1e12 / g_peak_tflops : 0;
  const char *pol = r->pol.kind == MF_STACK_EVERY_K ? "every-k" : mf_stack_policy_name(r->pol.kind);
  printf("  %-7s L=%-2d N=%-5d %-6s %10.2f ms  %7.2f GiB (arena %6.2f)  %6.1f TFLOP/s  MFU %5.1f%%  "
         "keep %d\n",
         scope, r->L, r->N, pass, ms, run_peak_gib(r), run_arena_gib(r), tf, 100 * mfu, r->st.keep);
  fflush(stdout);
  json_row("{\"variant\": \"megafold\", \"scope\": \"%s\", \"L\": %d, \"N\": %d, \"pass\": \"%s\", "
           "\"ms\": %.4f, \"peak_gib\": %.4f, \"arena_gib\": %.4f, \"flops\": %.6g, "
           "\"tflops\": %.2f, \"mfu\": %.4f, \"hfu\": %.4f, \"policy\": \"%s\", \"k\": %d, "
           "\"recomputed\": %d, \"keep_proj\": %d, \"reps\": %d}",
           scope, r->L, r->N, pass, ms, run_peak_gib(r), run_arena_gib(r), flops, tf, mfu, hfu,
           pol, r->pol.kind == MF_STACK_EVERY_K ? r->pol.k : 0, r->st.recomputed, r->st.keep, reps);
}

/* ---------------------------------------------------------------- --block */
static int g_profile_pass; /* --profile-pass */
static int g_graph;        /* --graph */

/* --graph: one forward + backward captured into a CUDA graph on a stream of its own and
 * replayed (the same dropout seeds every replay, as in the stream timing): how much of the
 * block's time is launch overhead and gaps between its ~360 kernels. */
static double block_graph_ms(run *r, int n) {
  cudaStream_t gs, old = r->st.stream;
  MF_CHECK_CUDA(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking));
  MF_CHECK_CUDA(cudaDeviceSynchronize());
  r->st.stream = gs;
  cudaGraph_t g;
  cudaGraphExec_t ge;
  MF_CHECK_CUDA(cudaStreamBeginCapture(gs, cudaStreamCaptureModeThreadLocal));
  fwd(r);
  bwd(r);
  MF_CHECK_CUDA(cudaStreamEndCapture(gs, &g));
  MF_CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
  size_t nodes = 0;
  MF_CHECK_CUDA(cudaGraphGetNodes(g, NULL, &nodes));
  float *t = (float *)malloc((size_t)n * sizeof(float));
  MF_CHECK_PTR(t);
  for (int i = 0; i < n; i++) {
    MF_CHECK_CUDA(cudaEventRecord(g_e[2], gs));
    MF_CHECK_CUDA(cudaGraphLaunch(ge, gs));
    MF_CHECK_CUDA(cudaEventRecord(g_e[3], gs));
    t[i] = elapsed(2, 3);
  }
  const double ms = median(t + 2, n - 2);
  printf("  block N=%d fwdbwd as one CUDA graph (%zu nodes): %.3f ms (median of %d)\n", r->N,
         nodes, ms, n - 2);
  free(t);
  MF_CHECK_CUDA(cudaGraphExecDestroy(ge));
  MF_CHECK_CUDA(cudaGraphDestroy(g));
  MF_CHECK_CUDA(cudaStreamSynchronize(gs));
  MF_CHECK_CUDA(cudaStreamDestroy(gs));
  r->st.stream = old;
  return ms;
}

static void bench_block(int N, int reps) {
  run r;
  mf_stack_policy pol = {MF_STACK_RECOMPUTE, 0};
  if (run_setup(&r, 1, N, pol) != MF_OK) {
    printf("  block N=%d: does not fit: %s\n", N, mf_error_message());
    json_row("{\"variant\": \"megafold\", \"scope\": \"block\", \"L\": 1, \"N\": %d, "
             "\"pass\": \"fwdbwd\", \"oom\": true}", N);
    return;
  }
  const int warm = 2, n = warm + reps;
  float *tf = (float *)malloc((size_t)n * 3 * sizeof(float)), *tb = tf + n, *tfb = tb + n;
  MF_CHECK_PTR(tf);
  for (int i = 0; i < n; i++) {
    MF_CHECK_CUDA(cudaEventRecord(g_e[0], 0));
    fwd(&r);
    MF_CHECK_CUDA(cudaEventRecord(g_e[1], 0));
    tf[i] = elapsed(0, 1);
    if (i == 0) note_mem(&r);
    prep_bwd(&r);
    MF_CHECK_CUDA(cudaEventRecord(g_e[0], 0));
    bwd(&r);
    MF_CHECK_CUDA(cudaEventRecord(g_e[1], 0));
    tb[i] = elapsed(0, 1);
    prep_bwd(&r);
    MF_CHECK_CUDA(cudaEventRecord(g_e[0], 0));
    fwd(&r);
    bwd(&r);
    MF_CHECK_CUDA(cudaEventRecord(g_e[1], 0));
    tfb[i] = elapsed(0, 1);
  }
  note_mem(&r);
  if (g_profile_pass) { /* one step for an external profiler (ncu --profile-from-start off) */
    prep_bwd(&r);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    MF_CHECK_CUDA(cudaProfilerStart());
    fwd(&r);
    bwd(&r);
    MF_CHECK_CUDA(cudaDeviceSynchronize());
    MF_CHECK_CUDA(cudaProfilerStop());
  }
  double F = pf_block_fwd_flops(N);
  if (g_graph) {
    const double gms = block_graph_ms(&r, reps + 2);
    json_row("{\"variant\": \"megafold\", \"scope\": \"block-graph\", \"L\": 1, \"N\": %d, "
             "\"pass\": \"fwdbwd\", \"ms\": %.4f}", N, gms);
  }
  emit("block", &r, "fwd", median(tf + warm, reps), F, F, reps);
  emit("block", &r, "bwd", median(tb + warm, reps), 2 * F, 2 * F, reps);
  emit("block", &r, "fwdbwd", median(tfb + warm, reps), 3 * F, 3 * F, reps);
  /* where the time goes: per sub-layer, averaged over 3 profiled forward/backward pairs
   * (the profile synchronises after each call, so these add up to slightly more) */
  mf_pf_cuda_profile prof;
  memset(&prof, 0, sizeof prof);
  mf_pf_cuda_profile_enable(&prof);
  for (int i = 0; i < 3; i++) {
    fwd(&r);
    prep_bwd(&r);
    bwd(&r);
  }
  mf_pf_cuda_profile_enable(NULL);
  printf("  block N=%d per sub-layer (ms, fwd / bwd):", N);
  for (int k = 0; k < MF_PF_SUBLAYERS; k++) {
    double f = prof.fwd_ms[k] / prof.fwd_calls, b = prof.bwd_ms[k] / prof.bwd_calls;
    printf(" %s %.2f / %.2f%s", mf_pf_cuda_sublayer_name(k), f, b,
           k + 1 < MF_PF_SUBLAYERS ? ";" : "\n");
    json_row("{\"variant\": \"megafold\", \"scope\": \"sublayer\", \"sublayer\": \"%s\", "
             "\"N\": %d, \"pass\": \"fwd\", \"ms\": %.4f}", mf_pf_cuda_sublayer_name(k), N, f);
    json_row("{\"variant\": \"megafold\", \"scope\": \"sublayer\", \"sublayer\": \"%s\", "
             "\"N\": %d, \"pass\": \"bwd\", \"ms\": %.4f}", mf_pf_cuda_sublayer_name(k), N, b);
  }
  free(tf);
  run_free(&r);
}

/* ---------------------------------------------------------------- --stack */
/* One forward and one backward of the 48-block stack, timed separately (ms into tf, tb). */
static void stack_once(run *r, float *tf, float *tb) {
  MF_CHECK_CUDA(cudaEventRecord(g_e[0], 0));
  fwd(r);
  MF_CHECK_CUDA(cudaEventRecord(g_e[1], 0));
  *tf = elapsed(0, 1);
  note_mem(r);
  prep_bwd(r);
  MF_CHECK_CUDA(cudaEventRecord(g_e[2], 0));
  bwd(r);
  MF_CHECK_CUDA(cudaEventRecord(g_e[3], 0));
  *tb = elapsed(2, 3);
  note_mem(r);
  MF_CHECK_CUDA(cudaGetLastError());
}

/* The three stack rows; fwdbwd: the time of one forward plus one backward. Model FLOPs
 * (3F for 48 blocks); "hfu" also counts the backward's recomputed block forwards. */
static void emit_stack(const run *r, float f, float b, float fb, int reps) {
  double F = pf_block_fwd_flops(r->N) * r->L, R = pf_block_fwd_flops(r->N) * r->st.recomputed;
  emit("stack48", r, "fwd", f, F, F, reps);
  emit("stack48", r, "bwd", b, 2 * F, 2 * F + R, reps);
  emit("stack48", r, "fwdbwd", fb, 3 * F, 3 * F + R, reps);
}

static void bench_stack(int N, int reps) {
  run r;
  mf_stack_policy pol = {MF_STACK_RECOMPUTE, 0};
  if (run_setup(&r, L_STACK, N, pol) != MF_OK) {
    printf("  stack N=%d: does not fit: %s\n", N, mf_error_message());
    json_row("{\"variant\": \"megafold\", \"scope\": \"stack48\", \"L\": %d, \"N\": %d, "
             "\"pass\": \"fwdbwd\", \"oom\": true}", L_STACK, N);
    return;
  }
  float *tf = (float *)malloc((size_t)(reps + 1) * 2 * sizeof(float)), *tb = tf + reps + 1;
  MF_CHECK_PTR(tf);
  for (int i = 0; i <= reps; i++) stack_once(&r, &tf[i], &tb[i]); /* i = 0: warm-up */
  /* fwdbwd: the median of the per-repetition sums */
  float *sum = (float *)malloc((size_t)reps * sizeof(float));
  MF_CHECK_PTR(sum);
  for (int i = 0; i < reps; i++) sum[i] = tf[i + 1] + tb[i + 1];
  emit_stack(&r, median(tf + 1, reps), median(tb + 1, reps), median(sum, reps), reps);
  free(sum);
  free(tf);
  run_free(&r);
}

/* ---------------------------------------------------------------- --max-n */
/* The planner's sizer plus the three I/O pairs the caller holds at crop N (s, z in; outputs;
 * the in-place gradient), so that one budget covers everything that grows with N. */
static mf_stack_sizes sizes_with_io(const mf_pairformer_config *c, int N, void *ctx) {
  (void)ctx;
  mf_stack_sizes z = mf_pf_cuda_sizes(c, N, NULL);
  z.fixed_bytes += 3 * (int64_t)(mf_cuda_align((size_t)N * c->c_s * 2) +
                                 mf_cuda_align((size_t)N * N * c->c_z * 2));
  return z;
}

/* Bytes that do not depend on N: compute copy, block-gradient scratch, the map, master
 * weights and gradients (fp32), the cuBLAS allowance. */
static int64_t fixed_bytes(const mf_params_table *t) {
  mf_pf_cuda_layout lay;
  mf_pf_cuda_layout_make(&lay, t);
  return (int64_t)t->L * lay.block_numel * 2 + lay.block_numel * 4 + (int64_t)t->n * 24 +
         8 * t->total + BLAS_ALLOWANCE;
}

static void max_n(double free_gib, double margin_gib, int k, int do_run, int run_n,
                  int run_blocks) {
  mf_pairformer_config c = mf_pairformer_config_default();
  mf_params_table t;
  MF_ASSERT(mf_params_build_pairformer(&t, &c, L_STACK) == MF_OK, "%s", mf_error_message());
  int64_t fixed = fixed_bytes(&t);
  int64_t budget = (int64_t)(free_gib * GIB) - fixed - (int64_t)(margin_gib * GIB);
  mf_stack_policy rec = {MF_STACK_RECOMPUTE, 0}, evk = {MF_STACK_EVERY_K, k};
  int n_rec = mf_stack_max_n_sized(&c, L_STACK, rec, sizes_with_io, NULL, budget);
  int n_k = mf_stack_max_n_sized(&c, L_STACK, evk, sizes_with_io, NULL, budget);
  int best_k = k, n_best = n_k; /* another k only when it allows a strictly larger N */
  for (int kk = 1; kk <= L_STACK; kk++) {
    mf_stack_policy p = {MF_STACK_EVERY_K, kk};
    int n = mf_stack_max_n_sized(&c, L_STACK, p, sizes_with_io, NULL, budget);
    if (n > n_best) n_best = n, best_k = kk;
  }
  mf_stack_plan prec, pk;
  memset(&prec, 0, sizeof prec);
  memset(&pk, 0, sizeof pk);
  if (n_rec > 0) mf_stack_plan_sized(&prec, &c, L_STACK, n_rec, rec, sizes_with_io, NULL);
  if (n_k > 0) mf_stack_plan_sized(&pk, &c, L_STACK, n_k, evk, sizes_with_io, NULL);
  printf("== largest N, 48 blocks (planner): free %.2f GiB − fixed %.2f GiB − margin %.1f GiB "
         "= budget %.2f GiB for arena + I/O\n", free_gib, fixed / GIB, margin_gib, budget / GIB);
  printf("  recompute: N <= %d (arena + I/O %.2f GiB)\n", n_rec, prec.total_bytes / GIB);
  printf("  every-%d:  N <= %d (arena + I/O %.2f GiB); best k = %d: N <= %d\n", k, n_k,
         pk.total_bytes / GIB, best_k, n_best);
  int off = snprintf(g_maxn, sizeof g_maxn,
                     "{\"L\": %d, \"free_gib\": %.3f, \"fixed_gib\": %.3f, \"margin_gib\": %.2f, "
                     "\"budget_gib\": %.3f, \"model\": \"planner: arena (mf_pf_cuda_sizes) + 3 I/O "
                     "pairs (in, out, grad) <= free - compute copy - fp32 master - fp32 grads - "
                     "scratch - 64 MiB cuBLAS - margin\", "
                     "\"recompute\": {\"N\": %d, \"need_gib\": %.3f}, "
                     "\"every_k\": {\"k\": %d, \"N\": %d, \"need_gib\": %.3f}, "
                     "\"best_k\": {\"k\": %d, \"N\": %d}",
                     L_STACK, free_gib, fixed / GIB, margin_gib, budget / GIB, n_rec,
                     prec.total_bytes / GIB, k, n_k, pk.total_bytes / GIB, best_k, n_best);
  snprintf(g_maxn + off, sizeof g_maxn - (size_t)off, "}");
  json_write();
  mf_params_free(&t);
  if (!do_run) return;

  int N = run_n > 0 ? run_n : n_k;
  printf("== the 48-block stack allocated at N = %d, every-%d; forward+backward of its first "
         "%d blocks\n", N, k, run_blocks);
  fflush(stdout);
  run r;
  char runobj[1024];
  struct timespec w0, w1;
  clock_gettime(CLOCK_MONOTONIC, &w0);
  if (run_setup(&r, L_STACK, N, evk) != MF_OK) {
    printf("  did not fit: %s\n", mf_error_message());
    snprintf(runobj, sizeof runobj, ", \"run\": {\"N\": %d, \"policy\": \"every-k\", \"k\": %d, "
             "\"fit\": false}}", N, k);
  } else {
    float tf, tb;
    mf_pf_cuda_stack_set_run_blocks(&r.st, run_blocks);
    stack_once(&r, &tf, &tb);
    clock_gettime(CLOCK_MONOTONIC, &w1);
    double wall = (double)(w1.tv_sec - w0.tv_sec) + 1e-9 * (double)(w1.tv_nsec - w0.tv_nsec);
    size_t ft = 0, tt = 0;
    MF_CHECK_CUDA(cudaMemGetInfo(&ft, &tt));
    printf("  fit: fwd %.0f ms, bwd %.0f ms, peak %.2f GiB of %.2f GiB (arena %.2f GiB), "
           "%.0f s wall with set-up\n", tf, tb, run_peak_gib(&r), tt / GIB, run_arena_gib(&r), wall);
    snprintf(runobj, sizeof runobj,
             ", \"run\": {\"N\": %d, \"policy\": \"every-k\", \"k\": %d, \"fit\": true, "
             "\"blocks_run\": %d, \"blocks_allocated\": 48, "
             "\"fwd_ms\": %.1f, \"bwd_ms\": %.1f, \"ms\": %.1f, \"peak_gib\": %.3f, "
             "\"arena_gib\": %.3f, \"gpu_total_gib\": %.3f, \"recomputed\": %d}}",
             N, k, run_blocks, tf, tb, tf + tb, run_peak_gib(&r), run_arena_gib(&r), tt / GIB,
             r.st.recomputed);
    if (run_blocks == 0 || run_blocks == L_STACK) emit_stack(&r, tf, tb, tf + tb, 1);
    run_free(&r);
  }
  /* replace the closing brace of the section by the run object */
  size_t len = strlen(g_maxn);
  snprintf(g_maxn + len - 1, sizeof g_maxn - (len - 1), "%s", runobj);
  json_write();
}

/* ---------------------------------------------------------------- main */
static int parse_list(const char *s, int *out, int cap) {
  int n = 0;
  while (s && *s && n < cap) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s) break;
    if (v > 0) out[n++] = (int)v;
    s = *end == ',' ? end + 1 : end;
  }
  return n;
}

int main(int argc, char **argv) {
  int blocks[32], stacks[32], nb = 0, ns = 0, do_max = 0, do_run = 0, run_n = 0, k = 7,
      run_blocks = 2;
  int reps = 5, stack_reps = 2, dry = 0;
  double margin = 2.0, dry_free = 139.0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--block") && v) nb = parse_list(v, blocks, 32), i++;
    else if (!strcmp(a, "--stack") && v) ns = parse_list(v, stacks, 32), i++;
    else if (!strcmp(a, "--max-n")) do_max = 1;
    else if (!strcmp(a, "--max-n-run")) do_max = do_run = 1;
    else if (!strcmp(a, "--run-n") && v) run_n = atoi(v), i++;
    else if (!strcmp(a, "--run-blocks") && v) run_blocks = atoi(v), i++;
    else if (!strcmp(a, "--k") && v) k = atoi(v), i++;
    else if (!strcmp(a, "--reps") && v) reps = atoi(v), i++;
    else if (!strcmp(a, "--stack-reps") && v) stack_reps = atoi(v), i++;
    else if (!strcmp(a, "--margin-gib") && v) margin = atof(v), i++;
    else if (!strcmp(a, "--json") && v) g_json_path = v, i++;
    else if (!strcmp(a, "--dry")) dry = 1;
    else if (!strcmp(a, "--profile-pass")) g_profile_pass = 1;
    else if (!strcmp(a, "--graph")) g_graph = 1;
    else if (!strcmp(a, "--free-gib") && v) dry_free = atof(v), i++;
    else {
      fprintf(stderr, "usage: %s [--block Ns] [--stack Ns] [--max-n] [--max-n-run] [--run-n N] [--run-blocks B] "
              "[--k K] [--reps R] [--stack-reps R] [--margin-gib G] [--json F] "
              "[--dry [--free-gib G]] [--profile-pass] [--graph]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  if (stack_reps < 1) stack_reps = 1;
  if (k < 1) k = 1;

  if (dry) { /* no GPU: the FLOP model and the planner for an assumed free memory */
    snprintf(g_head, sizeof g_head, "\"gpu\": \"none (dry)\", \"free_gib\": %.3f,", dry_free);
    printf("forward FLOPs of one block (flop_count.py pairformer_block):\n");
    for (int i = 0; i < nb; i++)
      printf("  N=%-5d %.6g GFLOP\n", blocks[i], pf_block_fwd_flops(blocks[i]) / 1e9);
    if (do_max) max_n(dry_free, margin, k, 0, 0, run_blocks);
    return 0;
  }

  MF_ASSERT(mf_cuda_init(0) == MF_OK, "%s", mf_error_message());
  if (getenv("MF_ATT_TMA")) mf_attention_cuda_set_tma(atoi(getenv("MF_ATT_TMA")));
  char gpu[256];
  mf_cuda_describe(gpu, sizeof gpu);
  for (int i = 0; i < 4; i++) MF_CHECK_CUDA(cudaEventCreate(&g_e[i]));
  g_peak_tflops = matmul_peak_tflops();
  size_t free_start = mem_free();
  printf("%s; bf16 matmul peak (cuBLAS 8192³, best of 10) %.1f TFLOP/s; free %.2f GiB\n", gpu,
         g_peak_tflops, free_start / GIB);
  snprintf(g_head, sizeof g_head,
           "\"gpu\": \"%s\", \"matmul_peak_tflops\": %.2f, \"matmul_peak_how\": \"cublasGemmEx "
           "bf16 8192x8192x8192, fp32 accumulate, best of 10\", \"free_gib\": %.3f,",
           gpu, g_peak_tflops, free_start / GIB);
  json_write();

  if (nb) printf("== one block (median of %d after 2 warm-ups)\n", reps);
  for (int i = 0; i < nb; i++) bench_block(blocks[i], reps);
  if (ns) printf("== 48-block stack, recompute (1 warm-up, median of %d)\n", stack_reps);
  for (int i = 0; i < ns; i++) bench_stack(stacks[i], stack_reps);
  if (do_max) max_n(mem_free() / GIB, margin, k, do_run, run_n, run_blocks);
  for (int i = 0; i < 4; i++) cudaEventDestroy(g_e[i]);
  return 0;
}
