/* test_cif.c — the mmCIF reader (src/data/cif.c, src/data/structure.c): tokenizer cases
 * on hand-written snippets (quotes with embedded quotes, ';' text fields, loops, missing
 * values, comments, blocks), number parsing against strtod, robustness (empty, binary,
 * truncated and malformed input, gzip damage, random mutations, allocation failures:
 * errors, never crashes), a hand-checked structure (altlocs, microheterogeneity,
 * hydrogens, waters, models, links, entities, assemblies and their operator expressions),
 * the fuzzer's regression list (tests/fuzz/fuzz_cif.c), and every file of
 * ../shared/data/mmcif compared with gemmi through tools/gemmi_dump.py (skipped with a
 * message if that directory is absent; a missing gemmi is a failed check).
 * Not a benchmark: parsing speed is printed, bench/ owns the numbers. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "data/cif.h"
#include "data/structure.h"
#include "harness.h"

#define DATA_DIR "../shared/data/mmcif"

static mf_cif_doc *parse_ok(const char *text, const char *name) {
  mf_cif_doc *d = NULL;
  mf_status st = mf_cif_parse(text, strlen(text), name, &d);
  MF_TEST(st == MF_OK, "%s parses: %s", name, mf_error_message());
  return st == MF_OK ? d : NULL;
}

/* The value of tag in block 0, row `row`, as a NUL-terminated copy. */
static const char *get(const mf_cif_doc *d, const char *tag, int64_t row) {
  static char buf[512];
  mf_cif_col c;
  if (!mf_cif_find(d, 0, tag, &c)) return "<absent>";
  mf_cif_str s = mf_cif_value(&c, row);
  if (!s.p) return "<no row>";
  mf_cif_str_copy(s, buf, sizeof buf);
  return buf;
}

static mf_cif_kind kind(const mf_cif_doc *d, const char *tag, int64_t row) {
  mf_cif_col c;
  mf_cif_find(d, 0, tag, &c);
  return mf_cif_value_kind(&c, row);
}

/* Expects a format error whose message contains each of the given fragments. */
static void expect_error(const void *data, size_t n, const char *name, const char *frag1,
                         const char *frag2) {
  mf_cif_doc *d = NULL;
  mf_status st = mf_cif_parse(data, n, name, &d);
  const char *msg = mf_error_message();
  MF_TEST(st == MF_ERR_FORMAT && d == NULL, "%s: format error expected, got %s", name,
          mf_status_name(st));
  MF_TEST(strstr(msg, name) && (!frag1 || strstr(msg, frag1)) && (!frag2 || strstr(msg, frag2)),
          "%s: message names file and says '%s' '%s': %s", name, frag1 ? frag1 : "",
          frag2 ? frag2 : "", msg);
  mf_cif_free(d);
}

static void expect_error_str(const char *text, const char *name, const char *f1, const char *f2) {
  expect_error(text, strlen(text), name, f1, f2);
}

/* ------------------------------------------------------------------ tokenizer */

static void test_tokens(void) {
  const char *t =
      "# leading comment\n"
      "data_TEST\n"
      "_entry.id   1ABC # trailing comment\n"
      "_plain.a  O5'   _plain.b a#b\n"
      "_q.single 'O5''\n"
      "_q.double \"N'\"\n"
      "_q.inner 'a'b c'\n"
      "_q.dq \"a\"b\"\n"
      "_q.empty ''\n"
      "_q.qmark '?'\n"
      "_q.eof_like 'x'\n"
      "_q.star 'it's'\n"
      "_t.text\n"
      ";first line\n"
      "second 'line'\n"
      ";\n"
      "_T.Mixed_Case Yes\n"
      "_n.unknown ?\n"
      "_n.inapp .\n"
      "loop_\n"
      "_atom.id\n"
      "_atom.name\n"
      "_atom.x\n"
      "1 CA 1.5\n"
      "2 \"O5'\" -2.25 3 'C1 A' ? x4\n"
      ";text in\n"
      "a loop\n"
      ";\n"
      ".\n"
      "#\n"
      "data_second\n"
      "_entry.id  2XYZ\n";
  mf_cif_doc *d = parse_ok(t, "tokens.cif");
  if (!d) return;
  MF_TEST(mf_cif_n_blocks(d) == 2, "two blocks: %d", mf_cif_n_blocks(d));
  MF_TEST(mf_cif_str_eq(mf_cif_block_name(d, 0), "TEST"), "block name TEST");
  MF_TEST(mf_cif_find_block(d, "SECOND") == 1 && mf_cif_find_block(d, "third") == -1,
          "find_block is case-insensitive");
  MF_TEST(strcmp(get(d, "_entry.id", 0), "1ABC") == 0, "comment after value: '%s'",
          get(d, "_entry.id", 0));
  MF_TEST(strcmp(get(d, "_plain.a", 0), "O5'") == 0, "unquoted O5'");
  MF_TEST(strcmp(get(d, "_plain.b", 0), "a#b") == 0, "# inside a value: '%s'",
          get(d, "_plain.b", 0));
  MF_TEST(strcmp(get(d, "_q.single", 0), "O5'") == 0, "'O5'' -> O5': '%s'", get(d, "_q.single", 0));
  MF_TEST(strcmp(get(d, "_q.double", 0), "N'") == 0, "\"N'\" -> N'");
  MF_TEST(strcmp(get(d, "_q.inner", 0), "a'b c") == 0, "'a'b c' -> a'b c: '%s'",
          get(d, "_q.inner", 0));
  MF_TEST(strcmp(get(d, "_q.dq", 0), "a\"b") == 0, "embedded double quotes: '%s'",
          get(d, "_q.dq", 0));
  MF_TEST(strcmp(get(d, "_q.star", 0), "it's") == 0, "'it's' -> it's: '%s'", get(d, "_q.star", 0));
  MF_TEST(strcmp(get(d, "_q.empty", 0), "") == 0 && kind(d, "_q.empty", 0) == MF_CIF_QUOTED,
          "empty quoted value");
  MF_TEST(kind(d, "_q.qmark", 0) == MF_CIF_QUOTED, "'?' is a quoted string, not missing");
  MF_TEST(strcmp(get(d, "_t.text", 0), "first line\nsecond 'line'") == 0 &&
              kind(d, "_t.text", 0) == MF_CIF_TEXT,
          "text field: '%s'", get(d, "_t.text", 0));
  MF_TEST(strcmp(get(d, "_t.mixed_case", 0), "Yes") == 0, "tags are case-insensitive");
  MF_TEST(kind(d, "_n.unknown", 0) == MF_CIF_UNKNOWN && kind(d, "_n.inapp", 0) ==
              MF_CIF_INAPPLICABLE && kind(d, "_plain.a", 0) == MF_CIF_PLAIN,
          "? and . kinds");
  mf_cif_col c;
  MF_TEST(mf_cif_find(d, 0, "_atom.name", &c) && c.n == 4 && c.stride == 3, "loop: 4 rows x 3");
  MF_TEST(strcmp(get(d, "_atom.name", 1), "O5'") == 0 && strcmp(get(d, "_atom.name", 2),
          "C1 A") == 0, "quoted values in a loop");
  MF_TEST(mf_cif_is_null(&c, 3) == 0 && strcmp(get(d, "_atom.name", 3), "text in\na loop") == 0,
          "text field in a loop: '%s'", get(d, "_atom.name", 3));
  mf_cif_find(d, 0, "_atom.x", &c);
  MF_TEST(mf_cif_value_kind(&c, 2) == MF_CIF_UNKNOWN && mf_cif_value_kind(&c, 3) == MF_CIF_INAPPLICABLE,
          "missing in a loop");
  double x = 0;
  MF_TEST(mf_cif_get_double(&c, 1, NAN, &x) == MF_OK && x == -2.25, "loop number %g", x);
  MF_TEST(mf_cif_get_double(&c, 2, 7.0, &x) == MF_OK && x == 7.0, "? gives the default");
  MF_TEST(mf_cif_line(&c, 0) == 24 && mf_cif_line(&c, 3) == 29, "lines %lld %lld",
          (long long)mf_cif_line(&c, 0), (long long)mf_cif_line(&c, 3));
  mf_cif_find(d, 0, "_atom.id", &c);
  int64_t iv = 0;
  MF_TEST(mf_cif_get_int(&c, 3, -1, &iv) == MF_ERR_FORMAT &&
              strstr(mf_error_message(), "tokens.cif:25") && strstr(mf_error_message(), "_atom.id"),
          "non-number names file, line, tag: %s", mf_error_message());
  MF_TEST(mf_cif_find(d, 0, "_atom.nope", &c) == 0 && c.n == 0 && mf_cif_is_null(&c, 0),
          "absent tag");
  MF_TEST(mf_cif_category_rows(d, 0, "_atom") == 4 && mf_cif_category_rows(d, 0, "_ato") == -1 &&
              mf_cif_category_rows(d, 1, "_entry") == 1,
          "category rows");
  mf_cif_find(d, 1, "_entry.id", &c);
  MF_TEST(mf_cif_str_eq(mf_cif_value(&c, 0), "2XYZ"), "second block is separate");
  mf_cif_free(d);

  /* CRLF line ends, tabs, quote at end of file, BOM */
  const char *crlf = "\xEF\xBB\xBF" "data_x\r\n_a.b\tv1\r\n_a.t\r\n;l1\r\nl2\r\n;\r\n_a.q 'end'";
  d = parse_ok(crlf, "crlf.cif");
  if (d) {
    MF_TEST(strcmp(get(d, "_a.b", 0), "v1") == 0 && strcmp(get(d, "_a.t", 0), "l1\r\nl2") == 0 &&
                strcmp(get(d, "_a.q", 0), "end") == 0,
            "CRLF: '%s' '%s' '%s'", get(d, "_a.b", 0), get(d, "_a.t", 0), get(d, "_a.q", 0));
    mf_cif_free(d);
  }
  /* an empty loop is accepted with zero rows */
  d = parse_ok("data_e\nloop_\n_x.a\n_x.b\nloop_\n_y.c\n1\n", "emptyloop.cif");
  if (d) {
    mf_cif_col e;
    MF_TEST(mf_cif_find(d, 0, "_x.b", &e) && e.n == 0 && strcmp(get(d, "_y.c", 0), "1") == 0,
            "empty loop");
    mf_cif_free(d);
  }
}

static void test_numbers(void) {
  struct {
    const char *s;
    int ok;
    double v;
  } cases[] = {{"1.5", 1, 1.5},      {"-0.25", 1, -0.25},   {"+3", 1, 3},
               {"1e3", 1, 1000},     {"2.5E-2", 1, 0.025},  {".5", 1, 0.5},
               {"5.", 1, 5},         {"1.23(4)", 1, 1.23},  {"-12(3)", 1, -12},
               {"abc", 0, 0},        {".", 0, 0},           {"-", 0, 0},
               {"1.2.3", 0, 0},      {"1e", 0, 0},          {"1.5(", 0, 0},
               {"1.5()", 0, 0},      {"(4)", 0, 0},         {"0x10", 0, 0},
               {"nan", 0, 0},        {"1 2", 0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mf_cif_str s = {cases[i].s, (int64_t)strlen(cases[i].s)};
    double v = -999;
    int ok = mf_cif_parse_double(s, &v);
    MF_TEST(ok == cases[i].ok && (!ok || v == cases[i].v), "parse_double('%s') = %d, %.17g",
            cases[i].s, ok, v);
  }
  /* correctly rounded, as strtod: random decimals of the kinds found in mmCIF and beyond */
  uint64_t x = 88172645463325252ull;
  int bad = 0;
  char buf[64];
  for (int i = 0; i < 200000; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    int kind = (int)(x % 4);
    if (kind == 0)
      snprintf(buf, sizeof buf, "%.3f", (double)(int64_t)(x >> 20 & 0xffffff) / 1000 - 8000);
    else if (kind == 1)
      snprintf(buf, sizeof buf, "%.*f", (int)(x >> 8 & 7), (double)(x >> 24) * 1e-9);
    else if (kind == 2)
      snprintf(buf, sizeof buf, "%.17g", (double)(x >> 11) * 0x1p-53 * 1e5);
    else
      snprintf(buf, sizeof buf, "%llue%d", (unsigned long long)(x >> 40),
               (int)(x >> 4 & 63) - 40);
    mf_cif_str s = {buf, (int64_t)strlen(buf)};
    double v, ref = strtod(buf, NULL);
    if (!mf_cif_parse_double(s, &v) || v != ref) {
      if (bad++ < 5) printf("  parse_double('%s') = %.17g, strtod %.17g\n", buf, v, ref);
    }
  }
  MF_TEST(bad == 0, "parse_double equals strtod on 200000 decimals (%d differ)", bad);
  struct {
    const char *s;
    int ok;
    int64_t v;
  } ic[] = {{"42", 1, 42},   {"-7", 1, -7},         {"+0", 1, 0}, {"12(3)", 1, 12},
            {"1.0", 0, 0},   {"", 0, 0},            {"-", 0, 0},  {"99999999999999999999", 0, 0},
            {"9223372036854775807", 1, INT64_MAX}};
  for (size_t i = 0; i < sizeof ic / sizeof ic[0]; i++) {
    mf_cif_str s = {ic[i].s, (int64_t)strlen(ic[i].s)};
    int64_t v = -999;
    int ok = mf_cif_parse_int(s, &v);
    MF_TEST(ok == ic[i].ok && (!ok || v == ic[i].v), "parse_int('%s') = %d, %lld", ic[i].s, ok,
            (long long)v);
  }
}

/* ------------------------------------------------------------------ errors */

static void test_errors(void) {
  expect_error("", 0, "empty.cif", "empty", NULL);
  expect_error_str("  \n\n# only a comment\n", "blank.cif", ":4:", "data_");
  expect_error_str("data_x\n_a.b 'unterminated\n_a.c 1\n", "quote.cif", ":2:", "closing '");
  expect_error_str("data_x\n_a.b \"no end", "dquote.cif", ":2:", "closing \"");
  expect_error_str("data_x\n_a.b 'O5''x\n", "quote2.cif", ":2:", "closing '");
  expect_error_str("data_x\n_a.t\n;text\nnever closed\n", "text.cif", ":3:", "text field");
  expect_error_str("data_x\nloop_\n_a.x\n_a.y\n1 2\n3\n", "loop.cif", ":6:", "multiple of 2");
  expect_error_str("data_x\nloop_\n_a.x\n_a.y\n_a.z\n1 2 3\n4 5\n_b.c 1\n", "loop2.cif", ":7:",
                   "expected 1 more");
  expect_error_str("data_x\n_a.b\n", "novalue.cif", "_a.b", "end of file");
  expect_error_str("data_x\n_a.b\n_a.c 1\n", "tagtag.cif", ":3:", "_a.b has no value");
  expect_error_str("data_x\n_a.b loop_\n", "tagloop.cif", ":2:", "found loop_");
  expect_error_str("_a.b 1\n", "noblock.cif", ":1:", "data_");
  expect_error_str("data_x\n_a.b 1 2\n", "extra.cif", ":2:", "unexpected value '2'");
  expect_error_str("data_x\nloop_\nloop_\n_a.b 1\n", "loopnotag.cif", ":2:", "without tags");
  expect_error_str("data_x\nsave_frame\n_a.b 1\nsave_\n", "save.cif", ":2:", "save_");
  expect_error_str("data_x\n_a.t\n;ok\n;junk\n", "textend.cif", ":4:", "whitespace after");
  static const unsigned char bin[] = {'d', 'a', 't', 'a', '_', 'x', '\n', '_', 'a', '.',
                                      'b', ' ', 0x01, 0x02, 0x00, 0xff, '\n'};
  expect_error(bin, sizeof bin, "binary.cif", ":2:", "binary");
  static const unsigned char nul[] = {'d', 'a', 't', 'a', '_', 'x', '\n', '_', 'a', '.', 'b', ' ',
                                      'v', 0x00, 'w', '\n'};
  expect_error(nul, sizeof nul, "nul.cif", ":2:", "binary");
  static const unsigned char elf[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0};
  expect_error(elf, sizeof elf, "elf.bin", ":1:", "binary");
  /* a missing file is an I/O error naming the path */
  mf_cif_doc *d = NULL;
  MF_TEST(mf_cif_read("/nonexistent/x.cif", &d) == MF_ERR_IO && d == NULL &&
              strstr(mf_error_message(), "/nonexistent/x.cif"),
          "missing file: %s", mf_error_message());
  MF_TEST(mf_cif_read("tests", &d) == MF_ERR_IO && d == NULL && strstr(mf_error_message(), "tests"),
          "a directory is an I/O error: %s", mf_error_message());
}

/* gzip of text, in memory. Returns the size; *out from malloc. */
static size_t gzip_mem(const char *text, size_t n, unsigned char **out) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  size_t cap = deflateBound(&zs, (uLong)n) + 64;
  *out = malloc(cap);
  zs.next_in = (unsigned char *)(uintptr_t)text;
  zs.avail_in = (uInt)n;
  zs.next_out = *out;
  zs.avail_out = (uInt)cap;
  deflate(&zs, Z_FINISH);
  size_t m = zs.total_out;
  deflateEnd(&zs);
  return m;
}

static const char *k_small =
    "data_SMALL\n"
    "_entry.id SMALL\n"
    "loop_\n_atom_site.group_PDB\n_atom_site.id\n_atom_site.type_symbol\n"
    "_atom_site.label_atom_id\n_atom_site.label_alt_id\n_atom_site.label_comp_id\n"
    "_atom_site.label_asym_id\n_atom_site.label_entity_id\n_atom_site.label_seq_id\n"
    "_atom_site.pdbx_PDB_ins_code\n_atom_site.Cartn_x\n_atom_site.Cartn_y\n_atom_site.Cartn_z\n"
    "_atom_site.occupancy\n_atom_site.B_iso_or_equiv\n_atom_site.auth_seq_id\n"
    "_atom_site.auth_asym_id\n_atom_site.pdbx_PDB_model_num\n"
    "ATOM 1 N N . GLY A 1 1 ? 1.000 2.000 3.000 1.00 10.0 1 A 1\n"
    "ATOM 2 C CA . GLY A 1 1 ? 2.000 2.000 3.000 1.00 10.0 1 A 1\n"
    "ATOM 3 H H . GLY A 1 1 ? 0.500 2.000 3.000 1.00 10.0 1 A 1\n"
    "ATOM 4 N N A SER A 1 2 ? 3.000 2.000 3.000 0.40 11.0 2 A 1\n"
    "ATOM 5 N N B SER A 1 2 ? 3.100 2.000 3.000 0.60 11.0 2 A 1\n"
    "ATOM 6 O OG A SER A 1 2 ? 4.000 2.000 3.000 0.50 11.0 2 A 1\n"
    "ATOM 7 O OG B SER A 1 2 ? 4.100 2.000 3.000 0.50 11.0 2 A 1\n"
    "ATOM 8 N N A PRO A 1 3 ? 5.000 2.000 3.000 0.70 12.0 3 A 1\n"
    "ATOM 9 C CD A PRO A 1 3 ? 5.500 2.000 3.000 0.70 12.0 3 A 1\n"
    "ATOM 10 N N B THR A 1 3 ? 5.100 2.000 3.000 0.30 12.0 3 A 1\n"
    "ATOM 11 O OG1 B THR A 1 3 ? 5.600 2.000 3.000 0.30 12.0 3 A 1\n"
    "HETATM 12 ZN ZN . ZN B 2 . ? 9.000 9.000 9.000 1.00 20.0 101 A 1\n"
    "HETATM 13 O O . HOH C 3 . ? 7.000 7.000 7.000 1.00 30.0 201 A 1\n"
    "HETATM 14 C \"C1'\" . NAG D 4 . ? -1.5 -2.5 -3.5 1.00 ? 301 A 1\n"
    "HETATM 15 C \"C2'\" . NAG D 4 . ? -1.6 -2.5 -3.5 1.00 ? 302 A 1\n"
    "ATOM 16 N N . GLY A 1 1 ? 1.000 2.000 3.000 1.00 10.0 1 A 2\n"
    "ATOM 17 D D . GLY A 1 1 ? 1.000 2.000 3.000 1.00 10.0 1 A 1\n"
    "#\n"
    "loop_\n_entity.id\n_entity.type\n1 polymer\n2 non-polymer\n3 water\n4 branched\n"
    "loop_\n_entity_poly.entity_id\n_entity_poly.type\n_entity_poly.pdbx_seq_one_letter_code\n"
    "_entity_poly.pdbx_seq_one_letter_code_can\n"
    "1 'polypeptide(L)'\n;GS\nP(MSE)\n;\n;GS\nPM\n;\n"
    "loop_\n_entity_poly_seq.entity_id\n_entity_poly_seq.num\n_entity_poly_seq.mon_id\n"
    "_entity_poly_seq.hetero\n1 1 GLY n\n1 2 SER n\n1 3 PRO y\n1 3 THR y\n1 4 MSE n\n"
    "loop_\n_struct_conn.id\n_struct_conn.conn_type_id\n_struct_conn.ptnr1_label_asym_id\n"
    "_struct_conn.ptnr1_label_comp_id\n_struct_conn.ptnr1_label_seq_id\n"
    "_struct_conn.ptnr1_label_atom_id\n_struct_conn.pdbx_ptnr1_label_alt_id\n"
    "_struct_conn.pdbx_ptnr1_PDB_ins_code\n_struct_conn.ptnr1_auth_seq_id\n"
    "_struct_conn.ptnr1_symmetry\n_struct_conn.ptnr2_label_asym_id\n"
    "_struct_conn.ptnr2_label_comp_id\n_struct_conn.ptnr2_label_seq_id\n"
    "_struct_conn.ptnr2_label_atom_id\n_struct_conn.pdbx_ptnr2_label_alt_id\n"
    "_struct_conn.pdbx_ptnr2_PDB_ins_code\n_struct_conn.ptnr2_auth_seq_id\n"
    "_struct_conn.ptnr2_symmetry\n"
    "covale1 covale A SER 2 OG A ? 2 1_555 D NAG . \"C1'\" ? ? 301 1_555\n"
    "metalc1 metalc A GLY 1 N ? ? 1 1_555 B ZN . ZN ? ? 101 1_555\n"
    "covale2 covale A GLY 1 H ? ? 1 1_555 D NAG . \"C2'\" ? ? 302 1_555\n"
    "_refine.ls_d_res_high 1.85\n"
    "_reflns.d_resolution_high 1.70\n"
    "loop_\n_exptl.method\n'X-RAY DIFFRACTION' 'NEUTRON DIFFRACTION'\n"
    "_pdbx_struct_assembly.id 1\n_pdbx_struct_assembly.details author_defined_assembly\n"
    "_pdbx_struct_assembly.oligomeric_count 2\n"
    "_pdbx_struct_assembly_gen.assembly_id 1\n_pdbx_struct_assembly_gen.oper_expression '1,2'\n"
    "_pdbx_struct_assembly_gen.asym_id_list A,B,D\n"
    "loop_\n_pdbx_struct_oper_list.id\n_pdbx_struct_oper_list.type\n"
    "_pdbx_struct_oper_list.matrix[1][1]\n_pdbx_struct_oper_list.matrix[1][2]\n"
    "_pdbx_struct_oper_list.matrix[2][2]\n_pdbx_struct_oper_list.matrix[3][3]\n"
    "_pdbx_struct_oper_list.vector[1]\n"
    "1 'identity operation' 1 0 1 1 0\n2 'crystal symmetry operation' -1 0 -1 1 10.5\n";

static void test_gzip(void) {
  unsigned char *gz;
  size_t n = strlen(k_small), m = gzip_mem(k_small, n, &gz);
  mf_cif_doc *d = NULL;
  MF_TEST(mf_cif_parse(gz, m, "small.cif", &d) == MF_OK && mf_cif_bytes(d) == n,
          "gzip detected by magic, not by name: %s", mf_error_message());
  mf_cif_free(d);
  /* two members concatenated */
  unsigned char *two = malloc(2 * m);
  memcpy(two, gz, m);
  memcpy(two + m, gz, m);
  d = NULL;
  mf_status st = mf_cif_parse(two, 2 * m, "two.cif.gz", &d);
  MF_TEST(st == MF_OK && mf_cif_bytes(d) == 2 * n && mf_cif_n_blocks(d) == 2,
          "two gzip members: %s", mf_error_message());
  mf_cif_free(d);
  free(two);
  /* every truncation of the gzip stream is an error naming the file */
  int bad = 0;
  for (size_t k = 0; k < m; k++) {
    d = NULL;
    st = mf_cif_parse(gz, k, "cut.cif.gz", &d);
    if (st == MF_OK || d || (k > 0 && !strstr(mf_error_message(), "cut.cif.gz"))) {
      if (bad++ < 3) printf("  truncated gzip at %zu: %s %s\n", k, mf_status_name(st), mf_error_message());
      mf_cif_free(d);
    }
  }
  MF_TEST(bad == 0, "all %zu truncations of a gzip stream fail cleanly (%d did not)", m, bad);
  d = NULL;
  st = mf_cif_parse(gz, m - 100, "cut.cif.gz", &d);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "truncated"), "truncated message: %s",
          mf_error_message());
  /* flipped bytes in the compressed data: error or (rarely) other text, never a crash */
  uint64_t x = 1234567;
  int64_t before = mf_mem_stats(MF_HOST).current;
  int errors = 0;
  for (int i = 0; i < 300; i++) {
    unsigned char *c = malloc(m);
    memcpy(c, gz, m);
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    c[10 + (x >> 33) % (m - 10)] ^= (unsigned char)(1 + (x >> 20) % 255);
    d = NULL;
    if (mf_cif_parse(c, m, "flip.cif.gz", &d) == MF_OK) mf_cif_free(d);
    else errors += strstr(mf_error_message(), "flip.cif.gz") != NULL;
    free(c);
  }
  MF_TEST(errors > 150 && mf_mem_stats(MF_HOST).current == before,
          "300 corrupted gzip streams: %d named errors, no leak", errors);
  /* trailing garbage after the stream */
  unsigned char *tg = malloc(m + 4);
  memcpy(tg, gz, m);
  memcpy(tg + m, "junk", 4);
  d = NULL;
  st = mf_cif_parse(tg, m + 4, "trail.cif.gz", &d);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "trailing"), "trailing garbage: %s",
          mf_error_message());
  free(tg);
  free(gz);
}

/* Every prefix of a text file parses or fails cleanly; so does the structure. */
static void test_truncations(void) {
  size_t n = strlen(k_small);
  int ok = 0, err = 0, unnamed = 0;
  for (size_t k = 0; k <= n; k++) {
    mf_cif_doc *d = NULL;
    mf_status st = mf_cif_parse(k_small, k, "prefix.cif", &d);
    if (st == MF_OK) {
      mf_structure *s = NULL;
      if (mf_structure_from_cif(d, 0, &s) == MF_OK) mf_structure_free(s);
      mf_cif_free(d);
      ok++;
    } else {
      err++;
      unnamed += !strstr(mf_error_message(), "prefix.cif");
    }
  }
  MF_TEST(err > 0 && ok > 0 && unnamed == 0, "%zu prefixes: %d parse, %d errors (%d unnamed)",
          n + 1, ok, err, unnamed);
}

/* Random single-byte edits of a small file: no crash; memory returns to where it was. */
static void test_mutations(void) {
  size_t n = strlen(k_small);
  char *buf = malloc(n);
  static const char alphabet[] = " \n\t'\";_#?.0a\x01\x80";
  uint64_t x = 99;
  int64_t before = mf_mem_stats(MF_HOST).current;
  int parsed = 0;
  for (int i = 0; i < 4000; i++) {
    memcpy(buf, k_small, n);
    for (int e = 0; e < 1 + i % 4; e++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      buf[(x >> 33) % n] = alphabet[(x >> 17) % (sizeof alphabet - 1)];
    }
    mf_cif_doc *d = NULL;
    if (mf_cif_parse(buf, n, "mut.cif", &d) == MF_OK) {
      parsed++;
      mf_structure *s = NULL;
      if (mf_structure_from_cif(d, 0, &s) == MF_OK) mf_structure_free(s);
      mf_cif_free(d);
    }
  }
  free(buf);
  MF_TEST(mf_mem_stats(MF_HOST).current == before, "4000 mutated files (%d parsed): no leak",
          parsed);
}

/* Each allocation of read (text and gzip) + build fails in turn: an error, no leak. */
static void test_alloc_failures(void) {
  unsigned char *gz;
  size_t ntext = strlen(k_small), ngz = gzip_mem(k_small, ntext, &gz);
  for (int pass = 0; pass < 2; pass++) {
    const void *data = pass ? (const void *)gz : (const void *)k_small;
    size_t n = pass ? ngz : ntext;
    int64_t before = mf_mem_stats(MF_HOST).current;
    int nomem = 0, k;
    for (k = 0; k < 200; k++) {
      mf_alloc_fail_after(k);
      mf_cif_doc *d = NULL;
      mf_structure *s = NULL;
      mf_status st = mf_cif_parse(data, n, "oom.cif", &d);
      if (st == MF_OK) st = mf_structure_from_cif(d, 0, &s);
      mf_alloc_fail_after(-1);
      mf_structure_free(s);
      mf_cif_free(d);
      if (st == MF_OK) break;
      nomem += st == MF_ERR_NOMEM;
    }
    MF_TEST(k > 3 && k < 200 && nomem == k,
            "%s: allocation failures 0..%d all give MF_ERR_NOMEM (%d)", pass ? "gzip" : "text",
            k - 1, nomem);
    MF_TEST(mf_mem_stats(MF_HOST).current == before, "%s: no leak after allocation failures",
            pass ? "gzip" : "text");
  }
  free(gz);
}

/* ------------------------------------------------------------------ structure */

/* Many entities with _entity_poly_seq rows, listed in reverse: grouping by entity must
 * stay right (the grouping used to look every entity up again per row, O(E² x rows); the
 * fix is checked for correctness here, not timed — tests check, benchmarks measure). */
static void test_many_entities(void) {
  const int E = 2500;
  const char *cut = strstr(k_small, "#\n");
  size_t head = (size_t)(cut - k_small) + 2, cap = head + (size_t)E * 64 + 256, n = head;
  char *text = malloc(cap);
  memcpy(text, k_small, head);
  n += (size_t)snprintf(text + n, cap - n, "loop_\n_entity.id\n_entity.type\n"
                        "1 polymer\n2 non-polymer\n3 water\n4 branched\n");
  for (int e = 5; e <= E; e++) n += (size_t)snprintf(text + n, cap - n, "%d polymer\n", e);
  n += (size_t)snprintf(text + n, cap - n, "loop_\n_entity_poly_seq.entity_id\n"
                        "_entity_poly_seq.num\n_entity_poly_seq.mon_id\n_entity_poly_seq.hetero\n");
  for (int e = E; e >= 1; e--) n += (size_t)snprintf(text + n, cap - n, "%d 1 GLY n\n", e);
  mf_cif_doc *d = NULL;
  mf_status st = mf_cif_parse(text, n, "many.cif", &d);
  mf_structure *s = NULL;
  if (st == MF_OK) st = mf_structure_from_cif(d, 0, &s);
  int ok = st == MF_OK && s->n_entities == E && s->n_poly_seq == E;
  for (int e = 0; ok && e < E; e++)
    ok &= s->entities[e].poly_seq_count == 1 && s->entities[e].poly_seq_start == e &&
          !strcmp(s->poly_mon[e], "GLY");
  MF_TEST(ok, "%d entities with one poly_seq row each, grouped by entity: %s", E,
          st ? mf_error_message() : "");
  if (s) mf_structure_free(s);
  mf_cif_free(d);
  free(text);
}

static void test_structure(void) {
  mf_cif_doc *d = parse_ok(k_small, "small.cif");
  if (!d) return;
  mf_structure *s = NULL;
  mf_status st = mf_structure_from_cif(d, 0, &s);
  MF_TEST(st == MF_OK, "small structure builds: %s", mf_error_message());
  mf_cif_free(d); /* the structure owns copies of everything */
  if (!s) return;
  /* kept: GLY N CA; SER N(B) OG(A, tie); PRO N CD (micro: PRO 0.7 > THR 0.3); ZN; NAG C1' C2' */
  static const char *names[] = {"N", "CA", "N", "OG", "N", "CD", "ZN", "C1'", "C2'"};
  int n_ok = s->n_atoms == 9;
  for (int i = 0; n_ok && i < 9; i++) n_ok = strcmp(s->atom_name[i], names[i]) == 0;
  MF_TEST(n_ok, "atoms after H/D, water, model 2 and altloc filtering (%lld)",
          (long long)s->n_atoms);
  if (!n_ok) {
    mf_structure_free(s);
    return;
  }
  MF_TEST(s->altloc[2] == 'B' && fabs(s->xyz[6] - 3.1) < 1e-12, "highest occupancy altloc");
  MF_TEST(s->altloc[3] == 'A' && fabs(s->xyz[9] - 4.0) < 1e-12, "first altloc on ties");
  MF_TEST(s->n_residues == 6 && strcmp(s->res_name[2], "PRO") == 0 && s->seq_id[2] == 3 &&
              s->res_atom_start[2] == 4 && s->res_atom_start[3] == 6,
          "microheterogeneity keeps PRO only (%lld residues)", (long long)s->n_residues);
  MF_TEST(s->n_chains == 3 && strcmp(s->chain_id[0], "A") == 0 && strcmp(s->chain_id[2], "D") ==
              0 && s->chain_res_start[1] == 3 && s->chain_res_start[3] == 6,
          "chains A, B, D (water chain C dropped)");
  MF_TEST(s->seq_id[3] == MF_STRUCT_NO_SEQ && s->auth_seq_id[3] == 101 && s->hetatm[3] == 1 &&
              s->hetatm[0] == 0 && strcmp(s->auth_chain_id[1], "A") == 0,
          "non-polymer numbering");
  MF_TEST(isnan(s->b_factor[7]) && s->b_factor[0] == 10.0f && s->occupancy[2] == 0.6f &&
              strcmp(s->element[6], "ZN") == 0 && s->xyz[3 * 7 + 2] == -3.5,
          "atom fields");
  MF_TEST(s->n_entities == 4 && s->entities[0].type == MF_ENTITY_POLYMER &&
              s->entities[0].poly_type == MF_POLY_PEPTIDE_L && s->entities[3].type ==
              MF_ENTITY_BRANCHED && s->chain_entity[0] == 0 && s->chain_entity[2] == 3,
          "entities");
  MF_TEST(strcmp(s->entities[0].seq, "GSP(MSE)") == 0 && strcmp(s->entities[0].seq_can, "GSPM")
              == 0 && s->entities[1].seq[0] == '\0',
          "sequences without whitespace: '%s' '%s'", s->entities[0].seq, s->entities[0].seq_can);
  MF_TEST(s->n_poly_seq == 5 && s->entities[0].poly_seq_count == 5 && s->poly_num[3] == 3 &&
              strcmp(s->poly_mon[3], "THR") == 0 && s->poly_hetero[3] == 1 &&
              s->poly_hetero[0] == 0,
          "entity_poly_seq");
  MF_TEST(s->n_conns == 3 && s->conns[0].covalent && s->conns[0].type == MF_CONN_COVALE &&
              s->conns[0].p[0].atom == 3 && s->conns[0].p[1].atom == 7 &&
              strcmp(s->conns[0].p[1].atom_id, "C1'") == 0 &&
              strcmp(s->conns[0].p[0].symmetry, "1_555") == 0,
          "covalent link resolved to atoms (%lld, %lld)", (long long)s->conns[0].p[0].atom,
          (long long)s->conns[0].p[1].atom);
  MF_TEST(!s->conns[1].covalent && s->conns[1].type == MF_CONN_METALC && s->conns[1].p[0].atom ==
              0 && s->conns[1].p[1].atom == 6 && s->conns[2].p[0].atom == -1 &&
              s->conns[2].p[1].atom == 8,
          "metal link, and a partner that was dropped (H) is -1");
  MF_TEST(s->resolution == 1.85 && strcmp(s->method, "X-RAY DIFFRACTION; NEUTRON DIFFRACTION") ==
              0 && strcmp(s->entry_id, "SMALL") == 0 && s->model_num == 1,
          "resolution %g, method '%s'", s->resolution, s->method);
  MF_TEST(s->n_assemblies == 1 && s->n_assembly_gens == 1 && s->assemblies[0].oligomeric_count ==
              2 && strcmp(s->assembly_gens[0].oper_expression, "1,2") == 0 &&
              strcmp(s->assembly_gens[0].asym_ids, "A,B,D") == 0 && s->n_opers == 2 &&
              s->opers[1].r[0] == -1 && s->opers[1].r[8] == 1 && s->opers[1].r[1] == 0 &&
              s->opers[1].t[0] == 10.5 && strcmp(s->opers[1].type, "crystal symmetry operation")
              == 0,
          "assembly generators and operators");
  int64_t np = 0;
  int32_t nfac = 0, seq[4] = {-1, -1, -1, -1};
  double pt[3] = {1, 2, 3};
  MF_TEST(mf_structure_expand_opers(s, 0, seq, 4, &np, &nfac) == MF_OK && np == 2 && nfac == 1 &&
              seq[0] == 0 && seq[1] == 1,
          "expand '1,2': %lld x %d", (long long)np, nfac);
  mf_structure_apply_opers(s, seq + 1, 1, pt, pt, 1);
  MF_TEST(pt[0] == 9.5 && pt[1] == -2 && pt[2] == 3, "apply operator 2: %g %g %g", pt[0], pt[1],
          pt[2]);
  MF_TEST(mf_structure_expand_opers(s, 0, seq, 1, &np, &nfac) == MF_ERR_SHAPE,
          "expand into too small a buffer");
  MF_TEST(mf_structure_atom_residue(s, 5) == 2 && mf_structure_atom_residue(s, 8) == 5 &&
              mf_structure_residue_chain(s, 3) == 1 && mf_structure_residue_chain(s, 5) == 2,
          "atom -> residue -> chain");
  mf_structure_free(s);

  /* operator expressions: products, composition order, errors */
  const char *ops =
      "data_ops\n_atom_site.type_symbol C\n_atom_site.label_atom_id C1\n"
      "_atom_site.label_comp_id LIG\n_atom_site.label_asym_id A\n_atom_site.Cartn_x 1\n"
      "_atom_site.Cartn_y 0\n_atom_site.Cartn_z 0\n"
      "_pdbx_struct_assembly.id 1\n"
      "loop_\n_pdbx_struct_assembly_gen.assembly_id\n_pdbx_struct_assembly_gen.oper_expression\n"
      "_pdbx_struct_assembly_gen.asym_id_list\n"
      "1 '(1-2)(3,4)' A\n1 (1-9) A\n1 '(1,2' A\n1 P A\n1 '1-2,4' A\n"
      "loop_\n_pdbx_struct_oper_list.id\n_pdbx_struct_oper_list.matrix[1][1]\n"
      "_pdbx_struct_oper_list.matrix[1][2]\n_pdbx_struct_oper_list.matrix[2][1]\n"
      "_pdbx_struct_oper_list.matrix[2][2]\n_pdbx_struct_oper_list.vector[1]\n"
      "1 1 0 0 1 0\n2 1 0 0 1 1\n3 0 -1 1 0 0\n4 1 0 0 1 5\n";
  d = parse_ok(ops, "ops.cif");
  s = NULL;
  if (d && mf_structure_from_cif(d, 0, &s) == MF_OK) {
    int32_t q[8];
    int ok = mf_structure_expand_opers(s, 0, q, 8, &np, &nfac) == MF_OK && np == 4 && nfac == 2;
    static const int32_t want[8] = {0, 2, 0, 3, 1, 2, 1, 3};
    for (int i = 0; ok && i < 8; i++) ok = q[i] == want[i];
    MF_TEST(ok, "'(1-2)(3,4)' expands to 4 products of 2, last factor fastest");
    double p3[3] = {1, 0, 0};
    mf_structure_apply_opers(s, q + 4, 2, p3, p3, 1); /* op2 . op3: rotate, then translate */
    MF_TEST(fabs(p3[0] - 1) < 1e-15 && fabs(p3[1] - 1) < 1e-15 && p3[2] == 0,
            "right factor applied first: %g %g %g", p3[0], p3[1], p3[2]);
    MF_TEST(mf_structure_expand_opers(s, 1, NULL, 0, &np, &nfac) == MF_ERR_FORMAT &&
                strstr(mf_error_message(), "'5'"),
            "unknown operator in a range: %s", mf_error_message());
    MF_TEST(mf_structure_expand_opers(s, 2, NULL, 0, &np, &nfac) == MF_ERR_FORMAT &&
                mf_structure_expand_opers(s, 3, NULL, 0, &np, &nfac) == MF_ERR_FORMAT &&
                strstr(mf_error_message(), "'P'"),
            "unclosed factor, unknown id: %s", mf_error_message());
    MF_TEST(mf_structure_expand_opers(s, 4, q, 8, &np, &nfac) == MF_OK && np == 3 && q[2] == 3,
            "'1-2,4' without parentheses");
  } else {
    MF_TEST(0, "ops.cif structure: %s", mf_error_message());
  }
  mf_structure_free(s);
  mf_cif_free(d);

  /* errors from the structure builder name file, line and field */
  const char *bad =
      "data_b\nloop_\n_atom_site.type_symbol\n_atom_site.label_atom_id\n"
      "_atom_site.label_comp_id\n_atom_site.label_asym_id\n_atom_site.Cartn_x\n"
      "_atom_site.Cartn_y\n_atom_site.Cartn_z\nC CA GLY A 1.0 2.0 3.0\nC CB GLY A 1.0 oops 3.0\n";
  d = parse_ok(bad, "badnum.cif");
  if (d) {
    s = NULL;
    st = mf_structure_from_cif(d, 0, &s);
    MF_TEST(st == MF_ERR_FORMAT && s == NULL && strstr(mf_error_message(), "badnum.cif:11") &&
                strstr(mf_error_message(), "Cartn_y") && strstr(mf_error_message(), "oops"),
            "bad coordinate: %s", mf_error_message());
    mf_cif_free(d);
  }
  d = parse_ok("data_n\n_atom_site.type_symbol C\n_atom_site.Cartn_x 1\n", "nocols.cif");
  if (d) {
    s = NULL;
    st = mf_structure_from_cif(d, 0, &s);
    MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "nocols.cif") &&
                strstr(mf_error_message(), "_atom_site.Cartn_y"),
            "missing column: %s", mf_error_message());
    mf_cif_free(d);
  }
  d = parse_ok("data_l\n_atom_site.type_symbol C\n_atom_site.label_atom_id CAXXXXXXX\n"
               "_atom_site.label_comp_id G\n_atom_site.label_asym_id A\n_atom_site.Cartn_x 1\n"
               "_atom_site.Cartn_y 1\n_atom_site.Cartn_z 1\n", "long.cif");
  if (d) {
    s = NULL;
    st = mf_structure_from_cif(d, 0, &s);
    MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "long.cif:3") &&
                strstr(mf_error_message(), "longer than"),
            "identifier too long: %s", mf_error_message());
    mf_cif_free(d);
  }
}

/* ------------------------------------------------------------------ fuzzer regressions */

/* Regression inputs for the fuzzer (tests/fuzz/fuzz_cif.c): a finding goes here as
 * {what, bytes, length}. Runs on 2026-11-29 (scripts/fuzz.sh: 480 s x 2 workers with
 * -max_len 65536, then 420 s x 2 with -max_len 4096; 4.3 M inputs) found no crash, leak
 * or timeout, so the list holds hand-written inputs that end inside a token, where
 * the lexer reads its sentinel. */
static void test_fuzz_regressions(void) {
  static const struct {
    const char *what;
    const char *data;
    size_t n;
  } cases[] = {
      {"quote at end of buffer", "data_x\n_a.b '", 13},
      {"text field start at end", "data_x\n_a.b\n;", 13},
      {"tag at end", "data_x _a", 9},
      {"comment at end", "data_x\n_a.b 1 #", 15},
      {"quote then sentinel", "data_x\n_a.b 'a'", 15},
      {"gzip magic only", "\x1f\x8b", 2},
      {"BOM only", "\xEF\xBB\xBF", 3},
      {"data_ at end", "data_", 5},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mf_cif_doc *d = NULL;
    mf_status st = mf_cif_parse(cases[i].data, cases[i].n, "fuzz.cif", &d);
    if (st == MF_OK) {
      mf_structure *s = NULL;
      if (mf_structure_from_cif(d, 0, &s) == MF_OK) mf_structure_free(s);
      mf_cif_free(d);
    }
    MF_TEST(st == MF_OK || st == MF_ERR_FORMAT, "fuzz case '%s': %s", cases[i].what,
            mf_status_name(st));
  }
}

/* ------------------------------------------------------------------ against gemmi */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int list_dir(const char *dir, char ***out) {
  DIR *dp = opendir(dir);
  if (!dp) return -1;
  int n = 0, cap = 256;
  char **names = malloc((size_t)cap * sizeof *names);
  struct dirent *e;
  while ((e = readdir(dp))) {
    size_t l = strlen(e->d_name);
    if (!(l > 4 && strcmp(e->d_name + l - 4, ".cif") == 0) &&
        !(l > 7 && strcmp(e->d_name + l - 7, ".cif.gz") == 0))
      continue;
    if (n == cap) names = realloc(names, (size_t)(cap *= 2) * sizeof *names);
    names[n] = malloc(strlen(dir) + l + 2);
    sprintf(names[n], "%s/%s", dir, e->d_name);
    n++;
  }
  closedir(dp);
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  *out = names;
  return n;
}

/* Splits a tab-separated line in place; returns the field count. */
static int split_tabs(char *line, char **f, int max) {
  int n = 0;
  line[strcspn(line, "\n")] = '\0';
  f[n++] = line;
  for (char *p = line; *p && n < max; p++)
    if (*p == '\t') {
      *p = '\0';
      f[n++] = p + 1;
    }
  return n;
}

typedef struct {
  int files_ok, files_bad;
  int64_t atoms, bytes, products;
  double seconds;
} compare_stats;

static const char *const k_entity_names[] = {"", "polymer", "non-polymer", "branched", "water",
                                              "macrolide"};
static const char *const k_poly_names[] = {
    "", "polypeptide(L)", "polypeptide(D)", "polydeoxyribonucleotide", "polyribonucleotide",
    "polydeoxyribonucleotide/polyribonucleotide hybrid"};

/* META line: resolution, method, table sizes. Returns #problems. */
static int compare_meta(const mf_structure *s, char **f, int nf, const char *path) {
  if (nf != 10) {
    printf("  %s: malformed META line\n", path);
    return 1;
  }
  double res = strtod(f[1], NULL);
  int ncov = 0;
  for (int32_t i = 0; i < s->n_conns; i++) ncov += s->conns[i].covalent;
  int same_res = (isnan(res) && isnan(s->resolution)) || res == s->resolution;
  if (same_res && strcmp(f[2], s->method) == 0 && atol(f[3]) == s->n_entities &&
      atol(f[4]) == s->n_poly_seq && atol(f[5]) == s->n_conns && atol(f[6]) == ncov &&
      atol(f[7]) == s->n_assemblies && atol(f[8]) == s->n_assembly_gens &&
      atol(f[9]) == s->n_opers)
    return 0;
  printf("  %s: gemmi META %s '%s' %s %s %s %s %s %s %s; megafold %g '%s' %d %lld %d %d %d %d %d\n",
         path, f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], s->resolution, s->method,
         s->n_entities, (long long)s->n_poly_seq, s->n_conns, ncov, s->n_assemblies,
         s->n_assembly_gens, s->n_opers);
  return 1;
}

/* ENTITY line number k: id, type, polymer type, canonical sequence. */
static int compare_entity(const mf_structure *s, int k, char **f, int nf, const char *path) {
  if (k >= s->n_entities || nf != 5) {
    printf("  %s: ENTITY line %d: megafold has %d entities\n", path, k, s->n_entities);
    return 1;
  }
  const mf_entity *e = &s->entities[k];
  int type_ok = e->type == MF_ENTITY_UNKNOWN ? 1 : strcmp(f[2], k_entity_names[e->type]) == 0;
  int poly_ok = e->poly_type == MF_POLY_OTHER ? f[3][0] != '\0'
                                              : strcmp(f[3], k_poly_names[e->poly_type]) == 0;
  if (strcmp(f[1], e->id) == 0 && type_ok && poly_ok && strcmp(f[4], e->seq_can) == 0) return 0;
  printf("  %s: entity %d: gemmi %s %s %s %.20s..., megafold %s %d %d %.20s...\n", path, k, f[1],
         f[2], f[3], f[4], e->id, (int)e->type, (int)e->poly_type, e->seq_can);
  return 1;
}

/* Compares one file's gemmi block (lines until END) with our structure. Returns #problems. */
static int compare_file(FILE *fp, const char *path, char *line, size_t cap, compare_stats *cs,
                        int *pending) {
  mf_structure *s = NULL;
  double t0 = mf_time_now();
  mf_cif_doc *doc = NULL;
  mf_status st = mf_cif_read(path, &doc);
  if (st == MF_OK) {
    cs->bytes += (int64_t)mf_cif_bytes(doc);
    st = mf_structure_from_cif(doc, 0, &s);
    mf_cif_free(doc);
  }
  cs->seconds += mf_time_now() - t0;
  int problems = 0;
  if (st != MF_OK) {
    printf("  %s: megafold: %s\n", path, mf_error_message());
    problems++;
  }
  int32_t c = -1;
  int64_t atom = 0, chain_end = 0;
  int n_entity_lines = 0;
  char *f[12];
  while (fgets(line, (int)cap, fp)) {
    if (strncmp(line, "FILE\t", 5) == 0 || strncmp(line, "ERROR\t", 6) == 0) {
      printf("  %s: gemmi block cut short\n", path);
      problems++;
      *pending = 1; /* the caller handles this line next */
      break;
    }
    int nf = split_tabs(line, f, 12);
    if (strcmp(f[0], "END") == 0) break;
    if (!s) continue;
    if (strcmp(f[0], "META") == 0) {
      problems += compare_meta(s, f, nf, path);
      continue;
    }
    if (strcmp(f[0], "ENTITY") == 0) {
      problems += compare_entity(s, n_entity_lines++, f, nf, path);
      continue;
    }
    if (strcmp(f[0], "CHAIN") == 0 && nf == 4) {
      if (atom != chain_end && problems++ < 5)
        printf("  %s: chain %s: %lld atoms compared, expected %lld\n", path,
               c >= 0 ? s->chain_id[c] : "-", (long long)atom, (long long)chain_end);
      c++;
      if (c >= s->n_chains) {
        if (problems++ < 5) printf("  %s: gemmi has more chains than %d\n", path, s->n_chains);
        break;
      }
      int64_t nres = s->chain_res_start[c + 1] - s->chain_res_start[c];
      int64_t a0 = s->res_atom_start[s->chain_res_start[c]];
      int64_t a1 = s->res_atom_start[s->chain_res_start[c + 1]];
      if ((strcmp(f[1], s->chain_id[c]) != 0 || atol(f[2]) != nres || atol(f[3]) != a1 - a0) &&
          problems++ < 5)
        printf("  %s: chain %d: gemmi %s %s res %s atoms, megafold %s %lld res %lld atoms\n", path,
               c, f[1], f[2], f[3], s->chain_id[c], (long long)nres, (long long)(a1 - a0));
      atom = a0;
      chain_end = a0 + atol(f[3]);
      continue;
    }
    if (strcmp(f[0], "A") == 0 && nf == 7) {
      if (c < 0 || atom >= s->n_atoms || atom >= chain_end) {
        if (problems++ < 5) printf("  %s: extra gemmi atom %s\n", path, f[1]);
        continue;
      }
      int64_t r = mf_structure_atom_residue(s, atom);
      double dx = fabs(strtod(f[4], NULL) - s->xyz[3 * atom]),
             dy = fabs(strtod(f[5], NULL) - s->xyz[3 * atom + 1]),
             dz = fabs(strtod(f[6], NULL) - s->xyz[3 * atom + 2]);
      if ((strcmp(f[1], s->atom_name[atom]) != 0 || strcmp(f[2], s->res_name[r]) != 0 ||
           strcmp(f[3], s->element[atom]) != 0 || !(dx <= 1e-3 && dy <= 1e-3 && dz <= 1e-3)) &&
          problems++ < 5)
        printf("  %s: atom %lld: gemmi %s %s %s (%s %s %s), megafold %s %s %s (%g %g %g)\n", path,
               (long long)atom, f[1], f[2], f[3], f[4], f[5], f[6], s->atom_name[atom],
               s->res_name[r], s->element[atom], s->xyz[3 * atom], s->xyz[3 * atom + 1],
               s->xyz[3 * atom + 2]);
      atom++;
      continue;
    }
    if (problems++ < 5) printf("  %s: unexpected dump line '%s'\n", path, f[0]);
  }
  if (s) {
    if (atom != chain_end && problems++ < 5)
      printf("  %s: last chain: %lld atoms compared, expected %lld\n", path, (long long)atom,
             (long long)chain_end);
    if (n_entity_lines != s->n_entities && problems++ < 5)
      printf("  %s: gemmi %d entities, megafold %d\n", path, n_entity_lines, s->n_entities);
    if (c + 1 != s->n_chains && problems++ < 5)
      printf("  %s: gemmi %d chains, megafold %d\n", path, c + 1, s->n_chains);
    cs->atoms += s->n_atoms;
    for (int32_t g = 0; g < s->n_assembly_gens; g++) { /* every generator expands */
      int64_t np;
      int32_t nfac;
      int32_t *seq = NULL;
      mf_status es = mf_structure_expand_opers(s, g, NULL, 0, &np, &nfac);
      if (es == MF_OK && (seq = malloc((size_t)(np * nfac) * sizeof *seq)))
        es = mf_structure_expand_opers(s, g, seq, np * nfac, &np, &nfac);
      if (es != MF_OK && problems++ < 5) printf("  %s: %s\n", path, mf_error_message());
      cs->products += np;
      free(seq);
    }
  }
  mf_structure_free(s);
  return problems;
}

static void test_against_gemmi(void) {
  struct stat sb;
  if (stat(DATA_DIR, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    printf("SKIP gemmi comparison: %s not found (run from the repo root with the shared data)\n",
           DATA_DIR);
    return;
  }
  int have_gemmi = system("/usr/bin/python3 -c 'import gemmi' >/dev/null 2>&1") == 0;
  MF_TEST(have_gemmi, "gemmi importable by /usr/bin/python3 (install python3-gemmi: "
          "scripts/install-deps.sh)");
  if (!have_gemmi) return;
  char **files = NULL;
  int n = list_dir(DATA_DIR, &files);
  MF_TEST(n > 0, "%d mmCIF files in %s", n, DATA_DIR);
  if (n <= 0) return;
  size_t cmdcap = 64;
  for (int i = 0; i < n; i++) cmdcap += strlen(files[i]) + 3;
  char *cmd = malloc(cmdcap);
  size_t k = (size_t)sprintf(cmd, "/usr/bin/python3 tools/gemmi_dump.py");
  for (int i = 0; i < n; i++) k += (size_t)sprintf(cmd + k, " '%s'", files[i]);
  double t0 = mf_time_now();
  FILE *fp = popen(cmd, "r");
  MF_TEST(fp != NULL, "run tools/gemmi_dump.py");
  if (!fp) return;
  static char line[4096];
  compare_stats cs;
  memset(&cs, 0, sizeof cs);
  int seen = 0;
  int pending = 0;
  while (pending || fgets(line, sizeof line, fp)) {
    pending = 0;
    char *f[4];
    int nf = split_tabs(line, f, 4);
    if (strcmp(f[0], "ERROR") == 0) {
      printf("  gemmi could not read %s: %s\n", nf > 1 ? f[1] : "?", nf > 2 ? f[2] : "");
      cs.files_bad++;
      seen++;
      continue;
    }
    if (strcmp(f[0], "FILE") != 0 || nf < 2) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s", f[1]);
    int problems = compare_file(fp, path, line, sizeof line, &cs, &pending);
    seen++;
    if (problems) cs.files_bad++;
    else cs.files_ok++;
  }
  int rc = pclose(fp);
  double total = mf_time_now() - t0;
  MF_TEST(rc == 0 && seen == n, "gemmi_dump ran on all files (%d of %d, exit %d)", seen, n, rc);
  MF_TEST(cs.files_bad == 0 && cs.files_ok == n,
          "chains, residue and atom counts, names, elements, coordinates, resolution, method, "
          "entities, sequences and table sizes agree with gemmi "
          "for %d of %d files (%d differ)", cs.files_ok, n, cs.files_bad);
  printf("  assembly generators of all files expand to %lld operator products\n",
         (long long)cs.products);
  printf("  gemmi comparison: %d files, %lld atoms, %.1f MB of text; megafold read+build %.3f s "
         "(%.0f MB/s incl. gunzip); whole check %.1f s\n",
         n, (long long)cs.atoms, cs.bytes / 1e6, cs.seconds, cs.bytes / 1e6 / cs.seconds, total);
  for (int i = 0; i < n; i++) free(files[i]);
  free(files);
  free(cmd);
}

int main(void) {
  mf_test_begin("test_cif");
  test_tokens();
  test_numbers();
  test_errors();
  test_gzip();
  test_truncations();
  test_mutations();
  test_alloc_failures();
  test_structure();
  test_many_entities();
  test_fuzz_regressions();
  test_against_gemmi(); /* ~9 s, also under ASan: every file is parsed in both builds */
  return mf_test_end();
}
