/* features.h — a feature set: the named tensors of one training example (or one entry
 * before cropping), and its serialised form, the cache record.
 *
 * The featuriser (featurize.h) fills a set from an mmCIF entry; `megafold prep` encodes
 * it into a record (deterministic bytes: same set → same record) and stores it in the
 * feature cache (cache.h); the loader decodes records, crops and batches them. A set owns
 * the memory of its tensors.
 *
 * Record format (version 1), little-endian, the whole payload zstd-compressed:
 *   outer:  "MFREC001" | u32 version | u32 flags | u64 raw_len | u64 zstd_len |
 *           u32 crc32(raw) | u32 crc32(outer header so far, then the zstd bytes) | zstd bytes
 *           (the second checksum covers the compressed bytes too: a corrupted byte that
 *           zstd would still decode to the same raw bytes is caught as well)
 *   raw:    u32 n_features | char id[64] | per feature: char name[32] | u32 dtype |
 *           u32 ndim | i64 shape[5] | u64 offset | u64 nbytes | then the payloads, each
 *           at a 64-byte-aligned offset from the start of raw
 * Decoding verifies magic, version, both checksums, sizes and that every tensor lies
 * inside the payload; any mismatch is MF_ERR_FORMAT naming `where` and the field.
 *
 * Canonical bytes: features are written in the order they were added; id and names are
 * zero-padded; shape dims past ndim are 0; flags are 0; each payload starts at the next
 * 64-byte boundary after the previous one (the first after the feature table) with zero
 * padding between, and raw ends with the last payload. The decoder accepts only this form,
 * so encode(decode(r)) == r for every record r it accepts (at the same zstd level).
 * Not here: the LMDB environment (cache.h), cropping (loader). */
#ifndef MF_DATA_FEATURES_H
#define MF_DATA_FEATURES_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MF_FEAT_NAME_MAX 32
#define MF_FEAT_ID_MAX 64
#define MF_FEATURES_VERSION 1      /* record format version written by mf_features_encode */
#define MF_FEATURES_ZSTD_DEFAULT 3 /* zstd level used when 0 is passed */

typedef struct {
  char name[MF_FEAT_NAME_MAX];
  mf_dtype dtype; /* MF_F32, MF_I32, MF_U8 (MF_F64, MF_BF16 allowed) */
  int ndim;
  int64_t shape[MF_MAX_DIMS];
  void *data; /* owned by the set; 64-byte aligned */
} mf_feature;

typedef struct {
  char id[MF_FEAT_ID_MAX]; /* entry id, e.g. "1crn" */
  int n, cap;
  mf_feature *f;
} mf_feature_set;

void mf_features_init(mf_feature_set *fs, const char *id);
void mf_features_free(mf_feature_set *fs); /* frees and zeroes; safe on a zeroed set */

/* Adds a tensor named `name`, copying `data` (zero-filled when data is NULL); returns the
 * set's copy, or NULL with MF_ERR_CONFIG (duplicate or too-long name, bad shape) or
 * MF_ERR_NOMEM in mf_error_message(). */
void *mf_features_add(mf_feature_set *fs, const char *name, mf_dtype dt, int ndim,
                      const int64_t *shape, const void *data);
/* The tensor named `name`, or NULL. */
const mf_feature *mf_features_get(const mf_feature_set *fs, const char *name);
/* Checked look-up: dtype, rank and every dim (-1 = any) must match; otherwise
 * MF_ERR_FORMAT naming the entry id, the feature, the expected and the actual shape. */
mf_status mf_features_expect(const mf_feature_set *fs, const char *name, mf_dtype dt, int ndim,
                             const int64_t *dims, const mf_feature **out);

/* Bytes and elements of one tensor of a set (product of its shape; 1 for rank 0). */
size_t mf_features_tensor_bytes(const mf_feature *f);
int64_t mf_features_tensor_numel(const mf_feature *f);

/* Serialise to a record (format above). zstd_level 0 = MF_FEATURES_ZSTD_DEFAULT, otherwise
 * ZSTD_minCLevel()..ZSTD_maxCLevel() (MF_ERR_CONFIG outside). *out is mf_malloc'd; free
 * with mf_free. The bytes depend only on the set and the level (and the zstd library's
 * output for that level, stable across runs and thread counts). */
mf_status mf_features_encode(const mf_feature_set *fs, int zstd_level, uint8_t **out,
                             size_t *out_len);
/* Parse and verify a record; `where` names it in errors (e.g. "cache.lmdb:1crn").
 * *fs is initialised here; on error it is left freed (zeroed). Never reads outside
 * rec[0, len), whatever the bytes. */
mf_status mf_features_decode(const uint8_t *rec, size_t len, const char *where,
                             mf_feature_set *fs);

/* The outer header of a record, checked (magic, the header/compressed-data checksum,
 * version, flags, sizes) without decompressing: for tools and the cache's listing. */
typedef struct {
  uint32_t version, raw_crc;
  uint64_t raw_len, zstd_len;
} mf_features_info;
mf_status mf_features_peek(const uint8_t *rec, size_t len, const char *where,
                           mf_features_info *info);

/* crc32 (zlib polynomial) of n bytes, any n. */
uint32_t mf_features_crc32(const void *data, size_t n);

#ifdef __cplusplus
}
#endif

#endif
