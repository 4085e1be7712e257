/* fuzz_data_inputs.c — libFuzzer target for the readers of src/data written for EvoPipe's
 * a3m/FASTA/JSON/CCD part: the first input byte picks the reader (a3m with the MSA
 * features, FASTA, JSON job, CCD text), the rest is the file contents (gzip or plain, as
 * the readers see files). A crash, a sanitizer report or a leak is a finding; errors are
 * the expected outcome for almost every input. Not built by `make`; build and run:
 *
 *   clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined \
 *     -fno-sanitize-recover=all -Iinclude -Isrc -DMF_REAL_DOUBLE \
 *     tests/fuzz/fuzz_data_inputs.c src/core/[a-z]*.c src/data/textfile.c src/data/residue.c \
 *     src/data/a3m.c src/data/input.c src/data/ccd.c src/data/cif.c \
 *     -lz -ljansson -lm -o /tmp/fuzz_data_inputs
 *   /tmp/fuzz_data_inputs -max_total_time=300 -max_len=4096 tests/fuzz/corpus_data
 *
 * Findings become regression cases in tests/test_a3m.c, test_input.c or test_ccd.c. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "data/a3m.h"
#include "data/ccd.h"
#include "data/input.h"
#include "data/textfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const int which = data[0] & 3;
  char *text = NULL;
  size_t len = 0;
  if (mf_textfile_from_bytes(data + 1, size - 1, "fuzz", &text, &len) != MF_OK) return 0;
  switch (which) {
  case 0: {
    mf_a3m a;
    if (mf_a3m_parse(text, len, "fuzz", (mf_moltype)(data[0] >> 2 & 3), &a) == MF_OK) {
      mf_msa_features f;
      if (mf_msa_features_compute(&a, &f) == MF_OK) mf_msa_features_free(&f);
      for (int64_t s = 0; s < a.S; s++) (void)strlen(mf_a3m_name(&a, s));
      mf_a3m_free(&a);
    }
    break;
  }
  case 1: {
    mf_fasta f;
    if (mf_fasta_parse(text, len, "fuzz", &f) == MF_OK) {
      for (int64_t i = 0; i < f.n; i++)
        if ((int64_t)strlen(mf_fasta_seq(&f, i)) != f.seq_len[i]) __builtin_trap();
      mf_fasta_free(&f);
    }
    break;
  }
  case 2: {
    mf_job j;
    if (mf_job_parse(text, len, "fuzz", &j) == MF_OK) mf_job_free(&j);
    break;
  }
  default: {
    mf_ccd c;
    mf_ccd_set_chunk_bytes(data[0] & 4 ? 64 : 0); /* exercise the chunk splitter too */
    if (mf_ccd_parse(text, len, "fuzz", &c) == MF_OK) {
      for (int64_t i = 0; i < c.n_components; i++) {
        const mf_ccd_component *k = &c.components[i];
        if (mf_ccd_find(&c, k->id) == NULL) __builtin_trap();
        (void)mf_ccd_restype(&c, k, MF_MOL_PROTEIN);
        for (int64_t b = 0; b < k->n_bonds; b++) {
          const mf_ccd_bond *bd = &c.bonds[k->bond0 + b];
          if (bd->a < 0 || bd->a >= k->n_atoms || bd->b < 0 || bd->b >= k->n_atoms)
            __builtin_trap();
        }
      }
      mf_ccd_free(&c);
    }
    mf_ccd_set_chunk_bytes(0);
    break;
  }
  }
  mf_free(text);
  return 0;
}
