/* attn_pair_bias_cuda.h — the trunk's single attention with pair bias (AF3 SI Alg 24,
 * trunk mode) on the GPU as one module, forward and backward (the function of
 * src/ops/attn_pair_bias.h, which the CPU reference computes), bf16 with fp32
 * accumulation and fp32 LayerNorm statistics:
 *
 *   â = LN(s) (N, Cs);  q = â·W_qᵀ + b_q, k, v, g = â·W_{k,v,g}ᵀ → heads (H, N, D)
 *   b = LN_z(z)·W_zᵀ (N², H) → (H, N, NB)    the only pair-sized work: one LN + GEMM pass
 *                                           (rows padded to NB = N rounded up to 8: 16-byte
 *                                           bias rows for the attention at any N)
 *   o = EvoFlash-3D attention(q, k, v; bias b, key mask, gate σ(g))   (B = R = 1)
 *   Δs = concat_h(o)·W_oᵀ;  out = Δs, or out += Δs with accumulate (the residual)
 *
 * Saved (mf_apb_cuda_saved_bytes): O(N·(Cs + H·D) + H·N·NB) bytes — LN(s) statistics,
 * q, k, v, g, the bias (H, N, NB), the lse and the gated output; LN_z(z) is not kept (the
 * backward recomputes it chunk by chunk, as mf_ln_linear_backward_cuda does).
 *
 * Gradient contract: parameter gradients ACCUMULATE (fp32; NULL field or struct skips);
 * ds ASSIGNS (accumulate_ds = 0) or ADDS (accumulate_ds = 1); dz always ADDS
 * (dz += ∂Δs/∂z) — the Pairformer block passes dz holding the pair path's gradient.
 * ds and dz may be NULL to skip them. mask (N) uint8 1 = valid, or NULL.
 * Determinism: no float atomics; two runs are bit-identical.
 * Requirements: D % 8 == 0, D <= 64, Cs <= 1024, Cz <= 128, H <= 16 (the fused pair
 * kernels keep a row of z and W_z in registers; AF3: Cz = 128, H = 16). Workspace:
 * mf_apb_cuda_workspace bytes, shared by the forward and the backward, O(N·HD + H·N·NB).
 * Implementation: src/ops/cuda/attn_pair_bias.cu. Not the CPU reference. */
#ifndef MF_OPS_CUDA_ATTN_PAIR_BIAS_CUDA_H
#define MF_OPS_CUDA_ATTN_PAIR_BIAS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/cuda/gemm_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const __nv_bfloat16 *ln_s_g, *ln_s_b; /* (Cs) */
  const __nv_bfloat16 *w_q;             /* (H·D, Cs) */
  const __nv_bfloat16 *b_q;             /* (H·D) */
  const __nv_bfloat16 *w_k, *w_v, *w_g; /* (H·D, Cs) each */
  const __nv_bfloat16 *ln_z_g, *ln_z_b; /* (Cz) */
  const __nv_bfloat16 *w_z;             /* (H, Cz) */
  const __nv_bfloat16 *w_o;             /* (Cs, H·D) */
} mf_apb_cuda_weights;

typedef struct {
  float *ln_s_g, *ln_s_b; /* (Cs) */
  float *w_q;             /* (H·D, Cs) */
  float *b_q;             /* (H·D) */
  float *w_k, *w_v, *w_g; /* (H·D, Cs) each */
  float *ln_z_g, *ln_z_b; /* (Cz) */
  float *w_z;             /* (H, Cz) */
  float *w_o;             /* (Cs, H·D) */
} mf_apb_cuda_grads;

size_t mf_apb_cuda_saved_bytes(int N, int Cs, int Cz, int H, int D);
size_t mf_apb_cuda_workspace(int N, int Cs, int Cz, int H, int D);

/* out (N, Cs) = Δs (accumulate = 0) or += Δs (accumulate = 1); out may not be s (the
 * backward reads the pre-update s); saved filled for the backward; s (N, Cs);
 * z (N, N, Cz); mask (N) or NULL. w->b_q must be 16-byte aligned (read as 8-element
 * vectors). */
void mf_apb_forward_cuda(__nv_bfloat16 *out, void *saved, const __nv_bfloat16 *s,
                         const __nv_bfloat16 *z, const uint8_t *mask,
                         const mf_apb_cuda_weights *w, int N, int Cs, int Cz, int H, int D,
                         int accumulate, void *ws, size_t ws_bytes, const mf_cuda_blas *blas,
                         cudaStream_t stream);

/* ds (N, Cs) ASSIGN or ADD (accumulate_ds); dz (N, N, Cz) ADD; g parameter gradients
 * (ACCUMULATE); dout (N, Cs) = dL/dΔs; saved from the forward of the same s, z, mask, w. */
void mf_apb_backward_cuda(__nv_bfloat16 *ds, __nv_bfloat16 *dz, const mf_apb_cuda_grads *g,
                          const __nv_bfloat16 *dout, const void *saved, const __nv_bfloat16 *s,
                          const __nv_bfloat16 *z, const uint8_t *mask,
                          const mf_apb_cuda_weights *w, int N, int Cs, int Cz, int H, int D,
                          int accumulate_ds, void *ws, size_t ws_bytes,
                          const mf_cuda_blas *blas, cudaStream_t stream);

/* Pair-kernel variant for the tests and the benchmark: 2 (the default) = as 1, with the
 * backward on the tensor cores (mma.sync, apb_bias_bwd_mma_kernel) where Cz = 128 and
 * H <= 16; 1 = the block's tile of z (and dz) rows staged in shared memory,
 * double-buffered with cp.async; 0 = each warp loads its rows itself (no
 * architecture-specific instructions). 0 and 1 do the same arithmetic in the same order
 * (bit-identical); 2's backward rounds differently (its dW comes from bf16 x̂). Returns
 * the previous variant. */
int mf_apb_cuda_set_variant(int variant);

#ifdef __cplusplus
}
#endif

#endif
