/* evopipe.cu — the GPU part of the EvoPipe benchmark (issue 6): a training-shaped loop in
 * which the loader's workers (data/loader.h, slots in pinned memory) and the staging
 * (ops/cuda/staging.h: async H2D copy on its own stream, the training stream waiting on the
 * copy's event) feed a synthetic GPU step, and the fraction of step time spent waiting for
 * data is measured.
 *
 * The synthetic step: one kernel on the training stream that first reads the whole staged
 * example (every 16-byte word, folded into a per-thread value: the step really consumes
 * the copied bytes) and then runs a calibrated chain of FP32 FMAs on every SM, so that the
 * kernel alone takes the chosen duration (--step-ms, default 20 and 100 ms).
 *
 * Per step t (as the staging.h flow):
 *   host:   mf_loader_next (timed: host wait)  → mf_staging_copy → event A on train →
 *           mf_staging_wait → event B → kernel → event C → mf_staging_done →
 *           mf_staging_host_sync → mf_loader_release
 * Reported per run (steps after a warm-up of 5):
 *   host wait   Σ time blocked in mf_loader_next
 *   event wait  Σ elapsed(A, B): the time the training stream stalled on the copy event
 *   data wait   host wait + event wait (the brief's measure; host wait counted in full,
 *               though the GPU may still be busy with queued work meanwhile)
 *   gpu idle    wall − Σ elapsed(B, C): everything that is not the step's kernel
 * all as fractions of the wall time of the steps (first enqueue to the final sync).
 *
 * The cache is built here with `megafold prep`'s driver (all cores) unless --cache is given.
 * Sources: the cache (megafold) and, for contrast, the files (--no-cache, mf_source_files).
 *   evopipe_gpu [--data DIR] [--cache DIR] [--steps 100] [--step-ms 20,100] [--workers 4]
 *               [--nocache-workers 8] [--nocache-step-ms 20] [--crop 384] [--msa 1024]
 *               [--json FILE]
 */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "data/cache.h"
#include "data/crop.h"
#include "data/loader.h"
#include "data/prep.h"
#include "data/source_files.h"
#include "ops/cuda/device.h"
#include "ops/cuda/staging.h"

#define CK(x)                                                                                \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "evopipe_gpu: %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

static void die(const char *what) {
  fprintf(stderr, "evopipe_gpu: %s: %s\n", what, mf_error_message());
  exit(1);
}

/* ------------------------------------------------------------------ the synthetic step */

static __global__ void step_kernel(const uint4 *in, size_t n16, float *out, int iters) {
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t nth = (size_t)gridDim.x * blockDim.x;
  uint32_t acc = 0;
  for (size_t i = tid; i < n16; i += nth) {
    uint4 v = in[i];
    acc ^= v.x + 3u * v.y + 5u * v.z + 7u * v.w;
  }
  float a = 1.0f + 1e-7f * (float)(acc & 1023u), b = 0.5f, c = 0.25f, d = 0.125f;
  const float m = 0.999999f, k = 1e-6f;
#pragma unroll 1
  for (int i = 0; i < iters; i++) {
    a = fmaf(a, m, k);
    b = fmaf(b, m, k);
    c = fmaf(c, m, k);
    d = fmaf(d, m, k);
  }
  if (a + b + c + d == -1.0f) out[tid] = a; /* never true: keeps the work, writes nothing */
  if (tid == 0) out[0] = a + b + c + d;
}

typedef struct {
  int blocks, threads;
  float *out;
} step_cfg;

static float time_kernel(const step_cfg *k, const void *dev, size_t bytes, int iters,
                         cudaStream_t s) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a, s));
  step_kernel<<<k->blocks, k->threads, 0, s>>>((const uint4 *)dev, bytes / 16, k->out, iters);
  CK(cudaGetLastError());
  CK(cudaEventRecord(b, s));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return ms;
}

/* iters so that the kernel takes target_ms (reading `bytes` of input first). */
static int calibrate(const step_cfg *k, const void *dev, size_t bytes, double target_ms,
                     cudaStream_t s, float *got_ms) {
  int iters = 1 << 14;
  time_kernel(k, dev, bytes, iters, s); /* warm-up */
  for (int r = 0; r < 4; r++) {
    float ms = time_kernel(k, dev, bytes, iters, s);
    double scale = target_ms / (ms > 1e-3 ? ms : 1e-3);
    double next = (double)iters * scale;
    if (next > 2e9) next = 2e9;
    if (next < 1) next = 1;
    iters = (int)next;
  }
  float best = 1e30f;
  for (int r = 0; r < 3; r++) {
    float ms = time_kernel(k, dev, bytes, iters, s);
    best = ms < best ? ms : best;
  }
  *got_ms = best;
  return iters;
}

/* ------------------------------------------------------------------ the training loop */

typedef struct {
  const char *variant, *source;
  int workers;
  double step_target_ms, kernel_ms;
  int steps;
  double wall_s, host_wait_s, event_wait_s, busy_s;
  double staging_host_s; /* Σ mf_staging_host_sync + release (host blocked on the GPU) */
} loop_result;

static void train_loop(const mf_loader_source *src, const mf_crop_config *cc, int W, int steps,
                       const step_cfg *k, int iters, cudaStream_t train, loop_result *r) {
  mf_loader_config cfg;
  mf_loader_config_default(&cfg);
  cfg.workers = W, cfg.slots = W + 2, cfg.seed = 7, cfg.crop = *cc;
  cfg.host.alloc = mf_staging_host_alloc, cfg.host.free = mf_staging_host_free;
  mf_loader *L;
  if (mf_loader_create(&cfg, src, &L) != MF_OK) die("loader");
  const size_t bytes = mf_loader_layout(L)->total;
  mf_staging *stg;
  if (mf_staging_create(bytes, 2, &stg) != MF_OK) die("staging");
  const int warm = 5, total = warm + steps;
  cudaEvent_t *ev = (cudaEvent_t *)calloc((size_t)total * 3, sizeof *ev);
  for (int i = 0; i < total * 3; i++) CK(cudaEventCreate(&ev[i]));
  double t_start = 0, host_wait = 0, host_stage = 0;
  for (int t = 0; t < total; t++) {
    if (t == warm) {
      CK(cudaStreamSynchronize(train));
      t_start = mf_time_now();
    }
    mf_loader_example ex;
    double h0 = mf_time_now();
    if (mf_loader_next(L, &ex) != MF_OK) die("loader step");
    double h1 = mf_time_now();
    if (t >= warm) host_wait += h1 - h0;
    mf_staging_buffer buf;
    if (mf_staging_copy(stg, ex.data, bytes, &buf) != MF_OK) die("staging copy");
    CK(cudaEventRecord(ev[3 * t], train));
    if (mf_staging_wait(stg, &buf, train) != MF_OK) die("staging wait");
    CK(cudaEventRecord(ev[3 * t + 1], train));
    step_kernel<<<k->blocks, k->threads, 0, train>>>((const uint4 *)buf.dev, bytes / 16, k->out,
                                                     iters);
    CK(cudaGetLastError());
    CK(cudaEventRecord(ev[3 * t + 2], train));
    if (mf_staging_done(stg, &buf, train) != MF_OK) die("staging done");
    double h2 = mf_time_now();
    if (mf_staging_host_sync(stg, &buf) != MF_OK) die("staging host sync");
    mf_loader_release(L, &ex);
    if (t >= warm) host_stage += mf_time_now() - h2;
  }
  CK(cudaStreamSynchronize(train));
  double wall = mf_time_now() - t_start;
  double ew = 0, busy = 0;
  for (int t = warm; t < total; t++) {
    float a = 0, b = 0;
    CK(cudaEventElapsedTime(&a, ev[3 * t], ev[3 * t + 1]));
    CK(cudaEventElapsedTime(&b, ev[3 * t + 1], ev[3 * t + 2]));
    ew += a * 1e-3, busy += b * 1e-3;
  }
  for (int i = 0; i < total * 3; i++) CK(cudaEventDestroy(ev[i]));
  free(ev);
  mf_staging_destroy(stg);
  mf_loader_destroy(L);
  r->workers = W, r->steps = steps, r->wall_s = wall, r->host_wait_s = host_wait;
  r->event_wait_s = ew, r->busy_s = busy, r->staging_host_s = host_stage;
}

/* ------------------------------------------------------------------ main */

static int parse_dlist(const char *s, double *out, int cap) {
  int n = 0;
  while (*s && n < cap) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v <= 0) return -1;
    out[n++] = v;
    if (*end && *end != ',') return -1;
    s = *end == ',' ? end + 1 : end;
  }
  return n;
}

int main(int argc, char **argv) {
  const char *data = "../shared/data", *cache_arg = NULL, *json = NULL;
  int steps = 100, W = 4, Wf = 8;
  double step_ms[8] = {20, 100}, nc_ms[8] = {20};
  int n_ms = 2, n_nc = 1;
  long long crop = 384, msa = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--data")) data = v;
    else if (!strcmp(k, "--cache")) cache_arg = v;
    else if (!strcmp(k, "--json")) json = v;
    else if (!strcmp(k, "--steps")) steps = atoi(v);
    else if (!strcmp(k, "--workers")) W = atoi(v);
    else if (!strcmp(k, "--nocache-workers")) Wf = atoi(v);
    else if (!strcmp(k, "--step-ms")) n_ms = parse_dlist(v, step_ms, 8);
    else if (!strcmp(k, "--nocache-step-ms")) n_nc = parse_dlist(v, nc_ms, 8);
    else if (!strcmp(k, "--crop")) crop = atoll(v);
    else if (!strcmp(k, "--msa")) msa = atoll(v);
    else {
      fprintf(stderr, "evopipe_gpu: unknown option %s\n", k);
      return 2;
    }
  }
  if (steps < 1 || W < 1 || Wf < 1 || n_ms < 1 || n_nc < 0) {
    fprintf(stderr, "evopipe_gpu: bad option values\n");
    return 2;
  }
  mf_log_set_level(MF_LOG_ERROR);
  if (mf_cuda_init(0) != MF_OK) die("cuda init");
  char gpu[256];
  mf_cuda_describe(gpu, sizeof gpu);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  printf("evopipe_gpu: %s; %ld CPU cores; data %s\n", gpu, ncpu, data);

  char mmcif[512], ccd[512], msadir[512], cache_dir[512], tmpdir[64] = "";
  snprintf(mmcif, sizeof mmcif, "%s/mmcif", data);
  snprintf(ccd, sizeof ccd, "%s/ccd/components_subset.cif.gz", data);
  snprintf(msadir, sizeof msadir, "%s/msa", data);
  double prep_s = 0;
  long long prep_done = 0, prep_n = 1;
  if (cache_arg) {
    snprintf(cache_dir, sizeof cache_dir, "%s", cache_arg);
  } else {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/evopipe_gpu_XXXXXX");
    if (!mkdtemp(tmpdir)) die("mkdtemp");
    snprintf(cache_dir, sizeof cache_dir, "%s/cache", tmpdir);
    mf_prep_opts o;
    memset(&o, 0, sizeof o);
    o.input = mmcif, o.ccd_path = ccd, o.out = cache_dir, o.msa_dir = msadir;
    o.threads = ncpu > 256 ? 256 : (int)ncpu;
    o.report = fopen("/dev/null", "w");
    mf_prep_summary s;
    double t0 = mf_time_now();
    if (mf_prep_run(&o, &s) != MF_OK) die("prep");
    prep_s = mf_time_now() - t0, prep_done = s.done, prep_n = s.done + s.failed;
    if (o.report) fclose(o.report);
    printf("prep: %lld entries stored, %lld failed, %.3f s with %d threads (%.1f entries/s)\n",
           (long long)s.done, (long long)s.failed, prep_s, o.threads,
           (double)(s.done + s.failed) / prep_s);
  }
  mf_cache *c;
  mf_cache_opts co;
  memset(&co, 0, sizeof co);
  if (mf_cache_open(cache_dir, &co, &c) != MF_OK) die("open cache");
  int maxw = W > Wf ? W : Wf;
  mf_loader_source cs, fs;
  if (mf_loader_cache_source(c, maxw, &cs) != MF_OK) die("cache source");
  char **ids;
  int64_t n_ids;
  if (mf_cache_list(c, &ids, &n_ids) != MF_OK) die("cache list");
  mf_source_files_opts fo;
  memset(&fo, 0, sizeof fo);
  fo.input = mmcif, fo.ccd_path = ccd, fo.msa_dir = msadir, fo.ids = ids, fo.n_ids = n_ids;
  if (mf_source_files_create(&fo, maxw, &fs) != MF_OK) die("files source");

  mf_crop_config cc;
  mf_crop_config_default(&cc);
  cc.crop_size = crop, cc.max_msa_rows = msa;
  mf_crop_layout lay;
  if (mf_crop_layout_make(NULL, &cc, &lay) != MF_OK) die("layout");
  const size_t bytes = lay.total;
  mf_crop_layout_free(&lay);

  cudaStream_t train;
  CK(cudaStreamCreateWithFlags(&train, cudaStreamNonBlocking));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  step_cfg k;
  k.blocks = prop.multiProcessorCount * 4, k.threads = 256;
  CK(cudaMalloc(&k.out, (size_t)k.blocks * k.threads * sizeof(float)));
  void *dummy;
  CK(cudaMalloc(&dummy, bytes));
  CK(cudaMemset(dummy, 1, bytes));

  /* calibrations */
  double all_ms[16];
  const char *all_src[16];
  int all_w[16], n_all = 0;
  for (int i = 0; i < n_ms; i++)
    all_ms[n_all] = step_ms[i], all_src[n_all] = "cache", all_w[n_all++] = W;
  for (int i = 0; i < n_nc; i++)
    all_ms[n_all] = nc_ms[i], all_src[n_all] = "files", all_w[n_all++] = Wf;
  loop_result res[16];
  printf("\nslot %.2f MB (crop %lld, MSA cap %lld); %d measured steps after 5 warm-up; step "
         "kernel %d blocks x %d threads\n",
         bytes / 1e6, crop, msa, steps, k.blocks, k.threads);
  printf("%-10s %-6s %3s %9s %9s %9s %11s %11s %11s %10s\n", "variant", "source", "W",
         "kernel ms", "step ms", "host ms", "host wait", "event wait", "data wait", "gpu idle");
  for (int i = 0; i < n_all; i++) {
    float kms;
    int iters = calibrate(&k, dummy, bytes, all_ms[i], train, &kms);
    loop_result *r = &res[i];
    memset(r, 0, sizeof *r);
    r->variant = !strcmp(all_src[i], "cache") ? "megafold" : "no-cache";
    r->source = all_src[i];
    r->step_target_ms = all_ms[i], r->kernel_ms = kms;
    train_loop(!strcmp(all_src[i], "cache") ? &cs : &fs, &cc, all_w[i], steps, &k, iters, train,
               r);
    double w = r->wall_s;
    printf("%-10s %-6s %3d %9.2f %9.2f %9.3f %10.4f%% %10.4f%% %10.4f%% %9.3f%%\n", r->variant,
           r->source, r->workers, kms, 1e3 * w / steps, 1e3 * r->staging_host_s / steps,
           100 * r->host_wait_s / w, 100 * r->event_wait_s / w,
           100 * (r->host_wait_s + r->event_wait_s) / w, 100 * (w - r->busy_s) / w);
  }
  if (json) {
    FILE *f = fopen(json, "w");
    if (!f) die("json");
    fprintf(f, "{\"gpu\": \"%s\", \"cpu_cores\": %ld, \"rows\": [\n", gpu, ncpu);
    int nr = 0;
    if (!cache_arg) {
      fprintf(f,
              "    {\"variant\": \"megafold\", \"what\": \"prep\", \"pass\": \"prep\", \"N\": %lld, "
              "\"ms\": %.6g, \"peak_gib\": null, \"threads\": %ld, \"seconds\": %.4f, "
              "\"entries_per_s\": %.2f, \"done\": %lld, \"machine\": \"gpu host\"}",
              prep_n, 1e3 * prep_s / (double)prep_n, ncpu, prep_s, (double)prep_n / prep_s,
              prep_done);
      nr++;
    }
    for (int i = 0; i < n_all; i++) {
      const loop_result *r = &res[i];
      double w = r->wall_s;
      fprintf(f,
              "%s    {\"variant\": \"%s\", \"what\": \"train_loop\", \"pass\": \"step\", \"N\": %d, "
              "\"ms\": %.6g, \"peak_gib\": null, \"source\": \"%s\", \"workers\": %d, "
              "\"step_target_ms\": %.1f, \"kernel_ms\": %.4f, \"crop\": %lld, \"msa_cap\": %lld, "
              "\"slot_mb\": %.3f, \"wall_s\": %.5f, \"host_wait_s\": %.6f, "
              "\"event_wait_s\": %.6f, \"data_wait_frac\": %.6g, \"host_wait_frac\": %.6g, "
              "\"event_wait_frac\": %.6g, \"gpu_idle_frac\": %.6g, \"staging_host_ms\": %.4f}",
              nr++ ? ",\n" : "", r->variant, r->steps, 1e3 * w / r->steps, r->source, r->workers,
              r->step_target_ms, r->kernel_ms, crop, msa, bytes / 1e6, w, r->host_wait_s,
              r->event_wait_s, (r->host_wait_s + r->event_wait_s) / w, r->host_wait_s / w,
              r->event_wait_s / w, (w - r->busy_s) / w, 1e3 * r->staging_host_s / r->steps);
    }
    fprintf(f, "\n]}\n");
    fclose(f);
  }
  CK(cudaFree(dummy));
  CK(cudaFree(k.out));
  CK(cudaStreamDestroy(train));
  mf_source_files_free(&fs);
  mf_loader_cache_source_free(&cs);
  mf_cache_list_free(ids, n_ids);
  mf_cache_close(c);
  if (tmpdir[0]) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "evopipe_gpu: could not remove %s\n", tmpdir);
  }
  return 0;
}
