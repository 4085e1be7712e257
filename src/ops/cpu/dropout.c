/* dropout.c — CPU reference of row-/column-wise dropout and its Philox mask. See dropout.h. */
#include "ops/dropout.h"

void mf_dropout_mask(mf_real *mask, int64_t R, int C, double p, uint64_t seed, uint64_t stream) {
  MF_ASSERT(R >= 0 && C > 0, "dropout mask dims R=%lld C=%d", (long long)R, C);
  MF_ASSERT(p >= 0 && p < 1, "dropout rate p=%g must be in [0, 1)", p);
  mf_real keep = (mf_real)(1.0 / (1.0 - p));
  int64_t n = R * C;
  for (int64_t k = 0; k < n; k++)
    mask[k] = (double)mf_rng_uniform(seed, stream, (uint64_t)k) >= p ? keep : (mf_real)0;
}

static void dropout_check(int64_t A, int64_t B, int C, mf_dropout_axis axis) {
  MF_ASSERT(A >= 0 && B >= 0 && C > 0, "dropout dims A=%lld B=%lld C=%d", (long long)A,
            (long long)B, C);
  MF_ASSERT(axis == MF_DROPOUT_ROWWISE || axis == MF_DROPOUT_COLWISE, "dropout axis %d", (int)axis);
}

/* The mask row for position (a, b). */
static const mf_real *mask_row(const mf_real *mask, int64_t a, int64_t b, int C,
                               mf_dropout_axis axis) {
  return mask + (axis == MF_DROPOUT_ROWWISE ? b : a) * C;
}

void mf_dropout_forward(mf_real *out, const mf_real *x, const mf_real *mask, int64_t A,
                        int64_t B, int C, mf_dropout_axis axis) {
  dropout_check(A, B, C, axis);
  for (int64_t a = 0; a < A; a++)
    for (int64_t b = 0; b < B; b++) {
      const mf_real *mk = mask_row(mask, a, b, C, axis);
      int64_t o = (a * B + b) * C;
      for (int c = 0; c < C; c++) out[o + c] = x[o + c] * mk[c];
    }
}

void mf_dropout_backward(mf_real *dx, const mf_real *dout, const mf_real *mask, int64_t A,
                         int64_t B, int C, mf_dropout_axis axis) {
  mf_dropout_forward(dx, dout, mask, A, B, C, axis); /* the map is linear and diagonal */
}

void mf_dropout_residual_forward(mf_real *z, const mf_real *x, const mf_real *mask, int64_t A,
                                 int64_t B, int C, mf_dropout_axis axis) {
  dropout_check(A, B, C, axis);
  for (int64_t a = 0; a < A; a++)
    for (int64_t b = 0; b < B; b++) {
      const mf_real *mk = mask_row(mask, a, b, C, axis);
      int64_t o = (a * B + b) * C;
      for (int c = 0; c < C; c++) z[o + c] += x[o + c] * mk[c];
    }
}
