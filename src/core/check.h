/* check.h — errors: the fatal path, always-on assertions, checking macros for
 * CUDA/cuBLAS/NCCL/MPI/libc calls, and recoverable error status for bad input.
 *
 * Two kinds of failure:
 *   - broken invariants (a wrong shape at op entry, a failing CUDA call) go through
 *     mf_fatal_at(), which reports expression, file, line and rank, then calls the
 *     installed fatal handler (tests install one that longjmps) or aborts;
 *   - bad input (a corrupt file, an impossible config) is returned as an mf_status
 *     with a message kept per thread (mf_error_set / mf_error_message).
 * The CUDA/cuBLAS/NCCL/MPI macros expand only in files that include those APIs. */
#ifndef MF_CHECK_H
#define MF_CHECK_H

#include <stddef.h>

#ifdef __cplusplus
#define MF_NORETURN [[noreturn]]
#else
#define MF_NORETURN _Noreturn
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  MF_OK = 0,
  MF_ERR_IO,       /* open/read/write failed */
  MF_ERR_FORMAT,   /* malformed file contents */
  MF_ERR_SHAPE,    /* tensor shape or size mismatch */
  MF_ERR_CONFIG,   /* impossible or inconsistent configuration */
  MF_ERR_NOMEM,    /* allocation failed (or was made to fail) */
  MF_ERR_RUNTIME   /* a library or device call failed */
} mf_status;

/* Fatal handler: receives the formatted message; must not return (longjmp or exit).
 * If it returns, mf_fatal_at aborts. Returns the previous handler. */
typedef void (*mf_fatal_handler)(const char *msg, void *userdata);
mf_fatal_handler mf_set_fatal_handler(mf_fatal_handler h, void *userdata);

MF_NORETURN void mf_fatal_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Recoverable errors: set a message for this thread and return the status. */
mf_status mf_error_set(mf_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *mf_error_message(void);   /* last message on this thread ("" if none) */
void mf_error_clear(void);
const char *mf_status_name(mf_status st);

#define MF_FATAL(...) mf_fatal_at(__FILE__, __LINE__, __VA_ARGS__)

/* Always on, also in release builds: shapes at op entry, invariants.
 * MF_ASSERT(cond) or MF_ASSERT(cond, "fmt", args...). */
#define MF_ASSERT(cond, ...)                                                   \
  do {                                                                         \
    if (!(cond)) mf_assert_fail(__FILE__, __LINE__, #cond, "" __VA_ARGS__);    \
  } while (0)
MF_NORETURN void mf_assert_fail(const char *file, int line, const char *expr, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* libc calls that return -1 (or negative) and set errno. */
#define MF_CHECK_LIBC(expr)                                                    \
  do {                                                                         \
    if ((expr) < 0) mf_fatal_at(__FILE__, __LINE__, "%s failed: %s", #expr,    \
                                mf_errno_string());                           \
  } while (0)
/* libc calls that return a pointer, NULL on failure. */
#define MF_CHECK_PTR(expr)                                                     \
  do {                                                                         \
    if ((expr) == NULL) mf_fatal_at(__FILE__, __LINE__, "%s returned NULL: %s", \
                                    #expr, mf_errno_string());                \
  } while (0)
const char *mf_errno_string(void);
/* mf_malloc/mf_dmalloc/arena results, where running out is fatal: reports the
 * allocator's own message (what, how many bytes, injected or not). */
#define MF_CHECK_ALLOC(expr)                                                   \
  do {                                                                         \
    if ((expr) == NULL) mf_fatal_at(__FILE__, __LINE__, "%s: %s", #expr, mf_error_message()); \
  } while (0)

#define MF_CHECK_CUDA(expr)                                                    \
  do {                                                                         \
    cudaError_t mf_e_ = (expr);                                                \
    if (mf_e_ != cudaSuccess)                                                  \
      mf_fatal_at(__FILE__, __LINE__, "CUDA: %s: %s", #expr, cudaGetErrorString(mf_e_)); \
  } while (0)
/* After a kernel launch: catches bad launch configurations at once. */
#define MF_CHECK_LAUNCH() MF_CHECK_CUDA(cudaGetLastError())

#define MF_CHECK_CUBLAS(expr)                                                  \
  do {                                                                         \
    cublasStatus_t mf_s_ = (expr);                                             \
    if (mf_s_ != CUBLAS_STATUS_SUCCESS)                                        \
      mf_fatal_at(__FILE__, __LINE__, "cuBLAS: %s: %s", #expr, cublasGetStatusString(mf_s_)); \
  } while (0)

#define MF_CHECK_NCCL(expr)                                                    \
  do {                                                                         \
    ncclResult_t mf_r_ = (expr);                                               \
    if (mf_r_ != ncclSuccess)                                                  \
      mf_fatal_at(__FILE__, __LINE__, "NCCL: %s: %s", #expr, ncclGetErrorString(mf_r_)); \
  } while (0)

#define MF_CHECK_MPI(expr)                                                     \
  do {                                                                         \
    int mf_m_ = (expr);                                                        \
    if (mf_m_ != MPI_SUCCESS) {                                                \
      char mf_b_[MPI_MAX_ERROR_STRING]; int mf_l_ = 0;                         \
      MPI_Error_string(mf_m_, mf_b_, &mf_l_);                                  \
      mf_fatal_at(__FILE__, __LINE__, "MPI: %s: %s", #expr, mf_b_);            \
    }                                                                          \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif
