/* residue.h — the 32 residue classes of AF3's `restype` feature (spec §3.2, [PX] order) and
 * the mappings into them: one-letter codes (a3m/FASTA, per molecule type) and CCD
 * three-letter codes of the standard residues.
 *
 *   0–19  amino acids, alphabetical by 3-letter code: ALA ARG ASN ASP CYS GLN GLU GLY HIS ILE
 *         LEU LYS MET PHE PRO SER THR TRP TYR VAL
 *   20    UNK (unknown amino acid; also every ligand token)
 *   21–24 RNA A G C U        25 unknown RNA (CCD "N")
 *   26–29 DNA DA DG DC DT    30 unknown DNA (CCD "DN")
 *   31    gap
 *
 * It is not a chemistry table: modified residues (MSE, SEP, ...) are not known here; their
 * canonical parent comes from the CCD (mf_ccd_restype in ccd.h). */
#ifndef MF_DATA_RESIDUE_H
#define MF_DATA_RESIDUE_H

#ifdef __cplusplus
extern "C" {
#endif

enum {
  MF_RESTYPE_ALA = 0, MF_RESTYPE_ARG, MF_RESTYPE_ASN, MF_RESTYPE_ASP, MF_RESTYPE_CYS,
  MF_RESTYPE_GLN, MF_RESTYPE_GLU, MF_RESTYPE_GLY, MF_RESTYPE_HIS, MF_RESTYPE_ILE,
  MF_RESTYPE_LEU, MF_RESTYPE_LYS, MF_RESTYPE_MET, MF_RESTYPE_PHE, MF_RESTYPE_PRO,
  MF_RESTYPE_SER, MF_RESTYPE_THR, MF_RESTYPE_TRP, MF_RESTYPE_TYR, MF_RESTYPE_VAL,
  MF_RESTYPE_UNK = 20,
  MF_RESTYPE_A = 21, MF_RESTYPE_G, MF_RESTYPE_C, MF_RESTYPE_U,
  MF_RESTYPE_N = 25, /* unknown RNA */
  MF_RESTYPE_DA = 26, MF_RESTYPE_DG, MF_RESTYPE_DC, MF_RESTYPE_DT,
  MF_RESTYPE_DN = 30, /* unknown DNA */
  MF_RESTYPE_GAP = 31,
  MF_RESTYPE_COUNT = 32
};

/* Molecule types of a chain or sequence. */
typedef enum { MF_MOL_PROTEIN = 0, MF_MOL_RNA, MF_MOL_DNA, MF_MOL_LIGAND } mf_moltype;
const char *mf_moltype_name(mf_moltype t); /* "protein", "rna", "dna", "ligand" */

/* One-letter code (either case) → class, for a sequence of molecule type t:
 *   protein: the 20 standard letters; B→ASP, Z→GLU, U (selenocysteine)→CYS as [DM] does;
 *            X, J, O and any other letter → UNK;
 *   rna:     A G C U; any other letter → N (25);
 *   dna:     A G C T; any other letter → DN (30);
 *   ligand:  any letter → UNK.
 * '-' → gap (31) for every type. Anything that is not a letter or '-' → -1. */
int mf_restype_from_letter(char c, mf_moltype t);

/* CCD code of a standard residue → class: "ALA".."VAL", "UNK", "A" "G" "C" "U" "N",
 * "DA" "DG" "DC" "DT" "DN". Any other code → -1 (ligand or modified residue: ask the CCD). */
int mf_restype_from_ccd(const char *code);

/* Class → CCD code ("ALA", ..., "UNK", "A", ..., "DN", "-" for the gap); NULL if out of range. */
const char *mf_restype_name(int restype);
/* Class → one-letter code: protein letters, 'X' for UNK, A G C U N, A G C T N (DNA), '-'.
 * 0 if out of range. */
char mf_restype_letter(int restype);
/* Molecule type of a class (gap → MF_MOL_PROTEIN by convention; check restype == GAP first). */
mf_moltype mf_restype_moltype(int restype);

#ifdef __cplusplus
}
#endif

#endif
