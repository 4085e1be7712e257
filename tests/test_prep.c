/* test_prep.c — the prep driver (prep.h) on real entries: four files from
 * ../shared/data/mmcif (protein, protein+DNA, protein+ligands, DNA+ion) and one truncated
 * gzip copied into a mkdtemp directory with the shared CCD subset and MSAs. The corrupt file
 * is reported (file and reason) and skipped, the others are stored and decode; a second run
 * skips them all; runs with 1, 2 and 4 threads give byte-identical records (and LMDB
 * files), equal to
 * featurising + encoding each file directly; list-file input, duplicate ids, option errors
 * and a metadata mismatch. Skipped with a message when the shared data is absent.
 * Not here: the codec (test_features.c), LMDB details (test_cache.c), feature values
 * (the featuriser's tests). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, fileno */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/cache.h"
#include "data/ccd.h"
#include "data/featurize.h"
#include "data/prep.h"
#include "harness.h"

#define SHARED "../shared/data"
static const char *ENTRIES[4] = {"1crn", "209d-assembly1", "5i55", "4zkk"};
static char g_tmp[64], g_in[128];

static uint8_t *read_all(const char *path, size_t *n) {
  uint8_t *b = mf_test_read_file(path, n);
  MF_ASSERT(b != NULL, "cannot read %s", path);
  return b;
}

static mf_prep_opts opts(const char *out, int threads, FILE *report) {
  mf_prep_opts o;
  memset(&o, 0, sizeof o);
  o.input = g_in;
  o.ccd_path = SHARED "/ccd/components_subset.cif.gz";
  o.msa_dir = SHARED "/msa";
  o.out = out;
  o.threads = threads;
  o.report = report;
  o.initial_map_size = 1 << 20; /* small: the runs grow the map */
  return o;
}

static char *slurp_report(FILE *f) {
  fflush(f);
  long n = ftell(f);
  char *s = calloc(1, (size_t)n + 1);
  rewind(f);
  if (n > 0 && fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = 0;
  rewind(f);
  MF_ASSERT(ftruncate(fileno(f), 0) == 0, "truncate report");
  return s;
}

/* Copies of every record of the cache at `dir`, in id order. */
typedef struct {
  int64_t n;
  char **ids;
  uint8_t **rec;
  size_t *len;
} snapshot;

static int snap(const char *dir, snapshot *s) {
  memset(s, 0, sizeof *s);
  mf_cache_opts ro = {.writable = 0};
  mf_cache *c;
  if (mf_cache_open(dir, &ro, &c) != MF_OK) {
    printf("  open %s: %s\n", dir, mf_error_message());
    return 0;
  }
  mf_cache_list(c, &s->ids, &s->n);
  s->rec = calloc((size_t)s->n + 1, sizeof *s->rec);
  s->len = calloc((size_t)s->n + 1, sizeof *s->len);
  mf_cache_reader *r;
  mf_cache_reader_open(c, &r);
  mf_cache_read_begin(r);
  int ok = 1;
  for (int64_t i = 0; i < s->n; i++) {
    const uint8_t *p;
    if (mf_cache_get(r, s->ids[i], &p, &s->len[i]) != MF_OK) {
      ok = 0;
      continue;
    }
    s->rec[i] = malloc(s->len[i]);
    memcpy(s->rec[i], p, s->len[i]);
  }
  mf_cache_read_end(r);
  mf_cache_reader_close(r);
  mf_cache_close(c);
  return ok;
}

static void snap_free(snapshot *s) {
  for (int64_t i = 0; i < s->n; i++) free(s->rec[i]);
  free(s->rec);
  free(s->len);
  mf_cache_list_free(s->ids, s->n);
}

static int snap_equal(const snapshot *a, const snapshot *b) {
  if (a->n != b->n) return 0;
  for (int64_t i = 0; i < a->n; i++)
    if (strcmp(a->ids[i], b->ids[i]) || a->len[i] != b->len[i] ||
        memcmp(a->rec[i], b->rec[i], a->len[i]))
      return 0;
  return 1;
}

int main(void) {
  mf_test_begin("test_prep");
  struct stat sb;
  if (stat(SHARED "/mmcif", &sb) != 0 || stat(SHARED "/ccd/components_subset.cif.gz", &sb) != 0) {
    printf("test_prep: %s/mmcif not found, skipping the prep tests\n", SHARED);
    return mf_test_end();
  }
  snprintf(g_tmp, sizeof g_tmp, "/tmp/mf_prep_XXXXXX");
  MF_ASSERT(mkdtemp(g_tmp) != NULL, "mkdtemp");
  snprintf(g_in, sizeof g_in, "%s/in", g_tmp);
  mkdir(g_in, 0775);
  char path[256], out[256], out1[256], out4[256], list[256];
  for (int i = 0; i < 4; i++) {
    size_t n;
    snprintf(path, sizeof path, SHARED "/mmcif/%s.cif.gz", ENTRIES[i]);
    uint8_t *b = read_all(path, &n);
    snprintf(path, sizeof path, "%s/%s.cif.gz", g_in, ENTRIES[i]);
    mf_test_write_file(path, b, n);
    free(b);
  }
  {
    size_t n;
    uint8_t *b = read_all(SHARED "/mmcif/1ubq.cif.gz", &n);
    snprintf(path, sizeof path, "%s/9bad.cif.gz", g_in);
    mf_test_write_file(path, b, n / 2); /* truncated gzip */
    free(b);
    snprintf(path, sizeof path, "%s/README.txt", g_in); /* not an mmCIF name: ignored */
    mf_test_write_file(path, "x", 1);
    snprintf(path, sizeof path, "%s/.hidden.cif", g_in); /* hidden: ignored */
    mf_test_write_file(path, "x", 1);
  }
  FILE *rep = tmpfile();
  snprintf(out, sizeof out, "%s/cache", g_tmp);

  /* first run */
  mf_prep_opts o = opts(out, 2, rep);
  mf_prep_summary s;
  mf_status st = mf_prep_run(&o, &s);
  char *msg = slurp_report(rep);
  MF_TEST(st == MF_OK && s.total == 5 && s.done == 4 && s.failed == 1 && s.skipped == 0 &&
              s.bytes_out > 0 && s.bytes_in > 0,
          "run 1: 5 inputs, 4 stored, 1 failed: %s; total %lld done %lld failed %lld",
          mf_error_message(), (long long)s.total, (long long)s.done, (long long)s.failed);
  MF_TEST(strstr(msg, "9bad.cif.gz: ") != NULL && strchr(msg, '\n') == strrchr(msg, '\n'),
          "the corrupt file is reported once, with its name and reason: %s", msg);
  free(msg);
  char line[512];
  mf_prep_summary_format(&s, line, sizeof line);
  printf("  run 1: %s\n", line);
  MF_TEST(strstr(line, "4 done, 0 skipped (already cached), 1 failed") != NULL, "summary line");

  {
    mf_cache_opts ro = {.writable = 0};
    mf_cache *c;
    mf_cache_meta m;
    memset(&m, 0, sizeof m);
    struct stat cs;
    stat(SHARED "/ccd/components_subset.cif.gz", &cs);
    if (mf_cache_open(out, &ro, &c) == MF_OK) {
      mf_cache_meta_get(c, &m);
      mf_cache_close(c);
    }
    MF_TEST(m.record_version == MF_FEATURES_VERSION && m.zstd_level == MF_FEATURES_ZSTD_DEFAULT &&
                m.with_msa == 1 && m.max_msa_rows == 0 && m.ccd_size == (uint64_t)cs.st_size &&
                m.schema_crc32 != 0 && m.schema_crc32 == mf_prep_schema_crc32(),
            "cache metadata: version, options, CCD size %llu, schema %08x",
            (unsigned long long)m.ccd_size, m.schema_crc32);
  }
  snapshot a;
  int ok = snap(out, &a);
  int all_decode = ok && a.n == 4;
  for (int64_t i = 0; all_decode && i < a.n; i++) {
    mf_feature_set fs;
    char where[320];
    snprintf(where, sizeof where, "%s:%s", out, a.ids[i]);
    all_decode &= mf_features_decode(a.rec[i], a.len[i], where, &fs) == MF_OK &&
                  !strcmp(fs.id, a.ids[i]) && fs.n > 0;
    mf_features_free(&fs);
  }
  MF_TEST(all_decode && !strcmp(a.ids[0], "1crn") && !strcmp(a.ids[1], "209d-assembly1") &&
              !strcmp(a.ids[2], "4zkk") && !strcmp(a.ids[3], "5i55"),
          "the 4 good entries are cached and decode: %lld records", (long long)a.n);

  /* the records equal featurising + encoding each file directly */
  {
    mf_ccd ccd;
    MF_ASSERT(mf_ccd_read(SHARED "/ccd/components_subset.cif.gz", &ccd) == MF_OK, "ccd");
    mf_featurize_opts fo = {.ccd = &ccd, .msa_dir = SHARED "/msa", .max_msa_rows = 0};
    int same = a.n == 4;
    for (int64_t i = 0; same && i < a.n; i++) {
      snprintf(path, sizeof path, "%s/%s.cif.gz", g_in, a.ids[i]);
      mf_feature_set fs;
      uint8_t *rec = NULL;
      size_t len = 0;
      same &= mf_featurize_file(path, &fo, &fs) == MF_OK &&
              mf_features_encode(&fs, 0, &rec, &len) == MF_OK && len == a.len[i] &&
              !memcmp(rec, a.rec[i], len);
      mf_free(rec);
      mf_features_free(&fs);
    }
    MF_TEST(same, "records equal a direct featurise + encode of each file");
    mf_ccd_free(&ccd);
  }

  /* second run: everything cached */
  st = mf_prep_run(&o, &s);
  msg = slurp_report(rep);
  MF_TEST(st == MF_OK && s.done == 0 && s.skipped == 4 && s.failed == 1,
          "run 2 skips the 4 cached entries, fails the bad one again: done %lld skipped %lld "
          "failed %lld",
          (long long)s.done, (long long)s.skipped, (long long)s.failed);
  free(msg);

  /* 1 thread and 4 threads: byte-identical records */
  snprintf(out1, sizeof out1, "%s/cache1", g_tmp);
  snprintf(out4, sizeof out4, "%s/cache4", g_tmp);
  mf_prep_opts o1 = opts(out1, 1, rep), o4 = opts(out4, 4, rep);
  mf_prep_summary s1, s4;
  mf_status st1 = mf_prep_run(&o1, &s1), st4 = mf_prep_run(&o4, &s4);
  free(slurp_report(rep));
  snapshot b1, b4;
  int ok1 = snap(out1, &b1), ok4 = snap(out4, &b4);
  MF_TEST(st1 == MF_OK && st4 == MF_OK && s1.done == 4 && s4.done == 4 && ok1 && ok4 &&
              snap_equal(&a, &b1) && snap_equal(&b1, &b4),
          "1 thread, 2 threads and 4 threads: byte-identical records (%lld, %lld)",
          (long long)b1.n, (long long)b4.n);
  snap_free(&b1);
  snap_free(&b4);
  /* records are stored in input order, so even the LMDB files are identical */
  {
    char f0[300], f1[300], f4[300];
    size_t n0, n1, n4;
    snprintf(f0, sizeof f0, "%s/data.mdb", out);
    snprintf(f1, sizeof f1, "%s/data.mdb", out1);
    snprintf(f4, sizeof f4, "%s/data.mdb", out4);
    uint8_t *d0 = read_all(f0, &n0), *d1 = read_all(f1, &n1), *d4 = read_all(f4, &n4);
    MF_TEST(n0 == n1 && n1 == n4 && !memcmp(d0, d1, n0) && !memcmp(d1, d4, n1),
            "data.mdb identical for 1, 2 and 4 threads (%zu, %zu, %zu bytes)", n0, n1, n4);
    free(d0);
    free(d1);
    free(d4);
  }

  /* list-file input: comments, blank lines, a duplicate id */
  snprintf(list, sizeof list, "%s/list.txt", g_tmp);
  {
    char text[1024];
    snprintf(text, sizeof text,
             "# two entries\n\n  %s/in/5i55.cif.gz  \n%s/in/1crn.cif.gz\r\n%s/in/1crn.cif.gz\n",
             g_tmp, g_tmp, g_tmp);
    mf_test_write_file(list, text, strlen(text));
  }
  char outl[256];
  snprintf(outl, sizeof outl, "%s/cachel", g_tmp);
  mf_prep_opts ol = opts(outl, 2, rep);
  ol.input = list;
  st = mf_prep_run(&ol, &s);
  msg = slurp_report(rep);
  MF_TEST(st == MF_OK && s.total == 3 && s.done == 2 && s.failed == 1 &&
              strstr(msg, "duplicate entry id '1crn'"),
          "list file: 2 stored, the repeated path reported as a duplicate id: %s", msg);
  free(msg);
  snapshot bl;
  MF_TEST(snap(outl, &bl) && bl.n == 2 && !strcmp(bl.ids[0], "1crn") &&
              bl.len[0] == a.len[0] && !memcmp(bl.rec[0], a.rec[0], a.len[0]),
          "list-file records equal the directory run's");
  snap_free(&bl);

  /* options and errors */
  mf_prep_opts bad = o;
  bad.zstd_level = 5;
  st = mf_prep_run(&bad, &s);
  char want_lvl[64];
  snprintf(want_lvl, sizeof want_lvl, "zstd_level is %d in the cache, 5", MF_FEATURES_ZSTD_DEFAULT);
  MF_TEST(st == MF_ERR_CONFIG && strstr(mf_error_message(), want_lvl),
          "other zstd level on an existing cache refused: %s", mf_error_message());
  bad = o;
  bad.msa_dir = NULL;
  st = mf_prep_run(&bad, &s);
  MF_TEST(st == MF_ERR_CONFIG && strstr(mf_error_message(), "with_msa"),
          "without MSAs on a cache built with them refused: %s", mf_error_message());
  bad = o;
  bad.threads = 0;
  MF_TEST(mf_prep_run(&bad, &s) == MF_ERR_CONFIG, "0 threads refused");
  bad = o;
  bad.zstd_level = 99;
  MF_TEST(mf_prep_run(&bad, &s) == MF_ERR_CONFIG, "zstd level 99 refused: %s",
          mf_error_message());
  bad = o;
  bad.input = "/nonexistent/dir";
  MF_TEST(mf_prep_run(&bad, &s) == MF_ERR_IO && strstr(mf_error_message(), "/nonexistent/dir"),
          "missing input named: %s", mf_error_message());
  bad = o;
  bad.ccd_path = "/nonexistent/ccd.cif";
  MF_TEST(mf_prep_run(&bad, &s) == MF_ERR_IO && strstr(mf_error_message(), "ccd.cif"),
          "missing CCD named: %s", mf_error_message());
  bad = o;
  bad.out = list; /* a file */
  MF_TEST(mf_prep_run(&bad, &s) == MF_ERR_IO && strstr(mf_error_message(), "not a directory"),
          "output that is a file refused: %s", mf_error_message());
  bad = o;
  bad.msa_dir = list;
  MF_TEST(mf_prep_run(&bad, &s) == MF_ERR_IO, "MSA path that is a file refused");
  char id[64];
  MF_TEST(mf_prep_entry_id("a/b/1abc.cif.gz", id, sizeof id) == MF_OK && !strcmp(id, "1abc") &&
              mf_prep_entry_id("x.cif", id, sizeof id) == MF_OK && !strcmp(id, "x") &&
              mf_prep_entry_id("d/.cif.gz", id, sizeof id) == MF_ERR_CONFIG,
          "entry ids from file names");

  snap_free(&a);
  fclose(rep);
  mf_test_rm_rf(g_tmp);
  return mf_test_end();
}
