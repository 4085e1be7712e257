/* harness.h — the test harness shared by every CPU and GPU test binary: counted checks,
 * relative-error comparisons, random inputs, finite-difference gradient checks, and
 * interception of the fatal path. A binary calls mf_test_begin() first and returns
 * mf_test_end(), which prints "<name>: N passed, M failed" and gives the exit code. */
#ifndef MF_TEST_HARNESS_H
#define MF_TEST_HARNESS_H

#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

void mf_test_begin(const char *name);
int mf_test_end(void); /* 0 when nothing failed, 1 otherwise */

/* One counted check; prints "FAIL file:line: message" when ok is false. */
int mf_test_check(int ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define MF_TEST(cond, ...) mf_test_check(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

/* ‖got − ref‖₂ / ‖ref‖₂ (‖got‖₂ when ref is all zero); +inf if any value is NaN/Inf. */
double mf_test_relerr(const double *got, const double *ref, int64_t n);
double mf_test_maxabs(const double *got, const double *ref, int64_t n);
/* Counted check that relerr(got, ref) <= tol; prints the error either way when verbose. */
int mf_test_close_at(const char *file, int line, const char *what, const double *got,
                     const double *ref, int64_t n, double tol);
#define mf_test_close(...) mf_test_close_at(__FILE__, __LINE__, __VA_ARGS__)
/* The gradient contract "parameter gradients accumulate": got started as
 * mf_test_randn(got, n, seed, 1.0) and a backward then added to it; grad is that backward's
 * gradient from zero. Counted check that relerr(got, start + grad) <= tol, named
 * "<tag> <name> accumulates". */
int mf_test_accumulates_at(const char *file, int line, const char *tag, const char *name,
                           const double *got, const double *grad, int64_t n, uint64_t seed,
                           double tol);
#define mf_test_accumulates(...) mf_test_accumulates_at(__FILE__, __LINE__, __VA_ARGS__)

/* Random inputs from the Philox stream MF_RNG_TEST (deterministic per seed). */
void mf_test_randn(double *x, int64_t n, uint64_t seed, double scale);
void mf_test_randu(double *x, int64_t n, uint64_t seed, double lo, double hi);
void mf_test_poison(double *x, int64_t n); /* NaN: an unwritten output fails every check */
double *mf_test_alloc(int64_t n);           /* zeroed doubles; freed by mf_test_free_all */
void mf_test_free_all(void);

/* Finite-difference gradient check in double.
 * loss(ctx) runs the forward and returns a scalar L; grad holds the analytic dL/dx.
 * Checks up to max_checks elements of x (all when n <= max_checks, else an even spread
 * that includes the first and the last), with central differences of step h:
 * counted check that ‖fd − grad‖/‖fd‖ over the checked elements is <= tol. */
typedef double (*mf_test_loss_fn)(void *ctx);
int mf_test_gradcheck_at(const char *file, int line, const char *what, mf_test_loss_fn loss,
                         void *ctx, double *x, const double *grad, int64_t n, int64_t max_checks,
                         double h, double tol);
#define mf_test_gradcheck(...) mf_test_gradcheck_at(__FILE__, __LINE__, __VA_ARGS__)

/* Naive double references shared by the tests (independent of the op code):
 * σ(x); y (C) = LN(x (C)) with eps 1e-5 and population variance, times g and plus b
 * (either may be NULL); out (n_out) = W (n_out, n_in)·x (n_in). */
double mf_test_sigmoid(double x);
void mf_test_ref_ln(double *y, const double *x, const double *g, const double *b, int C);
void mf_test_ref_matvec(double *out, const double *W, const double *x, int n_out, int n_in);

/* dst (N, N, C) = src (N, N, C) transposed in (i, j): a pair tensor seen from the other
 * end (ending node from starting node, incoming from outgoing). dst must not alias src. */
void mf_test_transpose_pair(double *dst, const double *src, int N, int C);

/* Dot product: the scalar loss Σ out·w used to turn an output into a loss. */
double mf_test_dot(const double *a, const double *b, int64_t n);

/* The whole file as a malloc'd buffer (free() it) of *len bytes plus a terminating NUL;
 * NULL (and *len = 0) when it cannot be opened or read whole. */
unsigned char *mf_test_read_file(const char *path, size_t *len);
/* Writes n bytes of data to path (created or truncated); fatal when that fails. */
void mf_test_write_file(const char *path, const void *data, size_t n);

/* Removes a file or a directory tree (tests' temporary directories); ignores errors. */
void mf_test_rm_rf(const char *path);

/* Runs fn(ctx) with a fatal handler that jumps back; returns 1 if fn hit the fatal path
 * and the message contains `expect` (any message when expect is NULL). */
int mf_test_expect_fatal(void (*fn)(void *), void *ctx, const char *expect);
const char *mf_test_last_fatal(void);

#ifdef __cplusplus
}
#endif

#endif
