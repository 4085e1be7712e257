/* test_loader.c — the background loader (src/data/loader.c) and the per-step random
 * transforms it applies (src/data/crop.c): the epoch shuffle is a bijection; 1 and 8
 * workers give byte-identical examples for 50 steps, in step order, equal to cropping the
 * decoded entry directly; resuming at a later step gives the same bytes; a corrupt record
 * and a record that does not fit the layout are skipped, the same ones in every run, with
 * the step taking the next entry of the shuffle; shutdown with pending work and with a
 * slot still held; random rotations are orthonormal with det +1 and unbiased; MSA
 * subsampling keeps the query first, never repeats a row and draws the documented rows;
 * then the same through a real LMDB cache, and on real entries of ../shared/data
 * featurised and cached here (skipped with a message when the data is absent), where the
 * partial decode of mf_loader_build_example also equals a full decode + crop.
 * Entries are synthetic feature sets holding every MF_FEATURES feature (featurize.h). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data/cache.h"
#include "data/ccd.h"
#include "data/crop.h"
#include "data/featurize.h"
#include "core/philox.h"
#include "data/loader.h"
#include "harness.h"

#define DATA_DIR "../shared/data"

/* ------------------------------------------------------------------ synthetic entries */

static uint32_t hash32(uint64_t a, uint64_t b) {
  uint32_t w[4];
  uint32_t ctr[4] = {(uint32_t)a, (uint32_t)(a >> 32), (uint32_t)b, (uint32_t)(b >> 32)};
  uint32_t key[2] = {0x1234u, 0x5678u};
  mf_philox4x32_10(ctr, key, w);
  return w[0];
}

/* Entry `e`: C chains, N tokens with 1..4 atoms each, S MSA rows; every MF_FEATURES
 * feature present with its contract dtype and shape. */
static void synth_entry(int e, mf_feature_set *fs) {
  char id[32];
  snprintf(id, sizeof id, "syn%03d", e);
  mf_features_init(fs, id);
  const int64_t N = 6 + hash32(e, 1) % 70, S = 1 + hash32(e, 2) % 40;
  const int C = 1 + (int)(hash32(e, 3) % 4);
  int32_t *natom = malloc((size_t)N * sizeof *natom);
  int64_t Na = 0;
  for (int64_t i = 0; i < N; i++) natom[i] = 1 + (int32_t)(hash32(e, 100 + i) % 4), Na += natom[i];
  for (int r = 0;; r++) {
    const char *name = NULL;
    char roles[MF_MAX_DIMS + 1];
    mf_dtype dt;
    int nd;
    int64_t dims[MF_MAX_DIMS], shape[MF_MAX_DIMS];
#define ROW(nm, a, b, c, d) if (r == k++) name = #nm;
    int k = 0;
    MF_FEATURES(ROW)
#undef ROW
    if (!name) break;
    mf_crop_axes(name, roles, NULL, &dt, &nd, dims);
    int64_t numel = 1;
    for (int d = 0; d < nd; d++) {
      char ro = d < (int)strlen(roles) ? roles[d] : '.';
      shape[d] = ro == 'T' ? N : ro == 'A' ? Na : ro == 'S' ? S : dims[d];
      numel *= shape[d];
    }
    void *p = mf_features_add(fs, name, dt, nd, shape, NULL);
    MF_ASSERT(p, "add %s: %s", name, mf_error_message());
    for (int64_t i = 0; i < numel; i++) {
      uint32_t h = hash32((uint64_t)e << 8 | (uint64_t)r, (uint64_t)i);
      if (dt == MF_F32) ((float *)p)[i] = (float)(h % 2000) * 0.01f - 10.0f;
      else if (dt == MF_I32) ((int32_t *)p)[i] = (int32_t)(h % 1000);
      else if (dt == MF_U8) ((uint8_t *)p)[i] = (uint8_t)(h % 32);
    }
  }
  /* the features the cropper reads get consistent values */
  int32_t *asym = (int32_t *)mf_features_get(fs, "asym_id")->data;
  int32_t *cen = (int32_t *)mf_features_get(fs, "token_centre_atom")->data;
  int32_t *rep = (int32_t *)mf_features_get(fs, "token_rep_atom")->data;
  int32_t *a2t = (int32_t *)mf_features_get(fs, "atom_to_token")->data;
  int32_t *uid = (int32_t *)mf_features_get(fs, "ref_space_uid")->data;
  float *x = (float *)mf_features_get(fs, "coordinate")->data;
  uint8_t *xm = (uint8_t *)mf_features_get(fs, "coordinate_mask")->data;
  uint8_t *rm = (uint8_t *)mf_features_get(fs, "ref_mask")->data;
  int64_t a = 0;
  for (int64_t i = 0; i < N; i++) {
    asym[i] = (int32_t)(i * C / N);
    cen[i] = (int32_t)a;
    rep[i] = (int32_t)(a + natom[i] - 1);
    for (int j = 0; j < natom[i]; j++, a++) {
      a2t[a] = (int32_t)i;
      uid[a] = (int32_t)(i / 2); /* two tokens share a residue frame sometimes */
      xm[a] = (uint8_t)(hash32(e, 5000 + a) % 10 != 0);
      rm[a] = (uint8_t)(hash32(e, 9000 + a) % 8 != 0);
      double ang = 0.3 * (double)i;
      x[3 * a] = (float)(8 * cos(ang) + 30 * asym[i] * (e % 2) + j);
      x[3 * a + 1] = (float)(8 * sin(ang));
      x[3 * a + 2] = (float)(1.5 * (double)i);
    }
  }
  uint8_t *msa = (uint8_t *)mf_features_get(fs, "msa")->data;
  for (int64_t i = 0; i < S * N; i++) msa[i] = (uint8_t)(hash32(e, 20000 + i) % 32);
  free(natom);
}

/* ------------------------------------------------------------------ in-memory source */

typedef struct {
  int n;
  int delay; /* sleep 0..0.9 ms per get, varying with entry and worker: workers finish out of order */
  int io_fails; /* this many gets fail with MF_ERR_IO (a source out of readers), then all work */
  int missing;  /* entry whose get says "no such record" (MF_ERR_FORMAT); -1 = none */
  uint8_t **rec;
  size_t *len;
  char **names;
} mem_src;

static mf_status mem_get(void *ctx, int w, int64_t k, const uint8_t **rec, size_t *len) {
  mem_src *m = ctx;
  if (m->delay) {
    struct timespec ts = {0, (long)(hash32((uint64_t)k, (uint64_t)w) % 4) * 300000L};
    nanosleep(&ts, NULL);
  }
  *rec = NULL, *len = 0;
  if (m->io_fails > 0 && __atomic_fetch_sub(&m->io_fails, 1, __ATOMIC_SEQ_CST) > 0)
    return mf_error_set(MF_ERR_IO, "mem source: no reader slot for entry %lld", (long long)k);
  if (k == m->missing)
    return mf_error_set(MF_ERR_FORMAT, "mem source: no record '%s'", m->names[k]);
  *rec = m->rec[k];
  *len = m->len[k];
  return MF_OK;
}
static const char *mem_name(void *ctx, int64_t k) { return ((mem_src *)ctx)->names[k]; }

#define N_ENTRIES 20
#define CORRUPT 5   /* a flipped byte: checksum error */
#define MISFIT 12   /* a feature with another dtype: does not fit the layout */

static void mem_src_make(mem_src *m, mf_loader_source *src) {
  m->n = N_ENTRIES;
  m->delay = 0;
  m->io_fails = 0;
  m->missing = -1;
  m->rec = calloc(N_ENTRIES, sizeof *m->rec);
  m->len = calloc(N_ENTRIES, sizeof *m->len);
  m->names = calloc(N_ENTRIES, sizeof *m->names);
  for (int e = 0; e < N_ENTRIES; e++) {
    mf_feature_set fs;
    synth_entry(e, &fs);
    if (e == MISFIT) { /* replace restype by an f32 tensor */
      mf_feature_set f2;
      mf_features_init(&f2, fs.id);
      for (int i = 0; i < fs.n; i++) {
        const mf_feature *f = &fs.f[i];
        int rt = !strcmp(f->name, "restype");
        mf_features_add(&f2, f->name, rt ? MF_F32 : f->dtype, f->ndim, f->shape, rt ? NULL : f->data);
      }
      mf_features_free(&fs);
      fs = f2;
    }
    MF_ASSERT(mf_features_encode(&fs, 3, &m->rec[e], &m->len[e]) == MF_OK, "%s", mf_error_message());
    if (e == CORRUPT) m->rec[e][m->len[e] / 2] ^= 0x5a;
    m->names[e] = malloc(MF_FEAT_ID_MAX);
    snprintf(m->names[e], MF_FEAT_ID_MAX, "%s", fs.id);
    mf_features_free(&fs);
  }
  memset(src, 0, sizeof *src);
  src->n = N_ENTRIES, src->ctx = m, src->get = mem_get, src->name = mem_name;
}

static void mem_src_free(mem_src *m) {
  for (int e = 0; e < m->n; e++) mf_free(m->rec[e]), free(m->names[e]);
  free(m->rec), free(m->len), free(m->names);
}

static void small_config(mf_loader_config *c, int workers) {
  mf_loader_config_default(c);
  c->workers = workers;
  c->slots = 4;
  c->seed = 77;
  c->crop.crop_size = 32;
  c->crop.max_msa_rows = 16;
}

/* ------------------------------------------------------------------ pieces */

static void test_shuffle(void) {
  const int64_t ns[6] = {1, 2, 3, 7, 100, 1000};
  int ok = 1, differs = 0;
  for (int q = 0; q < 6; q++) {
    int64_t n = ns[q];
    uint8_t *seen = calloc((size_t)n, 1);
    for (int64_t p = 0; p < n; p++) {
      int64_t k = mf_loader_entry_at(9, 3, n, p);
      ok &= k >= 0 && k < n && !seen[k];
      if (k >= 0 && k < n) seen[k] = 1;
    }
    free(seen);
    if (n >= 7) {
      int same = 1, ident = 1;
      for (int64_t p = 0; p < n; p++) {
        same &= mf_loader_entry_at(9, 3, n, p) == mf_loader_entry_at(9, 4, n, p);
        ident &= mf_loader_entry_at(9, 3, n, p) == p;
      }
      differs += !same && !ident;
    }
  }
  MF_TEST(ok, "epoch shuffle is a permutation of [0, n)");
  MF_TEST(differs == 3, "epochs shuffle differently and not to the identity");
}

static void test_rotation(void) {
  int ok = 1;
  double mean[9] = {0};
  const int n = 4000;
  for (int i = 0; i < n; i++) {
    float R[9];
    mf_crop_random_rotation(5, mf_rng_stream((uint64_t)i, MF_RNG_AUGMENT, 0), 8 * (uint64_t)i, R);
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 3; b++) {
        double d = 0;
        for (int k = 0; k < 3; k++) d += (double)R[3 * a + k] * R[3 * b + k];
        ok &= fabs(d - (a == b)) < 1e-5;
      }
    double det = R[0] * ((double)R[4] * R[8] - (double)R[5] * R[7]) -
                 R[1] * ((double)R[3] * R[8] - (double)R[5] * R[6]) +
                 R[2] * ((double)R[3] * R[7] - (double)R[4] * R[6]);
    ok &= fabs(det - 1) < 1e-5;
    for (int k = 0; k < 9; k++) mean[k] += R[k] / n;
  }
  double mx = 0;
  for (int k = 0; k < 9; k++) mx = fmax(mx, fabs(mean[k]));
  MF_TEST(ok, "random rotations: R Rᵀ = I, det R = +1 (%d draws)", n);
  MF_TEST(mx < 0.05, "random rotations are unbiased: |E[R]| max %.4f (uniform: 0)", mx);
}

static int cmp_i32_test(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static void test_msa_rows(void) {
  int ok = 1, cap_ok = 1;
  int hist[41] = {0};
  int32_t rows[64];
  for (uint64_t s = 0; s < 4000; s++) {
    int64_t k = mf_crop_msa_rows(40, 64, 3, mf_rng_stream(s, MF_RNG_MSA, 0), rows);
    ok &= k >= 1 && k <= 40 && rows[0] == 0;
    for (int64_t i = 1; i < k; i++) ok &= rows[i] > rows[i - 1] && rows[i] < 40; /* distinct */
    if (k >= 1 && k <= 40) hist[k]++;
    int64_t kc = mf_crop_msa_rows(40, 7, 3, mf_rng_stream(s, MF_RNG_MSA, 0), rows);
    cap_ok &= kc >= 1 && kc <= 7 && rows[0] == 0;
  }
  int covered = 1;
  for (int k = 1; k <= 40; k++) covered &= hist[k] > 40 && hist[k] < 180; /* ~100 each */
  MF_TEST(ok, "MSA rows: query first, then ascending distinct rows (no duplicates)");
  MF_TEST(cap_ok, "MSA rows: capped at max_rows");
  MF_TEST(covered, "MSA rows: k ~ U{1..S} (every k seen ~1/S of the time)");
  MF_TEST(mf_crop_msa_rows(1, 5, 1, 2, rows) == 1 && rows[0] == 0, "one-row MSA keeps the query");
  MF_TEST(mf_crop_msa_rows(0, 5, 1, 2, rows) == 0, "empty MSA: no rows");
  /* the rows are those of the documented draw, a partial Fisher-Yates over a pool 1..S-1
   * (k = 1 + draw 0, then draw 1 + i picks pool[i + U[0, S-1-i)]), done here densely */
  int same = 1;
  static int32_t got[50000], pool[50000];
  static const int64_t Ss[5] = {2, 17, 600, 3000, 45887};
  for (int si = 0; si < 5; si++)
    for (uint64_t st = 0; st < 12; st++) {
      const int64_t S = Ss[si], cap = st % 3 == 0 ? 1024 : st % 3 == 1 ? 5 : 16384;
      const uint64_t stream = mf_rng_stream(st, MF_RNG_MSA, 0);
      uint32_t w[4];
      mf_philox_block(9, stream, 0, w);
      int64_t k = 1 + (int64_t)(((uint64_t)w[0] * (uint64_t)S) >> 32);
      if (k > cap) k = cap;
      for (int64_t i = 0; i < S - 1; i++) pool[i] = (int32_t)(i + 1);
      for (int64_t i = 0; i < k - 1; i++) {
        mf_philox_block(9, stream, 1 + (uint64_t)i, w);
        int64_t j = i + (int64_t)(((uint64_t)w[(1 + i) & 3] * (uint64_t)(S - 1 - i)) >> 32);
        int32_t t = pool[i];
        pool[i] = pool[j], pool[j] = t;
      }
      qsort(pool, (size_t)(k - 1), sizeof *pool, cmp_i32_test);
      int64_t kk = mf_crop_msa_rows(S, cap, 9, stream, got);
      same &= kk == k && got[0] == 0 && !memcmp(got + 1, pool, (size_t)(k - 1) * sizeof *pool);
    }
  MF_TEST(same, "MSA rows: the documented draw, row for row (S up to 45887, caps 5..16384)");
}

/* ------------------------------------------------------------------ the loader */

typedef struct {
  uint8_t *bytes; /* (steps, total) */
  int64_t entry[64];
  int skipped[64];
  size_t total;
} run_log;

static int run_loader(const mf_loader_source *src, int workers, uint64_t first, int steps,
                      run_log *log, int *order_ok) {
  mf_loader_config cfg;
  small_config(&cfg, workers);
  cfg.first_step = first;
  mf_loader *L;
  mf_status st = mf_loader_create(&cfg, src, &L);
  if (st != MF_OK) {
    MF_TEST(0, "loader_create: %s", mf_error_message());
    return 0;
  }
  log->total = mf_loader_layout(L)->total;
  log->bytes = malloc(log->total * (size_t)steps);
  *order_ok = 1;
  for (int i = 0; i < steps; i++) {
    mf_loader_example ex;
    st = mf_loader_next(L, &ex);
    if (st != MF_OK) {
      MF_TEST(0, "loader_next step %d: %s", i, mf_error_message());
      break;
    }
    *order_ok &= ex.step == first + (uint64_t)i;
    memcpy(log->bytes + log->total * (size_t)i, ex.data, log->total);
    log->entry[i] = ex.entry;
    log->skipped[i] = ex.skipped;
    mf_loader_release(L, &ex);
  }
  mf_loader_destroy(L);
  return 1;
}

static void test_loader_memory(void) {
  mem_src m;
  mf_loader_source src;
  mem_src_make(&m, &src);
  const int steps = 50;
  run_log a = {0}, b = {0}, c = {0};
  int oa, ob, oc;
  double t0 = mf_time_now();
  run_loader(&src, 1, 0, steps, &a, &oa);
  double t1 = mf_time_now();
  m.delay = 1;
  run_loader(&src, 8, 0, steps, &b, &ob);
  m.delay = 0;
  double t2 = mf_time_now();
  MF_TEST(oa && ob, "examples come in step order (1 and 8 workers, the 8 finishing out of order)");
  MF_TEST(a.total == b.total && !memcmp(a.bytes, b.bytes, a.total * steps) &&
              !memcmp(a.entry, b.entry, sizeof a.entry) && !memcmp(a.skipped, b.skipped, sizeof a.skipped),
          "1 and 8 workers: byte-identical examples for %d steps (%.2f s, %.2f s)", steps, t1 - t0,
          t2 - t1);

  /* the bad entries never appear; their steps take the next entry of the shuffle */
  int never = 1, skipped_total = 0, expect_ok = 1;
  for (int i = 0; i < steps; i++) {
    never &= a.entry[i] != CORRUPT && a.entry[i] != MISFIT;
    skipped_total += a.skipped[i];
    uint64_t t = (uint64_t)i;
    int64_t pos = (int64_t)(t % N_ENTRIES), want = -1;
    int sk = 0;
    for (int q = 0; q < N_ENTRIES; q++) {
      int64_t k = mf_loader_entry_at(77, t / N_ENTRIES, N_ENTRIES, (pos + q) % N_ENTRIES);
      if (k == CORRUPT || k == MISFIT) {
        sk++;
        continue;
      }
      want = k;
      break;
    }
    expect_ok &= want == a.entry[i] && sk == a.skipped[i];
  }
  MF_TEST(never && skipped_total >= 4, "corrupt and misfit records skipped (%d skips in %d steps)",
          skipped_total, steps);
  MF_TEST(expect_ok, "a skipped step takes the next good entry of the epoch's shuffle");

  /* each example equals cropping the decoded entry directly (a pure function of seed, step) */
  {
    mf_loader_config cfg;
    small_config(&cfg, 1);
    mf_crop_layout lay;
    mf_crop_layout_make(NULL, &cfg.crop, &lay);
    void *buf = malloc(lay.total);
    int same = lay.total == a.total;
    for (int i = 0; i < steps && same; i += 7) {
      mf_feature_set fs;
      mf_crop_plan p;
      same &= mf_features_decode(m.rec[a.entry[i]], m.len[a.entry[i]], "t", &fs) == MF_OK;
      same &= mf_crop_plan_make(&fs, &cfg.crop, cfg.seed, (uint64_t)i, &p) == MF_OK;
      same &= mf_crop_write(&fs, &p, &lay, buf) == MF_OK;
      same &= !memcmp(buf, a.bytes + a.total * (size_t)i, a.total);
      mf_crop_plan_free(&p);
      mf_features_free(&fs);
    }
    MF_TEST(same, "loader examples == crop of the decoded entry at (seed, step)");
    free(buf);
    mf_crop_layout_free(&lay);
  }

  /* resuming at step 20 gives steps 20.. byte for byte */
  run_loader(&src, 3, 20, 30, &c, &oc);
  MF_TEST(oc && !memcmp(c.bytes, a.bytes + a.total * 20, a.total * 30),
          "resume at step 20 (3 workers) == steps 20..49 of the first run");

  /* the examples vary: crops and augmentation differ from step to step */
  int distinct = 0;
  for (int i = 1; i < steps; i++) distinct += memcmp(a.bytes + a.total * (size_t)i,
                                                     a.bytes + a.total * (size_t)(i - 1), a.total) != 0;
  MF_TEST(distinct == steps - 1, "consecutive examples differ");
  free(a.bytes), free(b.bytes), free(c.bytes);

  /* statistics and the bad-entry record */
  {
    mf_loader_config cfg;
    small_config(&cfg, 2);
    mf_loader *L;
    MF_TEST(mf_loader_create(&cfg, &src, &L) == MF_OK, "loader_create");
    for (int i = 0; i < 2 * N_ENTRIES; i++) {
      mf_loader_example ex;
      if (mf_loader_next(L, &ex) == MF_OK) mf_loader_release(L, &ex);
    }
    mf_loader_stats s = mf_loader_get_stats(L);
    MF_TEST(mf_loader_entry_bad(L, CORRUPT) && mf_loader_entry_bad(L, MISFIT) &&
                !mf_loader_entry_bad(L, 0) && s.bad_entries == 2 && s.failed_steps == 0,
            "two bad entries recorded (%lld), no failed step", (long long)s.bad_entries);
    mf_loader_destroy(L);
  }

  /* shutdown: pending work, a held slot, destroy right after create */
  {
    mf_loader_config cfg;
    small_config(&cfg, 4);
    cfg.slots = 8;
    mf_loader *L;
    mf_loader_create(&cfg, &src, &L);
    mf_loader_example e1, e2;
    mf_status s1 = mf_loader_next(L, &e1), s2 = mf_loader_next(L, &e2);
    mf_loader_example held[8];
    int nh = 0;
    mf_status sh = MF_OK;
    for (; nh < 6 && sh == MF_OK; nh++) sh = mf_loader_next(L, &held[nh]); /* 2 + 6 = 8 held */
    mf_loader_example extra;
    mf_status s9 = mf_loader_next(L, &extra);
    MF_TEST(sh == MF_OK && s9 == MF_ERR_CONFIG, "all slots held: next is an error, not a hang (%s)",
            mf_error_message());
    for (int i = 0; i < nh; i++) mf_loader_release(L, &held[i]);
    mf_loader_release(L, &e1); /* e2 (step 1) stays held */
    mf_loader_example e3;
    MF_TEST(mf_loader_next(L, &e3) == MF_OK && e3.step == 8, "after releases the next step follows");
    mf_loader_release(L, &e3);
    double t0s = mf_time_now();
    mf_loader_destroy(L);
    MF_TEST(s1 == MF_OK && s2 == MF_OK && e2.step == 1 && mf_time_now() - t0s < 5,
            "destroy with a held slot and pending steps returns promptly");
    mf_status sc = mf_loader_create(&cfg, &src, &L);
    mf_loader_destroy(L);
    MF_TEST(sc == MF_OK, "create, then destroy at once (workers busy)");
  }

  /* bad configurations */
  {
    mf_loader_config cfg;
    small_config(&cfg, 0);
    mf_loader *L = (mf_loader *)&cfg;
    MF_TEST(mf_loader_create(&cfg, &src, &L) == MF_ERR_CONFIG && L == NULL, "0 workers rejected");
    small_config(&cfg, 2);
    cfg.crop.crop_size = 0;
    MF_TEST(mf_loader_create(&cfg, &src, &L) == MF_ERR_CONFIG, "crop size 0 rejected");
    mf_error_clear();
  }
  mem_src_free(&m);
}

/* Every entry bad: steps fail with a message, and the loader keeps going. */
static void test_all_bad(void) {
  mem_src m;
  mf_loader_source src;
  mem_src_make(&m, &src);
  for (int e = 0; e < N_ENTRIES; e++) m.rec[e][0] ^= 1; /* bad magic everywhere */
  mf_loader_config cfg;
  small_config(&cfg, 3);
  cfg.max_skip = 4;
  mf_loader *L;
  mf_loader_create(&cfg, &src, &L);
  mf_loader_example ex;
  mf_status s1 = mf_loader_next(L, &ex);
  int msg = strstr(mf_error_message(), "no good entry") != NULL;
  mf_status s2 = mf_loader_next(L, &ex);
  MF_TEST(s1 == MF_ERR_FORMAT && msg && s2 == MF_ERR_FORMAT && ex.step == 1,
          "no good entry: the step fails with a message, the next one follows");
  mf_loader_destroy(L);
  mf_error_clear();
  mem_src_free(&m);
}

/* A source failing transiently (MF_ERR_IO, e.g. LMDB out of reader slots) fails those
 * steps but marks no entry bad: the same entries serve later steps. A missing record
 * (MF_ERR_FORMAT from get) is a property of the entry and is marked bad. */
static void test_transient_source(void) {
  mem_src m;
  mf_loader_source src;
  mem_src_make(&m, &src);
  mf_loader_config cfg;
  small_config(&cfg, 1);
  m.io_fails = 3;
  mf_loader *L;
  MF_TEST(mf_loader_create(&cfg, &src, &L) == MF_OK, "loader_create");
  int fails = 0, io = 0, ok_after = 1;
  int64_t failed_entry[3] = {-1, -1, -1};
  for (int i = 0; i < 2 * N_ENTRIES; i++) {
    mf_loader_example ex;
    mf_status st = mf_loader_next(L, &ex);
    if (st != MF_OK) {
      io += st == MF_ERR_IO && strstr(mf_error_message(), "no reader slot") != NULL;
      if (fails < 3) failed_entry[fails] = mf_loader_entry_at(77, 0, N_ENTRIES, i % N_ENTRIES);
      fails++;
      continue;
    }
    mf_loader_release(L, &ex);
  }
  int none_bad = 1;
  for (int f = 0; f < 3; f++) none_bad &= failed_entry[f] >= 0 && !mf_loader_entry_bad(L, failed_entry[f]);
  mf_loader_stats s = mf_loader_get_stats(L);
  MF_TEST(fails == 3 && io == 3 && s.failed_steps == 3,
          "transient source errors fail their steps with the source's message (%d, %d)", fails, io);
  MF_TEST(none_bad && s.bad_entries == 2 && !mf_loader_entry_bad(L, 0),
          "a transient source error marks no entry bad (%lld bad)", (long long)s.bad_entries);
  /* those entries are served in the next epoch */
  for (int i = 0; i < N_ENTRIES; i++) {
    mf_loader_example ex;
    if (mf_loader_next(L, &ex) != MF_OK) continue;
    for (int f = 0; f < 3; f++) if (ex.entry == failed_entry[f]) ok_after++;
    mf_loader_release(L, &ex);
  }
  MF_TEST(ok_after == 4, "the entries of the failed steps give examples later");
  mf_loader_destroy(L);

  m.missing = 3;
  MF_TEST(mf_loader_create(&cfg, &src, &L) == MF_OK, "loader_create");
  for (int i = 0; i < N_ENTRIES; i++) {
    mf_loader_example ex;
    if (mf_loader_next(L, &ex) == MF_OK) mf_loader_release(L, &ex);
  }
  s = mf_loader_get_stats(L);
  MF_TEST(mf_loader_entry_bad(L, 3) && s.bad_entries == 3 && s.failed_steps == 0,
          "a missing record is marked bad and skipped");
  mf_loader_destroy(L);
  mf_error_clear();
  mem_src_free(&m);
}

/* ------------------------------------------------------------------ LMDB cache */

static void rm_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  char p[512];
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

static void loader_on_cache(const char *dir, int64_t expect_n, const char *what) {
  mf_cache *c;
  mf_cache_opts o = {0};
  if (mf_cache_open(dir, &o, &c) != MF_OK) {
    MF_TEST(0, "%s: open cache: %s", what, mf_error_message());
    return;
  }
  mf_loader_source src;
  MF_TEST(mf_loader_cache_source(c, 8, &src) == MF_OK && src.n == expect_n, "%s: cache source lists %lld entries",
          what, (long long)expect_n);
  run_log a = {0}, b = {0};
  int oa, ob;
  const int steps = 30;
  double t0 = mf_time_now();
  run_loader(&src, 1, 0, steps, &a, &oa);
  double t1 = mf_time_now();
  run_loader(&src, 8, 0, steps, &b, &ob);
  double t2 = mf_time_now();
  MF_TEST(oa && ob && a.total == b.total && !memcmp(a.bytes, b.bytes, a.total * steps) &&
              !memcmp(a.entry, b.entry, sizeof a.entry),
          "%s: 1 and 8 workers byte-identical for %d steps (%.2f s, %.2f s)", what, steps,
          t1 - t0, t2 - t1);
  free(a.bytes), free(b.bytes);
  mf_loader_cache_source_free(&src);
  mf_cache_close(c);
}

/* A new writable cache at <dir>/cache (path), in the temporary directory that mkdtemp
 * makes of the template dir, its map starting at map_size bytes. */
static mf_cache *new_cache(char *dir, char *path, size_t path_size, size_t map_size) {
  MF_ASSERT(mkdtemp(dir), "mkdtemp");
  snprintf(path, path_size, "%s/cache", dir);
  mf_cache *c;
  mf_cache_opts o = {0};
  o.writable = 1;
  o.initial_map_size = map_size;
  MF_ASSERT(mf_cache_open(path, &o, &c) == MF_OK, "%s", mf_error_message());
  return c;
}

static void test_cache_synthetic(void) {
  char dir[] = "/tmp/mf_loader_XXXXXX";
  char path[600];
  mf_cache *c = new_cache(dir, path, sizeof path, 16u << 20);
  mem_src m;
  mf_loader_source ms;
  mem_src_make(&m, &ms);
  for (int e = 0; e < N_ENTRIES; e++) mf_cache_put(c, m.names[e], m.rec[e], m.len[e]);
  mf_cache_close(c);
  loader_on_cache(path, N_ENTRIES, "synthetic LMDB cache");
  /* the bad entries are skipped through the cache too */
  {
    MF_ASSERT(mf_cache_open(path, &(mf_cache_opts){0}, &c) == MF_OK, "%s", mf_error_message());
    mf_loader_source src;
    mf_loader_cache_source(c, 2, &src);
    mf_loader_config cfg;
    small_config(&cfg, 2);
    mf_loader *L;
    mf_loader_create(&cfg, &src, &L);
    int ok = 1;
    for (int i = 0; i < 2 * N_ENTRIES; i++) {
      mf_loader_example ex;
      ok &= mf_loader_next(L, &ex) == MF_OK;
      ok &= strcmp(ex.id, m.names[CORRUPT]) != 0 && strcmp(ex.id, m.names[MISFIT]) != 0;
      mf_loader_release(L, &ex);
    }
    mf_loader_stats s = mf_loader_get_stats(L);
    MF_TEST(ok && s.bad_entries == 2, "cache: 2 epochs, the corrupt and misfit records skipped");
    mf_loader_destroy(L);
    mf_loader_cache_source_free(&src);
    mf_cache_close(c);
  }
  mem_src_free(&m);
  rm_tree(path);
  rmdir(dir);
}

/* ------------------------------------------------------------------ real entries */

static void test_real(void) {
  char ccd_path[256], mm[256], msa[256];
  snprintf(ccd_path, sizeof ccd_path, "%s/ccd/components_subset.cif.gz", DATA_DIR);
  snprintf(mm, sizeof mm, "%s/mmcif", DATA_DIR);
  snprintf(msa, sizeof msa, "%s/msa", DATA_DIR);
  struct stat sb;
  if (stat(ccd_path, &sb) != 0 || stat(mm, &sb) != 0) {
    printf("test_loader: %s absent, real-data part skipped\n", DATA_DIR);
    return;
  }
  mf_ccd ccd;
  if (mf_ccd_read(ccd_path, &ccd) != MF_OK) {
    MF_TEST(0, "CCD: %s", mf_error_message());
    return;
  }
  /* a few entries: monomers, a heterodimer, DNA, ligands, a deep MSA */
  static const char *ids[] = {"1crn", "1ay7", "1bna", "1cbs", "1a7g", "102m", "1aki", "1fez-assembly1",
                              "7zzx" /* 8340 MSA rows: row-block frames */};
  char dir[] = "/tmp/mf_loader_real_XXXXXX";
  char path[600];
  mf_cache *c = new_cache(dir, path, sizeof path, 64u << 20);
  mf_featurize_opts fo = {&ccd, msa, 0};
  int64_t stored = 0;
  int shapes_ok = 1;
  mf_crop_config cc;
  mf_crop_config_default(&cc);
  cc.crop_size = 64;
  cc.max_msa_rows = 32;
  int with_iface = 0;
  for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
    char file[512];
    snprintf(file, sizeof file, "%s/%s.cif.gz", mm, ids[i]);
    if (stat(file, &sb) != 0) continue;
    mf_feature_set fs;
    if (mf_featurize_file(file, &fo, &fs) != MF_OK) {
      MF_TEST(0, "featurise %s: %s", ids[i], mf_error_message());
      continue;
    }
    /* crop invariants on the real entry, several steps */
    for (uint64_t t = 0; t < 6; t++) {
      mf_crop_plan p;
      mf_feature_set out;
      if (mf_crop_plan_make(&fs, &cc, 5, t, &p) != MF_OK || mf_crop_apply(&fs, &p, NULL, &out) != MF_OK) {
        MF_TEST(0, "crop %s: %s", ids[i], mf_error_message());
        break;
      }
      with_iface += p.info.used == MF_CROP_INTERFACE;
      const mf_feature *a2t = mf_features_get(&out, "atom_to_token");
      const mf_feature *cen = mf_features_get(&out, "token_centre_atom");
      const mf_feature *co = mf_features_get(&out, "coordinate");
      const mf_feature *co0 = mf_features_get(&fs, "coordinate");
      int ok = p.n_tok == (p.N < 64 ? p.N : 64) && a2t && a2t->shape[0] == p.n_atom;
      for (int64_t k = 0; ok && k < p.n_atom; k++) {
        int32_t tk = ((int32_t *)a2t->data)[k];
        ok &= tk >= 0 && tk < p.n_tok && (k == 0 || tk >= ((int32_t *)a2t->data)[k - 1]);
        ok &= !memcmp((float *)co->data + 3 * k, (float *)co0->data + 3 * (int64_t)p.atom[k], 12);
      }
      for (int64_t k = 0; ok && k < p.n_tok; k++) {
        int32_t ca = ((int32_t *)cen->data)[k];
        ok &= ca == -1 || (ca >= 0 && ca < p.n_atom && ((int32_t *)a2t->data)[ca] == k);
      }
      shapes_ok &= ok;
      if (!ok) MF_TEST(0, "%s step %llu: cropped entry inconsistent", ids[i], (unsigned long long)t);
      mf_features_free(&out);
      mf_crop_plan_free(&p);
    }
    uint8_t *rec;
    size_t len;
    if (mf_features_encode(&fs, 3, &rec, &len) == MF_OK && mf_cache_put(c, ids[i], rec, len) == MF_OK)
      stored++;
    mf_free(rec);
    mf_features_free(&fs);
  }
  mf_cache_close(c);
  MF_TEST(shapes_ok && stored >= 6, "real entries: %lld featurised, cropped consistently", (long long)stored);
  MF_TEST(with_iface > 0, "real entries: some spatial-interface crops happened (%d)", with_iface);
  loader_on_cache(path, stored, "real-entry LMDB cache");
  /* the partial decode of mf_loader_build_example (one workspace reused across entries and
   * steps, only the kept rows of the blocked MSA / token-pair tensors decompressed) gives
   * the bytes of a full decode + plan + write, at small and at benchmark sizes */
  {
    mf_cache *c2;
    MF_ASSERT(mf_cache_open(path, &(mf_cache_opts){0}, &c2) == MF_OK, "%s", mf_error_message());
    mf_cache_reader *rd;
    mf_loader_ws *ws;
    MF_ASSERT(mf_cache_reader_open(c2, &rd) == MF_OK && mf_loader_ws_create(&ws) == MF_OK, "ws");
    int same = 1, n_cmp = 0;
    for (int size = 0; size < 2; size++) {
      mf_crop_config cz;
      mf_crop_config_default(&cz);
      cz.crop_size = size ? 384 : 64, cz.max_msa_rows = size ? 1024 : 32;
      mf_crop_layout lay;
      MF_ASSERT(mf_crop_layout_make(NULL, &cz, &lay) == MF_OK, "layout");
      uint8_t *b1 = malloc(lay.total), *b2 = malloc(lay.total);
      for (uint64_t t = 0; t < 24; t++) {
        const char *id = ids[t % (sizeof ids / sizeof ids[0])];
        const uint8_t *rec;
        size_t len;
        MF_ASSERT(mf_cache_read_begin(rd) == MF_OK, "read");
        if (mf_cache_get(rd, id, &rec, &len) != MF_OK) {
          mf_cache_read_end(rd);
          continue;
        }
        mf_loader_example ex;
        memset(b1, 0xa5, lay.total); /* every byte must be written */
        same &= mf_loader_build_example(ws, rec, len, id, &cz, &lay, 9, t, b1, &ex, NULL) == MF_OK;
        mf_feature_set fs;
        mf_crop_plan p;
        same &= mf_features_decode(rec, len, id, &fs) == MF_OK;
        same &= mf_crop_plan_make(&fs, &cz, 9, t, &p) == MF_OK;
        same &= mf_crop_write(&fs, &p, &lay, b2) == MF_OK;
        same &= !memcmp(b1, b2, lay.total) && ex.n_tok == p.n_tok && ex.n_msa == p.n_msa &&
                !strcmp(ex.id, id);
        mf_crop_plan_free(&p);
        mf_features_free(&fs);
        mf_cache_read_end(rd);
        n_cmp++;
      }
      free(b1), free(b2);
      mf_crop_layout_free(&lay);
    }
    MF_TEST(same && n_cmp >= 12, "mf_loader_build_example == decode + plan + write on %d real "
            "(entry, step) pairs, one reused workspace", n_cmp);
    mf_loader_ws_free(ws);
    mf_cache_reader_close(rd);
    mf_cache_close(c2);
  }
  /* at training sizes (crop 384, up to 16384 MSA rows): the step is still exact, and the
   * time per example is printed (information, not a check) */
  {
    mf_cache *c2;
    MF_ASSERT(mf_cache_open(path, &(mf_cache_opts){0}, &c2) == MF_OK, "%s", mf_error_message());
    mf_loader_source src;
    mf_loader_cache_source(c2, 2, &src);
    mf_loader_config cfg;
    mf_loader_config_default(&cfg);
    cfg.workers = 2;
    cfg.seed = 3;
    mf_loader *L;
    MF_TEST(mf_loader_create(&cfg, &src, &L) == MF_OK, "loader at training sizes: %s", mf_error_message());
    const int steps = 16;
    double t0 = mf_time_now();
    int ok = 1;
    for (int i = 0; i < steps && L; i++) {
      mf_loader_example ex;
      ok &= mf_loader_next(L, &ex) == MF_OK && ex.n_tok <= 384 && ex.n_tok >= 1;
      mf_loader_release(L, &ex);
    }
    double dt = mf_time_now() - t0;
    if (L) {
      mf_loader_stats s = mf_loader_get_stats(L);
      printf("test_loader: training sizes (crop 384, 16384 MSA rows, slot %.1f MB): %.1f ms per "
             "example with 2 workers, consumer waited %.0f%% of the time\n",
             (double)mf_loader_layout(L)->total / 1e6, 1e3 * dt / steps, 100 * s.wait_s / dt);
    }
    MF_TEST(ok, "loader at training sizes: %d steps", steps);
    mf_loader_destroy(L);
    mf_loader_cache_source_free(&src);
    mf_cache_close(c2);
  }
  rm_tree(path);
  rmdir(dir);
  mf_ccd_free(&ccd);
}

int main(void) {
  mf_test_begin("test_loader");
  mf_log_set_level(MF_LOG_ERROR); /* the skipped-record warnings are expected */
  test_shuffle();
  test_rotation();
  test_msa_rows();
  test_loader_memory();
  test_all_bad();
  test_transient_source();
  test_cache_synthetic();
  test_real();
  return mf_test_end();
}
