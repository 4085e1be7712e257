/* cache.c — the feature cache on LMDB (see cache.h): environment open/create with a
 * growing memory map, per-record write transactions, zero-copy readers, and the
 * metadata record. Not here: the record format (features.c), the prep driver (prep.c).
 *
 * Layout: two named databases in one environment (MDB_NOTLS, so a reader's transaction is
 * tied to the reader object, not to a thread-local slot):
 *   "records"  id (bytes, no NUL) → feature record
 *   "meta"     "meta" → the metadata as text lines "key=value" in a fixed order
 * Map growth (mdb_env_set_mapsize) needs every transaction of this process closed: a thread
 * with any transaction open on a cache holds `map_lock` shared (taken when its count of open
 * transactions on that cache goes 0 → 1, released at 1 → 0, so nested short reads inside an
 * open snapshot never lock twice), a growth takes it exclusive. The lock prefers writers,
 * so a steady stream of overlapping readers cannot starve a growth. */
#define _GNU_SOURCE /* pthread_rwlockattr_setkind_np: a writer-preferring lock */
#include "data/cache.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <lmdb.h>

#define DEFAULT_MAP ((size_t)1 << 30)
#define MAX_MAP ((size_t)1 << 43) /* 8 TiB: growth stops here */
#define META_KEY "meta"
#define MF_CACHE_MAX_READERS 8192 /* LMDB reader slots: one per reader (thread) of every process */
#define MF_MDB_TOO_MANY_CACHES (-31000) /* not an LMDB code: gate_enter failed */

struct mf_cache {
  char path[4096];
  MDB_env *env;
  MDB_dbi db_rec, db_meta;
  int writable;
  pthread_rwlock_t map_lock; /* shared: a transaction is open; exclusive: map resize */
  pthread_mutex_t write_mu;  /* serialises puts and reader bookkeeping */
  int n_readers;
};

struct mf_cache_reader {
  mf_cache *c;
  MDB_txn *txn; /* NULL until the first begin; reset (not freed) between reads */
  int active;
};

/* Per thread: how many transactions it has open on each cache (a few caches at most). */
#define HELD_SLOTS 8
typedef struct {
  const mf_cache *c;
  int n;
} held_slot;
static _Thread_local held_slot t_held[HELD_SLOTS];

static int held_count(const mf_cache *c) {
  for (int i = 0; i < HELD_SLOTS; i++)
    if (t_held[i].c == c) return t_held[i].n;
  return 0;
}

/* Counts one more open transaction of this thread on c, taking map_lock shared on the
 * first. -1 when the thread has transactions open on too many caches. */
static int gate_enter(mf_cache *c) {
  held_slot *s = NULL;
  for (int i = 0; i < HELD_SLOTS && !s; i++)
    if (t_held[i].c == c) s = &t_held[i];
  for (int i = 0; i < HELD_SLOTS && !s; i++)
    if (t_held[i].c == NULL) s = &t_held[i];
  if (!s) return -1;
  if (s->n == 0) {
    pthread_rwlock_rdlock(&c->map_lock);
    s->c = c;
  }
  s->n++;
  return 0;
}

static void gate_leave(mf_cache *c) {
  for (int i = 0; i < HELD_SLOTS; i++)
    if (t_held[i].c == c) {
      if (--t_held[i].n == 0) {
        t_held[i].c = NULL;
        pthread_rwlock_unlock(&c->map_lock);
      }
      return;
    }
  MF_ASSERT(0, "cache %s: gate_leave without gate_enter", c->path);
}

static mf_status lmdb_error(const mf_cache *c, int rc, const char *what, const char *id) {
  if (rc == MF_MDB_TOO_MANY_CACHES)
    return mf_error_set(MF_ERR_CONFIG, "cache %s: %s%s%s: this thread has transactions open on "
                        "%d other caches", c->path, what, id ? " " : "", id ? id : "",
                        HELD_SLOTS);
  if (rc == MDB_READERS_FULL)
    return mf_error_set(MF_ERR_IO, "cache %s: %s: all %d LMDB reader slots are in use (more "
                        "reader threads/processes on this cache than MF_CACHE_MAX_READERS in "
                        "src/data/cache.c: raise it, or run fewer loader workers or processes)",
                        c->path, what, MF_CACHE_MAX_READERS);
  if (id)
    return mf_error_set(MF_ERR_IO, "cache %s: %s '%s': %s", c->path, what, id, mdb_strerror(rc));
  return mf_error_set(MF_ERR_IO, "cache %s: %s: %s", c->path, what, mdb_strerror(rc));
}

static mf_status check_id(const mf_cache *c, const char *id) {
  size_t n = id ? strlen(id) : 0;
  if (n == 0 || n >= MF_FEAT_ID_MAX)
    return mf_error_set(MF_ERR_CONFIG, "cache %s: entry id '%s' must have 1..%d bytes", c->path,
                        id ? id : "(null)", MF_FEAT_ID_MAX - 1);
  return MF_OK;
}

/* Adopts a map size grown by another process (MDB_MAP_RESIZED). Only from a thread with
 * no transaction open on c. */
static int adopt_resize(mf_cache *c) {
  pthread_rwlock_wrlock(&c->map_lock);
  int rc = mdb_env_set_mapsize(c->env, 0);
  pthread_rwlock_unlock(&c->map_lock);
  return rc;
}

/* Begins a transaction inside the gate (left by txn_abort / txn_commit). */
static int txn_begin(mf_cache *c, unsigned flags, MDB_txn **txn) {
  for (int attempt = 0;; attempt++) {
    if (gate_enter(c) != 0) return MF_MDB_TOO_MANY_CACHES;
    int rc = mdb_txn_begin(c->env, NULL, flags, txn);
    if (rc == MDB_SUCCESS) return rc;
    gate_leave(c);
    if (rc != MDB_MAP_RESIZED || attempt >= 3 || held_count(c) > 0) return rc;
    rc = adopt_resize(c);
    if (rc != MDB_SUCCESS) return rc;
  }
}

static void txn_abort(mf_cache *c, MDB_txn *txn) {
  mdb_txn_abort(txn);
  gate_leave(c);
}

static int txn_commit(mf_cache *c, MDB_txn *txn) {
  int rc = mdb_txn_commit(txn); /* frees txn, also on failure */
  gate_leave(c);
  return rc;
}

size_t mf_cache_map_size(mf_cache *c) {
  MDB_envinfo info;
  int entered = gate_enter(c) == 0;
  mdb_env_info(c->env, &info);
  if (entered) gate_leave(c);
  return info.me_mapsize;
}

/* Doubles the map (at least enough for `need` more bytes). Call with no transaction open. */
static mf_status grow_map(mf_cache *c, size_t need) {
  pthread_rwlock_wrlock(&c->map_lock);
  MDB_envinfo info;
  mdb_env_info(c->env, &info);
  size_t cur = info.me_mapsize, next = cur * 2;
  while (next < cur + 2 * need + ((size_t)1 << 20) && next < MAX_MAP) next *= 2;
  mf_status st = MF_OK;
  if (cur >= MAX_MAP) {
    st = mf_error_set(MF_ERR_IO, "cache %s: map size %zu bytes is the limit; cannot grow",
                      c->path, cur);
  } else {
    if (next > MAX_MAP) next = MAX_MAP;
    int rc = mdb_env_set_mapsize(c->env, next);
    if (rc != MDB_SUCCESS) st = lmdb_error(c, rc, "growing the map", NULL);
    else MF_DEBUG("cache %s: map grown from %zu to %zu bytes", c->path, cur, next);
  }
  pthread_rwlock_unlock(&c->map_lock);
  return st;
}

/* ------------------------------------------------------------------ metadata */

static void meta_text(const mf_cache_meta *m, char *buf, size_t n) {
  snprintf(buf, n,
           "megafold-feature-cache\nrecord_version=%" PRIu32 "\nmax_msa_rows=%" PRId32
           "\nzstd_level=%" PRId32 "\nwith_msa=%" PRId32 "\nccd_size=%" PRIu64
           "\nccd_crc32=%08" PRIx32 "\nschema_crc32=%08" PRIx32 "\n",
           m->record_version, m->max_msa_rows, m->zstd_level, m->with_msa, m->ccd_size,
           m->ccd_crc32, m->schema_crc32);
}

/* Parses the stored text; strict: it must re-serialise to the same bytes. */
static mf_status meta_parse(const mf_cache *c, const void *data, size_t len, mf_cache_meta *m) {
  char text[512], again[512];
  memset(m, 0, sizeof *m);
  if (len == 0 || len >= sizeof text)
    return mf_error_set(MF_ERR_FORMAT, "cache %s: metadata of %zu bytes is malformed", c->path,
                        len);
  memcpy(text, data, len);
  text[len] = '\0';
  int k = sscanf(text,
                 "megafold-feature-cache\nrecord_version=%" SCNu32 "\nmax_msa_rows=%" SCNd32
                 "\nzstd_level=%" SCNd32 "\nwith_msa=%" SCNd32 "\nccd_size=%" SCNu64
                 "\nccd_crc32=%" SCNx32 "\nschema_crc32=%" SCNx32,
                 &m->record_version, &m->max_msa_rows, &m->zstd_level, &m->with_msa,
                 &m->ccd_size, &m->ccd_crc32, &m->schema_crc32);
  meta_text(m, again, sizeof again);
  if (k != 7 || strcmp(text, again) != 0)
    return mf_error_set(MF_ERR_FORMAT, "cache %s: metadata record is malformed", c->path);
  return MF_OK;
}

mf_status mf_cache_meta_compare(const mf_cache_meta *have, const mf_cache_meta *want,
                                const char *where) {
#define CMP(field, fmt)                                                                       \
  if (have->field != want->field)                                                            \
    return mf_error_set(MF_ERR_CONFIG, "%s: built with other options: " #field " is %" fmt   \
                        " in the cache, %" fmt " requested (use another cache directory or " \
                        "the same options)", where, have->field, want->field);
  CMP(record_version, PRIu32)
  CMP(max_msa_rows, PRId32)
  CMP(zstd_level, PRId32)
  CMP(with_msa, PRId32)
  CMP(ccd_size, PRIu64)
  CMP(ccd_crc32, "08" PRIx32)
  CMP(schema_crc32, "08" PRIx32)
#undef CMP
  return MF_OK;
}

/* Reads the metadata in txn: MF_OK, or MF_ERR_FORMAT (absent or malformed). */
static mf_status meta_read(mf_cache *c, MDB_txn *txn, mf_cache_meta *m, int *absent) {
  MDB_val k = {strlen(META_KEY), (void *)META_KEY}, v;
  int rc = mdb_get(txn, c->db_meta, &k, &v);
  *absent = rc == MDB_NOTFOUND;
  if (rc == MDB_NOTFOUND)
    return mf_error_set(MF_ERR_FORMAT, "cache %s: no metadata record", c->path);
  if (rc != MDB_SUCCESS) return lmdb_error(c, rc, "reading the metadata", NULL);
  return meta_parse(c, v.mv_data, v.mv_size, m);
}

mf_status mf_cache_meta_get(mf_cache *c, mf_cache_meta *meta) {
  MDB_txn *txn;
  int rc = txn_begin(c, MDB_RDONLY, &txn);
  if (rc != MDB_SUCCESS) return lmdb_error(c, rc, "read transaction", NULL);
  int absent;
  mf_status st = meta_read(c, txn, meta, &absent);
  txn_abort(c, txn);
  return st;
}

/* ------------------------------------------------------------------ open / close */

static mf_status mkdir_p(const char *path) {
  char buf[4096];
  size_t n = strlen(path);
  if (n >= sizeof buf) return mf_error_set(MF_ERR_IO, "cache %s: path too long", path);
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char save = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0775) != 0 && errno != EEXIST)
      return mf_error_set(MF_ERR_IO, "cache %s: cannot create directory %s: %s", path, buf,
                          mf_errno_string());
    buf[i] = save;
  }
  return MF_OK;
}

/* Opens the named databases, checks or stores the metadata. */
static mf_status open_dbs(mf_cache *c, const mf_cache_opts *o) {
  MDB_txn *txn;
  int rc = txn_begin(c, c->writable ? 0 : MDB_RDONLY, &txn);
  if (rc != MDB_SUCCESS) return lmdb_error(c, rc, "opening a transaction", NULL);
  unsigned fl = c->writable ? MDB_CREATE : 0;
  rc = mdb_dbi_open(txn, "records", fl, &c->db_rec);
  if (rc == MDB_SUCCESS) rc = mdb_dbi_open(txn, "meta", fl, &c->db_meta);
  if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE) {
    txn_abort(c, txn);
    return mf_error_set(MF_ERR_FORMAT, "cache %s: an LMDB environment but not a megafold "
                        "feature cache (no 'records'/'meta' databases)", c->path);
  }
  if (rc != MDB_SUCCESS) {
    txn_abort(c, txn);
    return lmdb_error(c, rc, "opening the databases", NULL);
  }
  mf_status st = MF_OK;
  {
    /* records of another format version are refused whatever the caller expects */
    mf_cache_meta have;
    int absent;
    if (meta_read(c, txn, &have, &absent) != MF_OK) mf_error_clear(); /* none yet: fine here */
    else if (have.record_version != MF_FEATURES_VERSION)
      st = mf_error_set(MF_ERR_CONFIG, "cache %s: its records are in format version %" PRIu32
                        ", this build reads version %d: rebuild the cache with megafold prep "
                        "(into a new directory)", c->path, have.record_version,
                        MF_FEATURES_VERSION);
  }
  if (st == MF_OK && o && o->expect) {
    mf_cache_meta have;
    int absent;
    st = meta_read(c, txn, &have, &absent);
    if (st == MF_OK) {
      char where[4200];
      snprintf(where, sizeof where, "cache %s", c->path);
      st = mf_cache_meta_compare(&have, o->expect, where);
    } else if (absent && c->writable) {
      char text[512];
      meta_text(o->expect, text, sizeof text);
      MDB_val k = {strlen(META_KEY), (void *)META_KEY}, v = {strlen(text), text};
      rc = mdb_put(txn, c->db_meta, &k, &v, 0);
      st = rc == MDB_SUCCESS ? MF_OK : lmdb_error(c, rc, "writing the metadata", NULL);
    }
  }
  if (st != MF_OK) {
    txn_abort(c, txn);
    return st;
  }
  rc = txn_commit(c, txn); /* also makes the dbi handles visible to other transactions */
  if (rc != MDB_SUCCESS) return lmdb_error(c, rc, "committing the set-up", NULL);
  return MF_OK;
}

mf_status mf_cache_open(const char *path, const mf_cache_opts *opts, mf_cache **out) {
  *out = NULL;
  mf_cache_opts def = {0};
  const mf_cache_opts *o = opts ? opts : &def;
  if (!path || !*path) return mf_error_set(MF_ERR_CONFIG, "cache: empty path");
  if (strlen(path) >= sizeof(((mf_cache *)0)->path))
    return mf_error_set(MF_ERR_CONFIG, "cache %.64s...: path too long", path);
  struct stat sb;
  if (stat(path, &sb) == 0) {
    if (!S_ISDIR(sb.st_mode))
      return mf_error_set(MF_ERR_IO, "cache %s: exists and is not a directory", path);
  } else if (errno == ENOENT && o->writable) {
    mf_status st = mkdir_p(path);
    if (st != MF_OK) return st;
  } else {
    return mf_error_set(MF_ERR_IO, "cache %s: %s", path, mf_errno_string());
  }
  if (!o->writable) {
    char data[4200];
    snprintf(data, sizeof data, "%s/data.mdb", path);
    if (stat(data, &sb) != 0)
      return mf_error_set(MF_ERR_IO, "cache %s: no data.mdb (not a feature cache)", path);
  }

  mf_cache *c = mf_calloc(sizeof *c, "feature cache");
  if (!c) return MF_ERR_NOMEM;
  snprintf(c->path, sizeof c->path, "%s", path);
  c->writable = !!o->writable;
  pthread_rwlockattr_t ra;
  pthread_rwlockattr_init(&ra);
  pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&c->map_lock, &ra);
  pthread_rwlockattr_destroy(&ra);
  pthread_mutex_init(&c->write_mu, NULL);
  int rc = mdb_env_create(&c->env);
  if (rc == MDB_SUCCESS) rc = mdb_env_set_maxdbs(c->env, 4);
  if (rc == MDB_SUCCESS)
    rc = mdb_env_set_mapsize(c->env, o->initial_map_size ? o->initial_map_size : DEFAULT_MAP);
  if (rc == MDB_SUCCESS) rc = mdb_env_set_maxreaders(c->env, MF_CACHE_MAX_READERS);
  mf_status st = MF_OK;
  if (rc == MDB_SUCCESS) {
    rc = mdb_env_open(c->env, path, MDB_NOTLS | (c->writable ? 0u : MDB_RDONLY), 0664);
    if (rc != MDB_SUCCESS) st = lmdb_error(c, rc, "opening the environment", NULL);
  } else {
    st = lmdb_error(c, rc, "creating the environment", NULL);
  }
  if (st == MF_OK) st = open_dbs(c, o);
  if (st != MF_OK) {
    mf_cache_close(c);
    return st;
  }
  *out = c;
  return MF_OK;
}

void mf_cache_close(mf_cache *c) {
  if (!c) return;
  MF_ASSERT(c->n_readers == 0, "mf_cache_close(%s) with %d readers open", c->path, c->n_readers);
  if (c->env) mdb_env_close(c->env);
  pthread_rwlock_destroy(&c->map_lock);
  pthread_mutex_destroy(&c->write_mu);
  mf_free(c);
}

const char *mf_cache_path(const mf_cache *c) { return c->path; }

/* ------------------------------------------------------------------ writes */

mf_status mf_cache_put(mf_cache *c, const char *id, const void *rec, size_t len) {
  mf_status st = check_id(c, id);
  if (st != MF_OK) return st;
  if (!c->writable)
    return mf_error_set(MF_ERR_CONFIG, "cache %s: put '%s' on a cache opened read-only",
                        c->path, id);
  if (held_count(c) > 0)
    return mf_error_set(MF_ERR_CONFIG, "cache %s: put '%s' from a thread holding an open read "
                        "of this cache (mf_cache_read_end first)", c->path, id);
  pthread_mutex_lock(&c->write_mu);
  for (;;) {
    MDB_txn *txn;
    int rc = txn_begin(c, 0, &txn);
    if (rc != MDB_SUCCESS) {
      st = lmdb_error(c, rc, "write transaction for", id);
      break;
    }
    MDB_val k = {strlen(id), (void *)id}, v = {len, (void *)rec};
    rc = mdb_put(txn, c->db_rec, &k, &v, 0);
    if (rc == MDB_SUCCESS) {
      rc = txn_commit(c, txn);
    } else {
      txn_abort(c, txn);
    }
    if (rc == MDB_SUCCESS) break;
    if (rc != MDB_MAP_FULL) {
      st = lmdb_error(c, rc, "writing record", id);
      break;
    }
    st = grow_map(c, len);
    if (st != MF_OK) break;
  }
  pthread_mutex_unlock(&c->write_mu);
  return st;
}

/* ------------------------------------------------------------------ short reads */

mf_status mf_cache_has(mf_cache *c, const char *id, int *present) {
  *present = 0;
  mf_status st = check_id(c, id);
  if (st != MF_OK) return st;
  MDB_txn *txn;
  int rc = txn_begin(c, MDB_RDONLY, &txn);
  if (rc != MDB_SUCCESS) return lmdb_error(c, rc, "read transaction for", id);
  MDB_val k = {strlen(id), (void *)id}, v;
  rc = mdb_get(txn, c->db_rec, &k, &v);
  txn_abort(c, txn);
  if (rc == MDB_SUCCESS) *present = 1;
  else if (rc != MDB_NOTFOUND) return lmdb_error(c, rc, "looking up", id);
  return MF_OK;
}

mf_status mf_cache_count(mf_cache *c, int64_t *n) {
  *n = 0;
  MDB_txn *txn;
  int rc = txn_begin(c, MDB_RDONLY, &txn);
  if (rc != MDB_SUCCESS) return lmdb_error(c, rc, "read transaction", NULL);
  MDB_stat s;
  rc = mdb_stat(txn, c->db_rec, &s);
  txn_abort(c, txn);
  if (rc != MDB_SUCCESS) return lmdb_error(c, rc, "counting records", NULL);
  *n = (int64_t)s.ms_entries;
  return MF_OK;
}

void mf_cache_list_free(char **ids, int64_t n) {
  if (!ids) return;
  for (int64_t i = 0; i < n; i++) mf_free(ids[i]);
  mf_free(ids);
}

mf_status mf_cache_list(mf_cache *c, char ***ids, int64_t *n) {
  *ids = NULL;
  *n = 0;
  MDB_txn *txn;
  int rc = txn_begin(c, MDB_RDONLY, &txn);
  if (rc != MDB_SUCCESS) return lmdb_error(c, rc, "read transaction", NULL);
  MDB_stat s;
  MDB_cursor *cur = NULL;
  mf_status st = MF_OK;
  char **out = NULL;
  int64_t k = 0;
  rc = mdb_stat(txn, c->db_rec, &s);
  if (rc == MDB_SUCCESS) rc = mdb_cursor_open(txn, c->db_rec, &cur);
  if (rc != MDB_SUCCESS) st = lmdb_error(c, rc, "listing records", NULL);
  if (st == MF_OK) {
    out = mf_calloc((s.ms_entries ? s.ms_entries : 1) * sizeof *out, "cache id list");
    if (!out) st = MF_ERR_NOMEM;
  }
  MDB_val key, val;
  for (int op = MDB_FIRST; st == MF_OK; op = MDB_NEXT) {
    rc = mdb_cursor_get(cur, &key, &val, (MDB_cursor_op)op);
    if (rc == MDB_NOTFOUND) break;
    if (rc != MDB_SUCCESS) {
      st = lmdb_error(c, rc, "listing records", NULL);
      break;
    }
    if ((size_t)k >= s.ms_entries) {
      st = mf_error_set(MF_ERR_FORMAT, "cache %s: more keys than the %zu counted", c->path,
                        s.ms_entries);
      break;
    }
    out[k] = mf_malloc(key.mv_size + 1, "cache id");
    if (!out[k]) {
      st = MF_ERR_NOMEM;
      break;
    }
    memcpy(out[k], key.mv_data, key.mv_size);
    out[k][key.mv_size] = '\0';
    k++;
  }
  if (cur) mdb_cursor_close(cur);
  txn_abort(c, txn);
  if (st != MF_OK) {
    mf_cache_list_free(out, k);
    return st;
  }
  *ids = out;
  *n = k;
  return MF_OK;
}

/* ------------------------------------------------------------------ readers */

mf_status mf_cache_reader_open(mf_cache *c, mf_cache_reader **out) {
  *out = NULL;
  mf_cache_reader *r = mf_calloc(sizeof *r, "cache reader");
  if (!r) return MF_ERR_NOMEM;
  r->c = c;
  pthread_mutex_lock(&c->write_mu);
  c->n_readers++;
  pthread_mutex_unlock(&c->write_mu);
  *out = r;
  return MF_OK;
}

void mf_cache_reader_close(mf_cache_reader *r) {
  if (!r) return;
  if (r->active) mf_cache_read_end(r);
  if (r->txn) mdb_txn_abort(r->txn); /* a reset transaction: no map_lock held */
  pthread_mutex_lock(&r->c->write_mu);
  r->c->n_readers--;
  pthread_mutex_unlock(&r->c->write_mu);
  mf_free(r);
}

mf_status mf_cache_read_begin(mf_cache_reader *r) {
  mf_cache *c = r->c;
  if (r->active)
    return mf_error_set(MF_ERR_CONFIG, "cache %s: read_begin on a reader already reading",
                        c->path);
  for (int attempt = 0;; attempt++) {
    if (gate_enter(c) != 0) return lmdb_error(c, MF_MDB_TOO_MANY_CACHES, "read snapshot", NULL);
    int rc = r->txn ? mdb_txn_renew(r->txn) : mdb_txn_begin(c->env, NULL, MDB_RDONLY, &r->txn);
    if (rc == MDB_SUCCESS) break;
    gate_leave(c);
    if (rc == MDB_MAP_RESIZED && attempt < 3 && held_count(c) == 0 &&
        adopt_resize(c) == MDB_SUCCESS)
      continue;
    /* a failed mdb_txn_begin leaves r->txn NULL; a failed renew leaves it reset */
    return lmdb_error(c, rc, "read snapshot", NULL);
  }
  r->active = 1;
  return MF_OK;
}

void mf_cache_read_end(mf_cache_reader *r) {
  if (!r || !r->active) return;
  mdb_txn_reset(r->txn);
  r->active = 0;
  gate_leave(r->c);
}

mf_status mf_cache_get(mf_cache_reader *r, const char *id, const uint8_t **rec, size_t *len) {
  *rec = NULL;
  *len = 0;
  mf_cache *c = r->c;
  mf_status st = check_id(c, id);
  if (st != MF_OK) return st;
  if (!r->active)
    return mf_error_set(MF_ERR_CONFIG, "cache %s: get '%s' outside read_begin/read_end",
                        c->path, id);
  MDB_val k = {strlen(id), (void *)id}, v;
  int rc = mdb_get(r->txn, c->db_rec, &k, &v);
  if (rc == MDB_NOTFOUND) /* MF_ERR_FORMAT: the record's absence, not a failing read */
    return mf_error_set(MF_ERR_FORMAT, "cache %s: no record '%s'", c->path, id);
  if (rc != MDB_SUCCESS) return lmdb_error(c, rc, "reading record", id);
  *rec = v.mv_data;
  *len = v.mv_size;
  return MF_OK;
}

mf_status mf_cache_get_features(mf_cache_reader *r, const char *id, mf_feature_set *fs) {
  mf_features_init(fs, NULL);
  const uint8_t *rec;
  size_t len;
  mf_status st = mf_cache_get(r, id, &rec, &len);
  if (st != MF_OK) return st;
  char where[4200];
  snprintf(where, sizeof where, "%s:%s", r->c->path, id);
  st = mf_features_decode(rec, len, where, fs);
  if (st == MF_OK && strcmp(fs->id, id) != 0) {
    st = mf_error_set(MF_ERR_FORMAT, "%s: the record holds entry '%s'", where, fs->id);
    mf_features_free(fs);
  }
  return st;
}
