/* ln_linear_cuda.h — EvoFusion's LayerNorm + Linear and gated projection on the GPU
 * (the functions of src/ops/ln_linear.h, which the CPU reference computes), in bf16 with
 * fp32 accumulation and fp32 LayerNorm statistics; and the LayerNorm building blocks
 * (normalise rows into a bf16 staging tile, row backward with deterministic γ/β
 * partials) that transition.cu and trimul.cu share. Not the CPU reference, not a
 * dispatch: callers pass device pointers, a cuBLAS handle and a stream.
 *
 * How it is fused: the forward is by default one persistent mma.sync kernel (ln_gemm.cu;
 * see "forward variants" below) that reads inp once and writes out once. The staging path
 * (its fallback, and the backward) processes rows in chunks of R rows
 * (mf_fusion_chunk_rows), which bound the staging memory: LN of R rows → bf16 staging
 * (R, C) → cuBLAS GEMM → the epilogue (bias add; sigmoid gate ⊙ projection). Only mean and
 * rstd (fp32) are saved. Backward recomputes the normalised rows from (inp, mean, rstd) chunk
 * by chunk, so nothing of size M·C is stored; dγ/dβ come from per-block partials summed in
 * a fixed order (no float atomics: two runs are bit-identical).
 *
 * Types: activations (inp, out, dinp, dout) and compute weights (weight, gamma, beta,
 * bias) bf16; mean, rstd fp32; parameter gradients fp32.
 * Gradient contract (as ln_linear.h): dinp ASSIGNS; dgamma, dbeta, dweight, dbias
 * ACCUMULATE (+=); any gradient pointer may be NULL to skip it.
 * Workspace: each op takes (ws, ws_bytes) of at least its *_workspace() bytes, device
 * memory, 256-byte aligned. */
#ifndef MF_OPS_CUDA_LN_LINEAR_CUDA_H
#define MF_OPS_CUDA_LN_LINEAR_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/cuda/gemm_cuda.h"
#include "ops/layernorm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- chunking */
/* Staging budget of one op call: rows are processed in equal chunks whose staging
 * (normalised rows, GEMM outputs, hidden tiles) fits in this many bytes. Measured on an
 * H200 (dev/cuda/fusion_lab.cu, 2026-11-29): L2-sized chunks (24 MiB) ran 1.6× slower
 * than one materialised pass at M = 384² — the small per-chunk GEMMs (and the weight
 * gradients over short K) cost more than the HBM round trip they avoid — so the budget is
 * large and only bounds the workspace at long crops. */
#define MF_FUSION_STAGING_BYTES ((size_t)512 << 20)
/* Rows per chunk for M rows of `bytes_per_row` staging bytes (equal chunks, a multiple of
 * 256 rows, at most M), or the override. */
int64_t mf_fusion_chunk_rows(int64_t M, size_t bytes_per_row);
/* The same for a budget of `budget` bytes instead of MF_FUSION_STAGING_BYTES. */
int64_t mf_fusion_chunk_rows_in(int64_t M, size_t bytes_per_row, size_t budget);
/* Forces the chunk to `rows` rows (0 = automatic), for tests and the lab; returns the
 * previous override. */
int64_t mf_fusion_set_chunk_rows(int64_t rows);

/* ---------------------------------------------------------------- building blocks */
/* y (rows, C) bf16 = LN(x (rows, C)), mode FULL/SCALE/NONE; gamma, beta (C) bf16.
 * use_saved = 0: statistics computed, written to mean, rstd (rows) when not NULL;
 * use_saved = 1: statistics read from mean, rstd (the backward's recomputation).
 * C <= 1024. */
void mf_ln_rows_cuda(__nv_bfloat16 *y, float *mean, float *rstd, const __nv_bfloat16 *x,
                     const __nv_bfloat16 *gamma, const __nv_bfloat16 *beta, int64_t rows,
                     int C, mf_ln_mode mode, int use_saved, cudaStream_t stream);

/* The row kernels of mf_ln_rows_cuda / mf_ln_rows_backward_cuda (and the staging paths
 * that use them): 1 the vectorised kernels for C = 64, 128, 256 (forward) and
 * C = 64, 128 (backward) with aligned rows, bit-identical to 0, the generic kernels (every
 * C); 2 (default), 3, 4: variant 1 with the forward for C = 64, 128, 256 and 16-byte aligned
 * rows replaced by a half-warp kernel (ln_rows_hw.cuh: C/8 lanes per row, grid-stride rows;
 * 2: loads into registers, streaming stores (0.092 ms against variant 1's 0.137 at M = 768²,
 * C = 128, H200: 87 % of the copy in the same run), 3: through a per-thread cp.async ring in
 * shared memory, 4:
 * through a ring of cp.async.bulk chunks with mbarriers; their sums run in
 * another order, so their statistics may differ from 0/1 in the last bits and y by one
 * bf16 ulp); returns the previous variant (variant < 0 only reads it). For tests, the
 * bench and dev/cuda/ln_bw_lab.cu. */
int mf_ln_rows_cuda_set_variant(int variant);

/* Number of partial rows mf_ln_rows_backward_cuda writes for `rows` rows. */
int mf_ln_rows_backward_parts(int64_t rows);

/* LayerNorm backward over rows: dx (rows, C) bf16 = r·(g − mean(g) − x̂·mean(g⊙x̂)),
 * g = dy⊙γ (dy for NONE), ASSIGNED (accumulate = 0) or ADDED (accumulate = 1);
 * dx may be NULL. part (mf_ln_rows_backward_parts(rows), 2C) fp32 receives per-block
 * partials of Σ dy⊙x̂ (first C) and Σ dy (last C); reduce them with
 * mf_ln_param_grad_reduce_cuda. dy (rows, C) fp32; x (rows, C); mean, rstd (rows). */
void mf_ln_rows_backward_cuda(__nv_bfloat16 *dx, float *part, const float *dy,
                              const __nv_bfloat16 *x, const float *mean, const float *rstd,
                              const __nv_bfloat16 *gamma, int64_t rows, int C, mf_ln_mode mode,
                              int accumulate, cudaStream_t stream);

/* dgamma (C) += Σ_p part[p, 0:C],  dbeta (C) += Σ_p part[p, C:2C], summed in an order that
 * depends only on parts and C (up to 4096 parts: 32 interleaved lanes, then the lanes in
 * order, one launch; beyond: chunks of parts, then the chunks in order), so two runs are
 * bit-identical. Either may be NULL. part is scratch: its contents may be overwritten. */
void mf_ln_param_grad_reduce_cuda(float *dgamma, float *dbeta, float *part, int parts, int C,
                                  cudaStream_t stream);

/* dx (n) bf16 = dy (n) fp32, rounded to nearest: the backward of the IDENTITY "LayerNorm"
 * (the gated projection's and the transition's). */
void mf_f32_to_bf16_cuda(__nv_bfloat16 *dx, const float *dy, int64_t n, cudaStream_t stream);

/* ---------------------------------------------------------------- forward variants */
/* The forwards of LayerNorm + Linear, the gated projection and the transition run as
 *   variant 2: the mma.sync kernels of ln_gemm.cu (ln_gemm_cuda.h) — one
 *             persistent kernel per op: LN of 64-row tiles in registers → bf16 x̂ in shared
 *             memory → GEMM against W resident in shared memory → epilogue (bias; mask ⊙
 *             σ(g) ⊙ p) → 16-byte stores; the transition as ONE kernel with the 4c hidden
 *             chunked through shared memory. Where the shape is outside their limits
 *             (mf_ln_gemm_mma_supported, mf_transition_fused_supported: e.g. O % 16 != 0,
 *             C not in {64, 128, 192, 256} (transition: {64, 128}), W too large for shared
 *             memory, unaligned pointers) variant 1 runs instead.
 *             Measured on an H200 (2026-11-30, bench/evofusion.sh, C = 128, M = 768²):
 *             ln_linear 0.147 ms (variant 1: 0.245), gated O = 128: 0.252 (0.410),
 *             transition Hd = 512: 0.967 (1.278); at M = 384²: 0.048 / 0.079 / 0.259
 *             (0.068 / 0.112 / 0.333).
 *   variant 3 (default): variant 2, with the wgmma kernels (sm_90a) where they apply:
 *             LayerNorm + Linear and the gated projection as ln_gemm_wg.cu (C in {64, 128},
 *             O % 64 == 0, W within shared memory: mf_ln_gemm_wg_supported(); else the
 *             mma.sync kernel), the transition as transition_wg.cu (C = 128:
 *             mf_transition_wg_supported()). Measured on an H200 (2026-11-30,
 *             bench/evofusion, C = 128, M = 768² / 384², variant 2 in brackets): LN +
 *             Linear 0.135 / 0.044 ms (0.151 / 0.048), gated O = 128 0.209 / 0.064
 *             (0.255 / 0.078), transition Hd = 512 0.666 / 0.179 (0.979 / 0.259);
 *   variant 1: LN into a bf16 staging chunk + cuBLAS GEMM + epilogue kernel;
 *   variant 0: the first custom kernel, one per 128-row tile — LN into shared memory,
 *             WMMA tile by tile over W, epilogue; used when C % 64 == 0, C <= 256,
 *             O % 64 == 0, mode is not IDENTITY and the pointers are 16-byte aligned
 *             (else variant 1). Tested, but 1.8–3× slower than variant 1 (ln_linear.cu
 *             says why); kept for comparison only.
 * The backwards do not follow this variant (see the backward functions below). Sets the
 * variant (for the lab, the tests and the benchmark); returns the previous one. */
int mf_ln_linear_cuda_set_variant(int variant);
/* The variant in force. */
int mf_ln_linear_cuda_get_variant(void);

/* The fused kernel as a building block (transition.cu uses epilogue 2):
 *   out (M, O) = epilogue(LN(x (M, C))·Wᵀ), mean, rstd (M) written;
 *   epilogue 0: W (O, C), out = acc + bias (bias (O) or NULL);
 *   epilogue 1: W (2O, C) = [W_p; W_g], out = mask ⊙ σ(g) ⊙ p (mask (M) or NULL);
 *   epilogue 2: W (2O, C) = [W_a; W_b], out = silu(a) ⊙ b (SwiGLU).
 * Only where mf_ln_gemm_fused_supported() (fatal otherwise). The supported() check
 * returns 0 unless mf_ln_linear_cuda_set_variant(0) is in force. */
int mf_ln_gemm_fused_supported(int C, int O, mf_ln_mode mode, const void *x, const void *out,
                               const void *w);
void mf_ln_gemm_fused_cuda(__nv_bfloat16 *out, float *mean, float *rstd, const __nv_bfloat16 *x,
                           const __nv_bfloat16 *gamma, const __nv_bfloat16 *beta,
                           const __nv_bfloat16 *w, const __nv_bfloat16 *bias, const uint8_t *mask,
                           int64_t M, int C, int O, mf_ln_mode mode, int epilogue,
                           cudaStream_t stream);

/* ---------------------------------------------------------------- LayerNorm + Linear */
size_t mf_ln_linear_cuda_workspace(int64_t M, int C, int O, int has_bias);

/* out (M, O) = LN(inp (M, C))·weight (O, C)ᵀ + bias (O) [bias may be NULL];
 * mean, rstd (M) saved. mode FULL, SCALE or NONE. */
void mf_ln_linear_forward_cuda(__nv_bfloat16 *out, float *mean, float *rstd,
                               const __nv_bfloat16 *inp, const __nv_bfloat16 *gamma,
                               const __nv_bfloat16 *beta, const __nv_bfloat16 *weight,
                               const __nv_bfloat16 *bias, int64_t M, int C, int O,
                               mf_ln_mode mode, void *ws, size_t ws_bytes,
                               const mf_cuda_blas *blas, cudaStream_t stream);

/* dinp (M, C); dgamma, dbeta (C), dweight (O, C), dbias (O) fp32 (+=);
 * dout (M, O); mean, rstd (M) from the forward.
 * By default (backward configuration 7) and where mf_ln_linear_bwd_wg_supported (C 128, O 64
 * or 128) the whole backward runs as one wgmma kernel (ln_linear_bwd_wg.cu: 0.381 ms at M =
 * 768², staging 0.530; H200, 2026-11-30); elsewhere LN staging + cuBLAS + the LN row
 * backward per chunk (mf_ln_gemm_bwd_set_variant(0) forces it); with
 * mf_ln_gemm_bwd_set_variant(1..3) and where mf_ln_gemm_bwd_supported (C 64 or 128,
 * O % 64 == 0, O <= 256, dinp or dγ/dβ wanted) instead the fused mma.sync backward kernel
 * of ln_gemm_bwd_cuda.h plus cuBLAS for dweight += doutᵀ·y and dbias — measured slower on
 * an H200, hence opt-in. */
void mf_ln_linear_backward_cuda(__nv_bfloat16 *dinp, float *dgamma, float *dbeta,
                                float *dweight, float *dbias, const __nv_bfloat16 *dout,
                                const float *mean, const float *rstd, const __nv_bfloat16 *inp,
                                const __nv_bfloat16 *gamma, const __nv_bfloat16 *beta,
                                const __nv_bfloat16 *weight, int64_t M, int C, int O,
                                mf_ln_mode mode, void *ws, size_t ws_bytes,
                                const mf_cuda_blas *blas, cudaStream_t stream);

/* ---------------------------------------------------------------- gated projection */
/* out = mask ⊙ sigmoid(y·W_gᵀ) ⊙ (y·W_pᵀ), y = LN(inp) (or inp itself for
 * MF_LN_IDENTITY), as ONE GEMM against the concatenated weight w_pg (2O, C) whose rows
 * 0..O−1 are W_p and O..2O−1 are W_g, with the gate in the epilogue. */
size_t mf_gated_linear_cuda_workspace(int64_t M, int C, int O);

/* out (M, O); mean, rstd (M) (unused for IDENTITY); inp (M, C); gamma, beta (C);
 * w_pg (2O, C); mask (M) uint8 (1 = keep) or NULL. */
void mf_gated_linear_forward_cuda(__nv_bfloat16 *out, float *mean, float *rstd,
                                  const __nv_bfloat16 *inp, const __nv_bfloat16 *gamma,
                                  const __nv_bfloat16 *beta, const __nv_bfloat16 *w_pg,
                                  const uint8_t *mask, int64_t M, int C, int O, mf_ln_mode mode,
                                  void *ws, size_t ws_bytes, const mf_cuda_blas *blas,
                                  cudaStream_t stream);

/* Recomputes y and the GEMM chunk by chunk: d(p) = dout⊙mask⊙s, d(gate logit) =
 * dout⊙mask⊙p⊙s(1−s) → dw_pg (2O, C) += [dp | dg]ᵀ·y (one GEMM), dy = [dp | dg]·w_pg
 * (one GEMM), then the LayerNorm backward. dinp (M, C) ASSIGN; dgamma, dbeta (C) +=.
 * Default (backward configuration 7, where C = 128, O % 64 == 0, O <= 256, not IDENTITY):
 * the wgmma kernel of ln_gemm_bwd_wg.cu ([p | g], [dp | dg], dy and the LN backward on
 * chip; y and [dp | dg] written for the dw_pg GEMM, cuBLAS): 0.734 ms at M = 768², O = 128
 * (H200, 2026-11-30; staging 0.925). Elsewhere: LN staging + cuBLAS + the elementwise and
 * LN row backward kernels. Opt-in
 * (mf_ln_gemm_bwd_set_variant(1..3), where mf_ln_gemm_bwd_supported: C 64 or 128,
 * O % 64 == 0, O <= 256, not IDENTITY): the fused backward kernel of ln_gemm_bwd_cuda.h
 * ([p | g], [dp | dg], dy and the LN backward on chip; it writes y and [dp | dg] for the
 * dw_pg GEMM, cuBLAS) — measured slower on an H200. */
void mf_gated_linear_backward_cuda(__nv_bfloat16 *dinp, float *dgamma, float *dbeta,
                                   float *dw_pg, const __nv_bfloat16 *dout, const float *mean,
                                   const float *rstd, const __nv_bfloat16 *inp,
                                   const __nv_bfloat16 *gamma, const __nv_bfloat16 *beta,
                                   const __nv_bfloat16 *w_pg, const uint8_t *mask, int64_t M,
                                   int C, int O, mf_ln_mode mode, void *ws, size_t ws_bytes,
                                   const mf_cuda_blas *blas, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
