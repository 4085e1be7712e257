/* params.c — the parameter table of a Pairformer stack (see params.h): built from the
 * block's bind, verified against it, then used to bind blocks and to initialise the flat
 * buffer. Not the Pairformer math (pairformer.c) and not file I/O (train/checkpoint.c). */
#include "model/params.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/philox.h"

/* Dimension symbols of the descriptor list, resolved against a config. */
typedef enum { D_CZ, D_CS, D_CH, D_HDT, D_HT, D_HDS, D_HS, D_NCZ, D_NCS } dim_sym;

static int64_t dim_value(dim_sym d, const mf_pairformer_config *c) {
  switch (d) {
    case D_CZ: return c->c_z;
    case D_CS: return c->c_s;
    case D_CH: return c->c_mul;
    case D_HDT: return (int64_t)c->h_tri * c->d_tri;
    case D_HT: return c->h_tri;
    case D_HDS: return (int64_t)c->h_s * c->d_s;
    case D_HS: return c->h_s;
    case D_NCZ: return (int64_t)c->n_trans * c->c_z;
    case D_NCS: return (int64_t)c->n_trans * c->c_s;
  }
  return 0;
}

/* What a field of mf_pairformer_block is: its name, shape (one block) and init. Where it
 * lives in the flat buffer is NOT here: that comes from the bind. */
typedef struct {
  const char *name;
  size_t field;
  int ndim;
  dim_sym dims[2];
  mf_init_kind init;
} field_desc;

#define F1(sub, f, d0, ini) {#sub "." #f, offsetof(mf_pairformer_block, sub.f), 1, {d0, d0}, ini}
#define F2(sub, f, d0, d1, ini) \
  {#sub "." #f, offsetof(mf_pairformer_block, sub.f), 2, {d0, d1}, ini}

#define TRIMUL(sub)                                                                       \
  F1(sub, ln_in_g, D_CZ, MF_INIT_ONES), F1(sub, ln_in_b, D_CZ, MF_INIT_ZEROS),             \
  F2(sub, w_ap, D_CH, D_CZ, MF_INIT_LECUN), F2(sub, w_ag, D_CH, D_CZ, MF_INIT_ZEROS),      \
  F2(sub, w_bp, D_CH, D_CZ, MF_INIT_LECUN), F2(sub, w_bg, D_CH, D_CZ, MF_INIT_ZEROS),      \
  F2(sub, w_g, D_CZ, D_CZ, MF_INIT_ZEROS), F1(sub, ln_out_g, D_CH, MF_INIT_ONES),          \
  F1(sub, ln_out_b, D_CH, MF_INIT_ZEROS), F2(sub, w_z, D_CZ, D_CH, MF_INIT_ZEROS)
#define TRIATT(sub)                                                                       \
  F1(sub, ln_g, D_CZ, MF_INIT_ONES), F1(sub, ln_b, D_CZ, MF_INIT_ZEROS),                   \
  F2(sub, w_q, D_HDT, D_CZ, MF_INIT_LECUN), F2(sub, w_k, D_HDT, D_CZ, MF_INIT_LECUN),      \
  F2(sub, w_v, D_HDT, D_CZ, MF_INIT_LECUN), F2(sub, w_b, D_HT, D_CZ, MF_INIT_LECUN),       \
  F2(sub, w_g, D_HDT, D_CZ, MF_INIT_ZEROS), F2(sub, w_o, D_CZ, D_HDT, MF_INIT_ZEROS)
#define TRANS(sub, C, NC)                                                                 \
  F1(sub, ln_g, C, MF_INIT_ONES), F1(sub, ln_b, C, MF_INIT_ZEROS),                         \
  F2(sub, w_a, NC, C, MF_INIT_HE), F2(sub, w_b, NC, C, MF_INIT_HE),                        \
  F2(sub, w_o, C, NC, MF_INIT_ZEROS)

static const field_desc k_fields[] = {
    TRIMUL(tri_out),
    TRIMUL(tri_in),
    TRIATT(att_start),
    TRIATT(att_end),
    TRANS(pair_trans, D_CZ, D_NCZ),
    F1(single_att, ln_s_g, D_CS, MF_INIT_ONES),
    F1(single_att, ln_s_b, D_CS, MF_INIT_ZEROS),
    F2(single_att, w_q, D_HDS, D_CS, MF_INIT_LECUN),
    F1(single_att, b_q, D_HDS, MF_INIT_ZEROS),
    F2(single_att, w_k, D_HDS, D_CS, MF_INIT_LECUN),
    F2(single_att, w_v, D_HDS, D_CS, MF_INIT_LECUN),
    F2(single_att, w_g, D_HDS, D_CS, MF_INIT_ZEROS),
    F1(single_att, ln_z_g, D_CZ, MF_INIT_ONES),
    F1(single_att, ln_z_b, D_CZ, MF_INIT_ZEROS),
    F2(single_att, w_z, D_HS, D_CZ, MF_INIT_LECUN),
    F2(single_att, w_o, D_CS, D_HDS, MF_INIT_ZEROS),
    TRANS(single_trans, D_CS, D_NCS),
};
#define N_FIELDS ((int)(sizeof k_fields / sizeof k_fields[0]))

/* The struct is made of mf_real* fields only: every one must be described. */
_Static_assert(sizeof(mf_pairformer_block) == sizeof(k_fields) / sizeof(k_fields[0]) * sizeof(mf_real *),
               "every mf_real* field of mf_pairformer_block needs a descriptor in params.c");

static mf_real **field_ptr(mf_pairformer_block *w, size_t field) {
  return (mf_real **)((char *)w + field);
}

const char *mf_init_kind_name(mf_init_kind k) {
  switch (k) {
    case MF_INIT_ZEROS: return "zeros";
    case MF_INIT_ONES: return "ones";
    case MF_INIT_LECUN: return "lecun";
    case MF_INIT_HE: return "he";
    case MF_INIT_CONST: return "const";
  }
  return "?";
}

void mf_params_free(mf_params_table *t) {
  if (!t) return;
  mf_free(t->entries);
  memset(t, 0, sizeof *t);
}

mf_status mf_params_build_pairformer(mf_params_table *t, const mf_pairformer_config *c, int L) {
  memset(t, 0, sizeof *t);
  mf_status st = mf_pairformer_config_check(c);
  if (st != MF_OK) return st;
  if (L < 1 || L > MF_PARAMS_MAX_BLOCKS)
    return mf_error_set(MF_ERR_CONFIG, "parameter table: L = %d blocks, must be in [1, %d]", L,
                        MF_PARAMS_MAX_BLOCKS);

  /* 1. Bind one block over a scratch buffer and read back where each field points. */
  mf_pairformer_block w;
  int64_t per_block = mf_pairformer_block_bind(&w, NULL, c);
  mf_real *probe = mf_malloc((size_t)per_block * sizeof(mf_real), "parameter table probe");
  if (!probe) return MF_ERR_NOMEM;
  mf_pairformer_block_bind(&w, probe, c);
  int64_t off[N_FIELDS];
  for (int f = 0; f < N_FIELDS; f++) off[f] = *field_ptr(&w, k_fields[f].field) - probe;
  mf_free(probe);

  t->entries = mf_calloc(sizeof(mf_param_entry) * N_FIELDS, "parameter table");
  if (!t->entries) return MF_ERR_NOMEM;
  t->n = N_FIELDS;
  t->L = L;
  t->config = *c;

  /* 2. Order the fields by their bound offset (insertion sort: 50 entries). */
  int order[N_FIELDS];
  for (int f = 0; f < N_FIELDS; f++) {
    int k = f;
    while (k > 0 && off[order[k - 1]] > off[f]) {
      order[k] = order[k - 1];
      k--;
    }
    order[k] = f;
  }

  /* 3. Entries in bind order; the declared shapes must tile [0, per_block) exactly. */
  int64_t expect = 0, rng = 0;
  for (int i = 0; i < N_FIELDS; i++) {
    const field_desc *d = &k_fields[order[i]];
    mf_param_entry *e = &t->entries[i];
    snprintf(e->name, sizeof e->name, "pairformer.%s", d->name);
    e->stacked = 1;
    e->ndim = 1 + d->ndim;
    e->shape[0] = L;
    int64_t bn = 1;
    for (int k = 0; k < d->ndim; k++) {
      e->shape[1 + k] = dim_value(d->dims[k], c);
      bn *= e->shape[1 + k];
    }
    MF_ASSERT(off[order[i]] == expect,
              "params table: %s is bound at block offset %lld but the declared shapes before it "
              "end at %lld (params.c descriptors disagree with the bind)",
              e->name, (long long)off[order[i]], (long long)expect);
    e->init = d->init;
    e->init_value = d->init == MF_INIT_ONES ? 1.0 : 0.0;
    e->fan_in = e->shape[e->ndim - 1];
    e->block_numel = bn;
    e->numel = bn * L;
    e->offset = expect * L; /* tensor-major: every earlier tensor holds L blocks */
    e->rng_offset = rng;
    if (d->init == MF_INIT_LECUN || d->init == MF_INIT_HE) rng += bn;
    e->field = d->field;
    expect += bn;
  }
  MF_ASSERT(expect == per_block, "params table: declared shapes cover %lld of the %lld bound "
            "parameters of a block", (long long)expect, (long long)per_block);
  t->total = per_block * L;
  return MF_OK;
}

int64_t mf_params_count(const mf_params_table *t) { return t->total; }

const mf_param_entry *mf_params_find(const mf_params_table *t, const char *name) {
  for (int i = 0; i < t->n; i++)
    if (strcmp(t->entries[i].name, name) == 0) return &t->entries[i];
  return NULL;
}

void mf_params_bind_block(const mf_params_table *t, mf_real *flat, int l, mf_pairformer_block *w) {
  MF_ASSERT(l >= 0 && l < t->L, "block %d of a %d-block stack", l, t->L);
  for (int i = 0; i < t->n; i++) {
    const mf_param_entry *e = &t->entries[i];
    *field_ptr(w, e->field) = flat ? flat + e->offset + (int64_t)l * e->block_numel : NULL;
  }
}

void mf_params_init_block(const mf_params_table *t, mf_pairformer_block *w, uint64_t seed,
                          uint32_t block) {
  uint64_t stream = mf_rng_stream(0, MF_RNG_INIT, block);
  for (int i = 0; i < t->n; i++) {
    const mf_param_entry *e = &t->entries[i];
    mf_real *p = *field_ptr(w, e->field);
    if (e->init == MF_INIT_LECUN || e->init == MF_INIT_HE) {
      /* truncated normal at ±2σ, std = sqrt(gain/fan_in)/0.87962566 (spec §1) */
      double gain = e->init == MF_INIT_HE ? 2.0 : 1.0;
      double scale = sqrt(gain / (double)e->fan_in) / 0.87962566103423978;
      for (int64_t k = 0; k < e->block_numel; k++)
        p[k] = (mf_real)(scale * mf_philox_trunc_normal(seed, stream,
                                                        (uint64_t)(e->rng_offset + k), -2.0, 2.0));
    } else {
      for (int64_t k = 0; k < e->block_numel; k++) p[k] = (mf_real)e->init_value;
    }
  }
}

void mf_params_init(const mf_params_table *t, mf_real *flat, uint64_t seed) {
  for (int l = 0; l < t->L; l++) {
    mf_pairformer_block w;
    mf_params_bind_block(t, flat, l, &w);
    mf_params_init_block(t, &w, seed, (uint32_t)l);
  }
}
