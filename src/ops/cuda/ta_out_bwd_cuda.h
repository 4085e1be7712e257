/* ta_out_bwd_cuda.h — the triangle attention's output side, backward, as one kernel
 * (ta_out_bwd_wg.cu, sm_90a, C = H·D = 128 with D = 32): the residual's dropout on dout, the
 * output projection's two products and the attention backward's prologue (the gated dO,
 * the gate's gradient, the side rows), so that dout, o and the gate are read once. Private
 * to src/ops/cuda (triatt.cu calls it); not the CPU reference. */
#ifndef MF_OPS_CUDA_TA_OUT_BWD_CUDA_H
#define MF_OPS_CUDA_TA_OUT_BWD_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the kernel takes this shape on the current device: compute capability 9.x,
 * C == 128, H == 4, D == 32, ldg a multiple of 8, every given pointer 16-byte aligned (NULL
 * ones ignored), and the switch below on. */
int mf_ta_out_bwd_wg_supported(int C, int H, int D, int64_t ldg, const void *dOe,
                               const void *dg, const void *dout, const void *o,
                               const void *g, const void *w_o);

/* Turns the kernel on (1) or off (0; −1 only reads); returns the previous state. Default
 * on; the environment variable MF_TA_OUT_BWD=0 turns it off at start-up (A/B runs). */
int mf_ta_out_bwd_wg_set(int on);

/* Bytes of the dW_o partial sums (one 128 × 128 fp32 block per CTA of the grid). */
size_t mf_ta_out_bwd_wg_part_bytes(void);

/* How many times the kernel was launched (the tests check the module took this path). */
int64_t mf_ta_out_bwd_wg_calls(void);

/* Over the M = N² pair rows m = a·N + b (z order), with the attention problem's row
 * r = a, query q = b (starting node) or r = b, q = a (ending node):
 *   dd  = dout ⊙ mask[b or a] (mask (N, 128) fp32 indexed by b for MF_DROPOUT_ROWWISE, a
 *         for COLWISE; NULL: dd = dout), dO = dd·w_o (w_o (128, 128) = (C, HD)),
 *   dw_o (C, HD) fp32 += ddᵀ·o (NULL: skipped; part: mf_ta_out_bwd_wg_part_bytes() bytes),
 *   dOe (M, 128) = dO ⊙ σ(g),  dg (M, ldg) = dO ⊙ o ⊙ (1 − σ(g)) (bf16; dg may not alias g),
 *   side rows (attention_cuda.h; qp = mf_attention_side_rows_qp): lse·log2(e) and
 *         Di = Σ_d dO·o of every real row (the padding rows are the caller's).
 * o (M, 128) is the gated attention output, g (M, ldg) the gate logits, lse (N, H, N) the
 * forward's (r, h, q). Deterministic (fixed-order sums; the dW_o partials follow the grid,
 * min(⌈M/64⌉, SMs)). */
void mf_ta_out_bwd_wg_cuda(__nv_bfloat16 *dOe, __nv_bfloat16 *dg, int64_t ldg, float *side,
                           float *dw_o, float *part, const __nv_bfloat16 *dout,
                           const float *mask, int axis, const __nv_bfloat16 *o,
                           const __nv_bfloat16 *g, const float *lse,
                           const __nv_bfloat16 *w_o, int N, int starting, int qp,
                           cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
