/* triatt.c — CPU reference of triangle attention (starting / ending node), forward and
 * backward: LayerNorm and projections through mf_layernorm_* / mf_linear_*, the attention
 * itself through mf_attention_* (B = 1, R = N rows, bias (1, H, N, N) shared by the rows).
 * The ending node transposes z and pm in (i, j), runs the starting-node code and
 * transposes the result (and, in the backward, dout and dz) back.
 * Not a flash kernel and not memory-lean: it is the oracle for the CUDA path. See triatt.h. */
#include "ops/triatt.h"
#include "ops/cpu/cpu_math.h"

#include <math.h>

#include "ops/attention.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/linear.h"

/* The saved workspace, carved in this order (M = N·N, HD = H·D). Everything describes
 * the starting-node problem actually solved, i.e. transposed z for the ending node. */
typedef struct {
  mf_real *x;          /* (M, C)        LN(z) */
  mf_real *mu, *rs;    /* (M)           LN statistics */
  mf_real *q, *k, *v;  /* (N, H, N, D)  attention layout (r = i, h, j, d) */
  mf_real *g;          /* (N, H, N, D)  gate logits */
  mf_real *bias;       /* (H, N, N)     b[h, j, k] */
  mf_real *lse;        /* (N, H, N)     log-sum-exp per query row */
  mf_real *oc;         /* (M, HD)       gated attention output, channel last */
} triatt_saved;

static void carve(triatt_saved *s, mf_real *base, int64_t M, int C, int H, int D) {
  const int64_t HD = (int64_t)H * D;
  mf_real *p = base;
  s->x = p; p += M * C;
  s->mu = p; p += M;
  s->rs = p; p += M;
  s->q = p; p += M * HD;
  s->k = p; p += M * HD;
  s->v = p; p += M * HD;
  s->g = p; p += M * HD;
  s->bias = p; p += M * H;
  s->lse = p; p += M * H;
  s->oc = p;
}

size_t mf_triatt_saved_size(int N, int C, int H, int D) {
  MF_ASSERT(N > 0 && C > 0 && H > 0 && D > 0, "triatt dims N=%d C=%d H=%d D=%d", N, C, H, D);
  return (size_t)N * (size_t)N * ((size_t)C + 2 + 5 * (size_t)H * (size_t)D + 2 * (size_t)H);
}

int64_t mf_triatt_weights_bind(mf_triatt_weights *w, mf_real *flat, int C, int H, int D) {
  MF_ASSERT(w && C > 0 && H > 0 && D > 0, "triatt weights C=%d H=%d D=%d", C, H, D);
  const int64_t c = C, h = H, hd = (int64_t)H * D;
  mf_real **field[] = {&w->ln_g, &w->ln_b, &w->w_q, &w->w_k, &w->w_v, &w->w_b, &w->w_g, &w->w_o};
  const int64_t size[] = {c, c, hd * c, hd * c, hd * c, h * c, hd * c, c * hd};
  return mf_bind_fields(field, size, sizeof size / sizeof size[0], flat);
}

static void *scratch(int64_t n, size_t elem, const char *what) {
  return mf_xmalloc((size_t)n * elem, what);
}

/* dst (N, N, C) = src transposed in its first two axes: dst[j, i, :] = src[i, j, :]. */
static void transpose_pair(mf_real *dst, const mf_real *src, int N, int C) {
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < N; j++)
      for (int64_t c = 0; c < C; c++) dst[(j * N + i) * C + c] = src[(i * N + j) * C + c];
}

static void transpose_mask(uint8_t *dst, const uint8_t *src, int N) {
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < N; j++) dst[j * N + i] = src[i * N + j];
}

/* Between channel-last (i, j, h, d) and attention layout (i, h, j, d), both (N·N·H·D):
 * to_heads = 1 moves (i, j, h, d) → (i, h, j, d), 0 the other way. */
static void permute_heads(mf_real *dst, const mf_real *src, int N, int H, int D, int to_heads) {
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < N; j++)
      for (int64_t h = 0; h < H; h++) {
        const int64_t cl = ((i * N + j) * H + h) * D, hl = ((i * H + h) * N + j) * D;
        for (int64_t d = 0; d < D; d++) {
          if (to_heads) dst[hl + d] = src[cl + d];
          else dst[cl + d] = src[hl + d];
        }
      }
}

static mf_attn_dims attn_dims(int N, int H, int D) {
  mf_attn_dims d = {.B = 1, .R = N, .H = H, .Q = N, .K = N, .D = D, .scale = 1.0 / sqrt((double)D)};
  return d;
}

/* The starting node on z (N, N, C) with key mask pm (N, N) or NULL: out (N, N, C). */
static void starting_forward(mf_real *out, mf_real *saved, const mf_real *z, const uint8_t *pm,
                             const mf_triatt_weights *w, int N, int C, int H, int D) {
  const int64_t n = N, M = n * n, HD = (int64_t)H * D;
  triatt_saved s;
  carve(&s, saved, M, C, H, D);
  mf_layernorm_forward(s.x, s.mu, s.rs, z, w->ln_g, w->ln_b, M, C, MF_LN_FULL);

  /* q, k, v, g = x·Wᵀ (M, HD), then to the attention layout */
  mf_real *tmp = scratch(M * HD, sizeof(mf_real), "triatt projection");
  mf_real *const proj_w[4] = {w->w_q, w->w_k, w->w_v, w->w_g};
  mf_real *const proj_s[4] = {s.q, s.k, s.v, s.g};
  for (int p = 0; p < 4; p++) {
    mf_linear_forward(tmp, s.x, proj_w[p], NULL, M, C, (int)HD);
    permute_heads(proj_s[p], tmp, N, H, D, 1);
  }
  /* b[h, j, k] = (x_jk·W_bᵀ)[h] */
  mf_real *bl = scratch(M * H, sizeof(mf_real), "triatt bias");
  mf_linear_forward(bl, s.x, w->w_b, NULL, M, C, H);
  for (int64_t m = 0; m < M; m++)
    for (int h = 0; h < H; h++) s.bias[h * M + m] = bl[m * H + h];
  mf_free(bl);

  /* o (i, h, j, d) = sigmoid(g) ⊙ attention; key mask of row i is pm[i, :] */
  mf_attention_forward(tmp, s.lse, s.q, s.k, s.v, s.bias, pm, s.g, attn_dims(N, H, D));
  permute_heads(s.oc, tmp, N, H, D, 0);
  mf_free(tmp);
  mf_linear_forward(out, s.oc, w->w_o, NULL, M, (int)HD, C);
}

#define GRAD(field) (grads ? grads->field : NULL)

/* Backward of starting_forward: dz (N, N, C) ASSIGN, parameter gradients ACCUMULATE. */
static void starting_backward(mf_real *dz, const mf_triatt_weights *grads, const mf_real *dout,
                              const mf_real *saved, const mf_real *z, const uint8_t *pm,
                              const mf_triatt_weights *w, int N, int C, int H, int D) {
  const int64_t n = N, M = n * n, HD = (int64_t)H * D;
  triatt_saved s;
  carve(&s, (mf_real *)saved, M, C, H, D); /* read only below */

  /* out = oc·W_oᵀ */
  mf_real *doc = scratch(M * HD, sizeof(mf_real), "triatt doc");
  mf_linear_backward(doc, GRAD(w_o), NULL, dout, s.oc, w->w_o, M, (int)HD, C);
  mf_real *dob = scratch(M * HD, sizeof(mf_real), "triatt dO");
  permute_heads(dob, doc, N, H, D, 1);

  /* the attention (all its gradients assign) */
  mf_real *dq = scratch(M * HD, sizeof(mf_real), "triatt dq");
  mf_real *dk = scratch(M * HD, sizeof(mf_real), "triatt dk");
  mf_real *dv = scratch(M * HD, sizeof(mf_real), "triatt dv");
  mf_real *dg = scratch(M * HD, sizeof(mf_real), "triatt dgate");
  mf_real *dbias = scratch(M * H, sizeof(mf_real), "triatt dbias");
  mf_attention_backward(dq, dk, dv, dbias, dg, dob, s.lse, s.q, s.k, s.v, s.bias, pm, s.g,
                        attn_dims(N, H, D));
  mf_free(dob);

  /* dx (M, C): the bias projection first (assigns), then q, k, v, g (added) */
  mf_real *dx = scratch(M * C, sizeof(mf_real), "triatt dx");
  mf_real *dbl = scratch(M * H, sizeof(mf_real), "triatt dbias (M, H)");
  for (int64_t m = 0; m < M; m++)
    for (int h = 0; h < H; h++) dbl[m * H + h] = dbias[h * M + m];
  mf_linear_backward(dx, GRAD(w_b), NULL, dbl, s.x, w->w_b, M, C, H);
  mf_free(dbl);
  mf_free(dbias);
  mf_real *const dproj[4] = {dq, dk, dv, dg};
  mf_real *const proj_w[4] = {w->w_q, w->w_k, w->w_v, w->w_g};
  mf_real *const proj_g[4] = {GRAD(w_q), GRAD(w_k), GRAD(w_v), GRAD(w_g)};
  for (int p = 0; p < 4; p++) {
    permute_heads(doc, dproj[p], N, H, D, 0); /* doc: free since the W_o backward */
    mf_linear_backward(NULL, proj_g[p], NULL, doc, s.x, proj_w[p], M, C, (int)HD);
    mf_gemm(0, 0, M, C, HD, 1.0, doc, HD, proj_w[p], C, 1.0, dx, C);
    mf_free(dproj[p]);
  }
  mf_free(doc);

  /* x = LN(z) */
  mf_layernorm_backward(dz, GRAD(ln_g), GRAD(ln_b), dx, s.mu, s.rs, z, w->ln_g, M, C, MF_LN_FULL);
  mf_free(dx);
}

static void check_args(const mf_triatt_weights *w, int N, int C, int H, int D, int starting) {
  MF_ASSERT(N > 0 && C > 0 && H > 0 && D > 0, "triatt dims N=%d C=%d H=%d D=%d", N, C, H, D);
  MF_ASSERT(starting == 0 || starting == 1, "triatt: starting=%d must be 0 or 1", starting);
  MF_ASSERT(w && w->ln_g && w->ln_b && w->w_q && w->w_k && w->w_v && w->w_b && w->w_g && w->w_o,
            "triatt: every weight is required");
}

void mf_triatt_forward(mf_real *out, mf_real *saved, const mf_real *z, const uint8_t *pm,
                       const mf_triatt_weights *w, int N, int C, int H, int D, int starting) {
  check_args(w, N, C, H, D, starting);
  MF_ASSERT(out && saved && z, "triatt_forward: out, saved and z are required");
  if (starting) {
    starting_forward(out, saved, z, pm, w, N, C, H, D);
    return;
  }
  /* ending node: Δz = transpose(starting(zᵀ, pmᵀ)) */
  const int64_t M = (int64_t)N * N;
  mf_real *zt = scratch(M * C, sizeof(mf_real), "triatt z^T");
  mf_real *ot = scratch(M * C, sizeof(mf_real), "triatt out^T");
  uint8_t *pmt = pm ? scratch(M, 1, "triatt pm^T") : NULL;
  transpose_pair(zt, z, N, C);
  if (pm) transpose_mask(pmt, pm, N);
  starting_forward(ot, saved, zt, pmt, w, N, C, H, D);
  transpose_pair(out, ot, N, C);
  mf_free(zt);
  mf_free(ot);
  mf_free(pmt);
}

void mf_triatt_backward(mf_real *dz, const mf_triatt_weights *grads, const mf_real *dout,
                        const mf_real *saved, const mf_real *z, const uint8_t *pm,
                        const mf_triatt_weights *w, int N, int C, int H, int D, int starting) {
  check_args(w, N, C, H, D, starting);
  MF_ASSERT(dz && dout && saved && z, "triatt_backward: dz, dout, saved and z are required");
  if (starting) {
    starting_backward(dz, grads, dout, saved, z, pm, w, N, C, H, D);
    return;
  }
  /* ending node: dz = transpose(starting_backward(doutᵀ; zᵀ, pmᵀ)) */
  const int64_t M = (int64_t)N * N;
  mf_real *zt = scratch(M * C, sizeof(mf_real), "triatt z^T");
  mf_real *dt = scratch(M * C, sizeof(mf_real), "triatt dout^T");
  mf_real *dzt = scratch(M * C, sizeof(mf_real), "triatt dz^T");
  uint8_t *pmt = pm ? scratch(M, 1, "triatt pm^T") : NULL;
  transpose_pair(zt, z, N, C);
  transpose_pair(dt, dout, N, C);
  if (pm) transpose_mask(pmt, pm, N);
  starting_backward(dzt, grads, dt, saved, zt, pmt, w, N, C, H, D);
  transpose_pair(dz, dzt, N, C);
  mf_free(zt);
  mf_free(dt);
  mf_free(dzt);
  mf_free(pmt);
}
