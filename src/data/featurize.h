/* featurize.h — tokenisation and the deterministic features of one entry (spec §3):
 * from a parsed structure, the CCD and the entry's a3m MSAs to a feature set
 * (features.h) that `megafold prep` caches. Random work (crop, MSA row subsampling,
 * reference-conformer centring and rotation, one-hot encodings, arcsinh of the charge,
 * has_deletion/deletion_value) is not here: the loader and the model do it per step.
 *
 * The features and their shapes are listed in MF_FEATURES below (one line each); the
 * featuriser writes exactly these, and the loader and the model read them by name.
 *
 * Policies (the contract; the tests check them on real entries):
 *
 * Chains. Every chain of the structure (structure.h: a run of one label_asym_id; waters are
 *   already gone) in file order. A chain is a polymer when its entity is a polymer (or, with
 *   no _entity row, when its residues carry label_seq_ids); non-polymer and branched
 *   (glycan) chains are ligand chains. A chain that ends up without atoms is left out.
 *   asym_id = index of the chain among the kept chains (0-based). entity_id = index of its
 *   label_entity_id among the distinct ones, in order of first appearance (0-based; a chain
 *   without one gets an id of its own); sym_id = index of the chain among the kept chains of
 *   its entity (0-based).
 *
 * Residues of a polymer chain: the FULL entity sequence from _entity_poly_seq (the first
 *   monomer of a position with several, hetero = y), observed or not; an observed residue is
 *   matched by label_seq_id = _entity_poly_seq.num and its observed comp_id is used (the
 *   reader's microheterogeneity choice). residue_index = label_seq_id. Unobserved residues
 *   get their tokens and reference atoms with coordinate_mask = 0. When the entity has no
 *   _entity_poly_seq or an observed residue cannot be matched (no label_seq_id, or a number
 *   not in the sequence), the chain falls back to its observed residues only (residue_index =
 *   label_seq_id, or the 1-based ordinal when missing); a second observed residue at one
 *   position is ignored. Residues of a ligand chain: the observed ones, residue_index =
 *   1-based ordinal in the chain.
 *
 * Tokens. A residue of a polymer chain whose comp_id is standard for the chain's molecule
 *   type (20 amino acids + UNK; A G C U N; DA DG DC DT DN; hybrid chains: any of them) is one
 *   token. Every other residue (modified residue, ligand, glycan, ion) is one token per atom.
 *   restype: standard class; modified polymer residue: the class of its CCD parent
 *   (mf_ccd_restype: MSE → MET, unknown parent → UNK / N / DN); ligand: UNK (20).
 *   Molecule type per token (is_protein/is_rna/is_dna/is_ligand, exactly one set): the
 *   chain's type for polymer residues, including modified residues (so MSE is protein);
 *   ligand for ligand chains. In hybrid or "other" polymers a residue takes the type of its
 *   standard class, else of its CCD parent, else of its CCD _chem_comp.type (DNA / RNA /
 *   PEPTIDE), else ligand.
 *
 * Atoms of a residue: the CCD component's heavy atoms in CCD order, WITHOUT leaving atoms
 *   (pdbx_leaving_atom_flag = Y), with two exceptions:
 *     - the last residue of a protein chain's sequence keeps its heavy leaving atoms (OXT);
 *       OXT of any other residue, and nucleotides' OP3, are not atoms (a file's OXT/OP3 there
 *       is dropped);
 *     - a ligand-chain residue keeps the leaving atoms that are present in the file (a free
 *       sugar keeps O1, a glycosylated one has none).
 *   Reference and label features use this one list. File atoms without a CCD counterpart in
 *   the list are dropped (counted in a debug message). An atom absent from the file has
 *   coordinate = 0 and coordinate_mask = 0. A component missing from the CCD is an error
 *   (MF_ERR_FORMAT naming entry, chain, residue and component).
 *
 * Centre / representative atoms (global atom indices, -1 when the token has none): protein
 *   CA / CB (CA when the residue has no CB: GLY); nucleotides C1' / C4 (A G DA DG),
 *   C2 (C U DC DT), C1' (N DN); atom tokens: the atom for both. token_resolved =
 *   coordinate_mask of the centre atom.
 *
 * token_bonds (N, N), symmetric, zero diagonal: 1 where a covalent bond joins two different
 *   tokens at least one of which is an atom token (ligand or modified residue): the CCD
 *   bonds inside one atomised residue, and _struct_conn rows of type covale* / disulf between
 *   kept atoms in the same (or no) symmetry operator. Backbone links between two
 *   consecutive residues of one polymer chain (C–N, O3'–P) are excluded, as are bonds
 *   between two one-token (standard) residues.
 *
 * MSA (spec §3.4). Protein chains read <msa_dir>/<entry id>_<label_entity_id>.a3m.gz (or
 *   .a3m); the query must have one column per residue of the chain, with the residue's class
 *   (an X on either side matches anything), else MF_ERR_FORMAT naming the entry, chain,
 *   entity, file and both lengths. Other chains, and chains without a file, are query-only.
 *   The combined (S, N) MSA is UNPAIRED: row 0 is the query (= restype) over all tokens;
 *   then, entity after entity, the entity's rows 1..S_e-1 (S_e capped at max_msa_rows)
 *   placed in the columns of EVERY chain of that entity (dense over copies, as AF2-Multimer
 *   does for homomers, so S grows with the number of distinct entities, not of chains) and
 *   gap (31) in all other columns; so S = 1 + Σ_e (S_e − 1). Atom tokens of a modified
 *   residue get the gap in every row but the query. msa_deletion is the deletion count
 *   before the column, saturated at 255. profile and deletion_mean are per entity over ALL
 *   rows of its file (before the cap): for one-token residues the a3m column statistics,
 *   for atom tokens of a chain with S_e rows 1/S_e on the token's class and the rest on the
 *   gap; query-only chains: one-hot restype, deletion_mean 0.
 */
#ifndef MF_DATA_FEATURIZE_H
#define MF_DATA_FEATURIZE_H

#include "data/ccd.h"
#include "data/features.h"
#include "data/structure.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The features of one entry: X(name, dtype, ndim, shape, meaning). Dimension letters:
 * N tokens, Na atoms, S MSA rows. Indices are 0-based; int features are int32. */
#define MF_FEATURES(X)                                                                         \
  /* tokens */                                                                                 \
  X(restype, MF_I32, 1, "N", "class 0..31 (residue.h); one-hot later")                        \
  X(residue_index, MF_I32, 1, "N", "label_seq_id (polymers) / ordinal (ligands), shared by atom tokens") \
  X(token_index, MF_I32, 1, "N", "0..N-1")                                                    \
  X(asym_id, MF_I32, 1, "N", "chain instance")                                                \
  X(entity_id, MF_I32, 1, "N", "distinct entity")                                             \
  X(sym_id, MF_I32, 1, "N", "copy of the entity")                                             \
  X(is_protein, MF_U8, 1, "N", "molecule type masks, exactly one is 1")                        \
  X(is_rna, MF_U8, 1, "N", "")                                                                \
  X(is_dna, MF_U8, 1, "N", "")                                                                \
  X(is_ligand, MF_U8, 1, "N", "")                                                             \
  X(token_bonds, MF_U8, 2, "N,N", "covalent bonds with an atom-token side, symmetric")          \
  X(token_centre_atom, MF_I32, 1, "N", "CA / C1' / the atom; -1 if none")                      \
  X(token_rep_atom, MF_I32, 1, "N", "CB (GLY: CA) / C4 / C2 / C1' / the atom; -1 if none")     \
  X(token_resolved, MF_U8, 1, "N", "coordinate_mask of the centre atom")                      \
  /* atoms */                                                                                  \
  X(ref_pos, MF_F32, 2, "Na,3", "CCD reference coordinates, as in the CCD (not centred)")     \
  X(ref_mask, MF_U8, 1, "Na", "the CCD has coordinates for the atom")                         \
  X(ref_element, MF_I32, 1, "Na", "atomic number (0 unknown)")                                \
  X(ref_charge, MF_F32, 1, "Na", "formal charge (raw; the model applies arcsinh)")            \
  X(ref_atom_name_chars, MF_U8, 2, "Na,4", "ord(c)-32 of the name padded with spaces")        \
  X(ref_space_uid, MF_I32, 1, "Na", "residue instance")                                       \
  X(atom_to_token, MF_I32, 1, "Na", "owning token; atoms of a token are contiguous")          \
  X(atom_to_tokatom_idx, MF_I32, 1, "Na", "slot in the token (< 24)")                         \
  X(coordinate, MF_F32, 2, "Na,3", "ground truth, Å; 0 where unresolved")                     \
  X(coordinate_mask, MF_U8, 1, "Na", "atom resolved in the file")                             \
  /* MSA */                                                                                    \
  X(msa, MF_U8, 2, "S,N", "classes 0..31; row 0 = restype")                                    \
  X(msa_deletion, MF_U8, 2, "S,N", "deletion count before the column, saturated at 255")      \
  X(msa_row_entity, MF_I32, 1, "S", "entity_id whose rows these are; -1 for row 0")           \
  X(profile, MF_F32, 2, "N,32", "class frequencies over the entity's full MSA; rows sum to 1") \
  X(deletion_mean, MF_F32, 1, "N", "mean deletion count over the entity's full MSA")

typedef struct {
  const mf_ccd *ccd;   /* reference conformers, atom names, bonds (required) */
  const char *msa_dir; /* directory with <id>_<entity_id>.a3m[.gz]; NULL: query-only MSA */
  int max_msa_rows;    /* keep at most this many rows per entity (first rows first, query
                          included); 0 = all */
} mf_featurize_opts;

/* Builds the features of the structure `st` of entry `id` into `out` (initialised here).
 * Errors name the entry and what is wrong (unknown component without CCD entry, MSA
 * length mismatch, ...); a failed call leaves `out` freed. */
mf_status mf_featurize_structure(const mf_structure *st, const char *id,
                                 const mf_featurize_opts *opts, mf_feature_set *out);

/* The entry id of an mmCIF path: the file name without .cif.gz / .cif, into id[n].
 * MF_ERR_CONFIG when empty or too long (n or MF_FEAT_ID_MAX bytes with the NUL). */
mf_status mf_featurize_entry_id(const char *path, char *id, size_t n);

/* Reads the mmCIF at `path` (entry id: mf_featurize_entry_id) and featurises it. */
mf_status mf_featurize_file(const char *path, const mf_featurize_opts *opts,
                            mf_feature_set *out);

#ifdef __cplusplus
}
#endif

#endif
