/* a3m.h — the a3m MSA reader and the MSA features of spec §3.4.
 *
 * a3m: records of a '>' header line and a sequence that may span several lines. The first
 * record is the query. Upper-case letters and '-' are aligned columns; lower-case letters
 * are insertions relative to the query and are not columns: the deletion count of an
 * aligned column is the number of lower-case letters immediately before it (insertions
 * after the last column count nowhere, as in [DM]/[AF2] parse_a3m). '.' (a2m padding of
 * insert columns) is skipped; blank lines, lines starting with '#' (the "#<lengths>\t
 * <cardinalities>" first line of ColabFold/MMseqs2 files) and whitespace inside sequence
 * lines are ignored; any other character is a format error. Every row must have exactly as many
 * aligned columns as the query. Files may be plain or gzip (detected by magic bytes).
 *
 * Features (spec §3.4, [DM] create_msa_feat / get_profile_features):
 *   msa             (S, N) classes 0..31 (residue.h), letters mapped per molecule type
 *   deletions       (S, N) raw deletion counts d
 *   has_deletion    (S, N) min(1, d)
 *   deletion_value  (S, N) (2/π)·arctan(d/3)
 *   profile         (N, 32) class frequencies per column over all S rows (gaps count as
 *                   class 31), so each row of the profile sums to 1
 *   deletion_mean   (N) mean over all S rows of d
 * Features are float: they are data, identical in the float and double builds.
 *
 * Not here: row subsampling and cross-chain pairing (the loader's and featuriser's jobs),
 * the FASTA/JSON inputs (input.h), and any handling of Stockholm files. */
#ifndef MF_DATA_A3M_H
#define MF_DATA_A3M_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "data/residue.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int64_t S;          /* rows (records), query first */
  int64_t N;          /* aligned columns = query length */
  uint8_t *msa;       /* (S, N) restype classes 0..31 */
  int32_t *deletions; /* (S, N) deletion counts */
  char *query;        /* (N + 1) the query's aligned letters, upper case, NUL-terminated */
  char *names;        /* header texts (without '>'), NUL-separated */
  int64_t *name_off;  /* (S) offset of row s's header in names */
} mf_a3m;

/* Reads an a3m file (plain or gzip). Sequence letters are mapped with
 * mf_restype_from_letter(., type). On error *out is zeroed and the message names the file,
 * the record (1-based) and line, and what was wrong:
 *   MF_ERR_IO     the file cannot be read;
 *   MF_ERR_FORMAT empty input, binary data, text before the first '>', a query without
 *                 residues, a bad character, a row whose aligned column count differs from
 *                 the query's (both counts given), or corrupt/truncated gzip. */
mf_status mf_a3m_read(const char *path, mf_moltype type, mf_a3m *out);
/* Same for text in memory (`what` names it in messages); text need not be NUL-terminated. */
mf_status mf_a3m_parse(const char *text, size_t len, const char *what, mf_moltype type,
                       mf_a3m *out);
void mf_a3m_free(mf_a3m *a); /* frees and zeroes; safe on a zeroed struct */
const char *mf_a3m_name(const mf_a3m *a, int64_t row);

/* Per-element deletion features, for code that recomputes them after row subsampling. */
static inline float mf_msa_has_deletion(int32_t d) { return d > 0 ? 1.0f : 0.0f; }
float mf_msa_deletion_value(int32_t d); /* (2/π)·arctan(d/3) */

typedef struct {
  int64_t S, N;
  float *has_deletion;   /* (S, N) */
  float *deletion_value; /* (S, N) */
  float *profile;        /* (N, 32) */
  float *deletion_mean;  /* (N) */
} mf_msa_features;

/* Computes the features of all rows of a (the `msa` feature itself is a->msa).
 * MF_ERR_NOMEM on allocation failure (then *f is zeroed). */
mf_status mf_msa_features_compute(const mf_a3m *a, mf_msa_features *f);
void mf_msa_features_free(mf_msa_features *f);

/* Only the per-column features, in one pass with integer counts (no (S, N) arrays):
 * profile (N, 32) and deletion_mean (N), both allocated by the caller; the same values as
 * mf_msa_features_compute's. MF_ERR_NOMEM when its (N, 32) scratch counts fail. */
mf_status mf_msa_profile(const mf_a3m *a, float *profile, float *deletion_mean);

#ifdef __cplusplus
}
#endif

#endif
