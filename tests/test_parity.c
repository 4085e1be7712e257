/* test_parity.c — the parity bundle writer (model/parity.h): the file is safetensors as an
 * independent reader (jansson) sees it (header length, 8-aligned data, dtypes, shapes,
 * contiguous offsets covering the data, F32 before U8, values rounded to float, metadata
 * escaped and round-tripped); the standard metadata and config string; parameters and
 * gradients under their table names; the dropout masks equal mf_dropout_mask's with the
 * stack's streams; bad names/shapes and duplicates are errors; a write into a missing
 * directory fails with MF_ERR_IO and leaves no file; no temporary file is left behind;
 * allocation failures are reported and leak nothing. The PyTorch side is
 * tests/cli/test_parity.sh. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, readdir */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "model/parity.h"
#include "model/params.h"
#include "ops/dropout.h"

static char g_dir[64];

/* The parsed file: header JSON and a pointer to the data. */
typedef struct {
  unsigned char *raw;
  size_t len;
  json_t *hdr;
  const unsigned char *data;
  uint64_t data_len, hlen;
} parsed;

static int parse_file(parsed *p, const char *path) {
  memset(p, 0, sizeof *p);
  p->raw = mf_test_read_file(path, &p->len);
  if (!p->raw || p->len < 8) return 0;
  for (int i = 0; i < 8; i++) p->hlen |= (uint64_t)p->raw[i] << (8 * i);
  if (p->hlen > p->len - 8) return 0;
  p->hdr = json_loadb((const char *)p->raw + 8, (size_t)p->hlen, JSON_REJECT_DUPLICATES, NULL);
  p->data = p->raw + 8 + p->hlen;
  p->data_len = p->len - 8 - p->hlen;
  return p->hdr != NULL;
}

static void parsed_free(parsed *p) {
  json_decref(p->hdr);
  free(p->raw);
}

/* Tensor entry fields; returns 0 when absent/malformed. */
static int entry(const parsed *p, const char *name, const char **dtype, int64_t *shape, int *ndim,
                 uint64_t *b, uint64_t *e) {
  json_t *v = json_object_get(p->hdr, name);
  if (!json_is_object(v)) return 0;
  *dtype = json_string_value(json_object_get(v, "dtype"));
  json_t *sh = json_object_get(v, "shape"), *off = json_object_get(v, "data_offsets");
  *ndim = (int)json_array_size(sh);
  for (int d = 0; d < *ndim && d < 8; d++) shape[d] = json_integer_value(json_array_get(sh, (size_t)d));
  *b = (uint64_t)json_integer_value(json_array_get(off, 0));
  *e = (uint64_t)json_integer_value(json_array_get(off, 1));
  return *dtype != NULL;
}

static int no_temp_files(void) {
  DIR *d = opendir(g_dir);
  if (!d) return 0;
  struct dirent *de;
  int ok = 1;
  while ((de = readdir(d)))
    if (strstr(de->d_name, ".tmp.")) ok = 0;
  closedir(d);
  return ok;
}

static void test_layout(void) {
  char path[128];
  snprintf(path, sizeof path, "%s/a.safetensors", g_dir);
  mf_parity *b = NULL;
  MF_TEST(mf_parity_open(&b) == MF_OK && b, "open");
  const int64_t sa[2] = {2, 3}, su[1] = {5}, sr[3] = {1, 2, 2};
  mf_real va[6] = {1.0, -2.5, 1.0 / 3.0, 0, 1e-3, 7};
  float vr[4] = {0.5f, 1.5f, -2.f, 3.25f};
  uint8_t vu[5] = {1, 0, 1, 1, 0};
  MF_TEST(mf_parity_add_u8(b, "m", 1, su, vu) == MF_OK, "add u8 first");
  MF_TEST(mf_parity_add_f32(b, "x.a", 2, sa, va) == MF_OK, "add f32");
  MF_TEST(mf_parity_add_f32_raw(b, "x\"q", 3, sr, vr) == MF_OK, "add f32 raw, quote in name");
  MF_TEST(mf_parity_add_f32(b, "scalar", 0, NULL, va) == MF_OK, "add a 0-d tensor");
  MF_TEST(mf_parity_meta(b, "k", "first") == MF_OK && mf_parity_meta(b, "k", "v \"1\"\n\\") == MF_OK,
          "metadata set and replaced");
  MF_TEST(mf_parity_write(b, path) == MF_OK, "write: %s", mf_error_message());
  mf_parity_free(b);
  MF_TEST(no_temp_files(), "no temporary file left");

  parsed p;
  MF_TEST(parse_file(&p, path), "the header is JSON");
  if (!p.hdr) {
    parsed_free(&p);
    return;
  }
  MF_TEST((8 + p.hlen) % 8 == 0, "data starts 8-aligned (header %llu)", (unsigned long long)p.hlen);
  json_t *meta = json_object_get(p.hdr, "__metadata__");
  MF_TEST(json_is_object(meta) && json_object_size(meta) == 1 &&
              !strcmp(json_string_value(json_object_get(meta, "k")) ? json_string_value(json_object_get(meta, "k")) : "", "v \"1\"\n\\"),
          "metadata round-trips escaped and the replacement wins");
  MF_TEST(json_object_size(p.hdr) == 5, "4 tensors + metadata, got %zu", json_object_size(p.hdr));
  const char *dt;
  int64_t sh[8];
  int nd;
  uint64_t o0, o1;
  MF_TEST(entry(&p, "x.a", &dt, sh, &nd, &o0, &o1) && !strcmp(dt, "F32") && nd == 2 && sh[0] == 2 &&
              sh[1] == 3 && o0 == 0 && o1 == 24,
          "x.a: F32 [2, 3] at [0, 24)");
  int vals = 1;
  for (int i = 0; i < 6 && o1 <= p.data_len; i++) {
    float f;
    memcpy(&f, p.data + o0 + 4 * (uint64_t)i, 4);
    vals &= f == (float)va[i];
  }
  MF_TEST(vals, "x.a values are the inputs rounded to float");
  MF_TEST(entry(&p, "x\"q", &dt, sh, &nd, &o0, &o1) && !strcmp(dt, "F32") && nd == 3 && o0 == 24 &&
              o1 == 40 && !memcmp(p.data + 24, vr, 16),
          "raw F32 second, bit-exact");
  MF_TEST(entry(&p, "scalar", &dt, sh, &nd, &o0, &o1) && nd == 0 && o0 == 40 && o1 == 44,
          "0-d F32 tensor: 4 bytes");
  MF_TEST(entry(&p, "m", &dt, sh, &nd, &o0, &o1) && !strcmp(dt, "U8") && nd == 1 && sh[0] == 5 &&
              o0 == 44 && o1 == 49 && !memcmp(p.data + 44, vu, 5),
          "U8 after every F32 tensor although added first");
  MF_TEST(p.data_len == 49, "the tensors cover the data exactly (%llu)", (unsigned long long)p.data_len);
  parsed_free(&p);
}

static void test_errors(void) {
  mf_parity *b = NULL;
  MF_TEST(mf_parity_open(&b) == MF_OK, "open");
  const int64_t s1[1] = {2}, sneg[2] = {2, -1}, s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  mf_real v[2] = {1, 2};
  MF_TEST(mf_parity_add_f32(b, "a", 1, s1, v) == MF_OK, "add");
  MF_TEST(mf_parity_add_f32(b, "a", 1, s1, v) == MF_ERR_CONFIG &&
              strstr(mf_error_message(), "twice"),
          "duplicate name: %s", mf_error_message());
  MF_TEST(mf_parity_add_f32(b, "", 1, s1, v) == MF_ERR_CONFIG, "empty name");
  MF_TEST(mf_parity_add_f32(b, "__metadata__", 1, s1, v) == MF_ERR_CONFIG, "reserved name");
  MF_TEST(mf_parity_add_f32(b, "n", 2, sneg, v) == MF_ERR_CONFIG, "negative dim");
  MF_TEST(mf_parity_add_f32(b, "n", 9, s9, v) == MF_ERR_CONFIG, "9 dims");
  MF_TEST(mf_parity_meta(b, "", "x") == MF_ERR_CONFIG, "empty metadata key");
  char path[160];
  snprintf(path, sizeof path, "%s/missing/dir/b.safetensors", g_dir);
  MF_TEST(mf_parity_write(b, path) == MF_ERR_IO && strstr(mf_error_message(), "missing/dir"),
          "write into a missing directory: %s", mf_error_message());
  MF_TEST(access(path, F_OK) != 0, "and no file appears");
  mf_parity_free(b);
  mf_parity_free(NULL);
}

static mf_pairformer_config tiny_config(void) {
  return (mf_pairformer_config){.c_s = 8, .c_z = 6, .c_mul = 5, .h_tri = 2, .d_tri = 3, .h_s = 2,
                                .d_s = 4, .n_trans = 2, .p_drop = 0.25};
}

/* The standard layout of a bundle for a 2-block table: metadata, parameter names, masks. */
static void test_standard(void) {
  mf_pairformer_config c = tiny_config();
  mf_params_table t;
  MF_TEST(mf_params_build_pairformer(&t, &c, 2) == MF_OK, "table");
  double *params = mf_test_alloc(t.total);
  float *pf = malloc(sizeof(float) * (size_t)t.total);
  mf_params_init(&t, params, 5);
  for (int64_t i = 0; i < t.total; i++) pf[i] = (float)(0.5 * params[i]);
  const int N = 3;
  mf_stack_rng rng = {11, 7, 1};
  mf_parity *b = NULL;
  char path[128];
  snprintf(path, sizeof path, "%s/std.safetensors", g_dir);
  MF_TEST(mf_parity_open(&b) == MF_OK && mf_parity_meta_std(b, &t, N, 1, "cpu-f64") == MF_OK &&
              mf_parity_add_params(b, "", &t, params) == MF_OK &&
              mf_parity_add_params_f32(b, "grad.", &t, pf) == MF_OK &&
              mf_parity_add_dropout(b, &t, N, rng) == MF_OK && mf_parity_write(b, path) == MF_OK,
          "standard bundle: %s", mf_error_message());
  mf_parity_free(b);
  parsed p;
  MF_TEST(parse_file(&p, path), "parsed");
  if (!p.hdr) {
    parsed_free(&p);
    free(pf);
    mf_params_free(&t);
    return;
  }
  json_t *meta = json_object_get(p.hdr, "__metadata__");
  const char *cfg = json_string_value(json_object_get(meta, "config"));
  MF_TEST(!strcmp(json_string_value(json_object_get(meta, "format")), "megafold-parity") &&
              !strcmp(json_string_value(json_object_get(meta, "N")), "3") &&
              !strcmp(json_string_value(json_object_get(meta, "training")), "1") &&
              !strcmp(json_string_value(json_object_get(meta, "producer")), "cpu-f64"),
          "format, N, training, producer");
  MF_TEST(cfg && !strcmp(cfg, "{\"pairformer\":{\"L\":2,\"c_mul\":5,\"c_s\":8,\"c_z\":6,\"d_s\":4,"
                              "\"d_tri\":3,\"h_s\":2,\"h_tri\":2,\"n_trans\":2,\"p_drop\":0.25}}"),
          "config string as the checkpoint writes it: %s", cfg ? cfg : "(none)");
  MF_TEST(json_object_size(p.hdr) == (size_t)(2 * t.n + 8 + 1), "2·%d parameters + 8 masks, got %zu",
          t.n, json_object_size(p.hdr) - 1);
  int names = 1, vals = 1;
  for (int i = 0; i < t.n; i++) {
    const mf_param_entry *e = &t.entries[i];
    char g[96];
    snprintf(g, sizeof g, "grad.%s", e->name);
    const char *dt;
    int64_t sh[8];
    int nd;
    uint64_t o0, o1, q0, q1;
    int ok = entry(&p, e->name, &dt, sh, &nd, &o0, &o1) && nd == e->ndim &&
             entry(&p, g, &dt, sh, &nd, &q0, &q1) && (q1 - q0) == 4 * (uint64_t)e->numel;
    for (int d = 0; ok && d < e->ndim; d++) ok = sh[d] == e->shape[d];
    names &= ok;
    if (!ok) continue;
    for (int64_t k = 0; k < e->numel; k++) {
      float a, gg;
      memcpy(&a, p.data + o0 + 4 * (uint64_t)k, 4);
      memcpy(&gg, p.data + q0 + 4 * (uint64_t)k, 4);
      vals &= a == (float)params[e->offset + k] && gg == pf[e->offset + k];
    }
  }
  MF_TEST(names, "every parameter and gradient under its table name and stacked shape");
  MF_TEST(vals, "parameter and gradient values in the table's layout");
  double mask[18];
  int masks = 1;
  for (int l = 0; l < 2; l++)
    for (int k = 0; k < 4; k++) {
      char name[32];
      snprintf(name, sizeof name, "drop.%d.%d", l, k);
      mf_dropout_mask(mask, N, c.c_z, c.p_drop, rng.seed,
                      mf_rng_stream(rng.step, MF_RNG_DROPOUT, 4 * (uint32_t)l + (uint32_t)k));
      const char *dt;
      int64_t sh[8];
      int nd;
      uint64_t o0, o1;
      int ok = entry(&p, name, &dt, sh, &nd, &o0, &o1) && nd == 2 && sh[0] == N && sh[1] == c.c_z;
      for (int i = 0; ok && i < N * c.c_z; i++) {
        float f;
        memcpy(&f, p.data + o0 + 4 * (uint64_t)i, 4);
        ok = f == (float)mask[i];
      }
      masks &= ok;
    }
  MF_TEST(masks, "drop.<l>.<k> are mf_dropout_mask's with the stack's streams");
  parsed_free(&p);

  /* training 0: no masks */
  MF_TEST(mf_parity_open(&b) == MF_OK, "open");
  rng.training = 0;
  MF_TEST(mf_parity_add_dropout(b, &t, N, rng) == MF_OK, "no masks when not training");
  mf_parity_free(b);

  /* allocation failures at every step: reported, nothing leaks */
  mf_mem_stats_t before = mf_mem_stats(MF_HOST);
  int reported = 1;
  for (int64_t k = 0; k < 400; k++) {
    int64_t inj0 = mf_alloc_injected_failures();
    mf_alloc_fail_after(k);
    mf_parity *bb = NULL;
    mf_status st = mf_parity_open(&bb);
    if (st == MF_OK) st = mf_parity_meta_std(bb, &t, N, 1, "cpu-f64");
    if (st == MF_OK) st = mf_parity_add_params(bb, "", &t, params);
    rng.training = 1;
    if (st == MF_OK) st = mf_parity_add_dropout(bb, &t, N, rng);
    if (st == MF_OK) st = mf_parity_write(bb, path);
    mf_parity_free(bb);
    int injected = mf_alloc_injected_failures() > inj0;
    mf_alloc_fail_after(-1);
    if (injected && st != MF_ERR_NOMEM) reported = 0;
    if (!injected) break;
  }
  mf_mem_stats_t after = mf_mem_stats(MF_HOST);
  MF_TEST(reported, "every injected allocation failure is MF_ERR_NOMEM");
  MF_TEST(after.count == before.count, "no leak across failures (%lld vs %lld live)",
          (long long)after.count, (long long)before.count);
  MF_TEST(no_temp_files(), "no temporary file left after failures");
  free(pf);
  mf_params_free(&t);
}

int main(void) {
  mf_test_begin("test_parity");
  snprintf(g_dir, sizeof g_dir, "/tmp/mf_parity_XXXXXX");
  if (!mkdtemp(g_dir)) {
    MF_TEST(0, "mkdtemp");
    return mf_test_end();
  }
  test_layout();
  test_errors();
  test_standard();
  mf_test_rm_rf(g_dir);
  mf_test_free_all();
  return mf_test_end();
}
