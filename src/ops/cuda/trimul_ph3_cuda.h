/* trimul_ph3_cuda.h — the triangle multiplication backward's third phase (its input side)
 * as one kernel (trimul_ph3_wg.cu, sm_90a, C = Ch = 128): LN_in recomputed, the four gated
 * projections recomputed, their gate backward, dx̂ = dP4·W_cat + dgl·W_g and LN_in's
 * backward, so that dP4 is written once (for the caller's dW GEMMs) and never read back.
 * Private to src/ops/cuda (trimul.cu calls it); not the CPU reference. */
#ifndef MF_OPS_CUDA_TRIMUL_PH3_CUDA_H
#define MF_OPS_CUDA_TRIMUL_PH3_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the kernel takes this shape on the current device: compute capability 9.x,
 * C == Ch == 128, ldm and ldp multiples of 8, every given pointer 16-byte aligned (NULL
 * ones ignored), and the switch below on. */
int mf_trimul_ph3_wg_supported(int C, int Ch, int64_t ldm, int64_t ldp, const void *P,
                               const void *xh, const void *dz, const void *dA, const void *dB,
                               const void *dgl, const void *z, const void *w_cat,
                               const void *w_g);

/* Turns the kernel on (1) or off (0; −1 only reads); returns the previous state. Default
 * on; the environment variable MF_TRIMUL_PH3=0 turns it off at start-up (A/B runs). */
int mf_trimul_ph3_wg_set(int on);

/* How many times the kernel was launched (the tests check the module took this path). */
int64_t mf_trimul_ph3_wg_calls(void);

/* Over `rows` pair rows m (z order, the caller's chunk) with z (rows, C), LN_in's saved
 * statistics mean, rstd (rows), gamma, beta (C), x̂ = LN_in(z) (recomputed),
 * [ap | ag | bp | bg] = x̂·W_catᵀ (w_cat (4Ch, C): W_ap, W_ag, W_bp, W_bg rows), dA, dB
 * (Ch, ldm) channel-major (column m = row m of the chunk), pm (rows) the pair mask or NULL:
 *   P (rows, ldp) columns 0 .. 4Ch − 1 = dP4 = [dap | dag | dbp | dbg],
 *       dap = d ⊙ σ(ag), dag = d ⊙ ap ⊙ σ(ag)(1 − σ(ag)), d = pm ⊙ dA (B likewise);
 *   xh (rows, C) = x̂ (NULL: not stored);
 *   dx̂ = dP4·W_cat + dgl·W_g (dgl (rows, C), w_g (C, C));
 *   dz (rows, C) (+)= LN_in backward of dx̂ (add: added to dz's old values);
 *   part (grid, 2C): per-CTA Σ dx̂⊙x̂n and Σ dx̂, for mf_ln_param_grad_reduce_cuda.
 * Returns the number of part rows written (the grid: at most ⌈rows/128⌉ and the SM count,
 * never more than mf_ln_rows_backward_parts(rows)). Deterministic: every sum has a fixed
 * order. */
int mf_trimul_ph3_wg_cuda(__nv_bfloat16 *P, int64_t ldp, __nv_bfloat16 *xh, __nv_bfloat16 *dz,
                          int add, float *part, const __nv_bfloat16 *dA, const __nv_bfloat16 *dB,
                          int64_t ldm, const __nv_bfloat16 *dgl, const __nv_bfloat16 *z,
                          const float *mean, const float *rstd, const __nv_bfloat16 *gamma,
                          const __nv_bfloat16 *beta, const __nv_bfloat16 *w_cat,
                          const __nv_bfloat16 *w_g, const uint8_t *pm, int64_t rows,
                          cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
