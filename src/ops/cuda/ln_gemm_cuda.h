/* ln_gemm_cuda.h — EvoFusion's fast fused FORWARD kernels on sm_90 (mma.sync tensor cores;
 * the wgmma (sm_90a) versions mf_ln_gemm_wg_cuda and mf_transition_wg_forward_cuda at the
 * end, same ops, ln_gemm_wg.cu / transition_wg.cu):
 *
 *   mf_ln_gemm_mma_cuda: LayerNorm + Linear with an epilogue, one persistent kernel:
 *     out (M, O) = epilogue(LN(x (M, C))·Wᵀ), mean, rstd (M) fp32 written (not for IDENTITY);
 *     epilogue 0: W (O, C), out = acc + bias (bias (O) bf16 or NULL);
 *     epilogue 1: W (2O, C) = [W_p; W_g], out = mask ⊙ σ(g) ⊙ p (mask (M) uint8 or NULL);
 *     epilogue 2: W (2O, C) = [W_a; W_b], out = silu(a) ⊙ b (SwiGLU).
 *   mf_transition_fused_forward_cuda: the whole SwiGLU transition, one persistent kernel:
 *     out (M, C) (+)= (silu(x̂·W_aᵀ) ⊙ (x̂·W_bᵀ))·W_oᵀ, x̂ = LN(inp (M, C)); the 4c hidden
 *     lives in registers / shared memory 64 channels at a time and never touches HBM.
 *
 * How they run: one CTA of 8 warps per SM loops over row tiles (persistent grid). Each tile's raw rows
 * arrive by cp.async into shared memory one or two tiles ahead; LN runs from there (fp32
 * statistics, two-pass variance, one warp per row) into a padded bf16 x̂ tile; the GEMMs are
 * mma.sync m16n8k16 (bf16 in, fp32 accumulate) fed by ldmatrix from padded (conflict-free)
 * shared memory; the epilogue runs on the accumulators in registers and each warp writes
 * its block of out through shared memory as 16-byte coalesced stores. ln_gemm keeps the
 * whole W resident in shared memory; the transition streams [W_a; W_b] and W_o 64 hidden
 * channels at a time from L2 (cp.async, double buffered), accumulating out in registers.
 * With accumulate = 1 the transition adds the previous contents of out (read per tile
 * before that tile is written, so out may equal inp).
 *
 * Limits (the *_supported() checks; callers fall back to the staging + cuBLAS path
 * otherwise): ln_gemm: C in {64, 128, 192, 256}, O % 16 == 0, W fits in shared memory next
 * to the tiles (C = 128: O ≤ 336 plain and ≤ 192 gated with double-buffered row tiles,
 * ≤ 464 and ≤ 256 single-buffered; 227 KiB of shared memory per block, as on sm_90),
 * 16-byte aligned pointers. transition: C in {64, 128}, Hd % 64 == 0, Hd ≥ 128, 16-byte
 * aligned pointers. Modes FULL/SCALE/NONE and IDENTITY (x̂ = x; mean, rstd untouched and
 * may be NULL). Deterministic (no atomics; fixed reduction order). Not the CPU reference,
 * not a dispatch: ln_linear.cu and transition.cu choose (mf_ln_linear_cuda_set_variant).
 *
 * ln_gemm runs its 8 warps as 2 independent groups of 4 (64-row tiles, named barriers, W
 * shared), so that one group's LayerNorm overlaps the other's GEMM (MF_LN_GEMM_HALVES=1 in
 * the environment: one group of 8 on 128-row tiles; 6–10 % slower at M = 768²).
 * Measured on an H200 (2026-11-30, bench/evofusion.sh, C = 128, M = 768², against the
 * staging + cuBLAS path in the same run): LN + Linear O = 128 0.147 ms (0.245; 2.0 TB/s,
 * 48 % of the copy bandwidth), gated O = 128 0.252 ms (0.410), transition Hd = 512
 * 0.967 ms (1.278; 240 TFLOP/s). ncu (fusion_lab 384): both are latency-bound at 8 warps
 * per SM — the transition issues 0.35 instructions per cycle per scheduler with 0.5
 * eligible warps (35 % SM throughput); wgmma (sm_90a) with a producer warp would be the
 * next step. A first version with fully unrolled k loops and IEEE divisions in the
 * epilogues ran 2–3× slower (0.295 / 0.522 / 1.59 ms). */
#ifndef MF_OPS_CUDA_LN_GEMM_CUDA_H
#define MF_OPS_CUDA_LN_GEMM_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/layernorm.h"

#ifdef __cplusplus
extern "C" {
#endif

int mf_ln_gemm_mma_supported(int C, int O, int epilogue, mf_ln_mode mode, const void *x,
                             const void *out, const void *w);
/* out (M, O); mean, rstd (M); x (M, C); gamma, beta (C); w (O, C) or (2O, C); bias (O);
 * mask (M). */
void mf_ln_gemm_mma_cuda(__nv_bfloat16 *out, float *mean, float *rstd, const __nv_bfloat16 *x,
                         const __nv_bfloat16 *gamma, const __nv_bfloat16 *beta,
                         const __nv_bfloat16 *w, const __nv_bfloat16 *bias, const uint8_t *mask,
                         int64_t M, int C, int O, mf_ln_mode mode, int epilogue,
                         cudaStream_t stream);

/* The same LayerNorm + Linear + epilogue as one wgmma kernel (ln_gemm_wg.cu, sm_90a):
 * C in {64, 128}, O % 64 == 0, W and two raw row buffers within shared memory (C = 128:
 * O <= 384 plain, <= 192 gated / SwiGLU), 16-byte aligned pointers; same arguments,
 * epilogues and NULL conventions (bias, mask; mean/rstd unused for IDENTITY). */
int mf_ln_gemm_wg_supported(int C, int O, int epilogue, mf_ln_mode mode, const void *x,
                            const void *out, const void *w);
void mf_ln_gemm_wg_cuda(__nv_bfloat16 *out, float *mean, float *rstd, const __nv_bfloat16 *x,
                        const __nv_bfloat16 *gamma, const __nv_bfloat16 *beta,
                        const __nv_bfloat16 *w, const __nv_bfloat16 *bias, const uint8_t *mask,
                        int64_t M, int C, int O, mf_ln_mode mode, int epilogue,
                        cudaStream_t stream);
/* The same with a channel-major out (O, ldm): element (m, o) at o·ldm + m, ldm >= M and a
 * multiple of 8 (rows M .. ldm − 1 of each plane untouched); epilogues 1 and 3 only. Both
 * entry points also take epilogue 3: out = σ(x̂·Wᵀ) (W (O, C), no bias). */
void mf_ln_gemm_wg_cm_cuda(__nv_bfloat16 *out, int64_t ldm, float *mean, float *rstd,
                           const __nv_bfloat16 *x, const __nv_bfloat16 *gamma,
                           const __nv_bfloat16 *beta, const __nv_bfloat16 *w,
                           const __nv_bfloat16 *bias, const uint8_t *mask, int64_t M, int C,
                           int O, mf_ln_mode mode, int epilogue, cudaStream_t stream);
/* The gated projection's backward with its forward recomputed (epilogue 4; C = 128,
 * O <= 192; ln_gemm_wg.cu): p | g = x̂·[W_p; W_g]ᵀ (w (2O, C)), d = mask ⊙ dcm with dcm
 * (O, ldm) channel-major (ldm >= M, a multiple of 8), out (M, ldo) rows = [d ⊙ σ(g) |
 * d ⊙ p ⊙ σ(g)(1 − σ(g))] (ldo >= 2O, a multiple of 8); mean, rstd written unless NULL.
 * xhat (M, C), unless NULL: x̂ = LN(x) stored as well where the kernel stores by TMA (the
 * caller's dW GEMMs then need no LayerNorm pass of their own); returns 1 when x̂ was
 * stored (trivially for M = 0), else 0. */
int mf_ln_gemm_wg_gated_bwd_cuda(__nv_bfloat16 *out, int64_t ldo, __nv_bfloat16 *xhat,
                                 const __nv_bfloat16 *dcm, int64_t ldm, float *mean, float *rstd,
                                 const __nv_bfloat16 *x, const __nv_bfloat16 *gamma,
                                 const __nv_bfloat16 *beta, const __nv_bfloat16 *w,
                                 const uint8_t *mask, int64_t M, int C, int O, mf_ln_mode mode,
                                 cudaStream_t stream);
/* The plain epilogue (0) into the first columns of a wider row-major matrix: out (M, ldo),
 * of the O computed columns (w (O, C)) only columns 0 .. ncols − 1 stored (ncols <= O and
 * ldo, multiples of 8; out 16-byte aligned); the rest of each row untouched. (The triangle
 * attention writes its 520-column projection P in two such calls.) */
void mf_ln_gemm_wg_ld_cuda(__nv_bfloat16 *out, int64_t ldo, int ncols, float *mean, float *rstd,
                           const __nv_bfloat16 *x, const __nv_bfloat16 *gamma,
                           const __nv_bfloat16 *beta, const __nv_bfloat16 *w,
                           const __nv_bfloat16 *bias, int64_t M, int C, int O, mf_ln_mode mode,
                           cudaStream_t stream);
/* Warpgroups per CTA of mf_ln_gemm_wg_cuda's plain (epilogue 0) kernel: 3 (the default)
 * where shared memory holds them, or 2 (the lab's A/B; both give the same results bit for
 * bit). Returns the previous setting. */
int mf_ln_gemm_wg_set_nwg(int nwg);

/* The triangle multiplication's output side, forward, as one wgmma kernel
 * (out_proj_wg.cu, sm_90a; C = Ch = 128, ldm % 8 == 0, ldm >= N², out, T, sg, w 16-byte
 * and mask 8-byte aligned): out (M, C) = sg ⊙ (LN(T)·wᵀ), or with mask (N, C) fp32
 * out = res + mask[b or a] ⊙ sg ⊙ (LN(T)·wᵀ) (axis MF_DROPOUT_ROWWISE: row b of m = a·N + b,
 * else a; res (M, C) NULL: out itself, +=); T (Ch, ldm) channel-major, sg (M, C), w (C, Ch),
 * gamma, beta (Ch) of the full LayerNorm; mean, rstd (M) written. */
int mf_trimul_out_wg_supported(int C, int Ch, int64_t ldm, const void *out, const void *T,
                               const void *sg, const void *w, const void *mask);
void mf_trimul_out_wg_cuda(__nv_bfloat16 *out, float *mean, float *rstd, const __nv_bfloat16 *T,
                           int64_t ldm, const __nv_bfloat16 *gamma, const __nv_bfloat16 *beta,
                           const __nv_bfloat16 *w, const __nv_bfloat16 *sg, const float *mask,
                           const __nv_bfloat16 *res, int axis, int N, int C, int Ch,
                           cudaStream_t stream);
/* How many times mf_trimul_out_wg_cuda launched its kernel. */
int64_t mf_trimul_out_wg_calls(void);
/* The backward's first step on rows [m_base, m_base + rows) (a chunk; m_base % 8 == 0),
 * the same kernel with the saved statistics (out_proj_wg.cu): y = LN(T) rows, u = y·wᵀ,
 * dd = dout (⊙ mask), s = σ(glb) ⇒ du = dd·s, dgl = dd·u·s(1 − s); y (Ch, ldy)
 * channel-major (ldy % 8 == 0, ldy >= rows rounded up to 8), du and glb (rows, C), all
 * three local to the chunk; dout and dgl (M, C), mean and rstd (M) read. */
int mf_trimul_out_bwd_wg_supported(int C, int Ch, int64_t ldm, int64_t m_base, const void *du,
                                   const void *dgl, const void *y, const void *T,
                                   const void *dout, const void *glb, const void *w,
                                   const void *mask);
void mf_trimul_out_bwd_wg_cuda(__nv_bfloat16 *du, __nv_bfloat16 *dgl, __nv_bfloat16 *y,
                               int64_t ldy, const float *mean, const float *rstd, const __nv_bfloat16 *T,
                               int64_t ldm, const __nv_bfloat16 *gamma,
                               const __nv_bfloat16 *beta, const __nv_bfloat16 *w,
                               const __nv_bfloat16 *dout, const __nv_bfloat16 *glb,
                               const float *mask, int axis, int N, int64_t m_base, int64_t rows,
                               int C, int Ch, cudaStream_t stream);
int64_t mf_trimul_out_bwd_wg_calls(void);
/* The same kernel without the LayerNorm and the gate (out_proj_wg.cu; the triangle
 * attention's output projection): out (M, C) = o·wᵀ, or with mask (N, C) out = res +
 * mask[b or a] ⊙ (o·wᵀ) (res NULL: out itself, +=); o (M, K) row-major, w (C, K), M = N²;
 * K = C = 128, out, o, w, res 16-byte and mask 8-byte aligned. */
int mf_out_proj_wg_supported(int K, int C, const void *out, const void *o, const void *w,
                             const void *mask);
void mf_out_proj_wg_cuda(__nv_bfloat16 *out, const __nv_bfloat16 *o, const __nv_bfloat16 *w,
                         const float *mask, const __nv_bfloat16 *res, int axis, int N, int K, int C,
                         cudaStream_t stream);
int64_t mf_out_proj_wg_calls(void);

int mf_transition_fused_supported(int C, int Hd, mf_ln_mode mode, const void *inp,
                                  const void *out, const void *w_ab, const void *w_o);
/* out (M, C), may equal inp; mean, rstd (M); inp (M, C); gamma, beta (C); w_ab (2Hd, C) =
 * [W_a; W_b]; w_o (C, Hd). accumulate = 1: out += transition(inp). */
void mf_transition_fused_forward_cuda(__nv_bfloat16 *out, float *mean, float *rstd,
                                      const __nv_bfloat16 *inp, const __nv_bfloat16 *gamma,
                                      const __nv_bfloat16 *beta, const __nv_bfloat16 *w_ab,
                                      const __nv_bfloat16 *w_o, int64_t M, int C, int Hd,
                                      mf_ln_mode mode, int accumulate, cudaStream_t stream);

/* The same transition as one wgmma kernel (transition_wg.cu, sm_90a): C = 128,
 * Hd % 64 == 0, Hd >= 128, 16-byte aligned pointers; out = res + transition(inp) where
 * res (M, C) is not NULL (it may be out or inp; 16-byte aligned), else out = transition(inp);
 * out2 (M, C), unless NULL (16-byte aligned, overlapping nothing), gets the same rows. */
int mf_transition_wg_supported(int C, int Hd, mf_ln_mode mode, const void *inp, const void *out,
                               const void *w_ab, const void *w_o);
void mf_transition_wg_forward_cuda(__nv_bfloat16 *out, float *mean, float *rstd,
                                   const __nv_bfloat16 *inp, const __nv_bfloat16 *gamma,
                                   const __nv_bfloat16 *beta, const __nv_bfloat16 *w_ab,
                                   const __nv_bfloat16 *w_o, int64_t M, int C, int Hd,
                                   mf_ln_mode mode, const __nv_bfloat16 *res,
                                   __nv_bfloat16 *out2, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
