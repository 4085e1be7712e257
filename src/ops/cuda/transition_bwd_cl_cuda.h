/* transition_bwd_cl_cuda.h — the SwiGLU transition's whole backward as one kernel on thread
 * block clusters (sm_90a, C = 128, Hd = 64·S with S = 2, 4 or 8): dinp, dγ/dβ, dW_ab and
 * dW_o with the weight gradients accumulated on chip, so nothing of the 4c hidden (h,
 * [da | db]) and no x̂ ever reaches global memory. transition_bwd_cl.cu says how.
 * Private to src/ops/cuda (transition.cu dispatches to it); not the CPU reference. */
#ifndef MF_OPS_CUDA_TRANSITION_BWD_CL_CUDA_H
#define MF_OPS_CUDA_TRANSITION_BWD_CL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/layernorm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the cluster kernel takes this shape on the current device: compute capability
 * 9.x, C == 128, Hd one of 128, 256, 512, mode FULL/SCALE/NONE, every given pointer
 * 16-byte aligned (NULL ones ignored), the driver's tensor-map encoder present, and the
 * switch below on. */
int mf_transition_bwd_cl_supported(int C, int Hd, mf_ln_mode mode, const void *inp,
                                   const void *dout, const void *mean, const void *rstd,
                                   const void *w_ab, const void *w_o, const void *dinp);

/* Turns the kernel on (1) or off (0; −1 only reads); returns the previous state. Default
 * on; the environment variable MF_TRANSITION_BWD_CL=0 turns it off at start-up (A/B runs). */
int mf_transition_bwd_cl_set(int on);

/* Bytes of workspace the kernel needs at this width (the per-cluster weight-gradient
 * partials and the per-CTA dγ/dβ partials), 0 when it takes no shape of this width. */
size_t mf_transition_bwd_cl_workspace(int C, int Hd);

/* How many times the kernel was launched (the tests check the op took this path). */
int64_t mf_transition_bwd_cl_calls(void);

/* The backward over M rows, the contract of mf_transition_backward_cuda (transition_cuda.h):
 * dinp (M, C) ASSIGNED, or ADDED with add = 1 (dinp may equal dout), or NULL; dgamma,
 * dbeta (C), dw_ab (2Hd, C), dw_o (C, Hd) fp32 ACCUMULATE, each may be NULL; dout (M, C);
 * mean, rstd (M) from the forward; inp (M, C); gamma, beta (C); w_ab (2Hd, C) = [W_a; W_b];
 * w_o (C, Hd). Deterministic: every sum has a fixed order. */
void mf_transition_bwd_cl_cuda(__nv_bfloat16 *dinp, int add, float *dgamma, float *dbeta,
                               float *dw_ab, float *dw_o, const __nv_bfloat16 *dout,
                               const float *mean, const float *rstd, const __nv_bfloat16 *inp,
                               const __nv_bfloat16 *gamma, const __nv_bfloat16 *beta,
                               const __nv_bfloat16 *w_ab, const __nv_bfloat16 *w_o, int64_t M,
                               int Hd, mf_ln_mode mode, void *ws, size_t ws_bytes,
                               cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
