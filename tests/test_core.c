/* test_core.c — core library: Philox known-answer vectors and distributions, CPU/GPU
 * stream layout, allocation accounting and fault injection, arenas, tensor checks,
 * bf16 rounding, the fatal path and error messages, atomic whole-file writes. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, readdir */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "core/philox.h"
#include "harness.h"

static void test_philox_kat(void) {
  /* Random123 kat_vectors: philox4x32 10 */
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int k = 0; k < 3; k++) {
    uint32_t out[4];
    mf_philox4x32_10(kat[k], kat[k] + 4, out);
    MF_TEST(memcmp(out, kat[k] + 6, sizeof out) == 0, "philox KAT %d: %08x %08x %08x %08x", k,
            out[0], out[1], out[2], out[3]);
  }
}

static void test_distributions(void) {
  const int64_t n = 200000;
  uint64_t seed = 1234, st = mf_rng_stream(7, MF_RNG_TEST, 3);
  double s = 0, s2 = 0, lo = 1, hi = 0;
  for (int64_t i = 0; i < n; i++) {
    double u = mf_rng_uniform(seed, st, (uint64_t)i);
    s += u;
    s2 += u * u;
    lo = u < lo ? u : lo;
    hi = u > hi ? u : hi;
  }
  double mean = s / n, var = s2 / n - mean * mean;
  MF_TEST(lo > 0 && hi < 1, "uniform in open (0,1): [%g, %g]", lo, hi);
  MF_TEST(fabs(mean - 0.5) < 0.005 && fabs(var - 1.0 / 12) < 0.002, "uniform mean %g var %g", mean,
          var);

  s = s2 = 0;
  double s4 = 0;
  for (int64_t i = 0; i < n; i++) {
    double z = mf_rng_normal(seed, st, (uint64_t)i);
    s += z;
    s2 += z * z;
    s4 += z * z * z * z;
  }
  mean = s / n;
  var = s2 / n - mean * mean;
  MF_TEST(fabs(mean) < 0.01 && fabs(var - 1) < 0.015 && fabs(s4 / n - 3) < 0.1,
          "normal mean %g var %g kurt %g", mean, var, s4 / n);

  /* truncated normal on [-2, 2]: variance 1 - 4 phi(2)/(Phi(2)-Phi(-2)) = 0.7737413 */
  s = s2 = 0;
  lo = 1e9;
  hi = -1e9;
  for (int64_t i = 0; i < n; i++) {
    double z = mf_rng_trunc_normal(seed, st, (uint64_t)i, -2, 2);
    s += z;
    s2 += z * z;
    lo = z < lo ? z : lo;
    hi = z > hi ? z : hi;
  }
  mean = s / n;
  var = s2 / n - mean * mean;
  MF_TEST(lo >= -2 && hi <= 2 && fabs(mean) < 0.01 && fabs(var - 0.7737413) < 0.01,
          "trunc normal [%g, %g] mean %g var %g", lo, hi, mean, var);
  /* lecun std after the 0.87962566 correction is sqrt(1/fan_in): 0.87962566^2 = var */
  MF_TEST(fabs(sqrt(0.7737413) - 0.87962566) < 1e-6, "trunc-normal std constant");

  /* the inverse CDF is the inverse of the CDF */
  double worst = 0;
  for (int k = 1; k < 1000; k++) {
    double p = k / 1000.0, x = mf_norm_icdf(p);
    double e = fabs(mf_norm_cdf(x) - p);
    worst = e > worst ? e : worst;
  }
  MF_TEST(worst < 1e-14, "norm_icdf round trip %g", worst);
}

static void test_streams(void) {
  /* element i lives in block i/4, lane i%4; fills agree with single draws at any offset */
  float a[11];
  uint64_t st = mf_rng_stream(1, MF_RNG_DROPOUT, 2);
  mf_rng_fill_normal(a, 11, 99, st, 5);
  int same = 1;
  for (int k = 0; k < 11; k++) same &= a[k] == mf_rng_normal(99, st, 5 + (uint64_t)k);
  MF_TEST(same, "fill matches element-wise draws at an offset");
  uint32_t w[4], ctr[4] = {2, 0, (uint32_t)st, (uint32_t)(st >> 32)}, key[2] = {99, 0};
  mf_philox4x32_10(ctr, key, w);
  MF_TEST(mf_rng_uniform(99, st, 9) == mf_philox_u01f(w[1]), "layout: element 9 = block 2 lane 1");
  MF_TEST(mf_rng_stream(1, 2, 3) != mf_rng_stream(1, 3, 2) &&
              mf_rng_stream(2, 0, 0) != mf_rng_stream(1, 4095, 4095),
          "distinct streams");
  MF_TEST(mf_rng_uniform(1, st, 0) != mf_rng_uniform(2, st, 0), "seed changes the numbers");
}

static void alloc_overflow(void *ctx) {
  char *p = ctx;
  mf_free(p + 256); /* inside p's block, but not an mf_malloc pointer */
}

static void test_alloc(void) {
  mf_mem_stats_t s0 = mf_mem_stats(MF_HOST);
  void *a = mf_malloc(1000, "a"), *b = mf_calloc(24, "b");
  mf_mem_stats_t s1 = mf_mem_stats(MF_HOST);
  MF_TEST(a && b && ((uintptr_t)a % MF_ALIGN) == 0, "aligned allocations");
  MF_TEST(s1.current - s0.current == 1024 && s1.count - s0.count == 2, "accounting +%lld",
          (long long)(s1.current - s0.current));
  MF_TEST(((char *)b)[23] == 0, "calloc zeroes");
  mf_free(a);
  mf_free(b);
  MF_TEST(mf_mem_stats(MF_HOST).current == s0.current, "accounting back to start");
  MF_TEST(mf_mem_stats(MF_HOST).peak >= s0.current + 1024, "peak kept");

  mf_alloc_fail_after(1);
  void *ok = mf_malloc(8, "first");
  void *bad = mf_malloc(8, "second");
  void *again = mf_malloc(8, "third");
  MF_TEST(ok && !bad && again, "fault injection fails exactly the 2nd allocation");
  MF_TEST(strstr(mf_error_message(), "second") && strstr(mf_error_message(), "injected"),
          "injected failure names the allocation: %s", mf_error_message());
  mf_free(ok);
  mf_free(again);

  int64_t live = mf_mem_stats(MF_HOST).count;
  mf_free(mf_malloc(0, "empty"));
  MF_TEST(mf_mem_stats(MF_HOST).count == live, "zero-byte allocations keep the live count");
  MF_TEST(mf_malloc((size_t)-100, "wrapped") == NULL && strstr(mf_error_message(), "impossible size"),
          "a size that would wrap when aligned is refused: %s", mf_error_message());
  MF_TEST(mf_dmalloc(16, "dev") == NULL && strstr(mf_error_message(), "no GPU backend"),
          "device allocation without a backend is an error: %s", mf_error_message());

  mf_arena ar;
  MF_TEST(mf_arena_init(&ar, MF_HOST, 1000, "act") == MF_OK && ar.capacity == 1024, "arena init");
  void *x = mf_arena_alloc(&ar, 10, "x");
  size_t mark = mf_arena_mark(&ar);
  void *y = mf_arena_alloc(&ar, 700, "y");
  MF_TEST(x && y && (char *)y - (char *)x == 256, "arena slices are aligned and packed");
  MF_TEST(mf_arena_alloc(&ar, 300, "z") == NULL && strstr(mf_error_message(), "arena 'act' full"),
          "full arena refuses: %s", mf_error_message());
  MF_TEST(mf_arena_alloc(&ar, (size_t)-10, "wrapped") == NULL && ar.used == mark + 768,
          "arena refuses a size that would wrap");
  mf_arena_reset(&ar, mark);
  MF_TEST(mf_arena_alloc(&ar, 700, "y2") == y && ar.peak == 1024, "reset reuses, peak kept");
  mf_alloc_fail_after(0);
  MF_TEST(mf_arena_alloc(&ar, 1, "w") == NULL, "injection reaches arenas");
  mf_arena_free(&ar);
  mf_alloc_fail_after(0);
  MF_TEST(mf_arena_init(&ar, MF_HOST, 64, "x") == MF_ERR_NOMEM, "arena init reports failure");
  MF_TEST(mf_alloc_injected_failures() == 3, "three injected failures counted");
  char *blk = mf_malloc(512, "blk");
  MF_TEST(mf_test_expect_fatal(alloc_overflow, blk, "not from mf_malloc"),
          "freeing a foreign pointer is fatal: %s", mf_test_last_fatal());
  mf_free(blk);
}

static void test_grow(void) {
  mf_mem_stats_t s0 = mf_mem_stats(MF_HOST);
  int32_t *v = NULL;
  int64_t cap = 0;
  MF_TEST(mf_grow((void **)&v, &cap, 3, sizeof *v, "v") == MF_OK && v && cap == 3,
          "first growth is exact: cap %lld", (long long)cap);
  for (int i = 0; i < 3; i++) v[i] = 10 + i;
  int32_t *same = v;
  MF_TEST(mf_grow((void **)&v, &cap, 3, sizeof *v, "v") == MF_OK && v == same && cap == 3,
          "no growth when it fits");
  MF_TEST(mf_grow((void **)&v, &cap, 4, sizeof *v, "v") == MF_OK && cap == 6 && v[0] == 10 &&
              v[2] == 12, "later growth doubles and keeps the contents: cap %lld", (long long)cap);
  MF_TEST(mf_grow((void **)&v, &cap, 100, sizeof *v, "v") == MF_OK && cap == 100 && v[1] == 11,
          "growth beyond double is exact: cap %lld", (long long)cap);
  MF_TEST(mf_mem_stats(MF_HOST).current - s0.current == 100 * (int64_t)sizeof *v &&
              mf_mem_stats(MF_HOST).count - s0.count == 1, "old blocks freed");
  int32_t *keep = v;
  mf_alloc_fail_after(0);
  MF_TEST(mf_grow((void **)&v, &cap, 101, sizeof *v, "vec") == MF_ERR_NOMEM && v == keep &&
              cap == 100 && v[2] == 12 && strstr(mf_error_message(), "vec"),
          "failed growth leaves the array as it was: %s", mf_error_message());
  MF_TEST(mf_grow((void **)&v, &cap, INT64_MAX, sizeof *v, "huge") == MF_ERR_NOMEM &&
              v == keep && cap == 100 && strstr(mf_error_message(), "impossible size"),
          "an impossible size is refused: %s", mf_error_message());
  mf_free(v);
  MF_TEST(mf_mem_stats(MF_HOST).current == s0.current, "accounting back to start");
}

static void shape_fatal(void *ctx) {
  mf_tensor *t = ctx;
  MF_TENSOR_EXPECT(t, "pair", MF_F32, 3, 5, 5, 128);
}
static void assert_fatal(void *ctx) {
  int n = *(int *)ctx;
  MF_ASSERT(n % 8 == 0, "N=%d must be a multiple of 8", n);
}

static void test_tensor_and_errors(void) {
  float buf[4 * 5 * 7];
  mf_tensor t = mf_tensor_make(buf, MF_F32, MF_HOST, 3, (int64_t[]){4, 5, 7});
  MF_TEST(mf_tensor_numel(&t) == 140 && mf_tensor_bytes(&t) == 560, "numel/bytes");
  char d[80];
  MF_TEST(strcmp(mf_tensor_describe(&t, d, sizeof d), "(4, 5, 7) f32 host") == 0, "describe: %s", d);
  MF_TEST(mf_tensor_check(&t, "z", MF_F32, 3, (int64_t[]){-1, 5, 7}) == MF_OK, "wildcard dims");
  MF_TEST(mf_tensor_check(&t, "z", MF_BF16, 3, (int64_t[]){4, 5, 7}) == MF_ERR_SHAPE &&
              strstr(mf_error_message(), "tensor 'z': expected (4, 5, 7) bf16, got (4, 5, 7) f32"),
          "dtype mismatch message: %s", mf_error_message());
  MF_TEST(mf_test_expect_fatal(shape_fatal, &t, "tensor 'pair': expected (5, 5, 128) f32"),
          "shape mismatch at op entry is fatal: %s", mf_test_last_fatal());
  int n = 12;
  MF_TEST(mf_test_expect_fatal(assert_fatal, &n, "assertion failed: n % 8 == 0: N=12 must be"),
          "MF_ASSERT message: %s", mf_test_last_fatal());
  MF_TEST(strstr(mf_test_last_fatal(), "test_core.c:"), "fatal names file and line");
  mf_log_set_rank(3);
  MF_TEST(mf_test_expect_fatal(assert_fatal, &n, "[rank 3]"), "fatal names the rank");
  mf_log_set_rank(-1);
  n = 16;
  MF_TEST(!mf_test_expect_fatal(assert_fatal, &n, NULL), "passing assertion is silent");

  /* bf16: round to nearest even, exact for representable values */
  MF_TEST(mf_f32_from_bf16(mf_bf16_from_f32(1.0f)) == 1.0f, "bf16 1.0");
  MF_TEST(mf_bf16_from_f32(1.00390625f) == 0x3f80, "bf16 tie rounds to even (down)");
  MF_TEST(mf_bf16_from_f32(1.01171875f) == 0x3f82, "bf16 tie rounds to even (up)");
  MF_TEST(isnan(mf_f32_from_bf16(mf_bf16_from_f32(NAN))), "bf16 NaN stays NaN");
  MF_TEST(mf_f32_from_bf16(mf_bf16_from_f32(3.0e38f)) > 3.0e38f, "bf16 large finite");
}

static void test_timer(void) {
  mf_timer t = {0};
  mf_timer_start(&t);
  volatile double x = 0;
  for (int i = 0; i < 100000; i++) x += i;
  double dt = mf_timer_stop(&t);
  MF_TEST(dt >= 0 && t.count == 1 && t.total == dt, "timer");
  MF_TEST(mf_log_level_parse("warn") == MF_LOG_WARN && mf_log_level_parse("x") == -1, "log levels");
}

/* ------------------------------------------------------------------ atomic file */

static int write_text(FILE *f, void *ctx) {
  const char *text = ctx;
  return fputs(text, f) != EOF;
}
static int write_fails(FILE *f, void *ctx) {
  (void)f, (void)ctx;
  errno = ENOSPC;
  return 0;
}
typedef struct {
  int calls, tmp_complete;
  char stage[32];
} hook_log;
static void log_hook(const char *stage, const char *tmp_path, void *ud) {
  hook_log *h = ud;
  h->calls++;
  snprintf(h->stage, sizeof h->stage, "%s", stage);
  FILE *f = fopen(tmp_path, "rb");
  char buf[16] = {0};
  h->tmp_complete = f && fread(buf, 1, sizeof buf - 1, f) == 3 && !strcmp(buf, "new");
  if (f) fclose(f);
}
static int file_is(const char *path, const char *text) {
  FILE *f = fopen(path, "rb");
  char buf[64] = {0};
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  return f && n == strlen(text) && !memcmp(buf, text, n);
}
static int count_tmp(const char *dir) {
  DIR *d = opendir(dir);
  int k = 0;
  for (struct dirent *e; d && (e = readdir(d));) k += strstr(e->d_name, ".tmp.") != NULL;
  if (d) closedir(d);
  return k;
}

static void test_atomic_file(void) {
  char dir[64], path[128], missing[128];
  snprintf(dir, sizeof dir, "/tmp/mf_test_core_XXXXXX");
  MF_ASSERT(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(path, sizeof path, "%s/out.bin", dir);
  snprintf(missing, sizeof missing, "%s/no_such_dir/out.bin", dir);
  MF_TEST(mf_atomic_write_file(path, write_text, "old", NULL, NULL) == MF_OK &&
              file_is(path, "old") && count_tmp(dir) == 0,
          "atomic write creates the file: %s", mf_error_message());
  hook_log h = {0};
  MF_TEST(mf_atomic_write_file(path, write_text, "new", log_hook, &h) == MF_OK &&
              file_is(path, "new") && count_tmp(dir) == 0,
          "atomic write replaces the file: %s", mf_error_message());
  MF_TEST(h.calls == 1 && !strcmp(h.stage, "before-rename") && h.tmp_complete,
          "the hook sees the complete temporary file before the rename");
  mf_status st = mf_atomic_write_file(path, write_fails, NULL, NULL, NULL);
  MF_TEST(st == MF_ERR_IO && strstr(mf_error_message(), path) &&
              strstr(mf_error_message(), strerror(ENOSPC)) && file_is(path, "new") &&
              count_tmp(dir) == 0,
          "a failed write keeps the previous file, names it and the error, leaves no temp: %s",
          mf_error_message());
  st = mf_atomic_write_file(missing, write_text, "x", NULL, NULL);
  MF_TEST(st == MF_ERR_IO && strstr(mf_error_message(), "no_such_dir"),
          "a missing directory is MF_ERR_IO naming the path: %s", mf_error_message());
  mf_alloc_fail_after(0);
  st = mf_atomic_write_file(path, write_text, "y", NULL, NULL);
  mf_alloc_fail_after(-1);
  MF_TEST(st == MF_ERR_NOMEM && file_is(path, "new") && count_tmp(dir) == 0,
          "an allocation failure is MF_ERR_NOMEM and changes nothing");
  mf_test_rm_rf(dir);
}

int main(void) {
  mf_test_begin("test_core");
  test_philox_kat();
  test_distributions();
  test_streams();
  test_alloc();
  test_grow();
  test_tensor_and_errors();
  test_timer();
  test_atomic_file();
  return mf_test_end();
}
