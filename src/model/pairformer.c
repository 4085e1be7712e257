/* pairformer.c — CPU Pairformer block: parameter binding, AF3 initialisation, and the
 * forward/backward composition of the sub-layer ops (see pairformer.h). The sub-layers
 * themselves live in src/ops; this file only wires residuals, masks and dropout. */
#include "model/pairformer.h"
#include "model/params.h"

#include <math.h>
#include <string.h>

#include "core/philox.h"
#include "ops/dropout.h"
#include "ops/transition.h"

mf_pairformer_config mf_pairformer_config_default(void) {
  mf_pairformer_config c = {.c_s = 384, .c_z = 128, .c_mul = 128, .h_tri = 4, .d_tri = 32,
                            .h_s = 16, .d_s = 24, .n_trans = 4, .p_drop = 0.25};
  return c;
}

mf_status mf_pairformer_config_check(const mf_pairformer_config *c) {
#define POS(f) \
  if (c->f <= 0) return mf_error_set(MF_ERR_CONFIG, "pairformer config: " #f " = %d, must be > 0", c->f)
  POS(c_s);
  POS(c_z);
  POS(c_mul);
  POS(h_tri);
  POS(d_tri);
  POS(h_s);
  POS(d_s);
  POS(n_trans);
#undef POS
  if (!(c->p_drop >= 0 && c->p_drop < 1))
    return mf_error_set(MF_ERR_CONFIG, "pairformer config: p_drop = %g, must be in [0, 1)",
                        c->p_drop);
  return MF_OK;
}

/* Hands out consecutive slices of a flat buffer (or counts, when base is NULL). */
typedef struct {
  mf_real *base;
  int64_t n;
} slicer;

static mf_real *take(slicer *s, int64_t count) {
  mf_real *p = s->base ? s->base + s->n : NULL;
  s->n += count;
  return p;
}

static void bind_transition(mf_transition_weights *t, slicer *s, int C, int n) {
  t->ln_g = take(s, C);
  t->ln_b = take(s, C);
  t->w_a = take(s, (int64_t)n * C * C);
  t->w_b = take(s, (int64_t)n * C * C);
  t->w_o = take(s, (int64_t)n * C * C);
}

static void bind_apb(mf_apb_weights *a, slicer *s, int Cs, int Cz, int H, int D) {
  int64_t HD = (int64_t)H * D;
  a->ln_s_g = take(s, Cs);
  a->ln_s_b = take(s, Cs);
  a->w_q = take(s, HD * Cs);
  a->b_q = take(s, HD);
  a->w_k = take(s, HD * Cs);
  a->w_v = take(s, HD * Cs);
  a->w_g = take(s, HD * Cs);
  a->ln_z_g = take(s, Cz);
  a->ln_z_b = take(s, Cz);
  a->w_z = take(s, (int64_t)H * Cz);
  a->w_o = take(s, (int64_t)Cs * HD);
}

int64_t mf_pairformer_block_bind(mf_pairformer_block *w, mf_real *flat,
                                 const mf_pairformer_config *c) {
  slicer s = {flat, 0};
  s.n += mf_trimul_weights_bind(&w->tri_out, flat ? flat + s.n : NULL, c->c_z, c->c_mul);
  s.n += mf_trimul_weights_bind(&w->tri_in, flat ? flat + s.n : NULL, c->c_z, c->c_mul);
  s.n += mf_triatt_weights_bind(&w->att_start, flat ? flat + s.n : NULL, c->c_z, c->h_tri,
                                c->d_tri);
  s.n += mf_triatt_weights_bind(&w->att_end, flat ? flat + s.n : NULL, c->c_z, c->h_tri,
                                c->d_tri);
  bind_transition(&w->pair_trans, &s, c->c_z, c->n_trans);
  bind_apb(&w->single_att, &s, c->c_s, c->c_z, c->h_s, c->d_s);
  bind_transition(&w->single_trans, &s, c->c_s, c->n_trans);
  return s.n;
}

/* ------------------------------------------------------------------ initialisation */

void mf_pairformer_block_init(mf_pairformer_block *w, const mf_pairformer_config *c,
                              uint64_t seed, uint32_t block) {
  /* the policy (lecun / He / zeros / ones per field) lives in the parameter table */
  mf_params_table t;
  mf_status st = mf_params_build_pairformer(&t, c, 1);
  MF_ASSERT(st == MF_OK, "pairformer_block_init: parameter table: %s", mf_error_message());
  mf_params_init_block(&t, w, seed, block);
  mf_params_free(&t);
}

/* ------------------------------------------------------------------ saved layout */

/* Views into the saved workspace; every size derives from (N, config). */
typedef struct {
  mf_real *z1, *z2, *z3, *z4, *z5;   /* (N, N, Cz) inputs of sub-layers 2..6 (z5 = z_out) */
  mf_real *s1;                       /* (N, Cs) input of the single transition */
  mf_real *tm_out, *tm_in;           /* trimul workspaces */
  mf_real *ta_start, *ta_end;        /* triatt workspaces */
  mf_real *pt_mean, *pt_rstd;        /* (N²) pair transition LN stats */
  mf_real *apb;                      /* single attention workspace */
  mf_real *st_mean, *st_rstd;        /* (N) single transition LN stats */
  size_t total;
} saved_views;

static saved_views saved_layout(mf_real *base, int N, const mf_pairformer_config *c) {
  saved_views v;
  size_t off = 0, NN = (size_t)N * N, zn = NN * (size_t)c->c_z;
#define PUT(field, count)                  \
  v.field = base ? base + off : NULL;      \
  off += (size_t)(count)
  PUT(z1, zn);
  PUT(z2, zn);
  PUT(z3, zn);
  PUT(z4, zn);
  PUT(z5, zn);
  PUT(s1, (size_t)N * c->c_s);
  PUT(tm_out, mf_trimul_saved_size(N, c->c_z, c->c_mul));
  PUT(tm_in, mf_trimul_saved_size(N, c->c_z, c->c_mul));
  PUT(ta_start, mf_triatt_saved_size(N, c->c_z, c->h_tri, c->d_tri));
  PUT(ta_end, mf_triatt_saved_size(N, c->c_z, c->h_tri, c->d_tri));
  PUT(pt_mean, NN);
  PUT(pt_rstd, NN);
  PUT(apb, mf_apb_saved_size(N, c->c_s, c->c_z, c->h_s, c->d_s));
  PUT(st_mean, N);
  PUT(st_rstd, N);
#undef PUT
  v.total = off;
  return v;
}

size_t mf_pairformer_block_saved_size(int N, const mf_pairformer_config *c) {
  return saved_layout(NULL, N, c).total;
}

/* ------------------------------------------------------------------ forward/backward */

/* Dropout of sub-layer k (0..3): row-wise for 0..2, column-wise for 3; a mask (N, Cz). */
static mf_dropout_axis drop_axis(int k) { return k == 3 ? MF_DROPOUT_COLWISE : MF_DROPOUT_ROWWISE; }

static void drop_mask(mf_real *mask, int N, int Cz, const mf_pairformer_config *c,
                      mf_pairformer_rng rng, int k) {
  double p = rng.training ? c->p_drop : 0.0;
  mf_dropout_mask(mask, N, Cz, p, rng.seed, mf_rng_stream(rng.step, MF_RNG_DROPOUT, 4 * rng.block + (uint32_t)k));
}

static uint8_t *pair_mask(const uint8_t *mask, int N) {
  if (!mask) return NULL;
  uint8_t *pm = mf_xmalloc((size_t)N * N, "pair mask");
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) pm[(size_t)i * N + j] = (uint8_t)(mask[i] && mask[j]);
  return pm;
}

void mf_pairformer_block_forward(mf_real *s_out, mf_real *z_out, mf_real *saved,
                                 const mf_real *s, const mf_real *z, const uint8_t *mask,
                                 const mf_pairformer_block *w, const mf_pairformer_config *c,
                                 int N, mf_pairformer_rng rng) {
  MF_ASSERT(N > 0 && mf_pairformer_config_check(c) == MF_OK, "%s", mf_error_message());
  const int Cz = c->c_z, Cs = c->c_s;
  const size_t zn = (size_t)N * N * Cz;
  saved_views v = saved_layout(saved, N, c);
  uint8_t *pm = pair_mask(mask, N);
  mf_real *upd = mf_xmalloc(zn * sizeof(mf_real), "pairformer update");
  mf_real *dmask = mf_xmalloc((size_t)N * Cz * sizeof(mf_real), "dropout mask");

  /* the four triangle updates, each: z_next = z_prev + dropout(update(z_prev)) */
  const mf_real *zin[4] = {z, v.z1, v.z2, v.z3};
  mf_real *zout[4] = {v.z1, v.z2, v.z3, v.z4};
  for (int k = 0; k < 4; k++) {
    if (k == 0) mf_trimul_forward(upd, v.tm_out, zin[k], pm, &w->tri_out, N, Cz, c->c_mul, 1);
    if (k == 1) mf_trimul_forward(upd, v.tm_in, zin[k], pm, &w->tri_in, N, Cz, c->c_mul, 0);
    if (k == 2)
      mf_triatt_forward(upd, v.ta_start, zin[k], pm, &w->att_start, N, Cz, c->h_tri, c->d_tri, 1);
    if (k == 3)
      mf_triatt_forward(upd, v.ta_end, zin[k], pm, &w->att_end, N, Cz, c->h_tri, c->d_tri, 0);
    drop_mask(dmask, N, Cz, c, rng, k);
    memcpy(zout[k], zin[k], zn * sizeof(mf_real));
    mf_dropout_residual_forward(zout[k], upd, dmask, N, N, Cz, drop_axis(k));
  }
  /* pair transition */
  const mf_transition_weights *pt = &w->pair_trans;
  mf_transition_forward(upd, v.pt_mean, v.pt_rstd, v.z4, pt->ln_g, pt->ln_b, pt->w_a, pt->w_b,
                        pt->w_o, (int64_t)N * N, Cz, c->n_trans * Cz, MF_LN_FULL);
  for (size_t i = 0; i < zn; i++) z_out[i] = v.z5[i] = v.z4[i] + upd[i];

  /* single track: attention with pair bias from the final z, then the transition */
  mf_real *supd = mf_xmalloc((size_t)N * Cs * sizeof(mf_real), "single update");
  mf_apb_forward(supd, v.apb, s, v.z5, mask, &w->single_att, N, Cs, Cz, c->h_s, c->d_s);
  for (size_t i = 0; i < (size_t)N * Cs; i++) v.s1[i] = s[i] + supd[i];
  const mf_transition_weights *st = &w->single_trans;
  mf_transition_forward(supd, v.st_mean, v.st_rstd, v.s1, st->ln_g, st->ln_b, st->w_a, st->w_b,
                        st->w_o, N, Cs, c->n_trans * Cs, MF_LN_FULL);
  for (size_t i = 0; i < (size_t)N * Cs; i++) s_out[i] = v.s1[i] + supd[i];

  mf_free(supd);
  mf_free(dmask);
  mf_free(upd);
  mf_free(pm);
}

/* g (n) += t (n) */
static void add_into(mf_real *g, const mf_real *t, size_t n) {
  for (size_t i = 0; i < n; i++) g[i] += t[i];
}

void mf_pairformer_block_backward(mf_real *ds, mf_real *dz, const mf_pairformer_block *grads,
                                  const mf_real *ds_out, const mf_real *dz_out,
                                  const mf_real *saved, const mf_real *s, const mf_real *z,
                                  const uint8_t *mask, const mf_pairformer_block *w,
                                  const mf_pairformer_config *c, int N, mf_pairformer_rng rng) {
  MF_ASSERT(N > 0 && mf_pairformer_config_check(c) == MF_OK, "%s", mf_error_message());
  const int Cz = c->c_z, Cs = c->c_s;
  const size_t zn = (size_t)N * N * Cz, sn = (size_t)N * Cs;
  saved_views v = saved_layout((mf_real *)saved, N, c);
  const mf_pairformer_block *g = grads;
  uint8_t *pm = pair_mask(mask, N);
  mf_real *tz = mf_xmalloc(zn * sizeof(mf_real), "pairformer dz scratch");
  mf_real *tz2 = mf_xmalloc(zn * sizeof(mf_real), "pairformer dz scratch 2");
  mf_real *ts = mf_xmalloc(sn * sizeof(mf_real), "pairformer ds scratch");
  mf_real *dmask = mf_xmalloc((size_t)N * Cz * sizeof(mf_real), "dropout mask");

  /* s_out = s1 + T(s1): ds1 = ds_out + T'(ds_out) */
  const mf_transition_weights *st = &w->single_trans;
  mf_transition_backward(ts, g ? g->single_trans.ln_g : NULL, g ? g->single_trans.ln_b : NULL,
                         g ? g->single_trans.w_a : NULL, g ? g->single_trans.w_b : NULL,
                         g ? g->single_trans.w_o : NULL, ds_out, v.st_mean, v.st_rstd, v.s1,
                         st->ln_g, st->ln_b, st->w_a, st->w_b, st->w_o, N, Cs, c->n_trans * Cs,
                         MF_LN_FULL);
  add_into(ts, ds_out, sn); /* ts = ds1 */

  /* s1 = s + APB(s, z5): ds = ds1 + APB'_s(ds1); dz5 = dz_out + APB'_z(ds1) */
  mf_apb_backward(ds, dz, g ? &g->single_att : NULL, ts, v.apb, s, v.z5, mask, &w->single_att, N,
                  Cs, Cz, c->h_s, c->d_s);
  add_into(ds, ts, sn);
  add_into(dz, dz_out, zn); /* dz = dz5 */

  /* z5 = z4 + PT(z4): dz4 = dz5 + PT'(dz5) */
  const mf_transition_weights *pt = &w->pair_trans;
  mf_transition_backward(tz, g ? g->pair_trans.ln_g : NULL, g ? g->pair_trans.ln_b : NULL,
                         g ? g->pair_trans.w_a : NULL, g ? g->pair_trans.w_b : NULL,
                         g ? g->pair_trans.w_o : NULL, dz, v.pt_mean, v.pt_rstd, v.z4, pt->ln_g,
                         pt->ln_b, pt->w_a, pt->w_b, pt->w_o, (int64_t)N * N, Cz,
                         c->n_trans * Cz, MF_LN_FULL);
  add_into(dz, tz, zn);

  /* the triangle updates in reverse: z_{k+1} = z_k + drop(U_k(z_k)) */
  const mf_real *zin[4] = {z, v.z1, v.z2, v.z3};
  for (int k = 3; k >= 0; k--) {
    drop_mask(dmask, N, Cz, c, rng, k);
    mf_dropout_backward(tz2, dz, dmask, N, N, Cz, drop_axis(k)); /* dU = dz ⊙ mask */
    if (k == 0)
      mf_trimul_backward(tz, g ? &g->tri_out : NULL, tz2, v.tm_out, zin[k], pm, &w->tri_out, N,
                         Cz, c->c_mul, 1);
    if (k == 1)
      mf_trimul_backward(tz, g ? &g->tri_in : NULL, tz2, v.tm_in, zin[k], pm, &w->tri_in, N, Cz,
                         c->c_mul, 0);
    if (k == 2)
      mf_triatt_backward(tz, g ? &g->att_start : NULL, tz2, v.ta_start, zin[k], pm, &w->att_start,
                         N, Cz, c->h_tri, c->d_tri, 1);
    if (k == 3)
      mf_triatt_backward(tz, g ? &g->att_end : NULL, tz2, v.ta_end, zin[k], pm, &w->att_end, N,
                         Cz, c->h_tri, c->d_tri, 0);
    add_into(dz, tz, zn);
  }

  mf_free(dmask);
  mf_free(ts);
  mf_free(tz2);
  mf_free(tz);
  mf_free(pm);
}
