/* loader.c — worker threads, the ring of slots, the per-epoch shuffle, bad-record skipping,
 * the work of one step (partial decode with per-worker buffers, plan, write) and the source
 * over the LMDB cache. See loader.h for the determinism contract.
 * Not here: cropping (crop.c), the GPU copy (ops/cuda/staging.cu). */
#define _POSIX_C_SOURCE 200809L
#include "data/loader.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/philox.h"

/* ------------------------------------------------------------------ the shuffle */

/* Keyed Feistel network on 2h bits (4 rounds, Philox round function), cycle-walked into
 * [0, n): a random-access permutation, no table, no lock. */
int64_t mf_loader_entry_at(uint64_t seed, uint64_t epoch, int64_t n, int64_t pos) {
  if (n <= 1) return 0;
  int h = 1;
  while (((uint64_t)1 << (2 * h)) < (uint64_t)n) h++;
  const uint64_t mask = ((uint64_t)1 << h) - 1;
  const uint64_t stream = mf_rng_stream(epoch, MF_RNG_CROP, 4095);
  uint64_t x = (uint64_t)pos;
  do {
    uint64_t L = x >> h, R = x & mask;
    for (uint64_t r = 0; r < 4; r++) {
      uint32_t w[4];
      uint64_t idx = (r << 40) | R;
      mf_philox_block(seed, stream, idx, w);
      uint64_t f = (((uint64_t)w[idx & 3] << 32) | w[(idx + 1) & 3]) & mask;
      uint64_t nl = R, nr = L ^ f;
      L = nl, R = nr;
    }
    x = (L << h) | R;
  } while (x >= (uint64_t)n);
  return (int64_t)x;
}

/* ------------------------------------------------------------------ the loader */

typedef enum { SLOT_FREE = 0, SLOT_BUSY, SLOT_READY, SLOT_HELD } slot_state;

typedef struct {
  slot_state state;
  uint64_t step;
  void *buf;
  mf_status status;       /* of the step written here */
  char err[256];          /* its message when status != MF_OK */
  mf_loader_example ex;
} slot;

typedef struct {
  mf_loader *L;
  int w;
} worker_arg;

struct mf_loader {
  mf_loader_config cfg;
  mf_loader_source src;
  mf_crop_layout lay;
  int K, W;
  slot *slots;
  pthread_t *threads;
  worker_arg *args;
  int n_started;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_ready;
  int stop;
  uint64_t next_claim, next_take;
  uint8_t *bad; /* (n) entries found bad; under mu */
  mf_loader_ws **ws; /* (W) per worker: reader and plan buffers */
  mf_loader_stats stats;
};

void mf_loader_config_default(mf_loader_config *c) {
  memset(c, 0, sizeof *c);
  c->workers = 4;
  c->slots = 4;
  c->max_skip = 64;
  mf_crop_config_default(&c->crop);
}

static const char *entry_name(const mf_loader *L, int64_t k, char *buf, size_t n) {
  const char *s = L->src.name ? L->src.name(L->src.ctx, k) : NULL;
  if (s) return s;
  snprintf(buf, n, "entry %lld", (long long)k);
  return buf;
}

/* ------------------------------------------------------------------ one example */

struct mf_loader_ws {
  mf_features_reader *rd;
  mf_crop_plan plan;
};

mf_status mf_loader_ws_create(mf_loader_ws **out) {
  *out = NULL;
  mf_loader_ws *ws = mf_calloc(sizeof *ws, "loader workspace");
  if (!ws) return MF_ERR_NOMEM;
  mf_status st = mf_features_reader_create(&ws->rd);
  if (st != MF_OK) {
    mf_free(ws);
    return st;
  }
  *out = ws;
  return MF_OK;
}

void mf_loader_ws_free(mf_loader_ws *ws) {
  if (!ws) return;
  mf_features_reader_free(ws->rd);
  mf_crop_plan_free(&ws->plan);
  mf_free(ws);
}

/* The features the crop plan reads whole (crop.h), when the entry has them. */
static int plan_reads(const char *name) {
  return !strcmp(name, MF_CROP_F_ASYM) || !strcmp(name, MF_CROP_F_ATOM_TOKEN) ||
         !strcmp(name, MF_CROP_F_CENTRE) || !strcmp(name, MF_CROP_F_POS) ||
         !strcmp(name, MF_CROP_F_RESOLVED);
}

/* Loads the rows of blocked feature i that the plan keeps along its first axis (every row
 * for a feature without a crop axis there), when the write reads it: a feature of the
 * layout, or one the ref_pos augmentation reads. */
static mf_status load_kept(mf_features_reader *rd, const mf_feature_set *fs,
                           const mf_crop_plan *p, const mf_crop_layout *lay, int i) {
  const mf_feature *f = &fs->f[i];
  if (!mf_crop_layout_find(lay, f->name) && strcmp(f->name, MF_CROP_F_REF_UID) &&
      strcmp(f->name, MF_CROP_F_REF_MASK))
    return MF_OK;
  char roles[MF_MAX_DIMS + 1];
  mf_crop_axes(f->name, roles, NULL, NULL, NULL, NULL);
  const int32_t *rows = NULL;
  int64_t n = 0;
  if (roles[0] == 'T' && f->shape[0] == p->N) rows = p->tok, n = p->n_tok;
  else if (roles[0] == 'A' && f->shape[0] == p->Na) rows = p->atom, n = p->n_atom;
  else if (roles[0] == 'S' && f->shape[0] == p->S) rows = p->msa, n = p->n_msa;
  return mf_features_reader_load_at(rd, i, rows, rows ? n : 0);
}

mf_status mf_loader_build_example(mf_loader_ws *ws, const uint8_t *rec, size_t len,
                                  const char *where, const mf_crop_config *cfg,
                                  const mf_crop_layout *lay, uint64_t seed, uint64_t step,
                                  void *buf, mf_loader_example *ex, mf_loader_times *tm) {
  double t0 = tm ? mf_time_now() : 0, t1 = 0, t2 = 0, t3 = 0;
  mf_feature_set fs;
  mf_status st = mf_features_reader_open(ws->rd, rec, len, where, &fs);
  for (int i = 0; st == MF_OK && i < fs.n; i++) /* plain features are there already */
    if (mf_features_reader_blocked(ws->rd, i) && plan_reads(fs.f[i].name))
      st = mf_features_reader_load_at(ws->rd, i, NULL, 0);
  if (tm) t1 = mf_time_now();
  if (st == MF_OK) st = mf_crop_plan_remake(&fs, cfg, seed, step, &ws->plan);
  if (tm) t2 = mf_time_now();
  /* the kept rows of what the write reads: the layout's features, and the augmentation's */
  for (int i = 0; st == MF_OK && i < fs.n; i++)
    if (mf_features_reader_blocked(ws->rd, i) && !plan_reads(fs.f[i].name))
      st = load_kept(ws->rd, &fs, &ws->plan, lay, i);
  if (tm) t3 = mf_time_now();
  if (st == MF_OK) st = mf_crop_write(&fs, &ws->plan, lay, buf);
  if (st == MF_OK && ex) {
    ex->crop = ws->plan.info;
    ex->n_tok = ws->plan.n_tok, ex->n_atom = ws->plan.n_atom, ex->n_msa = ws->plan.n_msa;
    snprintf(ex->id, sizeof ex->id, "%s", fs.id);
  }
  mf_features_free(&fs); /* a view: only zeroed */
  if (tm) {
    double t4 = mf_time_now();
    tm->decode = (t1 - t0) + (t3 - t2), tm->plan = t2 - t1, tm->write = t4 - t3;
  }
  return st;
}

/* Reads, decodes, crops entry k for step t into buf. *record_err = 1 when the error is a
 * property of the record (get's MF_ERR_FORMAT: no such record or not one; any error of
 * decode, plan or write except MF_ERR_NOMEM), 0 when the source or the machine failed
 * (the entry may be fine on another try). */
static mf_status build(mf_loader *L, int w, int64_t k, uint64_t t, void *buf,
                       mf_loader_example *ex, int *record_err) {
  const uint8_t *rec = NULL;
  size_t len = 0;
  char where[96], nb[32];
  snprintf(where, sizeof where, "%s", entry_name(L, k, nb, sizeof nb));
  mf_status st = L->src.get(L->src.ctx, w, k, &rec, &len);
  *record_err = st == MF_ERR_FORMAT;
  if (st == MF_OK) {
    st = mf_loader_build_example(L->ws[w], rec, len, where, &L->cfg.crop, &L->lay, L->cfg.seed,
                                 t, buf, ex, NULL);
    *record_err = st != MF_OK && st != MF_ERR_NOMEM;
  }
  if (L->src.release) L->src.release(L->src.ctx, w);
  return st;
}

/* Step t into slot s: entry at positions p, p+1, ... of the epoch's shuffle until one is good. */
static void produce(mf_loader *L, int w, uint64_t t, slot *s) {
  const int64_t n = L->src.n;
  const uint64_t epoch = t / (uint64_t)n;
  const int64_t pos = (int64_t)(t % (uint64_t)n);
  mf_loader_example *ex = &s->ex;
  memset(ex, 0, sizeof *ex);
  ex->step = t, ex->slot = (int)(s - L->slots), ex->data = s->buf, ex->layout = &L->lay;
  mf_status st = MF_ERR_FORMAT;
  int attempts = L->cfg.max_skip + 1;
  if (attempts > n) attempts = (int)n;
  s->err[0] = 0;
  for (int a = 0; a < attempts; a++) {
    int64_t k = mf_loader_entry_at(L->cfg.seed, epoch, n, (pos + a) % n);
    pthread_mutex_lock(&L->mu);
    int known_bad = L->bad[k];
    if (known_bad) L->stats.skips++;
    pthread_mutex_unlock(&L->mu);
    if (known_bad) {
      ex->skipped++;
      continue;
    }
    mf_error_clear();
    int record_err = 0;
    st = build(L, w, k, t, s->buf, ex, &record_err);
    if (st == MF_OK) {
      ex->entry = k;
      break;
    }
    if (!record_err) { /* the source or memory failed, not the record: fail the step only */
      snprintf(s->err, sizeof s->err, "loader step %llu: %s", (unsigned long long)t,
               mf_error_message());
      break;
    }
    char nb[32];
    pthread_mutex_lock(&L->mu);
    int first = !L->bad[k];
    L->bad[k] = 1;
    L->stats.skips++;
    if (first) L->stats.bad_entries++;
    pthread_mutex_unlock(&L->mu);
    if (first)
      MF_WARN("loader: skipping %s (%s): %s", entry_name(L, k, nb, sizeof nb),
              mf_status_name(st), mf_error_message());
    ex->skipped++;
  }
  if (st != MF_OK && !s->err[0])
    snprintf(s->err, sizeof s->err, "loader step %llu: no good entry among %d tried from "
             "position %lld of epoch %llu", (unsigned long long)t, attempts, (long long)pos,
             (unsigned long long)epoch);
  s->status = st;
}

static void *worker_main(void *arg) {
  worker_arg *wa = arg;
  mf_loader *L = wa->L;
  pthread_mutex_lock(&L->mu);
  for (;;) {
    while (!L->stop && L->slots[L->next_claim % (uint64_t)L->K].state != SLOT_FREE)
      pthread_cond_wait(&L->cv_work, &L->mu);
    if (L->stop) break;
    uint64_t t = L->next_claim++;
    slot *s = &L->slots[t % (uint64_t)L->K];
    s->state = SLOT_BUSY;
    s->step = t;
    pthread_mutex_unlock(&L->mu);
    produce(L, wa->w, t, s);
    pthread_mutex_lock(&L->mu);
    s->state = SLOT_READY;
    if (s->status == MF_OK) L->stats.produced++;
    else L->stats.failed_steps++;
    pthread_cond_broadcast(&L->cv_ready);
  }
  pthread_mutex_unlock(&L->mu);
  return NULL;
}

static void host_free(mf_loader *L, void *p) {
  if (!p) return;
  if (L->cfg.host.alloc) L->cfg.host.free(L->cfg.host.ctx, p);
  else mf_free(p);
}

void mf_loader_destroy(mf_loader *L) {
  if (!L) return;
  pthread_mutex_lock(&L->mu);
  L->stop = 1;
  pthread_cond_broadcast(&L->cv_work);
  pthread_cond_broadcast(&L->cv_ready);
  pthread_mutex_unlock(&L->mu);
  for (int i = 0; i < L->n_started; i++) pthread_join(L->threads[i], NULL);
  if (L->slots)
    for (int i = 0; i < L->K; i++) host_free(L, L->slots[i].buf);
  pthread_cond_destroy(&L->cv_work);
  pthread_cond_destroy(&L->cv_ready);
  pthread_mutex_destroy(&L->mu);
  mf_crop_layout_free(&L->lay);
  for (int i = 0; L->ws && i < L->W; i++) mf_loader_ws_free(L->ws[i]);
  mf_free(L->ws);
  mf_free(L->slots), mf_free(L->threads), mf_free(L->args), mf_free(L->bad);
  mf_free(L);
}

mf_status mf_loader_create(const mf_loader_config *cfg, const mf_loader_source *src,
                           mf_loader **out) {
  *out = NULL;
  if (!cfg || !src || cfg->workers < 1 || cfg->workers > 1024 || cfg->slots < 1 ||
      cfg->slots > 1 << 16 || cfg->max_skip < 0 || !src->get || src->n < 1 ||
      (cfg->host.alloc && !cfg->host.free))
    return mf_error_set(MF_ERR_CONFIG, "loader: need 1..1024 workers, >= 1 slots, "
                        "max_skip >= 0, a source with a get function and >= 1 entries");
  mf_loader *L = mf_calloc(sizeof *L, "loader");
  if (!L) return MF_ERR_NOMEM;
  L->cfg = *cfg, L->src = *src, L->K = cfg->slots, L->W = cfg->workers;
  L->cfg.layout_ref = NULL;
  pthread_mutex_init(&L->mu, NULL);
  pthread_cond_init(&L->cv_work, NULL);
  pthread_cond_init(&L->cv_ready, NULL);
  L->next_claim = L->next_take = cfg->first_step;
  mf_status st = mf_crop_layout_make(cfg->layout_ref, &cfg->crop, &L->lay);
  if (st != MF_OK) {
    mf_loader_destroy(L);
    return st;
  }
  L->slots = mf_calloc((size_t)L->K * sizeof *L->slots, "loader slots");
  L->threads = mf_calloc((size_t)L->W * sizeof *L->threads, "loader threads");
  L->args = mf_calloc((size_t)L->W * sizeof *L->args, "loader thread args");
  L->bad = mf_calloc((size_t)src->n, "loader bad entries");
  L->ws = mf_calloc((size_t)L->W * sizeof *L->ws, "loader workspaces");
  if (!L->slots || !L->threads || !L->args || !L->bad || !L->ws) {
    mf_loader_destroy(L);
    return MF_ERR_NOMEM;
  }
  for (int i = 0; i < L->W; i++) {
    st = mf_loader_ws_create(&L->ws[i]);
    if (st != MF_OK) {
      mf_loader_destroy(L);
      return st;
    }
  }
  for (int i = 0; i < L->K; i++) {
    void *b = cfg->host.alloc ? cfg->host.alloc(cfg->host.ctx, L->lay.total)
                              : mf_malloc(L->lay.total, "loader slot");
    if (!b) {
      mf_loader_destroy(L);
      return mf_error_set(MF_ERR_NOMEM, "loader: slot of %zu bytes: %s", L->lay.total,
                          mf_error_message());
    }
    L->slots[i].buf = b;
  }
  for (int i = 0; i < L->W; i++) {
    L->args[i] = (worker_arg){L, i};
    int rc = pthread_create(&L->threads[i], NULL, worker_main, &L->args[i]);
    if (rc != 0) {
      mf_loader_destroy(L);
      return mf_error_set(MF_ERR_RUNTIME, "loader: pthread_create failed (%s)", strerror(rc));
    }
    L->n_started++;
  }
  *out = L;
  return MF_OK;
}

mf_status mf_loader_next(mf_loader *L, mf_loader_example *ex) {
  double t0 = mf_time_now();
  pthread_mutex_lock(&L->mu);
  slot *s = &L->slots[L->next_take % (uint64_t)L->K];
  if (s->state == SLOT_HELD) { /* the consumer holds all K slots: nothing could ever come */
    pthread_mutex_unlock(&L->mu);
    return mf_error_set(MF_ERR_CONFIG, "loader: all %d slots are held; release one before "
                        "taking step %llu", L->K, (unsigned long long)L->next_take);
  }
  while (!L->stop && !(s->state == SLOT_READY && s->step == L->next_take))
    pthread_cond_wait(&L->cv_ready, &L->mu);
  L->stats.wait_s += mf_time_now() - t0;
  if (L->stop) {
    pthread_mutex_unlock(&L->mu);
    return mf_error_set(MF_ERR_RUNTIME, "loader: stopped");
  }
  L->next_take++;
  mf_status st = s->status;
  if (st == MF_OK) {
    s->state = SLOT_HELD;
    *ex = s->ex;
  } else {
    memset(ex, 0, sizeof *ex);
    ex->step = s->step, ex->slot = -1;
    s->state = SLOT_FREE;
    pthread_cond_broadcast(&L->cv_work);
  }
  char err[256];
  memcpy(err, s->err, sizeof err);
  pthread_mutex_unlock(&L->mu);
  if (st != MF_OK) return mf_error_set(st, "%s", err);
  return MF_OK;
}

void mf_loader_release(mf_loader *L, const mf_loader_example *ex) {
  if (!L || !ex || ex->slot < 0 || ex->slot >= L->K) return;
  pthread_mutex_lock(&L->mu);
  slot *s = &L->slots[ex->slot];
  if (s->state == SLOT_HELD && s->step == ex->step) {
    s->state = SLOT_FREE;
    pthread_cond_broadcast(&L->cv_work);
  }
  pthread_mutex_unlock(&L->mu);
}

const mf_crop_layout *mf_loader_layout(const mf_loader *L) { return &L->lay; }

mf_loader_stats mf_loader_get_stats(mf_loader *L) {
  pthread_mutex_lock(&L->mu);
  mf_loader_stats s = L->stats;
  pthread_mutex_unlock(&L->mu);
  return s;
}

int mf_loader_entry_bad(mf_loader *L, int64_t k) {
  if (k < 0 || k >= L->src.n) return 0;
  pthread_mutex_lock(&L->mu);
  int b = L->bad[k];
  pthread_mutex_unlock(&L->mu);
  return b;
}

/* ------------------------------------------------------------------ cache source */

typedef struct {
  mf_cache *cache;
  char **ids;
  int64_t n;
  int max_workers;
  mf_cache_reader **readers; /* (max_workers), each touched by its worker only */
} cache_src;

static mf_status cache_get(void *ctx, int w, int64_t k, const uint8_t **rec, size_t *len) {
  cache_src *c = ctx;
  if (w < 0 || w >= c->max_workers || k < 0 || k >= c->n)
    return mf_error_set(MF_ERR_CONFIG, "cache source: worker %d / entry %lld out of range", w,
                        (long long)k);
  if (!c->readers[w]) {
    mf_status st = mf_cache_reader_open(c->cache, &c->readers[w]);
    if (st != MF_OK) return st;
  }
  mf_status st = mf_cache_read_begin(c->readers[w]);
  if (st != MF_OK) return st;
  return mf_cache_get(c->readers[w], c->ids[k], rec, len);
}

static void cache_release(void *ctx, int w) {
  cache_src *c = ctx;
  if (w >= 0 && w < c->max_workers && c->readers[w]) mf_cache_read_end(c->readers[w]);
}

static const char *cache_name(void *ctx, int64_t k) {
  cache_src *c = ctx;
  return k >= 0 && k < c->n ? c->ids[k] : NULL;
}

mf_status mf_loader_cache_source(mf_cache *cache, int max_workers, mf_loader_source *src) {
  memset(src, 0, sizeof *src);
  if (!cache || max_workers < 1)
    return mf_error_set(MF_ERR_CONFIG, "cache source: need a cache and >= 1 workers");
  cache_src *c = mf_calloc(sizeof *c, "cache source");
  if (!c) return MF_ERR_NOMEM;
  c->cache = cache, c->max_workers = max_workers;
  c->readers = mf_calloc((size_t)max_workers * sizeof *c->readers, "cache source readers");
  mf_status st = c->readers ? mf_cache_list(cache, &c->ids, &c->n) : MF_ERR_NOMEM;
  if (st != MF_OK) {
    mf_free(c->readers), mf_free(c);
    return st;
  }
  src->n = c->n, src->ctx = c, src->get = cache_get, src->release = cache_release;
  src->name = cache_name;
  return MF_OK;
}

void mf_loader_cache_source_free(mf_loader_source *src) {
  if (!src || !src->ctx) return;
  cache_src *c = src->ctx;
  for (int i = 0; i < c->max_workers; i++) mf_cache_reader_close(c->readers[i]);
  mf_cache_list_free(c->ids, c->n);
  mf_free(c->readers), mf_free(c);
  memset(src, 0, sizeof *src);
}
