/* gemm_ln_bwd_cuda.h — the tail of a LayerNorm + projection backward as one kernel (sm_90a):
 * from the gradient D (rows, K) of a projection's output and its weight W (K, C), C = 128,
 *   dx̂ = D·W (fp32, on chip)    dinp = the LayerNorm backward of dx̂ (assigned or added)
 * plus per-CTA partials of dγ, dβ (Σ dx̂⊙x̂, Σ dx̂) for mf_ln_param_grad_reduce_cuda — what
 * a cuBLAS GEMM into an fp32 (rows, C) buffer followed by mf_ln_rows_backward_cuda did, without
 * the fp32 buffer's round trip through device memory (1 KB a row at C = 128). Used by the
 * triangle multiplication's phase 3 (dP4·W4 + dgl·W_g, K = 512 + 128) and the triangle
 * attention's projection backward (D = dP, K = 520) when mf_gemm_ln_bwd_enabled(). The weight gradient
 * dW = Dᵀ·x̂ stays a cuBLAS GEMM in the callers. Not a forward, not the CPU reference. */
#ifndef MF_OPS_CUDA_GEMM_LN_BWD_CUDA_H
#define MF_OPS_CUDA_GEMM_LN_BWD_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/layernorm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One term of the product: d (rows, ld) bf16, its first k columns, times w (k, C) bf16
 * row-major. dx̂ is the sum of one or two terms (the trimul's [dP4 | dgl]·w_cat without
 * copying dgl beside dP4). */
typedef struct {
  const __nv_bfloat16 *d; /* (rows, ld) */
  int64_t ld;
  const __nv_bfloat16 *w; /* (k, C) */
  int k;
} mf_gemm_ln_term;

/* Whether the kernel takes this call: C = 128, nt = 1 or 2 terms each with k a positive
 * multiple of 8 and ld ≥ k a multiple of 8 (with two terms the first's k a multiple of 64),
 * mode FULL / SCALE / NONE, every pointer 16-byte aligned (dinp may be NULL). */
int mf_gemm_ln_bwd_supported(const mf_gemm_ln_term *t, int nt, int C, mf_ln_mode mode,
                             const void *inp, const void *dinp);

/* Whether the callers use the kernel where it is supported (default 1); set_enabled(v) sets
 * it for v = 0 / 1 and returns the previous value (v < 0 only reads it). For the tests and
 * A/B runs; MF_GEMM_LN_BWD=0 in the environment turns it off at the first query. */
int mf_gemm_ln_bwd_enabled(void);
int mf_gemm_ln_bwd_set_enabled(int v);
/* Whether the kernel copies its blocks by TMA (default 1; same bits as the cp.async
 * version); set_tma(v) sets it for v = 0 / 1 and returns the previous value (v < 0 only
 * reads it). For the tests and A/B runs; MF_GEMM_LN_BWD_TMA=0 in the environment turns it
 * off at the first query. */
int mf_gemm_ln_bwd_set_tma(int v);

/* Partial rows the kernel writes for `rows` rows: min(⌈rows/128⌉, SMs) ≤
 * mf_ln_rows_backward_parts(rows), so a buffer sized for the row kernel is large enough. */
int mf_gemm_ln_bwd_parts(int64_t rows);

/* dinp (rows, C) bf16 (=, or += when add) the LayerNorm backward of dx̂ = Σ_j t[j].d·t[j].w,
 * with inp (rows, C) bf16 the LayerNorm's input, mean, rstd (rows) its saved statistics,
 * gamma (C) (not read for NONE). part (mf_gemm_ln_bwd_parts(rows), 2C) fp32 receives
 * [Σ dx̂⊙x̂ | Σ dx̂] per CTA; returns that count (0 when rows = 0). Deterministic: fixed
 * grid, tiles and summation orders. */
int mf_gemm_ln_bwd_cuda(__nv_bfloat16 *dinp, int add, float *part, const mf_gemm_ln_term *t, int nt,
                        const __nv_bfloat16 *inp, const float *mean, const float *rstd,
                        const __nv_bfloat16 *gamma, int64_t rows, int C, mf_ln_mode mode,
                        cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
