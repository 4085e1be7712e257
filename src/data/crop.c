/* crop.c — token croppers (contiguous, spatial, spatial-interface), MSA row subsampling
 * (a sparse Fisher-Yates: O(rows kept), not O(S)), ref_pos augmentation, and the
 * application of a crop plan to a feature set with padding to a static layout (leading-axis
 * features copied as runs of consecutive rows, each feature writing its own padding).
 * See crop.h for the contracts and the Philox stream layout.
 * Not here: threads, buffers, the cache (loader.c), the featuriser (featurize.c). */
#include "data/crop.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "data/featurize.h"

/* ------------------------------------------------------------------ random helpers */

#define IDX_METHOD 0u
#define IDX_SPATIAL_REF 1u
#define IDX_IFACE_REF 2u
#define IDX_SHUFFLE ((uint64_t)1 << 32)
#define IDX_CHUNK ((uint64_t)1 << 33)

/* 32 raw bits of element i of the stream. */
static uint32_t rbits(uint64_t seed, uint64_t stream, uint64_t i) {
  uint32_t w[4];
  mf_philox_block(seed, stream, i, w);
  return w[i & 3];
}

/* Uniform integer in [0, n), 1 <= n <= 2^32 (multiply-shift; bias < n / 2^32). */
static int64_t rbelow(uint64_t seed, uint64_t stream, uint64_t i, int64_t n) {
  return (int64_t)(((uint64_t)rbits(seed, stream, i) * (uint64_t)n) >> 32);
}

/* ------------------------------------------------------------------ croppers */

static mf_status check_tokens(const mf_crop_tokens *t, int64_t crop_size, const int32_t *out,
                              const int64_t *n_out) {
  if (!t || !n_out || !out || t->n < 0 || t->n >= INT32_MAX || crop_size < 1 ||
      (t->n > 0 && !t->asym_id))
    return mf_error_set(MF_ERR_CONFIG, "crop: bad arguments (N %lld, crop size %lld)",
                        t ? (long long)t->n : -1LL, (long long)crop_size);
  return MF_OK;
}

static void take_all(int64_t n, int32_t *out, int64_t *n_out) {
  for (int64_t i = 0; i < n; i++) out[i] = (int32_t)i;
  *n_out = n;
}

/* The start of the spatial and interface croppers: checks the arguments, then clears *ref
 * (when given) and *n_out, and takes every token when the crop holds them all. Returns 1
 * when that settles it (*st: the result), 0 when the caller goes on to crop (*st = MF_OK). */
static int crop_begin(const mf_crop_tokens *t, int64_t crop_size, int32_t *out, int64_t *n_out,
                      int64_t *ref, mf_status *st) {
  *st = check_tokens(t, crop_size, out, n_out);
  if (*st != MF_OK) return 1;
  if (ref) *ref = -1;
  *n_out = 0;
  if (crop_size >= t->n) {
    take_all(t->n, out, n_out);
    return 1;
  }
  return 0;
}

typedef struct {
  int32_t key, idx;
} key_idx;
static int cmp_key_idx(const void *a, const void *b) {
  const key_idx *x = a, *y = b;
  if (x->key != y->key) return (x->key > y->key) - (x->key < y->key);
  return (x->idx > y->idx) - (x->idx < y->idx);
}

typedef struct {
  int64_t start, len; /* run in the (asym, index)-sorted token order */
  int32_t first;      /* first token index of the chain */
} chain_run;
static int cmp_chain_first(const void *a, const void *b) {
  const chain_run *x = a, *y = b;
  return (x->first > y->first) - (x->first < y->first);
}

mf_status mf_crop_contiguous(const mf_crop_tokens *t, int64_t crop_size, uint64_t seed,
                             uint64_t stream, int32_t *out, int64_t *n_out) {
  mf_status st = check_tokens(t, crop_size, out, n_out);
  if (st != MF_OK) return st;
  const int64_t N = t->n;
  if (crop_size >= N) {
    take_all(N, out, n_out);
    return MF_OK;
  }
  /* chains: tokens sorted by (asym_id, index); runs of one asym_id, in order of first token */
  key_idx *ord = mf_malloc((size_t)N * sizeof *ord, "crop order");
  chain_run *ch = mf_malloc((size_t)N * sizeof *ch, "crop chains");
  uint8_t *keep = mf_calloc((size_t)N, "crop keep");
  if (!ord || !ch || !keep) {
    mf_free(ord), mf_free(ch), mf_free(keep);
    return MF_ERR_NOMEM;
  }
  for (int64_t i = 0; i < N; i++) ord[i] = (key_idx){t->asym_id[i], (int32_t)i};
  qsort(ord, (size_t)N, sizeof *ord, cmp_key_idx);
  int64_t C = 0;
  for (int64_t i = 0; i < N; i++) {
    if (i == 0 || ord[i].key != ord[i - 1].key) ch[C++] = (chain_run){i, 0, ord[i].idx};
    ch[C - 1].len++;
  }
  qsort(ch, (size_t)C, sizeof *ch, cmp_chain_first);
  for (int64_t c = C - 1; c > 0; c--) { /* Fisher-Yates */
    int64_t j = rbelow(seed, stream, IDX_SHUFFLE + (uint64_t)c, c + 1);
    chain_run tmp = ch[c];
    ch[c] = ch[j];
    ch[j] = tmp;
  }
  int64_t added = 0, remaining = N;
  for (int64_t k = 0; k < C && added < crop_size; k++) {
    const int64_t len = ch[k].len;
    remaining -= len;
    int64_t hi = crop_size - added < len ? crop_size - added : len;
    int64_t need = crop_size - added - remaining;
    int64_t lo = need < 0 ? 0 : need;
    if (lo > len) lo = len;
    int64_t L = lo + rbelow(seed, stream, IDX_CHUNK + 2 * (uint64_t)k, hi - lo + 1);
    int64_t s0 = rbelow(seed, stream, IDX_CHUNK + 2 * (uint64_t)k + 1, len - L + 1);
    for (int64_t i = s0; i < s0 + L; i++) keep[ord[ch[k].start + i].idx] = 1;
    added += L;
  }
  int64_t n = 0;
  for (int64_t i = 0; i < N; i++)
    if (keep[i]) out[n++] = (int32_t)i;
  *n_out = n;
  mf_free(ord), mf_free(ch), mf_free(keep);
  return MF_OK;
}

static int token_ok(const mf_crop_tokens *t, int64_t i) {
  if (!t->centre) return 0;
  if (t->resolved && !t->resolved[i]) return 0;
  const float *x = t->centre + 3 * i;
  return isfinite(x[0]) && isfinite(x[1]) && isfinite(x[2]);
}

typedef struct {
  double d;
  int32_t idx;
} dist_idx;
static int dist_less(const dist_idx *x, const dist_idx *y) {
  return x->d < y->d || (x->d == y->d && x->idx < y->idx);
}

/* Reorders d[0..n) so that d[0..k) are its k smallest in cmp_dist_idx order (any order
 * among them): quickselect, median-of-three pivots. */
static void select_first(dist_idx *d, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n - 1;
  while (k > 0 && k < n && hi > lo) {
    int64_t mid = lo + (hi - lo) / 2;
    /* median of three to d[mid] */
    if (dist_less(&d[mid], &d[lo])) { dist_idx t = d[mid]; d[mid] = d[lo]; d[lo] = t; }
    if (dist_less(&d[hi], &d[lo])) { dist_idx t = d[hi]; d[hi] = d[lo]; d[lo] = t; }
    if (dist_less(&d[hi], &d[mid])) { dist_idx t = d[hi]; d[hi] = d[mid]; d[mid] = t; }
    dist_idx piv = d[mid];
    int64_t i = lo, j = hi;
    while (i <= j) { /* Hoare partition: [lo, j] <= piv <= [i, hi] */
      while (dist_less(&d[i], &piv)) i++;
      while (dist_less(&piv, &d[j])) j--;
      if (i <= j) {
        dist_idx t = d[i];
        d[i] = d[j], d[j] = t;
        i++, j--;
      }
    }
    if (k - 1 <= j) hi = j;        /* the k-th smallest lies left */
    else if (k - 1 >= i) lo = i;   /* ... or right */
    else return;                   /* between: d[0..k) are the smallest */
  }
}

/* The crop_size tokens nearest to ref, sorted ascending into out. */
static mf_status nearest(const mf_crop_tokens *t, int64_t ref, int64_t crop_size, int32_t *out,
                         int64_t *n_out) {
  const int64_t N = t->n;
  dist_idx *d = mf_malloc((size_t)N * sizeof *d, "crop distances");
  if (!d) return MF_ERR_NOMEM;
  const float *r = t->centre + 3 * ref;
  for (int64_t i = 0; i < N; i++) {
    d[i].idx = (int32_t)i;
    if (!token_ok(t, i)) {
      d[i].d = INFINITY;
      continue;
    }
    const float *x = t->centre + 3 * i;
    double dx = (double)x[0] - r[0], dy = (double)x[1] - r[1], dz = (double)x[2] - r[2];
    d[i].d = sqrt(dx * dx + dy * dy + dz * dz) + MF_CROP_TIE_BREAK * (double)i;
  }
  /* the crop_size first in (distance, index) order — a strict total order, so selecting
   * them (quickselect) gives the set a full sort would — then in index order */
  select_first(d, N, crop_size);
  uint8_t *in = mf_calloc((size_t)N, "crop nearest");
  if (!in) {
    mf_free(d);
    return MF_ERR_NOMEM;
  }
  for (int64_t i = 0; i < crop_size; i++) in[d[i].idx] = 1;
  int64_t k = 0;
  for (int64_t i = 0; i < N; i++)
    if (in[i]) out[k++] = (int32_t)i;
  *n_out = crop_size;
  mf_free(in);
  mf_free(d);
  return MF_OK;
}

mf_status mf_crop_spatial(const mf_crop_tokens *t, int64_t crop_size, uint64_t seed,
                          uint64_t stream, int32_t *out, int64_t *n_out, int64_t *ref) {
  mf_status st;
  if (crop_begin(t, crop_size, out, n_out, ref, &st)) return st;
  int64_t nres = 0;
  for (int64_t i = 0; i < t->n; i++) nres += token_ok(t, i);
  if (nres == 0) return MF_OK;
  int64_t pick = rbelow(seed, stream, IDX_SPATIAL_REF, nres), r = -1;
  for (int64_t i = 0; i < t->n; i++)
    if (token_ok(t, i) && pick-- == 0) {
      r = i;
      break;
    }
  if (ref) *ref = r;
  return nearest(t, r, crop_size, out, n_out);
}

int64_t mf_crop_interface_tokens(const mf_crop_tokens *t, double cutoff, uint8_t *is_iface) {
  const int64_t N = t->n;
  memset(is_iface, 0, (size_t)N);
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  int64_t m = 0;
  for (int64_t i = 0; i < N; i++) {
    if (!token_ok(t, i)) continue;
    m++;
    for (int a = 0; a < 3; a++) {
      double x = t->centre[3 * i + a];
      if (x < lo[a]) lo[a] = x;
      if (x > hi[a]) hi[a] = x;
    }
  }
  if (m == 0) return 0;
  /* cells at least `cutoff` wide, at most 64 per axis: neighbours lie in the 27 cells around */
  double h = cutoff;
  for (int a = 0; a < 3; a++)
    if ((hi[a] - lo[a]) / 64.0 > h) h = (hi[a] - lo[a]) / 64.0;
  int64_t nc[3];
  for (int a = 0; a < 3; a++) nc[a] = (int64_t)((hi[a] - lo[a]) / h) + 1;
  const int64_t ncell = nc[0] * nc[1] * nc[2];
  int64_t *start = mf_calloc((size_t)(ncell + 1) * sizeof *start, "crop grid");
  int32_t *cell_of = mf_malloc((size_t)N * sizeof *cell_of, "crop grid cells");
  int32_t *members = mf_malloc((size_t)m * sizeof *members, "crop grid members");
  if (!start || !cell_of || !members) {
    mf_free(start), mf_free(cell_of), mf_free(members);
    return -1;
  }
  for (int64_t i = 0; i < N; i++) {
    cell_of[i] = -1;
    if (!token_ok(t, i)) continue;
    int64_t c[3];
    for (int a = 0; a < 3; a++) {
      c[a] = (int64_t)(((double)t->centre[3 * i + a] - lo[a]) / h);
      if (c[a] >= nc[a]) c[a] = nc[a] - 1;
    }
    cell_of[i] = (int32_t)((c[0] * nc[1] + c[1]) * nc[2] + c[2]);
    start[cell_of[i] + 1]++;
  }
  for (int64_t c = 0; c < ncell; c++) start[c + 1] += start[c];
  {
    int64_t *fill = mf_malloc((size_t)ncell * sizeof *fill, "crop grid fill");
    if (!fill) {
      mf_free(start), mf_free(cell_of), mf_free(members);
      return -1;
    }
    memcpy(fill, start, (size_t)ncell * sizeof *fill);
    for (int64_t i = 0; i < N; i++)
      if (cell_of[i] >= 0) members[fill[cell_of[i]]++] = (int32_t)i;
    mf_free(fill);
  }
  const double c2 = cutoff * cutoff;
  int64_t count = 0;
  for (int64_t i = 0; i < N; i++) {
    if (cell_of[i] < 0) continue;
    int64_t ci = cell_of[i];
    int64_t cz = ci % nc[2], cy = (ci / nc[2]) % nc[1], cx = ci / (nc[1] * nc[2]);
    const float *x = t->centre + 3 * i;
    int found = 0;
    for (int64_t ax = cx - 1; ax <= cx + 1 && !found; ax++)
      for (int64_t ay = cy - 1; ay <= cy + 1 && !found; ay++)
        for (int64_t az = cz - 1; az <= cz + 1 && !found; az++) {
          if (ax < 0 || ay < 0 || az < 0 || ax >= nc[0] || ay >= nc[1] || az >= nc[2]) continue;
          int64_t c = (ax * nc[1] + ay) * nc[2] + az;
          for (int64_t k = start[c]; k < start[c + 1]; k++) {
            int32_t j = members[k];
            if (t->asym_id[j] == t->asym_id[i]) continue;
            const float *y = t->centre + 3 * (int64_t)j;
            double dx = (double)x[0] - y[0], dy = (double)x[1] - y[1], dz = (double)x[2] - y[2];
            if (dx * dx + dy * dy + dz * dz <= c2) {
              found = 1;
              break;
            }
          }
        }
    if (found) {
      is_iface[i] = 1;
      count++;
    }
  }
  mf_free(start), mf_free(cell_of), mf_free(members);
  return count;
}

mf_status mf_crop_interface(const mf_crop_tokens *t, int64_t crop_size, uint64_t seed,
                            uint64_t stream, int32_t *out, int64_t *n_out, int64_t *ref) {
  mf_status st;
  if (crop_begin(t, crop_size, out, n_out, ref, &st)) return st;
  if (!t->centre) return MF_OK;
  uint8_t *iface = mf_malloc((size_t)t->n + 1, "crop interface");
  if (!iface) return MF_ERR_NOMEM;
  int64_t ni = mf_crop_interface_tokens(t, MF_CROP_INTERFACE_CUTOFF, iface);
  if (ni < 0) {
    mf_free(iface);
    return MF_ERR_NOMEM;
  }
  if (ni == 0) {
    mf_free(iface);
    return MF_OK;
  }
  int64_t pick = rbelow(seed, stream, IDX_IFACE_REF, ni), r = -1;
  for (int64_t i = 0; i < t->n; i++)
    if (iface[i] && pick-- == 0) {
      r = i;
      break;
    }
  mf_free(iface);
  if (ref) *ref = r;
  return nearest(t, r, crop_size, out, n_out);
}

mf_crop_method mf_crop_choose(const double w[3], uint64_t seed, uint64_t stream) {
  double tot = 0;
  for (int k = 0; k < 3; k++) tot += w[k] > 0 ? w[k] : 0;
  double u = mf_philox_u01d(rbits(seed, stream, IDX_METHOD)) * tot, acc = 0;
  int last = 0;
  for (int k = 0; k < 3; k++) {
    if (!(w[k] > 0)) continue;
    acc += w[k];
    last = k;
    if (u < acc) return (mf_crop_method)k;
  }
  return (mf_crop_method)last;
}

mf_status mf_crop_select(const mf_crop_tokens *t, int64_t crop_size, const double w[3],
                         uint64_t seed, uint64_t stream, int32_t *out, int64_t *n_out,
                         mf_crop_info *info) {
  mf_status st = check_tokens(t, crop_size, out, n_out);
  if (st != MF_OK) return st;
  if (!w || !(w[0] >= 0 && w[1] >= 0 && w[2] >= 0) || !(w[0] + w[1] + w[2] > 0))
    return mf_error_set(MF_ERR_CONFIG, "crop: method weights must be >= 0, not all 0");
  mf_crop_info inf = {mf_crop_choose(w, seed, stream), MF_CROP_ALL, -1};
  if (crop_size >= t->n) {
    take_all(t->n, out, n_out);
  } else {
    *n_out = 0;
    mf_crop_method m = inf.chosen;
    if (m == MF_CROP_INTERFACE) {
      st = mf_crop_interface(t, crop_size, seed, stream, out, n_out, &inf.ref);
      if (st == MF_OK && *n_out == 0) m = MF_CROP_SPATIAL;
    }
    if (st == MF_OK && m == MF_CROP_SPATIAL) {
      st = mf_crop_spatial(t, crop_size, seed, stream, out, n_out, &inf.ref);
      if (st == MF_OK && *n_out == 0) m = MF_CROP_CONTIGUOUS;
    }
    if (st == MF_OK && m == MF_CROP_CONTIGUOUS)
      st = mf_crop_contiguous(t, crop_size, seed, stream, out, n_out);
    inf.used = m;
    if (m == MF_CROP_CONTIGUOUS) inf.ref = -1;
  }
  if (info) *info = inf;
  return st;
}

/* ------------------------------------------------------------------ random transforms */

/* The rotation of the unit quaternion along q (4 normals). */
static void rotation_of(const double qin[4], float R[9]) {
  double q[4] = {qin[0], qin[1], qin[2], qin[3]}, n2 = 0;
  for (int k = 0; k < 4; k++) n2 += q[k] * q[k];
  if (!(n2 > 1e-20)) { /* probability ~0; keep the identity */
    q[0] = 1, q[1] = q[2] = q[3] = 0, n2 = 1;
  }
  double s = 1.0 / sqrt(n2);
  double w = q[0] * s, x = q[1] * s, y = q[2] * s, z = q[3] * s;
  double M[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - w * z),     2 * (x * z + w * y),
                 2 * (x * y + w * z),     1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                 2 * (x * z - w * y),     2 * (y * z + w * x),     1 - 2 * (x * x + y * y)};
  for (int k = 0; k < 9; k++) R[k] = (float)M[k];
}

void mf_crop_random_rotation(uint64_t seed, uint64_t stream, uint64_t base, float R[9]) {
  double q[4];
  for (int k = 0; k < 4; k++) q[k] = mf_philox_normal(seed, stream, base + (uint64_t)k);
  rotation_of(q, R);
}

/* Normals base + 0..n-1 (base a multiple of 4), each bit-identical to mf_philox_normal, one
 * Philox block and one log per lane pair instead of one per number. */
static void normals4(uint64_t seed, uint64_t stream, uint64_t base, int n, float *out) {
  for (int b = 0; b < n; b += 4) {
    uint32_t w[4];
    mf_philox_block(seed, stream, base + (uint64_t)b, w);
    for (int pair = 0; pair < 4 && b + pair < n; pair += 2) {
      double u1 = mf_philox_u01d(w[pair]), u2 = mf_philox_u01d(w[pair + 1]);
      double r = sqrt(-2.0 * log(u1)), t = 6.283185307179586 * u2;
      out[b + pair] = (float)(r * cos(t));
      if (b + pair + 1 < n) out[b + pair + 1] = (float)(r * sin(t));
    }
  }
}

/* The pool of the row draw (position i holds row i + 1 until swapped), sparse: an
 * open-addressing map (position -> row) of the positions touched so far. */
typedef struct {
  int64_t *key;
  int32_t *val;
  uint64_t mask;
} swap_map;

/* The slot of position pos, created holding its initial value pos + 1 when absent. */
static int32_t *swap_slot(swap_map *m, int64_t pos) {
  uint64_t h = ((uint64_t)pos * 0x9E3779B97F4A7C15ull) >> 20;
  for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
    if (m->key[i] == pos) return &m->val[i];
    if (m->key[i] < 0) {
      m->key[i] = pos;
      m->val[i] = (int32_t)(pos + 1);
      return &m->val[i];
    }
  }
}

int64_t mf_crop_msa_rows(int64_t S, int64_t max_rows, uint64_t seed, uint64_t stream,
                         int32_t *rows) {
  if (S <= 0 || max_rows <= 0) return 0;
  int64_t k = 1 + rbelow(seed, stream, 0, S);
  if (k > max_rows) k = max_rows;
  rows[0] = 0;
  if (k == 1) return 1;
  /* partial Fisher-Yates over the pool rows 1..S-1 (pool[i] = i + 1 initially), with only
   * the touched positions stored: O(k) memory and time whatever S */
  uint64_t cap = 16;
  while (cap < 4 * (uint64_t)k) cap *= 2;
  swap_map m = {mf_malloc(cap * sizeof *m.key, "msa rows"),
                mf_malloc(cap * sizeof *m.val, "msa rows"), cap - 1};
  if (!m.key || !m.val) {
    mf_free(m.key), mf_free(m.val);
    return -1;
  }
  memset(m.key, 0xff, cap * sizeof *m.key); /* -1: empty */
  for (int64_t i = 0; i < k - 1; i++) {
    int64_t j = i + rbelow(seed, stream, 1 + (uint64_t)i, S - 1 - i);
    int32_t *pi = swap_slot(&m, i), *pj = swap_slot(&m, j); /* <= 2k of 4k slots used */
    int32_t tmp = *pi;
    *pi = *pj;
    *pj = tmp;
    rows[1 + i] = *pi; /* position i is final from here on */
  }
  mf_free(m.key), mf_free(m.val);
  /* ascending: the drawn rows are distinct values in [1, S), so a bitmap sorts them */
  uint64_t *bits = mf_calloc(((size_t)S + 63) / 64 * sizeof *bits, "msa rows");
  if (!bits) return -1;
  for (int64_t i = 1; i < k; i++) bits[rows[i] >> 6] |= (uint64_t)1 << (rows[i] & 63);
  int64_t o = 1;
  for (int64_t wd = 0; wd < (S + 63) / 64; wd++)
    for (uint64_t b = bits[wd]; b; b &= b - 1) rows[o++] = (int32_t)(wd * 64 + __builtin_ctzll(b));
  mf_free(bits);
  return k;
}

/* ------------------------------------------------------------------ the axis table */

typedef struct {
  const char *name;
  mf_dtype dtype;
  int ndim;
  const char *shape; /* "N", "Na,3", "S,N", ... */
} contract_row;

#define MF_CROP_ROW(name, dt, nd, shape, what) {#name, dt, nd, shape},
static const contract_row g_contract[] = {MF_FEATURES(MF_CROP_ROW)};
#undef MF_CROP_ROW
#define N_CONTRACT ((int)(sizeof g_contract / sizeof g_contract[0]))

static const struct {
  const char *name;
  mf_crop_remap remap;
} g_remap[] = {{"atom_to_token", MF_REMAP_TOKEN},
               {"token_centre_atom", MF_REMAP_ATOM},
               {"token_rep_atom", MF_REMAP_ATOM}};

int mf_crop_axes(const char *name, char roles[MF_MAX_DIMS + 1], mf_crop_remap *remap,
                 mf_dtype *dtype, int *ndim, int64_t dims[MF_MAX_DIMS]) {
  char r[MF_MAX_DIMS + 1] = "";
  int64_t dd[MF_MAX_DIMS] = {0};
  mf_crop_remap rm = MF_REMAP_NONE;
  const contract_row *row = NULL;
  for (int i = 0; i < N_CONTRACT && !row; i++)
    if (strcmp(g_contract[i].name, name) == 0) row = &g_contract[i];
  if (row) {
    const char *s = row->shape;
    for (int d = 0; d < row->ndim && d < MF_MAX_DIMS; d++) {
      size_t len = strcspn(s, ",");
      r[d] = (len == 1 && s[0] == 'N') ? 'T' : (len == 2 && !strncmp(s, "Na", 2)) ? 'A'
             : (len == 1 && s[0] == 'S') ? 'S' : '.';
      if (r[d] == '.') dd[d] = strtoll(s, NULL, 10);
      r[d + 1] = 0;
      s += len + (s[len] == ',');
    }
    for (size_t i = 0; i < sizeof g_remap / sizeof g_remap[0]; i++)
      if (strcmp(g_remap[i].name, name) == 0) rm = g_remap[i].remap;
  }
  if (roles) memcpy(roles, r, sizeof r);
  if (remap) *remap = rm;
  if (dtype) *dtype = row ? row->dtype : MF_F32;
  if (ndim) *ndim = row ? row->ndim : 0;
  if (dims) memcpy(dims, dd, sizeof dd);
  return row != NULL;
}

/* ------------------------------------------------------------------ config and plan */

void mf_crop_config_default(mf_crop_config *c) {
  memset(c, 0, sizeof *c);
  c->crop_size = 384;
  c->weights[0] = 0.2, c->weights[1] = 0.4, c->weights[2] = 0.4;
  c->max_msa_rows = 16384;
  c->atoms_pad = 0;
  c->augment = 1;
}

static int64_t atoms_pad_of(const mf_crop_config *c) {
  return c->atoms_pad > 0 ? c->atoms_pad : 24 * c->crop_size;
}

static mf_status check_config(const mf_crop_config *c) {
  if (!c || c->crop_size < 1 || c->crop_size >= INT32_MAX || c->max_msa_rows < 1 ||
      c->max_msa_rows >= INT32_MAX || c->atoms_pad < 0 || atoms_pad_of(c) >= INT32_MAX ||
      !(c->weights[0] >= 0 && c->weights[1] >= 0 && c->weights[2] >= 0) ||
      !(c->weights[0] + c->weights[1] + c->weights[2] > 0))
    return mf_error_set(MF_ERR_CONFIG,
                        "crop config: crop size, MSA rows, atom pad must be positive and the "
                        "method weights >= 0, not all 0");
  return MF_OK;
}

/* Value i of a numeric tensor as a double (masks of any dtype). */
static double fval(const mf_feature *f, int64_t i) {
  switch (f->dtype) {
  case MF_F32: return ((const float *)f->data)[i];
  case MF_F64: return ((const double *)f->data)[i];
  case MF_I32: return ((const int32_t *)f->data)[i];
  case MF_U8: return ((const uint8_t *)f->data)[i];
  case MF_BF16: return mf_f32_from_bf16(((const mf_bf16 *)f->data)[i]);
  }
  return 0;
}

void mf_crop_plan_free(mf_crop_plan *p) {
  if (!p) return;
  mf_free(p->tok), mf_free(p->atom), mf_free(p->msa), mf_free(p->tok_new), mf_free(p->atom_new);
  memset(p, 0, sizeof *p);
}

/* Centre-atom coordinates and resolved flags per token, when the entry has them. */
static mf_status token_centres(const mf_feature_set *fs, int64_t N, int64_t Na, float **centre,
                               uint8_t **resolved) {
  *centre = NULL, *resolved = NULL;
  const mf_feature *ci = mf_features_get(fs, MF_CROP_F_CENTRE);
  const mf_feature *pos = mf_features_get(fs, MF_CROP_F_POS);
  const mf_feature *res = mf_features_get(fs, MF_CROP_F_RESOLVED);
  if (!ci || !pos) return MF_OK; /* contiguous crops only */
  mf_status st = mf_features_expect(fs, MF_CROP_F_CENTRE, MF_I32, 1, (int64_t[]){N}, NULL);
  if (st == MF_OK)
    st = mf_features_expect(fs, MF_CROP_F_POS, MF_F32, 2, (int64_t[]){Na, 3}, NULL);
  if (st == MF_OK && res && (res->ndim != 1 || res->shape[0] != Na))
    st = mf_error_set(MF_ERR_FORMAT, "entry %s: '%s' is not (%lld)", fs->id, MF_CROP_F_RESOLVED,
                      (long long)Na);
  if (st != MF_OK) return st;
  float *c = mf_malloc((size_t)(3 * N + 1) * sizeof *c, "crop centres");
  uint8_t *r = mf_malloc((size_t)N + 1, "crop resolved");
  if (!c || !r) {
    mf_free(c), mf_free(r);
    return MF_ERR_NOMEM;
  }
  const int32_t *idx = ci->data;
  const float *x = pos->data;
  for (int64_t i = 0; i < N; i++) {
    int32_t a = idx[i];
    int ok = a >= 0 && a < Na && (!res || fval(res, a) > 0);
    r[i] = (uint8_t)ok;
    for (int k = 0; k < 3; k++) c[3 * i + k] = ok ? x[3 * (int64_t)a + k] : 0.0f;
  }
  *centre = c, *resolved = r;
  return MF_OK;
}

/* (Re)allocates *p to hold n int32 when its capacity *cap is smaller. */
static int plan_buf(int32_t **p, int64_t *cap, int64_t n, const char *what) {
  if (*p && *cap >= n) return 1;
  mf_free(*p);
  *p = mf_malloc((size_t)n * sizeof **p, what);
  *cap = *p ? n : 0;
  return *p != NULL;
}

static mf_status plan_make(const mf_feature_set *fs, const mf_crop_config *cfg, uint64_t seed,
                           uint64_t step, mf_crop_plan *p) {
  {
    mf_crop_plan keep = *p; /* the buffers and their capacities survive */
    memset(p, 0, sizeof *p);
    p->tok = keep.tok, p->atom = keep.atom, p->msa = keep.msa;
    p->tok_new = keep.tok_new, p->atom_new = keep.atom_new;
    memcpy(p->cap, keep.cap, sizeof p->cap);
  }
  mf_status st = check_config(cfg);
  if (st != MF_OK) return st;
  const mf_feature *asym, *a2t;
  st = mf_features_expect(fs, MF_CROP_F_ASYM, MF_I32, 1, NULL, &asym);
  if (st == MF_OK) st = mf_features_expect(fs, MF_CROP_F_ATOM_TOKEN, MF_I32, 1, NULL, &a2t);
  if (st != MF_OK) return st;
  const int64_t N = asym->shape[0], Na = a2t->shape[0];
  if (N >= INT32_MAX || Na >= INT32_MAX)
    return mf_error_set(MF_ERR_FORMAT, "entry %s: too many tokens or atoms", fs->id);
  const int32_t *att = a2t->data;
  for (int64_t a = 0; a < Na; a++)
    if (att[a] < 0 || att[a] >= N)
      return mf_error_set(MF_ERR_FORMAT, "entry %s: atom_to_token[%lld] = %d outside [0, %lld)",
                          fs->id, (long long)a, att[a], (long long)N);
  const mf_feature *msa = mf_features_get(fs, MF_CROP_F_MSA);
  int64_t S = 0;
  if (msa) {
    if (msa->ndim != 2 || msa->shape[1] != N)
      return mf_error_set(MF_ERR_FORMAT, "entry %s: '%s' is not (S, %lld)", fs->id,
                          MF_CROP_F_MSA, (long long)N);
    S = msa->shape[0];
  }
  p->N = N, p->Na = Na, p->S = S, p->seed = seed, p->step = step, p->augment = cfg->augment;
  p->info = (mf_crop_info){MF_CROP_ALL, MF_CROP_ALL, -1};

  float *centre = NULL;
  uint8_t *resolved = NULL;
  st = token_centres(fs, N, Na, &centre, &resolved);
  if (st != MF_OK) return st;
  const int64_t ncap = (N < cfg->crop_size ? N : cfg->crop_size);
  const int64_t scap = (S < cfg->max_msa_rows ? S : cfg->max_msa_rows);
  if (!plan_buf(&p->tok, &p->cap[0], ncap + 1, "crop tokens") ||
      !plan_buf(&p->tok_new, &p->cap[1], N + 1, "crop token map") ||
      !plan_buf(&p->atom, &p->cap[2], Na + 1, "crop atoms") ||
      !plan_buf(&p->atom_new, &p->cap[3], Na + 1, "crop atom map") ||
      !plan_buf(&p->msa, &p->cap[4], scap + 1, "crop msa rows"))
    st = MF_ERR_NOMEM;
  if (st == MF_OK) {
    mf_crop_tokens t = {N, asym->data, centre, resolved};
    st = mf_crop_select(&t, cfg->crop_size, cfg->weights, seed,
                        mf_rng_stream(step, MF_RNG_CROP, 0), p->tok, &p->n_tok, &p->info);
  }
  mf_free(centre), mf_free(resolved);
  if (st != MF_OK) {
    mf_crop_plan_free(p);
    return st;
  }
  for (int64_t i = 0; i < N; i++) p->tok_new[i] = -1;
  for (int64_t i = 0; i < p->n_tok; i++) p->tok_new[p->tok[i]] = (int32_t)i;
  for (int64_t a = 0; a < Na; a++) {
    p->atom_new[a] = -1;
    if (p->tok_new[att[a]] >= 0) {
      p->atom_new[a] = (int32_t)p->n_atom;
      p->atom[p->n_atom++] = (int32_t)a;
    }
  }
  p->n_msa = mf_crop_msa_rows(S, cfg->max_msa_rows, seed, mf_rng_stream(step, MF_RNG_MSA, 0),
                              p->msa);
  if (p->n_msa < 0) {
    mf_crop_plan_free(p);
    return MF_ERR_NOMEM;
  }
  return MF_OK;
}

mf_status mf_crop_plan_make(const mf_feature_set *fs, const mf_crop_config *cfg,
                            uint64_t seed, uint64_t step, mf_crop_plan *p) {
  memset(p, 0, sizeof *p);
  return plan_make(fs, cfg, seed, step, p);
}

mf_status mf_crop_plan_remake(const mf_feature_set *fs, const mf_crop_config *cfg,
                              uint64_t seed, uint64_t step, mf_crop_plan *p) {
  return plan_make(fs, cfg, seed, step, p);
}

/* ------------------------------------------------------------------ layout */

void mf_crop_layout_free(mf_crop_layout *lay) {
  if (!lay) return;
  mf_free(lay->f);
  memset(lay, 0, sizeof *lay);
}

const mf_crop_slot_feature *mf_crop_layout_find(const mf_crop_layout *lay, const char *name) {
  for (int i = 0; i < lay->n; i++)
    if (strcmp(lay->f[i].name, name) == 0) return &lay->f[i];
  return NULL;
}

static int is_pad_mask(const char *name) {
  return !strcmp(name, MF_CROP_F_TOKEN_PAD) || !strcmp(name, MF_CROP_F_ATOM_PAD) ||
         !strcmp(name, MF_CROP_F_MSA_PAD);
}

/* The padded size of a dim with role r (0 for a kept dim). */
static int64_t pad_of(char r, int64_t N, int64_t Na, int64_t S) {
  return r == 'T' ? N : r == 'A' ? Na : r == 'S' ? S : 0;
}

mf_status mf_crop_layout_make(const mf_feature_set *ref, const mf_crop_config *cfg,
                              mf_crop_layout *lay) {
  memset(lay, 0, sizeof *lay);
  mf_status st = check_config(cfg);
  if (st != MF_OK) return st;
  lay->N = cfg->crop_size, lay->Na = atoms_pad_of(cfg), lay->S = cfg->max_msa_rows;
  const int nf = ref ? ref->n : N_CONTRACT;
  lay->f = mf_calloc((size_t)(nf + 3) * sizeof *lay->f, "crop layout");
  if (!lay->f) return MF_ERR_NOMEM;
  size_t off = 0;
  for (int i = 0; i < nf + 3; i++) {
    mf_crop_slot_feature *o = &lay->f[lay->n];
    if (i < nf) {
      const char *name = ref ? ref->f[i].name : g_contract[i].name;
      char roles[MF_MAX_DIMS + 1];
      mf_crop_remap remap;
      int64_t dims[MF_MAX_DIMS];
      mf_crop_axes(name, roles, &remap, &o->dtype, &o->ndim, dims);
      if (ref) {
        o->dtype = ref->f[i].dtype, o->ndim = ref->f[i].ndim;
        memcpy(dims, ref->f[i].shape, sizeof dims);
      }
      if (is_pad_mask(name) || (int)strlen(roles) > o->ndim || (remap && o->dtype != MF_I32)) {
        st = mf_error_set(MF_ERR_FORMAT, "entry %s: feature '%s' (%s, rank %d) does not fit "
                          "the crop axes '%s'%s or clashes with a pad mask",
                          ref ? ref->id : "(contract)", name, mf_dtype_name(o->dtype), o->ndim,
                          roles, remap ? " (an i32 index)" : "");
        mf_crop_layout_free(lay);
        return st;
      }
      snprintf(o->name, sizeof o->name, "%s", name);
      memcpy(o->roles, roles, sizeof o->roles);
      o->remap = remap;
      for (int d = 0; d < o->ndim; d++) {
        int64_t pd = d < (int)strlen(roles) ? pad_of(roles[d], lay->N, lay->Na, lay->S) : 0;
        o->shape[d] = pd ? pd : dims[d];
      }
    } else {
      static const char *names[3] = {MF_CROP_F_TOKEN_PAD, MF_CROP_F_ATOM_PAD, MF_CROP_F_MSA_PAD};
      int k = i - nf;
      snprintf(o->name, sizeof o->name, "%s", names[k]);
      o->dtype = MF_F32, o->ndim = 1;
      o->shape[0] = k == 0 ? lay->N : k == 1 ? lay->Na : lay->S;
      o->pad_mask = k + 1;
    }
    size_t nb = mf_dtype_size(o->dtype);
    for (int d = 0; d < o->ndim; d++) nb *= (size_t)o->shape[d];
    o->offset = off, o->nbytes = nb;
    off += mf_align_up(nb);
    lay->n++;
  }
  lay->total = off;
  return MF_OK;
}

/* ------------------------------------------------------------------ gather */

typedef struct {
  const mf_crop_plan *p;
  const char *roles; /* leading-dim roles */
  int nroles, ndim, inner_dim; /* dims >= inner_dim form one contiguous block */
  const int64_t *sshape, *dshape;
  int64_t sstride[MF_MAX_DIMS], dstride[MF_MAX_DIMS]; /* in elements */
  size_t esz;
  mf_crop_remap remap;
  const uint8_t *src;
  uint8_t *dst;
  const struct crop_runs *runs; /* precomputed runs of the index lists (build_runs) */
} gather_ctx;

static int64_t role_count(const gather_ctx *g, int d) {
  char r = d < g->nroles ? g->roles[d] : '.';
  return r == 'T' ? g->p->n_tok : r == 'A' ? g->p->n_atom : r == 'S' ? g->p->n_msa : g->sshape[d];
}

static int64_t role_index(const gather_ctx *g, int d, int64_t i) {
  char r = d < g->nroles ? g->roles[d] : '.';
  return r == 'T' ? g->p->tok[i] : r == 'A' ? g->p->atom[i] : r == 'S' ? g->p->msa[i] : i;
}

static void gather_rec(const gather_ctx *g, int d, int64_t so, int64_t dof) {
  if (d == g->inner_dim) {
    int64_t n = g->inner_dim < g->ndim ? g->sstride[g->inner_dim] * g->sshape[g->inner_dim] : 1;
    if (g->remap == MF_REMAP_NONE) {
      memcpy(g->dst + (size_t)dof * g->esz, g->src + (size_t)so * g->esz, (size_t)n * g->esz);
    } else {
      const int32_t *s = (const int32_t *)g->src + so;
      int32_t *o = (int32_t *)g->dst + dof;
      const int32_t *map = g->remap == MF_REMAP_TOKEN ? g->p->tok_new : g->p->atom_new;
      int64_t lim = g->remap == MF_REMAP_TOKEN ? g->p->N : g->p->Na;
      for (int64_t k = 0; k < n; k++) o[k] = s[k] >= 0 && s[k] < lim ? map[s[k]] : -1;
    }
    return;
  }
  int64_t cnt = role_count(g, d);
  if (d + 1 == g->inner_dim && g->inner_dim == g->ndim && g->remap == MF_REMAP_NONE) {
    /* single elements (e.g. the columns of an (S, N) MSA row): a typed loop, not memcpy */
    const int64_t ss = g->sstride[d], ds = g->dstride[d];
    for (int64_t i = 0; i < cnt; i++) {
      int64_t si = so + role_index(g, d, i) * ss, di = dof + i * ds;
      switch (g->esz) {
      case 1: g->dst[di] = g->src[si]; break;
      case 2: ((uint16_t *)g->dst)[di] = ((const uint16_t *)g->src)[si]; break;
      case 4: ((uint32_t *)g->dst)[di] = ((const uint32_t *)g->src)[si]; break;
      default: memcpy(g->dst + (size_t)di * g->esz, g->src + (size_t)si * g->esz, g->esz);
      }
    }
    return;
  }
  for (int64_t i = 0; i < cnt; i++)
    gather_rec(g, d + 1, so + role_index(g, d, i) * g->sstride[d], dof + i * g->dstride[d]);
}

/* Fast path for the usual shapes: one or two leading axis roles (T, A or S), then kept dims
 * forming a contiguous block of B bytes per index. Rows are copied as runs of consecutive
 * source indices, and the padding of dst (beyond the kept rows / columns) is zeroed here, so
 * dst needs no zero fill beforehand. */
typedef struct {
  int32_t src, dst, len;
} run;

/* The runs of the plan's token, atom and MSA-row lists, computed once per write. */
struct crop_runs {
  const run *r[3];
  int64_t n[3];
};

static int64_t count_runs(const int32_t *idx, int64_t n) {
  int64_t k = n > 0;
  for (int64_t i = 1; i < n; i++) k += idx[i] != idx[i - 1] + 1;
  return k;
}

/* Runs of consecutive values of idx[0..n) into r (capacity n); returns their count. */
static int64_t make_runs(const int32_t *idx, int64_t n, run *r) {
  int64_t k = 0;
  for (int64_t i = 0; i < n;) {
    int64_t j = i + 1;
    while (j < n && idx[j] == idx[j - 1] + 1) j++;
    r[k++] = (run){idx[i], (int32_t)i, (int32_t)(j - i)};
    i = j;
  }
  return k;
}

/* dst[i] = src[idx[i]] for i < n, blocks of B bytes, by runs (or element-wise when the runs
 * are short). */
static void copy_rows(uint8_t *dst, const uint8_t *src, size_t B, const int32_t *idx, int64_t n,
                      const run *r, int64_t nr) {
  if (nr * 4 <= n || B > 16) {
    for (int64_t k = 0; k < nr; k++)
      memcpy(dst + (size_t)r[k].dst * B, src + (size_t)r[k].src * B, (size_t)r[k].len * B);
    return;
  }
  switch (B) {
  case 1:
    for (int64_t i = 0; i < n; i++) dst[i] = src[idx[i]];
    break;
  case 4:
    for (int64_t i = 0; i < n; i++) memcpy(dst + 4 * i, src + 4 * (size_t)idx[i], 4);
    break;
  case 12:
    for (int64_t i = 0; i < n; i++) memcpy(dst + 12 * i, src + 12 * (size_t)idx[i], 12);
    break;
  default:
    for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * B, src + (size_t)idx[i] * B, B);
  }
}

static const int32_t *role_list(const mf_crop_plan *p, char r, int64_t *n) {
  *n = r == 'T' ? p->n_tok : r == 'A' ? p->n_atom : p->n_msa;
  return r == 'T' ? p->tok : r == 'A' ? p->atom : p->msa;
}

/* 1 when done (the shape fits the fast path), 0 to fall back to gather_rec. */
static int gather_fast(const gather_ctx *g) {
  const int nr = g->inner_dim;
  if (nr < 1 || nr > 2) return 0;
  for (int d = 0; d < nr; d++)
    if (g->roles[d] != 'T' && g->roles[d] != 'A' && g->roles[d] != 'S') return 0;
  if (g->remap != MF_REMAP_NONE && (nr != 1 || g->esz != 4)) return 0;
  size_t B = g->esz; /* bytes of one index's block (the kept dims) */
  for (int d = nr; d < g->ndim; d++) B *= (size_t)g->sshape[d];
  int64_t n0, n1 = 0;
  const int32_t *i0 = role_list(g->p, g->roles[0], &n0), *i1 = NULL;
  if (nr == 2) i1 = role_list(g->p, g->roles[1], &n1);
  const int64_t P0 = g->dshape[0], P1 = nr == 2 ? g->dshape[1] : 0;
  if (nr == 1) {
    if (g->remap != MF_REMAP_NONE) {
      const int64_t per = (int64_t)(B / 4);
      const int32_t *map = g->remap == MF_REMAP_TOKEN ? g->p->tok_new : g->p->atom_new;
      const int64_t lim = g->remap == MF_REMAP_TOKEN ? g->p->N : g->p->Na;
      for (int64_t i = 0; i < n0; i++) {
        const int32_t *sp = (const int32_t *)g->src + (int64_t)i0[i] * per;
        int32_t *op = (int32_t *)g->dst + i * per;
        for (int64_t k = 0; k < per; k++) op[k] = sp[k] >= 0 && sp[k] < lim ? map[sp[k]] : -1;
      }
    } else {
      const int ri0 = g->roles[0] == 'T' ? 0 : g->roles[0] == 'A' ? 1 : 2;
      copy_rows(g->dst, g->src, B, i0, n0, g->runs->r[ri0], g->runs->n[ri0]);
    }
    memset(g->dst + (size_t)n0 * B, 0, (size_t)(P0 - n0) * B);
    return 1;
  }
  /* two roles: rows i0, columns i1 */
  const int ri1 = g->roles[1] == 'T' ? 0 : g->roles[1] == 'A' ? 1 : 2;
  const run *r = g->runs->r[ri1];
  const int64_t k = g->runs->n[ri1];
  const size_t srow = (size_t)g->sshape[1] * B, drow = (size_t)P1 * B;
  for (int64_t i = 0; i < n0; i++) {
    uint8_t *o = g->dst + (size_t)i * drow;
    copy_rows(o, g->src + (size_t)i0[i] * srow, B, i1, n1, r, k);
    memset(o + (size_t)n1 * B, 0, drow - (size_t)n1 * B);
  }
  memset(g->dst + (size_t)n0 * drow, 0, (size_t)(P0 - n0) * drow);
  return 1;
}

/* ref_pos (cropped rows 0..n_atom-1 of dst, (Na_pad, 3) f32) rotated and translated per
 * ref_space_uid group; atoms with ref_mask 0 keep their values. */
static mf_status augment_ref_pos(const mf_feature_set *fs, const mf_crop_plan *p, float *pos) {
  const mf_feature *uid, *mask = mf_features_get(fs, MF_CROP_F_REF_MASK);
  mf_status st = mf_features_expect(fs, MF_CROP_F_REF_UID, MF_I32, 1, (int64_t[]){p->Na}, &uid);
  if (st != MF_OK) return st;
  if (mask && (mask->ndim != 1 || mask->shape[0] != p->Na))
    return mf_error_set(MF_ERR_FORMAT, "entry %s: '%s' is not (%lld)", fs->id,
                        MF_CROP_F_REF_MASK, (long long)p->Na);
  const int64_t n = p->n_atom;
  if (n == 0) return MF_OK;
  /* per kept atom: its uid and whether ref_mask is set (1 without a mask) */
  key_idx *ord = mf_malloc((size_t)n * sizeof *ord, "augment order");
  uint8_t *on = mf_malloc((size_t)n, "augment mask");
  if (!ord || !on) {
    mf_free(ord), mf_free(on);
    return MF_ERR_NOMEM;
  }
  const int32_t *u = uid->data;
  const uint8_t *m8 = mask && mask->dtype == MF_U8 ? mask->data : NULL;
  int sorted = 1;
  for (int64_t r = 0; r < n; r++) {
    const int32_t a = p->atom[r];
    ord[r] = (key_idx){u[a], (int32_t)r};
    on[r] = (uint8_t)(!mask || (m8 ? m8[a] > 0 : fval(mask, a) > 0));
    if (r && ord[r].key < ord[r - 1].key) sorted = 0;
  }
  if (!sorted) qsort(ord, (size_t)n, sizeof *ord, cmp_key_idx); /* usually in order already */
  const uint64_t stream = mf_rng_stream(p->step, MF_RNG_AUGMENT, 0);
  for (int64_t g0 = 0, g1; g0 < n; g0 = g1) {
    int64_t n_on = 0;
    for (g1 = g0; g1 < n && ord[g1].key == ord[g0].key; g1++) n_on += on[ord[g1].idx];
    if (n_on == 0 && mask) continue; /* every atom keeps its value: nothing to draw */
    double c[3] = {0, 0, 0}, cnt = 0;
    for (int64_t k = g0; k < g1; k++) { /* the centre of the masked atoms */
      const int64_t r = ord[k].idx;
      if (!on[r]) continue;
      for (int a = 0; a < 3; a++) c[a] += pos[3 * r + a];
      cnt++;
    }
    for (int a = 0; a < 3; a++) c[a] /= cnt;
    const uint64_t base = (uint64_t)(uint32_t)ord[g0].key * 8u;
    float R[9], z[7]; /* indices 8·uid + 0..3 the quaternion, + 4..6 the translation */
    normals4(p->seed, stream, base, 7, z);
    rotation_of((const double[4]){z[0], z[1], z[2], z[3]}, R);
    double tr[3] = {z[4], z[5], z[6]};
    for (int64_t k = g0; k < g1; k++) {
      const int64_t r = ord[k].idx;
      if (!on[r]) continue;
      double x[3] = {pos[3 * r] - c[0], pos[3 * r + 1] - c[1], pos[3 * r + 2] - c[2]};
      for (int a = 0; a < 3; a++)
        pos[3 * r + a] =
            (float)(R[3 * a] * x[0] + R[3 * a + 1] * x[1] + R[3 * a + 2] * x[2] + tr[a]);
    }
  }
  mf_free(ord), mf_free(on);
  return MF_OK;
}

/* Crops feature src of fs into dst (shape dshape; every byte written, padding zeroed).
 * lay_f: the feature's layout entry (its roles and remap precomputed), or NULL to look
 * them up; runs: the runs of the plan's lists (build_runs). */
static mf_status crop_feature(const mf_feature_set *fs, const mf_crop_plan *p,
                              const mf_feature *src, const int64_t *dshape, void *dst,
                              const mf_crop_slot_feature *lay_f, const struct crop_runs *runs) {
  char roles[MF_MAX_DIMS + 1];
  gather_ctx g = {0};
  if (lay_f) memcpy(roles, lay_f->roles, sizeof roles), g.remap = lay_f->remap;
  else mf_crop_axes(src->name, roles, &g.remap, NULL, NULL, NULL);
  g.runs = runs;
  g.p = p, g.roles = roles, g.nroles = (int)strlen(roles), g.ndim = src->ndim;
  g.sshape = src->shape, g.dshape = dshape, g.esz = mf_dtype_size(src->dtype);
  g.src = src->data, g.dst = dst;
  if (g.nroles > src->ndim || (g.remap && src->dtype != MF_I32))
    return mf_error_set(MF_ERR_FORMAT, "entry %s: feature '%s' does not fit crop axes '%s'",
                        fs->id, src->name, g.roles);
  for (int d = 0; d < src->ndim; d++) {
    char r = d < g.nroles ? g.roles[d] : '.';
    int64_t want = r == 'T' ? p->N : r == 'A' ? p->Na : r == 'S' ? p->S : dshape[d];
    int64_t used = role_count(&g, d);
    if (src->shape[d] != want || used > dshape[d])
      return mf_error_set(MF_ERR_SHAPE,
                          "entry %s: feature '%s' dim %d is %lld (%c axis: entry has %lld, "
                          "slot holds %lld, crop keeps %lld)", fs->id, src->name, d,
                          (long long)src->shape[d], r, (long long)want, (long long)dshape[d],
                          (long long)used);
  }
  g.inner_dim = g.nroles;
  while (g.inner_dim > 0 && g.roles[g.inner_dim - 1] == '.') g.inner_dim--;
  int64_t ss = 1, ds = 1;
  for (int d = src->ndim - 1; d >= 0; d--) {
    g.sstride[d] = ss, g.dstride[d] = ds;
    ss *= src->shape[d], ds *= dshape[d];
  }
  if (ss == 0 || !gather_fast(&g)) {
    size_t nb = g.esz;
    for (int d = 0; d < src->ndim; d++) nb *= (size_t)dshape[d];
    memset(dst, 0, nb);
    if (ss > 0) gather_rec(&g, 0, 0, 0);
  }
  if (p->augment && strcmp(src->name, MF_CROP_F_REF_POS) == 0) {
    if (src->dtype != MF_F32 || src->ndim != 2 || src->shape[1] != 3)
      return mf_error_set(MF_ERR_FORMAT, "entry %s: '%s' is not (Na, 3) f32", fs->id,
                          MF_CROP_F_REF_POS);
    return augment_ref_pos(fs, p, dst);
  }
  return MF_OK;
}

/* Ones for the kept entries, zeros for the rest of the mask's len entries. */
static void fill_pad_mask(const mf_crop_plan *p, const char *name, float *m, int64_t len) {
  int64_t n = !strcmp(name, MF_CROP_F_TOKEN_PAD)  ? p->n_tok
              : !strcmp(name, MF_CROP_F_ATOM_PAD) ? p->n_atom
                                                   : p->n_msa;
  for (int64_t i = 0; i < n; i++) m[i] = 1.0f;
  if (len > n) memset(m + n, 0, (size_t)(len - n) * sizeof *m);
}

static mf_status crop_write_runs(const mf_feature_set *fs, const mf_crop_plan *p,
                                 const mf_crop_layout *lay, void *buf,
                                 const struct crop_runs *runs);

/* The runs of the plan's token, atom and MSA-row lists into *runs, once for every feature:
 * in stack[0..nstack) when they fit, else in an mf_malloc'd block left in *heap (NULL
 * otherwise) for the caller to mf_free. */
static mf_status build_runs(const mf_crop_plan *p, struct crop_runs *runs, run *stack,
                            int64_t nstack, run **heap) {
  const int32_t *lists[3] = {p->tok, p->atom, p->msa};
  const int64_t lens[3] = {p->n_tok, p->n_atom, p->n_msa};
  int64_t cnt[3], tot = 0;
  for (int k = 0; k < 3; k++) tot += cnt[k] = count_runs(lists[k], lens[k]);
  run *rs = stack;
  *heap = NULL;
  if (tot > nstack && !(rs = *heap = mf_malloc((size_t)tot * sizeof *rs, "crop runs")))
    return MF_ERR_NOMEM;
  for (int64_t k = 0, at = 0; k < 3; k++) {
    runs->r[k] = rs + at;
    runs->n[k] = make_runs(lists[k], lens[k], rs + at);
    at += cnt[k];
  }
  return MF_OK;
}

mf_status mf_crop_write(const mf_feature_set *fs, const mf_crop_plan *p,
                        const mf_crop_layout *lay, void *buf) {
  run stack[1024], *heap;
  struct crop_runs runs;
  mf_status st = build_runs(p, &runs, stack, 1024, &heap);
  if (st == MF_OK) st = crop_write_runs(fs, p, lay, buf, &runs);
  mf_free(heap);
  return st;
}

static mf_status crop_write_runs(const mf_feature_set *fs, const mf_crop_plan *p,
                                 const mf_crop_layout *lay, void *buf,
                                 const struct crop_runs *runs) {
  /* every byte is written: each feature writes its padding, the gaps between are zeroed */
  size_t end = 0;
  for (int i = 0; i < lay->n; i++) {
    const mf_crop_slot_feature *o = &lay->f[i];
    uint8_t *dst = (uint8_t *)buf + o->offset;
    if (o->offset > end) memset((uint8_t *)buf + end, 0, o->offset - end);
    end = o->offset + o->nbytes;
    if (o->pad_mask) {
      fill_pad_mask(p, o->name, (float *)dst, o->shape[0]);
      continue;
    }
    /* entries usually hold the layout's features in its order */
    const mf_feature *src = i < fs->n && !strcmp(fs->f[i].name, o->name)
                                ? &fs->f[i]
                                : mf_features_get(fs, o->name);
    if (!src)
      return mf_error_set(MF_ERR_FORMAT, "entry %s: feature '%s' missing", fs->id, o->name);
    if (src->dtype != o->dtype || src->ndim != o->ndim)
      return mf_error_set(MF_ERR_FORMAT, "entry %s: feature '%s' is %s rank %d, the batch has "
                          "%s rank %d", fs->id, o->name, mf_dtype_name(src->dtype), src->ndim,
                          mf_dtype_name(o->dtype), o->ndim);
    mf_status st = crop_feature(fs, p, src, o->shape, dst, o, runs);
    if (st != MF_OK) return st;
  }
  if (lay->total > end) memset((uint8_t *)buf + end, 0, lay->total - end);
  return MF_OK;
}

mf_status mf_crop_apply(const mf_feature_set *fs, const mf_crop_plan *p,
                        const mf_crop_layout *lay, mf_feature_set *out) {
  mf_features_init(out, fs->id);
  run stack[1024], *heap;
  struct crop_runs runs;
  mf_status st = build_runs(p, &runs, stack, 1024, &heap);
  int n = lay ? lay->n : fs->n;
  for (int i = 0; i < n && st == MF_OK; i++) {
    const mf_feature *src;
    int64_t shape[MF_MAX_DIMS] = {0};
    if (lay) {
      const mf_crop_slot_feature *o = &lay->f[i];
      memcpy(shape, o->shape, sizeof shape);
      if (is_pad_mask(o->name)) {
        float *m = mf_features_add(out, o->name, MF_F32, 1, shape, NULL);
        if (!m) st = MF_ERR_NOMEM;
        else fill_pad_mask(p, o->name, m, shape[0]);
        continue;
      }
      src = mf_features_get(fs, o->name);
      if (!src) {
        st = mf_error_set(MF_ERR_FORMAT, "entry %s: feature '%s' missing", fs->id, o->name);
        break;
      }
      if (src->dtype != o->dtype || src->ndim != o->ndim) {
        st = mf_error_set(MF_ERR_FORMAT, "entry %s: feature '%s' differs from the layout",
                          fs->id, o->name);
        break;
      }
    } else {
      src = &fs->f[i];
      char roles[MF_MAX_DIMS + 1];
      mf_crop_axes(src->name, roles, NULL, NULL, NULL, NULL);
      for (int d = 0; d < src->ndim; d++) {
        char r = d < (int)strlen(roles) ? roles[d] : '.';
        shape[d] = r == 'T' ? p->n_tok : r == 'A' ? p->n_atom : r == 'S' ? p->n_msa : src->shape[d];
      }
    }
    void *dst = mf_features_add(out, src->name, src->dtype, src->ndim, shape, NULL);
    if (!dst) {
      st = MF_ERR_NOMEM; /* names, dtypes and shapes come from a valid set */
      break;
    }
    st = crop_feature(fs, p, src, shape, dst, lay ? &lay->f[i] : NULL, &runs);
  }
  mf_free(heap);
  if (st != MF_OK) mf_features_free(out);
  return st;
}
