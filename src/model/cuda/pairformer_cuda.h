/* pairformer_cuda.h — the Pairformer block (AF3 SI Alg 17) and the L-block stack on one GPU,
 * forward and backward, composed from the EvoFusion and EvoFlash-3D ops (src/ops/cuda):
 *
 *   z += drop_row(TriMulOut(z));   z += drop_row(TriMulIn(z))      trimul_cuda.h
 *   z += drop_row(TriAttStart(z)); z += drop_col(TriAttEnd(z))     triatt_cuda.h
 *   z += Transition(z)                                              transition_cuda.h
 *   s += AttentionPairBias(s, z);  s += Transition(s)               attn_pair_bias_cuda.h
 *
 * The same math, order, dropout streams and parameter table as the CPU reference
 * (model/pairformer.h, model/stack.h), which the tests compare it against.
 *
 * Precision and parameters (DESIGN.md "Memory", "Precision"). The fp32 master weights, the
 * fp32 gradients (and, later, the AdamW moments) are flat device buffers in the parameter
 * table's layout (model/params.h: tensor-major, stacked (L, ...)). The kernels read a bf16
 * COMPUTE COPY in a block-major layout: block l's weights are one contiguous slice laid out
 * in the CPU bind order (mf_pairformer_block_bind), so the concatenated weights the fused
 * ops take ([W_ap; W_ag; W_bp; W_bg; W_g], [W_q; W_k; W_v; W_b; W_g], [W_a; W_b]) are
 * already adjacent. mf_pf_cuda_stack_set_params converts master → compute copy in one
 * launch. A block's backward accumulates its parameter gradients into a block-sized fp32
 * scratch in the same block-major layout, which one launch then adds into the table-layout
 * gradient buffer (so gradients never exist twice at full size).
 *
 * Activations: bf16, one arena per stack, sized up front from the policy and N_max by the
 * planner (model/stack.h's plan with this file's sizer). Per block the forward keeps the
 * inputs of the sub-layers (z1..z5, s1: the pair tensor after each update), the ops' saved
 * buffers (statistics, lse, A/B/T of the triangle products, attention outputs) and nothing
 * else; everything transient lives in one workspace shared by all ops (the largest op's).
 *
 * Gradients: the block backward works IN PLACE: ds (N, Cs) and dz (N, N, Cz) hold the
 * gradients w.r.t. the block outputs on entry and w.r.t. its inputs on return. Parameter
 * gradients ACCUMULATE. Determinism: every op is free of float atomics, so two runs give
 * bit-identical outputs and gradients, and so do the checkpointing policies.
 * Not the CPU reference, not the optimiser, not multi-GPU. */
#ifndef MF_MODEL_CUDA_PAIRFORMER_CUDA_H
#define MF_MODEL_CUDA_PAIRFORMER_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "model/pairformer.h"
#include "model/params.h"
#include "model/stack.h"
#include "ops/cuda/attn_pair_bias_cuda.h"
#include "ops/cuda/gemm_cuda.h"
#include "ops/cuda/triatt_cuda.h"
#include "ops/cuda/trimul_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- one block's weights */
typedef struct {
  const __nv_bfloat16 *ln_g, *ln_b; /* (C) */
  const __nv_bfloat16 *w_ab;        /* (2·n·C, C) = [W_a; W_b] */
  const __nv_bfloat16 *w_o;         /* (C, n·C) */
} mf_pf_cuda_transition;

typedef struct {
  float *ln_g, *ln_b; /* (C) */
  float *w_ab;        /* (2·n·C, C) */
  float *w_o;         /* (C, n·C) */
} mf_pf_cuda_transition_grads;

typedef struct {
  mf_trimul_cuda_weights tri_out, tri_in;
  mf_triatt_cuda_weights att_start, att_end;
  mf_pf_cuda_transition pair_trans;
  mf_apb_cuda_weights single_att;
  mf_pf_cuda_transition single_trans;
} mf_pf_cuda_weights;

typedef struct {
  mf_trimul_cuda_grads tri_out, tri_in;
  mf_triatt_cuda_grads att_start, att_end;
  mf_pf_cuda_transition_grads pair_trans;
  mf_apb_cuda_grads single_att;
  mf_pf_cuda_transition_grads single_trans;
} mf_pf_cuda_grads;

/* Where each field of a block lives inside one block-major block slice (elements), read
 * from the parameter table (a table whose layout disagrees with the fused ops' concatenation
 * assumption is a broken invariant: fatal). */
#define MF_PF_FIELDS ((int)(sizeof(mf_pairformer_block) / sizeof(mf_real *)))
typedef struct {
  int64_t block_numel;
  int64_t off[MF_PF_FIELDS]; /* in-block offset of each field, by its slot in
                              * mf_pairformer_block (byte offset / sizeof(mf_real *)) */
} mf_pf_cuda_layout;

void mf_pf_cuda_layout_make(mf_pf_cuda_layout *lay, const mf_params_table *t);
/* Binds block weights / gradients to a block-major slice (base: block l's first element). */
void mf_pf_cuda_bind(mf_pf_cuda_weights *w, const mf_pf_cuda_layout *lay,
                     const __nv_bfloat16 *base);
void mf_pf_cuda_bind_grads(mf_pf_cuda_grads *g, const mf_pf_cuda_layout *lay, float *base);

/* ---------------------------------------------------------------- one block */
/* keep (0 or 1, below): whether the block's two triangle attentions keep their projection
 * matrices for the backward (mf_triatt_forward_cuda's keep) instead of recomputing them:
 * at N = 768 (AF3 dims, H200, 2026-11-30) 2 × 585 MiB more saved and the block's workspace
 * 1432 → 847 MiB (the triangle attention's was the largest; the triangle multiplication's is
 * 822 MiB since its staging moved into its gradient planes), arena 3.30 → 3.87 GiB, and
 * the block backward 21.6 → 20.4 ms; the same outputs and gradients bit for bit. The saved
 * and workspace sizes, the forward and the backward of one block must agree on it. */
/* Bytes of one block's saved buffer and of the transient workspace, at crop N. */
size_t mf_pf_cuda_block_saved_bytes(const mf_pairformer_config *c, int N, int keep);
size_t mf_pf_cuda_block_workspace(const mf_pairformer_config *c, int N, int keep);
/* The workspace that serves every crop n <= N_max: the maximum of block_workspace over
 * 1..N_max. The ops' workspaces are not monotone in N (their row chunks change with N:
 * at the AF3 dims, block_workspace(483) is 0.60× block_workspace(482)), so a stack planned
 * at N_max sizes its workspace with this. */
size_t mf_pf_cuda_block_workspace_upto(const mf_pairformer_config *c, int N_max, int keep);

/* pm (N, N) = mask_i · mask_j (device; mask (N) uint8 1 = valid). */
void mf_pf_cuda_pair_mask(uint8_t *pm, const uint8_t *mask, int N, cudaStream_t stream);

/* s_out (N, Cs), z_out (N, N, Cz): the block's outputs; saved (block_saved_bytes) filled;
 * s (N, Cs), z (N, N, Cz) inputs (not modified; may not alias the outputs); mask (N) and pm
 * (N, N) device, both NULL or both given. ws: block_workspace bytes. */
void mf_pf_cuda_block_forward(__nv_bfloat16 *s_out, __nv_bfloat16 *z_out, void *saved,
                              const __nv_bfloat16 *s, const __nv_bfloat16 *z,
                              const uint8_t *mask, const uint8_t *pm,
                              const mf_pf_cuda_weights *w, const mf_pairformer_config *c, int N,
                              int keep, mf_pairformer_rng rng, void *ws, size_t ws_bytes,
                              const mf_cuda_blas *blas, cudaStream_t stream);

/* In place: ds (N, Cs), dz (N, N, Cz) hold dL/d(outputs) on entry, dL/d(inputs) on return;
 * g: parameter gradients (ACCUMULATE; NULL skips); saved from the forward of the same s, z,
 * masks, weights and rng. */
void mf_pf_cuda_block_backward(__nv_bfloat16 *ds, __nv_bfloat16 *dz, const mf_pf_cuda_grads *g,
                               const void *saved, const __nv_bfloat16 *s,
                               const __nv_bfloat16 *z, const uint8_t *mask, const uint8_t *pm,
                               const mf_pf_cuda_weights *w, const mf_pairformer_config *c, int N,
                               int keep, mf_pairformer_rng rng, void *ws, size_t ws_bytes,
                               const mf_cuda_blas *blas, cudaStream_t stream);

/* Where a block's time goes: with a profile enabled, the block forward and backward record
 * a CUDA event after each sub-layer (its ops and copies), synchronise at the end of the call and add
 * the sub-layer times (ms) to the profile. The synchronisation makes profiled runs slightly
 * slower; it is for the benchmark's breakdown, off by default. Not thread-safe. */
#define MF_PF_SUBLAYERS 7
typedef struct {
  double fwd_ms[MF_PF_SUBLAYERS], bwd_ms[MF_PF_SUBLAYERS];
  int fwd_calls, bwd_calls;
} mf_pf_cuda_profile;
/* p = NULL turns profiling off. */
void mf_pf_cuda_profile_enable(mf_pf_cuda_profile *p);
/* "tri_mul_out", "tri_mul_in", "tri_att_start", "tri_att_end", "pair_transition",
 * "single_att", "single_transition" for k = 0..6. */
const char *mf_pf_cuda_sublayer_name(int k);

/* ---------------------------------------------------------------- the stack */
/* The GPU sizer for the planner (model/stack.h): bf16 block inputs, this file's saved
 * bytes, the gradient kept in place (no ping-pong), and, fixed, the shared workspace plus
 * the masks. ctx: a const int * holding keep, or NULL for keep = 0 (the plan with the least
 * memory, which gives the largest N that fits). */
mf_stack_sizes mf_pf_cuda_sizes(const mf_pairformer_config *c, int N, void *ctx);

typedef struct {
  const mf_params_table *table;
  mf_pf_cuda_layout layout;
  mf_stack_plan plan; /* at N_max */
  int N_max;
  size_t ws_bytes;     /* the ops' shared workspace inside the arena */
  void *arena;         /* device, plan.total_bytes */
  __nv_bfloat16 *wc;   /* device, L·block_numel: the bf16 compute copy, block-major */
  float *gblock;       /* device, block_numel: one block's gradient scratch */
  int64_t *d_map;      /* device: the table's entries for the layout conversions */
  mf_cuda_blas blas;
  cudaStream_t stream;
  int fwd_N;           /* N of the last forward (0: none since init/backward) */
  int recomputed;      /* block forwards rerun by the last backward */
  int run_blocks;      /* blocks a forward/backward runs: 0 = all L (see set_run_blocks) */
  int keep;            /* the blocks' keep (chosen by init, see mf_pf_cuda_stack_init) */
} mf_pf_cuda_stack;

/* Plans for crops up to N_max (refusing a plan over budget_bytes, 0 = no budget, with the
 * largest N that fits in the message), allocates the arena, the compute copy and the
 * scratch. MF_ERR_CONFIG / MF_ERR_NOMEM; mf_pf_cuda_stack_free is safe after a failure.
 * keep (above) is 1 when the plan with it fits the budget (with no budget: the free device
 * memory less the other allocations and 2 GiB), else 0; the environment variable
 * MF_PF_KEEP_PROJ=0|1 forces it. */
mf_status mf_pf_cuda_stack_init(mf_pf_cuda_stack *st, const mf_params_table *t,
                                mf_stack_policy policy, int N_max, int64_t budget_bytes,
                                cudaStream_t stream);
void mf_pf_cuda_stack_free(mf_pf_cuda_stack *st);

/* Runs only blocks 0..n−1 from now on (0: all L). For fit checks and benchmarks at crops
 * too long to run all L blocks: the arena stays planned and allocated for L blocks, so the
 * memory is that of the whole stack while the time is that of n blocks. */
void mf_pf_cuda_stack_set_run_blocks(mf_pf_cuda_stack *st, int n);

/* The bf16 compute copy from the fp32 master weights (device, table layout, t->total),
 * read on the stack's stream: master must be ready there (written on that stream, or
 * synchronised before the call). */
void mf_pf_cuda_stack_set_params(mf_pf_cuda_stack *st, const float *master);

/* s_out (N, Cs), z_out (N, N, Cz) = the stack on s (N, Cs), z (N, N, Cz) (device bf16);
 * mask (N) device or NULL. N <= N_max. The outputs may not alias s, z (block 0's input,
 * which the backward reads). */
void mf_pf_cuda_stack_forward(mf_pf_cuda_stack *st, __nv_bfloat16 *s_out, __nv_bfloat16 *z_out,
                              const __nv_bfloat16 *s, const __nv_bfloat16 *z,
                              const uint8_t *mask, int N, mf_stack_rng rng);

/* After the forward with the same inputs: ds (N, Cs), dz (N, N, Cz) hold dL/d(outputs) on
 * entry and dL/d(inputs) on return (in place); grads (device fp32, table layout, t->total)
 * ACCUMULATE (NULL skips the parameter gradients). s, z: the forward's, unchanged since;
 * mask: NULL or not as in the forward (its values are the copy the forward took). */
void mf_pf_cuda_stack_backward(mf_pf_cuda_stack *st, __nv_bfloat16 *ds, __nv_bfloat16 *dz,
                               float *grads, const __nv_bfloat16 *s, const __nv_bfloat16 *z,
                               const uint8_t *mask, int N, mf_stack_rng rng);

#ifdef __cplusplus
}
#endif

#endif
