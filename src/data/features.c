/* features.c — the feature set container (named tensors of one entry) and its record
 * codec: zstd frames (large row-major tensors in row blocks), one crc32c over the header
 * and every compressed byte, byte-deterministic. See features.h
 * for the format. Not here: the LMDB cache (cache.c), the featuriser (featurize.c),
 * cropping (crop.c).
 *
 * Canonical form: the encoder writes exactly one byte string per set (features in the
 * order they were added, names and id zero-padded, unused dims 0, payloads packed at the
 * next 64-byte boundary with zero padding, frames cut by the rule of features.h). The
 * decoder accepts only that canonical form, so encode(decode(record)) == record for every
 * record it accepts. A reader (mf_features_reader) decodes a record partially: the plain
 * frames always, the row blocks of a large tensor only when asked for their rows. */
#include "data/features.h"

#include <stdio.h>
#include <string.h>

#include <zlib.h>
#include <zstd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "features.c writes tensor payloads in host order: little-endian hosts only"
#endif

#define REC_MAGIC "MFREC001"
#define REC_OUTER 40u    /* magic 8, version 4, flags 4, raw_len 8, body_len 8, n_frames 4, crc 4 */
#define FRAME_ENTRY 4u   /* u32 compressed bytes per frame in the frame table */
#define BLOCK_MIN ((uint64_t)256 << 10) /* tensors of at least this many bytes ... */
/* ... are cut into frames of R rows: about BLOCK_DENSE bytes, or BLOCK_SPARSE bytes for tensors
 * of >= BLOCK_MANY_ROWS rows (deep MSAs, of which a step keeps a small random fraction of
 * rows: small frames waste less; a frame costs ~1 us to start) */
#define BLOCK_DENSE 32768u
#define BLOCK_SPARSE 512u
#define BLOCK_MANY_ROWS 2048u
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
  if (fs->borrowed) { /* a reader's view: the reader owns the table and the data */
    memset(fs, 0, sizeof *fs);
    return;
  }
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
  if (fs->borrowed) {
    mf_error_set(MF_ERR_CONFIG, "entry %s: feature '%s' added to a reader's read-only view",
                 fs->id, name ? name : "(null)");
    return NULL;
  }
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
  int ok = f && f->dtype == dt && f->ndim == ndim;
  for (int d = 0; ok && d < ndim; d++)
    if (dims && dims[d] >= 0 && dims[d] != f->shape[d]) ok = 0;
  if (ok) { /* the messages below are built only on a mismatch */
    if (out) *out = f;
    return MF_OK;
  }
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
  size_t k = (size_t)snprintf(got, sizeof got, "%s ", mf_dtype_name(f->dtype));
  shape_str(got + k, sizeof got - k, f->ndim, f->shape);
  return mf_error_set(MF_ERR_FORMAT, "entry %s: feature '%s' is %s, expected %s", fs->id, name,
                      got, want);
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

/* crc32c (Castagnoli, reflected 0x82F63B78): SSE4.2's crc32 instruction where the CPU has
 * it (several times zlib's crc32), else a table; the same value either way. */
#define CRC_C1(c) (((c) >> 1) ^ (((c) & 1u) * 0x82F63B78u))
#define CRC_C8(c) CRC_C1(CRC_C1(CRC_C1(CRC_C1(CRC_C1(CRC_C1(CRC_C1(CRC_C1(c))))))))
#define CRC_R4(n) CRC_C8(n##u), CRC_C8(n##u + 1u), CRC_C8(n##u + 2u), CRC_C8(n##u + 3u)
#define CRC_R16(n) CRC_R4(n), CRC_R4(n + 4), CRC_R4(n + 8), CRC_R4(n + 12)
#define CRC_R64(n) CRC_R16(n), CRC_R16(n + 16), CRC_R16(n + 32), CRC_R16(n + 48)
static const uint32_t k_crc32c[256] = {CRC_R64(0), CRC_R64(64), CRC_R64(128), CRC_R64(192)};

static uint32_t crc32c_table(uint32_t c, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) c = k_crc32c[(c ^ p[i]) & 0xffu] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t c, const uint8_t *p,
                                                             size_t n) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
  }
  uint32_t c32 = (uint32_t)c64;
  for (; n > 0; n--, p++) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}
static uint32_t crc32c_upd(uint32_t c, const uint8_t *p, size_t n) {
  return __builtin_cpu_supports("sse4.2") ? crc32c_hw(c, p, n) : crc32c_table(c, p, n);
}
/* Three streams over p[0, t), p[t, 2t), p[2t, 3t) (t a multiple of 8), the first starting
 * from register a0: c[0] and c[1] finished crcs of the first two, c[2] the running register
 * of the third. */
__attribute__((target("sse4.2"))) static void crc32c_3(uint32_t a0, const uint8_t *p,
                                                       size_t t, uint32_t c[3]) {
  uint64_t a = a0, b = 0xffffffffu, d = 0xffffffffu;
  for (size_t i = 0; i < t; i += 8) {
    uint64_t x, y, z;
    memcpy(&x, p + i, 8);
    memcpy(&y, p + t + i, 8);
    memcpy(&z, p + 2 * t + i, 8);
    a = _mm_crc32_u64(a, x);
    b = _mm_crc32_u64(b, y);
    d = _mm_crc32_u64(d, z);
  }
  c[0] = ~(uint32_t)a, c[1] = ~(uint32_t)b, c[2] = (uint32_t)d;
}
#else
static uint32_t crc32c_upd(uint32_t c, const uint8_t *p, size_t n) {
  return crc32c_table(c, p, n);
}
#endif

/* a * b modulo the crc32c polynomial (reflected bit order: x^0 is the top bit). */
static uint32_t crc_mulmod(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = b & 1 ? (b >> 1) ^ 0x82F63B78u : b >> 1;
  }
  return p;
}

/* x^(2^k) modulo the polynomial, k = 0..30 (the sequence repeats with period 31). */
static const uint32_t k_x2n[31] = {
    0x40000000u, 0x20000000u, 0x08000000u, 0x00800000u, 0x00008000u, 0x82f63b78u,
    0x6ea2d55cu, 0x18b8ea18u, 0x510ac59au, 0xb82be955u, 0xb8fdb1e7u, 0x88e56f72u,
    0x74c360a4u, 0xe4172b16u, 0x0d65762au, 0x35d73a62u, 0x28461564u, 0xbf455269u,
    0xe2ea32dcu, 0xfe7740e6u, 0xf946610bu, 0x3c204f8fu, 0x538586e3u, 0x59726915u,
    0x734d5309u, 0xbc1ac763u, 0x7d0722ccu, 0xd289cabeu, 0xe94ca9bcu, 0x05b74f3fu,
    0xa51e1f42u};

/* crc32c(A ‖ B) from crc32c(A), crc32c(B) and |B| (both finished, i.e. standard values):
 * crc(A) shifted by x^(8 |B|), plus crc(B). */
static uint32_t crc32c_combine(uint32_t ca, uint32_t cb, size_t nb) {
  uint32_t x = 1u << 31; /* x^0 */
  int k = 3;             /* 8 |B| = |B| << 3 */
  for (uint64_t v = nb; v; v >>= 1, k++)
    if (v & 1) x = crc_mulmod(k_x2n[k % 31], x);
  return crc_mulmod(x, ca) ^ cb;
}

/* crc32c of the first 36 header bytes followed by the body (frame table and frames). A
 * large body: three independent streams over thirds (the instruction's latency hides),
 * combined. */
static uint32_t outer_crc(const uint8_t *rec, size_t body) {
  const uint8_t *p = rec + REC_OUTER;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (body >= 4096 && __builtin_cpu_supports("sse4.2")) {
    size_t third = body / 3 / 8 * 8;
    uint32_t c[3];
    crc32c_3(crc32c_hw(0xffffffffu, rec, 36), p, third, c);
    uint32_t tail = ~crc32c_hw(c[2], p + 3 * third, body - 3 * third); /* rest of third 3 */
    return crc32c_combine(crc32c_combine(c[0], c[1], third), tail, body - 2 * third);
  }
#endif
  return ~crc32c_upd(crc32c_upd(0xffffffffu, rec, 36), p, body);
}

/* ------------------------------------------------------------------ segmentation */

/* One table row as the codec needs it. */
typedef struct {
  uint64_t off, nb, rows; /* rows = shape[0] (1 for rank 0) */
} desc;

/* A raw range stored as one zstd frame: plain (feat = -1) or rows [row0, row0 + nrows) of
 * blocked feature feat. */
typedef struct {
  uint64_t off, len;
  int32_t feat;
  uint64_t row0, nrows;
} seg;

static int is_blocked(const desc *d) { return d->rows >= 2 && d->nb >= BLOCK_MIN; }

static uint64_t rows_per_block(const desc *d) {
  uint64_t rb = d->nb / d->rows;
  uint64_t target = d->rows >= BLOCK_MANY_ROWS ? BLOCK_SPARSE : BLOCK_DENSE;
  uint64_t r = rb ? target / rb : 1;
  return r < 1 ? 1 : r;
}

/* Number of segments of a table (n features, raw_len), writing them to out when not NULL. */
static uint64_t segment(const desc *d, uint32_t n, uint64_t raw_len, seg *out) {
  uint64_t k = 0, plain = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (!is_blocked(&d[i])) continue;
    if (d[i].off > plain) {
      if (out) out[k] = (seg){plain, d[i].off - plain, -1, 0, 0};
      k++;
    }
    uint64_t R = rows_per_block(&d[i]), rb = d[i].nb / d[i].rows;
    for (uint64_t r = 0; r < d[i].rows; r += R) {
      uint64_t nr = d[i].rows - r < R ? d[i].rows - r : R;
      if (out) out[k] = (seg){d[i].off + r * rb, nr * rb, (int32_t)i, r, nr};
      k++;
    }
    plain = d[i].off + d[i].nb;
  }
  if (raw_len > plain) {
    if (out) out[k] = (seg){plain, raw_len - plain, -1, 0, 0};
    k++;
  }
  return k;
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
  desc *d = mf_malloc((size_t)(fs->n + 1) * sizeof *d, "feature record (table)");
  if (!d) return MF_ERR_NOMEM;
  uint64_t pos = RAW_HEAD + (uint64_t)fs->n * RAW_FEAT;
  uint64_t raw_len = pos;
  for (int i = 0; i < fs->n; i++) {
    const mf_feature *f = &fs->f[i];
    int ok = dtype_ok((uint32_t)f->dtype) && f->ndim >= 0 && f->ndim <= MF_MAX_DIMS &&
             memchr(f->name, '\0', sizeof f->name) != NULL && f->name[0] != '\0';
    uint64_t nb = ok ? tensor_bytes(f->dtype, f->ndim, f->shape, &ok) : 0;
    if (!ok) {
      mf_free(d);
      return mf_error_set(MF_ERR_CONFIG, "entry %s: feature %d ('%.*s') has a bad name, dtype "
                          "or shape", fs->id, i, MF_FEAT_NAME_MAX - 1, f->name);
    }
    pos = align_pay(pos);
    d[i] = (desc){pos, nb, f->ndim ? (uint64_t)f->shape[0] : 1};
    pos += nb;
    raw_len = pos;
    if (raw_len > RAW_MAX) {
      mf_free(d);
      return mf_error_set(MF_ERR_CONFIG, "entry %s: features larger than %llu bytes", fs->id,
                          (unsigned long long)RAW_MAX);
    }
  }

  uint8_t *raw = mf_malloc((size_t)raw_len, "feature record (raw)");
  uint64_t nseg = segment(d, (uint32_t)fs->n, raw_len, NULL);
  seg *sg = mf_malloc((size_t)nseg * sizeof *sg, "feature record (frames)");
  if (!raw || !sg) {
    mf_free(d), mf_free(raw), mf_free(sg);
    return MF_ERR_NOMEM;
  }
  segment(d, (uint32_t)fs->n, raw_len, sg);
  memset(raw, 0, (size_t)raw_len);
  put_u32(raw, (uint32_t)fs->n);
  memcpy(raw + 4, fs->id, strlen(fs->id));
  for (int i = 0; i < fs->n; i++) {
    const mf_feature *f = &fs->f[i];
    uint8_t *h = raw + RAW_HEAD + (uint64_t)i * RAW_FEAT;
    memcpy(h, f->name, strlen(f->name));
    put_u32(h + 32, (uint32_t)f->dtype);
    put_u32(h + 36, (uint32_t)f->ndim);
    for (int dd = 0; dd < f->ndim; dd++) put_u64(h + 40 + 8 * dd, (uint64_t)f->shape[dd]);
    put_u64(h + 80, d[i].off);
    put_u64(h + 88, d[i].nb);
    if (d[i].nb) memcpy(raw + d[i].off, f->data, (size_t)d[i].nb);
  }
  mf_free(d);

  size_t cap = REC_OUTER + (size_t)nseg * FRAME_ENTRY;
  for (uint64_t k = 0; k < nseg; k++) cap += ZSTD_compressBound((size_t)sg[k].len);
  uint8_t *rec = mf_malloc(cap, "feature record");
  ZSTD_CCtx *cc = ZSTD_createCCtx();
  mf_status st = MF_OK;
  if (!rec || !cc) st = mf_error_set(MF_ERR_NOMEM, "entry %s: record buffers", fs->id);
  size_t zr = 0;
  if (st == MF_OK) {
    zr = ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, zstd_level);
    /* no per-frame content checksum (XXH64 costs ~10% of a step): the crc32c covers every
     * stored byte already */
    if (!ZSTD_isError(zr)) zr = ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 0);
  }
  size_t zpos = REC_OUTER + (size_t)nseg * FRAME_ENTRY;
  for (uint64_t k = 0; st == MF_OK && !ZSTD_isError(zr) && k < nseg; k++) {
    zr = ZSTD_compress2(cc, rec + zpos, cap - zpos, raw + sg[k].off, (size_t)sg[k].len);
    if (ZSTD_isError(zr)) break;
    if (zr > UINT32_MAX) {
      st = mf_error_set(MF_ERR_CONFIG, "entry %s: a compressed frame over 4 GiB", fs->id);
      break;
    }
    put_u32(rec + REC_OUTER + k * FRAME_ENTRY, (uint32_t)zr);
    zpos += zr;
  }
  if (st == MF_OK && ZSTD_isError(zr))
    st = mf_error_set(MF_ERR_RUNTIME, "entry %s: zstd compression failed: %s", fs->id,
                      ZSTD_getErrorName(zr));
  ZSTD_freeCCtx(cc);
  mf_free(raw), mf_free(sg);
  if (st != MF_OK) {
    mf_free(rec);
    return st;
  }
  memcpy(rec, REC_MAGIC, 8);
  put_u32(rec + 8, MF_FEATURES_VERSION);
  put_u32(rec + 12, 0);
  put_u64(rec + 16, raw_len);
  put_u64(rec + 24, (uint64_t)(zpos - REC_OUTER));
  put_u32(rec + 32, (uint32_t)nseg);
  put_u32(rec + 36, outer_crc(rec, zpos - REC_OUTER));
  /* the padding of the allocation past zpos is never part of the record */
  *out = rec;
  *out_len = zpos;
  return MF_OK;
}

/* ------------------------------------------------------------------ decode: header */

mf_status mf_features_peek(const uint8_t *rec, size_t len, const char *where,
                           mf_features_info *info) {
  memset(info, 0, sizeof *info);
  if (!where) where = "record";
  if (!rec || len < REC_OUTER)
    return mf_error_set(MF_ERR_FORMAT, "%s: record of %zu bytes is shorter than its %u-byte "
                        "header", where, len, REC_OUTER);
  if (memcmp(rec, REC_MAGIC, 8) != 0)
    return mf_error_set(MF_ERR_FORMAT, "%s: bad magic (not a megafold feature record)", where);
  uint64_t raw_len = get_u64(rec + 16), blen = get_u64(rec + 24);
  if (blen != (uint64_t)(len - REC_OUTER))
    return mf_error_set(MF_ERR_FORMAT, "%s: zstd_len %llu but %zu bytes follow the header",
                        where, (unsigned long long)blen, len - REC_OUTER);
  if (outer_crc(rec, (size_t)blen) != get_u32(rec + 36))
    return mf_error_set(MF_ERR_FORMAT, "%s: header/compressed-data checksum mismatch", where);
  uint32_t version = get_u32(rec + 8), flags = get_u32(rec + 12);
  if (version != MF_FEATURES_VERSION)
    return mf_error_set(MF_ERR_FORMAT, "%s: record version %u, this build reads %u%s", where,
                        version, MF_FEATURES_VERSION,
                        version < MF_FEATURES_VERSION ? " (an older cache: rebuild it with "
                                                        "megafold prep)" : "");
  if (flags != 0)
    return mf_error_set(MF_ERR_FORMAT, "%s: unknown flags 0x%x", where, flags);
  if (raw_len < RAW_HEAD || raw_len > RAW_MAX)
    return mf_error_set(MF_ERR_FORMAT, "%s: raw_len %llu outside %u..%llu", where,
                        (unsigned long long)raw_len, RAW_HEAD, (unsigned long long)RAW_MAX);
  uint32_t nf = get_u32(rec + 32);
  if (nf < 1 || (uint64_t)nf * FRAME_ENTRY > blen)
    return mf_error_set(MF_ERR_FORMAT, "%s: frame count %u does not fit in %llu bytes", where,
                        nf, (unsigned long long)blen);
  info->version = version;
  info->raw_len = raw_len;
  info->zstd_len = blen;
  info->n_frames = nf;
  return MF_OK;
}

/* ------------------------------------------------------------------ decode: state */

/* What a decode needs between its phases; the buffers belong to the caller (a reader keeps
 * them across records). */
typedef struct {
  const uint8_t *rec;
  const char *where;
  uint64_t raw_len;
  uint32_t n_frames;
  uint64_t *zoff;     /* (n_frames + 1) offsets of the frames from rec */
  uint8_t *raw;       /* raw_len bytes (+ slack) */
  uint32_t n;         /* features */
  desc *d;            /* (n) */
  seg *sg;            /* (n_frames) */
  uint8_t *done;      /* (n_frames) frame decompressed */
  ZSTD_DCtx *dctx;
} dec;

/* Decompresses frame k into its raw range (once). */
static mf_status dec_frame(dec *x, uint64_t k) {
  if (x->done[k]) return MF_OK;
  const uint8_t *z = x->rec + x->zoff[k];
  size_t zl = (size_t)(x->zoff[k + 1] - x->zoff[k]);
  const seg *s = &x->sg[k];
  /* a zstd frame (magic FD2FB528) as the encoder writes it: no content checksum, no
   * dictionary, its content size declared */
  unsigned long long fcs = zl >= 5 ? ZSTD_getFrameContentSize(z, zl) : ZSTD_CONTENTSIZE_ERROR;
  if (zl < 5 || get_u32(z) != 0xFD2FB528u || (z[4] & 7u) || fcs != s->len)
    return mf_error_set(MF_ERR_FORMAT, "%s: frame %llu: not a plain zstd frame of %llu bytes",
                        x->where, (unsigned long long)k, (unsigned long long)s->len);
  size_t fsz = ZSTD_findFrameCompressedSize(z, zl);
  if (ZSTD_isError(fsz) || fsz != zl)
    return mf_error_set(MF_ERR_FORMAT, "%s: frame %llu is not exactly one zstd frame of %zu "
                        "bytes", x->where, (unsigned long long)k, zl);
  size_t got = ZSTD_decompressDCtx(x->dctx, x->raw + s->off, (size_t)s->len, z, zl);
  if (ZSTD_isError(got) || got != s->len)
    return mf_error_set(MF_ERR_FORMAT, "%s: frame %llu: zstd decompression failed: %s",
                        x->where, (unsigned long long)k,
                        ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short output");
  x->done[k] = 1;
  return MF_OK;
}

/* Header checked by peek; frame offsets; frame 0. x->zoff, x->done, x->raw sized by the
 * caller from x->n_frames and x->raw_len. */
static mf_status dec_frames(dec *x, size_t len) {
  uint64_t pos = REC_OUTER + (uint64_t)x->n_frames * FRAME_ENTRY;
  for (uint32_t k = 0; k < x->n_frames; k++) {
    uint32_t zl = get_u32(x->rec + REC_OUTER + (uint64_t)k * FRAME_ENTRY);
    x->zoff[k] = pos;
    if (zl == 0 || zl > len - pos)
      return mf_error_set(MF_ERR_FORMAT, "%s: frame %u: %u compressed bytes do not fit",
                          x->where, k, zl);
    pos += zl;
    x->done[k] = 0;
  }
  x->zoff[x->n_frames] = pos;
  if (pos != len)
    return mf_error_set(MF_ERR_FORMAT, "%s: %llu bytes after the last frame", x->where,
                        (unsigned long long)(len - pos));
  /* frame 0 holds the feature table: its size comes from its own header */
  unsigned long long fcs = ZSTD_getFrameContentSize(x->rec + x->zoff[0],
                                                    (size_t)(x->zoff[1] - x->zoff[0]));
  if (fcs == ZSTD_CONTENTSIZE_ERROR || fcs == ZSTD_CONTENTSIZE_UNKNOWN || fcs > x->raw_len ||
      fcs < RAW_HEAD || (x->n_frames == 1 && fcs != x->raw_len))
    return mf_error_set(MF_ERR_FORMAT, "%s: zstd frame does not declare %llu bytes", x->where,
                        (unsigned long long)x->raw_len);
  x->sg[0] = (seg){0, fcs, -1, 0, 0};
  return dec_frame(x, 0);
}

/* The feature table (in frame 0): every field checked, x->n and x->d filled. */
static mf_status dec_table(dec *x) {
  const uint8_t *raw = x->raw;
  const char *where = x->where;
  const uint64_t raw_len = x->raw_len, f0 = x->sg[0].len;
  uint32_t n = get_u32(raw);
  if (n > FEAT_MAX || RAW_HEAD + (uint64_t)n * RAW_FEAT > raw_len)
    return mf_error_set(MF_ERR_FORMAT, "%s: n_features %u does not fit in %llu raw bytes",
                        where, n, (unsigned long long)raw_len);
  if (RAW_HEAD + (uint64_t)n * RAW_FEAT > f0)
    return mf_error_set(MF_ERR_FORMAT, "%s: n_features %u: the table does not fit in the "
                        "first frame (%llu bytes)", where, n, (unsigned long long)f0);
  const uint8_t *idp = raw + 4;
  const uint8_t *nul = memchr(idp, 0, MF_FEAT_ID_MAX);
  if (!nul)
    return mf_error_set(MF_ERR_FORMAT, "%s: entry id not NUL-terminated", where);
  for (const uint8_t *q = nul; q < idp + MF_FEAT_ID_MAX; q++)
    if (*q) return mf_error_set(MF_ERR_FORMAT, "%s: non-zero padding after the entry id", where);
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
    for (uint32_t dd = 0; dd < MF_MAX_DIMS; dd++) {
      uint64_t v = get_u64(h + 40 + 8 * dd);
      if (dd >= ndim && v != 0)
        return mf_error_set(MF_ERR_FORMAT, "%s: feature '%s': unused shape[%u] is %llu, not 0",
                            where, name, dd, (unsigned long long)v);
      if (v > RAW_MAX)
        return mf_error_set(MF_ERR_FORMAT, "%s: feature '%s': shape[%u] = %llu", where, name,
                            dd, (unsigned long long)v);
      shape[dd] = (int64_t)v;
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
    for (uint32_t j = 0; j < i; j++) /* names are zero-padded (checked): whole-field compare */
      if (!memcmp(raw + RAW_HEAD + (uint64_t)j * RAW_FEAT, name, MF_FEAT_NAME_MAX))
        return mf_error_set(MF_ERR_FORMAT, "%s: duplicate feature '%s'", where, name);
    x->d[i] = (desc){off, nb, ndim ? (uint64_t)shape[0] : 1};
    pos = off + nb;
  }
  if (pos != raw_len)
    return mf_error_set(MF_ERR_FORMAT, "%s: %llu trailing bytes after the last feature", where,
                        (unsigned long long)(raw_len - pos));
  x->n = n;
  /* the frames must be the canonical segmentation of this table */
  uint64_t ns = segment(x->d, n, raw_len, NULL);
  if (ns != x->n_frames)
    return mf_error_set(MF_ERR_FORMAT, "%s: %u frames, the table needs %llu", where,
                        x->n_frames, (unsigned long long)ns);
  seg first = x->sg[0];
  segment(x->d, n, raw_len, x->sg);
  if (x->sg[0].len != first.len || x->sg[0].feat != -1)
    return mf_error_set(MF_ERR_FORMAT, "%s: frame 0 holds %llu bytes, the table needs %llu",
                        where, (unsigned long long)first.len,
                        (unsigned long long)x->sg[0].len);
  return MF_OK;
}

/* Every padding byte (all in plain frames, which must be decompressed) is zero. */
static mf_status dec_padding(const dec *x) {
  uint64_t pos = RAW_HEAD + (uint64_t)x->n * RAW_FEAT;
  for (uint32_t i = 0; i < x->n; i++) {
    for (uint64_t q = pos; q < x->d[i].off; q++)
      if (x->raw[q]) {
        char name[MF_FEAT_NAME_MAX];
        memcpy(name, x->raw + RAW_HEAD + (uint64_t)i * RAW_FEAT, MF_FEAT_NAME_MAX);
        return mf_error_set(MF_ERR_FORMAT, "%s: feature '%s': non-zero padding before its "
                            "payload", x->where, name);
      }
    pos = x->d[i].off + x->d[i].nb;
  }
  return MF_OK;
}

/* The view of feature i of a decoded table (data in x->raw). */
static void dec_feature(const dec *x, uint32_t i, mf_feature *f) {
  const uint8_t *h = x->raw + RAW_HEAD + (uint64_t)i * RAW_FEAT;
  memset(f, 0, sizeof *f);
  memcpy(f->name, h, MF_FEAT_NAME_MAX);
  f->dtype = (mf_dtype)get_u32(h + 32);
  f->ndim = (int)get_u32(h + 36);
  for (int d = 0; d < f->ndim; d++) f->shape[d] = (int64_t)get_u64(h + 40 + 8 * d);
  f->data = x->raw + x->d[i].off;
}

/* ------------------------------------------------------------------ full decode */

mf_status mf_features_decode(const uint8_t *rec, size_t len, const char *where,
                             mf_feature_set *fs) {
  mf_features_init(fs, NULL);
  if (!where) where = "record";
  mf_features_info info;
  mf_status st = mf_features_peek(rec, len, where, &info);
  if (st != MF_OK) return st;
  dec x = {rec, where, info.raw_len, info.n_frames, NULL, NULL, 0, NULL, NULL, NULL, NULL};
  x.zoff = mf_malloc((size_t)(x.n_frames + 1) * sizeof *x.zoff, "record frames");
  x.sg = mf_malloc((size_t)x.n_frames * sizeof *x.sg, "record frames");
  x.done = mf_malloc(x.n_frames, "record frames");
  x.raw = mf_malloc((size_t)x.raw_len, "feature record (raw)");
  const uint64_t nfeat = FEAT_MAX < x.raw_len / RAW_FEAT + 1 ? FEAT_MAX : x.raw_len / RAW_FEAT + 1;
  x.d = mf_malloc((size_t)nfeat * sizeof *x.d, "record table");
  x.dctx = ZSTD_createDCtx();
  if (!x.zoff || !x.sg || !x.done || !x.raw || !x.d || !x.dctx)
    st = mf_error_set(MF_ERR_NOMEM, "%s: decode buffers: %s", where, mf_error_message());
  if (st == MF_OK) st = dec_frames(&x, len);
  if (st == MF_OK) st = dec_table(&x);
  for (uint64_t k = 1; st == MF_OK && k < x.n_frames; k++) st = dec_frame(&x, k);
  if (st == MF_OK) st = dec_padding(&x);
  if (st == MF_OK) {
    memcpy(fs->id, x.raw + 4, MF_FEAT_ID_MAX);
    for (uint32_t i = 0; st == MF_OK && i < x.n; i++) {
      mf_feature f;
      dec_feature(&x, i, &f);
      if (!mf_features_add(fs, f.name, f.dtype, f.ndim, f.shape, f.data))
        st = mf_error_set(MF_ERR_NOMEM, "%s: %s", where, mf_error_message());
    }
  }
  ZSTD_freeDCtx(x.dctx);
  mf_free(x.zoff), mf_free(x.sg), mf_free(x.done), mf_free(x.raw), mf_free(x.d);
  if (st != MF_OK) mf_features_free(fs);
  return st;
}

/* ------------------------------------------------------------------ reader (partial decode) */

struct mf_features_reader {
  dec x;
  int64_t cap_raw, cap_frames, cap_feat; /* capacities of x.raw, x.zoff/sg/done, x.d and f */
  mf_feature *f;
  char where[256];
  int open;
};

mf_status mf_features_reader_create(mf_features_reader **out) {
  *out = NULL;
  mf_features_reader *r = mf_calloc(sizeof *r, "feature reader");
  if (!r) return MF_ERR_NOMEM;
  r->x.dctx = ZSTD_createDCtx();
  if (!r->x.dctx) {
    mf_free(r);
    return mf_error_set(MF_ERR_NOMEM, "feature reader: zstd context");
  }
  *out = r;
  return MF_OK;
}

void mf_features_reader_free(mf_features_reader *r) {
  if (!r) return;
  ZSTD_freeDCtx(r->x.dctx);
  mf_free(r->x.raw), mf_free(r->x.zoff), mf_free(r->x.sg), mf_free(r->x.done);
  mf_free(r->x.d), mf_free(r->f);
  mf_free(r);
}

mf_status mf_features_reader_open(mf_features_reader *r, const uint8_t *rec, size_t len,
                                  const char *where, mf_feature_set *fs) {
  mf_features_init(fs, NULL);
  r->open = 0;
  snprintf(r->where, sizeof r->where, "%s", where ? where : "record");
  mf_features_info info;
  mf_status st = mf_features_peek(rec, len, r->where, &info);
  if (st != MF_OK) return st;
  dec *x = &r->x;
  x->rec = rec, x->where = r->where, x->raw_len = info.raw_len, x->n_frames = info.n_frames;
  x->n = 0;
  int64_t capf = r->cap_frames, capf2 = r->cap_frames, capf3 = r->cap_frames;
  size_t nfeat = (size_t)(FEAT_MAX < x->raw_len / RAW_FEAT + 1 ? FEAT_MAX
                                                               : x->raw_len / RAW_FEAT + 1);
  int64_t capd = r->cap_feat, capd2 = r->cap_feat;
  const int64_t nfr = (int64_t)x->n_frames + 1;
  st = mf_grow((void **)&x->raw, &r->cap_raw, (int64_t)x->raw_len, 1, "feature reader raw");
  if (st == MF_OK) st = mf_grow((void **)&x->zoff, &capf, nfr, sizeof *x->zoff, "frames");
  if (st == MF_OK) st = mf_grow((void **)&x->sg, &capf2, nfr, sizeof *x->sg, "frames");
  if (st == MF_OK) st = mf_grow((void **)&x->done, &capf3, nfr, 1, "frames");
  if (st == MF_OK) st = mf_grow((void **)&x->d, &capd, (int64_t)nfeat, sizeof *x->d, "table");
  if (st == MF_OK) st = mf_grow((void **)&r->f, &capd2, (int64_t)nfeat, sizeof *r->f, "table");
  if (st != MF_OK)
    return mf_error_set(MF_ERR_NOMEM, "%s: decode buffers: %s", r->where, mf_error_message());
  /* all three grew to the same size (or none did) */
  r->cap_frames = capf < capf2 ? capf : capf2;
  if (capf3 < r->cap_frames) r->cap_frames = capf3;
  r->cap_feat = capd < capd2 ? capd : capd2;
  st = dec_frames(x, len);
  if (st == MF_OK) st = dec_table(x);
  for (uint64_t k = 1; st == MF_OK && k < x->n_frames; k++)
    if (x->sg[k].feat < 0) st = dec_frame(x, k);
  if (st == MF_OK) st = dec_padding(x);
  if (st != MF_OK) return st;
  memcpy(fs->id, x->raw + 4, MF_FEAT_ID_MAX);
  for (uint32_t i = 0; i < x->n; i++) dec_feature(x, i, &r->f[i]);
  fs->n = fs->cap = (int)x->n;
  fs->f = r->f;
  fs->borrowed = 1;
  r->open = 1;
  return MF_OK;
}

int mf_features_reader_blocked(const mf_features_reader *r, int i) {
  return r->open && i >= 0 && (uint32_t)i < r->x.n && is_blocked(&r->x.d[i]);
}

mf_status mf_features_reader_load_at(mf_features_reader *r, int i, const int32_t *rows,
                                     int64_t n_rows) {
  dec *x = &r->x;
  if (!r->open || i < 0 || (uint32_t)i >= x->n)
    return mf_error_set(MF_ERR_CONFIG, "feature reader: load feature %d without an open record "
                        "holding it", i);
  if (!is_blocked(&x->d[i])) return MF_OK; /* in a plain frame: already there */
  /* its frames are consecutive; find the first (frames are sorted by raw offset) */
  uint64_t lo = 0, hi = x->n_frames;
  while (lo < hi) {
    uint64_t mid = (lo + hi) / 2;
    if (x->sg[mid].off < x->d[i].off) lo = mid + 1;
    else hi = mid;
  }
  const uint64_t R = rows_per_block(&x->d[i]), rows_n = x->d[i].rows;
  mf_status st = MF_OK;
  if (!rows) {
    for (uint64_t b = 0; st == MF_OK && b * R < rows_n; b++) st = dec_frame(x, lo + b);
    return st;
  }
  for (int64_t k = 0; st == MF_OK && k < n_rows; k++) {
    int64_t row = rows[k];
    if (row < 0 || (uint64_t)row >= rows_n)
      return mf_error_set(MF_ERR_CONFIG, "%s: feature '%s': row %lld outside [0, %llu)",
                          r->where, r->f[i].name, (long long)row, (unsigned long long)rows_n);
    st = dec_frame(x, lo + (uint64_t)row / R);
  }
  return st;
}

mf_status mf_features_reader_load(mf_features_reader *r, const char *name, const int32_t *rows,
                                  int64_t n_rows) {
  if (!r->open)
    return mf_error_set(MF_ERR_CONFIG, "feature reader: load '%s' without an open record",
                        name ? name : "(null)");
  for (uint32_t i = 0; i < r->x.n; i++)
    if (strncmp(r->f[i].name, name, MF_FEAT_NAME_MAX) == 0)
      return mf_features_reader_load_at(r, (int)i, rows, n_rows);
  return mf_error_set(MF_ERR_FORMAT, "%s: feature '%s' missing", r->where, name);
}
