/* evopipe.c — the CPU part of the EvoPipe benchmark (issue 6) on the shared data:
 *   1. prep throughput (entries/s, MB/s of mmCIF input) at the given thread counts, and our
 *      mmCIF reading alone over the same files: gunzip only (mf_textfile_read), the STAR
 *      parse (mf_cif_read) and the structure (mf_structure_read); gemmi's numbers on the
 *      same files come from bench/evopipe_gemmi.py in the same run (bench/evopipe.sh);
 *   2. the time to produce one cropped training example (crop, MSA row cap) from the cache
 *      (mf_loader_cache_source) and from the files (mf_source_files, the --no-cache path),
 *      single thread (per example, the exact work of one loader step: get, then
 *      mf_loader_build_example — verify the record, decompress what the crop reads, plan,
 *      write — with a reused per-worker workspace), plus the direct no-cache cost without
 *      the record round trip (featurise + crop), then through the loader with W workers
 *      (wall time per example over many steps, consumer doing nothing else).
 * Prints a table and writes the rows as JSON (bench/evopipe.sh merges them into
 * bench/results/evopipe.json, DESIGN.md format). A benchmark, not a test: it measures.
 *   evopipe [--data DIR] [--threads 1,2] [--workers 1,2] [--crop 384] [--msa 1024]
 *           [--steps 232] [--reps 5] [--json FILE] [--keep-cache DIR] [--zstd-level L]
 * (--zstd-level: the record level of the prep runs, whose first cache part 2 reads; default
 * prep's own)
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "data/cache.h"
#include "data/ccd.h"
#include "data/cif.h"
#include "data/crop.h"
#include "data/featurize.h"
#include "data/loader.h"
#include "data/prep.h"
#include "data/source_files.h"
#include "data/structure.h"
#include "data/textfile.h"

#define MAX_LIST 16

typedef struct {
  const char *data;
  int threads[MAX_LIST], n_threads;
  int workers[MAX_LIST], n_workers;
  int64_t crop, msa, steps;
  int reps;
  const char *json;
  const char *keep_cache;
  int zstd_level; /* prep's record level, 0 = its default */
} args;

static FILE *g_json;
static int g_rows;

/* ------------------------------------------------------------------ small helpers */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* q-quantile (0..1) of n values (sorted in place). */
static double quantile(double *v, int64_t n, double q) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  double pos = q * (double)(n - 1);
  int64_t i = (int64_t)pos;
  if (i + 1 >= n) return v[n - 1];
  return v[i] + (pos - (double)i) * (v[i + 1] - v[i]);
}

static double peak_rss_gib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / (1024.0 * 1024.0); /* ru_maxrss is KiB on Linux */
}

static int parse_list(const char *s, int *out) {
  int n = 0;
  while (*s && n < MAX_LIST) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 1 || v > 256) return -1;
    out[n++] = (int)v;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return n;
}

static void die(const char *what) {
  fprintf(stderr, "evopipe: %s: %s\n", what, mf_error_message());
  exit(1);
}

static void rm_rf(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0) return;
  if (S_ISDIR(sb.st_mode)) {
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char sub[1024];
      snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
      rm_rf(sub);
    }
    if (d) closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

static int64_t file_size(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 ? (int64_t)sb.st_size : 0;
}

/* One JSON row: the fixed keys, then `extra` (already formatted "k": v pairs or ""). */
static void row(const char *variant, const char *what, const char *pass, int64_t N, double ms,
                const char *extra) {
  if (!g_json) return;
  fprintf(g_json,
          "%s    {\"variant\": \"%s\", \"what\": \"%s\", \"pass\": \"%s\", \"N\": %lld, "
          "\"ms\": %.6g, \"peak_gib\": %.4f%s%s}",
          g_rows++ ? ",\n" : "", variant, what, pass, (long long)N, ms, peak_rss_gib(),
          extra && *extra ? ", " : "", extra ? extra : "");
}

/* ------------------------------------------------------------------ 1. prep and parsing */

static void bench_prep(const args *a, const char *mmcif, const char *ccd, const char *msa,
                       char **paths, int64_t n_files, int64_t bytes_cif, int64_t bytes_a3m,
                       char *cache_out, size_t cache_out_n) {
  printf("\n== 1. prep: %lld mmCIF files (%.2f MB gz) + a3m (%.2f MB gz) -> LMDB cache\n",
         (long long)n_files, bytes_cif / 1e6, bytes_a3m / 1e6);
  printf("%-10s %8s %8s %10s %12s %14s %8s\n", "variant", "threads", "done", "seconds",
         "entries/s", "MB/s (mmCIF)", "failed");
  for (int i = 0; i < a->n_threads; i++) {
    char dir[] = "/tmp/evopipe_prep_XXXXXX";
    if (!mkdtemp(dir)) die("mkdtemp");
    char out[256];
    snprintf(out, sizeof out, "%s/cache", dir);
    mf_prep_opts o;
    memset(&o, 0, sizeof o);
    o.input = mmcif, o.ccd_path = ccd, o.out = out, o.msa_dir = msa;
    o.threads = a->threads[i];
    o.zstd_level = a->zstd_level;
    FILE *rep = fopen("/dev/null", "w");
    o.report = rep;
    mf_prep_summary s;
    double t0 = mf_time_now();
    if (mf_prep_run(&o, &s) != MF_OK) die("prep");
    double sec = mf_time_now() - t0;
    if (rep) fclose(rep);
    double eps = (double)(s.done + s.failed) / sec, mbs = (double)s.bytes_in / 1e6 / sec;
    printf("%-10s %8d %8lld %10.3f %12.1f %14.2f %8lld\n", "megafold", o.threads,
           (long long)s.done, sec, eps, mbs, (long long)s.failed);
    char extra[512];
    snprintf(extra, sizeof extra,
             "\"threads\": %d, \"entries\": %lld, \"done\": %lld, \"failed\": %lld, "
             "\"seconds\": %.4f, \"entries_per_s\": %.2f, \"mb_in\": %.3f, \"mb_per_s\": %.3f, "
             "\"mb_in_with_a3m\": %.3f, \"mb_per_s_with_a3m\": %.3f, \"mb_out\": %.3f",
             o.threads, (long long)(s.done + s.failed), (long long)s.done, (long long)s.failed,
             sec, eps, s.bytes_in / 1e6, mbs, (s.bytes_in + bytes_a3m) / 1e6,
             (s.bytes_in + bytes_a3m) / 1e6 / sec, s.bytes_out / 1e6);
    row("megafold", "prep", "prep", s.done + s.failed, 1e3 * sec / (double)(s.done + s.failed),
        extra);
    if (i == 0 && cache_out[0] == 0) {
      snprintf(cache_out, cache_out_n, "%s", out); /* kept for part 2 */
    } else {
      rm_rf(dir);
    }
  }

  /* mmCIF reading alone: median of reps passes over all files */
  printf("\n== 1b. mmCIF reading alone, %lld files, median of %d passes\n", (long long)n_files,
         a->reps);
  printf("%-10s %-34s %10s %12s %14s %14s\n", "variant", "what", "seconds", "files/s",
         "MB/s (gz)", "MB/s (text)");
  const char *names[3] = {"gunzip only (mf_textfile_read)", "STAR parse (mf_cif_read)",
                          "structure (mf_structure_read)"};
  const char *whats[3] = {"gunzip", "cif_parse", "structure"};
  int64_t text_bytes = 0;
  for (int m = 0; m < 3; m++) {
    double *t = calloc((size_t)a->reps, sizeof *t);
    for (int r = 0; r < a->reps; r++) {
      double t0 = mf_time_now();
      for (int64_t i = 0; i < n_files; i++) {
        if (m == 0) {
          char *d;
          size_t len;
          if (mf_textfile_read(paths[i], &d, &len) != MF_OK) die(paths[i]);
          if (r == 0) text_bytes += (int64_t)len;
          mf_free(d);
        } else if (m == 1) {
          mf_cif_doc *doc;
          if (mf_cif_read(paths[i], &doc) != MF_OK) die(paths[i]);
          mf_cif_free(doc);
        } else {
          mf_structure *st;
          if (mf_structure_read(paths[i], &st) != MF_OK) die(paths[i]);
          mf_structure_free(st);
        }
      }
      t[r] = mf_time_now() - t0;
    }
    double sec = quantile(t, a->reps, 0.5);
    free(t);
    printf("%-10s %-34s %10.4f %12.1f %14.2f %14.2f\n", "megafold", names[m], sec,
           n_files / sec, bytes_cif / 1e6 / sec, text_bytes / 1e6 / sec);
    char extra[512];
    snprintf(extra, sizeof extra,
             "\"threads\": 1, \"files\": %lld, \"seconds\": %.5f, \"files_per_s\": %.2f, "
             "\"mb_gz\": %.3f, \"mb_per_s\": %.3f, \"mb_text\": %.3f, \"mb_text_per_s\": %.3f, "
             "\"reps\": %d",
             (long long)n_files, sec, n_files / sec, bytes_cif / 1e6, bytes_cif / 1e6 / sec,
             text_bytes / 1e6, text_bytes / 1e6 / sec, a->reps);
    row("megafold", whats[m], "parse", n_files, 1e3 * sec / (double)n_files, extra);
  }
}

/* ------------------------------------------------------------------ 2. one example */

typedef struct {
  double get, decode, plan, write, total;
} ex_times;

/* The work of one loader step for step t of source src, timed: get, then
 * mf_loader_build_example (verify + partial decode, plan, write) with the worker's
 * reused workspace ws, then release. */
static int one_example(const mf_loader_source *src, mf_loader_ws *ws, const mf_crop_config *cc,
                       const mf_crop_layout *lay, void *buf, uint64_t seed, uint64_t t,
                       ex_times *tm) {
  const int64_t n = src->n;
  int64_t k = mf_loader_entry_at(seed, t / (uint64_t)n, n, (int64_t)(t % (uint64_t)n));
  const uint8_t *rec;
  size_t len;
  double t0 = mf_time_now();
  mf_status st = src->get(src->ctx, 0, k, &rec, &len);
  double t1 = mf_time_now();
  mf_loader_times lt = {0, 0, 0};
  if (st == MF_OK)
    st = mf_loader_build_example(ws, rec, len, "bench", cc, lay, seed, t, buf, NULL, &lt);
  if (src->release) src->release(src->ctx, 0);
  double t4 = mf_time_now();
  tm->get = t1 - t0, tm->decode = lt.decode, tm->plan = lt.plan, tm->write = lt.write;
  tm->total = t4 - t0;
  return st == MF_OK;
}

/* Direct no-cache: featurise the file + plan + write (no record round trip). */
static int one_direct(const mf_loader_source *fsrc, const mf_featurize_opts *fo,
                      const mf_crop_config *cc, const mf_crop_layout *lay, void *buf,
                      uint64_t seed, uint64_t t, double *sec) {
  const int64_t n = fsrc->n;
  int64_t k = mf_loader_entry_at(seed, t / (uint64_t)n, n, (int64_t)(t % (uint64_t)n));
  double t0 = mf_time_now();
  mf_feature_set fs;
  mf_status st = mf_featurize_file(mf_source_files_path(fsrc, k), fo, &fs);
  mf_crop_plan plan;
  if (st == MF_OK) {
    st = mf_crop_plan_make(&fs, cc, seed, t, &plan);
    if (st == MF_OK) {
      st = mf_crop_write(&fs, &plan, lay, buf);
      mf_crop_plan_free(&plan);
    }
    mf_features_free(&fs);
  }
  *sec = mf_time_now() - t0;
  return st == MF_OK;
}

/* Wall seconds per example through the loader with W workers over `steps` steps. */
static double loader_rate(const mf_loader_source *src, const mf_crop_config *cc, int W,
                          uint64_t seed, int64_t steps, double *wait_s) {
  mf_loader_config cfg;
  mf_loader_config_default(&cfg);
  cfg.workers = W, cfg.slots = 2 * W + 2, cfg.seed = seed, cfg.crop = *cc;
  mf_loader *L;
  if (mf_loader_create(&cfg, src, &L) != MF_OK) die("loader");
  double t0 = mf_time_now();
  for (int64_t t = 0; t < steps; t++) {
    mf_loader_example ex;
    if (mf_loader_next(L, &ex) != MF_OK) die("loader step");
    mf_loader_release(L, &ex);
  }
  double sec = mf_time_now() - t0;
  *wait_s = mf_loader_get_stats(L).wait_s;
  mf_loader_destroy(L);
  return sec / (double)steps;
}

static void bench_examples(const args *a, const char *mmcif, const char *ccd_path,
                           const char *msa, const char *cache_dir) {
  mf_cache *c;
  if (mf_cache_open(cache_dir, &(mf_cache_opts){0}, &c) != MF_OK) die("open cache");
  mf_loader_source cs, fsrc;
  int maxw = 1;
  for (int i = 0; i < a->n_workers; i++) maxw = a->workers[i] > maxw ? a->workers[i] : maxw;
  if (mf_loader_cache_source(c, maxw, &cs) != MF_OK) die("cache source");
  char **ids;
  int64_t n_ids;
  if (mf_cache_list(c, &ids, &n_ids) != MF_OK) die("cache list");
  mf_source_files_opts fo;
  memset(&fo, 0, sizeof fo);
  fo.input = mmcif, fo.ccd_path = ccd_path, fo.msa_dir = msa;
  fo.ids = ids, fo.n_ids = n_ids; /* the same entries as the cache (prep's failures left out) */
  if (mf_source_files_create(&fo, maxw, &fsrc) != MF_OK) die("files source");
  mf_ccd ccd;
  if (mf_ccd_read(ccd_path, &ccd) != MF_OK) die("ccd");
  mf_featurize_opts fzo = {&ccd, msa, 0};

  mf_crop_config cc;
  mf_crop_config_default(&cc);
  cc.crop_size = a->crop, cc.max_msa_rows = a->msa;
  mf_crop_layout lay;
  if (mf_crop_layout_make(NULL, &cc, &lay) != MF_OK) die("layout");
  void *buf = mf_malloc(lay.total, "bench slot");
  mf_loader_ws *ws_c, *ws_f; /* one workspace per source, as one loader worker each has */
  if (mf_loader_ws_create(&ws_c) != MF_OK || mf_loader_ws_create(&ws_f) != MF_OK) die("ws");
  const uint64_t seed = 42;
  const int64_t S = a->steps;
  printf("\n== 2. one cropped example (crop %lld, MSA cap %lld, slot %.2f MB), %lld entries, "
         "steps 0..%lld, seed %llu\n",
         (long long)a->crop, (long long)a->msa, lay.total / 1e6, (long long)cs.n,
         (long long)S - 1, (unsigned long long)seed);
  double *tc = calloc((size_t)S, sizeof *tc), *tf = calloc((size_t)S, sizeof *tf),
         *td = calloc((size_t)S, sizeof *td), *dec = calloc((size_t)S, sizeof *dec),
         *pl = calloc((size_t)S, sizeof *pl), *wr = calloc((size_t)S, sizeof *wr),
         *gt = calloc((size_t)S, sizeof *gt), *fget = calloc((size_t)S, sizeof *fget);
  /* warm-up: one pass of each over a few steps (page cache, allocator) */
  for (int64_t t = 0; t < 8 && t < S; t++) {
    ex_times tm;
    double d;
    one_example(&cs, ws_c, &cc, &lay, buf, seed, (uint64_t)t, &tm);
    one_example(&fsrc, ws_f, &cc, &lay, buf, seed, (uint64_t)t, &tm);
    one_direct(&fsrc, &fzo, &cc, &lay, buf, seed, (uint64_t)t, &d);
  }
  double sum_c = 0, sum_f = 0, sum_d = 0;
  uint8_t *ref = mf_malloc(lay.total, "bench reference slot");
  int64_t same = 0, same_direct = 0;
  for (int64_t t = 0; t < S; t++) {
    ex_times tm;
    if (!one_example(&cs, ws_c, &cc, &lay, buf, seed, (uint64_t)t, &tm)) die("cache example");
    tc[t] = tm.total, dec[t] = tm.decode, pl[t] = tm.plan, wr[t] = tm.write, gt[t] = tm.get;
    sum_c += tm.total;
    memcpy(ref, buf, lay.total); /* the cached example, to compare (outside the timings) */
    if (!one_example(&fsrc, ws_f, &cc, &lay, buf, seed, (uint64_t)t, &tm)) die("files example");
    same += !memcmp(ref, buf, lay.total);
    tf[t] = tm.total, fget[t] = tm.get;
    sum_f += tm.total;
    if (!one_direct(&fsrc, &fzo, &cc, &lay, buf, seed, (uint64_t)t, &td[t])) die("direct");
    same_direct += !memcmp(ref, buf, lay.total);
    sum_d += td[t];
  }
  mf_free(ref);
  printf("  identical example bytes, files vs cache: %lld of %lld steps (loader source), %lld of "
         "%lld (direct)\n",
         (long long)same, (long long)S, (long long)same_direct, (long long)S);
  double mc = quantile(tc, S, 0.5), mf = quantile(tf, S, 0.5), md = quantile(td, S, 0.5);
  double c90 = quantile(tc, S, 0.9), f90 = quantile(tf, S, 0.9), d90 = quantile(td, S, 0.9);
  double mean_c = sum_c / S, mean_f = sum_f / S, mean_d = sum_d / S;
  printf("%-20s %8s %10s %10s %10s %12s %12s\n", "variant (1 thread)", "steps", "median ms",
         "p90 ms", "mean ms", "median ratio", "mean ratio");
  printf("%-20s %8lld %10.3f %10.3f %10.3f %12s %12s\n", "megafold (cache)", (long long)S,
         1e3 * mc, 1e3 * c90, 1e3 * mean_c, "1", "1");
  printf("%-20s %8lld %10.3f %10.3f %10.3f %11.1fx %11.1fx\n", "no-cache (loader)",
         (long long)S, 1e3 * mf, 1e3 * f90, 1e3 * mean_f, mf / mc, mean_f / mean_c);
  printf("%-20s %8lld %10.3f %10.3f %10.3f %11.1fx %11.1fx\n", "no-cache (direct)",
         (long long)S, 1e3 * md, 1e3 * d90, 1e3 * mean_d, md / mc, mean_d / mean_c);
  double s_get = 0, s_dec = 0, s_pl = 0, s_wr = 0, s_fget = 0;
  for (int64_t t = 0; t < S; t++)
    s_get += gt[t], s_dec += dec[t], s_pl += pl[t], s_wr += wr[t], s_fget += fget[t];
  printf("  cache step, mean parts: get %.3f ms, decode %.3f ms, crop plan %.3f ms, write %.3f "
         "ms; files step, mean featurise + encode %.3f ms\n",
         1e3 * s_get / S, 1e3 * s_dec / S, 1e3 * s_pl / S, 1e3 * s_wr / S, 1e3 * s_fget / S);
  double m_get = quantile(gt, S, 0.5), m_dec = quantile(dec, S, 0.5),
         m_pl = quantile(pl, S, 0.5), m_wr = quantile(wr, S, 0.5), m_fget = quantile(fget, S, 0.5);
  printf("  cache step, median parts: get %.3f ms, decode (checksums + zstd of the kept rows) "
         "%.3f ms, crop plan %.3f ms, write (crop, subsample, augment, pad) %.3f ms\n",
         1e3 * m_get, 1e3 * m_dec, 1e3 * m_pl, 1e3 * m_wr);
  printf("  files step, median featurise + encode (source get) %.3f ms\n", 1e3 * m_fget);
  char extra[640];
  snprintf(extra, sizeof extra,
           "\"source\": \"cache\", \"workers\": 1, \"crop\": %lld, \"msa_cap\": %lld, "
           "\"median_ms\": %.5f, \"p90_ms\": %.5f, \"mean_ms\": %.5f, \"get_ms\": %.5f, "
           "\"decode_ms\": %.5f, \"plan_ms\": %.5f, \"write_ms\": %.5f, \"slot_mb\": %.3f, "
           "\"mean_decode_ms\": %.5f, \"mean_write_ms\": %.5f",
           (long long)a->crop, (long long)a->msa, 1e3 * mc, 1e3 * c90, 1e3 * mean_c,
           1e3 * m_get, 1e3 * m_dec, 1e3 * m_pl, 1e3 * m_wr, lay.total / 1e6, 1e3 * s_dec / S,
           1e3 * s_wr / S);
  row("megafold", "example", "step", S, 1e3 * mc, extra);
  snprintf(extra, sizeof extra,
           "\"source\": \"files (mf_source_files: featurise + record round trip)\", "
           "\"workers\": 1, \"crop\": %lld, \"msa_cap\": %lld, \"median_ms\": %.5f, "
           "\"p90_ms\": %.5f, \"mean_ms\": %.5f, \"ratio_median\": %.3f, \"ratio_mean\": %.3f, "
           "\"identical_to_cache\": %lld",
           (long long)a->crop, (long long)a->msa, 1e3 * mf, 1e3 * f90, 1e3 * mean_f, mf / mc,
           mean_f / mean_c, (long long)same);
  row("no-cache", "example", "step", S, 1e3 * mf, extra);
  snprintf(extra, sizeof extra,
           "\"source\": \"files (direct: mf_featurize_file + crop, no record)\", "
           "\"workers\": 1, \"crop\": %lld, \"msa_cap\": %lld, \"median_ms\": %.5f, "
           "\"p90_ms\": %.5f, \"mean_ms\": %.5f, \"ratio_median\": %.3f, \"ratio_mean\": %.3f, "
           "\"identical_to_cache\": %lld",
           (long long)a->crop, (long long)a->msa, 1e3 * md, 1e3 * d90, 1e3 * mean_d, md / mc,
           mean_d / mean_c, (long long)same_direct);
  row("no-cache-direct", "example", "step", S, 1e3 * md, extra);

  /* through the loader with W workers */
  printf("\n%-20s %8s %8s %16s %12s %10s\n", "variant (loader)", "workers", "steps",
         "ms/example", "examples/s", "ratio");
  for (int i = 0; i < a->n_workers; i++) {
    int W = a->workers[i];
    double wc, wf;
    double pc = loader_rate(&cs, &cc, W, seed, 2 * S, &wc);
    double pf = loader_rate(&fsrc, &cc, W, seed, S, &wf);
    printf("%-20s %8d %8lld %16.3f %12.1f %10s\n", "megafold (cache)", W, (long long)(2 * S),
           1e3 * pc, 1 / pc, "1");
    printf("%-20s %8d %8lld %16.3f %12.1f %9.1fx\n", "no-cache (files)", W, (long long)S,
           1e3 * pf, 1 / pf, pf / pc);
    snprintf(extra, sizeof extra,
             "\"source\": \"cache\", \"workers\": %d, \"crop\": %lld, \"msa_cap\": %lld, "
             "\"examples_per_s\": %.2f",
             W, (long long)a->crop, (long long)a->msa, 1 / pc);
    row("megafold", "loader", "step", 2 * S, 1e3 * pc, extra);
    snprintf(extra, sizeof extra,
             "\"source\": \"files\", \"workers\": %d, \"crop\": %lld, \"msa_cap\": %lld, "
             "\"examples_per_s\": %.2f, \"ratio\": %.3f",
             W, (long long)a->crop, (long long)a->msa, 1 / pf, pf / pc);
    row("no-cache", "loader", "step", S, 1e3 * pf, extra);
  }
  free(tc), free(tf), free(td), free(dec), free(pl), free(wr), free(gt), free(fget);
  mf_loader_ws_free(ws_c), mf_loader_ws_free(ws_f);
  mf_free(buf);
  mf_crop_layout_free(&lay);
  mf_ccd_free(&ccd);
  mf_source_files_free(&fsrc);
  mf_loader_cache_source_free(&cs);
  mf_cache_list_free(ids, n_ids);
  mf_cache_close(c);
}

/* ------------------------------------------------------------------ main */

static void cpu_desc(char *buf, size_t n) {
  char model[256] = "unknown CPU";
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    if (!strncmp(line, "model name", 10)) {
      char *p = strchr(line, ':');
      if (p) {
        p++;
        while (*p == ' ') p++;
        p[strcspn(p, "\n")] = 0;
        snprintf(model, sizeof model, "%s", p);
      }
      break;
    }
  }
  if (f) fclose(f);
  snprintf(buf, n, "%s, %ld cores online", model, sysconf(_SC_NPROCESSORS_ONLN));
}

int main(int argc, char **argv) {
  args a;
  memset(&a, 0, sizeof a);
  a.data = "../shared/data";
  a.threads[0] = 1, a.threads[1] = 2, a.n_threads = 2;
  a.workers[0] = 1, a.workers[1] = 2, a.n_workers = 2;
  a.crop = 384, a.msa = 1024, a.steps = 232, a.reps = 5;
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "evopipe: %s needs a value\n", k);
      return 2;
    }
    i++;
    if (!strcmp(k, "--data")) a.data = v;
    else if (!strcmp(k, "--threads")) a.n_threads = parse_list(v, a.threads);
    else if (!strcmp(k, "--workers")) a.n_workers = parse_list(v, a.workers);
    else if (!strcmp(k, "--crop")) a.crop = atoll(v);
    else if (!strcmp(k, "--msa")) a.msa = atoll(v);
    else if (!strcmp(k, "--steps")) a.steps = atoll(v);
    else if (!strcmp(k, "--reps")) a.reps = atoi(v);
    else if (!strcmp(k, "--json")) a.json = v;
    else if (!strcmp(k, "--keep-cache")) a.keep_cache = v;
    else if (!strcmp(k, "--zstd-level")) a.zstd_level = atoi(v);
    else {
      fprintf(stderr, "evopipe: unknown option %s\n", k);
      return 2;
    }
  }
  if (a.n_threads < 1 || a.n_workers < 1 || a.crop < 1 || a.msa < 1 || a.steps < 1 ||
      a.reps < 1) {
    fprintf(stderr, "evopipe: bad option values\n");
    return 2;
  }
  mf_log_set_level(MF_LOG_ERROR);
  char mmcif[512], ccd[512], msa[512];
  snprintf(mmcif, sizeof mmcif, "%s/mmcif", a.data);
  snprintf(ccd, sizeof ccd, "%s/ccd/components_subset.cif.gz", a.data);
  snprintf(msa, sizeof msa, "%s/msa", a.data);
  char **paths;
  int64_t n_files;
  if (mf_prep_list_inputs(mmcif, &paths, &n_files) != MF_OK) die(mmcif);
  int64_t bytes_cif = 0, bytes_a3m = 0;
  for (int64_t i = 0; i < n_files; i++) bytes_cif += file_size(paths[i]);
  DIR *d = opendir(msa);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", msa, e->d_name);
    bytes_a3m += file_size(p);
  }
  if (d) closedir(d);
  char cpu[400];
  cpu_desc(cpu, sizeof cpu);
  printf("evopipe: %s; data %s\n", cpu, a.data);
  if (a.json) {
    g_json = fopen(a.json, "w");
    if (!g_json) {
      fprintf(stderr, "evopipe: cannot write %s\n", a.json);
      return 1;
    }
    fprintf(g_json, "{\"cpu\": \"%s\", \"rows\": [\n", cpu);
  }
  /* warm the page cache: one read of every input */
  for (int64_t i = 0; i < n_files; i++) {
    char *t;
    size_t len;
    if (mf_textfile_read(paths[i], &t, &len) == MF_OK) mf_free(t);
  }
  char cache_dir[512] = "";
  bench_prep(&a, mmcif, ccd, msa, paths, n_files, bytes_cif, bytes_a3m, cache_dir,
             sizeof cache_dir);
  bench_examples(&a, mmcif, ccd, msa, cache_dir);
  /* the first prep run's cache: removed unless --keep-cache (then moved there) */
  char parent[512];
  snprintf(parent, sizeof parent, "%s", cache_dir);
  char *slash = strrchr(parent, '/');
  if (slash) *slash = 0;
  if (a.keep_cache) {
    rm_rf(a.keep_cache);
    if (rename(cache_dir, a.keep_cache) != 0)
      fprintf(stderr, "evopipe: could not move the cache to %s\n", a.keep_cache);
  }
  rm_rf(parent);
  if (g_json) {
    fprintf(g_json, "\n]}\n");
    fclose(g_json);
  }
  mf_prep_free_list(paths, n_files);
  return 0;
}
