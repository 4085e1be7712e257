/* loader.h — the background loader: W worker threads turn cached feature records into
 * cropped, padded training examples in a ring of K host buffers, and the consumer takes
 * them strictly in step order.
 *
 * Step t (t = first_step, first_step + 1, ...) is a pure function of (seed, t) and the
 * records: epoch e = t / n and position p = t % n pick entry perm_e(p) of a deterministic
 * shuffle of the n entries (a keyed Feistel permutation, stream mf_rng_stream(e,
 * MF_RNG_CROP, 4095)); the worker reads the record (zero-copy, through the source),
 * verifies it whole and decompresses what the crop reads (mf_loader_build_example),
 * crops, subsamples MSA rows, augments ref_pos (crop.h, streams of step t) and writes
 * the example into the slot t % K. Since the whole record is verified first, a corrupt
 * record is bad whichever rows a step keeps. A record that fails to
 * decode or does not fit the layout is reported once (MF_WARN, with its name and the
 * reason) and skipped: the step takes the entry at position p + 1, p + 2, ... of the same
 * epoch's shuffle, so the same entries are skipped in every run, with any number of
 * workers. A failure of the source itself (I/O, no reader slot) or of memory is no property
 * of the record: it fails that step (mf_loader_next returns it) and marks nothing. Which worker finishes first never changes a byte of any example.
 *
 * Records come from a source (a function pointer table), so the loader runs on the LMDB
 * cache (mf_loader_cache_source) or on records in memory (tests). Slot memory comes from
 * a host allocator: pinned memory from the GPU staging (ops/cuda/staging.h) or mf_malloc.
 * Not here: the cropping itself (crop.h), the copy to the GPU (staging.h). */
#ifndef MF_DATA_LOADER_H
#define MF_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "data/cache.h"
#include "data/crop.h"
#include "data/features.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where records come from. get and release are called from the worker threads, each with
 * its own worker index w (0 <= w < workers), concurrently for different w. */
typedef struct {
  int64_t n; /* entries 0..n-1 */
  void *ctx;
  /* A view of the record of entry k: *rec stays valid until release(ctx, w). MF_ERR_FORMAT
   * (no such record, or not a record) marks the entry bad; any other error (I/O, the source
   * out of readers, MF_ERR_CONFIG, MF_ERR_NOMEM) fails only this step, the entry is kept. */
  mf_status (*get)(void *ctx, int w, int64_t k, const uint8_t **rec, size_t *len);
  void (*release)(void *ctx, int w); /* may be NULL */
  /* The entry's name for messages (e.g. "1crn"); may be NULL. */
  const char *(*name)(void *ctx, int64_t k);
} mf_loader_source;

/* Memory of the ring slots (total bytes of the layout each). */
typedef struct {
  void *(*alloc)(void *ctx, size_t bytes); /* NULL: mf_malloc */
  void (*free)(void *ctx, void *p);
  void *ctx;
} mf_loader_host_alloc;

typedef struct {
  int workers;         /* W >= 1 threads */
  int slots;           /* K >= 1 examples in flight (ring size) */
  uint64_t seed;
  uint64_t first_step; /* the first step produced (resuming a run) */
  int max_skip;        /* bad entries skipped per step before the step fails (default 64) */
  mf_crop_config crop;
  /* The static layout of the slots: NULL means the MF_FEATURES contract (featurize.h);
   * an entry here means its features, dtypes and kept dims (synthetic data). */
  const mf_feature_set *layout_ref;
  mf_loader_host_alloc host;
} mf_loader_config;

/* Defaults: 4 workers, 4 slots, seed 0, step 0, crop defaults (crop.h). */
void mf_loader_config_default(mf_loader_config *c);

/* One example handed to the consumer: the slot's buffer in the loader's layout. */
typedef struct {
  uint64_t step;
  int slot;
  void *data;                  /* layout->total bytes; valid until mf_loader_release */
  const mf_crop_layout *layout;
  int64_t entry;               /* source index of the entry used */
  char id[MF_FEAT_ID_MAX];     /* its record id */
  mf_crop_info crop;
  int64_t n_tok, n_atom, n_msa; /* real (unpadded) sizes */
  int skipped;                 /* bad entries passed over for this step */
} mf_loader_example;

typedef struct {
  int64_t produced;     /* examples written */
  int64_t bad_entries;  /* distinct entries found bad */
  int64_t skips;        /* attempts that passed over a bad entry */
  int64_t failed_steps; /* steps that found no good entry within max_skip */
  double wait_s;        /* time the consumer spent blocked in mf_loader_next */
} mf_loader_stats;

typedef struct mf_loader mf_loader;

/* Starts the workers. MF_ERR_CONFIG for bad settings or an empty source; layout errors
 * as mf_crop_layout_make; MF_ERR_NOMEM / MF_ERR_RUNTIME (thread creation). */
mf_status mf_loader_create(const mf_loader_config *cfg, const mf_loader_source *src,
                           mf_loader **out);
/* Blocks until the next step is ready and hands it over (steps strictly in order). When
 * the step failed (no good entry within max_skip, out of memory, a failing source),
 * returns that error with its message, and the step is consumed (its slot already free); the next call
 * gives the next step. Holding all K slots and asking for more is MF_ERR_CONFIG (it
 * could never be served). One consumer thread; not concurrent with mf_loader_destroy. */
mf_status mf_loader_next(mf_loader *L, mf_loader_example *ex);
/* Gives the example's slot back to the ring (after its bytes were copied or used). */
void mf_loader_release(mf_loader *L, const mf_loader_example *ex);
/* Stops the workers (each finishes the example it is writing; pending steps are dropped)
 * and frees everything, also slots still held by the consumer. NULL is fine. */
void mf_loader_destroy(mf_loader *L);

const mf_crop_layout *mf_loader_layout(const mf_loader *L);
mf_loader_stats mf_loader_get_stats(mf_loader *L);
/* 1 if entry k was found bad so far. */
int mf_loader_entry_bad(mf_loader *L, int64_t k);

/* The work of one step, also usable without a loader (benchmarks, tools). A workspace holds
 * what a worker reuses from step to step: a feature reader (features.h: the record is
 * verified whole, then only the rows the crop keeps of the large blocked tensors are
 * decompressed) and the crop plan's buffers. One per thread. */
typedef struct mf_loader_ws mf_loader_ws;
mf_status mf_loader_ws_create(mf_loader_ws **out);
void mf_loader_ws_free(mf_loader_ws *ws); /* NULL is fine */
typedef struct {
  double decode, plan, write; /* seconds: open + row loads, crop plan, crop write */
} mf_loader_times;
/* Record rec (valid during the call) → the example of (seed, step) in buf (lay->total
 * bytes), exactly the bytes of mf_features_decode + mf_crop_plan_make + mf_crop_write.
 * ex (crop info, sizes, id; may be NULL) and tm (may be NULL) are filled on success.
 * Errors as those functions, naming `where`. */
mf_status mf_loader_build_example(mf_loader_ws *ws, const uint8_t *rec, size_t len,
                                  const char *where, const mf_crop_config *cfg,
                                  const mf_crop_layout *lay, uint64_t seed, uint64_t step,
                                  void *buf, mf_loader_example *ex, mf_loader_times *tm);

/* Entry at position pos (0 <= pos < n) of epoch `epoch`'s shuffle: a bijection of [0, n)
 * for each (seed, epoch). */
int64_t mf_loader_entry_at(uint64_t seed, uint64_t epoch, int64_t n, int64_t pos);

/* A source over an open cache: every id of mf_cache_list, in byte order; one zero-copy
 * reader per worker (opened on first use by that worker; max_workers >= the loader's
 * workers). Free with mf_loader_cache_source_free after the loader is destroyed. */
mf_status mf_loader_cache_source(mf_cache *c, int max_workers, mf_loader_source *src);
void mf_loader_cache_source_free(mf_loader_source *src);

#ifdef __cplusplus
}
#endif

#endif
