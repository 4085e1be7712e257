/* tensor.h — a small tensor descriptor: pointer, dtype, device and up to 5 dims,
 * row-major and contiguous. It describes memory; it never owns it. Also the bf16
 * conversions (round to nearest even) used on the host. */
#ifndef MF_TENSOR_H
#define MF_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MF_F32 = 0, MF_BF16, MF_F64, MF_I32, MF_U8 } mf_dtype;

#define MF_MAX_DIMS 5

typedef struct {
  void *data;
  mf_dtype dtype;
  mf_device device;
  int ndim;
  int64_t shape[MF_MAX_DIMS];
} mf_tensor;

size_t mf_dtype_size(mf_dtype dt);
const char *mf_dtype_name(mf_dtype dt);

/* mf_tensor_make(data, MF_F32, MF_HOST, 3, (int64_t[]){N, N, Cz}) */
mf_tensor mf_tensor_make(void *data, mf_dtype dt, mf_device dev, int ndim, const int64_t *shape);
int64_t mf_tensor_numel(const mf_tensor *t);
size_t mf_tensor_bytes(const mf_tensor *t);
/* "(4, 7, 128) f32 host" into buf; returns buf. */
const char *mf_tensor_describe(const mf_tensor *t, char *buf, size_t n);
/* Checks dtype, rank and each dim (-1 = any). Returns MF_OK or MF_ERR_SHAPE with a
 * message naming `name`, the expected and the actual shape. */
mf_status mf_tensor_check(const mf_tensor *t, const char *name, mf_dtype dt, int ndim,
                          const int64_t *dims);
/* Same, but a mismatch is fatal (op entry). */
#define MF_TENSOR_EXPECT(t, name, dt, ndim, ...)                                   \
  do {                                                                             \
    if (mf_tensor_check((t), (name), (dt), (ndim), (const int64_t[]){__VA_ARGS__}) != MF_OK) \
      MF_FATAL("%s", mf_error_message());                                          \
  } while (0)

typedef uint16_t mf_bf16;
mf_bf16 mf_bf16_from_f32(float x);
float mf_f32_from_bf16(mf_bf16 x);

#ifdef __cplusplus
}
#endif

#endif
