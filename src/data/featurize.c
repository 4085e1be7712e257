/* featurize.c — the tokeniser and featuriser of spec §3: structure + CCD + a3m files → the
 * feature set listed in featurize.h (MF_FEATURES), following the policies written there.
 *
 * Steps: (1) residues per chain (full entity sequence for polymers, observed residues for
 * ligands), each resolved to its CCD component; (2) the atoms of every residue (CCD heavy
 * atoms under the leaving-atom policy) and the tokens; (3) token and atom features with
 * the ground truth matched by atom name; (4) token bonds from the CCD and _struct_conn;
 * (5) the combined unpaired MSA, profile and deletion_mean.
 * Not here: cropping, MSA subsampling, augmentation, record encoding (features.c). */
#define _POSIX_C_SOURCE 200809L /* access */
#include "data/featurize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/a3m.h"

#define MAX_TOKEN_ATOMS 24
#define MOL_HYBRID (-1) /* chain whose residues decide their own molecule type */

typedef struct {
  const char *name;              /* comp_id (observed, else _entity_poly_seq) */
  const mf_ccd_component *comp;
  int64_t file_res;              /* residue in the structure, -1 when unobserved */
  int32_t seq_num;               /* label_seq_id / _entity_poly_seq.num, MF_STRUCT_NO_SEQ */
  int32_t res_index;             /* residue_index feature */
  int32_t chain;                 /* index into fz.ch */
  int32_t restype;
  int8_t moltype;                /* mf_moltype */
  uint8_t standard, cterm;
  int64_t atom0, n_atoms, tok0, n_tok;
} fz_res;

typedef struct {
  int32_t file_chain;
  int polymer;
  int moltype;                   /* mf_moltype or MOL_HYBRID */
  int64_t res0, n_res;
  int32_t entity, sym;
  const char *entity_key;        /* label_entity_id, NULL when none */
} fz_chain;

typedef struct {
  const mf_structure *st;
  const char *id;
  const mf_featurize_opts *opts;
  const mf_ccd *ccd;
  fz_chain *ch;
  int32_t n_ch;
  fz_res *res;
  int64_t n_res;
  int64_t Na, N;
  int32_t n_entities;
  int64_t dropped_atoms;
  /* scratch */
  uint8_t *keep;                 /* (max component atoms) */
  int64_t *local_map;            /* (max component atoms) local atom -> global atom */
  int64_t max_comp_atoms;
  int64_t *file2atom;            /* (st->n_atoms) structure atom -> global atom, -1 */
  int32_t *atom_local;           /* (Na) CCD-local index of each atom */
  int32_t *atom_res;             /* (Na) residue of each atom */
  int32_t *tok_res;              /* (N) residue of each token */
} fz_ctx;

/* --------------------------------------------------------------------- small helpers */
static const char *chain_name(const fz_ctx *z, int32_t c) {
  return z->st->chain_id[z->ch[c].file_chain];
}

/* "residue 12 (auth 37)" or "unobserved residue 12" into buf */
static const char *res_desc(const fz_ctx *z, const fz_res *r, char *buf, size_t n) {
  if (r->file_res < 0) {
    snprintf(buf, n, "unobserved residue %d", (int)r->seq_num);
  } else {
    int32_t a = z->st->auth_seq_id[r->file_res];
    if (r->seq_num == MF_STRUCT_NO_SEQ)
      snprintf(buf, n, "residue %lld (auth %d)", (long long)r->res_index,
               a == MF_STRUCT_NO_SEQ ? -1 : (int)a);
    else
      snprintf(buf, n, "residue %d (auth %d)", (int)r->seq_num, a == MF_STRUCT_NO_SEQ ? -1 : (int)a);
  }
  return buf;
}

static int contains_ci(const char *s, const char *w) {
  size_t n = strlen(w);
  for (; *s; s++) {
    size_t k = 0;
    while (k < n && s[k]) {
      char a = s[k], b = w[k];
      if (a >= 'a' && a <= 'z') a = (char)(a - 'a' + 'A');
      if (a != b) break;
      k++;
    }
    if (k == n) return 1;
  }
  return 0;
}

static const mf_ccd_atom *res_atom(const fz_ctx *z, const fz_res *r, int64_t local) {
  return &z->ccd->atoms[r->comp->atom0 + local];
}

/* ------------------------------------------------------------ (1) residues of a chain */
typedef struct {
  int32_t num;
  int64_t pos;
} num_pos;

static int cmp_num_pos(const void *a, const void *b) {
  const num_pos *x = a, *y = b;
  if (x->num != y->num) return x->num < y->num ? -1 : 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Molecule type and restype of a residue of a polymer chain of molecule type cm. */
static void classify_polymer_residue(const fz_ctx *z, int cm, fz_res *r) {
  int std_class = mf_restype_from_ccd(r->comp->id);
  if (cm != MOL_HYBRID) {
    r->moltype = (int8_t)cm;
    if (cm == MF_MOL_LIGAND) {
      r->standard = 0;
      r->restype = MF_RESTYPE_UNK;
      return;
    }
    r->standard = std_class >= 0 && (int)mf_restype_moltype(std_class) == cm;
    r->restype = r->standard ? std_class : mf_ccd_restype(z->ccd, r->comp, (mf_moltype)cm);
    return;
  }
  if (std_class >= 0) {
    r->standard = 1;
    r->moltype = (int8_t)mf_restype_moltype(std_class);
    r->restype = std_class;
    return;
  }
  r->standard = 0;
  int p = r->comp->parent[0] ? mf_restype_from_ccd(r->comp->parent) : -1;
  mf_moltype t;
  if (p >= 0) {
    t = mf_restype_moltype(p);
  } else {
    const char *ty = mf_ccd_type(z->ccd, r->comp);
    t = contains_ci(ty, "DNA") ? MF_MOL_DNA
        : contains_ci(ty, "RNA") ? MF_MOL_RNA
        : contains_ci(ty, "PEPTIDE") ? MF_MOL_PROTEIN : MF_MOL_LIGAND;
  }
  r->moltype = (int8_t)t;
  r->restype = mf_ccd_restype(z->ccd, r->comp, t);
}

static int chain_moltype_of(const mf_structure *st, int32_t fc, int *polymer) {
  int32_t e = st->chain_entity[fc];
  if (e >= 0) {
    const mf_entity *en = &st->entities[e];
    if (en->type != MF_ENTITY_POLYMER) {
      *polymer = 0;
      return MF_MOL_LIGAND;
    }
    *polymer = 1;
    switch (en->poly_type) {
    case MF_POLY_PEPTIDE_L:
    case MF_POLY_PEPTIDE_D: return MF_MOL_PROTEIN;
    case MF_POLY_DNA: return MF_MOL_DNA;
    case MF_POLY_RNA: return MF_MOL_RNA;
    default: return MOL_HYBRID;
    }
  }
  /* no entity row: a polymer if its residues carry label_seq_ids */
  *polymer = 0;
  for (int64_t r = st->chain_res_start[fc]; r < st->chain_res_start[fc + 1]; r++)
    if (st->seq_id[r] != MF_STRUCT_NO_SEQ) *polymer = 1;
  return *polymer ? MOL_HYBRID : MF_MOL_LIGAND;
}

/* Appends the residues of structure chain fc as chain z->n_ch. */
static mf_status add_chain(fz_ctx *z, int32_t fc) {
  const mf_structure *st = z->st;
  fz_chain *c = &z->ch[z->n_ch];
  memset(c, 0, sizeof *c);
  c->file_chain = fc;
  c->moltype = chain_moltype_of(st, fc, &c->polymer);
  c->entity_key = st->chain_entity_id[fc][0] ? st->chain_entity_id[fc] : NULL;
  c->res0 = z->n_res;
  const int64_t r0 = st->chain_res_start[fc], r1 = st->chain_res_start[fc + 1];
  const int32_t e = st->chain_entity[fc];
  int full = c->polymer && e >= 0 && st->entities[e].poly_seq_count > 0;
  int64_t n = 0;
  fz_res *R = z->res + z->n_res;

  if (full) {
    const mf_entity *en = &st->entities[e];
    int32_t prev = 0;
    for (int64_t k = 0; k < en->poly_seq_count; k++) {
      int64_t row = en->poly_seq_start + k;
      if (k > 0 && st->poly_num[row] == prev) continue; /* hetero: first monomer */
      prev = st->poly_num[row];
      memset(&R[n], 0, sizeof R[n]);
      R[n].name = st->poly_mon[row];
      R[n].file_res = -1;
      R[n].seq_num = st->poly_num[row];
      R[n].res_index = st->poly_num[row];
      n++;
    }
    num_pos *np = mf_malloc((size_t)n * sizeof *np, "featurize: sequence numbers");
    if (!np) return MF_ERR_NOMEM;
    for (int64_t k = 0; k < n; k++) np[k] = (num_pos){R[k].seq_num, k};
    qsort(np, (size_t)n, sizeof *np, cmp_num_pos);
    for (int64_t r = r0; r < r1 && full; r++) {
      int32_t sid = st->seq_id[r];
      int64_t lo = 0, hi = n; /* first with num >= sid */
      while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (np[mid].num < sid) lo = mid + 1;
        else hi = mid;
      }
      if (sid == MF_STRUCT_NO_SEQ || lo >= n || np[lo].num != sid) {
        MF_DEBUG("%s: chain %s: observed residue %s %d not in the entity sequence; using the "
                 "observed residues only", z->id, st->chain_id[fc], st->res_name[r], (int)sid);
        full = 0;
        break;
      }
      fz_res *p = &R[np[lo].pos];
      if (p->file_res >= 0) {
        MF_DEBUG("%s: chain %s: second residue at position %d (%s) ignored", z->id,
                 st->chain_id[fc], (int)sid, st->res_name[r]);
        continue;
      }
      p->file_res = r;
      p->name = st->res_name[r];
    }
    mf_free(np);
  }
  if (!full) {
    n = 0;
    for (int64_t r = r0; r < r1; r++) {
      memset(&R[n], 0, sizeof R[n]);
      R[n].name = st->res_name[r];
      R[n].file_res = r;
      R[n].seq_num = c->polymer ? st->seq_id[r] : MF_STRUCT_NO_SEQ;
      R[n].res_index = R[n].seq_num != MF_STRUCT_NO_SEQ ? R[n].seq_num : (int32_t)(n + 1);
      n++;
    }
  }
  for (int64_t k = 0; k < n; k++) {
    fz_res *r = &R[k];
    r->chain = z->n_ch;
    r->comp = mf_ccd_find(z->ccd, r->name);
    if (!r->comp) {
      char buf[96];
      return mf_error_set(MF_ERR_FORMAT, "%s: chain %s (entity %s), %s: component %s is not in "
                          "the CCD", z->id, st->chain_id[fc],
                          st->chain_entity_id[fc][0] ? st->chain_entity_id[fc] : "?",
                          res_desc(z, r, buf, sizeof buf), r->name);
    }
    if (c->polymer) {
      classify_polymer_residue(z, c->moltype, r);
    } else {
      r->moltype = MF_MOL_LIGAND;
      r->standard = 0;
      r->restype = MF_RESTYPE_UNK;
    }
  }
  if (n > 0 && R[n - 1].moltype == MF_MOL_PROTEIN && c->polymer) R[n - 1].cterm = 1;
  c->n_res = n;
  z->n_res += n;
  z->n_ch++;
  return MF_OK;
}

/* ----------------------------------------------------------------- (2) atoms, tokens */
static int file_has_atom(const mf_structure *st, int64_t res, const char *name) {
  if (res < 0) return 0;
  for (int64_t a = st->res_atom_start[res]; a < st->res_atom_start[res + 1]; a++)
    if (!strcmp(st->atom_name[a], name)) return 1;
  return 0;
}

/* Marks the atoms of residue r in z->keep (CCD-local); returns how many. */
static int64_t residue_keep(fz_ctx *z, const fz_res *r) {
  const int polymer_chain = z->ch[r->chain].polymer;
  int64_t n = 0;
  for (int64_t j = 0; j < r->comp->n_atoms; j++) {
    const mf_ccd_atom *a = res_atom(z, r, j);
    int k = !(a->flags & MF_CCD_ATOM_HYDROGEN);
    if (k && (a->flags & MF_CCD_ATOM_LEAVING))
      k = polymer_chain ? r->cterm : file_has_atom(z->st, r->file_res, a->name);
    z->keep[j] = (uint8_t)k;
    n += k;
  }
  return n;
}

/* Residue lists → atom and token counts; drops ligand residues (and chains) without atoms. */
static mf_status layout(fz_ctx *z) {
  int64_t w = 0, Na = 0, N = 0;
  int32_t cw = 0;
  for (int32_t c = 0; c < z->n_ch; c++) {
    fz_chain ch = z->ch[c];
    int64_t first = w;
    for (int64_t k = ch.res0; k < ch.res0 + ch.n_res; k++) {
      fz_res r = z->res[k];
      r.n_atoms = residue_keep(z, &r);
      if (r.n_atoms == 0) {
        char buf[96];
        if (ch.polymer)
          return mf_error_set(MF_ERR_FORMAT, "%s: chain %s, %s: component %s has no heavy atoms",
                              z->id, chain_name(z, c), res_desc(z, &r, buf, sizeof buf), r.name);
        continue;
      }
      r.n_tok = r.standard ? 1 : r.n_atoms;
      if (r.standard && r.n_atoms > MAX_TOKEN_ATOMS) {
        char buf[96];
        return mf_error_set(MF_ERR_FORMAT, "%s: chain %s, %s: %s has %lld heavy atoms (> %d)",
                            z->id, chain_name(z, c), res_desc(z, &r, buf, sizeof buf), r.name,
                            (long long)r.n_atoms, MAX_TOKEN_ATOMS);
      }
      r.atom0 = Na;
      r.tok0 = N;
      r.chain = cw;
      Na += r.n_atoms;
      N += r.n_tok;
      z->res[w++] = r;
    }
    if (w == first) continue; /* chain without atoms */
    ch.res0 = first;
    ch.n_res = w - first;
    z->ch[cw++] = ch;
  }
  z->n_res = w;
  z->n_ch = cw;
  z->Na = Na;
  z->N = N;
  if (N == 0) return mf_error_set(MF_ERR_FORMAT, "%s: no atoms to featurise", z->id);
  if (N > INT32_MAX / 2 || Na > INT32_MAX / 2)
    return mf_error_set(MF_ERR_FORMAT, "%s: too large (%lld tokens, %lld atoms)", z->id,
                        (long long)N, (long long)Na);
  /* entities and symmetry copies */
  z->n_entities = 0;
  for (int32_t c = 0; c < z->n_ch; c++) {
    fz_chain *ch = &z->ch[c];
    ch->entity = -1;
    for (int32_t d = 0; d < c && ch->entity_key; d++)
      if (z->ch[d].entity_key && !strcmp(z->ch[d].entity_key, ch->entity_key)) {
        ch->entity = z->ch[d].entity;
        break;
      }
    if (ch->entity < 0) ch->entity = z->n_entities++;
    ch->sym = 0;
    for (int32_t d = 0; d < c; d++) ch->sym += z->ch[d].entity == ch->entity;
  }
  return MF_OK;
}

/* --------------------------------------------------------------- (3) feature helpers */
static void *feat(mf_feature_set *fs, const char *name, mf_dtype dt, int ndim, int64_t d0,
                  int64_t d1, mf_status *st) {
  if (*st != MF_OK) return NULL;
  int64_t shape[2] = {d0, d1};
  void *p = mf_features_add(fs, name, dt, ndim, shape, NULL);
  if (!p) *st = MF_ERR_NOMEM;
  return p;
}

/* Global atom index of atom `name` of residue r (laid out), -1 if not among its atoms. */
static int64_t find_atom(const fz_ctx *z, const fz_res *r, const char *name) {
  for (int64_t a = r->atom0; a < r->atom0 + r->n_atoms; a++)
    if (!strcmp(z->ccd->atoms[r->comp->atom0 + z->atom_local[a]].name, name)) return a;
  return -1;
}

static void centre_rep(const fz_ctx *z, const fz_res *r, int32_t *centre, int32_t *rep) {
  const char *c = NULL, *p = NULL;
  switch (r->restype) {
  case MF_RESTYPE_A: case MF_RESTYPE_G: case MF_RESTYPE_DA: case MF_RESTYPE_DG:
    c = "C1'"; p = "C4"; break;
  case MF_RESTYPE_C: case MF_RESTYPE_U: case MF_RESTYPE_DC: case MF_RESTYPE_DT:
    c = "C1'"; p = "C2"; break;
  case MF_RESTYPE_N: case MF_RESTYPE_DN:
    c = "C1'"; p = "C1'"; break;
  default:
    c = "CA"; p = "CB"; break;
  }
  int64_t ca = find_atom(z, r, c), pa = find_atom(z, r, p);
  if (pa < 0 && !strcmp(p, "CB")) pa = ca; /* GLY, UNK */
  *centre = (int32_t)ca;
  *rep = (int32_t)pa;
}

static int is_identity_op(const char *s) { return s[0] == '\0' || !strcmp(s, "1_555"); }

/* A link between consecutive residues of one polymer chain through their backbone atoms. */
static int backbone_link(const fz_ctx *z, int64_t a, int64_t b) {
  int32_t ra = z->atom_res[a], rb = z->atom_res[b];
  if (ra > rb) {
    int32_t t = ra; ra = rb; rb = t;
    int64_t u = a; a = b; b = u;
  }
  if (rb != ra + 1 || z->res[ra].chain != z->res[rb].chain || !z->ch[z->res[ra].chain].polymer)
    return 0;
  const char *na = z->ccd->atoms[z->res[ra].comp->atom0 + z->atom_local[a]].name;
  const char *nb = z->ccd->atoms[z->res[rb].comp->atom0 + z->atom_local[b]].name;
  return (!strcmp(na, "C") && !strcmp(nb, "N")) || (!strcmp(na, "O3'") && !strcmp(nb, "P"));
}

/* --------------------------------------------------------- (3) tokens, atoms, labels */
static mf_status fill_structure(fz_ctx *z, mf_feature_set *fs) {
  const mf_structure *st = z->st;
  const int64_t N = z->N, Na = z->Na;
  mf_status s = MF_OK;
  int32_t *restype = feat(fs, "restype", MF_I32, 1, N, 0, &s);
  int32_t *resix = feat(fs, "residue_index", MF_I32, 1, N, 0, &s);
  int32_t *tokix = feat(fs, "token_index", MF_I32, 1, N, 0, &s);
  int32_t *asym = feat(fs, "asym_id", MF_I32, 1, N, 0, &s);
  int32_t *ent = feat(fs, "entity_id", MF_I32, 1, N, 0, &s);
  int32_t *sym = feat(fs, "sym_id", MF_I32, 1, N, 0, &s);
  uint8_t *isp = feat(fs, "is_protein", MF_U8, 1, N, 0, &s);
  uint8_t *isr = feat(fs, "is_rna", MF_U8, 1, N, 0, &s);
  uint8_t *isd = feat(fs, "is_dna", MF_U8, 1, N, 0, &s);
  uint8_t *isl = feat(fs, "is_ligand", MF_U8, 1, N, 0, &s);
  uint8_t *bonds = feat(fs, "token_bonds", MF_U8, 2, N, N, &s);
  int32_t *centre = feat(fs, "token_centre_atom", MF_I32, 1, N, 0, &s);
  int32_t *rep = feat(fs, "token_rep_atom", MF_I32, 1, N, 0, &s);
  uint8_t *resolved = feat(fs, "token_resolved", MF_U8, 1, N, 0, &s);
  float *ref_pos = feat(fs, "ref_pos", MF_F32, 2, Na, 3, &s);
  uint8_t *ref_mask = feat(fs, "ref_mask", MF_U8, 1, Na, 0, &s);
  int32_t *ref_el = feat(fs, "ref_element", MF_I32, 1, Na, 0, &s);
  float *ref_charge = feat(fs, "ref_charge", MF_F32, 1, Na, 0, &s);
  uint8_t *ref_name = feat(fs, "ref_atom_name_chars", MF_U8, 2, Na, 4, &s);
  int32_t *uid = feat(fs, "ref_space_uid", MF_I32, 1, Na, 0, &s);
  int32_t *a2t = feat(fs, "atom_to_token", MF_I32, 1, Na, 0, &s);
  int32_t *a2ti = feat(fs, "atom_to_tokatom_idx", MF_I32, 1, Na, 0, &s);
  float *coord = feat(fs, "coordinate", MF_F32, 2, Na, 3, &s);
  uint8_t *cmask = feat(fs, "coordinate_mask", MF_U8, 1, Na, 0, &s);
  if (s != MF_OK) return s;

  z->atom_local = mf_malloc((size_t)Na * sizeof(int32_t), "featurize: atom local index");
  z->atom_res = mf_malloc((size_t)Na * sizeof(int32_t), "featurize: atom residue");
  z->tok_res = mf_malloc((size_t)N * sizeof(int32_t), "featurize: token residue");
  if (!z->atom_local || !z->atom_res || !z->tok_res) return MF_ERR_NOMEM;
  for (int64_t a = 0; a < st->n_atoms; a++) z->file2atom[a] = -1;

  for (int64_t k = 0; k < z->n_res; k++) {
    fz_res *r = &z->res[k];
    const fz_chain *ch = &z->ch[r->chain];
    residue_keep(z, r); /* the same list layout() counted */
    for (int64_t j = 0; j < r->comp->n_atoms; j++) z->local_map[j] = -1;
    int64_t a = r->atom0;
    for (int64_t j = 0; j < r->comp->n_atoms; j++) {
      if (!z->keep[j]) continue;
      const mf_ccd_atom *ca = res_atom(z, r, j);
      int64_t slot = a - r->atom0;
      z->local_map[j] = a;
      z->atom_local[a] = (int32_t)j;
      z->atom_res[a] = (int32_t)k;
      memcpy(ref_pos + 3 * a, ca->pos, 3 * sizeof(float));
      ref_mask[a] = !(ca->flags & MF_CCD_ATOM_NO_COORDS);
      ref_el[a] = ca->atomic_number;
      ref_charge[a] = (float)ca->charge;
      for (int q = 0; q < 4; q++) {
        unsigned char ch8 = (unsigned char)(q < (int)strlen(ca->name) ? ca->name[q] : ' ');
        ref_name[4 * a + q] = (uint8_t)(ch8 >= 32 && ch8 < 96 ? ch8 - 32 : 0);
      }
      uid[a] = (int32_t)k;
      a2t[a] = (int32_t)(r->standard ? r->tok0 : r->tok0 + slot);
      a2ti[a] = (int32_t)(r->standard ? slot : 0);
      a++;
    }
    /* ground truth by atom name */
    if (r->file_res >= 0) {
      for (int64_t fa = st->res_atom_start[r->file_res]; fa < st->res_atom_start[r->file_res + 1];
           fa++) {
        int64_t j = mf_ccd_atom_index(z->ccd, r->comp, st->atom_name[fa]);
        int64_t g = j >= 0 ? z->local_map[j] : -1;
        if (g < 0 || cmask[g]) {
          MF_DEBUG("%s: chain %s: %s %d: file atom %s has no place in the atom list", z->id,
                   chain_name(z, r->chain), r->name, (int)r->res_index, st->atom_name[fa]);
          z->dropped_atoms++;
          continue;
        }
        for (int q = 0; q < 3; q++) coord[3 * g + q] = (float)st->xyz[3 * fa + q];
        cmask[g] = 1;
        z->file2atom[fa] = g;
      }
    }
    /* tokens */
    for (int64_t t = r->tok0; t < r->tok0 + r->n_tok; t++) {
      z->tok_res[t] = (int32_t)k;
      restype[t] = r->restype;
      resix[t] = r->res_index;
      tokix[t] = (int32_t)t;
      asym[t] = r->chain;
      ent[t] = ch->entity;
      sym[t] = ch->sym;
      isp[t] = r->moltype == MF_MOL_PROTEIN;
      isr[t] = r->moltype == MF_MOL_RNA;
      isd[t] = r->moltype == MF_MOL_DNA;
      isl[t] = r->moltype == MF_MOL_LIGAND;
      if (r->standard) {
        centre_rep(z, r, &centre[t], &rep[t]);
      } else {
        centre[t] = rep[t] = (int32_t)(r->atom0 + (t - r->tok0));
      }
      resolved[t] = centre[t] >= 0 && cmask[centre[t]];
    }
    /* CCD bonds inside an atomised residue */
    if (!r->standard) {
      for (int64_t b = r->comp->bond0; b < r->comp->bond0 + r->comp->n_bonds; b++) {
        int64_t ga = z->local_map[z->ccd->bonds[b].a], gb = z->local_map[z->ccd->bonds[b].b];
        if (ga < 0 || gb < 0 || ga == gb) continue;
        int64_t ta = a2t[ga], tb = a2t[gb];
        bonds[ta * N + tb] = bonds[tb * N + ta] = 1;
      }
    }
  }
  if (z->dropped_atoms)
    MF_DEBUG("%s: %lld file atoms without a place in the CCD atom lists dropped", z->id,
             (long long)z->dropped_atoms);

  /* (4) _struct_conn covalent links */
  for (int32_t i = 0; i < st->n_conns; i++) {
    const mf_conn *cn = &st->conns[i];
    if (!cn->covalent || cn->p[0].atom < 0 || cn->p[1].atom < 0) continue;
    if (cn->p[0].atom >= st->n_atoms || cn->p[1].atom >= st->n_atoms) continue;
    if (!is_identity_op(cn->p[0].symmetry) || !is_identity_op(cn->p[1].symmetry)) continue;
    int64_t ga = z->file2atom[cn->p[0].atom], gb = z->file2atom[cn->p[1].atom];
    if (ga < 0 || gb < 0) continue;
    int64_t ta = a2t[ga], tb = a2t[gb];
    if (ta == tb) continue;
    if (z->res[z->tok_res[ta]].standard && z->res[z->tok_res[tb]].standard) continue;
    if (backbone_link(z, ga, gb)) continue;
    bonds[ta * N + tb] = bonds[tb * N + ta] = 1;
  }
  return MF_OK;
}

/* ---------------------------------------------------------------------- (5) the MSA */
typedef struct {
  int have;         /* an a3m was read */
  mf_a3m a3m;
  float *profile;       /* (N_a3m, 32) mf_msa_profile over all rows */
  float *deletion_mean; /* (N_a3m) */
  int64_t S_keep;   /* rows kept (capped), 1 when query-only */
  int64_t row0;     /* first row of rows 1..S_keep-1 in the combined MSA */
  char *path;       /* the a3m file (owned) */
  int32_t chain0;   /* first chain of the entity */
} fz_msa;

/* Reads the MSA of entity e (first chain m->chain0) when there is one. */
static mf_status load_entity_msa(fz_ctx *z, fz_msa *m) {
  const fz_chain *c0 = &z->ch[m->chain0];
  if (!z->opts->msa_dir || c0->moltype != MF_MOL_PROTEIN || !c0->entity_key) return MF_OK;
  size_t len = strlen(z->opts->msa_dir) + strlen(z->id) + strlen(c0->entity_key) + 16;
  char *path = mf_malloc(len, "featurize: msa path");
  if (!path) return MF_ERR_NOMEM;
  snprintf(path, len, "%s/%s_%s.a3m.gz", z->opts->msa_dir, z->id, c0->entity_key);
  if (access(path, R_OK) != 0) snprintf(path, len, "%s/%s_%s.a3m", z->opts->msa_dir, z->id,
                                   c0->entity_key);
  if (access(path, R_OK) != 0) {
    MF_DEBUG("%s: entity %s: no MSA file, query only", z->id, c0->entity_key);
    mf_free(path);
    return MF_OK;
  }
  mf_status s = mf_a3m_read(path, MF_MOL_PROTEIN, &m->a3m);
  if (s != MF_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", mf_error_message());
    mf_error_set(s, "%s: entity %s: %s", z->id, c0->entity_key, msg);
    mf_free(path);
    return s;
  }
  m->have = 1;
  m->path = path;
  const size_t n = (size_t)m->a3m.N;
  m->profile = mf_malloc(n * MF_RESTYPE_COUNT * sizeof(float), "featurize: msa profile");
  m->deletion_mean = mf_malloc(n * sizeof(float), "featurize: msa deletion_mean");
  if (!m->profile || !m->deletion_mean) return MF_ERR_NOMEM; /* freed with the entity */
  return mf_msa_profile(&m->a3m, m->profile, m->deletion_mean);
}

static int class_match(int q, int r) {
  return q == r || q == MF_RESTYPE_UNK || r == MF_RESTYPE_UNK;
}

/* Places the residues of chain c on the query columns of A: col[k] = first column of residue
 * k. One column per residue with matching classes (an X on either side matches) is the rule;
 * a modified residue may also cover 2 or 3 columns (a chromophore such as CRO, whose
 * canonical sequence has three letters), found by a left-to-right alignment that prefers
 * one column. No placement: MF_ERR_FORMAT naming entry, chain, entity, file, lengths. */
static mf_status align_chain(const fz_ctx *z, int32_t c, const fz_msa *m, int64_t *col) {
  const fz_chain *ch = &z->ch[c];
  const mf_a3m *A = &m->a3m;
  const int64_t L = ch->n_res, Q = A->N;
  const fz_res *R = z->res + ch->res0;
  int64_t bad = -1;
  if (Q == L) {
    for (int64_t k = 0; k < L && bad < 0; k++) {
      col[k] = k;
      if (!class_match(A->msa[k], R[k].restype) && R[k].standard) bad = k;
    }
    if (bad < 0) return MF_OK;
  }
  if ((L + 1) * (Q + 1) <= ((int64_t)1 << 26)) {
    uint8_t *span = mf_calloc((size_t)((L + 1) * (Q + 1)), "featurize: MSA alignment");
    if (!span) return MF_ERR_NOMEM;
    span[0] = 4; /* reached, start */
    for (int64_t i = 0; i < L; i++) {
      int maxs = R[i].standard ? 1 : R[i].moltype == MF_MOL_PROTEIN ? 3 : 1;
      for (int64_t j = 0; j < Q; j++) {
        if (!span[i * (Q + 1) + j]) continue;
        for (int sp = 1; sp <= maxs && j + sp <= Q; sp++) {
          if (R[i].standard && !class_match(A->msa[j], R[i].restype)) break;
          uint8_t *cell = &span[(i + 1) * (Q + 1) + j + sp];
          if (!*cell) *cell = (uint8_t)sp;
        }
      }
    }
    int ok = span[L * (Q + 1) + Q] != 0;
    if (ok) {
      int64_t j = Q;
      for (int64_t i = L; i > 0; i--) {
        j -= span[i * (Q + 1) + j];
        col[i - 1] = j;
      }
    }
    mf_free(span);
    if (ok) return MF_OK;
  }
  const char *key = z->ch[m->chain0].entity_key;
  if (Q != L)
    return mf_error_set(MF_ERR_FORMAT, "%s: chain %s (entity %s): MSA %s has a query of %lld "
                        "residues, the chain's sequence has %lld, and they do not align", z->id,
                        chain_name(z, c), key, m->path, (long long)Q, (long long)L);
  return mf_error_set(MF_ERR_FORMAT, "%s: chain %s (entity %s): MSA %s query position %lld is "
                      "%c, the chain has %s (%c); lengths %lld and %lld", z->id, chain_name(z, c),
                      key, m->path, (long long)bad + 1, mf_restype_letter(A->msa[bad]),
                      R[bad].name, mf_restype_letter(R[bad].restype), (long long)Q, (long long)L);
}

static mf_status fill_msa(fz_ctx *z, mf_feature_set *fs) {
  const int64_t N = z->N;
  const int32_t E = z->n_entities;
  mf_status s = MF_OK;
  fz_msa *m = mf_calloc((size_t)E * sizeof *m, "featurize: entity MSAs");
  if (!m) return MF_ERR_NOMEM;
  for (int32_t e = 0; e < E; e++) m[e].chain0 = -1;
  for (int32_t c = 0; c < z->n_ch; c++)
    if (m[z->ch[c].entity].chain0 < 0) m[z->ch[c].entity].chain0 = c;

  int64_t S = 1;
  for (int32_t e = 0; e < E && s == MF_OK; e++) {
    s = load_entity_msa(z, &m[e]);
    if (s != MF_OK) break;
    int64_t Se = m[e].have ? m[e].a3m.S : 1;
    if (z->opts->max_msa_rows > 0 && Se > z->opts->max_msa_rows) Se = z->opts->max_msa_rows;
    m[e].S_keep = Se;
    m[e].row0 = S;
    S += Se - 1;
  }
  uint8_t *msa = NULL, *del = NULL;
  int32_t *row_ent = NULL;
  float *prof = NULL, *dmean = NULL;
  if (s == MF_OK) {
    msa = feat(fs, "msa", MF_U8, 2, S, N, &s);
    del = feat(fs, "msa_deletion", MF_U8, 2, S, N, &s);
    row_ent = feat(fs, "msa_row_entity", MF_I32, 1, S, 0, &s);
    prof = feat(fs, "profile", MF_F32, 2, N, MF_RESTYPE_COUNT, &s);
    dmean = feat(fs, "deletion_mean", MF_F32, 1, N, 0, &s);
  }
  if (s == MF_OK) {
    const mf_feature *rt = mf_features_get(fs, "restype");
    const int32_t *restype = rt->data;
    memset(msa, MF_RESTYPE_GAP, (size_t)(S * N));
    for (int64_t t = 0; t < N; t++) msa[t] = (uint8_t)restype[t];
    row_ent[0] = -1;
    for (int32_t e = 0; e < E; e++)
      for (int64_t r = 1; r < m[e].S_keep; r++) row_ent[m[e].row0 + r - 1] = e;
    int64_t maxres = 0;
    for (int32_t c = 0; c < z->n_ch; c++)
      if (z->ch[c].n_res > maxres) maxres = z->ch[c].n_res;
    int64_t *col = mf_malloc((size_t)(maxres + 1) * sizeof *col, "featurize: MSA columns");
    if (!col) s = MF_ERR_NOMEM;
    for (int32_t c = 0; c < z->n_ch && s == MF_OK; c++) {
      const fz_chain *ch = &z->ch[c];
      const fz_msa *me = &m[ch->entity];
      if (me->have) s = align_chain(z, c, me, col);
      for (int64_t k = 0; k < ch->n_res && s == MF_OK; k++) {
        const fz_res *r = &z->res[ch->res0 + k];
        for (int64_t t = r->tok0; t < r->tok0 + r->n_tok; t++) {
          float *p = prof + t * MF_RESTYPE_COUNT;
          if (!me->have) {
            p[restype[t]] = 1.0f;
            continue;
          }
          const mf_a3m *A = &me->a3m;
          if (!r->standard) {
            p[restype[t]] += 1.0f / (float)A->S;
            p[MF_RESTYPE_GAP] += (float)(A->S - 1) / (float)A->S;
            continue;
          }
          const int64_t q = col[k];
          memcpy(p, me->profile + q * MF_RESTYPE_COUNT, MF_RESTYPE_COUNT * sizeof(float));
          dmean[t] = me->deletion_mean[q];
          int32_t d0 = A->deletions[q];
          del[t] = (uint8_t)(d0 > 255 ? 255 : d0 < 0 ? 0 : d0);
          for (int64_t row = 1; row < me->S_keep; row++) {
            int64_t o = (me->row0 + row - 1) * N + t;
            int32_t d = A->deletions[row * A->N + q];
            msa[o] = A->msa[row * A->N + q];
            del[o] = (uint8_t)(d > 255 ? 255 : d < 0 ? 0 : d);
          }
        }
      }
    }
    mf_free(col);
  }
  for (int32_t e = 0; e < E; e++) {
    if (m[e].have) mf_a3m_free(&m[e].a3m);
    mf_free(m[e].profile);
    mf_free(m[e].deletion_mean);
    mf_free(m[e].path);
  }
  mf_free(m);
  return s;
}

/* ------------------------------------------------------------------------ entry points */
static void ctx_free(fz_ctx *z) {
  mf_free(z->ch);
  mf_free(z->res);
  mf_free(z->keep);
  mf_free(z->local_map);
  mf_free(z->file2atom);
  mf_free(z->atom_local);
  mf_free(z->atom_res);
  mf_free(z->tok_res);
}

mf_status mf_featurize_structure(const mf_structure *st, const char *id,
                                 const mf_featurize_opts *opts, mf_feature_set *out) {
  mf_features_init(out, id ? id : "");
  if (!st || !opts || !opts->ccd || !id)
    return mf_error_set(MF_ERR_CONFIG, "mf_featurize_structure: structure, id, options and "
                        "CCD are required");
  fz_ctx z;
  memset(&z, 0, sizeof z);
  z.st = st;
  z.id = id;
  z.opts = opts;
  z.ccd = opts->ccd;
  mf_status s = MF_OK;

  for (int64_t i = 0; i < z.ccd->n_components; i++)
    if (z.ccd->components[i].n_atoms > z.max_comp_atoms)
      z.max_comp_atoms = z.ccd->components[i].n_atoms;
  int64_t cap = 0;
  for (int32_t c = 0; c < st->n_chains; c++) {
    cap += st->chain_res_start[c + 1] - st->chain_res_start[c];
    int32_t e = st->chain_entity[c];
    if (e >= 0 && e < st->n_entities) cap += st->entities[e].poly_seq_count;
  }
  z.ch = mf_malloc((size_t)(st->n_chains + 1) * sizeof *z.ch, "featurize: chains");
  z.res = mf_malloc((size_t)(cap + 1) * sizeof *z.res, "featurize: residues");
  z.keep = mf_malloc((size_t)(z.max_comp_atoms + 1), "featurize: atom flags");
  z.local_map = mf_malloc((size_t)(z.max_comp_atoms + 1) * sizeof(int64_t), "featurize: atom map");
  z.file2atom = mf_malloc((size_t)(st->n_atoms + 1) * sizeof(int64_t), "featurize: file atoms");
  if (!z.ch || !z.res || !z.keep || !z.local_map || !z.file2atom) s = MF_ERR_NOMEM;

  for (int32_t c = 0; c < st->n_chains && s == MF_OK; c++) {
    int32_t e = st->chain_entity[c];
    if (e >= 0 && st->entities[e].type == MF_ENTITY_WATER) continue;
    if (st->chain_res_start[c + 1] == st->chain_res_start[c]) continue;
    s = add_chain(&z, c);
  }
  if (s == MF_OK) s = layout(&z);
  if (s == MF_OK) s = fill_structure(&z, out);
  if (s == MF_OK) s = fill_msa(&z, out);
  ctx_free(&z);
  if (s != MF_OK) mf_features_free(out);
  return s;
}

static int has_suffix(const char *s, const char *suf) {
  size_t n = strlen(s), k = strlen(suf);
  return n >= k && strcmp(s + n - k, suf) == 0;
}

mf_status mf_featurize_entry_id(const char *path, char *id, size_t n) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t k = strlen(base);
  if (has_suffix(base, ".cif.gz")) k -= 7;
  else if (has_suffix(base, ".cif")) k -= 4;
  if (k == 0 || k >= n || k >= MF_FEAT_ID_MAX)
    return mf_error_set(MF_ERR_CONFIG, "%s: cannot take an entry id (1..%d characters) from the "
                        "file name", path, MF_FEAT_ID_MAX - 1);
  memcpy(id, base, k);
  id[k] = '\0';
  return MF_OK;
}

mf_status mf_featurize_file(const char *path, const mf_featurize_opts *opts,
                            mf_feature_set *out) {
  memset(out, 0, sizeof *out);
  char id[MF_FEAT_ID_MAX];
  mf_status s = mf_featurize_entry_id(path, id, sizeof id);
  if (s != MF_OK) return s;
  mf_structure *st = NULL;
  s = mf_structure_read(path, &st);
  if (s != MF_OK) return s;
  s = mf_featurize_structure(st, id, opts, out);
  mf_structure_free(st);
  return s;
}
