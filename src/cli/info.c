/* info.c — `megafold info`: what this build has. */
#include <stdio.h>

#include "cli/commands.h"
#include "megafold.h"

int mf_cmd_info(int argc, char **argv) {
  (void)argc;
  (void)argv;
  printf("megafold %s\n", MF_VERSION_STRING);
  printf("  CPU reference scalar: %s\n", MF_REAL_NAME);
#ifdef MF_HAVE_BLAS
  printf("  CPU GEMM: OpenBLAS\n");
#else
  printf("  CPU GEMM: built-in blocked loop (OpenBLAS not found at build time)\n");
#endif
  return 0;
}
