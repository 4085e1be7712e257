/* params.h — the parameter table: one list of {name, shape, init, offset} that lays out the
 * flat parameter buffer (and, identically, the gradient, AdamW m/v and fp32 master buffers)
 * of a Pairformer stack of L blocks. Allocation, binding of a block's weight struct,
 * initialisation, checkpoint I/O (src/train/checkpoint.h) and test names all read this table.
 * It is not an optimiser, not an allocator, and holds no parameter values itself.
 *
 * One source of the layout. The table is not a second hand-written list of offsets: it is
 * built by binding a block (mf_pairformer_block_bind, which calls the ops' own
 * mf_*_weights_bind) and reading back where each field of mf_pairformer_block points. The
 * names, shapes and init kinds attached to those fields are then verified against the bind
 * (every pointer field covered exactly once, the declared shapes tile the block with no gap
 * or overlap, the total equals the bind's count); a disagreement is a broken invariant and
 * fatal. Tensor order in the table is the bind order.
 *
 * Stacking: TENSOR-MAJOR (DESIGN.md "per-block tensors are stacked (L, ...)"). Tensor t
 * occupies [offset, offset + L·block_numel) and block l's slice starts at
 * offset + l·block_numel, so every table entry is one contiguous (L, ...) array: the
 * checkpoint writes it as one safetensors tensor and the GPU path can update a tensor of
 * all blocks in one launch. A block's weights are therefore NOT contiguous;
 * mf_params_bind_block points each field of the struct at its slice.
 *
 * Init stream: element e of block l of tensor t draws index rng_offset(t) + e of the Philox
 * stream (seed, mf_rng_stream(0, MF_RNG_INIT, l)), where rng_offset(t) counts the random
 * (lecun/He) elements of block l that precede t in bind order. The init policy (which field
 * is lecun/He/zeros/ones) lives only in this table: mf_pairformer_block_init is
 * mf_params_init_block over a one-block table, so mf_params_init gives the same numbers, bit
 * for bit, as mf_pairformer_block_init(…, seed, l) for every block l — and any element can be
 * drawn independently (GPU-friendly), keyed by (seed, block, index).
 *
 * Shapes are PyTorch's: linear weights (out, in), with the stacked L axis first. */
#ifndef MF_MODEL_PARAMS_H
#define MF_MODEL_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "model/pairformer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MF_PARAMS_MAX_DIMS 4
#define MF_PARAMS_NAME_MAX 64
#define MF_PARAMS_MAX_BLOCKS 1023 /* dropout streams use sub = 4·block + k < 4096 */

typedef enum {
  MF_INIT_ZEROS = 0,
  MF_INIT_ONES,
  MF_INIT_LECUN, /* truncated normal ±2σ, std = sqrt(1/fan_in)/0.87962566 */
  MF_INIT_HE,    /* the same with 2/fan_in */
  MF_INIT_CONST  /* init_value (e.g. an adaLN-Zero gate bias of -2) */
} mf_init_kind;

typedef struct {
  char name[MF_PARAMS_NAME_MAX]; /* "pairformer.tri_out.w_ap" */
  int ndim;                      /* including the L axis when stacked */
  int64_t shape[MF_PARAMS_MAX_DIMS]; /* (L, out, in) for a stacked linear weight */
  int stacked;                   /* 1: shape[0] is the block axis L */
  mf_init_kind init;
  double init_value;             /* MF_INIT_CONST only */
  int64_t fan_in;                /* lecun/He: the last dim */
  int64_t offset;                /* first element in the flat buffer */
  int64_t numel;                 /* all blocks: L·block_numel */
  int64_t block_numel;           /* one block's slice */
  int64_t rng_offset;            /* index of this tensor's first draw in its block's stream */
  size_t field;                  /* byte offset of the mf_real* field in mf_pairformer_block */
} mf_param_entry;

typedef struct {
  mf_param_entry *entries; /* n, in bind order = offset order */
  int n;
  int64_t total;           /* elements of the flat buffer */
  int L;                   /* Pairformer blocks */
  mf_pairformer_config config;
} mf_params_table;

/* Builds the table of an L-block Pairformer stack (names "pairformer.<sub-layer>.<field>").
 * MF_ERR_CONFIG for an impossible config or L outside [1, MF_PARAMS_MAX_BLOCKS];
 * MF_ERR_NOMEM if allocation fails. Free with mf_params_free (also after a failure). */
mf_status mf_params_build_pairformer(mf_params_table *t, const mf_pairformer_config *c, int L);
void mf_params_free(mf_params_table *t);

/* Elements of the flat buffer (48 × 3,070,848 at the AF3 defaults and L = 48). */
int64_t mf_params_count(const mf_params_table *t);
/* The entry called `name`, or NULL. */
const mf_param_entry *mf_params_find(const mf_params_table *t, const char *name);

/* Points every field of w at block l's slice of flat (params (total), or a gradient /
 * moment buffer with the same layout). */
void mf_params_bind_block(const mf_params_table *t, mf_real *flat, int l, mf_pairformer_block *w);

/* AF3 initialisation of flat (total) from the table (see "Init stream" above): for every
 * block l, mf_params_bind_block then mf_params_init_block(…, l). */
void mf_params_init(const mf_params_table *t, mf_real *flat, uint64_t seed);

/* Initialises the weights w points at (bound for this table's config, by
 * mf_params_bind_block or mf_pairformer_block_bind) as block `block` of the stack: the
 * Philox stream (seed, MF_RNG_INIT, block), draw indices rng_offset(t) + e. `block` may
 * exceed t->L (a one-block table initialises any block of a larger stack). */
void mf_params_init_block(const mf_params_table *t, mf_pairformer_block *w, uint64_t seed,
                          uint32_t block);

/* Name of an init kind ("zeros", "ones", "lecun", "he", "const"). */
const char *mf_init_kind_name(mf_init_kind k);

#ifdef __cplusplus
}
#endif

#endif
