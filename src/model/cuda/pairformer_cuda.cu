/* pairformer_cuda.cu — the Pairformer block and stack on one GPU (see pairformer_cuda.h):
 * the block-major bf16 compute layout and its conversions, the block's forward/backward
 * wiring of the fused ops (residuals, dropout streams, in-place gradients), and the
 * checkpointed stack over one activation arena. The sub-layer math lives in src/ops/cuda;
 * this file only composes. Not the CPU reference (model/pairformer.c, model/stack.c). */
#include "model/cuda/pairformer_cuda.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "ops/cuda/gpu.h"
#include "ops/cuda/transition_cuda.h"

typedef __nv_bfloat16 bf16;

/* ================================================================ layout */

#define SLOT(member) (offsetof(mf_pairformer_block, member) / sizeof(mf_real *))
#define OFF(lay, member) ((lay)->off[SLOT(member)])

void mf_pf_cuda_layout_make(mf_pf_cuda_layout *lay, const mf_params_table *t) {
  memset(lay, 0, sizeof *lay);
  int64_t bn = 0;
  for (int i = 0; i < t->n; i++) {
    const mf_param_entry *e = &t->entries[i];
    MF_ASSERT(e->field % sizeof(mf_real *) == 0 && (int)(e->field / sizeof(mf_real *)) < MF_PF_FIELDS,
              "pf_cuda layout: entry %s has field offset %zu", e->name, e->field);
    /* tensor-major: offset = L · (block elements of the entries before it) */
    MF_ASSERT(e->offset == (int64_t)t->L * bn, "pf_cuda layout: entry %s is not in bind order",
              e->name);
    lay->off[e->field / sizeof(mf_real *)] = bn;
    bn += e->block_numel;
  }
  lay->block_numel = bn;
  /* The fused ops read concatenated weights: check they are adjacent in the bind order. */
  const mf_pairformer_config *c = &t->config;
  const int64_t C = c->c_z, Ch = c->c_mul, HD = (int64_t)c->h_tri * c->d_tri;
  const mf_pf_cuda_layout *L = lay;
#define ADJ(a, b, n) \
  MF_ASSERT(OFF(L, b) == OFF(L, a) + (n), "pf_cuda layout: " #b " does not follow " #a)
#define ADJ_TRI(tri, att)                         \
  do {                                            \
    ADJ(tri.w_ap, tri.w_ag, Ch * C);              \
    ADJ(tri.w_ag, tri.w_bp, Ch * C);              \
    ADJ(tri.w_bp, tri.w_bg, Ch * C);              \
    ADJ(tri.w_bg, tri.w_g, Ch * C);               \
    ADJ(att.w_q, att.w_k, HD * C);                \
    ADJ(att.w_k, att.w_v, HD * C);                \
    ADJ(att.w_v, att.w_b, HD * C);                \
    ADJ(att.w_b, att.w_g, (int64_t)c->h_tri * C); \
  } while (0)
  ADJ_TRI(tri_out, att_start);
  ADJ_TRI(tri_in, att_end);
#undef ADJ_TRI
  ADJ(pair_trans.w_a, pair_trans.w_b, (int64_t)c->n_trans * C * C);
  ADJ(single_trans.w_a, single_trans.w_b, (int64_t)c->n_trans * c->c_s * c->c_s);
#undef ADJ
}

/* Binds the fields of one block (weights: T = const bf16, gradients: T = float). */
template <typename T, typename W, typename R, typename A, typename X>
static void bind_any(W *w, const mf_pf_cuda_layout *lay, T *b) {
  const mf_pf_cuda_layout *L = lay;
#define P(m) (b + OFF(L, m))
  w->tri_out = R{P(tri_out.ln_in_g), P(tri_out.ln_in_b), P(tri_out.w_ap), P(tri_out.ln_out_g),
                 P(tri_out.ln_out_b), P(tri_out.w_z)};
  w->tri_in = R{P(tri_in.ln_in_g), P(tri_in.ln_in_b), P(tri_in.w_ap), P(tri_in.ln_out_g),
                P(tri_in.ln_out_b), P(tri_in.w_z)};
  w->att_start = A{P(att_start.ln_g), P(att_start.ln_b), P(att_start.w_q), P(att_start.w_o)};
  w->att_end = A{P(att_end.ln_g), P(att_end.ln_b), P(att_end.w_q), P(att_end.w_o)};
  w->pair_trans = X{P(pair_trans.ln_g), P(pair_trans.ln_b), P(pair_trans.w_a), P(pair_trans.w_o)};
  w->single_trans =
      X{P(single_trans.ln_g), P(single_trans.ln_b), P(single_trans.w_a), P(single_trans.w_o)};
  w->single_att.ln_s_g = P(single_att.ln_s_g);
  w->single_att.ln_s_b = P(single_att.ln_s_b);
  w->single_att.w_q = P(single_att.w_q);
  w->single_att.b_q = P(single_att.b_q);
  w->single_att.w_k = P(single_att.w_k);
  w->single_att.w_v = P(single_att.w_v);
  w->single_att.w_g = P(single_att.w_g);
  w->single_att.ln_z_g = P(single_att.ln_z_g);
  w->single_att.ln_z_b = P(single_att.ln_z_b);
  w->single_att.w_z = P(single_att.w_z);
  w->single_att.w_o = P(single_att.w_o);
#undef P
}

void mf_pf_cuda_bind(mf_pf_cuda_weights *w, const mf_pf_cuda_layout *lay, const bf16 *base) {
  bind_any<const bf16, mf_pf_cuda_weights, mf_trimul_cuda_weights, mf_triatt_cuda_weights,
           mf_pf_cuda_transition>(w, lay, base);
}

void mf_pf_cuda_bind_grads(mf_pf_cuda_grads *g, const mf_pf_cuda_layout *lay, float *base) {
  bind_any<float, mf_pf_cuda_grads, mf_trimul_cuda_grads, mf_triatt_cuda_grads,
           mf_pf_cuda_transition_grads>(g, lay, base);
}

/* ================================================================ small kernels */

static __global__ void pair_mask_kernel(uint8_t *pm, const uint8_t *mask, int N) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (int64_t)N * N) pm[i] = (uint8_t)(mask[i / N] && mask[i % N]);
}

void mf_pf_cuda_pair_mask(uint8_t *pm, const uint8_t *mask, int N, cudaStream_t stream) {
  int64_t n = (int64_t)N * N;
  pair_mask_kernel<<<mf_cdiv(n, 256), 256, 0, stream>>>(pm, mask, N);
  MF_CHECK_CUDA(cudaGetLastError());
}

static void copy_dev(void *dst, const void *src, size_t bytes, cudaStream_t s) {
  MF_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
}

/* The table's entries on the device for the layout conversions: map[3e..3e+2] = tensor-major
 * offset, block_numel and in-block offset of entry e (sorted by both offsets). */
static __device__ int find_entry(const int64_t *map, int n, int64_t x, int col) {
  int lo = 0, hi = n - 1; /* the last entry whose column `col` is <= x */
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (map[3 * mid + col] <= x) lo = mid; else hi = mid - 1;
  }
  return lo;
}

/* wc (L·BN) bf16 block-major = master (L·BN) fp32 tensor-major. */
static __global__ void to_compute_kernel(bf16 *__restrict__ wc, const float *__restrict__ master,
                                         const int64_t *__restrict__ map, int n, int64_t BN,
                                         int64_t total) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int e = find_entry(map, n, i, 0);
    int64_t r = i - map[3 * e], bn = map[3 * e + 1];
    int64_t l = r / bn, k = r - l * bn;
    wc[l * BN + map[3 * e + 2] + k] = mf_f32_to_bf16(master[i]);
  }
}

/* grads (tensor-major) of block l += gblock (BN) block-major. */
static __global__ void add_grads_kernel(float *__restrict__ grads, const float *__restrict__ gb,
                                        const int64_t *__restrict__ map, int n, int64_t BN,
                                        int l) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < BN;
       i += (int64_t)gridDim.x * blockDim.x) {
    int e = find_entry(map, n, i, 2);
    grads[map[3 * e] + (int64_t)l * map[3 * e + 1] + (i - map[3 * e + 2])] += gb[i];
  }
}

/* ================================================================ one block */

typedef struct {
  bf16 *z[5];                 /* (N, N, Cz) z1..z5: the pair after each update */
  bf16 *s1;                   /* (N, Cs) */
  void *tm_out, *tm_in;        /* mf_trimul_cuda_saved_bytes(N, c_mul) each */
  void *ta_start, *ta_end;     /* mf_triatt_cuda_saved_bytes(N, c_z, h_tri, d_tri) each */
  void *apb;                   /* mf_apb_cuda_saved_bytes(N, c_s, c_z, h_s, d_s) */
  float *pt_mean, *pt_rstd;   /* (N²) pair transition LN statistics */
  float *st_mean, *st_rstd;   /* (N) single transition LN statistics */
  size_t total;
} saved_views;

static saved_views saved_layout(void *base, const mf_pairformer_config *c, int N, int keep) {
  saved_views v;
  size_t off = 0;
  const size_t NN = (size_t)N * N, zb = NN * c->c_z * sizeof(bf16);
  char *b = (char *)base;
#define PUT(ptr, T, bytes)                  \
  ptr = b ? (T)(b + off) : (T)NULL;         \
  off += mf_cuda_align(bytes)
  for (int k = 0; k < 5; k++) { PUT(v.z[k], bf16 *, zb); }
  PUT(v.s1, bf16 *, (size_t)N * c->c_s * sizeof(bf16));
  PUT(v.tm_out, void *, mf_trimul_cuda_saved_bytes(N, c->c_mul));
  PUT(v.tm_in, void *, mf_trimul_cuda_saved_bytes(N, c->c_mul));
  PUT(v.ta_start, void *, mf_triatt_cuda_saved_bytes(N, c->c_z, c->h_tri, c->d_tri, keep));
  PUT(v.ta_end, void *, mf_triatt_cuda_saved_bytes(N, c->c_z, c->h_tri, c->d_tri, keep));
  PUT(v.apb, void *, mf_apb_cuda_saved_bytes(N, c->c_s, c->c_z, c->h_s, c->d_s));
  PUT(v.pt_mean, float *, NN * sizeof(float));
  PUT(v.pt_rstd, float *, NN * sizeof(float));
  PUT(v.st_mean, float *, (size_t)N * sizeof(float));
  PUT(v.st_rstd, float *, (size_t)N * sizeof(float));
#undef PUT
  v.total = off;
  return v;
}

size_t mf_pf_cuda_block_saved_bytes(const mf_pairformer_config *c, int N, int keep) {
  return saved_layout(NULL, c, N, keep).total;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

size_t mf_pf_cuda_block_workspace(const mf_pairformer_config *c, int N, int keep) {
  const int64_t M = (int64_t)N * N;
  const size_t sb = mf_cuda_align((size_t)N * c->c_s * sizeof(bf16));
  size_t w = mf_trimul_cuda_workspace(N, c->c_z, c->c_mul);
  w = max_sz(w, mf_triatt_cuda_workspace(N, c->c_z, c->h_tri, c->d_tri, keep));
  w = max_sz(w, mf_transition_cuda_workspace(M, c->c_z, c->n_trans * c->c_z));
  /* the single attention's backward reads a copy of its output gradient */
  w = max_sz(w, sb + mf_apb_cuda_workspace(N, c->c_s, c->c_z, c->h_s, c->d_s));
  w = max_sz(w, mf_transition_cuda_workspace(N, c->c_s, c->n_trans * c->c_s));
  return w;
}

size_t mf_pf_cuda_block_workspace_upto(const mf_pairformer_config *c, int N_max, int keep) {
  size_t w = 0;
  for (int n = 1; n <= N_max; n++) w = max_sz(w, mf_pf_cuda_block_workspace(c, n, keep));
  return w;
}

/* ---------------------------------------------------------------- profiling */
static mf_pf_cuda_profile *g_prof;
static cudaEvent_t g_ev[MF_PF_SUBLAYERS + 1];

void mf_pf_cuda_profile_enable(mf_pf_cuda_profile *p) {
  if (p && !g_ev[0])
    for (int k = 0; k <= MF_PF_SUBLAYERS; k++) MF_CHECK_CUDA(cudaEventCreate(&g_ev[k]));
  g_prof = p;
}

const char *mf_pf_cuda_sublayer_name(int k) {
  static const char *names[MF_PF_SUBLAYERS] = {"tri_mul_out",     "tri_mul_in",
                                               "tri_att_start",   "tri_att_end",
                                               "pair_transition", "single_att",
                                               "single_transition"};
  return k >= 0 && k < MF_PF_SUBLAYERS ? names[k] : "?";
}

/* Event i marks the end of the i-th sub-layer run by this call (0: the start). */
static void prof_mark(int i, cudaStream_t st) {
  if (g_prof) MF_CHECK_CUDA(cudaEventRecord(g_ev[i], st));
}

/* Adds the times between the marks: mark i+1 − mark i belongs to sub-layer order[i]. */
static void prof_collect(const int *order, double *ms, int *calls) {
  if (!g_prof) return;
  MF_CHECK_CUDA(cudaEventSynchronize(g_ev[MF_PF_SUBLAYERS]));
  for (int i = 0; i < MF_PF_SUBLAYERS; i++) {
    float t = 0;
    MF_CHECK_CUDA(cudaEventElapsedTime(&t, g_ev[i], g_ev[i + 1]));
    ms[order[i]] += t;
  }
  (*calls)++;
}

/* Residual + dropout of triangle update k (0..3) of a block: the CPU's streams and axes. */
static mf_resdrop_cuda resdrop(const mf_pairformer_config *c, mf_pairformer_rng rng, int k) {
  mf_resdrop_cuda r;
  r.p = rng.training ? c->p_drop : 0.0;
  r.seed = rng.seed;
  r.stream = mf_rng_stream(rng.step, MF_RNG_DROPOUT, 4 * rng.block + (uint32_t)k);
  r.axis = k == 3 ? MF_DROPOUT_COLWISE : MF_DROPOUT_ROWWISE;
  r.res = NULL; /* in place; the forward points it at the update's input */
  return r;
}

void mf_pf_cuda_block_forward(bf16 *s_out, bf16 *z_out, void *saved, const bf16 *s,
                              const bf16 *z, const uint8_t *mask, const uint8_t *pm,
                              const mf_pf_cuda_weights *w, const mf_pairformer_config *c, int N,
                              int keep, mf_pairformer_rng rng, void *ws, size_t ws_bytes,
                              const mf_cuda_blas *blas, cudaStream_t st) {
  MF_ASSERT(N > 0, "pf_cuda block forward: N = %d, must be >= 1", N);
  MF_ASSERT(mf_pairformer_config_check(c) == MF_OK, "%s", mf_error_message());
  MF_ASSERT((mask == NULL) == (pm == NULL), "pf_cuda block: mask and pair mask go together");
  MF_ASSERT(ws_bytes >= mf_pf_cuda_block_workspace(c, N, keep),
            "pf_cuda block: workspace %zu < %zu", ws_bytes, mf_pf_cuda_block_workspace(c, N, keep));
  saved_views v = saved_layout(saved, c, N, keep);
  const int64_t M = (int64_t)N * N;
  const size_t sbytes = (size_t)N * c->c_s * sizeof(bf16);
  const int Cz = c->c_z, Cs = c->c_s;

  /* the four triangle updates: z_{k+1} = z_k + drop(U_k(z_k)), the op's epilogue reading the
   * residual z_k where it lies (no copy of it into z_{k+1}'s buffer first) */
  prof_mark(0, st);
  const bf16 *zin = z;
  for (int k = 0; k < 4; k++) {
    mf_resdrop_cuda rd = resdrop(c, rng, k);
    rd.res = zin;
    if (k < 2)
      mf_trimul_forward_cuda(v.z[k], k == 0 ? v.tm_out : v.tm_in, zin, pm,
                             k == 0 ? &w->tri_out : &w->tri_in, N, Cz, c->c_mul, k == 0, &rd, ws,
                             ws_bytes, blas, st);
    else
      mf_triatt_forward_cuda(v.z[k], k == 2 ? v.ta_start : v.ta_end, zin, pm,
                             k == 2 ? &w->att_start : &w->att_end, N, Cz, c->h_tri, c->d_tri,
                             k == 2, keep, &rd, ws, ws_bytes, blas, st);
    zin = v.z[k];
    prof_mark(k + 1, st);
  }
  /* pair transition: z5 = z4 + PT(z4), into the saved z5 and the block's output at once */
  const mf_pf_cuda_transition *pt = &w->pair_trans;
  mf_transition_forward_res_cuda(v.z[4], z_out, v.z[3], v.pt_mean, v.pt_rstd, v.z[3], pt->ln_g,
                                 pt->ln_b, pt->w_ab, pt->w_o, M, Cz, c->n_trans * Cz, MF_LN_FULL,
                                 ws, ws_bytes, blas, st);
  prof_mark(5, st);

  /* single track: s1 = s + APB(s, z5); s_out = s1 + T(s1) */
  copy_dev(v.s1, s, sbytes, st);
  mf_apb_forward_cuda(v.s1, v.apb, s, v.z[4], mask, &w->single_att, N, Cs, Cz, c->h_s, c->d_s, 1,
                      ws, ws_bytes, blas, st);
  prof_mark(6, st);
  const mf_pf_cuda_transition *sx = &w->single_trans;
  copy_dev(s_out, v.s1, sbytes, st);
  mf_transition_forward_cuda(s_out, v.st_mean, v.st_rstd, v.s1, sx->ln_g, sx->ln_b, sx->w_ab,
                             sx->w_o, N, Cs, c->n_trans * Cs, MF_LN_FULL, 1, ws, ws_bytes, blas,
                             st);
  prof_mark(7, st);
  static const int order[MF_PF_SUBLAYERS] = {0, 1, 2, 3, 4, 5, 6};
  if (g_prof) prof_collect(order, g_prof->fwd_ms, &g_prof->fwd_calls);
}

void mf_pf_cuda_block_backward(bf16 *ds, bf16 *dz, const mf_pf_cuda_grads *g, const void *saved,
                               const bf16 *s, const bf16 *z, const uint8_t *mask,
                               const uint8_t *pm, const mf_pf_cuda_weights *w,
                               const mf_pairformer_config *c, int N, int keep,
                               mf_pairformer_rng rng, void *ws, size_t ws_bytes,
                               const mf_cuda_blas *blas, cudaStream_t st) {
  MF_ASSERT(N > 0, "pf_cuda block backward: N = %d, must be >= 1", N);
  MF_ASSERT(mf_pairformer_config_check(c) == MF_OK, "%s", mf_error_message());
  MF_ASSERT((mask == NULL) == (pm == NULL), "pf_cuda block: mask and pair mask go together");
  MF_ASSERT(ws_bytes >= mf_pf_cuda_block_workspace(c, N, keep),
            "pf_cuda block: workspace %zu < %zu", ws_bytes, mf_pf_cuda_block_workspace(c, N, keep));
  saved_views v = saved_layout((void *)saved, c, N, keep);
  const int64_t M = (int64_t)N * N;
  const size_t sb = mf_cuda_align((size_t)N * c->c_s * sizeof(bf16));
  const int Cz = c->c_z, Cs = c->c_s;
  char *wsb = (char *)ws;

  /* s_out = s1 + T(s1): ds1 = ds + T'(ds), in place */
  prof_mark(0, st);
  {
    const mf_pf_cuda_transition *sx = &w->single_trans;
    mf_transition_backward_add_cuda(ds, g ? g->single_trans.ln_g : NULL,
                                    g ? g->single_trans.ln_b : NULL,
                                    g ? g->single_trans.w_ab : NULL,
                                    g ? g->single_trans.w_o : NULL, ds, v.st_mean, v.st_rstd,
                                    v.s1, sx->ln_g, sx->ln_b, sx->w_ab, sx->w_o, N, Cs,
                                    c->n_trans * Cs, MF_LN_FULL, ws, ws_bytes, blas, st);
  }
  prof_mark(1, st);
  /* s1 = s + APB(s, z5): ds = ds1 + APB'_s(ds1); dz5 = dz + APB'_z(ds1) */
  {
    bf16 *ds1 = (bf16 *)wsb;
    copy_dev(ds1, ds, (size_t)N * Cs * sizeof(bf16), st);
    mf_apb_backward_cuda(ds, dz, g ? &g->single_att : NULL, ds1, v.apb, s, v.z[4], mask,
                         &w->single_att, N, Cs, Cz, c->h_s, c->d_s, 1, wsb + sb,
                         ws_bytes - sb, blas, st);
  }
  prof_mark(2, st);
  /* z5 = z4 + PT(z4): dz4 = dz5 + PT'(dz5), in place */
  {
    const mf_pf_cuda_transition *pt = &w->pair_trans;
    mf_transition_backward_add_cuda(dz, g ? g->pair_trans.ln_g : NULL,
                                    g ? g->pair_trans.ln_b : NULL, g ? g->pair_trans.w_ab : NULL,
                                    g ? g->pair_trans.w_o : NULL, dz, v.pt_mean, v.pt_rstd,
                                    v.z[3], pt->ln_g, pt->ln_b, pt->w_ab, pt->w_o, M, Cz,
                                    c->n_trans * Cz, MF_LN_FULL, ws, ws_bytes, blas, st);
  }
  prof_mark(3, st);
  /* the triangle updates in reverse, in place: dz += ∂U_k/∂z_k(dz ⊙ mask_k) */
  for (int k = 3; k >= 0; k--) {
    mf_resdrop_cuda rd = resdrop(c, rng, k);
    const bf16 *zk = k == 0 ? z : v.z[k - 1];
    if (k < 2)
      mf_trimul_backward_cuda(dz, g ? (k == 0 ? &g->tri_out : &g->tri_in) : NULL, dz,
                              k == 0 ? v.tm_out : v.tm_in, zk, pm,
                              k == 0 ? &w->tri_out : &w->tri_in, N, Cz, c->c_mul, k == 0, &rd,
                              ws, ws_bytes, blas, st);
    else
      mf_triatt_backward_cuda(dz, g ? (k == 2 ? &g->att_start : &g->att_end) : NULL, dz,
                              k == 2 ? v.ta_start : v.ta_end, zk, pm,
                              k == 2 ? &w->att_start : &w->att_end, N, Cz, c->h_tri, c->d_tri,
                              k == 2, keep, &rd, ws, ws_bytes, blas, st);
    prof_mark(7 - k, st);
  }
  static const int order[MF_PF_SUBLAYERS] = {6, 5, 4, 3, 2, 1, 0};
  if (g_prof) prof_collect(order, g_prof->bwd_ms, &g_prof->bwd_calls);
}

/* ================================================================ the stack */

static size_t input_bytes(const mf_pairformer_config *c, int N) {
  return mf_cuda_align((size_t)N * c->c_s * sizeof(bf16)) +
         mf_cuda_align((size_t)N * N * c->c_z * sizeof(bf16));
}

static size_t mask_bytes(int N) {
  return mf_cuda_align((size_t)N) + mf_cuda_align((size_t)N * N);
}

mf_stack_sizes mf_pf_cuda_sizes(const mf_pairformer_config *c, int N, void *ctx) {
  const int keep = ctx ? *(const int *)ctx : 0;
  mf_stack_sizes z;
  z.input_bytes = (int64_t)input_bytes(c, N);
  z.saved_bytes = (int64_t)mf_pf_cuda_block_saved_bytes(c, N, keep);
  z.grad_bytes = 0; /* the backward works in place in the caller's ds, dz */
  z.fixed_bytes = (int64_t)(mf_pf_cuda_block_workspace_upto(c, N, keep) + mask_bytes(N));
  return z;
}

/* The plan for keep (mf_pf_cuda_sizes' ctx); with a budget, refused over it. */
static mf_status plan_keep(mf_stack_plan *p, const mf_params_table *t, mf_stack_policy policy,
                           int N_max, int64_t budget_bytes, int keep) {
  return budget_bytes > 0 ? mf_stack_plan_fit_sized(p, &t->config, t->L, N_max, policy,
                                                    mf_pf_cuda_sizes, &keep, budget_bytes)
                          : mf_stack_plan_sized(p, &t->config, t->L, N_max, policy,
                                                mf_pf_cuda_sizes, &keep);
}

/* Device memory the stack allocates besides the arena: the bf16 compute copy, the block
 * gradient scratch and the layout map. */
static int64_t side_bytes(const mf_params_table *t, int64_t BN) {
  return (int64_t)t->L * BN * (int64_t)sizeof(bf16) + BN * (int64_t)sizeof(float) +
         (int64_t)t->n * 3 * (int64_t)sizeof(int64_t);
}

/* Whether the blocks keep the triangle attentions' projections for their backward (see
 * pairformer_cuda.h): MF_PF_KEEP_PROJ=0|1 forces it; otherwise they are kept when the plan
 * with them fits the budget — or, with no budget, the free device memory less the other
 * allocations and 2 GiB for cuBLAS and the caller — and not kept when only the plan
 * without them fits (so the largest N that fits is that of the plan without them). */
static int choose_keep(const mf_params_table *t, mf_stack_policy policy, int N_max,
                       int64_t budget_bytes, int64_t BN) {
  const char *e = getenv("MF_PF_KEEP_PROJ");
  if (e && (e[0] == '0' || e[0] == '1') && e[1] == '\0') return e[0] == '1';
  mf_stack_plan p;
  int keep = 1; /* the plan only (no refusal message, no search for the largest N) */
  if (mf_stack_plan_sized(&p, &t->config, t->L, N_max, policy, mf_pf_cuda_sizes, &keep) != MF_OK)
    return 0;
  if (budget_bytes > 0) return p.total_bytes <= budget_bytes;
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return p.total_bytes + side_bytes(t, BN) + ((int64_t)2 << 30) <= (int64_t)free_b;
}

mf_status mf_pf_cuda_stack_init(mf_pf_cuda_stack *st, const mf_params_table *t,
                                mf_stack_policy policy, int N_max, int64_t budget_bytes,
                                cudaStream_t stream) {
  memset(st, 0, sizeof *st);
  mf_pf_cuda_layout_make(&st->layout, t);
  const int64_t BN = st->layout.block_numel;
  st->keep = choose_keep(t, policy, N_max, budget_bytes, BN);
  mf_status s = plan_keep(&st->plan, t, policy, N_max, budget_bytes, st->keep);
  if (s != MF_OK) return s;
  st->table = t;
  st->N_max = N_max;
  st->stream = stream;
  st->ws_bytes = mf_pf_cuda_block_workspace_upto(&t->config, N_max, st->keep);
  cudaError_t ce = cudaSuccess;
  const char *what = "the activation arena";
  if ((ce = cudaMalloc(&st->arena, (size_t)st->plan.total_bytes)) != cudaSuccess ||
      (what = "the bf16 compute copy",
       ce = cudaMalloc((void **)&st->wc, (size_t)(t->L * BN) * sizeof(bf16))) != cudaSuccess ||
      (what = "the block-gradient scratch",
       ce = cudaMalloc((void **)&st->gblock, (size_t)BN * sizeof(float))) != cudaSuccess ||
      (what = "the layout map",
       ce = cudaMalloc((void **)&st->d_map, (size_t)t->n * 3 * sizeof(int64_t))) != cudaSuccess) {
    cudaGetLastError(); /* clear the allocation error */
    mf_status e = mf_error_set(MF_ERR_NOMEM,
                               "pf_cuda stack: cannot allocate %s (%s); needs %.3f GiB of "
                               "activations plus %.3f GiB of weights on the GPU (N_max = %d, "
                               "policy %s)",
                               what, cudaGetErrorString(ce), st->plan.total_bytes / 1073741824.0,
                               (double)t->L * BN * 2 / 1073741824.0, N_max,
                               mf_stack_policy_name(policy.kind));
    mf_pf_cuda_stack_free(st);
    return e;
  }
  int64_t *map = (int64_t *)mf_xmalloc((size_t)t->n * 3 * sizeof(int64_t), "pf_cuda map");
  for (int i = 0; i < t->n; i++) {
    map[3 * i] = t->entries[i].offset;
    map[3 * i + 1] = t->entries[i].block_numel;
    map[3 * i + 2] = st->layout.off[t->entries[i].field / sizeof(mf_real *)];
  }
  /* on the stack's stream (which may be a non-blocking one, not ordered after a legacy
   * cudaMemcpy), then waited for: map is freed right after */
  MF_CHECK_CUDA(cudaMemcpyAsync(st->d_map, map, (size_t)t->n * 3 * sizeof(int64_t),
                                cudaMemcpyHostToDevice, stream));
  MF_CHECK_CUDA(cudaStreamSynchronize(stream));
  mf_free(map);
  mf_cuda_blas_create(&st->blas, 0);
  MF_CHECK_CUBLAS(cublasSetStream(st->blas.handle, stream));
  return MF_OK;
}

void mf_pf_cuda_stack_free(mf_pf_cuda_stack *st) {
  if (!st) return;
  if (st->blas.handle) mf_cuda_blas_destroy(&st->blas);
  cudaFree(st->arena);
  cudaFree(st->wc);
  cudaFree(st->gblock);
  cudaFree(st->d_map);
  memset(st, 0, sizeof *st);
}

void mf_pf_cuda_stack_set_params(mf_pf_cuda_stack *st, const float *master) {
  MF_ASSERT(st->table && st->wc && st->d_map && master,
            "pf_cuda stack set_params: stack not initialised or master weights NULL");
  const mf_params_table *t = st->table;
  to_compute_kernel<<<1024, 256, 0, st->stream>>>(st->wc, master, st->d_map, t->n,
                                                  st->layout.block_numel, t->total);
  MF_CHECK_CUDA(cudaGetLastError());
}

/* Where everything lives for crop N inside the arena (as model/stack.c's views). */
typedef struct {
  int L, seg, nws, N; /* L: the blocks that run (the layout is the plan's) */
  size_t I, W, sbytes; /* bytes: one block input (s then z), one block's saved, s's part of I */
  char *kept;          /* (n_seg − 1) block inputs: of blocks seg, 2·seg, … */
  char *inner;         /* (seg − 1) block inputs: inside the current segment */
  char *saved;         /* nws block saved buffers (W bytes each) */
  char *ws;            /* the ops' shared workspace (st->ws_bytes, planned at N_max) */
  uint8_t *mask;       /* (N) the forward's token mask */
  uint8_t *pm;         /* (N, N) pair mask mask_i·mask_j */
} views;

void mf_pf_cuda_stack_set_run_blocks(mf_pf_cuda_stack *st, int n) {
  MF_ASSERT(n >= 0 && n <= st->plan.L, "pf_cuda stack: run %d blocks of %d", n, st->plan.L);
  st->run_blocks = n;
  st->fwd_N = 0;
}

static views make_views(const mf_pf_cuda_stack *st, int N) {
  const mf_pairformer_config *c = &st->table->config;
  views v;
  v.L = st->run_blocks > 0 ? st->run_blocks : st->plan.L; /* the blocks that run */
  v.seg = st->plan.seg;
  v.nws = st->plan.n_workspaces;
  v.N = N;
  v.I = input_bytes(c, N);
  v.W = mf_pf_cuda_block_saved_bytes(c, N, st->keep);
  v.sbytes = mf_cuda_align((size_t)N * c->c_s * sizeof(bf16));
  v.kept = (char *)st->arena;
  v.inner = v.kept + (size_t)(st->plan.n_seg - 1) * v.I;
  v.saved = v.inner + (size_t)(v.seg - 1) * v.I;
  v.ws = v.saved + (size_t)v.nws * v.W;
  v.mask = (uint8_t *)(v.ws + st->ws_bytes);
  v.pm = v.mask + mf_cuda_align((size_t)N);
  return v;
}

static char *input_slot(const views *v, int l) {
  if (l % v->seg == 0) return v->kept + (size_t)(l / v->seg - 1) * v->I;
  return v->inner + (size_t)(l % v->seg - 1) * v->I;
}

static void *saved_of(const views *v, int l) { return v->saved + (size_t)(v->nws == 1 ? 0 : l) * v->W; }

static void block_input(const views *v, int l, const bf16 *s, const bf16 *z, const bf16 **bs,
                        const bf16 **bz) {
  if (l == 0) {
    *bs = s;
    *bz = z;
  } else {
    char *p = input_slot(v, l);
    *bs = (const bf16 *)p;
    *bz = (const bf16 *)(p + v->sbytes);
  }
}

static void run_forward(mf_pf_cuda_stack *st, const views *v, int l, bf16 *s_out, bf16 *z_out,
                        const bf16 *s, const bf16 *z, int masked, mf_stack_rng rng) {
  mf_pf_cuda_weights w;
  mf_pf_cuda_bind(&w, &st->layout, st->wc + (int64_t)l * st->layout.block_numel);
  const bf16 *bs, *bz;
  block_input(v, l, s, z, &bs, &bz);
  bf16 *os = s_out, *oz = z_out;
  if (l < v->L - 1) {
    char *p = input_slot(v, l + 1);
    os = (bf16 *)p;
    oz = (bf16 *)(p + v->sbytes);
  }
  MF_ASSERT(os && oz, "pf_cuda stack: the last block's output buffers are required");
  mf_pairformer_rng r = {rng.seed, rng.step, (uint32_t)l, rng.training};
  mf_pf_cuda_block_forward(os, oz, saved_of(v, l), bs, bz, masked ? v->mask : NULL,
                           masked ? v->pm : NULL, &w, &st->table->config, v->N, st->keep, r, v->ws,
                           st->ws_bytes, &st->blas, st->stream);
  st->recomputed++;
}

void mf_pf_cuda_stack_forward(mf_pf_cuda_stack *st, bf16 *s_out, bf16 *z_out, const bf16 *s,
                              const bf16 *z, const uint8_t *mask, int N, mf_stack_rng rng) {
  MF_ASSERT(st->arena && N >= 1 && N <= st->N_max,
            "pf_cuda stack forward: N = %d, planned for N <= %d", N, st->N_max);
  views v = make_views(st, N);
  if (mask) {
    copy_dev(v.mask, mask, (size_t)N, st->stream);
    mf_pf_cuda_pair_mask(v.pm, v.mask, N, st->stream);
  }
  for (int l = 0; l < v.L; l++) run_forward(st, &v, l, s_out, z_out, s, z, mask != NULL, rng);
  st->fwd_N = mask ? -N : N;
  st->recomputed = 0;
}

void mf_pf_cuda_stack_backward(mf_pf_cuda_stack *st, bf16 *ds, bf16 *dz, float *grads,
                               const bf16 *s, const bf16 *z, const uint8_t *mask, int N,
                               mf_stack_rng rng) {
  MF_ASSERT(st->fwd_N == (mask ? -N : N),
            "pf_cuda stack backward: N = %d (mask %s) without a matching forward", N,
            mask ? "given" : "none");
  views v = make_views(st, N);
  const int masked = mask != NULL, n_seg = (v.L + v.seg - 1) / v.seg;
  const int64_t BN = st->layout.block_numel;
  for (int sg = n_seg - 1; sg >= 0; sg--) {
    int a = sg * v.seg, b = a + v.seg < v.L ? a + v.seg : v.L;
    if (sg < n_seg - 1)
      for (int l = a; l < b - 1; l++) run_forward(st, &v, l, NULL, NULL, s, z, masked, rng);
    for (int l = b - 1; l >= a; l--) {
      if (v.nws == 1 && l < v.L - 1) run_forward(st, &v, l, NULL, NULL, s, z, masked, rng);
      mf_pf_cuda_weights w;
      mf_pf_cuda_grads g;
      mf_pf_cuda_bind(&w, &st->layout, st->wc + (int64_t)l * BN);
      mf_pf_cuda_bind_grads(&g, &st->layout, st->gblock);
      MF_CHECK_CUDA(cudaMemsetAsync(st->gblock, 0, (size_t)BN * sizeof(float), st->stream));
      const bf16 *bs, *bz;
      block_input(&v, l, s, z, &bs, &bz);
      mf_pairformer_rng r = {rng.seed, rng.step, (uint32_t)l, rng.training};
      mf_pf_cuda_block_backward(ds, dz, grads ? &g : NULL, saved_of(&v, l), bs, bz,
                                masked ? v.mask : NULL, masked ? v.pm : NULL, &w,
                                &st->table->config, N, st->keep, r, v.ws, st->ws_bytes, &st->blas,
                                st->stream);
      if (grads) {
        add_grads_kernel<<<256, 256, 0, st->stream>>>(grads, st->gblock, st->d_map,
                                                      st->table->n, BN, l);
        MF_CHECK_CUDA(cudaGetLastError());
      }
    }
  }
  st->fwd_N = 0;
}
