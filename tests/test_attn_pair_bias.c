/* test_attn_pair_bias.c — the trunk's single attention with pair bias
 * (src/ops/cpu/attn_pair_bias.c) against a naive double implementation of the whole
 * module written here from the equations of docs/af3-spec.md §4.5 (full LN on s and z,
 * q with bias, k/v/g without, bias from LN_z(z)·W_zᵀ, -inf for padded keys, sigmoid gate,
 * output projection), plus finite-difference gradient checks of ds, dz and every
 * parameter, the ASSIGN/ACCUMULATE contract, NULL gradients, and what padded tokens may
 * and may not influence. Not a test of the attention op itself (test_attention.c).
 * Built in double (MF_REAL_DOUBLE). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ops/attn_pair_bias.h"

_Static_assert(sizeof(mf_real) == sizeof(double), "test_attn_pair_bias is built in double");

enum { P_LN_S_G, P_LN_S_B, P_W_Q, P_B_Q, P_W_K, P_W_V, P_W_G, P_LN_Z_G, P_LN_Z_B, P_W_Z, P_W_O, NP };
static const char *const pname[NP] = {"ln_s_g", "ln_s_b", "w_q", "b_q", "w_k", "w_v",
                                      "w_g",    "ln_z_g", "ln_z_b", "w_z", "w_o"};

typedef struct {
  int N, Cs, Cz, H, D;
  double *s, *z, *wout; /* inputs; wout = dL/dΔs */
  const uint8_t *mask;
  double *p[NP], *g[NP]; /* parameters and their gradients */
  int64_t psz[NP];
  mf_apb_weights w, dw;
  int64_t nsaved;
  double *out, *saved, *ds, *dz;
  double *tmp_out, *tmp_saved; /* gradcheck forward */
} mod_t;

static mf_apb_weights weights_of(double *const *a) {
  mf_apb_weights w;
  w.ln_s_g = a[P_LN_S_G];
  w.ln_s_b = a[P_LN_S_B];
  w.w_q = a[P_W_Q];
  w.b_q = a[P_B_Q];
  w.w_k = a[P_W_K];
  w.w_v = a[P_W_V];
  w.w_g = a[P_W_G];
  w.ln_z_g = a[P_LN_Z_G];
  w.ln_z_b = a[P_LN_Z_B];
  w.w_z = a[P_W_Z];
  w.w_o = a[P_W_O];
  return w;
}

static void setup(mod_t *m, int N, int Cs, int Cz, int H, int D, const uint8_t *mask,
                  uint64_t seed) {
  memset(m, 0, sizeof *m);
  m->N = N;
  m->Cs = Cs;
  m->Cz = Cz;
  m->H = H;
  m->D = D;
  m->mask = mask;
  const int64_t HD = (int64_t)H * D;
  const int64_t sz[NP] = {Cs, Cs, HD * Cs, HD, HD * Cs, HD * Cs, HD * Cs, Cz, Cz, (int64_t)H * Cz,
                          Cs * HD};
  /* LN γ around 1, β and b_q around 0, weights ~ 1/sqrt(fan_in) */
  const double scale[NP] = {0.3, 0.3, 1 / sqrt(Cs), 0.3, 1 / sqrt(Cs), 1 / sqrt(Cs), 1 / sqrt(Cs),
                            0.3, 0.3, 1 / sqrt(Cz), 1 / sqrt((double)HD)};
  for (int k = 0; k < NP; k++) {
    m->psz[k] = sz[k];
    m->p[k] = mf_test_alloc(sz[k]);
    m->g[k] = mf_test_alloc(sz[k]);
    mf_test_randn(m->p[k], sz[k], seed + 10 + (uint64_t)k, scale[k]);
    if (k == P_LN_S_G || k == P_LN_Z_G)
      for (int64_t x = 0; x < sz[k]; x++) m->p[k][x] += 1.0;
  }
  m->w = weights_of(m->p);
  m->dw = weights_of(m->g);
  m->s = mf_test_alloc((int64_t)N * Cs);
  m->z = mf_test_alloc((int64_t)N * N * Cz);
  m->wout = mf_test_alloc((int64_t)N * Cs);
  mf_test_randn(m->s, (int64_t)N * Cs, seed + 1, 1.0);
  mf_test_randn(m->z, (int64_t)N * N * Cz, seed + 2, 1.0);
  mf_test_randn(m->wout, (int64_t)N * Cs, seed + 3, 1.0);
  m->nsaved = mf_apb_saved_size(N, Cs, Cz, H, D);
  m->out = mf_test_alloc((int64_t)N * Cs);
  m->saved = mf_test_alloc(m->nsaved); /* exact size: ASan sees any overrun */
  m->ds = mf_test_alloc((int64_t)N * Cs);
  m->dz = mf_test_alloc((int64_t)N * N * Cz);
  m->tmp_out = mf_test_alloc((int64_t)N * Cs);
  m->tmp_saved = mf_test_alloc(m->nsaved);
}

/* ---------------------------------------------------------------- naive reference */

/* out (N, Cs) from the equations, all in double, logits materialised per (h, i). */
static void naive_apb(double *out, const mod_t *m) {
  const int N = m->N, Cs = m->Cs, Cz = m->Cz, H = m->H, D = m->D, HD = H * D;
  double *a = mf_test_alloc((int64_t)N * Cs), *zh = mf_test_alloc(Cz);
  double *q = mf_test_alloc((int64_t)N * HD), *k = mf_test_alloc((int64_t)N * HD);
  double *v = mf_test_alloc((int64_t)N * HD), *gp = mf_test_alloc((int64_t)N * HD);
  double *bias = mf_test_alloc((int64_t)H * N * N), *og = mf_test_alloc((int64_t)N * HD);
  double *lg = mf_test_alloc(N);
  for (int i = 0; i < N; i++)
    mf_test_ref_ln(a + i * Cs, m->s + i * Cs, m->p[P_LN_S_G], m->p[P_LN_S_B], Cs);
  for (int i = 0; i < N; i++)
    for (int o = 0; o < HD; o++) {
      double sq = m->p[P_B_Q][o], sk = 0, sv = 0, sg = 0;
      for (int c = 0; c < Cs; c++) {
        double x = a[i * Cs + c];
        sq += x * m->p[P_W_Q][o * Cs + c];
        sk += x * m->p[P_W_K][o * Cs + c];
        sv += x * m->p[P_W_V][o * Cs + c];
        sg += x * m->p[P_W_G][o * Cs + c];
      }
      q[i * HD + o] = sq;
      k[i * HD + o] = sk;
      v[i * HD + o] = sv;
      gp[i * HD + o] = sg;
    }
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      mf_test_ref_ln(zh, m->z + ((int64_t)i * N + j) * Cz, m->p[P_LN_Z_G], m->p[P_LN_Z_B], Cz);
      for (int h = 0; h < H; h++) {
        double b = 0;
        for (int c = 0; c < Cz; c++) b += zh[c] * m->p[P_W_Z][h * Cz + c];
        bias[((int64_t)h * N + i) * N + j] = b;
      }
    }
  for (int h = 0; h < H; h++)
    for (int i = 0; i < N; i++) {
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j < N; j++) {
        double l = 0;
        for (int d = 0; d < D; d++) l += q[i * HD + h * D + d] * k[j * HD + h * D + d];
        l = l / sqrt((double)D) + bias[((int64_t)h * N + i) * N + j];
        if (m->mask && !m->mask[j]) l = -INFINITY;
        lg[j] = l;
        mx = fmax(mx, l);
      }
      for (int j = 0; j < N; j++) {
        lg[j] = mx == -INFINITY ? 0.0 : exp(lg[j] - mx);
        sum += lg[j];
      }
      for (int d = 0; d < D; d++) {
        double o = 0;
        for (int j = 0; j < N; j++) o += (sum > 0 ? lg[j] / sum : 0.0) * v[j * HD + h * D + d];
        double gate = 1.0 / (1.0 + exp(-gp[i * HD + h * D + d]));
        og[i * HD + h * D + d] = gate * o;
      }
    }
  for (int i = 0; i < N; i++)
    for (int c = 0; c < Cs; c++) {
      double x = 0;
      for (int o = 0; o < HD; o++) x += og[i * HD + o] * m->p[P_W_O][c * HD + o];
      out[i * Cs + c] = x;
    }
}

/* ---------------------------------------------------------------- helpers */

static void forward(mod_t *m) {
  mf_test_poison(m->out, (int64_t)m->N * m->Cs);
  mf_test_poison(m->saved, m->nsaved);
  mf_apb_forward(m->out, m->saved, m->s, m->z, m->mask, &m->w, m->N, m->Cs, m->Cz, m->H, m->D);
}

static void backward(mod_t *m, double *ds, double *dz, const mf_apb_weights *dw) {
  mf_apb_backward(ds, dz, dw, m->wout, m->saved, m->s, m->z, m->mask, &m->w, m->N, m->Cs, m->Cz,
                  m->H, m->D);
}

static double loss_fn(void *ctx) {
  mod_t *m = ctx;
  mf_apb_forward(m->tmp_out, m->tmp_saved, m->s, m->z, m->mask, &m->w, m->N, m->Cs, m->Cz, m->H,
                 m->D);
  return mf_test_dot(m->tmp_out, m->wout, (int64_t)m->N * m->Cs);
}

static int all_zero(const double *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (x[i] != 0.0) return 0;
  return 1;
}

static int same(const double *a, const double *b, int64_t n) {
  return memcmp(a, b, (size_t)n * sizeof(double)) == 0;
}

static double *copy(const double *x, int64_t n) {
  double *y = mf_test_alloc(n);
  memcpy(y, x, (size_t)n * sizeof(double));
  return y;
}

/* ---------------------------------------------------------------- tests */

static void run_module(const char *name, int N, int Cs, int Cz, int H, int D, const uint8_t *mask,
                       uint64_t seed, int64_t max_checks) {
  mod_t m;
  setup(&m, N, Cs, Cz, H, D, mask, seed);
  const int64_t ns = (int64_t)N * Cs, nz = (int64_t)N * N * Cz;
  char what[256];

  /* forward vs naive: same maths in a different order, ~1e-15; tolerance 1e-12 */
  forward(&m);
  double *ref = mf_test_alloc(ns);
  naive_apb(ref, &m);
  snprintf(what, sizeof what, "%s: forward vs naive", name);
  mf_test_close(what, m.out, ref, ns, 1e-12);

  /* backward into zeroed parameter gradients, poisoned ds, dz */
  mf_test_poison(m.ds, ns);
  mf_test_poison(m.dz, nz);
  backward(&m, m.ds, m.dz, &m.dw);

  /* finite differences of L = Σ Δs·wout, h = 1e-6 in double: truncation ~h² and rounding
   * ~1e-16/h give ~1e-9 relative; tolerance 1e-6 */
  const double h = 1e-6, tol = 1e-6;
  snprintf(what, sizeof what, "%s: ds", name);
  mf_test_gradcheck(what, loss_fn, &m, m.s, m.ds, ns, max_checks, h, tol);
  snprintf(what, sizeof what, "%s: dz", name);
  mf_test_gradcheck(what, loss_fn, &m, m.z, m.dz, nz, 2 * max_checks, h, tol);
  for (int k = 0; k < NP; k++) {
    if (k == P_LN_Z_B) continue;
    snprintf(what, sizeof what, "%s: d%s", name, pname[k]);
    mf_test_gradcheck(what, loss_fn, &m, m.p[k], m.g[k], m.psz[k], max_checks, h, tol);
  }
  /* β of LN_z adds Σ_c β_c·W_z[h,c] to every logit of head h: a constant shift under the
   * softmax, so its true gradient is exactly 0 (finite differences are pure rounding
   * noise, ~1e-10, and a relative check is meaningless). The analytic one must be ~0. */
  double gb = 0;
  for (int64_t x = 0; x < m.psz[P_LN_Z_B]; x++) gb = fmax(gb, fabs(m.g[P_LN_Z_B][x]));
  MF_TEST(gb < 1e-12, "%s: dln_z_b = 0 (softmax shift invariance): max |g| %.3g", name, gb);

  /* contract: a second backward ASSIGNS ds, dz (same values) and ACCUMULATES parameter
   * gradients onto whatever is there */
  double *ds1 = copy(m.ds, ns), *dz1 = copy(m.dz, nz), *g1[NP], *pre[NP];
  for (int k = 0; k < NP; k++) {
    g1[k] = copy(m.g[k], m.psz[k]);
    pre[k] = mf_test_alloc(m.psz[k]);
    mf_test_randn(pre[k], m.psz[k], seed + 50 + (uint64_t)k, 1.0);
    memcpy(m.g[k], pre[k], (size_t)m.psz[k] * sizeof(double));
  }
  mf_test_randn(m.ds, ns, seed + 60, 1.0);
  mf_test_randn(m.dz, nz, seed + 61, 1.0);
  backward(&m, m.ds, m.dz, &m.dw);
  MF_TEST(same(m.ds, ds1, ns) && same(m.dz, dz1, nz), "%s: ds, dz assign", name);
  int acc_ok = 1;
  for (int k = 0; k < NP; k++)
    for (int64_t x = 0; x < m.psz[k]; x++)
      acc_ok &= fabs(m.g[k][x] - (pre[k][x] + g1[k][x])) <= 1e-13 * (1 + fabs(pre[k][x]));
  MF_TEST(acc_ok, "%s: parameter gradients accumulate", name);

  /* NULL gradients: skipping some changes none of the others */
  double *ds2 = mf_test_alloc(ns), *dz2 = mf_test_alloc(nz);
  mf_test_poison(ds2, ns);
  backward(&m, ds2, NULL, NULL);
  MF_TEST(same(ds2, ds1, ns), "%s: ds alone (dz, dw NULL) is the same", name);
  mf_test_poison(dz2, nz);
  backward(&m, NULL, dz2, NULL);
  MF_TEST(same(dz2, dz1, nz), "%s: dz alone (ds, dw NULL) is the same", name);
  double *gz = mf_test_alloc(Cz), *gwz = mf_test_alloc((int64_t)H * Cz);
  double *gwo = mf_test_alloc((int64_t)Cs * H * D);
  mf_apb_weights part;
  memset(&part, 0, sizeof part);
  part.ln_z_g = gz;
  part.w_z = gwz;
  part.w_o = gwo;
  backward(&m, NULL, NULL, &part);
  snprintf(what, sizeof what, "%s: dln_z_g with only some parameter gradients", name);
  mf_test_close(what, gz, g1[P_LN_Z_G], Cz, 1e-13);
  snprintf(what, sizeof what, "%s: dw_z with only some parameter gradients", name);
  mf_test_close(what, gwz, g1[P_W_Z], (int64_t)H * Cz, 1e-13);
  snprintf(what, sizeof what, "%s: dw_o with only some parameter gradients", name);
  mf_test_close(what, gwo, g1[P_W_O], (int64_t)Cs * H * D, 1e-13);

  if (!mask) return;
  /* padded tokens: as keys they are excluded exactly, so the pair entries z[i, p, :] get
   * exactly zero gradient and changing them changes nothing; s[p] still drives its own
   * query row p, and only that row */
  int dz_ok = 1, npad = 0;
  for (int j = 0; j < N; j++) {
    if (mask[j]) continue;
    npad++;
    for (int i = 0; i < N; i++) dz_ok &= all_zero(dz1 + ((int64_t)i * N + j) * Cz, Cz);
  }
  MF_TEST(npad > 0 && dz_ok, "%s: dz[:, padded, :] = 0 exactly (%d padded)", name, npad);
  double *out0 = copy(m.out, ns), *z0 = copy(m.z, nz), *s0 = copy(m.s, ns);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++)
      if (!mask[j])
        for (int c = 0; c < Cz; c++) m.z[((int64_t)i * N + j) * Cz + c] += 3.0 + c;
  forward(&m);
  MF_TEST(same(m.out, out0, ns), "%s: z[:, padded, :] has no influence", name);
  memcpy(m.z, z0, (size_t)nz * sizeof(double));
  int p = -1;
  for (int j = 0; j < N && p < 0; j++)
    if (!mask[j]) p = j;
  for (int c = 0; c < Cs; c++) m.s[(int64_t)p * Cs + c] += 2.0 + 0.1 * c;
  forward(&m);
  int rows_ok = 1;
  for (int i = 0; i < N; i++)
    if (i != p) rows_ok &= same(m.out + (int64_t)i * Cs, out0 + (int64_t)i * Cs, Cs);
  MF_TEST(rows_ok && !same(m.out + (int64_t)p * Cs, out0 + (int64_t)p * Cs, Cs),
          "%s: s[padded] changes its own row only", name);
  memcpy(m.s, s0, (size_t)ns * sizeof(double));
}

/* Every token padded: Δs = 0 and every gradient exactly 0, no NaN. */
static void test_all_padded(void) {
  static const uint8_t none[4] = {0, 0, 0, 0};
  mod_t m;
  setup(&m, 4, 8, 3, 2, 4, none, 900);
  forward(&m);
  MF_TEST(all_zero(m.out, 4 * 8), "all padded: update exactly 0");
  mf_test_poison(m.ds, 4 * 8);
  mf_test_poison(m.dz, 4 * 4 * 3);
  backward(&m, m.ds, m.dz, &m.dw);
  int ok = all_zero(m.ds, 4 * 8) && all_zero(m.dz, 4 * 4 * 3);
  for (int k = 0; k < NP; k++) ok &= all_zero(m.g[k], m.psz[k]);
  MF_TEST(ok, "all padded: ds, dz and all parameter gradients exactly 0");
}

static void fatal_dims(void *ctx) {
  (void)ctx;
  mf_apb_forward(NULL, NULL, NULL, NULL, NULL, NULL, 4, 8, 0, 2, 4);
}

int main(void) {
  mf_test_begin("test_attn_pair_bias");
  /* tokens 2 and 6 padded */
  static const uint8_t mask7[7] = {1, 1, 0, 1, 1, 1, 0};
  run_module("N7 Cs12 Cz5 H3 D4 mask", 7, 12, 5, 3, 4, mask7, 1000, 150);
  run_module("N5 Cs10 Cz4 H2 D3 (H*D != Cs)", 5, 10, 4, 2, 3, NULL, 2000, 150);
  static const uint8_t mask6[6] = {1, 0, 1, 1, 1, 1};
  run_module("N6 Cs8 Cz6 H4 D2 mask", 6, 8, 6, 4, 2, mask6, 3000, 150);
  test_all_padded();
  MF_TEST(mf_test_expect_fatal(fatal_dims, NULL, "attn_pair_bias dims"), "Cz = 0 is fatal: %s",
          mf_test_last_fatal());
  MF_TEST(mf_apb_saved_size(7, 12, 5, 3, 4) == 2 * 7 + 7 * 12 + 4 * 3 * 7 * 4 + 3 * 49 + 3 * 7 +
                                                  7 * 12,
          "saved size formula");
  return mf_test_end();
}
