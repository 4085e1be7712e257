/* test_a3m.c — residue classes, the gzip/plain file reader, the a3m reader and the MSA
 * features (hand-written alignments with hand-computed values; ragged, empty, binary and
 * truncated/corrupt gzip inputs; allocation failures), then every a3m file of
 * ../shared/data/msa against ../shared/data/msa_manifest.tsv (seq_length, n_sequences).
 * Not here: FASTA and JSON inputs (test_input.c), the CCD (test_ccd.c). */
#define _POSIX_C_SOURCE 200809L /* strdup, mkdtemp */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "data/a3m.h"
#include "data/residue.h"
#include "data/textfile.h"
#include "harness.h"

#define MSA_DIR "../shared/data/msa"
#define MSA_MANIFEST "../shared/data/msa_manifest.tsv"

static char g_tmpdir[64];

static void tmp_path(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", g_tmpdir, name);
}

/* gzip-compresses data into an malloc'd buffer (test helper, plain zlib). */
static unsigned char *gzip_bytes(const char *data, size_t n, size_t *out_n) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  MF_ASSERT(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK, "zlib");
  size_t cap = deflateBound(&zs, (uLong)n) + 64;
  unsigned char *out = malloc(cap);
  zs.next_in = (Bytef *)data;
  zs.avail_in = (uInt)n;
  zs.next_out = out;
  zs.avail_out = (uInt)cap;
  MF_ASSERT(deflate(&zs, Z_FINISH) == Z_STREAM_END, "zlib");
  *out_n = cap - zs.avail_out;
  deflateEnd(&zs);
  return out;
}

/* ------------------------------------------------------------------ residue classes */
static void test_restype(void) {
  static const char *three[20] = {"ALA", "ARG", "ASN", "ASP", "CYS", "GLN", "GLU",
                                  "GLY", "HIS", "ILE", "LEU", "LYS", "MET", "PHE",
                                  "PRO", "SER", "THR", "TRP", "TYR", "VAL"};
  static const char one[21] = "ARNDCQEGHILKMFPSTWYV";
  int ok = 1;
  for (int k = 0; k < 20; k++) {
    ok &= mf_restype_from_ccd(three[k]) == k && strcmp(mf_restype_name(k), three[k]) == 0;
    ok &= mf_restype_from_letter(one[k], MF_MOL_PROTEIN) == k;
    ok &= mf_restype_from_letter((char)(one[k] + 32), MF_MOL_PROTEIN) == k; /* lower case */
    ok &= mf_restype_letter(k) == one[k];
    if (k > 0) ok &= strcmp(three[k - 1], three[k]) < 0; /* alphabetical by 3-letter code */
  }
  MF_TEST(ok, "20 amino acids: alphabetical 3-letter order, one-letter codes, both cases");
  static const struct {
    const char *code;
    int cls;
  } nuc[] = {{"UNK", 20}, {"A", 21}, {"G", 22}, {"C", 23}, {"U", 24}, {"N", 25},
             {"DA", 26},  {"DG", 27}, {"DC", 28}, {"DT", 29}, {"DN", 30}};
  ok = 1;
  for (size_t k = 0; k < sizeof nuc / sizeof nuc[0]; k++) {
    ok &= mf_restype_from_ccd(nuc[k].code) == nuc[k].cls;
    ok &= strcmp(mf_restype_name(nuc[k].cls), nuc[k].code) == 0;
  }
  MF_TEST(ok, "UNK=20, A G C U=21-24, N=25, DA DG DC DT=26-29, DN=30");
  MF_TEST(mf_restype_from_ccd("MSE") == -1 && mf_restype_from_ccd("HOH") == -1 &&
              mf_restype_from_ccd("") == -1 && mf_restype_from_ccd("-") == -1 &&
              mf_restype_from_ccd(NULL) == -1,
          "non-standard CCD codes are not classes");
  MF_TEST(mf_restype_from_letter('X', MF_MOL_PROTEIN) == MF_RESTYPE_UNK &&
              mf_restype_from_letter('J', MF_MOL_PROTEIN) == MF_RESTYPE_UNK &&
              mf_restype_from_letter('O', MF_MOL_PROTEIN) == MF_RESTYPE_UNK &&
              mf_restype_from_letter('B', MF_MOL_PROTEIN) == MF_RESTYPE_ASP &&
              mf_restype_from_letter('Z', MF_MOL_PROTEIN) == MF_RESTYPE_GLU &&
              mf_restype_from_letter('U', MF_MOL_PROTEIN) == MF_RESTYPE_CYS,
          "protein X J O -> UNK, B -> ASP, Z -> GLU, U -> CYS");
  MF_TEST(mf_restype_from_letter('A', MF_MOL_RNA) == 21 &&
              mf_restype_from_letter('G', MF_MOL_RNA) == 22 &&
              mf_restype_from_letter('C', MF_MOL_RNA) == 23 &&
              mf_restype_from_letter('u', MF_MOL_RNA) == 24 &&
              mf_restype_from_letter('T', MF_MOL_RNA) == 25 &&
              mf_restype_from_letter('X', MF_MOL_RNA) == 25,
          "RNA letters");
  MF_TEST(mf_restype_from_letter('A', MF_MOL_DNA) == 26 &&
              mf_restype_from_letter('G', MF_MOL_DNA) == 27 &&
              mf_restype_from_letter('c', MF_MOL_DNA) == 28 &&
              mf_restype_from_letter('T', MF_MOL_DNA) == 29 &&
              mf_restype_from_letter('U', MF_MOL_DNA) == 30 &&
              mf_restype_from_letter('N', MF_MOL_DNA) == 30,
          "DNA letters");
  int gap_ok = 1;
  for (int t = MF_MOL_PROTEIN; t <= MF_MOL_LIGAND; t++) {
    gap_ok &= mf_restype_from_letter('-', (mf_moltype)t) == MF_RESTYPE_GAP;
    gap_ok &= mf_restype_from_letter('1', (mf_moltype)t) == -1;
    gap_ok &= mf_restype_from_letter('*', (mf_moltype)t) == -1;
  }
  MF_TEST(gap_ok && MF_RESTYPE_GAP == 31 && mf_restype_letter(31) == '-' &&
              mf_restype_name(32) == NULL && mf_restype_letter(-1) == 0,
          "gap = 31 for every molecule type; non-letters -1; range checks");
  MF_TEST(mf_restype_moltype(MF_RESTYPE_U) == MF_MOL_RNA &&
              mf_restype_moltype(MF_RESTYPE_DN) == MF_MOL_DNA &&
              mf_restype_moltype(MF_RESTYPE_UNK) == MF_MOL_PROTEIN &&
              mf_restype_letter(MF_RESTYPE_DT) == 'T' && mf_restype_letter(MF_RESTYPE_UNK) == 'X',
          "moltype of a class, nucleotide letters");
}

/* ------------------------------------------------------------------ hand-written a3m */
/* Query MKVLA over two lines; row 2 has insertions "mk" before a gap and "a" before V;
 * row 3 has "lvq" before V, "x" before L and trailing insertions "yy" (counted nowhere). */
static const char k_a3m[] = ">query chain A\n"
                            "MKV\n"
                            "LA\n"
                            ">hit1/1-5 desc\n"
                            "mk-aVLQ\n"
                            "A\n"
                            "\n"
                            ">hit2\n"
                            "-KlvqVxLAyy\n";

static void check_hand_a3m(const mf_a3m *a, const char *what) {
  static const uint8_t msa[3][5] = {{12, 11, 19, 10, 0}, {31, 19, 10, 5, 0}, {31, 11, 19, 10, 0}};
  static const int32_t del[3][5] = {{0, 0, 0, 0, 0}, {2, 1, 0, 0, 0}, {0, 0, 3, 1, 0}};
  MF_TEST(a->S == 3 && a->N == 5, "%s: S=%lld N=%lld, want 3 x 5", what, (long long)a->S,
          (long long)a->N);
  if (a->S != 3 || a->N != 5) return;
  MF_TEST(memcmp(a->msa, msa, sizeof msa) == 0, "%s: msa classes", what);
  MF_TEST(memcmp(a->deletions, del, sizeof del) == 0, "%s: deletion counts", what);
  MF_TEST(strcmp(a->query, "MKVLA") == 0, "%s: query '%s'", what, a->query);
  MF_TEST(strcmp(mf_a3m_name(a, 0), "query chain A") == 0 &&
              strcmp(mf_a3m_name(a, 1), "hit1/1-5 desc") == 0 &&
              strcmp(mf_a3m_name(a, 2), "hit2") == 0 && mf_a3m_name(a, 3) == NULL,
          "%s: record names", what);
}

static void test_a3m_hand(void) {
  mf_a3m a;
  mf_status st = mf_a3m_parse(k_a3m, strlen(k_a3m), "hand.a3m", MF_MOL_PROTEIN, &a);
  MF_TEST(st == MF_OK, "parse hand a3m: %s", mf_error_message());
  if (st != MF_OK) return;
  check_hand_a3m(&a, "hand.a3m");

  /* ColabFold/MMseqs2 files open with "#<lengths>\t<cardinalities>"; '#' lines are skipped */
  {
    static const char k_colab[] = "#5\t1\n"
                                  ">query chain A\n"
                                  "MKV\n"
                                  "LA\n"
                                  "# a comment between records\n"
                                  ">hit1/1-5 desc\n"
                                  "mk-aVLQ\n"
                                  "A\n"
                                  "\n"
                                  ">hit2\n"
                                  "-KlvqVxLAyy\n";
    mf_a3m c;
    mf_status sc = mf_a3m_parse(k_colab, strlen(k_colab), "colab.a3m", MF_MOL_PROTEIN, &c);
    MF_TEST(sc == MF_OK, "a3m with a ColabFold '#' header: %s", mf_error_message());
    if (sc == MF_OK) check_hand_a3m(&c, "colab.a3m");
    mf_a3m_free(&c);
  }

  mf_msa_features f;
  st = mf_msa_features_compute(&a, &f);
  MF_TEST(st == MF_OK && f.S == 3 && f.N == 5, "features");
  if (st == MF_OK) {
    /* d=1: (2/pi) atan(1/3); d=2: (2/pi) atan(2/3); d=3: (2/pi) atan(1) = 1/2 */
    const double v1 = 0.20483276469913345, v2 = 0.3743340836219976, v3 = 0.5;
    const double dv[15] = {0, 0, 0, 0, 0, v2, v1, 0, 0, 0, 0, 0, v3, v1, 0};
    const double hd[15] = {0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0};
    double got_dv[15], got_hd[15];
    for (int k = 0; k < 15; k++) {
      got_dv[k] = f.deletion_value[k];
      got_hd[k] = f.has_deletion[k];
    }
    MF_TEST(mf_test_maxabs(got_dv, dv, 15) < 1e-7, "deletion_value vs hand values");
    MF_TEST(mf_test_maxabs(got_hd, hd, 15) == 0, "has_deletion vs hand values");
    /* deletion_mean: column sums 2, 1, 3, 1, 0 over 3 rows */
    const double dm[5] = {2.0 / 3, 1.0 / 3, 1.0, 1.0 / 3, 0};
    double got_dm[5];
    for (int k = 0; k < 5; k++) got_dm[k] = f.deletion_mean[k];
    MF_TEST(mf_test_maxabs(got_dm, dm, 5) < 1e-7, "deletion_mean vs hand values");
    /* profile: col0 MET 1/3 gap 2/3; col1 LYS 2/3 VAL 1/3; col2 VAL 2/3 LEU 1/3;
     * col3 LEU 2/3 GLN 1/3; col4 ALA 1 */
    double prof[5 * 32] = {0}, got_p[5 * 32];
    prof[0 * 32 + 12] = 1.0 / 3, prof[0 * 32 + 31] = 2.0 / 3;
    prof[1 * 32 + 11] = 2.0 / 3, prof[1 * 32 + 19] = 1.0 / 3;
    prof[2 * 32 + 19] = 2.0 / 3, prof[2 * 32 + 10] = 1.0 / 3;
    prof[3 * 32 + 10] = 2.0 / 3, prof[3 * 32 + 5] = 1.0 / 3;
    prof[4 * 32 + 0] = 1.0;
    for (int k = 0; k < 5 * 32; k++) got_p[k] = f.profile[k];
    MF_TEST(mf_test_maxabs(got_p, prof, 5 * 32) < 1e-7, "profile vs hand values");
    double worst = 0;
    for (int j = 0; j < 5; j++) {
      double s = 0;
      for (int k = 0; k < 32; k++) s += f.profile[j * 32 + k];
      worst = fmax(worst, fabs(s - 1));
    }
    MF_TEST(worst < 1e-6, "profile rows sum to 1 (worst %g)", worst);
    mf_msa_features_free(&f);
    MF_TEST(f.profile == NULL, "features freed and zeroed");
  }
  mf_a3m_free(&a);
  MF_TEST(a.msa == NULL && a.S == 0, "a3m freed and zeroed");
  mf_a3m_free(&a); /* twice: harmless on a zeroed struct */

  /* The same alignment with CRLF line ends, a2m '.' padding and blanks inside lines. */
  static const char crlf[] = ">query chain A\r\nM K V\r\nLA\r\n>hit1/1-5 desc\r\nmk-a.VLQ\r\n"
                             "A\r\n\r\n>hit2\r\n-Klvq..VxLAyy";
  st = mf_a3m_parse(crlf, strlen(crlf), "crlf.a3m", MF_MOL_PROTEIN, &a);
  MF_TEST(st == MF_OK, "CRLF/blank/'.' variant parses: %s", mf_error_message());
  if (st == MF_OK) check_hand_a3m(&a, "crlf.a3m");
  mf_a3m_free(&a);

  /* text need not be NUL-terminated: parse a prefix of a longer buffer */
  static const char prefix[] = ">q\nACD\n>h\nA-D\n>GARBAGE 123";
  st = mf_a3m_parse(prefix, 14, "prefix", MF_MOL_PROTEIN, &a);
  MF_TEST(st == MF_OK && a.S == 2 && a.N == 3 && a.msa[4] == MF_RESTYPE_GAP,
          "length-bounded parse: %s", mf_error_message());
  mf_a3m_free(&a);

  /* single-sequence MSA: only the query */
  st = mf_a3m_parse(">q\nACDEFGHIKLMNPQRSTVWYXBZ", 26, "single", MF_MOL_PROTEIN, &a);
  MF_TEST(st == MF_OK && a.S == 1 && a.N == 23, "query-only a3m: %s", mf_error_message());
  if (st == MF_OK) {
    int ok = 1;
    static const char one[] = "ARNDCQEGHILKMFPSTWYV";
    for (int j = 0; j < 20; j++) ok &= a.msa[j] == (uint8_t)(strchr(one, a.query[j]) - one);
    ok &= a.msa[20] == MF_RESTYPE_UNK && a.msa[21] == MF_RESTYPE_ASP && a.msa[22] == MF_RESTYPE_GLU;
    MF_TEST(ok, "query-only: classes of all letters");
    mf_msa_features f1;
    st = mf_msa_features_compute(&a, &f1);
    int pok = st == MF_OK;
    for (int64_t j = 0; pok && j < a.N; j++) pok &= f1.profile[j * 32 + a.msa[j]] == 1.0f;
    MF_TEST(pok, "query-only: profile is the one-hot query");
    mf_msa_features_free(&f1);
  }
  mf_a3m_free(&a);

  /* RNA letters */
  st = mf_a3m_parse(">r\nACGUN\n>h\nA-gGUT\n", 19, "rna", MF_MOL_RNA, &a);
  static const uint8_t rna[10] = {21, 23, 22, 24, 25, 21, 31, 22, 24, 25};
  MF_TEST(st == MF_OK && a.N == 5 && memcmp(a.msa, rna, 10) == 0 && a.deletions[7] == 1,
          "RNA a3m classes: %s", mf_error_message());
  mf_a3m_free(&a);
}

/* ------------------------------------------------------------------ errors */
static int expect_error(const char *text, size_t len, mf_status want, const char *needle1,
                        const char *needle2) {
  mf_a3m a;
  mf_status st = mf_a3m_parse(text, len, "bad.a3m", MF_MOL_PROTEIN, &a);
  const char *msg = mf_error_message();
  int ok = st == want && a.msa == NULL && a.S == 0 && strstr(msg, "bad.a3m") &&
           (!needle1 || strstr(msg, needle1)) && (!needle2 || strstr(msg, needle2));
  if (!ok) printf("  status %s, message: %s\n", mf_status_name(st), msg);
  mf_a3m_free(&a);
  return ok;
}

static void test_a3m_errors(void) {
  static const char ragged[] = ">q\nACDEF\n>h1\nAC-EF\n>h2\nACdEF\n>h3\nACDEFG\n";
  MF_TEST(expect_error(ragged, strlen(ragged), MF_ERR_FORMAT, "record 3", "4 aligned columns"),
          "short row: record and counts named");
  MF_TEST(expect_error(ragged, strlen(ragged), MF_ERR_FORMAT, "has 5", "line 5"),
          "short row: query count and line named");
  static const char longrow[] = ">q\nACD\n>h1\nACDE";
  MF_TEST(expect_error(longrow, strlen(longrow), MF_ERR_FORMAT, "record 2", "4 aligned columns"),
          "long last row (no final newline)");
  static const char emptyrow[] = ">q\nACD\n>h1\n";
  MF_TEST(expect_error(emptyrow, strlen(emptyrow), MF_ERR_FORMAT, "record 2", "0 aligned"),
          "header without sequence at the end");
  MF_TEST(expect_error("", 0, MF_ERR_FORMAT, "empty", NULL), "empty input");
  MF_TEST(expect_error("\n\n  \n", 5, MF_ERR_FORMAT, "empty", NULL), "blank input");
  MF_TEST(expect_error("ACD\n>q\nACD\n", 11, MF_ERR_FORMAT, "before the first", "line 1"),
          "sequence before the first header");
  MF_TEST(expect_error(">q\n\n>h\nA\n", 9, MF_ERR_FORMAT, "no residues", "record 1"),
          "query without residues");
  MF_TEST(expect_error(">q\nAC1D\n", 8, MF_ERR_FORMAT, "'1'", "column 3"), "digit in a sequence");
  MF_TEST(expect_error(">q\nACD*\n", 8, MF_ERR_FORMAT, "'*'", "record 1"), "'*' in a sequence");
  static const char bin[] = ">q\nAC\0D\n";
  MF_TEST(expect_error(bin, sizeof bin - 1, MF_ERR_FORMAT, "binary", "offset 5"), "NUL byte");
  unsigned char junk[256];
  uint64_t x = 88172645463325252ull;
  junk[0] = '>';
  for (int k = 1; k < 256; k++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    junk[k] = (unsigned char)(0x80 | (x & 0x7f)); /* high bytes, no NUL */
  }
  junk[10] = '\n';
  MF_TEST(expect_error((const char *)junk, sizeof junk, MF_ERR_FORMAT, "invalid sequence", "byte 0x"),
          "binary without NUL bytes");

  /* IO */
  mf_a3m a;
  mf_status st = mf_a3m_read("/nonexistent/dir/x.a3m", MF_MOL_PROTEIN, &a);
  MF_TEST(st == MF_ERR_IO && strstr(mf_error_message(), "/nonexistent/dir/x.a3m") &&
              a.msa == NULL,
          "missing file: MF_ERR_IO naming it (%s)", mf_error_message());
  st = mf_a3m_read(g_tmpdir, MF_MOL_PROTEIN, &a); /* a directory */
  MF_TEST(st == MF_ERR_IO, "directory: MF_ERR_IO (%s: %s)", mf_status_name(st),
          mf_error_message());
}

/* ------------------------------------------------------------------ files and gzip */
static void test_files_gzip(void) {
  char plain[128], gz[128], trunc[128], corrupt[128], multi[128], garbage[128];
  tmp_path(plain, sizeof plain, "hand.a3m");
  tmp_path(gz, sizeof gz, "hand.a3m.gz");
  tmp_path(trunc, sizeof trunc, "trunc.a3m.gz");
  tmp_path(corrupt, sizeof corrupt, "corrupt.a3m.gz");
  tmp_path(multi, sizeof multi, "multi.a3m.gz");
  tmp_path(garbage, sizeof garbage, "garbage.a3m.gz");
  size_t n = strlen(k_a3m), zn = 0;
  mf_test_write_file(plain, k_a3m, n);
  unsigned char *z = gzip_bytes(k_a3m, n, &zn);
  mf_test_write_file(gz, z, zn);

  mf_a3m a;
  mf_status st = mf_a3m_read(plain, MF_MOL_PROTEIN, &a);
  MF_TEST(st == MF_OK, "plain file: %s", mf_error_message());
  if (st == MF_OK) check_hand_a3m(&a, "plain file");
  mf_a3m_free(&a);
  st = mf_a3m_read(gz, MF_MOL_PROTEIN, &a);
  MF_TEST(st == MF_OK, "gzip file: %s", mf_error_message());
  if (st == MF_OK) check_hand_a3m(&a, "gzip file");
  mf_a3m_free(&a);

  /* every truncation of the gzip stream is an error naming the file, never a short MSA */
  int all_err = 1, named = 1;
  for (size_t cut = 1; cut < zn; cut++) {
    mf_test_write_file(trunc, z, cut);
    st = mf_a3m_read(trunc, MF_MOL_PROTEIN, &a);
    all_err &= st == MF_ERR_FORMAT && a.msa == NULL;
    named &= strstr(mf_error_message(), "trunc.a3m.gz") != NULL;
    mf_a3m_free(&a);
  }
  MF_TEST(all_err && named, "all %zu truncations of the gzip file fail with MF_ERR_FORMAT", zn - 1);
  mf_test_write_file(trunc, z, zn / 2);
  st = mf_a3m_read(trunc, MF_MOL_PROTEIN, &a);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "truncated gzip"),
          "truncated in the middle: %s", mf_error_message());

  /* corrupt deflate data */
  unsigned char *c = malloc(zn);
  memcpy(c, z, zn);
  for (size_t k = 12; k < zn - 8; k++) c[k] ^= 0x5a;
  mf_test_write_file(corrupt, c, zn);
  st = mf_a3m_read(corrupt, MF_MOL_PROTEIN, &a);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "corrupt.a3m.gz"),
          "corrupt gzip: %s", mf_error_message());
  mf_a3m_free(&a);
  /* wrong CRC (last member's trailer) */
  memcpy(c, z, zn);
  c[zn - 6] ^= 0xff;
  mf_test_write_file(corrupt, c, zn);
  st = mf_a3m_read(corrupt, MF_MOL_PROTEIN, &a);
  MF_TEST(st == MF_ERR_FORMAT, "gzip CRC mismatch: %s", mf_error_message());
  mf_a3m_free(&a);

  /* multi-member gzip (cat a.gz b.gz) = the concatenated text */
  size_t half = 40, z1n, z2n;
  unsigned char *z1 = gzip_bytes(k_a3m, half, &z1n), *z2 = gzip_bytes(k_a3m + half, n - half, &z2n);
  unsigned char *m = malloc(z1n + z2n + 8);
  memcpy(m, z1, z1n);
  memcpy(m + z1n, z2, z2n);
  mf_test_write_file(multi, m, z1n + z2n);
  st = mf_a3m_read(multi, MF_MOL_PROTEIN, &a);
  MF_TEST(st == MF_OK, "multi-member gzip: %s", mf_error_message());
  if (st == MF_OK) check_hand_a3m(&a, "multi-member gzip");
  mf_a3m_free(&a);
  /* zero padding after the stream is accepted; other trailing bytes are not */
  memset(m + z1n + z2n, 0, 8);
  mf_test_write_file(multi, m, z1n + z2n + 8);
  st = mf_a3m_read(multi, MF_MOL_PROTEIN, &a);
  MF_TEST(st == MF_OK, "gzip + zero padding: %s", mf_error_message());
  mf_a3m_free(&a);
  memcpy(m + z1n + z2n, "garbage!", 8);
  mf_test_write_file(garbage, m, z1n + z2n + 8);
  st = mf_a3m_read(garbage, MF_MOL_PROTEIN, &a);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "trailing garbage"),
          "gzip + trailing garbage: %s", mf_error_message());
  mf_a3m_free(&a);

  /* empty file, gzip of nothing */
  mf_test_write_file(plain, "", 0);
  st = mf_a3m_read(plain, MF_MOL_PROTEIN, &a);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "empty"), "empty file: %s",
          mf_error_message());
  size_t en;
  unsigned char *e = gzip_bytes("", 0, &en);
  mf_test_write_file(gz, e, en);
  st = mf_a3m_read(gz, MF_MOL_PROTEIN, &a);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "empty"), "gzip of nothing: %s",
          mf_error_message());

  /* a large text (several output buffer doublings) round-trips through gzip */
  size_t big_n = 3u << 20;
  char *big = malloc(big_n);
  for (size_t k = 0; k < big_n; k++) big[k] = (char)('A' + (k * 7919 % 26));
  size_t bzn;
  unsigned char *bz = gzip_bytes(big, big_n, &bzn);
  char *back = NULL;
  size_t back_n = 0;
  st = mf_textfile_from_bytes(bz, bzn, "big", &back, &back_n);
  MF_TEST(st == MF_OK && back_n == big_n && memcmp(back, big, big_n) == 0 && back[big_n] == 0,
          "3 MiB gzip round trip (%zu compressed bytes)", bzn);
  mf_free(back);

  /* allocation failures are reported, never crash or leak */
  int64_t before = mf_mem_stats(MF_HOST).current;
  int nomem = 0, k = 0;
  for (; k < 64; k++) {
    mf_alloc_fail_after(k);
    st = mf_a3m_read(multi, MF_MOL_PROTEIN, &a);
    mf_alloc_fail_after(-1);
    if (st == MF_OK) break;
    nomem += st == MF_ERR_NOMEM;
  }
  if (st == MF_OK) {
    mf_msa_features f;
    for (int j = 0; j < 16; j++) {
      mf_alloc_fail_after(j);
      mf_status fs = mf_msa_features_compute(&a, &f);
      mf_alloc_fail_after(-1);
      nomem += fs == MF_ERR_NOMEM;
      mf_msa_features_free(&f);
    }
  }
  mf_a3m_free(&a);
  MF_TEST(st == MF_OK && nomem == k + 6 && mf_mem_stats(MF_HOST).current == before,
          "allocation failures: %d NOMEM returns over %d reads, no leak", nomem, k);

  free(z);
  free(c);
  free(z1);
  free(z2);
  free(m);
  free(e);
  free(big);
  free(bz);
  remove(plain);
  remove(gz);
  remove(trunc);
  remove(corrupt);
  remove(multi);
  remove(garbage);
}

/* ------------------------------------------------------------------ shared data */
typedef struct {
  char file[128];
  long seq_length, n_sequences;
  int seen;
} manifest_row;

/* Reads msa_manifest.tsv; finds the seq_length and n_sequences columns by header name. */
static int read_manifest(manifest_row **rows_out) {
  FILE *f = fopen(MSA_MANIFEST, "r");
  if (!f) return -1;
  char line[8192];
  int c_file = -1, c_len = -1, c_n = -1, n = 0, cap = 256;
  manifest_row *rows = calloc((size_t)cap, sizeof *rows);
  if (fgets(line, sizeof line, f)) {
    int col = 0;
    for (char *tok = strtok(line, "\t\r\n"); tok; tok = strtok(NULL, "\t\r\n"), col++) {
      if (!strcmp(tok, "file")) c_file = col;
      if (!strcmp(tok, "seq_length")) c_len = col;
      if (!strcmp(tok, "n_sequences")) c_n = col;
    }
  }
  MF_TEST(c_file >= 0 && c_len >= 0 && c_n >= 0, "manifest header has file, seq_length, n_sequences");
  while (c_file >= 0 && fgets(line, sizeof line, f)) {
    if (n == cap) {
      cap *= 2;
      rows = realloc(rows, (size_t)cap * sizeof *rows);
    }
    manifest_row *r = &rows[n];
    memset(r, 0, sizeof *r);
    r->seq_length = r->n_sequences = -1;
    int col = 0;
    char *save = line;
    for (char *tok = save; tok; col++) {
      char *tab = strchr(tok, '\t');
      if (tab) *tab = 0;
      tok[strcspn(tok, "\r\n")] = 0;
      if (col == c_file) snprintf(r->file, sizeof r->file, "%.127s", tok);
      if (col == c_len) r->seq_length = strtol(tok, NULL, 10);
      if (col == c_n) r->n_sequences = strtol(tok, NULL, 10);
      tok = tab ? tab + 1 : NULL;
    }
    if (r->file[0]) n++;
  }
  fclose(f);
  *rows_out = rows;
  return n;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_shared_msas(void) {
  DIR *d = opendir(MSA_DIR);
  if (!d) {
    printf("skip: %s not found (shared data absent)\n", MSA_DIR);
    return;
  }
  char *names[1024];
  int nf = 0;
  for (struct dirent *e; (e = readdir(d)) && nf < 1024;) {
    size_t l = strlen(e->d_name);
    if ((l > 4 && !strcmp(e->d_name + l - 4, ".a3m")) ||
        (l > 7 && !strcmp(e->d_name + l - 7, ".a3m.gz")))
      names[nf++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)nf, sizeof names[0], cmp_str);
  manifest_row *rows = NULL;
  int nrows = read_manifest(&rows);
  MF_TEST(nf > 0, "%d a3m files in %s", nf, MSA_DIR);

  int parsed = 0, len_ok = 0, count_ok = 0, in_manifest = 0, query_ok = 0, feat_ok = 0;
  int profile_ok = 0;
  int64_t total_rows = 0, total_del = 0;
  double t0 = mf_time_now();
  for (int i = 0; i < nf; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", MSA_DIR, names[i]);
    mf_a3m a;
    mf_status st = mf_a3m_read(path, MF_MOL_PROTEIN, &a);
    if (!MF_TEST(st == MF_OK, "%s: %s", names[i], mf_error_message())) continue;
    parsed++;
    total_rows += a.S;
    /* the query row: residues only, no gaps, no insertions */
    int q = (int64_t)strlen(a.query) == a.N;
    for (int64_t j = 0; j < a.N; j++) q &= a.msa[j] != MF_RESTYPE_GAP && a.deletions[j] == 0;
    query_ok += MF_TEST(q, "%s: query row has gaps or insertions", names[i]);
    for (int64_t k = 0; k < a.S * a.N; k++) total_del += a.deletions[k];
    manifest_row *r = NULL;
    for (int k = 0; k < nrows; k++)
      if (!strcmp(rows[k].file, names[i])) r = &rows[k];
    if (r) {
      in_manifest++;
      r->seen = 1;
      len_ok += MF_TEST(a.N == r->seq_length, "%s: query length %lld, manifest seq_length %ld",
                        names[i], (long long)a.N, r->seq_length);
      count_ok += MF_TEST(a.S == r->n_sequences, "%s: %lld rows, manifest n_sequences %ld",
                          names[i], (long long)a.S, r->n_sequences);
    }
    mf_msa_features f;
    st = mf_msa_features_compute(&a, &f);
    double worst = 0, dmax = 0;
    for (int64_t j = 0; st == MF_OK && j < a.N; j++) {
      double s = 0;
      for (int k = 0; k < 32; k++) s += f.profile[j * 32 + k];
      worst = fmax(worst, fabs(s - 1));
    }
    for (int64_t k = 0; st == MF_OK && k < a.S * a.N; k++) dmax = fmax(dmax, f.deletion_value[k]);
    feat_ok += MF_TEST(st == MF_OK && worst < 1e-5 && dmax < 1.0,
                       "%s: features (profile sum error %g, max deletion_value %g)", names[i],
                       worst, dmax);
    /* mf_msa_profile == the profile and deletion mean of mf_msa_features_compute, and both
     * == an independent count (the formula of [DM] get_profile_features) */
    {
      float *prof = malloc((size_t)a.N * 32 * sizeof(float));
      float *dmean = malloc((size_t)a.N * sizeof(float));
      mf_status sp = mf_msa_profile(&a, prof, dmean);
      int same = st == MF_OK && sp == MF_OK &&
                 !memcmp(prof, f.profile, (size_t)a.N * 32 * sizeof(float)) &&
                 !memcmp(dmean, f.deletion_mean, (size_t)a.N * sizeof(float));
      double *cnt = calloc((size_t)a.N * 32, sizeof(double)), *dsum = calloc((size_t)a.N, sizeof(double));
      for (int64_t row = 0; row < a.S; row++)
        for (int64_t j = 0; j < a.N; j++)
          cnt[j * 32 + a.msa[row * a.N + j]] += 1, dsum[j] += a.deletions[row * a.N + j];
      for (int64_t j = 0; same && j < a.N; j++) {
        for (int k = 0; k < 32; k++) same &= prof[j * 32 + k] == (float)(cnt[j * 32 + k] / (double)a.S);
        same &= dmean[j] == (float)(dsum[j] / (double)a.S);
      }
      profile_ok += MF_TEST(same, "%s: mf_msa_profile == mf_msa_features_compute's profile and "
                            "deletion_mean", names[i]);
      free(prof), free(dmean), free(cnt), free(dsum);
    }
    mf_msa_features_free(&f);
    mf_a3m_free(&a);
  }
  int unseen = 0;
  for (int k = 0; k < nrows; k++) unseen += !rows[k].seen;
  printf("shared MSAs: %d files, %lld rows, %lld deletions in total, %.2f s\n", parsed,
         (long long)total_rows, (long long)total_del, mf_time_now() - t0);
  MF_TEST(nrows < 0 || (in_manifest == nf && unseen == 0),
          "every file is in the manifest and every manifest row has a file (%d of %d, %d unseen)",
          in_manifest, nf, unseen);
  MF_TEST(parsed == nf && query_ok == nf && feat_ok == nf && len_ok == in_manifest &&
              count_ok == in_manifest,
          "all %d files: parsed %d, query length = seq_length %d, rows = n_sequences %d", nf,
          parsed, len_ok, count_ok);
  MF_TEST(total_del > 0, "the real MSAs contain insertions");
  MF_TEST(profile_ok == parsed, "mf_msa_profile equals the full features on %d of %d MSAs",
          profile_ok, parsed);
  /* Totals over the 139 files of the shared set, computed independently with a few lines
   * of Python (gzip + str.islower: lower-case letters before each aligned column). */
  if (nf == 139)
    MF_TEST(total_rows == 111482 && total_del == 501673,
            "shared set totals: %lld rows (want 111482), %lld deletions (want 501673)",
            (long long)total_rows, (long long)total_del);
  for (int i = 0; i < nf; i++) free(names[i]);
  free(rows);
}

/* Reading a plain file allocates its size + 1 once (not 4x growth steps). */
static void test_textfile_memory(void) {
  char path[128];
  tmp_path(path, sizeof path, "big.txt");
  const size_t n = (size_t)3 * 1000 * 1000 + 12345;
  char *buf = malloc(n);
  for (size_t i = 0; i < n; i++) buf[i] = (i % 61 == 60) ? '\n' : (char)('A' + i % 23);
  mf_test_write_file(path, buf, n);
  mf_mem_stats_t before = mf_mem_stats(MF_HOST);
  mf_mem_reset_peak(MF_HOST);
  char *data = NULL;
  size_t len = 0;
  mf_status st = mf_textfile_read(path, &data, &len);
  mf_mem_stats_t after = mf_mem_stats(MF_HOST);
  int64_t extra = after.peak - before.current;
  MF_TEST(st == MF_OK && len == n && data[n] == 0 && !memcmp(data, buf, n),
          "big plain file read whole: %s", mf_error_message());
  MF_TEST(extra <= (int64_t)(1.1 * (double)n), "reading %zu bytes peaks at %lld bytes (<= 1.1x)",
          n, (long long)extra);
  mf_free(data);
  free(buf);
  remove(path);
}

int main(void) {
  mf_test_begin("test_a3m");
  snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/mf_test_a3m_XXXXXX");
  MF_ASSERT(mkdtemp(g_tmpdir) != NULL, "mkdtemp");
  test_restype();
  test_a3m_hand();
  test_a3m_errors();
  test_files_gzip();
  test_textfile_memory();
  test_shared_msas();
  rmdir(g_tmpdir);
  return mf_test_end();
}
