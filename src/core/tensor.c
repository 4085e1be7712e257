/* tensor.c — tensor descriptor helpers and host bf16 conversion. See tensor.h. */
#include "tensor.h"

#include <stdio.h>
#include <string.h>

size_t mf_dtype_size(mf_dtype dt) {
  switch (dt) {
    case MF_F32: return 4;
    case MF_BF16: return 2;
    case MF_F64: return 8;
    case MF_I32: return 4;
    case MF_U8: return 1;
  }
  MF_FATAL("unknown dtype %d", (int)dt);
}

const char *mf_dtype_name(mf_dtype dt) {
  switch (dt) {
    case MF_F32: return "f32";
    case MF_BF16: return "bf16";
    case MF_F64: return "f64";
    case MF_I32: return "i32";
    case MF_U8: return "u8";
  }
  return "?";
}

mf_tensor mf_tensor_make(void *data, mf_dtype dt, mf_device dev, int ndim, const int64_t *shape) {
  MF_ASSERT(ndim >= 0 && ndim <= MF_MAX_DIMS, "ndim %d", ndim);
  mf_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dt;
  t.device = dev;
  t.ndim = ndim;
  for (int i = 0; i < ndim; i++) {
    MF_ASSERT(shape[i] >= 0, "negative dim %lld", (long long)shape[i]);
    t.shape[i] = shape[i];
  }
  return t;
}

int64_t mf_tensor_numel(const mf_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

size_t mf_tensor_bytes(const mf_tensor *t) {
  return (size_t)mf_tensor_numel(t) * mf_dtype_size(t->dtype);
}

const char *mf_tensor_describe(const mf_tensor *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "(");
  for (int i = 0; i < t->ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
  if (k < n)
    snprintf(buf + k, n - k, ") %s %s", mf_dtype_name(t->dtype),
             t->device == MF_HOST ? "host" : "device");
  return buf;
}

mf_status mf_tensor_check(const mf_tensor *t, const char *name, mf_dtype dt, int ndim,
                          const int64_t *dims) {
  int ok = t->dtype == dt && t->ndim == ndim;
  for (int i = 0; ok && i < ndim; i++)
    if (dims[i] >= 0 && dims[i] != t->shape[i]) ok = 0;
  if (ok) return MF_OK;
  char want[160], got[160];
  size_t k = (size_t)snprintf(want, sizeof want, "(");
  for (int i = 0; i < ndim && k < sizeof want; i++) {
    if (dims[i] >= 0)
      k += (size_t)snprintf(want + k, sizeof want - k, "%s%lld", i ? ", " : "", (long long)dims[i]);
    else
      k += (size_t)snprintf(want + k, sizeof want - k, "%s*", i ? ", " : "");
  }
  if (k < sizeof want) snprintf(want + k, sizeof want - k, ") %s", mf_dtype_name(dt));
  return mf_error_set(MF_ERR_SHAPE, "tensor '%s': expected %s, got %s", name, want,
                      mf_tensor_describe(t, got, sizeof got));
}

mf_bf16 mf_bf16_from_f32(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) /* NaN: keep it quiet NaN */
    return (mf_bf16)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (mf_bf16)(u >> 16);
}

float mf_f32_from_bf16(mf_bf16 x) {
  uint32_t u = (uint32_t)x << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
