/* test_attention_gpu.cu — GPU test of EvoFlash-3D (src/ops/cuda/attention.cu) against
 * the CPU reference (src/ops/cpu/attention.c, built in double: libmegafold_f64.a) on
 * fresh random bf16-representable inputs: out, lse and the five gradients (dq, dk, dv,
 * dbias, dgate) by relative error, every output poisoned with NaN before the run, and
 * two runs bit-identical. Shapes: N ∈ {1, 7, 63, 64, 65, 200, 384}, R ∈ {1, 5, N}, head
 * dims 32, 24, 48, 16, 8, random key masks with fully masked rows, with and without a
 * gate; the kernel variants: tensor cores (the default), the portable path, the three-pass
 * backward (6) and the fused dK/dV/dQ pass with its dQ accumulator forced into global
 * scratch (8; 10, 11: the other step schedules) or shared memory (9).
 * For R = N = 384 the double reference runs on a subset of the rows r (each r is an
 * independent attention), so dbias (a sum over every r) is checked there only through
 * the smaller shapes. Strided views (mf_attention_*_strided_cuda): q, k, v, gate as
 * column blocks [q | k | v | 8 pad | g] of one wide row-major matrix whose rows are the
 * (r, i) pairs in "starting" order (row r·N + i) or "ending" order (row i·R + r: the
 * strides swap), out in a matrix with 8 padding columns, dq, dk, dv, dgate written into a
 * second wide matrix whose g columns hold dout (dgate = dout in place, as triangle
 * attention uses it); the results go through the same checks, and every padding column of
 * the output matrices (and dout's columns when there is no gate) must be untouched.
 * A masking bias (-inf entries, whole -inf query rows) on the default kernels and the
 * variants. MF_ATT_TEST_SMALL=1 runs eleven small cases only (for
 * compute-sanitizer memcheck and racecheck). Needs a GPU; not a benchmark. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "ops/attention.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/device.h"
#include "ops/cuda/gpu.h"

#include "gpu_test_util.h"

/* bf16-representable random doubles (the GPU sees exactly these values). Not the shared
 * rand_bf16(…, offset 0.0): adding 0.0 would turn a −0 sample into +0. */
static void rand_bf16_plain(double *x, int64_t n, uint64_t seed, double scale) {
  mf_test_randn(x, n, seed, scale);
  for (int64_t i = 0; i < n; i++) x[i] = bf16r(x[i]);
}

static mf_bf16_t *to_dev(const double *x, int64_t n) {
  mf_bf16_t *d = NULL;
  MF_CHECK_CUDA(cudaMalloc(&d, (size_t)(n ? n : 1) * sizeof(mf_bf16)));
  up_bf16(d, x, n);
  return d;
}

static void *dev_poisoned(size_t bytes) {
  void *d = NULL;
  MF_CHECK_CUDA(cudaMalloc(&d, bytes ? bytes : 16));
  MF_CHECK_CUDA(cudaMemset(d, 0xff, bytes ? bytes : 16)); /* bf16 and fp32 NaN */
  return d;
}

/* Copies rows `rs` (nr of them) of x (B, R, inner) into y (B, nr, inner). */
static void take_rows(double *y, const double *x, int B, int R, int64_t inner, const int *rs, int nr) {
  for (int b = 0; b < B; b++)
    for (int i = 0; i < nr; i++)
      memcpy(y + ((int64_t)b * nr + i) * inner, x + ((int64_t)b * R + rs[i]) * inner,
             (size_t)inner * sizeof(double));
}

/* Relative error within tol; but where the reference is zero mathematically (one key:
 * the softmax is constant, so dq, dk and dbias vanish) the bf16 rounding of the O(1)
 * terms dP and Di that cancel is all that is left: there the RMS error must be <= tol. */
static void check_close(const char *what, const double *got, const double *ref, int64_t n,
                        double tol, int degenerate) {
  if (!degenerate) {
    mf_test_close(what, got, ref, n, tol);
    return;
  }
  double e2 = 0;
  for (int64_t i = 0; i < n; i++) e2 += (got[i] - ref[i]) * (got[i] - ref[i]);
  const double rms = n ? sqrt(e2 / (double)n) : 0;
  MF_TEST(rms <= tol, "%s: rms error %.3g of a zero gradient (tol %.1g)", what, rms, tol);
}

typedef struct {
  int B, R, H, N, D;
  int bias, mask, gate;
  int rsub; /* > 0: check only this many rows r against the reference (and not dbias) */
} att_case;

typedef struct {
  mf_bf16_t *out, *dq, *dk, *dv, *dbias, *dgate;
  float *lse;
} gpu_outs;

/* The backward with its prologue done here, as a caller of the prepared entry point does
 * (attention_cuda.h): dO = dout ⊙ σ(gate) (dout without a gate), dgate = dout·out·(1 − σ),
 * the side rows lse·log2(e) and Di = Σ_d dout·out in double (the padding rows by
 * mf_attention_side_rows_pad_cuda; the rest of the buffer poisoned first), packed views. */
static int g_prepared = 0;
static void run_prepared_backward(gpu_outs *o, const mf_attn_dims *d, const mf_bf16_t *q,
                                  const mf_bf16_t *k, const mf_bf16_t *v, const mf_bf16_t *bias,
                                  const uint8_t *mask, const mf_bf16_t *gate, const mf_bf16_t *dout) {
  const int64_t rows = (int64_t)d->B * d->R * d->H * d->Q, nq = rows * d->D;
  const int QP = mf_attention_side_rows_qp(*d);
  double *hout = mf_test_alloc(nq), *hdo = mf_test_alloc(nq), *hg = mf_test_alloc(nq);
  double *hdO = mf_test_alloc(nq), *hdg = mf_test_alloc(nq);
  from_bf16(hout, o->out, nq);
  from_bf16(hdo, dout, nq);
  if (gate) from_bf16(hg, gate, nq);
  float *hl = (float *)malloc((size_t)(rows ? rows : 1) * sizeof(float));
  MF_CHECK_PTR(hl);
  MF_CHECK_CUDA(cudaMemcpy(hl, o->lse, (size_t)rows * sizeof(float), cudaMemcpyDeviceToHost));
  const size_t sb = mf_attention_side_rows_bytes(*d);
  MF_TEST(sb >= (size_t)(rows / (d->Q ? d->Q : 1)) * 2 * QP * sizeof(float) && QP % 64 == 0 && QP >= d->Q,
          "side rows: %zu bytes, QP = %d for Q = %d", sb, QP, d->Q);
  float *side = (float *)malloc(sb ? sb : 1);
  MF_CHECK_PTR(side);
  memset(side, 0xff, sb); /* NaN poison: the padding rows must come from the pad function */
  for (int64_t row = 0; row < rows; row++) {
    const int64_t slab = row / d->Q, qi = row % d->Q;
    double di = 0;
    for (int c = 0; c < d->D; c++) {
      const int64_t i = row * d->D + c;
      const double sg = gate ? 1.0 / (1.0 + exp(-hg[i])) : 1.0;
      hdO[i] = hdo[i] * sg;
      hdg[i] = hdo[i] * hout[i] * (1.0 - sg);
      di += hdo[i] * hout[i];
    }
    side[slab * 2 * QP + qi] = isinf(hl[row]) && hl[row] < 0 ? INFINITY : hl[row] * 1.4426950408889634f;
    side[slab * 2 * QP + QP + qi] = (float)di;
  }
  float *side_d = (float *)dev_poisoned(sb ? sb : 16);
  MF_CHECK_CUDA(cudaMemcpy(side_d, side, sb, cudaMemcpyHostToDevice));
  mf_attention_side_rows_pad_cuda(side_d, *d, 0);
  mf_bf16_t *dO_d = to_dev(hdO, nq);
  if (gate) {
    MF_CHECK_CUDA(cudaFree(o->dgate));
    o->dgate = to_dev(hdg, nq);
  }
  const size_t ws = mf_attention_backward_prepared_cuda_workspace(*d);
  MF_TEST(ws < mf_attention_backward_cuda_workspace(*d, gate != NULL) || rows == 0,
          "prepared backward: workspace %zu below the strided one's", ws);
  void *w = dev_poisoned(ws ? ws : 16);
  mf_attn_views pv = mf_attn_packed_views(*d);
  mf_attention_backward_prepared_strided_cuda(o->dq, o->dk, o->dv, o->dbias, dO_d, side_d, q, k, v, bias,
                                              mask, *d, &pv, w, ws, 0);
  MF_CHECK_CUDA(cudaDeviceSynchronize());
  /* the padding rows: +inf and 0 */
  MF_CHECK_CUDA(cudaMemcpy(side, side_d, sb, cudaMemcpyDeviceToHost));
  int64_t badpad = 0;
  for (int64_t slab = 0; d->Q && slab < rows / d->Q; slab++)
    for (int qi = d->Q; qi < QP; qi++)
      badpad += !(side[slab * 2 * QP + qi] == INFINITY && side[slab * 2 * QP + QP + qi] == 0.0f);
  MF_TEST(badpad == 0, "prepared backward: %lld padding side rows not (+inf, 0)", (long long)badpad);
  free(side);
  free(hl);
  MF_CHECK_CUDA(cudaFree(w));
  MF_CHECK_CUDA(cudaFree(side_d));
  MF_CHECK_CUDA(cudaFree(dO_d));
}

static void run_gpu(gpu_outs *o, const mf_attn_dims *d, const mf_bf16_t *q, const mf_bf16_t *k,
                    const mf_bf16_t *v, const mf_bf16_t *bias, const uint8_t *mask,
                    const mf_bf16_t *gate, const mf_bf16_t *dout) {
  const int64_t nq = (int64_t)d->B * d->R * d->H * d->Q * d->D;
  const int64_t nk = (int64_t)d->B * d->R * d->H * d->K * d->D;
  const int64_t nb = (int64_t)d->B * d->H * d->Q * d->K;
  const int64_t nl = (int64_t)d->B * d->R * d->H * d->Q;
  o->out = (mf_bf16_t *)dev_poisoned(nq * 2);
  o->dq = (mf_bf16_t *)dev_poisoned(nq * 2);
  o->dk = (mf_bf16_t *)dev_poisoned(nk * 2);
  o->dv = (mf_bf16_t *)dev_poisoned(nk * 2);
  o->dbias = bias ? (mf_bf16_t *)dev_poisoned(nb * 2) : NULL;
  o->dgate = gate ? (mf_bf16_t *)dev_poisoned(nq * 2) : NULL;
  o->lse = (float *)dev_poisoned(nl * 4);
  mf_attention_forward_cuda(o->out, o->lse, q, k, v, bias, mask, gate, *d, 0);
  if (g_prepared) {
    run_prepared_backward(o, d, q, k, v, bias, mask, gate, dout);
    return;
  }
  size_t ws = mf_attention_backward_cuda_workspace(*d, gate != NULL);
  void *w = dev_poisoned(ws);
  mf_attention_backward_cuda(o->dq, o->dk, o->dv, o->dbias, o->dgate, dout, o->out, o->lse, q, k,
                             v, bias, mask, gate, *d, w, ws, 0);
  MF_CHECK_CUDA(cudaDeviceSynchronize());
  MF_CHECK_CUDA(cudaFree(w));
}

/* Strided layouts: 0 = packed (the plain entry points), 1 = starting-style rows, 2 =
 * ending-style rows (see the header comment). Wide row of (b, r, i): */
static int64_t wide_row(int mode, int B, int R, int N, int b, int r, int i) {
  (void)B;
  return mode == 1 ? ((int64_t)b * R + r) * N + i : ((int64_t)b * N + i) * R + r;
}
static mf_attn_stride wide_stride(int mode, int R, int N, int64_t ld, int D) {
  return mode == 1 ? mf_attn_stride{(int64_t)R * N * ld, (int64_t)N * ld, D, ld}
                   : mf_attn_stride{(int64_t)N * R * ld, ld, D, (int64_t)R * ld};
}

/* Number of elements of a packed (B, R, H, N, D) tensor (N = Q), and the index in wide
 * (rows, ld) at column off of its element t (packed order). */
static int64_t packed_count(const mf_attn_dims *d) {
  return (int64_t)d->B * d->R * d->H * d->Q * d->D;
}
static int64_t wide_index(int64_t t, int64_t ld, int64_t off, int mode, const mf_attn_dims *d) {
  const int c = (int)(t % d->D), i = (int)(t / d->D % d->Q), h = (int)(t / d->D / d->Q % d->H);
  const int64_t br = t / d->D / d->Q / d->H;
  const int r = (int)(br % d->R), b = (int)(br / d->R);
  return wide_row(mode, d->B, d->R, d->Q, b, r, i) * ld + off + h * d->D + c;
}
/* Scatters x (B, R, H, N, D) into the bf16 bits of wide (rows, ld) at column off. */
static void scatter_wide(uint16_t *wide, int64_t ld, int64_t off, const double *x, int mode,
                         const mf_attn_dims *d) {
  for (int64_t t = 0; t < packed_count(d); t++)
    wide[wide_index(t, ld, off, mode, d)] = mf_bf16_from_f32((float)x[t]);
}
/* The inverse: y (B, R, H, N, D) packed bf16 bits ← wide. */
static void gather_wide(uint16_t *y, const uint16_t *wide, int64_t ld, int64_t off, int mode,
                        const mf_attn_dims *d) {
  for (int64_t t = 0; t < packed_count(d); t++) y[t] = wide[wide_index(t, ld, off, mode, d)];
}

static mf_bf16_t *up_bits(const uint16_t *x, int64_t n) {
  mf_bf16_t *d = NULL;
  MF_CHECK_CUDA(cudaMalloc(&d, (size_t)(n ? n : 1) * 2));
  MF_CHECK_CUDA(cudaMemcpy(d, x, (size_t)n * 2, cudaMemcpyHostToDevice));
  return d;
}

/* The strided run (mode 1 or 2): inputs from the host values, outputs gathered back into
 * packed device buffers in o (as run_gpu's), after checking that the padding columns of
 * the output matrices (and dout, when no gate overwrites it) are unchanged. Q = K. */
static void run_gpu_strided(gpu_outs *o, const mf_attn_dims *d, int mode, const double *q,
                            const double *k, const double *v, const mf_bf16_t *bias,
                            const uint8_t *mask, const double *gate, const double *dout,
                            const char *tag) {
  const int HD = d->H * d->D;
  const int64_t rows = (int64_t)d->B * d->R * d->Q, ldp = 4 * HD + 8, ldo = HD + 8, goff = 3 * HD + 8;
  const int64_t nq = rows * HD, nb = (int64_t)d->B * d->H * d->Q * d->K, nl = rows * d->H;
  uint16_t *hp = (uint16_t *)malloc((size_t)(rows * ldp + 1) * 2);
  uint16_t *hg0 = (uint16_t *)malloc((size_t)(rows * ldp + 1) * 2);
  for (int64_t i = 0; i < rows * ldp; i++) {
    hp[i] = 0x7fc1; /* a NaN the kernels must never read */
    hg0[i] = 0xffff;
  }
  scatter_wide(hp, ldp, 0, q, mode, d);
  scatter_wide(hp, ldp, HD, k, mode, d);
  scatter_wide(hp, ldp, 2 * HD, v, mode, d);
  if (gate) scatter_wide(hp, ldp, goff, gate, mode, d);
  scatter_wide(hg0, ldp, goff, dout, mode, d);
  mf_bf16_t *P = up_bits(hp, rows * ldp), *G = up_bits(hg0, rows * ldp);
  mf_bf16_t *O = (mf_bf16_t *)dev_poisoned((size_t)rows * ldo * 2);
  o->lse = (float *)dev_poisoned(nl * 4);
  /* bias and dbias with a padded row stride (views.bias_row: K rounded up to 8, plus 8 so
   * that K % 8 == 0 is padded too); the bias padding holds NaN, which no logit may use,
   * and the dbias padding must stay unwritten */
  const int64_t bl = ((int64_t)d->K + 7) / 8 * 8 + 8, nbp = (int64_t)d->B * d->H * d->Q * bl;
  mf_bf16_t *bpad = NULL, *dbpad = NULL;
  if (bias) {
    bpad = (mf_bf16_t *)dev_poisoned((size_t)nbp * 2);
    dbpad = (mf_bf16_t *)dev_poisoned((size_t)nbp * 2);
    if (nb > 0)
      MF_CHECK_CUDA(cudaMemcpy2D(bpad, (size_t)bl * 2, bias, (size_t)d->K * 2, (size_t)d->K * 2,
                                 (size_t)d->B * d->H * d->Q, cudaMemcpyDeviceToDevice));
  }
  o->dbias = bias ? (mf_bf16_t *)dev_poisoned(nb * 2) : NULL;
  mf_attn_views vw;
  vw.bias_row = bl;
  const mf_attn_stride sp = wide_stride(mode, d->R, d->Q, ldp, d->D);
  vw.q = vw.k = vw.v = vw.gate = vw.dout = vw.dq = vw.dk = vw.dv = vw.dgate = sp;
  vw.out = wide_stride(mode, d->R, d->Q, ldo, d->D);
  const size_t ws = mf_attention_backward_strided_cuda_workspace(*d, gate != NULL);
  void *w = dev_poisoned(ws);
  mf_attention_forward_strided_cuda(O, o->lse, P, P + HD, P + 2 * HD, bpad, mask,
                                    gate ? P + goff : NULL, *d, &vw, 0);
  mf_attention_backward_strided_cuda(G, G + HD, G + 2 * HD, dbpad, gate ? G + goff : NULL,
                                     G + goff, O, o->lse, P, P + HD, P + 2 * HD, bpad, mask,
                                     gate ? P + goff : NULL, *d, &vw, w, ws, 0);
  MF_CHECK_CUDA(cudaDeviceSynchronize());
  MF_CHECK_CUDA(cudaFree(w));
  int64_t bad = 0;
  if (bias) { /* dbias back to the dense layout the checks use; its padding untouched */
    if (nb > 0)
      MF_CHECK_CUDA(cudaMemcpy2D(o->dbias, (size_t)d->K * 2, dbpad, (size_t)bl * 2,
                                 (size_t)d->K * 2, (size_t)d->B * d->H * d->Q,
                                 cudaMemcpyDeviceToDevice));
    uint16_t *hd = (uint16_t *)malloc((size_t)(nbp + 1) * 2);
    MF_CHECK_CUDA(cudaMemcpy(hd, dbpad, (size_t)nbp * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < nbp; i++) bad += (i % bl) >= d->K && hd[i] != 0xffff;
    free(hd);
    MF_CHECK_CUDA(cudaFree(bpad));
    MF_CHECK_CUDA(cudaFree(dbpad));
  }
  uint16_t *hg = (uint16_t *)malloc((size_t)(rows * ldp + 1) * 2);
  uint16_t *ho = (uint16_t *)malloc((size_t)(rows * ldo + 1) * 2);
  MF_CHECK_CUDA(cudaMemcpy(hg, G, (size_t)rows * ldp * 2, cudaMemcpyDeviceToHost));
  MF_CHECK_CUDA(cudaMemcpy(ho, O, (size_t)rows * ldo * 2, cudaMemcpyDeviceToHost));
  for (int64_t rr = 0; rr < rows; rr++) {
    for (int c = 3 * HD; c < goff; c++) bad += hg[rr * ldp + c] != 0xffff;
    if (!gate)
      for (int64_t c = goff; c < ldp; c++) bad += hg[rr * ldp + c] != hg0[rr * ldp + c];
    for (int64_t c = HD; c < ldo; c++) bad += ho[rr * ldo + c] != 0xffff;
  }
  MF_TEST(bad == 0, "%s: %lld elements outside the output views (or in dbias's row padding) written",
          tag, (long long)bad);
  uint16_t *y = (uint16_t *)malloc((size_t)(nq + 1) * 2);
  gather_wide(y, ho, ldo, 0, mode, d);
  o->out = up_bits(y, nq);
  gather_wide(y, hg, ldp, 0, mode, d);
  o->dq = up_bits(y, nq);
  gather_wide(y, hg, ldp, HD, mode, d);
  o->dk = up_bits(y, nq);
  gather_wide(y, hg, ldp, 2 * HD, mode, d);
  o->dv = up_bits(y, nq);
  o->dgate = NULL;
  if (gate) {
    gather_wide(y, hg, ldp, goff, mode, d);
    o->dgate = up_bits(y, nq);
  }
  MF_CHECK_CUDA(cudaFree(P));
  MF_CHECK_CUDA(cudaFree(G));
  MF_CHECK_CUDA(cudaFree(O));
  free(hp);
  free(hg0);
  free(hg);
  free(ho);
  free(y);
}

static void free_outs(gpu_outs *o) {
  void *ps[] = {o->out, o->dq, o->dk, o->dv, o->dbias, o->dgate, o->lse};
  for (int i = 0; i < 7; i++)
    if (ps[i]) MF_CHECK_CUDA(cudaFree(ps[i]));
}

static int same_bytes(const void *a, const void *b, size_t n) {
  if (!a && !b) return 1;
  char *ha = (char *)malloc(n ? n : 1), *hb = (char *)malloc(n ? n : 1);
  MF_CHECK_CUDA(cudaMemcpy(ha, a, n, cudaMemcpyDeviceToHost));
  MF_CHECK_CUDA(cudaMemcpy(hb, b, n, cudaMemcpyDeviceToHost));
  int ok = memcmp(ha, hb, n) == 0;
  free(ha);
  free(hb);
  return ok;
}

/* > 0: run_case_mode's first run takes the TMA kernels of this mask
 * (mf_attention_cuda_set_tma), its second run the cp.async kernels, so that the two-run
 * check compares them bit for bit; and the TMA kernels must have run where they apply
 * (D = 32; the forward: a bias with 16-byte rows; the dbias pass: a bias and R > 1). */
static int g_tma_ab = 0;
/* the softmax scale of run_case_mode's cases: g_scale_mul / √D (1 by default: AF3's scale,
 * which the D = 32 fused pass takes as an immediate; other values take its runtime path) */
static double g_scale_mul = 1.0;
/* run_case_mode's key masks: 0 random (each key valid with probability 0.8, so no 64-key
 * tile is all valid); 1 padding-style (row (b, r) valid on keys [0, L) with L = N on a
 * third of the rows, else L uniform in 1..N; an isolated invalid key 70 on every fifth
 * row), so that whole valid key tiles, partial ones and fully masked ones alternate */
static int g_mask_style = 0;
/* 1: a masking bias — about one bias entry in six is -inf, and every seventh query row of
 * head 0 is -inf on every key, so that those rows have no finite logit even where the key
 * mask lets keys through (attention.h: out 0, lse -inf, zero gradients, no NaN; dbias 0
 * wherever the bias is -inf) */
static int g_bias_inf = 0;

static void run_case_mode(const att_case *c, int variant, uint64_t seed, int mode) {
  mf_attention_cuda_set_variant(variant);
  const int B = c->B, R = c->R, H = c->H, N = c->N, D = c->D;
  mf_attn_dims d = {B, R, H, N, N, D, g_scale_mul / sqrt((double)D)};
  const int64_t nq = (int64_t)B * R * H * N * D, nb = (int64_t)B * H * N * N;
  const int64_t nl = (int64_t)B * R * H * N, nm = (int64_t)B * R * N;
  double *q = mf_test_alloc(nq), *k = mf_test_alloc(nq), *v = mf_test_alloc(nq);
  double *bias = mf_test_alloc(nb), *gate = mf_test_alloc(nq), *dout = mf_test_alloc(nq);
  rand_bf16_plain(q, nq, seed + 1, 1.0);
  rand_bf16_plain(k, nq, seed + 2, 1.0);
  rand_bf16_plain(v, nq, seed + 3, 1.0);
  rand_bf16_plain(bias, nb, seed + 4, 1.0);
  rand_bf16_plain(gate, nq, seed + 5, 1.0);
  rand_bf16_plain(dout, nq, seed + 6, 1.0);
  if (g_bias_inf) {
    double *w = mf_test_alloc(nb);
    mf_test_randu(w, nb, seed + 8, 0.0, 1.0);
    for (int64_t i = 0; i < nb; i++)
      if (w[i] < 1.0 / 6) bias[i] = -INFINITY;
    for (int b = 0; b < B; b++)
      for (int i = 0; i < N; i += 7)
        for (int j = 0; j < N; j++) bias[(((int64_t)b * H) * N + i) * N + j] = -INFINITY;
  }
  uint8_t *mask = (uint8_t *)malloc((size_t)(nm ? nm : 1));
  double *u = mf_test_alloc(nm);
  mf_test_randu(u, nm, seed + 7, 0.0, 1.0);
  for (int64_t i = 0; i < nm; i++) mask[i] = u[i] < 0.8;
  if (g_mask_style == 1)
    for (int64_t row = 0; row < (int64_t)B * R; row++) {
      const double w = u[row * N]; /* this row's draw */
      const int L = w < 1.0 / 3 ? N : 1 + (int)((w - 1.0 / 3) * 1.5 * N) % N;
      for (int j = 0; j < N; j++) mask[row * N + j] = j < L;
      if (row % 5 == 4 && N > 70) mask[row * N + 70] = 0;
    }
  if (c->mask && R > 1) /* row r = 1 of every batch fully masked */
    for (int b = 0; b < B; b++) memset(mask + ((int64_t)b * R + 1) * N, 0, (size_t)N);
  if (c->mask && R == 1 && N > 1) mask[0] = 1; /* keep some valid key */

  mf_bf16_t *dq_ = to_dev(q, nq), *dk_ = to_dev(k, nq), *dv_ = to_dev(v, nq);
  mf_bf16_t *db_ = c->bias ? to_dev(bias, nb) : NULL, *dg_ = c->gate ? to_dev(gate, nq) : NULL;
  mf_bf16_t *ddo = to_dev(dout, nq);
  uint8_t *dm_ = NULL;
  if (c->mask) {
    MF_CHECK_CUDA(cudaMalloc(&dm_, (size_t)(nm ? nm : 1)));
    MF_CHECK_CUDA(cudaMemcpy(dm_, mask, (size_t)nm, cudaMemcpyHostToDevice));
  }
  char tag[160];
  static const char *vname[14] = {"mma",        "portable",   "v2",         "v3",
                                  "v4",         "v5",         "3-pass",     "fused",
                                  "fused-gmem", "fused-smem", "fused-g-s0", "fused-g-s2",
                                  "fused2",     "fused2-m2"};
  static const char *mname[3] = {"", " strided-starting", " strided-ending"};
  snprintf(tag, sizeof tag, "%s B=%d R=%d H=%d N=%d D=%d%s%s%s%s", vname[variant], B,
           R, H, N, D, c->bias ? (g_bias_inf ? " bias(-inf)" : " bias") : "", c->mask ? " mask" : "",
           c->gate ? " gate" : "", mname[mode]);
  gpu_outs g1, g2;
  if (g_prepared) {
    const size_t l = strlen(tag);
    snprintf(tag + l, sizeof tag - l, " prepared");
  }
  if (g_tma_ab) {
    const size_t l = strlen(tag);
    snprintf(tag + l, sizeof tag - l, " tma%d-vs-cp.async", g_tma_ab);
  }
  const long tma0 = mf_attention_cuda_tma_calls();
  const int tma_def = mf_attention_cuda_set_tma(g_tma_ab ? g_tma_ab : -1);
  if (!g_tma_ab) mf_attention_cuda_set_tma(tma_def);
  if (mode == 0) run_gpu(&g1, &d, dq_, dk_, dv_, db_, dm_, dg_, ddo);
  else run_gpu_strided(&g1, &d, mode, q, k, v, db_, dm_, c->gate ? gate : NULL, dout, tag);
  if (g_tma_ab) {
    const int rows16 = !c->bias || mode != 0 || N % 8 == 0; /* bias rows of 16-byte multiples */
    const long want = (D == 32 && (g_tma_ab & MF_ATT_TMA_FWD) && rows16) +
                      (D == 32 && (g_tma_ab & MF_ATT_TMA_DBIAS) && c->bias && R > 1) +
                      (D == 32 && (g_tma_ab & MF_ATT_TMA_FUSED) && variant == 8 && R > 1 && rows16);
    MF_TEST(mf_attention_cuda_tma_calls() - tma0 >= want, "%s: the TMA kernels ran (%ld of %ld)", tag,
            mf_attention_cuda_tma_calls() - tma0, want);
    mf_attention_cuda_set_tma(0);
  }
  if (mode == 0) run_gpu(&g2, &d, dq_, dk_, dv_, db_, dm_, dg_, ddo);
  else run_gpu_strided(&g2, &d, mode, q, k, v, db_, dm_, c->gate ? gate : NULL, dout, tag);
  mf_attention_cuda_set_tma(tma_def);

  /* reference, on all rows r or on a subset */
  int nr = c->rsub > 0 && c->rsub < R ? c->rsub : R;
  int *rs = (int *)malloc(sizeof(int) * (size_t)(nr ? nr : 1));
  for (int i = 0; i < nr; i++) rs[i] = nr == R ? i : (int)((int64_t)i * (R - 1) / (nr - 1));
  if (nr < R) rs[1] = 1; /* include the fully masked row */
  mf_attn_dims ds = d;
  ds.R = nr;
  const int64_t iq = (int64_t)H * N * D, il = (int64_t)H * N;
  const int64_t sq = (int64_t)B * nr * iq, sl = (int64_t)B * nr * il;
  double *sq_ = mf_test_alloc(sq), *sk = mf_test_alloc(sq), *sv = mf_test_alloc(sq);
  double *sg = mf_test_alloc(sq), *sdo = mf_test_alloc(sq);
  uint8_t *sm = (uint8_t *)malloc((size_t)B * nr * N + 1);
  take_rows(sq_, q, B, R, iq, rs, nr);
  take_rows(sk, k, B, R, iq, rs, nr);
  take_rows(sv, v, B, R, iq, rs, nr);
  take_rows(sg, gate, B, R, iq, rs, nr);
  take_rows(sdo, dout, B, R, iq, rs, nr);
  for (int b = 0; b < B; b++)
    for (int i = 0; i < nr; i++)
      memcpy(sm + ((int64_t)b * nr + i) * N, mask + ((int64_t)b * R + rs[i]) * N, (size_t)N);
  double *rout = mf_test_alloc(sq), *rlse = mf_test_alloc(sl), *rdq = mf_test_alloc(sq);
  double *rdk = mf_test_alloc(sq), *rdv = mf_test_alloc(sq), *rdg = mf_test_alloc(sq);
  double *rdb = mf_test_alloc(nb);
  const double *pb = c->bias ? bias : NULL, *pg = c->gate ? sg : NULL;
  const uint8_t *pm = c->mask ? sm : NULL;
  mf_attention_forward(rout, rlse, sq_, sk, sv, pb, pm, pg, ds);
  mf_attention_backward(rdq, rdk, rdv, c->bias && nr == R ? rdb : NULL, c->gate ? rdg : NULL, sdo,
                        rlse, sq_, sk, sv, pb, pm, pg, ds);

  /* GPU results, same rows */
  double *full = mf_test_alloc(nq), *got = mf_test_alloc(sq);
  char what[220];
#define CHECK_Q(dev, ref, name, degen)                                       \
  do {                                                                       \
    from_bf16(full, dev, nq);                                                \
    take_rows(got, full, B, R, iq, rs, nr);                                  \
    snprintf(what, sizeof what, "%s %s", tag, name);                         \
    check_close(what, got, ref, sq, 1e-2, degen);                            \
  } while (0)
  CHECK_Q(g1.out, rout, "out", 0);
  CHECK_Q(g1.dq, rdq, "dq", N == 1);
  CHECK_Q(g1.dk, rdk, "dk", N == 1);
  CHECK_Q(g1.dv, rdv, "dv", 0);
  if (c->gate) CHECK_Q(g1.dgate, rdg, "dgate", 0);
  if (c->bias) {
    double *gdb = mf_test_alloc(nb);
    from_bf16(gdb, g1.dbias, nb);
    if (nr == R) {
      snprintf(what, sizeof what, "%s dbias", tag);
      check_close(what, gdb, rdb, nb, N == 1 ? 2e-2 : 1e-2, N == 1); /* dbias: a sum of R noises */
    } else { /* no reference (a sum over all r): check it is written and finite */
      int64_t bad = 0;
      for (int64_t i = 0; i < nb; i++) bad += !isfinite(gdb[i]);
      MF_TEST(bad == 0, "%s dbias: %lld non-finite of %lld", tag, (long long)bad, (long long)nb);
    }
  }
  /* lse: the same -inf rows, finite values close */
  {
    float *hl = (float *)malloc((size_t)(nl ? nl : 1) * sizeof(float));
    MF_CHECK_CUDA(cudaMemcpy(hl, g1.lse, (size_t)nl * sizeof(float), cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    double maxerr = 0;
    for (int b = 0; b < B; b++)
      for (int i = 0; i < nr; i++)
        for (int64_t j = 0; j < il; j++) {
          const double gl = hl[((int64_t)b * R + rs[i]) * il + j], rl = rlse[((int64_t)b * nr + i) * il + j];
          if (isinf(rl) || isinf(gl)) bad += !(gl == rl);
          else if (!(fabs(gl - rl) <= 2e-2 * (1 + fabs(rl)))) bad++;
          else if (fabs(gl - rl) > maxerr) maxerr = fabs(gl - rl);
        }
    MF_TEST(bad == 0, "%s lse: %lld bad of %lld (max |err| %.2e)", tag, (long long)bad,
            (long long)sl, maxerr);
    free(hl);
  }
  /* determinism: a second run, bit for bit */
  const size_t bq = (size_t)nq * 2, bb = (size_t)nb * 2;
  int same = same_bytes(g1.out, g2.out, bq) && same_bytes(g1.lse, g2.lse, (size_t)nl * 4) &&
             same_bytes(g1.dq, g2.dq, bq) && same_bytes(g1.dk, g2.dk, bq) &&
             same_bytes(g1.dv, g2.dv, bq) && (!c->bias || same_bytes(g1.dbias, g2.dbias, bb)) &&
             (!c->gate || same_bytes(g1.dgate, g2.dgate, bq));
  MF_TEST(same, "%s: two runs bit-identical", tag);

  free_outs(&g1);
  free_outs(&g2);
  void *ins[] = {dq_, dk_, dv_, db_, dg_, ddo, dm_};
  for (int i = 0; i < 7; i++)
    if (ins[i]) MF_CHECK_CUDA(cudaFree(ins[i]));
  free(mask);
  free(sm);
  free(rs);
  mf_test_free_all();
}

static void run_case(const att_case *c, int variant, uint64_t seed) {
  run_case_mode(c, variant, seed, 0);
}

int main(void) {
  if (!gpu_test_begin("test_attention_gpu")) return mf_test_end();
  if (getenv("MF_ATT_TEST_SMALL")) { /* a small run, for compute-sanitizer */
    att_case a = {1, 3, 2, 65, 32, 1, 1, 1, 0}, b = {1, 1, 2, 70, 24, 1, 1, 0, 0};
    run_case(&a, 0, 11);
    run_case(&b, 0, 12);
    run_case(&a, 1, 13);
    const att_case f = {1, 2, 2, 130, 32, 1, 1, 1, 0}; /* the fused pass, 3 query tiles */
    for (int v = 8; v <= 11; v++) run_case(&f, v, 14 + v);
    run_case(&f, 12, 26); /* the two-warpgroup fused pass (an odd key-tile count) */
    run_case_mode(&a, 0, 30, 1); /* strided views, padded bias rows */
    run_case_mode(&b, 0, 31, 2);
    run_case_mode(&f, 1, 32, 2);
    mf_attention_cuda_set_dbias_wg(1); /* the wgmma dbias pass */
    run_case(&a, 0, 33);
    mf_attention_cuda_set_dbias_wg(0);
    g_tma_ab = MF_ATT_TMA_FWD | MF_ATT_TMA_FWD4 | MF_ATT_TMA_DBIAS | MF_ATT_TMA_FUSED | MF_ATT_TMA_MASK; /* TMA against cp.async */
    const att_case t = {1, 3, 2, 128, 32, 1, 1, 1, 0};
    run_case_mode(&t, 0, 34, 0);
    run_case_mode(&t, 8, 36, 0);
    run_case_mode(&f, 8, 35, 1);
    g_tma_ab = 0;
    const int def = mf_attention_cuda_set_tma(-1); /* the passes on wgmma */
    mf_attention_cuda_set_tma(def | MF_ATT_TMA_FUSED_WG | MF_ATT_TMA_DBIAS_WG | MF_ATT_TMA_FWD_WG);
    run_case_mode(&f, 0, 37, 1);
    mf_attention_cuda_set_tma(def | MF_ATT_TMA_FUSED_WG | MF_ATT_TMA_FUSED_WG2 | MF_ATT_TMA_DBIAS_WG |
                              MF_ATT_TMA_DBIAS_WG2); /* tile pairs (3 tiles: one pair and a single) */
    run_case_mode(&f, 0, 38, 2);
    mf_attention_cuda_set_tma(def);
    g_mask_style = 1; /* padding-style masks: whole valid tiles inside a masked call */
    const att_case pm = {1, 10, 2, 200, 32, 1, 1, 1, 0}, pm2 = {1, 10, 2, 192, 32, 1, 1, 1, 0};
    run_case(&pm, 0, 39);  /* flags staged by warp 0 (N % 16 != 0) */
    run_case(&pm2, 0, 40); /* mask bytes by TMA */
    g_mask_style = 0;
    g_prepared = 1; /* the prepared backward */
    run_case(&a, 0, 41);
    g_prepared = 0;
    return mf_test_end();
  }
  const int Ns[] = {1, 7, 63, 64, 65, 200, 384};
  const int Ds[] = {32, 24, 48, 16, 8};
  uint64_t seed = 1000;
  int ci = 0;
  for (int in = 0; in < 7; in++) {
    const int N = Ns[in];
    const int Rs[] = {1, 5, N};
    for (int ir = 0; ir < 3; ir++) {
      const int R = Rs[ir];
      if (ir == 2 && (N == 1 || N == 5)) continue; /* same as an earlier R */
      att_case c;
      c.B = (N <= 65 && ir == 1) ? 2 : 1;
      c.R = R;
      c.N = N;
      c.D = Ds[ci % 5];
      c.H = (N >= 200 && R == N) ? 2 : 3;
      c.bias = (ci % 7) != 3; /* one case in seven without a bias */
      c.mask = (ci % 4) != 2;
      c.gate = (ci % 2) == 1;
      c.rsub = (N == 384 && R == N) ? 6 : 0;
      if (N == 200 && R == N) c.D = 8; /* the full double reference stays affordable */
      run_case(&c, 0, seed);
      seed += 100;
      ci++;
    }
  }
  /* every head dim at one awkward shape, with everything on */
  for (int i = 0; i < 5; i++) {
    att_case c = {1, 5, 4, 130, Ds[i], 1, 1, i % 2, 0};
    run_case(&c, 0, seed);
    seed += 100;
  }
  /* the prepared backward (the caller's prologue: attention_cuda.h), Q % 64 != 0 (padding
   * side rows) and == 0, R = 1 (single attention) and R > 1 (the fused pass), gates */
  g_prepared = 1;
  {
    const att_case cs[] = {{1, 5, 4, 130, 32, 1, 1, 1, 0}, {1, 64, 4, 64, 32, 1, 1, 0, 0},
                           {2, 1, 3, 70, 24, 1, 1, 1, 0},  {1, 7, 2, 63, 16, 0, 1, 1, 0},
                           {1, 1, 1, 1, 32, 1, 0, 1, 0},   {1, 33, 4, 33, 32, 1, 1, 1, 0}};
    for (int i = 0; i < (int)(sizeof cs / sizeof cs[0]); i++) run_case(&cs[i], 0, seed += 100);
  }
  g_prepared = 0;
  /* the portable path (no tensor-core instructions) on a few shapes */
  {
    att_case c1 = {2, 5, 2, 65, 32, 1, 1, 1, 0};
    att_case c2 = {1, 1, 3, 70, 24, 1, 1, 0, 0};
    att_case c3 = {1, 7, 2, 63, 48, 1, 1, 0, 0};
    run_case(&c1, 1, seed += 100);
    run_case(&c2, 1, seed += 100);
    run_case(&c3, 1, seed += 100);
  }
  /* the backward's passes as variants: 6 = three recompute passes (dK/dV, dQ, dbias); the
   * fused dK/dV/dQ pass with its dQ accumulator forced into global scratch (8: persistent
   * CTAs, several slabs per CTA when B·R·H exceeds the resident CTAs) or into shared
   * memory (9); 10, 11 = 8 with the fused kernel's other step schedules; 12, 13 = the
   * two-warpgroup fused kernel (key-tile pairs; odd tile counts leave a masked phantom
   * tile) with 1 / 2 CTAs per SM in its register bound. Odd N, masks with a fully
   * masked row r, gates, every head dim. */
  {
    const att_case cs[] = {
        {1, 5, 4, 130, 32, 1, 1, 1, 0}, {2, 3, 2, 65, 48, 1, 1, 0, 0},
        {1, 7, 3, 200, 16, 1, 1, 1, 0}, {1, 4, 2, 63, 24, 0, 1, 0, 0},
        {1, 3, 2, 129, 64, 1, 1, 1, 0}, {1, 6, 2, 64, 8, 1, 0, 1, 0},
    };
    for (int v = 6; v <= 13; v++)
      for (int i = 0; i < (int)(sizeof cs / sizeof cs[0]); i++) {
        if (v == 6 && i >= 2) break;
        run_case(&cs[i], v, seed += 100);
      }
    /* many slabs per persistent CTA in the global mode: B·R·H = 2·100·4 = 800 > resident CTAs */
    const att_case big = {2, 100, 4, 70, 32, 1, 1, 1, 3};
    run_case(&big, 8, seed += 100);
    run_case(&big, 11, seed += 100);
    run_case(&big, 12, seed += 100);
    run_case(&big, 13, seed += 100);
    /* N ≥ 2048 (32 query tiles): the default variant takes the wgmma TMA fused pass, and
     * fused2_kernel without it: N = 2050 leaves a partial last query tile and an odd
     * key-tile count (33: a phantom tile in fused2_kernel) */
    const att_case wide = {1, 2, 1, 2050, 32, 1, 1, 1, 0};
    run_case(&wide, 0, seed += 100);
    const int def = mf_attention_cuda_set_tma(-1);
    mf_attention_cuda_set_tma(def & ~MF_ATT_TMA_FUSED_WG);
    run_case(&wide, 0, seed += 100);
    mf_attention_cuda_set_tma(def);
  }
  /* the dbias pass's two kernels where D = 32 (mf_attention_cuda_set_dbias_wg: 0, the
   * default, the mma.sync kernel; 1 the wgmma one): odd N, partial tiles, masks with a fully
   * masked row, gates, B = 2, R = N */
  {
    const att_case dc[] = {{1, 5, 4, 130, 32, 1, 1, 1, 0}, {2, 7, 2, 65, 32, 1, 1, 0, 0},
                           {1, 33, 4, 33, 32, 1, 0, 1, 0}, {1, 3, 2, 200, 32, 0, 1, 1, 0}};
    for (int w = 0; w <= 1; w++) {
      mf_attention_cuda_set_dbias_wg(w);
      for (int i = 0; i < (int)(sizeof dc / sizeof dc[0]); i++) run_case(&dc[i], 0, seed += 100);
    }
    mf_attention_cuda_set_dbias_wg(0);
  }
  /* the fused pass with its Sᵀ, dPᵀ, dV, dK, dQ products on wgmma (MF_ATT_TMA_FUSED_WG) and the
   * dbias pass with its S, dP products on wgmma (MF_ATT_TMA_DBIAS_WG), the forward with its
   * S, P·V products on wgmma (MF_ATT_TMA_FWD_WG): against
   * the double reference and bit-identical over two runs (its sums are ordered differently
   * from the mma.sync kernels', so it is not compared with them bit for bit); packed and
   * strided views, odd N (partial query and key tiles), masks with a fully masked row,
   * gates, no bias, B = 2, several slabs per persistent CTA */
  {
    const att_case wc[] = {{1, 5, 4, 130, 32, 1, 1, 1, 0}, {2, 7, 2, 65, 32, 1, 1, 0, 0},
                           {1, 33, 4, 33, 32, 1, 0, 1, 0}, {1, 3, 2, 200, 32, 0, 1, 1, 0},
                           {2, 100, 4, 70, 32, 1, 1, 1, 3}};
    const int def = mf_attention_cuda_set_tma(-1);
    for (int two = 0; two <= 1; two++) { /* and the fused / dbias passes over tile pairs */
      mf_attention_cuda_set_tma(def | MF_ATT_TMA_FUSED_WG | MF_ATT_TMA_DBIAS_WG | MF_ATT_TMA_FWD_WG |
                                (two ? MF_ATT_TMA_FUSED_WG2 | MF_ATT_TMA_DBIAS_WG2 : 0));
      const long t0 = mf_attention_cuda_tma_calls();
      for (int i = 0; i < (int)(sizeof wc / sizeof wc[0]); i++) {
        run_case(&wc[i], 0, seed += 100);
        if (i < 4) run_case_mode(&wc[i], 0, seed += 100, 1 + i % 2);
      }
      MF_TEST(mf_attention_cuda_tma_calls() > t0, "fused-wg%s: the TMA kernels ran", two ? "2" : "");
      g_scale_mul = 0.75; /* a scale other than 1/√32: the fused pass's runtime-scale kernel */
      run_case(&wc[0], 0, seed += 100);
      run_case_mode(&wc[1], 0, seed += 100, 1);
      g_scale_mul = 1.0;
    }
    mf_attention_cuda_set_tma(def);
  }
  /* strided views (starting- and ending-style rows) on the default path (fused pass for
   * R > 1, dq pass with dbias for R = 1, split dbias pass), the three-pass and portable
   * paths (dkdv, dq, dbias kernels), the forced accumulator modes and the two-warpgroup
   * fused kernel; odd N, padded head dims, with and without gate, bias, mask; bias and
   * dbias with a padded row stride (NaN in the bias padding) */
  {
    const struct {
      att_case c;
      int variant;
    } sc[] = {
        {{1, 5, 4, 130, 32, 1, 1, 1, 0}, 0}, {{2, 3, 2, 65, 24, 1, 1, 0, 0}, 0},
        {{1, 1, 3, 70, 32, 1, 1, 1, 0}, 0},  {{1, 4, 2, 63, 48, 0, 1, 1, 0}, 0},
        {{1, 6, 2, 64, 8, 1, 0, 1, 0}, 0},   {{1, 7, 3, 100, 16, 1, 1, 1, 0}, 6},
        {{2, 3, 2, 65, 32, 1, 1, 1, 0}, 1},  {{1, 1, 2, 70, 24, 1, 1, 0, 0}, 1},
        {{1, 3, 2, 129, 64, 1, 1, 1, 0}, 8}, {{1, 3, 2, 129, 32, 1, 1, 1, 0}, 9},
        {{1, 33, 4, 33, 32, 1, 1, 1, 0}, 0}, /* R = N: a small triangle-attention shape */
        {{1, 4, 2, 131, 32, 1, 1, 1, 0}, 12}, {{1, 3, 2, 129, 64, 1, 1, 0, 0}, 13},
    };
    for (int mode = 1; mode <= 2; mode++)
      for (int i = 0; i < (int)(sizeof sc / sizeof sc[0]); i++)
        run_case_mode(&sc[i].c, sc[i].variant, seed += 100, mode);
  }
  /* the TMA kernels (D = 32: fwd_tma_kernel, dbias_tma_kernel) against the cp.async ones
   * (fwd_kernel, dbias_kernel): the same out, lse and gradients bit for bit; the forward
   * alone in both register bounds, then with the dbias pass; packed
   * and strided views (NaN around the strided rows: TMA must read only the view), N from 1
   * to 200 (partial and single tiles), R in {1, 5, N}, with and without bias, mask (a
   * fully masked row r) and gate */
  {
    const att_case tc[] = {{1, 1, 2, 1, 32, 1, 1, 1, 0},   {2, 5, 2, 7, 32, 1, 1, 0, 0},
                           {1, 3, 3, 63, 32, 0, 1, 1, 0},  {1, 65, 2, 65, 32, 1, 1, 1, 0},
                           {1, 4, 2, 128, 32, 1, 0, 1, 0}, {1, 3, 2, 200, 32, 1, 1, 0, 0},
                           {2, 2, 4, 130, 32, 1, 1, 1, 0}};
    for (int mode = 0; mode <= 2; mode++)
      for (int i = 0; i < (int)(sizeof tc / sizeof tc[0]); i++) {
        static const int masks[3] = {MF_ATT_TMA_FWD | MF_ATT_TMA_FUSED,
                                     MF_ATT_TMA_FWD | MF_ATT_TMA_FWD4 | MF_ATT_TMA_DBIAS,
                                     MF_ATT_TMA_FWD | MF_ATT_TMA_DBIAS | MF_ATT_TMA_FUSED};
        g_tma_ab = masks[(i + mode) % 3];
        run_case_mode(&tc[i], 0, seed += 100, mode);
        /* the fused pass forced into its global-accumulator mode (where its TMA kernel runs) */
        g_tma_ab = MF_ATT_TMA_FWD | MF_ATT_TMA_DBIAS | MF_ATT_TMA_FUSED;
        if (tc[i].R > 1) run_case_mode(&tc[i], 8, seed += 100, mode);
      }
    /* many slabs per persistent CTA (B·R·H = 800) */
    const att_case many = {2, 100, 4, 70, 32, 1, 1, 1, 3};
    run_case_mode(&many, 8, seed += 100, 1);
    g_tma_ab = 0;
  }
  /* padding-style key masks (g_mask_style 1): whole valid, partial and fully masked key
   * tiles in one call. The default (wgmma) kernels against the double reference, with the
   * mask's bytes copied by TMA (MF_ATT_TMA_MASK; N % 16 == 0) and the gate's rows with Q
   * (MF_ATT_TMA_GATE), and with both staged the old way (the bits cleared, or N % 16 != 0
   * for the mask); then the TMA kernels against the cp.async ones bit for
   * bit, with and without the mask map (README step 20). N = 4176: 66 key tiles, the last
   * partial. */
  {
    g_mask_style = 1;
    const att_case pc[] = {{1, 6, 2, 200, 32, 1, 1, 1, 0}, {1, 130, 2, 130, 32, 1, 1, 0, 0},
                           {2, 5, 4, 256, 32, 1, 1, 1, 0}, {1, 1, 2, 300, 32, 0, 1, 1, 0},
                           {1, 70, 2, 192, 32, 1, 1, 1, 0}, {1, 9, 2, 144, 32, 1, 1, 1, 0}};
    const int npc = (int)(sizeof pc / sizeof pc[0]);
    const int def = mf_attention_cuda_set_tma(-1);
    for (int mm = 0; mm <= 1; mm++) {
      mf_attention_cuda_set_tma(mm ? def : def & ~(MF_ATT_TMA_MASK | MF_ATT_TMA_GATE));
      for (int i = 0; i < npc; i++) run_case(&pc[i], 0, seed += 100);
    }
    mf_attention_cuda_set_tma(def);
    const att_case wide = {1, 1, 1, 4176, 32, 1, 1, 1, 0};
    run_case(&wide, 0, seed += 100);
    for (int i = 0; i < npc; i++) {
      static const int masks[3] = {MF_ATT_TMA_FWD | MF_ATT_TMA_DBIAS | MF_ATT_TMA_MASK,
                                   MF_ATT_TMA_FWD | MF_ATT_TMA_FWD4 | MF_ATT_TMA_DBIAS,
                                   MF_ATT_TMA_FWD | MF_ATT_TMA_DBIAS | MF_ATT_TMA_FUSED | MF_ATT_TMA_MASK};
      g_tma_ab = masks[i % 3];
      run_case_mode(&pc[i], 0, seed += 100, i % 3);
    }
    g_tma_ab = 0;
    g_mask_style = 0;
  }
  /* a masking bias (g_bias_inf): -inf entries and whole -inf query rows, on the default
   * kernels (every head dim; R = 1, R > 1 and R = N; packed and strided views; the
   * prepared backward), the portable path, the three-pass backward, the fused pass's
   * forced accumulator modes and the two-warpgroup fused kernel */
  {
    g_bias_inf = 1;
    const att_case ic[] = {{1, 5, 4, 130, 32, 1, 1, 1, 0}, {2, 1, 3, 70, 24, 1, 1, 0, 0},
                           {1, 7, 2, 63, 16, 1, 0, 1, 0},  {1, 33, 4, 33, 32, 1, 1, 1, 0},
                           {1, 3, 2, 129, 64, 1, 1, 0, 0}, {1, 6, 2, 64, 8, 1, 0, 1, 0},
                           {1, 4, 2, 200, 48, 1, 1, 1, 0}, {1, 1, 2, 1, 32, 1, 0, 0, 0},
                           {1, 4, 2, 128, 32, 1, 1, 1, 0}}; /* packed, N % 8 == 0: the TMA forward */
    for (int i = 0; i < (int)(sizeof ic / sizeof ic[0]); i++) run_case(&ic[i], 0, seed += 100);
    for (int mode = 1; mode <= 2; mode++) {
      run_case_mode(&ic[0], 0, seed += 100, mode);
      run_case_mode(&ic[3], 0, seed += 100, mode);
    }
    g_prepared = 1;
    run_case(&ic[0], 0, seed += 100);
    g_prepared = 0;
    const int vs[] = {1, 6, 8, 9, 12};
    for (int i = 0; i < (int)(sizeof vs / sizeof vs[0]); i++) {
      run_case(&ic[0], vs[i], seed += 100);
      run_case(&ic[1], vs[i], seed += 100);
    }
    g_bias_inf = 0;
  }
  mf_attention_cuda_set_variant(0);
  return mf_test_end();
}
