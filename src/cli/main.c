/* main.c — the megafold command: dispatches to subcommands.
 *   megafold info    build configuration and library versions
 *   megafold demo    the built-in demo (runs on any machine, no data needed)
 *   megafold prep    mmCIF files → the LMDB feature cache (src/cli/prep.c) */
#include <stdio.h>
#include <string.h>

#include "megafold.h"
#include "cli/commands.h"

static void usage(FILE *f) {
  fprintf(f,
          "megafold %s — AlphaFold3-style training in C/CUDA\n"
          "usage: megafold <command> [options]\n"
          "  info    show the build configuration\n"
          "  demo    run the built-in demo: a Pairformer block on the CPU, trained a few steps\n"
          "  prep    featurise mmCIF files into a feature cache (megafold prep --help)\n",
          MF_VERSION_STRING);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "info") == 0) return mf_cmd_info(argc - 1, argv + 1);
  if (strcmp(cmd, "demo") == 0) return mf_cmd_demo(argc - 1, argv + 1);
  if (strcmp(cmd, "prep") == 0) return mf_cmd_prep(argc - 1, argv + 1);
  if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "megafold: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}
