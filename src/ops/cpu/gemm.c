/* gemm.c — CPU GEMM: OpenBLAS when present (MF_HAVE_BLAS), else a blocked loop with
 * double accumulators. See gemm.h. */
#include "ops/gemm.h"

#include <limits.h>
#include <string.h>

#ifdef MF_HAVE_BLAS
#include <cblas.h>
#endif

/* C = alpha·op(A)·op(B) + beta·C by blocks of 64 over M and N; the K loop runs whole
 * inside a block so each C element is one double sum. */
static void gemm_loop(int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha,
                      const mf_real *A, int64_t lda, const mf_real *B, int64_t ldb, double beta,
                      mf_real *C, int64_t ldc) {
  enum { BS = 64 };
  double acc[BS];
  for (int64_t i0 = 0; i0 < M; i0 += BS)
    for (int64_t j0 = 0; j0 < N; j0 += BS) {
      int64_t i1 = i0 + BS < M ? i0 + BS : M, j1 = j0 + BS < N ? j0 + BS : N;
      for (int64_t i = i0; i < i1; i++) {
        for (int64_t j = j0; j < j1; j++) acc[j - j0] = 0;
        for (int64_t k = 0; k < K; k++) {
          double a = ta ? A[k * lda + i] : A[i * lda + k];
          if (tb)
            for (int64_t j = j0; j < j1; j++) acc[j - j0] += a * B[j * ldb + k];
          else
            for (int64_t j = j0; j < j1; j++) acc[j - j0] += a * B[k * ldb + j];
        }
        for (int64_t j = j0; j < j1; j++) {
          double c = beta == 0 ? 0 : beta * C[i * ldc + j];
          C[i * ldc + j] = (mf_real)(alpha * acc[j - j0] + c);
        }
      }
    }
}

#ifdef MF_HAVE_BLAS
static int g_use_blas = 1;
#else
static int g_use_blas = 0;
#endif

int mf_gemm_use_blas(int on) {
  int old = g_use_blas;
#ifdef MF_HAVE_BLAS
  g_use_blas = on;
#else
  (void)on;
#endif
  return old;
}

void mf_gemm(int transa, int transb, int64_t M, int64_t N, int64_t K, double alpha,
             const mf_real *A, int64_t lda, const mf_real *B, int64_t ldb, double beta,
             mf_real *C, int64_t ldc) {
  MF_ASSERT(M >= 0 && N >= 0 && K >= 0, "gemm dims %lld %lld %lld", (long long)M, (long long)N,
            (long long)K);
  MF_ASSERT(lda >= (transa ? M : K) && ldb >= (transb ? K : N) && ldc >= N, "gemm leading dims");
  MF_ASSERT(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
                ldc <= INT_MAX,
            "gemm dims exceed the BLAS int range");
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0) {
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++)
        C[i * ldc + j] = beta == 0 ? 0 : (mf_real)(beta * C[i * ldc + j]);
    return;
  }
#ifdef MF_HAVE_BLAS
  if (!g_use_blas) {
    gemm_loop(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (beta == 0) /* BLAS may read C when beta == 0; make NaN in C harmless */
    for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, (size_t)N * sizeof(mf_real));
#ifdef MF_REAL_DOUBLE
  cblas_dgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans,
              (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
#else
  cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans,
              (int)M, (int)N, (int)K, (float)alpha, A, (int)lda, B, (int)ldb, (float)beta, C,
              (int)ldc);
#endif
#else
  gemm_loop(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

void mf_gemm_batched(int transa, int transb, int64_t M, int64_t N, int64_t K, double alpha,
                     const mf_real *A, int64_t lda, int64_t strideA, const mf_real *B,
                     int64_t ldb, int64_t strideB, double beta, mf_real *C, int64_t ldc,
                     int64_t strideC, int64_t batch) {
  for (int64_t b = 0; b < batch; b++)
    mf_gemm(transa, transb, M, N, K, alpha, A + b * strideA, lda, B + b * strideB, ldb, beta,
            C + b * strideC, ldc);
}
