/* stack.h — the L-block Pairformer stack on the CPU, forward and backward, over the stacked
 * parameter table (model/params.h), with activation checkpointing and a memory planner.
 * It is the reference the GPU stack is checked against; it is not the GPU stack, and it does
 * not own parameters (they are one flat buffer laid out by the table).
 *
 * Checkpointing. The policy says which block inputs the forward keeps:
 *   MF_STACK_RECOMPUTE  (default) every block's input; the backward reruns each block's
 *                       forward (into the one workspace) just before its backward;
 *   MF_STACK_EVERY_K    the input of every k-th block (blocks 0, k, 2k, ... start segments);
 *                       for each segment, last first, the backward reruns the segment's
 *                       forward once to regenerate its inner block inputs, then, block by
 *                       block, reruns that block's forward into the workspace and runs its
 *                       backward. Inputs kept: about L/k + k instead of L (least near
 *                       k = sqrt(L)), for at most two extra forwards per block;
 *   MF_STACK_KEEP_ALL   every input and every block's workspace: nothing is recomputed.
 * What the forward leaves behind (the last segment's inputs, the last block's workspace) is
 * used as is. Recomputation replays the same ops on the same inputs with the same dropout
 * keys, so every policy gives bit-identical outputs and gradients.
 *
 * Memory (elements; I = N·Cs + N²·Cz one block input, W = mf_pairformer_block_saved_size,
 * seg = 1, k or L, n_seg = ceil(L/seg)):
 *   kept inputs   (n_seg − 1)·I   inputs of blocks seg, 2·seg, … (block 0's input is the
 *                                 caller's s, z)
 *   inner inputs  (seg − 1)·I     the inputs inside one segment
 *   workspaces    W, or L·W (keep-all)
 *   gradient      I (L > 1)       one ping-pong buffer; the other is the caller's ds, dz
 * The stack allocates exactly this (one buffer, mf_malloc); the ops' own transient scratch
 * inside a block is not part of the plan. Element size is a parameter of the planner, but
 * the workspace layout is the CPU reference's: a GPU plan must use its own W.
 *
 * Gradient contract (as the block): ds, dz ASSIGN; parameter gradients ACCUMULATE. */
#ifndef MF_MODEL_STACK_H
#define MF_MODEL_STACK_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "model/pairformer.h"
#include "model/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MF_STACK_RECOMPUTE = 0, MF_STACK_EVERY_K, MF_STACK_KEEP_ALL } mf_stack_policy_kind;

typedef struct {
  mf_stack_policy_kind kind;
  int k; /* MF_STACK_EVERY_K: blocks per segment (>= 1); ignored otherwise */
} mf_stack_policy;

/* "recompute", "every-k", "keep-all". */
const char *mf_stack_policy_name(mf_stack_policy_kind k);

typedef struct {
  int L, N, seg, n_seg;
  int n_workspaces;       /* 1, or L (keep-all) */
  int64_t input_bytes;    /* kept + inner block inputs */
  int64_t workspace_bytes;/* block workspaces */
  int64_t grad_bytes;     /* backward ping-pong */
  int64_t saved_bytes;    /* inputs + workspaces: the saved activations */
  int64_t fixed_bytes;    /* what does not depend on the policy (GPU: the ops' transient
                           * workspace, masks); 0 on the CPU */
  int64_t total_bytes;    /* saved + grad + fixed: what the stack allocates */
  int recomputed_blocks;  /* block forwards rerun by one backward */
} mf_stack_plan;

/* The plan for L blocks at crop N, with activations of elem_bytes each (sizeof(mf_real) for
 * this CPU stack). MF_ERR_CONFIG for a bad config, L, N or policy. */
mf_status mf_stack_plan_make(mf_stack_plan *p, const mf_pairformer_config *c, int L, int N,
                             mf_stack_policy policy, size_t elem_bytes);
/* Per-block sizes at crop N, in bytes, from which any plan is made: one block input, one
 * block's saved workspace, the backward's gradient buffer and the policy-independent rest.
 * The CPU stack's sizer is elem_bytes·(I, W, I, 0); the GPU stack has its own. */
typedef struct {
  int64_t input_bytes, saved_bytes, grad_bytes, fixed_bytes;
} mf_stack_sizes;
typedef mf_stack_sizes (*mf_stack_sizer)(const mf_pairformer_config *c, int N, void *ctx);

/* The plan from a sizer (mf_stack_plan_make is this with the CPU sizer). */
mf_status mf_stack_plan_sized(mf_stack_plan *p, const mf_pairformer_config *c, int L, int N,
                              mf_stack_policy policy, mf_stack_sizer sizer, void *ctx);
/* The largest N <= 1<<17 whose sized plan fits in budget_bytes (0 when none does). */
int mf_stack_max_n_sized(const mf_pairformer_config *c, int L, mf_stack_policy policy,
                         mf_stack_sizer sizer, void *ctx, int64_t budget_bytes);
/* mf_stack_plan_fit with a sizer. */
mf_status mf_stack_plan_fit_sized(mf_stack_plan *p, const mf_pairformer_config *c, int L, int N,
                                  mf_stack_policy policy, mf_stack_sizer sizer, void *ctx,
                                  int64_t budget_bytes);

/* The largest N <= 1<<17 whose plan fits in budget_bytes (0 when none does). */
int mf_stack_max_n(const mf_pairformer_config *c, int L, mf_stack_policy policy,
                   size_t elem_bytes, int64_t budget_bytes);
/* MF_OK when the plan for N fits in budget_bytes; otherwise MF_ERR_CONFIG with a message
 * stating the bytes needed, the budget and the largest N that fits. p may be NULL. */
mf_status mf_stack_plan_fit(mf_stack_plan *p, const mf_pairformer_config *c, int L, int N,
                            mf_stack_policy policy, size_t elem_bytes, int64_t budget_bytes);

/* Dropout keys of the stack: block l uses mf_pairformer_rng {seed, step, l, training}. */
typedef struct {
  uint64_t seed, step;
  int training;
} mf_stack_rng;

typedef struct {
  const mf_params_table *table;
  mf_stack_plan plan; /* at N_max */
  int N_max;
  mf_real *buf;       /* plan.total_bytes */
  int fwd_N;          /* N of the last forward (0: none since init/backward) */
  int recomputed;     /* block forwards rerun by the last backward (= plan.recomputed_blocks) */
} mf_stack;

/* Plans for crops up to N_max, refuses a plan over budget_bytes (0: no budget), allocates.
 * MF_ERR_CONFIG / MF_ERR_NOMEM with a message; mf_stack_free is safe after a failure. */
mf_status mf_stack_init(mf_stack *st, const mf_params_table *t, mf_stack_policy policy,
                        int N_max, int64_t budget_bytes);
void mf_stack_free(mf_stack *st);

/* s_out (N, Cs), z_out (N, N, Cz) = the stack applied to s (N, Cs), z (N, N, Cz);
 * mask (N) or NULL; params (table total). N <= N_max. Keeps what the policy keeps. */
void mf_stack_forward(mf_stack *st, mf_real *s_out, mf_real *z_out, const mf_real *s,
                      const mf_real *z, const uint8_t *mask, const mf_real *params, int N,
                      mf_stack_rng rng);

/* After mf_stack_forward with the same s, z, mask, params, N and rng (s_out/z_out may have
 * been overwritten since, they are not read): ds (N, Cs), dz (N, N, Cz) ASSIGN the input
 * gradients; grads (table total) ACCUMULATE; ds_out, dz_out are the output gradients.
 * No argument may alias another. */
void mf_stack_backward(mf_stack *st, mf_real *ds, mf_real *dz, mf_real *grads,
                       const mf_real *ds_out, const mf_real *dz_out, const mf_real *s,
                       const mf_real *z, const uint8_t *mask, const mf_real *params, int N,
                       mf_stack_rng rng);

#ifdef __cplusplus
}
#endif

#endif
