/* prep.c — `megafold prep`: argument parsing and the summary line around the prep driver
 * (src/data/prep.h), which does the work. Not the driver itself.
 *   megafold prep <mmcif dir | list file> --ccd <components.cif[.gz]> --out <cache dir>
 *                 [--msa <dir>] [--threads N] [--max-msa-rows K] [--zstd-level L] [--quiet]
 * Exit status: 0 all entries stored (or already cached), 1 some entries failed or the run
 * stopped on an error, 2 usage error. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "data/features.h"
#include "data/prep.h"
#include "megafold.h"

static void prep_usage(FILE *f) {
  fprintf(f,
          "usage: megafold prep <mmcif dir | list file> --ccd <components.cif[.gz]> --out <cache>\n"
          "                     [--msa <dir>] [--threads N] [--max-msa-rows K] [--zstd-level L]\n"
          "                     [--quiet]\n"
          "  Featurises every *.cif / *.cif.gz of the directory (sorted by name), or every path\n"
          "  of the list file (one a line), into the LMDB feature cache <cache>. Entries already\n"
          "  in the cache are skipped, so an interrupted run can be resumed; a bad entry is\n"
          "  reported on stderr and skipped.\n"
          "  --msa <dir>        a3m MSAs <id>_<entity_id>.a3m[.gz] (default: query-only MSAs)\n"
          "  --threads N        featurising threads (default: the number of CPUs)\n"
          "  --max-msa-rows K   keep at most K MSA rows per chain (default 0: all)\n"
          "  --zstd-level L     record compression level (default %d)\n"
          "  --quiet            no progress lines\n"
          "  exit status: 0 ok, 1 some entries failed (the others are stored), 2 usage error\n",
          MF_FEATURES_ZSTD_DEFAULT);
}

/* Strict integer in [lo, hi]; 0 on success. */
static int parse_int(const char *s, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

int mf_cmd_prep(int argc, char **argv) {
  mf_prep_opts o;
  memset(&o, 0, sizeof o);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  o.threads = ncpu > 0 ? (ncpu > 256 ? 256 : (int)ncpu) : 1;
  o.progress = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int has_val = i + 1 < argc;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      prep_usage(stdout);
      return 0;
    } else if (!strcmp(a, "--quiet")) {
      o.progress = 0;
    } else if (!strcmp(a, "--ccd") || !strcmp(a, "--out") || !strcmp(a, "--msa") ||
               !strcmp(a, "--threads") || !strcmp(a, "--max-msa-rows") ||
               !strcmp(a, "--zstd-level")) {
      if (!has_val) {
        fprintf(stderr, "megafold prep: %s needs a value\n", a);
        prep_usage(stderr);
        return 2;
      }
      const char *v = argv[++i];
      int bad = 0;
      if (!strcmp(a, "--ccd")) o.ccd_path = v;
      else if (!strcmp(a, "--out")) o.out = v;
      else if (!strcmp(a, "--msa")) o.msa_dir = v;
      else if (!strcmp(a, "--threads")) bad = parse_int(v, 1, 256, &o.threads);
      else if (!strcmp(a, "--max-msa-rows")) bad = parse_int(v, 0, INT_MAX, &o.max_msa_rows);
      else bad = parse_int(v, -131072, 22, &o.zstd_level);
      if (bad) {
        fprintf(stderr, "megafold prep: bad value '%s' for %s\n", v, a);
        return 2;
      }
    } else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr, "megafold prep: unknown option '%s'\n", a);
      prep_usage(stderr);
      return 2;
    } else if (!o.input) {
      o.input = a;
    } else {
      fprintf(stderr, "megafold prep: more than one input ('%s' and '%s')\n", o.input, a);
      return 2;
    }
  }
  if (!o.input || !o.ccd_path || !o.out) {
    fprintf(stderr, "megafold prep: %s required\n",
            !o.input ? "an input directory or list file is" : !o.ccd_path ? "--ccd is"
                                                                            : "--out is");
    prep_usage(stderr);
    return 2;
  }
  mf_prep_summary s;
  mf_status st = mf_prep_run(&o, &s);
  char line[512];
  mf_prep_summary_format(&s, line, sizeof line);
  if (st != MF_OK) {
    fprintf(stderr, "megafold prep: %s\n", mf_error_message());
    if (st == MF_ERR_CONFIG && s.total == 0 && s.done == 0) return 2;
    printf("prep stopped: %s\n", line);
    return 1;
  }
  printf("prep: %lld entries: %s\n", (long long)s.total, line);
  return s.failed ? 1 : 0;
}
