/* test_source_files.c — the `--no-cache` loader source (src/data/source_files.c) on real
 * entries of ../shared/data: seven entries (protein monomers, a heterodimer, DNA, DNA+ion,
 * ligands, protein+DNA) are prepped into an LMDB cache with `megafold prep`'s driver; the
 * loader then runs once on the cache and once on the files (featurised on the fly), with
 * other worker counts, and every example of 2n + 3 steps (three epochs) has the same bytes,
 * entry, id, crop and sizes for the same (seed, step): the proof that --no-cache computes
 * what the cached path computes. Also: the id filter, a corrupt file skipped as a bad entry
 * (the same way in every run), and option errors (missing CCD, unknown id, empty input).
 * Skipped with a message when the shared data is absent.
 * Not here: the featuriser's values (test_featurize.c), the loader itself (test_loader.c). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/cache.h"
#include "data/loader.h"
#include "data/prep.h"
#include "data/source_files.h"
#include "harness.h"

#define SHARED "../shared/data"
#define CCD SHARED "/ccd/components_subset.cif.gz"
#define MSA SHARED "/msa"
#define MAX_MSA_ROWS 64

static const char *ENTRIES[] = {"1crn", "1ay7", "1bna", "4zkk", "1cbs", "5i55", "102m"};
#define N_ENTRIES ((int)(sizeof ENTRIES / sizeof ENTRIES[0]))

static void crop_cfg(mf_loader_config *cfg, int workers, uint64_t seed) {
  mf_loader_config_default(cfg);
  cfg->workers = workers;
  cfg->slots = workers + 1;
  cfg->seed = seed;
  cfg->crop.crop_size = 96;
  cfg->crop.max_msa_rows = 48;
}

/* The examples of steps 0..n_steps-1: data bytes (layout total each) and metadata. */
typedef struct {
  int64_t n_steps;
  size_t bytes;
  uint8_t *data;
  mf_loader_example *ex;
  mf_status *st;
  int64_t bad;
} run_out;

static int run_loader(const mf_loader_source *src, int workers, uint64_t seed,
                      int64_t n_steps, run_out *r) {
  memset(r, 0, sizeof *r);
  mf_loader_config cfg;
  crop_cfg(&cfg, workers, seed);
  mf_loader *L;
  if (mf_loader_create(&cfg, src, &L) != MF_OK) {
    printf("  loader: %s\n", mf_error_message());
    return 0;
  }
  r->n_steps = n_steps;
  r->bytes = mf_loader_layout(L)->total;
  r->data = calloc((size_t)n_steps, r->bytes);
  r->ex = calloc((size_t)n_steps, sizeof *r->ex);
  r->st = calloc((size_t)n_steps, sizeof *r->st);
  MF_ASSERT(r->data && r->ex && r->st, "out of memory");
  for (int64_t t = 0; t < n_steps; t++) {
    mf_loader_example ex;
    r->st[t] = mf_loader_next(L, &ex);
    if (r->st[t] != MF_OK) continue;
    memcpy(r->data + (size_t)t * r->bytes, ex.data, r->bytes);
    r->ex[t] = ex;
    mf_loader_release(L, &ex);
  }
  for (int64_t k = 0; k < src->n; k++) r->bad += mf_loader_entry_bad(L, k);
  mf_loader_destroy(L);
  return 1;
}

static void run_free(run_out *r) {
  free(r->data);
  free(r->ex);
  free(r->st);
  memset(r, 0, sizeof *r);
}

/* Steps where a and b differ (any status, byte, or metadata); verbose: print the first. */
static int64_t run_diff(const run_out *a, const run_out *b, int verbose) {
  if (a->n_steps != b->n_steps || a->bytes != b->bytes) return -1;
  int64_t bad = 0;
  for (int64_t t = 0; t < a->n_steps; t++) {
    const mf_loader_example *x = &a->ex[t], *y = &b->ex[t];
    int same = a->st[t] == b->st[t] &&
               !memcmp(a->data + (size_t)t * a->bytes, b->data + (size_t)t * b->bytes, a->bytes) &&
               x->step == y->step && x->entry == y->entry && !strcmp(x->id, y->id) &&
               x->n_tok == y->n_tok && x->n_atom == y->n_atom && x->n_msa == y->n_msa &&
               x->crop.chosen == y->crop.chosen && x->crop.used == y->crop.used &&
               x->crop.ref == y->crop.ref && x->skipped == y->skipped;
    if (!same && verbose && bad < 3)
      printf("  step %lld differs: %s/%s entry %lld/%lld\n", (long long)t, x->id, y->id,
             (long long)x->entry, (long long)y->entry);
    bad += !same;
  }
  return bad;
}

int main(void) {
  mf_test_begin("test_source_files");
  struct stat sb;
  if (stat(SHARED "/mmcif", &sb) != 0 || stat(CCD, &sb) != 0) {
    printf("test_source_files: %s/mmcif not found, skipped\n", SHARED);
    return mf_test_end();
  }
  char tmp[] = "/tmp/mf_srcfiles_XXXXXX";
  MF_ASSERT(mkdtemp(tmp) != NULL, "mkdtemp");
  char list[256], cache_dir[256], path[512], baddir[256];
  snprintf(list, sizeof list, "%s/list.txt", tmp);
  snprintf(cache_dir, sizeof cache_dir, "%s/cache", tmp);
  FILE *f = fopen(list, "w");
  MF_ASSERT(f, "write %s", list);
  /* not in id order, and one comment line: the source orders by id as the cache does */
  fprintf(f, "# entries\n");
  for (int i = N_ENTRIES - 1; i >= 0; i--) fprintf(f, SHARED "/mmcif/%s.cif.gz\n", ENTRIES[i]);
  fclose(f);

  /* the cache, as `megafold prep <list> --msa ... --max-msa-rows 64` builds it */
  mf_prep_opts po;
  memset(&po, 0, sizeof po);
  po.input = list, po.ccd_path = CCD, po.out = cache_dir, po.msa_dir = MSA;
  po.threads = 2, po.max_msa_rows = MAX_MSA_ROWS, po.initial_map_size = 16u << 20;
  mf_prep_summary s;
  mf_status st = mf_prep_run(&po, &s);
  MF_TEST(st == MF_OK && s.done == N_ENTRIES && s.failed == 0, "prep: %lld of %d stored (%s)",
          (long long)s.done, N_ENTRIES, st == MF_OK ? "ok" : mf_error_message());

  mf_cache *c = NULL;
  MF_ASSERT(mf_cache_open(cache_dir, &(mf_cache_opts){0}, &c) == MF_OK, "%s", mf_error_message());
  mf_loader_source cs;
  MF_ASSERT(mf_loader_cache_source(c, 4, &cs) == MF_OK, "%s", mf_error_message());

  mf_source_files_opts fo;
  memset(&fo, 0, sizeof fo);
  fo.input = list, fo.ccd_path = CCD, fo.msa_dir = MSA, fo.max_msa_rows = MAX_MSA_ROWS;
  mf_loader_source fsrc;
  st = mf_source_files_create(&fo, 4, &fsrc);
  MF_ASSERT(st == MF_OK, "files source: %s", mf_error_message());
  int same_ids = fsrc.n == cs.n;
  for (int64_t k = 0; same_ids && k < cs.n; k++)
    same_ids = !strcmp(fsrc.name(fsrc.ctx, k), cs.name(cs.ctx, k));
  MF_TEST(same_ids, "files source: %lld entries in the cache's id order", (long long)fsrc.n);
  const char *p0 = mf_source_files_path(&fsrc, 0);
  MF_TEST(p0 && strstr(p0, "/mmcif/") && mf_source_files_path(&fsrc, fsrc.n) == NULL &&
              mf_source_files_path(&cs, 0) == NULL,
          "path of entry 0: %s", p0 ? p0 : "(null)");

  /* the proof: same (seed, step) → same example bytes, any worker counts */
  const int64_t steps = 2 * (int64_t)cs.n + 3;
  run_out rc, rf1, rf3;
  int ok = run_loader(&cs, 1, 11, steps, &rc) && run_loader(&fsrc, 1, 11, steps, &rf1) &&
           run_loader(&fsrc, 3, 11, steps, &rf3);
  int64_t n_ok = 0;
  for (int64_t t = 0; ok && t < steps; t++) n_ok += rc.st[t] == MF_OK;
  MF_TEST(ok && n_ok == steps, "cache: %lld of %lld steps produced", (long long)n_ok,
          (long long)steps);
  MF_TEST(ok && run_diff(&rc, &rf1, 1) == 0,
          "files (1 worker) == cache (1 worker): %lld steps, %zu bytes each", (long long)steps,
          rc.bytes);
  MF_TEST(ok && run_diff(&rc, &rf3, 1) == 0, "files (3 workers) == cache (1 worker)");
  run_free(&rf3);
  /* the seed matters (the comparison is not vacuous) */
  ok = run_loader(&fsrc, 2, 12, steps, &rf3);
  MF_TEST(ok && run_diff(&rc, &rf3, 0) > 0, "another seed gives other examples");
  run_free(&rc), run_free(&rf1), run_free(&rf3);
  mf_source_files_free(&fsrc);
  mf_source_files_free(&fsrc); /* twice is fine */
  mf_loader_cache_source_free(&cs);
  mf_cache_close(c);

  /* the id filter: two of the entries, in id order */
  {
    char *ids[] = {"1crn", "102m"};
    fo.ids = ids, fo.n_ids = 2;
    st = mf_source_files_create(&fo, 1, &fsrc);
    MF_TEST(st == MF_OK && fsrc.n == 2 && !strcmp(fsrc.name(fsrc.ctx, 0), "102m") &&
                !strcmp(fsrc.name(fsrc.ctx, 1), "1crn"),
            "id filter: 2 entries (%s)", st == MF_OK ? "ok" : mf_error_message());
    mf_source_files_free(&fsrc);
    char *unknown[] = {"1crn", "9zzz"};
    fo.ids = unknown;
    st = mf_source_files_create(&fo, 1, &fsrc);
    MF_TEST(st == MF_ERR_CONFIG && strstr(mf_error_message(), "9zzz") && fsrc.ctx == NULL,
            "an id without a file is an error naming it: %s", mf_error_message());
    fo.ids = NULL, fo.n_ids = 0;
  }

  /* a corrupt file: the loader marks its entry bad and skips it, identically per run */
  snprintf(baddir, sizeof baddir, "%s/bad", tmp);
  mkdir(baddir, 0775);
  {
    /* two good entries (copies) and a malformed one */
    for (int i = 0; i < 2; i++) {
      char src_path[256];
      snprintf(src_path, sizeof src_path, SHARED "/mmcif/%s.cif.gz", ENTRIES[i]);
      snprintf(path, sizeof path, "%s/%s.cif.gz", baddir, ENTRIES[i]);
      FILE *in = fopen(src_path, "rb"), *out = fopen(path, "wb");
      MF_ASSERT(in && out, "copy %s", src_path);
      char buf[8192];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, in)) > 0) MF_ASSERT(fwrite(buf, 1, n, out) == n, "copy");
      fclose(in), fclose(out);
    }
    snprintf(path, sizeof path, "%s/3bad.cif", baddir);
    FILE *b = fopen(path, "w");
    MF_ASSERT(b, "write %s", path);
    fputs("data_3bad\nloop_\n_atom_site.id\n'unterminated\n", b);
    fclose(b);
  }
  fo.input = baddir;
  st = mf_source_files_create(&fo, 2, &fsrc);
  MF_TEST(st == MF_OK && fsrc.n == 3, "directory input: 3 entries");
  if (st == MF_OK) {
    run_out a, b2;
    ok = run_loader(&fsrc, 1, 3, 9, &a) && run_loader(&fsrc, 2, 3, 9, &b2);
    int all_ok = ok;
    for (int64_t t = 0; ok && t < 9; t++) all_ok &= a.st[t] == MF_OK && strcmp(a.ex[t].id, "3bad");
    MF_TEST(ok && all_ok && a.bad == 1 && b2.bad == 1 && run_diff(&a, &b2, 1) == 0,
            "the corrupt file is one bad entry, skipped the same way with 1 and 2 workers");
    run_free(&a), run_free(&b2);
    mf_source_files_free(&fsrc);
  }

  /* option errors */
  fo.input = baddir, fo.ccd_path = "/nonexistent/components.cif";
  st = mf_source_files_create(&fo, 1, &fsrc);
  MF_TEST(st != MF_OK && fsrc.ctx == NULL, "missing CCD: %s", mf_error_message());
  fo.ccd_path = CCD;
  snprintf(path, sizeof path, "%s/empty", tmp);
  mkdir(path, 0775);
  fo.input = path;
  st = mf_source_files_create(&fo, 1, &fsrc);
  MF_TEST(st == MF_ERR_CONFIG && fsrc.ctx == NULL, "empty input: %s", mf_error_message());
  fo.input = list;
  st = mf_source_files_create(&fo, 0, &fsrc);
  MF_TEST(st == MF_ERR_CONFIG, "0 workers: %s", mf_error_message());
  mf_source_files_free(NULL);

  mf_test_rm_rf(tmp);
  return mf_test_end();
}
