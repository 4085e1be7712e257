/* fuzz_cif.c — libFuzzer target for the mmCIF reader: every input goes through
 * mf_cif_parse (text or gzip), every value of every item is read back (kind, number
 * parsing), and each of the first blocks is built into an mf_structure. A crash, a
 * sanitizer report or a leak is a finding; error returns are the expected outcome for
 * most inputs. Built and run by scripts/fuzz.sh (clang -fsanitize=fuzzer,address,undefined);
 * not part of `make test` (the Makefile globs only tests/test_*.c). What it finds goes into
 * test_fuzz_regressions in tests/test_cif.c. */
#include <stddef.h>
#include <stdint.h>

#include "data/cif.h"
#include "data/structure.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mf_cif_doc *d = NULL;
  if (mf_cif_parse(data, size, "fuzz.cif", &d) != MF_OK) return 0;
  volatile double sink = 0;
  int64_t lines = 0;
  for (int32_t b = 0; b < mf_cif_n_blocks(d); b++) {
    int32_t first, count;
    mf_cif_block_items(d, b, &first, &count);
    for (int32_t i = first; i < first + count; i++) {
      mf_cif_col c = mf_cif_item_col(d, i);
      mf_cif_str t = mf_cif_item_tag(d, i);
      sink += (double)t.len;
      for (int64_t r = 0; r < c.n; r++) {
        mf_cif_str v = mf_cif_value(&c, r);
        double x;
        int64_t k;
        if (mf_cif_parse_double(v, &x)) sink += x;
        if (mf_cif_parse_int(v, &k)) sink += (double)k;
        sink += (double)mf_cif_value_kind(&c, r) + (double)v.len;
        if (lines++ < 4) sink += (double)mf_cif_line(&c, r);
      }
    }
    if (b < 4) {
      mf_structure *s = NULL;
      if (mf_structure_from_cif(d, b, &s) == MF_OK) {
        for (int64_t a = 0; a < s->n_atoms; a++) sink += s->xyz[3 * a];
        mf_structure_free(s);
      }
    }
  }
  (void)sink;
  mf_cif_free(d);
  return 0;
}
