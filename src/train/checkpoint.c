/* checkpoint.c — atomic safetensors checkpoints of the flat parameter / AdamW buffers
 * (see checkpoint.h). The header is JSON through jansson; the data is the buffers in F32.
 * Not a reader of arbitrary safetensors files: only F32 tensors named by the table load. */
#define _POSIX_C_SOURCE 200809L /* fileno, fseeko */
#include "train/checkpoint.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "core/atomic_file.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c writes F32 data in host byte order: little-endian hosts only"
#endif

#define MAX_HEADER ((uint64_t)100 << 20) /* the safetensors reference's limit */
#define CHUNK 16384                      /* floats converted at a time (double build) */
#define MAX_NDIM 8
#define NAME_MAX_LEN (MF_PARAMS_NAME_MAX + 16)

static mf_ckpt_hook g_hook;
static void *g_hook_ud;

void mf_ckpt_set_hook(mf_ckpt_hook hook, void *userdata) {
  g_hook = hook;
  g_hook_ud = userdata;
}

/* The three buffers of a checkpoint, in file order. */
static const char *const k_prefix[3] = {"", "optim.m.", "optim.v."};

static void tensor_name(char *out, int kind, const mf_param_entry *e) {
  snprintf(out, NAME_MAX_LEN, "%s%s", k_prefix[kind], e->name);
}

/* ------------------------------------------------------------------ config as JSON */

static json_t *config_json(const mf_params_table *t) {
  const mf_pairformer_config *c = &t->config;
  return json_pack("{s:{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f}}", "pairformer", "L", t->L,
                   "c_s", c->c_s, "c_z", c->c_z, "c_mul", c->c_mul, "h_tri", c->h_tri, "d_tri",
                   c->d_tri, "h_s", c->h_s, "d_s", c->d_s, "n_trans", c->n_trans, "p_drop",
                   c->p_drop);
}

/* MF_OK when the file's config string describes the table's config. */
static mf_status config_check(const char *path, const char *text, const mf_params_table *t) {
  json_error_t jerr;
  json_t *got = json_loads(text, 0, &jerr);
  if (!got)
    return mf_error_set(MF_ERR_FORMAT, "%s: metadata \"config\" is not JSON: %s", path, jerr.text);
  json_t *want = config_json(t);
  mf_status st = MF_OK;
  if (!want) {
    st = mf_error_set(MF_ERR_NOMEM, "%s: building the config JSON failed", path);
  } else {
    json_t *gp = json_object_get(got, "pairformer"), *wp = json_object_get(want, "pairformer");
    const char *key;
    json_t *wv;
    if (!json_is_object(gp))
      st = mf_error_set(MF_ERR_CONFIG, "%s: config has no \"pairformer\" object", path);
    else
      json_object_foreach(wp, key, wv) {
        if (!strcmp(key, "p_drop")) continue; /* recorded, but not part of the layout */
        json_t *gv = json_object_get(gp, key);
        if (!gv || !json_equal(gv, wv)) {
          char *gs = gv ? json_dumps(gv, JSON_ENCODE_ANY) : NULL;
          char *ws = json_dumps(wv, JSON_ENCODE_ANY);
          st = mf_error_set(MF_ERR_CONFIG, "%s: config pairformer.%s is %s in the file but %s in "
                            "the parameter table", path, key, gs ? gs : "missing", ws ? ws : "?");
          free(gs);
          free(ws);
          break;
        }
      }
  }
  json_decref(want);
  json_decref(got);
  return st;
}

/* ------------------------------------------------------------------ save */

static mf_status build_header(char **out, size_t *out_len, const mf_params_table *t, int kinds,
                              uint64_t step, uint64_t seed) {
  json_t *root = json_object(), *meta = json_object(), *cfg = config_json(t);
  char *cfg_s = cfg ? json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  char num[3][32];
  snprintf(num[0], sizeof num[0], "%llu", (unsigned long long)step);
  snprintf(num[1], sizeof num[1], "%llu", (unsigned long long)seed);
  snprintf(num[2], sizeof num[2], "%lld", (long long)t->total);
  int bad = !root || !meta || !cfg_s;
  char ver[16];
  snprintf(ver, sizeof ver, "%d", MF_CKPT_FORMAT_VERSION);
  if (!bad)
    bad = json_object_set_new(meta, "format", json_string("megafold")) ||
          json_object_set_new(meta, "format_version", json_string(ver)) ||
          json_object_set_new(meta, "step", json_string(num[0])) ||
          json_object_set_new(meta, "seed", json_string(num[1])) ||
          json_object_set_new(meta, "param_count", json_string(num[2])) ||
          json_object_set_new(meta, "optimizer", json_string(kinds == 3 ? "1" : "0")) ||
          json_object_set_new(meta, "config", json_string(cfg_s)) ||
          json_object_set(root, "__metadata__", meta);
  for (int k = 0; k < kinds && !bad; k++)
    for (int i = 0; i < t->n && !bad; i++) {
      const mf_param_entry *e = &t->entries[i];
      char name[NAME_MAX_LEN];
      tensor_name(name, k, e);
      json_t *shape = json_array();
      for (int d = 0; d < e->ndim && shape && !bad; d++)
        if (json_array_append_new(shape, json_integer(e->shape[d]))) bad = 1;
      if (bad || !shape) {
        json_decref(shape);
        bad = 1;
        break;
      }
      json_int_t b = (json_int_t)4 * ((json_int_t)k * t->total + e->offset);
      /* "o" takes the reference to shape, also when json_pack fails */
      json_t *obj = json_pack("{s:s,s:o,s:[I,I]}", "dtype", "F32", "shape", shape,
                              "data_offsets", b, b + (json_int_t)4 * e->numel);
      if (!obj || json_object_set_new(root, name, obj)) bad = 1;
    }
  char *s = bad ? NULL : json_dumps(root, JSON_COMPACT);
  free(cfg_s);
  json_decref(cfg);
  json_decref(meta);
  json_decref(root);
  if (!s) return mf_error_set(MF_ERR_NOMEM, "checkpoint: building the safetensors header failed");
  *out = s;
  *out_len = strlen(s);
  return MF_OK;
}

/* n values of buf as F32. */
static int write_f32(FILE *f, const mf_real *buf, int64_t n, float *chunk) {
  if (sizeof(mf_real) == sizeof(float)) return fwrite(buf, sizeof(float), (size_t)n, f) == (size_t)n;
  for (int64_t i = 0; i < n; i += CHUNK) {
    int64_t m = n - i < CHUNK ? n - i : CHUNK;
    for (int64_t k = 0; k < m; k++) chunk[k] = (float)buf[i + k];
    if (fwrite(chunk, sizeof(float), (size_t)m, f) != (size_t)m) return 0;
  }
  return 1;
}

/* What the atomic writer puts in the file: the 8-byte header length, the header padded
 * with spaces to plen, then the kinds buffers as F32. */
typedef struct {
  const char *hdr;
  size_t hlen, plen;
  const mf_real *const *bufs;
  int kinds;
  int64_t total;
  float *chunk;
} save_ctx;

static int write_contents(FILE *f, void *ctx) {
  const save_ctx *c = ctx;
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)c->plen >> (8 * i));
  int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(c->hdr, 1, c->hlen, f) == c->hlen;
  for (size_t i = c->hlen; i < c->plen && ok; i++) ok = fputc(' ', f) != EOF;
  for (int k = 0; k < c->kinds && ok; k++) ok = write_f32(f, c->bufs[k], c->total, c->chunk);
  return ok;
}

mf_status mf_ckpt_save(const char *path, const mf_params_table *t, const mf_real *params,
                       const mf_real *adam_m, const mf_real *adam_v, uint64_t step,
                       uint64_t seed) {
  if (!path || !t || !params || !t->entries)
    return mf_error_set(MF_ERR_CONFIG, "checkpoint save: path, table and params are required");
  if ((adam_m == NULL) != (adam_v == NULL))
    return mf_error_set(MF_ERR_CONFIG, "checkpoint save %s: AdamW m and v go together", path);
  const int kinds = adam_m ? 3 : 1;
  const mf_real *bufs[3] = {params, adam_m, adam_v};

  char *hdr = NULL;
  size_t hlen = 0;
  mf_status st = build_header(&hdr, &hlen, t, kinds, step, seed);
  if (st != MF_OK) return st;
  float *chunk = sizeof(mf_real) == sizeof(float) ? NULL : mf_malloc(CHUNK * sizeof(float), "checkpoint chunk");
  if (sizeof(mf_real) != sizeof(float) && !chunk) {
    free(hdr);
    return MF_ERR_NOMEM;
  }
  /* 8 + plen is a multiple of 8: the data is aligned */
  save_ctx c = {hdr, hlen, (hlen + 7) / 8 * 8, bufs, kinds, t->total, chunk};
  st = mf_atomic_write_file(path, write_contents, &c, g_hook, g_hook_ud);
  mf_free(chunk);
  free(hdr);
  return st;
}

/* ------------------------------------------------------------------ load */

typedef struct {
  const char *name;  /* key in the parsed header (owned by the JSON) */
  const char *dtype;
  int ndim;
  int64_t shape[MAX_NDIM];
  uint64_t begin, end; /* relative to the data start */
} hentry;

static int64_t dtype_size(const char *d) {
  static const struct { const char *n; int s; } k[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2},
      {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},     {"F32", 4},     {"F64", 8}, {"I64", 8},
      {"U64", 8}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (strcmp(d, k[i].n) == 0) return k[i].s;
  return 0;
}

static void shape_str(char *out, size_t n, const int64_t *shape, int ndim) {
  size_t o = (size_t)snprintf(out, n, "[");
  for (int d = 0; d < ndim && o < n; d++)
    o += (size_t)snprintf(out + o, n - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (o < n) snprintf(out + o, n - o, "]");
}

/* One header entry: dtype, shape and data_offsets well-formed and consistent. */
static mf_status parse_entry(hentry *h, const char *path, const char *key, json_t *v) {
  h->name = key;
  json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
         *off = json_object_get(v, "data_offsets");
  if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) ||
      json_array_size(off) != 2)
    return mf_error_set(MF_ERR_FORMAT, "%s: tensor \"%s\": needs dtype, shape and data_offsets "
                        "[begin, end]", path, key);
  h->dtype = json_string_value(dt);
  int64_t es = dtype_size(h->dtype);
  if (!es)
    return mf_error_set(MF_ERR_FORMAT, "%s: tensor \"%s\": unknown dtype \"%s\"", path, key, h->dtype);
  if (json_array_size(sh) > MAX_NDIM)
    return mf_error_set(MF_ERR_FORMAT, "%s: tensor \"%s\": %zu dims (at most %d)", path, key,
                        json_array_size(sh), MAX_NDIM);
  h->ndim = (int)json_array_size(sh);
  uint64_t numel = 1;
  for (int d = 0; d < h->ndim; d++) {
    json_t *x = json_array_get(sh, (size_t)d);
    if (!json_is_integer(x) || json_integer_value(x) < 0 ||
        (numel && (uint64_t)json_integer_value(x) > ((uint64_t)1 << 56) / numel))
      return mf_error_set(MF_ERR_FORMAT, "%s: tensor \"%s\": bad shape entry %d", path, key, d);
    h->shape[d] = json_integer_value(x);
    numel *= (uint64_t)h->shape[d];
  }
  json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
  if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
      json_integer_value(e) < json_integer_value(b))
    return mf_error_set(MF_ERR_FORMAT, "%s: tensor \"%s\": data_offsets must be integers "
                        "0 <= begin <= end", path, key);
  h->begin = (uint64_t)json_integer_value(b);
  h->end = (uint64_t)json_integer_value(e);
  if (h->end - h->begin != numel * (uint64_t)es)
    return mf_error_set(MF_ERR_FORMAT, "%s: tensor \"%s\": data_offsets span %llu bytes but %s "
                        "of that shape needs %llu", path, key,
                        (unsigned long long)(h->end - h->begin), h->dtype,
                        (unsigned long long)(numel * (uint64_t)es));
  return MF_OK;
}

static int by_begin(const void *a, const void *b) {
  const hentry *x = *(const hentry *const *)a, *y = *(const hentry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* Which table tensor a file key names (kind 0..2 and entry), or 0 when none. */
static int classify(const mf_params_table *t, const char *key, int *kind, const mf_param_entry **e) {
  for (int k = 2; k >= 0; k--) {
    size_t pl = strlen(k_prefix[k]);
    if (strncmp(key, k_prefix[k], pl) == 0 && (*e = mf_params_find(t, key + pl))) {
      *kind = k;
      return 1;
    }
  }
  return 0;
}

static mf_status parse_u64(const char *path, json_t *meta, const char *field, uint64_t *out) {
  json_t *v = json_object_get(meta, field);
  const char *s = json_string_value(v);
  char *end = NULL;
  errno = 0;
  unsigned long long x = s ? strtoull(s, &end, 10) : 0;
  if (!s || !*s || *end || errno || s[0] == '-')
    return mf_error_set(MF_ERR_FORMAT, "%s: metadata \"%s\" must be a decimal string", path, field);
  *out = (uint64_t)x;
  return MF_OK;
}

static int read_f32(FILE *f, mf_real *dst, int64_t n, float *chunk) {
  if (sizeof(mf_real) == sizeof(float)) return fread(dst, sizeof(float), (size_t)n, f) == (size_t)n;
  for (int64_t i = 0; i < n; i += CHUNK) {
    int64_t m = n - i < CHUNK ? n - i : CHUNK;
    if (fread(chunk, sizeof(float), (size_t)m, f) != (size_t)m) return 0;
    for (int64_t k = 0; k < m; k++) dst[i + k] = (mf_real)chunk[k];
  }
  return 1;
}

/* Everything about the file except the data: header, entries, table match, metadata. */
static mf_status check_header(const char *path, json_t *root, uint64_t data_len,
                              const mf_params_table *t, int want_kinds, hentry *ents, int n_ent,
                              const hentry **found, uint64_t *step, uint64_t *seed) {
  const char *key;
  json_t *v;
  int i = 0;
  mf_status st;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "__metadata__") == 0) continue;
    if ((st = parse_entry(&ents[i], path, key, v)) != MF_OK) return st;
    if (ents[i].end > data_len)
      return mf_error_set(MF_ERR_FORMAT, "%s: tensor \"%s\": data_offsets [%llu, %llu) run past "
                          "the end of the data (%llu bytes): truncated file?", path, key,
                          (unsigned long long)ents[i].begin, (unsigned long long)ents[i].end,
                          (unsigned long long)data_len);
    int kind;
    const mf_param_entry *e;
    if (!classify(t, key, &kind, &e))
      return mf_error_set(MF_ERR_FORMAT, "%s: tensor \"%s\" is not in the parameter table", path, key);
    i++;
  }
  /* every table tensor that is asked for: present, F32, the table's shape */
  for (int k = 0; k < want_kinds; k++)
    for (int j = 0; j < t->n; j++) {
      const mf_param_entry *e = &t->entries[j];
      char name[NAME_MAX_LEN];
      tensor_name(name, k, e);
      const hentry *h = NULL;
      for (int m = 0; m < n_ent && !h; m++)
        if (strcmp(ents[m].name, name) == 0) h = &ents[m];
      if (!h)
        return mf_error_set(MF_ERR_FORMAT, "%s: tensor \"%s\" is missing%s", path, name,
                            k ? " (no optimiser state in this file?)" : "");
      if (strcmp(h->dtype, "F32") != 0)
        return mf_error_set(MF_ERR_SHAPE, "%s: tensor \"%s\" has dtype %s, expected F32", path,
                            name, h->dtype);
      int same = h->ndim == e->ndim;
      for (int d = 0; d < e->ndim && same; d++) same = h->shape[d] == e->shape[d];
      if (!same) {
        char got[128], want[128];
        shape_str(got, sizeof got, h->shape, h->ndim);
        shape_str(want, sizeof want, e->shape, e->ndim);
        return mf_error_set(MF_ERR_SHAPE, "%s: tensor \"%s\" has shape %s, expected %s", path,
                            name, got, want);
      }
      found[k * t->n + j] = h;
    }
  /* offsets: sorted, not overlapping, covering the data exactly */
  const hentry **order = (const hentry **)found + 3 * t->n; /* scratch after the lookups */
  for (int m = 0; m < n_ent; m++) order[m] = &ents[m];
  qsort(order, (size_t)n_ent, sizeof *order, by_begin);
  uint64_t pos = 0;
  for (int m = 0; m < n_ent; m++) {
    if (order[m]->begin < pos)
      return mf_error_set(MF_ERR_FORMAT, "%s: tensors \"%s\" and \"%s\" overlap", path,
                          order[m - 1]->name, order[m]->name);
    if (order[m]->begin > pos)
      return mf_error_set(MF_ERR_FORMAT, "%s: bytes [%llu, %llu) before tensor \"%s\" belong to "
                          "no tensor", path, (unsigned long long)pos,
                          (unsigned long long)order[m]->begin, order[m]->name);
    pos = order[m]->end;
  }
  if (pos != data_len)
    return mf_error_set(MF_ERR_FORMAT, "%s: the file has %llu data bytes but its tensors cover "
                        "%llu", path, (unsigned long long)data_len, (unsigned long long)pos);
  /* metadata */
  json_t *meta = json_object_get(root, "__metadata__");
  if (!json_is_object(meta))
    return mf_error_set(MF_ERR_FORMAT, "%s: no __metadata__ (not a megafold checkpoint)", path);
  json_object_foreach(meta, key, v) {
    if (!json_is_string(v))
      return mf_error_set(MF_ERR_FORMAT, "%s: __metadata__ \"%s\" is not a string (safetensors "
                          "requires strings)", path, key);
  }
  const char *fmt = json_string_value(json_object_get(meta, "format"));
  const char *ver = json_string_value(json_object_get(meta, "format_version"));
  char want_ver[16];
  snprintf(want_ver, sizeof want_ver, "%d", MF_CKPT_FORMAT_VERSION);
  if (!fmt || strcmp(fmt, "megafold") != 0)
    return mf_error_set(MF_ERR_FORMAT, "%s: metadata format is \"%s\", expected \"megafold\"",
                        path, fmt ? fmt : "(none)");
  if (!ver || strcmp(ver, want_ver) != 0)
    return mf_error_set(MF_ERR_FORMAT, "%s: format_version \"%s\" is not supported (this build "
                        "reads %s)", path, ver ? ver : "(none)", want_ver);
  if ((st = parse_u64(path, meta, "step", step)) != MF_OK) return st;
  if ((st = parse_u64(path, meta, "seed", seed)) != MF_OK) return st;
  const char *cfg = json_string_value(json_object_get(meta, "config"));
  if (!cfg) return mf_error_set(MF_ERR_FORMAT, "%s: metadata has no \"config\"", path);
  return config_check(path, cfg, t);
}

mf_status mf_ckpt_load(const char *path, const mf_params_table *t, mf_real *params,
                       mf_real *adam_m, mf_real *adam_v, uint64_t *step, uint64_t *seed) {
  if (!path || !t || !params || !t->entries)
    return mf_error_set(MF_ERR_CONFIG, "checkpoint load: path, table and params are required");
  if ((adam_m == NULL) != (adam_v == NULL))
    return mf_error_set(MF_ERR_CONFIG, "checkpoint load %s: AdamW m and v go together", path);
  const int kinds = adam_m ? 3 : 1;
  mf_real *bufs[3] = {params, adam_m, adam_v};

  FILE *f = fopen(path, "rb");
  if (!f) return mf_error_set(MF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  char *hdr = NULL;
  json_t *root = NULL;
  hentry *ents = NULL;
  const hentry **found = NULL;
  float *chunk = NULL;
  mf_status st = MF_OK;
  struct stat sb;
  unsigned char len8[8];
  if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    st = mf_error_set(MF_ERR_IO, "%s: not a regular file", path);
    goto done;
  }
  uint64_t size = (uint64_t)sb.st_size, n = 0;
  if (size < 8 || fread(len8, 1, 8, f) != 8) {
    st = mf_error_set(MF_ERR_FORMAT, "%s: %llu bytes, too short for the 8-byte header length",
                      path, (unsigned long long)size);
    goto done;
  }
  for (int i = 0; i < 8; i++) n |= (uint64_t)len8[i] << (8 * i);
  if (n < 2 || n > MAX_HEADER || n > size - 8) {
    st = mf_error_set(MF_ERR_FORMAT, "%s: header length %llu is impossible for a file of %llu "
                      "bytes (limit %llu): truncated or not safetensors", path,
                      (unsigned long long)n, (unsigned long long)size,
                      (unsigned long long)MAX_HEADER);
    goto done;
  }
  hdr = mf_malloc((size_t)n + 1, "checkpoint header");
  if (!hdr) {
    st = MF_ERR_NOMEM;
    goto done;
  }
  if (fread(hdr, 1, (size_t)n, f) != (size_t)n) {
    st = mf_error_set(MF_ERR_IO, "%s: reading the %llu-byte header failed", path,
                      (unsigned long long)n);
    goto done;
  }
  hdr[n] = '\0';
  json_error_t jerr;
  if (hdr[0] != '{' || !(root = json_loadb(hdr, (size_t)n, JSON_REJECT_DUPLICATES, &jerr))) {
    st = mf_error_set(MF_ERR_FORMAT, "%s: the header is not a JSON object: %s", path,
                      hdr[0] != '{' ? "it does not begin with '{'" : jerr.text);
    goto done;
  }
  if (!json_is_object(root)) {
    st = mf_error_set(MF_ERR_FORMAT, "%s: the header is not a JSON object", path);
    goto done;
  }
  int n_ent = (int)json_object_size(root) - (json_object_get(root, "__metadata__") ? 1 : 0);
  ents = mf_malloc(sizeof(hentry) * (size_t)(n_ent + 1), "checkpoint entries");
  found = mf_calloc(sizeof(*found) * (size_t)(3 * t->n + n_ent + 1), "checkpoint lookup");
  chunk = sizeof(mf_real) == sizeof(float) ? NULL : mf_malloc(CHUNK * sizeof(float), "checkpoint chunk");
  if (!ents || !found || (sizeof(mf_real) != sizeof(float) && !chunk)) {
    st = MF_ERR_NOMEM;
    goto done;
  }
  uint64_t st_step = 0, st_seed = 0;
  st = check_header(path, root, size - 8 - n, t, kinds, ents, n_ent, found, &st_step, &st_seed);
  if (st != MF_OK) goto done;
  for (int k = 0; k < kinds; k++)
    for (int j = 0; j < t->n; j++) {
      const mf_param_entry *e = &t->entries[j];
      const hentry *h = found[k * t->n + j];
      if (fseeko(f, (off_t)(8 + n + h->begin), SEEK_SET) != 0 ||
          !read_f32(f, bufs[k] + e->offset, e->numel, chunk)) {
        st = mf_error_set(MF_ERR_IO, "%s: reading tensor \"%s\" failed (file changed while "
                          "loading?)", path, h->name);
        goto done;
      }
    }
  if (step) *step = st_step;
  if (seed) *seed = st_seed;
done:
  mf_free(chunk);
  mf_free(found);
  mf_free(ents);
  json_decref(root);
  mf_free(hdr);
  fclose(f);
  return st;
}
