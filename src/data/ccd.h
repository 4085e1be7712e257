/* ccd.h — the Chemical Component Dictionary (components.cif, full or a subset; plain or
 * gzip) as flat tables: per component its id, name, type, parent and one-letter code,
 * atoms (name, element, formal charge, reference coordinates, leaving/hydrogen/aromatic
 * flags) and bonds (atom pair, order, aromatic flag); look-up by id through a hash table;
 * a compact binary serialisation for fast reloads.
 *
 * Reference coordinates (spec §14.3): per component, the ideal coordinates
 * (_chem_comp_atom.pdbx_model_Cartn_{x,y,z}_ideal) when every atom has them, otherwise the
 * model coordinates (_chem_comp_atom.model_Cartn_{x,y,z}) when every atom has those,
 * otherwise per atom whichever exists (ideal first); an atom with neither gets (0,0,0) and
 * MF_CCD_ATOM_NO_COORDS (the featuriser's ref_mask = 0). The choice is in coord_source.
 *
 * Built on the STAR tokenizer of cif.h (one data block per component). The file is read
 * whole and parsed in chunks of whole data blocks, so the full CCD (~37,000 components)
 * does not need one value table for the whole text.
 *
 * Not here: conformer generation (RDKit), symmetry permutations, SMILES, the tokeniser's
 * policy on leaving atoms (the flag is recorded, nothing is removed). */
#ifndef MF_DATA_CCD_H
#define MF_DATA_CCD_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "data/residue.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MF_CCD_ID_MAX 8   /* component id incl. NUL: CCD ids have up to 5 characters */
#define MF_CCD_NAME_MAX 8 /* atom name incl. NUL: CCD atom ids have up to 4 (6 allowed) */

enum { /* mf_ccd_atom.flags */
  MF_CCD_ATOM_LEAVING = 1,   /* pdbx_leaving_atom_flag = Y */
  MF_CCD_ATOM_HYDROGEN = 2,  /* element H or D */
  MF_CCD_ATOM_AROMATIC = 4,  /* pdbx_aromatic_flag = Y */
  MF_CCD_ATOM_NO_COORDS = 8  /* neither ideal nor model coordinates */
};

typedef enum { /* mf_ccd_component.coord_source */
  MF_CCD_COORDS_NONE = 0,  /* no atoms */
  MF_CCD_COORDS_IDEAL = 1, /* every atom from pdbx_model_Cartn_*_ideal */
  MF_CCD_COORDS_MODEL = 2, /* every atom from model_Cartn_* (ideal incomplete) */
  MF_CCD_COORDS_MIXED = 3  /* neither complete: per atom ideal, else model, else none */
} mf_ccd_coord_source;

typedef enum { /* _chem_comp_bond.value_order */
  MF_BOND_UNKNOWN = 0, MF_BOND_SINGLE = 1, MF_BOND_DOUBLE = 2, MF_BOND_TRIPLE = 3,
  MF_BOND_QUADRUPLE = 4, MF_BOND_AROMATIC = 5, MF_BOND_DELOCALIZED = 6, MF_BOND_PI = 7,
  MF_BOND_POLYMERIC = 8
} mf_bond_order;

typedef struct {
  char name[MF_CCD_NAME_MAX]; /* atom_id, e.g. "CA", "O5'" */
  char element[4];            /* type_symbol as in the file, e.g. "C", "CL", "ZN" */
  uint8_t atomic_number;      /* 1..118 from the element; 0 when unknown ("X") */
  int8_t charge;              /* formal charge */
  uint8_t flags;              /* MF_CCD_ATOM_* */
  uint8_t pad_;
  float pos[3];               /* reference coordinates, Å (see coord_source) */
} mf_ccd_atom;

typedef struct {
  int32_t a, b;      /* component-local atom indices (0-based) */
  uint8_t order;     /* mf_bond_order */
  uint8_t aromatic;  /* pdbx_aromatic_flag = Y */
  uint8_t pad_[2];
} mf_ccd_bond;

typedef struct {
  char id[MF_CCD_ID_MAX];     /* "ALA" */
  char parent[MF_CCD_ID_MAX]; /* first mon_nstd_parent_comp_id ("" if none), e.g. MSE → MET */
  int64_t name_off, type_off; /* _chem_comp.name / .type in the string pool (mf_ccd_name) */
  int64_t atom0, n_atoms;     /* atoms [atom0, atom0 + n_atoms) of mf_ccd.atoms */
  int64_t bond0, n_bonds;     /* bonds [bond0, bond0 + n_bonds) of mf_ccd.bonds */
  int32_t n_heavy;            /* atoms that are not hydrogen */
  int32_t formal_charge;      /* _chem_comp.pdbx_formal_charge (0 when '?') */
  char one_letter;            /* _chem_comp.one_letter_code, 0 when '?' */
  uint8_t coord_source;       /* mf_ccd_coord_source */
  uint8_t pad_[6];
} mf_ccd_component;

typedef struct {
  int64_t n_components, n_atoms, n_bonds;
  mf_ccd_component *components; /* (n_components) in file order */
  mf_ccd_atom *atoms;           /* (n_atoms) component by component, file order */
  mf_ccd_bond *bonds;           /* (n_bonds) component by component, file order */
  char *strings;                /* NUL-terminated names and types */
  int64_t strings_len;
  int64_t *table;               /* (table_size) open-addressing hash: component index or -1 */
  int64_t table_size;           /* power of two, >= 2 * n_components */
} mf_ccd;

/* Reads components.cif (plain or gzip). Errors (MF_ERR_IO / MF_ERR_FORMAT / MF_ERR_NOMEM)
 * name the file, the component and, where there is one, the line and the field: a block
 * without _chem_comp.id, a duplicate component or atom id, an atom or bond row of another
 * component, a bond to an unknown atom, a bad number, charge, flag or bond order, an atom
 * name or id too long, and every tokenizer error of cif.h. On error *ccd is zeroed. */
mf_status mf_ccd_read(const char *path, mf_ccd *ccd);
/* Same for text in memory (gzip or plain); `name` is used in messages. */
mf_status mf_ccd_parse(const void *data, size_t n, const char *name, mf_ccd *ccd);
void mf_ccd_free(mf_ccd *ccd); /* frees and zeroes; safe on a zeroed struct */

/* Text per tokenizer call when reading (default 32 MiB; whole data blocks, so a chunk can be
 * larger). Smaller chunks bound memory; tests use tiny ones. 0 restores the default.
 * Process-wide; set it before reading, not while another thread reads. */
void mf_ccd_set_chunk_bytes(size_t bytes);

/* Component by id (exact, case-sensitive as in the CCD); NULL if absent. */
const mf_ccd_component *mf_ccd_find(const mf_ccd *ccd, const char *id);
const char *mf_ccd_name(const mf_ccd *ccd, const mf_ccd_component *c); /* _chem_comp.name */
const char *mf_ccd_type(const mf_ccd *ccd, const mf_ccd_component *c); /* _chem_comp.type */
/* Local index of an atom by name in component c, -1 if none. */
int64_t mf_ccd_atom_index(const mf_ccd *ccd, const mf_ccd_component *c, const char *atom_name);
/* Restype class of a component for a polymer of type t: the standard class of its id, else of
 * its parent, else UNK for protein / N for RNA / DN for DNA / UNK for ligands. */
int mf_ccd_restype(const mf_ccd *ccd, const mf_ccd_component *c, mf_moltype t);

/* Atomic number of an element symbol (either case, "D" and "T" count as 1); 0 if unknown. */
int mf_element_number(const char *symbol);

/* Binary serialisation: a little-endian file with a magic, a version, the table sizes and a
 * checksum of the payload. mf_ccd_load checks all of them (MF_ERR_FORMAT naming the file and
 * what is wrong) and rebuilds the hash table. Loads what mf_ccd_save wrote on the same ABI.
 * mf_ccd_save writes it atomically (core/atomic_file.h: <path>.tmp.XXXXXX, synced, renamed
 * over path, directory synced): a failed save (MF_ERR_IO) leaves the previous file as it
 * was and no temp file. */
mf_status mf_ccd_save(const mf_ccd *ccd, const char *path);
mf_status mf_ccd_load(const char *path, mf_ccd *ccd);

#ifdef __cplusplus
}
#endif

#endif
