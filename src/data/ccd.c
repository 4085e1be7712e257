/* ccd.c — the CCD reader on top of the cif.h tokenizer (chunks of whole data blocks), the
 * component hash table, and the binary serialisation. See ccd.h. Not a tokenizer: the
 * chunk splitter only finds lines that start with "data_" outside ';' text fields. */
#define _POSIX_C_SOURCE 200809L /* strncasecmp */
#include "data/ccd.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/atomic_file.h"
#include "data/cif.h"
#include "data/textfile.h"

#define CHUNK_DEFAULT ((size_t)32 << 20) /* text per mf_cif_parse call for large files */
static size_t g_chunk_bytes = CHUNK_DEFAULT;

void mf_ccd_set_chunk_bytes(size_t bytes) { g_chunk_bytes = bytes ? bytes : CHUNK_DEFAULT; }

/* ------------------------------------------------------------------ small helpers */

static uint64_t fnv1a(const void *data, size_t n, uint64_t h) {
  const unsigned char *b = data;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}
#define FNV_SEED 0xcbf29ce484222325ULL

static const char *const k_elements[119] = {
    "",   "H",  "He", "Li", "Be", "B",  "C",  "N",  "O",  "F",  "Ne", "Na", "Mg", "Al", "Si",
    "P",  "S",  "Cl", "Ar", "K",  "Ca", "Sc", "Ti", "V",  "Cr", "Mn", "Fe", "Co", "Ni", "Cu",
    "Zn", "Ga", "Ge", "As", "Se", "Br", "Kr", "Rb", "Sr", "Y",  "Zr", "Nb", "Mo", "Tc", "Ru",
    "Rh", "Pd", "Ag", "Cd", "In", "Sn", "Sb", "Te", "I",  "Xe", "Cs", "Ba", "La", "Ce", "Pr",
    "Nd", "Pm", "Sm", "Eu", "Gd", "Tb", "Dy", "Ho", "Er", "Tm", "Yb", "Lu", "Hf", "Ta", "W",
    "Re", "Os", "Ir", "Pt", "Au", "Hg", "Tl", "Pb", "Bi", "Po", "At", "Rn", "Fr", "Ra", "Ac",
    "Th", "Pa", "U",  "Np", "Pu", "Am", "Cm", "Bk", "Cf", "Es", "Fm", "Md", "No", "Lr", "Rf",
    "Db", "Sg", "Bh", "Hs", "Mt", "Ds", "Rg", "Cn", "Nh", "Fl", "Mc", "Lv", "Ts", "Og"};

int mf_element_number(const char *symbol) {
  if (!symbol || !symbol[0]) return 0;
  if (!strcasecmp(symbol, "D") || !strcasecmp(symbol, "T")) return 1;
  for (int z = 1; z <= 118; z++)
    if (!strcasecmp(symbol, k_elements[z])) return z;
  return 0;
}

/* ------------------------------------------------------------------ building */

typedef struct {
  mf_ccd *c;
  int64_t cap_comp, cap_atoms, cap_bonds, cap_strings;
} builder;

static mf_status add_string(builder *b, mf_cif_str s, int null, int64_t *off) {
  int64_t len = null ? 0 : s.len;
  mf_status st = mf_grow((void **)&b->c->strings, &b->cap_strings, b->c->strings_len + len + 1,
                         1, "ccd strings");
  if (st != MF_OK) return st;
  *off = b->c->strings_len;
  if (len) memcpy(b->c->strings + *off, s.p, (size_t)len);
  b->c->strings[*off + len] = '\0';
  b->c->strings_len += len + 1;
  return MF_OK;
}

/* Y/N flag: 1, 0; '?', '.' and absent are 0; anything else is an error. */
static mf_status get_flag(const mf_cif_col *col, int64_t row, const char *file, const char *comp,
                          const char *tag, int *out) {
  *out = 0;
  if (col->n == 0 || mf_cif_is_null(col, row)) return MF_OK;
  mf_cif_str s = mf_cif_value(col, row);
  if (mf_cif_str_ieq(s, "Y")) *out = 1;
  else if (!mf_cif_str_ieq(s, "N"))
    return mf_error_set(MF_ERR_FORMAT, "%s: component %s, line %lld: %s is '%.*s', expected Y or N",
                        file, comp, (long long)mf_cif_line(col, row), tag, (int)s.len, s.p);
  return MF_OK;
}

static int bond_order(mf_cif_str s) {
  static const char *const k[] = {"SING", "DOUB", "TRIP", "QUAD", "AROM", "DELO", "PI", "POLY"};
  for (int i = 0; i < 8; i++)
    if (mf_cif_str_ieq(s, k[i])) return i + 1;
  return -1;
}

/* The value of a column at row, as a C string into dst; error if it does not fit. */
static mf_status get_str(const mf_cif_col *col, int64_t row, char *dst, size_t cap,
                         const char *file, const char *comp, const char *tag) {
  mf_cif_str s = mf_cif_value(col, row);
  if (!mf_cif_str_copy(s, dst, cap))
    return mf_error_set(MF_ERR_FORMAT, "%s: component %s, line %lld: %s '%.*s' is longer than "
                        "%zu characters", file, comp, (long long)mf_cif_line(col, row), tag,
                        (int)(s.len > 64 ? 64 : s.len), s.p, cap - 1);
  return MF_OK;
}

/* comp_id column of an atom/bond row must name this component. */
static mf_status check_comp(const mf_cif_col *col, int64_t row, const char *file,
                            const char *comp, const char *tag) {
  if (col->n == 0) return MF_OK;
  mf_cif_str s = mf_cif_value(col, row);
  if (!mf_cif_str_eq(s, comp))
    return mf_error_set(MF_ERR_FORMAT, "%s: component %s, line %lld: %s is '%.*s', a row of "
                        "another component", file, comp, (long long)mf_cif_line(col, row), tag,
                        (int)(s.len > 64 ? 64 : s.len), s.p);
  return MF_OK;
}

static mf_status add_component(builder *b, const mf_cif_doc *doc, int32_t blk, const char *file) {
  mf_ccd *ccd = b->c;
  mf_status st;
  mf_cif_col col;
  mf_cif_str bname = mf_cif_block_name(doc, blk);
  if (!mf_cif_find(doc, blk, "_chem_comp.id", &col) || mf_cif_is_null(&col, 0))
    return mf_error_set(MF_ERR_FORMAT, "%s: data block '%.*s' has no _chem_comp.id", file,
                        (int)(bname.len > 64 ? 64 : bname.len), bname.p);
  st = mf_grow((void **)&ccd->components, &b->cap_comp, ccd->n_components + 1,
               sizeof(mf_ccd_component), "ccd components");
  if (st != MF_OK) return st;
  mf_ccd_component *c = &ccd->components[ccd->n_components];
  memset(c, 0, sizeof *c);
  char bn[MF_CCD_ID_MAX + 8];
  snprintf(bn, sizeof bn, "%.*s", (int)(bname.len > 12 ? 12 : bname.len), bname.p);
  if ((st = get_str(&col, 0, c->id, sizeof c->id, file, bn, "_chem_comp.id")) != MF_OK) return st;
  const char *id = c->id;

  mf_cif_col name, type, parent, one, charge;
  mf_cif_find(doc, blk, "_chem_comp.name", &name);
  mf_cif_find(doc, blk, "_chem_comp.type", &type);
  mf_cif_find(doc, blk, "_chem_comp.mon_nstd_parent_comp_id", &parent);
  mf_cif_find(doc, blk, "_chem_comp.one_letter_code", &one);
  mf_cif_find(doc, blk, "_chem_comp.pdbx_formal_charge", &charge);
  if ((st = add_string(b, mf_cif_value(&name, 0), mf_cif_is_null(&name, 0), &c->name_off)) != MF_OK)
    return st;
  if ((st = add_string(b, mf_cif_value(&type, 0), mf_cif_is_null(&type, 0), &c->type_off)) != MF_OK)
    return st;
  if (!mf_cif_is_null(&parent, 0)) {
    mf_cif_str p = mf_cif_value(&parent, 0);
    int64_t k = 0;
    while (k < p.len && p.p[k] != ',' && p.p[k] != ' ') k++;
    p.len = k; /* the first of a comma-separated list */
    if (!mf_cif_str_copy(p, c->parent, sizeof c->parent))
      return mf_error_set(MF_ERR_FORMAT, "%s: component %s, line %lld: "
                          "_chem_comp.mon_nstd_parent_comp_id '%.*s' is longer than %d characters",
                          file, id, (long long)mf_cif_line(&parent, 0), (int)(k > 16 ? 16 : k), p.p,
                          MF_CCD_ID_MAX - 1);
  }
  if (!mf_cif_is_null(&one, 0)) c->one_letter = mf_cif_value(&one, 0).p[0];
  int64_t fc = 0;
  if ((st = mf_cif_get_int(&charge, 0, 0, &fc)) != MF_OK) return st;
  c->formal_charge = (int32_t)fc;

  /* atoms */
  mf_cif_col a_comp, a_id, a_el, a_chg, a_arom, a_leave, mx, my, mz, ix, iy, iz;
  mf_cif_find(doc, blk, "_chem_comp_atom.comp_id", &a_comp);
  mf_cif_find(doc, blk, "_chem_comp_atom.atom_id", &a_id);
  mf_cif_find(doc, blk, "_chem_comp_atom.type_symbol", &a_el);
  mf_cif_find(doc, blk, "_chem_comp_atom.charge", &a_chg);
  mf_cif_find(doc, blk, "_chem_comp_atom.pdbx_aromatic_flag", &a_arom);
  mf_cif_find(doc, blk, "_chem_comp_atom.pdbx_leaving_atom_flag", &a_leave);
  mf_cif_find(doc, blk, "_chem_comp_atom.model_Cartn_x", &mx);
  mf_cif_find(doc, blk, "_chem_comp_atom.model_Cartn_y", &my);
  mf_cif_find(doc, blk, "_chem_comp_atom.model_Cartn_z", &mz);
  mf_cif_find(doc, blk, "_chem_comp_atom.pdbx_model_Cartn_x_ideal", &ix);
  mf_cif_find(doc, blk, "_chem_comp_atom.pdbx_model_Cartn_y_ideal", &iy);
  mf_cif_find(doc, blk, "_chem_comp_atom.pdbx_model_Cartn_z_ideal", &iz);
  int64_t na = a_id.n;
  if (na > 0 && a_el.n != na)
    return mf_error_set(MF_ERR_FORMAT, "%s: component %s: _chem_comp_atom has atom_id but no "
                        "type_symbol", file, id);
  c->atom0 = ccd->n_atoms;
  c->n_atoms = na;
  st = mf_grow((void **)&ccd->atoms, &b->cap_atoms, ccd->n_atoms + na, sizeof(mf_ccd_atom),
               "ccd atoms");
  if (st != MF_OK) return st;
  mf_ccd_atom *at = na ? ccd->atoms + c->atom0 : NULL; /* no arithmetic on a NULL table */
  int all_ideal = na > 0, all_model = na > 0;
  for (int64_t r = 0; r < na; r++) {
    all_ideal &= !mf_cif_is_null(&ix, r) && !mf_cif_is_null(&iy, r) && !mf_cif_is_null(&iz, r);
    all_model &= !mf_cif_is_null(&mx, r) && !mf_cif_is_null(&my, r) && !mf_cif_is_null(&mz, r);
  }
  c->coord_source = na == 0 ? MF_CCD_COORDS_NONE
                    : all_ideal ? MF_CCD_COORDS_IDEAL
                    : all_model ? MF_CCD_COORDS_MODEL
                                : MF_CCD_COORDS_MIXED;
  for (int64_t r = 0; r < na; r++) {
    mf_ccd_atom *a = &at[r];
    memset(a, 0, sizeof *a);
    if ((st = check_comp(&a_comp, r, file, id, "_chem_comp_atom.comp_id")) != MF_OK) return st;
    if (mf_cif_is_null(&a_id, r))
      return mf_error_set(MF_ERR_FORMAT, "%s: component %s, line %lld: _chem_comp_atom.atom_id is "
                          "missing", file, id, (long long)mf_cif_line(&a_id, r));
    if ((st = get_str(&a_id, r, a->name, sizeof a->name, file, id, "_chem_comp_atom.atom_id")) !=
        MF_OK)
      return st;
    for (int64_t q = 0; q < r; q++)
      if (!strcmp(at[q].name, a->name))
        return mf_error_set(MF_ERR_FORMAT, "%s: component %s, line %lld: duplicate atom '%s'",
                            file, id, (long long)mf_cif_line(&a_id, r), a->name);
    if ((st = get_str(&a_el, r, a->element, sizeof a->element, file, id,
                      "_chem_comp_atom.type_symbol")) != MF_OK)
      return st;
    a->atomic_number = (uint8_t)mf_element_number(a->element);
    int64_t q = 0;
    if ((st = mf_cif_get_int(&a_chg, r, 0, &q)) != MF_OK) return st;
    if (q < -20 || q > 20)
      return mf_error_set(MF_ERR_FORMAT, "%s: component %s, line %lld: atom %s has charge %lld",
                          file, id, (long long)mf_cif_line(&a_chg, r), a->name, (long long)q);
    a->charge = (int8_t)q;
    int f;
    if ((st = get_flag(&a_leave, r, file, id, "_chem_comp_atom.pdbx_leaving_atom_flag", &f)) !=
        MF_OK)
      return st;
    if (f) a->flags |= MF_CCD_ATOM_LEAVING;
    if ((st = get_flag(&a_arom, r, file, id, "_chem_comp_atom.pdbx_aromatic_flag", &f)) != MF_OK)
      return st;
    if (f) a->flags |= MF_CCD_ATOM_AROMATIC;
    if (a->atomic_number == 1) a->flags |= MF_CCD_ATOM_HYDROGEN;
    else c->n_heavy++;
    /* coordinates: the component-level choice, per atom for MIXED */
    int use_ideal = !mf_cif_is_null(&ix, r) && !mf_cif_is_null(&iy, r) && !mf_cif_is_null(&iz, r);
    int use_model = !mf_cif_is_null(&mx, r) && !mf_cif_is_null(&my, r) && !mf_cif_is_null(&mz, r);
    if (c->coord_source == MF_CCD_COORDS_MODEL) use_ideal = 0;
    const mf_cif_col *xyz[3] = {&ix, &iy, &iz};
    if (!use_ideal) xyz[0] = &mx, xyz[1] = &my, xyz[2] = &mz;
    if (use_ideal || use_model) {
      for (int k = 0; k < 3; k++) {
        double v = 0;
        if ((st = mf_cif_get_double(xyz[k], r, 0.0, &v)) != MF_OK) return st;
        a->pos[k] = (float)v;
      }
    } else {
      a->flags |= MF_CCD_ATOM_NO_COORDS;
    }
  }
  ccd->n_atoms += na;

  /* bonds */
  mf_cif_col b_comp, b_a1, b_a2, b_ord, b_arom;
  mf_cif_find(doc, blk, "_chem_comp_bond.comp_id", &b_comp);
  mf_cif_find(doc, blk, "_chem_comp_bond.atom_id_1", &b_a1);
  mf_cif_find(doc, blk, "_chem_comp_bond.atom_id_2", &b_a2);
  mf_cif_find(doc, blk, "_chem_comp_bond.value_order", &b_ord);
  mf_cif_find(doc, blk, "_chem_comp_bond.pdbx_aromatic_flag", &b_arom);
  int64_t nb = b_a1.n;
  if (nb != b_a2.n)
    return mf_error_set(MF_ERR_FORMAT, "%s: component %s: _chem_comp_bond has %lld atom_id_1 and "
                        "%lld atom_id_2 values", file, id, (long long)nb, (long long)b_a2.n);
  c->bond0 = ccd->n_bonds;
  c->n_bonds = nb;
  st = mf_grow((void **)&ccd->bonds, &b->cap_bonds, ccd->n_bonds + nb, sizeof(mf_ccd_bond),
               "ccd bonds");
  if (st != MF_OK) return st;
  for (int64_t r = 0; r < nb; r++) {
    mf_ccd_bond *bd = &ccd->bonds[c->bond0 + r];
    memset(bd, 0, sizeof *bd);
    if ((st = check_comp(&b_comp, r, file, id, "_chem_comp_bond.comp_id")) != MF_OK) return st;
    const mf_cif_col *ends[2] = {&b_a1, &b_a2};
    int32_t idx[2];
    for (int e = 0; e < 2; e++) {
      mf_cif_str s = mf_cif_value(ends[e], r);
      idx[e] = -1;
      for (int64_t q = 0; q < na && idx[e] < 0; q++)
        if (mf_cif_str_eq(s, at[q].name)) idx[e] = (int32_t)q;
      if (idx[e] < 0)
        return mf_error_set(MF_ERR_FORMAT, "%s: component %s, line %lld: bond %lld names atom "
                            "'%.*s', which the component does not have", file, id,
                            (long long)mf_cif_line(ends[e], r), (long long)r + 1,
                            (int)(s.len > 16 ? 16 : s.len), s.p);
    }
    if (idx[0] == idx[1])
      return mf_error_set(MF_ERR_FORMAT, "%s: component %s, line %lld: bond from atom %s to itself",
                          file, id, (long long)mf_cif_line(&b_a1, r), at[idx[0]].name);
    bd->a = idx[0];
    bd->b = idx[1];
    if (b_ord.n && !mf_cif_is_null(&b_ord, r)) {
      int o = bond_order(mf_cif_value(&b_ord, r));
      if (o < 0) {
        mf_cif_str s = mf_cif_value(&b_ord, r);
        return mf_error_set(MF_ERR_FORMAT, "%s: component %s, line %lld: bond order '%.*s' is not "
                            "one of SING DOUB TRIP QUAD AROM DELO PI POLY", file, id,
                            (long long)mf_cif_line(&b_ord, r), (int)(s.len > 16 ? 16 : s.len),
                            s.p);
      }
      bd->order = (uint8_t)o;
    }
    int f;
    if ((st = get_flag(&b_arom, r, file, id, "_chem_comp_bond.pdbx_aromatic_flag", &f)) != MF_OK)
      return st;
    bd->aromatic = (uint8_t)f;
  }
  ccd->n_bonds += nb;
  ccd->n_components++;
  return MF_OK;
}

/* ------------------------------------------------------------------ hash table */
static uint64_t hash_id(const char *id) { return fnv1a(id, strlen(id), FNV_SEED); }

static mf_status build_table(mf_ccd *ccd, const char *file) {
  int64_t size = 16;
  while (size < 2 * ccd->n_components) size *= 2;
  ccd->table = mf_malloc((size_t)size * sizeof(int64_t), "ccd hash table");
  if (!ccd->table) return MF_ERR_NOMEM;
  ccd->table_size = size;
  for (int64_t k = 0; k < size; k++) ccd->table[k] = -1;
  for (int64_t i = 0; i < ccd->n_components; i++) {
    const char *id = ccd->components[i].id;
    uint64_t h = hash_id(id) & (uint64_t)(size - 1);
    while (ccd->table[h] >= 0) {
      if (!strcmp(ccd->components[ccd->table[h]].id, id))
        return mf_error_set(MF_ERR_FORMAT, "%s: component %s is defined twice (data blocks %lld "
                            "and %lld)", file, id, (long long)ccd->table[h] + 1, (long long)i + 1);
      h = (h + 1) & (uint64_t)(size - 1);
    }
    ccd->table[h] = i;
  }
  return MF_OK;
}

const mf_ccd_component *mf_ccd_find(const mf_ccd *ccd, const char *id) {
  if (!ccd->table || !id) return NULL;
  uint64_t h = hash_id(id) & (uint64_t)(ccd->table_size - 1);
  while (ccd->table[h] >= 0) {
    const mf_ccd_component *c = &ccd->components[ccd->table[h]];
    if (!strcmp(c->id, id)) return c;
    h = (h + 1) & (uint64_t)(ccd->table_size - 1);
  }
  return NULL;
}

/* ------------------------------------------------------------------ reading */
void mf_ccd_free(mf_ccd *ccd) {
  if (!ccd) return;
  mf_free(ccd->components);
  mf_free(ccd->atoms);
  mf_free(ccd->bonds);
  mf_free(ccd->strings);
  mf_free(ccd->table);
  memset(ccd, 0, sizeof *ccd);
}

/* End of the chunk that starts at `start`: the first line at or after start + g_chunk_bytes
 * that begins with "data_" outside a ';' text field, or len. */
static size_t chunk_end(const char *text, size_t len, size_t start, int64_t *lines) {
  size_t i = start;
  int in_text = 0;
  int64_t nl = 0;
  while (i < len) {
    if (i - start >= g_chunk_bytes && !in_text && len - i >= 5 && !strncasecmp(text + i, "data_", 5))
      break;
    if (text[i] == ';') in_text = !in_text;
    const char *e = memchr(text + i, '\n', len - i);
    if (!e) {
      i = len;
      break;
    }
    i = (size_t)(e - text) + 1;
    nl++;
  }
  *lines = nl;
  return i;
}

static mf_status parse_text(const char *text, size_t len, const char *file, mf_ccd *ccd) {
  memset(ccd, 0, sizeof *ccd);
  builder b = {.c = ccd};
  mf_status st = MF_OK;
  size_t start = 0;
  int64_t line0 = 1;
  int n_chunks = 0;
  while (st == MF_OK && (start < len || n_chunks == 0)) {
    int64_t lines = 0;
    size_t end = chunk_end(text, len, start, &lines);
    char name[600];
    if (start == 0 && end == len) snprintf(name, sizeof name, "%s", file);
    else snprintf(name, sizeof name, "%s [part from line %lld]", file, (long long)line0);
    mf_cif_doc *doc = NULL;
    st = mf_cif_parse(text + start, end - start, name, &doc);
    if (st != MF_OK) break;
    int32_t nblk = mf_cif_n_blocks(doc);
    for (int32_t k = 0; k < nblk && st == MF_OK; k++) st = add_component(&b, doc, k, name);
    mf_cif_free(doc);
    start = end;
    line0 += lines;
    n_chunks++;
  }
  if (st == MF_OK && ccd->n_components == 0)
    st = mf_error_set(MF_ERR_FORMAT, "%s: no components (no data blocks)", file);
  if (st == MF_OK) st = build_table(ccd, file);
  if (st != MF_OK) mf_ccd_free(ccd);
  return st;
}

/* The text of the file at path, or (path NULL) of the n bytes of data, parsed; name names
 * it in messages. */
static mf_status parse_source(const char *path, const void *data, size_t n, const char *name,
                              mf_ccd *ccd) {
  memset(ccd, 0, sizeof *ccd);
  char *text = NULL;
  size_t len = 0;
  mf_status st = path ? mf_textfile_read(path, &text, &len)
                      : mf_textfile_from_bytes(data, n, name, &text, &len);
  if (st != MF_OK) return st;
  st = parse_text(text, len, name, ccd);
  mf_free(text);
  return st;
}

mf_status mf_ccd_parse(const void *data, size_t n, const char *name, mf_ccd *ccd) {
  return parse_source(NULL, data, n, name, ccd);
}

mf_status mf_ccd_read(const char *path, mf_ccd *ccd) {
  return parse_source(path, NULL, 0, path, ccd);
}

const char *mf_ccd_name(const mf_ccd *ccd, const mf_ccd_component *c) {
  return ccd->strings + c->name_off;
}
const char *mf_ccd_type(const mf_ccd *ccd, const mf_ccd_component *c) {
  return ccd->strings + c->type_off;
}

int64_t mf_ccd_atom_index(const mf_ccd *ccd, const mf_ccd_component *c, const char *atom_name) {
  for (int64_t k = 0; k < c->n_atoms; k++)
    if (!strcmp(ccd->atoms[c->atom0 + k].name, atom_name)) return k;
  return -1;
}

int mf_ccd_restype(const mf_ccd *ccd, const mf_ccd_component *c, mf_moltype t) {
  (void)ccd;
  if (t == MF_MOL_LIGAND) return MF_RESTYPE_UNK;
  int r = mf_restype_from_ccd(c->id);
  if (r < 0 && c->parent[0]) r = mf_restype_from_ccd(c->parent);
  if (r >= 0 && mf_restype_moltype(r) == t) return r;
  return t == MF_MOL_RNA ? MF_RESTYPE_N : t == MF_MOL_DNA ? MF_RESTYPE_DN : MF_RESTYPE_UNK;
}

/* ------------------------------------------------------------------ binary form */
#define BIN_MAGIC "MFCCDBIN"
#define BIN_VERSION 1u

typedef struct {
  char magic[8];
  uint32_t version, sz_comp, sz_atom, sz_bond;
  int64_t n_components, n_atoms, n_bonds, strings_len;
  uint64_t checksum; /* FNV-1a 64 of the payload */
} bin_header;

/* What the atomic writer puts in the file: the header, then the four tables. */
typedef struct {
  const bin_header *h;
  const void *const *parts;
  const size_t *sizes;
} ccd_parts;

static int write_parts(FILE *f, void *ctx) {
  const ccd_parts *c = ctx;
  int ok = fwrite(c->h, sizeof *c->h, 1, f) == 1;
  for (int k = 0; k < 4 && ok; k++) ok = !c->sizes[k] || fwrite(c->parts[k], c->sizes[k], 1, f) == 1;
  return ok;
}

/* Written atomically (core/atomic_file.h): a reader, or a crash, sees the old file or the
 * new one whole, never a part. */
mf_status mf_ccd_save(const mf_ccd *ccd, const char *path) {
  bin_header h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, BIN_MAGIC, 8);
  h.version = BIN_VERSION;
  h.sz_comp = sizeof(mf_ccd_component);
  h.sz_atom = sizeof(mf_ccd_atom);
  h.sz_bond = sizeof(mf_ccd_bond);
  h.n_components = ccd->n_components;
  h.n_atoms = ccd->n_atoms;
  h.n_bonds = ccd->n_bonds;
  h.strings_len = ccd->strings_len;
  const void *parts[4] = {ccd->components, ccd->atoms, ccd->bonds, ccd->strings};
  size_t sizes[4] = {(size_t)ccd->n_components * sizeof(mf_ccd_component),
                     (size_t)ccd->n_atoms * sizeof(mf_ccd_atom),
                     (size_t)ccd->n_bonds * sizeof(mf_ccd_bond), (size_t)ccd->strings_len};
  uint64_t sum = FNV_SEED;
  for (int k = 0; k < 4; k++)
    if (sizes[k]) sum = fnv1a(parts[k], sizes[k], sum);
  h.checksum = sum;
  ccd_parts c = {&h, parts, sizes};
  return mf_atomic_write_file(path, write_parts, &c, NULL, NULL);
}

/* Indices and offsets of a loaded table, so a corrupt file cannot make look-ups stray. */
static mf_status validate(const mf_ccd *ccd, const char *path) {
  if (ccd->strings_len < 1 || ccd->strings[ccd->strings_len - 1] != '\0')
    return mf_error_set(MF_ERR_FORMAT, "%s: string pool not terminated", path);
  int64_t atoms = 0, bonds = 0;
  for (int64_t i = 0; i < ccd->n_components; i++) {
    const mf_ccd_component *c = &ccd->components[i];
    if (memchr(c->id, 0, sizeof c->id) == NULL || memchr(c->parent, 0, sizeof c->parent) == NULL ||
        c->name_off < 0 || c->name_off >= ccd->strings_len || c->type_off < 0 ||
        c->type_off >= ccd->strings_len || c->atom0 != atoms || c->n_atoms < 0 ||
        c->n_atoms > ccd->n_atoms - atoms || c->bond0 != bonds || c->n_bonds < 0 ||
        c->n_bonds > ccd->n_bonds - bonds)
      return mf_error_set(MF_ERR_FORMAT, "%s: component record %lld is inconsistent", path,
                          (long long)i + 1);
    for (int64_t k = 0; k < c->n_bonds; k++) {
      const mf_ccd_bond *b = &ccd->bonds[c->bond0 + k];
      if (b->a < 0 || b->a >= c->n_atoms || b->b < 0 || b->b >= c->n_atoms)
        return mf_error_set(MF_ERR_FORMAT, "%s: component %s: bond %lld out of range", path, c->id,
                            (long long)k + 1);
    }
    for (int64_t k = 0; k < c->n_atoms; k++)
      if (!memchr(ccd->atoms[c->atom0 + k].name, 0, MF_CCD_NAME_MAX) ||
          !memchr(ccd->atoms[c->atom0 + k].element, 0, 4))
        return mf_error_set(MF_ERR_FORMAT, "%s: component %s: atom %lld name not terminated",
                            path, c->id, (long long)k + 1);
    atoms += c->n_atoms;
    bonds += c->n_bonds;
  }
  if (atoms != ccd->n_atoms || bonds != ccd->n_bonds)
    return mf_error_set(MF_ERR_FORMAT, "%s: components cover %lld atoms and %lld bonds, the "
                        "header says %lld and %lld", path, (long long)atoms, (long long)bonds,
                        (long long)ccd->n_atoms, (long long)ccd->n_bonds);
  return MF_OK;
}

mf_status mf_ccd_load(const char *path, mf_ccd *ccd) {
  memset(ccd, 0, sizeof *ccd);
  char *raw = NULL;
  size_t n = 0;
  mf_status st = mf_textfile_read(path, &raw, &n); /* a gzipped binary file works too */
  if (st != MF_OK) return st;
  bin_header h;
  if (n < sizeof h) {
    mf_free(raw);
    return mf_error_set(MF_ERR_FORMAT, "%s: %zu bytes, too short for a CCD binary file", path, n);
  }
  memcpy(&h, raw, sizeof h);
  if (memcmp(h.magic, BIN_MAGIC, 8) != 0) {
    mf_free(raw);
    return mf_error_set(MF_ERR_FORMAT, "%s: not a megafold CCD binary file (bad magic)", path);
  }
  if (h.version != BIN_VERSION || h.sz_comp != sizeof(mf_ccd_component) ||
      h.sz_atom != sizeof(mf_ccd_atom) || h.sz_bond != sizeof(mf_ccd_bond)) {
    mf_free(raw);
    return mf_error_set(MF_ERR_FORMAT, "%s: CCD binary version %u / record sizes %u %u %u, this "
                        "build reads version %u / %zu %zu %zu", path, h.version, h.sz_comp,
                        h.sz_atom, h.sz_bond, BIN_VERSION, sizeof(mf_ccd_component),
                        sizeof(mf_ccd_atom), sizeof(mf_ccd_bond));
  }
  const int64_t lim = (int64_t)n;
  if (h.n_components < 0 || h.n_atoms < 0 || h.n_bonds < 0 || h.strings_len < 0 ||
      h.n_components > lim || h.n_atoms > lim || h.n_bonds > lim || h.strings_len > lim ||
      sizeof h + (size_t)h.n_components * sizeof(mf_ccd_component) +
              (size_t)h.n_atoms * sizeof(mf_ccd_atom) + (size_t)h.n_bonds * sizeof(mf_ccd_bond) +
              (size_t)h.strings_len != n) {
    mf_free(raw);
    return mf_error_set(MF_ERR_FORMAT, "%s: CCD binary file of %zu bytes does not match its "
                        "header (truncated or corrupt)", path, n);
  }
  size_t sizes[4] = {(size_t)h.n_components * sizeof(mf_ccd_component),
                     (size_t)h.n_atoms * sizeof(mf_ccd_atom),
                     (size_t)h.n_bonds * sizeof(mf_ccd_bond), (size_t)h.strings_len};
  uint64_t sum = FNV_SEED;
  size_t off = sizeof h;
  for (int k = 0; k < 4; k++) {
    if (sizes[k]) sum = fnv1a(raw + off, sizes[k], sum);
    off += sizes[k];
  }
  if (sum != h.checksum) {
    mf_free(raw);
    return mf_error_set(MF_ERR_FORMAT, "%s: CCD binary checksum mismatch (corrupt file)", path);
  }
  void **dst[4] = {(void **)&ccd->components, (void **)&ccd->atoms, (void **)&ccd->bonds,
                   (void **)&ccd->strings};
  static const char *const what[4] = {"ccd components", "ccd atoms", "ccd bonds", "ccd strings"};
  off = sizeof h;
  for (int k = 0; k < 4; k++) {
    *dst[k] = mf_malloc(sizes[k], what[k]);
    if (!*dst[k]) {
      mf_free(raw);
      mf_ccd_free(ccd);
      return MF_ERR_NOMEM;
    }
    if (sizes[k]) memcpy(*dst[k], raw + off, sizes[k]);
    off += sizes[k];
  }
  mf_free(raw);
  ccd->n_components = h.n_components;
  ccd->n_atoms = h.n_atoms;
  ccd->n_bonds = h.n_bonds;
  ccd->strings_len = h.strings_len;
  st = validate(ccd, path);
  if (st == MF_OK) st = build_table(ccd, path);
  if (st != MF_OK) mf_ccd_free(ccd);
  return st;
}
