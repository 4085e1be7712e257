/* test_params.c — the parameter table (model/params.h) and the CPU Pairformer stack with
 * activation checkpointing (model/stack.h).
 * Table: AF3 counts (48 × 3,070,848), names/shapes/inits, the tensor-major layout tiles the
 * buffer exactly, block binding agrees with the block's own bind, table init equals
 * mf_pairformer_block_init for every block and lecun/He draws taken directly from the
 * Philox stream, bad configs are refused.
 * Stack: every checkpointing policy gives bit-identical outputs and gradients, equal to a
 * hand-chained sequence of blocks; finite-difference checks of a 2- and a 3-block stack;
 * the planner's bytes are what the stack allocates and over-budget crops are refused with
 * the largest N that fits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "core/rng.h"
#include "harness.h"
#include "model/params.h"
#include "model/stack.h"

static mf_pairformer_config tiny_config(void) {
  return (mf_pairformer_config){.c_s = 8, .c_z = 6, .c_mul = 5, .h_tri = 2, .d_tri = 3, .h_s = 2,
                                .d_s = 4, .n_trans = 2, .p_drop = 0.25};
}

static void test_af3_counts(void) {
  mf_pairformer_config c = mf_pairformer_config_default();
  mf_params_table t;
  MF_TEST(mf_params_build_pairformer(&t, &c, 48) == MF_OK, "48-block table: %s",
          mf_error_message());
  MF_TEST(mf_params_count(&t) == 48LL * 3070848, "48-block stack: %lld params (want 48 × 3,070,848 = %lld)",
          (long long)mf_params_count(&t), 48LL * 3070848);
  MF_TEST(mf_params_count(&t) == 147400704, "spec §11: Pairformer, 48 blocks = 147,400,704");
  MF_TEST(t.n == 57, "57 tensors per block (got %d)", t.n);
  const mf_param_entry *e = mf_params_find(&t, "pairformer.tri_out.w_ap");
  MF_TEST(e && e->ndim == 3 && e->shape[0] == 48 && e->shape[1] == 128 && e->shape[2] == 128 &&
              e->init == MF_INIT_LECUN && e->fan_in == 128 && e->offset == 2 * 128 * 48,
          "tri_out.w_ap: (48, 128, 128) lecun after two (48, 128) LN tensors");
  e = mf_params_find(&t, "pairformer.single_att.b_q");
  MF_TEST(e && e->ndim == 2 && e->shape[1] == 384 && e->init == MF_INIT_ZEROS, "single_att.b_q: (48, 384) zeros");
  e = mf_params_find(&t, "pairformer.single_trans.w_a");
  MF_TEST(e && e->shape[1] == 1536 && e->shape[2] == 384 && e->init == MF_INIT_HE,
          "single_trans.w_a: (48, 1536, 384) He");
  e = mf_params_find(&t, "pairformer.att_end.w_b");
  MF_TEST(e && e->shape[1] == 4 && e->shape[2] == 128 && e->init == MF_INIT_LECUN,
          "att_end.w_b: (48, 4, 128) lecun");
  MF_TEST(mf_params_find(&t, "pairformer.tri_out.nope") == NULL, "unknown name: NULL");
  /* per-sub-layer counts of spec §11 */
  int64_t tm = 0, ta = 0, sa = 0, st = 0;
  for (int i = 0; i < t.n; i++) {
    if (!strncmp(t.entries[i].name, "pairformer.tri_out.", 19)) tm += t.entries[i].block_numel;
    if (!strncmp(t.entries[i].name, "pairformer.att_start.", 21)) ta += t.entries[i].block_numel;
    if (!strncmp(t.entries[i].name, "pairformer.single_att.", 22)) sa += t.entries[i].block_numel;
    if (!strncmp(t.entries[i].name, "pairformer.single_trans.", 24)) st += t.entries[i].block_numel;
  }
  MF_TEST(tm == 98816 && ta == 82688 && sa == 740736 && st == 1770240,
          "sub-layer counts %lld %lld %lld %lld (spec: 98,816 82,688 740,736 1,770,240)",
          (long long)tm, (long long)ta, (long long)sa, (long long)st);
  mf_params_free(&t);

  MF_TEST(mf_params_build_pairformer(&t, &c, 0) == MF_ERR_CONFIG && strstr(mf_error_message(), "L = 0"),
          "L = 0 refused: %s", mf_error_message());
  mf_params_free(&t);
  MF_TEST(mf_params_build_pairformer(&t, &c, 5000) == MF_ERR_CONFIG, "L = 5000 refused");
  mf_params_free(&t);
  c.c_z = 0;
  MF_TEST(mf_params_build_pairformer(&t, &c, 4) == MF_ERR_CONFIG && strstr(mf_error_message(), "c_z"),
          "bad config refused: %s", mf_error_message());
  mf_params_free(&t);
}

static void test_layout(void) {
  mf_pairformer_config c = tiny_config();
  mf_params_table t;
  const int L = 3;
  MF_TEST(mf_params_build_pairformer(&t, &c, L) == MF_OK, "tiny table");
  mf_pairformer_block w;
  int64_t per = mf_pairformer_block_bind(&w, NULL, &c);
  MF_TEST(t.total == per * L, "total = L × block count");
  /* entries are contiguous (L, ...) arrays in offset order */
  int ok = 1;
  for (int i = 0; i < t.n; i++) {
    const mf_param_entry *e = &t.entries[i];
    int64_t next = i + 1 < t.n ? t.entries[i + 1].offset : t.total;
    int64_t prod = 1;
    for (int k = 0; k < e->ndim; k++) prod *= e->shape[k];
    ok &= e->offset + e->numel == next && prod == e->numel && e->shape[0] == L && e->stacked;
  }
  MF_TEST(ok, "entries tile the buffer: offset + numel = next offset, numel = Π shape");
  /* every block's bound slices cover every element exactly once */
  double *flat = mf_test_alloc(t.total);
  int *hits = calloc((size_t)t.total, sizeof(int));
  for (int l = 0; l < L; l++) {
    mf_params_bind_block(&t, flat, l, &w);
    for (int i = 0; i < t.n; i++) {
      const mf_param_entry *e = &t.entries[i];
      mf_real *p = *(mf_real **)((char *)&w + e->field);
      ok &= p == flat + e->offset + l * e->block_numel;
      for (int64_t k = 0; k < e->block_numel; k++) hits[p - flat + k]++;
    }
  }
  int once = 1;
  for (int64_t i = 0; i < t.total; i++) once &= hits[i] == 1;
  free(hits);
  MF_TEST(ok && once, "block l's fields point at offset + l·block_numel; each element bound once");
  mf_params_free(&t);

  /* L = 1: the stacked layout is the block's own bind layout */
  MF_TEST(mf_params_build_pairformer(&t, &c, 1) == MF_OK, "L=1 table");
  mf_pairformer_block a, b;
  mf_params_bind_block(&t, flat, 0, &a);
  mf_pairformer_block_bind(&b, flat, &c);
  MF_TEST(memcmp(&a, &b, sizeof a) == 0, "L = 1: table binding == mf_pairformer_block_bind");
  mf_params_free(&t);
}

/* mf_params_init == mf_pairformer_block_init(seed, l) for every block, bit for bit. */
static void test_init(mf_pairformer_config c, int L, uint64_t seed) {
  mf_params_table t;
  MF_TEST(mf_params_build_pairformer(&t, &c, L) == MF_OK, "table for init");
  double *flat = mf_test_alloc(t.total);
  mf_test_poison(flat, t.total);
  mf_params_init(&t, flat, seed);
  mf_pairformer_block w, r;
  int64_t per = mf_pairformer_block_bind(&r, NULL, &c);
  double *ref = mf_test_alloc(per);
  mf_pairformer_block_bind(&r, ref, &c);
  int same = 1;
  for (int l = 0; l < L; l++) {
    mf_test_poison(ref, per);
    mf_pairformer_block_init(&r, &c, seed, (uint32_t)l);
    mf_params_bind_block(&t, flat, l, &w);
    for (int i = 0; i < t.n; i++) {
      const mf_param_entry *e = &t.entries[i];
      same &= memcmp(*(mf_real **)((char *)&w + e->field), *(mf_real **)((char *)&r + e->field),
                     (size_t)e->block_numel * sizeof(mf_real)) == 0;
    }
  }
  MF_TEST(same, "c_z=%d L=%d: mf_params_init == mf_pairformer_block_init for every block", c.c_z, L);
  /* Both of those read the table now, so also check against an independent expectation:
   * the random tensors in the AF3 order, drawn with mf_philox_trunc_normal directly at a
   * running index of the block's stream, plus a ones and a zeros field. */
  {
    const int64_t Cz = c.c_z, Cs = c.c_s, Ch = c.c_mul, n = c.n_trans;
    const int64_t HDt = (int64_t)c.h_tri * c.d_tri, HDs = (int64_t)c.h_s * c.d_s;
    const struct { const char *name; int64_t numel, fan_in; double gain; } rnd[] = {
        {"tri_out.w_ap", Ch * Cz, Cz, 1}, {"tri_out.w_bp", Ch * Cz, Cz, 1},
        {"tri_in.w_ap", Ch * Cz, Cz, 1},  {"tri_in.w_bp", Ch * Cz, Cz, 1},
        {"att_start.w_q", HDt * Cz, Cz, 1}, {"att_start.w_k", HDt * Cz, Cz, 1},
        {"att_start.w_v", HDt * Cz, Cz, 1}, {"att_start.w_b", c.h_tri * Cz, Cz, 1},
        {"att_end.w_q", HDt * Cz, Cz, 1}, {"att_end.w_k", HDt * Cz, Cz, 1},
        {"att_end.w_v", HDt * Cz, Cz, 1}, {"att_end.w_b", c.h_tri * Cz, Cz, 1},
        {"pair_trans.w_a", n * Cz * Cz, Cz, 2}, {"pair_trans.w_b", n * Cz * Cz, Cz, 2},
        {"single_att.w_q", HDs * Cs, Cs, 1}, {"single_att.w_k", HDs * Cs, Cs, 1},
        {"single_att.w_v", HDs * Cs, Cs, 1}, {"single_att.w_z", c.h_s * Cz, Cz, 1},
        {"single_trans.w_a", n * Cs * Cs, Cs, 2}, {"single_trans.w_b", n * Cs * Cs, Cs, 2},
    };
    int indep = 1, found = 1;
    for (int l = 0; l < L; l++) {
      uint64_t stream = mf_rng_stream(0, MF_RNG_INIT, (uint32_t)l);
      int64_t next = 0;
      for (size_t f = 0; f < sizeof rnd / sizeof rnd[0]; f++) {
        char name[MF_PARAMS_NAME_MAX];
        snprintf(name, sizeof name, "pairformer.%s", rnd[f].name);
        const mf_param_entry *en = mf_params_find(&t, name);
        if (!en || en->block_numel != rnd[f].numel) {
          found = 0;
          break;
        }
        const double *blk = flat + en->offset + (int64_t)l * en->block_numel;
        double scale = sqrt(rnd[f].gain / (double)rnd[f].fan_in) / 0.87962566103423978;
        const int64_t ks[3] = {0, rnd[f].numel / 2, rnd[f].numel - 1};
        for (int q = 0; q < 3; q++) {
          double want = (mf_real)(scale * mf_philox_trunc_normal(seed, stream, (uint64_t)(next + ks[q]),
                                                                 -2.0, 2.0));
          indep &= blk[ks[q]] == want;
        }
        next += rnd[f].numel;
      }
      const mf_param_entry *g1 = mf_params_find(&t, "pairformer.tri_out.ln_in_g");
      const mf_param_entry *z0 = mf_params_find(&t, "pairformer.single_trans.w_o");
      found &= g1 && z0;
      for (int64_t k = 0; g1 && k < g1->block_numel; k++)
        indep &= flat[g1->offset + (int64_t)l * g1->block_numel + k] == 1.0;
      for (int64_t k = 0; z0 && k < z0->block_numel; k++)
        indep &= flat[z0->offset + (int64_t)l * z0->block_numel + k] == 0.0;
    }
    MF_TEST(found && indep, "c_z=%d L=%d: init equals lecun/He draws taken directly from the "
            "Philox stream, ones for LN gains, zeros for final projections", c.c_z, L);
  }
  /* blocks differ from each other; the seed matters */
  const mf_param_entry *e = mf_params_find(&t, "pairformer.tri_out.w_ap");
  if (L > 1)
    MF_TEST(memcmp(flat + e->offset, flat + e->offset + e->block_numel, sizeof(double) * 4) != 0,
            "blocks 0 and 1 draw different weights");
  double first = flat[e->offset];
  mf_params_init(&t, flat, seed + 1);
  MF_TEST(flat[e->offset] != first, "another seed, other weights");
  mf_params_free(&t);
}

/* ------------------------------------------------------------------ stack */

typedef struct {
  mf_stack *st;
  const mf_params_table *t;
  double *params, *s, *z, *Rs, *Rz, *s_out, *z_out;
  const uint8_t *mask;
  int N;
  mf_stack_rng rng;
} stack_ctx;

static double stack_loss(void *p) {
  stack_ctx *x = p;
  mf_stack_forward(x->st, x->s_out, x->z_out, x->s, x->z, x->mask, x->params, x->N, x->rng);
  const mf_pairformer_config *c = &x->t->config;
  return mf_test_dot(x->s_out, x->Rs, (int64_t)x->N * c->c_s) +
         mf_test_dot(x->z_out, x->Rz, (int64_t)x->N * x->N * c->c_z);
}

typedef struct {
  double *s_out, *z_out, *ds, *dz, *grads;
} run_result;

static run_result run_policy(stack_ctx *x, mf_stack_policy pol, int64_t *alloc_bytes,
                             mf_stack_plan *plan, int *recomputed) {
  const mf_pairformer_config *c = &x->t->config;
  int64_t sn = (int64_t)x->N * c->c_s, zn = (int64_t)x->N * x->N * c->c_z;
  mf_stack st;
  int64_t before = mf_mem_stats(MF_HOST).current;
  MF_TEST(mf_stack_init(&st, x->t, pol, x->N, 0) == MF_OK, "stack init: %s", mf_error_message());
  *alloc_bytes = mf_mem_stats(MF_HOST).current - before;
  *plan = st.plan;
  run_result r = {mf_test_alloc(sn), mf_test_alloc(zn), mf_test_alloc(sn), mf_test_alloc(zn),
                  mf_test_alloc(x->t->total)};
  mf_test_poison(r.ds, sn);
  mf_test_poison(r.dz, zn);
  mf_stack_forward(&st, r.s_out, r.z_out, x->s, x->z, x->mask, x->params, x->N, x->rng);
  mf_stack_backward(&st, r.ds, r.dz, r.grads, x->Rs, x->Rz, x->s, x->z, x->mask, x->params, x->N,
                    x->rng);
  *recomputed = st.recomputed;
  mf_stack_free(&st);
  return r;
}

static int same(const double *a, const double *b, int64_t n) {
  return memcmp(a, b, (size_t)n * sizeof(double)) == 0;
}

static void test_stack_policies(int L, int N, int fd) {
  mf_pairformer_config c = tiny_config();
  mf_params_table t;
  MF_TEST(mf_params_build_pairformer(&t, &c, L) == MF_OK, "stack table");
  int64_t sn = (int64_t)N * c.c_s, zn = (int64_t)N * N * c.c_z;
  uint8_t mask[16];
  for (int i = 0; i < N; i++) mask[i] = (uint8_t)(i != N - 2);
  stack_ctx x = {NULL, &t, mf_test_alloc(t.total), mf_test_alloc(sn), mf_test_alloc(zn),
                 mf_test_alloc(sn), mf_test_alloc(zn), NULL, NULL, mask, N, {17, 4, 1}};
  mf_test_randn(x.params, t.total, 300 + (uint64_t)L, 0.4); /* every path live */
  mf_test_randn(x.s, sn, 301, 1.0);
  mf_test_randn(x.z, zn, 302, 1.0);
  mf_test_randn(x.Rs, sn, 303, 1.0);
  mf_test_randn(x.Rz, zn, 304, 1.0);

  /* the oracle: blocks chained by hand, each with its own workspace, no recompute */
  mf_pairformer_block w[8], g[8];
  double *ins[9], *inz[9], *saved[8];
  MF_ASSERT(L <= 8, "the oracle holds at most 8 blocks (L = %d)", L);
  double *ref_grads = mf_test_alloc(t.total);
  ins[0] = x.s;
  inz[0] = x.z;
  for (int l = 0; l < L; l++) {
    mf_params_bind_block(&t, x.params, l, &w[l]);
    mf_params_bind_block(&t, ref_grads, l, &g[l]);
    ins[l + 1] = mf_test_alloc(sn);
    inz[l + 1] = mf_test_alloc(zn);
    saved[l] = mf_test_alloc((int64_t)mf_pairformer_block_saved_size(N, &c));
    mf_pairformer_block_forward(ins[l + 1], inz[l + 1], saved[l], ins[l], inz[l], mask, &w[l], &c,
                                N, (mf_pairformer_rng){17, 4, (uint32_t)l, 1});
  }
  double *gs = mf_test_alloc(sn), *gz = mf_test_alloc(zn), *gs2 = mf_test_alloc(sn),
         *gz2 = mf_test_alloc(zn);
  memcpy(gs, x.Rs, (size_t)sn * 8);
  memcpy(gz, x.Rz, (size_t)zn * 8);
  for (int l = L - 1; l >= 0; l--) {
    mf_pairformer_block_backward(gs2, gz2, &g[l], gs, gz, saved[l], ins[l], inz[l], mask, &w[l],
                                 &c, N, (mf_pairformer_rng){17, 4, (uint32_t)l, 1});
    memcpy(gs, gs2, (size_t)sn * 8);
    memcpy(gz, gz2, (size_t)zn * 8);
  }

  mf_stack_policy pols[5] = {{MF_STACK_RECOMPUTE, 0}, {MF_STACK_EVERY_K, 2}, {MF_STACK_EVERY_K, 3},
                             {MF_STACK_EVERY_K, 5},
                             {MF_STACK_KEEP_ALL, 0}};
  for (int p = 0; p < 5; p++) {
    int64_t bytes;
    mf_stack_plan plan;
    int recomputed;
    run_result r = run_policy(&x, pols[p], &bytes, &plan, &recomputed);
    const char *nm = mf_stack_policy_name(pols[p].kind);
    MF_TEST(same(r.s_out, ins[L], sn) && same(r.z_out, inz[L], zn),
            "L=%d %s k=%d: outputs bit-identical to the hand-chained blocks", L, nm, pols[p].k);
    MF_TEST(same(r.ds, gs, sn) && same(r.dz, gz, zn),
            "L=%d %s k=%d: ds, dz bit-identical", L, nm, pols[p].k);
    MF_TEST(same(r.grads, ref_grads, t.total), "L=%d %s k=%d: parameter gradients bit-identical",
            L, nm, pols[p].k);
    MF_TEST(bytes == plan.total_bytes, "L=%d %s k=%d: the stack allocates its plan (%lld vs %lld bytes)",
            L, nm, pols[p].k, (long long)bytes, (long long)plan.total_bytes);
    MF_TEST(recomputed == plan.recomputed_blocks,
            "L=%d %s k=%d: the backward reran %d block forwards, the plan says %d", L, nm,
            pols[p].k, recomputed, plan.recomputed_blocks);
    if (pols[p].kind == MF_STACK_KEEP_ALL) MF_TEST(recomputed == 0, "keep-all recomputes nothing");
    if (pols[p].kind == MF_STACK_RECOMPUTE) MF_TEST(recomputed == L - 1, "recompute: L - 1 reruns");
  }

  if (!fd) {
    mf_params_free(&t);
    return;
  }
  /* finite differences through the whole stack (every-2, planned for a larger N) */
  mf_stack st;
  MF_TEST(mf_stack_init(&st, &t, (mf_stack_policy){MF_STACK_EVERY_K, 2}, N + 3, 0) == MF_OK,
          "init for crops up to N + 3");
  x.st = &st;
  x.s_out = mf_test_alloc(sn);
  x.z_out = mf_test_alloc(zn);
  double *ds = mf_test_alloc(sn), *dz = mf_test_alloc(zn), *grads = mf_test_alloc(t.total);
  stack_loss(&x);
  mf_stack_backward(&st, ds, dz, grads, x.Rs, x.Rz, x.s, x.z, mask, x.params, N, x.rng);
  char what[96];
  snprintf(what, sizeof what, "stack L=%d ds", L);
  mf_test_gradcheck(what, stack_loss, &x, x.s, ds, sn, 30, 1e-6, 1e-6);
  snprintf(what, sizeof what, "stack L=%d dz", L);
  mf_test_gradcheck(what, stack_loss, &x, x.z, dz, zn, 40, 1e-6, 1e-6);
  /* a few elements of every stacked tensor: each gradcheck spreads over all L blocks.
   * single_att.ln_z_b has an exactly-zero gradient (softmax is shift invariant: β of the z
   * LayerNorm adds the same w_z·β to every logit of a row), so finite differences are pure
   * noise there; it is checked to be zero instead. */
  for (int i = 0; i < t.n; i++) {
    const mf_param_entry *e = &t.entries[i];
    if (strstr(e->name, "single_att.ln_z_b")) {
      double mx = 0;
      for (int64_t k = 0; k < e->numel; k++) mx = fmax(mx, fabs(grads[e->offset + k]));
      MF_TEST(mx < 1e-12, "L=%d %s: zero gradient (max %.3g)", L, e->name, mx);
      continue;
    }
    snprintf(what, sizeof what, "stack L=%d %s", L, e->name);
    mf_test_gradcheck(what, stack_loss, &x, x.params + e->offset, grads + e->offset, e->numel,
                      2 * L, 1e-6, 1e-6);
  }
  mf_stack_free(&st);
  mf_params_free(&t);
}

static void test_planner(void) {
  mf_pairformer_config c = mf_pairformer_config_default();
  mf_stack_policy rec = {MF_STACK_RECOMPUTE, 0}, k4 = {MF_STACK_EVERY_K, 4}, all = {MF_STACK_KEEP_ALL, 0};
  mf_stack_plan a, b, d;
  MF_TEST(mf_stack_plan_make(&a, &c, 48, 256, rec, 4) == MF_OK &&
              mf_stack_plan_make(&b, &c, 48, 256, k4, 4) == MF_OK &&
              mf_stack_plan_make(&d, &c, 48, 256, all, 4) == MF_OK,
          "plans at N=256");
  int64_t I = (256LL * 384 + 256LL * 256 * 128) * 4;
  int64_t W = (int64_t)mf_pairformer_block_saved_size(256, &c) * 4;
  MF_TEST(a.total_bytes == 47 * I + W + I && a.recomputed_blocks == 47,
          "recompute: 47 kept inputs + 1 workspace + 1 gradient; 47 reruns");
  MF_TEST(b.total_bytes == (11 + 3) * I + W + I && b.n_seg == 12 &&
              b.recomputed_blocks == 11 * 7 + 3,
          "every-4: 11 kept + 3 inner inputs + 1 workspace + 1 gradient; 80 reruns");
  MF_TEST(d.total_bytes == 47 * I + 48 * W + I && d.recomputed_blocks == 0, "keep-all: everything");
  MF_TEST(b.saved_bytes < a.saved_bytes && a.saved_bytes < d.saved_bytes,
          "every-4 < recompute < keep-all");
  mf_stack_plan k7;
  mf_stack_plan_make(&k7, &c, 48, 256, (mf_stack_policy){MF_STACK_EVERY_K, 7}, 4);
  MF_TEST(k7.input_bytes == 12 * I && k7.input_bytes < b.input_bytes, "every-7 keeps 6 + 6 inputs");

  int64_t budget = 100LL << 30;
  int n = mf_stack_max_n(&c, 48, rec, 4, budget);
  mf_stack_plan p;
  MF_TEST(n > 256 && mf_stack_plan_fit(&p, &c, 48, n, rec, 4, budget) == MF_OK && p.total_bytes <= budget,
          "largest N under 100 GiB (recompute, fp32): %d fits", n);
  char want[64];
  snprintf(want, sizeof want, "largest N that fits is %d", n);
  MF_TEST(mf_stack_plan_fit(&p, &c, 48, n + 1, rec, 4, budget) == MF_ERR_CONFIG &&
              p.total_bytes > budget && strstr(mf_error_message(), want) &&
              strstr(mf_error_message(), "N = "),
          "N + 1 refused: %s", mf_error_message());
  MF_TEST(mf_stack_max_n(&c, 48, all, 4, budget) < n, "keep-all fits a smaller N");
  MF_TEST(mf_stack_max_n(&c, 48, k4, 4, budget) > n, "every-4 fits a larger N");
  MF_TEST(mf_stack_plan_fit(NULL, &c, 48, 64, rec, 4, 1000) == MF_ERR_CONFIG &&
              strstr(mf_error_message(), "no N fits"),
          "tiny budget: %s", mf_error_message());
  MF_TEST(mf_stack_plan_make(&p, &c, 48, 64, (mf_stack_policy){MF_STACK_EVERY_K, 0}, 4) == MF_ERR_CONFIG,
          "every-k with k = 0 refused");

  /* mf_stack_init refuses up front and allocates nothing */
  mf_params_table t;
  mf_pairformer_config tc = tiny_config();
  MF_TEST(mf_params_build_pairformer(&t, &tc, 4) == MF_OK, "table");
  mf_stack st;
  int64_t before = mf_mem_stats(MF_HOST).current;
  MF_TEST(mf_stack_init(&st, &t, rec, 64, 100000) == MF_ERR_CONFIG && st.buf == NULL &&
              mf_mem_stats(MF_HOST).current == before,
          "over-budget stack refused: %s", mf_error_message());
  mf_stack_free(&st);
  mf_params_free(&t);
}

int main(void) {
  mf_test_begin("test_params");
  test_af3_counts();
  test_layout();
  test_init(tiny_config(), 3, 42);
  test_init(mf_pairformer_config_default(), 1, 7);
  test_planner();
  test_stack_policies(2, 5, 1);
  test_stack_policies(3, 4, 1);
  test_stack_policies(5, 3, 0); /* uneven segments: every-2 → [0,2) [2,4) [4,5) */
  return mf_test_end();
}
