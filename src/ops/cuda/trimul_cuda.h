/* trimul_cuda.h — EvoFusion's triangle multiplicative update (outgoing / incoming) on the
 * GPU (the function of src/ops/trimul.h, which the CPU reference computes), bf16 with
 * fp32 accumulation and fp32 LayerNorm statistics:
 *
 *   LN_in(z) → bf16 staging chunk → ONE GEMM for the four projections and the output
 *   gate (w_cat (4Ch + C, C) = [W_ap; W_ag; W_bp; W_bg; W_g], the CPU parameter order)
 *   → gate/mask epilogue writing A, B channel-major (Ch, ldm) and σ(x·W_gᵀ)
 *   → the contraction as Ch batched N×N GEMMs (cublasGemmStridedBatchedEx, bf16 in,
 *     fp32 accumulate, batch stride ldm) → T (Ch, ldm)
 *   → LN_out read channel-major, written row-major into a staging chunk → GEMM with W_z
 *   → epilogue out = σ ⊙ u, optionally fused with the residual add and row/column
 *     dropout (mf_resdrop_cuda: out += mask ⊙ Δz, or out = rd->res + mask ⊙ Δz).
 * Rows go through in chunks (mf_fusion_chunk_rows, bounded staging, made a multiple of 8
 * rows except the last chunk); only the contraction sees whole tensors. The chunk staging
 * lives in the backward's gradient planes that are dead in each phase, plus what it needs
 * beyond them (mf_trimul_cuda_workspace: 822 MiB at N = 768, C = Ch = 128; 1350 with a
 * staging region of its own). The channel-major
 * arrays (A, B, T and the backward's dT, dA, dB) have the channel stride ldm = N² rounded
 * up to 8: plane c holds the N×N matrix in its first N² elements, then up to 7 padding
 * elements that no GEMM reads, so every plane starts 16-byte aligned for any N and the
 * vectorised transposing kernels (variant 1) apply at N % 4 != 0 too (N = 766 ran the
 * scalar kernels before, 1.8x slower on an H200). Saved for the backward
 * (mf_trimul_cuda_saved_bytes): LN_in and LN_out statistics (fp32) and A, B, T (bf16,
 * channel-major); x̂, the projections and the gate are recomputed. dγ/dβ come from ordered per-block partials, weight gradients from
 * GEMMs accumulated chunk after chunk: two runs are bit-identical.
 *
 * Gradient contract (as trimul.h): parameter gradients ACCUMULATE (fp32; a NULL field or
 * struct skips); dz ASSIGNS — except with a residual (rd != NULL), where dz ACCUMULATES
 * (dz += ∂Δz/∂z with dΔz = dout ⊙ mask), so the caller passes dz holding the residual
 * path's gradient (dz may equal dout). The forward with rd reads z before writing out,
 * chunk by chunk, but the backward needs the pre-update z: out must not be z then
 * unless the caller keeps a copy. pm is the pair mask (N, N) uint8 or NULL.
 * Requirements: C <= 1024, Ch <= 256. Not the CPU reference. */
#ifndef MF_OPS_CUDA_TRIMUL_CUDA_H
#define MF_OPS_CUDA_TRIMUL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/cuda/dropout_cuda.h"
#include "ops/cuda/gemm_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const __nv_bfloat16 *ln_in_g, *ln_in_b;   /* (C) */
  const __nv_bfloat16 *w_cat;               /* (4Ch + C, C): W_ap, W_ag, W_bp, W_bg, W_g */
  const __nv_bfloat16 *ln_out_g, *ln_out_b; /* (Ch) */
  const __nv_bfloat16 *w_z;                 /* (C, Ch) */
} mf_trimul_cuda_weights;

typedef struct {
  float *ln_in_g, *ln_in_b;   /* (C) */
  float *w_cat;               /* (4Ch + C, C) */
  float *ln_out_g, *ln_out_b; /* (Ch) */
  float *w_z;                 /* (C, Ch) */
} mf_trimul_cuda_grads;

/* Bytes of the saved buffer: statistics 4·N² fp32, A, B, T 3·Ch·ldm bf16 (+ alignment). */
size_t mf_trimul_cuda_saved_bytes(int N, int Ch);
/* Bytes of the workspace the forward and the backward take. */
size_t mf_trimul_cuda_workspace(int N, int C, int Ch);

/* out (N, N, C) = Δz, or with rd out = res + mask ⊙ Δz (res = rd->res, NULL: out itself,
 * +=); saved filled for the backward;
 * z (N, N, C); pm (N, N) or NULL; outgoing = 1 (Alg 12) or 0 (incoming, Alg 13). */
void mf_trimul_forward_cuda(__nv_bfloat16 *out, void *saved, const __nv_bfloat16 *z,
                            const uint8_t *pm, const mf_trimul_cuda_weights *w, int N, int C,
                            int Ch, int outgoing, const mf_resdrop_cuda *rd, void *ws,
                            size_t ws_bytes, const mf_cuda_blas *blas, cudaStream_t stream);

/* dz (N, N, C): see the contract above; g: parameter gradients or NULL;
 * dout (N, N, C); saved, z, pm, w, flags as in the forward. */
void mf_trimul_backward_cuda(__nv_bfloat16 *dz, const mf_trimul_cuda_grads *g,
                             const __nv_bfloat16 *dout, const void *saved,
                             const __nv_bfloat16 *z, const uint8_t *pm,
                             const mf_trimul_cuda_weights *w, int N, int C, int Ch, int outgoing,
                             const mf_resdrop_cuda *rd, void *ws, size_t ws_bytes,
                             const mf_cuda_blas *blas, cudaStream_t stream);

/* Variant (for the tests and the benchmark): 2 (default) = the forward's input side as
 * three wgmma LayerNorm + projection kernels whose epilogues write A, B channel-major and
 * σ(g), and the backward's recomputed projection as two whose epilogue is the gate
 * backward (ln_gemm_wg.cu; where mf_ln_gemm_wg_supported: C in {64, 128}, Ch % 64 == 0,
 * Ch <= 192 at C = 128, 16-byte aligned) and otherwise variant 1; 1 = the
 * vectorised kernels (64-row tiles, 16-byte accesses on the channel-major and the
 * row-major side, bf16 swizzled shared-memory transposes) wherever Ch % 8 == 0 (any N: the
 * chunk offsets are multiples of 8, the last chunk's partial 8-column group goes into the
 * padding; 16-byte aligned buffers), the scalar 32-row-tile kernels elsewhere; 0 = the
 * scalar kernels everywhere. Variants 0 and 1 give the same values up to the summation
 * order of the LN_out statistics and dγ/dβ partials; 2 differs from them by the bf16
 * rounding of P (its epilogues take the fp32 accumulators). Returns the previous one. */
int mf_trimul_cuda_set_variant(int variant);

#ifdef __cplusplus
}
#endif

#endif
