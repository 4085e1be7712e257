/* trimul.c — CPU reference of the triangle multiplicative update (outgoing / incoming),
 * forward and backward, composed from mf_layernorm_*, mf_linear_* and mf_gemm_batched.
 * The N³ contraction runs as Ch batched N×N GEMMs over channel-major copies of A and B.
 * Not a fused or memory-lean implementation: it is the oracle for the CUDA one.
 * See trimul.h. */
#include "ops/trimul.h"
#include "ops/cpu/cpu_math.h"

#include <math.h>

#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/linear.h"

/* The saved workspace, carved in this order (M = N·N). */
typedef struct {
  mf_real *x;              /* (M, C)  LN_in(z) */
  mf_real *mu_in, *rs_in;  /* (M)     LN_in statistics */
  mf_real *pa, *sa;        /* (M, Ch) x·W_apᵀ and mf_sigmoid(x·W_agᵀ) */
  mf_real *pb, *sb;        /* (M, Ch) x·W_bpᵀ and mf_sigmoid(x·W_bgᵀ) */
  mf_real *t;              /* (M, Ch) T, channel last */
  mf_real *mu_out, *rs_out;/* (M)     LN_out statistics */
  mf_real *y;              /* (M, Ch) LN_out(T) */
  mf_real *sg;             /* (M, C)  mf_sigmoid(x·W_gᵀ) */
  mf_real *u;              /* (M, C)  y·W_zᵀ */
} trimul_saved;

static void carve(trimul_saved *s, mf_real *base, int64_t M, int C, int Ch) {
  mf_real *p = base;
  s->x = p; p += M * C;
  s->mu_in = p; p += M;
  s->rs_in = p; p += M;
  s->pa = p; p += M * Ch;
  s->sa = p; p += M * Ch;
  s->pb = p; p += M * Ch;
  s->sb = p; p += M * Ch;
  s->t = p; p += M * Ch;
  s->mu_out = p; p += M;
  s->rs_out = p; p += M;
  s->y = p; p += M * Ch;
  s->sg = p; p += M * C;
  s->u = p;
}

size_t mf_trimul_saved_size(int N, int C, int Ch) {
  MF_ASSERT(N > 0 && C > 0 && Ch > 0, "trimul dims N=%d C=%d Ch=%d", N, C, Ch);
  return (size_t)N * (size_t)N * (3 * (size_t)C + 6 * (size_t)Ch + 4);
}

int64_t mf_trimul_weights_bind(mf_trimul_weights *w, mf_real *flat, int C, int Ch) {
  MF_ASSERT(w && C > 0 && Ch > 0, "trimul weights C=%d Ch=%d", C, Ch);
  const int64_t c = C, ch = Ch;
  mf_real **field[] = {&w->ln_in_g, &w->ln_in_b, &w->w_ap, &w->w_ag, &w->w_bp,
                       &w->w_bg,    &w->w_g,     &w->ln_out_g, &w->ln_out_b, &w->w_z};
  const int64_t size[] = {c, c, ch * c, ch * c, ch * c, ch * c, c * c, ch, ch, c * ch};
  return mf_bind_fields(field, size, sizeof size / sizeof size[0], flat);
}

static void *scratch(int64_t n, const char *what) {
  return mf_xmalloc((size_t)n * sizeof(mf_real), what);
}


/* dst (cols, rows) = srcᵀ, src (rows, cols). */
static void transpose(mf_real *dst, const mf_real *src, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}

/* op (Ch, M) channel-major = pm ⊙ s ⊙ p, from p, s (M, Ch); pm (M) or NULL. */
static void gated_operand(mf_real *op, const mf_real *p, const mf_real *s, const uint8_t *pm,
                          int64_t M, int Ch) {
  for (int64_t m = 0; m < M; m++) {
    double mk = pm ? (double)(pm[m] != 0) : 1.0;
    for (int c = 0; c < Ch; c++)
      op[c * M + m] = (mf_real)(mk * (double)s[m * Ch + c] * (double)p[m * Ch + c]);
  }
}

/* From d(op) (Ch, M) channel-major, with op = pm ⊙ mf_sigmoid(gl) ⊙ p:
 * dp (M, Ch) = d·pm·s,  dgl (M, Ch) = d·pm·p·s·(1 − s). */
static void gated_operand_backward(mf_real *dp, mf_real *dgl, const mf_real *dop,
                                   const mf_real *p, const mf_real *s, const uint8_t *pm,
                                   int64_t M, int Ch) {
  for (int64_t m = 0; m < M; m++) {
    double mk = pm ? (double)(pm[m] != 0) : 1.0;
    for (int c = 0; c < Ch; c++) {
      double d = mk * (double)dop[c * M + m], sv = s[m * Ch + c];
      dp[m * Ch + c] = (mf_real)(d * sv);
      dgl[m * Ch + c] = (mf_real)(d * (double)p[m * Ch + c] * sv * (1.0 - sv));
    }
  }
}

static void check_args(const mf_trimul_weights *w, int N, int C, int Ch, int outgoing) {
  MF_ASSERT(N > 0 && C > 0 && Ch > 0, "trimul dims N=%d C=%d Ch=%d", N, C, Ch);
  MF_ASSERT(outgoing == 0 || outgoing == 1, "trimul: outgoing=%d must be 0 or 1", outgoing);
  MF_ASSERT(w && w->ln_in_g && w->ln_in_b && w->w_ap && w->w_ag && w->w_bp && w->w_bg &&
                w->w_g && w->ln_out_g && w->ln_out_b && w->w_z,
            "trimul: every weight is required");
}

void mf_trimul_forward(mf_real *out, mf_real *saved, const mf_real *z, const uint8_t *pm,
                       const mf_trimul_weights *w, int N, int C, int Ch, int outgoing) {
  check_args(w, N, C, Ch, outgoing);
  MF_ASSERT(out && saved && z, "trimul_forward: out, saved and z are required");
  const int64_t n = N, M = n * n;
  trimul_saved s;
  carve(&s, saved, M, C, Ch);

  /* x = LN_in(z); the four projections, gates through the sigmoid */
  mf_layernorm_forward(s.x, s.mu_in, s.rs_in, z, w->ln_in_g, w->ln_in_b, M, C, MF_LN_FULL);
  mf_linear_forward(s.pa, s.x, w->w_ap, NULL, M, C, Ch);
  mf_linear_forward(s.sa, s.x, w->w_ag, NULL, M, C, Ch);
  mf_linear_forward(s.pb, s.x, w->w_bp, NULL, M, C, Ch);
  mf_linear_forward(s.sb, s.x, w->w_bg, NULL, M, C, Ch);
  for (int64_t e = 0; e < M * Ch; e++) {
    s.sa[e] = (mf_real)mf_sigmoid(s.sa[e]);
    s.sb[e] = (mf_real)mf_sigmoid(s.sb[e]);
  }

  /* A, B channel-major (Ch, N, N); T_c = A_c·B_cᵀ (outgoing) or A_cᵀ·B_c (incoming) */
  mf_real *at = scratch(Ch * M, "trimul A"), *bt = scratch(Ch * M, "trimul B");
  mf_real *tt = scratch(Ch * M, "trimul T");
  gated_operand(at, s.pa, s.sa, pm, M, Ch);
  gated_operand(bt, s.pb, s.sb, pm, M, Ch);
  if (outgoing)
    mf_gemm_batched(0, 1, n, n, n, 1.0, at, n, M, bt, n, M, 0.0, tt, n, M, Ch);
  else
    mf_gemm_batched(1, 0, n, n, n, 1.0, at, n, M, bt, n, M, 0.0, tt, n, M, Ch);
  transpose(s.t, tt, Ch, M);
  mf_free(at);
  mf_free(bt);
  mf_free(tt);

  /* Δz = mf_sigmoid(x·W_gᵀ) ⊙ (LN_out(T)·W_zᵀ) */
  mf_layernorm_forward(s.y, s.mu_out, s.rs_out, s.t, w->ln_out_g, w->ln_out_b, M, Ch,
                       MF_LN_FULL);
  mf_linear_forward(s.u, s.y, w->w_z, NULL, M, Ch, C);
  mf_linear_forward(s.sg, s.x, w->w_g, NULL, M, C, C);
  for (int64_t e = 0; e < M * C; e++) {
    double g = mf_sigmoid(s.sg[e]);
    s.sg[e] = (mf_real)g;
    out[e] = (mf_real)(g * (double)s.u[e]);
  }
}

#define GRAD(field) (grads ? grads->field : NULL)

void mf_trimul_backward(mf_real *dz, const mf_trimul_weights *grads, const mf_real *dout,
                        const mf_real *saved, const mf_real *z, const uint8_t *pm,
                        const mf_trimul_weights *w, int N, int C, int Ch, int outgoing) {
  check_args(w, N, C, Ch, outgoing);
  MF_ASSERT(dz && dout && saved && z, "trimul_backward: dz, dout, saved and z are required");
  const int64_t n = N, M = n * n;
  trimul_saved s;
  carve(&s, (mf_real *)saved, M, C, Ch); /* read only below */

  mf_real *dx = scratch(M * C, "trimul dx");
  mf_real *du = scratch(M * C, "trimul du"), *dgl = scratch(M * C, "trimul dgate");
  /* out = sg ⊙ u: du = dout ⊙ sg, d(gate logit) = dout ⊙ u ⊙ sg(1 − sg) */
  for (int64_t e = 0; e < M * C; e++) {
    double g = s.sg[e], d = dout[e];
    du[e] = (mf_real)(d * g);
    dgl[e] = (mf_real)(d * (double)s.u[e] * g * (1.0 - g));
  }
  mf_real *dy = scratch(M * Ch, "trimul dy"), *dt = scratch(M * Ch, "trimul dT");
  /* u = y·W_zᵀ;  gate logit = x·W_gᵀ (dx starts here, ASSIGN) */
  mf_linear_backward(dy, GRAD(w_z), NULL, du, s.y, w->w_z, M, Ch, C);
  mf_linear_backward(dx, GRAD(w_g), NULL, dgl, s.x, w->w_g, M, C, C);
  mf_free(du);
  mf_free(dgl);
  /* y = LN_out(T) */
  mf_layernorm_backward(dt, GRAD(ln_out_g), GRAD(ln_out_b), dy, s.mu_out, s.rs_out, s.t,
                        w->ln_out_g, M, Ch, MF_LN_FULL);

  /* the contraction, per channel on channel-major copies */
  mf_real *dtt = scratch(Ch * M, "trimul dT^c"), *at = scratch(Ch * M, "trimul A");
  mf_real *bt = scratch(Ch * M, "trimul B"), *dat = scratch(Ch * M, "trimul dA");
  mf_real *dbt = scratch(Ch * M, "trimul dB");
  transpose(dtt, dt, M, Ch);
  gated_operand(at, s.pa, s.sa, pm, M, Ch);
  gated_operand(bt, s.pb, s.sb, pm, M, Ch);
  if (outgoing) {
    /* T_c = A_c·B_cᵀ  ⇒  dA_c = dT_c·B_c,  dB_c = dT_cᵀ·A_c */
    mf_gemm_batched(0, 0, n, n, n, 1.0, dtt, n, M, bt, n, M, 0.0, dat, n, M, Ch);
    mf_gemm_batched(1, 0, n, n, n, 1.0, dtt, n, M, at, n, M, 0.0, dbt, n, M, Ch);
  } else {
    /* T_c = A_cᵀ·B_c  ⇒  dA_c = B_c·dT_cᵀ,  dB_c = A_c·dT_c */
    mf_gemm_batched(0, 1, n, n, n, 1.0, bt, n, M, dtt, n, M, 0.0, dat, n, M, Ch);
    mf_gemm_batched(0, 0, n, n, n, 1.0, at, n, M, dtt, n, M, 0.0, dbt, n, M, Ch);
  }
  mf_free(dtt);
  mf_free(at);
  mf_free(bt);

  /* A = pm ⊙ mf_sigmoid(x·W_agᵀ) ⊙ (x·W_apᵀ), B likewise; dx += each projection's dinp.
   * dy and dt are free now and serve as the (M, Ch) gradients of p and the gate logit. */
  mf_real *dp = dy, *dg = dt;
  gated_operand_backward(dp, dg, dat, s.pa, s.sa, pm, M, Ch);
  mf_linear_backward(NULL, GRAD(w_ap), NULL, dp, s.x, w->w_ap, M, C, Ch);
  mf_gemm(0, 0, M, C, Ch, 1.0, dp, Ch, w->w_ap, C, 1.0, dx, C);
  mf_linear_backward(NULL, GRAD(w_ag), NULL, dg, s.x, w->w_ag, M, C, Ch);
  mf_gemm(0, 0, M, C, Ch, 1.0, dg, Ch, w->w_ag, C, 1.0, dx, C);
  gated_operand_backward(dp, dg, dbt, s.pb, s.sb, pm, M, Ch);
  mf_linear_backward(NULL, GRAD(w_bp), NULL, dp, s.x, w->w_bp, M, C, Ch);
  mf_gemm(0, 0, M, C, Ch, 1.0, dp, Ch, w->w_bp, C, 1.0, dx, C);
  mf_linear_backward(NULL, GRAD(w_bg), NULL, dg, s.x, w->w_bg, M, C, Ch);
  mf_gemm(0, 0, M, C, Ch, 1.0, dg, Ch, w->w_bg, C, 1.0, dx, C);
  mf_free(dat);
  mf_free(dbt);
  mf_free(dy);
  mf_free(dt);

  /* x = LN_in(z) */
  mf_layernorm_backward(dz, GRAD(ln_in_g), GRAD(ln_in_b), dx, s.mu_in, s.rs_in, z, w->ln_in_g,
                        M, C, MF_LN_FULL);
  mf_free(dx);
}
