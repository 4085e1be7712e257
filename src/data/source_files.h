/* source_files.h — a loader source (loader.h) that builds every record from the files on
 * the fly: the `--no-cache` path. Entry k's mmCIF (and its a3m MSAs) is featurised when a
 * worker asks for it (mf_featurize_file, the CCD read once at creation), encoded into a
 * record in the worker's own buffer and handed to the loader, which then decodes, crops,
 * subsamples and augments it exactly as it does a cached record. So, for the same entries,
 * the same featuriser options (msa_dir, max_msa_rows) and the same (seed, step), the
 * example bytes equal those from a cache built by `megafold prep` (tests/test_source_files.c).
 *
 * Entries: the mmCIF files of `input` (a directory or a list file, as mf_prep_opts.input),
 * optionally restricted to a list of ids (e.g. mf_cache_list of the cache compared with),
 * ordered by id in byte order — the order of mf_loader_cache_source — so entry k is the
 * same entry in both sources when they hold the same ids. A file that fails to featurise
 * marks its entry bad in the loader (reported and skipped there), as a bad record would.
 *
 * The in-memory record is compressed at a fast zstd level (the bytes after decoding do not
 * depend on the level); the encode/decode round trip is the price of plugging into the
 * loader's record interface. Not here: the cache (cache.h), the prep driver (prep.h). */
#ifndef MF_DATA_SOURCE_FILES_H
#define MF_DATA_SOURCE_FILES_H

#include <stdint.h>

#include "core/core.h"
#include "data/loader.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MF_SOURCE_FILES_ZSTD_DEFAULT (-5) /* level of the in-memory records when 0 is given */

typedef struct {
  const char *input;    /* mmCIF directory or list file (required) */
  const char *ccd_path; /* components.cif[.gz] (required) */
  const char *msa_dir;  /* <id>_<entity>.a3m[.gz]; NULL: query-only MSAs */
  int max_msa_rows;     /* featuriser option (as prep's --max-msa-rows), 0 = all */
  int zstd_level;       /* in-memory record level; 0 = MF_SOURCE_FILES_ZSTD_DEFAULT */
  /* When n_ids > 0: only the entries whose id is in ids[0..n_ids) (each must have a file,
   * else MF_ERR_CONFIG naming it). */
  char *const *ids;
  int64_t n_ids;
} mf_source_files_opts;

/* Lists the inputs, reads the CCD and fills *src (one record buffer per worker, max_workers
 * >= the loader's workers). Errors: MF_ERR_CONFIG (missing options, no entries, duplicate
 * ids, a requested id without a file), the errors of mf_prep_list_inputs and mf_ccd_read.
 * Free with mf_source_files_free after the loader is destroyed. */
mf_status mf_source_files_create(const mf_source_files_opts *o, int max_workers,
                                 mf_loader_source *src);
void mf_source_files_free(mf_loader_source *src);

/* The mmCIF path of entry k of a source made here, or NULL. */
const char *mf_source_files_path(const mf_loader_source *src, int64_t k);

#ifdef __cplusplus
}
#endif

#endif
