/* gemm.h — the CPU matrix product under every reference op: OpenBLAS (sgemm/dgemm by
 * mf_real) when the build found it, otherwise a blocked C loop that accumulates in
 * double. Row-major throughout. Not a GPU GEMM (those are cuBLAS/cuBLASLt calls in
 * src/ops/cuda). */
#ifndef MF_OPS_GEMM_H
#define MF_OPS_GEMM_H

#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C[M,N] = alpha·op(A)·op(B) + beta·C, row-major.
 * op(A) is A [M,K] (lda >= K) or, with transa, Aᵀ where A is [K,M] (lda >= M);
 * op(B) is B [K,N] (ldb >= N) or, with transb, Bᵀ where B is [N,K] (ldb >= K).
 * beta = 0 overwrites C (NaN in C does not propagate). */
void mf_gemm(int transa, int transb, int64_t M, int64_t N, int64_t K, double alpha,
             const mf_real *A, int64_t lda, const mf_real *B, int64_t ldb, double beta,
             mf_real *C, int64_t ldc);

/* Chooses OpenBLAS (1) or the built-in loop (0) for later calls; returns the previous
 * choice. Without OpenBLAS in the build the loop is always used and this returns 0. */
int mf_gemm_use_blas(int on);

/* `batch` independent products with element strides between consecutive A, B, C. */
void mf_gemm_batched(int transa, int transb, int64_t M, int64_t N, int64_t K, double alpha,
                     const mf_real *A, int64_t lda, int64_t strideA, const mf_real *B,
                     int64_t ldb, int64_t strideB, double beta, mf_real *C, int64_t ldc,
                     int64_t strideC, int64_t batch);

#ifdef __cplusplus
}
#endif

#endif
