/* structure.h — a macromolecular structure read from an mmCIF file: chains, residues
 * and heavy atoms of the first model, entities and their sequences, covalent links from
 * _struct_conn, resolution, method, and the biological-assembly generators.
 *
 * Not here: tokenisation into AF3 tokens, reference conformers, building assembly
 * copies (the generators are stored and can be expanded and applied to coordinates
 * with mf_structure_expand_opers / mf_structure_apply_opers), writing mmCIF.
 *
 * Reading rules (the tests apply the same rules through gemmi, tools/gemmi_dump.py):
 *   - model: only rows whose _atom_site.pdbx_PDB_model_num equals that of the first row;
 *   - dropped: hydrogens (type_symbol H or D) and waters (label_comp_id HOH, DOD, WAT);
 *   - alternative locations, among the kept rows that carry an altloc id:
 *       1. microheterogeneity: where one residue position (label_asym_id, label_seq_id,
 *          auth_seq_id, insertion code) has altloc rows of several label_comp_ids, only
 *          the comp_id of the highest-occupancy such row (first on ties) stays;
 *       2. each atom (residue position + label_atom_id) keeps the altloc row with the
 *          highest occupancy (first in the file on ties);
 *     rows keep their file order;
 *   - a chain is a run of consecutive atoms with the same label_asym_id; a residue is a
 *     run within a chain with the same (label_seq_id, auth_seq_id, ins code, comp_id).
 *
 * Layout: structure-of-arrays for atoms, residues and chains; small arrays of structs
 * for the rare tables (entities, links, assemblies). Everything, the struct included,
 * lives in one arena: mf_structure_free releases it in one call. Identifier strings are
 * fixed NUL-terminated char[MF_STRUCT_ID] (a longer identifier is a format error). */
#ifndef MF_DATA_STRUCTURE_H
#define MF_DATA_STRUCTURE_H

#include <stdint.h>

#include "core/alloc.h"
#include "data/cif.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MF_STRUCT_ID 8             /* identifiers: 7 characters + NUL */
#define MF_STRUCT_NO_SEQ INT32_MIN /* label_seq_id '.' (non-polymer) or auth_seq_id '?' */

typedef enum {
  MF_ENTITY_UNKNOWN = 0,
  MF_ENTITY_POLYMER,
  MF_ENTITY_NON_POLYMER,
  MF_ENTITY_BRANCHED,
  MF_ENTITY_WATER,
  MF_ENTITY_MACROLIDE
} mf_entity_type;

typedef enum {
  MF_POLY_NONE = 0,      /* not a polymer, or no _entity_poly row */
  MF_POLY_PEPTIDE_L,     /* polypeptide(L) */
  MF_POLY_PEPTIDE_D,     /* polypeptide(D) */
  MF_POLY_DNA,           /* polydeoxyribonucleotide */
  MF_POLY_RNA,           /* polyribonucleotide */
  MF_POLY_DNA_RNA,       /* polydeoxyribonucleotide/polyribonucleotide hybrid */
  MF_POLY_OTHER          /* other types (polysaccharide, peptide nucleic acid, ...) */
} mf_poly_type;

typedef enum {
  MF_CONN_OTHER = 0,
  MF_CONN_COVALE,        /* covale, covale_base, covale_phosphate, covale_sugar */
  MF_CONN_DISULF,
  MF_CONN_METALC,
  MF_CONN_HYDROG,
  MF_CONN_MISMAT,
  MF_CONN_SALTBR,
  MF_CONN_MODRES
} mf_conn_type;

typedef struct {
  char id[MF_STRUCT_ID];
  mf_entity_type type;
  mf_poly_type poly_type;
  const char *seq;       /* _entity_poly.pdbx_seq_one_letter_code, whitespace removed; "" if none */
  const char *seq_can;   /* ..._can, whitespace removed; "" if none */
  int64_t poly_seq_start, poly_seq_count; /* rows in mf_structure.poly_* */
} mf_entity;

/* One partner of a _struct_conn row. */
typedef struct {
  char asym_id[MF_STRUCT_ID];   /* ptnrN_label_asym_id */
  char comp_id[MF_STRUCT_ID];   /* ptnrN_label_comp_id */
  char atom_id[MF_STRUCT_ID];   /* ptnrN_label_atom_id */
  char altloc[MF_STRUCT_ID];    /* pdbx_ptnrN_label_alt_id, "" if none */
  char symmetry[MF_STRUCT_ID];  /* ptnrN_symmetry, "" if none (1_555 is the identity) */
  int32_t seq_id;               /* ptnrN_label_seq_id, MF_STRUCT_NO_SEQ if '.' */
  int32_t auth_seq_id;          /* ptnrN_auth_seq_id */
  char ins_code;                /* pdbx_ptnrN_PDB_ins_code, '\0' if none */
  int64_t atom;                 /* index into the atoms, -1 when not among the kept atoms */
} mf_conn_partner;

typedef struct {
  char id[16];
  mf_conn_type type;
  int covalent;                 /* 1 for covale* and disulf */
  mf_conn_partner p[2];
} mf_conn;

typedef struct {
  char id[MF_STRUCT_ID];
  const char *details;          /* "" if none */
  int32_t oligomeric_count;     /* -1 if none */
  int32_t gen_start, gen_count; /* rows in mf_structure.assembly_gens */
} mf_assembly;

typedef struct {
  const char *oper_expression;  /* as written: "1", "(1-60)", "(1,2)(3,4)" */
  const char *asym_ids;         /* asym_id_list as written: "A,B,C" */
} mf_assembly_gen;

typedef struct {
  char id[16];
  const char *type;
  double r[9];                  /* matrix[i][j] row-major */
  double t[3];                  /* vector[i] */
} mf_struct_oper;

typedef struct mf_structure {
  char entry_id[32];            /* _entry.id, else the block name */
  const char *method;           /* _exptl.method, several rows joined with "; "; "" if none */
  double resolution;            /* Å; NaN when the file gives none */
  int64_t model_num;            /* pdbx_PDB_model_num of the kept model (1 when absent) */

  /* atoms (Na), in file order */
  int64_t n_atoms;
  char (*atom_name)[MF_STRUCT_ID]; /* label_atom_id */
  char (*element)[4];           /* type_symbol as written, e.g. "C", "FE", "Se" */
  char *altloc;                 /* first character of label_alt_id, '\0' if none */
  double *xyz;                  /* (Na, 3) Cartn_x, Cartn_y, Cartn_z */
  float *occupancy;             /* 1 when missing */
  float *b_factor;              /* B_iso_or_equiv, NaN when missing */
  int64_t *atom_row;            /* row of the atom in _atom_site (diagnostics) */

  /* residues (Nr) */
  int64_t n_residues;
  char (*res_name)[MF_STRUCT_ID]; /* label_comp_id */
  int32_t *seq_id;              /* label_seq_id, MF_STRUCT_NO_SEQ for '.' */
  int32_t *auth_seq_id;         /* MF_STRUCT_NO_SEQ if missing */
  char *ins_code;               /* pdbx_PDB_ins_code, '\0' if none */
  uint8_t *hetatm;              /* group_PDB is HETATM */
  int64_t *res_atom_start;      /* (Nr + 1): atoms of residue r are [start[r], start[r+1]) */

  /* chains (Nc) */
  int32_t n_chains;
  char (*chain_id)[MF_STRUCT_ID];      /* label_asym_id */
  char (*auth_chain_id)[MF_STRUCT_ID]; /* auth_asym_id ("" if the column is absent) */
  char (*chain_entity_id)[MF_STRUCT_ID]; /* label_entity_id ("" if absent) */
  int32_t *chain_entity;        /* index into entities, -1 if not in _entity */
  int64_t *chain_res_start;     /* (Nc + 1): residues of chain c are [start[c], start[c+1]) */

  /* entities, and _entity_poly_seq grouped by entity (Np rows) */
  int32_t n_entities;
  mf_entity *entities;
  int64_t n_poly_seq;
  int32_t *poly_num;            /* _entity_poly_seq.num */
  char (*poly_mon)[MF_STRUCT_ID]; /* mon_id */
  uint8_t *poly_hetero;         /* hetero = y (several monomers at one position) */

  int32_t n_conns;              /* _struct_conn rows (all types; see mf_conn.covalent) */
  mf_conn *conns;

  int32_t n_assemblies, n_assembly_gens, n_opers;
  mf_assembly *assemblies;
  mf_assembly_gen *assembly_gens;
  mf_struct_oper *opers;

  mf_arena arena;               /* owns all of the above, this struct included */
} mf_structure;

/* Builds the structure of data block `block` of an mmCIF document. */
mf_status mf_structure_from_cif(const mf_cif_doc *doc, int32_t block, mf_structure **out);
/* Reads an mmCIF file (plain or gzip) and builds the structure of its first block. */
mf_status mf_structure_read(const char *path, mf_structure **out);
void mf_structure_free(mf_structure *s);

/* Expands the oper_expression of assembly generator `gen` ("1", "1,2", "(1-60)",
 * "(X0)(1-60)", "(1,2)(61-88)") into *n_products sequences of *n_factors operator indices
 * (into s->opers), row-major in out[0, cap). A sequence [a, b] is the product
 * opers[a]·opers[b]: b is applied first. With out == NULL only the counts are returned;
 * MF_ERR_SHAPE when cap is too small; MF_ERR_FORMAT (naming the expression) for an
 * operator id not in _pdbx_struct_oper_list, a bad range or more than 8 factors. */
mf_status mf_structure_expand_opers(const mf_structure *s, int32_t gen, int32_t *out, int64_t cap,
                                    int64_t *n_products, int32_t *n_factors);
/* out (n, 3) = opers[seq[0]]·...·opers[seq[nf-1]] applied to in (n, 3); in == out allowed. */
void mf_structure_apply_opers(const mf_structure *s, const int32_t *seq, int32_t nf,
                              const double *in, double *out, int64_t n);

/* Residue and chain of an atom / residue by binary search over the start arrays. */
int64_t mf_structure_atom_residue(const mf_structure *s, int64_t atom);
int32_t mf_structure_residue_chain(const mf_structure *s, int64_t residue);

#ifdef __cplusplus
}
#endif

#endif
