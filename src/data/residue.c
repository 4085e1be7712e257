/* residue.c — restype tables and mappings; see residue.h. No chemistry beyond names. */
#include "data/residue.h"

#include <string.h>

static const char *const k_names[MF_RESTYPE_COUNT] = {
    "ALA", "ARG", "ASN", "ASP", "CYS", "GLN", "GLU", "GLY", "HIS", "ILE", "LEU",
    "LYS", "MET", "PHE", "PRO", "SER", "THR", "TRP", "TYR", "VAL", "UNK", "A",
    "G",   "C",   "U",   "N",   "DA",  "DG",  "DC",  "DT",  "DN",  "-"};

/* one-letter codes of classes 0..31 */
static const char k_letters[MF_RESTYPE_COUNT + 1] = "ARNDCQEGHILKMFPSTWYVXAGCUNAGCTN-";

const char *mf_moltype_name(mf_moltype t) {
  switch (t) {
  case MF_MOL_PROTEIN: return "protein";
  case MF_MOL_RNA: return "rna";
  case MF_MOL_DNA: return "dna";
  case MF_MOL_LIGAND: return "ligand";
  }
  return "?";
}

int mf_restype_from_letter(char c, mf_moltype t) {
  if (c == '-') return MF_RESTYPE_GAP;
  if (c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
  if (c < 'A' || c > 'Z') return -1;
  switch (t) {
  case MF_MOL_PROTEIN:
    switch (c) {
    case 'B': return MF_RESTYPE_ASP;
    case 'Z': return MF_RESTYPE_GLU;
    case 'U': return MF_RESTYPE_CYS;
    default: break;
    }
    for (int k = 0; k < 20; k++)
      if (k_letters[k] == c) return k;
    return MF_RESTYPE_UNK;
  case MF_MOL_RNA:
    switch (c) {
    case 'A': return MF_RESTYPE_A;
    case 'G': return MF_RESTYPE_G;
    case 'C': return MF_RESTYPE_C;
    case 'U': return MF_RESTYPE_U;
    default: return MF_RESTYPE_N;
    }
  case MF_MOL_DNA:
    switch (c) {
    case 'A': return MF_RESTYPE_DA;
    case 'G': return MF_RESTYPE_DG;
    case 'C': return MF_RESTYPE_DC;
    case 'T': return MF_RESTYPE_DT;
    default: return MF_RESTYPE_DN;
    }
  case MF_MOL_LIGAND: return MF_RESTYPE_UNK;
  }
  return -1;
}

int mf_restype_from_ccd(const char *code) {
  if (!code) return -1;
  for (int k = 0; k < MF_RESTYPE_GAP; k++)
    if (strcmp(code, k_names[k]) == 0) return k;
  return -1;
}

const char *mf_restype_name(int restype) {
  return restype >= 0 && restype < MF_RESTYPE_COUNT ? k_names[restype] : NULL;
}

char mf_restype_letter(int restype) {
  return restype >= 0 && restype < MF_RESTYPE_COUNT ? k_letters[restype] : 0;
}

mf_moltype mf_restype_moltype(int restype) {
  if (restype >= MF_RESTYPE_A && restype <= MF_RESTYPE_N) return MF_MOL_RNA;
  if (restype >= MF_RESTYPE_DA && restype <= MF_RESTYPE_DN) return MF_MOL_DNA;
  return MF_MOL_PROTEIN;
}
