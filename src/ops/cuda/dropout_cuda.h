/* dropout_cuda.h — EvoFusion residual add + row/column dropout on the GPU (the
 * functions of src/ops/dropout.h, which the CPU reference computes). The mask comes
 * from the same Philox stream as the CPU's mf_dropout_mask (src/core/philox.h, compiled
 * for the device): element k = r·C + c is kept when (double)uniform(seed, stream, k) >= p
 * — the float uniform compared in double, exactly as the CPU — so both draw the same
 * mask for the same (seed, stream), and the backward regenerates it instead of storing
 * it. The mask (R, C) is tiny (R = N) and stays in L2; the residual kernels read it.
 * The fused form inside a producer's epilogue is mf_resdrop_cuda, which trimul_cuda.h
 * takes. Not element-wise dropout; not the CPU reference.
 *
 * On x (A, B, C) bf16: ROWWISE mask (B, C) shared over a; COLWISE mask (A, C) shared
 * over b (as dropout.h). Gradient contract: dx ASSIGNS. */
#ifndef MF_OPS_CUDA_DROPOUT_CUDA_H
#define MF_OPS_CUDA_DROPOUT_CUDA_H

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/dropout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Residual + dropout applied by a producer's epilogue: dest (A, B, C) += x ⊙ mask with
 * the mask of (p, seed, stream) along axis; p = 0 is a plain residual add. res: where the
 * residual is read — NULL: dest itself (in place); else dest = res + x ⊙ mask, res (A, B,
 * C) equal to dest or not overlapping it. With res the caller needs no copy of the
 * residual into dest first (the Pairformer block's forward: z_{k+1} = z_k + drop(U_k(z_k))
 * straight into z_{k+1}'s buffer, one 2·N²·C-byte round trip less per update). */
typedef struct {
  double p;
  uint64_t seed, stream;
  mf_dropout_axis axis;
  const __nv_bfloat16 *res;
} mf_resdrop_cuda;

/* mask (R, C) fp32 = 0 or 1/(1−p), as mf_dropout_mask. */
void mf_dropout_mask_cuda(float *mask, int64_t R, int C, double p, uint64_t seed,
                          uint64_t stream, cudaStream_t cs);

/* z (A, B, C) += x (A, B, C) ⊙ mask (fp32 accumulate, one bf16 rounding). */
void mf_dropout_residual_forward_cuda(__nv_bfloat16 *z, const __nv_bfloat16 *x,
                                      const float *mask, int64_t A, int64_t B, int C,
                                      mf_dropout_axis axis, cudaStream_t cs);

/* dx (A, B, C) = dout (A, B, C) ⊙ mask (ASSIGN); dx may equal dout. */
void mf_dropout_backward_cuda(__nv_bfloat16 *dx, const __nv_bfloat16 *dout, const float *mask,
                              int64_t A, int64_t B, int C, mf_dropout_axis axis,
                              cudaStream_t cs);

/* The residual kernels: 1 (default) the slot kernel for C % 8 == 0 (ROWWISE, or COLWISE
 * with C >= 64) on 16-byte aligned pointers — for the backward, and for forwards of at
 * most 64 MiB of x (larger ones measured faster on the grid-stride kernel) — bit-identical
 * to 0, the grid-stride kernel (every shape); returns the previous variant (variant < 0
 * only reads it). For tests and the bench. */
int mf_dropout_cuda_set_variant(int variant);

#ifdef __cplusplus
}
#endif

#endif
