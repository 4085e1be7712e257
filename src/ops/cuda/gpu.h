/* gpu.h — the one header through which device code reaches vendor types and
 * intrinsics (bf16, warp shuffles, warp size, atomics), so that a HIP build can later
 * swap this file alone. Device code must not hard-code a warp of 32 where the
 * algorithm does not need it: use MF_WARP_SIZE. */
#ifndef MF_GPU_H
#define MF_GPU_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "../../core/check.h"

#define MF_WARP_SIZE 32
typedef __nv_bfloat16 mf_bf16_t;

__device__ __forceinline__ float mf_bf16_to_f32(mf_bf16_t x) { return __bfloat162float(x); }
__device__ __forceinline__ mf_bf16_t mf_f32_to_bf16(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float mf_warp_sum(float v) {
  for (int o = MF_WARP_SIZE / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float mf_warp_max(float v) {
  for (int o = MF_WARP_SIZE / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

static inline unsigned mf_cdiv(long long a, long long b) { return (unsigned)((a + b - 1) / b); }

#endif
