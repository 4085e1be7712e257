/* cpu_math.h — small helpers shared by the CPU reference ops: the scalar sigmoid (double
 * precision), the binding of a module's weight fields to one flat buffer, and the
 * dgamma/dbeta sums of a LayerNorm backward run in row chunks.
 * Header-only, static inline; not part of the public API. */
#ifndef MF_OPS_CPU_MATH_H
#define MF_OPS_CPU_MATH_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "ops/layernorm.h"

static inline double mf_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Points *field[f] (f < n) at consecutive slices of flat, size[f] elements each, in order
 * (every field NULL when flat is NULL); returns the total element count. */
static inline int64_t mf_bind_fields(mf_real **const field[], const int64_t size[], size_t n,
                                     mf_real *flat) {
  int64_t off = 0;
  for (size_t f = 0; f < n; f++) {
    *field[f] = flat ? flat + off : NULL;
    off += size[f];
  }
  return off;
}

/* dgamma/dbeta of a LayerNorm backward run in row chunks: each chunk's gradients land in
 * mf_real partials, which are summed across chunks in double and added to the caller's
 * (accumulating) gradients once, at the end. */
typedef struct {
  mf_real *pg, *pb; /* (C) this chunk's dgamma / dbeta; NULL when not wanted */
  double *ag, *ab;  /* (C) their sums across chunks (ag, then ab, in one block) */
} mf_ln_chunk_grads;

/* Allocates the partials (named "<op> dgamma part", "<op> dbeta part") and the zeroed sums
 * ("<op> dgamma/dbeta sums"), in that order; fatal when out of memory. */
static inline void mf_ln_chunk_grads_init(mf_ln_chunk_grads *s, int want_g, int want_b, int C,
                                          const char *op) {
  char what[96];
  s->pg = s->pb = NULL;
  s->ag = s->ab = NULL;
  if (want_g) {
    snprintf(what, sizeof what, "%s dgamma part", op);
    s->pg = mf_xmalloc((size_t)C * sizeof(mf_real), what);
  }
  if (want_b) {
    snprintf(what, sizeof what, "%s dbeta part", op);
    s->pb = mf_xmalloc((size_t)C * sizeof(mf_real), what);
  }
  if (want_g || want_b) {
    snprintf(what, sizeof what, "%s dgamma/dbeta sums", op);
    s->ag = mf_xcalloc(2 * (size_t)C * sizeof(double), what);
    s->ab = s->ag + C;
  }
}

/* One chunk of `rows` rows: dinp (rows, C) (NULL: skipped) from dy (rows, C), and this
 * chunk's dgamma/dbeta added to the sums. Pointers are those of the chunk's first row. */
static inline void mf_ln_chunk_grads_backward(mf_ln_chunk_grads *s, mf_real *dinp,
                                              const mf_real *dy, const mf_real *mean,
                                              const mf_real *rstd, const mf_real *inp,
                                              const mf_real *gamma, int64_t rows, int C,
                                              mf_ln_mode mode) {
  if (s->pg) memset(s->pg, 0, (size_t)C * sizeof(mf_real));
  if (s->pb) memset(s->pb, 0, (size_t)C * sizeof(mf_real));
  mf_layernorm_backward(dinp, s->pg, s->pb, dy, mean, rstd, inp, gamma, rows, C, mode);
  for (int c = 0; s->pg && c < C; c++) s->ag[c] += s->pg[c];
  for (int c = 0; s->pb && c < C; c++) s->ab[c] += s->pb[c];
}

/* dgamma (C) += the dgamma sums, dbeta (C) += the dbeta sums (either may be NULL, and is
 * NULL when it was not wanted at init); frees the sums and the partials. */
static inline void mf_ln_chunk_grads_finish(mf_ln_chunk_grads *s, mf_real *dgamma,
                                            mf_real *dbeta, int C) {
  for (int c = 0; dgamma && c < C; c++) dgamma[c] += (mf_real)s->ag[c];
  for (int c = 0; dbeta && c < C; c++) dbeta[c] += (mf_real)s->ab[c];
  mf_free(s->ag);
  mf_free(s->pb);
  mf_free(s->pg);
}

#endif
