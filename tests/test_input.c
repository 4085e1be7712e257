/* test_input.c — the FASTA reader and the JSON job reader: hand-written inputs with known
 * contents, every documented error (with file and JSON path in the message), gzip input,
 * and allocation failures without leaks. Not here: a3m (test_a3m.c), CCD (test_ccd.c). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "data/input.h"
#include "harness.h"

static char g_tmpdir[64];

/* ------------------------------------------------------------------ FASTA */
static int fasta_error(const char *text, size_t len, const char *n1, const char *n2) {
  mf_fasta f;
  mf_status st = mf_fasta_parse(text, len, "bad.fasta", &f);
  const char *msg = mf_error_message();
  int ok = st == MF_ERR_FORMAT && f.n == 0 && f.text == NULL && strstr(msg, "bad.fasta") &&
           (!n1 || strstr(msg, n1)) && (!n2 || strstr(msg, n2));
  if (!ok) printf("  status %s, message: %s\n", mf_status_name(st), msg);
  mf_fasta_free(&f);
  return ok;
}

static void test_fasta(void) {
  static const char t[] = "\n>sp|P69905|HBA_HUMAN Hemoglobin alpha\r\nMVLSPADKTN\r\nvkaawg*\r\n"
                          ">dna two\nACGT ACGT\n\nAC-GT\n>last";
  mf_fasta f;
  /* the final record has no sequence: an error; the first two alone parse */
  MF_TEST(fasta_error(t, strlen(t), "record 3", "empty sequence"), "record without a sequence");
  size_t cut = (size_t)(strstr(t, ">last") - t);
  mf_status st = mf_fasta_parse(t, cut, "ok.fasta", &f);
  MF_TEST(st == MF_OK && f.n == 2, "two records: %s", mf_error_message());
  if (st == MF_OK && f.n == 2) {
    MF_TEST(!strcmp(mf_fasta_name(&f, 0), "sp|P69905|HBA_HUMAN Hemoglobin alpha") &&
                !strcmp(mf_fasta_seq(&f, 0), "MVLSPADKTNVKAAWG") && f.seq_len[0] == 16,
            "record 1: header without CR, sequence upper-cased, '*' dropped: '%s'",
            mf_fasta_seq(&f, 0));
    MF_TEST(!strcmp(mf_fasta_name(&f, 1), "dna two") &&
                !strcmp(mf_fasta_seq(&f, 1), "ACGTACGTAC-GT") && f.seq_len[1] == 13,
            "record 2: spaces and blank lines skipped, gap kept: '%s'", mf_fasta_seq(&f, 1));
  }
  mf_fasta_free(&f);
  MF_TEST(f.text == NULL && f.n == 0, "freed and zeroed");

  st = mf_fasta_parse(">x\nA", 4, "tiny", &f);
  MF_TEST(st == MF_OK && f.n == 1 && !strcmp(mf_fasta_seq(&f, 0), "A") && f.seq_len[0] == 1,
          "one residue, no final newline");
  mf_fasta_free(&f);

  MF_TEST(fasta_error("", 0, "no FASTA record", NULL), "empty");
  MF_TEST(fasta_error("ACGT\n", 5, "no FASTA record", NULL), "no header at all");
  MF_TEST(fasta_error("AC\n>x\nAC\n", 9, "line 1", "before the first"), "text before the header");
  MF_TEST(fasta_error(">x\nAC1G\n", 8, "'1'", "column 3"), "digit");
  MF_TEST(fasta_error(">x\nAC*G\n", 8, "'G'", "after the final '*'"), "letters after '*'");
  MF_TEST(fasta_error(">x\nAC\x01G\n", 8, "0x01", "record 1"), "control byte");
  MF_TEST(fasta_error(">x\nAC\0G\n", 8, "binary", "offset 5"), "NUL byte");
  MF_TEST(fasta_error(">x\n\n>y\nA\n", 9, "record 1", "line 1"), "empty first record");

  /* gzip file */
  char path[128];
  snprintf(path, sizeof path, "%s/seqs.fasta.gz", g_tmpdir);
  gzFile gz = gzopen(path, "wb");
  MF_ASSERT(gz != NULL, "gzopen %s", path);
  gzputs(gz, ">a\nMKV\n>b\nGG\n");
  gzclose(gz);
  st = mf_fasta_read(path, &f);
  MF_TEST(st == MF_OK && f.n == 2 && !strcmp(mf_fasta_seq(&f, 0), "MKV") &&
              !strcmp(mf_fasta_name(&f, 1), "b") && !strcmp(mf_fasta_seq(&f, 1), "GG"),
          "gzip FASTA file: %s", mf_error_message());
  mf_fasta_free(&f);
  remove(path);
  st = mf_fasta_read("/nonexistent.fasta", &f);
  MF_TEST(st == MF_ERR_IO && strstr(mf_error_message(), "/nonexistent.fasta"), "missing file");

  int64_t before = mf_mem_stats(MF_HOST).current;
  int nomem = 0, k = 0;
  for (; k < 16; k++) {
    mf_alloc_fail_after(k);
    st = mf_fasta_parse(t, cut, "ok.fasta", &f);
    mf_alloc_fail_after(-1);
    if (st == MF_OK) break;
    nomem += st == MF_ERR_NOMEM;
  }
  mf_fasta_free(&f);
  MF_TEST(st == MF_OK && nomem == k && k == 4 && mf_mem_stats(MF_HOST).current == before,
          "FASTA allocation failures: %d of %d NOMEM, no leak", nomem, k);
}

/* ------------------------------------------------------------------ JSON */
static const char k_job[] =
    "{\n"
    "  \"name\": \"complex 1\",\n"
    "  \"modelSeeds\": [1, 42],\n"
    "  \"dialect\": \"alphafold3\", \"version\": 2,\n"
    "  \"sequences\": [\n"
    "    {\"protein\": {\"id\": [\"A\", \"B\"], \"sequence\": \"MKVlax\",\n"
    "                 \"modifications\": [{\"ptmType\": \"SEP\", \"ptmPosition\": 2}],\n"
    "                 \"msa\": \"msa/A.a3m.gz\"}},\n"
    "    {\"rna\": {\"id\": \"R\", \"sequence\": \"ACGU\",\n"
    "             \"modifications\": [{\"modificationType\": \"2MG\", \"basePosition\": 4}]}},\n"
    "    {\"dna\": {\"id\": \"D1\", \"sequence\": \"ACGT\"}},\n"
    "    {\"ligand\": {\"id\": \"L\", \"ccd\": \"ATP\"}},\n"
    "    {\"ligand\": {\"id\": [\"G\", \"H\"], \"ccdCodes\": [\"NAG\", \"FUC\"]}}\n"
    "  ]\n"
    "}\n";

static void test_job_ok(void) {
  mf_job j;
  mf_status st = mf_job_parse(k_job, strlen(k_job), "job.json", &j);
  MF_TEST(st == MF_OK, "job parses: %s", mf_error_message());
  if (st != MF_OK) return;
  MF_TEST(!strcmp(j.name, "complex 1") && j.n_seeds == 2 && j.seeds[0] == 1 && j.seeds[1] == 42,
          "name and seeds");
  MF_TEST(j.n_entities == 5 && mf_job_n_chains(&j) == 7, "5 entities, 7 chains");
  if (j.n_entities == 5) {
    const mf_job_entity *p = &j.entities[0], *r = &j.entities[1], *d = &j.entities[2],
                        *l = &j.entities[3], *g = &j.entities[4];
    MF_TEST(p->type == MF_MOL_PROTEIN && p->n_ids == 2 && !strcmp(p->ids[0], "A") &&
                !strcmp(p->ids[1], "B") && !strcmp(p->sequence, "MKVLAX") && p->length == 6 &&
                p->n_mods == 1 && p->mods[0].position == 2 && !strcmp(p->mods[0].ccd, "SEP") &&
                p->msa_path && !strcmp(p->msa_path, "msa/A.a3m.gz") && p->n_ccd == 0,
            "protein: two copies, upper-cased sequence, modification, msa path");
    MF_TEST(r->type == MF_MOL_RNA && r->n_ids == 1 && !strcmp(r->ids[0], "R") &&
                !strcmp(r->sequence, "ACGU") && r->n_mods == 1 && r->mods[0].position == 4 &&
                !strcmp(r->mods[0].ccd, "2MG") && r->msa_path == NULL,
            "rna with a base modification");
    MF_TEST(d->type == MF_MOL_DNA && !strcmp(d->ids[0], "D1") && d->length == 4 && d->n_mods == 0,
            "dna");
    MF_TEST(l->type == MF_MOL_LIGAND && l->n_ccd == 1 && !strcmp(l->ccd[0], "ATP") &&
                l->sequence == NULL && l->length == 0,
            "ligand by one CCD code");
    MF_TEST(g->type == MF_MOL_LIGAND && g->n_ids == 2 && g->n_ccd == 2 &&
                !strcmp(g->ccd[0], "NAG") && !strcmp(g->ccd[1], "FUC"),
            "glycan ligand with two copies and two CCD codes");
  }
  mf_job_free(&j);
  MF_TEST(j.entities == NULL && j.name == NULL, "job freed and zeroed");

  /* minimal job: no seeds, unpairedMsaPath spelling */
  static const char mini[] = "{\"name\": \"m\", \"sequences\": [{\"protein\": {\"id\": \"A\", "
                             "\"sequence\": \"G\", \"unpairedMsaPath\": \"x.a3m\"}}]}";
  st = mf_job_parse(mini, strlen(mini), "mini.json", &j);
  MF_TEST(st == MF_OK && j.n_seeds == 0 && j.seeds == NULL && j.n_entities == 1 &&
              !strcmp(j.entities[0].msa_path, "x.a3m"),
          "minimal job: %s", mf_error_message());
  mf_job_free(&j);

  /* from a gzip file */
  char path[128];
  snprintf(path, sizeof path, "%s/job.json.gz", g_tmpdir);
  gzFile gz = gzopen(path, "wb");
  MF_ASSERT(gz != NULL, "gzopen %s", path);
  gzwrite(gz, k_job, (unsigned)strlen(k_job));
  gzclose(gz);
  st = mf_job_read(path, &j);
  MF_TEST(st == MF_OK && j.n_entities == 5, "gzip job file: %s", mf_error_message());
  mf_job_free(&j);
  remove(path);

  int64_t before = mf_mem_stats(MF_HOST).current;
  int nomem = 0, k = 0;
  for (; k < 64; k++) {
    mf_alloc_fail_after(k);
    st = mf_job_parse(k_job, strlen(k_job), "job.json", &j);
    mf_alloc_fail_after(-1);
    if (st == MF_OK) break;
    nomem += st == MF_ERR_NOMEM;
  }
  mf_job_free(&j);
  MF_TEST(st == MF_OK && k > 10 && nomem == k && mf_mem_stats(MF_HOST).current == before,
          "job allocation failures: %d of %d NOMEM, no leak", nomem, k);
}

static int job_error(const char *text, const char *n1, const char *n2) {
  mf_job j;
  mf_status st = mf_job_parse(text, strlen(text), "bad.json", &j);
  const char *msg = mf_error_message();
  int ok = st == MF_ERR_FORMAT && j.entities == NULL && j.name == NULL && strstr(msg, "bad.json") &&
           (!n1 || strstr(msg, n1)) && (!n2 || strstr(msg, n2));
  if (!ok) printf("  status %s, message: %s\n", mf_status_name(st), msg);
  mf_job_free(&j);
  return ok;
}

#define SEQ1(body) "{\"name\": \"x\", \"sequences\": [" body "]}"

static void test_job_errors(void) {
  MF_TEST(job_error("", "JSON error", NULL), "empty");
  MF_TEST(job_error("{\"name\": \"x\",\n \"sequences\": [}", "line 2", NULL), "syntax error, line");
  MF_TEST(job_error("[1, 2]", "JSON object", NULL), "not an object");
  MF_TEST(job_error("{\"name\": \"x\", \"name\": \"y\", \"sequences\": []}", "duplicate", NULL),
          "duplicate key");
  MF_TEST(job_error("{\"sequences\": [{\"protein\": {\"id\": \"A\", \"sequence\": \"G\"}}]}",
                    "\"name\"", NULL),
          "no name");
  MF_TEST(job_error("{\"name\": \"x\", \"sequences\": []}", "\"sequences\"", "non-empty"),
          "no sequences");
  MF_TEST(job_error("{\"name\": \"x\", \"modelSeeds\": [1, \"2\"], \"sequences\": "
                    "[{\"protein\": {\"id\": \"A\", \"sequence\": \"G\"}}]}",
                    "modelSeeds[1]", NULL),
          "non-integer seed");
  MF_TEST(job_error(SEQ1("{\"peptide\": {\"id\": \"A\", \"sequence\": \"G\"}}"),
                    "sequences[0]", "\"peptide\""),
          "unknown entity type");
  MF_TEST(job_error(SEQ1("{\"protein\": {\"id\": \"A\", \"sequence\": \"G\"}, \"rna\": {}}"),
                    "sequences[0]", "one key"),
          "two keys in one entity");
  MF_TEST(job_error(SEQ1("{\"protein\": {\"sequence\": \"G\"}}"), "sequences[0].protein",
                    "\"id\""),
          "no id");
  MF_TEST(job_error(SEQ1("{\"protein\": {\"id\": \"ABCDE\", \"sequence\": \"G\"}}"),
                    "sequences[0].protein.id[0]", NULL),
          "id too long");
  MF_TEST(job_error(SEQ1("{\"protein\": {\"id\": [], \"sequence\": \"G\"}}"), "empty list", NULL),
          "empty id list");
  MF_TEST(job_error(SEQ1("{\"protein\": {\"id\": \"A\", \"sequence\": \"G\"}},"
                         "{\"dna\": {\"id\": [\"B\", \"A\"], \"sequence\": \"A\"}}"),
                    "\"A\" is used twice", "sequences[1]"),
          "duplicate chain id across entities");
  MF_TEST(job_error(SEQ1("{\"protein\": {\"id\": \"A\", \"sequence\": \"\"}}"),
                    "sequences[0].protein.sequence", NULL),
          "empty sequence");
  MF_TEST(job_error(SEQ1("{\"protein\": {\"id\": \"A\", \"sequence\": \"MK V\"}}"), "character 3",
                    NULL),
          "space in a sequence");
  MF_TEST(job_error(SEQ1("{\"protein\": {\"id\": \"A\", \"sequence\": \"MKV\", \"modifications\": "
                         "[{\"ptmType\": \"SEP\", \"ptmPosition\": 4}]}}"),
                    "modifications[0].ptmPosition = 4", "1..3"),
          "modification outside the sequence");
  MF_TEST(job_error(SEQ1("{\"rna\": {\"id\": \"A\", \"sequence\": \"ACG\", \"modifications\": "
                         "[{\"ptmType\": \"SEP\", \"ptmPosition\": 1}]}}"),
                    "modificationType", NULL),
          "protein modification keys on RNA");
  MF_TEST(job_error(SEQ1("{\"ligand\": {\"id\": \"L\", \"smiles\": \"CCO\"}}"), "SMILES", NULL),
          "SMILES ligand rejected");
  MF_TEST(job_error(SEQ1("{\"ligand\": {\"id\": \"L\"}}"), "\"ccd\" or \"ccdCodes\"", NULL),
          "ligand without CCD code");
  MF_TEST(job_error(SEQ1("{\"ligand\": {\"id\": \"L\", \"ccd\": \"atp\"}}"), "CCD code", NULL),
          "lower-case CCD code");
  MF_TEST(job_error(SEQ1("{\"ligand\": {\"id\": \"L\", \"ccdCodes\": []}}"), "non-empty", NULL),
          "empty ccdCodes");
  MF_TEST(job_error(SEQ1("{\"protein\": {\"id\": \"A\", \"sequence\": \"G\", \"msa\": 3}}"),
                    "msa", NULL),
          "msa not a path");
  mf_job j;
  mf_status st = mf_job_read("/nonexistent/job.json", &j);
  MF_TEST(st == MF_ERR_IO && strstr(mf_error_message(), "/nonexistent/job.json"), "missing file");
  static const char bin[] = "{\"name\": \"a\0b\"}";
  st = mf_job_parse(bin, sizeof bin - 1, "bin.json", &j);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "bin.json"), "NUL byte: %s",
          mf_error_message());
  mf_job_free(&j);
}

int main(void) {
  mf_test_begin("test_input");
  snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/mf_test_input_XXXXXX");
  MF_ASSERT(mkdtemp(g_tmpdir) != NULL, "mkdtemp");
  test_fasta();
  test_job_ok();
  test_job_errors();
  rmdir(g_tmpdir);
  return mf_test_end();
}
