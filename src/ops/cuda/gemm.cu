/* gemm.cu — the cuBLAS handle/workspace of the EvoFusion ops and their row-major bf16
 * GEMM helpers (fp32 accumulation, bf16 or fp32 output). See gemm_cuda.h. Not a custom
 * GEMM kernel. */
#include "gemm_cuda.h"
#include "gpu.h"

#include <limits.h>

extern "C" void mf_cuda_blas_create(mf_cuda_blas *b, size_t workspace_bytes) {
  MF_ASSERT(b, "mf_cuda_blas_create: NULL");
  if (workspace_bytes == 0) workspace_bytes = (size_t)32 << 20;
  MF_CHECK_CUBLAS(cublasCreate(&b->handle));
  MF_CHECK_CUDA(cudaMalloc(&b->workspace, workspace_bytes));
  b->workspace_bytes = workspace_bytes;
  MF_CHECK_CUBLAS(cublasSetWorkspace(b->handle, b->workspace, workspace_bytes));
  MF_CHECK_CUBLAS(cublasSetMathMode(b->handle, CUBLAS_DEFAULT_MATH));
  MF_CHECK_CUBLAS(cublasSetAtomicsMode(b->handle, CUBLAS_ATOMICS_NOT_ALLOWED));
}

extern "C" void mf_cuda_blas_destroy(mf_cuda_blas *b) {
  if (!b || !b->handle) return;
  MF_CHECK_CUBLAS(cublasDestroy(b->handle));
  MF_CHECK_CUDA(cudaFree(b->workspace));
  b->handle = NULL;
  b->workspace = NULL;
  b->workspace_bytes = 0;
}

static void check_dims(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  MF_ASSERT(m >= 0 && n >= 0 && k >= 0 && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX &&
                lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX,
            "gemm dims m=%lld n=%lld k=%lld", (long long)m, (long long)n, (long long)k);
}

/* Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: cuBLAS gets (B, A) swapped. */
extern "C" void mf_gemm_rm_cuda(const mf_cuda_blas *b, cudaStream_t stream, int ta, int tb,
                                int64_t m, int64_t n, int64_t k, float alpha,
                                const __nv_bfloat16 *A, int64_t lda, const __nv_bfloat16 *B,
                                int64_t ldb, float beta, void *C, mf_gemm_out ct, int64_t ldc) {
  check_dims(m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  MF_CHECK_CUBLAS(cublasSetStream(b->handle, stream));
  MF_CHECK_CUBLAS(cublasGemmEx(b->handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                               ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha,
                               B, CUDA_R_16BF, (int)ldb, A, CUDA_R_16BF, (int)lda, &beta, C,
                               ct == MF_GEMM_OUT_F32 ? CUDA_R_32F : CUDA_R_16BF, (int)ldc,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

extern "C" void mf_gemm_rm_batched_cuda(const mf_cuda_blas *b, cudaStream_t stream, int ta,
                                        int tb, int64_t m, int64_t n, int64_t k, float alpha,
                                        const __nv_bfloat16 *A, int64_t lda, int64_t sa,
                                        const __nv_bfloat16 *B, int64_t ldb, int64_t sb,
                                        float beta, void *C, mf_gemm_out ct, int64_t ldc,
                                        int64_t sc, int64_t batch) {
  check_dims(m, n, k, lda, ldb, ldc);
  MF_ASSERT(batch >= 0 && batch <= INT_MAX, "gemm batch %lld", (long long)batch);
  if (m == 0 || n == 0 || batch == 0) return;
  MF_CHECK_CUBLAS(cublasSetStream(b->handle, stream));
  MF_CHECK_CUBLAS(cublasGemmStridedBatchedEx(
      b->handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m,
      (int)k, &alpha, B, CUDA_R_16BF, (int)ldb, (long long)sb, A, CUDA_R_16BF, (int)lda,
      (long long)sa, &beta, C, ct == MF_GEMM_OUT_F32 ? CUDA_R_32F : CUDA_R_16BF, (int)ldc,
      (long long)sc, (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
