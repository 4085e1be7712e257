/* pairformer.h — one Pairformer block (AF3 SI Alg 17, docs/af3-spec.md §6.4) on the CPU,
 * composed from the op references:
 *
 *   z += drop_row(TriMulOut(z));   z += drop_row(TriMulIn(z))
 *   z += drop_row(TriAttStart(z)); z += drop_col(TriAttEnd(z))
 *   z += Transition(z, n)
 *   s += AttentionPairBias(s, z);  s += Transition(s, n)
 *
 * Weights of a block are one flat buffer bound to a struct of per-sub-layer structs
 * (mf_pairformer_block_bind), in a fixed order the checkpoint and the GPU path share.
 * Dropout masks come from Philox streams keyed by (seed, step, block, sub-layer), so the
 * backward regenerates them instead of storing them. This is the model layer's reference
 * path (tests, the CPU demo); the 48-block GPU stack is built on the same layout.
 *
 * Gradient contract: ds and dz ASSIGN; parameter gradients ACCUMULATE. */
#ifndef MF_MODEL_PAIRFORMER_H
#define MF_MODEL_PAIRFORMER_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "ops/attn_pair_bias.h"
#include "ops/triatt.h"
#include "ops/trimul.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int c_s, c_z;     /* single and pair channels: 384, 128 */
  int c_mul;        /* triangle multiplication hidden: 128 */
  int h_tri, d_tri; /* triangle attention heads × dim: 4 × 32 */
  int h_s, d_s;     /* single attention heads × dim: 16 × 24 */
  int n_trans;      /* transition factor: 4 */
  double p_drop;    /* dropout on the four triangle updates: 0.25 (0 in eval) */
} mf_pairformer_config;

/* AF3 defaults (above). */
mf_pairformer_config mf_pairformer_config_default(void);
/* MF_OK, or MF_ERR_CONFIG naming the field that is impossible. */
mf_status mf_pairformer_config_check(const mf_pairformer_config *c);

/* SwiGLU transition parameters (src/ops/transition.h). */
typedef struct {
  mf_real *ln_g, *ln_b; /* (C) */
  mf_real *w_a, *w_b;   /* (n·C, C) */
  mf_real *w_o;         /* (C, n·C) */
} mf_transition_weights;

typedef struct {
  mf_trimul_weights tri_out, tri_in;
  mf_triatt_weights att_start, att_end;
  mf_transition_weights pair_trans;
  mf_apb_weights single_att;
  mf_transition_weights single_trans;
} mf_pairformer_block;

/* Binds every field to consecutive slices of `flat` (NULL: count only); returns the
 * number of parameters (3,070,848 at the defaults). */
int64_t mf_pairformer_block_bind(mf_pairformer_block *w, mf_real *flat,
                                 const mf_pairformer_config *c);

/* AF3 initialisation (spec §1): LayerNorm γ = 1, β = 0; lecun truncated normal for
 * projections; He for the transitions' two input linears; zeros for gates and output
 * projections. Random draws from the Philox stream (seed, MF_RNG_INIT, block). The
 * per-field policy lives in the parameter table (src/model/params.c): this is
 * mf_params_init_block over a one-block table, so it equals mf_params_init's block. */
void mf_pairformer_block_init(mf_pairformer_block *w, const mf_pairformer_config *c,
                              uint64_t seed, uint32_t block);

/* mf_reals of the workspace the forward fills and the backward reads. */
size_t mf_pairformer_block_saved_size(int N, const mf_pairformer_config *c);

/* Dropout keys: the masks of block `block` at training step `step` come from
 * streams mf_rng_stream(step, MF_RNG_DROPOUT, 4·block + k), k = sub-layer 0..3.
 * training = 0 turns dropout off. */
typedef struct {
  uint64_t seed, step;
  uint32_t block;
  int training;
} mf_pairformer_rng;

/* s_out (N, Cs), z_out (N, N, Cz): the block's outputs (residuals included);
 * saved (mf_pairformer_block_saved_size); s (N, Cs), z (N, N, Cz) inputs;
 * mask (N) token mask or NULL (pair mask m_i·m_j is derived). */
void mf_pairformer_block_forward(mf_real *s_out, mf_real *z_out, mf_real *saved,
                                 const mf_real *s, const mf_real *z, const uint8_t *mask,
                                 const mf_pairformer_block *w, const mf_pairformer_config *c,
                                 int N, mf_pairformer_rng rng);

/* ds (N, Cs), dz (N, N, Cz) = gradients w.r.t. the block inputs (ASSIGN);
 * grads: parameter gradients (ACCUMULATE); ds_out, dz_out: gradients w.r.t. the outputs. */
void mf_pairformer_block_backward(mf_real *ds, mf_real *dz, const mf_pairformer_block *grads,
                                  const mf_real *ds_out, const mf_real *dz_out,
                                  const mf_real *saved, const mf_real *s, const mf_real *z,
                                  const uint8_t *mask, const mf_pairformer_block *w,
                                  const mf_pairformer_config *c, int N, mf_pairformer_rng rng);

#ifdef __cplusplus
}
#endif

#endif
