/* demo.c — `megafold demo`: the built-in default job, runnable on any machine with no
 * data and no GPU. It trains a small distogram model on a synthetic chain: token
 * embeddings and relative-position pair features go through one Pairformer block at
 * AF3 dimensions, a distogram head predicts the binned Cα–Cα distances, and AdamW
 * minimises the cross-entropy. It exercises the CPU reference path end to end (forward,
 * backward, one flat parameter/gradient/moment buffer, clipping, AdamW) and shows the
 * loss falling. It is not the real trainer (that is `megafold train`, with real data). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/philox.h"
#include "megafold.h"
#include "model/pairformer.h"
#include "ops/adamw.h"
#include "ops/linear.h"
#include "ops/loss.h"

#define N_RESTYPE 20
#define N_RELPOS 65 /* clip(i − j + 32, 0, 64) */
#define N_BINS 64

typedef struct {
  mf_real *emb;  /* (Cs, 20)  token type → single */
  mf_real *rel;  /* (Cz, 65)  relative position → pair */
  mf_pairformer_block blk;
  mf_real *head_w; /* (64, Cz) distogram head */
  mf_real *head_b; /* (64) */
} demo_params;

static int64_t bind_params(demo_params *p, mf_real *flat, const mf_pairformer_config *c) {
  int64_t n = 0;
  p->emb = flat ? flat + n : NULL;
  n += (int64_t)c->c_s * N_RESTYPE;
  p->rel = flat ? flat + n : NULL;
  n += (int64_t)c->c_z * N_RELPOS;
  n += mf_pairformer_block_bind(&p->blk, flat ? flat + n : NULL, c);
  p->head_w = flat ? flat + n : NULL;
  n += (int64_t)N_BINS * c->c_z;
  p->head_b = flat ? flat + n : NULL;
  n += N_BINS;
  return n;
}

/* A synthetic chain: Cα steps of 3.8 Å along a direction that drifts smoothly, so near
 * neighbours in sequence are near in space and the distogram has structure to learn. */
static void make_chain(double *xyz /* (N, 3) */, int *restype /* (N) */, int N, uint64_t seed) {
  uint64_t st = mf_rng_stream(0, MF_RNG_TEST, 77);
  double d[3] = {1, 0, 0};
  xyz[0] = xyz[1] = xyz[2] = 0;
  for (int i = 0; i < N; i++) {
    restype[i] = (int)(mf_philox_uniform(seed, st, 4 * (uint64_t)i + 3) * N_RESTYPE) % N_RESTYPE;
    if (i == 0) continue;
    double nd = 0;
    for (int k = 0; k < 3; k++) {
      d[k] = 0.7 * d[k] + 0.5 * mf_philox_normal(seed, st, 4 * (uint64_t)i + (uint64_t)k);
      nd += d[k] * d[k];
    }
    nd = sqrt(nd);
    for (int k = 0; k < 3; k++) xyz[3 * i + k] = xyz[3 * (i - 1) + k] + 3.8 * d[k] / nd;
  }
}

int mf_cmd_demo(int argc, char **argv) {
  int N = 32, steps = 60;
  uint64_t seed = 1;
  double lr = 1e-3;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--n") && i + 1 < argc) N = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--lr") && i + 1 < argc) lr = atof(argv[++i]);
    else {
      fprintf(stderr, "usage: megafold demo [--n TOKENS] [--steps S] [--seed X] [--lr LR]\n");
      return 2;
    }
  }
  if (N < 2 || N > 512 || steps < 1 || !(lr > 0)) {
    fprintf(stderr, "megafold demo: need 2 <= --n <= 512, --steps >= 1, --lr > 0\n");
    return 2;
  }
  mf_pairformer_config c = mf_pairformer_config_default();
  demo_params P, G;
  int64_t np = bind_params(&P, NULL, &c);
  size_t pbytes = (size_t)np * sizeof(mf_real);
  mf_real *params = mf_calloc(pbytes, "params"), *grads = mf_calloc(pbytes, "grads");
  mf_real *adam_m = mf_calloc(pbytes, "adam m"), *adam_v = mf_calloc(pbytes, "adam v");
  const int Cs = c.c_s, Cz = c.c_z;
  const size_t NN = (size_t)N * N;
  size_t nsaved = mf_pairformer_block_saved_size(N, &c);
  mf_real *s0 = mf_malloc((size_t)N * Cs * sizeof(mf_real), "s0");
  mf_real *z0 = mf_malloc(NN * Cz * sizeof(mf_real), "z0");
  mf_real *s1 = mf_malloc((size_t)N * Cs * sizeof(mf_real), "s1");
  mf_real *z1 = mf_malloc(NN * Cz * sizeof(mf_real), "z1");
  mf_real *saved = mf_malloc(nsaved * sizeof(mf_real), "block saved");
  mf_real *logit_raw = mf_malloc(NN * N_BINS * sizeof(mf_real), "logits");
  mf_real *logits = mf_malloc(NN * N_BINS * sizeof(mf_real), "logits sym");
  mf_real *lse = mf_malloc(NN * sizeof(mf_real), "lse");
  mf_real *onehot_t = mf_calloc((size_t)N * N_RESTYPE * sizeof(mf_real), "token one-hot");
  mf_real *onehot_r = mf_calloc(NN * N_RELPOS * sizeof(mf_real), "relpos one-hot");
  mf_real *ds0 = mf_malloc((size_t)N * Cs * sizeof(mf_real), "ds0");
  mf_real *dz0 = mf_malloc(NN * Cz * sizeof(mf_real), "dz0");
  mf_real *ds1 = mf_calloc((size_t)N * Cs * sizeof(mf_real), "ds1");
  mf_real *dz1 = mf_malloc(NN * Cz * sizeof(mf_real), "dz1");
  int32_t *target = mf_malloc(NN * sizeof(int32_t), "targets");
  double *xyz = mf_malloc((size_t)N * 3 * sizeof(double), "xyz");
  int *restype = mf_malloc((size_t)N * sizeof(int), "restype");
  if (!params || !grads || !adam_m || !adam_v || !s0 || !z0 || !s1 || !z1 || !saved ||
      !logit_raw || !logits || !lse || !onehot_t || !onehot_r || !ds0 || !dz0 || !ds1 || !dz1 ||
      !target || !xyz || !restype) {
    fprintf(stderr, "megafold demo: %s\n", mf_error_message());
    return 1;
  }
  bind_params(&P, params, &c);
  bind_params(&G, grads, &c);

  /* initialisation: AF3 scheme for the block, lecun for the embeddings, zero head */
  mf_pairformer_block_init(&P.blk, &c, seed, 0);
  uint64_t ist = mf_rng_stream(0, MF_RNG_INIT, 4000);
  for (int64_t i = 0; i < (int64_t)Cs * N_RESTYPE; i++)
    P.emb[i] = (mf_real)(mf_philox_trunc_normal(seed, ist, (uint64_t)i, -2, 2) /
                         sqrt((double)N_RESTYPE) / 0.87962566);
  for (int64_t i = 0; i < (int64_t)Cz * N_RELPOS; i++)
    P.rel[i] = (mf_real)(mf_philox_trunc_normal(seed, ist, (uint64_t)(1 << 20) + (uint64_t)i, -2, 2) /
                         0.87962566); /* one-hot input: fan-in 1 */

  make_chain(xyz, restype, N, seed);
  for (int i = 0; i < N; i++) onehot_t[(size_t)i * N_RESTYPE + restype[i]] = 1;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      int r = i - j + 32;
      r = r < 0 ? 0 : r > 64 ? 64 : r;
      onehot_r[((size_t)i * N + j) * N_RELPOS + r] = 1;
      double dd = 0;
      for (int k = 0; k < 3; k++) dd += (xyz[3 * i + k] - xyz[3 * j + k]) * (xyz[3 * i + k] - xyz[3 * j + k]);
      target[(size_t)i * N + j] = mf_distogram_bin(sqrt(dd));
    }

  printf("megafold demo: distogram training of one Pairformer block on a synthetic %d-residue chain\n", N);
  printf("  dims: c_s=%d c_z=%d tri-att %dx%d, single-att %dx%d, transition x%d, dropout %.2f\n",
         c.c_s, c.c_z, c.h_tri, c.d_tri, c.h_s, c.d_s, c.n_trans, c.p_drop);
  mf_pairformer_block count_only; /* binding with NULL would clear G's pointers */
  const int64_t nblk = mf_pairformer_block_bind(&count_only, NULL, &c);
  const int64_t blk_off = P.blk.tri_out.ln_in_g - params; /* the block's slice of the buffer */
  printf("  parameters: %lld (Pairformer block %lld), CPU reference (%s), seed %llu\n",
         (long long)np, (long long)nblk, MF_REAL_NAME, (unsigned long long)seed);

  mf_adamw_config opt = mf_adamw_default();
  double first = 0, last = 0, block_grad_max = 0, t0 = mf_time_now();
  for (int step = 1; step <= steps; step++) {
    double ts = mf_time_now();
    memset(grads, 0, pbytes);
    /* forward */
    mf_linear_forward(s0, onehot_t, P.emb, NULL, N, N_RESTYPE, Cs);
    mf_linear_forward(z0, onehot_r, P.rel, NULL, (int64_t)NN, N_RELPOS, Cz);
    mf_pairformer_rng rng = {seed, (uint64_t)step, 0, 1};
    mf_pairformer_block_forward(s1, z1, saved, s0, z0, NULL, &P.blk, &c, N, rng);
    mf_linear_forward(logit_raw, z1, P.head_w, P.head_b, (int64_t)NN, Cz, N_BINS);
    mf_distogram_symmetrize_forward(logits, logit_raw, N, N_BINS);
    double loss = mf_softmax_ce_forward(lse, logits, target, NULL, (int64_t)NN, N_BINS);
    /* backward (the single track does not reach the loss in this demo: ds1 = 0) */
    mf_softmax_ce_backward(logits, 1.0, lse, logits, target, NULL, (int64_t)NN, N_BINS);
    mf_distogram_symmetrize_backward(logit_raw, logits, N, N_BINS);
    mf_linear_backward(dz1, G.head_w, G.head_b, logit_raw, z1, P.head_w, (int64_t)NN, Cz, N_BINS);
    mf_pairformer_block_backward(ds0, dz0, &G.blk, ds1, dz1, saved, s0, z0, NULL, &P.blk, &c, N,
                                 rng);
    mf_linear_backward(NULL, G.emb, NULL, ds0, onehot_t, P.emb, N, N_RESTYPE, Cs);
    mf_linear_backward(NULL, G.rel, NULL, dz0, onehot_r, P.rel, (int64_t)NN, N_RELPOS, Cz);
    /* optimiser: global-norm clip at 10, AdamW, linear warm-up over 5 steps */
    double gnorm = mf_grad_global_norm(grads, np);
    /* zero at step 1 (the distogram head starts at zero), then the block must learn */
    double bnorm = mf_grad_global_norm(grads + blk_off, nblk);
    if (bnorm > block_grad_max) block_grad_max = bnorm;
    opt.lr = lr * (step < 5 ? step / 5.0 : 1.0);
    double scale = mf_grad_clip_scale(gnorm, 10.0);
    if (!isfinite(scale)) {
      fprintf(stderr, "step %d: non-finite gradient norm, step skipped\n", step);
      continue;
    }
    mf_adamw_step(params, adam_m, adam_v, grads, scale, step, &opt, np);
    if (step == 1) first = loss;
    last = loss;
    double dt = mf_time_now() - ts;
    if (step == 1 || step % 5 == 0 || step == steps)
      printf("  step %3d  loss %.4f  grad-norm %8.4f (block %8.4f)  lr %.1e  %.2f s/step\n", step,
             loss, gnorm, bnorm, opt.lr, dt);
    fflush(stdout);
  }
  double el = mf_time_now() - t0;
  printf("done: %d steps in %.1f s (%.2f steps/s); distogram loss %.4f -> %.4f (uniform: %.4f)\n",
         steps, el, steps / el, first, last, log((double)N_BINS));

  mf_free(restype);
  mf_free(xyz);
  mf_free(target);
  mf_free(dz1);
  mf_free(ds1);
  mf_free(dz0);
  mf_free(ds0);
  mf_free(onehot_r);
  mf_free(onehot_t);
  mf_free(lse);
  mf_free(logits);
  mf_free(logit_raw);
  mf_free(saved);
  mf_free(z1);
  mf_free(s1);
  mf_free(z0);
  mf_free(s0);
  mf_free(adam_v);
  mf_free(adam_m);
  mf_free(grads);
  mf_free(params);
  if (!(block_grad_max > 0)) fprintf(stderr, "megafold demo: the Pairformer block never received a gradient\n");
  return last < first && block_grad_max > 0 ? 0 : 1;
}
