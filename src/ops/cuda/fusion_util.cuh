/* fusion_util.cuh — small device and host helpers private to the EvoFusion .cu files
 * (ln_linear, transition, trimul, dropout, attn_pair_bias, triatt): the workspace carver,
 * sigmoid, vector loads/stores, the SM count, the warp-per-row channel layout and row load, and the
 * pointer-type shorthands. Not a public header; C code never includes it. */
#ifndef MF_OPS_CUDA_FUSION_UTIL_CUH
#define MF_OPS_CUDA_FUSION_UTIL_CUH

#include <stddef.h>
#include <stdint.h>

#include "gemm_cuda.h"
#include "gpu.h"

typedef __nv_bfloat16 bf16;

/* Carves a device workspace into 256-byte-aligned slices; with base = NULL it only
 * counts (the *_workspace() size functions run the same carving code). */
typedef struct {
  char *base;
  size_t used;
} mf_carver;

static inline void *mf_carve(mf_carver *c, size_t bytes) {
  void *p = c->base ? c->base + c->used : NULL;
  c->used += mf_cuda_align(bytes ? bytes : 1);
  return p;
}

static __device__ __forceinline__ float mf_sigmoidf(float x) { return 1.0f / (1.0f + __expf(-x)); }
/* Sigmoid for hot loops: σ(x) = 1/(1 + 2^(−x·log2 e)) with the approximate ex2 and
 * reciprocal (flush to zero): four instructions and no range fix-ups (__expf and
 * __fdividef added a compare and two predicated multiplies: the trimul phase-3 kernel's
 * gate loop, README step 33); relative error a few ulp, exactly 0 and 1 in the tails. */
static __device__ __forceinline__ float mf_sigmoidf_fast(float x) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.4426950408889634f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return r;
}

/* σ(x) = (1 + tanh(x/2))/2: one MUFU operation and no branch (tanh.approx, relative error
 * about 2⁻¹¹: for values that are rounded to bf16). */
static __device__ __forceinline__ float mf_sigmoidf_tanh(float x) {
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(0.5f * x));
  return fmaf(0.5f, t, 0.5f);
}

/* Two floats as a bf16x2 word (lo in the low half, round to nearest), and back. */
static __device__ __forceinline__ uint32_t mf_pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *(const uint32_t *)&h;
}
static __device__ __forceinline__ float2 mf_unpack_bf16x2(uint32_t u) {
  return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}

/* VEC consecutive values as fp32: VEC = 8 moves 16 bytes of bf16 (32 of fp32) per access
 * and needs 16-byte alignment; VEC = 1 is the scalar fallback for widths not divisible by 8. */
template <int VEC>
static __device__ __forceinline__ void mf_ldv(float *f, const bf16 *p) {
  if constexpr (VEC == 8) {
    const uint4 u = *(const uint4 *)p;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int k = 0; k < 4; k++) {
      f[2 * k] = __low2float(h[k]);
      f[2 * k + 1] = __high2float(h[k]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++) f[k] = __bfloat162float(p[k]);
  }
}
template <int VEC>
static __device__ __forceinline__ void mf_stv(bf16 *p, const float *f) {
  if constexpr (VEC == 8) {
    uint4 u;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&u;
#pragma unroll
    for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    *(uint4 *)p = u;
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++) p[k] = __float2bfloat16_rn(f[k]);
  }
}
template <int VEC>
static __device__ __forceinline__ void mf_ldvf(float *f, const float *p) {
  if constexpr (VEC == 8) {
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++) f[k] = p[k];
  }
}

/* One warp per row of C channels, V values per lane (C <= 32·V). Channel of value i of a
 * lane: contiguous when CONTIG (C == 32·V, V even: each lane owns V consecutive channels,
 * loaded as bf16 pairs, so a warp moves whole 128-byte lines), else lane-strided
 * (c = i·32 + lane, any C). */
template <int V, bool CONTIG>
static __device__ __forceinline__ int mf_row_chan(int lane, int i) {
  return CONTIG ? lane * V + i : i * MF_WARP_SIZE + lane;
}

/* v[0..V) = row values (0 past C), as fp32. */
template <int V, bool CONTIG>
static __device__ __forceinline__ void mf_row_load_bf16(float *v, const bf16 *__restrict__ row,
                                                        int lane, int C) {
  if (CONTIG) {
#pragma unroll
    for (int i = 0; i < V; i += 2) {
      const __nv_bfloat162 p = *(const __nv_bfloat162 *)(row + lane * V + i);
      v[i] = __low2float(p);
      v[i + 1] = __high2float(p);
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; i++) {
      const int c = i * MF_WARP_SIZE + lane;
      v[i] = c < C ? mf_bf16_to_f32(row[c]) : 0.0f;
    }
  }
}

/* dst[i] += Σ_b part[b·n + i], i < n, summed over b = 0, 1, … in order: the fixed-order
 * reduce of per-CTA weight-gradient partials (a template only so that translation units
 * that do not use it instantiate nothing). */
template <typename F = float>
static __global__ void mf_sum_parts_kernel(F *__restrict__ dst, const F *__restrict__ part, int nparts, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  F s = 0;
  for (int b = 0; b < nparts; b++) s += part[(int64_t)b * n + i];
  dst[i] += s;
}
template <typename F = float>
static inline void mf_sum_parts_cuda(F *dst, const F *part, int nparts, int n, cudaStream_t stream) {
  mf_sum_parts_kernel<F><<<(n + 255) / 256, 256, 0, stream>>>(dst, part, nparts, n);
  MF_CHECK_LAUNCH();
}

/* Whether the current device has compute capability 9.x (sm_90a kernels); 0 where no
 * device answers (the error is cleared). */
static inline int mf_dev_sm90(void) {
  static int cc = -1;
  if (cc < 0) {
    int dev = 0, major = 0;
    cc = cudaGetDevice(&dev) == cudaSuccess &&
                 cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess
             ? major
             : 0;
    (void)cudaGetLastError();
  }
  return cc == 9;
}

/* The SM count, or 132 where no device answers: workspace sizes of per-CTA partials are
 * then still an upper bound on an H100/H200. */
static inline int mf_sm_count_or132(void) {
  static int n = 0;
  if (!n) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        n < 1)
      n = 132;
    (void)cudaGetLastError();
  }
  return n;
}

/* The current device's SM count (read once per translation unit; at least 1). */
static inline int mf_sm_count(void) {
  static int n = 0;
  if (!n) {
    int dev = 0;
    MF_CHECK_CUDA(cudaGetDevice(&dev));
    MF_CHECK_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    if (n < 1) n = 1;
  }
  return n;
}

/* Grid for a grid-stride elementwise kernel over n items (at most 16 blocks per SM). */
static inline unsigned mf_ew_blocks(int64_t n) {
  int64_t b = (n + 255) / 256;
  if (b > 132 * 16) b = 132 * 16;
  return (unsigned)(b < 1 ? 1 : b);
}

#endif
