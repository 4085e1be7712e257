/* test_checkpoint.c — safetensors checkpoints (train/checkpoint.h): round trip; a load in a
 * fresh process (this binary re-executed) is bit-identical; the file follows the safetensors
 * layout rules, checked here by an independent reader; truncated files, corrupt headers,
 * wrong shapes/dtypes, missing or unknown tensors, overlapping or out-of-range offsets and
 * wrong metadata are errors naming the file and the tensor (never crashes, buffers
 * untouched); a crash between write and rename leaves the previous checkpoint intact;
 * allocation failures are reported and leak nothing. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, fork, execv, waitpid, readdir */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "model/params.h"
#include "train/checkpoint.h"

static mf_pairformer_config tiny_config(void) {
  return (mf_pairformer_config){.c_s = 8, .c_z = 6, .c_mul = 5, .h_tri = 2, .d_tri = 3, .h_s = 2,
                                .d_s = 4, .n_trans = 2, .p_drop = 0.25};
}

static char g_dir[64];

static void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", g_dir, name); }

static uint64_t le64(const unsigned char *p) {
  uint64_t n = 0;
  for (int i = 0; i < 8; i++) n |= (uint64_t)p[i] << (8 * i);
  return n;
}

/* The fixture: a 2-block table and buffers of float-representable values (the file is F32). */
typedef struct {
  mf_params_table t;
  double *p, *m, *v;
} fixture;

static void fixture_make(fixture *fx, int L, uint64_t seed) {
  mf_pairformer_config c = tiny_config();
  MF_TEST(mf_params_build_pairformer(&fx->t, &c, L) == MF_OK, "table");
  int64_t n = fx->t.total;
  fx->p = mf_test_alloc(n);
  fx->m = mf_test_alloc(n);
  fx->v = mf_test_alloc(n);
  mf_params_init(&fx->t, fx->p, seed);
  mf_test_randn(fx->m, n, seed + 1, 0.01);
  mf_test_randu(fx->v, n, seed + 2, 1e-8, 1e-4);
  for (int64_t i = 0; i < n; i++) {
    fx->p[i] = (double)(float)(fx->p[i] + 1e-3 * fx->m[i]); /* the zero-init ones too */
    fx->m[i] = (double)(float)fx->m[i];
    fx->v[i] = (double)(float)fx->v[i];
  }
}

static int same(const double *a, const double *b, int64_t n) {
  return memcmp(a, b, (size_t)n * sizeof(double)) == 0;
}

static int count_files(const char *prefix) {
  DIR *d = opendir(g_dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
  if (d) closedir(d);
  return n;
}

/* ------------------------------------------------------------------ child process */

/* argv: --child-load <checkpoint> <out>: load into a fresh table and buffers, dump them. */
static int child_load(const char *ckpt, const char *out) {
  fixture fx;
  mf_pairformer_config c = tiny_config();
  if (mf_params_build_pairformer(&fx.t, &c, 2) != MF_OK) return 2;
  int64_t n = fx.t.total;
  double *buf = calloc((size_t)(3 * n), sizeof(double));
  uint64_t st[2] = {0, 0};
  mf_status s = mf_ckpt_load(ckpt, &fx.t, buf, buf + n, buf + 2 * n, &st[0], &st[1]);
  if (s == MF_OK) {
    FILE *f = fopen(out, "wb");
    if (f) {
      fwrite(buf, sizeof(double), (size_t)(3 * n), f);
      fwrite(st, sizeof st, 1, f);
      fclose(f);
    }
  } else {
    fprintf(stderr, "child: %s\n", mf_error_message());
  }
  free(buf);
  mf_params_free(&fx.t);
  return s == MF_OK ? 0 : 3;
}

static void test_round_trip(void) {
  fixture fx;
  fixture_make(&fx, 2, 5);
  int64_t n = fx.t.total;
  char path[128], out[128];
  path_in(path, sizeof path, "a.safetensors");
  MF_TEST(mf_ckpt_save(path, &fx.t, fx.p, fx.m, fx.v, 123, 77) == MF_OK, "save: %s", mf_error_message());
  MF_TEST(count_files("a.safetensors") == 1, "no temporary file is left behind");
  double *p = mf_test_alloc(n), *m = mf_test_alloc(n), *v = mf_test_alloc(n);
  mf_test_poison(p, n);
  uint64_t step = 0, seed = 0;
  MF_TEST(mf_ckpt_load(path, &fx.t, p, m, v, &step, &seed) == MF_OK, "load: %s", mf_error_message());
  MF_TEST(same(p, fx.p, n) && same(m, fx.m, n) && same(v, fx.v, n) && step == 123 && seed == 77,
          "round trip: params, m, v, step, seed bit-identical");

  /* a fresh process image: this binary, re-executed, loads the file and dumps what it got */
  path_in(out, sizeof out, "child.bin");
  pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", "test_checkpoint", "--child-load", path, out, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  size_t len = 0;
  unsigned char *b = mf_test_read_file(out, &len);
  int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && b &&
           len == (size_t)(3 * n) * sizeof(double) + 16;
  if (ok) {
    const double *d = (const double *)b;
    uint64_t st[2];
    memcpy(st, b + (size_t)(3 * n) * sizeof(double), sizeof st);
    ok = same(d, fx.p, n) && same(d + n, fx.m, n) && same(d + 2 * n, fx.v, n) && st[0] == 123 &&
         st[1] == 77;
  }
  MF_TEST(ok, "a fresh process loads the checkpoint bit-identically (exit %d)", WEXITSTATUS(status));
  free(b);
  unlink(out);

  /* weights only */
  char wpath[128];
  path_in(wpath, sizeof wpath, "w.safetensors");
  MF_TEST(mf_ckpt_save(wpath, &fx.t, fx.p, NULL, NULL, 9, 1) == MF_OK, "weights-only save");
  mf_test_poison(p, n);
  MF_TEST(mf_ckpt_load(wpath, &fx.t, p, NULL, NULL, NULL, NULL) == MF_OK && same(p, fx.p, n),
          "weights-only load");
  MF_TEST(mf_ckpt_load(wpath, &fx.t, p, m, v, NULL, NULL) == MF_ERR_FORMAT &&
              strstr(mf_error_message(), "optim.m.pairformer.") && strstr(mf_error_message(), wpath),
          "optimiser state asked of a weights-only file: %s", mf_error_message());
  MF_TEST(mf_ckpt_load(path, &fx.t, p, NULL, NULL, NULL, NULL) == MF_OK && same(p, fx.p, n),
          "params alone from a full checkpoint");
  MF_TEST(mf_ckpt_save(wpath, &fx.t, fx.p, fx.m, NULL, 1, 1) == MF_ERR_CONFIG, "m without v refused");
  mf_params_free(&fx.t);
}

/* An independent reader: the safetensors layout rules, and the data where the table says. */
static void test_safetensors_layout(void) {
  fixture fx;
  fixture_make(&fx, 2, 6);
  char path[128];
  path_in(path, sizeof path, "layout.safetensors");
  MF_TEST(mf_ckpt_save(path, &fx.t, fx.p, fx.m, fx.v, 42, 3) == MF_OK, "save");
  size_t len = 0;
  unsigned char *b = mf_test_read_file(path, &len);
  uint64_t n = b && len >= 8 ? le64(b) : 0;
  MF_TEST(n > 0 && 8 + n <= len, "8-byte little-endian header length %llu within the file",
          (unsigned long long)n);
  if (!(n > 0 && 8 + n <= len)) {
    free(b);
    mf_params_free(&fx.t);
    return;
  }
  MF_TEST((8 + n) % 8 == 0, "data starts at a multiple of 8 (%llu)", (unsigned long long)(8 + n));
  MF_TEST(b[8] == '{', "header begins with '{'");
  uint64_t last = 8 + n - 1;
  while (last > 8 && b[last] == ' ') last--;
  MF_TEST(b[last] == '}' && last + 8 > 8 + n - 1, "JSON then only space padding (< 8 bytes)");
  json_error_t jerr;
  json_t *root = json_loadb((const char *)b + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
  MF_TEST(json_is_object(root), "header parses as one JSON object: %s", root ? "" : jerr.text);
  json_t *meta = json_object_get(root, "__metadata__");
  const char *key;
  json_t *v;
  int strings = json_is_object(meta);
  json_object_foreach(meta, key, v) strings &= json_is_string(v);
  MF_TEST(strings && !strcmp(json_string_value(json_object_get(meta, "step")), "42") &&
              json_object_get(meta, "config") && json_object_get(meta, "format_version"),
          "__metadata__: string → string with step, config, format_version");
  /* every tensor: F32, Π shape · 4 bytes; ranges tile the data exactly */
  uint64_t data_len = len - 8 - n, covered = 0;
  int ok = 1, count = 0;
  unsigned char *mark = calloc((size_t)data_len + 1, 1);
  json_object_foreach(root, key, v) {
    if (!strcmp(key, "__metadata__")) continue;
    json_t *sh = json_object_get(v, "shape"), *off = json_object_get(v, "data_offsets");
    uint64_t numel = 1;
    for (size_t d = 0; d < json_array_size(sh); d++) numel *= (uint64_t)json_integer_value(json_array_get(sh, d));
    uint64_t b0 = (uint64_t)json_integer_value(json_array_get(off, 0));
    uint64_t b1 = (uint64_t)json_integer_value(json_array_get(off, 1));
    ok &= !strcmp(json_string_value(json_object_get(v, "dtype")), "F32") && b1 - b0 == 4 * numel &&
          b1 <= data_len;
    for (uint64_t i = b0; i < b1 && b1 <= data_len; i++) ok &= mark[i]++ == 0;
    covered += b1 - b0;
    count++;
  }
  free(mark);
  MF_TEST(ok && covered == data_len && count == 3 * fx.t.n,
          "%d F32 tensors, sizes match shapes, no overlap, no hole, file length = 8 + n + data",
          count);
  /* the data: block 1, element 3 of tri_in.w_bp, and of its v moment */
  const mf_param_entry *e = mf_params_find(&fx.t, "pairformer.tri_in.w_bp");
  json_t *pe = json_object_get(root, "pairformer.tri_in.w_bp");
  json_t *ve = json_object_get(root, "optim.v.pairformer.tri_in.w_bp");
  json_t *ps = json_object_get(pe, "shape");
  MF_TEST(json_array_size(ps) == 3 && json_integer_value(json_array_get(ps, 0)) == 2 &&
              json_integer_value(json_array_get(ps, 1)) == 5 &&
              json_integer_value(json_array_get(ps, 2)) == 6,
          "tri_in.w_bp is stored as (L, Ch, Cz) = (2, 5, 6)");
  float fp, fv;
  size_t k = (size_t)(e->block_numel + 3) * 4;
  memcpy(&fp, b + 8 + n + (size_t)json_integer_value(json_array_get(json_object_get(pe, "data_offsets"), 0)) + k, 4);
  memcpy(&fv, b + 8 + n + (size_t)json_integer_value(json_array_get(json_object_get(ve, "data_offsets"), 0)) + k, 4);
  MF_TEST(fp == (float)fx.p[e->offset + e->block_numel + 3] &&
              fv == (float)fx.v[e->offset + e->block_numel + 3],
          "tensor data little-endian F32 at data_offsets, stacked (L, ...)");
  json_decref(root);
  free(b);
  mf_params_free(&fx.t);
}

/* ------------------------------------------------------------------ bad files */

typedef void (*mutator)(json_t *root);

/* A copy of src with its header rewritten by fn (data unchanged). */
static void write_mutated(const char *dst, const unsigned char *src, size_t len, mutator fn) {
  uint64_t n = le64(src);
  json_t *root = json_loadb((const char *)src + 8, (size_t)n, 0, NULL);
  fn(root);
  char *h = json_dumps(root, JSON_COMPACT);
  size_t hl = strlen(h), pl = (hl + 7) / 8 * 8;
  unsigned char *out = malloc(8 + pl + (len - 8 - n));
  for (int i = 0; i < 8; i++) out[i] = (unsigned char)(pl >> (8 * i));
  memcpy(out + 8, h, hl);
  memset(out + 8 + hl, ' ', pl - hl);
  memcpy(out + 8 + pl, src + 8 + n, len - 8 - n);
  mf_test_write_file(dst, out, 8 + pl + (len - 8 - n));
  free(out);
  free(h);
  json_decref(root);
}

static void mut_shape(json_t *r) {
  json_object_set_new(json_object_get(r, "pairformer.tri_out.w_ap"), "shape", json_pack("[i,i,i]", 2, 6, 5));
}
static void mut_missing(json_t *r) { json_object_del(r, "optim.v.pairformer.att_end.w_q"); }
static void mut_dtype(json_t *r) {
  json_object_set_new(json_object_get(r, "pairformer.single_att.w_k"), "dtype", json_string("I32"));
}
static void mut_overlap(json_t *r) {
  json_t *a = json_object_get(json_object_get(r, "pairformer.tri_out.w_ap"), "data_offsets");
  json_object_set(json_object_get(r, "pairformer.tri_out.w_ag"), "data_offsets", a);
}
static void mut_range(json_t *r) {
  json_t *o = json_object_get(json_object_get(r, "optim.v.pairformer.single_trans.w_o"), "data_offsets");
  json_int_t b = json_integer_value(json_array_get(o, 0)), e = json_integer_value(json_array_get(o, 1));
  json_array_set_new(o, 0, json_integer(b + 4000));
  json_array_set_new(o, 1, json_integer(e + 4000));
}
static void mut_unknown(json_t *r) {
  json_object_set_new(r, "pairformer.extra", json_pack("{s:s,s:[],s:[i,i]}", "dtype", "F32", "shape",
                                                       "data_offsets", 0, 4));
}
static void mut_version(json_t *r) {
  json_object_set_new(json_object_get(r, "__metadata__"), "format_version", json_string("2"));
}
static void mut_step(json_t *r) {
  json_object_set_new(json_object_get(r, "__metadata__"), "step", json_string("12x"));
}
/* Sets config.pairformer.<key> = value in the metadata. */
static void set_config_key(json_t *r, const char *key, json_t *value) {
  json_t *meta = json_object_get(r, "__metadata__");
  json_t *c = json_loads(json_string_value(json_object_get(meta, "config")), 0, NULL);
  json_object_set_new(json_object_get(c, "pairformer"), key, value);
  char *s = json_dumps(c, JSON_COMPACT);
  json_object_set_new(meta, "config", json_string(s));
  free(s);
  json_decref(c);
}
static void mut_config(json_t *r) { set_config_key(r, "c_mul", json_integer(99)); }
static void mut_dropout(json_t *r) { set_config_key(r, "p_drop", json_real(0.1)); }
static void mut_meta_type(json_t *r) {
  json_object_set_new(json_object_get(r, "__metadata__"), "seed", json_integer(3));
}

static int untouched(const double *p, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (p[i] != 12345.0) return 0;
  return 1;
}

/* Loads path into sentinel buffers: the status, and a check that nothing was written. */
static mf_status load_expect_fail(fixture *fx, const char *path, const char *what,
                                  const char *must_contain) {
  int64_t n = fx->t.total;
  double *p = malloc((size_t)n * 8), *m = malloc((size_t)n * 8), *v = malloc((size_t)n * 8);
  for (int64_t i = 0; i < n; i++) p[i] = m[i] = v[i] = 12345.0;
  mf_status st = mf_ckpt_load(path, &fx->t, p, m, v, NULL, NULL);
  const char *msg = mf_error_message();
  MF_TEST(st != MF_OK && strstr(msg, path) && (!must_contain || strstr(msg, must_contain)) &&
              untouched(p, n) && untouched(m, n) && untouched(v, n),
          "%s: refused (%s) naming the file%s%s, buffers untouched: %s", what, mf_status_name(st),
          must_contain ? " and " : "", must_contain ? must_contain : "", msg);
  free(p);
  free(m);
  free(v);
  return st;
}

static void test_bad_files(void) {
  fixture fx;
  fixture_make(&fx, 2, 8);
  char good[128], bad[128];
  path_in(good, sizeof good, "good.safetensors");
  path_in(bad, sizeof bad, "bad.safetensors");
  MF_TEST(mf_ckpt_save(good, &fx.t, fx.p, fx.m, fx.v, 1, 2) == MF_OK, "save");
  size_t len = 0;
  unsigned char *src = mf_test_read_file(good, &len);
  uint64_t n = le64(src);

  char missing[128];
  path_in(missing, sizeof missing, "does-not-exist.safetensors");
  MF_TEST(load_expect_fail(&fx, missing, "missing file", NULL) == MF_ERR_IO, "missing file: IO");

  /* truncations at every interesting length */
  size_t cuts[] = {0, 3, 8, 8 + (size_t)n / 2, 8 + (size_t)n, 8 + (size_t)n + 5, len / 2 + 7, len - 4, len - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    mf_test_write_file(bad, src, cuts[i]);
    char what[64];
    snprintf(what, sizeof what, "truncated to %zu of %zu bytes", cuts[i], len);
    MF_TEST(load_expect_fail(&fx, bad, what, NULL) == MF_ERR_FORMAT, "%s: FORMAT", what);
  }
  /* one trailing byte too many */
  unsigned char *longer = malloc(len + 1);
  memcpy(longer, src, len);
  longer[len] = 0;
  mf_test_write_file(bad, longer, len + 1);
  load_expect_fail(&fx, bad, "one byte appended", "cover");

  /* corrupt headers */
  unsigned char *cp = malloc(len);
  memcpy(cp, src, len);
  cp[8] = 'x';
  mf_test_write_file(bad, cp, len);
  load_expect_fail(&fx, bad, "header not beginning with '{'", "'{'");
  memcpy(cp, src, len);
  for (size_t i = 8 + (size_t)n / 2; i < 8 + n; i++)
    if (cp[i] >= '0' && cp[i] <= '9') {
      cp[i] = '"'; /* a digit becomes a quote */
      break;
    }
  mf_test_write_file(bad, cp, len);
  load_expect_fail(&fx, bad, "a stray quote in the JSON", "JSON");
  memcpy(cp, src, len);
  memset(cp, 0xff, 8);
  mf_test_write_file(bad, cp, len);
  load_expect_fail(&fx, bad, "header length 2^64 - 1", "header length");
  memcpy(cp, src, len);
  for (int i = 0; i < 8; i++) cp[i] = (unsigned char)((n - 8) >> (8 * i)); /* JSON cut short */
  mf_test_write_file(bad, cp, len);
  load_expect_fail(&fx, bad, "header length too short", NULL);
  /* a duplicate key, made by renaming w_q → w_k in the text (same length) */
  memcpy(cp, src, len);
  char *hk = strstr((char *)cp + 8, "\"pairformer.att_end.w_q\"");
  if (hk) hk[22] = 'k';
  mf_test_write_file(bad, cp, len);
  load_expect_fail(&fx, bad, "duplicate tensor name", "duplicate");
  free(cp);

  struct { mutator fn; const char *what, *contains; mf_status want; } muts[] = {
      {mut_shape, "wrong shape", "pairformer.tri_out.w_ap\" has shape [2, 6, 5], expected [2, 5, 6]", MF_ERR_SHAPE},
      {mut_missing, "missing tensor", "optim.v.pairformer.att_end.w_q\" is missing", MF_ERR_FORMAT},
      {mut_dtype, "wrong dtype", "pairformer.single_att.w_k\" has dtype I32", MF_ERR_SHAPE},
      {mut_overlap, "overlapping offsets", "overlap", MF_ERR_FORMAT},
      {mut_range, "offsets out of range", "optim.v.pairformer.single_trans.w_o\": data_offsets", MF_ERR_FORMAT},
      {mut_unknown, "unknown tensor", "pairformer.extra\" is not in the parameter table", MF_ERR_FORMAT},
      {mut_version, "format version 2", "format_version", MF_ERR_FORMAT},
      {mut_step, "step not a number", "step", MF_ERR_FORMAT},
      {mut_config, "another config", "c_mul", MF_ERR_CONFIG},
      {mut_meta_type, "non-string metadata", "seed", MF_ERR_FORMAT},
  };
  for (size_t i = 0; i < sizeof muts / sizeof muts[0]; i++) {
    write_mutated(bad, src, len, muts[i].fn);
    mf_status st = load_expect_fail(&fx, bad, muts[i].what, muts[i].contains);
    MF_TEST(st == muts[i].want, "%s: %s (want %s)", muts[i].what, mf_status_name(st),
            mf_status_name(muts[i].want));
  }

  /* another dropout rate is not another layout: the checkpoint loads */
  write_mutated(bad, src, len, mut_dropout);
  {
    size_t nb = (size_t)fx.t.total * 8;
    double *p = malloc(nb), *m = malloc(nb), *v = malloc(nb);
    mf_status st = mf_ckpt_load(bad, &fx.t, p, m, v, NULL, NULL);
    MF_TEST(st == MF_OK, "a checkpoint with another p_drop loads: %s", mf_error_message());
    free(p);
    free(m);
    free(v);
  }

  /* a table of another depth */
  fixture f3;
  fixture_make(&f3, 3, 8);
  load_expect_fail(&f3, good, "a 2-block checkpoint into a 3-block table", "expected [3,");
  mf_params_free(&f3.t);

  /* the good file still loads (the tests wrote only copies) */
  double *p = mf_test_alloc(fx.t.total);
  MF_TEST(mf_ckpt_load(good, &fx.t, p, NULL, NULL, NULL, NULL) == MF_OK && same(p, fx.p, fx.t.total),
          "the original still loads");
  char nodir[160];
  path_in(nodir, sizeof nodir, "no/such/dir/x.safetensors");
  MF_TEST(mf_ckpt_save(nodir, &fx.t, fx.p, NULL, NULL, 1, 1) == MF_ERR_IO &&
              strstr(mf_error_message(), nodir),
          "save into a missing directory: %s", mf_error_message());
  unlink(bad);
  free(longer);
  free(src);
  mf_params_free(&fx.t);
}

/* ------------------------------------------------------------------ crash and faults */

static void crash_hook(const char *stage, const char *tmp, void *ud) {
  (void)tmp;
  (void)ud;
  if (!strcmp(stage, "before-rename")) _exit(42);
}

static void test_crash_and_faults(void) {
  fixture fx, f2;
  fixture_make(&fx, 2, 10);
  fixture_make(&f2, 2, 11);
  int64_t n = fx.t.total;
  char path[128];
  path_in(path, sizeof path, "run.safetensors");
  MF_TEST(mf_ckpt_save(path, &fx.t, fx.p, fx.m, fx.v, 100, 5) == MF_OK, "checkpoint at step 100");
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    mf_ckpt_set_hook(crash_hook, NULL);
    mf_ckpt_save(path, &f2.t, f2.p, f2.m, f2.v, 200, 5);
    _exit(0); /* not reached: the hook "crashes" */
  }
  int status = 0;
  waitpid(pid, &status, 0);
  MF_TEST(WIFEXITED(status) && WEXITSTATUS(status) == 42, "the writer died between write and rename");
  MF_TEST(count_files("run.safetensors.tmp.") == 1, "it left its complete temporary file");
  double *p = mf_test_alloc(n), *m = mf_test_alloc(n), *v = mf_test_alloc(n);
  uint64_t step = 0;
  MF_TEST(mf_ckpt_load(path, &fx.t, p, m, v, &step, NULL) == MF_OK && step == 100 &&
              same(p, fx.p, n) && same(m, fx.m, n) && same(v, fx.v, n),
          "the previous checkpoint (step 100) is intact: %s", mf_error_message());
  MF_TEST(mf_ckpt_save(path, &f2.t, f2.p, f2.m, f2.v, 300, 5) == MF_OK &&
              mf_ckpt_load(path, &fx.t, p, m, v, &step, NULL) == MF_OK && step == 300 &&
              same(p, f2.p, n),
          "the next save replaces it despite the stale temporary file");

  /* allocation failures: reported, nothing leaks, the file on disk stays valid */
  int saved_ok = 0, loaded_ok = 0, clean = 1;
  for (int k = 0; k < 8 && !(saved_ok && loaded_ok); k++) {
    mf_alloc_fail_after(k);
    mf_status s = mf_ckpt_save(path, &fx.t, fx.p, fx.m, fx.v, 400 + (uint64_t)k, 5);
    mf_alloc_fail_after(-1);
    clean &= s == MF_OK || s == MF_ERR_NOMEM;
    saved_ok |= s == MF_OK;
    mf_alloc_fail_after(k);
    s = mf_ckpt_load(path, &fx.t, p, m, v, &step, NULL);
    mf_alloc_fail_after(-1);
    clean &= s == MF_OK || s == MF_ERR_NOMEM;
    loaded_ok |= s == MF_OK;
  }
  MF_TEST(clean && saved_ok && loaded_ok && count_files("run.safetensors.tmp.") == 1,
          "allocation failures in save and load give MF_ERR_NOMEM and no stray files");
  MF_TEST(mf_ckpt_load(path, &fx.t, p, m, v, &step, NULL) == MF_OK && step >= 400 && same(p, fx.p, n),
          "after the failed attempts the file is a valid checkpoint (step %llu)",
          (unsigned long long)step);
  mf_params_free(&f2.t);
  mf_params_free(&fx.t);
}

static void remove_dir(void) {
  DIR *d = opendir(g_dir);
  struct dirent *e;
  char p[512];
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
    unlink(p);
  }
  if (d) closedir(d);
  rmdir(g_dir);
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--child-load")) return child_load(argv[2], argv[3]);
  mf_test_begin("test_checkpoint");
  snprintf(g_dir, sizeof g_dir, "/tmp/mf_ckpt_XXXXXX");
  if (!mkdtemp(g_dir)) {
    MF_TEST(0, "mkdtemp failed");
    return mf_test_end();
  }
  test_round_trip();
  test_safetensors_layout();
  test_bad_files();
  test_crash_and_faults();
  remove_dir();
  return mf_test_end();
}
