/* source_files.c — the `--no-cache` loader source: featurise + encode entry k on demand.
 * See source_files.h. Not here: the featuriser (featurize.c), the loader (loader.c). */
#include "data/source_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/ccd.h"
#include "data/features.h"
#include "data/featurize.h"
#include "data/prep.h"

typedef struct {
  char id[MF_FEAT_ID_MAX];
  char *path; /* owned */
} files_entry;

typedef struct {
  files_entry *e;
  int64_t n;
  mf_ccd ccd;
  mf_featurize_opts fo;
  char *msa_dir; /* owned copy */
  int zstd_level;
  int max_workers;
  uint8_t **rec; /* (max_workers) the record handed out last, freed on release */
} files_src;

static int entry_cmp(const void *a, const void *b) {
  return strcmp(((const files_entry *)a)->id, ((const files_entry *)b)->id);
}

static int id_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static mf_status files_get(void *ctx, int w, int64_t k, const uint8_t **rec, size_t *len) {
  files_src *c = ctx;
  *rec = NULL, *len = 0;
  if (w < 0 || w >= c->max_workers || k < 0 || k >= c->n)
    return mf_error_set(MF_ERR_CONFIG, "files source: worker %d / entry %lld out of range", w,
                        (long long)k);
  mf_free(c->rec[w]);
  c->rec[w] = NULL;
  mf_feature_set fs;
  mf_status st = mf_featurize_file(c->e[k].path, &c->fo, &fs);
  if (st != MF_OK) return st;
  st = mf_features_encode(&fs, c->zstd_level, &c->rec[w], len);
  mf_features_free(&fs);
  if (st != MF_OK) return st;
  *rec = c->rec[w];
  return MF_OK;
}

static void files_release(void *ctx, int w) {
  files_src *c = ctx;
  if (w < 0 || w >= c->max_workers) return;
  mf_free(c->rec[w]);
  c->rec[w] = NULL;
}

static const char *files_name(void *ctx, int64_t k) {
  files_src *c = ctx;
  return k >= 0 && k < c->n ? c->e[k].id : NULL;
}

static void files_destroy(files_src *c) {
  if (!c) return;
  for (int64_t i = 0; c->e && i < c->n; i++) mf_free(c->e[i].path);
  mf_free(c->e);
  for (int w = 0; c->rec && w < c->max_workers; w++) mf_free(c->rec[w]);
  mf_free(c->rec);
  mf_free(c->msa_dir);
  mf_ccd_free(&c->ccd);
  mf_free(c);
}

static char *dup_str(const char *s, const char *what) {
  size_t n = strlen(s) + 1;
  char *d = mf_malloc(n, what);
  if (d) memcpy(d, s, n);
  return d;
}

/* The entries of o->input (restricted to o->ids when given), sorted by id, into c. */
static mf_status list_entries(const mf_source_files_opts *o, files_src *c) {
  char **paths = NULL;
  int64_t np = 0;
  mf_status st = mf_prep_list_inputs(o->input, &paths, &np);
  if (st != MF_OK) return st;
  char **want = NULL;
  if (o->n_ids > 0) {
    want = mf_malloc((size_t)o->n_ids * sizeof *want, "files source ids");
    if (!want) {
      mf_prep_free_list(paths, np);
      return MF_ERR_NOMEM;
    }
    memcpy(want, o->ids, (size_t)o->n_ids * sizeof *want);
    qsort(want, (size_t)o->n_ids, sizeof *want, id_cmp);
  }
  c->e = np > 0 ? mf_calloc((size_t)np * sizeof *c->e, "files source entries") : NULL;
  if (np > 0 && !c->e) st = MF_ERR_NOMEM;
  for (int64_t i = 0; st == MF_OK && i < np; i++) {
    files_entry *e = &c->e[c->n];
    st = mf_prep_entry_id(paths[i], e->id, sizeof e->id);
    if (st != MF_OK) break;
    if (want) {
      const char *key = e->id;
      if (!bsearch(&key, want, (size_t)o->n_ids, sizeof *want, id_cmp)) continue;
    }
    e->path = dup_str(paths[i], "files source path");
    if (!e->path) st = MF_ERR_NOMEM;
    else c->n++;
  }
  mf_prep_free_list(paths, np);
  if (st == MF_OK && c->n > 1) qsort(c->e, (size_t)c->n, sizeof *c->e, entry_cmp);
  for (int64_t i = 1; st == MF_OK && i < c->n; i++)
    if (!strcmp(c->e[i].id, c->e[i - 1].id))
      st = mf_error_set(MF_ERR_CONFIG, "files source: entry id '%s' twice in %s (%s, %s)",
                        c->e[i].id, o->input, c->e[i - 1].path, c->e[i].path);
  /* every requested id must have been found */
  for (int64_t i = 0; st == MF_OK && want && i < o->n_ids; i++) {
    files_entry key;
    snprintf(key.id, sizeof key.id, "%s", want[i]);
    if (!c->n || !bsearch(&key, c->e, (size_t)c->n, sizeof *c->e, entry_cmp))
      st = mf_error_set(MF_ERR_CONFIG, "files source: no mmCIF file for entry '%s' in %s",
                        want[i], o->input);
  }
  mf_free(want);
  if (st == MF_OK && c->n == 0)
    st = mf_error_set(MF_ERR_CONFIG, "files source: no entries in %s", o->input);
  return st;
}

mf_status mf_source_files_create(const mf_source_files_opts *o, int max_workers,
                                 mf_loader_source *src) {
  memset(src, 0, sizeof *src);
  if (!o || !o->input || !o->ccd_path || max_workers < 1 || o->n_ids < 0 ||
      (o->n_ids > 0 && !o->ids) || o->max_msa_rows < 0)
    return mf_error_set(MF_ERR_CONFIG,
                        "files source: need input, ccd_path, >= 1 workers, max_msa_rows >= 0");
  files_src *c = mf_calloc(sizeof *c, "files source");
  if (!c) return MF_ERR_NOMEM;
  c->max_workers = max_workers;
  c->zstd_level = o->zstd_level ? o->zstd_level : MF_SOURCE_FILES_ZSTD_DEFAULT;
  mf_status st = MF_OK;
  c->rec = mf_calloc((size_t)max_workers * sizeof *c->rec, "files source records");
  if (!c->rec) st = MF_ERR_NOMEM;
  if (st == MF_OK && o->msa_dir && !(c->msa_dir = dup_str(o->msa_dir, "files source msa dir")))
    st = MF_ERR_NOMEM;
  if (st == MF_OK) st = list_entries(o, c);
  if (st == MF_OK) st = mf_ccd_read(o->ccd_path, &c->ccd);
  if (st != MF_OK) {
    files_destroy(c);
    return st;
  }
  c->fo.ccd = &c->ccd, c->fo.msa_dir = c->msa_dir, c->fo.max_msa_rows = o->max_msa_rows;
  src->n = c->n, src->ctx = c, src->get = files_get, src->release = files_release;
  src->name = files_name;
  return MF_OK;
}

void mf_source_files_free(mf_loader_source *src) {
  if (!src || !src->ctx || src->get != files_get) return;
  files_destroy(src->ctx);
  memset(src, 0, sizeof *src);
}

const char *mf_source_files_path(const mf_loader_source *src, int64_t k) {
  if (!src || !src->ctx || src->get != files_get) return NULL;
  files_src *c = src->ctx;
  return k >= 0 && k < c->n ? c->e[k].path : NULL;
}
