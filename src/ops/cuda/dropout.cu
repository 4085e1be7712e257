/* dropout.cu — EvoFusion row/column dropout on the GPU: the Philox mask (bit-identical
 * to the CPU's mf_dropout_mask), the fused residual add z += x ⊙ mask and its backward.
 * See dropout_cuda.h. Not the CPU reference (src/ops/cpu/dropout.c). */
#include "dropout_cuda.h"

#include "core/philox.h"
#include "fusion_util.cuh"

/* mask (R, C): one Philox block gives four consecutive elements. */
static __global__ void dropout_mask_kernel(float *__restrict__ mask, int64_t n, double p, float keep,
                                    uint64_t seed, uint64_t stream) {
  for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b * 4 < n;
       b += (int64_t)gridDim.x * blockDim.x) {
    uint32_t w[4];
    mf_philox_block(seed, stream, (uint64_t)b * 4, w);
#pragma unroll
    for (int l = 0; l < 4; l++) {
      int64_t k = b * 4 + l;
      if (k < n) mask[k] = (double)mf_philox_u01f(w[l]) >= p ? keep : 0.0f;
    }
  }
}

/* z (A, B, C) += x ⊙ mask (accumulate = 1), or z = x ⊙ mask (accumulate = 0);
 * 8 channels per thread when C % 8 == 0 (16-byte loads), else one. */
static __global__ void resdrop_kernel(bf16 *__restrict__ z, const bf16 *__restrict__ x,
                               const float *__restrict__ mask, int64_t A, int64_t B, int C,
                               int axis, int accumulate) {
  const int vec = (C % 8 == 0) ? 8 : 1;
  const int64_t n = A * B * C / vec;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t e = i * vec, row = e / C;
    const int c0 = (int)(e - row * C);
    const int64_t a = row / B, b = row - a * B;
    const float *mk = mask + (axis == MF_DROPOUT_ROWWISE ? b : a) * C + c0;
    if (vec == 8) {
      uint4 xv = *(const uint4 *)(x + e), zv = accumulate ? *(const uint4 *)(z + e) : make_uint4(0, 0, 0, 0);
      const bf16 *xs = (const bf16 *)&xv;
      bf16 *zs = (bf16 *)&zv;
#pragma unroll
      for (int j = 0; j < 8; j++)
        zs[j] = mf_f32_to_bf16((accumulate ? mf_bf16_to_f32(zs[j]) : 0.0f) +
                               mf_bf16_to_f32(xs[j]) * mk[j]);
      *(uint4 *)(z + e) = zv;
    } else {
      float v = mf_bf16_to_f32(x[e]) * mk[0];
      z[e] = mf_f32_to_bf16(accumulate ? mf_bf16_to_f32(z[e]) + v : v);
    }
  }
}

static unsigned do_blocks(int64_t n) {
  int64_t b = (n + 255) / 256;
  if (b > 132 * 16) b = 132 * 16;
  return (unsigned)(b < 1 ? 1 : b);
}

static void launch_mask(float *mask, int64_t n, double p, uint64_t seed, uint64_t stream,
                        cudaStream_t cs) {
  const float keep = (float)(1.0 / (1.0 - p));
  dropout_mask_kernel<<<do_blocks((n + 3) / 4), 256, 0, cs>>>(mask, n, p, keep, seed, stream);
  MF_CHECK_LAUNCH();
}

static void launch_resdrop(bf16 *z, const bf16 *x, const float *mask, int64_t A, int64_t B,
                           int C, mf_dropout_axis axis, int accumulate, cudaStream_t cs) {
  const int vec = (C % 8 == 0) ? 8 : 1;
  resdrop_kernel<<<do_blocks(A * B * C / vec), 256, 0, cs>>>(z, x, mask, A, B, C, (int)axis,
                                                              accumulate);
  MF_CHECK_LAUNCH();
}

static void check_dims(int64_t A, int64_t B, int C, mf_dropout_axis axis) {
  MF_ASSERT(A >= 0 && B >= 0 && C > 0, "dropout_cuda dims A=%lld B=%lld C=%d", (long long)A,
            (long long)B, C);
  MF_ASSERT(axis == MF_DROPOUT_ROWWISE || axis == MF_DROPOUT_COLWISE, "dropout_cuda axis %d",
            (int)axis);
}

extern "C" void mf_dropout_mask_cuda(float *mask, int64_t R, int C, double p, uint64_t seed,
                                     uint64_t stream, cudaStream_t cs) {
  MF_ASSERT(R >= 0 && C > 0, "dropout mask dims R=%lld C=%d", (long long)R, C);
  MF_ASSERT(p >= 0 && p < 1, "dropout rate p=%g must be in [0, 1)", p);
  if (R == 0) return;
  launch_mask(mask, R * C, p, seed, stream, cs);
}

extern "C" void mf_dropout_residual_forward_cuda(bf16 *z, const bf16 *x, const float *mask,
                                                 int64_t A, int64_t B, int C,
                                                 mf_dropout_axis axis, cudaStream_t cs) {
  check_dims(A, B, C, axis);
  if (A * B == 0) return;
  launch_resdrop(z, x, mask, A, B, C, axis, 1, cs);
}

extern "C" void mf_dropout_backward_cuda(bf16 *dx, const bf16 *dout, const float *mask, int64_t A,
                                         int64_t B, int C, mf_dropout_axis axis, cudaStream_t cs) {
  check_dims(A, B, C, axis);
  if (A * B == 0) return;
  launch_resdrop(dx, dout, mask, A, B, C, axis, 0, cs);
}
