/* stack.c — the CPU Pairformer stack with segment checkpointing and its memory planner
 * (see stack.h). Not the block math (pairformer.c) and not the parameter layout (params.c). */
#include "model/stack.h"

#include <string.h>

const char *mf_stack_policy_name(mf_stack_policy_kind k) {
  switch (k) {
    case MF_STACK_RECOMPUTE: return "recompute";
    case MF_STACK_EVERY_K: return "every-k";
    case MF_STACK_KEEP_ALL: return "keep-all";
  }
  return "?";
}

static int64_t input_elems(int N, const mf_pairformer_config *c) {
  return (int64_t)N * c->c_s + (int64_t)N * N * c->c_z;
}

/* The CPU sizer: elem_bytes (the ctx) per element of the CPU reference's layout. */
static mf_stack_sizes cpu_sizes(const mf_pairformer_config *c, int N, void *ctx) {
  int64_t eb = (int64_t)*(const size_t *)ctx, I = input_elems(N, c) * eb;
  mf_stack_sizes z = {I, (int64_t)mf_pairformer_block_saved_size(N, c) * eb, I, 0};
  return z;
}

mf_status mf_stack_plan_sized(mf_stack_plan *p, const mf_pairformer_config *c, int L, int N,
                              mf_stack_policy policy, mf_stack_sizer sizer, void *ctx) {
  memset(p, 0, sizeof *p);
  mf_status st = mf_pairformer_config_check(c);
  if (st != MF_OK) return st;
  if (L < 1 || L > MF_PARAMS_MAX_BLOCKS)
    return mf_error_set(MF_ERR_CONFIG, "stack plan: L = %d, must be in [1, %d]", L,
                        MF_PARAMS_MAX_BLOCKS);
  if (N < 1 || N > (1 << 17))
    return mf_error_set(MF_ERR_CONFIG, "stack plan: N = %d, must be in [1, %d]", N, 1 << 17);
  int seg;
  switch (policy.kind) {
    case MF_STACK_RECOMPUTE: seg = 1; break;
    case MF_STACK_KEEP_ALL: seg = L; break;
    case MF_STACK_EVERY_K:
      if (policy.k < 1)
        return mf_error_set(MF_ERR_CONFIG, "stack plan: every-k policy with k = %d, must be >= 1",
                            policy.k);
      seg = policy.k < L ? policy.k : L;
      break;
    default:
      return mf_error_set(MF_ERR_CONFIG, "stack plan: unknown policy %d", (int)policy.kind);
  }
  mf_stack_sizes z = sizer(c, N, ctx);
  p->L = L;
  p->N = N;
  p->seg = seg;
  p->n_seg = (L + seg - 1) / seg;
  p->n_workspaces = policy.kind == MF_STACK_KEEP_ALL ? L : 1;
  p->input_bytes = (int64_t)(p->n_seg - 1 + seg - 1) * z.input_bytes;
  p->workspace_bytes = (int64_t)p->n_workspaces * z.saved_bytes;
  p->grad_bytes = L > 1 ? z.grad_bytes : 0;
  p->saved_bytes = p->input_bytes + p->workspace_bytes;
  p->fixed_bytes = z.fixed_bytes;
  p->total_bytes = p->saved_bytes + p->grad_bytes + p->fixed_bytes;
  /* a non-last segment: its inner inputs (seg − 1 forwards), then every block's workspace
   * (seg); the last segment: every workspace but the last block's */
  int last_len = L - (p->n_seg - 1) * seg;
  p->recomputed_blocks = p->n_workspaces == L ? 0 : (p->n_seg - 1) * (2 * seg - 1) + last_len - 1;
  return MF_OK;
}

mf_status mf_stack_plan_make(mf_stack_plan *p, const mf_pairformer_config *c, int L, int N,
                             mf_stack_policy policy, size_t elem_bytes) {
  if (elem_bytes == 0) {
    memset(p, 0, sizeof *p);
    return mf_error_set(MF_ERR_CONFIG, "stack plan: elem_bytes = 0");
  }
  return mf_stack_plan_sized(p, c, L, N, policy, cpu_sizes, &elem_bytes);
}

static int fits(const mf_pairformer_config *c, int L, int N, mf_stack_policy policy,
                mf_stack_sizer sizer, void *ctx, int64_t budget) {
  mf_stack_plan p;
  return mf_stack_plan_sized(&p, c, L, N, policy, sizer, ctx) == MF_OK && p.total_bytes <= budget;
}

int mf_stack_max_n_sized(const mf_pairformer_config *c, int L, mf_stack_policy policy,
                         mf_stack_sizer sizer, void *ctx, int64_t budget_bytes) {
  if (!fits(c, L, 1, policy, sizer, ctx, budget_bytes)) return 0;
  int lo = 1, hi = 1 << 17; /* bytes grow with N: lo fits; find the last N that fits */
  if (fits(c, L, hi, policy, sizer, ctx, budget_bytes)) return hi;
  while (hi - lo > 1) {
    int mid = lo + (hi - lo) / 2;
    if (fits(c, L, mid, policy, sizer, ctx, budget_bytes))
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

int mf_stack_max_n(const mf_pairformer_config *c, int L, mf_stack_policy policy,
                   size_t elem_bytes, int64_t budget_bytes) {
  if (elem_bytes == 0) return 0;
  return mf_stack_max_n_sized(c, L, policy, cpu_sizes, &elem_bytes, budget_bytes);
}

mf_status mf_stack_plan_fit_sized(mf_stack_plan *p, const mf_pairformer_config *c, int L, int N,
                                  mf_stack_policy policy, mf_stack_sizer sizer, void *ctx,
                                  int64_t budget_bytes) {
  mf_stack_plan tmp;
  if (!p) p = &tmp;
  mf_status st = mf_stack_plan_sized(p, c, L, N, policy, sizer, ctx);
  if (st != MF_OK) return st;
  if (p->total_bytes <= budget_bytes) return MF_OK;
  int best = mf_stack_max_n_sized(c, L, policy, sizer, ctx, budget_bytes);
  const double gib = 1024.0 * 1024.0 * 1024.0;
  if (best == 0)
    return mf_error_set(MF_ERR_CONFIG,
                        "crop N = %d refused: the %d-block stack needs %.3f GiB of activations "
                        "(policy %s, segment %d) but the budget is %.3f GiB; no N fits",
                        N, L, p->total_bytes / gib, mf_stack_policy_name(policy.kind), p->seg,
                        budget_bytes / gib);
  return mf_error_set(MF_ERR_CONFIG,
                      "crop N = %d refused: the %d-block stack needs %.3f GiB of activations "
                      "(policy %s, segment %d) but the budget is %.3f GiB; the largest N that "
                      "fits is %d",
                      N, L, p->total_bytes / gib, mf_stack_policy_name(policy.kind), p->seg,
                      budget_bytes / gib, best);
}

mf_status mf_stack_plan_fit(mf_stack_plan *p, const mf_pairformer_config *c, int L, int N,
                            mf_stack_policy policy, size_t elem_bytes, int64_t budget_bytes) {
  if (elem_bytes == 0) {
    if (p) memset(p, 0, sizeof *p);
    return mf_error_set(MF_ERR_CONFIG, "stack plan: elem_bytes = 0");
  }
  return mf_stack_plan_fit_sized(p, c, L, N, policy, cpu_sizes, &elem_bytes, budget_bytes);
}

mf_status mf_stack_init(mf_stack *st, const mf_params_table *t, mf_stack_policy policy,
                        int N_max, int64_t budget_bytes) {
  memset(st, 0, sizeof *st);
  mf_status s = budget_bytes > 0
                    ? mf_stack_plan_fit(&st->plan, &t->config, t->L, N_max, policy,
                                        sizeof(mf_real), budget_bytes)
                    : mf_stack_plan_make(&st->plan, &t->config, t->L, N_max, policy,
                                         sizeof(mf_real));
  if (s != MF_OK) return s;
  st->table = t;
  st->N_max = N_max;
  st->buf = mf_malloc((size_t)st->plan.total_bytes, "pairformer stack activations");
  if (!st->buf) return MF_ERR_NOMEM;
  return MF_OK;
}

void mf_stack_free(mf_stack *st) {
  if (!st) return;
  mf_free(st->buf);
  memset(st, 0, sizeof *st);
}

/* ------------------------------------------------------------------ views for a crop N */

/* Where everything lives for crop N (all sizes from N, packed from buf). */
typedef struct {
  int L, seg, nws, N;
  int64_t I, W, sn;   /* input, workspace, single (N·Cs) elements */
  mf_real *kept;      /* (n_seg − 1) inputs */
  mf_real *inner;     /* seg − 1 inputs */
  mf_real *ws;        /* nws workspaces */
  mf_real *grad;      /* one input-sized gradient */
} views;

static views make_views(const mf_stack *st, int N) {
  const mf_pairformer_config *c = &st->table->config;
  views v;
  v.L = st->plan.L;
  v.seg = st->plan.seg;
  v.nws = st->plan.n_workspaces;
  v.N = N;
  v.I = input_elems(N, c);
  v.W = (int64_t)mf_pairformer_block_saved_size(N, c);
  v.sn = (int64_t)N * c->c_s;
  v.kept = st->buf;
  v.inner = v.kept + (int64_t)(st->plan.n_seg - 1) * v.I;
  v.ws = v.inner + (int64_t)(v.seg - 1) * v.I;
  v.grad = v.ws + (int64_t)v.nws * v.W;
  return v;
}

/* The input slot of block l (> 0): a kept input at a segment start, else an inner slot.
 * s part (N, Cs) first, then z (N, N, Cz). */
static mf_real *input_slot(const views *v, int l) {
  if (l % v->seg == 0) return v->kept + (int64_t)(l / v->seg - 1) * v->I;
  return v->inner + (int64_t)(l % v->seg - 1) * v->I;
}

static mf_real *workspace(const views *v, int l) { return v->ws + (v->nws == 1 ? 0 : l) * v->W; }

static void block_input(const views *v, int l, const mf_real *s, const mf_real *z,
                        const mf_real **bs, const mf_real **bz) {
  if (l == 0) {
    *bs = s;
    *bz = z;
  } else {
    mf_real *p = input_slot(v, l);
    *bs = p;
    *bz = p + v->sn;
  }
}

/* Block l's forward from its input slot into the next block's input slot (the caller's
 * s_out, z_out for the last block) and its workspace. */
static void run_forward(mf_stack *st, const views *v, int l, mf_real *s_out, mf_real *z_out,
                        const mf_real *s, const mf_real *z, const uint8_t *mask,
                        const mf_real *params, mf_stack_rng rng) {
  mf_pairformer_block w;
  mf_params_bind_block(st->table, (mf_real *)params, l, &w);
  const mf_real *bs, *bz;
  block_input(v, l, s, z, &bs, &bz);
  mf_real *os = s_out, *oz = z_out;
  if (l < v->L - 1) {
    os = input_slot(v, l + 1);
    oz = os + v->sn;
  }
  mf_pairformer_rng r = {rng.seed, rng.step, (uint32_t)l, rng.training};
  mf_pairformer_block_forward(os, oz, workspace(v, l), bs, bz, mask, &w, &st->table->config, v->N,
                              r);
  st->recomputed++;
}

void mf_stack_forward(mf_stack *st, mf_real *s_out, mf_real *z_out, const mf_real *s,
                      const mf_real *z, const uint8_t *mask, const mf_real *params, int N,
                      mf_stack_rng rng) {
  MF_ASSERT(st->buf && N >= 1 && N <= st->N_max, "stack forward: N = %d, planned for N <= %d",
            N, st->N_max);
  views v = make_views(st, N);
  for (int l = 0; l < v.L; l++) run_forward(st, &v, l, s_out, z_out, s, z, mask, params, rng);
  st->fwd_N = N;
  st->recomputed = 0;
}

void mf_stack_backward(mf_stack *st, mf_real *ds, mf_real *dz, mf_real *grads,
                       const mf_real *ds_out, const mf_real *dz_out, const mf_real *s,
                       const mf_real *z, const uint8_t *mask, const mf_real *params, int N,
                       mf_stack_rng rng) {
  MF_ASSERT(st->fwd_N == N, "stack backward: N = %d without a forward at this N (last: %d)", N,
            st->fwd_N);
  views v = make_views(st, N);
  const int n_seg = st->plan.n_seg;
  for (int sg = n_seg - 1; sg >= 0; sg--) {
    int a = sg * v.seg, b = a + v.seg < v.L ? a + v.seg : v.L;
    /* a segment before the last: its inner inputs were overwritten; regenerate them (the
     * outputs land in the inner slots, nothing else changes) */
    if (sg < n_seg - 1)
      for (int l = a; l < b - 1; l++) run_forward(st, &v, l, NULL, NULL, s, z, mask, params, rng);
    for (int l = b - 1; l >= a; l--) {
      /* with one workspace, rerun block l to fill it, except for the last block, whose
       * workspace the forward left. Its output is rewritten with the same values into the
       * next input slot (never the caller's s_out: that is block L − 1's, never rerun). */
      if (v.nws == 1 && l < v.L - 1) run_forward(st, &v, l, NULL, NULL, s, z, mask, params, rng);
      mf_pairformer_block w, g;
      mf_params_bind_block(st->table, (mf_real *)params, l, &w);
      mf_params_bind_block(st->table, grads, l, &g);
      const mf_real *bs, *bz;
      block_input(&v, l, s, z, &bs, &bz);
      /* block l writes the caller's ds, dz when l is even, the ping-pong buffer when odd */
      mf_real *gs = (l % 2 == 0) ? ds : v.grad, *gz = (l % 2 == 0) ? dz : v.grad + v.sn;
      const mf_real *gos = ds_out, *goz = dz_out;
      if (l < v.L - 1) {
        gos = ((l + 1) % 2 == 0) ? ds : v.grad;
        goz = ((l + 1) % 2 == 0) ? dz : v.grad + v.sn;
      }
      mf_pairformer_rng r = {rng.seed, rng.step, (uint32_t)l, rng.training};
      mf_pairformer_block_backward(gs, gz, &g, gos, goz, workspace(&v, l), bs, bz, mask, &w,
                                   &st->table->config, N, r);
    }
  }
  st->fwd_N = 0;
}
