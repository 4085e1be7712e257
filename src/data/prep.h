/* prep.h — the driver behind `megafold prep`: mmCIF files (a directory or a list file) →
 * featurised (featurize.h) in worker threads → encoded records (features.h) → the LMDB
 * feature cache (cache.h), written serially by the calling thread.
 *
 * Resumable: entries whose id is already in the cache are skipped (a record is committed
 * whole or not at all, so an interrupted run loses only the entries in flight).
 * Deterministic: the records depend only on the inputs and the options, not on the number
 * of threads or the order in which workers finish; records are stored in input order, so
 * a fresh run gives the same LMDB file (data.mdb) for any thread count. A bad entry (unreadable file, parse or
 * featurisation error, duplicate id) is reported with its file and reason and skipped; the
 * run goes on. The cache's metadata (cache.h) records the options and the CCD file, so a
 * resumed run with other options is refused instead of mixing records.
 *
 * Not here: argument parsing and the summary line's printing (src/cli/prep.c), the
 * features themselves (featurize.c), the loader. */
#ifndef MF_DATA_PREP_H
#define MF_DATA_PREP_H

#include <stdint.h>
#include <stdio.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char *input;       /* directory: its *.cif and *.cif.gz files (names starting with
                              '.' ignored), sorted by name; or a list file: one path per line
                              (blank lines and '#' comments skipped, relative paths taken
                              from the current directory), in file order */
  const char *ccd_path;    /* components.cif[.gz] (required) */
  const char *out;         /* cache directory (created if absent) */
  const char *msa_dir;     /* <id>_<entity>.a3m[.gz] files; NULL: query-only MSAs */
  int threads;             /* featurising workers, 1..256 */
  int max_msa_rows;        /* featuriser option, 0 = all rows */
  int zstd_level;          /* record compression, 0 = MF_FEATURES_ZSTD_DEFAULT */
  int progress;            /* 1: mf_progress lines (items/s, ETA) through the log */
  FILE *report;            /* where bad entries are reported; NULL = stderr */
  size_t initial_map_size; /* cache map size when created; 0 = the cache's default */
} mf_prep_opts;

typedef struct {
  int64_t total;     /* input files */
  int64_t done;      /* featurised and stored by this run */
  int64_t skipped;   /* already in the cache */
  int64_t failed;    /* reported and skipped */
  int64_t bytes_in;  /* input file bytes of the entries attempted (done + failed) */
  int64_t bytes_out; /* record bytes stored by this run */
  double seconds;    /* whole run, CCD reading included */
} mf_prep_summary;

/* Runs prep. MF_OK when the run completed, even with failed entries (see s->failed).
 * Errors that stop the run (bad options MF_ERR_CONFIG; unreadable input, CCD or cache
 * MF_ERR_IO / MF_ERR_FORMAT; cache built with other options MF_ERR_CONFIG; a failing cache
 * write) are returned with mf_error_message() set; *s then holds what was done so far. */
mf_status mf_prep_run(const mf_prep_opts *o, mf_prep_summary *s);

/* The input files of `input` (see mf_prep_opts.input): *paths is an mf_malloc'd array of
 * *n mf_malloc'd strings; free with mf_prep_free_list. */
mf_status mf_prep_list_inputs(const char *input, char ***paths, int64_t *n);
void mf_prep_free_list(char **paths, int64_t n);

/* The entry id of an mmCIF path: mf_featurize_entry_id (featurize.h), the name
 * mf_featurize_file gives the entry. MF_ERR_CONFIG when empty or too long. */
mf_status mf_prep_entry_id(const char *path, char *id, size_t n);

/* crc32 of the feature list of featurize.h (MF_FEATURES: names, dtypes, ranks, shapes),
 * stored in the cache metadata; every record prep stores has exactly these names, dtypes
 * and ranks (checked before storing). */
uint32_t mf_prep_schema_crc32(void);

/* "N done, N skipped (already cached), N failed, X MB in, Y MB out, Z s (R entries/s,
 * T MB/s)" into buf. */
void mf_prep_summary_format(const mf_prep_summary *s, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
