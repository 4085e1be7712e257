/* attention_cuda.h — C entry points of EvoFlash-3D, the CUDA attention with a pair bias
 * broadcast over rows (the function of src/ops/attention.h, which the CPU reference
 * computes), in bf16 with fp32 accumulation. Not the CPU reference, and not a dispatch:
 * callers pass device pointers and a stream.
 *
 * Shapes (contiguous, row-major; letters from include/megafold.h):
 *   q, out, gate, dout, dq, dgate (B, R, H, Q, D) bf16    k, v, dk, dv (B, R, H, K, D) bf16
 *   bias, dbias (B, H, Q, K) bf16 (broadcast over R)      mask (B, R, K) uint8, 1 = valid
 *   lse (B, R, H, Q) fp32 (natural log; -inf for a row with no valid key)
 * Requirements: D % 8 == 0 and D <= 64; every pointer 16-byte aligned.
 *
 * Memory: the forward saves only lse; nothing of size R·Q·K is ever stored. The backward
 * needs a workspace of mf_attention_backward_cuda_workspace() bytes (fp32 row statistics
 * Di (B,R,H,Q), plus dout⊙σ(gate) (B,R,H,Q,D) bf16 when there is a gate): O(R·H·Q·D);
 * plus, when R > 1, the fp32 dQ accumulators of the fused dK/dV/dQ pass, one per resident
 * CTA: min(B·R·H, CTAs resident on the GPU) × ⌈Q/64⌉·64·Dp·4 bytes (Dp = D rounded up to
 * 16, 32, 48 or 64), O(SMs·Q·D), e.g. 396 × 1024·32·4 B = 52 MB at Q = 1024, D = 32 on an
 * H200 (132 SMs, 3 CTAs each). The workspace size queries the current device.
 *
 * Gradient contract (as attention.h): dq, dk, dv, dbias, dgate all ASSIGN; any may be
 * NULL to skip it. dQ = Σ_k dS·K is summed, when R > 1, by the CTA that owns the slab
 * (b, r, h), key tile by key tile in order, in one fp32 accumulator slot per thread: the
 * same order every run and on every GPU (and whichever memory holds the accumulator).
 * dbias = Σ_r dS is reduced by a pass that owns each (q, k) tile and loops over r in
 * fp32 registers: no float atomics, so two runs are bit-identical. When
 * that pass's grid is short of full waves, r is split into a few ranges whose fp32
 * partial sums go to dq's buffer (when dq is wanted and packed; before dq is computed) or
 * to the workspace's scratch (R > 1), whichever is larger, and are summed in range order:
 * still deterministic, and no memory beyond the arguments and workspace.
 * The number of ranges follows from the grid and the GPU's SM count and occupancy, so
 * results are bit-identical run to run on one GPU model; another model (another SM count)
 * may round dbias differently.
 * Unlike the CPU reference, the backward takes the forward's output `out` (gated):
 * Di = Σ_d dout·out and dgate = dout·out·(1 − σ(gate)) then need no recomputation.
 *
 * Strided views (the *_strided_cuda entry points; the packed ones above are wrappers with
 * mf_attn_packed_views()): q, k, v, gate, out, dout, dq, dk, dv, dgate may each be a view
 * with its own element strides (b, r, h, row): element (b, r, h, i, d) at
 * base + b·s.b + r·s.r + h·s.h + i·s.row + d — D contiguous, every stride a multiple of 8
 * (16-byte rows with 16-byte aligned bases), s.row >= D, 64·s.row < 2³¹. mask and lse stay
 * packed; bias and dbias are packed or have a padded row stride (views.bias_row). So q, k, v, gate can be column blocks of one projection matrix
 * whose rows are in any order of (r, i) (triangle attention: rows (i, j) for the starting
 * node, (j, i) for the ending node — the strides swap), and out, dq, dk, dv, dgate can be
 * written straight into such matrices: nothing outside the views is written. Output views
 * must not overlap each other or the inputs, except that dgate may be dout itself (the
 * same pointer and strides: each dout chunk is read once, by the thread that then writes
 * that dgate chunk). The strided backward takes a workspace of
 * mf_attention_backward_strided_cuda_workspace() bytes: as the packed one, plus room for
 * the split dbias pass's partial sums (up to 10 row ranges), which the packed backward
 * keeps in dq's buffer (a strided dq is not one block); with less (at least the packed
 * size) the split uses what there is. */
#ifndef MF_OPS_CUDA_ATTENTION_CUDA_H
#define MF_OPS_CUDA_ATTENTION_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/attention.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element strides of a (B, R, H, rows, D) view; D is contiguous. */
typedef struct {
  int64_t b, r, h, row;
} mf_attn_stride;

/* The views of one attention call (those of absent tensors are ignored). bias_row: the
 * row stride (elements) of bias and dbias, (B,H,Q,·) with planes of Q·bias_row; 0 = K
 * (dense), else >= K. With K % 8 != 0 a dense bias has rows off the 16-byte grid and is
 * copied an element at a time (twice the attention's time at N = 2050 against 2048);
 * a bias_row rounded up to a multiple of 8 keeps the 16-byte copies. Padding columns are
 * never read, nor written (except zeroed with the rest of dbias when there are no rows
 * or no keys). */
typedef struct {
  mf_attn_stride q, k, v, gate, out, dout, dq, dk, dv, dgate;
  int64_t bias_row;
} mf_attn_views;

/* The packed layouts of the header comment: (B,R,H,Q,D) / (B,R,H,K,D). */
mf_attn_views mf_attn_packed_views(mf_attn_dims d);

/* Forward. out (B,R,H,Q,D); lse (B,R,H,Q) or NULL; bias, mask, gate may be NULL. */
void mf_attention_forward_cuda(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *q,
                               const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                               const __nv_bfloat16 *bias, const uint8_t *mask,
                               const __nv_bfloat16 *gate, mf_attn_dims d, cudaStream_t stream);

/* Bytes of device workspace the backward needs for these dims (gate present or not). */
size_t mf_attention_backward_cuda_workspace(mf_attn_dims d, int has_gate);

/* Backward. dout, out (B,R,H,Q,D) and lse (B,R,H,Q) from the forward; workspace of at
 * least mf_attention_backward_cuda_workspace() bytes, 16-byte aligned. */
void mf_attention_backward_cuda(__nv_bfloat16 *dq, __nv_bfloat16 *dk, __nv_bfloat16 *dv,
                                __nv_bfloat16 *dbias, __nv_bfloat16 *dgate,
                                const __nv_bfloat16 *dout, const __nv_bfloat16 *out,
                                const float *lse, const __nv_bfloat16 *q,
                                const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                const __nv_bfloat16 *bias, const uint8_t *mask,
                                const __nv_bfloat16 *gate, mf_attn_dims d, void *workspace,
                                size_t workspace_bytes, cudaStream_t stream);

/* The same on strided views (see the header comment). */
void mf_attention_forward_strided_cuda(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *q,
                                       const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                       const __nv_bfloat16 *bias, const uint8_t *mask,
                                       const __nv_bfloat16 *gate, mf_attn_dims d,
                                       const mf_attn_views *views, cudaStream_t stream);
size_t mf_attention_backward_strided_cuda_workspace(mf_attn_dims d, int has_gate);
void mf_attention_backward_strided_cuda(
    __nv_bfloat16 *dq, __nv_bfloat16 *dk, __nv_bfloat16 *dv, __nv_bfloat16 *dbias,
    __nv_bfloat16 *dgate, const __nv_bfloat16 *dout, const __nv_bfloat16 *out, const float *lse,
    const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
    const __nv_bfloat16 *bias, const uint8_t *mask, const __nv_bfloat16 *gate, mf_attn_dims d,
    const mf_attn_views *views, void *workspace, size_t workspace_bytes, cudaStream_t stream);

/* The backward with its prologue done by the caller, which has dout and the gate at hand
 * anyway (the triangle attention's output-projection backward, ta_out_bwd_wg.cu, forms
 * them in the GEMM's epilogue instead of a pass of their own over dout, out and the gate).
 * The caller passes:
 *   dO, the gradient of the ungated output (with a gate: dout ⊙ σ(gate)), a (B,R,H,Q,D)
 *     view (views->dout);
 *   side, the side rows: fp32, per slab s = (b·R + r)·H + h, 2·QP values at s·2·QP,
 *     QP = mf_attention_side_rows_qp(d) (Q rounded up to the 64-row tile): lse·log2(e) at
 *     [0, QP) (+inf where lse = −inf) and Di = Σ_d dO·(ungated output) = Σ_d dout·out at
 *     [QP, 2·QP); the padding rows q ≥ Q hold +inf and 0
 *     (mf_attention_side_rows_pad_cuda writes them, and nothing when Q % 64 == 0).
 *     mf_attention_side_rows_bytes() bytes, 16-byte aligned.
 * dgate is then the caller's too (dout·out·(1 − σ(gate))). Workspace:
 * mf_attention_backward_prepared_cuda_workspace() bytes (the strided backward's, less the
 * side rows and the gated dO it holds). Same passes, orders and gradient contract as
 * mf_attention_backward_strided_cuda; views' gate, out, dgate are ignored. */
int mf_attention_side_rows_qp(mf_attn_dims d);
size_t mf_attention_side_rows_bytes(mf_attn_dims d);
void mf_attention_side_rows_pad_cuda(float *side, mf_attn_dims d, cudaStream_t stream);
size_t mf_attention_backward_prepared_cuda_workspace(mf_attn_dims d);
void mf_attention_backward_prepared_strided_cuda(
    __nv_bfloat16 *dq, __nv_bfloat16 *dk, __nv_bfloat16 *dv, __nv_bfloat16 *dbias,
    const __nv_bfloat16 *dO, const float *side, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
    const __nv_bfloat16 *v, const __nv_bfloat16 *bias, const uint8_t *mask, mf_attn_dims d,
    const mf_attn_views *views, void *workspace, size_t workspace_bytes, cudaStream_t stream);

/* Kernel variant for the lab and the tests: 0 = tensor cores (mma.sync, the default:
 * variant 7's backward), 1 = the portable path (the same kernels with the matrix products
 * done by warp shuffles and FMAs, no architecture-specific instructions, three backward
 * passes); 6 = three backward passes (dK/dV, dQ, dbias), 7 = fused dK/dV/dQ pass + dbias
 * pass, 8 / 9 = 7 with the dQ accumulator forced into global scratch / shared memory,
 * 10 / 11 = 8 with the fused kernel's step schedule 0 / 2 (README step 7); lab only: 2 = the first tensor-core version (no split dbias pass), 3..5 = CTAs of
 * several warpgroups sharing tiles (dev/cuda/README.md). Returns the previous one. */
/* The dbias pass's kernel where D = 32: 0 (default) the mma.sync one, 1 the wgmma kernel
 * (sm_90a; tested, measured slower: attention.cu says why); for the tests, the lab and the
 * benchmark. Returns the previous setting. */
int mf_attention_cuda_set_dbias_wg(int on);
/* The kernels with TMA tile copies (sm_90), where D = 32 and the views allow (strides of
 * 16-byte multiples), as a bit mask: MF_ATT_TMA_FWD the forward (fwd_tma_kernel),
 * MF_ATT_TMA_FWD4 that kernel bounded at 4 CTAs per SM instead of 5, MF_ATT_TMA_DBIAS the
 * dbias pass (dbias_tma_kernel), MF_ATT_TMA_FUSED the fused dK/dV/dQ pass (fused_tma_kernel,
 * below N = 2048); MF_ATT_TMA_FUSED_WG that pass with its Sᵀ, dPᵀ, dV, dK and dQ products
 * on wgmma, MF_ATT_TMA_DBIAS_WG the dbias pass with its S and dP products on wgmma,
 * MF_ATT_TMA_FWD_WG the forward with its S and P·V products on wgmma, MF_ATT_TMA_FUSED_WG2
 * (with MF_ATT_TMA_FUSED_WG) the wgmma fused pass over pairs of key tiles,
 * MF_ATT_TMA_DBIAS_WG2 (with MF_ATT_TMA_DBIAS_WG) the wgmma dbias pass over pairs of query
 * tiles (sm_90a; their sums
 * are ordered differently, so their outputs equal the others' to rounding, not bit for
 * bit); MF_ATT_TMA_MASK: the forward's and the dbias pass's key-mask bytes come as one
 * more TMA copy of each stage (where K % 16 == 0 and the mask is 16-byte aligned; cleared,
 * warp 0 stages them; same outputs bit for bit); MF_ATT_TMA_GATE: the forward's gate
 * rows come by TMA with Q (cleared: cp.async in the last step). A cleared TMA bit runs the cp.async
 * kernel, whose outputs are bit-identical to the mma.sync TMA kernel's. Default: all but
 * MF_ATT_TMA_FWD4. Returns the previous mask. */
#define MF_ATT_TMA_FWD 1
#define MF_ATT_TMA_FWD4 2
#define MF_ATT_TMA_DBIAS 4
#define MF_ATT_TMA_FUSED 8
#define MF_ATT_TMA_FUSED_WG 16
#define MF_ATT_TMA_DBIAS_WG 32
#define MF_ATT_TMA_FWD_WG 64
#define MF_ATT_TMA_FUSED_WG2 128
#define MF_ATT_TMA_DBIAS_WG2 256
#define MF_ATT_TMA_MASK 512
#define MF_ATT_TMA_GATE 1024
int mf_attention_cuda_set_tma(int mask);
/* The TMA fused pass's persistent grid, for the lab: at most per_sm CTAs per SM (0, the
 * default: as many as fit, 3 at D = 32). Returns the previous setting. */
int mf_attention_cuda_set_fused_grid(int per_sm);
/* How many launches of a TMA kernel this process has made (for the tests). */
long mf_attention_cuda_tma_calls(void);
int mf_attention_cuda_set_variant(int variant);

/* The order in which the forward's CTAs are numbered (what the hardware scheduler runs
 * together), for the lab and the tests: 0 = rows r fastest, 1 = query tiles fastest,
 * 2 = groups of 8 rows r (attention.cu, fwd_cta; the default). Results are identical in
 * every order. Returns the previous one. */
int mf_attention_cuda_set_fwd_order(int order);

#ifdef __cplusplus
}
#endif

#endif
