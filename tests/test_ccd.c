/* test_ccd.c — the CCD reader on ../shared/data/ccd/components_subset.cif.gz: all 140
 * components load; per component atom, heavy-atom, bond, leaving-atom, aromatic-bond and
 * double-bond counts, total charge, coordinate source and coordinate sums agree with an
 * independent reading by gemmi (/usr/bin/python3 with python3-gemmi, run from this test;
 * skipped with a message when absent); hand-checked ALA, MSE, ZN, UNL, DA; chunked reading
 * equals whole reading; the binary form round-trips and rejects corrupt files; malformed
 * inputs give errors naming file, component and line; allocation failures do not leak.
 * Not here: mmCIF structures (test_cif.c), the a3m reader (test_a3m.c). */
#define _POSIX_C_SOURCE 200809L /* popen, mkdtemp */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "data/ccd.h"
#include "data/textfile.h"
#include "harness.h"

#define CCD_SUBSET "../shared/data/ccd/components_subset.cif.gz"
#define GEMMI_PYTHON "/usr/bin/python3"

static char g_tmpdir[64];

/* ------------------------------------------------------------------ hand checks */
static void test_hand_components(const mf_ccd *ccd) {
  const mf_ccd_component *ala = mf_ccd_find(ccd, "ALA");
  MF_TEST(ala != NULL, "ALA found");
  if (!ala) return;
  static const char *names[13] = {"N",  "CA", "C",   "O",   "CB",  "OXT", "H",
                                  "H2", "HA", "HB1", "HB2", "HB3", "HXT"};
  static const char *elem[13] = {"N", "C", "C", "O", "C", "O", "H", "H", "H", "H", "H", "H", "H"};
  MF_TEST(ala->n_atoms == 13 && ala->n_heavy == 6 && ala->n_bonds == 12,
          "ALA: 13 atoms (6 heavy), 12 bonds: %lld (%d), %lld", (long long)ala->n_atoms,
          ala->n_heavy, (long long)ala->n_bonds);
  if (ala->n_atoms != 13) return;
  const mf_ccd_atom *a = ccd->atoms + ala->atom0;
  int ok = 1;
  for (int k = 0; k < 13; k++) {
    ok &= !strcmp(a[k].name, names[k]) && !strcmp(a[k].element, elem[k]) && a[k].charge == 0;
    int leaving = !strcmp(names[k], "OXT") || !strcmp(names[k], "H2") || !strcmp(names[k], "HXT");
    ok &= !!(a[k].flags & MF_CCD_ATOM_LEAVING) == leaving;
    ok &= !!(a[k].flags & MF_CCD_ATOM_HYDROGEN) == (k >= 6);
    ok &= a[k].atomic_number == (k >= 6 ? 1 : elem[k][0] == 'N' ? 7 : elem[k][0] == 'O' ? 8 : 6);
    ok &= !(a[k].flags & (MF_CCD_ATOM_AROMATIC | MF_CCD_ATOM_NO_COORDS));
  }
  MF_TEST(ok, "ALA: names N CA C O CB OXT H H2 HA HB1 HB2 HB3 HXT, elements, Z, leaving "
              "OXT/H2/HXT, hydrogens");
  /* ideal coordinates: N -0.966 0.493 1.500; HXT 0.435 0.182 -2.647 */
  MF_TEST(ala->coord_source == MF_CCD_COORDS_IDEAL && fabsf(a[0].pos[0] + 0.966f) < 1e-6f &&
              fabsf(a[0].pos[1] - 0.493f) < 1e-6f && fabsf(a[0].pos[2] - 1.500f) < 1e-6f &&
              fabsf(a[12].pos[0] - 0.435f) < 1e-6f && fabsf(a[12].pos[2] + 2.647f) < 1e-6f,
          "ALA: ideal coordinates of N and HXT");
  const mf_ccd_bond *b = ccd->bonds + ala->bond0;
  int64_t ic = mf_ccd_atom_index(ccd, ala, "C"), io = mf_ccd_atom_index(ccd, ala, "O");
  MF_TEST(b[0].a == 0 && b[0].b == 1 && b[0].order == MF_BOND_SINGLE && b[6].a == ic &&
              b[6].b == io && b[6].order == MF_BOND_DOUBLE && !b[6].aromatic,
          "ALA: bond 1 N-CA single, bond 7 C=O double");
  MF_TEST(mf_ccd_atom_index(ccd, ala, "OXT") == 5 && mf_ccd_atom_index(ccd, ala, "CG") == -1,
          "ALA: atom index by name");
  MF_TEST(!strcmp(mf_ccd_name(ccd, ala), "ALANINE") &&
              !strcmp(mf_ccd_type(ccd, ala), "L-PEPTIDE LINKING") && ala->one_letter == 'A' &&
              ala->parent[0] == 0 && ala->formal_charge == 0,
          "ALA: name, type, one-letter code, no parent: '%s' '%s'", mf_ccd_name(ccd, ala),
          mf_ccd_type(ccd, ala));
  MF_TEST(mf_ccd_restype(ccd, ala, MF_MOL_PROTEIN) == MF_RESTYPE_ALA &&
              mf_ccd_restype(ccd, ala, MF_MOL_LIGAND) == MF_RESTYPE_UNK,
          "ALA restype");

  const mf_ccd_component *mse = mf_ccd_find(ccd, "MSE");
  MF_TEST(mse && !strcmp(mse->parent, "MET") &&
              mf_ccd_restype(ccd, mse, MF_MOL_PROTEIN) == MF_RESTYPE_MET,
          "MSE: parent MET, restype MET");
  if (mse) {
    int64_t se = mf_ccd_atom_index(ccd, mse, "SE");
    MF_TEST(se >= 0 && ccd->atoms[mse->atom0 + se].atomic_number == 34, "MSE: SE is Z=34");
  }
  const mf_ccd_component *zn = mf_ccd_find(ccd, "ZN");
  MF_TEST(zn && zn->n_atoms == 1 && zn->n_bonds == 0 && zn->formal_charge == 2 &&
              ccd->atoms[zn->atom0].charge == 2 && ccd->atoms[zn->atom0].atomic_number == 30 &&
              zn->n_heavy == 1,
          "ZN: one atom (a single-row, non-loop category), charge +2, Z=30, no bonds");
  const mf_ccd_component *unl = mf_ccd_find(ccd, "UNL");
  MF_TEST(unl && unl->n_atoms == 0 && unl->n_bonds == 0 && unl->coord_source == MF_CCD_COORDS_NONE,
          "UNL: no atoms");
  const mf_ccd_component *da = mf_ccd_find(ccd, "DA");
  MF_TEST(da && mf_ccd_restype(ccd, da, MF_MOL_DNA) == MF_RESTYPE_DA &&
              mf_ccd_atom_index(ccd, da, "O5'") >= 0 && mf_ccd_atom_index(ccd, da, "C1'") >= 0,
          "DA: restype, primed atom names (quoted in the file)");
  const mf_ccd_component *n = mf_ccd_find(ccd, "N"), *dn = mf_ccd_find(ccd, "DN");
  MF_TEST(n && dn && mf_ccd_restype(ccd, n, MF_MOL_RNA) == MF_RESTYPE_N &&
              mf_ccd_restype(ccd, dn, MF_MOL_DNA) == MF_RESTYPE_DN,
          "N and DN restypes");
  const mf_ccd_component *dar = mf_ccd_find(ccd, "DAR");
  MF_TEST(dar && dar->coord_source == MF_CCD_COORDS_MODEL, "DAR: ideal coordinates incomplete, "
          "model coordinates used");
  MF_TEST(mf_ccd_find(ccd, "XXXX") == NULL && mf_ccd_find(ccd, "ala") == NULL &&
              mf_ccd_find(ccd, "") == NULL,
          "absent ids are not found");
  int all = 1;
  for (int64_t i = 0; i < ccd->n_components; i++)
    all &= mf_ccd_find(ccd, ccd->components[i].id) == &ccd->components[i];
  MF_TEST(all, "every component is found by its id");
  MF_TEST(mf_element_number("CL") == 17 && mf_element_number("Cl") == 17 &&
              mf_element_number("D") == 1 && mf_element_number("X") == 0 &&
              mf_element_number("OG") == 118 && mf_element_number("") == 0,
          "element numbers");
}

/* ------------------------------------------------------------------ gemmi comparison */
static const char k_gemmi_script[] =
    "import sys, gemmi\n"
    "doc = gemmi.cif.read(sys.argv[1])\n"
    "def isnull(v): return v in ('?', '.')\n"
    "for b in doc:\n"
    "    cid = b.find_value('_chem_comp.id')\n"
    "    t = b.find('_chem_comp_atom.', ['atom_id', 'type_symbol', 'charge',\n"
    "        'pdbx_leaving_atom_flag', '?model_Cartn_x', '?model_Cartn_y', '?model_Cartn_z',\n"
    "        '?pdbx_model_Cartn_x_ideal', '?pdbx_model_Cartn_y_ideal', '?pdbx_model_Cartn_z_ideal'])\n"
    "    rows = list(t)\n"
    "    def xyz(r, k):\n"
    "        vals = [r[k + i] if r.has(k + i) else '?' for i in range(3)]\n"
    "        return None if any(isnull(v) for v in vals) else [gemmi.cif.as_number(v) for v in vals]\n"
    "    ideal = [xyz(r, 7) for r in rows]; model = [xyz(r, 4) for r in rows]\n"
    "    if rows and all(v is not None for v in ideal): src, pos = 1, ideal\n"
    "    elif rows and all(v is not None for v in model): src, pos = 2, model\n"
    "    elif rows: src, pos = 3, [i if i is not None else m for i, m in zip(ideal, model)]\n"
    "    else: src, pos = 0, []\n"
    "    s = sum(sum(p) for p in pos if p is not None)\n"
    "    nocoord = sum(1 for p in pos if p is None)\n"
    "    heavy = sum(1 for r in rows if r[1].upper() not in ('H', 'D'))\n"
    "    leaving = sum(1 for r in rows if r[3].upper() == 'Y')\n"
    "    charge = sum(int(r[2]) for r in rows if not isnull(r[2]))\n"
    "    bt = b.find('_chem_comp_bond.', ['atom_id_1', 'value_order', 'pdbx_aromatic_flag'])\n"
    "    bonds = list(bt)\n"
    "    arom = sum(1 for r in bonds if r[2].upper() == 'Y')\n"
    "    doub = sum(1 for r in bonds if r[1].upper() == 'DOUB')\n"
    "    first = gemmi.cif.as_string(rows[0][0]) if rows else '-'\n"
    "    last = gemmi.cif.as_string(rows[-1][0]) if rows else '-'\n"
    "    print(cid, len(rows), heavy, len(bonds), leaving, arom, doub, charge, src, nocoord,\n"
    "          '%.4f' % s, first, last)\n";

static void test_against_gemmi(const mf_ccd *ccd) {
  if (access(GEMMI_PYTHON, X_OK) != 0) {
    printf("skip: %s not found, no gemmi comparison\n", GEMMI_PYTHON);
    return;
  }
  char script[128], cmd[512];
  snprintf(script, sizeof script, "%s/ccd_expect.py", g_tmpdir);
  mf_test_write_file(script, k_gemmi_script, strlen(k_gemmi_script));
  snprintf(cmd, sizeof cmd, "%s -c 'import gemmi' 2>/dev/null", GEMMI_PYTHON);
  if (system(cmd) != 0) {
    printf("skip: %s has no gemmi module (Debian python3-gemmi), no gemmi comparison\n",
           GEMMI_PYTHON);
    remove(script);
    return;
  }
  snprintf(cmd, sizeof cmd, "%s %s %s", GEMMI_PYTHON, script, CCD_SUBSET);
  FILE *p = popen(cmd, "r");
  MF_TEST(p != NULL, "run %s", cmd);
  if (!p) return;
  char line[512];
  int n = 0, matched = 0;
  while (fgets(line, sizeof line, p)) {
    char id[16], first[16], last[16];
    long na, heavy, nb, leaving, arom, doub, charge, src, nocoord;
    double sum;
    if (sscanf(line, "%15s %ld %ld %ld %ld %ld %ld %ld %ld %ld %lf %15s %15s", id, &na, &heavy, &nb,
               &leaving, &arom, &doub, &charge, &src, &nocoord, &sum, first, last) != 13) {
      MF_TEST(0, "gemmi output line: %s", line);
      continue;
    }
    n++;
    const mf_ccd_component *c = mf_ccd_find(ccd, id);
    if (!MF_TEST(c != NULL, "%s (from gemmi) not loaded", id)) continue;
    const mf_ccd_atom *a = ccd->atoms + c->atom0;
    const mf_ccd_bond *b = ccd->bonds + c->bond0;
    long g_leaving = 0, g_arom = 0, g_doub = 0, g_charge = 0, g_nocoord = 0;
    double g_sum = 0;
    for (int64_t k = 0; k < c->n_atoms; k++) {
      g_leaving += !!(a[k].flags & MF_CCD_ATOM_LEAVING);
      g_charge += a[k].charge;
      g_nocoord += !!(a[k].flags & MF_CCD_ATOM_NO_COORDS);
      g_sum += (double)a[k].pos[0] + a[k].pos[1] + a[k].pos[2];
    }
    for (int64_t k = 0; k < c->n_bonds; k++) {
      g_arom += b[k].aromatic;
      g_doub += b[k].order == MF_BOND_DOUBLE;
    }
    int ok = c->n_atoms == na && c->n_heavy == heavy && c->n_bonds == nb && g_leaving == leaving &&
             g_arom == arom && g_doub == doub && g_charge == charge && c->coord_source == src &&
             g_nocoord == nocoord && fabs(g_sum - sum) < 1e-3 * (1 + (double)na) &&
             (na == 0 || (!strcmp(a[0].name, first) && !strcmp(a[na - 1].name, last)));
    matched += MF_TEST(ok, "%s vs gemmi: atoms %lld/%ld heavy %d/%ld bonds %lld/%ld leaving %ld/%ld "
                           "aromatic bonds %ld/%ld double %ld/%ld charge %ld/%ld source %d/%ld "
                           "no-coords %ld/%ld coordinate sum %.4f/%.4f",
                       id, (long long)c->n_atoms, na, c->n_heavy, heavy, (long long)c->n_bonds, nb,
                       g_leaving, leaving, g_arom, arom, g_doub, doub, g_charge, charge,
                       c->coord_source, src, g_nocoord, nocoord, g_sum, sum);
  }
  int rc = pclose(p);
  remove(script);
  MF_TEST(rc == 0 && n == 140 && matched == n && n == ccd->n_components,
          "gemmi: %d components read (exit %d), %d agree, %lld loaded", n, rc, matched,
          (long long)ccd->n_components);
}

/* ------------------------------------------------------------------ chunks, binary */
/* memcmp that accepts NULL for zero lengths */
static int same_bytes(const void *a, const void *b, size_t n) { return n == 0 || !memcmp(a, b, n); }

static int same_ccd(const mf_ccd *x, const mf_ccd *y) {
  return x->n_components == y->n_components && x->n_atoms == y->n_atoms &&
         x->n_bonds == y->n_bonds && x->strings_len == y->strings_len &&
         same_bytes(x->components, y->components,
                    (size_t)x->n_components * sizeof *x->components) &&
         same_bytes(x->atoms, y->atoms, (size_t)x->n_atoms * sizeof *x->atoms) &&
         same_bytes(x->bonds, y->bonds, (size_t)x->n_bonds * sizeof *x->bonds) &&
         same_bytes(x->strings, y->strings, (size_t)x->strings_len);
}


/* Number of entries of g_tmpdir whose name starts with `prefix`. */
static int count_prefixed(const char *prefix) {
  DIR *d = opendir(g_tmpdir);
  int k = 0;
  for (struct dirent *e; d && (e = readdir(d));) k += !strncmp(e->d_name, prefix, strlen(prefix));
  if (d) closedir(d);
  return k;
}

/* mf_ccd_save writes a temp file and renames it: a save that fails part-way (here: a file
 * size limit, which stops writes even as root) keeps the previous file whole and leaves no
 * temp file; a save into a missing directory leaves nothing; a good save replaces. */
static void test_save_atomic(const mf_ccd *ccd, const char *bin, const char *prev, size_t n) {
  struct rlimit old;
  MF_ASSERT(getrlimit(RLIMIT_FSIZE, &old) == 0, "getrlimit");
  void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old;
  lim.rlim_cur = (rlim_t)(n / 2);
  int limited = setrlimit(RLIMIT_FSIZE, &lim) == 0;
  mf_status st = limited ? mf_ccd_save(ccd, bin) : MF_ERR_IO;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", mf_error_message());
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_sig);
  char *now = NULL;
  size_t m = 0;
  int same = mf_textfile_read(bin, &now, &m) == MF_OK && m == n && !memcmp(now, prev, n);
  mf_free(now);
  MF_TEST(limited && st == MF_ERR_IO && same && count_prefixed("ccd.bin.tmp") == 0,
          "a failing save keeps the previous file whole, no temp file left: %s", msg);

  char missing[192];
  snprintf(missing, sizeof missing, "%s/no_such_dir/ccd.bin", g_tmpdir);
  st = mf_ccd_save(ccd, missing);
  MF_TEST(st == MF_ERR_IO && strstr(mf_error_message(), "no_such_dir") &&
              count_prefixed("no_such_dir") == 0,
          "save into a missing directory: MF_ERR_IO, nothing left: %s", mf_error_message());

  /* a good save over a different file replaces it whole */
  mf_test_write_file(bin, "old contents", 12);
  st = mf_ccd_save(ccd, bin);
  now = NULL;
  same = st == MF_OK && mf_textfile_read(bin, &now, &m) == MF_OK && m == n && !memcmp(now, prev, n);
  mf_free(now);
  MF_TEST(same && count_prefixed("ccd.bin.tmp") == 0, "a good save replaces the file: %s",
          mf_error_message());
}
static void test_chunks_and_binary(const mf_ccd *ccd) {
  mf_ccd c2;
  mf_ccd_set_chunk_bytes(4096);
  mf_status st = mf_ccd_read(CCD_SUBSET, &c2);
  mf_ccd_set_chunk_bytes(0);
  MF_TEST(st == MF_OK && same_ccd(ccd, &c2), "4 KiB chunks give the same tables: %s",
          mf_error_message());
  mf_ccd_free(&c2);

  /* a text field whose line starts with "data_" is not a block boundary */
  static const char tf[] = "data_AAA\n_chem_comp.id AAA\n_chem_comp.name\n;first line\ndata_notablock\n"
                           "more text\n;\n_chem_comp_atom.comp_id AAA\n_chem_comp_atom.atom_id X1\n"
                           "_chem_comp_atom.type_symbol C\n"
                           "data_BBB\n_chem_comp.id BBB\n_chem_comp.name 'b b'\n";
  for (size_t chunk = 1; chunk < 80; chunk += 7) {
    mf_ccd_set_chunk_bytes(chunk);
    st = mf_ccd_parse(tf, strlen(tf), "textfield.cif", &c2);
    mf_ccd_set_chunk_bytes(0);
    int ok = st == MF_OK && c2.n_components == 2 && c2.n_atoms == 1 &&
             !strcmp(mf_ccd_name(&c2, &c2.components[0]), "first line\ndata_notablock\nmore text") &&
             !strcmp(mf_ccd_name(&c2, &c2.components[1]), "b b");
    MF_TEST(ok, "text field with a data_ line, chunk %zu bytes: %s", chunk,
            st ? mf_error_message() : "");
    mf_ccd_free(&c2);
  }

  char bin[128];
  snprintf(bin, sizeof bin, "%s/ccd.bin", g_tmpdir);
  st = mf_ccd_save(ccd, bin);
  MF_TEST(st == MF_OK, "save binary: %s", mf_error_message());
  double t0 = mf_time_now();
  st = mf_ccd_load(bin, &c2);
  double t_load = mf_time_now() - t0;
  MF_TEST(st == MF_OK && same_ccd(ccd, &c2) && mf_ccd_find(&c2, "ADP") != NULL &&
              mf_ccd_find(&c2, "ADP") - c2.components == mf_ccd_find(ccd, "ADP") - ccd->components,
          "binary round trip (load %.2f ms): %s", t_load * 1e3, mf_error_message());
  mf_ccd_free(&c2);

  char *raw = NULL;
  size_t n = 0;
  MF_ASSERT(mf_textfile_read(bin, &raw, &n) == MF_OK, "read back %s", bin);
  test_save_atomic(ccd, bin, raw, n);
  char bad[128];
  snprintf(bad, sizeof bad, "%s/bad.bin", g_tmpdir);
  mf_test_write_file(bad, raw, n - 1);
  st = mf_ccd_load(bad, &c2);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "bad.bin"), "truncated binary: %s",
          mf_error_message());
  raw[n / 2] ^= 0x40;
  mf_test_write_file(bad, raw, n);
  st = mf_ccd_load(bad, &c2);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "checksum"), "flipped bit: %s",
          mf_error_message());
  raw[n / 2] ^= 0x40;
  raw[0] = 'X';
  mf_test_write_file(bad, raw, n);
  st = mf_ccd_load(bad, &c2);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "magic"), "bad magic: %s",
          mf_error_message());
  mf_test_write_file(bad, raw, 10);
  st = mf_ccd_load(bad, &c2);
  MF_TEST(st == MF_ERR_FORMAT && c2.components == NULL, "10-byte file: %s", mf_error_message());
  mf_free(raw);
  st = mf_ccd_load("/nonexistent/ccd.bin", &c2);
  MF_TEST(st == MF_ERR_IO, "missing binary file: MF_ERR_IO");
  remove(bin);
  remove(bad);
}

/* ------------------------------------------------------------------ malformed input */
static int expect_error(const char *text, mf_status want, const char *n1, const char *n2) {
  mf_ccd c;
  mf_status st = mf_ccd_parse(text, strlen(text), "bad.cif", &c);
  const char *msg = mf_error_message();
  int ok = st == want && c.components == NULL && c.n_components == 0 && strstr(msg, "bad.cif") &&
           (!n1 || strstr(msg, n1)) && (!n2 || strstr(msg, n2));
  if (!ok) printf("  status %s, message: %s\n", mf_status_name(st), msg);
  mf_ccd_free(&c);
  return ok;
}

#define ATOMS_HDR                                                                             \
  "loop_\n_chem_comp_atom.comp_id\n_chem_comp_atom.atom_id\n_chem_comp_atom.type_symbol\n"   \
  "_chem_comp_atom.charge\n_chem_comp_atom.pdbx_leaving_atom_flag\n"                          \
  "_chem_comp_atom.pdbx_model_Cartn_x_ideal\n_chem_comp_atom.pdbx_model_Cartn_y_ideal\n"      \
  "_chem_comp_atom.pdbx_model_Cartn_z_ideal\n"
#define BONDS_HDR                                                                             \
  "loop_\n_chem_comp_bond.comp_id\n_chem_comp_bond.atom_id_1\n_chem_comp_bond.atom_id_2\n"   \
  "_chem_comp_bond.value_order\n_chem_comp_bond.pdbx_aromatic_flag\n"

static void test_malformed(void) {
  /* a valid two-atom component first, so the cases below differ in one thing */
  static const char good[] = "data_XY\n_chem_comp.id XY\n" ATOMS_HDR
                             "XY C1 C 0 N 0.0 0.0 0.0\nXY O1 O -1 Y 1.2 0 0\n" BONDS_HDR
                             "XY C1 O1 DOUB N\n";
  mf_ccd c;
  mf_status st = mf_ccd_parse(good, strlen(good), "good.cif", &c);
  MF_TEST(st == MF_OK && c.n_components == 1 && c.n_atoms == 2 && c.n_bonds == 1 &&
              c.atoms[1].charge == -1 && (c.atoms[1].flags & MF_CCD_ATOM_LEAVING) &&
              fabsf(c.atoms[1].pos[0] - 1.2f) < 1e-6f && c.bonds[0].order == MF_BOND_DOUBLE &&
              c.components[0].coord_source == MF_CCD_COORDS_IDEAL,
          "minimal component: %s", mf_error_message());
  mf_ccd_free(&c);

  /* fuzzer finding: a first component without atoms (atom table still NULL) */
  static const char noatoms[] = "data_UNL\n_chem_comp.id UNL\n_chem_comp.name ?\n";
  st = mf_ccd_parse(noatoms, strlen(noatoms), "unl.cif", &c);
  MF_TEST(st == MF_OK && c.n_components == 1 && c.n_atoms == 0 &&
              c.components[0].coord_source == MF_CCD_COORDS_NONE &&
              !strcmp(mf_ccd_name(&c, &c.components[0]), "") &&
              mf_ccd_atom_index(&c, &c.components[0], "C1") == -1,
          "component without atoms first: %s", mf_error_message());
  char bin0[128];
  snprintf(bin0, sizeof bin0, "%s/unl.bin", g_tmpdir);
  mf_ccd c0;
  st = st == MF_OK ? mf_ccd_save(&c, bin0) : st;
  st = st == MF_OK ? mf_ccd_load(bin0, &c0) : st;
  MF_TEST(st == MF_OK && same_ccd(&c, &c0), "binary round trip without atoms: %s",
          mf_error_message());
  mf_ccd_free(&c0);
  remove(bin0);
  mf_ccd_free(&c);

  MF_TEST(expect_error("data_XY\n_chem_comp.name foo\n", MF_ERR_FORMAT, "'XY'", "_chem_comp.id"),
          "block without _chem_comp.id");
  MF_TEST(expect_error("", MF_ERR_FORMAT, NULL, NULL), "empty input");
  MF_TEST(expect_error("# only a comment\n", MF_ERR_FORMAT, NULL, NULL), "no data blocks");
  MF_TEST(expect_error("data_A\n_chem_comp.id A\ndata_B\n_chem_comp.id A\n", MF_ERR_FORMAT,
                       "component A", "twice"),
          "duplicate component");
  MF_TEST(expect_error("data_XY\n_chem_comp.id XY\n" ATOMS_HDR
                       "XY C1 C 0 N 0 0 0\nXY C1 O 0 N 1 0 0\n",
                       MF_ERR_FORMAT, "duplicate atom 'C1'", "line 13"),
          "duplicate atom (line named)");
  MF_TEST(expect_error("data_XY\n_chem_comp.id XY\n" ATOMS_HDR
                       "XY C1 C 0 N 0 0 0\nXY O1 O 0 N 1 0 0\n" BONDS_HDR "XY C1 O2 SING N\n",
                       MF_ERR_FORMAT, "'O2'", "component XY"),
          "bond to an unknown atom");
  MF_TEST(expect_error("data_XY\n_chem_comp.id XY\n" ATOMS_HDR
                       "XY C1 C 0 N 0 0 0\nXY O1 O 0 N 1 0 0\n" BONDS_HDR "XY C1 O1 SINGLE N\n",
                       MF_ERR_FORMAT, "bond order 'SINGLE'", NULL),
          "unknown bond order");
  MF_TEST(expect_error("data_XY\n_chem_comp.id XY\n" ATOMS_HDR
                       "XY C1 C 0 N 0 0 0\nXY O1 O 0 N 1 0 0\n" BONDS_HDR "XY C1 C1 SING N\n",
                       MF_ERR_FORMAT, "itself", NULL),
          "bond from an atom to itself");
  MF_TEST(expect_error("data_XY\n_chem_comp.id XY\n" ATOMS_HDR "XY C1 C 0 Q 0 0 0\n",
                       MF_ERR_FORMAT, "pdbx_leaving_atom_flag", "'Q'"),
          "bad leaving flag");
  MF_TEST(expect_error("data_XY\n_chem_comp.id XY\n" ATOMS_HDR "XY C1 C 0 N 0 abc 0\n",
                       MF_ERR_FORMAT, "Cartn_y_ideal", NULL),
          "non-numeric coordinate");
  MF_TEST(expect_error("data_XY\n_chem_comp.id XY\n" ATOMS_HDR "XY C1 C +x N 0 0 0\n",
                       MF_ERR_FORMAT, "charge", NULL),
          "non-numeric charge");
  MF_TEST(expect_error("data_XY\n_chem_comp.id XY\n" ATOMS_HDR "ZZ C1 C 0 N 0 0 0\n",
                       MF_ERR_FORMAT, "another component", "'ZZ'"),
          "atom row of another component");
  MF_TEST(expect_error("data_XY\n_chem_comp.id XY\n" ATOMS_HDR "XY C123456789 C 0 N 0 0 0\n",
                       MF_ERR_FORMAT, "longer than", "atom_id"),
          "atom name too long");
  MF_TEST(expect_error("data_XY\n_chem_comp.id TOOLONGID\n", MF_ERR_FORMAT, "longer than", NULL),
          "component id too long");
  MF_TEST(expect_error("data_XY\n_chem_comp.id XY\n_chem_comp.name\n;unterminated\n",
                       MF_ERR_FORMAT, NULL, NULL),
          "unterminated text field (tokenizer error)");
  MF_TEST(expect_error("data_XY\n_chem_comp.id XY\n" ATOMS_HDR "XY C1 C 0 N 0 0\n",
                       MF_ERR_FORMAT, NULL, NULL),
          "loop with a missing value");
  static const char bin[] = "data_XY\n_chem_comp.id X\0Y\n";
  mf_status bst = mf_ccd_parse(bin, sizeof bin - 1, "bin.cif", &c);
  MF_TEST(bst == MF_ERR_FORMAT && strstr(mf_error_message(), "bin.cif"), "binary data: %s",
          mf_error_message());
  mf_ccd_free(&c);
  st = mf_ccd_read("/nonexistent/components.cif", &c);
  MF_TEST(st == MF_ERR_IO && strstr(mf_error_message(), "/nonexistent/components.cif"),
          "missing file: MF_ERR_IO");

  /* truncated gzip of the real subset */
  char *gz = NULL;
  size_t gzn = 0;
  FILE *f = fopen(CCD_SUBSET, "rb");
  if (f) {
    fseek(f, 0, SEEK_END);
    gzn = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    gz = malloc(gzn);
    MF_ASSERT(fread(gz, 1, gzn, f) == gzn, "read %s", CCD_SUBSET);
    fclose(f);
    int all = 1;
    for (size_t cut = gzn / 7; cut < gzn; cut += gzn / 7) {
      st = mf_ccd_parse(gz, cut, "cut.cif.gz", &c);
      all &= st == MF_ERR_FORMAT && strstr(mf_error_message(), "cut.cif.gz") != NULL;
      mf_ccd_free(&c);
    }
    st = mf_ccd_parse(gz, gzn - 3, "cut.cif.gz", &c);
    all &= st == MF_ERR_FORMAT && strstr(mf_error_message(), "truncated") != NULL;
    MF_TEST(all, "truncated gzip CCD: MF_ERR_FORMAT (%s)", mf_error_message());
    mf_ccd_free(&c);
    free(gz);
  }
}

static void test_alloc_failures(void) {
  int64_t before = mf_mem_stats(MF_HOST).current;
  int nomem = 0, other = 0, k = 0;
  mf_ccd c;
  mf_status st = MF_ERR_NOMEM;
  /* every allocation of reading the subset, in turn */
  for (; k < 4000; k++) {
    mf_alloc_fail_after(k);
    st = mf_ccd_read(CCD_SUBSET, &c);
    mf_alloc_fail_after(-1);
    if (st == MF_OK) break;
    nomem += st == MF_ERR_NOMEM;
    other += st != MF_ERR_NOMEM;
    if (c.components != NULL) other++;
  }
  mf_ccd_free(&c);
  MF_TEST(st == MF_OK && nomem == k && other == 0 && mf_mem_stats(MF_HOST).current == before,
          "allocation failures: %d reads failed with NOMEM, %d otherwise, no leak", nomem, other);
}

int main(void) {
  mf_test_begin("test_ccd");
  snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/mf_test_ccd_XXXXXX");
  MF_ASSERT(mkdtemp(g_tmpdir) != NULL, "mkdtemp");
  FILE *f = fopen(CCD_SUBSET, "rb");
  if (!f) {
    printf("skip: %s not found (shared data absent)\n", CCD_SUBSET);
    test_malformed();
    rmdir(g_tmpdir);
    return mf_test_end();
  }
  fclose(f);
  mf_ccd ccd;
  double t0 = mf_time_now();
  mf_status st = mf_ccd_read(CCD_SUBSET, &ccd);
  double t = mf_time_now() - t0;
  MF_TEST(st == MF_OK, "read %s: %s", CCD_SUBSET, mf_error_message());
  if (st == MF_OK) {
    printf("CCD subset: %lld components, %lld atoms, %lld bonds in %.1f ms\n",
           (long long)ccd.n_components, (long long)ccd.n_atoms, (long long)ccd.n_bonds, t * 1e3);
    /* totals from gemmi (python3-gemmi 0.5.7) over the same file, 2026-11-29 */
    MF_TEST(ccd.n_components == 140 && ccd.n_atoms == 3999 && ccd.n_bonds == 4035,
            "140 components, 3999 atoms, 4035 bonds");
    int64_t heavy = 0;
    for (int64_t i = 0; i < ccd.n_components; i++) heavy += ccd.components[i].n_heavy;
    MF_TEST(heavy == 2122, "2122 heavy atoms: %lld", (long long)heavy);
    test_hand_components(&ccd);
    test_against_gemmi(&ccd);
    test_chunks_and_binary(&ccd);
  }
  mf_ccd_free(&ccd);
  test_malformed();
  test_alloc_failures();
  rmdir(g_tmpdir);
  return mf_test_end();
}
