/* test_features.c — the feature set container and the record codec (features.h): round
 * trips of every dtype and rank (zero-size dims included); identical sets give identical
 * bytes and decode→encode gives the record back; the record matches the documented format
 * byte for byte (built here independently, crc32c included), also the frame cut of large
 * (blocked) tensors; every corrupted byte and every truncation is MF_ERR_FORMAT; crafted
 * records with valid checksums but bad fields (version 1 and 3, flags, frames) are rejected
 * with a message naming the field; random mutations never crash; the partial reader (plain
 * tensors at open, rows on demand, a bad row block failing only when loaded, read-only
 * views); container errors (duplicate, long or empty names, bad shapes), mf_features_expect
 * messages, allocation failures without leaks. Not here: the LMDB cache (test_cache.c),
 * prep (test_prep.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "data/features.h"
#include "harness.h"

/* ------------------------------------------------------------------ helpers */

static uint64_t g_lcg = 88172645463325252ull;
static uint32_t rnd(void) {
  g_lcg = g_lcg * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(g_lcg >> 33);
}

static void fill(void *p, size_t n, uint32_t salt) {
  uint8_t *b = p;
  for (size_t i = 0; i < n; i++) b[i] = (uint8_t)((i * 131u + salt * 7u + (i >> 7)) & 0xff);
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* crc32c (Castagnoli), bit by bit: an implementation independent of the codec's. */
static uint32_t crc32c_bits(uint32_t c, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return c;
}

/* The record checksum: crc32c of header bytes 0..35, then the body. */
static void seal(uint8_t *rec, size_t len) {
  uint32_t c = crc32c_bits(0xffffffffu, rec, 36);
  c = crc32c_bits(c, rec + 40, len - 40);
  put32(rec + 36, ~c);
}

/* A record around `raw` cut into frames of the given raw lengths (they sum to raw_len), with
 * correct checksums, built from the documented outer format (version 2). */
static uint8_t *wrap_frames(const uint8_t *raw, size_t raw_len, const size_t *cut, int ncut,
                            int level, size_t *len) {
  size_t cap = 40 + 4 * (size_t)ncut;
  for (int k = 0; k < ncut; k++) cap += ZSTD_compressBound(cut[k]);
  uint8_t *rec = malloc(cap);
  ZSTD_CCtx *cc = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 0);
  size_t pos = 40 + 4 * (size_t)ncut, off = 0;
  for (int k = 0; k < ncut; k++) {
    size_t zn = ZSTD_compress2(cc, rec + pos, cap - pos, raw + off, cut[k]);
    MF_ASSERT(!ZSTD_isError(zn), "zstd: %s", ZSTD_getErrorName(zn));
    put32(rec + 40 + 4 * (size_t)k, (uint32_t)zn);
    pos += zn, off += cut[k];
  }
  MF_ASSERT(off == raw_len, "frame cut covers %zu of %zu bytes", off, raw_len);
  ZSTD_freeCCtx(cc);
  memcpy(rec, "MFREC001", 8);
  put32(rec + 8, 2);
  put32(rec + 12, 0);
  put64(rec + 16, raw_len);
  put64(rec + 24, pos - 40);
  put32(rec + 32, (uint32_t)ncut);
  *len = pos;
  seal(rec, *len);
  return rec;
}

/* The same with one frame (every test set here is below the 64 KiB blocking size). */
static uint8_t *wrap_raw(const uint8_t *raw, size_t raw_len, int level, size_t *len) {
  return wrap_frames(raw, raw_len, &raw_len, 1, level, len);
}

/* The raw bytes of a set, built independently from the format in features.h. */
static uint8_t *build_raw(const mf_feature_set *fs, size_t *raw_len) {
  size_t head = 68 + 96 * (size_t)fs->n, pos = head, total = head;
  for (int i = 0; i < fs->n; i++) {
    pos = (pos + 63) / 64 * 64;
    pos += mf_features_tensor_bytes(&fs->f[i]);
    total = pos;
  }
  uint8_t *raw = calloc(1, total ? total : 1);
  put32(raw, (uint32_t)fs->n);
  memcpy(raw + 4, fs->id, strlen(fs->id));
  pos = head;
  for (int i = 0; i < fs->n; i++) {
    const mf_feature *f = &fs->f[i];
    uint8_t *h = raw + 68 + 96 * (size_t)i;
    size_t nb = mf_features_tensor_bytes(f);
    pos = (pos + 63) / 64 * 64;
    memcpy(h, f->name, strlen(f->name));
    put32(h + 32, (uint32_t)f->dtype);
    put32(h + 36, (uint32_t)f->ndim);
    for (int d = 0; d < f->ndim; d++) put64(h + 40 + 8 * d, (uint64_t)f->shape[d]);
    put64(h + 80, pos);
    put64(h + 88, nb);
    memcpy(raw + pos, f->data, nb);
    pos += nb;
  }
  *raw_len = total;
  return raw;
}

static int sets_equal(const mf_feature_set *a, const mf_feature_set *b) {
  if (strcmp(a->id, b->id) != 0 || a->n != b->n) return 0;
  for (int i = 0; i < a->n; i++) {
    const mf_feature *x = &a->f[i], *y = &b->f[i];
    if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->ndim != y->ndim) return 0;
    for (int d = 0; d < x->ndim; d++)
      if (x->shape[d] != y->shape[d]) return 0;
    if (memcmp(x->data, y->data, mf_features_tensor_bytes(x)) != 0) return 0;
    if (((uintptr_t)y->data & 63) != 0) return 0;
  }
  return 1;
}

/* A set with a few features of different dtypes, about 20 KB raw. */
static void sample_set(mf_feature_set *fs, const char *id) {
  mf_features_init(fs, id);
  int64_t s1[2] = {37, 3}, s2[1] = {37}, s3[3] = {5, 37, 32}, s4[2] = {12, 12}, s5[1] = {9};
  fill(mf_features_add(fs, "atom_pos", MF_F32, 2, s1, NULL), 37 * 3 * 4, 1);
  fill(mf_features_add(fs, "restype", MF_I32, 1, s2, NULL), 37 * 4, 2);
  fill(mf_features_add(fs, "msa", MF_U8, 3, s3, NULL), 5 * 37 * 32, 3);
  fill(mf_features_add(fs, "bonds", MF_F64, 2, s4, NULL), 12 * 12 * 8, 4);
  fill(mf_features_add(fs, "ref_bf16", MF_BF16, 1, s5, NULL), 9 * 2, 5);
  float *r = mf_features_add(fs, "resolution", MF_F32, 0, NULL, NULL);
  *r = 1.5f;
}

/* ------------------------------------------------------------------ tests */

static void test_round_trip_all(void) {
  MF_TEST(~crc32c_bits(0xffffffffu, (const uint8_t *)"123456789", 9) == 0xE3069283u,
          "the test's crc32c has the standard check value");
  static const mf_dtype dts[5] = {MF_F32, MF_BF16, MF_F64, MF_I32, MF_U8};
  mf_feature_set fs;
  mf_features_init(&fs, "1abc");
  int k = 0;
  for (int t = 0; t < 5; t++)
    for (int nd = 0; nd <= MF_MAX_DIMS; nd++) {
      int64_t shape[MF_MAX_DIMS];
      for (int d = 0; d < nd; d++) shape[d] = 1 + (int64_t)((t + 2 * d + nd) % 4);
      char name[32];
      snprintf(name, sizeof name, "%s_rank%d", mf_dtype_name(dts[t]), nd);
      void *p = mf_features_add(&fs, name, dts[t], nd, shape, NULL);
      MF_TEST(p != NULL && ((uintptr_t)p & 63) == 0, "add %s", name);
      if (p) fill(p, mf_features_tensor_bytes(&fs.f[fs.n - 1]), (uint32_t)k++);
    }
  int64_t zero[3] = {4, 0, 7};
  MF_TEST(mf_features_add(&fs, "empty_dim", MF_F32, 3, zero, NULL) != NULL, "zero-size dim");
  uint8_t *rec;
  size_t len;
  mf_status st = mf_features_encode(&fs, 0, &rec, &len);
  MF_TEST(st == MF_OK, "encode %d features: %s", fs.n, mf_error_message());
  mf_feature_set back;
  st = mf_features_decode(rec, len, "roundtrip", &back);
  MF_TEST(st == MF_OK, "decode: %s", mf_error_message());
  MF_TEST(back.n == 31 && sets_equal(&fs, &back),
          "every dtype x rank 0..5 (and a zero-size dim) round-trips: %d features", back.n);
  /* the format as documented, built here, gives the same bytes */
  size_t raw_len, len2;
  uint8_t *raw = build_raw(&fs, &raw_len);
  uint8_t *rec2 = wrap_raw(raw, raw_len, MF_FEATURES_ZSTD_DEFAULT, &len2);
  MF_TEST(len2 == len && memcmp(rec, rec2, len) == 0,
          "record equals an independent build of the documented format (%zu vs %zu bytes)", len,
          len2);
  mf_features_info info;
  MF_TEST(mf_features_peek(rec, len, "x", &info) == MF_OK && info.raw_len == raw_len &&
              info.version == MF_FEATURES_VERSION && info.zstd_len + 40 == len,
          "peek reads the header");
  free(raw);
  free(rec2);
  mf_free(rec);
  mf_features_free(&back);
  mf_features_free(&fs);
  MF_TEST(fs.n == 0 && fs.f == NULL, "free zeroes the set");
  mf_features_free(&fs); /* twice is fine */
}

static void test_deterministic(void) {
  mf_feature_set a, b, c;
  sample_set(&a, "2xyz");
  sample_set(&b, "2xyz");
  uint8_t *ra, *rb, *rc, *rd;
  size_t la, lb, lc, ld;
  MF_TEST(mf_features_encode(&a, 3, &ra, &la) == MF_OK, "encode a");
  MF_TEST(mf_features_encode(&b, 3, &rb, &lb) == MF_OK, "encode b");
  MF_TEST(la == lb && memcmp(ra, rb, la) == 0, "identical sets → identical records (%zu bytes)",
          la);
  MF_TEST(mf_features_decode(ra, la, "a", &c) == MF_OK, "decode a");
  MF_TEST(mf_features_encode(&c, 3, &rc, &lc) == MF_OK && lc == la && !memcmp(rc, ra, la),
          "decode → encode gives the same bytes");
  /* level changes bytes, not content */
  MF_TEST(mf_features_encode(&a, 19, &rd, &ld) == MF_OK, "encode level 19");
  mf_feature_set d;
  MF_TEST(mf_features_decode(rd, ld, "d", &d) == MF_OK && sets_equal(&a, &d),
          "level 19 decodes to the same set (%zu vs %zu bytes)", ld, la);
  /* one changed value → a different record */
  ((uint8_t *)b.f[2].data)[100] ^= 1;
  uint8_t *re;
  size_t le;
  MF_TEST(mf_features_encode(&b, 3, &re, &le) == MF_OK && !(le == la && !memcmp(re, ra, la)),
          "one changed byte changes the record");
  mf_free(ra);
  mf_free(rb);
  mf_free(rc);
  mf_free(rd);
  mf_free(re);
  mf_features_free(&a);
  mf_features_free(&b);
  mf_features_free(&c);
  mf_features_free(&d);
}

static void test_empty_set(void) {
  mf_feature_set e, back;
  mf_features_init(&e, "");
  uint8_t *rec;
  size_t len;
  MF_TEST(mf_features_encode(&e, 0, &rec, &len) == MF_OK, "empty set encodes");
  MF_TEST(mf_features_decode(rec, len, "empty", &back) == MF_OK && back.n == 0 &&
              back.id[0] == 0,
          "empty set decodes: %s", mf_error_message());
  mf_free(rec);
  mf_features_free(&back);
  mf_features_free(&e);
}

static void test_corruption(void) {
  mf_feature_set fs;
  sample_set(&fs, "3cor");
  uint8_t *rec;
  size_t len;
  MF_TEST(mf_features_encode(&fs, 3, &rec, &len) == MF_OK, "encode");
  uint8_t *buf = malloc(len + 16);
  int64_t flips = 0, bad_flip = 0, truncs = 0, bad_trunc = 0;
  static const uint8_t masks[4] = {0x01, 0x80, 0xff, 0x5a};
  for (size_t pos = 0; pos < len; pos++) {
    for (int m = 0; m < 4; m++) {
      memcpy(buf, rec, len);
      buf[pos] ^= masks[m];
      mf_feature_set out;
      mf_status st = mf_features_decode(buf, len, "flip", &out);
      flips++;
      if (st != MF_ERR_FORMAT) {
        if (bad_flip < 5)
          printf("  byte %zu ^ 0x%02x: status %s\n", pos, masks[m], mf_status_name(st));
        bad_flip++;
      }
      mf_features_free(&out);
    }
  }
  MF_TEST(bad_flip == 0, "every flipped byte (%lld flips over %zu bytes) → MF_ERR_FORMAT: %lld not",
          (long long)flips, len, (long long)bad_flip);
  for (size_t n = 0; n < len; n++) {
    /* a fresh allocation of exactly n bytes, so ASan sees any read past the end */
    uint8_t *t = malloc(n ? n : 1);
    memcpy(t, rec, n);
    mf_feature_set out;
    mf_status st = mf_features_decode(n ? t : NULL, n, "trunc", &out);
    truncs++;
    if (st != MF_ERR_FORMAT) bad_trunc++;
    mf_features_free(&out);
    free(t);
  }
  MF_TEST(bad_trunc == 0, "every truncation (%lld lengths) → MF_ERR_FORMAT: %lld not",
          (long long)truncs, (long long)bad_trunc);
  memcpy(buf, rec, len);
  memset(buf + len, 0, 16);
  mf_feature_set out;
  MF_TEST(mf_features_decode(buf, len + 16, "tail", &out) == MF_ERR_FORMAT &&
              strstr(mf_error_message(), "tail:") && strstr(mf_error_message(), "zstd_len"),
          "trailing bytes → error naming where and zstd_len: %s", mf_error_message());
  memcpy(buf, rec, len);
  buf[3] = 'X';
  MF_TEST(mf_features_decode(buf, len, "db:3cor", &out) == MF_ERR_FORMAT &&
              strstr(mf_error_message(), "db:3cor: bad magic"),
          "bad magic named: %s", mf_error_message());
  memcpy(buf, rec, len);
  buf[50] ^= 0x10;
  mf_features_decode(buf, len, "db:3cor", &out);
  printf("  (payload flip message: %s)\n", mf_error_message());
  free(buf);
  mf_free(rec);
  mf_features_free(&fs);
}

/* Records whose checksums are valid but whose fields are wrong. */
static void expect_bad_raw(const uint8_t *raw, size_t raw_len, const char *what,
                           const char *needle) {
  size_t len;
  uint8_t *rec = wrap_raw(raw, raw_len, 1, &len);
  mf_feature_set out;
  mf_status st = mf_features_decode(rec, len, "crafted", &out);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), needle) &&
              strstr(mf_error_message(), "crafted"),
          "%s → MF_ERR_FORMAT mentioning '%s': %s (%s)", what, needle, mf_status_name(st),
          mf_error_message());
  MF_TEST(out.n == 0 && out.f == NULL, "%s: set left freed", what);
  mf_features_free(&out);
  free(rec);
}

static void test_crafted(void) {
  mf_feature_set fs;
  mf_features_init(&fs, "4cr");
  int64_t s1[2] = {3, 5}, s2[1] = {7};
  fill(mf_features_add(&fs, "a", MF_F32, 2, s1, NULL), 60, 1);
  fill(mf_features_add(&fs, "b", MF_U8, 1, s2, NULL), 7, 2);
  size_t rl;
  uint8_t *raw = build_raw(&fs, &rl);
  uint8_t *w = malloc(rl + 128);
  /* sanity: the untouched raw decodes */
  {
    size_t len;
    uint8_t *rec = wrap_raw(raw, rl, 1, &len);
    mf_feature_set out;
    MF_TEST(mf_features_decode(rec, len, "crafted", &out) == MF_OK && sets_equal(&fs, &out),
            "hand-built raw decodes");
    mf_features_free(&out);
    free(rec);
  }
  const size_t h0 = 68, h1 = 68 + 96;
#define MUT(stmt, what, needle)                                                               \
  do {                                                                                        \
    memcpy(w, raw, rl);                                                                       \
    size_t wl = rl;                                                                           \
    stmt;                                                                                     \
    expect_bad_raw(w, wl, what, needle);                                                      \
  } while (0)
  MUT(put32(w, 3), "n_features 3 of 2", "feature");
  MUT(put32(w, 100000), "n_features huge", "n_features");
  MUT(memset(w + 4, 'x', 64), "id without NUL", "entry id");
  MUT(w[4 + 10] = 'z', "id padding non-zero", "padding");
  MUT(memset(w + h0, 'n', 32), "name without NUL", "name");
  MUT(w[h0] = 0, "empty name", "name");
  MUT(w[h1 + 5] = 'q', "name padding non-zero", "padding");
  MUT(put32(w + h0 + 32, 9), "dtype 9", "dtype");
  MUT(put32(w + h0 + 36, 6), "ndim 6", "ndim");
  MUT(put64(w + h0 + 40 + 16, 1), "unused dim non-zero", "shape[2]");
  MUT(put64(w + h0 + 40, 4), "shape no longer matches nbytes", "nbytes");
  MUT((put64(w + h0 + 40, (uint64_t)1 << 30), put64(w + h0 + 48, (uint64_t)1 << 30)),
      "shape overflows", "nbytes");
  MUT(put64(w + h0 + 40, (uint64_t)-1), "negative dim", "shape[0]");
  MUT(put64(w + h0 + 80, 384), "misplaced offset", "offset");
  MUT(put64(w + h1 + 80, 4096), "offset past the end", "offset");
  MUT((put64(w + h1 + 88, 1000), put64(w + h1 + 40, 1000)), "payload past the end", "outside");
  MUT(w[h1 + 96 + 4] = 7, "non-zero padding before a payload", "padding");
  MUT((w[rl] = 0, wl = rl + 1), "a trailing byte", "trailing");
  MUT(memcpy(w + h1, "a", 2), "duplicate name", "duplicate");
  MUT(wl = 40, "raw shorter than its header", "raw_len");
#undef MUT
  /* wrong version / flags with a valid header checksum */
  size_t len;
  uint8_t *rec = wrap_raw(raw, rl, 1, &len);
  mf_feature_set out;
  put32(rec + 8, 3);
  seal(rec, len);
  MF_TEST(mf_features_decode(rec, len, "v3", &out) == MF_ERR_FORMAT &&
              strstr(mf_error_message(), "version 3"),
          "version 3 rejected: %s", mf_error_message());
  put32(rec + 8, 1);
  seal(rec, len);
  MF_TEST(mf_features_decode(rec, len, "v1", &out) == MF_ERR_FORMAT &&
              strstr(mf_error_message(), "version 1") && strstr(mf_error_message(), "rebuild"),
          "version 1 (the old one-frame format) rejected, saying to rebuild: %s",
          mf_error_message());
  put32(rec + 8, 2);
  put32(rec + 12, 4);
  seal(rec, len);
  MF_TEST(mf_features_decode(rec, len, "fl", &out) == MF_ERR_FORMAT &&
              strstr(mf_error_message(), "flags"),
          "unknown flags rejected: %s", mf_error_message());
  put32(rec + 12, 0);
  rec[44] ^= 0x01; /* the frame's zstd magic wrong, sealed */
  seal(rec, len);
  MF_TEST(mf_features_decode(rec, len, "mg", &out) == MF_ERR_FORMAT &&
              strstr(mf_error_message(), "zstd frame"),
          "a frame that is not a zstd frame rejected: %s", mf_error_message());
  rec[44] ^= 0x01;
  rec[44 + 4] |= 4u; /* the frame descriptor claiming a content checksum (not canonical) */
  seal(rec, len);
  MF_TEST(mf_features_decode(rec, len, "ck", &out) == MF_ERR_FORMAT &&
              strstr(mf_error_message(), "plain zstd frame"),
          "a frame with a content checksum rejected (not what the encoder writes): %s",
          mf_error_message());
  rec[44 + 4] &= (uint8_t)~4u;
  put32(rec + 32, 2); /* two frames announced, one table entry's worth of data */
  seal(rec, len);
  MF_TEST(mf_features_decode(rec, len, "nf", &out) == MF_ERR_FORMAT,
          "a wrong frame count rejected: %s", mf_error_message());
  put32(rec + 32, 1);
  put64(rec + 16, (uint64_t)1 << 50);
  seal(rec, len);
  MF_TEST(mf_features_decode(rec, len, "big", &out) == MF_ERR_FORMAT &&
              strstr(mf_error_message(), "raw_len"),
          "absurd raw_len rejected before allocating: %s", mf_error_message());
  put64(rec + 16, rl + 64); /* within limits, but not what the frame declares */
  seal(rec, len);
  MF_TEST(mf_features_decode(rec, len, "fcs", &out) == MF_ERR_FORMAT &&
              strstr(mf_error_message(), "frame"),
          "raw_len differing from the zstd frame rejected: %s", mf_error_message());
  free(rec);
  /* valid header, zstd data that is not a frame */
  rec = calloc(1, 40 + 64);
  memcpy(rec, "MFREC001", 8);
  put32(rec + 8, 2);
  put64(rec + 16, 100);
  put64(rec + 24, 64);
  put32(rec + 32, 1);
  memset(rec + 44, 0xab, 60);
  put32(rec + 40, 60);
  seal(rec, 104);
  MF_TEST(mf_features_decode(rec, 104, "junk", &out) == MF_ERR_FORMAT, "junk frame rejected: %s",
          mf_error_message());
  free(rec);
  free(raw);
  free(w);
  mf_features_free(&fs);
}

/* Random mutations of the raw bytes under valid checksums: decode must not crash; what it
 * accepts must re-encode to the same bytes (canonical form). */
static void test_random_mutations(void) {
  mf_feature_set fs;
  sample_set(&fs, "5rnd");
  size_t rl;
  uint8_t *raw = build_raw(&fs, &rl);
  uint8_t *w = malloc(rl);
  int64_t accepted = 0, errors = 0, noncanon = 0, other = 0;
  for (int it = 0; it < 1500; it++) {
    memcpy(w, raw, rl);
    int nmut = 1 + (int)(rnd() % 4);
    /* mostly the header table, where the structure is */
    for (int m = 0; m < nmut; m++) {
      size_t pos = (rnd() % 4) ? rnd() % (68 + 96 * (size_t)fs.n) : rnd() % rl;
      w[pos] = (rnd() % 3) ? (uint8_t)rnd() : (uint8_t)(w[pos] ^ (1u << (rnd() % 8)));
    }
    size_t wl = (rnd() % 8 == 0) ? rnd() % rl : rl;
    size_t len;
    uint8_t *rec = wrap_raw(w, wl, 1, &len);
    mf_feature_set out;
    mf_status st = mf_features_decode(rec, len, "mut", &out);
    if (st == MF_OK) {
      accepted++;
      uint8_t *re;
      size_t lre;
      if (mf_features_encode(&out, 1, &re, &lre) != MF_OK || lre != len || memcmp(re, rec, len))
        noncanon++;
      else mf_free(re);
    } else if (st == MF_ERR_FORMAT) {
      errors++;
    } else {
      other++;
    }
    mf_features_free(&out);
    free(rec);
  }
  MF_TEST(other == 0 && noncanon == 0 && errors > 1000,
          "1500 random mutations: %lld rejected (MF_ERR_FORMAT), %lld accepted (all canonical: "
          "%lld not), %lld other status",
          (long long)errors, (long long)accepted, (long long)noncanon, (long long)other);
  /* random byte strings */
  int64_t bad = 0;
  for (int it = 0; it < 500; it++) {
    size_t n = rnd() % 200;
    uint8_t *b = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rnd();
    if (n >= 8 && it % 2) memcpy(b, "MFREC001", 8);
    mf_feature_set out;
    if (mf_features_decode(b, n, "rand", &out) != MF_ERR_FORMAT) bad++;
    mf_features_free(&out);
    free(b);
  }
  MF_TEST(bad == 0, "500 random byte strings → MF_ERR_FORMAT (%lld not)", (long long)bad);
  free(raw);
  free(w);
  mf_features_free(&fs);
}

/* Large tensors: the documented frame cut (built here independently), full and partial
 * decoding through a reader, and corruption of the row-block frames. */
static void test_blocked(void) {
  mf_feature_set fs;
  mf_features_init(&fs, "9blk");
  int64_t s_deep[2] = {3000, 100}, s_small[1] = {100}, s_wide[2] = {600, 600}, s_tail[2] = {7, 3};
  fill(mf_features_add(&fs, "deep", MF_U8, 2, s_deep, NULL), 3000 * 100, 11); /* >= 2048 rows */
  fill(mf_features_add(&fs, "small", MF_I32, 1, s_small, NULL), 400, 12);
  fill(mf_features_add(&fs, "wide", MF_U8, 2, s_wide, NULL), 600 * 600, 13);    /* < 2048 rows */
  fill(mf_features_add(&fs, "tail", MF_F32, 2, s_tail, NULL), 84, 14);
  uint8_t *rec;
  size_t len;
  MF_TEST(mf_features_encode(&fs, 3, &rec, &len) == MF_OK, "encode a set with blocked tensors");
  /* the documented cut (both >= 256 KiB): plain [0, deep), deep in blocks of 512/100 = 5
   * rows, plain up to wide, wide in blocks of 32768/600 = 54 rows, plain to the end */
  size_t rl;
  uint8_t *raw = build_raw(&fs, &rl);
  size_t cut[700];
  int nc = 0;
  size_t off_deep = (68 + 96 * 4 + 63) / 64 * 64, off_wide = 0, end_deep = off_deep + 300000;
  cut[nc++] = off_deep;
  for (int r = 0; r < 3000; r += 5) cut[nc++] = (size_t)(3000 - r < 5 ? 3000 - r : 5) * 100;
  off_wide = (((end_deep + 63) / 64 * 64 + 400) + 63) / 64 * 64;
  cut[nc++] = off_wide - end_deep;
  for (int r = 0; r < 600; r += 54) cut[nc++] = (size_t)(600 - r < 54 ? 600 - r : 54) * 600;
  cut[nc++] = rl - (off_wide + 360000);
  size_t len2;
  uint8_t *rec2 = wrap_frames(raw, rl, cut, nc, 3, &len2);
  MF_TEST(len2 == len && !memcmp(rec, rec2, len),
          "record equals an independent build of the documented frame cut (%d frames, %zu vs "
          "%zu bytes)", nc, len, len2);
  mf_features_info info;
  MF_TEST(mf_features_peek(rec, len, "b", &info) == MF_OK && info.n_frames == (uint32_t)nc,
          "peek: %u frames", info.n_frames);
  mf_feature_set back;
  MF_TEST(mf_features_decode(rec, len, "b", &back) == MF_OK && sets_equal(&fs, &back),
          "full decode round-trips: %s", mf_error_message());
  mf_features_free(&back);

  /* an incompressible record of 300 kB (the checksum's three-stream path, a blocked tensor) */
  {
    mf_feature_set nz;
    mf_features_init(&nz, "noise");
    uint8_t *d = mf_features_add(&nz, "noise", MF_U8, 2, (int64_t[]){150, 2000}, NULL);
    for (int i = 0; i < 300000; i++) d[i] = (uint8_t)rnd();
    uint8_t *r1, *r2, *nraw;
    size_t l1, l2, nrl;
    nraw = build_raw(&nz, &nrl);
    size_t ncut[11] = {(68 + 96 + 63) / 64 * 64}; /* plain table, then 16-row blocks */
    for (int b = 0; b < 10; b++) ncut[1 + b] = (size_t)(b < 9 ? 16 : 6) * 2000;
    MF_TEST(mf_features_encode(&nz, 3, &r1, &l1) == MF_OK, "encode noise");
    r2 = wrap_frames(nraw, nrl, ncut, 11, 3, &l2);
    mf_feature_set back2;
    MF_TEST(l1 > (256u << 10) && l1 == l2 && !memcmp(r1, r2, l1) &&
                mf_features_decode(r1, l1, "noise", &back2) == MF_OK && sets_equal(&nz, &back2),
            "a %zu-byte record: checksum and frames as documented, round trip", l1);
    mf_features_free(&back2);
    mf_free(r1);
    free(r2), free(nraw);
    mf_features_free(&nz);
  }

  /* a reader: plain tensors at once, the rows asked for, then everything */
  mf_features_reader *rd;
  MF_TEST(mf_features_reader_create(&rd) == MF_OK, "reader");
  mf_feature_set v;
  MF_TEST(mf_features_reader_open(rd, rec, len, "rd", &v) == MF_OK && v.n == 4 && v.borrowed &&
              !strcmp(v.id, "9blk"),
          "reader open: %s", mf_error_message());
  const mf_feature *vs = mf_features_get(&v, "small"), *vt = mf_features_get(&v, "tail");
  MF_TEST(vs && vt && !memcmp(vs->data, fs.f[1].data, 400) && !memcmp(vt->data, fs.f[3].data, 84),
          "plain tensors are there after open");
  int32_t rows[5] = {2999, 0, 1234, 13, 12};
  MF_TEST(mf_features_reader_load(rd, "deep", rows, 5) == MF_OK, "load 5 rows");
  const mf_feature *vd = mf_features_get(&v, "deep");
  int ok = 1;
  for (int i = 0; i < 5; i++)
    ok &= !memcmp((uint8_t *)vd->data + 100 * rows[i], (uint8_t *)fs.f[0].data + 100 * rows[i],
                  100);
  MF_TEST(ok, "the loaded rows hold the values");
  int32_t bad_row = 3000;
  MF_TEST(mf_features_reader_load(rd, "deep", &bad_row, 1) == MF_ERR_CONFIG,
          "a row outside the tensor: %s", mf_error_message());
  MF_TEST(mf_features_reader_load(rd, "nope", NULL, 0) == MF_ERR_FORMAT &&
              strstr(mf_error_message(), "nope"),
          "a missing feature named: %s", mf_error_message());
  MF_TEST(mf_features_reader_load(rd, "deep", NULL, 0) == MF_OK &&
              mf_features_reader_load(rd, "wide", NULL, 0) == MF_OK &&
              mf_features_reader_load(rd, "small", NULL, 0) == MF_OK,
          "load everything");
  ok = v.n == fs.n;
  for (int i = 0; ok && i < fs.n; i++)
    ok = !memcmp(v.f[i].data, fs.f[i].data, mf_features_tensor_bytes(&fs.f[i]));
  MF_TEST(ok, "the view equals the set once everything is loaded");
  MF_TEST(mf_features_add(&v, "x", MF_U8, 0, NULL, NULL) == NULL, "the view is read-only");
  mf_features_free(&v);
  MF_TEST(v.f == NULL && v.n == 0, "freeing a view only zeroes it");

  /* corrupted bytes anywhere (a sample of positions, both decoders) */
  uint8_t *buf = malloc(len);
  int64_t flips = 0, missed = 0;
  for (size_t pos = 0; pos < len; pos += 1 + pos % 13) {
    memcpy(buf, rec, len);
    buf[pos] ^= (uint8_t)(1u << (pos % 8));
    mf_feature_set o;
    if (mf_features_decode(buf, len, "flip", &o) != MF_ERR_FORMAT) missed++;
    mf_features_free(&o);
    if (mf_features_reader_open(rd, buf, len, "flip", &o) != MF_ERR_FORMAT) missed++;
    mf_features_free(&o);
    flips++;
  }
  MF_TEST(missed == 0, "%lld flipped bytes over %zu → MF_ERR_FORMAT from decode and reader open "
          "(%lld not)", (long long)flips, len, (long long)missed);
  /* a row-block frame that is not a zstd frame under a valid crc (crafted): open passes
   * (the frame is not read), loading its rows fails, other rows load */
  memcpy(buf, rec, len);
  size_t fpos = 40 + 4 * (size_t)nc;
  for (int k = 0; k < 3; k++) fpos += get32(rec + 40 + 4 * (size_t)k);
  buf[fpos] ^= 0x10; /* frame 3 = rows 10..14 of deep */
  seal(buf, len);
  int32_t r_bad = 12, r50 = 50;
  MF_TEST(mf_features_reader_open(rd, buf, len, "blk", &v) == MF_OK &&
              mf_features_reader_load(rd, "deep", &r50, 1) == MF_OK &&
              mf_features_reader_load(rd, "deep", &r_bad, 1) == MF_ERR_FORMAT &&
              strstr(mf_error_message(), "blk") && strstr(mf_error_message(), "frame 3"),
          "a bad row block fails when its rows are loaded: %s", mf_error_message());
  mf_feature_set o;
  MF_TEST(mf_features_decode(buf, len, "blk", &o) == MF_ERR_FORMAT,
          "... and the full decode fails: %s", mf_error_message());
  mf_features_free(&o);
  /* the same bytes cut into other frames (valid checksums) are not the canonical record */
  size_t one = rl;
  uint8_t *rec3 = wrap_frames(raw, rl, &one, 1, 3, &len2);
  MF_TEST(mf_features_decode(rec3, len2, "cut", &o) == MF_ERR_FORMAT &&
              mf_features_reader_open(rd, rec3, len2, "cut", &v) == MF_ERR_FORMAT,
          "a non-canonical frame cut rejected: %s", mf_error_message());
  mf_features_free(&o);
  free(rec3);
  free(buf);
  mf_features_reader_free(rd);
  free(raw);
  free(rec2);
  mf_free(rec);
  mf_features_free(&fs);
}

static void test_container_errors(void) {
  mf_feature_set fs;
  mf_features_init(&fs, "6err");
  int64_t s[2] = {2, 3};
  MF_TEST(mf_features_add(&fs, "x", MF_F32, 2, s, NULL) != NULL, "add x");
  MF_TEST(mf_features_add(&fs, "x", MF_I32, 1, s, NULL) == NULL &&
              strstr(mf_error_message(), "duplicate feature 'x'") &&
              strstr(mf_error_message(), "6err"),
          "duplicate name rejected: %s", mf_error_message());
  MF_TEST(mf_features_add(&fs, "", MF_F32, 1, s, NULL) == NULL, "empty name rejected");
  MF_TEST(mf_features_add(&fs, "a_name_that_is_far_too_long_for_it", MF_F32, 1, s, NULL) == NULL &&
              strstr(mf_error_message(), "1..31"),
          "long name rejected: %s", mf_error_message());
  MF_TEST(mf_features_add(&fs, "abcdefghijklmnopqrstuvwxyz01234", MF_U8, 1, s, NULL) != NULL,
          "31-character name accepted");
  int64_t neg[2] = {2, -1};
  MF_TEST(mf_features_add(&fs, "neg", MF_F32, 2, neg, NULL) == NULL &&
              strstr(mf_error_message(), "bad shape (2, -1)"),
          "negative dim rejected: %s", mf_error_message());
  int64_t s6[6] = {1, 1, 1, 1, 1, 1};
  MF_TEST(mf_features_add(&fs, "r6", MF_F32, 6, s6, NULL) == NULL, "rank 6 rejected");
  MF_TEST(mf_features_add(&fs, "dt", (mf_dtype)17, 1, s, NULL) == NULL, "bad dtype rejected");
  int64_t s3[1] = {3};
  int32_t *p = mf_features_add(&fs, "copy", MF_I32, 1, s3, (const int32_t[]){7, 8, 9});
  MF_TEST(p && p[0] == 7 && p[2] == 9, "data copied");
  MF_TEST(fs.n == 3 && mf_features_get(&fs, "copy") && !mf_features_get(&fs, "nope"),
          "get by name");
  /* many features: the table grows */
  for (int i = 0; i < 100; i++) {
    char nm[16];
    snprintf(nm, sizeof nm, "f%d", i);
    mf_features_add(&fs, nm, MF_U8, 1, s3, NULL);
  }
  MF_TEST(fs.n == 103 && mf_features_get(&fs, "f99") && fs.f[2].shape[0] == 3,
          "table of 103 features");
  MF_TEST(mf_features_encode(&fs, 1000, &(uint8_t *){NULL}, &(size_t){0}) == MF_ERR_CONFIG,
          "zstd level 1000 rejected: %s", mf_error_message());
  mf_features_free(&fs);
}

static void test_expect(void) {
  mf_feature_set fs;
  mf_features_init(&fs, "7exp");
  int64_t s[2] = {10, 3};
  mf_features_add(&fs, "pos", MF_F32, 2, s, NULL);
  const mf_feature *f = NULL;
  MF_TEST(mf_features_expect(&fs, "pos", MF_F32, 2, (const int64_t[]){10, 3}, &f) == MF_OK &&
              f == &fs.f[0],
          "exact match");
  MF_TEST(mf_features_expect(&fs, "pos", MF_F32, 2, (const int64_t[]){-1, 3}, &f) == MF_OK,
          "-1 matches any dim");
  mf_status st = mf_features_expect(&fs, "pos", MF_F32, 2, (const int64_t[]){-1, 4}, &f);
  MF_TEST(st == MF_ERR_FORMAT && f == NULL &&
              strstr(mf_error_message(), "entry 7exp: feature 'pos' is f32 (10, 3), expected "
                                         "f32 (*, 4)"),
          "dim mismatch message: %s", mf_error_message());
  st = mf_features_expect(&fs, "pos", MF_I32, 2, (const int64_t[]){10, 3}, &f);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "expected i32"),
          "dtype mismatch message: %s", mf_error_message());
  st = mf_features_expect(&fs, "pos", MF_F32, 1, (const int64_t[]){10}, &f);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "expected f32 (10)"),
          "rank mismatch message: %s", mf_error_message());
  st = mf_features_expect(&fs, "mask", MF_U8, 1, (const int64_t[]){10}, NULL);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "entry 7exp: feature 'mask' missing"),
          "missing feature message: %s", mf_error_message());
  mf_features_free(&fs);
}

/* Every allocation of encode and decode made to fail in turn: an error, no leak. */
static void test_alloc_failures(void) {
  mf_feature_set fs;
  sample_set(&fs, "8oom");
  int64_t before = mf_mem_stats(MF_HOST).current;
  uint8_t *rec = NULL;
  size_t len = 0;
  int k, ok = 1;
  for (k = 0; k < 20; k++) {
    mf_alloc_fail_after(k);
    mf_status st = mf_features_encode(&fs, 1, &rec, &len);
    mf_alloc_fail_after(-1);
    if (st == MF_OK) break;
    ok &= st == MF_ERR_NOMEM && rec == NULL && mf_mem_stats(MF_HOST).current == before;
  }
  MF_TEST(ok && rec != NULL, "encode: %d injected failures, each MF_ERR_NOMEM without a leak", k);
  int64_t mid = mf_mem_stats(MF_HOST).current;
  ok = 1;
  mf_feature_set out;
  for (k = 0; k < 60; k++) {
    mf_alloc_fail_after(k);
    mf_status st = mf_features_decode(rec, len, "oom", &out);
    mf_alloc_fail_after(-1);
    if (st == MF_OK) break;
    ok &= st == MF_ERR_NOMEM && out.n == 0 && mf_mem_stats(MF_HOST).current == mid;
  }
  MF_TEST(ok && out.n == fs.n, "decode: %d injected failures, each MF_ERR_NOMEM without a leak",
          k);
  mf_features_free(&out);
  mf_free(rec);
  mf_features_free(&fs);
}

int main(void) {
  mf_test_begin("test_features");
  int64_t start = mf_mem_stats(MF_HOST).current;
  test_round_trip_all();
  test_deterministic();
  test_empty_set();
  test_corruption();
  test_crafted();
  test_random_mutations();
  test_blocked();
  test_container_errors();
  test_expect();
  test_alloc_failures();
  MF_TEST(mf_mem_stats(MF_HOST).current == start, "no mf_malloc bytes left: %lld",
          (long long)(mf_mem_stats(MF_HOST).current - start));
  return mf_test_end();
}
