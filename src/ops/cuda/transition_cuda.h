/* transition_cuda.h — EvoFusion's SwiGLU transition on the GPU (the function of
 * src/ops/transition.h, which the CPU reference computes), bf16 with fp32 accumulation:
 *
 *   x̂ = LN(inp);  [a | b] = x̂·w_abᵀ  (ONE GEMM, w_ab (2Hd, C) = [W_a; W_b]);
 *   h = silu(a) ⊙ b;  out (+)= h·W_oᵀ  (beta = 1 for the residual)
 * What runs (mf_ln_linear_cuda_set_variant, ln_linear_cuda.h):
 *   variant 3 (default): at C = 128 (Hd % 64 == 0, Hd >= 128, 16-byte aligned) the
 *     forward as ONE persistent wgmma kernel (mf_transition_wg_forward_cuda,
 *     transition_wg.cu; the same structure as variant 2's kernel with the hidden chunk
 *     kept in registers as wgmma A fragments): 0.658 ms at M = 768² (variant 2 0.972,
 *     352 vs 239 TFLOP/s), 0.177 ms at M = 384² (0.259); H200, 2026-11-30. Other shapes
 *     as variant 2;
 *   variant 2: the whole forward as ONE persistent kernel
 *     (mf_transition_fused_forward_cuda, ln_gemm.cu) where C is 64 or 128, Hd % 64 == 0,
 *     Hd >= 128 and the pointers are 16-byte aligned: per 128-row tile LN → x̂ in shared
 *     memory, then per 64 hidden channels [a | b] = x̂·[W_a; W_b]ᵀ, h = silu(a) ⊙ b in
 *     shared memory, out += h·W_oᵀ in registers (weights streamed from L2), + residual;
 *     the hidden never touches HBM and no workspace is used. Measured on an H200
 *     (2026-11-30, C = 128, Hd = 512): 0.967 ms at M = 768² (staging 1.278), 0.259 ms at
 *     M = 384² (0.333). Other shapes (the single track's C = 384, say) take variant 1;
 *   variant 1: the chunked staging path described next;
 *   variant 0: the first half as the WMMA kernel of ln_linear_cuda.h (epilogue 2, where
 *     C % 64 == 0, C <= 256, Hd % 64 == 0, mode not IDENTITY), else variant 1 — tested,
 *     2.4× slower than variant 1.
 *
 * The staging path: rows go through in chunks of R rows (mf_fusion_chunk_rows: at most
 * MF_FUSION_STAGING_BYTES of staging), so the 4c hidden is produced and consumed chunk by
 * chunk and never exists beyond the chunk; it is not kept for the backward. (Chunks small
 * enough for the hidden to stay in L2 were measured slower: dev/cuda/fusion_lab.cu.)
 * Forward saves only mean and rstd; the backward recomputes x̂, a, b
 * and h per chunk. With accumulate = 1 the last GEMM adds into out (beta = 1): the
 * residual add z += transition(z) costs no extra pass (out may then equal inp: each chunk
 * is read before it is written; the backward then needs the pre-update inp kept by the
 * caller).
 *
 * Types: inp, out, dinp, dout, weights, gamma, beta bf16; mean, rstd fp32; parameter
 * gradients fp32. Gradient contract (as transition.h): dinp ASSIGNS; dgamma, dbeta,
 * dw_ab, dw_o ACCUMULATE; NULL skips. mode FULL/SCALE/NONE or IDENTITY (no LayerNorm;
 * mean/rstd unused). Not the CPU reference. */
#ifndef MF_OPS_CUDA_TRANSITION_CUDA_H
#define MF_OPS_CUDA_TRANSITION_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/cuda/gemm_cuda.h"
#include "ops/layernorm.h"

#ifdef __cplusplus
extern "C" {
#endif

size_t mf_transition_cuda_workspace(int64_t M, int C, int Hd);

/* out (M, C) = (or +=, accumulate) (silu(x̂·W_aᵀ) ⊙ (x̂·W_bᵀ))·w_oᵀ, x̂ = LN(inp (M, C));
 * mean, rstd (M); gamma, beta (C); w_ab (2Hd, C); w_o (C, Hd). */
void mf_transition_forward_cuda(__nv_bfloat16 *out, float *mean, float *rstd,
                                const __nv_bfloat16 *inp, const __nv_bfloat16 *gamma,
                                const __nv_bfloat16 *beta, const __nv_bfloat16 *w_ab,
                                const __nv_bfloat16 *w_o, int64_t M, int C, int Hd,
                                mf_ln_mode mode, int accumulate, void *ws, size_t ws_bytes,
                                const mf_cuda_blas *blas, cudaStream_t stream);
/* out (M, C) = res (M, C) + transition(inp): the residual read where it lies (res equal to
 * out or not overlapping it; inp may be res). The wgmma forward (variant 3, C = 128) reads
 * res in its epilogue; the other paths copy res into out first and add. copy (M, C), unless
 * NULL, overlapping none of the others, receives the result too (the wgmma forward stores
 * each piece twice; the other paths copy out). The Pairformer block's z5 = z4 + PT(z4)
 * straight into z5's saved buffer and the block's output. */
void mf_transition_forward_res_cuda(__nv_bfloat16 *out, __nv_bfloat16 *copy,
                                    const __nv_bfloat16 *res, float *mean, float *rstd,
                                    const __nv_bfloat16 *inp,
                                    const __nv_bfloat16 *gamma, const __nv_bfloat16 *beta,
                                    const __nv_bfloat16 *w_ab, const __nv_bfloat16 *w_o, int64_t M,
                                    int C, int Hd, mf_ln_mode mode, void *ws, size_t ws_bytes,
                                    const mf_cuda_blas *blas, cudaStream_t stream);

/* dh = dout·W_o, dw_o += doutᵀ·h; [da | db] = dh ⊙ [b ⊙ silu'(a) | silu(a)];
 * dw_ab += [da | db]ᵀ·x̂ and dx̂ = [da | db]·w_ab (one GEMM each); LayerNorm backward.
 * dinp (M, C); dgamma, dbeta (C), dw_ab (2Hd, C), dw_o (C, Hd) fp32; dout (M, C).
 * What runs by default where C = 128, Hd is 128, 256 or 512, the mode is not IDENTITY
 * and the pointers are 16-byte aligned, on an sm_90 GPU: the whole backward over all rows
 * in ONE kernel on thread block clusters (transition_bwd_cl_cuda.h; the hidden split over
 * the CTAs of a cluster, dW accumulated on chip, dx̂ reduce-scattered through distributed
 * shared memory): 1.80 ms at M = 768², 0.48 ms at M = 384² (H200, 2026-11-30; the path
 * below 2.18 / 0.61). mf_transition_bwd_cl_set(0) or MF_TRANSITION_BWD_CL=0 turns it off.
 * Otherwise (backward configuration 7, where C = 128, Hd % 64 == 0 and the mode
 * is not IDENTITY): per chunk of rows the wgmma kernel of ln_gemm_bwd_wg.cu (x̂, [a | b],
 * dh, [da | db], dx̂ and the LayerNorm backward on chip; x̂, h and [da | db] written in bf16
 * through 16-byte staged stores) and then cuBLAS for dw_o and dw_ab: 2.33 ms at M = 768²
 * (H200, 2026-11-30; the staging path 3.04). Elsewhere (or with
 * mf_ln_gemm_bwd_set_variant(0)): per chunk LN staging + four cuBLAS GEMMs + the SwiGLU
 * and LN row backward kernels, the [a | b] hidden materialised per chunk. Opt-in
 * (mf_ln_gemm_bwd_set_variant(1..3), where mf_ln_gemm_bwd_supported: C 64 or 128,
 * Hd % 64 == 0, mode not IDENTITY): the fused backward kernel of ln_gemm_bwd_cuda.h (x̂,
 * [a | b], dh, [da | db], dx̂ and the LayerNorm backward on chip, the hidden in chunks of
 * 32 or 64; it writes x̂, h and [da | db] in bf16) and then cuBLAS for dw_o and dw_ab —
 * tested, but measured 0.83–0.94× the speed of the default on an H200. */
void mf_transition_backward_cuda(__nv_bfloat16 *dinp, float *dgamma, float *dbeta,
                                 float *dw_ab, float *dw_o, const __nv_bfloat16 *dout,
                                 const float *mean, const float *rstd, const __nv_bfloat16 *inp,
                                 const __nv_bfloat16 *gamma, const __nv_bfloat16 *beta,
                                 const __nv_bfloat16 *w_ab, const __nv_bfloat16 *w_o, int64_t M,
                                 int C, int Hd, mf_ln_mode mode, void *ws, size_t ws_bytes,
                                 const mf_cuda_blas *blas, cudaStream_t stream);

/* The same with dinp ADDED to (dinp += ∂/∂inp) instead of assigned; dinp may equal dout
 * (each chunk of dout is read before the chunk of dinp is written; the fused path then
 * also writes a copy of dout's chunk for dw_o), which is how the Pairformer block applies
 * the residual z += T(z) in its in-place backward. Not for MF_LN_IDENTITY. */
void mf_transition_backward_add_cuda(__nv_bfloat16 *dinp, float *dgamma, float *dbeta,
                                     float *dw_ab, float *dw_o, const __nv_bfloat16 *dout,
                                     const float *mean, const float *rstd,
                                     const __nv_bfloat16 *inp, const __nv_bfloat16 *gamma,
                                     const __nv_bfloat16 *beta, const __nv_bfloat16 *w_ab,
                                     const __nv_bfloat16 *w_o, int64_t M, int C, int Hd,
                                     mf_ln_mode mode, void *ws, size_t ws_bytes,
                                     const mf_cuda_blas *blas, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
