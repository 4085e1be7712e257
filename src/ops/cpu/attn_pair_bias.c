/* attn_pair_bias.c — CPU reference of the trunk's single attention with pair bias (see
 * attn_pair_bias.h), composed from the LayerNorm, linear and attention references; this
 * file only moves data between the channel-last (N, H·D) layout of the projections and
 * the head-major (B=1, R=1, H, N, D) layout of mf_attention_*. Not a fused or GPU path.
 *
 * Backward, in reverse order of the forward:
 *   d(og) = dΔs·W_o, dW_o += dΔsᵀ·og                (og = concat_h gated o, (N, H·D))
 *   dq, dk, dv, dg, db = attention backward
 *   dâ = dq·W_q + dk·W_k + dv·W_v + dg·W_g, dW_* += d*ᵀ·â, db_q += Σ dq
 *   ds = LN_s backward(dâ)
 *   per pair row i: ẑ_i = LN_z(z_i) recomputed, dẑ_i = db[:,i,:]ᵀ·W_z, dW_z += db[:,i,:]·ẑ_i,
 *                   dz_i = LN_z backward(dẑ_i)
 * The pair work goes one row i at a time, so its scratch is O(N·Cz), not O(N²·Cz). */
#include "ops/attn_pair_bias.h"

#include <math.h>
#include <string.h>

#include "ops/attention.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/linear.h"

/* Where each saved tensor lives inside the workspace. */
typedef struct {
  mf_real *mean_s, *rstd_s; /* (N) */
  mf_real *ahat;            /* (N, Cs) LN_s(s) */
  mf_real *qh, *kh, *vh;    /* (H, N, D) */
  mf_real *gh;              /* (H, N, D) gate pre-activation */
  mf_real *bias;            /* (H, N, N) */
  mf_real *lse;             /* (H, N) */
  mf_real *og;              /* (N, H·D) gated attention output, input of W_o */
} saved_layout;

static saved_layout layout_of(mf_real *base, int N, int Cs, int H, int D) {
  const int64_t n = N, hnd = (int64_t)H * N * D;
  saved_layout L;
  L.mean_s = base;
  L.rstd_s = L.mean_s + n;
  L.ahat = L.rstd_s + n;
  L.qh = L.ahat + n * Cs;
  L.kh = L.qh + hnd;
  L.vh = L.kh + hnd;
  L.gh = L.vh + hnd;
  L.bias = L.gh + hnd;
  L.lse = L.bias + (int64_t)H * n * n;
  L.og = L.lse + (int64_t)H * n;
  return L;
}

int64_t mf_apb_saved_size(int N, int Cs, int Cz, int H, int D) {
  (void)Cz;
  const int64_t n = N;
  return 2 * n + n * Cs + 4 * (int64_t)H * n * D + (int64_t)H * n * n + (int64_t)H * n +
         n * H * D;
}

static void check_args(int N, int Cs, int Cz, int H, int D) {
  MF_ASSERT(N > 0 && Cs > 0 && Cz > 0 && H > 0 && D > 0,
            "attn_pair_bias dims N=%d Cs=%d Cz=%d H=%d D=%d", N, Cs, Cz, H, D);
}

/* dst (H, N, D) ← src (N, H·D) */
static void to_heads(mf_real *dst, const mf_real *src, int N, int H, int D) {
  for (int h = 0; h < H; h++)
    for (int i = 0; i < N; i++)
      memcpy(dst + ((int64_t)h * N + i) * D, src + ((int64_t)i * H + h) * D,
             (size_t)D * sizeof(mf_real));
}

/* dst (N, H·D) ← src (H, N, D) */
static void from_heads(mf_real *dst, const mf_real *src, int N, int H, int D) {
  for (int h = 0; h < H; h++)
    for (int i = 0; i < N; i++)
      memcpy(dst + ((int64_t)i * H + h) * D, src + ((int64_t)h * N + i) * D,
             (size_t)D * sizeof(mf_real));
}

static mf_attn_dims attn_dims(int N, int H, int D) {
  return (mf_attn_dims){1, 1, H, N, N, D, 1.0 / sqrt((double)D)};
}

static void *scratch(int64_t n, const char *what) {
  return mf_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(mf_real), what);
}

void mf_apb_forward(mf_real *out, mf_real *saved, const mf_real *s, const mf_real *z,
                    const uint8_t *mask, const mf_apb_weights *w, int N, int Cs, int Cz, int H,
                    int D) {
  check_args(N, Cs, Cz, H, D);
  MF_ASSERT(out && saved && s && z && w, "attn_pair_bias forward: missing argument");
  MF_ASSERT(w->ln_s_g && w->ln_s_b && w->w_q && w->b_q && w->w_k && w->w_v && w->w_g &&
                w->ln_z_g && w->ln_z_b && w->w_z && w->w_o,
            "attn_pair_bias forward: missing weight");
  const int HD = H * D;
  const int64_t n = N, nhd = n * HD;
  saved_layout L = layout_of(saved, N, Cs, H, D);

  /* â = LN(s); q, k, v, g projections into head layout */
  mf_layernorm_forward(L.ahat, L.mean_s, L.rstd_s, s, w->ln_s_g, w->ln_s_b, n, Cs, MF_LN_FULL);
  mf_real *proj = scratch(nhd + n * Cz + n * H + 2 * n, "apb forward scratch");
  mf_real *zhat = proj + nhd, *bz = zhat + n * Cz, *zmean = bz + n * H, *zrstd = zmean + n;
  const mf_real *wp[4] = {w->w_q, w->w_k, w->w_v, w->w_g};
  mf_real *heads[4] = {L.qh, L.kh, L.vh, L.gh};
  for (int p = 0; p < 4; p++) {
    mf_linear_forward(proj, L.ahat, wp[p], p == 0 ? w->b_q : NULL, n, Cs, HD);
    to_heads(heads[p], proj, N, H, D);
  }

  /* pair bias, one row i at a time: bias[h, i, j] = (LN_z(z_ij)·W_zᵀ)[h] */
  for (int i = 0; i < N; i++) {
    mf_layernorm_forward(zhat, zmean, zrstd, z + (int64_t)i * n * Cz, w->ln_z_g, w->ln_z_b, n, Cz,
                         MF_LN_FULL);
    mf_linear_forward(bz, zhat, w->w_z, NULL, n, Cz, H);
    for (int h = 0; h < H; h++)
      for (int j = 0; j < N; j++) L.bias[((int64_t)h * N + i) * N + j] = bz[(int64_t)j * H + h];
  }

  /* gated attention in head layout, back to (N, H·D), output projection */
  mf_attention_forward(proj, L.lse, L.qh, L.kh, L.vh, L.bias, mask, L.gh, attn_dims(N, H, D));
  from_heads(L.og, proj, N, H, D);
  mf_linear_forward(out, L.og, w->w_o, NULL, n, HD, Cs);
  mf_free(proj);
}

void mf_apb_backward(mf_real *ds, mf_real *dz, const mf_apb_weights *dw, const mf_real *dout,
                     const mf_real *saved, const mf_real *s, const mf_real *z,
                     const uint8_t *mask, const mf_apb_weights *w, int N, int Cs, int Cz, int H,
                     int D) {
  check_args(N, Cs, Cz, H, D);
  MF_ASSERT(dout && saved && s && z && w, "attn_pair_bias backward: missing argument");
  MF_ASSERT(w->ln_s_g && w->w_q && w->w_k && w->w_v && w->w_g && w->ln_z_g && w->ln_z_b &&
                w->w_z && w->w_o,
            "attn_pair_bias backward: missing weight");
  static const mf_apb_weights none;
  const mf_apb_weights *g = dw ? dw : &none;
  const int HD = H * D;
  const int64_t n = N, nhd = n * HD, hnd = (int64_t)H * N * D;
  /* the backward only reads through these pointers */
  saved_layout L = layout_of((mf_real *)saved, N, Cs, H, D);

  const int need_s = ds || g->ln_s_g || g->ln_s_b;
  const int need_z = dz || g->w_z || g->ln_z_g || g->ln_z_b;
  const int64_t nscr = nhd + 5 * hnd + (need_z ? (int64_t)H * n * n : 0) +
                       (need_s ? n * Cs : 0) + (need_z ? 2 * n * Cz + n * H + 2 * n : 0);
  mf_real *buf = scratch(nscr, "apb backward scratch");
  mf_real *dproj = buf, *doh = dproj + nhd, *dqh = doh + hnd, *dkh = dqh + hnd,
          *dvh = dkh + hnd, *dgh = dvh + hnd, *next = dgh + hnd;
  mf_real *dbias = NULL, *dahat = NULL;
  if (need_z) {
    dbias = next;
    next += (int64_t)H * n * n;
  }
  if (need_s) {
    dahat = next;
    next = dahat + n * Cs;
  }

  /* output projection: d(og) = dΔs·W_o, dW_o += dΔsᵀ·og */
  mf_linear_backward(dproj, g->w_o, NULL, dout, L.og, w->w_o, n, HD, Cs);
  to_heads(doh, dproj, N, H, D);

  /* attention */
  mf_attention_backward(dqh, dkh, dvh, dbias, dgh, doh, L.lse, L.qh, L.kh, L.vh, L.bias, mask,
                        L.gh, attn_dims(N, H, D));

  /* projections from â: dâ = Σ_p d_p·W_p (ASSIGN first, then add), dW_p += d_pᵀ·â */
  const mf_real *wp[4] = {w->w_q, w->w_k, w->w_v, w->w_g};
  mf_real *gwp[4] = {g->w_q, g->w_k, g->w_v, g->w_g};
  const mf_real *dheads[4] = {dqh, dkh, dvh, dgh};
  for (int p = 0; p < 4; p++) {
    from_heads(dproj, dheads[p], N, H, D);
    mf_real *dinp = need_s && p == 0 ? dahat : NULL;
    mf_linear_backward(dinp, gwp[p], p == 0 ? g->b_q : NULL, dproj, L.ahat, wp[p], n, Cs, HD);
    if (need_s && p > 0) mf_gemm(0, 0, n, Cs, HD, 1.0, dproj, HD, wp[p], Cs, 1.0, dahat, Cs);
  }
  if (need_s)
    mf_layernorm_backward(ds, g->ln_s_g, g->ln_s_b, dahat, L.mean_s, L.rstd_s, s, w->ln_s_g, n,
                          Cs, MF_LN_FULL);

  /* pair bias, one row i at a time */
  if (need_z) {
    mf_real *zhat = next, *dzhat = zhat + n * Cz, *dbz = dzhat + n * Cz, *zmean = dbz + n * H,
            *zrstd = zmean + n;
    for (int i = 0; i < N; i++) {
      const mf_real *zi = z + (int64_t)i * n * Cz;
      mf_layernorm_forward(zhat, zmean, zrstd, zi, w->ln_z_g, w->ln_z_b, n, Cz, MF_LN_FULL);
      for (int j = 0; j < N; j++)
        for (int h = 0; h < H; h++) dbz[(int64_t)j * H + h] = dbias[((int64_t)h * N + i) * N + j];
      mf_linear_backward(dzhat, g->w_z, NULL, dbz, zhat, w->w_z, n, Cz, H);
      if (dz || g->ln_z_g || g->ln_z_b)
        mf_layernorm_backward(dz ? dz + (int64_t)i * n * Cz : NULL, g->ln_z_g, g->ln_z_b, dzhat,
                              zmean, zrstd, zi, w->ln_z_g, n, Cz, MF_LN_FULL);
    }
  }
  mf_free(buf);
}
