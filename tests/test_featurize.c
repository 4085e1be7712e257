/* test_featurize.c — the tokeniser and featuriser (featurize.h) on the real entries of
 * ../shared/data (skipped with a message when absent) and on small synthetic mmCIF texts.
 * Hand-checked cases: crambin 1crn (sequence, per-residue CCD atom counts under the OXT
 * policy, CA centres, coordinates equal to the file's), the DNA duplex 1bna, the free ligand
 * REA of 1cbs (atom tokens, CCD bonds), the covalent HC4–Cys69 link of 4i39, MSE of 1a8o
 * (modified residue: parent restype, backbone links excluded), N-glycans of 1ncb (leaving
 * O1 dropped), the homodimer 4i6p (asym/entity/sym), the CRO chromophore of 1ema (MSA column
 * placement), MSA contents against the a3m files, MSA and CCD errors; synthetic mmCIF texts
 * for the sequence policies (unobserved residues, hetero positions, fallback to observed
 * residues); determinism and every allocation-failure point (no leak, set freed). Then a
 * sweep over every entry checking the invariants of the feature contract, with the exact
 * set of entries expected to fail (7gsa: A1AA6 is not in the CCD subset). Not tested here: record encoding (test_features), cropping. */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/a3m.h"
#include "data/cif.h"
#include "data/featurize.h"
#include "harness.h"

#define DATA "../shared/data"
#define MMCIF DATA "/mmcif"
#define MSA_DIR DATA "/msa"
#define CCD_PATH DATA "/ccd/components_subset.cif.gz"

static mf_ccd g_ccd;

/* ------------------------------------------------------------------------- helpers */
static const void *F(const mf_feature_set *fs, const char *name) {
  const mf_feature *f = mf_features_get(fs, name);
  return f ? f->data : NULL;
}
static int64_t D(const mf_feature_set *fs, const char *name, int i) {
  const mf_feature *f = mf_features_get(fs, name);
  return f && i < f->ndim ? f->shape[i] : -1;
}

/* atom name of atom a from ref_atom_name_chars, trailing spaces removed */
static void atom_name(const mf_feature_set *fs, int64_t a, char out[5]) {
  const uint8_t *c = F(fs, "ref_atom_name_chars");
  for (int q = 0; q < 4; q++) out[q] = (char)(c[4 * a + q] + 32);
  out[4] = '\0';
  for (int q = 3; q >= 0 && out[q] == ' '; q--) out[q] = '\0';
}

static mf_status featurize(const char *id, const char *msa_dir, int max_rows,
                           mf_feature_set *fs) {
  char path[512];
  snprintf(path, sizeof path, MMCIF "/%s.cif.gz", id);
  mf_featurize_opts o = {&g_ccd, msa_dir, max_rows};
  return mf_featurize_file(path, &o, fs);
}

static mf_structure *read_structure(const char *id) {
  char path[512];
  snprintf(path, sizeof path, MMCIF "/%s.cif.gz", id);
  mf_structure *st = NULL;
  if (mf_structure_read(path, &st) != MF_OK) return NULL;
  return st;
}

/* Atom of token range [t0, t1) named `name`, -1 if none. */
static int64_t find_atom_in_tokens(const mf_feature_set *fs, int64_t t0, int64_t t1,
                                   const char *name) {
  const int32_t *a2t = F(fs, "atom_to_token");
  int64_t Na = D(fs, "atom_to_token", 0);
  char nm[5];
  for (int64_t a = 0; a < Na; a++) {
    if (a2t[a] < t0 || a2t[a] >= t1) continue;
    atom_name(fs, a, nm);
    if (!strcmp(nm, name)) return a;
  }
  return -1;
}

/* Heavy atoms of a CCD component under the policy: leaving atoms only when keep_leaving. */
static int ccd_heavy(const char *comp, int keep_leaving) {
  const mf_ccd_component *c = mf_ccd_find(&g_ccd, comp);
  if (!c) return -1;
  int n = 0;
  for (int64_t j = 0; j < c->n_atoms; j++) {
    const mf_ccd_atom *a = &g_ccd.atoms[c->atom0 + j];
    if (a->flags & MF_CCD_ATOM_HYDROGEN) continue;
    if ((a->flags & MF_CCD_ATOM_LEAVING) && !keep_leaving) continue;
    n++;
  }
  return n;
}

/* ------------------------------------------------------------ the contract's invariants */
typedef struct {
  const char *name;
  mf_dtype dt;
  int ndim;
  const char *shape;
} spec_row;

#define SPEC_ROW(nm, dt, nd, shape, doc) {#nm, dt, nd, shape},
static const spec_row k_spec[] = {MF_FEATURES(SPEC_ROW)};
#undef SPEC_ROW
#define N_SPEC ((int)(sizeof k_spec / sizeof k_spec[0]))

#define BAD(...)                                                                               \
  do {                                                                                         \
    snprintf(why, nwhy, __VA_ARGS__);                                                          \
    return 0;                                                                                  \
  } while (0)

/* 1 when fs satisfies every invariant of the contract; else 0 and the first violation. */
static int invariants(const mf_feature_set *fs, char *why, size_t nwhy) {
  if (fs->n != N_SPEC) BAD("%d features, the contract lists %d", fs->n, N_SPEC);
  const int64_t N = D(fs, "restype", 0), Na = D(fs, "ref_pos", 0), S = D(fs, "msa", 0);
  if (N <= 0 || Na <= 0 || S <= 0) BAD("N=%lld Na=%lld S=%lld", (long long)N, (long long)Na,
                                      (long long)S);
  for (int i = 0; i < N_SPEC; i++) {
    const mf_feature *f = mf_features_get(fs, k_spec[i].name);
    if (!f) BAD("feature %s missing", k_spec[i].name);
    if (f->dtype != k_spec[i].dt || f->ndim != k_spec[i].ndim)
      BAD("%s: dtype %d ndim %d", k_spec[i].name, (int)f->dtype, f->ndim);
    char sh[16];
    snprintf(sh, sizeof sh, "%s", k_spec[i].shape);
    int d = 0;
    for (char *tok = strtok(sh, ","); tok; tok = strtok(NULL, ","), d++) {
      int64_t want = !strcmp(tok, "N") ? N : !strcmp(tok, "Na") ? Na : !strcmp(tok, "S") ? S
                                                                                          : atoll(tok);
      if (d >= f->ndim || f->shape[d] != want)
        BAD("%s: dim %d is %lld, want %s = %lld", k_spec[i].name, d,
            (long long)(d < f->ndim ? f->shape[d] : -1), tok, (long long)want);
    }
  }
  const int32_t *restype = F(fs, "restype"), *resix = F(fs, "residue_index"),
                *tokix = F(fs, "token_index"), *asym = F(fs, "asym_id"), *ent = F(fs, "entity_id"),
                *sym = F(fs, "sym_id"), *centre = F(fs, "token_centre_atom"),
                *rep = F(fs, "token_rep_atom"), *el = F(fs, "ref_element"),
                *uid = F(fs, "ref_space_uid"), *a2t = F(fs, "atom_to_token"),
                *a2ti = F(fs, "atom_to_tokatom_idx"), *rowent = F(fs, "msa_row_entity");
  const uint8_t *isp = F(fs, "is_protein"), *isr = F(fs, "is_rna"), *isd = F(fs, "is_dna"),
                *isl = F(fs, "is_ligand"), *bonds = F(fs, "token_bonds"),
                *resolved = F(fs, "token_resolved"), *rmask = F(fs, "ref_mask"),
                *names = F(fs, "ref_atom_name_chars"), *cmask = F(fs, "coordinate_mask"),
                *msa = F(fs, "msa"), *del = F(fs, "msa_deletion");
  const float *ref_pos = F(fs, "ref_pos"), *charge = F(fs, "ref_charge"),
              *coord = F(fs, "coordinate"), *prof = F(fs, "profile"),
              *dmean = F(fs, "deletion_mean");
  /* atoms: contiguous per token, slots, masks, finite values */
  int32_t *natoms = calloc((size_t)N, sizeof *natoms);
  int ok = 1;
  for (int64_t a = 0; a < Na && ok; a++) {
    int32_t t = a2t[a];
    if (t < 0 || t >= N) { snprintf(why, nwhy, "atom %lld: token %d", (long long)a, t); ok = 0; break; }
    int32_t prev = a ? a2t[a - 1] : -1;
    if (t != prev && t != prev + 1) { snprintf(why, nwhy, "atom %lld: token %d after %d", (long long)a, t, prev); ok = 0; break; }
    if (a2ti[a] != (t == prev ? a2ti[a - 1] + 1 : 0) || a2ti[a] >= 24) { snprintf(why, nwhy, "atom %lld: slot %d", (long long)a, a2ti[a]); ok = 0; break; }
    if (t == prev && uid[a] != uid[a - 1]) { snprintf(why, nwhy, "atom %lld: ref_space_uid differs inside token %d", (long long)a, t); ok = 0; break; }
    if (a && uid[a] < uid[a - 1]) { snprintf(why, nwhy, "atom %lld: ref_space_uid decreases", (long long)a); ok = 0; break; }
    natoms[t]++;
    if (cmask[a] > 1 || rmask[a] > 1) { snprintf(why, nwhy, "atom %lld: mask values", (long long)a); ok = 0; break; }
    for (int q = 0; q < 3; q++) {
      if (!isfinite(ref_pos[3 * a + q]) || !isfinite(coord[3 * a + q]) ||
          (!cmask[a] && coord[3 * a + q] != 0.0f) || (!rmask[a] && ref_pos[3 * a + q] != 0.0f)) {
        snprintf(why, nwhy, "atom %lld: coordinates/mask inconsistent", (long long)a);
        ok = 0;
      }
    }
    if (el[a] < 0 || el[a] > 118 || !isfinite(charge[a]) || fabsf(charge[a]) > 8 ||
        charge[a] != floorf(charge[a])) {
      snprintf(why, nwhy, "atom %lld: element %d charge %g", (long long)a, el[a], charge[a]);
      ok = 0;
    }
    if (names[4 * a] == 0) { snprintf(why, nwhy, "atom %lld: empty name", (long long)a); ok = 0; }
    for (int q = 0; q < 4; q++)
      if (names[4 * a + q] >= 64) { snprintf(why, nwhy, "atom %lld: name char %d", (long long)a, names[4 * a + q]); ok = 0; }
  }
  if (ok && a2t[Na - 1] != N - 1) { snprintf(why, nwhy, "last atom in token %d of %lld", a2t[Na - 1], (long long)N); ok = 0; }
  /* tokens */
  int32_t max_ent = -1;
  for (int64_t t = 0; t < N && ok; t++) {
    if (tokix[t] != t) { snprintf(why, nwhy, "token_index[%lld] = %d", (long long)t, tokix[t]); ok = 0; break; }
    if (restype[t] < 0 || restype[t] >= MF_RESTYPE_GAP) { snprintf(why, nwhy, "restype[%lld] = %d", (long long)t, restype[t]); ok = 0; break; }
    if (isp[t] + isr[t] + isd[t] + isl[t] != 1) { snprintf(why, nwhy, "token %lld: molecule type flags", (long long)t); ok = 0; break; }
    if (isl[t] && (restype[t] != MF_RESTYPE_UNK || natoms[t] != 1)) { snprintf(why, nwhy, "ligand token %lld: restype %d, %d atoms", (long long)t, restype[t], natoms[t]); ok = 0; break; }
    if (!isl[t] && natoms[t] > 1 && (int)mf_restype_moltype(restype[t]) != (isp[t] ? MF_MOL_PROTEIN : isr[t] ? MF_MOL_RNA : MF_MOL_DNA)) { snprintf(why, nwhy, "token %lld: restype %d vs molecule type", (long long)t, restype[t]); ok = 0; break; }
    if (asym[t] < 0 || ent[t] < 0 || sym[t] < 0) { snprintf(why, nwhy, "token %lld: negative id", (long long)t); ok = 0; break; }
    if (t && (asym[t] < asym[t - 1] || asym[t] > asym[t - 1] + 1)) { snprintf(why, nwhy, "token %lld: asym_id %d after %d", (long long)t, asym[t], asym[t - 1]); ok = 0; break; }
    if (t && asym[t] == asym[t - 1] && (ent[t] != ent[t - 1] || sym[t] != sym[t - 1])) { snprintf(why, nwhy, "token %lld: entity/sym changes inside a chain", (long long)t); ok = 0; break; }
    if (t && asym[t] == asym[t - 1] && !isl[t] && !isl[t - 1] && resix[t] < resix[t - 1]) { snprintf(why, nwhy, "token %lld: residue_index %d after %d", (long long)t, resix[t], resix[t - 1]); ok = 0; break; }
    if (ent[t] > max_ent + 1) { snprintf(why, nwhy, "token %lld: entity_id %d skips", (long long)t, ent[t]); ok = 0; break; }
    if (ent[t] > max_ent) max_ent = ent[t];
    int32_t c = centre[t], r = rep[t];
    if (c < -1 || c >= Na || (c >= 0 && a2t[c] != t) || r < -1 || r >= Na || (r >= 0 && a2t[r] != t)) { snprintf(why, nwhy, "token %lld: centre %d rep %d", (long long)t, c, r); ok = 0; break; }
    if (natoms[t] == 1 && (c < 0 || r != c)) { snprintf(why, nwhy, "atom token %lld: centre %d rep %d", (long long)t, c, r); ok = 0; break; }
    if (resolved[t] != (c >= 0 && cmask[c])) { snprintf(why, nwhy, "token %lld: token_resolved", (long long)t); ok = 0; break; }
    if (bonds[t * N + t]) { snprintf(why, nwhy, "token %lld bonded to itself", (long long)t); ok = 0; break; }
  }
  /* sym_id: copies of an entity numbered 0..k-1 in order; tokens of one uid agree */
  for (int64_t t = 1; t < N && ok; t++) {
    if (asym[t] == asym[t - 1]) continue;
    int32_t want = 0;
    for (int64_t u = 0; u < t; u++)
      if (ent[u] == ent[t] && (u == 0 || asym[u] != asym[u - 1])) want++;
    if (sym[t] != want) { snprintf(why, nwhy, "chain %d: sym_id %d, want %d", asym[t], sym[t], want); ok = 0; }
  }
  for (int64_t a = 1; a < Na && ok; a++) {
    if (uid[a] != uid[a - 1] || a2t[a] == a2t[a - 1]) continue;
    int32_t t = a2t[a], u = a2t[a - 1];
    if (resix[t] != resix[u] || asym[t] != asym[u]) { snprintf(why, nwhy, "tokens %d/%d of one residue differ in residue_index/asym", u, t); ok = 0; }
  }
  for (int64_t i = 0; i < N && ok; i++)
    for (int64_t j = 0; j < N; j++) {
      uint8_t b = bonds[i * N + j];
      if (b > 1 || b != bonds[j * N + i]) { snprintf(why, nwhy, "token_bonds not symmetric 0/1 at %lld,%lld", (long long)i, (long long)j); ok = 0; break; }
      if (b && natoms[i] != 1 && natoms[j] != 1) { snprintf(why, nwhy, "bond %lld-%lld between two residue tokens", (long long)i, (long long)j); ok = 0; break; }
    }
  /* MSA */
  if (ok && rowent[0] != -1) { snprintf(why, nwhy, "msa_row_entity[0] = %d", rowent[0]); ok = 0; }
  for (int64_t t = 0; t < N && ok; t++)
    if (msa[t] != restype[t]) { snprintf(why, nwhy, "msa row 0 differs from restype at %lld", (long long)t); ok = 0; }
  for (int64_t s = 1; s < S && ok; s++) {
    if (rowent[s] < 0 || rowent[s] > max_ent || rowent[s] < rowent[s - 1]) { snprintf(why, nwhy, "msa_row_entity[%lld] = %d", (long long)s, rowent[s]); ok = 0; break; }
    for (int64_t t = 0; t < N; t++) {
      uint8_t m = msa[s * N + t];
      if (m >= MF_RESTYPE_COUNT || ((ent[t] != rowent[s] || natoms[t] == 1) && (m != MF_RESTYPE_GAP || del[s * N + t]))) {
        snprintf(why, nwhy, "msa[%lld,%lld] = %d (entity %d, row of %d)", (long long)s, (long long)t, m, ent[t], rowent[s]);
        ok = 0;
        break;
      }
    }
  }
  for (int64_t t = 0; t < N && ok; t++) {
    double sum = 0;
    for (int k = 0; k < 32; k++) {
      if (!(prof[t * 32 + k] >= 0)) { ok = 0; break; }
      sum += prof[t * 32 + k];
    }
    if (!ok || fabs(sum - 1) > 1e-4 || !(dmean[t] >= 0) || !isfinite(dmean[t])) {
      snprintf(why, nwhy, "profile/deletion_mean of token %lld (sum %g)", (long long)t, sum);
      ok = 0;
    }
  }
  free(natoms);
  return ok;
}

static void check_invariants(const mf_feature_set *fs, const char *what) {
  char why[256] = "";
  int ok = invariants(fs, why, sizeof why);
  MF_TEST(ok, "%s: invariants: %s", what, why);
}

/* ------------------------------------------------------------------------ 1crn */
static void test_crambin(void) {
  mf_feature_set fs;
  mf_status s = featurize("1crn", MSA_DIR, 0, &fs);
  MF_TEST(s == MF_OK, "1crn: %s", mf_error_message());
  if (s != MF_OK) return;
  check_invariants(&fs, "1crn");
  mf_structure *st = read_structure("1crn");
  MF_TEST(st != NULL, "1crn structure: %s", mf_error_message());
  if (!st) { mf_features_free(&fs); return; }
  const int64_t N = D(&fs, "restype", 0), Na = D(&fs, "ref_pos", 0);
  MF_TEST(N == 46, "1crn: %lld tokens, want 46", (long long)N);
  const int32_t *restype = F(&fs, "restype"), *resix = F(&fs, "residue_index"),
                *centre = F(&fs, "token_centre_atom"), *rep = F(&fs, "token_rep_atom"),
                *a2t = F(&fs, "atom_to_token"), *asym = F(&fs, "asym_id"),
                *el = F(&fs, "ref_element");
  const uint8_t *isp = F(&fs, "is_protein"), *cmask = F(&fs, "coordinate_mask"),
                *bonds = F(&fs, "token_bonds");
  const float *coord = F(&fs, "coordinate");
  const mf_entity *en = &st->entities[0];
  MF_TEST(en->poly_seq_count == 46, "1crn entity rows %lld", (long long)en->poly_seq_count);
  int bad_seq = 0, bad_count = 0, bad_centre = 0, bad_misc = 0;
  for (int64_t t = 0; t < N && t < en->poly_seq_count; t++) {
    const char *mon = st->poly_mon[en->poly_seq_start + t];
    bad_seq += restype[t] != mf_restype_from_ccd(mon);
    int n = 0;
    for (int64_t a = 0; a < Na; a++) n += a2t[a] == t;
    bad_count += n != ccd_heavy(mon, t == N - 1);
    char c[5], r[5];
    atom_name(&fs, centre[t], c);
    atom_name(&fs, rep[t], r);
    bad_centre += strcmp(c, "CA") || strcmp(r, strcmp(mon, "GLY") ? "CB" : "CA") ||
                  el[centre[t]] != 6;
    bad_misc += resix[t] != t + 1 || asym[t] != 0 || !isp[t];
  }
  MF_TEST(!bad_seq, "1crn: %d restypes differ from _entity_poly_seq", bad_seq);
  MF_TEST(!bad_count, "1crn: %d residues with atom counts != CCD heavy atoms (OXT last only)",
          bad_count);
  MF_TEST(!bad_centre, "1crn: %d tokens whose centre is not CA / rep not CB (GLY: CA)",
          bad_centre);
  MF_TEST(!bad_misc, "1crn: %d tokens with wrong residue_index/asym/is_protein", bad_misc);
  char last[5];
  atom_name(&fs, Na - 1, last);
  MF_TEST(!strcmp(last, "OXT") && a2t[Na - 1] == 45, "1crn: last atom %s of token %d", last,
          a2t[Na - 1]);
  /* every file atom lands on the feature atom of its residue and name, same coordinates */
  int64_t matched = 0, bad_xyz = 0, nmask = 0;
  for (int64_t a = 0; a < Na; a++) nmask += cmask[a];
  for (int64_t fa = 0; fa < st->n_atoms; fa++) {
    int64_t r = mf_structure_atom_residue(st, fa);
    int64_t t = st->seq_id[r] - 1;
    int64_t g = find_atom_in_tokens(&fs, t, t + 1, st->atom_name[fa]);
    if (g < 0) continue;
    matched++;
    for (int q = 0; q < 3; q++) bad_xyz += coord[3 * g + q] != (float)st->xyz[3 * fa + q];
    bad_xyz += !cmask[g];
  }
  MF_TEST(matched == st->n_atoms && nmask == st->n_atoms && bad_xyz == 0,
          "1crn: %lld of %lld file atoms matched, %lld masked in, %lld coordinate mismatches",
          (long long)matched, (long long)st->n_atoms, (long long)nmask, (long long)bad_xyz);
  int64_t nb = 0;
  for (int64_t i = 0; i < N * N; i++) nb += bonds[i];
  MF_TEST(nb == 0, "1crn: %lld token bonds (disulfides between standard residues excluded)",
          (long long)nb);

  /* MSA against the a3m file */
  mf_a3m A;
  s = mf_a3m_read(MSA_DIR "/1crn_1.a3m.gz", MF_MOL_PROTEIN, &A);
  MF_TEST(s == MF_OK, "1crn a3m: %s", mf_error_message());
  if (s == MF_OK) {
    const int64_t S = D(&fs, "msa", 0);
    const uint8_t *msa = F(&fs, "msa"), *del = F(&fs, "msa_deletion");
    const float *prof = F(&fs, "profile"), *dmean = F(&fs, "deletion_mean");
    MF_TEST(S == A.S && A.N == N, "1crn: MSA %lld rows, a3m %lld x %lld", (long long)S,
            (long long)A.S, (long long)A.N);
    int64_t diff = 0;
    double perr = 0;
    for (int64_t r = 0; r < S && r < A.S; r++)
      for (int64_t t = 0; t < N; t++) {
        int32_t d = A.deletions[r * N + t];
        diff += msa[r * N + t] != A.msa[r * N + t] || del[r * N + t] != (d > 255 ? 255 : d);
      }
    int64_t any_del = 0;
    for (int64_t t = 0; t < N; t++) {
      double cnt[32] = {0}, dsum = 0;
      for (int64_t r = 0; r < A.S; r++) {
        cnt[A.msa[r * N + t]] += 1;
        dsum += A.deletions[r * N + t];
      }
      any_del += dsum > 0;
      for (int k = 0; k < 32; k++) perr = fmax(perr, fabs(prof[t * 32 + k] - cnt[k] / A.S));
      perr = fmax(perr, fabs(dmean[t] - dsum / A.S));
    }
    MF_TEST(diff == 0, "1crn: %lld MSA cells differ from the a3m", (long long)diff);
    MF_TEST(perr < 1e-5, "1crn: profile/deletion_mean differ from column statistics by %g", perr);
    MF_TEST(any_del > 0, "1crn: the a3m has deletions (the test needs some)");
    /* capped */
    mf_feature_set fc;
    s = featurize("1crn", MSA_DIR, 16, &fc);
    MF_TEST(s == MF_OK && D(&fc, "msa", 0) == 16, "1crn capped at 16: S = %lld",
            (long long)D(&fc, "msa", 0));
    if (s == MF_OK) {
      MF_TEST(!memcmp(F(&fc, "msa"), msa, (size_t)(16 * N)) &&
                  !memcmp(F(&fc, "msa_deletion"), del, (size_t)(16 * N)) &&
                  !memcmp(F(&fc, "profile"), prof, (size_t)(N * 32 * 4)),
              "1crn capped: first 16 rows and the full-MSA profile unchanged");
      mf_features_free(&fc);
    }
    /* no MSA directory: query only, one-hot profile */
    s = featurize("1crn", NULL, 0, &fc);
    MF_TEST(s == MF_OK && D(&fc, "msa", 0) == 1, "1crn without MSAs: S = %lld",
            (long long)D(&fc, "msa", 0));
    if (s == MF_OK) {
      const float *p1 = F(&fc, "profile");
      int bad = 0;
      for (int64_t t = 0; t < N; t++) bad += p1[t * 32 + restype[t]] != 1.0f;
      MF_TEST(!bad, "1crn without MSAs: profile one-hot at restype");
      mf_features_free(&fc);
    }
    mf_a3m_free(&A);
  }
  mf_structure_free(st);
  mf_features_free(&fs);
}

/* ------------------------------------------------------------------------ 1bna */
static void test_dna(void) {
  mf_feature_set fs;
  mf_status s = featurize("1bna", MSA_DIR, 0, &fs);
  MF_TEST(s == MF_OK, "1bna: %s", mf_error_message());
  if (s != MF_OK) return;
  check_invariants(&fs, "1bna");
  const int64_t N = D(&fs, "restype", 0);
  MF_TEST(N == 24 && D(&fs, "msa", 0) == 1, "1bna: %lld tokens (24 nucleotides), S %lld",
          (long long)N, (long long)D(&fs, "msa", 0));
  const int32_t *restype = F(&fs, "restype"), *centre = F(&fs, "token_centre_atom"),
                *rep = F(&fs, "token_rep_atom"), *asym = F(&fs, "asym_id"),
                *ent = F(&fs, "entity_id"), *sym = F(&fs, "sym_id"), *a2t = F(&fs, "atom_to_token");
  const uint8_t *isd = F(&fs, "is_dna");
  static const char seq[] = "CGCGAATTCGCG";
  int bad = 0, bad_ids = 0;
  for (int64_t t = 0; t < N; t++) {
    int want = mf_restype_from_letter(seq[t % 12], MF_MOL_DNA);
    char c[5], r[5];
    atom_name(&fs, centre[t], c);
    atom_name(&fs, rep[t], r);
    int purine = restype[t] == MF_RESTYPE_DA || restype[t] == MF_RESTYPE_DG;
    bad += restype[t] != want || restype[t] < 26 || restype[t] > 29 || !isd[t] ||
           strcmp(c, "C1'") || strcmp(r, purine ? "C4" : "C2");
    bad_ids += asym[t] != t / 12 || ent[t] != 0 || sym[t] != t / 12;
  }
  MF_TEST(!bad, "1bna: %d tokens with wrong class, type, C1' centre or C4/C2 rep", bad);
  MF_TEST(!bad_ids, "1bna: asym 0/1, one entity, sym 0/1 (%d wrong)", bad_ids);
  MF_TEST(find_atom_in_tokens(&fs, 0, N, "OP3") < 0, "1bna: no OP3 atoms (leaving, dropped)");
  int n0 = 0;
  for (int64_t a = 0; a < D(&fs, "ref_pos", 0); a++) n0 += a2t[a] == 0;
  MF_TEST(n0 == ccd_heavy("DC", 0), "1bna: first DC has %d atoms, CCD heavy non-leaving %d", n0,
          ccd_heavy("DC", 0));
  mf_features_free(&fs);
}

/* Tokens of the atom-token residue named comp in chain order: [*t0, *t1). */
static int ligand_tokens(const mf_feature_set *fs, const mf_structure *st, const char *comp,
                         int64_t *t0, int64_t *t1) {
  /* the ligand's first atom by name in the file: find its coordinates among feature atoms */
  const int64_t Na = D(fs, "ref_pos", 0);
  const int32_t *a2t = F(fs, "atom_to_token");
  const uint8_t *cmask = F(fs, "coordinate_mask");
  const float *coord = F(fs, "coordinate");
  for (int64_t r = 0; r < st->n_residues; r++) {
    if (strcmp(st->res_name[r], comp)) continue;
    int64_t fa = st->res_atom_start[r];
    for (int64_t a = 0; a < Na; a++) {
      if (!cmask[a] || coord[3 * a] != (float)st->xyz[3 * fa] ||
          coord[3 * a + 1] != (float)st->xyz[3 * fa + 1])
        continue;
      const int32_t *uid = F(fs, "ref_space_uid");
      int64_t b = a, e = a;
      while (b > 0 && uid[b - 1] == uid[a]) b--;
      while (e + 1 < Na && uid[e + 1] == uid[a]) e++;
      *t0 = a2t[b];
      *t1 = a2t[e] + 1;
      return 1;
    }
  }
  return 0;
}

/* ------------------------------------------------------------- 1cbs: a free ligand */
static void test_ligand(void) {
  mf_feature_set fs;
  mf_status s = featurize("1cbs", MSA_DIR, 0, &fs);
  MF_TEST(s == MF_OK, "1cbs: %s", mf_error_message());
  if (s != MF_OK) return;
  check_invariants(&fs, "1cbs");
  mf_structure *st = read_structure("1cbs");
  int64_t t0 = 0, t1 = 0;
  int found = st && ligand_tokens(&fs, st, "REA", &t0, &t1);
  MF_TEST(found, "1cbs: REA found");
  if (found) {
    const int64_t N = D(&fs, "restype", 0), n = t1 - t0;
    const int32_t *restype = F(&fs, "restype"), *resix = F(&fs, "residue_index"),
                  *asym = F(&fs, "asym_id"), *centre = F(&fs, "token_centre_atom"),
                  *el = F(&fs, "ref_element");
    const uint8_t *isl = F(&fs, "is_ligand"), *bonds = F(&fs, "token_bonds");
    MF_TEST(n == ccd_heavy("REA", 0) && n == 22, "1cbs: REA has %lld tokens, CCD heavy %d",
            (long long)n, ccd_heavy("REA", 0));
    int bad = 0, nC = 0, nO = 0;
    for (int64_t t = t0; t < t1; t++) {
      bad += restype[t] != MF_RESTYPE_UNK || !isl[t] || resix[t] != resix[t0] ||
             asym[t] != asym[t0] || centre[t] != centre[t0] + (t - t0);
      nC += el[centre[t]] == 6;
      nO += el[centre[t]] == 8;
    }
    MF_TEST(!bad && nC == 20 && nO == 2, "1cbs: REA tokens: %d bad, %d C %d O", bad, nC, nO);
    /* bonds among REA tokens = CCD bonds between heavy atoms; none elsewhere */
    const mf_ccd_component *c = mf_ccd_find(&g_ccd, "REA");
    int64_t want = 0, got = 0, outside = 0;
    for (int64_t b = c->bond0; b < c->bond0 + c->n_bonds; b++) {
      const mf_ccd_atom *x = &g_ccd.atoms[c->atom0 + g_ccd.bonds[b].a];
      const mf_ccd_atom *y = &g_ccd.atoms[c->atom0 + g_ccd.bonds[b].b];
      if ((x->flags | y->flags) & MF_CCD_ATOM_HYDROGEN) continue;
      want++;
      int64_t ax = find_atom_in_tokens(&fs, t0, t1, x->name), ay = find_atom_in_tokens(&fs, t0, t1, y->name);
      const int32_t *a2t = F(&fs, "atom_to_token");
      if (ax >= 0 && ay >= 0) got += bonds[a2t[ax] * N + a2t[ay]];
    }
    for (int64_t i = 0; i < N; i++)
      for (int64_t j = 0; j < N; j++)
        if (bonds[i * N + j] && (i < t0 || i >= t1 || j < t0 || j >= t1)) outside++;
    int64_t total = 0;
    for (int64_t i = 0; i < N * N; i++) total += bonds[i];
    MF_TEST(want == 22 && got == want && total == 2 * want && !outside,
            "1cbs: REA bonds %lld of %lld CCD heavy bonds, %lld entries, %lld outside",
            (long long)got, (long long)want, (long long)total, (long long)outside);
  }
  mf_structure_free(st);
  mf_features_free(&fs);
}

/* ----------------------------------------------- 4i39: HC4 thioester to Cys69 SG */
static void test_covalent(void) {
  mf_feature_set fs;
  mf_status s = featurize("4i39", MSA_DIR, 0, &fs);
  MF_TEST(s == MF_OK, "4i39: %s", mf_error_message());
  if (s != MF_OK) return;
  check_invariants(&fs, "4i39");
  mf_structure *st = read_structure("4i39");
  int64_t t0 = 0, t1 = 0;
  int found = st && ligand_tokens(&fs, st, "HC4", &t0, &t1);
  MF_TEST(found, "4i39: HC4 found");
  if (found) {
    const int64_t N = D(&fs, "restype", 0);
    const int32_t *resix = F(&fs, "residue_index"), *asym = F(&fs, "asym_id");
    const uint8_t *bonds = F(&fs, "token_bonds");
    int64_t cys = -1;
    for (int64_t t = 0; t < N; t++)
      if (asym[t] == 0 && resix[t] == 69) cys = t;
    const int32_t *restype = F(&fs, "restype");
    MF_TEST(cys >= 0 && restype[cys] == MF_RESTYPE_CYS, "4i39: Cys69 token");
    int64_t c1 = find_atom_in_tokens(&fs, t0, t1, "C1");
    const int32_t *a2t = F(&fs, "atom_to_token");
    MF_TEST(cys >= 0 && c1 >= 0 && bonds[cys * N + a2t[c1]] && bonds[a2t[c1] * N + cys],
            "4i39: token bond Cys69 – HC4 C1");
    int64_t cys_bonds = 0;
    for (int64_t j = 0; cys >= 0 && j < N; j++) cys_bonds += bonds[cys * N + j];
    MF_TEST(cys_bonds == 1, "4i39: Cys69 has %lld token bonds, want 1", (long long)cys_bonds);
    MF_TEST(t1 - t0 == ccd_heavy("HC4", 0), "4i39: HC4 %lld tokens, CCD heavy non-leaving %d",
            (long long)(t1 - t0), ccd_heavy("HC4", 0));
  }
  mf_structure_free(st);
  mf_features_free(&fs);
}

/* --------------------------------------- 1a8o: MSE, an atomised modified residue */
static void test_modified(void) {
  mf_feature_set fs;
  mf_status s = featurize("1a8o", MSA_DIR, 0, &fs);
  MF_TEST(s == MF_OK, "1a8o: %s", mf_error_message());
  if (s != MF_OK) return;
  check_invariants(&fs, "1a8o");
  const int64_t N = D(&fs, "restype", 0);
  const int32_t *restype = F(&fs, "restype"), *resix = F(&fs, "residue_index"),
                *a2t = F(&fs, "atom_to_token");
  const uint8_t *isp = F(&fs, "is_protein"), *isl = F(&fs, "is_ligand"),
                *bonds = F(&fs, "token_bonds");
  /* residue 1 is MSE (covale1 MSE 1 C – ASP 2 N in _struct_conn) */
  int64_t t0 = 0, t1 = 0;
  while (t1 < N && resix[t1] == 1) t1++;
  MF_TEST(t1 - t0 == ccd_heavy("MSE", 0), "1a8o: MSE 1 has %lld tokens, CCD %d",
          (long long)(t1 - t0), ccd_heavy("MSE", 0));
  int bad = 0;
  for (int64_t t = t0; t < t1; t++) bad += restype[t] != MF_RESTYPE_MET || !isp[t] || isl[t];
  MF_TEST(!bad, "1a8o: MSE tokens are MET, protein, not ligand (%d bad)", bad);
  int64_t se = find_atom_in_tokens(&fs, t0, t1, "SE"), cg = find_atom_in_tokens(&fs, t0, t1, "CG"),
          ce = find_atom_in_tokens(&fs, t0, t1, "CE"), c = find_atom_in_tokens(&fs, t0, t1, "C");
  MF_TEST(se >= 0 && cg >= 0 && ce >= 0 && c >= 0, "1a8o: MSE atoms");
  if (se >= 0 && cg >= 0 && ce >= 0 && c >= 0) {
    MF_TEST(bonds[a2t[se] * N + a2t[cg]] && bonds[a2t[se] * N + a2t[ce]] &&
                !bonds[a2t[cg] * N + a2t[ce]],
            "1a8o: MSE intra-residue CCD bonds SE–CG, SE–CE, no CG–CE");
    MF_TEST(!bonds[a2t[c] * N + t1], "1a8o: backbone MSE1 C – ASP2 N not a token bond");
  }
  mf_features_free(&fs);
}

/* --------------------------------------------- 1ncb: N-glycans, leaving O1 dropped */
static void test_glycan(void) {
  mf_feature_set fs;
  mf_status s = featurize("1ncb", MSA_DIR, 0, &fs);
  MF_TEST(s == MF_OK, "1ncb: %s", mf_error_message());
  if (s != MF_OK) return;
  check_invariants(&fs, "1ncb");
  mf_structure *st = read_structure("1ncb");
  int64_t t0 = 0, t1 = 0;
  int found = st && ligand_tokens(&fs, st, "NAG", &t0, &t1);
  MF_TEST(found, "1ncb: NAG found");
  if (found) {
    const int64_t N = D(&fs, "restype", 0);
    MF_TEST(t1 - t0 == ccd_heavy("NAG", 0) && find_atom_in_tokens(&fs, t0, t1, "O1") < 0,
            "1ncb: first NAG has %lld atoms = CCD heavy without leaving O1 (%d)",
            (long long)(t1 - t0), ccd_heavy("NAG", 0));
    /* its C1 is bonded to an Asn token */
    const uint8_t *bonds = F(&fs, "token_bonds");
    const int32_t *a2t = F(&fs, "atom_to_token"), *restype = F(&fs, "restype");
    int64_t c1 = find_atom_in_tokens(&fs, t0, t1, "C1"), asn = 0;
    for (int64_t j = 0; c1 >= 0 && j < N; j++)
      asn += bonds[a2t[c1] * N + j] && restype[j] == MF_RESTYPE_ASN;
    MF_TEST(asn == 1, "1ncb: NAG C1 bonded to %lld Asn tokens, want 1", (long long)asn);
  }
  mf_structure_free(st);
  mf_features_free(&fs);
}

/* ------------------------------------------------------- 4i6p: homodimer ids, MSA */
static void test_homomer(void) {
  mf_feature_set fs;
  mf_status s = featurize("4i6p", MSA_DIR, 0, &fs);
  MF_TEST(s == MF_OK, "4i6p: %s", mf_error_message());
  if (s != MF_OK) return;
  check_invariants(&fs, "4i6p");
  const int64_t N = D(&fs, "restype", 0), S = D(&fs, "msa", 0);
  const int32_t *restype = F(&fs, "restype"), *asym = F(&fs, "asym_id"),
                *ent = F(&fs, "entity_id"), *sym = F(&fs, "sym_id"), *resix = F(&fs, "residue_index");
  const uint8_t *isp = F(&fs, "is_protein"), *msa = F(&fs, "msa");
  int64_t n[2] = {0, 0}, start1 = -1;
  for (int64_t t = 0; t < N; t++)
    if (isp[t] && asym[t] < 2) {
      n[asym[t]]++;
      if (asym[t] == 1 && start1 < 0) start1 = t;
    }
  MF_TEST(n[0] == n[1] && n[0] > 0 && start1 == n[0], "4i6p: chains of %lld and %lld tokens",
          (long long)n[0], (long long)n[1]);
  int bad = 0;
  for (int64_t k = 0; start1 > 0 && k < n[0]; k++) {
    bad += ent[k] != 0 || ent[start1 + k] != 0 || sym[k] != 0 || sym[start1 + k] != 1 ||
           restype[k] != restype[start1 + k] || resix[k] != resix[start1 + k];
    for (int64_t r = 1; r < S; r++) bad += msa[r * N + k] != msa[r * N + start1 + k];
  }
  MF_TEST(!bad, "4i6p: copies share entity 0, sym 0/1, sequence, residue_index and MSA rows "
          "(%d differences)", bad);
  mf_a3m A;
  if (mf_a3m_read(MSA_DIR "/4i6p_1.a3m.gz", MF_MOL_PROTEIN, &A) == MF_OK) {
    MF_TEST(S == A.S, "4i6p: S %lld = a3m rows %lld (entity rows over both copies)",
            (long long)S, (long long)A.S);
    mf_a3m_free(&A);
  }
  mf_features_free(&fs);
}

/* ---------------------------- 2hiu-assembly1: two protein entities, block diagonal */
static void test_heteromer(void) {
  mf_feature_set fs;
  mf_status s = featurize("2hiu-assembly1", MSA_DIR, 0, &fs);
  MF_TEST(s == MF_OK, "2hiu-assembly1: %s", mf_error_message());
  if (s != MF_OK) return;
  check_invariants(&fs, "2hiu-assembly1");
  mf_a3m A, B;
  if (mf_a3m_read(MSA_DIR "/2hiu-assembly1_1.a3m.gz", MF_MOL_PROTEIN, &A) == MF_OK) {
    if (mf_a3m_read(MSA_DIR "/2hiu-assembly1_2.a3m.gz", MF_MOL_PROTEIN, &B) == MF_OK) {
      const int32_t *rowent = F(&fs, "msa_row_entity");
      int64_t S = D(&fs, "msa", 0), n0 = 0, n1 = 0;
      for (int64_t r = 1; r < S; r++) {
        n0 += rowent[r] == 0;
        n1 += rowent[r] == 1;
      }
      MF_TEST(S == A.S + B.S - 1 && n0 == A.S - 1 && n1 == B.S - 1,
              "2hiu: S %lld = 1 + (%lld - 1) + (%lld - 1)", (long long)S, (long long)A.S,
              (long long)B.S);
      mf_a3m_free(&B);
    }
    mf_a3m_free(&A);
  }
  mf_features_free(&fs);
}

/* ---------------------- 1ema: CRO covers three columns of the a3m (canonical TYG) */
static void test_chromophore(void) {
  mf_feature_set fs;
  mf_status s = featurize("1ema", MSA_DIR, 0, &fs);
  MF_TEST(s == MF_OK, "1ema: %s", mf_error_message());
  if (s != MF_OK) return;
  check_invariants(&fs, "1ema");
  mf_a3m A;
  if (mf_a3m_read(MSA_DIR "/1ema_1.a3m.gz", MF_MOL_PROTEIN, &A) == MF_OK) {
    const int64_t N = D(&fs, "restype", 0), S = D(&fs, "msa", 0);
    const int32_t *resix = F(&fs, "residue_index"), *asym = F(&fs, "asym_id");
    const uint8_t *msa = F(&fs, "msa");
    MF_TEST(A.N == 238 && S == A.S, "1ema: a3m %lld columns, S %lld", (long long)A.N,
            (long long)S);
    /* CRO: the atomised residue of chain A with more than 12 atoms (MSE has 8); residues
     * before it sit on column k-1, after it on column k+1 */
    const int32_t *a2t = F(&fs, "atom_to_token");
    int32_t cro = -1;
    for (int64_t a = 0; a + 12 < D(&fs, "ref_pos", 0) && cro < 0; a++)
      if (asym[a2t[a]] == 0 && a2t[a + 12] == a2t[a] + 12 && resix[a2t[a]] == resix[a2t[a + 12]])
        cro = resix[a2t[a]];
    MF_TEST(cro > 1, "1ema: CRO found at residue %d", cro);
    int64_t bad = 0, checked = 0;
    for (int64_t t = 0; t < N && cro > 1; t++) {
      if (asym[t] != 0 || (t > 0 && resix[t - 1] == resix[t]) ||
          (t + 1 < N && resix[t + 1] == resix[t]))
        continue; /* one-token residues of chain A only */
      int64_t col = resix[t] < cro ? resix[t] - 1 : resix[t] + 1;
      for (int64_t r = 1; r < S; r++) bad += msa[r * N + t] != A.msa[r * A.N + col];
      checked++;
    }
    MF_TEST(bad == 0 && checked > 200, "1ema: %lld cells differ over %lld residues",
            (long long)bad, (long long)checked);
    mf_a3m_free(&A);
  }
  mf_features_free(&fs);
}

/* --------------------------------------------------------------------- errors */
static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return 0;
  fputs(text, f);
  fclose(f);
  return 1;
}

static void test_errors(void) {
  mf_feature_set fs;
  mf_status s = featurize("7gsa", MSA_DIR, 0, &fs);
  const char *m = mf_error_message();
  MF_TEST(s == MF_ERR_FORMAT && strstr(m, "7gsa") && strstr(m, "chain C") &&
              strstr(m, "residue") && strstr(m, "A1AA6") && fs.n == 0 && fs.f == NULL,
          "7gsa: unknown component error: %s", m);

  char dir[] = "/tmp/mf_featurize_XXXXXX";
  if (!mkdtemp(dir)) {
    MF_TEST(0, "mkdtemp");
    return;
  }
  char path[256];
  snprintf(path, sizeof path, "%s/1crn_1.a3m", dir);
  /* crambin is TTCCPSIVARSNFNVCRLPGTPEAICATYTGCIIIPGATCPGDYAN (46) */
  write_file(path, ">q\nTTCCPSIVARSNFNVCRLPGTPEAICATYTGCIIIPGATCPGDYA\n");
  s = featurize("1crn", dir, 0, &fs);
  m = mf_error_message();
  MF_TEST(s == MF_ERR_FORMAT && strstr(m, "1crn") && strstr(m, "45") && strstr(m, "46") &&
              strstr(m, "1crn_1.a3m") && strstr(m, "entity 1"),
          "short query: %s", m);
  write_file(path, ">q\nTTCCPSIVARSNFNVCRLPGTPEAICATYTGCIIIPGATCPGDYAW\n");
  s = featurize("1crn", dir, 0, &fs);
  m = mf_error_message();
  MF_TEST(s == MF_ERR_FORMAT && strstr(m, "position 46") && strstr(m, "ASN"),
          "wrong letter: %s", m);
  write_file(path, ">q\nTTCCPSIVARSNFNVCRLPGTPEAICATYTGCIIIPGATCPGDYAN\n>h\nTTCC!\n");
  s = featurize("1crn", dir, 0, &fs);
  MF_TEST(s == MF_ERR_FORMAT && strstr(mf_error_message(), "1crn"), "bad a3m: %s",
          mf_error_message());
  /* X in the query matches anything; a .a3m (plain) file is found */
  write_file(path, ">q\nTTCCPSIVARSNFNVCRLPGTPEAICATYTGCIIIPGATCPGDYAX\n>h\nTTCCPSIVARSNFNVCRLPGTPEAICATYTGCIIIPGATCP-----\n");
  s = featurize("1crn", dir, 0, &fs);
  MF_TEST(s == MF_OK && D(&fs, "msa", 0) == 2, "X query: %s", mf_error_message());
  if (s == MF_OK) {
    const uint8_t *msa = F(&fs, "msa");
    MF_TEST(msa[46 + 40] == MF_RESTYPE_PRO && msa[46 + 45] == MF_RESTYPE_GAP &&
                msa[45] == MF_RESTYPE_ASN,
            "X query: rows placed");
    mf_features_free(&fs);
  }
  unlink(path);
  rmdir(dir);
}

/* ------------------------------------------------- synthetic structures (policies) */
static const char k_synth_head[] =
    "data_syn\n"
    "loop_\n_entity.id\n_entity.type\n1 polymer\n2 non-polymer\n"
    "loop_\n_entity_poly.entity_id\n_entity_poly.type\n1 'polypeptide(L)'\n"
    "loop_\n_entity_poly_seq.entity_id\n_entity_poly_seq.num\n_entity_poly_seq.mon_id\n"
    "_entity_poly_seq.hetero\n1 1 ALA n\n1 2 GLY n\n1 2 SER y\n1 3 SER n\n"
    "loop_\n_atom_site.group_PDB\n_atom_site.type_symbol\n_atom_site.label_atom_id\n"
    "_atom_site.label_comp_id\n_atom_site.label_asym_id\n_atom_site.label_entity_id\n"
    "_atom_site.label_seq_id\n_atom_site.auth_seq_id\n_atom_site.Cartn_x\n"
    "_atom_site.Cartn_y\n_atom_site.Cartn_z\n";

static mf_status synth(const char *atoms, mf_feature_set *fs) {
  size_t n = strlen(k_synth_head) + strlen(atoms) + 1;
  char *text = malloc(n);
  snprintf(text, n, "%s%s", k_synth_head, atoms);
  mf_cif_doc *doc = NULL;
  mf_status s = mf_cif_parse(text, strlen(text), "syn.cif", &doc);
  mf_structure *st = NULL;
  if (s == MF_OK) s = mf_structure_from_cif(doc, 0, &st);
  mf_featurize_opts o = {&g_ccd, NULL, 0};
  if (s == MF_OK) s = mf_featurize_structure(st, "syn", &o, fs);
  else memset(fs, 0, sizeof *fs);
  mf_structure_free(st);
  mf_cif_free(doc);
  free(text);
  return s;
}

static void test_synthetic(void) {
  mf_feature_set fs;
  /* only GLY 2 observed (with an OXT that is not C-terminal); ZN ligand */
  mf_status s = synth("ATOM N N GLY A 1 2 2 1.0 0 0\nATOM C CA GLY A 1 2 2 2.0 0 0\n"
                      "ATOM O OXT GLY A 1 2 2 3.0 0 0\nHETATM ZN ZN ZN B 2 . 9 5.0 5.0 5.0\n",
                      &fs);
  MF_TEST(s == MF_OK, "synthetic: %s", mf_error_message());
  if (s == MF_OK) {
    check_invariants(&fs, "synthetic");
    const int64_t N = D(&fs, "restype", 0), Na = D(&fs, "ref_pos", 0);
    const int32_t *restype = F(&fs, "restype"), *resix = F(&fs, "residue_index"),
                  *ent = F(&fs, "entity_id"), *asym = F(&fs, "asym_id");
    const uint8_t *res = F(&fs, "token_resolved"), *cmask = F(&fs, "coordinate_mask"),
                  *isl = F(&fs, "is_ligand");
    int want_na = ccd_heavy("ALA", 0) + ccd_heavy("GLY", 0) + ccd_heavy("SER", 1) + 1;
    MF_TEST(N == 4 && Na == want_na, "synthetic: %lld tokens, %lld atoms (want 4, %d)",
            (long long)N, (long long)Na, want_na);
    if (N == 4) {
      MF_TEST(restype[0] == MF_RESTYPE_ALA && restype[1] == MF_RESTYPE_GLY &&
                  restype[2] == MF_RESTYPE_SER && restype[3] == MF_RESTYPE_UNK && isl[3],
              "synthetic: full sequence (hetero position 2: first monomer GLY), ZN ligand");
      MF_TEST(resix[0] == 1 && resix[1] == 2 && resix[2] == 3 && resix[3] == 1,
              "synthetic: residue_index");
      MF_TEST(!res[0] && res[1] && !res[2] && res[3], "synthetic: token_resolved 0 1 0 1");
      MF_TEST(ent[3] == 1 && asym[3] == 1, "synthetic: ligand chain ids");
      int64_t nm = 0;
      for (int64_t a = 0; a < Na; a++) nm += cmask[a];
      MF_TEST(nm == 3, "synthetic: 3 resolved atoms (N, CA of GLY, ZN; OXT dropped), got %lld",
              (long long)nm);
      MF_TEST(find_atom_in_tokens(&fs, 2, 3, "OXT") >= 0 &&
                  find_atom_in_tokens(&fs, 1, 2, "OXT") < 0,
              "synthetic: OXT only on the C-terminal SER");
    }
    mf_features_free(&fs);
  }
  /* observed SER at position 2 (the hetero alternative) is used */
  s = synth("ATOM C CA SER A 1 2 2 1.0 0 0\nATOM O OG SER A 1 2 2 1.0 1 0\n", &fs);
  if (s == MF_OK) {
    const int32_t *restype = F(&fs, "restype");
    MF_TEST(D(&fs, "restype", 0) == 3 && restype[1] == MF_RESTYPE_SER,
            "synthetic: observed hetero monomer SER at position 2");
    mf_features_free(&fs);
  } else {
    MF_TEST(0, "synthetic hetero: %s", mf_error_message());
  }
  /* position 2 unobserved: the first monomer of the hetero position (GLY) */
  s = synth("ATOM C CA ALA A 1 1 1 1.0 0 0\n", &fs);
  if (s == MF_OK) {
    const int32_t *restype = F(&fs, "restype");
    MF_TEST(D(&fs, "restype", 0) == 3 && restype[1] == MF_RESTYPE_GLY,
            "synthetic: unobserved hetero position takes its first monomer");
    mf_features_free(&fs);
  } else {
    MF_TEST(0, "synthetic unobserved hetero: %s", mf_error_message());
  }
  /* a residue number outside the sequence: observed residues only */
  s = synth("ATOM C CA ALA A 1 1 1 1.0 0 0\nATOM C CA GLY A 1 7 7 2.0 0 0\n", &fs);
  if (s == MF_OK) {
    const int32_t *resix = F(&fs, "residue_index");
    MF_TEST(D(&fs, "restype", 0) == 2 && resix[0] == 1 && resix[1] == 7,
            "synthetic: unmatched label_seq_id → observed residues only");
    check_invariants(&fs, "synthetic fallback");
    mf_features_free(&fs);
  } else {
    MF_TEST(0, "synthetic fallback: %s", mf_error_message());
  }
  /* unknown component in the sequence only (unobserved) */
  s = synth("HETATM C C1 XYZQ B 2 . 1 1.0 0 0\n", &fs);
  MF_TEST(s == MF_ERR_FORMAT && strstr(mf_error_message(), "XYZQ") &&
              strstr(mf_error_message(), "chain B"),
          "synthetic: unknown ligand: %s", mf_error_message());
}

/* ------------------------------------ determinism, allocation failures, bad arguments */
static int same_features(const mf_feature_set *a, const mf_feature_set *b) {
  if (a->n != b->n) return 0;
  for (int i = 0; i < a->n; i++) {
    const mf_feature *x = &a->f[i], *y = mf_features_get(b, x->name);
    if (!y || x->dtype != y->dtype || x->ndim != y->ndim) return 0;
    size_t bytes = x->dtype == MF_F32 || x->dtype == MF_I32 ? 4 : x->dtype == MF_F64 ? 8
                   : x->dtype == MF_BF16 ? 2 : 1;
    for (int d = 0; d < x->ndim; d++) {
      if (x->shape[d] != y->shape[d]) return 0;
      bytes *= (size_t)x->shape[d];
    }
    if (memcmp(x->data, y->data, bytes)) return 0;
  }
  return 1;
}

static void test_robustness(void) {
  mf_structure *st = read_structure("4i39");
  MF_TEST(st != NULL, "4i39 structure");
  if (!st) return;
  mf_featurize_opts o = {&g_ccd, MSA_DIR, 0};
  mf_feature_set a, b;
  mf_status s1 = mf_featurize_structure(st, "4i39", &o, &a);
  mf_status s2 = mf_featurize_structure(st, "4i39", &o, &b);
  MF_TEST(s1 == MF_OK && s2 == MF_OK && same_features(&a, &b), "4i39: deterministic features");
  if (s2 == MF_OK) mf_features_free(&b);
  /* every allocation failure is an error, leaves the set freed and leaks nothing */
  int64_t before = mf_mem_stats(MF_HOST).current, bad = 0, k = 0;
  for (;; k++) {
    int64_t inj0 = mf_alloc_injected_failures();
    mf_alloc_fail_after(k);
    mf_status s = mf_featurize_structure(st, "4i39", &o, &b);
    int64_t injected = mf_alloc_injected_failures() - inj0;
    mf_alloc_fail_after(-1);
    if (s == MF_OK) {
      bad += s1 != MF_OK || !same_features(&a, &b);
      mf_features_free(&b);
      break;
    }
    bad += s != MF_ERR_NOMEM || b.n != 0 || b.f != NULL || injected != 1;
    bad += mf_mem_stats(MF_HOST).current != before;
    if (k > 100000) break;
  }
  printf("  4i39: %lld allocation failure points\n", (long long)k);
  MF_TEST(bad == 0 && k > 10, "4i39: %lld allocation failure points, %lld misbehaved",
          (long long)k, (long long)bad);
  if (s1 == MF_OK) mf_features_free(&a);
  MF_TEST(mf_featurize_structure(st, "4i39", NULL, &a) == MF_ERR_CONFIG && a.n == 0,
          "no options: MF_ERR_CONFIG");
  mf_featurize_opts no_ccd = {NULL, NULL, 0};
  MF_TEST(mf_featurize_structure(st, "4i39", &no_ccd, &a) == MF_ERR_CONFIG, "no CCD");
  MF_TEST(mf_featurize_file(MMCIF "/nonexistent.cif.gz", &o, &a) == MF_ERR_IO && a.n == 0,
          "missing file: %s", mf_error_message());
  mf_structure_free(st);
}

/* --------------------------------------------------------------------- sweep */
static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void test_sweep(void) {
  DIR *d = opendir(MMCIF);
  if (!d) {
    MF_TEST(0, "opendir %s", MMCIF);
    return;
  }
  char *names[512];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 512) {
    size_t l = strlen(e->d_name);
    if (l > 7 && !strcmp(e->d_name + l - 7, ".cif.gz")) {
      names[n] = strdup(e->d_name);
      names[n][l - 7] = '\0';
      n++;
    }
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  MF_TEST(n == 116, "sweep: %d entries, want 116", n);
  double t0 = mf_time_now();
  int done = 0, failed = 0, bad = 0, failed_7gsa = 0;
  int64_t tokens = 0, atoms = 0;
  for (int i = 0; i < n; i++) {
    int must = !strcmp(names[i], "7gsa");
    mf_feature_set fs;
    mf_status s = featurize(names[i], MSA_DIR, 0, &fs);
    done++;
    if (s != MF_OK) {
      failed++;
      const char *m = mf_error_message();
      int expected = must && s == MF_ERR_FORMAT && strstr(m, "A1AA6");
      failed_7gsa += expected;
      printf("  sweep: %s fails: %s%s\n", names[i], m, expected ? " (expected)" : "");
      MF_TEST(expected, "sweep: %s: unexpected failure: %s", names[i], m);
      continue;
    }
    MF_TEST(!must, "sweep: 7gsa should fail (A1AA6 is not in the CCD subset)");
    char why[256] = "";
    if (!invariants(&fs, why, sizeof why)) {
      bad++;
      MF_TEST(0, "sweep: %s: %s", names[i], why);
    }
    tokens += D(&fs, "restype", 0);
    atoms += D(&fs, "ref_pos", 0);
    mf_features_free(&fs);
  }
  MF_TEST(failed == 1 && failed_7gsa == 1 && bad == 0,
          "sweep: %d failed (want exactly 7gsa), %d violate invariants", failed, bad);
  printf("  sweep: %d of %d entries, %d failed, %lld tokens, %lld atoms, %.2f s\n",
         done, n, failed, (long long)tokens, (long long)atoms,
         mf_time_now() - t0);
  for (int i = 0; i < n; i++) free(names[i]);
}

int main(void) {
  mf_test_begin("test_featurize");
  struct stat sb;
  if (stat(MMCIF, &sb) != 0 || stat(CCD_PATH, &sb) != 0) {
    printf("skip: %s not found (shared data absent)\n", DATA);
    return mf_test_end();
  }
  mf_status s = mf_ccd_read(CCD_PATH, &g_ccd);
  MF_TEST(s == MF_OK, "CCD: %s", mf_error_message());
  if (s != MF_OK) return mf_test_end();
  test_crambin();
  test_dna();
  test_ligand();
  test_covalent();
  test_modified();
  test_glycan();
  test_homomer();
  test_heteromer();
  test_chromophore();
  test_errors();
  test_synthetic();
  test_robustness();
  test_sweep();
  mf_ccd_free(&g_ccd);
  return mf_test_end();
}
