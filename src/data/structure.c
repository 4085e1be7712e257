/* structure.c — builds an mf_structure from a parsed mmCIF block (see structure.h for
 * the reading rules). Two phases: first decide which _atom_site rows stay and count
 * everything (temporary buffers), then size one arena exactly, lay the arrays out in it
 * and fill them. Not here: CIF tokenising (cif.c), tokens and features for the model.
 *
 * Errors are MF_ERR_FORMAT with the file, line and tag: missing required _atom_site
 * columns, non-numeric coordinates, identifiers longer than MF_STRUCT_ID - 1. */
#include "data/structure.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"

/* ------------------------------------------------------------------ columns */

typedef struct {
  mf_cif_col group, type, atom, alt, comp, asym, entity, seq, ins, x, y, z, occ, b, auth_seq,
      auth_asym, model;
} atom_cols;

typedef struct {
  const mf_cif_doc *doc;
  int32_t block;
} src;

static mf_cif_col col_of(const src *S, const char *tag) {
  mf_cif_col c;
  mf_cif_find(S->doc, S->block, tag, &c);
  return c;
}

static mf_cif_str val(const mf_cif_col *c, int64_t row) {
  if (mf_cif_is_null(c, row)) {
    mf_cif_str s = {"", 0};
    return s;
  }
  return mf_cif_value(c, row);
}

/* Copies an identifier; error when it does not fit. Null values give "". */
static mf_status copy_id(const mf_cif_col *c, int64_t row, char *dst, size_t cap) {
  mf_cif_str s = val(c, row);
  if (mf_cif_str_copy(s, dst, cap)) return MF_OK;
  mf_cif_str t = mf_cif_item_tag(c->doc, c->item);
  return mf_error_set(MF_ERR_FORMAT, "%s:%lld: %.*s: value '%.*s' longer than %zu characters",
                      mf_cif_name(c->doc), (long long)mf_cif_line(c, row), (int)t.len, t.p,
                      (int)(s.len > 40 ? 40 : s.len), s.p, cap - 1);
}

static mf_status get_int32(const mf_cif_col *c, int64_t row, int32_t *out) {
  int64_t v;
  mf_status st = mf_cif_get_int(c, row, MF_STRUCT_NO_SEQ, &v);
  if (st != MF_OK) return st;
  if (v < INT32_MIN || v > INT32_MAX) {
    mf_cif_str t = mf_cif_item_tag(c->doc, c->item);
    return mf_error_set(MF_ERR_FORMAT, "%s:%lld: %.*s: %lld out of range",
                        mf_cif_name(c->doc), (long long)mf_cif_line(c, row), (int)t.len, t.p,
                        (long long)v);
  }
  *out = (int32_t)v;
  return MF_OK;
}

static int str_cmp(mf_cif_str a, mf_cif_str b) {
  int64_t n = a.len < b.len ? a.len : b.len;
  int r = n ? memcmp(a.p, b.p, (size_t)n) : 0;
  if (r) return r;
  return a.len < b.len ? -1 : a.len > b.len;
}

/* ------------------------------------------------------------------ altloc selection */

/* Residue position of a row: (label_asym_id, label_seq_id, auth_seq_id, ins code). */
static int res_key_cmp(const atom_cols *A, int64_t r1, int64_t r2) {
  int c = str_cmp(val(&A->asym, r1), val(&A->asym, r2));
  if (!c) c = str_cmp(val(&A->seq, r1), val(&A->seq, r2));
  if (!c) c = str_cmp(val(&A->auth_seq, r1), val(&A->auth_seq, r2));
  if (!c) c = str_cmp(val(&A->ins, r1), val(&A->ins, r2));
  return c;
}

static int alt_cmp(const atom_cols *A, int64_t r1, int64_t r2) {
  int c = res_key_cmp(A, r1, r2);
  if (!c) c = str_cmp(val(&A->atom, r1), val(&A->atom, r2));
  if (!c) c = r1 < r2 ? -1 : r1 > r2;
  return c;
}

/* Merge sort of row indices by alt_cmp (qsort has no context argument in C11). */
static void sort_rows(const atom_cols *A, int64_t *a, int64_t *tmp, int64_t n) {
  if (n < 2) return;
  if (n <= 16) {
    for (int64_t i = 1; i < n; i++) {
      int64_t x = a[i], j = i;
      while (j > 0 && alt_cmp(A, a[j - 1], x) > 0) {
        a[j] = a[j - 1];
        j--;
      }
      a[j] = x;
    }
    return;
  }
  int64_t h = n / 2;
  sort_rows(A, a, tmp, h);
  sort_rows(A, a + h, tmp, n - h);
  int64_t i = 0, j = h, k = 0;
  while (i < h && j < n) tmp[k++] = alt_cmp(A, a[j], a[i]) < 0 ? a[j++] : a[i++];
  while (i < h) tmp[k++] = a[i++];
  while (j < n) tmp[k++] = a[j++];
  memcpy(a, tmp, (size_t)n * sizeof *a);
}

static mf_status occupancy(const atom_cols *A, int64_t row, double *o) {
  return mf_cif_get_double(&A->occ, row, 1.0, o);
}

/* Applies the two altloc rules to the rows in alt[0, n) (all currently kept). */
static mf_status select_altlocs(const atom_cols *A, int64_t *alt, int64_t n, uint8_t *keep) {
  if (n == 0) return MF_OK;
  int64_t *tmp = mf_malloc((size_t)n * sizeof *tmp, "altloc sort");
  if (!tmp) return MF_ERR_NOMEM;
  sort_rows(A, alt, tmp, n);
  mf_free(tmp);
  mf_status st = MF_OK;
  for (int64_t g = 0; g < n;) {
    int64_t e = g + 1;
    while (e < n && res_key_cmp(A, alt[g], alt[e]) == 0) e++;
    /* 1. microheterogeneity: best row of the residue position decides the comp_id.
     *    Rows are sorted by atom name, so "first on ties" means lowest row index. */
    int mixed = 0;
    for (int64_t i = g + 1; i < e && !mixed; i++)
      mixed = !mf_cif_str_same(val(&A->comp, alt[i]), val(&A->comp, alt[g]));
    if (mixed) {
      int64_t best = -1;
      double bo = 0;
      for (int64_t i = g; i < e; i++) {
        double o;
        if ((st = occupancy(A, alt[i], &o)) != MF_OK) return st;
        if (best < 0 || o > bo || (o == bo && alt[i] < best)) {
          best = alt[i];
          bo = o;
        }
      }
      mf_cif_str bc = val(&A->comp, best);
      for (int64_t i = g; i < e; i++)
        if (!mf_cif_str_same(val(&A->comp, alt[i]), bc)) keep[alt[i]] = 0;
    }
    /* 2. per atom name: highest occupancy, first (lowest row) on ties */
    for (int64_t a = g; a < e;) {
      int64_t b = a + 1;
      while (b < e && mf_cif_str_same(val(&A->atom, alt[a]), val(&A->atom, alt[b]))) b++;
      int64_t best = -1;
      double bo = 0;
      for (int64_t i = a; i < b; i++) {
        if (!keep[alt[i]]) continue;
        double o;
        if ((st = occupancy(A, alt[i], &o)) != MF_OK) return st;
        if (best < 0 || o > bo) { /* rows ascend within a name group */
          best = alt[i];
          bo = o;
        }
      }
      for (int64_t i = a; i < b; i++)
        if (alt[i] != best) keep[alt[i]] = 0;
      a = b;
    }
    g = e;
  }
  return MF_OK;
}

/* ------------------------------------------------------------------ layout */

typedef struct {
  int64_t atoms, residues, chains, entities, polyseq, conns, assemblies, gens, opers, strbytes;
} counts;

#define SLICE(ptr, n)                                                              \
  do {                                                                             \
    size_t b_ = (size_t)(n) * sizeof *(ptr);                                       \
    if (b_ == 0) b_ = 1;                                                           \
    total += mf_align_up(b_);                                                      \
    if (a) {                                                                       \
      (ptr) = mf_arena_alloc(a, b_, #ptr);                                         \
      if (!(ptr)) return 0;                                                        \
    }                                                                              \
  } while (0)

/* a == NULL: returns the arena bytes needed; else carves the arrays, 0 on failure. */
static size_t layout(mf_structure *s, const counts *c, mf_arena *a, char **pool) {
  size_t total = 0;
  SLICE(s->atom_name, c->atoms);
  SLICE(s->element, c->atoms);
  SLICE(s->altloc, c->atoms);
  SLICE(s->xyz, c->atoms * 3);
  SLICE(s->occupancy, c->atoms);
  SLICE(s->b_factor, c->atoms);
  SLICE(s->atom_row, c->atoms);
  SLICE(s->res_name, c->residues);
  SLICE(s->seq_id, c->residues);
  SLICE(s->auth_seq_id, c->residues);
  SLICE(s->ins_code, c->residues);
  SLICE(s->hetatm, c->residues);
  SLICE(s->res_atom_start, c->residues + 1);
  SLICE(s->chain_id, c->chains);
  SLICE(s->auth_chain_id, c->chains);
  SLICE(s->chain_entity_id, c->chains);
  SLICE(s->chain_entity, c->chains);
  SLICE(s->chain_res_start, c->chains + 1);
  SLICE(s->entities, c->entities);
  SLICE(s->poly_num, c->polyseq);
  SLICE(s->poly_mon, c->polyseq);
  SLICE(s->poly_hetero, c->polyseq);
  SLICE(s->conns, c->conns);
  SLICE(s->assemblies, c->assemblies);
  SLICE(s->assembly_gens, c->gens);
  SLICE(s->opers, c->opers);
  SLICE(*pool, c->strbytes);
  return total;
}

/* String pool inside the arena. */
typedef struct {
  char *p;
  size_t used, cap;
} pool_t;

static const char *pool_add(pool_t *P, mf_cif_str s, int strip_ws) {
  char *out = P->p + P->used;
  size_t k = 0;
  for (int64_t i = 0; i < s.len; i++) {
    char ch = s.p[i];
    if (strip_ws && (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t')) continue;
    out[k++] = ch;
  }
  out[k] = '\0';
  P->used += k + 1;
  MF_ASSERT(P->used <= P->cap, "structure string pool overflow");
  return out;
}

static int64_t null_len(const mf_cif_col *c, int64_t row) { return val(c, row).len + 1; }

/* ------------------------------------------------------------------ small tables */

static mf_entity_type entity_type(mf_cif_str s) {
  if (mf_cif_str_ieq(s, "polymer")) return MF_ENTITY_POLYMER;
  if (mf_cif_str_ieq(s, "non-polymer")) return MF_ENTITY_NON_POLYMER;
  if (mf_cif_str_ieq(s, "branched")) return MF_ENTITY_BRANCHED;
  if (mf_cif_str_ieq(s, "water")) return MF_ENTITY_WATER;
  if (mf_cif_str_ieq(s, "macrolide")) return MF_ENTITY_MACROLIDE;
  return MF_ENTITY_UNKNOWN;
}

static mf_poly_type poly_type(mf_cif_str s) {
  if (mf_cif_str_ieq(s, "polypeptide(L)")) return MF_POLY_PEPTIDE_L;
  if (mf_cif_str_ieq(s, "polypeptide(D)")) return MF_POLY_PEPTIDE_D;
  if (mf_cif_str_ieq(s, "polydeoxyribonucleotide")) return MF_POLY_DNA;
  if (mf_cif_str_ieq(s, "polyribonucleotide")) return MF_POLY_RNA;
  if (mf_cif_str_ieq(s, "polydeoxyribonucleotide/polyribonucleotide hybrid"))
    return MF_POLY_DNA_RNA;
  return MF_POLY_OTHER;
}

static mf_conn_type conn_type(mf_cif_str s) {
  if (s.len >= 6 && mf_cif_str_ieq((mf_cif_str){s.p, 6}, "covale")) return MF_CONN_COVALE;
  if (mf_cif_str_ieq(s, "disulf")) return MF_CONN_DISULF;
  if (mf_cif_str_ieq(s, "metalc")) return MF_CONN_METALC;
  if (mf_cif_str_ieq(s, "hydrog")) return MF_CONN_HYDROG;
  if (mf_cif_str_ieq(s, "mismat")) return MF_CONN_MISMAT;
  if (mf_cif_str_ieq(s, "saltbr")) return MF_CONN_SALTBR;
  if (mf_cif_str_ieq(s, "modres")) return MF_CONN_MODRES;
  return MF_CONN_OTHER;
}

static int32_t find_entity(const mf_structure *s, const char *id) {
  for (int32_t e = 0; e < s->n_entities; e++)
    if (strcmp(s->entities[e].id, id) == 0) return e;
  return -1;
}

/* Atom index of a link partner among the kept atoms, -1 if absent. */
static int64_t find_atom(const mf_structure *s, const mf_conn_partner *p) {
  for (int32_t c = 0; c < s->n_chains; c++) {
    if (strcmp(s->chain_id[c], p->asym_id) != 0) continue;
    for (int64_t r = s->chain_res_start[c]; r < s->chain_res_start[c + 1]; r++) {
      if (p->seq_id != MF_STRUCT_NO_SEQ) {
        if (s->seq_id[r] != p->seq_id) continue;
      } else if (s->auth_seq_id[r] != p->auth_seq_id || s->ins_code[r] != p->ins_code) {
        continue;
      }
      if (p->comp_id[0] && strcmp(s->res_name[r], p->comp_id) != 0) continue;
      for (int64_t i = s->res_atom_start[r]; i < s->res_atom_start[r + 1]; i++)
        if (strcmp(s->atom_name[i], p->atom_id) == 0) return i;
    }
  }
  return -1;
}

static mf_status read_partner(const src *S, int64_t row, int k, mf_conn_partner *p) {
  char tag[80];
  const char *pre = k == 0 ? "1" : "2";
  mf_cif_col c;
  mf_status st;
#define PCOL(fmt) (snprintf(tag, sizeof tag, fmt, pre), c = col_of(S, tag), &c)
  if ((st = copy_id(PCOL("_struct_conn.ptnr%s_label_asym_id"), row, p->asym_id, MF_STRUCT_ID)))
    return st;
  if ((st = copy_id(PCOL("_struct_conn.ptnr%s_label_comp_id"), row, p->comp_id, MF_STRUCT_ID)))
    return st;
  if ((st = copy_id(PCOL("_struct_conn.ptnr%s_label_atom_id"), row, p->atom_id, MF_STRUCT_ID)))
    return st;
  if ((st = copy_id(PCOL("_struct_conn.pdbx_ptnr%s_label_alt_id"), row, p->altloc,
                    MF_STRUCT_ID)))
    return st;
  if ((st = copy_id(PCOL("_struct_conn.ptnr%s_symmetry"), row, p->symmetry, MF_STRUCT_ID)))
    return st;
  if ((st = get_int32(PCOL("_struct_conn.ptnr%s_label_seq_id"), row, &p->seq_id))) return st;
  if ((st = get_int32(PCOL("_struct_conn.ptnr%s_auth_seq_id"), row, &p->auth_seq_id))) return st;
  mf_cif_str ins = val(PCOL("_struct_conn.pdbx_ptnr%s_PDB_ins_code"), row);
  p->ins_code = ins.len ? ins.p[0] : '\0';
#undef PCOL
  return MF_OK;
}

/* ------------------------------------------------------------------ build */

static mf_status need_col(const src *S, const char *tag, mf_cif_col *c, int64_t nrows) {
  if (!mf_cif_find(S->doc, S->block, tag, c))
    return mf_error_set(MF_ERR_FORMAT, "%s: %s missing: expected it in the _atom_site loop",
                        mf_cif_name(S->doc), tag);
  if (nrows >= 0 && c->n != nrows)
    return mf_error_set(MF_ERR_FORMAT, "%s: %s has %lld rows, other _atom_site columns %lld",
                        mf_cif_name(S->doc), tag, (long long)c->n, (long long)nrows);
  return MF_OK;
}

static mf_status opt_col(const src *S, const char *tag, mf_cif_col *c, int64_t nrows) {
  if (!mf_cif_find(S->doc, S->block, tag, c)) return MF_OK; /* n = 0: every row null */
  return need_col(S, tag, c, nrows);
}

static mf_status find_atom_cols(const src *S, atom_cols *A, int64_t *nrows) {
  mf_status st;
  if ((st = need_col(S, "_atom_site.Cartn_x", &A->x, -1))) return st;
  int64_t n = A->x.n;
  *nrows = n;
  if ((st = need_col(S, "_atom_site.Cartn_y", &A->y, n))) return st;
  if ((st = need_col(S, "_atom_site.Cartn_z", &A->z, n))) return st;
  if ((st = need_col(S, "_atom_site.type_symbol", &A->type, n))) return st;
  if ((st = need_col(S, "_atom_site.label_atom_id", &A->atom, n))) return st;
  if ((st = need_col(S, "_atom_site.label_comp_id", &A->comp, n))) return st;
  if ((st = need_col(S, "_atom_site.label_asym_id", &A->asym, n))) return st;
  if ((st = opt_col(S, "_atom_site.group_PDB", &A->group, n))) return st;
  if ((st = opt_col(S, "_atom_site.label_alt_id", &A->alt, n))) return st;
  if ((st = opt_col(S, "_atom_site.label_entity_id", &A->entity, n))) return st;
  if ((st = opt_col(S, "_atom_site.label_seq_id", &A->seq, n))) return st;
  if ((st = opt_col(S, "_atom_site.pdbx_PDB_ins_code", &A->ins, n))) return st;
  if ((st = opt_col(S, "_atom_site.occupancy", &A->occ, n))) return st;
  if ((st = opt_col(S, "_atom_site.B_iso_or_equiv", &A->b, n))) return st;
  if ((st = opt_col(S, "_atom_site.auth_seq_id", &A->auth_seq, n))) return st;
  if ((st = opt_col(S, "_atom_site.auth_asym_id", &A->auth_asym, n))) return st;
  if ((st = opt_col(S, "_atom_site.pdbx_PDB_model_num", &A->model, n))) return st;
  return MF_OK;
}

static int is_water(mf_cif_str c) {
  return mf_cif_str_eq(c, "HOH") || mf_cif_str_eq(c, "DOD") || mf_cif_str_eq(c, "WAT");
}

/* Phase 1: keep[row] for the rows that stay. */
static mf_status select_rows(const atom_cols *A, int64_t nrows, uint8_t *keep) {
  mf_cif_str model0 = val(&A->model, 0);
  int64_t nalt = 0;
  for (int64_t r = 0; r < nrows; r++) {
    mf_cif_str t = val(&A->type, r);
    int k = mf_cif_str_same(val(&A->model, r), model0) && !mf_cif_str_ieq(t, "H") &&
            !mf_cif_str_ieq(t, "D") && !is_water(val(&A->comp, r));
    keep[r] = (uint8_t)k;
    if (k && !mf_cif_is_null(&A->alt, r)) nalt++;
  }
  if (nalt == 0) return MF_OK;
  int64_t *alt = mf_malloc((size_t)nalt * sizeof *alt, "altloc rows");
  if (!alt) return MF_ERR_NOMEM;
  int64_t k = 0;
  for (int64_t r = 0; r < nrows; r++)
    if (keep[r] && !mf_cif_is_null(&A->alt, r)) alt[k++] = r;
  mf_status st = select_altlocs(A, alt, nalt, keep);
  mf_free(alt);
  return st;
}

static int same_chain(const atom_cols *A, int64_t r1, int64_t r2) {
  return mf_cif_str_same(val(&A->asym, r1), val(&A->asym, r2));
}

static int same_residue(const atom_cols *A, int64_t r1, int64_t r2) {
  return mf_cif_str_same(val(&A->seq, r1), val(&A->seq, r2)) &&
         mf_cif_str_same(val(&A->auth_seq, r1), val(&A->auth_seq, r2)) &&
         mf_cif_str_same(val(&A->ins, r1), val(&A->ins, r2)) &&
         mf_cif_str_same(val(&A->comp, r1), val(&A->comp, r2));
}

static mf_status fill_atoms(mf_structure *s, const atom_cols *A, int64_t nrows,
                            const uint8_t *keep) {
  mf_status st;
  int64_t a = 0, r = -1, prev = -1;
  int32_t c = -1;
  for (int64_t row = 0; row < nrows; row++) {
    if (!keep[row]) continue;
    int new_chain = prev < 0 || !same_chain(A, prev, row);
    if (new_chain) {
      c++;
      s->chain_res_start[c] = r + 1;
      if ((st = copy_id(&A->asym, row, s->chain_id[c], MF_STRUCT_ID))) return st;
      if ((st = copy_id(&A->auth_asym, row, s->auth_chain_id[c], MF_STRUCT_ID))) return st;
      if ((st = copy_id(&A->entity, row, s->chain_entity_id[c], MF_STRUCT_ID))) return st;
      s->chain_entity[c] = find_entity(s, s->chain_entity_id[c]);
    }
    if (new_chain || !same_residue(A, prev, row)) {
      r++;
      s->res_atom_start[r] = a;
      if ((st = copy_id(&A->comp, row, s->res_name[r], MF_STRUCT_ID))) return st;
      if ((st = get_int32(&A->seq, row, &s->seq_id[r]))) return st;
      if ((st = get_int32(&A->auth_seq, row, &s->auth_seq_id[r]))) return st;
      mf_cif_str ins = val(&A->ins, row);
      s->ins_code[r] = ins.len ? ins.p[0] : '\0';
      s->hetatm[r] = (uint8_t)mf_cif_str_eq(val(&A->group, row), "HETATM");
    }
    if ((st = copy_id(&A->atom, row, s->atom_name[a], MF_STRUCT_ID))) return st;
    if ((st = copy_id(&A->type, row, s->element[a], 4))) return st;
    mf_cif_str al = val(&A->alt, row);
    s->altloc[a] = al.len ? al.p[0] : '\0';
    double x, y, z, o, b;
    if ((st = mf_cif_get_double(&A->x, row, NAN, &x)) || (st = mf_cif_get_double(&A->y, row, NAN, &y)) ||
        (st = mf_cif_get_double(&A->z, row, NAN, &z)))
      return st;
    if (isnan(x) || isnan(y) || isnan(z))
      return mf_error_set(MF_ERR_FORMAT, "%s:%lld: _atom_site.Cartn_x/y/z: expected coordinates, "
                          "got a missing value", mf_cif_name(A->x.doc),
                          (long long)mf_cif_line(&A->x, row));
    if ((st = mf_cif_get_double(&A->occ, row, 1.0, &o))) return st;
    if ((st = mf_cif_get_double(&A->b, row, NAN, &b))) return st;
    s->xyz[3 * a] = x;
    s->xyz[3 * a + 1] = y;
    s->xyz[3 * a + 2] = z;
    s->occupancy[a] = (float)o;
    s->b_factor[a] = (float)b;
    s->atom_row[a] = row;
    a++;
    prev = row;
  }
  s->res_atom_start[r + 1] = a;
  s->chain_res_start[c + 1] = r + 1;
  return MF_OK;
}

static mf_status fill_entities(mf_structure *s, const src *S, pool_t *P) {
  mf_status st;
  mf_cif_col id = col_of(S, "_entity.id"), ty = col_of(S, "_entity.type");
  for (int64_t i = 0; i < id.n; i++) {
    mf_entity *e = &s->entities[i];
    memset(e, 0, sizeof *e);
    if ((st = copy_id(&id, i, e->id, MF_STRUCT_ID))) return st;
    e->type = entity_type(val(&ty, i));
    e->seq = e->seq_can = "";
  }
  s->n_entities = (int32_t)id.n;
  mf_cif_col pe = col_of(S, "_entity_poly.entity_id"), pt = col_of(S, "_entity_poly.type"),
             ps = col_of(S, "_entity_poly.pdbx_seq_one_letter_code"),
             pc = col_of(S, "_entity_poly.pdbx_seq_one_letter_code_can");
  for (int64_t i = 0; i < pe.n; i++) {
    char eid[MF_STRUCT_ID];
    if ((st = copy_id(&pe, i, eid, sizeof eid))) return st;
    int32_t e = find_entity(s, eid);
    if (e < 0 || s->entities[e].poly_type != MF_POLY_NONE) continue; /* first row wins */
    s->entities[e].poly_type = poly_type(val(&pt, i));
    s->entities[e].seq = pool_add(P, val(&ps, i), 1);
    s->entities[e].seq_can = pool_add(P, val(&pc, i), 1);
  }
  /* _entity_poly_seq grouped by entity, file order within an entity */
  mf_cif_col qe = col_of(S, "_entity_poly_seq.entity_id"), qn = col_of(S, "_entity_poly_seq.num"),
             qm = col_of(S, "_entity_poly_seq.mon_id"), qh = col_of(S, "_entity_poly_seq.hetero");
  int64_t pos = 0;
  for (int32_t e = 0; e < s->n_entities; e++) {
    mf_entity *en = &s->entities[e];
    en->poly_seq_start = pos;
    const int first_of_id = find_entity(s, en->id) == e; /* a repeated id gets no rows */
    for (int64_t i = 0; first_of_id && i < qe.n; i++) {
      if (!mf_cif_str_eq(val(&qe, i), en->id)) continue;
      if ((st = get_int32(&qn, i, &s->poly_num[pos]))) return st;
      if ((st = copy_id(&qm, i, s->poly_mon[pos], MF_STRUCT_ID))) return st;
      mf_cif_str h = val(&qh, i);
      s->poly_hetero[pos] = (uint8_t)(h.len && (h.p[0] == 'y' || h.p[0] == 'Y'));
      pos++;
    }
    en->poly_seq_count = pos - en->poly_seq_start;
  }
  s->n_poly_seq = pos;
  return MF_OK;
}

static mf_status fill_conns(mf_structure *s, const src *S) {
  mf_status st;
  mf_cif_col id = col_of(S, "_struct_conn.id"), ty = col_of(S, "_struct_conn.conn_type_id");
  for (int64_t i = 0; i < id.n; i++) {
    mf_conn *c = &s->conns[i];
    memset(c, 0, sizeof *c);
    if ((st = copy_id(&id, i, c->id, sizeof c->id))) return st;
    c->type = conn_type(val(&ty, i));
    c->covalent = c->type == MF_CONN_COVALE || c->type == MF_CONN_DISULF;
    for (int k = 0; k < 2; k++) {
      if ((st = read_partner(S, i, k, &c->p[k]))) return st;
      c->p[k].atom = find_atom(s, &c->p[k]);
    }
  }
  s->n_conns = (int32_t)id.n;
  return MF_OK;
}

static mf_status fill_assemblies(mf_structure *s, const src *S, pool_t *P) {
  mf_status st;
  mf_cif_col id = col_of(S, "_pdbx_struct_assembly.id"),
             de = col_of(S, "_pdbx_struct_assembly.details"),
             oc = col_of(S, "_pdbx_struct_assembly.oligomeric_count");
  mf_cif_col ga = col_of(S, "_pdbx_struct_assembly_gen.assembly_id"),
             go = col_of(S, "_pdbx_struct_assembly_gen.oper_expression"),
             gl = col_of(S, "_pdbx_struct_assembly_gen.asym_id_list");
  int32_t pos = 0;
  for (int64_t i = 0; i < id.n; i++) {
    mf_assembly *a = &s->assemblies[i];
    memset(a, 0, sizeof *a);
    if ((st = copy_id(&id, i, a->id, MF_STRUCT_ID))) return st;
    a->details = pool_add(P, val(&de, i), 0);
    int64_t cnt;
    if ((st = mf_cif_get_int(&oc, i, -1, &cnt))) return st;
    a->oligomeric_count = (int32_t)(cnt < INT32_MIN || cnt > INT32_MAX ? -1 : cnt);
    a->gen_start = pos;
    int dup = 0;
    for (int64_t j = 0; j < i && !dup; j++) dup = strcmp(s->assemblies[j].id, a->id) == 0;
    for (int64_t g = 0; g < ga.n && !dup; g++) { /* gens go to the first assembly of an id */
      if (!mf_cif_str_eq(val(&ga, g), a->id)) continue;
      s->assembly_gens[pos].oper_expression = pool_add(P, val(&go, g), 1);
      s->assembly_gens[pos].asym_ids = pool_add(P, val(&gl, g), 1);
      pos++;
    }
    a->gen_count = pos - a->gen_start;
  }
  s->n_assemblies = (int32_t)id.n;
  s->n_assembly_gens = pos;
  mf_cif_col oi = col_of(S, "_pdbx_struct_oper_list.id"),
             ot = col_of(S, "_pdbx_struct_oper_list.type");
  for (int64_t i = 0; i < oi.n; i++) {
    mf_struct_oper *o = &s->opers[i];
    memset(o, 0, sizeof *o);
    if ((st = copy_id(&oi, i, o->id, sizeof o->id))) return st;
    o->type = pool_add(P, val(&ot, i), 0);
    char tag[64];
    for (int r = 0; r < 3; r++) {
      for (int c = 0; c < 3; c++) {
        snprintf(tag, sizeof tag, "_pdbx_struct_oper_list.matrix[%d][%d]", r + 1, c + 1);
        mf_cif_col m = col_of(S, tag);
        if ((st = mf_cif_get_double(&m, i, r == c ? 1.0 : 0.0, &o->r[3 * r + c]))) return st;
      }
      snprintf(tag, sizeof tag, "_pdbx_struct_oper_list.vector[%d]", r + 1);
      mf_cif_col v = col_of(S, tag);
      if ((st = mf_cif_get_double(&v, i, 0.0, &o->t[r]))) return st;
    }
  }
  s->n_opers = (int32_t)oi.n;
  return MF_OK;
}

static mf_status fill_header(mf_structure *s, const src *S, pool_t *P) {
  mf_status st;
  mf_cif_col c = col_of(S, "_entry.id");
  mf_cif_str e = c.n ? val(&c, 0) : mf_cif_block_name(S->doc, S->block);
  mf_cif_str_copy(e, s->entry_id, sizeof s->entry_id);
  s->resolution = NAN;
  static const char *const res_tags[] = {"_refine.ls_d_res_high", "_reflns.d_resolution_high",
                                         "_em_3d_reconstruction.resolution"};
  for (int i = 0; i < 3 && isnan(s->resolution); i++) {
    c = col_of(S, res_tags[i]);
    if ((st = mf_cif_get_double(&c, 0, NAN, &s->resolution))) return st;
  }
  c = col_of(S, "_exptl.method");
  char *m = P->p + P->used;
  size_t k = 0;
  for (int64_t i = 0; i < c.n; i++) {
    mf_cif_str v = val(&c, i);
    if (!v.len) continue;
    if (k) {
      memcpy(m + k, "; ", 2);
      k += 2;
    }
    memcpy(m + k, v.p, (size_t)v.len);
    k += (size_t)v.len;
  }
  m[k] = '\0';
  P->used += k + 1;
  MF_ASSERT(P->used <= P->cap, "structure string pool overflow");
  s->method = m;
  return MF_OK;
}

static int64_t col_n(const src *S, const char *tag) { return col_of(S, tag).n; }

/* Pool bytes for `tag` read at rows [0, rows) of its table (absent values take 1). */
static int64_t col_bytes(const src *S, const char *tag, const char *key_tag) {
  mf_cif_col c = col_of(S, tag);
  int64_t rows = col_n(S, key_tag), b = 0;
  for (int64_t i = 0; i < rows; i++) b += null_len(&c, i);
  return b;
}

mf_status mf_structure_from_cif(const mf_cif_doc *doc, int32_t block, mf_structure **out) {
  *out = NULL;
  src S = {doc, block};
  if (block < 0 || block >= mf_cif_n_blocks(doc))
    return mf_error_set(MF_ERR_FORMAT, "%s: no data block %d", mf_cif_name(doc), block);
  atom_cols A;
  int64_t nrows;
  mf_status st = find_atom_cols(&S, &A, &nrows);
  if (st) return st;
  if (nrows == 0)
    return mf_error_set(MF_ERR_FORMAT, "%s: _atom_site has no rows", mf_cif_name(doc));
  uint8_t *keep = mf_malloc((size_t)nrows, "atom rows kept");
  if (!keep) return MF_ERR_NOMEM;
  if ((st = select_rows(&A, nrows, keep))) goto done_keep;

  counts c;
  memset(&c, 0, sizeof c);
  int64_t prev = -1;
  for (int64_t r = 0; r < nrows; r++) {
    if (!keep[r]) continue;
    c.atoms++;
    int nc = prev < 0 || !same_chain(&A, prev, r);
    c.chains += nc;
    c.residues += nc || !same_residue(&A, prev, r);
    prev = r;
  }
  if (c.chains > INT32_MAX) {
    st = mf_error_set(MF_ERR_FORMAT, "%s: too many chains", mf_cif_name(doc));
    goto done_keep;
  }
  c.entities = col_n(&S, "_entity.id");
  c.polyseq = col_n(&S, "_entity_poly_seq.entity_id");
  c.conns = col_n(&S, "_struct_conn.id");
  c.assemblies = col_n(&S, "_pdbx_struct_assembly.id");
  c.gens = col_n(&S, "_pdbx_struct_assembly_gen.assembly_id");
  c.opers = col_n(&S, "_pdbx_struct_oper_list.id");
  c.strbytes = col_bytes(&S, "_entity_poly.pdbx_seq_one_letter_code", "_entity_poly.entity_id") +
               col_bytes(&S, "_entity_poly.pdbx_seq_one_letter_code_can",
                         "_entity_poly.entity_id") +
               col_bytes(&S, "_pdbx_struct_assembly.details", "_pdbx_struct_assembly.id") +
               col_bytes(&S, "_pdbx_struct_assembly_gen.oper_expression",
                         "_pdbx_struct_assembly_gen.assembly_id") +
               col_bytes(&S, "_pdbx_struct_assembly_gen.asym_id_list",
                         "_pdbx_struct_assembly_gen.assembly_id") +
               col_bytes(&S, "_pdbx_struct_oper_list.type", "_pdbx_struct_oper_list.id") +
               col_bytes(&S, "_exptl.method", "_exptl.method") + 2 * col_n(&S, "_exptl.method") + 1;

  mf_structure tmpl;
  memset(&tmpl, 0, sizeof tmpl);
  char *pool = NULL;
  size_t need = mf_align_up(sizeof(mf_structure)) + layout(&tmpl, &c, NULL, &pool);
  mf_arena arena;
  if ((st = mf_arena_init(&arena, MF_HOST, need, "structure"))) goto done_keep;
  mf_structure *s = mf_arena_alloc(&arena, sizeof *s, "mf_structure");
  if (!s) {
    mf_arena_free(&arena);
    st = MF_ERR_NOMEM;
    goto done_keep;
  }
  memset(s, 0, sizeof *s);
  if (!layout(s, &c, &arena, &pool)) {
    mf_arena_free(&arena);
    st = MF_ERR_NOMEM;
    goto done_keep;
  }
  s->arena = arena;
  s->n_atoms = c.atoms;
  s->n_residues = c.residues;
  s->n_chains = (int32_t)c.chains;
  pool_t P = {pool, 0, (size_t)c.strbytes};
  mf_cif_str m0 = val(&A.model, 0);
  int64_t mnum = 1;
  if (m0.len && !mf_cif_parse_int(m0, &mnum)) mnum = 1;
  s->model_num = mnum;
  if ((st = fill_header(s, &S, &P)) || (st = fill_entities(s, &S, &P)) ||
      (st = fill_atoms(s, &A, nrows, keep)) || (st = fill_conns(s, &S)) ||
      (st = fill_assemblies(s, &S, &P))) {
    mf_structure_free(s);
    goto done_keep;
  }
  *out = s;
done_keep:
  mf_free(keep);
  return st;
}

mf_status mf_structure_read(const char *path, mf_structure **out) {
  *out = NULL;
  mf_cif_doc *doc;
  mf_status st = mf_cif_read(path, &doc);
  if (st) return st;
  st = mf_structure_from_cif(doc, 0, out);
  mf_cif_free(doc);
  return st;
}

void mf_structure_free(mf_structure *s) {
  if (!s) return;
  mf_arena a = s->arena;
  mf_arena_free(&a);
}

/* ------------------------------------------------------------------ assembly operators */

#define MAX_FACTORS 8

static int32_t find_oper(const mf_structure *s, const char *id, size_t len) {
  for (int32_t i = 0; i < s->n_opers; i++)
    if (strlen(s->opers[i].id) == len && strncmp(s->opers[i].id, id, len) == 0) return i;
  return -1;
}

/* One factor "a,b-c,..." in [p, e): its operator indices into ops (count in *n), or the
 * count alone when ops is NULL. */
static mf_status factor_ops(const mf_structure *s, const char *expr, const char *p, const char *e,
                            int32_t *ops, int64_t *n) {
  *n = 0;
  while (p < e) {
    const char *c = memchr(p, ',', (size_t)(e - p));
    if (!c) c = e;
    const char *dash = memchr(p, '-', (size_t)(c - p));
    if (c == p) goto bad;
    if (dash) {
      mf_cif_str a = {p, dash - p}, b = {dash + 1, c - dash - 1};
      int64_t lo, hi;
      if (!mf_cif_parse_int(a, &lo) || !mf_cif_parse_int(b, &hi) || lo > hi || hi - lo > 100000)
        goto bad;
      for (int64_t k = lo; k <= hi; k++) {
        char id[24];
        int len = snprintf(id, sizeof id, "%lld", (long long)k);
        int32_t o = find_oper(s, id, (size_t)len);
        if (o < 0)
          return mf_error_set(MF_ERR_FORMAT, "assembly oper_expression '%s': operator '%s' is not "
                              "in _pdbx_struct_oper_list", expr, id);
        if (ops) ops[*n] = o;
        (*n)++;
      }
    } else {
      int32_t o = find_oper(s, p, (size_t)(c - p));
      if (o < 0)
        return mf_error_set(MF_ERR_FORMAT, "assembly oper_expression '%s': operator '%.*s' is "
                            "not in _pdbx_struct_oper_list", expr, (int)(c - p), p);
      if (ops) ops[*n] = o;
      (*n)++;
    }
    p = c < e ? c + 1 : e;
  }
  if (*n > 0) return MF_OK;
bad:
  return mf_error_set(MF_ERR_FORMAT, "assembly oper_expression '%s': expected operator ids or "
                      "ranges like 1-60 separated by commas", expr);
}

mf_status mf_structure_expand_opers(const mf_structure *s, int32_t gen, int32_t *out, int64_t cap,
                                    int64_t *n_products, int32_t *n_factors) {
  *n_products = 0;
  *n_factors = 0;
  if (gen < 0 || gen >= s->n_assembly_gens)
    return mf_error_set(MF_ERR_CONFIG, "assembly generator %d of %d", gen, s->n_assembly_gens);
  const char *expr = s->assembly_gens[gen].oper_expression;
  const char *fb[MAX_FACTORS], *fe[MAX_FACTORS];
  int32_t nf = 0;
  if (expr[0] != '(') {
    fb[0] = expr;
    fe[0] = expr + strlen(expr);
    nf = 1;
  } else {
    for (const char *p = expr; *p;) {
      const char *close = *p == '(' ? strchr(p, ')') : NULL;
      if (!close || nf == MAX_FACTORS)
        return mf_error_set(MF_ERR_FORMAT, "assembly oper_expression '%s': expected at most %d "
                            "factors of the form (ids)", expr, MAX_FACTORS);
      fb[nf] = p + 1;
      fe[nf++] = close;
      p = close + 1;
    }
  }
  int64_t count[MAX_FACTORS], total = 1;
  mf_status st;
  for (int32_t f = 0; f < nf; f++) {
    if ((st = factor_ops(s, expr, fb[f], fe[f], NULL, &count[f]))) return st;
    total *= count[f];
    if (total > (int64_t)1 << 24)
      return mf_error_set(MF_ERR_FORMAT, "assembly oper_expression '%s': too many products", expr);
  }
  *n_products = total;
  *n_factors = nf;
  if (!out) return MF_OK;
  if (cap < total * nf)
    return mf_error_set(MF_ERR_SHAPE, "assembly oper_expression '%s': %lld entries needed, %lld "
                        "given", expr, (long long)(total * nf), (long long)cap);
  /* factor f's list into its column block; then the products, last factor fastest */
  int64_t stride = 1;
  for (int32_t f = nf - 1; f >= 0; f--) {
    int32_t *ops = mf_malloc((size_t)count[f] * sizeof *ops, "assembly factor");
    if (!ops) return MF_ERR_NOMEM;
    int64_t nn;
    st = factor_ops(s, expr, fb[f], fe[f], ops, &nn);
    for (int64_t p = 0; p < total && st == MF_OK; p++) out[p * nf + f] = ops[(p / stride) % nn];
    mf_free(ops);
    if (st) return st;
    stride *= count[f];
  }
  return MF_OK;
}

void mf_structure_apply_opers(const mf_structure *s, const int32_t *seq, int32_t nf,
                              const double *in, double *out, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double p[3] = {in[3 * i], in[3 * i + 1], in[3 * i + 2]};
    for (int32_t f = nf - 1; f >= 0; f--) {
      const mf_struct_oper *o = &s->opers[seq[f]];
      double q[3];
      for (int r = 0; r < 3; r++)
        q[r] = o->r[3 * r] * p[0] + o->r[3 * r + 1] * p[1] + o->r[3 * r + 2] * p[2] + o->t[r];
      p[0] = q[0];
      p[1] = q[1];
      p[2] = q[2];
    }
    out[3 * i] = p[0];
    out[3 * i + 1] = p[1];
    out[3 * i + 2] = p[2];
  }
}

int64_t mf_structure_atom_residue(const mf_structure *s, int64_t atom) {
  if (atom < 0 || atom >= s->n_atoms) return -1;
  int64_t lo = 0, hi = s->n_residues - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (s->res_atom_start[mid] <= atom) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

int32_t mf_structure_residue_chain(const mf_structure *s, int64_t res) {
  if (res < 0 || res >= s->n_residues) return -1;
  int32_t lo = 0, hi = s->n_chains - 1;
  while (lo < hi) {
    int32_t mid = (lo + hi + 1) / 2;
    if (s->chain_res_start[mid] <= res) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
