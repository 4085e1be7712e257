/* trimul_ph1_cuda.h — the triangle multiplication backward's first phase (its output side)
 * as one kernel (trimul_ph1_wg.cu, sm_90a, C = Ch = 128): LN_out recomputed, the output
 * projection, the gate backward, dW_z, dy = du·W_z and LN_out's backward, so that only
 * dgl and dT leave the chip. Private to src/ops/cuda (trimul.cu calls it); not the CPU
 * reference. */
#ifndef MF_OPS_CUDA_TRIMUL_PH1_CUDA_H
#define MF_OPS_CUDA_TRIMUL_PH1_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the kernel takes this shape on the current device: compute capability 9.x,
 * C == Ch == 128, ldm and m_base multiples of 8, every given pointer 16-byte aligned (NULL
 * ones ignored), and the switch below on. */
int mf_trimul_ph1_wg_supported(int C, int Ch, int64_t ldm, int64_t m_base, const void *dgl,
                               const void *dT, const void *T, const void *dout,
                               const void *glb, const void *w_z, const void *mask);

/* Turns the kernel on (1) or off (0; −1 only reads); returns the previous state. Default
 * on; the environment variable MF_TRIMUL_PH1=0 turns it off at start-up (A/B runs). */
int mf_trimul_ph1_wg_set(int on);

/* Bytes of the dW_z partial sums (one 128 × 128 fp32 block per CTA of the grid). */
size_t mf_trimul_ph1_wg_part_bytes(void);

/* How many times the kernel was launched (the tests check the module took this path). */
int64_t mf_trimul_ph1_wg_calls(void);

/* Over the pair rows m in [m_base, m_base + rows) (z order) of M = N²: with T (Ch, ldm)
 * channel-major (the triangular contraction's output), its LN_out statistics mean, rstd
 * (M), gamma, beta (Ch), y = LN_out(T), u = y·w_zᵀ (w_z (C, Ch)), s = σ(glb) (glb: the
 * gate logits, local rows (rows, C)), dd = dout ⊙ mask (mask (N, C) fp32 indexed by b of
 * m = a·N + b for MF_DROPOUT_ROWWISE, a for COLWISE; NULL: dd = dout):
 *   dgl (M, C) = dd ⊙ u ⊙ s(1 − s)   (rows m)
 *   du = dd ⊙ s;  dw_z (C, Ch) fp32 += duᵀ·y (NULL: skipped; part_w:
 *        mf_trimul_ph1_wg_part_bytes() bytes)
 *   dy = du·w_z;  dT (Ch, ldm) columns m = LN_out backward of dy (channel-major)
 *   part_ln (grid, 2Ch): per-CTA Σ dy⊙x̂ and Σ dy, for mf_ln_param_grad_reduce_cuda.
 * Returns the number of part_ln rows written (the grid, at most ⌈rows/64⌉ and the SM
 * count). Deterministic: every sum has a fixed order. */
int mf_trimul_ph1_wg_cuda(__nv_bfloat16 *dgl, __nv_bfloat16 *dT, float *dw_z, float *part_w,
                          float *part_ln, const __nv_bfloat16 *T, int64_t ldm, const float *mean,
                          const float *rstd, const __nv_bfloat16 *gamma,
                          const __nv_bfloat16 *beta, const __nv_bfloat16 *w_z,
                          const __nv_bfloat16 *dout, const __nv_bfloat16 *glb,
                          const float *mask, int axis, int N, int64_t m_base, int64_t rows,
                          cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
