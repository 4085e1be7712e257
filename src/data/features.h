/* features.h — a feature set: the named tensors of one training example (or one entry
 * before cropping), and its serialised form, the cache record.
 *
 * The featuriser (featurize.h) fills a set from an mmCIF entry; `megafold prep` encodes
 * it into a record (deterministic bytes: same set → same record) and stores it in the
 * feature cache (cache.h); the loader decodes records (partially, through a reader),
 * crops and batches them. A set owns the memory of its tensors (a reader's view excepted).
 *
 * Record format (version 2), little-endian:
 *   outer:  "MFREC001" | u32 version | u32 flags | u64 raw_len | u64 body_len |
 *           u32 n_frames | u32 crc32c(outer header bytes 0..35, then the whole body)
 *           (crc32c: the Castagnoli polynomial, as SSE4.2's crc32 instruction computes it)
 *   body:   u32 zstd_len[n_frames] | the frames, back to back; each frame is one zstd frame
 *           declaring its content size, without dictionary or content checksum; the crc32c
 *           covers every stored byte, so any corrupted byte of the record is caught before
 *           anything is decompressed, whichever frames a reader then decompresses (zstd's
 *           per-frame XXH64 of the output would add ~10% to a cached step and catch no
 *           stored corruption the crc32c misses)
 *   raw:    u32 n_features | char id[64] | per feature: char name[32] | u32 dtype |
 *           u32 ndim | i64 shape[5] | u64 offset | u64 nbytes | then the payloads, each
 *           at a 64-byte-aligned offset from the start of raw
 * The frames cut raw into consecutive ranges: a tensor of >= 2 rows (shape[0]) and
 * >= 256 KiB is "blocked": stored as frames of R = max(1, B / row bytes) rows each (the last
 * one shorter), B = 512 for tensors of >= 2048 rows (deep MSAs: a crop keeps few of their
 * rows), else 32768; everything between blocked tensors (the table, small tensors,
 * padding) is one "plain" frame per gap. Frame 0 is plain and holds the whole table. So a
 * reader can decompress only the rows a crop keeps of the big (S, N) MSA and (N, N)
 * tensors.
 * Version 1 (one frame, crc32 of the raw bytes) is refused with a message saying to
 * rebuild the cache.
 * Decoding verifies magic, version, the checksums, sizes, the frame cut and that every
 * tensor lies inside the payload; any mismatch is MF_ERR_FORMAT naming `where` and the field.
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
#define MF_FEATURES_VERSION 2      /* record format version written by mf_features_encode */
/* zstd level used when 0 is passed: a fast one (no Huffman literals), ~25% faster to
 * decompress than level 3 for ~25% more bytes; a cache is read far more often than written */
#define MF_FEATURES_ZSTD_DEFAULT (-1)

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
  int borrowed; /* 1: a view of a mf_features_reader (read-only; the reader owns table and
                   data; mf_features_free only zeroes it) */
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
  uint32_t version, n_frames;
  uint64_t raw_len, zstd_len; /* zstd_len: bytes after the outer header (frame table + frames) */
} mf_features_info;
mf_status mf_features_peek(const uint8_t *rec, size_t len, const char *where,
                           mf_features_info *info);

/* Partial decoding with reused memory (one reader per thread, e.g. per loader worker): open
 * verifies the whole record (header, crc32c over every compressed byte, frame cut, table,
 * padding) and decompresses the plain frames; *fs is then a read-only view (borrowed) whose
 * data lie in the reader's buffer: the small tensors hold their values, the blocked ones
 * only the rows loaded since by mf_features_reader_load (other rows are undefined). rec must
 * stay valid while rows are loaded; the view is valid until the next open or free. The
 * reader keeps its buffers (the largest record's raw size) for the next record. */
typedef struct mf_features_reader mf_features_reader;
mf_status mf_features_reader_create(mf_features_reader **out);
void mf_features_reader_free(mf_features_reader *r); /* NULL is fine */
mf_status mf_features_reader_open(mf_features_reader *r, const uint8_t *rec, size_t len,
                                  const char *where, mf_feature_set *fs);
/* Loads rows[0..n_rows) (indices along dim 0, any order) of feature `name` of the open
 * record, or every row when rows is NULL; a no-op for a tensor in a plain frame. Frames
 * are decompressed (their structure and sizes checked) once per open. MF_ERR_FORMAT for a bad
 * frame or a missing feature, MF_ERR_CONFIG for a row outside the tensor. */
mf_status mf_features_reader_load(mf_features_reader *r, const char *name, const int32_t *rows,
                                  int64_t n_rows);
/* The same for feature i of the view (fs->f[i]); and whether it is blocked (its rows need
 * loading) — 0 for a plain one or an i outside the open record. */
mf_status mf_features_reader_load_at(mf_features_reader *r, int i, const int32_t *rows,
                                     int64_t n_rows);
int mf_features_reader_blocked(const mf_features_reader *r, int i);

/* crc32 (zlib polynomial) of n bytes, any n. */
uint32_t mf_features_crc32(const void *data, size_t n);

#ifdef __cplusplus
}
#endif

#endif
