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

/* zs[j] = bf16(fma(xs[j], mk[j], accumulate ? zs[j] : 0)) for 8 channels: one fp32 rounding,
 * then bf16. The fma is explicit: it is what the compiler made of the original
 * `(accumulate ? z : 0) + x·m` (sm_90a SASS, CUDA 13.1), so both kernels below give those
 * bits whatever the code around them. */
static __device__ __forceinline__ uint4 resdrop8(uint4 xv, uint4 zv, const float *mk,
                                                 int accumulate) {
  const bf16 *xs = (const bf16 *)&xv;
  bf16 *zs = (bf16 *)&zv;
#pragma unroll
  for (int j = 0; j < 8; j++)
    zs[j] = mf_f32_to_bf16(
        __fmaf_rn(mf_bf16_to_f32(xs[j]), mk[j], accumulate ? mf_bf16_to_f32(zs[j]) : 0.0f));
  return zv;
}

/* z (A, B, C) += x ⊙ mask (accumulate = 1), or z = x ⊙ mask (accumulate = 0);
 * 8 channels per thread when C % 8 == 0 (16-byte loads), else one. (Variant 0; the
 * default for C % 8 == 0 is resdrop_vec_kernel below.) */
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
      const uint4 xv = *(const uint4 *)(x + e),
                  zv = accumulate ? *(const uint4 *)(z + e) : make_uint4(0, 0, 0, 0);
      *(uint4 *)(z + e) = resdrop8(xv, zv, mk, accumulate);
    } else {
      const float v = __fmul_rn(mf_bf16_to_f32(x[e]), mk[0]); /* unfused, as before */
      z[e] = mf_f32_to_bf16(accumulate ? __fadd_rn(mf_bf16_to_f32(z[e]), v) : v);
    }
  }
}

/* The same for C % 8 == 0 without per-element index arithmetic or mask re-reads. The rows
 * r = o·so + i·si sharing mask row o (ROWWISE: o = b, i = a, so = 1, si = B; COLWISE:
 * o = a, i = b, so = B, si = 1) are walked by "slots" (o, k), k the 8-channel group: thread
 * t holds slot t % slots with its 8 mask values in registers and takes the i of piece
 * t / slots (per consecutive i), RD_U rows' loads (128 bytes) issued before any store. Neighbouring
 * threads are neighbouring channel groups, then neighbouring o (ROWWISE: neighbouring rows;
 * COLWISE: rows B apart, so only for C >= 64). The launcher sizes pieces so the grid is one
 * wave of resident blocks. Measured (H200, 2026-11-30, bench/evofusion, rows of C = 128,
 * against resdrop_kernel in the same run; `fwd` adds into z, `bwd` assigns): M = 768² fwd
 * 0.137 ms (78 % of the copy bandwidth; resdrop_kernel 0.125, 85 %), bwd 0.088 ms (81 %;
 * 0.106, 67 %); 384²: fwd 0.036 (0.040), bwd 0.031 (0.038). So variant 1 takes this kernel
 * for the backward (assignment) and for forwards whose x is under RD_FWD_VEC_MAX bytes, and
 * resdrop_kernel for larger forwards (again 09:05 UTC: 768² fwd 0.124 against 0.135 ms). */
#define RD_FWD_VEC_MAX (64ll << 20)
template <int ACC>
static __global__ void __launch_bounds__(256, 3)
    resdrop_vec_kernel(bf16 *__restrict__ z, const bf16 *__restrict__ x,
                       const float *__restrict__ mask, int64_t I, int64_t so, int64_t si, int C,
                       int64_t slots, int64_t per) {
  constexpr int RD_U = ACC ? 4 : 8; /* rows per step: 128 bytes of loads per thread */
  constexpr int accumulate = ACC;
  const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t slot = t % slots, piece = t / slots;
  const int64_t i0 = piece * per, i1 = i0 + per < I ? i0 + per : I;
  if (i0 >= I) return;
  const int C8 = C / 8;
  const int64_t o = slot / C8;
  const int c0 = (int)(slot - o * C8) * 8;
  float mk[8];
  {
    const float4 m0 = *(const float4 *)(mask + o * C + c0), m1 = *(const float4 *)(mask + o * C + c0 + 4);
    mk[0] = m0.x; mk[1] = m0.y; mk[2] = m0.z; mk[3] = m0.w;
    mk[4] = m1.x; mk[5] = m1.y; mk[6] = m1.z; mk[7] = m1.w;
  }
  const int64_t step = si * C; /* elements between rows i and i + 1 */
  const int64_t e0 = (o * so + i0 * si) * C + c0;
  for (int64_t i = i0; i < i1; i += RD_U) {
    const int64_t e = e0 + (i - i0) * step;
    uint4 xv[RD_U], zv[RD_U];
#pragma unroll
    for (int u = 0; u < RD_U; u++) {
      if (i + u < i1) {
        xv[u] = __ldcs((const uint4 *)(x + e + u * step));
        zv[u] = accumulate ? __ldcs((const uint4 *)(z + e + u * step)) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < RD_U; u++)
      if (i + u < i1) *(uint4 *)(z + e + u * step) = resdrop8(xv[u], zv[u], mk, accumulate);
  }
}

static int g_rd_variant = 1;

extern "C" int mf_dropout_cuda_set_variant(int variant) {
  const int old = g_rd_variant;
  if (variant >= 0) g_rd_variant = variant;
  return old;
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
  const int rowwise = axis == MF_DROPOUT_ROWWISE;
  const int big_fwd = accumulate && A * B * C * 2 > RD_FWD_VEC_MAX;
  if (g_rd_variant == 1 && !big_fwd && C % 8 == 0 && (rowwise || C >= 64) &&
      (((uintptr_t)z | (uintptr_t)x | (uintptr_t)mask) & 15) == 0) {
    static int occs[2] = {0, 0}; /* resident blocks per SM, per kernel */
    int &occ = occs[accumulate ? 1 : 0];
    if (!occ) {
      MF_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &occ, accumulate ? resdrop_vec_kernel<1> : resdrop_vec_kernel<0>, 256, 0));
      if (occ < 1) occ = 1;
    }
    const int64_t O = rowwise ? B : A, I = rowwise ? A : B;
    const int64_t slots = O * (C / 8), wave = (int64_t)mf_sm_count() * occ * 256;
    int64_t pieces = wave / slots;
    if (pieces < 1) pieces = 1;
    if (pieces > I) pieces = I;
    const int64_t per = (I + pieces - 1) / pieces;
    pieces = (I + per - 1) / per;
    const int64_t threads = slots * pieces;
    const unsigned blocks = (unsigned)((threads + 255) / 256);
    if (accumulate)
      resdrop_vec_kernel<1><<<blocks, 256, 0, cs>>>(z, x, mask, I, rowwise ? 1 : B,
                                                    rowwise ? B : 1, C, slots, per);
    else
      resdrop_vec_kernel<0><<<blocks, 256, 0, cs>>>(z, x, mask, I, rowwise ? 1 : B,
                                                    rowwise ? B : 1, C, slots, per);
    MF_CHECK_LAUNCH();
    return;
  }
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
