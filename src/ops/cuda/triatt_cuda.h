/* triatt_cuda.h — triangle attention (AF3 SI Alg 14 starting node / Alg 15 ending node) on
 * the GPU as one module, forward and backward (the function of src/ops/triatt.h, which the
 * CPU reference computes), bf16 with fp32 accumulation and fp32 LayerNorm statistics:
 *
 *   x̂ = LN(z) (staging) → ONE GEMM against w_qkvbg (4·HD + H, C) whose rows are
 *   [W_q; W_k; W_v; W_b; W_g] (the CPU bind order; padded in a copy to ldp = 4·HD + BP
 *   rows, BP = H rounded up to 64 where H·D % 64 == 0, so that P's rows are whole
 *   128-byte lines, else to 8) → P (N², ldp) = [q | k | v | bias | 0 | g] for every pair
 *   row, in z order → the bias columns gathered to (H, N, NB), NB = N rounded up to 8 (the
 *   attention's 16-byte bias copies) → EvoFlash-3D on strided
 *   views of P (mf_attention_forward_strided_cuda, gate σ(g) fused) → o (N, N, HD) in z
 *   order → GEMM with W_o → out = Δz, or, with rd, out += mask ⊙ Δz (residual +
 *   row/column dropout fused, as trimul_cuda.h).
 * The ending node runs the starting node on the transposed pair tensor (z_ji) with the
 * transposed pair mask and transposes the update back: only the views' strides swap, no
 * transposed copy of z, q, k, v, g, o or their gradients is made.
 *
 * Saved for the backward (mf_triatt_cuda_saved_bytes): LN statistics (fp32), the softmax
 * log-sum-exp (fp32) and the gated attention output (bf16, z order). With keep = 0, q, k,
 * v, g and the bias are recomputed from z by the backward (the LayerNorm and one GEMM per
 * chunk: 0.57 ms of the module's 6.3 ms backward at N = 768, C = 128, H = 4, D = 32 on an
 * H200, 2026-11-30): saved is
 * N²·(2·H·D + 4·H + 8) bytes. With keep = 1 the forward writes its projection matrix P
 * (N², 4·H·D + BP) into the saved buffer instead of the workspace and the backward reads
 * it: N²·2·(4·H·D + BP) bytes more saved, P's bytes less workspace (at N = 768 with
 * BP = 8: saved 157 → 742 MiB, workspace 1432 → 847 MiB), the same outputs and gradients bit for bit
 * (both layouts cut the same chunks). keep must be the
 * same in the saved/workspace sizes, the forward and the backward. Transient tensors live in the caller's workspace (mf_triatt_cuda_workspace
 * bytes), which the forward and the backward may reuse freely between calls: P, the bias,
 * (backward) the gradient matrix dP (N², ldp) into which the attention backward writes
 * dq, dk, dv, dg (written by the output side's backward, ta_out_bwd_wg.cu, or else over
 * dO in place), dbias and the strided attention backward's workspace (which also holds
 * that kernel's dO ⊙ σ(g), side rows and, where they fit, its dW_o partials of
 * SMs × 64 KiB; otherwise those take a region of their own) — about N²·(4·ldp + 4·H + 4·H + 2·H·D + 40·H)
 * bytes — with the chunk staging (LN rows, fp32 rows; mf_fusion_chunk_rows) aliased into
 * the buffers not live in each phase: ≈ 356 MiB at N = 384, 1423 MiB at N = 768
 * (C = 128, H = 4, D = 32, measured with ldp = 520 before the 64-column bias block, which
 * adds 56 columns (112 bytes) per pair row to each of P and dP: 126 MiB at N = 768; the
 * re-layout path this replaced took 384 MiB, 1496 MiB; it was removed and lives in git
 * history at commit 21eb25c).
 *
 * Gradient contract (as trimul_cuda.h): parameter gradients ACCUMULATE (fp32; a NULL field
 * or struct skips); dz ASSIGNS — except with a residual (rd != NULL), where dz ACCUMULATES
 * (dz += ∂Δz/∂z with dΔz = dout ⊙ mask), so the caller passes dz holding the residual
 * path's gradient (dz may equal dout). The forward with rd adds into out; out may then not
 * be z (the backward needs the pre-update z). pm is the pair mask (N, N) uint8 or NULL.
 * Determinism: no float atomics; two runs are bit-identical.
 * Requirements: D % 8 == 0, D <= 64, C <= 1024. Not the CPU reference. */
#ifndef MF_OPS_CUDA_TRIATT_CUDA_H
#define MF_OPS_CUDA_TRIATT_CUDA_H

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
  const __nv_bfloat16 *ln_g, *ln_b; /* (C) */
  const __nv_bfloat16 *w_qkvbg;     /* (4·H·D + H, C): W_q, W_k, W_v (H·D, C), W_b (H, C), W_g (H·D, C) */
  const __nv_bfloat16 *w_o;         /* (C, H·D) */
} mf_triatt_cuda_weights;

typedef struct {
  float *ln_g, *ln_b; /* (C) */
  float *w_qkvbg;     /* (4·H·D + H, C) */
  float *w_o;         /* (C, H·D) */
} mf_triatt_cuda_grads;

/* Bytes of the saved buffer for N tokens (keep: 0 or 1, see above). */
size_t mf_triatt_cuda_saved_bytes(int N, int C, int H, int D, int keep);
/* Bytes of the workspace the forward and the backward take. */
size_t mf_triatt_cuda_workspace(int N, int C, int H, int D, int keep);

/* out (N, N, C) = Δz, or with rd out = res + mask ⊙ Δz (res = rd->res, NULL: out itself,
 * +=); saved filled for the backward;
 * z (N, N, C); pm (N, N) or NULL; starting = 1 (Alg 14) or 0 (ending node, Alg 15);
 * keep = 1: the projections saved for the backward (see above). */
void mf_triatt_forward_cuda(__nv_bfloat16 *out, void *saved, const __nv_bfloat16 *z,
                            const uint8_t *pm, const mf_triatt_cuda_weights *w, int N, int C,
                            int H, int D, int starting, int keep, const mf_resdrop_cuda *rd,
                            void *ws, size_t ws_bytes, const mf_cuda_blas *blas,
                            cudaStream_t stream);

/* dz (N, N, C): see the contract above; g: parameter gradients or NULL;
 * dout (N, N, C); saved, z, pm, w, flags (keep included) as in the forward. */
void mf_triatt_backward_cuda(__nv_bfloat16 *dz, const mf_triatt_cuda_grads *g,
                             const __nv_bfloat16 *dout, const void *saved,
                             const __nv_bfloat16 *z, const uint8_t *pm,
                             const mf_triatt_cuda_weights *w, int N, int C, int H, int D,
                             int starting, int keep, const mf_resdrop_cuda *rd, void *ws,
                             size_t ws_bytes, const mf_cuda_blas *blas, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
