/* make_bundle.c — writes a parity bundle (model/parity.h) produced by the CPU double stack:
 * random inputs, AF3-initialised parameters whose zero-initialised tensors (gates, output
 * projections, LayerNorm offsets) are perturbed so every gradient is non-trivial, the
 * forward and backward of mf_stack_* in double, and the results; producer "cpu-f64".
 * tools/reference/parity.py recomputes the bundle with PyTorch and compares.
 *
 * Everything the bundle stores as F32 (parameters, inputs, output gradients) is rounded to
 * float BEFORE the double stack runs, so the reference computes from exactly the values the
 * producer used and the two agree to the F32 rounding of the results (~1e-7 relative).
 *
 *   make_bundle OUT.safetensors [--N 12] [--L 2] [--seed 1] [--step 0] [--training 0|1]
 *                               [--mask] [--config small|af3] [--p_drop P]
 * --mask masks tokens i with i % 4 == 3 and the last one (N = 1: the only one).
 * Not a test by itself and not part of the library. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/pairformer.h"
#include "model/parity.h"
#include "model/params.h"
#include "model/stack.h"

static void usage(void) {
  fprintf(stderr,
          "usage: make_bundle OUT.safetensors [--N 12] [--L 2] [--seed 1] [--step 0]\n"
          "                   [--training 0|1] [--mask] [--config small|af3] [--p_drop P]\n");
}

/* v (n) = scale · N(0, 1) + shift from (seed, stream), rounded to float. */
static void fill_normal(mf_real *v, int64_t n, double scale, double shift, uint64_t seed,
                        uint64_t stream) {
  for (int64_t i = 0; i < n; i++)
    v[i] = (mf_real)(float)(shift + scale * (double)mf_rng_normal(seed, stream, (uint64_t)i));
}

static int parse_int(const char *s, long lo, long hi, long *out) {
  char *end = NULL;
  long x = strtol(s, &end, 10);
  if (!*s || *end || x < lo || x > hi) return 0;
  *out = x;
  return 1;
}

int main(int argc, char **argv) {
  const char *out_path = NULL, *config = "small";
  long N = 12, L = 2, seed = 1, step = 0, training = 0;
  int mask_on = 0;
  double p_drop = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int ok = 1;
    if (!strcmp(a, "--mask")) {
      mask_on = 1;
      continue;
    }
    if (a[0] != '-') {
      if (out_path) ok = 0;
      out_path = a;
      if (!ok) break;
      continue;
    }
    if (!v) ok = 0;
    else if (!strcmp(a, "--N")) ok = parse_int(v, 1, 4096, &N);
    else if (!strcmp(a, "--L")) ok = parse_int(v, 1, MF_PARAMS_MAX_BLOCKS, &L);
    else if (!strcmp(a, "--seed")) ok = parse_int(v, 0, 2147483647L, &seed);
    else if (!strcmp(a, "--step")) ok = parse_int(v, 0, 2147483647L, &step);
    else if (!strcmp(a, "--training")) ok = parse_int(v, 0, 1, &training);
    else if (!strcmp(a, "--config")) config = v;
    else if (!strcmp(a, "--p_drop")) {
      char *end = NULL;
      p_drop = strtod(v, &end);
      ok = *v && !*end && p_drop >= 0 && p_drop < 1;
    } else ok = 0;
    if (!ok) {
      fprintf(stderr, "make_bundle: bad argument %s%s%s\n", a, v ? " " : "", v ? v : "");
      usage();
      return 2;
    }
    i++;
  }
  if (!out_path) {
    usage();
    return 2;
  }

  mf_pairformer_config c = mf_pairformer_config_default();
  if (!strcmp(config, "small")) {
    /* every dimension distinct where the math allows, so a transposed weight shows */
    c = (mf_pairformer_config){.c_s = 24, .c_z = 16, .c_mul = 12, .h_tri = 2, .d_tri = 8,
                               .h_s = 3, .d_s = 6, .n_trans = 2, .p_drop = 0.25};
  } else if (strcmp(config, "af3") != 0) {
    fprintf(stderr, "make_bundle: --config is small or af3, not %s\n", config);
    return 2;
  }
  if (p_drop >= 0) c.p_drop = p_drop;

  mf_params_table t;
  mf_status st = mf_params_build_pairformer(&t, &c, (int)L);
  if (st != MF_OK) {
    fprintf(stderr, "make_bundle: %s\n", mf_error_message());
    mf_params_free(&t);
    return 1;
  }
  const int64_t P = t.total, sn = N * c.c_s, zn = N * N * c.c_z;
  mf_real *params = mf_xmalloc((size_t)P * sizeof(mf_real), "params");
  mf_real *grads = mf_xcalloc((size_t)P * sizeof(mf_real), "grads");
  mf_real *io = mf_xmalloc((size_t)(8 * sn + 6 * zn) * sizeof(mf_real), "activations");
  mf_real *s = io, *z = s + sn, *dout_s = z + zn, *dout_z = dout_s + sn;
  mf_real *s_out = dout_z + zn, *z_out = s_out + sn, *ds = z_out + zn, *dz = ds + sn;
  uint8_t *mask = mf_xmalloc((size_t)N, "mask");

  /* parameters: AF3 init, then every zero/one-initialised tensor perturbed */
  const uint64_t useed = (uint64_t)seed;
  mf_params_init(&t, params, useed);
  for (int i = 0; i < t.n; i++) {
    const mf_param_entry *e = &t.entries[i];
    mf_real *p = params + e->offset;
    uint64_t stream = mf_rng_stream(0, MF_RNG_TEST, 100 + (uint32_t)i);
    if (e->init == MF_INIT_ZEROS || e->init == MF_INIT_ONES) {
      /* matrices: lecun-like scale (half), vectors (LN β, γ − 1, b_q): 0.1 */
      double scale = e->ndim >= 3 ? 0.5 / sqrt((double)e->fan_in) : 0.1;
      for (int64_t k = 0; k < e->numel; k++)
        p[k] += (mf_real)(scale * (double)mf_rng_normal(useed, stream, (uint64_t)k));
    }
  }
  for (int64_t k = 0; k < P; k++) params[k] = (mf_real)(float)params[k];

  fill_normal(s, sn, 1.0, 0.0, useed, mf_rng_stream(0, MF_RNG_TEST, 1));
  fill_normal(z, zn, 1.0, 0.0, useed, mf_rng_stream(0, MF_RNG_TEST, 2));
  fill_normal(dout_s, sn, 1.0, 0.0, useed, mf_rng_stream(0, MF_RNG_TEST, 3));
  fill_normal(dout_z, zn, 1.0, 0.0, useed, mf_rng_stream(0, MF_RNG_TEST, 4));
  for (long i = 0; i < N; i++) mask[i] = !(mask_on && (i % 4 == 3 || i == N - 1));

  mf_stack stk;
  st = mf_stack_init(&stk, &t, (mf_stack_policy){MF_STACK_RECOMPUTE, 0}, (int)N, 0);
  if (st != MF_OK) {
    fprintf(stderr, "make_bundle: %s\n", mf_error_message());
    return 1;
  }
  mf_stack_rng rng = {useed, (uint64_t)step, (int)training};
  const uint8_t *m = mask_on ? mask : NULL;
  mf_stack_forward(&stk, s_out, z_out, s, z, m, params, (int)N, rng);
  mf_stack_backward(&stk, ds, dz, grads, dout_s, dout_z, s, z, m, params, (int)N, rng);
  mf_stack_free(&stk);

  mf_parity *b = NULL;
  const int64_t sh_s[2] = {N, c.c_s}, sh_z[3] = {N, N, c.c_z}, sh_m[1] = {N};
  if ((st = mf_parity_open(&b)) == MF_OK &&
      (st = mf_parity_meta_std(b, &t, (int)N, (int)training, "cpu-f64")) == MF_OK &&
      (st = mf_parity_add_params(b, "", &t, params)) == MF_OK &&
      (st = mf_parity_add_f32(b, "in.s", 2, sh_s, s)) == MF_OK &&
      (st = mf_parity_add_f32(b, "in.z", 3, sh_z, z)) == MF_OK &&
      (st = (mask_on ? mf_parity_add_u8(b, "in.mask", 1, sh_m, mask) : MF_OK)) == MF_OK &&
      (st = mf_parity_add_f32(b, "dout.s", 2, sh_s, dout_s)) == MF_OK &&
      (st = mf_parity_add_f32(b, "dout.z", 3, sh_z, dout_z)) == MF_OK &&
      (st = mf_parity_add_dropout(b, &t, (int)N, rng)) == MF_OK &&
      (st = mf_parity_add_f32(b, "out.s", 2, sh_s, s_out)) == MF_OK &&
      (st = mf_parity_add_f32(b, "out.z", 3, sh_z, z_out)) == MF_OK &&
      (st = mf_parity_add_f32(b, "grad.in.s", 2, sh_s, ds)) == MF_OK &&
      (st = mf_parity_add_f32(b, "grad.in.z", 3, sh_z, dz)) == MF_OK &&
      (st = mf_parity_add_params(b, "grad.", &t, grads)) == MF_OK)
    st = mf_parity_write(b, out_path);
  mf_parity_free(b);
  if (st != MF_OK) fprintf(stderr, "make_bundle: %s\n", mf_error_message());
  else
    printf("make_bundle: %s: N=%ld L=%ld config=%s training=%ld mask=%d, %lld parameters\n",
           out_path, N, L, config, training, mask_on, (long long)P);

  mf_free(mask);
  mf_free(io);
  mf_free(grads);
  mf_free(params);
  mf_params_free(&t);
  return st == MF_OK ? 0 : 1;
}
