/* gemm_cuda.h — the cuBLAS handle/workspace pair that the EvoFusion ops (ln_linear,
 * transition, trimul) run their matrix products through, and two row-major GEMM
 * helpers over it: bf16 operands, fp32 accumulation, bf16 or fp32 output, plain or
 * strided-batched. Not a GEMM kernel of its own: the products are cuBLAS
 * (cublasGemmEx / cublasGemmStridedBatchedEx, CUBLAS_COMPUTE_32F; no cuBLASLt epilogues);
 * the fusion lives in the prologue/epilogue kernels of each op (and in the custom fused
 * LN + GEMM kernel of ln_linear.cu, variant 0).
 *
 * Row-major convention (as src/ops/gemm.h): C (m, n) = alpha·op(A)·op(B) + beta·C with
 * op(A) (m, k), op(B) (k, n); A is (m, k) when ta = 0 and (k, m) when ta = 1, likewise B.
 * Determinism: one handle with its own workspace on one stream gives bit-identical
 * results run to run (no split-K atomics are enabled). */
#ifndef MF_OPS_CUDA_GEMM_CUDA_H
#define MF_OPS_CUDA_GEMM_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A cuBLAS handle and the device workspace it is bound to. Create one per stream. */
typedef struct {
  cublasHandle_t handle;
  void *workspace;        /* device, workspace_bytes */
  size_t workspace_bytes;
} mf_cuda_blas;

/* Creates the handle and a workspace of workspace_bytes (0: 32 MiB). */
void mf_cuda_blas_create(mf_cuda_blas *b, size_t workspace_bytes);
void mf_cuda_blas_destroy(mf_cuda_blas *b);

/* Output element type of a GEMM. */
typedef enum { MF_GEMM_OUT_BF16 = 0, MF_GEMM_OUT_F32 = 1 } mf_gemm_out;

/* C (m, n) [ldc] = alpha·op(A)·op(B) + beta·C, row-major; A, B bf16; C bf16 or fp32. */
void mf_gemm_rm_cuda(const mf_cuda_blas *b, cudaStream_t stream, int ta, int tb, int64_t m,
                     int64_t n, int64_t k, float alpha, const __nv_bfloat16 *A, int64_t lda,
                     const __nv_bfloat16 *B, int64_t ldb, float beta, void *C, mf_gemm_out ct,
                     int64_t ldc);

/* The same over `batch` matrices at element strides sa, sb, sc. */
void mf_gemm_rm_batched_cuda(const mf_cuda_blas *b, cudaStream_t stream, int ta, int tb,
                             int64_t m, int64_t n, int64_t k, float alpha,
                             const __nv_bfloat16 *A, int64_t lda, int64_t sa,
                             const __nv_bfloat16 *B, int64_t ldb, int64_t sb, float beta,
                             void *C, mf_gemm_out ct, int64_t ldc, int64_t sc, int64_t batch);

/* Bytes for carving device workspaces: each slice rounded up to 256 bytes. */
static inline size_t mf_cuda_align(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

#ifdef __cplusplus
}
#endif

#endif
