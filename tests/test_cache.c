/* test_cache.c — the LMDB feature cache (cache.h), in a mkdtemp directory: put/get/has,
 * zero-copy pointers, listing and counting, reopening read-only, many records forcing the
 * map to grow, concurrent readers while a writer grows the map, metadata stored and a
 * mismatch detected, a cache of an older record format refused, a killed writer leaving only whole records, and errors naming the
 * path and the id (a path that is a file, a missing cache, bad ids, misuse of readers).
 * Not here: the record codec (test_features.c), the prep driver (test_prep.c). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, kill */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "data/cache.h"
#include "harness.h"

static char g_tmp[64];

static void sub(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_tmp, name); }

/* A record of entry `id`: one u8 tensor of `bytes` pseudo-random (incompressible) bytes. */
static uint8_t *make_record(const char *id, int64_t bytes, uint32_t seed, size_t *len) {
  mf_feature_set fs;
  mf_features_init(&fs, id);
  uint8_t *p = mf_features_add(&fs, "blob", MF_U8, 1, &bytes, NULL);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < bytes; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (uint8_t)x;
  }
  uint8_t *rec = NULL;
  MF_ASSERT(mf_features_encode(&fs, 1, &rec, len) == MF_OK, "%s", mf_error_message());
  mf_features_free(&fs);
  return rec;
}

static const mf_cache_meta META = {MF_FEATURES_VERSION, 0, 3, 1, 12345, 0xdeadbeef, 0x1234};

static void test_basic(void) {
  char path[128];
  sub(path, sizeof path, "basic");
  mf_cache_opts o = {.writable = 1, .expect = &META};
  mf_cache *c = NULL;
  mf_status st = mf_cache_open(path, &o, &c);
  MF_TEST(st == MF_OK && c, "create %s: %s", path, mf_error_message());
  if (!c) return;
  const char *ids[3] = {"1crn", "102m", "7abc-assembly1"};
  uint8_t *recs[3];
  size_t lens[3];
  for (int i = 0; i < 3; i++) {
    recs[i] = make_record(ids[i], 1000 + 500 * i, (uint32_t)i, &lens[i]);
    MF_TEST(mf_cache_put(c, ids[i], recs[i], lens[i]) == MF_OK, "put %s: %s", ids[i],
            mf_error_message());
  }
  int present = -1;
  MF_TEST(mf_cache_has(c, "102m", &present) == MF_OK && present == 1, "has 102m");
  MF_TEST(mf_cache_has(c, "9zzz", &present) == MF_OK && present == 0, "has not 9zzz");
  int64_t n = -1;
  MF_TEST(mf_cache_count(c, &n) == MF_OK && n == 3, "count 3: %lld", (long long)n);
  char **list = NULL;
  MF_TEST(mf_cache_list(c, &list, &n) == MF_OK && n == 3 && !strcmp(list[0], "102m") &&
              !strcmp(list[1], "1crn") && !strcmp(list[2], "7abc-assembly1"),
          "list in byte order");
  mf_cache_list_free(list, n);

  mf_cache_reader *r = NULL;
  MF_TEST(mf_cache_reader_open(c, &r) == MF_OK, "reader");
  const uint8_t *p;
  size_t len;
  st = mf_cache_get(r, "1crn", &p, &len);
  MF_TEST(st == MF_ERR_CONFIG && strstr(mf_error_message(), "outside read_begin"),
          "get outside a snapshot refused: %s", mf_error_message());
  MF_TEST(mf_cache_read_begin(r) == MF_OK, "read_begin");
  MF_TEST(mf_cache_read_begin(r) == MF_ERR_CONFIG, "read_begin twice refused");
  int ok = 1;
  for (int i = 0; i < 3; i++) {
    ok &= mf_cache_get(r, ids[i], &p, &len) == MF_OK && len == lens[i] &&
          memcmp(p, recs[i], len) == 0;
  }
  MF_TEST(ok, "get returns the stored bytes");
  st = mf_cache_get(r, "9zzz", &p, &len);
  MF_TEST(st == MF_ERR_FORMAT && p == NULL && strstr(mf_error_message(), path) &&
              strstr(mf_error_message(), "no record '9zzz'"),
          "missing id names path and id: %s", mf_error_message());
  mf_feature_set fs;
  st = mf_cache_get_features(r, "102m", &fs);
  MF_TEST(st == MF_OK && fs.n == 1 && !strcmp(fs.id, "102m") && fs.f[0].shape[0] == 1500,
          "get_features decodes: %s", mf_error_message());
  mf_features_free(&fs);
  /* a record stored under the wrong id is caught */
  st = mf_cache_put(c, "wrong", recs[0], lens[0]);
  MF_TEST(st == MF_ERR_CONFIG && strstr(mf_error_message(), "open read"),
          "put from a thread holding a read refused: %s", mf_error_message());
  mf_cache_read_end(r);
  MF_TEST(mf_cache_put(c, "wrong", recs[0], lens[0]) == MF_OK, "put after read_end");
  mf_cache_read_begin(r);
  st = mf_cache_get_features(r, "wrong", &fs);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), ":wrong: the record holds entry "
                                                             "'1crn'"),
          "id mismatch detected: %s", mf_error_message());
  mf_cache_read_end(r);
  /* bad ids */
  char long_id[80];
  memset(long_id, 'a', 64);
  long_id[64] = 0;
  MF_TEST(mf_cache_put(c, long_id, recs[0], lens[0]) == MF_ERR_CONFIG &&
              strstr(mf_error_message(), path),
          "64-byte id refused: %s", mf_error_message());
  MF_TEST(mf_cache_put(c, "", recs[0], lens[0]) == MF_ERR_CONFIG, "empty id refused");
  mf_cache_reader_close(r);
  /* replace */
  MF_TEST(mf_cache_put(c, "1crn", recs[2], lens[2]) == MF_OK, "replace 1crn");
  mf_cache_meta m;
  MF_TEST(mf_cache_meta_get(c, &m) == MF_OK && !memcmp(&m, &META, sizeof m), "metadata stored");
  mf_cache_close(c);

  /* reopen read-only */
  mf_cache_opts ro = {.writable = 0, .expect = &META};
  st = mf_cache_open(path, &ro, &c);
  MF_TEST(st == MF_OK, "reopen read-only: %s", mf_error_message());
  if (st == MF_OK) {
    MF_TEST(mf_cache_count(c, &n) == MF_OK && n == 4, "4 records after reopen");
    mf_cache_reader_open(c, &r);
    mf_cache_read_begin(r);
    MF_TEST(mf_cache_get(r, "1crn", &p, &len) == MF_OK && len == lens[2] &&
                !memcmp(p, recs[2], len),
            "replaced record persisted");
    MF_TEST(mf_cache_get(r, "7abc-assembly1", &p, &len) == MF_OK && len == lens[2],
            "other record persisted");
    mf_cache_read_end(r);
    mf_cache_reader_close(r);
    st = mf_cache_put(c, "x", recs[0], lens[0]);
    MF_TEST(st == MF_ERR_CONFIG && strstr(mf_error_message(), "read-only"),
            "put on a read-only cache refused: %s", mf_error_message());
    mf_cache_close(c);
  }

  /* metadata mismatch */
  mf_cache_meta other = META;
  other.zstd_level = 9;
  mf_cache_opts mo = {.writable = 1, .expect = &other};
  c = NULL;
  st = mf_cache_open(path, &mo, &c);
  MF_TEST(st == MF_ERR_CONFIG && c == NULL && strstr(mf_error_message(), path) &&
              strstr(mf_error_message(), "zstd_level is 3 in the cache, 9 requested"),
          "metadata mismatch detected: %s", mf_error_message());
  other = META;
  other.ccd_crc32 = 1;
  st = mf_cache_open(path, &mo, &c);
  MF_TEST(st == MF_ERR_CONFIG && strstr(mf_error_message(), "ccd_crc32"),
          "CCD change detected: %s", mf_error_message());
  other = META;
  other.schema_crc32 = 0x1235;
  st = mf_cache_open(path, &mo, &c);
  MF_TEST(st == MF_ERR_CONFIG && strstr(mf_error_message(), "schema_crc32 is 00001234 in the "
                                                             "cache, 00001235"),
          "feature schema change detected: %s", mf_error_message());
  /* no expectation: opens, metadata readable */
  mf_cache_opts plain = {.writable = 0};
  st = mf_cache_open(path, &plain, &c);
  MF_TEST(st == MF_OK && mf_cache_meta_get(c, &m) == MF_OK && m.ccd_size == 12345,
          "open without expectation");
  mf_cache_close(c);
  for (int i = 0; i < 3; i++) mf_free(recs[i]);
}

static void test_errors(void) {
  char file[128], missing[128], emptydir[128];
  sub(file, sizeof file, "a_file");
  FILE *f = fopen(file, "w");
  fputs("not a cache\n", f);
  fclose(f);
  mf_cache *c = (mf_cache *)1;
  mf_cache_opts o = {.writable = 1, .expect = &META};
  mf_status st = mf_cache_open(file, &o, &c);
  MF_TEST(st == MF_ERR_IO && c == NULL && strstr(mf_error_message(), file) &&
              strstr(mf_error_message(), "not a directory"),
          "a path that is a file: %s", mf_error_message());
  sub(missing, sizeof missing, "missing/deeper");
  mf_cache_opts ro = {.writable = 0};
  st = mf_cache_open(missing, &ro, &c);
  MF_TEST(st == MF_ERR_IO && strstr(mf_error_message(), missing),
          "missing cache read-only: %s", mf_error_message());
  sub(emptydir, sizeof emptydir, "emptydir");
  mkdir(emptydir, 0775);
  st = mf_cache_open(emptydir, &ro, &c);
  MF_TEST(st == MF_ERR_IO && strstr(mf_error_message(), "no data.mdb"),
          "empty directory read-only: %s", mf_error_message());
  /* writable on a missing nested path creates it; no metadata without expect */
  mf_cache_opts w = {.writable = 1};
  st = mf_cache_open(missing, &w, &c);
  mf_cache_meta m;
  MF_TEST(st == MF_OK, "create nested path: %s", mf_error_message());
  if (st == MF_OK) {
    st = mf_cache_meta_get(c, &m);
    MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "no metadata"),
            "no metadata yet: %s", mf_error_message());
    mf_cache_close(c);
  }
  /* expect given later: metadata written then */
  st = mf_cache_open(missing, &o, &c);
  MF_TEST(st == MF_OK && mf_cache_meta_get(c, &m) == MF_OK && m.ccd_crc32 == 0xdeadbeef,
          "metadata added on a later open");
  mf_cache_close(c);
}

/* A cache whose metadata names an older record format is refused at open, saying why. */
static void test_old_version(void) {
  char path[128];
  sub(path, sizeof path, "oldver");
  mf_cache_meta old = META;
  old.record_version = MF_FEATURES_VERSION - 1;
  mf_cache_opts o = {.writable = 1, .expect = &old};
  mf_cache *c = NULL;
  MF_TEST(mf_cache_open(path, &o, &c) == MF_OK, "create a cache with version %u metadata: %s",
          old.record_version, mf_error_message());
  mf_cache_close(c);
  c = NULL;
  mf_status st = mf_cache_open(path, &(mf_cache_opts){0}, &c);
  MF_TEST(st == MF_ERR_CONFIG && !c && strstr(mf_error_message(), path) &&
              strstr(mf_error_message(), "format version") &&
              strstr(mf_error_message(), "rebuild"),
          "reopening it (no expectations) is refused: %s", mf_error_message());
  st = mf_cache_open(path, &(mf_cache_opts){.writable = 1, .expect = &META}, &c);
  MF_TEST(st == MF_ERR_CONFIG && !c && strstr(mf_error_message(), "rebuild"),
          "resuming prep into it is refused too: %s", mf_error_message());
}

static void test_growth(void) {
  char path[128];
  sub(path, sizeof path, "grow");
  mf_cache_opts o = {.writable = 1, .initial_map_size = 256 << 10, .expect = &META};
  mf_cache *c;
  mf_status st = mf_cache_open(path, &o, &c);
  MF_TEST(st == MF_OK, "open: %s", mf_error_message());
  if (st != MF_OK) return;
  size_t map0 = mf_cache_map_size(c);
  const int n = 300;
  int ok = 1;
  for (int i = 0; i < n; i++) {
    char id[16];
    snprintf(id, sizeof id, "e%04d", i);
    size_t len;
    uint8_t *rec = make_record(id, 4000 + 37 * i, (uint32_t)i, &len);
    st = mf_cache_put(c, id, rec, len);
    if (st != MF_OK && ok) printf("  put %s: %s\n", id, mf_error_message());
    ok &= st == MF_OK;
    mf_free(rec);
  }
  /* one record larger than the whole map */
  size_t biglen;
  uint8_t *big = make_record("big", 3 << 20, 77, &biglen);
  st = mf_cache_put(c, "big", big, biglen);
  size_t map1 = mf_cache_map_size(c);
  MF_TEST(ok && st == MF_OK && map1 > map0 && map1 >= biglen,
          "%d records + one of %zu bytes stored; map grew %zu → %zu bytes", n, biglen, map0, map1);
  mf_cache_close(c);
  mf_cache_opts ro = {.writable = 0, .expect = &META};
  st = mf_cache_open(path, &ro, &c);
  MF_TEST(st == MF_OK, "reopen: %s", mf_error_message());
  if (st != MF_OK) {
    mf_free(big);
    return;
  }
  mf_cache_reader *r;
  mf_cache_reader_open(c, &r);
  mf_cache_read_begin(r);
  ok = 1;
  for (int i = 0; i < n; i++) {
    char id[16];
    snprintf(id, sizeof id, "e%04d", i);
    size_t len;
    uint8_t *rec = make_record(id, 4000 + 37 * i, (uint32_t)i, &len);
    const uint8_t *p;
    size_t plen;
    ok &= mf_cache_get(r, id, &p, &plen) == MF_OK && plen == len && !memcmp(p, rec, len);
    mf_free(rec);
  }
  const uint8_t *p;
  size_t plen;
  ok &= mf_cache_get(r, "big", &p, &plen) == MF_OK && plen == biglen && !memcmp(p, big, plen);
  MF_TEST(ok, "all %d records read back after the growth", n + 1);
  mf_cache_read_end(r);
  mf_cache_reader_close(r);
  mf_cache_close(c);
  mf_free(big);
}

/* ------------------------------------------------------------------ concurrency */

typedef struct {
  mf_cache *c;
  int n_fixed;        /* records r0000.. present from the start */
  volatile int *stop; /* set by the writer when done */
  int64_t reads, bad, snapshots;
  char msg[256];
} reader_arg;

static void *reader_main(void *p) {
  reader_arg *a = p;
  mf_cache_reader *r;
  if (mf_cache_reader_open(a->c, &r) != MF_OK) {
    a->bad++;
    return NULL;
  }
  unsigned seed = (unsigned)(uintptr_t)p;
  while (!__atomic_load_n(a->stop, __ATOMIC_ACQUIRE) || a->snapshots < 5) {
    if (mf_cache_read_begin(r) != MF_OK) {
      a->bad++;
      snprintf(a->msg, sizeof a->msg, "%s", mf_error_message());
      break;
    }
    a->snapshots++;
    for (int k = 0; k < 8; k++) {
      seed = seed * 1103515245u + 12345u;
      char id[16];
      snprintf(id, sizeof id, "r%04d", (int)((seed >> 8) % (unsigned)a->n_fixed));
      mf_feature_set fs;
      mf_status st = mf_cache_get_features(r, id, &fs);
      a->reads++;
      if (st != MF_OK || fs.n != 1 || strcmp(fs.id, id)) {
        if (!a->bad) snprintf(a->msg, sizeof a->msg, "%s: %s", id, mf_error_message());
        a->bad++;
      }
      mf_features_free(&fs);
    }
    mf_cache_read_end(r);
  }
  mf_cache_reader_close(r);
  return NULL;
}

static void test_concurrent(void) {
  char path[128];
  sub(path, sizeof path, "conc");
  mf_cache_opts o = {.writable = 1, .initial_map_size = 512 << 10, .expect = &META};
  mf_cache *c;
  mf_status st = mf_cache_open(path, &o, &c);
  MF_TEST(st == MF_OK, "open: %s", mf_error_message());
  if (st != MF_OK) return;
  const int nfix = 40;
  for (int i = 0; i < nfix; i++) {
    char id[16];
    snprintf(id, sizeof id, "r%04d", i);
    size_t len;
    uint8_t *rec = make_record(id, 2000 + i, (uint32_t)i, &len);
    mf_cache_put(c, id, rec, len);
    mf_free(rec);
  }
  size_t map0 = mf_cache_map_size(c);
  volatile int stop = 0;
  enum { NR = 4 };
  reader_arg args[NR];
  pthread_t th[NR];
  for (int t = 0; t < NR; t++) {
    memset(&args[t], 0, sizeof args[t]);
    args[t].c = c;
    args[t].n_fixed = nfix;
    args[t].stop = &stop;
    pthread_create(&th[t], NULL, reader_main, &args[t]);
  }
  /* the writer keeps adding records, forcing growths while the readers read */
  int ok = 1;
  for (int i = 0; i < 200; i++) {
    char id[16];
    snprintf(id, sizeof id, "w%04d", i);
    size_t len;
    uint8_t *rec = make_record(id, 6000, (uint32_t)(1000 + i), &len);
    ok &= mf_cache_put(c, id, rec, len) == MF_OK;
    mf_free(rec);
  }
  __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
  int64_t reads = 0, bad = 0;
  for (int t = 0; t < NR; t++) {
    pthread_join(th[t], NULL);
    reads += args[t].reads;
    bad += args[t].bad;
    if (args[t].bad) printf("  reader %d: %s\n", t, args[t].msg);
  }
  size_t map1 = mf_cache_map_size(c);
  int64_t n = 0;
  mf_cache_count(c, &n);
  MF_TEST(ok && bad == 0 && reads > 0 && map1 > map0 && n == nfix + 200,
          "%d readers, %lld verified reads, 0 bad (%lld); 200 puts growing the map %zu → %zu",
          NR, (long long)reads, (long long)bad, map0, map1);
  mf_cache_close(c);
}

/* A writer killed at a random moment leaves only whole records. */
static void test_killed_writer(void) {
  char path[128];
  sub(path, sizeof path, "killed");
  int ready[2];
  MF_ASSERT(pipe(ready) == 0, "pipe");
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    mf_cache_opts o = {.writable = 1, .initial_map_size = 128 << 10, .expect = &META};
    mf_cache *c;
    if (mf_cache_open(path, &o, &c) != MF_OK) _exit(3);
    for (int i = 0;; i++) {
      char id[16];
      snprintf(id, sizeof id, "k%06d", i);
      size_t len;
      uint8_t *rec = make_record(id, 20000 + (i % 7) * 3000, (uint32_t)i, &len);
      mf_cache_put(c, id, rec, len);
      mf_free(rec);
      if (i == 5 && write(ready[1], "r", 1) != 1) _exit(4); /* some records are in */
    }
  }
  close(ready[1]);
  char b;
  MF_TEST(read(ready[0], &b, 1) == 1, "writer process started");
  close(ready[0]);
  struct timespec ts = {0, 100 * 1000 * 1000}; /* then kill it in the middle of its puts */
  nanosleep(&ts, NULL);
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  mf_cache_opts ro = {.writable = 0, .expect = &META};
  mf_cache *c;
  mf_status st = mf_cache_open(path, &ro, &c);
  MF_TEST(st == MF_OK, "reopen after kill: %s", mf_error_message());
  if (st != MF_OK) return;
  char **ids;
  int64_t n;
  mf_cache_list(c, &ids, &n);
  mf_cache_reader *r;
  mf_cache_reader_open(c, &r);
  mf_cache_read_begin(r);
  int64_t good = 0;
  for (int64_t i = 0; i < n; i++) {
    mf_feature_set fs;
    if (mf_cache_get_features(r, ids[i], &fs) == MF_OK) good++;
    mf_features_free(&fs);
  }
  int contiguous = 1;
  for (int64_t i = 0; i < n; i++) {
    char id[16];
    snprintf(id, sizeof id, "k%06d", (int)i);
    contiguous &= !strcmp(ids[i], id);
  }
  MF_TEST(WIFSIGNALED(status) && n > 0 && good == n && contiguous,
          "killed writer: %lld records, all whole and in order (%lld decode)", (long long)n,
          (long long)good);
  mf_cache_read_end(r);
  mf_cache_reader_close(r);
  mf_cache_list_free(ids, n);
  mf_cache_close(c);
}

/* Another process grows the map while this one has the cache open: reads and puts here
 * adopt the new size (MDB_MAP_RESIZED) and go on. */
static void test_other_process_grows(void) {
  char path[128];
  sub(path, sizeof path, "xproc");
  int go[2];
  MF_ASSERT(pipe(go) == 0, "pipe");
  pid_t pid = fork(); /* before this process opens the environment */
  if (pid == 0) {
    char b;
    close(go[1]);
    if (read(go[0], &b, 1) != 1) _exit(4);
    mf_cache_opts o = {.writable = 1, .initial_map_size = 256 << 10};
    mf_cache *c;
    if (mf_cache_open(path, &o, &c) != MF_OK) _exit(3);
    for (int i = 0; i < 60; i++) {
      char id[16];
      snprintf(id, sizeof id, "p%03d", i);
      size_t len;
      uint8_t *rec = make_record(id, 30000, (uint32_t)i, &len);
      if (mf_cache_put(c, id, rec, len) != MF_OK) _exit(5);
      mf_free(rec);
    }
    mf_cache_close(c);
    _exit(0);
  }
  close(go[0]);
  mf_cache_opts o = {.writable = 1, .initial_map_size = 256 << 10, .expect = &META};
  mf_cache *c;
  mf_status st = mf_cache_open(path, &o, &c);
  MF_TEST(st == MF_OK, "open: %s", mf_error_message());
  MF_ASSERT(write(go[1], "g", 1) == 1, "pipe write");
  close(go[1]);
  int status;
  waitpid(pid, &status, 0);
  MF_TEST(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child grew the map (exit %d)",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  if (st != MF_OK) return;
  mf_cache_reader *r;
  mf_cache_reader_open(c, &r);
  st = mf_cache_read_begin(r);
  const uint8_t *p = NULL;
  size_t len = 0, want;
  uint8_t *rec = make_record("p059", 30000, 59, &want);
  if (st == MF_OK) st = mf_cache_get(r, "p059", &p, &len);
  MF_TEST(st == MF_OK && len == want && !memcmp(p, rec, len),
          "read after another process grew the map: %s", mf_error_message());
  mf_cache_read_end(r);
  mf_cache_reader_close(r);
  st = mf_cache_put(c, "mine", rec, want);
  int64_t n = 0;
  mf_cache_count(c, &n);
  MF_TEST(st == MF_OK && n == 61 && mf_cache_map_size(c) > (256 << 10),
          "put after the growth: %s (%lld records)", mf_error_message(), (long long)n);
  mf_free(rec);
  mf_cache_close(c);
}

int main(void) {
  mf_test_begin("test_cache");
  snprintf(g_tmp, sizeof g_tmp, "/tmp/mf_cache_XXXXXX");
  MF_ASSERT(mkdtemp(g_tmp) != NULL, "mkdtemp");
  int64_t start = mf_mem_stats(MF_HOST).current;
  test_basic();
  test_errors();
  test_old_version();
  test_growth();
  test_killed_writer();
  test_other_process_grows();
  MF_TEST(mf_mem_stats(MF_HOST).current == start, "no mf_malloc bytes left: %lld",
          (long long)(mf_mem_stats(MF_HOST).current - start));
  /* last: mf_malloc's counters are not atomic, so threads allocating at once can make them
   * drift (LeakSanitizer still checks this part) */
  test_concurrent();
  mf_test_rm_rf(g_tmp);
  return mf_test_end();
}
