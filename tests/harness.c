/* harness.c — see harness.h. */
#define _POSIX_C_SOURCE 200809L /* lstat */
#include "harness.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"

static const char *g_name = "test";
static int g_pass, g_fail;
static double **g_allocs;
static int g_nallocs, g_capallocs;

void mf_test_begin(const char *name) {
  g_name = name;
  g_pass = g_fail = 0;
  const char *lvl = getenv("MF_LOG");
  mf_log_set_level(lvl && mf_log_level_parse(lvl) >= 0 ? (mf_log_level)mf_log_level_parse(lvl)
                                                       : MF_LOG_WARN);
}

int mf_test_end(void) {
  mf_test_free_all();
  printf("%s: %d passed, %d failed\n", g_name, g_pass, g_fail);
  fflush(stdout);
  return g_fail ? 1 : 0;
}

int mf_test_check(int ok, const char *file, int line, const char *fmt, ...) {
  if (ok) {
    g_pass++;
    if (getenv("MF_TEST_VERBOSE")) {
      va_list ap;
      va_start(ap, fmt);
      printf("ok   ");
      vprintf(fmt, ap);
      printf("\n");
      va_end(ap);
    }
    return 1;
  }
  g_fail++;
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL %s:%d: ", file, line);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  return 0;
}

double mf_test_relerr(const double *got, const double *ref, int64_t n) {
  double num = 0, den = 0, gn = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(got[i]) || !isfinite(ref[i])) return INFINITY;
    double d = got[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    gn += got[i] * got[i];
  }
  if (den == 0) return sqrt(gn);
  return sqrt(num / den);
}

double mf_test_maxabs(const double *got, const double *ref, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(got[i] - ref[i]);
    if (!(d <= m)) m = d; /* NaN propagates */
  }
  return m;
}

int mf_test_close_at(const char *file, int line, const char *what, const double *got,
                     const double *ref, int64_t n, double tol) {
  double e = mf_test_relerr(got, ref, n);
  return mf_test_check(e <= tol, file, line, "%s: relerr %.3g (tol %.1g, n=%lld, maxabs %.3g)",
                       what, e, tol, (long long)n, mf_test_maxabs(got, ref, n));
}

int mf_test_accumulates_at(const char *file, int line, const char *tag, const char *name,
                           const double *got, const double *grad, int64_t n, uint64_t seed,
                           double tol) {
  double *r = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  if (!r) abort();
  mf_test_randn(r, n, seed, 1.0);
  for (int64_t i = 0; i < n; i++) r[i] += grad[i];
  char what[200];
  snprintf(what, sizeof what, "%s %s accumulates", tag, name);
  int ok = mf_test_close_at(file, line, what, got, r, n, tol);
  free(r);
  return ok;
}

void mf_test_randn(double *x, int64_t n, uint64_t seed, double scale) {
  uint64_t stream = ((uint64_t)MF_RNG_TEST << 12);
  for (int64_t i = 0; i < n; i++) x[i] = scale * (double)mf_philox_normal(seed, stream, (uint64_t)i);
}

void mf_test_randu(double *x, int64_t n, uint64_t seed, double lo, double hi) {
  uint64_t stream = ((uint64_t)MF_RNG_TEST << 12) | 1;
  for (int64_t i = 0; i < n; i++)
    x[i] = lo + (hi - lo) * (double)mf_philox_uniform(seed, stream, (uint64_t)i);
}

void mf_test_poison(double *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = NAN;
}

double *mf_test_alloc(int64_t n) {
  if (g_nallocs == g_capallocs) {
    g_capallocs = g_capallocs ? 2 * g_capallocs : 64;
    g_allocs = realloc(g_allocs, (size_t)g_capallocs * sizeof *g_allocs);
    if (!g_allocs) abort();
  }
  double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  if (!p) abort();
  g_allocs[g_nallocs++] = p;
  return p;
}

void mf_test_free_all(void) {
  for (int i = 0; i < g_nallocs; i++) free(g_allocs[i]);
  free(g_allocs);
  g_allocs = NULL;
  g_nallocs = g_capallocs = 0;
}

double mf_test_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

void mf_test_ref_ln(double *y, const double *x, const double *g, const double *b, int C) {
  double mu = 0, var = 0;
  for (int c = 0; c < C; c++) mu += x[c];
  mu /= C;
  for (int c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
  var /= C;
  for (int c = 0; c < C; c++)
    y[c] = (x[c] - mu) / sqrt(var + 1e-5) * (g ? g[c] : 1.0) + (b ? b[c] : 0.0);
}

void mf_test_ref_matvec(double *out, const double *W, const double *x, int n_out, int n_in) {
  for (int o = 0; o < n_out; o++) {
    double s = 0;
    for (int i = 0; i < n_in; i++) s += W[(int64_t)o * n_in + i] * x[i];
    out[o] = s;
  }
}

void mf_test_transpose_pair(double *dst, const double *src, int N, int C) {
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++)
      for (int c = 0; c < C; c++)
        dst[((int64_t)j * N + i) * C + c] = src[((int64_t)i * N + j) * C + c];
}

double mf_test_dot(const double *a, const double *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

int mf_test_gradcheck_at(const char *file, int line, const char *what, mf_test_loss_fn loss,
                         void *ctx, double *x, const double *grad, int64_t n, int64_t max_checks,
                         double h, double tol) {
  int64_t m = n <= max_checks ? n : max_checks;
  double num = 0, den = 0, worst = 0;
  int64_t worst_i = -1;
  for (int64_t c = 0; c < m; c++) {
    int64_t i = m == n ? c : (m > 1 ? c * (n - 1) / (m - 1) : 0);
    double x0 = x[i];
    x[i] = x0 + h;
    double lp = loss(ctx);
    x[i] = x0 - h;
    double lm = loss(ctx);
    x[i] = x0;
    double fd = (lp - lm) / (2 * h), d = fd - grad[i];
    if (!isfinite(fd) || !isfinite(grad[i])) d = INFINITY;
    num += d * d;
    den += fd * fd;
    if (fabs(d) > worst || !isfinite(d)) {
      worst = fabs(d);
      worst_i = i;
    }
  }
  double e = den > 0 ? sqrt(num / den) : sqrt(num);
  return mf_test_check(e <= tol, file, line,
                       "gradcheck %s: relerr %.3g (tol %.1g, %lld of %lld checked, worst |d| %.3g at %lld)",
                       what, e, tol, (long long)m, (long long)n, worst, (long long)worst_i);
}

unsigned char *mf_test_read_file(const char *path, size_t *len) {
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  long sz = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  unsigned char *b = sz >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)sz + 1) : NULL;
  if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (!b) return NULL;
  b[sz] = 0;
  *len = (size_t)sz;
  return b;
}

void mf_test_write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  MF_ASSERT(f != NULL, "cannot write %s", path);
  MF_ASSERT(fwrite(data, 1, n, f) == n && fclose(f) == 0, "short write to %s", path);
}

void mf_test_rm_rf(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0) return;
  if (S_ISDIR(sb.st_mode)) {
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char sub[1024];
      snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
      mf_test_rm_rf(sub);
    }
    if (d) closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

static jmp_buf g_jmp;
static char g_fatal_msg[1400];

static void jump_handler(const char *msg, void *ud) {
  (void)ud;
  snprintf(g_fatal_msg, sizeof g_fatal_msg, "%s", msg);
  longjmp(g_jmp, 1);
}

int mf_test_expect_fatal(void (*fn)(void *), void *ctx, const char *expect) {
  g_fatal_msg[0] = '\0';
  mf_fatal_handler old = mf_set_fatal_handler(jump_handler, NULL);
  int hit = 0;
  if (setjmp(g_jmp) == 0) fn(ctx);
  else hit = 1;
  mf_set_fatal_handler(old, NULL);
  return hit && (!expect || strstr(g_fatal_msg, expect) != NULL);
}

const char *mf_test_last_fatal(void) { return g_fatal_msg; }
