/* ln_gemm_bwd_cuda.h — the fused backward kernel of EvoFusion's LayerNorm + GEMM ops
 * (LayerNorm + Linear, the gated projection, the SwiGLU transition) on sm_90a: one
 * persistent kernel (mma.sync bf16 tensor cores, fp32 accumulation) that, per tile of
 * 128 rows, recomputes the normalised rows y = LN(inp) from (inp, mean, rstd) into shared
 * memory, streams the weights through shared memory in chunks of 64 output (or hidden)
 * channels, forms the gradient of the GEMM output on chip, accumulates dy = d(out)·W in
 * registers and finishes the LayerNorm backward in the same kernel (dinp, and per-CTA
 * partials of dγ / dβ). It writes only what the weight gradients need (y, and for the
 * gated projection [dp | dg], for the transition h and [da | db], all bf16); the weight
 * gradients themselves stay cuBLAS GEMMs in the callers (ln_linear.cu, transition.cu:
 * deterministic, no split-K atomics). Not a forward, not a dispatch: the callers decide
 * when it runs (mf_ln_gemm_bwd_supported) and fall back to LN staging + cuBLAS otherwise.
 *
 * Kinds (what "out" and the chunked width O are):
 *   MF_LGB_LINEAR: out (rows, O) = y·W (O, C)ᵀ;             d(out) = dout (rows, O).
 *   MF_LGB_GATED:  [p | g] = y·w_pg (2O, C)ᵀ, out = mask⊙σ(g)⊙p; writes s1 = [dp | dg]
 *                  (rows, 2O) and uses it for dy = [dp | dg]·w_pg.
 *   MF_LGB_SWIGLU: [a | b] = y·w_ab (2O, C)ᵀ, h = silu(a)⊙b, out = h·w_o (C, O)ᵀ, O = Hd;
 *                  dh = dout (rows, C)·w_o computed on chip; writes s1 = [da | db]
 *                  (rows, 2O) and s2 = h (rows, O).
 * Determinism: the grid and each CTA's tiles depend only on (rows, SM count); dγ/dβ
 * partials are summed in a fixed order (warps, then the CTA's tiles); no atomics.
 * Numerics: y, [dp | dg], [da | db], h are rounded to bf16 where the cuBLAS path rounded
 * them; a, b, p, g, dh stay fp32 on chip (the staging path rounded them to bf16).
 * Status: tested (tests/gpu/test_fusion_gpu.cu, every configuration) but measured 0.72–
 * 0.94× the speed of the staging + cuBLAS backward on an H200 (ln_gemm_bwd.cu has the
 * numbers), so the ops do NOT use it by default: mf_ln_gemm_bwd_set_variant(1..3) opts in.
 * Configuration 7 (the wgmma kernels, sm_90a) is the default for all three kinds.
 * The light kernel (configurations 4..6; SWIGLU only; slower than staging but for 6): the same kernel
 * without dy and the LayerNorm backward (a compile-time flag: no dy registers, no
 * reduction buffer, ~40 % fewer FLOPs); it writes y, [da | db] and h, and the caller runs
 * dx̂ = [da | db]·w_ab (cuBLAS, fp32) and the LayerNorm row backward as the staging path
 * does (mf_ln_gemm_bwd_light tells the caller which it has). */
#ifndef MF_OPS_CUDA_LN_GEMM_BWD_CUDA_H
#define MF_OPS_CUDA_LN_GEMM_BWD_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/layernorm.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { MF_LGB_LINEAR = 0, MF_LGB_GATED = 1, MF_LGB_SWIGLU = 2 };

/* What the ops' backwards run where the fused kernel supports the shape, for all three
 * kinds (for the tests, the lab and the benchmark): 0 LN staging + cuBLAS (the kernel
 * off); 1..3 the fused kernel in one of its configurations — 1: 8 warps over 128-row
 * tiles, weight chunks of 64, one CTA per SM; 2: 4 warps over 64-row tiles, chunks of 32
 * (64 for LINEAR), fast sigmoid (__expf, __fdividef), 2–3 CTAs per SM; 3: 8 warps,
 * chunks of 32, fast sigmoid; 4..6 the light kernel (SWIGLU only: LINEAR and GATED run
 * staging + cuBLAS) — 4: 8 warps over 128-row tiles, chunks of 64, fast sigmoid, one CTA
 * per SM; 5: 4 warps over 64-row tiles, chunks of 32, fast sigmoid, two CTAs per SM;
 * 6: 8 warps of 32 rows each over 256-row tiles, chunks of 32, fast sigmoid, one CTA per SM;
 * 7: the wgmma kernels (sm_90a, C = 128): LINEAR (O = 64 or 128) — the whole LayerNorm +
 * Linear backward, dy, dinp, dγ/dβ, dW and dbias, in ln_linear_bwd_wg.cu
 * (mf_ln_linear_bwd_wg_*); GATED (O % 64 == 0, O <= 256) and SWIGLU (Hd % 64 == 0) in
 * ln_gemm_bwd_wg.cu with this function's contract (mf_ln_gemm_bwd_wg_*); other shapes run
 * staging + cuBLAS under it;
 * −1: each kind's default (ln_gemm_bwd.cu, LGB_DEFAULTS: the fastest measured, at present
 * 7 for all three: 1.3–1.4× staging at M = 768²). Returns the previous variant of LINEAR. */
int mf_ln_gemm_bwd_set_variant(int variant);

/* Whether the fused kernel takes this shape: one of its configurations (1..3; 4..6 for
 * SWIGLU; never under 7) in force for this kind, C 64 or 128, O % 64 == 0
 * (O <= 256 for LINEAR / GATED), mode FULL/SCALE/NONE, the given pointers 16-byte aligned
 * (NULL ones ignored). */
int mf_ln_gemm_bwd_supported(int kind, int C, int O, mf_ln_mode mode, const void *p0,
                             const void *p1, const void *p2, const void *p3);

/* Whether configuration 7 (the wgmma LayerNorm + Linear backward) is in force for kind. */
int mf_ln_gemm_bwd_wg(int kind);

/* The configuration in force for kind (0 .. 7; 0 for an unknown kind). */
int mf_ln_gemm_bwd_config(int kind);

/* Configuration 7's kernel (ln_linear_bwd_wg.cu): whether it takes the shape (C == 128,
 * O 64 or 128, mode FULL/SCALE/NONE, the given pointers 16-byte aligned, NULL ignored);
 * the bytes of fp32 partials it needs (0 for shapes it does not take); and the backward
 * itself: dinp (M, C) ASSIGNED; dgamma, dbeta (C), dweight (O, C), dbias (O) fp32 +=
 * (each may be NULL: skipped; dgamma ignored for NONE, dbeta unless FULL); part (at least
 * mf_ln_linear_bwd_wg_workspace bytes) scratch; dout (M, O); mean, rstd (M) saved by the
 * forward; inp (M, C); gamma, beta (C); weight (O, C). Deterministic (no atomics). */
int mf_ln_linear_bwd_wg_supported(int C, int O, mf_ln_mode mode, const void *inp,
                                  const void *dout, const void *w, const void *dinp);
size_t mf_ln_linear_bwd_wg_workspace(int C, int O);
/* How many times mf_ln_linear_bwd_wg_cuda launched its kernel (the tests check that the op
 * took this path). */
int64_t mf_ln_linear_bwd_wg_calls(void);
void mf_ln_linear_bwd_wg_cuda(__nv_bfloat16 *dinp, float *dgamma, float *dbeta, float *dweight,
                              float *dbias, float *part, size_t part_bytes,
                              const __nv_bfloat16 *dout, const float *mean, const float *rstd,
                              const __nv_bfloat16 *inp, const __nv_bfloat16 *gamma,
                              const __nv_bfloat16 *beta, const __nv_bfloat16 *weight, int64_t M,
                              int C, int O, mf_ln_mode mode, cudaStream_t stream);

/* Whether the configuration in force for this kind is a light one (4..6): then the kernel
 * forms no dy, the caller passes dinp = part = NULL, keeps s1 for its own dx̂ = s1·w and
 * runs the LayerNorm backward itself. */
int mf_ln_gemm_bwd_light(int kind);

/* Upper bound of the partial rows the kernel writes for `rows` rows (its grid). */
int mf_ln_gemm_bwd_parts(int64_t rows);

/* The kernel over `rows` rows (see the kinds above). dinp (rows, C) bf16 ASSIGNED
 * (add = 1: ADDED; dinp may equal dout for SWIGLU, whose dout width is C), or NULL;
 * part (mf_ln_gemm_bwd_parts(rows), 2C) fp32 receives per-CTA Σ dy⊙x̂ (first C) and
 * Σ dy (last C), or NULL (then, with dinp NULL too, dy is not formed); y (rows, C) bf16
 * written when not NULL; s1, s2 as per kind, each may be NULL; dcopy (rows, C) (SWIGLU
 * only, 16-byte aligned) receives a copy of dout when not NULL — for the caller's
 * dW_o GEMM when dinp overwrites dout in place. dout (rows, O) (LINEAR,
 * GATED) or (rows, C) (SWIGLU); mean, rstd (rows); inp (rows, C); gamma, beta (C);
 * w (O, C) (LINEAR) or (2O, C); w_o (C, O) (SWIGLU); mask (rows) or NULL (GATED).
 * y, s1, s2 and dcopy must be 16-byte aligned (asserted), dinp 4-byte aligned.
 * Under a light configuration (mf_ln_gemm_bwd_light) with dinp and part NULL the light
 * kernel runs; with either given, configuration 2 (for 5) or 3 (for 4, 6) runs instead.
 * Returns the number of partial rows written (pass it to mf_ln_param_grad_reduce_cuda). */
int mf_ln_gemm_bwd_cuda(int kind, __nv_bfloat16 *dinp, int add, float *part, __nv_bfloat16 *y,
                        __nv_bfloat16 *s1, __nv_bfloat16 *s2, __nv_bfloat16 *dcopy,
                        const __nv_bfloat16 *dout,
                        const float *mean, const float *rstd, const __nv_bfloat16 *inp,
                        const __nv_bfloat16 *gamma, const __nv_bfloat16 *beta,
                        const __nv_bfloat16 *w, const __nv_bfloat16 *w_o, const uint8_t *mask,
                        int64_t rows, int C, int O, mf_ln_mode mode, cudaStream_t stream);

/* Configuration 7's GATED / SWIGLU kernel (ln_gemm_bwd_wg.cu): the contract of
 * mf_ln_gemm_bwd_cuda above at C = 128, O % 64 == 0 (GATED: O <= 256), modes
 * FULL/SCALE/NONE; returns the partial rows written (at most the SM count). */
int mf_ln_gemm_bwd_wg_supported(int kind, int C, int O, mf_ln_mode mode);
int mf_ln_gemm_bwd_wg_cuda(int kind, __nv_bfloat16 *dinp, int add, float *part, __nv_bfloat16 *y,
                           __nv_bfloat16 *s1, __nv_bfloat16 *s2, __nv_bfloat16 *dcopy,
                           const __nv_bfloat16 *dout, const float *mean, const float *rstd,
                           const __nv_bfloat16 *inp, const __nv_bfloat16 *gamma,
                           const __nv_bfloat16 *beta, const __nv_bfloat16 *w,
                           const __nv_bfloat16 *w_o, const uint8_t *mask, int64_t rows, int C,
                           int O, mf_ln_mode mode, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
