/* parity.c — the parity bundle writer (see parity.h): tensors and metadata collected in
 * memory, then one safetensors file written atomically (core/atomic_file.h). The JSON
 * header is built by hand (names and values escaped), so this file needs no JSON library.
 * Not a reader. */
#include "model/parity.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "ops/dropout.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "parity.c writes F32 data in host byte order: little-endian hosts only"
#endif

#define MAX_BYTES ((int64_t)1 << 46) /* one tensor: far beyond any parity problem */

typedef enum { DT_F32 = 0, DT_U8 = 1 } dtype;

typedef struct {
  char *name;
  dtype dt;
  int ndim;
  int64_t shape[MF_PARITY_MAX_DIMS];
  int64_t numel;
  void *data; /* numel floats or bytes */
} tensor;

typedef struct {
  char *key, *value;
} meta;

struct mf_parity {
  tensor *t;
  int64_t n, cap;
  meta *m;
  int64_t n_meta, cap_meta;
};

static char *dup_str(const char *s, const char *what) {
  size_t n = strlen(s) + 1;
  char *d = mf_malloc(n, what);
  if (d) memcpy(d, s, n);
  return d;
}

mf_status mf_parity_open(mf_parity **b) {
  *b = mf_calloc(sizeof(mf_parity), "parity bundle");
  return *b ? MF_OK : MF_ERR_NOMEM;
}

void mf_parity_free(mf_parity *b) {
  if (!b) return;
  for (int64_t i = 0; i < b->n; i++) {
    mf_free(b->t[i].name);
    mf_free(b->t[i].data);
  }
  for (int64_t i = 0; i < b->n_meta; i++) {
    mf_free(b->m[i].key);
    mf_free(b->m[i].value);
  }
  mf_free(b->t);
  mf_free(b->m);
  mf_free(b);
}

/* Validates name and shape, appends an entry with room for the data (*out). */
static mf_status add_entry(mf_parity *b, const char *name, int ndim, const int64_t *shape,
                           dtype dt, tensor **out) {
  if (!b || !name || !*name)
    return mf_error_set(MF_ERR_CONFIG, "parity bundle: a tensor needs a non-empty name");
  if (!strcmp(name, "__metadata__"))
    return mf_error_set(MF_ERR_CONFIG, "parity bundle: \"__metadata__\" is not a tensor name");
  if (ndim < 0 || ndim > MF_PARITY_MAX_DIMS || (ndim > 0 && !shape))
    return mf_error_set(MF_ERR_CONFIG, "parity bundle: tensor \"%s\": %d dims (0 to %d)", name,
                        ndim, MF_PARITY_MAX_DIMS);
  for (int64_t i = 0; i < b->n; i++)
    if (!strcmp(b->t[i].name, name))
      return mf_error_set(MF_ERR_CONFIG, "parity bundle: tensor \"%s\" added twice", name);
  int64_t numel = 1, esize = dt == DT_F32 ? 4 : 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0 || (shape[d] > 0 && numel > MAX_BYTES / esize / shape[d]))
      return mf_error_set(MF_ERR_CONFIG, "parity bundle: tensor \"%s\": bad or too large "
                          "dim %d (%lld)", name, d, (long long)shape[d]);
    numel *= shape[d];
  }
  mf_status st = mf_grow((void **)&b->t, &b->cap, b->n + 1, sizeof(tensor), "parity tensors");
  if (st != MF_OK) return st;
  tensor *t = &b->t[b->n];
  memset(t, 0, sizeof *t);
  t->name = dup_str(name, "parity tensor name");
  t->data = mf_malloc((size_t)(numel * esize > 0 ? numel * esize : 1), "parity tensor data");
  if (!t->name || !t->data) {
    mf_free(t->name);
    mf_free(t->data);
    return MF_ERR_NOMEM;
  }
  t->dt = dt;
  t->ndim = ndim;
  for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
  t->numel = numel;
  b->n++;
  *out = t;
  return MF_OK;
}

mf_status mf_parity_add_f32(mf_parity *b, const char *name, int ndim, const int64_t *shape,
                            const mf_real *data) {
  tensor *t;
  mf_status st = add_entry(b, name, ndim, shape, DT_F32, &t);
  if (st != MF_OK) return st;
  float *f = t->data;
  for (int64_t i = 0; i < t->numel; i++) f[i] = (float)data[i];
  return MF_OK;
}

mf_status mf_parity_add_f32_raw(mf_parity *b, const char *name, int ndim, const int64_t *shape,
                                const float *data) {
  tensor *t;
  mf_status st = add_entry(b, name, ndim, shape, DT_F32, &t);
  if (st != MF_OK) return st;
  memcpy(t->data, data, (size_t)t->numel * sizeof(float));
  return MF_OK;
}

mf_status mf_parity_add_u8(mf_parity *b, const char *name, int ndim, const int64_t *shape,
                           const uint8_t *data) {
  tensor *t;
  mf_status st = add_entry(b, name, ndim, shape, DT_U8, &t);
  if (st != MF_OK) return st;
  memcpy(t->data, data, (size_t)t->numel);
  return MF_OK;
}

mf_status mf_parity_meta(mf_parity *b, const char *key, const char *value) {
  if (!b || !key || !*key || !value)
    return mf_error_set(MF_ERR_CONFIG, "parity bundle: metadata needs a non-empty key and a value");
  char *v = dup_str(value, "parity metadata value");
  if (!v) return MF_ERR_NOMEM;
  for (int64_t i = 0; i < b->n_meta; i++)
    if (!strcmp(b->m[i].key, key)) {
      mf_free(b->m[i].value);
      b->m[i].value = v;
      return MF_OK;
    }
  char *k = dup_str(key, "parity metadata key");
  mf_status st = k ? mf_grow((void **)&b->m, &b->cap_meta, b->n_meta + 1, sizeof(meta),
                             "parity metadata")
                   : MF_ERR_NOMEM;
  if (st != MF_OK) {
    mf_free(k);
    mf_free(v);
    return st;
  }
  b->m[b->n_meta].key = k;
  b->m[b->n_meta].value = v;
  b->n_meta++;
  return MF_OK;
}

/* p_drop as a JSON real that always has a '.' or an exponent (as jansson writes reals). */
static void real_str(char *out, size_t n, double x) {
  snprintf(out, n, "%.17g", x);
  if (!strpbrk(out, ".eEn")) strncat(out, ".0", n - strlen(out) - 1);
}

mf_status mf_parity_meta_std(mf_parity *b, const mf_params_table *t, int N, int training,
                             const char *producer) {
  if (!t || N < 1 || !producer)
    return mf_error_set(MF_ERR_CONFIG, "parity bundle: standard metadata needs a table, N >= 1 "
                        "and a producer name");
  const mf_pairformer_config *c = &t->config;
  char cfg[512], pd[40], num[32];
  real_str(pd, sizeof pd, c->p_drop);
  /* the checkpoint's config string: compact, keys sorted */
  snprintf(cfg, sizeof cfg,
           "{\"pairformer\":{\"L\":%d,\"c_mul\":%d,\"c_s\":%d,\"c_z\":%d,\"d_s\":%d,\"d_tri\":%d,"
           "\"h_s\":%d,\"h_tri\":%d,\"n_trans\":%d,\"p_drop\":%s}}",
           t->L, c->c_mul, c->c_s, c->c_z, c->d_s, c->d_tri, c->h_s, c->h_tri, c->n_trans, pd);
  snprintf(num, sizeof num, "%d", N);
  mf_status st;
  if ((st = mf_parity_meta(b, "format", "megafold-parity")) != MF_OK) return st;
  if ((st = mf_parity_meta(b, "config", cfg)) != MF_OK) return st;
  if ((st = mf_parity_meta(b, "N", num)) != MF_OK) return st;
  if ((st = mf_parity_meta(b, "training", training ? "1" : "0")) != MF_OK) return st;
  return mf_parity_meta(b, "producer", producer);
}

/* One of flat_r (mf_real) or flat_f (float) is given. */
static mf_status add_params(mf_parity *b, const char *prefix, const mf_params_table *t,
                            const mf_real *flat_r, const float *flat_f) {
  if (!t || !t->entries || (!flat_r && !flat_f) || !prefix)
    return mf_error_set(MF_ERR_CONFIG, "parity bundle: add_params needs a prefix, table and buffer");
  for (int i = 0; i < t->n; i++) {
    const mf_param_entry *e = &t->entries[i];
    char name[MF_PARAMS_NAME_MAX + 64];
    snprintf(name, sizeof name, "%s%s", prefix, e->name);
    mf_status st = flat_r ? mf_parity_add_f32(b, name, e->ndim, e->shape, flat_r + e->offset)
                          : mf_parity_add_f32_raw(b, name, e->ndim, e->shape, flat_f + e->offset);
    if (st != MF_OK) return st;
  }
  return MF_OK;
}

mf_status mf_parity_add_params(mf_parity *b, const char *prefix, const mf_params_table *t,
                               const mf_real *flat) {
  return add_params(b, prefix, t, flat, NULL);
}

mf_status mf_parity_add_params_f32(mf_parity *b, const char *prefix, const mf_params_table *t,
                                   const float *flat) {
  return add_params(b, prefix, t, NULL, flat);
}

mf_status mf_parity_add_dropout(mf_parity *b, const mf_params_table *t, int N, mf_stack_rng rng) {
  if (!t || N < 1) return mf_error_set(MF_ERR_CONFIG, "parity bundle: dropout needs a table and N >= 1");
  if (!rng.training) return MF_OK;
  const int Cz = t->config.c_z;
  mf_real *mask = mf_malloc((size_t)N * Cz * sizeof(mf_real), "parity dropout mask");
  if (!mask) return MF_ERR_NOMEM;
  mf_status st = MF_OK;
  const int64_t shape[2] = {N, Cz};
  for (int l = 0; l < t->L && st == MF_OK; l++)
    for (int k = 0; k < 4 && st == MF_OK; k++) {
      /* as pairformer.c drop_mask for block l, sub-layer k */
      mf_dropout_mask(mask, N, Cz, t->config.p_drop, rng.seed,
                      mf_rng_stream(rng.step, MF_RNG_DROPOUT, 4 * (uint32_t)l + (uint32_t)k));
      char name[48];
      snprintf(name, sizeof name, "drop.%d.%d", l, k);
      st = mf_parity_add_f32(b, name, 2, shape, mask);
    }
  mf_free(mask);
  return st;
}

/* ------------------------------------------------------------------ header */

typedef struct {
  char *s;
  int64_t n, cap;
  int bad;
} sbuf;

static void put(sbuf *o, const char *s, size_t n) {
  if (o->bad) return;
  if (mf_grow((void **)&o->s, &o->cap, o->n + (int64_t)n + 1, 1, "parity header") != MF_OK) {
    o->bad = 1;
    return;
  }
  memcpy(o->s + o->n, s, n);
  o->n += (int64_t)n;
  o->s[o->n] = '\0';
}

static void puts_(sbuf *o, const char *s) { put(o, s, strlen(s)); }

/* s as a JSON string literal. */
static void put_json_str(sbuf *o, const char *s) {
  puts_(o, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char esc[8];
    if (*p == '"' || *p == '\\') {
      esc[0] = '\\';
      esc[1] = (char)*p;
      put(o, esc, 2);
    } else if (*p < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", *p);
      puts_(o, esc);
    } else {
      put(o, (const char *)p, 1);
    }
  }
  puts_(o, "\"");
}

/* Data order: F32 tensors in the order added, then U8 (every F32 tensor stays 4-aligned). */
static mf_status build_header(const mf_parity *b, sbuf *o) {
  puts_(o, "{\"__metadata__\":{");
  for (int64_t i = 0; i < b->n_meta; i++) {
    if (i) puts_(o, ",");
    put_json_str(o, b->m[i].key);
    puts_(o, ":");
    put_json_str(o, b->m[i].value);
  }
  puts_(o, "}");
  int64_t off = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int64_t i = 0; i < b->n; i++) {
      const tensor *t = &b->t[i];
      if ((int)t->dt != pass) continue;
      int64_t bytes = t->numel * (t->dt == DT_F32 ? 4 : 1);
      char num[64];
      puts_(o, ",");
      put_json_str(o, t->name);
      puts_(o, t->dt == DT_F32 ? ":{\"dtype\":\"F32\",\"shape\":[" : ":{\"dtype\":\"U8\",\"shape\":[");
      for (int d = 0; d < t->ndim; d++) {
        snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        puts_(o, num);
      }
      snprintf(num, sizeof num, "],\"data_offsets\":[%lld,%lld]}", (long long)off,
               (long long)(off + bytes));
      puts_(o, num);
      off += bytes;
    }
  puts_(o, "}");
  return o->bad ? MF_ERR_NOMEM : MF_OK;
}

/* ------------------------------------------------------------------ write */

/* What the atomic writer puts in the file: the 8-byte header length, the header padded
 * with spaces to plen, then the F32 tensors' data and the U8 tensors' data, each in order. */
typedef struct {
  const mf_parity *b;
  const char *hdr;
  size_t hlen, plen;
} write_ctx;

static int write_contents(FILE *f, void *ctx) {
  const write_ctx *c = ctx;
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)c->plen >> (8 * i));
  int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(c->hdr, 1, c->hlen, f) == c->hlen;
  for (size_t i = c->hlen; i < c->plen && ok; i++) ok = fputc(' ', f) != EOF;
  for (int pass = 0; pass < 2 && ok; pass++)
    for (int64_t i = 0; i < c->b->n && ok; i++) {
      const tensor *t = &c->b->t[i];
      if ((int)t->dt != pass) continue;
      size_t bytes = (size_t)t->numel * (t->dt == DT_F32 ? 4 : 1);
      ok = fwrite(t->data, 1, bytes, f) == bytes;
    }
  return ok;
}

mf_status mf_parity_write(const mf_parity *b, const char *path) {
  if (!b || !path || !*path)
    return mf_error_set(MF_ERR_CONFIG, "parity bundle: write needs a bundle and a path");
  sbuf hdr = {0};
  mf_status st = build_header(b, &hdr);
  if (st != MF_OK) {
    mf_free(hdr.s);
    return mf_error_set(MF_ERR_NOMEM, "parity bundle %s: building the header failed", path);
  }
  size_t hlen = (size_t)hdr.n;
  write_ctx c = {b, hdr.s, hlen, (hlen + 7) / 8 * 8}; /* data starts 8-aligned */
  st = mf_atomic_write_file(path, write_contents, &c, NULL, NULL);
  mf_free(hdr.s);
  return st;
}
