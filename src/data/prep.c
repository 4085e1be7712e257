/* prep.c — the `megafold prep` driver (see prep.h): input listing, the skip pass over the
 * cache, N featurising workers feeding a reorder window, and the calling thread as the one
 * writer (cache puts in input order, failure reports, progress). Not here: argument parsing (cli/prep.c),
 * featurisation (featurize.c), the record format (features.c), LMDB (cache.c). */
#define _POSIX_C_SOURCE 200809L
#include "data/prep.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <zlib.h>

#include "data/cache.h"
#include "data/featurize.h"

/* ------------------------------------------------------------------ inputs */

void mf_prep_free_list(char **paths, int64_t n) {
  if (!paths) return;
  for (int64_t i = 0; i < n; i++) mf_free(paths[i]);
  mf_free(paths);
}

static int has_suffix(const char *s, const char *suf) {
  size_t n = strlen(s), k = strlen(suf);
  return n >= k && strcmp(s + n - k, suf) == 0;
}

mf_status mf_prep_entry_id(const char *path, char *id, size_t n) {
  return mf_featurize_entry_id(path, id, n);
}

/* A growing array of strings. */
typedef struct {
  char **v;
  int64_t n, cap;
} strvec;

static mf_status strvec_push(strvec *s, const char *a, size_t len) {
  if (mf_grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v, "prep: input list") != MF_OK)
    return MF_ERR_NOMEM;
  char *c = mf_malloc(len + 1, "prep: input path");
  if (!c) return MF_ERR_NOMEM;
  memcpy(c, a, len);
  c[len] = '\0';
  s->v[s->n++] = c;
  return MF_OK;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static mf_status list_dir(const char *dir, strvec *out) {
  DIR *d = opendir(dir);
  if (!d) return mf_error_set(MF_ERR_IO, "prep: cannot read directory %s: %s", dir,
                              mf_errno_string());
  mf_status st = MF_OK;
  struct dirent *e;
  size_t dl = strlen(dir);
  while (st == MF_OK && (e = readdir(d)) != NULL) {
    const char *nm = e->d_name;
    if (nm[0] == '.' || !(has_suffix(nm, ".cif") || has_suffix(nm, ".cif.gz"))) continue;
    size_t len = dl + 1 + strlen(nm);
    char *p = mf_malloc(len + 1, "prep: path");
    if (!p) {
      st = MF_ERR_NOMEM;
      break;
    }
    snprintf(p, len + 1, "%s%s%s", dir, (dl && dir[dl - 1] == '/') ? "" : "/", nm);
    struct stat sb;
    if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) st = strvec_push(out, p, strlen(p));
    mf_free(p);
  }
  closedir(d);
  if (st == MF_OK && out->n > 1) qsort(out->v, (size_t)out->n, sizeof *out->v, cmp_str);
  return st;
}

static mf_status list_file(const char *path, strvec *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return mf_error_set(MF_ERR_IO, "prep: cannot open list %s: %s", path,
                              mf_errno_string());
  char *line = NULL;
  size_t cap = 0;
  ssize_t got;
  mf_status st = MF_OK;
  while (st == MF_OK && (got = getline(&line, &cap, f)) >= 0) {
    size_t a = 0, b = (size_t)got;
    while (a < b && (line[a] == ' ' || line[a] == '\t')) a++;
    while (b > a && (line[b - 1] == '\n' || line[b - 1] == '\r' || line[b - 1] == ' ' ||
                     line[b - 1] == '\t'))
      b--;
    if (a == b || line[a] == '#') continue;
    if (memchr(line + a, '\0', b - a)) {
      st = mf_error_set(MF_ERR_FORMAT, "prep: list %s: a line holds a NUL byte", path);
      break;
    }
    st = strvec_push(out, line + a, b - a);
  }
  if (st == MF_OK && ferror(f))
    st = mf_error_set(MF_ERR_IO, "prep: reading list %s failed", path);
  free(line);
  fclose(f);
  return st;
}

mf_status mf_prep_list_inputs(const char *input, char ***paths, int64_t *n) {
  *paths = NULL;
  *n = 0;
  struct stat sb;
  if (!input || stat(input, &sb) != 0)
    return mf_error_set(MF_ERR_IO, "prep: input %s: %s", input ? input : "(null)",
                        mf_errno_string());
  strvec v = {0};
  mf_status st = S_ISDIR(sb.st_mode) ? list_dir(input, &v) : list_file(input, &v);
  if (st != MF_OK) {
    mf_prep_free_list(v.v, v.n);
    return st;
  }
  *paths = v.v;
  *n = v.n;
  return MF_OK;
}

/* Size and crc32 of a file's bytes. */
static mf_status file_crc(const char *path, uint64_t *size, uint32_t *crc) {
  FILE *f = fopen(path, "rb");
  if (!f) return mf_error_set(MF_ERR_IO, "prep: cannot open CCD %s: %s", path, mf_errno_string());
  uint8_t *buf = mf_malloc(1 << 20, "prep: CCD checksum buffer");
  if (!buf) {
    fclose(f);
    return MF_ERR_NOMEM;
  }
  uLong c = crc32(0L, Z_NULL, 0);
  uint64_t total = 0;
  size_t k;
  while ((k = fread(buf, 1, 1 << 20, f)) > 0) {
    c = crc32(c, buf, (uInt)k);
    total += k;
  }
  mf_status st = ferror(f) ? mf_error_set(MF_ERR_IO, "prep: reading CCD %s failed", path) : MF_OK;
  mf_free(buf);
  fclose(f);
  *size = total;
  *crc = (uint32_t)c;
  return st;
}

/* ------------------------------------------------------------------ schema */

#define SCHEMA_TEXT(name, dt, nd, shape, meaning) #name " " #dt " " #nd " " shape "\n"
static const char k_schema[] = MF_FEATURES(SCHEMA_TEXT);
#undef SCHEMA_TEXT

uint32_t mf_prep_schema_crc32(void) { return mf_features_crc32(k_schema, sizeof k_schema - 1); }

/* Every feature of MF_FEATURES present with its dtype and rank, and nothing else. */
static mf_status check_schema(const mf_feature_set *fs) {
  int n = 0;
  mf_status st = MF_OK;
#define SCHEMA_CHECK(name, dt, nd, shape, meaning)                                             \
  if (st == MF_OK) st = mf_features_expect(fs, #name, dt, nd, NULL, NULL);                     \
  n++;
  MF_FEATURES(SCHEMA_CHECK)
#undef SCHEMA_CHECK
  if (st != MF_OK) return st;
  if (fs->n != n)
    return mf_error_set(MF_ERR_FORMAT, "entry %s: %d features, featurize.h lists %d", fs->id,
                        fs->n, n);
  return MF_OK;
}

/* ------------------------------------------------------------------ workers */

typedef struct {
  int64_t item;      /* index into the todo list */
  mf_status st;
  uint8_t *rec;      /* mf_malloc'd record when st == MF_OK */
  size_t len;
  int64_t bytes_in;
  char msg[1024];
} prep_result;

typedef struct {
  const mf_prep_opts *o;
  const mf_featurize_opts *fo;
  char **paths;      /* all inputs */
  char (*ids)[MF_FEAT_ID_MAX];
  int64_t *todo;     /* indices into paths */
  int64_t n_todo;
  int zstd_level;
  pthread_mutex_t mu;
  pthread_cond_t filled_cv, room_cv;
  int64_t next;      /* next todo item to take */
  int64_t written;   /* items the writer has consumed (in order) */
  int stop;          /* writer failed: take no more items */
  /* Reorder window: item i is taken only while i < written + window and lands in
   * slot[i % window], so the writer stores records in input order (and the LMDB file, not
   * only each record, is the same for any thread count). */
  prep_result *slot;
  uint8_t *filled;
  int64_t window;
} prep_shared;

static void work_one(prep_shared *sh, int64_t item, prep_result *r) {
  int64_t k = sh->todo[item];
  const char *path = sh->paths[k];
  memset(r, 0, sizeof *r);
  r->item = item;
  struct stat sb;
  if (stat(path, &sb) == 0) r->bytes_in = (int64_t)sb.st_size;
  mf_feature_set fs;
  mf_error_clear();
  r->st = mf_featurize_file(path, sh->fo, &fs);
  if (r->st == MF_OK) {
    snprintf(fs.id, sizeof fs.id, "%s", sh->ids[k]); /* the cache key, whatever the featuriser */
    r->st = check_schema(&fs);
    if (r->st == MF_OK) r->st = mf_features_encode(&fs, sh->zstd_level, &r->rec, &r->len);
    mf_features_free(&fs);
  }
  if (r->st != MF_OK)
    snprintf(r->msg, sizeof r->msg, "%s", mf_error_message()[0] ? mf_error_message()
                                                               : mf_status_name(r->st));
}

static void *worker_main(void *arg) {
  prep_shared *sh = arg;
  for (;;) {
    pthread_mutex_lock(&sh->mu);
    while (!sh->stop && sh->next < sh->n_todo && sh->next >= sh->written + sh->window)
      pthread_cond_wait(&sh->room_cv, &sh->mu);
    if (sh->stop || sh->next >= sh->n_todo) {
      pthread_mutex_unlock(&sh->mu);
      return NULL;
    }
    int64_t item = sh->next++;
    pthread_mutex_unlock(&sh->mu);

    prep_result r;
    work_one(sh, item, &r);

    pthread_mutex_lock(&sh->mu);
    /* the slot is free: its previous item (item - window) was consumed before `item` was
     * taken */
    sh->slot[item % sh->window] = r;
    sh->filled[item % sh->window] = 1;
    pthread_cond_signal(&sh->filled_cv);
    pthread_mutex_unlock(&sh->mu);
  }
}

/* ------------------------------------------------------------------ the run */

void mf_prep_summary_format(const mf_prep_summary *s, char *buf, size_t n) {
  double sec = s->seconds > 0 ? s->seconds : 1e-9;
  snprintf(buf, n,
           "%lld done, %lld skipped (already cached), %lld failed, %.1f MB in, %.1f MB out, "
           "%.1f s (%.2f entries/s, %.2f MB/s in)",
           (long long)s->done, (long long)s->skipped, (long long)s->failed,
           (double)s->bytes_in / 1e6, (double)s->bytes_out / 1e6, s->seconds,
           (double)(s->done + s->failed) / sec, (double)s->bytes_in / 1e6 / sec);
}

/* an entry id and its input position; equal ids sort by position */
typedef struct {
  const char *id;
  int64_t i;
} id_pos;
static int cmp_id_pos(const void *a, const void *b) {
  const id_pos *x = a, *y = b;
  int c = strcmp(x->id, y->id);
  return c ? c : (x->i < y->i ? -1 : x->i > y->i);
}

mf_status mf_prep_run(const mf_prep_opts *o, mf_prep_summary *s) {
  memset(s, 0, sizeof *s);
  double t0 = mf_time_now();
  FILE *rep = o->report ? o->report : stderr;
  if (!o->input || !o->ccd_path || !o->out)
    return mf_error_set(MF_ERR_CONFIG, "prep: input, CCD and output are required");
  if (o->threads < 1 || o->threads > 256)
    return mf_error_set(MF_ERR_CONFIG, "prep: threads %d outside 1..256", o->threads);
  if (o->max_msa_rows < 0)
    return mf_error_set(MF_ERR_CONFIG, "prep: max MSA rows %d < 0", o->max_msa_rows);
  int level = o->zstd_level ? o->zstd_level : MF_FEATURES_ZSTD_DEFAULT;
  {
    /* the encoder checks the level; find out now, not at the first entry */
    mf_feature_set probe;
    mf_features_init(&probe, "probe");
    uint8_t *rec;
    size_t len;
    mf_status st = mf_features_encode(&probe, level, &rec, &len);
    mf_features_free(&probe);
    if (st != MF_OK) return mf_error_set(st, "prep: %s", mf_error_message());
    mf_free(rec);
  }
  if (o->msa_dir) {
    struct stat sb;
    if (stat(o->msa_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
      return mf_error_set(MF_ERR_IO, "prep: MSA directory %s is not a directory", o->msa_dir);
  }

  char **paths = NULL;
  int64_t n = 0;
  mf_status st = mf_prep_list_inputs(o->input, &paths, &n);
  if (st != MF_OK) return st;
  s->total = n;

  mf_cache_meta meta = {.record_version = MF_FEATURES_VERSION,
                        .max_msa_rows = o->max_msa_rows,
                        .zstd_level = level,
                        .with_msa = o->msa_dir != NULL,
                        .schema_crc32 = mf_prep_schema_crc32()};
  st = file_crc(o->ccd_path, &meta.ccd_size, &meta.ccd_crc32);
  mf_cache *cache = NULL;
  if (st == MF_OK) {
    mf_cache_opts co = {.writable = 1, .initial_map_size = o->initial_map_size, .expect = &meta};
    st = mf_cache_open(o->out, &co, &cache);
  }

  /* ids, duplicates, already cached */
  char(*ids)[MF_FEAT_ID_MAX] = NULL;
  id_pos *order = NULL;
  int64_t *todo = NULL;
  uint8_t *bad = NULL;
  if (st == MF_OK) {
    ids = mf_calloc((size_t)(n ? n : 1) * sizeof *ids, "prep: ids");
    order = mf_malloc((size_t)(n ? n : 1) * sizeof *order, "prep: id order");
    todo = mf_malloc((size_t)(n ? n : 1) * sizeof *todo, "prep: todo");
    bad = mf_calloc((size_t)(n ? n : 1), "prep: bad inputs");
    if (!ids || !order || !todo || !bad) st = MF_ERR_NOMEM;
  }
  int64_t n_todo = 0;
  if (st == MF_OK) {
    for (int64_t i = 0; i < n; i++) {
      order[i] = (id_pos){ids[i], i};
      if (mf_prep_entry_id(paths[i], ids[i], sizeof ids[i]) != MF_OK) {
        fprintf(rep, "prep: %s: %s\n", paths[i], mf_error_message());
        bad[i] = 1;
        s->failed++;
      }
    }
    if (n > 1) qsort(order, (size_t)n, sizeof *order, cmp_id_pos);
    for (int64_t k = 1; k < n; k++) {
      int64_t a = order[k - 1].i, b = order[k].i;
      if (bad[a] || bad[b] || strcmp(ids[a], ids[b]) != 0) continue;
      /* equal ids sort by input position: b comes later in the input */
      fprintf(rep, "prep: %s: duplicate entry id '%s' (already taken by %s)\n", paths[b], ids[b],
              paths[a]);
      bad[b] = 2;
      s->failed++;
      order[k] = order[k - 1]; /* the next duplicate compares against the first */
    }
    for (int64_t i = 0; i < n && st == MF_OK; i++) {
      if (bad[i]) continue;
      int present = 0;
      st = mf_cache_has(cache, ids[i], &present);
      if (present) s->skipped++;
      else todo[n_todo++] = i;
    }
  }

  mf_ccd ccd;
  memset(&ccd, 0, sizeof ccd);
  if (st == MF_OK && n_todo > 0) {
    double tc = mf_time_now();
    st = mf_ccd_read(o->ccd_path, &ccd);
    if (st == MF_OK)
      MF_INFO("prep: CCD %s: %lld components in %.2fs; %lld entries to featurise, %lld "
              "already cached", o->ccd_path, (long long)ccd.n_components, mf_time_now() - tc,
              (long long)n_todo, (long long)s->skipped);
  }

  if (st == MF_OK && n_todo > 0) {
    mf_featurize_opts fo = {.ccd = &ccd, .msa_dir = o->msa_dir, .max_msa_rows = o->max_msa_rows};
    prep_shared sh;
    memset(&sh, 0, sizeof sh);
    sh.o = o;
    sh.fo = &fo;
    sh.paths = paths;
    sh.ids = ids;
    sh.todo = todo;
    sh.n_todo = n_todo;
    sh.zstd_level = level;
    sh.window = 4 * (int64_t)o->threads;
    sh.slot = mf_malloc((size_t)sh.window * sizeof *sh.slot, "prep: result window");
    sh.filled = mf_calloc((size_t)sh.window, "prep: result window flags");
    int nth = o->threads < n_todo ? o->threads : (int)n_todo;
    pthread_t *th = mf_malloc((size_t)nth * sizeof *th, "prep: threads");
    if (!sh.slot || !sh.filled || !th) st = MF_ERR_NOMEM;
    int started = 0;
    if (st == MF_OK) {
      pthread_mutex_init(&sh.mu, NULL);
      pthread_cond_init(&sh.filled_cv, NULL);
      pthread_cond_init(&sh.room_cv, NULL);
      for (; started < nth; started++)
        if (pthread_create(&th[started], NULL, worker_main, &sh) != 0) break;
      if (started == 0) st = mf_error_set(MF_ERR_RUNTIME, "prep: cannot start worker threads");
    }
    mf_progress prog;
    mf_progress_init(&prog, "prep", n_todo);
    for (int64_t got = 0; st == MF_OK && got < n_todo; got++) {
      pthread_mutex_lock(&sh.mu);
      int64_t at = got % sh.window;
      while (!sh.filled[at]) pthread_cond_wait(&sh.filled_cv, &sh.mu);
      prep_result r = sh.slot[at];
      sh.filled[at] = 0;
      sh.written = got + 1;
      pthread_cond_broadcast(&sh.room_cv);
      pthread_mutex_unlock(&sh.mu);

      int64_t k = todo[r.item];
      s->bytes_in += r.bytes_in;
      if (r.st == MF_OK) {
        st = mf_cache_put(cache, ids[k], r.rec, r.len);
        if (st == MF_OK) {
          s->done++;
          s->bytes_out += (int64_t)r.len;
        }
      } else {
        fprintf(rep, "prep: %s: %s\n", paths[k], r.msg);
        fflush(rep);
        s->failed++;
      }
      mf_free(r.rec);
      if (o->progress) mf_progress_add(&prog, 1);
    }
    if (started > 0) {
      pthread_mutex_lock(&sh.mu);
      sh.stop = 1; /* after a cache error: stop taking items, drop what is queued */
      pthread_cond_broadcast(&sh.room_cv);
      pthread_mutex_unlock(&sh.mu);
      for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
      for (int64_t i = 0; i < sh.window; i++)
        if (sh.filled[i]) mf_free(sh.slot[i].rec);
      pthread_mutex_destroy(&sh.mu);
      pthread_cond_destroy(&sh.filled_cv);
      pthread_cond_destroy(&sh.room_cv);
    }
    if (o->progress && st == MF_OK) mf_progress_finish(&prog);
    mf_free(sh.slot);
    mf_free(sh.filled);
    mf_free(th);
  }

  mf_ccd_free(&ccd);
  mf_cache_close(cache);
  mf_free(ids);
  mf_free(order);
  mf_free(todo);
  mf_free(bad);
  mf_prep_free_list(paths, n);
  s->seconds = mf_time_now() - t0;
  return st;
}
