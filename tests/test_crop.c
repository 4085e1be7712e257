/* test_crop.c — the token croppers of spec §10.2 (src/data/crop.c) on synthetic multi-chain
 * structures, checked against brute-force definitions: crop sizes, one contiguous span per
 * chain for contiguous crops, the reference token and the k nearest for spatial crops (with
 * the index tie-breaker and unresolved tokens last), the 15 Å interface condition (grid
 * versus all pairs), sorted output, determinism per (seed, step), the method frequencies
 * against the weights, fallbacks and edge cases (crop >= N, one chain, nothing resolved,
 * bad arguments). Then applying a plan to a feature set: token, (N, N), atom and MSA axes
 * sliced, index features re-indexed, padding and masks, the contract layout, and the ref_pos
 * augmentation value by value (rotation and translation draws of the documented indices).
 * Not here: threads and the cache (test_loader.c). */
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "data/crop.h"
#include "data/ccd.h"
#include "data/featurize.h"
#include "harness.h"

/* ------------------------------------------------------------------ synthetic tokens */

typedef struct {
  int64_t n;
  int32_t *asym;
  float *x;
  uint8_t *res;
} toks;

/* Chains of the given lengths, each a random walk (3.8 Å steps) starting at a point of
 * a box of side `box`; resolved with probability p_res. */
static toks make_toks(int nchain, const int *len, double box, double p_res, uint64_t seed) {
  toks t = {0};
  for (int c = 0; c < nchain; c++) t.n += len[c];
  t.asym = malloc((size_t)t.n * sizeof *t.asym);
  t.x = malloc((size_t)t.n * 3 * sizeof *t.x);
  t.res = malloc((size_t)t.n);
  uint64_t s = mf_rng_stream(seed, MF_RNG_TEST, 7);
  int64_t i = 0;
  for (int c = 0; c < nchain; c++) {
    double p[3];
    for (int a = 0; a < 3; a++) p[a] = box * mf_rng_uniform(seed, s, (uint64_t)(i * 8 + a));
    for (int k = 0; k < len[c]; k++, i++) {
      double d[3], n2 = 0;
      for (int a = 0; a < 3; a++) {
        d[a] = mf_rng_normal(seed, s, (uint64_t)(i * 8 + 3 + a));
        n2 += d[a] * d[a];
      }
      for (int a = 0; a < 3; a++) {
        p[a] += 3.8 * d[a] / sqrt(n2);
        t.x[3 * i + a] = (float)p[a];
      }
      t.asym[i] = 10 + 3 * c; /* ids need not be 0..C-1 */
      t.res[i] = mf_rng_uniform(seed, s, (uint64_t)(i * 8 + 6)) < p_res;
    }
  }
  return t;
}

static void free_toks(toks *t) { free(t->asym), free(t->x), free(t->res); }

static mf_crop_tokens view(const toks *t) { return (mf_crop_tokens){t->n, t->asym, t->x, t->res}; }

static int sorted_unique(const int32_t *v, int64_t n, int64_t N) {
  for (int64_t i = 0; i < n; i++) {
    if (v[i] < 0 || v[i] >= N) return 0;
    if (i && v[i] <= v[i - 1]) return 0;
  }
  return 1;
}

static double key_of(const toks *t, int64_t ref, int64_t i) {
  if (!t->res[i]) return INFINITY;
  double d2 = 0;
  for (int a = 0; a < 3; a++) {
    double d = (double)t->x[3 * i + a] - t->x[3 * ref + a];
    d2 += d * d;
  }
  return sqrt(d2) + 1e-3 * (double)i;
}

/* Selected = exactly the k smallest keys (ties broken by index). */
static int is_k_nearest(const toks *t, int64_t ref, const int32_t *sel, int64_t k) {
  uint8_t *in = calloc((size_t)t->n, 1);
  double worst = -1;
  int64_t worst_i = -1;
  for (int64_t j = 0; j < k; j++) {
    in[sel[j]] = 1;
    double kj = key_of(t, ref, sel[j]);
    if (kj > worst || (kj == worst && sel[j] > worst_i)) worst = kj, worst_i = sel[j];
  }
  int ok = 1;
  for (int64_t i = 0; i < t->n && ok; i++) {
    if (in[i]) continue;
    double ki = key_of(t, ref, i);
    if (ki < worst || (ki == worst && i < worst_i)) ok = 0;
  }
  free(in);
  return ok;
}

static int has_partner(const toks *t, int64_t i, double cut) {
  if (!t->res[i]) return 0;
  for (int64_t j = 0; j < t->n; j++) {
    if (!t->res[j] || t->asym[j] == t->asym[i]) continue;
    double d2 = 0;
    for (int a = 0; a < 3; a++) {
      double d = (double)t->x[3 * i + a] - t->x[3 * j + a];
      d2 += d * d;
    }
    if (d2 <= cut * cut) return 1;
  }
  return 0;
}

/* Whether iface (t->n) marks exactly the tokens that has_partner finds (all pairs);
 * *nb: how many those are. */
static int iface_agrees(const toks *t, const uint8_t *iface, double cut, int64_t *nb) {
  int agree = 1;
  *nb = 0;
  for (int64_t i = 0; i < t->n; i++) {
    int b = has_partner(t, i, cut);
    *nb += b;
    agree &= b == iface[i];
  }
  return agree;
}

/* Within each chain, the selected tokens are one run of consecutive chain positions. */
static int one_span_per_chain(const toks *t, const int32_t *sel, int64_t n) {
  uint8_t *in = calloc((size_t)t->n, 1);
  for (int64_t j = 0; j < n; j++) in[sel[j]] = 1;
  int ok = 1;
  for (int64_t i = 0; i < t->n && ok; i++) {
    if (i > 0 && t->asym[i] == t->asym[i - 1]) continue; /* chain starts at i */
    int64_t e = i;
    while (e < t->n && t->asym[e] == t->asym[i]) e++;
    int runs = 0;
    for (int64_t k = i; k < e; k++)
      if (in[k] && (k == i || !in[k - 1])) runs++;
    if (runs > 1) ok = 0;
  }
  free(in);
  return ok;
}

/* ------------------------------------------------------------------ croppers */

static void test_contiguous(void) {
  const int len[5] = {120, 7, 300, 1, 64};
  toks t = make_toks(5, len, 80, 0.9, 11);
  mf_crop_tokens v = view(&t);
  int32_t *out = malloc((size_t)t.n * sizeof *out);
  int ok_size = 1, ok_sorted = 1, ok_span = 1;
  const int64_t crops[4] = {1, 50, 256, 491};
  for (int ci = 0; ci < 4; ci++)
    for (uint64_t step = 0; step < 200; step++) {
      int64_t n = -1;
      mf_status st = mf_crop_contiguous(&v, crops[ci], 5, mf_rng_stream(step, MF_RNG_CROP, 0), out, &n);
      ok_size &= st == MF_OK && n == crops[ci];
      ok_sorted &= sorted_unique(out, n, t.n);
      ok_span &= one_span_per_chain(&t, out, n);
    }
  MF_TEST(ok_size, "contiguous: exactly min(N, crop) tokens");
  MF_TEST(ok_sorted, "contiguous: sorted, unique, in range");
  MF_TEST(ok_span, "contiguous: one contiguous span per chain");

  /* every chain gets visited first sometimes, and spans start at varied places */
  int first_chain_seen[5] = {0};
  int64_t starts_seen = 0;
  uint8_t start_hit[300] = {0};
  for (uint64_t step = 0; step < 400; step++) {
    int64_t n;
    mf_crop_contiguous(&v, 100, 9, mf_rng_stream(step, MF_RNG_CROP, 0), out, &n);
    for (int c = 0; c < 5; c++) {
      int64_t c0 = 0;
      for (int k = 0; k < c; k++) c0 += len[k];
      for (int64_t j = 0; j < n; j++)
        if (out[j] >= c0 && out[j] < c0 + len[c]) {
          if (c == 2 && !start_hit[out[j] - c0]) start_hit[out[j] - c0] = 1, starts_seen++;
          break;
        }
    }
    /* a crop of 100 from the 300-chain alone is common: count chains present */
    for (int c = 0; c < 5; c++) {
      int64_t c0 = 0;
      for (int k = 0; k < c; k++) c0 += len[k];
      for (int64_t j = 0; j < n; j++)
        if (out[j] >= c0 && out[j] < c0 + len[c]) {
          first_chain_seen[c] = 1;
          break;
        }
    }
  }
  int all = 1;
  for (int c = 0; c < 5; c++) all &= first_chain_seen[c];
  MF_TEST(all, "contiguous: every chain appears in some crop");
  MF_TEST(starts_seen > 50, "contiguous: span starts vary (%lld distinct)", (long long)starts_seen);

  /* determinism and dependence on the step */
  int32_t *o2 = malloc((size_t)t.n * sizeof *o2);
  int64_t n1, n2, n3;
  mf_crop_contiguous(&v, 77, 3, mf_rng_stream(17, MF_RNG_CROP, 0), out, &n1);
  mf_crop_contiguous(&v, 77, 3, mf_rng_stream(17, MF_RNG_CROP, 0), o2, &n2);
  MF_TEST(n1 == n2 && !memcmp(out, o2, (size_t)n1 * 4), "contiguous: same (seed, step) → same crop");
  mf_crop_contiguous(&v, 77, 3, mf_rng_stream(18, MF_RNG_CROP, 0), o2, &n3);
  MF_TEST(n3 != n1 || memcmp(out, o2, (size_t)n1 * 4), "contiguous: next step differs");
  free(o2);
  free(out);
  free_toks(&t);
}

static void test_spatial(void) {
  const int len[4] = {150, 90, 40, 200};
  toks t = make_toks(4, len, 40, 0.85, 21);
  mf_crop_tokens v = view(&t);
  int32_t *out = malloc((size_t)t.n * sizeof *out);
  int ok = 1, ok_ref = 1, ok_near = 1, ok_sorted = 1, ok_res = 1;
  for (uint64_t step = 0; step < 150; step++) {
    int64_t n = -1, ref = -2, crop = 1 + (int64_t)(step * 37 % 470);
    mf_status st = mf_crop_spatial(&v, crop, 1, mf_rng_stream(step, MF_RNG_CROP, 0), out, &n, &ref);
    ok &= st == MF_OK && n == crop;
    ok_res &= ref >= 0 && ref < t.n && t.res[ref];
    int in = 0;
    for (int64_t j = 0; j < n; j++) in |= out[j] == ref;
    ok_ref &= in;
    ok_sorted &= sorted_unique(out, n, t.n);
    ok_near &= is_k_nearest(&t, ref, out, n);
  }
  MF_TEST(ok, "spatial: crop size respected");
  MF_TEST(ok_res, "spatial: the reference is a resolved token");
  MF_TEST(ok_ref, "spatial: the crop contains the reference");
  MF_TEST(ok_sorted, "spatial: sorted, unique");
  MF_TEST(ok_near, "spatial: exactly the k nearest (tie-breaker, unresolved last)");

  /* the reference is uniform over resolved tokens: every resolved token gets picked */
  int64_t nres = 0, hit = 0;
  uint8_t *seen = calloc((size_t)t.n, 1);
  for (int64_t i = 0; i < t.n; i++) nres += t.res[i];
  for (uint64_t step = 0; step < 20000; step++) {
    int64_t n, ref;
    mf_crop_spatial(&v, 1, 4, mf_rng_stream(step, MF_RNG_CROP, 0), out, &n, &ref);
    if (!seen[ref]) seen[ref] = 1, hit++;
  }
  MF_TEST(hit == nres, "spatial: every resolved token is a reference sometimes (%lld of %lld)",
          (long long)hit, (long long)nres);
  free(seen);

  /* crop larger than the resolved set: unresolved tokens come last, by index */
  {
    const int l1[1] = {30};
    toks u = make_toks(1, l1, 10, 0.5, 3);
    mf_crop_tokens vu = view(&u);
    int64_t n, ref, nr = 0;
    for (int64_t i = 0; i < u.n; i++) nr += u.res[i];
    mf_crop_spatial(&vu, nr + 3, 2, 99, out, &n, &ref);
    int64_t unres_in = 0, first_unres[3], k = 0;
    for (int64_t i = 0; i < u.n && k < 3; i++)
      if (!u.res[i]) first_unres[k++] = i;
    for (int64_t j = 0; j < n; j++) unres_in += !u.res[out[j]];
    int lowest = 1;
    for (int q = 0; q < 3; q++) {
      int in = 0;
      for (int64_t j = 0; j < n; j++) in |= out[j] == first_unres[q];
      lowest &= in;
    }
    MF_TEST(n == nr + 3 && unres_in == 3 && lowest,
            "spatial: all resolved tokens first, then the lowest-index unresolved ones");
    free_toks(&u);
  }
  free(out);
  free_toks(&t);
}

static void test_interface(void) {
  /* two chains close together, a third far away */
  const int len[3] = {120, 80, 60};
  toks t = make_toks(3, len, 25, 0.9, 31);
  for (int64_t i = 200; i < 260; i++) t.x[3 * i] += 500; /* chain 3 isolated */
  mf_crop_tokens v = view(&t);
  uint8_t *iface = malloc((size_t)t.n);
  int64_t ni = mf_crop_interface_tokens(&v, 15.0, iface);
  int64_t nb;
  int agree = iface_agrees(&t, iface, 15.0, &nb);
  MF_TEST(agree && ni == nb && nb > 0, "interface tokens: grid agrees with all pairs (%lld)",
          (long long)nb);
  /* spread-out coordinates (large box, cell growth) still agree */
  {
    const int l2[6] = {50, 50, 50, 50, 50, 50};
    toks w = make_toks(6, l2, 2000, 0.8, 5);
    for (int64_t i = 0; i < 50; i++) /* one chain near another's start */
      for (int a = 0; a < 3; a++) w.x[3 * i + a] = w.x[3 * (50 + i % 3) + a] + (float)(a * 4);
    mf_crop_tokens vw = view(&w);
    uint8_t *f2 = malloc((size_t)w.n);
    int64_t n2 = mf_crop_interface_tokens(&vw, 15.0, f2), nb2;
    int ag2 = iface_agrees(&w, f2, 15.0, &nb2);
    MF_TEST(ag2 && n2 == nb2 && nb2 > 0, "interface tokens over a 2000 Å box agree (%lld)",
            (long long)nb2);
    free(f2);
    free_toks(&w);
  }
  int32_t *out = malloc((size_t)t.n * sizeof *out);
  int ok = 1, ok_ref = 1, ok_near = 1;
  for (uint64_t step = 0; step < 100; step++) {
    int64_t n, ref, crop = 10 + (int64_t)step;
    mf_status st = mf_crop_interface(&v, crop, 8, mf_rng_stream(step, MF_RNG_CROP, 0), out, &n, &ref);
    ok &= st == MF_OK && n == crop && sorted_unique(out, n, t.n);
    ok_ref &= ref >= 0 && has_partner(&t, ref, 15.0);
    ok_near &= ref >= 0 && is_k_nearest(&t, ref, out, n);
  }
  MF_TEST(ok, "interface: size, sorted");
  MF_TEST(ok_ref, "interface: the reference has another chain within 15 Å");
  MF_TEST(ok_near, "interface: the k nearest to the reference");
  free(iface);
  free(out);
  free_toks(&t);
}

static void test_choice(void) {
  const double w[3] = {0.2, 0.4, 0.4};
  int cnt[4] = {0};
  const int n = 40000;
  for (int s = 0; s < n; s++) cnt[mf_crop_choose(w, 12, mf_rng_stream((uint64_t)s, MF_RNG_CROP, 0))]++;
  int ok = 1;
  for (int k = 0; k < 3; k++) {
    double f = (double)cnt[k] / n, sd = sqrt(w[k] * (1 - w[k]) / n);
    ok &= fabs(f - w[k]) < 4.5 * sd;
  }
  MF_TEST(ok, "method frequencies %.4f/%.4f/%.4f ≈ 0.2/0.4/0.4", (double)cnt[0] / n,
          (double)cnt[1] / n, (double)cnt[2] / n);
  const double w2[3] = {0.25, 0.75, 0};
  int c2[4] = {0};
  for (int s = 0; s < n; s++) c2[mf_crop_choose(w2, 12, mf_rng_stream((uint64_t)s, MF_RNG_CROP, 0))]++;
  MF_TEST(c2[2] == 0 && fabs((double)c2[0] / n - 0.25) < 0.01,
          "distillation weights 0.25/0.75/0: no interface crops, %.4f contiguous", (double)c2[0] / n);

  /* through mf_crop_select on a structure with an interface: used == chosen */
  const int len[2] = {100, 100};
  toks t = make_toks(2, len, 15, 1.0, 41);
  mf_crop_tokens v = view(&t);
  int32_t *out = malloc((size_t)t.n * sizeof *out);
  int used[4] = {0}, same = 1;
  for (int s = 0; s < 3000; s++) {
    int64_t nn;
    mf_crop_info info;
    mf_crop_select(&v, 64, w, 2, mf_rng_stream((uint64_t)s, MF_RNG_CROP, 0), out, &nn, &info);
    used[info.used]++;
    same &= info.used == info.chosen && nn == 64;
    same &= (info.used == MF_CROP_CONTIGUOUS) == (info.ref < 0);
  }
  MF_TEST(same, "select: with an interface and resolved tokens no fallback happens");
  MF_TEST(fabs(used[0] / 3000.0 - 0.2) < 0.04 && fabs(used[2] / 3000.0 - 0.4) < 0.05,
          "select: used methods %d/%d/%d of 3000", used[0], used[1], used[2]);
  free(out);
  free_toks(&t);
}

static void test_edges(void) {
  const double w[3] = {0.2, 0.4, 0.4};
  const int len[3] = {30, 20, 10};
  toks t = make_toks(3, len, 30, 0.9, 51);
  mf_crop_tokens v = view(&t);
  int32_t out[64];
  int64_t n, ref;
  mf_crop_info info;
  int all = 1;
  for (int m = 0; m < 3; m++) {
    const int64_t crops[2] = {60, 1000};
    for (int c = 0; c < 2; c++) {
      mf_status st = m == 0   ? mf_crop_contiguous(&v, crops[c], 1, 2, out, &n)
                     : m == 1 ? mf_crop_spatial(&v, crops[c], 1, 2, out, &n, &ref)
                              : mf_crop_interface(&v, crops[c], 1, 2, out, &n, &ref);
      all &= st == MF_OK && n == 60;
      for (int64_t i = 0; i < n; i++) all &= out[i] == i;
    }
  }
  mf_crop_select(&v, 60, w, 1, 2, out, &n, &info);
  MF_TEST(all && n == 60 && info.used == MF_CROP_ALL, "crop >= N keeps every token, each method");

  /* single chain: interface falls back to spatial; contiguous is one span */
  const int l1[1] = {80};
  toks s = make_toks(1, l1, 10, 1.0, 52);
  mf_crop_tokens vs = view(&s);
  const double wi[3] = {0, 0, 1};
  mf_status st = mf_crop_select(&vs, 20, wi, 3, 4, out, &n, &info);
  MF_TEST(st == MF_OK && n == 20 && info.chosen == MF_CROP_INTERFACE &&
              info.used == MF_CROP_SPATIAL && info.ref >= 0 && is_k_nearest(&s, info.ref, out, n),
          "one chain: interface falls back to spatial");
  mf_crop_contiguous(&vs, 20, 3, 5, out, &n);
  MF_TEST(n == 20 && out[19] - out[0] == 19, "one chain: contiguous crop is one span");

  /* nothing resolved: spatial finds no reference, select falls back to contiguous */
  memset(s.res, 0, (size_t)s.n);
  st = mf_crop_spatial(&vs, 20, 3, 4, out, &n, &ref);
  MF_TEST(st == MF_OK && n == 0 && ref == -1, "all unresolved: spatial has no reference");
  const double ws[3] = {0, 1, 0};
  st = mf_crop_select(&vs, 20, ws, 3, 4, out, &n, &info);
  MF_TEST(st == MF_OK && n == 20 && info.used == MF_CROP_CONTIGUOUS && out[19] - out[0] == 19,
          "all unresolved: select falls back to a contiguous crop");
  mf_crop_tokens nocoord = {s.n, s.asym, NULL, NULL};
  st = mf_crop_select(&nocoord, 20, ws, 3, 4, out, &n, &info);
  MF_TEST(st == MF_OK && n == 20 && info.used == MF_CROP_CONTIGUOUS,
          "no coordinates: contiguous crops only");
  /* non-finite coordinates count as unresolved */
  memset(s.res, 1, (size_t)s.n);
  for (int64_t i = 0; i < s.n; i++)
    if (i != 7) s.x[3 * i] = NAN;
  st = mf_crop_spatial(&vs, 5, 3, 4, out, &n, &ref);
  MF_TEST(st == MF_OK && ref == 7 && n == 5 && out[0] == 0 && out[1] == 1 && out[4] == 7,
          "NaN centres are unresolved: reference 7, then the lowest indices");
  free_toks(&s);

  /* bad arguments are errors, not crashes */
  MF_TEST(mf_crop_contiguous(&v, 0, 1, 2, out, &n) == MF_ERR_CONFIG, "crop size 0 rejected");
  const double wb[3] = {-1, 1, 1}, wz[3] = {0, 0, 0};
  MF_TEST(mf_crop_select(&v, 10, wb, 1, 2, out, &n, NULL) == MF_ERR_CONFIG, "negative weight rejected");
  MF_TEST(mf_crop_select(&v, 10, wz, 1, 2, out, &n, NULL) == MF_ERR_CONFIG, "zero weights rejected");
  mf_crop_tokens bad = {5, NULL, NULL, NULL};
  MF_TEST(mf_crop_spatial(&bad, 2, 1, 2, out, &n, &ref) == MF_ERR_CONFIG, "missing asym_id rejected");
  mf_crop_tokens empty = {0, NULL, NULL, NULL};
  MF_TEST(mf_crop_select(&empty, 10, w, 1, 2, out, &n, &info) == MF_OK && n == 0,
          "N = 0 gives an empty crop");
  mf_error_clear();
  free_toks(&t);
}

/* ------------------------------------------------------------------ feature sets */

/* A small entry: 3 chains (tokens 0-5, 6-9, 10-11), token k has 1 + k%3 atoms, MSA S=5. */
static void make_entry(mf_feature_set *fs, int64_t *N_out, int64_t *Na_out) {
  const int64_t N = 12, S = 5;
  int32_t asym[12], cen[12], rtype[12];
  int64_t Na = 0;
  for (int k = 0; k < N; k++) Na += 1 + k % 3;
  int32_t *a2t = malloc((size_t)Na * 4), *uid = malloc((size_t)Na * 4);
  float *pos = malloc((size_t)Na * 12), *ref = malloc((size_t)Na * 12);
  uint8_t *cmask = malloc((size_t)Na), *rmask = malloc((size_t)Na);
  int64_t a = 0;
  for (int k = 0; k < N; k++) {
    asym[k] = k < 6 ? 0 : k < 10 ? 1 : 2;
    rtype[k] = 100 + k;
    cen[k] = (int32_t)a;
    for (int j = 0; j < 1 + k % 3; j++, a++) {
      a2t[a] = k;
      uid[a] = 1000 + k;
      pos[3 * a] = (float)(4.0 * k), pos[3 * a + 1] = (float)j, pos[3 * a + 2] = 0;
      ref[3 * a] = (float)j, ref[3 * a + 1] = (float)(2 * j), ref[3 * a + 2] = 1;
      cmask[a] = 1, rmask[a] = (uint8_t)(j != 2);
    }
  }
  uint8_t bonds[144], msa[60];
  for (int i = 0; i < 144; i++) bonds[i] = (uint8_t)i;
  for (int i = 0; i < 60; i++) msa[i] = (uint8_t)i;
  float prof[12 * 32];
  for (int i = 0; i < 12 * 32; i++) prof[i] = (float)i;
  mf_features_init(fs, "toy");
  mf_features_add(fs, "restype", MF_I32, 1, (int64_t[]){N}, rtype);
  mf_features_add(fs, "asym_id", MF_I32, 1, (int64_t[]){N}, asym);
  mf_features_add(fs, "token_centre_atom", MF_I32, 1, (int64_t[]){N}, cen);
  mf_features_add(fs, "token_bonds", MF_U8, 2, (int64_t[]){N, N}, bonds);
  mf_features_add(fs, "profile", MF_F32, 2, (int64_t[]){N, 32}, prof);
  mf_features_add(fs, "ref_pos", MF_F32, 2, (int64_t[]){Na, 3}, ref);
  mf_features_add(fs, "ref_mask", MF_U8, 1, (int64_t[]){Na}, rmask);
  mf_features_add(fs, "ref_space_uid", MF_I32, 1, (int64_t[]){Na}, uid);
  mf_features_add(fs, "atom_to_token", MF_I32, 1, (int64_t[]){Na}, a2t);
  mf_features_add(fs, "coordinate", MF_F32, 2, (int64_t[]){Na, 3}, pos);
  mf_features_add(fs, "coordinate_mask", MF_U8, 1, (int64_t[]){Na}, cmask);
  mf_features_add(fs, "msa", MF_U8, 2, (int64_t[]){S, N}, msa);
  mf_features_add(fs, "resolution", MF_F32, 1, (int64_t[]){1}, (float[]){2.5f});
  free(a2t), free(uid), free(pos), free(ref), free(cmask), free(rmask);
  *N_out = N, *Na_out = Na;
}

static void test_apply(void) {
  mf_feature_set fs;
  int64_t N, Na;
  make_entry(&fs, &N, &Na);
  char roles[MF_MAX_DIMS + 1];
  mf_crop_remap rm;
  mf_dtype dt;
  int nd;
  int64_t dims[MF_MAX_DIMS];
  MF_TEST(mf_crop_axes("msa", roles, &rm, &dt, &nd, dims) && !strcmp(roles, "ST") &&
              dt == MF_U8 && nd == 2, "axes of msa from MF_FEATURES: 'ST' u8");
  MF_TEST(mf_crop_axes("atom_to_token", roles, &rm, NULL, NULL, NULL) && !strcmp(roles, "A") &&
              rm == MF_REMAP_TOKEN, "atom_to_token: atom axis, token index values");
  MF_TEST(mf_crop_axes("profile", roles, NULL, NULL, &nd, dims) && !strcmp(roles, "T.") &&
              dims[1] == 32, "profile: (N, 32)");
  MF_TEST(!mf_crop_axes("resolution", roles, &rm, NULL, NULL, NULL) && roles[0] == 0,
          "unknown names are per-entry");

  mf_crop_config cfg;
  mf_crop_config_default(&cfg);
  cfg.crop_size = 5;
  cfg.max_msa_rows = 4;
  cfg.augment = 0;
  int ok_all = 1;
  for (uint64_t step = 0; step < 60; step++) {
    mf_crop_plan p;
    mf_feature_set out;
    mf_status st = mf_crop_plan_make(&fs, &cfg, 7, step, &p);
    if (st == MF_OK) st = mf_crop_apply(&fs, &p, NULL, &out);
    if (st != MF_OK) {
      MF_TEST(0, "apply failed: %s", mf_error_message());
      mf_crop_plan_free(&p);
      break;
    }
    int ok = p.n_tok == 5 && p.n_msa >= 1 && p.n_msa <= 4 && p.msa[0] == 0;
    const mf_feature *rt = mf_features_get(&out, "restype"), *tb = mf_features_get(&out, "token_bonds");
    const mf_feature *a2t = mf_features_get(&out, "atom_to_token"), *ce = mf_features_get(&out, "token_centre_atom");
    const mf_feature *co = mf_features_get(&out, "coordinate"), *ms = mf_features_get(&out, "msa");
    const mf_feature *pr = mf_features_get(&out, "profile"), *rs = mf_features_get(&out, "resolution");
    ok &= rt && rt->shape[0] == 5 && tb && tb->shape[0] == 5 && tb->shape[1] == 5;
    ok &= a2t && a2t->shape[0] == p.n_atom && ms && ms->shape[0] == p.n_msa && ms->shape[1] == 5;
    ok &= rs && ((float *)rs->data)[0] == 2.5f && pr && pr->shape[1] == 32;
    if (!ok) {
      MF_TEST(0, "step %llu: shapes", (unsigned long long)step);
      mf_features_free(&out), mf_crop_plan_free(&p);
      break;
    }
    for (int i = 0; i < 5; i++) {
      int32_t orig = p.tok[i];
      ok &= ((int32_t *)rt->data)[i] == 100 + orig;
      for (int j = 0; j < 5; j++)
        ok &= ((uint8_t *)tb->data)[i * 5 + j] == (uint8_t)(orig * N + p.tok[j]);
      for (int c = 0; c < 32; c++) ok &= ((float *)pr->data)[i * 32 + c] == (float)(orig * 32 + c);
      int32_t ca = ((int32_t *)ce->data)[i];
      ok &= ca >= 0 && ca < p.n_atom && ((int32_t *)a2t->data)[ca] == i;
      ok &= ((float *)co->data)[3 * ca] == (float)(4.0 * orig);
      for (int r = 0; r < p.n_msa; r++)
        ok &= ((uint8_t *)ms->data)[r * 5 + i] == (uint8_t)(p.msa[r] * N + orig);
    }
    for (int64_t a = 0; a < p.n_atom; a++) { /* atoms: those of the kept tokens, in order */
      int32_t t = ((int32_t *)a2t->data)[a];
      ok &= t >= 0 && t < 5 && (a == 0 || t >= ((int32_t *)a2t->data)[a - 1]);
    }
    int64_t expect_atoms = 0;
    for (int i = 0; i < 5; i++) expect_atoms += 1 + p.tok[i] % 3;
    ok &= expect_atoms == p.n_atom;
    ok_all &= ok;
    mf_features_free(&out);
    mf_crop_plan_free(&p);
  }
  MF_TEST(ok_all, "apply: tokens, (N, N), profile, atoms re-indexed, centre atoms, MSA columns");

  /* padded layout from the entry; masks and zero padding; write == apply */
  mf_crop_layout lay;
  cfg.augment = 1;
  mf_status st = mf_crop_layout_make(&fs, &cfg, &lay);
  MF_TEST(st == MF_OK && lay.N == 5 && lay.Na == 120 && lay.S == 4, "layout from an entry");
  mf_crop_plan p;
  mf_crop_plan_make(&fs, &cfg, 7, 3, &p);
  void *buf = malloc(lay.total);
  st = mf_crop_write(&fs, &p, &lay, buf);
  mf_feature_set out;
  mf_status st2 = mf_crop_apply(&fs, &p, &lay, &out);
  int same = st == MF_OK && st2 == MF_OK && out.n == lay.n;
  for (int i = 0; same && i < lay.n; i++)
    same &= !strcmp(out.f[i].name, lay.f[i].name) &&
            !memcmp(out.f[i].data, (char *)buf + lay.f[i].offset, lay.f[i].nbytes);
  MF_TEST(same, "crop_write and crop_apply agree byte for byte");
  const mf_crop_slot_feature *tm = mf_crop_layout_find(&lay, MF_CROP_F_TOKEN_PAD);
  const mf_crop_slot_feature *am = mf_crop_layout_find(&lay, MF_CROP_F_ATOM_PAD);
  const mf_crop_slot_feature *sm = mf_crop_layout_find(&lay, MF_CROP_F_MSA_PAD);
  float sum_t = 0, sum_a = 0, sum_s = 0;
  for (int i = 0; i < 5; i++) sum_t += ((float *)((char *)buf + tm->offset))[i];
  for (int i = 0; i < 120; i++) sum_a += ((float *)((char *)buf + am->offset))[i];
  for (int i = 0; i < 4; i++) sum_s += ((float *)((char *)buf + sm->offset))[i];
  MF_TEST(sum_t == 5 && sum_a == (float)p.n_atom && sum_s == (float)p.n_msa, "pad masks count the real rows");
  const mf_crop_slot_feature *cf = mf_crop_layout_find(&lay, "coordinate");
  int zero = 1;
  for (int64_t i = 3 * p.n_atom; i < 3 * 120; i++) zero &= ((float *)((char *)buf + cf->offset))[i] == 0;
  MF_TEST(zero && cf->shape[0] == 120, "padded atoms are zero");

  /* ref_pos: per uid a rigid motion of the centred conformer (distances kept); the
   * masked-out atom keeps its value */
  const mf_crop_slot_feature *rp = mf_crop_layout_find(&lay, "ref_pos");
  const float *rpo = (const float *)((char *)buf + rp->offset);
  const float *ref0 = mf_features_get(&fs, "ref_pos")->data;
  const uint8_t *rmask = mf_features_get(&fs, "ref_mask")->data;
  int rigid = 1, moved = 0;
  for (int64_t a = 0; a < p.n_atom; a++)
    for (int64_t b = 0; b < p.n_atom; b++) {
      int32_t oa = p.atom[a], ob = p.atom[b];
      if (((int32_t *)mf_features_get(&fs, "atom_to_token")->data)[oa] !=
              ((int32_t *)mf_features_get(&fs, "atom_to_token")->data)[ob] || !rmask[oa] || !rmask[ob])
        continue;
      double d0 = 0, d1 = 0;
      for (int k = 0; k < 3; k++) {
        d0 += pow(ref0[3 * oa + k] - ref0[3 * ob + k], 2);
        d1 += pow(rpo[3 * a + k] - rpo[3 * b + k], 2);
      }
      rigid &= fabs(sqrt(d0) - sqrt(d1)) < 1e-4;
      moved |= fabs(rpo[3 * a] - ref0[3 * oa]) > 1e-3;
    }
  /* different residue frames get different motions: some distance across uids changes */
  int across = 0;
  const int32_t *uidv = mf_features_get(&fs, "ref_space_uid")->data;
  for (int64_t a = 0; a < p.n_atom; a++)
    for (int64_t b = 0; b < p.n_atom; b++) {
      int32_t oa = p.atom[a], ob = p.atom[b];
      if (uidv[oa] == uidv[ob] || !rmask[oa] || !rmask[ob]) continue;
      double d0 = 0, d1 = 0;
      for (int k = 0; k < 3; k++) {
        d0 += pow(ref0[3 * oa + k] - ref0[3 * ob + k], 2);
        d1 += pow(rpo[3 * a + k] - rpo[3 * b + k], 2);
      }
      across |= fabs(sqrt(d0) - sqrt(d1)) > 0.1;
    }
  MF_TEST(across, "ref_pos: each ref_space_uid has its own rotation and translation");
  /* centring: with the translation removed, each group's masked atoms have mean 0 */
  {
    double maxc = 0;
    uint64_t stream = mf_rng_stream(3, MF_RNG_AUGMENT, 0);
    for (int64_t a = 0; a < p.n_atom; a++) {
      int32_t u = uidv[p.atom[a]];
      double c[3] = {0, 0, 0}, cnt = 0;
      for (int64_t b = 0; b < p.n_atom; b++)
        if (uidv[p.atom[b]] == u && rmask[p.atom[b]]) {
          for (int k = 0; k < 3; k++) c[k] += rpo[3 * b + k];
          cnt++;
        }
      if (cnt == 0) continue;
      for (int k = 0; k < 3; k++) {
        double tk = mf_rng_normal(7, stream, (uint64_t)(uint32_t)u * 8 + 4 + (uint64_t)k);
        maxc = fmax(maxc, fabs(c[k] / cnt - tk));
      }
    }
    MF_TEST(maxc < 1e-4, "ref_pos: groups centred, then translated by N(0, 1) (max dev %.2g)", maxc);
  }
  int kept = 1;
  for (int64_t a = 0; a < p.n_atom; a++)
    if (!rmask[p.atom[a]])
      for (int k = 0; k < 3; k++) kept &= rpo[3 * a + k] == ref0[3 * p.atom[a] + k];
  MF_TEST(rigid && moved && kept, "ref_pos: rigid per ref_space_uid, moved, masked atoms untouched");

  /* an entry that does not fit: wrong dtype */
  mf_feature_set bad;
  mf_features_init(&bad, "bad");
  for (int i = 0; i < fs.n; i++) {
    const mf_feature *f = &fs.f[i];
    if (!strcmp(f->name, "restype")) {
      mf_features_add(&bad, f->name, MF_F32, f->ndim, f->shape, NULL);
    } else mf_features_add(&bad, f->name, f->dtype, f->ndim, f->shape, f->data);
  }
  st = mf_crop_write(&bad, &p, &lay, buf);
  MF_TEST(st == MF_ERR_FORMAT && strstr(mf_error_message(), "restype"), "dtype mismatch: %s",
          mf_error_message());
  /* an atom_to_token out of range is a format error of the plan */
  ((int32_t *)mf_features_get(&bad, "atom_to_token")->data)[3] = 99;
  mf_crop_plan pb;
  MF_TEST(mf_crop_plan_make(&bad, &cfg, 1, 1, &pb) == MF_ERR_FORMAT, "atom_to_token out of range: %s",
          mf_error_message());
  mf_error_clear();
  mf_features_free(&bad);

  /* the contract layout holds every MF_FEATURES feature with its dtype */
  mf_crop_layout cl;
  st = mf_crop_layout_make(NULL, &cfg, &cl);
  const mf_crop_slot_feature *cm = st == MF_OK ? mf_crop_layout_find(&cl, "msa") : NULL;
  const mf_crop_slot_feature *cn = st == MF_OK ? mf_crop_layout_find(&cl, "ref_atom_name_chars") : NULL;
  MF_TEST(cm && cm->dtype == MF_U8 && cm->shape[0] == 4 && cm->shape[1] == 5 && cn &&
              cn->shape[0] == 120 && cn->shape[1] == 4 && cl.total % MF_ALIGN == 0,
          "contract layout: msa (4, 5) u8, ref_atom_name_chars (120, 4)");
  mf_crop_layout_free(&cl);
  free(buf);
  mf_features_free(&out);
  mf_crop_plan_free(&p);
  mf_crop_layout_free(&lay);
  mf_features_free(&fs);
}

/* ------------------------------------------------------------------ real entries */

/* The croppers on featurised entries of ../shared/data (centre atoms from coordinate and
 * token_centre_atom, resolved = token_resolved), checked as above. */
/* The ref_pos augmentation value by value: per uid group, centre on the masked atoms, the
 * rotation of mf_crop_random_rotation at 8·uid and translation normals 8·uid + 4..6
 * (mf_philox_normal), recomputed here in the documented order. */
static void test_augment_exact(void) {
  mf_feature_set fs;
  mf_features_init(&fs, "aug");
  const int64_t N = 3, Na = 6;
  int32_t asym[3] = {1, 1, 2}, a2t[6] = {0, 1, 1, 2, 2, 2}, uid[6] = {0, 5, 5, 9, 9, 9};
  uint8_t mask[6] = {1, 1, 1, 1, 0, 1};
  float pos[18];
  for (int i = 0; i < 18; i++) pos[i] = (float)(0.37 * i * i - 2.1 * i + 1.5);
  mf_features_add(&fs, "asym_id", MF_I32, 1, (int64_t[]){N}, asym);
  mf_features_add(&fs, "atom_to_token", MF_I32, 1, (int64_t[]){Na}, a2t);
  mf_features_add(&fs, "ref_pos", MF_F32, 2, (int64_t[]){Na, 3}, pos);
  mf_features_add(&fs, "ref_mask", MF_U8, 1, (int64_t[]){Na}, mask);
  mf_features_add(&fs, "ref_space_uid", MF_I32, 1, (int64_t[]){Na}, uid);
  mf_crop_config cfg;
  mf_crop_config_default(&cfg);
  int ok = 1;
  for (uint64_t step = 0; step < 20; step++) {
    mf_crop_plan p;
    mf_feature_set out;
    ok &= mf_crop_plan_make(&fs, &cfg, 11, step, &p) == MF_OK && p.n_atom == Na;
    ok &= mf_crop_apply(&fs, &p, NULL, &out) == MF_OK;
    const float *got = mf_features_get(&out, "ref_pos")->data;
    const uint64_t stream = mf_rng_stream(step, MF_RNG_AUGMENT, 0);
    for (int g = 0; g < 3; g++) {
      const int lo = g == 0 ? 0 : g == 1 ? 1 : 3, hi = g == 0 ? 1 : g == 1 ? 3 : 6;
      double c[3] = {0, 0, 0}, cnt = 0;
      for (int k = lo; k < hi; k++)
        if (mask[k]) {
          for (int a = 0; a < 3; a++) c[a] += pos[3 * k + a];
          cnt++;
        }
      for (int a = 0; a < 3; a++) c[a] /= cnt;
      const uint64_t base = 8u * (uint64_t)uid[lo];
      float R[9];
      mf_crop_random_rotation(11, stream, base, R);
      double tr[3];
      for (int a = 0; a < 3; a++) tr[a] = mf_philox_normal(11, stream, base + 4 + (uint64_t)a);
      for (int k = lo; k < hi; k++)
        for (int a = 0; a < 3; a++) {
          double x[3] = {pos[3 * k] - c[0], pos[3 * k + 1] - c[1], pos[3 * k + 2] - c[2]};
          float want = mask[k] ? (float)(R[3 * a] * x[0] + R[3 * a + 1] * x[1] +
                                         R[3 * a + 2] * x[2] + tr[a])
                               : pos[3 * k + a];
          ok &= memcmp(&want, &got[3 * k + a], sizeof want) == 0;
        }
    }
    mf_features_free(&out);
    mf_crop_plan_free(&p);
  }
  MF_TEST(ok, "ref_pos augmentation equals the documented rotation and translation, bit for "
          "bit, over 20 steps");
  mf_features_free(&fs);
}

static void test_real(void) {
  const char *ccd_path = "../shared/data/ccd/components_subset.cif.gz";
  struct stat sb;
  if (stat(ccd_path, &sb) != 0) {
    printf("test_crop: ../shared/data absent, real-entry part skipped\n");
    return;
  }
  mf_ccd ccd;
  if (mf_ccd_read(ccd_path, &ccd) != MF_OK) {
    MF_TEST(0, "CCD: %s", mf_error_message());
    return;
  }
  static const char *ids[] = {"1ay7", "1fez-assembly1", "1bna", "1a7g", "1crn"};
  mf_featurize_opts fo = {&ccd, NULL, 0};
  const double w[3] = {0.2, 0.4, 0.4};
  int n_entries = 0, ok_c = 1, ok_s = 1, ok_i = 1, ok_res = 1, n_iface = 0;
  for (size_t e = 0; e < sizeof ids / sizeof ids[0]; e++) {
    char path[256];
    snprintf(path, sizeof path, "../shared/data/mmcif/%s.cif.gz", ids[e]);
    mf_feature_set fs;
    if (stat(path, &sb) != 0) continue;
    if (mf_featurize_file(path, &fo, &fs) != MF_OK) {
      MF_TEST(0, "featurise %s: %s", ids[e], mf_error_message());
      continue;
    }
    n_entries++;
    const mf_feature *asym = mf_features_get(&fs, "asym_id"), *cen = mf_features_get(&fs, "token_centre_atom");
    const mf_feature *co = mf_features_get(&fs, "coordinate"), *tr = mf_features_get(&fs, "token_resolved");
    toks t = {0};
    t.n = asym->shape[0];
    t.asym = malloc((size_t)t.n * sizeof *t.asym);
    t.x = calloc((size_t)t.n * 3, sizeof *t.x);
    t.res = malloc((size_t)t.n);
    for (int64_t i = 0; i < t.n; i++) {
      int32_t c = ((const int32_t *)cen->data)[i];
      t.asym[i] = ((const int32_t *)asym->data)[i];
      t.res[i] = (uint8_t)(c >= 0 && ((const uint8_t *)tr->data)[i]);
      if (c >= 0) memcpy(t.x + 3 * i, (const float *)co->data + 3 * (int64_t)c, 12);
    }
    mf_crop_tokens v = view(&t);
    int32_t *out = malloc((size_t)(t.n + 1) * sizeof *out);
    const int64_t crop = t.n > 8 ? t.n * 2 / 3 : 4;
    for (uint64_t step = 0; step < 40; step++) {
      int64_t n;
      mf_crop_info info;
      mf_crop_select(&v, crop, w, 21, mf_rng_stream(step, MF_RNG_CROP, 0), out, &n, &info);
      int expect = (int)(crop < t.n ? crop : t.n);
      if (info.used == MF_CROP_CONTIGUOUS) ok_c &= n == expect && one_span_per_chain(&t, out, n);
      if (info.used == MF_CROP_SPATIAL || info.used == MF_CROP_INTERFACE) {
        ok_res &= info.ref >= 0 && t.res[info.ref];
        ok_s &= n == expect && sorted_unique(out, n, t.n) && is_k_nearest(&t, info.ref, out, n);
      }
      if (info.used == MF_CROP_INTERFACE) {
        n_iface++;
        ok_i &= has_partner(&t, info.ref, 15.0);
      }
      if (info.chosen == MF_CROP_INTERFACE && info.used != MF_CROP_INTERFACE) {
        uint8_t *fl = malloc((size_t)t.n);
        ok_i &= mf_crop_interface_tokens(&v, 15.0, fl) == 0; /* fell back: no interface */
        free(fl);
      }
    }
    free(out);
    free_toks(&t);
    mf_features_free(&fs);
  }
  MF_TEST(n_entries >= 4, "real entries featurised: %d", n_entries);
  MF_TEST(ok_c, "real entries: contiguous crops have one span per chain");
  MF_TEST(ok_res && ok_s, "real entries: spatial crops are the k nearest to a resolved reference");
  MF_TEST(ok_i && n_iface > 0, "real entries: interface references have another chain within "
          "15 Å (%d crops); fallbacks only without an interface", n_iface);
  mf_ccd_free(&ccd);
}

int main(void) {
  mf_test_begin("test_crop");
  test_contiguous();
  test_spatial();
  test_interface();
  test_choice();
  test_edges();
  test_apply();
  test_augment_exact();
  test_real();
  return mf_test_end();
}
