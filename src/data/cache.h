/* cache.h — the feature cache: an LMDB environment (a directory holding data.mdb and
 * lock.mdb) that maps entry ids to feature records (features.h), plus one metadata record
 * saying how the records were built (record format version, prep options, the CCD file's
 * size and crc32), so a cache built with other options is detected when it is opened.
 *
 * Writes: mf_cache_put stores one record in its own committed write transaction (atomic
 * and durable: a crash leaves the record whole or absent). Puts from several threads are
 * serialised inside. When the memory map is full the map is grown (doubled) and the put
 * retried; growing waits for the open read handles of this process to end.
 *
 * Reads are zero-copy: a reader (one per thread, reused) opens a snapshot with
 * mf_cache_read_begin; pointers from mf_cache_get point into the memory map and stay valid
 * until mf_cache_read_end on that reader. Keep read windows short (a batch), because a map
 * growth waits for them; a thread must not call mf_cache_put while it holds an open read.
 *
 * Errors name the cache path and, where there is one, the entry id.
 * Not here: the record format (features.h), the prep driver (prep.h), cropping (loader). */
#ifndef MF_DATA_CACHE_H
#define MF_DATA_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "data/features.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the records of a cache were built. Two caches with equal metadata built from the
 * same inputs hold byte-identical records. */
typedef struct {
  uint32_t record_version; /* MF_FEATURES_VERSION */
  int32_t max_msa_rows;    /* featuriser option (0 = all rows) */
  int32_t zstd_level;      /* level the records were compressed with (resolved, not 0) */
  int32_t with_msa;        /* 1 if MSAs were read (--msa), 0 for query-only MSAs */
  uint64_t ccd_size;       /* bytes of the CCD file as given (compressed or not) */
  uint32_t ccd_crc32;      /* crc32 of those bytes */
  uint32_t schema_crc32;   /* crc32 of the feature list the records follow (prep: the
                              MF_FEATURES table of featurize.h), so a changed featuriser
                              schema is not mixed with old records; 0 = none */
} mf_cache_meta;

typedef struct {
  int writable;            /* create the directory and the environment if absent; allow puts */
  size_t initial_map_size; /* bytes of the memory map when created; 0 = 1 GiB. It grows. */
  /* When set: a cache without metadata gets this (writable only); a cache with metadata
   * must equal it, else MF_ERR_CONFIG naming the path and the first differing field. */
  const mf_cache_meta *expect;
} mf_cache_opts;

typedef struct mf_cache mf_cache;
typedef struct mf_cache_reader mf_cache_reader;

/* Opens (or with opts->writable creates) the cache directory `path`. Errors: MF_ERR_IO
 * (missing when read-only, a path that is not a directory, LMDB open failures),
 * MF_ERR_FORMAT (not a megafold cache / unreadable metadata), MF_ERR_CONFIG (metadata
 * mismatch). On error *out is NULL. */
mf_status mf_cache_open(const char *path, const mf_cache_opts *opts, mf_cache **out);
/* Closes; every reader must be closed first. NULL is fine. */
void mf_cache_close(mf_cache *c);
const char *mf_cache_path(const mf_cache *c);

/* The stored metadata; MF_ERR_FORMAT when the cache has none yet. */
mf_status mf_cache_meta_get(mf_cache *c, mf_cache_meta *meta);
/* Compares; returns MF_OK or MF_ERR_CONFIG with "<where>: <field> is A in the cache, B
 * requested". */
mf_status mf_cache_meta_compare(const mf_cache_meta *have, const mf_cache_meta *want,
                                const char *where);

/* Stores (or replaces) the record of `id` (1..MF_FEAT_ID_MAX-1 bytes) in its own committed
 * transaction. The bytes are copied into the map. */
mf_status mf_cache_put(mf_cache *c, const char *id, const void *rec, size_t len);
/* *present = 1 if `id` has a record. */
mf_status mf_cache_has(mf_cache *c, const char *id, int *present);
/* Number of records (metadata not counted). */
mf_status mf_cache_count(mf_cache *c, int64_t *n);
/* All ids in byte order: *ids is an mf_malloc'd array of *n mf_malloc'd strings; free with
 * mf_cache_list_free. */
mf_status mf_cache_list(mf_cache *c, char ***ids, int64_t *n);
void mf_cache_list_free(char **ids, int64_t n);
/* Current size of the memory map in bytes (grows with puts). */
size_t mf_cache_map_size(mf_cache *c);

/* Zero-copy reads. A reader belongs to one thread at a time. */
mf_status mf_cache_reader_open(mf_cache *c, mf_cache_reader **out);
void mf_cache_reader_close(mf_cache_reader *r); /* ends an open read; NULL is fine */
/* Opens a read snapshot (records committed before this call). Each open reader holds one
 * LMDB reader slot while reading (8192 per environment); when all are taken this is
 * MF_ERR_IO naming the limit. */
mf_status mf_cache_read_begin(mf_cache_reader *r);
/* Ends the snapshot: every pointer from mf_cache_get on this reader becomes invalid. */
void mf_cache_read_end(mf_cache_reader *r);
/* The record of `id` inside the open snapshot: *rec points into the map (read-only, valid
 * until mf_cache_read_end). A missing id is MF_ERR_FORMAT "<path>: no record '<id>'"
 * (*rec = NULL then), distinct from a failing read (MF_ERR_IO) or misuse (MF_ERR_CONFIG). */
mf_status mf_cache_get(mf_cache_reader *r, const char *id, const uint8_t **rec, size_t *len);
/* get + mf_features_decode (checksums verified) into *fs, outside the snapshot's lifetime:
 * the set owns its memory. Needs an open snapshot. Errors name "<path>:<id>". */
mf_status mf_cache_get_features(mf_cache_reader *r, const char *id, mf_feature_set *fs);

#ifdef __cplusplus
}
#endif

#endif
