/* gemm.cu — the cuBLAS handle/workspace of the EvoFusion ops and their row-major bf16
 * GEMM helpers (fp32 accumulation, bf16 or fp32 output). See gemm_cuda.h. Not a custom
 * GEMM kernel.
 *
 * The K tail. cuBLAS 13.1.0.3 (CUDA 13.0) gives wrong products for some inner dimensions
 * k that are not multiples of 8: the weight-gradient layout (op(A) = Aᵀ, op(B) = B: both
 * operands with k as their row index) at k = 4225, 4226, 9409, 9410 returned products
 * whose error against a double reference was ≈ sqrt((k mod 8) / k), as if the last k mod 8
 * terms were dropped, at every (m, n) tried (128…576), fp32 or bf16 output; k = 1089,
 * 4097, 4227, 10201, 16641 were right (H200, 2026-12-01; its split-K kernel
 * nvjet_sm90_tss_64x32_64x16_2x4_h_bx_splitK_NTT). Those k are the pair rows N² of the
 * weight gradients at N = 65 or 97. So every product with k % 8 != 0 and k > 8 runs as two:
 * the first k rounded down to 8, then the rest added (beta = 1), which was right at every
 * k and shape tried. With bf16 output that rounds C once more (≤ 2⁻⁹ relative). */
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

/* One cublasGemmEx: row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, so
 * cuBLAS gets (B, A) swapped. */
static void gemm_rm(const mf_cuda_blas *b, int ta, int tb, int64_t m, int64_t n, int64_t k,
                    float alpha, const __nv_bfloat16 *A, int64_t lda, const __nv_bfloat16 *B,
                    int64_t ldb, float beta, void *C, mf_gemm_out ct, int64_t ldc) {
  MF_CHECK_CUBLAS(cublasGemmEx(b->handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                               ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha,
                               B, CUDA_R_16BF, (int)ldb, A, CUDA_R_16BF, (int)lda, &beta, C,
                               ct == MF_GEMM_OUT_F32 ? CUDA_R_32F : CUDA_R_16BF, (int)ldc,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static void gemm_rm_batched(const mf_cuda_blas *b, int ta, int tb, int64_t m, int64_t n,
                            int64_t k, float alpha, const __nv_bfloat16 *A, int64_t lda,
                            int64_t sa, const __nv_bfloat16 *B, int64_t ldb, int64_t sb,
                            float beta, void *C, mf_gemm_out ct, int64_t ldc, int64_t sc,
                            int64_t batch) {
  MF_CHECK_CUBLAS(cublasGemmStridedBatchedEx(
      b->handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m,
      (int)k, &alpha, B, CUDA_R_16BF, (int)ldb, (long long)sb, A, CUDA_R_16BF, (int)lda,
      (long long)sa, &beta, C, ct == MF_GEMM_OUT_F32 ? CUDA_R_32F : CUDA_R_16BF, (int)ldc,
      (long long)sc, (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* The first k rows of the inner dimension that go to cuBLAS in one product (the header's
 * K tail): k itself, or k rounded down to 8 when the rest must be a second product. */
static int64_t k_head(int64_t k) { return k > 8 && k % 8 != 0 ? k / 8 * 8 : k; }

/* Element offsets of inner index k0 in op(A) (m × k) and op(B) (k × n), row-major. */
static int64_t a_koff(int ta, int64_t lda, int64_t k0) { return ta ? k0 * lda : k0; }
static int64_t b_koff(int tb, int64_t ldb, int64_t k0) { return tb ? k0 : k0 * ldb; }

extern "C" void mf_gemm_rm_cuda(const mf_cuda_blas *b, cudaStream_t stream, int ta, int tb,
                                int64_t m, int64_t n, int64_t k, float alpha,
                                const __nv_bfloat16 *A, int64_t lda, const __nv_bfloat16 *B,
                                int64_t ldb, float beta, void *C, mf_gemm_out ct, int64_t ldc) {
  check_dims(m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  MF_CHECK_CUBLAS(cublasSetStream(b->handle, stream));
  const int64_t k0 = k_head(k);
  gemm_rm(b, ta, tb, m, n, k0, alpha, A, lda, B, ldb, beta, C, ct, ldc);
  if (k0 < k)
    gemm_rm(b, ta, tb, m, n, k - k0, alpha, A + a_koff(ta, lda, k0), lda,
            B + b_koff(tb, ldb, k0), ldb, 1.0f, C, ct, ldc);
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
  const int64_t k0 = k_head(k);
  gemm_rm_batched(b, ta, tb, m, n, k0, alpha, A, lda, sa, B, ldb, sb, beta, C, ct, ldc, sc, batch);
  if (k0 < k)
    gemm_rm_batched(b, ta, tb, m, n, k - k0, alpha, A + a_koff(ta, lda, k0), lda, sa,
                    B + b_koff(tb, ldb, k0), ldb, sb, 1.0f, C, ct, ldc, sc, batch);
}
