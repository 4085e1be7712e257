/* features.c — the feature set container (named tensors of one entry) and its record
 * codec: zstd-compressed, crc32-checked, byte-deterministic. See features.h for the format.
 * Not here: the LMDB cache (cache.c), the featuriser (featurize.c), cropping (loader).
 *
 * Canonical form: the encoder writes exactly one byte string per set (features in the
 * order they were added, names and id zero-padded, unused dims 0, payloads packed at the
 * next 64-byte boundary with zero padding). The decoder accepts only that canonical form,
 * so encode(decode(record)) == record for every record it accepts. */
#include "data/features.h"

#include <stdio.h>
#include <string.h>

#include <zlib.h>
#include <zstd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "features.c writes tensor payloads in host order: little-endian hosts only"
#endif

#define REC_MAGIC "MFREC001"
#define REC_OUTER 40u    /* magic 8, version 4, flags 4, raw_len 8, zstd_len 8, 2 crcs */
#define RAW_HEAD 68u     /* u32 n_features + id[64] */
#define RAW_FEAT 96u     /* name 32, dtype 4, ndim 4, shape 40, offset 8, nbytes 8 */
#define PAY_ALIGN 64u
/* Upper bounds that keep a corrupt header from asking for absurd allocations. */
#define RAW_MAX ((uint64_t)1 << 36)     /* 64 GiB of raw features per entry */
#define FEAT_MAX 4096u                  /* features per set */

/* ------------------------------------------------------------------ the container */

void mf_features_init(mf_feature_set *fs, const char *id) {
  memset(fs, 0, sizeof *fs);
  if (id) snprintf(fs->id, sizeof fs->id, "%s", id);
}

void mf_features_free(mf_feature_set *fs) {
  if (!fs) return;
  for (int i = 0; i < fs->n; i++) mf_free(fs->f[i].data);
  mf_free(fs->f);
  memset(fs, 0, sizeof *fs);
}

const mf_feature *mf_features_get(const mf_feature_set *fs, const char *name) {
  for (int i = 0; i < fs->n; i++)
    if (strcmp(fs->f[i].name, name) == 0) return &fs->f[i];
  return NULL;
}

static int dtype_ok(uint32_t dt) { return dt <= (uint32_t)MF_U8; }

/* Bytes of a tensor; 0 with *ok = 0 on a negative dim or overflow past RAW_MAX. */
static uint64_t tensor_bytes(mf_dtype dt, int ndim, const int64_t *shape, int *ok) {
  uint64_t n = mf_dtype_size(dt);
  *ok = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0 || (uint64_t)shape[d] > RAW_MAX) {
      *ok = 0;
      return 0;
    }
    if (shape[d] == 0) n = 0;
    else if (n > RAW_MAX / (uint64_t)shape[d]) {
      *ok = 0;
      return 0;
    } else n *= (uint64_t)shape[d];
  }
  return n;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
  size_t k = (size_t)snprintf(buf, n, "(");
  for (int d = 0; d < ndim && k < n; d++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (k < n) snprintf(buf + k, n - k, ")");
}

void *mf_features_add(mf_feature_set *fs, const char *name, mf_dtype dt, int ndim,
                      const int64_t *shape, const void *data) {
  size_t nl = name ? strlen(name) : 0;
  if (nl == 0 || nl >= MF_FEAT_NAME_MAX) {
    mf_error_set(MF_ERR_CONFIG, "entry %s: feature name '%s' must have 1..%d characters",
                 fs->id, name ? name : "(null)", MF_FEAT_NAME_MAX - 1);
    return NULL;
  }
  if (mf_features_get(fs, name)) {
    mf_error_set(MF_ERR_CONFIG, "entry %s: duplicate feature '%s'", fs->id, name);
    return NULL;
  }
  if (!dtype_ok((uint32_t)dt)) {
    mf_error_set(MF_ERR_CONFIG, "entry %s: feature '%s': bad dtype %d", fs->id, name, (int)dt);
    return NULL;
  }
  if (ndim < 0 || ndim > MF_MAX_DIMS || (ndim > 0 && !shape)) {
    mf_error_set(MF_ERR_CONFIG, "entry %s: feature '%s': rank %d outside 0..%d", fs->id, name,
                 ndim, MF_MAX_DIMS);
    return NULL;
  }
  int ok;
  uint64_t nbytes = tensor_bytes(dt, ndim, shape, &ok);
  if (!ok) {
    char s[160];
    shape_str(s, sizeof s, ndim, shape);
    mf_error_set(MF_ERR_CONFIG, "entry %s: feature '%s': bad shape %s", fs->id, name, s);
    return NULL;
  }
  if (fs->n >= (int)FEAT_MAX) {
    mf_error_set(MF_ERR_CONFIG, "entry %s: more than %u features", fs->id, FEAT_MAX);
    return NULL;
  }
  if (fs->n == fs->cap) {
    int cap = fs->cap ? 2 * fs->cap : 16;
    mf_feature *nf = mf_malloc((size_t)cap * sizeof *nf, "feature set table");
    if (!nf) return NULL;
    if (fs->n) memcpy(nf, fs->f, (size_t)fs->n * sizeof *nf);
    mf_free(fs->f);
    fs->f = nf;
    fs->cap = cap;
  }
  void *p = mf_malloc((size_t)nbytes, name);
  if (!p) return NULL;
  if (data && nbytes) memcpy(p, data, (size_t)nbytes);
  else memset(p, 0, (size_t)nbytes);
  mf_feature *f = &fs->f[fs->n++];
  memset(f, 0, sizeof *f);
  memcpy(f->name, name, nl);
  f->dtype = dt;
  f->ndim = ndim;
  for (int d = 0; d < ndim; d++) f->shape[d] = shape[d];
  f->data = p;
  return p;
}

size_t mf_features_tensor_bytes(const mf_feature *f) {
  int ok;
  return (size_t)tensor_bytes(f->dtype, f->ndim, f->shape, &ok);
}

int64_t mf_features_tensor_numel(const mf_feature *f) {
  int64_t n = 1;
  for (int d = 0; d < f->ndim; d++) n *= f->shape[d];
  return n;
}

mf_status mf_features_expect(const mf_feature_set *fs, const char *name, mf_dtype dt, int ndim,
                             const int64_t *dims, const mf_feature **out) {
  if (out) *out = NULL;
  const mf_feature *f = mf_features_get(fs, name);
  char want[200], got[200];
  {
    size_t k = (size_t)snprintf(want, sizeof want, "%s (", mf_dtype_name(dt));
    for (int d = 0; d < ndim && k < sizeof want; d++) {
      if (dims && dims[d] >= 0)
        k += (size_t)snprintf(want + k, sizeof want - k, "%s%lld", d ? ", " : "",
                              (long long)dims[d]);
      else k += (size_t)snprintf(want + k, sizeof want - k, "%s*", d ? ", " : "");
    }
    if (k < sizeof want) snprintf(want + k, sizeof want - k, ")");
  }
  if (!f)
    return mf_error_set(MF_ERR_FORMAT, "entry %s: feature '%s' missing (expected %s)", fs->id,
                        name, want);
  int ok = f->dtype == dt && f->ndim == ndim;
  for (int d = 0; ok && d < ndim; d++)
    if (dims && dims[d] >= 0 && dims[d] != f->shape[d]) ok = 0;
  if (!ok) {
    size_t k = (size_t)snprintf(got, sizeof got, "%s ", mf_dtype_name(f->dtype));
    shape_str(got + k, sizeof got - k, f->ndim, f->shape);
    return mf_error_set(MF_ERR_FORMAT, "entry %s: feature '%s' is %s, expected %s", fs->id,
                        name, got, want);
  }
  if (out) *out = f;
  return MF_OK;
}

/* ------------------------------------------------------------------ byte helpers */

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static uint64_t align_pay(uint64_t x) { return (x + PAY_ALIGN - 1) & ~(uint64_t)(PAY_ALIGN - 1); }

uint32_t mf_features_crc32(const void *data, size_t n) {
  const uint8_t *p = data;
  uLong c = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
    c = crc32(c, p, k);
    p += k;
    n -= k;
  }
  return (uint32_t)c;
}

/* crc32 of the first 36 header bytes followed by the zstd bytes. */
static uint32_t outer_crc(const uint8_t *rec, size_t zlen) {
  uLong c = crc32(0L, Z_NULL, 0);
  c = crc32(c, rec, 36);
  const uint8_t *p = rec + REC_OUTER;
  while (zlen > 0) {
    uInt k = zlen > (1u << 30) ? (1u << 30) : (uInt)zlen;
    c = crc32(c, p, k);
    p += k;
    zlen -= k;
  }
  return (uint32_t)c;
}

/* ------------------------------------------------------------------ encode */

mf_status mf_features_encode(const mf_feature_set *fs, int zstd_level, uint8_t **out,
                             size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  if (zstd_level == 0) zstd_level = MF_FEATURES_ZSTD_DEFAULT;
  if (zstd_level < ZSTD_minCLevel() || zstd_level > ZSTD_maxCLevel())
    return mf_error_set(MF_ERR_CONFIG, "entry %s: zstd level %d outside %d..%d", fs->id,
                        zstd_level, ZSTD_minCLevel(), ZSTD_maxCLevel());
  if (memchr(fs->id, '\0', sizeof fs->id) == NULL)
    return mf_error_set(MF_ERR_CONFIG, "entry id not NUL-terminated within %d bytes",
                        MF_FEAT_ID_MAX);
  if (fs->n < 0 || (uint32_t)fs->n > FEAT_MAX)
    return mf_error_set(MF_ERR_CONFIG, "entry %s: %d features", fs->id, fs->n);

  /* layout */
  uint64_t pos = align_pay(RAW_HEAD + (uint64_t)fs->n * RAW_FEAT);
  uint64_t raw_len = RAW_HEAD + (uint64_t)fs->n * RAW_FEAT;
  for (int i = 0; i < fs->n; i++) {
    const mf_feature *f = &fs->f[i];
    int ok = dtype_ok((uint32_t)f->dtype) && f->ndim >= 0 && f->ndim <= MF_MAX_DIMS &&
             memchr(f->name, '\0', sizeof f->name) != NULL && f->name[0] != '\0';
    uint64_t nb = ok ? tensor_bytes(f->dtype, f->ndim, f->shape, &ok) : 0;
    if (!ok)
      return mf_error_set(MF_ERR_CONFIG, "entry %s: feature %d ('%.*s') has a bad name, dtype "
                          "or shape", fs->id, i, MF_FEAT_NAME_MAX - 1, f->name);
    pos = align_pay(pos);
    pos += nb;
    raw_len = pos;
    if (raw_len > RAW_MAX)
      return mf_error_set(MF_ERR_CONFIG, "entry %s: features larger than %llu bytes", fs->id,
                          (unsigned long long)RAW_MAX);
  }

  uint8_t *raw = mf_malloc((size_t)raw_len, "feature record (raw)");
  if (!raw) return MF_ERR_NOMEM;
  memset(raw, 0, (size_t)raw_len);
  put_u32(raw, (uint32_t)fs->n);
  memcpy(raw + 4, fs->id, strlen(fs->id));
  pos = RAW_HEAD + (uint64_t)fs->n * RAW_FEAT;
  for (int i = 0; i < fs->n; i++) {
    const mf_feature *f = &fs->f[i];
    int ok;
    uint64_t nb = tensor_bytes(f->dtype, f->ndim, f->shape, &ok);
    pos = align_pay(pos);
    uint8_t *h = raw + RAW_HEAD + (uint64_t)i * RAW_FEAT;
    memcpy(h, f->name, strlen(f->name));
    put_u32(h + 32, (uint32_t)f->dtype);
    put_u32(h + 36, (uint32_t)f->ndim);
    for (int d = 0; d < f->ndim; d++) put_u64(h + 40 + 8 * d, (uint64_t)f->shape[d]);
    put_u64(h + 80, pos);
    put_u64(h + 88, nb);
    if (nb) memcpy(raw + pos, f->data, (size_t)nb);
    pos += nb;
  }

  size_t bound = ZSTD_compressBound((size_t)raw_len);
  uint8_t *rec = mf_malloc(REC_OUTER + bound, "feature record");
  if (!rec) {
    mf_free(raw);
    return MF_ERR_NOMEM;
  }
  size_t zn = ZSTD_compress(rec + REC_OUTER, bound, raw, (size_t)raw_len, zstd_level);
  if (ZSTD_isError(zn)) {
    mf_status st = mf_error_set(MF_ERR_RUNTIME, "entry %s: zstd compression failed: %s", fs->id,
                                ZSTD_getErrorName(zn));
    mf_free(raw);
    mf_free(rec);
    return st;
  }
  memcpy(rec, REC_MAGIC, 8);
  put_u32(rec + 8, MF_FEATURES_VERSION);
  put_u32(rec + 12, 0);
  put_u64(rec + 16, raw_len);
  put_u64(rec + 24, (uint64_t)zn);
  put_u32(rec + 32, mf_features_crc32(raw, (size_t)raw_len));
  put_u32(rec + 36, outer_crc(rec, zn));
  mf_free(raw);
  /* the padding of the allocation past REC_OUTER + zn is never part of the record */
  *out = rec;
  *out_len = REC_OUTER + zn;
  return MF_OK;
}

/* ------------------------------------------------------------------ decode */

mf_status mf_features_peek(const uint8_t *rec, size_t len, const char *where,
                           mf_features_info *info) {
  memset(info, 0, sizeof *info);
  if (!where) where = "record";
  if (!rec || len < REC_OUTER)
    return mf_error_set(MF_ERR_FORMAT, "%s: record of %zu bytes is shorter than its %u-byte "
                        "header", where, len, REC_OUTER);
  if (memcmp(rec, REC_MAGIC, 8) != 0)
    return mf_error_set(MF_ERR_FORMAT, "%s: bad magic (not a megafold feature record)", where);
  uint64_t raw_len = get_u64(rec + 16), zlen = get_u64(rec + 24);
  if (zlen != (uint64_t)(len - REC_OUTER))
    return mf_error_set(MF_ERR_FORMAT, "%s: zstd_len %llu but %zu bytes follow the header",
                        where, (unsigned long long)zlen, len - REC_OUTER);
  if (outer_crc(rec, (size_t)zlen) != get_u32(rec + 36))
    return mf_error_set(MF_ERR_FORMAT, "%s: header/compressed-data checksum mismatch", where);
  uint32_t version = get_u32(rec + 8), flags = get_u32(rec + 12);
  if (version != MF_FEATURES_VERSION)
    return mf_error_set(MF_ERR_FORMAT, "%s: record version %u, this build reads %u", where,
                        version, MF_FEATURES_VERSION);
  if (flags != 0)
    return mf_error_set(MF_ERR_FORMAT, "%s: unknown flags 0x%x", where, flags);
  if (raw_len < RAW_HEAD || raw_len > RAW_MAX)
    return mf_error_set(MF_ERR_FORMAT, "%s: raw_len %llu outside %u..%llu", where,
                        (unsigned long long)raw_len, RAW_HEAD, (unsigned long long)RAW_MAX);
  info->version = version;
  info->raw_len = raw_len;
  info->zstd_len = zlen;
  info->raw_crc = get_u32(rec + 32);
  return MF_OK;
}

/* Verifies the raw (decompressed) bytes and fills fs; fs is initialised by the caller. */
static mf_status parse_raw(const uint8_t *raw, uint64_t raw_len, const char *where,
                           mf_feature_set *fs) {
  uint32_t n = get_u32(raw);
  if (n > FEAT_MAX || RAW_HEAD + (uint64_t)n * RAW_FEAT > raw_len)
    return mf_error_set(MF_ERR_FORMAT, "%s: n_features %u does not fit in %llu raw bytes",
                        where, n, (unsigned long long)raw_len);
  const uint8_t *idp = raw + 4;
  const uint8_t *nul = memchr(idp, 0, MF_FEAT_ID_MAX);
  if (!nul)
    return mf_error_set(MF_ERR_FORMAT, "%s: entry id not NUL-terminated", where);
  for (const uint8_t *q = nul; q < idp + MF_FEAT_ID_MAX; q++)
    if (*q) return mf_error_set(MF_ERR_FORMAT, "%s: non-zero padding after the entry id", where);
  memcpy(fs->id, idp, MF_FEAT_ID_MAX);

  uint64_t pos = RAW_HEAD + (uint64_t)n * RAW_FEAT; /* end of the previous field */
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *h = raw + RAW_HEAD + (uint64_t)i * RAW_FEAT;
    char name[MF_FEAT_NAME_MAX];
    memcpy(name, h, MF_FEAT_NAME_MAX);
    const char *nz = memchr(name, 0, MF_FEAT_NAME_MAX);
    if (!nz || nz == name)
      return mf_error_set(MF_ERR_FORMAT, "%s: feature %u: name empty or not NUL-terminated",
                          where, i);
    for (const char *q = nz; q < name + MF_FEAT_NAME_MAX; q++)
      if (*q)
        return mf_error_set(MF_ERR_FORMAT, "%s: feature %u ('%s'): non-zero padding after the "
                            "name", where, i, name);
    uint32_t dt = get_u32(h + 32), ndim = get_u32(h + 36);
    if (!dtype_ok(dt))
      return mf_error_set(MF_ERR_FORMAT, "%s: feature '%s': bad dtype %u", where, name, dt);
    if (ndim > MF_MAX_DIMS)
      return mf_error_set(MF_ERR_FORMAT, "%s: feature '%s': ndim %u > %d", where, name, ndim,
                          MF_MAX_DIMS);
    int64_t shape[MF_MAX_DIMS] = {0};
    for (uint32_t d = 0; d < MF_MAX_DIMS; d++) {
      uint64_t v = get_u64(h + 40 + 8 * d);
      if (d >= ndim && v != 0)
        return mf_error_set(MF_ERR_FORMAT, "%s: feature '%s': unused shape[%u] is %llu, not 0",
                            where, name, d, (unsigned long long)v);
      if (v > RAW_MAX)
        return mf_error_set(MF_ERR_FORMAT, "%s: feature '%s': shape[%u] = %llu", where, name, d,
                            (unsigned long long)v);
      shape[d] = (int64_t)v;
    }
    int ok;
    uint64_t want = tensor_bytes((mf_dtype)dt, (int)ndim, shape, &ok);
    uint64_t off = get_u64(h + 80), nb = get_u64(h + 88);
    if (!ok || nb != want)
      return mf_error_set(MF_ERR_FORMAT, "%s: feature '%s': nbytes %llu does not match its "
                          "shape and dtype", where, name, (unsigned long long)nb);
    if (off != align_pay(pos))
      return mf_error_set(MF_ERR_FORMAT, "%s: feature '%s': offset %llu, expected %llu", where,
                          name, (unsigned long long)off, (unsigned long long)align_pay(pos));
    if (off > raw_len || nb > raw_len - off)
      return mf_error_set(MF_ERR_FORMAT, "%s: feature '%s': bytes [%llu, %llu) outside the "
                          "%llu-byte payload", where, name, (unsigned long long)off,
                          (unsigned long long)(off + nb), (unsigned long long)raw_len);
    for (uint64_t q = pos; q < off; q++)
      if (raw[q])
        return mf_error_set(MF_ERR_FORMAT, "%s: feature '%s': non-zero padding before its "
                            "payload", where, name);
    if (mf_features_get(fs, name))
      return mf_error_set(MF_ERR_FORMAT, "%s: duplicate feature '%s'", where, name);
    if (!mf_features_add(fs, name, (mf_dtype)dt, (int)ndim, shape, raw + off)) {
      mf_status st = mf_error_set(MF_ERR_NOMEM, "%s: %s", where, mf_error_message());
      return st;
    }
    pos = off + nb;
  }
  if (pos != raw_len)
    return mf_error_set(MF_ERR_FORMAT, "%s: %llu trailing bytes after the last feature", where,
                        (unsigned long long)(raw_len - pos));
  return MF_OK;
}

mf_status mf_features_decode(const uint8_t *rec, size_t len, const char *where,
                             mf_feature_set *fs) {
  mf_features_init(fs, NULL);
  if (!where) where = "record";
  mf_features_info info;
  mf_status st = mf_features_peek(rec, len, where, &info);
  if (st != MF_OK) return st;
  const uint8_t *z = rec + REC_OUTER;
  size_t zlen = (size_t)info.zstd_len;
  unsigned long long fcs = ZSTD_getFrameContentSize(z, zlen);
  if (fcs == ZSTD_CONTENTSIZE_ERROR || fcs == ZSTD_CONTENTSIZE_UNKNOWN || fcs != info.raw_len)
    return mf_error_set(MF_ERR_FORMAT, "%s: zstd frame does not declare %llu bytes", where,
                        (unsigned long long)info.raw_len);
  size_t fsz = ZSTD_findFrameCompressedSize(z, zlen);
  if (ZSTD_isError(fsz) || fsz != zlen)
    return mf_error_set(MF_ERR_FORMAT, "%s: zstd data is not exactly one frame of %zu bytes",
                        where, zlen);
  uint8_t *raw = mf_malloc((size_t)info.raw_len, "feature record (raw)");
  if (!raw) return mf_error_set(MF_ERR_NOMEM, "%s: %s", where, mf_error_message());
  size_t got = ZSTD_decompress(raw, (size_t)info.raw_len, z, zlen);
  if (ZSTD_isError(got) || got != info.raw_len) {
    st = mf_error_set(MF_ERR_FORMAT, "%s: zstd decompression failed: %s", where,
                      ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short output");
  } else if (mf_features_crc32(raw, (size_t)info.raw_len) != info.raw_crc) {
    st = mf_error_set(MF_ERR_FORMAT, "%s: payload checksum mismatch", where);
  } else {
    st = parse_raw(raw, info.raw_len, where, fs);
  }
  mf_free(raw);
  if (st != MF_OK) mf_features_free(fs);
  return st;
}
