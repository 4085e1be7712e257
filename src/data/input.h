/* input.h — what to predict: FASTA files and a small JSON job description.
 *
 * FASTA: records of a '>' header line and a sequence over any number of lines. Letters
 * (either case, stored upper case) and '-' are kept; whitespace is skipped; one '*' at
 * the end of a record (a stop codon mark) is dropped. Anything else, an empty record or
 * text before the first header is MF_ERR_FORMAT naming the file, record and line.
 *
 * JSON job (loosely the AlphaFold 3 input format; unknown keys are ignored):
 *   {
 *     "name": "job name",                                      required, non-empty
 *     "modelSeeds": [1, 2],                                    optional integers
 *     "sequences": [                                           required, non-empty
 *       {"protein": {"id": "A", "sequence": "MKV...",
 *                    "modifications": [{"ptmType": "SEP", "ptmPosition": 5}],
 *                    "msa": "path/to/A.a3m"}},                  msa optional (also
 *                                                              "unpairedMsaPath")
 *       {"rna": {"id": "B", "sequence": "ACGU",
 *                "modifications": [{"modificationType": "2MG", "basePosition": 1}]}},
 *       {"dna": {"id": ["C", "D"], "sequence": "ACGT"}},       a list of ids = copies
 *       {"ligand": {"id": "L", "ccd": "ATP"}}                  or "ccdCodes": ["NAG","FUC"]
 *     ]
 *   }
 * Chain ids are 1–4 letters or digits, unique over the job. Sequences are letters only
 * (protein letters outside the 20 map to UNK, see residue.h). Modification positions are
 * 1-based and must lie inside the sequence. A ligand given as "smiles" is rejected
 * (MF_ERR_FORMAT: no SMILES support without RDKit). Errors name the file and the JSON
 * path ("sequences[2].protein.id").
 *
 * Not here: reading the MSAs or the CCD the job refers to, building features. */
#ifndef MF_DATA_INPUT_H
#define MF_DATA_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "data/residue.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ FASTA */
typedef struct {
  int64_t n;        /* records */
  char *text;       /* headers and sequences, NUL-separated */
  int64_t *name_off; /* (n) header of record i (without '>') at text + name_off[i] */
  int64_t *seq_off;  /* (n) sequence of record i at text + seq_off[i] */
  int64_t *seq_len;  /* (n) */
} mf_fasta;

mf_status mf_fasta_read(const char *path, mf_fasta *out); /* plain or gzip */
mf_status mf_fasta_parse(const char *text, size_t len, const char *what, mf_fasta *out);
void mf_fasta_free(mf_fasta *f); /* frees and zeroes; safe on a zeroed struct */
static inline const char *mf_fasta_name(const mf_fasta *f, int64_t i) {
  return f->text + f->name_off[i];
}
static inline const char *mf_fasta_seq(const mf_fasta *f, int64_t i) {
  return f->text + f->seq_off[i];
}

/* ------------------------------------------------------------------ JSON job */
#define MF_JOB_ID_MAX 8 /* chain id incl. NUL (ids have 1–4 characters) */
#define MF_JOB_CCD_MAX 8

typedef struct {
  int64_t position;          /* 1-based residue position */
  char ccd[MF_JOB_CCD_MAX];  /* the modified residue's CCD code */
} mf_job_mod;

typedef struct {
  mf_moltype type;
  int64_t n_ids;
  char (*ids)[MF_JOB_ID_MAX]; /* (n_ids) chain ids, one per copy */
  char *sequence;             /* polymers: upper-case one-letter sequence; ligands: NULL */
  int64_t length;             /* polymers: sequence length; ligands: 0 */
  int64_t n_ccd;              /* ligands: CCD codes (several for a glycan); polymers: 0 */
  char (*ccd)[MF_JOB_CCD_MAX];
  int64_t n_mods;
  mf_job_mod *mods;           /* (n_mods) */
  char *msa_path;             /* protein/rna: a3m path or NULL */
} mf_job_entity;

typedef struct {
  char *name;
  int64_t n_seeds;
  int64_t *seeds;             /* (n_seeds) */
  int64_t n_entities;
  mf_job_entity *entities;    /* (n_entities) in file order */
} mf_job;

mf_status mf_job_read(const char *path, mf_job *job); /* plain or gzip */
mf_status mf_job_parse(const char *text, size_t len, const char *what, mf_job *job);
void mf_job_free(mf_job *job); /* frees and zeroes; safe on a zeroed struct */
/* Chains over all entities (sum of n_ids). */
int64_t mf_job_n_chains(const mf_job *job);

#ifdef __cplusplus
}
#endif

#endif
